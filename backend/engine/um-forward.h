/* um-forward.h — the LLaDA forward pass, written once against the compute
 * backend vtable. Returns logits only for the rows asked for. */
#pragma once

#include <gio/gio.h>

#include "um-backend.h"
#include "um-model.h"

G_BEGIN_DECLS

typedef struct _UmForward UmForward;

typedef struct {
  guint64 n_passes;         /* calls to um_forward_logits */
  double  seconds;          /* wall time inside um_forward_logits */
  double  seconds_matmul;   /* of which in matrix products (weights × activations) */
  double  flops;            /* counted: 2·m·n·k per product, 4·q·L·hd per head for attention */
  double  flops_matmul;     /* of which in matrix products */
  guint64 logit_rows;       /* LM-head rows computed */
} UmForwardStats;

UmForward *um_forward_new (UmModel   *model,
                           UmBackend *backend,
                           GError   **error);

/* Progress of making the weights available to the backend (uploading them
 * to a GPU takes seconds): @fraction of the weight bytes done. */
typedef void (*UmForwardProgress) (double fraction, gpointer user_data);

/* um_forward_new() with progress, checking @cancellable between weights. */
UmForward *um_forward_new_full (UmModel           *model,
                                UmBackend         *backend,
                                UmForwardProgress  progress_cb,
                                gpointer           user_data,
                                GCancellable      *cancellable,
                                GError           **error);
void       um_forward_free (UmForward *fw);

/* @ids: @n_seq sequences of @seq_len tokens each (positions 0..seq_len-1 in
 * each). @rows: indices into the n_seq·seq_len rows, ascending, or NULL for
 * every row. @logits: n_rows × vocab floats on the host.
 * Checks @cancellable between layers. */
gboolean   um_forward_logits (UmForward     *fw,
                              const gint32  *ids,
                              int            n_seq,
                              int            seq_len,
                              const gint32  *rows,
                              int            n_rows,
                              float         *logits,
                              GCancellable  *cancellable,
                              GError       **error);

const UmForwardStats *um_forward_get_stats (UmForward *fw);
void                  um_forward_reset_stats (UmForward *fw);
UmModel              *um_forward_get_model (UmForward *fw);
UmBackend            *um_forward_get_backend (UmForward *fw);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmForward, um_forward_free)

G_END_DECLS

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
  double  seconds_stream_wait; /* layer streaming: waiting for a slot's weights */
  guint64 layers_streamed;  /* layer copies into slots */
} UmForwardStats;

UmForward *um_forward_new (UmModel   *model,
                           UmBackend *backend,
                           GError   **error);

typedef struct _UmLayerStore UmLayerStore;

/* How the weights are held (the memory modes of memory/um-plan.h). */
typedef struct {
  /* The token table stays in host memory: the canvas's rows are decoded
   * there and uploaded. Ignored with tied embeddings (the LM head needs the
   * table on the device anyway). */
  gboolean      embed_on_host;
  /* 0: every layer resident. k ≥ 2: only k layer slots on the device; the
   * layers' matrices come from @store, the next one copied while the
   * current one computes. */
  guint         stream_slots;
  UmLayerStore *store;          /* borrowed; outlives the forward */
  /* > 0: the MLP and the LM head run on at most this many rows at a time,
   * bounding their work buffers whatever the canvas. */
  int           row_chunk;
} UmForwardOptions;

void       um_forward_options_init (UmForwardOptions *options);

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
/* um_forward_new_full() holding the weights as @options says. */
UmForward *um_forward_new_with (UmModel                *model,
                                UmBackend              *backend,
                                const UmForwardOptions *options,
                                UmForwardProgress       progress_cb,
                                gpointer                user_data,
                                GCancellable           *cancellable,
                                GError                **error);
void       um_forward_free (UmForward *fw);

/* Bytes of the one device buffer (arena) a pass over @n_seq × @seq_len
 * tokens returning @n_rows rows of logits (@n_rows < n_seq·seq_len: a
 * subset) needs, with @row_chunk as in UmForwardOptions. The memory plan
 * uses this, so prediction and allocation are the same arithmetic. */
guint64    um_forward_arena_bytes (const UmModel *model, int n_seq, int seq_len, int n_rows, int row_chunk);
/* Host bytes the forward keeps besides the arena (the decoded embedding
 * rows and one stored row, when the table is on the host). */
guint64    um_forward_host_bytes (const UmModel *model, const UmForwardOptions *options, int n_seq,
                                  int seq_len);

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

/* um_forward_logits () with a block KV cache (Fast-dLLM), for a canvas
 * whose block [block_start, block_end) (positions within each sequence) is
 * being decoded. @refresh: run the whole canvas and keep every layer's K
 * and V (the first step of a block). Otherwise (@dual FALSE, prefix cache)
 * compute positions from block_start to the end, attending to the kept
 * prefix; (@dual TRUE) compute the block's positions only, attending to the
 * kept prefix and suffix. @rows must lie inside the block. */
gboolean   um_forward_logits_cached (UmForward     *fw,
                                     const gint32  *ids,
                                     int            n_seq,
                                     int            seq_len,
                                     int            block_start,
                                     int            block_end,
                                     gboolean       refresh,
                                     gboolean       dual,
                                     const gint32  *rows,
                                     int            n_rows,
                                     float         *logits,
                                     GCancellable  *cancellable,
                                     GError       **error);

/* um_forward_logits () and the choice of each row's token and confidence
 * (engine/um-choose.h): on the backend when it has the choose op, so only
 * an id and a confidence per row come back, else on the host. With
 * rule->cfg_scale > 0 the @n_rows rows are the conditional ones then as
 * many unconditional ones, and n_rows / 2 are chosen; the backend combines
 * them when both halves fit one LM-head chunk (UmForwardOptions.row_chunk),
 * the host otherwise. @positions, @out_ids, @out_conf: one per choice. */
gboolean   um_forward_choose (UmForward          *fw,
                              const gint32       *ids,
                              int                 n_seq,
                              int                 seq_len,
                              const gint32       *rows,
                              int                 n_rows,
                              const UmChooseRule *rule,
                              const gint32       *positions,
                              gint32             *out_ids,
                              double             *out_conf,
                              GCancellable       *cancellable,
                              GError            **error);

/* um_forward_choose () with the block KV cache of um_forward_logits_cached (). */
gboolean   um_forward_choose_cached (UmForward          *fw,
                                     const gint32       *ids,
                                     int                 n_seq,
                                     int                 seq_len,
                                     int                 block_start,
                                     int                 block_end,
                                     gboolean            refresh,
                                     gboolean            dual,
                                     const gint32       *rows,
                                     int                 n_rows,
                                     const UmChooseRule *rule,
                                     const gint32       *positions,
                                     gint32             *out_ids,
                                     double             *out_conf,
                                     GCancellable       *cancellable,
                                     GError            **error);

const UmForwardStats *um_forward_get_stats (UmForward *fw);
void                  um_forward_reset_stats (UmForward *fw);
UmModel              *um_forward_get_model (UmForward *fw);
UmBackend            *um_forward_get_backend (UmForward *fw);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmForward, um_forward_free)

G_END_DECLS

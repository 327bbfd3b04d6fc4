/* um-forward.h — the LLaDA forward pass, written once against the compute
 * backend vtable. Returns logits only for the rows asked for. */
#pragma once

#include <gio/gio.h>

#include "um-backend.h"
#include "um-forward-sizing.h"
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
  /* Routed experts off the device (UmExpertPlacement): */
  guint64 experts_fetched;  /* experts put into slots (FETCH; HOST from a compressed copy) */
  guint64 expert_bytes_fetched;
  double  seconds_expert_wait;  /* waiting for an expert's slot */
  double  seconds_experts_host; /* HOST: the experts' products on the host, transfers included */
} UmForwardStats;

UmForward *um_forward_new (UmModel   *model,
                           UmBackend *backend,
                           GError   **error);

/* UmForwardOptions (how the weights are held), UmExpertPlacement,
 * UmForwardShape and um_forward_bytes (): memory/um-forward-sizing.h,
 * below both the forward and the memory plan. */

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

/* Allocates the work buffers, and the KV cache if @shape has it, for
 * @shape now: a budget too small for them fails at load rather than at the
 * first step, and from load on the device holds what the plan predicted.
 * Shorter canvases reuse them; longer ones grow them. */
gboolean   um_forward_reserve (UmForward            *fw,
                               const UmForwardShape *shape,
                               GError              **error);

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
 * (compute/um-choose.h): on the backend when it has the choose op, so only
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

/* Block-causal attention for models that have it (cfg.block_causal, LLaDA
 * 2.x): blocks of @block_length aligned to position 0, a query sees the
 * keys of its own block and earlier ones. 0 (the default): every key. The
 * generation's block length; set before its passes. */
void       um_forward_set_attention_block (UmForward *fw, int block_length);

/* A step of a block-causal generation (one sequence): the first @window
 * positions of @ids (a canvas of @canvas tokens, window ≤ canvas) under the
 * block-causal mask. Positions [@start, window) run through the layers and
 * their keys and values are kept; those of [0, start) are the ones kept by
 * earlier calls on this canvas, which the caller guarantees unchanged since
 * (under the block-causal mask they cannot change once their blocks are
 * final). @start 0, or a canvas this forward has kept nothing for, computes
 * the whole window. @rows (ascending, inside [start, window)) are chosen as
 * um_forward_choose () does, without guidance. */
gboolean   um_forward_choose_window (UmForward          *fw,
                                     const gint32       *ids,
                                     int                 canvas,
                                     int                 window,
                                     int                 start,
                                     const gint32       *rows,
                                     int                 n_rows,
                                     const UmChooseRule *rule,
                                     const gint32       *positions,
                                     gint32             *out_ids,
                                     double             *out_conf,
                                     GCancellable       *cancellable,
                                     GError            **error);

/* The routed experts' host copy (FETCH, HOST with zstd), or NULL. */
UmLayerStore         *um_forward_get_expert_store (UmForward *fw);
/* The host CPU backend computing HOST's experts, or NULL. */
UmBackend            *um_forward_get_host_backend (UmForward *fw);

const UmForwardStats *um_forward_get_stats (UmForward *fw);
void                  um_forward_reset_stats (UmForward *fw);
UmModel              *um_forward_get_model (UmForward *fw);
UmBackend            *um_forward_get_backend (UmForward *fw);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmForward, um_forward_free)

G_END_DECLS

/* um-forward-private.h — what the forward's files share (um-forward.c:
 * loading, memory, the passes' bounds; um-forward-layers.c: the work of a
 * pass): the forward's state and its work buffers. Not for other users. */
#pragma once

#include "um-choose.h"
#include "um-forward.h"
#include "um-forward-experts.h"
#include "um-moe.h"
#include "um-prefetch.h"

G_BEGIN_DECLS

/* The work buffers of a pass, carved from one device arena: UmArenaSlot
 * and um_forward_arena_layout () (um-forward-sizing.h). */

typedef struct {
  UmDevWeight *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w_gate, *w_up, *w_down;
  /* NULL where the family or layer has none */
  UmDevWeight *bq, *bk, *bv, *q_norm, *k_norm, *router, *router_bias;
  UmDevWeight *sh_gate, *sh_up, *sh_down;   /* the shared expert (LLaDA 2.x) */
  /* MoE layers: expert e's gate, up and down at [3e], [3e+1], [3e+2]
   * (slices of the stacked w_gate, w_up, w_down, which are then NULL). */
  UmDevWeight **experts;
} DevLayer;

/* A layer-streaming slot: device memory for one layer's matrices and views
 * of them, rebuilt only when a layer of other shapes (pruning) arrives. */
typedef struct {
  UmBuf       *buf;
  UmDevWeight *mats[UM_LAYER_N_MATS];
  UmDevWeight **experts;      /* views of the experts' slices (MoE layers), 3 per expert */
  guint        n_experts;
  int          shaped_for;    /* layer whose shapes the views have, -1 none */
  int          requested;     /* layer last asked of the prefetcher, -1 none */
} StreamSlot;

struct _UmForward {
  /* while loading */
  UmForwardProgress progress_cb;
  gpointer        progress_data;
  GCancellable   *cancellable;
  uint64_t        loaded_bytes, total_bytes;

  UmModel        *model;
  UmBackend      *be;
  UmForwardOptions opts;
  UmDevWeight    *tok_embd, *out_norm, *output;
  DevLayer       *layers;
  GPtrArray      *dev_weights;
  UmBuf          *arena;
  size_t          arena_bytes;
  float          *host_rows;      /* embedding rows decoded on the host */
  float          *host_logits;    /* um_forward_choose without the backend's choose op */
  size_t          host_logits_floats;
  size_t          host_rows_floats;
  StreamSlot     *stream;         /* opts.stream_slots of them */
  UmPrefetcher   *prefetcher;
  guint64         stream_seq;     /* layers streamed so far: picks the slot */
  /* Block KV cache: every layer's K and V of the whole canvas, kept by a
   * refreshing pass (um_forward_logits_cached). */
  UmBuf          *kv;
  size_t          kv_bytes;
  UmBuf         **kv_views;       /* 2 per layer: K, V */
  int             kv_rows;        /* canvas rows the cache holds (n_seq·seq_len) */
  UmForwardStats  stats;
  double          pass_flops0;   /* stats.flops at the start of the pass */
  UmMoeRouting    routing;        /* MoE: the current chunk's routing */
  UmMoeRouting   *routes;         /* experts off the device: each chunk's routing of a layer */
  int             n_routes;
  float          *host_router;    /* MoE: the router's logits of a chunk, downloaded */
  size_t          host_router_floats;
  float          *host_bias;      /* MoE: a layer's selection bias, downloaded once per pass */
  /* Block-causal attention (cfg.block_causal): the generation's block
   * length; 0 bidirectional. */
  int             attn_block;
  /* The routed experts when they are off the device (HOST, FETCH). */
  UmForwardExperts *experts;
};

/* Where the LM head's rows go: downloaded into @logits, or chosen on the
 * backend (its choose op) with only ids and confidences downloaded. */
typedef struct {
  float              *logits;
  const UmChooseRule *rule;
  const gint32       *positions;
  gint32             *ids;
  double             *conf;
} HeadOut;

gboolean      um_forward_streaming (const UmForward *fw);
void          um_forward_free_views (UmForward *fw, UmBuf **views, int n);
/* Host room for @floats router logits. */
gboolean      um_forward_host_router (UmForward *fw, size_t floats, GError **error);
/* What a pass does with the block KV cache. */
typedef enum {
  UM_FORWARD_KV_NONE,    /* K and V in the arena, gone after the pass */
  UM_FORWARD_KV_KEEP,    /* every computed row's K and V kept in the cache */
  /* Only the rows [start, end) of each sequence are computed; their K and V
   * replace the kept ones and attention reads the whole kept canvas. */
  UM_FORWARD_KV_REUSE,
} UmForwardKv;

/* One pass, whichever entry point asked for it. */
typedef struct {
  const gint32 *ids;          /* n_seq sequences of seq_len tokens */
  int           n_seq, seq_len;
  int           start, end;   /* positions computed in each sequence (UM_FORWARD_KV_REUSE); else 0, seq_len */
  UmForwardKv   kv;
  /* The rows wanted, ascending (NULL: every computed row): indices into
   * the n_seq·seq_len rows of the canvas. */
  const gint32 *rows;
  int           n_rows;
} UmForwardPass;

/* The work of @p (um-forward-layers.c) in the work buffers @b: the layers,
 * written once, then the head's rows to @dst. */
gboolean      um_forward_pass_layers (UmForward *fw, UmBuf **b, const UmForwardPass *p, const HeadOut *dst,
                                      GCancellable *cancellable, GError **error);

G_END_DECLS

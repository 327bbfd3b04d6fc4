/* um-forward-sizing.h — what a forward holds, as arithmetic on the model
 * and the options: the weights it loads onto the device, its work arena,
 * its KV cache, its host buffers and the buffers of experts off the device.
 *
 * It sits below both of its users: the forward (engine/um-forward.h)
 * allocates with these functions and the memory plan (um-plan.h) predicts
 * with them, so the two cannot drift, and the plan needs nothing of the
 * engine. Only model- and options-based arithmetic lives here; what needs
 * a forward's state stays in the engine. */
#pragma once

#include <glib.h>

#include "um-layer-store.h"
#include "um-model.h"

G_BEGIN_DECLS

/* Where a mixture-of-experts model's routed experts live (attention, norms,
 * router, selection bias and shared experts stay on the device anyway):
 * they are most of its bytes and a small share of its work. */
typedef enum {
  /* Plans: resident when the model fits the device, else off it (HOST or
   * FETCH, whichever the time model says is faster); the forward takes it
   * for RESIDENT. */
  UM_EXPERTS_AUTO,
  UM_EXPERTS_RESIDENT,   /* every expert on the device */
  /* A copy in host memory (raw, read in place, or zstd, decoded into
   * slots) computed by the host CPU: the routed rows go down, the experts'
   * outputs come back up and are added on the device. */
  UM_EXPERTS_HOST,
  /* A host copy (raw or zstd); per layer, once routed, only the experts
   * some row goes to are copied into device slots, the next one while the
   * current one computes. */
  UM_EXPERTS_FETCH,
  UM_EXPERTS_N_PLACEMENTS
} UmExpertPlacement;

const char *um_expert_placement_to_string (UmExpertPlacement p);
gboolean    um_expert_placement_from_string (const char *s, UmExpertPlacement *out);

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
  /* MoE models: where the routed experts live. HOST and FETCH are not
   * combined with layer streaming. */
  UmExpertPlacement experts;
  /* The experts' host copy zstd-compressed (FETCH, HOST), decoded per
   * fetch; raw otherwise. */
  gboolean      expert_zstd;
  guint         expert_slots;   /* FETCH (and HOST with zstd): slots, ≥ 2; 0: 2 */
} UmForwardOptions;

void       um_forward_options_init (UmForwardOptions *options);
/* The slots @options gives experts fetched into them (expert_slots or its default). */
guint      um_forward_expert_slots (const UmForwardOptions *options);

/* The generation a forward is sized for. */
typedef struct {
  int      n_seq;             /* 2 with classifier-free guidance */
  int      seq_len;           /* prompt + answer */
  int      n_rows;            /* logit rows a pass asks for (a block's masks, × n_seq) */
  gboolean kv_cache;          /* the block KV cache (prefix and dual keep the same buffer) */
  gboolean guided;            /* rows come as conditional then unconditional halves */
  gboolean backend_chooses;   /* the backend has the choose op (the GPU), so logits stay there */
  gboolean backend_moe;       /* the backend routes mixtures of experts (its moe op: the GPU) */
} UmForwardShape;

/* What a forward holds for @shape, by kind: computed by the functions the
 * forward allocates with (the list of weights it loads, the arena layout,
 * the KV cache, the host buffers), so the memory plan predicts with the
 * allocator's own arithmetic and the two cannot drift. */
typedef struct {
  guint64 embedding;       /* the token table on the device; 0 when it stays on the host */
  guint64 norms;           /* the norm vectors, as held (float) */
  guint64 head;            /* the LM head; 0 when tied to the table */
  guint64 layers;          /* resident layer matrices; 0 when streaming */
  guint64 stream_slots;    /* streaming slots */
  guint64 arena;           /* the work buffers of the largest pass */
  guint64 kv_cache;        /* every layer's K and V of the canvas */
  guint64 host_embedding;  /* decoded rows and one stored row (table on the host) */
  guint64 host_logits;     /* logits downloaded to choose from on the host */
  guint64 host_index;      /* a pass's position, sequence and row arrays */
  /* Routed experts off the device: */
  guint64 expert_slots;    /* FETCH's device slots */
  guint64 host_expert_work;/* HOST: rows and outputs in host memory, slots of a compressed copy (the
                            * copy itself: um_expert_store_predict_bytes ()) */
} UmForwardBytes;

void       um_forward_bytes (const UmModel          *model,
                             const UmForwardOptions *options,
                             const UmForwardShape   *shape,
                             UmForwardBytes         *out);

/* ---- what the forward allocates with (shared with um_forward_bytes ()) ---- */

/* Whether @o keeps the token table on the host (never with tied embeddings). */
gboolean   um_forward_embed_on_host (const UmModel *model, const UmForwardOptions *o);

/* What a device weight is, for the plan's components. */
typedef enum {
  UM_FORWARD_WEIGHT_EMBED,
  UM_FORWARD_WEIGHT_NORM,
  UM_FORWARD_WEIGHT_HEAD,
  UM_FORWARD_WEIGHT_LAYER,
} UmForwardWeightKind;

/* Which of the forward's handles a device weight goes to: the model's
 * (the token table, the final norm, the LM head), then a layer's. */
typedef enum {
  UM_FORWARD_W_TOK_EMBD,
  UM_FORWARD_W_OUT_NORM,
  UM_FORWARD_W_OUTPUT,
  UM_FORWARD_W_ATTN_NORM,
  UM_FORWARD_W_FFN_NORM,
  UM_FORWARD_W_BQ,
  UM_FORWARD_W_BK,
  UM_FORWARD_W_BV,
  UM_FORWARD_W_Q_NORM,
  UM_FORWARD_W_K_NORM,
  UM_FORWARD_W_ROUTER,
  UM_FORWARD_W_ROUTER_BIAS,
  UM_FORWARD_W_WQ,
  UM_FORWARD_W_WK,
  UM_FORWARD_W_WV,
  UM_FORWARD_W_WO,
  /* The stacked experts' matrices, one slice per expert (gate, up, down). */
  UM_FORWARD_W_EXPERTS_GATE,
  UM_FORWARD_W_EXPERTS_UP,
  UM_FORWARD_W_EXPERTS_DOWN,
  UM_FORWARD_W_SH_GATE,
  UM_FORWARD_W_SH_UP,
  UM_FORWARD_W_SH_DOWN,
  UM_FORWARD_W_W_GATE,
  UM_FORWARD_W_W_UP,
  UM_FORWARD_W_W_DOWN,
} UmForwardWeightRole;

/* A weight the forward holds on the device, and where its handle goes. */
typedef struct {
  const UmWeight     *src;
  UmForwardWeightKind kind;
  UmForwardWeightRole role;
  guint               layer;      /* the layer of a layer's role */
  guint               n_experts;  /* > 0: @src stacks this many experts, loaded one slice each */
} UmForwardWeightRef;

/* Room um_forward_device_weights () needs for @model's list. */
guint      um_forward_max_device_weights (const UmModel *model);
/* The weights a forward with @o (embed_on_host resolved) loads onto the
 * device, in load order: the token table unless it stays on the host, the
 * final norm, the LM head unless tied, each layer's norms and, unless
 * streaming, its matrices. Loading and planning both walk this list. */
guint      um_forward_device_weights (const UmModel *model, const UmForwardOptions *o, UmForwardWeightRef *out);
/* Bytes of @w as stored (and as loaded). */
guint64    um_forward_weight_bytes (const UmWeight *w);

/* The work buffers of a pass, carved from one device arena. */
typedef enum {
  UM_ARENA_X, UM_ARENA_H, UM_ARENA_Q, UM_ARENA_K, UM_ARENA_V, UM_ARENA_ATT, UM_ARENA_GATE, UM_ARENA_UP,
  UM_ARENA_ROUTER,   /* MoE: the router's logits of a chunk of rows */
  UM_ARENA_EX,       /* MoE: an expert's group of input rows */
  UM_ARENA_EY,       /* MoE: an expert's output rows */
  UM_ARENA_MOE,      /* MoE routed on the backend: its work (um-moe-work.h) */
  /* Last, sized by the requested rows: the buffers before them stay where
   * they are from step to step (a recorded pass reads them there). */
  UM_ARENA_XS, UM_ARENA_LOGITS,
  UM_ARENA_N_SLOTS
} UmArenaSlot;

#define UM_ARENA_ALIGN 256

typedef struct {
  size_t offset[UM_ARENA_N_SLOTS];
  size_t bytes[UM_ARENA_N_SLOTS];
  size_t total;
} UmArenaLayout;

/* The arena of a pass over @n_seq × @seq_len rows asking for @n_rows of
 * them. @device_moe: the backend routes mixtures of experts itself (its
 * moe op), in work memory of the arena's. */
void       um_forward_arena_layout (const UmModel *model, int n_seq, int seq_len, int n_rows, int row_chunk,
                                    gboolean device_moe, UmArenaLayout *a);
/* Rows an MLP or LM-head chunk of @rows holds under @row_chunk (> 0). */
int        um_forward_chunk_rows (int rows, int row_chunk);

/* Bytes of one K or V view of the KV cache: @rows canvas rows of a layer. */
size_t     um_forward_kv_view_bytes (const UmModel *model, int rows);
/* The whole cache: a K and a V view per layer. */
size_t     um_forward_kv_cache_bytes (const UmModel *model, int rows);

/* Floats of logits the host chooses from, for @n_rows rows: all of them
 * unless the backend chooses, which with guidance needs both halves in one
 * LM-head chunk. */
size_t     um_forward_host_logit_floats (const UmModel *model, const UmForwardOptions *o, gboolean backend_chooses,
                                         gboolean guided, int n_rows);
/* Host bytes of the decoded embedding rows of @n tokens, then one stored row. */
size_t     um_forward_host_rows_bytes (const UmModel *model, int n);
/* Entries of a pass's index array: a full pass over @T rows keeps a
 * position and a sequence per row and per requested row (@n); a cached
 * step over @m rows the token, position and sequence of each and the
 * index of each requested row. */
size_t     um_forward_pass_index_count (int T, int n);
size_t     um_forward_cached_index_count (int m, int n);

/* ---- routed experts off the device (engine/um-forward-experts.c) ---- */

/* Whether @o keeps @model's routed experts off the device. */
gboolean   um_forward_experts_off_device (const UmModel *model, const UmForwardOptions *o);
/* Whether the experts are fetched into slots (FETCH; HOST from a zstd
 * copy), rather than read in place from HOST's raw copy. */
gboolean   um_forward_experts_use_slots (const UmForwardOptions *o);

/* HOST's host buffers: the layer's rows (H), one expert's group of a
 * chunk (X), its gate and up (G, U) and output (Y). */
typedef enum {
  UM_EXPERT_WORK_H, UM_EXPERT_WORK_X, UM_EXPERT_WORK_G, UM_EXPERT_WORK_U, UM_EXPERT_WORK_Y,
  UM_EXPERT_WORK_N
} UmExpertWork;

typedef struct {
  size_t offset[UM_EXPERT_WORK_N], bytes[UM_EXPERT_WORK_N], total;
} UmExpertWorkLayout;

/* HOST's work buffers for MoE layers of @rows rows in chunks of @chunk. */
void       um_forward_experts_work_layout (const UmModel *model, int rows, int chunk, UmExpertWorkLayout *w);

/* What @o's placement holds for MoE layers of @rows rows in chunks of
 * @chunk: device slots and host bytes into @out (expert_slots,
 * host_expert_work). */
void       um_forward_experts_bytes (const UmModel          *model,
                                     const UmForwardOptions *o,
                                     int                     rows,
                                     int                     chunk,
                                     UmForwardBytes         *out);

G_END_DECLS

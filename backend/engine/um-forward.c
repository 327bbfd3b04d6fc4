#include "um-forward.h"

#include <string.h>

#include "um-choose.h"
#include "um-error.h"
#include "um-pool.h"
#include "um-expert-store.h"
#include "um-forward-experts.h"
#include "um-kprof.h"
#include "um-layer-store.h"
#include "um-moe.h"
#include "um-moe-work.h"
#include "um-prefetch.h"
#include "um-quant.h"

/* The work buffers of a pass, carved from one device arena. */
typedef enum {
  SLOT_X, SLOT_H, SLOT_Q, SLOT_K, SLOT_V, SLOT_ATT, SLOT_GATE, SLOT_UP,
  SLOT_ROUTER,   /* MoE: the router's logits of a chunk of rows */
  SLOT_EX,       /* MoE: an expert's group of input rows */
  SLOT_EY,       /* MoE: an expert's output rows */
  SLOT_MOE,      /* MoE routed on the backend: its work (um-moe-work.h) */
  /* Last, sized by the requested rows: the buffers before them stay where
   * they are from step to step (a recorded pass reads them there). */
  SLOT_XS, SLOT_LOGITS,
  N_SLOTS
} Slot;

#define ARENA_ALIGN 256

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

void
um_forward_options_init (UmForwardOptions *options)
{
  memset (options, 0, sizeof *options);
}

static gboolean
streaming (const UmForward *fw)
{
  return fw->opts.stream_slots > 0;
}

static gboolean
embed_on_host (const UmModel *model, const UmForwardOptions *o)
{
  return o != NULL && o->embed_on_host && !model->cfg.tied_embeddings;
}

static void
free_kv_views (UmForward *fw)
{
  for (guint i = 0; fw->kv_views != NULL && i < 2 * fw->model->cfg.n_layers; i++)
    if (fw->kv_views[i] != NULL)
      fw->be->ops->buf_free (fw->be, fw->kv_views[i]);
  g_clear_pointer (&fw->kv_views, g_free);
  fw->kv_rows = 0;
}

static void
free_kv (UmForward *fw)
{
  free_kv_views (fw);
  if (fw->kv != NULL)
    fw->be->ops->buf_free (fw->be, fw->kv);
  fw->kv = NULL;
  fw->kv_bytes = 0;
  fw->kv_rows = 0;
}

void
um_forward_free (UmForward *fw)
{
  if (fw == NULL)
    return;
  /* The copy threads first: they may be writing into a slot. */
  g_clear_pointer (&fw->prefetcher, um_prefetcher_free);
  g_clear_pointer (&fw->experts, um_forward_experts_free);
  for (guint s = 0; fw->stream != NULL && s < fw->opts.stream_slots; s++)
    {
      for (int i = 0; i < UM_LAYER_N_MATS; i++)
        if (fw->stream[s].mats[i] != NULL)
          fw->be->ops->weight_free (fw->be, fw->stream[s].mats[i]);
      for (guint i = 0; i < 3 * fw->stream[s].n_experts; i++)
        if (fw->stream[s].experts[i] != NULL)
          fw->be->ops->weight_free (fw->be, fw->stream[s].experts[i]);
      g_free (fw->stream[s].experts);
      if (fw->stream[s].buf != NULL)
        fw->be->ops->buf_free (fw->be, fw->stream[s].buf);
    }
  g_free (fw->stream);
  free_kv (fw);
  if (fw->arena != NULL)
    fw->be->ops->buf_free (fw->be, fw->arena);
  if (fw->dev_weights != NULL)
    for (guint i = 0; i < fw->dev_weights->len; i++)
      fw->be->ops->weight_free (fw->be, g_ptr_array_index (fw->dev_weights, i));
  g_clear_pointer (&fw->dev_weights, g_ptr_array_unref);
  g_free (fw->host_rows);
  g_free (fw->host_logits);
  g_free (fw->host_router);
  g_free (fw->host_bias);
  um_moe_routing_clear (&fw->routing);
  for (int i = 0; i < fw->n_routes; i++)
    um_moe_routing_clear (&fw->routes[i]);
  g_free (fw->routes);
  for (guint l = 0; fw->layers != NULL && l < fw->model->cfg.n_layers; l++)
    g_free (fw->layers[l].experts);
  g_free (fw->layers);
  g_free (fw);
}

static UmDevWeight *
load_weight (UmForward *fw, const UmWeight *w, GError **error)
{
  UmDevWeight *dw;

  if (g_cancellable_set_error_if_cancelled (fw->cancellable, error))
    return NULL;
  dw = fw->be->ops->weight_load (fw->be, w, error);
  if (dw != NULL)
    g_ptr_array_add (fw->dev_weights, dw);
  /* A GPU has its own copy now: the file's pages need not stay in RAM. */
  if (dw != NULL && !fw->be->ops->weights_in_place)
    um_tensor_data_release (w->data, w->rows * w->row_bytes);
  fw->loaded_bytes += w->rows * w->row_bytes;
  if (dw != NULL && fw->progress_cb != NULL)
    fw->progress_cb ((double) fw->loaded_bytes / MAX (fw->total_bytes, 1), fw->progress_data);
  return dw;
}

UmForward *
um_forward_new (UmModel   *model,
                UmBackend *backend,
                GError   **error)
{
  return um_forward_new_full (model, backend, NULL, NULL, NULL, error);
}

UmForward *
um_forward_new_full (UmModel           *model,
                     UmBackend         *backend,
                     UmForwardProgress  progress_cb,
                     gpointer           user_data,
                     GCancellable      *cancellable,
                     GError           **error)
{
  return um_forward_new_with (model, backend, NULL, progress_cb, user_data, cancellable, error);
}

static gboolean
setup_streaming (UmForward *fw, GError **error)
{
  const UmBackendOps *ops = fw->be->ops;
  size_t slot_bytes = um_layer_slot_bytes (fw->model);

  if (fw->opts.store == NULL || fw->opts.stream_slots < 2)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "layer streaming needs a host store and at least 2 slots (got %u)", fw->opts.stream_slots);
      return FALSE;
    }
  if (ops->weight_view == NULL || ops->copy_upload == NULL || ops->sync == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                   "the %s backend cannot stream layers", ops->name);
      return FALSE;
    }
  fw->stream = g_new0 (StreamSlot, fw->opts.stream_slots);
  for (guint s = 0; s < fw->opts.stream_slots; s++)
    {
      fw->stream[s].shaped_for = -1;
      fw->stream[s].requested = -1;
      fw->stream[s].buf = ops->buf_alloc (fw->be, slot_bytes, error);
      if (fw->stream[s].buf == NULL)
        return FALSE;
    }
  fw->prefetcher = um_prefetcher_new (fw->opts.store, error);
  return fw->prefetcher != NULL;
}

/* What a device weight is, for the plan's components. */
typedef enum { DW_EMBED, DW_NORM, DW_HEAD, DW_LAYER } DevWeightKind;

/* A weight the forward holds on the device, and where its handle goes. */
typedef struct {
  const UmWeight *src;
  UmDevWeight   **dst;
  DevWeightKind   kind;
  guint           n_experts;  /* > 0: @src stacks this many experts, loaded one slice each into dst[0…] */
} DevWeightRef;

static guint
max_device_weights (const UmModel *model)
{
  return 3 + 20 * model->cfg.n_layers;
}

/* The weights a forward with @o (embed_on_host resolved) loads onto the
 * device, in load order: the token table unless it stays on the host, the
 * final norm, the LM head unless tied, each layer's norms and, unless
 * streaming, its matrices. @fw NULL (planning): no handles. @out has room
 * for max_device_weights (). Loading and planning both walk this list. */
static guint
device_weights (const UmModel *model, const UmForwardOptions *o, UmForward *fw, DevWeightRef *out)
{
  const UmModelConfig *c = &model->cfg;
  guint n = 0;

#define ADD(src_, dst_, kind_) G_STMT_START { \
    out[n].src = (src_); out[n].dst = fw ? (dst_) : NULL; out[n].kind = (kind_); out[n].n_experts = 0; \
    n++; } G_STMT_END
  /* Small tensors the family or layer may lack. */
#define ADD_OPT(src_, dst_) G_STMT_START { if ((src_)->data != NULL) ADD (src_, dst_, DW_NORM); } G_STMT_END
  if (!o->embed_on_host)
    ADD (&model->tok_embd, &fw->tok_embd, DW_EMBED);
  ADD (&model->out_norm, &fw->out_norm, DW_NORM);
  if (!c->tied_embeddings)
    ADD (&model->output, &fw->output, DW_HEAD);
  for (guint l = 0; l < c->n_layers; l++)
    {
      const UmLayerWeights *src = &model->layers[l];
      DevLayer *dst = fw ? &fw->layers[l] : NULL;
      ADD (&src->attn_norm, &dst->attn_norm, DW_NORM);
      ADD (&src->ffn_norm, &dst->ffn_norm, DW_NORM);
      ADD_OPT (&src->bq, &dst->bq);
      ADD_OPT (&src->bk, &dst->bk);
      ADD_OPT (&src->bv, &dst->bv);
      ADD_OPT (&src->q_norm, &dst->q_norm);
      ADD_OPT (&src->k_norm, &dst->k_norm);
      ADD_OPT (&src->router, &dst->router);
      ADD_OPT (&src->router_bias, &dst->router_bias);
      if (o->stream_slots > 0)
        continue;
      ADD (&src->wq, &dst->wq, DW_LAYER);
      ADD (&src->wk, &dst->wk, DW_LAYER);
      ADD (&src->wv, &dst->wv, DW_LAYER);
      ADD (&src->wo, &dst->wo, DW_LAYER);
      if (src->n_experts > 0)
        {
          /* One device weight per expert slice: the products run per expert
           * (off the device, um-forward-experts.c holds them). */
          for (int i = 0; i < 3 && !um_forward_experts_off_device (model, o); i++)
            {
              const UmWeight *m = i == 0 ? &src->w_gate : i == 1 ? &src->w_up : &src->w_down;
              ADD (m, dst->experts + i, DW_LAYER);
              out[n - 1].n_experts = src->n_experts;
            }
          if (src->shared_ffn > 0)
            {
              ADD (&src->sh_gate, &dst->sh_gate, DW_LAYER);
              ADD (&src->sh_up, &dst->sh_up, DW_LAYER);
              ADD (&src->sh_down, &dst->sh_down, DW_LAYER);
            }
          continue;
        }
      ADD (&src->w_gate, &dst->w_gate, DW_LAYER);
      ADD (&src->w_up, &dst->w_up, DW_LAYER);
      ADD (&src->w_down, &dst->w_down, DW_LAYER);
    }
#undef ADD_OPT
#undef ADD
  return n;
}

static guint64
weight_bytes (const UmWeight *w)
{
  return w->rows * w->row_bytes;
}

/* Building the experts' host copy, as a share of the load's progress. */
static void
on_experts_progress (double fraction, gpointer user_data)
{
  UmForward *fw = user_data;
  double done = fw->loaded_bytes + fraction * um_model_expert_bytes (fw->model);

  if (fw->progress_cb != NULL)
    fw->progress_cb (done / MAX (fw->total_bytes, 1), fw->progress_data);
}

UmForward *
um_forward_new_with (UmModel                *model,
                     UmBackend              *backend,
                     const UmForwardOptions *options,
                     UmForwardProgress       progress_cb,
                     gpointer                user_data,
                     GCancellable           *cancellable,
                     GError                **error)
{
  g_autoptr(UmForward) fw = g_new0 (UmForward, 1);
  const UmModelConfig *c = &model->cfg;
  g_autofree DevWeightRef *refs = g_new (DevWeightRef, max_device_weights (model));
  guint n_refs;

  fw->model = model;
  fw->be = backend;
  if (options != NULL)
    fw->opts = *options;
  fw->opts.embed_on_host = embed_on_host (model, options);
  fw->progress_cb = progress_cb;
  fw->progress_data = user_data;
  fw->cancellable = cancellable;
  fw->dev_weights = g_ptr_array_new ();
  fw->layers = g_new0 (DevLayer, c->n_layers);
  um_moe_routing_init (&fw->routing);
  for (guint l = 0; l < c->n_layers; l++)
    if (model->layers[l].n_experts > 0)
      fw->layers[l].experts = g_new0 (UmDevWeight *, 3 * model->layers[l].n_experts);

  n_refs = device_weights (model, &fw->opts, fw, refs);
  /* Progress counts the bytes this backend is given. */
  for (guint i = 0; i < n_refs; i++)
    fw->total_bytes += weight_bytes (refs[i].src);

  if (streaming (fw) && !setup_streaming (fw, error))
    return NULL;
  /* The experts first: their copy releases the file's pages it read. */
  if (um_forward_experts_off_device (model, &fw->opts))
    {
      fw->total_bytes += um_model_expert_bytes (model);
      fw->experts = um_forward_experts_new (model, backend, &fw->opts, on_experts_progress, fw, cancellable, error);
      if (fw->experts == NULL)
        return NULL;
      fw->loaded_bytes += um_model_expert_bytes (model);
    }
  for (guint i = 0; i < n_refs; i++)
    {
      if (refs[i].n_experts == 0)
        {
          if ((*refs[i].dst = load_weight (fw, refs[i].src, error)) == NULL)
            return NULL;
          continue;
        }
      /* dst points at the slot of this matrix of expert 0; experts are 3 apart. */
      for (guint e = 0; e < refs[i].n_experts; e++)
        {
          UmWeight slice = um_weight_expert (refs[i].src, refs[i].n_experts, e);
          if ((refs[i].dst[3 * e] = load_weight (fw, &slice, error)) == NULL)
            return NULL;
        }
    }
  if (c->tied_embeddings)
    fw->output = fw->tok_embd;
  fw->progress_cb = NULL;
  fw->cancellable = NULL;
  return g_steal_pointer (&fw);
}

typedef struct {
  size_t offset[N_SLOTS];
  size_t bytes[N_SLOTS];
  size_t total;
} ArenaLayout;

static int
chunk_rows (int rows, int row_chunk)
{
  return row_chunk > 0 ? MIN (rows, row_chunk) : rows;
}

/* @device_moe: the backend routes mixtures of experts itself (its moe
 * op), in work memory of the arena's. */
static void
arena_layout (const UmModel *model, int n_seq, int seq_len, int n_rows, int row_chunk, gboolean device_moe,
              ArenaLayout *a)
{
  const UmModelConfig *c = &model->cfg;
  const size_t T = (size_t) n_seq * seq_len;
  const size_t D = c->d_model, V = c->vocab_size;
  const size_t QD = (size_t) c->n_heads * c->head_dim, KVD = (size_t) c->n_kv_heads * c->head_dim;
  const gboolean subset = (size_t) n_rows < T;
  const gboolean moe = c->n_experts > 0;
  /* The FFN buffers hold a chunk of dense rows or one expert's group (at
   * most the chunk). */
  const size_t F = MAX (c->mlp_hidden, moe ? MAX (c->expert_ffn, c->shared_ffn) : 0);
  const size_t chunk = chunk_rows ((int) T, row_chunk);
  const size_t floats[N_SLOTS] = {
    [SLOT_X] = T * D,
    [SLOT_H] = T * MAX (D, QD),
    [SLOT_Q] = T * QD,
    [SLOT_K] = T * KVD,
    [SLOT_V] = T * KVD,
    [SLOT_ATT] = T * QD,
    [SLOT_GATE] = chunk_rows ((int) T, row_chunk) * F,
    [SLOT_UP] = chunk_rows ((int) T, row_chunk) * F,
    [SLOT_XS] = subset ? (size_t) n_rows * D : 0,
    [SLOT_LOGITS] = chunk_rows (n_rows, row_chunk) * V,
    [SLOT_ROUTER] = moe ? chunk * c->n_experts : 0,
    [SLOT_EX] = moe ? chunk * D : 0,
    [SLOT_EY] = moe ? chunk * D : 0,
  };

  const size_t moe_bytes = moe && device_moe
                             ? um_moe_work_layout ((int) chunk, (int) c->n_experts, (int) c->n_experts_used,
                                                   (int) D, (int) c->expert_ffn, NULL, NULL)
                             : 0;

  a->total = 0;
  for (int s = 0; s < N_SLOTS; s++)
    {
      a->offset[s] = a->total;
      a->bytes[s] = s == SLOT_MOE ? moe_bytes : floats[s] * sizeof (float);
      a->total += (a->bytes[s] + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    }
}

/* Bytes of one K or V view of the KV cache: @rows canvas rows of a layer. */
static size_t
kv_view_bytes (const UmModel *model, int rows)
{
  return (size_t) rows * model->cfg.n_kv_heads * model->cfg.head_dim * sizeof (float);
}

/* The whole cache: a K and a V view per layer. */
static size_t
kv_cache_bytes (const UmModel *model, int rows)
{
  return 2 * kv_view_bytes (model, rows) * model->cfg.n_layers;
}

/* Floats of logits the host chooses from, for @n_rows rows: all of them
 * unless the backend chooses, which with guidance needs both halves in one
 * LM-head chunk. */
static size_t
host_logit_floats (const UmModel *model, const UmForwardOptions *o, gboolean backend_chooses, gboolean guided,
                   int n_rows)
{
  if (backend_chooses && (!guided || chunk_rows (n_rows, o->row_chunk) == n_rows))
    return 0;
  return (size_t) n_rows * model->cfg.vocab_size;
}

/* Host bytes of the decoded embedding rows of @n tokens, then one stored row. */
static size_t
host_rows_bytes (const UmModel *model, int n)
{
  return (size_t) n * model->tok_embd.cols * sizeof (float) + model->tok_embd.row_bytes;
}

/* Entries of a pass's index array: a full pass over @T rows keeps a
 * position and a sequence per row and per requested row (@n); a cached
 * step over @m rows the token, position and sequence of each and the
 * index of each requested row. */
static size_t
pass_index_count (int T, int n)
{
  return (size_t) 2 * T + 2 * n;
}

static size_t
cached_index_count (int m, int n)
{
  return (size_t) 3 * m + n;
}

void
um_forward_bytes (const UmModel          *model,
                  const UmForwardOptions *options,
                  const UmForwardShape   *shape,
                  UmForwardBytes         *out)
{
  UmForwardOptions o;
  g_autofree DevWeightRef *refs = g_new (DevWeightRef, max_device_weights (model));
  const int T = shape->n_seq * shape->seq_len;
  const int n = MIN (shape->n_rows, T);
  ArenaLayout a;
  guint n_refs;

  memset (out, 0, sizeof *out);
  um_forward_options_init (&o);
  if (options != NULL)
    o = *options;
  o.embed_on_host = embed_on_host (model, options);
  n_refs = device_weights (model, &o, NULL, refs);
  for (guint i = 0; i < n_refs; i++)
    {
      guint64 b = weight_bytes (refs[i].src);
      switch (refs[i].kind)
        {
        case DW_EMBED: out->embedding += b; break;
        case DW_NORM: out->norms += b; break;
        case DW_HEAD: out->head += b; break;
        case DW_LAYER: out->layers += b; break;
        default: break;
        }
    }
  if (o.stream_slots > 0)
    out->stream_slots = (guint64) o.stream_slots * um_layer_slot_bytes (model);
  /* A cached step runs at most the whole canvas (m ≤ T rows) with the same
   * requested rows, and the layout grows with both: the full pass is the
   * largest. */
  arena_layout (model, shape->n_seq, shape->seq_len, n, o.row_chunk, shape->backend_moe, &a);
  out->arena = a.total;
  if (shape->kv_cache)
    out->kv_cache = kv_cache_bytes (model, T);
  if (o.embed_on_host)
    out->host_embedding = host_rows_bytes (model, T);
  out->host_logits = host_logit_floats (model, &o, shape->backend_chooses, shape->guided, n) * sizeof (float);
  out->host_index = MAX (pass_index_count (T, n < T ? n : 0), shape->kv_cache ? cached_index_count (T, n) : 0)
                    * sizeof (gint32);
  /* MoE: a chunk's router logits and its routing (a row, scale, choice and
   * weight per token and expert used), and a selection bias. */
  if (model->cfg.n_experts > 0)
    {
      const size_t chunk = chunk_rows (T, o.row_chunk), E = model->cfg.n_experts, k = model->cfg.n_experts_used;
      out->host_index += chunk * E * sizeof (float) + chunk * k * (2 * sizeof (gint32) + sizeof (float) + sizeof (double))
                         + (E + 1) * sizeof (int) + 3 * E * sizeof (double);
      /* Off the device, every chunk of a layer is routed before its
       * experts run: a routing per chunk. */
      if (um_forward_experts_off_device (model, &o))
        {
          const size_t n_chunks = (T + chunk - 1) / chunk;
          out->host_index += (n_chunks - 1) * (chunk * k * (2 * sizeof (gint32) + sizeof (float) + sizeof (double))
                                               + (E + 1) * sizeof (int) + 3 * E * sizeof (double))
                             + n_chunks * sizeof (UmMoeRouting);
          um_forward_experts_bytes (model, &o, T, (int) chunk, out);
        }
    }
}

/* The arena at least @bytes long (its views are made per pass). */
static gboolean
grow_arena (UmForward *fw, size_t bytes, GError **error)
{
  const UmBackendOps *ops = fw->be->ops;

  if (fw->arena_bytes >= bytes)
    return TRUE;
  if (fw->arena != NULL)
    ops->buf_free (fw->be, fw->arena);
  fw->arena_bytes = 0;
  fw->arena = ops->buf_alloc (fw->be, bytes, error);
  if (fw->arena == NULL)
    return FALSE;
  fw->arena_bytes = bytes;
  return TRUE;
}

/* Views of the arena for this pass; the arena grows only when a longer
 * canvas needs it, so steady-state passes allocate no device memory. */
static gboolean
carve (UmForward *fw, const ArenaLayout *a, UmBuf **views, GError **error)
{
  const UmBackendOps *ops = fw->be->ops;

  if (!grow_arena (fw, a->total, error))
    return FALSE;
  for (int s = 0; s < N_SLOTS; s++)
    if (a->bytes[s] > 0 && (views[s] = ops->buf_view (fw->be, fw->arena, a->offset[s], a->bytes[s], error)) == NULL)
      return FALSE;
  return TRUE;
}

static void
free_views (UmForward *fw, UmBuf **views, int n)
{
  for (int i = 0; i < n; i++)
    if (views[i] != NULL)
      fw->be->ops->buf_free (fw->be, views[i]);
}

static gboolean
matmul (UmForward *fw, UmBuf *x, int rows, const UmDevWeight *w, const UmWeight *hw, UmBuf *out,
        GError **error)
{
  gint64 t0 = g_get_monotonic_time ();
  gboolean ok = fw->be->ops->matmul (fw->be, x, rows, w, out, error);
  fw->stats.seconds_matmul += (g_get_monotonic_time () - t0) / 1e6;
  fw->stats.flops += 2.0 * rows * (double) hw->rows * (double) hw->cols;
  fw->stats.flops_matmul += 2.0 * rows * (double) hw->rows * (double) hw->cols;
  return ok;
}

/* The token rows, decoded on the host and uploaded (table not on the device). */
static gboolean
embed_host (UmForward *fw, const gint32 *ids, int n, UmBuf *x, GError **error)
{
  const UmWeight *w = &fw->model->tok_embd;
  size_t floats = (size_t) n * w->cols;

  for (int i = 0; i < n; i++)
    if (ids[i] < 0 || (uint64_t) ids[i] >= w->rows)
      {
        g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                     "token id %d is outside the vocabulary (%" G_GUINT64_FORMAT ")", ids[i], w->rows);
        return FALSE;
      }
  if (fw->host_rows_floats < floats)
    {
      g_free (fw->host_rows);
      /* The decoded rows, then one stored row. */
      fw->host_rows = g_try_malloc (host_rows_bytes (fw->model, n));
      fw->host_rows_floats = fw->host_rows ? floats : 0;
      if (fw->host_rows == NULL)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY, "out of host memory for %d embedding rows", n);
          return FALSE;
        }
    }
  /* Rows are read from the file rather than through the mapping, whose
   * pages the kernel maps a large folio (up to 2 MiB) at a time: a canvas
   * of distinct tokens would otherwise hold much of the table. */
  for (int i = 0; i < n; i++)
    {
      guint8 *stored = (guint8 *) (fw->host_rows + floats);
      um_tensor_data_read ((const guint8 *) w->data + (uint64_t) ids[i] * w->row_bytes, w->row_bytes, stored);
      if (!um_quant_dequantize_row (w->dtype, stored, fw->host_rows + (size_t) i * w->cols, w->cols))
        {
          g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "cannot decode embedding rows stored as %s",
                       um_dtype_name (w->dtype));
          return FALSE;
        }
    }
  return fw->be->ops->buf_upload (fw->be, x, 0, fw->host_rows, floats * sizeof (float), error);
}

static gboolean
same_layout (const UmLayerWeights *a, const UmLayerWeights *b)
{
  for (int i = 0; i < UM_LAYER_N_MATS; i++)
    {
      const UmWeight *x = um_layer_mat (a, i), *y = um_layer_mat (b, i);
      if (x->dtype != y->dtype || x->rows != y->rows || x->cols != y->cols || x->row_bytes != y->row_bytes)
        return FALSE;
    }
  return TRUE;
}

/* Layer @l's matrices in a slot: waits for its copy, then asks the copy
 * thread for the next layer (into the next slot) while this one computes.
 * Slots are used round-robin across passes, so the next slot is never the
 * one computing. */
static gboolean
stream_layer (UmForward *fw, guint l, DevLayer *out, GError **error)
{
  const UmBackendOps *ops = fw->be->ops;
  const guint k = fw->opts.stream_slots, n_layers = fw->model->cfg.n_layers;
  const guint s = fw->stream_seq % k, ns = (fw->stream_seq + 1) % k;
  const guint nl = (l + 1) % n_layers;
  StreamSlot *slot = &fw->stream[s];
  const UmLayerWeights *W = &fw->model->layers[l];
  gint64 t0 = g_get_monotonic_time ();
  UmDevWeight **m = slot->mats;

  if (slot->requested != (int) l)
    {
      um_prefetcher_request (fw->prefetcher, s, slot->buf, l);
      slot->requested = l;
    }
  if (!um_prefetcher_wait (fw->prefetcher, s, l, error))
    {
      slot->requested = -1;
      return FALSE;
    }
  fw->stats.seconds_stream_wait += (g_get_monotonic_time () - t0) / 1e6;
  fw->stats.layers_streamed++;

  /* Views are rebuilt only for a layer of other types or shapes (the
   * _M mixes give some layers 6-bit matrices; pruning, other counts). */
  if (slot->shaped_for < 0 || !same_layout (&fw->model->layers[slot->shaped_for], W))
    {
      UmLayerLayout layout;
      um_layer_layout (W, &layout);
      for (int i = 0; i < UM_LAYER_N_MATS; i++)
        {
          if (m[i] != NULL)
            ops->weight_free (fw->be, m[i]);
          m[i] = ops->weight_view (fw->be, slot->buf, layout.offset[i], um_layer_mat (W, i), error);
          if (m[i] == NULL)
            {
              slot->shaped_for = -1;
              return FALSE;
            }
        }
      /* MoE: a view per expert slice of the stacked gate, up and down. */
      for (guint i = 0; i < 3 * slot->n_experts; i++)
        if (slot->experts[i] != NULL)
          ops->weight_free (fw->be, slot->experts[i]);
      g_free (slot->experts);
      slot->experts = NULL;
      slot->n_experts = W->n_experts;
      if (W->n_experts > 0)
        slot->experts = g_new0 (UmDevWeight *, 3 * W->n_experts);
      for (guint e = 0; e < W->n_experts; e++)
        for (int i = 0; i < 3; i++)
          {
            const UmWeight *stacked = um_layer_mat (W, 4 + i);
            UmWeight slice = um_weight_expert (stacked, W->n_experts, e);
            size_t off = layout.offset[4 + i] + (size_t) e * slice.rows * slice.row_bytes;
            slot->experts[3 * e + i] = ops->weight_view (fw->be, slot->buf, off, &slice, error);
            if (slot->experts[3 * e + i] == NULL)
              {
                slot->shaped_for = -1;
                return FALSE;
              }
          }
      slot->shaped_for = l;
    }
  /* The small tensors stay resident; the matrices are the slot's. */
  *out = fw->layers[l];
  out->experts = slot->experts;
  out->wq = m[0];
  out->wk = m[1];
  out->wv = m[2];
  out->wo = m[3];
  out->w_gate = m[4];
  out->w_up = m[5];
  out->w_down = m[6];
  out->sh_gate = W->shared_ffn > 0 ? m[7] : NULL;
  out->sh_up = W->shared_ffn > 0 ? m[8] : NULL;
  out->sh_down = W->shared_ffn > 0 ? m[9] : NULL;

  /* The next slot last held a layer whose ops (on a GPU, queued) must be
   * done before the copy overwrites it. */
  if (!ops->sync (fw->be, error))
    return FALSE;
  um_prefetcher_request (fw->prefetcher, ns, fw->stream[ns].buf, nl);
  fw->stream[ns].requested = nl;
  fw->stream_seq++;
  return TRUE;
}

/* Host room for @floats router logits. */
static gboolean
host_router (UmForward *fw, size_t floats, GError **error)
{
  if (floats <= fw->host_router_floats)
    return TRUE;
  g_free (fw->host_router);
  fw->host_router = g_try_new (float, floats);
  fw->host_router_floats = fw->host_router != NULL ? floats : 0;
  if (fw->host_router == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY, "out of host memory for the router's logits");
      return FALSE;
    }
  return TRUE;
}

/* The mixture of experts on @c normalized rows @hc, added into the
 * residual rows @xc: on a backend with the moe op, routed and computed
 * there; otherwise the router's logits come to the host, which groups the
 * rows by expert (um-moe.h), and each expert then runs once over its group
 * — gather, gate and up products, SwiGLU, down product — and its output is
 * added into the group's residual rows, weighted. */
static gboolean
moe_rows (UmForward *fw, const DevLayer *L, const UmLayerWeights *W, UmBuf *xc, UmBuf *hc, int c, UmBuf **b,
          GError **error)
{
  const UmBackendOps *ops = fw->be->ops;
  UmBackend *be = fw->be;
  const UmModelConfig *cfg = &fw->model->cfg;
  const int D = cfg->d_model, F = W->ffn, E = W->n_experts;
  UmMoeRouting *r = &fw->routing;

  /* On a backend that routes (the GPU): the logits never leave it. */
  if (ops->moe != NULL)
    {
      const double flops = 2.0 * c * cfg->n_experts_used * 3.0 * D * (double) F;
      fw->stats.flops += flops;
      fw->stats.flops_matmul += flops;
      return matmul (fw, hc, c, L->router, &W->router, b[SLOT_ROUTER], error)
             && ops->moe (be, xc, hc, c, b[SLOT_ROUTER], L->router_bias, cfg, E, F, L->experts, b[SLOT_MOE], error);
    }
  if (!host_router (fw, (size_t) c * E, error)
      || !matmul (fw, hc, c, L->router, &W->router, b[SLOT_ROUTER], error)
      || !ops->buf_download (be, b[SLOT_ROUTER], 0, fw->host_router, (size_t) c * E * sizeof (float), error))
    return FALSE;
  um_moe_route (cfg, fw->host_router, W->router_bias.data, c, r);
  for (int e = 0; e < E; e++)
    {
      const int n = r->offset[e + 1] - r->offset[e];
      const gint32 *rows = r->rows + r->offset[e];
      UmDevWeight *const *X = L->experts + 3 * e;
      UmWeight hw[3];

      if (n == 0)
        continue;
      hw[0] = um_weight_expert (&W->w_gate, E, e);
      hw[1] = um_weight_expert (&W->w_up, E, e);
      hw[2] = um_weight_expert (&W->w_down, E, e);
      if (!ops->get_rows (be, hc, D, rows, n, b[SLOT_EX], error)
          || !matmul (fw, b[SLOT_EX], n, X[0], &hw[0], b[SLOT_GATE], error)
          || !matmul (fw, b[SLOT_EX], n, X[1], &hw[1], b[SLOT_UP], error)
          || !ops->swiglu (be, b[SLOT_GATE], b[SLOT_UP], (size_t) n * F, b[SLOT_GATE], error)
          || !matmul (fw, b[SLOT_GATE], n, X[2], &hw[2], b[SLOT_EY], error)
          || !ops->add_rows_scaled (be, xc, D, rows, r->scale + r->offset[e], n, b[SLOT_EY], error))
        return FALSE;
    }
  return TRUE;
}

/* The shared expert (LLaDA 2.x): a SwiGLU FFN every token goes through,
 * added unweighted beside the routed experts. */
static gboolean
shared_expert_rows (UmForward *fw, const DevLayer *L, const UmLayerWeights *W, UmBuf *xc, UmBuf *hc, int c,
                    UmBuf **b, GError **error)
{
  const UmBackendOps *ops = fw->be->ops;

  return matmul (fw, hc, c, L->sh_gate, &W->sh_gate, b[SLOT_GATE], error)
         && matmul (fw, hc, c, L->sh_up, &W->sh_up, b[SLOT_UP], error)
         && ops->swiglu (fw->be, b[SLOT_GATE], b[SLOT_UP], (size_t) c * W->shared_ffn, b[SLOT_GATE], error)
         && matmul (fw, b[SLOT_GATE], c, L->sh_down, &W->sh_down, b[SLOT_EY], error)
         && ops->add (fw->be, xc, b[SLOT_EY], (size_t) c * fw->model->cfg.d_model, error);
}

/* Chunk @r0's rows of @x (@c of them, @D floats each), as a view unless
 * they are all of it (then *@v stays NULL). */
static gboolean
chunk_view (UmForward *fw, UmBuf *x, int r0, int c, int m, UmBuf **v, UmBuf **out, GError **error)
{
  const size_t row = (size_t) fw->model->cfg.d_model * sizeof (float);

  *v = NULL;
  *out = x;
  if (c == m)
    return TRUE;
  *v = fw->be->ops->buf_view (fw->be, x, r0 * row, c * row, error);
  *out = *v;
  return *v != NULL;
}

/* A MoE layer whose routed experts are off the device: every chunk is
 * normalized and routed first, then the experts run (each fetched once for
 * the layer, um-forward-experts.c), then the shared expert chunk by chunk.
 * Each row sees the resident forward's ops in its order: its norm, its
 * experts' outputs added by expert, then the shared expert's. */
static gboolean
moe_layer_off_device (UmForward *fw, const DevLayer *L, const UmLayerWeights *W, UmBuf *xr, UmBuf *h, UmBuf **b,
                      int m, GError **error)
{
  const UmBackendOps *ops = fw->be->ops;
  const UmModelConfig *cfg = &fw->model->cfg;
  const int D = cfg->d_model, E = W->n_experts;
  const int chunk = chunk_rows (m, fw->opts.row_chunk), n_chunks = (m + chunk - 1) / chunk;

  if (n_chunks > fw->n_routes)
    {
      fw->routes = g_renew (UmMoeRouting, fw->routes, n_chunks);
      for (int i = fw->n_routes; i < n_chunks; i++)
        um_moe_routing_init (&fw->routes[i]);
      fw->n_routes = n_chunks;
    }
  for (int q = 0; q < n_chunks; q++)
    {
      const int r0 = q * chunk, c = MIN (chunk, m - r0);
      UmBuf *v[2] = { NULL, NULL }, *xc, *hc;
      gboolean ok = chunk_view (fw, xr, r0, c, m, &v[0], &xc, error)
                    && chunk_view (fw, h, r0, c, m, &v[1], &hc, error)
                    && ops->rms_norm (fw->be, xc, c, D, L->ffn_norm, (float) cfg->rms_eps, hc, error)
                    && host_router (fw, (size_t) c * E, error)
                    && matmul (fw, hc, c, L->router, &W->router, b[SLOT_ROUTER], error)
                    && ops->buf_download (fw->be, b[SLOT_ROUTER], 0, fw->host_router, (size_t) c * E * sizeof (float),
                                          error);
      free_views (fw, v, 2);
      if (!ok)
        return FALSE;
      um_moe_route (cfg, fw->host_router, W->router_bias.data, c, &fw->routes[q]);
    }
  if (!um_forward_experts_run (fw->experts, (guint) (W - fw->model->layers), fw->routes, chunk, xr, h, m, b[SLOT_EX],
                               b[SLOT_GATE], b[SLOT_UP], b[SLOT_EY], b[SLOT_MOE], &fw->stats, error))
    return FALSE;
  for (int q = 0; q < n_chunks && W->shared_ffn > 0; q++)
    {
      const int r0 = q * chunk, c = MIN (chunk, m - r0);
      UmBuf *v[2] = { NULL, NULL }, *xc, *hc;
      gboolean ok = chunk_view (fw, xr, r0, c, m, &v[0], &xc, error)
                    && chunk_view (fw, h, r0, c, m, &v[1], &hc, error)
                    && shared_expert_rows (fw, L, W, xc, hc, c, b, error);
      free_views (fw, v, 2);
      if (!ok)
        return FALSE;
    }
  return TRUE;
}

/* RMSNorm, the FFN (dense SwiGLU or mixture of experts) and the residual on
 * @m rows of @xr, @chunk rows at a time. */
static gboolean
mlp_rows (UmForward *fw, const DevLayer *L, const UmLayerWeights *W, UmBuf *xr, UmBuf *h, UmBuf **b, int m,
          GError **error)
{
  const UmBackendOps *ops = fw->be->ops;
  UmBackend *be = fw->be;
  const int D = fw->model->cfg.d_model, F = W->ffn;
  const float eps = (float) fw->model->cfg.rms_eps;
  const int chunk = chunk_rows (m, fw->opts.row_chunk);
  UmBuf *gate = b[SLOT_GATE], *up = b[SLOT_UP];

  if (W->n_experts > 0 && fw->experts != NULL)
    return moe_layer_off_device (fw, L, W, xr, h, b, m, error);
  for (int r0 = 0; r0 < m; r0 += chunk)
    {
      const int c = MIN (chunk, m - r0);
      const gboolean whole = c == m;
      UmBuf *v[2] = { NULL, NULL };
      gboolean ok;

      if (!whole)
        {
          v[0] = ops->buf_view (be, xr, (size_t) r0 * D * sizeof (float), (size_t) c * D * sizeof (float), error);
          v[1] = v[0] ? ops->buf_view (be, h, (size_t) r0 * D * sizeof (float), (size_t) c * D * sizeof (float),
                                       error) : NULL;
          if (v[1] == NULL)
            {
              free_views (fw, v, 2);
              return FALSE;
            }
        }
      {
        UmBuf *xc = whole ? xr : v[0], *hc = whole ? h : v[1];
        ok = ops->rms_norm (be, xc, c, D, L->ffn_norm, eps, hc, error);
        if (ok && W->n_experts > 0)
          ok = moe_rows (fw, L, W, xc, hc, c, b, error)
               && (W->shared_ffn == 0 || shared_expert_rows (fw, L, W, xc, hc, c, b, error));
        else if (ok)
          ok = matmul (fw, hc, c, L->w_gate, &W->w_gate, gate, error)
               && matmul (fw, hc, c, L->w_up, &W->w_up, up, error)
               && ops->swiglu (be, gate, up, (size_t) c * F, gate, error)
               && matmul (fw, gate, c, L->w_down, &W->w_down, hc, error)
               && ops->add (be, xc, hc, (size_t) c * D, error);
      }
      free_views (fw, v, 2);
      if (!ok)
        return FALSE;
    }
  return TRUE;
}

/* Where the LM head's rows go: downloaded into @logits, or chosen on the
 * backend (its choose op) with only ids and confidences downloaded. */
typedef struct {
  float              *logits;
  const UmChooseRule *rule;
  const gint32       *positions;
  gint32             *ids;
  double             *conf;
} HeadOut;

/* Final norm and LM head on @n rows of @xf, @chunk rows at a time, each
 * chunk's logits downloaded or chosen from as @dst says. Guided choice
 * needs a row's two halves in one chunk: the caller sees to it. */
static gboolean
head_rows (UmForward *fw, UmBuf *xf, UmBuf *h, UmBuf *out, int n, const HeadOut *dst, GError **error)
{
  const UmBackendOps *ops = fw->be->ops;
  UmBackend *be = fw->be;
  const int D = fw->model->cfg.d_model, V = fw->model->cfg.vocab_size;
  const int chunk = chunk_rows (n, fw->opts.row_chunk);

  if (!ops->rms_norm (be, xf, n, D, fw->out_norm, (float) fw->model->cfg.rms_eps, h, error))
    return FALSE;
  for (int r0 = 0; r0 < n; r0 += chunk)
    {
      const int c = MIN (chunk, n - r0);
      UmBuf *hv = NULL;
      gboolean ok;

      if (c < n && (hv = ops->buf_view (be, h, (size_t) r0 * D * sizeof (float), (size_t) c * D * sizeof (float),
                                        error)) == NULL)
        return FALSE;
      /* Filed apart from the layers' products by the kernel profile. */
      um_kprof_set_head (TRUE);
      ok = matmul (fw, hv ? hv : h, c, fw->output, &fw->model->output, out, error);
      um_kprof_set_head (FALSE);
      if (ok && dst->logits != NULL)
        ok = ops->buf_download (be, out, 0, dst->logits + (size_t) r0 * V, (size_t) c * V * sizeof (float), error);
      else if (ok)
        {
          const int guided = dst->rule->cfg_scale > 0.0;
          ok = ops->choose (be, out, guided ? c / 2 : c, V, dst->rule, dst->positions + r0, dst->ids + r0,
                            dst->conf + r0, error);
        }
      free_views (fw, &hv, 1);
      if (!ok)
        return FALSE;
    }
  return TRUE;
}

/* What follows a projection to q or k: the bias (Dream), the per-head
 * RMSNorm (QK-norm) and RoPE, on @rows rows of @n_heads heads. */
static gboolean
finish_qk (UmForward *fw, UmBuf *x, int rows, const gint32 *pos, int n_heads, const UmDevWeight *bias,
           const UmDevWeight *norm, GError **error)
{
  const UmBackendOps *ops = fw->be->ops;
  const UmModelConfig *c = &fw->model->cfg;
  const int hd = c->head_dim;

  return (bias == NULL || ops->add_bias (fw->be, x, rows, n_heads * hd, bias, error))
         && (norm == NULL || ops->rms_norm (fw->be, x, rows * n_heads, hd, norm, (float) c->rms_eps, x, error))
         && ops->rope (fw->be, x, rows, pos, n_heads, hd, c->rope_dim > 0 ? (int) c->rope_dim : hd, c->rope_theta,
                       c->rope_interleaved, error);
}

/* q of @rows normalized rows @h, ready for attention. */
static gboolean
q_proj (UmForward *fw, const DevLayer *L, const UmLayerWeights *W, UmBuf *h, int rows, const gint32 *pos,
        UmBuf *q, GError **error)
{
  return matmul (fw, h, rows, L->wq, &W->wq, q, error)
         && finish_qk (fw, q, rows, pos, W->n_heads, L->bq, L->q_norm, error);
}

/* k and v of @rows normalized rows @h. */
static gboolean
kv_proj (UmForward *fw, const DevLayer *L, const UmLayerWeights *W, UmBuf *h, int rows, const gint32 *pos,
         UmBuf *k, UmBuf *v, GError **error)
{
  const int kvd = W->n_kv_heads * fw->model->cfg.head_dim;

  return matmul (fw, h, rows, L->wk, &W->wk, k, error)
         && matmul (fw, h, rows, L->wv, &W->wv, v, error)
         && (L->bv == NULL || fw->be->ops->add_bias (fw->be, v, rows, kvd, L->bv, error))
         && finish_qk (fw, k, rows, pos, W->n_kv_heads, L->bk, L->k_norm, error);
}

/* Block-causal attention: how many keys (from position 0) each of @n query
 * rows at positions @pos sees in a window of @seq_len: its block's end.
 * NULL (every key) when the model or the generation has no blocks. */
static gint32 *
kv_lengths (const UmForward *fw, const gint32 *pos, int n, int seq_len)
{
  const int B = fw->attn_block;
  gint32 *len;

  if (!fw->model->cfg.block_causal || B <= 0)
    return NULL;
  len = g_new (gint32, MAX (n, 1));
  for (int i = 0; i < n; i++)
    len[i] = (gint32) MIN ((gint64) seq_len, ((gint64) pos[i] / B + 1) * B);
  return len;
}

/* Work the backend may record once and replay (um-backend.h's segments):
 * @fn's ops, under @key (0: never recorded). A recording that could not be
 * made or replayed runs @fn again, as usual; the stats count it once. */
typedef gboolean (*SegmentFn) (UmForward *fw, gpointer data, GError **error);

static gboolean
in_segment (UmForward *fw, guint64 key, SegmentFn fn, gpointer data, GError **error)
{
  const UmBackendOps *ops = fw->be->ops;
  gboolean redo = TRUE;

  if (key == 0 || ops->segment_begin == NULL)
    return fn (fw, data, error);
  while (redo)
    {
      const UmForwardStats snap = fw->stats;
      g_autoptr(GError) end_error = NULL;
      gboolean ok;

      if (!ops->segment_begin (fw->be, key, error))
        return FALSE;
      ok = fn (fw, data, error);
      if (!ops->segment_end (fw->be, !ok, &redo, &end_error))
        {
          if (ok)
            g_propagate_error (error, g_steal_pointer (&end_error));
          return FALSE;
        }
      if (!ok)
        return FALSE;
      if (redo)
        fw->stats = snap;
    }
  return TRUE;
}

/* Whether a pass's fixed-shape part may be recorded: not while layers or
 * experts come from the host, or the token rows are decoded there (those
 * wait on copies between ops). */
static gboolean
recordable (const UmForward *fw)
{
  return !streaming (fw) && fw->experts == NULL && !fw->opts.embed_on_host
         && (fw->model->cfg.n_experts == 0 || fw->be->ops->moe != NULL);
}

/* A key for a pass's recorded part: the forward, the pass's kind and
 * shape; the backend checks the rest (every op's buffers and sizes). */
static guint64
segment_key (const UmForward *fw, int kind, int n_seq, int seq_len, int start, int end, int n_layers,
             gboolean keep_kv)
{
  const gint64 v[] = { (gint64) (uintptr_t) fw, kind, n_seq, seq_len, start, end, n_layers, keep_kv, fw->attn_block };
  guint64 h = 1469598103934665603ull;

  if (!recordable (fw))
    return 0;
  for (gsize i = 0; i < sizeof v; i++)
    h = (h ^ ((const guint8 *) v)[i]) * 1099511628211ull;
  return h | 1;   /* never 0 */
}

/* A full pass's layers and what they need. */
typedef struct {
  UmBuf        **b;
  const gint32  *ids;
  int            n_seq, seq_len, T;
  const gint32  *rows;      /* requested rows (NULL: all) */
  int            n;
  gboolean       keep_kv;
  const gint32  *pos, *seq, *sel_pos, *sel_seq, *kv_all, *kv_sel;
  GCancellable  *cancellable;
  guint          l0, l1;    /* the layers to run */
  gboolean       embed;     /* the token rows first */
} FullPass;

static gboolean
full_layers (UmForward *fw, gpointer data, GError **error)
{
  FullPass *a = data;
  const UmModelConfig *c = &fw->model->cfg;
  const UmBackendOps *ops = fw->be->ops;
  UmBackend *be = fw->be;
  UmBuf **b = a->b;
  const int T = a->T, n = a->n, seq_len = a->seq_len;
  const int D = c->d_model, hd = c->head_dim;
  const float eps = (float) c->rms_eps;
  const gboolean subset = a->rows != NULL;

  if (a->embed && (fw->opts.embed_on_host ? !embed_host (fw, a->ids, T, b[SLOT_X], error)
                                          : !ops->embed (be, fw->tok_embd, a->ids, T, b[SLOT_X], error)))
    return FALSE;

  for (guint l = a->l0; l < a->l1; l++)
    {
      const UmLayerWeights *W = &fw->model->layers[l];
      const int H = W->n_heads, Hkv = W->n_kv_heads;
      /* In the last layer only the requested rows feed the output: keys and
       * values still need every row, queries, attention output and MLP only
       * the requested ones. */
      const gboolean last = subset && l + 1 == c->n_layers;
      const int m = last ? n : T;
      UmBuf *xr = last ? b[SLOT_XS] : b[SLOT_X];
      DevLayer streamed;
      const DevLayer *L = &fw->layers[l];
      /* A refreshing pass writes K and V straight into the cache. */
      UmBuf *kb = a->keep_kv ? fw->kv_views[2 * l] : b[SLOT_K];
      UmBuf *vb = a->keep_kv ? fw->kv_views[2 * l + 1] : b[SLOT_V];

      if (g_cancellable_set_error_if_cancelled (a->cancellable, error))
        return FALSE;
      if (streaming (fw))
        {
          if (!stream_layer (fw, l, &streamed, error))
            return FALSE;
          L = &streamed;
        }

      if (!ops->rms_norm (be, b[SLOT_X], T, D, L->attn_norm, eps, b[SLOT_H], error)
          || !kv_proj (fw, L, W, b[SLOT_H], T, a->pos, kb, vb, error))
        return FALSE;
      if (last)
        {
          /* h is free once k and v exist: reuse it for the selected rows. */
          if (!ops->get_rows (be, b[SLOT_H], D, a->rows, n, b[SLOT_ATT], error)
              || !q_proj (fw, L, W, b[SLOT_ATT], n, a->sel_pos, b[SLOT_Q], error)
              || !ops->get_rows (be, b[SLOT_X], D, a->rows, n, b[SLOT_XS], error))
            return FALSE;
        }
      else if (!q_proj (fw, L, W, b[SLOT_H], T, a->pos, b[SLOT_Q], error))
        return FALSE;
      if (!ops->attention (be, b[SLOT_Q], m, last ? a->sel_seq : a->seq, last ? a->kv_sel : a->kv_all, kb, vb,
                           seq_len, H, Hkv, hd, b[SLOT_ATT], error))
        return FALSE;
      fw->stats.flops += 4.0 * m * (double) seq_len * hd * H;
      if (!matmul (fw, b[SLOT_ATT], m, L->wo, &W->wo, b[SLOT_H], error)
          || !ops->add (be, xr, b[SLOT_H], (size_t) m * D, error)
          || !mlp_rows (fw, L, W, xr, b[SLOT_H], b, m, error))
        return FALSE;
    }
  return TRUE;
}

static gboolean
forward_pass (UmForward *fw, UmBuf **b, const gint32 *ids, int n_seq, int seq_len, const gint32 *rows,
              int n, gboolean keep_kv, const HeadOut *dst, GCancellable *cancellable, GError **error)
{
  const UmModelConfig *c = &fw->model->cfg;
  const int T = n_seq * seq_len;
  const gboolean subset = rows != NULL;
  g_autofree gint32 *index = g_new (gint32, pass_index_count (T, subset ? n : 0));
  gint32 *pos = index, *seq = index + T, *sel_pos = NULL, *sel_seq = NULL;
  g_autofree gint32 *kv_all = NULL, *kv_sel = NULL;
  FullPass a;
  /* The layers before the last one with requested rows have the canvas's
   * shape whatever the rows: recorded once, replayed every step. */
  const guint fixed = subset ? c->n_layers - 1 : c->n_layers;

  for (int t = 0; t < T; t++)
    {
      pos[t] = t % seq_len;
      seq[t] = t / seq_len;
    }
  if (subset)
    {
      sel_pos = seq + T;
      sel_seq = sel_pos + n;
      for (int i = 0; i < n; i++)
        {
          sel_pos[i] = pos[rows[i]];
          sel_seq[i] = seq[rows[i]];
        }
      kv_sel = kv_lengths (fw, sel_pos, n, seq_len);
    }
  kv_all = kv_lengths (fw, pos, T, seq_len);

  a = (FullPass) { b, ids, n_seq, seq_len, T, rows, n, keep_kv, pos, seq, sel_pos, sel_seq, kv_all, kv_sel,
                   cancellable, 0, fixed, TRUE };
  if (!in_segment (fw, segment_key (fw, 1, n_seq, seq_len, 0, seq_len, (int) fixed, keep_kv), full_layers, &a,
                   error))
    return FALSE;
  a.l0 = fixed;
  a.l1 = c->n_layers;
  a.embed = FALSE;
  if (!full_layers (fw, &a, error))
    return FALSE;

  if (g_cancellable_set_error_if_cancelled (cancellable, error))
    return FALSE;
  return head_rows (fw, subset ? b[SLOT_XS] : b[SLOT_X], b[SLOT_H], b[SLOT_LOGITS], n, dst, error);
}

/* Runs @fn (a pass) between the backend's pass bounds, again as long as
 * the backend says its results are not to be used (um-backend.h). */
typedef gboolean (*PassFn) (UmForward *fw, gpointer data, GError **error);

static gboolean
bounded_pass (UmForward *fw, PassFn fn, gpointer data, GError **error)
{
  const UmBackendOps *ops = fw->be->ops;
  gboolean redo = TRUE;

  if (ops->pass_begin == NULL)
    return fn (fw, data, error);
  while (redo)
    {
      const UmForwardStats snap = fw->stats;
      g_autoptr(GError) end_error = NULL;
      gboolean ok;

      if (!ops->pass_begin (fw->be, error))
        return FALSE;
      ok = fn (fw, data, error);
      if (!ops->pass_end (fw->be, &redo, &end_error))
        {
          if (ok)
            g_propagate_error (error, g_steal_pointer (&end_error));
          return FALSE;
        }
      if (!ok)
        return FALSE;
      if (redo)
        fw->stats = snap;
    }
  return TRUE;
}

static gboolean cached_pass (UmForward *fw, UmBuf **b, const gint32 *ids, int n_seq, int seq_len, int start,
                             int end, const gint32 *rows, int n, const HeadOut *dst, GCancellable *cancellable,
                             GError **error);

/* A pass's arguments, for bounded_pass. */
typedef struct {
  UmBuf        **views;
  const gint32  *ids;
  int            n_seq, seq_len;
  int            start, end;    /* cached: the rows computed */
  gboolean       cached;
  const gint32  *rows;
  int            n;
  gboolean       keep_kv;
  const HeadOut *dst;
  GCancellable  *cancellable;
} PassArgs;

static gboolean
pass_fn (UmForward *fw, gpointer data, GError **error)
{
  const PassArgs *p = data;

  if (p->cached)
    return cached_pass (fw, p->views, p->ids, p->n_seq, p->seq_len, p->start, p->end, p->rows, p->n, p->dst,
                        p->cancellable, error);
  return forward_pass (fw, p->views, p->ids, p->n_seq, p->seq_len, p->rows, p->n, p->keep_kv, p->dst,
                       p->cancellable, error);
}

/* A finished pass in the stats: @n_rows rows of logits, started at @t_start. */
/* The start of a pass: its time, and the pool's measurement of it. */
static gint64
pass_begin (UmForward *fw)
{
  fw->pass_flops0 = fw->stats.flops;
  um_pool_epoch_begin ();
  return g_get_monotonic_time ();
}

static gboolean
count_pass (UmForward *fw, int n_rows, gint64 t_start)
{
  um_pool_epoch_end (fw->stats.flops - fw->pass_flops0);
  fw->stats.n_passes++;
  fw->stats.logit_rows += n_rows;
  fw->stats.seconds += (g_get_monotonic_time () - t_start) / 1e6;
  return TRUE;
}

static gboolean
logits_pass (UmForward     *fw,
             const gint32  *ids,
             int            n_seq,
             int            seq_len,
             const gint32  *rows,
             int            n_rows,
             const HeadOut *dst,
             GCancellable  *cancellable,
             GError       **error)
{
  const UmModelConfig *c = &fw->model->cfg;
  const int T = n_seq * seq_len;
  const gboolean subset = rows != NULL;
  const int n = subset ? n_rows : T;
  gint64 t_start = pass_begin (fw);
  UmBuf *views[N_SLOTS] = { NULL };
  ArenaLayout a;
  gboolean ok;

  if (n_seq <= 0 || seq_len <= 0 || (guint) seq_len > c->max_seq_len)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "forward: a canvas of %d × %d tokens is empty or longer than the model's %u",
                   n_seq, seq_len, c->max_seq_len);
      return FALSE;
    }
  for (int i = 0; subset && i < n_rows; i++)
    if (rows[i] < 0 || rows[i] >= T || (i > 0 && rows[i] <= rows[i - 1]))
      {
        g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                     "forward: requested rows must be ascending and inside the canvas (row %d)", rows[i]);
        return FALSE;
      }
  if (n == 0)
    return TRUE;
  /* All rows asked for one by one are the whole canvas. */
  if (subset && n == T)
    rows = NULL;

  arena_layout (fw->model, n_seq, seq_len, n, fw->opts.row_chunk, fw->be->ops->moe != NULL, &a);
  ok = carve (fw, &a, views, error)
       && bounded_pass (fw, pass_fn, &(PassArgs) { views, ids, n_seq, seq_len, 0, 0, FALSE, rows, n, FALSE, dst,
                                                   cancellable }, error);
  free_views (fw, views, N_SLOTS);
  return ok && count_pass (fw, n, t_start);
}

gboolean
um_forward_logits (UmForward     *fw,
                   const gint32  *ids,
                   int            n_seq,
                   int            seq_len,
                   const gint32  *rows,
                   int            n_rows,
                   float         *logits,
                   GCancellable  *cancellable,
                   GError       **error)
{
  const HeadOut dst = { .logits = logits };
  return logits_pass (fw, ids, n_seq, seq_len, rows, n_rows, &dst, cancellable, error);
}

/* The cache's buffer at least @bytes long; its views go with the old one. */
static gboolean
grow_kv (UmForward *fw, size_t bytes, GError **error)
{
  if (fw->kv != NULL && fw->kv_bytes >= bytes)
    return TRUE;
  free_kv (fw);
  fw->kv = fw->be->ops->buf_alloc (fw->be, bytes, error);
  if (fw->kv == NULL)
    return FALSE;
  fw->kv_bytes = bytes;
  return TRUE;
}

/* The cache for @rows canvas rows: one buffer, a K and a V view per layer.
 * A buffer reserved for a longer canvas is reused. */
static gboolean
ensure_kv (UmForward *fw, int rows, GError **error)
{
  const UmModelConfig *c = &fw->model->cfg;
  const size_t per = kv_view_bytes (fw->model, rows);
  const UmBackendOps *ops = fw->be->ops;

  if (fw->kv != NULL && fw->kv_views != NULL && fw->kv_rows == rows)
    return TRUE;
  if (!grow_kv (fw, kv_cache_bytes (fw->model, rows), error))
    return FALSE;
  free_kv_views (fw);
  fw->kv_views = g_new0 (UmBuf *, 2 * c->n_layers);
  for (guint i = 0; i < 2 * c->n_layers; i++)
    if ((fw->kv_views[i] = ops->buf_view (fw->be, fw->kv, i * per, per, error)) == NULL)
      {
        free_kv (fw);
        return FALSE;
      }
  fw->kv_rows = rows;
  return TRUE;
}

gboolean
um_forward_reserve (UmForward *fw, const UmForwardShape *shape, GError **error)
{
  UmForwardBytes b;

  um_forward_bytes (fw->model, &fw->opts, shape, &b);
  if (!grow_arena (fw, b.arena, error) || (b.kv_cache > 0 && !grow_kv (fw, b.kv_cache, error)))
    return FALSE;
  /* MoE: the router's logits of the largest chunk, now rather than in the
   * first pass (the plan counts them in host_index), and the host buffers
   * of experts off the device. */
  if (fw->model->cfg.n_experts > 0)
    {
      const int chunk = chunk_rows (shape->n_seq * shape->seq_len, fw->opts.row_chunk);
      if (!host_router (fw, (size_t) chunk * fw->model->cfg.n_experts, error)
          || (fw->experts != NULL
              && !um_forward_experts_reserve (fw->experts, shape->n_seq * shape->seq_len, chunk, error)))
        return FALSE;
    }
  if (b.host_logits / sizeof (float) > fw->host_logits_floats)
    {
      g_free (fw->host_logits);
      fw->host_logits = g_try_malloc (b.host_logits);
      fw->host_logits_floats = fw->host_logits != NULL ? b.host_logits / sizeof (float) : 0;
      if (fw->host_logits == NULL)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY, "out of host memory for the logits (%.1f MiB)",
                       b.host_logits / 1048576.0);
          return FALSE;
        }
    }
  return TRUE;
}

/* A cached step's layers and what they need. */
typedef struct {
  UmBuf        **b;
  const gint32  *sub_ids, *pos, *seq, *kv_len;
  int            n_seq, seq_len, start, len, m;
  GCancellable  *cancellable;
} CachedPass;

static gboolean
cached_layers (UmForward *fw, gpointer data, GError **error)
{
  CachedPass *a = data;
  const UmModelConfig *c = &fw->model->cfg;
  const UmBackendOps *ops = fw->be->ops;
  UmBackend *be = fw->be;
  UmBuf **b = a->b;
  const int len = a->len, m = a->m, seq_len = a->seq_len, start = a->start;
  const int D = c->d_model, hd = c->head_dim;
  const size_t kvd_bytes = (size_t) c->n_kv_heads * hd * sizeof (float);
  const float eps = (float) c->rms_eps;
  gboolean ok = TRUE;

  if (fw->opts.embed_on_host ? !embed_host (fw, a->sub_ids, m, b[SLOT_X], error)
                             : !ops->embed (be, fw->tok_embd, a->sub_ids, m, b[SLOT_X], error))
    return FALSE;

  for (guint l = 0; l < c->n_layers && ok; l++)
    {
      const UmLayerWeights *W = &fw->model->layers[l];
      const int H = W->n_heads, Hkv = W->n_kv_heads;
      DevLayer streamed;
      const DevLayer *L = &fw->layers[l];

      if (g_cancellable_set_error_if_cancelled (a->cancellable, error))
        return FALSE;
      if (streaming (fw))
        {
          if (!stream_layer (fw, l, &streamed, error))
            return FALSE;
          L = &streamed;
        }
      if (!ops->rms_norm (be, b[SLOT_X], m, D, L->attn_norm, eps, b[SLOT_H], error)
          || !q_proj (fw, L, W, b[SLOT_H], m, a->pos, b[SLOT_Q], error))
        return FALSE;
      /* Each sequence's rows are contiguous in the cache: their fresh K and
       * V are computed straight into it. */
      for (int s = 0; s < a->n_seq && ok; s++)
        {
          UmBuf *v[4] = { NULL, NULL, NULL, NULL };
          size_t off = ((size_t) s * seq_len + start) * kvd_bytes;
          v[0] = ops->buf_view (be, b[SLOT_H], (size_t) s * len * D * sizeof (float), (size_t) len * D * sizeof (float),
                                error);
          v[1] = v[0] ? ops->buf_view (be, fw->kv_views[2 * l], off, len * kvd_bytes, error) : NULL;
          v[2] = v[1] ? ops->buf_view (be, fw->kv_views[2 * l + 1], off, len * kvd_bytes, error) : NULL;
          ok = v[2] != NULL && kv_proj (fw, L, W, v[0], len, a->pos + s * len, v[1], v[2], error);
          free_views (fw, v, 4);
        }
      ok = ok
           && ops->attention (be, b[SLOT_Q], m, a->seq, a->kv_len, fw->kv_views[2 * l], fw->kv_views[2 * l + 1],
                              seq_len, H, Hkv, hd, b[SLOT_ATT], error)
           && matmul (fw, b[SLOT_ATT], m, L->wo, &W->wo, b[SLOT_H], error)
           && ops->add (be, b[SLOT_X], b[SLOT_H], (size_t) m * D, error)
           && mlp_rows (fw, L, W, b[SLOT_X], b[SLOT_H], b, m, error);
      fw->stats.flops += 4.0 * m * (double) seq_len * hd * H;
    }
  return ok;
}

/* A step inside a block with the cache: only the rows [start, end) of each
 * sequence run through the layers; their K and V replace the cached ones,
 * and attention reads the whole cached canvas. The layers have the same
 * shape every step of every block: recorded once, replayed after. */
static gboolean
cached_pass (UmForward *fw, UmBuf **b, const gint32 *ids, int n_seq, int seq_len, int start, int end,
             const gint32 *rows, int n, const HeadOut *dst, GCancellable *cancellable, GError **error)
{
  const UmModelConfig *c = &fw->model->cfg;
  const UmBackendOps *ops = fw->be->ops;
  const int len = end - start, m = n_seq * len;
  const int D = c->d_model;
  g_autofree gint32 *index = g_new (gint32, cached_index_count (m, n));
  gint32 *sub_ids = index, *pos = index + m, *seq = index + 2 * m, *sel = index + 3 * m;
  g_autofree gint32 *kv_len = NULL;
  CachedPass a;

  for (int i = 0; i < m; i++)
    {
      int s = i / len, p = start + i % len;
      sub_ids[i] = ids[s * seq_len + p];
      pos[i] = p;
      seq[i] = s;
    }
  /* Requested rows as indices into the computed rows. */
  for (int i = 0; i < n; i++)
    {
      int s = rows[i] / seq_len, p = rows[i] % seq_len;
      if (p < start || p >= end)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                       "forward: row %d is outside the rows this cached step computes", rows[i]);
          return FALSE;
        }
      sel[i] = s * len + (p - start);
    }
  kv_len = kv_lengths (fw, pos, m, seq_len);

  a = (CachedPass) { b, sub_ids, pos, seq, kv_len, n_seq, seq_len, start, len, m, cancellable };
  if (!in_segment (fw, segment_key (fw, 2, n_seq, seq_len, start, end, (int) c->n_layers, FALSE), cached_layers, &a,
                   error)
      || g_cancellable_set_error_if_cancelled (cancellable, error))
    return FALSE;
  if (n == m)
    return head_rows (fw, b[SLOT_X], b[SLOT_H], b[SLOT_LOGITS], n, dst, error);
  return ops->get_rows (fw->be, b[SLOT_X], D, sel, n, b[SLOT_XS], error)
         && head_rows (fw, b[SLOT_XS], b[SLOT_H], b[SLOT_LOGITS], n, dst, error);
}

static gboolean
logits_pass_cached (UmForward     *fw,
                    const gint32  *ids,
                    int            n_seq,
                    int            seq_len,
                    int            block_start,
                    int            block_end,
                    gboolean       refresh,
                    gboolean       dual,
                    const gint32  *rows,
                    int            n_rows,
                    const HeadOut *dst,
                    GCancellable  *cancellable,
                    GError       **error)
{
  const UmModelConfig *c = &fw->model->cfg;
  const int T = n_seq * seq_len;
  gint64 t_start = pass_begin (fw);
  UmBuf *views[N_SLOTS] = { NULL };
  ArenaLayout a;
  gboolean ok;
  int end, m;

  if (n_seq <= 0 || seq_len <= 0 || (guint) seq_len > c->max_seq_len || block_start < 0
      || block_end <= block_start || block_end > seq_len || rows == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "forward: block [%d, %d) of a %d × %d canvas is not a block, or no rows were asked for",
                   block_start, block_end, n_seq, seq_len);
      return FALSE;
    }
  for (int i = 0; i < n_rows; i++)
    if (rows[i] < 0 || rows[i] >= T || (i > 0 && rows[i] <= rows[i - 1]))
      {
        g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                     "forward: requested rows must be ascending and inside the canvas (row %d)", rows[i]);
        return FALSE;
      }
  if (n_rows == 0)
    return TRUE;
  if (!refresh && fw->kv_rows != T)
    refresh = TRUE;   /* nothing cached for this canvas yet */

  if (refresh)
    {
      if (!ensure_kv (fw, T, error))
        return FALSE;
      arena_layout (fw->model, n_seq, seq_len, n_rows, fw->opts.row_chunk, fw->be->ops->moe != NULL, &a);
      ok = carve (fw, &a, views, error)
           && bounded_pass (fw, pass_fn, &(PassArgs) { views, ids, n_seq, seq_len, 0, 0, FALSE,
                                                       n_rows == T ? NULL : rows, n_rows, TRUE, dst, cancellable },
                            error);
    }
  else
    {
      end = dual ? block_end : seq_len;
      m = n_seq * (end - block_start);
      arena_layout (fw->model, 1, m, n_rows, fw->opts.row_chunk, fw->be->ops->moe != NULL, &a);
      ok = carve (fw, &a, views, error)
           && bounded_pass (fw, pass_fn, &(PassArgs) { views, ids, n_seq, seq_len, block_start, end, TRUE, rows,
                                                       n_rows, FALSE, dst, cancellable }, error);
    }
  free_views (fw, views, N_SLOTS);
  return ok && count_pass (fw, n_rows, t_start);
}

gboolean
um_forward_logits_cached (UmForward     *fw,
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
                          GError       **error)
{
  const HeadOut dst = { .logits = logits };
  return logits_pass_cached (fw, ids, n_seq, seq_len, block_start, block_end, refresh, dual, rows, n_rows, &dst,
                             cancellable, error);
}

/* Whether @rule's choice over @n_rows rows runs on the backend: it needs
 * the op and, with guidance, both halves in one LM-head chunk (the host
 * combines them otherwise). Sets the HeadOut to fill either way. */
static gboolean
choose_setup (UmForward *fw, int n_rows, const UmChooseRule *rule, const gint32 *positions, gint32 *out_ids,
              double *out_conf, HeadOut *dst, GError **error)
{
  const gboolean guided = rule->cfg_scale > 0.0;
  const size_t V = fw->model->cfg.vocab_size;
  size_t floats;

  if (guided && n_rows % 2 != 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "forward: guidance needs as many unconditional rows as conditional ones (%d rows)", n_rows);
      return FALSE;
    }
  memset (dst, 0, sizeof *dst);
  dst->rule = rule;
  dst->positions = positions;
  dst->ids = out_ids;
  dst->conf = out_conf;
  floats = host_logit_floats (fw->model, &fw->opts, fw->be->ops->choose != NULL, guided, n_rows);
  if (floats == 0)
    return TRUE;
  if (floats > fw->host_logits_floats)
    {
      g_free (fw->host_logits);
      fw->host_logits = g_try_malloc (floats * sizeof (float));
      fw->host_logits_floats = fw->host_logits != NULL ? floats : 0;
      if (fw->host_logits == NULL)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY, "out of memory for %d × %zu logits", n_rows, V);
          return FALSE;
        }
    }
  dst->logits = fw->host_logits;
  return TRUE;
}

static void
choose_on_host (UmForward *fw, int n_rows, const HeadOut *dst)
{
  if (dst->logits != NULL && n_rows > 0)
    um_choose_rows (dst->logits, dst->rule->cfg_scale > 0.0 ? n_rows / 2 : n_rows,
                    (int) fw->model->cfg.vocab_size, dst->rule, dst->positions, dst->ids, dst->conf);
}

gboolean
um_forward_choose (UmForward          *fw,
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
                   GError            **error)
{
  HeadOut dst;

  if (rows == NULL)
    n_rows = n_seq * seq_len;
  if (!choose_setup (fw, n_rows, rule, positions, out_ids, out_conf, &dst, error)
      || !logits_pass (fw, ids, n_seq, seq_len, rows, n_rows, &dst, cancellable, error))
    return FALSE;
  choose_on_host (fw, n_rows, &dst);
  return TRUE;
}

gboolean
um_forward_choose_cached (UmForward          *fw,
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
                          GError            **error)
{
  HeadOut dst;

  if (!choose_setup (fw, n_rows, rule, positions, out_ids, out_conf, &dst, error)
      || !logits_pass_cached (fw, ids, n_seq, seq_len, block_start, block_end, refresh, dual, rows, n_rows, &dst,
                              cancellable, error))
    return FALSE;
  choose_on_host (fw, n_rows, &dst);
  return TRUE;
}

void
um_forward_set_attention_block (UmForward *fw, int block_length)
{
  fw->attn_block = MAX (block_length, 0);
}

static gboolean
logits_pass_window (UmForward     *fw,
                    const gint32  *ids,
                    int            canvas,
                    int            window,
                    int            start,
                    const gint32  *rows,
                    int            n_rows,
                    const HeadOut *dst,
                    GCancellable  *cancellable,
                    GError       **error)
{
  const UmModelConfig *c = &fw->model->cfg;
  gint64 t_start = pass_begin (fw);
  UmBuf *views[N_SLOTS] = { NULL };
  ArenaLayout a;
  gboolean ok;

  if (window <= 0 || window > canvas || (guint) canvas > c->max_seq_len || start < 0 || start >= window
      || rows == NULL || n_rows <= 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "forward: window %d from %d of a %d-token canvas is not a window, or no rows were asked for",
                   window, start, canvas);
      return FALSE;
    }
  for (int i = 0; i < n_rows; i++)
    if (rows[i] < start || rows[i] >= window || (i > 0 && rows[i] <= rows[i - 1]))
      {
        g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                     "forward: requested rows must be ascending and inside the computed part [%d, %d) (row %d)",
                     start, window, rows[i]);
        return FALSE;
      }
  /* Nothing kept for a canvas of this length: compute everything. */
  if (fw->kv == NULL || fw->kv_views == NULL || fw->kv_rows != canvas)
    {
      if (!ensure_kv (fw, canvas, error))
        return FALSE;
      start = 0;
    }
  if (start == 0)
    {
      arena_layout (fw->model, 1, window, n_rows, fw->opts.row_chunk, fw->be->ops->moe != NULL, &a);
      ok = carve (fw, &a, views, error)
           && bounded_pass (fw, pass_fn, &(PassArgs) { views, ids, 1, window, 0, 0, FALSE,
                                                       n_rows == window ? NULL : rows, n_rows, TRUE, dst, cancellable },
                            error);
    }
  else
    {
      arena_layout (fw->model, 1, window - start, n_rows, fw->opts.row_chunk, fw->be->ops->moe != NULL, &a);
      ok = carve (fw, &a, views, error)
           && bounded_pass (fw, pass_fn, &(PassArgs) { views, ids, 1, window, start, window, TRUE, rows, n_rows, FALSE,
                                                       dst, cancellable }, error);
    }
  free_views (fw, views, N_SLOTS);
  return ok && count_pass (fw, n_rows, t_start);
}

gboolean
um_forward_choose_window (UmForward          *fw,
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
                          GError            **error)
{
  HeadOut dst;

  if (rule->cfg_scale > 0.0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "forward: a window pass has no guidance");
      return FALSE;
    }
  if (!choose_setup (fw, n_rows, rule, positions, out_ids, out_conf, &dst, error)
      || !logits_pass_window (fw, ids, canvas, window, start, rows, n_rows, &dst, cancellable, error))
    return FALSE;
  choose_on_host (fw, n_rows, &dst);
  return TRUE;
}

UmLayerStore *
um_forward_get_expert_store (UmForward *fw)
{
  return um_forward_experts_get_store (fw->experts);
}

UmBackend *
um_forward_get_host_backend (UmForward *fw)
{
  return um_forward_experts_get_host (fw->experts);
}

const UmForwardStats *
um_forward_get_stats (UmForward *fw)
{
  return &fw->stats;
}

void
um_forward_reset_stats (UmForward *fw)
{
  memset (&fw->stats, 0, sizeof fw->stats);
}

UmModel *
um_forward_get_model (UmForward *fw)
{
  return fw->model;
}

UmBackend *
um_forward_get_backend (UmForward *fw)
{
  return fw->be;
}

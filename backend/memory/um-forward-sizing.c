/* um-forward-sizing.c — what a forward holds (um-forward-sizing.h): the
 * forward's allocation and the plan's prediction are this one arithmetic.
 * Moved here from engine/um-forward.c and engine/um-forward-experts.c so
 * that the plan (memory/) reaches nothing of the engine. */
#include "um-forward-sizing.h"

#include <string.h>

#include "um-enum.h"
#include "um-expert-store.h"
#include "um-moe.h"
#include "um-moe-work.h"

/* Experts' slots when the options leave them to us. */
#define DEFAULT_EXPERT_SLOTS 2
/* Alignment of HOST's work buffers in their host arena. */
#define EXPERT_WORK_ALIGN 256

void
um_forward_options_init (UmForwardOptions *options)
{
  memset (options, 0, sizeof *options);
}

guint
um_forward_expert_slots (const UmForwardOptions *options)
{
  return options->expert_slots >= 2 ? options->expert_slots : DEFAULT_EXPERT_SLOTS;
}

static const char *const placement_names[UM_EXPERTS_N_PLACEMENTS] = { "auto", "resident", "host", "fetch" };

UM_ENUM_STRINGS (UmExpertPlacement, um_expert_placement_to_string, um_expert_placement_from_string, placement_names,
                 TRUE)

gboolean
um_forward_embed_on_host (const UmModel *model, const UmForwardOptions *o)
{
  return o != NULL && o->embed_on_host && !model->cfg.tied_embeddings;
}

/* ---- the weights on the device ---- */

guint
um_forward_max_device_weights (const UmModel *model)
{
  return 3 + 20 * model->cfg.n_layers;
}

guint
um_forward_device_weights (const UmModel *model, const UmForwardOptions *o, UmForwardWeightRef *out)
{
  const UmModelConfig *c = &model->cfg;
  guint n = 0;

#define ADD(src_, role_, layer_, kind_) G_STMT_START { \
    out[n].src = (src_); out[n].role = (role_); out[n].layer = (layer_); out[n].kind = (kind_); \
    out[n].n_experts = 0; n++; } G_STMT_END
  /* Small tensors the family or layer may lack. */
#define ADD_OPT(src_, role_, layer_) G_STMT_START { \
    if ((src_)->data != NULL) ADD (src_, role_, layer_, UM_FORWARD_WEIGHT_NORM); } G_STMT_END
  if (!o->embed_on_host)
    ADD (&model->tok_embd, UM_FORWARD_W_TOK_EMBD, 0, UM_FORWARD_WEIGHT_EMBED);
  ADD (&model->out_norm, UM_FORWARD_W_OUT_NORM, 0, UM_FORWARD_WEIGHT_NORM);
  if (!c->tied_embeddings)
    ADD (&model->output, UM_FORWARD_W_OUTPUT, 0, UM_FORWARD_WEIGHT_HEAD);
  for (guint l = 0; l < c->n_layers; l++)
    {
      const UmLayerWeights *src = &model->layers[l];
      ADD (&src->attn_norm, UM_FORWARD_W_ATTN_NORM, l, UM_FORWARD_WEIGHT_NORM);
      ADD (&src->ffn_norm, UM_FORWARD_W_FFN_NORM, l, UM_FORWARD_WEIGHT_NORM);
      ADD_OPT (&src->bq, UM_FORWARD_W_BQ, l);
      ADD_OPT (&src->bk, UM_FORWARD_W_BK, l);
      ADD_OPT (&src->bv, UM_FORWARD_W_BV, l);
      ADD_OPT (&src->q_norm, UM_FORWARD_W_Q_NORM, l);
      ADD_OPT (&src->k_norm, UM_FORWARD_W_K_NORM, l);
      ADD_OPT (&src->router, UM_FORWARD_W_ROUTER, l);
      ADD_OPT (&src->router_bias, UM_FORWARD_W_ROUTER_BIAS, l);
      if (o->stream_slots > 0)
        continue;
      ADD (&src->wq, UM_FORWARD_W_WQ, l, UM_FORWARD_WEIGHT_LAYER);
      ADD (&src->wk, UM_FORWARD_W_WK, l, UM_FORWARD_WEIGHT_LAYER);
      ADD (&src->wv, UM_FORWARD_W_WV, l, UM_FORWARD_WEIGHT_LAYER);
      ADD (&src->wo, UM_FORWARD_W_WO, l, UM_FORWARD_WEIGHT_LAYER);
      if (src->n_experts > 0)
        {
          /* One device weight per expert slice: the products run per expert
           * (off the device, engine/um-forward-experts.c holds them). */
          for (int i = 0; i < 3 && !um_forward_experts_off_device (model, o); i++)
            {
              const UmWeight *m = i == 0 ? &src->w_gate : i == 1 ? &src->w_up : &src->w_down;
              ADD (m, (UmForwardWeightRole) (UM_FORWARD_W_EXPERTS_GATE + i), l, UM_FORWARD_WEIGHT_LAYER);
              out[n - 1].n_experts = src->n_experts;
            }
          if (src->shared_ffn > 0)
            {
              ADD (&src->sh_gate, UM_FORWARD_W_SH_GATE, l, UM_FORWARD_WEIGHT_LAYER);
              ADD (&src->sh_up, UM_FORWARD_W_SH_UP, l, UM_FORWARD_WEIGHT_LAYER);
              ADD (&src->sh_down, UM_FORWARD_W_SH_DOWN, l, UM_FORWARD_WEIGHT_LAYER);
            }
          continue;
        }
      ADD (&src->w_gate, UM_FORWARD_W_W_GATE, l, UM_FORWARD_WEIGHT_LAYER);
      ADD (&src->w_up, UM_FORWARD_W_W_UP, l, UM_FORWARD_WEIGHT_LAYER);
      ADD (&src->w_down, UM_FORWARD_W_W_DOWN, l, UM_FORWARD_WEIGHT_LAYER);
    }
#undef ADD_OPT
#undef ADD
  return n;
}

guint64
um_forward_weight_bytes (const UmWeight *w)
{
  return w->rows * w->row_bytes;
}

/* ---- the work arena, the KV cache and the host buffers ---- */

int
um_forward_chunk_rows (int rows, int row_chunk)
{
  return row_chunk > 0 ? MIN (rows, row_chunk) : rows;
}

void
um_forward_arena_layout (const UmModel *model, int n_seq, int seq_len, int n_rows, int row_chunk,
                         gboolean device_moe, UmArenaLayout *a)
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
  const size_t chunk = um_forward_chunk_rows ((int) T, row_chunk);
  const size_t floats[UM_ARENA_N_SLOTS] = {
    [UM_ARENA_X] = T * D,
    [UM_ARENA_H] = T * MAX (D, QD),
    [UM_ARENA_Q] = T * QD,
    [UM_ARENA_K] = T * KVD,
    [UM_ARENA_V] = T * KVD,
    [UM_ARENA_ATT] = T * QD,
    [UM_ARENA_GATE] = um_forward_chunk_rows ((int) T, row_chunk) * F,
    [UM_ARENA_UP] = um_forward_chunk_rows ((int) T, row_chunk) * F,
    [UM_ARENA_XS] = subset ? (size_t) n_rows * D : 0,
    [UM_ARENA_LOGITS] = um_forward_chunk_rows (n_rows, row_chunk) * V,
    [UM_ARENA_ROUTER] = moe ? chunk * c->n_experts : 0,
    [UM_ARENA_EX] = moe ? chunk * D : 0,
    [UM_ARENA_EY] = moe ? chunk * D : 0,
  };

  const size_t moe_bytes = moe && device_moe
                             ? um_moe_work_layout ((int) chunk, (int) c->n_experts, (int) c->n_experts_used,
                                                   (int) D, (int) c->expert_ffn, NULL, NULL)
                             : 0;

  a->total = 0;
  for (int s = 0; s < UM_ARENA_N_SLOTS; s++)
    {
      a->offset[s] = a->total;
      a->bytes[s] = s == UM_ARENA_MOE ? moe_bytes : floats[s] * sizeof (float);
      a->total += (a->bytes[s] + UM_ARENA_ALIGN - 1) / UM_ARENA_ALIGN * UM_ARENA_ALIGN;
    }
}

size_t
um_forward_kv_view_bytes (const UmModel *model, int rows)
{
  return (size_t) rows * model->cfg.n_kv_heads * model->cfg.head_dim * sizeof (float);
}

size_t
um_forward_kv_cache_bytes (const UmModel *model, int rows)
{
  return 2 * um_forward_kv_view_bytes (model, rows) * model->cfg.n_layers;
}

size_t
um_forward_host_logit_floats (const UmModel *model, const UmForwardOptions *o, gboolean backend_chooses,
                              gboolean guided, int n_rows)
{
  if (backend_chooses && (!guided || um_forward_chunk_rows (n_rows, o->row_chunk) == n_rows))
    return 0;
  return (size_t) n_rows * model->cfg.vocab_size;
}

size_t
um_forward_host_rows_bytes (const UmModel *model, int n)
{
  return (size_t) n * model->tok_embd.cols * sizeof (float) + model->tok_embd.row_bytes;
}

size_t
um_forward_pass_index_count (int T, int n)
{
  return (size_t) 2 * T + 2 * n;
}

size_t
um_forward_cached_index_count (int m, int n)
{
  return (size_t) 3 * m + n;
}

/* ---- routed experts off the device ---- */

gboolean
um_forward_experts_off_device (const UmModel *model, const UmForwardOptions *o)
{
  return o != NULL && model->cfg.n_experts > 0 && (o->experts == UM_EXPERTS_HOST || o->experts == UM_EXPERTS_FETCH);
}

gboolean
um_forward_experts_use_slots (const UmForwardOptions *o)
{
  return o->experts == UM_EXPERTS_FETCH || o->expert_zstd;
}

/* The widest expert of any layer: the work buffers' F. */
static size_t
expert_ffn (const UmModel *model)
{
  size_t F = 0;
  for (guint l = 0; l < model->cfg.n_layers; l++)
    if (model->layers[l].n_experts > 0)
      F = MAX (F, model->layers[l].ffn);
  return F;
}

void
um_forward_experts_work_layout (const UmModel *model, int rows, int chunk, UmExpertWorkLayout *w)
{
  const size_t D = model->cfg.d_model, F = expert_ffn (model);
  const size_t floats[UM_EXPERT_WORK_N] = { rows * D, chunk * D, chunk * F, chunk * F, chunk * D };

  w->total = 0;
  for (int i = 0; i < UM_EXPERT_WORK_N; i++)
    {
      w->offset[i] = w->total;
      w->bytes[i] = floats[i] * sizeof (float);
      w->total += (w->bytes[i] + EXPERT_WORK_ALIGN - 1) / EXPERT_WORK_ALIGN * EXPERT_WORK_ALIGN;
    }
}

void
um_forward_experts_bytes (const UmModel *model, const UmForwardOptions *o, int rows, int chunk,
                          UmForwardBytes *out)
{
  UmExpertWorkLayout w;

  if (!um_forward_experts_off_device (model, o))
    return;
  /* The active experts and a group's rows (the host copy itself is the
   * plan's: um_expert_store_predict_bytes ()). */
  out->host_expert_work = (guint64) model->cfg.n_experts * sizeof (gint32) + (guint64) chunk * sizeof (gint32);
  if (o->experts == UM_EXPERTS_FETCH)
    {
      out->expert_slots = (guint64) um_forward_expert_slots (o) * um_expert_slot_bytes (model);
      return;
    }
  um_forward_experts_work_layout (model, rows, chunk, &w);
  out->host_expert_work += w.total + (guint64) rows * model->cfg.d_model * sizeof (float);
  if (o->expert_zstd)
    out->host_expert_work += (guint64) um_forward_expert_slots (o) * um_expert_slot_bytes (model);
}

/* ---- all of it for a shape ---- */

void
um_forward_bytes (const UmModel          *model,
                  const UmForwardOptions *options,
                  const UmForwardShape   *shape,
                  UmForwardBytes         *out)
{
  UmForwardOptions o;
  g_autofree UmForwardWeightRef *refs = g_new (UmForwardWeightRef, um_forward_max_device_weights (model));
  const int T = shape->n_seq * shape->seq_len;
  const int n = MIN (shape->n_rows, T);
  UmArenaLayout a;
  guint n_refs;

  memset (out, 0, sizeof *out);
  um_forward_options_init (&o);
  if (options != NULL)
    o = *options;
  o.embed_on_host = um_forward_embed_on_host (model, options);
  n_refs = um_forward_device_weights (model, &o, refs);
  for (guint i = 0; i < n_refs; i++)
    {
      guint64 b = um_forward_weight_bytes (refs[i].src);
      switch (refs[i].kind)
        {
        case UM_FORWARD_WEIGHT_EMBED: out->embedding += b; break;
        case UM_FORWARD_WEIGHT_NORM: out->norms += b; break;
        case UM_FORWARD_WEIGHT_HEAD: out->head += b; break;
        case UM_FORWARD_WEIGHT_LAYER: out->layers += b; break;
        default: break;
        }
    }
  if (o.stream_slots > 0)
    out->stream_slots = (guint64) o.stream_slots * um_layer_slot_bytes (model);
  /* A cached step runs at most the whole canvas (m ≤ T rows) with the same
   * requested rows, and the layout grows with both: the full pass is the
   * largest. */
  um_forward_arena_layout (model, shape->n_seq, shape->seq_len, n, o.row_chunk, shape->backend_moe, &a);
  out->arena = a.total;
  if (shape->kv_cache)
    out->kv_cache = um_forward_kv_cache_bytes (model, T);
  if (o.embed_on_host)
    out->host_embedding = um_forward_host_rows_bytes (model, T);
  out->host_logits = um_forward_host_logit_floats (model, &o, shape->backend_chooses, shape->guided, n) * sizeof (float);
  out->host_index = MAX (um_forward_pass_index_count (T, n < T ? n : 0), shape->kv_cache ? um_forward_cached_index_count (T, n) : 0)
                    * sizeof (gint32);
  /* MoE: a chunk's router logits and its routing (a row, scale, choice and
   * weight per token and expert used), and a selection bias. */
  if (model->cfg.n_experts > 0)
    {
      const size_t chunk = um_forward_chunk_rows (T, o.row_chunk), E = model->cfg.n_experts, k = model->cfg.n_experts_used;
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

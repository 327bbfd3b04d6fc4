/* um-quantize-plan.c — what a conversion writes, from shapes alone: the
 * types, the pruning counts and the tensor list (see um-quantize-plan.h).
 * Carved out of um-quantize.c (the writer, now in backend/engine/), which
 * builds its file from this plan. */
#include "um-quantize-plan.h"

#include <math.h>
#include <string.h>

#include "um-error.h"

#define MAX_PRUNE_HEADS 0.3
#define MAX_PRUNE_FFN   0.2

struct _UmQuantType {
  const char *name;
  UmDType     base;
  gboolean    k_mix;        /* the _M mixes */
  guint32     file_type;    /* llama.cpp's general.file_type */
};

static const UmQuantType quant_types[] = {
  { "F32",    UM_DTYPE_F32,  FALSE, 0 },
  { "F16",    UM_DTYPE_F16,  FALSE, 1 },
  { "BF16",   UM_DTYPE_BF16, FALSE, 32 },
  { "Q8_0",   UM_DTYPE_Q8_0, FALSE, 7 },
  { "Q4_0",   UM_DTYPE_Q4_0, FALSE, 2 },
  { "Q4_1",   UM_DTYPE_Q4_1, FALSE, 3 },
  { "Q5_0",   UM_DTYPE_Q5_0, FALSE, 8 },
  { "Q5_1",   UM_DTYPE_Q5_1, FALSE, 9 },
  { "Q4_K",   UM_DTYPE_Q4_K, FALSE, 14 },
  { "Q5_K",   UM_DTYPE_Q5_K, FALSE, 16 },
  { "Q6_K",   UM_DTYPE_Q6_K, FALSE, 18 },
  { "Q4_K_M", UM_DTYPE_Q4_K, TRUE,  15 },
  { "Q5_K_M", UM_DTYPE_Q5_K, TRUE,  17 },
};

static const UmQuantType *
find_type (const char *name)
{
  for (guint i = 0; i < G_N_ELEMENTS (quant_types); i++)
    if (g_ascii_strcasecmp (name, quant_types[i].name) == 0)
      return &quant_types[i];
  return NULL;
}

gboolean
um_quantize_type_is_valid (const char *type)
{
  return type != NULL && find_type (type) != NULL;
}

const char *
um_quantize_type_name (const char *type)
{
  const UmQuantType *qt = type ? find_type (type) : NULL;
  return qt ? qt->name : NULL;
}

/* llama.cpp's rule for which layers get more bits in the _M mixes. */
static gboolean
use_more_bits (guint layer, guint n_layers)
{
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

/* A row length the type cannot hold falls back as llama.cpp does. */
static UmDType
fit_type (UmDType t, uint64_t cols)
{
  const UmDTypeInfo *info = um_dtype_info (t);
  if (cols % info->block_elems == 0)
    return t;
  switch (t)
    {
    case UM_DTYPE_Q4_K: t = UM_DTYPE_Q5_0; break;
    case UM_DTYPE_Q5_K: t = UM_DTYPE_Q5_1; break;
    case UM_DTYPE_Q6_K: t = UM_DTYPE_Q8_0; break;
    default: t = UM_DTYPE_F16; break;
    }
  return cols % um_dtype_info (t)->block_elems == 0 ? t : UM_DTYPE_F16;
}

/* ---- planning ------------------------------------------------------------ */

void
um_quantize_plan_clear (UmQuantizePlan *p)
{
  g_clear_pointer (&p->items, g_array_unref);
  g_clear_pointer (&p->layers, g_array_unref);
  g_clear_pointer (&p->owned, g_ptr_array_unref);
}

guint32
um_quantize_plan_file_type (const UmQuantizePlan *p)
{
  return p->qt->file_type;
}

gboolean
um_planned_kind_is_vector (UmPlannedKind kind)
{
  switch (kind)
    {
    case UM_PLANNED_NORM:
    case UM_PLANNED_Q_BIAS:
    case UM_PLANNED_K_BIAS:
    case UM_PLANNED_V_BIAS:
    case UM_PLANNED_QKV_BIAS:
    case UM_PLANNED_Q_NORM:
    case UM_PLANNED_K_NORM:
    case UM_PLANNED_ROUTER_BIAS:
      return TRUE;
    default:
      return FALSE;
    }
}

gboolean
um_planned_kind_is_layer_matrix (UmPlannedKind kind)
{
  return kind >= UM_PLANNED_Q && kind <= UM_PLANNED_SH_DOWN;
}

gboolean
um_planned_kind_stays_f32 (UmPlannedKind kind)
{
  return um_planned_kind_is_vector (kind) || kind == UM_PLANNED_ROUTER;
}

guint
um_planned_tensor_shape (const UmPlannedTensor *t, guint64 shape[3])
{
  if (um_planned_kind_is_vector (t->kind))
    {
      shape[0] = t->cols;
      return 1;
    }
  if (t->experts > 0)
    {
      shape[0] = t->experts;
      shape[1] = t->rows / t->experts;
      shape[2] = t->cols;
      return 3;
    }
  shape[0] = t->rows;
  shape[1] = t->cols;
  return 2;
}

/* How many of @count units of @width columns each survive @ratio: see
 * um_quantize_plan_layers(). */
static guint
kept_units (guint count, double ratio, guint64 width, guint block)
{
  guint k;

  if (ratio <= 0.0 || count == 0)
    return count;
  /* The epsilon keeps (1 - 0.3) * 10 = 7.000000000000001 at 7. */
  k = (guint) ceil ((1.0 - ratio) * count - 1e-9);
  k = CLAMP (k, 1, count);
  for (guint j = k; j <= count; j++)
    if ((j * width) % block == 0)
      return j;
  return k;
}

static gboolean
check_options (const UmQuantizeOptions *opts, gboolean need_type, const UmQuantType **qt, GError **error)
{
  *qt = NULL;
  if (opts == NULL || opts->type == NULL)
    {
      if (need_type)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "no quantization type given");
          return FALSE;
        }
    }
  else if ((*qt = find_type (opts->type)) == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "unknown quantization type “%s” (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, "
                   "Q6_K, Q4_K_M, Q5_K_M)", opts->type);
      return FALSE;
    }
  if (opts == NULL)
    return TRUE;
  /* Written so that NaN fails too. */
  if (!(opts->prune_heads >= 0.0 && opts->prune_heads <= MAX_PRUNE_HEADS))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "head pruning ratio %g is outside 0 to %g", opts->prune_heads, MAX_PRUNE_HEADS);
      return FALSE;
    }
  if (!(opts->prune_ffn >= 0.0 && opts->prune_ffn <= MAX_PRUNE_FFN))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "FFN pruning ratio %g is outside 0 to %g", opts->prune_ffn, MAX_PRUNE_FFN);
      return FALSE;
    }
  if (*qt == NULL && (opts->prune_heads > 0.0 || opts->prune_ffn > 0.0))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "pruning needs a conversion type");
      return FALSE;
    }
  return TRUE;
}

static void
plan_add (UmQuantizePlan *p, const char *name, int layer, UmPlannedKind kind, const UmWeight *src,
          UmDType dtype, guint64 rows, guint64 cols, guint64 experts)
{
  UmQuantizePlanItem it = { { { 0 } } };

  g_strlcpy (it.pub.name, name, sizeof it.pub.name);
  it.pub.layer = layer;
  it.pub.kind = kind;
  it.pub.rows = rows;
  it.pub.cols = cols;
  it.pub.experts = experts;
  it.src = src;
  if (p->qt == NULL)
    {
      it.pub.dtype = src->dtype;
      it.pub.bytes = src->rows * src->row_bytes;
    }
  else
    {
      it.pub.dtype = um_planned_kind_stays_f32 (kind) ? UM_DTYPE_F32 : fit_type (dtype, cols);
      if (!um_dtype_bytes (it.pub.dtype, rows * cols, &it.pub.bytes))
        it.pub.bytes = 0;
    }
  g_array_append_val (p->items, it);
}

/* The layer's tensors in the order llama.cpp's converters write them; a
 * tensor the layer does not have (data NULL) is skipped. */
#define MAX_LAYER_TENSORS 16

typedef struct {
  const char     *suffix;
  UmPlannedKind   kind;
  const UmWeight *w;
} LayerTensor;

/* A fused q/k/v's bias as one float vector [q | k | v] (the loaders hold
 * views of one; copied so that any three do), owned by @owned. */
static const UmWeight *
fused_bias (const UmLayerWeights *L, GPtrArray *owned)
{
  const UmWeight *parts[] = { &L->bq, &L->bk, &L->bv };
  UmWeight *w;
  float *v;
  guint64 n = 0;

  if (L->bq.data == NULL)
    return NULL;
  for (guint i = 0; i < 3; i++)
    n += parts[i]->cols;
  w = g_new0 (UmWeight, 1);
  v = g_new (float, n);
  g_ptr_array_add (owned, w);
  g_ptr_array_add (owned, v);
  *w = L->bq;
  w->name = "attn_qkv.bias";
  w->cols = n;
  w->row_bytes = n * sizeof (float);
  w->data = v;
  for (guint i = 0; i < 3; i++)
    {
      memcpy (v, parts[i]->data, parts[i]->cols * sizeof (float));
      v += parts[i]->cols;
    }
  return w;
}

/* LLaDA 2's order (BailingMoeV2's converter): q/k/v fused, QK-norms
 * before the output, the shared expert after the routed ones. */
static guint
layer_tensors_fused (const UmLayerWeights *L, GPtrArray *owned, LayerTensor *out)
{
  const gboolean moe = L->n_experts > 0;
  const LayerTensor all[] = {
    { "attn_norm.weight", UM_PLANNED_NORM, &L->attn_norm },
    { "attn_qkv.weight", UM_PLANNED_QKV, &L->wqkv },
    { "attn_qkv.bias", UM_PLANNED_QKV_BIAS, fused_bias (L, owned) },
    { "attn_q_norm.weight", UM_PLANNED_Q_NORM, &L->q_norm },
    { "attn_k_norm.weight", UM_PLANNED_K_NORM, &L->k_norm },
    { "attn_output.weight", UM_PLANNED_O, &L->wo },
    { "ffn_norm.weight", UM_PLANNED_NORM, &L->ffn_norm },
    { "ffn_gate_inp.weight", UM_PLANNED_ROUTER, moe ? &L->router : NULL },
    { "exp_probs_b.bias", UM_PLANNED_ROUTER_BIAS, moe ? &L->router_bias : NULL },
    { moe ? "ffn_gate_exps.weight" : "ffn_gate.weight", UM_PLANNED_GATE, &L->w_gate },
    { moe ? "ffn_up_exps.weight" : "ffn_up.weight", UM_PLANNED_UP, &L->w_up },
    { moe ? "ffn_down_exps.weight" : "ffn_down.weight", UM_PLANNED_DOWN, &L->w_down },
    { "ffn_gate_shexp.weight", UM_PLANNED_SH_GATE, moe ? &L->sh_gate : NULL },
    { "ffn_up_shexp.weight", UM_PLANNED_SH_UP, moe ? &L->sh_up : NULL },
    { "ffn_down_shexp.weight", UM_PLANNED_SH_DOWN, moe ? &L->sh_down : NULL },
  };
  guint n = 0;

  G_STATIC_ASSERT (G_N_ELEMENTS (all) <= MAX_LAYER_TENSORS);
  for (guint i = 0; i < G_N_ELEMENTS (all); i++)
    if (all[i].w != NULL && all[i].w->data != NULL)
      out[n++] = all[i];
  return n;
}

static guint
layer_tensors (const UmLayerWeights *L, GPtrArray *owned, LayerTensor *out)
{
  const gboolean moe = L->n_experts > 0;
  if (L->wqkv.data != NULL)
    return layer_tensors_fused (L, owned, out);
  const LayerTensor all[] = {
    { "attn_norm.weight", UM_PLANNED_NORM, &L->attn_norm },
    { "attn_q.weight", UM_PLANNED_Q, &L->wq },
    { "attn_q.bias", UM_PLANNED_Q_BIAS, &L->bq },
    { "attn_k.weight", UM_PLANNED_K, &L->wk },
    { "attn_k.bias", UM_PLANNED_K_BIAS, &L->bk },
    { "attn_v.weight", UM_PLANNED_V, &L->wv },
    { "attn_v.bias", UM_PLANNED_V_BIAS, &L->bv },
    { "attn_output.weight", UM_PLANNED_O, &L->wo },
    { "attn_q_norm.weight", UM_PLANNED_Q_NORM, &L->q_norm },
    { "attn_k_norm.weight", UM_PLANNED_K_NORM, &L->k_norm },
    { "ffn_norm.weight", UM_PLANNED_NORM, &L->ffn_norm },
    { "ffn_gate_inp.weight", UM_PLANNED_ROUTER, moe ? &L->router : NULL },
    { "exp_probs_b.bias", UM_PLANNED_ROUTER_BIAS, moe ? &L->router_bias : NULL },
    { moe ? "ffn_gate_exps.weight" : "ffn_gate.weight", UM_PLANNED_GATE, &L->w_gate },
    { moe ? "ffn_up_exps.weight" : "ffn_up.weight", UM_PLANNED_UP, &L->w_up },
    { moe ? "ffn_down_exps.weight" : "ffn_down.weight", UM_PLANNED_DOWN, &L->w_down },
  };
  guint n = 0;

  G_STATIC_ASSERT (G_N_ELEMENTS (all) <= MAX_LAYER_TENSORS);
  for (guint i = 0; i < G_N_ELEMENTS (all); i++)
    if (all[i].w != NULL && all[i].w->data != NULL)
      out[n++] = all[i];
  return n;
}

static gboolean
kind_is_expert_matrix (UmPlannedKind kind)
{
  return kind == UM_PLANNED_GATE || kind == UM_PLANNED_UP || kind == UM_PLANNED_DOWN;
}

/* The type of a layer matrix in @qt: llama-quantize's choices for the _M
 * mixes (see um_quantize_model_full ()), the base type otherwise. */
static UmDType
matrix_type (const UmQuantType *qt, const UmModelConfig *c, guint l, UmPlannedKind kind)
{
  const gboolean more = qt->k_mix && use_more_bits (l, c->n_layers);

  if (!qt->k_mix)
    return qt->base;
  switch (kind)
    {
    case UM_PLANNED_K:
      return c->n_experts == 8 ? UM_DTYPE_Q8_0 : qt->base;
    case UM_PLANNED_V:
      return c->n_experts == 8 ? UM_DTYPE_Q8_0 : more ? UM_DTYPE_Q6_K : qt->base;
    case UM_PLANNED_O:
      return c->n_experts == 8 && qt->base == UM_DTYPE_Q4_K ? UM_DTYPE_Q5_K : qt->base;
    case UM_PLANNED_QKV:
      return qt->base == UM_DTYPE_Q4_K ? UM_DTYPE_Q5_K : UM_DTYPE_Q6_K;
    case UM_PLANNED_DOWN:
    case UM_PLANNED_SH_DOWN:
      return more ? UM_DTYPE_Q6_K : qt->base;
    default:
      return qt->base;
    }
}

gboolean
um_quantize_plan_build (UmQuantizePlan *p, const UmModel *m, const UmQuantizeOptions *opts, gboolean need_type,
                        GError **error)
{
  const UmModelConfig *c = &m->cfg;
  const guint64 D = c->d_model, hd = c->head_dim;
  const UmQuantType *qt;
  char name[96];

  if (!check_options (opts, need_type, &qt, error))
    return FALSE;
  p->qt = qt;
  p->prune_heads = opts ? opts->prune_heads : 0.0;
  p->prune_ffn = opts ? opts->prune_ffn : 0.0;
  p->items = g_array_new (FALSE, FALSE, sizeof (UmQuantizePlanItem));
  p->layers = g_array_sized_new (FALSE, TRUE, sizeof (UmPlannedLayer), c->n_layers);
  p->owned = g_ptr_array_new_with_free_func (g_free);
  /* A llada2 file holds q/k/v fused only: the model must have them so. */
  for (guint l = 0; qt != NULL && c->arch == UM_ARCH_LLADA2 && l < c->n_layers; l++)
    if (m->layers[l].wqkv.data == NULL)
      {
        g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                     "%s: layer %u has no fused q/k/v, which a llada2 file holds", m->display_name, l);
        return FALSE;
      }

  if (qt == NULL)
    {
      /* What the model holds, under its own names. */
      plan_add (p, m->tok_embd.name, -1, UM_PLANNED_EMBED, &m->tok_embd, 0, m->tok_embd.rows, m->tok_embd.cols, 0);
      for (guint l = 0; l < c->n_layers; l++)
        {
          const UmLayerWeights *L = &m->layers[l];
          LayerTensor ts[MAX_LAYER_TENSORS];
          const guint n = layer_tensors (L, p->owned, ts);
          UmPlannedLayer pl = { L->n_heads, L->n_kv_heads, L->ffn };
          for (guint i = 0; i < n; i++)
            plan_add (p, ts[i].w->name, l, ts[i].kind, ts[i].w, 0, ts[i].w->rows, ts[i].w->cols,
                      L->n_experts > 0 && kind_is_expert_matrix (ts[i].kind) ? L->n_experts : 0);
          g_array_append_val (p->layers, pl);
        }
      plan_add (p, m->out_norm.name, -1, UM_PLANNED_NORM, &m->out_norm, 0, 1, D, 0);
      if (!c->tied_embeddings)
        plan_add (p, m->output.name, -1, UM_PLANNED_OUTPUT, &m->output, 0, m->output.rows, m->output.cols, 0);
      /* Small tensors converted to float in memory: report the file's entry. */
      for (guint i = 0; i < p->items->len; i++)
        {
          UmQuantizePlanItem *it = &g_array_index (p->items, UmQuantizePlanItem, i);
          const UmTensorInfo *info = m->tensors ? um_tensor_table_lookup (m->tensors, it->pub.name) : NULL;
          if (info != NULL)
            {
              it->pub.dtype = info->dtype;
              it->pub.bytes = info->n_bytes;
            }
        }
      return TRUE;
    }

  plan_add (p, "token_embd.weight", -1, UM_PLANNED_EMBED, &m->tok_embd, qt->base, c->vocab_size, D, 0);
  for (guint l = 0; l < c->n_layers; l++)
    {
      const UmLayerWeights *L = &m->layers[l];
      const guint group = L->n_heads / MAX (L->n_kv_heads, 1);
      const guint64 E = L->n_experts;
      LayerTensor ts[MAX_LAYER_TENSORS];
      const guint n = layer_tensors (L, p->owned, ts);
      UmPlannedLayer pl;
      guint64 qd, kvd;

      pl.n_kv_heads = kept_units (L->n_kv_heads, p->prune_heads, (guint64) group * hd,
                                  um_dtype_info (qt->base)->block_elems);
      pl.n_heads = pl.n_kv_heads * group;
      pl.ffn = kept_units (L->ffn, p->prune_ffn, 1,
                           um_dtype_info (matrix_type (qt, c, l, UM_PLANNED_DOWN))->block_elems);
      g_array_append_val (p->layers, pl);
      qd = (guint64) pl.n_heads * hd;
      kvd = (guint64) pl.n_kv_heads * hd;
      for (guint i = 0; i < n; i++)
        {
          const UmWeight *w = ts[i].w;
          guint64 rows = 1, cols = w->cols, experts = 0;
          switch (ts[i].kind)
            {
            case UM_PLANNED_Q: rows = qd; cols = D; break;
            case UM_PLANNED_K:
            case UM_PLANNED_V: rows = kvd; cols = D; break;
            case UM_PLANNED_QKV: rows = qd + 2 * kvd; cols = D; break;
            case UM_PLANNED_O: rows = D; cols = qd; break;
            case UM_PLANNED_Q_BIAS: cols = qd; break;
            case UM_PLANNED_K_BIAS:
            case UM_PLANNED_V_BIAS: cols = kvd; break;
            case UM_PLANNED_QKV_BIAS: cols = qd + 2 * kvd; break;
            case UM_PLANNED_Q_NORM:
            case UM_PLANNED_K_NORM: cols = hd; break;
            case UM_PLANNED_NORM: cols = D; break;
            case UM_PLANNED_ROUTER: rows = w->rows; cols = D; break;
            case UM_PLANNED_GATE:
            case UM_PLANNED_UP: rows = (E ? E : 1) * pl.ffn; cols = D; experts = E; break;
            case UM_PLANNED_DOWN: rows = (E ? E : 1) * D; cols = pl.ffn; experts = E; break;
            /* The shared expert is not pruned. */
            case UM_PLANNED_SH_GATE:
            case UM_PLANNED_SH_UP: rows = L->shared_ffn; cols = D; break;
            case UM_PLANNED_SH_DOWN: rows = D; cols = L->shared_ffn; break;
            default: break;
            }
          g_snprintf (name, sizeof name, "blk.%u.%s", l, ts[i].suffix);
          plan_add (p, name, l, ts[i].kind, w, matrix_type (qt, c, l, ts[i].kind), rows, cols, experts);
        }
    }
  plan_add (p, "output_norm.weight", -1, UM_PLANNED_NORM, &m->out_norm, UM_DTYPE_F32, 1, D, 0);
  if (!c->tied_embeddings)
    plan_add (p, "output.weight", -1, UM_PLANNED_OUTPUT, &m->output, qt->k_mix ? UM_DTYPE_Q6_K : qt->base,
              c->vocab_size, D, 0);
  return TRUE;
}

GArray *
um_quantize_plan_tensors (const UmModel *src, const UmQuantizeOptions *opts, GError **error)
{
  g_auto(UmQuantizePlan) p = { 0 };
  GArray *out;

  if (!um_quantize_plan_build (&p, src, opts, FALSE, error))
    return NULL;
  out = g_array_sized_new (FALSE, FALSE, sizeof (UmPlannedTensor), p.items->len);
  for (guint i = 0; i < p.items->len; i++)
    g_array_append_val (out, g_array_index (p.items, UmQuantizePlanItem, i).pub);
  return out;
}

GArray *
um_quantize_plan_layers (const UmModel *src, const UmQuantizeOptions *opts, GError **error)
{
  g_auto(UmQuantizePlan) p = { 0 };

  if (!um_quantize_plan_build (&p, src, opts, FALSE, error))
    return NULL;
  return g_steal_pointer (&p.layers);
}

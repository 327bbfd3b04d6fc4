/* Conversions and pruning of Dream, LLaDA-MoE and RND1 models: what
 * um_quantize_plan_tensors () predicts is what is written (experts 3-D,
 * small tensors 1-D F32, per-layer counts), for every family, type and
 * pruning; the _M mixes' 8-expert rules; FFN pruning keeps each expert's
 * own strongest neurons (the same count in every expert), head pruning
 * slices the q/k/v biases with their heads; the pruned model computes what
 * its source computes with the dropped units zeroed; the plan of every
 * memory mode accounts for the converted model. */
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

#include "um-convert.h"
#include "um-error.h"
#include "um-gguf.h"
#include "um-plan.h"
#include "um-quantize.h"
#include "um-ref-kernels.h"
#include "um-test-util.h"

static UmModel *
load_model (const char *path)
{
  g_autoptr(GError) error = NULL;
  UmModel *model = um_model_load (path, NULL, &error);
  g_assert_no_error (error);
  g_assert_nonnull (model);
  return model;
}

/* Writes @src with @opts and checks every tensor, the file size and the
 * loaded model's per-layer counts against the plan; the engine runs it. */
static void
check_plan (const char *src, const UmQuantizeOptions *opts, const char *dir)
{
  g_autoptr(UmModel) model = load_model (src);
  g_autoptr(GError) error = NULL;
  g_autoptr(GArray) plan = um_quantize_plan_tensors (model, opts, &error);
  g_autoptr(GArray) layers = um_quantize_plan_layers (model, opts, &error);
  g_autofree char *out = g_build_filename (dir, "out.gguf", NULL);
  g_autoptr(UmGguf) g = NULL;
  g_autoptr(UmModel) written = NULL;
  g_autoptr(UmEngine) engine = NULL;
  const gint32 ids[] = { 5, 17, 250, 33, 7, 300, 1, 2, 3 };
  g_autofree float *logits = NULL;
  UmTensorTable *t;
  guint64 predicted = 0, file_bytes = 0;
  gsize len;

  g_assert_no_error (error);
  g_assert_true (um_quantize_model_full (model, opts, out, NULL, NULL, NULL, &error));
  g_assert_no_error (error);
  g = um_gguf_open (out, &error);
  g_assert_no_error (error);
  t = um_gguf_get_tensors (g);
  g_assert_cmpuint (um_tensor_table_size (t), ==, plan->len);
  for (guint i = 0; i < plan->len; i++)
    {
      const UmPlannedTensor *p = &g_array_index (plan, UmPlannedTensor, i);
      const UmTensorInfo *info = um_tensor_table_get (t, i);
      guint64 shape[3];
      const guint n_dims = um_planned_tensor_shape (p, shape);

      g_assert_cmpstr (info->name, ==, p->name);
      g_assert_cmpint (info->dtype, ==, p->dtype);
      g_assert_cmpuint (info->n_bytes, ==, p->bytes);
      g_assert_cmpuint (info->n_dims, ==, n_dims);
      g_assert_cmpmem (info->shape, n_dims * sizeof (guint64), shape, n_dims * sizeof (guint64));
      if (g_str_has_suffix (p->name, "_exps.weight"))
        g_assert_cmpuint (p->experts, ==, model->cfg.n_experts);
      predicted += p->bytes;
    }
  g_assert_cmpuint (predicted, ==, um_tensor_table_total_bytes (t));
  um_gguf_get_bytes (g, &len);
  g_assert_true (um_convert_predict_bytes (model, opts, &file_bytes, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (file_bytes, >=, len);
  g_assert_cmpuint (file_bytes, <, len + 256 * 1024);

  written = load_model (out);
  g_assert_cmpint (written->cfg.arch, ==, model->cfg.arch);
  g_assert_cmpuint (layers->len, ==, written->cfg.n_layers);
  for (guint l = 0; l < layers->len; l++)
    {
      const UmPlannedLayer *pl = &g_array_index (layers, UmPlannedLayer, l);
      g_assert_cmpuint (written->layers[l].n_heads, ==, pl->n_heads);
      g_assert_cmpuint (written->layers[l].n_kv_heads, ==, pl->n_kv_heads);
      g_assert_cmpuint (written->layers[l].ffn, ==, pl->ffn);
      g_assert_cmpuint (written->layers[l].n_experts, ==, model->layers[l].n_experts);
      g_assert_cmpuint (written->layers[l].bq.cols, ==, model->layers[l].bq.data ? pl->n_heads * model->cfg.head_dim : 0);
    }
  engine = um_test_load_engine (out, TRUE);
  logits = g_new (float, G_N_ELEMENTS (ids) * written->cfg.vocab_size);
  g_assert_true (um_forward_logits (um_engine_get_forward (engine), ids, 1, G_N_ELEMENTS (ids), NULL, 0, logits,
                                    NULL, &error));
  g_assert_no_error (error);
  for (guint i = 0; i < G_N_ELEMENTS (ids) * written->cfg.vocab_size; i++)
    g_assert_true (isfinite (logits[i]));
  g_unlink (out);
}

/* A random model of @arch with the given shape in @dir. */
static void
write_family (const char *dir, UmArch arch, guint d, guint heads, guint kv, guint mlp, guint experts, guint ffn,
              guint32 seed)
{
  g_autoptr(GError) error = NULL;
  UmTestModelSpec spec;

  um_test_model_spec_init_family (&spec, arch);
  spec.d_model = d;
  spec.n_heads = heads;
  spec.n_kv_heads = kv;
  /* Only RND1's configuration names a head size; the others' is d / heads. */
  spec.head_dim = arch == UM_ARCH_RND1 ? 16 : 0;
  spec.mlp_hidden = mlp;
  if (experts > 0)
    {
      spec.n_experts = experts;
      spec.expert_ffn = ffn;
    }
  spec.seed = seed;
  g_assert_true (um_test_write_model (dir, &spec, &error));
  g_assert_no_error (error);
}

static void
test_plan_matches_written (void)
{
  g_autofree char *dream = um_test_data_path ("tiny-dream");
  g_autofree char *moe = um_test_data_path ("tiny-llada-moe");
  g_autofree char *rnd1 = um_test_data_path ("tiny-rnd1-f32.gguf");
  g_autofree char *tmp = um_test_mkdtemp ();
  g_autofree char *dream8 = g_build_filename (tmp, "dream8", NULL);
  g_autofree char *moe256 = g_build_filename (tmp, "moe256", NULL);
  const char *srcs[] = { dream, moe, rnd1, dream8, moe256 };
  const UmQuantizeOptions opts[] = {
    { "Q8_0", 0, 0 }, { "Q4_K_M", 0, 0 }, { "F16", 0.25, 0.125 }, { "Q8_0", 0.25, 0.125 }, { "Q5_K_M", 0.3, 0.2 },
  };

  /* Dream with four KV groups (the fixture's two cannot lose one to 30 %),
   * and a MoE model whose rows K-quants hold. */
  write_family (dream8, UM_ARCH_DREAM, 128, 8, 4, 256, 0, 0, 3);
  write_family (moe256, UM_ARCH_LLADA_MOE, 256, 4, 4, 512, 8, 256, 4);
  for (guint s = 0; s < G_N_ELEMENTS (srcs); s++)
    for (guint o = 0; o < G_N_ELEMENTS (opts); o++)
      {
        g_test_message ("%s, %s, pruning %g / %g", srcs[s], opts[o].type, opts[o].prune_heads, opts[o].prune_ffn);
        check_plan (srcs[s], &opts[o], tmp);
      }
  um_test_rmtree (tmp);
}

static const UmPlannedTensor *
find_planned (GArray *plan, const char *name)
{
  for (guint i = 0; i < plan->len; i++)
    if (strcmp (g_array_index (plan, UmPlannedTensor, i).name, name) == 0)
      return &g_array_index (plan, UmPlannedTensor, i);
  g_error ("%s not planned", name);
}

/* llama-quantize's _M mixes on MoE models: ffn_down_exps follows ffn_down's
 * layer rule; with exactly 8 experts attn_k and attn_v go to Q8_0 and (for
 * Q4_K_M) attn_output to Q5_K; the router and 1-D tensors stay F32. */
static void
test_kquant_mix_experts (void)
{
  g_autofree char *tmp = um_test_mkdtemp ();
  g_autofree char *e8 = g_build_filename (tmp, "e8", NULL), *e16 = g_build_filename (tmp, "e16", NULL);
  g_autoptr(GError) error = NULL;
  const UmQuantizeOptions q4 = { "Q4_K_M", 0, 0 }, q5 = { "Q5_K_M", 0, 0 };

  write_family (e8, UM_ARCH_LLADA_MOE, 256, 4, 4, 512, 8, 256, 5);
  write_family (e16, UM_ARCH_LLADA_MOE, 256, 4, 4, 512, 16, 256, 6);
  {
    g_autoptr(UmModel) m = load_model (e8);
    g_autoptr(GArray) p4 = um_quantize_plan_tensors (m, &q4, &error);
    g_autoptr(GArray) p5 = um_quantize_plan_tensors (m, &q5, &error);
    g_assert_no_error (error);
    g_assert_cmpint (find_planned (p4, "blk.0.attn_q.weight")->dtype, ==, UM_DTYPE_Q4_K);
    g_assert_cmpint (find_planned (p4, "blk.0.attn_k.weight")->dtype, ==, UM_DTYPE_Q8_0);
    g_assert_cmpint (find_planned (p4, "blk.0.attn_v.weight")->dtype, ==, UM_DTYPE_Q8_0);
    g_assert_cmpint (find_planned (p4, "blk.0.attn_output.weight")->dtype, ==, UM_DTYPE_Q5_K);
    g_assert_cmpint (find_planned (p5, "blk.0.attn_output.weight")->dtype, ==, UM_DTYPE_Q5_K);
    g_assert_cmpint (find_planned (p5, "blk.0.attn_v.weight")->dtype, ==, UM_DTYPE_Q8_0);
    /* 2 layers: layer 1 is ≥ 7/8 of them, layer 0 is not. */
    g_assert_cmpint (find_planned (p4, "blk.0.ffn_down_exps.weight")->dtype, ==, UM_DTYPE_Q4_K);
    g_assert_cmpint (find_planned (p4, "blk.1.ffn_down_exps.weight")->dtype, ==, UM_DTYPE_Q6_K);
    g_assert_cmpint (find_planned (p4, "blk.1.ffn_gate_exps.weight")->dtype, ==, UM_DTYPE_Q4_K);
    g_assert_cmpint (find_planned (p4, "blk.1.ffn_gate_inp.weight")->dtype, ==, UM_DTYPE_F32);
    g_assert_cmpint (find_planned (p4, "blk.1.attn_q_norm.weight")->dtype, ==, UM_DTYPE_F32);
    g_assert_cmpint (find_planned (p4, "output.weight")->dtype, ==, UM_DTYPE_Q6_K);
    g_assert_cmpint (find_planned (p4, "token_embd.weight")->dtype, ==, UM_DTYPE_Q4_K);
  }
  {
    g_autoptr(UmModel) m = load_model (e16);
    g_autoptr(GArray) p4 = um_quantize_plan_tensors (m, &q4, &error);
    g_assert_no_error (error);
    g_assert_cmpint (find_planned (p4, "blk.0.attn_k.weight")->dtype, ==, UM_DTYPE_Q4_K);
    g_assert_cmpint (find_planned (p4, "blk.0.attn_v.weight")->dtype, ==, UM_DTYPE_Q4_K);
    g_assert_cmpint (find_planned (p4, "blk.1.attn_v.weight")->dtype, ==, UM_DTYPE_Q6_K);
    g_assert_cmpint (find_planned (p4, "blk.0.attn_output.weight")->dtype, ==, UM_DTYPE_Q4_K);
  }
  um_test_rmtree (tmp);
}

/* ---- pruning ------------------------------------------------------------------ */

/* Multiplies rows (or columns) @idx (units of @width) of the F32 matrix
 * @tensor of the safetensors file held in @file. */
static void
scale_in_file (guint8 *file, gsize len, const char *tensor, const guint *idx, guint n_idx,
               guint64 width, gboolean columns, float factor)
{
  guint64 hlen;
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(GError) error = NULL;
  JsonObject *info;
  JsonArray *shape, *offsets;
  guint64 rows, cols, begin;
  float *data;

  memcpy (&hlen, file, 8);
  hlen = GUINT64_FROM_LE (hlen);
  g_assert_true (json_parser_load_from_data (parser, (const char *) file + 8, hlen, &error));
  info = json_object_get_object_member (json_node_get_object (json_parser_get_root (parser)), tensor);
  g_assert_nonnull (info);
  shape = json_object_get_array_member (info, "shape");
  offsets = json_object_get_array_member (info, "data_offsets");
  rows = json_array_get_int_element (shape, 0);
  cols = json_array_get_int_element (shape, 1);
  begin = 8 + hlen + json_array_get_int_element (offsets, 0);
  g_assert_cmpuint (begin + rows * cols * 4, <=, len);
  data = (float *) (file + begin);
  for (guint k = 0; k < n_idx; k++)
    for (guint64 j = 0; j < width; j++)
      {
        guint64 unit = (guint64) idx[k] * width + j;
        if (columns)
          for (guint64 r = 0; r < rows; r++)
            data[r * cols + unit] *= factor;
        else
          for (guint64 c = 0; c < cols; c++)
            data[unit * cols + c] *= factor;
      }
}

static float
weight_at (const UmWeight *w, guint64 r, guint64 c)
{
  float f;
  g_assert_cmpint (w->dtype, ==, UM_DTYPE_F32);
  memcpy (&f, (const guint8 *) w->data + r * w->row_bytes + 4 * c, 4);
  return f;
}

/* A float copy of @w, owned by @owned, with rows @idx zeroed
 * (zero_rows) or columns @idx zeroed in rows [row0, row1) (zero_cols). */
static void
zero_rows (UmWeight *w, const guint64 *idx, guint n, GPtrArray *owned)
{
  float *copy = g_new (float, w->rows * w->cols);
  for (guint64 r = 0; r < w->rows; r++)
    for (guint64 c = 0; c < w->cols; c++)
      copy[r * w->cols + c] = weight_at (w, r, c);
  for (guint k = 0; k < n; k++)
    memset (copy + idx[k] * w->cols, 0, w->cols * sizeof (float));
  g_ptr_array_add (owned, copy);
  w->data = copy;
  w->row_bytes = w->cols * sizeof (float);
}

static void
zero_cols (UmWeight *w, guint64 row0, guint64 row1, const guint64 *idx, guint n, GPtrArray *owned)
{
  float *copy = g_new (float, w->rows * w->cols);
  for (guint64 r = 0; r < w->rows; r++)
    for (guint64 c = 0; c < w->cols; c++)
      copy[r * w->cols + c] = weight_at (w, r, c);
  for (guint64 r = row0; r < row1; r++)
    for (guint k = 0; k < n; k++)
      copy[r * w->cols + idx[k]] = 0.0f;
  g_ptr_array_add (owned, copy);
  w->data = copy;
  w->row_bytes = w->cols * sizeof (float);
}

/* Float64 logits of @pruned and @zeroed agree (rounding order aside:
 * both sum the same nonzero terms). */
static void
assert_same_forward (const UmModel *pruned, const UmModel *zeroed)
{
  const int L = 19;
  const guint V = zeroed->cfg.vocab_size;
  g_autofree double *want = g_new (double, L * V), *got = g_new (double, L * V);
  g_autoptr(GError) error = NULL;
  gint32 ids[19];
  double worst = 0;

  for (int i = 0; i < L; i++)
    ids[i] = (i * 53 + 7) % 500;
  ids[4] = ids[11] = zeroed->cfg.mask_id;
  g_assert_true (um_ref_forward (zeroed, ids, L, want, &error));
  g_assert_true (um_ref_forward (pruned, ids, L, got, &error));
  g_assert_no_error (error);
  for (guint i = 0; i < L * V; i++)
    worst = MAX (worst, fabs (got[i] - want[i]) / (1 + fabs (want[i])));
  g_test_message ("pruned vs zeroed source: max relative difference %.3g", worst);
  g_assert_cmpfloat (worst, <, 1e-9);
}

#define EX_E 8
#define EX_F 32
#define EX_WEAK 4            /* 12.5 % of 32 */

/* Expert e of layer l has EX_WEAK neurons ten times weaker than the rest,
 * different ones per expert and layer: FFN pruning at 12.5 % must drop
 * exactly those from each expert. */
static guint
weak_neuron (guint l, guint e, guint i)
{
  return (e * 5 + l * 3 + i * 7) % EX_F;
}

static void
test_prune_experts (void)
{
  g_autofree char *tmp = um_test_mkdtemp ();
  g_autofree char *src = g_build_filename (tmp, "moe", NULL);
  g_autofree char *st = g_build_filename (src, "model.safetensors", NULL);
  g_autofree char *out = g_build_filename (tmp, "pruned.gguf", NULL);
  g_autofree char *contents = NULL;
  g_autoptr(UmModel) model = NULL, pruned = NULL;
  g_autoptr(GPtrArray) owned = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GError) error = NULL;
  const UmQuantizeOptions opts = { "F32", 0, 0.125 };
  UmModel zeroed;
  gsize len;
  char name[128];

  write_family (src, UM_ARCH_LLADA_MOE, 64, 4, 4, 128, EX_E, EX_F, 9);
  g_file_get_contents (st, &contents, &len, &error);
  g_assert_no_error (error);
  for (guint l = 0; l < 2; l++)
    for (guint e = 0; e < EX_E; e++)
      {
        guint weak[EX_WEAK];
        for (guint i = 0; i < EX_WEAK; i++)
          weak[i] = weak_neuron (l, e, i);
#define SCALE(proj, cols) G_STMT_START { \
          g_snprintf (name, sizeof name, "model.layers.%u.mlp.experts.%u.%s.weight", l, e, proj); \
          scale_in_file ((guint8 *) contents, len, name, weak, EX_WEAK, 1, cols, 0.1f); } G_STMT_END
        SCALE ("gate_proj", FALSE);
        SCALE ("up_proj", FALSE);
        SCALE ("down_proj", TRUE);
#undef SCALE
      }
  um_test_write_file (st, contents, len);

  model = load_model (src);
  g_assert_true (um_quantize_model_full (model, &opts, out, NULL, NULL, NULL, &error));
  g_assert_no_error (error);
  pruned = load_model (out);
  g_assert_cmpuint (pruned->cfg.expert_ffn, ==, EX_F - EX_WEAK);
  zeroed = *model;
  zeroed.layers = g_memdup2 (model->layers, model->cfg.n_layers * sizeof (UmLayerWeights));
  for (guint l = 0; l < 2; l++)
    {
      const UmLayerWeights *S = &model->layers[l], *P = &pruned->layers[l];
      UmLayerWeights *Z = &zeroed.layers[l];
      const guint64 D = model->cfg.d_model, K = EX_F - EX_WEAK;

      g_assert_cmpuint (P->n_experts, ==, EX_E);
      g_assert_cmpuint (P->ffn, ==, K);
      /* The router and attention are untouched. */
      g_assert_cmpmem (P->router.data, P->router.rows * P->router.row_bytes, S->router.data,
                       S->router.rows * S->router.row_bytes);
      for (guint e = 0; e < EX_E; e++)
        {
          guint64 kept[EX_F], dropped[EX_WEAK], n_kept = 0, n_dropped = 0;
          for (guint j = 0; j < EX_F; j++)
            {
              gboolean weak = FALSE;
              for (guint i = 0; i < EX_WEAK; i++)
                weak |= weak_neuron (l, e, i) == j;
              if (weak)
                dropped[n_dropped++] = j;
              else
                kept[n_kept++] = j;
            }
          g_assert_cmpuint (n_kept, ==, K);
          /* Expert e's kept neurons, in order, in its rows of the stacked
           * gate/up and its columns of down. */
          for (guint64 i = 0; i < K; i++)
            for (guint64 c = 0; c < D; c++)
              {
                g_assert_cmpfloat (weight_at (&P->w_gate, e * K + i, c), ==,
                                   weight_at (&S->w_gate, e * EX_F + kept[i], c));
                g_assert_cmpfloat (weight_at (&P->w_up, e * K + i, c), ==,
                                   weight_at (&S->w_up, e * EX_F + kept[i], c));
                g_assert_cmpfloat (weight_at (&P->w_down, e * D + c, i), ==,
                                   weight_at (&S->w_down, e * D + c, kept[i]));
              }
          {
            guint64 rows[EX_WEAK];
            for (guint i = 0; i < EX_WEAK; i++)
              rows[i] = e * EX_F + dropped[i];
            zero_rows (&Z->w_gate, rows, EX_WEAK, owned);
            zero_rows (&Z->w_up, rows, EX_WEAK, owned);
            zero_cols (&Z->w_down, e * D, (e + 1) * D, dropped, EX_WEAK, owned);
          }
        }
    }
  assert_same_forward (pruned, &zeroed);
  g_free (zeroed.layers);
  um_test_rmtree (tmp);
}

#define HB_HEADS 8
#define HB_KV 4
#define HB_HD 16

/* Dream with q/k/v biases: one KV group per layer is ten times weaker;
 * pruning a quarter of the heads drops it, with its bias entries. */
static void
test_prune_heads_biases (void)
{
  g_autofree char *tmp = um_test_mkdtemp ();
  g_autofree char *src = g_build_filename (tmp, "dream", NULL);
  g_autofree char *st = g_build_filename (src, "model.safetensors", NULL);
  g_autofree char *out = g_build_filename (tmp, "pruned.gguf", NULL);
  g_autofree char *contents = NULL;
  g_autoptr(UmModel) model = NULL, pruned = NULL;
  g_autoptr(GPtrArray) owned = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GError) error = NULL;
  const UmQuantizeOptions opts = { "F32", 0.25, 0 };
  const guint group = HB_HEADS / HB_KV, weak_group[2] = { 2, 0 };
  UmModel zeroed;
  gsize len;
  char name[128];

  write_family (src, UM_ARCH_DREAM, 128, HB_HEADS, HB_KV, 256, 0, 0, 11);
  g_file_get_contents (st, &contents, &len, &error);
  g_assert_no_error (error);
  for (guint l = 0; l < 2; l++)
    {
      guint q_heads[HB_HEADS / HB_KV];
      for (guint t = 0; t < group; t++)
        q_heads[t] = weak_group[l] * group + t;
#define SCALE(suffix, idx, n, cols) G_STMT_START { \
      g_snprintf (name, sizeof name, "model.layers.%u.self_attn.%s.weight", l, suffix); \
      scale_in_file ((guint8 *) contents, len, name, idx, n, HB_HD, cols, 0.1f); } G_STMT_END
      SCALE ("q_proj", q_heads, group, FALSE);
      SCALE ("k_proj", &weak_group[l], 1, FALSE);
      SCALE ("v_proj", &weak_group[l], 1, FALSE);
      SCALE ("o_proj", q_heads, group, TRUE);
#undef SCALE
    }
  um_test_write_file (st, contents, len);

  model = load_model (src);
  g_assert_true (um_quantize_model_full (model, &opts, out, NULL, NULL, NULL, &error));
  g_assert_no_error (error);
  pruned = load_model (out);
  zeroed = *model;
  zeroed.layers = g_memdup2 (model->layers, model->cfg.n_layers * sizeof (UmLayerWeights));
  for (guint l = 0; l < 2; l++)
    {
      const UmLayerWeights *S = &model->layers[l], *P = &pruned->layers[l];
      UmLayerWeights *Z = &zeroed.layers[l];
      guint64 q_drop[HB_HEADS / HB_KV * HB_HD], kv_drop[HB_HD];
      guint out_kv = 0;

      g_assert_cmpuint (P->n_heads, ==, HB_HEADS - group);
      g_assert_cmpuint (P->n_kv_heads, ==, HB_KV - 1);
      g_assert_cmpuint (P->bq.cols, ==, (HB_HEADS - group) * HB_HD);
      g_assert_cmpuint (P->bk.cols, ==, (HB_KV - 1) * HB_HD);
      /* Dream is NeoX in both layouts: rows and bias entries keep their
       * order within a head. */
      for (guint g = 0; g < HB_KV; g++)
        {
          if (g == weak_group[l])
            continue;
          for (guint j = 0; j < HB_HD; j++)
            {
              g_assert_cmpfloat (weight_at (&P->bk, 0, out_kv * HB_HD + j), ==, weight_at (&S->bk, 0, g * HB_HD + j));
              g_assert_cmpfloat (weight_at (&P->bv, 0, out_kv * HB_HD + j), ==, weight_at (&S->bv, 0, g * HB_HD + j));
              g_assert_cmpfloat (weight_at (&P->wk, out_kv * HB_HD + j, 3), ==, weight_at (&S->wk, g * HB_HD + j, 3));
              for (guint t = 0; t < group; t++)
                g_assert_cmpfloat (weight_at (&P->bq, 0, (out_kv * group + t) * HB_HD + j), ==,
                                   weight_at (&S->bq, 0, (g * group + t) * HB_HD + j));
            }
          out_kv++;
        }
      for (guint j = 0; j < HB_HD; j++)
        kv_drop[j] = weak_group[l] * HB_HD + j;
      for (guint j = 0; j < group * HB_HD; j++)
        q_drop[j] = weak_group[l] * group * HB_HD + j;
      zero_rows (&Z->wq, q_drop, G_N_ELEMENTS (q_drop), owned);
      zero_rows (&Z->wk, kv_drop, HB_HD, owned);
      zero_rows (&Z->wv, kv_drop, HB_HD, owned);
      zero_cols (&Z->wo, 0, Z->wo.rows, q_drop, G_N_ELEMENTS (q_drop), owned);
      zero_cols (&Z->bq, 0, 1, q_drop, G_N_ELEMENTS (q_drop), owned);
      zero_cols (&Z->bk, 0, 1, kv_drop, HB_HD, owned);
      zero_cols (&Z->bv, 0, 1, kv_drop, HB_HD, owned);
    }
  assert_same_forward (pruned, &zeroed);
  g_free (zeroed.layers);
  um_test_rmtree (tmp);
}

/* Every memory mode plans for the families (pruning too): the weights the
 * plan counts are the converter's tensors as the model holds them. */
static void
test_plan_modes (void)
{
  const char *const names[] = { "tiny-dream", "tiny-llada-moe", "tiny-rnd1-f32.gguf" };
  UmPlanShape shape;
  UmPlanTarget target;

  um_plan_shape_init (&shape);
  shape.prompt_length = 40;
  shape.gen_length = 24;
  shape.block_length = 8;
  um_plan_target_cpu (&target, 0, 2);
  for (guint i = 0; i < G_N_ELEMENTS (names); i++)
    {
      g_autofree char *path = um_test_data_path (names[i]);
      g_autoptr(UmModel) m = load_model (path);
      g_autoptr(GError) error = NULL;
      g_autoptr(GArray) table = um_plan_table (m, &shape, &target, &error);
      UmMemOptions o;
      UmPlan pruned;

      g_assert_no_error (error);
      g_assert_cmpuint (table->len, ==, UM_MEM_N_MODES);
      for (guint k = 0; k < table->len; k++)
        {
          const UmPlan *p = &g_array_index (table, UmPlan, k);
          g_test_message ("%s %s: weights %" G_GUINT64_FORMAT ", device %" G_GUINT64_FORMAT ", host %" G_GUINT64_FORMAT,
                          names[i], um_mem_mode_to_string (p->mode), p->weight_bytes, p->device_peak, p->host_peak);
          g_assert_cmpuint (p->weight_bytes, >, 0);
          if (p->converts)
            {
              UmQuantizeOptions q = { p->weight_format, 0, 0 };
              g_autoptr(GArray) planned = um_quantize_plan_tensors (m, &q, &error);
              guint64 sum = 0;
              g_assert_no_error (error);
              /* The converter's bytes, with the small tensors as the model
               * holds them (float) rather than as written (also F32). */
              for (guint j = 0; j < planned->len; j++)
                sum += g_array_index (planned, UmPlannedTensor, j).bytes;
              g_assert_cmpuint (p->converted_file_bytes, ==, p->weight_bytes);
              g_assert_cmpuint (p->weight_bytes, <=, sum);
            }
        }
      um_mem_options_init (&o, UM_MEM_EXTREME_AGGRESSIVE);
      o.prune_heads = 0.25;
      o.prune_ffn = 0.125;
      g_assert_true (um_plan_compute (m, &o, &shape, &target, &pruned, &error));
      g_assert_no_error (error);
      g_assert_true (pruned.converts);
      g_assert_cmpuint (pruned.weight_bytes, >, 0);
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/convert-families/plan-matches-written", test_plan_matches_written);
  g_test_add_func ("/convert-families/kquant-mix-experts", test_kquant_mix_experts);
  g_test_add_func ("/convert-families/prune-experts", test_prune_experts);
  g_test_add_func ("/convert-families/prune-heads-biases", test_prune_heads_biases);
  g_test_add_func ("/convert-families/plan-modes", test_plan_modes);
  return g_test_run ();
}

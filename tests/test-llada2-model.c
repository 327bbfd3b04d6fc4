/* test-llada2-model.c — LLaDA 2.x checkpoints read and written, up to the
 * forward pass (tested in test-family-forward):
 * - tiny-llada2 from its Hugging Face folder and from the F32 and Q8_0 GGUF
 *   files: every configuration field (the fixture's values, and the three
 *   forms agree), the weights (q/k/v as row views of the fused tensor,
 *   experts stacked, the selection bias, the shared expert; the same
 *   values in every form, Q8_0 within its rounding);
 * - the tokenize cases and the chat prompt through each loaded model;
 * - `unmask-cli quantize`'s writer: F32 gives the fixture's llada2 file
 *   (tensors and metadata), every type holds exactly the reference
 *   quantization of the source rows and loads back to the same
 *   configuration, pruning keeps a fused q/k/v whole with the kept heads'
 *   rows.
 */
#include <math.h>
#include <string.h>

#include "um-error.h"
#include "um-gguf.h"
#include "um-model.h"
#include "um-quant.h"
#include "um-quantize.h"
#include "um-test-util.h"
#include "um-tokenizer.h"

static const char *const forms[] = { "tiny-llada2", "tiny-llada2-f32.gguf", "tiny-llada2-q8_0.gguf" };

static UmModel *
load (const char *path)
{
  g_autoptr(GError) error = NULL;
  UmModel *m = um_model_load (path, NULL, &error);

  g_assert_no_error (error);
  g_assert_nonnull (m);
  return m;
}

static UmModel *
load_data (const char *name)
{
  g_autofree char *path = um_test_data_path (name);
  return load (path);
}

static JsonObject *
expected (JsonParser **parser)
{
  *parser = um_test_load_json ("tiny-llada2.expected.json");
  return json_node_get_object (json_parser_get_root (*parser));
}

/* A double that went through a GGUF float32: one rounding, at most half an
 * ulp, 2⁻²⁴ relative. */
static gboolean
same_after_f32 (double a, double b)
{
  return fabs (a - b) <= ldexp (fabs (b), -24);
}

/* Every field of two configurations, the doubles up to one float32
 * rounding (GGUF stores them so). */
static void
assert_same_config (const UmModelConfig *a, const UmModelConfig *b, const char *what)
{
#define SAME(f) G_STMT_START { if (a->f != b->f) g_error ("%s: %s differs (%g, %g)", what, #f, \
                                                         (double) a->f, (double) b->f); } G_STMT_END
  SAME (arch); SAME (n_layers); SAME (d_model); SAME (n_heads); SAME (n_kv_heads); SAME (head_dim);
  SAME (mlp_hidden); SAME (vocab_size); SAME (max_seq_len); SAME (rope_interleaved); SAME (tied_embeddings);
  SAME (mask_id); SAME (eos_id); SAME (eot_id); SAME (bos_id); SAME (pad_id);
  SAME (qkv_bias); SAME (qk_norm); SAME (shift_logits); SAME (rope_dim); SAME (block_causal);
  SAME (n_experts); SAME (n_experts_used); SAME (expert_ffn); SAME (n_dense_leading); SAME (router_func);
  SAME (router_norm); SAME (n_expert_groups); SAME (n_groups_used); SAME (expert_bias); SAME (shared_ffn);
#undef SAME
  if (!same_after_f32 (a->rope_theta, b->rope_theta) || !same_after_f32 (a->rms_eps, b->rms_eps)
      || !same_after_f32 (a->router_scale, b->router_scale))
    g_error ("%s: rope_theta, rms_eps or router_scale differs", what);
}

/* ---- configuration -------------------------------------------------------------- */

static void
check_fixture_config (const UmModelConfig *c, JsonObject *exp)
{
  g_assert_cmpint (c->arch, ==, UM_ARCH_LLADA2);
  g_assert_cmpstr (um_arch_info (c->arch)->gguf_arch, ==, json_object_get_string_member (exp, "arch"));
  g_assert_cmpuint (c->n_layers, ==, 2);
  g_assert_cmpuint (c->d_model, ==, 64);
  g_assert_cmpuint (c->n_heads, ==, 4);
  g_assert_cmpuint (c->n_kv_heads, ==, 2);
  g_assert_cmpuint (c->head_dim, ==, 16);
  g_assert_cmpuint (c->rope_dim, ==, 8);
  g_assert_cmpuint (c->mlp_hidden, ==, 128);
  g_assert_cmpuint (c->vocab_size, ==, 512);
  g_assert_cmpuint (c->max_seq_len, ==, 32768);
  g_assert_true (same_after_f32 (c->rope_theta, 6e5));
  g_assert_true (same_after_f32 (c->rms_eps, 1e-6));
  g_assert_false (c->rope_interleaved);
  g_assert_false (c->tied_embeddings);
  g_assert_true (c->qk_norm);
  g_assert_false (c->qkv_bias);
  g_assert_true (c->block_causal);
  g_assert_cmpint (c->shift_logits, ==, json_object_get_boolean_member (exp, "shift_logits"));
  g_assert_cmpuint (c->n_experts, ==, 8);
  g_assert_cmpuint (c->n_experts_used, ==, 3);
  g_assert_cmpuint (c->expert_ffn, ==, 32);
  g_assert_cmpuint (c->n_dense_leading, ==, 1);
  g_assert_cmpint (c->router_func, ==, UM_ROUTER_SIGMOID);
  g_assert_true (c->router_norm);
  /* Exact: 2.5 is a float32. */
  g_assert_cmpfloat (c->router_scale, ==, 2.5);
  g_assert_cmpuint (c->n_expert_groups, ==, 4);
  g_assert_cmpuint (c->n_groups_used, ==, 2);
  g_assert_true (c->expert_bias);
  g_assert_cmpuint (c->shared_ffn, ==, 32);
  g_assert_cmpint (c->mask_id, ==, json_object_get_int_member (exp, "mask_token_id"));
  g_assert_cmpint (c->eos_id, ==, json_object_get_int_member (exp, "eos_token_id"));
  g_assert_cmpint (c->pad_id, ==, json_object_get_int_member (exp, "pad_token_id"));
  g_assert_cmpint (c->eot_id, ==, json_object_get_int_member (exp, "eot_token_id"));
  g_assert_cmpint (c->bos_id, ==, 505);
}

/* Every tensor of the file is a parameter the configuration accounts for
 * (the selection bias and the shared expert included). */
static void
check_n_params (const UmModel *m)
{
  const UmModelConfig *c = &m->cfg;
  const guint n_moe = c->n_layers - c->n_dense_leading;
  uint64_t total = 0;

  for (guint i = 0; i < um_tensor_table_size (m->tensors); i++)
    total += um_tensor_table_get (m->tensors, i)->n_elems;
  g_assert_cmpuint (um_model_config_n_params (c), ==, total);
  g_assert_cmpuint (um_model_config_n_active_params (c), ==,
                    total - (uint64_t) n_moe * (c->n_experts - c->n_experts_used) * 3 * c->d_model * c->expert_ffn);
}

static void
test_config (void)
{
  g_autoptr(JsonParser) parser = NULL;
  JsonObject *exp = expected (&parser);
  g_autoptr(UmModel) hf = load_data (forms[0]);

  check_fixture_config (&hf->cfg, exp);
  check_n_params (hf);
  for (guint i = 1; i < G_N_ELEMENTS (forms); i++)
    {
      g_autoptr(UmModel) g = load_data (forms[i]);
      check_fixture_config (&g->cfg, exp);
      check_n_params (g);
      assert_same_config (&g->cfg, &hf->cfg, forms[i]);
    }
}

/* ---- weights -------------------------------------------------------------------- */

/* The largest |x| of @row's block of @n values starting at @b. */
static float
block_amax (const float *row, guint64 b, guint64 n)
{
  float m = 0;
  for (guint64 i = b; i < b + n; i++)
    m = MAX (m, fabsf (row[i]));
  return m;
}

/* @got (any stored type) against @want (float): exact when @got is F32;
 * a Q8_0 value is q·fp16(d) with d = amax/127 of its block of 32 and
 * q = round(x/d), so it is off by at most d/2 (the rounding of q) plus
 * |q|·|d − fp16(d)| ≤ 127·d·2⁻¹¹ (the scale's rounding to half precision). */
static void
assert_weight_close (const UmWeight *got, const UmWeight *want, const char *what)
{
  g_autofree float *g = g_new (float, got->cols), *w = g_new (float, want->cols);

  if (got->rows != want->rows || got->cols != want->cols)
    g_error ("%s: [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT "] against [%" G_GUINT64_FORMAT ", %"
             G_GUINT64_FORMAT "]", what, got->rows, got->cols, want->rows, want->cols);
  g_assert_true (want->dtype == UM_DTYPE_F32);
  g_assert_true (got->dtype == UM_DTYPE_F32 || got->dtype == UM_DTYPE_Q8_0);
  for (guint64 r = 0; r < got->rows; r++)
    {
      g_assert_true (um_quant_dequantize_row (got->dtype, (const guint8 *) got->data + r * got->row_bytes, g,
                                              got->cols));
      g_assert_true (um_quant_dequantize_row (want->dtype, (const guint8 *) want->data + r * want->row_bytes, w,
                                              want->cols));
      for (guint64 c = 0; c < got->cols; c++)
        {
          const double d = block_amax (w, c / 32 * 32, MIN (32, got->cols - c / 32 * 32)) / 127.0;
          const double tol = got->dtype == UM_DTYPE_F32 ? 0 : d * (0.5 + 127.0 / 2048.0) * (1 + 1e-6);
          if (fabs ((double) g[c] - w[c]) > tol)
            g_error ("%s: row %" G_GUINT64_FORMAT " col %" G_GUINT64_FORMAT ": %.9g, expected %.9g (±%.3g)",
                     what, r, c, g[c], w[c], tol);
        }
    }
}

/* Layer @l's weights, by name, for comparisons across forms. */
static const UmWeight *
layer_weight (const UmLayerWeights *L, guint i, const char **name)
{
  static const char *const names[] = {
    "attn_norm", "wqkv", "wq", "wk", "wv", "wo", "ffn_norm", "q_norm", "k_norm", "w_gate", "w_up", "w_down",
    "router", "router_bias", "sh_gate", "sh_up", "sh_down",
  };
  const UmWeight *w[] = {
    &L->attn_norm, &L->wqkv, &L->wq, &L->wk, &L->wv, &L->wo, &L->ffn_norm, &L->q_norm, &L->k_norm,
    &L->w_gate, &L->w_up, &L->w_down, &L->router, &L->router_bias, &L->sh_gate, &L->sh_up, &L->sh_down,
  };
  G_STATIC_ASSERT (G_N_ELEMENTS (names) == G_N_ELEMENTS (w));
  if (i >= G_N_ELEMENTS (w))
    return NULL;
  *name = names[i];
  return w[i];
}

/* The layout every form binds: the fused q/k/v and its row views, the
 * dense layer 0, the expert layer 1 with its bias and shared expert. */
static void
check_layout (const UmModel *m)
{
  for (guint l = 0; l < 2; l++)
    {
      const UmLayerWeights *L = &m->layers[l];
      const guint8 *qkv = L->wqkv.data;

      g_assert_nonnull (qkv);
      g_assert_cmpuint (L->wqkv.rows, ==, (4 + 2 * 2) * 16);
      g_assert_cmpuint (L->wqkv.cols, ==, 64);
      g_assert_true (L->wq.data == qkv && L->wq.rows == 64);
      g_assert_true ((const guint8 *) L->wk.data == qkv + 64 * L->wqkv.row_bytes && L->wk.rows == 32);
      g_assert_true ((const guint8 *) L->wv.data == qkv + 96 * L->wqkv.row_bytes && L->wv.rows == 32);
      g_assert_true (L->wq.row_bytes == L->wqkv.row_bytes && L->wq.dtype == L->wqkv.dtype);
      g_assert_cmpuint (L->wo.rows, ==, 64);
      g_assert_cmpuint (L->wo.cols, ==, 64);
      g_assert_cmpuint (L->q_norm.cols, ==, 16);
      g_assert_cmpuint (L->k_norm.cols, ==, 16);
      g_assert_null (L->bq.data);
      g_assert_cmpuint (L->n_heads, ==, 4);
      g_assert_cmpuint (L->n_kv_heads, ==, 2);
      if (l == 0)
        {
          g_assert_cmpuint (L->n_experts, ==, 0);
          g_assert_cmpuint (L->ffn, ==, 128);
          g_assert_cmpuint (L->w_gate.rows, ==, 128);
          g_assert_cmpuint (L->w_down.cols, ==, 128);
          g_assert_null (L->router.data);
          g_assert_null (L->router_bias.data);
          g_assert_null (L->sh_gate.data);
          g_assert_cmpuint (L->shared_ffn, ==, 0);
          continue;
        }
      g_assert_cmpuint (L->n_experts, ==, 8);
      g_assert_cmpuint (L->ffn, ==, 32);
      g_assert_cmpuint (L->w_gate.rows, ==, 8 * 32);
      g_assert_cmpuint (L->w_down.rows, ==, 8 * 64);
      g_assert_cmpuint (L->w_down.cols, ==, 32);
      g_assert_true (L->router.dtype == UM_DTYPE_F32 && L->router.rows == 8 && L->router.cols == 64);
      g_assert_true (L->router_bias.dtype == UM_DTYPE_F32 && L->router_bias.rows == 1 && L->router_bias.cols == 8);
      g_assert_cmpuint (L->shared_ffn, ==, 32);
      g_assert_true (L->sh_gate.rows == 32 && L->sh_gate.cols == 64);
      g_assert_true (L->sh_up.rows == 32 && L->sh_up.cols == 64);
      g_assert_true (L->sh_down.rows == 64 && L->sh_down.cols == 32);
    }
}

/* Expert e's slice of the folder's stacked matrices holds the bytes of
 * its own tensor. */
static void
check_hf_experts (const UmModel *m)
{
  static const char *const proj[] = { "gate_proj", "up_proj", "down_proj" };
  const UmLayerWeights *L = &m->layers[1];
  const UmWeight *mats[] = { &L->w_gate, &L->w_up, &L->w_down };

  for (guint i = 0; i < 3; i++)
    for (guint e = 0; e < 8; e++)
      {
        g_autofree char *name = g_strdup_printf ("model.layers.1.mlp.experts.%u.%s.weight", e, proj[i]);
        const UmTensorInfo *info = um_tensor_table_lookup (m->tensors, name);
        UmWeight s = um_weight_expert (mats[i], 8, e);

        g_assert_nonnull (info);
        g_assert_cmpuint (s.rows * s.row_bytes, ==, info->n_bytes);
        g_assert_cmpmem (s.data, info->n_bytes, info->data, info->n_bytes);
      }
}

static void
test_weights (void)
{
  g_autoptr(UmModel) hf = load_data (forms[0]);

  check_layout (hf);
  check_hf_experts (hf);
  for (guint f = 1; f < G_N_ELEMENTS (forms); f++)
    {
      g_autoptr(UmModel) g = load_data (forms[f]);
      const UmWeight *top[][2] = {
        { &g->tok_embd, &hf->tok_embd }, { &g->output, &hf->output }, { &g->out_norm, &hf->out_norm },
      };

      check_layout (g);
      for (guint i = 0; i < G_N_ELEMENTS (top); i++)
        assert_weight_close (top[i][0], top[i][1], forms[f]);
      for (guint l = 0; l < 2; l++)
        {
          const char *name = NULL;
          const UmWeight *a, *b;
          for (guint i = 0; (a = layer_weight (&g->layers[l], i, &name)) != NULL; i++)
            {
              g_autofree char *what = g_strdup_printf ("%s layer %u %s", forms[f], l, name);
              b = layer_weight (&hf->layers[l], i, &name);
              g_assert_cmpint (a->data != NULL, ==, b->data != NULL);
              if (a->data != NULL)
                assert_weight_close (a, b, what);
            }
        }
    }
}

/* ---- tokenizer and chat prompt -------------------------------------------------- */

static void
test_tokenizer (void)
{
  g_autoptr(JsonParser) parser = NULL;
  JsonObject *exp = expected (&parser);
  JsonArray *cases = json_object_get_array_member (exp, "tokenize");
  JsonObject *gen = json_array_get_object_element (json_object_get_array_member (exp, "generate"), 0);
  g_autoptr(GArray) prompt = um_test_json_ids (json_object_get_array_member (gen, "prompt_ids"));

  g_assert_cmpuint (json_array_get_length (cases), >=, 10);
  for (guint f = 0; f < G_N_ELEMENTS (forms); f++)
    {
      g_autoptr(UmModel) m = load_data (forms[f]);
      g_autoptr(GArray) ids = g_array_new (FALSE, FALSE, sizeof (gint32));
      g_autoptr(GError) error = NULL;

      for (guint i = 0; i < json_array_get_length (cases); i++)
        {
          JsonObject *c = json_array_get_object_element (cases, i);
          g_autoptr(GArray) want = um_test_json_ids (json_object_get_array_member (c, "ids"));
          g_array_set_size (ids, 0);
          g_assert_true (um_tokenizer_encode (m->tokenizer, json_object_get_string_member (c, "text"), -1, ids,
                                              &error));
          g_assert_no_error (error);
          g_assert_cmpmem (ids->data, ids->len * sizeof (gint32), want->data, want->len * sizeof (gint32));
        }
      /* The Ling 2.0 roles, its default system turn, the turn end. */
      g_assert_cmpint (m->chat_template->format, ==, UM_CHAT_FORMAT_LING);
      g_array_set_size (ids, 0);
      g_assert_true (um_model_build_chat_prompt (m, NULL, 0, "What is free software, in short?", ids, &error));
      g_assert_no_error (error);
      g_assert_cmpmem (ids->data, ids->len * sizeof (gint32), prompt->data, prompt->len * sizeof (gint32));
      g_assert_cmpint (m->cfg.eot_id, ==, um_tokenizer_token_to_id (m->tokenizer, "<|role_end|>"));
    }
}

/* ---- writing -------------------------------------------------------------------- */

/* Every key of @theirs is in @ours with the same value; ours adds only the
 * alignment and the recommended sampling. */
static void
assert_same_metadata (const char *ours, const char *theirs)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(UmGguf) a = um_gguf_open (ours, &error);
  g_autoptr(UmGguf) b = um_gguf_open (theirs, &error);

  g_assert_no_error (error);
  for (guint i = 0; i < um_gguf_n_kv (b); i++)
    {
      const char *key = um_gguf_kv_key (b, i);
      gint j = um_gguf_find_key (a, key);
      gsize la, lb;
      const guint8 *ra, *rb;

      if (j < 0)
        g_error ("%s: key %s of %s is missing", ours, key, theirs);
      ra = um_gguf_kv_raw (a, j, &la);
      rb = um_gguf_kv_raw (b, i, &lb);
      if (la != lb || memcmp (ra, rb, la) != 0)
        {
          g_autofree char *va = um_gguf_kv_to_string (a, j), *vb = um_gguf_kv_to_string (b, i);
          g_error ("%s: %s is %s, %s says %s", ours, key, va, theirs, vb);
        }
    }
  for (guint i = 0; i < um_gguf_n_kv (a); i++)
    {
      const char *key = um_gguf_kv_key (a, i);
      if (um_gguf_find_key (b, key) < 0 && !g_str_equal (key, "general.alignment")
          && !g_str_has_prefix (key, "general.sampling."))
        g_error ("%s: key %s is not in %s", ours, key, theirs);
    }
}

/* The source of planned tensor @t. */
static const UmWeight *
source_of (const UmModel *m, const UmPlannedTensor *t)
{
  const UmLayerWeights *L = t->layer >= 0 ? &m->layers[t->layer] : NULL;

  switch (t->kind)
    {
    case UM_PLANNED_EMBED: return &m->tok_embd;
    case UM_PLANNED_OUTPUT: return &m->output;
    case UM_PLANNED_NORM:
      return L == NULL ? &m->out_norm : g_str_has_suffix (t->name, "attn_norm.weight") ? &L->attn_norm : &L->ffn_norm;
    case UM_PLANNED_QKV: return &L->wqkv;
    case UM_PLANNED_O: return &L->wo;
    case UM_PLANNED_GATE: return &L->w_gate;
    case UM_PLANNED_UP: return &L->w_up;
    case UM_PLANNED_DOWN: return &L->w_down;
    case UM_PLANNED_SH_GATE: return &L->sh_gate;
    case UM_PLANNED_SH_UP: return &L->sh_up;
    case UM_PLANNED_SH_DOWN: return &L->sh_down;
    case UM_PLANNED_Q_NORM: return &L->q_norm;
    case UM_PLANNED_K_NORM: return &L->k_norm;
    case UM_PLANNED_ROUTER: return &L->router;
    case UM_PLANNED_ROUTER_BIAS: return &L->router_bias;
    default: g_error ("%s: unexpected kind %d", t->name, t->kind);
    }
  return NULL;
}

/* Each tensor of @path holds exactly the reference quantization of its
 * source rows (both sides quantize the same floats with the same code),
 * in the planned type and llama.cpp's shape. */
static void
assert_planned_file (const UmModel *src, const char *type, const char *path)
{
  const UmQuantizeOptions opts = { type, 0, 0 };
  g_autoptr(GError) error = NULL;
  g_autoptr(GArray) plan = um_quantize_plan_tensors (src, &opts, &error);
  g_autoptr(UmGguf) g = um_gguf_open (path, &error);
  UmTensorTable *t;

  g_assert_no_error (error);
  t = um_gguf_get_tensors (g);
  g_assert_cmpuint (um_tensor_table_size (t), ==, plan->len);
  for (guint k = 0; k < plan->len; k++)
    {
      const UmPlannedTensor *p = &g_array_index (plan, UmPlannedTensor, k);
      const UmTensorInfo *info = um_tensor_table_lookup (t, p->name);
      const UmWeight *w = source_of (src, p);
      g_autofree float *row = g_new (float, p->cols);
      g_autofree guint8 *want = NULL;
      guint64 shape[3], row_bytes;
      const guint n_dims = um_planned_tensor_shape (p, shape);

      g_assert_nonnull (info);
      g_assert_cmpint (info->dtype, ==, p->dtype);
      g_assert_cmpuint (info->n_dims, ==, n_dims);
      g_assert_cmpmem (info->shape, n_dims * sizeof (guint64), shape, n_dims * sizeof (guint64));
      if (um_planned_kind_is_vector (p->kind) || p->kind == UM_PLANNED_ROUTER)
        g_assert_cmpint (info->dtype, ==, UM_DTYPE_F32);
      g_assert_true (um_dtype_bytes (p->dtype, p->cols, &row_bytes));
      want = g_malloc (row_bytes);
      for (guint64 r = 0; r < p->rows; r++)
        {
          g_assert_true (um_quant_dequantize_row (w->dtype, (const guint8 *) w->data + r * w->row_bytes, row, w->cols));
          g_assert_true (um_quant_quantize_row_ref (p->dtype, row, want, p->cols));
          if (memcmp (want, info->data + r * row_bytes, row_bytes) != 0)
            g_error ("%s: row %" G_GUINT64_FORMAT " of %s differs", type, r, p->name);
        }
    }
}

/* Tensors of @ours with the bytes of @theirs' (names, types, shapes, data). */
static void
assert_same_tensors (const char *ours, const char *theirs)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(UmGguf) a = um_gguf_open (ours, &error);
  g_autoptr(UmGguf) b = um_gguf_open (theirs, &error);
  UmTensorTable *ta, *tb;

  g_assert_no_error (error);
  ta = um_gguf_get_tensors (a);
  tb = um_gguf_get_tensors (b);
  g_assert_cmpuint (um_tensor_table_size (ta), ==, um_tensor_table_size (tb));
  for (guint i = 0; i < um_tensor_table_size (tb); i++)
    {
      const UmTensorInfo *y = um_tensor_table_get (tb, i), *x = um_tensor_table_get (ta, i);
      g_assert_cmpstr (x->name, ==, y->name);
      g_assert_cmpint (x->dtype, ==, y->dtype);
      g_assert_cmpuint (x->n_dims, ==, y->n_dims);
      g_assert_cmpmem (x->shape, x->n_dims * sizeof (guint64), y->shape, y->n_dims * sizeof (guint64));
      g_assert_cmpmem (x->data, x->n_bytes, y->data, y->n_bytes);
    }
}

/* From the folder and from the F32 file: F32 gives the fixture's file
 * (the llada2 convention as we document it), every type the reference
 * quantization of the source in the planned layout, and each loads back to
 * the same configuration and, within its rounding, the same weights. */
static void
test_quantize_round_trip (void)
{
  static const char *const types[] = { "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K" };
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *fixture_f32 = um_test_data_path ("tiny-llada2-f32.gguf");
  g_autofree char *fixture_q8 = um_test_data_path ("tiny-llada2-q8_0.gguf");

  for (guint s = 0; s < 2; s++)
    {
      g_autoptr(UmModel) src = load_data (forms[s]);
      for (guint i = 0; i < G_N_ELEMENTS (types); i++)
        {
          g_autofree char *out = g_build_filename (dir, types[i], NULL);
          g_autoptr(GError) error = NULL;
          g_autoptr(UmModel) back = NULL;
          g_autofree char *what = g_strdup_printf ("%s from %s", types[i], forms[s]);

          g_assert_true (um_quantize_model (src, types[i], out, NULL, NULL, NULL, &error));
          g_assert_no_error (error);
          assert_planned_file (src, types[i], out);
          back = load (out);
          assert_same_config (&back->cfg, &src->cfg, what);
          check_layout (back);
          if (g_str_equal (types[i], "F32"))
            {
              assert_same_tensors (out, fixture_f32);
              assert_same_metadata (out, fixture_f32);
            }
          if (g_str_equal (types[i], "Q8_0"))
            {
              /* The fixture's metadata, and its weights within Q8_0's rounding. */
              g_autoptr(UmModel) fixture = load (fixture_q8);
              assert_same_metadata (out, fixture_q8);
              for (guint l = 0; l < 2; l++)
                {
                  const char *name = NULL;
                  const UmWeight *a;
                  for (guint k = 0; (a = layer_weight (&back->layers[l], k, &name)) != NULL; k++)
                    if (a->data != NULL)
                      assert_weight_close (a, layer_weight (&src->layers[l], k, &name), what);
                }
              assert_weight_close (&back->output, &src->output, what);
              assert_weight_close (&back->tok_embd, &src->tok_embd, what);
              assert_same_config (&back->cfg, &fixture->cfg, what);
            }
        }
    }
  um_test_rmtree (dir);
}

/* The fixture's F32 file with 4 key/value heads (a fused q/k/v of 4 + 2·4
 * heads; their rows made up), so that head pruning has heads to drop. */
static char *
write_more_kv_heads (const char *dir)
{
  g_autofree char *src = um_test_data_path ("tiny-llada2-f32.gguf");
  char *path = g_build_filename (dir, "kv4.gguf", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(UmGguf) g = um_gguf_open (src, &error);
  g_autoptr(UmGgufWriter) w = um_gguf_writer_new ();
  const guint64 qkv_shape[2] = { (4 + 2 * 4) * 16, 64 };
  g_autofree float *qkv = g_new (float, qkv_shape[0] * qkv_shape[1]);
  UmTensorTable *t;

  g_assert_no_error (error);
  /* Rows of distinct norms (head h's rows scaled by 1 + h/8) and distinct
   * values, so that every kept row can be told apart. */
  for (guint64 r = 0; r < qkv_shape[0]; r++)
    for (guint64 c = 0; c < qkv_shape[1]; c++)
      qkv[r * qkv_shape[1] + c] = (float) ((1.0 + (double) ((r / 16) % 4) / 8.0 + (double) (r / 16) / 64.0)
                                           * sin (0.37 * (double) r + 0.11 * (double) c + 0.5) / 8.0);
  for (guint i = 0; i < um_gguf_n_kv (g); i++)
    if (!g_str_equal (um_gguf_kv_key (g, i), "llada2.attention.head_count_kv"))
      g_assert_true (um_gguf_writer_copy_kv (w, g, um_gguf_kv_key (g, i), &error));
  um_gguf_writer_set_u32 (w, "llada2.attention.head_count_kv", 4);
  t = um_gguf_get_tensors (g);
  for (guint i = 0; i < um_tensor_table_size (t); i++)
    {
      const UmTensorInfo *info = um_tensor_table_get (t, i);
      gboolean fused = g_str_has_suffix (info->name, ".attn_qkv.weight");
      g_assert_true (um_gguf_writer_add_tensor_info (w, info->name, info->dtype, info->n_dims,
                                                     fused ? qkv_shape : info->shape, NULL, &error));
    }
  g_assert_true (um_gguf_writer_begin (w, path, &error));
  for (guint i = 0; i < um_tensor_table_size (t); i++)
    {
      const UmTensorInfo *info = um_tensor_table_get (t, i);
      if (g_str_has_suffix (info->name, ".attn_qkv.weight"))
        g_assert_true (um_gguf_writer_write_tensor_data (w, qkv, qkv_shape[0] * qkv_shape[1] * sizeof (float),
                                                         &error));
      else
        g_assert_true (um_gguf_writer_write_tensor_data (w, info->data, info->n_bytes, &error));
    }
  g_assert_true (um_gguf_writer_finish (w, &error));
  g_assert_no_error (error);
  return path;
}

/* Index of the row of @w equal to @row, or -1. */
static gint64
find_row (const UmWeight *w, guint64 r0, guint64 n, const void *row)
{
  for (guint64 r = r0; r < r0 + n; r++)
    if (memcmp ((const guint8 *) w->data + r * w->row_bytes, row, w->row_bytes) == 0)
      return (gint64) r;
  return -1;
}

/* Pruning a fused q/k/v: still one attn_qkv, [q | k | v] of the kept heads,
 * each kept head's rows whole and in order, the same heads in q, k and v
 * (one query head per key/value head here); FFN pruning narrows the dense
 * and the expert layers, each as one scalar key, and leaves the shared
 * expert. */
static void
test_prune_fused (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *path = write_more_kv_heads (dir);
  g_autofree char *out = g_build_filename (dir, "pruned.gguf", NULL);
  g_autoptr(UmModel) src = load (path);
  g_autoptr(UmModel) back = NULL;
  g_autoptr(GError) error = NULL;
  const UmQuantizeOptions opts = { "F32", 0.3, 0.2 };

  g_assert_cmpuint (src->cfg.n_kv_heads, ==, 4);
  g_assert_true (um_quantize_model_full (src, &opts, out, NULL, NULL, NULL, &error));
  g_assert_no_error (error);
  back = load (out);
  /* ceil(0.7·4) = 3 heads, ceil(0.8·128) = 103 and ceil(0.8·32) = 26 neurons (F32: no block). */
  g_assert_cmpuint (back->cfg.n_kv_heads, ==, 3);
  g_assert_cmpuint (back->cfg.n_heads, ==, 3);
  g_assert_cmpuint (back->cfg.mlp_hidden, ==, 103);
  g_assert_cmpuint (back->cfg.expert_ffn, ==, 26);
  g_assert_cmpuint (back->cfg.shared_ffn, ==, 32);
  g_assert_cmpuint (back->cfg.rope_dim, ==, 8);
  g_assert_true (back->cfg.expert_bias);
  for (guint l = 0; l < 2; l++)
    {
      const UmLayerWeights *S = &src->layers[l], *B = &back->layers[l];
      gint64 prev = -1;

      g_assert_cmpuint (B->wqkv.rows, ==, 3 * 3 * 16);
      g_assert_cmpuint (B->n_heads, ==, 3);
      g_assert_cmpuint (B->wo.cols, ==, 48);
      for (guint h = 0; h < 3; h++)
        {
          /* Kept head h is source head j: its q, k and v rows, whole. */
          gint64 at = find_row (&S->wq, 0, 64, (const guint8 *) B->wq.data + h * 16 * B->wq.row_bytes);
          guint64 j;
          g_assert_cmpint (at, >=, 0);
          g_assert_cmpint (at % 16, ==, 0);
          j = at / 16;
          g_assert_cmpint ((gint64) j, >, prev);
          prev = j;
          for (guint64 r = 0; r < 16; r++)
            {
              g_assert_cmpmem ((const guint8 *) B->wq.data + (h * 16 + r) * B->wq.row_bytes, B->wq.row_bytes,
                               (const guint8 *) S->wq.data + (j * 16 + r) * S->wq.row_bytes, S->wq.row_bytes);
              g_assert_cmpmem ((const guint8 *) B->wk.data + (h * 16 + r) * B->wk.row_bytes, B->wk.row_bytes,
                               (const guint8 *) S->wk.data + (j * 16 + r) * S->wk.row_bytes, S->wk.row_bytes);
              g_assert_cmpmem ((const guint8 *) B->wv.data + (h * 16 + r) * B->wv.row_bytes, B->wv.row_bytes,
                               (const guint8 *) S->wv.data + (j * 16 + r) * S->wv.row_bytes, S->wv.row_bytes);
            }
        }
      if (l == 1)
        {
          g_assert_cmpuint (B->shared_ffn, ==, 32);
          g_assert_cmpmem (B->sh_down.data, B->sh_down.rows * B->sh_down.row_bytes,
                           S->sh_down.data, S->sh_down.rows * S->sh_down.row_bytes);
        }
    }
  um_test_rmtree (dir);
}

/* A llada2 file can only hold q/k/v fused: a model without them is refused
 * with an error naming the layer, and nothing is written. */
static void
test_unfused_refused (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *out = g_build_filename (dir, "x.gguf", NULL);
  g_autoptr(UmModel) m = load_data (forms[0]);
  g_autoptr(GError) error = NULL;

  memset (&m->layers[1].wqkv, 0, sizeof m->layers[1].wqkv);
  g_assert_false (um_quantize_model (m, "Q8_0", out, NULL, NULL, NULL, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "layer 1"));
  g_assert_false (g_file_test (out, G_FILE_TEST_EXISTS));
  um_test_rmtree (dir);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/llada2/config", test_config);
  g_test_add_func ("/llada2/weights", test_weights);
  g_test_add_func ("/llada2/tokenizer", test_tokenizer);
  g_test_add_func ("/llada2/quantize-round-trip", test_quantize_round_trip);
  g_test_add_func ("/llada2/prune-fused", test_prune_fused);
  g_test_add_func ("/llada2/unfused-refused", test_unfused_refused);
  return g_test_run ();
}

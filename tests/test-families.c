/* Dream, LLaDA-MoE and RND1 loaded from their Hugging Face folders and
 * from llama.cpp's F32 and Q8_0 GGUF files: the configuration each form
 * implies, the weights bound (stacked experts included) and the
 * double-precision reference forward against the fixtures' float64 logits. */
#include <math.h>
#include <string.h>

#include "um-error.h"
#include "um-model.h"
#include "um-ref-kernels.h"
#include "um-test-util.h"

typedef struct {
  const char *name;          /* tiny-dream: folder, NAME-f32.gguf, NAME.expected.json */
  UmArch      arch;
  gboolean    qkv_bias, qk_norm, router_norm;
  guint       n_heads, n_kv_heads, head_dim, n_experts, n_experts_used, expert_ffn;
  double      rope_theta, rms_eps;
} Family;

static const Family families[] = {
  { "tiny-dream", UM_ARCH_DREAM, TRUE, FALSE, FALSE, 4, 2, 16, 0, 0, 0, 1e6, 1e-6 },
  { "tiny-llada-moe", UM_ARCH_LLADA_MOE, FALSE, TRUE, FALSE, 4, 4, 16, 8, 3, 32, 5e4, 1e-5 },
  { "tiny-rnd1", UM_ARCH_RND1, FALSE, TRUE, TRUE, 8, 2, 16, 8, 3, 32, 1e6, 1e-6 },
};

/* Two float64 computations of the same forward differ only by the order
 * of their roundings: each dot product (at most 128 terms here) is off by
 * at most n·2⁻⁵³ ≈ 1.4e-14 of its absolute sum, and two layers of norms,
 * softmaxes and residuals amplify that by far less than 1e4 on these
 * confident little models. 1e-10 on the logits' own scale leaves room for
 * that while a single wrong detail (a missing bias, a skipped QK-norm, the
 * other RoPE pairing, one expert swapped) moves logits by more than 1e-3. */
#define DOUBLE_TOLERANCE 1e-10

static UmModel *
load (const char *file)
{
  g_autofree char *path = um_test_data_path (file);
  g_autoptr(GError) error = NULL;
  UmModel *model = um_model_load (path, NULL, &error);

  g_assert_no_error (error);
  g_assert_nonnull (model);
  return model;
}

static void
check_config (const Family *f, JsonObject *root, const UmModel *m, gboolean gguf)
{
  const UmModelConfig *c = &m->cfg;

  g_assert_cmpint (c->arch, ==, f->arch);
  g_assert_cmpstr (um_arch_info (c->arch)->gguf_arch, ==, json_object_get_string_member (root, "arch"));
  g_assert_cmpint (c->shift_logits, ==, json_object_get_boolean_member (root, "shift_logits"));
  g_assert_false (c->rope_interleaved);
  g_assert_cmpint (c->qkv_bias, ==, f->qkv_bias);
  g_assert_cmpint (c->qk_norm, ==, f->qk_norm);
  g_assert_cmpuint (c->n_layers, ==, 2);
  g_assert_cmpuint (c->d_model, ==, 64);
  g_assert_cmpuint (c->vocab_size, ==, 512);
  g_assert_cmpuint (c->n_heads, ==, f->n_heads);
  g_assert_cmpuint (c->n_kv_heads, ==, f->n_kv_heads);
  g_assert_cmpuint (c->head_dim, ==, f->head_dim);
  g_assert_cmpuint (c->n_experts, ==, f->n_experts);
  g_assert_cmpuint (c->n_experts_used, ==, f->n_experts_used);
  g_assert_cmpuint (c->expert_ffn, ==, f->expert_ffn);
  g_assert_cmpuint (c->n_dense_leading, ==, 0);
  g_assert_cmpint (c->router_func, ==, UM_ROUTER_SOFTMAX);
  g_assert_cmpint (c->router_norm, ==, f->router_norm);
  /* Exact: 1 is written as such or left at its default. */
  g_assert_cmpfloat (c->router_scale, ==, 1.0);
  /* GGUF stores these as float32 (1e-6 rounded, so relatively). */
  g_assert_cmpfloat (fabs (c->rope_theta - f->rope_theta), <=, f->rope_theta * 1e-7);
  g_assert_cmpfloat (fabs (c->rms_eps - f->rms_eps), <=, f->rms_eps * (gguf ? 1e-7 : 0));
  g_assert_cmpint (c->mask_id, ==, json_object_get_int_member (root, "mask_token_id"));
  g_assert_cmpint (c->eos_id, ==, json_object_get_int_member (root, "eos_token_id"));
  g_assert_cmpint (c->pad_id, ==, json_object_get_int_member (root, "pad_token_id"));
  g_assert_cmpint (c->eot_id, ==, json_object_get_int_member (root, "eot_token_id"));
}

/* Every tensor of the file is a parameter the configuration accounts for. */
static void
check_n_params (const UmModel *m)
{
  uint64_t total = 0;

  for (guint i = 0; i < um_tensor_table_size (m->tensors); i++)
    total += um_tensor_table_get (m->tensors, i)->n_elems;
  g_assert_cmpuint (um_model_config_n_params (&m->cfg), ==, total);
  if (m->cfg.n_experts == 0)
    g_assert_cmpuint (um_model_config_n_active_params (&m->cfg), ==, total);
  else
    g_assert_cmpuint (um_model_config_n_active_params (&m->cfg), ==,
                      total - (uint64_t) m->cfg.n_layers * (m->cfg.n_experts - m->cfg.n_experts_used)
                              * 3 * m->cfg.d_model * m->cfg.expert_ffn);
}

/* Expert e's slice of the stacked matrices holds exactly the bytes of the
 * tensor the file stores for it (HF: one tensor per expert, gathered). */
static void
check_experts (const UmModel *m, gboolean gguf)
{
  static const char *const hf[] = { "gate_proj", "up_proj", "down_proj" };
  static const char *const gg[] = { "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps" };

  for (guint l = 0; l < m->cfg.n_layers; l++)
    {
      const UmLayerWeights *W = &m->layers[l];
      const UmWeight *mats[] = { &W->w_gate, &W->w_up, &W->w_down };

      g_assert_cmpuint (W->n_experts, ==, m->cfg.n_experts);
      g_assert_cmpuint (W->ffn, ==, m->cfg.expert_ffn);
      g_assert_cmpuint (W->router.rows, ==, m->cfg.n_experts);
      g_assert_true (W->router.dtype == UM_DTYPE_F32);
      for (guint i = 0; i < 3; i++)
        for (guint e = 0; e < W->n_experts; e++)
          {
            UmWeight s = um_weight_expert (mats[i], W->n_experts, e);
            g_autofree char *name = gguf ? g_strdup_printf ("blk.%u.%s.weight", l, gg[i])
                                         : g_strdup_printf ("model.layers.%u.mlp.experts.%u.%s.weight", l, e, hf[i]);
            const UmTensorInfo *info = um_tensor_table_lookup (m->tensors, name);
            size_t bytes = s.rows * s.row_bytes;

            g_assert_nonnull (info);
            g_assert_cmpuint (s.rows, ==, i < 2 ? m->cfg.expert_ffn : m->cfg.d_model);
            g_assert_true (s.dtype == info->dtype);
            g_assert_cmpmem (s.data, bytes, info->data + (gguf ? e * bytes : 0), bytes);
          }
    }
}

static void
check_form (gconstpointer data)
{
  const char *const *spec = data;   /* { family name, expected key } */
  const Family *f = NULL;
  g_autofree char *json_name = g_strdup_printf ("%s.expected.json", spec[0]);
  g_autoptr(JsonParser) parser = um_test_load_json (json_name);
  JsonObject *root = json_node_get_object (json_parser_get_root (parser));
  JsonObject *entry = json_object_get_object_member (root, spec[1]);
  JsonArray *values = json_object_get_array_member (entry, "values");
  g_autoptr(GArray) ids = um_test_json_ids (json_object_get_array_member (entry, "ids"));
  gboolean gguf = json_object_has_member (entry, "file");
  g_autoptr(UmModel) m = load (gguf ? json_object_get_string_member (entry, "file") : spec[0]);
  g_autoptr(GError) error = NULL;
  g_autofree double *got = NULL;
  const guint V = 512;
  double err = 0;

  for (guint i = 0; i < G_N_ELEMENTS (families); i++)
    if (g_str_equal (families[i].name, spec[0]))
      f = &families[i];
  g_assert_nonnull (f);
  check_config (f, root, m, gguf);
  check_n_params (m);
  if (f->n_experts > 0)
    check_experts (m, gguf);
  for (guint l = 0; l < m->cfg.n_layers; l++)
    {
      g_assert_cmpint (m->layers[l].bq.data != NULL, ==, f->qkv_bias);
      g_assert_cmpint (m->layers[l].q_norm.data != NULL, ==, f->qk_norm);
      g_assert_cmpuint (m->layers[l].wq.rows, ==, f->n_heads * f->head_dim);
      g_assert_cmpuint (m->layers[l].wo.cols, ==, f->n_heads * f->head_dim);
    }

  got = g_new (double, ids->len * V);
  g_assert_true (um_ref_forward (m, (const gint32 *) ids->data, ids->len, got, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (json_array_get_length (values), ==, ids->len);
  for (guint r = 0; r < ids->len; r++)
    {
      JsonArray *row = json_array_get_array_element (values, r);
      g_assert_cmpuint (json_array_get_length (row), ==, V);
      for (guint v = 0; v < V; v++)
        {
          double want = json_array_get_double_element (row, v);
          err = MAX (err, fabs (got[r * V + v] - want) / (1 + fabs (want)));
        }
    }
  g_test_message ("%s %s: reference forward %.3g from the fixture", spec[0], spec[1], err);
  g_assert_cmpfloat (err, <, DOUBLE_TOLERANCE);
}

int
main (int argc, char **argv)
{
  static const char *const forms[][2] = {
    { "tiny-dream", "logits" }, { "tiny-dream", "gguf_f32" }, { "tiny-dream", "gguf_q8_0" },
    { "tiny-llada-moe", "logits" }, { "tiny-llada-moe", "gguf_f32" }, { "tiny-llada-moe", "gguf_q8_0" },
    { "tiny-rnd1", "logits" }, { "tiny-rnd1", "gguf_f32" }, { "tiny-rnd1", "gguf_q8_0" },
  };

  g_test_init (&argc, &argv, NULL);
  for (guint i = 0; i < G_N_ELEMENTS (forms); i++)
    {
      g_autofree char *path = g_strdup_printf ("/families/%s/%s", forms[i][0], forms[i][1]);
      g_test_add_data_func (path, forms[i], check_form);
    }
  return g_test_run ();
}

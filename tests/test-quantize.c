/* unmask's quantizer writes GGUFs as llama.cpp's tools do: from the
 * safetensors fixture, the F32/Q8_0/Q4_0 tensors must be byte-identical to
 * the llama.cpp-made fixture files (Q/K rows permuted included); the K-quant
 * mixes put the right tensors in Q6_K; the output loads and runs. Dream,
 * LLaDA-MoE and RND1 likewise: F32 and Q8_0 files byte-identical to the
 * fixtures' (tensors and metadata), giving the fixtures' logits when loaded
 * back; every other type holds exactly the reference quantization of each
 * source row, in the tensor and layout llama.cpp expects. */
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

#include "um-engine.h"
#include "um-error.h"
#include "um-gguf.h"
#include "um-quant.h"
#include "um-quantize.h"
#include "um-ref-kernels.h"
#include "um-test-util.h"

static char *
quantize (const char *model_name, const char *type, const char *dir)
{
  g_autofree char *src = um_test_data_path (model_name);
  g_autofree char *file = g_strdup_printf ("%s.gguf", type);
  char *out = g_build_filename (dir, file, NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(UmModel) model = um_model_load (src, NULL, &error);

  g_assert_no_error (error);
  g_assert_true (um_quantize_model (model, type, out, NULL, NULL, NULL, &error));
  g_assert_no_error (error);
  return out;
}

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
      const UmTensorInfo *want = um_tensor_table_get (tb, i);
      const UmTensorInfo *got = um_tensor_table_lookup (ta, want->name);
      g_assert_nonnull (got);
      g_assert_cmpint (got->dtype, ==, want->dtype);
      g_assert_cmpuint (got->n_dims, ==, want->n_dims);
      g_assert_cmpmem (got->shape, sizeof got->shape, want->shape, sizeof want->shape);
      if (got->n_bytes != want->n_bytes || memcmp (got->data, want->data, got->n_bytes) != 0)
        g_error ("tensor %s differs from %s", want->name, theirs);
    }
  /* The tokenizer metadata travels unchanged. */
  {
    guint64 na, nb;
    const char * const *ka = um_gguf_get_string_array (a, "tokenizer.ggml.tokens", &na, &error);
    const char * const *kb = um_gguf_get_string_array (b, "tokenizer.ggml.tokens", &nb, &error);
    g_assert_cmpuint (na, ==, nb);
    for (guint64 i = 0; i < na; i++)
      g_assert_cmpstr (ka[i], ==, kb[i]);
  }
}

static void
test_matches_llama_cpp_files (void)
{
  static const char *const pairs[][2] = {
    { "F32", "tiny-llada-f32.gguf" }, { "Q8_0", "tiny-llada-q8_0.gguf" }, { "Q4_0", "tiny-llada-q4_0.gguf" },
  };
  g_autofree char *dir = um_test_mkdtemp ();
  for (guint i = 0; i < G_N_ELEMENTS (pairs); i++)
    {
      g_autofree char *ours = quantize ("tiny-llada", pairs[i][0], dir);
      g_autofree char *theirs = um_test_data_path (pairs[i][1]);
      assert_same_tensors (ours, theirs);
    }
  /* GGUF in, GGUF out: rows already permuted are not permuted again. */
  {
    g_autofree char *ours = quantize ("tiny-llada-f32.gguf", "F32", dir);
    g_autofree char *theirs = um_test_data_path ("tiny-llada-f32.gguf");
    assert_same_tensors (ours, theirs);
  }
  um_test_rmtree (dir);
}

static double
logits_error (const char *a_path, const char *b_path)
{
  const gint32 ids[] = { 5, 17, 250, 33, 7, 508, 508, 508, 64, 99, 508, 1, 2, 3, 508, 400 };
  g_autoptr(GError) error = NULL;
  g_autoptr(UmEngine) a = um_test_load_engine (a_path, TRUE);
  g_autoptr(UmEngine) b = um_test_load_engine (b_path, TRUE);
  float la[16 * 512], lb[16 * 512];
  double num = 0, den = 0;

  g_assert_no_error (error);
  g_assert_true (um_forward_logits (um_engine_get_forward (a), ids, 1, 16, NULL, 0, la, NULL, &error));
  g_assert_true (um_forward_logits (um_engine_get_forward (b), ids, 1, 16, NULL, 0, lb, NULL, &error));
  for (int i = 0; i < 16 * 512; i++)
    {
      num += (la[i] - lb[i]) * (la[i] - lb[i]);
      den += lb[i] * lb[i];
    }
  return sqrt (num / den);
}

static void
test_kquant_mixes (void)
{
  /* Random weights make logits sensitive, so errors are compared with those
   * of the same type made by the fixture's (llama.cpp-style) quantizer. */
  static const struct { const char *type; UmDType base; const char *theirs; } cases[] = {
    { "Q4_K_M", UM_DTYPE_Q4_K, "small-kquant-q4_k_m.gguf" }, { "Q5_K_M", UM_DTYPE_Q5_K, "small-kquant-q5_k_m.gguf" },
    { "Q6_K", UM_DTYPE_Q6_K, "small-kquant-q6_k.gguf" }, { "Q5_0", UM_DTYPE_Q5_0, "small-kquant-q5_0.gguf" },
    { "Q4_1", UM_DTYPE_Q4_1, "small-kquant-q4_1.gguf" }, { "BF16", UM_DTYPE_BF16, NULL },
  };
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *reference = um_test_data_path ("small-kquant");

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autofree char *path = quantize ("small-kquant", cases[i].type, dir);
      g_autoptr(GError) error = NULL;
      g_autoptr(UmGguf) g = um_gguf_open (path, &error);
      UmTensorTable *t;
      gboolean mix = g_str_has_suffix (cases[i].type, "_M");
      double err;

      g_assert_no_error (error);
      t = um_gguf_get_tensors (g);
      g_assert_cmpint (um_tensor_table_lookup (t, "blk.0.attn_q.weight")->dtype, ==, cases[i].base);
      g_assert_cmpint (um_tensor_table_lookup (t, "blk.0.attn_v.weight")->dtype, ==, mix ? UM_DTYPE_Q6_K : cases[i].base);
      g_assert_cmpint (um_tensor_table_lookup (t, "blk.0.ffn_down.weight")->dtype, ==, mix ? UM_DTYPE_Q6_K : cases[i].base);
      g_assert_cmpint (um_tensor_table_lookup (t, "output.weight")->dtype, ==, mix ? UM_DTYPE_Q6_K : cases[i].base);
      g_assert_cmpint (um_tensor_table_lookup (t, "blk.0.attn_norm.weight")->dtype, ==, UM_DTYPE_F32);
      err = logits_error (path, reference);
      if (cases[i].theirs != NULL)
        {
          g_autofree char *theirs = um_test_data_path (cases[i].theirs);
          double their_err = logits_error (theirs, reference);
          g_test_message ("%s: relative logits error %.4f (fixture file: %.4f)", cases[i].type, err, their_err);
          g_assert_cmpfloat (err, <, 1.25 * their_err + 0.01);
        }
      else
        {
          g_test_message ("%s: relative logits error %.4f", cases[i].type, err);
          g_assert_cmpfloat (err, <, 0.02);
        }
    }
  um_test_rmtree (dir);
}

static void
test_errors_leave_nothing (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *src = um_test_data_path ("tiny-llada");
  g_autofree char *out = g_build_filename (dir, "out.gguf", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(UmModel) model = um_model_load (src, NULL, &error);
  g_autoptr(GCancellable) cancel = g_cancellable_new ();
  GDir *d;

  g_assert_false (um_quantize_model (model, "Q3_XL", out, NULL, NULL, NULL, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  g_clear_error (&error);
  g_cancellable_cancel (cancel);
  g_assert_false (um_quantize_model (model, "Q8_0", out, NULL, NULL, cancel, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  /* neither the target nor a temporary file is left behind */
  d = g_dir_open (dir, 0, NULL);
  g_assert_null (g_dir_read_name (d));
  g_dir_close (d);
  um_test_rmtree (dir);
}

/* The chat template comes through the one JSON entry point (um-json.c)
 * and the chat-template module: tokenizer_config.json nested past the
 * limit is an error, not json-glib's recursion; a template kept in
 * chat_template.jinja (newer transformers) is carried into the GGUF. */
static void
test_chat_template_source (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *src = um_test_data_path ("tiny-llada");
  g_autofree char *copy = g_build_filename (dir, "model", NULL);
  g_autofree char *config = g_build_filename (copy, "tokenizer_config.json", NULL);
  g_autofree char *jinja = g_build_filename (copy, "chat_template.jinja", NULL);
  g_autofree char *out = g_build_filename (dir, "out.gguf", NULL);
  g_autofree char *deep = g_strnfill (200000, '[');
  g_autofree char *text = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(UmModel) model = NULL;
  g_autoptr(JsonNode) root = NULL;
  const char *tmpl = "{% for m in messages %}{{ m['content'] }}{% endfor %}";

  g_assert_cmpint (g_mkdir_with_parents (copy, 0700), ==, 0);
  um_test_copy_dir (src, copy);
  model = um_model_load (copy, NULL, &error);
  g_assert_no_error (error);
  /* Changed under the loaded model: read again by the quantizer. */
  um_test_write_file (config, deep, -1);
  g_assert_false (um_quantize_model (model, "F32", out, NULL, NULL, NULL, &error));
  g_test_message ("%s", error->message);
  g_assert_nonnull (strstr (error->message, "tokenizer_config.json"));
  g_assert_false (g_file_test (out, G_FILE_TEST_EXISTS));
  g_clear_error (&error);

  /* The template beside the config instead of in it. */
  {
    g_autofree char *orig = g_build_filename (src, "tokenizer_config.json", NULL);
    text = um_test_read_file (orig);
  }
  root = json_from_string (text, NULL);
  json_object_remove_member (json_node_get_object (root), "chat_template");
  {
    g_autofree char *without = json_to_string (root, TRUE);
    um_test_write_file (config, without, -1);
  }
  um_test_write_file (jinja, tmpl, -1);
  g_assert_true (um_quantize_model (model, "F32", out, NULL, NULL, NULL, &error));
  g_assert_no_error (error);
  {
    g_autoptr(UmGguf) g = um_gguf_open (out, &error);
    g_assert_no_error (error);
    g_assert_cmpstr (um_gguf_get_string (g, "tokenizer.chat_template", &error), ==, tmpl);
    g_assert_no_error (error);
  }
  um_test_rmtree (dir);
}

/* ---- the families ----------------------------------------------------------- */

/* As in test-families: two float64 forwards of the same weights differ by
 * rounding order only (≤ n·2⁻⁵³ of each dot product's absolute sum, n ≤ 128,
 * amplified far less than 1e4 by two layers of these small models); a wrong
 * tensor moves logits by more than 1e-3. */
#define DOUBLE_TOLERANCE 1e-10

static UmModel *
load_family (const char *path)
{
  g_autoptr(GError) error = NULL;
  UmModel *model = um_model_load (path, NULL, &error);

  g_assert_no_error (error);
  return model;
}

/* Every key of @theirs is in @ours with the same type and value, and ours
 * adds only the alignment (always written), the model's recommended
 * sampling and unmask's own keys. */
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
          && !g_str_has_prefix (key, "general.sampling.") && !g_str_has_prefix (key, "unmask."))
        g_error ("%s: key %s is not in %s", ours, key, theirs);
    }
}

/* Float64 logits of @path (as we load it) on the ids of @entry of the
 * fixture's expected values, against them. */
static double
reference_error (const char *path, JsonObject *entry)
{
  JsonArray *values = json_object_get_array_member (entry, "values");
  g_autoptr(GArray) ids = um_test_json_ids (json_object_get_array_member (entry, "ids"));
  g_autoptr(GError) error = NULL;
  g_autoptr(UmModel) m = um_model_load (path, NULL, &error);
  g_autofree double *got = NULL;
  guint V;
  double err = 0;

  g_assert_no_error (error);
  V = m->cfg.vocab_size;
  got = g_new (double, ids->len * V);
  g_assert_true (um_ref_forward (m, (const gint32 *) ids->data, ids->len, got, &error));
  g_assert_no_error (error);
  for (guint r = 0; r < ids->len; r++)
    {
      JsonArray *row = json_array_get_array_element (values, r);
      for (guint v = 0; v < V; v++)
        {
          double want = json_array_get_double_element (row, v);
          err = MAX (err, fabs (got[r * V + v] - want) / (1 + fabs (want)));
        }
    }
  return err;
}

/* { family, "folder" or "gguf" }: the F32 and Q8_0 files we write from
 * that source are llama.cpp's, and give the fixtures' logits. */
static void
test_family_files (gconstpointer data)
{
  const char *const *spec = data;
  g_autofree char *f32_name = g_strdup_printf ("%s-f32.gguf", spec[0]);
  g_autofree char *src = um_test_data_path (g_str_equal (spec[1], "folder") ? spec[0] : f32_name);
  g_autofree char *json_name = g_strdup_printf ("%s.expected.json", spec[0]);
  g_autoptr(JsonParser) parser = um_test_load_json (json_name);
  JsonObject *root = json_node_get_object (json_parser_get_root (parser));
  g_autoptr(UmModel) model = load_family (src);
  g_autofree char *dir = um_test_mkdtemp ();
  static const char *const types[][2] = { { "F32", "f32" }, { "Q8_0", "q8_0" } };

  for (guint i = 0; i < G_N_ELEMENTS (types); i++)
    {
      g_autofree char *ours = g_build_filename (dir, types[i][0], NULL);
      g_autofree char *file = g_strdup_printf ("%s-%s.gguf", spec[0], types[i][1]);
      g_autofree char *theirs = um_test_data_path (file);
      g_autofree char *key = g_strdup_printf ("gguf_%s", types[i][1]);
      g_autoptr(GError) error = NULL;
      double err;

      g_assert_true (um_quantize_model (model, types[i][0], ours, NULL, NULL, NULL, &error));
      g_assert_no_error (error);
      assert_same_tensors (ours, theirs);
      assert_same_metadata (ours, theirs);
      err = reference_error (ours, json_object_get_object_member (root, key));
      g_test_message ("%s from the %s, %s: %.3g from the fixture's logits", spec[0], spec[1], types[i][0], err);
      g_assert_cmpfloat (err, <, DOUBLE_TOLERANCE);
    }
  um_test_rmtree (dir);
}

/* The source weight planned tensor @t is made from. */
static const UmWeight *
planned_source (const UmModel *m, const UmPlannedTensor *t)
{
  const UmLayerWeights *L = t->layer >= 0 ? &m->layers[t->layer] : NULL;

  switch (t->kind)
    {
    case UM_PLANNED_EMBED: return &m->tok_embd;
    case UM_PLANNED_OUTPUT: return &m->output;
    case UM_PLANNED_NORM:
      return L == NULL ? &m->out_norm : strstr (t->name, "attn_norm") ? &L->attn_norm : &L->ffn_norm;
    case UM_PLANNED_Q: return &L->wq;
    case UM_PLANNED_K: return &L->wk;
    case UM_PLANNED_V: return &L->wv;
    case UM_PLANNED_O: return &L->wo;
    case UM_PLANNED_GATE: return &L->w_gate;
    case UM_PLANNED_UP: return &L->w_up;
    case UM_PLANNED_DOWN: return &L->w_down;
    case UM_PLANNED_Q_BIAS: return &L->bq;
    case UM_PLANNED_K_BIAS: return &L->bk;
    case UM_PLANNED_V_BIAS: return &L->bv;
    case UM_PLANNED_Q_NORM: return &L->q_norm;
    case UM_PLANNED_K_NORM: return &L->k_norm;
    case UM_PLANNED_ROUTER: return &L->router;
    case UM_PLANNED_ROUTER_BIAS: return &L->router_bias;
    default: g_assert_not_reached ();
    }
}

/* Every type we write, for each family: each tensor holds exactly the
 * reference quantization of its source rows, in the planned type and
 * llama.cpp's shape (experts 3-D; 1-D tensors and the router F32); the
 * file loads and both forwards run on it. */
static void
test_family_every_type (gconstpointer data)
{
  const char *family = data;
  static const char *const types[] = {
    "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K", "Q4_K_M", "Q5_K_M",
  };
  g_autofree char *file = g_strdup_printf ("%s-f32.gguf", family);
  g_autofree char *src = um_test_data_path (file);
  g_autofree char *dir = um_test_mkdtemp ();
  g_autoptr(GError) error = NULL;
  g_autoptr(UmModel) model = um_model_load (src, NULL, &error);
  const gint32 ids[] = { 5, 17, 250, 33, 7, 300, 301, 302, 64, 99, 120, 1, 2, 3, 140, 400 };
  const int L = G_N_ELEMENTS (ids);
  const guint V = model->cfg.vocab_size;
  g_autofree double *f32 = g_new (double, L * V), *got = g_new (double, L * V);

  g_assert_no_error (error);
  g_assert_true (um_ref_forward (model, ids, L, f32, &error));
  for (guint i = 0; i < G_N_ELEMENTS (types); i++)
    {
      g_autofree char *out = g_build_filename (dir, types[i], NULL);
      const UmQuantizeOptions opts = { types[i], 0, 0 };
      g_autoptr(GArray) plan = um_quantize_plan_tensors (model, &opts, &error);
      g_autoptr(UmGguf) g = NULL;
      g_autoptr(UmModel) back = NULL;
      g_autoptr(UmEngine) engine = NULL;
      g_autofree float *fast = g_new (float, L * V);
      UmTensorTable *t;
      double num = 0, den = 0;

      g_assert_no_error (error);
      g_assert_true (um_quantize_model (model, types[i], out, NULL, NULL, NULL, &error));
      g_assert_no_error (error);
      g = um_gguf_open (out, &error);
      g_assert_no_error (error);
      t = um_gguf_get_tensors (g);
      g_assert_cmpuint (um_tensor_table_size (t), ==, plan->len);
      for (guint k = 0; k < plan->len; k++)
        {
          const UmPlannedTensor *p = &g_array_index (plan, UmPlannedTensor, k);
          const UmTensorInfo *info = um_tensor_table_lookup (t, p->name);
          const UmWeight *w = planned_source (model, p);
          guint64 shape[3], row_bytes;
          const guint n_dims = um_planned_tensor_shape (p, shape);
          g_autofree float *row = g_new (float, p->cols);
          g_autofree guint8 *want = NULL;

          g_assert_nonnull (info);
          g_assert_cmpint (info->dtype, ==, p->dtype);
          g_assert_cmpuint (info->n_dims, ==, n_dims);
          g_assert_cmpmem (info->shape, n_dims * sizeof (guint64), shape, n_dims * sizeof (guint64));
          g_assert_cmpuint (n_dims, ==, p->experts > 0 ? 3 : um_planned_kind_is_vector (p->kind) ? 1 : 2);
          if (p->kind >= UM_PLANNED_Q_BIAS || p->kind == UM_PLANNED_NORM)
            g_assert_cmpint (info->dtype, ==, UM_DTYPE_F32);
          g_assert_cmpuint (w->rows, ==, p->rows);
          g_assert_cmpuint (w->cols, ==, p->cols);
          g_assert_true (um_dtype_bytes (p->dtype, p->cols, &row_bytes));
          want = g_malloc (row_bytes);
          for (guint64 r = 0; r < p->rows; r++)
            {
              g_assert_true (um_quant_dequantize_row (w->dtype, (const guint8 *) w->data + r * w->row_bytes, row,
                                                      w->cols));
              g_assert_true (um_quant_quantize_row_ref (p->dtype, row, want, p->cols));
              if (memcmp (want, info->data + r * row_bytes, row_bytes) != 0)
                g_error ("%s %s: row %" G_GUINT64_FORMAT " of %s differs", family, types[i], r, p->name);
            }
        }

      /* It loads, and both forwards run on it. */
      back = um_model_load (out, NULL, &error);
      g_assert_no_error (error);
      g_assert_true (um_ref_forward (back, ids, L, got, &error));
      g_assert_no_error (error);
      for (int k = 0; k < L * (int) V; k++)
        {
          num += (got[k] - f32[k]) * (got[k] - f32[k]);
          den += f32[k] * f32[k];
        }
      engine = um_test_load_engine (out, TRUE);
      g_assert_true (um_forward_logits (um_engine_get_forward (engine), ids, 1, L, NULL, 0, fast, NULL, &error));
      g_assert_no_error (error);
      for (int k = 0; k < L * (int) V; k++)
        g_assert_true (isfinite (fast[k]));
      g_test_message ("%s %s: relative RMS logits error %.4f from F32", family, types[i], sqrt (num / den));
      g_assert_true (isfinite (num));
    }
  um_test_rmtree (dir);
}

int
main (int argc, char **argv)
{
  static const char *const sources[][2] = {
    { "tiny-dream", "folder" }, { "tiny-dream", "gguf" }, { "tiny-llada-moe", "folder" }, { "tiny-llada-moe", "gguf" },
    { "tiny-rnd1", "folder" }, { "tiny-rnd1", "gguf" },
  };

  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/quantize/matches-llama-cpp", test_matches_llama_cpp_files);
  g_test_add_func ("/quantize/kquant-mixes", test_kquant_mixes);
  g_test_add_func ("/quantize/errors", test_errors_leave_nothing);
  g_test_add_func ("/quantize/chat-template-source", test_chat_template_source);
  for (guint i = 0; i < G_N_ELEMENTS (sources); i++)
    {
      g_autofree char *path = g_strdup_printf ("/quantize/family/%s/from-%s", sources[i][0], sources[i][1]);
      g_test_add_data_func (path, sources[i], test_family_files);
    }
  g_test_add_data_func ("/quantize/family/tiny-dream/every-type", "tiny-dream", test_family_every_type);
  g_test_add_data_func ("/quantize/family/tiny-llada-moe/every-type", "tiny-llada-moe", test_family_every_type);
  g_test_add_data_func ("/quantize/family/tiny-rnd1/every-type", "tiny-rnd1", test_family_every_type);
  return g_test_run ();
}

/* unmask's quantizer writes GGUFs as llama.cpp's tools do: from the
 * safetensors fixture, the F32/Q8_0/Q4_0 tensors must be byte-identical to
 * the llama.cpp-made fixture files (Q/K rows permuted included); the K-quant
 * mixes put the right tensors in Q6_K; the output loads and runs. */
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

#include "um-engine.h"
#include "um-error.h"
#include "um-gguf.h"
#include "um-quantize.h"
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

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/quantize/matches-llama-cpp", test_matches_llama_cpp_files);
  g_test_add_func ("/quantize/kquant-mixes", test_kquant_mixes);
  g_test_add_func ("/quantize/errors", test_errors_leave_nothing);
  return g_test_run ();
}

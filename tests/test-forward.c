/* The forward pass on the CPU backend against the independent float64
 * fixture and against our own double-precision reference on generated
 * models (grouped KV heads, other head sizes, BF16/F16, shards). */
#include <math.h>
#include <string.h>

#include "um-backend.h"
#include "um-error.h"
#include "um-forward.h"
#include "um-kprof.h"
#include "um-model.h"
#include "um-quant.h"
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

/* All logits of the expected entry @key (an object with ids and values). */
static void
check_fixture_logits (const char *model_name, const char *json_name, const char *key)
{
  g_autoptr(JsonParser) parser = um_test_load_json (json_name);
  JsonObject *entry = json_object_get_object_member (json_node_get_object (json_parser_get_root (parser)), key);
  g_autoptr(GArray) ids = um_test_json_ids (json_object_get_array_member (entry, "ids"));
  JsonArray *values = json_object_get_array_member (entry, "values");
  g_autofree char *path = um_test_data_path (model_name);
  g_autoptr(UmModel) model = load_model (path);
  g_autoptr(GError) error = NULL;
  g_autoptr(UmBackend) be = um_backend_cpu_new (0, 0, &error);
  g_autoptr(UmForward) fw = um_forward_new (model, be, &error);
  const guint V = model->cfg.vocab_size;
  g_autofree float *logits = g_new (float, ids->len * V);
  g_autofree double *want = g_new (double, ids->len * V);
  double err, tol;

  g_assert_no_error (error);
  g_assert_cmpuint (json_array_get_length (values), ==, ids->len);
  for (guint r = 0; r < ids->len; r++)
    {
      JsonArray *row = json_array_get_array_element (values, r);
      g_assert_cmpuint (json_array_get_length (row), ==, V);
      for (guint v = 0; v < V; v++)
        want[r * V + v] = json_array_get_double_element (row, v);
    }
  tol = um_test_f32_tolerance (model, (const gint32 *) ids->data, ids->len, want, model_name);
  g_assert_true (um_forward_logits (fw, (const gint32 *) ids->data, 1, ids->len, NULL, 0, logits, NULL, &error));
  g_assert_no_error (error);
  err = um_test_rel_error (logits, want, (size_t) ids->len * V);
  g_test_message ("%s %s: max relative error %.3g (%s kernels)", model_name, key, err, um_quant_simd_level ());
  g_assert_cmpfloat (err, <, tol);

  /* Selected rows only (the last layer then works on those rows alone). */
  {
    const gint32 rows[] = { 0, 5, 7, 15 };
    g_autofree float *sel = g_new (float, G_N_ELEMENTS (rows) * V);
    g_assert_true (um_forward_logits (fw, (const gint32 *) ids->data, 1, ids->len, rows, G_N_ELEMENTS (rows),
                                      sel, NULL, &error));
    g_assert_no_error (error);
    for (guint i = 0; i < G_N_ELEMENTS (rows); i++)
      g_assert_cmpfloat (um_test_rel_error (sel + i * V, want + rows[i] * V, V), <, tol);
  }
}

static void
test_fixture_logits (void)
{
  check_fixture_logits ("tiny-llada", "tiny-llada.expected.json", "logits");
}

static void
test_small_kquant_logits (void)
{
  check_fixture_logits ("small-kquant", "small-kquant.expected.json", "logits");
}

/* Our double reference agrees with the independent fixture too. */
static void
test_reference_forward (void)
{
  g_autoptr(JsonParser) parser = um_test_load_json ("tiny-llada.expected.json");
  JsonObject *entry = json_object_get_object_member (json_node_get_object (json_parser_get_root (parser)), "logits");
  g_autoptr(GArray) ids = um_test_json_ids (json_object_get_array_member (entry, "ids"));
  JsonArray *values = json_object_get_array_member (entry, "values");
  g_autofree char *path = um_test_data_path ("tiny-llada");
  g_autoptr(UmModel) model = load_model (path);
  g_autoptr(GError) error = NULL;
  const guint V = model->cfg.vocab_size;
  g_autofree double *ref = g_new (double, ids->len * V);
  double worst = 0;

  g_assert_true (um_ref_forward (model, (const gint32 *) ids->data, ids->len, ref, &error));
  for (guint r = 0; r < ids->len; r++)
    for (guint v = 0; v < V; v++)
      worst = MAX (worst, fabs (ref[r * V + v] - json_array_get_double_element (json_array_get_array_element (values, r), v)));
  g_assert_cmpfloat (worst, <, 1e-9);
}

/* Generated model: fast forward vs the double reference. */
static void
check_generated (const UmTestModelSpec *spec)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autoptr(GError) error = NULL;
  g_autoptr(UmModel) model = NULL;
  g_autoptr(UmBackend) be = NULL;
  g_autoptr(UmForward) fw = NULL;
  const int L = 23;
  gint32 ids[23];
  g_autofree float *logits = NULL;
  g_autofree double *ref = NULL;
  double worst = 0, tol;

  g_assert_true (um_test_write_model (dir, spec, &error));
  g_assert_no_error (error);
  model = load_model (dir);
  g_assert_cmpuint (model->cfg.n_kv_heads, ==, spec->n_kv_heads);
  g_assert_cmpuint (model->cfg.head_dim, ==, spec->d_model / spec->n_heads);
  be = um_backend_cpu_new (0, 0, &error);
  fw = um_forward_new (model, be, &error);
  g_assert_no_error (error);
  for (int i = 0; i < L; i++)
    ids[i] = (i * 37 + 11) % spec->vocab_size;
  ids[5] = ids[9] = spec->mask_id;
  logits = g_new (float, L * spec->vocab_size);
  ref = g_new (double, L * spec->vocab_size);
  g_assert_true (um_forward_logits (fw, ids, 1, L, NULL, 0, logits, NULL, &error));
  g_assert_no_error (error);
  g_assert_true (um_ref_forward (model, ids, L, ref, &error));
  tol = um_test_f32_tolerance (model, ids, L, ref, "generated model");
  worst = um_test_rel_error (logits, ref, (size_t) L * spec->vocab_size);
  g_test_message ("generated model: max relative error %.3g (%s kernels)", worst, um_quant_simd_level ());
  g_assert_cmpfloat (worst, <, tol);

  um_forward_free (g_steal_pointer (&fw));
  um_model_free (g_steal_pointer (&model));
  um_test_rmtree (dir);
}

static void
test_grouped_kv (void)
{
  UmTestModelSpec spec;
  um_test_model_spec_init (&spec);
  spec.n_heads = 8;
  spec.n_kv_heads = 2;
  spec.d_model = 96;            /* head size 12 */
  spec.rope_theta = 500000.0;
  spec.rms_eps = 1e-6;
  check_generated (&spec);
}

static void
test_single_kv_head (void)
{
  UmTestModelSpec spec;
  um_test_model_spec_init (&spec);
  spec.n_heads = 2;
  spec.n_kv_heads = 1;
  spec.d_model = 128;           /* head size 64 */
  spec.n_layers = 3;
  check_generated (&spec);
}

static void
test_bf16 (void)
{
  UmTestModelSpec spec;
  um_test_model_spec_init (&spec);
  spec.dtype = UM_DTYPE_BF16;
  check_generated (&spec);
}

static void
test_f16 (void)
{
  UmTestModelSpec spec;
  um_test_model_spec_init (&spec);
  spec.dtype = UM_DTYPE_F16;
  spec.n_kv_heads = 2;
  check_generated (&spec);
}

/* Shards hold the same bytes as one file: logits must be bit-identical. */
static void
test_sharded_equals_single (void)
{
  UmTestModelSpec spec;
  g_autofree char *one = um_test_mkdtemp (), *three = um_test_mkdtemp ();
  g_autoptr(GError) error = NULL;
  const int L = 12;
  gint32 ids[12];
  g_autofree float *a = NULL, *b = NULL;

  um_test_model_spec_init (&spec);
  spec.dtype = UM_DTYPE_BF16;
  g_assert_true (um_test_write_model (one, &spec, &error));
  spec.n_shards = 3;
  g_assert_true (um_test_write_model (three, &spec, &error));
  g_assert_no_error (error);
  for (int i = 0; i < L; i++)
    ids[i] = i * 41 % 500;
  a = g_new (float, L * spec.vocab_size);
  b = g_new (float, L * spec.vocab_size);
  for (int pass = 0; pass < 2; pass++)
    {
      g_autoptr(UmModel) model = load_model (pass ? three : one);
      g_autoptr(UmBackend) be = um_backend_cpu_new (0, 0, &error);
      g_autoptr(UmForward) fw = um_forward_new (model, be, &error);
      if (pass)
        g_assert_cmpuint (um_tensor_table_size (model->tensors), ==, 2 + 9 * spec.n_layers + 1);
      g_assert_true (um_forward_logits (fw, ids, 1, L, NULL, 0, pass ? b : a, NULL, &error));
      g_assert_no_error (error);
    }
  g_assert_cmpmem (a, L * spec.vocab_size * sizeof (float), b, L * spec.vocab_size * sizeof (float));
  um_test_rmtree (one);
  um_test_rmtree (three);
}

/* The kernel profile only reads the clock: logits with it on are the same
 * bits as with it off (nothing else differs: equal by construction), and
 * off it counts nothing.  (How much it counts is timing: not tested.) */
static void
test_profile_changes_nothing (void)
{
  g_autofree char *path = um_test_data_path ("tiny-llada");
  g_autoptr(UmModel) model = load_model (path);
  g_autoptr(GError) error = NULL;
  g_autoptr(UmBackend) be = um_backend_cpu_new (0, 0, &error);
  g_autoptr(UmForward) fw = um_forward_new (model, be, &error);
  const int L = 12, V = model->cfg.vocab_size;
  const gint32 rows[] = { 3, 11 };
  gint32 ids[12];
  g_autofree float *off = g_new (float, 2 * V), *on = g_new (float, 2 * V);
  double sec[UM_KPROF_N];

  for (int i = 0; i < L; i++)
    ids[i] = (i * 37 + 5) % 500;
  g_assert_true (um_forward_logits (fw, ids, 1, L, rows, 2, off, NULL, &error));
  um_kprof_enable (TRUE);
  g_assert_true (um_forward_logits (fw, ids, 1, L, rows, 2, on, NULL, &error));
  um_kprof_enable (FALSE);
  g_assert_no_error (error);
  g_assert_cmpmem (off, 2 * V * sizeof (float), on, 2 * V * sizeof (float));
  um_kprof_reset ();
  g_assert_true (um_forward_logits (fw, ids, 1, L, rows, 2, on, NULL, &error));
  um_kprof_get (sec);
  for (int f = 0; f < UM_KPROF_N; f++)
    g_assert_cmpfloat (sec[f], ==, 0);   /* nothing added: exactly 0 */
}

/* Two sequences in one batch give the same logits as each alone: both land
 * within float32's tolerance of the float64 truth of their sequence. */
static void
test_batch_of_two (void)
{
  g_autofree char *path = um_test_data_path ("tiny-llada");
  g_autoptr(UmModel) model = load_model (path);
  g_autoptr(GError) error = NULL;
  g_autoptr(UmBackend) be = um_backend_cpu_new (0, 0, &error);
  g_autoptr(UmForward) fw = um_forward_new (model, be, &error);
  const int L = 10, V = model->cfg.vocab_size;
  gint32 ids[20];
  const gint32 rows[] = { 2, 9, 12, 19 };
  float both[4 * 512], one[2 * 512];
  double want[10 * 512];

  for (int i = 0; i < 20; i++)
    ids[i] = (i * 29 + 3) % 500;
  g_assert_true (um_forward_logits (fw, ids, 2, L, rows, 4, both, NULL, &error));
  for (int s = 0; s < 2; s++)
    {
      const gint32 r[] = { 2, 9 };
      double tol;

      g_assert_true (um_ref_forward (model, ids + s * L, L, want, &error));
      tol = um_test_f32_tolerance (model, ids + s * L, L, want, "sequence");
      g_assert_true (um_forward_logits (fw, ids + s * L, 1, L, r, 2, one, NULL, &error));
      for (int j = 0; j < 2; j++)
        {
          g_assert_cmpfloat (um_test_rel_error (one + j * V, want + r[j] * V, V), <, tol);
          g_assert_cmpfloat (um_test_rel_error (both + (s * 2 + j) * V, want + r[j] * V, V), <, tol);
        }
    }
  g_assert_no_error (error);
}

static void
test_budget_out_of_memory (void)
{
  g_autofree char *path = um_test_data_path ("tiny-llada");
  g_autoptr(UmModel) model = load_model (path);
  g_autoptr(GError) error = NULL;
  g_autoptr(UmBackend) be = NULL;
  g_autoptr(UmForward) fw = NULL;
  gint32 ids[16] = { 0 };
  float logits[16 * 512];
  UmBackendMemInfo mem;

  /* Weights count against the budget as device memory: a budget below
   * them fails when they are made resident. */
  be = um_backend_cpu_new (4096, 0, &error);
  fw = um_forward_new (model, be, &error);
  g_assert_null (fw);
  g_assert_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY);
  g_assert_nonnull (strstr (error->message, "budget"));
  g_clear_error (&error);
  g_clear_pointer (&be, um_backend_free);

  /* A budget that holds the weights but not the activations fails in the
   * forward pass, with nothing left allocated beyond the budget. */
  be = um_backend_cpu_new (um_model_weight_bytes (model) + 4096, 0, &error);
  fw = um_forward_new (model, be, &error);
  g_assert_no_error (error);
  g_assert_false (um_forward_logits (fw, ids, 1, 16, NULL, 0, logits, NULL, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY);
  g_assert_nonnull (strstr (error->message, "budget"));
  be->ops->mem_info (be, &mem);
  g_assert_cmpuint (mem.in_use, <=, mem.budget);
}

static void
test_cancelled (void)
{
  g_autofree char *path = um_test_data_path ("tiny-llada");
  g_autoptr(UmModel) model = load_model (path);
  g_autoptr(GError) error = NULL;
  g_autoptr(UmBackend) be = um_backend_cpu_new (0, 0, &error);
  g_autoptr(UmForward) fw = um_forward_new (model, be, &error);
  g_autoptr(GCancellable) cancel = g_cancellable_new ();
  gint32 ids[4] = { 1, 2, 3, 4 };
  float logits[4 * 512];

  g_cancellable_cancel (cancel);
  g_assert_false (um_forward_logits (fw, ids, 1, 4, NULL, 0, logits, cancel, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
}

static void
test_bad_ids (void)
{
  g_autofree char *path = um_test_data_path ("tiny-llada");
  g_autoptr(UmModel) model = load_model (path);
  g_autoptr(GError) error = NULL;
  g_autoptr(UmBackend) be = um_backend_cpu_new (0, 0, &error);
  g_autoptr(UmForward) fw = um_forward_new (model, be, &error);
  gint32 ids[3] = { 1, 512, 3 };
  const gint32 bad_rows[] = { 2, 1 };
  float logits[3 * 512];

  g_assert_false (um_forward_logits (fw, ids, 1, 3, NULL, 0, logits, NULL, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  g_clear_error (&error);
  ids[1] = 2;
  g_assert_false (um_forward_logits (fw, ids, 1, 3, bad_rows, 2, logits, NULL, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/forward/fixture-logits", test_fixture_logits);
  g_test_add_func ("/forward/small-kquant-logits", test_small_kquant_logits);
  g_test_add_func ("/forward/reference", test_reference_forward);
  g_test_add_func ("/forward/profile-changes-nothing", test_profile_changes_nothing);
  g_test_add_func ("/forward/grouped-kv", test_grouped_kv);
  g_test_add_func ("/forward/single-kv-head", test_single_kv_head);
  g_test_add_func ("/forward/bf16", test_bf16);
  g_test_add_func ("/forward/f16", test_f16);
  g_test_add_func ("/forward/sharded", test_sharded_equals_single);
  g_test_add_func ("/forward/batch", test_batch_of_two);
  g_test_add_func ("/forward/out-of-memory", test_budget_out_of_memory);
  g_test_add_func ("/forward/cancelled", test_cancelled);
  g_test_add_func ("/forward/bad-ids", test_bad_ids);
  return g_test_run ();
}

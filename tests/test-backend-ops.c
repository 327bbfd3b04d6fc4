/* Every backend op on the CPU and on CUDA with the same random inputs,
 * compared by normalised error (like llama.cpp's test-backend-ops), and a
 * generation on the fixture model that must give the same ids and trace on
 * both. Exits 77 (skipped) where no GPU is usable. */
#include <math.h>
#include <string.h>

#include "um-engine.h"
#include "um-error.h"
#include "um-backend-cuda.h"
#include "um-quant.h"
#include "um-test-util.h"

static UmBackend *cpu, *gpu;
static GRand *rng;

static void
fill (float *x, size_t n, double scale)
{
  for (size_t i = 0; i < n; i++)
    x[i] = (float) g_rand_double_range (rng, -scale, scale);
}

static UmBuf *
upload (UmBackend *be, const float *host, size_t n)
{
  g_autoptr(GError) error = NULL;
  UmBuf *b = be->ops->buf_alloc (be, n * sizeof (float), &error);
  g_assert_no_error (error);
  if (host != NULL)
    g_assert_true (be->ops->buf_upload (be, b, 0, host, n * sizeof (float), &error));
  return b;
}

static float *
download (UmBackend *be, UmBuf *b, size_t n)
{
  g_autoptr(GError) error = NULL;
  float *host = g_new (float, n);
  g_assert_true (be->ops->buf_download (be, b, 0, host, n * sizeof (float), &error));
  g_assert_no_error (error);
  return host;
}

static double
nerr (const float *a, const float *b, size_t n)
{
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++)
    {
      num += ((double) a[i] - b[i]) * ((double) a[i] - b[i]);
      den += (double) b[i] * b[i];
    }
  return sqrt (num / MAX (den, 1e-300));
}

/* Tolerances of this file compare two float implementations (CUDA and CPU)
 * by normalised RMS error, on random data of unit scale:
 *  - fp32 on both sides: each side is within γ_k·Σ|terms| of exact for a
 *    k-term sum (u = 2^-24); with random signs the RMS ratio Σ|terms| /
 *    |Σ terms| is about √k, so for k ≤ 512 the relative difference stays
 *    below 2·√512·512·u ≈ 7e-4 in the worst case and below √k·u·few ≈ 1e-6
 *    in practice; 1e-5 (1e-6 for the one-rounding element-wise ops) sits
 *    between what correct kernels show and what any wrong index gives;
 *  - half-precision inputs to cuBLAS (activations rounded to f16/bf16, unit
 *    roundoff 2^-11 / 2^-8): the product's normalised error is about that
 *    roundoff, 4.9e-4 for f16 and 3.9e-3 for bf16 activations; 5e-3 covers
 *    bf16, the coarser of the two. */

/* Runs @op on both backends: inputs uploaded to each, output compared. */
typedef void (*OpFunc) (UmBackend *be, UmBuf **in, UmBuf *out, gpointer data);

static double
run_both (OpFunc op, float **inputs, const size_t *in_sizes, guint n_in, size_t out_size, gpointer data)
{
  g_autofree float *a = NULL, *b = NULL;
  UmBackend *bes[2] = { cpu, gpu };
  float *results[2];

  for (int k = 0; k < 2; k++)
    {
      UmBuf *in[8];
      UmBuf *out = upload (bes[k], NULL, out_size);
      for (guint i = 0; i < n_in; i++)
        in[i] = upload (bes[k], inputs[i], in_sizes[i]);
      op (bes[k], in, out, data);
      results[k] = download (bes[k], out, out_size);
      for (guint i = 0; i < n_in; i++)
        bes[k]->ops->buf_free (bes[k], in[i]);
      bes[k]->ops->buf_free (bes[k], out);
    }
  a = results[0];
  b = results[1];
  return nerr (b, a, out_size);
}

typedef struct {
  int rows, dim;
  UmWeight w;
  UmDevWeight *dw[2];
  const gint32 *idx;
  int n_heads, n_kv_heads, head_dim, seq_len, nq;
  gboolean interleaved;
} Args;

static int
which (UmBackend *be)
{
  return be == cpu ? 0 : 1;
}

static void
load_weight (Args *a)
{
  g_autoptr(GError) error = NULL;
  a->dw[0] = cpu->ops->weight_load (cpu, &a->w, &error);
  a->dw[1] = gpu->ops->weight_load (gpu, &a->w, &error);
  g_assert_no_error (error);
}

static void
free_weight (Args *a)
{
  cpu->ops->weight_free (cpu, a->dw[0]);
  gpu->ops->weight_free (gpu, a->dw[1]);
}

static void
make_weight (Args *a, UmDType t, int rows, int cols, float **store)
{
  uint64_t row_bytes;
  g_autofree float *f = g_new (float, (size_t) rows * cols);
  guint8 *bytes;

  g_assert_true (um_dtype_bytes (t, cols, &row_bytes));
  bytes = g_malloc ((size_t) rows * row_bytes);
  fill (f, (size_t) rows * cols, 1.0);
  for (int r = 0; r < rows; r++)
    g_assert_true (um_quant_quantize_row_ref (t, f + (size_t) r * cols, bytes + r * row_bytes, cols));
  a->w = (UmWeight) { "w", t, rows, cols, row_bytes, bytes };
  *store = (float *) bytes;
}

static void
op_matmul (UmBackend *be, UmBuf **in, UmBuf *out, gpointer data)
{
  Args *a = data;
  g_autoptr(GError) error = NULL;
  g_assert_true (be->ops->matmul (be, in[0], a->rows, a->dw[which (be)], out, &error));
  g_assert_no_error (error);
}

static void
test_matmul (void)
{
  const UmDType types[] = { UM_DTYPE_F32, UM_DTYPE_F16, UM_DTYPE_BF16, UM_DTYPE_Q8_0, UM_DTYPE_Q4_0,
                            UM_DTYPE_Q4_1, UM_DTYPE_Q5_0, UM_DTYPE_Q5_1, UM_DTYPE_Q4_K, UM_DTYPE_Q5_K, UM_DTYPE_Q6_K };
  const int ms[] = { 1, 17, 96 };
  for (guint t = 0; t < G_N_ELEMENTS (types); t++)
    for (guint i = 0; i < G_N_ELEMENTS (ms); i++)
      {
        Args a = { 0 };
        g_autofree float *wstore = NULL;
        g_autofree float *x = g_new (float, (size_t) ms[i] * 512);
        float *in[1] = { x };
        size_t sizes[1] = { (size_t) ms[i] * 512 };
        double e;
        make_weight (&a, types[t], 300, 512, &wstore);
        load_weight (&a);
        a.rows = ms[i];
        fill (x, sizes[0], 1.0);
        e = run_both (op_matmul, in, sizes, 1, (size_t) ms[i] * 300, &a);
        g_test_message ("matmul %s m=%d: normalised error %.2g", um_dtype_name (types[t]), ms[i], e);
        /* fp32 products for F32 weights; half-precision inputs otherwise. */
        g_assert_cmpfloat (e, <, types[t] == UM_DTYPE_F32 ? 1e-5 : 5e-3);
        free_weight (&a);
      }
}

static void
op_embed (UmBackend *be, UmBuf **in, UmBuf *out, gpointer data)
{
  Args *a = data;
  g_autoptr(GError) error = NULL;
  g_assert_true (be->ops->embed (be, a->dw[which (be)], a->idx, a->rows, out, &error));
}

static void
test_embed (void)
{
  const UmDType types[] = { UM_DTYPE_F32, UM_DTYPE_BF16, UM_DTYPE_Q8_0, UM_DTYPE_Q4_K, UM_DTYPE_Q6_K };
  const gint32 ids[] = { 0, 5, 199, 7, 7, 100 };
  for (guint t = 0; t < G_N_ELEMENTS (types); t++)
    {
      Args a = { 0 };
      g_autofree float *wstore = NULL;
      make_weight (&a, types[t], 200, 256, &wstore);
      load_weight (&a);
      a.idx = ids;
      a.rows = G_N_ELEMENTS (ids);
      g_assert_cmpfloat (run_both (op_embed, NULL, NULL, 0, a.rows * 256, &a), <, 1e-6);
      free_weight (&a);
    }
}

static void
op_rms_norm (UmBackend *be, UmBuf **in, UmBuf *out, gpointer data)
{
  Args *a = data;
  g_autoptr(GError) error = NULL;
  g_assert_true (be->ops->rms_norm (be, in[0], a->rows, a->dim, a->dw[which (be)], 1e-5f, out, &error));
}

static void
test_rms_norm (void)
{
  Args a = { 0 };
  g_autofree float *w = g_new (float, 333), *x = g_new (float, 9 * 333);
  float *in[1] = { x };
  size_t sizes[1] = { 9 * 333 };

  fill (w, 333, 1.0);
  fill (x, sizes[0], 3.0);
  a.w = (UmWeight) { "norm", UM_DTYPE_F32, 1, 333, 333 * 4, w };
  load_weight (&a);
  a.rows = 9;
  a.dim = 333;
  g_assert_cmpfloat (run_both (op_rms_norm, in, sizes, 1, sizes[0], &a), <, 1e-6);
  free_weight (&a);
}

static void
op_rope (UmBackend *be, UmBuf **in, UmBuf *out, gpointer data)
{
  Args *a = data;
  g_autoptr(GError) error = NULL;
  gint32 identity[64];

  g_assert_true (be->ops->rope (be, in[0], a->rows, a->idx, a->n_heads, a->head_dim, 500000.0, a->interleaved,
                                &error));
  /* Rotated in place; copy to the output buffer the harness reads. */
  for (int i = 0; i < a->rows; i++)
    identity[i] = i;
  g_assert_true (be->ops->get_rows (be, in[0], a->n_heads * a->head_dim, identity, a->rows, out, &error));
}

static void
test_rope (void)
{
  const gint32 pos[] = { 0, 1, 2, 100, 4095, 17, 3 };
  for (int inter = 0; inter < 2; inter++)
    {
      Args a = { .rows = 7, .n_heads = 3, .head_dim = 64, .idx = pos, .interleaved = inter };
      size_t n = 7 * 3 * 64;
      g_autofree float *x = g_new (float, n);
      float *in[1] = { x };
      fill (x, n, 2.0);
      g_assert_cmpfloat (run_both (op_rope, in, &n, 1, n, &a), <, 1e-5);
    }
}

static void
op_attention (UmBackend *be, UmBuf **in, UmBuf *out, gpointer data)
{
  Args *a = data;
  g_autoptr(GError) error = NULL;
  g_assert_true (be->ops->attention (be, in[0], a->nq, a->idx, in[1], in[2], a->seq_len, a->n_heads, a->n_kv_heads,
                                     a->head_dim, out, &error));
}

static void
test_attention (void)
{
  const int shapes[][4] = { { 5, 2, 2, 8 }, { 150, 4, 1, 64 }, { 300, 8, 2, 128 }, { 67, 6, 3, 32 } };
  for (guint s = 0; s < G_N_ELEMENTS (shapes); s++)
    {
      int L = shapes[s][0], H = shapes[s][1], Hkv = shapes[s][2], hd = shapes[s][3];
      size_t qn = (size_t) 2 * L * H * hd, kn = (size_t) 2 * L * Hkv * hd;
      g_autofree float *q = g_new (float, qn), *k = g_new (float, kn), *v = g_new (float, kn);
      g_autofree gint32 *seq = g_new (gint32, 2 * L);
      float *in[3] = { q, k, v };
      size_t sizes[3] = { qn, kn, kn };
      Args a = { .nq = 2 * L, .seq_len = L, .n_heads = H, .n_kv_heads = Hkv, .head_dim = hd };
      for (int i = 0; i < 2 * L; i++)
        seq[i] = i / L;
      a.idx = seq;
      fill (q, qn, 1.0);
      fill (k, kn, 1.0);
      fill (v, kn, 1.0);
      g_assert_cmpfloat (run_both (op_attention, in, sizes, 3, qn, &a), <, 1e-5);
    }
}

static void
op_swiglu (UmBackend *be, UmBuf **in, UmBuf *out, gpointer data)
{
  g_autoptr(GError) error = NULL;
  g_assert_true (be->ops->swiglu (be, in[0], in[1], GPOINTER_TO_SIZE (data), out, &error));
}

static void
test_swiglu (void)
{
  size_t n = 100000;
  g_autofree float *g = g_new (float, n), *u = g_new (float, n);
  float *in[2] = { g, u };
  size_t sizes[2] = { n, n };
  fill (g, n, 8.0);
  fill (u, n, 2.0);
  g_assert_cmpfloat (run_both (op_swiglu, in, sizes, 2, n, GSIZE_TO_POINTER (n)), <, 1e-6);
}

static void
op_get_rows (UmBackend *be, UmBuf **in, UmBuf *out, gpointer data)
{
  Args *a = data;
  g_autoptr(GError) error = NULL;
  g_assert_true (be->ops->get_rows (be, in[0], a->dim, a->idx, a->rows, out, &error));
}

static void
test_get_rows (void)
{
  const gint32 rows[] = { 3, 0, 9, 9 };
  Args a = { .dim = 77, .rows = 4, .idx = rows };
  size_t n = 10 * 77;
  g_autofree float *x = g_new (float, n);
  float *in[1] = { x };
  fill (x, n, 1.0);
  g_assert_cmpfloat (run_both (op_get_rows, in, &n, 1, 4 * 77, &a), ==, 0.0);
}

/* The whole pipeline: the fixture's generation, same ids and trace. */
static void
record (const UmStepEvent *ev, gpointer data)
{
  g_array_append_vals (data, ev->positions, ev->n_committed);
}

static void
test_generate_same_as_cpu (void)
{
  g_autofree char *path = um_test_data_path ("tiny-llada");
  UmEngineOptions opts;
  GArray *ids[2], *trace[2];

  for (int k = 0; k < 2; k++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(UmEngine) engine = NULL;
      g_autoptr(UmGenResult) result = NULL;
      const gint32 prompt[] = { 506, 509, 84, 460, 510, 299, 54, 71, 267, 338, 284, 453, 406, 443, 30, 511, 509,
                                64, 82, 82, 276, 83, 380, 510, 299 };
      UmGenRequest req;

      um_engine_options_init (&opts);
      opts.device = k ? UM_DEVICE_CUDA : UM_DEVICE_CPU;
      engine = um_engine_load (path, &opts, NULL, NULL, NULL, &error);
      g_assert_no_error (error);
      g_assert_cmpstr (um_backend_name (um_engine_get_backend (engine)), ==, k ? "cuda" : "cpu");
      um_gen_request_init (&req);
      req.params.gen_length = 32;
      req.params.steps = 32;
      req.params.block_length = 8;
      req.prompt_ids = prompt;
      req.n_prompt_ids = G_N_ELEMENTS (prompt);
      trace[k] = g_array_new (FALSE, FALSE, sizeof (gint32));
      result = um_engine_generate (engine, &req, record, trace[k], NULL, &error);
      g_assert_no_error (error);
      ids[k] = g_array_ref (result->ids);
    }
  g_assert_cmpmem (ids[0]->data, ids[0]->len * 4, ids[1]->data, ids[1]->len * 4);
  g_assert_cmpmem (trace[0]->data, trace[0]->len * 4, trace[1]->data, trace[1]->len * 4);
  for (int k = 0; k < 2; k++)
    {
      g_array_unref (ids[k]);
      g_array_unref (trace[k]);
    }
}

static void
test_out_of_memory (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(UmBackend) small = um_backend_cuda_new (0, 1 << 20, &error);
  UmBuf *b;

  g_assert_no_error (error);
  b = small->ops->buf_alloc (small, 2 << 20, &error);
  g_assert_null (b);
  g_assert_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY);
}

int
main (int argc, char **argv)
{
  g_autoptr(GError) error = NULL;
  int rc;

  g_test_init (&argc, &argv, NULL);
  gpu = um_backend_cuda_new (0, 0, &error);
  if (gpu == NULL)
    {
      g_print ("1..0 # SKIP no usable GPU: %s\n", error->message);
      return 77;
    }
  cpu = um_backend_cpu_new (0, 0, NULL);
  rng = g_rand_new_with_seed (99);
  g_test_add_func ("/backend-ops/matmul", test_matmul);
  g_test_add_func ("/backend-ops/embed", test_embed);
  g_test_add_func ("/backend-ops/rms-norm", test_rms_norm);
  g_test_add_func ("/backend-ops/rope", test_rope);
  g_test_add_func ("/backend-ops/attention", test_attention);
  g_test_add_func ("/backend-ops/swiglu", test_swiglu);
  g_test_add_func ("/backend-ops/get-rows", test_get_rows);
  g_test_add_func ("/backend-ops/generate", test_generate_same_as_cpu);
  g_test_add_func ("/backend-ops/out-of-memory", test_out_of_memory);
  rc = g_test_run ();
  um_backend_free (gpu);
  um_backend_free (cpu);
  g_rand_free (rng);
  return rc;
}

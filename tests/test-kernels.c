/* Every CPU kernel against its plain double-precision reference on random
 * inputs, compared by normalised error. */
#include <math.h>
#include <string.h>

#include "um-backend.h"
#include "um-cpu-kernels.h"
#include "um-quant.h"
#include "um-half.h"
#include "um-ref-kernels.h"
#include "um-topk.h"

static GRand *rng;

static void
fill (float *x, size_t n, double scale)
{
  for (size_t i = 0; i < n; i++)
    x[i] = (float) g_rand_double_range (rng, -scale, scale);
}

static double *
to_double (const float *x, size_t n)
{
  double *d = g_new (double, n);
  for (size_t i = 0; i < n; i++)
    d[i] = x[i];
  return d;
}

/* ‖got − want‖ / ‖want‖ */
static double
nerr (const float *got, const double *want, size_t n)
{
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++)
    {
      num += (got[i] - want[i]) * (got[i] - want[i]);
      den += want[i] * want[i];
    }
  return sqrt (num / MAX (den, 1e-300));
}

static void
check_matmul (UmDType dtype, int m, int n, int k)
{
  uint64_t row_bytes = 0;
  g_autofree float *wf = g_new (float, (size_t) n * k);
  g_autofree guint8 *wdata = NULL;
  g_autofree float *x = g_new (float, (size_t) m * k);
  g_autofree float *out = g_new (float, (size_t) m * n);
  g_autofree double *want = g_new (double, (size_t) m * n);
  g_autofree double *xd = NULL;
  g_autoptr(GError) error = NULL;
  UmCpuScratch scratch = { NULL, 0 };
  UmWeight w = { "w", dtype, n, k, 0, NULL };

  g_assert_true (um_dtype_bytes (dtype, k, &row_bytes));
  wdata = g_malloc (row_bytes * n);
  fill (wf, (size_t) n * k, 1.0);
  fill (x, (size_t) m * k, 1.0);
  for (int r = 0; r < n; r++)
    g_assert_true (um_quant_quantize_row_ref (dtype, wf + (size_t) r * k, wdata + r * row_bytes, k));
  w.row_bytes = row_bytes;
  w.data = wdata;
  xd = to_double (x, (size_t) m * k);
  g_assert_true (um_cpu_matmul (x, m, &w, out, &scratch, TRUE, &error));
  g_assert_no_error (error);
  um_ref_matmul (xd, m, &w, want);
  g_assert_cmpfloat (nerr (out, want, (size_t) m * n), <, 1e-6);
  um_cpu_scratch_clear (&scratch);
}

static void
test_matmul (void)
{
  const UmDType types[] = { UM_DTYPE_F32, UM_DTYPE_F16, UM_DTYPE_BF16 };
  const UmDType quant[] = { UM_DTYPE_Q8_0, UM_DTYPE_Q4_0, UM_DTYPE_Q4_1, UM_DTYPE_Q5_0, UM_DTYPE_Q5_1,
                            UM_DTYPE_Q4_K, UM_DTYPE_Q5_K, UM_DTYPE_Q6_K };
  for (guint t = 0; t < G_N_ELEMENTS (types); t++)
    {
      check_matmul (types[t], 1, 7, 33);
      check_matmul (types[t], 17, 300, 64);
      check_matmul (types[t], 40, 1000, 256);
      check_matmul (types[t], 3, 4, 5);
    }
  for (guint t = 0; t < G_N_ELEMENTS (quant); t++)
    {
      check_matmul (quant[t], 1, 9, 256);
      check_matmul (quant[t], 33, 300, 512);
    }
}

/* F32 weights at an unaligned file offset go through the backend's aligned copy. */
static void
test_unaligned_f32_weight (void)
{
  const int m = 5, n = 70, k = 48;
  g_autofree guint8 *bytes = g_malloc ((size_t) n * k * 4 + 1);
  g_autofree float *x = g_new (float, (size_t) m * k);
  g_autofree float *out = g_new (float, (size_t) m * n);
  g_autofree double *want = g_new (double, (size_t) m * n);
  g_autofree double *xd = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(UmBackend) be = um_backend_cpu_new (0, 0, &error);
  UmWeight w = { "unaligned", UM_DTYPE_F32, n, k, (uint64_t) k * 4, bytes + 1 };
  UmDevWeight *dw;
  UmBuf *bx, *bo;

  for (int i = 0; i < n * k; i++)
    {
      float f = (float) g_rand_double_range (rng, -1, 1);
      memcpy (bytes + 1 + 4 * i, &f, 4);
    }
  fill (x, (size_t) m * k, 1.0);
  xd = to_double (x, (size_t) m * k);
  um_ref_matmul (xd, m, &w, want);
  dw = be->ops->weight_load (be, &w, &error);
  bx = be->ops->buf_alloc (be, sizeof (float) * m * k, &error);
  bo = be->ops->buf_alloc (be, sizeof (float) * m * n, &error);
  g_assert_no_error (error);
  g_assert_true (be->ops->buf_upload (be, bx, 0, x, sizeof (float) * m * k, &error));
  g_assert_true (be->ops->matmul (be, bx, m, dw, bo, &error));
  g_assert_true (be->ops->buf_download (be, bo, 0, out, sizeof (float) * m * n, &error));
  g_assert_cmpfloat (nerr (out, want, (size_t) m * n), <, 1e-6);
  be->ops->buf_free (be, bx);
  be->ops->buf_free (be, bo);
  be->ops->weight_free (be, dw);
}

static void
test_rms_norm (void)
{
  const int rows = 9, dim = 333;
  float x[9 * 333], w[333], out[9 * 333];
  g_autofree double *xd = NULL;
  double want[9 * 333];

  fill (x, rows * dim, 3.0);
  fill (w, dim, 1.0);
  xd = to_double (x, rows * dim);
  um_cpu_rms_norm (x, rows, dim, w, 1e-5f, out);
  um_ref_rms_norm (xd, rows, dim, w, 1e-5, want);
  g_assert_cmpfloat (nerr (out, want, rows * dim), <, 1e-6);
  /* in place */
  um_cpu_rms_norm (x, rows, dim, w, 1e-5f, x);
  g_assert_cmpfloat (nerr (x, want, rows * dim), <, 1e-6);
}

static void
test_rope (void)
{
  for (int interleaved = 0; interleaved < 2; interleaved++)
    {
      const int rows = 7, heads = 3, hd = 16;
      float x[7 * 3 * 16];
      double want[7 * 3 * 16];
      const gint32 pos[7] = { 0, 1, 2, 100, 4095, 17, 3 };
      g_autofree double *xd = NULL;

      fill (x, rows * heads * hd, 2.0);
      xd = to_double (x, rows * heads * hd);
      memcpy (want, xd, sizeof want);
      um_cpu_rope (x, rows, pos, heads, hd, 500000.0, interleaved);
      um_ref_rope (want, rows, pos, heads, hd, 500000.0, interleaved);
      g_assert_cmpfloat (nerr (x, want, rows * heads * hd), <, 1e-6);
    }
}

static void
check_attention (int L, int H, int Hkv, int hd)
{
  const size_t qn = (size_t) L * H * hd, kn = (size_t) L * Hkv * hd;
  g_autofree float *q = g_new (float, 2 * qn), *k = g_new (float, 2 * kn), *v = g_new (float, 2 * kn);
  g_autofree float *out = g_new (float, 2 * qn), *sel_out = g_new (float, qn);
  g_autofree double *want = g_new (double, qn);
  g_autofree gint32 *seq = g_new (gint32, 2 * L), *sel = g_new (gint32, L);
  g_autofree float *qsel = g_new (float, qn);
  g_autofree double *qd = NULL, *kd = NULL, *vd = NULL;
  int nsel = 0;

  fill (q, 2 * qn, 1.0);
  fill (k, 2 * kn, 1.0);
  fill (v, 2 * kn, 1.0);
  for (int i = 0; i < 2 * L; i++)
    seq[i] = i / L;
  um_cpu_attention (q, 2 * L, seq, k, v, L, H, Hkv, hd, out);
  /* second sequence of the batch against the reference */
  qd = to_double (q + qn, qn);
  kd = to_double (k + kn, kn);
  vd = to_double (v + kn, kn);
  um_ref_attention (qd, kd, vd, L, H, Hkv, hd, want);
  g_assert_cmpfloat (nerr (out + qn, want, qn), <, 1e-5);

  /* a subset of query rows of sequence 1 */
  for (int i = 0; i < L; i += 3)
    {
      memcpy (qsel + (size_t) nsel * H * hd, q + qn + (size_t) i * H * hd, sizeof (float) * H * hd);
      sel[nsel++] = 1;
    }
  um_cpu_attention (qsel, nsel, sel, k, v, L, H, Hkv, hd, sel_out);
  for (int r = 0; r < nsel; r++)
    g_assert_cmpfloat (nerr (sel_out + (size_t) r * H * hd, want + (size_t) 3 * r * H * hd, H * hd), <, 1e-5);
}

static void
test_attention (void)
{
  check_attention (5, 2, 2, 8);
  check_attention (150, 4, 1, 16);   /* more than one chunk of queries */
  check_attention (67, 6, 3, 32);
}

static void
test_swiglu_add (void)
{
  float g[100], u[100], o[100], y[100];
  double gd[100], ud[100], want[100];
  fill (g, 100, 8.0);
  fill (u, 100, 2.0);
  fill (y, 100, 1.0);
  for (int i = 0; i < 100; i++)
    gd[i] = g[i], ud[i] = u[i];
  um_cpu_swiglu (g, u, 100, o);
  um_ref_swiglu (gd, ud, 100, want);
  g_assert_cmpfloat (nerr (o, want, 100), <, 1e-6);
  um_cpu_add (o, y, 100);
  for (int i = 0; i < 100; i++)
    g_assert_cmpfloat (fabs (o[i] - (want[i] + y[i])), <, 1e-5);
}

static void
test_half_conversions (void)
{
  /* every f16 bit pattern survives f16 → f32 → f16 (NaNs stay NaN) */
  for (guint32 h = 0; h < 65536; h++)
    {
      float f = um_f16_to_f32 ((guint16) h);
      if (isnan (f))
        g_assert_true (isnan (um_f16_to_f32 (um_f32_to_f16 (f))));
      else
        g_assert_cmpuint (um_f32_to_f16 (f), ==, h);
    }
  /* ties round to even, overflow to infinity */
  g_assert_cmpuint (um_f32_to_f16 (65520.0f), ==, 0x7c00);
  g_assert_cmpuint (um_f32_to_f16 (1.0f + 1.0f / 2048), ==, 0x3c00);
  g_assert_cmpuint (um_f32_to_bf16 (1.0f + 1.0f / 256), ==, 0x3f80);
  g_assert_cmpuint (um_f32_to_bf16 (1.0f + 3.0f / 256), ==, 0x3f82);
  g_assert_cmpfloat (um_bf16_to_f32 (0x3f80), ==, 1.0f);
}

static void
test_topk (void)
{
  /* Without ties: the k largest, whatever the algorithm. */
  for (int trial = 0; trial < 50; trial++)
    {
      int n = g_rand_int_range (rng, 1, 300), k = g_rand_int_range (rng, 1, n + 1);
      g_autofree double *v = g_new (double, n);
      g_autofree gint32 *idx = g_new (gint32, k);
      double kth_min = INFINITY;
      int above = 0;
      for (int i = 0; i < n; i++)
        v[i] = g_rand_double (rng) + i * 1e-12;
      um_topk_reference (v, n, k, idx);
      for (int j = 0; j < k; j++)
        kth_min = MIN (kth_min, v[idx[j]]);
      for (int i = 0; i < n; i++)
        above += v[i] >= kth_min;
      g_assert_cmpint (above, ==, k);
    }
  /* Ties with k·64 ≤ n (partial sort): the first maximum wins. */
  {
    double v[128];
    gint32 idx[1];
    for (int i = 0; i < 128; i++)
      v[i] = (i == 40 || i == 90) ? 0.0 : -INFINITY;
    um_topk_reference (v, 128, 1, idx);
    g_assert_cmpint (idx[0], ==, 40);
  }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  rng = g_rand_new_with_seed (1234);
  g_test_add_func ("/kernels/matmul", test_matmul);
  g_test_add_func ("/kernels/matmul-unaligned-f32", test_unaligned_f32_weight);
  g_test_add_func ("/kernels/rms-norm", test_rms_norm);
  g_test_add_func ("/kernels/rope", test_rope);
  g_test_add_func ("/kernels/attention", test_attention);
  g_test_add_func ("/kernels/swiglu-add", test_swiglu_add);
  g_test_add_func ("/kernels/half", test_half_conversions);
  g_test_add_func ("/kernels/topk", test_topk);
  int rc = g_test_run ();
  g_rand_free (rng);
  return rc;
}

/* Every CPU kernel against its plain double-precision reference on random
 * inputs.  Each check allows, element by element, the worst-case error of
 * float32 arithmetic for that computation (Higham, "Accuracy and Stability
 * of Numerical Algorithms", ch. 3): with u = 2^-24 and γ_n = n·u/(1 − n·u),
 * a sum or dot product of n terms in any order, with or without FMA, is
 * within γ_n · Σ|terms| of the exact value.  Such bounds hold on every CPU
 * and BLAS; a wrong index or a lost scale breaks them by orders of
 * magnitude. */
#include <math.h>
#include <string.h>

#include "um-backend.h"
#include "um-cpu-kernels.h"
#include "um-quant.h"
#include "um-half.h"
#include "um-ref-kernels.h"
#include "um-test-util.h"
#include "um-topk.h"

/* The inputs' source: reseeded for each test seed (with_seeds ()). */
static GRand *rng;
/* Which of the seeds runs: the shapes that cost most run on the first only. */
static guint seed_index;

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

#define U_F32 (1.0 / 16777216.0)

static double
gamma_n (double n)
{
  return n * U_F32 / (1.0 - n * U_F32);
}

/* Every |got − want| within bound[i]; reports the worst ratio. */
static void
assert_within (const float *got, const double *want, const double *bound, size_t n, const char *what)
{
  double worst = 0;
  for (size_t i = 0; i < n; i++)
    {
      double e = fabs (got[i] - want[i]);
      g_assert_cmpfloat (e, <=, bound[i]);
      if (bound[i] > 0)
        worst = MAX (worst, e / bound[i]);
    }
  g_test_message ("%s: worst error %.2g of its bound", what, worst);
}

/* Bound of x[m, k] · wᵀ: γ_k Σ|x||w| per output (the weights are converted
 * to f32 exactly, so summation is the only rounding). */
static double *
matmul_bound (const double *x, int64_t m, const UmWeight *w)
{
  g_autofree double *row = g_new (double, w->cols);
  double *b = g_new (double, (size_t) m * w->rows);

  for (uint64_t j = 0; j < w->rows; j++)
    {
      um_ref_weight_row (w, j, row);
      for (int64_t i = 0; i < m; i++)
        {
          double a = 0;
          for (uint64_t c = 0; c < w->cols; c++)
            a += fabs (x[i * w->cols + c] * row[c]);
          b[i * w->rows + j] = gamma_n ((double) w->cols) * a;
        }
    }
  return b;
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
  g_autofree double *xd = NULL, *bound = NULL;
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
  g_assert_true (um_cpu_matmul (x, m, &w, out, &scratch, UM_PRODUCTS_EXACT, &error));
  g_assert_no_error (error);
  um_ref_matmul (xd, m, &w, want);
  bound = matmul_bound (xd, m, &w);
  assert_within (out, want, bound, (size_t) m * n, um_dtype_name (dtype));
  um_cpu_scratch_clear (&scratch);
}

static void
test_matmul (void)
{
  const UmDType types[] = { UM_DTYPE_F32, UM_DTYPE_F16, UM_DTYPE_BF16 };
  const UmDType quant[] = { UM_DTYPE_Q8_0, UM_DTYPE_Q4_0, UM_DTYPE_Q4_1, UM_DTYPE_Q5_0, UM_DTYPE_Q5_1,
                            UM_DTYPE_Q4_K, UM_DTYPE_Q5_K, UM_DTYPE_Q6_K };
  /* The large shapes (several blocks of the products' tiling) with the
   * first seed only; the values of every seed meet the small ones. */
  for (guint t = 0; t < G_N_ELEMENTS (types); t++)
    {
      check_matmul (types[t], 1, 7, 33);
      check_matmul (types[t], 3, 4, 5);
      if (seed_index > 0)
        continue;
      check_matmul (types[t], 17, 300, 64);
      check_matmul (types[t], 40, 1000, 256);
    }
  for (guint t = 0; t < G_N_ELEMENTS (quant); t++)
    {
      check_matmul (quant[t], 1, 9, 256);
      check_matmul (quant[t], seed_index > 0 ? 5 : 33, seed_index > 0 ? 17 : 300, 512);
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
  g_autofree double *xd = NULL, *bound = NULL;
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
  bound = matmul_bound (xd, m, &w);
  assert_within (out, want, bound, (size_t) m * n, "unaligned f32");
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
  double want[9 * 333], bound[9 * 333];

  fill (x, rows * dim, 3.0);
  fill (w, dim, 1.0);
  xd = to_double (x, rows * dim);
  um_cpu_rms_norm (x, rows, dim, w, 1e-5f, out);
  um_ref_rms_norm (xd, rows, dim, w, 1e-5, want);
  /* The sum of squares (positive terms) is within γ_dim relatively; the
   * division, + eps, sqrt, reciprocal and two products add an ulp each,
   * and the square root halves the sum's error: γ_dim/2 + 7u of |want|
   * (eps 1e-5 itself differs from its float by < u relatively). */
  for (int i = 0; i < rows * dim; i++)
    bound[i] = (gamma_n (dim) / 2 + 7 * U_F32) * fabs (want[i]);
  assert_within (out, want, bound, rows * dim, "rms_norm");
  /* in place */
  um_cpu_rms_norm (x, rows, dim, w, 1e-5f, x);
  assert_within (x, want, bound, rows * dim, "rms_norm in place");
}

/* RoPE over the first rd of each head's hd values (partial when rd < hd). */
static void
check_rope (int hd, int rd)
{
  for (int interleaved = 0; interleaved < 2; interleaved++)
    {
      const int rows = 7, heads = 3, n = rows * heads * hd;
      g_autofree float *x = g_new (float, n);
      g_autofree double *want = g_new (double, n), *bound = g_new0 (double, n);
      const gint32 pos[7] = { 0, 1, 2, 100, 4095, 17, 3 };
      g_autofree double *xd = NULL;

      fill (x, n, 2.0);
      xd = to_double (x, n);
      memcpy (want, xd, n * sizeof (double));
      /* Each output is x0·c ∓ x1·s with the angle in double and c, s
       * rounded to float (u each), two products and one sum rounded:
       * within 3u(|x0| + |x1|) since |c|, |s| ≤ 1; 4u leaves room for the
       * double angle's own rounding at position 4095. The values past rd
       * are not touched: bound 0, equal by construction. */
      for (int r = 0; r < rows * heads; r++)
        for (int i = 0; i < rd / 2; i++)
          {
            int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + rd / 2;
            double mag = fabs (xd[r * hd + a]) + fabs (xd[r * hd + b]);
            bound[r * hd + a] = bound[r * hd + b] = 4 * U_F32 * mag;
          }
      um_cpu_rope (x, rows, pos, heads, hd, rd, 500000.0, interleaved);
      um_ref_rope (want, rows, pos, heads, hd, rd, 500000.0, interleaved);
      assert_within (x, want, bound, n, interleaved ? "rope interleaved" : "rope halves");
    }
}

static void
test_rope (void)
{
  check_rope (16, 16);
  /* Partial: LLaDA 2.x turns the first 8 of 16; widths no power of two. */
  check_rope (16, 8);
  check_rope (128, 64);
  check_rope (80, 22);
  check_rope (16, 0);
}

/* The kept cos/sin tables give um_cpu_rope ()'s results bit for bit (the
 * same expressions compute them: equal by construction), across hits,
 * misses, a table replaced and other widths and thetas. */
static void
test_rope_cached (void)
{
  const int hd = 32, heads = 2, rows = 5;
  const gint32 pos_a[5] = { 0, 1, 2, 3, 4 }, pos_b[5] = { 7, 1, 2, 3, 4 }, pos_c[5] = { 4000, 3, 2, 1, 0 };
  const struct { const gint32 *pos; int rd; double theta; } calls[] = {
    { pos_a, 32, 10000.0 }, { pos_a, 32, 10000.0 }, { pos_b, 32, 10000.0 }, { pos_a, 32, 10000.0 },
    { pos_c, 32, 10000.0 }, { pos_b, 32, 10000.0 }, { pos_a, 16, 10000.0 }, { pos_a, 16, 500000.0 },
    { pos_a, 32, 10000.0 },
  };
  UmCpuRopeTable tables[UM_CPU_ROPE_TABLES] = { { 0 } };
  g_autofree float *x = g_new (float, rows * heads * hd), *y = g_new (float, rows * heads * hd);

  for (guint c = 0; c < G_N_ELEMENTS (calls); c++)
    for (int interleaved = 0; interleaved < 2; interleaved++)
      {
        fill (x, rows * heads * hd, 2.0);
        memcpy (y, x, sizeof (float) * rows * heads * hd);
        um_cpu_rope (x, rows, calls[c].pos, heads, hd, calls[c].rd, calls[c].theta, interleaved);
        um_cpu_rope_cached (tables, y, rows, calls[c].pos, heads, hd, calls[c].rd, calls[c].theta, interleaved);
        g_assert_cmpmem (x, sizeof (float) * rows * heads * hd, y, sizeof (float) * rows * heads * hd);
      }
  for (int i = 0; i < UM_CPU_ROPE_TABLES; i++)
    um_cpu_rope_table_clear (&tables[i]);
}

/* At every CPU level the turned pairs are x0·c - x1·s and x1·c + x0·s of
 * the table's c and s, each product and the sum rounded once in float: the
 * AVX2 loop (8 or 4 pairs at a time) must give what that formula gives in
 * scalar C, bit for bit (the same operations, unfused: equal by
 * construction).  Widths cover the vector loops, their scalar tails (11,
 * 3 pairs) and partial RoPE. */
static void
test_rope_bits (void)
{
  const int shapes[][2] = { { 64, 64 }, { 16, 16 }, { 80, 22 }, { 16, 6 }, { 128, 64 } };
  const gint32 pos[6] = { 0, 1, 5, 100, 4095, 33 };
  const int rows = 6, heads = 3;

  for (guint c = 0; c < G_N_ELEMENTS (shapes); c++)
    for (int interleaved = 0; interleaved < 2; interleaved++)
      {
        const int hd = shapes[c][0], rd = shapes[c][1], half = rd / 2, n = rows * heads * hd;
        UmCpuRopeTable tables[UM_CPU_ROPE_TABLES] = { { 0 } };
        g_autofree float *x = g_new (float, n), *want = g_new (float, n);
        const UmCpuRopeTable *t = NULL;

        fill (x, n, 2.0);
        memcpy (want, x, sizeof (float) * n);
        um_cpu_rope_cached (tables, x, rows, pos, heads, hd, rd, 10000.0, interleaved);
        for (int i = 0; i < UM_CPU_ROPE_TABLES; i++)
          if (tables[i].rows == rows)
            t = &tables[i];
        g_assert_nonnull (t);
        for (int r = 0; r < rows; r++)
          for (int h = 0; h < heads; h++)
            {
              float *v = want + (r * heads + h) * hd;
              for (int i = 0; i < half; i++)
                {
                  const int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
                  const float x0 = v[a], x1 = v[b], cs = t->cs[r * half + i], sn = t->sn[r * half + i];
                  const float p0 = x0 * cs, p1 = x1 * sn, p2 = x1 * cs, p3 = x0 * sn;
                  v[a] = p0 - p1;
                  v[b] = p2 + p3;
                }
            }
        g_assert_cmpmem (x, sizeof (float) * n, want, sizeof (float) * n);
        for (int i = 0; i < UM_CPU_ROPE_TABLES; i++)
          um_cpu_rope_table_clear (&tables[i]);
      }
}

/* Worst-case float32 error of one attention output (head h, query i):
 * each score q·k/√hd is within e_s = (γ_hd + 2u)·Σ|q||k|/√hd; exp turns an
 * absolute score error e into a relative weight error of e + 2u (expf is
 * within an ulp), the max subtraction adds u of |s|... so each normalised
 * weight p_j/Σp is within 2·(max_j e_s,j + 4u) + γ_L relatively (numerator
 * and denominator), and the weighted sum of v adds γ_L Σ p|v|.  Under a
 * mask (kv_len) query i's sums run over its kv_len[i] keys only; the
 * masked keys weigh exactly 0 in the kernel, so they add no error. */
static void
attention_bound (const double *q, const double *k, const double *v, int L, const gint32 *kv_len, int H, int Hkv,
                 int hd, double *bound)
{
  const int qs = H * hd, kvs = Hkv * hd;
  g_autofree double *p = g_new (double, L);

  for (int h = 0; h < H; h++)
    for (int i = 0; i < L; i++)
      {
        int kvh = h / (H / Hkv), n = kv_len != NULL ? kv_len[i] : L;
        double mx = -INFINITY, sum = 0, es = 0;
        for (int j = 0; j < n; j++)
          {
            double s = 0, a = 0;
            for (int d = 0; d < hd; d++)
              {
                s += q[i * qs + h * hd + d] * k[j * kvs + kvh * hd + d];
                a += fabs (q[i * qs + h * hd + d] * k[j * kvs + kvh * hd + d]);
              }
            p[j] = s / sqrt (hd);
            es = MAX (es, (gamma_n (hd) + 2 * U_F32) * a / sqrt (hd) + U_F32 * fabs (p[j]));
            mx = MAX (mx, p[j]);
          }
        for (int j = 0; j < n; j++)
          sum += (p[j] = exp (p[j] - mx));
        for (int d = 0; d < hd; d++)
          {
            double mag = 0;
            for (int j = 0; j < n; j++)
              mag += p[j] / sum * fabs (v[j * kvs + kvh * hd + d]);
            bound[i * qs + h * hd + d] = (2 * (es + 4 * U_F32) + 3 * gamma_n (n)) * mag;
          }
      }
}

/* Two sequences of L in one call, the second against the reference; then
 * every third query row of it alone.  kv_len: the keys position p sees
 * (the same in both sequences), NULL for all. */
static void
check_attention (int L, int H, int Hkv, int hd, const gint32 *kv_len, const char *what)
{
  const size_t qn = (size_t) L * H * hd, kn = (size_t) L * Hkv * hd;
  g_autofree float *q = g_new (float, 2 * qn), *k = g_new (float, 2 * kn), *v = g_new (float, 2 * kn);
  g_autofree float *out = g_new (float, 2 * qn), *sel_out = g_new (float, qn);
  g_autofree double *want = g_new (double, qn), *bound = g_new (double, qn);
  g_autofree gint32 *seq = g_new (gint32, 2 * L), *sel = g_new (gint32, L);
  g_autofree gint32 *len = g_new (gint32, 2 * L), *sel_len = g_new (gint32, L);
  g_autofree float *qsel = g_new (float, qn);
  g_autofree double *qd = NULL, *kd = NULL, *vd = NULL;
  int nsel = 0;

  fill (q, 2 * qn, 1.0);
  fill (k, 2 * kn, 1.0);
  fill (v, 2 * kn, 1.0);
  for (int i = 0; i < 2 * L; i++)
    {
      seq[i] = i / L;
      len[i] = kv_len != NULL ? kv_len[i % L] : L;
    }
  um_cpu_attention (q, 2 * L, seq, kv_len != NULL ? len : NULL, k, v, L, H, Hkv, hd, out);
  /* second sequence of the batch against the reference */
  qd = to_double (q + qn, qn);
  kd = to_double (k + kn, kn);
  vd = to_double (v + kn, kn);
  um_ref_attention (qd, kd, vd, L, kv_len, H, Hkv, hd, want);
  attention_bound (qd, kd, vd, L, kv_len, H, Hkv, hd, bound);
  assert_within (out + qn, want, bound, qn, what);

  /* a subset of query rows of sequence 1 */
  for (int i = 0; i < L; i += 3)
    {
      memcpy (qsel + (size_t) nsel * H * hd, q + qn + (size_t) i * H * hd, sizeof (float) * H * hd);
      sel_len[nsel] = len[i];
      sel[nsel++] = 1;
    }
  um_cpu_attention (qsel, nsel, sel, kv_len != NULL ? sel_len : NULL, k, v, L, H, Hkv, hd, sel_out);
  for (int r = 0; r < nsel; r++)
    assert_within (sel_out + (size_t) r * H * hd, want + (size_t) 3 * r * H * hd,
                   bound + (size_t) 3 * r * H * hd, H * hd, "attention, selected rows");
}

static void
test_attention (void)
{
  check_attention (5, 2, 2, 8, NULL, "attention");
  check_attention (150, 4, 1, 16, NULL, "attention");   /* more than one chunk of queries */
  check_attention (67, 6, 3, 32, NULL, "attention");
}

/* Masks: block-causal (blocks of 4 and 32, a last block cut short),
 * causal (every row's count differs: chunks split by their spread), and
 * random counts from 1 to L in any order, with GQA. LLaDA 2.x's heads on
 * every seed, the longer shapes on the first only (their cost). */
static void
test_attention_masked (void)
{
  const int shapes[][4] = { { 45, 4, 2, 16 }, { 150, 4, 1, 16 }, { 67, 6, 3, 32 } };

  for (guint s = 0; s < (seed_index > 0 ? 1 : G_N_ELEMENTS (shapes)); s++)
    {
      const int L = shapes[s][0], H = shapes[s][1], Hkv = shapes[s][2], hd = shapes[s][3];
      g_autofree gint32 *len = g_new (gint32, L);

      for (int B = 4; B <= 32; B *= 8)
        {
          for (int p = 0; p < L; p++)
            len[p] = MIN (L, (p / B + 1) * B);
          check_attention (L, H, Hkv, hd, len, B == 4 ? "attention, blocks of 4" : "attention, blocks of 32");
        }
      for (int p = 0; p < L; p++)
        len[p] = p + 1;
      check_attention (L, H, Hkv, hd, len, "attention, causal");
      for (int p = 0; p < L; p++)
        len[p] = p % 5 == 0 ? 1 : p % 5 == 1 ? L : g_rand_int_range (rng, 1, L + 1);
      check_attention (L, H, Hkv, hd, len, "attention, random key counts");
    }
}

/* SwiGLU of n random gates of scale gate_scale: o and want (n each) hold the
 * result and its double reference, bound the allowed error.
 * g / (1 + expf (−g)) · u: expf within an ulp, then a sum, a division and a
 * product: 5u relatively (the sum of positive terms cannot cancel); 8u for
 * expf's error scaled by exp(−g)/(1+exp(−g)) ≤ 1. */
static void
check_swiglu (int n, double gate_scale, float *o, double *want, double *bound, const char *what)
{
  g_autofree float *g = g_new (float, n), *u = g_new (float, n);
  g_autofree double *gd = NULL, *ud = NULL;

  fill (g, n, gate_scale);
  fill (u, n, 2.0);
  gd = to_double (g, n);
  ud = to_double (u, n);
  um_cpu_swiglu (g, u, n, o);
  um_ref_swiglu (gd, ud, n, want);
  for (int i = 0; i < n; i++)
    bound[i] = 8 * U_F32 * fabs (want[i]);
  assert_within (o, want, bound, n, what);
}

static void
test_swiglu_add (void)
{
  float o[203], y[100];
  double want[203], bound[203];

  check_swiglu (100, 8.0, o, want, bound, "swiglu");
  fill (y, 100, 1.0);
  um_cpu_add (o, y, 100);
  /* one more rounding, of the sum */
  for (int i = 0; i < 100; i++)
    {
      bound[i] += U_F32 * fabs (want[i] + y[i]) * (1 + U_F32);
      want[i] += y[i];
    }
  assert_within (o, want, bound, 100, "add");

  /* Far into both tails of the exponential (e^80 and e^-80 are still
   * normal floats), through the vector and the scalar remainder paths. */
  check_swiglu (203, 80.0, o, want, bound, "swiglu, wide range");
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

/* The bounds hold for any input: each test draws its inputs from every
 * test seed in turn (um_test_seed_next). */
static void
with_seeds (gconstpointer data)
{
  void (*fn) (void) = (void (*) (void)) data;
  guint32 seed;

  seed_index = 0;
  for (guint it = 0; um_test_seed_next (&it, &seed); seed_index++)
    {
      rng = g_rand_new_with_seed (seed);
      fn ();
      g_clear_pointer (&rng, g_rand_free);
    }
}

int
main (int argc, char **argv)
{
  static const struct {
    const char *path;
    void (*fn) (void);
  } seeded[] = {
    { "/kernels/matmul", test_matmul },
    { "/kernels/matmul-unaligned-f32", test_unaligned_f32_weight },
    { "/kernels/rms-norm", test_rms_norm },
    { "/kernels/rope", test_rope },
    { "/kernels/rope-cached", test_rope_cached },
    { "/kernels/rope-bits", test_rope_bits },
    { "/kernels/attention", test_attention },
    { "/kernels/attention-masked", test_attention_masked },
    { "/kernels/swiglu-add", test_swiglu_add },
    { "/kernels/topk", test_topk },
  };

  g_test_init (&argc, &argv, NULL);
  for (guint i = 0; i < G_N_ELEMENTS (seeded); i++)
    g_test_add_data_func (seeded[i].path, (gconstpointer) seeded[i].fn, with_seeds);
  g_test_add_func ("/kernels/half", test_half_conversions);
  return g_test_run ();
}

/* Attention's two products (compute/um-attn-cpu.h), each kernel this CPU
 * level can run, against a double-precision reference.
 *
 * Bounds from the arithmetic (u = 2^-24, γ_n = n·u/(1 − n·u)): a dot
 * product of n float terms, in any order, with or without FMA, is within
 * γ_n Σ|a_i b_i| of the exact value (Higham, "Accuracy and Stability of
 * Numerical Algorithms", §3.1).  A score is such a product of hd terms
 * then multiplied by the float scale (one more rounding, u·|result| ≤
 * u·scale·Σ|qk|): within γ_{hd+1}·scale·Σ|q||k|.  An output of the values
 * product is one of nk terms: within γ_nk Σ|t||v|.  Shapes cover every
 * tile and its edges (rows, keys and head sizes not multiples of 4, 8 or
 * 16) with strides wider than the rows, as attention passes them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "um-attn-cpu.h"
#include "um-cpu-exp.h"
#include "um-cpu-isa.h"
#include "um-test-util.h"

#define U_F32 (1.0 / 16777216.0)
/* A value no kernel writes: the bytes past a row must keep it. */
#define SENTINEL 12345.5f

static double
gamma_n (double n)
{
  return n * U_F32 / (1.0 - n * U_F32);
}

static void
fill (GRand *rng, float *x, size_t n, double lo, double hi)
{
  for (size_t i = 0; i < n; i++)
    x[i] = (float) g_rand_double_range (rng, lo, hi);
}

typedef struct {
  int nb, nk, hd;
} Shape;

static const Shape shapes[] = {
  { 1, 1, 1 }, { 2, 3, 8 }, { 3, 5, 7 }, { 4, 4, 16 }, { 5, 9, 17 }, { 6, 11, 24 }, { 7, 33, 64 },
  { 13, 70, 96 }, { 64, 97, 128 }, { 64, 128, 128 }, { 33, 200, 80 }, { 8, 16, 33 },
};

/* The worst |error| / bound over a product, asserting each within. */
static double
check_scores (UmAttnImpl impl, GRand *rng, const Shape *sh)
{
  const int64_t qs = 3 * sh->hd + 5, ks = 2 * sh->hd + 3, ld = um_attn_ld (sh->nb);
  const float scale = 1.0f / sqrtf ((float) sh->hd);
  g_autofree float *q = g_new (float, (size_t) sh->nb * qs), *k = g_new (float, (size_t) sh->nk * ks);
  /* Two rows of keys more than the kernels may write. */
  g_autofree float *t = g_new (float, (size_t) (sh->nk + 2) * ld);
  float *pack = NULL;
  double worst = 0;

  g_assert_cmpint (posix_memalign ((void **) &pack, 64, um_attn_pack_floats (sh->nb, sh->nk, sh->hd) * sizeof (float)), ==, 0);
  fill (rng, q, (size_t) sh->nb * qs, -2, 2);
  fill (rng, k, (size_t) sh->nk * ks, -2, 2);
  for (size_t i = 0; i < (size_t) (sh->nk + 2) * ld; i++)
    t[i] = SENTINEL;
  um_attn_scores (impl, q, qs, k, ks, sh->nb, sh->nk, sh->hd, scale, t, ld, pack);
  for (int j = 0; j < sh->nk; j++)
    {
      for (int r = 0; r < sh->nb; r++)
        {
          double want = 0, mag = 0, bound, e;
          for (int d = 0; d < sh->hd; d++)
            {
              want += (double) q[r * qs + d] * k[j * ks + d];
              mag += fabs ((double) q[r * qs + d] * k[j * ks + d]);
            }
          want *= scale;
          bound = gamma_n (sh->hd + 1) * scale * mag;
          e = fabs (t[j * ld + r] - want);
          if (!(e <= bound))
            g_error ("%s scores %dx%dx%d: [%d, %d] = %.9g, want %.9g (error %.3g > bound %.3g)",
                     um_attn_impl_name (impl), sh->nb, sh->nk, sh->hd, r, j, t[j * ld + r], want, e, bound);
          if (bound > 0)
            worst = MAX (worst, e / bound);
        }
      /* Padding rows score as a query of zeros: exactly 0. */
      for (int64_t r = sh->nb; r < ld; r++)
        g_assert_cmpfloat (t[j * ld + r], ==, 0.0f);
    }
  /* Untouched memory: compared bit for bit, nothing was computed. */
  for (int64_t i = (int64_t) sh->nk * ld; i < (int64_t) (sh->nk + 2) * ld; i++)
    g_assert_true (memcmp (&t[i], &(float) { SENTINEL }, sizeof (float)) == 0);
  free (pack);
  return worst;
}

static double
check_values (UmAttnImpl impl, GRand *rng, const Shape *sh)
{
  const int64_t ld = um_attn_ld (sh->nb), vs = 2 * sh->hd + 1, os = 3 * sh->hd + 2;
  g_autofree float *t = g_new (float, (size_t) sh->nk * ld), *v = g_new (float, (size_t) sh->nk * vs);
  g_autofree float *o = g_new (float, (size_t) sh->nb * os);
  float *pack = NULL;
  double worst = 0;

  g_assert_cmpint (posix_memalign ((void **) &pack, 64, um_attn_pack_floats (sh->nb, sh->nk, sh->hd) * sizeof (float)), ==, 0);
  /* Weights as softmax leaves them (0 … 1), some exactly 0 (masked keys). */
  fill (rng, t, (size_t) sh->nk * ld, 0, 1);
  for (int r = 0; r < sh->nb; r++)
    for (int j = MAX (0, sh->nk - r % 3); j < sh->nk; j++)
      t[j * ld + r] = 0.0f;
  fill (rng, v, (size_t) sh->nk * vs, -2, 2);
  for (size_t i = 0; i < (size_t) sh->nb * os; i++)
    o[i] = SENTINEL;
  um_attn_values (impl, t, ld, sh->nb, sh->nk, v, vs, sh->hd, o, os, pack);
  for (int r = 0; r < sh->nb; r++)
    {
      for (int c = 0; c < sh->hd; c++)
        {
          double want = 0, mag = 0, bound, e;
          for (int j = 0; j < sh->nk; j++)
            {
              want += (double) t[j * ld + r] * v[j * vs + c];
              mag += fabs ((double) t[j * ld + r] * v[j * vs + c]);
            }
          bound = gamma_n (sh->nk) * mag;
          e = fabs (o[r * os + c] - want);
          if (!(e <= bound))
            g_error ("%s values %dx%dx%d: [%d, %d] = %.9g, want %.9g (error %.3g > bound %.3g)",
                     um_attn_impl_name (impl), sh->nb, sh->nk, sh->hd, r, c, o[r * os + c], want, e, bound);
          if (bound > 0)
            worst = MAX (worst, e / bound);
        }
      for (int64_t c = sh->hd; c < os; c++)
        g_assert_true (memcmp (&o[r * os + c], &(float) { SENTINEL }, sizeof (float)) == 0);
    }
  free (pack);
  return worst;
}

static void
test_products (void)
{
  g_autoptr(GRand) rng = g_rand_new_with_seed (22);
  int tested = 0;

  for (int impl = UM_ATTN_BLAS; impl < UM_ATTN_N_IMPLS; impl++)
    {
      double ws = 0, wv = 0;

      if (!um_attn_impl_available ((UmAttnImpl) impl))
        continue;
      for (guint i = 0; i < G_N_ELEMENTS (shapes); i++)
        {
          ws = MAX (ws, check_scores ((UmAttnImpl) impl, rng, &shapes[i]));
          wv = MAX (wv, check_values ((UmAttnImpl) impl, rng, &shapes[i]));
        }
      g_test_message ("%s: worst error %.2g (scores), %.2g (values) of the bound", um_attn_impl_name (impl), ws, wv);
      tested++;
    }
  /* OpenBLAS and plain C at least, and every SIMD kernel the level allows. */
  g_assert_cmpint (tested, ==, 2 + (um_cpu_isa () >= UM_ISA_AVX2) + (um_cpu_isa () >= UM_ISA_AVX512));
}

/* The choice: what runs is always available; an unavailable choice falls
 * back to the level's default; the default is one of ours from AVX2 up. */
static void
test_dispatch (void)
{
  UmAttnImpl dflt;

  um_attn_set_impl (UM_ATTN_AUTO);
  dflt = um_attn_impl ();
  g_assert_true (um_attn_impl_available (dflt));
  if (um_cpu_isa () >= UM_ISA_AVX512)
    g_assert_cmpint (dflt, ==, UM_ATTN_AVX512);
  else if (um_cpu_isa () >= UM_ISA_AVX2)
    g_assert_cmpint (dflt, ==, UM_ATTN_AVX2);
  for (int impl = UM_ATTN_BLAS; impl < UM_ATTN_N_IMPLS; impl++)
    {
      um_attn_set_impl ((UmAttnImpl) impl);
      g_assert_cmpint (um_attn_impl (), ==, um_attn_impl_available ((UmAttnImpl) impl) ? (UmAttnImpl) impl : dflt);
    }
  um_attn_set_impl (UM_ATTN_AUTO);
  for (int impl = UM_ATTN_AUTO; impl < UM_ATTN_N_IMPLS; impl++)
    {
      UmAttnImpl back;
      g_assert_true (um_attn_impl_from_name (um_attn_impl_name ((UmAttnImpl) impl), &back));
      g_assert_cmpint (back, ==, impl);
    }
}

/* The softmax of each row over its own key count, against double.  With
 * D = max_j |s_j − max| (the subtraction's rounding is u·D at most, which
 * e^x turns into a relative error of u·D), e^x within 2 ulp (4u; the
 * vector versions' bound, expf's is 1 ulp), the sum of n positive terms
 * within γ_n, then 1/sum and the product rounded (2u): each weight is
 * within (2·(u·D + 4u) + γ_n + 2u)·p of the truth p, numerator and
 * denominator counted; we allow 3u for the last term, for second-order
 * products of these small quantities.  Keys past the count weigh exactly
 * 0, and so do the padding rows (the kernel writes 0 there). */
static void
test_softmax (void)
{
  g_autoptr(GRand) rng = g_rand_new_with_seed (7);
  const int nbs[] = { 1, 5, 8, 13, 16, 17, 33, 64 }, nks[] = { 1, 3, 16, 70, 130 };
  double worst = 0;

  for (guint a = 0; a < G_N_ELEMENTS (nbs); a++)
    for (guint b = 0; b < G_N_ELEMENTS (nks); b++)
      {
        const int nb = nbs[a], nk = nks[b];
        const int64_t ld = um_attn_ld (nb);
        g_autofree float *t = g_new0 (float, (size_t) nk * ld), *orig = NULL;
        g_autofree int32_t *n = g_new (int32_t, nb);

        fill (rng, t, (size_t) nk * ld, -8, 8);
        for (int r = 0; r < nb; r++)
          n[r] = r % 4 == 0 ? nk : g_rand_int_range (rng, 1, nk + 1);
        /* Padding rows as the score kernels leave them. */
        for (int64_t j = 0; j < nk; j++)
          for (int64_t r = nb; r < ld; r++)
            t[j * ld + r] = 0.0f;
        orig = g_memdup2 (t, (size_t) nk * ld * sizeof (float));
        um_attn_softmax (t, ld, nb, nk, n);
        for (int r = 0; r < nb; r++)
          {
            double mx = -INFINITY, sum = 0, dmax = 0;
            for (int j = 0; j < n[r]; j++)
              mx = MAX (mx, orig[j * ld + r]);
            for (int j = 0; j < n[r]; j++)
              {
                sum += exp (orig[j * ld + r] - mx);
                dmax = MAX (dmax, fabs (orig[j * ld + r] - mx));
              }
            for (int j = 0; j < nk; j++)
              {
                double p, bound, e;
                if (j >= n[r])
                  {
                    g_assert_cmpfloat (t[j * ld + r], ==, 0.0f);
                    continue;
                  }
                p = exp (orig[j * ld + r] - mx) / sum;
                bound = (2 * (U_F32 * dmax + 4 * U_F32) + gamma_n (n[r]) + 3 * U_F32) * p;
                e = fabs (t[j * ld + r] - p);
                if (!(e <= bound))
                  g_error ("softmax %dx%d: [%d, %d] = %.9g, want %.9g (error %.3g > bound %.3g)", nb, nk, r, j,
                           t[j * ld + r], p, e, bound);
                worst = MAX (worst, e / bound);
              }
          }
        for (int64_t j = 0; j < nk; j++)
          for (int64_t r = nb; r < ld; r++)
            g_assert_cmpfloat (t[j * ld + r], ==, 0.0f);
      }
  g_test_message ("softmax (%s): worst error %.2g of the bound", um_cpu_isa_name (um_cpu_isa ()), worst);
}

#if UM_HAVE_X86_SIMD
UM_TARGET_AVX2 static void
exp8_of (const float *x, float *y)
{
  _mm256_storeu_ps (y, um_exp8 (_mm256_loadu_ps (x)));
}

UM_TARGET_AVX512 static void
exp16_of (const float *x, float *y)
{
  _mm512_storeu_ps (y, um_exp16 (_mm512_loadu_ps (x)));
}
#endif

/* The softmax's vector e^x: within 2 ulp of exp () over [-87.3, 88.7]
 * (the claim um-cpu-exp.h makes), +inf above; and the AVX2 and AVX-512
 * versions equal bit for bit (the same operations, the scale by 2^n exact
 * in both: equal by construction). */
static void
test_exp (void)
{
#if UM_HAVE_X86_SIMD
  const int N = 200000;
  g_autofree float *x = g_new (float, N + 16), *y8 = g_new (float, N + 16), *y16 = g_new (float, N + 16);
  double worst = 0;

  if (um_cpu_isa () < UM_ISA_AVX2)
    {
      g_test_skip ("no vector exp below AVX2");
      return;
    }
  for (int i = 0; i < N + 16; i++)
    x[i] = i < N ? -87.3f + (float) i * (88.7f + 87.3f) / N : 88.8f + (float) i;
  for (int i = 0; i < N + 16; i += 8)
    exp8_of (x + i, y8 + i);
  for (int i = 0; i < N; i++)
    {
      double want = exp ((double) x[i]);
      int e2;
      /* An ulp of the result: 2^(exponent − 24) for a result in [2^(e−1), 2^e). */
      double ulp = (frexp (want, &e2), ldexp (1.0, MAX (e2, -125) - 24));
      double err = fabs (y8[i] - want) / ulp;
      if (!(err <= 2.0))
        g_error ("exp8 (%.9g) = %.9g, want %.9g: %.2f ulp", x[i], y8[i], want, err);
      worst = MAX (worst, err);
    }
  for (int i = N; i < N + 16; i++)
    g_assert_true (isinf (y8[i]) && y8[i] > 0);
  g_test_message ("exp8: worst %.2f ulp", worst);
  if (um_cpu_isa () >= UM_ISA_AVX512)
    {
      for (int i = 0; i < N + 16; i += 16)
        exp16_of (x + i, y16 + i);
      g_assert_cmpmem (y8, (N + 16) * sizeof (float), y16, (N + 16) * sizeof (float));
    }
#else
  g_test_skip ("no vector exp on this architecture");
#endif
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/attn-cpu/products", test_products);
  g_test_add_func ("/attn-cpu/softmax", test_softmax);
  g_test_add_func ("/attn-cpu/exp", test_exp);
  g_test_add_func ("/attn-cpu/dispatch", test_dispatch);
  return g_test_run ();
}

/* test-qgemm.c — the 8-bit integer product with quantized weights
 * (um-qgemm.c, um-qgemm-avx2.c): the reference against a double-precision
 * product, the AVX-512 VNNI and the AVX2 / AVX-VNNI kernels against the
 * reference (each where the CPU level allows: the suite runs once per
 * level), the activation rounding rule, and argument handling.  Every tolerance is a worst-case float32 bound derived beside
 * its check (u = 2^-24), not a tuned number. */
#include <glib.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "um-cpu-isa.h"
#include "um-dtype.h"
#include "um-gemm.h"
#include "um-half.h"
#include "um-quant.h"
#include "um-test-util.h"

#define U (1.0 / 16777216.0)   /* unit roundoff of float32 */

static const UmDType types[] = {
  UM_DTYPE_Q8_0, UM_DTYPE_Q4_0, UM_DTYPE_Q4_1, UM_DTYPE_Q5_0, UM_DTYPE_Q5_1,
  UM_DTYPE_Q4_K, UM_DTYPE_Q5_K, UM_DTYPE_Q6_K,
};

/* ---- helpers --------------------------------------------------------------- */

static double
rand_normal (GRand *r)
{
  double u1 = g_rand_double_range (r, 1e-12, 1.0);
  double u2 = g_rand_double (r);
  return sqrt (-2.0 * log (u1)) * cos (2.0 * G_PI * u2);
}

static size_t
row_bytes (UmDType t, int64_t k)
{
  uint64_t b = 0;
  g_assert_true (um_dtype_bytes (t, (uint64_t) k, &b));
  return (size_t) b;
}

/* The fast products, each from its CPU level up. */
typedef struct {
  const char *name;
  UmCpuIsa    isa;
  size_t    (*scratch_bytes) (UmDType, int64_t, int64_t, int64_t);
  gboolean  (*product) (UmDType, const void *, int64_t, int64_t, const float *, int64_t, float *,
                        void *, size_t);
} Impl;

static const Impl impls[] = {
  { "vnni", UM_ISA_AVX512_VNNI, um_qgemm_scratch_bytes, um_qgemm_vnni },
  { "avx2", UM_ISA_AVX2, um_qgemm_avx2_scratch_bytes, um_qgemm_avx2 },
};

static gboolean
have (const Impl *im)
{
  return um_cpu_isa () >= im->isa;
}

static gboolean
has_mins (UmDType t)
{
  return t == UM_DTYPE_Q4_1 || t == UM_DTYPE_Q5_1 || t == UM_DTYPE_Q4_K || t == UM_DTYPE_Q5_K;
}

/* The offset b of the weight unit holding element e of a row (w = a c + b;
 * 0 for the symmetric types), read from the blocks like the dequantizer. */
static double
unit_offset (UmDType t, const uint8_t *row, int64_t e)
{
  switch (t)
    {
    case UM_DTYPE_Q4_1:
      return um_f16_to_f32 (((const UmBlockQ4_1 *) row)[e / 32].m);
    case UM_DTYPE_Q5_1:
      return um_f16_to_f32 (((const UmBlockQ5_1 *) row)[e / 32].m);
    case UM_DTYPE_Q4_K:
    case UM_DTYPE_Q5_K:
      {
        const size_t bb = t == UM_DTYPE_Q4_K ? sizeof (UmBlockQ4_K) : sizeof (UmBlockQ5_K);
        const UmBlockQ4_K *b = (const UmBlockQ4_K *) (row + (size_t) (e / 256) * bb);
        uint8_t sc, mn;
        um_quant_get_scale_min_k4 ((int) (e % 256) / 32, b->scales, &sc, &mn);
        return -(double) (um_f16_to_f32 (b->dmin) * (float) mn);
      }
    default:
      return 0.0;
    }
}

/* The documented activation rounding (um-qgemm.c, step 1), written
 * independently: per 32 elements dx = max|x| / 127 in float, q = x * (1/dx)
 * rounded half to even.  Returns the rounded values dx * q (exact in double)
 * and each element's block scale. */
static void
round_activations (const float *x, int64_t n, double *xq, float *dx_of)
{
  for (int64_t b = 0; b < n / 32; b++)
    {
      float amax = 0.0f, d, id;
      for (int i = 0; i < 32; i++)
        amax = fmaxf (amax, fabsf (x[b * 32 + i]));
      d = amax / 127.0f;
      if (!(d >= FLT_MIN))
        d = 0.0f;
      id = d > 0.0f ? 1.0f / d : 0.0f;
      for (int i = 0; i < 32; i++)
        {
          float v = x[b * 32 + i] * id;
          xq[b * 32 + i] = (double) d * (double) rintf (v);
          dx_of[b * 32 + i] = d;
        }
    }
}

typedef struct {
  UmDType  t;
  int64_t  m, n, k;
  float   *x;        /* m x k */
  uint8_t *wbuf;     /* w starts at wbuf + 1: never aligned */
  uint8_t *w;
  float   *wd;       /* reference dequantization, n x k */
  double  *boff;     /* offset b per weight element, n x k */
  double  *xq;       /* rounded activations, m x k */
  float   *dx;       /* their block scales, per element */
} Case;

static void
case_init (Case *c, UmDType t, int64_t m, int64_t n, int64_t k, guint32 seed)
{
  GRand *r = g_rand_new_with_seed (seed);
  const size_t rb = row_bytes (t, k);
  float *wf = g_new (float, (size_t) MAX (n * k, 1));

  c->t = t;
  c->m = m;
  c->n = n;
  c->k = k;
  c->x = g_new (float, (size_t) MAX (m * k, 1));
  c->wbuf = g_malloc ((size_t) n * rb + 1);
  c->w = c->wbuf + 1;
  c->wd = g_new (float, (size_t) MAX (n * k, 1));
  c->boff = g_new (double, (size_t) MAX (n * k, 1));
  c->xq = g_new (double, (size_t) MAX (m * k, 1));
  c->dx = g_new (float, (size_t) MAX (m * k, 1));

  /* Rows with different magnitudes and a mean, so mins and offsets matter. */
  for (int64_t j = 0; j < n; j++)
    {
      double s = 0.02 * (1 + j % 5), mu = (j % 3 == 0) ? 0.01 : 0.0;
      for (int64_t e = 0; e < k; e++)
        wf[j * k + e] = (float) (mu + s * rand_normal (r));
      g_assert_true (um_quant_quantize_row_ref (t, wf + j * k, c->w + (size_t) j * rb, k));
      g_assert_true (um_quant_dequantize_row_ref (t, c->w + (size_t) j * rb, c->wd + j * k, k));
      for (int64_t e = 0; e < k; e++)
        c->boff[j * k + e] = unit_offset (t, c->w + (size_t) j * rb, e);
    }
  /* Activations: mostly normal, with an all-zero block, a tiny block, an
   * outlier and a constant block here and there. */
  for (int64_t i = 0; i < m; i++)
    for (int64_t e = 0; e < k; e++)
      {
        int64_t b = e / 32;
        float v = (float) rand_normal (r);
        if ((i + b) % 7 == 3)
          v = 0.0f;
        else if ((i + b) % 11 == 5)
          v *= 1e-4f;
        else if ((i + b) % 13 == 6)
          v = 0.75f;
        if ((i * 31 + e) % 97 == 0)
          v *= 40.0f;
        c->x[i * k + e] = v;
      }
  for (int64_t i = 0; i < m; i++)
    round_activations (c->x + i * k, k, c->xq + i * k, c->dx + i * k);
  g_free (wf);
  g_rand_free (r);
}

static void
case_clear (Case *c)
{
  g_free (c->x);
  g_free (c->wbuf);
  g_free (c->wd);
  g_free (c->boff);
  g_free (c->xq);
  g_free (c->dx);
}

/* Number of fused multiply-adds per output in the documented combination
 * (um-qgemm.c, step 3): one per unit, two per unit for types with mins. */
static int64_t
n_terms (UmDType t, int64_t k)
{
  if (t == UM_DTYPE_Q6_K)
    return k / 16;
  return has_mins (t) ? 2 * (k / 32) : k / 32;
}

/* Magnitude M = sum_e (|a c_e| + |b_e|) |dx q_e| of output (i, j): it bounds
 * the sum of |terms| of the combination (each term is a P a dx or b dx S,
 * and |P a dx| <= sum |a c| |dx q|, |b dx S| <= sum |b| |dx q|).  With
 * |a c| = |w - b| <= |w| + |b| (w the dequantized weight, good to a few u). */
static double
magnitude (const Case *c, int64_t i, int64_t j)
{
  double s = 0.0;
  for (int64_t e = 0; e < c->k; e++)
    s += (fabs (c->wd[j * c->k + e]) + 2.0 * fabs (c->boff[j * c->k + e])) * fabs (c->xq[i * c->k + e]);
  return s;
}

/* ---- the reference ----------------------------------------------------------- */

static void
check_ref (const Case *c)
{
  const int64_t m = c->m, n = c->n, k = c->k;
  const double T = (double) n_terms (c->t, k);
  float *out = g_new (float, (size_t) MAX (m * n, 1));

  g_assert_true (um_qgemm_ref (c->t, c->w, n, k, c->x, m, out));
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++)
      {
        double e_q = 0.0, e_x = 0.0, round_bound = 0.0;
        const double M = magnitude (c, i, j);
        double tol_q, tol_x;

        for (int64_t e = 0; e < k; e++)
          {
            const double wv = c->wd[j * k + e];
            e_q += wv * c->xq[i * k + e];
            e_x += wv * (double) c->x[i * k + e];
            /* |x - dx q| <= dx (1/2 + 2 * 127 u): half a step, plus the
             * rounding of 1/dx and of x * (1/dx) (each relative u of a
             * value <= 127). */
            round_bound += fabs (wv) * (double) c->dx[i * k + e] * (0.5 + 256.0 * U);
          }
        /* Against the exact product with the rounded activations: the
         * combination is T fmas, error <= gamma_T * sum|terms| (recursive
         * summation, the fma adding exact products) with sum|terms| <=
         * (1 + u) M; the scale products a*dx and dx*S add u M; the
         * dequantized weights are off by at most 2u (|a c| + |b|) each
         * (one rounding of a c, one of the add), another 2u M.  So
         * (T (1 + T u) + 4) u M, with the double sums' own error (k 2^-53
         * relative) far below. */
        tol_q = (T * (1.0 + T * U) + 4.0) * U * M * (1.0 + 1e-6) + 1e-30;
        if (!(fabs ((double) out[i * n + j] - e_q) <= tol_q))
          g_error ("%s m=%" G_GINT64_FORMAT " n=%" G_GINT64_FORMAT " k=%" G_GINT64_FORMAT
                   " out[%" G_GINT64_FORMAT ",%" G_GINT64_FORMAT "]: ref %.9g, exact with rounded x %.9g, "
                   "|diff| %.3g > bound %.3g", um_dtype_name (c->t), m, n, k, i, j,
                   out[i * n + j], e_q, fabs (out[i * n + j] - e_q), tol_q);
        /* Against the exact f32 x: additionally the 8-bit rounding of x,
         * sum_e |w_e| |x_e - dx q_e| <= round_bound (w relative 2u there,
         * absorbed by the 1e-6). */
        tol_x = tol_q + round_bound * (1.0 + 1e-6);
        if (!(fabs ((double) out[i * n + j] - e_x) <= tol_x))
          g_error ("%s m=%" G_GINT64_FORMAT " n=%" G_GINT64_FORMAT " k=%" G_GINT64_FORMAT
                   " out[%" G_GINT64_FORMAT ",%" G_GINT64_FORMAT "]: ref %.9g, exact %.9g, "
                   "|diff| %.3g > bound %.3g", um_dtype_name (c->t), m, n, k, i, j,
                   out[i * n + j], e_x, fabs (out[i * n + j] - e_x), tol_x);
      }
  g_free (out);
}

/* ---- the fast products against the reference ---------------------------------- */

static void
check_fast (const Impl *im, const Case *c, guint *n_same, guint *n_total)
{
  const int64_t m = c->m, n = c->n, k = c->k;
  const double T = (double) n_terms (c->t, k);
  const size_t sb = im->scratch_bytes (c->t, n, k, m);
  float *ref = g_new (float, (size_t) MAX (m * n, 1));
  float *got = g_new (float, (size_t) MAX (m * n, 1));
  float *got2 = g_new (float, (size_t) MAX (m * n, 1));
  uint8_t *scratch = g_malloc (sb + 3);

  g_assert_cmpuint (sb, >, 0);
  g_assert_true (um_qgemm_ref (c->t, c->w, n, k, c->x, m, ref));
  /* The caller's scratch, at an odd address. */
  g_assert_true (im->product (c->t, c->w, n, k, c->x, m, got, scratch + 3, sb));
  /* No scratch, and too little: it allocates its own. */
  g_assert_true (im->product (c->t, c->w, n, k, c->x, m, got2, NULL, 0));
  /* Bit for bit: the scratch only holds the same packed data for the same
   * kernels. */
  g_assert_cmpmem (got, (size_t) (m * n) * sizeof (float), got2, (size_t) (m * n) * sizeof (float));
  g_assert_true (im->product (c->t, c->w, n, k, c->x, m, got2, scratch, sb / 2));
  g_assert_cmpmem (got, (size_t) (m * n) * sizeof (float), got2, (size_t) (m * n) * sizeof (float));

  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++)
      {
        /* The integer parts (P, S) and the rounded factors (a*dx, dx*S)
         * are the same values in both; only the order of the T fused
         * multiply-adds may differ.  Each result is within gamma_T *
         * sum|terms| of the exact sum of those terms, sum|terms| <= (1+u) M,
         * so they differ by at most 2 T (1 + T u) (1 + u) u M. */
        const double M = magnitude (c, i, j);
        const double tol = 2.0 * T * (1.0 + T * U) * (1.0 + U) * U * M * (1.0 + 1e-6) + 1e-30;
        const float a = ref[i * n + j], b = got[i * n + j];

        if (!(fabs ((double) a - (double) b) <= tol))
          g_error ("%s m=%" G_GINT64_FORMAT " n=%" G_GINT64_FORMAT " k=%" G_GINT64_FORMAT
                   " out[%" G_GINT64_FORMAT ",%" G_GINT64_FORMAT "]: %s %.9g, ref %.9g, "
                   "|diff| %.3g > bound %.3g", um_dtype_name (c->t), m, n, k, i, j, im->name,
                   b, a, fabs ((double) a - b), tol);
        *n_same += memcmp (&a, &b, sizeof a) == 0;
        (*n_total)++;
      }
  g_free (ref);
  g_free (got);
  g_free (got2);
  g_free (scratch);
}

/* Shapes: every m and n of the lists, k multiples of the block size below,
 * at, and past the kernel's K piece (1024 codes), with short last pieces
 * (32, 256) too. */
static const int64_t ms[] = { 1, 3, 16, 17, 48, 96, 130 };
static const int64_t ns[] = { 1, 7, 8, 9, 64, 300 };
static const int64_t ks32[] = { 32, 96, 544, 1056, 2080 };
static const int64_t ks256[] = { 256, 768, 1280, 1024 };

static void
for_each_shape (UmDType t, void (*fn) (const Case *, gpointer), gpointer data)
{
  const gboolean kq = t == UM_DTYPE_Q4_K || t == UM_DTYPE_Q5_K || t == UM_DTYPE_Q6_K;
  const int64_t *ks = kq ? ks256 : ks32;
  const guint nk = kq ? G_N_ELEMENTS (ks256) : G_N_ELEMENTS (ks32);

  for (guint c = 0; c < G_N_ELEMENTS (ms) + 2; c++)
    {
      Case cs;
      int64_t m = ms[c % G_N_ELEMENTS (ms)], n = ns[c % G_N_ELEMENTS (ns)], k = ks[c % nk];
      if (c == G_N_ELEMENTS (ms))
        m = 96, n = 300, k = ks[nk - 2];   /* full panels, tails, two pieces */
      else if (c == G_N_ELEMENTS (ms) + 1)
        m = 130, n = 33, k = ks[0];
      case_init (&cs, t, m, n, k, 1234 + c * 17 + (guint) t);
      fn (&cs, data);
      case_clear (&cs);
    }
}

static void
ref_case (const Case *c, gpointer data)
{
  check_ref (c);
}

static void
test_ref (gconstpointer data)
{
  for_each_shape (GPOINTER_TO_INT (data), ref_case, NULL);
}

typedef struct {
  const Impl *im;
  guint same, total;
} Counts;

static void
fast_case (const Case *c, gpointer data)
{
  Counts *n = data;
  check_fast (n->im, c, &n->same, &n->total);
}

typedef struct {
  const Impl *im;
  UmDType t;
} FastTest;

static void
test_fast (gconstpointer data)
{
  const FastTest *ft = data;
  Counts n = { ft->im, 0, 0 };

  if (!have (ft->im))
    {
      g_test_skip ("the CPU (or UM_CPU_ISA) is below this product's level");
      return;
    }
  for_each_shape (ft->t, fast_case, &n);
  g_test_message ("%s (%s at %s): %u of %u outputs bit-identical to the reference",
                  um_dtype_name (ft->t), ft->im->name, um_cpu_isa_name (um_cpu_isa ()), n.same, n.total);
}

/* ---- the activation rounding rule ------------------------------------------ */

/* A Q8_0 weight picking element 1 (code 1, d = 1) reads back the rounded
 * activation: with max |x| = 127, dx = 1 and q = x rounded half to even.
 * Exact comparisons: every step is on small integers and 1.0. */
static void
test_rounding_rule (void)
{
  static const struct { float x; float q; } cases[] = {
    { 2.5f, 2.0f }, { 3.5f, 4.0f }, { -2.5f, -2.0f }, { 0.49f, 0.0f }, { 126.5f, 126.0f },
    { -127.0f, -127.0f },
  };
  UmBlockQ8_0 blk;
  float x[32], out = -1.0f;

  memset (&blk, 0, sizeof blk);
  blk.d = um_f32_to_f16 (1.0f);
  blk.qs[1] = 1;
  for (guint c = 0; c < G_N_ELEMENTS (cases); c++)
    {
      for (int i = 0; i < 32; i++)
        x[i] = 0.0f;
      x[0] = 127.0f;
      x[1] = cases[c].x;
      g_assert_true (um_qgemm_ref (UM_DTYPE_Q8_0, &blk, 1, 32, x, 1, &out));
      g_assert_cmpfloat (out, ==, cases[c].q);
      for (guint i = 0; i < G_N_ELEMENTS (impls); i++)
        if (have (&impls[i]))
          {
            out = -1.0f;
            g_assert_true (impls[i].product (UM_DTYPE_Q8_0, &blk, 1, 32, x, 1, &out, NULL, 0));
            g_assert_cmpfloat (out, ==, cases[c].q);
          }
    }

  /* A block below 127 * FLT_MIN rounds to zero; the next block still counts. */
  {
    UmBlockQ8_0 w2[2];
    float x2[64];
    memset (w2, 0, sizeof w2);
    w2[0].d = w2[1].d = um_f32_to_f16 (1.0f);
    for (int i = 0; i < 32; i++)
      w2[0].qs[i] = w2[1].qs[i] = 1;
    for (int i = 0; i < 64; i++)
      x2[i] = i < 32 ? 1e-37f : 1.0f;
    g_assert_true (um_qgemm_ref (UM_DTYPE_Q8_0, w2, 1, 64, x2, 1, &out));
    /* Exact: block 0 adds an exact 0 (dx = 0), block 1 is one correctly
     * rounded fma, fl (4064 · fl (1/127)) = 32 (the exact product is
     * 32 − 1.2e-7, within half an ulp of 32), the same on every IEEE CPU. */
    g_assert_cmpfloat (out, ==, 32.0f);
    for (guint i = 0; i < G_N_ELEMENTS (impls); i++)
      if (have (&impls[i]))
        {
          g_assert_true (impls[i].product (UM_DTYPE_Q8_0, w2, 1, 64, x2, 1, &out, NULL, 0));
          g_assert_cmpfloat (out, ==, 32.0f);
        }
  }
}

/* ---- arguments ------------------------------------------------------------- */

typedef gboolean (*ProductFn) (UmDType, const void *, int64_t, int64_t, const float *, int64_t, float *);

static gboolean
vnni_fn (UmDType t, const void *w, int64_t n, int64_t k, const float *x, int64_t m, float *out)
{
  return um_qgemm_vnni (t, w, n, k, x, m, out, NULL, 0);
}

static gboolean
avx2_fn (UmDType t, const void *w, int64_t n, int64_t k, const float *x, int64_t m, float *out)
{
  return um_qgemm_avx2 (t, w, n, k, x, m, out, NULL, 0);
}

static void
check_untouched (const float *out, size_t len)
{
  for (size_t i = 0; i < len; i++)
    g_assert_cmpfloat (out[i], ==, 42.0f);
}

static void
check_args_fn (ProductFn fn, gboolean works)
{
  uint8_t w[4 * 210 * 2];
  float x[4 * 512], out[16];
  const size_t len = G_N_ELEMENTS (out);

  memset (w, 0, sizeof w);
  for (guint i = 0; i < G_N_ELEMENTS (x); i++)
    x[i] = (float) i;

#define REFUSED(call)                                      \
  G_STMT_START {                                           \
    for (size_t i_ = 0; i_ < len; i_++)                    \
      out[i_] = 42.0f;                                     \
    g_assert_false (call);                                 \
    check_untouched (out, len);                            \
  } G_STMT_END

  REFUSED (fn (UM_DTYPE_F32, w, 2, 32, x, 2, out));
  REFUSED (fn (UM_DTYPE_F16, w, 2, 32, x, 2, out));
  REFUSED (fn (UM_DTYPE_I32, w, 2, 32, x, 2, out));
  REFUSED (fn (UM_DTYPE_N_TYPES, w, 2, 32, x, 2, out));
  REFUSED (fn (UM_DTYPE_Q4_0, w, -1, 32, x, 2, out));
  REFUSED (fn (UM_DTYPE_Q4_0, w, 2, -32, x, 2, out));
  REFUSED (fn (UM_DTYPE_Q4_0, w, 2, 32, x, -1, out));
  REFUSED (fn (UM_DTYPE_Q4_0, w, 2, 16, x, 2, out));     /* partial block */
  REFUSED (fn (UM_DTYPE_Q4_K, w, 2, 32, x, 2, out));     /* partial super-block */
  REFUSED (fn (UM_DTYPE_Q6_K, w, 2, 128, x, 2, out));
  REFUSED (fn (UM_DTYPE_Q4_0, w, (int64_t) G_MAXINT + 1, 32, x, 1, out));
  REFUSED (fn (UM_DTYPE_Q4_0, w, 1, ((int64_t) G_MAXINT + 1) * 32, x, 1, out));
  REFUSED (fn (UM_DTYPE_Q4_0, w, 1, 32, x, (int64_t) G_MAXINT + 1, out));
  REFUSED (fn (UM_DTYPE_Q4_0, NULL, 2, 32, x, 2, out));
  REFUSED (fn (UM_DTYPE_Q4_0, w, 2, 32, NULL, 2, out));
  g_assert_false (fn (UM_DTYPE_Q4_0, w, 2, 32, x, 2, NULL));

  for (guint i = 0; i < G_N_ELEMENTS (types); i++)
    {
      const UmDType t = types[i];
      const int64_t bk = um_dtype_info (t)->block_elems;

      if (!works)
        {
          /* Below the product's level everything is refused, out untouched. */
          REFUSED (fn (t, w, 2, bk, x, 2, out));
          REFUSED (fn (t, w, 2, 0, x, 2, out));
          continue;
        }
      /* Empty products succeed without touching anything. */
      for (size_t j = 0; j < len; j++)
        out[j] = 42.0f;
      g_assert_true (fn (t, NULL, 0, bk, NULL, 3, NULL));
      g_assert_true (fn (t, NULL, 3, bk, NULL, 0, NULL));
      g_assert_true (fn (t, w, 0, bk, x, 3, out));
      check_untouched (out, len);
      /* k = 0: zeros, and w / x need not exist. */
      for (size_t j = 0; j < len; j++)
        out[j] = 42.0f;
      g_assert_true (fn (t, NULL, 3, 0, NULL, 4, out));
      for (size_t j = 0; j < 12; j++)
        g_assert_cmpfloat (out[j], ==, 0.0f);
      for (size_t j = 12; j < len; j++)
        g_assert_cmpfloat (out[j], ==, 42.0f);
      /* All-zero blocks (d = 0) give exact zeros. */
      for (size_t j = 0; j < len; j++)
        out[j] = 42.0f;
      g_assert_true (fn (t, w, 2, 2 * bk, x, 2, out));
      for (size_t j = 0; j < 4; j++)
        g_assert_cmpfloat (fabsf (out[j]), ==, 0.0f);
    }
#undef REFUSED
}

static void
test_args (void)
{
  check_args_fn (um_qgemm_ref, TRUE);
  check_args_fn (vnni_fn, have (&impls[0]));
  check_args_fn (avx2_fn, have (&impls[1]));

  for (guint i = 0; i < G_N_ELEMENTS (types); i++)
    g_assert_true (um_qgemm_supported_type (types[i]));
  g_assert_false (um_qgemm_supported_type (UM_DTYPE_F32));
  g_assert_false (um_qgemm_supported_type (UM_DTYPE_BF16));
  g_assert_false (um_qgemm_supported_type (UM_DTYPE_I32));
  g_assert_cmpuint (um_qgemm_scratch_bytes (UM_DTYPE_F32, 8, 32, 8), ==, 0);
  g_assert_cmpuint (um_qgemm_scratch_bytes (UM_DTYPE_Q4_K, 8, 32, 8), ==, 0);
  g_assert_cmpuint (um_qgemm_scratch_bytes (UM_DTYPE_Q4_K, 8, 256, 8), >, 0);
}

/* The bounds hold for any values: every test seed, every type, one small
 * case through the reference and (where the CPU has it) VNNI; the shapes
 * are test_ref's and test_vnni's. */
static void
test_values (void)
{
  guint32 seed;
  Counts n = { NULL, 0, 0 };

  for (guint it = 0; um_test_seed_next (&it, &seed);)
    for (guint i = 0; i < G_N_ELEMENTS (types); i++)
      {
        const gboolean kq = types[i] == UM_DTYPE_Q4_K || types[i] == UM_DTYPE_Q5_K || types[i] == UM_DTYPE_Q6_K;
        Case cs;

        case_init (&cs, types[i], 5, 9, kq ? 512 : 96, seed);
        check_ref (&cs);
        for (guint j = 0; j < G_N_ELEMENTS (impls); j++)
          if (have (&impls[j]))
            check_fast (&impls[j], &cs, &n.same, &n.total);
        case_clear (&cs);
      }
}

/* Q8_0's extreme codes (-128 and 127) against activations of +-127 (every
 * block's max |x| is 127, so dx = 1 and q = x): each product is 16256 or
 * 16129 in magnitude, so a kernel that let two steps' int16 pair sums
 * (2 · 128 · 127 each) add up before widening them, or saturated one,
 * would be off by thousands.  Exact comparisons: the scales are 1, and
 * every partial sum is an integer below 17 · 32 · 16256 < 2^24, so each
 * float operation of every product is exact.  16 + 3 rows (a full panel
 * and a tail), k = 544 (past the 512-code K piece of the int16 kernel and
 * the VNNI one's 1024 in one go: the short last piece). */
static void
test_q8_extremes (void)
{
  const int64_t n = 19, k = 544, m = 5, nb = k / 32;
  UmBlockQ8_0 *w = g_new0 (UmBlockQ8_0, n * nb);
  float *x = g_new (float, m * k), *out = g_new (float, m * n), *ref = g_new (float, m * n);

  for (int64_t j = 0; j < n; j++)
    for (int64_t b = 0; b < nb; b++)
      {
        UmBlockQ8_0 *blk = &w[j * nb + b];
        blk->d = um_f32_to_f16 (1.0f);
        for (int e = 0; e < 32; e++)
          {
            /* Rows of -128, of 127, and mixtures. */
            const int v = j % 3 == 0 ? -128 : j % 3 == 1 ? 127 : ((e * 7 + b + j) % 4 < 2 ? -128 : 127);
            blk->qs[e] = (int8_t) v;
          }
      }
  for (int64_t i = 0; i < m; i++)
    for (int64_t e = 0; e < k; e++)
      /* Token 0 all -127 (every product of a -128 row positive), the rest mixed. */
      x[i * k + e] = i == 0 ? -127.0f : ((e * 5 + i) % 3 == 0 ? 127.0f : -127.0f);

  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++)
      {
        double sum = 0.0;
        for (int64_t e = 0; e < k; e++)
          sum += (double) w[j * nb + e / 32].qs[e % 32] * (double) x[i * k + e];
        ref[i * n + j] = (float) sum;
      }
  g_assert_true (um_qgemm_ref (UM_DTYPE_Q8_0, w, n, k, x, m, out));
  for (int64_t i = 0; i < m * n; i++)
    g_assert_cmpfloat (out[i], ==, ref[i]);
  for (guint im = 0; im < G_N_ELEMENTS (impls); im++)
    if (have (&impls[im]))
      {
        for (int64_t i = 0; i < m * n; i++)
          out[i] = -1.0f;
        g_assert_true (impls[im].product (UM_DTYPE_Q8_0, w, n, k, x, m, out, NULL, 0));
        for (int64_t i = 0; i < m * n; i++)
          if (out[i] != ref[i])
            g_error ("%s at %s: out[%" G_GINT64_FORMAT "] = %.1f, exact %.1f", impls[im].name,
                     um_cpu_isa_name (um_cpu_isa ()), i, out[i], ref[i]);
      }
  g_free (w);
  g_free (x);
  g_free (out);
  g_free (ref);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/qgemm/args", test_args);
  g_test_add_func ("/qgemm/rounding-rule", test_rounding_rule);
  g_test_add_func ("/qgemm/values", test_values);
  g_test_add_func ("/qgemm/q8_0-extremes", test_q8_extremes);
  static FastTest fast[G_N_ELEMENTS (impls)][G_N_ELEMENTS (types)];
  for (guint i = 0; i < G_N_ELEMENTS (types); i++)
    {
      char *p = g_strdup_printf ("/qgemm/ref/%s", um_dtype_name (types[i]));
      g_test_add_data_func (p, GINT_TO_POINTER (types[i]), test_ref);
      g_free (p);
      for (guint j = 0; j < G_N_ELEMENTS (impls); j++)
        {
          fast[j][i] = (FastTest) { &impls[j], types[i] };
          p = g_strdup_printf ("/qgemm/%s/%s", impls[j].name, um_dtype_name (types[i]));
          g_test_add_data_func (p, &fast[j][i], test_fast);
          g_free (p);
        }
    }
  return g_test_run ();
}

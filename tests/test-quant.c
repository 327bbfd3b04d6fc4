/* test-quant.c — llama.cpp block formats: layouts, reference and fast
 * (de)quantization, direct dot products, the weight matrix product, and
 * agreement with GGUF files written by llama.cpp. */
#include <glib.h>
#include <math.h>
#include <string.h>

#include "um-dtype.h"
#include "um-half.h"
#include "um-quant.h"
#include "um-test-util.h"

static const UmDType quant_types[] = {
  UM_DTYPE_Q8_0, UM_DTYPE_Q4_0, UM_DTYPE_Q4_1, UM_DTYPE_Q5_0, UM_DTYPE_Q5_1,
  UM_DTYPE_Q4_K, UM_DTYPE_Q5_K, UM_DTYPE_Q6_K,
};

static const UmDType all_types[] = {
  UM_DTYPE_F32, UM_DTYPE_F16, UM_DTYPE_BF16,
  UM_DTYPE_Q8_0, UM_DTYPE_Q4_0, UM_DTYPE_Q4_1, UM_DTYPE_Q5_0, UM_DTYPE_Q5_1,
  UM_DTYPE_Q4_K, UM_DTYPE_Q5_K, UM_DTYPE_Q6_K,
};

/* ---- helpers ------------------------------------------------------------- */

static double
rand_normal (GRand *r)
{
  double u1 = g_rand_double_range (r, 1e-12, 1.0);
  double u2 = g_rand_double (r);
  return sqrt (-2.0 * log (u1)) * cos (2.0 * G_PI * u2);
}

static void
fill_normal (GRand *r, float *x, int64_t n, double sigma)
{
  for (int64_t i = 0; i < n; i++)
    x[i] = (float) (sigma * rand_normal (r));
}

static void
fill_uniform (GRand *r, float *x, int64_t n, double lo, double hi)
{
  for (int64_t i = 0; i < n; i++)
    x[i] = (float) g_rand_double_range (r, lo, hi);
}

static size_t
type_bytes (UmDType t, int64_t n)
{
  uint64_t bytes = 0;
  g_assert_true (um_dtype_bytes (t, (uint64_t) n, &bytes));
  return (size_t) bytes;
}

static double
rel_rms (const float *ref, const float *got, int64_t n)
{
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++)
    {
      double e = (double) got[i] - ref[i];
      num += e * e;
      den += (double) ref[i] * ref[i];
    }
  return den > 0 ? sqrt (num / den) : sqrt (num);
}

/* Overwrites every f16 scale field of n_blocks random-byte blocks with a
 * finite half, so bitwise comparisons do not meet NaN payloads (which the
 * F16C instructions and the portable conversion quiet differently). */
static void
sanitize_scales (GRand *r, UmDType t, uint8_t *p, int64_t nb)
{
  const UmDTypeInfo *info = um_dtype_info (t);
  for (int64_t i = 0; i < nb; i++, p += info->block_bytes)
    {
      int offs[2] = { -1, -1 };
      switch (t)
        {
        case UM_DTYPE_Q8_0: case UM_DTYPE_Q4_0: case UM_DTYPE_Q5_0:
          offs[0] = 0; break;
        case UM_DTYPE_Q4_1: case UM_DTYPE_Q5_1: case UM_DTYPE_Q4_K: case UM_DTYPE_Q5_K:
          offs[0] = 0; offs[1] = 2; break;
        case UM_DTYPE_Q6_K:
          offs[0] = 208; break;
        default:
          break;
        }
      for (int k = 0; k < 2; k++)
        if (offs[k] >= 0)
          {
            uint16_t h = um_f32_to_f16 ((float) (rand_normal (r) * 0.01));
            memcpy (p + offs[k], &h, 2);
          }
    }
}

/* ---- layouts --------------------------------------------------------------- */

static void
test_block_sizes (void)
{
  static const struct { UmDType t; size_t size; guint elems; } cases[] = {
    { UM_DTYPE_Q8_0, sizeof (UmBlockQ8_0), UM_QK8_0 },
    { UM_DTYPE_Q4_0, sizeof (UmBlockQ4_0), UM_QK4_0 },
    { UM_DTYPE_Q4_1, sizeof (UmBlockQ4_1), UM_QK4_1 },
    { UM_DTYPE_Q5_0, sizeof (UmBlockQ5_0), UM_QK5_0 },
    { UM_DTYPE_Q5_1, sizeof (UmBlockQ5_1), UM_QK5_1 },
    { UM_DTYPE_Q4_K, sizeof (UmBlockQ4_K), UM_QK_K },
    { UM_DTYPE_Q5_K, sizeof (UmBlockQ5_K), UM_QK_K },
    { UM_DTYPE_Q6_K, sizeof (UmBlockQ6_K), UM_QK_K },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      const UmDTypeInfo *info = um_dtype_info (cases[i].t);
      g_assert_nonnull (info);
      g_assert_cmpuint (info->block_bytes, ==, cases[i].size);
      g_assert_cmpuint (info->block_elems, ==, cases[i].elems);
      g_assert_true (info->quantized);
      g_assert_cmpuint (G_ALIGNOF (UmBlockQ4_K), ==, 1);
    }
  g_assert_cmpuint (sizeof (UmBlockQ8_0), ==, 34);
  g_assert_cmpuint (sizeof (UmBlockQ4_0), ==, 18);
  g_assert_cmpuint (sizeof (UmBlockQ4_1), ==, 20);
  g_assert_cmpuint (sizeof (UmBlockQ5_0), ==, 22);
  g_assert_cmpuint (sizeof (UmBlockQ5_1), ==, 24);
  g_assert_cmpuint (sizeof (UmBlockQ4_K), ==, 144);
  g_assert_cmpuint (sizeof (UmBlockQ5_K), ==, 176);
  g_assert_cmpuint (sizeof (UmBlockQ6_K), ==, 210);
  g_assert_cmpuint (sizeof (UmBlockQ8_K), ==, 292);
  g_assert_cmpuint (G_STRUCT_OFFSET (UmBlockQ5_1, qh), ==, 4);
  g_assert_cmpuint (G_STRUCT_OFFSET (UmBlockQ5_K, qh), ==, 16);
  g_assert_cmpuint (G_STRUCT_OFFSET (UmBlockQ6_K, scales), ==, 192);
  g_assert_cmpuint (G_STRUCT_OFFSET (UmBlockQ6_K, d), ==, 208);
}

/* Hand-made blocks with known values pin the element order. The values are
 * compared exactly: scales 0.5 and 1 (exact in f16), small integer codes,
 * mins and sub-scales, so every product and difference is exact. */
static void
test_known_blocks (void)
{
  float y[256];

  {
    UmBlockQ4_0 b;
    b.d = um_f32_to_f16 (0.5f);
    for (int j = 0; j < 16; j++)
      b.qs[j] = (uint8_t) ((j & 0x0f) | ((15 - j) << 4));
    g_assert_true (um_quant_dequantize_row_ref (UM_DTYPE_Q4_0, &b, y, 32));
    for (int j = 0; j < 16; j++)
      {
        g_assert_cmpfloat (y[j], ==, 0.5f * (j - 8));
        g_assert_cmpfloat (y[j + 16], ==, 0.5f * (7 - j));
      }
  }
  {
    UmBlockQ5_0 b;
    uint32_t qh = 0x80000001u;   /* element 0 and element 31 get bit 4 */
    b.d = um_f32_to_f16 (1.0f);
    memcpy (b.qh, &qh, 4);
    memset (b.qs, 0, sizeof b.qs);
    g_assert_true (um_quant_dequantize_row_ref (UM_DTYPE_Q5_0, &b, y, 32));
    g_assert_cmpfloat (y[0], ==, 0.0f);
    g_assert_cmpfloat (y[1], ==, -16.0f);
    g_assert_cmpfloat (y[31], ==, 0.0f);
    g_assert_cmpfloat (y[16], ==, -16.0f);
  }
  {
    /* Q4_K: sub-block j gets scale j+1 and min j; all codes 1, so element
     * value = (j+1) * 1 - j = 1 for every sub-block, but the sub-block of
     * each element is then checked with codes set to the element's index
     * inside its group. */
    UmBlockQ4_K b;
    int ls[8], lm[8];
    memset (&b, 0, sizeof b);
    b.d = um_f32_to_f16 (1.0f);
    b.dmin = um_f32_to_f16 (1.0f);
    for (int j = 0; j < 8; j++)
      {
        ls[j] = 40 + j;   /* > 15 so the top bits are exercised */
        lm[j] = 20 + 5 * j;
      }
    for (int j = 0; j < 8; j++)
      {
        if (j < 4)
          {
            b.scales[j] = (uint8_t) ls[j];
            b.scales[j + 4] = (uint8_t) lm[j];
          }
        else
          {
            b.scales[j + 4] = (uint8_t) ((ls[j] & 15) | ((lm[j] & 15) << 4));
            b.scales[j - 4] |= (uint8_t) ((ls[j] >> 4) << 6);
            b.scales[j] |= (uint8_t) ((lm[j] >> 4) << 6);
          }
      }
    for (int j = 0; j < 8; j++)
      {
        uint8_t sc, m;
        um_quant_get_scale_min_k4 (j, b.scales, &sc, &m);
        g_assert_cmpint (sc, ==, ls[j]);
        g_assert_cmpint (m, ==, lm[j]);
      }
    for (int g = 0; g < 4; g++)
      for (int l = 0; l < 32; l++)
        b.qs[32 * g + l] = (uint8_t) ((l & 15) | ((15 - (l & 15)) << 4));
    g_assert_true (um_quant_dequantize_row_ref (UM_DTYPE_Q4_K, &b, y, 256));
    for (int e = 0; e < 256; e++)
      {
        int sub = e / 32, l = e % 32;
        int code = (sub % 2 == 0) ? (l & 15) : 15 - (l & 15);
        g_assert_cmpfloat (y[e], ==, (float) (ls[sub] * code - lm[sub]));
      }
  }
  {
    /* Q6_K: element e gets code (e % 64) and scale (e / 16 + 1). */
    UmBlockQ6_K b;
    memset (&b, 0, sizeof b);
    b.d = um_f32_to_f16 (1.0f);
    for (int j = 0; j < 16; j++)
      b.scales[j] = (int8_t) (j + 1);
    for (int e = 0; e < 256; e++)
      {
        int h = e / 128, r = e % 128, l = r % 32, quarter = r / 32;
        int code = e % 64;
        uint8_t *ql = b.ql + 64 * h + l + ((quarter & 1) ? 32 : 0);
        *ql |= (uint8_t) ((code & 15) << ((quarter & 2) ? 4 : 0));
        b.qh[32 * h + l] |= (uint8_t) ((code >> 4) << (2 * quarter));
      }
    g_assert_true (um_quant_dequantize_row_ref (UM_DTYPE_Q6_K, &b, y, 256));
    for (int e = 0; e < 256; e++)
      g_assert_cmpfloat (y[e], ==, (float) ((e / 16 + 1) * ((e % 64) - 32)));
  }
}

/* ---- round trips ----------------------------------------------------------- */

typedef struct {
  UmDType t;
  double  normal_rms;    /* bound on relative RMS error, Gaussian data */
  double  uniform_rms;   /* same, uniform [-1, 1] */
  double  block_max;     /* 32-element types: bound on max |error| per block,
                            as a fraction of the block's max |x| (symmetric)
                            or range (with min); 0 = not checked */
} RoundTripCase;

/* Relative RMS errors these quantizers reach on Gaussian data (uniform is
 * lower), with ggml's algorithms: F16 2.1e-4, BF16 1.7e-3, Q8_0 0.0053,
 * Q4_0 0.085, Q4_1 0.078, Q5_0 0.044, Q5_1 0.038, Q4_K 0.072, Q5_K 0.036,
 * Q6_K 0.018 (printed with --verbose).  The bounds leave ~40% headroom, so a
 * broken element order or scale unpacking (errors of order 1) fails them
 * while a different but reasonable quantizer (such as the one that made the
 * test GGUFs) passes. */
static const RoundTripCase round_trip_cases[] = {
  { UM_DTYPE_F32,  0.0,     0.0,     0 },
  { UM_DTYPE_F16,  3.0e-4,  3.0e-4,  0 },
  { UM_DTYPE_BF16, 2.5e-3,  2.5e-3,  0 },
  { UM_DTYPE_Q8_0, 0.0075,  0.0075,  0.5 / 127 + 0.002 },
  { UM_DTYPE_Q4_0, 0.125,   0.125,   1.0 / 8 + 0.002 },
  { UM_DTYPE_Q4_1, 0.11,    0.11,    0.5 / 15 + 0.002 },
  { UM_DTYPE_Q5_0, 0.062,   0.062,   1.0 / 16 + 0.002 },
  { UM_DTYPE_Q5_1, 0.055,   0.055,   0.5 / 31 + 0.002 },
  { UM_DTYPE_Q4_K, 0.11,    0.11,    0 },
  { UM_DTYPE_Q5_K, 0.055,   0.055,   0 },
  { UM_DTYPE_Q6_K, 0.03,    0.03,    0 },
};

static void
check_round_trip (const RoundTripCase *c, const char *what, const float *x, int64_t n,
                  double bound)
{
  size_t qb = type_bytes (c->t, n);
  uint8_t *q = g_malloc0 (qb);
  float *y = g_new (float, n);
  double err;

  g_assert_true (um_quant_quantize_row_ref (c->t, x, q, n));
  g_assert_true (um_quant_dequantize_row_ref (c->t, q, y, n));
  for (int64_t i = 0; i < n; i++)
    g_assert_true (isfinite (y[i]));
  err = rel_rms (x, y, n);
  g_test_message ("%-5s %-9s rel. RMS error %.5f (bound %.4f)", um_dtype_name (c->t), what, err, bound);
  g_assert_cmpfloat (err, <=, bound);

  if (c->block_max > 0)
    {
      gboolean with_min = c->t == UM_DTYPE_Q4_1 || c->t == UM_DTYPE_Q5_1;
      for (int64_t b = 0; b < n / 32; b++)
        {
          float lo = x[32 * b], hi = x[32 * b], amax = 0, emax = 0;
          for (int j = 0; j < 32; j++)
            {
              float v = x[32 * b + j];
              lo = MIN (lo, v);
              hi = MAX (hi, v);
              amax = MAX (amax, fabsf (v));
              emax = MAX (emax, fabsf (y[32 * b + j] - v));
            }
          float scale = with_min ? hi - lo : amax;
          /* the absolute part covers f16 rounding of an offset m */
          g_assert_cmpfloat (emax, <=, c->block_max * scale + fabsf (lo) * 1e-3f + 1e-30f);
        }
    }
  g_free (q);
  g_free (y);
}

static void
test_round_trip (GRand *r, guint seed_index)
{
  const int64_t n = 8192;
  float *x = g_new (float, n);

  for (guint ci = 0; ci < G_N_ELEMENTS (round_trip_cases); ci++)
    {
      const RoundTripCase *c = &round_trip_cases[ci];
      size_t qb = type_bytes (c->t, n);
      uint8_t *q = g_malloc0 (qb);
      float *y = g_new (float, n);

      fill_normal (r, x, n, 1.0);
      check_round_trip (c, "normal", x, n, c->normal_rms);
      fill_normal (r, x, n, 0.02);   /* weight-like scale */
      check_round_trip (c, "normal/50", x, n, c->normal_rms);
      fill_uniform (r, x, n, -1.0, 1.0);
      check_round_trip (c, "uniform", x, n, c->uniform_rms);
      fill_uniform (r, x, n, 0.5, 1.5);   /* all positive: min/offset path */
      check_round_trip (c, "uniform+", x, n, c->uniform_rms);

      /* all zero: exactly zero back (a zero scale times any code) */
      memset (x, 0, (size_t) n * sizeof (float));
      g_assert_true (um_quant_quantize_row_ref (c->t, x, q, n));
      g_assert_true (um_quant_dequantize_row_ref (c->t, q, y, n));
      for (int64_t i = 0; i < n; i++)
        g_assert_cmpfloat (y[i], ==, 0.0f);

      /* constant rows: only the f16 / bf16 rounding of the scale is lost
       * (kept above f16 subnormal scales, where more of it is lost) */
      static const float constants[] = { 0.37f, -2.5f, 0.01f, -0.05f };
      for (guint k = 0; k < G_N_ELEMENTS (constants); k++)
        {
          for (int64_t i = 0; i < n; i++)
            x[i] = constants[k];
          g_assert_true (um_quant_quantize_row_ref (c->t, x, q, n));
          g_assert_true (um_quant_dequantize_row_ref (c->t, q, y, n));
          for (int64_t i = 0; i < n; i++)
            g_assert_cmpfloat (fabsf (y[i] - x[i]), <=, fabsf (x[i]) * 5e-3f);
        }

      /* one huge outlier: it survives, and super-blocks without it do not
       * care */
      fill_normal (r, x, n, 1.0);
      x[300] = 1000.0f;
      g_assert_true (um_quant_quantize_row_ref (c->t, x, q, n));
      g_assert_true (um_quant_dequantize_row_ref (c->t, q, y, n));
      for (int64_t i = 0; i < n; i++)
        g_assert_true (isfinite (y[i]));
      g_assert_cmpfloat (fabsf (y[300] - 1000.0f), <=, 1000.0f * 0.05f);
      g_assert_cmpfloat (rel_rms (x + 512, y + 512, n - 512), <=, c->normal_rms);

      g_free (q);
      g_free (y);
    }
  g_free (x);
}

static void
test_bad_input (void)
{
  float x[64] = { 0 }, y[64];
  uint8_t q[512];

  g_assert_false (um_quant_quantize_row_ref (UM_DTYPE_Q4_0, x, q, 31));
  g_assert_false (um_quant_quantize_row_ref (UM_DTYPE_Q4_K, x, q, 64));
  g_assert_false (um_quant_quantize_row_ref (UM_DTYPE_I32, x, q, 32));
  g_assert_false (um_quant_quantize_row_ref ((UmDType) 99, x, q, 32));
  g_assert_false (um_quant_quantize_row_ref (UM_DTYPE_Q8_0, x, q, -32));
  g_assert_false (um_quant_dequantize_row_ref (UM_DTYPE_Q6_K, q, y, 32));
  g_assert_false (um_quant_dequantize_row (UM_DTYPE_Q5_1, q, y, 33));
  g_assert_false (um_quant_dequantize_row (UM_DTYPE_I32, q, y, 32));
  g_assert_false (um_quant_dequantize_row (UM_DTYPE_Q8_0, NULL, y, 32));
  g_assert_true (um_quant_dequantize_row (UM_DTYPE_Q8_0, NULL, NULL, 0));
  g_assert_true (isnan (um_quant_vec_dot_q8 (UM_DTYPE_F16, q, q, 32)));
  g_assert_true (isnan (um_quant_vec_dot_q8 (UM_DTYPE_Q4_K, q, q, 32)));
  g_assert_cmpuint (um_quant_q8_row_bytes (UM_DTYPE_F32, 64), ==, 0);
  g_assert_cmpuint (um_quant_q8_row_bytes (UM_DTYPE_Q4_0, 48), ==, 0);
  g_assert_cmpuint (um_quant_q8_row_bytes (UM_DTYPE_Q4_0, 64), ==, 2 * sizeof (UmBlockQ8_0));
  g_assert_cmpuint (um_quant_q8_row_bytes (UM_DTYPE_Q6_K, 512), ==, 2 * sizeof (UmBlockQ8_K));
  g_assert_false (um_quant_quantize_row_q8 (UM_DTYPE_Q5_K, x, q, 64));
  g_assert_false (um_quant_matmul (UM_DTYPE_Q4_0, q, 2, 48, x, 1, y, NULL, 0));
  g_assert_false (um_quant_matmul (UM_DTYPE_I32, q, 2, 32, x, 1, y, NULL, 0));
  g_assert_false (um_quant_matmul (UM_DTYPE_Q4_0, q, -1, 32, x, 1, y, NULL, 0));
  g_assert_false (um_quant_matmul (UM_DTYPE_Q4_0, NULL, 2, 32, x, 1, y, NULL, 0));
  g_assert_false (um_quant_matmul_q8 (UM_DTYPE_BF16, q, 2, 32, x, 1, y));

  /* non-finite input never crashes (UBSan checks the float->int casts) */
  for (int i = 0; i < 64; i++)
    x[i] = (i % 3 == 0) ? NAN : (i % 3 == 1 ? INFINITY : -1e38f);
  for (guint i = 0; i < G_N_ELEMENTS (quant_types); i++)
    {
      int64_t n = um_dtype_info (quant_types[i])->block_elems == 256 ? 0 : 64;
      g_assert_true (um_quant_quantize_row_ref (quant_types[i], x, q, n));
    }
  {
    float big[256];
    for (int i = 0; i < 256; i++)
      big[i] = (i % 5 == 0) ? NAN : (i % 5 == 1 ? -INFINITY : 3e38f);
    g_assert_true (um_quant_quantize_row_ref (UM_DTYPE_Q4_K, big, q, 256));
    g_assert_true (um_quant_quantize_row_ref (UM_DTYPE_Q5_K, big, q, 256));
    g_assert_true (um_quant_quantize_row_ref (UM_DTYPE_Q6_K, big, q, 256));
    g_assert_true (um_quant_quantize_row_q8 (UM_DTYPE_Q6_K, big, q, 256));
    g_assert_true (um_quant_quantize_row_q8 (UM_DTYPE_Q4_0, big, q, 64));
  }
}

/* ---- fast dequantization equals the reference ------------------------------- */

static void
check_fast_dequant (UmDType t, const uint8_t *src, int64_t n)
{
  float *a = g_new (float, n), *b = g_new (float, n);

  g_assert_true (um_quant_dequantize_row_ref (t, src, a, n));
  g_assert_true (um_quant_dequantize_row (t, src, b, n));
  if (memcmp (a, b, (size_t) n * sizeof (float)) != 0)
    {
      for (int64_t i = 0; i < n; i++)
        if (memcmp (&a[i], &b[i], sizeof (float)) != 0)
          g_error ("%s: fast dequant differs at %" G_GINT64_FORMAT ": %.9g vs %.9g (%s)",
                   um_dtype_name (t), i, a[i], b[i], um_quant_simd_level ());
    }
  g_free (a);
  g_free (b);
}

static void
test_fast_dequant (GRand *r, guint seed_index)
{
  const int64_t n = 256 * 13;   /* odd block counts, tails in the F16 loops */
  float *x = g_new (float, n + 7);

  for (int pass = 0; pass < 2; pass++)
    {
      um_quant_set_simd_enabled (pass == 0);
      for (guint ti = 0; ti < G_N_ELEMENTS (all_types); ti++)
        {
          UmDType t = all_types[ti];
          size_t qb = type_bytes (t, n);
          /* +1: blocks at odd addresses, as in a mapped file */
          uint8_t *buf = g_malloc (qb + 1), *q = buf + 1;

          /* quantized real-looking data */
          fill_normal (r, x, n, 0.05);
          g_assert_true (um_quant_quantize_row_ref (t, x, q, n));
          check_fast_dequant (t, q, n);

          /* every bit pattern of codes and sub-scales */
          if (um_dtype_info (t)->quantized)
            {
              for (size_t i = 0; i < qb; i++)
                q[i] = (uint8_t) g_rand_int (r);
              sanitize_scales (r, t, q, n / um_dtype_info (t)->block_elems);
              check_fast_dequant (t, q, n);
            }

          /* short lengths: one block, and for plain types a ragged tail */
          int64_t small = um_dtype_info (t)->quantized ? um_dtype_info (t)->block_elems : 13;
          check_fast_dequant (t, q, small);
          g_free (buf);
        }
    }
  um_quant_set_simd_enabled (TRUE);
  g_free (x);
}

/* ---- direct dot products --------------------------------------------------- */

static void
dequant_q8 (UmDType for_t, const void *xq, float *y, int64_t n)
{
  if (for_t == UM_DTYPE_Q4_K || for_t == UM_DTYPE_Q5_K || for_t == UM_DTYPE_Q6_K)
    {
      const UmBlockQ8_K *b = xq;
      for (int64_t i = 0; i < n / 256; i++)
        {
          int32_t s = 0;
          for (int j = 0; j < 256; j++)
            y[256 * i + j] = b[i].d * (float) b[i].qs[j];
          for (int g = 0; g < 16; g++, s = 0)
            {
              for (int l = 0; l < 16; l++)
                s += b[i].qs[16 * g + l];
              g_assert_cmpint (s, ==, b[i].bsums[g]);
            }
        }
    }
  else
    g_assert_true (um_quant_dequantize_row_ref (UM_DTYPE_Q8_0, xq, y, n));
}

/* Worst-case float32 rounding of a sum of n terms in any order, relative to
 * the sum of their magnitudes (Higham, ch. 3): γ_n = n·u/(1 − n·u). */
static double
gamma_n (double n)
{
  const double u = 1.0 / 16777216.0;
  return n * u / (1.0 - n * u);
}

static void
test_vec_dot (GRand *r, guint seed_index)
{
  const int64_t n = 1024;
  float *w = g_new (float, n), *x = g_new (float, n);
  float *wd = g_new (float, n), *xd = g_new (float, n);

  for (int pass = 0; pass < 2; pass++)
    {
      um_quant_set_simd_enabled (pass == 0);
      for (guint ti = 0; ti < G_N_ELEMENTS (quant_types); ti++)
        {
          UmDType t = quant_types[ti];
          size_t qb = type_bytes (t, n), xb = um_quant_q8_row_bytes (t, n);
          uint8_t *wq = g_malloc (qb + 1), *xq = g_malloc (xb);

          g_assert_true (um_quant_has_vec_dot (t));
          g_assert_cmpuint (xb, >, 0);
          for (int trial = 0; trial < 6; trial++)
            {
              fill_normal (r, w, n, 0.05);
              fill_normal (r, x, n, 1.0);
              if (trial == 1)
                for (int64_t i = 0; i < n; i++)
                  x[i] = fabsf (x[i]) + 0.5f;   /* offsets matter */
              g_assert_true (um_quant_quantize_row_ref (t, w, wq + 1, n));
              if (trial >= 3)
                {
                  /* random codes and scales, within what a file can hold */
                  for (size_t i = 0; i < qb; i++)
                    wq[1 + i] = (uint8_t) g_rand_int (r);
                  sanitize_scales (r, t, wq + 1, n / um_dtype_info (t)->block_elems);
                }
              g_assert_true (um_quant_quantize_row_q8 (t, x, xq, n));
              g_assert_true (um_quant_dequantize_row_ref (t, wq + 1, wd, n));
              dequant_q8 (t, xq, xd, n);

              double ref = 0, mag = 0;
              for (int64_t i = 0; i < n; i++)
                {
                  ref += (double) wd[i] * xd[i];
                  mag += fabs ((double) wd[i] * xd[i]);
                }
              float got = um_quant_vec_dot_q8 (t, wq + 1, xq, n);
              /* Block sums are exact integers; the float part scales each of
               * the n/32 blocks (a product of two scales and the sum: 2
               * roundings) and adds the blocks up: γ_(n/32 + 3) of the
               * magnitude (mins are folded per block the same way). */
              const double bound = gamma_n (n / 32.0 + 3) * mag;
              g_assert_cmpfloat (fabs (got - ref), <=, bound + 1e-30);

              /* the 4-row kernel of the direct matrix product agrees: the
               * same x four times against this (possibly random) row */
              float *x4 = g_new (float, 4 * n), out4[4];
              for (int j = 0; j < 4; j++)
                memcpy (x4 + j * n, x, (size_t) n * sizeof (float));
              g_assert_true (um_quant_matmul_q8 (t, wq + 1, 1, n, x4, 4, out4));
              for (int j = 0; j < 4; j++)
                g_assert_cmpfloat (fabs (out4[j] - ref), <=, bound + 1e-30);
              g_free (x4);
            }
          g_free (wq);
          g_free (xq);
        }
    }
  um_quant_set_simd_enabled (TRUE);
  g_free (w);
  g_free (x);
  g_free (wd);
  g_free (xd);
}

/* ---- matrix product -------------------------------------------------------- */

static void
check_matmul_case (GRand *r, UmDType t, int64_t n, int64_t k, int64_t m, int scratch_mode)
{
  float *wf = g_new (float, n * k), *wd = g_new (float, n * k);
  float *x = g_new (float, m * k), *out = g_new (float, m * n);
  size_t qb = type_bytes (t, n * k);
  uint8_t *wq = g_malloc (qb);
  float *scratch = NULL;
  size_t scratch_bytes = 0;

  fill_normal (r, wf, n * k, 0.05);
  fill_normal (r, x, m * k, 1.0);
  g_assert_true (um_quant_quantize_row_ref (t, wf, wq, n * k));
  g_assert_true (um_quant_dequantize_row_ref (t, wq, wd, n * k));

  switch (scratch_mode)
    {
    case 0:   /* as recommended */
      scratch_bytes = um_quant_matmul_scratch_bytes (t, n, k, m);
      break;
    case 1:   /* room for fewer threads (or less than a tile: allocates) */
      scratch_bytes = um_quant_matmul_scratch_bytes (t, n, k, m) / 2;
      break;
    case 2:   /* too small: the product allocates */
      scratch_bytes = 16;
      break;
    default:  /* none */
      break;
    }
  if (scratch_bytes > 0)
    scratch = g_malloc (scratch_bytes);

  for (int64_t i = 0; i < m * n; i++)
    out[i] = NAN;
  g_assert_true (um_quant_matmul (t, wq, n, k, x, m, out, scratch, scratch_bytes));

  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++)
      {
        double ref = 0, mag = 0;
        for (int64_t l = 0; l < k; l++)
          {
            ref += (double) x[i * k + l] * wd[j * k + l];
            mag += fabs ((double) x[i * k + l] * wd[j * k + l]);
          }
        /* weights convert to f32 exactly: only the k-term sum rounds */
        g_assert_cmpfloat (fabs (out[i * n + j] - ref), <=, gamma_n (k) * mag + 1e-30);
      }

  /* other tile heights give the same, each within that bound of the exact
   * value, so within twice the bound of each other */
  for (int64_t tile = 1; tile <= 256; tile *= 4)
    {
      float *out2 = g_new (float, m * n);
      g_assert_true (um_quant_matmul_tiled (t, wq, n, k, x, m, out2, tile, NULL, 0));
      for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
          {
            double mag = 0;
            for (int64_t l = 0; l < k; l++)
              mag += fabs ((double) x[i * k + l] * wd[j * k + l]);
            g_assert_cmpfloat (fabsf (out2[i * n + j] - out[i * n + j]), <=, 2 * gamma_n (k) * mag + 1e-30);
          }
      g_free (out2);
    }

  /* the direct quantized product: per element, the exact product of the
   * dequantized weights and the dequantized Q8 activations (this covers the
   * 4-row kernels and the remainder rows), and close to the f32 product */
  if (um_quant_has_vec_dot (t))
    {
      float *out3 = g_new (float, m * n), *xd = g_new (float, k);
      size_t xb = um_quant_q8_row_bytes (t, k);
      uint8_t *xq = g_malloc (xb);
      g_assert_true (um_quant_matmul_q8 (t, wq, n, k, x, m, out3));
      for (int64_t i = 0; i < m; i++)
        {
          g_assert_true (um_quant_quantize_row_q8 (t, x + i * k, xq, k));
          dequant_q8 (t, xq, xd, k);
          for (int64_t j = 0; j < n; j++)
            {
              double ref = 0, mag = 0, rounding = 0, mag32 = 0;
              for (int64_t l = 0; l < k; l++)
                {
                  ref += (double) xd[l] * wd[j * k + l];
                  mag += fabs ((double) xd[l] * wd[j * k + l]);
                  mag32 += fabs ((double) x[i * k + l] * wd[j * k + l]);
                  rounding += fabs ((double) (x[i * k + l] - xd[l]) * wd[j * k + l]);
                }
              /* exact integer block sums, float combination as above */
              g_assert_cmpfloat (fabs (out3[i * n + j] - ref), <=, gamma_n (k / 32.0 + 3) * mag + 1e-30);
              /* and from the f32 product: the activations' own 8-bit
               * rounding (Σ|x − x̃|·|w|, exactly what it can cost) plus both
               * products' float rounding */
              g_assert_cmpfloat (fabs (out3[i * n + j] - out[i * n + j]), <=,
                                 rounding + gamma_n (k / 32.0 + 3) * mag + gamma_n (k) * mag32 + 1e-30);
            }
        }
      g_free (xq);
      g_free (xd);
      g_free (out3);
    }

  g_free (scratch);
  g_free (wf);
  g_free (wd);
  g_free (x);
  g_free (out);
  g_free (wq);
}

static void
test_matmul (GRand *r, guint seed_index)
{
  for (guint ti = 0; ti < G_N_ELEMENTS (all_types); ti++)
    {
      UmDType t = all_types[ti];
      /* The larger shapes with the first seed; the values of every
       * seed meet a small one. */
      if (seed_index == 0)
        check_matmul_case (r, t, 200, 512, 17, ti % 4);
      check_matmul_case (r, t, 67, 256, 1, (ti + 1) % 4);
    }
  if (seed_index == 0)
    {
      check_matmul_case (r, UM_DTYPE_Q4_0, 130, 96, 64, 0);
      /* several default-height tiles */
      check_matmul_case (r, UM_DTYPE_Q6_K, 300, 2048, 5, 0);
      check_matmul_case (r, UM_DTYPE_Q4_1, 300, 2048, 5, 1);
      check_matmul_case (r, UM_DTYPE_BF16, 300, 2048, 5, 3);
    }

  /* empty products are fine; k = 0 gives zeros */
  {
    float out[4] = { 1, 2, 3, 4 }, x[1] = { 0 };
    uint8_t w[1] = { 0 };
    g_assert_true (um_quant_matmul (UM_DTYPE_Q4_0, w, 0, 32, x, 3, out, NULL, 0));
    g_assert_true (um_quant_matmul (UM_DTYPE_Q4_0, w, 2, 32, x, 0, out, NULL, 0));
    g_assert_true (um_quant_matmul (UM_DTYPE_Q4_0, w, 2, 0, x, 2, out, NULL, 0));
    for (int i = 0; i < 4; i++)
      g_assert_cmpfloat (out[i], ==, 0.0f);
  }
}

/* ---- GGUF files made by llama.cpp ------------------------------------------ */

/* Just enough of GGUF v3 to find tensors: the real reader lives elsewhere. */

typedef struct {
  char    *name;
  int      n_dims;
  uint64_t ne[4];
  uint32_t ggml_type;
  uint64_t offset;
} TestTensor;

typedef struct {
  gchar     *data;
  gsize      size;
  GPtrArray *tensors;   /* TestTensor* */
  gsize      data_start;
} TestGguf;

typedef struct {
  const guint8 *p, *end;
  gboolean      bad;
} Cursor;

static gboolean
cur_read (Cursor *c, void *dst, gsize n)
{
  if (c->bad || (gsize) (c->end - c->p) < n)
    {
      c->bad = TRUE;
      return FALSE;
    }
  memcpy (dst, c->p, n);
  c->p += n;
  return TRUE;
}

static uint64_t
cur_u64 (Cursor *c)
{
  uint64_t v = 0;
  cur_read (c, &v, 8);
  return GUINT64_FROM_LE (v);
}

static uint32_t
cur_u32 (Cursor *c)
{
  uint32_t v = 0;
  cur_read (c, &v, 4);
  return GUINT32_FROM_LE (v);
}

static void
cur_skip (Cursor *c, uint64_t n)
{
  if (c->bad || (uint64_t) (c->end - c->p) < n)
    c->bad = TRUE;
  else
    c->p += n;
}

static char *
cur_string (Cursor *c)
{
  uint64_t len = cur_u64 (c);
  if (c->bad || (uint64_t) (c->end - c->p) < len)
    {
      c->bad = TRUE;
      return NULL;
    }
  char *s = g_strndup ((const char *) c->p, len);
  c->p += len;
  return s;
}

/* Skips one metadata value of GGUF type vt; remembers general.alignment. */
static void
cur_skip_value (Cursor *c, uint32_t vt, int depth)
{
  static const guint8 sizes[] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };

  if (depth > 4 || vt > 12)
    {
      c->bad = TRUE;
      return;
    }
  if (vt == 8)
    cur_skip (c, cur_u64 (c));
  else if (vt == 9)
    {
      uint32_t et = cur_u32 (c);
      uint64_t count = cur_u64 (c);
      if (et != 8 && et != 9 && et <= 12)
        {
          if (count > G_MAXUINT64 / 8)
            c->bad = TRUE;
          else
            cur_skip (c, count * sizes[et]);
        }
      else
        for (uint64_t i = 0; i < count && !c->bad; i++)
          cur_skip_value (c, et, depth + 1);
    }
  else
    cur_skip (c, sizes[vt]);
}

static void
test_tensor_free (gpointer p)
{
  TestTensor *t = p;
  g_free (t->name);
  g_free (t);
}

static void
test_gguf_free (TestGguf *g)
{
  if (g == NULL)
    return;
  g_free (g->data);
  g_ptr_array_unref (g->tensors);
  g_free (g);
}

static TestGguf *
test_gguf_load (const char *path)
{
  TestGguf *g = g_new0 (TestGguf, 1);
  GError *error = NULL;
  Cursor c;
  uint64_t n_tensors, n_kv, alignment = 32;
  char magic[4] = { 0 };

  if (!g_file_get_contents (path, &g->data, &g->size, &error))
    g_error ("%s", error->message);
  g->tensors = g_ptr_array_new_with_free_func (test_tensor_free);
  c.p = (const guint8 *) g->data;
  c.end = c.p + g->size;
  c.bad = FALSE;

  cur_read (&c, magic, 4);
  g_assert_true (memcmp (magic, "GGUF", 4) == 0);
  g_assert_cmpuint (cur_u32 (&c), ==, 3);
  n_tensors = cur_u64 (&c);
  n_kv = cur_u64 (&c);
  g_assert_cmpuint (n_tensors, <, 100000);

  for (uint64_t i = 0; i < n_kv && !c.bad; i++)
    {
      char *key = cur_string (&c);
      uint32_t vt = cur_u32 (&c);
      if (key != NULL && strcmp (key, "general.alignment") == 0 && vt == 4)
        alignment = cur_u32 (&c);
      else
        cur_skip_value (&c, vt, 0);
      g_free (key);
    }
  for (uint64_t i = 0; i < n_tensors && !c.bad; i++)
    {
      TestTensor *t = g_new0 (TestTensor, 1);
      t->name = cur_string (&c);
      t->n_dims = (int) cur_u32 (&c);
      g_assert_cmpint (t->n_dims, >=, 1);
      g_assert_cmpint (t->n_dims, <=, 4);
      for (int d = 0; d < t->n_dims; d++)
        t->ne[d] = cur_u64 (&c);
      t->ggml_type = cur_u32 (&c);
      t->offset = cur_u64 (&c);
      g_ptr_array_add (g->tensors, t);
    }
  g_assert_false (c.bad);
  g_assert_cmpuint (alignment, >, 0);
  g->data_start = (gsize) ((const gchar *) c.p - g->data);
  g->data_start = (g->data_start + alignment - 1) / alignment * alignment;
  return g;
}

static const TestTensor *
test_gguf_find (const TestGguf *g, const char *name)
{
  for (guint i = 0; i < g->tensors->len; i++)
    {
      const TestTensor *t = g_ptr_array_index (g->tensors, i);
      if (strcmp (t->name, name) == 0)
        return t;
    }
  return NULL;
}

static gboolean
dtype_from_ggml (uint32_t ggml, UmDType *out)
{
  switch (ggml)
    {
    case 0: *out = UM_DTYPE_F32; return TRUE;
    case 1: *out = UM_DTYPE_F16; return TRUE;
    case 2: *out = UM_DTYPE_Q4_0; return TRUE;
    case 3: *out = UM_DTYPE_Q4_1; return TRUE;
    case 6: *out = UM_DTYPE_Q5_0; return TRUE;
    case 7: *out = UM_DTYPE_Q5_1; return TRUE;
    case 8: *out = UM_DTYPE_Q8_0; return TRUE;
    case 12: *out = UM_DTYPE_Q4_K; return TRUE;
    case 13: *out = UM_DTYPE_Q5_K; return TRUE;
    case 14: *out = UM_DTYPE_Q6_K; return TRUE;
    case 30: *out = UM_DTYPE_BF16; return TRUE;
    default: return FALSE;
    }
}

static const guint8 *
tensor_data (const TestGguf *g, const TestTensor *t, UmDType dt, int64_t n, size_t *bytes)
{
  *bytes = type_bytes (dt, n);
  g_assert_cmpuint (g->data_start + t->offset + *bytes, <=, g->size);
  return (const guint8 *) g->data + g->data_start + t->offset;
}

static double
file_rms_bound (UmDType t)
{
  /* Weights are Gaussian-like; same bounds as the round-trip test. */
  for (guint i = 0; i < G_N_ELEMENTS (round_trip_cases); i++)
    if (round_trip_cases[i].t == t)
      return round_trip_cases[i].normal_rms;
  return 0;
}

typedef struct {
  const char *quant_file;
  const char *f32_file;
  gboolean    bytes_must_match;   /* re-quantizing must give llama.cpp's bytes */
} GgufCase;

static void
test_gguf_files (gconstpointer data)
{
  const GgufCase *gc = data;
  const char *dir = g_getenv ("UM_TEST_DATA");
  char *qpath, *fpath;
  TestGguf *qg, *fg;
  guint n_checked = 0;

  if (dir == NULL)
    {
      g_test_skip ("UM_TEST_DATA not set");
      return;
    }
  qpath = g_build_filename (dir, gc->quant_file, NULL);
  fpath = g_build_filename (dir, gc->f32_file, NULL);
  if (!g_file_test (qpath, G_FILE_TEST_EXISTS) || !g_file_test (fpath, G_FILE_TEST_EXISTS))
    {
      g_test_skip ("test data missing");
      g_free (qpath);
      g_free (fpath);
      return;
    }
  qg = test_gguf_load (qpath);
  fg = test_gguf_load (fpath);

  for (guint i = 0; i < qg->tensors->len; i++)
    {
      const TestTensor *qt = g_ptr_array_index (qg->tensors, i);
      const TestTensor *ft = test_gguf_find (fg, qt->name);
      UmDType dt = UM_DTYPE_F32;
      int64_t n = 1;
      size_t qbytes, fbytes;

      g_assert_nonnull (ft);
      g_assert_cmpint (ft->ggml_type, ==, 0);
      g_assert_cmpint (ft->n_dims, ==, qt->n_dims);
      for (int d = 0; d < qt->n_dims; d++)
        {
          g_assert_cmpuint (ft->ne[d], ==, qt->ne[d]);
          n *= (int64_t) qt->ne[d];
        }
      g_assert_true (dtype_from_ggml (qt->ggml_type, &dt));

      const guint8 *qdata = tensor_data (qg, qt, dt, n, &qbytes);
      const guint8 *fdata = tensor_data (fg, ft, UM_DTYPE_F32, n, &fbytes);
      float *ref = g_new (float, n), *got = g_new (float, n), *got_ref = g_new (float, n);

      memcpy (ref, fdata, fbytes);
      if (!um_dtype_info (dt)->quantized)
        {
          /* norms stay F32 in these files */
          g_assert_cmpint (dt, ==, UM_DTYPE_F32);
          g_assert_true (memcmp (qdata, fdata, fbytes) == 0);
          g_free (ref); g_free (got); g_free (got_ref);
          continue;
        }

      /* read in place, from the file's own (2-byte aligned) offsets */
      g_assert_true (um_quant_dequantize_row (dt, qdata, got, n));
      g_assert_true (um_quant_dequantize_row_ref (dt, qdata, got_ref, n));
      g_assert_true (memcmp (got, got_ref, (size_t) n * sizeof (float)) == 0);

      double err = rel_rms (ref, got, n);
      g_test_message ("%s %-28s %-5s rel. RMS vs F32 %.5f", gc->quant_file, qt->name,
                      um_dtype_name (dt), err);
      g_assert_cmpfloat (err, <=, file_rms_bound (dt));

      /* re-quantize the F32 weights and compare bytes with llama.cpp's */
      uint8_t *mine = g_malloc (qbytes);
      const UmDTypeInfo *info = um_dtype_info (dt);
      int64_t nb = n / info->block_elems, differ = 0;
      g_assert_true (um_quant_quantize_row_ref (dt, ref, mine, n));
      for (int64_t b = 0; b < nb; b++)
        if (memcmp (mine + b * info->block_bytes, qdata + b * info->block_bytes, info->block_bytes) != 0)
          differ++;
      g_test_message ("%s %-28s %-5s re-quantized: %" G_GINT64_FORMAT " of %" G_GINT64_FORMAT
                      " blocks differ from llama.cpp's", gc->quant_file, qt->name,
                      um_dtype_name (dt), differ, nb);
      if (gc->bytes_must_match)
        g_assert_cmpint (differ, ==, 0);
      else
        {
          /* K-quants: any difference must be a near-tie in the search, so
           * our blocks are as good as theirs */
          float *mine_f = g_new (float, n);
          g_assert_true (um_quant_dequantize_row_ref (dt, mine, mine_f, n));
          g_assert_cmpfloat (rel_rms (ref, mine_f, n), <=, err * 1.02 + 1e-7);
          g_free (mine_f);
        }
      g_free (mine);
      g_free (ref);
      g_free (got);
      g_free (got_ref);
      n_checked++;
    }
  g_assert_cmpuint (n_checked, >, 0);
  test_gguf_free (qg);
  test_gguf_free (fg);
  g_free (qpath);
  g_free (fpath);
}

static const GgufCase gguf_cases[] = {
  { "tiny-llada-q8_0.gguf", "tiny-llada-f32.gguf", TRUE },
  { "tiny-llada-q4_0.gguf", "tiny-llada-f32.gguf", TRUE },
  { "small-kquant-q4_1.gguf", "small-kquant-f32.gguf", TRUE },
  { "small-kquant-q5_0.gguf", "small-kquant-f32.gguf", FALSE },
  { "small-kquant-q5_1.gguf", "small-kquant-f32.gguf", FALSE },
  { "small-kquant-q4_k.gguf", "small-kquant-f32.gguf", FALSE },
  { "small-kquant-q5_k.gguf", "small-kquant-f32.gguf", FALSE },
  { "small-kquant-q6_k.gguf", "small-kquant-f32.gguf", FALSE },
  { "small-kquant-q4_k_m.gguf", "small-kquant-f32.gguf", FALSE },
  { "small-kquant-q5_k_m.gguf", "small-kquant-f32.gguf", FALSE },
};

/* The bounds hold for any input: each test draws its inputs from every
 * test seed in turn (um_test_seed_next). */
static void
with_seeds (gconstpointer data)
{
  void (*fn) (GRand *, guint) = (void (*) (GRand *, guint)) data;
  guint32 seed;

  for (guint it = 0, i = 0; um_test_seed_next (&it, &seed); i++)
    {
      GRand *r = g_rand_new_with_seed (seed);
      fn (r, i);
      g_rand_free (r);
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/quant/block-sizes", test_block_sizes);
  g_test_add_func ("/quant/known-blocks", test_known_blocks);
  g_test_add_data_func ("/quant/round-trip", (gconstpointer) test_round_trip, with_seeds);
  g_test_add_func ("/quant/bad-input", test_bad_input);
  g_test_add_data_func ("/quant/fast-dequant", (gconstpointer) test_fast_dequant, with_seeds);
  g_test_add_data_func ("/quant/vec-dot", (gconstpointer) test_vec_dot, with_seeds);
  g_test_add_data_func ("/quant/matmul", (gconstpointer) test_matmul, with_seeds);
  for (guint i = 0; i < G_N_ELEMENTS (gguf_cases); i++)
    {
      char *path = g_strdup_printf ("/quant/gguf/%s", gguf_cases[i].quant_file);
      g_test_add_data_func (path, &gguf_cases[i], test_gguf_files);
      g_free (path);
    }
  return g_test_run ();
}

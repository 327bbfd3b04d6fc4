/* um-qgemm.c — the weight product with quantized weights in 8-bit integers,
 * like llama.cpp's CPU path: the activations are rounded to 8 bits, each
 * block's dot product with the weight codes is exact integer arithmetic
 * (AVX-512 VNNI vpdpbusd), and only the block scales are applied in float.
 *
 * The arithmetic.  um_qgemm_ref () is its plain-C definition; um_qgemm_vnni ()
 * performs the same float operations on the same operands in the same order
 * (it keeps each output's running sum and reloads it between K pieces), so
 * on finite data the two agree bit for bit.  The tests only rely on the
 * weaker, derived bound of the float combination.
 *
 * 1. Activations.  Each row of x is cut into blocks of 32 elements.  Per
 *    block, with float32 arithmetic:
 *      amax = max |x[i]|,  dx = amax / 127.0f   (kept in float32, not f16)
 *      if dx >= FLT_MIN:  id = 1.0f / dx,  q[i] = (int) nearbyintf (x[i] * id)
 *      else (all zero, subnormal, or NaN):  dx = 0 and every q[i] = 0.
 *    nearbyintf rounds half to even in the default rounding mode (the SIMD
 *    code uses the MXCSR mode, the same one).  |x[i] * id| <= 127 (plus a
 *    rounding) so q is in [-127, 127] and |x[i] - dx * q[i]| <= dx / 2 (up
 *    to float rounding of id).  Blocks of 32 are finer than llama.cpp's 256
 *    element q8_K activations, so at least as accurate.  Non-finite x give
 *    unspecified (but memory-safe) results.
 *
 * 2. Weights.  Each weight is an unsigned code c times a per-unit float
 *    scale a, plus an offset; a unit is 32 elements (16 for Q6_K).  With
 *    a, b computed exactly as the reference dequantizer computes its scales
 *    (f16 values converted exactly; d * (float) sc):
 *      Q8_0  c = q + 128,  w = a (c - 128),  a = d
 *      Q4_0  c in 0..15,   w = a (c - 8),    a = d
 *      Q5_0  c in 0..31,   w = a (c - 16),   a = d
 *      Q6_K  c in 0..63,   w = a (c - 32),   a = d * (float) sc   (units of 16)
 *      Q4_1, Q5_1          w = a c + b,      a = d, b = m
 *      Q4_K, Q5_K          w = a c + b,      a = d * (float) sc, b = -(dmin * (float) m)
 *
 * 3. Per output out[i][j], acc = 0.0f, then over the units of row j in k
 *    order, with dx the scale of the activation block holding the unit:
 *      symmetric types:  P = sum (c - o) q             (exact integer)
 *                        acc = fmaf ((float) P, a * dx, acc)
 *      types with b:     P = sum c q,  S = sum q       (exact integers)
 *                        acc = fmaf ((float) P, a * dx, acc)
 *                        acc = fmaf (b, dx * (float) S, acc)
 *    |P| < 2^24, so (float) P is exact; a * dx and dx * (float) S are one
 *    float rounding each.  The VNNI code computes P as sum c q - o sum q,
 *    the same integer.
 *
 * The VNNI path.  x is rounded once per call (threads split its rows) into
 * scratch all threads read.  Threads then take panels of 32 weight rows.
 * Per panel and K piece of 1024, the weights are unpacked to unsigned byte
 * codes laid out so that one aligned zmm holds 4 consecutive k of 16 rows
 * (vpdpbusd's unsigned operand), plus per-(row, unit) float scales; the
 * activations stay row-major int8, 4 bytes of a token broadcast to all
 * lanes (the signed operand).  A micro-tile is 32 rows x 6 tokens: 12
 * integer accumulators, reset every unit, and 12 float accumulators with
 * the running sums, which come out as contiguous 16-float pieces of output
 * rows.  The offsets cost one vpsubd (o * sum q, precomputed per token and
 * unit) or one fma (b * dx * sum q) per accumulator and unit, in the same
 * pass.  On the 2-core Zen 5 at m = 96 this runs at ~1.0-1.3 T-op/s
 * (2 m n k / time) against ~0.3 for OpenBLAS sgemm on f32 weights. */
#include "um-gemm.h"

#include "um-cpu-isa.h"
#include "um-pool.h"
#include "um-half.h"
#include "um-quant.h"
#include "um-qgemm-private.h"

#include <float.h>
#include <math.h>
#include <string.h>

#ifdef _OPENMP
#endif

#if UM_HAVE_X86_SIMD
#include <immintrin.h>
#endif

gboolean
um_qgemm_supported_type (UmDType t)
{
  QType q;
  return qtype_get (t, &q);
}

/* Scales of one stored block: a[] per unit (1, 8 or 16 of them), b[] per
 * 32 elements (types with mins only).  Both paths call this, so the float
 * scales are the same values in each. */
static void
block_scales (UmDType t, const void *blk, float *a, float *b)
{
  switch (t)
    {
    case UM_DTYPE_Q8_0: a[0] = um_f16_load (&((const UmBlockQ8_0 *) blk)->d); break;
    case UM_DTYPE_Q4_0: a[0] = um_f16_load (&((const UmBlockQ4_0 *) blk)->d); break;
    case UM_DTYPE_Q5_0: a[0] = um_f16_load (&((const UmBlockQ5_0 *) blk)->d); break;
    case UM_DTYPE_Q4_1:
      a[0] = um_f16_load (&((const UmBlockQ4_1 *) blk)->d);
      b[0] = um_f16_load (&((const UmBlockQ4_1 *) blk)->m);
      break;
    case UM_DTYPE_Q5_1:
      a[0] = um_f16_load (&((const UmBlockQ5_1 *) blk)->d);
      b[0] = um_f16_load (&((const UmBlockQ5_1 *) blk)->m);
      break;
    case UM_DTYPE_Q4_K:
    case UM_DTYPE_Q5_K:
      {
        /* Q4_K and Q5_K start with the same d, dmin, scales[12]. */
        const UmBlockQ4_K *q = blk;
        const float d = um_f16_load (&q->d), dmin = um_f16_load (&q->dmin);
        for (int j = 0; j < 8; j++)
          {
            uint8_t sc, mn;
            um_quant_get_scale_min_k4 (j, q->scales, &sc, &mn);
            a[j] = d * (float) sc;
            b[j] = -(dmin * (float) mn);
          }
      }
      break;
    case UM_DTYPE_Q6_K:
      {
        const UmBlockQ6_K *q = blk;
        const float d = um_f16_load (&q->d);
        for (int j = 0; j < 16; j++)
          a[j] = d * (float) q->scales[j];
      }
      break;
    case UM_DTYPE_F32:
    case UM_DTYPE_F16:
    case UM_DTYPE_BF16:
    case UM_DTYPE_I32:
    case UM_DTYPE_N_TYPES:
    default:
      g_assert_not_reached ();
    }
}

/* Unsigned codes of one stored block, in element order (see um-quant.h). */
static void
block_codes_scalar (UmDType t, const void *blk, uint8_t *c)
{
  switch (t)
    {
    case UM_DTYPE_Q8_0:
      for (int j = 0; j < 32; j++)
        c[j] = (uint8_t) (((const UmBlockQ8_0 *) blk)->qs[j] + 128);
      break;
    case UM_DTYPE_Q4_0:
    case UM_DTYPE_Q4_1:
      {
        const uint8_t *qs = t == UM_DTYPE_Q4_0 ? ((const UmBlockQ4_0 *) blk)->qs
                                               : ((const UmBlockQ4_1 *) blk)->qs;
        for (int j = 0; j < 16; j++)
          {
            c[j] = qs[j] & 0x0f;
            c[j + 16] = qs[j] >> 4;
          }
      }
      break;
    case UM_DTYPE_Q5_0:
    case UM_DTYPE_Q5_1:
      {
        const uint8_t *qs = t == UM_DTYPE_Q5_0 ? ((const UmBlockQ5_0 *) blk)->qs
                                               : ((const UmBlockQ5_1 *) blk)->qs;
        const uint32_t qh = load_u32 (t == UM_DTYPE_Q5_0 ? ((const UmBlockQ5_0 *) blk)->qh
                                                         : ((const UmBlockQ5_1 *) blk)->qh);
        for (int j = 0; j < 16; j++)
          {
            c[j] = (uint8_t) ((qs[j] & 0x0f) | (((qh >> j) & 1u) << 4));
            c[j + 16] = (uint8_t) ((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
          }
      }
      break;
    case UM_DTYPE_Q4_K:
      {
        const uint8_t *qs = ((const UmBlockQ4_K *) blk)->qs;
        for (int g = 0; g < 4; g++)
          for (int l = 0; l < 32; l++)
            {
              c[64 * g + l] = qs[32 * g + l] & 0x0f;
              c[64 * g + 32 + l] = qs[32 * g + l] >> 4;
            }
      }
      break;
    case UM_DTYPE_Q5_K:
      {
        const uint8_t *qs = ((const UmBlockQ5_K *) blk)->qs;
        const uint8_t *qh = ((const UmBlockQ5_K *) blk)->qh;
        for (int g = 0; g < 4; g++)
          for (int l = 0; l < 32; l++)
            {
              c[64 * g + l] = (uint8_t) ((qs[32 * g + l] & 0x0f) | (((qh[l] >> (2 * g)) & 1) << 4));
              c[64 * g + 32 + l] = (uint8_t) ((qs[32 * g + l] >> 4) | (((qh[l] >> (2 * g + 1)) & 1) << 4));
            }
      }
      break;
    case UM_DTYPE_Q6_K:
      {
        const UmBlockQ6_K *q = blk;
        for (int h = 0; h < 2; h++)
          {
            const uint8_t *ql = q->ql + 64 * h;
            const uint8_t *qh = q->qh + 32 * h;
            uint8_t *y = c + 128 * h;
            for (int l = 0; l < 32; l++)
              {
                y[l] = (uint8_t) ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4));
                y[l + 32] = (uint8_t) ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4));
                y[l + 64] = (uint8_t) ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
                y[l + 96] = (uint8_t) ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
              }
          }
      }
      break;
    case UM_DTYPE_F32:
    case UM_DTYPE_F16:
    case UM_DTYPE_BF16:
    case UM_DTYPE_I32:
    case UM_DTYPE_N_TYPES:
    default:
      g_assert_not_reached ();
    }
}

/* Step 1 of the header comment, for one row of k elements. */
static void
quantize_x_row_ref (const float *x, int64_t k, int8_t *q, float *dx)
{
  for (int64_t b = 0; b < k / QK; b++)
    {
      const float *xb = x + b * QK;
      float amax = 0.0f, d, id;

      for (int i = 0; i < QK; i++)
        if (fabsf (xb[i]) > amax)
          amax = fabsf (xb[i]);
      d = amax / 127.0f;
      if (!(d >= FLT_MIN))
        {
          dx[b] = 0.0f;
          memset (q + b * QK, 0, QK);
          continue;
        }
      id = 1.0f / d;
      dx[b] = d;
      for (int i = 0; i < QK; i++)
        {
          float r = nearbyintf (xb[i] * id);
          /* Only non-finite x reach the clamps (never undefined behaviour). */
          q[b * QK + i] = (int8_t) (r >= 127.0f ? 127 : (r <= -127.0f ? -127 : (r == r ? (int) r : 0)));
        }
    }
}

/* ---- reference ------------------------------------------------------------ */

gboolean
um_qgemm_ref (UmDType t, const void *w, int64_t n, int64_t k, const float *x, int64_t m, float *out)
{
  QType qt;
  int64_t nb, nu, ub, n_sb;
  int unit;
  int8_t *xq;
  float *xd, *wa, *wb;
  uint8_t *wc;

  if (!check_args (t, w, n, k, x, m, out, &qt))
    return FALSE;
  if (m == 0 || n == 0)
    return TRUE;
  if (k == 0)
    {
      zero_out (out, m, n);
      return TRUE;
    }

  nb = k / QK;
  ub = units_per_block32 (qt.mode);
  nu = nb * ub;
  unit = QK / (int) ub;
  n_sb = k / qt.block;
  if ((uint64_t) m > G_MAXSIZE / ((uint64_t) k + 4 * (uint64_t) nb))
    return FALSE;
  xq = g_try_malloc ((size_t) m * (size_t) k);
  xd = g_try_malloc ((size_t) m * (size_t) nb * sizeof (float));
  wc = g_try_malloc ((size_t) k);
  wa = g_try_malloc ((size_t) nu * sizeof (float));
  wb = g_try_malloc ((size_t) nb * sizeof (float));
  if (xq == NULL || xd == NULL || wc == NULL || wa == NULL || wb == NULL)
    {
      g_free (xq);
      g_free (xd);
      g_free (wc);
      g_free (wa);
      g_free (wb);
      return FALSE;
    }

  for (int64_t i = 0; i < m; i++)
    quantize_x_row_ref (x + i * k, k, xq + i * k, xd + i * nb);

  for (int64_t j = 0; j < n; j++)
    {
      const uint8_t *row = (const uint8_t *) w + (size_t) j * (size_t) n_sb * qt.block_bytes;
      const int64_t blk32 = qt.block / QK;

      for (int64_t s = 0; s < n_sb; s++)
        {
          const uint8_t *blk = row + (size_t) s * qt.block_bytes;
          block_codes_scalar (t, blk, wc + s * qt.block);
          block_scales (t, blk, wa + s * blk32 * ub, wb + s * blk32);
        }

      for (int64_t i = 0; i < m; i++)
        {
          const int8_t *q = xq + i * k;
          float acc = 0.0f;

          for (int64_t b = 0; b < nb; b++)
            {
              const float dx = xd[i * nb + b];

              if (qt.mode == MODE_MIN32)
                {
                  int32_t p = 0, s = 0;
                  for (int e = 0; e < QK; e++)
                    {
                      p += (int32_t) wc[b * QK + e] * q[b * QK + e];
                      s += q[b * QK + e];
                    }
                  acc = fmaf ((float) p, wa[b] * dx, acc);
                  acc = fmaf (wb[b], dx * (float) s, acc);
                }
              else
                for (int64_t u = b * ub; u < (b + 1) * ub; u++)
                  {
                    int32_t p = 0;
                    for (int64_t e = u * unit; e < (u + 1) * unit; e++)
                      p += ((int32_t) wc[e] - qt.off) * q[e];
                    acc = fmaf ((float) p, wa[u] * dx, acc);
                  }
            }
          out[i * n + j] = acc;
        }
    }

  g_free (xq);
  g_free (xd);
  g_free (wc);
  g_free (wa);
  g_free (wb);
  return TRUE;
}

/* ---- AVX-512 VNNI ----------------------------------------------------------- */

/* Weight rows per panel (two zmm of 16) and tokens per micro-tile: 12
 * integer + 12 float accumulators + 2 weight registers fit the 32 zmm. */
#define NR 32
#define NT 6
/* K piece unpacked at a time: 32 rows x 1024 codes = 32 KiB, which stays
 * in L1 while every token group sweeps it (512 and 2048 measured within a
 * few percent; 256 ~10% slower).  A multiple of 256 (K-quant block). */
#define KC 1024

typedef struct {
  size_t x_q, x_d, x_c;          /* offsets of the shared activation arrays */
  size_t shared;
  size_t t_pk, t_a, t_b;         /* offsets inside one thread's area */
  size_t per_thread;
  int    n_threads;
} Layout;

static gboolean
layout_get (const QType *qt, int64_t n, int64_t k, int64_t m, Layout *l)
{
  const uint64_t nb = (uint64_t) k / QK, nu = nb * (uint64_t) units_per_block32 (qt->mode);
  const size_t kc = (size_t) MIN (k, (int64_t) KC);
  const int64_t n_panels = (n + NR - 1) / NR;

  /* Sizes here are far from overflowing size_t unless m * k is. */
  if ((uint64_t) m > (G_MAXSIZE / 4) / ((uint64_t) k + 8 * nb + 64))
    return FALSE;
  l->x_q = 0;
  l->x_d = align64 ((size_t) m * (size_t) k);
  l->x_c = l->x_d + align64 ((size_t) m * (size_t) nb * sizeof (float));
  l->shared = l->x_c + align64 ((size_t) m * (size_t) nu * 4);
  l->t_pk = 0;
  l->t_a = align64 ((size_t) NR * kc);
  l->t_b = l->t_a + align64 (kc / 16 * NR * sizeof (float));
  l->per_thread = l->t_b + align64 (kc / QK * NR * sizeof (float));
  l->n_threads = (int) MAX ((int64_t) 1, MIN ((int64_t) um_pool_max_threads (), n_panels));
  return TRUE;
}

size_t
um_qgemm_scratch_bytes (UmDType t, int64_t n, int64_t k, int64_t m)
{
  QType qt;
  Layout l;

  if (!qtype_get (t, &qt) || n <= 0 || k <= 0 || m <= 0 || n > G_MAXINT || k > G_MAXINT ||
      m > G_MAXINT || k % qt.block != 0 || !layout_get (&qt, n, k, m, &l))
    return 0;
  /* + 64: the caller's pointer is aligned up to a cache line. */
  return l.shared + (size_t) l.n_threads * l.per_thread + 64;
}

#if UM_HAVE_X86_SIMD

#define UM_ALWAYS_INLINE inline __attribute__ ((always_inline))

/* Step 1 of the header comment, vectorised; bit-identical to
 * quantize_x_row_ref () for finite x.  Also stores per unit o * sum q
 * (symmetric types, int32) or per block dx * (float) sum q (types with
 * mins) in xc. */
UM_TARGET_AVX512_VNNI static void
quantize_x_row_avx512 (const float *x, int64_t k, Mode mode, int off,
                       int8_t *q, float *xd, void *xc)
{
  int32_t *xo = xc;
  float *xs = xc;

  for (int64_t b = 0; b < k / QK; b++)
    {
      __m512 v0 = _mm512_loadu_ps (x + b * QK);
      __m512 v1 = _mm512_loadu_ps (x + b * QK + 16);
      float amax = _mm512_reduce_max_ps (_mm512_max_ps (_mm512_abs_ps (v0), _mm512_abs_ps (v1)));
      float d = amax / 127.0f, id;
      __m512i i0, i1;

      if (!(d >= FLT_MIN))
        {
          xd[b] = 0.0f;
          _mm256_storeu_si256 ((__m256i *) (q + b * QK), _mm256_setzero_si256 ());
          if (mode == MODE_SYM16)
            xo[2 * b] = xo[2 * b + 1] = 0;
          else if (mode == MODE_SYM32)
            xo[b] = 0;
          else
            xs[b] = 0.0f;
          continue;
        }
      id = 1.0f / d;
      xd[b] = d;
      /* Rounds with the MXCSR mode: nearest-even, like nearbyintf. */
      i0 = _mm512_cvtps_epi32 (_mm512_mul_ps (v0, _mm512_set1_ps (id)));
      i1 = _mm512_cvtps_epi32 (_mm512_mul_ps (v1, _mm512_set1_ps (id)));
      _mm_storeu_si128 ((__m128i *) (q + b * QK), _mm512_cvtsepi32_epi8 (i0));
      _mm_storeu_si128 ((__m128i *) (q + b * QK + 16), _mm512_cvtsepi32_epi8 (i1));
      if (mode == MODE_SYM16)
        {
          xo[2 * b] = off * _mm512_reduce_add_epi32 (i0);
          xo[2 * b + 1] = off * _mm512_reduce_add_epi32 (i1);
        }
      else if (mode == MODE_SYM32)
        xo[b] = off * _mm512_reduce_add_epi32 (_mm512_add_epi32 (i0, i1));
      else
        xs[b] = d * (float) _mm512_reduce_add_epi32 (_mm512_add_epi32 (i0, i1));
    }
}

/* The packed layout.  For each group of 4 consecutive k of the K piece
 * (a "step"), 128 bytes: rows 0-15 of the panel, then rows 16-31, each row
 * 4 unsigned codes, so one aligned zmm load gives vpdpbusd its unsigned
 * operand for 16 rows.  Scales: wa[unit * NR + row], wb[block * NR + row].
 *
 * The stored blocks put 4 consecutive elements (or the bytes holding their
 * bits) in 4 consecutive bytes in every format, so unpacking is a 16 x 4
 * transpose of 32-bit words across 16 rows followed by the same bit
 * operations on every byte; no row is unpacked on its own first. */

/* 16 bytes at rp[r] + off for the 16 rows r, transposed: v[i] holds word i
 * of row r in lane r.  Loading rows (0, 4, 8, 12) into the 128-bit lanes of
 * a[0], (1, 5, 9, 13) into a[1], and so on makes the two unpack stages
 * produce the rows in natural order. */
UM_TARGET_AVX512_VNNI static UM_ALWAYS_INLINE void
load_t4 (const uint8_t *const *rp, size_t off, __m512i v[4])
{
  __m512i a[4], t0, t1, t2, t3;

  for (int i = 0; i < 4; i++)
    {
      __m512i z = _mm512_castsi128_si512 (_mm_loadu_si128 ((const __m128i *) (rp[i] + off)));
      z = _mm512_inserti32x4 (z, _mm_loadu_si128 ((const __m128i *) (rp[i + 4] + off)), 1);
      z = _mm512_inserti32x4 (z, _mm_loadu_si128 ((const __m128i *) (rp[i + 8] + off)), 2);
      a[i] = _mm512_inserti32x4 (z, _mm_loadu_si128 ((const __m128i *) (rp[i + 12] + off)), 3);
    }
  t0 = _mm512_unpacklo_epi32 (a[0], a[1]);
  t1 = _mm512_unpackhi_epi32 (a[0], a[1]);
  t2 = _mm512_unpacklo_epi32 (a[2], a[3]);
  t3 = _mm512_unpackhi_epi32 (a[2], a[3]);
  v[0] = _mm512_unpacklo_epi64 (t0, t2);
  v[1] = _mm512_unpackhi_epi64 (t0, t2);
  v[2] = _mm512_unpacklo_epi64 (t1, t3);
  v[3] = _mm512_unpackhi_epi64 (t1, t3);
}

/* The 32-bit words at rp[r] + off (plain loads: the rows may be any
 * distance apart, more than a gather's 32-bit offsets reach). */
UM_TARGET_AVX512_VNNI static UM_ALWAYS_INLINE __m512i
load_u32x16 (const uint8_t *const *rp, size_t off)
{
  uint32_t v[16];
  for (int r = 0; r < 16; r++)
    v[r] = load_u32 (rp[r] + off);
  return _mm512_loadu_si512 (v);
}

/* Halves in the low / high 16 bits of each lane -> floats (exact, like
 * um_f16_to_f32 (); NaN payloads aside, which give NaN outputs anyway). */
UM_TARGET_AVX512_VNNI static UM_ALWAYS_INLINE __m512
half_lo (__m512i v)
{
  return _mm512_cvtph_ps (_mm512_cvtepi32_epi16 (v));
}

UM_TARGET_AVX512_VNNI static UM_ALWAYS_INLINE __m512
half_hi (__m512i v)
{
  return _mm512_cvtph_ps (_mm512_cvtepi32_epi16 (_mm512_srli_epi32 (v, 16)));
}

/* 0x10 in byte b of each lane for each set bit b of the lane's value x
 * (0..15): the 5th bits of 4 consecutive Q5_0/Q5_1 elements. */
UM_TARGET_AVX512_VNNI static UM_ALWAYS_INLINE __m512i
spread4 (__m512i x)
{
  const __m512i tab = _mm512_set_epi32 (0x10101010, 0x10101000, 0x10100010, 0x10100000,
                                        0x10001010, 0x10001000, 0x10000010, 0x10000000,
                                        0x00101010, 0x00101000, 0x00100010, 0x00100000,
                                        0x00001010, 0x00001000, 0x00000010, 0x00000000);
  return _mm512_permutexvar_epi32 (_mm512_and_si512 (x, _mm512_set1_epi32 (15)), tab);
}

#define STEP(i, v) _mm512_store_si512 (pk + (size_t) (i) * 128, (v))
#define SET1(c) _mm512_set1_epi32 ((int) (c))

/* One half panel (16 rows, row r at rp[r]) of the stored blocks [0, ns)
 * counted from rp: codes to pk (this half's 64-byte slots), scales to
 * wa / wb (this half's 16 columns).  The float scales are the products
 * block_scales () computes (same operands, one rounding each). */
UM_TARGET_AVX512_VNNI static void
pack_half_avx512 (UmDType t, const uint8_t *const *rp, int64_t ns,
                  uint8_t *pk, float *wa, float *wb)
{
  const __m512i m4 = SET1 (0x0f0f0f0f);
  __m512i v[4], q[4];

  switch (t)
    {
    case UM_DTYPE_Q8_0:
      for (int64_t s = 0; s < ns; s++, pk += 8 * 128)
        {
          const size_t o = (size_t) s * sizeof (UmBlockQ8_0);
          _mm512_store_ps (wa + s * NR, half_lo (load_u32x16 (rp, o)));
          for (int h = 0; h < 2; h++)
            {
              load_t4 (rp, o + 2 + 16 * h, v);
              for (int i = 0; i < 4; i++)
                STEP (4 * h + i, _mm512_xor_si512 (v[i], SET1 (0x80808080)));
            }
        }
      break;
    case UM_DTYPE_Q4_0:
    case UM_DTYPE_Q4_1:
      for (int64_t s = 0; s < ns; s++, pk += 8 * 128)
        {
          const gboolean q40 = t == UM_DTYPE_Q4_0;
          const size_t o = (size_t) s * (q40 ? sizeof (UmBlockQ4_0) : sizeof (UmBlockQ4_1));
          const __m512i dm = load_u32x16 (rp, o);
          _mm512_store_ps (wa + s * NR, half_lo (dm));
          if (!q40)
            _mm512_store_ps (wb + s * NR, half_hi (dm));
          load_t4 (rp, o + (q40 ? 2 : 4), v);
          for (int i = 0; i < 4; i++)
            {
              STEP (i, _mm512_and_si512 (v[i], m4));
              STEP (i + 4, _mm512_and_si512 (_mm512_srli_epi32 (v[i], 4), m4));
            }
        }
      break;
    case UM_DTYPE_Q5_0:
    case UM_DTYPE_Q5_1:
      for (int64_t s = 0; s < ns; s++, pk += 8 * 128)
        {
          __m512i qh;
          size_t o;
          if (t == UM_DTYPE_Q5_0)
            {
              /* d, qh at bytes 2-5, qs at 6. */
              o = (size_t) s * sizeof (UmBlockQ5_0);
              load_t4 (rp, o, v);
              _mm512_store_ps (wa + s * NR, half_lo (v[0]));
              qh = _mm512_or_si512 (_mm512_srli_epi32 (v[0], 16), _mm512_slli_epi32 (v[1], 16));
              load_t4 (rp, o + 6, q);
            }
          else
            {
              /* d, m, qh at 4-7, qs at 8. */
              o = (size_t) s * sizeof (UmBlockQ5_1);
              load_t4 (rp, o, v);
              _mm512_store_ps (wa + s * NR, half_lo (v[0]));
              _mm512_store_ps (wb + s * NR, half_hi (v[0]));
              qh = v[1];
              load_t4 (rp, o + 8, q);
            }
          for (int i = 0; i < 4; i++)
            {
              STEP (i, _mm512_or_si512 (_mm512_and_si512 (q[i], m4),
                                        spread4 (_mm512_srli_epi32 (qh, 4 * i))));
              STEP (i + 4, _mm512_or_si512 (_mm512_and_si512 (_mm512_srli_epi32 (q[i], 4), m4),
                                            spread4 (_mm512_srli_epi32 (qh, 16 + 4 * i))));
            }
        }
      break;
    case UM_DTYPE_Q4_K:
    case UM_DTYPE_Q5_K:
      for (int64_t s = 0; s < ns; s++, pk += 64 * 128)
        {
          const gboolean q4 = t == UM_DTYPE_Q4_K;
          const size_t o = (size_t) s * (q4 ? sizeof (UmBlockQ4_K) : sizeof (UmBlockQ5_K));
          __m512i sc[2], mn[2], h[8];
          __m512 d, dmin;

          /* d, dmin and scales[12]: the 6-bit scales and mins as bytes
           * (um_quant_get_scale_min_k4 () for all eight at once). */
          load_t4 (rp, o, v);
          d = half_lo (v[0]);
          dmin = half_hi (v[0]);
          sc[0] = _mm512_and_si512 (v[1], SET1 (0x3f3f3f3f));
          sc[1] = _mm512_or_si512 (_mm512_and_si512 (v[3], m4),
                                   _mm512_slli_epi32 (_mm512_and_si512 (_mm512_srli_epi32 (v[1], 6), SET1 (0x03030303)), 4));
          mn[0] = _mm512_and_si512 (v[2], SET1 (0x3f3f3f3f));
          mn[1] = _mm512_or_si512 (_mm512_and_si512 (_mm512_srli_epi32 (v[3], 4), m4),
                                   _mm512_slli_epi32 (_mm512_and_si512 (_mm512_srli_epi32 (v[2], 6), SET1 (0x03030303)), 4));
          for (int j = 0; j < 8; j++)
            {
              const __m512 fs = _mm512_cvtepi32_ps (_mm512_and_si512 (_mm512_srli_epi32 (sc[j / 4], 8 * (j % 4)), SET1 (0xff)));
              const __m512 fm = _mm512_cvtepi32_ps (_mm512_and_si512 (_mm512_srli_epi32 (mn[j / 4], 8 * (j % 4)), SET1 (0xff)));
              _mm512_store_ps (wa + (s * 8 + j) * NR, _mm512_mul_ps (d, fs));
              _mm512_store_ps (wb + (s * 8 + j) * NR,
                               _mm512_castsi512_ps (_mm512_xor_si512 (_mm512_castps_si512 (_mm512_mul_ps (dmin, fm)),
                                                                      SET1 (0x80000000))));
            }
          if (!q4)
            {
              /* qh[32] at 16: bit 2g of qh[l] is the 5th bit of element
               * 64g + l, bit 2g + 1 that of element 64g + 32 + l. */
              load_t4 (rp, o + 16, h);
              load_t4 (rp, o + 32, h + 4);
            }
          for (int g = 0; g < 4; g++)
            for (int c = 0; c < 2; c++)
              {
                load_t4 (rp, o + (q4 ? 16 : 48) + 32 * g + 16 * c, q);
                for (int i = 0; i < 4; i++)
                  {
                    __m512i lo = _mm512_and_si512 (q[i], m4);
                    __m512i hi = _mm512_and_si512 (_mm512_srli_epi32 (q[i], 4), m4);
                    if (!q4)
                      {
                        const __m512i hb = h[4 * c + i];
                        const __m512i one = SET1 (0x01010101);
                        lo = _mm512_or_si512 (lo, _mm512_slli_epi32 (_mm512_and_si512 (_mm512_srli_epi32 (hb, 2 * g), one), 4));
                        hi = _mm512_or_si512 (hi, _mm512_slli_epi32 (_mm512_and_si512 (_mm512_srli_epi32 (hb, 2 * g + 1), one), 4));
                      }
                    STEP (16 * g + 4 * c + i, lo);
                    STEP (16 * g + 8 + 4 * c + i, hi);
                  }
              }
        }
      break;
    case UM_DTYPE_Q6_K:
      for (int64_t s = 0; s < ns; s++, pk += 64 * 128)
        {
          const size_t o = (size_t) s * sizeof (UmBlockQ6_K);
          const __m512 d = half_hi (load_u32x16 (rp, o + 206));   /* scales[14..15], d */
          const __m512i m30 = SET1 (0x30303030);
          __m512i l0[4], l1[4];

          /* 16 signed 8-bit scales at 192. */
          load_t4 (rp, o + 192, v);
          for (int j = 0; j < 16; j++)
            {
              const __m512i sj = _mm512_srai_epi32 (_mm512_slli_epi32 (v[j / 4], 24 - 8 * (j % 4)), 24);
              _mm512_store_ps (wa + (s * 16 + j) * NR, _mm512_mul_ps (d, _mm512_cvtepi32_ps (sj)));
            }
          /* Half hh, elements 128hh + l (l = 4i .. 4i + 3): ql word 16hh + i
           * (and 16hh + 8 + i for l + 32), qh word 8hh + i. */
          for (int hh = 0; hh < 2; hh++)
            for (int c = 0; c < 2; c++)
              {
                load_t4 (rp, o + 64 * hh + 16 * c, l0);
                load_t4 (rp, o + 64 * hh + 32 + 16 * c, l1);
                load_t4 (rp, o + 128 + 32 * hh + 16 * c, q);
                for (int i = 0; i < 4; i++)
                  {
                    const int st = 32 * hh + 4 * c + i;
                    /* 32-bit shifts move bits across bytes, but the 0x30
                     * masks keep only bits from the same byte. */
                    STEP (st, _mm512_or_si512 (_mm512_and_si512 (l0[i], m4),
                                               _mm512_and_si512 (_mm512_slli_epi32 (q[i], 4), m30)));
                    STEP (st + 8, _mm512_or_si512 (_mm512_and_si512 (l1[i], m4),
                                                   _mm512_and_si512 (_mm512_slli_epi32 (q[i], 2), m30)));
                    STEP (st + 16, _mm512_or_si512 (_mm512_and_si512 (_mm512_srli_epi32 (l0[i], 4), m4),
                                                    _mm512_and_si512 (q[i], m30)));
                    STEP (st + 24, _mm512_or_si512 (_mm512_and_si512 (_mm512_srli_epi32 (l1[i], 4), m4),
                                                    _mm512_and_si512 (_mm512_srli_epi32 (q[i], 2), m30)));
                  }
              }
        }
      break;
    case UM_DTYPE_F32:
    case UM_DTYPE_F16:
    case UM_DTYPE_BF16:
    case UM_DTYPE_I32:
    case UM_DTYPE_N_TYPES:
    default:
      g_assert_not_reached ();
    }
}

#undef STEP
#undef SET1

/* Unpacks rows [j0, j0 + NR) of K piece [k0, k0 + kc).  Rows at or past n
 * repeat row n - 1: their lanes compute garbage that is never stored. */
UM_TARGET_AVX512_VNNI static void
pack_panel_avx512 (UmDType t, const QType *qt, const uint8_t *w, size_t row_bytes,
                   int64_t n, int64_t j0, int64_t k0, int64_t kc,
                   uint8_t *pk, float *wa, float *wb)
{
  const size_t off = (size_t) (k0 / qt->block) * qt->block_bytes;

  for (int half = 0; half < NR / 16; half++)
    {
      const uint8_t *rp[16];
      for (int r = 0; r < 16; r++)
        rp[r] = w + (size_t) MIN (j0 + 16 * half + r, n - 1) * row_bytes + off;
      pack_half_avx512 (t, rp, kc / qt->block, pk + 64 * half, wa + 16 * half, wb + 16 * half);
    }
}

/* One micro-tile: NR rows x nt tokens over the K piece's nblk blocks of 32,
 * continuing the running sums in out (first: start from 0). */
UM_TARGET_AVX512_VNNI static UM_ALWAYS_INLINE void
tile_kernel (const int nt, const Mode mode,
             const uint8_t *pk, const float *wa, const float *wb, int64_t nblk,
             const int8_t *xq, int64_t ldx, const float *xd, const void *xc, int64_t ldb,
             float *out, int64_t ldo, __mmask16 m0, __mmask16 m1, gboolean first)
{
  const int32_t *xo = xc;
  const float *xs = xc;
  const int ub = units_per_block32 (mode);
  __m512 f0[NT], f1[NT];
  __m512i c0[NT], c1[NT];

#pragma GCC unroll 8
  for (int t = 0; t < nt; t++)
    {
      f0[t] = first ? _mm512_setzero_ps () : _mm512_maskz_loadu_ps (m0, out + t * ldo);
      f1[t] = first ? _mm512_setzero_ps () : _mm512_maskz_loadu_ps (m1, out + t * ldo + 16);
    }

  for (int64_t b = 0; b < nblk; b++)
    {
      const uint8_t *wp = pk + b * 8 * 128;

#pragma GCC unroll 8
      for (int t = 0; t < nt; t++)
        c0[t] = c1[t] = _mm512_setzero_si512 ();

#pragma GCC unroll 8
      for (int s = 0; s < 8; s++)
        {
          const __m512i w0 = _mm512_load_si512 (wp + s * 128);
          const __m512i w1 = _mm512_load_si512 (wp + s * 128 + 64);

#pragma GCC unroll 8
          for (int t = 0; t < nt; t++)
            {
              const __m512i xb = _mm512_set1_epi32 ((int) load_u32 (xq + t * ldx + b * QK + 4 * s));
              c0[t] = _mm512_dpbusd_epi32 (c0[t], w0, xb);
              c1[t] = _mm512_dpbusd_epi32 (c1[t], w1, xb);
            }

          if ((mode == MODE_SYM16 && s % 4 == 3) || s == 7)
            {
              /* End of a unit: apply its scales (step 3 of the header). */
              const int64_t u = b * ub + (mode == MODE_SYM16 ? s / 4 : 0);
              const __m512 a0 = _mm512_load_ps (wa + u * NR);
              const __m512 a1 = _mm512_load_ps (wa + u * NR + 16);

#pragma GCC unroll 8
              for (int t = 0; t < nt; t++)
                {
                  const __m512 dx = _mm512_set1_ps (xd[t * ldb + b]);
                  if (mode != MODE_MIN32)
                    {
                      const __m512i o = _mm512_set1_epi32 (xo[t * ldb * ub + u]);
                      c0[t] = _mm512_sub_epi32 (c0[t], o);
                      c1[t] = _mm512_sub_epi32 (c1[t], o);
                    }
                  f0[t] = _mm512_fmadd_ps (_mm512_cvtepi32_ps (c0[t]), _mm512_mul_ps (a0, dx), f0[t]);
                  f1[t] = _mm512_fmadd_ps (_mm512_cvtepi32_ps (c1[t]), _mm512_mul_ps (a1, dx), f1[t]);
                  c0[t] = c1[t] = _mm512_setzero_si512 ();
                }
              if (mode == MODE_MIN32)
                {
                  const __m512 b0 = _mm512_load_ps (wb + b * NR);
                  const __m512 b1 = _mm512_load_ps (wb + b * NR + 16);
#pragma GCC unroll 8
                  for (int t = 0; t < nt; t++)
                    {
                      const __m512 s_ = _mm512_set1_ps (xs[t * ldb + b]);
                      f0[t] = _mm512_fmadd_ps (b0, s_, f0[t]);
                      f1[t] = _mm512_fmadd_ps (b1, s_, f1[t]);
                    }
                }
            }
        }
    }

#pragma GCC unroll 8
  for (int t = 0; t < nt; t++)
    {
      _mm512_mask_storeu_ps (out + t * ldo, m0, f0[t]);
      _mm512_mask_storeu_ps (out + t * ldo + 16, m1, f1[t]);
    }
}

#define KERNEL_MODE(mode_)                                                       \
  switch (nt)                                                                    \
    {                                                                            \
    case 1: tile_kernel (1, mode_, pk, wa, wb, nblk, xq, ldx, xd, xc, ldb, out, ldo, m0, m1, first); break; \
    case 2: tile_kernel (2, mode_, pk, wa, wb, nblk, xq, ldx, xd, xc, ldb, out, ldo, m0, m1, first); break; \
    case 3: tile_kernel (3, mode_, pk, wa, wb, nblk, xq, ldx, xd, xc, ldb, out, ldo, m0, m1, first); break; \
    case 4: tile_kernel (4, mode_, pk, wa, wb, nblk, xq, ldx, xd, xc, ldb, out, ldo, m0, m1, first); break; \
    case 5: tile_kernel (5, mode_, pk, wa, wb, nblk, xq, ldx, xd, xc, ldb, out, ldo, m0, m1, first); break; \
    default: tile_kernel (NT, mode_, pk, wa, wb, nblk, xq, ldx, xd, xc, ldb, out, ldo, m0, m1, first); break; \
    }

/* Not inlined into its callers: one copy of each specialisation. */
UM_TARGET_AVX512_VNNI static void
tile_dispatch (int nt, Mode mode,
               const uint8_t *pk, const float *wa, const float *wb, int64_t nblk,
               const int8_t *xq, int64_t ldx, const float *xd, const void *xc, int64_t ldb,
               float *out, int64_t ldo, __mmask16 m0, __mmask16 m1, gboolean first)
{
  if (mode == MODE_SYM32)
    KERNEL_MODE (MODE_SYM32)
  else if (mode == MODE_SYM16)
    KERNEL_MODE (MODE_SYM16)
  else
    KERNEL_MODE (MODE_MIN32)
}

typedef struct {
  UmDType       t;
  QType         qt;
  const uint8_t *w;
  size_t        row_bytes;
  int64_t       n, k, m;
  const float  *x;
  float        *out;
  uint8_t      *base;
  Layout        l;
} Job;

/* Software prefetch of the weight bytes of the next (panel, K piece): the
 * piece of each row is a separate short run (rows are k apart), too many
 * streams for the hardware prefetchers once the weights are beyond the L3,
 * and the unpacking would wait for memory.  The lines are requested a few
 * at a time between micro-tiles, into L2. */
typedef struct {
  const uint8_t *row0;     /* first row of the panel + offset of the piece */
  size_t         row_bytes, len;
  int64_t        rows, lines_per_row, r, line;
} Prefetch;

static void
prefetch_init (Prefetch *pf, const Job *job, int64_t p, int64_t k0)
{
  const size_t off = (size_t) (k0 / job->qt.block) * job->qt.block_bytes;

  pf->len = (size_t) (MIN ((int64_t) KC, job->k - k0) / job->qt.block) * job->qt.block_bytes;
  pf->row_bytes = job->row_bytes;
  pf->rows = MIN ((int64_t) NR, job->n - p * NR);
  pf->row0 = job->w + (size_t) (p * NR) * job->row_bytes + off;
  /* An address every 64 bytes plus the last byte: every line of the
   * piece, wherever it starts. */
  pf->lines_per_row = (int64_t) (pf->len + 63) / 64 + 1;
  pf->r = pf->line = 0;
}

UM_TARGET_AVX512_VNNI static void
prefetch_some (Prefetch *pf, int64_t count)
{
  for (; count > 0 && pf->r < pf->rows; count--)
    {
      const size_t at = MIN ((size_t) (64 * pf->line), pf->len - 1);
      _mm_prefetch ((const char *) (pf->row0 + (size_t) pf->r * pf->row_bytes + at), _MM_HINT_T1);
      if (++pf->line == pf->lines_per_row)
        {
          pf->line = 0;
          pf->r++;
        }
    }
}

/* All K pieces of one panel, for all tokens; prefetches the pieces after
 * them, up to the first of panel next_p (-1: none). */
UM_TARGET_AVX512_VNNI static void
panel_avx512 (const Job *job, int64_t p, int64_t next_p, uint8_t *tb)
{
  const int64_t j0 = p * NR, rows = MIN ((int64_t) NR, job->n - j0);
  const int64_t nb = job->k / QK, ub = units_per_block32 (job->qt.mode);
  const int64_t n_groups = (job->m + NT - 1) / NT;
  const __mmask16 m0 = (__mmask16) (rows >= 16 ? 0xffff : (1u << rows) - 1);
  const __mmask16 m1 = (__mmask16) (rows >= 32 ? 0xffff : rows <= 16 ? 0 : (1u << (rows - 16)) - 1);
  const int8_t *xq = (const int8_t *) (job->base + job->l.x_q);
  const float *xd = (const float *) (job->base + job->l.x_d);
  const uint8_t *xc = job->base + job->l.x_c;
  uint8_t *pk = tb + job->l.t_pk;
  float *wa = (float *) (tb + job->l.t_a), *wb = (float *) (tb + job->l.t_b);

  for (int64_t k0 = 0; k0 < job->k; k0 += KC)
    {
      const int64_t kc = MIN ((int64_t) KC, job->k - k0);
      Prefetch pf = { 0 };
      int64_t per_group;

      if (k0 + KC < job->k)
        prefetch_init (&pf, job, p, k0 + KC);
      else if (next_p >= 0)
        prefetch_init (&pf, job, next_p, 0);
      per_group = (pf.rows * pf.lines_per_row + n_groups - 1) / n_groups;

      pack_panel_avx512 (job->t, &job->qt, job->w, job->row_bytes, job->n, j0, k0, kc, pk, wa, wb);
      for (int64_t t0 = 0; t0 < job->m; t0 += NT)
        {
          prefetch_some (&pf, per_group);
          tile_dispatch ((int) MIN ((int64_t) NT, job->m - t0), job->qt.mode,
                         pk, wa, wb, kc / QK,
                         xq + t0 * job->k + k0, job->k,
                         xd + t0 * nb + k0 / QK, xc + 4 * (t0 * nb * ub + k0 / QK * ub), nb,
                         job->out + t0 * job->n + j0, job->n, m0, m1, k0 == 0);
        }
    }
}

static void
quantize_rows (void *ctx, int64_t b, int64_t e, int tid)
{
  Job *job = ctx;
  const int64_t nb = job->k / QK, ub = units_per_block32 (job->qt.mode);
  (void) tid;
  for (int64_t i = b; i < e; i++)
    quantize_x_row_avx512 (job->x + i * job->k, job->k, job->qt.mode, job->qt.off,
                           (int8_t *) (job->base + job->l.x_q) + i * job->k,
                           (float *) (job->base + job->l.x_d) + i * nb,
                           job->base + job->l.x_c + 4 * (size_t) (i * nb * ub));
}

/* Chunks are runs of consecutive panels starting at multiples of the
 * chunk, so that a thread knows which panel it does next (to prefetch it). */
static void
run_panels (void *ctx, int64_t b, int64_t e, int tid)
{
  Job *job = ctx;
  const int64_t n_panels = (job->n + NR - 1) / NR;
  uint8_t *tb = job->base + job->l.shared + (size_t) tid * job->l.per_thread;

  for (int64_t p = b; p < e; p++)
    panel_avx512 (job, p, (p + 1 < e && p + 1 < n_panels) ? p + 1 : -1, tb);
}

static void
run_job (Job *job)
{
  const int64_t n_panels = (job->n + NR - 1) / NR;
  /* Small enough chunks to balance the threads (and take a late one's share). */
  const int64_t chunk = CLAMP (n_panels / (8 * job->l.n_threads), (int64_t) 1, (int64_t) 16);

  /* Every thread needs all of x: it is ready when its loop returns. */
  um_pool_for (job->m, 4, job->l.n_threads, quantize_rows, job);
  um_pool_for (n_panels, chunk, job->l.n_threads, run_panels, job);
}

#endif /* UM_HAVE_X86_SIMD */

gboolean
um_qgemm_vnni (UmDType t, const void *w, int64_t n, int64_t k,
               const float *x, int64_t m, float *out, void *scratch, size_t scratch_bytes)
{
#if UM_HAVE_X86_SIMD
  Job job;
  size_t need;
  void *owned = NULL;

  if (!check_args (t, w, n, k, x, m, out, &job.qt))
    return FALSE;
  if (um_cpu_isa () < UM_ISA_AVX512_VNNI)
    return FALSE;
  if (m == 0 || n == 0)
    return TRUE;
  if (k == 0)
    {
      zero_out (out, m, n);
      return TRUE;
    }
  if (!layout_get (&job.qt, n, k, m, &job.l))
    return FALSE;
  need = job.l.shared + (size_t) job.l.n_threads * job.l.per_thread + 64;
  if (scratch == NULL || scratch_bytes < need)
    {
      scratch = owned = g_try_malloc (need);
      if (owned == NULL)
        return FALSE;
    }
  job.t = t;
  job.w = w;
  job.row_bytes = (size_t) (k / job.qt.block) * job.qt.block_bytes;
  job.n = n;
  job.k = k;
  job.m = m;
  job.x = x;
  job.out = out;
  job.base = (uint8_t *) (((uintptr_t) scratch + 63) & ~(uintptr_t) 63);
  run_job (&job);
  g_free (owned);
  return TRUE;
#else
  return FALSE;
#endif
}

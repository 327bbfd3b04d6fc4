/* um-qgemm-avx2.c — the 8-bit integer weight product (um-qgemm.c defines
 * its arithmetic) for CPUs with AVX2, and with AVX-VNNI's 256-bit vpdpbusd
 * where the CPU has it (Alder Lake and later, Sapphire Rapids, Zen 5).
 *
 * Same operands, same float operations in the same order as
 * um_qgemm_ref (): x is rounded per block of 32 exactly as there, each
 * unit's integer dot product P (or P and S) is exact, and the scales are
 * applied per unit with the reference's fmas.  So, like the AVX-512 VNNI
 * path, it agrees with the reference bit for bit on finite data; the tests
 * rely only on the derived bound.
 *
 * The work is shaped like the VNNI path's, for 16 ymm registers:
 *  - x is rounded once per call into scratch all threads read;
 *  - threads take panels of 16 weight rows; per panel and K piece of 1024
 *    the weights are unpacked to byte codes laid out so that one aligned
 *    ymm holds 4 consecutive k of 8 rows (rows 0-7, then 8-15, per step of
 *    4 k: 64 bytes), plus per-(row, unit) float scales; the 16 KiB of codes
 *    stay in L1 while every token group sweeps them;
 *  - a micro-tile is 16 rows × 2-3 tokens: per step, two weight loads and
 *    one 4-byte broadcast of x per token feed vpdpbusd (VNNI), or
 *    vpmaddubsw whose int16 sums are widened by vpmaddwd only every few
 *    steps (see um-qgemm-avx2-tile.h for why that is exact).  The int32
 *    sums of a unit become floats once per unit.
 * Token tiles are 3 wide where the registers allow (VNNI, 4-bit codes) and
 * 2 wide otherwise; the running float sums come out as 16-float pieces of
 * output rows (masked at the edge of the matrix). */
#include "um-gemm.h"

#include "um-cpu-isa.h"
#include "um-pool.h"
#include "um-quant.h"
#include "um-qgemm-private.h"

#include <float.h>
#include <string.h>

#if UM_HAVE_X86_SIMD
#include <immintrin.h>
#endif

/* Weight rows per panel (two ymm of 8). */
#define NR 16
/* Most tokens per micro-tile. */
#define NT_MAX 3
/* K piece unpacked at a time: 16 rows × 1024 codes = 16 KiB, half of the
 * smallest L1d of the class (a multiple of 256, the K-quant block). */
#define KC 1024
/* The same 16 KiB for KIND_W's 2-byte codes. */
#define KC_W 512

enum { KIND_U, KIND_W };

/* Tokens per micro-tile: registers for 2 × nt int32 sums, 2 × nt float
 * sums, 2 weights and a broadcast, plus 2 × nt int16 sums where they are
 * widened more than once per unit (5- and 6-bit codes): 16 ymm in all.
 * KIND_W has no int16 sums. */
#define NT_OF(kind, g) ((kind) == KIND_W || (g) == 0 || (g) == 8 ? 3 : 2)

typedef struct {
  size_t x_q, x_d, x_c;          /* offsets of the shared activation arrays */
  size_t shared;
  size_t t_pk, t_a, t_b;         /* offsets inside one thread's area */
  size_t per_thread;
  int    n_threads;
} Layout;

/* wide: KIND_W (see use_wide ()): x as int16, codes as int16 pieces of KC_W. */
static gboolean
layout_get (const QType *qt, gboolean wide, int64_t n, int64_t k, int64_t m, Layout *l)
{
  const uint64_t nb = (uint64_t) k / QK, nu = nb * (uint64_t) units_per_block32 (qt->mode);
  const size_t cb = wide ? 2 : 1;
  const size_t kc = (size_t) MIN (k, (int64_t) (wide ? KC_W : KC));
  const int64_t n_panels = (n + NR - 1) / NR;

  if ((uint64_t) m > (G_MAXSIZE / 4) / (2 * (uint64_t) k + 8 * nb + 64))
    return FALSE;
  l->x_q = 0;
  l->x_d = align64 ((size_t) m * (size_t) k * cb);
  l->x_c = l->x_d + align64 ((size_t) m * (size_t) nb * sizeof (float));
  l->shared = l->x_c + align64 ((size_t) m * (size_t) nu * 4);
  l->t_pk = 0;
  l->t_a = align64 ((size_t) NR * kc * cb);
  l->t_b = l->t_a + align64 (kc / 16 * NR * sizeof (float));
  l->per_thread = l->t_b + align64 (kc / QK * NR * sizeof (float));
  l->n_threads = (int) MAX ((int64_t) 1, MIN ((int64_t) um_pool_max_threads (), n_panels));
  return TRUE;
}

/* Q8_0 without AVX-VNNI multiplies int16 codes by int16 activations with
 * vpmaddwd (KIND_W): see um-qgemm-avx2-tile.h. */
static gboolean
use_wide (UmDType t)
{
  return t == UM_DTYPE_Q8_0 && !um_cpu_has_avx_vnni ();
}

size_t
um_qgemm_avx2_scratch_bytes (UmDType t, int64_t n, int64_t k, int64_t m)
{
  QType qt;
  Layout l;

  if (!qtype_get (t, &qt) || n <= 0 || k <= 0 || m <= 0 || n > G_MAXINT || k > G_MAXINT ||
      m > G_MAXINT || k % qt.block != 0 || !layout_get (&qt, use_wide (t), n, k, m, &l))
    return 0;
  return l.shared + (size_t) l.n_threads * l.per_thread + 64;
}

#if UM_HAVE_X86_SIMD

#define UM_ALWAYS_INLINE inline __attribute__ ((always_inline))

/* ---- activations ------------------------------------------------------------ */

UM_TARGET_AVX2 static UM_ALWAYS_INLINE int
hsum_epi32 (__m256i v)
{
  __m128i s = _mm_add_epi32 (_mm256_castsi256_si128 (v), _mm256_extracti128_si256 (v, 1));
  s = _mm_add_epi32 (s, _mm_shuffle_epi32 (s, _MM_SHUFFLE (1, 0, 3, 2)));
  s = _mm_add_epi32 (s, _mm_shuffle_epi32 (s, _MM_SHUFFLE (2, 3, 0, 1)));
  return _mm_cvtsi128_si32 (s);
}

/* Step 1 of um-qgemm.c's header, vectorised; bit-identical to its
 * reference for finite x.  The codes go to q as int8, or as int16 where
 * wide (KIND_W).  Also stores per unit o · sum q (symmetric types, int32;
 * off 0 for KIND_W) or per block dx · (float) sum q (types with mins) in
 * xc. */
UM_TARGET_AVX2 static void
quantize_x_row_avx2 (const float *x, int64_t k, Mode mode, int off, gboolean wide, void *qv, float *xd, void *xc)
{
  int8_t *q = qv;
  int16_t *q16 = qv;
  const __m256 abs_mask = _mm256_castsi256_ps (_mm256_set1_epi32 (0x7fffffff));
  const __m256i order = _mm256_setr_epi32 (0, 4, 1, 5, 2, 6, 3, 7);
  int32_t *xo = xc;
  float *xs = xc;

  for (int64_t b = 0; b < k / QK; b++)
    {
      __m256 v[4], mx;
      __m128 m4;
      __m256i iv[4], p;
      float amax, d, id;

      for (int i = 0; i < 4; i++)
        v[i] = _mm256_loadu_ps (x + b * QK + 8 * i);
      mx = _mm256_max_ps (_mm256_max_ps (_mm256_and_ps (v[0], abs_mask), _mm256_and_ps (v[1], abs_mask)),
                          _mm256_max_ps (_mm256_and_ps (v[2], abs_mask), _mm256_and_ps (v[3], abs_mask)));
      m4 = _mm_max_ps (_mm256_castps256_ps128 (mx), _mm256_extractf128_ps (mx, 1));
      m4 = _mm_max_ps (m4, _mm_movehl_ps (m4, m4));
      m4 = _mm_max_ss (m4, _mm_movehdup_ps (m4));
      amax = _mm_cvtss_f32 (m4);
      d = amax / 127.0f;
      if (!(d >= FLT_MIN))
        {
          xd[b] = 0.0f;
          if (wide)
            {
              _mm256_storeu_si256 ((__m256i *) (q16 + b * QK), _mm256_setzero_si256 ());
              _mm256_storeu_si256 ((__m256i *) (q16 + b * QK + 16), _mm256_setzero_si256 ());
            }
          else
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
      for (int i = 0; i < 4; i++)
        iv[i] = _mm256_cvtps_epi32 (_mm256_mul_ps (v[i], _mm256_set1_ps (id)));
      /* |q| <= 127: the saturating packs keep every value. */
      if (wide)
        {
          /* packs works per 128-bit lane: 0xd8 puts the quarters back in order. */
          _mm256_storeu_si256 ((__m256i *) (q16 + b * QK),
                               _mm256_permute4x64_epi64 (_mm256_packs_epi32 (iv[0], iv[1]), 0xd8));
          _mm256_storeu_si256 ((__m256i *) (q16 + b * QK + 16),
                               _mm256_permute4x64_epi64 (_mm256_packs_epi32 (iv[2], iv[3]), 0xd8));
        }
      else
        {
          p = _mm256_packs_epi16 (_mm256_packs_epi32 (iv[0], iv[1]), _mm256_packs_epi32 (iv[2], iv[3]));
          _mm256_storeu_si256 ((__m256i *) (q + b * QK), _mm256_permutevar8x32_epi32 (p, order));
        }
      if (mode == MODE_SYM16)
        {
          xo[2 * b] = off * hsum_epi32 (_mm256_add_epi32 (iv[0], iv[1]));
          xo[2 * b + 1] = off * hsum_epi32 (_mm256_add_epi32 (iv[2], iv[3]));
        }
      else if (mode == MODE_SYM32)
        xo[b] = off * hsum_epi32 (_mm256_add_epi32 (_mm256_add_epi32 (iv[0], iv[1]),
                                                    _mm256_add_epi32 (iv[2], iv[3])));
      else
        xs[b] = d * (float) hsum_epi32 (_mm256_add_epi32 (_mm256_add_epi32 (iv[0], iv[1]),
                                                          _mm256_add_epi32 (iv[2], iv[3])));
    }
}

/* ---- weights ---------------------------------------------------------------- */

/* 16 bytes at rp[r] + off for the 8 rows r, transposed: v[i] holds word i
 * of row r in lane r (rows 0-3 and 4-7 in the two 128-bit lanes, so the
 * unpacks leave them in order). */
UM_TARGET_AVX2 static UM_ALWAYS_INLINE void
load_t4 (const uint8_t *const *rp, size_t off, __m256i v[4])
{
  __m256i a[4], t0, t1, t2, t3;

  for (int i = 0; i < 4; i++)
    a[i] = _mm256_inserti128_si256 (_mm256_castsi128_si256 (_mm_loadu_si128 ((const __m128i *) (rp[i] + off))),
                                    _mm_loadu_si128 ((const __m128i *) (rp[i + 4] + off)), 1);
  t0 = _mm256_unpacklo_epi32 (a[0], a[1]);
  t1 = _mm256_unpackhi_epi32 (a[0], a[1]);
  t2 = _mm256_unpacklo_epi32 (a[2], a[3]);
  t3 = _mm256_unpackhi_epi32 (a[2], a[3]);
  v[0] = _mm256_unpacklo_epi64 (t0, t2);
  v[1] = _mm256_unpackhi_epi64 (t0, t2);
  v[2] = _mm256_unpacklo_epi64 (t1, t3);
  v[3] = _mm256_unpackhi_epi64 (t1, t3);
}

UM_TARGET_AVX2 static UM_ALWAYS_INLINE __m256i
load_u32x8 (const uint8_t *const *rp, size_t off)
{
  uint32_t v[8];
  for (int r = 0; r < 8; r++)
    v[r] = load_u32 (rp[r] + off);
  return _mm256_loadu_si256 ((const __m256i *) v);
}

/* The halves in the low 16 bits of each lane -> floats (exact, like
 * um_f16_to_f32 (); NaN payloads aside, which give NaN outputs anyway). */
UM_TARGET_AVX2 static UM_ALWAYS_INLINE __m256
half_lo (__m256i v)
{
  const __m256i lo = _mm256_and_si256 (v, _mm256_set1_epi32 (0xffff));
  /* Each lane <= 0xffff: the unsigned saturating pack keeps it. */
  const __m256i p = _mm256_permute4x64_epi64 (_mm256_packus_epi32 (lo, lo), 0x08);
  return _mm256_cvtph_ps (_mm256_castsi256_si128 (p));
}

UM_TARGET_AVX2 static UM_ALWAYS_INLINE __m256
half_hi (__m256i v)
{
  return half_lo (_mm256_srli_epi32 (v, 16));
}

/* 0x10 in byte b of each lane for each set bit b of the lane's low 4 bits:
 * the 5th bits of 4 consecutive Q5_0/Q5_1 elements. */
UM_TARGET_AVX2 static UM_ALWAYS_INLINE __m256i
spread4 (__m256i x)
{
  const __m256i tab_lo = _mm256_setr_epi32 (0x00000000, 0x00000010, 0x00001000, 0x00001010,
                                            0x00100000, 0x00100010, 0x00101000, 0x00101010);
  const __m256i tab_hi = _mm256_or_si256 (tab_lo, _mm256_set1_epi32 (0x10000000));
  const __m256 lo = _mm256_castsi256_ps (_mm256_permutevar8x32_epi32 (tab_lo, x));
  const __m256 hi = _mm256_castsi256_ps (_mm256_permutevar8x32_epi32 (tab_hi, x));
  /* Bit 3 picks the table, moved to the sign bit for the blend. */
  return _mm256_castps_si256 (_mm256_blendv_ps (lo, hi, _mm256_castsi256_ps (_mm256_slli_epi32 (x, 28))));
}

#define STEP(i, v) _mm256_store_si256 ((__m256i *) (pk + (size_t) (i) * 64), (v))
#define SET1(c) _mm256_set1_epi32 ((int) (c))

/* One half panel (8 rows, row r at rp[r]) of the stored blocks [0, ns)
 * counted from rp: codes to pk (this half's 32-byte slots), scales to wa /
 * wb (this half's 8 columns).  The float scales are the products
 * um-qgemm.c's block_scales () computes (same operands, one rounding each).
 * Q8_0's codes are q + 128 for vpdpbusd, and int16 q for KIND_W. */
UM_TARGET_AVX2 static void
pack_half_avx2 (UmDType t, int kind, const uint8_t *const *rp, int64_t ns,
                uint8_t *pk, float *wa, float *wb)
{
  const __m256i m4 = SET1 (0x0f0f0f0f);
  __m256i v[4], q[4];

  switch (t)
    {
    case UM_DTYPE_Q8_0:
      if (kind == KIND_W)
        {
          /* int16 codes, 2 consecutive k of a row per lane: 16 steps a block. */
          for (int64_t s = 0; s < ns; s++, pk += 16 * 64)
            {
              const size_t o = (size_t) s * sizeof (UmBlockQ8_0);
              _mm256_store_ps (wa + s * NR, half_lo (load_u32x8 (rp, o)));
              for (int h = 0; h < 2; h++)
                {
                  load_t4 (rp, o + 2 + 16 * h, v);
                  for (int i = 0; i < 4; i++)
                    {
                      /* Lane: bytes k0..k3; as int16 words [k1:k0] [k3:k2]. */
                      const __m256i e = _mm256_srai_epi16 (_mm256_slli_epi16 (v[i], 8), 8);  /* k0, k2 */
                      const __m256i od = _mm256_srai_epi16 (v[i], 8);                         /* k1, k3 */
                      STEP (8 * h + 2 * i, _mm256_blend_epi16 (e, _mm256_slli_epi32 (od, 16), 0xaa));
                      STEP (8 * h + 2 * i + 1, _mm256_blend_epi16 (_mm256_srli_epi32 (e, 16), od, 0xaa));
                    }
                }
            }
          break;
        }
      for (int64_t s = 0; s < ns; s++, pk += 8 * 64)
        {
          const size_t o = (size_t) s * sizeof (UmBlockQ8_0);
          const __m256i bias = SET1 (0x80808080);
          _mm256_store_ps (wa + s * NR, half_lo (load_u32x8 (rp, o)));
          for (int h = 0; h < 2; h++)
            {
              load_t4 (rp, o + 2 + 16 * h, v);
              for (int i = 0; i < 4; i++)
                STEP (4 * h + i, _mm256_xor_si256 (v[i], bias));
            }
        }
      break;
    case UM_DTYPE_Q4_0:
    case UM_DTYPE_Q4_1:
      for (int64_t s = 0; s < ns; s++, pk += 8 * 64)
        {
          const gboolean q40 = t == UM_DTYPE_Q4_0;
          const size_t o = (size_t) s * (q40 ? sizeof (UmBlockQ4_0) : sizeof (UmBlockQ4_1));
          const __m256i dm = load_u32x8 (rp, o);
          _mm256_store_ps (wa + s * NR, half_lo (dm));
          if (!q40)
            _mm256_store_ps (wb + s * NR, half_hi (dm));
          load_t4 (rp, o + (q40 ? 2 : 4), v);
          for (int i = 0; i < 4; i++)
            {
              STEP (i, _mm256_and_si256 (v[i], m4));
              STEP (i + 4, _mm256_and_si256 (_mm256_srli_epi32 (v[i], 4), m4));
            }
        }
      break;
    case UM_DTYPE_Q5_0:
    case UM_DTYPE_Q5_1:
      for (int64_t s = 0; s < ns; s++, pk += 8 * 64)
        {
          __m256i qh;
          size_t o;
          if (t == UM_DTYPE_Q5_0)
            {
              /* d, qh at bytes 2-5, qs at 6. */
              o = (size_t) s * sizeof (UmBlockQ5_0);
              load_t4 (rp, o, v);
              _mm256_store_ps (wa + s * NR, half_lo (v[0]));
              qh = _mm256_or_si256 (_mm256_srli_epi32 (v[0], 16), _mm256_slli_epi32 (v[1], 16));
              load_t4 (rp, o + 6, q);
            }
          else
            {
              /* d, m, qh at 4-7, qs at 8. */
              o = (size_t) s * sizeof (UmBlockQ5_1);
              load_t4 (rp, o, v);
              _mm256_store_ps (wa + s * NR, half_lo (v[0]));
              _mm256_store_ps (wb + s * NR, half_hi (v[0]));
              qh = v[1];
              load_t4 (rp, o + 8, q);
            }
          for (int i = 0; i < 4; i++)
            {
              const __m256i h_lo = _mm256_and_si256 (_mm256_srli_epi32 (qh, 4 * i), SET1 (15));
              const __m256i h_hi = _mm256_and_si256 (_mm256_srli_epi32 (qh, 16 + 4 * i), SET1 (15));
              STEP (i, _mm256_or_si256 (_mm256_and_si256 (q[i], m4), spread4 (h_lo)));
              STEP (i + 4, _mm256_or_si256 (_mm256_and_si256 (_mm256_srli_epi32 (q[i], 4), m4), spread4 (h_hi)));
            }
        }
      break;
    case UM_DTYPE_Q4_K:
    case UM_DTYPE_Q5_K:
      for (int64_t s = 0; s < ns; s++, pk += 64 * 64)
        {
          const gboolean q4 = t == UM_DTYPE_Q4_K;
          const size_t o = (size_t) s * (q4 ? sizeof (UmBlockQ4_K) : sizeof (UmBlockQ5_K));
          __m256i sc[2], mn[2], h[8];
          __m256 d, dmin;

          /* d, dmin and scales[12]: the 6-bit scales and mins as bytes
           * (um_quant_get_scale_min_k4 () for all eight at once). */
          load_t4 (rp, o, v);
          d = half_lo (v[0]);
          dmin = half_hi (v[0]);
          sc[0] = _mm256_and_si256 (v[1], SET1 (0x3f3f3f3f));
          sc[1] = _mm256_or_si256 (_mm256_and_si256 (v[3], m4),
                                   _mm256_slli_epi32 (_mm256_and_si256 (_mm256_srli_epi32 (v[1], 6), SET1 (0x03030303)), 4));
          mn[0] = _mm256_and_si256 (v[2], SET1 (0x3f3f3f3f));
          mn[1] = _mm256_or_si256 (_mm256_and_si256 (_mm256_srli_epi32 (v[3], 4), m4),
                                   _mm256_slli_epi32 (_mm256_and_si256 (_mm256_srli_epi32 (v[2], 6), SET1 (0x03030303)), 4));
          for (int j = 0; j < 8; j++)
            {
              const __m256 fs = _mm256_cvtepi32_ps (_mm256_and_si256 (_mm256_srli_epi32 (sc[j / 4], 8 * (j % 4)), SET1 (0xff)));
              const __m256 fm = _mm256_cvtepi32_ps (_mm256_and_si256 (_mm256_srli_epi32 (mn[j / 4], 8 * (j % 4)), SET1 (0xff)));
              _mm256_store_ps (wa + (s * 8 + j) * NR, _mm256_mul_ps (d, fs));
              _mm256_store_ps (wb + (s * 8 + j) * NR,
                               _mm256_castsi256_ps (_mm256_xor_si256 (_mm256_castps_si256 (_mm256_mul_ps (dmin, fm)),
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
                    __m256i lo = _mm256_and_si256 (q[i], m4);
                    __m256i hi = _mm256_and_si256 (_mm256_srli_epi32 (q[i], 4), m4);
                    if (!q4)
                      {
                        const __m256i hb = h[4 * c + i];
                        const __m256i one = SET1 (0x01010101);
                        lo = _mm256_or_si256 (lo, _mm256_slli_epi32 (_mm256_and_si256 (_mm256_srli_epi32 (hb, 2 * g), one), 4));
                        hi = _mm256_or_si256 (hi, _mm256_slli_epi32 (_mm256_and_si256 (_mm256_srli_epi32 (hb, 2 * g + 1), one), 4));
                      }
                    STEP (16 * g + 4 * c + i, lo);
                    STEP (16 * g + 8 + 4 * c + i, hi);
                  }
              }
        }
      break;
    case UM_DTYPE_Q6_K:
      for (int64_t s = 0; s < ns; s++, pk += 64 * 64)
        {
          const size_t o = (size_t) s * sizeof (UmBlockQ6_K);
          const __m256 d = half_hi (load_u32x8 (rp, o + 206));   /* scales[14..15], d */
          const __m256i m30 = SET1 (0x30303030);
          __m256i l0[4], l1[4];

          /* 16 signed 8-bit scales at 192. */
          load_t4 (rp, o + 192, v);
          for (int j = 0; j < 16; j++)
            {
              const __m256i sj = _mm256_srai_epi32 (_mm256_slli_epi32 (v[j / 4], 24 - 8 * (j % 4)), 24);
              _mm256_store_ps (wa + (s * 16 + j) * NR, _mm256_mul_ps (d, _mm256_cvtepi32_ps (sj)));
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
                    STEP (st, _mm256_or_si256 (_mm256_and_si256 (l0[i], m4),
                                               _mm256_and_si256 (_mm256_slli_epi32 (q[i], 4), m30)));
                    STEP (st + 8, _mm256_or_si256 (_mm256_and_si256 (l1[i], m4),
                                                   _mm256_and_si256 (_mm256_slli_epi32 (q[i], 2), m30)));
                    STEP (st + 16, _mm256_or_si256 (_mm256_and_si256 (_mm256_srli_epi32 (l0[i], 4), m4),
                                                    _mm256_and_si256 (q[i], m30)));
                    STEP (st + 24, _mm256_or_si256 (_mm256_and_si256 (_mm256_srli_epi32 (l1[i], 4), m4),
                                                    _mm256_and_si256 (_mm256_srli_epi32 (q[i], 2), m30)));
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
 * repeat row n - 1: their lanes compute sums that are never stored. */
UM_TARGET_AVX2 static void
pack_panel_avx2 (UmDType t, int kind, const QType *qt, const uint8_t *w, size_t row_bytes,
                 int64_t n, int64_t j0, int64_t k0, int64_t kc, uint8_t *pk, float *wa, float *wb)
{
  const size_t off = (size_t) (k0 / qt->block) * qt->block_bytes;

  for (int half = 0; half < NR / 8; half++)
    {
      const uint8_t *rp[8];
      for (int r = 0; r < 8; r++)
        rp[r] = w + (size_t) MIN (j0 + 8 * half + r, n - 1) * row_bytes + off;
      pack_half_avx2 (t, kind, rp, kc / qt->block, pk + 32 * half, wa + 8 * half, wb + 8 * half);
    }
}

/* ---- the micro-kernels ------------------------------------------------------- */

#define TILE_TARGET UM_TARGET_AVX2
#define TILE_VNNI 0
#define TILE_NAME(x) x##_avx2
#include "um-qgemm-avx2-tile.h"
#undef TILE_TARGET
#undef TILE_VNNI
#undef TILE_NAME

#define TILE_TARGET UM_TARGET_AVX2_VNNI
#define TILE_VNNI 1
#define TILE_NAME(x) x##_avxvnni
#include "um-qgemm-avx2-tile.h"
#undef TILE_TARGET
#undef TILE_VNNI
#undef TILE_NAME

/* KIND_W (Q8_0 without AVX-VNNI): one micro-tile of NR rows × nt tokens
 * over nblk blocks.  The codes w (-128..127) and the activations q
 * (-127..127) are int16; per step of 2 k one aligned ymm holds 8 rows'
 * pairs, and vpmaddwd with a broadcast pair of q gives w0 q0 + w1 q1 per
 * row, |.| <= 2 · 128 · 127, added up in int32 over the block's 16 steps
 * (|P| <= 32 · 128 · 127): exact.  That is 16 multiply-adds per multiply
 * instruction, as the sign trick (vpsignb, vpmaddubsw, then vpmaddwd every
 * step) gets, without its two vpsignb per token and step: fewer
 * instructions on every core, and on Intel's two multiply ports the
 * fewest uops there (the sign trick is the better fit only for
 * vpmaddubsw's 4-bit codes, whose int16 sums need no widening per step). */
UM_TARGET_AVX2 static inline UM_ALWAYS_INLINE void
tile_kernel_w (const int nt, const uint8_t *pk, const float *wa, int64_t nblk,
               const int16_t *xq, int64_t ldx, const float *xd, int64_t ldb,
               float *out, int64_t ldo, __m256i m0, __m256i m1, gboolean first)
{
  __m256 f0[NT_MAX], f1[NT_MAX];
  __m256i c0[NT_MAX], c1[NT_MAX];

#pragma GCC unroll 4
  for (int t = 0; t < nt; t++)
    {
      f0[t] = first ? _mm256_setzero_ps () : _mm256_maskload_ps (out + t * ldo, m0);
      f1[t] = first ? _mm256_setzero_ps () : _mm256_maskload_ps (out + t * ldo + 8, m1);
    }

  for (int64_t b = 0; b < nblk; b++)
    {
      const uint8_t *wp = pk + b * 16 * 64;

#pragma GCC unroll 4
      for (int t = 0; t < nt; t++)
        c0[t] = c1[t] = _mm256_setzero_si256 ();

#pragma GCC unroll 16
      for (int s = 0; s < 16; s++)
        {
          __m256i w0 = _mm256_load_si256 ((const __m256i *) (wp + s * 64));
          __m256i w1 = _mm256_load_si256 ((const __m256i *) (wp + s * 64 + 32));

          /* Loaded once for all tokens (not a memory operand per token). */
          __asm__ ("" : "+x" (w0), "+x" (w1));
#pragma GCC unroll 4
          for (int t = 0; t < nt; t++)
            {
              const __m256i xb = _mm256_set1_epi32 ((int) load_u32 (xq + t * ldx + b * QK + 2 * s));
              c0[t] = _mm256_add_epi32 (c0[t], _mm256_madd_epi16 (w0, xb));
              c1[t] = _mm256_add_epi32 (c1[t], _mm256_madd_epi16 (w1, xb));
            }
          /* Keep the sums in registers step by step (GCC would otherwise
           * hold a tree of the block's products at once, and spill). */
#pragma GCC unroll 4
          for (int t = 0; t < nt; t++)
            __asm__ ("" : "+x" (c0[t]), "+x" (c1[t]));
        }

      {
        /* End of the block (one unit): its scales, in the reference's order. */
        const __m256 sa0 = _mm256_load_ps (wa + b * NR);
        const __m256 sa1 = _mm256_load_ps (wa + b * NR + 8);

#pragma GCC unroll 4
        for (int t = 0; t < nt; t++)
          {
            const __m256 dx = _mm256_set1_ps (xd[t * ldb + b]);
            f0[t] = _mm256_fmadd_ps (_mm256_cvtepi32_ps (c0[t]), _mm256_mul_ps (sa0, dx), f0[t]);
            f1[t] = _mm256_fmadd_ps (_mm256_cvtepi32_ps (c1[t]), _mm256_mul_ps (sa1, dx), f1[t]);
          }
      }
    }

#pragma GCC unroll 4
  for (int t = 0; t < nt; t++)
    {
      _mm256_maskstore_ps (out + t * ldo, m0, f0[t]);
      _mm256_maskstore_ps (out + t * ldo + 8, m1, f1[t]);
    }
}

UM_TARGET_AVX2 static void
tile_dispatch_w (int nt, const uint8_t *pk, const float *wa, int64_t nblk,
                 const int16_t *xq, int64_t ldx, const float *xd, int64_t ldb,
                 float *out, int64_t ldo, __m256i m0, __m256i m1, gboolean first)
{
  switch (nt)
    {
    case 1: tile_kernel_w (1, pk, wa, nblk, xq, ldx, xd, ldb, out, ldo, m0, m1, first); break;
    case 2: tile_kernel_w (2, pk, wa, nblk, xq, ldx, xd, ldb, out, ldo, m0, m1, first); break;
    default: tile_kernel_w (NT_OF (KIND_W, 0), pk, wa, nblk, xq, ldx, xd, ldb, out, ldo, m0, m1, first); break;
    }
}

/* ---- the product ------------------------------------------------------------- */

typedef struct {
  UmDType        t;
  QType          qt;
  gboolean       vnni;      /* vpdpbusd; else vpmaddubsw */
  int            kind;      /* KIND_W: Q8_0 without AVX-VNNI */
  int            g;         /* for vpmaddubsw: see um-qgemm-avx2-tile.h */
  int            nt;        /* tokens per micro-tile */
  const uint8_t *w;
  size_t         row_bytes;
  int64_t        n, k, m;
  const float   *x;
  float         *out;
  int64_t        kc;        /* K piece */
  uint8_t       *base;
  Layout         l;
} Job;

/* Lane masks for a panel's last rows: masked-off rows are neither read nor
 * written. */
static const int32_t row_masks[16] = { -1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0 };

/* Software prefetch of the next (panel, K piece)'s weight bytes, a few
 * lines between micro-tiles (see um-qgemm.c for why). */
typedef struct {
  const uint8_t *row0;
  size_t         row_bytes, len;
  int64_t        rows, lines_per_row, r, line;
} Prefetch;

static void
prefetch_init (Prefetch *pf, const Job *job, int64_t p, int64_t k0)
{
  const size_t off = (size_t) (k0 / job->qt.block) * job->qt.block_bytes;

  pf->len = (size_t) (MIN (job->kc, job->k - k0) / job->qt.block) * job->qt.block_bytes;
  pf->row_bytes = job->row_bytes;
  pf->rows = MIN ((int64_t) NR, job->n - p * NR);
  pf->row0 = job->w + (size_t) (p * NR) * job->row_bytes + off;
  pf->lines_per_row = (int64_t) (pf->len + 63) / 64 + 1;
  pf->r = pf->line = 0;
}

static void
prefetch_some (Prefetch *pf, int64_t count)
{
  for (; count > 0 && pf->r < pf->rows; count--)
    {
      const size_t at = MIN ((size_t) (64 * pf->line), pf->len - 1);
      __builtin_prefetch (pf->row0 + (size_t) pf->r * pf->row_bytes + at, 0, 2);
      if (++pf->line == pf->lines_per_row)
        {
          pf->line = 0;
          pf->r++;
        }
    }
}

/* All K pieces of one panel, for all tokens; prefetches the pieces after
 * them, up to the first of panel next_p (-1: none). */
UM_TARGET_AVX2 static void
run_panel (const Job *job, int64_t p, int64_t next_p, uint8_t *tb)
{
  const int64_t j0 = p * NR, rows = MIN ((int64_t) NR, job->n - j0);
  const int64_t nb = job->k / QK, ub = units_per_block32 (job->qt.mode);
  const int64_t n_groups = (job->m + job->nt - 1) / job->nt;
  const __m256i m0 = _mm256_loadu_si256 ((const __m256i *) (row_masks + 8 - MIN (rows, (int64_t) 8)));
  const __m256i m1 = _mm256_loadu_si256 ((const __m256i *) (row_masks + 8 - CLAMP (rows - 8, (int64_t) 0, (int64_t) 8)));
  const int8_t *xq = (const int8_t *) (job->base + job->l.x_q);
  const float *xd = (const float *) (job->base + job->l.x_d);
  const uint8_t *xc = job->base + job->l.x_c;
  uint8_t *pk = tb + job->l.t_pk;
  float *wa = (float *) (void *) (tb + job->l.t_a), *wb = (float *) (void *) (tb + job->l.t_b);

  for (int64_t k0 = 0; k0 < job->k; k0 += job->kc)
    {
      const int64_t kc = MIN (job->kc, job->k - k0);
      Prefetch pf = { 0 };
      int64_t per_group;

      if (k0 + job->kc < job->k)
        prefetch_init (&pf, job, p, k0 + job->kc);
      else if (next_p >= 0)
        prefetch_init (&pf, job, next_p, 0);
      per_group = (pf.rows * pf.lines_per_row + n_groups - 1) / n_groups;

      pack_panel_avx2 (job->t, job->kind, &job->qt, job->w, job->row_bytes, job->n, j0, k0, kc, pk, wa, wb);
      for (int64_t t0 = 0; t0 < job->m; t0 += job->nt)
        {
          const int nt = (int) MIN ((int64_t) job->nt, job->m - t0);
          const int8_t *xqt = xq + t0 * job->k + k0;
          const float *xdt = xd + t0 * nb + k0 / QK;
          const uint8_t *xct = xc + 4 * (t0 * nb * ub + k0 / QK * ub);
          float *o = job->out + t0 * job->n + j0;

          prefetch_some (&pf, per_group);
          if (job->kind == KIND_W)
            tile_dispatch_w (nt, pk, wa, kc / QK, (const int16_t *) (const void *) xq + t0 * job->k + k0,
                             job->k, xdt, nb, o, job->n, m0, m1, k0 == 0);
          else if (job->vnni)
            tile_dispatch_avxvnni (nt, job->qt.mode, job->g, pk, wa, wb, kc / QK,
                                   xqt, job->k, xdt, xct, nb, o, job->n, m0, m1, k0 == 0);
          else
            tile_dispatch_avx2 (nt, job->qt.mode, job->g, pk, wa, wb, kc / QK,
                                xqt, job->k, xdt, xct, nb, o, job->n, m0, m1, k0 == 0);
        }
    }
}

static void
quantize_rows (void *ctx, int64_t b, int64_t e, int tid)
{
  Job *job = ctx;
  const int64_t nb = job->k / QK, ub = units_per_block32 (job->qt.mode);
  /* Q8_0 with vpmaddwd multiplies q itself: no offset to remove. */
  const gboolean wide = job->kind == KIND_W;
  const int off = wide ? 0 : job->qt.off;
  (void) tid;
  for (int64_t i = b; i < e; i++)
    quantize_x_row_avx2 (job->x + i * job->k, job->k, job->qt.mode, off, wide,
                         job->base + job->l.x_q + (size_t) (i * job->k) * (wide ? 2 : 1),
                         (float *) (void *) (job->base + job->l.x_d) + i * nb,
                         job->base + job->l.x_c + 4 * (size_t) (i * nb * ub));
}

static void
run_panels (void *ctx, int64_t b, int64_t e, int tid)
{
  Job *job = ctx;
  const int64_t n_panels = (job->n + NR - 1) / NR;
  uint8_t *tb = job->base + job->l.shared + (size_t) tid * job->l.per_thread;

  for (int64_t p = b; p < e; p++)
    run_panel (job, p, (p + 1 < e && p + 1 < n_panels) ? p + 1 : -1, tb);
}

/* Bits per code for vpmaddubsw's int16 grouping: 8 steps (4-bit codes),
 * 4 (5-bit), 2 (6-bit); Q8_0 does not use it (KIND_W). */
static int
group_steps (UmDType t)
{
  switch (t)
    {
    case UM_DTYPE_Q4_0: case UM_DTYPE_Q4_1: case UM_DTYPE_Q4_K: return 8;
    case UM_DTYPE_Q5_0: case UM_DTYPE_Q5_1: case UM_DTYPE_Q5_K: return 4;
    case UM_DTYPE_Q6_K: return 2;
    default: return 1;
    }
}

#endif /* UM_HAVE_X86_SIMD */

gboolean
um_qgemm_avx2 (UmDType t, const void *w, int64_t n, int64_t k,
               const float *x, int64_t m, float *out, void *scratch, size_t scratch_bytes)
{
#if UM_HAVE_X86_SIMD
  Job job;
  size_t need;
  void *owned = NULL;

  if (!check_args (t, w, n, k, x, m, out, &job.qt))
    return FALSE;
  if (um_cpu_isa () < UM_ISA_AVX2)
    return FALSE;
  if (m == 0 || n == 0)
    return TRUE;
  if (k == 0)
    {
      zero_out (out, m, n);
      return TRUE;
    }
  if (!layout_get (&job.qt, use_wide (t), n, k, m, &job.l))
    return FALSE;
  need = job.l.shared + (size_t) job.l.n_threads * job.l.per_thread + 64;
  if (scratch == NULL || scratch_bytes < need)
    {
      scratch = owned = g_try_malloc (need);
      if (owned == NULL)
        return FALSE;
    }
  job.t = t;
  job.vnni = um_cpu_has_avx_vnni ();
  job.g = job.vnni ? 0 : group_steps (t);
  job.kind = use_wide (t) ? KIND_W : KIND_U;
  job.nt = NT_OF (job.kind, job.g);
  job.kc = job.kind == KIND_W ? KC_W : KC;
  job.w = w;
  job.row_bytes = (size_t) (k / job.qt.block) * job.qt.block_bytes;
  job.n = n;
  job.k = k;
  job.m = m;
  job.x = x;
  job.out = out;
  job.base = (uint8_t *) (((uintptr_t) scratch + 63) & ~(uintptr_t) 63);
  {
    const int64_t n_panels = (n + NR - 1) / NR;
    const int64_t chunk = CLAMP (n_panels / (8 * job.l.n_threads), (int64_t) 1, (int64_t) 16);
    /* Every thread needs all of x: it is ready when its loop returns. */
    um_pool_for (m, 4, job.l.n_threads, quantize_rows, &job);
    um_pool_for (n_panels, chunk, job.l.n_threads, run_panels, &job);
  }
  g_free (owned);
  return TRUE;
#else
  (void) t; (void) w; (void) n; (void) k; (void) x; (void) m; (void) out; (void) scratch; (void) scratch_bytes;
  return FALSE;
#endif
}

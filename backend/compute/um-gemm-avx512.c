/* um-gemm-avx512.c — our own f32 matrix product for the weight products,
 * out[m, n] = x[m, k] · W[n, k]^T, with the weight conversion fused in.
 *
 * Layout of the work (why this shape):
 *
 *  - x is packed once per call, shared by the threads, into k-major panels
 *    of 16·MRV tokens (MRV = 1..3 vectors, zero-padded): one 512-bit load
 *    then gives 16 tokens' values at one kk, so the product is vectorised
 *    over tokens and W is only ever read as scalars (broadcasts).  That lets
 *    W stay row-major, which is how every stored type lays out its blocks.
 *  - The threads share out the weight rows in tiles of NT rows.  For each
 *    K block of KC elements a thread converts eight rows of the tile (one
 *    micro-tile height) to f32 into a small per-thread buffer, then runs
 *    the micro-kernel over every token panel with it; the x block
 *    (m × KC floats) is reused by all the tile's rows (see make_plan ()
 *    for how KC is chosen).
 *  - The micro-kernel holds 8 rows × MRV vectors = up to 24 accumulators:
 *    per kk, MRV vector loads, 8 broadcasts and 8·MRV FMAs.  Sums carry
 *    across K blocks in a per-thread buffer in the kernel's own layout and
 *    are written to out (transposed 16×16 in registers) after the last one.
 *  - At m <= 8 (4 for F32) padding tokens to 16 would waste most FMAs, so a
 *    dot-product kernel takes over: vectorised along k, 4 rows × up to 4
 *    tokens of 16 partial sums each, added up once at the end.
 *  - While the kernels run on one group of rows, the next group's weight
 *    bytes are prefetched: the conversion reads one row segment after the
 *    other and would otherwise wait on memory at every segment start.
 *  - F32 weights are not copied: the kernels read the rows in place.
 *  - Conversion is exact and equals um_quant_dequantize_row_ref () bit for
 *    bit: each value is (float) q times a scale (separate multiply), then a
 *    separate add or subtract where the format has one, with the scales
 *    from the reference's own scalar expressions.  The project builds in ISO
 *    C11 mode, where GCC does not contract a multiply and an add into an
 *    FMA, and the vector code below uses explicit mul/add intrinsics anyway.
 *
 * So the result is the f32 product with the dequantized weights, summed in
 * a different order than sgemm would, nothing more.
 *
 * Every function with AVX-512 intrinsics carries UM_TARGET_AVX512 and is
 * only reached after um_cpu_isa () says AVX-512, so the file builds in a
 * portable (-march=x86-64) build and, without the SIMD code, elsewhere.
 */
#include "um-gemm.h"

#include "um-cpu-isa.h"
#include "um-pool.h"
#include "um-half.h"
#include "um-quant-avx512.h"
#include "um-quant.h"

#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#endif

#if UM_HAVE_X86_SIMD
#include <immintrin.h>
#endif

#define UM_ALWAYS_INLINE __attribute__ ((always_inline))

/* Weight rows per micro-tile: 8 broadcasts per kk feed 8·MRV FMAs. */
#define NR 8
/* Largest token panel, in 16-token vectors: 3 × 8 = 24 accumulators plus 3
 * x vectors and a broadcast fit the 32 zmm registers. */
#define MRV_MAX 3
/* Largest weight-row tile per thread (a multiple of 16, for the output
 * transposes): the x block is reused NT / 8 times from L2 per K block. */
#define NT_MAX 64
/* Alignment of every buffer in scratch: a cache line, one zmm. */
#define ALIGN 64

static inline int64_t
round_up (int64_t v, int64_t to)
{
  return (v + to - 1) / to * to;
}

static inline size_t
align_bytes (size_t v)
{
  return (v + ALIGN - 1) & ~(size_t) (ALIGN - 1);
}

/* ======================================================================== */
/* Conversion to f32                                                         */
/* ======================================================================== */

#if UM_HAVE_X86_SIMD

static inline uint32_t
load_u32 (const void *p)
{
  uint32_t v;
  memcpy (&v, p, sizeof v);   /* little-endian, as the files store it */
  return v;
}

UM_TARGET_AVX512 static inline UM_ALWAYS_INLINE __m512i
load_u8x16 (const uint8_t *p)
{
  return _mm512_cvtepu8_epi32 (_mm_loadu_si128 ((const __m128i *) p));
}

/* y[0..16) = (float) q * d. */
UM_TARGET_AVX512 static inline UM_ALWAYS_INLINE void
store_mul (float *y, __m512i q, __m512 d)
{
  _mm512_storeu_ps (y, _mm512_mul_ps (_mm512_cvtepi32_ps (q), d));
}

/* y[0..16) = (float) q * d + m, the add rounded separately. */
UM_TARGET_AVX512 static inline UM_ALWAYS_INLINE void
store_mul_add (float *y, __m512i q, __m512 d, __m512 m)
{
  _mm512_storeu_ps (y, _mm512_add_ps (_mm512_mul_ps (_mm512_cvtepi32_ps (q), d), m));
}

/* y[0..16) = d * (float) q - m, the subtract rounded separately. */
UM_TARGET_AVX512 static inline UM_ALWAYS_INLINE void
store_mul_sub (float *y, __m512i q, __m512 d, __m512 m)
{
  _mm512_storeu_ps (y, _mm512_sub_ps (_mm512_mul_ps (d, _mm512_cvtepi32_ps (q)), m));
}

UM_TARGET_AVX512 static void
cvt_f16 (const uint16_t *s, float *y, int64_t n)
{
  const __m256i abs_mask = _mm256_set1_epi16 (0x7fff);
  const __m256i inf = _mm256_set1_epi16 (0x7c00);
  int64_t i = 0;

  for (; i + 16 <= n; i += 16)
    {
      __m256i h = _mm256_loadu_si256 ((const __m256i *) (s + i));
      __m512 f = _mm512_cvtph_ps (h);
      /* vcvtph2ps quiets signalling NaNs; the reference keeps every NaN's
       * bits (sign, all-ones exponent, payload << 13).  Rare: one compare. */
      __mmask16 nan = _mm256_cmpgt_epu16_mask (_mm256_and_si256 (h, abs_mask), inf);
      if (G_UNLIKELY (nan))
        {
          __m512i w = _mm512_cvtepu16_epi32 (h);
          __m512i bits = _mm512_or_si512 (
              _mm512_or_si512 (_mm512_slli_epi32 (_mm512_and_si512 (w, _mm512_set1_epi32 (0x8000)), 16),
                               _mm512_set1_epi32 (0x7f800000)),
              _mm512_slli_epi32 (_mm512_and_si512 (w, _mm512_set1_epi32 (0x3ff)), 13));
          f = _mm512_mask_mov_ps (f, nan, _mm512_castsi512_ps (bits));
        }
      _mm512_storeu_ps (y + i, f);
    }
  for (; i < n; i++)
    y[i] = um_f16_load (s + i);
}

UM_TARGET_AVX512 static void
cvt_bf16 (const uint16_t *s, float *y, int64_t n)
{
  int64_t i = 0;

  for (; i + 16 <= n; i += 16)
    {
      __m512i w = _mm512_cvtepu16_epi32 (_mm256_loadu_si256 ((const __m256i *) (s + i)));
      _mm512_storeu_ps (y + i, _mm512_castsi512_ps (_mm512_slli_epi32 (w, 16)));
    }
  for (; i < n; i++)
    {
      uint16_t h;
      memcpy (&h, s + i, sizeof h);
      y[i] = um_bf16_to_f32 (h);
    }
}

UM_TARGET_AVX512 static void
cvt_q8_0 (const UmBlockQ8_0 *b, float *y, int64_t nb)
{
  for (int64_t i = 0; i < nb; i++, y += UM_QK8_0)
    {
      const __m512 d = _mm512_set1_ps (um_f16_to_f32 (b[i].d));
      __m512i q0 = _mm512_cvtepi8_epi32 (_mm_loadu_si128 ((const __m128i *) b[i].qs));
      __m512i q1 = _mm512_cvtepi8_epi32 (_mm_loadu_si128 ((const __m128i *) (b[i].qs + 16)));
      store_mul (y, q0, d);
      store_mul (y + 16, q1, d);
    }
}

UM_TARGET_AVX512 static void
cvt_q4_0 (const UmBlockQ4_0 *b, float *y, int64_t nb)
{
  const __m512i lo = _mm512_set1_epi32 (0x0f), eight = _mm512_set1_epi32 (8);

  for (int64_t i = 0; i < nb; i++, y += UM_QK4_0)
    {
      const __m512 d = _mm512_set1_ps (um_f16_to_f32 (b[i].d));
      __m512i q = load_u8x16 (b[i].qs);
      store_mul (y, _mm512_sub_epi32 (_mm512_and_si512 (q, lo), eight), d);
      store_mul (y + 16, _mm512_sub_epi32 (_mm512_srli_epi32 (q, 4), eight), d);
    }
}

UM_TARGET_AVX512 static void
cvt_q4_1 (const UmBlockQ4_1 *b, float *y, int64_t nb)
{
  const __m512i lo = _mm512_set1_epi32 (0x0f);

  for (int64_t i = 0; i < nb; i++, y += UM_QK4_1)
    {
      const __m512 d = _mm512_set1_ps (um_f16_to_f32 (b[i].d));
      const __m512 m = _mm512_set1_ps (um_f16_to_f32 (b[i].m));
      __m512i q = load_u8x16 (b[i].qs);
      store_mul_add (y, _mm512_and_si512 (q, lo), d, m);
      store_mul_add (y + 16, _mm512_srli_epi32 (q, 4), d, m);
    }
}

UM_TARGET_AVX512 static void
cvt_q5_0 (const UmBlockQ5_0 *b, float *y, int64_t nb)
{
  const __m512i lo = _mm512_set1_epi32 (0x0f), sixteen = _mm512_set1_epi32 (16);

  for (int64_t i = 0; i < nb; i++, y += UM_QK5_0)
    {
      const __m512 d = _mm512_set1_ps (um_f16_to_f32 (b[i].d));
      const uint32_t qh = load_u32 (b[i].qh);
      __m512i q = load_u8x16 (b[i].qs);
      /* Bit j of qh is the 5th bit of element j: a lane mask as it is. */
      __m512i q0 = _mm512_and_si512 (q, lo), q1 = _mm512_srli_epi32 (q, 4);
      q0 = _mm512_mask_or_epi32 (q0, (__mmask16) (qh & 0xffff), q0, sixteen);
      q1 = _mm512_mask_or_epi32 (q1, (__mmask16) (qh >> 16), q1, sixteen);
      store_mul (y, _mm512_sub_epi32 (q0, sixteen), d);
      store_mul (y + 16, _mm512_sub_epi32 (q1, sixteen), d);
    }
}

UM_TARGET_AVX512 static void
cvt_q5_1 (const UmBlockQ5_1 *b, float *y, int64_t nb)
{
  const __m512i lo = _mm512_set1_epi32 (0x0f), sixteen = _mm512_set1_epi32 (16);

  for (int64_t i = 0; i < nb; i++, y += UM_QK5_1)
    {
      const __m512 d = _mm512_set1_ps (um_f16_to_f32 (b[i].d));
      const __m512 m = _mm512_set1_ps (um_f16_to_f32 (b[i].m));
      const uint32_t qh = load_u32 (b[i].qh);
      __m512i q = load_u8x16 (b[i].qs);
      __m512i q0 = _mm512_and_si512 (q, lo), q1 = _mm512_srli_epi32 (q, 4);
      q0 = _mm512_mask_or_epi32 (q0, (__mmask16) (qh & 0xffff), q0, sixteen);
      q1 = _mm512_mask_or_epi32 (q1, (__mmask16) (qh >> 16), q1, sixteen);
      store_mul_add (y, q0, d, m);
      store_mul_add (y + 16, q1, d, m);
    }
}

/* One Q4_K or Q5_K super-block (qh NULL for Q4_K): the two types differ only
 * in the 5th bit of each code. */
UM_TARGET_AVX512 static inline UM_ALWAYS_INLINE void
cvt_k45_block (const uint8_t *scales, const uint8_t *ql, const uint8_t *qhp, uint16_t dh, uint16_t dminh,
               float *y)
{
  const __m512i lo = _mm512_set1_epi32 (0x0f), sixteen = _mm512_set1_epi32 (16);
  const float d = um_f16_to_f32 (dh);
  const float dmin = um_f16_to_f32 (dminh);
  __m128i qh0 = _mm_setzero_si128 (), qh1 = _mm_setzero_si128 ();

  if (qhp != NULL)
    {
      qh0 = _mm_loadu_si128 ((const __m128i *) qhp);
      qh1 = _mm_loadu_si128 ((const __m128i *) (qhp + 16));
    }
  for (int g = 0; g < 4; g++, ql += 32, y += 64)
    {
      uint8_t sc, mn;
      um_quant_get_scale_min_k4 (2 * g, scales, &sc, &mn);
      const __m512 d1 = _mm512_set1_ps (d * (float) sc);
      const __m512 m1 = _mm512_set1_ps (dmin * (float) mn);
      um_quant_get_scale_min_k4 (2 * g + 1, scales, &sc, &mn);
      const __m512 d2 = _mm512_set1_ps (d * (float) sc);
      const __m512 m2 = _mm512_set1_ps (dmin * (float) mn);
      const __m128i bit0 = _mm_set1_epi8 ((char) (1 << (2 * g)));
      const __m128i bit1 = _mm_set1_epi8 ((char) (1 << (2 * g + 1)));
      for (int h = 0; h < 2; h++)
        {
          __m512i v = load_u8x16 (ql + 16 * h);
          __m512i q0 = _mm512_and_si512 (v, lo), q1 = _mm512_srli_epi32 (v, 4);
          if (qhp != NULL)
            {
              /* Bits 2g and 2g+1 of qh[l] are the 5th bits of elements
               * 64g+l and 64g+32+l: byte tests give the lane masks. */
              const __m128i qh = h ? qh1 : qh0;
              q0 = _mm512_mask_or_epi32 (q0, _mm_test_epi8_mask (qh, bit0), q0, sixteen);
              q1 = _mm512_mask_or_epi32 (q1, _mm_test_epi8_mask (qh, bit1), q1, sixteen);
            }
          store_mul_sub (y + 16 * h, q0, d1, m1);
          store_mul_sub (y + 32 + 16 * h, q1, d2, m2);
        }
    }
}

UM_TARGET_AVX512 static void
cvt_q4_K (const UmBlockQ4_K *b, float *y, int64_t nb)
{
  for (int64_t i = 0; i < nb; i++, y += UM_QK_K)
    cvt_k45_block (b[i].scales, b[i].qs, NULL, b[i].d, b[i].dmin, y);
}

UM_TARGET_AVX512 static void
cvt_q5_K (const UmBlockQ5_K *b, float *y, int64_t nb)
{
  for (int64_t i = 0; i < nb; i++, y += UM_QK_K)
    cvt_k45_block (b[i].scales, b[i].qs, b[i].qh, b[i].d, b[i].dmin, y);
}

UM_TARGET_AVX512 static void
cvt_q6_K (const UmBlockQ6_K *b, float *y, int64_t nb)
{
  const __m512i lo = _mm512_set1_epi32 (0x0f), three = _mm512_set1_epi32 (3);
  const __m512i off = _mm512_set1_epi32 (32);

  for (int64_t i = 0; i < nb; i++)
    {
      const float d = um_f16_to_f32 (b[i].d);

      for (int h = 0; h < 2; h++, y += 128)
        {
          const uint8_t *ql = b[i].ql + 64 * h;
          const uint8_t *qh = b[i].qh + 32 * h;
          const int8_t *sc = b[i].scales + 8 * h;

          /* l = 16c .. 16c+15 share sub-block scale sc[c + 2j]. */
          for (int c = 0; c < 2; c++)
            {
              __m512i a = load_u8x16 (ql + 16 * c);
              __m512i bq = load_u8x16 (ql + 32 + 16 * c);
              __m512i hb = load_u8x16 (qh + 16 * c);
              __m512i q0 = _mm512_or_si512 (_mm512_and_si512 (a, lo),
                                            _mm512_slli_epi32 (_mm512_and_si512 (hb, three), 4));
              __m512i q1 = _mm512_or_si512 (_mm512_and_si512 (bq, lo),
                                            _mm512_slli_epi32 (_mm512_and_si512 (_mm512_srli_epi32 (hb, 2), three), 4));
              __m512i q2 = _mm512_or_si512 (_mm512_srli_epi32 (a, 4),
                                            _mm512_slli_epi32 (_mm512_and_si512 (_mm512_srli_epi32 (hb, 4), three), 4));
              __m512i q3 = _mm512_or_si512 (_mm512_srli_epi32 (bq, 4),
                                            _mm512_slli_epi32 (_mm512_srli_epi32 (hb, 6), 4));
              /* The reference computes (d * sc) first, then times q. */
              store_mul (y + 16 * c, _mm512_sub_epi32 (q0, off),
                         _mm512_set1_ps (d * (float) sc[c + 0]));
              store_mul (y + 32 + 16 * c, _mm512_sub_epi32 (q1, off),
                         _mm512_set1_ps (d * (float) sc[c + 2]));
              store_mul (y + 64 + 16 * c, _mm512_sub_epi32 (q2, off),
                         _mm512_set1_ps (d * (float) sc[c + 4]));
              store_mul (y + 96 + 16 * c, _mm512_sub_epi32 (q3, off),
                         _mm512_set1_ps (d * (float) sc[c + 6]));
            }
        }
    }
}

/* Converts n elements (a whole number of blocks) at src to f32.  Returns
 * FALSE for a type it does not know. */
UM_TARGET_AVX512 static gboolean
convert_avx512 (UmDType t, const void *src, float *dst, int64_t n)
{
  switch (t)
    {
    case UM_DTYPE_F32:
      memcpy (dst, src, (size_t) n * sizeof (float));
      return TRUE;
    case UM_DTYPE_F16: cvt_f16 (src, dst, n); return TRUE;
    case UM_DTYPE_BF16: cvt_bf16 (src, dst, n); return TRUE;
    case UM_DTYPE_Q8_0: cvt_q8_0 (src, dst, n / UM_QK8_0); return TRUE;
    case UM_DTYPE_Q4_0: cvt_q4_0 (src, dst, n / UM_QK4_0); return TRUE;
    case UM_DTYPE_Q4_1: cvt_q4_1 (src, dst, n / UM_QK4_1); return TRUE;
    case UM_DTYPE_Q5_0: cvt_q5_0 (src, dst, n / UM_QK5_0); return TRUE;
    case UM_DTYPE_Q5_1: cvt_q5_1 (src, dst, n / UM_QK5_1); return TRUE;
    case UM_DTYPE_Q4_K: cvt_q4_K (src, dst, n / UM_QK_K); return TRUE;
    case UM_DTYPE_Q5_K: cvt_q5_K (src, dst, n / UM_QK_K); return TRUE;
    case UM_DTYPE_Q6_K: cvt_q6_K (src, dst, n / UM_QK_K); return TRUE;
    case UM_DTYPE_I32:
    case UM_DTYPE_N_TYPES:
    default:
      return FALSE;
    }
}

#endif /* UM_HAVE_X86_SIMD */

/* The weight types this file converts, and their block shape. */
static gboolean
weight_type_info (UmDType t, int64_t *block_elems, int64_t *block_bytes)
{
  const UmDTypeInfo *info;

  if (t == UM_DTYPE_I32 || (info = um_dtype_info (t)) == NULL)
    return FALSE;
  *block_elems = info->block_elems;
  *block_bytes = info->block_bytes;
  return TRUE;
}

gboolean
um_quant_dequantize_row_avx512 (UmDType t, const void *src, float *dst, int64_t n)
{
  int64_t be, bb;

  if (!weight_type_info (t, &be, &bb) || n < 0 || n % be != 0
      || (n > 0 && (src == NULL || dst == NULL)))
    return FALSE;
#if UM_HAVE_X86_SIMD
  if (um_cpu_isa () < UM_ISA_AVX512)
    return FALSE;
  if (n == 0)
    return TRUE;
  return convert_avx512 (t, src, dst, n);
#else
  return FALSE;
#endif
}

/* ======================================================================== */
/* Planning: the blocking and the scratch it needs                           */
/* ======================================================================== */

typedef struct {
  int     threads;
  int64_t mv;          /* 16-token vectors, ceil (m / 16) */
  int64_t kc;          /* K block (elements; a multiple of 256) */
  int64_t nt;          /* weight rows per tile (a multiple of 16) */
  int64_t ws;          /* row stride of the converted rows (floats) */
  int64_t ldxp;        /* dot: row stride of the copied x rows (floats) */
  int64_t n_tiles;
  gboolean convert;    /* FALSE: F32 rows are used in place */
  gboolean dot;        /* few tokens: the dot-product kernel */
  size_t  xp_bytes;    /* x, packed or copied; shared */
  size_t  wbuf_bytes;  /* per thread: NR converted rows, stride ws */
  size_t  acc_bytes;   /* per thread: the tile's sums */
  size_t  total;       /* including slack to align the start */
} Plan;

/* floats × 4 bytes, cache-line aligned, added to *total; FALSE on
 * overflow (only absurd sizes: x alone would not fit in memory). */
static gboolean
add_floats (size_t *bytes, size_t *total, uint64_t floats, size_t times)
{
  size_t b, all;

  if (floats > G_MAXSIZE / sizeof (float) - ALIGN)
    return FALSE;
  b = align_bytes ((size_t) floats * sizeof (float));
  if (!g_size_checked_mul (&all, b, times) || !g_size_checked_add (total, *total, all))
    return FALSE;
  *bytes = b;
  return TRUE;
}

/* Sizes must have been checked (non-negative, <= G_MAXINT, k a whole number
 * of blocks, m, n, k > 0).  FALSE if the scratch size overflows. */
static gboolean
make_plan (UmDType t, int64_t n, int64_t k, int64_t m, Plan *p)
{
  memset (p, 0, sizeof *p);
  p->mv = (m + 15) / 16;

  /* F32 rows are read in place: copying them first (memcpy, even into
   * skewed rows) measured 1.1-2x slower at every m. */
  p->convert = t != UM_DTYPE_F32;
  /* Below 16 tokens the broadcast kernel multiplies padding; the dot kernel
   * does m/16 FMAs per weight instead of 1.  Measured crossover: 8 tokens
   * for converted weights; 4 for F32 rows read in place, which the dot
   * kernel reads less well. */
  p->dot = m <= (p->convert ? 8 : 4);

  /* The K block (a multiple of 256, one K-quant super-block).  Two pulls:
   * the x block (16·mv × kc floats) is reused by every row of a tile, so
   * it should stay near (L2), while converted rows should be long, because
   * the conversion streams each row segment from memory and short segments
   * stream badly (kc 1024 -> 4096 made the converted types at m = 1..48
   * 1.1-1.6x faster on 4096-wide rows, and cost nothing at m = 256 even
   * though the x block then spills from L2 to L3).  F32 rows, read in
   * place by the kernel, prefer the x block in L2: 512 KiB, kc <= 1024.
   * The dot kernel's x block is tiny: long rows only. */
  int64_t kc;
  if (p->dot)
    kc = 4096;
  else
    {
      const int64_t budget = p->convert ? 2048 * 1024 : 512 * 1024;
      kc = budget / (p->mv * 16 * (int64_t) sizeof (float));
      kc = CLAMP (kc / 256 * 256, 256, p->convert ? 4096 : 1024);
    }
  p->kc = MIN (kc, round_up (k, 256));

  /* Enough tiles for the threads to balance (dynamic schedule), each as
   * tall as NT_MAX allows. */
  p->threads = um_pool_max_threads ();
  p->nt = CLAMP (round_up ((n + 4 * p->threads - 1) / (4 * p->threads), 16), 16, NT_MAX);
  p->n_tiles = (n + p->nt - 1) / p->nt;
  p->threads = (int) MIN ((int64_t) p->threads, p->n_tiles);

  /* Row strides one cache line past a multiple of 4 KiB: rows 4 KiB apart
   * would all fall into the same L1 sets (64 sets of 64 bytes), and the
   * kernels read 8 weight rows (and, in the dot kernel, up to 8 x rows) in
   * step. */
  p->ws = p->kc + 16;
  p->ldxp = round_up (k, 16) + 16;

  /* x: copied rows (dot) or token panels, shared; per thread the converted
   * rows and the sums, per (row, 16 tokens) or, for the dot kernel, per
   * (row, token) as 16 partial sums. */
  p->total = ALIGN;
  return add_floats (&p->xp_bytes, &p->total,
                     p->dot ? (uint64_t) m * (uint64_t) p->ldxp : (uint64_t) p->mv * 16 * (uint64_t) k, 1)
         && add_floats (&p->wbuf_bytes, &p->total, p->convert ? NR * p->ws : 0, (size_t) p->threads)
         && add_floats (&p->acc_bytes, &p->total,
                        (uint64_t) p->nt * (uint64_t) (p->dot ? m : p->mv) * 16, (size_t) p->threads);
}

static gboolean
check_args (UmDType t, int64_t n, int64_t k, int64_t m, int64_t *be, int64_t *bb)
{
  if (!weight_type_info (t, be, bb))
    return FALSE;
  if (n < 0 || k < 0 || m < 0 || n > G_MAXINT || k > G_MAXINT || m > G_MAXINT)
    return FALSE;
  return k % *be == 0;
}

size_t
um_gemm_f32_scratch_bytes (UmDType t, int64_t n, int64_t k, int64_t m)
{
  int64_t be, bb;
  Plan p;

  if (!check_args (t, n, k, m, &be, &bb) || n == 0 || k == 0 || m == 0
      || !make_plan (t, n, k, m, &p))
    return 0;
  return p.total;
}

/* ======================================================================== */
/* The product                                                               */
/* ======================================================================== */

#if UM_HAVE_X86_SIMD

/* Token panels: mv vectors split into panels of 3, with a remainder of one
 * vector folded into two panels of 2 (a 1-vector panel runs at a third of
 * the speed of the others).  Panel p starts at vector *v0, *mrv wide; it
 * is stored at xp + 16 · k · *v0 floats, as [kk][*mrv][16]. */
static inline void
panel_of (int64_t mv, int64_t p, int64_t *v0, int *mrv)
{
  int64_t n3 = mv / 3, rem = mv % 3;

  if (rem == 1 && n3 > 0)
    {
      n3--;
      rem = 4;   /* 2 + 2 */
    }
  if (p < n3)
    {
      *v0 = 3 * p;
      *mrv = 3;
    }
  else if (rem == 4)
    {
      *v0 = 3 * n3 + 2 * (p - n3);
      *mrv = 2;
    }
  else
    {
      *v0 = 3 * n3;
      *mrv = (int) rem;
    }
}

static inline int64_t
n_panels (int64_t mv)
{
  int64_t n3 = mv / 3, rem = mv % 3;

  if (rem == 1 && n3 > 0)
    return n3 - 1 + 2;
  return n3 + (rem > 0);
}

/* In-register transpose of a 16×16 block: r[i] element j becomes r[j]
 * element i. */
UM_TARGET_AVX512 static inline UM_ALWAYS_INLINE void
transpose16 (__m512 r[16])
{
  __m512 t[16], u[16];

  for (int i = 0; i < 8; i++)
    {
      t[2 * i] = _mm512_unpacklo_ps (r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm512_unpackhi_ps (r[2 * i], r[2 * i + 1]);
    }
  /* u[4q + j] holds, in 128-bit lane L, column 4L + j of rows 4q..4q+3. */
  for (int q = 0; q < 4; q++)
    {
      __m512d a = _mm512_castps_pd (t[4 * q]), b = _mm512_castps_pd (t[4 * q + 1]);
      __m512d c = _mm512_castps_pd (t[4 * q + 2]), d = _mm512_castps_pd (t[4 * q + 3]);
      u[4 * q + 0] = _mm512_castpd_ps (_mm512_unpacklo_pd (a, c));
      u[4 * q + 1] = _mm512_castpd_ps (_mm512_unpackhi_pd (a, c));
      u[4 * q + 2] = _mm512_castpd_ps (_mm512_unpacklo_pd (b, d));
      u[4 * q + 3] = _mm512_castpd_ps (_mm512_unpackhi_pd (b, d));
    }
  for (int j = 0; j < 4; j++)
    {
      __m512 v01 = _mm512_shuffle_f32x4 (u[j], u[4 + j], 0x44);       /* lanes 0,1 */
      __m512 v23 = _mm512_shuffle_f32x4 (u[j], u[4 + j], 0xee);       /* lanes 2,3 */
      __m512 w01 = _mm512_shuffle_f32x4 (u[8 + j], u[12 + j], 0x44);
      __m512 w23 = _mm512_shuffle_f32x4 (u[8 + j], u[12 + j], 0xee);
      r[j] = _mm512_shuffle_f32x4 (v01, w01, 0x88);
      r[4 + j] = _mm512_shuffle_f32x4 (v01, w01, 0xdd);
      r[8 + j] = _mm512_shuffle_f32x4 (v23, w23, 0x88);
      r[12 + j] = _mm512_shuffle_f32x4 (v23, w23, 0xdd);
    }
}

/* Packs token vector v (tokens 16v .. 16v+15, zeros past m) into its panel:
 * dst[kk · stride + 16 · (v - v0)] for every kk, stride = 16 · mrv. */
UM_TARGET_AVX512 static void
pack_vector (const float *x, int64_t m, int64_t k, int64_t v, float *dst, int64_t stride)
{
  const int64_t i0 = 16 * v;
  const int64_t valid = MIN (16, m - i0);
  int64_t kk = 0;

  for (; kk + 16 <= k; kk += 16)
    {
      __m512 r[16];
      for (int t = 0; t < 16; t++)
        r[t] = t < valid ? _mm512_loadu_ps (x + (i0 + t) * k + kk) : _mm512_setzero_ps ();
      transpose16 (r);
      for (int j = 0; j < 16; j++)
        _mm512_store_ps (dst + (kk + j) * stride, r[j]);
    }
  for (; kk < k; kk++)
    for (int t = 0; t < 16; t++)
      dst[kk * stride + t] = t < valid ? x[(i0 + t) * k + kk] : 0.0f;
}

/* Weight bytes the next group will read, prefetched a line at a time while
 * a micro-kernel runs: issuing them all at once (as prefetch_next_group ()
 * did) left the loads of the conversion waiting on memory for ~15 % of an
 * F16 forward, since the prefetches queue up behind each other. */
typedef struct {
  const uint8_t *base;       /* first row's segment */
  int64_t        row_bytes;  /* between rows */
  int64_t        lines;      /* 64-byte lines per row segment */
  int64_t        rows;       /* 0: nothing to prefetch */
} Prefetch;

/* The micro-kernel: acc[r · ars + 16 · v + lane] (+)= Σ_kk xp[kk][v][lane] ·
 * w_r[kk] for the NR rows w_r and mrv token vectors, over kc elements.
 * mrv is a compile-time constant in each caller below. */
UM_TARGET_AVX512 static inline UM_ALWAYS_INLINE void
micro_tile (const int mrv, const float *restrict xp, const float *const *wr, int64_t kc,
            float *restrict acc, int64_t ars, gboolean first, const Prefetch *pf)
{
  /* One line every few steps, spread over the whole loop. */
  const int64_t pf_total = pf->rows * pf->lines;
  const int64_t pf_every = pf_total > 0 ? MAX ((int64_t) 1, kc / pf_total) : kc + 1;
  int64_t pf_next = 0, pf_r = 0, pf_c = 0, pf_done = 0;

  const float *w0 = wr[0], *w1 = wr[1], *w2 = wr[2], *w3 = wr[3];
  const float *w4 = wr[4], *w5 = wr[5], *w6 = wr[6], *w7 = wr[7];
  __m512 c[NR][MRV_MAX];

  for (int r = 0; r < NR; r++)
    for (int v = 0; v < mrv; v++)
      c[r][v] = first ? _mm512_setzero_ps () : _mm512_loadu_ps (acc + r * ars + 16 * v);

  for (int64_t i = 0; i < kc; i++, xp += 16 * mrv)
    {
      if (i == pf_next && pf_done < pf_total)
        {
          __builtin_prefetch (pf->base + pf_r * pf->row_bytes + pf_c * 64, 0, 2);
          pf_done++;
          pf_next += pf_every;
          if (++pf_c == pf->lines)
            {
              pf_c = 0;
              pf_r++;
            }
        }
      const __m512 x0 = _mm512_load_ps (xp);
      const __m512 x1 = mrv > 1 ? _mm512_load_ps (xp + 16) : x0;
      const __m512 x2 = mrv > 2 ? _mm512_load_ps (xp + 32) : x0;
      __m512 b;
      float wv;

      /* memcpy: F32 weights used in place need not be 4-byte aligned
       * (w is a void *); it is still one vbroadcastss. */
#define STEP(r, wp) \
      memcpy (&wv, wp + i, sizeof wv); \
      b = _mm512_set1_ps (wv); \
      c[r][0] = _mm512_fmadd_ps (x0, b, c[r][0]); \
      if (mrv > 1) \
        c[r][1] = _mm512_fmadd_ps (x1, b, c[r][1]); \
      if (mrv > 2) \
        c[r][2] = _mm512_fmadd_ps (x2, b, c[r][2]);

      STEP (0, w0) STEP (1, w1) STEP (2, w2) STEP (3, w3)
      STEP (4, w4) STEP (5, w5) STEP (6, w6) STEP (7, w7)
#undef STEP
    }

  for (int r = 0; r < NR; r++)
    for (int v = 0; v < mrv; v++)
      _mm512_storeu_ps (acc + r * ars + 16 * v, c[r][v]);
}

UM_TARGET_AVX512 static void
micro_1 (const float *xp, const float *const *wr, int64_t kc, float *acc, int64_t ars, gboolean first,
         const Prefetch *pf)
{
  micro_tile (1, xp, wr, kc, acc, ars, first, pf);
}

UM_TARGET_AVX512 static void
micro_2 (const float *xp, const float *const *wr, int64_t kc, float *acc, int64_t ars, gboolean first,
         const Prefetch *pf)
{
  micro_tile (2, xp, wr, kc, acc, ars, first, pf);
}

UM_TARGET_AVX512 static void
micro_3 (const float *xp, const float *const *wr, int64_t kc, float *acc, int64_t ars, gboolean first,
         const Prefetch *pf)
{
  micro_tile (3, xp, wr, kc, acc, ars, first, pf);
}

/* The few-token kernel: for rows w_0..w_3 and tokens x_0..x_{tt-1} (rows of
 * x, unpacked), acc[(r · m + t) · 16 + lane] (+)= Σ over kk ≡ lane (mod 16)
 * of x_t[kk] · w_r[kk]: one FMA per 16 elements per token, where the
 * broadcast kernel would spend one per 16 padded tokens.  The 16 partial
 * sums are added up at the end (write_tile_dot). */
UM_TARGET_AVX512 static inline UM_ALWAYS_INLINE void
dot_tile (const int tt, const float *x, int64_t ldx, const float *const *wr, int64_t kc,
          float *acc, int64_t m, gboolean first)
{
  __m512 c[4][4];
  int64_t i = 0;

  for (int r = 0; r < 4; r++)
    for (int t = 0; t < tt; t++)
      c[r][t] = first ? _mm512_setzero_ps () : _mm512_load_ps (acc + (r * m + t) * 16);

  for (; i + 16 <= kc; i += 16)
    {
      __m512 xv[4], wv[4];
      for (int t = 0; t < tt; t++)
        xv[t] = _mm512_loadu_ps (x + t * ldx + i);
      for (int r = 0; r < 4; r++)
        wv[r] = _mm512_loadu_ps (wr[r] + i);
      for (int r = 0; r < 4; r++)
        for (int t = 0; t < tt; t++)
          c[r][t] = _mm512_fmadd_ps (xv[t], wv[r], c[r][t]);
    }
  if (i < kc)
    {
      /* Only F32/F16/BF16 rows have a K that is not a multiple of 16;
       * masked-off lanes are not read. */
      const __mmask16 k_mask = (__mmask16) ((1u << (kc - i)) - 1);
      __m512 xv[4], wv[4];
      for (int t = 0; t < tt; t++)
        xv[t] = _mm512_maskz_loadu_ps (k_mask, x + t * ldx + i);
      for (int r = 0; r < 4; r++)
        wv[r] = _mm512_maskz_loadu_ps (k_mask, wr[r] + i);
      for (int r = 0; r < 4; r++)
        for (int t = 0; t < tt; t++)
          c[r][t] = _mm512_fmadd_ps (xv[t], wv[r], c[r][t]);
    }

  for (int r = 0; r < 4; r++)
    for (int t = 0; t < tt; t++)
      _mm512_store_ps (acc + (r * m + t) * 16, c[r][t]);
}

UM_TARGET_AVX512 static void
dot_rows (const float *x, int64_t ldx, int64_t m, const float *const *wr, int64_t kc,
          float *acc, gboolean first)
{
  int64_t t = 0;

  for (; t + 4 <= m; t += 4)
    dot_tile (4, x + t * ldx, ldx, wr, kc, acc + t * 16, m, first);
  switch (m - t)
    {
    case 3: dot_tile (3, x + t * ldx, ldx, wr, kc, acc + t * 16, m, first); break;
    case 2: dot_tile (2, x + t * ldx, ldx, wr, kc, acc + t * 16, m, first); break;
    case 1: dot_tile (1, x + t * ldx, ldx, wr, kc, acc + t * 16, m, first); break;
    default: break;
    }
}

UM_TARGET_AVX512 static void
write_tile_dot (const float *acc, int64_t rows, int64_t m, float *out, int64_t n, int64_t j0)
{
  for (int64_t t = 0; t < m; t++)
    for (int64_t r = 0; r < rows; r++)
      out[t * n + j0 + r] = _mm512_reduce_add_ps (_mm512_load_ps (acc + (r * m + t) * 16));
}

/* Writes the sums of one tile (rows j0 .. j0+rows-1) to out: 16 rows × 16
 * tokens at a time are transposed so that out gets whole row segments. */
UM_TARGET_AVX512 static void
write_tile (const float *acc, int64_t ars, int64_t rows, int64_t mv, int64_t m,
            float *out, int64_t n, int64_t j0)
{
  for (int64_t rr = 0; rr < rows; rr += 16)
    {
      const int64_t nr = MIN (16, rows - rr);

      for (int64_t v = 0; v < mv; v++)
        {
          const int64_t nt = MIN (16, m - 16 * v);
          __m512 r[16];

          if (nr < 16)
            {
              /* A partial group: only rows that were computed are read. */
              for (int64_t q = 0; q < nr; q++)
                for (int64_t t = 0; t < nt; t++)
                  out[(16 * v + t) * n + j0 + rr + q] = acc[(rr + q) * ars + 16 * v + t];
              continue;
            }
          for (int q = 0; q < 16; q++)
            r[q] = _mm512_load_ps (acc + (rr + q) * ars + 16 * v);
          transpose16 (r);
          for (int64_t t = 0; t < nt; t++)
            _mm512_storeu_ps (out + (16 * v + t) * n + j0 + rr, r[t]);
        }
    }
}

typedef struct {
  UmDType      t;
  const uint8_t *w;
  int64_t      n, k, m;
  int64_t      row_bytes, block_elems, block_bytes;
  const float *x;
  float       *out;
  const Plan  *plan;
  uint8_t     *scratch;   /* aligned */
} Job;

/* The weight bytes the next group of this tile will read (the next 8 rows
 * at this K block, or the first rows at the next one), for the kernels to
 * prefetch while they run on this group.  Converting reads one row segment
 * after the other, which on its own leaves the memory system mostly idle. */
static void
next_group_prefetch (const Job *job, int64_t j0, int64_t rows, int64_t k0, int64_t g, Prefetch *pf)
{
  const Plan *p = job->plan;

  pf->rows = 0;
  g += NR;
  if (g >= rows)
    {
      g = 0;
      k0 += p->kc;
      if (k0 >= job->k)
        return;
    }

  const int64_t kcur = MIN (p->kc, job->k - k0);
  const int64_t seg = kcur / job->block_elems * job->block_bytes;

  pf->base = job->w + (j0 + g) * job->row_bytes + k0 / job->block_elems * job->block_bytes;
  pf->row_bytes = job->row_bytes;
  pf->lines = (seg + 63) / 64;
  pf->rows = MIN (NR, rows - g);
}

/* One tile of weight rows, all K blocks, then its output. */
UM_TARGET_AVX512 static void
run_tile (const Job *job, int64_t tile, const float *xp, float *wbuf, float *acc)
{
  const Plan *p = job->plan;
  const int64_t k = job->k, mv = p->mv, ars = 16 * mv;
  const int64_t j0 = tile * p->nt;
  const int64_t rows = MIN (p->nt, job->n - j0);
  const int64_t np = n_panels (mv);

  for (int64_t k0 = 0; k0 < k; k0 += p->kc)
    {
      const int64_t kcur = MIN (p->kc, k - k0);
      const gboolean first = k0 == 0;

      for (int64_t g = 0; g < rows; g += NR)
        {
          const int64_t grows = MIN (NR, rows - g);
          const float *wr[NR];
          Prefetch pf;

          if (p->convert)
            {
              const uint8_t *src = job->w + (j0 + g) * job->row_bytes
                                   + k0 / job->block_elems * job->block_bytes;
              for (int64_t r = 0; r < grows; r++)
                convert_avx512 (job->t, src + r * job->row_bytes, wbuf + r * p->ws, kcur);
              for (int r = 0; r < NR; r++)
                wr[r] = wbuf + MIN (r, grows - 1) * p->ws;
            }
          else
            {
              const float *wf = (const float *) (const void *) job->w;
              for (int r = 0; r < NR; r++)
                wr[r] = wf + (j0 + g + MIN (r, grows - 1)) * k + k0;
            }
          next_group_prefetch (job, j0, rows, k0, g, &pf);

          /* Rows past grows repeat the last one; their sums land in acc
           * rows that write_tile never reads. */
          if (p->dot)
            {
              const float *xd = xp + k0;
              /* (short loops: the lines go out at once) */
              for (int64_t r = 0; r < pf.rows; r++)
                for (int64_t l = 0; l < pf.lines; l++)
                  __builtin_prefetch (pf.base + r * pf.row_bytes + l * 64, 0, 2);
              dot_rows (xd, p->ldxp, job->m, wr, kcur, acc + g * job->m * 16, first);
              dot_rows (xd, p->ldxp, job->m, wr + 4, kcur, acc + (g + 4) * job->m * 16, first);
              continue;
            }
          for (int64_t pi = 0; pi < np; pi++)
            {
              int64_t v0;
              int mrv;
              panel_of (mv, pi, &v0, &mrv);
              const float *xpp = xp + 16 * k * v0 + k0 * 16 * mrv;
              float *a = acc + g * ars + 16 * v0;
              /* The next group's lines are spread over the first panel. */
              const Prefetch none = { NULL, 0, 0, 0 };
              const Prefetch *ppf = pi == 0 ? &pf : &none;
              if (mrv == 3)
                micro_3 (xpp, wr, kcur, a, ars, first, ppf);
              else if (mrv == 2)
                micro_2 (xpp, wr, kcur, a, ars, first, ppf);
              else
                micro_1 (xpp, wr, kcur, a, ars, first, ppf);
            }
        }
    }
  if (p->dot)
    write_tile_dot (acc, rows, job->m, job->out, job->n, j0);
  else
    write_tile (acc, ars, rows, mv, job->m, job->out, job->n, j0);
}

static uint8_t *
thread_scratch (const Job *job, int tid)
{
  const Plan *p = job->plan;
  return job->scratch + p->xp_bytes + (size_t) tid * (p->wbuf_bytes + p->acc_bytes);
}

/* x, shared: the dot kernel's rows copied to skewed strides. */
static void
copy_rows (void *ctx, int64_t b, int64_t e, int tid)
{
  const Job *job = ctx;
  float *xp = (float *) (void *) job->scratch;
  (void) tid;
  for (int64_t i = b; i < e; i++)
    memcpy (xp + i * job->plan->ldxp, job->x + i * job->k, (size_t) job->k * sizeof (float));
}

/* ... or the token panels, one panel per item: a panel interleaves its
 * vectors 64 bytes at a time, so two threads packing vectors of one panel
 * would write the same cache lines (at 2 threads that made the packing
 * about 15 times slower than at one). */
static void
pack_vectors (void *ctx, int64_t b, int64_t e, int tid)
{
  const Job *job = ctx;
  float *xp = (float *) (void *) job->scratch;
  (void) tid;
  for (int64_t p = b; p < e; p++)
    {
      int64_t v0;
      int mrv;
      panel_of (job->plan->mv, p, &v0, &mrv);
      for (int64_t v = v0; v < v0 + mrv; v++)
        pack_vector (job->x, job->m, job->k, v, xp + 16 * job->k * v0 + 16 * (v - v0), 16 * mrv);
    }
}

static void
run_tiles (void *ctx, int64_t b, int64_t e, int tid)
{
  const Job *job = ctx;
  const Plan *p = job->plan;
  uint8_t *mine = thread_scratch (job, tid);

  for (int64_t tile = b; tile < e; tile++)
    run_tile (job, tile, (float *) (void *) job->scratch, (float *) (void *) mine,
              (float *) (void *) (mine + p->wbuf_bytes));
}

/* Not AVX-512 itself (only calls such functions). */
static void
run_job (const Job *job)
{
  const Plan *p = job->plan;

  /* Every thread needs all of xp: it is ready when its loop returns. */
  if (p->dot)
    um_pool_for (job->m, 16, p->threads, copy_rows, (void *) job);
  else
    um_pool_for (n_panels (p->mv), 1, p->threads, pack_vectors, (void *) job);
  um_pool_for (p->n_tiles, 1, p->threads, run_tiles, (void *) job);
}

#endif /* UM_HAVE_X86_SIMD */

gboolean
um_gemm_f32_avx512 (UmDType t, const void *w, int64_t n, int64_t k,
                    const float *x, int64_t m, float *out, void *scratch, size_t scratch_bytes)
{
  int64_t be, bb;

  if (!check_args (t, n, k, m, &be, &bb))
    return FALSE;
#if UM_HAVE_X86_SIMD
  if (um_cpu_isa () < UM_ISA_AVX512)
    return FALSE;
  if (m == 0 || n == 0)
    return TRUE;
  if (out == NULL)
    return FALSE;
  if (k == 0)
    {
      /* Empty sums. */
      for (int64_t i = 0; i < m; i++)
        memset (out + i * n, 0, (size_t) n * sizeof (float));
      return TRUE;
    }
  if (w == NULL || x == NULL)
    return FALSE;

  Plan plan;
  void *own = NULL;
  if (!make_plan (t, n, k, m, &plan))
    return FALSE;
  if (scratch == NULL || scratch_bytes < plan.total)
    {
      own = g_try_malloc (plan.total);
      if (own == NULL)
        return FALSE;
      scratch = own;
    }

  Job job = {
    .t = t,
    .w = w,
    .n = n,
    .k = k,
    .m = m,
    .row_bytes = k / be * bb,
    .block_elems = be,
    .block_bytes = bb,
    .x = x,
    .out = out,
    .plan = &plan,
    .scratch = (uint8_t *) (((uintptr_t) scratch + ALIGN - 1) & ~(uintptr_t) (ALIGN - 1)),
  };
  run_job (&job);
  g_free (own);
  return TRUE;
#else
  return FALSE;
#endif
}

/* um-quant.c — fast CPU paths for llama.cpp's block formats: dequantization
 * (used to feed sgemm), direct quantized dot products, and the weight matrix
 * product.
 *
 * SIMD code is compiled per function with __attribute__ ((target)) and
 * picked at run time with __builtin_cpu_supports (), so the file builds with
 * -march=x86-64 (and on other architectures, where only the portable code
 * exists) yet uses AVX2 on the machines we run on.
 *
 * The dequantizers must equal um-quant-ref.c bit for bit: each value is
 * (float) q * scale, then a separate add or subtract, with the scales
 * computed by the same scalar expressions.  That holds as long as the
 * compiler does not contract a multiply and an add into an FMA, which GCC
 * does not do in ISO C mode (-std=c11, as the project builds); with
 * -std=gnu11 GCC would be free to fuse the vector mul/add below, so keep
 * this file in ISO mode.
 */
#include "um-quant.h"

#include "um-cpu-isa.h"
#include "um-cpu-threads.h"
#include "um-pool.h"
#include "um-half.h"
#include "um-quant-avx512.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#ifdef _OPENMP
#endif

/* UM_QUANT_PORTABLE_ONLY builds what other architectures get, to check it. */
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(UM_QUANT_PORTABLE_ONLY)
#define UM_QUANT_X86 1
#include <immintrin.h>
#define UM_AVX2 __attribute__ ((target ("avx2,fma,f16c")))
#else
#define UM_QUANT_X86 0
#endif

enum {
  SIMD_SCALAR = 0,
  SIMD_AVX2 = 1,
};

static int simd_allowed = 1;

/* The AVX2 kernels here serve every level from AVX2 up; AVX-512 machines
 * additionally get the AVX-512 converters and our own GEMM, both in
 * um-gemm-avx512.c. */
static inline int
get_simd (void)
{
  if (!__atomic_load_n (&simd_allowed, __ATOMIC_RELAXED))
    return SIMD_SCALAR;
#if UM_QUANT_X86
  return um_cpu_isa () >= UM_ISA_AVX2 ? SIMD_AVX2 : SIMD_SCALAR;
#else
  return SIMD_SCALAR;
#endif
}

void
um_quant_set_simd_enabled (gboolean enabled)
{
  __atomic_store_n (&simd_allowed, enabled ? 1 : 0, __ATOMIC_RELAXED);
}

const char *
um_quant_simd_level (void)
{
  return get_simd () == SIMD_SCALAR ? "scalar" : um_cpu_isa_name (um_cpu_isa ());
}

static gboolean
check_len (UmDType t, int64_t n, int64_t *n_blocks)
{
  const UmDTypeInfo *info = um_dtype_info (t);

  if (info == NULL || t == UM_DTYPE_I32 || n < 0 || n % info->block_elems != 0)
    return FALSE;
  *n_blocks = n / info->block_elems;
  return TRUE;
}

/* ======================================================================== */
/* Dequantization, AVX2                                                      */
/* ======================================================================== */

#if UM_QUANT_X86

/* Scalar half -> float with F16C: exact like um_f16_to_f32 (), but without
 * its branches (NaN payloads are quieted, which nothing here relies on). */
UM_AVX2 static inline float
h2f (uint16_t h)
{
  return _cvtsh_ss (h);
}

/* 16 signed bytes -> 16 floats, each (float) q * d. */
UM_AVX2 static inline void
store_i8x16 (float *y, __m128i q, __m256 d)
{
  __m256 a = _mm256_cvtepi32_ps (_mm256_cvtepi8_epi32 (q));
  __m256 b = _mm256_cvtepi32_ps (_mm256_cvtepi8_epi32 (_mm_srli_si128 (q, 8)));
  _mm256_storeu_ps (y, _mm256_mul_ps (a, d));
  _mm256_storeu_ps (y + 8, _mm256_mul_ps (b, d));
}

/* 16 bytes (0..127) -> 16 floats, each (float) q * d + m. */
UM_AVX2 static inline void
store_i8x16_add (float *y, __m128i q, __m256 d, __m256 m)
{
  __m256 a = _mm256_cvtepi32_ps (_mm256_cvtepi8_epi32 (q));
  __m256 b = _mm256_cvtepi32_ps (_mm256_cvtepi8_epi32 (_mm_srli_si128 (q, 8)));
  _mm256_storeu_ps (y, _mm256_add_ps (_mm256_mul_ps (a, d), m));
  _mm256_storeu_ps (y + 8, _mm256_add_ps (_mm256_mul_ps (b, d), m));
}

/* 32 bytes (0..127) -> 32 floats, each d * (float) q - m. */
UM_AVX2 static inline void
store_u8x32_sub (float *y, __m256i q, __m256 d, __m256 m)
{
  __m128i lo = _mm256_castsi256_si128 (q);
  __m128i hi = _mm256_extracti128_si256 (q, 1);
  __m256 f0 = _mm256_cvtepi32_ps (_mm256_cvtepu8_epi32 (lo));
  __m256 f1 = _mm256_cvtepi32_ps (_mm256_cvtepu8_epi32 (_mm_srli_si128 (lo, 8)));
  __m256 f2 = _mm256_cvtepi32_ps (_mm256_cvtepu8_epi32 (hi));
  __m256 f3 = _mm256_cvtepi32_ps (_mm256_cvtepu8_epi32 (_mm_srli_si128 (hi, 8)));
  _mm256_storeu_ps (y, _mm256_sub_ps (_mm256_mul_ps (d, f0), m));
  _mm256_storeu_ps (y + 8, _mm256_sub_ps (_mm256_mul_ps (d, f1), m));
  _mm256_storeu_ps (y + 16, _mm256_sub_ps (_mm256_mul_ps (d, f2), m));
  _mm256_storeu_ps (y + 24, _mm256_sub_ps (_mm256_mul_ps (d, f3), m));
}

/* Expands 32 bits into 32 bytes, 0xff where the bit is set (byte i <- bit i). */
UM_AVX2 static inline __m256i
bits_to_bytes (uint32_t bits)
{
  const __m256i pick = _mm256_setr_epi8 (0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                         2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x ((long long) 0x8040201008040201ull);
  __m256i v = _mm256_shuffle_epi8 (_mm256_set1_epi32 ((int) bits), pick);
  return _mm256_cmpeq_epi8 (_mm256_and_si256 (v, bit), bit);
}

static inline uint32_t
load_u32 (const uint8_t *p)
{
  return (uint32_t) p[0] | ((uint32_t) p[1] << 8) | ((uint32_t) p[2] << 16) | ((uint32_t) p[3] << 24);
}

UM_AVX2 static void
dequant_f16_avx2 (const uint16_t *src, float *y, int64_t n)
{
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps (y + i, _mm256_cvtph_ps (_mm_loadu_si128 ((const __m128i *) (src + i))));
  for (; i < n; i++)
    {
      uint16_t h;
      memcpy (&h, src + i, sizeof h);
      y[i] = h2f (h);
    }
}

UM_AVX2 static void
dequant_bf16_avx2 (const uint16_t *src, float *y, int64_t n)
{
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    {
      __m256i v = _mm256_cvtepu16_epi32 (_mm_loadu_si128 ((const __m128i *) (src + i)));
      _mm256_storeu_ps (y + i, _mm256_castsi256_ps (_mm256_slli_epi32 (v, 16)));
    }
  for (; i < n; i++)
    {
      uint16_t h;
      memcpy (&h, src + i, sizeof h);
      y[i] = um_bf16_to_f32 (h);
    }
}

UM_AVX2 static void
dequant_q8_0_avx2 (const UmBlockQ8_0 *b, float *y, int64_t nb)
{
  for (int64_t i = 0; i < nb; i++, y += 32)
    {
      __m256 d = _mm256_set1_ps (h2f (b[i].d));
      store_i8x16 (y, _mm_loadu_si128 ((const __m128i *) b[i].qs), d);
      store_i8x16 (y + 16, _mm_loadu_si128 ((const __m128i *) (b[i].qs + 16)), d);
    }
}

UM_AVX2 static void
dequant_q4_0_avx2 (const UmBlockQ4_0 *b, float *y, int64_t nb)
{
  const __m128i low4 = _mm_set1_epi8 (0x0f), eight = _mm_set1_epi8 (8);

  for (int64_t i = 0; i < nb; i++, y += 32)
    {
      __m256 d = _mm256_set1_ps (h2f (b[i].d));
      __m128i q = _mm_loadu_si128 ((const __m128i *) b[i].qs);
      __m128i lo = _mm_sub_epi8 (_mm_and_si128 (q, low4), eight);
      __m128i hi = _mm_sub_epi8 (_mm_and_si128 (_mm_srli_epi16 (q, 4), low4), eight);
      store_i8x16 (y, lo, d);
      store_i8x16 (y + 16, hi, d);
    }
}

UM_AVX2 static void
dequant_q4_1_avx2 (const UmBlockQ4_1 *b, float *y, int64_t nb)
{
  const __m128i low4 = _mm_set1_epi8 (0x0f);

  for (int64_t i = 0; i < nb; i++, y += 32)
    {
      __m256 d = _mm256_set1_ps (h2f (b[i].d));
      __m256 m = _mm256_set1_ps (h2f (b[i].m));
      __m128i q = _mm_loadu_si128 ((const __m128i *) b[i].qs);
      store_i8x16_add (y, _mm_and_si128 (q, low4), d, m);
      store_i8x16_add (y + 16, _mm_and_si128 (_mm_srli_epi16 (q, 4), low4), d, m);
    }
}

/* The 32 5-bit codes of a Q5_x block, in element order, as bytes 0..31. */
UM_AVX2 static inline __m256i
unpack_q5 (const uint8_t *qs, const uint8_t *qh)
{
  const __m128i low4 = _mm_set1_epi8 (0x0f);
  __m128i q = _mm_loadu_si128 ((const __m128i *) qs);
  __m256i nib = _mm256_set_m128i (_mm_and_si128 (_mm_srli_epi16 (q, 4), low4),
                                  _mm_and_si128 (q, low4));
  __m256i hbit = _mm256_and_si256 (bits_to_bytes (load_u32 (qh)), _mm256_set1_epi8 (0x10));
  return _mm256_or_si256 (nib, hbit);
}

UM_AVX2 static void
dequant_q5_0_avx2 (const UmBlockQ5_0 *b, float *y, int64_t nb)
{
  for (int64_t i = 0; i < nb; i++, y += 32)
    {
      __m256 d = _mm256_set1_ps (h2f (b[i].d));
      __m256i q = _mm256_sub_epi8 (unpack_q5 (b[i].qs, b[i].qh), _mm256_set1_epi8 (16));
      store_i8x16 (y, _mm256_castsi256_si128 (q), d);
      store_i8x16 (y + 16, _mm256_extracti128_si256 (q, 1), d);
    }
}

UM_AVX2 static void
dequant_q5_1_avx2 (const UmBlockQ5_1 *b, float *y, int64_t nb)
{
  for (int64_t i = 0; i < nb; i++, y += 32)
    {
      __m256 d = _mm256_set1_ps (h2f (b[i].d));
      __m256 m = _mm256_set1_ps (h2f (b[i].m));
      __m256i q = unpack_q5 (b[i].qs, b[i].qh);
      store_i8x16_add (y, _mm256_castsi256_si128 (q), d, m);
      store_i8x16_add (y + 16, _mm256_extracti128_si256 (q, 1), d, m);
    }
}

UM_AVX2 static void
dequant_q4_K_avx2 (const UmBlockQ4_K *b, float *y, int64_t nb)
{
  const __m256i low4 = _mm256_set1_epi8 (0x0f);

  for (int64_t i = 0; i < nb; i++)
    {
      const float d = h2f (b[i].d);
      const float dmin = h2f (b[i].dmin);

      for (int g = 0; g < 4; g++, y += 64)
        {
          uint8_t sc, m;
          um_quant_get_scale_min_k4 (2 * g, b[i].scales, &sc, &m);
          const float d1 = d * (float) sc, m1 = dmin * (float) m;
          um_quant_get_scale_min_k4 (2 * g + 1, b[i].scales, &sc, &m);
          const float d2 = d * (float) sc, m2 = dmin * (float) m;

          __m256i q = _mm256_loadu_si256 ((const __m256i *) (b[i].qs + 32 * g));
          store_u8x32_sub (y, _mm256_and_si256 (q, low4), _mm256_set1_ps (d1), _mm256_set1_ps (m1));
          store_u8x32_sub (y + 32, _mm256_and_si256 (_mm256_srli_epi16 (q, 4), low4),
                           _mm256_set1_ps (d2), _mm256_set1_ps (m2));
        }
    }
}

UM_AVX2 static void
dequant_q5_K_avx2 (const UmBlockQ5_K *b, float *y, int64_t nb)
{
  const __m256i low4 = _mm256_set1_epi8 (0x0f), one = _mm256_set1_epi8 (1);

  for (int64_t i = 0; i < nb; i++)
    {
      const float d = h2f (b[i].d);
      const float dmin = h2f (b[i].dmin);
      const __m256i qh = _mm256_loadu_si256 ((const __m256i *) b[i].qh);

      for (int g = 0; g < 4; g++, y += 64)
        {
          uint8_t sc, m;
          um_quant_get_scale_min_k4 (2 * g, b[i].scales, &sc, &m);
          const float d1 = d * (float) sc, m1 = dmin * (float) m;
          um_quant_get_scale_min_k4 (2 * g + 1, b[i].scales, &sc, &m);
          const float d2 = d * (float) sc, m2 = dmin * (float) m;

          __m256i q = _mm256_loadu_si256 ((const __m256i *) (b[i].qs + 32 * g));
          /* 16-bit shifts are fine per byte: the mask keeps only bit 0,
           * which came from the same byte. */
          __m256i h0 = _mm256_and_si256 (_mm256_srl_epi16 (qh, _mm_cvtsi32_si128 (2 * g)), one);
          __m256i h1 = _mm256_and_si256 (_mm256_srl_epi16 (qh, _mm_cvtsi32_si128 (2 * g + 1)), one);
          __m256i q0 = _mm256_or_si256 (_mm256_and_si256 (q, low4), _mm256_slli_epi16 (h0, 4));
          __m256i q1 = _mm256_or_si256 (_mm256_and_si256 (_mm256_srli_epi16 (q, 4), low4),
                                        _mm256_slli_epi16 (h1, 4));
          store_u8x32_sub (y, q0, _mm256_set1_ps (d1), _mm256_set1_ps (m1));
          store_u8x32_sub (y + 32, q1, _mm256_set1_ps (d2), _mm256_set1_ps (m2));
        }
    }
}

UM_AVX2 static void
dequant_q6_K_avx2 (const UmBlockQ6_K *b, float *y, int64_t nb)
{
  const __m256i low4 = _mm256_set1_epi8 (0x0f), three = _mm256_set1_epi8 (3);
  const __m256i off = _mm256_set1_epi8 (32);

  for (int64_t i = 0; i < nb; i++)
    {
      const float d = h2f (b[i].d);

      for (int h = 0; h < 2; h++, y += 128)
        {
          const uint8_t *ql = b[i].ql + 64 * h;
          const int8_t *sc = b[i].scales + 8 * h;
          __m256i a = _mm256_loadu_si256 ((const __m256i *) ql);
          __m256i c = _mm256_loadu_si256 ((const __m256i *) (ql + 32));
          __m256i qh = _mm256_loadu_si256 ((const __m256i *) (b[i].qh + 32 * h));
          __m256i q[4];

          q[0] = _mm256_or_si256 (_mm256_and_si256 (a, low4),
                                  _mm256_slli_epi16 (_mm256_and_si256 (qh, three), 4));
          q[1] = _mm256_or_si256 (_mm256_and_si256 (c, low4),
                                  _mm256_slli_epi16 (_mm256_and_si256 (_mm256_srli_epi16 (qh, 2), three), 4));
          q[2] = _mm256_or_si256 (_mm256_and_si256 (_mm256_srli_epi16 (a, 4), low4),
                                  _mm256_slli_epi16 (_mm256_and_si256 (_mm256_srli_epi16 (qh, 4), three), 4));
          q[3] = _mm256_or_si256 (_mm256_and_si256 (_mm256_srli_epi16 (c, 4), low4),
                                  _mm256_slli_epi16 (_mm256_and_si256 (_mm256_srli_epi16 (qh, 6), three), 4));
          for (int k = 0; k < 4; k++)
            {
              __m256i s = _mm256_sub_epi8 (q[k], off);
              __m256 da = _mm256_set1_ps (d * (float) sc[2 * k]);
              __m256 db = _mm256_set1_ps (d * (float) sc[2 * k + 1]);
              store_i8x16 (y + 32 * k, _mm256_castsi256_si128 (s), da);
              store_i8x16 (y + 32 * k + 16, _mm256_extracti128_si256 (s, 1), db);
            }
        }
    }
}

static gboolean
dequant_avx2 (UmDType t, const void *src, float *dst, int64_t n, int64_t nb)
{
  switch (t)
    {
    case UM_DTYPE_F16: dequant_f16_avx2 (src, dst, n); return TRUE;
    case UM_DTYPE_BF16: dequant_bf16_avx2 (src, dst, n); return TRUE;
    case UM_DTYPE_Q8_0: dequant_q8_0_avx2 (src, dst, nb); return TRUE;
    case UM_DTYPE_Q4_0: dequant_q4_0_avx2 (src, dst, nb); return TRUE;
    case UM_DTYPE_Q4_1: dequant_q4_1_avx2 (src, dst, nb); return TRUE;
    case UM_DTYPE_Q5_0: dequant_q5_0_avx2 (src, dst, nb); return TRUE;
    case UM_DTYPE_Q5_1: dequant_q5_1_avx2 (src, dst, nb); return TRUE;
    case UM_DTYPE_Q4_K: dequant_q4_K_avx2 (src, dst, nb); return TRUE;
    case UM_DTYPE_Q5_K: dequant_q5_K_avx2 (src, dst, nb); return TRUE;
    case UM_DTYPE_Q6_K: dequant_q6_K_avx2 (src, dst, nb); return TRUE;
    default: return FALSE;
    }
}

#endif /* UM_QUANT_X86 */

gboolean
um_quant_dequantize_row (UmDType t, const void *src, float *dst, int64_t n)
{
  int64_t nb;

  if (!check_len (t, n, &nb) || (n > 0 && (src == NULL || dst == NULL)))
    return FALSE;
  if (t == UM_DTYPE_F32)
    {
      memcpy (dst, src, (size_t) n * sizeof (float));
      return TRUE;
    }
#if UM_QUANT_X86
  /* The AVX-512 converters (um-gemm-avx512.c) decline below AVX-512. */
  if (get_simd () >= SIMD_AVX2 && um_quant_dequantize_row_avx512 (t, src, dst, n))
    return TRUE;
  if (get_simd () >= SIMD_AVX2 && dequant_avx2 (t, src, dst, n, nb))
    return TRUE;
#endif
  /* The reference loops are simple enough for the compiler to vectorise
   * reasonably on other architectures. */
  return um_quant_dequantize_row_ref (t, src, dst, n);
}

/* ======================================================================== */
/* Activation quantization                                                   */
/* ======================================================================== */

gboolean
um_quant_has_vec_dot (UmDType t)
{
  switch (t)
    {
    case UM_DTYPE_Q8_0:
    case UM_DTYPE_Q4_0:
    case UM_DTYPE_Q4_1:
    case UM_DTYPE_Q5_0:
    case UM_DTYPE_Q5_1:
    case UM_DTYPE_Q4_K:
    case UM_DTYPE_Q5_K:
    case UM_DTYPE_Q6_K:
      return TRUE;
    default:
      return FALSE;
    }
}

static gboolean
uses_q8_K (UmDType t)
{
  return t == UM_DTYPE_Q4_K || t == UM_DTYPE_Q5_K || t == UM_DTYPE_Q6_K;
}

size_t
um_quant_q8_row_bytes (UmDType for_type, int64_t n)
{
  int64_t nb;

  if (!um_quant_has_vec_dot (for_type) || !check_len (for_type, n, &nb))
    return 0;
  if (uses_q8_K (for_type))
    return (size_t) nb * sizeof (UmBlockQ8_K);
  return (size_t) (n / UM_QK8_0) * sizeof (UmBlockQ8_0);
}

gboolean
um_quant_quantize_row_q8 (UmDType for_type, const float *x, void *dst, int64_t n)
{
  int64_t nb;

  if (!um_quant_has_vec_dot (for_type) || !check_len (for_type, n, &nb))
    return FALSE;
  /* Activation rows are K long against N*K weight work per row, so the
   * scalar reference quantizer is not worth vectorising. */
  if (uses_q8_K (for_type))
    return um_quant_quantize_row_q8_K_ref (x, dst, n);
  return um_quant_quantize_row_q8_0_ref (x, dst, n);
}

/* ======================================================================== */
/* Direct dot products, portable                                             */
/* ======================================================================== */

/* All of them sum integer products per block exactly, then scale in float;
 * so they differ from dot (dequant (w), dequant (x)) only by float rounding. */

static float
vec_dot_q8_0_scalar (const UmBlockQ8_0 *w, const UmBlockQ8_0 *x, int64_t nb)
{
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; i++)
    {
      int s = 0;
      for (int j = 0; j < 32; j++)
        s += w[i].qs[j] * x[i].qs[j];
      sum += (float) s * (um_f16_to_f32 (w[i].d) * um_f16_to_f32 (x[i].d));
    }
  return sum;
}

static float
vec_dot_q4_0_scalar (const UmBlockQ4_0 *w, const UmBlockQ8_0 *x, int64_t nb)
{
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; i++)
    {
      int s = 0;
      for (int j = 0; j < 16; j++)
        s += ((w[i].qs[j] & 0x0f) - 8) * x[i].qs[j] + ((w[i].qs[j] >> 4) - 8) * x[i].qs[j + 16];
      sum += (float) s * (um_f16_to_f32 (w[i].d) * um_f16_to_f32 (x[i].d));
    }
  return sum;
}

static float
vec_dot_q4_1_scalar (const UmBlockQ4_1 *w, const UmBlockQ8_0 *x, int64_t nb)
{
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; i++)
    {
      int s = 0, sx = 0;
      for (int j = 0; j < 16; j++)
        {
          s += (w[i].qs[j] & 0x0f) * x[i].qs[j] + (w[i].qs[j] >> 4) * x[i].qs[j + 16];
          sx += x[i].qs[j] + x[i].qs[j + 16];
        }
      const float dx = um_f16_to_f32 (x[i].d);
      sum += (float) s * (um_f16_to_f32 (w[i].d) * dx) + (float) sx * (um_f16_to_f32 (w[i].m) * dx);
    }
  return sum;
}

static inline int
q5_code (const uint8_t *qs, uint32_t qh, int j)
{
  int nib = j < 16 ? (qs[j] & 0x0f) : (qs[j - 16] >> 4);
  return nib | (int) (((qh >> j) & 1u) << 4);
}

static float
vec_dot_q5_0_scalar (const UmBlockQ5_0 *w, const UmBlockQ8_0 *x, int64_t nb)
{
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; i++)
    {
      const uint32_t qh = (uint32_t) w[i].qh[0] | ((uint32_t) w[i].qh[1] << 8) |
                          ((uint32_t) w[i].qh[2] << 16) | ((uint32_t) w[i].qh[3] << 24);
      int s = 0;
      for (int j = 0; j < 32; j++)
        s += (q5_code (w[i].qs, qh, j) - 16) * x[i].qs[j];
      sum += (float) s * (um_f16_to_f32 (w[i].d) * um_f16_to_f32 (x[i].d));
    }
  return sum;
}

static float
vec_dot_q5_1_scalar (const UmBlockQ5_1 *w, const UmBlockQ8_0 *x, int64_t nb)
{
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; i++)
    {
      const uint32_t qh = (uint32_t) w[i].qh[0] | ((uint32_t) w[i].qh[1] << 8) |
                          ((uint32_t) w[i].qh[2] << 16) | ((uint32_t) w[i].qh[3] << 24);
      int s = 0, sx = 0;
      for (int j = 0; j < 32; j++)
        {
          s += q5_code (w[i].qs, qh, j) * x[i].qs[j];
          sx += x[i].qs[j];
        }
      const float dx = um_f16_to_f32 (x[i].d);
      sum += (float) s * (um_f16_to_f32 (w[i].d) * dx) + (float) sx * (um_f16_to_f32 (w[i].m) * dx);
    }
  return sum;
}

/* Q4_K and Q5_K: sum_j d*sc_j*<q, x>_j - dmin*m_j*<1, x>_j, where the second
 * sums come from the Q8_K block's bsums. */
static float
vec_dot_q45_K_scalar (const void *wv, const UmBlockQ8_K *x, int64_t nb, gboolean five)
{
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; i++)
    {
      const uint8_t *scales, *qs, *qh = NULL;
      uint16_t dh, dminh;
      if (five)
        {
          const UmBlockQ5_K *w = (const UmBlockQ5_K *) wv + i;
          scales = w->scales; qs = w->qs; qh = w->qh; dh = w->d; dminh = w->dmin;
        }
      else
        {
          const UmBlockQ4_K *w = (const UmBlockQ4_K *) wv + i;
          scales = w->scales; qs = w->qs; dh = w->d; dminh = w->dmin;
        }
      int32_t sumi = 0, summ = 0;
      for (int j = 0; j < 8; j++)
        {
          uint8_t sc, m;
          int g = j / 2, hi = j % 2, s = 0;
          um_quant_get_scale_min_k4 (j, scales, &sc, &m);
          for (int l = 0; l < 32; l++)
            {
              int q = hi ? (qs[32 * g + l] >> 4) : (qs[32 * g + l] & 0x0f);
              if (qh != NULL)
                q |= ((qh[l] >> j) & 1) << 4;
              s += q * x[i].qs[32 * j + l];
            }
          sumi += sc * s;
          summ += m * (x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]);
        }
      sum += x[i].d * um_f16_to_f32 (dh) * (float) sumi - x[i].d * um_f16_to_f32 (dminh) * (float) summ;
    }
  return sum;
}

static float
vec_dot_q6_K_scalar (const UmBlockQ6_K *w, const UmBlockQ8_K *x, int64_t nb)
{
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; i++)
    {
      int32_t sumi = 0;
      for (int h = 0; h < 2; h++)
        {
          const uint8_t *ql = w[i].ql + 64 * h, *qh = w[i].qh + 32 * h;
          const int8_t *xq = x[i].qs + 128 * h;
          int s[8] = { 0 };
          for (int l = 0; l < 32; l++)
            {
              int is = l / 16;
              s[is + 0] += (((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) - 32) * xq[l];
              s[is + 2] += (((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32) * xq[l + 32];
              s[is + 4] += (((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32) * xq[l + 64];
              s[is + 6] += (((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32) * xq[l + 96];
            }
          for (int k = 0; k < 8; k++)
            sumi += w[i].scales[8 * h + k] * s[k];
        }
      sum += x[i].d * um_f16_to_f32 (w[i].d) * (float) sumi;
    }
  return sum;
}

/* ======================================================================== */
/* Direct dot products, AVX2                                                 */
/* ======================================================================== */

#if UM_QUANT_X86

UM_AVX2 static inline float
hsum_ps (__m256 v)
{
  __m128 s = _mm_add_ps (_mm256_castps256_ps128 (v), _mm256_extractf128_ps (v, 1));
  s = _mm_add_ps (s, _mm_movehl_ps (s, s));
  s = _mm_add_ss (s, _mm_movehdup_ps (s));
  return _mm_cvtss_f32 (s);
}

UM_AVX2 static inline int
hsum_epi32 (__m256i v)
{
  __m128i s = _mm_add_epi32 (_mm256_castsi256_si128 (v), _mm256_extracti128_si256 (v, 1));
  s = _mm_add_epi32 (s, _mm_shuffle_epi32 (s, _MM_SHUFFLE (1, 0, 3, 2)));
  s = _mm_add_epi32 (s, _mm_shuffle_epi32 (s, _MM_SHUFFLE (2, 3, 0, 1)));
  return _mm_cvtsi128_si32 (s);
}

/* 8 int32 sums of a*b over 32 signed bytes: maddubs wants one unsigned
 * operand, so move a's sign onto b (|a| <= 128 and |b| <= 127 keep the
 * pairwise int16 sums from saturating). */
UM_AVX2 static inline __m256i
dot_i8 (__m256i a, __m256i b)
{
  __m256i p = _mm256_maddubs_epi16 (_mm256_sign_epi8 (a, a), _mm256_sign_epi8 (b, a));
  return _mm256_madd_epi16 (p, _mm256_set1_epi16 (1));
}

/* Same with a unsigned (0..63). */
UM_AVX2 static inline __m256i
dot_u8 (__m256i a, __m256i b)
{
  return _mm256_madd_epi16 (_mm256_maddubs_epi16 (a, b), _mm256_set1_epi16 (1));
}

UM_AVX2 static float
vec_dot_q8_0_avx2 (const UmBlockQ8_0 *w, const UmBlockQ8_0 *x, int64_t nb)
{
  __m256 acc = _mm256_setzero_ps ();
  for (int64_t i = 0; i < nb; i++)
    {
      __m256i a = _mm256_loadu_si256 ((const __m256i *) w[i].qs);
      __m256i b = _mm256_loadu_si256 ((const __m256i *) x[i].qs);
      __m256 d = _mm256_set1_ps (h2f (w[i].d) * h2f (x[i].d));
      acc = _mm256_fmadd_ps (_mm256_cvtepi32_ps (dot_i8 (a, b)), d, acc);
    }
  return hsum_ps (acc);
}

UM_AVX2 static inline __m256i
unpack_q4 (const uint8_t *qs)
{
  const __m128i low4 = _mm_set1_epi8 (0x0f);
  __m128i q = _mm_loadu_si128 ((const __m128i *) qs);
  return _mm256_set_m128i (_mm_and_si128 (_mm_srli_epi16 (q, 4), low4), _mm_and_si128 (q, low4));
}

UM_AVX2 static float
vec_dot_q4_0_avx2 (const UmBlockQ4_0 *w, const UmBlockQ8_0 *x, int64_t nb)
{
  __m256 acc = _mm256_setzero_ps ();
  for (int64_t i = 0; i < nb; i++)
    {
      __m256i a = _mm256_sub_epi8 (unpack_q4 (w[i].qs), _mm256_set1_epi8 (8));
      __m256i b = _mm256_loadu_si256 ((const __m256i *) x[i].qs);
      __m256 d = _mm256_set1_ps (h2f (w[i].d) * h2f (x[i].d));
      acc = _mm256_fmadd_ps (_mm256_cvtepi32_ps (dot_i8 (a, b)), d, acc);
    }
  return hsum_ps (acc);
}

UM_AVX2 static float
vec_dot_q4_1_avx2 (const UmBlockQ4_1 *w, const UmBlockQ8_0 *x, int64_t nb)
{
  const __m256i ones = _mm256_set1_epi8 (1);
  __m256 acc = _mm256_setzero_ps (), accm = _mm256_setzero_ps ();
  for (int64_t i = 0; i < nb; i++)
    {
      __m256i b = _mm256_loadu_si256 ((const __m256i *) x[i].qs);
      const float dx = h2f (x[i].d);
      __m256 d = _mm256_set1_ps (h2f (w[i].d) * dx);
      __m256 m = _mm256_set1_ps (h2f (w[i].m) * dx);
      acc = _mm256_fmadd_ps (_mm256_cvtepi32_ps (dot_u8 (unpack_q4 (w[i].qs), b)), d, acc);
      accm = _mm256_fmadd_ps (_mm256_cvtepi32_ps (dot_u8 (ones, b)), m, accm);
    }
  return hsum_ps (_mm256_add_ps (acc, accm));
}

UM_AVX2 static float
vec_dot_q5_0_avx2 (const UmBlockQ5_0 *w, const UmBlockQ8_0 *x, int64_t nb)
{
  __m256 acc = _mm256_setzero_ps ();
  for (int64_t i = 0; i < nb; i++)
    {
      __m256i a = _mm256_sub_epi8 (unpack_q5 (w[i].qs, w[i].qh), _mm256_set1_epi8 (16));
      __m256i b = _mm256_loadu_si256 ((const __m256i *) x[i].qs);
      __m256 d = _mm256_set1_ps (h2f (w[i].d) * h2f (x[i].d));
      acc = _mm256_fmadd_ps (_mm256_cvtepi32_ps (dot_i8 (a, b)), d, acc);
    }
  return hsum_ps (acc);
}

UM_AVX2 static float
vec_dot_q5_1_avx2 (const UmBlockQ5_1 *w, const UmBlockQ8_0 *x, int64_t nb)
{
  const __m256i ones = _mm256_set1_epi8 (1);
  __m256 acc = _mm256_setzero_ps (), accm = _mm256_setzero_ps ();
  for (int64_t i = 0; i < nb; i++)
    {
      __m256i b = _mm256_loadu_si256 ((const __m256i *) x[i].qs);
      const float dx = h2f (x[i].d);
      __m256 d = _mm256_set1_ps (h2f (w[i].d) * dx);
      __m256 m = _mm256_set1_ps (h2f (w[i].m) * dx);
      acc = _mm256_fmadd_ps (_mm256_cvtepi32_ps (dot_u8 (unpack_q5 (w[i].qs, w[i].qh), b)), d, acc);
      accm = _mm256_fmadd_ps (_mm256_cvtepi32_ps (dot_u8 (ones, b)), m, accm);
    }
  return hsum_ps (_mm256_add_ps (acc, accm));
}

/* Sum over the 8 sub-blocks of m_j * (bsums[2j] + bsums[2j+1]). */
static inline int32_t
k4_min_sum (const uint8_t *scales, const int16_t *bsums, uint8_t sc[8])
{
  int32_t summ = 0;
  for (int j = 0; j < 8; j++)
    {
      uint8_t m;
      um_quant_get_scale_min_k4 (j, scales, &sc[j], &m);
      summ += m * (bsums[2 * j] + bsums[2 * j + 1]);
    }
  return summ;
}

UM_AVX2 static float
vec_dot_q4_K_avx2 (const UmBlockQ4_K *w, const UmBlockQ8_K *x, int64_t nb)
{
  const __m256i low4 = _mm256_set1_epi8 (0x0f);
  __m256 acc = _mm256_setzero_ps ();
  float accm = 0.0f;

  for (int64_t i = 0; i < nb; i++)
    {
      uint8_t sc[8];
      int32_t summ = k4_min_sum (w[i].scales, x[i].bsums, sc);
      __m256i sumi = _mm256_setzero_si256 ();

      for (int g = 0; g < 4; g++)
        {
          __m256i q = _mm256_loadu_si256 ((const __m256i *) (w[i].qs + 32 * g));
          __m256i b0 = _mm256_loadu_si256 ((const __m256i *) (x[i].qs + 64 * g));
          __m256i b1 = _mm256_loadu_si256 ((const __m256i *) (x[i].qs + 64 * g + 32));
          __m256i p0 = _mm256_maddubs_epi16 (_mm256_and_si256 (q, low4), b0);
          __m256i p1 = _mm256_maddubs_epi16 (_mm256_and_si256 (_mm256_srli_epi16 (q, 4), low4), b1);
          sumi = _mm256_add_epi32 (sumi, _mm256_madd_epi16 (p0, _mm256_set1_epi16 (sc[2 * g])));
          sumi = _mm256_add_epi32 (sumi, _mm256_madd_epi16 (p1, _mm256_set1_epi16 (sc[2 * g + 1])));
        }
      acc = _mm256_fmadd_ps (_mm256_cvtepi32_ps (sumi), _mm256_set1_ps (x[i].d * h2f (w[i].d)), acc);
      accm += x[i].d * h2f (w[i].dmin) * (float) summ;
    }
  return hsum_ps (acc) - accm;
}

UM_AVX2 static float
vec_dot_q5_K_avx2 (const UmBlockQ5_K *w, const UmBlockQ8_K *x, int64_t nb)
{
  const __m256i low4 = _mm256_set1_epi8 (0x0f), one = _mm256_set1_epi8 (1);
  __m256 acc = _mm256_setzero_ps ();
  float accm = 0.0f;

  for (int64_t i = 0; i < nb; i++)
    {
      uint8_t sc[8];
      int32_t summ = k4_min_sum (w[i].scales, x[i].bsums, sc);
      __m256i sumi = _mm256_setzero_si256 ();
      __m256i qh = _mm256_loadu_si256 ((const __m256i *) w[i].qh);

      for (int g = 0; g < 4; g++)
        {
          __m256i q = _mm256_loadu_si256 ((const __m256i *) (w[i].qs + 32 * g));
          __m256i h0 = _mm256_and_si256 (qh, one);
          __m256i h1 = _mm256_and_si256 (_mm256_srli_epi16 (qh, 1), one);
          qh = _mm256_srli_epi16 (qh, 2);
          __m256i q0 = _mm256_or_si256 (_mm256_and_si256 (q, low4), _mm256_slli_epi16 (h0, 4));
          __m256i q1 = _mm256_or_si256 (_mm256_and_si256 (_mm256_srli_epi16 (q, 4), low4),
                                        _mm256_slli_epi16 (h1, 4));
          __m256i b0 = _mm256_loadu_si256 ((const __m256i *) (x[i].qs + 64 * g));
          __m256i b1 = _mm256_loadu_si256 ((const __m256i *) (x[i].qs + 64 * g + 32));
          __m256i p0 = _mm256_maddubs_epi16 (q0, b0);
          __m256i p1 = _mm256_maddubs_epi16 (q1, b1);
          sumi = _mm256_add_epi32 (sumi, _mm256_madd_epi16 (p0, _mm256_set1_epi16 (sc[2 * g])));
          sumi = _mm256_add_epi32 (sumi, _mm256_madd_epi16 (p1, _mm256_set1_epi16 (sc[2 * g + 1])));
        }
      acc = _mm256_fmadd_ps (_mm256_cvtepi32_ps (sumi), _mm256_set1_ps (x[i].d * h2f (w[i].d)), acc);
      accm += x[i].d * h2f (w[i].dmin) * (float) summ;
    }
  return hsum_ps (acc) - accm;
}

/* Q6_K: codes are taken unsigned (0..63) so maddubs applies, and the -32
 * offset is removed afterwards with the bsums: sum sc*(q-32)*x =
 * sum sc*q*x - 32 * sum sc*bsum. */
UM_AVX2 static float
vec_dot_q6_K_avx2 (const UmBlockQ6_K *w, const UmBlockQ8_K *x, int64_t nb)
{
  const __m256i low4 = _mm256_set1_epi8 (0x0f), three = _mm256_set1_epi8 (3);
  float acc = 0.0f;

  for (int64_t i = 0; i < nb; i++)
    {
      __m256i sumi = _mm256_setzero_si256 ();
      int32_t off = 0;

      for (int j = 0; j < 16; j++)
        off += w[i].scales[j] * x[i].bsums[j];

      for (int h = 0; h < 2; h++)
        {
          const uint8_t *ql = w[i].ql + 64 * h;
          const int8_t *sc = w[i].scales + 8 * h;
          const int8_t *xq = x[i].qs + 128 * h;
          __m256i a = _mm256_loadu_si256 ((const __m256i *) ql);
          __m256i c = _mm256_loadu_si256 ((const __m256i *) (ql + 32));
          __m256i qh = _mm256_loadu_si256 ((const __m256i *) (w[i].qh + 32 * h));
          __m256i q[4];

          q[0] = _mm256_or_si256 (_mm256_and_si256 (a, low4),
                                  _mm256_slli_epi16 (_mm256_and_si256 (qh, three), 4));
          q[1] = _mm256_or_si256 (_mm256_and_si256 (c, low4),
                                  _mm256_slli_epi16 (_mm256_and_si256 (_mm256_srli_epi16 (qh, 2), three), 4));
          q[2] = _mm256_or_si256 (_mm256_and_si256 (_mm256_srli_epi16 (a, 4), low4),
                                  _mm256_slli_epi16 (_mm256_and_si256 (_mm256_srli_epi16 (qh, 4), three), 4));
          q[3] = _mm256_or_si256 (_mm256_and_si256 (_mm256_srli_epi16 (c, 4), low4),
                                  _mm256_slli_epi16 (_mm256_and_si256 (_mm256_srli_epi16 (qh, 6), three), 4));
          for (int k = 0; k < 4; k++)
            {
              __m256i b = _mm256_loadu_si256 ((const __m256i *) (xq + 32 * k));
              __m256i p = _mm256_maddubs_epi16 (q[k], b);
              /* int16 lanes 0-7 come from elements 0-15 (scale 2k), 8-15
               * from 16-31 (scale 2k+1). */
              __m256i s = _mm256_set_m128i (_mm_set1_epi16 (sc[2 * k + 1]), _mm_set1_epi16 (sc[2 * k]));
              sumi = _mm256_add_epi32 (sumi, _mm256_madd_epi16 (p, s));
            }
        }
      int32_t total = hsum_epi32 (sumi) - 32 * off;
      acc += x[i].d * h2f (w[i].d) * (float) total;
    }
  return acc;
}

static float
vec_dot_avx2 (UmDType t, const void *w, const void *x, int64_t nb)
{
  switch (t)
    {
    case UM_DTYPE_Q8_0: return vec_dot_q8_0_avx2 (w, x, nb);
    case UM_DTYPE_Q4_0: return vec_dot_q4_0_avx2 (w, x, nb);
    case UM_DTYPE_Q4_1: return vec_dot_q4_1_avx2 (w, x, nb);
    case UM_DTYPE_Q5_0: return vec_dot_q5_0_avx2 (w, x, nb);
    case UM_DTYPE_Q5_1: return vec_dot_q5_1_avx2 (w, x, nb);
    case UM_DTYPE_Q4_K: return vec_dot_q4_K_avx2 (w, x, nb);
    case UM_DTYPE_Q5_K: return vec_dot_q5_K_avx2 (w, x, nb);
    case UM_DTYPE_Q6_K: return vec_dot_q6_K_avx2 (w, x, nb);
    default: return NAN;
    }
}


/* ---- 4 activation rows at a time ----------------------------------------
 *
 * The matrix product calls these: a weight block is unpacked once and
 * multiplied with the same block of four activation rows, which removes
 * most of the unpacking cost per product.  xs is the byte stride between
 * the activation rows. */

#define UM_ALWAYS_INLINE __attribute__ ((always_inline))

/* Unpacks one 32-element weight block: *q the codes as bytes (signed for the
 * symmetric types, 0..31 for Q4_1/Q5_1), *d the scale, *m the offset (0 for
 * symmetric types). */
UM_AVX2 static inline UM_ALWAYS_INLINE __m256i
unpack32_avx2 (UmDType t, const uint8_t *blk, float *d, float *m)
{
  switch (t)
    {
    case UM_DTYPE_Q8_0:
      {
        const UmBlockQ8_0 *b = (const UmBlockQ8_0 *) blk;
        *d = h2f (b->d); *m = 0;
        return _mm256_loadu_si256 ((const __m256i *) b->qs);
      }
    case UM_DTYPE_Q4_0:
      {
        const UmBlockQ4_0 *b = (const UmBlockQ4_0 *) blk;
        *d = h2f (b->d); *m = 0;
        return _mm256_sub_epi8 (unpack_q4 (b->qs), _mm256_set1_epi8 (8));
      }
    case UM_DTYPE_Q4_1:
      {
        const UmBlockQ4_1 *b = (const UmBlockQ4_1 *) blk;
        *d = h2f (b->d); *m = h2f (b->m);
        return unpack_q4 (b->qs);
      }
    case UM_DTYPE_Q5_0:
      {
        const UmBlockQ5_0 *b = (const UmBlockQ5_0 *) blk;
        *d = h2f (b->d); *m = 0;
        return _mm256_sub_epi8 (unpack_q5 (b->qs, b->qh), _mm256_set1_epi8 (16));
      }
    default:
      {
        const UmBlockQ5_1 *b = (const UmBlockQ5_1 *) blk;
        *d = h2f (b->d); *m = h2f (b->m);
        return unpack_q5 (b->qs, b->qh);
      }
    }
}

UM_AVX2 static inline UM_ALWAYS_INLINE void
dot4_q32_avx2 (UmDType t, size_t wbytes, const uint8_t *w, const uint8_t *x, size_t xs,
               int64_t nb, float *res)
{
  const gboolean offset = (t == UM_DTYPE_Q4_1 || t == UM_DTYPE_Q5_1);
  const __m256i ones16 = _mm256_set1_epi16 (1), ones8 = _mm256_set1_epi8 (1);
  __m256 acc[4], accm[4];

  for (int r = 0; r < 4; r++)
    acc[r] = accm[r] = _mm256_setzero_ps ();

  for (int64_t i = 0; i < nb; i++, w += wbytes)
    {
      float dw, mw;
      __m256i a = unpack32_avx2 (t, w, &dw, &mw);
      __m256i aa = offset ? a : _mm256_sign_epi8 (a, a);
      __m256 vdw = _mm256_set1_ps (dw), vmw = _mm256_set1_ps (mw);

      for (int r = 0; r < 4; r++)
        {
          const UmBlockQ8_0 *xb = (const UmBlockQ8_0 *) (x + r * xs) + i;
          __m256i b = _mm256_loadu_si256 ((const __m256i *) xb->qs);
          __m256 dx = _mm256_set1_ps (h2f (xb->d));
          __m256i bb = offset ? b : _mm256_sign_epi8 (b, a);
          __m256i p = _mm256_madd_epi16 (_mm256_maddubs_epi16 (aa, bb), ones16);
          acc[r] = _mm256_fmadd_ps (_mm256_cvtepi32_ps (p), _mm256_mul_ps (vdw, dx), acc[r]);
          if (offset)
            {
              __m256i sx = _mm256_madd_epi16 (_mm256_maddubs_epi16 (ones8, b), ones16);
              accm[r] = _mm256_fmadd_ps (_mm256_cvtepi32_ps (sx), _mm256_mul_ps (vmw, dx), accm[r]);
            }
        }
    }
  for (int r = 0; r < 4; r++)
    res[r] = hsum_ps (offset ? _mm256_add_ps (acc[r], accm[r]) : acc[r]);
}

UM_AVX2 static void
dot4_q8_0_avx2 (const void *w, const uint8_t *x, size_t xs, int64_t nb, float *res)
{
  dot4_q32_avx2 (UM_DTYPE_Q8_0, sizeof (UmBlockQ8_0), w, x, xs, nb, res);
}

UM_AVX2 static void
dot4_q4_0_avx2 (const void *w, const uint8_t *x, size_t xs, int64_t nb, float *res)
{
  dot4_q32_avx2 (UM_DTYPE_Q4_0, sizeof (UmBlockQ4_0), w, x, xs, nb, res);
}

UM_AVX2 static void
dot4_q4_1_avx2 (const void *w, const uint8_t *x, size_t xs, int64_t nb, float *res)
{
  dot4_q32_avx2 (UM_DTYPE_Q4_1, sizeof (UmBlockQ4_1), w, x, xs, nb, res);
}

UM_AVX2 static void
dot4_q5_0_avx2 (const void *w, const uint8_t *x, size_t xs, int64_t nb, float *res)
{
  dot4_q32_avx2 (UM_DTYPE_Q5_0, sizeof (UmBlockQ5_0), w, x, xs, nb, res);
}

UM_AVX2 static void
dot4_q5_1_avx2 (const void *w, const uint8_t *x, size_t xs, int64_t nb, float *res)
{
  dot4_q32_avx2 (UM_DTYPE_Q5_1, sizeof (UmBlockQ5_1), w, x, xs, nb, res);
}

/* Q4_K / Q5_K: the 8 sub-blocks are unpacked to bytes once per super-block;
 * per activation row the integer sum sum_j sc_j * <q_j, x_j> takes one
 * maddubs and one madd per 32 elements, and the mins term comes from bsums
 * with one more madd. */
UM_AVX2 static inline UM_ALWAYS_INLINE void
dot4_q45_K_avx2 (gboolean five, const void *wv, const uint8_t *x, size_t xs, int64_t nb, float *res)
{
  const __m256i low4 = _mm256_set1_epi8 (0x0f), one = _mm256_set1_epi8 (1);
  __m256 acc[4], accm[4];

  for (int r = 0; r < 4; r++)
    acc[r] = accm[r] = _mm256_setzero_ps ();

  for (int64_t i = 0; i < nb; i++)
    {
      const uint8_t *scales, *qs, *qhp = NULL;
      uint16_t dh, dminh;
      if (five)
        {
          const UmBlockQ5_K *w = (const UmBlockQ5_K *) wv + i;
          scales = w->scales; qs = w->qs; qhp = w->qh; dh = w->d; dminh = w->dmin;
        }
      else
        {
          const UmBlockQ4_K *w = (const UmBlockQ4_K *) wv + i;
          scales = w->scales; qs = w->qs; dh = w->d; dminh = w->dmin;
        }

      uint8_t sc[8], mn[8];
      for (int j = 0; j < 8; j++)
        um_quant_get_scale_min_k4 (j, scales, &sc[j], &mn[j]);
      /* mins per group of 16 activations, to pair with bsums */
      const __m256i mins16 = _mm256_setr_epi16 (mn[0], mn[0], mn[1], mn[1], mn[2], mn[2], mn[3], mn[3],
                                                mn[4], mn[4], mn[5], mn[5], mn[6], mn[6], mn[7], mn[7]);
      __m256i q[8];
      __m256i qh = five ? _mm256_loadu_si256 ((const __m256i *) qhp) : _mm256_setzero_si256 ();
      for (int g = 0; g < 4; g++)
        {
          __m256i v = _mm256_loadu_si256 ((const __m256i *) (qs + 32 * g));
          q[2 * g] = _mm256_and_si256 (v, low4);
          q[2 * g + 1] = _mm256_and_si256 (_mm256_srli_epi16 (v, 4), low4);
          if (five)
            {
              q[2 * g] = _mm256_or_si256 (q[2 * g], _mm256_slli_epi16 (_mm256_and_si256 (qh, one), 4));
              q[2 * g + 1] = _mm256_or_si256 (q[2 * g + 1],
                                              _mm256_slli_epi16 (_mm256_and_si256 (_mm256_srli_epi16 (qh, 1), one), 4));
              qh = _mm256_srli_epi16 (qh, 2);
            }
        }
      const float dw = h2f (dh), dminw = h2f (dminh);

      for (int r = 0; r < 4; r++)
        {
          const UmBlockQ8_K *xb = (const UmBlockQ8_K *) (x + r * xs) + i;
          __m256i sumi = _mm256_setzero_si256 ();
          for (int j = 0; j < 8; j++)
            {
              __m256i b = _mm256_loadu_si256 ((const __m256i *) (xb->qs + 32 * j));
              __m256i p = _mm256_maddubs_epi16 (q[j], b);
              sumi = _mm256_add_epi32 (sumi, _mm256_madd_epi16 (p, _mm256_set1_epi16 (sc[j])));
            }
          __m256i bs = _mm256_loadu_si256 ((const __m256i *) xb->bsums);
          __m256i summ = _mm256_madd_epi16 (bs, mins16);
          acc[r] = _mm256_fmadd_ps (_mm256_cvtepi32_ps (sumi), _mm256_set1_ps (xb->d * dw), acc[r]);
          accm[r] = _mm256_fmadd_ps (_mm256_cvtepi32_ps (summ), _mm256_set1_ps (xb->d * dminw), accm[r]);
        }
    }
  for (int r = 0; r < 4; r++)
    res[r] = hsum_ps (_mm256_sub_ps (acc[r], accm[r]));
}

UM_AVX2 static void
dot4_q4_K_avx2 (const void *w, const uint8_t *x, size_t xs, int64_t nb, float *res)
{
  dot4_q45_K_avx2 (FALSE, w, x, xs, nb, res);
}

UM_AVX2 static void
dot4_q5_K_avx2 (const void *w, const uint8_t *x, size_t xs, int64_t nb, float *res)
{
  dot4_q45_K_avx2 (TRUE, w, x, xs, nb, res);
}

UM_AVX2 static void
dot4_q6_K_avx2 (const void *wv, const uint8_t *x, size_t xs, int64_t nb, float *res)
{
  const __m256i low4 = _mm256_set1_epi8 (0x0f), three = _mm256_set1_epi8 (3);
  __m256 acc[4];

  for (int r = 0; r < 4; r++)
    acc[r] = _mm256_setzero_ps ();

  for (int64_t i = 0; i < nb; i++)
    {
      const UmBlockQ6_K *w = (const UmBlockQ6_K *) wv + i;
      __m256i q[8], s[8];

      for (int h = 0; h < 2; h++)
        {
          const uint8_t *ql = w->ql + 64 * h;
          const int8_t *sc = w->scales + 8 * h;
          __m256i a = _mm256_loadu_si256 ((const __m256i *) ql);
          __m256i c = _mm256_loadu_si256 ((const __m256i *) (ql + 32));
          __m256i qh = _mm256_loadu_si256 ((const __m256i *) (w->qh + 32 * h));
          q[4 * h + 0] = _mm256_or_si256 (_mm256_and_si256 (a, low4),
                                          _mm256_slli_epi16 (_mm256_and_si256 (qh, three), 4));
          q[4 * h + 1] = _mm256_or_si256 (_mm256_and_si256 (c, low4),
                                          _mm256_slli_epi16 (_mm256_and_si256 (_mm256_srli_epi16 (qh, 2), three), 4));
          q[4 * h + 2] = _mm256_or_si256 (_mm256_and_si256 (_mm256_srli_epi16 (a, 4), low4),
                                          _mm256_slli_epi16 (_mm256_and_si256 (_mm256_srli_epi16 (qh, 4), three), 4));
          q[4 * h + 3] = _mm256_or_si256 (_mm256_and_si256 (_mm256_srli_epi16 (c, 4), low4),
                                          _mm256_slli_epi16 (_mm256_and_si256 (_mm256_srli_epi16 (qh, 6), three), 4));
          for (int k = 0; k < 4; k++)
            s[4 * h + k] = _mm256_set_m128i (_mm_set1_epi16 (sc[2 * k + 1]), _mm_set1_epi16 (sc[2 * k]));
        }
      /* the 16 scales as int16, to remove the +32 offset through bsums */
      const __m256i sc16 = _mm256_cvtepi8_epi16 (_mm_loadu_si128 ((const __m128i *) w->scales));
      const float dw = h2f (w->d);

      for (int r = 0; r < 4; r++)
        {
          const UmBlockQ8_K *xb = (const UmBlockQ8_K *) (x + r * xs) + i;
          __m256i sumi = _mm256_setzero_si256 ();
          for (int j = 0; j < 8; j++)
            {
              __m256i b = _mm256_loadu_si256 ((const __m256i *) (xb->qs + 32 * j));
              sumi = _mm256_add_epi32 (sumi, _mm256_madd_epi16 (_mm256_maddubs_epi16 (q[j], b), s[j]));
            }
          __m256i off = _mm256_madd_epi16 (_mm256_loadu_si256 ((const __m256i *) xb->bsums), sc16);
          sumi = _mm256_sub_epi32 (sumi, _mm256_slli_epi32 (off, 5));
          acc[r] = _mm256_fmadd_ps (_mm256_cvtepi32_ps (sumi), _mm256_set1_ps (xb->d * dw), acc[r]);
        }
    }
  for (int r = 0; r < 4; r++)
    res[r] = hsum_ps (acc[r]);
}

typedef void (*Dot4Func) (const void *w, const uint8_t *x, size_t xs, int64_t nb, float *res);

static Dot4Func
dot4_avx2 (UmDType t)
{
  switch (t)
    {
    case UM_DTYPE_Q8_0: return dot4_q8_0_avx2;
    case UM_DTYPE_Q4_0: return dot4_q4_0_avx2;
    case UM_DTYPE_Q4_1: return dot4_q4_1_avx2;
    case UM_DTYPE_Q5_0: return dot4_q5_0_avx2;
    case UM_DTYPE_Q5_1: return dot4_q5_1_avx2;
    case UM_DTYPE_Q4_K: return dot4_q4_K_avx2;
    case UM_DTYPE_Q5_K: return dot4_q5_K_avx2;
    case UM_DTYPE_Q6_K: return dot4_q6_K_avx2;
    default: return NULL;
    }
}

#endif /* UM_QUANT_X86 */

static float
vec_dot_scalar (UmDType t, const void *w, const void *x, int64_t nb)
{
  switch (t)
    {
    case UM_DTYPE_Q8_0: return vec_dot_q8_0_scalar (w, x, nb);
    case UM_DTYPE_Q4_0: return vec_dot_q4_0_scalar (w, x, nb);
    case UM_DTYPE_Q4_1: return vec_dot_q4_1_scalar (w, x, nb);
    case UM_DTYPE_Q5_0: return vec_dot_q5_0_scalar (w, x, nb);
    case UM_DTYPE_Q5_1: return vec_dot_q5_1_scalar (w, x, nb);
    case UM_DTYPE_Q4_K: return vec_dot_q45_K_scalar (w, x, nb, FALSE);
    case UM_DTYPE_Q5_K: return vec_dot_q45_K_scalar (w, x, nb, TRUE);
    case UM_DTYPE_Q6_K: return vec_dot_q6_K_scalar (w, x, nb);
    default: return NAN;
    }
}

/* nb is in blocks of the weight type. */
static inline float
vec_dot_blocks (int simd, UmDType t, const void *w, const void *x, int64_t nb)
{
#if UM_QUANT_X86
  if (simd >= SIMD_AVX2)
    return vec_dot_avx2 (t, w, x, nb);
#endif
  return vec_dot_scalar (t, w, x, nb);
}

float
um_quant_vec_dot_q8 (UmDType t, const void *wrow, const void *xq8, int64_t n)
{
  int64_t nb;

  if (!um_quant_has_vec_dot (t) || !check_len (t, n, &nb) ||
      (n > 0 && (wrow == NULL || xq8 == NULL)))
    return NAN;
  return vec_dot_blocks (get_simd (), t, wrow, xq8, nb);
}

/* ======================================================================== */
/* Matrix product                                                            */
/* ======================================================================== */

/* Tile height of the dequantize + sgemm product, as f32 elements per
 * thread: each sgemm call re-packs all of x, so tiles must be tall enough to
 * amortise that, while the tile itself should stay in L2/L3.  Measured on
 * the 2-core EPYC (Zen 4) with tests/tools/um-quant-bench.c at K = 4096:
 * 32-row tiles lose 5-15% at M = 64..256, 64 rows ~2%, 256 rows gain ~1%
 * over 128 but halve the number of tiles to balance over many threads. */
#define UM_QUANT_TILE_ELEMS (128 * 4096)

static int64_t
default_tile_rows (int64_t n, int64_t k)
{
  int64_t rows = UM_QUANT_TILE_ELEMS / MAX (k, (int64_t) 1);
  /* Small weights still need a few tiles per thread, or one thread does
   * all the work while the others wait. */
  int64_t share = (n + 4 * um_pool_max_threads () - 1) / (4 * um_pool_max_threads ());

  rows = MIN (rows, (share + 15) / 16 * 16);
  rows = CLAMP (rows / 16 * 16, (int64_t) 16, (int64_t) 512);
  return MIN (rows, n);
}

static gboolean
check_matmul_args (UmDType t, const void *w, int64_t n, int64_t k,
                   const float *x, int64_t m, const float *out, size_t *row_bytes)
{
  const UmDTypeInfo *info = um_dtype_info (t);
  uint64_t rb;

  if (info == NULL || t == UM_DTYPE_I32 || n < 0 || k < 0 || m < 0)
    return FALSE;
  /* sgemm takes int dimensions and leading dimensions. */
  if (n > G_MAXINT || k > G_MAXINT || m > G_MAXINT)
    return FALSE;
  if (!um_dtype_bytes (t, (uint64_t) k, &rb))
    return FALSE;
  if (m > 0 && n > 0 && (out == NULL || (k > 0 && (w == NULL || x == NULL))))
    return FALSE;
  *row_bytes = (size_t) rb;
  return TRUE;
}

size_t
um_quant_matmul_scratch_bytes (UmDType t, int64_t n, int64_t k, int64_t m)
{
  if (t == UM_DTYPE_F32 || n <= 0 || k <= 0 || k > G_MAXINT)
    return 0;
  return (size_t) um_pool_max_threads () * (size_t) default_tile_rows (n, k) * (size_t) k * sizeof (float);
}

typedef struct {
  UmDType      t;
  const void  *w;
  int64_t      n, k;
  const float *x;
  int64_t      m;
  float       *out;
  int64_t      tile_rows;
  size_t       row_bytes, per_thread;
  float       *scratch;
  gboolean     direct;
  _Atomic gboolean ok;
} TiledJob;

static void
tiled_run (void *ctx, int64_t tb, int64_t te, int tid)
{
  TiledJob *j = ctx;
  int blas = um_cpu_blas_serial_begin ();

  for (int64_t tile = tb; tile < te; tile++)
    {
      int64_t r0 = tile * j->tile_rows;
      int64_t rows = MIN (j->tile_rows, j->n - r0);
      const float *b;

      if (j->direct)
        b = (const float *) j->w + (size_t) r0 * (size_t) j->k;
      else
        {
          float *buf = j->scratch + (size_t) tid * j->per_thread;
          if (!um_quant_dequantize_row (j->t, (const uint8_t *) j->w + (size_t) r0 * j->row_bytes, buf, rows * j->k))
            {
              j->ok = FALSE;
              continue;
            }
          b = buf;
        }
      /* OpenBLAS runs single-threaded (um_cpu_blas_serial_begin): the
       * threads are ours, one tile each at a time. */
      cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasTrans, (int) j->m, (int) rows, (int) j->k,
                   1.0f, j->x, (int) j->k, b, (int) j->k, 0.0f, j->out + r0, (int) j->n);
    }
  um_cpu_blas_serial_end (blas);
}

gboolean
um_quant_matmul_tiled (UmDType t, const void *w, int64_t n, int64_t k,
                       const float *x, int64_t m, float *out,
                       int64_t tile_rows, float *scratch, size_t scratch_bytes)
{
  size_t row_bytes, per_thread;
  int64_t n_tiles;
  int n_threads;
  float *owned = NULL;
  gboolean ok = TRUE;
  const gboolean direct = (t == UM_DTYPE_F32);

  if (!check_matmul_args (t, w, n, k, x, m, out, &row_bytes))
    return FALSE;
  if (m == 0 || n == 0)
    return TRUE;
  if (k == 0)
    {
      for (int64_t i = 0; i < m; i++)
        memset (out + i * n, 0, (size_t) n * sizeof (float));
      return TRUE;
    }

  tile_rows = tile_rows > 0 ? MIN (tile_rows, n) : default_tile_rows (n, k);
  if ((uint64_t) tile_rows > G_MAXSIZE / sizeof (float) / (uint64_t) k)
    return FALSE;
  per_thread = (size_t) tile_rows * (size_t) k;
  n_tiles = (n + tile_rows - 1) / tile_rows;
  n_threads = (int) MIN ((int64_t) um_pool_max_threads (), n_tiles);

  /* Use as many threads as the caller's scratch has room for; only when it
   * cannot hold even one tile do we allocate (which may fail cleanly). */
  if (direct)
    ;
  else if (scratch != NULL && scratch_bytes / sizeof (float) >= per_thread)
    n_threads = (int) MIN ((size_t) n_threads, scratch_bytes / sizeof (float) / per_thread);
  else
    {
      if ((size_t) n_threads > G_MAXSIZE / sizeof (float) / per_thread)
        return FALSE;
      owned = g_try_malloc ((size_t) n_threads * per_thread * sizeof (float));
      if (owned == NULL)
        return FALSE;
      scratch = owned;
    }

  {
    TiledJob job = { t, w, n, k, x, m, out, tile_rows, row_bytes, per_thread, scratch, direct, TRUE };
    um_pool_for (n_tiles, 1, n_threads, tiled_run, &job);
    ok = job.ok;
  }

  g_free (owned);
  return ok;
}

gboolean
um_quant_matmul (UmDType t, const void *w, int64_t n, int64_t k,
                 const float *x, int64_t m, float *out,
                 float *scratch, size_t scratch_bytes)
{
  return um_quant_matmul_tiled (t, w, n, k, x, m, out, 0, scratch, scratch_bytes);
}

/* Weight rows per work item of the direct product: a few KiB each, so a
 * tile plus four activation rows stay in L1/L2 while the tile is swept. */
#define UM_QUANT_Q8_TILE 8

typedef struct {
  UmDType        t;
  const void    *w;
  int64_t        n, k;
  const float   *x;
  int64_t        m;
  float         *out;
  uint8_t       *xq;
  size_t         q8_bytes, row_bytes;
  int64_t        nb;
  int            simd;
  void         (*dot4) (const void *, const uint8_t *, size_t, int64_t, float *);
} Q8Job;

static void
q8_quantize_rows (void *ctx, int64_t b, int64_t e, int tid)
{
  const Q8Job *j = ctx;
  (void) tid;
  for (int64_t i = b; i < e; i++)
    um_quant_quantize_row_q8 (j->t, j->x + i * j->k, j->xq + (size_t) i * j->q8_bytes, j->k);
}

static void
q8_run_tiles (void *ctx, int64_t tb, int64_t te, int tid)
{
  const Q8Job *job = ctx;
  const UmDType t = job->t;
  const void *w = job->w;
  const int64_t n = job->n, m = job->m, nb = job->nb;
  const size_t q8_bytes = job->q8_bytes, row_bytes = job->row_bytes;
  const uint8_t *xq = job->xq;
  float *out = job->out;
  const int simd = job->simd;
  void (*dot4) (const void *, const uint8_t *, size_t, int64_t, float *) = job->dot4;
  (void) tid;

  for (int64_t tile = tb; tile < te; tile++)
    {
      int64_t r0 = tile * UM_QUANT_Q8_TILE;
      int64_t r1 = MIN (n, r0 + UM_QUANT_Q8_TILE);
      int64_t i = 0;

      if (dot4 != NULL)
        for (; i + 4 <= m; i += 4)
          {
            const uint8_t *xi = xq + (size_t) i * q8_bytes;
            for (int64_t r = r0; r < r1; r++)
              {
                float res[4];
                dot4 ((const uint8_t *) w + (size_t) r * row_bytes, xi, q8_bytes, nb, res);
                for (int j = 0; j < 4; j++)
                  out[(i + j) * n + r] = res[j];
              }
          }
      for (; i < m; i++)
        {
          const uint8_t *xi = xq + (size_t) i * q8_bytes;
          for (int64_t r = r0; r < r1; r++)
            out[i * n + r] = vec_dot_blocks (simd, t, (const uint8_t *) w + (size_t) r * row_bytes, xi, nb);
        }
    }

}

gboolean
um_quant_matmul_q8 (UmDType t, const void *w, int64_t n, int64_t k,
                    const float *x, int64_t m, float *out)
{
  size_t row_bytes, q8_bytes;
  uint8_t *xq;
  int64_t n_tiles, nb;
  int simd = get_simd ();
  void (*dot4) (const void *, const uint8_t *, size_t, int64_t, float *) = NULL;

  if (!um_quant_has_vec_dot (t) || !check_matmul_args (t, w, n, k, x, m, out, &row_bytes))
    return FALSE;
  if (m == 0 || n == 0)
    return TRUE;
  q8_bytes = um_quant_q8_row_bytes (t, k);
  if (k > 0 && (q8_bytes == 0 || (size_t) m > G_MAXSIZE / q8_bytes))
    return FALSE;
  xq = g_try_malloc (MAX ((size_t) m * q8_bytes, 1));
  if (xq == NULL)
    return FALSE;
  nb = k / um_dtype_info (t)->block_elems;
#if UM_QUANT_X86
  if (simd >= SIMD_AVX2)
    dot4 = dot4_avx2 (t);
#endif

  {
    Q8Job job = { t, w, n, k, x, m, out, xq, q8_bytes, row_bytes, nb, simd, dot4 };
    um_pool_for (m, 4, 0, q8_quantize_rows, &job);
    n_tiles = (n + UM_QUANT_Q8_TILE - 1) / UM_QUANT_Q8_TILE;
    um_pool_for (n_tiles, 4, 0, q8_run_tiles, &job);
  }

  g_free (xq);
  return TRUE;
}

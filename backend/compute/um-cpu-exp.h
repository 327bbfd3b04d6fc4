/* um-cpu-exp.h — e^x on vectors of floats, for the CPU kernels (SwiGLU, the
 * attention softmax), where calls to the scalar expf dominated.
 *
 * Both are Cephes' expf: x = n·ln2 + r with ln2 split in two so r is exact
 * to float, then 1 + r + r²·P(r) and a scale by 2^n; within 2 ulp of the
 * true value on [-87.3, 88.7]; below, the argument is clamped (a result
 * near 1.2e-38 instead of a smaller one), above it is +inf, as expf's
 * would overflow.  The AVX2 version scales by 2^n in two exact steps
 * (each factor a normal float) where AVX-512 has scalef: the same
 * operations otherwise, so the same results. */
#pragma once

#include "um-cpu-isa.h"

#if UM_HAVE_X86_SIMD
#include <immintrin.h>
#include <math.h>

#define UM_EXP_HI 88.7228391f
#define UM_EXP_LO (-87.3365448f)

#define UM_EXP_POLY(SET1, FMADD, FNMADD, MUL, ADD, xc, n, out)                                 \
  G_STMT_START {                                                                               \
    __typeof__ (xc) r_ = FNMADD (n, SET1 (0.693359375f), xc);                                  \
    r_ = FNMADD (n, SET1 (-2.12194440e-4f), r_);                                               \
    __typeof__ (xc) p_ = SET1 (1.9875691500e-4f);                                              \
    p_ = FMADD (p_, r_, SET1 (1.3981999507e-3f));                                              \
    p_ = FMADD (p_, r_, SET1 (8.3334519073e-3f));                                              \
    p_ = FMADD (p_, r_, SET1 (4.1665795894e-2f));                                              \
    p_ = FMADD (p_, r_, SET1 (1.6666665459e-1f));                                              \
    p_ = FMADD (p_, r_, SET1 (5.0000001201e-1f));                                              \
    (out) = FMADD (p_, MUL (r_, r_), ADD (r_, SET1 (1.0f)));                                   \
  } G_STMT_END

UM_TARGET_AVX512 static inline __m512
um_exp16 (__m512 x)
{
  const __m512 hi = _mm512_set1_ps (UM_EXP_HI), lo = _mm512_set1_ps (UM_EXP_LO);
  __m512 xc = _mm512_max_ps (_mm512_min_ps (x, hi), lo);
  __m512 n = _mm512_roundscale_ps (_mm512_mul_ps (xc, _mm512_set1_ps (1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 p, y;

  UM_EXP_POLY (_mm512_set1_ps, _mm512_fmadd_ps, _mm512_fnmadd_ps, _mm512_mul_ps, _mm512_add_ps, xc, n, p);
  /* scalef computes p·2^n without building the exponent bits by hand, and
   * overflows to inf / underflows to 0 correctly. */
  y = _mm512_scalef_ps (p, n);
  return _mm512_mask_blend_ps (_mm512_cmp_ps_mask (x, hi, _CMP_GT_OQ), y, _mm512_set1_ps (INFINITY));
}

UM_TARGET_AVX2 static inline __m256
um_exp8 (__m256 x)
{
  const __m256 hi = _mm256_set1_ps (UM_EXP_HI), lo = _mm256_set1_ps (UM_EXP_LO);
  __m256 xc = _mm256_max_ps (_mm256_min_ps (x, hi), lo);
  __m256 n = _mm256_round_ps (_mm256_mul_ps (xc, _mm256_set1_ps (1.44269504088896341f)),
                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 p, y;
  __m256i ni, e1, e2;

  UM_EXP_POLY (_mm256_set1_ps, _mm256_fmadd_ps, _mm256_fnmadd_ps, _mm256_mul_ps, _mm256_add_ps, xc, n, p);
  /* n is in −126 … 128: 2^n as 2^e1 · 2^e2 with both halves in −63 … 64,
   * normal floats, so p · 2^e1 is exact and only the last product rounds
   * (as scalef's one rounding would). */
  ni = _mm256_cvtps_epi32 (n);
  e1 = _mm256_srai_epi32 (ni, 1);
  e2 = _mm256_sub_epi32 (ni, e1);
  y = _mm256_mul_ps (p, _mm256_castsi256_ps (_mm256_slli_epi32 (_mm256_add_epi32 (e1, _mm256_set1_epi32 (127)), 23)));
  y = _mm256_mul_ps (y, _mm256_castsi256_ps (_mm256_slli_epi32 (_mm256_add_epi32 (e2, _mm256_set1_epi32 (127)), 23)));
  return _mm256_blendv_ps (y, _mm256_set1_ps (INFINITY), _mm256_cmp_ps (x, hi, _CMP_GT_OQ));
}
#endif

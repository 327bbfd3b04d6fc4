/* um-qgemm-avx2-tile.h — the micro-kernel of um-qgemm-avx2.c, included
 * there twice: once for AVX2 (vpmaddubsw + vpmaddwd) and once for AVX-VNNI
 * (256-bit vpdpbusd).  A function compiled for AVX2 alone may not contain
 * an AVX-VNNI instruction, not even in a branch never taken, so the body is
 * written once here and compiled per target.  Before including, define:
 *   TILE_TARGET  the target attribute (UM_TARGET_AVX2 or UM_TARGET_AVX2_VNNI)
 *   TILE_VNNI    1 for vpdpbusd, 0 for vpmaddubsw
 *   TILE_NAME(x) the suffixed name of x
 * Not a header for any other file. */

/* One micro-tile: NR rows × nt tokens over the K piece's nblk blocks of 32,
 * continuing the running sums in out (first: start from 0).
 *
 * With vpmaddubsw, unsigned codes c (0..2^bits - 1) times signed q give
 * int16 pair sums (at most 2 · (2^bits - 1) · 127), added up in int16 for
 * G steps of 4 k before vpmaddwd widens them: G = 8 for 4-bit codes
 * (8 · 3810 = 30480), 4 for 5-bit (4 · 7874 = 31496), 2 for 6-bit
 * (2 · 16002 = 32004): never past 32767, so the int16 adds neither wrap
 * nor saturate and the sum is exact.  (Q8_0's 8-bit codes would need a
 * widening every step; without AVX-VNNI they take tile_kernel_w in
 * um-qgemm-avx2.c instead.)  The VNNI kernel accumulates in int32
 * directly (vpdpbusd does not saturate), Q8_0's codes biased by + 128. */
TILE_TARGET static inline UM_ALWAYS_INLINE void
TILE_NAME (tile_kernel) (const int nt, const Mode mode, const int G,
                         const uint8_t *pk, const float *wa, const float *wb, int64_t nblk,
                         const int8_t *xq, int64_t ldx, const float *xd, const void *xc, int64_t ldb,
                         float *out, int64_t ldo, __m256i m0, __m256i m1, gboolean first)
{
  const int32_t *xo = xc;
  const float *xs = xc;
  const int ub = units_per_block32 (mode);
  const int U = mode == MODE_SYM16 ? 4 : 8;   /* steps per unit */
  const __m256i ones = _mm256_set1_epi16 (1);
  __m256 f0[NT_MAX], f1[NT_MAX];
  __m256i c0[NT_MAX], c1[NT_MAX];
#if !TILE_VNNI
  __m256i h0[NT_MAX], h1[NT_MAX];
#else
  (void) G;
  (void) ones;
#endif

#pragma GCC unroll 4
  for (int t = 0; t < nt; t++)
    {
      f0[t] = first ? _mm256_setzero_ps () : _mm256_maskload_ps (out + t * ldo, m0);
      f1[t] = first ? _mm256_setzero_ps () : _mm256_maskload_ps (out + t * ldo + 8, m1);
    }

  for (int64_t b = 0; b < nblk; b++)
    {
      const uint8_t *wp = pk + b * 8 * 64;

#pragma GCC unroll 4
      for (int t = 0; t < nt; t++)
        {
          c0[t] = c1[t] = _mm256_setzero_si256 ();
#if !TILE_VNNI
          h0[t] = h1[t] = _mm256_setzero_si256 ();
#endif
        }

#pragma GCC unroll 8
      for (int s = 0; s < 8; s++)
        {
          const __m256i w0 = _mm256_load_si256 ((const __m256i *) (wp + s * 64));
          const __m256i w1 = _mm256_load_si256 ((const __m256i *) (wp + s * 64 + 32));

#pragma GCC unroll 4
          for (int t = 0; t < nt; t++)
            {
              const __m256i xb = _mm256_set1_epi32 ((int) load_u32 (xq + t * ldx + b * QK + 4 * s));
#if TILE_VNNI
              c0[t] = _mm256_dpbusd_avx_epi32 (c0[t], w0, xb);
              c1[t] = _mm256_dpbusd_avx_epi32 (c1[t], w1, xb);
#else
              h0[t] = _mm256_add_epi16 (h0[t], _mm256_maddubs_epi16 (w0, xb));
              h1[t] = _mm256_add_epi16 (h1[t], _mm256_maddubs_epi16 (w1, xb));
#endif
            }

#if !TILE_VNNI
          /* Keep the sums in registers, step by step: left alone, GCC
           * reassociates the int16 adds of a group into a tree of
           * products held at once, and spills (a third slower). */
#pragma GCC unroll 4
          for (int t = 0; t < nt; t++)
            __asm__ ("" : "+x" (h0[t]), "+x" (h1[t]));

          if (s % G == G - 1)
            {
              /* End of a group: widen the int16 sums. */
#pragma GCC unroll 4
              for (int t = 0; t < nt; t++)
                {
                  c0[t] = _mm256_add_epi32 (c0[t], _mm256_madd_epi16 (h0[t], ones));
                  c1[t] = _mm256_add_epi32 (c1[t], _mm256_madd_epi16 (h1[t], ones));
                  h0[t] = h1[t] = _mm256_setzero_si256 ();
                }
            }
#endif

          if (s % U == U - 1)
            {
              /* End of a unit: apply its scales (step 3 of um-qgemm.c's
               * header), in the reference's order. */
              const int64_t u = b * ub + (mode == MODE_SYM16 ? s / 4 : 0);
              const __m256 sa0 = _mm256_load_ps (wa + u * NR);
              const __m256 sa1 = _mm256_load_ps (wa + u * NR + 8);

#pragma GCC unroll 4
              for (int t = 0; t < nt; t++)
                {
                  const __m256 dx = _mm256_set1_ps (xd[t * ldb + b]);
                  if (mode != MODE_MIN32)
                    {
                      const __m256i o = _mm256_set1_epi32 (xo[t * ldb * ub + u]);
                      c0[t] = _mm256_sub_epi32 (c0[t], o);
                      c1[t] = _mm256_sub_epi32 (c1[t], o);
                    }
                  f0[t] = _mm256_fmadd_ps (_mm256_cvtepi32_ps (c0[t]), _mm256_mul_ps (sa0, dx), f0[t]);
                  f1[t] = _mm256_fmadd_ps (_mm256_cvtepi32_ps (c1[t]), _mm256_mul_ps (sa1, dx), f1[t]);
                  c0[t] = c1[t] = _mm256_setzero_si256 ();
                }
              if (mode == MODE_MIN32)
                {
                  const __m256 b0 = _mm256_load_ps (wb + b * NR);
                  const __m256 b1 = _mm256_load_ps (wb + b * NR + 8);
#pragma GCC unroll 4
                  for (int t = 0; t < nt; t++)
                    {
                      const __m256 s_ = _mm256_set1_ps (xs[t * ldb + b]);
                      f0[t] = _mm256_fmadd_ps (b0, s_, f0[t]);
                      f1[t] = _mm256_fmadd_ps (b1, s_, f1[t]);
                    }
                }
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

#define TILE_NT(nt_, mode_, g_)                                                         \
  TILE_NAME (tile_kernel) (nt_, mode_, g_, pk, wa, wb, nblk, xq, ldx, xd, xc, ldb, out, ldo, \
                           m0, m1, first)

#define TILE_KIND(mode_, g_)                                         \
  switch (nt)                                                        \
    {                                                                \
    case 1: TILE_NT (1, mode_, g_); break;                           \
    case 2: TILE_NT (2, mode_, g_); break;                           \
    default: TILE_NT (NT_OF (KIND_U, g_), mode_, g_); break;         \
    }

/* Not inlined into its callers: one copy of each specialisation.  nt is
 * at most NT_OF (KIND_U, g) (see there). */
TILE_TARGET static void
TILE_NAME (tile_dispatch) (int nt, Mode mode, int g,
                           const uint8_t *pk, const float *wa, const float *wb, int64_t nblk,
                           const int8_t *xq, int64_t ldx, const float *xd, const void *xc, int64_t ldb,
                           float *out, int64_t ldo, __m256i m0, __m256i m1, gboolean first)
{
#if TILE_VNNI
  (void) g;
  if (mode == MODE_SYM32)
    TILE_KIND (MODE_SYM32, 0)
  else if (mode == MODE_SYM16)
    TILE_KIND (MODE_SYM16, 0)
  else
    TILE_KIND (MODE_MIN32, 0)
#else
  if (mode == MODE_SYM16)
    TILE_KIND (MODE_SYM16, 2)
  else if (mode == MODE_SYM32 && g == 8)
    TILE_KIND (MODE_SYM32, 8)
  else if (mode == MODE_SYM32)
    TILE_KIND (MODE_SYM32, 4)
  else if (g == 8)
    TILE_KIND (MODE_MIN32, 8)
  else
    TILE_KIND (MODE_MIN32, 4)
#endif
}

#undef TILE_KIND
#undef TILE_NT

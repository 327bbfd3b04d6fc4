/* um-attn-cpu.c — attention's products and softmax for one task (see
 * um-attn-cpu.h) in our own kernels, with OpenBLAS's sgemm beside them.
 *
 * Shapes: a task multiplies at most 64 query rows by the nk keys they see
 * (up to the sequence), over a head of hd values (128 for LLaDA-8B): small
 * products, where sgemm packs both operands every call.  Ours:
 *
 *  - scores: the task's q rows are packed once, transposed (d-major, 16
 *    rows per vector, zero-padded; 32 KiB for 64 rows of 128), and reused
 *    by every key; per d, a tile of up to 64 rows × 6 keys
 *    (AVX-512; 16 × 6 on AVX2) loads 4 (2) vectors of q and broadcasts 6
 *    values of k for 24 (12) FMAs.  k is read in place, row-major.  The
 *    block comes out transposed (key-major), as the softmax and the values
 *    kernel want it.
 *  - softmax: down the keys, 16 (8) rows per vector, each lane stopping at
 *    its own row's key count (a lane mask).
 *  - values: out[r, c0…] += t[j, r] · v[j, c0…]: a tile of 6 rows × 64
 *    columns (AVX-512; 6 × 16 on AVX2) in registers over all keys; per key
 *    4 (2) loads of v and 6 broadcasts of weights lying side by side.  v is
 *    packed per task in column blocks of the tile's width (see pack_v ()).
 *
 * Rounding: every score is a dot product of hd terms, summed in order with
 * one FMA each (AVX) or in 8 partial sums (portable C), then multiplied by
 * scale, as sgemm's are in its own order; every output a dot product of nk
 * terms.  The tests bound both by γ_n Σ|a||b| against a double reference.
 *
 * Every function with SIMD intrinsics carries its target attribute and is
 * only called after um_cpu_isa () allows it, so a portable build runs the
 * best the CPU has. */
#include "um-attn-cpu.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "um-cpu-exp.h"
#include "um-cpu-isa.h"

#define UM_ALWAYS_INLINE __attribute__ ((always_inline))

static const char *const impl_names[UM_ATTN_N_IMPLS] = { "auto", "blas", "portable", "avx2", "avx512" };

static int chosen = -1;  /* -1: not read from the environment yet */

const char *
um_attn_impl_name (UmAttnImpl impl)
{
  return (unsigned) impl < UM_ATTN_N_IMPLS ? impl_names[impl] : "unknown";
}

gboolean
um_attn_impl_from_name (const char *name, UmAttnImpl *impl)
{
  for (int i = 0; i < UM_ATTN_N_IMPLS; i++)
    if (g_ascii_strcasecmp (name, impl_names[i]) == 0)
      {
        *impl = (UmAttnImpl) i;
        return TRUE;
      }
  return FALSE;
}

void
um_attn_set_impl (UmAttnImpl impl)
{
  __atomic_store_n (&chosen, (int) CLAMP ((int) impl, 0, UM_ATTN_N_IMPLS - 1), __ATOMIC_RELAXED);
}

gboolean
um_attn_impl_available (UmAttnImpl impl)
{
  switch (impl)
    {
    case UM_ATTN_BLAS:
    case UM_ATTN_PORTABLE:
      return TRUE;
    case UM_ATTN_AVX2:
      return UM_HAVE_X86_SIMD && um_cpu_isa () >= UM_ISA_AVX2;
    case UM_ATTN_AVX512:
      return UM_HAVE_X86_SIMD && um_cpu_isa () >= UM_ISA_AVX512;
    default:
      return FALSE;
    }
}

/* The default per level, from um-attn-bench on a 2-core Zen 4 (LLaDA-8B's
 * 32 heads of 128, 96 to 512 tokens, 2 threads, the whole attention op,
 * ours against OpenBLAS 0.3.21 in each kernel set OPENBLAS_CORETYPE can
 * pick there): AVX-512, 1.18–1.40× its Cooperlake kernels (its own choice
 * on that CPU), 1.20–1.43× SkylakeX, 2.9–3.0× Prescott; AVX2, 1.01–1.14×
 * Haswell, 1.05–1.24× Zen, 2.4–2.7× Prescott (the SSE3 kernels an
 * OpenBLAS falls back to on a CPU newer than itself).  Its sgemm alone is
 * faster on these shapes with Haswell or Zen kernels (125–150 against our
 * 100 GFLOP/s on one core), not inside attention, where every call packs
 * both operands again.  Below AVX2, OpenBLAS: plain C runs at a tenth of
 * its speed. */
static UmAttnImpl
default_impl (void)
{
  UmCpuIsa isa = um_cpu_isa ();

  if (UM_HAVE_X86_SIMD && isa >= UM_ISA_AVX512)
    return UM_ATTN_AVX512;
  if (UM_HAVE_X86_SIMD && isa >= UM_ISA_AVX2)
    return UM_ATTN_AVX2;
  return UM_ATTN_BLAS;
}

UmAttnImpl
um_attn_impl (void)
{
  int c = __atomic_load_n (&chosen, __ATOMIC_RELAXED);

  if (G_UNLIKELY (c < 0))
    {
      const char *s = g_getenv ("UM_ATTN_IMPL");
      UmAttnImpl impl = UM_ATTN_AUTO;

      if (s != NULL && *s != '\0' && !um_attn_impl_from_name (s, &impl))
        fprintf (stderr, "unmask: UM_ATTN_IMPL=%s is not one of auto, blas, portable, avx2, avx512; ignored\n", s);
      c = impl;
      __atomic_store_n (&chosen, c, __ATOMIC_RELAXED);
    }
  return c != UM_ATTN_AUTO && um_attn_impl_available ((UmAttnImpl) c) ? (UmAttnImpl) c : default_impl ();
}

int64_t
um_attn_ld (int64_t nb)
{
  return (nb + 15) / 16 * 16;
}

/* Columns of v per packed block: a values tile's width. */
#define VBLOCK 64

size_t
um_attn_pack_floats (int64_t nb, int64_t nk, int hd)
{
  return MAX ((size_t) um_attn_ld (nb) * MAX (hd, 1), (size_t) MAX (nk, 1) * (hd + VBLOCK - 1) / VBLOCK * VBLOCK);
}

/* Rows nb … ld − 1 of a score block: 0, as a query of zeros would score. */
static void
zero_pad (float *t, int64_t ld, int64_t nb, int64_t nk)
{
  if (nb < ld)
    for (int64_t j = 0; j < nk; j++)
      memset (t + j * ld + nb, 0, (size_t) (ld - nb) * sizeof (float));
}

/* The task's v rows in blocks of @bw columns, block-major: pack[(b·nk +
 * j)·bw + c] = v[j·vs + b·bw + c], zero past hd.  In place, v's rows lie a
 * row of all heads apart (16 KiB for LLaDA-8B): a values tile that runs
 * down the keys would touch a new page at every key, more than the TLB
 * holds; packed, it streams. */
static void
pack_v (const float *v, int64_t vs, int64_t nk, int hd, int bw, float *pack)
{
  const int nblocks = (hd + bw - 1) / bw;

  for (int64_t j = 0; j < nk; j++)
    for (int b = 0; b < nblocks; b++)
      {
        const int w = MIN (bw, hd - b * bw);
        float *dst = pack + ((int64_t) b * nk + j) * bw;
        memcpy (dst, v + j * vs + b * bw, (size_t) w * sizeof (float));
        if (w < bw)
          memset (dst + w, 0, (size_t) (bw - w) * sizeof (float));
      }
}

/* ======================================================================== */
/* Portable C                                                               */
/* ======================================================================== */

/* Eight partial sums, so the compiler may keep them in vector registers
 * (ISO C lets it neither reassociate one sum nor contract to FMA). */
static float
dot_portable (const float *a, const float *b, int n)
{
  float p[8] = { 0 };
  int d = 0;

  for (; d + 8 <= n; d += 8)
    for (int t = 0; t < 8; t++)
      p[t] += a[d + t] * b[d + t];
  for (int t = 0; d < n; d++, t++)
    p[t] += a[d] * b[d];
  return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

static void
scores_portable (const float *q, int64_t qs, const float *k, int64_t ks, int64_t nb, int64_t nk, int hd,
                 float scale, float *t, int64_t ld)
{
  for (int64_t j = 0; j < nk; j++)
    for (int64_t r = 0; r < nb; r++)
      t[j * ld + r] = scale * dot_portable (q + r * qs, k + j * ks, hd);
  zero_pad (t, ld, nb, nk);
}

/* 16 rows at a time, down the keys: the max, e^(s − max) and its sum,
 * then the scale by 1 / sum; keys past a row's count weigh 0. */
static void
softmax_portable (float *t, int64_t ld, int64_t nb, int64_t nk, const int32_t *n)
{
  for (int64_t r0 = 0; r0 < nb; r0 += 16)
    {
      const int w = (int) MIN (16, nb - r0);
      float mx[16], sum[16], inv[16];

      for (int i = 0; i < w; i++)
        mx[i] = -INFINITY, sum[i] = 0.0f;
      for (int64_t j = 0; j < nk; j++)
        for (int i = 0; i < w; i++)
          if (j < n[r0 + i])
            mx[i] = MAX (mx[i], t[j * ld + r0 + i]);
      for (int64_t j = 0; j < nk; j++)
        for (int i = 0; i < w; i++)
          {
            float *x = &t[j * ld + r0 + i];
            *x = j < n[r0 + i] ? expf (*x - mx[i]) : 0.0f;
            sum[i] += *x;
          }
      for (int i = 0; i < w; i++)
        inv[i] = 1.0f / sum[i];
      for (int64_t j = 0; j < nk; j++)
        for (int i = 0; i < w; i++)
          t[j * ld + r0 + i] *= inv[i];
    }
}

static void
values_portable (const float *t, int64_t ld, int64_t nb, int64_t nk, const float *v, int64_t vs, int hd,
                 float *o, int64_t os)
{
  for (int64_t r = 0; r < nb; r++)
    {
      float *orow = o + r * os;
      for (int c = 0; c < hd; c++)
        orow[c] = 0.0f;
      for (int64_t j = 0; j < nk; j++)
        {
          const float p = t[j * ld + r], *vr = v + j * vs;
          for (int c = 0; c < hd; c++)
            orow[c] += p * vr[c];
        }
    }
}

/* Row blocks of 6, then 4, 2 and 1 for the rest: CALL (R, r0). */
#define ROW_BLOCKS(nb, CALL)                     \
  G_STMT_START {                                 \
    int64_t r_ = 0;                              \
    for (; r_ + 6 <= (nb); r_ += 6)              \
      CALL (6, r_);                              \
    if ((nb) - r_ >= 4)                          \
      {                                          \
        CALL (4, r_);                            \
        r_ += 4;                                 \
      }                                          \
    if ((nb) - r_ >= 2)                          \
      {                                          \
        CALL (2, r_);                            \
        r_ += 2;                                 \
      }                                          \
    if ((nb) - r_ >= 1)                          \
      CALL (1, r_);                              \
  } G_STMT_END

#if UM_HAVE_X86_SIMD
/* ======================================================================== */
/* AVX2 + FMA                                                               */
/* ======================================================================== */

/* Lanes below n of 8 set (n in 0…8), for maskload/maskstore. */
UM_TARGET_AVX2 static inline UM_ALWAYS_INLINE __m256i
mask8 (int n)
{
  return _mm256_cmpgt_epi32 (_mm256_set1_epi32 (n), _mm256_setr_epi32 (0, 1, 2, 3, 4, 5, 6, 7));
}

/* The task's q rows transposed, pack[d·ld + r] (zero for nb ≤ r < ld), once
 * per task and reused by every key: 8 × 8 transposes in registers, rows
 * past nb loaded as zeros, columns past hd masked out. */
UM_TARGET_AVX2 static void
pack_q_avx2 (const float *q, int64_t qs, int64_t nb, int hd, int64_t ld, float *pack)
{
  for (int64_t r0 = 0; r0 < ld; r0 += 8)
    for (int d0 = 0; d0 < hd; d0 += 8)
      {
        const int w = MIN (8, hd - d0);
        const __m256i m = mask8 (w);
        __m256 r[8], t[8], u[8];

#pragma GCC unroll 8
        for (int i = 0; i < 8; i++)
          r[i] = r0 + i < nb ? _mm256_maskload_ps (q + (r0 + i) * qs + d0, m) : _mm256_setzero_ps ();
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
          {
            t[2 * i] = _mm256_unpacklo_ps (r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm256_unpackhi_ps (r[2 * i], r[2 * i + 1]);
          }
        /* u[4g + c], lane L: rows 4g … 4g + 3 of column 4L + c. */
#pragma GCC unroll 2
        for (int g = 0; g < 2; g++)
          {
            u[4 * g] = _mm256_shuffle_ps (t[4 * g], t[4 * g + 2], 0x44);
            u[4 * g + 1] = _mm256_shuffle_ps (t[4 * g], t[4 * g + 2], 0xee);
            u[4 * g + 2] = _mm256_shuffle_ps (t[4 * g + 1], t[4 * g + 3], 0x44);
            u[4 * g + 3] = _mm256_shuffle_ps (t[4 * g + 1], t[4 * g + 3], 0xee);
          }
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
          {
            if (c < w)
              _mm256_store_ps (pack + (int64_t) (d0 + c) * ld + r0, _mm256_permute2f128_ps (u[c], u[4 + c], 0x20));
            if (c + 4 < w)
              _mm256_store_ps (pack + (int64_t) (d0 + c + 4) * ld + r0, _mm256_permute2f128_ps (u[c], u[4 + c], 0x31));
          }
      }
}

/* 16 packed rows against keys k … k + NR − 1. */
UM_TARGET_AVX2 static inline UM_ALWAYS_INLINE void
scores_tile_avx2 (const int NR, const float *qp, int64_t ld, const float *k, int64_t ks, int hd, __m256 sc,
                  float *t)
{
  __m256 a[6][2];

#pragma GCC unroll 8
  for (int c = 0; c < NR; c++)
    a[c][0] = a[c][1] = _mm256_setzero_ps ();
  for (int d = 0; d < hd; d++)
    {
      const __m256 q0 = _mm256_load_ps (qp + d * ld), q1 = _mm256_load_ps (qp + d * ld + 8);
#pragma GCC unroll 8
      for (int c = 0; c < NR; c++)
        {
          const __m256 kb = _mm256_broadcast_ss (k + c * ks + d);
          a[c][0] = _mm256_fmadd_ps (q0, kb, a[c][0]);
          a[c][1] = _mm256_fmadd_ps (q1, kb, a[c][1]);
        }
    }
#pragma GCC unroll 8
  for (int c = 0; c < NR; c++)
    {
      _mm256_storeu_ps (t + c * ld, _mm256_mul_ps (a[c][0], sc));
      _mm256_storeu_ps (t + c * ld + 8, _mm256_mul_ps (a[c][1], sc));
    }
}

UM_TARGET_AVX2 static void
scores_avx2 (const float *q, int64_t qs, const float *k, int64_t ks, int64_t nb, int64_t nk, int hd,
             float scale, float *t, int64_t ld, float *pack)
{
  const __m256 sc = _mm256_set1_ps (scale);

  pack_q_avx2 (q, qs, nb, hd, ld, pack);
  for (int64_t p = 0; p < ld; p += 16)
    {
      int64_t j = 0;
      for (; j + 6 <= nk; j += 6)
        scores_tile_avx2 (6, pack + p, ld, k + j * ks, ks, hd, sc, t + j * ld + p);
      switch (nk - j)
        {
        case 5: scores_tile_avx2 (5, pack + p, ld, k + j * ks, ks, hd, sc, t + j * ld + p); break;
        case 4: scores_tile_avx2 (4, pack + p, ld, k + j * ks, ks, hd, sc, t + j * ld + p); break;
        case 3: scores_tile_avx2 (3, pack + p, ld, k + j * ks, ks, hd, sc, t + j * ld + p); break;
        case 2: scores_tile_avx2 (2, pack + p, ld, k + j * ks, ks, hd, sc, t + j * ld + p); break;
        case 1: scores_tile_avx2 (1, pack + p, ld, k + j * ks, ks, hd, sc, t + j * ld + p); break;
        default: break;
        }
    }
}

UM_TARGET_AVX2 static void
softmax_avx2 (float *t, int64_t ld, int64_t nb, int64_t nk, const int32_t *n)
{
  for (int64_t r0 = 0; r0 < nb; r0 += 8)
    {
      const __m256i nv = _mm256_maskload_epi32 ((const int *) n + r0, mask8 ((int) MIN (8, nb - r0)));
      __m256 mx = _mm256_set1_ps (-INFINITY), sum = _mm256_setzero_ps (), inv;

      for (int64_t j = 0; j < nk; j++)
        {
          const __m256 m = _mm256_castsi256_ps (_mm256_cmpgt_epi32 (nv, _mm256_set1_epi32 ((int) j)));
          mx = _mm256_blendv_ps (mx, _mm256_max_ps (mx, _mm256_loadu_ps (t + j * ld + r0)), m);
        }
      for (int64_t j = 0; j < nk; j++)
        {
          const __m256 m = _mm256_castsi256_ps (_mm256_cmpgt_epi32 (nv, _mm256_set1_epi32 ((int) j)));
          __m256 e = _mm256_and_ps (um_exp8 (_mm256_sub_ps (_mm256_loadu_ps (t + j * ld + r0), mx)), m);
          _mm256_storeu_ps (t + j * ld + r0, e);
          sum = _mm256_add_ps (sum, e);
        }
      /* Rows past nb (count 0) have a sum of 0: their 1/sum is masked to 0. */
      inv = _mm256_and_ps (_mm256_div_ps (_mm256_set1_ps (1.0f), sum),
                           _mm256_castsi256_ps (_mm256_cmpgt_epi32 (nv, _mm256_setzero_si256 ())));
      for (int64_t j = 0; j < nk; j++)
        _mm256_storeu_ps (t + j * ld + r0, _mm256_mul_ps (_mm256_loadu_ps (t + j * ld + r0), inv));
    }
}

/* Rows r0 … r0 + R − 1 against a packed block of 16 columns of v (zero
 * past hd), of which the first `w` are stored. */
UM_TARGET_AVX2 static inline UM_ALWAYS_INLINE void
values_tile_avx2 (const int R, const float *t, int64_t ld, int64_t nk, const float *vp, int w, float *o,
                  int64_t os)
{
  __m256 a[6][2];

#pragma GCC unroll 8
  for (int r = 0; r < R; r++)
    a[r][0] = a[r][1] = _mm256_setzero_ps ();
  for (int64_t j = 0; j < nk; j++)
    {
      const __m256 v0 = _mm256_load_ps (vp + j * 16), v1 = _mm256_load_ps (vp + j * 16 + 8);
#pragma GCC unroll 8
      for (int r = 0; r < R; r++)
        {
          const __m256 p = _mm256_broadcast_ss (t + j * ld + r);
          a[r][0] = _mm256_fmadd_ps (p, v0, a[r][0]);
          a[r][1] = _mm256_fmadd_ps (p, v1, a[r][1]);
        }
    }
#pragma GCC unroll 8
  for (int r = 0; r < R; r++)
    {
      if (w == 16)
        {
          _mm256_storeu_ps (o + r * os, a[r][0]);
          _mm256_storeu_ps (o + r * os + 8, a[r][1]);
        }
      else if (w > 8)
        {
          _mm256_storeu_ps (o + r * os, a[r][0]);
          _mm256_maskstore_ps (o + r * os + 8, mask8 (w - 8), a[r][1]);
        }
      else
        _mm256_maskstore_ps (o + r * os, mask8 (w), a[r][0]);
    }
}

UM_TARGET_AVX2 static void
values_avx2 (const float *t, int64_t ld, int64_t nb, int64_t nk, const float *v, int64_t vs, int hd,
             float *o, int64_t os, float *pack)
{
  pack_v (v, vs, nk, hd, 16, pack);
  for (int c = 0; c < hd; c += 16)
    {
      const float *vp = pack + (int64_t) (c / 16) * nk * 16;
      const int w = MIN (16, hd - c);
#define TILE(R, r0) values_tile_avx2 (R, t + (r0), ld, nk, vp, w, o + (r0) * os + c, os)
      ROW_BLOCKS (nb, TILE);
#undef TILE
    }
}

/* ======================================================================== */
/* AVX-512                                                                  */
/* ======================================================================== */

/* pack_q_avx2 () with 16 × 16 transposes. */
UM_TARGET_AVX512 static void
pack_q_avx512 (const float *q, int64_t qs, int64_t nb, int hd, int64_t ld, float *pack)
{
  for (int64_t r0 = 0; r0 < ld; r0 += 16)
    for (int d0 = 0; d0 < hd; d0 += 16)
      {
        const int w = MIN (16, hd - d0);
        const __mmask16 m = (__mmask16) (w == 16 ? 0xffff : (1u << w) - 1);
        __m512 r[16], t[16];

#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
          r[i] = r0 + i < nb ? _mm512_maskz_loadu_ps (m, q + (r0 + i) * qs + d0) : _mm512_setzero_ps ();
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++)
          {
            t[2 * i] = _mm512_unpacklo_ps (r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_ps (r[2 * i], r[2 * i + 1]);
          }
        /* r[4g + c], lane L: rows 4g … 4g + 3 of column 4L + c. */
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++)
          {
            __m512d a = _mm512_castps_pd (t[4 * g]), b = _mm512_castps_pd (t[4 * g + 2]);
            __m512d c = _mm512_castps_pd (t[4 * g + 1]), d = _mm512_castps_pd (t[4 * g + 3]);
            r[4 * g] = _mm512_castpd_ps (_mm512_unpacklo_pd (a, b));
            r[4 * g + 1] = _mm512_castpd_ps (_mm512_unpackhi_pd (a, b));
            r[4 * g + 2] = _mm512_castpd_ps (_mm512_unpacklo_pd (c, d));
            r[4 * g + 3] = _mm512_castpd_ps (_mm512_unpackhi_pd (c, d));
          }
        /* Column 4L + c: lane L of r[c], r[4 + c], r[8 + c], r[12 + c]. */
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
          {
            const __m512 e0 = _mm512_shuffle_f32x4 (r[c], r[4 + c], 0x88), f0 = _mm512_shuffle_f32x4 (r[8 + c], r[12 + c], 0x88);
            const __m512 e1 = _mm512_shuffle_f32x4 (r[c], r[4 + c], 0xdd), f1 = _mm512_shuffle_f32x4 (r[8 + c], r[12 + c], 0xdd);
            if (c < w)
              _mm512_store_ps (pack + (int64_t) (d0 + c) * ld + r0, _mm512_shuffle_f32x4 (e0, f0, 0x88));
            if (c + 4 < w)
              _mm512_store_ps (pack + (int64_t) (d0 + c + 4) * ld + r0, _mm512_shuffle_f32x4 (e1, f1, 0x88));
            if (c + 8 < w)
              _mm512_store_ps (pack + (int64_t) (d0 + c + 8) * ld + r0, _mm512_shuffle_f32x4 (e0, f0, 0xdd));
            if (c + 12 < w)
              _mm512_store_ps (pack + (int64_t) (d0 + c + 12) * ld + r0, _mm512_shuffle_f32x4 (e1, f1, 0xdd));
          }
      }
}

/* MV vectors of 16 packed rows against keys k … k + NR − 1. */
UM_TARGET_AVX512 static inline UM_ALWAYS_INLINE void
scores_tile_avx512 (const int MV, const int NR, const float *qp, int64_t ld, const float *k, int64_t ks, int hd,
                    __m512 sc, float *t)
{
  __m512 a[6][4];

#pragma GCC unroll 8
  for (int c = 0; c < NR; c++)
#pragma GCC unroll 4
    for (int x = 0; x < MV; x++)
      a[c][x] = _mm512_setzero_ps ();
  for (int d = 0; d < hd; d++)
    {
      __m512 qv[4];
#pragma GCC unroll 4
      for (int x = 0; x < MV; x++)
        qv[x] = _mm512_load_ps (qp + d * ld + 16 * x);
#pragma GCC unroll 8
      for (int c = 0; c < NR; c++)
        {
          const __m512 kb = _mm512_set1_ps (k[c * ks + d]);
#pragma GCC unroll 4
          for (int x = 0; x < MV; x++)
            a[c][x] = _mm512_fmadd_ps (qv[x], kb, a[c][x]);
        }
    }
#pragma GCC unroll 8
  for (int c = 0; c < NR; c++)
#pragma GCC unroll 4
    for (int x = 0; x < MV; x++)
      _mm512_storeu_ps (t + c * ld + 16 * x, _mm512_mul_ps (a[c][x], sc));
}

/* Every key against MV vectors of packed rows. */
UM_TARGET_AVX512 static inline UM_ALWAYS_INLINE void
scores_panel_avx512 (const int MV, const float *qp, int64_t ld, const float *k, int64_t ks, int64_t nk, int hd,
                     __m512 sc, float *t)
{
  int64_t j = 0;

  for (; j + 6 <= nk; j += 6)
    scores_tile_avx512 (MV, 6, qp, ld, k + j * ks, ks, hd, sc, t + j * ld);
  switch (nk - j)
    {
    case 5: scores_tile_avx512 (MV, 5, qp, ld, k + j * ks, ks, hd, sc, t + j * ld); break;
    case 4: scores_tile_avx512 (MV, 4, qp, ld, k + j * ks, ks, hd, sc, t + j * ld); break;
    case 3: scores_tile_avx512 (MV, 3, qp, ld, k + j * ks, ks, hd, sc, t + j * ld); break;
    case 2: scores_tile_avx512 (MV, 2, qp, ld, k + j * ks, ks, hd, sc, t + j * ld); break;
    case 1: scores_tile_avx512 (MV, 1, qp, ld, k + j * ks, ks, hd, sc, t + j * ld); break;
    default: break;
    }
}

UM_TARGET_AVX512 static void
scores_avx512 (const float *q, int64_t qs, const float *k, int64_t ks, int64_t nb, int64_t nk, int hd,
               float scale, float *t, int64_t ld, float *pack)
{
  const __m512 sc = _mm512_set1_ps (scale);

  pack_q_avx512 (q, qs, nb, hd, ld, pack);
  for (int64_t p = 0; p < ld; p += 64)
    switch (MIN (4, (ld - p) / 16))
      {
      case 4: scores_panel_avx512 (4, pack + p, ld, k, ks, nk, hd, sc, t + p); break;
      case 3: scores_panel_avx512 (3, pack + p, ld, k, ks, nk, hd, sc, t + p); break;
      case 2: scores_panel_avx512 (2, pack + p, ld, k, ks, nk, hd, sc, t + p); break;
      default: scores_panel_avx512 (1, pack + p, ld, k, ks, nk, hd, sc, t + p); break;
      }
}

UM_TARGET_AVX512 static void
softmax_avx512 (float *t, int64_t ld, int64_t nb, int64_t nk, const int32_t *n)
{
  for (int64_t r0 = 0; r0 < nb; r0 += 16)
    {
      const __mmask16 rows = (__mmask16) (nb - r0 >= 16 ? 0xffff : (1u << (nb - r0)) - 1);
      const __m512i nv = _mm512_maskz_loadu_epi32 (rows, n + r0);
      __m512 mx = _mm512_set1_ps (-INFINITY), sum = _mm512_setzero_ps (), inv;

      for (int64_t j = 0; j < nk; j++)
        {
          const __mmask16 m = _mm512_cmpgt_epi32_mask (nv, _mm512_set1_epi32 ((int) j));
          mx = _mm512_mask_max_ps (mx, m, mx, _mm512_loadu_ps (t + j * ld + r0));
        }
      for (int64_t j = 0; j < nk; j++)
        {
          const __mmask16 m = _mm512_cmpgt_epi32_mask (nv, _mm512_set1_epi32 ((int) j));
          __m512 e = _mm512_maskz_mov_ps (m, um_exp16 (_mm512_sub_ps (_mm512_loadu_ps (t + j * ld + r0), mx)));
          _mm512_storeu_ps (t + j * ld + r0, e);
          sum = _mm512_add_ps (sum, e);
        }
      /* Rows past nb (count 0) have a sum of 0: their 1/sum is masked to 0. */
      inv = _mm512_maskz_div_ps (_mm512_cmpgt_epi32_mask (nv, _mm512_setzero_si512 ()), _mm512_set1_ps (1.0f), sum);
      for (int64_t j = 0; j < nk; j++)
        _mm512_storeu_ps (t + j * ld + r0, _mm512_mul_ps (_mm512_loadu_ps (t + j * ld + r0), inv));
    }
}

/* Rows r0 … r0 + R − 1 against a packed block of 64 columns of v (zero
 * past hd), of which the first `w` are stored. */
UM_TARGET_AVX512 static inline UM_ALWAYS_INLINE void
values_tile_avx512 (const int R, const float *t, int64_t ld, int64_t nk, const float *vp, int w, float *o,
                    int64_t os)
{
  __m512 a[6][4];

#pragma GCC unroll 8
  for (int r = 0; r < R; r++)
#pragma GCC unroll 4
    for (int x = 0; x < 4; x++)
      a[r][x] = _mm512_setzero_ps ();
  for (int64_t j = 0; j < nk; j++)
    {
      __m512 vv[4];
#pragma GCC unroll 4
      for (int x = 0; x < 4; x++)
        vv[x] = _mm512_load_ps (vp + j * 64 + 16 * x);
#pragma GCC unroll 8
      for (int r = 0; r < R; r++)
        {
          const __m512 p = _mm512_set1_ps (t[j * ld + r]);
#pragma GCC unroll 4
          for (int x = 0; x < 4; x++)
            a[r][x] = _mm512_fmadd_ps (p, vv[x], a[r][x]);
        }
    }
#pragma GCC unroll 8
  for (int r = 0; r < R; r++)
#pragma GCC unroll 4
    for (int x = 0; x < 4; x++)
      {
        const int left = w - 16 * x;
        if (left >= 16)
          _mm512_storeu_ps (o + r * os + 16 * x, a[r][x]);
        else if (left > 0)
          _mm512_mask_storeu_ps (o + r * os + 16 * x, (__mmask16) ((1u << left) - 1), a[r][x]);
      }
}

UM_TARGET_AVX512 static void
values_avx512 (const float *t, int64_t ld, int64_t nb, int64_t nk, const float *v, int64_t vs, int hd,
               float *o, int64_t os, float *pack)
{
  pack_v (v, vs, nk, hd, 64, pack);
  for (int c = 0; c < hd; c += 64)
    {
      const float *vp = pack + (int64_t) (c / 64) * nk * 64;
      const int w = MIN (64, hd - c);
#define TILE(R, r0) values_tile_avx512 (R, t + (r0), ld, nk, vp, w, o + (r0) * os + c, os)
      ROW_BLOCKS (nb, TILE);
#undef TILE
    }
}
#endif

/* ======================================================================== */
/* Dispatch                                                                 */
/* ======================================================================== */

void
um_attn_scores (UmAttnImpl impl, const float *q, int64_t qs, const float *k, int64_t ks,
                int64_t nb, int64_t nk, int hd, float scale, float *t, int64_t ld, float *pack)
{
  if (nb <= 0 || nk <= 0)
    return;
  switch (impl)
    {
#if UM_HAVE_X86_SIMD
    case UM_ATTN_AVX512:
      scores_avx512 (q, qs, k, ks, nb, nk, hd, scale, t, ld, pack);
      break;
    case UM_ATTN_AVX2:
      scores_avx2 (q, qs, k, ks, nb, nk, hd, scale, t, ld, pack);
      break;
#endif
    case UM_ATTN_PORTABLE:
      scores_portable (q, qs, k, ks, nb, nk, hd, scale, t, ld);
      break;
    default:
      /* tᵀ = scale · q kᵀ, stored as t = scale · k qᵀ. */
      cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasTrans, (int) nk, (int) nb, hd,
                   scale, k, (int) ks, q, (int) qs, 0.0f, t, (int) ld);
      zero_pad (t, ld, nb, nk);
      break;
    }
}

void
um_attn_softmax (float *t, int64_t ld, int64_t nb, int64_t nk, const int32_t *n)
{
#if UM_HAVE_X86_SIMD
  if (um_cpu_isa () >= UM_ISA_AVX512)
    softmax_avx512 (t, ld, nb, nk, n);
  else if (um_cpu_isa () >= UM_ISA_AVX2)
    softmax_avx2 (t, ld, nb, nk, n);
  else
#endif
    softmax_portable (t, ld, nb, nk, n);
}

void
um_attn_values (UmAttnImpl impl, const float *t, int64_t ld, int64_t nb, int64_t nk,
                const float *v, int64_t vs, int hd, float *o, int64_t os, float *pack)
{
  if (nb <= 0)
    return;
  switch (impl)
    {
#if UM_HAVE_X86_SIMD
    case UM_ATTN_AVX512:
      values_avx512 (t, ld, nb, nk, v, vs, hd, o, os, pack);
      break;
    case UM_ATTN_AVX2:
      values_avx2 (t, ld, nb, nk, v, vs, hd, o, os, pack);
      break;
#endif
    case UM_ATTN_PORTABLE:
      values_portable (t, ld, nb, nk, v, vs, hd, o, os);
      break;
    default:
      cblas_sgemm (CblasRowMajor, CblasTrans, CblasNoTrans, (int) nb, hd, (int) nk,
                   1.0f, t, (int) ld, v, (int) vs, 0.0f, o, (int) os);
      break;
    }
}

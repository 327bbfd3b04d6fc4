/* um-gemm-avx2.c — our own f32 matrix product for the weight products on
 * AVX2 + FMA CPUs (Haswell and later, Zen 1-3 and later),
 * out[m, n] = x[m, k] · W[n, k]^T, with the weight conversion fused in.
 *
 * The shape is um-gemm-avx512.c's, scaled to 16 ymm registers and to the
 * caches of this class of CPU (L1d 32-48 KiB, L2 0.5-2 MiB per core):
 *
 *  - x is packed once per call, shared by the threads, into k-major panels
 *    of 8·MRV tokens (MRV = 1 or 2 vectors, zero-padded): one 256-bit load
 *    gives 8 tokens' values at one kk, so the product is vectorised over
 *    tokens and W is only read as scalars (broadcasts), row-major, as every
 *    stored type lays out its blocks.
 *  - The micro-kernel holds 6 weight rows × 2 token vectors = 12
 *    accumulators (BLIS's 6×16 Haswell shape): per kk, 2 vector loads,
 *    6 broadcasts and 12 FMAs, which keeps both FMA ports busy on Intel
 *    (2 loads per cycle) and AMD (3) alike, with 12 independent chains to
 *    cover the FMA latency (4-5 cycles × 2 ports).
 *  - The threads share out the weight rows in tiles of NT rows.  For each
 *    K block of kc elements a thread converts six rows of the tile to f32
 *    (exactly: um_quant_dequantize_row ()) into a small buffer that stays
 *    in L1, then runs the micro-kernel over every token panel; the x block
 *    (8·mv × kc floats) is reused from L2 by all the tile's rows.  kc is
 *    chosen so that the x block takes at most ~256 KiB, half of the
 *    smallest L2 of the class (Zen 2/3: 512 KiB).
 *  - Sums carry across K blocks in a per-thread buffer in the kernel's own
 *    layout and are written to out (transposed 8×8 in registers) after the
 *    last one.
 *  - At m <= DOT_MAX padding tokens to 8 would waste most FMAs, so a
 *    dot-product kernel takes over: vectorised along k, 6 rows × up to 2
 *    tokens of 8 partial sums each, added up at the end.
 *  - The next group's weight bytes are prefetched a line at a time while
 *    the kernels run (as in um-gemm-avx512.c, where this was measured).
 *  - F32 weights are read in place, never copied.
 *
 * The result is the f32 product with the dequantized weights, summed in a
 * different order than sgemm would: the tests hold it to the same derived
 * bound (tests/test-gemm.c).
 *
 * Every function with AVX2 intrinsics carries UM_TARGET_AVX2 and is only
 * reached after um_cpu_isa () says AVX2, so the file builds in a portable
 * (-march=x86-64) build and, without the SIMD code, elsewhere. */
#include "um-gemm.h"

#include "um-cpu-isa.h"
#include "um-pool.h"
#include "um-quant.h"

#include <stdlib.h>
#include <string.h>

#if UM_HAVE_X86_SIMD
#include <immintrin.h>
#endif

#define UM_ALWAYS_INLINE __attribute__ ((always_inline))

/* Weight rows per micro-tile. */
#define NR 6
/* Largest token panel, in 8-token vectors: 6 × 2 = 12 accumulators, 2 x
 * vectors and a broadcast take 15 of the 16 ymm registers. */
#define MRV_MAX 2
/* Largest weight-row tile per thread: a multiple of NR and of 8 (the output
 * transposes). */
#define NT_MAX 48
/* Token counts up to this use the dot-product kernel. */
#define DOT_MAX 4
/* Alignment of every buffer in scratch: a cache line. */
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
/* Planning: the blocking and the scratch it needs                           */
/* ======================================================================== */

typedef struct {
  int     threads;
  int64_t mv;          /* 8-token vectors, ceil (m / 8) */
  int64_t kc;          /* K block (elements; a multiple of 256) */
  int64_t nt;          /* weight rows per tile (a multiple of 24) */
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

static gboolean
check_args (UmDType t, int64_t n, int64_t k, int64_t m, int64_t *be, int64_t *bb)
{
  if (!weight_type_info (t, be, bb))
    return FALSE;
  if (n < 0 || k < 0 || m < 0 || n > G_MAXINT || k > G_MAXINT || m > G_MAXINT)
    return FALSE;
  return k % *be == 0;
}

/* floats × 4 bytes, cache-line aligned, `times` times, added to *total;
 * FALSE on overflow (only absurd sizes). */
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

static gboolean
make_plan (UmDType t, int64_t n, int64_t k, int64_t m, Plan *p)
{
  memset (p, 0, sizeof *p);
  p->mv = (m + 7) / 8;
  p->convert = t != UM_DTYPE_F32;
  p->dot = m <= DOT_MAX;

  /* The K block, a multiple of 256 (one K-quant super-block).  The x block
   * (8·mv × kc floats) is swept from L2 by every group of rows of a tile:
   * ~256 KiB keeps it there on every CPU of the class, with room for the
   * converted rows and the sums.  Converted rows prefer long segments (the
   * conversion streams each row segment from memory), so they get up to
   * 2048; the dot kernel's x block is tiny: long rows only. */
  int64_t kc;
  if (p->dot)
    kc = 4096;
  else
    {
      kc = (256 * 1024) / (p->mv * 8 * (int64_t) sizeof (float));
      kc = CLAMP (kc / 256 * 256, 256, p->convert ? 2048 : 1024);
    }
  p->kc = MIN (kc, round_up (k, 256));

  /* Enough tiles for the threads to balance (dynamic schedule). */
  p->threads = um_pool_max_threads ();
  p->nt = CLAMP (round_up ((n + 4 * p->threads - 1) / (4 * p->threads), 24), 24, NT_MAX);
  p->n_tiles = (n + p->nt - 1) / p->nt;
  p->threads = (int) MIN ((int64_t) p->threads, p->n_tiles);

  /* Row strides one cache line past a multiple of 4 KiB, so the rows read
   * in step do not all fall into the same L1 sets. */
  p->ws = p->kc + 16;
  p->ldxp = round_up (k, 16) + 16;

  p->total = ALIGN;
  return add_floats (&p->xp_bytes, &p->total,
                     p->dot ? (uint64_t) m * (uint64_t) p->ldxp : (uint64_t) p->mv * 8 * (uint64_t) k, 1)
         && add_floats (&p->wbuf_bytes, &p->total, p->convert ? NR * p->ws : 0, (size_t) p->threads)
         && add_floats (&p->acc_bytes, &p->total,
                        (uint64_t) p->nt * (uint64_t) (p->dot ? m : p->mv) * 8, (size_t) p->threads);
}

size_t
um_gemm_f32_avx2_scratch_bytes (UmDType t, int64_t n, int64_t k, int64_t m)
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

/* Token panels: mv vectors in panels of 2, the last one 1 wide when mv is
 * odd.  Panel p starts at vector 2p and is stored at xp + 8 · k · 2p
 * floats, as [kk][mrv][8]. */
static inline int
panel_width (int64_t mv, int64_t p)
{
  return (int) MIN ((int64_t) MRV_MAX, mv - MRV_MAX * p);
}

static inline int64_t
n_panels (int64_t mv)
{
  return (mv + MRV_MAX - 1) / MRV_MAX;
}

/* In-register transpose of an 8×8 block: r[i] element j becomes r[j]
 * element i. */
UM_TARGET_AVX2 static inline UM_ALWAYS_INLINE void
transpose8 (__m256 r[8])
{
  __m256 t[8], s[8];

  for (int i = 0; i < 4; i++)
    {
      t[2 * i] = _mm256_unpacklo_ps (r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm256_unpackhi_ps (r[2 * i], r[2 * i + 1]);
    }
  for (int h = 0; h < 2; h++)
    {
      s[4 * h + 0] = _mm256_shuffle_ps (t[4 * h], t[4 * h + 2], 0x44);
      s[4 * h + 1] = _mm256_shuffle_ps (t[4 * h], t[4 * h + 2], 0xee);
      s[4 * h + 2] = _mm256_shuffle_ps (t[4 * h + 1], t[4 * h + 3], 0x44);
      s[4 * h + 3] = _mm256_shuffle_ps (t[4 * h + 1], t[4 * h + 3], 0xee);
    }
  for (int j = 0; j < 4; j++)
    {
      r[j] = _mm256_permute2f128_ps (s[j], s[4 + j], 0x20);
      r[4 + j] = _mm256_permute2f128_ps (s[j], s[4 + j], 0x31);
    }
}

/* Packs token vector v (tokens 8v .. 8v+7, zeros past m) into its panel:
 * dst[kk · stride] for every kk, stride = 8 · mrv. */
UM_TARGET_AVX2 static void
pack_vector (const float *x, int64_t m, int64_t k, int64_t v, float *dst, int64_t stride)
{
  const int64_t i0 = 8 * v;
  const int64_t valid = MIN (8, m - i0);
  int64_t kk = 0;

  for (; kk + 8 <= k; kk += 8)
    {
      __m256 r[8];
      for (int t = 0; t < 8; t++)
        r[t] = t < valid ? _mm256_loadu_ps (x + (i0 + t) * k + kk) : _mm256_setzero_ps ();
      transpose8 (r);
      for (int j = 0; j < 8; j++)
        _mm256_store_ps (dst + (kk + j) * stride, r[j]);
    }
  for (; kk < k; kk++)
    for (int t = 0; t < 8; t++)
      dst[kk * stride + t] = t < valid ? x[(i0 + t) * k + kk] : 0.0f;
}

/* Weight bytes the next group will read, prefetched a line at a time while
 * a micro-kernel runs. */
typedef struct {
  const uint8_t *base;       /* first row's segment */
  int64_t        row_bytes;  /* between rows */
  int64_t        lines;      /* 64-byte lines per row segment */
  int64_t        rows;       /* 0: nothing to prefetch */
} Prefetch;

/* acc[r · ars + 8 · v + lane] (+)= Σ_kk xp[kk][v][lane] · w_r[kk] for the
 * NR rows w_r and mrv token vectors, over kc elements.  mrv is a
 * compile-time constant in each caller below. */
UM_TARGET_AVX2 static inline UM_ALWAYS_INLINE void
micro_tile (const int mrv, const float *restrict xp, const float *const *wr, int64_t kc,
            float *restrict acc, int64_t ars, gboolean first, const Prefetch *pf)
{
  const int64_t pf_total = pf->rows * pf->lines;
  const int64_t pf_every = pf_total > 0 ? MAX ((int64_t) 1, kc / pf_total) : kc + 1;
  int64_t pf_next = 0, pf_r = 0, pf_c = 0, pf_done = 0;
  const float *w0 = wr[0], *w1 = wr[1], *w2 = wr[2], *w3 = wr[3], *w4 = wr[4], *w5 = wr[5];
  __m256 c[NR][MRV_MAX];

  for (int r = 0; r < NR; r++)
    for (int v = 0; v < mrv; v++)
      c[r][v] = first ? _mm256_setzero_ps () : _mm256_loadu_ps (acc + r * ars + 8 * v);

  for (int64_t i = 0; i < kc; i++, xp += 8 * mrv)
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
      const __m256 x0 = _mm256_load_ps (xp);
      const __m256 x1 = mrv > 1 ? _mm256_load_ps (xp + 8) : x0;
      __m256 b;
      float wv;

      /* memcpy: F32 weights used in place need not be 4-byte aligned; it
       * is still one vbroadcastss. */
#define STEP(r, wp) \
      memcpy (&wv, wp + i, sizeof wv); \
      b = _mm256_set1_ps (wv); \
      c[r][0] = _mm256_fmadd_ps (x0, b, c[r][0]); \
      if (mrv > 1) \
        c[r][1] = _mm256_fmadd_ps (x1, b, c[r][1]);

      STEP (0, w0) STEP (1, w1) STEP (2, w2) STEP (3, w3) STEP (4, w4) STEP (5, w5)
#undef STEP
    }

  for (int r = 0; r < NR; r++)
    for (int v = 0; v < mrv; v++)
      _mm256_storeu_ps (acc + r * ars + 8 * v, c[r][v]);
}

UM_TARGET_AVX2 static void
micro_1 (const float *xp, const float *const *wr, int64_t kc, float *acc, int64_t ars, gboolean first,
         const Prefetch *pf)
{
  micro_tile (1, xp, wr, kc, acc, ars, first, pf);
}

UM_TARGET_AVX2 static void
micro_2 (const float *xp, const float *const *wr, int64_t kc, float *acc, int64_t ars, gboolean first,
         const Prefetch *pf)
{
  micro_tile (2, xp, wr, kc, acc, ars, first, pf);
}

/* Lane masks for the last, partial vector of a row (F32/F16/BF16 rows with
 * K not a multiple of 8): masked-off lanes are not read. */
static const int32_t tail_masks[16] = { -1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0 };

/* The few-token kernel: for rows w_0..w_5 and tokens x_0..x_{tt-1} (rows of
 * x, unpacked), acc[(r · m + t) · 8 + lane] (+)= Σ over kk ≡ lane (mod 8)
 * of x_t[kk] · w_r[kk]. */
UM_TARGET_AVX2 static inline UM_ALWAYS_INLINE void
dot_tile (const int tt, const float *x, int64_t ldx, const float *const *wr, int64_t kc,
          float *acc, int64_t m, gboolean first)
{
  const float *w[NR];
  __m256 c[NR][2];
  int64_t i = 0;

  /* Fully unrolled, so that the 12 sums stay in registers. */
#pragma GCC unroll 6
  for (int r = 0; r < NR; r++)
    {
      w[r] = wr[r];
#pragma GCC unroll 2
      for (int t = 0; t < tt; t++)
        c[r][t] = first ? _mm256_setzero_ps () : _mm256_load_ps (acc + (r * m + t) * 8);
    }

  for (; i + 8 <= kc; i += 8)
    {
      __m256 xv[2];
#pragma GCC unroll 2
      for (int t = 0; t < tt; t++)
        xv[t] = _mm256_loadu_ps (x + t * ldx + i);
#pragma GCC unroll 6
      for (int r = 0; r < NR; r++)
        {
          const __m256 wv = _mm256_loadu_ps (w[r] + i);
#pragma GCC unroll 2
          for (int t = 0; t < tt; t++)
            c[r][t] = _mm256_fmadd_ps (xv[t], wv, c[r][t]);
        }
    }
  if (i < kc)
    {
      const __m256i mask = _mm256_loadu_si256 ((const __m256i *) (tail_masks + 8 - (kc - i)));
      __m256 xv[2];
#pragma GCC unroll 2
      for (int t = 0; t < tt; t++)
        xv[t] = _mm256_maskload_ps (x + t * ldx + i, mask);
#pragma GCC unroll 6
      for (int r = 0; r < NR; r++)
        {
          const __m256 wv = _mm256_maskload_ps (w[r] + i, mask);
#pragma GCC unroll 2
          for (int t = 0; t < tt; t++)
            c[r][t] = _mm256_fmadd_ps (xv[t], wv, c[r][t]);
        }
    }

#pragma GCC unroll 6
  for (int r = 0; r < NR; r++)
#pragma GCC unroll 2
    for (int t = 0; t < tt; t++)
      _mm256_store_ps (acc + (r * m + t) * 8, c[r][t]);
}

UM_TARGET_AVX2 static void
dot_rows (const float *x, int64_t ldx, int64_t m, const float *const *wr, int64_t kc,
          float *acc, gboolean first)
{
  int64_t t = 0;

  for (; t + 2 <= m; t += 2)
    dot_tile (2, x + t * ldx, ldx, wr, kc, acc + t * 8, m, first);
  if (t < m)
    dot_tile (1, x + t * ldx, ldx, wr, kc, acc + t * 8, m, first);
}

UM_TARGET_AVX2 static inline UM_ALWAYS_INLINE float
hsum8 (__m256 v)
{
  __m128 s = _mm_add_ps (_mm256_castps256_ps128 (v), _mm256_extractf128_ps (v, 1));
  s = _mm_add_ps (s, _mm_movehl_ps (s, s));
  s = _mm_add_ss (s, _mm_movehdup_ps (s));
  return _mm_cvtss_f32 (s);
}

UM_TARGET_AVX2 static void
write_tile_dot (const float *acc, int64_t rows, int64_t m, float *out, int64_t n, int64_t j0)
{
  for (int64_t t = 0; t < m; t++)
    for (int64_t r = 0; r < rows; r++)
      out[t * n + j0 + r] = hsum8 (_mm256_load_ps (acc + (r * m + t) * 8));
}

/* Writes the sums of one tile (rows j0 .. j0+rows-1) to out: 8 rows × 8
 * tokens at a time are transposed so that out gets whole row segments. */
UM_TARGET_AVX2 static void
write_tile (const float *acc, int64_t ars, int64_t rows, int64_t mv, int64_t m,
            float *out, int64_t n, int64_t j0)
{
  for (int64_t rr = 0; rr < rows; rr += 8)
    {
      const int64_t nr = MIN (8, rows - rr);

      for (int64_t v = 0; v < mv; v++)
        {
          const int64_t nt = MIN (8, m - 8 * v);
          __m256 r[8];

          if (nr < 8)
            {
              for (int64_t q = 0; q < nr; q++)
                for (int64_t t = 0; t < nt; t++)
                  out[(8 * v + t) * n + j0 + rr + q] = acc[(rr + q) * ars + 8 * v + t];
              continue;
            }
          for (int q = 0; q < 8; q++)
            r[q] = _mm256_load_ps (acc + (rr + q) * ars + 8 * v);
          transpose8 (r);
          for (int64_t t = 0; t < nt; t++)
            _mm256_storeu_ps (out + (8 * v + t) * n + j0 + rr, r[t]);
        }
    }
}

typedef struct {
  UmDType        t;
  const uint8_t *w;
  int64_t        n, k, m;
  int64_t        row_bytes, block_elems, block_bytes;
  const float   *x;
  float         *out;
  const Plan    *plan;
  uint8_t       *scratch;   /* aligned */
  gboolean       failed;
} Job;

/* The weight bytes the next group of this tile will read (the next NR rows
 * at this K block, or the first rows at the next one). */
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

/* One tile of weight rows, all K blocks, then its output.  FALSE if a
 * conversion failed (it cannot for the types check_args () accepts). */
UM_TARGET_AVX2 static gboolean
run_tile (const Job *job, int64_t tile, const float *xp, float *wbuf, float *acc)
{
  const Plan *p = job->plan;
  const int64_t k = job->k, mv = p->mv, ars = 8 * mv;
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
                if (!um_quant_dequantize_row (job->t, src + r * job->row_bytes, wbuf + r * p->ws, kcur))
                  return FALSE;
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
           * rows that the writers never read. */
          if (p->dot)
            {
              for (int64_t r = 0; r < pf.rows; r++)
                for (int64_t l = 0; l < pf.lines; l++)
                  __builtin_prefetch (pf.base + r * pf.row_bytes + l * 64, 0, 2);
              dot_rows (xp + k0, p->ldxp, job->m, wr, kcur, acc + g * job->m * 8, first);
              continue;
            }
          for (int64_t pi = 0; pi < np; pi++)
            {
              const int mrv = panel_width (mv, pi);
              const int64_t v0 = MRV_MAX * pi;
              const float *xpp = xp + 8 * k * v0 + k0 * 8 * mrv;
              float *a = acc + g * ars + 8 * v0;
              const Prefetch none = { NULL, 0, 0, 0 };
              const Prefetch *ppf = pi == 0 ? &pf : &none;
              if (mrv == 2)
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
  return TRUE;
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
 * vectors 32 bytes at a time, so two threads packing vectors of one panel
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
      const int64_t v0 = MRV_MAX * p;
      const int mrv = panel_width (job->plan->mv, p);
      for (int64_t v = v0; v < v0 + mrv; v++)
        pack_vector (job->x, job->m, job->k, v, xp + 8 * job->k * v0 + 8 * (v - v0), 8 * mrv);
    }
}

static void
run_tiles (void *ctx, int64_t b, int64_t e, int tid)
{
  Job *job = ctx;
  const Plan *p = job->plan;
  uint8_t *mine = job->scratch + p->xp_bytes + (size_t) tid * (p->wbuf_bytes + p->acc_bytes);

  for (int64_t tile = b; tile < e; tile++)
    if (!run_tile (job, tile, (float *) (void *) job->scratch, (float *) (void *) mine,
                   (float *) (void *) (mine + p->wbuf_bytes)))
      __atomic_store_n (&job->failed, TRUE, __ATOMIC_RELAXED);
}

#endif /* UM_HAVE_X86_SIMD */

gboolean
um_gemm_f32_avx2 (UmDType t, const void *w, int64_t n, int64_t k,
                  const float *x, int64_t m, float *out, void *scratch, size_t scratch_bytes)
{
  int64_t be, bb;

  if (!check_args (t, n, k, m, &be, &bb))
    return FALSE;
#if UM_HAVE_X86_SIMD
  if (um_cpu_isa () < UM_ISA_AVX2)
    return FALSE;
  if (m == 0 || n == 0)
    return TRUE;
  if (out == NULL)
    return FALSE;
  if (k == 0)
    {
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
    .failed = FALSE,
  };
  /* Every thread needs all of xp: it is ready when its loop returns. */
  if (plan.dot)
    um_pool_for (m, 16, plan.threads, copy_rows, &job);
  else
    um_pool_for (n_panels (plan.mv), 1, plan.threads, pack_vectors, &job);
  um_pool_for (plan.n_tiles, 1, plan.threads, run_tiles, &job);
  g_free (own);
  return !job.failed;
#else
  return FALSE;
#endif
}

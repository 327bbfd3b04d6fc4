#include "um-cpu-kernels.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "um-attn-cpu.h"
#include "um-cpu-exp.h"
#include "um-cpu-isa.h"
#include "um-cpu-threads.h"
#include "um-error.h"
#include "um-gemm.h"
#include "um-half.h"
#include "um-kprof.h"
#include "um-quant.h"
#include "um-pool.h"

#if UM_HAVE_X86_SIMD
#include <immintrin.h>
#endif

/* OpenBLAS's own controls; declared in its cblas.h, repeated here because
 * some builds hide them behind macros. */
extern void openblas_set_num_threads (int num_threads);

/* Below this many floats of work a parallel loop costs more than it saves. */
#define PAR_MIN 32768

/* Items per chunk of a loop over n items of `cost` floats each: about four
 * chunks per thread, so a late thread's share is taken by the others, and
 * at least PAR_MIN / 2 floats each, so a chunk pays for its hand-out.  One
 * chunk (a serial loop) when the whole is below PAR_MIN. */
static int64_t
chunk_for (int64_t n, int64_t cost)
{
  int64_t per = MAX (cost, (int64_t) 1), threads = um_pool_max_threads ();
  if (n * per < PAR_MIN || threads <= 1)
    return MAX (n, (int64_t) 1);
  return MAX ((n + 4 * threads - 1) / (4 * threads), (PAR_MIN / 2 + per - 1) / per);
}

void
um_cpu_set_threads (int n_threads)
{
  /* The default adapts to the CPU obtained (um-pool.c), up to
   * OMP_NUM_THREADS where it is set (a cap: the test environment and many
   * shells set it without choosing a count); a count chosen here
   * (--threads N) is kept as it is. */
  gboolean chosen = n_threads > 0;

  if (n_threads <= 0)
    n_threads = um_cpu_threads_default ();
  um_cpu_threads_store (n_threads);
  um_pool_set_adaptive (chosen ? 0 : n_threads);
  /* The forward's threads are um-pool's; OpenMP is left to offline work
   * (quantizing, compressing layers).  OpenBLAS runs single-threaded inside
   * our loops: its own team would spin at every call on a busy machine. */
  omp_set_num_threads (n_threads);
  openblas_set_num_threads (1);
}

UmCpuMatmulPath
um_cpu_matmul_path (UmDType t, UmProducts products)
{
  UmCpuIsa isa = um_cpu_isa ();
  /* The AUTO rule: see um-backend.h for the measurements behind it. */
  gboolean int8 = products == UM_PRODUCTS_INT8 || (products == UM_PRODUCTS_AUTO && um_products_auto_int8 (t));

  if (int8 && um_qgemm_supported_type (t))
    {
      if (isa >= UM_ISA_AVX512_VNNI)
        return UM_CPU_MATMUL_INT8;
      if (isa >= UM_ISA_AVX2)
        return UM_CPU_MATMUL_INT8_AVX2;
    }
  if (isa >= UM_ISA_AVX512)
    return UM_CPU_MATMUL_GEMM_AVX512;
  if (isa >= UM_ISA_AVX2)
    return UM_CPU_MATMUL_GEMM_AVX2;
  return UM_CPU_MATMUL_SGEMM;
}

const char *
um_cpu_matmul_path_name (UmCpuMatmulPath path)
{
  switch (path)
    {
    case UM_CPU_MATMUL_INT8: return "int8 (avx512-vnni)";
    case UM_CPU_MATMUL_INT8_AVX2: return um_cpu_has_avx_vnni () ? "int8 (avx-vnni)" : "int8 (avx2)";
    case UM_CPU_MATMUL_GEMM_AVX512: return "f32 gemm (avx512)";
    case UM_CPU_MATMUL_GEMM_AVX2: return "f32 gemm (avx2)";
    case UM_CPU_MATMUL_SGEMM:
    default: return um_cpu_isa () >= UM_ISA_AVX2 ? "f32 tiles (avx2) + openblas sgemm"
                                                 : "f32 tiles (portable) + openblas sgemm";
    }
}

static gboolean
grow_scratch (UmCpuScratch *scratch, size_t need, GError **error)
{
  float *grown = NULL;

  if (need <= scratch->bytes)
    return TRUE;
  if (posix_memalign ((void **) &grown, 64, need) != 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY,
                   "out of memory for %.1f MiB of matrix-product scratch", need / 1048576.0);
      return FALSE;
    }
  free (scratch->data);
  scratch->data = grown;
  scratch->bytes = need;
  return TRUE;
}

size_t
um_cpu_matmul_scratch_bytes (UmDType t, int64_t n, int64_t k, int64_t m, UmProducts products)
{
  switch (um_cpu_matmul_path (t, products))
    {
    case UM_CPU_MATMUL_INT8: return um_qgemm_scratch_bytes (t, n, k, m);
    case UM_CPU_MATMUL_INT8_AVX2: return um_qgemm_avx2_scratch_bytes (t, n, k, m);
    case UM_CPU_MATMUL_GEMM_AVX512: return um_gemm_f32_scratch_bytes (t, n, k, m);
    case UM_CPU_MATMUL_GEMM_AVX2: return um_gemm_f32_avx2_scratch_bytes (t, n, k, m);
    case UM_CPU_MATMUL_SGEMM:
    default: return t == UM_DTYPE_F32 ? 0 : um_quant_matmul_scratch_bytes (t, n, k, m);
    }
}

gboolean
um_cpu_matmul (const float *x, int64_t m, const UmWeight *w, float *out,
               UmCpuScratch *scratch, UmProducts products, GError **error)
{
  UmCpuMatmulPath path;
  gboolean ok = FALSE;

  if (m == 0)
    return TRUE;
  path = um_cpu_matmul_path (w->dtype, products);
  /* The weight is never expanded whole: each path converts it piece by
   * piece into the scratch.  A fast path that cannot run (it returns FALSE
   * on an allocation failure) falls back to the next one: the int8 paths
   * to the f32 product of their level, that one to sgemm. */
  if (path == UM_CPU_MATMUL_INT8)
    {
      if (!grow_scratch (scratch, um_qgemm_scratch_bytes (w->dtype, w->rows, w->cols, m), error))
        return FALSE;
      ok = um_qgemm_vnni (w->dtype, w->data, w->rows, w->cols, x, m, out, scratch->data, scratch->bytes);
      if (!ok)
        path = UM_CPU_MATMUL_GEMM_AVX512;
    }
  if (!ok && path == UM_CPU_MATMUL_INT8_AVX2)
    {
      if (!grow_scratch (scratch, um_qgemm_avx2_scratch_bytes (w->dtype, w->rows, w->cols, m), error))
        return FALSE;
      ok = um_qgemm_avx2 (w->dtype, w->data, w->rows, w->cols, x, m, out, scratch->data, scratch->bytes);
      if (!ok)
        path = um_cpu_isa () >= UM_ISA_AVX512 ? UM_CPU_MATMUL_GEMM_AVX512 : UM_CPU_MATMUL_GEMM_AVX2;
    }
  if (!ok && path == UM_CPU_MATMUL_GEMM_AVX512)
    {
      if (!grow_scratch (scratch, um_gemm_f32_scratch_bytes (w->dtype, w->rows, w->cols, m), error))
        return FALSE;
      ok = um_gemm_f32_avx512 (w->dtype, w->data, w->rows, w->cols, x, m, out, scratch->data, scratch->bytes);
    }
  if (!ok && path == UM_CPU_MATMUL_GEMM_AVX2)
    {
      if (!grow_scratch (scratch, um_gemm_f32_avx2_scratch_bytes (w->dtype, w->rows, w->cols, m), error))
        return FALSE;
      ok = um_gemm_f32_avx2 (w->dtype, w->data, w->rows, w->cols, x, m, out, scratch->data, scratch->bytes);
    }
  if (!ok)
    {
      size_t need = w->dtype == UM_DTYPE_F32 ? 0
                    : um_quant_matmul_scratch_bytes (w->dtype, w->rows, w->cols, m);
      if (!grow_scratch (scratch, need, error))
        return FALSE;
      ok = um_quant_matmul (w->dtype, w->data, w->rows, w->cols, x, m, out, scratch->data, scratch->bytes);
    }
  if (!ok)
    g_set_error (error, UM_ERROR, UM_ERROR_FAILED,
                 "matrix product with “%s” (%s, %" G_GUINT64_FORMAT "×%" G_GUINT64_FORMAT ") failed",
                 w->name ? w->name : "weight", um_dtype_name (w->dtype), w->rows, w->cols);
  return ok;
}

void
um_cpu_scratch_clear (UmCpuScratch *scratch)
{
  free (scratch->data);
  scratch->data = NULL;
  scratch->bytes = 0;
}

typedef struct {
  const float *x, *w;
  int64_t dim;
  float eps;
  float *out;
} RmsJob;

static void
rms_norm_rows (void *ctx, int64_t b, int64_t e, int tid)
{
  const RmsJob *j = ctx;
  const float *x = j->x, *w = j->w;
  const int64_t dim = j->dim;
  const float eps = j->eps;
  float *out = j->out;
  (void) tid;

  for (int64_t r = b; r < e; r++)
    {
      const float *xr = x + r * dim;
      float *o = out + r * dim;
      float sum = 0.0f;
#pragma omp simd reduction(+:sum)
      for (int64_t i = 0; i < dim; i++)
        sum += xr[i] * xr[i];
      float scale = 1.0f / sqrtf (sum / (float) dim + eps);
      for (int64_t i = 0; i < dim; i++)
        o[i] = xr[i] * scale * w[i];
    }
}

void
um_cpu_rms_norm (const float *x, int64_t rows, int64_t dim, const float *w, float eps, float *out)
{
  RmsJob job = { x, w, dim, eps, out };
  um_pool_for (rows, chunk_for (rows, dim), 0, rms_norm_rows, &job);
}

void
um_cpu_rope_table_clear (UmCpuRopeTable *t)
{
  g_clear_pointer (&t->pos, g_free);
  g_clear_pointer (&t->cs, g_free);
  g_clear_pointer (&t->sn, g_free);
  t->rows = 0;
}

typedef struct {
  float *x;
  const gint32 *pos;
  int n_heads, head_dim, half;
  const double *inv_freq;
  float *cs, *sn;
  gboolean interleaved;
} RopeJob;

/* cos/sin per (row, frequency), computed in double so long positions keep
 * their accuracy, applied in float like the reference. */
static void
rope_table_rows (void *ctx, int64_t b, int64_t e, int tid)
{
  const RopeJob *j = ctx;
  const int half = j->half;
  (void) tid;

  for (int64_t r = b; r < e; r++)
    for (int i = 0; i < half; i++)
      {
        double a = (double) j->pos[r] * j->inv_freq[i];
        j->cs[r * half + i] = (float) cos (a);
        j->sn[r * half + i] = (float) sin (a);
      }
}

static void
rope_table_fill (UmCpuRopeTable *t, const gint32 *pos, int64_t rows, int rope_dim, double theta)
{
  const int half = rope_dim / 2;
  g_autofree double *inv_freq = g_new (double, half);
  RopeJob job = { NULL, pos, 0, 0, half, NULL, NULL, NULL, FALSE };

  um_cpu_rope_table_clear (t);
  t->rows = rows;
  t->rope_dim = rope_dim;
  t->theta = theta;
  t->pos = g_memdup2 (pos, (size_t) rows * sizeof (gint32));
  t->cs = g_new (float, (size_t) rows * half);
  t->sn = g_new (float, (size_t) rows * half);
  for (int i = 0; i < half; i++)
    inv_freq[i] = pow (theta, -2.0 * i / rope_dim);
  job.inv_freq = inv_freq;
  job.cs = t->cs;
  job.sn = t->sn;
  /* A cos and a sin in double cost about as much as 16 floats of work. */
  um_pool_for (rows, chunk_for (rows, 16 * (int64_t) half), 0, rope_table_rows, &job);
}

/* Whether @t holds the table of these arguments: the same inputs give the
 * same values, so compared as they are (theta included, bit for bit). */
static gboolean
rope_table_matches (const UmCpuRopeTable *t, const gint32 *pos, int64_t rows, int rope_dim, double theta)
{
  return t->rows == rows && t->rope_dim == rope_dim && memcmp (&t->theta, &theta, sizeof theta) == 0
         && memcmp (t->pos, pos, (size_t) rows * sizeof (gint32)) == 0;
}

/* One head's pairs from i on: (x0, x1) -> (x0 c - x1 s, x1 c + x0 s). */
static inline void
rope_pairs (float *v, int i, int half, const float *cs, const float *sn, gboolean interleaved)
{
  for (; i < half; i++)
    {
      int a = interleaved ? 2 * i : i;
      int b2 = interleaved ? 2 * i + 1 : i + half;
      float x0 = v[a], x1 = v[b2];
      v[a] = x0 * cs[i] - x1 * sn[i];
      v[b2] = x1 * cs[i] + x0 * sn[i];
    }
}

#if UM_HAVE_X86_SIMD
/* rope_pairs () over a row's heads, 8 pairs (halves) or 4 (interleaved) at
 * a time: the same products and one sum each, in float and unfused (ISO C
 * does not contract), so the same bits.  Interleaved, the even lanes add
 * x1 · (-s), which is x0 c - x1 s exactly (negating is exact).  A scalar
 * loop of dependent index arithmetic cost ~1 ns a pair, 1-2 % of a
 * forward at AVX2. */
UM_TARGET_AVX2 static void
rope_row_avx2 (float *x, int n_heads, int head_dim, int half, const float *cs, const float *sn,
               gboolean interleaved)
{
  const __m256 neg_even = _mm256_castsi256_ps (_mm256_setr_epi32 (INT32_MIN, 0, INT32_MIN, 0,
                                                                  INT32_MIN, 0, INT32_MIN, 0));

  for (int h = 0; h < n_heads; h++)
    {
      float *v = x + (size_t) h * head_dim;
      int i = 0;

      if (interleaved)
        for (; i + 4 <= half; i += 4)
          {
            const __m128 c4 = _mm_loadu_ps (cs + i), s4 = _mm_loadu_ps (sn + i);
            const __m256 c = _mm256_set_m128 (_mm_unpackhi_ps (c4, c4), _mm_unpacklo_ps (c4, c4));
            const __m256 s = _mm256_xor_ps (_mm256_set_m128 (_mm_unpackhi_ps (s4, s4), _mm_unpacklo_ps (s4, s4)),
                                            neg_even);
            const __m256 xv = _mm256_loadu_ps (v + 2 * i);
            const __m256 sw = _mm256_permute_ps (xv, 0xb1);   /* (x1, x0) per pair */
            _mm256_storeu_ps (v + 2 * i, _mm256_add_ps (_mm256_mul_ps (xv, c), _mm256_mul_ps (sw, s)));
          }
      else
        for (; i + 8 <= half; i += 8)
          {
            const __m256 c = _mm256_loadu_ps (cs + i), s = _mm256_loadu_ps (sn + i);
            const __m256 x0 = _mm256_loadu_ps (v + i), x1 = _mm256_loadu_ps (v + i + half);
            _mm256_storeu_ps (v + i, _mm256_sub_ps (_mm256_mul_ps (x0, c), _mm256_mul_ps (x1, s)));
            _mm256_storeu_ps (v + i + half, _mm256_add_ps (_mm256_mul_ps (x1, c), _mm256_mul_ps (x0, s)));
          }
      rope_pairs (v, i, half, cs, sn, interleaved);
    }
}
#endif

static void
rope_rows (void *ctx, int64_t b, int64_t e, int tid)
{
  const RopeJob *j = ctx;
  const int half = j->half;
  (void) tid;

  for (int64_t r = b; r < e; r++)
    {
      const float *cs = j->cs + r * half, *sn = j->sn + r * half;
      float *x = j->x + r * j->n_heads * j->head_dim;
#if UM_HAVE_X86_SIMD
      if (um_cpu_isa () >= UM_ISA_AVX2)
        {
          rope_row_avx2 (x, j->n_heads, j->head_dim, half, cs, sn, j->interleaved);
          continue;
        }
#endif
      for (int h = 0; h < j->n_heads; h++)
        rope_pairs (x + (size_t) h * j->head_dim, 0, half, cs, sn, j->interleaved);
    }
}

void
um_cpu_rope_cached (UmCpuRopeTable tables[UM_CPU_ROPE_TABLES], float *x, int64_t rows, const gint32 *pos,
                    int n_heads, int head_dim, int rope_dim, double theta, gboolean interleaved)
{
  /* Partial RoPE: the first rope_dim values of each head turn, as a head of
   * that width would; the rest are left alone. */
  const int half = rope_dim / 2;
  UmCpuRopeTable *t = NULL;

  if (half <= 0 || rows <= 0)
    return;
  /* Every layer turns q and k at the same positions: the table is computed
   * once per pass (twice where the last layer keeps only some rows).  The
   * least recently used table makes room. */
  for (int i = 0; i < UM_CPU_ROPE_TABLES && t == NULL; i++)
    if (rope_table_matches (&tables[i], pos, rows, rope_dim, theta))
      t = &tables[i];
  if (t == NULL)
    {
      t = &tables[0];
      for (int i = 1; i < UM_CPU_ROPE_TABLES; i++)
        if (tables[i].last_use < t->last_use)
          t = &tables[i];
      rope_table_fill (t, pos, rows, rope_dim, theta);
    }
  for (int i = 0; i < UM_CPU_ROPE_TABLES; i++)
    t->last_use = MAX (t->last_use, tables[i].last_use + 1);
  {
    RopeJob job = { x, pos, n_heads, head_dim, half, NULL, t->cs, t->sn, interleaved };
    um_pool_for (rows, chunk_for (rows, (int64_t) n_heads * rope_dim), 0, rope_rows, &job);
  }
}

void
um_cpu_rope (float *x, int64_t rows, const gint32 *pos, int n_heads, int head_dim, int rope_dim,
             double theta, gboolean interleaved)
{
  UmCpuRopeTable tables[UM_CPU_ROPE_TABLES] = { { 0 } };

  um_cpu_rope_cached (tables, x, rows, pos, n_heads, head_dim, rope_dim, theta, interleaved);
  for (int i = 0; i < UM_CPU_ROPE_TABLES; i++)
    um_cpu_rope_table_clear (&tables[i]);
}

#if UM_HAVE_X86_SIMD
/* As swiglu_avx512, 8 at a time: the scalar expf dominated SwiGLU below
 * AVX-512 (the same exp, so the same results). */
UM_TARGET_AVX2 static void
swiglu_avx2 (const float *gate, const float *up, size_t n, float *out)
{
  const __m256 one = _mm256_set1_ps (1.0f);
  size_t i = 0;

  for (; i + 8 <= n; i += 8)
    {
      __m256 g = _mm256_loadu_ps (gate + i);
      __m256 e = um_exp8 (_mm256_sub_ps (_mm256_setzero_ps (), g));
      _mm256_storeu_ps (out + i, _mm256_mul_ps (_mm256_div_ps (g, _mm256_add_ps (one, e)),
                                                _mm256_loadu_ps (up + i)));
    }
  for (; i < n; i++)
    out[i] = gate[i] / (1.0f + expf (-gate[i])) * up[i];
}

UM_TARGET_AVX512 static void
swiglu_avx512 (const float *gate, const float *up, size_t n, float *out)
{
  const __m512 one = _mm512_set1_ps (1.0f);
  size_t i = 0;

  for (; i + 16 <= n; i += 16)
    {
      __m512 g = _mm512_loadu_ps (gate + i);
      __m512 e = um_exp16 (_mm512_sub_ps (_mm512_setzero_ps (), g));
      _mm512_storeu_ps (out + i, _mm512_mul_ps (_mm512_div_ps (g, _mm512_add_ps (one, e)),
                                                _mm512_loadu_ps (up + i)));
    }
  for (; i < n; i++)
    out[i] = gate[i] / (1.0f + expf (-gate[i])) * up[i];
}

#endif

/* Query rows per attention task: bounds the score block to 64 × L floats.
 * Under a mask (q_kv_len), a task also keeps its rows' key counts within
 * ATT_CHUNK of each other: it multiplies by the keys its widest row sees,
 * so each row costs at most ATT_CHUNK keys beyond its own. */
#define ATT_CHUNK 64

/* One attention call's tasks (head h, chunk c) as task h · n_chunks + c. */
typedef struct {
  const float   *q, *k, *v;
  float         *out;
  const gint32  *q_seq, *q_kv_len;
  const int64_t *chunks;        /* per chunk: first row, keys seen; then nq */
  int64_t        n_chunks, seq_len, qstride, kvstride;
  int            group, head_dim;
  float          scale;
  UmAttnImpl     impl;          /* the products' kernels */
  float         *scratch;       /* per thread: scratch_floats */
  size_t         scratch_floats;
  int64_t       *phase_ns;      /* per thread, when profiling: KPROF_STRIDE sums */
} AttnCtx;

/* A cache line of sums per thread: q·kᵀ, softmax, ·v. */
#define KPROF_STRIDE 8

/* Per thread: the score block (keys × at most 64 rows), then the packing
 * space (queries, then values); each a whole number of cache lines. */
static size_t
attn_scratch_floats (int64_t seq_len, int head_dim)
{
  return (size_t) seq_len * um_attn_ld (ATT_CHUNK) + um_attn_pack_floats (ATT_CHUNK, seq_len, head_dim);
}

/* Tasks [begin, end) on thread @tid, head-major. */
static void
attn_tasks (void *data, int64_t begin, int64_t end, int tid)
{
  const AttnCtx *a = data;
  /* OpenBLAS, when it computes the products, stays on this thread. */
  const int blas = a->impl == UM_ATTN_BLAS ? um_cpu_blas_serial_begin () : 1;
  float *scores = a->scratch + (size_t) tid * a->scratch_floats;
  float *pack = scores + (size_t) a->seq_len * um_attn_ld (ATT_CHUNK);
  int64_t *ns = a->phase_ns != NULL ? a->phase_ns + (size_t) tid * KPROF_STRIDE : NULL;
  int32_t n[ATT_CHUNK];

  for (int64_t t = begin; t < end; t++)
    {
      const int h = (int) (t / a->n_chunks);
      const int64_t c = t % a->n_chunks;
      const int64_t i0 = a->chunks[2 * c], nk = a->chunks[2 * c + 1], nb = a->chunks[2 * c + 2] - i0;
      const int64_t s = a->q_seq[i0], ld = um_attn_ld (nb);
      const int kvh = h / a->group, hd = a->head_dim;
      const float *qb = a->q + i0 * a->qstride + (int64_t) h * hd;
      const float *kb = a->k + s * a->seq_len * a->kvstride + (int64_t) kvh * hd;
      const float *vb = a->v + s * a->seq_len * a->kvstride + (int64_t) kvh * hd;
      int64_t t0 = ns != NULL ? um_kprof_now () : 0, t1 = 0, t2 = 0;

      for (int64_t r = 0; r < nb; r++)
        n[r] = a->q_kv_len != NULL ? a->q_kv_len[i0 + r] : (int32_t) a->seq_len;
      /* Only the nk keys some row of the task sees are multiplied; the
       * ones a row must not see weigh exactly 0 after the softmax. */
      um_attn_scores (a->impl, qb, a->qstride, kb, a->kvstride, nb, nk, hd, a->scale, scores, ld, pack);
      if (ns != NULL)
        t1 = um_kprof_now ();
      um_attn_softmax (scores, ld, nb, nk, n);
      if (ns != NULL)
        t2 = um_kprof_now ();
      um_attn_values (a->impl, scores, ld, nb, nk, vb, a->kvstride, hd,
                      a->out + i0 * a->qstride + (int64_t) h * hd, a->qstride, pack);
      if (ns != NULL)
        {
          int64_t t3 = um_kprof_now ();
          ns[0] += t1 - t0;
          ns[1] += t2 - t1;
          ns[2] += t3 - t2;
        }
    }
  if (a->impl == UM_ATTN_BLAS)
    um_cpu_blas_serial_end (blas);
}

/* The call's wall time, shared out among q·kᵀ, softmax and ·v in the
 * proportions of the threads' time in each (waits included pro rata). */
static void
attn_profile (const int64_t *phase_ns, int threads, int64_t wall_ns)
{
  static const UmKprofFamily family[3] = { UM_KPROF_ATTN_QK, UM_KPROF_SOFTMAX, UM_KPROF_ATTN_PV };
  int64_t sum[3] = { 0 }, total = 0;

  for (int t = 0; t < threads; t++)
    for (int p = 0; p < 3; p++)
      sum[p] += phase_ns[t * KPROF_STRIDE + p];
  total = sum[0] + sum[1] + sum[2];
  for (int p = 0; p < 3; p++)
    um_kprof_add (family[p], total > 0 ? (int64_t) ((double) wall_ns * sum[p] / total) : (p == 0 ? wall_ns : 0));
}

void
um_cpu_attention (const float *q, int64_t nq, const gint32 *q_seq, const gint32 *q_kv_len,
                  const float *k, const float *v, int64_t seq_len,
                  int n_heads, int n_kv_heads, int head_dim, float *out)
{
  const int64_t t_start = um_kprof_on ? um_kprof_now () : 0;
  const gboolean parallel = nq * seq_len * (int64_t) head_dim * n_heads >= PAR_MIN;
  const int threads = parallel ? um_pool_max_threads () : 1;
  /* Per task: its first row, then the keys its widest row sees. */
  g_autoptr(GArray) chunks = g_array_new (FALSE, FALSE, sizeof (int64_t));
  g_autofree float *scratch_mem = NULL;
  float *scratch;
  g_autofree int64_t *phase_ns = NULL;
  AttnCtx a;

#define KV_LEN(i) (q_kv_len != NULL ? (int64_t) q_kv_len[i] : seq_len)
  /* Runs of query rows of one sequence, cut into chunks. */
  for (int64_t i = 0; i < nq;)
    {
      int64_t j = i, lo = KV_LEN (i), hi = lo;
      while (j < nq && j - i < ATT_CHUNK && q_seq[j] == q_seq[i]
             && MAX (hi, KV_LEN (j)) - MIN (lo, KV_LEN (j)) <= ATT_CHUNK)
        {
          lo = MIN (lo, KV_LEN (j));
          hi = MAX (hi, KV_LEN (j));
          j++;
        }
      g_array_append_val (chunks, i);
      g_array_append_val (chunks, hi);
      i = j;
    }
  g_array_append_val (chunks, nq);
#undef KV_LEN

  /* As g_malloc provides (or aborts for) any small block, aligned here to a
   * cache line for the packing space's vector loads and stores. */
  scratch_mem = g_malloc (((size_t) threads * attn_scratch_floats (seq_len, head_dim) + 16) * sizeof (float));
  scratch = (float *) (((uintptr_t) scratch_mem + 63) & ~(uintptr_t) 63);
  if (um_kprof_on)
    phase_ns = g_new0 (int64_t, (size_t) threads * KPROF_STRIDE);
  a = (AttnCtx) {
    .q = q, .k = k, .v = v, .out = out, .q_seq = q_seq, .q_kv_len = q_kv_len,
    .chunks = (const int64_t *) (void *) chunks->data, .n_chunks = chunks->len / 2,
    .seq_len = seq_len, .qstride = (int64_t) n_heads * head_dim, .kvstride = (int64_t) n_kv_heads * head_dim,
    .group = n_heads / n_kv_heads, .head_dim = head_dim, .scale = 1.0f / sqrtf ((float) head_dim),
    .impl = um_attn_impl (), .scratch = scratch, .scratch_floats = attn_scratch_floats (seq_len, head_dim),
    .phase_ns = phase_ns,
  };

  /* The count the scratch was sized for, not the default read again
   * later: another engine may change the process's count in between (the
   * app serving while it generates), and a larger one would overflow it. */
  um_pool_for ((int64_t) n_heads * a.n_chunks, 1, threads, attn_tasks, &a);
  if (phase_ns != NULL)
    attn_profile (phase_ns, threads, um_kprof_now () - t_start);
}

typedef struct {
  const float *a, *b;
  float *out;
  size_t n;
  int dim;
  const gint32 *rows;
  const float *scale;
} EltJob;

static void
swiglu_range (void *ctx, int64_t b, int64_t e, int tid)
{
  const EltJob *j = ctx;
  (void) tid;
#if UM_HAVE_X86_SIMD
  if (um_cpu_isa () >= UM_ISA_AVX2)
    {
      (um_cpu_isa () >= UM_ISA_AVX512 ? swiglu_avx512 : swiglu_avx2) (j->a + b, j->b + b, (size_t) (e - b),
                                                                        j->out + b);
      return;
    }
#endif
  for (int64_t i = b; i < e; i++)
    {
      float g = j->a[i];
      j->out[i] = g / (1.0f + expf (-g)) * j->b[i];
    }
}

void
um_cpu_swiglu (const float *gate, const float *up, size_t n, float *out)
{
  EltJob job = { gate, up, out, n, 0, NULL, NULL };
  /* Chunks of whole 16-float vectors keep every chunk on the same vector
   * path as a serial run: results do not depend on the split. */
  int64_t chunk = (chunk_for ((int64_t) n, 1) + 15) / 16 * 16;
  um_pool_for ((int64_t) n, chunk, 0, swiglu_range, &job);
}

#if UM_HAVE_X86_SIMD
/* out[i] += a[i], 8 at a time (each sum is one rounding either way: the
 * same bits; every element is read before it is written, so out == a is
 * fine too).  The portable loop, which the compiler may not vectorise past
 * a possible partial overlap, ran one float at a time. */
UM_TARGET_AVX2 static void
add_avx2 (float *out, const float *a, int64_t n)
{
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps (out + i, _mm256_add_ps (_mm256_loadu_ps (out + i), _mm256_loadu_ps (a + i)));
  for (; i < n; i++)
    out[i] += a[i];
}
#endif

static void
add_floats (float *out, const float *a, int64_t n)
{
#if UM_HAVE_X86_SIMD
  if (um_cpu_isa () >= UM_ISA_AVX2)
    {
      add_avx2 (out, a, n);
      return;
    }
#endif
  for (int64_t i = 0; i < n; i++)
    out[i] += a[i];
}

static void
add_range (void *ctx, int64_t b, int64_t e, int tid)
{
  const EltJob *j = ctx;
  (void) tid;
  add_floats (j->out + b, j->a + b, e - b);
}

void
um_cpu_add (float *x, const float *y, size_t n)
{
  EltJob job = { y, NULL, x, n, 0, NULL, NULL };
  um_pool_for ((int64_t) n, chunk_for ((int64_t) n, 1), 0, add_range, &job);
}

static void
add_bias_rows (void *ctx, int64_t b, int64_t e, int tid)
{
  const EltJob *j = ctx;
  (void) tid;
  for (int64_t r = b; r < e; r++)
    add_floats (j->out + (size_t) r * j->dim, j->a, j->dim);
}

void
um_cpu_add_bias (float *x, int rows, int dim, const float *bias)
{
  EltJob job = { bias, NULL, x, 0, dim, NULL, NULL };
  um_pool_for (rows, chunk_for (rows, dim), 0, add_bias_rows, &job);
}

static void
add_rows_scaled_range (void *ctx, int64_t b, int64_t e, int tid)
{
  const EltJob *j = ctx;
  (void) tid;
  for (int64_t i = b; i < e; i++)
    {
      float *d = j->out + (size_t) j->rows[i] * j->dim;
      const float *s = j->a + (size_t) i * j->dim, w = j->scale[i];
      for (int c = 0; c < j->dim; c++)
        d[c] += w * s[c];
    }
}

void
um_cpu_add_rows_scaled (float *dst, int dim, const gint32 *rows, const float *scale, int n, const float *src)
{
  /* Rows are distinct, so rows may run in parallel; each row's own sum is
   * one add, whatever the thread count. */
  EltJob job = { src, NULL, dst, 0, dim, rows, scale };
  um_pool_for (n, chunk_for (n, dim), 0, add_rows_scaled_range, &job);
}

void
um_cpu_warm_up (void)
{
  /* A small attention runs the thread pool once, so its
   * thread stacks and buffers exist before memory is measured. */
  enum { L = 128, H = 4, HD = 64 };
  float *q = g_new0 (float, L * H * HD), *k = g_new0 (float, L * H * HD);
  float *v = g_new0 (float, L * H * HD), *out = g_new (float, L * H * HD);
  gint32 seq[L] = { 0 };

  for (int i = 0; i < L * H * HD; i++)
    q[i] = k[i] = v[i] = (float) (i % 7) * 0.01f;
  um_cpu_attention (q, L, seq, NULL, k, v, L, H, H, HD, out);
  g_free (q);
  g_free (k);
  g_free (v);
  g_free (out);
}

#include "um-cpu-kernels.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "um-cpu-isa.h"
#include "um-error.h"
#include "um-gemm.h"
#include "um-half.h"
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

static int cpu_threads = 0;

/* OMP_NUM_THREADS if set (as before the pool, and as users of OpenMP
 * programs expect), else the CPUs this process may run on. */
static int
default_threads (void)
{
  const char *env = g_getenv ("OMP_NUM_THREADS");
  gint64 n = env != NULL ? g_ascii_strtoll (env, NULL, 10) : 0;
  return n > 0 && n <= 1024 ? (int) n : (int) g_get_num_processors ();
}

void
um_cpu_set_threads (int n_threads)
{
  /* The default adapts to the CPU obtained (um-pool.c); a count the user
   * chose, here or in OMP_NUM_THREADS, is kept as it is. */
  gboolean chosen = n_threads > 0 || g_getenv ("OMP_NUM_THREADS") != NULL;

  if (n_threads <= 0)
    n_threads = default_threads ();
  cpu_threads = n_threads;
  um_pool_set_adaptive (chosen ? 0 : n_threads);
  /* The forward's threads are um-pool's; OpenMP is left to offline work
   * (quantizing, compressing layers).  OpenBLAS runs single-threaded inside
   * our loops: its own team would spin at every call on a busy machine. */
  omp_set_num_threads (n_threads);
  openblas_set_num_threads (1);
}

int
um_cpu_blas_serial_begin (void)
{
  int saved = omp_get_max_threads ();
  if (saved != 1)
    omp_set_num_threads (1);
  return saved;
}

void
um_cpu_blas_serial_end (int saved)
{
  if (saved != 1)
    omp_set_num_threads (saved);
}

int
um_cpu_get_threads (void)
{
  return cpu_threads > 0 ? cpu_threads : default_threads ();
}

UmCpuMatmulPath
um_cpu_matmul_path (UmDType t, UmProducts products)
{
  UmCpuIsa isa = um_cpu_isa ();
  /* The AUTO rule: see um-backend.h for the measurements behind it. */
  gboolean int8 = products == UM_PRODUCTS_INT8 || (products == UM_PRODUCTS_AUTO && um_products_auto_int8 (t));

  if (int8 && isa >= UM_ISA_AVX512_VNNI && um_qgemm_supported_type (t))
    return UM_CPU_MATMUL_INT8;
  if (isa >= UM_ISA_AVX512)
    return UM_CPU_MATMUL_GEMM_AVX512;
  return UM_CPU_MATMUL_SGEMM;
}

const char *
um_cpu_matmul_path_name (UmCpuMatmulPath path)
{
  switch (path)
    {
    case UM_CPU_MATMUL_INT8: return "int8 (avx512-vnni)";
    case UM_CPU_MATMUL_GEMM_AVX512: return "f32 gemm (avx512)";
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
    case UM_CPU_MATMUL_GEMM_AVX512: return um_gemm_f32_scratch_bytes (t, n, k, m);
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
   * on an allocation failure) falls back to the next one. */
  if (path == UM_CPU_MATMUL_INT8)
    {
      if (!grow_scratch (scratch, um_qgemm_scratch_bytes (w->dtype, w->rows, w->cols, m), error))
        return FALSE;
      ok = um_qgemm_vnni (w->dtype, w->data, w->rows, w->cols, x, m, out, scratch->data, scratch->bytes);
      if (!ok)
        path = UM_CPU_MATMUL_GEMM_AVX512;
    }
  if (!ok && path == UM_CPU_MATMUL_GEMM_AVX512)
    {
      if (!grow_scratch (scratch, um_gemm_f32_scratch_bytes (w->dtype, w->rows, w->cols, m), error))
        return FALSE;
      ok = um_gemm_f32_avx512 (w->dtype, w->data, w->rows, w->cols, x, m, out, scratch->data, scratch->bytes);
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

typedef struct {
  float *x;
  const gint32 *pos;
  int n_heads, head_dim, half;
  const double *inv_freq;
  float *cs, *sn;
  gboolean interleaved;
} RopeJob;

static void
rope_rows (void *ctx, int64_t b, int64_t e, int tid)
{
  const RopeJob *j = ctx;
  const int half = j->half;
  (void) tid;

  for (int64_t r = b; r < e; r++)
    {
      float *cs = j->cs + r * half, *sn = j->sn + r * half;
      for (int i = 0; i < half; i++)
        {
          double a = (double) j->pos[r] * j->inv_freq[i];
          cs[i] = (float) cos (a);
          sn[i] = (float) sin (a);
        }
      for (int h = 0; h < j->n_heads; h++)
        {
          float *v = j->x + (r * j->n_heads + h) * j->head_dim;
          for (int i = 0; i < half; i++)
            {
              int a = j->interleaved ? 2 * i : i;
              int b2 = j->interleaved ? 2 * i + 1 : i + half;
              float x0 = v[a], x1 = v[b2];
              v[a] = x0 * cs[i] - x1 * sn[i];
              v[b2] = x1 * cs[i] + x0 * sn[i];
            }
        }
    }
}

void
um_cpu_rope (float *x, int64_t rows, const gint32 *pos, int n_heads, int head_dim, int rope_dim,
             double theta, gboolean interleaved)
{
  /* Partial RoPE: the first rope_dim values of each head turn, as a head of
   * that width would; the rest are left alone. */
  const int half = rope_dim / 2;
  g_autofree double *inv_freq = NULL;
  g_autofree float *cs = NULL, *sn = NULL;

  if (half <= 0 || rows <= 0)
    return;
  inv_freq = g_new (double, half);
  /* cos/sin per (row, frequency), computed in double so long positions keep
   * their accuracy, applied in float like the reference. */
  cs = g_new (float, (size_t) rows * half);
  sn = g_new (float, (size_t) rows * half);
  for (int i = 0; i < half; i++)
    inv_freq[i] = pow (theta, -2.0 * i / rope_dim);
  {
    RopeJob job = { x, pos, n_heads, head_dim, half, inv_freq, cs, sn, interleaved };
    um_pool_for (rows, chunk_for (rows, (int64_t) n_heads * rope_dim), 0, rope_rows, &job);
  }
}

#if UM_HAVE_X86_SIMD
/* e^x for 16 floats, within 2 ulp of the true value on [-87.3, 88.7] (Cephes'
 * expf: x = n·ln2 + r with ln2 split in two so r is exact to float, then
 * 1 + r + r²·P(r) and a scale by 2^n); below -87.3 the result flushes to 0
 * and above 88.7 it is +inf, as expf's would overflow.  The scalar expf
 * calls dominated SwiGLU and the attention softmax. */
UM_TARGET_AVX512 static inline __m512
exp16 (__m512 x)
{
  const __m512 hi = _mm512_set1_ps (88.7228391f), lo = _mm512_set1_ps (-87.3365448f);
  __m512 xc = _mm512_max_ps (_mm512_min_ps (x, hi), lo);
  __m512 n = _mm512_roundscale_ps (_mm512_mul_ps (xc, _mm512_set1_ps (1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps (n, _mm512_set1_ps (0.693359375f), xc);
  r = _mm512_fnmadd_ps (n, _mm512_set1_ps (-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps (1.9875691500e-4f);
  p = _mm512_fmadd_ps (p, r, _mm512_set1_ps (1.3981999507e-3f));
  p = _mm512_fmadd_ps (p, r, _mm512_set1_ps (8.3334519073e-3f));
  p = _mm512_fmadd_ps (p, r, _mm512_set1_ps (4.1665795894e-2f));
  p = _mm512_fmadd_ps (p, r, _mm512_set1_ps (1.6666665459e-1f));
  p = _mm512_fmadd_ps (p, r, _mm512_set1_ps (5.0000001201e-1f));
  p = _mm512_fmadd_ps (p, _mm512_mul_ps (r, r), _mm512_add_ps (r, _mm512_set1_ps (1.0f)));
  /* scalef computes p·2^n without building the exponent bits by hand, and
   * overflows to inf / underflows to 0 correctly. */
  __m512 y = _mm512_scalef_ps (p, n);
  return _mm512_mask_blend_ps (_mm512_cmp_ps_mask (x, hi, _CMP_GT_OQ), y, _mm512_set1_ps (INFINITY));
}

UM_TARGET_AVX512 static void
swiglu_avx512 (const float *gate, const float *up, size_t n, float *out)
{
  const __m512 one = _mm512_set1_ps (1.0f);
  size_t i = 0;

  for (; i + 16 <= n; i += 16)
    {
      __m512 g = _mm512_loadu_ps (gate + i);
      __m512 e = exp16 (_mm512_sub_ps (_mm512_setzero_ps (), g));
      _mm512_storeu_ps (out + i, _mm512_mul_ps (_mm512_div_ps (g, _mm512_add_ps (one, e)),
                                                _mm512_loadu_ps (up + i)));
    }
  for (; i < n; i++)
    out[i] = gate[i] / (1.0f + expf (-gate[i])) * up[i];
}

/* sr[j] = e^(sr[j] − mx), returning their sum. */
UM_TARGET_AVX512 static float
exp_shift_sum_avx512 (float *sr, int64_t n, float mx)
{
  const __m512 m = _mm512_set1_ps (mx);
  __m512 acc = _mm512_setzero_ps ();
  float sum;
  int64_t j = 0;

  for (; j + 16 <= n; j += 16)
    {
      __m512 e = exp16 (_mm512_sub_ps (_mm512_loadu_ps (sr + j), m));
      _mm512_storeu_ps (sr + j, e);
      acc = _mm512_add_ps (acc, e);
    }
  sum = _mm512_reduce_add_ps (acc);
  for (; j < n; j++)
    sum += (sr[j] = expf (sr[j] - mx));
  return sum;
}
#endif

static float
exp_shift_sum (float *sr, int64_t n, float mx)
{
  float sum = 0.0f;

#if UM_HAVE_X86_SIMD
  if (um_cpu_isa () >= UM_ISA_AVX512)
    return exp_shift_sum_avx512 (sr, n, mx);
#endif
  for (int64_t j = 0; j < n; j++)
    {
      sr[j] = expf (sr[j] - mx);
      sum += sr[j];
    }
  return sum;
}

/* Query rows per attention task: bounds the score block to 64 × L floats.
 * Under a mask (q_kv_len), a task also keeps its rows' key counts within
 * ATT_CHUNK of each other: it multiplies by the keys its widest row sees,
 * so each row costs at most ATT_CHUNK keys beyond its own. */
#define ATT_CHUNK 64

typedef struct {
  const float *q;
  const gint32 *q_seq, *q_kv_len;
  const float *k, *v;
  int64_t seq_len;
  int n_heads, head_dim;
  int64_t qstride, kvstride;
  int group;
  float scale;
  const int64_t *chunks;   /* per task: its first row, the keys its widest row sees; then nq */
  int64_t n_chunks;
  float *out;
  float *scores;           /* ATT_CHUNK × seq_len per thread */
} AttnJob;

/* Tasks are (head, chunk of query rows), head-major. */
static void
attention_tasks (void *ctx, int64_t tb, int64_t te, int tid)
{
  const AttnJob *j = ctx;
  const int64_t seq_len = j->seq_len, qstride = j->qstride, kvstride = j->kvstride;
  const int head_dim = j->head_dim;
  float *scores = j->scores + (size_t) tid * ATT_CHUNK * seq_len;
  int blas = um_cpu_blas_serial_begin ();

  for (int64_t t = tb; t < te; t++)
    {
      const int h = (int) (t / j->n_chunks);
      const int64_t c = t % j->n_chunks;
      int64_t i0 = j->chunks[2 * c];
      int64_t nk = j->chunks[2 * c + 1];
      int64_t nb = j->chunks[2 * c + 2] - i0;
      int64_t s = j->q_seq[i0];
      int kvh = h / j->group;
      const float *qb = j->q + i0 * qstride + (int64_t) h * head_dim;
      const float *kb = j->k + s * seq_len * kvstride + (int64_t) kvh * head_dim;
      const float *vb = j->v + s * seq_len * kvstride + (int64_t) kvh * head_dim;

      /* Only the nk keys some row of the task sees are multiplied. */
      cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasTrans, nb, nk, head_dim,
                   j->scale, qb, qstride, kb, kvstride, 0.0f, scores, nk);
      for (int64_t r = 0; r < nb; r++)
        {
          float *sr = scores + r * nk;
          const int64_t n = j->q_kv_len != NULL ? (int64_t) j->q_kv_len[i0 + r] : seq_len;
          float mx = -INFINITY, sum;
          for (int64_t jj = 0; jj < n; jj++)
            mx = MAX (mx, sr[jj]);
          sum = exp_shift_sum (sr, n, mx);
          float inv = 1.0f / sum;
          for (int64_t jj = 0; jj < n; jj++)
            sr[jj] *= inv;
          /* Keys this row must not see weigh exactly 0. */
          for (int64_t jj = n; jj < nk; jj++)
            sr[jj] = 0.0f;
        }
      cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, nb, head_dim, nk,
                   1.0f, scores, nk, vb, kvstride, 0.0f,
                   j->out + i0 * qstride + (int64_t) h * head_dim, qstride);
    }
  um_cpu_blas_serial_end (blas);
}

void
um_cpu_attention (const float *q, int64_t nq, const gint32 *q_seq, const gint32 *q_kv_len,
                  const float *k, const float *v, int64_t seq_len,
                  int n_heads, int n_kv_heads, int head_dim, float *out)
{
  const int64_t qstride = (int64_t) n_heads * head_dim;
  const int64_t kvstride = (int64_t) n_kv_heads * head_dim;
  const int group = n_heads / n_kv_heads;
  const float scale = 1.0f / sqrtf ((float) head_dim);
  /* Per task: its first row, then the keys its widest row sees. */
  g_autoptr(GArray) chunks = g_array_new (FALSE, FALSE, sizeof (int64_t));
  int64_t n_chunks;

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
  n_chunks = chunks->len / 2;

  {
    AttnJob job = { q, q_seq, q_kv_len, k, v, seq_len, n_heads, head_dim, qstride, kvstride, group, scale,
                    (const int64_t *) (void *) chunks->data, n_chunks, out, NULL };
    int threads = nq * seq_len * (int64_t) head_dim * n_heads >= PAR_MIN ? 0 : 1;
    int n_scratch = threads == 1 ? 1 : um_pool_max_threads ();
    job.scores = g_malloc ((size_t) n_scratch * ATT_CHUNK * seq_len * sizeof (float));
    um_pool_for ((int64_t) n_heads * n_chunks, 1, threads, attention_tasks, &job);
    g_free (job.scores);
  }
#undef KV_LEN
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
  if (um_cpu_isa () >= UM_ISA_AVX512)
    {
      swiglu_avx512 (j->a + b, j->b + b, (size_t) (e - b), j->out + b);
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

static void
add_range (void *ctx, int64_t b, int64_t e, int tid)
{
  const EltJob *j = ctx;
  (void) tid;
  for (int64_t i = b; i < e; i++)
    j->out[i] += j->a[i];
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
    for (int c = 0; c < j->dim; c++)
      j->out[(size_t) r * j->dim + c] += j->a[c];
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
  /* A small attention runs the OpenMP pool and OpenBLAS once, so their
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

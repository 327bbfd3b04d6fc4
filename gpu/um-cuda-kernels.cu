/* um-cuda-kernels.cu — the CUDA kernels of the GPU backend (see
 * um-cuda-kernels.h for the contract of each launcher).
 *
 * Written for correctness first: every kernel follows the plain references
 * of compute/um-ref-kernels.c and compute/um-quant-ref.c step by step, with
 * 64-bit indexing wherever a product of sizes can pass 2^31 (a 126464×4096
 * embedding, rows×126464 logits).
 *
 * Floating point: nvcc contracts a*b+c into an FMA by default, while the
 * reference dequantizers and RoPE are built as ISO C without contraction.
 * Where the CPU result is meant to be reproduced bit for bit (dequantization,
 * the RoPE rotation) the code uses __fmul_rn / __fadd_rn / __fsub_rn, which
 * are never contracted.  Reductions (RMSNorm, attention, softmax) sum in a
 * different order than the CPU and agree to float accuracy only.
 */
#include "um-cuda-kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "um-cuda-launch.h"
#include "um-quant.h"

/* ---- limits and launch helpers ------------------------------------------- */

/* Sizes beyond these are caller bugs (or overflowed arithmetic), not models. */
#define UM_CUDA_MAX_DIM    ((int64_t) 1 << 31)
#define UM_CUDA_MAX_ELEMS  ((int64_t) 1 << 44)

#define UM_CUDA_THREADS 256
/* Grid-stride loops cover the rest; 2^20 blocks saturate any GPU. */
#define UM_CUDA_MAX_BLOCKS ((int64_t) 1 << 20)
/* gridDim.y and gridDim.z are limited to 65535. */
#define UM_CUDA_MAX_GRID_Y 65535

#define FULL_MASK 0xffffffffu

static unsigned int
grid_1d (int64_t n, int threads)
{
  int64_t blocks = (n + threads - 1) / threads;

  if (blocks < 1)
    blocks = 1;
  if (blocks > UM_CUDA_MAX_BLOCKS)
    blocks = UM_CUDA_MAX_BLOCKS;
  return (unsigned int) blocks;
}

/* Reports an earlier failed launch on this thread too, which is what the
 * header promises ("returns the launch status"). */
static cudaError_t
launch_status (void)
{
  return cudaGetLastError ();
}

#include "um-cuda-decode.h"

template <typename OutT>
static __device__ __forceinline__ void
store_out (OutT *dst, int64_t i, float v);

template <>
__device__ __forceinline__ void
store_out<float> (float *dst, int64_t i, float v)
{
  dst[i] = v;
}

template <>
__device__ __forceinline__ void
store_out<__half> (__half *dst, int64_t i, float v)
{
  dst[i] = __float2half_rn (v);
}

template <>
__device__ __forceinline__ void
store_out<__nv_bfloat16> (__nv_bfloat16 *dst, int64_t i, float v)
{
  dst[i] = __float2bfloat16_rn (v);
}

/* ---- dequantization / embedding ----------------------------------------- */

/* blockIdx.y strides over output rows, blockIdx.x and the threads over the
 * columns; consecutive threads write consecutive elements.  Output row r is
 * source row ids[r] when @ids is given (embedding), else row r. */
template <int T, bool ALIGNED, typename OutT>
static __global__ void
dequant_rows_kernel (const uint8_t *src, int64_t row_bytes, int64_t n_rows, int64_t cols,
                     const int32_t *ids, OutT *dst)
{
  for (int64_t r = blockIdx.y; r < n_rows; r += gridDim.y)
    {
      const int64_t sr = ids != NULL ? (int64_t) ids[r] : r;
      const uint8_t *row = src + sr * row_bytes;
      OutT *out = dst + r * cols;

      for (int64_t e = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; e < cols;
           e += (int64_t) blockDim.x * gridDim.x)
        {
          /* Negative ids would read before the table; the caller validates
           * ids, this only keeps a bug from touching foreign memory. */
          const float val = sr >= 0 ? decode_elem<T, ALIGNED> (row, e) : 0.0f;
          store_out (out, e, val);
        }
    }
}

/* Elements and bytes per block of the types these kernels decode; FALSE for
 * any other. */
static bool
type_block (UmDType type, int64_t *elems, int64_t *bytes)
{
  switch (type)
    {
    case UM_DTYPE_F32:  *elems = 1; *bytes = 4; return true;
    case UM_DTYPE_F16:  *elems = 1; *bytes = 2; return true;
    case UM_DTYPE_BF16: *elems = 1; *bytes = 2; return true;
    case UM_DTYPE_Q8_0: *elems = UM_QK8_0; *bytes = sizeof (UmBlockQ8_0); return true;
    case UM_DTYPE_Q4_0: *elems = UM_QK4_0; *bytes = sizeof (UmBlockQ4_0); return true;
    case UM_DTYPE_Q4_1: *elems = UM_QK4_1; *bytes = sizeof (UmBlockQ4_1); return true;
    case UM_DTYPE_Q5_0: *elems = UM_QK5_0; *bytes = sizeof (UmBlockQ5_0); return true;
    case UM_DTYPE_Q5_1: *elems = UM_QK5_1; *bytes = sizeof (UmBlockQ5_1); return true;
    case UM_DTYPE_Q4_K: *elems = UM_QK_K; *bytes = sizeof (UmBlockQ4_K); return true;
    case UM_DTYPE_Q5_K: *elems = UM_QK_K; *bytes = sizeof (UmBlockQ5_K); return true;
    case UM_DTYPE_Q6_K: *elems = UM_QK_K; *bytes = sizeof (UmBlockQ6_K); return true;
    case UM_DTYPE_I32:
    case UM_DTYPE_N_TYPES:
    default:
      return false;
    }
}

template <int T, bool ALIGNED, typename OutT>
static void
launch_dequant_t (const void *src, int64_t row_bytes, int64_t n_rows, int64_t cols, const int32_t *ids,
                  void *dst, cudaStream_t stream)
{
  const int64_t gx = grid_1d (cols, UM_CUDA_THREADS);
  /* Keep the total block count bounded when rows are many. */
  const int64_t gx_cap = gx < 1024 ? gx : 1024;
  const int64_t gy = n_rows < UM_CUDA_MAX_GRID_Y ? n_rows : UM_CUDA_MAX_GRID_Y;
  const dim3 grid ((unsigned int) gx_cap, (unsigned int) gy);

  UM_LAUNCH ((dequant_rows_kernel<T, ALIGNED, OutT>), grid, UM_CUDA_THREADS, 0, stream,
              (const uint8_t *) src, row_bytes, n_rows, cols, ids, (OutT *) dst);
}

template <typename OutT>
static bool
launch_dequant_out (UmDType type, bool aligned, const void *src, int64_t row_bytes, int64_t n_rows,
                    int64_t cols, const int32_t *ids, void *dst, cudaStream_t stream)
{
#define UM_CASE(T)                                                                            \
  case T:                                                                                     \
    launch_dequant_t<T, false, OutT> (src, row_bytes, n_rows, cols, ids, dst, stream);        \
    return true;
#define UM_CASE_PLAIN(T)                                                                      \
  case T:                                                                                     \
    if (aligned)                                                                              \
      launch_dequant_t<T, true, OutT> (src, row_bytes, n_rows, cols, ids, dst, stream);       \
    else                                                                                      \
      launch_dequant_t<T, false, OutT> (src, row_bytes, n_rows, cols, ids, dst, stream);      \
    return true;

  switch (type)
    {
    UM_CASE_PLAIN (UM_DTYPE_F32)
    UM_CASE_PLAIN (UM_DTYPE_F16)
    UM_CASE_PLAIN (UM_DTYPE_BF16)
    UM_CASE (UM_DTYPE_Q8_0)
    UM_CASE (UM_DTYPE_Q4_0)
    UM_CASE (UM_DTYPE_Q4_1)
    UM_CASE (UM_DTYPE_Q5_0)
    UM_CASE (UM_DTYPE_Q5_1)
    UM_CASE (UM_DTYPE_Q4_K)
    UM_CASE (UM_DTYPE_Q5_K)
    UM_CASE (UM_DTYPE_Q6_K)
    case UM_DTYPE_I32:
    case UM_DTYPE_N_TYPES:
    default:
      return false;
    }
#undef UM_CASE
#undef UM_CASE_PLAIN
}

/* Shared checks of um_cuda_dequant_rows () and um_cuda_embed (). */
static cudaError_t
dequant_common (UmDType type, const void *src, int64_t row_bytes, int64_t n_rows, int64_t cols,
                const int32_t *ids, void *dst, UmCudaOutType out, cudaStream_t stream)
{
  int64_t be, bb;
  bool aligned, ok;

  if (n_rows <= 0 || cols <= 0)
    return cudaSuccess;
  if (!type_block (type, &be, &bb) || src == NULL || dst == NULL)
    return cudaErrorInvalidValue;
  if (n_rows > UM_CUDA_MAX_DIM || cols > UM_CUDA_MAX_DIM || n_rows * cols > UM_CUDA_MAX_ELEMS)
    return cudaErrorInvalidValue;
  /* Whole blocks only, and rows no shorter than their blocks. */
  if (cols % be != 0 || row_bytes < cols / be * bb || row_bytes > UM_CUDA_MAX_ELEMS / n_rows)
    return cudaErrorInvalidValue;

  /* Plain types get single loads when every row start is aligned. */
  aligned = ((uintptr_t) src % (uintptr_t) bb) == 0 && row_bytes % bb == 0;
  switch (out)
    {
    case UM_CUDA_OUT_F32:
      ok = launch_dequant_out<float> (type, aligned, src, row_bytes, n_rows, cols, ids, dst, stream);
      break;
    case UM_CUDA_OUT_F16:
      ok = launch_dequant_out<__half> (type, aligned, src, row_bytes, n_rows, cols, ids, dst, stream);
      break;
    case UM_CUDA_OUT_BF16:
      ok = launch_dequant_out<__nv_bfloat16> (type, aligned, src, row_bytes, n_rows, cols, ids, dst, stream);
      break;
    default:
      ok = false;
      break;
    }
  if (!ok)
    return cudaErrorInvalidValue;
  return launch_status ();
}

extern "C" cudaError_t
um_cuda_dequant_rows (UmDType type, const void *src, int64_t row_bytes, int64_t n_rows,
                      int64_t cols, void *dst, UmCudaOutType out, cudaStream_t stream)
{
  return dequant_common (type, src, row_bytes, n_rows, cols, NULL, dst, out, stream);
}

extern "C" cudaError_t
um_cuda_embed (UmDType type, const void *table, int64_t row_bytes, int64_t cols,
               const int32_t *ids, int n, float *out, cudaStream_t stream)
{
  if (n <= 0 || cols <= 0)
    return cudaSuccess;
  if (ids == NULL)
    return cudaErrorInvalidValue;
  return dequant_common (type, table, row_bytes, n, cols, ids, out, UM_CUDA_OUT_F32, stream);
}

/* ---- get_rows ------------------------------------------------------------ */

static __global__ void
get_rows_kernel (const float *src, int dim, const int32_t *rows, int n, float *out)
{
  const int64_t total = (int64_t) n * dim;

  for (int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t) blockDim.x * gridDim.x)
    {
      const int64_t r = i / dim, c = i % dim;
      out[i] = src[(int64_t) rows[r] * dim + c];
    }
}

extern "C" cudaError_t
um_cuda_get_rows (const float *src, int dim, const int32_t *rows, int n, float *out, cudaStream_t stream)
{
  if (n <= 0 || dim <= 0)
    return cudaSuccess;
  if (src == NULL || rows == NULL || out == NULL)
    return cudaErrorInvalidValue;
  UM_LAUNCH ((get_rows_kernel), grid_1d ((int64_t) n * dim, UM_CUDA_THREADS), UM_CUDA_THREADS, 0, stream,
              src, dim, rows, n, out);
  return launch_status ();
}

/* ---- block reductions ---------------------------------------------------- */

static __device__ __forceinline__ float
warp_sum (float v)
{
  for (int off = 16; off > 0; off >>= 1)
    v += __shfl_xor_sync (FULL_MASK, v, off);
  return v;
}

/* Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every
 * thread gets the result.  @scratch holds 32 floats; the function ends with a
 * barrier after its last read, so scratch may be reused right away. */
static __device__ float
block_sum (float v, float *scratch)
{
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int n_warps = blockDim.x / 32;

  v = warp_sum (v);
  if (lane == 0)
    scratch[warp] = v;
  __syncthreads ();
  v = lane < n_warps ? scratch[lane] : 0.0f;
  v = warp_sum (v);
  __syncthreads ();
  return v;
}

/* ---- RMSNorm ------------------------------------------------------------- */

#define RMS_THREADS 256

/* One block per row.  The whole row is read for the sum before the barrier
 * in block_sum (), and afterwards each element is read and written by the
 * same thread, so out may alias x. */
static __device__ __forceinline__ void
rms_norm_row (const float *xr, int dim, const float *w, float eps, float *o, float *scratch)
{
  float sum = 0.0f;

  for (int i = threadIdx.x; i < dim; i += blockDim.x)
    sum += xr[i] * xr[i];
  sum = block_sum (sum, scratch);

  /* As um_cpu_rms_norm (): mean in float, eps added as float, IEEE sqrt and
   * division (nvcc's defaults without --use_fast_math). */
  const float scale = 1.0f / sqrtf (sum / (float) dim + eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x)
    o[i] = __fmul_rn (__fmul_rn (xr[i], scale), w[i]);
}

static __global__ void __launch_bounds__ (RMS_THREADS)
rms_norm_kernel (const float *x, int dim, const float *w, float eps, float *out)
{
  __shared__ float scratch[32];

  rms_norm_row (x + (int64_t) blockIdx.x * dim, dim, w, eps, out + (int64_t) blockIdx.x * dim, scratch);
}

/* x += y, then RMSNorm of the sum: um_cuda_add's then um_cuda_rms_norm's
 * arithmetic in one launch (the same bits: each thread adds the elements
 * it then reads for the norm, the norm is the same function). y may be
 * out: every y element is read before the barrier in the norm's sum, and
 * out written only after it. */
static __global__ void __launch_bounds__ (RMS_THREADS)
add_rms_norm_kernel (float *x, const float *y, int dim, const float *w, float eps, float *out)
{
  __shared__ float scratch[32];
  float *xr = x + (int64_t) blockIdx.x * dim;
  const float *yr = y + (int64_t) blockIdx.x * dim;

  for (int i = threadIdx.x; i < dim; i += blockDim.x)
    xr[i] += yr[i];
  rms_norm_row (xr, dim, w, eps, out + (int64_t) blockIdx.x * dim, scratch);
}

extern "C" cudaError_t
um_cuda_add_rms_norm (float *x, const float *y, int rows, int dim, const float *w, float eps, float *out,
                      cudaStream_t stream)
{
  if (rows <= 0 || dim <= 0)
    return cudaSuccess;
  if (x == NULL || y == NULL || w == NULL || out == NULL)
    return cudaErrorInvalidValue;
  UM_LAUNCH ((add_rms_norm_kernel), rows, RMS_THREADS, 0, stream, x, y, dim, w, eps, out);
  return launch_status ();
}

extern "C" cudaError_t
um_cuda_rms_norm (const float *x, int rows, int dim, const float *w, float eps, float *out,
                  cudaStream_t stream)
{
  if (rows <= 0 || dim <= 0)
    return cudaSuccess;
  if (x == NULL || w == NULL || out == NULL)
    return cudaErrorInvalidValue;
  UM_LAUNCH ((rms_norm_kernel), rows, RMS_THREADS, 0, stream, x, dim, w, eps, out);
  return launch_status ();
}

/* ---- RoPE ---------------------------------------------------------------- */

/* One thread per (row, frequency i): the angle and its cos/sin are computed
 * once in double, as um_cpu_rope () does, then applied to every head. Only
 * the first rope_dim values of a head turn (partial RoPE). */
static __global__ void
rope_kernel (float *x, int rows, const int32_t *pos, int n_heads, int head_dim, int rope_dim, double theta,
             int interleaved)
{
  const int half = rope_dim / 2;
  const int64_t total = (int64_t) rows * half;

  for (int64_t t = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; t < total;
       t += (int64_t) blockDim.x * gridDim.x)
    {
      const int64_t r = t / half;
      const int i = (int) (t % half);
      const double angle = (double) pos[r] * pow (theta, -2.0 * i / rope_dim);
      const float c = (float) cos (angle), s = (float) sin (angle);
      const int a = interleaved ? 2 * i : i;
      const int b = interleaved ? 2 * i + 1 : i + half;

      for (int h = 0; h < n_heads; h++)
        {
          float *v = x + (r * n_heads + h) * head_dim;
          const float x0 = v[a], x1 = v[b];
          /* No FMA, to match the CPU's rounding exactly. */
          v[a] = __fsub_rn (__fmul_rn (x0, c), __fmul_rn (x1, s));
          v[b] = __fadd_rn (__fmul_rn (x1, c), __fmul_rn (x0, s));
        }
    }
}

extern "C" cudaError_t
um_cuda_rope (float *x, int rows, const int32_t *pos, int n_heads, int head_dim, int rope_dim, double theta,
              int interleaved, cudaStream_t stream)
{
  if (rows <= 0 || n_heads <= 0 || head_dim <= 0)
    return cudaSuccess;
  if (x == NULL || pos == NULL || !(theta > 0.0) || (int64_t) n_heads * head_dim > UM_CUDA_MAX_DIM
      || rope_dim < 0 || rope_dim > head_dim || rope_dim % 2 != 0)
    return cudaErrorInvalidValue;
  if (rope_dim < 2)
    return cudaSuccess;   /* no pairs: the reference leaves x as it is */
  UM_LAUNCH ((rope_kernel), grid_1d ((int64_t) rows * (rope_dim / 2), UM_CUDA_THREADS), UM_CUDA_THREADS, 0, stream,
              x, rows, pos, n_heads, head_dim, rope_dim, theta, interleaved);
  return launch_status ();
}

/* ---- attention ----------------------------------------------------------- */

/* A block handles ATT_BQ query rows of one head with 16 threads per row.
 * Keys and values of the row's sequence are staged in tiles of BK rows in
 * shared memory (K first, then V in the same buffer) and folded into an
 * online softmax: running max m, running sum l, accumulator rescaled by
 * exp(m_old − m_new).  Each thread owns dims c, c+16, c+32, … of its row's
 * accumulator (KPT of them, so head_dim ≤ 16·KPT). */
#define ATT_BQ 16
#define ATT_TPR 16
#define ATT_THREADS (ATT_BQ * ATT_TPR)

static size_t
attention_smem (int bk, int head_dim)
{
  /* Rows padded to head_dim + 1 floats so that the 16 threads of a row,
   * reading 16 different keys at the same d, hit different banks. */
  return ((size_t) (ATT_BQ + bk) * (size_t) (head_dim + 1) + (size_t) ATT_BQ * bk) * sizeof (float);
}

template <int BK, int KPT>
static __global__ void __launch_bounds__ (ATT_THREADS)
attention_kernel (const float *q, int nq, const int32_t *q_seq, const int32_t *q_kv_len, const float *k,
                  const float *v, int seq_len, int n_heads, int n_kv_heads, int head_dim, float scale, float *out)
{
  static_assert (BK % ATT_TPR == 0, "key tile must be a multiple of 16");
  constexpr int JPT = BK / ATT_TPR;   /* scores per thread and tile */

  UM_DYNAMIC_SHARED (float, smem);
  __shared__ int32_t seq[ATT_BQ];
  __shared__ int32_t kvl[ATT_BQ];      /* keys each row sees (clamped to 0 … L) */

  const int ld = head_dim + 1;
  float *qs = smem;                   /* [ATT_BQ][ld] */
  float *kv = qs + ATT_BQ * ld;       /* [BK][ld], K then V */
  float *ps = kv + BK * ld;           /* [ATT_BQ][BK] probabilities */

  const int tid = threadIdx.x;
  const int qi = tid / ATT_TPR, c = tid % ATT_TPR;
  const int h = blockIdx.y;
  const int kvh = h / (n_heads / n_kv_heads);
  const int64_t i0 = (int64_t) blockIdx.x * ATT_BQ;
  const int nrows = (int) ((int64_t) nq - i0 < ATT_BQ ? (int64_t) nq - i0 : ATT_BQ);
  const int64_t qstride = (int64_t) n_heads * head_dim;
  const int64_t kvstride = (int64_t) n_kv_heads * head_dim;

  for (int idx = tid; idx < ATT_BQ * head_dim; idx += ATT_THREADS)
    {
      const int r = idx / head_dim, d = idx % head_dim;
      qs[r * ld + d] = r < nrows ? q[(i0 + r) * qstride + (int64_t) h * head_dim + d] : 0.0f;
    }
  if (tid < ATT_BQ)
    {
      seq[tid] = tid < nrows ? q_seq[i0 + tid] : -1;
      kvl[tid] = tid >= nrows ? 0
                 : q_kv_len == NULL ? seq_len
                 : max (0, min (q_kv_len[i0 + tid], seq_len));
    }
  __syncthreads ();

  /* The block's rows may belong to several sequences (at a boundary, or when
   * only a few rows per sequence are asked for): each maximal run of rows of
   * one sequence makes one pass over that sequence's keys.  r0, r1 and s are
   * the same in every thread, so the barriers inside stay uniform. */
  for (int r0 = 0; r0 < nrows;)
    {
      const int s = seq[r0];
      int r1 = r0 + 1;
      while (r1 < nrows && seq[r1] == s)
        r1++;
      const bool active = qi >= r0 && qi < r1;
      float *orow = out + (i0 + qi) * qstride + (int64_t) h * head_dim;
      /* The run reads the keys its widest row sees (the same in every
       * thread: the loop's barriers stay uniform); each row weighs only its
       * own. Rows outside the run see nothing and write nothing. */
      int kv_end = 0;
      for (int r = r0; r < r1; r++)
        kv_end = max (kv_end, (int) kvl[r]);
      const int lim = active ? kvl[qi] : 0;

      if (s < 0)
        {
          /* A caller bug; zeros rather than reads before k. */
          if (active)
            for (int d = c; d < head_dim; d += ATT_TPR)
              orow[d] = 0.0f;
          r0 = r1;
          continue;
        }

      const float *kb = k + (int64_t) s * seq_len * kvstride + (int64_t) kvh * head_dim;
      const float *vb = v + (int64_t) s * seq_len * kvstride + (int64_t) kvh * head_dim;
      float m = -INFINITY, l = 0.0f;
      float acc[KPT];

#pragma unroll
      for (int t = 0; t < KPT; t++)
        acc[t] = 0.0f;

      for (int kt = 0; kt < kv_end; kt += BK)
        {
          const int nk = kv_end - kt < BK ? kv_end - kt : BK;
          float sc[JPT];
          float tmax = -INFINITY, psum = 0.0f, corr;

          for (int idx = tid; idx < BK * head_dim; idx += ATT_THREADS)
            {
              const int j = idx / head_dim, d = idx % head_dim;
              kv[j * ld + d] = j < nk ? kb[(int64_t) (kt + j) * kvstride + d] : 0.0f;
            }
          __syncthreads ();

          /* Scores of keys c, c+16, … of this tile for row qi. */
#pragma unroll
          for (int u = 0; u < JPT; u++)
            {
              const int j = c + ATT_TPR * u;
              const float *qr = qs + qi * ld, *kr = kv + j * ld;
              float dot = 0.0f;
              for (int d = 0; d < head_dim; d++)
                dot += qr[d] * kr[d];
              sc[u] = j < nk && kt + j < lim ? dot * scale : -INFINITY;
              tmax = fmaxf (tmax, sc[u]);
            }
          /* The 16 threads of a row are 16 aligned lanes of one warp. */
          for (int off = ATT_TPR / 2; off > 0; off >>= 1)
            tmax = fmaxf (tmax, __shfl_xor_sync (FULL_MASK, tmax, off, ATT_TPR));
          __syncthreads ();   /* every thread is done with K */

          for (int idx = tid; idx < BK * head_dim; idx += ATT_THREADS)
            {
              const int j = idx / head_dim, d = idx % head_dim;
              kv[j * ld + d] = j < nk ? vb[(int64_t) (kt + j) * kvstride + d] : 0.0f;
            }

          const float m_new = fmaxf (m, tmax);
          if (m_new == -INFINITY)
            {
              /* Nothing finite yet: exp (−inf − −inf) would be NaN. */
              corr = 1.0f;
#pragma unroll
              for (int u = 0; u < JPT; u++)
                ps[qi * BK + c + ATT_TPR * u] = 0.0f;
            }
          else
            {
              corr = expf (m - m_new);
#pragma unroll
              for (int u = 0; u < JPT; u++)
                {
                  const float p = expf (sc[u] - m_new);   /* −inf (padding) → 0 */
                  ps[qi * BK + c + ATT_TPR * u] = p;
                  psum += p;
                }
            }
          for (int off = ATT_TPR / 2; off > 0; off >>= 1)
            psum += __shfl_xor_sync (FULL_MASK, psum, off, ATT_TPR);
          l = l * corr + psum;
          m = m_new;
          __syncthreads ();   /* V and the probabilities are in place */

#pragma unroll
          for (int t = 0; t < KPT; t++)
            acc[t] *= corr;
          for (int j = 0; j < nk; j++)
            {
              const float p = ps[qi * BK + j];
              const float *vr = kv + j * ld;
#pragma unroll
              for (int t = 0; t < KPT; t++)
                {
                  const int d = c + ATT_TPR * t;
                  if (d < head_dim)
                    acc[t] += p * vr[d];
                }
            }
          __syncthreads ();   /* before the next tile overwrites V */
        }

      if (active)
        {
#pragma unroll
          for (int t = 0; t < KPT; t++)
            {
              const int d = c + ATT_TPR * t;
              if (d < head_dim)
                orow[d] = l > 0.0f ? acc[t] / l : 0.0f;   /* l 0: a row seeing no key (a caller bug) */
            }
        }
      r0 = r1;
    }
}

template <int BK, int KPT>
static void
launch_attention (const float *q, int nq, const int32_t *q_seq, const int32_t *q_kv_len, const float *k,
                  const float *v, int seq_len, int n_heads, int n_kv_heads, int head_dim, float *out,
                  cudaStream_t stream)
{
  const dim3 grid ((unsigned int) ((nq + ATT_BQ - 1) / ATT_BQ), (unsigned int) n_heads);
  const float scale = 1.0f / sqrtf ((float) head_dim);

  UM_LAUNCH ((attention_kernel<BK, KPT>), grid, ATT_THREADS, attention_smem (BK, head_dim), stream,
              q, nq, q_seq, q_kv_len, k, v, seq_len, n_heads, n_kv_heads, head_dim, scale, out);
}

extern "C" cudaError_t
um_cuda_attention (const float *q, int nq, const int32_t *q_seq, const int32_t *q_kv_len, const float *k,
                   const float *v, int seq_len, int n_heads, int n_kv_heads, int head_dim, float *out,
                   cudaStream_t stream)
{
  if (nq <= 0)
    return cudaSuccess;
  if (q == NULL || q_seq == NULL || k == NULL || v == NULL || out == NULL)
    return cudaErrorInvalidValue;
  if (seq_len <= 0 || head_dim <= 0 || head_dim > 256 || n_heads <= 0 || n_kv_heads <= 0 ||
      n_heads % n_kv_heads != 0 || n_heads > UM_CUDA_MAX_GRID_Y ||
      (int64_t) n_heads * head_dim > UM_CUDA_MAX_DIM)
    return cudaErrorInvalidValue;

  /* Shared memory stays below the 48 KiB available without opting in:
   * 26 KiB at head_dim 128 (BK 32), 33 KiB at 256 (BK 16). */
  if (head_dim <= 64)
    launch_attention<32, 4> (q, nq, q_seq, q_kv_len, k, v, seq_len, n_heads, n_kv_heads, head_dim, out, stream);
  else if (head_dim <= 128)
    launch_attention<32, 8> (q, nq, q_seq, q_kv_len, k, v, seq_len, n_heads, n_kv_heads, head_dim, out, stream);
  else
    launch_attention<16, 16> (q, nq, q_seq, q_kv_len, k, v, seq_len, n_heads, n_kv_heads, head_dim, out, stream);
  return launch_status ();
}

/* ---- element-wise -------------------------------------------------------- */

static __global__ void
swiglu_kernel (const float *gate, const float *up, size_t n, float *out)
{
  for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t) blockDim.x * gridDim.x)
    {
      const float g = gate[i];
      out[i] = g / (1.0f + expf (-g)) * up[i];
    }
}

extern "C" cudaError_t
um_cuda_swiglu (const float *gate, const float *up, size_t n, float *out, cudaStream_t stream)
{
  if (n == 0)
    return cudaSuccess;
  if (gate == NULL || up == NULL || out == NULL || n > (size_t) UM_CUDA_MAX_ELEMS)
    return cudaErrorInvalidValue;
  UM_LAUNCH ((swiglu_kernel), grid_1d ((int64_t) n, UM_CUDA_THREADS), UM_CUDA_THREADS, 0, stream,
              gate, up, n, out);
  return launch_status ();
}

static __global__ void
add_kernel (float *x, const float *y, size_t n)
{
  for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t) blockDim.x * gridDim.x)
    x[i] += y[i];
}

extern "C" cudaError_t
um_cuda_add (float *x, const float *y, size_t n, cudaStream_t stream)
{
  if (n == 0)
    return cudaSuccess;
  if (x == NULL || y == NULL || n > (size_t) UM_CUDA_MAX_ELEMS)
    return cudaErrorInvalidValue;
  UM_LAUNCH ((add_kernel), grid_1d ((int64_t) n, UM_CUDA_THREADS), UM_CUDA_THREADS, 0, stream, x, y, n);
  return launch_status ();
}

/* One rounding per element, as um_cpu_add_bias (): bit-identical. */
static __global__ void
add_bias_kernel (float *x, int64_t total, int dim, const float *bias)
{
  for (int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t) blockDim.x * gridDim.x)
    x[i] += bias[i % dim];
}

extern "C" cudaError_t
um_cuda_add_bias (float *x, int rows, int dim, const float *bias, cudaStream_t stream)
{
  if (rows <= 0 || dim <= 0)
    return cudaSuccess;
  if (x == NULL || bias == NULL || (int64_t) rows * dim > UM_CUDA_MAX_ELEMS)
    return cudaErrorInvalidValue;
  UM_LAUNCH ((add_bias_kernel), grid_1d ((int64_t) rows * dim, UM_CUDA_THREADS), UM_CUDA_THREADS, 0, stream,
              x, (int64_t) rows * dim, dim, bias);
  return launch_status ();
}

/* The rows are distinct (the contract), so every element of dst has at most
 * one writer and no atomics are needed.  The product and the sum are rounded
 * separately (no FMA), as um_cpu_add_rows_scaled () does in ISO C: the same
 * bits. */
static __global__ void
add_rows_scaled_kernel (float *dst, int dim, const int32_t *rows, const float *scale, int64_t total,
                        const float *src)
{
  for (int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t) blockDim.x * gridDim.x)
    {
      const int64_t r = i / dim, c = i % dim;
      /* The backend checks the rows; this only keeps a caller's bug from
       * writing before dst. */
      if (rows[r] < 0)
        continue;
      float *d = dst + (int64_t) rows[r] * dim + c;
      *d = __fadd_rn (*d, __fmul_rn (scale[r], src[i]));
    }
}

extern "C" cudaError_t
um_cuda_add_rows_scaled (float *dst, int dim, const int32_t *rows, const float *scale, int n, const float *src,
                         cudaStream_t stream)
{
  if (n <= 0 || dim <= 0)
    return cudaSuccess;
  if (dst == NULL || rows == NULL || scale == NULL || src == NULL || (int64_t) n * dim > UM_CUDA_MAX_ELEMS)
    return cudaErrorInvalidValue;
  UM_LAUNCH ((add_rows_scaled_kernel), grid_1d ((int64_t) n * dim, UM_CUDA_THREADS), UM_CUDA_THREADS, 0, stream,
              dst, dim, rows, scale, (int64_t) n * dim, src);
  return launch_status ();
}

template <typename OutT>
static __global__ void
convert_kernel (const float *src, size_t n, OutT *dst)
{
  for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t) blockDim.x * gridDim.x)
    store_out (dst, (int64_t) i, src[i]);
}

extern "C" cudaError_t
um_cuda_convert_f32 (const float *src, size_t n, void *dst, UmCudaOutType to, cudaStream_t stream)
{
  unsigned int grid;

  if (n == 0)
    return cudaSuccess;
  if (src == NULL || dst == NULL || n > (size_t) UM_CUDA_MAX_ELEMS)
    return cudaErrorInvalidValue;
  grid = grid_1d ((int64_t) n, UM_CUDA_THREADS);
  switch (to)
    {
    case UM_CUDA_OUT_F32:
      UM_LAUNCH ((convert_kernel<float>), grid, UM_CUDA_THREADS, 0, stream, src, n, (float *) dst);
      break;
    case UM_CUDA_OUT_F16:
      UM_LAUNCH ((convert_kernel<__half>), grid, UM_CUDA_THREADS, 0, stream, src, n, (__half *) dst);
      break;
    case UM_CUDA_OUT_BF16:
      UM_LAUNCH ((convert_kernel<__nv_bfloat16>), grid, UM_CUDA_THREADS, 0, stream,
                  src, n, (__nv_bfloat16 *) dst);
      break;
    default:
      return cudaErrorInvalidValue;
    }
  return launch_status ();
}

/* As convert_kernel, and *flag = 1 when a value does not fit @OutT
 * (|x| > 65504 for half) or is not finite: those rows would come out of the
 * product as inf or NaN, so the caller redoes it with fp32 activations. */
template <typename OutT>
static __global__ void
convert_checked_kernel (const float *src, size_t n, OutT *dst, float limit, int *flag)
{
  int bad = 0;
  for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t) blockDim.x * gridDim.x)
    {
      float v = src[i];
      /* Written so that NaN fails the test too. */
      if (!(fabsf (v) <= limit))
        bad = 1;
      store_out (dst, (int64_t) i, v);
    }
  /* Every writer stores the same value: no atomic needed. */
  if (bad)
    *flag = 1;
}

extern "C" cudaError_t
um_cuda_convert_f32_checked (const float *src, size_t n, void *dst, UmCudaOutType to, int *flag,
                             cudaStream_t stream)
{
  unsigned int grid;

  if (n == 0)
    return cudaSuccess;
  if (src == NULL || dst == NULL || flag == NULL || n > (size_t) UM_CUDA_MAX_ELEMS)
    return cudaErrorInvalidValue;
  grid = grid_1d ((int64_t) n, UM_CUDA_THREADS);
  switch (to)
    {
    case UM_CUDA_OUT_F16:
      UM_LAUNCH ((convert_checked_kernel<__half>), grid, UM_CUDA_THREADS, 0, stream, src, n, (__half *) dst,
                 65504.0f, flag);
      break;
    case UM_CUDA_OUT_BF16:
      UM_LAUNCH ((convert_checked_kernel<__nv_bfloat16>), grid, UM_CUDA_THREADS, 0, stream,
                 src, n, (__nv_bfloat16 *) dst, FLT_MAX, flag);
      break;
    default:
      return cudaErrorInvalidValue;
    }
  return launch_status ();
}

cudaError_t
um_cuda_probe_kernels (void)
{
  struct cudaFuncAttributes attr;
  /* Fails with cudaErrorNoKernelImageForDevice (or a PTX JIT error) when
   * nothing in the fat binary fits the current device. */
  return cudaFuncGetAttributes (&attr, (const void *) add_kernel);
}

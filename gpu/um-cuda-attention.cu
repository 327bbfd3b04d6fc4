/* um-cuda-attention.cu — the softmax between the two products of attention
 * on tensor cores (the products are cuBLAS's; see um-cuda-attention-tc.c).
 *
 * One block per row of scores.  Each thread keeps an online (max, sum) over
 * its strided share of the row, the block merges them, and a second pass
 * writes exp(s − max) / sum: two reads of the row (the second from cache)
 * and one write, instead of three passes.  Under a mask a row weighs only
 * its first row_len scores and writes 0 over the rest (keys the query must
 * not see), so the product with V that follows leaves them out. */
#include "um-cuda-attention.h"
#include "um-cuda-launch.h"

#include <cuda_runtime.h>

#define SM_THREADS 256
#define SM_WARPS (SM_THREADS / 32)
#define SM_FULL_MASK 0xffffffffu

/* Merges (m, l) with (om, ol), l the sum of exp(x − m); an empty share
 * (l = 0, m = −inf) contributes nothing instead of exp(−inf + inf) = NaN. */
static __device__ void
sm_merge (float &m, float &l, float om, float ol)
{
  const float nm = fmaxf (m, om);
  const float a = l > 0.0f ? l * expf (m - nm) : 0.0f;
  const float b = ol > 0.0f ? ol * expf (om - nm) : 0.0f;
  m = nm;
  l = a + b;
}

static __global__ void __launch_bounds__ (SM_THREADS)
softmax_rows_kernel (float *s, int len, const int32_t *row_len, int q_rows)
{
  __shared__ float wm[SM_WARPS], wl[SM_WARPS];
  float *row = s + (int64_t) blockIdx.x * len;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int n = row_len == NULL ? len : max (0, min ((int) row_len[blockIdx.x % (unsigned int) q_rows], len));
  float m = -INFINITY, l = 0.0f;

  for (int j = tid; j < n; j += SM_THREADS)
    {
      const float x = row[j];
      if (x > m)
        {
          l = l * expf (m - x) + 1.0f;
          m = x;
        }
      else
        l += expf (x - m);
    }
  for (int off = 16; off > 0; off /= 2)
    {
      const float om = __shfl_xor_sync (SM_FULL_MASK, m, off);
      const float ol = __shfl_xor_sync (SM_FULL_MASK, l, off);
      sm_merge (m, l, om, ol);
    }
  if (lane == 0)
    {
      wm[warp] = m;
      wl[warp] = l;
    }
  __syncthreads ();
  /* Every thread merges the warps' results in the same order, so all agree. */
  m = wm[0];
  l = wl[0];
  for (int w = 1; w < SM_WARPS; w++)
    sm_merge (m, l, wm[w], wl[w]);

  /* l 0: a row that sees no key (a caller bug) gets zeros, not NaN. */
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (int j = tid; j < len; j += SM_THREADS)
    row[j] = j < n && l > 0.0f ? expf (row[j] - m) * inv : 0.0f;
}

extern "C" cudaError_t
um_cuda_attention_softmax (float *s, int64_t rows, int len, const int32_t *row_len, int q_rows,
                           cudaStream_t stream)
{
  if (rows <= 0 || len <= 0)
    return cudaSuccess;
  if (s == NULL || rows > 0x7fffffff || (row_len != NULL && q_rows <= 0))
    return cudaErrorInvalidValue;
  UM_LAUNCH ((softmax_rows_kernel), dim3 ((unsigned int) rows), SM_THREADS, 0, stream, s, len, row_len, q_rows);
  return cudaGetLastError ();
}

/* um-cuda-moe.cu — a mixture-of-experts layer on the device (see
 * um-cuda-moe.h): routing, grouping, the grouped expert products, and the
 * weighted sum into the residual. */
#include "um-cuda-moe.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "um-cuda-launch.h"
#include "um-cuda-decode.h"

#define FULL_MASK 0xffffffffu
#define TR UM_CUDA_MOE_TILE_ROWS

/* ---- routing: a warp per token ------------------------------------------- */

#define ROUTE_WARPS 4

/* Shared per warp: p and sel for every expert, a score and a mark per
 * group. */
static size_t
route_smem (int E, int G)
{
  return (size_t) ROUTE_WARPS * (2 * (size_t) E + 2 * (size_t) (G > 1 ? G : 1)) * sizeof (double);
}

static __device__ double
warp_max_d (double v)
{
  for (int off = 16; off > 0; off >>= 1)
    v = fmax (v, __shfl_xor_sync (FULL_MASK, v, off));
  return v;
}

/* um_moe_route ()'s group limit, on one warp's arrays (lane 0). */
static __device__ void
limit_groups (const UmCudaMoeRule *r, double *sel, double *score, double *kept)
{
  const int E = r->n_experts, G = r->n_groups;
  int S, keep;

  if (G <= 1 || E % G != 0)
    return;
  S = E / G;
  keep = max (min (r->groups_used, G), (r->k + S - 1) / S);
  if (keep >= G)
    return;
  for (int g = 0; g < G; g++)
    {
      double b1 = -INFINITY, b2 = -INFINITY;
      for (int e = g * S; e < (g + 1) * S; e++)
        if (sel[e] > b1)
          {
            b2 = b1;
            b1 = sel[e];
          }
        else if (sel[e] > b2)
          b2 = sel[e];
      score[g] = S >= 2 ? b1 + b2 : b1;
    }
  for (int g = 0; g < G; g++)
    kept[g] = 0.0;
  for (int c = 0; c < keep; c++)
    {
      int best = -1;
      for (int g = 0; g < G; g++)
        if (kept[g] == 0.0 && (best < 0 || score[g] > score[best]))
          best = g;
      kept[best] = 1.0;
    }
  for (int e = 0; e < E; e++)
    if (kept[e / S] == 0.0)
      sel[e] = -INFINITY;
}

/* The lanes compute the probabilities; lane 0 sums them, limits the
 * groups and takes the top k in expert order, as the host does. */
static __global__ void
route_kernel (const float *logits, const float *bias, int n, UmCudaMoeRule r, int32_t *choice, float *weight,
              int32_t *counts)
{
  UM_DYNAMIC_SHARED (double, smem);
  const int E = r.n_experts, G = r.n_groups > 1 ? r.n_groups : 1;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = (int64_t) blockIdx.x * ROUTE_WARPS + warp;
  double *p = smem + (size_t) warp * (2 * E + 2 * G);
  double *sel = p + E, *score = sel + E, *kept = score + G;

  if (t >= n)
    return;   /* the whole warp: no barrier of the block is used */
  const float *z = logits + t * E;
  if (r.sigmoid)
    for (int e = lane; e < E; e += 32)
      p[e] = 1.0 / (1.0 + exp (-(double) z[e]));
  else
    {
      double mx = -INFINITY;
      for (int e = lane; e < E; e += 32)
        mx = fmax (mx, (double) z[e]);
      mx = warp_max_d (mx);
      for (int e = lane; e < E; e += 32)
        p[e] = exp ((double) z[e] - mx);
    }
  __syncwarp ();
  if (lane == 0)
    {
      if (!r.sigmoid)
        {
          /* In expert order, as the host sums. */
          double s = 0.0;
          for (int e = 0; e < E; e++)
            s += p[e];
          for (int e = 0; e < E; e++)
            p[e] /= s;
        }
      for (int e = 0; e < E; e++)
        sel[e] = p[e] + (bias != NULL ? (double) bias[e] : 0.0);
      limit_groups (&r, sel, score, kept);
      double w[16], sum = 0.0;
      int ch[16];
      for (int j = 0; j < r.k; j++)
        {
          int best = -1;
          for (int e = 0; e < E; e++)
            if (sel[e] != -INFINITY && (best < 0 || sel[e] > sel[best]))
              best = e;
          ch[j] = best;
          w[j] = best >= 0 ? p[best] : 0.0;
          sum += w[j];
          if (best >= 0)
            sel[best] = -INFINITY;
        }
      for (int j = 0; j < r.k; j++)
        {
          if (r.norm)
            w[j] /= fmax (sum, 6.1035e-5);
          if (r.scale != 1.0 && r.scale != 0.0)
            w[j] *= r.scale;
          choice[t * r.k + j] = ch[j];
          weight[t * r.k + j] = (float) w[j];
          if (ch[j] >= 0)
            atomicAdd (&counts[ch[j]], 1);
        }
    }
}

/* ---- grouping: a block per expert ---------------------------------------- */

#define GROUP_THREADS 256

/* Expert e's slots start after the earlier experts' (a counting sort);
 * inside, tokens ascend: a block-wide prefix count over the tokens in
 * order. Then e's tiles of up to TR slots. */
static __global__ void __launch_bounds__ (GROUP_THREADS)
group_kernel (int n, int k, int E, const int32_t *choice, const float *weight, const int32_t *counts,
              int32_t *slot_row, float *slot_scale, int32_t *slot_of, int32_t *tile_expert, int32_t *tile_row0,
              int32_t *tile_row1)
{
  __shared__ int s_off, s_tiles;
  __shared__ int wsum[GROUP_THREADS / 32];
  const int e = blockIdx.x, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  int base = 0;

  if (tid == 0)
    {
      int off = 0, tiles = 0;
      for (int i = 0; i < e; i++)
        {
          off += counts[i];
          tiles += (counts[i] + TR - 1) / TR;
        }
      s_off = off;
      s_tiles = tiles;
    }
  __syncthreads ();
  for (int t0 = 0; t0 < n; t0 += GROUP_THREADS)
    {
      const int t = t0 + tid;
      int jj = -1;
      if (t < n)
        for (int j = 0; j < k; j++)
          if (choice[(int64_t) t * k + j] == e)
            jj = j;
      const unsigned bits = __ballot_sync (FULL_MASK, jj >= 0);
      if (lane == 0)
        wsum[warp] = __popc (bits);
      __syncthreads ();
      int before = 0, total = 0;
      for (int w = 0; w < GROUP_THREADS / 32; w++)
        {
          before += w < warp ? wsum[w] : 0;
          total += wsum[w];
        }
      if (jj >= 0)
        {
          const int pos = s_off + base + before + __popc (bits & ((1u << lane) - 1u));
          slot_row[pos] = t;
          slot_scale[pos] = weight[(int64_t) t * k + jj];
          slot_of[(int64_t) t * k + jj] = pos;
        }
      base += total;
      __syncthreads ();   /* wsum is rewritten next */
    }
  const int cnt = counts[e];
  for (int i = tid; i < (cnt + TR - 1) / TR; i += GROUP_THREADS)
    {
      const int at = s_tiles + i, r0 = s_off + i * TR;
      tile_expert[at] = e;
      tile_row0[at] = r0;
      tile_row1[at] = min (s_off + cnt, r0 + TR);
    }
}

extern "C" cudaError_t
um_cuda_moe_route (const float *logits, const float *bias, int n, const UmCudaMoeRule *rule, UmCudaMoeWork *w,
                   cudaStream_t stream)
{
  const int E = rule->n_experts;
  cudaError_t e;

  if (n <= 0)
    return cudaSuccess;
  if (logits == NULL || w == NULL || E <= 0 || E > UM_CUDA_MOE_MAX_EXPERTS || rule->k <= 0 || rule->k > 16
      || rule->k > E || rule->n_groups > 64 || (int64_t) n * rule->k != w->slots)
    return cudaErrorInvalidValue;
  if ((e = cudaMemsetAsync (w->counts, 0, (size_t) E * sizeof (int32_t), stream)) != cudaSuccess
      || (e = cudaMemsetAsync (w->tile_expert, 0xff, (size_t) w->max_tiles * sizeof (int32_t), stream))
         != cudaSuccess)
    return e;
  UM_LAUNCH ((route_kernel), (unsigned int) ((n + ROUTE_WARPS - 1) / ROUTE_WARPS), ROUTE_WARPS * 32,
             route_smem (E, rule->n_groups), stream, logits, bias, n, *rule, w->choice, w->weight, w->counts);
  if ((e = cudaGetLastError ()) != cudaSuccess)
    return e;
  UM_LAUNCH ((group_kernel), (unsigned int) E, GROUP_THREADS, 0, stream, n, rule->k, E, (const int32_t *) w->choice,
             (const float *) w->weight, (const int32_t *) w->counts, w->slot_row, w->slot_scale, w->slot_of,
             w->tile_expert, w->tile_row0, w->tile_row1);
  return cudaGetLastError ();
}

/* ---- the grouped products ------------------------------------------------ */

#define TN 64
#define TK 32
#define FFN_THREADS 256

/* A tile of TR slots × TN outputs of one expert: GATED, silu(gate·x) ·
 * (up·x) with x the slot's token row of @in (d_model wide); otherwise
 * down·a with a the slot's row of @in (ffn wide). Each thread owns 2 rows
 * × 4 columns; k runs in TK steps, in order. */
template <int T, bool GATED>
static __global__ void __launch_bounds__ (FFN_THREADS)
ffn_kernel (const void *const *mats, int64_t row_bytes, const float *in, int K, int N, const int32_t *slot_row,
            const int32_t *tile_expert, const int32_t *tile_row0, const int32_t *tile_row1, float *out)
{
  __shared__ float xs[TR][TK + 1];
  __shared__ float ws[TN][TK + 1];
  __shared__ float us[GATED ? TN : 1][TK + 1];
  const int tile = blockIdx.y, tid = threadIdx.x;
  const int ty = tid / 16, tx = tid % 16;
  const int e = tile_expert[tile];

  if (e < 0)
    return;   /* the whole block: past the tiles in use */
  const int r0 = tile_row0[tile], r1 = tile_row1[tile];
  const int n0 = blockIdx.x * TN;
  const uint8_t *w0 = (const uint8_t *) mats[3 * e + (GATED ? 0 : 2)];
  const uint8_t *w1 = GATED ? (const uint8_t *) mats[3 * e + 1] : NULL;
  float acc[2][4], accu[2][4];

  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 4; j++)
      acc[i][j] = accu[i][j] = 0.0f;
  for (int k0 = 0; k0 < K; k0 += TK)
    {
      for (int idx = tid; idx < TR * TK; idx += FFN_THREADS)
        {
          const int r = idx / TK, kk = idx % TK, p = r0 + r;
          float v = 0.0f;
          if (p < r1 && k0 + kk < K)
            v = GATED ? in[(int64_t) slot_row[p] * K + k0 + kk] : in[(int64_t) p * K + k0 + kk];
          xs[r][kk] = v;
        }
      for (int idx = tid; idx < TN * TK; idx += FFN_THREADS)
        {
          const int col = idx / TK, kk = idx % TK;
          const bool in_range = n0 + col < N && k0 + kk < K;
          ws[col][kk] = in_range ? decode_elem<T, false> (w0 + (int64_t) (n0 + col) * row_bytes, k0 + kk) : 0.0f;
          if (GATED)
            us[col][kk] = in_range ? decode_elem<T, false> (w1 + (int64_t) (n0 + col) * row_bytes, k0 + kk) : 0.0f;
        }
      __syncthreads ();
      for (int kk = 0; kk < TK; kk++)
        for (int i = 0; i < 2; i++)
          {
            const float xv = xs[ty * 2 + i][kk];
            for (int j = 0; j < 4; j++)
              {
                acc[i][j] += xv * ws[tx * 4 + j][kk];
                if (GATED)
                  accu[i][j] += xv * us[tx * 4 + j][kk];
              }
          }
      __syncthreads ();
    }
  for (int i = 0; i < 2; i++)
    {
      const int p = r0 + ty * 2 + i;
      if (p >= r1)
        continue;
      for (int j = 0; j < 4; j++)
        {
          const int col = n0 + tx * 4 + j;
          if (col >= N)
            continue;
          if (GATED)
            {
              /* SwiGLU as um_cuda_swiglu () computes it. */
              const float g = acc[i][j];
              out[(int64_t) p * N + col] = g / (1.0f + expf (-g)) * accu[i][j];
            }
          else
            out[(int64_t) p * N + col] = acc[i][j];
        }
    }
}

template <bool GATED>
static bool
launch_ffn (UmDType type, const void *const *mats, int64_t row_bytes, const float *in, int K, int N,
            const UmCudaMoeWork *w, float *out, cudaStream_t stream)
{
  const dim3 grid ((unsigned int) ((N + TN - 1) / TN), (unsigned int) w->max_tiles);

#define UM_CASE(T)                                                                                          \
  case T:                                                                                                   \
    UM_LAUNCH ((ffn_kernel<T, GATED>), grid, FFN_THREADS, 0, stream, mats, row_bytes, in, K, N,            \
               (const int32_t *) w->slot_row, (const int32_t *) w->tile_expert, (const int32_t *) w->tile_row0, \
               (const int32_t *) w->tile_row1, out);                                                        \
    return true;
  switch (type)
    {
    UM_CASE (UM_DTYPE_F32)
    UM_CASE (UM_DTYPE_F16)
    UM_CASE (UM_DTYPE_BF16)
    UM_CASE (UM_DTYPE_Q8_0)
    UM_CASE (UM_DTYPE_Q4_0)
    UM_CASE (UM_DTYPE_Q4_1)
    UM_CASE (UM_DTYPE_Q5_0)
    UM_CASE (UM_DTYPE_Q5_1)
    UM_CASE (UM_DTYPE_Q4_K)
    UM_CASE (UM_DTYPE_Q5_K)
    UM_CASE (UM_DTYPE_Q6_K)
    default:
      return false;
    }
#undef UM_CASE
}

extern "C" int
um_cuda_moe_type_ok (UmDType type)
{
  switch (type)
    {
    case UM_DTYPE_F32: case UM_DTYPE_F16: case UM_DTYPE_BF16: case UM_DTYPE_Q8_0: case UM_DTYPE_Q4_0:
    case UM_DTYPE_Q4_1: case UM_DTYPE_Q5_0: case UM_DTYPE_Q5_1: case UM_DTYPE_Q4_K: case UM_DTYPE_Q5_K:
    case UM_DTYPE_Q6_K:
      return 1;
    default:
      return 0;
    }
}

extern "C" cudaError_t
um_cuda_moe_ffn (UmDType gate_up, int64_t gu_row_bytes, UmDType down, int64_t down_row_bytes,
                 const void *const *mats, const float *h, int d_model, int ffn, const UmCudaMoeWork *w,
                 cudaStream_t stream)
{
  cudaError_t e;

  if (w->slots <= 0)
    return cudaSuccess;
  if (mats == NULL || h == NULL || d_model <= 0 || ffn <= 0 || w->max_tiles > 65535)
    return cudaErrorInvalidValue;
  if (!launch_ffn<true> (gate_up, mats, gu_row_bytes, h, d_model, ffn, w, w->a, stream))
    return cudaErrorInvalidValue;
  if ((e = cudaGetLastError ()) != cudaSuccess)
    return e;
  if (!launch_ffn<false> (down, mats, down_row_bytes, w->a, ffn, d_model, w, w->y, stream))
    return cudaErrorInvalidValue;
  return cudaGetLastError ();
}

/* ---- the weighted sum into the residual ---------------------------------- */

#define COMBINE_THREADS 256

static __global__ void
combine_kernel (float *x, int n, int D, int k, const int32_t *choice, const int32_t *slot_of, const float *scale,
                const float *y)
{
  const int d = blockIdx.x * COMBINE_THREADS + threadIdx.x;

  if (d >= D)
    return;
  for (int64_t t = blockIdx.y; t < n; t += gridDim.y)
    {
      int ex[16], sl[16], m = 0;
      /* The token's experts in ascending order (k ≤ 16: insertion). */
      for (int j = 0; j < k; j++)
        {
          const int c = choice[t * k + j];
          if (c < 0)
            continue;
          int at = m++;
          while (at > 0 && ex[at - 1] > c)
            {
              ex[at] = ex[at - 1];
              sl[at] = sl[at - 1];
              at--;
            }
          ex[at] = c;
          sl[at] = slot_of[t * k + j];
        }
      float acc = x[t * D + d];
      for (int j = 0; j < m; j++)
        acc = __fadd_rn (acc, __fmul_rn (scale[sl[j]], y[(int64_t) sl[j] * D + d]));
      x[t * D + d] = acc;
    }
}

extern "C" cudaError_t
um_cuda_moe_combine (float *x, int n, int d_model, int k, const UmCudaMoeWork *w, cudaStream_t stream)
{
  if (n <= 0 || d_model <= 0)
    return cudaSuccess;
  if (x == NULL || w == NULL || k <= 0 || k > 16)
    return cudaErrorInvalidValue;
  const dim3 grid ((unsigned int) ((d_model + COMBINE_THREADS - 1) / COMBINE_THREADS),
                   (unsigned int) (n < 65535 ? n : 65535));
  UM_LAUNCH ((combine_kernel), grid, COMBINE_THREADS, 0, stream, x, n, d_model, k, (const int32_t *) w->choice,
             (const int32_t *) w->slot_of, (const float *) w->slot_scale, (const float *) w->y);
  return cudaGetLastError ();
}

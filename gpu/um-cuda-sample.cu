/* um-cuda-sample.cu — choosing each row's token and confidence on the GPU:
 * one block per row, the sequential rule of compute/um-choose.h read as
 * reductions (see the order-free reading there). */
#include "um-cuda-sample.h"

#include <cuda_runtime.h>

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "um-cuda-launch.h"

/* A power of two: the reductions halve it. */
#define CHOOSE_THREADS 256

__global__ void __launch_bounds__ (CHOOSE_THREADS)
choose_kernel (const float *__restrict__ logits, int n, int vocab, UmChooseRule rule,
               const int32_t *__restrict__ positions, int32_t *__restrict__ out_ids, double *__restrict__ out_conf)
{
  __shared__ double s_val[CHOOSE_THREADS];
  __shared__ int32_t s_idx[CHOOSE_THREADS];
  __shared__ int32_t s_nan[CHOOSE_THREADS];
  const int row = blockIdx.x, t = threadIdx.x;
  const float *cond = logits + (size_t) row * vocab;
  const float *un = rule.cfg_scale > 0.0 ? logits + (size_t) (n + row) * vocab : NULL;
  const float scale = um_choose_cfg_factor (&rule);
  const int32_t pos = positions[row];
  double best_key = -INFINITY, m = -INFINITY, sum = 0.0, mx;
  int32_t best_idx = INT32_MAX, last_nan = -1, best, nan_last;

  /* 1. x0, and where the confidence logits' last NaN is (each thread's v
   *    only grow, so its last one is its largest). */
  for (int v = t; v < vocab; v += CHOOSE_THREADS)
    {
      const float val = um_choose_value (cond, un, scale, v);
      const double key = um_choose_key (&rule, um_choose_pick_logit (&rule, val, v), pos, v);
      if (um_choose_better (key, v, best_key, best_idx))
        {
          best_key = key;
          best_idx = v;
        }
      if (isnan (um_choose_conf_logit (&rule, val, v)))
        last_nan = v;
    }
  s_val[t] = best_key;
  s_idx[t] = best_idx;
  s_nan[t] = last_nan;
  __syncthreads ();
  for (int half = CHOOSE_THREADS / 2; half > 0; half >>= 1)
    {
      if (t < half)
        {
          if (um_choose_better (s_val[t + half], s_idx[t + half], s_val[t], s_idx[t]))
            {
              s_val[t] = s_val[t + half];
              s_idx[t] = s_idx[t + half];
            }
          s_nan[t] = s_nan[t + half] > s_nan[t] ? s_nan[t + half] : s_nan[t];
        }
      __syncthreads ();
    }
  best = s_idx[0];
  nan_last = s_nan[0];
  /* The scan starts at 0 and never leaves a NaN key. */
  if (best == INT32_MAX
      || isnan (um_choose_key (&rule, um_choose_pick_logit (&rule, um_choose_value (cond, un, scale, 0), 0), pos, 0)))
    best = 0;
  __syncthreads ();

  if (rule.remask_random)
    {
      if (t == 0)
        {
          out_ids[row] = best;
          out_conf[row] = um_choose_random_conf (&rule, pos);
        }
      return;
    }

  /* 2. The CPU's MAX restarts after a NaN: the maximum after the last one
   *    (NaN when the row ends with one, so the confidence is 0). */
  for (int v = nan_last + 1 + t; v < vocab; v += CHOOSE_THREADS)
    {
      const double l = (double) um_choose_conf_logit (&rule, um_choose_value (cond, un, scale, v), v);
      m = m > l ? m : l;
    }
  s_val[t] = m;
  __syncthreads ();
  for (int half = CHOOSE_THREADS / 2; half > 0; half >>= 1)
    {
      if (t < half)
        s_val[t] = s_val[t] > s_val[t + half] ? s_val[t] : s_val[t + half];
      __syncthreads ();
    }
  mx = nan_last == vocab - 1 ? (double) NAN : s_val[0];
  __syncthreads ();
  if (!isfinite (mx))
    {
      if (t == 0)
        {
          out_ids[row] = best;
          out_conf[row] = 0.0;
        }
      return;
    }

  /* 3. The softmax's sum, as a tree: the one difference from the CPU (a NaN
   *    anywhere makes it NaN there too). */
  for (int v = t; v < vocab; v += CHOOSE_THREADS)
    sum += exp ((double) um_choose_conf_logit (&rule, um_choose_value (cond, un, scale, v), v) - mx);
  s_val[t] = sum;
  __syncthreads ();
  for (int half = CHOOSE_THREADS / 2; half > 0; half >>= 1)
    {
      if (t < half)
        s_val[t] += s_val[t + half];
      __syncthreads ();
    }
  if (t == 0)
    {
      out_ids[row] = best;
      out_conf[row] = exp ((double) um_choose_conf_logit (&rule, um_choose_value (cond, un, scale, best), best) - mx)
                      / s_val[0];
    }
}

extern "C" cudaError_t
um_cuda_choose (const float *logits, int rows, int vocab, const UmChooseRule *rule, const int32_t *positions,
                int32_t *out_ids, double *out_conf, cudaStream_t stream)
{
  if (rows <= 0)
    return cudaSuccess;
  if (vocab <= 0 || logits == NULL || rule == NULL || positions == NULL || out_ids == NULL || out_conf == NULL)
    return cudaErrorInvalidValue;
  UM_LAUNCH ((choose_kernel), rows, CHOOSE_THREADS, 0, stream, logits, rows, vocab, *rule, positions, out_ids,
             out_conf);
  return cudaGetLastError ();
}

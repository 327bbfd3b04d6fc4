/* um-choose.h — how one row of logits becomes a token (x0) and its
 * confidence, following generate.py of the LLaDA reference step by step.
 *
 * um_choose_row () is the definition: a sequential scan, what the CPU
 * sampler runs. The CUDA kernel (gpu/um-cuda-sample.cu) reduces in
 * parallel with the same pieces (plain C, __host__ __device__ under nvcc)
 * and the order-free reading of that scan given below, so both take the
 * same draws and apply the −inf rules in the same order:
 *
 *  - x0: 0 if key(0) is NaN (the scan starts there and nothing compares
 *    greater than NaN); otherwise the lowest index of the largest non-NaN
 *    key (a strict > never moves to a later equal key or to a NaN);
 *  - confidence (low_confidence remasking): mx = MAX over the confidence
 *    logits, where MAX (a, b) = a > b ? a : b restarts after a NaN, so mx
 *    is the maximum after the last NaN (NaN if the row ends with one);
 *    0 if mx is not finite, NaN if the row has a NaN (the sum is NaN),
 *    else exp(l[x0] − mx) / Σ exp(l − mx) in double. Only that sum's
 *    order differs on the GPU (a tree, not left to right).
 */
#pragma once

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "um-rng.h"

/* The host emulation (tests/cuda-emu) defines __CUDACC__ for g++. */
#if defined (__CUDACC__) && !defined (UM_CUDA_EMU)
#define UM_CHOOSE_FN static inline __host__ __device__
#else
#define UM_CHOOSE_FN static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _UmChooseRule UmChooseRule;

struct _UmChooseRule {
  uint64_t seed;
  uint64_t step;                    /* the global step: the noise's counter */
  double   temperature;             /* 0: argmax; > 0: Gumbel-max */
  /* > 0: classifier-free guidance. The logits come as n conditional rows,
   * then the n unconditional ones; row i is chosen from
   * un + (cfg_scale + 1)(cond − un), in float. */
  double   cfg_scale;
  int32_t  eos_id, eot_id;          /* < 0: the model has none */
  int32_t  logits_eos_inf;          /* EOS at −inf before choosing */
  int32_t  confidence_eos_eot_inf;  /* EOT (and EOS at temperature 0) at −inf for the confidence */
  int32_t  remask_random;           /* the confidence is a uniform draw */
  /* The confidence is p of x0 under softmax (l / T) at T > 0 (LLaDA 2.x's
   * sampler), not under softmax (l) as LLaDA's. */
  int32_t  conf_tempered;
};

/* The guided logit, in float as the sampler always computed it. Explicit
 * roundings on the GPU, so nvcc fuses nothing into an FMA (the host is
 * built as ISO C, without contraction). */
UM_CHOOSE_FN float
um_choose_cfg (float cond, float un, float scale)
{
#ifdef __CUDA_ARCH__
  return __fadd_rn (un, __fmul_rn (scale, __fsub_rn (cond, un)));
#else
  return un + scale * (cond - un);
#endif
}

UM_CHOOSE_FN float
um_choose_cfg_factor (const UmChooseRule *r)
{
  return (float) (r->cfg_scale + 1.0);
}

/* The logit x0 is chosen from. */
UM_CHOOSE_FN float
um_choose_pick_logit (const UmChooseRule *r, float l, int32_t v)
{
  return r->logits_eos_inf && r->eos_id >= 0 && v == r->eos_id ? -INFINITY : l;
}

/* The logit the confidence is computed from: the reference writes −inf into
 * the noisy logits for EOS and into the logits for EOT; at temperature 0
 * both are the same tensor. */
UM_CHOOSE_FN float
um_choose_conf_logit (const UmChooseRule *r, float l, int32_t v)
{
  l = um_choose_pick_logit (r, l, v);
  if (r->conf_tempered && r->temperature > 0.0)
    l = l / (float) r->temperature;
  if (r->confidence_eos_eot_inf
      && ((r->eot_id >= 0 && v == r->eot_id) || (r->temperature == 0.0 && r->eos_id >= 0 && v == r->eos_id)))
    return -INFINITY;
  return l;
}

/* What x0 maximises: the logit, or at temperature T > 0
 * exp(l) / (−log u)^T in double, as add_gumbel_noise does, u drawn per
 * (step, position, token). */
UM_CHOOSE_FN double
um_choose_key (const UmChooseRule *r, float l, int32_t position, int32_t v)
{
  uint64_t key;
  double u;

  if (r->temperature == 0.0)
    return (double) l;
  key = (r->step << 32) ^ (uint32_t) position;
  u = um_rng_uniform (r->seed, UM_RNG_STREAM_GUMBEL, key, (uint64_t) v);
  return exp ((double) l) / pow (-log (u), r->temperature);
}

/* Does (key, v) beat (bkey, bv)? Higher key, lower index on ties, never a
 * NaN: starting from (−inf, INT32_MAX) this gives the scan's x0 except when
 * key(0) is NaN, which the caller checks. */
UM_CHOOSE_FN int
um_choose_better (double key, int32_t v, double bkey, int32_t bv)
{
  return key > bkey || (key == bkey && v < bv);
}

/* The random remasking score of @position. */
UM_CHOOSE_FN double
um_choose_random_conf (const UmChooseRule *r, int32_t position)
{
  return um_rng_uniform (r->seed, UM_RNG_STREAM_RANDOM, r->step, (uint64_t) position);
}

/* The value of token @v: @cond, or guided by @un (NULL without guidance). */
UM_CHOOSE_FN float
um_choose_value (const float *cond, const float *un, float scale, int v)
{
  return un != NULL ? um_choose_cfg (cond[v], un[v], scale) : cond[v];
}

/* The sequential definition (the CPU sampler's, unchanged bit for bit). */
UM_CHOOSE_FN void
um_choose_row (const UmChooseRule *r,
               const float        *cond,
               const float        *un,
               int                 V,
               int32_t             position,
               int32_t            *out_id,
               double             *out_conf)
{
  const float scale = um_choose_cfg_factor (r);
  int32_t best = 0;
  double best_key = 0.0, mx = -INFINITY, sum = 0.0;

  for (int v = 0; v < V; v++)
    {
      float l = um_choose_pick_logit (r, um_choose_value (cond, un, scale, v), v);
      double k = um_choose_key (r, l, position, v);
      if (v == 0 || k > best_key)
        {
          best = v;
          best_key = k;
        }
    }
  *out_id = best;

  if (r->remask_random)
    {
      *out_conf = um_choose_random_conf (r, position);
      return;
    }
  for (int v = 0; v < V; v++)
    {
      double l = (double) um_choose_conf_logit (r, um_choose_value (cond, un, scale, v), v);
      mx = mx > l ? mx : l;
    }
  if (!isfinite (mx))
    {
      *out_conf = 0.0;
      return;
    }
  for (int v = 0; v < V; v++)
    sum += exp ((double) um_choose_conf_logit (r, um_choose_value (cond, un, scale, v), v) - mx);
  *out_conf = exp ((double) um_choose_conf_logit (r, um_choose_value (cond, un, scale, best), best) - mx) / sum;
}

#ifndef __CUDACC__
/* um_choose_row () over @n rows of @logits (2n with guidance: the n
 * conditional rows, then the n unconditional ones), row i at positions[i];
 * rows in parallel (OpenMP). */
void um_choose_rows (const float        *logits,
                     int                 n,
                     int                 vocab,
                     const UmChooseRule *rule,
                     const int32_t      *positions,
                     int32_t            *out_ids,
                     double             *out_conf);
#endif

#ifdef __cplusplus
}
#endif

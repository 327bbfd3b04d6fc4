/* um-rng.h — the counter-based noise every random choice of the engine
 * uses. The same (seed, stream, a, b) always gives the same number,
 * whatever rows are computed, in which order, or on which backend, so runs
 * are reproducible on any thread count; the CUDA sampler uses these same
 * functions (they are plain integer and double arithmetic; stdint only, so
 * nvcc needs no GLib). */
#pragma once

#include <stdint.h>

/* The host emulation (tests/cuda-emu) defines __CUDACC__ for g++. */
#if defined (__CUDACC__) && !defined (UM_CUDA_EMU)
#define UM_RNG_FN static inline __host__ __device__
#else
#define UM_RNG_FN static inline
#endif

/* splitmix64's finaliser. */
UM_RNG_FN uint64_t
um_rng_mix64 (uint64_t z)
{
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in (0, 1), never 0 so −log(u) is finite. */
UM_RNG_FN double
um_rng_uniform (uint64_t seed, uint64_t stream, uint64_t a, uint64_t b)
{
  uint64_t z = um_rng_mix64 (um_rng_mix64 (um_rng_mix64 (seed ^ stream) ^ a) ^ b);
  return ((double) (z >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

#define UM_RNG_STREAM_GUMBEL 0x67756d62656cull   /* "gumbel" */
#define UM_RNG_STREAM_RANDOM 0x72616e646f6dull   /* "random" */
#define UM_RNG_STREAM_SCORE  0x73636f7265ull     /* "score" */
/* Dream's and RND1's schedules: a token drawn from its distribution, the
 * origin rule's per-position coin, alg_temp's positions. */
#define UM_RNG_STREAM_TOKEN  0x746f6b656eull     /* "token" */
#define UM_RNG_STREAM_ORIGIN 0x6f726967696eull   /* "origin" */
#define UM_RNG_STREAM_ALG    0x616c67ull         /* "alg" */

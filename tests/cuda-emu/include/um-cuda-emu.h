/* um-cuda-emu.h — the device side of the host emulation of CUDA
 * (tests/cuda-emu): enough of the CUDA C++ dialect that the gpu/ .cu files build with
 * g++ and run on the CPU.
 *
 * A launch runs the grid's blocks one after another (so `__shared__`, which
 * is `static` here, is private to the running block); a block's threads are
 * fibers on the calling thread, each running the kernel until it reaches a
 * barrier (__syncthreads, a warp shuffle) or returns. A barrier releases
 * when every live thread of the block (or warp) has reached it; threads
 * waiting at different __syncthreads (divergence), or a barrier that can
 * never release, fail the launch; odd blocks run their threads last to
 * first, so a missing barrier shows as wrong values. Fibers rather than
 * host threads: deterministic, a launch costs microseconds on CI's 2 cores,
 * and no atomics or fences are needed (so those are plain operations). This
 * checks the kernels' logic, indexing and synchronisation against the C
 * references, not timing, memory ordering on real hardware, or the CUDA
 * runtime. */
#pragma once

#ifdef __cplusplus

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <tuple>
#include <utility>

#include "cuda_runtime_api.h"
#include "um-half.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__ static

struct uint3 { unsigned int x, y, z; };
struct dim3 {
  unsigned int x, y, z;
  dim3 (unsigned int a = 1, unsigned int b = 1, unsigned int c = 1) : x (a), y (b), z (c) {}
};

/* The running thread's indices: set by the scheduler before a fiber runs. */
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
static const int warpSize = 32;

/* ---- barriers and warps (um-cuda-emu.cc) ---- */
/* @file and @line name the barrier: threads of a block waiting at two
 * different __syncthreads is divergence, a kernel bug the launch reports. */
void     um_emu_syncthreads (const char *file, int line);
int      um_emu_syncthreads_reduce (int pred, int op, const char *file, int line);   /* 0 or, 1 and, 2 count */
uint64_t um_emu_warp_exchange (uint64_t value, int src_lane, int width);
unsigned um_emu_warp_ballot (int pred);
void    *um_emu_dynamic_shared (void);
void     um_emu_run (dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream, std::function<void ()> body);
/* Runs @work now, or records it when @stream is capturing (um-cuda-emu.cc):
 * every queued piece of work goes through here. */
cudaError_t um_emu_enqueue (cudaStream_t stream, std::function<void ()> work);

/* Macros, so each barrier is known by its place in the source. */
#define __syncthreads() um_emu_syncthreads (__FILE__, __LINE__)
#define __syncthreads_or(p) um_emu_syncthreads_reduce ((p), 0, __FILE__, __LINE__)
#define __syncthreads_and(p) um_emu_syncthreads_reduce ((p), 1, __FILE__, __LINE__)
#define __syncthreads_count(p) um_emu_syncthreads_reduce ((p), 2, __FILE__, __LINE__)
static inline void __syncwarp (unsigned = 0xffffffffu) { (void) um_emu_warp_exchange (0, 0, 32); }

static inline unsigned
um_emu_lane (void)
{
  return (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32u;
}

template <typename T>
static inline uint64_t um_emu_pack (T v) { uint64_t u = 0; memcpy (&u, &v, sizeof v); return u; }
template <typename T>
static inline T um_emu_unpack (uint64_t u) { T v; memcpy (&v, &u, sizeof v); return v; }

/* Shuffles within segments of @width lanes, as CUDA defines them. */
template <typename T>
static inline T
__shfl_sync (unsigned, T v, int src, int width = 32)
{
  int lane = (int) um_emu_lane ();
  int base = lane & ~(width - 1);
  return um_emu_unpack<T> (um_emu_warp_exchange (um_emu_pack (v), base + (src & (width - 1)), width));
}
template <typename T>
static inline T
__shfl_xor_sync (unsigned, T v, int mask, int width = 32)
{
  int lane = (int) um_emu_lane ();
  int src = lane ^ mask;
  if (src >= ((lane & ~(width - 1)) + width))
    src = lane;
  return um_emu_unpack<T> (um_emu_warp_exchange (um_emu_pack (v), src, width));
}
template <typename T>
static inline T
__shfl_down_sync (unsigned, T v, unsigned delta, int width = 32)
{
  int lane = (int) um_emu_lane ();
  int src = lane + (int) delta;
  if (src >= ((lane & ~(width - 1)) + width))
    src = lane;
  return um_emu_unpack<T> (um_emu_warp_exchange (um_emu_pack (v), src, width));
}
template <typename T>
static inline T
__shfl_up_sync (unsigned, T v, unsigned delta, int width = 32)
{
  int lane = (int) um_emu_lane ();
  int src = lane - (int) delta;
  if (src < (lane & ~(width - 1)))
    src = lane;
  return um_emu_unpack<T> (um_emu_warp_exchange (um_emu_pack (v), src, width));
}
static inline unsigned __ballot_sync (unsigned, int p) { return um_emu_warp_ballot (p); }
static inline int __any_sync (unsigned, int p) { return um_emu_warp_ballot (p) != 0; }
static inline int __all_sync (unsigned m, int p) { return !__any_sync (m, !p); }
static inline unsigned __activemask (void) { return 0xffffffffu; }

/* ---- atomics: fibers never interleave inside one, so plain updates ---- */
template <typename T> static inline T atomicAdd (T *p, T v) { T o = *p; *p = o + v; return o; }
template <typename T> static inline T atomicMax (T *p, T v) { T o = *p; *p = o > v ? o : v; return o; }
template <typename T> static inline T atomicMin (T *p, T v) { T o = *p; *p = o < v ? o : v; return o; }
template <typename T> static inline T atomicExch (T *p, T v) { T o = *p; *p = v; return o; }
template <typename T> static inline T atomicOr (T *p, T v) { T o = *p; *p = o | v; return o; }
template <typename T> static inline T atomicCAS (T *p, T c, T v) { T o = *p; if (o == c) *p = v; return o; }

/* ---- arithmetic: round-to-nearest intrinsics are the plain IEEE operations
 * on the host (the emulated build is compiled without contraction) ---- */
static inline float __fmul_rn (float a, float b) { return a * b; }
static inline float __fadd_rn (float a, float b) { return a + b; }
static inline float __fsub_rn (float a, float b) { return a - b; }
static inline float __fdiv_rn (float a, float b) { return a / b; }
static inline float __fmaf_rn (float a, float b, float c) { return fmaf (a, b, c); }
static inline double __dmul_rn (double a, double b) { return a * b; }
static inline double __dadd_rn (double a, double b) { return a + b; }
/* glibc declares __expf and __logf itself: map the names instead. */
static inline float um_emu_expf (float x) { return expf (x); }
static inline float um_emu_logf (float x) { return logf (x); }
#define __expf um_emu_expf
#define __logf um_emu_logf
static inline float __fdividef (float a, float b) { return a / b; }
static inline float rsqrtf (float x) { return 1.0f / sqrtf (x); }
static inline double rsqrt (double x) { return 1.0 / sqrt (x); }
static inline float __saturatef (float x) { return x < 0.f ? 0.f : x > 1.f ? 1.f : x; }
static inline float __uint_as_float (unsigned u) { float f; memcpy (&f, &u, 4); return f; }
static inline float __int_as_float (int u) { float f; memcpy (&f, &u, 4); return f; }
static inline unsigned __float_as_uint (float f) { unsigned u; memcpy (&u, &f, 4); return u; }
static inline int __float_as_int (float f) { int u; memcpy (&u, &f, 4); return u; }
static inline double __longlong_as_double (long long u) { double d; memcpy (&d, &u, 8); return d; }
static inline long long __double_as_longlong (double d) { long long u; memcpy (&u, &d, 8); return u; }
template <typename T> static inline T __ldg (const T *p) { return *p; }
static inline float __frcp_rn (float x) { return 1.0f / x; }
static inline float __fsqrt_rn (float x) { return sqrtf (x); }
static inline float __frsqrt_rn (float x) { return 1.0f / sqrtf (x); }
static inline float um_emu_powf (float a, float b) { return powf (a, b); }
static inline float um_emu_log2f (float x) { return log2f (x); }
static inline float um_emu_sinf (float x) { return sinf (x); }
static inline float um_emu_cosf (float x) { return cosf (x); }
#define __powf um_emu_powf
#define __log2f um_emu_log2f
#define __sinf um_emu_sinf
#define __cosf um_emu_cosf
static inline int __float2int_rn (float x) { return (int) nearbyintf (x); }
static inline int __float2int_rz (float x) { return (int) x; }
static inline int __float2int_rd (float x) { return (int) floorf (x); }
static inline float __int2float_rn (int x) { return (float) x; }
static inline float __uint2float_rn (unsigned x) { return (float) x; }
static inline int __popc (unsigned x) { return __builtin_popcount (x); }
static inline int __popcll (unsigned long long x) { return __builtin_popcountll (x); }
static inline int __clz (int x) { return x == 0 ? 32 : __builtin_clz ((unsigned) x); }
static inline int __ffs (int x) { return __builtin_ffs (x); }
static inline unsigned __brev (unsigned x)
{
  unsigned r = 0;
  for (int i = 0; i < 32; i++, x >>= 1)
    r = (r << 1) | (x & 1u);
  return r;
}
static inline unsigned __umulhi (unsigned a, unsigned b) { return (unsigned) (((unsigned long long) a * b) >> 32); }
/* CUDA's overloaded device min/max (g++ has only std::min/max). */
static inline int min (int a, int b) { return a < b ? a : b; }
static inline int max (int a, int b) { return a > b ? a : b; }
static inline unsigned min (unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max (unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long min (long long a, long long b) { return a < b ? a : b; }
static inline long long max (long long a, long long b) { return a > b ? a : b; }
static inline float min (float a, float b) { return fminf (a, b); }
static inline float max (float a, float b) { return fmaxf (a, b); }
/* Blocks run one at a time and fibers switch only at barriers, so every
 * write is already visible: fences are no-ops here. */
static inline void __threadfence (void) {}
static inline void __threadfence_block (void) {}

/* ---- vector types ---- */
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
struct int2 { int x, y; };
struct int4 { int x, y, z, w; };
struct uint2 { unsigned x, y; };
struct uint4 { unsigned x, y, z, w; };
static inline float2 make_float2 (float x, float y) { return { x, y }; }
static inline float4 make_float4 (float x, float y, float z, float w) { return { x, y, z, w }; }
static inline int2 make_int2 (int x, int y) { return { x, y }; }
static inline int4 make_int4 (int x, int y, int z, int w) { return { x, y, z, w }; }
static inline uint2 make_uint2 (unsigned x, unsigned y) { return { x, y }; }
static inline uint4 make_uint4 (unsigned x, unsigned y, unsigned z, unsigned w) { return { x, y, z, w }; }

/* ---- half types ---- */
struct __half { unsigned short x; };
struct __nv_bfloat16 { unsigned short x; };
static inline float __half2float (__half h) { return um_f16_to_f32 (h.x); }
static inline __half __float2half_rn (float f) { __half h; h.x = um_f32_to_f16 (f); return h; }
static inline __half __float2half (float f) { return __float2half_rn (f); }
static inline __half __ushort_as_half (unsigned short u) { __half h; h.x = u; return h; }
static inline unsigned short __half_as_ushort (__half h) { return h.x; }
static inline float __bfloat162float (__nv_bfloat16 h) { return um_bf16_to_f32 (h.x); }
static inline __nv_bfloat16 __float2bfloat16_rn (float f) { __nv_bfloat16 h; h.x = um_f32_to_bf16 (f); return h; }
static inline __nv_bfloat16 __float2bfloat16 (float f) { return __float2bfloat16_rn (f); }
static inline __nv_bfloat16 __ushort_as_bfloat16 (unsigned short u) { __nv_bfloat16 h; h.x = u; return h; }
static inline unsigned short __bfloat16_as_ushort (__nv_bfloat16 h) { return h.x; }
/* Half arithmetic as the GPU does it: in float, rounded once to half. */
static inline __half __hadd (__half a, __half b) { return __float2half_rn (__half2float (a) + __half2float (b)); }
static inline __half __hmul (__half a, __half b) { return __float2half_rn (__half2float (a) * __half2float (b)); }
static inline __half __hfma (__half a, __half b, __half c)
{
  return __float2half_rn (fmaf (__half2float (a), __half2float (b), __half2float (c)));
}
struct __half2 { __half x, y; };
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
static inline __half2 __floats2half2_rn (float a, float b) { return { __float2half_rn (a), __float2half_rn (b) }; }
static inline __half2 __float22half2_rn (float2 f) { return __floats2half2_rn (f.x, f.y); }
static inline float2 __half22float2 (__half2 h) { return { __half2float (h.x), __half2float (h.y) }; }
static inline float __low2float (__half2 h) { return __half2float (h.x); }
static inline float __high2float (__half2 h) { return __half2float (h.y); }
static inline __nv_bfloat162 __floats2bfloat162_rn (float a, float b)
{
  return { __float2bfloat16_rn (a), __float2bfloat16_rn (b) };
}
static inline float2 __bfloat1622float2 (__nv_bfloat162 h) { return { __bfloat162float (h.x), __bfloat162float (h.y) }; }

/* ---- launches ---- */
static inline dim3 um_emu_dim3 (dim3 d) { return d; }
static inline dim3 um_emu_dim3 (unsigned int d) { return dim3 (d); }
static inline dim3 um_emu_dim3 (int d) { return dim3 ((unsigned int) d); }
static inline dim3 um_emu_dim3 (long d) { return dim3 ((unsigned int) d); }

template <typename... P, typename G, typename B, typename... A>
static inline void
um_emu_launch (void (*kernel) (P...), G grid, B block, size_t shared_bytes, cudaStream_t stream, A... args)
{
  /* By value: a recorded launch runs after this returns. */
  std::tuple<P...> params (static_cast<P> (args)...);
  um_emu_run (um_emu_dim3 (grid), um_emu_dim3 (block), shared_bytes, stream,
              [kernel, params] () { std::apply (kernel, params); });
}

#endif /* __cplusplus */

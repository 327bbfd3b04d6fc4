/* test-cuda-emu-kernels.cc — the host emulation of CUDA (tests/cuda-emu)
 * checked against itself, and gpu/'s kernels on cases the kernel self-test
 * (gpu/um-cuda-selftest.cu) leaves out.
 *
 * This runs on the CPU in every CI run, with no GPU and no CUDA toolkit: it
 * checks kernel LOGIC (indexing, tile and warp edges, synchronisation as the
 * emulation models it), NOT timing, and NOT the real CUDA runtime, driver or
 * cuBLAS. Exits 0 when every check passes, 1 otherwise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "cublas_v2.h"
#include "cuda_runtime_api.h"
#include "um-cuda-kernels.h"
#include "um-cuda-launch.h"
#include "um-quant.h"

static int n_checks, n_fail;

static void
expect (bool ok, const char *what)
{
  n_checks++;
  if (!ok)
    {
      n_fail++;
      fprintf (stderr, "FAIL: %s\n", what);
    }
}

static uint32_t rng_state = 12345;

static float
rng_float (float lo, float hi)
{
  rng_state = rng_state * 1664525u + 1013904223u;
  return lo + (hi - lo) * (float) (rng_state >> 8) / (float) (1u << 24);
}

template <typename T>
static T *
to_device (const std::vector<T> &h)
{
  void *d = NULL;
  if (cudaMalloc (&d, h.size () * sizeof (T) + 1) != cudaSuccess)
    abort ();
  cudaMemcpy (d, h.data (), h.size () * sizeof (T), cudaMemcpyHostToDevice);
  return (T *) d;
}

template <typename T>
static std::vector<T>
from_device (const T *d, size_t n)
{
  std::vector<T> h (n);
  cudaMemcpy (h.data (), d, n * sizeof (T), cudaMemcpyDeviceToHost);
  return h;
}

/* ---- the emulation's own semantics, on small kernels ---- */

static __global__ void
k_shuffles (int *out)
{
  const int lane = (int) (threadIdx.x % 32), t = (int) threadIdx.x;
  out[t * 8 + 0] = __shfl_xor_sync (0xffffffffu, t, 1);
  out[t * 8 + 1] = __shfl_xor_sync (0xffffffffu, t, 16, 16);   /* earlier group read, later not */
  out[t * 8 + 2] = __shfl_down_sync (0xffffffffu, t, 3, 8);
  out[t * 8 + 3] = __shfl_up_sync (0xffffffffu, t, 2);
  out[t * 8 + 4] = __shfl_sync (0xffffffffu, t, 5, 16);
  out[t * 8 + 5] = (int) __ballot_sync (0xffffffffu, lane % 3 == 0);
  out[t * 8 + 6] = __any_sync (0xffffffffu, lane == 31) * 2 + __all_sync (0xffffffffu, lane < 31);
  out[t * 8 + 7] = __syncthreads_count (t % 5 == 0) * 4 + __syncthreads_or (t == 40) * 2
                   + __syncthreads_and (t < 64);
}

static void
test_shuffles (void)
{
  const int n = 64;
  int *d = NULL;
  cudaMalloc ((void **) &d, n * 8 * sizeof (int));
  UM_LAUNCH (k_shuffles, 1, n, 0, 0, d);
  expect (cudaGetLastError () == cudaSuccess, "emu: shuffle kernel runs");
  std::vector<int> o = from_device (d, n * 8);
  bool ok[8] = { true, true, true, true, true, true, true, true };
  unsigned ballot = 0;
  for (int l = 0; l < 32; l += 3)
    ballot |= 1u << l;
  for (int t = 0; t < n; t++)
    {
      int lane = t % 32, w0 = t - lane;
      int seg8 = lane & ~7, seg16 = lane & ~15;
      ok[0] &= o[t * 8 + 0] == (t ^ 1);
      ok[1] &= o[t * 8 + 1] == (lane < 16 ? t : t - 16);
      ok[2] &= o[t * 8 + 2] == (lane + 3 < seg8 + 8 ? t + 3 : t);
      ok[3] &= o[t * 8 + 3] == (lane >= 2 ? t - 2 : t);
      ok[4] &= o[t * 8 + 4] == w0 + seg16 + 5;
      ok[5] &= (unsigned) o[t * 8 + 5] == ballot;
      ok[6] &= o[t * 8 + 6] == 2;
      ok[7] &= o[t * 8 + 7] == 13 * 4 + 2 + 1;
    }
  const char *names[8] = { "emu: shfl_xor", "emu: shfl_xor width 16 (earlier groups only)", "emu: shfl_down width 8",
                           "emu: shfl_up", "emu: shfl width 16", "emu: ballot", "emu: any/all",
                           "emu: syncthreads_count/or/and" };
  for (int i = 0; i < 8; i++)
    expect (ok[i], names[i]);
  cudaFree (d);
}

/* 2-D blocks and grid, dynamic shared memory, early return, atomics. */
static __global__ void
k_indices (int n, int *seen, int *sum)
{
  UM_DYNAMIC_SHARED (int, tile);
  const int tid = (int) (threadIdx.x + blockDim.x * threadIdx.y);
  const int block = (int) (blockIdx.x + gridDim.x * blockIdx.y);
  const int i = block * (int) (blockDim.x * blockDim.y) + tid;
  if (i >= n)
    return;   /* must drop out of the barrier below */
  tile[tid] = i;
  __syncthreads ();
  /* Reads a neighbour's write: only right after the barrier. */
  const int nb = (tid + 1) % (int) (blockDim.x * blockDim.y);
  const int other = block * (int) (blockDim.x * blockDim.y) + nb < n ? tile[nb] : -1;
  seen[i] = other;
  atomicAdd (sum, 1);
}

static void
test_indices (void)
{
  const int n = 1000;   /* 6 blocks of 7×24 = 168 threads, ragged: partial warps, early exits */
  int *d_seen = NULL, *d_sum = NULL;
  cudaMalloc ((void **) &d_seen, n * sizeof (int));
  cudaMalloc ((void **) &d_sum, sizeof (int));
  cudaMemset (d_sum, 0, sizeof (int));
  UM_LAUNCH (k_indices, dim3 (3, 2), dim3 (7, 24), 168 * sizeof (int), 0, n, d_seen, d_sum);
  expect (cudaGetLastError () == cudaSuccess, "emu: 2-D launch with early returns runs");
  std::vector<int> seen = from_device (d_seen, n), sum = from_device (d_sum, 1);
  bool ok = true;
  for (int i = 0; i < n; i++)
    {
      int block = i / 168, tid = i % 168, nb = (tid + 1) % 168, j = block * 168 + nb;
      ok &= seen[i] == (j < n ? j : -1);
    }
  expect (ok, "emu: 2-D indices and shared memory after a barrier");
  expect (sum[0] == n, "emu: atomicAdd from every live thread");
  cudaFree (d_seen);
  cudaFree (d_sum);
}

static __global__ void
k_divergent (int *out)
{
  if (threadIdx.x < 16)
    __syncthreads ();   /* half the block never arrives: a kernel bug */
  out[threadIdx.x] = 1;
  __syncthreads ();
}

static __global__ void
k_partial_warp_shuffle (int *out)
{
  /* 48 threads: warp 1 has 16 lanes; xor 16 reads a lane that does not exist. */
  out[threadIdx.x] = __shfl_xor_sync (0xffffffffu, (int) threadIdx.x, 16);
}

static __global__ void
k_missing_barrier (int *out)
{
  UM_DYNAMIC_SHARED (int, tile);
  const int t = (int) threadIdx.x, n = (int) blockDim.x;
  tile[t] = t;
  /* No __syncthreads here: a race. The sum in unsigned arithmetic, since
   * it may add two garbage values (no overflow for the sanitizers). */
  out[blockIdx.x * n + t] = (int) ((unsigned) tile[(t + 1) % n] + (unsigned) tile[(t + n - 1) % n]);
}

static void
test_failures (void)
{
  int *d = NULL;
  cudaMalloc ((void **) &d, 64 * sizeof (int));
  UM_LAUNCH (k_divergent, 1, 64, 0, 0, d);
  expect (cudaGetLastError () == cudaErrorLaunchFailure, "emu: a barrier only some threads reach fails the launch");
  UM_LAUNCH (k_partial_warp_shuffle, 1, 48, 0, 0, d);
  expect (cudaGetLastError () == cudaErrorLaunchFailure, "emu: a shuffle from a missing lane fails the launch");
  UM_LAUNCH (k_partial_warp_shuffle, 1, 1025, 0, 0, d);
  expect (cudaGetLastError () == cudaErrorInvalidConfiguration, "emu: 1025 threads per block refused");
  expect (cudaGetLastError () == cudaSuccess, "emu: cudaGetLastError clears the error");
  /* Odd blocks run their threads in the other order, so one of two blocks
   * reads a neighbour's slot before it is written. */
  UM_LAUNCH (k_missing_barrier, 2, 32, 32 * sizeof (int), 0, d);
  {
    std::vector<int> o = from_device (d, 64);
    bool stale = false;
    for (int b = 0; b < 2; b++)
      for (int t = 0; t < 32; t++)
        stale = stale || o[b * 32 + t] != (t + 1) % 32 + (t + 31) % 32;
    expect (stale, "emu: a missing __syncthreads gives wrong values");
  }
  cudaFree (d);
}

static void
test_runtime (void)
{
  size_t free_b = 0, total_b = 0, free2 = 0;
  void *p = NULL, *h = NULL;
  cudaDeviceProp prop;
  cudaPointerAttributes attr;
  cudaEvent_t e0, e1;
  float ms = -1;
  int n = 0;

  expect (cudaGetDeviceCount (&n) == cudaSuccess && n == 1, "rt: one device");
  expect (cudaGetDeviceProperties (&prop, 0) == cudaSuccess && strcmp (prop.name, "Unmask host emulation") == 0
          && prop.major == 9 && prop.minor == 0, "rt: device properties");
  cudaMemGetInfo (&free_b, &total_b);
  expect (total_b == (size_t) 16 << 30, "rt: a 16 GiB device");
  cudaMalloc (&p, 3 << 20);
  cudaMemGetInfo (&free2, &total_b);
  expect (free_b - free2 == (size_t) 3 << 20, "rt: cudaMemGetInfo counts allocations");
  expect (cudaPointerGetAttributes (&attr, (char *) p + 100) == cudaSuccess && attr.type == cudaMemoryTypeDevice,
          "rt: device pointer attributes");
  cudaHostAlloc (&h, 1000, cudaHostAllocPortable);
  expect (cudaPointerGetAttributes (&attr, h) == cudaSuccess && attr.type == cudaMemoryTypeHost,
          "rt: pinned host pointer attributes");
  expect (cudaPointerGetAttributes (&attr, &n) == cudaSuccess && attr.type == cudaMemoryTypeUnregistered,
          "rt: pageable pointer attributes");
  cudaFreeHost (h);
  cudaFree (p);

  /* A small device: the out-of-memory path, then the default again. */
  um_emu_set_device_memory ((size_t) 1 << 20);
  p = (void *) 1;
  expect (cudaMalloc (&p, (size_t) 2 << 20) == cudaErrorMemoryAllocation && p == NULL, "rt: out of device memory");
  expect (cudaGetLastError () == cudaErrorMemoryAllocation, "rt: out of memory is the last error");
  um_emu_set_device_memory ((size_t) 16 << 30);

  cudaEventCreate (&e0);
  cudaEventCreateWithFlags (&e1, cudaEventDefault);
  cudaEventRecord (e0, 0);
  cudaEventRecord (e1, 0);
  cudaEventSynchronize (e1);
  expect (cudaEventElapsedTime (&ms, e0, e1) == cudaSuccess && ms >= 0, "rt: event timing");
  cudaEventDestroy (e0);
  cudaEventDestroy (e1);
}

/* ---- cuBLAS against a naive column-major product ---- */

static float
tf32 (float x)
{
  uint32_t u;
  memcpy (&u, &x, 4);
  u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
  memcpy (&x, &u, 4);
  return x;
}

static void
test_blas (void)
{
  cublasHandle_t h;
  const int m = 37, n = 5, k = 70, pad = 3;
  const float alpha = 0.75f, beta = -0.5f;
  const cudaDataType types[] = { CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF };

  cublasCreate_v2 (&h);
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (cudaDataType in : types)
        for (cudaDataType ct : types)
          {
            const int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
            const int lda = ar + pad, ldb = br + pad, ldc = m + pad;
            std::vector<float> A ((size_t) lda * ac), B ((size_t) ldb * bc), C ((size_t) ldc * n);
            std::vector<uint16_t> A16 (A.size ()), B16 (B.size ()), C16 (C.size ());
            for (auto &x : A)
              x = rng_float (-1, 1);
            for (auto &x : B)
              x = rng_float (-1, 1);
            for (auto &x : C)
              x = rng_float (-1, 1);
            /* The inputs as the product reads them. */
            for (size_t i = 0; i < A.size (); i++)
              {
                A16[i] = in == CUDA_R_16F ? um_f32_to_f16 (A[i]) : um_f32_to_bf16 (A[i]);
                if (in != CUDA_R_32F)
                  A[i] = in == CUDA_R_16F ? um_f16_to_f32 (A16[i]) : um_bf16_to_f32 (A16[i]);
              }
            for (size_t i = 0; i < B.size (); i++)
              {
                B16[i] = in == CUDA_R_16F ? um_f32_to_f16 (B[i]) : um_f32_to_bf16 (B[i]);
                if (in != CUDA_R_32F)
                  B[i] = in == CUDA_R_16F ? um_f16_to_f32 (B16[i]) : um_bf16_to_f32 (B16[i]);
              }
            for (size_t i = 0; i < C.size (); i++)
              {
                C16[i] = ct == CUDA_R_16F ? um_f32_to_f16 (C[i]) : um_f32_to_bf16 (C[i]);
                if (ct != CUDA_R_32F)
                  C[i] = ct == CUDA_R_16F ? um_f16_to_f32 (C16[i]) : um_bf16_to_f32 (C16[i]);
              }
            void *dA = in == CUDA_R_32F ? (void *) to_device (A) : (void *) to_device (A16);
            void *dB = in == CUDA_R_32F ? (void *) to_device (B) : (void *) to_device (B16);
            void *dC = ct == CUDA_R_32F ? (void *) to_device (C) : (void *) to_device (C16);
            um_emu_blas_reset_counts ();
            cublasStatus_t s = cublasGemmEx (h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k,
                                             &alpha, dA, in, lda, dB, in, ldb, &beta, dC, ct, ldc, CUBLAS_COMPUTE_32F,
                                             CUBLAS_GEMM_DEFAULT);
            bool ok = s == CUBLAS_STATUS_SUCCESS && um_emu_blas_calls (in, ct, CUBLAS_COMPUTE_32F) == 1;
            std::vector<float> got (C.size ());
            if (ct == CUDA_R_32F)
              got = from_device ((float *) dC, C.size ());
            else
              {
                std::vector<uint16_t> g = from_device ((uint16_t *) dC, C.size ());
                for (size_t i = 0; i < g.size (); i++)
                  got[i] = ct == CUDA_R_16F ? um_f16_to_f32 (g[i]) : um_bf16_to_f32 (g[i]);
              }
            const double tol = ct == CUDA_R_32F ? 1e-5 : ct == CUDA_R_16F ? 2e-3 : 1e-2;
            for (int j = 0; j < n; j++)
              for (int i = 0; i < ldc; i++)
                {
                  if (i >= m)
                    {
                      ok = ok && got[i + (size_t) j * ldc] == C[i + (size_t) j * ldc];   /* padding untouched */
                      continue;
                    }
                  double sum = 0;
                  for (int l = 0; l < k; l++)
                    sum += (double) A[ta ? l + (size_t) i * lda : i + (size_t) l * lda]
                           * B[tb ? j + (size_t) l * ldb : l + (size_t) j * ldb];
                  double want = alpha * sum + beta * C[i + (size_t) j * ldc];
                  ok = ok && fabs (got[i + (size_t) j * ldc] - want) <= tol * (1 + fabs (want));
                }
            char what[96];
            snprintf (what, sizeof what, "blas: GemmEx op %c%c in %d out %d", ta ? 'T' : 'N', tb ? 'T' : 'N', in, ct);
            expect (ok, what);
            cudaFree (dA);
            cudaFree (dB);
            cudaFree (dC);
          }

  /* TF32: 1 + 2^-12 is 1 to a tensor core, not to fp32 compute. */
  {
    std::vector<float> a = { 1.0f + 1.0f / 4096 }, b = { 1.0f }, c = { 0 };
    float *da = to_device (a), *db = to_device (b), *dc = to_device (c);
    const float one = 1, zero = 0;
    cublasGemmEx (h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, da, CUDA_R_32F, 1, db, CUDA_R_32F, 1, &zero, dc,
                  CUDA_R_32F, 1, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT);
    expect (from_device (dc, 1)[0] == 1.0f && tf32 (a[0]) == 1.0f, "blas: TF32 rounds the inputs");
    cublasGemmEx (h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, da, CUDA_R_32F, 1, db, CUDA_R_32F, 1, &zero, dc,
                  CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    expect (from_device (dc, 1)[0] == a[0], "blas: fp32 compute keeps them");
    expect (um_emu_blas_calls (CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32) == 1,
            "blas: the TF32 call is counted as such");
    /* cuBLAS's argument checks. */
    expect (cublasGemmEx (h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 1, 1, &one, da, CUDA_R_32F, 3, db, CUDA_R_32F, 1, &zero, dc,
                          CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE,
            "blas: lda < m refused");
    expect (cublasGemmEx (h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, -1, &one, da, CUDA_R_32F, 1, db, CUDA_R_32F, 1, &zero,
                          dc, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE,
            "blas: k < 0 refused");
    cudaFree (da);
    cudaFree (db);
    cudaFree (dc);
  }

  /* Batched, strided and by pointers: batch b = A_b · B_b. */
  {
    const int bm = 3, bn = 2, bk = 4, batch = 3;
    std::vector<float> A ((size_t) bm * bk * batch), B ((size_t) bk * bn * batch), C ((size_t) bm * bn * batch, 0);
    for (auto &x : A)
      x = rng_float (-1, 1);
    for (auto &x : B)
      x = rng_float (-1, 1);
    float *dA = to_device (A), *dB = to_device (B), *dC = to_device (C), *dC2 = to_device (C);
    const float one = 1, zero = 0;
    expect (cublasGemmStridedBatchedEx (h, CUBLAS_OP_N, CUBLAS_OP_N, bm, bn, bk, &one, dA, CUDA_R_32F, bm, bm * bk,
                                        dB, CUDA_R_32F, bk, bk * bn, &zero, dC, CUDA_R_32F, bm, bm * bn, batch,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS,
            "blas: strided batched runs");
    std::vector<const void *> pa, pb;
    std::vector<void *> pc;
    for (int b = 0; b < batch; b++)
      {
        pa.push_back (dA + b * bm * bk);
        pb.push_back (dB + b * bk * bn);
        pc.push_back (dC2 + b * bm * bn);
      }
    expect (cublasGemmBatchedEx (h, CUBLAS_OP_N, CUBLAS_OP_N, bm, bn, bk, &one, pa.data (), CUDA_R_32F, bm,
                                 pb.data (), CUDA_R_32F, bk, &zero, pc.data (), CUDA_R_32F, bm, batch,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS,
            "blas: batched runs");
    std::vector<float> g1 = from_device (dC, C.size ()), g2 = from_device (dC2, C.size ());
    bool ok = true;
    for (int b = 0; b < batch; b++)
      for (int j = 0; j < bn; j++)
        for (int i = 0; i < bm; i++)
          {
            double s = 0;
            for (int l = 0; l < bk; l++)
              s += (double) A[b * bm * bk + i + l * bm] * B[b * bk * bn + l + j * bk];
            ok = ok && fabs (g1[b * bm * bn + i + j * bm] - s) < 1e-6 && g1[b * bm * bn + i + j * bm] == g2[b * bm * bn + i + j * bm];
          }
    expect (ok, "blas: batched products");
    cudaFree (dA);
    cudaFree (dB);
    cudaFree (dC);
    cudaFree (dC2);
  }
  cublasDestroy_v2 (h);
}

/* ---- kernels: embed for every stored type, attention with GQA ---- */

static void
test_embed_all_types (void)
{
  const UmDType types[] = { UM_DTYPE_F32, UM_DTYPE_F16, UM_DTYPE_BF16, UM_DTYPE_Q8_0, UM_DTYPE_Q4_0, UM_DTYPE_Q4_1,
                            UM_DTYPE_Q5_0, UM_DTYPE_Q5_1, UM_DTYPE_Q4_K, UM_DTYPE_Q5_K, UM_DTYPE_Q6_K };
  const int64_t table_rows = 40, cols = 256 * 3;
  const std::vector<int32_t> ids = { 39, 0, 7, 7, 21, 38 };

  for (UmDType t : types)
    {
      uint64_t rb = 0;
      um_dtype_bytes (t, (uint64_t) cols, &rb);
      const int64_t row_bytes = (int64_t) rb + 6;   /* padded rows, not the packed size */
      std::vector<float> x ((size_t) cols);
      std::vector<uint8_t> tab ((size_t) (table_rows * row_bytes), 0);
      for (int64_t r = 0; r < table_rows; r++)
        {
          for (auto &v : x)
            v = rng_float (-3, 3);
          um_quant_quantize_row_ref (t, x.data (), tab.data () + r * row_bytes, cols);
        }
      uint8_t *d_tab = to_device (tab);
      int32_t *d_ids = to_device (ids);
      float *d_out = NULL;
      cudaMalloc ((void **) &d_out, ids.size () * cols * 4);
      char what[80];
      snprintf (what, sizeof what, "embed %s (bit-exact)", um_dtype_name (t));
      bool ok = um_cuda_embed (t, d_tab, row_bytes, cols, d_ids, (int) ids.size (), d_out, 0) == cudaSuccess;
      std::vector<float> got = from_device (d_out, ids.size () * cols), want ((size_t) cols);
      for (size_t i = 0; i < ids.size (); i++)
        {
          um_quant_dequantize_row_ref (t, tab.data () + ids[i] * row_bytes, want.data (), cols);
          ok = ok && memcmp (got.data () + i * cols, want.data (), (size_t) cols * 4) == 0;
        }
      expect (ok, what);
      cudaFree (d_tab);
      cudaFree (d_ids);
      cudaFree (d_out);
    }
}

/* kv_len empty: bidirectional; else row i sees the first kv_len[i] keys. */
static void
attention_case (int n_seq, int L, int H, int Hkv, int hd, const std::vector<int32_t> &q_seq,
                const std::vector<int32_t> &kv_len = {})
{
  const int nq = (int) q_seq.size (), group = H / Hkv;
  std::vector<float> q ((size_t) nq * H * hd), k ((size_t) n_seq * L * Hkv * hd), v (k.size ());
  for (auto &x : q)
    x = rng_float (-2, 2);
  for (auto &x : k)
    x = rng_float (-2, 2);
  for (auto &x : v)
    x = rng_float (-1, 1);
  float *d_q = to_device (q), *d_k = to_device (k), *d_v = to_device (v), *d_out = NULL;
  int32_t *d_seq = to_device (q_seq), *d_kv = kv_len.empty () ? NULL : to_device (kv_len);
  cudaMalloc ((void **) &d_out, q.size () * 4);
  cudaMemset (d_out, 0xff, q.size () * 4);
  bool ok = um_cuda_attention (d_q, nq, d_seq, d_kv, d_k, d_v, L, H, Hkv, hd, d_out, 0) == cudaSuccess;
  std::vector<float> got = from_device (d_out, q.size ());
  std::vector<double> p ((size_t) L);
  for (int i = 0; i < nq; i++)
    for (int h = 0; h < H; h++)
      {
        const int kvh = h / group;
        const float *qi = &q[((size_t) i * H + h) * hd];
        const int n = kv_len.empty () ? L : kv_len[i];
        double mx = -INFINITY, den = 0;
        for (int j = 0; j < n; j++)
          {
            const float *kj = &k[(((size_t) q_seq[i] * L + j) * Hkv + kvh) * hd];
            double s = 0;
            for (int d = 0; d < hd; d++)
              s += (double) qi[d] * kj[d];
            p[j] = s / sqrt ((double) hd);
            mx = p[j] > mx ? p[j] : mx;
          }
        for (int j = 0; j < n; j++)
          den += (p[j] = exp (p[j] - mx));
        for (int d = 0; d < hd; d++)
          {
            double o = 0;
            for (int j = 0; j < n; j++)
              o += p[j] * v[(((size_t) q_seq[i] * L + j) * Hkv + kvh) * hd + d];
            o /= den;
            ok = ok && fabs (got[((size_t) i * H + h) * hd + d] - o) <= 1e-4 * (1 + fabs (o));
          }
      }
  char what[120];
  snprintf (what, sizeof what, "attention GQA H %d Hkv %d hd %d L %d nq %d of %d sequences%s", H, Hkv, hd, L, nq,
            n_seq, kv_len.empty () ? "" : ", masked");
  expect (ok, what);
  cudaFree (d_q);
  cudaFree (d_k);
  cudaFree (d_v);
  cudaFree (d_seq);
  if (d_kv != NULL)
    cudaFree (d_kv);
  cudaFree (d_out);
}

static void
test_attention_gqa (void)
{
  /* Rows from several sequences, out of order, fewer than the rows there are. */
  const std::vector<int32_t> subset = { 2, 0, 0, 1, 2, 2, 0 };
  attention_case (3, 37, 8, 2, 40, subset);    /* group 4, hd not a multiple of 32 */
  attention_case (3, 33, 6, 3, 64, subset);    /* group 2 */
  attention_case (2, 70, 6, 1, 96, { 1, 0 });  /* one KV head for all */
  /* The new families' head_dim 16 (one KPT slot of the 16 threads a row
   * has is the whole head): Dream 4/2, LLaDA-MoE 4/4, RND1 8/2. */
  attention_case (3, 37, 4, 2, 16, subset);
  attention_case (3, 33, 4, 4, 16, subset);
  attention_case (2, 70, 8, 2, 16, { 1, 0, 1 });
  /* Masks on the same subsets: 1 key, all L, and counts in between, in
   * one block of rows (LLaDA 2.x: 4 heads on 2 KV heads of 16). */
  attention_case (3, 37, 4, 2, 16, subset, { 1, 37, 5, 16, 17, 36, 2 });
  attention_case (3, 37, 8, 2, 40, subset, { 37, 1, 1, 20, 33, 8, 37 });
  attention_case (2, 70, 6, 1, 96, { 1, 0 }, { 70, 1 });
}

/* ---- kernels: a mixture-of-experts FFN's gather and combine ---- */

/* What the MoE forward does around each expert's products: the rows routed
 * to expert e gathered (get_rows), then scaled by their routing weights
 * into the residual (add_rows_scaled), expert after expert, so each row
 * gets top-k adds in the experts' order; some experts get no row. The
 * kernels round each product and sum once, as the CPU (ISO C, no FMA)
 * does, so the result is compared bit for bit with that sequence on the
 * host (the product through a volatile, so the host cannot fuse it). */
static void
test_moe_combine (void)
{
  const int T = 13, D = 64, E = 8, K = 3;
  std::vector<float> x ((size_t) T * D), resid ((size_t) T * D), w ((size_t) T * K);
  std::vector<int32_t> choice ((size_t) T * K);

  for (auto &v : x)
    v = rng_float (-2, 2);
  for (auto &v : resid)
    v = rng_float (-1, 1);
  for (int t = 0; t < T; t++)
    for (int j = 0; j < K; j++)
      {
        /* Distinct experts per token, never expert 7 (an empty group). */
        choice[(size_t) t * K + j] = (t * 3 + j * 2) % (E - 1);
        w[(size_t) t * K + j] = rng_float (0, 1);
      }
  float *d_x = to_device (x), *d_resid = to_device (resid), *d_gather = NULL;
  cudaMalloc ((void **) &d_gather, x.size () * 4);
  std::vector<float> want = resid;
  bool ok = true;

  for (int e = 0; e < E; e++)
    {
      std::vector<int32_t> rows;
      std::vector<float> scale;
      for (int t = 0; t < T; t++)
        for (int j = 0; j < K; j++)
          if (choice[(size_t) t * K + j] == e)
            {
              rows.push_back (t);
              scale.push_back (w[(size_t) t * K + j]);
            }
      const int n = (int) rows.size ();
      int32_t *d_rows = to_device (rows);
      float *d_scale = to_device (scale);
      ok = ok && um_cuda_get_rows (d_x, D, d_rows, n, d_gather, 0) == cudaSuccess;
      ok = ok && um_cuda_add_rows_scaled (d_resid, D, d_rows, d_scale, n, d_gather, 0) == cudaSuccess;
      for (int i = 0; i < n; i++)
        for (int d = 0; d < D; d++)
          {
            volatile float p = scale[i] * x[(size_t) rows[i] * D + d];
            want[(size_t) rows[i] * D + d] += p;
          }
      cudaFree (d_rows);
      cudaFree (d_scale);
    }
  std::vector<float> got = from_device (d_resid, resid.size ());
  expect (ok && memcmp (got.data (), want.data (), got.size () * 4) == 0,
          "MoE gather and combine: 13 tokens, top-3 of 8 experts, one empty (bit-exact)");
  cudaFree (d_x);
  cudaFree (d_resid);
  cudaFree (d_gather);
}

/* ---- stream capture and graphs ---- */

static __global__ void
k_scale_add (float *x, const float *y, float s, int n)
{
  const int i = (int) (blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n)
    x[i] = x[i] * s + y[i];
}

/* Work on a capturing stream is recorded, not run; a launch of the graph
 * runs it in order, as often as launched; what CUDA refuses during a
 * capture is refused and invalidates it. */
static void
test_graphs (void)
{
  const int n = 300;
  std::vector<float> hx (n), hy (n);
  float *pinned = NULL, *pageable = (float *) malloc (n * sizeof (float));
  cudaStream_t s, s2;
  cudaEvent_t fork, join;
  cudaGraph_t g = NULL;
  cudaGraphExec_t exec = NULL;
  cublasHandle_t h;
  const float one = 1.0f, zero = 0.0f;
  UmEmuGraphCounts c;

  for (int i = 0; i < n; i++)
    {
      hx[i] = (float) (i % 7);
      hy[i] = (float) (i % 5);
    }
  float *dx = to_device (hx), *dy = to_device (hy), *dz = to_device (hy);
  cudaHostAlloc ((void **) &pinned, n * sizeof (float), 0);
  cudaStreamCreate (&s);
  cudaStreamCreate (&s2);
  cudaEventCreate (&fork);
  cudaEventCreate (&join);
  cublasCreate_v2 (&h);
  cublasSetStream_v2 (h, s);
  um_emu_graph_reset_counts ();

  /* Recorded: an upload from pinned memory, a kernel, a cuBLAS product
   * (dz = dx · [1], k = 1), and a joined stream's memset. */
  std::vector<float> h_one (1, 1.0f);
  float *d_one = to_device (h_one);
  for (int i = 0; i < n; i++)
    pinned[i] = 1.0f;
  expect (cudaStreamBeginCapture (s, cudaStreamCaptureModeThreadLocal) == cudaSuccess, "capture begins");
  expect (cudaMemcpyAsync (dy, pinned, n * sizeof (float), cudaMemcpyHostToDevice, s) == cudaSuccess,
          "a pinned upload is recorded");
  UM_LAUNCH ((k_scale_add), 2, 256, 0, s, dx, (const float *) dy, 2.0f, n);
  expect (cudaGetLastError () == cudaSuccess, "a launch is recorded");
  expect (cublasGemmEx (h, CUBLAS_OP_N, CUBLAS_OP_N, n, 1, 1, &one, dx, CUDA_R_32F, n, d_one, CUDA_R_32F, 1, &zero,
                        dz, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS,
          "a cuBLAS product is recorded");
  cudaEventRecord (fork, s);
  expect (cudaStreamWaitEvent (s2, fork, 0) == cudaSuccess, "a second stream joins");
  expect (cudaMemsetAsync (dz, 0, 4 * sizeof (float), s2) == cudaSuccess, "its memset is recorded");
  cudaEventRecord (join, s2);
  expect (cudaStreamWaitEvent (s, join, 0) == cudaSuccess, "and joins back");
  /* Read straight from the emulated device memory (a cudaMemcpy here would
   * be refused, and end the capture). */
  expect (dx[10] == (float) (10 % 7) && dy[3] == (float) (3 % 5), "nothing ran while recording");
  {
    cudaError_t e = cudaStreamEndCapture (s, &g);
    if (e != cudaSuccess)
      fprintf (stderr, "ending the capture: %s\n", cudaGetErrorString (e));
    expect (e == cudaSuccess && g != NULL, "capture ends into a graph");
  }
  expect (cudaGraphInstantiate (&exec, g, 0) == cudaSuccess, "instantiated");
  for (int r = 0; r < 2; r++)
    {
      pinned[3] = 10.0f * (r + 1);   /* read when the graph runs */
      expect (cudaGraphLaunch (exec, s) == cudaSuccess, "launched");
    }
  {
    std::vector<float> x = from_device (dx, n), z = from_device (dz, n);
    /* x = (x·2 + 1)·2 + 1 elsewhere; at 3 the upload's value of each launch. */
    expect (x[10] == ((float) (10 % 7) * 2 + 1) * 2 + 1, "replayed twice, in order");
    expect (x[3] == ((float) (3 % 7) * 2 + 10) * 2 + 20, "the staged upload read at each launch");
    expect (z[0] == 0.0f && z[5] == x[5], "cuBLAS's product and the joined stream's work ran, in order");
  }
  um_emu_graph_counts (&c);
  expect (c.captured == 1 && c.launches == 2 && c.replayed_nodes > 0 && c.invalidated == 0, "counted");
  cudaGraphExecDestroy (exec);
  cudaGraphDestroy (g);

  /* Refused during a capture, each invalidating it. */
  struct { const char *what; int which; } refused[] = {
    { "a synchronous copy", 0 }, { "an allocation", 1 }, { "syncing the capturing stream", 2 },
    { "a pageable async copy", 3 }, { "waiting on a captured event", 4 }, { "a device sync", 5 },
  };
  for (unsigned i = 0; i < sizeof refused / sizeof refused[0]; i++)
    {
      void *p = NULL;
      cudaError_t e = cudaSuccess;
      expect (cudaStreamBeginCapture (s, cudaStreamCaptureModeThreadLocal) == cudaSuccess, "capture begins");
      cudaEventRecord (fork, s);
      switch (refused[i].which)
        {
        case 0: e = cudaMemcpy (dx, hx.data (), n * sizeof (float), cudaMemcpyHostToDevice); break;
        case 1: e = cudaMalloc (&p, 64); break;
        case 2: e = cudaStreamSynchronize (s); break;
        case 3: e = cudaMemcpyAsync (pageable, dx, n * sizeof (float), cudaMemcpyDeviceToHost, s); break;
        case 4: e = cudaEventSynchronize (fork); break;
        default: e = cudaDeviceSynchronize (); break;
        }
      (void) cudaGetLastError ();
      expect (e != cudaSuccess, refused[i].what);
      expect (cudaStreamEndCapture (s, &g) == cudaErrorStreamCaptureInvalidated && g == NULL,
              "the capture is invalidated");
      (void) cudaGetLastError ();
    }
  /* Unjoined work on a forked stream. */
  expect (cudaStreamBeginCapture (s, cudaStreamCaptureModeThreadLocal) == cudaSuccess, "capture begins");
  cudaEventRecord (fork, s);
  cudaStreamWaitEvent (s2, fork, 0);
  cudaMemsetAsync (dz, 0, 4, s2);
  expect (cudaStreamEndCapture (s, &g) == cudaErrorStreamCaptureUnjoined, "unjoined work is refused");
  (void) cudaGetLastError ();
  /* After all that, the streams run work at once again. */
  cudaMemsetAsync (dz, 0, n * sizeof (float), s2);
  expect (from_device (dz, n)[n - 1] == 0.0f, "streams are free after a refused capture");

  cublasDestroy_v2 (h);
  cudaEventDestroy (fork);
  cudaEventDestroy (join);
  cudaStreamDestroy (s);
  cudaStreamDestroy (s2);
  cudaFreeHost (pinned);
  free (pageable);
  cudaFree (dx);
  cudaFree (dy);
  cudaFree (dz);
  cudaFree (d_one);
}

int
main (void)
{
  test_shuffles ();
  test_indices ();
  test_failures ();
  test_runtime ();
  test_blas ();
  test_embed_all_types ();
  test_attention_gqa ();
  test_moe_combine ();
  test_graphs ();
  printf ("%d of %d checks passed\n", n_checks - n_fail, n_checks);
  return n_fail == 0 ? 0 : 1;
}

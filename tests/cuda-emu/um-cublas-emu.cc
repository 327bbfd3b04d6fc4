/* um-cublas-emu.cc — cuBLAS's GEMMs for the host emulation (tests/cuda-emu):
 * column-major, cuBLAS's argument checks, the inputs as the GPU reads them
 * (f16/bf16 as stored; TF32 = fp32 rounded to 10 mantissa bits for the
 * FAST_TF32 compute type, 16F/16BF likewise), sums in double. */
#include "cublas_v2.h"
#include "um-cuda-emu.h"

#include <math.h>
#include <string.h>

struct UmEmuBlas { cudaStream_t stream; cublasMath_t math; };

/* Calls per (A, C, compute) combination, so tests can tell which path the
 * backend took. */
static long calls[32][32][4];

static int
compute_slot (cublasComputeType_t c)
{
  return c == CUBLAS_COMPUTE_32F_FAST_TF32 ? 1 : c == CUBLAS_COMPUTE_32F_FAST_16F ? 2
       : c == CUBLAS_COMPUTE_32F_FAST_16BF ? 3 : 0;
}

static void
count_call (cudaDataType a, cudaDataType ct, cublasComputeType_t c)
{
  if ((unsigned) a < 32 && (unsigned) ct < 32)
    calls[a][ct][compute_slot (c)]++;
}

extern "C" void
um_emu_blas_reset_counts (void)
{
  memset (calls, 0, sizeof calls);
}

extern "C" long
um_emu_blas_calls (cudaDataType a, cudaDataType ct, cublasComputeType_t c)
{
  return (unsigned) a < 32 && (unsigned) ct < 32 ? calls[a][ct][compute_slot (c)] : 0;
}

extern "C" cublasStatus_t
cublasCreate_v2 (cublasHandle_t *h)
{
  *h = new UmEmuBlas ();
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasDestroy_v2 (cublasHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }
extern "C" cublasStatus_t cublasSetStream_v2 (cublasHandle_t h, cudaStream_t s) { h->stream = s; return CUBLAS_STATUS_SUCCESS; }
extern "C" cublasStatus_t cublasSetMathMode (cublasHandle_t h, cublasMath_t m) { h->math = m; return CUBLAS_STATUS_SUCCESS; }
extern "C" cublasStatus_t cublasSetWorkspace_v2 (cublasHandle_t, void *, size_t) { return CUBLAS_STATUS_SUCCESS; }

extern "C" const char *
cublasGetStatusString (cublasStatus_t s)
{
  switch (s)
    {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    default: return "CUBLAS_STATUS_EXECUTION_FAILED";
    }
}

static float
round_mantissa (float x, int bits)
{
  uint32_t u;
  memcpy (&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u)
    return x;
  const int drop = 23 - bits;
  u += (1u << (drop - 1)) - 1 + ((u >> drop) & 1u);
  u &= ~((1u << drop) - 1);
  memcpy (&x, &u, 4);
  return x;
}

static double
load (const void *p, cudaDataType t, long long i, cublasComputeType_t c)
{
  float v;
  switch (t)
    {
    case CUDA_R_32F: v = ((const float *) p)[i]; break;
    case CUDA_R_16F: v = um_f16_to_f32 (((const uint16_t *) p)[i]); break;
    case CUDA_R_16BF: v = um_bf16_to_f32 (((const uint16_t *) p)[i]); break;
    default: return NAN;
    }
  if (t == CUDA_R_32F && c == CUBLAS_COMPUTE_32F_FAST_TF32)
    v = round_mantissa (v, 10);
  else if (t == CUDA_R_32F && c == CUBLAS_COMPUTE_32F_FAST_16F)
    v = um_f16_to_f32 (um_f32_to_f16 (v));
  else if (t == CUDA_R_32F && c == CUBLAS_COMPUTE_32F_FAST_16BF)
    v = um_bf16_to_f32 (um_f32_to_bf16 (v));
  return v;
}

static void
store (void *p, cudaDataType t, long long i, double v)
{
  switch (t)
    {
    case CUDA_R_32F: ((float *) p)[i] = (float) v; break;
    case CUDA_R_16F: ((uint16_t *) p)[i] = um_f32_to_f16 ((float) v); break;
    case CUDA_R_16BF: ((uint16_t *) p)[i] = um_f32_to_bf16 ((float) v); break;
    default: break;
    }
}

static bool
type_ok (cudaDataType t)
{
  return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF;
}

static cublasStatus_t
check (cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int lda, int ldb, int ldc,
       cudaDataType at, cudaDataType bt, cudaDataType ct, cublasComputeType_t c)
{
  if (m < 0 || n < 0 || k < 0 || (ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T)
      || lda < (ta == CUBLAS_OP_N ? (m > 1 ? m : 1) : (k > 1 ? k : 1))
      || ldb < (tb == CUBLAS_OP_N ? (k > 1 ? k : 1) : (n > 1 ? n : 1)) || ldc < (m > 1 ? m : 1))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!type_ok (at) || !type_ok (bt) || !type_ok (ct) || at != bt
      || (c != CUBLAS_COMPUTE_32F && c != CUBLAS_COMPUTE_32F_FAST_TF32 && c != CUBLAS_COMPUTE_32F_FAST_16F
          && c != CUBLAS_COMPUTE_32F_FAST_16BF && c != CUBLAS_COMPUTE_32F_PEDANTIC)
      || (at != CUDA_R_32F && ct == CUDA_R_32F && at != ct && false))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  return CUBLAS_STATUS_SUCCESS;
}

static void
gemm (cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const void *A, cudaDataType at,
      int lda, const void *B, cudaDataType bt, int ldb, float beta, void *C, cudaDataType ct, int ldc,
      cublasComputeType_t c)
{
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++)
      {
        double s = 0.0;
        for (int l = 0; l < k; l++)
          {
            long long ia = ta == CUBLAS_OP_N ? i + (long long) l * lda : l + (long long) i * lda;
            long long ib = tb == CUBLAS_OP_N ? l + (long long) j * ldb : j + (long long) l * ldb;
            s += load (A, at, ia, c) * load (B, bt, ib, c);
          }
        long long ic = i + (long long) j * ldc;
        double prev = beta != 0.0f ? load (C, ct, ic, CUBLAS_COMPUTE_32F) : 0.0;
        store (C, ct, ic, (double) alpha * s + (double) beta * prev);
      }
}

/* Queued on the handle's stream like the runtime's work (um_emu_enqueue). */
static cublasStatus_t
enqueue (cublasHandle_t h, std::function<void ()> work)
{
  return um_emu_enqueue (h->stream, std::move (work)) == cudaSuccess ? CUBLAS_STATUS_SUCCESS
                                                                    : CUBLAS_STATUS_EXECUTION_FAILED;
}

extern "C" cublasStatus_t
cublasGemmEx (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *alpha,
              const void *A, cudaDataType at, int lda, const void *B, cudaDataType bt, int ldb, const void *beta,
              void *C, cudaDataType ct, int ldc, cublasComputeType_t c, cublasGemmAlgo_t)
{
  cublasStatus_t s;
  if (h == NULL)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if ((s = check (ta, tb, m, n, k, lda, ldb, ldc, at, bt, ct, c)) != CUBLAS_STATUS_SUCCESS)
    return s;
  /* alpha and beta are read now (host pointer mode); the product runs now
   * or when a recorded graph does. */
  const float al = *(const float *) alpha, be = *(const float *) beta;
  count_call (at, ct, c);
  return enqueue (h, [=] () { gemm (ta, tb, m, n, k, al, A, at, lda, B, bt, ldb, be, C, ct, ldc, c); });
}

static size_t
type_size (cudaDataType t)
{
  return t == CUDA_R_32F ? 4 : 2;
}

extern "C" cublasStatus_t
cublasGemmStridedBatchedEx (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType at, int lda, long long sa, const void *B,
                            cudaDataType bt, int ldb, long long sb, const void *beta, void *C, cudaDataType ct,
                            int ldc, long long sc, int batch, cublasComputeType_t c, cublasGemmAlgo_t)
{
  cublasStatus_t s;
  if (h == NULL)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (batch < 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  if ((s = check (ta, tb, m, n, k, lda, ldb, ldc, at, bt, ct, c)) != CUBLAS_STATUS_SUCCESS)
    return s;
  const float al = *(const float *) alpha, be = *(const float *) beta;
  count_call (at, ct, c);
  return enqueue (h, [=] () {
    for (int b = 0; b < batch; b++)
      gemm (ta, tb, m, n, k, al, (const char *) A + b * sa * (long long) type_size (at), at, lda,
            (const char *) B + b * sb * (long long) type_size (bt), bt, ldb, be,
            (char *) C + b * sc * (long long) type_size (ct), ct, ldc, c);
  });
}

extern "C" cublasStatus_t
cublasGemmBatchedEx (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                     const void *alpha, const void *const A[], cudaDataType at, int lda, const void *const B[],
                     cudaDataType bt, int ldb, const void *beta, void *const C[], cudaDataType ct, int ldc, int batch,
                     cublasComputeType_t c, cublasGemmAlgo_t)
{
  cublasStatus_t s;
  if (h == NULL)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (batch < 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  if ((s = check (ta, tb, m, n, k, lda, ldb, ldc, at, bt, ct, c)) != CUBLAS_STATUS_SUCCESS)
    return s;
  const float al = *(const float *) alpha, be = *(const float *) beta;
  count_call (at, ct, c);
  /* The pointer arrays are device memory, read when the product runs. */
  return enqueue (h, [=] () {
    for (int b = 0; b < batch; b++)
      gemm (ta, tb, m, n, k, al, A[b], at, lda, B[b], bt, ldb, be, C[b], ct, ldc, c);
  });
}

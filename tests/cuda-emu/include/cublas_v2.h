/* Host emulation of the cuBLAS functions Unmask uses (tests/cuda-emu), with
 * cuBLAS's names, column-major semantics and argument checks; products are
 * computed on the host in double from the inputs as the GPU would see them
 * (f16/bf16 as stored, TF32 rounding for the FAST_TF32 compute type). */
#pragma once

#include "cuda_runtime_api.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CUBLAS_VER_MAJOR 13
#define CUBLAS_VER_MINOR 0

typedef struct UmEmuBlas *cublasHandle_t;

typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;

typedef enum {
  CUBLAS_OP_N = 0,
  CUBLAS_OP_T = 1,
  CUBLAS_OP_C = 2,
} cublasOperation_t;

typedef enum {
  CUBLAS_DEFAULT_MATH = 0,
  CUBLAS_TENSOR_OP_MATH = 1,
  CUBLAS_PEDANTIC_MATH = 2,
  CUBLAS_TF32_TENSOR_OP_MATH = 3,
} cublasMath_t;

typedef enum {
  CUBLAS_COMPUTE_16F = 64,
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_32F_PEDANTIC = 69,
  CUBLAS_COMPUTE_32F_FAST_16F = 74,
  CUBLAS_COMPUTE_32F_FAST_16BF = 75,
  CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
  CUBLAS_COMPUTE_64F = 70,
} cublasComputeType_t;

typedef enum {
  CUBLAS_GEMM_DEFAULT = -1,
  CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99,
} cublasGemmAlgo_t;

cublasStatus_t cublasCreate_v2 (cublasHandle_t *handle);
cublasStatus_t cublasDestroy_v2 (cublasHandle_t handle);
cublasStatus_t cublasSetStream_v2 (cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasSetMathMode (cublasHandle_t handle, cublasMath_t mode);
cublasStatus_t cublasSetWorkspace_v2 (cublasHandle_t handle, void *workspace, size_t bytes);
const char    *cublasGetStatusString (cublasStatus_t status);
cublasStatus_t cublasGemmEx (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                             int m, int n, int k, const void *alpha, const void *A, cudaDataType Atype, int lda,
                             const void *B, cudaDataType Btype, int ldb, const void *beta, void *C,
                             cudaDataType Ctype, int ldc, cublasComputeType_t compute, cublasGemmAlgo_t algo);
cublasStatus_t cublasGemmStridedBatchedEx (cublasHandle_t handle, cublasOperation_t transa,
                                           cublasOperation_t transb, int m, int n, int k, const void *alpha,
                                           const void *A, cudaDataType Atype, int lda, long long strideA,
                                           const void *B, cudaDataType Btype, int ldb, long long strideB,
                                           const void *beta, void *C, cudaDataType Ctype, int ldc,
                                           long long strideC, int batch, cublasComputeType_t compute,
                                           cublasGemmAlgo_t algo);
cublasStatus_t cublasGemmBatchedEx (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                    int m, int n, int k, const void *alpha, const void *const A[],
                                    cudaDataType Atype, int lda, const void *const B[], cudaDataType Btype,
                                    int ldb, const void *beta, void *const C[], cudaDataType Ctype, int ldc,
                                    int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo);

/* Emulation counters for tests, since the last reset: GEMM calls per
 * (A type, C type, compute type) (a batched call counts once; the 32F
 * compute types other than the FAST ones count as CUBLAS_COMPUTE_32F). */
void um_emu_blas_reset_counts (void);
long um_emu_blas_calls (cudaDataType a_type, cudaDataType c_type, cublasComputeType_t compute);

#ifdef __cplusplus
}
#endif

/* um-cuda-attention.h — attention on tensor cores: the softmax kernel
 * between the two cuBLAS products (um-cuda-attention.cu), and the host
 * orchestration (um-cuda-attention-tc.c) that the backend calls.
 *
 * The products run in TF32 (CUBLAS_COMPUTE_32F_FAST_TF32) on the fp32 q, k
 * and v in place: 10-bit mantissa inputs, fp32 accumulation.  Against the
 * CPU, with u = 2⁻¹⁰ and scale = 1/sqrt(hd), a score is off by at most
 * Δ = 2.1·u·scale·max Σ_d |q_d|·|k_d| and an output element by at most
 *   max|v| · ((e^{2Δ} − 1) + e^{2Δ}·2.1·u) + 1e-5·max|v|,
 * which is ≤ max|v|·u·(2 + 4·sqrt(hd)·max|q|·max|k|) for small Δ (see
 * tests/test-attention-plan.c, which checks it with TF32-rounded inputs;
 * observed errors are ~100× below it). */
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Softmax over @rows rows of @len contiguous floats at @s (device), in
 * place, in fp32: row max, exp, sum, normalise.  @row_len (device) NULL:
 * over all len; else row r weighs only its first row_len[r % q_rows]
 * floats (clamped to len) and the rest become 0. */
cudaError_t um_cuda_attention_softmax (float *s, int64_t rows, int len, const int32_t *row_len, int q_rows,
                                       cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#ifndef __CUDACC__
#include <glib.h>

G_BEGIN_DECLS

/* The cuBLAS entry points the orchestration uses, opened by the backend at
 * run time (cuBLAS is never linked). */
typedef cublasStatus_t (*UmCublasSetStreamFn) (cublasHandle_t, cudaStream_t);
typedef cublasStatus_t (*UmCublasGemmStridedBatchedExFn) (cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                                          int, int, int, const void *, const void *, cudaDataType,
                                                          int, long long int, const void *, cudaDataType, int,
                                                          long long int, const void *, void *, cudaDataType, int,
                                                          long long int, int, cublasComputeType_t, cublasGemmAlgo_t);
typedef const char *(*UmCublasGetStatusStringFn) (cublasStatus_t);

typedef struct {
  /* "cublasSetStream_v2"; NULL: the handle is already on the stream (a
   * call resets cuBLAS's workspace to its own pool, which a recorded graph
   * must not allocate from). */
  UmCublasSetStreamFn set_stream;
  UmCublasGemmStridedBatchedExFn gemm_strided_batched_ex; /* "cublasGemmStridedBatchedEx" */
  UmCublasGetStatusStringFn status_string;                /* "cublasGetStatusString", may be NULL */
} UmCudaAttnBlas;

/* Hooks around each step (a product or the softmax), for the kernel
 * profile; NULL for none. */
typedef enum { UM_CUDA_ATTN_SCORES, UM_CUDA_ATTN_SOFTMAX, UM_CUDA_ATTN_VALUES } UmCudaAttnStepKind;
typedef struct {
  void    (*begin) (gpointer data);
  void    (*end)   (gpointer data, UmCudaAttnStepKind kind, gboolean ok);
  gpointer data;
} UmCudaAttnHooks;

/* The score buffer attention needs for whole-sized tiles: tiles of up to
 * UM_CUDA_ATTENTION_SCORE_BYTES / (seq_len·n_heads·4) query rows (at least
 * one), and no more than nq; 0 when nq ≤ 0. */
#define UM_CUDA_ATTENTION_SCORE_BYTES ((size_t) 64 << 20)
size_t um_cuda_attention_tc_scratch_bytes (int nq, int seq_len, int n_heads, int n_kv_heads, int head_dim);

/* um_cuda_attention's contract (gpu/um-cuda-kernels.h), q_seq_host in host
 * memory; the mask (NULL for none) both in host memory (the plan's tiles)
 * and on the device (the softmax), the same nq values.  @scratch (device,
 * 16-byte aligned) holds the scores of a tile of queries; any
 * @scratch_bytes ≥ seq_len·n_heads·4 works, larger means fewer and larger
 * products.  Enqueued on @stream (the handle is set to it). */
gboolean um_cuda_attention_tc (const UmCudaAttnBlas *blas, cublasHandle_t handle, cudaStream_t stream,
                               const float *q, int nq, const gint32 *q_seq_host, const gint32 *q_kv_len_host,
                               const int32_t *q_kv_len_dev, const float *k, const float *v, int seq_len,
                               int n_heads, int n_kv_heads, int head_dim, float *out, float *scratch,
                               size_t scratch_bytes, const UmCudaAttnHooks *hooks, GError **error);

G_END_DECLS
#endif

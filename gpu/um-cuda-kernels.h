/* um-cuda-kernels.h — the CUDA kernels of the GPU backend, as C functions.
 *
 * Every pointer is a device pointer unless said otherwise; every function
 * enqueues work on @stream and returns the launch status (cudaGetLastError),
 * never aborting. Activations are float32 row-major, like the CPU backend's;
 * semantics follow compute/um-ref-kernels.h exactly (same pairings, same
 * positions, same tie rules), so results agree with the CPU backend to float
 * accuracy. Only the matrix products (cuBLAS, in gpu/um-cuda-backend.c) use
 * half-precision inputs.
 */
#pragma once

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "um-dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  UM_CUDA_OUT_F32 = 0,
  UM_CUDA_OUT_F16 = 1,
  UM_CUDA_OUT_BF16 = 2,
} UmCudaOutType;

/* Dequantizes @n_rows rows of @cols elements stored as @type (row r at
 * src + r·row_bytes; F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K,
 * Q6_K, block layouts of formats/um-quant-blocks.h) into dst[n_rows, cols] of @out.
 * Values equal um_quant_dequantize_row_ref's (then rounded to @out). */
cudaError_t um_cuda_dequant_rows (UmDType type, const void *src, int64_t row_bytes, int64_t n_rows,
                                  int64_t cols, void *dst, UmCudaOutType out, cudaStream_t stream);

/* out[i, :] = dequant (table row ids[i]) as float; @ids on the device. */
cudaError_t um_cuda_embed (UmDType type, const void *table, int64_t row_bytes, int64_t cols,
                           const int32_t *ids, int n, float *out, cudaStream_t stream);

/* out[i, :] = src[rows[i], :]; @rows on the device. */
cudaError_t um_cuda_get_rows (const float *src, int dim, const int32_t *rows, int n, float *out,
                              cudaStream_t stream);

/* out = x / sqrt(mean(x²) + eps) · w, row-wise (sum in float); out may be x. */
cudaError_t um_cuda_rms_norm (const float *x, int rows, int dim, const float *w, float eps, float *out,
                              cudaStream_t stream);

/* x += y, then out = RMSNorm (x) · w: um_cuda_add then um_cuda_rms_norm in
 * one launch, the same bits; out may be y (not x). */
cudaError_t um_cuda_add_rms_norm (float *x, const float *y, int rows, int dim, const float *w, float eps,
                                  float *out, cudaStream_t stream);

/* In place on x[rows, n_heads·head_dim]; row i at position pos[i] (device).
 * Only the first @rope_dim (even, ≤ head_dim) values of each head turn.
 * Angles pos·theta^(-2i/rope_dim) in double, rotation in float; pairs
 * (i, i+rope_dim/2) or, if @interleaved, (2i, 2i+1). */
cudaError_t um_cuda_rope (float *x, int rows, const int32_t *pos, int n_heads, int head_dim, int rope_dim,
                          double theta, int interleaved, cudaStream_t stream);

/* Attention, flash style (online softmax over key tiles, never the whole
 * L×L matrix): q[nq, H·hd] with query row i in sequence q_seq[i] (device);
 * k, v[n_seq·L, Hkv·hd]; out[nq, H·hd]. head_dim ≤ 256, any H multiple of
 * Hkv. @q_kv_len (device) NULL: every row sees all L keys; else row i sees
 * the keys 0 … q_kv_len[i] − 1 (1 … L) and a block of 16 rows reads only
 * the keys its widest row sees. */
cudaError_t um_cuda_attention (const float *q, int nq, const int32_t *q_seq, const int32_t *q_kv_len,
                               const float *k, const float *v, int seq_len, int n_heads, int n_kv_heads,
                               int head_dim, float *out, cudaStream_t stream);

/* out = silu(gate) · up; out may be gate. */
cudaError_t um_cuda_swiglu (const float *gate, const float *up, size_t n, float *out, cudaStream_t stream);

/* x += y */
cudaError_t um_cuda_add (float *x, const float *y, size_t n, cudaStream_t stream);

/* x[r, :] += bias for r < rows, @dim floats per row (bias: dim floats). */
cudaError_t um_cuda_add_bias (float *x, int rows, int dim, const float *bias, cudaStream_t stream);

/* dst[rows[i], :] += scale[i] · src[i, :] for i < n, @dim floats per row;
 * @rows (distinct) and @scale on the device.  Product and sum rounded
 * separately, as on the CPU. */
cudaError_t um_cuda_add_rows_scaled (float *dst, int dim, const int32_t *rows, const float *scale, int n,
                                     const float *src, cudaStream_t stream);

/* dst = (half or bfloat16) src, round to nearest even. */
cudaError_t um_cuda_convert_f32 (const float *src, size_t n, void *dst, UmCudaOutType to, cudaStream_t stream);

/* um_cuda_convert_f32 to F16 or BF16 that also sets *flag (a device int,
 * left alone otherwise) to 1 when a value is not finite or beyond the
 * type's range (|x| > 65504 for F16). */
cudaError_t um_cuda_convert_f32_checked (const float *src, size_t n, void *dst, UmCudaOutType to, int *flag,
                                         cudaStream_t stream);

/* cudaSuccess when this device can run the kernels (their code was built
 * for it or its driver can compile their PTX); asked when the backend is
 * created, so a missing kernel image is an error there, not at the first op. */
cudaError_t um_cuda_probe_kernels (void);

#ifdef __cplusplus
}
#endif

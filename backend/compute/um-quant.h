/* um-quant.h — the CPU's quantize, dequantize and product routines for
 * llama.cpp's block-quantized weight formats, whose block layouts live in
 * formats/um-quant-blocks.h (included here, so users of either need only this).
 * Plain C up to the GLib part, so CUDA sources (.cu) can include it too.
 */
#pragma once

#include "um-quant-blocks.h"

#ifndef __CUDACC__

#include <glib.h>

#include "um-dtype.h"

G_BEGIN_DECLS

/* ---- reference (um-quant-ref.c): plain, obviously-correct C ---------------
 *
 * n is the number of elements and must be a non-negative multiple of the
 * type's block size; on a bad type or length these return FALSE and write
 * nothing.  src/dst may be unaligned. */

/* All types: F32, F16, BF16 and every quantized type. */
gboolean um_quant_dequantize_row_ref (UmDType     t,
                                      const void *src,
                                      float      *dst,
                                      int64_t     n);

/* F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K.  The
 * algorithms are ggml's non-imatrix reference quantizers (what llama-quantize
 * does without an importance matrix); non-finite inputs give unspecified but
 * memory-safe output. */
gboolean um_quant_quantize_row_ref (UmDType      t,
                                    const float *src,
                                    void        *dst,
                                    int64_t      n);

/* Activation quantizers (reference): Q8_0 as ggml does it, and Q8_K. */
gboolean um_quant_quantize_row_q8_0_ref (const float *x, UmBlockQ8_0 *y, int64_t n);
gboolean um_quant_quantize_row_q8_K_ref (const float *x, UmBlockQ8_K *y, int64_t n);

/* ---- fast paths (um-quant.c) ---------------------------------------------- */

/* Same result as um_quant_dequantize_row_ref (), bit for bit (SIMD where the
 * CPU has it, chosen at run time). */
gboolean um_quant_dequantize_row (UmDType     t,
                                  const void *src,
                                  float      *dst,
                                  int64_t     n);

/* Whether t has a direct quantized dot product: TRUE for Q8_0, Q4_0, Q4_1,
 * Q5_0, Q5_1 (activations in UmBlockQ8_0 blocks of 32) and Q4_K, Q5_K, Q6_K
 * (activations in UmBlockQ8_K blocks of 256). */
gboolean um_quant_has_vec_dot (UmDType t);

/* Bytes of the quantized activation buffer for n elements, or 0 when t has
 * no direct product or n is not a multiple of t's block size. */
size_t   um_quant_q8_row_bytes (UmDType for_type, int64_t n);

/* Quantizes an activation row x[n] to the format that t's dot product reads
 * (Q8_0 or Q8_K blocks, in dst).  Returns FALSE on a bad type or length. */
gboolean um_quant_quantize_row_q8 (UmDType      for_type,
                                   const float *x,
                                   void        *dst,
                                   int64_t      n);

/* dot (dequant (wrow), dequant (xq8)) computed in integers per block, as
 * llama.cpp's CPU backend does.  Returns NaN on a bad type or length. */
float    um_quant_vec_dot_q8 (UmDType     t,
                              const void *wrow,
                              const void *xq8,
                              int64_t     n);

/* out[m, N] = x[m, k] * W[N, k]^T, with W stored row-major in type t (each
 * row a whole number of blocks) and out row-major with leading dimension N.
 * x is f32 with leading dimension k.
 *
 * Weights are dequantized in tiles of rows (128 rows at K = 4096, 2 MiB of
 * f32 per thread) and multiplied with OpenBLAS sgemm, the tiles spread over
 * um-pool's threads (F32 weights are multiplied in place, tile by tile).  The result is the
 * f32 product with the dequantized weights (the x rows are not rounded).
 * On AVX2 machines this beat the direct quantized product (maddubs) for
 * every type at diffusion batch sizes (M >= 64), see um_quant_matmul_q8 ();
 * AVX-512 machines use um-gemm.h instead (um_cpu_matmul () chooses).  Any m works; x, w, out
 * must not overlap.  scratch gives the per-thread tile buffers; pass at least
 * um_quant_matmul_scratch_bytes () for full speed.  With less (or NULL) it
 * uses fewer threads, or allocates its own buffer if even one tile does not
 * fit.  Returns FALSE (touching nothing) on bad arguments or an allocation
 * failure.  Called inside a pool loop, it runs serially. */
gboolean um_quant_matmul (UmDType      t,
                          const void  *w,
                          int64_t      n,
                          int64_t      k,
                          const float *x,
                          int64_t      m,
                          float       *out,
                          float       *scratch,
                          size_t       scratch_bytes);

size_t   um_quant_matmul_scratch_bytes (UmDType t, int64_t n, int64_t k, int64_t m);

/* The same product computed directly on the quantized weights: x is first
 * quantized to Q8_0 / Q8_K rows, then each output is an integer dot product
 * (four x rows per weight row at a time with AVX2).  Only t with
 * um_quant_has_vec_dot ().  8-bit activations cost ~0.3-1% relative error in
 * out, so this is not what um_quant_matmul () does.  Measured per core on the
 * EPYC (tests/tools/um-quant-bench.c): 40-70 GFLOP/s against 63-88 for
 * dequantize + sgemm at M = 64..256, but 2-5x faster below M ~ 32, where
 * sgemm is inefficient; offered for such small products. */
gboolean um_quant_matmul_q8 (UmDType      t,
                             const void  *w,
                             int64_t      n,
                             int64_t      k,
                             const float *x,
                             int64_t      m,
                             float       *out);
/* um_quant_matmul () with an explicit tile height (0 = its default).  For
 * the benchmark and tests. */
gboolean um_quant_matmul_tiled (UmDType      t,
                                const void  *w,
                                int64_t      n,
                                int64_t      k,
                                const float *x,
                                int64_t      m,
                                float       *out,
                                int64_t      tile_rows,
                                float       *scratch,
                                size_t       scratch_bytes);

/* Name of the SIMD level the fast paths use ("avx2" or "scalar"). */
const char *um_quant_simd_level (void);

/* For tests and benchmarks: FALSE makes the fast paths use their portable
 * code, to check it on machines that have SIMD.  Process-wide. */
void        um_quant_set_simd_enabled (gboolean enabled);

G_END_DECLS

#endif /* !__CUDACC__ */

/* um-gemm.h — our own matrix-product kernels for the weight products
 * out[m, n] = x[m, k] · W[n, k]^T (W in any stored type, row-major, rows a
 * whole number of blocks; x f32 with leading dimension k; out f32 with
 * leading dimension n).  All use um-pool's threads (serially when called
 * inside a pool loop) and never OpenBLAS. */
#pragma once

#include <glib.h>
#include <stddef.h>
#include <stdint.h>

#include "um-dtype.h"

G_BEGIN_DECLS

/* ---- exact float path, AVX-512 (um-gemm-avx512.c) --------------------------
 * Weights are converted to f32 exactly (bit-identical to
 * um_quant_dequantize_row_ref) in cache-sized pieces and multiplied with f32
 * activations by an AVX-512 FMA micro-kernel: the f32 product with the
 * dequantized weights, like dequantize + sgemm, only faster.
 * FALSE (touching nothing) on bad arguments, allocation failure, or a CPU
 * without AVX-512 (see um_cpu_isa ()). */
size_t   um_gemm_f32_scratch_bytes (UmDType t, int64_t n, int64_t k, int64_t m);
gboolean um_gemm_f32_avx512 (UmDType t, const void *w, int64_t n, int64_t k,
                             const float *x, int64_t m, float *out,
                             void *scratch, size_t scratch_bytes);

/* ---- exact float path, AVX2 + FMA (um-gemm-avx2.c) -------------------------
 * The same product and contract for CPUs with AVX2 and FMA (weights
 * converted with um_quant_dequantize_row (), bit for bit the reference);
 * FALSE below AVX2. */
size_t   um_gemm_f32_avx2_scratch_bytes (UmDType t, int64_t n, int64_t k, int64_t m);
gboolean um_gemm_f32_avx2 (UmDType t, const void *w, int64_t n, int64_t k,
                           const float *x, int64_t m, float *out,
                           void *scratch, size_t scratch_bytes);

/* ---- 8-bit integer path for quantized weights (um-qgemm.c) ------------------
 * x is rounded to 8 bits per 32-element block (see um-qgemm.c for the exact
 * rule), and each block's integer dot product with the weight codes is
 * computed exactly (AVX-512 VNNI, AVX-VNNI or AVX2), then scaled in float.  Only for the
 * quantized types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K): the
 * accuracy cost of rounding x is measured against the exact path before this
 * is made a default. */
gboolean um_qgemm_supported_type (UmDType t);
size_t   um_qgemm_scratch_bytes (UmDType t, int64_t n, int64_t k, int64_t m);
/* Plain C reference of exactly the same arithmetic (slow; for tests). */
gboolean um_qgemm_ref (UmDType t, const void *w, int64_t n, int64_t k,
                       const float *x, int64_t m, float *out);
gboolean um_qgemm_vnni (UmDType t, const void *w, int64_t n, int64_t k,
                        const float *x, int64_t m, float *out,
                        void *scratch, size_t scratch_bytes);
/* The same arithmetic with AVX2 (vpmaddubsw), or AVX-VNNI's 256-bit
 * vpdpbusd where um_cpu_has_avx_vnni () (um-qgemm-avx2.c); FALSE below
 * AVX2. */
size_t   um_qgemm_avx2_scratch_bytes (UmDType t, int64_t n, int64_t k, int64_t m);
gboolean um_qgemm_avx2 (UmDType t, const void *w, int64_t n, int64_t k,
                        const float *x, int64_t m, float *out,
                        void *scratch, size_t scratch_bytes);

G_END_DECLS

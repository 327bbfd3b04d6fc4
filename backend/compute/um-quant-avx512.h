/* um-quant-avx512.h — AVX-512 dequantization of every stored weight type
 * (implemented in um-gemm-avx512.c, where the matrix product converts
 * weights with the same code). */
#pragma once

#include <glib.h>
#include <stdint.h>

#include "um-dtype.h"

G_BEGIN_DECLS

/* dst[0..n) = the f32 values of the n elements at src, bit for bit what
 * um_quant_dequantize_row_ref () gives (NaN payloads included).  Handles
 * F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K; src and
 * dst may be unaligned.  Returns FALSE, writing nothing, for any other type,
 * a negative n or one that is not a whole number of blocks, a NULL pointer
 * with n > 0, or a CPU (or cap, see um_cpu_isa ()) below AVX-512. */
gboolean um_quant_dequantize_row_avx512 (UmDType     t,
                                         const void *src,
                                         float      *dst,
                                         int64_t     n);

G_END_DECLS

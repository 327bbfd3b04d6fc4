/* um-cuda-tiles.h — how the CUDA backend splits a quantized weight into
 * dequantized tiles (a header so tests check it without a GPU). */
#pragma once

#include <glib.h>
#include <stdint.h>

/* Rows per tile: a multiple of 128, so every tile's output (out + r0, f32)
 * and f16 input stay 512-byte aligned and cuBLAS keeps its fastest kernels
 * (k = 12288 would otherwise give 2730-row tiles); at least 128 whatever k,
 * at most the weight's @n rows. */
static inline int64_t
um_cuda_tile_rows (int64_t n, int64_t k, guint64 tile_elems)
{
  int64_t t = (int64_t) (tile_elems / (guint64) MAX (k, 1));
  t -= t % 128;
  return MIN (n, MAX (t, 128));
}

/* um-cuda-decode.h — one element of a stored row (any type of um-quant.h)
 * as a float, on the device: shared by the dequantizing kernels
 * (um-cuda-kernels.cu) and those that decode weights as they multiply
 * (um-cuda-moe.cu). Included by .cu files only. */
#pragma once

#include <cuda_fp16.h>
#include <stddef.h>
#include <stdint.h>

#include "um-dtype.h"
#include "um-quant.h"

/* ---- element decoding ---------------------------------------------------- */

/* Block layouts of um-quant.h, read with byte loads: blocks in a GGUF file
 * are only 2-byte aligned (Q8_0 blocks are 34 bytes), and rows may be
 * uploaded at any offset, so no wider load is ever assumed. */
static_assert (offsetof (UmBlockQ8_0, qs) == 2, "Q8_0 layout");
static_assert (offsetof (UmBlockQ4_0, qs) == 2, "Q4_0 layout");
static_assert (offsetof (UmBlockQ4_1, m) == 2 && offsetof (UmBlockQ4_1, qs) == 4, "Q4_1 layout");
static_assert (offsetof (UmBlockQ5_0, qh) == 2 && offsetof (UmBlockQ5_0, qs) == 6, "Q5_0 layout");
static_assert (offsetof (UmBlockQ5_1, m) == 2 && offsetof (UmBlockQ5_1, qh) == 4 &&
               offsetof (UmBlockQ5_1, qs) == 8, "Q5_1 layout");
static_assert (offsetof (UmBlockQ4_K, dmin) == 2 && offsetof (UmBlockQ4_K, scales) == 4 &&
               offsetof (UmBlockQ4_K, qs) == 16, "Q4_K layout");
static_assert (offsetof (UmBlockQ5_K, dmin) == 2 && offsetof (UmBlockQ5_K, scales) == 4 &&
               offsetof (UmBlockQ5_K, qh) == 16 && offsetof (UmBlockQ5_K, qs) == 48, "Q5_K layout");
static_assert (offsetof (UmBlockQ6_K, qh) == 128 && offsetof (UmBlockQ6_K, scales) == 192 &&
               offsetof (UmBlockQ6_K, d) == 208, "Q6_K layout");

static __device__ __forceinline__ uint32_t
decode_u16 (const uint8_t *p)
{
  return (uint32_t) p[0] | ((uint32_t) p[1] << 8);
}

static __device__ __forceinline__ uint32_t
decode_u32 (const uint8_t *p)
{
  return (uint32_t) p[0] | ((uint32_t) p[1] << 8) | ((uint32_t) p[2] << 16) | ((uint32_t) p[3] << 24);
}

/* f16 → f32 is exact, so this equals um_f16_to_f32 () for every non-NaN. */
static __device__ __forceinline__ float
decode_half (const uint8_t *p)
{
  return __half2float (__ushort_as_half ((unsigned short) decode_u16 (p)));
}

static __device__ __forceinline__ float
bf16_bits_to_float (uint32_t h)
{
  return __uint_as_float (h << 16);
}

/* Element e (0 ≤ e < cols) of a row of type T starting at @row.  ALIGNED
 * (plain types only) says that the row is aligned to its element size, so a
 * single load may be used. */
template <int T, bool ALIGNED>
static __device__ __forceinline__ float
decode_elem (const uint8_t *row, int64_t e)
{
  if (T == UM_DTYPE_F32)
    {
      if (ALIGNED)
        return ((const float *) row)[e];
      return __uint_as_float (decode_u32 (row + 4 * e));
    }
  else if (T == UM_DTYPE_F16)
    {
      if (ALIGNED)
        return __half2float (((const __half *) row)[e]);
      return decode_half (row + 2 * e);
    }
  else if (T == UM_DTYPE_BF16)
    {
      if (ALIGNED)
        return bf16_bits_to_float (((const uint16_t *) row)[e]);
      return bf16_bits_to_float (decode_u16 (row + 2 * e));
    }
  else if (T == UM_DTYPE_Q8_0)
    {
      const uint8_t *b = row + (e / UM_QK8_0) * (int64_t) sizeof (UmBlockQ8_0);
      const int j = (int) (e % UM_QK8_0);
      return __fmul_rn ((float) (int8_t) b[2 + j], decode_half (b));
    }
  else if (T == UM_DTYPE_Q4_0)
    {
      const uint8_t *b = row + (e / UM_QK4_0) * (int64_t) sizeof (UmBlockQ4_0);
      const int j = (int) (e % UM_QK4_0);
      const int q = j < 16 ? (b[2 + j] & 0x0f) : (b[2 + j - 16] >> 4);
      return __fmul_rn ((float) (q - 8), decode_half (b));
    }
  else if (T == UM_DTYPE_Q4_1)
    {
      const uint8_t *b = row + (e / UM_QK4_1) * (int64_t) sizeof (UmBlockQ4_1);
      const int j = (int) (e % UM_QK4_1);
      const int q = j < 16 ? (b[4 + j] & 0x0f) : (b[4 + j - 16] >> 4);
      return __fadd_rn (__fmul_rn ((float) q, decode_half (b)), decode_half (b + 2));
    }
  else if (T == UM_DTYPE_Q5_0)
    {
      const uint8_t *b = row + (e / UM_QK5_0) * (int64_t) sizeof (UmBlockQ5_0);
      const int j = (int) (e % UM_QK5_0);
      const uint32_t qh = decode_u32 (b + 2);
      /* Bit j of qh is the 5th bit of element j, for both nibbles. */
      const int lo = j < 16 ? (b[6 + j] & 0x0f) : (b[6 + j - 16] >> 4);
      const int q = lo | (int) (((qh >> j) & 1u) << 4);
      return __fmul_rn ((float) (q - 16), decode_half (b));
    }
  else if (T == UM_DTYPE_Q5_1)
    {
      const uint8_t *b = row + (e / UM_QK5_1) * (int64_t) sizeof (UmBlockQ5_1);
      const int j = (int) (e % UM_QK5_1);
      const uint32_t qh = decode_u32 (b + 4);
      const int lo = j < 16 ? (b[8 + j] & 0x0f) : (b[8 + j - 16] >> 4);
      const int q = lo | (int) (((qh >> j) & 1u) << 4);
      return __fadd_rn (__fmul_rn ((float) q, decode_half (b)), decode_half (b + 2));
    }
  else if (T == UM_DTYPE_Q4_K || T == UM_DTYPE_Q5_K)
    {
      const int bytes = T == UM_DTYPE_Q4_K ? (int) sizeof (UmBlockQ4_K) : (int) sizeof (UmBlockQ5_K);
      const uint8_t *b = row + (e / UM_QK_K) * (int64_t) bytes;
      const int j = (int) (e % UM_QK_K);
      const int g = j / 64, l = j % 64;
      const int hi = l >= 32, ll = l % 32;
      const int sub = 2 * g + hi;
      const uint8_t *qs = b + (T == UM_DTYPE_Q4_K ? 16 : 48) + 32 * g;
      uint8_t sc, m;
      int q;

      um_quant_get_scale_min_k4 (sub, b + 4, &sc, &m);
      q = hi ? (qs[ll] >> 4) : (qs[ll] & 0x0f);
      if (T == UM_DTYPE_Q5_K)
        q |= ((b[16 + ll] >> sub) & 1) << 4;   /* bit 2g (+1 for high) of qh[l] */
      const float d1 = __fmul_rn (decode_half (b), (float) sc);
      const float m1 = __fmul_rn (decode_half (b + 2), (float) m);
      return __fsub_rn (__fmul_rn (d1, (float) q), m1);
    }
  else if (T == UM_DTYPE_Q6_K)
    {
      const uint8_t *b = row + (e / UM_QK_K) * (int64_t) sizeof (UmBlockQ6_K);
      const int j = (int) (e % UM_QK_K);
      const int h = j / 128, r = j % 128;
      const int quarter = r / 32, l = r % 32;
      /* Quarters 0..3 = low nibble of ql[l], low of ql[l+32], high of ql[l],
       * high of ql[l+32]; bits 2·quarter of qh[l]; scale is + 2·quarter. */
      const uint8_t ql = b[64 * h + l + 32 * (quarter & 1)];
      const uint8_t qh = b[128 + 32 * h + l];
      const int lo = quarter >= 2 ? (ql >> 4) : (ql & 0x0f);
      const int q = (lo | (((qh >> (2 * quarter)) & 3) << 4)) - 32;
      const int8_t sc = (int8_t) b[192 + 8 * h + l / 16 + 2 * quarter];
      return __fmul_rn (__fmul_rn (decode_half (b + 208), (float) sc), (float) q);
    }
  return 0.0f;
}


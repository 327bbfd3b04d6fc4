/* um-half.h — IEEE half and bfloat16 conversions, plain C (no intrinsics)
 * so CPU reference code and future CUDA host code share them. */
#pragma once

#include <stdint.h>
#include <string.h>

static inline float
um_f32_from_bits (uint32_t bits)
{
  float f;
  memcpy (&f, &bits, sizeof f);
  return f;
}

static inline uint32_t
um_f32_to_bits (float f)
{
  uint32_t bits;
  memcpy (&bits, &f, sizeof bits);
  return bits;
}

static inline float
um_bf16_to_f32 (uint16_t h)
{
  return um_f32_from_bits ((uint32_t) h << 16);
}

/* Round to nearest even, as PyTorch does; NaN stays NaN. */
static inline uint16_t
um_f32_to_bf16 (float f)
{
  uint32_t bits = um_f32_to_bits (f);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t) ((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return (uint16_t) (bits >> 16);
}

static inline float
um_f16_to_f32 (uint16_t h)
{
  uint32_t sign = (uint32_t) (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;

  if (exp == 0)
    {
      if (man == 0)
        return um_f32_from_bits (sign);
      /* subnormal: value = man * 2^-24 */
      float v = (float) man * (1.0f / 16777216.0f);
      return sign ? -v : v;
    }
  if (exp == 31)
    return um_f32_from_bits (sign | 0x7f800000u | (man << 13));
  return um_f32_from_bits (sign | ((exp + 112u) << 23) | (man << 13));
}

/* The half at p, which may be unaligned (block fields inside mapped files). */
static inline float
um_f16_load (const void *p)
{
  uint16_t h;
  memcpy (&h, p, sizeof h);
  return um_f16_to_f32 (h);
}

/* Round to nearest even, with overflow to infinity and subnormals. */
static inline uint16_t
um_f32_to_f16 (float f)
{
  uint32_t bits = um_f32_to_bits (f);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t abs_bits = bits & 0x7fffffffu;

  if (abs_bits > 0x7f800000u)
    return (uint16_t) (sign | 0x7e00u);               /* NaN */
  if (abs_bits >= 0x477ff000u)
    return (uint16_t) (sign | 0x7c00u);               /* overflow (rounds to inf) */
  if (abs_bits < 0x38800000u)                         /* below the smallest normal */
    {
      if (abs_bits < 0x33000000u)
        return (uint16_t) sign;                       /* rounds to zero */
      uint32_t e = abs_bits >> 23;
      uint32_t m = (abs_bits & 0x7fffffu) | 0x800000u;
      uint32_t shift = 126u - e;                      /* 14..24 */
      uint32_t half = m >> shift;
      uint32_t rem = m & ((1u << shift) - 1u);
      uint32_t mid = 1u << (shift - 1u);
      if (rem > mid || (rem == mid && (half & 1u)))
        half++;
      return (uint16_t) (sign | half);
    }
  uint32_t r = abs_bits + 0xfffu + ((abs_bits >> 13) & 1u);
  return (uint16_t) (sign | ((r - 0x38000000u) >> 13));
}

/* um-quant-blocks.h — the bytes of llama.cpp's block-quantized weight formats.
 *
 * A fact of the file format (what a GGUF tensor of a quantized type holds),
 * read by the CPU kernels (compute/um-quant.h includes this), the CUDA
 * kernels and the tests alike, so it sits with the other formats.
 *
 * It describes the bytes of each block exactly as ggml (ggml-common.h) lays
 * them out in GGUF files, so that a block pointer into a mapped file can be
 * read directly.  It is plain C11 with no GLib, so CUDA sources (.cu) can
 * include it too.
 *
 * All structs are packed (alignment 1): inside a mapped file a block is only
 * guaranteed to be 2-byte aligned, and not even that when a caller slices
 * rows at odd offsets, so the compiler must never assume more.
 *
 * Halves (ggml_half) are stored as uint16_t bit patterns; convert with
 * um_f16_to_f32 () from um-half.h.
 *
 * Element order inside a block (what dequantization produces):
 *
 *  - Q4_0/Q4_1/Q5_0/Q5_1 (32 elements): byte qs[j] holds element j in its low
 *    nibble and element j + 16 in its high nibble.  For Q5_x, bit j of the
 *    little-endian 32-bit qh is the 5th bit of element j (j = 0..31).
 *  - Q4_K/Q5_K (256 elements, 8 sub-blocks of 32): qs is four 32-byte
 *    groups; group g covers elements 64g..64g+63, low nibbles are elements
 *    64g+l (sub-block 2g), high nibbles 64g+32+l (sub-block 2g+1).  For Q5_K,
 *    bit 2g of qh[l] is the 5th bit of element 64g+l and bit 2g+1 that of
 *    element 64g+32+l.  The eight 6-bit scales and eight 6-bit mins are packed
 *    in scales[12] (see um_quant_get_scale_min_k4 ()); value = d*sc*q - dmin*m.
 *  - Q6_K (256 elements, 16 sub-blocks of 16): two halves of 128 elements;
 *    half h uses ql[64h..64h+63], qh[32h..32h+31], scales[8h..8h+7].  For
 *    l = 0..31: element 128h+l   = low nibble of ql[64h+l]    | bits 0-1 of qh,
 *               element 128h+l+32 = low nibble of ql[64h+l+32] | bits 2-3,
 *               element 128h+l+64 = high nibble of ql[64h+l]   | bits 4-5,
 *               element 128h+l+96 = high nibble of ql[64h+l+32]| bits 6-7,
 *    each minus 32, times d * scales[element / 16].
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define UM_QK4_0 32
#define UM_QK4_1 32
#define UM_QK5_0 32
#define UM_QK5_1 32
#define UM_QK8_0 32
#define UM_QK_K  256
#define UM_K_SCALE_SIZE 12

#if defined(__GNUC__) || defined(__clang__) || defined(__CUDACC__)
#define UM_QUANT_PACKED __attribute__ ((packed))
#else
#define UM_QUANT_PACKED
#endif

/* Small helpers below are usable from CUDA device code as well. */
#ifdef __CUDACC__
#define UM_QUANT_HD __host__ __device__
#else
#define UM_QUANT_HD
#endif

#ifdef __cplusplus
#define UM_QUANT_STATIC_ASSERT(cond, msg) static_assert (cond, msg)
extern "C" {
#else
#define UM_QUANT_STATIC_ASSERT(cond, msg) _Static_assert (cond, msg)
#endif

/* 8-bit, symmetric: value = d * qs[i]. */
typedef struct UM_QUANT_PACKED {
  uint16_t d;
  int8_t   qs[UM_QK8_0];
} UmBlockQ8_0;
UM_QUANT_STATIC_ASSERT (sizeof (UmBlockQ8_0) == 34, "block_q8_0 is 34 bytes");

/* 4-bit, symmetric: value = d * (q - 8). */
typedef struct UM_QUANT_PACKED {
  uint16_t d;
  uint8_t  qs[UM_QK4_0 / 2];
} UmBlockQ4_0;
UM_QUANT_STATIC_ASSERT (sizeof (UmBlockQ4_0) == 18, "block_q4_0 is 18 bytes");

/* 4-bit with offset: value = d * q + m. */
typedef struct UM_QUANT_PACKED {
  uint16_t d;
  uint16_t m;
  uint8_t  qs[UM_QK4_1 / 2];
} UmBlockQ4_1;
UM_QUANT_STATIC_ASSERT (sizeof (UmBlockQ4_1) == 20, "block_q4_1 is 20 bytes");

/* 5-bit, symmetric: value = d * (q - 16). */
typedef struct UM_QUANT_PACKED {
  uint16_t d;
  uint8_t  qh[4];
  uint8_t  qs[UM_QK5_0 / 2];
} UmBlockQ5_0;
UM_QUANT_STATIC_ASSERT (sizeof (UmBlockQ5_0) == 22, "block_q5_0 is 22 bytes");

/* 5-bit with offset: value = d * q + m. */
typedef struct UM_QUANT_PACKED {
  uint16_t d;
  uint16_t m;
  uint8_t  qh[4];
  uint8_t  qs[UM_QK5_1 / 2];
} UmBlockQ5_1;
UM_QUANT_STATIC_ASSERT (sizeof (UmBlockQ5_1) == 24, "block_q5_1 is 24 bytes");

/* 4-bit super-block: 8 sub-blocks of 32, 6-bit scale and min each. */
typedef struct UM_QUANT_PACKED {
  uint16_t d;
  uint16_t dmin;
  uint8_t  scales[UM_K_SCALE_SIZE];
  uint8_t  qs[UM_QK_K / 2];
} UmBlockQ4_K;
UM_QUANT_STATIC_ASSERT (sizeof (UmBlockQ4_K) == 144, "block_q4_K is 144 bytes");

/* 5-bit super-block: as Q4_K plus one high bit per element. */
typedef struct UM_QUANT_PACKED {
  uint16_t d;
  uint16_t dmin;
  uint8_t  scales[UM_K_SCALE_SIZE];
  uint8_t  qh[UM_QK_K / 8];
  uint8_t  qs[UM_QK_K / 2];
} UmBlockQ5_K;
UM_QUANT_STATIC_ASSERT (sizeof (UmBlockQ5_K) == 176, "block_q5_K is 176 bytes");

/* 6-bit super-block: 16 sub-blocks of 16 with signed 8-bit scales. */
typedef struct UM_QUANT_PACKED {
  uint8_t  ql[UM_QK_K / 2];
  uint8_t  qh[UM_QK_K / 4];
  int8_t   scales[UM_QK_K / 16];
  uint16_t d;
} UmBlockQ6_K;
UM_QUANT_STATIC_ASSERT (sizeof (UmBlockQ6_K) == 210, "block_q6_K is 210 bytes");

/* Activation block for the K-quant dot products (never stored in files):
 * value = d * qs[i]; bsums[j] = sum of qs[16j .. 16j+15], which lets the
 * Q4_K/Q5_K dot products apply the mins without touching qs again.
 * Buffers of these are allocated by us, so it keeps natural alignment. */
typedef struct {
  float   d;
  int8_t  qs[UM_QK_K];
  int16_t bsums[UM_QK_K / 16];
} UmBlockQ8_K;
UM_QUANT_STATIC_ASSERT (sizeof (UmBlockQ8_K) == 292, "block_q8_K is 292 bytes");

/* Unpacks the 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K
 * super-block: j < 4 keep them in the low 6 bits of scales[j] and
 * scales[j+4]; j >= 4 put their low 4 bits in the nibbles of scales[j+4] and
 * their top 2 bits in the top bits of scales[j-4] (scale) and scales[j]
 * (min). */
static inline UM_QUANT_HD void
um_quant_get_scale_min_k4 (int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
  if (j < 4)
    {
      *sc = q[j] & 63;
      *m = q[j + 4] & 63;
    }
  else
    {
      *sc = (uint8_t) ((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
      *m = (uint8_t) ((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

#ifdef __cplusplus
}
#endif

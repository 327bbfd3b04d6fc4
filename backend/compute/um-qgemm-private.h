/* um-qgemm-private.h — what the 8-bit integer products (um-qgemm.c: the
 * reference and AVX-512 VNNI; um-qgemm-avx2.c: AVX2 and AVX-VNNI) share:
 * the weight types' arithmetic as um-qgemm.c's header comment defines it,
 * and the argument checks.  Only for those two files. */
#pragma once

#include <glib.h>
#include <stdint.h>
#include <string.h>

#include "um-dtype.h"
#include "um-quant.h"

typedef enum {
  MODE_SYM32,   /* w = a (c - o), units of 32: Q8_0, Q4_0, Q5_0 */
  MODE_SYM16,   /* the same with units of 16: Q6_K */
  MODE_MIN32,   /* w = a c + b, units of 32: Q4_1, Q5_1, Q4_K, Q5_K */
} Mode;

typedef struct {
  Mode   mode;
  int    off;          /* o of the symmetric types */
  int    block;        /* elements per stored block (32 or 256) */
  size_t block_bytes;
} QType;

#define QK 32          /* activation block */

static inline gboolean
qtype_get (UmDType t, QType *q)
{
  switch (t)
    {
    case UM_DTYPE_Q8_0: *q = (QType) { MODE_SYM32, 128, 32, sizeof (UmBlockQ8_0) }; return TRUE;
    case UM_DTYPE_Q4_0: *q = (QType) { MODE_SYM32, 8, 32, sizeof (UmBlockQ4_0) }; return TRUE;
    case UM_DTYPE_Q5_0: *q = (QType) { MODE_SYM32, 16, 32, sizeof (UmBlockQ5_0) }; return TRUE;
    case UM_DTYPE_Q6_K: *q = (QType) { MODE_SYM16, 32, 256, sizeof (UmBlockQ6_K) }; return TRUE;
    case UM_DTYPE_Q4_1: *q = (QType) { MODE_MIN32, 0, 32, sizeof (UmBlockQ4_1) }; return TRUE;
    case UM_DTYPE_Q5_1: *q = (QType) { MODE_MIN32, 0, 32, sizeof (UmBlockQ5_1) }; return TRUE;
    case UM_DTYPE_Q4_K: *q = (QType) { MODE_MIN32, 0, 256, sizeof (UmBlockQ4_K) }; return TRUE;
    case UM_DTYPE_Q5_K: *q = (QType) { MODE_MIN32, 0, 256, sizeof (UmBlockQ5_K) }; return TRUE;
    case UM_DTYPE_F32:
    case UM_DTYPE_F16:
    case UM_DTYPE_BF16:
    case UM_DTYPE_I32:
    case UM_DTYPE_N_TYPES:
    default:
      return FALSE;
    }
}

static inline int
units_per_block32 (Mode mode)
{
  return mode == MODE_SYM16 ? 2 : 1;
}

static inline gboolean
check_args (UmDType t, const void *w, int64_t n, int64_t k, const float *x,
            int64_t m, const float *out, QType *qt)
{
  if (!qtype_get (t, qt) || n < 0 || k < 0 || m < 0)
    return FALSE;
  if (n > G_MAXINT || k > G_MAXINT || m > G_MAXINT || k % qt->block != 0)
    return FALSE;
  if (m > 0 && n > 0 && (out == NULL || (k > 0 && (w == NULL || x == NULL))))
    return FALSE;
  return TRUE;
}

static inline void
zero_out (float *out, int64_t m, int64_t n)
{
  for (int64_t i = 0; i < m; i++)
    memset (out + i * n, 0, (size_t) n * sizeof (float));
}

static inline uint32_t
load_u32 (const void *p)
{
  uint32_t v;
  memcpy (&v, p, sizeof v);
  return v;
}

static inline size_t
align64 (size_t v)
{
  return (v + 63) & ~(size_t) 63;
}

/* um-quant-ref.c — reference (de)quantization of llama.cpp's block formats.
 *
 * Plain scalar C, written for clarity; the fast paths in um-quant.c must
 * reproduce the dequantizers here bit for bit, so each value is computed as
 * exactly one rounding sequence: (float) q times a float scale, then an
 * optional separate add.  This file is built as ISO C11, where GCC does not
 * contract a*b+c into an FMA; do not build it with -ffp-contract=fast.
 *
 * The quantizers follow ggml's reference (non-imatrix) algorithms, which is
 * what llama-quantize runs without an importance matrix, so re-quantizing an
 * F32 tensor gives llama.cpp's bytes (exactly so for the 32-element types;
 * the K-quant searches accumulate float sums whose rounding depends on how
 * ggml was compiled).  Unlike ggml, nothing here asserts: odd lengths are
 * refused, and non-finite inputs give garbage but never undefined behaviour.
 */
#include "um-quant.h"

#include "um-half.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* ggml treats groups whose largest magnitude is below this as all-zero. */
#define UM_GROUP_MAX_EPS 1e-15f

static gboolean
check_len (UmDType t, int64_t n, int64_t *n_blocks)
{
  const UmDTypeInfo *info = um_dtype_info (t);

  if (info == NULL || n < 0 || n % info->block_elems != 0)
    return FALSE;
  *n_blocks = n / info->block_elems;
  return TRUE;
}

/* Block structs are packed, so member reads like b->d are unaligned-safe;
 * plain f16 / bf16 arrays are read through memcpy for the same reason. */
/* Round to nearest, ties to even, like ggml's nearest_int () (which adds
 * 1.5 * 2^23 and reads the mantissa); out-of-range and NaN inputs, which
 * ggml asserts against, saturate so callers' clamps still work. */
static inline int
nearest_int (float f)
{
  float v;
  int32_t i;

  if (!(fabsf (f) <= 4194303.0f))
    return isnan (f) ? 0 : (f > 0 ? 4194303 : -4194303);
  v = f + 12582912.0f;
  memcpy (&i, &v, sizeof i);
  return (i & 0x007fffff) - 0x00400000;
}

/* (int) t truncated toward zero, clamped to [lo, hi]; ggml writes
 * MIN (hi, (int8_t) t) where t is known to lie in range, which is the same
 * for in-range t but undefined for NaN or huge t. */
static inline int
trunc_clamp (float t, int lo, int hi)
{
  if (!(t > (float) lo))
    return lo;
  if (t >= (float) hi)
    return hi;
  return (int) t;
}

static inline int
clamp_int (int v, int lo, int hi)
{
  return v < lo ? lo : (v > hi ? hi : v);
}

/* ---- dequantization ------------------------------------------------------ */

static void
dequant_q8_0 (const UmBlockQ8_0 *b, float *y, int64_t nb)
{
  for (int64_t i = 0; i < nb; i++, y += UM_QK8_0)
    {
      const float d = um_f16_to_f32 (b[i].d);
      for (int j = 0; j < UM_QK8_0; j++)
        y[j] = (float) b[i].qs[j] * d;
    }
}

static void
dequant_q4_0 (const UmBlockQ4_0 *b, float *y, int64_t nb)
{
  for (int64_t i = 0; i < nb; i++, y += UM_QK4_0)
    {
      const float d = um_f16_to_f32 (b[i].d);
      for (int j = 0; j < UM_QK4_0 / 2; j++)
        {
          y[j] = (float) ((b[i].qs[j] & 0x0f) - 8) * d;
          y[j + 16] = (float) ((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void
dequant_q4_1 (const UmBlockQ4_1 *b, float *y, int64_t nb)
{
  for (int64_t i = 0; i < nb; i++, y += UM_QK4_1)
    {
      const float d = um_f16_to_f32 (b[i].d);
      const float m = um_f16_to_f32 (b[i].m);
      for (int j = 0; j < UM_QK4_1 / 2; j++)
        {
          y[j] = (float) (b[i].qs[j] & 0x0f) * d + m;
          y[j + 16] = (float) (b[i].qs[j] >> 4) * d + m;
        }
    }
}

static inline uint32_t
load_qh (const uint8_t *qh)
{
  return (uint32_t) qh[0] | ((uint32_t) qh[1] << 8) |
         ((uint32_t) qh[2] << 16) | ((uint32_t) qh[3] << 24);
}

static void
dequant_q5_0 (const UmBlockQ5_0 *b, float *y, int64_t nb)
{
  for (int64_t i = 0; i < nb; i++, y += UM_QK5_0)
    {
      const float d = um_f16_to_f32 (b[i].d);
      const uint32_t qh = load_qh (b[i].qh);
      for (int j = 0; j < UM_QK5_0 / 2; j++)
        {
          int q0 = (b[i].qs[j] & 0x0f) | (int) (((qh >> j) & 1u) << 4);
          int q1 = (b[i].qs[j] >> 4) | (int) (((qh >> (j + 16)) & 1u) << 4);
          y[j] = (float) (q0 - 16) * d;
          y[j + 16] = (float) (q1 - 16) * d;
        }
    }
}

static void
dequant_q5_1 (const UmBlockQ5_1 *b, float *y, int64_t nb)
{
  for (int64_t i = 0; i < nb; i++, y += UM_QK5_1)
    {
      const float d = um_f16_to_f32 (b[i].d);
      const float m = um_f16_to_f32 (b[i].m);
      const uint32_t qh = load_qh (b[i].qh);
      for (int j = 0; j < UM_QK5_1 / 2; j++)
        {
          int q0 = (b[i].qs[j] & 0x0f) | (int) (((qh >> j) & 1u) << 4);
          int q1 = (b[i].qs[j] >> 4) | (int) (((qh >> (j + 16)) & 1u) << 4);
          y[j] = (float) q0 * d + m;
          y[j + 16] = (float) q1 * d + m;
        }
    }
}

static void
dequant_q4_K (const UmBlockQ4_K *b, float *y, int64_t nb)
{
  for (int64_t i = 0; i < nb; i++)
    {
      const float d = um_f16_to_f32 (b[i].d);
      const float dmin = um_f16_to_f32 (b[i].dmin);
      const uint8_t *q = b[i].qs;

      for (int g = 0; g < 4; g++, q += 32, y += 64)
        {
          uint8_t sc, m;
          um_quant_get_scale_min_k4 (2 * g, b[i].scales, &sc, &m);
          const float d1 = d * (float) sc, m1 = dmin * (float) m;
          um_quant_get_scale_min_k4 (2 * g + 1, b[i].scales, &sc, &m);
          const float d2 = d * (float) sc, m2 = dmin * (float) m;
          for (int l = 0; l < 32; l++)
            {
              y[l] = d1 * (float) (q[l] & 0x0f) - m1;
              y[l + 32] = d2 * (float) (q[l] >> 4) - m2;
            }
        }
    }
}

static void
dequant_q5_K (const UmBlockQ5_K *b, float *y, int64_t nb)
{
  for (int64_t i = 0; i < nb; i++)
    {
      const float d = um_f16_to_f32 (b[i].d);
      const float dmin = um_f16_to_f32 (b[i].dmin);
      const uint8_t *ql = b[i].qs;
      const uint8_t *qh = b[i].qh;

      for (int g = 0; g < 4; g++, ql += 32, y += 64)
        {
          uint8_t sc, m;
          um_quant_get_scale_min_k4 (2 * g, b[i].scales, &sc, &m);
          const float d1 = d * (float) sc, m1 = dmin * (float) m;
          um_quant_get_scale_min_k4 (2 * g + 1, b[i].scales, &sc, &m);
          const float d2 = d * (float) sc, m2 = dmin * (float) m;
          for (int l = 0; l < 32; l++)
            {
              int q0 = (ql[l] & 0x0f) | (((qh[l] >> (2 * g)) & 1) << 4);
              int q1 = (ql[l] >> 4) | (((qh[l] >> (2 * g + 1)) & 1) << 4);
              y[l] = d1 * (float) q0 - m1;
              y[l + 32] = d2 * (float) q1 - m2;
            }
        }
    }
}

static void
dequant_q6_K (const UmBlockQ6_K *b, float *y, int64_t nb)
{
  for (int64_t i = 0; i < nb; i++)
    {
      const float d = um_f16_to_f32 (b[i].d);

      for (int h = 0; h < 2; h++, y += 128)
        {
          const uint8_t *ql = b[i].ql + 64 * h;
          const uint8_t *qh = b[i].qh + 32 * h;
          const int8_t *sc = b[i].scales + 8 * h;

          for (int l = 0; l < 32; l++)
            {
              int is = l / 16;
              int q0 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
              int q1 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
              int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
              int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
              y[l] = (d * (float) sc[is + 0]) * (float) q0;
              y[l + 32] = (d * (float) sc[is + 2]) * (float) q1;
              y[l + 64] = (d * (float) sc[is + 4]) * (float) q2;
              y[l + 96] = (d * (float) sc[is + 6]) * (float) q3;
            }
        }
    }
}

gboolean
um_quant_dequantize_row_ref (UmDType t, const void *src, float *dst, int64_t n)
{
  int64_t nb;

  if (!check_len (t, n, &nb) || (n > 0 && (src == NULL || dst == NULL)))
    return FALSE;

  switch (t)
    {
    case UM_DTYPE_F32:
      memcpy (dst, src, (size_t) n * sizeof (float));
      return TRUE;
    case UM_DTYPE_F16:
      for (int64_t i = 0; i < n; i++)
        dst[i] = um_f16_load ((const uint16_t *) src + i);
      return TRUE;
    case UM_DTYPE_BF16:
      for (int64_t i = 0; i < n; i++)
        {
          uint16_t h;
          memcpy (&h, (const uint16_t *) src + i, sizeof h);
          dst[i] = um_bf16_to_f32 (h);
        }
      return TRUE;
    case UM_DTYPE_Q8_0: dequant_q8_0 (src, dst, nb); return TRUE;
    case UM_DTYPE_Q4_0: dequant_q4_0 (src, dst, nb); return TRUE;
    case UM_DTYPE_Q4_1: dequant_q4_1 (src, dst, nb); return TRUE;
    case UM_DTYPE_Q5_0: dequant_q5_0 (src, dst, nb); return TRUE;
    case UM_DTYPE_Q5_1: dequant_q5_1 (src, dst, nb); return TRUE;
    case UM_DTYPE_Q4_K: dequant_q4_K (src, dst, nb); return TRUE;
    case UM_DTYPE_Q5_K: dequant_q5_K (src, dst, nb); return TRUE;
    case UM_DTYPE_Q6_K: dequant_q6_K (src, dst, nb); return TRUE;
    case UM_DTYPE_I32:
    case UM_DTYPE_N_TYPES:
    default:
      return FALSE;
    }
}

/* ---- 32-element quantizers --------------------------------------------- */

static void
store_half (void *p, float f)
{
  uint16_t h = um_f32_to_f16 (f);
  memcpy (p, &h, sizeof h);
}

/* The value of largest magnitude, with its sign: the symmetric formats map
 * it to the most negative code (-8 or -16), which has no positive twin. */
static float
signed_absmax (const float *x, int n)
{
  float amax = 0.0f, max = 0.0f;

  for (int j = 0; j < n; j++)
    if (amax < fabsf (x[j]))
      {
        amax = fabsf (x[j]);
        max = x[j];
      }
  return max;
}

static void
min_max (const float *x, int n, float *min_out, float *max_out)
{
  float min = FLT_MAX, max = -FLT_MAX;

  for (int j = 0; j < n; j++)
    {
      if (x[j] < min)
        min = x[j];
      if (x[j] > max)
        max = x[j];
    }
  *min_out = min;
  *max_out = max;
}

static void
quant_q8_0 (const float *x, UmBlockQ8_0 *y, int64_t nb)
{
  for (int64_t i = 0; i < nb; i++, x += UM_QK8_0)
    {
      float amax = 0.0f;
      for (int j = 0; j < UM_QK8_0; j++)
        amax = fmaxf (amax, fabsf (x[j]));

      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      y[i].d = um_f32_to_f16 (d);
      /* roundf: ties away from zero, as ggml (not nearest_int's ties to
       * even); the clamp only matters for non-finite input */
      for (int j = 0; j < UM_QK8_0; j++)
        {
          float r = roundf (x[j] * id);
          y[i].qs[j] = (int8_t) (isnan (r) ? 0 : (r >= 127.0f ? 127 : (r <= -127.0f ? -127 : (int) r)));
        }
    }
}

static void
quant_q4_0 (const float *x, UmBlockQ4_0 *y, int64_t nb)
{
  for (int64_t i = 0; i < nb; i++, x += UM_QK4_0)
    {
      const float d = signed_absmax (x, UM_QK4_0) / -8.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;

      y[i].d = um_f32_to_f16 (d);
      for (int j = 0; j < 16; j++)
        {
          int q0 = trunc_clamp (x[j] * id + 8.5f, 0, 15);
          int q1 = trunc_clamp (x[j + 16] * id + 8.5f, 0, 15);
          y[i].qs[j] = (uint8_t) (q0 | (q1 << 4));
        }
    }
}

static void
quant_q4_1 (const float *x, UmBlockQ4_1 *y, int64_t nb)
{
  for (int64_t i = 0; i < nb; i++, x += UM_QK4_1)
    {
      float min, max;
      min_max (x, UM_QK4_1, &min, &max);
      const float d = (max - min) / 15.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;

      y[i].d = um_f32_to_f16 (d);
      y[i].m = um_f32_to_f16 (min);
      for (int j = 0; j < 16; j++)
        {
          int q0 = trunc_clamp ((x[j] - min) * id + 0.5f, 0, 15);
          int q1 = trunc_clamp ((x[j + 16] - min) * id + 0.5f, 0, 15);
          y[i].qs[j] = (uint8_t) (q0 | (q1 << 4));
        }
    }
}

static void
pack_q5 (const int q[32], uint8_t qs[16], uint8_t qh_out[4])
{
  uint32_t qh = 0;

  for (int j = 0; j < 16; j++)
    {
      qs[j] = (uint8_t) ((q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4));
      qh |= (uint32_t) ((q[j] >> 4) & 1) << j;
      qh |= (uint32_t) ((q[j + 16] >> 4) & 1) << (j + 16);
    }
  for (int b = 0; b < 4; b++)
    qh_out[b] = (uint8_t) (qh >> (8 * b));
}

static void
quant_q5_0 (const float *x, UmBlockQ5_0 *y, int64_t nb)
{
  for (int64_t i = 0; i < nb; i++, x += UM_QK5_0)
    {
      const float d = signed_absmax (x, UM_QK5_0) / -16.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      int q[32];

      y[i].d = um_f32_to_f16 (d);
      for (int j = 0; j < 32; j++)
        q[j] = trunc_clamp (x[j] * id + 16.5f, 0, 31);
      pack_q5 (q, y[i].qs, y[i].qh);
    }
}

static void
quant_q5_1 (const float *x, UmBlockQ5_1 *y, int64_t nb)
{
  for (int64_t i = 0; i < nb; i++, x += UM_QK5_1)
    {
      float min, max;
      min_max (x, UM_QK5_1, &min, &max);
      const float d = (max - min) / 31.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      int q[32];

      y[i].d = um_f32_to_f16 (d);
      y[i].m = um_f32_to_f16 (min);
      /* ggml truncates to uint8_t without a clamp; (x - min) * id <= 31
       * up to rounding, so clamping to 31 only matters for odd inputs. */
      for (int j = 0; j < 32; j++)
        q[j] = trunc_clamp ((x[j] - min) * id + 0.5f, 0, 31);
      pack_q5 (q, y[i].qs, y[i].qh);
    }
}

/* ---- K-quant helpers ---------------------------------------------------- */

/* Finds scale and (non-positive) min for an asymmetric nmax-level
 * quantization of x[n] minimising the weighted squared error: start from the
 * min/max grid, then try nstep + 1 slightly different grids and refit scale
 * and min by weighted least squares for each.  ggml's make_qkx2_quants ()
 * (the use_mad = false case).  Returns the scale; *neg_min gets -min. */
static float
make_qkx2_quants (int n, int nmax, const float *x, const float *w,
                  uint8_t *L, float *neg_min, uint8_t *Laux,
                  float rmin, float rdelta, int nstep)
{
  float min = x[0], max = x[0];
  float sum_w = w[0], sum_x = sum_w * x[0];

  for (int i = 1; i < n; i++)
    {
      if (x[i] < min)
        min = x[i];
      if (x[i] > max)
        max = x[i];
      sum_w += w[i];
      sum_x += w[i] * x[i];
    }
  if (min > 0)
    min = 0;
  if (!(max > min))   /* constant zero block, or NaN */
    {
      memset (L, 0, (size_t) n);
      *neg_min = -min;
      return 0.0f;
    }

  float iscale = (float) nmax / (max - min);
  float scale = 1.0f / iscale;
  float best_error = 0.0f;

  for (int i = 0; i < n; i++)
    {
      int l = clamp_int (nearest_int (iscale * (x[i] - min)), 0, nmax);
      L[i] = (uint8_t) l;
      float diff = scale * (float) l + min - x[i];
      best_error += w[i] * (diff * diff);
    }

  for (int is = 0; is <= nstep; is++)
    {
      float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;

      iscale = (rmin + rdelta * (float) is + (float) nmax) / (max - min);
      for (int i = 0; i < n; i++)
        {
          int l = clamp_int (nearest_int (iscale * (x[i] - min)), 0, nmax);
          Laux[i] = (uint8_t) l;
          sum_l += w[i] * (float) l;
          sum_l2 += w[i] * (float) l * (float) l;
          sum_xl += w[i] * (float) l * x[i];
        }

      float D = sum_w * sum_l2 - sum_l * sum_l;
      if (D > 0)
        {
          float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
          float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
          if (this_min > 0)
            {
              this_min = 0;
              this_scale = sum_xl / sum_l2;
            }
          float cur_error = 0.0f;
          for (int i = 0; i < n; i++)
            {
              float diff = this_scale * (float) Laux[i] + this_min - x[i];
              cur_error += w[i] * (diff * diff);
            }
          if (cur_error < best_error)
            {
              memcpy (L, Laux, (size_t) n);
              best_error = cur_error;
              scale = this_scale;
              min = this_min;
            }
        }
    }
  *neg_min = -min;
  return scale;
}

/* Symmetric quantization of x[n] to levels L[i] = q + nmax, q in
 * [-nmax, nmax-1], weighted by x^2 (ggml's make_qx_quants () with rmse_type
 * 1): starts from the grid that maps the largest magnitude to -nmax, then
 * tries 18 nearby grids and keeps the least-squares scale that explains the
 * most of the signal.  Returns the (possibly negative) scale. */
static float
make_qx_quants (int n, int nmax, const float *x, uint8_t *L)
{
  float max = 0.0f, amax = 0.0f;

  for (int i = 0; i < n; i++)
    {
      float ax = fabsf (x[i]);
      if (ax > amax)
        {
          amax = ax;
          max = x[i];
        }
    }
  if (!(amax >= UM_GROUP_MAX_EPS))
    {
      memset (L, 0, (size_t) n);
      return 0.0f;
    }

  float iscale = (float) -nmax / max;
  float sumlx = 0.0f, suml2 = 0.0f;

  for (int i = 0; i < n; i++)
    {
      int l = clamp_int (nearest_int (iscale * x[i]), -nmax, nmax - 1);
      float w = x[i] * x[i];
      L[i] = (uint8_t) (l + nmax);
      sumlx += w * x[i] * (float) l;
      suml2 += w * (float) l * (float) l;
    }

  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;

  for (int is = -9; is <= 9; is++)
    {
      if (is == 0)
        continue;
      iscale = -((float) nmax + 0.1f * (float) is) / max;
      sumlx = suml2 = 0.0f;
      for (int i = 0; i < n; i++)
        {
          int l = clamp_int (nearest_int (iscale * x[i]), -nmax, nmax - 1);
          float w = x[i] * x[i];
          sumlx += w * x[i] * (float) l;
          suml2 += w * (float) l * (float) l;
        }
      if (suml2 > 0 && sumlx * sumlx > best * suml2)
        {
          for (int i = 0; i < n; i++)
            L[i] = (uint8_t) (clamp_int (nearest_int (iscale * x[i]), -nmax, nmax - 1) + nmax);
          scale = sumlx / suml2;
          best = scale * sumlx;
        }
    }
  return scale;
}

/* Packs eight 6-bit scales and mins the way um_quant_get_scale_min_k4 ()
 * unpacks them. */
static void
pack_scale_min_k4 (const int ls[8], const int lm[8], uint8_t q[12])
{
  memset (q, 0, 12);
  for (int j = 0; j < 8; j++)
    {
      if (j < 4)
        {
          q[j] = (uint8_t) ls[j];
          q[j + 4] = (uint8_t) lm[j];
        }
      else
        {
          q[j + 4] = (uint8_t) ((ls[j] & 0x0f) | ((lm[j] & 0x0f) << 4));
          q[j - 4] |= (uint8_t) ((ls[j] >> 4) << 6);
          q[j] |= (uint8_t) ((lm[j] >> 4) << 6);
        }
    }
}

/* Shared first half of the Q4_K and Q5_K quantizers: per 32-element
 * sub-block scale/min search, 6-bit quantization of those against the block
 * maxima, then the final per-element levels L[256] in 0..nmax against the
 * stored (rounded) scales. */
static void
quant_k_scales (const float *x, int nmax, float rmin, int nstep,
                uint16_t *d_out, uint16_t *dmin_out, uint8_t scales_out[12],
                uint8_t L[UM_QK_K])
{
  float scales[8], mins[8], weights[32];
  uint8_t Laux[32];
  float max_scale = 0.0f, max_min = 0.0f;
  int ls[8], lm[8];

  for (int j = 0; j < 8; j++)
    {
      const float *xs = x + 32 * j;
      float sum_x2 = 0.0f;

      for (int l = 0; l < 32; l++)
        sum_x2 += xs[l] * xs[l];
      const float av_x = sqrtf (sum_x2 / 32.0f);
      for (int l = 0; l < 32; l++)
        weights[l] = av_x + fabsf (xs[l]);
      scales[j] = make_qkx2_quants (32, nmax, xs, weights, L + 32 * j, &mins[j],
                                    Laux, rmin, 0.1f, nstep);
      if (scales[j] > max_scale)
        max_scale = scales[j];
      if (mins[j] > max_min)
        max_min = mins[j];
    }

  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  for (int j = 0; j < 8; j++)
    {
      ls[j] = clamp_int (nearest_int (inv_scale * scales[j]), 0, 63);
      lm[j] = clamp_int (nearest_int (inv_min * mins[j]), 0, 63);
    }
  pack_scale_min_k4 (ls, lm, scales_out);
  *d_out = um_f32_to_f16 (max_scale / 63.0f);
  *dmin_out = um_f32_to_f16 (max_min / 63.0f);

  /* The final levels are fitted to the scales as stored, after rounding. */
  const float d_all = um_f16_to_f32 (*d_out);
  const float dmin_all = um_f16_to_f32 (*dmin_out);
  for (int j = 0; j < 8; j++)
    {
      uint8_t sc, m;
      um_quant_get_scale_min_k4 (j, scales_out, &sc, &m);
      const float d = d_all * (float) sc;
      if (d == 0.0f)
        continue;   /* keep the levels from the search, as ggml does */
      const float dm = dmin_all * (float) m;
      for (int l = 0; l < 32; l++)
        L[32 * j + l] = (uint8_t) clamp_int (nearest_int ((x[32 * j + l] + dm) / d), 0, nmax);
    }
}

static void
quant_q4_K (const float *x, UmBlockQ4_K *y, int64_t nb)
{
  uint8_t L[UM_QK_K];

  for (int64_t i = 0; i < nb; i++, x += UM_QK_K)
    {
      uint16_t d, dmin;
      quant_k_scales (x, 15, -1.0f, 20, &d, &dmin, y[i].scales, L);
      y[i].d = d;
      y[i].dmin = dmin;
      for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++)
          y[i].qs[32 * g + l] = (uint8_t) (L[64 * g + l] | (L[64 * g + 32 + l] << 4));
    }
}

static void
quant_q5_K (const float *x, UmBlockQ5_K *y, int64_t nb)
{
  uint8_t L[UM_QK_K];

  for (int64_t i = 0; i < nb; i++, x += UM_QK_K)
    {
      uint16_t d, dmin;
      quant_k_scales (x, 31, -0.5f, 15, &d, &dmin, y[i].scales, L);
      y[i].d = d;
      y[i].dmin = dmin;
      memset (y[i].qh, 0, sizeof y[i].qh);
      for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++)
          {
            int l0 = L[64 * g + l], l1 = L[64 * g + 32 + l];
            y[i].qs[32 * g + l] = (uint8_t) ((l0 & 0x0f) | ((l1 & 0x0f) << 4));
            y[i].qh[l] |= (uint8_t) (((l0 >> 4) << (2 * g)) | ((l1 >> 4) << (2 * g + 1)));
          }
    }
}

static void
quant_q6_K (const float *x, UmBlockQ6_K *y, int64_t nb)
{
  for (int64_t i = 0; i < nb; i++, x += UM_QK_K)
    {
      float scales[16];
      float max_scale = 0.0f, max_abs_scale = 0.0f;
      uint8_t L[UM_QK_K];

      for (int ib = 0; ib < 16; ib++)
        {
          scales[ib] = make_qx_quants (16, 32, x + 16 * ib, L + 16 * ib);
          if (fabsf (scales[ib]) > max_abs_scale)
            {
              max_abs_scale = fabsf (scales[ib]);
              max_scale = scales[ib];
            }
        }

      memset (&y[i], 0, sizeof y[i]);
      if (!(max_abs_scale >= UM_GROUP_MAX_EPS))
        continue;   /* all zero: d = 0 and zero bytes, as ggml writes */

      /* The largest scale maps to -128 so that its sign is free. */
      const float iscale = -128.0f / max_scale;
      y[i].d = um_f32_to_f16 (1.0f / iscale);
      for (int ib = 0; ib < 16; ib++)
        y[i].scales[ib] = (int8_t) clamp_int (nearest_int (iscale * scales[ib]), -128, 127);

      /* Sub-blocks whose 8-bit scale rounds to 0 keep the search's levels,
       * as in ggml: they dequantize to 0 whatever they are, but this way
       * the bytes match llama.cpp's. */
      const float d_all = um_f16_to_f32 (y[i].d);
      for (int j = 0; j < 16; j++)
        {
          const float d = d_all * (float) y[i].scales[j];
          if (d == 0.0f)
            continue;
          for (int l = 0; l < 16; l++)
            L[16 * j + l] = (uint8_t) (clamp_int (nearest_int (x[16 * j + l] / d), -32, 31) + 32);
        }

      for (int h = 0; h < 2; h++)
        {
          uint8_t *ql = y[i].ql + 64 * h;
          uint8_t *qh = y[i].qh + 32 * h;
          const uint8_t *Lh = L + 128 * h;
          for (int l = 0; l < 32; l++)
            {
              ql[l] = (uint8_t) ((Lh[l] & 0x0f) | ((Lh[l + 64] & 0x0f) << 4));
              ql[l + 32] = (uint8_t) ((Lh[l + 32] & 0x0f) | ((Lh[l + 96] & 0x0f) << 4));
              qh[l] = (uint8_t) ((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) |
                                 ((Lh[l + 64] >> 4) << 4) | ((Lh[l + 96] >> 4) << 6));
            }
        }
    }
}

gboolean
um_quant_quantize_row_ref (UmDType t, const float *src, void *dst, int64_t n)
{
  int64_t nb;

  if (!check_len (t, n, &nb) || (n > 0 && (src == NULL || dst == NULL)))
    return FALSE;

  switch (t)
    {
    case UM_DTYPE_F32:
      memcpy (dst, src, (size_t) n * sizeof (float));
      return TRUE;
    case UM_DTYPE_F16:
      for (int64_t i = 0; i < n; i++)
        store_half ((uint16_t *) dst + i, src[i]);
      return TRUE;
    case UM_DTYPE_BF16:
      for (int64_t i = 0; i < n; i++)
        {
          uint16_t h = um_f32_to_bf16 (src[i]);
          memcpy ((uint16_t *) dst + i, &h, sizeof h);
        }
      return TRUE;
    case UM_DTYPE_Q8_0: quant_q8_0 (src, dst, nb); return TRUE;
    case UM_DTYPE_Q4_0: quant_q4_0 (src, dst, nb); return TRUE;
    case UM_DTYPE_Q4_1: quant_q4_1 (src, dst, nb); return TRUE;
    case UM_DTYPE_Q5_0: quant_q5_0 (src, dst, nb); return TRUE;
    case UM_DTYPE_Q5_1: quant_q5_1 (src, dst, nb); return TRUE;
    case UM_DTYPE_Q4_K: quant_q4_K (src, dst, nb); return TRUE;
    case UM_DTYPE_Q5_K: quant_q5_K (src, dst, nb); return TRUE;
    case UM_DTYPE_Q6_K: quant_q6_K (src, dst, nb); return TRUE;
    case UM_DTYPE_I32:
    case UM_DTYPE_N_TYPES:
    default:
      return FALSE;
    }
}

/* ---- activation quantizers ---------------------------------------------- */

gboolean
um_quant_quantize_row_q8_0_ref (const float *x, UmBlockQ8_0 *y, int64_t n)
{
  if (n < 0 || n % UM_QK8_0 != 0 || (n > 0 && (x == NULL || y == NULL)))
    return FALSE;
  quant_q8_0 (x, y, n / UM_QK8_0);
  return TRUE;
}

gboolean
um_quant_quantize_row_q8_K_ref (const float *x, UmBlockQ8_K *y, int64_t n)
{
  if (n < 0 || n % UM_QK_K != 0 || (n > 0 && (x == NULL || y == NULL)))
    return FALSE;

  for (int64_t i = 0; i < n / UM_QK_K; i++, x += UM_QK_K)
    {
      float amax = 0.0f;
      for (int j = 0; j < UM_QK_K; j++)
        amax = fmaxf (amax, fabsf (x[j]));

      /* Symmetric to +-127 so that negating a code never overflows. */
      if (!(amax > 0.0f) || !isfinite (amax))
        {
          memset (&y[i], 0, sizeof y[i]);
          continue;
        }
      const float iscale = 127.0f / amax;
      y[i].d = amax / 127.0f;
      for (int j = 0; j < UM_QK_K; j++)
        y[i].qs[j] = (int8_t) clamp_int (nearest_int (iscale * x[j]), -127, 127);
      for (int g = 0; g < UM_QK_K / 16; g++)
        {
          int sum = 0;
          for (int l = 0; l < 16; l++)
            sum += y[i].qs[16 * g + l];
          y[i].bsums[g] = (int16_t) sum;
        }
    }
  return TRUE;
}

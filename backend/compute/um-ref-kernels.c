#include "um-ref-kernels.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "um-error.h"
#include "um-half.h"
#include "um-quant.h"

void
um_ref_weight_row (const UmWeight *w, uint64_t r, double *out)
{
  const guint8 *row = (const guint8 *) w->data + r * w->row_bytes;
  g_autofree float *tmp = NULL;

  switch (w->dtype)
    {
    case UM_DTYPE_F32:
      for (uint64_t i = 0; i < w->cols; i++)
        {
          float f;
          memcpy (&f, row + 4 * i, 4);
          out[i] = f;
        }
      return;
    case UM_DTYPE_F16:
    case UM_DTYPE_BF16:
      for (uint64_t i = 0; i < w->cols; i++)
        {
          uint16_t h;
          memcpy (&h, row + 2 * i, 2);
          out[i] = w->dtype == UM_DTYPE_F16 ? um_f16_to_f32 (h) : um_bf16_to_f32 (h);
        }
      return;
    default:
      tmp = g_new (float, w->cols);
      um_quant_dequantize_row_ref (w->dtype, row, tmp, w->cols);
      for (uint64_t i = 0; i < w->cols; i++)
        out[i] = tmp[i];
      return;
    }
}


/* Weights are float values in every format, so this is exact too. */
static void
um_ref32_weight_row (const UmWeight *w, uint64_t r, float *out)
{
  um_quant_dequantize_row_ref (w->dtype, (const guint8 *) w->data + r * w->row_bytes, out, w->cols);
}

/* Set by um_ref_forward_int8_blocks () for the pass it runs. */
static _Thread_local gboolean int8_activations;

/* The weight types whose products take 8-bit activations (um-gemm.h's
 * um_qgemm_supported_type (), written out here so the reference stays
 * independent of the code it checks). */
static gboolean
takes_int8 (UmDType t)
{
  switch (t)
    {
    case UM_DTYPE_Q8_0: case UM_DTYPE_Q4_0: case UM_DTYPE_Q4_1: case UM_DTYPE_Q5_0: case UM_DTYPE_Q5_1:
    case UM_DTYPE_Q4_K: case UM_DTYPE_Q5_K: case UM_DTYPE_Q6_K:
      return TRUE;
    default:
      return FALSE;
    }
}

/* The activations x[m, w->cols] a product with @w multiplies: x itself, or
 * in an 8-bit pass with a quantized @w, x rounded by the documented rule of
 * um-qgemm.c: per block of 32 values (as float32) dx = max |x| / 127,
 * q = x · (1 / dx) rounded half to even, the value dx · q (exact in double);
 * blocks with dx below FLT_MIN are zeros. */
static const double *
um_ref_activations (const double *x, int64_t m, const UmWeight *w, double **rounded)
{
  const int64_t k = (int64_t) w->cols;

  if (!int8_activations || !takes_int8 (w->dtype) || k % 32 != 0)
    return x;
  *rounded = g_new (double, (size_t) (m * k));
  for (int64_t i = 0; i < m * k; i += 32)
    {
      float xf[32], amax = 0.0f, d, id;
      for (int e = 0; e < 32; e++)
        {
          xf[e] = (float) x[i + e];
          amax = fmaxf (amax, fabsf (xf[e]));
        }
      d = amax / 127.0f;
      id = d >= FLT_MIN ? 1.0f / d : 0.0f;
      for (int e = 0; e < 32; e++)
        (*rounded)[i + e] = d >= FLT_MIN ? (double) d * (double) nearbyintf (xf[e] * id) : 0.0;
    }
  return *rounded;
}

/* The float32 instance never rounds activations. */
static const float *
um_ref32_activations (const float *x, int64_t m, const UmWeight *w, float **rounded)
{
  (void) m;
  (void) w;
  (void) rounded;
  return x;
}

#define REAL double
#define FN(name) um_ref_##name
#define R_SQRT sqrt
#define R_EXP exp
#include "um-ref-kernels-impl.h"
#undef REAL
#undef FN
#undef R_SQRT
#undef R_EXP

/* The float32 instance: only the forward pass is exported; the kernels are
 * declared here so -Wmissing-prototypes holds. */
#define REAL float
#define FN(name) um_ref32_##name
#define R_SQRT sqrtf
#define R_EXP expf
void um_ref32_matmul (const float *x, int64_t m, const UmWeight *w, float *out);
void um_ref32_rms_norm (const float *x, int64_t rows, int64_t dim, const float *w, float eps, float *out);
void um_ref32_rope (float *x, int64_t rows, const gint32 *pos, int n_heads, int head_dim, int rope_dim,
                    double theta, gboolean interleaved);
void um_ref32_attention (const float *q, const float *k, const float *v, int64_t seq_len, const gint32 *kv_len,
                         int n_heads, int n_kv_heads, int head_dim, float *out);
void um_ref32_swiglu (const float *gate, const float *up, size_t n, float *out);
void um_ref32_moe_route (const UmModelConfig *cfg, guint n_experts, const float *z, const float *bias,
                         guint *chosen, float *weights);
#include "um-ref-kernels-impl.h"

gboolean
um_ref_forward_int8_blocks (const UmModel *model, const gint32 *ids, int seq_len, int block_len, double *logits,
                            GError **error)
{
  gboolean ok;

  int8_activations = TRUE;
  ok = um_ref_forward_blocks (model, ids, seq_len, block_len, logits, error);
  int8_activations = FALSE;
  return ok;
}

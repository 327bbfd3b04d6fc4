#include "um-ref-kernels.h"

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

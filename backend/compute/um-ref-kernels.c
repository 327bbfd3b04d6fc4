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

void
um_ref_matmul (const double *x, int64_t m, const UmWeight *w, double *out)
{
  g_autofree double *row = g_new (double, w->cols);

  for (uint64_t j = 0; j < w->rows; j++)
    {
      um_ref_weight_row (w, j, row);
      for (int64_t i = 0; i < m; i++)
        {
          double acc = 0.0;
          for (uint64_t c = 0; c < w->cols; c++)
            acc += x[i * w->cols + c] * row[c];
          out[i * w->rows + j] = acc;
        }
    }
}

void
um_ref_rms_norm (const double *x, int64_t rows, int64_t dim, const float *w, double eps, double *out)
{
  for (int64_t r = 0; r < rows; r++)
    {
      double ss = 0.0;
      for (int64_t i = 0; i < dim; i++)
        ss += x[r * dim + i] * x[r * dim + i];
      double scale = 1.0 / sqrt (ss / dim + eps);
      for (int64_t i = 0; i < dim; i++)
        out[r * dim + i] = x[r * dim + i] * scale * w[i];
    }
}

void
um_ref_rope (double *x, int64_t rows, const gint32 *pos, int n_heads, int head_dim,
             double theta, gboolean interleaved)
{
  const int half = head_dim / 2;
  for (int64_t r = 0; r < rows; r++)
    for (int h = 0; h < n_heads; h++)
      {
        double *v = x + (r * n_heads + h) * head_dim;
        for (int i = 0; i < half; i++)
          {
            double angle = pos[r] * pow (theta, -2.0 * i / head_dim);
            int a = interleaved ? 2 * i : i;
            int b = interleaved ? 2 * i + 1 : i + half;
            double x0 = v[a], x1 = v[b];
            v[a] = x0 * cos (angle) - x1 * sin (angle);
            v[b] = x1 * cos (angle) + x0 * sin (angle);
          }
      }
}

void
um_ref_attention (const double *q, const double *k, const double *v, int64_t seq_len,
                  int n_heads, int n_kv_heads, int head_dim, double *out)
{
  const int64_t qs = (int64_t) n_heads * head_dim, kvs = (int64_t) n_kv_heads * head_dim;
  g_autofree double *p = g_new (double, seq_len);

  for (int h = 0; h < n_heads; h++)
    {
      int kvh = h / (n_heads / n_kv_heads);
      for (int64_t i = 0; i < seq_len; i++)
        {
          double mx = -INFINITY, sum = 0.0;
          for (int64_t j = 0; j < seq_len; j++)
            {
              double s = 0.0;
              for (int d = 0; d < head_dim; d++)
                s += q[i * qs + h * head_dim + d] * k[j * kvs + kvh * head_dim + d];
              p[j] = s / sqrt ((double) head_dim);
              mx = MAX (mx, p[j]);
            }
          for (int64_t j = 0; j < seq_len; j++)
            {
              p[j] = exp (p[j] - mx);
              sum += p[j];
            }
          for (int d = 0; d < head_dim; d++)
            {
              double acc = 0.0;
              for (int64_t j = 0; j < seq_len; j++)
                acc += p[j] * v[j * kvs + kvh * head_dim + d];
              out[i * qs + h * head_dim + d] = acc / sum;
            }
        }
    }
}

void
um_ref_swiglu (const double *gate, const double *up, size_t n, double *out)
{
  for (size_t i = 0; i < n; i++)
    out[i] = gate[i] / (1.0 + exp (-gate[i])) * up[i];
}

gboolean
um_ref_forward (const UmModel *model, const gint32 *ids, int seq_len, double *logits,
                GError **error)
{
  const UmModelConfig *c = &model->cfg;
  const int64_t L = seq_len, D = c->d_model, F = c->mlp_hidden;
  const int H = c->n_heads, Hkv = c->n_kv_heads, hd = c->head_dim;
  g_autofree double *x = g_new (double, L * D), *h = g_new (double, L * D);
  g_autofree double *q = g_new (double, L * D), *k = g_new (double, L * Hkv * hd);
  g_autofree double *v = g_new (double, L * Hkv * hd), *att = g_new (double, L * D);
  g_autofree double *g = g_new (double, L * F), *u = g_new (double, L * F);
  g_autofree gint32 *pos = g_new (gint32, L);

  for (int64_t t = 0; t < L; t++)
    {
      if (ids[t] < 0 || (guint) ids[t] >= c->vocab_size)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "token id %d outside the vocabulary", ids[t]);
          return FALSE;
        }
      um_ref_weight_row (&model->tok_embd, ids[t], x + t * D);
      pos[t] = t;
    }
  for (guint l = 0; l < c->n_layers; l++)
    {
      const UmLayerWeights *W = &model->layers[l];
      um_ref_rms_norm (x, L, D, W->attn_norm.data, c->rms_eps, h);
      um_ref_matmul (h, L, &W->wq, q);
      um_ref_matmul (h, L, &W->wk, k);
      um_ref_matmul (h, L, &W->wv, v);
      um_ref_rope (q, L, pos, H, hd, c->rope_theta, c->rope_interleaved);
      um_ref_rope (k, L, pos, Hkv, hd, c->rope_theta, c->rope_interleaved);
      um_ref_attention (q, k, v, L, H, Hkv, hd, att);
      um_ref_matmul (att, L, &W->wo, h);
      for (int64_t i = 0; i < L * D; i++)
        x[i] += h[i];
      um_ref_rms_norm (x, L, D, W->ffn_norm.data, c->rms_eps, h);
      um_ref_matmul (h, L, &W->w_gate, g);
      um_ref_matmul (h, L, &W->w_up, u);
      um_ref_swiglu (g, u, L * F, g);
      um_ref_matmul (g, L, &W->w_down, h);
      for (int64_t i = 0; i < L * D; i++)
        x[i] += h[i];
    }
  um_ref_rms_norm (x, L, D, model->out_norm.data, c->rms_eps, h);
  um_ref_matmul (h, L, &model->output, logits);
  return TRUE;
}

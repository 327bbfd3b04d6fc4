/* um-ref-kernels-impl.h — the reference kernels and forward pass, written
 * once and instantiated by um-ref-kernels.c in double (the reference) and in
 * float (an independent, naive float32 computation whose distance from the
 * double one tells the tests how much float32 rounding alone costs on a
 * given model).  Expects REAL, FN (), R_SQRT and R_EXP. */

void
FN (matmul) (const REAL *x, int64_t m, const UmWeight *w, REAL *out)
{
  g_autofree REAL *row = g_new (REAL, w->cols);

  for (uint64_t j = 0; j < w->rows; j++)
    {
      FN (weight_row) (w, j, row);
      for (int64_t i = 0; i < m; i++)
        {
          REAL acc = 0;
          for (uint64_t c = 0; c < w->cols; c++)
            acc += x[i * w->cols + c] * row[c];
          out[i * w->rows + j] = acc;
        }
    }
}

void
FN (rms_norm) (const REAL *x, int64_t rows, int64_t dim, const float *w, REAL eps, REAL *out)
{
  for (int64_t r = 0; r < rows; r++)
    {
      REAL ss = 0;
      for (int64_t i = 0; i < dim; i++)
        ss += x[r * dim + i] * x[r * dim + i];
      REAL scale = 1 / R_SQRT (ss / dim + eps);
      for (int64_t i = 0; i < dim; i++)
        out[r * dim + i] = x[r * dim + i] * scale * w[i];
    }
}

void
FN (rope) (REAL *x, int64_t rows, const gint32 *pos, int n_heads, int head_dim,
             double theta, gboolean interleaved)
{
  const int half = head_dim / 2;
  for (int64_t r = 0; r < rows; r++)
    for (int h = 0; h < n_heads; h++)
      {
        REAL *v = x + (r * n_heads + h) * head_dim;
        for (int i = 0; i < half; i++)
          {
            /* The angle in double at every precision: float32 code also
             * computes it carefully (LLaDA's rope_full_precision). */
            double angle = pos[r] * pow (theta, -2.0 * i / head_dim);
            const REAL c = (REAL) cos (angle), s = (REAL) sin (angle);
            int a = interleaved ? 2 * i : i;
            int b = interleaved ? 2 * i + 1 : i + half;
            REAL x0 = v[a], x1 = v[b];
            v[a] = x0 * c - x1 * s;
            v[b] = x1 * c + x0 * s;
          }
      }
}

void
FN (attention) (const REAL *q, const REAL *k, const REAL *v, int64_t seq_len,
                int n_heads, int n_kv_heads, int head_dim, REAL *out)
{
  const int64_t qs = (int64_t) n_heads * head_dim, kvs = (int64_t) n_kv_heads * head_dim;
  g_autofree REAL *p = g_new (REAL, seq_len);

  for (int h = 0; h < n_heads; h++)
    {
      int kvh = h / (n_heads / n_kv_heads);
      for (int64_t i = 0; i < seq_len; i++)
        {
          REAL mx = -INFINITY, sum = 0;
          for (int64_t j = 0; j < seq_len; j++)
            {
              REAL s = 0;
              for (int d = 0; d < head_dim; d++)
                s += q[i * qs + h * head_dim + d] * k[j * kvs + kvh * head_dim + d];
              p[j] = s / R_SQRT ((REAL) head_dim);
              mx = MAX (mx, p[j]);
            }
          for (int64_t j = 0; j < seq_len; j++)
            {
              p[j] = R_EXP (p[j] - mx);
              sum += p[j];
            }
          for (int d = 0; d < head_dim; d++)
            {
              REAL acc = 0;
              for (int64_t j = 0; j < seq_len; j++)
                acc += p[j] * v[j * kvs + kvh * head_dim + d];
              out[i * qs + h * head_dim + d] = acc / sum;
            }
        }
    }
}

void
FN (swiglu) (const REAL *gate, const REAL *up, size_t n, REAL *out)
{
  for (size_t i = 0; i < n; i++)
    out[i] = gate[i] / (1 + R_EXP (-gate[i])) * up[i];
}

/* x[rows, n] += b[n] */
static void
FN (add_bias) (REAL *x, int64_t rows, const UmWeight *b)
{
  const float *bv = b->data;
  for (int64_t r = 0; r < rows; r++)
    for (uint64_t i = 0; i < b->cols; i++)
      x[r * b->cols + i] += bv[i];
}

/* One token's mixture of experts, as llama.cpp's build_moe_ffn: router
 * probabilities (softmax or sigmoid of x · routerᵀ), the top n_experts_used
 * by probability plus the selection bias (ties to the lower index), their
 * unbiased probabilities as weights, renormalised (sum clamped as llama.cpp
 * does) and scaled when the configuration says so, and out = Σ w_e ·
 * down_e (silu (gate_e x) · up_e x). */
static void
FN (moe_ffn) (const UmModelConfig *c, const UmLayerWeights *W, const REAL *x, REAL *out)
{
  const guint E = W->n_experts, K = c->n_experts_used;
  const int64_t D = c->d_model, F = W->ffn;
  g_autofree REAL *p = g_new (REAL, E), *sel = g_new (REAL, E);
  g_autofree REAL *g = g_new (REAL, F), *u = g_new (REAL, F), *y = g_new (REAL, D);
  g_autofree guint *chosen = g_new (guint, K);
  g_autofree gboolean *taken = g_new0 (gboolean, E);
  g_autofree REAL *w = g_new (REAL, K);
  REAL mx = -INFINITY, sum = 0;

  FN (matmul) (x, 1, &W->router, p);
  if (c->router_func == UM_ROUTER_SIGMOID)
    for (guint e = 0; e < E; e++)
      p[e] = 1 / (1 + R_EXP (-p[e]));
  else
    {
      for (guint e = 0; e < E; e++)
        mx = MAX (mx, p[e]);
      for (guint e = 0; e < E; e++)
        sum += p[e] = R_EXP (p[e] - mx);
      for (guint e = 0; e < E; e++)
        p[e] /= sum;
    }
  for (guint e = 0; e < E; e++)
    sel[e] = p[e] + (W->router_bias.data != NULL ? ((const float *) W->router_bias.data)[e] : 0);
  sum = 0;
  for (guint k = 0; k < K; k++)
    {
      guint best = E;
      for (guint e = 0; e < E; e++)
        if (!taken[e] && (best == E || sel[e] > sel[best]))
          best = e;
      taken[best] = TRUE;
      chosen[k] = best;
      w[k] = p[best];
      sum += w[k];
    }
  for (guint k = 0; k < K; k++)
    {
      if (c->router_norm)
        w[k] /= MAX (sum, (REAL) 6.103515625e-5);
      if (c->router_scale != 1.0)
        w[k] *= (REAL) c->router_scale;
    }
  for (int64_t i = 0; i < D; i++)
    out[i] = 0;
  for (guint k = 0; k < K; k++)
    {
      UmWeight gate = um_weight_expert (&W->w_gate, E, chosen[k]);
      UmWeight up = um_weight_expert (&W->w_up, E, chosen[k]);
      UmWeight down = um_weight_expert (&W->w_down, E, chosen[k]);
      FN (matmul) (x, 1, &gate, g);
      FN (matmul) (x, 1, &up, u);
      FN (swiglu) (g, u, F, g);
      FN (matmul) (g, 1, &down, y);
      for (int64_t i = 0; i < D; i++)
        out[i] += w[k] * y[i];
    }
}

gboolean
FN (forward) (const UmModel *model, const gint32 *ids, int seq_len, REAL *logits,
              GError **error)
{
  const UmModelConfig *c = &model->cfg;
  const int64_t L = seq_len, D = c->d_model;
  const int hd = c->head_dim;
  int64_t max_q = 0, max_kv = 0, max_f = 0;
  g_autofree REAL *x = NULL, *h = NULL, *q = NULL, *k = NULL, *v = NULL, *att = NULL;
  g_autofree REAL *g = NULL, *u = NULL;
  g_autofree gint32 *pos = g_new (gint32, L);

  /* Each layer has its own counts (pruned models): size for the widest. */
  for (guint l = 0; l < c->n_layers; l++)
    {
      const UmLayerWeights *W = &model->layers[l];
      max_q = MAX (max_q, (int64_t) W->n_heads * hd);
      max_kv = MAX (max_kv, (int64_t) W->n_kv_heads * hd);
      max_f = MAX (max_f, (int64_t) W->ffn);
    }
  x = g_new (REAL, L * D);
  h = g_new (REAL, L * D);
  q = g_new (REAL, L * MAX (max_q, 1));
  k = g_new (REAL, L * MAX (max_kv, 1));
  v = g_new (REAL, L * MAX (max_kv, 1));
  att = g_new (REAL, L * MAX (max_q, 1));
  g = g_new (REAL, L * MAX (max_f, 1));
  u = g_new (REAL, L * MAX (max_f, 1));
  for (int64_t t = 0; t < L; t++)
    {
      if (ids[t] < 0 || (guint) ids[t] >= c->vocab_size)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "token id %d outside the vocabulary", ids[t]);
          return FALSE;
        }
      FN (weight_row) (&model->tok_embd, ids[t], x + t * D);
      pos[t] = t;
    }
  for (guint l = 0; l < c->n_layers; l++)
    {
      const UmLayerWeights *W = &model->layers[l];
      const int H = W->n_heads, Hkv = W->n_kv_heads;
      const int64_t F = W->ffn;
      FN (rms_norm) (x, L, D, W->attn_norm.data, (REAL) c->rms_eps, h);
      FN (matmul) (h, L, &W->wq, q);
      FN (matmul) (h, L, &W->wk, k);
      FN (matmul) (h, L, &W->wv, v);
      if (W->bq.data != NULL)
        {
          FN (add_bias) (q, L, &W->bq);
          FN (add_bias) (k, L, &W->bk);
          FN (add_bias) (v, L, &W->bv);
        }
      /* QK-norm: each head's vector on its own, before the rotation. */
      if (W->q_norm.data != NULL)
        {
          FN (rms_norm) (q, L * H, hd, W->q_norm.data, (REAL) c->rms_eps, q);
          FN (rms_norm) (k, L * Hkv, hd, W->k_norm.data, (REAL) c->rms_eps, k);
        }
      FN (rope) (q, L, pos, H, hd, c->rope_theta, c->rope_interleaved);
      FN (rope) (k, L, pos, Hkv, hd, c->rope_theta, c->rope_interleaved);
      FN (attention) (q, k, v, L, H, Hkv, hd, att);
      FN (matmul) (att, L, &W->wo, h);
      for (int64_t i = 0; i < L * D; i++)
        x[i] += h[i];
      FN (rms_norm) (x, L, D, W->ffn_norm.data, (REAL) c->rms_eps, h);
      if (W->n_experts > 0)
        {
          g_autofree REAL *y = g_new (REAL, D);
          for (int64_t t = 0; t < L; t++)
            {
              FN (moe_ffn) (c, W, h + t * D, y);
              for (int64_t i = 0; i < D; i++)
                x[t * D + i] += y[i];
            }
          continue;
        }
      FN (matmul) (h, L, &W->w_gate, g);
      FN (matmul) (h, L, &W->w_up, u);
      FN (swiglu) (g, u, L * F, g);
      FN (matmul) (g, L, &W->w_down, h);
      for (int64_t i = 0; i < L * D; i++)
        x[i] += h[i];
    }
  FN (rms_norm) (x, L, D, model->out_norm.data, (REAL) c->rms_eps, h);
  FN (matmul) (h, L, &model->output, logits);
  return TRUE;
}

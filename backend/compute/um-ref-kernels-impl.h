/* um-ref-kernels-impl.h — the reference kernels and forward pass, written
 * once and instantiated by um-ref-kernels.c in double (the reference) and in
 * float (an independent, naive float32 computation whose distance from the
 * double one tells the tests how much float32 rounding alone costs on a
 * given model).  Expects REAL, FN (), R_SQRT and R_EXP. */

void
FN (matmul) (const REAL *x_in, int64_t m, const UmWeight *w, REAL *out)
{
  g_autofree REAL *row = g_new (REAL, w->cols);
  g_autofree REAL *rounded = NULL;
  /* The activations as the product sees them (rounded to 8 bits where the
   * instance asks for it). */
  const REAL *x = FN (activations) (x_in, m, w, &rounded);

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
FN (rope) (REAL *x, int64_t rows, const gint32 *pos, int n_heads, int head_dim, int rope_dim,
           double theta, gboolean interleaved)
{
  /* Partial RoPE: only the first rope_dim values of a head turn, with the
   * frequencies of a head of that width; the rest pass through. */
  const int half = rope_dim / 2;
  for (int64_t r = 0; r < rows; r++)
    for (int h = 0; h < n_heads; h++)
      {
        REAL *v = x + (r * n_heads + h) * head_dim;
        for (int i = 0; i < half; i++)
          {
            /* The angle in double at every precision: float32 code also
             * computes it carefully (LLaDA's rope_full_precision). */
            double angle = pos[r] * pow (theta, -2.0 * i / rope_dim);
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
FN (attention) (const REAL *q, const REAL *k, const REAL *v, int64_t seq_len, const gint32 *kv_len,
                int n_heads, int n_kv_heads, int head_dim, REAL *out)
{
  const int64_t qs = (int64_t) n_heads * head_dim, kvs = (int64_t) n_kv_heads * head_dim;
  g_autofree REAL *p = g_new (REAL, seq_len);

  for (int h = 0; h < n_heads; h++)
    {
      int kvh = h / (n_heads / n_kv_heads);
      for (int64_t i = 0; i < seq_len; i++)
        {
          /* A masked key is simply absent: the softmax runs over the n seen. */
          const int64_t n = kv_len != NULL ? kv_len[i] : seq_len;
          REAL mx = -INFINITY, sum = 0;
          for (int64_t j = 0; j < n; j++)
            {
              REAL s = 0;
              for (int d = 0; d < head_dim; d++)
                s += q[i * qs + h * head_dim + d] * k[j * kvs + kvh * head_dim + d];
              p[j] = s / R_SQRT ((REAL) head_dim);
              mx = MAX (mx, p[j]);
            }
          for (int64_t j = 0; j < n; j++)
            {
              p[j] = R_EXP (p[j] - mx);
              sum += p[j];
            }
          for (int d = 0; d < head_dim; d++)
            {
              REAL acc = 0;
              for (int64_t j = 0; j < n; j++)
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

/* Group-limited routing (DeepSeek-V3, LLaDA 2.x): with n_expert_groups
 * G > 1 the experts form G equal groups of consecutive indices; a group
 * scores the sum of its two best selection scores, the n_groups_used best
 * groups (ties to the lower index) stay and every expert of the others is
 * marked taken, out of the top-k.  A configuration the loader should have
 * refused (G not dividing E, fewer kept experts than k) keeps enough groups
 * rather than read out of bounds. */
static void
FN (limit_groups) (const UmModelConfig *c, guint E, const REAL *sel, gboolean *taken)
{
  const guint G = c->n_expert_groups;
  guint S, keep;
  g_autofree REAL *score = NULL;
  g_autofree gboolean *kept = NULL;

  if (G <= 1 || E % G != 0)
    return;
  S = E / G;
  keep = MAX (MIN (c->n_groups_used, G), (c->n_experts_used + S - 1) / S);
  if (keep >= G)
    return;
  score = g_new (REAL, G);
  kept = g_new0 (gboolean, G);
  for (guint g = 0; g < G; g++)
    {
      REAL b1 = -INFINITY, b2 = -INFINITY;
      for (guint e = g * S; e < (g + 1) * S; e++)
        if (sel[e] > b1)
          {
            b2 = b1;
            b1 = sel[e];
          }
        else if (sel[e] > b2)
          b2 = sel[e];
      score[g] = S >= 2 ? b1 + b2 : b1;
    }
  for (guint n = 0; n < keep; n++)
    {
      guint best = G;
      for (guint g = 0; g < G; g++)
        if (!kept[g] && (best == G || score[g] > score[best]))
          best = g;
      kept[best] = TRUE;
    }
  for (guint e = 0; e < E; e++)
    if (!kept[e / S])
      taken[e] = TRUE;
}

/* One token's routing, as llama.cpp's build_moe_ffn: router probabilities
 * (softmax or sigmoid of the router's logits z), the top n_experts_used by
 * probability plus the selection bias (ties to the lower index) within the
 * kept groups (limit_groups), their unbiased probabilities as weights,
 * renormalised (sum clamped as llama.cpp does) and scaled when the
 * configuration says so. */
void
FN (moe_route) (const UmModelConfig *c, guint E, const REAL *z, const float *bias, guint *chosen, REAL *w)
{
  const guint K = c->n_experts_used;
  g_autofree REAL *p = g_new (REAL, E), *sel = g_new (REAL, E);
  g_autofree gboolean *taken = g_new0 (gboolean, E);
  REAL mx = -INFINITY, sum = 0;

  if (c->router_func == UM_ROUTER_SIGMOID)
    for (guint e = 0; e < E; e++)
      p[e] = 1 / (1 + R_EXP (-z[e]));
  else
    {
      for (guint e = 0; e < E; e++)
        mx = MAX (mx, z[e]);
      for (guint e = 0; e < E; e++)
        sum += p[e] = R_EXP (z[e] - mx);
      for (guint e = 0; e < E; e++)
        p[e] /= sum;
    }
  for (guint e = 0; e < E; e++)
    sel[e] = p[e] + (bias != NULL ? bias[e] : 0);
  FN (limit_groups) (c, E, sel, taken);
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
}

/* One token's mixture of experts: out = Σ w_e · down_e (silu (gate_e x) ·
 * up_e x) over the experts moe_route chooses, plus the shared expert's
 * down (silu (gate x) · up x) unweighted. */
static void
FN (moe_ffn) (const UmModelConfig *c, const UmLayerWeights *W, const REAL *x, REAL *out)
{
  const guint E = W->n_experts, K = c->n_experts_used;
  const int64_t D = c->d_model, F = W->ffn, Fs = W->sh_gate.data != NULL ? W->shared_ffn : 0;
  g_autofree REAL *z = g_new (REAL, E);
  g_autofree REAL *g = g_new (REAL, MAX (F, Fs)), *u = g_new (REAL, MAX (F, Fs)), *y = g_new (REAL, D);
  g_autofree guint *chosen = g_new (guint, K);
  g_autofree REAL *w = g_new (REAL, K);

  FN (matmul) (x, 1, &W->router, z);
  FN (moe_route) (c, E, z, W->router_bias.data, chosen, w);
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
  if (Fs > 0)
    {
      FN (matmul) (x, 1, &W->sh_gate, g);
      FN (matmul) (x, 1, &W->sh_up, u);
      FN (swiglu) (g, u, Fs, g);
      FN (matmul) (g, 1, &W->sh_down, y);
      for (int64_t i = 0; i < D; i++)
        out[i] += y[i];
    }
}

gboolean
FN (forward_blocks) (const UmModel *model, const gint32 *ids, int seq_len, int block_len, REAL *logits,
                     GError **error)
{
  const UmModelConfig *c = &model->cfg;
  const int64_t L = seq_len, D = c->d_model;
  const int hd = c->head_dim;
  int64_t max_q = 0, max_kv = 0, max_f = 0;
  g_autofree REAL *x = NULL, *h = NULL, *q = NULL, *k = NULL, *v = NULL, *att = NULL;
  g_autofree REAL *g = NULL, *u = NULL;
  const int rope_dim = c->rope_dim > 0 ? (int) c->rope_dim : hd;
  g_autofree gint32 *pos = g_new (gint32, L), *kv_len = NULL;

  if (block_len < 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "block length %d is negative", block_len);
      return FALSE;
    }
  if (rope_dim > hd || rope_dim % 2 != 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "RoPE over %d of a head's %d values", rope_dim, hd);
      return FALSE;
    }
  /* Block-causal: position t sees the keys of its block and the earlier
   * ones, blocks of block_len from position 0. */
  if (block_len > 0)
    {
      kv_len = g_new (gint32, L);
      for (int64_t t = 0; t < L; t++)
        kv_len[t] = (gint32) MIN (L, (t / block_len + 1) * block_len);
    }

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
      FN (rope) (q, L, pos, H, hd, rope_dim, c->rope_theta, c->rope_interleaved);
      FN (rope) (k, L, pos, Hkv, hd, rope_dim, c->rope_theta, c->rope_interleaved);
      FN (attention) (q, k, v, L, kv_len, H, Hkv, hd, att);
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

gboolean
FN (forward) (const UmModel *model, const gint32 *ids, int seq_len, REAL *logits, GError **error)
{
  return FN (forward_blocks) (model, ids, seq_len, 0, logits, error);
}

#include "um-forward.h"

#include <string.h>

#include "um-error.h"

typedef enum {
  SLOT_X, SLOT_H, SLOT_Q, SLOT_K, SLOT_V, SLOT_ATT, SLOT_GATE, SLOT_UP, SLOT_XS, SLOT_LOGITS,
  N_SLOTS
} Slot;

typedef struct {
  UmDevWeight *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w_gate, *w_up, *w_down;
} DevLayer;

struct _UmForward {
  /* while loading */
  UmForwardProgress progress_cb;
  gpointer        progress_data;
  GCancellable   *cancellable;
  uint64_t        loaded_bytes, total_bytes;

  UmModel        *model;
  UmBackend      *be;
  UmDevWeight    *tok_embd, *out_norm, *output;
  DevLayer       *layers;
  GPtrArray      *dev_weights;
  UmBuf          *slots[N_SLOTS];
  size_t          slot_bytes[N_SLOTS];
  UmForwardStats  stats;
};

static void
release_slots (UmForward *fw)
{
  for (int i = 0; i < N_SLOTS; i++)
    {
      if (fw->slots[i] != NULL)
        fw->be->ops->buf_free (fw->be, fw->slots[i]);
      fw->slots[i] = NULL;
      fw->slot_bytes[i] = 0;
    }
}

void
um_forward_free (UmForward *fw)
{
  if (fw == NULL)
    return;
  release_slots (fw);
  if (fw->dev_weights != NULL)
    for (guint i = 0; i < fw->dev_weights->len; i++)
      fw->be->ops->weight_free (fw->be, g_ptr_array_index (fw->dev_weights, i));
  g_clear_pointer (&fw->dev_weights, g_ptr_array_unref);
  g_free (fw->layers);
  g_free (fw);
}

static UmDevWeight *
load_weight (UmForward *fw, const UmWeight *w, GError **error)
{
  UmDevWeight *dw;

  if (g_cancellable_set_error_if_cancelled (fw->cancellable, error))
    return NULL;
  dw = fw->be->ops->weight_load (fw->be, w, error);
  if (dw != NULL)
    g_ptr_array_add (fw->dev_weights, dw);
  fw->loaded_bytes += w->rows * w->row_bytes;
  if (dw != NULL && fw->progress_cb != NULL)
    fw->progress_cb ((double) fw->loaded_bytes / MAX (fw->total_bytes, 1), fw->progress_data);
  return dw;
}

UmForward *
um_forward_new (UmModel   *model,
                UmBackend *backend,
                GError   **error)
{
  return um_forward_new_full (model, backend, NULL, NULL, NULL, error);
}

UmForward *
um_forward_new_full (UmModel           *model,
                     UmBackend         *backend,
                     UmForwardProgress  progress_cb,
                     gpointer           user_data,
                     GCancellable      *cancellable,
                     GError           **error)
{
  g_autoptr(UmForward) fw = g_new0 (UmForward, 1);
  const UmModelConfig *c = &model->cfg;

  fw->model = model;
  fw->be = backend;
  fw->progress_cb = progress_cb;
  fw->progress_data = user_data;
  fw->cancellable = cancellable;
  fw->total_bytes = um_model_weight_bytes (model);
  fw->dev_weights = g_ptr_array_new ();
  fw->layers = g_new0 (DevLayer, c->n_layers);

#define LOAD(dst, src) G_STMT_START { if (((dst) = load_weight (fw, (src), error)) == NULL) return NULL; } G_STMT_END
  LOAD (fw->tok_embd, &model->tok_embd);
  LOAD (fw->out_norm, &model->out_norm);
  if (c->tied_embeddings)
    fw->output = fw->tok_embd;
  else
    LOAD (fw->output, &model->output);
  for (guint l = 0; l < c->n_layers; l++)
    {
      const UmLayerWeights *src = &model->layers[l];
      DevLayer *dst = &fw->layers[l];
      LOAD (dst->attn_norm, &src->attn_norm);
      LOAD (dst->wq, &src->wq);
      LOAD (dst->wk, &src->wk);
      LOAD (dst->wv, &src->wv);
      LOAD (dst->wo, &src->wo);
      LOAD (dst->ffn_norm, &src->ffn_norm);
      LOAD (dst->w_gate, &src->w_gate);
      LOAD (dst->w_up, &src->w_up);
      LOAD (dst->w_down, &src->w_down);
    }
#undef LOAD
  fw->progress_cb = NULL;
  fw->cancellable = NULL;
  return g_steal_pointer (&fw);
}

/* Work buffers are kept between calls and grown when a longer canvas needs it. */
static UmBuf *
slot (UmForward *fw, Slot s, size_t floats, GError **error)
{
  size_t bytes = MAX (floats, 1) * sizeof (float);
  if (fw->slot_bytes[s] >= bytes)
    return fw->slots[s];
  if (fw->slots[s] != NULL)
    fw->be->ops->buf_free (fw->be, fw->slots[s]);
  fw->slots[s] = fw->be->ops->buf_alloc (fw->be, bytes, error);
  fw->slot_bytes[s] = fw->slots[s] ? bytes : 0;
  return fw->slots[s];
}

static gboolean
matmul (UmForward *fw, UmBuf *x, int rows, const UmDevWeight *w, const UmWeight *hw, UmBuf *out,
        GError **error)
{
  gint64 t0 = g_get_monotonic_time ();
  gboolean ok = fw->be->ops->matmul (fw->be, x, rows, w, out, error);
  fw->stats.seconds_matmul += (g_get_monotonic_time () - t0) / 1e6;
  fw->stats.flops += 2.0 * rows * (double) hw->rows * (double) hw->cols;
  fw->stats.flops_matmul += 2.0 * rows * (double) hw->rows * (double) hw->cols;
  return ok;
}

gboolean
um_forward_logits (UmForward     *fw,
                   const gint32  *ids,
                   int            n_seq,
                   int            seq_len,
                   const gint32  *rows,
                   int            n_rows,
                   float         *logits,
                   GCancellable  *cancellable,
                   GError       **error)
{
  const UmModelConfig *c = &fw->model->cfg;
  const UmBackendOps *ops = fw->be->ops;
  UmBackend *be = fw->be;
  const int T = n_seq * seq_len;
  const int D = c->d_model, F = c->mlp_hidden, V = c->vocab_size;
  const int H = c->n_heads, Hkv = c->n_kv_heads, hd = c->head_dim;
  const int QD = H * hd, KVD = Hkv * hd;
  const float eps = (float) c->rms_eps;
  const gboolean subset = rows != NULL;
  const int n = subset ? n_rows : T;
  gint64 t_start = g_get_monotonic_time ();
  g_autofree gint32 *pos = NULL, *seq = NULL, *sel_pos = NULL, *sel_seq = NULL;
  UmBuf *x, *h, *q, *k, *v, *att, *gate, *up, *xs = NULL, *out;

  if (n_seq <= 0 || seq_len <= 0 || (guint) seq_len > c->max_seq_len)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "forward: a canvas of %d × %d tokens is empty or longer than the model's %u",
                   n_seq, seq_len, c->max_seq_len);
      return FALSE;
    }
  for (int i = 0; subset && i < n_rows; i++)
    if (rows[i] < 0 || rows[i] >= T || (i > 0 && rows[i] <= rows[i - 1]))
      {
        g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                     "forward: requested rows must be ascending and inside the canvas (row %d)", rows[i]);
        return FALSE;
      }
  if (n == 0)
    return TRUE;

  x = slot (fw, SLOT_X, (size_t) T * D, error);
  h = x ? slot (fw, SLOT_H, (size_t) T * MAX (D, QD), error) : NULL;
  q = h ? slot (fw, SLOT_Q, (size_t) T * QD, error) : NULL;
  k = q ? slot (fw, SLOT_K, (size_t) T * KVD, error) : NULL;
  v = k ? slot (fw, SLOT_V, (size_t) T * KVD, error) : NULL;
  att = v ? slot (fw, SLOT_ATT, (size_t) T * QD, error) : NULL;
  gate = att ? slot (fw, SLOT_GATE, (size_t) T * F, error) : NULL;
  up = gate ? slot (fw, SLOT_UP, (size_t) T * F, error) : NULL;
  if (up != NULL && subset)
    xs = slot (fw, SLOT_XS, (size_t) n * D, error);
  out = (up != NULL && (!subset || xs != NULL)) ? slot (fw, SLOT_LOGITS, (size_t) n * V, error) : NULL;
  if (out == NULL)
    return FALSE;

  pos = g_new (gint32, T);
  seq = g_new (gint32, T);
  for (int t = 0; t < T; t++)
    {
      pos[t] = t % seq_len;
      seq[t] = t / seq_len;
    }
  if (subset)
    {
      sel_pos = g_new (gint32, n);
      sel_seq = g_new (gint32, n);
      for (int i = 0; i < n; i++)
        {
          sel_pos[i] = pos[rows[i]];
          sel_seq[i] = seq[rows[i]];
        }
    }

  if (!ops->embed (be, fw->tok_embd, ids, T, x, error))
    return FALSE;

  for (guint l = 0; l < c->n_layers; l++)
    {
      const DevLayer *L = &fw->layers[l];
      const UmLayerWeights *W = &fw->model->layers[l];
      /* In the last layer only the requested rows feed the output: keys and
       * values still need every row, queries, attention output and MLP only
       * the requested ones. */
      const gboolean last = subset && l + 1 == c->n_layers;
      const int m = last ? n : T;
      UmBuf *xr = last ? xs : x;

      if (g_cancellable_set_error_if_cancelled (cancellable, error))
        return FALSE;

      if (!ops->rms_norm (be, x, T, D, L->attn_norm, eps, h, error)
          || !matmul (fw, h, T, L->wk, &W->wk, k, error)
          || !matmul (fw, h, T, L->wv, &W->wv, v, error)
          || !ops->rope (be, k, T, pos, Hkv, hd, c->rope_theta, c->rope_interleaved, error))
        return FALSE;
      if (last)
        {
          /* h is free once k and v exist: reuse it for the selected rows. */
          if (!ops->get_rows (be, h, D, rows, n, att, error)
              || !matmul (fw, att, n, L->wq, &W->wq, q, error)
              || !ops->get_rows (be, x, D, rows, n, xs, error))
            return FALSE;
        }
      else if (!matmul (fw, h, T, L->wq, &W->wq, q, error))
        return FALSE;
      if (!ops->rope (be, q, m, last ? sel_pos : pos, H, hd, c->rope_theta, c->rope_interleaved, error)
          || !ops->attention (be, q, m, last ? sel_seq : seq, k, v, seq_len, H, Hkv, hd, att, error))
        return FALSE;
      fw->stats.flops += 4.0 * m * (double) seq_len * hd * H;
      if (!matmul (fw, att, m, L->wo, &W->wo, h, error)
          || !ops->add (be, xr, h, (size_t) m * D, error)
          || !ops->rms_norm (be, xr, m, D, L->ffn_norm, eps, h, error)
          || !matmul (fw, h, m, L->w_gate, &W->w_gate, gate, error)
          || !matmul (fw, h, m, L->w_up, &W->w_up, up, error)
          || !ops->swiglu (be, gate, up, (size_t) m * F, gate, error)
          || !matmul (fw, gate, m, L->w_down, &W->w_down, h, error)
          || !ops->add (be, xr, h, (size_t) m * D, error))
        return FALSE;
    }

  if (g_cancellable_set_error_if_cancelled (cancellable, error))
    return FALSE;
  if (!ops->rms_norm (be, subset ? xs : x, n, D, fw->out_norm, eps, h, error)
      || !matmul (fw, h, n, fw->output, &fw->model->output, out, error)
      || !ops->buf_download (be, out, 0, logits, (size_t) n * V * sizeof (float), error))
    return FALSE;

  fw->stats.n_passes++;
  fw->stats.logit_rows += n;
  fw->stats.seconds += (g_get_monotonic_time () - t_start) / 1e6;
  return TRUE;
}

const UmForwardStats *
um_forward_get_stats (UmForward *fw)
{
  return &fw->stats;
}

void
um_forward_reset_stats (UmForward *fw)
{
  memset (&fw->stats, 0, sizeof fw->stats);
}

UmModel *
um_forward_get_model (UmForward *fw)
{
  return fw->model;
}

UmBackend *
um_forward_get_backend (UmForward *fw)
{
  return fw->be;
}

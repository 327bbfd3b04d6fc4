/* um-forward-layers.c — the work of a forward pass (the forward of
 * um-forward.c, written once against the compute backend): the layers
 * (attention, dense MLP or mixture of experts, streamed or resident), the
 * head, and the parts of a pass a backend may record and replay. */
#include "um-forward-private.h"

#include <string.h>

#include "um-error.h"
#include "um-kprof.h"
#include "um-layer-store.h"
#include "um-quant.h"

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

/* The token rows, decoded on the host and uploaded (table not on the device). */
static gboolean
embed_host (UmForward *fw, const gint32 *ids, int n, UmBuf *x, GError **error)
{
  const UmWeight *w = &fw->model->tok_embd;
  size_t floats = (size_t) n * w->cols;

  for (int i = 0; i < n; i++)
    if (ids[i] < 0 || (uint64_t) ids[i] >= w->rows)
      {
        g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                     "token id %d is outside the vocabulary (%" G_GUINT64_FORMAT ")", ids[i], w->rows);
        return FALSE;
      }
  if (fw->host_rows_floats < floats)
    {
      g_free (fw->host_rows);
      /* The decoded rows, then one stored row. */
      fw->host_rows = g_try_malloc (um_forward_host_rows_bytes (fw->model, n));
      fw->host_rows_floats = fw->host_rows ? floats : 0;
      if (fw->host_rows == NULL)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY, "out of host memory for %d embedding rows", n);
          return FALSE;
        }
    }
  /* Rows are read from the file rather than through the mapping, whose
   * pages the kernel maps a large folio (up to 2 MiB) at a time: a canvas
   * of distinct tokens would otherwise hold much of the table. */
  for (int i = 0; i < n; i++)
    {
      guint8 *stored = (guint8 *) (fw->host_rows + floats);
      um_tensor_data_read ((const guint8 *) w->data + (uint64_t) ids[i] * w->row_bytes, w->row_bytes, stored);
      if (!um_quant_dequantize_row (w->dtype, stored, fw->host_rows + (size_t) i * w->cols, w->cols))
        {
          g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "cannot decode embedding rows stored as %s",
                       um_dtype_name (w->dtype));
          return FALSE;
        }
    }
  return fw->be->ops->buf_upload (fw->be, x, 0, fw->host_rows, floats * sizeof (float), error);
}

static gboolean
same_layout (const UmLayerWeights *a, const UmLayerWeights *b)
{
  for (int i = 0; i < UM_LAYER_N_MATS; i++)
    {
      const UmWeight *x = um_layer_mat (a, i), *y = um_layer_mat (b, i);
      if (x->dtype != y->dtype || x->rows != y->rows || x->cols != y->cols || x->row_bytes != y->row_bytes)
        return FALSE;
    }
  return TRUE;
}

/* Layer @l's matrices in a slot: waits for its copy, then asks the copy
 * thread for the next layer (into the next slot) while this one computes.
 * Slots are used round-robin across passes, so the next slot is never the
 * one computing. */
static gboolean
stream_layer (UmForward *fw, guint l, DevLayer *out, GError **error)
{
  const UmBackendOps *ops = fw->be->ops;
  const guint k = fw->opts.stream_slots, n_layers = fw->model->cfg.n_layers;
  const guint s = fw->stream_seq % k, ns = (fw->stream_seq + 1) % k;
  const guint nl = (l + 1) % n_layers;
  StreamSlot *slot = &fw->stream[s];
  const UmLayerWeights *W = &fw->model->layers[l];
  gint64 t0 = g_get_monotonic_time ();
  UmDevWeight **m = slot->mats;

  if (slot->requested != (int) l)
    {
      um_prefetcher_request (fw->prefetcher, s, slot->buf, l);
      slot->requested = l;
    }
  if (!um_prefetcher_wait (fw->prefetcher, s, l, error))
    {
      slot->requested = -1;
      return FALSE;
    }
  fw->stats.seconds_stream_wait += (g_get_monotonic_time () - t0) / 1e6;
  fw->stats.layers_streamed++;

  /* Views are rebuilt only for a layer of other types or shapes (the
   * _M mixes give some layers 6-bit matrices; pruning, other counts). */
  if (slot->shaped_for < 0 || !same_layout (&fw->model->layers[slot->shaped_for], W))
    {
      UmLayerLayout layout;
      um_layer_layout (W, &layout);
      for (int i = 0; i < UM_LAYER_N_MATS; i++)
        {
          if (m[i] != NULL)
            ops->weight_free (fw->be, m[i]);
          m[i] = ops->weight_view (fw->be, slot->buf, layout.offset[i], um_layer_mat (W, i), error);
          if (m[i] == NULL)
            {
              slot->shaped_for = -1;
              return FALSE;
            }
        }
      /* MoE: a view per expert slice of the stacked gate, up and down. */
      for (guint i = 0; i < 3 * slot->n_experts; i++)
        if (slot->experts[i] != NULL)
          ops->weight_free (fw->be, slot->experts[i]);
      g_free (slot->experts);
      slot->experts = NULL;
      slot->n_experts = W->n_experts;
      if (W->n_experts > 0)
        slot->experts = g_new0 (UmDevWeight *, 3 * W->n_experts);
      for (guint e = 0; e < W->n_experts; e++)
        for (int i = 0; i < 3; i++)
          {
            const UmWeight *stacked = um_layer_mat (W, 4 + i);
            UmWeight slice = um_weight_expert (stacked, W->n_experts, e);
            size_t off = layout.offset[4 + i] + (size_t) e * slice.rows * slice.row_bytes;
            slot->experts[3 * e + i] = ops->weight_view (fw->be, slot->buf, off, &slice, error);
            if (slot->experts[3 * e + i] == NULL)
              {
                slot->shaped_for = -1;
                return FALSE;
              }
          }
      slot->shaped_for = l;
    }
  /* The small tensors stay resident; the matrices are the slot's. */
  *out = fw->layers[l];
  out->experts = slot->experts;
  out->wq = m[0];
  out->wk = m[1];
  out->wv = m[2];
  out->wo = m[3];
  out->w_gate = m[4];
  out->w_up = m[5];
  out->w_down = m[6];
  out->sh_gate = W->shared_ffn > 0 ? m[7] : NULL;
  out->sh_up = W->shared_ffn > 0 ? m[8] : NULL;
  out->sh_down = W->shared_ffn > 0 ? m[9] : NULL;

  /* The next slot last held a layer whose ops (on a GPU, queued) must be
   * done before the copy overwrites it. */
  if (!ops->sync (fw->be, error))
    return FALSE;
  um_prefetcher_request (fw->prefetcher, ns, fw->stream[ns].buf, nl);
  fw->stream[ns].requested = nl;
  fw->stream_seq++;
  return TRUE;
}

/* Host room for @floats router logits. */
gboolean
um_forward_host_router (UmForward *fw, size_t floats, GError **error)
{
  if (floats <= fw->host_router_floats)
    return TRUE;
  g_free (fw->host_router);
  fw->host_router = g_try_new (float, floats);
  fw->host_router_floats = fw->host_router != NULL ? floats : 0;
  if (fw->host_router == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY, "out of host memory for the router's logits");
      return FALSE;
    }
  return TRUE;
}

/* The mixture of experts on @c normalized rows @hc, added into the
 * residual rows @xc: on a backend with the moe op, routed and computed
 * there; otherwise the router's logits come to the host, which groups the
 * rows by expert (um-moe.h), and each expert then runs once over its group
 * — gather, gate and up products, SwiGLU, down product — and its output is
 * added into the group's residual rows, weighted. */
static gboolean
moe_rows (UmForward *fw, const DevLayer *L, const UmLayerWeights *W, UmBuf *xc, UmBuf *hc, int c, UmBuf **b,
          GError **error)
{
  const UmBackendOps *ops = fw->be->ops;
  UmBackend *be = fw->be;
  const UmModelConfig *cfg = &fw->model->cfg;
  const int D = cfg->d_model, F = W->ffn, E = W->n_experts;
  UmMoeRouting *r = &fw->routing;

  /* On a backend that routes (the GPU): the logits never leave it. */
  if (ops->moe != NULL)
    {
      const double flops = 2.0 * c * cfg->n_experts_used * 3.0 * D * (double) F;
      fw->stats.flops += flops;
      fw->stats.flops_matmul += flops;
      return matmul (fw, hc, c, L->router, &W->router, b[UM_ARENA_ROUTER], error)
             && ops->moe (be, xc, hc, c, b[UM_ARENA_ROUTER], L->router_bias, cfg, E, F, L->experts, b[UM_ARENA_MOE], error);
    }
  if (!um_forward_host_router (fw, (size_t) c * E, error)
      || !matmul (fw, hc, c, L->router, &W->router, b[UM_ARENA_ROUTER], error)
      || !ops->buf_download (be, b[UM_ARENA_ROUTER], 0, fw->host_router, (size_t) c * E * sizeof (float), error))
    return FALSE;
  um_moe_route (cfg, fw->host_router, W->router_bias.data, c, r);
  for (int e = 0; e < E; e++)
    {
      const int n = r->offset[e + 1] - r->offset[e];
      const gint32 *rows = r->rows + r->offset[e];
      UmDevWeight *const *X = L->experts + 3 * e;
      UmWeight hw[3];

      if (n == 0)
        continue;
      hw[0] = um_weight_expert (&W->w_gate, E, e);
      hw[1] = um_weight_expert (&W->w_up, E, e);
      hw[2] = um_weight_expert (&W->w_down, E, e);
      if (!ops->get_rows (be, hc, D, rows, n, b[UM_ARENA_EX], error)
          || !matmul (fw, b[UM_ARENA_EX], n, X[0], &hw[0], b[UM_ARENA_GATE], error)
          || !matmul (fw, b[UM_ARENA_EX], n, X[1], &hw[1], b[UM_ARENA_UP], error)
          || !ops->swiglu (be, b[UM_ARENA_GATE], b[UM_ARENA_UP], (size_t) n * F, b[UM_ARENA_GATE], error)
          || !matmul (fw, b[UM_ARENA_GATE], n, X[2], &hw[2], b[UM_ARENA_EY], error)
          || !ops->add_rows_scaled (be, xc, D, rows, r->scale + r->offset[e], n, b[UM_ARENA_EY], error))
        return FALSE;
    }
  return TRUE;
}

/* The shared expert (LLaDA 2.x): a SwiGLU FFN every token goes through,
 * added unweighted beside the routed experts. */
static gboolean
shared_expert_rows (UmForward *fw, const DevLayer *L, const UmLayerWeights *W, UmBuf *xc, UmBuf *hc, int c,
                    UmBuf **b, GError **error)
{
  const UmBackendOps *ops = fw->be->ops;

  return matmul (fw, hc, c, L->sh_gate, &W->sh_gate, b[UM_ARENA_GATE], error)
         && matmul (fw, hc, c, L->sh_up, &W->sh_up, b[UM_ARENA_UP], error)
         && ops->swiglu (fw->be, b[UM_ARENA_GATE], b[UM_ARENA_UP], (size_t) c * W->shared_ffn, b[UM_ARENA_GATE], error)
         && matmul (fw, b[UM_ARENA_GATE], c, L->sh_down, &W->sh_down, b[UM_ARENA_EY], error)
         && ops->add (fw->be, xc, b[UM_ARENA_EY], (size_t) c * fw->model->cfg.d_model, error);
}

/* Chunk @r0's rows of @x (@c of them, @D floats each), as a view unless
 * they are all of it (then *@v stays NULL). */
static gboolean
chunk_view (UmForward *fw, UmBuf *x, int r0, int c, int m, UmBuf **v, UmBuf **out, GError **error)
{
  const size_t row = (size_t) fw->model->cfg.d_model * sizeof (float);

  *v = NULL;
  *out = x;
  if (c == m)
    return TRUE;
  *v = fw->be->ops->buf_view (fw->be, x, r0 * row, c * row, error);
  *out = *v;
  return *v != NULL;
}

/* A MoE layer whose routed experts are off the device: every chunk is
 * normalized and routed first, then the experts run (each fetched once for
 * the layer, um-forward-experts.c), then the shared expert chunk by chunk.
 * Each row sees the resident forward's ops in its order: its norm, its
 * experts' outputs added by expert, then the shared expert's. */
static gboolean
moe_layer_off_device (UmForward *fw, const DevLayer *L, const UmLayerWeights *W, UmBuf *xr, UmBuf *h, UmBuf **b,
                      int m, GError **error)
{
  const UmBackendOps *ops = fw->be->ops;
  const UmModelConfig *cfg = &fw->model->cfg;
  const int D = cfg->d_model, E = W->n_experts;
  const int chunk = um_forward_chunk_rows (m, fw->opts.row_chunk), n_chunks = (m + chunk - 1) / chunk;

  if (n_chunks > fw->n_routes)
    {
      fw->routes = g_renew (UmMoeRouting, fw->routes, n_chunks);
      for (int i = fw->n_routes; i < n_chunks; i++)
        um_moe_routing_init (&fw->routes[i]);
      fw->n_routes = n_chunks;
    }
  for (int q = 0; q < n_chunks; q++)
    {
      const int r0 = q * chunk, c = MIN (chunk, m - r0);
      UmBuf *v[2] = { NULL, NULL }, *xc, *hc;
      gboolean ok = chunk_view (fw, xr, r0, c, m, &v[0], &xc, error)
                    && chunk_view (fw, h, r0, c, m, &v[1], &hc, error)
                    && ops->rms_norm (fw->be, xc, c, D, L->ffn_norm, (float) cfg->rms_eps, hc, error)
                    && um_forward_host_router (fw, (size_t) c * E, error)
                    && matmul (fw, hc, c, L->router, &W->router, b[UM_ARENA_ROUTER], error)
                    && ops->buf_download (fw->be, b[UM_ARENA_ROUTER], 0, fw->host_router, (size_t) c * E * sizeof (float),
                                          error);
      um_forward_free_views (fw, v, 2);
      if (!ok)
        return FALSE;
      um_moe_route (cfg, fw->host_router, W->router_bias.data, c, &fw->routes[q]);
    }
  if (!um_forward_experts_run (fw->experts, (guint) (W - fw->model->layers), fw->routes, chunk, xr, h, m, b[UM_ARENA_EX],
                               b[UM_ARENA_GATE], b[UM_ARENA_UP], b[UM_ARENA_EY], b[UM_ARENA_MOE], &fw->stats, error))
    return FALSE;
  for (int q = 0; q < n_chunks && W->shared_ffn > 0; q++)
    {
      const int r0 = q * chunk, c = MIN (chunk, m - r0);
      UmBuf *v[2] = { NULL, NULL }, *xc, *hc;
      gboolean ok = chunk_view (fw, xr, r0, c, m, &v[0], &xc, error)
                    && chunk_view (fw, h, r0, c, m, &v[1], &hc, error)
                    && shared_expert_rows (fw, L, W, xc, hc, c, b, error);
      um_forward_free_views (fw, v, 2);
      if (!ok)
        return FALSE;
    }
  return TRUE;
}

/* RMSNorm, the FFN (dense SwiGLU or mixture of experts) and the residual on
 * @m rows of @xr, @chunk rows at a time; @normed: @h already holds the
 * norm of all of them (residual_mlp). */
static gboolean
mlp_rows (UmForward *fw, const DevLayer *L, const UmLayerWeights *W, UmBuf *xr, UmBuf *h, UmBuf **b, int m,
          gboolean normed, GError **error)
{
  const UmBackendOps *ops = fw->be->ops;
  UmBackend *be = fw->be;
  const int D = fw->model->cfg.d_model, F = W->ffn;
  const float eps = (float) fw->model->cfg.rms_eps;
  const int chunk = um_forward_chunk_rows (m, fw->opts.row_chunk);
  UmBuf *gate = b[UM_ARENA_GATE], *up = b[UM_ARENA_UP];

  if (W->n_experts > 0 && fw->experts != NULL)
    return moe_layer_off_device (fw, L, W, xr, h, b, m, error);
  for (int r0 = 0; r0 < m; r0 += chunk)
    {
      const int c = MIN (chunk, m - r0);
      const gboolean whole = c == m;
      UmBuf *v[2] = { NULL, NULL };
      gboolean ok;

      if (!whole)
        {
          v[0] = ops->buf_view (be, xr, (size_t) r0 * D * sizeof (float), (size_t) c * D * sizeof (float), error);
          v[1] = v[0] ? ops->buf_view (be, h, (size_t) r0 * D * sizeof (float), (size_t) c * D * sizeof (float),
                                       error) : NULL;
          if (v[1] == NULL)
            {
              um_forward_free_views (fw, v, 2);
              return FALSE;
            }
        }
      {
        UmBuf *xc = whole ? xr : v[0], *hc = whole ? h : v[1];
        ok = (normed && whole) || ops->rms_norm (be, xc, c, D, L->ffn_norm, eps, hc, error);
        if (ok && W->n_experts > 0)
          ok = moe_rows (fw, L, W, xc, hc, c, b, error)
               && (W->shared_ffn == 0 || shared_expert_rows (fw, L, W, xc, hc, c, b, error));
        else if (ok)
          ok = matmul (fw, hc, c, L->w_gate, &W->w_gate, gate, error)
               && matmul (fw, hc, c, L->w_up, &W->w_up, up, error)
               && ops->swiglu (be, gate, up, (size_t) c * F, gate, error)
               && matmul (fw, gate, c, L->w_down, &W->w_down, hc, error)
               && ops->add (be, xc, hc, (size_t) c * D, error);
      }
      um_forward_free_views (fw, v, 2);
      if (!ok)
        return FALSE;
    }
  return TRUE;
}


/* The attention's output @h added into the residual @xr (@m rows), then
 * the MLP: the add and the MLP's norm as one op where the backend has it
 * and the MLP takes the rows whole (its bits: add then norm). */
static gboolean
residual_mlp (UmForward *fw, const DevLayer *L, const UmLayerWeights *W, UmBuf *xr, UmBuf *h, UmBuf **b, int m,
              GError **error)
{
  const UmBackendOps *ops = fw->be->ops;
  const int D = fw->model->cfg.d_model;

  if (ops->add_rms_norm != NULL && fw->experts == NULL && um_forward_chunk_rows (m, fw->opts.row_chunk) == m)
    return ops->add_rms_norm (fw->be, xr, h, m, D, L->ffn_norm, (float) fw->model->cfg.rms_eps, h, error)
           && mlp_rows (fw, L, W, xr, h, b, m, TRUE, error);
  return ops->add (fw->be, xr, h, (size_t) m * D, error) && mlp_rows (fw, L, W, xr, h, b, m, FALSE, error);
}

/* Final norm and LM head on @n rows of @xf, @chunk rows at a time, each
 * chunk's logits downloaded or chosen from as @dst says. Guided choice
 * needs a row's two halves in one chunk: the caller sees to it. */
static gboolean
head_rows (UmForward *fw, UmBuf *xf, UmBuf *h, UmBuf *out, int n, const HeadOut *dst, GError **error)
{
  const UmBackendOps *ops = fw->be->ops;
  UmBackend *be = fw->be;
  const int D = fw->model->cfg.d_model, V = fw->model->cfg.vocab_size;
  const int chunk = um_forward_chunk_rows (n, fw->opts.row_chunk);

  if (!ops->rms_norm (be, xf, n, D, fw->out_norm, (float) fw->model->cfg.rms_eps, h, error))
    return FALSE;
  for (int r0 = 0; r0 < n; r0 += chunk)
    {
      const int c = MIN (chunk, n - r0);
      UmBuf *hv = NULL;
      gboolean ok;

      if (c < n && (hv = ops->buf_view (be, h, (size_t) r0 * D * sizeof (float), (size_t) c * D * sizeof (float),
                                        error)) == NULL)
        return FALSE;
      /* Filed apart from the layers' products by the kernel profile. */
      um_kprof_set_head (TRUE);
      ok = matmul (fw, hv ? hv : h, c, fw->output, &fw->model->output, out, error);
      um_kprof_set_head (FALSE);
      if (ok && dst->logits != NULL)
        ok = ops->buf_download (be, out, 0, dst->logits + (size_t) r0 * V, (size_t) c * V * sizeof (float), error);
      else if (ok)
        {
          const int guided = dst->rule->cfg_scale > 0.0;
          ok = ops->choose (be, out, guided ? c / 2 : c, V, dst->rule, dst->positions + r0, dst->ids + r0,
                            dst->conf + r0, error);
        }
      um_forward_free_views (fw, &hv, 1);
      if (!ok)
        return FALSE;
    }
  return TRUE;
}

/* What follows a projection to q or k: the bias (Dream), the per-head
 * RMSNorm (QK-norm) and RoPE, on @rows rows of @n_heads heads. */
static gboolean
finish_qk (UmForward *fw, UmBuf *x, int rows, const gint32 *pos, int n_heads, const UmDevWeight *bias,
           const UmDevWeight *norm, GError **error)
{
  const UmBackendOps *ops = fw->be->ops;
  const UmModelConfig *c = &fw->model->cfg;
  const int hd = c->head_dim;

  return (bias == NULL || ops->add_bias (fw->be, x, rows, n_heads * hd, bias, error))
         && (norm == NULL || ops->rms_norm (fw->be, x, rows * n_heads, hd, norm, (float) c->rms_eps, x, error))
         && ops->rope (fw->be, x, rows, pos, n_heads, hd, c->rope_dim > 0 ? (int) c->rope_dim : hd, c->rope_theta,
                       c->rope_interleaved, error);
}

/* q of @rows normalized rows @h, ready for attention. */
static gboolean
q_proj (UmForward *fw, const DevLayer *L, const UmLayerWeights *W, UmBuf *h, int rows, const gint32 *pos,
        UmBuf *q, GError **error)
{
  return matmul (fw, h, rows, L->wq, &W->wq, q, error)
         && finish_qk (fw, q, rows, pos, W->n_heads, L->bq, L->q_norm, error);
}

/* k and v of @rows normalized rows @h. */
static gboolean
kv_proj (UmForward *fw, const DevLayer *L, const UmLayerWeights *W, UmBuf *h, int rows, const gint32 *pos,
         UmBuf *k, UmBuf *v, GError **error)
{
  const int kvd = W->n_kv_heads * fw->model->cfg.head_dim;

  return matmul (fw, h, rows, L->wk, &W->wk, k, error)
         && matmul (fw, h, rows, L->wv, &W->wv, v, error)
         && (L->bv == NULL || fw->be->ops->add_bias (fw->be, v, rows, kvd, L->bv, error))
         && finish_qk (fw, k, rows, pos, W->n_kv_heads, L->bk, L->k_norm, error);
}

/* Block-causal attention: how many keys (from position 0) each of @n query
 * rows at positions @pos sees in a window of @seq_len: its block's end.
 * NULL (every key) when the model or the generation has no blocks. */
static gint32 *
kv_lengths (const UmForward *fw, const gint32 *pos, int n, int seq_len)
{
  const int B = fw->attn_block;
  gint32 *len;

  if (!fw->model->cfg.block_causal || B <= 0)
    return NULL;
  len = g_new (gint32, MAX (n, 1));
  for (int i = 0; i < n; i++)
    len[i] = (gint32) MIN ((gint64) seq_len, ((gint64) pos[i] / B + 1) * B);
  return len;
}

/* Work the backend may record once and replay (um-backend.h's segments):
 * @fn's ops, under @key (0: never recorded). A recording that could not be
 * made or replayed runs @fn again, as usual; the stats count it once. */
typedef gboolean (*SegmentFn) (UmForward *fw, gpointer data, GError **error);

static gboolean
in_segment (UmForward *fw, guint64 key, SegmentFn fn, gpointer data, GError **error)
{
  const UmBackendOps *ops = fw->be->ops;
  gboolean redo = TRUE;

  if (key == 0 || ops->segment_begin == NULL)
    return fn (fw, data, error);
  while (redo)
    {
      const UmForwardStats snap = fw->stats;
      g_autoptr(GError) end_error = NULL;
      gboolean ok;

      if (!ops->segment_begin (fw->be, key, error))
        return FALSE;
      ok = fn (fw, data, error);
      if (!ops->segment_end (fw->be, !ok, &redo, &end_error))
        {
          if (ok)
            g_propagate_error (error, g_steal_pointer (&end_error));
          return FALSE;
        }
      if (!ok)
        return FALSE;
      if (redo)
        fw->stats = snap;
    }
  return TRUE;
}

/* Whether a pass's fixed-shape part may be recorded: not while layers or
 * experts come from the host, or the token rows are decoded there (those
 * wait on copies between ops). */
static gboolean
recordable (const UmForward *fw)
{
  return !um_forward_streaming (fw) && fw->experts == NULL && !fw->opts.embed_on_host
         && (fw->model->cfg.n_experts == 0 || fw->be->ops->moe != NULL);
}

/* A key for a pass's recorded part: the forward, the pass's kind and
 * shape; the backend checks the rest (every op's buffers and sizes). */
static guint64
segment_key (const UmForward *fw, int kind, int n_seq, int seq_len, int start, int end, int n_layers,
             gboolean keep_kv)
{
  const gint64 v[] = { (gint64) (uintptr_t) fw, kind, n_seq, seq_len, start, end, n_layers, keep_kv, fw->attn_block };
  guint64 h = 1469598103934665603ull;

  if (!recordable (fw))
    return 0;
  for (gsize i = 0; i < sizeof v; i++)
    h = (h ^ ((const guint8 *) v)[i]) * 1099511628211ull;
  return h | 1;   /* never 0 */
}

/* The layers of a pass and what they need: every computed row goes through
 * them; with @rows, the last layer's queries, attention and MLP run on the
 * wanted rows only. */
typedef struct {
  UmBuf        **b;
  const gint32  *ids;       /* the computed rows' tokens */
  int            m;         /* computed rows: n_seq × len */
  int            n_seq, seq_len, start, len;
  UmForwardKv    kv;
  const gint32  *pos, *seq, *kv_len;   /* per computed row */
  const gint32  *rows;      /* wanted rows for the last layer (NULL: all) */
  int            n;
  const gint32  *sel_pos, *sel_seq, *sel_kv_len;
  GCancellable  *cancellable;
  guint          l0, l1;    /* the layers to run */
  gboolean       embed;     /* the token rows first */
} LayerRun;

/* K and V of the computed rows: into the arena, or straight into the
 * cache (UM_FORWARD_KV_KEEP writes the whole canvas; with
 * UM_FORWARD_KV_REUSE each sequence's rows [start, start + len) are
 * contiguous there and replace the kept ones). */
static gboolean
kv_rows (UmForward *fw, const DevLayer *L, const UmLayerWeights *W, const LayerRun *a, guint l, UmBuf *kb, UmBuf *vb,
         GError **error)
{
  const UmModelConfig *c = &fw->model->cfg;
  const UmBackendOps *ops = fw->be->ops;
  UmBackend *be = fw->be;
  const int len = a->len, D = c->d_model;
  const size_t kvd_bytes = (size_t) c->n_kv_heads * c->head_dim * sizeof (float);
  gboolean ok = TRUE;

  if (a->kv != UM_FORWARD_KV_REUSE)
    return kv_proj (fw, L, W, a->b[UM_ARENA_H], a->m, a->pos, kb, vb, error);
  for (int s = 0; s < a->n_seq && ok; s++)
    {
      UmBuf *v[4] = { NULL, NULL, NULL, NULL };
      size_t off = ((size_t) s * a->seq_len + a->start) * kvd_bytes;
      v[0] = ops->buf_view (be, a->b[UM_ARENA_H], (size_t) s * len * D * sizeof (float), (size_t) len * D * sizeof (float),
                            error);
      v[1] = v[0] ? ops->buf_view (be, fw->kv_views[2 * l], off, len * kvd_bytes, error) : NULL;
      v[2] = v[1] ? ops->buf_view (be, fw->kv_views[2 * l + 1], off, len * kvd_bytes, error) : NULL;
      ok = v[2] != NULL && kv_proj (fw, L, W, v[0], len, a->pos + s * len, v[1], v[2], error);
      um_forward_free_views (fw, v, 4);
    }
  return ok;
}

/* The layer loop, once for every pass. */
static gboolean
run_layers (UmForward *fw, gpointer data, GError **error)
{
  LayerRun *a = data;
  const UmModelConfig *c = &fw->model->cfg;
  const UmBackendOps *ops = fw->be->ops;
  UmBackend *be = fw->be;
  UmBuf **b = a->b;
  const int M = a->m, n = a->n, seq_len = a->seq_len;
  const int D = c->d_model, hd = c->head_dim;
  const float eps = (float) c->rms_eps;

  if (a->embed && (fw->opts.embed_on_host ? !embed_host (fw, a->ids, M, b[UM_ARENA_X], error)
                                          : !ops->embed (be, fw->tok_embd, a->ids, M, b[UM_ARENA_X], error)))
    return FALSE;

  for (guint l = a->l0; l < a->l1; l++)
    {
      const UmLayerWeights *W = &fw->model->layers[l];
      const int H = W->n_heads, Hkv = W->n_kv_heads;
      /* In the last layer only the requested rows feed the output: keys and
       * values still need every row, queries, attention output and MLP only
       * the requested ones. */
      const gboolean last = a->rows != NULL && l + 1 == c->n_layers;
      const int m = last ? n : M;
      UmBuf *xr = last ? b[UM_ARENA_XS] : b[UM_ARENA_X];
      DevLayer streamed;
      const DevLayer *L = &fw->layers[l];
      /* With the cache, K and V go straight into it. */
      UmBuf *kb = a->kv != UM_FORWARD_KV_NONE ? fw->kv_views[2 * l] : b[UM_ARENA_K];
      UmBuf *vb = a->kv != UM_FORWARD_KV_NONE ? fw->kv_views[2 * l + 1] : b[UM_ARENA_V];

      if (g_cancellable_set_error_if_cancelled (a->cancellable, error))
        return FALSE;
      if (um_forward_streaming (fw))
        {
          if (!stream_layer (fw, l, &streamed, error))
            return FALSE;
          L = &streamed;
        }

      if (!ops->rms_norm (be, b[UM_ARENA_X], M, D, L->attn_norm, eps, b[UM_ARENA_H], error)
          || !kv_rows (fw, L, W, a, l, kb, vb, error))
        return FALSE;
      if (last)
        {
          /* h is free once k and v exist: reuse it for the selected rows. */
          if (!ops->get_rows (be, b[UM_ARENA_H], D, a->rows, n, b[UM_ARENA_ATT], error)
              || !q_proj (fw, L, W, b[UM_ARENA_ATT], n, a->sel_pos, b[UM_ARENA_Q], error)
              || !ops->get_rows (be, b[UM_ARENA_X], D, a->rows, n, b[UM_ARENA_XS], error))
            return FALSE;
        }
      else if (!q_proj (fw, L, W, b[UM_ARENA_H], M, a->pos, b[UM_ARENA_Q], error))
        return FALSE;
      if (!ops->attention (be, b[UM_ARENA_Q], m, last ? a->sel_seq : a->seq, last ? a->sel_kv_len : a->kv_len, kb, vb,
                           seq_len, H, Hkv, hd, b[UM_ARENA_ATT], error))
        return FALSE;
      fw->stats.flops += 4.0 * m * (double) seq_len * hd * H;
      if (!matmul (fw, b[UM_ARENA_ATT], m, L->wo, &W->wo, b[UM_ARENA_H], error)
          || !residual_mlp (fw, L, W, xr, b[UM_ARENA_H], b, m, error))
        return FALSE;
    }
  return TRUE;
}

/* Every row of the canvas through the layers (K and V kept with
 * UM_FORWARD_KV_KEEP); the last layer on the requested rows only. The
 * layers before it have the canvas's shape whatever the rows: recorded
 * once, replayed every step. */
static gboolean
full_pass (UmForward *fw, UmBuf **b, const UmForwardPass *p, const HeadOut *dst, GCancellable *cancellable,
           GError **error)
{
  const UmModelConfig *c = &fw->model->cfg;
  const int n_seq = p->n_seq, seq_len = p->seq_len, T = n_seq * seq_len;
  const gint32 *rows = p->rows;
  const int n = p->n_rows;
  const gboolean subset = rows != NULL;
  const gboolean keep_kv = p->kv == UM_FORWARD_KV_KEEP;
  g_autofree gint32 *index = g_new (gint32, um_forward_pass_index_count (T, subset ? n : 0));
  gint32 *pos = index, *seq = index + T, *sel_pos = NULL, *sel_seq = NULL;
  g_autofree gint32 *kv_all = NULL, *kv_sel = NULL;
  LayerRun a;
  const guint fixed = subset ? c->n_layers - 1 : c->n_layers;

  for (int t = 0; t < T; t++)
    {
      pos[t] = t % seq_len;
      seq[t] = t / seq_len;
    }
  if (subset)
    {
      sel_pos = seq + T;
      sel_seq = sel_pos + n;
      for (int i = 0; i < n; i++)
        {
          sel_pos[i] = pos[rows[i]];
          sel_seq[i] = seq[rows[i]];
        }
      kv_sel = kv_lengths (fw, sel_pos, n, seq_len);
    }
  kv_all = kv_lengths (fw, pos, T, seq_len);

  a = (LayerRun) { b, p->ids, T, n_seq, seq_len, 0, seq_len, p->kv, pos, seq, kv_all, rows, n, sel_pos, sel_seq,
                   kv_sel, cancellable, 0, fixed, TRUE };
  if (!in_segment (fw, segment_key (fw, 1, n_seq, seq_len, 0, seq_len, (int) fixed, keep_kv), run_layers, &a,
                   error))
    return FALSE;
  a.l0 = fixed;
  a.l1 = c->n_layers;
  a.embed = FALSE;
  if (!run_layers (fw, &a, error))
    return FALSE;

  if (g_cancellable_set_error_if_cancelled (cancellable, error))
    return FALSE;
  return head_rows (fw, subset ? b[UM_ARENA_XS] : b[UM_ARENA_X], b[UM_ARENA_H], b[UM_ARENA_LOGITS], n, dst, error);
}

/* A step inside a block with the cache: only the rows [start, end) of each
 * sequence run through the layers; their K and V replace the cached ones,
 * and attention reads the whole cached canvas. The layers have the same
 * shape every step of every block: recorded once, replayed after. */
static gboolean
cached_pass (UmForward *fw, UmBuf **b, const UmForwardPass *p, const HeadOut *dst, GCancellable *cancellable,
             GError **error)
{
  const UmModelConfig *c = &fw->model->cfg;
  const UmBackendOps *ops = fw->be->ops;
  const int n_seq = p->n_seq, seq_len = p->seq_len, start = p->start, end = p->end;
  const gint32 *ids = p->ids, *rows = p->rows;
  const int n = p->n_rows;
  const int len = end - start, m = n_seq * len;
  const int D = c->d_model;
  g_autofree gint32 *index = g_new (gint32, um_forward_cached_index_count (m, n));
  gint32 *sub_ids = index, *pos = index + m, *seq = index + 2 * m, *sel = index + 3 * m;
  g_autofree gint32 *kv_len = NULL;
  LayerRun a;

  for (int i = 0; i < m; i++)
    {
      int s = i / len, q = start + i % len;
      sub_ids[i] = ids[s * seq_len + q];
      pos[i] = q;
      seq[i] = s;
    }
  /* Requested rows as indices into the computed rows. */
  for (int i = 0; i < n; i++)
    {
      int s = rows[i] / seq_len, q = rows[i] % seq_len;
      if (q < start || q >= end)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                       "forward: row %d is outside the rows this cached step computes", rows[i]);
          return FALSE;
        }
      sel[i] = s * len + (q - start);
    }
  kv_len = kv_lengths (fw, pos, m, seq_len);

  a = (LayerRun) { b, sub_ids, m, n_seq, seq_len, start, len, UM_FORWARD_KV_REUSE, pos, seq, kv_len, NULL, n, NULL,
                   NULL, NULL, cancellable, 0, c->n_layers, TRUE };
  if (!in_segment (fw, segment_key (fw, 2, n_seq, seq_len, start, end, (int) c->n_layers, FALSE), run_layers, &a,
                   error)
      || g_cancellable_set_error_if_cancelled (cancellable, error))
    return FALSE;
  if (n == m)
    return head_rows (fw, b[UM_ARENA_X], b[UM_ARENA_H], b[UM_ARENA_LOGITS], n, dst, error);
  return ops->get_rows (fw->be, b[UM_ARENA_X], D, sel, n, b[UM_ARENA_XS], error)
         && head_rows (fw, b[UM_ARENA_XS], b[UM_ARENA_H], b[UM_ARENA_LOGITS], n, dst, error);
}

gboolean
um_forward_pass_layers (UmForward *fw, UmBuf **b, const UmForwardPass *p, const HeadOut *dst,
                        GCancellable *cancellable, GError **error)
{
  if (p->kv == UM_FORWARD_KV_REUSE)
    return cached_pass (fw, b, p, dst, cancellable, error);
  return full_pass (fw, b, p, dst, cancellable, error);
}

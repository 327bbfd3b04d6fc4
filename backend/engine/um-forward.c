#include "um-forward-private.h"

#include <string.h>

#include "um-choose.h"
#include "um-error.h"
#include "um-pool.h"
#include "um-expert-store.h"
#include "um-forward-experts.h"
#include "um-kprof.h"
#include "um-layer-store.h"
#include "um-moe.h"
#include "um-prefetch.h"
#include "um-quant.h"

gboolean
um_forward_streaming (const UmForward *fw)
{
  return fw->opts.stream_slots > 0;
}

static void
free_kv_views (UmForward *fw)
{
  for (guint i = 0; fw->kv_views != NULL && i < 2 * fw->model->cfg.n_layers; i++)
    if (fw->kv_views[i] != NULL)
      fw->be->ops->buf_free (fw->be, fw->kv_views[i]);
  g_clear_pointer (&fw->kv_views, g_free);
  fw->kv_rows = 0;
}

static void
free_kv (UmForward *fw)
{
  free_kv_views (fw);
  if (fw->kv != NULL)
    fw->be->ops->buf_free (fw->be, fw->kv);
  fw->kv = NULL;
  fw->kv_bytes = 0;
  fw->kv_rows = 0;
}

void
um_forward_free (UmForward *fw)
{
  if (fw == NULL)
    return;
  /* The copy threads first: they may be writing into a slot. */
  g_clear_pointer (&fw->prefetcher, um_prefetcher_free);
  g_clear_pointer (&fw->experts, um_forward_experts_free);
  for (guint s = 0; fw->stream != NULL && s < fw->opts.stream_slots; s++)
    {
      for (int i = 0; i < UM_LAYER_N_MATS; i++)
        if (fw->stream[s].mats[i] != NULL)
          fw->be->ops->weight_free (fw->be, fw->stream[s].mats[i]);
      for (guint i = 0; i < 3 * fw->stream[s].n_experts; i++)
        if (fw->stream[s].experts[i] != NULL)
          fw->be->ops->weight_free (fw->be, fw->stream[s].experts[i]);
      g_free (fw->stream[s].experts);
      if (fw->stream[s].buf != NULL)
        fw->be->ops->buf_free (fw->be, fw->stream[s].buf);
    }
  g_free (fw->stream);
  free_kv (fw);
  if (fw->arena != NULL)
    fw->be->ops->buf_free (fw->be, fw->arena);
  if (fw->dev_weights != NULL)
    for (guint i = 0; i < fw->dev_weights->len; i++)
      fw->be->ops->weight_free (fw->be, g_ptr_array_index (fw->dev_weights, i));
  g_clear_pointer (&fw->dev_weights, g_ptr_array_unref);
  g_free (fw->host_rows);
  g_free (fw->host_logits);
  g_free (fw->host_router);
  g_free (fw->host_bias);
  um_moe_routing_clear (&fw->routing);
  for (int i = 0; i < fw->n_routes; i++)
    um_moe_routing_clear (&fw->routes[i]);
  g_free (fw->routes);
  for (guint l = 0; fw->layers != NULL && l < fw->model->cfg.n_layers; l++)
    g_free (fw->layers[l].experts);
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
  /* A GPU has its own copy now: the file's pages need not stay in RAM. */
  if (dw != NULL && !fw->be->ops->weights_in_place)
    um_tensor_data_release (w->data, w->rows * w->row_bytes);
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
  return um_forward_new_with (model, backend, NULL, progress_cb, user_data, cancellable, error);
}

static gboolean
setup_streaming (UmForward *fw, GError **error)
{
  const UmBackendOps *ops = fw->be->ops;
  size_t slot_bytes = um_layer_slot_bytes (fw->model);

  if (fw->opts.store == NULL || fw->opts.stream_slots < 2)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "layer streaming needs a host store and at least 2 slots (got %u)", fw->opts.stream_slots);
      return FALSE;
    }
  if (ops->weight_view == NULL || ops->copy_upload == NULL || ops->sync == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                   "the %s backend cannot stream layers", ops->name);
      return FALSE;
    }
  fw->stream = g_new0 (StreamSlot, fw->opts.stream_slots);
  for (guint s = 0; s < fw->opts.stream_slots; s++)
    {
      fw->stream[s].shaped_for = -1;
      fw->stream[s].requested = -1;
      fw->stream[s].buf = ops->buf_alloc (fw->be, slot_bytes, error);
      if (fw->stream[s].buf == NULL)
        return FALSE;
    }
  fw->prefetcher = um_prefetcher_new (fw->opts.store, error);
  return fw->prefetcher != NULL;
}

/* Where the device weight @r (um_forward_device_weights ()) goes: one of
 * the forward's handles. */
static UmDevWeight **
weight_handle (UmForward *fw, const UmForwardWeightRef *r)
{
  /* The model's own weights come first; a layer's role has a layer. */
  DevLayer *L = r->role > UM_FORWARD_W_OUTPUT ? &fw->layers[r->layer] : NULL;

  switch (r->role)
    {
    case UM_FORWARD_W_TOK_EMBD: return &fw->tok_embd;
    case UM_FORWARD_W_OUT_NORM: return &fw->out_norm;
    case UM_FORWARD_W_OUTPUT: return &fw->output;
    case UM_FORWARD_W_ATTN_NORM: return &L->attn_norm;
    case UM_FORWARD_W_FFN_NORM: return &L->ffn_norm;
    case UM_FORWARD_W_BQ: return &L->bq;
    case UM_FORWARD_W_BK: return &L->bk;
    case UM_FORWARD_W_BV: return &L->bv;
    case UM_FORWARD_W_Q_NORM: return &L->q_norm;
    case UM_FORWARD_W_K_NORM: return &L->k_norm;
    case UM_FORWARD_W_ROUTER: return &L->router;
    case UM_FORWARD_W_ROUTER_BIAS: return &L->router_bias;
    case UM_FORWARD_W_WQ: return &L->wq;
    case UM_FORWARD_W_WK: return &L->wk;
    case UM_FORWARD_W_WV: return &L->wv;
    case UM_FORWARD_W_WO: return &L->wo;
    case UM_FORWARD_W_EXPERTS_GATE: return L->experts + 0;
    case UM_FORWARD_W_EXPERTS_UP: return L->experts + 1;
    case UM_FORWARD_W_EXPERTS_DOWN: return L->experts + 2;
    case UM_FORWARD_W_SH_GATE: return &L->sh_gate;
    case UM_FORWARD_W_SH_UP: return &L->sh_up;
    case UM_FORWARD_W_SH_DOWN: return &L->sh_down;
    case UM_FORWARD_W_W_GATE: return &L->w_gate;
    case UM_FORWARD_W_W_UP: return &L->w_up;
    case UM_FORWARD_W_W_DOWN: return &L->w_down;
    }
  g_return_val_if_reached (NULL);
}

/* Building the experts' host copy, as a share of the load's progress. */
static void
on_experts_progress (double fraction, gpointer user_data)
{
  UmForward *fw = user_data;
  double done = fw->loaded_bytes + fraction * um_model_expert_bytes (fw->model);

  if (fw->progress_cb != NULL)
    fw->progress_cb (done / MAX (fw->total_bytes, 1), fw->progress_data);
}

UmForward *
um_forward_new_with (UmModel                *model,
                     UmBackend              *backend,
                     const UmForwardOptions *options,
                     UmForwardProgress       progress_cb,
                     gpointer                user_data,
                     GCancellable           *cancellable,
                     GError                **error)
{
  g_autoptr(UmForward) fw = g_new0 (UmForward, 1);
  const UmModelConfig *c = &model->cfg;
  g_autofree UmForwardWeightRef *refs = g_new (UmForwardWeightRef, um_forward_max_device_weights (model));
  guint n_refs;

  fw->model = model;
  fw->be = backend;
  if (options != NULL)
    fw->opts = *options;
  fw->opts.embed_on_host = um_forward_embed_on_host (model, options);
  fw->progress_cb = progress_cb;
  fw->progress_data = user_data;
  fw->cancellable = cancellable;
  fw->dev_weights = g_ptr_array_new ();
  fw->layers = g_new0 (DevLayer, c->n_layers);
  um_moe_routing_init (&fw->routing);
  for (guint l = 0; l < c->n_layers; l++)
    if (model->layers[l].n_experts > 0)
      fw->layers[l].experts = g_new0 (UmDevWeight *, 3 * model->layers[l].n_experts);

  n_refs = um_forward_device_weights (model, &fw->opts, refs);
  /* Progress counts the bytes this backend is given. */
  for (guint i = 0; i < n_refs; i++)
    fw->total_bytes += um_forward_weight_bytes (refs[i].src);

  if (um_forward_streaming (fw) && !setup_streaming (fw, error))
    return NULL;
  /* The experts first: their copy releases the file's pages it read. */
  if (um_forward_experts_off_device (model, &fw->opts))
    {
      fw->total_bytes += um_model_expert_bytes (model);
      fw->experts = um_forward_experts_new (model, backend, &fw->opts, on_experts_progress, fw, cancellable, error);
      if (fw->experts == NULL)
        return NULL;
      fw->loaded_bytes += um_model_expert_bytes (model);
    }
  for (guint i = 0; i < n_refs; i++)
    {
      if (refs[i].n_experts == 0)
        {
          if ((*weight_handle (fw, &refs[i]) = load_weight (fw, refs[i].src, error)) == NULL)
            return NULL;
          continue;
        }
      /* The handle is this matrix's of expert 0; experts are 3 apart. */
      for (guint e = 0; e < refs[i].n_experts; e++)
        {
          UmWeight slice = um_weight_expert (refs[i].src, refs[i].n_experts, e);
          if ((weight_handle (fw, &refs[i])[3 * e] = load_weight (fw, &slice, error)) == NULL)
            return NULL;
        }
    }
  if (c->tied_embeddings)
    fw->output = fw->tok_embd;
  fw->progress_cb = NULL;
  fw->cancellable = NULL;
  return g_steal_pointer (&fw);
}

/* The arena at least @bytes long (its views are made per pass). */
static gboolean
grow_arena (UmForward *fw, size_t bytes, GError **error)
{
  const UmBackendOps *ops = fw->be->ops;

  if (fw->arena_bytes >= bytes)
    return TRUE;
  if (fw->arena != NULL)
    ops->buf_free (fw->be, fw->arena);
  fw->arena_bytes = 0;
  fw->arena = ops->buf_alloc (fw->be, bytes, error);
  if (fw->arena == NULL)
    return FALSE;
  fw->arena_bytes = bytes;
  return TRUE;
}

/* Views of the arena for this pass; the arena grows only when a longer
 * canvas needs it, so steady-state passes allocate no device memory. */
static gboolean
carve (UmForward *fw, const UmArenaLayout *a, UmBuf **views, GError **error)
{
  const UmBackendOps *ops = fw->be->ops;

  if (!grow_arena (fw, a->total, error))
    return FALSE;
  for (int s = 0; s < UM_ARENA_N_SLOTS; s++)
    if (a->bytes[s] > 0 && (views[s] = ops->buf_view (fw->be, fw->arena, a->offset[s], a->bytes[s], error)) == NULL)
      return FALSE;
  return TRUE;
}

void
um_forward_free_views (UmForward *fw, UmBuf **views, int n)
{
  for (int i = 0; i < n; i++)
    if (views[i] != NULL)
      fw->be->ops->buf_free (fw->be, views[i]);
}

/* Runs @fn (a pass) between the backend's pass bounds, again as long as
 * the backend says its results are not to be used (um-backend.h). */
typedef gboolean (*PassFn) (UmForward *fw, gpointer data, GError **error);

static gboolean
bounded_pass (UmForward *fw, PassFn fn, gpointer data, GError **error)
{
  const UmBackendOps *ops = fw->be->ops;
  gboolean redo = TRUE;

  if (ops->pass_begin == NULL)
    return fn (fw, data, error);
  while (redo)
    {
      const UmForwardStats snap = fw->stats;
      g_autoptr(GError) end_error = NULL;
      gboolean ok;

      if (!ops->pass_begin (fw->be, error))
        return FALSE;
      ok = fn (fw, data, error);
      if (!ops->pass_end (fw->be, &redo, &end_error))
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

/* A pass's work, for bounded_pass. */
typedef struct {
  UmBuf              **views;
  const UmForwardPass *pass;
  const HeadOut       *dst;
  GCancellable        *cancellable;
} PassWork;

static gboolean
pass_fn (UmForward *fw, gpointer data, GError **error)
{
  const PassWork *w = data;

  return um_forward_pass_layers (fw, w->views, w->pass, w->dst, w->cancellable, error);
}

/* The start of a pass: its time, and the pool's measurement of it. */
static gint64
pass_begin (UmForward *fw)
{
  fw->pass_flops0 = fw->stats.flops;
  um_pool_epoch_begin ();
  return g_get_monotonic_time ();
}

static gboolean
count_pass (UmForward *fw, int n_rows, gint64 t_start)
{
  um_pool_epoch_end (fw->stats.flops - fw->pass_flops0);
  fw->stats.n_passes++;
  fw->stats.logit_rows += n_rows;
  fw->stats.seconds += (g_get_monotonic_time () - t_start) / 1e6;
  return TRUE;
}

/* The first of @n rows that is not ascending or not inside [@lo, @hi),
 * or -1. */
static int
first_bad_row (const gint32 *rows, int n, int lo, int hi)
{
  for (int i = 0; i < n; i++)
    if (rows[i] < lo || rows[i] >= hi || (i > 0 && rows[i] <= rows[i - 1]))
      return i;
  return -1;
}

/* The one pass runner: the work buffers of @p's rows, laid out and carved
 * from the arena, the pass between the backend's bounds, the buffers given
 * back and the pass counted (started at @t_start). */
static gboolean
run_pass (UmForward *fw, const UmForwardPass *p, const HeadOut *dst, gint64 t_start, GCancellable *cancellable,
          GError **error)
{
  const int computed = p->n_seq * (p->end - p->start);
  UmBuf *views[UM_ARENA_N_SLOTS] = { NULL };
  UmArenaLayout a;
  gboolean ok;

  um_forward_arena_layout (fw->model, 1, computed, p->n_rows, fw->opts.row_chunk, fw->be->ops->moe != NULL, &a);
  ok = carve (fw, &a, views, error)
       && bounded_pass (fw, pass_fn, &(PassWork) { views, p, dst, cancellable }, error);
  um_forward_free_views (fw, views, UM_ARENA_N_SLOTS);
  return ok && count_pass (fw, p->n_rows, t_start);
}

static gboolean
logits_pass (UmForward     *fw,
             const gint32  *ids,
             int            n_seq,
             int            seq_len,
             const gint32  *rows,
             int            n_rows,
             const HeadOut *dst,
             GCancellable  *cancellable,
             GError       **error)
{
  const UmModelConfig *c = &fw->model->cfg;
  const int T = n_seq * seq_len;
  const gboolean subset = rows != NULL;
  const int n = subset ? n_rows : T;
  gint64 t_start = pass_begin (fw);
  int bad;

  if (n_seq <= 0 || seq_len <= 0 || (guint) seq_len > c->max_seq_len)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "forward: a canvas of %d × %d tokens is empty or longer than the model's %u",
                   n_seq, seq_len, c->max_seq_len);
      return FALSE;
    }
  if (subset && (bad = first_bad_row (rows, n_rows, 0, T)) >= 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "forward: requested rows must be ascending and inside the canvas (row %d)", rows[bad]);
      return FALSE;
    }
  if (n == 0)
    return TRUE;
  /* All rows asked for one by one are the whole canvas. */
  return run_pass (fw, &(UmForwardPass) { ids, n_seq, seq_len, 0, seq_len, UM_FORWARD_KV_NONE, n == T ? NULL : rows, n },
                   dst, t_start, cancellable, error);
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
  const HeadOut dst = { .logits = logits };
  return logits_pass (fw, ids, n_seq, seq_len, rows, n_rows, &dst, cancellable, error);
}

/* The cache's buffer at least @bytes long; its views go with the old one. */
static gboolean
grow_kv (UmForward *fw, size_t bytes, GError **error)
{
  if (fw->kv != NULL && fw->kv_bytes >= bytes)
    return TRUE;
  free_kv (fw);
  fw->kv = fw->be->ops->buf_alloc (fw->be, bytes, error);
  if (fw->kv == NULL)
    return FALSE;
  fw->kv_bytes = bytes;
  return TRUE;
}

/* The cache for @rows canvas rows: one buffer, a K and a V view per layer.
 * A buffer reserved for a longer canvas is reused. */
static gboolean
ensure_kv (UmForward *fw, int rows, GError **error)
{
  const UmModelConfig *c = &fw->model->cfg;
  const size_t per = um_forward_kv_view_bytes (fw->model, rows);
  const UmBackendOps *ops = fw->be->ops;

  if (fw->kv != NULL && fw->kv_views != NULL && fw->kv_rows == rows)
    return TRUE;
  if (!grow_kv (fw, um_forward_kv_cache_bytes (fw->model, rows), error))
    return FALSE;
  free_kv_views (fw);
  fw->kv_views = g_new0 (UmBuf *, 2 * c->n_layers);
  for (guint i = 0; i < 2 * c->n_layers; i++)
    if ((fw->kv_views[i] = ops->buf_view (fw->be, fw->kv, i * per, per, error)) == NULL)
      {
        free_kv (fw);
        return FALSE;
      }
  fw->kv_rows = rows;
  return TRUE;
}

gboolean
um_forward_reserve (UmForward *fw, const UmForwardShape *shape, GError **error)
{
  UmForwardBytes b;

  um_forward_bytes (fw->model, &fw->opts, shape, &b);
  if (!grow_arena (fw, b.arena, error) || (b.kv_cache > 0 && !grow_kv (fw, b.kv_cache, error)))
    return FALSE;
  /* MoE: the router's logits of the largest chunk, now rather than in the
   * first pass (the plan counts them in host_index), and the host buffers
   * of experts off the device. */
  if (fw->model->cfg.n_experts > 0)
    {
      const int chunk = um_forward_chunk_rows (shape->n_seq * shape->seq_len, fw->opts.row_chunk);
      if (!um_forward_host_router (fw, (size_t) chunk * fw->model->cfg.n_experts, error)
          || (fw->experts != NULL
              && !um_forward_experts_reserve (fw->experts, shape->n_seq * shape->seq_len, chunk, error)))
        return FALSE;
    }
  if (b.host_logits / sizeof (float) > fw->host_logits_floats)
    {
      g_free (fw->host_logits);
      fw->host_logits = g_try_malloc (b.host_logits);
      fw->host_logits_floats = fw->host_logits != NULL ? b.host_logits / sizeof (float) : 0;
      if (fw->host_logits == NULL)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY, "out of host memory for the logits (%.1f MiB)",
                       b.host_logits / 1048576.0);
          return FALSE;
        }
    }
  return TRUE;
}

static gboolean
logits_pass_cached (UmForward     *fw,
                    const gint32  *ids,
                    int            n_seq,
                    int            seq_len,
                    int            block_start,
                    int            block_end,
                    gboolean       refresh,
                    gboolean       dual,
                    const gint32  *rows,
                    int            n_rows,
                    const HeadOut *dst,
                    GCancellable  *cancellable,
                    GError       **error)
{
  const UmModelConfig *c = &fw->model->cfg;
  const int T = n_seq * seq_len;
  gint64 t_start = pass_begin (fw);
  int bad;

  if (n_seq <= 0 || seq_len <= 0 || (guint) seq_len > c->max_seq_len || block_start < 0
      || block_end <= block_start || block_end > seq_len || rows == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "forward: block [%d, %d) of a %d × %d canvas is not a block, or no rows were asked for",
                   block_start, block_end, n_seq, seq_len);
      return FALSE;
    }
  if ((bad = first_bad_row (rows, n_rows, 0, T)) >= 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "forward: requested rows must be ascending and inside the canvas (row %d)", rows[bad]);
      return FALSE;
    }
  if (n_rows == 0)
    return TRUE;
  if (!refresh && fw->kv_rows != T)
    refresh = TRUE;   /* nothing cached for this canvas yet */

  if (refresh)
    return ensure_kv (fw, T, error)
           && run_pass (fw, &(UmForwardPass) { ids, n_seq, seq_len, 0, seq_len, UM_FORWARD_KV_KEEP,
                                               n_rows == T ? NULL : rows, n_rows }, dst, t_start, cancellable, error);
  return run_pass (fw, &(UmForwardPass) { ids, n_seq, seq_len, block_start, dual ? block_end : seq_len,
                                          UM_FORWARD_KV_REUSE, rows, n_rows }, dst, t_start, cancellable, error);
}

gboolean
um_forward_logits_cached (UmForward     *fw,
                          const gint32  *ids,
                          int            n_seq,
                          int            seq_len,
                          int            block_start,
                          int            block_end,
                          gboolean       refresh,
                          gboolean       dual,
                          const gint32  *rows,
                          int            n_rows,
                          float         *logits,
                          GCancellable  *cancellable,
                          GError       **error)
{
  const HeadOut dst = { .logits = logits };
  return logits_pass_cached (fw, ids, n_seq, seq_len, block_start, block_end, refresh, dual, rows, n_rows, &dst,
                             cancellable, error);
}

/* Whether @rule's choice over @n_rows rows runs on the backend: it needs
 * the op and, with guidance, both halves in one LM-head chunk (the host
 * combines them otherwise). Sets the HeadOut to fill either way. */
static gboolean
choose_setup (UmForward *fw, int n_rows, const UmChooseRule *rule, const gint32 *positions, gint32 *out_ids,
              double *out_conf, HeadOut *dst, GError **error)
{
  const gboolean guided = rule->cfg_scale > 0.0;
  const size_t V = fw->model->cfg.vocab_size;
  size_t floats;

  if (guided && n_rows % 2 != 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "forward: guidance needs as many unconditional rows as conditional ones (%d rows)", n_rows);
      return FALSE;
    }
  memset (dst, 0, sizeof *dst);
  dst->rule = rule;
  dst->positions = positions;
  dst->ids = out_ids;
  dst->conf = out_conf;
  floats = um_forward_host_logit_floats (fw->model, &fw->opts, fw->be->ops->choose != NULL, guided, n_rows);
  if (floats == 0)
    return TRUE;
  if (floats > fw->host_logits_floats)
    {
      g_free (fw->host_logits);
      fw->host_logits = g_try_malloc (floats * sizeof (float));
      fw->host_logits_floats = fw->host_logits != NULL ? floats : 0;
      if (fw->host_logits == NULL)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY, "out of memory for %d × %zu logits", n_rows, V);
          return FALSE;
        }
    }
  dst->logits = fw->host_logits;
  return TRUE;
}

static void
choose_on_host (UmForward *fw, int n_rows, const HeadOut *dst)
{
  if (dst->logits != NULL && n_rows > 0)
    um_choose_rows (dst->logits, dst->rule->cfg_scale > 0.0 ? n_rows / 2 : n_rows,
                    (int) fw->model->cfg.vocab_size, dst->rule, dst->positions, dst->ids, dst->conf);
}

gboolean
um_forward_choose (UmForward          *fw,
                   const gint32       *ids,
                   int                 n_seq,
                   int                 seq_len,
                   const gint32       *rows,
                   int                 n_rows,
                   const UmChooseRule *rule,
                   const gint32       *positions,
                   gint32             *out_ids,
                   double             *out_conf,
                   GCancellable       *cancellable,
                   GError            **error)
{
  HeadOut dst;

  if (rows == NULL)
    n_rows = n_seq * seq_len;
  if (!choose_setup (fw, n_rows, rule, positions, out_ids, out_conf, &dst, error)
      || !logits_pass (fw, ids, n_seq, seq_len, rows, n_rows, &dst, cancellable, error))
    return FALSE;
  choose_on_host (fw, n_rows, &dst);
  return TRUE;
}

gboolean
um_forward_choose_cached (UmForward          *fw,
                          const gint32       *ids,
                          int                 n_seq,
                          int                 seq_len,
                          int                 block_start,
                          int                 block_end,
                          gboolean            refresh,
                          gboolean            dual,
                          const gint32       *rows,
                          int                 n_rows,
                          const UmChooseRule *rule,
                          const gint32       *positions,
                          gint32             *out_ids,
                          double             *out_conf,
                          GCancellable       *cancellable,
                          GError            **error)
{
  HeadOut dst;

  if (!choose_setup (fw, n_rows, rule, positions, out_ids, out_conf, &dst, error)
      || !logits_pass_cached (fw, ids, n_seq, seq_len, block_start, block_end, refresh, dual, rows, n_rows, &dst,
                              cancellable, error))
    return FALSE;
  choose_on_host (fw, n_rows, &dst);
  return TRUE;
}

void
um_forward_set_attention_block (UmForward *fw, int block_length)
{
  fw->attn_block = MAX (block_length, 0);
}

static gboolean
logits_pass_window (UmForward     *fw,
                    const gint32  *ids,
                    int            canvas,
                    int            window,
                    int            start,
                    const gint32  *rows,
                    int            n_rows,
                    const HeadOut *dst,
                    GCancellable  *cancellable,
                    GError       **error)
{
  const UmModelConfig *c = &fw->model->cfg;
  gint64 t_start = pass_begin (fw);
  int bad;

  if (window <= 0 || window > canvas || (guint) canvas > c->max_seq_len || start < 0 || start >= window
      || rows == NULL || n_rows <= 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "forward: window %d from %d of a %d-token canvas is not a window, or no rows were asked for",
                   window, start, canvas);
      return FALSE;
    }
  if ((bad = first_bad_row (rows, n_rows, start, window)) >= 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "forward: requested rows must be ascending and inside the computed part [%d, %d) (row %d)",
                   start, window, rows[bad]);
      return FALSE;
    }
  /* Nothing kept for a canvas of this length: compute everything. */
  if (fw->kv == NULL || fw->kv_views == NULL || fw->kv_rows != canvas)
    {
      if (!ensure_kv (fw, canvas, error))
        return FALSE;
      start = 0;
    }
  if (start == 0)
    return run_pass (fw, &(UmForwardPass) { ids, 1, window, 0, window, UM_FORWARD_KV_KEEP,
                                            n_rows == window ? NULL : rows, n_rows }, dst, t_start, cancellable, error);
  return run_pass (fw, &(UmForwardPass) { ids, 1, window, start, window, UM_FORWARD_KV_REUSE, rows, n_rows }, dst,
                   t_start, cancellable, error);
}

gboolean
um_forward_choose_window (UmForward          *fw,
                          const gint32       *ids,
                          int                 canvas,
                          int                 window,
                          int                 start,
                          const gint32       *rows,
                          int                 n_rows,
                          const UmChooseRule *rule,
                          const gint32       *positions,
                          gint32             *out_ids,
                          double             *out_conf,
                          GCancellable       *cancellable,
                          GError            **error)
{
  HeadOut dst;

  if (rule->cfg_scale > 0.0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "forward: a window pass has no guidance");
      return FALSE;
    }
  if (!choose_setup (fw, n_rows, rule, positions, out_ids, out_conf, &dst, error)
      || !logits_pass_window (fw, ids, canvas, window, start, rows, n_rows, &dst, cancellable, error))
    return FALSE;
  choose_on_host (fw, n_rows, &dst);
  return TRUE;
}

UmLayerStore *
um_forward_get_expert_store (UmForward *fw)
{
  return um_forward_experts_get_store (fw->experts);
}

UmBackend *
um_forward_get_host_backend (UmForward *fw)
{
  return um_forward_experts_get_host (fw->experts);
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

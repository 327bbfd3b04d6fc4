/* um-forward-experts.c — routed experts in host memory (a copy, raw or
 * zstd: see um-expert-store.h): computed by the host CPU (HOST), or
 * fetched into device slots as the routing asks for them (FETCH).
 *
 * FETCH: a layer's experts that some row goes to are copied, one by one,
 * from the host copy into k slots on the device by the prefetcher's copy
 * thread (the units of um-expert-store.h), the next ones while the current
 * one computes; the first of a layer waits, as its routing is known only
 * then. HOST: the rows go down to the host, each expert runs on a CPU
 * backend of the forward's own (no budget: host memory), and its outputs
 * go back up to be added on the device. Either way each expert runs the
 * resident forward's ops (gather, gate and up products, SwiGLU, down
 * product, weighted add into the residual) in the same order.
 */
#include "um-forward-experts.h"

#include <string.h>

#include "um-cpu-kernels.h"
#include "um-error.h"
#include "um-expert-store.h"
#include "um-prefetch.h"

/* A slot for one expert, and views of its three slices. */
typedef struct {
  UmBuf       *buf;
  UmDevWeight *w[3];
  UmWeight     meta[3];   /* what the views were made for (data ignored) */
  gboolean     shaped;
} ExpertSlot;

struct _UmForwardExperts {
  UmModel           *model;
  UmBackend         *dev;
  UmBackend         *host;        /* HOST: the CPU backend the experts run on */
  UmBackend         *be;          /* where they run: dev (FETCH) or host (HOST) */
  UmExpertStore     *store;       /* the experts' host copy */
  UmPrefetcher      *prefetcher;
  ExpertSlot        *slots;
  guint              n_slots;
  guint64            seq;         /* experts fetched so far: picks the slot */
  UmDevWeight      **resident;    /* HOST: 3 per unit, read in place from the raw copy by the host backend */
  guint              n_resident;
  /* HOST: rows downloaded and outputs to upload, and the host work buffers */
  float             *staging;
  size_t             staging_floats;
  UmBuf             *work;
  UmBuf             *views[UM_EXPERT_WORK_N];
  int                work_rows, work_chunk;
  gint32            *active;      /* a layer's experts with rows, in order */
  gint32            *rows;        /* an expert's group of a chunk, as rows of the layer */
  int                rows_cap;
};

static void
free_slot_views (UmForwardExperts *x, ExpertSlot *s)
{
  for (int i = 0; i < 3; i++)
    if (s->w[i] != NULL)
      {
        x->be->ops->weight_free (x->be, s->w[i]);
        s->w[i] = NULL;
      }
  s->shaped = FALSE;
}

static void
free_work (UmForwardExperts *x)
{
  for (int i = 0; i < UM_EXPERT_WORK_N; i++)
    if (x->views[i] != NULL)
      {
        x->host->ops->buf_free (x->host, x->views[i]);
        x->views[i] = NULL;
      }
  if (x->work != NULL)
    x->host->ops->buf_free (x->host, x->work);
  x->work = NULL;
  x->work_rows = x->work_chunk = 0;
}

void
um_forward_experts_free (UmForwardExperts *x)
{
  if (x == NULL)
    return;
  /* The copy thread first: it may be writing into a slot. */
  g_clear_pointer (&x->prefetcher, um_prefetcher_free);
  for (guint s = 0; x->slots != NULL && s < x->n_slots; s++)
    {
      free_slot_views (x, &x->slots[s]);
      if (x->slots[s].buf != NULL)
        x->be->ops->buf_free (x->be, x->slots[s].buf);
    }
  g_free (x->slots);
  for (guint i = 0; i < x->n_resident; i++)
    if (x->resident[i] != NULL)
      x->host->ops->weight_free (x->host, x->resident[i]);
  g_free (x->resident);
  if (x->host != NULL)
    free_work (x);
  g_clear_pointer (&x->store, um_expert_store_free);
  g_free (x->staging);
  g_free (x->active);
  g_free (x->rows);
  g_clear_pointer (&x->host, um_backend_free);
  g_free (x);
}

/* The host backend: the CPU's, with the products the device's CPU backend
 * uses (the same kernels, so the same results), else the AUTO rule for the
 * experts' type (um-backend.h). No budget: its memory is host memory. */
static UmBackend *
host_backend_new (UmForwardExperts *x, GError **error)
{
  /* The process's count as the engine set it: passing one here would fix
   * it and turn the adaptive default off. */
  UmBackend *host = um_backend_cpu_new (0, -1, error);
  UmProducts products = UM_PRODUCTS_AUTO;
  UmDType t = UM_DTYPE_F32;

  if (host == NULL)
    return NULL;
  if (g_str_equal (x->dev->ops->name, "cpu"))
    products = um_backend_cpu_get_products (x->dev);
  else
    {
      for (guint l = 0; l < x->model->cfg.n_layers; l++)
        if (x->model->layers[l].n_experts > 0)
          {
            t = x->model->layers[l].w_gate.dtype;
            break;
          }
      products = um_products_auto_int8 (t) ? UM_PRODUCTS_INT8 : UM_PRODUCTS_EXACT;
    }
  um_backend_cpu_set_products (host, products);
  return host;
}

static const UmExpertUnits *
units_of (const UmForwardExperts *x)
{
  return um_expert_store_get_units (x->store);
}

UmForwardExperts *
um_forward_experts_new (UmModel                 *model,
                        UmBackend               *device,
                        const UmForwardOptions  *o,
                        void                   (*progress) (double fraction, gpointer data),
                        gpointer                 data,
                        GCancellable            *cancellable,
                        GError                 **error)
{
  g_autoptr(UmForwardExperts) x = g_new0 (UmForwardExperts, 1);
  const UmBackendOps *ops;

  x->model = model;
  x->dev = device;
  x->active = g_new (gint32, MAX (model->cfg.n_experts, 1));
  if (o->stream_slots > 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "experts off the device and layer streaming do not go together");
      return NULL;
    }
  if (o->experts == UM_EXPERTS_HOST)
    {
      x->host = host_backend_new (x, error);
      if (x->host == NULL)
        return NULL;
      x->be = x->host;
    }
  else
    x->be = device;
  ops = x->be->ops;

  if (ops->weight_view == NULL || ops->copy_upload == NULL || ops->sync == NULL || ops->host_alloc == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "the %s backend cannot fetch experts", ops->name);
      return NULL;
    }
  /* The host copy, built by the backend that reads it: pinned memory on a
   * GPU (FETCH), the host's for HOST. It takes the experts' file pages'
   * place (they are released), so host memory holds every expert, as the
   * plan counts, whichever a run reads, and nothing is read from the file
   * while generating. */
  x->store = um_expert_store_new (x->be, model, o->expert_zstd ? UM_STORE_ZSTD : UM_STORE_RAW,
                                  UM_LAYER_STORE_ZSTD_LEVEL, progress, data, cancellable, error);
  if (x->store == NULL)
    return NULL;
  if (um_forward_experts_use_slots (o))
    {
      x->n_slots = um_forward_expert_slots (o);
      x->slots = g_new0 (ExpertSlot, x->n_slots);
      for (guint s = 0; s < x->n_slots; s++)
        if ((x->slots[s].buf = ops->buf_alloc (x->be, um_expert_slot_bytes (model), error)) == NULL)
          return NULL;
      x->prefetcher = um_prefetcher_new (um_expert_store_get_store (x->store), error);
      if (x->prefetcher == NULL)
        return NULL;
    }
  else
    {
      /* HOST from a raw copy: every expert slice read in place there (the
       * CPU backend copies nothing). */
      const UmExpertUnits *u = units_of (x);
      UmLayerStore *store = um_expert_store_get_store (x->store);
      x->n_resident = 3 * um_expert_units_count (u);
      x->resident = g_new0 (UmDevWeight *, MAX (x->n_resident, 1));
      for (guint i = 0; i < um_expert_units_count (u); i++)
        {
          const UmLayerWeights *L = &u->model.layers[i];
          const UmWeight *m[3] = { &L->w_gate, &L->w_up, &L->w_down };
          UmLayerLayout lay;
          um_layer_layout (L, &lay);
          for (int k = 0; k < 3; k++)
            {
              UmWeight w = *m[k];
              w.data = um_layer_store_raw_block (store, i) + lay.offset[4 + k];
              if ((x->resident[3 * i + k] = ops->weight_load (x->be, &w, error)) == NULL)
                return NULL;
            }
        }
    }
  return g_steal_pointer (&x);
}

UmLayerStore *
um_forward_experts_get_store (UmForwardExperts *x)
{
  return x != NULL && x->store != NULL ? um_expert_store_get_store (x->store) : NULL;
}

UmBackend *
um_forward_experts_get_host (UmForwardExperts *x)
{
  return x != NULL ? x->host : NULL;
}

gboolean
um_forward_experts_reserve (UmForwardExperts *x, int rows, int chunk, GError **error)
{
  const UmBackendOps *ops;
  UmExpertWorkLayout w;
  size_t floats = (size_t) rows * x->model->cfg.d_model;

  if (chunk > x->rows_cap)
    {
      x->rows_cap = chunk;
      x->rows = g_renew (gint32, x->rows, chunk);
    }
  if (x->host == NULL || (rows <= x->work_rows && chunk <= x->work_chunk))
    return TRUE;
  rows = MAX (rows, x->work_rows);
  chunk = MAX (chunk, x->work_chunk);
  floats = (size_t) rows * x->model->cfg.d_model;
  ops = x->host->ops;
  free_work (x);
  g_free (x->staging);
  x->staging_floats = 0;
  x->staging = g_try_new (float, floats);
  if (x->staging == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY, "out of host memory for the experts' rows");
      return FALSE;
    }
  x->staging_floats = floats;
  um_forward_experts_work_layout (x->model, rows, chunk, &w);
  if ((x->work = ops->buf_alloc (x->host, w.total, error)) == NULL)
    return FALSE;
  for (int i = 0; i < UM_EXPERT_WORK_N; i++)
    if ((x->views[i] = ops->buf_view (x->host, x->work, w.offset[i], w.bytes[i], error)) == NULL)
      return FALSE;
  x->work_rows = rows;
  x->work_chunk = chunk;
  return TRUE;
}

static gboolean
same_meta (const UmWeight *a, const UmWeight *b)
{
  return a->dtype == b->dtype && a->rows == b->rows && a->cols == b->cols && a->row_bytes == b->row_bytes;
}

/* The slot's views for unit @u's slices (made again only for other shapes:
 * the _M mixes give some layers 6-bit down products). */
static gboolean
shape_slot (UmForwardExperts *x, ExpertSlot *s, guint u, GError **error)
{
  const UmLayerWeights *L = &units_of (x)->model.layers[u];
  const UmWeight *m[3] = { &L->w_gate, &L->w_up, &L->w_down };
  UmLayerLayout lay;

  if (s->shaped && same_meta (&s->meta[0], m[0]) && same_meta (&s->meta[1], m[1]) && same_meta (&s->meta[2], m[2]))
    return TRUE;
  free_slot_views (x, s);
  um_layer_layout (L, &lay);
  for (int i = 0; i < 3; i++)
    {
      if ((s->w[i] = x->be->ops->weight_view (x->be, s->buf, lay.offset[4 + i], m[i], error)) == NULL)
        {
          free_slot_views (x, s);
          return FALSE;
        }
      s->meta[i] = *m[i];
    }
  s->shaped = TRUE;
  return TRUE;
}

static gboolean
product (UmBackend *be, UmBuf *in, int rows, const UmDevWeight *w, const UmWeight *hw, UmBuf *out,
         UmForwardStats *st, GError **error)
{
  gint64 t0 = g_get_monotonic_time ();
  gboolean ok = be->ops->matmul (be, in, rows, w, out, error);
  double flops = 2.0 * rows * (double) hw->rows * (double) hw->cols;

  st->seconds_matmul += (g_get_monotonic_time () - t0) / 1e6;
  st->flops += flops;
  st->flops_matmul += flops;
  return ok;
}

/* Slot @s, asked for unit @u earlier (or not: then fetched here), holds it
 * once this returns. */
static gboolean
wait_slot (UmForwardExperts *x, guint s, guint u, UmForwardStats *st, GError **error)
{
  gint64 t0 = g_get_monotonic_time ();
  gboolean ok = um_prefetcher_wait (x->prefetcher, (int) s, u, error);

  st->seconds_expert_wait += (g_get_monotonic_time () - t0) / 1e6;
  return ok && shape_slot (x, &x->slots[s], u, error);
}

static void
request_slot (UmForwardExperts *x, guint s, guint u, UmForwardStats *st)
{
  /* A slot still holding the unit is not copied again (the prefetcher
   * skips it), so count only real requests. */
  if (um_prefetcher_holds (x->prefetcher, (int) s) != (int) u)
    {
      const UmLayerWeights *L = &units_of (x)->model.layers[u];
      st->experts_fetched++;
      st->expert_bytes_fetched += L->w_gate.rows * L->w_gate.row_bytes + L->w_up.rows * L->w_up.row_bytes
                                  + L->w_down.rows * L->w_down.row_bytes;
    }
  um_prefetcher_request (x->prefetcher, (int) s, x->slots[s].buf, u);
}

gboolean
um_forward_experts_run (UmForwardExperts   *x,
                        guint               layer,
                        const UmMoeRouting *routes,
                        int                 chunk,
                        UmBuf              *xr,
                        UmBuf              *h,
                        int                 m,
                        UmBuf              *ex,
                        UmBuf              *gate,
                        UmBuf              *up,
                        UmBuf              *ey,
                        UmBuf              *work,
                        UmForwardStats     *st,
                        GError            **error)
{
  const UmLayerWeights *W = &x->model->layers[layer];
  const int D = x->model->cfg.d_model, F = W->ffn, E = W->n_experts;
  const int n_chunks = (m + chunk - 1) / chunk;
  const gboolean on_host = x->host != NULL;
  const guint k = x->n_slots;
  UmBackend *be = x->be, *dev = x->dev;
  const UmBackendOps *ops = be->ops;
  UmBuf *in = h, *X = ex, *G = gate, *U = up, *Y = ey;
  gint64 t0 = g_get_monotonic_time ();
  const guint64 seq0 = x->seq;
  int n_active = 0;

  /* The experts some row of some chunk goes to, in order. */
  for (int e = 0; e < E; e++)
    for (int q = 0; q < n_chunks; q++)
      if (routes[q].offset[e + 1] > routes[q].offset[e])
        {
          x->active[n_active++] = e;
          break;
        }
  if (n_active == 0)
    return TRUE;
  if (chunk > x->rows_cap)
    {
      x->rows_cap = chunk;
      x->rows = g_renew (gint32, x->rows, chunk);
    }

  if (on_host)
    {
      /* The layer's rows go down once; each expert gathers from them. */
      if (!um_forward_experts_reserve (x, m, chunk, error)
          || !dev->ops->buf_download (dev, h, 0, x->staging, (size_t) m * D * sizeof (float), error)
          || !ops->buf_upload (be, x->views[UM_EXPERT_WORK_H], 0, x->staging, (size_t) m * D * sizeof (float), error))
        return FALSE;
      in = x->views[UM_EXPERT_WORK_H];
      X = x->views[UM_EXPERT_WORK_X];
      G = x->views[UM_EXPERT_WORK_G];
      U = x->views[UM_EXPERT_WORK_U];
      Y = x->views[UM_EXPERT_WORK_Y];
    }
  if (x->prefetcher != NULL)
    {
      /* The slots' last readers (the previous layer's experts) are done
       * before the copies overwrite them. */
      if (!ops->sync (be, error))
        return FALSE;
      for (int j = 0; j < (int) MIN ((guint) n_active, k); j++)
        request_slot (x, (seq0 + j) % k, um_expert_units_index (units_of (x), layer, x->active[j]), st);
    }

  for (int j = 0; j < n_active; j++)
    {
      const int e = x->active[j];
      const guint u = um_expert_units_index (units_of (x), layer, e);
      const guint s = (seq0 + j) % MAX (k, 1);
      const UmLayerWeights *slices = &units_of (x)->model.layers[u];
      UmDevWeight *const *w;

      if (x->prefetcher != NULL)
        {
          if (!wait_slot (x, s, u, st, error))
            return FALSE;
          w = x->slots[s].w;
        }
      else
        w = x->resident + 3 * u;
      for (int q = 0; q < n_chunks; q++)
        {
          const UmMoeRouting *r = &routes[q];
          const int n = r->offset[e + 1] - r->offset[e];

          if (n == 0)
            continue;
          /* The chunk's rows among the layer's. */
          for (int i = 0; i < n; i++)
            x->rows[i] = r->rows[r->offset[e] + i] + q * chunk;
          /* FETCH on a backend that routes: its expert kernel, whose bits
           * are its moe op's (what the resident layer would give). */
          if (!on_host && ops->expert_ffn != NULL && work != NULL)
            {
              const double flops = 2.0 * n * 3.0 * D * (double) F;
              st->flops += flops;
              st->flops_matmul += flops;
              if (!ops->expert_ffn (be, in, x->rows, n, (UmDevWeight *const *) w, F, work, Y, error))
                return FALSE;
            }
          else if (!ops->get_rows (be, in, D, x->rows, n, X, error)
                   || !product (be, X, n, w[0], &slices->w_gate, G, st, error)
                   || !product (be, X, n, w[1], &slices->w_up, U, st, error)
                   || !ops->swiglu (be, G, U, (size_t) n * F, G, error)
                   || !product (be, G, n, w[2], &slices->w_down, Y, st, error))
            return FALSE;
          /* HOST: the group's outputs go up, into the device's work buffer. */
          if (on_host
              && (!ops->buf_download (be, Y, 0, x->staging, (size_t) n * D * sizeof (float), error)
                  || !dev->ops->buf_upload (dev, ey, 0, x->staging, (size_t) n * D * sizeof (float), error)))
            return FALSE;
          if (!dev->ops->add_rows_scaled (dev, xr, D, x->rows, r->scale + r->offset[e], n, ey, error))
            return FALSE;
        }
      /* This slot's expert is done with (queued ops finished): the copy
       * thread may refill it with the k-th next. */
      if (x->prefetcher != NULL && j + (int) k < n_active)
        {
          if (!ops->sync (be, error))
            return FALSE;
          request_slot (x, s, um_expert_units_index (units_of (x), layer, x->active[j + k]), st);
        }
    }
  x->seq += n_active;
  if (on_host)
    st->seconds_experts_host += (g_get_monotonic_time () - t0) / 1e6;
  return TRUE;
}

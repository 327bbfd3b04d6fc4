/* um-expert-store.c — routed experts as units of a layer store. */
#include "um-expert-store.h"

#include <string.h>

/* Expert @e's slice of @w; a plan's weights have no data (no pointer is
 * made from NULL). */
static UmWeight
slice (const UmWeight *w, guint n_experts, guint e)
{
  UmWeight s = *w;
  s.rows = w->rows / n_experts;
  if (w->data != NULL)
    s.data = (const guint8 *) w->data + (size_t) e * s.rows * w->row_bytes;
  return s;
}

void
um_expert_units_init (UmExpertUnits *u, const UmModel *model)
{
  guint n = 0;

  memset (u, 0, sizeof *u);
  u->n_layers = model->cfg.n_layers;
  u->first = g_new (guint, MAX (u->n_layers, 1));
  for (guint l = 0; l < u->n_layers; l++)
    {
      u->first[l] = model->layers[l].n_experts > 0 ? n : G_MAXUINT;
      n += model->layers[l].n_experts;
    }
  u->model.cfg = model->cfg;
  u->model.cfg.n_layers = n;
  u->model.layers = g_new0 (UmLayerWeights, MAX (n, 1));
  for (guint l = 0; l < u->n_layers; l++)
    {
      const UmLayerWeights *L = &model->layers[l];
      for (guint e = 0; e < L->n_experts; e++)
        {
          UmLayerWeights *x = &u->model.layers[u->first[l] + e];
          /* wq … wo stay empty (no rows: no bytes, no frames). */
          x->w_gate = slice (&L->w_gate, L->n_experts, e);
          x->w_up = slice (&L->w_up, L->n_experts, e);
          x->w_down = slice (&L->w_down, L->n_experts, e);
          x->ffn = L->ffn;
        }
    }
}

void
um_expert_units_clear (UmExpertUnits *u)
{
  g_free (u->model.layers);
  g_free (u->first);
  memset (u, 0, sizeof *u);
}

guint
um_expert_units_count (const UmExpertUnits *u)
{
  return u->model.cfg.n_layers;
}

guint
um_expert_units_index (const UmExpertUnits *u, guint layer, guint e)
{
  g_return_val_if_fail (layer < u->n_layers && u->first[layer] != G_MAXUINT, 0);
  return u->first[layer] + e;
}

static guint
n_units (const UmModel *model)
{
  guint n = 0;
  for (guint l = 0; l < model->cfg.n_layers; l++)
    n += model->layers[l].n_experts;
  return n;
}

/* As um_expert_units_init allocates. */
static guint64
units_bytes (guint units, guint layers)
{
  return (guint64) MAX (units, 1) * sizeof (UmLayerWeights) + (guint64) MAX (layers, 1) * sizeof (guint);
}

guint64
um_expert_units_host_bytes (const UmModel *model)
{
  return units_bytes (n_units (model), model->cfg.n_layers);
}

guint64
um_model_expert_bytes (const UmModel *model)
{
  guint64 sum = 0;

  for (guint l = 0; l < model->cfg.n_layers; l++)
    {
      const UmLayerWeights *L = &model->layers[l];
      if (L->n_experts > 0)
        sum += L->w_gate.rows * L->w_gate.row_bytes + L->w_up.rows * L->w_up.row_bytes
               + L->w_down.rows * L->w_down.row_bytes;
    }
  return sum;
}

size_t
um_expert_slot_bytes (const UmModel *model)
{
  size_t best = 0;

  for (guint l = 0; l < model->cfg.n_layers; l++)
    {
      const UmLayerWeights *L = &model->layers[l];
      UmLayerWeights x = { 0 };
      UmLayerLayout lay;

      if (L->n_experts == 0)
        continue;
      x.w_gate = slice (&L->w_gate, L->n_experts, 0);
      x.w_up = slice (&L->w_up, L->n_experts, 0);
      x.w_down = slice (&L->w_down, L->n_experts, 0);
      um_layer_layout (&x, &lay);
      best = MAX (best, lay.total);
    }
  return best;
}

struct _UmExpertStore {
  UmExpertUnits units;
  UmLayerStore *store;
};

UmExpertStore *
um_expert_store_new (UmBackend            *be,
                     const UmModel        *model,
                     UmStoreCompression    comp,
                     int                   zstd_level,
                     UmLayerStoreProgress  progress,
                     gpointer              user_data,
                     GCancellable         *cancellable,
                     GError              **error)
{
  g_autoptr(UmExpertStore) s = g_new0 (UmExpertStore, 1);

  um_expert_units_init (&s->units, model);
  s->store = um_layer_store_new (be, &s->units.model, comp, zstd_level, progress, user_data, cancellable, error);
  if (s->store == NULL)
    {
      g_prefix_error (error, "experts: ");
      return NULL;
    }
  return g_steal_pointer (&s);
}

void
um_expert_store_free (UmExpertStore *s)
{
  if (s == NULL)
    return;
  g_clear_pointer (&s->store, um_layer_store_free);
  um_expert_units_clear (&s->units);
  g_free (s);
}

UmLayerStore *
um_expert_store_get_store (UmExpertStore *s)
{
  return s->store;
}

const UmExpertUnits *
um_expert_store_get_units (UmExpertStore *s)
{
  return &s->units;
}

guint64
um_expert_store_host_bytes (UmExpertStore *s)
{
  return um_layer_store_host_bytes (s->store) + units_bytes (um_expert_units_count (&s->units), s->units.n_layers);
}

guint64
um_expert_store_predict_bytes (const UmModel *model, UmStoreCompression comp, const UmStoreRatios *ratios)
{
  UmExpertUnits u;
  guint64 b;

  um_expert_units_init (&u, model);
  b = um_layer_store_predict_bytes (&u.model, comp, ratios, NULL) + um_expert_units_host_bytes (model);
  um_expert_units_clear (&u);
  return b;
}

guint64
um_expert_store_build_bytes (const UmModel *model, UmStoreCompression comp, const UmStoreRatios *ratios)
{
  UmExpertUnits u;
  guint64 b;

  um_expert_units_init (&u, model);
  b = um_layer_store_build_bytes (&u.model, comp, ratios, 0);
  um_expert_units_clear (&u);
  return b;
}

gboolean
um_expert_store_measure_ratios (const UmModel *model, int zstd_level, guint64 max_bytes, UmStoreRatios *out,
                                GError **error)
{
  UmExpertUnits u;
  gboolean ok;

  um_expert_units_init (&u, model);
  ok = um_layer_store_measure_ratios (&u.model, zstd_level, max_bytes, out, error);
  um_expert_units_clear (&u);
  return ok;
}

void
um_expert_store_estimate_ratios (const UmModel *model, UmStoreRatios *out)
{
  um_layer_store_estimate_ratios (model, out);
}

double
um_expert_store_mean_ratio (const UmModel *model, const UmStoreRatios *ratios)
{
  UmExpertUnits u;
  double r;

  um_expert_units_init (&u, model);
  r = um_layer_store_mean_ratio (&u.model, ratios);
  um_expert_units_clear (&u);
  return r;
}

/* um-expert-store.h — the routed experts of a mixture-of-experts model as
 * units of a host store, so that a device keeps only the experts a step
 * routes to (UM_EXPERTS_FETCH) or none (UM_EXPERTS_HOST).
 *
 * A unit is one expert of one MoE layer: its gate, up and down slices. The
 * units are described as the "layers" of a model view whose layers hold
 * only w_gate, w_up and w_down (the other matrices empty), so the layer
 * store (um-layer-store.h) keeps them, raw or zstd-compressed, and the
 * prefetcher (um-prefetch.h) fetches them into slots, unit by unit, with
 * the same code, ratios and predictions as layer streaming.
 */
#pragma once

#include <gio/gio.h>

#include "um-layer-store.h"
#include "um-model.h"

G_BEGIN_DECLS

typedef struct {
  UmModel  model;     /* the view: cfg.n_layers units, layers[u] one expert's slices at w_gate, w_up, w_down */
  guint   *first;     /* per layer of the model: its expert 0's unit (dense layers: G_MAXUINT) */
  guint    n_layers;  /* of the model */
} UmExpertUnits;

/* The view of @model's routed experts (borrowing its weights: @model
 * outlives it). */
void     um_expert_units_init  (UmExpertUnits *u, const UmModel *model);
void     um_expert_units_clear (UmExpertUnits *u);
guint    um_expert_units_count (const UmExpertUnits *u);
/* The unit of expert @e of layer @layer (a MoE layer). */
guint    um_expert_units_index (const UmExpertUnits *u, guint layer, guint e);
/* The view's own host memory (what um_expert_units_init allocates). */
guint64  um_expert_units_host_bytes (const UmModel *model);

/* The routed experts' bytes as stored, over every MoE layer. */
guint64  um_model_expert_bytes (const UmModel *model);
/* A slot for any one expert (its three slices at um_layer_layout's offsets
 * of the unit). */
size_t   um_expert_slot_bytes (const UmModel *model);

/* A store of @model's routed experts in host memory of @be (see
 * um_layer_store_new: the copied pages of the file are released); the
 * units' view lives as long as the store. */
typedef struct _UmExpertStore UmExpertStore;

UmExpertStore *um_expert_store_new (UmBackend            *be,
                                    const UmModel        *model,
                                    UmStoreCompression    comp,
                                    int                   zstd_level,
                                    UmLayerStoreProgress  progress,
                                    gpointer              user_data,
                                    GCancellable         *cancellable,
                                    GError              **error);
void           um_expert_store_free (UmExpertStore *s);
UmLayerStore  *um_expert_store_get_store (UmExpertStore *s);
const UmExpertUnits *um_expert_store_get_units (UmExpertStore *s);
/* The store's host bytes and the units' view. */
guint64        um_expert_store_host_bytes (UmExpertStore *s);

/* What a store of @model's experts holds in host memory (the view
 * included), with zstd's @ratios (um_layer_store_predict_bytes). */
guint64  um_expert_store_predict_bytes (const UmModel *model, UmStoreCompression comp, const UmStoreRatios *ratios);
/* What building it holds besides the store (um_layer_store_build_bytes ()
 * for the units). */
guint64  um_expert_store_build_bytes (const UmModel *model, UmStoreCompression comp, const UmStoreRatios *ratios);
/* zstd's ratios measured on the experts (um_layer_store_measure_ratios ()
 * on the units). */
gboolean um_expert_store_measure_ratios (const UmModel *model, int zstd_level, guint64 max_bytes,
                                         UmStoreRatios *out, GError **error);
/* zstd's estimate by type, and the mean ratio of the experts under @ratios. */
void     um_expert_store_estimate_ratios (const UmModel *model, UmStoreRatios *out);
double   um_expert_store_mean_ratio (const UmModel *model, const UmStoreRatios *ratios);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmExpertStore, um_expert_store_free)

G_END_DECLS

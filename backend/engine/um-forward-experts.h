/* um-forward-experts.h — the forward's routed experts when they are not on
 * the device (UM_EXPERTS_HOST, UM_EXPERTS_FETCH); private to the forward.
 *
 * The forward routes as it always does (router on the device, the choice
 * on the host, um-moe.h); this part runs the routed experts, each over its
 * group of rows, and adds their outputs into the residual rows on the
 * device in the same order as the resident forward, with the same kernels
 * where the backend is the same: on the CPU backend the results are the
 * resident run's bit for bit.
 */
#pragma once

#include "um-forward.h"
#include "um-moe.h"

G_BEGIN_DECLS

typedef struct _UmForwardExperts UmForwardExperts;

/* Whether they are off the device, and what they hold there:
 * um_forward_experts_off_device (), um_forward_experts_bytes ()
 * (memory/um-forward-sizing.h). */

/* Sets up @o's placement for @model on @device: the host copy (reporting
 * @progress), the host backend, slots and the copy thread. */
UmForwardExperts *um_forward_experts_new (UmModel                 *model,
                                          UmBackend               *device,
                                          const UmForwardOptions  *o,
                                          void                   (*progress) (double fraction, gpointer data),
                                          gpointer                 data,
                                          GCancellable            *cancellable,
                                          GError                 **error);
void              um_forward_experts_free (UmForwardExperts *x);

/* Host buffers for MoE layers of up to @rows rows in chunks of @chunk, now. */
gboolean          um_forward_experts_reserve (UmForwardExperts *x, int rows, int chunk, GError **error);

/* Layer @layer's routed experts on @m normalized rows @h (device), whose
 * chunks of @chunk rows were routed one by one (@routes[q]: chunk q's
 * rows, numbered from the chunk's first): each expert's output is added
 * into the residual rows @xr weighted as its chunk's routing says. Each
 * expert is fetched once for the layer and then runs chunk by chunk, so
 * each row gets its experts' outputs in the order the resident forward
 * adds them (by expert, per chunk) from the same products. @ex, @gate,
 * @up, @ey: the forward's work buffers for one expert's group of a chunk;
 * @work: the backend's experts' work (NULL: none), for FETCH on a backend
 * with the expert_ffn op, whose products are then its moe op's. */
gboolean          um_forward_experts_run (UmForwardExperts   *x,
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
                                          UmForwardStats     *stats,
                                          GError            **error);

UmLayerStore     *um_forward_experts_get_store (UmForwardExperts *x);
UmBackend        *um_forward_experts_get_host (UmForwardExperts *x);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmForwardExperts, um_forward_experts_free)

G_END_DECLS

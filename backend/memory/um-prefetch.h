/* um-prefetch.h — a copy thread that fills layer-streaming slots from a
 * UmLayerStore while the compute thread runs the previous layer.
 *
 * Slots are small non-negative indices the caller picks, each naming a
 * device buffer of at least um_layer_slot_bytes (). The usual loop with k
 * slots: wait (l % k, l), request ((l + k - 1) % k, l + k - 1) once the
 * layer that slot held is done with, run layer l.
 *
 * request, wait and holds are meant for one caller thread (the compute
 * thread). Before requesting a slot the caller makes sure no queued op still
 * reads it (be->ops->sync on a GPU); once wait returns, the layer's bytes
 * are in the slot.
 */
#pragma once

#include "um-layer-store.h"

G_BEGIN_DECLS

/* Slot indices run from 0 to UM_PREFETCH_MAX_SLOTS - 1. */
#define UM_PREFETCH_MAX_SLOTS 256

typedef struct {
  guint64 n_fetches;       /* fetches the copy thread ran (failed ones included) */
  guint64 n_sync_fetches;  /* fetches wait ran itself: nothing was requested */
  guint64 n_skipped;       /* requests for the layer the slot already held */
  guint64 n_failed;        /* fetches that failed, either thread */
  guint64 n_cancelled;     /* requests dropped by um_prefetcher_free () */
  double  wait_seconds;    /* the caller blocked in wait, its own fetches included */
} UmPrefetcherStats;

typedef struct _UmPrefetcher UmPrefetcher;

/* Starts the copy thread. @store must outlive the prefetcher. */
UmPrefetcher *um_prefetcher_new       (UmLayerStore *store,
                                       GError      **error);
/* Names @slot's buffer without fetching anything, so a wait with nothing
 * requested can fetch into it; request does this too. */
void          um_prefetcher_set_slot  (UmPrefetcher *p,
                                       int           slot_index,
                                       UmBuf        *slot);
/* Queues a fetch of @layer into @slot. Requests run in order (FIFO), those
 * for one slot too; a request for the layer the slot holds, with nothing
 * pending for it, is skipped. */
void          um_prefetcher_request   (UmPrefetcher *p,
                                       int           slot_index,
                                       UmBuf        *slot,
                                       guint         layer);
/* Blocks until every request for @slot_index queued so far has run, then
 * returns TRUE if the slot holds @layer. If its fetch failed, returns that
 * error (once: a second wait fetches again); if @layer was not requested
 * for the slot, fetches it here, in the caller. */
gboolean      um_prefetcher_wait      (UmPrefetcher *p,
                                       int           slot_index,
                                       guint         layer,
                                       GError      **error);
/* The layer the slot holds now, or -1 (never filled, being written, or its
 * last fetch failed). */
int           um_prefetcher_holds     (UmPrefetcher *p,
                                       int           slot_index);
void          um_prefetcher_get_stats (UmPrefetcher      *p,
                                       UmPrefetcherStats *stats);
/* Drops the requests not started yet, waits for the one running (a single
 * layer fetch), joins the thread. */
void          um_prefetcher_free      (UmPrefetcher *p);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmPrefetcher, um_prefetcher_free)

G_END_DECLS

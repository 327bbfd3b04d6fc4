/* um-prefetch.c — the layer-streaming copy thread.
 *
 * One mutex guards the queue and every slot's state; the thread sleeps on
 * work_cond, callers of wait on done_cond. The fetch itself runs unlocked.
 */
#include "um-prefetch.h"

#include "um-error.h"

typedef struct {
  UmBuf  *buf;
  int     holds;         /* layer in buf; -1: none, being written, or failed */
  guint   pending;       /* requests queued or running */
  GError *error;         /* the failure of the latest fetch */
  guint   error_layer;
} Slot;

typedef struct {
  int    slot_index;
  UmBuf *buf;
  guint  layer;
} Request;

struct _UmPrefetcher {
  UmLayerStore      *store;
  GThread           *thread;
  GMutex             lock;
  GCond              work_cond;
  GCond              done_cond;
  GQueue             queue;       /* Request*, oldest first */
  GPtrArray         *slots;       /* Slot*, by index; NULL until named */
  gboolean           shutdown;
  UmPrefetcherStats  stats;
};

static void
slot_free (gpointer data)
{
  Slot *slot = data;
  if (slot == NULL)
    return;
  g_clear_error (&slot->error);
  g_free (slot);
}

/* The slot at @index, created if new; call locked. */
static Slot *
get_slot (UmPrefetcher *p, int index)
{
  Slot *slot;

  if ((guint) index >= p->slots->len)
    g_ptr_array_set_size (p->slots, index + 1);
  slot = g_ptr_array_index (p->slots, index);
  if (slot == NULL)
    {
      slot = g_new0 (Slot, 1);
      slot->holds = -1;
      g_ptr_array_index (p->slots, index) = slot;
    }
  return slot;
}

static gboolean
valid_index (int slot_index)
{
  return slot_index >= 0 && slot_index < UM_PREFETCH_MAX_SLOTS;
}

/* Records the end of a fetch of @layer into @slot; call locked. */
static void
finish_fetch (UmPrefetcher *p, Slot *slot, guint layer, GError *error)
{
  g_clear_error (&slot->error);
  if (error == NULL)
    slot->holds = (int) layer;
  else
    {
      slot->error = error;
      slot->error_layer = layer;
      p->stats.n_failed++;
    }
}

static gpointer
copy_thread (gpointer data)
{
  UmPrefetcher *p = data;

  g_mutex_lock (&p->lock);
  while (!p->shutdown)
    {
      Request *req = g_queue_pop_head (&p->queue);
      Slot *slot;
      GError *error = NULL;

      if (req == NULL)
        {
          g_cond_wait (&p->work_cond, &p->lock);
          continue;
        }
      slot = get_slot (p, req->slot_index);
      slot->holds = -1;
      g_mutex_unlock (&p->lock);

      um_layer_store_fetch (p->store, req->layer, req->buf, &error);

      g_mutex_lock (&p->lock);
      p->stats.n_fetches++;
      finish_fetch (p, slot, req->layer, error);
      slot->pending--;
      g_cond_broadcast (&p->done_cond);
      g_free (req);
    }
  g_mutex_unlock (&p->lock);
  return NULL;
}

UmPrefetcher *
um_prefetcher_new (UmLayerStore *store, GError **error)
{
  UmPrefetcher *p = g_new0 (UmPrefetcher, 1);

  p->store = store;
  g_mutex_init (&p->lock);
  g_cond_init (&p->work_cond);
  g_cond_init (&p->done_cond);
  g_queue_init (&p->queue);
  p->slots = g_ptr_array_new_with_free_func (slot_free);
  p->thread = g_thread_try_new ("um-prefetch", copy_thread, p, error);
  if (p->thread == NULL)
    {
      g_prefix_error (error, "could not start the layer copy thread: ");
      um_prefetcher_free (p);
      return NULL;
    }
  return p;
}

void
um_prefetcher_set_slot (UmPrefetcher *p, int slot_index, UmBuf *slot)
{
  g_return_if_fail (valid_index (slot_index));

  g_mutex_lock (&p->lock);
  get_slot (p, slot_index)->buf = slot;
  g_mutex_unlock (&p->lock);
}

void
um_prefetcher_request (UmPrefetcher *p, int slot_index, UmBuf *slot, guint layer)
{
  Slot *s;

  g_return_if_fail (valid_index (slot_index));
  g_return_if_fail (slot != NULL);

  g_mutex_lock (&p->lock);
  s = get_slot (p, slot_index);
  if (s->pending == 0 && s->buf == slot && s->holds == (int) layer)
    p->stats.n_skipped++;
  else
    {
      Request *req = g_new (Request, 1);
      req->slot_index = slot_index;
      req->buf = slot;
      req->layer = layer;
      s->buf = slot;
      s->pending++;
      g_queue_push_tail (&p->queue, req);
      g_cond_signal (&p->work_cond);
    }
  g_mutex_unlock (&p->lock);
}

gboolean
um_prefetcher_wait (UmPrefetcher *p, int slot_index, guint layer, GError **error)
{
  gint64 t0 = g_get_monotonic_time ();
  gboolean ok = TRUE;
  Slot *slot;

  if (!valid_index (slot_index))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "layer slot %d does not exist", slot_index);
      return FALSE;
    }

  g_mutex_lock (&p->lock);
  slot = get_slot (p, slot_index);
  while (slot->pending > 0)
    g_cond_wait (&p->done_cond, &p->lock);

  if (slot->holds == (int) layer)
    ;
  else if (slot->error != NULL && slot->error_layer == layer)
    {
      g_propagate_error (error, g_steal_pointer (&slot->error));
      ok = FALSE;
    }
  else if (slot->buf == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "layer slot %d has no buffer to fetch layer %u into", slot_index, layer);
      ok = FALSE;
    }
  else
    {
      GError *local = NULL;
      UmBuf *buf = slot->buf;

      /* pending keeps the slot marked busy while it is written unlocked. */
      slot->holds = -1;
      slot->pending++;
      g_mutex_unlock (&p->lock);
      ok = um_layer_store_fetch (p->store, layer, buf, &local);
      g_mutex_lock (&p->lock);
      slot->pending--;
      p->stats.n_sync_fetches++;
      if (ok)
        finish_fetch (p, slot, layer, NULL);
      else
        {
          /* Returned now, so not kept for a later wait. */
          g_clear_error (&slot->error);
          p->stats.n_failed++;
          g_propagate_error (error, local);
        }
      g_cond_broadcast (&p->done_cond);
    }
  p->stats.wait_seconds += (g_get_monotonic_time () - t0) / 1e6;
  g_mutex_unlock (&p->lock);
  return ok;
}

int
um_prefetcher_holds (UmPrefetcher *p, int slot_index)
{
  int holds = -1;

  if (!valid_index (slot_index))
    return -1;
  g_mutex_lock (&p->lock);
  if ((guint) slot_index < p->slots->len && g_ptr_array_index (p->slots, slot_index) != NULL)
    holds = ((Slot *) g_ptr_array_index (p->slots, slot_index))->holds;
  g_mutex_unlock (&p->lock);
  return holds;
}

void
um_prefetcher_get_stats (UmPrefetcher *p, UmPrefetcherStats *stats)
{
  g_mutex_lock (&p->lock);
  *stats = p->stats;
  g_mutex_unlock (&p->lock);
}

void
um_prefetcher_free (UmPrefetcher *p)
{
  Request *req;

  if (p == NULL)
    return;
  g_mutex_lock (&p->lock);
  p->shutdown = TRUE;
  while ((req = g_queue_pop_head (&p->queue)) != NULL)
    {
      ((Slot *) g_ptr_array_index (p->slots, req->slot_index))->pending--;
      p->stats.n_cancelled++;
      g_free (req);
    }
  g_cond_broadcast (&p->work_cond);
  g_mutex_unlock (&p->lock);
  if (p->thread != NULL)
    g_thread_join (p->thread);

  g_ptr_array_unref (p->slots);
  g_cond_clear (&p->work_cond);
  g_cond_clear (&p->done_cond);
  g_mutex_clear (&p->lock);
  g_free (p);
}

/* um-cuda-prof.c — device time of the CUDA backend's work, measured with
 * events on the compute stream (the host's clock around an asynchronous call
 * sees only its queueing). */
#include "um-cuda-private.h"

static gboolean
timer_event (CudaCtx *c, cudaEvent_t *ev, GError **error)
{
  if (c->spare_events->len > 0)
    {
      *ev = g_array_index (c->spare_events, cudaEvent_t, c->spare_events->len - 1);
      g_array_set_size (c->spare_events, c->spare_events->len - 1);
      return TRUE;
    }
  return um_cuda_ok (cudaEventCreate (ev), "creating an event", error);
}

/* Adds the time of every timed product to matmul_seconds; waits for those
 * not finished (none right after a sync of the compute stream). */
void
um_cuda_timers_collect (CudaCtx *c)
{
  for (guint i = 0; i < c->timers->len; i++)
    {
      Timer *t = &g_array_index (c->timers, Timer, i);
      float ms = 0;
      if (cudaEventSynchronize (t->end) == cudaSuccess && cudaEventElapsedTime (&ms, t->start, t->end) == cudaSuccess)
        c->matmul_seconds += ms / 1e3;
      else
        (void) cudaGetLastError ();
      g_array_append_val (c->spare_events, t->start);
      g_array_append_val (c->spare_events, t->end);
    }
  g_array_set_size (c->timers, 0);
}

gboolean
um_cuda_timer_start (CudaCtx *c, Timer *t, GError **error)
{
  /* Bounded, for callers that never sync (a long run of products). */
  if (c->timers->len >= MAX_PENDING_TIMERS)
    um_cuda_timers_collect (c);
  if (!timer_event (c, &t->start, error))
    return FALSE;
  if (!timer_event (c, &t->end, error))
    {
      g_array_append_val (c->spare_events, t->start);
      return FALSE;
    }
  if (!um_cuda_ok (cudaEventRecord (t->start, c->stream), "timing a product", error))
    {
      g_array_append_val (c->spare_events, t->start);
      g_array_append_val (c->spare_events, t->end);
      return FALSE;
    }
  return TRUE;
}

/* A failed product is not counted. */
void
um_cuda_timer_end (CudaCtx *c, Timer *t, gboolean ok)
{
  if (ok && cudaEventRecord (t->end, c->stream) == cudaSuccess)
    {
      g_array_append_val (c->timers, *t);
      return;
    }
  (void) cudaGetLastError ();
  g_array_append_val (c->spare_events, t->start);
  g_array_append_val (c->spare_events, t->end);
}

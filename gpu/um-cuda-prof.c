/* um-cuda-prof.c — device time of the CUDA backend's work, measured with
 * events on the compute stream (the host's clock around an asynchronous call
 * sees only its queueing): always for the products (their total is
 * um_backend_cuda_matmul_seconds), and for every op, by kernel family, while
 * the kernel profile (compute/um-kprof.h) is on. Read back, without a wait
 * of its own, at the next sync of the compute stream. */
#include "um-cuda-private.h"

#include "um-kprof.h"

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

/* Adds the time of every timed product to matmul_seconds, and of every op
 * timed for the profile to its family; waits for those not finished (none
 * right after a sync of the compute stream). */
void
um_cuda_timers_collect (CudaCtx *c)
{
  for (guint i = 0; i < c->timers->len; i++)
    {
      Timer *t = &g_array_index (c->timers, Timer, i);
      float ms = 0;
      if (cudaEventSynchronize (t->end) == cudaSuccess && cudaEventElapsedTime (&ms, t->start, t->end) == cudaSuccess)
        {
          if (t->product)
            c->matmul_seconds += ms / 1e3;
          if (t->profiled)
            um_kprof_add ((UmKprofFamily) t->family, (int64_t) ((double) ms * 1e6));
        }
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
  t->product = TRUE;
  t->profiled = um_kprof_on;
  t->family = um_kprof_in_head () ? UM_KPROF_HEAD : UM_KPROF_MATMUL;
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

gboolean
um_cuda_prof_begin (CudaCtx *c, Timer *t)
{
  if (!um_kprof_on || !um_cuda_timing_allowed (c))
    return FALSE;
  if (!um_cuda_timer_start (c, t, NULL))
    return FALSE;
  t->product = FALSE;
  return TRUE;
}

void
um_cuda_prof_end (CudaCtx *c, Timer *t, gboolean started, int family, gboolean ok)
{
  if (!started)
    return;
  t->family = family;
  um_cuda_timer_end (c, t, ok);
}

/* um-stream-report.c — per-forward figures of weight streaming. */
#include "um-stream-report.h"

#include <string.h>

#include "um-error.h"

/* Copies timed for the bandwidth, after the one that warms the path up. */
#define MEASURE_COPIES 3

void
um_stream_counters_read (UmLayerStore *store, UmStreamCounters *out)
{
  UmLayerStoreStats st;

  memset (out, 0, sizeof *out);
  if (store == NULL)
    return;
  um_layer_store_get_stats (store, &st);
  out->fetches = st.n_fetches;
  out->bytes = st.uploaded_bytes;
  out->fetch_seconds = st.fetch_seconds;
  out->decode_seconds = st.decode_seconds;
}

void
um_stream_report (const UmStreamCounters *before, const UmStreamCounters *after, guint64 passes,
                  double forward_seconds, double wait_seconds, double bandwidth, UmStreamReport *out)
{
  const double n = passes > 0 ? (double) passes : 1.0;

  memset (out, 0, sizeof *out);
  out->passes = passes;
  if (passes == 0)
    return;
  out->fetches = (after->fetches - before->fetches) / n;
  out->bytes = (after->bytes - before->bytes) / n;
  out->decode_seconds = (after->decode_seconds - before->decode_seconds) / n;
  out->copy_seconds = MAX ((after->fetch_seconds - before->fetch_seconds) / n - out->decode_seconds, 0.0);
  out->wait_seconds = wait_seconds / n;
  out->forward_seconds = forward_seconds / n;
  out->compute_seconds = MAX (out->forward_seconds - out->wait_seconds, 0.0);
  out->bandwidth = bandwidth;
  out->transfer_seconds = bandwidth > 0 ? out->bytes / bandwidth : 0;
  out->bound_seconds = MAX (out->compute_seconds, out->transfer_seconds);
  out->ratio = out->bound_seconds > 0 ? out->forward_seconds / out->bound_seconds : 0;
}

double
um_stream_measure_upload (UmBackend *be, size_t bytes, const void *src, GError **error)
{
  const UmBackendOps *ops = be->ops;
  void *own = NULL;
  UmBuf *dst;
  double best = G_MAXDOUBLE;
  gboolean ok = TRUE;

  if (bytes == 0)
    return 0;
  if (src == NULL)
    {
      if ((own = ops->host_alloc (be, bytes, error)) == NULL)
        return 0;
      /* Touched, so the copy reads resident pages as a store's would. */
      memset (own, 0x5a, bytes);
      src = own;
    }
  dst = ops->buf_alloc (be, bytes, error);
  for (int i = 0; dst != NULL && ok && i <= MEASURE_COPIES; i++)
    {
      gint64 t0 = g_get_monotonic_time ();
      ok = ops->copy_upload (be, dst, 0, src, bytes, error);
      if (ok && i > 0)
        best = MIN (best, MAX ((g_get_monotonic_time () - t0) / 1e6, 1e-7));
    }
  if (dst != NULL)
    ops->buf_free (be, dst);
  if (own != NULL)
    ops->host_free (be, own, bytes);
  return dst != NULL && ok ? bytes / best : 0;
}

/* um-stream-report.h — what streaming weights costs a forward pass: the
 * bytes moved from host to device, the copy thread's time (copying and
 * decoding apart), the compute thread's wait, and the bound no overlap can
 * beat, max (compute time, bytes / measured bandwidth), with the forward's
 * ratio to it. For layer streaming (um-layer-store.h) and for routed
 * experts fetched into slots (um-expert-store.h, the same store code).
 */
#pragma once

#include "um-backend.h"
#include "um-layer-store.h"

G_BEGIN_DECLS

/* A store's running totals, read at two moments to count what happened
 * between them. */
typedef struct {
  guint64 fetches;
  guint64 bytes;            /* written into slots (decoded) */
  double  fetch_seconds;    /* in fetches, decoding included */
  double  decode_seconds;
} UmStreamCounters;

/* @store may be NULL (nothing streamed: zeros). */
void   um_stream_counters_read (UmLayerStore *store, UmStreamCounters *out);

typedef struct {
  guint64 passes;
  double  fetches;           /* per forward, this and below */
  double  bytes;             /* host → device */
  double  copy_seconds;      /* the copy thread copying (decoding excluded) */
  double  decode_seconds;    /* ... and decoding zstd frames (0 for a raw store) */
  double  wait_seconds;      /* the compute thread blocked on a slot */
  double  forward_seconds;
  double  compute_seconds;   /* forward − wait: the compute thread's own time */
  double  bandwidth;         /* bytes/s, measured pinned copies; 0: not measured */
  double  transfer_seconds;  /* bytes / bandwidth (0 when not measured) */
  double  bound_seconds;     /* max (compute, transfer) */
  double  ratio;             /* forward / bound (0 when there is no bound) */
} UmStreamReport;

/* The report per forward over @passes passes that took @forward_seconds
 * and waited @wait_seconds in all, with the store's counters @before and
 * @after them and the measured @bandwidth (0: unknown). */
void   um_stream_report (const UmStreamCounters *before, const UmStreamCounters *after, guint64 passes,
                         double forward_seconds, double wait_seconds, double bandwidth, UmStreamReport *out);

/* The host → device bandwidth (bytes/s) for copies of @bytes, as the copy
 * thread makes them: copy_upload from host memory of @be (pinned on a GPU)
 * into a buffer of @be, the best of a few after one not counted. @src
 * (@bytes long, host memory of @be) is copied if given, else a block is
 * allocated for it. The device buffer counts under the budget for the
 * time of the measure: call where it does not raise the peak (before the
 * slots are allocated). */
double um_stream_measure_upload (UmBackend *be, size_t bytes, const void *src, GError **error);

G_END_DECLS

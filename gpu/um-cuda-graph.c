/* um-cuda-graph.c — fixed-shape work recorded once as a CUDA graph and
 * replayed (the backend's segment_begin/segment_end), and the small host
 * index arrays ops upload, which a graph needs at fixed addresses.
 *
 * A segment's key promises the same ops on the same buffers every time.
 * The first time a key is seen its ops run as usual, and the bytes they
 * upload are counted; the second time they are recorded by stream capture
 * (uploads staged in pinned memory and copied from there inside the graph),
 * and the graph launched; from then on the ops are not queued at all: each
 * only checks its signature against the recording's (um_cuda_issue) and
 * writes its host arrays into the staging memory, and segment_end launches
 * the graph. A signature that differs, an op that must read back or
 * allocate, a capture the runtime refuses: the segment is marked to run
 * again as usual (segment_end's *redo), and after two such failures a key
 * always runs as usual. Nothing is ever half replayed: a replayed segment
 * queues nothing until its end.
 *
 * Environment: UNMASK_CUDA_GRAPHS=0 turns recording off. While the kernel
 * profile is on, segments run as usual (events per op cannot be recorded). */
#include "um-cuda-private.h"

#include <stdlib.h>

#include "um-kprof.h"

#define UPLOAD_ALIGN 256
/* Recording failures after which a key always runs as usual. */
#define MAX_FAILURES 2

struct _UmCudaSegment {
  guint64         key;
  int             runs;          /* run as usual (measured) */
  int             failures;
  gboolean        eager_next;    /* the next run must be as usual (a redo) */
  size_t          upload_bytes;  /* measured: the uploads' total, aligned */
  GArray         *log;           /* guint64: the signatures, in order */
  cudaGraph_t     graph;
  cudaGraphExec_t exec;
  guint64         epoch;         /* c->scratch_epoch when recorded */
  char           *staging;       /* pinned */
  char           *dev;           /* the uploads' device copy */
  size_t          capacity;
  cudaEvent_t     done;          /* after the last launch: staging may be rewritten */
  gboolean        launched;
  /* The products' range-check slots the recording writes (um-cuda-matmul.c):
   * from flag_base, flag_slots of them, and which weight used which. */
  int             flag_base;
  int             flag_slots;
  GArray         *flagged;       /* UmCudaFlagged */
};

static void
segment_drop_graph (UmCudaSegment *s)
{
  if (s->exec != NULL)
    cudaGraphExecDestroy (s->exec);
  if (s->graph != NULL)
    cudaGraphDestroy (s->graph);
  s->exec = NULL;
  s->graph = NULL;
  (void) cudaGetLastError ();
}

static void
segment_free (gpointer data)
{
  UmCudaSegment *s = data;

  if (s->launched)
    cudaEventSynchronize (s->done);
  segment_drop_graph (s);
  if (s->done != NULL)
    cudaEventDestroy (s->done);
  if (s->staging != NULL)
    cudaFreeHost (s->staging);
  if (s->dev != NULL)
    cudaFree (s->dev);
  if (s->log != NULL)
    g_array_unref (s->log);
  if (s->flagged != NULL)
    g_array_unref (s->flagged);
  (void) cudaGetLastError ();
  g_free (s);
}

void
um_cuda_graphs_init (CudaCtx *c)
{
  const char *env = g_getenv ("UNMASK_CUDA_GRAPHS");

  c->segments = g_hash_table_new_full (g_int64_hash, g_int64_equal, NULL, segment_free);
  c->graphs_off = env != NULL && g_str_equal (env, "0");
  c->seg_mode = UM_CUDA_SEG_NONE;
}

void
um_cuda_graphs_free (CudaCtx *c)
{
  g_clear_pointer (&c->segments, g_hash_table_unref);
}

guint64
um_cuda_hash (const void *p, size_t bytes)
{
  const guint8 *b = p;
  guint64 h = 1469598103934665603ull;

  for (size_t i = 0; i < bytes; i++)
    h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

static gboolean
recording (const CudaCtx *c)
{
  return c->seg_mode == UM_CUDA_SEG_CAPTURE || c->seg_mode == UM_CUDA_SEG_REPLAY || c->seg_mode == UM_CUDA_SEG_SKIP;
}

gboolean
um_cuda_timing_allowed (CudaCtx *c)
{
  return !recording (c);
}

/* Stops a recording or replay in progress: the segment's ops are skipped
 * from here on and it is run again. */
void
um_cuda_segment_abort (CudaCtx *c, const char *why)
{
  cudaGraph_t g = NULL;

  if (!recording (c))
    return;
  if (c->seg_mode == UM_CUDA_SEG_CAPTURE)
    {
      if (cudaStreamEndCapture (c->stream, &g) == cudaSuccess && g != NULL)
        cudaGraphDestroy (g);
      (void) cudaGetLastError ();
    }
  if (c->seg_mode != UM_CUDA_SEG_SKIP)
    g_debug ("cuda: segment %" G_GINT64_MODIFIER "x not %s: %s", c->seg->key,
             c->seg_mode == UM_CUDA_SEG_CAPTURE ? "recorded" : "replayed", why);
  c->seg_mode = UM_CUDA_SEG_SKIP;
}

gboolean
um_cuda_host_sync_allowed (CudaCtx *c, const char *what)
{
  if (!recording (c))
    return TRUE;
  um_cuda_segment_abort (c, what);
  return FALSE;
}

gboolean
um_cuda_issue (CudaCtx *c, const guint64 *sig, gsize n)
{
  guint64 h;

  switch (c->seg_mode)
    {
    case UM_CUDA_SEG_CAPTURE:
      h = um_cuda_hash (sig, n * sizeof (guint64));
      g_array_append_val (c->seg->log, h);
      return TRUE;
    case UM_CUDA_SEG_REPLAY:
      h = um_cuda_hash (sig, n * sizeof (guint64));
      if (c->seg_pos < c->seg->log->len && g_array_index (c->seg->log, guint64, c->seg_pos) == h)
        {
          c->seg_pos++;
          return FALSE;
        }
      g_debug ("cuda: op %d (%u of %u) differs from the recording", (int) sig[0], c->seg_pos, c->seg->log->len);
      um_cuda_segment_abort (c, "an op differs from the recording");
      return FALSE;
    case UM_CUDA_SEG_SKIP:
      return FALSE;
    case UM_CUDA_SEG_NONE:
    case UM_CUDA_SEG_MEASURE:
    default:
      return TRUE;
    }
}

/* @n parts of host data (NULL parts: none) uploaded one after the other,
 * each @part bytes: into the index scratch as usual, or, in a segment
 * being recorded or replayed, into its staging memory at the next offset,
 * copied to the device by the graph. */
static const int32_t *
upload_parts (CudaCtx *c, const void *const *parts, int n, size_t part, GError **error)
{
  const size_t total = part * (size_t) n;
  UmCudaSegment *s = c->seg;
  size_t off;

  if (c->seg_mode == UM_CUDA_SEG_NONE || c->seg_mode == UM_CUDA_SEG_MEASURE)
    {
      if (c->seg_mode == UM_CUDA_SEG_MEASURE)
        s->upload_bytes += (total + UPLOAD_ALIGN - 1) / UPLOAD_ALIGN * UPLOAD_ALIGN;
      if (!um_cuda_scratch_ensure (c, &c->index, MAX (total, 1), error))
        return NULL;
      for (int i = 0; i < n; i++)
        if (parts[i] != NULL && part > 0
            && !um_cuda_ok (cudaMemcpyAsync ((char *) c->index.ptr + i * part, parts[i], part, cudaMemcpyHostToDevice,
                                             c->stream), "copying indices", error))
          return NULL;
      return c->index.ptr;
    }
  /* Recorded like an op: its size must match. */
  if (!UM_CUDA_ISSUE (c, UM_CUDA_OP_UPLOAD, total, n) && c->seg_mode != UM_CUDA_SEG_REPLAY)
    return (const int32_t *) s->dev;   /* skipped: a placeholder nothing reads */
  off = c->seg_off;
  if (c->seg_mode == UM_CUDA_SEG_CAPTURE && off + total > s->capacity)
    {
      um_cuda_segment_abort (c, "more uploads than measured");
      return (const int32_t *) s->dev;
    }
  c->seg_off += (total + UPLOAD_ALIGN - 1) / UPLOAD_ALIGN * UPLOAD_ALIGN;
  for (int i = 0; i < n; i++)
    if (parts[i] != NULL)
      memcpy (s->staging + off + i * part, parts[i], part);
  if (c->seg_mode == UM_CUDA_SEG_CAPTURE && total > 0
      && cudaMemcpyAsync (s->dev + off, s->staging + off, total, cudaMemcpyHostToDevice, c->stream) != cudaSuccess)
    um_cuda_segment_abort (c, cudaGetErrorString (cudaGetLastError ()));
  return (const int32_t *) (s->dev + off);
}

const int32_t *
um_cuda_upload_index (CudaCtx *c, const gint32 *host, int n, GError **error)
{
  const void *parts[1] = { host };
  return upload_parts (c, parts, 1, (size_t) MAX (n, 0) * sizeof (int32_t), error);
}

/* um_cuda_upload_index of @n indices and @n 4-byte values beside them
 * (floats, more indices; NULL: none): [indices | values]; the values are at
 * the result + n. */
const int32_t *
um_cuda_upload_index_values (CudaCtx *c, const gint32 *host, const void *values, int n, GError **error)
{
  const void *parts[2] = { host, values };
  G_STATIC_ASSERT (sizeof (float) == sizeof (int32_t));
  return upload_parts (c, parts, 2, (size_t) MAX (n, 0) * sizeof (int32_t), error);
}

/* The segment's staging and device memory for @bytes of uploads, made
 * before recording (no allocation may happen during it). */
static gboolean
segment_buffers (UmCudaSegment *s, size_t bytes)
{
  if (s->capacity >= bytes && s->staging != NULL && s->dev != NULL)
    return TRUE;
  if (s->staging != NULL)
    cudaFreeHost (s->staging);
  if (s->dev != NULL)
    cudaFree (s->dev);
  s->staging = NULL;
  s->dev = NULL;
  s->capacity = 0;
  if (cudaHostAlloc ((void **) &s->staging, MAX (bytes, 1), cudaHostAllocDefault) != cudaSuccess
      || cudaMalloc ((void **) &s->dev, MAX (bytes, 1)) != cudaSuccess)
    {
      (void) cudaGetLastError ();
      return FALSE;
    }
  s->capacity = bytes;
  return TRUE;
}

gboolean
um_cuda_segment_begin (UmBackend *be, guint64 key, GError **error)
{
  CudaCtx *c = CTX (be);
  UmCudaSegment *s;

  c->seg = NULL;
  c->seg_mode = UM_CUDA_SEG_NONE;
  if (c->graphs_off || um_kprof_on)
    return TRUE;
  s = g_hash_table_lookup (c->segments, &key);
  if (s == NULL)
    {
      s = g_new0 (UmCudaSegment, 1);
      s->key = key;
      s->log = g_array_new (FALSE, FALSE, sizeof (guint64));
      s->flagged = g_array_new (FALSE, FALSE, sizeof (UmCudaFlagged));
      g_hash_table_insert (c->segments, &s->key, s);
    }
  c->seg = s;
  if (s->eager_next || s->failures >= MAX_FAILURES)
    {
      s->eager_next = FALSE;
      c->seg = NULL;
      return TRUE;
    }
  /* A scratch buffer a recording reads has moved since, or its products'
   * range checks would land in other slots: record again. */
  if (s->exec != NULL && (s->epoch != c->scratch_epoch || s->flag_base != c->n_flag_slots
                          || s->flag_base + s->flag_slots > UM_CUDA_FLAG_SLOTS))
    segment_drop_graph (s);
  c->seg_pos = 0;
  c->seg_off = 0;
  if (s->exec != NULL)
    {
      /* The last launch reads the staging memory until it is done. */
      if (s->launched && !um_cuda_ok (cudaEventSynchronize (s->done), "waiting for the GPU", error))
        return FALSE;
      c->seg_mode = UM_CUDA_SEG_REPLAY;
      return TRUE;
    }
  if (s->runs == 0)
    {
      s->upload_bytes = 0;
      c->seg_mode = UM_CUDA_SEG_MEASURE;
      return TRUE;
    }
  if ((s->done == NULL && cudaEventCreateWithFlags (&s->done, cudaEventDisableTiming) != cudaSuccess)
      || !segment_buffers (s, s->upload_bytes)
      || cudaStreamBeginCapture (c->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
    {
      (void) cudaGetLastError ();
      s->failures++;
      c->seg = NULL;
      return TRUE;
    }
  g_array_set_size (s->log, 0);
  c->act_valid = FALSE;
  c->seg_mode = UM_CUDA_SEG_CAPTURE;
  s->flag_base = c->n_flag_slots;
  c->seg_flagged_at = c->flagged->len;
  return TRUE;
}

gboolean
um_cuda_segment_end (UmBackend *be, gboolean failed, gboolean *redo, GError **error)
{
  CudaCtx *c = CTX (be);
  UmCudaSegment *s = c->seg;
  const UmCudaSegMode mode = c->seg_mode;
  cudaGraph_t g = NULL;
  cudaError_t e;

  *redo = FALSE;
  c->seg = NULL;
  c->seg_mode = UM_CUDA_SEG_NONE;
  c->act_valid = FALSE;
  if (s == NULL)
    return TRUE;
  switch (mode)
    {
    case UM_CUDA_SEG_MEASURE:
      s->runs++;
      return TRUE;
    case UM_CUDA_SEG_CAPTURE:
      e = cudaStreamEndCapture (c->stream, &g);
      if (failed)
        {
          if (e == cudaSuccess && g != NULL)
            cudaGraphDestroy (g);
          (void) cudaGetLastError ();
          return TRUE;
        }
      if (e != cudaSuccess || g == NULL || cudaGraphInstantiate (&s->exec, g, 0) != cudaSuccess)
        {
          g_debug ("cuda: segment %" G_GINT64_MODIFIER "x could not be recorded: %s", s->key,
                   cudaGetErrorString (e != cudaSuccess ? e : cudaGetLastError ()));
          if (g != NULL)
            cudaGraphDestroy (g);
          s->exec = NULL;
          (void) cudaGetLastError ();
          break;
        }
      s->graph = g;
      s->epoch = c->scratch_epoch;
      s->flag_slots = c->n_flag_slots - s->flag_base;
      g_array_set_size (s->flagged, 0);
      g_array_append_vals (s->flagged, &g_array_index (c->flagged, UmCudaFlagged, c->seg_flagged_at),
                           c->flagged->len - c->seg_flagged_at);
      c->graph_stats.recorded++;
      /* Recording ran nothing: the first launch does the work. */
      if (!um_cuda_ok (cudaGraphLaunch (s->exec, c->stream), "launching a graph", error)
          || !um_cuda_ok (cudaEventRecord (s->done, c->stream), "launching a graph", error))
        return FALSE;
      s->launched = TRUE;
      return TRUE;
    case UM_CUDA_SEG_REPLAY:
      if (failed)
        return TRUE;
      if (c->seg_pos != s->log->len)
        {
          g_debug ("cuda: segment %" G_GINT64_MODIFIER "x: %u ops of %u recorded", s->key, c->seg_pos, s->log->len);
          segment_drop_graph (s);
          break;
        }
      if (!um_cuda_ok (cudaGraphLaunch (s->exec, c->stream), "launching a graph", error)
          || !um_cuda_ok (cudaEventRecord (s->done, c->stream), "launching a graph", error))
        return FALSE;
      s->launched = TRUE;
      c->graph_stats.replayed++;
      /* Its products' range checks, as if they had run one by one. */
      c->n_flag_slots += s->flag_slots;
      if (c->in_pass)
        g_array_append_vals (c->flagged, s->flagged->data, s->flagged->len);
      return TRUE;
    case UM_CUDA_SEG_SKIP:
      segment_drop_graph (s);
      if (failed)
        return TRUE;
      break;
    case UM_CUDA_SEG_NONE:
    default:
      return TRUE;
    }
  /* Not recorded or not replayed: run again, as usual. */
  s->failures++;
  s->eager_next = TRUE;
  c->graph_stats.redone++;
  *redo = TRUE;
  return TRUE;
}

gboolean
um_backend_cuda_graph_stats (UmBackend *be, UmCudaGraphStats *stats)
{
  if (be == NULL || !um_backend_is_cuda (be))
    return FALSE;
  *stats = ((CudaCtx *) be->ctx)->graph_stats;
  return TRUE;
}

/* um-cuda-backend.c — the compute backend vtable on an NVIDIA GPU: CUDA
 * kernels (um-cuda-kernels.cu) for everything but the matrix products, which
 * go through cuBLAS (fp32 for F32 weights; f16/bf16 inputs with fp32
 * accumulation on tensor cores otherwise; quantized weights dequantized per
 * tile). The CUDA runtime is linked statically and cuBLAS is opened at run
 * time, so the program starts, and falls back to the CPU, on machines
 * without the toolkit, the driver or a GPU. Every CUDA or cuBLAS failure
 * becomes a GError. Ops queue on one compute stream; layer streaming's copy
 * thread uploads on a second one (copy_upload) into slots that weight_view
 * reads in place; quantized weights are dequantized on a third, a tile
 * ahead of the product. */
#include "um-cuda-private.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <gmodule.h>
#include <math.h>
#include <string.h>

#include "um-cuda-attention.h"
#include "um-cuda-kernels.h"
#include "um-cuda-report.h"
#include "um-cuda-tiles.h"
#include "um-error.h"
#include "um-half.h"

/* Leave this much device memory to the driver, other programs, kernels
 * loaded on first use and the product scratch (which, as on the CPU, is
 * overhead outside the budget) when no budget is given. */
#define DEFAULT_MARGIN (768ull << 20)
/* Weights go to the device through two pinned buffers of this size in
 * turn: one is filled while the other is copied. */
#define STAGE_BYTES (32u << 20)

static const UmBackendOps cuda_ops;

/* ---- errors ---- */

gboolean
um_cuda_ok (cudaError_t e, const char *what, GError **error)
{
  if (e == cudaSuccess)
    return TRUE;
  /* Clear a sticky error state where the runtime allows it. */
  (void) cudaGetLastError ();
  g_set_error (error, UM_ERROR,
               e == cudaErrorMemoryAllocation ? UM_ERROR_OUT_OF_MEMORY : UM_ERROR_FAILED,
               "cuda: %s: %s", what, cudaGetErrorString (e));
  return FALSE;
}



/* What a hard cap (um_backend_cuda_new_capped) counts besides in_use: the
 * context, cuBLAS's handle and workspace, the scratch; 0 otherwise. */
static guint64
capped_overhead (const CudaCtx *c)
{
  return c->hard_cap ? c->fixed_overhead + c->scratch_bytes : 0;
}

/* Records what the device says is used now (every process's memory): the
 * measured peak beside the accounting's. */
static void
observe_device_use (CudaCtx *c)
{
  size_t free_b = 0, total_b = 0;

  if (cudaMemGetInfo (&free_b, &total_b) != cudaSuccess)
    {
      (void) cudaGetLastError ();
      return;
    }
  c->used_peak_seen = MAX (c->used_peak_seen, (guint64) (total_b - free_b));
}

/* An allocation the device refused though the budget held it: another
 * process has the memory. Says how much is free, so the user sees why. */
static void
set_device_full (CudaCtx *c, cudaError_t e, const char *what, size_t bytes, GError **error)
{
  size_t free_b = 0, total_b = 0;

  if (e == cudaErrorMemoryAllocation && cudaMemGetInfo (&free_b, &total_b) == cudaSuccess)
    {
      (void) cudaGetLastError ();
      g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY,
                   "cuda: the GPU refused %s of %.1f MiB (out of memory) though the budget holds it: it reports "
                   "%.1f of its %.1f MiB free; this process holds %.1f MiB (its budget is %.1f MiB), so another "
                   "program is likely using the rest", what, bytes / 1048576.0, free_b / 1048576.0,
                   total_b / 1048576.0,
                   (c->in_use + c->fixed_overhead + c->scratch_bytes) / 1048576.0, c->budget / 1048576.0);
      return;
    }
  {
    g_autofree char *msg = g_strdup_printf ("allocating %s of %.1f MiB", what, bytes / 1048576.0);
    um_cuda_ok (e, msg, error);
  }
}

/* Buffers and weights: under the budget and counted in in_use and peak. */
void *
um_cuda_dev_alloc (CudaCtx *c, size_t bytes, const char *what, GError **error)
{
  void *p = NULL;
  cudaError_t e;
  const guint64 used = c->in_use + capped_overhead (c);

  um_cuda_segment_abort (c, "an allocation");
  if (!um_backend_budget_check ("cuda", "GPU memory", c->budget, used, bytes, what, error))
    return NULL;
  e = cudaMalloc (&p, MAX (bytes, 1));
  if (e != cudaSuccess)
    {
      set_device_full (c, e, what, bytes, error);
      return NULL;
    }
  c->in_use += bytes;
  c->peak = MAX (c->peak, c->in_use);
  observe_device_use (c);
  return p;
}

void
um_cuda_dev_free (CudaCtx *c, void *p, size_t bytes)
{
  if (p == NULL)
    return;
  um_cuda_segment_abort (c, "a release");
  cudaFree (p);
  c->in_use -= bytes;
}

void
um_cuda_scratch_release (CudaCtx *c, Scratch *s)
{
  if (s->ptr != NULL)
    cudaFree (s->ptr);
  c->scratch_bytes -= s->bytes;
  s->ptr = NULL;
  s->bytes = 0;
}

/* Scratch is overhead, like the CPU backend's product scratch: outside the
 * budget, which covers buffers and weights (DEFAULT_MARGIN leaves room);
 * under a hard cap, inside it. */
gboolean
um_cuda_scratch_ensure (CudaCtx *c, Scratch *s, size_t bytes, GError **error)
{
  void *p = NULL;
  if (s->bytes >= bytes)
    return TRUE;
  if (c->hard_cap && c->in_use + capped_overhead (c) - s->bytes + bytes > c->budget)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY,
                   "cuda: work memory of %.1f MiB would exceed the GPU memory budget (%.1f of %.1f MiB in use, the "
                   "CUDA context and cuBLAS included)", bytes / 1048576.0,
                   (c->in_use + capped_overhead (c)) / 1048576.0, c->budget / 1048576.0);
      return FALSE;
    }
  /* No allocation while recording a graph: the recording stops here (the
   * segment is run again), and recorded graphs that read the old buffer
   * are recorded again (um-cuda-graph.c). */
  um_cuda_segment_abort (c, "a scratch buffer grows");
  c->scratch_epoch++;
  /* The streams may still use the old buffer. */
  if (!um_cuda_ok (cudaStreamSynchronize (c->stream), "waiting for the GPU", error)
      || (c->dequant_stream != NULL
          && !um_cuda_ok (cudaStreamSynchronize (c->dequant_stream), "waiting for the GPU", error)))
    return FALSE;
  um_cuda_scratch_release (c, s);
  {
    cudaError_t e = cudaMalloc (&p, MAX (bytes, 1));
    if (e != cudaSuccess)
      {
        set_device_full (c, e, "work memory", bytes, error);
        return FALSE;
      }
  }
  s->ptr = p;
  s->bytes = bytes;
  c->scratch_bytes += bytes;
  observe_device_use (c);
  return TRUE;
}

/* Host blocks still registered here when the backend goes are the owner's
 * leak; they stay valid (the primary context outlives this backend). */
static void
cuda_destroy (UmBackend *be)
{
  CudaCtx *c = CTX (be);
  if (c->stream)
    cudaStreamSynchronize (c->stream);
  if (c->copy_stream)
    cudaStreamSynchronize (c->copy_stream);
  if (c->dequant_stream)
    cudaStreamSynchronize (c->dequant_stream);
  um_cuda_scratch_release (c, &c->act_half);
  um_cuda_scratch_release (c, &c->tiles[0]);
  um_cuda_scratch_release (c, &c->tiles[1]);
  um_cuda_scratch_release (c, &c->index);
  um_cuda_scratch_release (c, &c->att_scores);
  for (int b = 0; b < 2; b++)
    {
      if (c->tile_ready[b])
        cudaEventDestroy (c->tile_ready[b]);
      if (c->tile_free[b])
        cudaEventDestroy (c->tile_free[b]);
      if (c->stage_done[b])
        cudaEventDestroy (c->stage_done[b]);
      if (c->stage[b])
        cudaFreeHost (c->stage[b]);
    }
  if (c->product_start)
    cudaEventDestroy (c->product_start);
  if (c->range_done)
    cudaEventDestroy (c->range_done);
  if (c->range_flag)
    cudaFree (c->range_flag);
  if (c->range_flag_host)
    cudaFreeHost (c->range_flag_host);
  if (c->flags)
    cudaFree (c->flags);
  if (c->flags_host)
    cudaFreeHost (c->flags_host);
  g_clear_pointer (&c->flagged, g_array_unref);
  g_clear_pointer (&c->fp32_weights, g_hash_table_unref);
  um_cuda_graphs_free (c);
  um_cuda_experts_free (c);
  for (guint i = 0; c->timers != NULL && i < c->timers->len; i++)
    {
      cudaEventDestroy (g_array_index (c->timers, Timer, i).start);
      cudaEventDestroy (g_array_index (c->timers, Timer, i).end);
    }
  for (guint i = 0; c->spare_events != NULL && i < c->spare_events->len; i++)
    cudaEventDestroy (g_array_index (c->spare_events, cudaEvent_t, i));
  g_clear_pointer (&c->timers, g_array_unref);
  g_clear_pointer (&c->spare_events, g_array_unref);
  if (c->dequant_stream)
    cudaStreamDestroy (c->dequant_stream);
  if (c->handle)
    um_cuda_blas.destroy (c->handle);
  if (c->workspace)
    cudaFree (c->workspace);
  if (c->copy_stream)
    cudaStreamDestroy (c->copy_stream);
  if (c->stream)
    cudaStreamDestroy (c->stream);
  (void) cudaGetLastError ();
  g_clear_pointer (&c->pinned, g_hash_table_unref);
  g_mutex_clear (&c->host_lock);
  g_mutex_clear (&c->stage_lock);
  g_free (c);
  g_free (be);
}

static void
cuda_mem_info (UmBackend *be, UmBackendMemInfo *info)
{
  CudaCtx *c = CTX (be);
  size_t free_b = 0, total_b = 0;

  memset (info, 0, sizeof *info);
  info->budget = c->budget;
  info->in_use = c->in_use;
  info->peak = c->peak;
  info->n_allocs = c->n_allocs;
  info->weight_bytes = c->weight_bytes;
  info->overhead = c->fixed_overhead + c->scratch_bytes;
  if (cudaMemGetInfo (&free_b, &total_b) == cudaSuccess)
    {
      info->total = total_b;
      info->free = free_b;
      c->used_peak_seen = MAX (c->used_peak_seen, (guint64) (total_b - free_b));
    }
  else
    {
      (void) cudaGetLastError ();
      info->total = c->total;
    }
}

static UmBuf *
cuda_buf_alloc (UmBackend *be, size_t bytes, GError **error)
{
  CudaCtx *c = CTX (be);
  void *p = um_cuda_dev_alloc (c, bytes, "a buffer", error);
  UmBuf *buf;
  if (p == NULL)
    return NULL;
  buf = g_new0 (UmBuf, 1);
  buf->ptr = p;
  buf->bytes = bytes;
  c->n_allocs++;
  return buf;
}

static void
cuda_buf_free (UmBackend *be, UmBuf *buf)
{
  CudaCtx *c;
  if (buf == NULL)
    return;
  if (!buf->view)
    {
      c = CTX (be);
      um_cuda_segment_abort (c, "a release");
      /* The dequant stream too: after a failed product it may still read
       * a weight in this buffer (a streaming slot). */
      cudaStreamSynchronize (c->stream);
      cudaStreamSynchronize (c->dequant_stream);
      um_cuda_dev_free (c, buf->ptr, buf->bytes);
    }
  g_free (buf);
}

static UmBuf *
cuda_buf_view (UmBackend *be, UmBuf *parent, size_t offset, size_t bytes, GError **error)
{
  UmBuf *buf;
  if (!um_backend_check_copy ("cuda", parent->bytes, offset, bytes, error))
    return NULL;
  buf = g_new0 (UmBuf, 1);
  buf->ptr = (char *) parent->ptr + offset;
  buf->bytes = bytes;
  buf->view = TRUE;
  return buf;
}

/* From page-locked (or managed) memory cudaMemcpyAsync returns before it has
 * read the source, while from pageable memory it returns once the bytes are
 * staged; uploads from the former must wait before returning, since the
 * caller may reuse @src then, as on the CPU. */
static gboolean
copy_is_async (const void *src)
{
  struct cudaPointerAttributes attr;
  if (cudaPointerGetAttributes (&attr, src) != cudaSuccess)
    {
      (void) cudaGetLastError ();
      return TRUE;   /* unknown: wait, to be safe */
    }
  return attr.type != cudaMemoryTypeUnregistered;
}

static gboolean
cuda_buf_upload (UmBackend *be, UmBuf *dst, size_t offset, const void *src, size_t bytes, GError **error)
{
  CudaCtx *c = CTX (be);
  if (!um_backend_check_copy ("cuda", dst->bytes, offset, bytes, error))
    return FALSE;
  if (bytes == 0)
    return TRUE;
  /* From host memory the caller may reuse at once: not recordable. */
  if (!um_cuda_host_sync_allowed (c, "an upload"))
    return TRUE;
  return um_cuda_ok (cudaMemcpyAsync ((char *) dst->ptr + offset, src, bytes, cudaMemcpyHostToDevice, c->stream),
                  "uploading", error)
         && (!copy_is_async (src) || um_cuda_ok (cudaStreamSynchronize (c->stream), "uploading", error));
}

static gboolean
cuda_buf_download (UmBackend *be, UmBuf *src, size_t offset, void *dst, size_t bytes, GError **error)
{
  CudaCtx *c = CTX (be);
  if (!um_backend_check_copy ("cuda", src->bytes, offset, bytes, error))
    return FALSE;
  if (bytes == 0)
    return TRUE;
  if (!um_cuda_host_sync_allowed (c, "a download"))
    {
      memset (dst, 0, bytes);
      return TRUE;
    }
  if (!um_cuda_ok (cudaMemcpyAsync (dst, (char *) src->ptr + offset, bytes, cudaMemcpyDeviceToHost, c->stream),
                "downloading", error)
      || !um_cuda_ok (cudaStreamSynchronize (c->stream), "waiting for the GPU", error))
    return FALSE;
  um_cuda_timers_collect (c);
  return TRUE;
}

/* Runs in the copy thread while the compute thread issues ops: only the
 * copy stream is touched, and the current device is set for this thread. */
static gboolean
cuda_copy_upload (UmBackend *be, UmBuf *dst, size_t offset, const void *src, size_t bytes, GError **error)
{
  CudaCtx *c = be->ctx;
  if (!um_backend_check_copy ("cuda", dst->bytes, offset, bytes, error))
    return FALSE;
  if (bytes == 0)
    return TRUE;
  return um_cuda_ok (cudaSetDevice (c->device), "selecting the device", error)
         && um_cuda_ok (cudaMemcpyAsync ((char *) dst->ptr + offset, src, bytes, cudaMemcpyHostToDevice,
                                      c->copy_stream), "uploading a weight slot", error)
         && um_cuda_ok (cudaStreamSynchronize (c->copy_stream), "uploading a weight slot", error);
}

/* The dequant stream's work is followed by products that wait for it, but
 * not after a failure in between: wait for it too (idle, it costs nothing). */
static gboolean
cuda_sync (UmBackend *be, GError **error)
{
  CudaCtx *c = CTX (be);
  if (!um_cuda_host_sync_allowed (c, "a sync"))
    return TRUE;
  if (!um_cuda_ok (cudaStreamSynchronize (c->stream), "waiting for the GPU", error)
      || !um_cuda_ok (cudaStreamSynchronize (c->dequant_stream), "waiting for the GPU", error))
    return FALSE;
  um_cuda_timers_collect (c);
  return TRUE;
}

gboolean
um_backend_is_cuda (UmBackend *be)
{
  return be->ops == &cuda_ops;
}

gboolean
um_backend_cuda_matmul_seconds (UmBackend *be, double *seconds)
{
  CudaCtx *c;
  if (be == NULL || be->ops != &cuda_ops)
    return FALSE;
  c = CTX (be);
  if (cudaStreamSynchronize (c->stream) != cudaSuccess)
    (void) cudaGetLastError ();
  um_cuda_timers_collect (c);
  *seconds = c->matmul_seconds;
  return TRUE;
}

/* Page-locked, so that copy_upload is a real asynchronous DMA that overlaps
 * compute; pinning can fail (RLIMIT_MEMLOCK, too much asked), and plain
 * memory still works, through a staged copy. */
static void *
cuda_host_alloc (UmBackend *be, size_t bytes, GError **error)
{
  CudaCtx *c = CTX (be);
  void *p = NULL;
  cudaError_t e = cudaHostAlloc (&p, MAX (bytes, 1), cudaHostAllocPortable);

  if (e == cudaSuccess)
    {
      g_mutex_lock (&c->host_lock);
      g_hash_table_add (c->pinned, p);
      g_mutex_unlock (&c->host_lock);
      return p;
    }
  (void) cudaGetLastError ();
  g_debug ("cuda: could not pin %.1f MiB of host memory (%s); using pageable memory", bytes / 1048576.0,
           cudaGetErrorString (e));
  p = NULL;
  if (posix_memalign (&p, 64, MAX (bytes, 1)) != 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY,
                   "cuda: out of host memory for a weight store of %.1f MiB", bytes / 1048576.0);
      return NULL;
    }
  return p;
}

static void
cuda_host_free (UmBackend *be, void *ptr, size_t bytes)
{
  CudaCtx *c = be->ctx;
  gboolean pinned;

  if (ptr == NULL)
    return;
  g_mutex_lock (&c->host_lock);
  pinned = g_hash_table_remove (c->pinned, ptr);
  g_mutex_unlock (&c->host_lock);
  if (pinned)
    {
      cudaSetDevice (c->device);
      cudaFreeHost (ptr);
      (void) cudaGetLastError ();
    }
  else
    free (ptr);
}

/* ---- weight uploads ---- */

/* BF16 → F16: bf16_f16[b] is b's f16 bits, bf16_exact[b] whether f16 holds
 * b's value: bit for bit, or (b below f16's normal range, 2^-14) to within
 * half of f16's subnormal step, 2^-25. Real checkpoints have a few weights
 * that small in nearly every matrix (N(0, 0.02) puts 3 in 10^4 below 2^-17),
 * so a bit-exact rule would send every BF16 matrix to fp32 products; an
 * error of 2^-25 on such a weight is far below the f16 rounding of the
 * activation it meets (2^-11 relative). */
static guint16 bf16_f16[65536];
static guint8 bf16_exact[65536];

static gpointer
bf16_tables_once (gpointer data)
{
  for (guint32 b = 0; b < 65536; b++)
    {
      float f = um_bf16_to_f32 ((uint16_t) b);
      uint16_t h = um_f32_to_f16 (f);
      bf16_f16[b] = h;
      bf16_exact[b] = um_f32_to_bits (um_f16_to_f32 (h)) == um_f32_to_bits (f)
                      || (fabsf (f) < 0x1p-14f && fabsf (um_f16_to_f32 (h) - f) <= 0x1p-25f);
    }
  return GINT_TO_POINTER (1);
}

/* @n values at @data (possibly unaligned: a mapped file). */
static gboolean
bf16_exact_in_f16 (const void *data, size_t n)
{
  static GOnce once = G_ONCE_INIT;
  const guint8 *p = data;

  g_once (&once, bf16_tables_once, NULL);
  for (size_t i = 0; i < n; i++)
    {
      guint16 b;
      memcpy (&b, p + 2 * i, 2);
      if (!bf16_exact[b])
        return FALSE;
    }
  return TRUE;
}

static void
bf16_to_f16 (void *dst, const void *src, size_t n)
{
  const guint8 *s = src;
  guint8 *d = dst;
  for (size_t i = 0; i < n; i++)
    {
      guint16 b;
      memcpy (&b, s + 2 * i, 2);
      memcpy (d + 2 * i, &bf16_f16[b], 2);
    }
}

/* Copies @bytes of @src (pageable host memory) to @dst through the two
 * staging buffers in turn, converting BF16 to F16 on the way if @to_f16:
 * filling one overlaps the copy from the other. Pinned, the copies are DMA
 * straight from them; if pinning failed they are plain memory and each
 * copy returns once the driver has staged it, which is still correct. */
static gboolean
upload_staged (CudaCtx *c, void *dst, const void *src, size_t bytes, gboolean to_f16, GError **error)
{
  gboolean used[2] = { FALSE, FALSE };
  gboolean ok = TRUE;
  size_t off = 0;
  int b = 0;

  g_mutex_lock (&c->stage_lock);
  for (int i = 0; i < 2; i++)
    if (c->stage[i] == NULL && cudaHostAlloc (&c->stage[i], STAGE_BYTES, cudaHostAllocDefault) != cudaSuccess)
      {
        (void) cudaGetLastError ();
        c->stage[i] = NULL;
      }
  if (c->stage[0] == NULL || c->stage[1] == NULL)
    {
      /* Without pinned buffers only a conversion needs staging. */
      g_mutex_unlock (&c->stage_lock);
      if (!to_f16)
        return um_cuda_ok (cudaMemcpyAsync (dst, src, bytes, cudaMemcpyHostToDevice, c->copy_stream),
                        "uploading a weight", error)
               && um_cuda_ok (cudaStreamSynchronize (c->copy_stream), "uploading a weight", error);
      else
        {
          g_autofree void *tmp = g_try_malloc (MIN (bytes, (size_t) STAGE_BYTES));
          if (tmp == NULL)
            {
              g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY, "cuda: out of host memory to upload a weight");
              return FALSE;
            }
          for (off = 0; ok && off < bytes; off += STAGE_BYTES)
            {
              size_t len = MIN ((size_t) STAGE_BYTES, bytes - off);
              bf16_to_f16 (tmp, (const char *) src + off, len / 2);
              ok = um_cuda_ok (cudaMemcpy ((char *) dst + off, tmp, len, cudaMemcpyHostToDevice), "uploading a weight",
                            error);
            }
          return ok;
        }
    }
  while (ok && off < bytes)
    {
      size_t len = MIN ((size_t) STAGE_BYTES, bytes - off);
      /* The copy that last read this buffer. */
      ok = !used[b] || um_cuda_ok (cudaEventSynchronize (c->stage_done[b]), "uploading a weight", error);
      if (!ok)
        break;
      if (to_f16)
        bf16_to_f16 (c->stage[b], (const char *) src + off, len / 2);
      else
        memcpy (c->stage[b], (const char *) src + off, len);
      ok = um_cuda_ok (cudaMemcpyAsync ((char *) dst + off, c->stage[b], len, cudaMemcpyHostToDevice, c->copy_stream),
                    "uploading a weight", error)
           && um_cuda_ok (cudaEventRecord (c->stage_done[b], c->copy_stream), "uploading a weight", error);
      used[b] = TRUE;
      off += len;
      b ^= 1;
    }
  /* Also after a failure: no copy may still read the buffers. */
  if (cudaStreamSynchronize (c->copy_stream) != cudaSuccess)
    ok = ok && um_cuda_ok (cudaGetLastError (), "uploading a weight", error);
  g_mutex_unlock (&c->stage_lock);
  return ok;
}

/* Weights are uploaded as stored (quantized blocks stay quantized), except
 * BF16 whose every value is exact in F16: uploaded as F16, so the products
 * take f16 activations (8× finer than bf16) on tensor cores. */
static UmDevWeight *
cuda_weight_load (UmBackend *be, const UmWeight *w, GError **error)
{
  CudaCtx *c = CTX (be);
  size_t bytes = w->rows * w->row_bytes;
  g_autofree char *what = g_strdup_printf ("weight “%s”", w->name);
  gboolean to_f16 = w->dtype == UM_DTYPE_BF16 && bf16_exact_in_f16 (w->data, bytes / 2);
  UmDevWeight *dw;
  void *p = um_cuda_dev_alloc (c, bytes, what, error);

  if (p == NULL)
    return NULL;
  if (bytes > 0 && !upload_staged (c, p, w->data, bytes, to_f16, error))
    {
      um_cuda_dev_free (c, p, bytes);
      return NULL;
    }
  dw = g_new0 (UmDevWeight, 1);
  dw->w = *w;
  if (to_f16)
    dw->w.dtype = UM_DTYPE_F16;
  dw->w.data = p;
  dw->dev = p;
  dw->bytes = bytes;
  c->weight_bytes += bytes;
  return dw;
}

/* The element alignment the typed readers of a weight need: cuBLAS (F32,
 * F16, BF16 products) and RMSNorm read whole elements; the dequantizers read
 * bytes. */
static size_t
weight_alignment (UmDType t)
{
  switch (t)
    {
    case UM_DTYPE_F32:
    case UM_DTYPE_I32:
      return 4;
    case UM_DTYPE_F16:
    case UM_DTYPE_BF16:
      return 2;
    default:
      return 1;
    }
}

/* Owns nothing: the same pointer arithmetic as a loaded weight, at
 * buf + offset instead of a cudaMalloc'd block. */
static UmDevWeight *
cuda_weight_view (UmBackend *be, UmBuf *buf, size_t offset, const UmWeight *meta, GError **error)
{
  guint64 bytes;
  char *p;
  UmDevWeight *dw;

  if (!g_uint64_checked_mul (&bytes, meta->rows, meta->row_bytes) || bytes > G_MAXSIZE)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "cuda: weight “%s” is too large", meta->name);
      return NULL;
    }
  if (!um_backend_check_copy ("cuda", buf->bytes, offset, bytes, error))
    return NULL;
  p = (char *) buf->ptr + offset;
  if ((uintptr_t) p % weight_alignment (meta->dtype) != 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "cuda: weight “%s” at offset %zu is not aligned to its %zu-byte elements", meta->name, offset,
                   weight_alignment (meta->dtype));
      return NULL;
    }
  dw = g_new0 (UmDevWeight, 1);
  dw->w = *meta;
  dw->w.data = p;
  dw->dev = p;
  dw->bytes = bytes;
  dw->view = TRUE;
  return dw;
}

static void
cuda_weight_free (UmBackend *be, UmDevWeight *w)
{
  CudaCtx *c;
  if (w == NULL)
    return;
  if (!w->view)
    {
      c = CTX (be);
      um_cuda_segment_abort (c, "a release");
      cudaStreamSynchronize (c->stream);
      cudaStreamSynchronize (c->dequant_stream);
      um_cuda_dev_free (c, w->dev, w->bytes);
      c->weight_bytes -= w->bytes;
      g_hash_table_remove (c->fp32_weights, w->dev);
    }
  g_free (w);
}

static const UmBackendOps cuda_ops = {
  .name = "cuda",
  .weights_in_place = FALSE,
  .destroy = cuda_destroy,
  .mem_info = cuda_mem_info,
  .buf_alloc = cuda_buf_alloc,
  .buf_free = cuda_buf_free,
  .buf_view = cuda_buf_view,
  .buf_upload = cuda_buf_upload,
  .buf_download = cuda_buf_download,
  .weight_load = cuda_weight_load,
  .weight_free = cuda_weight_free,
  .weight_view = cuda_weight_view,
  .host_alloc = cuda_host_alloc,
  .host_free = cuda_host_free,
  .copy_upload = cuda_copy_upload,
  .sync = cuda_sync,
  .embed = um_cuda_op_embed,
  .get_rows = um_cuda_op_get_rows,
  .rms_norm = um_cuda_op_rms_norm,
  .add_rms_norm = um_cuda_op_add_rms_norm,
  .matmul = um_cuda_op_matmul,
  .rope = um_cuda_op_rope,
  .attention = um_cuda_op_attention,
  .swiglu = um_cuda_op_swiglu,
  .add = um_cuda_op_add,
  .add_bias = um_cuda_op_add_bias,
  .add_rows_scaled = um_cuda_op_add_rows_scaled,
  .choose = um_cuda_op_choose,
  .moe = um_cuda_op_moe,
  .expert_ffn = um_cuda_op_expert_ffn,
  .pass_begin = um_cuda_pass_begin,
  .pass_end = um_cuda_pass_end,
  .segment_begin = um_cuda_segment_begin,
  .segment_end = um_cuda_segment_end,
};

/* The device memory a context sets aside by its limits: a stack for every
 * thread the GPU can hold resident, the device malloc heap and the printf
 * FIFO. The driver's own reservations beyond these are not known, so this
 * is an estimate, not a measurement. */
static guint64
context_estimate (const struct cudaDeviceProp *prop)
{
  size_t stack = 0, heap = 0, fifo = 0;

  if (cudaDeviceGetLimit (&stack, cudaLimitStackSize) != cudaSuccess
      || cudaDeviceGetLimit (&heap, cudaLimitMallocHeapSize) != cudaSuccess
      || cudaDeviceGetLimit (&fifo, cudaLimitPrintfFifoSize) != cudaSuccess)
    (void) cudaGetLastError ();
  return (guint64) stack * (guint64) prop->multiProcessorCount * (guint64) prop->maxThreadsPerMultiProcessor
         + heap + fifo;
}

static UmBackend *backend_new (int device, guint64 budget_bytes, gboolean hard_cap, GError **error);

gboolean
um_backend_cuda_device_usage (UmBackend *be, UmCudaDeviceUsage *out)
{
  CudaCtx *c;
  size_t free_b = 0, total_b = 0;

  memset (out, 0, sizeof *out);
  if (be == NULL || be->ops != &cuda_ops)
    return FALSE;
  c = CTX (be);
  if (cudaMemGetInfo (&free_b, &total_b) == cudaSuccess)
    c->used_peak_seen = MAX (c->used_peak_seen, (guint64) (total_b - free_b));
  else
    (void) cudaGetLastError ();
  out->total = total_b;
  out->free = free_b;
  out->used_at_start = c->used_at_start;
  out->used_peak = c->used_peak_seen;
  out->delta_peak = c->used_peak_seen > c->used_at_start ? c->used_peak_seen - c->used_at_start : 0;
  out->context_estimate = c->context_estimate;
  if (cudaDeviceGetPCIBusId (out->pci_bus_id, sizeof out->pci_bus_id, c->device) != cudaSuccess)
    {
      (void) cudaGetLastError ();
      out->pci_bus_id[0] = 0;
    }
  return TRUE;
}

UmBackend *
um_backend_cuda_new (int device, guint64 budget_bytes, GError **error)
{
  return backend_new (device, budget_bytes, FALSE, error);
}

UmBackend *
um_backend_cuda_new_capped (int device, guint64 cap_bytes, GError **error)
{
  return backend_new (device, cap_bytes, cap_bytes > 0, error);
}

static UmBackend *
backend_new (int device, guint64 budget_bytes, gboolean hard_cap, GError **error)
{
  g_autofree char *why = NULL;
  struct cudaDeviceProp prop;
  size_t free_ctx = 0, free_init = 0, total_b = 0;
  guint64 own = 0, ctx_upper, ctx_est;
  int count = 0;
  UmBackend *be;
  CudaCtx *c;

  if ((why = um_cuda_probe_devices (&count)) != NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "cuda: %s", why);
      return NULL;
    }
  if (device < 0 || device >= count)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "cuda: there is no device %d (%d found)", device, count);
      return NULL;
    }
  if (!um_cuda_ok (cudaGetDeviceProperties (&prop, device), "querying the device", error))
    return NULL;
  /* The kernels are built for sm_80 to sm_90 (and PTX for newer GPUs). */
  if (prop.major < 8)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                   "cuda: %s has compute capability %d.%d; Unmask needs 8.0 or newer", prop.name, prop.major,
                   prop.minor);
      return NULL;
    }
  /* cudaFree (NULL) creates the context now, so that the second reading
   * below differs from this one only by what this function allocates. */
  if (!um_cuda_load_cublas (error)
      || !um_cuda_ok (cudaSetDevice (device), "selecting the device", error)
      || !um_cuda_ok (cudaFree (NULL), "creating the CUDA context", error))
    return NULL;
  /* A GPU newer than the build's code (or a driver too old for its PTX)
   * fails only at the first launch; ask now, so `auto` can still choose
   * the CPU. */
  if (um_cuda_probe_kernels () != cudaSuccess)
    {
      (void) cudaGetLastError ();
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                   "cuda: this build of Unmask has no kernels for %s (compute capability %d.%d): "
                   "it was built for 8.0–9.0 and PTX 9.0; update the NVIDIA driver or rebuild Unmask",
                   prop.name, prop.major, prop.minor);
      return NULL;
    }
  if (!um_cuda_ok (cudaMemGetInfo (&free_ctx, &total_b), "querying memory", error))
    return NULL;

  c = g_new0 (CudaCtx, 1);
  c->device = device;
  c->exact_attention = g_getenv ("UNMASK_CUDA_EXACT_ATTENTION") != NULL;
  c->exact_products = g_getenv ("UNMASK_CUDA_EXACT_PRODUCTS") != NULL;
  c->total = total_b;
  g_mutex_init (&c->host_lock);
  g_mutex_init (&c->stage_lock);
  c->pinned = g_hash_table_new (NULL, NULL);
  c->timers = g_array_new (FALSE, FALSE, sizeof (Timer));
  c->flagged = g_array_new (FALSE, FALSE, sizeof (UmCudaFlagged));
  c->fp32_weights = g_hash_table_new (NULL, NULL);
  um_cuda_graphs_init (c);
  um_cuda_experts_init (c);
  c->spare_events = g_array_new (FALSE, FALSE, sizeof (cudaEvent_t));
  /* cuBLAS's recommended workspace: 32 MiB from Hopper on, 4 MiB before. */
  c->workspace_bytes = um_cuda_blas.set_workspace != NULL ? (prop.major >= 9 ? 32u << 20 : 4u << 20) : 0;
  be = g_new0 (UmBackend, 1);
  be->ops = &cuda_ops;
  be->ctx = c;
  if (!um_cuda_ok (cudaStreamCreateWithFlags (&c->stream, cudaStreamNonBlocking), "creating a stream", error)
      || !um_cuda_ok (cudaStreamCreateWithFlags (&c->copy_stream, cudaStreamNonBlocking), "creating a stream", error)
      || !um_cuda_ok (cudaStreamCreateWithFlags (&c->dequant_stream, cudaStreamNonBlocking), "creating a stream", error)
      || !um_cuda_ok (cudaEventCreateWithFlags (&c->tile_ready[0], cudaEventDisableTiming), "creating an event", error)
      || !um_cuda_ok (cudaEventCreateWithFlags (&c->tile_ready[1], cudaEventDisableTiming), "creating an event", error)
      || !um_cuda_ok (cudaEventCreateWithFlags (&c->tile_free[0], cudaEventDisableTiming), "creating an event", error)
      || !um_cuda_ok (cudaEventCreateWithFlags (&c->tile_free[1], cudaEventDisableTiming), "creating an event", error)
      || !um_cuda_ok (cudaEventCreateWithFlags (&c->product_start, cudaEventDisableTiming), "creating an event", error)
      || !um_cuda_ok (cudaEventCreateWithFlags (&c->range_done, cudaEventDisableTiming), "creating an event", error)
      || !um_cuda_ok (cudaEventCreateWithFlags (&c->stage_done[0], cudaEventDisableTiming), "creating an event", error)
      || !um_cuda_ok (cudaEventCreateWithFlags (&c->stage_done[1], cudaEventDisableTiming), "creating an event", error)
      || !um_cuda_ok (cudaMalloc ((void **) &c->range_flag, sizeof (int)), "allocating the range flag", error)
      || !um_cuda_ok (cudaMalloc ((void **) &c->flags, UM_CUDA_FLAG_SLOTS * sizeof (int)), "allocating the range flags",
                      error)
      || !um_cuda_ok (cudaHostAlloc ((void **) &c->flags_host, UM_CUDA_FLAG_SLOTS * sizeof (int),
                                     cudaHostAllocDefault), "allocating the range flags", error)
      || !um_cuda_ok (cudaHostAlloc ((void **) &c->range_flag_host, sizeof (int), cudaHostAllocDefault),
                   "allocating the range flag", error)
      || !um_cuda_blas_ok (um_cuda_blas.create (&c->handle), "creating a handle", error)
      /* Before the workspace: setting the stream resets it to cuBLAS's pool. */
      || !um_cuda_blas_ok (um_cuda_blas.set_stream (c->handle, c->stream), "setting the stream", error)
      || (c->workspace_bytes > 0
          && (!um_cuda_ok (cudaMalloc (&c->workspace, c->workspace_bytes), "allocating the cuBLAS workspace", error)
              || !um_cuda_blas_ok (um_cuda_blas.set_workspace (c->handle, c->workspace, c->workspace_bytes),
                           "setting the workspace", error)))
      /* No TF32 shortcuts: F32 weights get true fp32 products. */
      || !um_cuda_blas_ok (um_cuda_blas.set_math_mode (c->handle, CUBLAS_DEFAULT_MATH), "setting the math mode", error)
      || !um_cuda_ok (cudaMemGetInfo (&free_init, &total_b), "querying memory", error))
    {
      cuda_destroy (be);
      return NULL;
    }

  /* Overhead, outside in_use: (1) the streams, cuBLAS's handle and its
   * workspace, measured as the fall in free memory across their creation
   * (another process allocating or freeing meanwhile would skew it, so it
   * is never taken below the workspace we know we allocated); (2) the
   * context, which exists before any reading can be taken: total − free
   * after its creation bounds it from above but counts every other
   * process's memory too, so the estimate from its limits is used, capped
   * by that bound. Kernels (ours and cuBLAS's) load on first use and are
   * not included; nor is the display's or other programs' memory. */
  if (free_ctx > free_init)
    own = free_ctx - free_init;
  own = MAX (own, (guint64) c->workspace_bytes);
  ctx_upper = total_b > free_ctx ? total_b - free_ctx : 0;
  ctx_est = MIN (context_estimate (&prop), ctx_upper);
  c->fixed_overhead = own + ctx_est;
  c->used_at_start = total_b > free_ctx ? total_b - free_ctx : 0;
  c->used_peak_seen = total_b > free_init ? total_b - free_init : 0;
  c->context_estimate = ctx_est;
  c->budget = budget_bytes ? budget_bytes : (free_init > DEFAULT_MARGIN ? free_init - DEFAULT_MARGIN : 0);
  c->hard_cap = hard_cap;
  if (hard_cap && c->fixed_overhead >= c->budget)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY,
                   "cuda: a GPU memory budget of %.1f MiB does not even hold the CUDA context and cuBLAS "
                   "(%.1f MiB)", c->budget / 1048576.0, c->fixed_overhead / 1048576.0);
      cuda_destroy (be);
      return NULL;
    }
  g_debug ("cuda: device %d: context ≈ %.1f MiB (at most %.1f MiB), cuBLAS handle and workspace %.1f MiB, "
           "budget %.1f MiB", device, ctx_est / 1048576.0, ctx_upper / 1048576.0, own / 1048576.0,
           c->budget / 1048576.0);
  return be;
}

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
#include "um-backend-cuda.h"

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
/* Dequantized weight tile: enough rows for tensor-core efficiency, bounded
 * memory whatever the weight. */
#ifndef UM_CUDA_TILE_ELEMS
#define UM_CUDA_TILE_ELEMS (32ull << 20)
#endif
#define TILE_ELEMS UM_CUDA_TILE_ELEMS
/* Weights go to the device through two pinned buffers of this size in
 * turn: one is filled while the other is copied. */
#define STAGE_BYTES (32u << 20)
/* Products timed but not yet read back: beyond this many, reading waits. */
#define MAX_PENDING_TIMERS 4096

/* ---- cuBLAS, opened at run time ---- */

typedef cublasStatus_t (*CreateFn) (cublasHandle_t *);
typedef cublasStatus_t (*DestroyFn) (cublasHandle_t);
typedef cublasStatus_t (*SetStreamFn) (cublasHandle_t, cudaStream_t);
typedef cublasStatus_t (*SetMathModeFn) (cublasHandle_t, cublasMath_t);
typedef cublasStatus_t (*SetWorkspaceFn) (cublasHandle_t, void *, size_t);
typedef cublasStatus_t (*GemmExFn) (cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                    const void *, const void *, cudaDataType, int, const void *, cudaDataType,
                                    int, const void *, void *, cudaDataType, int, cublasComputeType_t,
                                    cublasGemmAlgo_t);
typedef const char *(*StatusStringFn) (cublasStatus_t);

static struct {
  GModule       *module;
  CreateFn       create;
  DestroyFn      destroy;
  SetStreamFn    set_stream;
  SetMathModeFn  set_math_mode;
  SetWorkspaceFn set_workspace;   /* optional: without it cuBLAS keeps its own pool */
  GemmExFn       gemm_ex;
  StatusStringFn status_string;
  UmCublasGemmStridedBatchedExFn gemm_strided_batched_ex;   /* attention on tensor cores */
  char          *error;
} blas;

static gpointer
load_cublas_once (gpointer data)
{
#ifdef UM_CUDA_EMU
  /* The host emulation (tests/cuda-emu) links its cuBLAS into the program. */
  const char *name = "the emulated cuBLAS";
  GModule *m = g_module_open (NULL, G_MODULE_BIND_LAZY);

  if (m == NULL)
    {
      blas.error = g_strdup_printf ("cuBLAS (%s) is not installed: %s", name, g_module_error ());
      return NULL;
    }
#else
  /* In order: the user's choice, the loader's path, then the toolkit the
   * build found (often not on the loader's path: /usr/local/cuda). */
  g_autofree char *soname = g_strdup_printf ("libcublas.so.%d", CUBLAS_VER_MAJOR);
  g_autoptr(GPtrArray) paths = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GString) tried = g_string_new (NULL);
  const char *name = NULL;
  GModule *m = NULL;

  if (g_getenv ("UNMASK_CUBLAS_LIBRARY") != NULL && *g_getenv ("UNMASK_CUBLAS_LIBRARY") != '\0')
    g_ptr_array_add (paths, g_strdup (g_getenv ("UNMASK_CUBLAS_LIBRARY")));
  g_ptr_array_add (paths, g_strdup (soname));
#ifdef UM_CUDA_ROOT
  g_ptr_array_add (paths, g_build_filename (UM_CUDA_ROOT, "lib64", soname, NULL));
  g_ptr_array_add (paths, g_build_filename (UM_CUDA_ROOT, "targets", "x86_64-linux", "lib", soname, NULL));
#endif
  for (guint i = 0; i < paths->len && m == NULL; i++)
    {
      name = paths->pdata[i];
      m = g_module_open (name, G_MODULE_BIND_LAZY | G_MODULE_BIND_LOCAL);
      if (m == NULL)
        g_string_append_printf (tried, "%s%s (%s)", tried->len ? "; " : "", name, g_module_error ());
    }
  if (m == NULL)
    {
      blas.error = g_strdup_printf ("cuBLAS is not installed (tried %s); install it or set UNMASK_CUBLAS_LIBRARY",
                                    tried->str);
      return NULL;
    }
#endif
  if (!g_module_symbol (m, "cublasCreate_v2", (gpointer *) &blas.create)
      || !g_module_symbol (m, "cublasDestroy_v2", (gpointer *) &blas.destroy)
      || !g_module_symbol (m, "cublasSetStream_v2", (gpointer *) &blas.set_stream)
      || !g_module_symbol (m, "cublasSetMathMode", (gpointer *) &blas.set_math_mode)
      || !g_module_symbol (m, "cublasGemmEx", (gpointer *) &blas.gemm_ex)
      || !g_module_symbol (m, "cublasGemmStridedBatchedEx", (gpointer *) &blas.gemm_strided_batched_ex)
      || !g_module_symbol (m, "cublasGetStatusString", (gpointer *) &blas.status_string))
    {
      blas.error = g_strdup_printf ("%s lacks a function Unmask needs: %s", name, g_module_error ());
      g_module_close (m);
      return NULL;
    }
  if (!g_module_symbol (m, "cublasSetWorkspace_v2", (gpointer *) &blas.set_workspace))
    blas.set_workspace = NULL;
  blas.module = m;
  return m;
}

static gboolean
load_cublas (GError **error)
{
  static GOnce once = G_ONCE_INIT;
  if (g_once (&once, load_cublas_once, NULL) == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "cuda: %s", blas.error);
      return FALSE;
    }
  return TRUE;
}

/* ---- errors ---- */

static const UmBackendOps cuda_ops;

static gboolean
cuda_ok (cudaError_t e, const char *what, GError **error)
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

static gboolean
blas_ok (cublasStatus_t s, const char *what, GError **error)
{
  if (s == CUBLAS_STATUS_SUCCESS)
    return TRUE;
  g_set_error (error, UM_ERROR, s == CUBLAS_STATUS_ALLOC_FAILED ? UM_ERROR_OUT_OF_MEMORY : UM_ERROR_FAILED,
               "cublas: %s: %s", what, blas.status_string ? blas.status_string (s) : "error");
  return FALSE;
}

/* ---- the backend ---- */

struct _UmBuf {
  void    *ptr;
  size_t   bytes;
  gboolean view;      /* part of another buffer: owns nothing */
};

struct _UmDevWeight {
  UmWeight w;         /* data points to device memory */
  void    *dev;
  size_t   bytes;
  gboolean view;      /* in a buffer (weight_view): owns nothing, counts nothing */
};

typedef struct {
  void   *ptr;
  size_t  bytes;
} Scratch;

typedef struct {
  cudaEvent_t start;
  cudaEvent_t end;
} Timer;

/* Accounting, as on the CPU: in_use is buffers plus resident weights, under
 * the budget; overhead is what the backend holds for itself outside it (the
 * context, cuBLAS's handle and workspace, measured at creation, and the
 * product scratch below, which grows with the largest product). */
typedef struct {
  int            device;
  cudaStream_t   stream;
  cudaStream_t   copy_stream;   /* copy_upload and weight_load, beside the compute stream */
  cublasHandle_t handle;
  void          *workspace;     /* cuBLAS's, allocated here so that its size is known */
  size_t         workspace_bytes;
  guint64        budget;
  guint64        in_use;
  guint64        peak;
  guint64        total;
  guint64        weight_bytes;
  guint64        n_allocs;
  guint64        fixed_overhead;
  guint64        scratch_bytes;
  Scratch        act_half;      /* activations in f16 for cuBLAS */
  Scratch        index;         /* uploaded index arrays */
  Scratch        att_scores;    /* attention scores of a tile of queries */
  gboolean       exact_attention;   /* UNMASK_CUDA_EXACT_ATTENTION: the fp32 kernel */
  gboolean       exact_products;    /* UNMASK_CUDA_EXACT_PRODUCTS: fp32 activations for every weight type */

  /* Dequantized weight tiles, two in turn: the dequant stream fills one
   * while the compute stream multiplies the other. tile_ready[b]: tiles[b]
   * is filled (dequant stream); tile_free[b]: the product that last read it
   * is done (compute stream); product_start orders a product's
   * dequantization after the ops queued before it. */
  cudaStream_t   dequant_stream;
  Scratch        tiles[2];
  cudaEvent_t    tile_ready[2];
  cudaEvent_t    tile_free[2];
  cudaEvent_t    product_start;

  /* The activations' range check: set on the device by the f16
   * conversion, read back through a pinned int once the conversion is
   * done (range_done). */
  int           *range_flag;
  int           *range_flag_host;
  cudaEvent_t    range_done;
  /* act_half holds act_src's @act_n values converted by the product whose
   * op_serial was act_serial (act_fits: the range check passed). A product
   * right after it (no op between: op_serial one more) on the same input,
   * like k and v after q, or up after gate, reuses the conversion and
   * skips the check's wait. */
  gint           op_serial;
  gint           act_serial;
  gboolean       act_valid;
  const void    *act_src;
  size_t         act_n;
  gboolean       act_fits;

  /* Device time of the products: events around each, read back at the
   * next full sync of the compute stream. */
  GArray        *timers;        /* Timer, recorded and not yet read */
  GArray        *spare_events;  /* cudaEvent_t, for reuse */
  double         matmul_seconds;

  /* Weight uploads: two pinned staging buffers in turn (NULL if pinning
   * failed: pageable copies then). */
  GMutex         stage_lock;
  void          *stage[2];
  cudaEvent_t    stage_done[2];
  GMutex         host_lock;     /* host_alloc/host_free come from any thread */
  GHashTable    *pinned;        /* host_alloc blocks cudaHostAlloc pinned; the others are malloc's */
} CudaCtx;

/* The runtime's current device is per thread, and the engine runs in
 * worker threads while the UI samples memory from the main thread. Every
 * op that may write device memory comes through here (copy_upload, which
 * writes only weight slots, aside), which counts it: see act_serial. */
static inline CudaCtx *
ctx_for_thread (UmBackend *be)
{
  CudaCtx *c = be->ctx;
  g_atomic_int_inc (&c->op_serial);
  cudaSetDevice (c->device);
  return c;
}

#define CTX(be) ctx_for_thread (be)

/* Buffers and weights: under the budget and counted in in_use and peak. */
static void *
dev_alloc (CudaCtx *c, size_t bytes, const char *what, GError **error)
{
  void *p = NULL;
  cudaError_t e;

  if (bytes > c->budget || c->in_use > c->budget - bytes)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY,
                   "cuda: %s of %.1f MiB would exceed the GPU memory budget (%.1f of %.1f MiB in use)",
                   what, bytes / 1048576.0, c->in_use / 1048576.0, c->budget / 1048576.0);
      return NULL;
    }
  e = cudaMalloc (&p, MAX (bytes, 1));
  if (e != cudaSuccess)
    {
      g_autofree char *msg = g_strdup_printf ("allocating %s of %.1f MiB", what, bytes / 1048576.0);
      cuda_ok (e, msg, error);
      return NULL;
    }
  c->in_use += bytes;
  c->peak = MAX (c->peak, c->in_use);
  return p;
}

static void
dev_free (CudaCtx *c, void *p, size_t bytes)
{
  if (p == NULL)
    return;
  cudaFree (p);
  c->in_use -= bytes;
}

static void
scratch_release (CudaCtx *c, Scratch *s)
{
  if (s->ptr != NULL)
    cudaFree (s->ptr);
  c->scratch_bytes -= s->bytes;
  s->ptr = NULL;
  s->bytes = 0;
}

/* Scratch is overhead, like the CPU backend's product scratch: outside the
 * budget, which covers buffers and weights (DEFAULT_MARGIN leaves room). */
static gboolean
scratch_ensure (CudaCtx *c, Scratch *s, size_t bytes, GError **error)
{
  void *p = NULL;
  if (s->bytes >= bytes)
    return TRUE;
  /* The streams may still use the old buffer. */
  if (!cuda_ok (cudaStreamSynchronize (c->stream), "waiting for the GPU", error)
      || (c->dequant_stream != NULL
          && !cuda_ok (cudaStreamSynchronize (c->dequant_stream), "waiting for the GPU", error)))
    return FALSE;
  scratch_release (c, s);
  if (!cuda_ok (cudaMalloc (&p, MAX (bytes, 1)), "allocating scratch memory", error))
    return FALSE;
  s->ptr = p;
  s->bytes = bytes;
  c->scratch_bytes += bytes;
  return TRUE;
}

/* Copies a small host index array to the device, in stream order. */
static const int32_t *
upload_index (CudaCtx *c, const gint32 *host, int n, GError **error)
{
  if (!scratch_ensure (c, &c->index, MAX ((size_t) n, 1) * sizeof (int32_t), error)
      || !cuda_ok (cudaMemcpyAsync (c->index.ptr, host, (size_t) n * sizeof (int32_t), cudaMemcpyHostToDevice,
                                    c->stream), "copying indices", error))
    return NULL;
  return c->index.ptr;
}

/* upload_index of @n indices and @n 4-byte values beside them (floats,
 * more indices; NULL: none) in the index scratch: [indices | values]; the
 * values are at the result + n. */
static const int32_t *
upload_index_values (CudaCtx *c, const gint32 *host, const void *values, int n, GError **error)
{
  const size_t bytes = (size_t) MAX (n, 0) * sizeof (int32_t);
  G_STATIC_ASSERT (sizeof (float) == sizeof (int32_t));

  if (!scratch_ensure (c, &c->index, MAX (2 * bytes, 1), error)
      || !cuda_ok (cudaMemcpyAsync (c->index.ptr, host, bytes, cudaMemcpyHostToDevice, c->stream),
                   "copying indices", error)
      || (values != NULL
          && !cuda_ok (cudaMemcpyAsync ((char *) c->index.ptr + bytes, values, bytes, cudaMemcpyHostToDevice,
                                        c->stream), "copying indices", error)))
    return NULL;
  return c->index.ptr;
}

/* ---- device time of the products ---- */

static gboolean
timer_event (CudaCtx *c, cudaEvent_t *ev, GError **error)
{
  if (c->spare_events->len > 0)
    {
      *ev = g_array_index (c->spare_events, cudaEvent_t, c->spare_events->len - 1);
      g_array_set_size (c->spare_events, c->spare_events->len - 1);
      return TRUE;
    }
  return cuda_ok (cudaEventCreate (ev), "creating an event", error);
}

/* Adds the time of every timed product to matmul_seconds; waits for those
 * not finished (none right after a sync of the compute stream). */
static void
timers_collect (CudaCtx *c)
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

static gboolean
timer_start (CudaCtx *c, Timer *t, GError **error)
{
  /* Bounded, for callers that never sync (a long run of products). */
  if (c->timers->len >= MAX_PENDING_TIMERS)
    timers_collect (c);
  if (!timer_event (c, &t->start, error))
    return FALSE;
  if (!timer_event (c, &t->end, error))
    {
      g_array_append_val (c->spare_events, t->start);
      return FALSE;
    }
  if (!cuda_ok (cudaEventRecord (t->start, c->stream), "timing a product", error))
    {
      g_array_append_val (c->spare_events, t->start);
      g_array_append_val (c->spare_events, t->end);
      return FALSE;
    }
  return TRUE;
}

/* A failed product is not counted. */
static void
timer_end (CudaCtx *c, Timer *t, gboolean ok)
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
  scratch_release (c, &c->act_half);
  scratch_release (c, &c->tiles[0]);
  scratch_release (c, &c->tiles[1]);
  scratch_release (c, &c->index);
  scratch_release (c, &c->att_scores);
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
    blas.destroy (c->handle);
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
  void *p = dev_alloc (c, bytes, "a buffer", error);
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
      /* The dequant stream too: after a failed product it may still read
       * a weight in this buffer (a streaming slot). */
      cudaStreamSynchronize (c->stream);
      cudaStreamSynchronize (c->dequant_stream);
      dev_free (c, buf->ptr, buf->bytes);
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
  return cuda_ok (cudaMemcpyAsync ((char *) dst->ptr + offset, src, bytes, cudaMemcpyHostToDevice, c->stream),
                  "uploading", error)
         && (!copy_is_async (src) || cuda_ok (cudaStreamSynchronize (c->stream), "uploading", error));
}

static gboolean
cuda_buf_download (UmBackend *be, UmBuf *src, size_t offset, void *dst, size_t bytes, GError **error)
{
  CudaCtx *c = CTX (be);
  if (!um_backend_check_copy ("cuda", src->bytes, offset, bytes, error))
    return FALSE;
  if (bytes == 0)
    return TRUE;
  if (!cuda_ok (cudaMemcpyAsync (dst, (char *) src->ptr + offset, bytes, cudaMemcpyDeviceToHost, c->stream),
                "downloading", error)
      || !cuda_ok (cudaStreamSynchronize (c->stream), "waiting for the GPU", error))
    return FALSE;
  timers_collect (c);
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
  return cuda_ok (cudaSetDevice (c->device), "selecting the device", error)
         && cuda_ok (cudaMemcpyAsync ((char *) dst->ptr + offset, src, bytes, cudaMemcpyHostToDevice,
                                      c->copy_stream), "uploading a weight slot", error)
         && cuda_ok (cudaStreamSynchronize (c->copy_stream), "uploading a weight slot", error);
}

/* The dequant stream's work is followed by products that wait for it, but
 * not after a failure in between: wait for it too (idle, it costs nothing). */
static gboolean
cuda_sync (UmBackend *be, GError **error)
{
  CudaCtx *c = CTX (be);
  if (!cuda_ok (cudaStreamSynchronize (c->stream), "waiting for the GPU", error)
      || !cuda_ok (cudaStreamSynchronize (c->dequant_stream), "waiting for the GPU", error))
    return FALSE;
  timers_collect (c);
  return TRUE;
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
  timers_collect (c);
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
        return cuda_ok (cudaMemcpyAsync (dst, src, bytes, cudaMemcpyHostToDevice, c->copy_stream),
                        "uploading a weight", error)
               && cuda_ok (cudaStreamSynchronize (c->copy_stream), "uploading a weight", error);
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
              ok = cuda_ok (cudaMemcpy ((char *) dst + off, tmp, len, cudaMemcpyHostToDevice), "uploading a weight",
                            error);
            }
          return ok;
        }
    }
  while (ok && off < bytes)
    {
      size_t len = MIN ((size_t) STAGE_BYTES, bytes - off);
      /* The copy that last read this buffer. */
      ok = !used[b] || cuda_ok (cudaEventSynchronize (c->stage_done[b]), "uploading a weight", error);
      if (!ok)
        break;
      if (to_f16)
        bf16_to_f16 (c->stage[b], (const char *) src + off, len / 2);
      else
        memcpy (c->stage[b], (const char *) src + off, len);
      ok = cuda_ok (cudaMemcpyAsync ((char *) dst + off, c->stage[b], len, cudaMemcpyHostToDevice, c->copy_stream),
                    "uploading a weight", error)
           && cuda_ok (cudaEventRecord (c->stage_done[b], c->copy_stream), "uploading a weight", error);
      used[b] = TRUE;
      off += len;
      b ^= 1;
    }
  /* Also after a failure: no copy may still read the buffers. */
  if (cudaStreamSynchronize (c->copy_stream) != cudaSuccess)
    ok = ok && cuda_ok (cudaGetLastError (), "uploading a weight", error);
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
  void *p = dev_alloc (c, bytes, what, error);

  if (p == NULL)
    return NULL;
  if (bytes > 0 && !upload_staged (c, p, w->data, bytes, to_f16, error))
    {
      dev_free (c, p, bytes);
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
      cudaStreamSynchronize (c->stream);
      cudaStreamSynchronize (c->dequant_stream);
      dev_free (c, w->dev, w->bytes);
      c->weight_bytes -= w->bytes;
    }
  g_free (w);
}

static gboolean
cuda_embed (UmBackend *be, const UmDevWeight *table, const gint32 *ids, int n, UmBuf *out, GError **error)
{
  CudaCtx *c = CTX (be);
  const int32_t *d_ids;

  for (int i = 0; i < n; i++)
    if (ids[i] < 0 || (uint64_t) ids[i] >= table->w.rows)
      {
        g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                     "token id %d is outside the vocabulary (%" G_GUINT64_FORMAT ")", ids[i], table->w.rows);
        return FALSE;
      }
  d_ids = upload_index (c, ids, n, error);
  return d_ids != NULL
         && cuda_ok (um_cuda_embed (table->w.dtype, table->dev, table->w.row_bytes, table->w.cols, d_ids, n,
                                    out->ptr, c->stream), "embedding", error);
}

static gboolean
cuda_get_rows (UmBackend *be, UmBuf *src, int dim, const gint32 *rows, int n, UmBuf *out, GError **error)
{
  CudaCtx *c = CTX (be);
  const int32_t *d_rows = upload_index (c, rows, n, error);
  return d_rows != NULL
         && cuda_ok (um_cuda_get_rows (src->ptr, dim, d_rows, n, out->ptr, c->stream), "gathering rows", error);
}

static gboolean
cuda_rms_norm (UmBackend *be, UmBuf *x, int rows, int dim, const UmDevWeight *w, float eps, UmBuf *out,
               GError **error)
{
  /* The kernel reads floats: a norm weight stored otherwise (or short) would
   * be read as garbage, or past its end. */
  if (w->w.dtype != UM_DTYPE_F32 || w->w.rows * w->w.cols < (guint64) MAX (dim, 0))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "cuda: norm weight “%s” is not %d F32 values",
                   w->w.name, dim);
      return FALSE;
    }
  return cuda_ok (um_cuda_rms_norm (x->ptr, rows, dim, w->dev, eps, out->ptr, CTX (be)->stream), "RMSNorm", error);
}

static gboolean
cuda_rope (UmBackend *be, UmBuf *x, int rows, const gint32 *pos, int n_heads, int head_dim, int rope_dim,
           double theta, gboolean interleaved, GError **error)
{
  CudaCtx *c = CTX (be);
  const int32_t *d_pos;

  if (!um_backend_check_rope_dim ("cuda", head_dim, rope_dim, error))
    return FALSE;
  d_pos = upload_index (c, pos, rows, error);
  return d_pos != NULL
         && cuda_ok (um_cuda_rope (x->ptr, rows, d_pos, n_heads, head_dim, rope_dim, theta, interleaved, c->stream),
                     "RoPE", error);
}

static gboolean
cuda_attention (UmBackend *be, UmBuf *q, int nq, const gint32 *q_seq, const gint32 *q_kv_len, UmBuf *k, UmBuf *v,
                int seq_len, int n_heads, int n_kv_heads, int head_dim, UmBuf *out, GError **error)
{
  CudaCtx *c = CTX (be);
  UmCudaAttnBlas ab = { blas.set_stream, blas.gemm_strided_batched_ex, blas.status_string };
  const int32_t *d_idx, *d_kv_len = NULL;
  size_t bytes;

  if (!um_backend_check_kv_len ("cuda", q_kv_len, nq, seq_len, error))
    return FALSE;
  if (c->exact_attention)
    {
      d_idx = upload_index_values (c, q_seq, q_kv_len, nq, error);
      return d_idx != NULL
             && cuda_ok (um_cuda_attention (q->ptr, nq, d_idx, q_kv_len != NULL ? d_idx + nq : NULL, k->ptr, v->ptr,
                                            seq_len, n_heads, n_kv_heads, head_dim, out->ptr, c->stream),
                         "attention", error);
    }
  /* The mask's copy on the device, for the softmax between the products. */
  if (q_kv_len != NULL && (d_kv_len = upload_index (c, q_kv_len, nq, error)) == NULL)
    return FALSE;
  /* Tensor cores: TF32 products over tiles of queries with our softmax
   * between (gpu/um-cuda-attention-tc.c); the score buffer is bounded
   * (64 MiB) whatever the canvas. */
  bytes = um_cuda_attention_tc_scratch_bytes (nq, seq_len, n_heads, n_kv_heads, head_dim);
  if (!scratch_ensure (c, &c->att_scores, bytes, error))
    return FALSE;
  return um_cuda_attention_tc (&ab, c->handle, c->stream, q->ptr, nq, q_seq, q_kv_len, d_kv_len, k->ptr, v->ptr,
                               seq_len, n_heads, n_kv_heads, head_dim, out->ptr, c->att_scores.ptr, bytes, error);
}

static gboolean
cuda_swiglu (UmBackend *be, UmBuf *gate, UmBuf *up, size_t n, UmBuf *out, GError **error)
{
  return cuda_ok (um_cuda_swiglu (gate->ptr, up->ptr, n, out->ptr, CTX (be)->stream), "SwiGLU", error);
}

static gboolean
cuda_add (UmBackend *be, UmBuf *x, UmBuf *y, size_t n, GError **error)
{
  return cuda_ok (um_cuda_add (x->ptr, y->ptr, n, CTX (be)->stream), "add", error);
}

/* Whether @buf holds @rows rows of @dim floats; an error naming @what if not
 * (a kernel would write past the buffer's end). */
static gboolean
check_rows (UmBuf *buf, int64_t rows, int dim, const char *what, GError **error)
{
  if ((guint64) rows * (guint64) dim > buf->bytes / sizeof (float))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "cuda: %s: %" G_GINT64_FORMAT " rows of %d floats do not fit a buffer of %zu bytes", what, rows,
                   dim, buf->bytes);
      return FALSE;
    }
  return TRUE;
}

static gboolean
cuda_add_bias (UmBackend *be, UmBuf *x, int rows, int dim, const UmDevWeight *bias, GError **error)
{
  if (rows <= 0 || dim <= 0)
    return TRUE;
  /* As for the norms: the kernel reads @dim floats. */
  if (bias->w.dtype != UM_DTYPE_F32 || bias->w.rows * bias->w.cols < (guint64) dim)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "cuda: bias “%s” is not %d F32 values", bias->w.name, dim);
      return FALSE;
    }
  return check_rows (x, rows, dim, "adding a bias", error)
         && cuda_ok (um_cuda_add_bias (x->ptr, rows, dim, bias->dev, CTX (be)->stream), "adding a bias", error);
}

static gboolean
cuda_add_rows_scaled (UmBackend *be, UmBuf *dst, int dim, const gint32 *rows, const float *scale, int n,
                      UmBuf *src, GError **error)
{
  CudaCtx *c;
  const int32_t *d_rows;
  int64_t dst_rows;

  if (n <= 0 || dim <= 0)
    return TRUE;
  if (!check_rows (src, n, dim, "adding rows", error))
    return FALSE;
  /* Checked here, not on the device: a row past dst would be a write into
   * another buffer. */
  dst_rows = (int64_t) (dst->bytes / sizeof (float) / (size_t) dim);
  for (int i = 0; i < n; i++)
    if (rows[i] < 0 || rows[i] >= dst_rows)
      {
        g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                     "cuda: adding rows: row %d is outside a buffer of %" G_GINT64_FORMAT " rows", rows[i], dst_rows);
        return FALSE;
      }
  c = CTX (be);
  d_rows = upload_index_values (c, rows, scale, n, error);
  return d_rows != NULL
         && cuda_ok (um_cuda_add_rows_scaled (dst->ptr, dim, d_rows, (const float *) (d_rows + n), n, src->ptr,
                                              c->stream), "adding rows", error);
}

/* out[m, N] (row-major) = x[m, K] · Wᵀ. In cuBLAS's column-major terms:
 * outᵀ (N × m, ld N) = op(W) · xᵀ with W stored as a K × N column-major
 * matrix (op = T) and xᵀ as K × m (op = N). */
static gboolean
gemm (CudaCtx *c, const void *w, cudaDataType wtype, int n, int k, const void *x, cudaDataType xtype, int m,
      float *out, int ldo, GError **error)
{
  const float one = 1.0f, zero = 0.0f;
  return blas_ok (blas.gemm_ex (c->handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w, wtype, k, x, xtype, k,
                                &zero, out, CUDA_R_32F, ldo, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  "matrix product", error);
}

/* A weight cuBLAS cannot take as stored, multiplied in tiles of rows
 * dequantized to @type (F16, or F32 for fp32 activations) on the dequant
 * stream into the two tile buffers in turn, each multiplied on the compute
 * stream once ready: tile i + 2 is dequantized while tile i is multiplied.
 * The same tiles and products as one buffer in series: the same results. */
typedef struct {
  const UmDevWeight *dw;
  UmCudaOutType      type;
  int64_t            tile_rows;
  int64_t            n_tiles;
} Tiles;

static gboolean
tiles_begin (CudaCtx *c, const UmDevWeight *dw, UmCudaOutType type, Tiles *t, GError **error)
{
  const int64_t n = dw->w.rows, k = dw->w.cols;
  const size_t elt = type == UM_CUDA_OUT_F32 ? 4 : 2;
  size_t bytes;

  t->dw = dw;
  t->type = type;
  /* F32 tiles have half the rows: the same memory either way. */
  t->tile_rows = um_cuda_tile_rows (n, k, TILE_ELEMS * 2 / elt);
  t->n_tiles = (n + t->tile_rows - 1) / t->tile_rows;
  bytes = (size_t) t->tile_rows * k * elt;
  return scratch_ensure (c, &c->tiles[0], bytes, error) && scratch_ensure (c, &c->tiles[1], bytes, error)
         /* What the ops before wrote (a weight uploaded into a buffer on
          * the compute stream) and read (the tiles, by the last product)
          * first. */
         && cuda_ok (cudaEventRecord (c->product_start, c->stream), "ordering the GPU streams", error)
         && cuda_ok (cudaStreamWaitEvent (c->dequant_stream, c->product_start, 0), "ordering the GPU streams",
                     error);
}

/* Queues the dequantization of tile @i into tiles[i % 2]. */
static gboolean
tiles_dequant (CudaCtx *c, const Tiles *t, int64_t i, GError **error)
{
  const UmWeight *w = &t->dw->w;
  const int b = (int) (i & 1);
  const int64_t r0 = i * t->tile_rows, nr = MIN (t->tile_rows, (int64_t) w->rows - r0);

  if (i >= t->n_tiles)
    return TRUE;
  /* tiles[b] was last read by the product of tile i − 2. */
  return (i < 2 || cuda_ok (cudaStreamWaitEvent (c->dequant_stream, c->tile_free[b], 0), "ordering the GPU streams",
                            error))
         && cuda_ok (um_cuda_dequant_rows (w->dtype, (const char *) t->dw->dev + r0 * w->row_bytes, w->row_bytes, nr,
                                           w->cols, c->tiles[b].ptr, t->type, c->dequant_stream), "dequantizing",
                     error)
         && cuda_ok (cudaEventRecord (c->tile_ready[b], c->dequant_stream), "ordering the GPU streams", error);
}

/* out[rows, n] = x · Wᵀ with x in @t's type, tiles 0 and 1 already queued
 * by tiles_dequant. */
static gboolean
tiles_multiply (CudaCtx *c, const Tiles *t, const void *x, int rows, float *out, GError **error)
{
  const UmWeight *w = &t->dw->w;
  const cudaDataType type = t->type == UM_CUDA_OUT_F32 ? CUDA_R_32F : CUDA_R_16F;

  for (int64_t i = 0; i < t->n_tiles; i++)
    {
      const int b = (int) (i & 1);
      const int64_t r0 = i * t->tile_rows, nr = MIN (t->tile_rows, (int64_t) w->rows - r0);
      if (!cuda_ok (cudaStreamWaitEvent (c->stream, c->tile_ready[b], 0), "ordering the GPU streams", error)
          || !gemm (c, c->tiles[b].ptr, type, (int) nr, (int) w->cols, x, type, rows, out + r0, (int) w->rows, error)
          || !cuda_ok (cudaEventRecord (c->tile_free[b], c->stream), "ordering the GPU streams", error)
          || !tiles_dequant (c, t, i + 2, error))
        return FALSE;
    }
  return TRUE;
}

/* The fp32 path: x as it is, the weight dequantized to f32 tiles. */
static gboolean
matmul_f32_tiles (CudaCtx *c, const UmDevWeight *dw, const float *x, int rows, float *out, GError **error)
{
  Tiles t;
  return tiles_begin (c, dw, UM_CUDA_OUT_F32, &t, error) && tiles_dequant (c, &t, 0, error)
         && tiles_dequant (c, &t, 1, error) && tiles_multiply (c, &t, x, rows, out, error);
}

/* Converts x to f16 in act_half and says whether every value fit: one wait
 * for the GPU per product (the conversion, not the products queued before
 * it, is what the host waits for last), since whether the product may run
 * on f16 must be known before it is queued. */
static gboolean
activations_to_f16 (CudaCtx *c, const float *x, size_t n, gboolean *fits, GError **error)
{
  const gint serial = g_atomic_int_get (&c->op_serial);

  if (c->act_valid && c->act_src == x && c->act_n == n && serial == c->act_serial + 1)
    {
      c->act_serial = serial;
      *fits = c->act_fits;
      return TRUE;
    }
  c->act_valid = FALSE;
  if (!scratch_ensure (c, &c->act_half, n * 2, error)
      || !cuda_ok (cudaMemsetAsync (c->range_flag, 0, sizeof (int), c->stream), "converting activations", error)
      || !cuda_ok (um_cuda_convert_f32_checked (x, n, c->act_half.ptr, UM_CUDA_OUT_F16, c->range_flag, c->stream),
                   "converting activations", error)
      || !cuda_ok (cudaMemcpyAsync (c->range_flag_host, c->range_flag, sizeof (int), cudaMemcpyDeviceToHost,
                                    c->stream), "converting activations", error)
      || !cuda_ok (cudaEventRecord (c->range_done, c->stream), "converting activations", error)
      || !cuda_ok (cudaEventSynchronize (c->range_done), "waiting for the GPU", error))
    return FALSE;
  *fits = *(volatile int *) c->range_flag_host == 0;
  c->act_valid = TRUE;
  c->act_src = x;
  c->act_n = n;
  c->act_serial = serial;
  c->act_fits = *fits;
  return TRUE;
}

/* F32 weights: exact fp32. F16 weights (and BF16 ones uploaded as F16,
 * every value being exact there): f16 activations, fp32 accumulation.
 * Quantized: f16 tiles × f16 activations; the first two tiles are queued
 * before the range check, so the GPU dequantizes while the host waits for
 * it. Whenever an activation does not fit f16 (|x| > 65504, or not finite)
 * the product is done with fp32 activations and the weight dequantized to
 * f32 instead, like the CPU, rather than giving inf or NaN rows; BF16
 * weights not exact in f16 always take that path (bf16 activations would
 * round 8× coarser than f16). */
static gboolean
matmul_product (CudaCtx *c, const float *x, int rows, const UmDevWeight *dw, float *out, GError **error)
{
  const UmWeight *w = &dw->w;
  const int n = w->rows, k = w->cols;
  const gboolean quantized = w->dtype != UM_DTYPE_F16 && w->dtype != UM_DTYPE_BF16;
  gboolean fits = FALSE;
  Tiles t;

  if (w->dtype == UM_DTYPE_F32)
    return gemm (c, dw->dev, CUDA_R_32F, n, k, x, CUDA_R_32F, rows, out, n, error);
  /* UNMASK_CUDA_EXACT_PRODUCTS: the CPU's exact products (the weight
   * dequantized to f32, fp32 activations), e.g. to check against it. */
  if (w->dtype == UM_DTYPE_BF16 || c->exact_products)
    return matmul_f32_tiles (c, dw, x, rows, out, error);
  if (quantized
      && (!tiles_begin (c, dw, UM_CUDA_OUT_F16, &t, error) || !tiles_dequant (c, &t, 0, error)
          || !tiles_dequant (c, &t, 1, error)))
    return FALSE;
  if (!activations_to_f16 (c, x, (size_t) rows * k, &fits, error))
    return FALSE;
  if (!fits)
    {
      /* The tiles queued above are overwritten in stream order. */
      g_debug ("cuda: “%s”: an activation does not fit f16; product in fp32", w->name);
      return matmul_f32_tiles (c, dw, x, rows, out, error);
    }
  if (!quantized)
    return gemm (c, dw->dev, CUDA_R_16F, n, k, c->act_half.ptr, CUDA_R_16F, rows, out, n, error);
  return tiles_multiply (c, &t, c->act_half.ptr, rows, out, error);
}

static gboolean
cuda_matmul (UmBackend *be, UmBuf *x, int rows, const UmDevWeight *dw, UmBuf *out, GError **error)
{
  CudaCtx *c = CTX (be);
  Timer t;
  gboolean ok;

  if (rows == 0)
    return TRUE;
  if (dw->w.rows > G_MAXINT || dw->w.cols > G_MAXINT)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "cuda: weight “%s” is too large for one product",
                   dw->w.name);
      return FALSE;
    }
  if (!timer_start (c, &t, error))
    return FALSE;
  ok = matmul_product (c, x->ptr, rows, dw, out->ptr, error);
  timer_end (c, &t, ok);
  /* An output over the converted input makes its conversion stale. */
  if (!ok || ((const char *) out->ptr < (const char *) x->ptr + x->bytes
              && (const char *) x->ptr < (const char *) out->ptr + out->bytes))
    c->act_valid = FALSE;
  return ok;
}

/* The device sampler (gpu/um-cuda-sample.cu): only an id and a confidence
 * per row cross the bus, not the row's logits. */
#include "um-cuda-sample.h"

/* The positions in and the ids and confidences out share the index
 * scratch: [positions | ids | confidences, 8-byte aligned]. */
static gboolean
cuda_choose (UmBackend *be, UmBuf *logits, int rows, int vocab, const UmChooseRule *rule, const gint32 *positions,
             gint32 *out_ids, double *out_conf, GError **error)
{
  CudaCtx *c = CTX (be);
  const size_t ids_bytes = (size_t) MAX (rows, 0) * sizeof (int32_t);
  const size_t conf_at = (2 * ids_bytes + 7) / 8 * 8;
  const size_t in_rows = (size_t) MAX (rows, 0) * (rule->cfg_scale > 0.0 ? 2 : 1);
  char *d;

  if (rows <= 0)
    return TRUE;
  if (!um_backend_check_copy ("cuda", logits->bytes, 0, in_rows * vocab * sizeof (float), error)
      || !scratch_ensure (c, &c->index, conf_at + (size_t) rows * sizeof (double), error)
      || !cuda_ok (cudaMemcpyAsync (c->index.ptr, positions, ids_bytes, cudaMemcpyHostToDevice, c->stream),
                   "copying positions", error))
    return FALSE;
  d = c->index.ptr;
  return cuda_ok (um_cuda_choose (logits->ptr, rows, vocab, rule, (const int32_t *) d, (int32_t *) (d + ids_bytes),
                                  (double *) (d + conf_at), c->stream), "choosing tokens", error)
         && cuda_ok (cudaMemcpyAsync (out_ids, d + ids_bytes, ids_bytes, cudaMemcpyDeviceToHost, c->stream),
                     "downloading tokens", error)
         && cuda_ok (cudaMemcpyAsync (out_conf, d + conf_at, (size_t) rows * sizeof (double), cudaMemcpyDeviceToHost,
                                      c->stream), "downloading confidences", error)
         && cuda_ok (cudaStreamSynchronize (c->stream), "waiting for the GPU", error);
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
  .embed = cuda_embed,
  .get_rows = cuda_get_rows,
  .rms_norm = cuda_rms_norm,
  .matmul = cuda_matmul,
  .rope = cuda_rope,
  .attention = cuda_attention,
  .swiglu = cuda_swiglu,
  .add = cuda_add,
  .add_bias = cuda_add_bias,
  .add_rows_scaled = cuda_add_rows_scaled,
  .choose = cuda_choose,
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

UmBackend *
um_backend_cuda_new (int device, guint64 budget_bytes, GError **error)
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
  if (!cuda_ok (cudaGetDeviceProperties (&prop, device), "querying the device", error))
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
  if (!load_cublas (error)
      || !cuda_ok (cudaSetDevice (device), "selecting the device", error)
      || !cuda_ok (cudaFree (NULL), "creating the CUDA context", error))
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
  if (!cuda_ok (cudaMemGetInfo (&free_ctx, &total_b), "querying memory", error))
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
  c->spare_events = g_array_new (FALSE, FALSE, sizeof (cudaEvent_t));
  /* cuBLAS's recommended workspace: 32 MiB from Hopper on, 4 MiB before. */
  c->workspace_bytes = blas.set_workspace != NULL ? (prop.major >= 9 ? 32u << 20 : 4u << 20) : 0;
  be = g_new0 (UmBackend, 1);
  be->ops = &cuda_ops;
  be->ctx = c;
  if (!cuda_ok (cudaStreamCreateWithFlags (&c->stream, cudaStreamNonBlocking), "creating a stream", error)
      || !cuda_ok (cudaStreamCreateWithFlags (&c->copy_stream, cudaStreamNonBlocking), "creating a stream", error)
      || !cuda_ok (cudaStreamCreateWithFlags (&c->dequant_stream, cudaStreamNonBlocking), "creating a stream", error)
      || !cuda_ok (cudaEventCreateWithFlags (&c->tile_ready[0], cudaEventDisableTiming), "creating an event", error)
      || !cuda_ok (cudaEventCreateWithFlags (&c->tile_ready[1], cudaEventDisableTiming), "creating an event", error)
      || !cuda_ok (cudaEventCreateWithFlags (&c->tile_free[0], cudaEventDisableTiming), "creating an event", error)
      || !cuda_ok (cudaEventCreateWithFlags (&c->tile_free[1], cudaEventDisableTiming), "creating an event", error)
      || !cuda_ok (cudaEventCreateWithFlags (&c->product_start, cudaEventDisableTiming), "creating an event", error)
      || !cuda_ok (cudaEventCreateWithFlags (&c->range_done, cudaEventDisableTiming), "creating an event", error)
      || !cuda_ok (cudaEventCreateWithFlags (&c->stage_done[0], cudaEventDisableTiming), "creating an event", error)
      || !cuda_ok (cudaEventCreateWithFlags (&c->stage_done[1], cudaEventDisableTiming), "creating an event", error)
      || !cuda_ok (cudaMalloc ((void **) &c->range_flag, sizeof (int)), "allocating the range flag", error)
      || !cuda_ok (cudaHostAlloc ((void **) &c->range_flag_host, sizeof (int), cudaHostAllocDefault),
                   "allocating the range flag", error)
      || !blas_ok (blas.create (&c->handle), "creating a handle", error)
      /* Before the workspace: setting the stream resets it to cuBLAS's pool. */
      || !blas_ok (blas.set_stream (c->handle, c->stream), "setting the stream", error)
      || (c->workspace_bytes > 0
          && (!cuda_ok (cudaMalloc (&c->workspace, c->workspace_bytes), "allocating the cuBLAS workspace", error)
              || !blas_ok (blas.set_workspace (c->handle, c->workspace, c->workspace_bytes),
                           "setting the workspace", error)))
      /* No TF32 shortcuts: F32 weights get true fp32 products. */
      || !blas_ok (blas.set_math_mode (c->handle, CUBLAS_DEFAULT_MATH), "setting the math mode", error)
      || !cuda_ok (cudaMemGetInfo (&free_init, &total_b), "querying memory", error))
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
  c->budget = budget_bytes ? budget_bytes : (free_init > DEFAULT_MARGIN ? free_init - DEFAULT_MARGIN : 0);
  g_debug ("cuda: device %d: context ≈ %.1f MiB (at most %.1f MiB), cuBLAS handle and workspace %.1f MiB, "
           "budget %.1f MiB", device, ctx_est / 1048576.0, ctx_upper / 1048576.0, own / 1048576.0,
           c->budget / 1048576.0);
  return be;
}

/* um-cuda-private.h — what the CUDA backend's files share (gpu/um-cuda-*.c):
 * the context, buffers and weights as the backend holds them, cuBLAS's entry
 * points, and the helpers every op uses. Not for the engine: it sees the
 * backend through compute/um-backend.h only. */
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <glib.h>

#include "um-backend-cuda.h"
#include "um-cuda-attention.h"
#include "um-cuda-kernels.h"

G_BEGIN_DECLS

/* Dequantized weight tile: enough rows for tensor-core efficiency, bounded
 * memory whatever the weight. */
#ifndef UM_CUDA_TILE_ELEMS
#define UM_CUDA_TILE_ELEMS (32ull << 20)
#endif
/* Products timed but not yet read back: beyond this many, reading waits. */
#define MAX_PENDING_TIMERS 4096

/* ---- cuBLAS, opened at run time (um-cuda-blas.c) ---- */

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

typedef struct {
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
} UmCudaBlas;

extern UmCudaBlas um_cuda_blas;


gboolean um_cuda_load_cublas (GError **error);

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

/* ---- helpers (um-cuda-backend.c) ---- */

/* A CUDA or cuBLAS status as a GError naming @what; TRUE on success. */
gboolean       um_cuda_ok (cudaError_t e, const char *what, GError **error);
gboolean       um_cuda_blas_ok (cublasStatus_t s, const char *what, GError **error);
void          *um_cuda_dev_alloc (CudaCtx *c, size_t bytes, const char *what, GError **error);
void           um_cuda_dev_free (CudaCtx *c, void *p, size_t bytes);
void           um_cuda_scratch_release (CudaCtx *c, Scratch *s);
gboolean       um_cuda_scratch_ensure (CudaCtx *c, Scratch *s, size_t bytes, GError **error);
const int32_t *um_cuda_upload_index (CudaCtx *c, const gint32 *host, int n, GError **error);
const int32_t *um_cuda_upload_index_values (CudaCtx *c, const gint32 *host, const void *values, int n,
                                            GError **error);

/* ---- device time (um-cuda-prof.c) ---- */

gboolean       um_cuda_timer_start (CudaCtx *c, Timer *t, GError **error);
void           um_cuda_timer_end (CudaCtx *c, Timer *t, gboolean ok);
void           um_cuda_timers_collect (CudaCtx *c);

/* ---- products (um-cuda-blas.c, um-cuda-matmul.c) ---- */

gboolean       um_cuda_gemm (CudaCtx *c, const void *w, cudaDataType wtype, int n, int k, const void *x,
                             cudaDataType xtype, int m, float *out, int ldo, GError **error);
gboolean       um_cuda_op_matmul (UmBackend *be, UmBuf *x, int rows, const UmDevWeight *dw, UmBuf *out,
                                  GError **error);

G_END_DECLS

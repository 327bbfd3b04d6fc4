/* um-cuda-private.h — what the CUDA backend's files share (gpu/um-cuda-*.c):
 * the context, buffers and weights as the backend holds them, cuBLAS's entry
 * points, and the helpers every op uses. Not for the engine: it sees the
 * backend through compute/um-backend.h only. */
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <glib.h>
#include <string.h>

#include "um-backend-cuda.h"
#include "um-cuda-attention.h"
#include "um-cuda-kernels.h"
#include "um-choose.h"

G_BEGIN_DECLS

/* Dequantized weight tile: enough rows for tensor-core efficiency, bounded
 * memory whatever the weight. */
#ifndef UM_CUDA_TILE_ELEMS
#define UM_CUDA_TILE_ELEMS (32ull << 20)
#endif
/* Range-check flags of the products of one pass (see um-cuda-matmul.c). */
#define UM_CUDA_FLAG_SLOTS 16384
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
  int         family;     /* UmKprofFamily */
  gboolean    product;    /* counted in matmul_seconds */
  gboolean    profiled;   /* counted in the kernel profile */
} Timer;

/* What the ops are doing to a segment (um-cuda-graph.c): NONE, none or
 * one run as usual; MEASURE, its first run, uploads counted; CAPTURE,
 * being recorded; REPLAY, being checked against its recording; SKIP, its
 * ops ignored (to be run again). */
typedef enum {
  UM_CUDA_SEG_NONE, UM_CUDA_SEG_MEASURE, UM_CUDA_SEG_CAPTURE, UM_CUDA_SEG_REPLAY, UM_CUDA_SEG_SKIP
} UmCudaSegMode;
typedef struct _UmCudaSegment UmCudaSegment;

/* A product's flag slot and its weight (by device address). */
typedef struct {
  int   slot;
  void *dev;
} UmCudaFlagged;

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
  gboolean       hard_cap;      /* the budget covers the overhead too (um_backend_cuda_new_capped) */
  guint64        in_use;
  guint64        peak;
  guint64        total;
  guint64        weight_bytes;
  guint64        n_allocs;
  guint64        fixed_overhead;
  guint64        scratch_bytes;
  /* The device's own view (cudaMemGetInfo), beside the accounting: total −
   * free once the context was made (other processes and our context), and
   * the most seen since, at allocations and reports. */
  guint64        used_at_start;
  guint64        used_peak_seen;
  guint64        context_estimate;   /* of fixed_overhead: the context, from its limits */
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
  gboolean       act_deferred;  /* ... checked at pass_end, in flag slot act_slot */
  int            act_slot;

  /* A pass's range checks: a flag per converted activation, on the device
   * and read back into pinned memory at pass_end; which weight's product
   * used which slot; the weights found to need fp32 activations (device
   * address → itself). */
  gboolean       in_pass;
  int           *flags;
  int           *flags_host;
  int            n_flag_slots;
  GArray        *flagged;       /* UmCudaFlagged */
  GHashTable    *fp32_weights;

  /* Recorded segments (um-cuda-graph.c): key → UmCudaSegment; the one in
   * progress, what its ops do, how far its replay has checked and staged;
   * scratch_epoch counts scratch reallocations (recordings older than it
   * read freed memory). */
  GHashTable    *segments;
  gboolean       graphs_off;
  UmCudaSegMode  seg_mode;
  UmCudaSegment *seg;
  guint          seg_pos;
  size_t         seg_off;
  guint          seg_flagged_at;  /* flagged's length when the recording began */
  guint64        scratch_epoch;
  UmCudaGraphStats graph_stats;

  /* The mixture-of-experts layers' device tables of matrix pointers (um-cuda-experts.c). */
  GHashTable    *mat_tables;

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

/* A product's events (its device time, and its family's in the profile). */
gboolean       um_cuda_timer_start (CudaCtx *c, Timer *t, GError **error);
void           um_cuda_timer_end (CudaCtx *c, Timer *t, gboolean ok);
void           um_cuda_timers_collect (CudaCtx *c);
/* Any other op's events while the kernel profile is on: begin says whether
 * it started a timer, which end files under @family (UmKprofFamily) unless
 * the op failed. */
gboolean       um_cuda_prof_begin (CudaCtx *c, Timer *t);
void           um_cuda_prof_end (CudaCtx *c, Timer *t, gboolean started, int family, gboolean ok);
#define UM_CUDA_PROF_BEGIN(c) Timer prof_t_; const gboolean prof_on_ = um_cuda_prof_begin ((c), &prof_t_)
#define UM_CUDA_PROF_END(c, family, ok) um_cuda_prof_end ((c), &prof_t_, prof_on_, (family), (ok))
/* Whether events may be recorded around ops now (not while a graph is
 * being recorded or replayed: um-cuda-graph.c). */
gboolean       um_cuda_timing_allowed (CudaCtx *c);

/* ---- products (um-cuda-blas.c, um-cuda-matmul.c) ---- */

gboolean       um_cuda_gemm (CudaCtx *c, const void *w, cudaDataType wtype, int n, int k, const void *x,
                             cudaDataType xtype, int m, float *out, int ldo, GError **error);
gboolean       um_cuda_op_matmul (UmBackend *be, UmBuf *x, int rows, const UmDevWeight *dw, UmBuf *out,
                                  GError **error);
gboolean       um_cuda_pass_begin (UmBackend *be, GError **error);
gboolean       um_cuda_pass_end (UmBackend *be, gboolean *redo, GError **error);

/* ---- the other ops, as the vtable's (um-cuda-ops.c) ---- */

gboolean um_cuda_op_embed (UmBackend *be, const UmDevWeight *table, const gint32 *ids, int n, UmBuf *out,
                           GError **error);
gboolean um_cuda_op_get_rows (UmBackend *be, UmBuf *src, int dim, const gint32 *rows, int n, UmBuf *out,
                              GError **error);
gboolean um_cuda_op_rms_norm (UmBackend *be, UmBuf *x, int rows, int dim, const UmDevWeight *w, float eps,
                              UmBuf *out, GError **error);
gboolean um_cuda_op_add_rms_norm (UmBackend *be, UmBuf *x, UmBuf *y, int rows, int dim, const UmDevWeight *w,
                                  float eps, UmBuf *out, GError **error);
gboolean um_cuda_op_rope (UmBackend *be, UmBuf *x, int rows, const gint32 *pos, int n_heads, int head_dim,
                          int rope_dim, double theta, gboolean interleaved, GError **error);
gboolean um_cuda_op_attention (UmBackend *be, UmBuf *q, int nq, const gint32 *q_seq, const gint32 *q_kv_len,
                               UmBuf *k, UmBuf *v, int seq_len, int n_heads, int n_kv_heads, int head_dim,
                               UmBuf *out, GError **error);
gboolean um_cuda_op_swiglu (UmBackend *be, UmBuf *gate, UmBuf *up, size_t n, UmBuf *out, GError **error);
gboolean um_cuda_op_add (UmBackend *be, UmBuf *x, UmBuf *y, size_t n, GError **error);
gboolean um_cuda_op_add_bias (UmBackend *be, UmBuf *x, int rows, int dim, const UmDevWeight *bias,
                              GError **error);
gboolean um_cuda_op_add_rows_scaled (UmBackend *be, UmBuf *dst, int dim, const gint32 *rows, const float *scale,
                                     int n, UmBuf *src, GError **error);
gboolean um_cuda_op_choose (UmBackend *be, UmBuf *logits, int rows, int vocab, const UmChooseRule *rule,
                            const gint32 *positions, gint32 *out_ids, double *out_conf, GError **error);
gboolean um_cuda_check_rows (UmBuf *buf, int64_t rows, int dim, const char *what, GError **error);

/* ---- mixtures of experts (um-cuda-experts.c) ---- */

void     um_cuda_experts_init (CudaCtx *c);
void     um_cuda_experts_free (CudaCtx *c);
gboolean um_cuda_op_moe (UmBackend *be, UmBuf *x, UmBuf *h, int n, UmBuf *logits, const UmDevWeight *bias,
                         const UmModelConfig *cfg, int E, int F, UmDevWeight *const *experts, UmBuf *work,
                         GError **error);
gboolean um_cuda_op_expert_ffn (UmBackend *be, UmBuf *h, const gint32 *rows, int n, UmDevWeight *const *w, int F,
                                UmBuf *work, UmBuf *out, GError **error);

/* ---- recorded work (um-cuda-graph.c) ---- */

/* What an op is, as the first word of its signature. */
typedef enum {
  UM_CUDA_OP_EMBED = 1, UM_CUDA_OP_GET_ROWS, UM_CUDA_OP_RMS_NORM, UM_CUDA_OP_ROPE, UM_CUDA_OP_ATTENTION,
  UM_CUDA_OP_ATTENTION_EXACT, UM_CUDA_OP_SWIGLU, UM_CUDA_OP_ADD, UM_CUDA_OP_ADD_BIAS, UM_CUDA_OP_ADD_ROWS_SCALED,
  UM_CUDA_OP_MATMUL, UM_CUDA_OP_UPLOAD, UM_CUDA_OP_MOE, UM_CUDA_OP_EXPERT_FFN, UM_CUDA_OP_ADD_RMS_NORM,
  UM_CUDA_OP_ROPE_QK,
} UmCudaOp;

void     um_cuda_graphs_init (CudaCtx *c);
void     um_cuda_graphs_free (CudaCtx *c);
gboolean um_cuda_segment_begin (UmBackend *be, guint64 key, GError **error);
gboolean um_cuda_segment_end (UmBackend *be, gboolean failed, gboolean *redo, GError **error);
/* Stops the recording or replay in progress (@why for the debug log): the
 * rest of the segment is skipped and it runs again. */
void     um_cuda_segment_abort (CudaCtx *c, const char *why);
gboolean um_backend_is_cuda (UmBackend *be);

/* Every op that queues work calls this first with its signature (the op,
 * then its device pointers and sizes: what must be the same for a recorded
 * graph to do the same work). TRUE: queue it (now, or into the graph being
 * recorded); FALSE: do not, a recorded graph replays it (or the segment is
 * being skipped, to be run again). */
gboolean um_cuda_issue (CudaCtx *c, const guint64 *sig, gsize n);
#define UM_CUDA_ISSUE(c, ...) \
  um_cuda_issue ((c), (const guint64[]) { __VA_ARGS__ }, sizeof ((const guint64[]) { __VA_ARGS__ }) / sizeof (guint64))
#define UM_CUDA_P(p) ((guint64) (uintptr_t) (p))
static inline guint64
UM_CUDA_F (double x)
{
  guint64 u;
  memcpy (&u, &x, sizeof u);
  return u;
}
/* FNV-1a of @bytes at @p: host data a signature depends on. */
guint64  um_cuda_hash (const void *p, size_t bytes);
/* Whether the host may wait for the GPU now (not while recording or
 * replaying a segment: then the segment is marked to run again, and the
 * caller skips its work). */
gboolean um_cuda_host_sync_allowed (CudaCtx *c, const char *what);

G_END_DECLS

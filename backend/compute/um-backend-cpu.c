/* um-backend-cpu.c — the CPU compute backend: buffers are host memory under
 * the same hard budget a GPU would impose, so memory plans and out-of-memory
 * paths are exercised without a GPU. */
#include "um-backend.h"

#include <string.h>

#include "um-cpu-kernels.h"
#include "um-enum.h"
#include "um-gemm.h"
#include "um-error.h"
#include "um-kprof.h"
#include "um-quant.h"
#include "um-pool.h"

struct _UmBuf {
  float   *data;
  size_t   bytes;
  gboolean view;     /* part of another buffer: owns nothing */
};

struct _UmDevWeight {
  UmWeight w;
  void    *aligned_copy;   /* only for F32 data a file left unaligned */
  size_t   counted;        /* bytes this weight adds to in_use */
};

typedef struct {
  uint64_t     budget;
  uint64_t     in_use;
  uint64_t     peak;
  uint64_t     weight_bytes;
  guint64      n_allocs;
  UmProducts   products;
  UmCpuScratch scratch;
  UmCpuRopeTable rope[UM_CPU_ROPE_TABLES];
} CpuCtx;

#define CPU_CTX(be) ((CpuCtx *) (be)->ctx)

/* The kernel profile (um-kprof.h): the clock is read only while it is on. */
#define KPROF_BEGIN int64_t kprof_t0 = um_kprof_on ? um_kprof_now () : 0
#define KPROF_END(family) \
  G_STMT_START { if (um_kprof_on) um_kprof_add ((family), um_kprof_now () - kprof_t0); } G_STMT_END

static void
cpu_destroy (UmBackend *be)
{
  um_cpu_scratch_clear (&CPU_CTX (be)->scratch);
  for (int i = 0; i < UM_CPU_ROPE_TABLES; i++)
    um_cpu_rope_table_clear (&CPU_CTX (be)->rope[i]);
  g_free (be->ctx);
  g_free (be);
}

static void
cpu_mem_info (UmBackend *be, UmBackendMemInfo *info)
{
  CpuCtx *c = CPU_CTX (be);
  memset (info, 0, sizeof *info);
  info->budget = c->budget;
  info->in_use = c->in_use;
  info->peak = c->peak;
  info->n_allocs = c->n_allocs;
  info->weight_bytes = c->weight_bytes;
  info->overhead = c->scratch.bytes;
}

/* Takes @bytes of the budget, or says why not. */
static gboolean
charge (CpuCtx *c, size_t bytes, const char *what, GError **error)
{
  /* A budget of 0 is no limit on the CPU. */
  if (c->budget != 0 && !um_backend_budget_check ("cpu", "memory", c->budget, c->in_use, bytes, what, error))
    return FALSE;
  c->in_use += bytes;
  c->peak = MAX (c->peak, c->in_use);
  return TRUE;
}

static UmBuf *
cpu_buf_alloc (UmBackend *be, size_t bytes, GError **error)
{
  CpuCtx *c = CPU_CTX (be);
  UmBuf *buf;

  if (!charge (c, bytes, "a buffer", error))
    return NULL;
  buf = g_new0 (UmBuf, 1);
  /* 64-byte aligned for vector loads; try_ so a huge request fails softly. */
  if (bytes > 0 && posix_memalign ((void **) &buf->data, 64, bytes) != 0)
    {
      g_free (buf);
      c->in_use -= bytes;
      g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY,
                   "cpu: out of memory allocating %.1f MiB", bytes / 1048576.0);
      return NULL;
    }
  buf->bytes = bytes;
  c->n_allocs++;
  return buf;
}

static void
cpu_buf_free (UmBackend *be, UmBuf *buf)
{
  if (buf == NULL)
    return;
  if (!buf->view)
    {
      CPU_CTX (be)->in_use -= buf->bytes;
      free (buf->data);
    }
  g_free (buf);
}

static UmBuf *
cpu_buf_view (UmBackend *be, UmBuf *parent, size_t offset, size_t bytes, GError **error)
{
  UmBuf *buf;
  if (!um_backend_check_copy ("cpu", parent->bytes, offset, bytes, error))
    return NULL;
  buf = g_new0 (UmBuf, 1);
  buf->data = (float *) ((guint8 *) parent->data + offset);
  buf->bytes = bytes;
  buf->view = TRUE;
  return buf;
}

static gboolean
cpu_buf_upload (UmBackend *be, UmBuf *dst, size_t offset, const void *src, size_t bytes, GError **error)
{
  KPROF_BEGIN;

  if (!um_backend_check_copy ("cpu", dst->bytes, offset, bytes, error))
    return FALSE;
  memcpy ((guint8 *) dst->data + offset, src, bytes);
  KPROF_END (UM_KPROF_COPIES);
  return TRUE;
}

static gboolean
cpu_buf_download (UmBackend *be, UmBuf *src, size_t offset, void *dst, size_t bytes, GError **error)
{
  KPROF_BEGIN;

  if (!um_backend_check_copy ("cpu", src->bytes, offset, bytes, error))
    return FALSE;
  memcpy (dst, (guint8 *) src->data + offset, bytes);
  KPROF_END (UM_KPROF_COPIES);
  return TRUE;
}

/* Weights stay where the model mapped them; nothing is copied, except F32
 * data at an unaligned offset (safetensors headers are normally padded, so
 * this is rare), which sgemm must not read in place. Either way the bytes
 * count as this backend's device memory, as they would on a GPU: that is
 * what lets a budget on the CPU stand in for a small GPU. */
static UmDevWeight *
cpu_weight_load (UmBackend *be, const UmWeight *w, GError **error)
{
  g_autofree UmDevWeight *dw = g_new0 (UmDevWeight, 1);
  CpuCtx *c = CPU_CTX (be);
  size_t bytes = w->rows * w->row_bytes;
  g_autofree char *what = g_strdup_printf ("weight “%s”", w->name);

  dw->w = *w;
  if (!charge (c, bytes, what, error))
    return NULL;
  if (w->dtype == UM_DTYPE_F32 && ((uintptr_t) w->data % sizeof (float)) != 0)
    {
      if (posix_memalign (&dw->aligned_copy, 64, MAX (bytes, 1)) != 0)
        {
          c->in_use -= bytes;
          g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY,
                       "cpu: no memory to align weight “%s” (%.1f MiB)", w->name, bytes / 1048576.0);
          return NULL;
        }
      memcpy (dw->aligned_copy, w->data, bytes);
      dw->w.data = dw->aligned_copy;
    }
  dw->counted = bytes;
  c->weight_bytes += bytes;
  return g_steal_pointer (&dw);
}

static UmDevWeight *
cpu_weight_view (UmBackend *be, UmBuf *buf, size_t offset, const UmWeight *meta, GError **error)
{
  UmDevWeight *dw;

  if (!um_backend_check_copy ("cpu", buf->bytes, offset, meta->rows * meta->row_bytes, error))
    return NULL;
  dw = g_new0 (UmDevWeight, 1);
  dw->w = *meta;
  dw->w.data = (guint8 *) buf->data + offset;
  return dw;
}

static void
cpu_weight_free (UmBackend *be, UmDevWeight *w)
{
  CPU_CTX (be)->in_use -= w->counted;
  CPU_CTX (be)->weight_bytes -= w->counted;
  free (w->aligned_copy);
  g_free (w);
}

static void *
cpu_host_alloc (UmBackend *be, size_t bytes, GError **error)
{
  void *p = NULL;
  if (posix_memalign (&p, 64, MAX (bytes, 1)) != 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY,
                   "cpu: out of host memory for a weight store of %.1f MiB", bytes / 1048576.0);
      return NULL;
    }
  return p;
}

static void
cpu_host_free (UmBackend *be, void *ptr, size_t bytes)
{
  free (ptr);
}

/* memcpy is safe from any thread: the caller keeps @dst out of use. */
static gboolean
cpu_copy_upload (UmBackend *be, UmBuf *dst, size_t offset, const void *src, size_t bytes, GError **error)
{
  /* Not cpu_buf_upload: this runs on the copy thread, which the kernel
   * profile (one thread's sums) must not see. */
  if (!um_backend_check_copy ("cpu", dst->bytes, offset, bytes, error))
    return FALSE;
  memcpy ((guint8 *) dst->data + offset, src, bytes);
  return TRUE;
}

static gboolean
cpu_sync (UmBackend *be, GError **error)
{
  return TRUE;
}

typedef struct {
  const UmWeight *w;
  const gint32 *ids;
  float *out;
  guint8 *rows;     /* one row's bytes per thread */
} EmbedJob;

static void
embed_rows (void *ctx, int64_t b, int64_t e, int tid)
{
  const EmbedJob *j = ctx;
  const UmWeight *w = j->w;
  guint8 *row = j->rows + (size_t) tid * w->row_bytes;

  for (int64_t i = b; i < e; i++)
    {
      um_tensor_data_read ((const guint8 *) w->data + (uint64_t) j->ids[i] * w->row_bytes, w->row_bytes, row);
      um_quant_dequantize_row (w->dtype, row, j->out + (size_t) i * w->cols, w->cols);
    }
}

static gboolean
cpu_embed (UmBackend *be, const UmDevWeight *table, const gint32 *ids, int n, UmBuf *out, GError **error)
{
  const UmWeight *w = &table->w;
  KPROF_BEGIN;

  for (int i = 0; i < n; i++)
    if (ids[i] < 0 || (uint64_t) ids[i] >= w->rows)
      {
        g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                     "token id %d is outside the vocabulary (%" G_GUINT64_FORMAT ")", ids[i], w->rows);
        return FALSE;
      }
  /* Rows are read from the file, not through the mapping: touching a row
   * maps the kernel's whole large folio around it (up to 2 MiB), and a
   * canvas of distinct tokens would hold much of the table in RAM. */
  {
    int threads = (uint64_t) n * w->cols >= 32768 ? um_pool_max_threads () : 1;
    g_autofree guint8 *rows = g_malloc ((size_t) threads * w->row_bytes);
    EmbedJob job = { w, ids, out->data, rows };
    um_pool_for (n, MAX (1, n / (4 * threads)), threads, embed_rows, &job);
  }
  KPROF_END (UM_KPROF_COPIES);
  return TRUE;
}

static gboolean
cpu_get_rows (UmBackend *be, UmBuf *src, int dim, const gint32 *rows, int n, UmBuf *out, GError **error)
{
  KPROF_BEGIN;

  for (int i = 0; i < n; i++)
    memcpy (out->data + (size_t) i * dim, src->data + (size_t) rows[i] * dim, dim * sizeof (float));
  KPROF_END (UM_KPROF_COPIES);
  return TRUE;
}

static gboolean
cpu_rms_norm (UmBackend *be, UmBuf *x, int rows, int dim, const UmDevWeight *w, float eps, UmBuf *out,
              GError **error)
{
  KPROF_BEGIN;

  um_cpu_rms_norm (x->data, rows, dim, w->w.data, eps, out->data);
  KPROF_END (UM_KPROF_RMSNORM);
  return TRUE;
}

static gboolean
cpu_matmul (UmBackend *be, UmBuf *x, int rows, const UmDevWeight *w, UmBuf *out, GError **error)
{
  KPROF_BEGIN;
  gboolean ok = um_cpu_matmul (x->data, rows, &w->w, out->data, &CPU_CTX (be)->scratch, CPU_CTX (be)->products, error);

  KPROF_END (um_kprof_in_head () ? UM_KPROF_HEAD : UM_KPROF_MATMUL);
  return ok;
}

static gboolean
cpu_rope (UmBackend *be, UmBuf *x, int rows, const gint32 *pos, int n_heads, int head_dim, int rope_dim,
          double theta, gboolean interleaved, GError **error)
{
  if (!um_backend_check_rope_dim ("cpu", head_dim, rope_dim, error))
    return FALSE;
  KPROF_BEGIN;

  um_cpu_rope_cached (CPU_CTX (be)->rope, x->data, rows, pos, n_heads, head_dim, rope_dim, theta, interleaved);
  KPROF_END (UM_KPROF_ROPE);
  return TRUE;
}

static gboolean
cpu_attention (UmBackend *be, UmBuf *q, int nq, const gint32 *q_seq, const gint32 *q_kv_len, UmBuf *k,
               UmBuf *v, int seq_len, int n_heads, int n_kv_heads, int head_dim, UmBuf *out, GError **error)
{
  if (!um_backend_check_kv_len ("cpu", q_kv_len, nq, seq_len, error))
    return FALSE;
  um_cpu_attention (q->data, nq, q_seq, q_kv_len, k->data, v->data, seq_len, n_heads, n_kv_heads, head_dim,
                    out->data);
  return TRUE;
}

static gboolean
cpu_swiglu (UmBackend *be, UmBuf *gate, UmBuf *up, size_t n, UmBuf *out, GError **error)
{
  KPROF_BEGIN;

  um_cpu_swiglu (gate->data, up->data, n, out->data);
  KPROF_END (UM_KPROF_ELEMENTWISE);
  return TRUE;
}

static gboolean
cpu_add (UmBackend *be, UmBuf *x, UmBuf *y, size_t n, GError **error)
{
  KPROF_BEGIN;

  um_cpu_add (x->data, y->data, n);
  KPROF_END (UM_KPROF_ELEMENTWISE);
  return TRUE;
}

static gboolean
cpu_add_bias (UmBackend *be, UmBuf *x, int rows, int dim, const UmDevWeight *bias, GError **error)
{
  KPROF_BEGIN;

  um_cpu_add_bias (x->data, rows, dim, (const float *) bias->w.data);
  KPROF_END (UM_KPROF_ELEMENTWISE);
  return TRUE;
}

static gboolean
cpu_add_rows_scaled (UmBackend *be, UmBuf *dst, int dim, const gint32 *rows, const float *scale, int n,
                     UmBuf *src, GError **error)
{
  KPROF_BEGIN;

  um_cpu_add_rows_scaled (dst->data, dim, rows, scale, n, src->data);
  KPROF_END (UM_KPROF_ELEMENTWISE);
  return TRUE;
}

static const UmBackendOps cpu_ops = {
  .name = "cpu",
  .weights_in_place = TRUE,
  .destroy = cpu_destroy,
  .mem_info = cpu_mem_info,
  .buf_alloc = cpu_buf_alloc,
  .buf_free = cpu_buf_free,
  .buf_view = cpu_buf_view,
  .buf_upload = cpu_buf_upload,
  .buf_download = cpu_buf_download,
  .weight_load = cpu_weight_load,
  .weight_free = cpu_weight_free,
  .weight_view = cpu_weight_view,
  .host_alloc = cpu_host_alloc,
  .host_free = cpu_host_free,
  .copy_upload = cpu_copy_upload,
  .sync = cpu_sync,
  .embed = cpu_embed,
  .get_rows = cpu_get_rows,
  .rms_norm = cpu_rms_norm,
  .matmul = cpu_matmul,
  .rope = cpu_rope,
  .attention = cpu_attention,
  .swiglu = cpu_swiglu,
  .add = cpu_add,
  .add_bias = cpu_add_bias,
  .add_rows_scaled = cpu_add_rows_scaled,
};

UmBackend *
um_backend_cpu_new (uint64_t budget_bytes, int n_threads, GError **error)
{
  UmBackend *be = g_new0 (UmBackend, 1);
  CpuCtx *c = g_new0 (CpuCtx, 1);

  c->budget = budget_bytes;
  c->products = UM_PRODUCTS_EXACT;
  be->ops = &cpu_ops;
  be->ctx = c;
  if (n_threads >= 0)
    um_cpu_set_threads (n_threads);
  return be;
}

static const char *const products_names[] = { "exact", "auto", "int8" };

UM_ENUM_STRINGS (UmProducts, um_products_to_string, um_products_from_string, products_names, TRUE)

gboolean
um_products_auto_int8 (UmDType t)
{
  /* Every already-lossy quantized type, Q8_0 included, as llama.cpp does:
   * see um-backend.h and docs/cpu-avx2.md for what it costs. */
  return um_qgemm_supported_type (t);
}

void
um_backend_cpu_set_products (UmBackend *be, UmProducts products)
{
  g_return_if_fail (be != NULL && be->ops == &cpu_ops);
  CPU_CTX (be)->products = products;
}

UmProducts
um_backend_cpu_get_products (UmBackend *be)
{
  g_return_val_if_fail (be != NULL && be->ops == &cpu_ops, UM_PRODUCTS_EXACT);
  return CPU_CTX (be)->products;
}

/* um-cuda-experts.c — the CUDA backend's mixture-of-experts ops: a layer's
 * routed experts routed, grouped and multiplied on the device (moe), and
 * one expert over given rows with the same kernels (expert_ffn, for
 * experts fetched into slots). See um-cuda-moe.h for the arithmetic. */
#include "um-cuda-private.h"

#include "um-cuda-moe.h"
#include "um-error.h"
#include "um-kprof.h"

/* A layer's experts as a device table of 3·E matrix pointers, made once
 * (and again if the weights move) per host array of the layer's weights. */
typedef struct {
  int    n;          /* 3·E */
  void **host;       /* the device addresses the table was made of */
  void **dev;
} MatTable;

static void
mat_table_free (gpointer data)
{
  MatTable *t = data;
  if (t->dev != NULL)
    cudaFree (t->dev);
  (void) cudaGetLastError ();
  g_free (t->host);
  g_free (t);
}

void
um_cuda_experts_init (CudaCtx *c)
{
  c->mat_tables = g_hash_table_new_full (NULL, NULL, NULL, mat_table_free);
}

void
um_cuda_experts_free (CudaCtx *c)
{
  g_clear_pointer (&c->mat_tables, g_hash_table_unref);
}

static void *const *
mat_table (CudaCtx *c, UmDevWeight *const *experts, int n, GError **error)
{
  MatTable *t = g_hash_table_lookup (c->mat_tables, experts);
  gboolean same = t != NULL && t->n == n;

  for (int i = 0; same && i < n; i++)
    same = t->host[i] == experts[i]->dev;
  if (same)
    return (void *const *) t->dev;
  /* Made outside any recording (an allocation and a synchronous copy). */
  um_cuda_segment_abort (c, "a table of experts is made");
  t = g_new0 (MatTable, 1);
  t->n = n;
  t->host = g_new (void *, n);
  for (int i = 0; i < n; i++)
    t->host[i] = experts[i]->dev;
  if (!um_cuda_ok (cudaMalloc ((void **) &t->dev, (size_t) n * sizeof (void *)), "allocating a table of experts",
                   error)
      || !um_cuda_ok (cudaMemcpy (t->dev, t->host, (size_t) n * sizeof (void *), cudaMemcpyHostToDevice),
                      "copying a table of experts", error))
    {
      mat_table_free (t);
      return NULL;
    }
  c->scratch_bytes += (guint64) n * sizeof (void *);
  g_hash_table_replace (c->mat_tables, (gpointer) experts, t);
  return (void *const *) t->dev;
}

/* The three matrices of an expert as the kernels take them: gate and up of
 * one type and row size, every expert alike. */
static gboolean
check_mats (UmDevWeight *const *w, int n_experts, int D, int F, GError **error)
{
  for (int e = 0; e < n_experts; e++)
    {
      const UmWeight *g = &w[3 * e]->w, *u = &w[3 * e + 1]->w, *d = &w[3 * e + 2]->w;
      const UmWeight *g0 = &w[0]->w, *d0 = &w[2]->w;
      if (g->dtype != u->dtype || g->row_bytes != u->row_bytes || g->dtype != g0->dtype
          || g->row_bytes != g0->row_bytes || d->dtype != d0->dtype || d->row_bytes != d0->row_bytes
          || (int) g->rows != F || (int) u->rows != F || (int) g->cols != D || (int) u->cols != D
          || (int) d->rows != D || (int) d->cols != F || !um_cuda_moe_type_ok (g->dtype)
          || !um_cuda_moe_type_ok (d->dtype))
        {
          g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                       "cuda: expert %d's matrices (“%s”, %s) are not of the shapes and types the experts' "
                       "products take", e, g->name, um_dtype_name (g->dtype));
          return FALSE;
        }
    }
  return TRUE;
}

gboolean
um_cuda_op_moe (UmBackend *be, UmBuf *x, UmBuf *h, int n, UmBuf *logits, const UmDevWeight *bias,
                const UmModelConfig *cfg, int E, int F, UmDevWeight *const *experts, UmBuf *work, GError **error)
{
  CudaCtx *c = CTX (be);
  const int D = cfg->d_model, k = cfg->n_experts_used;
  const UmCudaMoeRule rule = {
    E, k, cfg->router_func == UM_ROUTER_SIGMOID, cfg->router_norm, cfg->router_scale, (int) cfg->n_expert_groups,
    (int) cfg->n_groups_used,
  };
  void *const *mats;
  UmMoeWork w;
  gboolean ok;

  if (n <= 0)
    return TRUE;
  if (E <= 0 || E > UM_CUDA_MOE_MAX_EXPERTS || k <= 0 || k > 16 || k > E || cfg->n_expert_groups > 64)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "cuda: %d experts, %d per token: more than the device "
                   "routing takes", E, k);
      return FALSE;
    }
  if (bias != NULL && (bias->w.dtype != UM_DTYPE_F32 || bias->w.rows * bias->w.cols < (guint64) E))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "cuda: selection bias “%s” is not %d F32 values",
                   bias->w.name, E);
      return FALSE;
    }
  if (!check_mats (experts, E, D, F, error)
      || !um_cuda_check_rows (x, n, D, "the experts' residual", error)
      || !um_cuda_check_rows (h, n, D, "the experts' input", error)
      || !um_cuda_check_rows (logits, n, E, "the router's logits", error))
    return FALSE;
  if (um_moe_work_layout (n, E, k, D, F, NULL, NULL) > work->bytes)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "cuda: the experts' work buffer of %zu bytes is short",
                   work->bytes);
      return FALSE;
    }
  um_moe_work_layout (n, E, k, D, F, work->ptr, &w);
  if ((mats = mat_table (c, experts, 3 * E, error)) == NULL)
    return FALSE;
  if (!UM_CUDA_ISSUE (c, UM_CUDA_OP_MOE, UM_CUDA_P (x->ptr), UM_CUDA_P (h->ptr), n, UM_CUDA_P (logits->ptr),
                      UM_CUDA_P (bias != NULL ? bias->dev : NULL), E, F, k, UM_CUDA_P (mats), UM_CUDA_P (work->ptr),
                      um_cuda_hash (&rule, sizeof rule)))
    return TRUE;
  {
    UM_CUDA_PROF_BEGIN (c);
    ok = um_cuda_ok (um_cuda_moe_route (logits->ptr, bias != NULL ? bias->dev : NULL, n, &rule, &w, c->stream),
                     "routing to the experts", error);
    UM_CUDA_PROF_END (c, UM_KPROF_MOE, ok);
  }
  if (!ok)
    return FALSE;
  {
    UM_CUDA_PROF_BEGIN (c);
    ok = um_cuda_ok (um_cuda_moe_ffn (experts[0]->w.dtype, experts[0]->w.row_bytes, experts[2]->w.dtype,
                                      experts[2]->w.row_bytes, (const void *const *) mats, h->ptr, D, F, &w,
                                      c->stream), "the experts' products", error);
    UM_CUDA_PROF_END (c, UM_KPROF_MATMUL, ok);
  }
  if (!ok)
    return FALSE;
  {
    UM_CUDA_PROF_BEGIN (c);
    ok = um_cuda_ok (um_cuda_moe_combine (x->ptr, n, D, k, &w, c->stream), "adding the experts' outputs", error);
    UM_CUDA_PROF_END (c, UM_KPROF_MOE, ok);
  }
  return ok;
}

gboolean
um_cuda_op_expert_ffn (UmBackend *be, UmBuf *h, const gint32 *rows, int n, UmDevWeight *const *mw, int F,
                       UmBuf *work, UmBuf *out, GError **error)
{
  CudaCtx *c = CTX (be);
  const int D = mw[0]->w.cols;
  const int tiles = (n + UM_MOE_TILE_ROWS - 1) / UM_MOE_TILE_ROWS;
  /* One upload: [rows | tile experts | first rows | ends | 3 pointers, 8-byte aligned]. */
  const int ptr_at = (n + 3 * tiles + 1) / 2 * 2;
  g_autofree gint32 *idx = NULL;
  const int32_t *d;
  UmMoeWork w;
  gint64 h_rows;
  gboolean ok;

  if (n <= 0)
    return TRUE;
  if (!check_mats (mw, 1, D, F, error)
      || !um_cuda_check_rows (out, n, D, "an expert's output", error))
    return FALSE;
  h_rows = (gint64) (h->bytes / sizeof (float) / (size_t) D);
  for (int i = 0; i < n; i++)
    if (rows[i] < 0 || rows[i] >= h_rows)
      {
        g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "cuda: an expert's row %d is outside its input of %"
                     G_GINT64_FORMAT " rows", rows[i], h_rows);
        return FALSE;
      }
  if (um_moe_work_layout (n, 1, 1, D, F, NULL, NULL) > work->bytes)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "cuda: the experts' work buffer of %zu bytes is short",
                   work->bytes);
      return FALSE;
    }
  idx = g_new0 (gint32, ptr_at + 6);
  memcpy (idx, rows, (size_t) n * sizeof (gint32));
  for (int i = 0; i < tiles; i++)
    {
      idx[n + i] = 0;
      idx[n + tiles + i] = i * UM_MOE_TILE_ROWS;
      idx[n + 2 * tiles + i] = MIN (n, (i + 1) * UM_MOE_TILE_ROWS);
    }
  for (int i = 0; i < 3; i++)
    memcpy (idx + ptr_at + 2 * i, &mw[i]->dev, sizeof (void *));
  if ((d = um_cuda_upload_index (c, idx, ptr_at + 6, error)) == NULL)
    return FALSE;
  um_moe_work_layout (n, 1, 1, D, F, work->ptr, &w);
  w.y = out->ptr;
  w.slot_row = (int32_t *) d;
  w.tile_expert = (int32_t *) d + n;
  w.tile_row0 = (int32_t *) d + n + tiles;
  w.tile_row1 = (int32_t *) d + n + 2 * tiles;
  w.slots = n;
  w.max_tiles = tiles;
  if (!UM_CUDA_ISSUE (c, UM_CUDA_OP_EXPERT_FFN, UM_CUDA_P (h->ptr), UM_CUDA_P (d), n, UM_CUDA_P (mw[0]->dev),
                      UM_CUDA_P (mw[1]->dev), UM_CUDA_P (mw[2]->dev), F, UM_CUDA_P (work->ptr), UM_CUDA_P (out->ptr)))
    return TRUE;
  {
    UM_CUDA_PROF_BEGIN (c);
    ok = um_cuda_ok (um_cuda_moe_ffn (mw[0]->w.dtype, mw[0]->w.row_bytes, mw[2]->w.dtype, mw[2]->w.row_bytes,
                                      (const void *const *) (d + ptr_at), h->ptr, D, F, &w, c->stream),
                     "an expert's products", error);
    UM_CUDA_PROF_END (c, UM_KPROF_MATMUL, ok);
  }
  return ok;
}

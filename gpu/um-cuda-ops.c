/* um-cuda-ops.c — the CUDA backend's ops other than the products (those are
 * um-cuda-matmul.c's): each checks what the kernel cannot, uploads its small
 * host index arrays, says it is about to queue work (um_cuda_issue: a
 * recorded graph may replay it instead, um-cuda-graph.c) and queues its
 * kernel on the compute stream, between events while the kernel profile is
 * on. */
#include "um-cuda-private.h"

#include "um-cuda-sample.h"
#include "um-error.h"
#include "um-kprof.h"

gboolean
um_cuda_op_embed (UmBackend *be, const UmDevWeight *table, const gint32 *ids, int n, UmBuf *out, GError **error)
{
  CudaCtx *c = CTX (be);
  const int32_t *d_ids;
  gboolean ok;

  for (int i = 0; i < n; i++)
    if (ids[i] < 0 || (uint64_t) ids[i] >= table->w.rows)
      {
        g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                     "token id %d is outside the vocabulary (%" G_GUINT64_FORMAT ")", ids[i], table->w.rows);
        return FALSE;
      }
  if ((d_ids = um_cuda_upload_index (c, ids, n, error)) == NULL)
    return FALSE;
  if (!UM_CUDA_ISSUE (c, UM_CUDA_OP_EMBED, UM_CUDA_P (table->dev), UM_CUDA_P (d_ids), n, UM_CUDA_P (out->ptr)))
    return TRUE;
  {
    UM_CUDA_PROF_BEGIN (c);
    ok = um_cuda_ok (um_cuda_embed (table->w.dtype, table->dev, table->w.row_bytes, table->w.cols, d_ids, n,
                                    out->ptr, c->stream), "embedding", error);
    UM_CUDA_PROF_END (c, UM_KPROF_COPIES, ok);
  }
  return ok;
}

gboolean
um_cuda_op_get_rows (UmBackend *be, UmBuf *src, int dim, const gint32 *rows, int n, UmBuf *out, GError **error)
{
  CudaCtx *c = CTX (be);
  const int32_t *d_rows = um_cuda_upload_index (c, rows, n, error);
  gboolean ok;

  if (d_rows == NULL)
    return FALSE;
  if (!UM_CUDA_ISSUE (c, UM_CUDA_OP_GET_ROWS, UM_CUDA_P (src->ptr), dim, UM_CUDA_P (d_rows), n, UM_CUDA_P (out->ptr)))
    return TRUE;
  {
    UM_CUDA_PROF_BEGIN (c);
    ok = um_cuda_ok (um_cuda_get_rows (src->ptr, dim, d_rows, n, out->ptr, c->stream), "gathering rows", error);
    UM_CUDA_PROF_END (c, UM_KPROF_COPIES, ok);
  }
  return ok;
}

gboolean
um_cuda_op_rms_norm (UmBackend *be, UmBuf *x, int rows, int dim, const UmDevWeight *w, float eps, UmBuf *out,
                     GError **error)
{
  CudaCtx *c = CTX (be);
  gboolean ok;

  /* The kernel reads floats: a norm weight stored otherwise (or short) would
   * be read as garbage, or past its end. */
  if (w->w.dtype != UM_DTYPE_F32 || w->w.rows * w->w.cols < (guint64) MAX (dim, 0))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "cuda: norm weight “%s” is not %d F32 values",
                   w->w.name, dim);
      return FALSE;
    }
  if (!UM_CUDA_ISSUE (c, UM_CUDA_OP_RMS_NORM, UM_CUDA_P (x->ptr), rows, dim, UM_CUDA_P (w->dev), UM_CUDA_F (eps),
                      UM_CUDA_P (out->ptr)))
    return TRUE;
  {
    UM_CUDA_PROF_BEGIN (c);
    ok = um_cuda_ok (um_cuda_rms_norm (x->ptr, rows, dim, w->dev, eps, out->ptr, c->stream), "RMSNorm", error);
    UM_CUDA_PROF_END (c, UM_KPROF_RMSNORM, ok);
  }
  return ok;
}

gboolean
um_cuda_op_add_rms_norm (UmBackend *be, UmBuf *x, UmBuf *y, int rows, int dim, const UmDevWeight *w, float eps,
                         UmBuf *out, GError **error)
{
  CudaCtx *c = CTX (be);
  gboolean ok;

  if (w->w.dtype != UM_DTYPE_F32 || w->w.rows * w->w.cols < (guint64) MAX (dim, 0))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "cuda: norm weight “%s” is not %d F32 values",
                   w->w.name, dim);
      return FALSE;
    }
  if (!um_cuda_check_rows (x, rows, dim, "adding and normalising", error)
      || !um_cuda_check_rows (y, rows, dim, "adding and normalising", error)
      || !um_cuda_check_rows (out, rows, dim, "adding and normalising", error))
    return FALSE;
  if (!UM_CUDA_ISSUE (c, UM_CUDA_OP_ADD_RMS_NORM, UM_CUDA_P (x->ptr), UM_CUDA_P (y->ptr), rows, dim,
                      UM_CUDA_P (w->dev), UM_CUDA_F (eps), UM_CUDA_P (out->ptr)))
    return TRUE;
  {
    UM_CUDA_PROF_BEGIN (c);
    ok = um_cuda_ok (um_cuda_add_rms_norm (x->ptr, y->ptr, rows, dim, w->dev, eps, out->ptr, c->stream),
                     "adding and normalising", error);
    UM_CUDA_PROF_END (c, UM_KPROF_RMSNORM, ok);
  }
  return ok;
}

gboolean
um_cuda_op_rope (UmBackend *be, UmBuf *x, int rows, const gint32 *pos, int n_heads, int head_dim, int rope_dim,
                 double theta, gboolean interleaved, GError **error)
{
  CudaCtx *c = CTX (be);
  const int32_t *d_pos;
  gboolean ok;

  if (!um_backend_check_rope_dim ("cuda", head_dim, rope_dim, error))
    return FALSE;
  if ((d_pos = um_cuda_upload_index (c, pos, rows, error)) == NULL)
    return FALSE;
  if (!UM_CUDA_ISSUE (c, UM_CUDA_OP_ROPE, UM_CUDA_P (x->ptr), rows, UM_CUDA_P (d_pos), n_heads, head_dim, rope_dim,
                      UM_CUDA_F (theta), interleaved))
    return TRUE;
  {
    UM_CUDA_PROF_BEGIN (c);
    ok = um_cuda_ok (um_cuda_rope (x->ptr, rows, d_pos, n_heads, head_dim, rope_dim, theta, interleaved, c->stream),
                     "RoPE", error);
    UM_CUDA_PROF_END (c, UM_KPROF_ROPE, ok);
  }
  return ok;
}

/* Attention's steps in the profile: a timer around each product and each
 * softmax of the tensor-core path. */
typedef struct {
  CudaCtx *c;
  Timer    t;
  gboolean on;
} AttnProf;

static void
attn_step_begin (gpointer data)
{
  AttnProf *p = data;
  p->on = um_cuda_prof_begin (p->c, &p->t);
}

static void
attn_step_end (gpointer data, UmCudaAttnStepKind kind, gboolean ok)
{
  AttnProf *p = data;
  um_cuda_prof_end (p->c, &p->t, p->on,
                    kind == UM_CUDA_ATTN_SCORES ? UM_KPROF_ATTN_QK
                    : kind == UM_CUDA_ATTN_SOFTMAX ? UM_KPROF_SOFTMAX : UM_KPROF_ATTN_PV, ok);
}

gboolean
um_cuda_op_attention (UmBackend *be, UmBuf *q, int nq, const gint32 *q_seq, const gint32 *q_kv_len, UmBuf *k,
                      UmBuf *v, int seq_len, int n_heads, int n_kv_heads, int head_dim, UmBuf *out, GError **error)
{
  CudaCtx *c = CTX (be);
  /* The handle is on the compute stream since its creation: setting it
   * again would drop the workspace given to cuBLAS then (cuBLAS resets it
   * on every cublasSetStream), and a recorded graph must not allocate. */
  UmCudaAttnBlas ab = { NULL, um_cuda_blas.gemm_strided_batched_ex, um_cuda_blas.status_string };
  AttnProf prof = { c, { 0 }, FALSE };
  UmCudaAttnHooks hooks = { attn_step_begin, attn_step_end, &prof };
  const int32_t *d_idx, *d_kv_len = NULL;
  size_t bytes;
  gboolean ok;

  if (!um_backend_check_kv_len ("cuda", q_kv_len, nq, seq_len, error))
    return FALSE;
  if (c->exact_attention)
    {
      if ((d_idx = um_cuda_upload_index_values (c, q_seq, q_kv_len, nq, error)) == NULL)
        return FALSE;
      if (!UM_CUDA_ISSUE (c, UM_CUDA_OP_ATTENTION_EXACT, UM_CUDA_P (q->ptr), nq, UM_CUDA_P (d_idx),
                          q_kv_len != NULL, UM_CUDA_P (k->ptr), UM_CUDA_P (v->ptr), seq_len, n_heads, n_kv_heads,
                          head_dim, UM_CUDA_P (out->ptr)))
        return TRUE;
      /* One fused kernel: filed under the scores. */
      {
        UM_CUDA_PROF_BEGIN (c);
        ok = um_cuda_ok (um_cuda_attention (q->ptr, nq, d_idx, q_kv_len != NULL ? d_idx + nq : NULL, k->ptr, v->ptr,
                                            seq_len, n_heads, n_kv_heads, head_dim, out->ptr, c->stream),
                         "attention", error);
        UM_CUDA_PROF_END (c, UM_KPROF_ATTN_QK, ok);
      }
      return ok;
    }
  /* The mask's copy on the device, for the softmax between the products. */
  if (q_kv_len != NULL && (d_kv_len = um_cuda_upload_index (c, q_kv_len, nq, error)) == NULL)
    return FALSE;
  /* Tensor cores: TF32 products over tiles of queries with our softmax
   * between (gpu/um-cuda-attention-tc.c); the score buffer is bounded
   * (64 MiB) whatever the canvas. */
  bytes = um_cuda_attention_tc_scratch_bytes (nq, seq_len, n_heads, n_kv_heads, head_dim);
  if (!um_cuda_scratch_ensure (c, &c->att_scores, bytes, error))
    return FALSE;
  /* The query rows' sequences decide the plan's tiles: part of the
   * signature (a hash: they are host data, not uploaded). */
  if (!UM_CUDA_ISSUE (c, UM_CUDA_OP_ATTENTION, UM_CUDA_P (q->ptr), nq, um_cuda_hash (q_seq, nq * sizeof (gint32)),
                      q_kv_len != NULL ? um_cuda_hash (q_kv_len, nq * sizeof (gint32)) : 0, UM_CUDA_P (d_kv_len),
                      UM_CUDA_P (k->ptr), UM_CUDA_P (v->ptr), seq_len, n_heads, n_kv_heads, head_dim,
                      UM_CUDA_P (out->ptr), UM_CUDA_P (c->att_scores.ptr), bytes))
    return TRUE;
  return um_cuda_attention_tc (&ab, c->handle, c->stream, q->ptr, nq, q_seq, q_kv_len, d_kv_len, k->ptr, v->ptr,
                               seq_len, n_heads, n_kv_heads, head_dim, out->ptr, c->att_scores.ptr, bytes,
                               um_kprof_on ? &hooks : NULL, error);
}

gboolean
um_cuda_op_swiglu (UmBackend *be, UmBuf *gate, UmBuf *up, size_t n, UmBuf *out, GError **error)
{
  CudaCtx *c = CTX (be);
  gboolean ok;

  if (!UM_CUDA_ISSUE (c, UM_CUDA_OP_SWIGLU, UM_CUDA_P (gate->ptr), UM_CUDA_P (up->ptr), n, UM_CUDA_P (out->ptr)))
    return TRUE;
  {
    UM_CUDA_PROF_BEGIN (c);
    ok = um_cuda_ok (um_cuda_swiglu (gate->ptr, up->ptr, n, out->ptr, c->stream), "SwiGLU", error);
    UM_CUDA_PROF_END (c, UM_KPROF_ELEMENTWISE, ok);
  }
  return ok;
}

gboolean
um_cuda_op_add (UmBackend *be, UmBuf *x, UmBuf *y, size_t n, GError **error)
{
  CudaCtx *c = CTX (be);
  gboolean ok;

  if (!UM_CUDA_ISSUE (c, UM_CUDA_OP_ADD, UM_CUDA_P (x->ptr), UM_CUDA_P (y->ptr), n))
    return TRUE;
  {
    UM_CUDA_PROF_BEGIN (c);
    ok = um_cuda_ok (um_cuda_add (x->ptr, y->ptr, n, c->stream), "add", error);
    UM_CUDA_PROF_END (c, UM_KPROF_ELEMENTWISE, ok);
  }
  return ok;
}

/* Whether @buf holds @rows rows of @dim floats; an error naming @what if not
 * (a kernel would write past the buffer's end). */
gboolean
um_cuda_check_rows (UmBuf *buf, int64_t rows, int dim, const char *what, GError **error)
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

gboolean
um_cuda_op_add_bias (UmBackend *be, UmBuf *x, int rows, int dim, const UmDevWeight *bias, GError **error)
{
  CudaCtx *c;
  gboolean ok;

  if (rows <= 0 || dim <= 0)
    return TRUE;
  /* As for the norms: the kernel reads @dim floats. */
  if (bias->w.dtype != UM_DTYPE_F32 || bias->w.rows * bias->w.cols < (guint64) dim)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "cuda: bias “%s” is not %d F32 values", bias->w.name, dim);
      return FALSE;
    }
  if (!um_cuda_check_rows (x, rows, dim, "adding a bias", error))
    return FALSE;
  c = CTX (be);
  if (!UM_CUDA_ISSUE (c, UM_CUDA_OP_ADD_BIAS, UM_CUDA_P (x->ptr), rows, dim, UM_CUDA_P (bias->dev)))
    return TRUE;
  {
    UM_CUDA_PROF_BEGIN (c);
    ok = um_cuda_ok (um_cuda_add_bias (x->ptr, rows, dim, bias->dev, c->stream), "adding a bias", error);
    UM_CUDA_PROF_END (c, UM_KPROF_ELEMENTWISE, ok);
  }
  return ok;
}

gboolean
um_cuda_op_add_rows_scaled (UmBackend *be, UmBuf *dst, int dim, const gint32 *rows, const float *scale, int n,
                            UmBuf *src, GError **error)
{
  CudaCtx *c;
  const int32_t *d_rows;
  int64_t dst_rows;
  gboolean ok;

  if (n <= 0 || dim <= 0)
    return TRUE;
  if (!um_cuda_check_rows (src, n, dim, "adding rows", error))
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
  if ((d_rows = um_cuda_upload_index_values (c, rows, scale, n, error)) == NULL)
    return FALSE;
  if (!UM_CUDA_ISSUE (c, UM_CUDA_OP_ADD_ROWS_SCALED, UM_CUDA_P (dst->ptr), dim, UM_CUDA_P (d_rows), n,
                      UM_CUDA_P (src->ptr)))
    return TRUE;
  {
    UM_CUDA_PROF_BEGIN (c);
    ok = um_cuda_ok (um_cuda_add_rows_scaled (dst->ptr, dim, d_rows, (const float *) (d_rows + n), n, src->ptr,
                                              c->stream), "adding rows", error);
    UM_CUDA_PROF_END (c, UM_KPROF_ELEMENTWISE, ok);
  }
  return ok;
}

/* The device sampler (gpu/um-cuda-sample.cu): only an id and a confidence
 * per row cross the bus, not the row's logits. The positions in and the ids
 * and confidences out share the index scratch: [positions | ids |
 * confidences, 8-byte aligned]. It reads results back: never recorded. */
gboolean
um_cuda_op_choose (UmBackend *be, UmBuf *logits, int rows, int vocab, const UmChooseRule *rule,
                   const gint32 *positions, gint32 *out_ids, double *out_conf, GError **error)
{
  CudaCtx *c = CTX (be);
  const size_t ids_bytes = (size_t) MAX (rows, 0) * sizeof (int32_t);
  const size_t conf_at = (2 * ids_bytes + 7) / 8 * 8;
  const size_t in_rows = (size_t) MAX (rows, 0) * (rule->cfg_scale > 0.0 ? 2 : 1);
  gboolean ok;
  char *d;

  if (rows <= 0)
    return TRUE;
  if (!um_backend_check_copy ("cuda", logits->bytes, 0, in_rows * vocab * sizeof (float), error))
    return FALSE;
  if (!um_cuda_host_sync_allowed (c, "choosing tokens"))
    {
      memset (out_ids, 0, ids_bytes);
      memset (out_conf, 0, (size_t) rows * sizeof (double));
      return TRUE;
    }
  if (!um_cuda_scratch_ensure (c, &c->index, conf_at + (size_t) rows * sizeof (double), error)
      || !um_cuda_ok (cudaMemcpyAsync (c->index.ptr, positions, ids_bytes, cudaMemcpyHostToDevice, c->stream),
                      "copying positions", error))
    return FALSE;
  d = c->index.ptr;
  {
    UM_CUDA_PROF_BEGIN (c);
    ok = um_cuda_ok (um_cuda_choose (logits->ptr, rows, vocab, rule, (const int32_t *) d, (int32_t *) (d + ids_bytes),
                                     (double *) (d + conf_at), c->stream), "choosing tokens", error);
    UM_CUDA_PROF_END (c, UM_KPROF_CHOOSE, ok);
  }
  if (!ok)
    return FALSE;
  {
    UM_CUDA_PROF_BEGIN (c);
    ok = um_cuda_ok (cudaMemcpyAsync (out_ids, d + ids_bytes, ids_bytes, cudaMemcpyDeviceToHost, c->stream),
                     "downloading tokens", error)
         && um_cuda_ok (cudaMemcpyAsync (out_conf, d + conf_at, (size_t) rows * sizeof (double),
                                         cudaMemcpyDeviceToHost, c->stream), "downloading confidences", error);
    UM_CUDA_PROF_END (c, UM_KPROF_COPIES, ok);
  }
  if (!ok || !um_cuda_ok (cudaStreamSynchronize (c->stream), "waiting for the GPU", error))
    return FALSE;
  um_cuda_timers_collect (c);
  return TRUE;
}

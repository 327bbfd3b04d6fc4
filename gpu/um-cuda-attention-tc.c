/* um-cuda-attention-tc.c — attention on tensor cores: the plan of
 * um-attention-plan.c run as cuBLAS strided-batched TF32 products, with
 * um_cuda_attention_softmax () between them.  Scores exist for one tile of
 * queries at a time (all heads), never for the whole L×L of every head. */
#include "um-cuda-attention.h"

#include "um-attention-plan.h"
#include "um-error.h"

size_t
um_cuda_attention_tc_scratch_bytes (int nq, int seq_len, int n_heads, int n_kv_heads, int head_dim)
{
  int t;

  (void) n_kv_heads;
  (void) head_dim;
  if (nq <= 0 || seq_len <= 0 || n_heads <= 0)
    return 0;
  /* At least one row, even past the budget: attention must still run. */
  t = MAX (um_attention_plan_tile_rows (UM_CUDA_ATTENTION_SCORE_BYTES, nq, seq_len, n_heads), 1);
  return um_attention_plan_score_floats (t, seq_len, n_heads) * sizeof (float);
}

typedef struct {
  const UmCudaAttnBlas *blas;
  cublasHandle_t handle;
  cudaStream_t stream;
  const float *q, *k, *v;
  float *s, *out;
  const int32_t *kv_len;     /* device; NULL without a mask */
  const UmCudaAttnHooks *hooks;
  GError **error;
} Run;

static const float *
operand (const Run *r, const UmAttnOperand *o)
{
  switch (o->buf)
    {
    case UM_ATTN_BUF_Q:
      return r->q + o->off;
    case UM_ATTN_BUF_K:
      return r->k + o->off;
    case UM_ATTN_BUF_V:
      return r->v + o->off;
    case UM_ATTN_BUF_S:
      return r->s + o->off;
    case UM_ATTN_BUF_OUT:
    default:
      return r->out + o->off;
    }
}

static gboolean run_step_inner (const UmAttnStep *st, Run *r);

static gboolean
run_step (const UmAttnStep *st, gpointer user_data)
{
  Run *r = user_data;
  gboolean ok;

  if (r->hooks != NULL)
    r->hooks->begin (r->hooks->data);
  ok = run_step_inner (st, r);
  if (r->hooks != NULL)
    r->hooks->end (r->hooks->data,
                   st->kind == UM_ATTN_STEP_SOFTMAX ? UM_CUDA_ATTN_SOFTMAX
                   : st->c.buf == UM_ATTN_BUF_S ? UM_CUDA_ATTN_SCORES : UM_CUDA_ATTN_VALUES, ok);
  return ok;
}

static gboolean
run_step_inner (const UmAttnStep *st, Run *r)
{
  const float zero = 0.0f;
  cublasStatus_t bs;

  if (st->kind == UM_ATTN_STEP_SOFTMAX)
    {
      const int32_t *row_len = st->masked ? r->kv_len + st->q0 : NULL;
      cudaError_t e = um_cuda_attention_softmax (r->s + st->s_off, st->rows, st->len, row_len, st->q_rows,
                                                 r->stream);
      if (e == cudaSuccess)
        return TRUE;
      (void) cudaGetLastError ();
      g_set_error (r->error, UM_ERROR, e == cudaErrorMemoryAllocation ? UM_ERROR_OUT_OF_MEMORY : UM_ERROR_FAILED,
                   "cuda: attention softmax: %s", cudaGetErrorString (e));
      return FALSE;
    }

  /* The output operand is only ever S or out, both writable: the cast drops
   * the const operand () adds for the inputs. */
  bs = r->blas->gemm_strided_batched_ex (r->handle, st->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                         st->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, st->m, st->n, st->k, &st->alpha,
                                         operand (r, &st->a), CUDA_R_32F, st->a.ld, st->a.stride,
                                         operand (r, &st->b), CUDA_R_32F, st->b.ld, st->b.stride, &zero,
                                         (void *) operand (r, &st->c), CUDA_R_32F, st->c.ld, st->c.stride, st->batch,
                                         CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT);
  if (bs == CUBLAS_STATUS_SUCCESS)
    return TRUE;
  g_set_error (r->error, UM_ERROR, bs == CUBLAS_STATUS_ALLOC_FAILED ? UM_ERROR_OUT_OF_MEMORY : UM_ERROR_FAILED,
               "cublas: attention %s product (%d×%d×%d, batch %d): %s",
               st->c.buf == UM_ATTN_BUF_S ? "score" : "value", st->m, st->n, st->k, st->batch,
               r->blas->status_string ? r->blas->status_string (bs) : "error");
  return FALSE;
}

gboolean
um_cuda_attention_tc (const UmCudaAttnBlas *blas, cublasHandle_t handle, cudaStream_t stream,
                      const float *q, int nq, const gint32 *q_seq_host, const gint32 *q_kv_len_host,
                      const int32_t *q_kv_len_dev, const float *k, const float *v, int seq_len, int n_heads,
                      int n_kv_heads, int head_dim, float *out, float *scratch, size_t scratch_bytes,
                      const UmCudaAttnHooks *hooks, GError **error)
{
  Run r = { blas, handle, stream, q, k, v, scratch, out, q_kv_len_dev, hooks, error };
  cublasStatus_t bs;
  int tile;

  if (nq <= 0)
    return TRUE;
  if (blas == NULL || blas->gemm_strided_batched_ex == NULL || handle == NULL
      || q == NULL || q_seq_host == NULL || k == NULL || v == NULL || out == NULL || scratch == NULL
      || (q_kv_len_host != NULL && q_kv_len_dev == NULL)
      || seq_len <= 0 || head_dim <= 0 || n_heads <= 0 || n_kv_heads <= 0 || n_heads % n_kv_heads != 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FAILED,
                   "cuda: attention: invalid arguments (%d heads, %d kv heads, head size %d, length %d)",
                   n_heads, n_kv_heads, head_dim, seq_len);
      return FALSE;
    }
  for (int i = 0; i < nq; i++)
    if (q_seq_host[i] < 0)
      {
        g_set_error (error, UM_ERROR, UM_ERROR_FAILED, "cuda: attention: query row %d has sequence %d", i,
                     (int) q_seq_host[i]);
        return FALSE;
      }
  for (int i = 0; q_kv_len_host != NULL && i < nq; i++)
    if (q_kv_len_host[i] < 1 || q_kv_len_host[i] > seq_len)
      {
        g_set_error (error, UM_ERROR, UM_ERROR_FAILED, "cuda: attention: query row %d sees %d keys of %d", i,
                     (int) q_kv_len_host[i], seq_len);
        return FALSE;
      }
  tile = um_attention_plan_tile_rows (scratch_bytes, nq, seq_len, n_heads);
  if (tile == 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY,
                   "cuda: attention: a score buffer of %zu bytes holds no query row (%zu needed)", scratch_bytes,
                   um_attention_plan_score_floats (1, seq_len, n_heads) * sizeof (float));
      return FALSE;
    }
  bs = blas->set_stream != NULL ? blas->set_stream (handle, stream) : CUBLAS_STATUS_SUCCESS;
  if (bs != CUBLAS_STATUS_SUCCESS)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FAILED, "cublas: attention: setting the stream: %s",
                   blas->status_string ? blas->status_string (bs) : "error");
      return FALSE;
    }
  return um_attention_plan (nq, q_seq_host, q_kv_len_host, seq_len, n_heads, n_kv_heads, head_dim, tile, run_step,
                            &r);
}

/* um-attention-plan.c — the steps of attention on tensor cores (see the
 * header); pure index arithmetic, executed by the CUDA orchestration and by
 * tests/test-attention-plan.c. */
#include "um-attention-plan.h"

#include <math.h>

size_t
um_attention_plan_score_floats (int tile_rows, int seq_len, int n_heads)
{
  return (size_t) MAX (tile_rows, 0) * (size_t) MAX (seq_len, 0) * (size_t) MAX (n_heads, 0);
}

int
um_attention_plan_tile_rows (size_t score_bytes, int nq, int seq_len, int n_heads)
{
  const size_t row = um_attention_plan_score_floats (1, seq_len, n_heads) * sizeof (float);
  size_t t;

  if (nq <= 0 || row == 0)
    return 0;
  t = score_bytes / row;
  return (int) MIN (t, (size_t) nq);
}

typedef struct {
  int seq;                  /* the tile's sequence */
  int64_t i0;               /* its first query row */
  int t;                    /* its rows */
  int n;                    /* keys its widest row sees (the scores' ld) */
  gboolean masked;          /* some row sees fewer than n */
  int seq_len, n_heads, n_kv_heads, head_dim;
} Tile;

/* One product per batch of heads h0 + b·h_step, kv heads g0 + b·g_step. */
static void
scores_step (const Tile *tl, int h0, int h_step, int g0, int g_step, int batch, UmAttnStep *st)
{
  const int hd = tl->head_dim, qld = tl->n_heads * hd, kvld = tl->n_kv_heads * hd;
  const int64_t tile_scores = (int64_t) tl->t * tl->n;

  *st = (UmAttnStep) {
    .kind = UM_ATTN_STEP_GEMM,
    /* S_h (n × t) = Kᵀ (n × hd) · Q_h (hd × t) */
    .trans_a = TRUE, .trans_b = FALSE,
    .m = tl->n, .n = tl->t, .k = hd, .batch = batch,
    /* The scale as the scalar kernel and the CPU apply it: 1/sqrt(hd) on
     * the finished dot product (here in the product's epilogue). */
    .alpha = 1.0f / sqrtf ((float) hd),
    .a = { UM_ATTN_BUF_K, (int64_t) tl->seq * tl->seq_len * kvld + (int64_t) g0 * hd, kvld, (int64_t) g_step * hd },
    .b = { UM_ATTN_BUF_Q, tl->i0 * qld + (int64_t) h0 * hd, qld, (int64_t) h_step * hd },
    .c = { UM_ATTN_BUF_S, h0 * tile_scores, tl->n, h_step * tile_scores },
  };
}

static void
values_step (const Tile *tl, int h0, int h_step, int g0, int g_step, int batch, UmAttnStep *st)
{
  const int hd = tl->head_dim, qld = tl->n_heads * hd, kvld = tl->n_kv_heads * hd;
  const int64_t tile_scores = (int64_t) tl->t * tl->n;

  *st = (UmAttnStep) {
    .kind = UM_ATTN_STEP_GEMM,
    /* O_h (hd × t) = V (hd × n) · P_h (n × t) */
    .trans_a = FALSE, .trans_b = FALSE,
    .m = hd, .n = tl->t, .k = tl->n, .batch = batch,
    .alpha = 1.0f,
    .a = { UM_ATTN_BUF_V, (int64_t) tl->seq * tl->seq_len * kvld + (int64_t) g0 * hd, kvld, (int64_t) g_step * hd },
    .b = { UM_ATTN_BUF_S, h0 * tile_scores, tl->n, h_step * tile_scores },
    .c = { UM_ATTN_BUF_OUT, tl->i0 * qld + (int64_t) h0 * hd, qld, (int64_t) h_step * hd },
  };
}

static gboolean
plan_tile (const Tile *tl, UmAttnStepFunc func, gpointer user_data)
{
  const int grp = tl->n_heads / tl->n_kv_heads;
  /* Batch over whichever of (kv heads, heads within a group) is longer, so
   * that the calls are few: one without GQA. */
  const gboolean over_kv = grp <= tl->n_kv_heads;
  const int calls = over_kv ? grp : tl->n_kv_heads;
  UmAttnStep st;

  for (int pass = 0; pass < 2; pass++)
    {
      for (int c = 0; c < calls; c++)
        {
          if (over_kv)
            /* heads c, c + grp, c + 2·grp, …; kv heads 0, 1, 2, … */
            (pass == 0 ? scores_step : values_step) (tl, c, grp, 0, 1, tl->n_kv_heads, &st);
          else
            /* heads of kv head c; its K and V shared by the batch */
            (pass == 0 ? scores_step : values_step) (tl, c * grp, 1, c, 0, grp, &st);
          if (!func (&st, user_data))
            return FALSE;
        }
      if (pass == 0)
        {
          st = (UmAttnStep) {
            .kind = UM_ATTN_STEP_SOFTMAX,
            .rows = tl->t * tl->n_heads,
            .len = tl->n,
            .s_off = 0,
            .masked = tl->masked,
            .q0 = tl->i0,
            .q_rows = tl->t,
          };
          if (!func (&st, user_data))
            return FALSE;
        }
    }
  return TRUE;
}

gboolean
um_attention_plan (int nq, const gint32 *q_seq, const gint32 *q_kv_len, int seq_len, int n_heads, int n_kv_heads,
                   int head_dim, int tile_rows, UmAttnStepFunc func, gpointer user_data)
{
  g_return_val_if_fail (nq <= 0 || q_seq != NULL, FALSE);
  g_return_val_if_fail (seq_len > 0 && head_dim > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0, FALSE);
  g_return_val_if_fail (tile_rows > 0, FALSE);

#define KV_LEN(i) (q_kv_len != NULL ? (int) q_kv_len[i] : seq_len)
  for (int64_t i0 = 0; i0 < nq;)
    {
      /* The tile: rows of one sequence, at most tile_rows, key counts
       * within UM_ATTN_KV_SLACK of each other. */
      int64_t i1 = i0 + 1;
      int lo = KV_LEN (i0), hi = lo;

      while (i1 < nq && i1 - i0 < tile_rows && q_seq[i1] == q_seq[i0]
             && MAX (hi, KV_LEN (i1)) - MIN (lo, KV_LEN (i1)) <= UM_ATTN_KV_SLACK)
        {
          lo = MIN (lo, KV_LEN (i1));
          hi = MAX (hi, KV_LEN (i1));
          i1++;
        }
      {
        const Tile tl = {
          .seq = q_seq[i0],
          .i0 = i0,
          .t = (int) (i1 - i0),
          .n = hi,
          .masked = lo < hi,
          .seq_len = seq_len, .n_heads = n_heads, .n_kv_heads = n_kv_heads, .head_dim = head_dim,
        };
        if (!plan_tile (&tl, func, user_data))
          return FALSE;
      }
      i0 = i1;
    }
#undef KV_LEN
  return TRUE;
}

/* um-attention-plan.h — the index arithmetic of attention on tensor cores,
 * kept free of CUDA so that a plain C test can execute it.
 *
 * Attention of um_cuda_attention's contract (q[nq, H·hd] with row i in
 * sequence q_seq[i]; k, v[n_seq·L, Hkv·hd]; out[nq, H·hd]; row i sees the
 * keys 0 … q_kv_len[i] − 1, all L without a mask) becomes, per tile of at
 * most tile_rows consecutive query rows of one sequence that see the first
 * n keys at most (n: the tile's widest row; a tile's rows see within
 * UM_ATTN_KV_SLACK keys of each other, so each row costs at most that many
 * keys beyond its own):
 *
 *   1. S_h = scale · K_gᵀ · Q_h for every head h (g = h / (H/Hkv)) over the
 *      first n keys, into a score buffer laid out [H][tile][n]: in
 *      column-major terms S_h is n × tile with ld n, so each query's n
 *      scores are contiguous;
 *   2. a softmax over each of the H·tile rows of n scores, over the row's
 *      own q_kv_len scores under a mask, the rest set to 0;
 *   3. O_h = V_g · P_h over the n keys, written straight into out
 *      (column-major hd × tile with ld H·hd, which is out's row-major
 *      layout).
 *
 * Row-major q, k, v and out read as column-major hd × rows matrices with ld
 * H·hd or Hkv·hd, so no transposition pass is needed.  Heads are batched
 * with strided-batched products: for a fixed r < H/Hkv the heads
 * h = g·(H/Hkv) + r (g < Hkv) have uniform strides in Q, K, V, S and out, so
 * min (H/Hkv, Hkv) calls per product cover every head (one call without
 * GQA); when the groups are larger than their number, the batch runs over a
 * group's heads instead, with K and V strides of 0.
 */
#pragma once

#include <glib.h>
#include <stdint.h>

G_BEGIN_DECLS

/* The buffers a product reads or writes; offsets count floats from them. */
typedef enum {
  UM_ATTN_BUF_Q,
  UM_ATTN_BUF_K,
  UM_ATTN_BUF_V,
  UM_ATTN_BUF_S,     /* the score buffer (scratch) */
  UM_ATTN_BUF_OUT,
} UmAttnBuf;

typedef struct {
  UmAttnBuf buf;
  int64_t off;       /* first matrix, in floats from buf */
  int ld;            /* column-major leading dimension */
  int64_t stride;    /* between the batch's matrices, in floats (0: shared) */
} UmAttnOperand;

typedef enum {
  UM_ATTN_STEP_GEMM,
  UM_ATTN_STEP_SOFTMAX,
} UmAttnStepKind;

/* A strided-batched product in cuBLAS's column-major terms:
 * C = alpha · op(A) · op(B) (beta 0), C m × n, op(A) m × k, op(B) k × n;
 * or a softmax over rows rows of len contiguous floats of S from s_off:
 * with masked, row r belongs to query row q0 + r % q_rows (of the plan's
 * q_kv_len) and weighs only its first q_kv_len[q0 + r % q_rows] floats,
 * the rest of its len set to 0. */
typedef struct {
  UmAttnStepKind kind;
  /* UM_ATTN_STEP_GEMM */
  gboolean trans_a, trans_b;
  int m, n, k, batch;
  float alpha;
  UmAttnOperand a, b, c;
  /* UM_ATTN_STEP_SOFTMAX */
  int rows, len;
  int64_t s_off;
  gboolean masked;
  int64_t q0;
  int q_rows;
} UmAttnStep;

/* How far apart the key counts of one tile's rows may be. */
#define UM_ATTN_KV_SLACK 64

/* Called for each step in order; returns FALSE to stop the plan. */
typedef gboolean (*UmAttnStepFunc) (const UmAttnStep *step, gpointer user_data);

/* Floats of score buffer for tiles of tile_rows queries. */
size_t um_attention_plan_score_floats (int tile_rows, int seq_len, int n_heads);

/* The largest tile (≥ 1, ≤ nq) whose scores fit in score_bytes; 0 when not
 * even one query row fits. */
int um_attention_plan_tile_rows (size_t score_bytes, int nq, int seq_len, int n_heads);

/* Runs func over the steps of the whole attention: consecutive rows of equal
 * q_seq (host memory, every value ≥ 0) make a run, each run is cut into
 * tiles of at most tile_rows rows (and, with q_kv_len, of key counts within
 * UM_ATTN_KV_SLACK).  q_kv_len: host memory, NULL or every value in
 * 1 … seq_len.  Returns FALSE if func did. */
gboolean um_attention_plan (int nq, const gint32 *q_seq, const gint32 *q_kv_len, int seq_len, int n_heads,
                            int n_kv_heads, int head_dim, int tile_rows, UmAttnStepFunc func, gpointer user_data);

G_END_DECLS

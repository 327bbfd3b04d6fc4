/* um-ref-kernels.h — plain, obviously-correct references of every kernel and
 * of the whole forward pass, in double precision, straight from the
 * definitions in llada.md. Slow on purpose; tests compare the fast paths of
 * every backend against these. */
#pragma once

#include <glib.h>
#include <stdint.h>

#include "um-model.h"

G_BEGIN_DECLS

/* Row r of w as doubles (any stored format). */
void um_ref_weight_row (const UmWeight *w, uint64_t r, double *out);

/* out[m, w.rows] = x[m, w.cols] · wᵀ */
void um_ref_matmul (const double *x, int64_t m, const UmWeight *w, double *out);
void um_ref_rms_norm (const double *x, int64_t rows, int64_t dim, const float *w, double eps, double *out);
/* x[rows, n_heads*head_dim], row r at position pos[r]; only the first
 * rope_dim (even, ≤ head_dim) values of each head turn: NEOX pairs
 * (i, i + rope_dim/2) or interleaved (2i, 2i+1), angle pos·theta^(-2i/rope_dim). */
void um_ref_rope (double *x, int64_t rows, const gint32 *pos, int n_heads, int head_dim, int rope_dim,
                  double theta, gboolean interleaved);
/* One sequence: q[L, H*hd], k, v[L, Hkv*hd] -> out[L, H*hd]. Query i sees
 * the keys 0 … kv_len[i] − 1 (1 ≤ kv_len[i] ≤ L); kv_len NULL: all L. */
void um_ref_attention (const double *q, const double *k, const double *v, int64_t seq_len, const gint32 *kv_len,
                       int n_heads, int n_kv_heads, int head_dim, double *out);
void um_ref_swiglu (const double *gate, const double *up, size_t n, double *out);
/* One token's experts from its router logits z[n_experts] (cfg: the rule,
 * n_experts_used = K, groups): chosen[K] in order of choice and their
 * weights[K]; bias: the selection bias (NULL: none). As um_moe_route. */
void um_ref_moe_route (const UmModelConfig *cfg, guint n_experts, const double *z, const float *bias,
                       guint *chosen, double *weights);

/* Full logits [seq_len, vocab] of one sequence, bidirectional attention. */
gboolean um_ref_forward (const UmModel *model, const gint32 *ids, int seq_len, double *logits,
                         GError **error);
/* The same with block-causal attention (LLaDA 2.x): the query at position
 * p sees the keys before min (seq_len, (p / block_len + 1) · block_len),
 * blocks aligned to position 0. block_len 0: bidirectional. */
gboolean um_ref_forward_blocks (const UmModel *model, const gint32 *ids, int seq_len, int block_len,
                                double *logits, GError **error);

/* The reference forward with the 8-bit activations of the integer products
 * (um-qgemm.c's rule, written independently): before every product with a
 * quantized weight (Q8_0, Q4_0/1, Q5_0/1, Q4_K, Q5_K, Q6_K), each row is
 * rounded per block of 32 to dx · q, dx = max |x| / 127, q an integer.
 * Everything else as um_ref_forward_blocks (), in double: how far this
 * lands from it is what 8-bit activations cost on the model, from which
 * tests derive their tolerance for the CPU's integer products. */
gboolean um_ref_forward_int8_blocks (const UmModel *model, const gint32 *ids, int seq_len, int block_len,
                                     double *logits, GError **error);

/* The same forward pass computed naively in float32 (every value stored as
 * float, every sum accumulated left to right in float, no FMA contraction
 * since the project builds in ISO C mode).  Tests measure how far this lands
 * from um_ref_forward () on their model: float32 rounding's own error there,
 * independent of any BLAS or CPU, from which their tolerances follow. */
gboolean um_ref32_forward (const UmModel *model, const gint32 *ids, int seq_len, float *logits,
                           GError **error);
gboolean um_ref32_forward_blocks (const UmModel *model, const gint32 *ids, int seq_len, int block_len,
                                  float *logits, GError **error);

G_END_DECLS

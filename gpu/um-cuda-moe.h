/* um-cuda-moe.h — a mixture-of-experts layer on the GPU without the host
 * reading anything back (um-cuda-moe.cu): the routing of compute/um-moe.h
 * computed on the device, the tokens grouped per expert there, each
 * expert's group as tiles of one launch per product (a grouped product:
 * every tile finds its expert and rows in device memory), and the outputs
 * added into the residual in the host path's order.
 *
 * Arithmetic: the products take the fp32 activations and the weights
 * decoded to fp32 as they are read (any stored type), summing over k in a
 * fixed order, so a row's output depends only on the row and its expert:
 * an expert run alone over some rows (um_cuda_moe_ffn with a one-expert
 * work, as experts fetched into slots are) gives the same bits. The
 * weighted sum into the residual rounds the product and the sum
 * separately, expert by expert in ascending order, as add_rows_scaled does
 * on the host path: the same bits for the same outputs.
 *
 * Every pointer is a device pointer unless said otherwise; each launcher
 * queues on @stream and returns the launch status. */
#pragma once

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "um-dtype.h"
#include "um-moe-work.h"

#ifdef __cplusplus
extern "C" {
#endif

#define UM_CUDA_MOE_TILE_ROWS UM_MOE_TILE_ROWS
/* Experts the device routing handles (per-warp shared memory). */
#define UM_CUDA_MOE_MAX_EXPERTS 512

/* compute/um-moe.h's rule, as numbers. */
typedef struct {
  int    n_experts;
  int    k;              /* experts per token */
  int    sigmoid;        /* 1: sigmoid of the logits; 0: softmax */
  int    norm;           /* renormalise the chosen weights to sum 1 */
  double scale;          /* the weights × this (1 or 0: none) */
  int    n_groups;       /* group-limited routing when > 1 */
  int    groups_used;
} UmCudaMoeRule;

typedef UmMoeWork UmCudaMoeWork;

/* Routes @n tokens from their router logits (@logits [n, E]; @bias [E] the
 * selection bias or NULL) by @rule and groups them per expert into @w.
 * Doubles throughout, ties to the lower expert, as um_moe_route (). */
cudaError_t um_cuda_moe_route (const float *logits, const float *bias, int n, const UmCudaMoeRule *rule,
                               UmCudaMoeWork *w, cudaStream_t stream);

/* The experts of @w's tiles over their slots: y[s] = down_e · (silu
 * (gate_e · h[slot_row[s]]) ⊙ (up_e · h[slot_row[s]])). @mats: 3 per
 * expert (gate, up, down) as device pointers to their stored rows, in
 * device memory; gate and up of type @gate_up (@gu_row_bytes per row of
 * @d_model), down of type @down (@down_row_bytes per row of @ffn). */
cudaError_t um_cuda_moe_ffn (UmDType gate_up, int64_t gu_row_bytes, UmDType down, int64_t down_row_bytes,
                             const void *const *mats, const float *h, int d_model, int ffn, const UmCudaMoeWork *w,
                             cudaStream_t stream);

/* x[t, :] += Σ_j slot_scale · y[slot_of[t, j], :] over token t's choices
 * in ascending expert order, each product and sum rounded apart. */
cudaError_t um_cuda_moe_combine (float *x, int n, int d_model, int k, const UmCudaMoeWork *w, cudaStream_t stream);

/* Whether the products can decode @type. */
int um_cuda_moe_type_ok (UmDType type);

#ifdef __cplusplus
}
#endif

/* um-moe.h — a mixture-of-experts layer's routing, on the host: from the
 * router's logits to each expert's group of tokens and their weights.
 *
 * The products then run once per expert over its whole group (grouped
 * compute: no per-token matrix-vector loops), on any backend. Routing
 * needs only n_tokens × n_experts floats, so the host is the exact place
 * for it: the choice is made in double, ties to the lower expert index. */
#pragma once

#include <glib.h>

#include "um-model-config.h"

G_BEGIN_DECLS

typedef struct {
  int     n_tokens;
  int     n_experts;
  int     k;             /* experts per token */
  /* Tokens grouped by expert: expert e's group is [offset[e], offset[e+1])
   * of rows (token indices, ascending) and scale (the token's weight for
   * that expert). */
  int    *offset;        /* n_experts + 1 */
  gint32 *rows;          /* n_tokens · k */
  float  *scale;         /* n_tokens · k */
  /* Per token, its k experts in order of choice and their weights. */
  gint32 *choice;        /* n_tokens · k */
  double *weight;        /* n_tokens · k */
  /*< private >*/
  int     cap_tokens, cap_experts;
  double *work;
  int    *fill;          /* n_experts: the counting sort's cursors */
} UmMoeRouting;

void um_moe_routing_init  (UmMoeRouting *r);
void um_moe_routing_clear (UmMoeRouting *r);

/* Routes @n_tokens tokens from their router logits (@logits[t·E + e],
 * E = cfg->n_experts) by the configuration's rule: softmax or sigmoid of
 * the logits; the k = n_experts_used best by probability plus @bias (the
 * selection bias, NULL for none), inside the n_groups_used best of the
 * cfg->n_expert_groups groups when there are groups (a group's score: the
 * sum of its two best selection scores; ties to the lower index); weights the chosen experts' unbiased
 * probabilities, renormalised (sum clamped at 6.1035e-5, as llama.cpp)
 * when cfg->router_norm and scaled by cfg->router_scale. */
void um_moe_route (const UmModelConfig *cfg, const float *logits, const float *bias, int n_tokens,
                   UmMoeRouting *r);

G_END_DECLS

/* um-plan-experts.h — the plan's time model for routed experts (private to
 * memory/um-plan.c). */
#pragma once

#include "um-plan.h"

G_BEGIN_DECLS

/* Seconds per pass over @T rows that @model's routed experts take in each
 * placement (out[RESIDENT], out[HOST], out[FETCH]; out[AUTO] 0), on
 * @target's rates, with FETCH's copy zstd-compressed at @zstd_ratio (1:
 * raw). Rows route alike to every expert, so a layer's T·k routes reach
 * E·(1 − (1 − k/E)^T) distinct experts. On the CPU backend the device is
 * the host: HOST adds only the rows' copies, FETCH its copies (on the same
 * cores and memory, not hidden behind the products); on a GPU the copies
 * run beside the products, but for each layer's first expert. */
void um_plan_expert_seconds (const UmModel *model, const UmPlanTarget *target, int T, double zstd_ratio,
                             double out[UM_EXPERTS_N_PLACEMENTS]);

G_END_DECLS

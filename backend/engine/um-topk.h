/* um-topk.h — the reference's top-k selection, ties included.
 *
 * The reference schedule picks the positions to commit with torch.topk. On
 * exact ties (they happen: with confidence_eos_eot_inf every EOS/EOT choice
 * scores 0) the chosen set depends on the selection algorithm PyTorch's CPU
 * kernel runs: std::partial_sort when k·64 ≤ n, std::nth_element otherwise,
 * both on (value, index) pairs compared by value alone. We replay those
 * algorithms (as libstdc++ implements them) so that ties resolve exactly as
 * in the reference; without ties the result is simply the k largest.
 */
#pragma once

#include <glib.h>

#include "um-schedule-sizing.h"

G_BEGIN_DECLS

/* Indices of the k largest of values[0..n) (NaN counts as largest), in
 * unspecified order. 1 ≤ k ≤ n. */
void um_topk_reference (const double *values, int n, int k, gint32 *out_indices);
/* Its scratch, um_topk_scratch_bytes (), is counted by the plan: in
 * memory/um-schedule-sizing.h with the element it sorts. */

G_END_DECLS

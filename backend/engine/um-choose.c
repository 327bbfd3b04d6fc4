#include "um-choose.h"

#include <stddef.h>

void
um_choose_rows (const float        *logits,
                int                 n,
                int                 vocab,
                const UmChooseRule *rule,
                const int32_t      *positions,
                int32_t            *out_ids,
                double             *out_conf)
{
  const int guided = rule->cfg_scale > 0.0;

  /* Rows are independent (the noise is counter-based), so they are chosen
   * in parallel: a 126k-token softmax in double per row is not free. */
#pragma omp parallel for schedule(dynamic, 1) if (n > 1 && vocab >= 4096)
  for (int i = 0; i < n; i++)
    um_choose_row (rule, logits + (size_t) i * vocab, guided ? logits + (size_t) (n + i) * vocab : NULL, vocab,
                   positions[i], &out_ids[i], &out_conf[i]);
}

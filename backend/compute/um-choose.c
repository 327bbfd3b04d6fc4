#include "um-choose.h"

#include <stddef.h>

#include "um-pool.h"

typedef struct {
  const float        *logits;
  int                 n, vocab;
  const UmChooseRule *rule;
  const int32_t      *positions;
  int32_t            *out_ids;
  double             *out_conf;
} ChooseJob;

static void
choose_range (void *ctx, int64_t b, int64_t e, int tid)
{
  const ChooseJob *j = ctx;
  const int guided = j->rule->cfg_scale > 0.0;
  (void) tid;
  for (int64_t i = b; i < e; i++)
    um_choose_row (j->rule, j->logits + (size_t) i * j->vocab,
                   guided ? j->logits + (size_t) (j->n + i) * j->vocab : NULL, j->vocab,
                   j->positions[i], &j->out_ids[i], &j->out_conf[i]);
}

void
um_choose_rows (const float        *logits,
                int                 n,
                int                 vocab,
                const UmChooseRule *rule,
                const int32_t      *positions,
                int32_t            *out_ids,
                double             *out_conf)
{
  /* Rows are independent (the noise is counter-based), so they are chosen
   * in parallel: a 126k-token softmax in double per row is not free. */
  ChooseJob job = { logits, n, vocab, rule, positions, out_ids, out_conf };
  um_pool_for (n, 1, vocab >= 4096 ? 0 : 1, choose_range, &job);
}

/* um-schedule-sizing.c — the schedules' host bytes (um-schedule-sizing.h).
 * Moved here from engine/um-schedule.c, um-schedule-block.c and um-topk.c
 * so that the plan (memory/) reaches nothing of the engine. */
#include "um-schedule-sizing.h"

#include "um-pool.h"

typedef guint64 (*UmScheduleHostBytesFunc) (const UmModelConfig *cfg, int n_seq, int canvas_len);

/* Indexed by the family's schedule, as the schedule table is. */
static const UmScheduleHostBytesFunc host_bytes[] = {
  [UM_SCHEDULE_BLOCK] = um_schedule_block_host_bytes,
  [UM_SCHEDULE_TIMESTEP] = um_schedule_rows_host_bytes,
  [UM_SCHEDULE_ENTROPY] = um_schedule_rows_host_bytes,
  [UM_SCHEDULE_BLOCK_CAUSAL] = um_schedule_block_host_bytes,
};

guint64
um_schedule_host_bytes_for (const UmModelConfig *cfg, int n_seq, int canvas_len)
{
  const UmSchedule s = um_arch_info (cfg->arch)->schedule;

  /* An unknown value is LLaDA's, as um_schedule_info () reads it. */
  return host_bytes[(guint) s < G_N_ELEMENTS (host_bytes) ? s : UM_SCHEDULE_BLOCK](cfg, n_seq, canvas_len);
}

void
um_schedule_block_layout (int n_seq, int L, UmBlockLayout *s)
{
  const size_t n = (size_t) MAX (L, 0), canvas = (size_t) MAX (n_seq, 1) * n;
  size_t off = 0;

#define PLACE(field, bytes) G_STMT_START { s->field = off; off += (bytes); } G_STMT_END
  PLACE (cands, n * sizeof (UmBlockCandidate));
  PLACE (scores, n * sizeof (double));
  PLACE (pick_conf, n * sizeof (double));
  PLACE (x, canvas * sizeof (gint32));
  PLACE (rows, canvas * sizeof (gint32));
  PLACE (chosen, n * sizeof (gint32));
  PLACE (commit_pos, n * sizeof (gint32));
  PLACE (commit_ids, n * sizeof (gint32));
  PLACE (commit_conf, n * sizeof (float));
  PLACE (pick_ids, n * sizeof (gint32));
#undef PLACE
  s->total = off;
}

guint64
um_schedule_block_host_bytes (const UmModelConfig *cfg, int n_seq, int canvas_len)
{
  UmBlockLayout s;
  um_schedule_block_layout (n_seq, canvas_len, &s);
  return s.total + um_topk_scratch_bytes (canvas_len);
}

guint64
um_row_scratch_bytes (int vocab)
{
  return (guint64) vocab * (2 * sizeof (double) + sizeof (UmRowRanked) + sizeof (gint32));
}

guint64
um_schedule_host_bytes (int canvas_len, int vocab)
{
  const guint64 n = (guint64) MAX (canvas_len, 1);

  /* Logits of every position at once, the scratch per thread, a score
   * and a few index arrays per position, and the top-k's scratch. */
  return n * vocab * sizeof (float) + (guint64) um_pool_max_threads () * um_row_scratch_bytes (vocab)
         + n * (2 * sizeof (double) + 8 * sizeof (gint32) + sizeof (float))
         + MAX (um_topk_scratch_bytes (canvas_len), um_topk_scratch_bytes (vocab));
}

guint64
um_schedule_rows_host_bytes (const UmModelConfig *cfg, int n_seq, int canvas_len)
{
  return um_schedule_host_bytes (canvas_len, (int) cfg->vocab_size);
}

gsize
um_topk_scratch_bytes (int n)
{
  return (gsize) MAX (n, 0) * sizeof (UmTopkElem);
}

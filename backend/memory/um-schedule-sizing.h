/* um-schedule-sizing.h — the host bytes each unmasking schedule allocates
 * besides the forward's, and the layouts they are counted from.
 *
 * It sits below both of its users: the schedules (engine/um-schedule-*.c)
 * carve their arrays with these layouts and the memory plan (um-plan.h)
 * predicts with them, so the plan needs nothing of the engine. This is the
 * one map from a schedule (a family's um_arch_info ()->schedule) to its
 * host bytes: the schedule table (engine/um-schedule-table.h) has no
 * column for them. */
#pragma once

#include <glib.h>

#include "um-model-config.h"

G_BEGIN_DECLS

/* Host bytes a generation over a canvas of @canvas_len positions in @n_seq
 * sequences (2 with guidance) allocates besides the forward's, for the
 * schedule of @cfg's family. */
guint64  um_schedule_host_bytes_for (const UmModelConfig *cfg, int n_seq, int canvas_len);

/* ---- the block schedules (LLaDA's, LLaDA 2.x's block-causal one) ---- */

/* A masked position of the current block, its choice and confidence. */
typedef struct {
  gint32 pos;
  gint32 id;
  double conf;
} UmBlockCandidate;

/* The block schedule's arrays in one block, 8-byte ones first: offsets of each. */
typedef struct {
  size_t cands, scores, pick_conf, x, rows, chosen, commit_pos, commit_ids, commit_conf, pick_ids;
  size_t total;
} UmBlockLayout;

/* The arrays of a canvas of @L positions in @n_seq sequences. */
void     um_schedule_block_layout (int n_seq, int L, UmBlockLayout *s);
/* The block schedule's arrays: the canvas, the rows asked for, the
 * per-position candidate and commit arrays, and the top-k's scratch. */
guint64  um_schedule_block_host_bytes (const UmModelConfig *cfg, int n_seq, int canvas_len);

/* ---- the row schedules (Dream's timesteps, RND1's entropy order) ---- */

/* A token of a row ranked by the top-p filter. */
typedef struct {
  double e;
  gint32 i;
} UmRowRanked;

/* Bytes of one row rules' scratch (engine's UmRowScratch) over @vocab. */
guint64  um_row_scratch_bytes (int vocab);
/* Host bytes the timestep and entropy schedules allocate for a canvas of
 * @canvas_len over @vocab: the logits rows of every answer position, the
 * per-thread scratch and the position arrays. */
guint64  um_schedule_host_bytes (int canvas_len, int vocab);
/* um_schedule_host_bytes () for @cfg's vocabulary: the timestep and entropy
 * schedules hold every answer position's logits row. */
guint64  um_schedule_rows_host_bytes (const UmModelConfig *cfg, int n_seq, int canvas_len);

/* ---- the reference top-k (engine/um-topk.h) ---- */

/* A value and its index, as the top-k sorts them. */
typedef struct {
  double v;
  gint32 i;
} UmTopkElem;

/* Bytes um_topk_reference () allocates for @n values while it runs. */
gsize    um_topk_scratch_bytes (int n);

G_END_DECLS

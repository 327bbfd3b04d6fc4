/* um-schedule-block.c — LLaDA's block schedule, as generate () in
 * ML-GSAI/LLaDA's generate.py runs it (see docs: llada.md): the answer in
 * blocks, each with an equal share of the steps; per step the k most
 * confident masks (Gumbel-max temperature in float64, low_confidence or
 * random remasking, classifier-free guidance, the EOS/EOT flags, the
 * lower-position-first tie rule) are committed. Fast decoding (Fast-dLLM's
 * threshold and factor rules, the block KV cache) is opt-in. */
#include "um-schedule.h"

#include <math.h>
#include <string.h>

#include "um-choose.h"
#include "um-error.h"
#include "um-topk.h"

/* ---- its row in the schedule table ---- */

void
um_schedule_block_defaults (UmGenParams *p)
{
  /* um_gen_params_init ()'s are the reference's chat defaults. */
}

#define FAIL(...) G_STMT_START { g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, __VA_ARGS__); return FALSE; } G_STMT_END

gboolean
um_schedule_block_validate (const UmGenParams *p, const char *family, int prompt_len, guint max_seq_len,
                            GError **error)
{
  if (p->eos_early_stop)
    FAIL ("eos_early_stop is LLaDA 2's; %s's schedule stops as its reference does", family);
  if (p->block_length <= 0)
    FAIL ("block_length must be positive (got %d)", p->block_length);
  if (p->gen_length % p->block_length != 0)
    FAIL ("gen_length (%d) must be a multiple of block_length (%d)", p->gen_length, p->block_length);
  if (p->steps % (p->gen_length / p->block_length) != 0)
    FAIL ("steps (%d) must be a multiple of the number of blocks (gen_length / block_length = %d)",
          p->steps, p->gen_length / p->block_length);
  if (!(p->cfg_scale >= 0.0) || !isfinite (p->cfg_scale))
    FAIL ("cfg_scale must be a finite number ≥ 0 (got %g)", p->cfg_scale);
  if (p->remasking != UM_REMASK_LOW_CONFIDENCE && p->remasking != UM_REMASK_RANDOM)
    FAIL ("unknown remasking strategy %d", (int) p->remasking);
  /* Dream's and RND1's options. */
  if (p->top_p != 0.0 && p->top_p != 1.0)
    FAIL ("%s's block schedule has no top-p filter (top_p is Dream's and RND1's)", family);
  if (p->top_k != 0)
    FAIL ("%s's block schedule has no top-k filter (top_k is Dream's and RND1's)", family);
  if (p->alg_temp != 0.0)
    FAIL ("%s's block schedule has no alg_temp (it is Dream's)", family);
  if (p->greedy)
    FAIL ("%s's block schedule has no greedy switch (it is RND1's): temperature 0 is greedy", family);
  return TRUE;
}
#undef FAIL

/* Tokens step @i of @steps commits of a block's @n_masks. */
static int
step_count (int n_masks, int steps, int i)
{
  return n_masks / steps + (i < n_masks % steps ? 1 : 0);
}

/* Noise comes from um-rng.h: counter-based, so the same (seed, step,
 * position, token) gives the same draw on every backend; each row's token
 * and confidence follow um-choose.h, on the backend when it can. */

/* The candidates (UmBlockCandidate) and the arrays a run carves from one
 * block (um_schedule_block_layout ()) are in memory/um-schedule-sizing.h,
 * where the plan's host bytes count them. */

static int
candidate_position_compare (gconstpointer a, gconstpointer b)
{
  const UmBlockCandidate *x = a, *y = b;
  return (x->pos > y->pos) - (x->pos < y->pos);
}

/* Fast decoding order: most confident first, lower position first on ties
 * (the reference top-k's tie rule). */
static int
candidate_confidence_compare (gconstpointer a, gconstpointer b)
{
  const UmBlockCandidate *x = a, *y = b;
  if (x->conf != y->conf)
    return x->conf > y->conf ? -1 : 1;
  return (x->pos > y->pos) - (x->pos < y->pos);
}

/* How many of the @n candidates, sorted by candidate_confidence_compare,
 * the threshold or factor rule commits; always at least one. */
static int
fast_commit_count (const UmBlockCandidate *cands, int n, const UmGenParams *p)
{
  int k = 0;

  if (p->threshold > 0.0)
    {
      while (k < n && cands[k].conf >= p->threshold)
        k++;
    }
  else
    {
      /* (n + 1)(1 − c(n)) grows with n, so the n that pass are a prefix. */
      while (k < n && (k + 2) * (1.0 - cands[k].conf) < p->factor)
        k++;
    }
  return MAX (k, 1);
}

/* um_forward_choose () for the @n candidate positions @pos (ascending) of
 * a model that shifts its logits: each reads the row before (row 0 for
 * position 0; with guidance the rows + L of the unconditional copy). A row
 * read by two positions (0 and 1) is chosen once, for the first. */
static gboolean
choose_shifted (UmForward *fw, const gint32 *x, int n_seq, int L, const gint32 *pos, int n, const UmChooseRule *rule,
                gint32 *out_ids, double *out_conf, GCancellable *cancellable, GError **error)
{
  g_autofree gint32 *src = g_new (gint32, (gsize) MAX (n, 1) * n_seq), *row_of = g_new (gint32, MAX (n, 1));
  g_autofree gint32 *src_pos = g_new (gint32, MAX (n, 1));
  const int n_src = um_logit_rows (TRUE, pos, n, src, row_of);

  for (int i = n - 1; i >= 0; i--)
    src_pos[row_of[i]] = pos[i];
  for (int s = 1; s < n_seq; s++)
    for (int i = 0; i < n_src; i++)
      src[s * n_src + i] = src[i] + s * L;
  if (!um_forward_choose (fw, x, n_seq, L, src, n_src * n_seq, rule, src_pos, out_ids, out_conf, cancellable,
                          error))
    return FALSE;
  /* Spread the rows' choices over the positions, from the end: row_of[i] ≤ i. */
  for (int i = n - 1; i >= 0; i--)
    {
      out_ids[i] = out_ids[row_of[i]];
      out_conf[i] = out_conf[row_of[i]];
    }
  return TRUE;
}

gboolean
um_schedule_block_run (const UmScheduleRun *run, GError **error)
{
  UmForward *fw = run->fw;
  const gint32 *prompt = run->prompt;
  const int prompt_len = run->prompt_len;
  const UmGenParams *p = run->p;
  GCancellable *cancellable = run->cancellable;
  UmModel *model = um_forward_get_model (fw);
  const UmModelConfig *c = &model->cfg;
  const gint32 mask = c->mask_id;
  const gboolean cfg = p->cfg_scale > 0.0;
  const gboolean fast = p->threshold > 0.0 || p->factor > 0.0;
  const gboolean cached = p->cache != UM_CACHE_NONE;
  const int n_seq = cfg ? 2 : 1;
  int L, n_blocks, steps_per_block, global_step = 0, masks_left = 0;
  g_autofree guint8 *arrays = NULL;
  UmBlockLayout lay;
  gint32 *x, *rows, *commit_pos, *commit_ids, *pick_ids, *chosen;
  float *commit_conf;
  double *pick_conf, *scores;
  UmBlockCandidate *cands;
  UmChooseRule rule = { 0 };
  gint64 t0 = g_get_monotonic_time ();
  UmScheduleEvents events = { run->step_cb, run->user_data, NULL, prompt_len, 0, 0 };
  UmScheduleCommits commits = { NULL, NULL, NULL, 0 };

  /* The cache computes the block's rows only; a shift reads the row before. */
  if (cached && c->shift_logits)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "the block KV cache cannot run a model that shifts its logits (%s)", um_arch_info (c->arch)->name);
      return FALSE;
    }

  L = prompt_len + p->gen_length;
  n_blocks = p->gen_length / p->block_length;
  steps_per_block = p->steps / n_blocks;

  um_schedule_block_layout (n_seq, L, &lay);
  arrays = g_malloc (lay.total);
  cands = (UmBlockCandidate *) (arrays + lay.cands);
  scores = (double *) (arrays + lay.scores);
  pick_conf = (double *) (arrays + lay.pick_conf);
  x = (gint32 *) (arrays + lay.x);
  rows = (gint32 *) (arrays + lay.rows);
  chosen = (gint32 *) (arrays + lay.chosen);
  commit_pos = (gint32 *) (arrays + lay.commit_pos);
  commit_ids = (gint32 *) (arrays + lay.commit_ids);
  commit_conf = (float *) (arrays + lay.commit_conf);
  pick_ids = (gint32 *) (arrays + lay.pick_ids);
  if (!um_schedule_canvas_init (model, prompt, prompt_len, p, x, L, error))
    return FALSE;
  events.canvas = x;
  events.seq_len = L;
  events.t0 = t0;
  commits.pos = commit_pos;
  commits.ids = commit_ids;
  commits.conf = commit_conf;
  for (int i = prompt_len; i < L; i++)
    masks_left += x[i] == mask;
  rule.seed = p->seed;
  rule.temperature = p->temperature;
  rule.cfg_scale = p->cfg_scale;
  rule.eos_id = c->eos_id;
  rule.eot_id = c->eot_id;
  rule.logits_eos_inf = p->logits_eos_inf;
  rule.confidence_eos_eot_inf = p->confidence_eos_eot_inf;
  rule.remask_random = p->remasking == UM_REMASK_RANDOM;

  for (int b = 0; b < n_blocks; b++)
    {
      const int block_start = prompt_len + b * p->block_length;
      const int block_end = block_start + p->block_length;
      int n_masks = 0, n_masks0;
      gboolean refreshed = FALSE;

      for (int i = block_start; i < block_end; i++)
        n_masks += x[i] == mask;
      n_masks0 = n_masks;

      /* Exact: the block's fixed steps. Fast: until the block has no masks
       * (each step commits at least one, so at most n_masks steps). */
      for (int s = 0; fast ? n_masks > 0 : s < steps_per_block; s++, global_step++)
        {
          int n_cand = 0, k = fast ? 1 : step_count (n_masks0, steps_per_block, s);

          if (g_cancellable_set_error_if_cancelled (cancellable, error))
            return FALSE;

          /* Candidates. Exact schedule: every mask before the end of the
           * block (prompt masks included, as in the reference); later
           * positions score −inf. Fast decoding and the cache: the block's
           * masks only (the cache computes no other rows). */
          for (int i = fast || cached ? block_start : 0; i < block_end; i++)
            if (x[i] == mask)
              rows[n_cand++] = i;
          k = MIN (k, n_cand);

          /* A step that commits nothing needs no forward pass. */
          if (k > 0)
            {
              int n_rows = n_cand * n_seq;
              gboolean ok;
              if (cfg)
                {
                  /* Unconditional copy: the prompt replaced by masks. */
                  memcpy (x + L, x, sizeof (gint32) * L);
                  for (int i = 0; i < prompt_len; i++)
                    x[L + i] = mask;
                  for (int i = 0; i < n_cand; i++)
                    rows[n_cand + i] = rows[i] + L;
                }
              /* Only an id and a confidence per row come back from the
               * backend (the guided combination included, see
               * um_forward_choose). */
              rule.step = (guint64) global_step;
              if (cached)
                ok = um_forward_choose_cached (fw, x, n_seq, L, block_start, block_end, !refreshed,
                                               p->cache == UM_CACHE_DUAL, rows, n_rows, &rule, rows, pick_ids,
                                               pick_conf, cancellable, error);
              else if (c->shift_logits)
                ok = choose_shifted (fw, x, n_seq, L, rows, n_cand, &rule, pick_ids, pick_conf, cancellable, error);
              else
                ok = um_forward_choose (fw, x, n_seq, L, rows, n_rows, &rule, rows, pick_ids, pick_conf,
                                        cancellable, error);
              if (!ok)
                return FALSE;
              refreshed = TRUE;
              for (int i = 0; i < n_cand; i++)
                {
                  cands[i].pos = rows[i];
                  cands[i].id = pick_ids[i];
                  cands[i].conf = pick_conf[i];
                }
              if (fast)
                {
                  /* Candidates are in position order, so a full sort with
                   * the tie rule gives the reference's top-k order. */
                  qsort (cands, n_cand, sizeof (UmBlockCandidate), candidate_confidence_compare);
                  k = fast_commit_count (cands, n_cand, p);
                }
              else
                {
                  /* Pick the k most confident as torch.topk over the whole
                   * canvas does, non-candidates at −inf (ties as the reference). */
                  for (int i = 0; i < L; i++)
                    scores[i] = -INFINITY;
                  for (int i = 0; i < n_cand; i++)
                    scores[cands[i].pos] = cands[i].conf;
                  um_topk_reference (scores, L, k, chosen);
                  for (int j = 0; j < k; j++)
                    for (int i = 0; i < n_cand; i++)
                      if (cands[i].pos == chosen[j])
                        {
                          UmBlockCandidate t = cands[j];
                          cands[j] = cands[i];
                          cands[i] = t;
                          break;
                        }
                }
            }

          /* Commit the k best; report them in position order. */
          qsort (cands, k, sizeof (UmBlockCandidate), candidate_position_compare);
          for (int j = 0; j < k; j++)
            {
              if (cands[j].pos >= block_start && cands[j].pos < block_end)
                n_masks--;
              if (cands[j].pos >= prompt_len)
                masks_left--;
              x[cands[j].pos] = cands[j].id;
              commit_pos[j] = cands[j].pos;
              commit_ids[j] = cands[j].id;
              commit_conf[j] = (float) cands[j].conf;
            }

          /* Fast decoding cannot know its step count in advance: the bound
           * left (one step per remaining mask), exact at the end. */
          commits.n = k;
          um_schedule_emit (&events, &commits, global_step, fast ? global_step + 1 + masks_left : p->steps, b,
                            n_blocks);
        }
    }

  if (run->out_n_steps != NULL)
    *run->out_n_steps = global_step;
  g_array_append_vals (run->out_ids, x + prompt_len, p->gen_length);
  return TRUE;
}

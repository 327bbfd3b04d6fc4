/* um-schedule-block-causal.c — LLaDA 2.x's generate (modeling_llada2_moe.py):
 * blocks in turn under a block-causal mask, each step committing the
 * positions whose confidence passes the threshold, or else the step's
 * count of the most confident.
 *
 * The canvas is ⌈(prompt + gen_length) / B⌉·B long, blocks aligned to
 * position 0; generation starts at the block holding the prompt's end
 * (its prompt positions are not candidates). A step of block b runs the
 * window [0, (b + 1)·B) only: nothing later can be seen from it. Under the
 * block-causal mask the keys and values of finished blocks never change,
 * so with a cache (p->cache != NONE) a step computes only what changed
 * since the last pass: the current block, plus the block finished just
 * before on a block's first step. That is the same arithmetic on the same
 * inputs as re-running the window, hence the same ids and trace. */
#include "um-schedule.h"

#include <math.h>
#include <string.h>

#include "um-choose.h"
#include "um-error.h"
#include "um-topk.h"

int
um_block_causal_canvas (int prompt_len, const UmGenParams *p)
{
  const gint64 B = p->block_length;
  return (int) (((gint64) prompt_len + p->gen_length + B - 1) / B * B);
}

int
um_block_causal_steps (const UmGenParams *p)
{
  /* minimal_topk = 1: never more steps per block than answer tokens. */
  return MIN (p->steps, p->gen_length);
}

/* The committed positions of a step, ascending: the reference's
 * transfer_index read in order. */
static int
position_compare (gconstpointer a, gconstpointer b)
{
  return *(const gint32 *) a - *(const gint32 *) b;
}

gboolean
um_schedule_block_causal (const UmBlockCausalModel *m,
                          gint32                   *x,
                          int                       prompt_len,
                          const UmGenParams        *p,
                          UmStepFunc                step_cb,
                          gpointer                  user_data,
                          GCancellable             *cancellable,
                          int                      *out_n_steps,
                          int                      *out_n_ids,
                          GError                  **error)
{
  const int B = p->block_length;
  const int canvas = um_block_causal_canvas (prompt_len, p);
  const int n_blocks = canvas / B, first_block = prompt_len / B;
  const int steps = um_block_causal_steps (p);
  const int answer_end = prompt_len + p->gen_length;
  const gboolean cached = p->cache != UM_CACHE_NONE;
  /* The threshold rule commits p > threshold; "off" (0) commits by the
   * counts alone, as a threshold of 1 does. */
  const double threshold = p->threshold > 0.0 ? p->threshold : 1.0;
  g_autofree int *counts = g_new (int, steps);
  g_autofree gint32 *rows = g_new (gint32, B), *ids = g_new (gint32, B), *chosen = g_new (gint32, B);
  g_autofree gint32 *commit_pos = g_new (gint32, B), *commit_ids = g_new (gint32, B);
  g_autofree float *commit_conf = g_new (float, B);
  g_autofree double *conf = g_new (double, B), *scores = g_new (double, B);
  const UmScheduleEvents events = { step_cb, user_data, x, prompt_len, canvas, g_get_monotonic_time () };
  UmScheduleCommits commits = { commit_pos, commit_ids, commit_conf, 0 };
  int global_step = 0, valid = 0, n_ids = p->gen_length;
  gboolean stopped = FALSE;

  um_sampler_split_steps (B, steps, counts);
  for (int b = first_block; b < n_blocks && !stopped; b++)
    {
      const int start = b * B, window = start + B;

      for (int s = 0; s < steps && !stopped; s++, global_step++)
        {
          int n_cand = 0, n_high = 0, k;
          gboolean eos_seen = FALSE;

          for (int i = start; i < window; i++)
            if (x[i] == m->mask_id)
              rows[n_cand++] = i;
          if (n_cand == 0)
            break;
          if (g_cancellable_set_error_if_cancelled (cancellable, error))
            return FALSE;
          /* Without the cache every pass recomputes the window. */
          if (!m->choose (m->choose_data, x, canvas, window, cached ? valid : 0, rows, n_cand,
                          (guint64) global_step, ids, conf, cancellable, error))
            return FALSE;
          /* Earlier blocks are final from here on; this block changes. */
          valid = start;

          for (int i = 0; i < n_cand; i++)
            n_high += conf[i] > threshold;
          if (n_high >= counts[s])
            {
              k = 0;
              for (int i = 0; i < n_cand; i++)
                if (conf[i] > threshold)
                  chosen[k++] = i;
            }
          else
            {
              /* torch.topk over the block, non-candidates at −inf: only
               * candidates can be among the k ≤ n_cand best. */
              k = MIN (counts[s], n_cand);
              for (int i = 0; i < n_cand; i++)
                scores[i] = conf[i];
              if (k > 0)
                um_topk_reference (scores, n_cand, k, chosen);
              qsort (chosen, k, sizeof (gint32), position_compare);
            }
          for (int j = 0; j < k; j++)
            {
              const int i = chosen[j];
              x[rows[i]] = ids[i];
              commit_pos[j] = rows[i];
              commit_ids[j] = ids[i];
              commit_conf[j] = (float) conf[i];
              eos_seen |= ids[i] == m->eos_id;
            }

          /* The step count is an upper bound (blocks may end early), exact at the end. */
          commits.n = k;
          um_schedule_emit (&events, &commits, global_step,
                            global_step + 1 + (n_blocks - b - 1) * steps + (steps - s - 1), b - first_block,
                            n_blocks - first_block);

          /* --eos-early-stop: done once a committed EOS has no mask before
           * it in the answer (the reference searches the window from 0; a
           * prompt never ends the answer, so we search from the prompt's end). */
          if (p->eos_early_stop && m->eos_id >= 0 && eos_seen)
            for (int i = prompt_len; i < window; i++)
              {
                if (x[i] == m->mask_id)
                  break;
                if (x[i] == m->eos_id)
                  {
                    stopped = TRUE;
                    break;
                  }
              }
        }
      /* After a block: stop once the answer so far holds an EOS. */
      for (int i = prompt_len; i < window && m->eos_id >= 0; i++)
        if (x[i] == m->eos_id)
          stopped = TRUE;
    }

  /* The answer ends at its first EOS, included. */
  for (int i = prompt_len; i < answer_end && m->eos_id >= 0; i++)
    if (x[i] == m->eos_id)
      {
        n_ids = i - prompt_len + 1;
        break;
      }
  if (out_n_steps != NULL)
    *out_n_steps = global_step;
  if (out_n_ids != NULL)
    *out_n_ids = n_ids;
  return TRUE;
}

/* ---- its row in the schedule table ---- */

void
um_schedule_block_causal_defaults (UmGenParams *p)
{
  /* LLaDA2MoeModelLM.generate (): blocks of 32 in 32 steps, threshold
   * 0.95, greedy. Finished blocks are cached: exact under the
   * block-causal mask (see above). The answer stops at EOS, so a longer
   * budget than LLaDA's costs nothing once done. */
  p->gen_length = 256;
  p->steps = 32;
  p->block_length = 32;
  p->temperature = 0.0;
  p->threshold = 0.95;
  p->cache = UM_CACHE_PREFIX;
}

#define FAIL(...) G_STMT_START { g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, __VA_ARGS__); return FALSE; } G_STMT_END

gboolean
um_schedule_block_causal_validate (const UmGenParams *p, const char *family, int prompt_len, guint max_seq_len,
                                   GError **error)
{
  if (p->block_length <= 0)
    FAIL ("block_length must be positive (got %d)", p->block_length);
  if ((gint64) um_block_causal_canvas (prompt_len, p) > (gint64) max_seq_len)
    FAIL ("prompt (%d tokens) + gen_length (%d), rounded up to whole blocks of %d, exceeds the model's maximum "
          "sequence length (%u)", prompt_len, p->gen_length, p->block_length, max_seq_len);
  if (p->cfg_scale != 0.0)
    FAIL ("%s's schedule has no classifier-free guidance (cfg_scale is LLaDA's)", family);
  if (p->remasking != UM_REMASK_LOW_CONFIDENCE)
    FAIL ("%s's schedule has no remasking strategy (remasking is LLaDA's)", family);
  if (p->logits_eos_inf || p->confidence_eos_eot_inf)
    FAIL ("%s's schedule has no EOS/EOT rules (logits_eos_inf and confidence_eos_eot_inf are LLaDA's)",
          family);
  if (p->factor > 0.0)
    FAIL ("%s's schedule has no factor rule (it is Fast-dLLM's rule for LLaDA's blocks)", family);
  if (p->alg_temp != 0.0)
    FAIL ("%s's schedule has no alg_temp (it is Dream's)", family);
  if (p->greedy)
    FAIL ("%s has no greedy switch (it is RND1's): temperature 0 takes the arg-max", family);
  if ((p->top_p != 0.0 && p->top_p != 1.0) || p->top_k != 0)
    FAIL ("%s's schedule here has no top-p or top-k filter yet: use the temperature alone", family);
  return TRUE;
}
#undef FAIL

/* The forward as the schedule sees it (um_forward_choose_window ()). */
typedef struct {
  UmForward   *fw;
  UmChooseRule rule;
} WindowChoose;

static gboolean
window_choose (gpointer data, const gint32 *ids, int canvas, int window, int start, const gint32 *rows, int n_rows,
               guint64 step, gint32 *out_ids, double *out_conf, GCancellable *cancellable, GError **error)
{
  WindowChoose *w = data;

  w->rule.step = step;
  return um_forward_choose_window (w->fw, ids, canvas, window, start, rows, n_rows, &w->rule, rows, out_ids,
                                   out_conf, cancellable, error);
}

gboolean
um_schedule_block_causal_run (const UmScheduleRun *run, GError **error)
{
  UmModel *model = um_forward_get_model (run->fw);
  const UmModelConfig *c = &model->cfg;
  const UmGenParams *p = run->p;
  const int canvas = um_block_causal_canvas (run->prompt_len, p);
  g_autofree gint32 *x = g_new (gint32, canvas);
  WindowChoose w = { .fw = run->fw };
  UmBlockCausalModel m = { .mask_id = c->mask_id, .eos_id = c->eos_id, .choose = window_choose, .choose_data = &w };
  int n_ids = 0;
  gboolean ok;

  if (!um_schedule_canvas_init (model, run->prompt, run->prompt_len, p, x, canvas, error))
    return FALSE;
  w.rule.seed = p->seed;
  w.rule.temperature = p->temperature;
  w.rule.eos_id = c->eos_id;
  w.rule.eot_id = c->eot_id;
  w.rule.conf_tempered = TRUE;
  um_forward_set_attention_block (run->fw, p->block_length);
  ok = um_schedule_block_causal (&m, x, run->prompt_len, p, run->step_cb, run->user_data, run->cancellable,
                                 run->out_n_steps, &n_ids, error);
  um_forward_set_attention_block (run->fw, 0);
  if (ok)
    g_array_append_vals (run->out_ids, x + run->prompt_len, n_ids);
  return ok;
}

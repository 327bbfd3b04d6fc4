/* um-schedule-timestep.c — Dream's timestep schedule, as _sample () in
 * Dream's generation_utils.py runs it (see dllm-archs.md §2.4):
 *
 *   timesteps = linspace (1, eps, steps + 1)
 *   each step: one forward over the canvas (shifted rows), then
 *     origin: every mask is committed with probability 1 − s/t (all at the
 *             last step), its token from sample_tokens ();
 *     else:   k = int (n_masked · (1 − s/t)) (all at the last step), the k
 *             most confident masks by the rule (maskgit_plus, topk_margin,
 *             entropy) take their token; with alg_temp > 0 the k are drawn
 *             from softmax (confidence / alg_temp) without replacement.
 *
 * Every mask of the canvas is a candidate (a mask in the prompt too), as
 * x == mask_token_id is in the reference. A step that commits nothing is
 * still a step. Committed tokens are never remasked.
 *
 * Fast decoding: with a threshold, a step also commits every mask whose
 * token probability is ≥ it, and the run ends once no mask is left. */
#include "um-schedule.h"

#include <math.h>
#include <string.h>

#include "um-error.h"
#include "um-pool.h"
#include "um-rng.h"
#include "um-topk.h"

static guint64
row_key (int step, gint32 position)
{
  return ((guint64) step << 32) ^ (guint32) position;
}

/* The k positions alg_temp draws: torch.multinomial without replacement
 * is the k largest w / E with E ~ Exp (1) (its exponential race). */
static void
draw_positions (const UmGenParams *p, int step, const double *conf, const gint32 *pos, int n, int L, double *keys,
                int k, gint32 *chosen)
{
  double mx = -INFINITY;

  for (int i = 0; i < L; i++)
    keys[i] = -INFINITY;
  for (int j = 0; j < n; j++)
    mx = MAX (mx, conf[j] / p->alg_temp);
  for (int j = 0; j < n; j++)
    {
      double w = exp (conf[j] / p->alg_temp - mx);
      double u = um_rng_uniform (p->seed, UM_RNG_STREAM_ALG, row_key (step, pos[j]), 0);
      keys[pos[j]] = w / -log (u);
    }
  um_topk_reference (keys, L, k, chosen);
}

typedef struct {
  const UmScheduleModel *m;
  UmScheduleRows        *rows;
  const UmGenParams     *p;
  int                    step;
  const gint32          *asked;
  gint32                *ids;
  double                *conf, *prob;
} RowsJob;

static void
choose_rows (void *ctx, int64_t b, int64_t e, int tid)
{
  const RowsJob *j = ctx;
  UmRowScratch *s = j->rows->scratch[tid];

  for (int64_t r = b; r < e; r++)
    {
      double u = um_rng_uniform (j->p->seed, UM_RNG_STREAM_TOKEN, row_key (j->step, j->asked[r]), 0);
      um_dream_row (s, um_schedule_rows_get (j->rows, j->m, r), j->p, u, &j->ids[r], &j->conf[r], &j->prob[r]);
    }
}

gboolean
um_schedule_timestep (const UmScheduleModel *m,
                      gint32                *x,
                      int                    prompt_len,
                      int                    L,
                      const UmGenParams     *p,
                      UmStepFunc             step_cb,
                      gpointer               user_data,
                      GCancellable          *cancellable,
                      int                   *out_n_steps,
                      GError               **error)
{
  const int steps = p->steps, V = m->vocab;
  const gboolean origin = p->alg == UM_ALG_ORIGIN;
  const UmScheduleEvents events = { step_cb, user_data, x, prompt_len, L, g_get_monotonic_time () };
  g_autofree float *ts = g_new (float, steps + 1);
  g_autofree gint32 *pos = g_new (gint32, L), *asked = g_new (gint32, L), *ids = g_new (gint32, L);
  g_autofree gint32 *chosen = g_new (gint32, L), *commit_pos = g_new (gint32, L), *commit_ids = g_new (gint32, L);
  g_autofree double *conf = g_new (double, L), *prob = g_new (double, L), *scores = g_new (double, L);
  g_autofree float *commit_conf = g_new (float, L);
  g_autofree gboolean *take = g_new0 (gboolean, L);
  UmScheduleRows rows;
  int n_masks0 = 0, step;
  gboolean ok = TRUE;

  if (out_n_steps != NULL)
    *out_n_steps = 0;
  for (int i = 0; i < L; i++)
    n_masks0 += x[i] == m->mask_id;
  if (!um_schedule_rows_init (&rows, m, n_masks0, error))
    {
      um_schedule_rows_clear (&rows);
      return FALSE;
    }
  um_timesteps_f32 (p->eps, steps, ts);

  for (step = 0; step < steps && ok; step++)
    {
      UmScheduleCommits c = { commit_pos, commit_ids, commit_conf, 0 };
      int n = 0, n_asked = 0, k = 0;

      if (g_cancellable_set_error_if_cancelled (cancellable, error))
        {
          ok = FALSE;
          break;
        }
      for (int i = 0; i < L; i++)
        if (x[i] == m->mask_id)
          pos[n++] = i;
      /* Fast decoding is done once every mask is filled. */
      if (n == 0 && p->threshold > 0.0)
        break;
      memset (take, 0, sizeof (gboolean) * L);

      if (origin)
        {
          /* 1 − s/t in float32, 1 at the last step; a coin per mask. */
          const float pt = step < steps - 1 ? 1.0f - ts[step + 1] / ts[step] : 1.0f;
          for (int j = 0; j < n; j++)
            if (um_rng_uniform (p->seed, UM_RNG_STREAM_ORIGIN, (guint64) step, (guint64) pos[j]) < (double) pt)
              asked[n_asked++] = pos[j];
        }
      else
        {
          k = n > 0 ? um_timestep_count (ts, steps, step, n) : 0;
          /* A step that commits nothing needs no forward (the draws are
           * counter-based: skipping one changes no other). */
          if (k > 0 || p->threshold > 0.0)
            {
              memcpy (asked, pos, sizeof (gint32) * n);
              n_asked = n;
            }
        }

      /* The forward only matters for the rows a step can commit. */
      if (n_asked > 0)
        {
          if (!um_schedule_rows_compute (&rows, m, x, L, asked, n_asked, cancellable, error))
            {
              ok = FALSE;
              break;
            }
          {
            RowsJob job = { m, &rows, p, step, asked, ids, conf, prob };
            um_pool_for (n_asked, 1, V >= 4096 ? rows.n_scratch : 1, choose_rows, &job);
          }
        }

      if (origin)
        {
          for (int j = 0; j < n_asked; j++)
            take[j] = TRUE;
        }
      else if (n_asked > 0)
        {
          if (k > 0 && p->alg_temp > 0.0)
            draw_positions (p, step, conf, pos, n, L, scores, k, chosen);
          else if (k > 0)
            {
              /* torch.topk over the whole canvas, non-masks at −inf. */
              for (int i = 0; i < L; i++)
                scores[i] = -INFINITY;
              for (int j = 0; j < n; j++)
                scores[pos[j]] = conf[j];
              um_topk_reference (scores, L, k, chosen);
            }
          /* chosen holds canvas positions; pos is ascending: find each. */
          for (int q = 0; q < k; q++)
            {
              int lo = 0, hi = n - 1;
              while (lo < hi)
                {
                  int mid = (lo + hi) / 2;
                  if (pos[mid] < chosen[q])
                    lo = mid + 1;
                  else
                    hi = mid;
                }
              take[lo] = TRUE;
            }
          if (p->threshold > 0.0)
            for (int j = 0; j < n; j++)
              take[j] = take[j] || prob[j] >= p->threshold;
        }

      /* take[] follows asked[], which is in position order. */
      for (int j = 0; j < n_asked; j++)
        if (take[j])
          {
            x[asked[j]] = ids[j];
            c.pos[c.n] = asked[j];
            c.ids[c.n] = ids[j];
            c.conf[c.n] = (float) prob[j];
            c.n++;
          }
      {
        gboolean done = p->threshold > 0.0 && c.n == n;
        um_schedule_emit (&events, &c, step, done ? step + 1 : steps, 0, 1);
      }
      if (out_n_steps != NULL)
        *out_n_steps = step + 1;
    }
  um_schedule_rows_clear (&rows);
  return ok;
}

/* ---- its row in the schedule table ---- */

void
um_schedule_timestep_defaults (UmGenParams *p)
{
  /* Dream's README: temperature 0.2, top_p 0.95, alg entropy, alg_temp 0.
   * The nucleus stays off as in the code's defaults (top_p None): the
   * fixtures' command lines reproduce without it, and at temperature 0 a
   * one-token nucleus makes every confidence 1. */
  p->temperature = 0.2;
  p->alg = UM_ALG_ENTROPY;
  p->eps = 1e-3;
}

#define FAIL(...) G_STMT_START { g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, __VA_ARGS__); return FALSE; } G_STMT_END

gboolean
um_schedule_timestep_validate (const UmGenParams *p, const char *family, int prompt_len, guint max_seq_len,
                               GError **error)
{
  if (!um_gen_params_check_filters (p, error) || !um_gen_params_check_no_blocks (p, family, error))
    return FALSE;
  if ((guint) p->alg > (guint) UM_ALG_ENTROPY)
    FAIL ("unknown alg %d", (int) p->alg);
  if (!(p->eps >= 0.0 && p->eps < 1.0))
    FAIL ("eps must be in [0, 1) (got %g)", p->eps);
  if (!(p->alg_temp >= 0.0) || !isfinite (p->alg_temp))
    FAIL ("alg_temp must be a finite number ≥ 0 (got %g)", p->alg_temp);
  if (p->greedy)
    FAIL ("%s has no greedy switch (it is RND1's): temperature 0 takes the arg-max", family);
  if (p->threshold > 0.0 && p->alg == UM_ALG_ORIGIN)
    FAIL ("a threshold needs a confidence: alg origin commits at random");
  return TRUE;
}
#undef FAIL

gboolean
um_schedule_timestep_run (const UmScheduleRun *run, GError **error)
{
  return um_schedule_run_rows (um_schedule_timestep, run, error);
}

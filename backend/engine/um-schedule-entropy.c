/* um-schedule-entropy.c — RND1's schedule, as diffusion_sample () in
 * RND1's rnd/sampling.py runs it (see dllm-archs.md §4.4):
 *
 *   canvas = prompt + (gen_length − 1) masks + one pad token (upstream
 *            reserves the slot of an EOS it does not write; it stays pad);
 *   one forward: each maskable position i takes the token and entropy of
 *            row i − 1 (logits / max (T, 1e-8), top-k, top-p, log-softmax;
 *            greedy: arg-max, else drawn);
 *   for step = N − 1 … 1: keep the ⌊total · step / N⌋ (float32) maskable
 *            positions of highest entropy masked, commit every other one,
 *            forward again if masks are left;
 *   finally commit what is left. N forwards at most, N steps reported.
 *
 * Maskable: the answer's masks (not the reserved slot, not the prompt);
 * upstream also excludes EOS, pad and, with a BOS id, position 0. */
#include "um-schedule.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "um-error.h"
#include "um-pool.h"
#include "um-rng.h"
#include "um-topk.h"

typedef struct {
  const UmScheduleModel *m;
  const UmGenParams     *p;
  UmScheduleRows         rows;
  gint32                *pos;       /* maskable positions, ascending */
  gint32                *pred;      /* per canvas position: its token from the last forward */
  double                *ent;       /* ... its entropy */
  double                *prob;      /* ... and its probability */
  int                    n_forward;
} EntropyRun;

/* One forward over the maskable positions (upstream computes every row;
 * only the maskable ones are ever read). */
static void
score_rows (void *ctx, int64_t b, int64_t e, int tid)
{
  EntropyRun *r = ctx;
  UmRowScratch *s = r->rows.scratch[tid];

  for (int64_t j = b; j < e; j++)
    {
      guint64 key = ((guint64) r->n_forward << 32) ^ (guint32) r->pos[j];
      double u = um_rng_uniform (r->p->seed, UM_RNG_STREAM_TOKEN, key, 0);
      um_rnd1_row (s, um_schedule_rows_get (&r->rows, r->m, j), r->p, u, &r->pred[r->pos[j]], &r->ent[r->pos[j]],
                   &r->prob[r->pos[j]]);
    }
}

static gboolean
score (EntropyRun *r, const gint32 *x, int L, const gboolean *maskable, GCancellable *cancellable, GError **error)
{
  const int V = r->m->vocab;
  int n = 0;

  for (int i = 0; i < L; i++)
    if (maskable[i])
      r->pos[n++] = i;
  if (!um_schedule_rows_compute (&r->rows, r->m, x, L, r->pos, n, cancellable, error))
    return FALSE;
  um_pool_for (n, 1, V >= 4096 ? r->rows.n_scratch : 1, score_rows, r);
  r->n_forward++;
  return TRUE;
}

/* Commits the maskable positions not in @keep; reports them. */
static void
commit (EntropyRun *r, gint32 *x, int L, gboolean *maskable, const gboolean *keep, UmScheduleCommits *c)
{
  c->n = 0;
  for (int i = 0; i < L; i++)
    if (maskable[i] && (keep == NULL || !keep[i]))
      {
        x[i] = r->pred[i];
        maskable[i] = FALSE;
        c->pos[c->n] = i;
        c->ids[c->n] = x[i];
        c->conf[c->n] = (float) r->prob[i];
        c->n++;
      }
}

gboolean
um_schedule_entropy (const UmScheduleModel *m,
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
  const int N = p->steps;
  /* Upstream: a pad id of None is 0. */
  const gint32 pad = m->pad_id >= 0 ? m->pad_id : 0;
  const UmScheduleEvents events = { step_cb, user_data, x, prompt_len, L, g_get_monotonic_time () };
  g_autofree gboolean *maskable = g_new0 (gboolean, L), *keep = g_new0 (gboolean, L);
  g_autofree double *scores = g_new (double, L);
  g_autofree gint32 *chosen = g_new (gint32, L), *commit_pos = g_new (gint32, L), *commit_ids = g_new (gint32, L);
  g_autofree gint32 *pos = g_new (gint32, L), *pred = g_new0 (gint32, L);
  g_autofree double *ent = g_new0 (double, L), *prob = g_new0 (double, L);
  g_autofree float *commit_conf = g_new (float, L);
  UmScheduleCommits c = { commit_pos, commit_ids, commit_conf, 0 };
  EntropyRun r = { m, p, { 0 }, pos, pred, ent, prob, 0 };
  int total = 0, n_events = 0;
  gboolean ok = FALSE;

  if (out_n_steps != NULL)
    *out_n_steps = 0;
  if (L - prompt_len < 2 || x[L - 1] != m->mask_id)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "RND1's schedule reserves the answer's last position (pad): it needs at least 2 answer "
                   "positions and no constraint in the last one");
      return FALSE;
    }
  x[L - 1] = pad;
  for (int i = prompt_len; i < L; i++)
    {
      maskable[i] = x[i] == m->mask_id && x[i] != m->eos_id && x[i] != pad;
      total += maskable[i];
    }
  if (prompt_len == 0 && m->bos_id >= 0 && maskable[0])
    {
      maskable[0] = FALSE;
      total--;
    }
  if (!um_schedule_rows_init (&r.rows, m, MAX (total, 1), error))
    goto out;

  if (total > 0 && !score (&r, x, L, maskable, cancellable, error))
    goto out;
  for (int step = N - 1; step >= 1; step--)
    {
      const int k = um_entropy_keep_count (total, step, N);
      gboolean left = FALSE;

      if (g_cancellable_set_error_if_cancelled (cancellable, error))
        goto out;
      memset (keep, 0, sizeof (gboolean) * L);
      if (k > 0)
        {
          /* The highest entropies stay masked: torch.topk over the whole
           * canvas, what is not maskable at −finfo.max. */
          for (int i = 0; i < L; i++)
            scores[i] = maskable[i] ? ent[i] : -FLT_MAX;
          um_topk_reference (scores, L, MIN (k, L), chosen);
          for (int q = 0; q < MIN (k, L); q++)
            keep[chosen[q]] = TRUE;
        }
      commit (&r, x, L, maskable, keep, &c);
      um_schedule_emit (&events, &c, n_events++, N, 0, 1);
      for (int i = 0; i < L && !left; i++)
        left = maskable[i];
      if (left && !score (&r, x, L, maskable, cancellable, error))
        goto out;
    }
  if (g_cancellable_set_error_if_cancelled (cancellable, error))
    goto out;
  commit (&r, x, L, maskable, NULL, &c);
  um_schedule_emit (&events, &c, n_events++, N, 0, 1);
  ok = TRUE;

out:
  if (out_n_steps != NULL)
    *out_n_steps = n_events;
  um_schedule_rows_clear (&r.rows);
  return ok;
}

/* ---- its row in the schedule table ---- */

void
um_schedule_entropy_defaults (UmGenParams *p)
{
  /* RND1GenerationConfig: temperature 0.1, greedy False. */
  p->temperature = 0.1;
  p->greedy = FALSE;
}

#define FAIL(...) G_STMT_START { g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, __VA_ARGS__); return FALSE; } G_STMT_END

gboolean
um_schedule_entropy_validate (const UmGenParams *p, const char *family, int prompt_len, guint max_seq_len,
                              GError **error)
{
  if (!um_gen_params_check_filters (p, error) || !um_gen_params_check_no_blocks (p, family, error))
    return FALSE;
  if (p->gen_length < 2)
    FAIL ("%s reserves the answer's last position: gen_length must be at least 2 (got %d)", family,
          p->gen_length);
  for (int i = 0; i < p->n_constraints; i++)
    if (p->constraints[i].offset >= p->gen_length - 1)
      FAIL ("%s reserves the answer's last position (%d): no constraint may start there", family,
            p->gen_length - 1);
  if (p->alg_temp != 0.0)
    FAIL ("%s's schedule has no alg_temp (it is Dream's)", family);
  if (p->threshold > 0.0)
    FAIL ("%s's schedule has no threshold rule: each step's count is fixed by its entropy order", family);
  return TRUE;
}
#undef FAIL

gboolean
um_schedule_entropy_run (const UmScheduleRun *run, GError **error)
{
  return um_schedule_run_rows (um_schedule_entropy, run, error);
}

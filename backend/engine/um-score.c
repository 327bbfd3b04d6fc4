#include "um-score.h"

#include <math.h>
#include <string.h>

#include "um-error.h"
#include "um-rng.h"

void
um_score_params_init (UmScoreParams *p)
{
  memset (p, 0, sizeof *p);
  p->mc_samples = 32;
  p->batch = 8;
  p->seed = 0;
}

/* −log softmax(row)[target], in double so a 126k-entry sum keeps its digits. */
static double
neg_log_prob (const float *row, guint vocab, gint32 target)
{
  double mx = -INFINITY, sum = 0.0;

  for (guint v = 0; v < vocab; v++)
    if (row[v] > mx)
      mx = row[v];
  for (guint v = 0; v < vocab; v++)
    sum += exp ((double) row[v] - mx);
  return mx + log (sum) - (double) row[target];
}

void
um_score_mean_spread (const double *x,
                      int           n,
                      double       *mean,
                      double       *std_error)
{
  double dmean = 0.0, var = 0.0;

  /* Deviations from the first sample, not from the mean: d_s = x_s − x_0 is
   * exactly 0 when the samples are equal, whereas their computed mean
   * (x + … + x)/n need not equal x (five copies of 0.1·k often do not), and
   * then neither the mean nor a zero spread would come out exact. Shifting by
   * a sample is also the textbook cure for cancellation in the variance. */
  for (int s = 1; s < n; s++)
    dmean += x[s] - x[0];
  dmean /= n;
  *mean = x[0] + dmean;
  *std_error = 0.0;
  if (n < 2)
    return;
  for (int s = 0; s < n; s++)
    {
      double d = (x[s] - x[0]) - dmean;
      var += d * d;
    }
  *std_error = sqrt (var / (n - 1) / n);
}

gboolean
um_score_answer (UmForward           *fw,
                 const gint32        *prompt,
                 int                  prompt_len,
                 const gint32        *answer,
                 int                  answer_len,
                 const UmScoreParams *params,
                 UmScore             *out,
                 GCancellable        *cancellable,
                 GError             **error)
{
  const UmModelConfig *cfg = &um_forward_get_model (fw)->cfg;
  const int n = answer_len, L = prompt_len + answer_len;
  int batch, start;
  g_autofree double *lls = NULL;
  g_autofree gint32 *ids = NULL, *rows = NULL, *perm = NULL, *targets = NULL;
  g_autofree int *counts = NULL;
  g_autofree float *logits = NULL;

  memset (out, 0, sizeof *out);
  if (prompt_len < 0 || n < 1)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "nothing to score: the answer is empty");
      return FALSE;
    }
  if (params->mc_samples < 1 || params->batch < 1)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "samples (%d) and batch (%d) must be at least 1", params->mc_samples, params->batch);
      return FALSE;
    }
  if ((guint) L > cfg->max_seq_len)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "prompt and answer are %d tokens; the model takes at most %u", L, cfg->max_seq_len);
      return FALSE;
    }
  for (int i = 0; i < L; i++)
    {
      gint32 t = i < prompt_len ? prompt[i] : answer[i - prompt_len];
      if (t < 0 || (guint) t >= cfg->vocab_size)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                       "token %d at position %d is outside the vocabulary (%u)", t, i, cfg->vocab_size);
          return FALSE;
        }
    }

  batch = MIN (params->batch, params->mc_samples);
  ids = g_new (gint32, (gsize) batch * L);
  rows = g_new (gint32, (gsize) batch * n);
  targets = g_new (gint32, (gsize) batch * n);
  perm = g_new (gint32, n);
  lls = g_new (double, params->mc_samples);
  counts = g_new (int, batch);
  logits = g_try_new (float, (gsize) batch * n * cfg->vocab_size);
  if (logits == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY,
                   "no memory for %d × %d rows of logits; use a smaller batch", batch, n);
      return FALSE;
    }

  /* One random start; sample s masks k_s = round(start + s·n/S) wrapped
   * into 1..n positions, so the mask ratios cover (0, 1] evenly. */
  start = 1 + (int) (um_rng_uniform (params->seed, UM_RNG_STREAM_SCORE, G_MAXUINT64, 0) * n);
  start = MIN (start, n);

  for (int s0 = 0; s0 < params->mc_samples; s0 += batch)
    {
      int nb = MIN (batch, params->mc_samples - s0), n_rows = 0;

      for (int b = 0; b < nb; b++)
        {
          int s = s0 + b;
          int k = (int) lround (start + (double) s * n / params->mc_samples);
          gint32 *seq = ids + (gsize) b * L;

          k = (k - 1) % n + 1;
          counts[b] = k;
          if (prompt_len > 0)
            memcpy (seq, prompt, sizeof (gint32) * prompt_len);
          memcpy (seq + prompt_len, answer, sizeof (gint32) * n);
          /* Fisher–Yates from the counter-based noise; its first k
           * entries are the masked positions. */
          for (int i = 0; i < n; i++)
            perm[i] = i;
          for (int i = n - 1; i > 0; i--)
            {
              int j = (int) (um_rng_uniform (params->seed, UM_RNG_STREAM_SCORE, (guint64) s, (guint64) i)
                             * (i + 1));
              gint32 t = perm[i];
              perm[i] = perm[MIN (j, i)];
              perm[MIN (j, i)] = t;
            }
          /* Rows must ascend: mark, then collect in order. */
          for (int i = 0; i < k; i++)
            seq[prompt_len + perm[i]] = cfg->mask_id;
          for (int i = 0; i < n; i++)
            if (seq[prompt_len + i] == cfg->mask_id && answer[i] != cfg->mask_id)
              {
                rows[n_rows] = b * L + prompt_len + i;
                targets[n_rows] = answer[i];
                n_rows++;
              }
        }

      if (!um_forward_logits (fw, ids, nb, L, rows, n_rows, logits, cancellable, error))
        return FALSE;

      for (int b = 0, r = 0; b < nb; b++)
        {
          double nll = 0.0, ll;
          for (; r < n_rows && rows[r] / L == b; r++)
            nll += neg_log_prob (logits + (gsize) r * cfg->vocab_size, cfg->vocab_size, targets[r]);
          /* Divided by the mask ratio k/n, as the bound weights it. */
          ll = -nll * n / counts[b];
          lls[s0 + b] = ll;
        }
    }

  out->n_samples = params->mc_samples;
  out->n_tokens = n;
  um_score_mean_spread (lls, params->mc_samples, &out->log_likelihood, &out->std_error);
  out->per_token = out->log_likelihood / n;
  return TRUE;
}

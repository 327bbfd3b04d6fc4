/* um-score.h — how likely the model finds an answer after a prompt: the
 * Monte Carlo estimate of the masked-diffusion likelihood bound that
 * LLaDA's evaluation uses (see docs: training.md). Used to compare the
 * outputs of different schedules under the full model. */
#pragma once

#include <gio/gio.h>
#include "um-forward.h"

G_BEGIN_DECLS

typedef struct {
  int     mc_samples;   /* masked copies of the answer, ≥ 1 (default 32) */
  int     batch;        /* copies per forward pass (default 8) */
  guint64 seed;         /* the masks drawn; the same seed scores every answer of one length alike */
} UmScoreParams;

void um_score_params_init (UmScoreParams *p);

typedef struct {
  double log_likelihood;   /* estimate of log p(answer | prompt), nats; ≤ the true value in expectation */
  double per_token;        /* log_likelihood / answer length */
  double std_error;        /* of log_likelihood, over the samples */
  int    n_tokens;
  int    n_samples;
} UmScore;

/* The mean of @n ≥ 1 samples and its standard error (0 for one sample).
 * Equal samples give exactly their value and exactly 0 by construction. */
void um_score_mean_spread (const double *x,
                           int           n,
                           double       *mean,
                           double       *std_error);

/* Each sample masks k of the n answer positions (k stratified over the
 * samples from one random start, as the reference's forward_process does)
 * and adds Σ −log p(x_i) over the masked positions, divided by k/n. Only the
 * masked rows' logits are computed. */
gboolean um_score_answer (UmForward           *fw,
                          const gint32        *prompt,
                          int                  prompt_len,
                          const gint32        *answer,
                          int                  answer_len,
                          const UmScoreParams *params,
                          UmScore             *out,
                          GCancellable        *cancellable,
                          GError             **error);

G_END_DECLS

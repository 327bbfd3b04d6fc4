/* um-schedule.c — what the schedules share: the logits shift, the
 * reference's float32 counts, the top-k / top-p filters and the row rules
 * of Dream and RND1 (see um-schedule.h). */
#include "um-pool.h"
#include "um-schedule.h"

#include <math.h>
#include <string.h>

#include "um-error.h"
#include "um-tokenizer.h"
#include "um-topk.h"

int
um_logit_rows (gboolean shift, const gint32 *positions, int n, gint32 *rows, gint32 *row_of)
{
  int n_rows = 0;

  for (int i = 0; i < n; i++)
    {
      gint32 r = shift ? MAX (positions[i] - 1, 0) : positions[i];
      /* Positions ascend, so rows do too: a repeat is the previous row. */
      if (n_rows == 0 || rows[n_rows - 1] != r)
        rows[n_rows++] = r;
      row_of[i] = n_rows - 1;
    }
  return n_rows;
}

/* ---- the reference's float32 arithmetic ---- */

/* Float operations as torch's kernels do them (C11 without contraction,
 * the build's ISO mode, rounds each plain one to float). Its linspace is
 * a fused multiply-add on the CPU and on CUDA alike: start + step·i, and
 * from the middle end − step·(n − 1 − i), each rounded once. Checked
 * against torch 2.11 on both devices: every element of 5 eps × 135 step
 * counts, and every count int (n · (1 − s/t)) for n ≤ 1024 (the plain
 * product and sum differ in 11 326 elements and 21 578 counts). */
void
um_timesteps_f32 (double eps, int steps, float *ts)
{
  const gint64 n = (gint64) steps + 1;
  const float start = 1.0f, end = (float) eps;
  /* torch: (end − start) / (steps − 1), the count converted to float. */
  const float step = (end - start) / (float) (n - 1);
  const gint64 halfway = n / 2;

  for (gint64 i = 0; i < n; i++)
    ts[i] = i < halfway ? fmaf (step, (float) i, start) : fmaf (-step, (float) (n - i - 1), end);
}

int
um_timestep_count (const float *ts, int steps, int i, int n_masked)
{
  float t, s, r;

  if (i >= steps - 1)
    return n_masked;
  t = ts[i];
  s = ts[i + 1];
  /* mask_index.sum () / batch is a float32 tensor; 1 − s/t too. */
  r = (float) n_masked * (1.0f - s / t);
  return (int) r;
}

/* Checked against torch 2.11 (CPU and CUDA) for totals ≤ 1024 and 15 step
 * counts up to 512. */
int
um_entropy_keep_count (int total, int step, int steps)
{
  /* rate = step / num_steps is a Python float; the long tensor times it is
   * float32, the scalar rounded to float first. */
  const float rate = (float) ((double) step / (double) steps);
  const float v = (float) total * rate;
  return v > 0.0f ? (int) v : 0;
}

/* ---- row rules ---- */

struct _UmRowScratch {
  int     vocab;
  double *z;        /* the filtered logits */
  double *e;        /* exp (z − max) */
  UmRowRanked *ranked;   /* top-p's sorted candidates */
  gint32 *sel;      /* top-k's indices */
};

UmRowScratch *
um_row_scratch_new (int vocab)
{
  UmRowScratch *s = g_new0 (UmRowScratch, 1);

  s->vocab = vocab;
  s->z = g_new (double, vocab);
  s->e = g_new (double, vocab);
  s->ranked = g_new (UmRowRanked, vocab);
  s->sel = g_new (gint32, vocab);
  return s;
}

void
um_row_scratch_free (UmRowScratch *s)
{
  if (s == NULL)
    return;
  g_free (s->z);
  g_free (s->e);
  g_free (s->ranked);
  g_free (s->sel);
  g_free (s);
}

/* exp (z − max) into @e; returns the sum. A row of −inf only gives 0s. */
static double
exp_row (const double *z, int V, double *e)
{
  double mx = -INFINITY, sum = 0.0;

  for (int v = 0; v < V; v++)
    mx = z[v] > mx ? z[v] : mx;
  for (int v = 0; v < V; v++)
    sum += (e[v] = isfinite (mx) ? exp (z[v] - mx) : 0.0);
  return sum;
}

static int
ranked_compare (const void *a, const void *b)
{
  const UmRowRanked *x = a, *y = b;
  if (x->e != y->e)
    return x->e > y->e ? -1 : 1;
  return (x->i > y->i) - (x->i < y->i);
}

/* top_p_logits () (Dream) and apply_top_p_filtering () (RND1) agree: sort
 * the probabilities down, remove every token after the first whose running
 * sum exceeds @top_p. Only the head of the order matters, so the sort runs
 * on the tokens above a threshold, lowered until their sum passes top_p. */
static void
filter_top_p (UmRowScratch *s, double top_p)
{
  const int V = s->vocab;
  double *z = s->z, *e = s->e;
  const double total = exp_row (z, V, e);
  double thr = total / 64.0;

  if (!(total > 0.0))
    return;
  for (;;)
    {
      int n = 0, cut = -1;
      double cum = 0.0;

      for (int v = 0; v < V; v++)
        if (e[v] >= thr)
          {
            s->ranked[n].e = e[v];
            s->ranked[n].i = v;
            n++;
          }
      qsort (s->ranked, n, sizeof (UmRowRanked), ranked_compare);
      for (int j = 0; j < n; j++)
        {
          /* Shifted right: the token that crosses top_p stays. */
          if (j > 0 && cum > top_p)
            {
              cut = j;
              break;
            }
          cum += s->ranked[j].e / total;
        }
      if (cut >= 0 || n == V || thr == 0.0)
        {
          /* Everything below the threshold ranks after the cut too. */
          if (cut >= 0)
            {
              for (int v = 0; v < V; v++)
                if (e[v] < thr)
                  z[v] = -INFINITY;
              for (int j = cut; j < n; j++)
                z[s->ranked[j].i] = -INFINITY;
            }
          return;
        }
      thr = thr > 1e-300 * total ? thr / 64.0 : 0.0;
    }
}

/* Dream's top_k_logits (): remove what is below the k-th largest (ties at
 * the k-th stay). */
static void
filter_top_k_value (UmRowScratch *s, int k)
{
  const int V = s->vocab;
  double kth = INFINITY;

  if (k >= V)
    return;
  um_topk_reference (s->z, V, k, s->sel);
  for (int j = 0; j < k; j++)
    kth = MIN (kth, s->z[s->sel[j]]);
  for (int v = 0; v < V; v++)
    if (s->z[v] < kth)
      s->z[v] = -INFINITY;
}

/* RND1's apply_top_k_filtering (): exactly the k of torch.topk. */
static void
filter_top_k_exact (UmRowScratch *s, int k)
{
  const int V = s->vocab;

  if (k >= V)
    return;
  um_topk_reference (s->z, V, k, s->sel);
  /* Mark the kept ones in e, then clear the rest. */
  for (int v = 0; v < V; v++)
    s->e[v] = 0.0;
  for (int j = 0; j < k; j++)
    s->e[s->sel[j]] = 1.0;
  for (int v = 0; v < V; v++)
    if (s->e[v] == 0.0)
      s->z[v] = -INFINITY;
}

static gboolean
top_p_on (double top_p)
{
  return top_p > 0.0 && top_p < 1.0;
}

/* The token of @e (sum @total) drawn with @u: the first whose running sum
 * exceeds u·total (Categorical's inverse distribution); the last non-zero
 * one if rounding leaves u·total above the sum. */
static gint32
draw (const double *e, int V, double total, double u)
{
  const double target = u * total;
  double cum = 0.0;
  gint32 last = 0;

  for (int v = 0; v < V; v++)
    {
      if (e[v] <= 0.0)
        continue;
      cum += e[v];
      last = v;
      if (cum > target)
        return v;
    }
  return last;
}

static gint32
argmax (const double *a, int V)
{
  gint32 best = 0;

  for (int v = 1; v < V; v++)
    if (a[v] > a[best])
      best = v;
  return best;
}

void
um_dream_row (UmRowScratch *s, const float *logits, const UmGenParams *p, double u, gint32 *out_id,
              double *out_conf, double *out_p)
{
  const int V = s->vocab;
  double total, p1 = 0.0, p2 = 0.0;
  gint32 id;

  for (int v = 0; v < V; v++)
    s->z[v] = p->temperature > 0.0 ? (double) logits[v] / p->temperature : (double) logits[v];
  if (top_p_on (p->top_p))
    filter_top_p (s, p->top_p);
  if (p->top_k > 0)
    filter_top_k_value (s, p->top_k);
  total = exp_row (s->z, V, s->e);
  id = p->temperature > 0.0 ? draw (s->e, V, total, u) : argmax (s->e, V);
  *out_id = id;
  *out_p = s->e[id] / total;

  switch (p->alg)
    {
    case UM_ALG_TOPK_MARGIN:
      for (int v = 0; v < V; v++)
        {
          double q = s->e[v] / total;
          if (q > p1)
            {
              p2 = p1;
              p1 = q;
            }
          else if (q > p2)
            p2 = q;
        }
      *out_conf = p1 - p2;
      break;
    case UM_ALG_ENTROPY:
      {
        double h = 0.0;
        for (int v = 0; v < V; v++)
          {
            double q = s->e[v] / total;
            h += q * log (q + 1e-10);
          }
        *out_conf = h;
      }
      break;
    case UM_ALG_ORIGIN:
    case UM_ALG_MASKGIT_PLUS:
    default:
      *out_conf = *out_p;
      break;
    }
}

void
um_rnd1_row (UmRowScratch *s, const float *logits, const UmGenParams *p, double u, gint32 *out_id,
             double *out_entropy, double *out_p)
{
  const int V = s->vocab;
  const double t = MAX (p->temperature, 1e-8);
  double total, lse, h = 0.0;

  for (int v = 0; v < V; v++)
    s->z[v] = (double) logits[v] / t;
  if (p->top_k > 0)
    filter_top_k_exact (s, p->top_k);
  if (top_p_on (p->top_p))
    filter_top_p (s, p->top_p);
  total = exp_row (s->z, V, s->e);
  /* log_softmax: z − max − log Σ exp (z − max); e holds exp (z − max). */
  {
    double mx = -INFINITY;
    for (int v = 0; v < V; v++)
      mx = s->z[v] > mx ? s->z[v] : mx;
    lse = mx + log (total);
  }
  *out_id = p->greedy ? argmax (s->z, V) : draw (s->e, V, total, u);
  *out_p = s->e[*out_id] / total;
  for (int v = 0; v < V; v++)
    {
      double logp = s->z[v] - lse;
      /* A filtered token: exp (−inf) · −inf is NaN, as in upstream's sum. */
      h += exp (logp) * logp;
    }
  *out_entropy = -h;
}

/* ---- the canvas a run starts from ---- */

gboolean
um_schedule_canvas_init (UmModel           *model,
                         const gint32      *prompt,
                         int                prompt_len,
                         const UmGenParams *p,
                         gint32            *x,
                         int                canvas_len,
                         GError           **error)
{
  g_autofree gboolean *taken = NULL;

  memcpy (x, prompt, sizeof (gint32) * prompt_len);
  for (int i = prompt_len; i < canvas_len; i++)
    x[i] = model->cfg.mask_id;
  if (p->n_constraints == 0)
    return TRUE;
  taken = g_new0 (gboolean, p->gen_length);
  for (int i = 0; i < p->n_constraints; i++)
    {
      const UmGenConstraint *ci = &p->constraints[i];
      g_autoptr(GArray) ids = g_array_new (FALSE, FALSE, sizeof (gint32));

      if (ci->word == NULL)
        g_array_append_vals (ids, ci->ids, ci->n_ids);
      else
        {
          g_autofree char *text = g_ascii_isspace (ci->word[0]) ? g_strdup (ci->word)
                                                                 : g_strconcat (" ", ci->word, NULL);
          if (model->tokenizer == NULL)
            {
              g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "word constraints need the model's tokenizer");
              return FALSE;
            }
          if (!um_tokenizer_encode (model->tokenizer, text, -1, ids, error))
            return FALSE;
        }
      if (ids->len == 0 || (gint64) ci->offset + ids->len > p->gen_length)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                       "the constraint “%s” at offset %d (%u tokens) does not fit in the answer (%d tokens)",
                       ci->word ? ci->word : "(tokens)", ci->offset, ids->len, p->gen_length);
          return FALSE;
        }
      for (guint t = 0; t < ids->len; t++)
        {
          gint32 id = g_array_index (ids, gint32, t);
          int at = ci->offset + (int) t;
          if (id < 0 || (guint) id >= model->cfg.vocab_size || id == model->cfg.mask_id)
            {
              g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                           "the constraint “%s” tokenizes to %d, which the model cannot take",
                           ci->word ? ci->word : "(tokens)", id);
              return FALSE;
            }
          if (taken[at])
            {
              g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                           "the constraint “%s” at offset %d overlaps another one at answer position %d",
                           ci->word ? ci->word : "(tokens)", ci->offset, at);
              return FALSE;
            }
          taken[at] = TRUE;
          x[prompt_len + at] = id;
        }
    }
  return TRUE;
}

/* The forward as the timestep and entropy schedules see it: raw rows. */
static gboolean
forward_logits (gpointer data, const gint32 *ids, int seq_len, const gint32 *rows, int n_rows, float *logits,
                GCancellable *cancellable, GError **error)
{
  return um_forward_logits (data, ids, 1, seq_len, rows, n_rows, logits, cancellable, error);
}

gboolean
um_schedule_run_rows (UmScheduleRowsCore core, const UmScheduleRun *run, GError **error)
{
  UmModel *model = um_forward_get_model (run->fw);
  const UmModelConfig *c = &model->cfg;
  const UmGenParams *p = run->p;
  const int L = run->prompt_len + p->gen_length;
  g_autofree gint32 *x = g_new (gint32, L);
  UmScheduleModel m = { 0 };
  gboolean ok;

  m.vocab = (int) c->vocab_size;
  m.mask_id = c->mask_id;
  m.eos_id = c->eos_id;
  m.pad_id = c->pad_id;
  m.bos_id = c->bos_id;
  m.shift = c->shift_logits;
  m.logits = forward_logits;
  m.logits_data = run->fw;
  if (!um_schedule_canvas_init (model, run->prompt, run->prompt_len, p, x, L, error))
    return FALSE;
  ok = core (&m, x, run->prompt_len, L, p, run->step_cb, run->user_data, run->cancellable, run->out_n_steps, error);
  if (ok)
    g_array_append_vals (run->out_ids, x + run->prompt_len, p->gen_length);
  return ok;
}

/* ---- the logits rows of a step ---- */

gboolean
um_schedule_rows_init (UmScheduleRows *r, const UmScheduleModel *m, int max_positions, GError **error)
{
  const size_t floats = (size_t) MAX (max_positions, 1) * m->vocab;

  memset (r, 0, sizeof *r);
  r->rows = g_new (gint32, MAX (max_positions, 1));
  r->row_of = g_new (gint32, MAX (max_positions, 1));
  r->logits = g_try_malloc (floats * sizeof (float));
  r->n_scratch = um_pool_max_threads ();
  r->scratch = g_new0 (UmRowScratch *, r->n_scratch);
  for (int i = 0; i < r->n_scratch; i++)
    r->scratch[i] = um_row_scratch_new (m->vocab);
  if (r->logits == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY, "out of memory for %d × %d logits", max_positions,
                   m->vocab);
      return FALSE;
    }
  return TRUE;
}

void
um_schedule_rows_clear (UmScheduleRows *r)
{
  g_clear_pointer (&r->rows, g_free);
  g_clear_pointer (&r->row_of, g_free);
  g_clear_pointer (&r->logits, g_free);
  for (int i = 0; r->scratch != NULL && i < r->n_scratch; i++)
    um_row_scratch_free (r->scratch[i]);
  g_clear_pointer (&r->scratch, g_free);
}

gboolean
um_schedule_rows_compute (UmScheduleRows *r, const UmScheduleModel *m, const gint32 *x, int seq_len,
                          const gint32 *positions, int n, GCancellable *cancellable, GError **error)
{
  r->n_rows = um_logit_rows (m->shift, positions, n, r->rows, r->row_of);
  if (r->n_rows == 0)
    return TRUE;
  return m->logits (m->logits_data, x, seq_len, r->rows, r->n_rows, r->logits, cancellable, error);
}

void
um_schedule_emit (const UmScheduleEvents *e, const UmScheduleCommits *c, int step, int n_steps, int block,
                  int n_blocks)
{
  UmStepEvent ev = { 0 };

  if (e->step_cb == NULL)
    return;
  ev.step = step;
  ev.n_steps = n_steps;
  ev.block = block;
  ev.n_blocks = n_blocks;
  ev.n_committed = c->n;
  ev.positions = c->pos;
  ev.ids = c->ids;
  ev.confidences = c->conf;
  ev.canvas = e->canvas;
  ev.prompt_len = e->prompt_len;
  ev.seq_len = e->seq_len;
  ev.elapsed = (g_get_monotonic_time () - e->t0) / 1e6;
  e->step_cb (&ev, e->user_data);
}

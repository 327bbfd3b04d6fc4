/* Dream's timestep and RND1's entropy schedules on a fake forward whose
 * logits are chosen so that every decision is known in advance, their row
 * rules on synthetic logits, the float32 counts against the fixtures, the
 * logits shift, and the per-family parameter rules. */
#include <math.h>
#include <string.h>

#include "um-error.h"
#include "um-schedule.h"
#include "um-test-util.h"

#define V 16

/* ---- a fake forward ----
 *
 * Row r's logits: token tok(r) at height(r), the others at 0, so
 * row r's confidence and entropy depend on r alone, through height(r). The
 * forward records the rows each call asked for. */

typedef struct {
  double     (*height) (int row);
  int        calls;
  GPtrArray *asked;          /* GArray of gint32 per call */
  int        fail_at;        /* call that fails (0: none) */
} Fake;

static gint32
tok (int row)
{
  return 1 + row % 7;
}

static double
rising (int row)
{
  /* Later rows more confident: distinct heights, far apart. */
  return 2.0 + 0.5 * row;
}

static gboolean
fake_logits (gpointer data, const gint32 *ids, int seq_len, const gint32 *rows, int n_rows, float *logits,
             GCancellable *cancellable, GError **error)
{
  Fake *f = data;
  GArray *a = g_array_new (FALSE, FALSE, sizeof (gint32));

  (void) ids;
  (void) cancellable;
  f->calls++;
  g_array_append_vals (a, rows, n_rows);
  g_ptr_array_add (f->asked, a);
  if (f->fail_at == f->calls)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FAILED, "fake forward failure");
      return FALSE;
    }
  for (int i = 0; i < n_rows; i++)
    {
      g_assert_cmpint (rows[i], >=, 0);
      g_assert_cmpint (rows[i], <, seq_len);
      if (i > 0)
        g_assert_cmpint (rows[i - 1], <, rows[i]);
      for (int v = 0; v < V; v++)
        logits[(size_t) i * V + v] = 0.0f;
      /* Like a trained model, never the mask (a drawn mask stays one). */
      logits[(size_t) i * V + 15] = -1e30f;
      logits[(size_t) i * V + tok (rows[i])] = (float) f->height (rows[i]);
    }
  return TRUE;
}

static void
fake_init (Fake *f, UmScheduleModel *m, double (*height) (int))
{
  memset (f, 0, sizeof *f);
  f->height = height;
  f->asked = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  memset (m, 0, sizeof *m);
  m->vocab = V;
  m->mask_id = 15;
  m->eos_id = 14;
  m->pad_id = 13;
  m->bos_id = -1;
  m->shift = TRUE;
  m->logits = fake_logits;
  m->logits_data = f;
}

static void
fake_clear (Fake *f)
{
  g_ptr_array_unref (f->asked);
}

typedef struct {
  GPtrArray *trace;
  GPtrArray *ids;
} Steps;

static void
on_step (const UmStepEvent *ev, gpointer user_data)
{
  Steps *s = user_data;
  GArray *pos = g_array_new (FALSE, FALSE, sizeof (gint32));
  GArray *ids = g_array_new (FALSE, FALSE, sizeof (gint32));

  g_assert_cmpint (ev->step, ==, (int) s->trace->len);
  for (int i = 0; i < ev->n_committed; i++)
    {
      if (i > 0)
        g_assert_cmpint (ev->positions[i - 1], <, ev->positions[i]);
      g_assert_cmpint (ev->canvas[ev->positions[i]], ==, ev->ids[i]);
    }
  g_array_append_vals (pos, ev->positions, ev->n_committed);
  g_array_append_vals (ids, ev->ids, ev->n_committed);
  g_ptr_array_add (s->trace, pos);
  g_ptr_array_add (s->ids, ids);
}

static void
steps_init (Steps *s)
{
  s->trace = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  s->ids = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
}

static void
steps_clear (Steps *s)
{
  g_ptr_array_unref (s->trace);
  g_ptr_array_unref (s->ids);
}

static gint32 *
canvas (int prompt_len, int gen_length, gint32 mask)
{
  gint32 *x = g_new (gint32, prompt_len + gen_length);
  for (int i = 0; i < prompt_len; i++)
    x[i] = 2 + i % 5;
  for (int i = prompt_len; i < prompt_len + gen_length; i++)
    x[i] = mask;
  return x;
}

/* ---- the shift ---- */

static void
test_logit_rows (void)
{
  const gint32 pos[] = { 0, 1, 2, 5, 9 };
  gint32 rows[5], row_of[5];
  int n;

  n = um_logit_rows (TRUE, pos, 5, rows, row_of);
  g_assert_cmpint (n, ==, 4);
  g_assert_cmpint (rows[0], ==, 0);
  g_assert_cmpint (rows[1], ==, 1);
  g_assert_cmpint (rows[2], ==, 4);
  g_assert_cmpint (rows[3], ==, 8);
  g_assert_cmpint (row_of[0], ==, 0);
  g_assert_cmpint (row_of[1], ==, 0);
  g_assert_cmpint (row_of[2], ==, 1);
  g_assert_cmpint (row_of[3], ==, 2);
  g_assert_cmpint (row_of[4], ==, 3);

  n = um_logit_rows (FALSE, pos, 5, rows, row_of);
  g_assert_cmpint (n, ==, 5);
  for (int i = 0; i < 5; i++)
    {
      g_assert_cmpint (rows[i], ==, pos[i]);
      g_assert_cmpint (row_of[i], ==, i);
    }
}

/* ---- the float32 counts ---- */

static void
test_timestep_counts (void)
{
  g_autoptr(JsonParser) parser = um_test_load_json ("tiny-dream.expected.json");
  JsonArray *cases = json_object_get_array_member (json_node_get_object (json_parser_get_root (parser)), "generate");
  float ts[33];

  /* Both ends are exact by construction: 1 + step·0 and eps − step·0. */
  um_timesteps_f32 (1e-3, 32, ts);
  g_assert_cmpfloat (ts[0], ==, 1.0f);
  g_assert_cmpfloat (ts[32], ==, (float) 1e-3);
  for (int i = 1; i <= 32; i++)
    g_assert_cmpfloat (ts[i], <, ts[i - 1]);
  /* torch.linspace's own float32 values (torch 2.11, CPU and CUDA), where
   * a multiply then an add would round twice and land one ulp away (e.g.
   * 0.62537503 for the first): compared exactly, each decimal is the
   * float's value as Python prints it, which rounds back to that float. */
  um_timesteps_f32 (1e-3, 8, ts);
  g_assert_cmpfloat (ts[3], ==, 0.625374972820282f);
  um_timesteps_f32 (1e-3, 10, ts);
  g_assert_cmpfloat (ts[7], ==, 0.30070000886917114f);
  um_timesteps_f32 (1e-3, 11, ts);
  g_assert_cmpfloat (ts[6], ==, 0.4550909101963043f);
  um_timesteps_f32 (1e-3, 12, ts);
  g_assert_cmpfloat (ts[7], ==, 0.41725000739097595f);

  /* The fixture's per-step commit counts are the schedule's counts. */
  g_assert_cmpuint (json_array_get_length (cases), >, 0);
  for (guint c = 0; c < json_array_get_length (cases); c++)
    {
      JsonObject *o = json_array_get_object_element (cases, c);
      JsonArray *trace = json_object_get_array_member (o, "trace");
      const int steps = json_object_get_int_member (o, "steps");
      int left = json_object_get_int_member (o, "gen_length");
      g_autofree float *t = g_new (float, steps + 1);

      um_timesteps_f32 (json_object_get_double_member (o, "eps"), steps, t);
      g_assert_cmpint ((int) json_array_get_length (trace), ==, steps);
      for (int i = 0; i < steps; i++)
        {
          int k = um_timestep_count (t, steps, i, left);
          g_assert_cmpint (k, ==, (int) json_array_get_length (json_array_get_array_element (trace, i)));
          left -= k;
        }
      g_assert_cmpint (left, ==, 0);
    }
}

static void
test_entropy_counts (void)
{
  g_autoptr(JsonParser) parser = um_test_load_json ("tiny-rnd1.expected.json");
  JsonArray *cases = json_object_get_array_member (json_node_get_object (json_parser_get_root (parser)), "generate");

  /* float32 truncation, as torch computes it: 23 · float (7/23) is just
   * below 7 in float32, so 6 stay masked where ⌊23·7/23⌋ would be 7. */
  g_assert_cmpint (um_entropy_keep_count (23, 7, 23), ==, 6);
  g_assert_cmpint (um_entropy_keep_count (22, 13, 22), ==, 12);
  g_assert_cmpint (um_entropy_keep_count (31, 7, 8), ==, 27);
  g_assert_cmpint (um_entropy_keep_count (0, 3, 8), ==, 0);

  for (guint c = 0; c < json_array_get_length (cases); c++)
    {
      JsonObject *o = json_array_get_object_element (cases, c);
      JsonArray *trace = json_object_get_array_member (o, "trace");
      const int N = json_object_get_int_member (o, "steps");
      const int total = json_object_get_int_member (o, "gen_length") - 1;
      int left = total, e = 0;

      g_assert_cmpint ((int) json_array_get_length (trace), ==, N);
      for (int step = N - 1; step >= 1; step--, e++)
        {
          int keep = um_entropy_keep_count (total, step, N);
          int k = MAX (left - keep, 0);
          g_assert_cmpint (k, ==, (int) json_array_get_length (json_array_get_array_element (trace, e)));
          left -= k;
        }
      g_assert_cmpint (left, ==, (int) json_array_get_length (json_array_get_array_element (trace, N - 1)));
    }
}

/* ---- row rules ---- */

static void
set_probs (float *l, const double *p, int n)
{
  for (int v = 0; v < V; v++)
    l[v] = v < n ? (float) log (p[v]) : -1e30f;
}

static void
test_dream_rows (void)
{
  g_autoptr(UmRowScratch) s = um_row_scratch_new (V);
  const double probs[] = { 0.5, 0.3, 0.15, 0.05 };
  float l[V];
  UmGenParams p;
  gint32 id;
  double conf, prob, h = 0.0;
  /* The probabilities went through float logits and back: a few float
   * ulps of 0.5 relative. */
  const double tol = 1e-6;

  um_gen_params_init (&p);
  set_probs (l, probs, 4);

  p.temperature = 0.0;
  p.alg = UM_ALG_MASKGIT_PLUS;
  um_dream_row (s, l, &p, 0.5, &id, &conf, &prob);
  g_assert_cmpint (id, ==, 0);
  g_assert_cmpfloat_with_epsilon (conf, 0.5, tol);
  g_assert_cmpfloat_with_epsilon (prob, 0.5, tol);

  p.alg = UM_ALG_TOPK_MARGIN;
  um_dream_row (s, l, &p, 0.5, &id, &conf, &prob);
  g_assert_cmpfloat_with_epsilon (conf, 0.2, tol);

  p.alg = UM_ALG_ENTROPY;
  um_dream_row (s, l, &p, 0.5, &id, &conf, &prob);
  for (int i = 0; i < 4; i++)
    h += probs[i] * log (probs[i] + 1e-10);
  /* −H: negative, higher is more certain (llama.cpp's sign is the other). */
  g_assert_cmpfloat (conf, <, 0.0);
  g_assert_cmpfloat_with_epsilon (conf, h, tol);

  /* top_p 0.7: the running sums are 0.5, 0.8, …; the token that crosses
   * 0.7 stays, the rest go: {0.5, 0.3} renormalised. */
  p.alg = UM_ALG_MASKGIT_PLUS;
  p.top_p = 0.7;
  um_dream_row (s, l, &p, 0.5, &id, &conf, &prob);
  g_assert_cmpfloat_with_epsilon (conf, 0.5 / 0.8, tol);
  /* top_p below the first probability: a one-token nucleus, confidence 1. */
  p.top_p = 0.3;
  um_dream_row (s, l, &p, 0.5, &id, &conf, &prob);
  g_assert_cmpint (id, ==, 0);
  g_assert_cmpfloat_with_epsilon (conf, 1.0, tol);
  p.top_p = 1.0;

  /* top_k 2: {0.5, 0.3}. */
  p.top_k = 2;
  um_dream_row (s, l, &p, 0.5, &id, &conf, &prob);
  g_assert_cmpfloat_with_epsilon (conf, 0.5 / 0.8, tol);
  /* Ties at the k-th value all stay (logits < k-th are removed). */
  for (int v = 0; v < V; v++)
    l[v] = -1e30f;
  l[3] = 3.0f;
  l[5] = 2.0f;
  l[7] = 2.0f;
  l[9] = 1.0f;
  um_dream_row (s, l, &p, 0.5, &id, &conf, &prob);
  g_assert_cmpint (id, ==, 3);
  g_assert_cmpfloat_with_epsilon (conf, exp (1.0) / (exp (1.0) + 2.0), tol);
  p.top_k = 0;

  /* T > 0: the draw follows the cumulative distribution in token order. */
  set_probs (l, probs, 4);
  p.temperature = 1.0;
  um_dream_row (s, l, &p, 0.1, &id, &conf, &prob);
  g_assert_cmpint (id, ==, 0);
  um_dream_row (s, l, &p, 0.6, &id, &conf, &prob);
  g_assert_cmpint (id, ==, 1);
  g_assert_cmpfloat_with_epsilon (conf, 0.3, tol);
  um_dream_row (s, l, &p, 0.99, &id, &conf, &prob);
  g_assert_cmpint (id, ==, 3);
  /* Temperature 2: p ∝ √p. */
  p.temperature = 2.0;
  um_dream_row (s, l, &p, 0.01, &id, &conf, &prob);
  {
    double z = 0.0;
    for (int i = 0; i < 4; i++)
      z += sqrt (probs[i]);
    g_assert_cmpfloat_with_epsilon (conf, sqrt (0.5) / z, tol);
  }
}

static void
test_rnd1_rows (void)
{
  g_autoptr(UmRowScratch) s = um_row_scratch_new (V);
  const double probs[] = { 0.5, 0.3, 0.15, 0.05 };
  float l[V];
  UmGenParams p;
  gint32 id;
  double ent, prob, h = 0.0, h2 = 0.0, z2 = 0.0;
  const double tol = 1e-6;

  um_gen_params_init (&p);
  set_probs (l, probs, 4);
  p.greedy = TRUE;
  p.temperature = 1.0;
  um_rnd1_row (s, l, &p, 0.5, &id, &ent, &prob);
  g_assert_cmpint (id, ==, 0);
  g_assert_cmpfloat_with_epsilon (prob, 0.5, tol);
  for (int i = 0; i < 4; i++)
    h -= probs[i] * log (probs[i]);
  /* The −1e30 logits are 0 after exp in double: no term. */
  g_assert_cmpfloat_with_epsilon (ent, h, tol);

  /* T only scales the entropy in greedy mode: p ∝ p^(1/T). */
  p.temperature = 0.5;
  um_rnd1_row (s, l, &p, 0.5, &id, &ent, &prob);
  g_assert_cmpint (id, ==, 0);
  for (int i = 0; i < 4; i++)
    z2 += probs[i] * probs[i];
  for (int i = 0; i < 4; i++)
    h2 -= probs[i] * probs[i] / z2 * log (probs[i] * probs[i] / z2);
  g_assert_cmpfloat_with_epsilon (ent, h2, tol);

  /* T 0 is 1e-8: one token carries everything, entropy 0 (exp underflows). */
  p.temperature = 0.0;
  um_rnd1_row (s, l, &p, 0.5, &id, &ent, &prob);
  g_assert_cmpint (id, ==, 0);
  g_assert_cmpfloat (ent, ==, 0.0);

  /* Not greedy: drawn. */
  p.temperature = 1.0;
  p.greedy = FALSE;
  um_rnd1_row (s, l, &p, 0.7, &id, &ent, &prob);
  g_assert_cmpint (id, ==, 1);

  /* A filter leaves −inf logits: 0 · −inf is NaN in upstream's sum, and here. */
  p.greedy = TRUE;
  p.top_k = 2;
  um_rnd1_row (s, l, &p, 0.5, &id, &ent, &prob);
  g_assert_cmpint (id, ==, 0);
  g_assert_true (isnan (ent));
}

/* ---- Dream's schedule on the fake forward ---- */

static void
test_timestep_schedule (void)
{
  const int P = 5, G = 12, L = P + G;
  UmAlg algs[] = { UM_ALG_MASKGIT_PLUS, UM_ALG_TOPK_MARGIN, UM_ALG_ENTROPY };

  for (guint a = 0; a < G_N_ELEMENTS (algs); a++)
    for (int steps = 4; steps <= 16; steps += 4)
      {
        g_autofree gint32 *x = canvas (P, G, 15);
        g_autofree float *ts = g_new (float, steps + 1);
        g_autoptr(GError) error = NULL;
        UmScheduleModel m;
        UmGenParams p;
        Steps st;
        Fake f;
        int n_steps, next = L - 1, left = G, forwards = 0;

        fake_init (&f, &m, rising);
        steps_init (&st);
        um_gen_params_init (&p);
        p.gen_length = G;
        p.steps = steps;
        p.alg = algs[a];
        p.temperature = 0.0;
        g_assert_true (um_schedule_timestep (&m, x, P, L, &p, on_step, &st, NULL, &n_steps, &error));
        g_assert_no_error (error);
        g_assert_cmpint (n_steps, ==, steps);
        g_assert_cmpint ((int) st.trace->len, ==, steps);

        /* Later rows are more confident by every rule, so the answer fills
         * from its end; position i holds row i − 1's token. */
        um_timesteps_f32 (p.eps, steps, ts);
        for (int i = 0; i < steps; i++)
          {
            GArray *got = g_ptr_array_index (st.trace, i);
            int k = um_timestep_count (ts, steps, i, left);
            g_assert_cmpint ((int) got->len, ==, k);
            for (int j = k - 1; j >= 0; j--)
              g_assert_cmpint (g_array_index (got, gint32, j), ==, next--);
            left -= k;
            forwards += k > 0;
          }
        for (int i = P; i < L; i++)
          g_assert_cmpint (x[i], ==, tok (i - 1));
        /* One forward per step that commits, each over the masks' rows. */
        g_assert_cmpint (f.calls, ==, forwards);
        for (guint c = 0; c < f.asked->len; c++)
          {
            GArray *rows = g_ptr_array_index (f.asked, c);
            g_assert_cmpint (g_array_index (rows, gint32, 0), ==, P - 1);
          }
        steps_clear (&st);
        fake_clear (&f);
      }
}

/* More steps than tokens: empty steps stay in the trace, with no forward. */
static void
test_timestep_empty_steps (void)
{
  const int P = 3, G = 4, L = P + G, steps = 10;
  g_autofree gint32 *x = canvas (P, G, 15);
  g_autoptr(GError) error = NULL;
  UmScheduleModel m;
  UmGenParams p;
  Steps st;
  Fake f;
  int n_steps, empty = 0;

  fake_init (&f, &m, rising);
  steps_init (&st);
  um_gen_params_init (&p);
  p.gen_length = G;
  p.steps = steps;
  g_assert_true (um_schedule_timestep (&m, x, P, L, &p, on_step, &st, NULL, &n_steps, &error));
  g_assert_cmpint (n_steps, ==, steps);
  g_assert_cmpint ((int) st.trace->len, ==, steps);
  for (guint i = 0; i < st.trace->len; i++)
    empty += ((GArray *) g_ptr_array_index (st.trace, i))->len == 0;
  g_assert_cmpint (empty, >, 0);
  g_assert_cmpint (f.calls, ==, steps - empty);
  steps_clear (&st);
  fake_clear (&f);
}

/* A mask in the prompt is a candidate too (x == mask_token_id); position 0
 * reads row 0, as position 1 does. */
static void
test_timestep_prompt_mask (void)
{
  const int P = 3, G = 2, L = P + G;
  g_autofree gint32 *x = canvas (P, G, 15);
  g_autoptr(GError) error = NULL;
  UmScheduleModel m;
  UmGenParams p;
  Fake f;

  fake_init (&f, &m, rising);
  um_gen_params_init (&p);
  p.gen_length = G;
  p.steps = 1;
  x[0] = 15;
  g_assert_true (um_schedule_timestep (&m, x, P, L, &p, NULL, NULL, NULL, NULL, &error));
  g_assert_cmpint (x[0], ==, tok (0));
  g_assert_cmpint (x[3], ==, tok (2));
  g_assert_cmpint (x[4], ==, tok (3));
  /* Rows 0, 2 and 3 (position 0 and 1 would share row 0). */
  g_assert_cmpuint (((GArray *) g_ptr_array_index (f.asked, 0))->len, ==, 3);
  fake_clear (&f);
}

static gint32 *
run_timestep (UmAlg alg, double alg_temp, double temperature, guint64 seed, int *n_steps, Steps *st)
{
  const int P = 4, G = 10, L = P + G;
  gint32 *x = canvas (P, G, 15);
  g_autoptr(GError) error = NULL;
  UmScheduleModel m;
  UmGenParams p;
  Fake f;

  fake_init (&f, &m, rising);
  um_gen_params_init (&p);
  p.gen_length = G;
  p.steps = 5;
  p.alg = alg;
  p.alg_temp = alg_temp;
  p.temperature = temperature;
  p.seed = seed;
  g_assert_true (um_schedule_timestep (&m, x, P, L, &p, st ? on_step : NULL, st, NULL, n_steps, &error));
  g_assert_no_error (error);
  for (int i = P; i < L; i++)
    g_assert_cmpint (x[i], !=, 15);
  fake_clear (&f);
  return x;
}

/* The random rules: reproducible from the seed, every mask filled, the
 * schedule's counts kept (alg_temp draws positions, not how many). */
static void
test_timestep_random (void)
{
  float ts[6];
  int n_steps;

  um_timesteps_f32 (1e-3, 5, ts);
  for (int variant = 0; variant < 3; variant++)
    {
      UmAlg alg = variant == 0 ? UM_ALG_ORIGIN : UM_ALG_MASKGIT_PLUS;
      double alg_temp = variant == 1 ? 0.5 : 0.0, temperature = variant == 2 ? 1.0 : 0.0;
      Steps st;
      g_autofree gint32 *a = NULL, *b = NULL;
      int left = 10, differs = 0;

      steps_init (&st);
      a = run_timestep (alg, alg_temp, temperature, 7, &n_steps, &st);
      b = run_timestep (alg, alg_temp, temperature, 7, &n_steps, NULL);
      g_assert_cmpmem (a, 14 * sizeof (gint32), b, 14 * sizeof (gint32));
      g_assert_cmpint (n_steps, ==, 5);
      if (alg != UM_ALG_ORIGIN)
        for (int i = 0; i < 5; i++)
          {
            int k = um_timestep_count (ts, 5, i, left);
            g_assert_cmpint (((GArray *) g_ptr_array_index (st.trace, i))->len, ==, k);
            left -= k;
          }
      /* Another seed changes something, over a few tries. */
      for (guint64 seed = 8; seed < 16 && !differs; seed++)
        {
          Steps st2;
          g_autofree gint32 *c = NULL;
          steps_init (&st2);
          c = run_timestep (alg, alg_temp, temperature, seed, &n_steps, &st2);
          differs = memcmp (a, c, 14 * sizeof (gint32)) != 0;
          for (guint i = 0; i < st.trace->len && !differs; i++)
            {
              GArray *x = g_ptr_array_index (st.trace, i), *y = g_ptr_array_index (st2.trace, i);
              differs = x->len != y->len || memcmp (x->data, y->data, x->len * sizeof (gint32)) != 0;
            }
          steps_clear (&st2);
        }
      g_assert_true (differs);
      steps_clear (&st);
    }
}

/* A threshold commits every mask at least that probable too, and stops
 * when none is left. */
static void
test_timestep_threshold (void)
{
  const int P = 4, G = 8, L = P + G;
  g_autofree gint32 *x = canvas (P, G, 15);
  g_autoptr(GError) error = NULL;
  UmScheduleModel m;
  UmGenParams p;
  Steps st;
  Fake f;
  int n_steps;

  fake_init (&f, &m, rising);
  steps_init (&st);
  um_gen_params_init (&p);
  p.gen_length = G;
  p.steps = 8;
  p.alg = UM_ALG_MASKGIT_PLUS;
  /* p = e^h / (e^h + 14): rows 5… (h ≥ 4.5) are above 0.86, row 4 at 0.80
   * and row 3 at 0.70. The schedule's first step commits none of 8. */
  p.threshold = 0.83;
  g_assert_true (um_schedule_timestep (&m, x, P, L, &p, on_step, &st, NULL, &n_steps, &error));
  g_assert_cmpint (n_steps, ==, 8);
  g_assert_cmpuint (((GArray *) g_ptr_array_index (st.trace, 0))->len, ==, G - 2);
  for (int i = P; i < L; i++)
    g_assert_cmpint (x[i], ==, tok (i - 1));
  steps_clear (&st);

  /* Everything above the threshold: one step, then done. */
  for (int i = P; i < L; i++)
    x[i] = 15;
  steps_init (&st);
  p.threshold = 0.6;
  g_assert_true (um_schedule_timestep (&m, x, P, L, &p, on_step, &st, NULL, &n_steps, &error));
  g_assert_cmpint (n_steps, ==, 1);
  g_assert_cmpuint (st.trace->len, ==, 1);
  g_assert_cmpuint (((GArray *) g_ptr_array_index (st.trace, 0))->len, ==, G);
  steps_clear (&st);
  fake_clear (&f);
}

/* ---- RND1's schedule on the fake forward ---- */

static void
test_entropy_schedule (void)
{
  const int P = 6;

  for (int G = 2; G <= 14; G += 4)
    for (int N = 1; N <= 2 * G; N += 3)
      {
        const int L = P + G, total = G - 1;
        g_autofree gint32 *x = canvas (P, G, 15);
        g_autoptr(GError) error = NULL;
        UmScheduleModel m;
        UmGenParams p;
        Steps st;
        Fake f;
        int n_steps, left = total, next = L - 2, e = 0;

        fake_init (&f, &m, rising);
        steps_init (&st);
        um_gen_params_init (&p);
        p.gen_length = G;
        p.steps = N;
        p.greedy = TRUE;
        p.temperature = 1.0;
        g_assert_true (um_schedule_entropy (&m, x, P, L, &p, on_step, &st, NULL, &n_steps, &error));
        g_assert_no_error (error);
        g_assert_cmpint (n_steps, ==, N);
        g_assert_cmpint ((int) st.trace->len, ==, N);

        /* Later rows are lower in entropy: committed first, from the end
         * (the reserved slot L − 1 excluded). */
        for (int step = N - 1; step >= 0; step--, e++)
          {
            GArray *got = g_ptr_array_index (st.trace, e);
            int k = step > 0 ? MAX (left - um_entropy_keep_count (total, step, N), 0) : left;
            g_assert_cmpint ((int) got->len, ==, k);
            for (int j = k - 1; j >= 0; j--)
              g_assert_cmpint (g_array_index (got, gint32, j), ==, next--);
            left -= k;
          }
        g_assert_cmpint (left, ==, 0);
        for (int i = P; i < L - 1; i++)
          g_assert_cmpint (x[i], ==, tok (i - 1));
        g_assert_cmpint (x[L - 1], ==, m.pad_id);
        /* The first forward, then one after each step that leaves masks. */
        g_assert_cmpint (f.calls, <=, N);
        for (guint c = 0; c < f.asked->len; c++)
          {
            GArray *rows = g_ptr_array_index (f.asked, c);
            /* Never the reserved slot's row, L − 2 at most. */
            g_assert_cmpint (g_array_index (rows, gint32, rows->len - 1), <=, L - 3);
          }
        steps_clear (&st);
        fake_clear (&f);
      }
}

static double
falling (int row)
{
  /* Earlier rows more confident (lower entropy). */
  return 20.0 - 0.5 * row;
}

/* The order follows the entropy, not the position; sampling is seeded. */
static void
test_entropy_order_and_seed (void)
{
  const int P = 4, G = 9, L = P + G;
  g_autofree gint32 *x = canvas (P, G, 15), *y = canvas (P, G, 15), *z = canvas (P, G, 15);
  g_autoptr(GError) error = NULL;
  UmScheduleModel m;
  UmGenParams p;
  Steps st;
  Fake f;

  fake_init (&f, &m, falling);
  steps_init (&st);
  um_gen_params_init (&p);
  p.gen_length = G;
  p.steps = G - 1;
  p.greedy = TRUE;
  p.temperature = 2.0;
  g_assert_true (um_schedule_entropy (&m, x, P, L, &p, on_step, &st, NULL, NULL, &error));
  for (int e = 0; e < G - 1; e++)
    {
      GArray *got = g_ptr_array_index (st.trace, e);
      g_assert_cmpuint (got->len, ==, 1);
      g_assert_cmpint (g_array_index (got, gint32, 0), ==, P + e);
    }
  steps_clear (&st);

  p.greedy = FALSE;
  p.seed = 3;
  g_assert_true (um_schedule_entropy (&m, y, P, L, &p, NULL, NULL, NULL, NULL, &error));
  g_assert_true (um_schedule_entropy (&m, z, P, L, &p, NULL, NULL, NULL, NULL, &error));
  g_assert_cmpmem (y, L * sizeof (gint32), z, L * sizeof (gint32));
  fake_clear (&f);
}

/* A constraint in the reserved slot, too short an answer: errors. A failed
 * forward and cancellation stop the run with their error. */
static void
test_schedule_errors (void)
{
  const int P = 3, G = 6, L = P + G;
  g_autofree gint32 *x = canvas (P, G, 15);
  g_autoptr(GCancellable) cancel = g_cancellable_new ();
  UmScheduleModel m;
  UmGenParams p;
  Fake f;

  fake_init (&f, &m, rising);
  um_gen_params_init (&p);
  p.gen_length = G;
  p.steps = 3;
  x[L - 1] = 4;
  {
    g_autoptr(GError) error = NULL;
    g_assert_false (um_schedule_entropy (&m, x, P, L, &p, NULL, NULL, NULL, NULL, &error));
    g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  }
  x[L - 1] = 15;
  f.fail_at = 2;
  {
    g_autoptr(GError) error = NULL;
    g_assert_false (um_schedule_entropy (&m, x, P, L, &p, NULL, NULL, NULL, NULL, &error));
    g_assert_error (error, UM_ERROR, UM_ERROR_FAILED);
  }
  f.fail_at = 0;
  for (int i = P; i < L; i++)
    x[i] = 15;
  g_cancellable_cancel (cancel);
  {
    g_autoptr(GError) error = NULL;
    g_assert_false (um_schedule_timestep (&m, x, P, L, &p, NULL, NULL, cancel, NULL, &error));
    g_assert_error (error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  }
  fake_clear (&f);
}

/* ---- which options each family has ---- */

static void
test_family_params (void)
{
  UmGenParams p;

#define EXPECT(arch, ok, stmt) G_STMT_START {                                   \
    g_autoptr(GError) e_ = NULL;                                               \
    um_gen_params_init (&p);                                                   \
    p.gen_length = 20;                                                         \
    p.steps = 10;                                                              \
    stmt;                                                                      \
    if (ok)                                                                    \
      {                                                                        \
        g_assert_true (um_gen_params_validate_for (&p, arch, 4, 4096, &e_));   \
        g_assert_no_error (e_);                                                \
      }                                                                        \
    else                                                                       \
      {                                                                        \
        g_assert_false (um_gen_params_validate_for (&p, arch, 4, 4096, &e_));  \
        g_assert_error (e_, UM_ERROR, UM_ERROR_INVALID_PARAM);                 \
      }                                                                        \
  } G_STMT_END

  /* Dream has no blocks: a length no block divides is fine. */
  EXPECT (UM_ARCH_DREAM, TRUE, (void) 0);
  EXPECT (UM_ARCH_DREAM, TRUE, p.top_p = 0.95; p.top_k = 20; p.alg_temp = 0.1; p.alg = UM_ALG_ORIGIN);
  EXPECT (UM_ARCH_DREAM, TRUE, p.threshold = 0.9);
  EXPECT (UM_ARCH_DREAM, FALSE, p.cfg_scale = 1.0);
  EXPECT (UM_ARCH_DREAM, FALSE, p.cache = UM_CACHE_PREFIX);
  EXPECT (UM_ARCH_DREAM, FALSE, p.remasking = UM_REMASK_RANDOM);
  EXPECT (UM_ARCH_DREAM, FALSE, p.greedy = TRUE);
  EXPECT (UM_ARCH_DREAM, FALSE, p.factor = 1.0);
  EXPECT (UM_ARCH_DREAM, FALSE, p.logits_eos_inf = TRUE);
  EXPECT (UM_ARCH_DREAM, FALSE, p.eps = 1.0);
  EXPECT (UM_ARCH_DREAM, FALSE, p.top_p = 1.5);
  EXPECT (UM_ARCH_DREAM, FALSE, p.top_k = -1);
  EXPECT (UM_ARCH_DREAM, FALSE, p.alg_temp = -1.0);
  EXPECT (UM_ARCH_DREAM, FALSE, p.alg = UM_ALG_ORIGIN; p.threshold = 0.9);

  EXPECT (UM_ARCH_RND1, TRUE, p.greedy = TRUE; p.top_k = 5; p.top_p = 0.9);
  EXPECT (UM_ARCH_RND1, FALSE, p.gen_length = 1);
  EXPECT (UM_ARCH_RND1, FALSE, p.threshold = 0.9);
  EXPECT (UM_ARCH_RND1, FALSE, p.alg_temp = 0.1);
  EXPECT (UM_ARCH_RND1, FALSE, p.cfg_scale = 1.0);
  EXPECT (UM_ARCH_RND1, FALSE, p.cache = UM_CACHE_DUAL);

  /* LLaDA and LLaDA-MoE: blocks, and none of the others' options. */
  EXPECT (UM_ARCH_LLADA_MOE, FALSE, (void) 0);   /* 20 is no multiple of 32 */
  EXPECT (UM_ARCH_LLADA_MOE, TRUE, p.block_length = 10; p.cfg_scale = 1.0; p.cache = UM_CACHE_DUAL);
  EXPECT (UM_ARCH_LLADA_MOE, FALSE, p.block_length = 10; p.top_p = 0.9);
  EXPECT (UM_ARCH_LLADA, FALSE, p.block_length = 10; p.top_k = 3);
  EXPECT (UM_ARCH_LLADA, FALSE, p.block_length = 10; p.alg_temp = 0.5);
  EXPECT (UM_ARCH_LLADA, FALSE, p.block_length = 10; p.greedy = TRUE);
  EXPECT (UM_ARCH_LLADA, TRUE, p.block_length = 10; p.top_p = 1.0);
#undef EXPECT

  {
    UmAlg a;
    g_assert_true (um_alg_from_string ("topk_margin", &a));
    g_assert_cmpint (a, ==, UM_ALG_TOPK_MARGIN);
    g_assert_cmpstr (um_alg_to_string (UM_ALG_ORIGIN), ==, "origin");
    g_assert_false (um_alg_from_string ("entropy ", &a));
  }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/schedule/logit-rows", test_logit_rows);
  g_test_add_func ("/schedule/timestep-counts", test_timestep_counts);
  g_test_add_func ("/schedule/entropy-counts", test_entropy_counts);
  g_test_add_func ("/schedule/dream-rows", test_dream_rows);
  g_test_add_func ("/schedule/rnd1-rows", test_rnd1_rows);
  g_test_add_func ("/schedule/timestep", test_timestep_schedule);
  g_test_add_func ("/schedule/timestep-empty-steps", test_timestep_empty_steps);
  g_test_add_func ("/schedule/timestep-prompt-mask", test_timestep_prompt_mask);
  g_test_add_func ("/schedule/timestep-random", test_timestep_random);
  g_test_add_func ("/schedule/timestep-threshold", test_timestep_threshold);
  g_test_add_func ("/schedule/entropy", test_entropy_schedule);
  g_test_add_func ("/schedule/entropy-order-seed", test_entropy_order_and_seed);
  g_test_add_func ("/schedule/errors", test_schedule_errors);
  g_test_add_func ("/schedule/family-params", test_family_params);
  return g_test_run ();
}

/* Fast decoding (issue 12): the exact schedule untouched by the new
 * parameters, the threshold and factor rules' per-step invariants, word
 * constraints, and the block KV cache's end-to-end structure. */
#include <math.h>
#include <string.h>

#include "um-engine.h"
#include "um-error.h"
#include "um-score.h"
#include "um-test-util.h"

typedef struct {
  const UmGenParams *p;
  gint32            mask;
  int               prompt_len;
  gint32           *prev;         /* the canvas before the step */
  int               calls;
  int               committed;
  int               last_n_steps;
  GPtrArray        *trace;
} Checker;

/* Every event: at least one commit, all in the event's block and masked
 * before, nothing else changed, the threshold rule's confidences. */
static void
check_step (const UmStepEvent *ev, gpointer user_data)
{
  Checker *ck = user_data;
  const int bs = ev->prompt_len + ev->block * ck->p->block_length;
  const int be = bs + ck->p->block_length;
  gboolean fast = ck->p->threshold > 0 || ck->p->factor > 0;
  int block_masks = 0, below = 0;
  GArray *a = g_array_new (FALSE, FALSE, sizeof (gint32));

  g_assert_cmpint (ev->step, ==, ck->calls);
  for (int i = bs; i < be; i++)
    block_masks += ck->prev[i] == ck->mask;
  if (fast)
    g_assert_cmpint (ev->n_committed, >=, 1);
  g_assert_cmpint (ev->n_committed, <=, block_masks);
  for (int i = 0; i < ev->n_committed; i++)
    {
      gint32 pos = ev->positions[i];
      if (i > 0)
        g_assert_cmpint (ev->positions[i - 1], <, pos);
      g_assert_cmpint (pos, >=, bs);
      g_assert_cmpint (pos, <, be);
      g_assert_cmpint (ck->prev[pos], ==, ck->mask);
      g_assert_cmpint (ev->canvas[pos], ==, ev->ids[i]);
      g_assert_cmpint (ev->ids[i], !=, ck->mask);
      ck->prev[pos] = ev->ids[i];
      if (ck->p->threshold > 0 && ev->confidences[i] < ck->p->threshold - 1e-6)
        below++;
    }
  /* Only the fallback "most confident one" may be under the threshold. */
  if (ck->p->threshold > 0 && below > 0)
    g_assert_cmpint (ev->n_committed, ==, 1);
  g_assert_cmpmem (ck->prev, ev->seq_len * 4, ev->canvas, ev->seq_len * 4);
  g_assert_cmpint (ev->n_steps, >, ev->step);
  g_array_append_vals (a, ev->positions, ev->n_committed);
  g_ptr_array_add (ck->trace, a);
  ck->committed += ev->n_committed;
  ck->last_n_steps = ev->n_steps;
  ck->calls++;
}

static const gint32 prompt_ids[] = { 1, 17, 42, 99, 7, 256 };

/* Runs @p on tiny-llada with checks; returns the answer. */
static GArray *
run_checked (UmEngine *engine, const UmGenParams *p, int *out_steps, GPtrArray **out_trace, GError **error)
{
  UmForward *fw = um_engine_get_forward (engine);
  const int Lp = G_N_ELEMENTS (prompt_ids);
  const gint32 mask = um_engine_get_model (engine)->cfg.mask_id;
  g_autoptr(GArray) out = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autofree gint32 *prev = g_new (gint32, Lp + p->gen_length);
  g_autoptr(GPtrArray) trace = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  Checker ck = { p, mask, Lp, prev, 0, 0, 0, trace };
  int steps = -1, masks = 0;

  memcpy (prev, prompt_ids, sizeof prompt_ids);
  for (int i = Lp; i < Lp + p->gen_length; i++)
    prev[i] = mask;
  /* The constraints as the sampler places them: after a leading space. */
  for (int c = 0; c < p->n_constraints; c++)
    {
      const char *w = p->constraints[c].word;
      g_autofree char *text = g_ascii_isspace (w[0]) ? g_strdup (w) : g_strconcat (" ", w, NULL);
      g_autoptr(GArray) ids = g_array_new (FALSE, FALSE, sizeof (gint32));
      g_assert_true (um_tokenizer_encode (um_engine_get_model (engine)->tokenizer, text, -1, ids, NULL));
      memcpy (prev + Lp + p->constraints[c].offset, ids->data, ids->len * 4);
    }
  if (!um_sampler_generate_full (fw, prompt_ids, Lp, p, check_step, &ck, NULL, out, &steps, error))
    return NULL;
  for (int i = 0; i < p->gen_length; i++)
    masks += prev[Lp + i] == mask;
  g_assert_cmpint (masks, ==, 0);
  g_assert_cmpint (steps, ==, ck.calls);
  if (p->threshold > 0 || p->factor > 0)
    g_assert_cmpint (ck.last_n_steps, ==, steps);
  else
    g_assert_cmpint (steps, ==, p->steps);
  g_assert_cmpuint (out->len, ==, (guint) p->gen_length);
  for (guint i = 0; i < out->len; i++)
    g_assert_cmpint (g_array_index (out, gint32, i), !=, mask);
  g_assert_cmpmem (out->data, out->len * 4, prev + Lp, out->len * 4);
  if (out_steps)
    *out_steps = steps;
  if (out_trace)
    *out_trace = g_steal_pointer (&trace);
  return g_steal_pointer (&out);
}

static UmEngine *
load_tiny (void)
{
  g_autofree char *path = um_test_data_path ("tiny-llada");
  return um_test_load_engine (path, TRUE);
}

static void
base_params (UmGenParams *p)
{
  um_gen_params_init (p);
  p->gen_length = 32;
  p->steps = 32;
  p->block_length = 8;
}

/* The fixture cases with the new fields spelled out as "off" give the
 * reference ids and traces. */
static void
test_exact_unchanged (void)
{
  g_autoptr(JsonParser) parser = um_test_load_json ("tiny-llada.expected.json");
  JsonArray *cases = json_object_get_array_member (json_node_get_object (json_parser_get_root (parser)), "generate");
  g_autoptr(UmEngine) engine = load_tiny ();
  UmForward *fw = um_engine_get_forward (engine);

  for (guint i = 0; i < json_array_get_length (cases); i++)
    {
      JsonObject *c = json_array_get_object_element (cases, i);
      g_autoptr(GArray) prompt = um_test_json_ids (json_object_get_array_member (c, "prompt_ids"));
      g_autoptr(GArray) want = um_test_json_ids (json_object_get_array_member (c, "ids"));
      g_autoptr(GArray) got = g_array_new (FALSE, FALSE, sizeof (gint32));
      g_autoptr(GError) error = NULL;
      UmGenParams p;
      int steps = -1;

      um_gen_params_init (&p);
      p.gen_length = json_object_get_int_member (c, "gen_length");
      p.steps = json_object_get_int_member (c, "steps");
      p.block_length = json_object_get_int_member (c, "block_length");
      p.temperature = json_object_get_double_member_with_default (c, "temperature", 0.0);
      p.cfg_scale = json_object_get_double_member_with_default (c, "cfg_scale", 0.0);
      p.logits_eos_inf = json_object_get_boolean_member_with_default (c, "logits_eos_inf", FALSE);
      p.confidence_eos_eot_inf = json_object_get_boolean_member_with_default (c, "confidence_eos_eot_inf", FALSE);
      g_assert_true (um_remasking_from_string (json_object_get_string_member (c, "remasking"), &p.remasking));
      p.cache = UM_CACHE_NONE;
      p.threshold = 0.0;
      p.factor = 0.0;
      p.constraints = NULL;
      p.n_constraints = 0;
      g_assert_true (um_sampler_generate_full (fw, (const gint32 *) prompt->data, prompt->len, &p, NULL, NULL,
                                               NULL, got, &steps, &error));
      g_assert_no_error (error);
      g_assert_cmpmem (got->data, got->len * 4, want->data, want->len * 4);
      g_assert_cmpint (steps, ==, p.steps);
    }
}

static void
test_threshold (void)
{
  static const double taus[] = { 1.0, 0.9, 0.5, 1e-9 };
  g_autoptr(UmEngine) engine = load_tiny ();

  for (guint t = 0; t < G_N_ELEMENTS (taus); t++)
    for (int remask = 0; remask < 2; remask++)
      for (int temp = 0; temp < 2; temp++)
        {
          g_autoptr(GError) error = NULL;
          g_autoptr(GArray) out = NULL;
          g_autoptr(GPtrArray) trace = NULL;
          UmGenParams p;
          int steps;

          base_params (&p);
          p.threshold = taus[t];
          p.remasking = remask ? UM_REMASK_RANDOM : UM_REMASK_LOW_CONFIDENCE;
          p.temperature = temp ? 0.7 : 0.0;
          p.seed = 5;
          out = run_checked (engine, &p, &steps, &trace, &error);
          g_assert_no_error (error);
          g_test_message ("tau %g remask %d temp %d: %d steps", taus[t], remask, temp, steps);
          g_assert_cmpint (steps, >=, p.gen_length / p.block_length);
          g_assert_cmpint (steps, <=, p.gen_length);
          /* Every confidence is > 1e-9: each block in one step. */
          if (taus[t] < 1e-6)
            {
              g_assert_cmpint (steps, ==, p.gen_length / p.block_length);
              for (guint s = 0; s < trace->len; s++)
                g_assert_cmpuint (((GArray *) g_ptr_array_index (trace, s))->len, ==, (guint) p.block_length);
            }
        }
}

static void
test_factor (void)
{
  static const double fs[] = { 0.5, 1.0, 3.0, 1e9 };
  g_autoptr(UmEngine) engine = load_tiny ();

  for (guint f = 0; f < G_N_ELEMENTS (fs); f++)
    for (int remask = 0; remask < 2; remask++)
      {
        g_autoptr(GError) error = NULL;
        g_autoptr(GArray) out = NULL;
        UmGenParams p;
        int steps;

        base_params (&p);
        p.factor = fs[f];
        p.remasking = remask ? UM_REMASK_RANDOM : UM_REMASK_LOW_CONFIDENCE;
        out = run_checked (engine, &p, &steps, NULL, &error);
        g_assert_no_error (error);
        g_test_message ("factor %g remask %d: %d steps", fs[f], remask, steps);
        /* (n + 1)(1 − c) ≤ n + 1 < 1e9: the whole block at once. */
        if (fs[f] > 1e6)
          g_assert_cmpint (steps, ==, p.gen_length / p.block_length);
      }
}

static GArray *
encode (UmEngine *engine, const char *text)
{
  GArray *ids = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_assert_true (um_tokenizer_encode (um_engine_get_model (engine)->tokenizer, text, -1, ids, NULL));
  return ids;
}

static void
test_constraints (void)
{
  g_autoptr(UmEngine) engine = load_tiny ();
  g_autoptr(GArray) hello = encode (engine, " hello");
  g_autoptr(GArray) world = encode (engine, " world");
  const UmGenConstraint cs[] = { { 3, "hello" }, { 20, " world" } };

  g_assert_cmpuint (hello->len, >, 1);
  for (int mode = 0; mode < 3; mode++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(GArray) out = NULL;
      g_autoptr(GPtrArray) trace = NULL;
      UmGenParams p;
      int steps;

      base_params (&p);
      p.constraints = cs;
      p.n_constraints = G_N_ELEMENTS (cs);
      p.threshold = mode == 1 ? 0.9 : 0.0;
      p.cache = mode == 2 ? UM_CACHE_DUAL : UM_CACHE_NONE;
      p.cfg_scale = mode == 2 ? 1.0 : 0.0;
      out = run_checked (engine, &p, &steps, &trace, &error);
      g_assert_no_error (error);
      g_assert_cmpmem (out->data + 3 * 4, hello->len * 4, hello->data, hello->len * 4);
      g_assert_cmpmem (out->data + 20 * 4, world->len * 4, world->data, world->len * 4);
      /* run_checked saw every commit land on a mask, so the constrained
       * positions were never committed; the commits cover the rest. */
      {
        guint total = 0;
        for (guint s = 0; s < trace->len; s++)
          total += ((GArray *) g_ptr_array_index (trace, s))->len;
        g_assert_cmpuint (total, ==, p.gen_length - hello->len - world->len);
      }
    }
}

static void
test_bad_params (void)
{
  g_autoptr(UmEngine) engine = load_tiny ();
  UmForward *fw = um_engine_get_forward (engine);
  g_autoptr(GArray) hello = encode (engine, " hello");
  const int hl = (int) hello->len;
  const struct {
    double threshold, factor;
    int cache;
    UmGenConstraint c[2];
    int n;
  } bad[] = {
    { -0.1, 0, 0, { { 0 } }, 0 },
    { 1.5, 0, 0, { { 0 } }, 0 },
    { NAN, 0, 0, { { 0 } }, 0 },
    { 0, -1, 0, { { 0 } }, 0 },
    { 0, INFINITY, 0, { { 0 } }, 0 },
    { 0.9, 1.0, 0, { { 0 } }, 0 },
    { 0, 0, 7, { { 0 } }, 0 },
    { 0, 0, 0, { { -1, "hello" } }, 1 },
    { 0, 0, 0, { { 32, "hello" } }, 1 },
    { 0, 0, 0, { { 3, "" } }, 1 },
    { 0, 0, 0, { { 3, NULL } }, 1 },
    { 0, 0, 0, { { 3, "a" }, { 3, "b" } }, 2 },
    { 0, 0, 0, { { 3, "hello" }, { 4, "b" } }, 2 },          /* overlap: " hello" is several tokens */
    { 0, 0, 0, { { 32 - 1, "hello" } }, 1 },                 /* does not fit */
    { 0, 0, 0, { { 0, "<|mdm_mask|>" } }, 1 },
  };

  g_assert_cmpint (hl, >, 1);
  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(GArray) out = g_array_new (FALSE, FALSE, sizeof (gint32));
      UmGenParams p;
      int steps = -1;

      base_params (&p);
      p.threshold = bad[i].threshold;
      p.factor = bad[i].factor;
      p.cache = (UmCacheMode) bad[i].cache;
      p.constraints = bad[i].c;
      p.n_constraints = bad[i].n;
      g_assert_false (um_sampler_generate_full (fw, prompt_ids, G_N_ELEMENTS (prompt_ids), &p, NULL, NULL, NULL,
                                                out, &steps, &error));
      g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
      g_test_message ("bad %u: %s", i, error->message);
      g_assert_cmpuint (out->len, ==, 0);
    }

  /* The edges that are fine. */
  {
    const UmGenConstraint ok[] = { { 0, "hello" }, { hl, "hello" }, { 32 - hl, "hello" } };
    UmGenParams p;
    g_autoptr(GError) error = NULL;
    base_params (&p);
    p.threshold = 1.0;
    p.constraints = ok;
    p.n_constraints = G_N_ELEMENTS (ok);
    g_assert_true (um_gen_params_validate (&p, 6, 4096, &error));
    g_assert_no_error (error);
    g_autoptr(GArray) out = run_checked (engine, &p, NULL, NULL, &error);
    g_assert_no_error (error);
  }
}

static void
test_cache_modes (void)
{
  g_autoptr(UmEngine) engine = load_tiny ();

  for (int cache = UM_CACHE_PREFIX; cache <= UM_CACHE_DUAL; cache++)
    for (int cfg = 0; cfg < 2; cfg++)
      for (int remask = 0; remask < 2; remask++)
        for (int fast = 0; fast < 3; fast++)
          {
            g_autoptr(GError) error = NULL;
            g_autoptr(GArray) out = NULL;
            UmGenParams p;
            int steps;

            base_params (&p);
            p.steps = 16;    /* two per step in the exact split */
            p.cache = (UmCacheMode) cache;
            p.cfg_scale = cfg ? 1.5 : 0.0;
            p.remasking = remask ? UM_REMASK_RANDOM : UM_REMASK_LOW_CONFIDENCE;
            p.threshold = fast == 1 ? 0.9 : 0.0;
            p.factor = fast == 2 ? 1.0 : 0.0;
            p.temperature = remask ? 0.5 : 0.0;
            p.seed = 11;
            out = run_checked (engine, &p, &steps, NULL, &error);
            g_assert_no_error (error);
            g_test_message ("cache %s cfg %d remask %d fast %d: %d steps", um_cache_mode_to_string (p.cache), cfg,
                            remask, fast, steps);
          }
}

/* The quality measure of the fast schedules: um_score_answer () against a
 * log-softmax written out here, its determinism and its errors. */
static void
test_score (void)
{
  g_autoptr(UmEngine) engine = load_tiny ();
  g_autoptr(GError) error = NULL;
  UmForward *fw = um_engine_get_forward (engine);
  const UmModelConfig *cfg = &um_engine_get_model (engine)->cfg;
  const int np = G_N_ELEMENTS (prompt_ids);
  const gint32 answer[] = { 5, 300, 12, 77, 501, 3, 64, 9 };
  const int na = G_N_ELEMENTS (answer);
  gint32 canvas[G_N_ELEMENTS (prompt_ids) + 1];
  gint32 row = np;
  g_autofree float *logits = g_new (float, cfg->vocab_size);
  double mx = -INFINITY, sum = 0, expect;
  UmScoreParams sp;
  UmScore a, b, c;

  /* One answer token: every sample masks it, so the estimate is exactly
   * log softmax(logits)[token] at that position, with no spread. */
  memcpy (canvas, prompt_ids, sizeof prompt_ids);
  canvas[np] = cfg->mask_id;
  g_assert_true (um_forward_logits (fw, canvas, 1, np + 1, &row, 1, logits, NULL, &error));
  g_assert_no_error (error);
  for (guint v = 0; v < cfg->vocab_size; v++)
    mx = MAX (mx, logits[v]);
  for (guint v = 0; v < cfg->vocab_size; v++)
    sum += exp ((double) logits[v] - mx);
  expect = (double) logits[answer[0]] - mx - log (sum);
  um_score_params_init (&sp);
  sp.mc_samples = 5;
  sp.batch = 1;       /* the same one-sequence pass as above, so the same floats */
  g_assert_true (um_score_answer (fw, prompt_ids, np, answer, 1, &sp, &a, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpfloat_with_epsilon (a.log_likelihood, expect, 1e-9 * fabs (expect) + 1e-12);
  /* Exact by construction: deviations from the first of equal samples are 0
   * (test_score_zero_spread checks this over many values). */
  g_assert_cmpfloat (a.std_error, ==, 0.0);
  g_assert_cmpint (a.n_tokens, ==, 1);

  /* Several tokens: the same seed gives the same masks whatever the batch
   * (rows are independent in the forward; 1e-5 relative allows for the
   * products' blocking changing with the number of rows). */
  sp.mc_samples = 12;
  sp.batch = 12;
  g_assert_true (um_score_answer (fw, prompt_ids, np, answer, na, &sp, &a, NULL, &error));
  sp.batch = 5;
  g_assert_true (um_score_answer (fw, prompt_ids, np, answer, na, &sp, &b, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpfloat (a.log_likelihood, <, 0.0);
  g_assert_cmpfloat_with_epsilon (a.log_likelihood, b.log_likelihood, 1e-5 * fabs (a.log_likelihood));
  g_assert_cmpfloat (a.std_error, >, 0.0);
  g_assert_cmpfloat_with_epsilon (a.per_token * na, a.log_likelihood, 1e-9 * fabs (a.log_likelihood));
  sp.seed = 99;
  g_assert_true (um_score_answer (fw, prompt_ids, np, answer, na, &sp, &c, NULL, &error));
  g_assert_cmpfloat (c.log_likelihood, !=, a.log_likelihood);

  /* Bad input: an error, never a crash. */
  g_assert_false (um_score_answer (fw, prompt_ids, np, answer, 0, &sp, &a, NULL, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  g_clear_error (&error);
  {
    gint32 bad[] = { 4, (gint32) cfg->vocab_size };
    g_assert_false (um_score_answer (fw, prompt_ids, np, bad, 2, &sp, &a, NULL, &error));
    g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
    g_clear_error (&error);
  }
  sp.mc_samples = 0;
  g_assert_false (um_score_answer (fw, prompt_ids, np, answer, na, &sp, &a, NULL, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
}

/* Equal samples: the score of a one-token answer is one forward repeated,
 * so every sample is the same float and the estimate must be that value
 * with a spread of exactly 0, for any value. Their naive mean (x + … + x)/S
 * is not x for many x (about half of all doubles at S = 7), which is how an
 * Intel Xeon once saw a spread of 8.9e-16: hence many seeds, random prompts,
 * answer tokens and sample counts. */
static void
test_score_zero_spread (void)
{
  g_autoptr(UmEngine) engine = load_tiny ();
  UmForward *fw = um_engine_get_forward (engine);
  const UmModelConfig *cfg = &um_engine_get_model (engine)->cfg;
  guint32 seed;

  for (guint it = 0; um_test_seed_next (&it, &seed);)
    {
      g_autoptr(GRand) r = g_rand_new_with_seed (seed);
      g_autoptr(GError) error = NULL;
      gint32 prompt[8], answer;
      int np = g_rand_int_range (r, 1, G_N_ELEMENTS (prompt) + 1);
      UmScoreParams sp;
      UmScore one, many;

      for (int i = 0; i < np; i++)
        prompt[i] = g_rand_int_range (r, 0, cfg->mask_id);
      do
        answer = g_rand_int_range (r, 0, cfg->vocab_size);
      while (answer == cfg->mask_id);
      um_score_params_init (&sp);
      sp.seed = seed;
      sp.mc_samples = 1;
      sp.batch = 1;
      g_assert_true (um_score_answer (fw, prompt, np, &answer, 1, &sp, &one, NULL, &error));
      g_assert_no_error (error);
      /* batch 1: every sample is the same one-sequence pass, so the same
       * floats (rows of one batch could take other kernel tails). */
      sp.mc_samples = g_rand_int_range (r, 3, 33);
      g_assert_true (um_score_answer (fw, prompt, np, &answer, 1, &sp, &many, NULL, &error));
      g_assert_no_error (error);
      g_assert_cmpfloat (one.std_error, ==, 0.0);   /* exact: one sample has no spread */
      /* Exact by construction (um_score_mean_spread): deviations from the
       * first sample are 0, so the mean is that sample and the spread 0. */
      if (many.std_error != 0.0 || many.log_likelihood != one.log_likelihood)
        g_error ("seed %u: %d samples of %.17g give mean %.17g and spread %.3g", seed, sp.mc_samples,
                 one.log_likelihood, many.log_likelihood, many.std_error);
    }
}

/* um_score_mean_spread () on its own: equal samples of any value give that
 * value and 0; on small integers every step is exact, so the result is. */
static void
test_score_mean_spread (void)
{
  const double ints[] = { 4, 1, 5, 2, 3 };
  double mean, se;
  guint32 seed;

  /* Exact at every step: deviations from 4 are 0, −3, 1, −2, −1, their mean
   * −1 (so the mean 3), Σ(d + 1)² = 10, 10/4/5 = 0.5, and sqrt is correctly
   * rounded. This checks the divisors (n − 1 for the variance, n for the
   * error of the mean). */
  um_score_mean_spread (ints, G_N_ELEMENTS (ints), &mean, &se);
  g_assert_cmpfloat (mean, ==, 3.0);
  g_assert_cmpfloat (se, ==, sqrt (0.5));

  for (guint it = 0; um_test_seed_next (&it, &seed);)
    {
      g_autoptr(GRand) r = g_rand_new_with_seed (seed);
      double x[64];

      for (int k = 0; k < 200; k++)
        {
          /* Any sign, mantissa and a wide range of exponents. */
          double v = ldexp (g_rand_double_range (r, 1.0, 2.0), g_rand_int_range (r, -40, 41));
          int n = g_rand_int_range (r, 1, G_N_ELEMENTS (x) + 1);

          v = g_rand_boolean (r) ? -v : v;
          for (int i = 0; i < n; i++)
            x[i] = v;
          um_score_mean_spread (x, n, &mean, &se);
          if (mean != v || se != 0.0)
            g_error ("seed %u: %d samples of %.17g give mean %.17g and spread %.3g", seed, n, v, mean, se);
        }
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/fast-decoding/exact-unchanged", test_exact_unchanged);
  g_test_add_func ("/fast-decoding/threshold", test_threshold);
  g_test_add_func ("/fast-decoding/factor", test_factor);
  g_test_add_func ("/fast-decoding/constraints", test_constraints);
  g_test_add_func ("/fast-decoding/bad-params", test_bad_params);
  g_test_add_func ("/fast-decoding/cache-modes", test_cache_modes);
  g_test_add_func ("/fast-decoding/score", test_score);
  g_test_add_func ("/fast-decoding/score-zero-spread", test_score_zero_spread);
  g_test_add_func ("/fast-decoding/score-mean-spread", test_score_mean_spread);
  return g_test_run ();
}

/* The per-row choice of compute/um-choose.h: um_choose_row () against the
 * sampler's choose_token () as it was before the rule was shared (copied
 * below), bit for bit, on crafted rows (ties, NaN, −inf, +inf, EOS/EOT
 * rules, guidance, Gumbel draws, random remasking); and the order-free
 * reading the CUDA kernel uses (strided partial results combined in a
 * tree) against the same rows, ids equal and confidences within the
 * rounding of two summation orders (tree_bound). */
#include <math.h>
#include <string.h>

#include "um-choose.h"
#include "um-sampler.h"
#include "um-test-util.h"

/* ---- the pre-refactoring CPU sampler (um-sampler.c), verbatim but for
 *      the Candidate fields passed as pointers ---- */
static void
old_choose_token (float *row, int V, const UmGenParams *p, gint32 eos, gint32 eot, guint64 step, gint32 position,
                  gint32 *out_id, double *out_conf)
{
  gint32 best = 0;

  if (p->logits_eos_inf && eos >= 0)
    row[eos] = -INFINITY;
  if (p->temperature == 0.0)
    {
      for (int v = 1; v < V; v++)
        if (row[v] > row[best])
          best = v;
    }
  else
    {
      double best_score = -INFINITY;
      gboolean have = FALSE;
      guint64 key = (step << 32) ^ (guint32) position;
      for (int v = 0; v < V; v++)
        {
          double u = um_rng_uniform (p->seed, UM_RNG_STREAM_GUMBEL, key, (guint64) v);
          double score = exp ((double) row[v]) / pow (-log (u), p->temperature);
          if (!have || score > best_score)
            {
              best = v;
              best_score = score;
              have = TRUE;
            }
        }
    }
  *out_id = best;
  if (p->confidence_eos_eot_inf)
    {
      if (eot >= 0)
        row[eot] = -INFINITY;
      if (p->temperature == 0.0 && eos >= 0)
        row[eos] = -INFINITY;
    }
  if (p->remasking == UM_REMASK_RANDOM)
    *out_conf = um_rng_uniform (p->seed, UM_RNG_STREAM_RANDOM, step, (guint64) position);
  else
    {
      double mx = -INFINITY, sum = 0.0;
      for (int v = 0; v < V; v++)
        mx = MAX (mx, (double) row[v]);
      if (!isfinite (mx))
        {
          *out_conf = 0.0;
          return;
        }
      for (int v = 0; v < V; v++)
        sum += exp ((double) row[v] - mx);
      *out_conf = exp ((double) row[best] - mx) / sum;
    }
}

/* ---- the kernel's reading (gpu/um-cuda-sample.cu) with @T "threads" ---- */
static void
tree_choose (const UmChooseRule *r, const float *cond, const float *un, int V, gint32 pos, int T, gint32 *out_id,
             double *out_conf)
{
  const float scale = um_choose_cfg_factor (r);
  g_autofree double *key = g_new (double, T), *val = g_new (double, T);
  g_autofree gint32 *idx = g_new (gint32, T), *nan = g_new (gint32, T);
  gint32 best, nan_last;
  double mx;

  for (int t = 0; t < T; t++)
    {
      key[t] = -INFINITY;
      idx[t] = G_MAXINT32;
      nan[t] = -1;
      for (int v = t; v < V; v += T)
        {
          float l = um_choose_value (cond, un, scale, v);
          double k = um_choose_key (r, um_choose_pick_logit (r, l, v), pos, v);
          if (um_choose_better (k, v, key[t], idx[t]))
            {
              key[t] = k;
              idx[t] = v;
            }
          if (isnan (um_choose_conf_logit (r, l, v)))
            nan[t] = v;
        }
    }
  for (int half = T / 2; half > 0; half /= 2)
    for (int t = 0; t < half; t++)
      {
        if (um_choose_better (key[t + half], idx[t + half], key[t], idx[t]))
          {
            key[t] = key[t + half];
            idx[t] = idx[t + half];
          }
        nan[t] = MAX (nan[t], nan[t + half]);
      }
  best = idx[0];
  nan_last = nan[0];
  if (best == G_MAXINT32 || isnan (um_choose_key (r, um_choose_pick_logit (r, um_choose_value (cond, un, scale, 0), 0),
                                                  pos, 0)))
    best = 0;
  *out_id = best;
  if (r->remask_random)
    {
      *out_conf = um_choose_random_conf (r, pos);
      return;
    }
  for (int t = 0; t < T; t++)
    {
      val[t] = -INFINITY;
      for (int v = nan_last + 1 + t; v < V; v += T)
        {
          double l = um_choose_conf_logit (r, um_choose_value (cond, un, scale, v), v);
          val[t] = val[t] > l ? val[t] : l;
        }
    }
  for (int half = T / 2; half > 0; half /= 2)
    for (int t = 0; t < half; t++)
      val[t] = val[t] > val[t + half] ? val[t] : val[t + half];
  mx = nan_last == V - 1 ? NAN : val[0];
  if (!isfinite (mx))
    {
      *out_conf = 0.0;
      return;
    }
  for (int t = 0; t < T; t++)
    {
      val[t] = 0.0;
      for (int v = t; v < V; v += T)
        val[t] += exp ((double) um_choose_conf_logit (r, um_choose_value (cond, un, scale, v), v) - mx);
    }
  for (int half = T / 2; half > 0; half /= 2)
    for (int t = 0; t < half; t++)
      val[t] += val[t + half];
  *out_conf = exp ((double) um_choose_conf_logit (r, um_choose_value (cond, un, scale, best), best) - mx) / val[0];
}

#define V 257
#define EOS 5
#define EOT 7
#define N_ROWS 20

/* Crafted rows, then random ones (some with huge values: exp overflows). */
static void
make_rows (float *x, GRand *rng)
{
  for (int i = 0; i < N_ROWS * V; i++)
    x[i] = (float) g_rand_double_range (rng, -8, 8);
  /* 0: ties everywhere; 1: a tie for the maximum at 3 and 200; 2: NaN at 0;
   * 3: NaN at the end; 4: NaN in the middle; 5: −inf everywhere; 6: +inf
   * twice; 7: EOS the maximum; 8: EOT the maximum; 9: everything −inf but
   * EOS; 10: NaN everywhere; 11: huge values; 12: EOS = NaN. */
  for (int v = 0; v < V; v++)
    {
      x[0 * V + v] = 1.0f;
      x[5 * V + v] = -INFINITY;
      x[9 * V + v] = -INFINITY;
      x[10 * V + v] = NAN;
      x[11 * V + v] *= 200.0f;
    }
  x[1 * V + 3] = x[1 * V + 200] = 50.0f;
  x[2 * V + 0] = NAN;
  x[3 * V + V - 1] = NAN;
  x[4 * V + 100] = NAN;
  x[6 * V + 10] = x[6 * V + 20] = INFINITY;
  x[7 * V + EOS] = 30.0f;
  x[8 * V + EOT] = 30.0f;
  x[9 * V + EOS] = 1.0f;
  x[12 * V + EOS] = NAN;
}

static gboolean
same_double (double a, double b)
{
  return memcmp (&a, &b, sizeof a) == 0;
}

/* The worst-case relative difference of the two confidences: the same V
 * terms exp(l − max) ≥ 0 (the same double operations on the same floats)
 * summed in two orders, each sum within γ_(V−1) of the exact one relatively
 * (Higham §4.2, any order, positive terms), then one division each: the
 * ratio is within (1 + γ)(1 + u)/((1 − γ)(1 − u)) of 1, about 2γ + 2u, with
 * u = 2^-53; 4u more for the check's own rounding of |tc − c|/|c|. */
static double
tree_bound (int n)
{
  const double u = ldexp (1.0, -53), g = n * u / (1.0 - n * u);
  return (1.0 + g) * (1.0 + u) / ((1.0 - g) * (1.0 - u)) - 1.0 + 4.0 * u;
}

static void
check_rules (GRand *rng)
{
  g_autofree float *x = g_new (float, 2 * N_ROWS * V), *row = g_new (float, V);
  const double temps[] = { 0.0, 0.5, 1.0, 2.0 };
  const double cfgs[] = { 0.0, 1.5 };
  int n_nan = 0, n_cases = 0;
  double worst = 0.0;

  make_rows (x, rng);
  make_rows (x + N_ROWS * V, rng);
  for (guint ti = 0; ti < G_N_ELEMENTS (temps); ti++)
    for (int flags = 0; flags < 8; flags++)
      for (guint ci = 0; ci < G_N_ELEMENTS (cfgs); ci++)
        {
          UmGenParams p;
          UmChooseRule r = { 0 };
          gint32 ids[N_ROWS], pos[N_ROWS];
          double conf[N_ROWS];

          um_gen_params_init (&p);
          p.temperature = temps[ti];
          p.cfg_scale = cfgs[ci];
          p.logits_eos_inf = (flags & 1) != 0;
          p.confidence_eos_eot_inf = (flags & 2) != 0;
          p.remasking = flags & 4 ? UM_REMASK_RANDOM : UM_REMASK_LOW_CONFIDENCE;
          p.seed = 42 + flags;
          r.seed = p.seed;
          r.step = 3 + ti;
          r.temperature = p.temperature;
          r.cfg_scale = p.cfg_scale;
          r.eos_id = EOS;
          r.eot_id = EOT;
          r.logits_eos_inf = p.logits_eos_inf;
          r.confidence_eos_eot_inf = p.confidence_eos_eot_inf;
          r.remask_random = p.remasking == UM_REMASK_RANDOM;
          for (int i = 0; i < N_ROWS; i++)
            pos[i] = 30 + 3 * i;
          um_choose_rows (x, N_ROWS, V, &r, pos, ids, conf);
          for (int i = 0; i < N_ROWS; i++)
            {
              const float *cond = x + (size_t) i * V;
              const float *un = r.cfg_scale > 0 ? x + (size_t) (N_ROWS + i) * V : NULL;
              const float scale = (float) (p.cfg_scale + 1.0);
              gint32 id, tid;
              double c, tc;

              /* The sampler combined into the row before choosing. */
              for (int v = 0; v < V; v++)
                row[v] = un != NULL ? un[v] + scale * (cond[v] - un[v]) : cond[v];
              old_choose_token (row, V, &p, EOS, EOT, r.step, pos[i], &id, &c);
              /* Bit for bit: the same double operations on the same floats
               * in the same order, the same libm (ISO C: no FMA contraction). */
              g_assert_cmpint (ids[i], ==, id);
              g_assert_true (same_double (conf[i], c));

              for (int T = 1; T <= 64; T *= 4)
                {
                  tree_choose (&r, cond, un, V, pos[i], T, &tid, &tc);
                  g_assert_cmpint (tid, ==, id);
                  if (isnan (c))
                    {
                      g_assert_true (isnan (tc));
                      n_nan++;
                    }
                  else
                    {
                      double rel = c == tc ? 0.0 : fabs (tc - c) / fabs (c);
                      g_assert_cmpfloat (rel, <=, tree_bound (V));
                      worst = MAX (worst, rel);
                    }
                  n_cases++;
                }
            }
        }
  /* The crafted NaN rows must have reached the NaN branch. */
  g_assert_cmpint (n_nan, >, 0);
  g_test_message ("%d cases, %d NaN confidences, largest relative difference of the tree sum %.3g (bound %.3g)",
                  n_cases, n_nan, worst, tree_bound (V));
}

/* For any row values: the crafted rows stay, the random ones come from
 * every test seed. */
static void
test_rules (void)
{
  guint32 seed;

  for (guint it = 0; um_test_seed_next (&it, &seed);)
    {
      g_autoptr(GRand) rng = g_rand_new_with_seed (seed);
      check_rules (rng);
    }
}

/* The crafted rows' expected answers, written out: the rules as such. */
static void
test_crafted (void)
{
  g_autoptr(GRand) rng = g_rand_new_with_seed (1);
  g_autofree float *x = g_new (float, N_ROWS * V);
  UmChooseRule r = { 0 };
  gint32 id;
  double conf;

  make_rows (x, rng);
  r.eos_id = EOS;
  r.eot_id = EOT;
  um_choose_row (&r, x, NULL, V, 0, &id, &conf);          /* ties: the first */
  g_assert_cmpint (id, ==, 0);
  g_assert_cmpfloat_with_epsilon (conf, 1.0 / V, 1e-15);
  um_choose_row (&r, x + 1 * V, NULL, V, 0, &id, &conf);
  g_assert_cmpint (id, ==, 3);
  um_choose_row (&r, x + 2 * V, NULL, V, 0, &id, &conf);  /* NaN at 0 stays chosen */
  g_assert_cmpint (id, ==, 0);
  g_assert_true (isnan (conf));
  um_choose_row (&r, x + 3 * V, NULL, V, 0, &id, &conf);  /* a row ending in NaN: confidence 0 */
  /* The 0.0s below are assigned for a non-finite maximum, not computed. */
  g_assert_cmpfloat (conf, ==, 0.0);
  um_choose_row (&r, x + 4 * V, NULL, V, 0, &id, &conf);
  g_assert_cmpint (id, !=, 100);
  g_assert_true (isnan (conf));
  um_choose_row (&r, x + 5 * V, NULL, V, 0, &id, &conf);  /* −inf everywhere */
  g_assert_cmpint (id, ==, 0);
  g_assert_cmpfloat (conf, ==, 0.0);
  um_choose_row (&r, x + 6 * V, NULL, V, 0, &id, &conf);  /* +inf: the first, confidence 0 */
  g_assert_cmpint (id, ==, 10);
  g_assert_cmpfloat (conf, ==, 0.0);
  um_choose_row (&r, x + 7 * V, NULL, V, 0, &id, &conf);
  g_assert_cmpint (id, ==, EOS);
  r.logits_eos_inf = TRUE;
  um_choose_row (&r, x + 7 * V, NULL, V, 0, &id, &conf);
  g_assert_cmpint (id, !=, EOS);
  r.logits_eos_inf = FALSE;
  r.confidence_eos_eot_inf = TRUE;
  um_choose_row (&r, x + 8 * V, NULL, V, 0, &id, &conf);  /* EOT chosen, then −inf for the confidence */
  g_assert_cmpint (id, ==, EOT);
  g_assert_cmpfloat (conf, ==, 0.0);
  um_choose_row (&r, x + 9 * V, NULL, V, 0, &id, &conf);  /* only EOS finite, −inf at T = 0 */
  g_assert_cmpint (id, ==, EOS);
  g_assert_cmpfloat (conf, ==, 0.0);
  r.temperature = 1.0;
  um_choose_row (&r, x + 9 * V, NULL, V, 0, &id, &conf);  /* at T > 0 EOS keeps its logit */
  g_assert_cmpint (id, ==, EOS);
  /* Exact: exp (0) / (exp (0) + exact zeros from exp (−inf)) = 1. */
  g_assert_cmpfloat (conf, ==, 1.0);
  r.remask_random = TRUE;
  r.seed = 9;
  r.step = 4;
  um_choose_row (&r, x + 9 * V, NULL, V, 17, &id, &conf);
  g_assert_true (same_double (conf, um_rng_uniform (9, UM_RNG_STREAM_RANDOM, 4, 17)));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/choose/crafted", test_crafted);
  g_test_add_func ("/choose/same-as-before-and-tree", test_rules);
  return g_test_run ();
}

/* Expert routing: the engine's host routing (um_moe_route) and the
 * reference's (um_ref_moe_route) on hand-built cases, above all the
 * group-limited rule of LLaDA 2.x (DeepSeek-V3): experts in equal groups
 * of consecutive indices, a group's score the sum of its two best
 * selection scores, only the n_groups_used best groups kept, the top-k
 * inside them, ties to the lower index at both levels.
 *
 * The cases use sigmoid routers with logits 0 (probability exactly 1/2)
 * and selection biases that are multiples of 1/8, so every selection
 * score and group sum is exact in binary and the ties are real ties, not
 * rounding accidents. Weights are checked to a few ulps of double. */
#include <float.h>
#include <math.h>

#include "um-moe.h"
#include "um-ref-kernels.h"

#define E_MAX 16
#define K_MAX 8

typedef struct {
  const char *what;
  guint E, K, groups, used;
  gboolean norm;
  double scale;
  float z[E_MAX];     /* router logits */
  float bias[E_MAX];  /* selection bias */
  int want[K_MAX];    /* the experts, in order of choice */
} Case;

static void
config_of (const Case *c, UmModelConfig *cfg)
{
  *cfg = (UmModelConfig) { 0 };
  cfg->n_experts = c->E;
  cfg->n_experts_used = c->K;
  cfg->router_func = UM_ROUTER_SIGMOID;
  cfg->router_norm = c->norm;
  cfg->router_scale = c->scale;
  cfg->n_expert_groups = c->groups;
  cfg->n_groups_used = c->used;
}

/* The weights the rule gives the experts c->want: their unbiased sigmoid
 * probabilities, over their sum if c->norm, times c->scale. */
static void
want_weights (const Case *c, double *w)
{
  double sum = 0;
  for (guint k = 0; k < c->K; k++)
    sum += w[k] = 1.0 / (1.0 + exp (-(double) c->z[c->want[k]]));
  for (guint k = 0; k < c->K; k++)
    w[k] = (c->norm ? w[k] / sum : w[k]) * c->scale;
}

/* A few roundings of double (exp, a sum of K, two divisions, a product). */
static void
assert_weight (double got, double want)
{
  g_assert_cmpfloat (fabs (got - want), <=, 16 * DBL_EPSILON * fabs (want));
}

static void
check_case (const Case *c)
{
  UmModelConfig cfg;
  UmMoeRouting r;
  double w[K_MAX], zd[E_MAX], ref_w[K_MAX];
  guint ref_chosen[K_MAX];
  float logits[E_MAX];

  config_of (c, &cfg);
  want_weights (c, w);
  for (guint e = 0; e < c->E; e++)
    {
      logits[e] = c->z[e];
      zd[e] = c->z[e];
    }

  um_moe_routing_init (&r);
  um_moe_route (&cfg, logits, c->bias, 1, &r);
  g_test_message ("%s", c->what);
  for (guint k = 0; k < c->K; k++)
    {
      g_assert_cmpint (r.choice[k], ==, c->want[k]);
      assert_weight (r.weight[k], w[k]);
    }
  /* The grouping by expert agrees with the choice. */
  for (guint k = 0; k < c->K; k++)
    {
      const int e = c->want[k];
      g_assert_cmpint (r.offset[e + 1] - r.offset[e], ==, 1);
      g_assert_cmpint (r.rows[r.offset[e]], ==, 0);
      g_assert_cmpfloat (fabs (r.scale[r.offset[e]] - w[k]), <=, 1e-7 * fabs (w[k]));
    }
  um_moe_routing_clear (&r);

  um_ref_moe_route (&cfg, c->E, zd, c->bias, ref_chosen, ref_w);
  for (guint k = 0; k < c->K; k++)
    {
      g_assert_cmpuint (ref_chosen[k], ==, (guint) c->want[k]);
      assert_weight (ref_w[k], w[k]);
    }
}

static const Case cases[] = {
  {
    /* Selection (1/2 + bias) .875 .125 | .75 .625 | .8125 0 | .25 .375:
     * groups score 1, 1.375, .8125, .625, so groups 1 and 0 stay and
     * expert 4 (second best overall) is out. */
    "groups change the choice: top-3 of 8 in 4 groups, 2 kept",
    8, 3, 4, 2, TRUE, 2.5,
    { 0 },
    { 0.375f, -0.375f, 0.25f, 0.125f, 0.3125f, -0.5f, -0.25f, -0.125f },
    { 0, 2, 3 },
  },
  {
    /* The same scores without groups: expert 4 is in. */
    "no groups: the plain top-3",
    8, 3, 0, 0, TRUE, 2.5,
    { 0 },
    { 0.375f, -0.375f, 0.25f, 0.125f, 0.3125f, -0.5f, -0.25f, -0.125f },
    { 0, 4, 2 },
  },
  {
    /* A group's score is the sum of its two best, not its best: group 0
     * has the single best expert (0.5 + 0.375) but sums 0.875 + 0.125 =
     * 1.0 against group 1's 0.625 + 0.625 = 1.25. Ties inside the kept
     * group (experts 4, 5, 6) go to the lower index. */
    "group score = sum of the top two: top-2 of 8 in 2 groups, 1 kept",
    8, 2, 2, 1, TRUE, 1.0,
    { 0 },
    { 0.375f, -0.375f, -0.5f, -0.5f, 0.125f, 0.125f, 0.125f, -0.5f },
    { 4, 5 },
  },
  {
    /* Selection .75 .75 | .875 .625 | .5 .5 | 1 .5: groups 0, 1 and 3
     * all score 1.5; one kept: group 0 (the lowest index), experts 0 then
     * 1 (tied, lower first). */
    "tied groups: the lower index stays",
    8, 2, 4, 1, FALSE, 1.0,
    { 0 },
    { 0.25f, 0.25f, 0.375f, 0.125f, 0.0f, 0.0f, 0.5f, 0.0f },
    { 0, 1 },
  },
  {
    /* The same with two groups kept: groups 0 and 1; 0.875 first, then
     * the tie of experts 0 and 1 to 0. */
    "tied groups, two kept",
    8, 2, 4, 2, FALSE, 1.0,
    { 0 },
    { 0.25f, 0.25f, 0.375f, 0.125f, 0.0f, 0.0f, 0.5f, 0.0f },
    { 2, 0 },
  },
  {
    /* The weights are the unbiased probabilities: the bias picks experts
     * 5, 6 and 7 (small probabilities), whose sigmoid(z) are renormalised
     * and scaled; groups of 4 with both kept change nothing. */
    "weights from the unbiased probabilities",
    8, 3, 2, 2, TRUE, 2.5,
    { 3.0f, 2.5f, 2.0f, 1.5f, 1.0f, -1.0f, -2.0f, -0.5f },
    { 0, 0, 0, 0, 0, 1.0f, 1.0f, 1.0f },
    { 7, 5, 6 },
  },
  {
    /* 16 experts in 8 groups of 2, 3 kept, top-4; experts 4 and 11 tie
     * (.875) inside the kept groups: 4 first. */
    "16 experts, 8 groups, 3 kept, top-4",
    16, 4, 8, 3, TRUE, 1.0,
    { 0 },
    { 0.25f, -0.5f, 0.0f, -0.25f, 0.375f, 0.125f, -0.5f, 0.0f,
      -0.25f, -0.125f, 0.5f, 0.375f, -0.5f, 0.0f, 0.25f, 0.0f },
    /* group scores .75 .75 1.5 .5 .625 1.875 .5 1.25: keep 5, 2, 7 */
    { 10, 4, 11, 14 },
  },
  {
    /* A configuration a loader should refuse: one group of 2 kept for a
     * top-3. Enough groups stay (2) rather than too few experts. */
    "too few experts in the kept groups: more groups stay",
    8, 3, 4, 1, TRUE, 1.0,
    { 0 },
    { 0.375f, -0.375f, 0.25f, 0.125f, 0.3125f, -0.5f, -0.25f, -0.125f },
    { 0, 2, 3 },
  },
};

static void
test_cases (void)
{
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    check_case (&cases[i]);
}

/* Many tokens at once: each token's choice equals its own routing alone,
 * and the reference agrees, on random logits and biases with groups. */
static void
test_random_tokens (void)
{
  const int T = 64, E = 16, K = 4;
  g_autoptr(GRand) rng = g_rand_new_with_seed (7);
  g_autofree float *logits = g_new (float, T * E);
  float bias[16];
  UmModelConfig cfg = { 0 };
  UmMoeRouting all, one;

  cfg.n_experts = E;
  cfg.n_experts_used = K;
  cfg.router_func = UM_ROUTER_SIGMOID;
  cfg.router_norm = TRUE;
  cfg.router_scale = 2.5;
  cfg.n_expert_groups = 4;
  cfg.n_groups_used = 2;
  for (int i = 0; i < T * E; i++)
    logits[i] = (float) g_rand_double_range (rng, -4, 4);
  for (int e = 0; e < E; e++)
    bias[e] = (float) g_rand_double_range (rng, -0.2, 0.2);

  um_moe_routing_init (&all);
  um_moe_routing_init (&one);
  um_moe_route (&cfg, logits, bias, T, &all);
  for (int t = 0; t < T; t++)
    {
      double z[16], w[4];
      guint chosen[4];
      gboolean group_used[4] = { FALSE };
      int n_groups = 0;

      um_moe_route (&cfg, logits + t * E, bias, 1, &one);
      for (int e = 0; e < E; e++)
        z[e] = logits[t * E + e];
      um_ref_moe_route (&cfg, E, z, bias, chosen, w);
      for (int k = 0; k < K; k++)
        {
          g_assert_cmpint (all.choice[t * K + k], ==, one.choice[k]);
          g_assert_cmpint (all.choice[t * K + k], ==, (int) chosen[k]);
          g_assert_cmpfloat (fabs (all.weight[t * K + k] - w[k]), <=, 1e-14);
          if (!group_used[chosen[k] / 4])
            n_groups++;
          group_used[chosen[k] / 4] = TRUE;
        }
      g_assert_cmpint (n_groups, <=, 2);
    }
  um_moe_routing_clear (&all);
  um_moe_routing_clear (&one);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/moe-route/cases", test_cases);
  g_test_add_func ("/moe-route/random-tokens", test_random_tokens);
  return g_test_run ();
}

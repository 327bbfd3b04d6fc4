#include "um-moe.h"

#include <math.h>
#include <string.h>

void
um_moe_routing_init (UmMoeRouting *r)
{
  memset (r, 0, sizeof *r);
}

void
um_moe_routing_clear (UmMoeRouting *r)
{
  g_free (r->offset);
  g_free (r->rows);
  g_free (r->scale);
  g_free (r->choice);
  g_free (r->weight);
  g_free (r->work);
  g_free (r->fill);
  um_moe_routing_init (r);
}

static void
reserve (UmMoeRouting *r, int n_tokens, int n_experts, int k)
{
  if (n_tokens * k > r->cap_tokens)
    {
      r->cap_tokens = n_tokens * k;
      r->rows = g_renew (gint32, r->rows, r->cap_tokens);
      r->scale = g_renew (float, r->scale, r->cap_tokens);
      r->choice = g_renew (gint32, r->choice, r->cap_tokens);
      r->weight = g_renew (double, r->weight, r->cap_tokens);
    }
  if (n_experts > r->cap_experts)
    {
      r->cap_experts = n_experts;
      r->offset = g_renew (int, r->offset, n_experts + 1);
      r->work = g_renew (double, r->work, 4 * (size_t) n_experts);
      r->fill = g_renew (int, r->fill, n_experts);
    }
}

/* Group-limited routing: with G = cfg->n_expert_groups > 1 the experts form
 * G equal groups of consecutive indices, a group scores the sum of its two
 * best selection scores, and the experts of all but the n_groups_used best
 * groups (ties to the lower index) leave the choice (sel = −inf). A
 * configuration the loader should have refused (G not dividing E, fewer
 * kept experts than k) keeps enough groups rather than choose nothing.
 * @score, @kept: G doubles of work space each. */
static void
limit_groups (const UmModelConfig *cfg, int E, double *sel, double *score, double *kept)
{
  const int G = (int) cfg->n_expert_groups;
  int S, keep;

  if (G <= 1 || E % G != 0)
    return;
  S = E / G;
  keep = MAX (MIN ((int) cfg->n_groups_used, G), ((int) cfg->n_experts_used + S - 1) / S);
  if (keep >= G)
    return;
  for (int g = 0; g < G; g++)
    {
      double b1 = -INFINITY, b2 = -INFINITY;
      for (int e = g * S; e < (g + 1) * S; e++)
        if (sel[e] > b1)
          {
            b2 = b1;
            b1 = sel[e];
          }
        else if (sel[e] > b2)
          b2 = sel[e];
      score[g] = S >= 2 ? b1 + b2 : b1;
    }
  /* keep passes of a maximum over the groups not yet kept; strict > so
   * that ties go to the lower index. */
  for (int g = 0; g < G; g++)
    kept[g] = 0.0;
  for (int n = 0; n < keep; n++)
    {
      int best = -1;
      for (int g = 0; g < G; g++)
        if (kept[g] == 0.0 && (best < 0 || score[g] > score[best]))
          best = g;
      kept[best] = 1.0;
    }
  for (int e = 0; e < E; e++)
    if (kept[e / S] == 0.0)
      sel[e] = -INFINITY;
}

void
um_moe_route (const UmModelConfig *cfg, const float *logits, const float *bias, int n_tokens,
              UmMoeRouting *r)
{
  const int E = cfg->n_experts, k = cfg->n_experts_used;

  reserve (r, n_tokens, E, k);
  r->n_tokens = n_tokens;
  r->n_experts = E;
  r->k = k;
  for (int t = 0; t < n_tokens; t++)
    {
      const float *z = logits + (size_t) t * E;
      double *p = r->work, *sel = r->work + E;
      gint32 *ch = r->choice + (size_t) t * k;
      double *w = r->weight + (size_t) t * k, sum = 0.0;

      if (cfg->router_func == UM_ROUTER_SIGMOID)
        for (int e = 0; e < E; e++)
          p[e] = 1.0 / (1.0 + exp (-(double) z[e]));
      else
        {
          double mx = -INFINITY, s = 0.0;
          for (int e = 0; e < E; e++)
            mx = MAX (mx, (double) z[e]);
          for (int e = 0; e < E; e++)
            s += (p[e] = exp ((double) z[e] - mx));
          for (int e = 0; e < E; e++)
            p[e] /= s;
        }
      for (int e = 0; e < E; e++)
        sel[e] = p[e] + (bias != NULL ? (double) bias[e] : 0.0);
      limit_groups (cfg, E, sel, r->work + 2 * E, r->work + 3 * E);
      /* k is small (≤ 8 in every released model): k passes of a maximum,
       * strict > so that ties go to the lower index, as a stable sort. */
      for (int j = 0; j < k; j++)
        {
          int best = -1;
          for (int e = 0; e < E; e++)
            if (sel[e] != -INFINITY && (best < 0 || sel[e] > sel[best]))
              best = e;
          ch[j] = best;
          w[j] = p[best];
          sum += p[best];
          sel[best] = -INFINITY;
        }
      if (cfg->router_norm)
        for (int j = 0; j < k; j++)
          w[j] /= MAX (sum, 6.1035e-5);
      if (cfg->router_scale != 1.0 && cfg->router_scale != 0.0)
        for (int j = 0; j < k; j++)
          w[j] *= cfg->router_scale;
    }

  /* Counting sort by expert; tokens stay ascending inside a group. */
  memset (r->offset, 0, (E + 1) * sizeof (int));
  for (int i = 0; i < n_tokens * k; i++)
    r->offset[r->choice[i] + 1]++;
  for (int e = 0; e < E; e++)
    r->offset[e + 1] += r->offset[e];
  memcpy (r->fill, r->offset, E * sizeof (int));
  for (int t = 0; t < n_tokens; t++)
    for (int j = 0; j < k; j++)
      {
        int e = r->choice[(size_t) t * k + j], at = r->fill[e]++;
        r->rows[at] = t;
        r->scale[at] = (float) r->weight[(size_t) t * k + j];
      }
}

/* The plan of attention on tensor cores (gpu/um-attention-plan.c), executed
 * with a plain column-major product and softmax, against the CPU reference
 * um_ref_attention (): GQA groups both ways round, several sequences, query
 * subsets, head sizes 64/80/128, sequence lengths no multiple of the tile,
 * queries spread over several tiles, masks (block-causal, causal, random key
 * counts).  Every access is bounds-checked, so the score buffer's size rule
 * is checked too; under a mask, so is the products' cost: no row multiplies
 * more than UM_ATTN_KV_SLACK keys beyond those it sees.
 *
 * Tolerance, exact mode: products accumulate in double and are stored as
 * float, softmax runs in float: scores carry a relative error of ~2⁻²⁴, the
 * probabilities ~|s|·2⁻²⁴ + a few ulps, the output ~1e-6 of max |v|; 1e-5 ·
 * max |v| leaves a margin.
 *
 * TF32 mode rounds every product input to 10 mantissa bits as tensor cores
 * do (u = 2⁻¹⁰ covers rounding and truncation), and checks the bound a test
 * of the CUDA backend against the CPU should use:
 *   Δ = 2.1·u·scale·max_ij Σ_d |q_id|·|k_jd|     (score error)
 *   |o − o_ref| ≤ max|v| · ((e^{2Δ} − 1) + e^{2Δ}·2.1·u) + 1e-5·max|v|
 * (a score error Δ moves each probability by a factor within e^{±2Δ}; the
 * second product rounds p and v once more). */
#include <math.h>
#include <string.h>

#include "um-attention-plan.h"
#include "um-ref-kernels.h"

#define TF32_U (1.0 / 1024.0)

typedef struct {
  float *buf[5];
  size_t size[5];
  gboolean tf32;
  int gemms, softmaxes;
  const gint32 *kv_len;   /* the plan's mask, NULL: none */
  double score_macs;      /* multiply-adds of the score products */
} Exec;

static float
tf32 (float x)
{
  /* Round to nearest (ties away), keeping 10 of float's 23 mantissa bits. */
  guint32 b;
  memcpy (&b, &x, sizeof b);
  b = (b + 0x1000u) & ~0x1fffu;
  memcpy (&x, &b, sizeof b);
  return x;
}

static float *
at (Exec *e, const UmAttnOperand *o, int batch, int64_t idx)
{
  const int64_t i = o->off + (int64_t) batch * o->stride + idx;

  g_assert_cmpint (i, >=, 0);
  g_assert_cmpint (i, <, (int64_t) e->size[o->buf]);
  return &e->buf[o->buf][i];
}

static gboolean
execute (const UmAttnStep *st, gpointer user_data)
{
  Exec *e = user_data;

  if (st->kind == UM_ATTN_STEP_SOFTMAX)
    {
      /* As the kernel: row max, exp, sum, normalise, in float, over the
       * row's own keys; 0 for the rest. */
      g_assert_cmpint (st->s_off + (int64_t) st->rows * st->len, <=, (int64_t) e->size[UM_ATTN_BUF_S]);
      g_assert_true (!st->masked || e->kv_len != NULL);
      for (int r = 0; r < st->rows; r++)
        {
          float *s = e->buf[UM_ATTN_BUF_S] + st->s_off + (int64_t) r * st->len;
          const int n = st->masked ? MIN (e->kv_len[st->q0 + r % st->q_rows], st->len) : st->len;
          float mx = -INFINITY, sum = 0.0f;
          if (e->kv_len != NULL)
            /* the tile's widest row decides len; none sees more */
            g_assert_cmpint (e->kv_len[st->q0 + r % st->q_rows], <=, st->len);
          for (int j = 0; j < n; j++)
            mx = MAX (mx, s[j]);
          for (int j = 0; j < n; j++)
            {
              s[j] = expf (s[j] - mx);
              sum += s[j];
            }
          for (int j = 0; j < n; j++)
            s[j] /= sum;
          for (int j = n; j < st->len; j++)
            s[j] = 0.0f;
        }
      e->softmaxes++;
      return TRUE;
    }

  g_assert_cmpint (st->batch, >=, 1);
  g_assert_cmpint (st->c.ld, >=, st->m);
  g_assert_cmpint (st->a.ld, >=, st->trans_a ? st->k : st->m);
  g_assert_cmpint (st->b.ld, >=, st->trans_b ? st->n : st->k);
  for (int b = 0; b < st->batch; b++)
    for (int j = 0; j < st->n; j++)
      for (int i = 0; i < st->m; i++)
        {
          double s = 0;
          for (int l = 0; l < st->k; l++)
            {
              float x = *at (e, &st->a, b, st->trans_a ? l + (int64_t) i * st->a.ld : i + (int64_t) l * st->a.ld);
              float y = *at (e, &st->b, b, st->trans_b ? j + (int64_t) l * st->b.ld : l + (int64_t) j * st->b.ld);
              if (e->tf32)
                x = tf32 (x), y = tf32 (y);
              s += (double) x * y;
            }
          *at (e, &st->c, b, i + (int64_t) j * st->c.ld) = (float) (st->alpha * s);
        }
  e->gemms++;
  if (st->c.buf == UM_ATTN_BUF_S)
    e->score_macs += (double) st->m * st->n * st->k * st->batch;
  return TRUE;
}

typedef struct {
  int n_heads, n_kv_heads, head_dim, seq_len, n_seq;
  int tile_rows;
  /* query rows: for sequence s (in the order given), positions p0 ≤ p < p1 */
  int n_runs;
  struct { int seq, p0, p1; } runs[4];
  /* the keys position p sees: 0 all, B > 0 block-causal (blocks of B),
   * -1 causal, -2 random from 1 to L */
  int mask;
} Case;

static void
check_case (const Case *c, gboolean use_tf32, int expect_calls)
{
  const int H = c->n_heads, Hkv = c->n_kv_heads, hd = c->head_dim, L = c->seq_len;
  const int64_t qs = (int64_t) H * hd, kvs = (int64_t) Hkv * hd;
  const double scale = 1.0 / sqrt ((double) hd);
  g_autoptr(GRand) rng = g_rand_new_with_seed (1234u + (guint) (H * 31 + hd + L));
  g_autofree float *qf = g_new (float, (size_t) c->n_seq * L * qs);
  g_autofree float *kf = g_new (float, (size_t) c->n_seq * L * kvs);
  g_autofree float *vf = g_new (float, (size_t) c->n_seq * L * kvs);
  g_autofree double *qd = g_new (double, (size_t) L * qs);
  g_autofree double *kd = g_new (double, (size_t) L * kvs);
  g_autofree double *vd = g_new (double, (size_t) L * kvs);
  g_autofree double *ref = g_new (double, (size_t) c->n_seq * L * qs);
  g_autofree gint32 *q_seq = NULL, *pos_len = NULL, *q_len = NULL;
  g_autofree float *q = NULL, *out = NULL, *scores = NULL;
  double max_v = 0, max_qk = 0, worst = 0, bound;
  int nq = 0;
  Exec e = { { NULL }, { 0 }, use_tf32, 0, 0 };

  for (size_t i = 0; i < (size_t) c->n_seq * L * qs; i++)
    qf[i] = (float) g_rand_double_range (rng, -1, 1);
  for (size_t i = 0; i < (size_t) c->n_seq * L * kvs; i++)
    {
      kf[i] = (float) g_rand_double_range (rng, -1, 1);
      vf[i] = (float) g_rand_double_range (rng, -1, 1);
      max_v = MAX (max_v, fabs (vf[i]));
    }

  if (c->mask != 0)
    {
      pos_len = g_new (gint32, L);
      for (int p = 0; p < L; p++)
        pos_len[p] = c->mask > 0 ? MIN (L, (p / c->mask + 1) * c->mask)
                     : c->mask == -1 ? p + 1
                     : g_rand_int_range (rng, 1, L + 1);
    }

  /* The reference: each whole sequence, in double. */
  for (int s = 0; s < c->n_seq; s++)
    {
      for (int64_t i = 0; i < L * qs; i++)
        qd[i] = qf[s * L * qs + i];
      for (int64_t i = 0; i < L * kvs; i++)
        kd[i] = kf[s * L * kvs + i], vd[i] = vf[s * L * kvs + i];
      um_ref_attention (qd, kd, vd, L, pos_len, H, Hkv, hd, ref + (int64_t) s * L * qs);
    }

  for (int r = 0; r < c->n_runs; r++)
    nq += c->runs[r].p1 - c->runs[r].p0;
  q_seq = g_new (gint32, nq);
  q_len = pos_len != NULL ? g_new (gint32, nq) : NULL;
  q = g_new (float, (size_t) nq * qs);
  out = g_new (float, (size_t) nq * qs);
  for (int r = 0, i = 0; r < c->n_runs; r++)
    for (int p = c->runs[r].p0; p < c->runs[r].p1; p++, i++)
      {
        q_seq[i] = c->runs[r].seq;
        if (q_len != NULL)
          q_len[i] = pos_len[p];
        memcpy (q + (int64_t) i * qs, qf + ((int64_t) c->runs[r].seq * L + p) * qs, qs * sizeof (float));
      }
  for (size_t i = 0; i < (size_t) nq * qs; i++)
    out[i] = NAN;   /* every element must be written */

  e.size[UM_ATTN_BUF_S] = um_attention_plan_score_floats (c->tile_rows, L, H);
  scores = g_new (float, e.size[UM_ATTN_BUF_S]);
  e.buf[UM_ATTN_BUF_Q] = q, e.size[UM_ATTN_BUF_Q] = (size_t) nq * qs;
  e.buf[UM_ATTN_BUF_K] = kf, e.size[UM_ATTN_BUF_K] = (size_t) c->n_seq * L * kvs;
  e.buf[UM_ATTN_BUF_V] = vf, e.size[UM_ATTN_BUF_V] = (size_t) c->n_seq * L * kvs;
  e.buf[UM_ATTN_BUF_S] = scores;
  e.buf[UM_ATTN_BUF_OUT] = out, e.size[UM_ATTN_BUF_OUT] = (size_t) nq * qs;

  e.kv_len = q_len;
  g_assert_true (um_attention_plan (nq, q_seq, q_len, L, H, Hkv, hd, c->tile_rows, execute, &e));

  if (q_len != NULL)
    {
      /* The score products' cost: between the keys the rows see and at
       * most UM_ATTN_KV_SLACK more each. */
      double seen = 0, most = 0;
      for (int i = 0; i < nq; i++)
        {
          seen += (double) H * hd * q_len[i];
          most += (double) H * hd * MIN (L, q_len[i] + UM_ATTN_KV_SLACK);
        }
      g_test_message ("masked: score products %.0f multiply-adds for %.0f seen (%.0f unmasked)", e.score_macs,
                      seen, (double) nq * H * hd * L);
      g_assert_cmpfloat (e.score_macs, >=, seen);
      g_assert_cmpfloat (e.score_macs, <=, most);
      g_assert_cmpint (e.gemms, ==, 2 * expect_calls * e.softmaxes);
    }
  else
  /* The tiles: ceil (run / tile) each, with expect_calls products per
   * product kind and one softmax. */
  {
    int tiles = 0;
    for (int r = 0; r < c->n_runs; r++)
      tiles += (c->runs[r].p1 - c->runs[r].p0 + c->tile_rows - 1) / c->tile_rows;
    g_assert_cmpint (e.softmaxes, ==, tiles);
    g_assert_cmpint (e.gemms, ==, 2 * expect_calls * tiles);
  }

  for (int r = 0, i = 0; r < c->n_runs; r++)
    for (int p = c->runs[r].p0; p < c->runs[r].p1; p++, i++)
      {
        const int s = c->runs[r].seq;
        for (int h = 0; h < H; h++)
          {
            const int g = h / (H / Hkv);
            for (int j = 0; j < L; j++)
              {
                double a = 0;
                for (int d = 0; d < hd; d++)
                  a += fabs (qf[((int64_t) s * L + p) * qs + h * hd + d])
                       * fabs (kf[((int64_t) s * L + j) * kvs + g * hd + d]);
                max_qk = MAX (max_qk, a);
              }
          }
        for (int64_t x = 0; x < qs; x++)
          {
            const double got = out[(int64_t) i * qs + x], want = ref[((int64_t) s * L + p) * qs + x];
            g_assert_false (isnan (got));
            worst = MAX (worst, fabs (got - want));
          }
      }

  if (use_tf32)
    {
      const double delta = 2.1 * TF32_U * scale * max_qk;
      bound = max_v * ((exp (2 * delta) - 1) + exp (2 * delta) * 2.1 * TF32_U) + 1e-5 * max_v;
    }
  else
    bound = 1e-5 * max_v;
  g_test_message ("H %d/%d hd %d L %d tile %d nq %d %s: max error %.3g (bound %.3g, %.2f of it)",
                  H, Hkv, hd, L, c->tile_rows, nq, use_tf32 ? "tf32" : "exact", worst, bound, worst / bound);
  g_assert_cmpfloat (worst, <=, bound);
}

static const Case cases[] = {
  /* GQA 8/2: batches over the 2 kv heads, 4 calls; whole sequences, 5-row tiles */
  { 8, 2, 64, 37, 3, 5, 3, { { 0, 0, 37 }, { 1, 0, 37 }, { 2, 0, 37 } } },
  /* GQA 6/3, hd 80: block rows of each sequence (the KV-cache path) */
  { 6, 3, 80, 29, 2, 4, 2, { { 0, 8, 19 }, { 1, 8, 19 } } },
  /* no GQA, hd 128: sequences out of order, a sequence in two runs */
  { 4, 4, 128, 23, 2, 3, 3, { { 1, 2, 9 }, { 0, 0, 23 }, { 1, 15, 16 } } },
  /* groups larger than their number (6/2, 8/1): batches over a group's heads, K and V strides 0 */
  { 6, 2, 80, 19, 2, 7, 2, { { 0, 0, 19 }, { 1, 3, 12 } } },
  { 8, 1, 64, 17, 1, 6, 1, { { 0, 1, 17 } } },
  /* one tile holding a whole run */
  { 4, 2, 64, 21, 2, 64, 2, { { 0, 0, 21 }, { 1, 5, 6 } } },
  /* masks: LLaDA 2.x's heads (4/2 of 16) block-causal; tiles cut by the
   * key counts' spread (L 150 > the slack), causal and random counts */
  { 4, 2, 16, 45, 2, 64, 2, { { 0, 0, 45 }, { 1, 0, 45 } }, 4 },
  { 4, 2, 16, 150, 1, 200, 1, { { 0, 0, 150 } }, 32 },
  { 8, 2, 64, 150, 2, 40, 2, { { 1, 0, 150 }, { 0, 17, 90 } }, -1 },
  { 6, 3, 80, 130, 2, 64, 3, { { 0, 0, 130 }, { 1, 3, 40 }, { 0, 7, 8 } }, -2 },
};

static int
calls_of (const Case *c)
{
  return MIN (c->n_heads / c->n_kv_heads, c->n_kv_heads);
}

static void
test_exact (void)
{
  for (size_t i = 0; i < G_N_ELEMENTS (cases); i++)
    check_case (&cases[i], FALSE, calls_of (&cases[i]));
}

static void
test_tf32 (void)
{
  for (size_t i = 0; i < G_N_ELEMENTS (cases); i++)
    check_case (&cases[i], TRUE, calls_of (&cases[i]));
}

static void
test_tile_rows (void)
{
  /* LLaDA-8B: 32 heads; a 64 MiB score buffer holds 128 rows at L = 4096,
   * 455 at 1152. */
  g_assert_cmpint (um_attention_plan_tile_rows (64u << 20, 4096, 4096, 32), ==, 128);
  g_assert_cmpint (um_attention_plan_tile_rows (64u << 20, 4096, 1152, 32), ==, 455);
  g_assert_cmpint (um_attention_plan_tile_rows (64u << 20, 100, 1152, 32), ==, 100);
  g_assert_cmpint (um_attention_plan_tile_rows (1000, 10, 100, 4), ==, 0);
  g_assert_cmpint (um_attention_plan_tile_rows (1600, 10, 100, 4), ==, 1);
  g_assert_cmpint (um_attention_plan_tile_rows (1 << 20, 0, 100, 4), ==, 0);
  g_assert_cmpuint (um_attention_plan_score_floats (3, 100, 4), ==, 1200);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/attention-plan/exact", test_exact);
  g_test_add_func ("/attention-plan/tf32", test_tf32);
  g_test_add_func ("/attention-plan/tile-rows", test_tile_rows);
  return g_test_run ();
}

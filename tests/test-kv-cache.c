/* The block KV cache (Fast-dLLM) against full forward passes: a refreshing
 * pass is the full pass, a cached step on the canvas the cache was made
 * from gives the full pass's logits (prefix and dual), and after tokens of
 * the block change the difference — the stale keys and values outside the
 * computed rows — is measured. */
#include <math.h>
#include <string.h>

#include "um-forward.h"
#include "um-test-util.h"

/* Largest |a − b| over the largest |b|. */
static double
rel_diff (const float *a, const float *b, size_t n)
{
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++)
    {
      num = MAX (num, fabs ((double) a[i] - b[i]));
      den = MAX (den, fabs ((double) b[i]));
    }
  return den > 0 ? num / den : num;
}

static void
check_model (const char *path, int n_seq)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(UmModel) model = um_model_load (path, NULL, &error);
  g_autoptr(UmBackend) be = NULL;
  g_autoptr(UmForward) fw = NULL;
  const int L = 40, start = 16, end = 24, nb = end - start;
  const int T = n_seq * L, n = n_seq * nb;
  size_t V;
  g_autofree gint32 *ids = NULL, *rows = NULL;
  g_autofree float *full = NULL, *cached = NULL;

  g_assert_no_error (error);
  be = um_backend_cpu_new (0, 0, &error);
  fw = um_forward_new (model, be, &error);
  g_assert_no_error (error);
  V = model->cfg.vocab_size;
  ids = g_new (gint32, T);
  rows = g_new (gint32, n);
  full = g_new (float, n * V);
  cached = g_new (float, n * V);
  for (int s = 0; s < n_seq; s++)
    for (int p = 0; p < L; p++)
      ids[s * L + p] = p < start ? (p * 37 + 11 + s * 5) % 500 : model->cfg.mask_id;
  for (int s = 0; s < n_seq; s++)
    for (int i = 0; i < nb; i++)
      rows[s * nb + i] = s * L + start + i;

  /* A refreshing pass is the full pass, bit for bit. */
  g_assert_true (um_forward_logits (fw, ids, n_seq, L, rows, n, full, NULL, &error));
  g_assert_true (um_forward_logits_cached (fw, ids, n_seq, L, start, end, TRUE, FALSE, rows, n, cached, NULL,
                                           &error));
  g_assert_no_error (error);
  g_assert_cmpmem (cached, n * V * sizeof (float), full, n * V * sizeof (float));

  /* Cached steps on the same canvas: the kept keys and values are exact, so
   * only the products' rounding over fewer rows differs. */
  for (int dual = 0; dual <= 1; dual++)
    {
      double d;
      g_assert_true (um_forward_logits_cached (fw, ids, n_seq, L, start, end, FALSE, dual, rows, n, cached, NULL,
                                               &error));
      g_assert_no_error (error);
      d = rel_diff (cached, full, n * V);
      g_test_message ("%s, same canvas: %.3g", dual ? "dual" : "prefix", d);
      g_assert_cmpfloat (d, <, 1e-4);
    }

  /* Commit half the block: the cache is now stale outside the rows a step
   * computes (prefix: the positions before the block; dual: also after). */
  for (int s = 0; s < n_seq; s++)
    for (int i = 0; i < nb; i += 2)
      ids[s * L + start + i] = (i * 53 + 7) % 500;
  g_assert_true (um_forward_logits (fw, ids, n_seq, L, rows, n, full, NULL, &error));
  for (int dual = 0; dual <= 1; dual++)
    {
      double d;
      g_assert_true (um_forward_logits_cached (fw, ids, n_seq, L, start, end, FALSE, dual, rows, n, cached, NULL,
                                               &error));
      g_assert_no_error (error);
      d = rel_diff (cached, full, n * V);
      g_test_message ("%s after the block changed: stale cache moves the logits by %.3g of their range",
                      dual ? "dual" : "prefix", d);
      g_assert_true (isfinite (d));
    }

  /* Rows outside what a cached step computes are refused. */
  {
    gint32 bad = 0;
    g_assert_false (um_forward_logits_cached (fw, ids, n_seq, L, start, end, FALSE, TRUE, &bad, 1, cached, NULL,
                                              &error));
    g_assert_nonnull (error);
  }
}

static void
test_tiny (void)
{
  g_autofree char *path = um_test_data_path ("tiny-llada");
  check_model (path, 1);
}

static void
test_cfg (void)
{
  g_autofree char *path = um_test_data_path ("tiny-llada");
  check_model (path, 2);
}

static void
test_kquant (void)
{
  g_autofree char *path = um_test_data_path ("small-kquant-q4_k_m.gguf");
  check_model (path, 1);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/kv-cache/tiny", test_tiny);
  g_test_add_func ("/kv-cache/cfg", test_cfg);
  g_test_add_func ("/kv-cache/kquant", test_kquant);
  return g_test_run ();
}

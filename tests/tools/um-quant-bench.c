/* um-quant-bench.c — speed of dequantization and of the two ways to
 * multiply by quantized weights: (a) dequantize tiles of W rows to f32 and
 * call OpenBLAS sgemm per tile, tiles spread over OpenMP threads, vs (b) the
 * direct quantized dot product with activations quantized to Q8.
 *
 *   um-quant-bench [--types q4_0,q4_k,...] [--m 64,128,256] [--n 4096,12288]
 *                  [--k 4096] [--tiles 0,32,64,128,256] [--reps 3] [--no-q8]
 *
 * Prints GFLOP/s (2*M*N*K / time, best of --reps) per type and approach;
 * "default" is um_quant_matmul ()'s own choice (for F32: one sgemm threaded
 * by OpenBLAS; tileN for F32 is our OpenMP tiling without a copy).
 * Run with OMP_NUM_THREADS set to the number of cores.
 *
 * Results on the 2-core AMD EPYC (Zen 4, 2.6 GHz; our kernels AVX2,
 * OpenBLAS 0.3.21 OpenMP build using its AVX-512 "Cooperlake" kernels),
 * K = 4096, best of 3-5 (the machine was shared, so 2-thread numbers are
 * from quiet moments):
 *   1 thread:  dequant + sgemm 63-65 GFLOP/s at M = 64, 83-88 at M = 256,
 *              for every type (dequantization runs at 8-16 Gelem/s, a few
 *              % of the time); direct Q8 product 38-70 (Q6_K 70, Q8_0 58,
 *              Q4_K 57, Q4_0 55, Q5_K 55, Q5_0 50, Q4_1 42, Q5_1 38), only
 *              Q6_K at M = 64 ahead (+10%); at M <= 16 the direct product
 *              is 2-5x faster.
 *   2 threads: dequant + sgemm 115-120 at M = 64, 140-155 at M = 128..256;
 *              direct Q8 ~110-116 for Q4_0/Q8_0.
 */
#include <glib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "um-dtype.h"
#include "um-quant.h"

static GArray *
parse_list (const char *s)
{
  GArray *a = g_array_new (FALSE, FALSE, sizeof (gint64));
  char **parts = g_strsplit (s, ",", -1);
  for (char **p = parts; *p != NULL; p++)
    if (**p != '\0')
      {
        gint64 v = g_ascii_strtoll (*p, NULL, 10);
        g_array_append_val (a, v);
      }
  g_strfreev (parts);
  return a;
}

static double
now (void)
{
  return (double) g_get_monotonic_time () / 1e6;
}

/* Random weights: quantize 256 rows of Gaussian data once and repeat them,
 * since the reference K-quant quantizers are too slow for 50M elements. */
static uint8_t *
make_weights (UmDType t, int64_t n, int64_t k, size_t *row_bytes_out)
{
  const int64_t base_rows = MIN (n, (int64_t) 256);
  uint64_t rb;
  GRand *r = g_rand_new_with_seed (42);
  float *x = g_new (float, base_rows * k);
  uint8_t *w;

  g_assert_true (um_dtype_bytes (t, (uint64_t) k, &rb));
  w = g_malloc ((size_t) rb * (size_t) n);
  for (int64_t i = 0; i < base_rows * k; i++)
    x[i] = (float) (g_rand_double_range (r, -1, 1) + g_rand_double_range (r, -1, 1)) * 0.02f;
  g_assert_true (um_quant_quantize_row_ref (t, x, w, base_rows * k));
  for (int64_t row = base_rows; row < n; row++)
    memcpy (w + (size_t) row * rb, w + (size_t) (row % base_rows) * rb, (size_t) rb);
  g_free (x);
  g_rand_free (r);
  *row_bytes_out = (size_t) rb;
  return w;
}

static void
bench_dequant (UmDType t, const uint8_t *w, int64_t k, size_t row_bytes)
{
  /* One thread, 64 rows at a time into a 1 MiB buffer: what each matmul
   * thread does. */
  const int64_t rows = 64, reps = 40;
  float *buf = g_malloc (rows * k * sizeof (float));
  double best = 1e30;

  for (int rep = 0; rep < 3; rep++)
    {
      double t0 = now ();
      for (int64_t i = 0; i < reps; i++)
        um_quant_dequantize_row (t, w + (size_t) i * rows * row_bytes, buf, rows * k);
      best = MIN (best, now () - t0);
    }
  double elems = (double) reps * rows * k;
  printf ("%-5s dequant (1 thread): %7.2f Gelem/s = %6.2f GB/s written, %5.2f GB/s read\n",
          um_dtype_name (t), elems / best / 1e9, elems * 4 / best / 1e9,
          (double) reps * rows * row_bytes / best / 1e9);
  g_free (buf);
}

int
main (int argc, char **argv)
{
  char *types_s = NULL, *m_s = NULL, *n_s = NULL, *tiles_s = NULL;
  gint64 k = 4096, reps = 3;
  gboolean no_q8 = FALSE, no_tiles = FALSE;
  GOptionEntry entries[] = {
    { "types", 0, 0, G_OPTION_ARG_STRING, &types_s, "Weight types", "q4_0,q4_k,..." },
    { "m", 0, 0, G_OPTION_ARG_STRING, &m_s, "Activation rows", "64,128,256" },
    { "n", 0, 0, G_OPTION_ARG_STRING, &n_s, "Weight rows", "4096,12288" },
    { "k", 0, 0, G_OPTION_ARG_INT64, &k, "Inner dimension", "4096" },
    { "tiles", 0, 0, G_OPTION_ARG_STRING, &tiles_s, "Tile heights for (a), 0 = default", "0,32,64,128,256" },
    { "reps", 0, 0, G_OPTION_ARG_INT64, &reps, "Repetitions (best is kept)", "3" },
    { "no-q8", 0, 0, G_OPTION_ARG_NONE, &no_q8, "Skip the direct quantized product", NULL },
    { "no-tiles", 0, 0, G_OPTION_ARG_NONE, &no_tiles, "Only the default tile height", NULL },
    { NULL, 0, 0, 0, NULL, NULL, NULL }
  };
  GOptionContext *ctx = g_option_context_new ("- quantized matmul benchmark");
  GError *error = NULL;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!g_option_context_parse (ctx, &argc, &argv, &error))
    {
      g_printerr ("%s\n", error->message);
      return 1;
    }
  g_option_context_free (ctx);

  char **type_names = g_strsplit (types_s ? types_s : "f32,f16,bf16,q8_0,q4_0,q4_1,q5_0,q5_1,q4_k,q5_k,q6_k", ",", -1);
  GArray *ms = parse_list (m_s ? m_s : "64,128,256");
  GArray *ns = parse_list (n_s ? n_s : "4096,12288");
  GArray *tiles = parse_list (no_tiles ? "0" : (tiles_s ? tiles_s : "0,32,64,128,256"));
  int threads = 1;
#ifdef _OPENMP
  threads = omp_get_max_threads ();
#endif

  printf ("threads %d, SIMD %s, K = %" G_GINT64_FORMAT "\n", threads, um_quant_simd_level (), k);

  for (char **tn = type_names; *tn != NULL; tn++)
    {
      UmDType t;
      if (!um_dtype_from_name (*tn, &t))
        {
          g_printerr ("unknown type %s\n", *tn);
          return 1;
        }
      for (guint ni = 0; ni < ns->len; ni++)
        {
          int64_t n = g_array_index (ns, gint64, ni);
          size_t row_bytes;
          uint8_t *w = make_weights (t, n, k, &row_bytes);
          int64_t max_m = 0;

          if (ni == 0 && t != UM_DTYPE_F32)
            bench_dequant (t, w, k, row_bytes);
          for (guint mi = 0; mi < ms->len; mi++)
            max_m = MAX (max_m, g_array_index (ms, gint64, mi));

          float *x = g_new (float, max_m * k), *out = g_new (float, max_m * n);
          for (int64_t i = 0; i < max_m * k; i++)
            x[i] = (float) sin ((double) i * 0.37);
          size_t scratch_bytes = (size_t) threads * 2048 * (size_t) k * sizeof (float);
          float *scratch = g_malloc (scratch_bytes);

          for (guint mi = 0; mi < ms->len; mi++)
            {
              int64_t m = g_array_index (ms, gint64, mi);
              double flops = 2.0 * (double) m * (double) n * (double) k;
              /* approaches: tile heights (0 = the default choice; for F32 0
               * is one OpenBLAS-threaded sgemm, > 0 our OpenMP tiling
               * without a copy), then -1 = direct quantized product */
              GArray *ap = g_array_copy (tiles);
              gint64 q8 = -1;
              if (!no_q8 && um_quant_has_vec_dot (t))
                g_array_append_val (ap, q8);
              double *best = g_new (double, ap->len);
              GString *line = g_string_new (NULL);

              for (guint ai = 0; ai < ap->len; ai++)
                best[ai] = 1e30;
              /* interleaved, so that all approaches see the same
               * interference from other processes; the best time counts */
              for (int rep = 0; rep < reps; rep++)
                for (guint ai = 0; ai < ap->len; ai++)
                  {
                    gint64 a = g_array_index (ap, gint64, ai);
                    double t0 = now ();
                    gboolean ok = a >= 0
                      ? um_quant_matmul_tiled (t, w, n, k, x, m, out, a, scratch, scratch_bytes)
                      : um_quant_matmul_q8 (t, w, n, k, x, m, out);
                    if (!ok)
                      g_error ("matmul failed");
                    best[ai] = MIN (best[ai], now () - t0);
                  }

              g_string_append_printf (line, "%-5s M=%-4" G_GINT64_FORMAT " N=%-6" G_GINT64_FORMAT,
                                      um_dtype_name (t), m, n);
              for (guint ai = 0; ai < ap->len; ai++)
                {
                  gint64 a = g_array_index (ap, gint64, ai);
                  if (a > 0)
                    g_string_append_printf (line, "  tile%-4" G_GINT64_FORMAT, a);
                  else
                    g_string_append (line, a == 0 ? "  default " : "  direct-q8");
                  g_string_append_printf (line, " %6.1f", flops / best[ai] / 1e9);
                }
              printf ("%s   GFLOP/s\n", line->str);
              fflush (stdout);
              g_string_free (line, TRUE);
              g_array_unref (ap);
              g_free (best);
            }
          g_free (scratch);
          g_free (x);
          g_free (out);
          g_free (w);
        }
    }
  g_strfreev (type_names);
  g_array_unref (ms);
  g_array_unref (ns);
  g_array_unref (tiles);
  return 0;
}

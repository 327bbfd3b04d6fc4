/* um-attn-bench.c — speed of attention's two products (q·kᵀ and ·v, see
 * compute/um-attn-cpu.h) in each kernel this CPU level can run, OpenBLAS's
 * sgemm among them, and of the whole attention op with each.
 *
 *   um-attn-bench [--len 96,128,512] [--heads 32] [--head-dim 128] [--reps 5]
 *                 [--kernels blas,portable,avx2,avx512]
 *
 * "products": one task's two products (64 query rows × L keys × head-dim)
 * on one thread, GFLOP/s = 4·64·L·hd / time; "softmax": that task's
 * softmax (the CPU level's, whatever the kernels); "attention": um_cpu_attention
 * over L rows and keys, all heads, on the threads OpenMP gives (set
 * OMP_NUM_THREADS), GFLOP/s = 4·L²·hd·heads / time, and its speed relative
 * to OpenBLAS's ("vs blas" > 1: faster).  Best of --reps.
 * UM_CPU_ISA caps the level (kernels above it are skipped), and
 * OPENBLAS_CORETYPE picks OpenBLAS's kernel set. */
#include <glib.h>
#include <math.h>
#include <stdio.h>

#include "um-attn-cpu.h"
#include "um-cpu-isa.h"
#include "um-cpu-kernels.h"

extern char *openblas_get_corename (void);

static GArray *
parse_list (const char *s)
{
  GArray *a = g_array_new (FALSE, FALSE, sizeof (int));
  g_auto(GStrv) parts = g_strsplit (s, ",", -1);
  for (char **p = parts; *p != NULL; p++)
    if (**p != '\0')
      {
        int v = (int) g_ascii_strtoll (*p, NULL, 10);
        g_array_append_val (a, v);
      }
  return a;
}

static void
fill (float *x, size_t n, guint32 seed)
{
  for (size_t i = 0; i < n; i++)
    {
      seed = seed * 1664525u + 1013904223u;
      x[i] = (float) (seed >> 8) / 16777216.0f - 0.5f;
    }
}

int
main (int argc, char **argv)
{
  g_autofree char *lens = g_strdup ("96,128,512"), *kernels = NULL;
  gboolean use[UM_ATTN_N_IMPLS];
  int heads = 32, hd = 128, reps = 5;
  GOptionEntry entries[] = {
    { "len", 0, 0, G_OPTION_ARG_STRING, &lens, "Sequence lengths", "L,…" },
    { "heads", 0, 0, G_OPTION_ARG_INT, &heads, "Heads (default 32)", "N" },
    { "head-dim", 0, 0, G_OPTION_ARG_INT, &hd, "Head size (default 128)", "N" },
    { "reps", 0, 0, G_OPTION_ARG_INT, &reps, "Repetitions, best kept (default 5)", "N" },
    { "kernels", 0, 0, G_OPTION_ARG_STRING, &kernels, "Kernels to time (default: all this level runs)",
      "blas,portable,avx2,avx512" },
    { NULL }
  };
  g_autoptr(GOptionContext) ctx = g_option_context_new ("— attention kernels' speed");
  g_autoptr(GError) error = NULL;
  g_autoptr(GArray) L = NULL;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!g_option_context_parse (ctx, &argc, &argv, &error) || heads < 1 || hd < 1 || reps < 1)
    {
      fprintf (stderr, "um-attn-bench: %s\n", error ? error->message : "bad arguments");
      return 2;
    }
  L = parse_list (lens);
  for (int i = 0; i < UM_ATTN_N_IMPLS; i++)
    use[i] = i != UM_ATTN_AUTO && um_attn_impl_available ((UmAttnImpl) i);
  if (kernels != NULL)
    {
      g_auto(GStrv) names = g_strsplit (kernels, ",", -1);
      for (int i = 0; i < UM_ATTN_N_IMPLS; i++)
        use[i] = use[i] && g_strv_contains ((const char *const *) names, um_attn_impl_name ((UmAttnImpl) i));
    }
  printf ("cpu level %s, OpenBLAS %s, %d threads, %d heads of %d\n", um_cpu_isa_name (um_cpu_isa ()),
          openblas_get_corename (), um_cpu_get_threads (), heads, hd);
  printf ("%6s %-9s %18s %7s %7s %14s %18s %12s\n", "L", "kernels", "products GFLOP/s", "q·kᵀ", "·v", "softmax µs",
          "attention GFLOP/s", "vs blas");
  for (guint li = 0; li < L->len; li++)
    {
      const int n = g_array_index (L, int, li), nb = MIN (64, n);
      const size_t qn = (size_t) n * heads * hd;
      g_autofree float *q = g_new (float, qn), *k = g_new (float, qn), *v = g_new (float, qn);
      g_autofree float *out = g_new (float, qn), *s = g_new (float, (size_t) um_attn_ld (nb) * n);
      g_autofree float *pack_mem = g_new (float, um_attn_pack_floats (nb, n, hd) + 16);
      float *pack = (float *) (((uintptr_t) pack_mem + 63) & ~(uintptr_t) 63);
      g_autofree int32_t *kv = g_new (int32_t, nb);
      g_autofree gint32 *seq = g_new0 (gint32, n);

      for (int r = 0; r < nb; r++)
        kv[r] = n;
      fill (q, qn, 1);
      fill (k, qn, 2);
      fill (v, qn, 3);
      /* About 5 GFLOP (50 ms at 100 GFLOP/s) per measurement of the
       * products, 10 of the whole op; the kernels take turns within each
       * repetition, so a change of clock speed or load hits them alike. */
      const int inner = MAX (1, (int) (5e9 / (4.0 * nb * n * hd)));
      const int inner_a = MAX (1, (int) (1e10 / (4.0 * n * n * (double) hd * heads)));
      double best_p[UM_ATTN_N_IMPLS], best_s[UM_ATTN_N_IMPLS], best_a[UM_ATTN_N_IMPLS];
      double best_qk[UM_ATTN_N_IMPLS], best_pv[UM_ATTN_N_IMPLS];

      for (int impl = 0; impl < UM_ATTN_N_IMPLS; impl++)
        best_p[impl] = best_s[impl] = best_a[impl] = best_qk[impl] = best_pv[impl] = G_MAXDOUBLE;
      /* Warm-up: the pool's threads, OpenBLAS's buffers, the pages. */
      for (int impl = UM_ATTN_BLAS; impl < UM_ATTN_N_IMPLS; impl++)
        if (use[impl])
          {
            um_attn_set_impl ((UmAttnImpl) impl);
            um_cpu_attention (q, n, seq, NULL, k, v, n, heads, heads, hd, out);
          }
      for (int r = 0; r < reps; r++)
        for (int impl = UM_ATTN_BLAS; impl < UM_ATTN_N_IMPLS; impl++)
          {
            gint64 t0, t1;

            if (!use[impl])
              continue;
            um_attn_set_impl ((UmAttnImpl) impl);
            t0 = g_get_monotonic_time ();
            for (int i = 0; i < inner; i++)
              um_attn_scores ((UmAttnImpl) impl, q, (int64_t) heads * hd, k, (int64_t) heads * hd, nb, n, hd,
                              1.0f / sqrtf ((float) hd), s, um_attn_ld (nb), pack);
            t1 = g_get_monotonic_time ();
            for (int i = 0; i < inner; i++)
              um_attn_values ((UmAttnImpl) impl, s, um_attn_ld (nb), nb, n, v, (int64_t) heads * hd, hd, out,
                              (int64_t) heads * hd, pack);
            best_qk[impl] = MIN (best_qk[impl], (t1 - t0) / 1e6 / inner);
            best_pv[impl] = MIN (best_pv[impl], (g_get_monotonic_time () - t1) / 1e6 / inner);
            best_p[impl] = MIN (best_p[impl], (g_get_monotonic_time () - t0) / 1e6 / inner);
            t0 = g_get_monotonic_time ();
            for (int i = 0; i < inner; i++)
              um_attn_softmax (s, um_attn_ld (nb), nb, n, kv);
            best_s[impl] = MIN (best_s[impl], (g_get_monotonic_time () - t0) / 1e6 / inner);
            t0 = g_get_monotonic_time ();
            for (int i = 0; i < inner_a; i++)
              um_cpu_attention (q, n, seq, NULL, k, v, n, heads, heads, hd, out);
            best_a[impl] = MIN (best_a[impl], (g_get_monotonic_time () - t0) / 1e6 / inner_a);
          }
      for (int impl = UM_ATTN_BLAS; impl < UM_ATTN_N_IMPLS; impl++)
        if (use[impl])
          printf ("%6d %-9s %18.1f %7.1f %7.1f %14.2f %18.1f %12.2f\n", n, um_attn_impl_name ((UmAttnImpl) impl),
                  4.0 * nb * n * hd / best_p[impl] / 1e9, 2.0 * nb * n * hd / best_qk[impl] / 1e9,
                  2.0 * nb * n * hd / best_pv[impl] / 1e9, best_s[impl] * 1e6,
                  4.0 * n * n * (double) hd * heads / best_a[impl] / 1e9, use[UM_ATTN_BLAS] ? best_a[UM_ATTN_BLAS] / best_a[impl] : 0);
      um_attn_set_impl (UM_ATTN_AUTO);
    }
  return 0;
}

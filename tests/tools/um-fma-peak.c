/* um-fma-peak — the machine's peak rate for the instructions the weight
 * products are made of, measured with register-only micro-kernels: 12
 * independent accumulator chains for the FMAs (enough to cover the latency
 * of two pipelined units, 4-5 cycles each), 6 for the integer pairs, no
 * loads, so nothing but the execution units limits them.
 *
 *   um-fma-peak [--threads N] [--seconds S]
 *
 * prints, for 1 thread and for N (default: um_cpu_get_threads ()):
 *  - avx2-fma:   vfmadd ymm, GFLOP/s (16 per instruction);
 *  - avx512-fma: vfmadd zmm (32), where the CPU has AVX-512;
 *  - avx2-int8:  vpmaddubsw + vpaddw, the int16 accumulation of
 *    um-qgemm-avx2.c, in G-op/s (64 per vpmaddubsw: 32 multiplies and 32
 *    adds); the vpmaddwd that widens every few steps is left out;
 *  - avx2-int16: vpmaddwd + vpaddd (32 per vpmaddwd), Q8_0's product
 *    without AVX-VNNI;
 *  - avx-vnni:   vpdpbusd ymm (64 per instruction), where the CPU has it.
 * Compare a kernel's rate with its own peak, at the same thread count:
 * `test-gemm --bench` and `unmask-cli bench` print the products' rates.
 * UM_CPU_ISA caps the levels measured, like everywhere else. */
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "um-cpu-isa.h"
#include "um-cpu-kernels.h"

#if UM_HAVE_X86_SIMD
#include <immintrin.h>

#define CHAINS 12
#define ITERS 4096   /* per call: ~50k instructions, far above the timer's cost */

/* Operands the compiler cannot know, so it cannot fold the chains. */
static volatile float op_a = 0.999999f, op_b = 1e-7f;
static volatile int op_i = 3, op_j = -2;

/* Each returns a value of every chain, so the compiler keeps them all (in
 * registers: nothing else is live in the loop). */
UM_TARGET_AVX2 static float
run_avx2_fma (int64_t calls)
{
  __m256 c[CHAINS];
  const __m256 a = _mm256_set1_ps (op_a), b = _mm256_set1_ps (op_b);
  for (int i = 0; i < CHAINS; i++)
    c[i] = _mm256_set1_ps ((float) i);
  for (int64_t r = 0; r < calls; r++)
    for (int it = 0; it < ITERS; it++)
      {
#pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++)
          c[i] = _mm256_fmadd_ps (c[i], a, b);
      }
  for (int i = 1; i < CHAINS; i++)
    c[0] = _mm256_add_ps (c[0], c[i]);
  return _mm256_cvtss_f32 (c[0]);
}

UM_TARGET_AVX512 static float
run_avx512_fma (int64_t calls)
{
  __m512 c[CHAINS];
  const __m512 a = _mm512_set1_ps (op_a), b = _mm512_set1_ps (op_b);
  for (int i = 0; i < CHAINS; i++)
    c[i] = _mm512_set1_ps ((float) i);
  for (int64_t r = 0; r < calls; r++)
    for (int it = 0; it < ITERS; it++)
      {
#pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++)
          c[i] = _mm512_fmadd_ps (c[i], a, b);
      }
  for (int i = 1; i < CHAINS; i++)
    c[0] = _mm512_add_ps (c[0], c[i]);
  return _mm512_reduce_add_ps (c[0]);
}

/* The integer products' pairs, vpmaddubsw + vpaddw (4-bit codes) and
 * vpmaddwd + vpaddd (Q8_0 without AVX-VNNI): 6 sums, each adding the
 * product of its own pair of 3 + 2 operands.  The operands pass through an
 * empty asm every iteration, so the products cannot be hoisted out of the
 * loop, and no product waits on a sum: only the units limit the pairs (an
 * earlier version chained each product on its sum and measured the
 * multiplier's latency, about 0.8 of this).  6 sums, 5 operands and a
 * temporary fit the 16 ymm registers. */
#define INT_CHAINS 6
/* One kernel per pair: operands of `set1`'s width, sums added with `add`
 * (the int16 adds of vpmaddubsw, the int32 ones of vpmaddwd). */
#define INT_PAIR_KERNEL(name, set1, ctype, mul, add, extract)                                        \
  UM_TARGET_AVX2 static float                                                                        \
  name (int64_t calls)                                                                               \
  {                                                                                                  \
    __m256i a0 = set1 ((ctype) op_i), a1 = set1 ((ctype) (op_i + 1)), a2 = set1 ((ctype) (op_i + 2)); \
    __m256i b0 = set1 ((ctype) op_j), b1 = set1 ((ctype) (op_j - 1));                                 \
    __m256i c0 = _mm256_setzero_si256 (), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0;               \
    for (int64_t r = 0; r < calls; r++)                                                              \
      for (int it = 0; it < ITERS; it++)                                                             \
        {                                                                                            \
          __asm__ ("" : "+x" (a0), "+x" (a1), "+x" (a2), "+x" (b0), "+x" (b1));                       \
          c0 = add (c0, mul (a0, b0)); c1 = add (c1, mul (a1, b0)); c2 = add (c2, mul (a2, b0));     \
          c3 = add (c3, mul (a0, b1)); c4 = add (c4, mul (a1, b1)); c5 = add (c5, mul (a2, b1));     \
        }                                                                                            \
    c0 = add (add (add (c0, c1), add (c2, c3)), add (c4, c5));                                       \
    return (float) extract (c0, 0);                                                                  \
  }

INT_PAIR_KERNEL (run_avx2_int8, _mm256_set1_epi8, char, _mm256_maddubs_epi16, _mm256_add_epi16,
                 _mm256_extract_epi16)
INT_PAIR_KERNEL (run_avx2_int16, _mm256_set1_epi16, short, _mm256_madd_epi16, _mm256_add_epi32,
                 _mm256_extract_epi32)

UM_TARGET_AVX2_VNNI static float
run_avx_vnni (int64_t calls)
{
  __m256i c[CHAINS];
  const __m256i a = _mm256_set1_epi8 ((char) op_i), b = _mm256_set1_epi8 ((char) op_j);
  for (int i = 0; i < CHAINS; i++)
    c[i] = _mm256_set1_epi32 (i);
  for (int64_t r = 0; r < calls; r++)
    for (int it = 0; it < ITERS; it++)
      {
#pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++)
          c[i] = _mm256_dpbusd_avx_epi32 (c[i], a, b);
      }
  for (int i = 1; i < CHAINS; i++)
    c[0] = _mm256_add_epi32 (c[0], c[i]);
  return (float) _mm256_extract_epi32 (c[0], 0);
}

typedef struct {
  const char *name;
  UmCpuIsa    isa;          /* needs this level ... */
  gboolean    avx_vnni;     /* ... or AVX-VNNI */
  double      ops_per_call; /* per call of the kernel with calls = 1 */
  float     (*fn) (int64_t calls);
} Kernel;

static const Kernel kernels[] = {
  { "avx2-fma", UM_ISA_AVX2, FALSE, (double) ITERS * CHAINS * 16, run_avx2_fma },
  { "avx512-fma", UM_ISA_AVX512, FALSE, (double) ITERS * CHAINS * 32, run_avx512_fma },
  { "avx2-int8", UM_ISA_AVX2, FALSE, (double) ITERS * INT_CHAINS * 64, run_avx2_int8 },
  { "avx2-int16", UM_ISA_AVX2, FALSE, (double) ITERS * INT_CHAINS * 32, run_avx2_int16 },
  { "avx-vnni", UM_ISA_AVX2_VNNI, TRUE, (double) ITERS * CHAINS * 64, run_avx_vnni },
};

typedef struct {
  const Kernel *k;
  int64_t       calls;
  GMutex        lock;
  GCond         cond;
  gboolean      go;
  double        cpu_best;   /* the fastest thread's ops per CPU second */
  volatile float sink;
} Run;

static double
thread_cpu_seconds (void)
{
  struct timespec ts;
  clock_gettime (CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double) ts.tv_sec + 1e-9 * (double) ts.tv_nsec;
}

static gpointer
worker (gpointer data)
{
  Run *r = data;
  double c0, rate;
  g_mutex_lock (&r->lock);
  while (!r->go)
    g_cond_wait (&r->cond, &r->lock);
  g_mutex_unlock (&r->lock);
  c0 = thread_cpu_seconds ();
  r->sink += r->k->fn (r->calls);
  rate = r->k->ops_per_call * (double) r->calls / (thread_cpu_seconds () - c0);
  g_mutex_lock (&r->lock);
  r->cpu_best = MAX (r->cpu_best, rate);
  g_mutex_unlock (&r->lock);
  return NULL;
}

/* Ops per second of kernel k on `threads` threads started together: the
 * best of three runs of about `seconds` each (a busy machine only ever
 * makes a run slower).  *per_cpu: ops per second of CPU time of one thread,
 * which time slices lost to other processes do not lower. */
static double
measure (const Kernel *k, int threads, double seconds, double *per_cpu)
{
  Run r = { .k = k };
  double best = 0.0;
  gint64 t0;

  /* Calibrate the calls per run on one thread. */
  r.calls = 1;
  for (;;)
    {
      t0 = g_get_monotonic_time ();
      r.sink += k->fn (r.calls);
      if ((double) (g_get_monotonic_time () - t0) * 1e-6 > 0.05)
        break;
      r.calls *= 2;
    }
  r.calls = MAX ((int64_t) 1, (int64_t) ((double) r.calls * seconds / 0.05 / 2));
  g_mutex_init (&r.lock);
  g_cond_init (&r.cond);
  for (int rep = 0; rep < 3; rep++)
    {
      GThread **th = g_new (GThread *, threads);
      r.go = FALSE;
      for (int i = 0; i < threads; i++)
        th[i] = g_thread_new ("fma", worker, &r);
      g_mutex_lock (&r.lock);
      r.go = TRUE;
      t0 = g_get_monotonic_time ();
      g_cond_broadcast (&r.cond);
      g_mutex_unlock (&r.lock);
      for (int i = 0; i < threads; i++)
        g_thread_join (th[i]);
      best = MAX (best, k->ops_per_call * (double) r.calls * threads
                        / ((double) (g_get_monotonic_time () - t0) * 1e-6));
      g_free (th);
    }
  g_mutex_clear (&r.lock);
  g_cond_clear (&r.cond);
  *per_cpu = r.cpu_best;
  return best;
}
#endif

int
main (int argc, char **argv)
{
  int threads = 0;
  double seconds = 0.5;
  GOptionEntry entries[] = {
    { "threads", 0, 0, G_OPTION_ARG_INT, &threads, "Threads (default: the engine's count)", "N" },
    { "seconds", 0, 0, G_OPTION_ARG_DOUBLE, &seconds, "Seconds per run (best of 3)", "S" },
    { NULL },
  };
  g_autoptr(GOptionContext) ctx = g_option_context_new ("- peak rates of the products' instructions");
  g_autoptr(GError) error = NULL;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!g_option_context_parse (ctx, &argc, &argv, &error))
    {
      fprintf (stderr, "%s\n", error->message);
      return 2;
    }
  if (threads <= 0)
    threads = um_cpu_get_threads ();
#if UM_HAVE_X86_SIMD
  printf ("# level %s; G-op/s (an FMA is 2 flops; vpmaddubsw + vpaddw, vpmaddwd + vpaddd and vpdpbusd 2 per multiply-add); "
          "best of 3 runs of %.1f s\n", um_cpu_isa_name (um_cpu_isa ()), seconds);
  printf ("%-11s %10s %10s %10s  (all: %d threads; per CPU s: ops per second of one thread's CPU time)\n",
          "kernel", "1 thread", "all", "per CPU s", threads);
  for (guint i = 0; i < G_N_ELEMENTS (kernels); i++)
    {
      const Kernel *k = &kernels[i];
      if (k->avx_vnni ? !um_cpu_has_avx_vnni () : um_cpu_isa () < k->isa)
        continue;
      double cpu1 = 0.0, cpu2 = 0.0;
      const double one = measure (k, 1, seconds, &cpu1);
      const double all = threads > 1 ? measure (k, threads, seconds, &cpu2) : one;
      printf ("%-11s %10.1f %10.1f %10.1f\n", k->name, one * 1e-9, all * 1e-9, MAX (cpu1, cpu2) * 1e-9);
      fflush (stdout);
    }
  return 0;
#else
  fprintf (stderr, "no x86 SIMD in this build\n");
  return 1;
#endif
}

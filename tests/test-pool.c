/* test-pool.c — um_pool_for: every item exactly once, thread ids in range
 * (below the loop's thread count and its number of chunks), nested and
 * concurrent loops serial, workers that sleep and wake, a worker that is
 * late to wake holds up no loop; the workers' nice value (last: it stays
 * for the process). A watchdog ends any test that runs past a minute (a
 * lost wake-up would otherwise hang until the suite's timeout). */
#include <glib.h>
#include <signal.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "um-cpu-kernels.h"
#include "um-pool.h"

#define N_MAX 5000

typedef struct {
  _Atomic int count[N_MAX];
  _Atomic int max_tid;
  _Atomic int bad_range;
  int threads;
  gboolean nested;
  _Atomic int nested_ok;
} Counts;

static void
count_items (void *ctx, int64_t b, int64_t e, int tid)
{
  Counts *c = ctx;
  int seen = atomic_load (&c->max_tid);

  if (b < 0 || e > N_MAX || b >= e || tid < 0 || tid >= c->threads)
    atomic_fetch_add (&c->bad_range, 1);
  while (tid > seen && !atomic_compare_exchange_weak (&c->max_tid, &seen, tid))
    ;
  for (int64_t i = b; i < e && i < N_MAX; i++)
    atomic_fetch_add (&c->count[i], 1);
  if (c->nested)
    {
      /* A loop inside a loop runs serially on this thread, whole. */
      Counts *inner = g_new0 (Counts, 1);
      inner->threads = 1;
      g_assert_true (um_pool_in_task ());
      g_assert_cmpint (um_pool_max_threads (), ==, 1);
      um_pool_for (100, 3, 4, count_items, inner);
      gboolean ok = atomic_load (&inner->bad_range) == 0;
      for (int i = 0; i < 100; i++)
        ok = ok && atomic_load (&inner->count[i]) == 1;
      if (ok)
        atomic_fetch_add (&c->nested_ok, 1);
      g_free (inner);
    }
}

static void
check_once (int64_t n, int64_t chunk, int threads)
{
  Counts *c = g_new0 (Counts, 1);
  int64_t n_chunks = n > 0 ? (n + MAX (chunk, 1) - 1) / MAX (chunk, 1) : 1;

  c->threads = threads > 0 ? threads : um_cpu_get_threads ();
  um_pool_for (n, chunk, threads, count_items, c);
  g_assert_cmpint (atomic_load (&c->bad_range), ==, 0);
  /* No more threads than chunks take part: per-thread scratch is sized
   * for MIN (threads, chunks) by some callers. */
  g_assert_cmpint (atomic_load (&c->max_tid), <, MIN ((int64_t) c->threads, n_chunks));
  for (int64_t i = 0; i < N_MAX; i++)
    g_assert_cmpint (atomic_load (&c->count[i]), ==, i < n ? 1 : 0);
  g_free (c);
}

static void
test_once (void)
{
  static const int64_t ns[] = { 0, 1, 2, 7, 64, 999, N_MAX };
  static const int64_t chunks[] = { 0, 1, 3, 16, 1000, 100000 };
  static const int threads[] = { 0, 1, 2, 3, 4, 8 };
  int saved = um_cpu_get_threads ();

  um_cpu_set_threads (8);
  for (guint a = 0; a < G_N_ELEMENTS (ns); a++)
    for (guint b = 0; b < G_N_ELEMENTS (chunks); b++)
      for (guint t = 0; t < G_N_ELEMENTS (threads); t++)
        check_once (ns[a], chunks[b], threads[t]);
  um_cpu_set_threads (saved);
}

/* Sleeping and spinning workers both get every loop: thousands of tiny
 * loops with no spin (every hand-out wakes a sleeper), then with a spin,
 * then with pauses that outlast the spin. */
static void
test_sleep_wake (void)
{
  for (int mode = 0; mode < 3; mode++)
    {
      um_pool_set_spin_us (mode == 0 ? 0 : 20);
      for (int i = 0; i < (mode == 2 ? 20 : 2000); i++)
        {
          check_once (64, 1, 3);
          if (mode == 2)
            g_usleep (200);
        }
    }
  um_pool_set_spin_us (-1);
}

static void
test_nested (void)
{
  Counts *c = g_new0 (Counts, 1);

  c->threads = 3;
  c->nested = TRUE;
  um_pool_for (30, 1, 3, count_items, c);
  g_assert_cmpint (atomic_load (&c->nested_ok), ==, 30);
  for (int i = 0; i < 30; i++)
    g_assert_cmpint (atomic_load (&c->count[i]), ==, 1);
  g_assert_false (um_pool_in_task ());
  g_free (c);
}

static gpointer
dispatcher (gpointer data)
{
  for (int i = 0; i < 300; i++)
    check_once (500 + i, 7, 3);
  return NULL;
}

/* Two threads start loops at once: the one that finds the pool busy runs
 * its loop itself; both are right. */
static void
test_concurrent (void)
{
  GThread *a = g_thread_new ("pool-a", dispatcher, NULL);
  GThread *b = g_thread_new ("pool-b", dispatcher, NULL);

  g_thread_join (a);
  g_thread_join (b);
}

/* Feeds the controller passes whose speed depends on the count they ran
 * with, as a machine with `others` busy tasks would; returns the count it
 * settles on and how many passes ran with a count other than `best`. */
static int
settle (int max, const double *rate_by_count, double others, int passes, int best, int *off_best)
{
  int used;

  um_pool_set_adaptive (max);
  used = um_pool_active_threads ();
  *off_best = 0;
  for (int i = 0; i < passes; i++)
    {
      *off_best += used != best;
      used = um_pool_adapt_observe (used, rate_by_count[used], others);
    }
  return used;
}

static void
test_adapt (void)
{
  /* rate_by_count[t]: work per second with t threads. */
  static const double one_busy[] = { 0, 130, 100 };   /* 1 thread wins */
  static const double two_busy[] = { 0, 60, 80 };     /* 2 threads win */
  static const double three[] = { 0, 50, 90, 80 };    /* 2 of 3 wins */
  int off, saved = um_cpu_get_threads ();

  /* Quiet: all threads, never a trial. */
  g_assert_cmpint (settle (2, one_busy, 0, 40, 2, &off), ==, 2);
  g_assert_cmpint (off, ==, 0);
  /* One other busy task, and 1 thread is faster: it wins within the first
   * trials, then only every 4th pass tries 2 again. */
  g_assert_cmpint (settle (2, one_busy, 1, 40, 1, &off), ==, 1);
  g_assert_cmpint (off, <=, 3 + 40 / 4);
  /* Two busy, and 2 threads are faster: 1 is tried every 4th pass only,
   * and 2 is where it settles. */
  g_assert_cmpint (settle (2, two_busy, 2, 40, 2, &off), ==, 2);
  g_assert_cmpint (off, <=, 40 / 4);
  /* Hill climbing from 3 down to 2, staying there. */
  {
    int used;
    um_pool_set_adaptive (3);
    used = um_pool_active_threads ();
    int at_two = 0;
    g_assert_cmpint (used, ==, 3);
    for (int i = 0; i < 60; i++)
      {
        used = um_pool_adapt_observe (used, three[used], 1);
        at_two += used == 2;
      }
    g_assert_cmpint (at_two, >=, 60 * 3 / 4 - 8);
  }
  /* A count the user chose is kept. */
  um_pool_set_adaptive (0);
  g_assert_cmpint (um_pool_adapt_observe (2, 1, 1), ==, um_pool_active_threads ());
  um_cpu_set_threads (saved);
}

static int
thread_nice (void)
{
  return getpriority (PRIO_PROCESS, (id_t) syscall (SYS_gettid));
}

typedef struct {
  GMutex lock;
  GCond  cond;
  int    threads, arrived;
  int    nice[3];
} NiceProbe;

/* One chunk per thread, each waiting until all have arrived: every worker
 * surely runs one (no timing), and records its nice value. */
static void
probe_nice (void *ctx, int64_t b, int64_t e, int tid)
{
  NiceProbe *p = ctx;

  g_mutex_lock (&p->lock);
  p->nice[tid] = thread_nice ();
  if (++p->arrived == p->threads)
    g_cond_broadcast (&p->cond);
  while (p->arrived < p->threads)
    g_cond_wait (&p->cond, &p->lock);
  g_mutex_unlock (&p->lock);
}

/* The nice value of each of the first @threads - 1 workers, into nice[1..]. */
static void
probe_workers (int threads, int nice[3])
{
  NiceProbe p = { .threads = threads };

  g_mutex_init (&p.lock);
  g_cond_init (&p.cond);
  um_pool_for (threads, 1, threads, probe_nice, &p);
  g_assert_cmpint (p.arrived, ==, threads);
  memcpy (nice, p.nice, sizeof p.nice);
  g_mutex_clear (&p.lock);
  g_cond_clear (&p.cond);
}

static gpointer
nice_self (gpointer data)
{
  um_pool_nice_thread ();
  return GINT_TO_POINTER (thread_nice ());
}

/* Workers that already run and workers started later take the nice value;
 * the thread that dispatches keeps its own unless it asks. */
static void
test_nice (void)
{
  int base = thread_nice (), want = MIN (base + 3, 19), nice[3];

  if (base >= 19)
    {
      g_test_skip ("already at nice 19");
      return;
    }
  g_assert_cmpint (um_pool_get_nice (), ==, 0);
  /* Earlier tests may have started more workers: this one runs. */
  probe_workers (2, nice);
  g_assert_cmpint (nice[0], ==, base);
  g_assert_cmpint (nice[1], ==, base);
  um_pool_set_nice (want);
  g_assert_cmpint (um_pool_get_nice (), ==, want);
  /* Worker 1 was niced where it ran; worker 2 (started now, unless an
   * earlier test did) nices itself. */
  probe_workers (3, nice);
  g_assert_cmpint (nice[0], ==, base);
  g_assert_cmpint (nice[1], ==, want);
  g_assert_cmpint (nice[2], ==, want);
  g_assert_cmpint (GPOINTER_TO_INT (g_thread_join (g_thread_new ("nice", nice_self, NULL))), ==, want);
  g_assert_cmpint (thread_nice (), ==, base);
}

/* ---- a worker late to wake ---- */

static volatile sig_atomic_t hold_workers;
static _Atomic int held;

/* Keeps the worker it interrupts here (as a descheduled one would be)
 * until released. */
static void
on_hold (int sig)
{
  atomic_fetch_add (&held, 1);
  while (hold_workers)
    {
      struct timespec ts = { 0, 1000000 };
      nanosleep (&ts, NULL);
    }
  atomic_fetch_sub (&held, 1);
}

static gpointer
release_later (gpointer data)
{
  g_usleep (GPOINTER_TO_UINT (data));
  hold_workers = 0;
  return NULL;
}

/* The pool's workers (named "um-pool"), by kernel thread id. */
static GArray *
pool_workers (void)
{
  GArray *tids = g_array_new (FALSE, FALSE, sizeof (int));
  g_autoptr(GDir) d = g_dir_open ("/proc/self/task", 0, NULL);
  const char *name;

  g_assert_nonnull (d);
  while ((name = g_dir_read_name (d)) != NULL)
    {
      g_autofree char *path = g_strdup_printf ("/proc/self/task/%s/comm", name);
      g_autofree char *comm = NULL;
      int tid = atoi (name);

      if (g_file_get_contents (path, &comm, NULL, NULL) && g_str_has_prefix (comm, "um-pool"))
        g_array_append_val (tids, tid);
    }
  return tids;
}

/* Every worker is held (in a signal handler) while a loop of two chunks
 * runs: the caller takes both, and must return without waiting for the
 * worker it woke, which took none. */
static void
test_late_worker (void)
{
  struct sigaction sa = { 0 }, old;
  g_autoptr(GArray) tids = NULL;
  GThread *releaser;
  gint64 t0, took;
  const guint release_us = 3 * G_USEC_PER_SEC;

  um_cpu_set_threads (2);
  check_once (64, 1, 2);   /* the worker exists */
  tids = pool_workers ();
  g_assert_cmpuint (tids->len, >=, 1);
  sa.sa_handler = on_hold;
  sa.sa_flags = SA_RESTART;
  sigemptyset (&sa.sa_mask);
  g_assert_cmpint (sigaction (SIGUSR1, &sa, &old), ==, 0);
  hold_workers = 1;
  for (guint i = 0; i < tids->len; i++)
    g_assert_cmpint (syscall (SYS_tgkill, getpid (), g_array_index (tids, int, i), SIGUSR1), ==, 0);
  while (atomic_load (&held) < (int) tids->len)
    g_usleep (1000);
  releaser = g_thread_new ("release", release_later, GUINT_TO_POINTER (release_us));
  t0 = g_get_monotonic_time ();
  check_once (2, 1, 2);
  took = g_get_monotonic_time () - t0;
  g_thread_join (releaser);
  while (atomic_load (&held) > 0)
    g_usleep (1000);
  sigaction (SIGUSR1, &old, NULL);
  g_test_message ("a loop with its worker held for %u s returned after %.3f s", release_us / G_USEC_PER_SEC,
                  took / 1e6);
  /* Not the release's 3 s: the loop's own microseconds, with room for a
   * loaded machine. */
  g_assert_cmpint (took, <, G_USEC_PER_SEC);
  /* And the worker takes part again. */
  for (int i = 0; i < 100; i++)
    check_once (64, 1, 2);
}

/* ---- the watchdog ---- */

#define WATCHDOG_S 60

static void
on_watchdog (int sig)
{
  static const char msg[] = "test-pool: a test ran past " G_STRINGIFY (WATCHDOG_S)
                             " s: a loop that never ends (a lost wake-up?)\n";
  ssize_t r = write (2, msg, sizeof msg - 1);
  (void) r;
  abort ();
}

static void
watchdog_arm (gconstpointer data)
{
  alarm (WATCHDOG_S);
  ((GTestFunc) data) ();
  alarm (0);
}

static void
add_watched (const char *path, GTestFunc fn)
{
  g_test_add_data_func (path, (gconstpointer) fn, watchdog_arm);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  signal (SIGALRM, on_watchdog);
  add_watched ("/pool/once", test_once);
  add_watched ("/pool/sleep-wake", test_sleep_wake);
  add_watched ("/pool/nested", test_nested);
  add_watched ("/pool/concurrent", test_concurrent);
  add_watched ("/pool/late-worker", test_late_worker);
  add_watched ("/pool/adapt", test_adapt);
  add_watched ("/pool/nice", test_nice);
  return g_test_run ();
}

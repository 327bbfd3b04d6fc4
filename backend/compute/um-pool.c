#include "um-pool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "um-cpu-threads.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause ()
#else
#define cpu_relax() ((void) 0)
#endif

/* Long enough to bridge the serial gaps between a forward's loops on a quiet
 * machine (a futex wake costs ~5-20 us, a forward has hundreds of loops),
 * short against a loaded machine's scheduling slices (milliseconds).  The
 * measurements behind it are in docs/performance.md, "Threads on a busy machine". */
#define DEFAULT_SPIN_US 50

#define MAX_WORKERS 255

/* A cache line of its own for each worker's words: the dispatcher writes
 * them while the others spin on theirs. */
typedef struct {
  _Atomic uint32_t go;        /* bumped by the dispatcher: a new loop for this worker */
  _Atomic uint64_t loop;      /* the loop it was woken for (written before go) */
  _Atomic int      sleeping;  /* the worker is (about to be) in futex_wait on go */
  _Atomic int      kernel_tid; /* for setpriority; 0 until the worker runs */
  int              tid;
  pthread_t        thread;
} __attribute__ ((aligned (64))) Worker;

typedef struct {
  /* The loop being run; written only while no worker reads it. */
  UmPoolFn         fn;
  void            *ctx;
  int64_t          n, chunk;
  _Atomic int64_t  next __attribute__ ((aligned (64)));  /* next unclaimed item */
  /* Workers inside the loop now. A worker joins (counts itself in, then
   * finds its loop still open) or leaves at once; the dispatcher closes
   * the loop once every chunk is claimed and waits only for those inside:
   * a worker that was slow to wake and took no chunk holds up no one. */
  _Atomic uint32_t inside __attribute__ ((aligned (64)));
  _Atomic uint64_t open_loop;   /* the loop workers may join, 0: none */
  uint64_t         loop_seq;
  _Atomic int      caller_sleeping;
  pthread_mutex_t  lock;      /* one dispatcher at a time */
  pthread_mutex_t  grow_lock;
  Worker          *workers;
  _Atomic int      n_workers;
} Pool;

/* The thread count for loops that ask for the default, adapted to the CPU
 * this process actually gets (see um_pool_epoch_end). */
typedef struct {
  pthread_mutex_t lock;
  _Atomic int     active;      /* threads a default loop uses now; 0: not adaptive */
  int             max;
  int             best;        /* the count the estimates favour */
  int             trial;       /* a count being tried this epoch, else 0 */
  int             next_trial_dir;
  int64_t         epoch;
  double          others;      /* EWMA of other runnable tasks */
  double          rate[MAX_WORKERS + 2];   /* EWMA of work per second, per count */
  int64_t         rated_at[MAX_WORKERS + 2];
} Adapt;

static Adapt adapt = { .lock = PTHREAD_MUTEX_INITIALIZER };

static Pool pool = {
  .lock = PTHREAD_MUTEX_INITIALIZER,
  .grow_lock = PTHREAD_MUTEX_INITIALIZER,
};
static _Thread_local gboolean in_task;
static _Atomic int spin_us = -1;       /* a fixed spin (UM_POOL_SPIN_US, tests), or -1 */
static _Atomic int contended;          /* other tasks compete for the CPU (um_pool_epoch_end) */
static _Atomic int pool_nice = 0;

static void
futex_wait (_Atomic uint32_t *addr, uint32_t expected)
{
  syscall (SYS_futex, (uint32_t *) addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void
futex_wake (_Atomic uint32_t *addr, int n)
{
  syscall (SYS_futex, (uint32_t *) addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

static inline int64_t
now_ns (void)
{
  struct timespec ts;
  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static gsize spin_env_read;

int
um_pool_get_spin_us (void)
{
  int us;

  if (g_once_init_enter (&spin_env_read))
    {
      const char *env = g_getenv ("UM_POOL_SPIN_US");
      if (env != NULL)
        atomic_store (&spin_us, (int) CLAMP (g_ascii_strtoll (env, NULL, 10), 0, 1000000));
      g_once_init_leave (&spin_env_read, 1);
    }
  us = atomic_load_explicit (&spin_us, memory_order_relaxed);
  if (us >= 0)
    return us;
  /* Spinning bridges the gaps between loops on a quiet machine (20 % faster
   * there); with other work runnable, a spinning thread only burns the
   * share a descheduled one of ours needs (up to 1.5x slower): sleep at once. */
  return atomic_load_explicit (&contended, memory_order_relaxed) ? 0 : DEFAULT_SPIN_US;
}

void
um_pool_set_spin_us (int us)
{
  (void) um_pool_get_spin_us ();
  atomic_store (&spin_us, us < 0 ? -1 : us);
}

/* Spins until *word != seen or the spin time is up; TRUE if it changed. */
static gboolean
spin_until_changed (_Atomic uint32_t *word, uint32_t seen)
{
  int64_t limit = (int64_t) um_pool_get_spin_us () * 1000, t0 = 0;

  for (int i = 0;; i++)
    {
      if (atomic_load_explicit (word, memory_order_acquire) != seen)
        return TRUE;
      if ((i & 63) == 0)
        {
          int64_t t = now_ns ();
          if (i == 0)
            t0 = t;
          else if (t - t0 >= limit)
            return FALSE;
        }
      cpu_relax ();
    }
}

static void
run_chunks (int tid)
{
  const int64_t n = pool.n, chunk = pool.chunk;

  for (;;)
    {
      int64_t b = atomic_fetch_add_explicit (&pool.next, chunk, memory_order_relaxed);
      if (b >= n)
        break;
      pool.fn (pool.ctx, b, MIN (b + chunk, n), tid);
    }
}

void
um_pool_nice_thread (void)
{
  int nice = atomic_load (&pool_nice);

  /* PRIO_PROCESS with a thread id sets that thread only (Linux).  Failing
   * leaves the thread as it was: at worst less polite, never wrong. */
  if (nice > 0)
    (void) setpriority (PRIO_PROCESS, (id_t) syscall (SYS_gettid), nice);
}

int
um_pool_get_nice (void)
{
  return atomic_load (&pool_nice);
}

void
um_pool_set_nice (int nice)
{
  int n;

  atomic_store (&pool_nice, CLAMP (nice, 0, 19));
  /* Workers that start from now on nice themselves; these already run.
   * A worker between the two reads both ways: setting it twice is harmless. */
  pthread_mutex_lock (&pool.grow_lock);
  n = atomic_load (&pool.n_workers);
  for (int i = 0; i < n && nice > 0; i++)
    {
      int tid = atomic_load (&pool.workers[i].kernel_tid);
      if (tid > 0)
        (void) setpriority (PRIO_PROCESS, (id_t) tid, CLAMP (nice, 0, 19));
    }
  pthread_mutex_unlock (&pool.grow_lock);
}

static void *
worker_main (void *data)
{
  Worker *w = data;
  uint32_t seen = 0;

  atomic_store (&w->kernel_tid, (int) syscall (SYS_gettid));
  /* Named, for top -H, perf and the tests. */
  pthread_setname_np (pthread_self (), "um-pool");
  um_pool_nice_thread ();
  in_task = TRUE;
  for (;;)
    {
      if (!spin_until_changed (&w->go, seen))
        {
          /* Dekker with the dispatcher: it stores go then reads sleeping;
           * we store sleeping then read go (futex_wait re-checks it). */
          atomic_store (&w->sleeping, 1);
          while (atomic_load (&w->go) == seen)
            futex_wait (&w->go, seen);
          atomic_store (&w->sleeping, 0);
        }
      seen = atomic_load_explicit (&w->go, memory_order_acquire);
      /* Dekker with the dispatcher's close: we count ourselves in, then
       * look whether our loop is still open; it closes, then counts who is
       * in. Either it waits for us, or we see it closed. */
      atomic_fetch_add (&pool.inside, 1);
      if (atomic_load (&pool.open_loop) == atomic_load (&w->loop))
        run_chunks (w->tid);
      /* Nothing of the loop may be touched after this: the dispatcher
       * returns, and may start the next loop, once inside is 0. */
      if (atomic_fetch_sub (&pool.inside, 1) == 1 && atomic_load (&pool.caller_sleeping))
        futex_wake (&pool.inside, 1);
    }
  return NULL;
}

/* Makes sure `want` workers exist; returns how many do (fewer if the
 * system refuses threads: the loops then simply use fewer). */
static int
ensure_workers (int want)
{
  int have = atomic_load (&pool.n_workers);

  if (have >= want)
    return want;
  pthread_mutex_lock (&pool.grow_lock);
  have = atomic_load (&pool.n_workers);
  /* Workers never move (each reads its own Worker), so the array is
   * allocated once, for more threads than any machine here has. */
  if (pool.workers == NULL)
    pool.workers = aligned_alloc (64, sizeof (Worker) * MAX_WORKERS);
  want = MIN (want, pool.workers != NULL ? MAX_WORKERS : 0);
  while (have < want)
    {
      Worker *w = &pool.workers[have];
      atomic_init (&w->go, 0);
      atomic_init (&w->loop, 0);
      atomic_init (&w->sleeping, 0);
      atomic_init (&w->kernel_tid, 0);
      w->tid = have + 1;
      if (pthread_create (&w->thread, NULL, worker_main, w) != 0)
        break;
      pthread_detach (w->thread);
      have++;
      atomic_store (&pool.n_workers, have);
    }
  pthread_mutex_unlock (&pool.grow_lock);
  return MIN (have, want);
}

/* ---- The thread count that adapts to the CPU obtained ---------------- */

/* With other work on the CPU, more threads are not always faster: on 2
 * cores with one other busy process, 2 threads may lose to 1 (each waits
 * for the other at every loop's end while it is descheduled).  So the
 * default count is measured, not assumed: each pass (an "epoch") reports
 * its work; while other tasks compete for the CPU, every 4th pass tries a
 * neighbouring count, and the count with the most work per second wins.
 * On a quiet machine no count is tried: all threads, nothing lost. */
#define TRIAL_PERIOD 4
#define QUIET_OTHERS 0.3   /* below this many other runnable tasks: quiet */
#define WIN_MARGIN 1.03    /* a trial must beat the current count by 3 % */
#define STALE_EPOCHS 32

static _Thread_local int64_t epoch_t0;
static _Thread_local int epoch_used;

static int
workers_awake (void)
{
  int n = atomic_load (&pool.n_workers), awake = 0;
  for (int i = 0; i < n; i++)
    awake += !atomic_load (&pool.workers[i].sleeping);
  return awake;
}

/* Runnable tasks on the system now (/proc/loadavg's "R/T"), or -1. */
static int
runnable_tasks (void)
{
  char buf[128];
  int fd = open ("/proc/loadavg", O_RDONLY | O_CLOEXEC), r = -1;
  ssize_t got;

  if (fd < 0)
    return -1;
  got = read (fd, buf, sizeof buf - 1);
  close (fd);
  if (got > 0)
    {
      double l1, l5, l15;
      buf[got] = 0;
      if (sscanf (buf, "%lf %lf %lf %d/", &l1, &l5, &l15, &r) != 4)
        r = -1;
    }
  return r;
}

void
um_pool_set_adaptive (int max_threads)
{
  pthread_mutex_lock (&adapt.lock);
  adapt.max = MIN (max_threads, MAX_WORKERS + 1);
  adapt.best = adapt.max;
  adapt.trial = 0;
  adapt.next_trial_dir = -1;
  memset (adapt.rated_at, 0, sizeof adapt.rated_at);
  atomic_store (&adapt.active, adapt.max > 1 ? adapt.max : 0);
  pthread_mutex_unlock (&adapt.lock);
}

int
um_pool_active_threads (void)
{
  int a = atomic_load (&adapt.active);
  return a > 0 ? a : um_cpu_get_threads ();
}

void
um_pool_epoch_begin (void)
{
  epoch_t0 = now_ns ();
  epoch_used = atomic_load (&adapt.active);
}

void
um_pool_epoch_end (double work)
{
  int64_t dt = now_ns () - epoch_t0;
  int used = epoch_used, others;

  if (dt <= 0 || !(work > 0) || in_task)
    return;
  others = runnable_tasks ();
  if (others >= 0)
    others = MAX (others - 1 - workers_awake (), 0);
  um_pool_adapt_observe (used, work / (double) dt, others);
}

int
um_pool_adapt_observe (int used, double r, double others)
{
  int next;

  pthread_mutex_lock (&adapt.lock);
  if (others >= 0)
    adapt.others = 0.7 * adapt.others + 0.3 * others;
  atomic_store (&contended, adapt.others >= QUIET_OTHERS);
  if (adapt.max > 1 && used >= 1 && used <= adapt.max)
    {
      int was_trial = adapt.trial;

      adapt.epoch++;
      if (adapt.rated_at[used] > 0 && adapt.epoch - adapt.rated_at[used] < STALE_EPOCHS)
        adapt.rate[used] = 0.5 * adapt.rate[used] + 0.5 * r;
      else
        adapt.rate[used] = r;
      adapt.rated_at[used] = adapt.epoch;
      adapt.trial = 0;
      if (adapt.others < QUIET_OTHERS)
        adapt.best = adapt.max;
      else
        {
          if (was_trial > 0 && was_trial == used && adapt.rate[was_trial] > WIN_MARGIN * adapt.rate[adapt.best])
            adapt.best = was_trial;
          if (adapt.epoch % TRIAL_PERIOD == TRIAL_PERIOD - 1)
            {
              int d = adapt.next_trial_dir, cand = adapt.best + d;
              if (cand < 1 || cand > adapt.max)
                cand = adapt.best - d;
              adapt.next_trial_dir = -d;
              if (cand >= 1 && cand <= adapt.max && cand != adapt.best)
                adapt.trial = cand;
            }
        }
      atomic_store (&adapt.active, adapt.trial > 0 ? adapt.trial : adapt.best);
    }
  next = atomic_load (&adapt.active);
  pthread_mutex_unlock (&adapt.lock);
  return next > 0 ? next : um_cpu_get_threads ();
}

int64_t
um_pool_adapt_epochs (void)
{
  int64_t e;

  pthread_mutex_lock (&adapt.lock);
  e = adapt.epoch;
  pthread_mutex_unlock (&adapt.lock);
  return e;
}

gboolean
um_pool_in_task (void)
{
  return in_task;
}

int
um_pool_max_threads (void)
{
  return in_task ? 1 : MAX (1, um_cpu_get_threads ());
}

void
um_pool_for (int64_t n, int64_t chunk, int threads, UmPoolFn fn, void *ctx)
{
  int64_t n_chunks;
  uint64_t seq;
  int n_workers;

  if (n <= 0)
    return;
  chunk = MAX (chunk, 1);
  n_chunks = (n + chunk - 1) / chunk;
  {
    /* The adapted count caps every loop, also those sized for the most. */
    int active = atomic_load (&adapt.active);
    if (threads <= 0)
      threads = active > 0 ? active : um_cpu_get_threads ();
    else if (active > 0)
      threads = MIN (threads, active);
  }
  threads = (int) MIN ((int64_t) threads, n_chunks);
  if (in_task || threads <= 1 || pthread_mutex_trylock (&pool.lock) != 0)
    {
      fn (ctx, 0, n, 0);
      return;
    }
  n_workers = ensure_workers (threads - 1);

  pool.fn = fn;
  pool.ctx = ctx;
  pool.n = n;
  pool.chunk = chunk;
  atomic_store_explicit (&pool.next, 0, memory_order_relaxed);
  atomic_store (&pool.caller_sleeping, 0);
  seq = ++pool.loop_seq;
  atomic_store (&pool.open_loop, seq);
  for (int i = 0; i < n_workers; i++)
    {
      Worker *w = &pool.workers[i];
      atomic_store (&w->loop, seq);
      atomic_fetch_add (&w->go, 1);
      if (atomic_load (&w->sleeping))
        futex_wake (&w->go, 1);
    }

  in_task = TRUE;
  run_chunks (0);
  in_task = FALSE;

  /* Every chunk is claimed: no one joins from here on. Then wait for the
   * workers inside (in a chunk, or about to find none): briefly spinning,
   * then asleep, so that a descheduled worker gets this core back at once. */
  atomic_store (&pool.open_loop, 0);
  for (uint32_t p; (p = atomic_load (&pool.inside)) != 0;)
    if (!spin_until_changed (&pool.inside, p))
      {
        atomic_store (&pool.caller_sleeping, 1);
        while ((p = atomic_load (&pool.inside)) != 0)
          futex_wait (&pool.inside, p);
      }
  pthread_mutex_unlock (&pool.lock);
}

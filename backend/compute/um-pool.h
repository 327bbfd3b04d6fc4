/* um-pool.h — the CPU kernels' parallel loops, on a pool that yields the CPU.
 *
 * A desktop is rarely quiet: a thread of ours that the kernel has
 * descheduled must not hold up the others, and a thread that waits must
 * not burn the core the late one needs.  So work is handed out in chunks
 * from a shared counter (whoever is running takes the next chunk, a late
 * thread's share is taken by the others), and a thread with nothing to do
 * spins only briefly before sleeping on a futex.
 *
 * The calling thread takes part as tid 0; workers are created on first
 * use, up to um_cpu_get_threads () - 1 of them, and live for the process.
 * A loop started from inside a loop's body, or while another thread is
 * using the pool, runs serially on its caller: that is always correct,
 * since every body must accept any split of its range. */
#pragma once

#include <glib.h>
#include <stdint.h>

G_BEGIN_DECLS

/* One chunk of a loop: items [begin, end), run by thread tid, which is
 * below the loop's thread count (at most um_pool_max_threads ()). */
typedef void (*UmPoolFn) (void *ctx, int64_t begin, int64_t end, int tid);

/* Runs fn over [0, n) in chunks of `chunk` items (at least 1), on up to
 * `threads` threads (0: um_cpu_get_threads ()), and returns when all are
 * done.  Serial when n fits one chunk, when nested, or when threads is 1. */
void um_pool_for (int64_t n, int64_t chunk, int threads, UmPoolFn fn, void *ctx);

/* The number of threads a loop started here could use: 1 inside a loop's
 * body (nested loops are serial), else um_cpu_get_threads ().  Size
 * per-thread scratch with it. */
int  um_pool_max_threads (void);

/* The thread count adapts to the CPU obtained (default threads: between 1
 * and max_threads); 0 or 1 turns that off (a count the user chose is kept).
 * um_cpu_set_threads () calls it. */
void um_pool_set_adaptive (int max_threads);
/* The threads a loop with the default count uses now. */
int  um_pool_active_threads (void);
/* One unit of repeated work (a forward pass), of `work` (its flops): the
 * measurements behind the adapted count. */
void um_pool_epoch_begin (void);
void um_pool_epoch_end (double work);
/* What um_pool_epoch_end () does with its measurement: a pass run with
 * `used` threads did `rate` work per second while `others` other tasks
 * were runnable (negative: unknown).  Returns the count the next pass
 * uses.  Public for tests, which feed it chosen figures. */
int  um_pool_adapt_observe (int used, double rate, double others);
/* Passes the adaptive count has measured so far (0 while it is off): for
 * tests, which check that adaptation runs. */
int64_t um_pool_adapt_epochs (void);

/* TRUE inside a loop's body. */
gboolean um_pool_in_task (void);

/* How long (microseconds) an idle thread spins before it sleeps: by
 * default 50 on a quiet machine (bridging the gaps between a forward's
 * loops) and 0 while other tasks compete for the CPU.  UM_POOL_SPIN_US or
 * a set value (>= 0) fixes it, -1 restores the default (for measurements
 * and tests). */
void um_pool_set_spin_us (int us);
int  um_pool_get_spin_us (void);

/* The nice value (Linux: per thread) of the pool's workers, so that a
 * window drawing on the same cores stays responsive while the engine works
 * (the app sets it; unmask-cli leaves 0, the default: as created).  It only
 * ever goes up: an unprivileged process cannot lower a thread's nice value
 * again, so workers already niced keep theirs, and the app sets it once, at
 * start.  um_pool_nice_thread () gives it to the calling thread, for the
 * thread that dispatches the loops (tid 0); that thread must be one of the
 * engine's own, never one that goes back to other work. */
void um_pool_set_nice (int nice);
int  um_pool_get_nice (void);
void um_pool_nice_thread (void);

G_END_DECLS

#include "um-cpu-threads.h"

#include <omp.h>

static int cpu_threads = 0;

void
um_cpu_threads_store (int n_threads)
{
  cpu_threads = n_threads;
}

/* OMP_NUM_THREADS if set (as before the pool, and as users of OpenMP
 * programs expect), else the CPUs this process may run on: the most the
 * default count uses, which adapts below it. */
int
um_cpu_threads_default (void)
{
  const char *env = g_getenv ("OMP_NUM_THREADS");
  gint64 n = env != NULL ? g_ascii_strtoll (env, NULL, 10) : 0;
  return n > 0 && n <= 1024 ? (int) n : (int) g_get_num_processors ();
}

int
um_cpu_get_threads (void)
{
  return cpu_threads > 0 ? cpu_threads : um_cpu_threads_default ();
}

int
um_cpu_blas_serial_begin (void)
{
  int saved = omp_get_max_threads ();
  if (saved != 1)
    omp_set_num_threads (1);
  return saved;
}

void
um_cpu_blas_serial_end (int saved)
{
  if (saved != 1)
    omp_set_num_threads (saved);
}

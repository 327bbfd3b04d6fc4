/* um-cpu-threads.h — how many CPU threads the process computes with, and
 * OpenBLAS kept to one thread inside our loops. Below the pool and the
 * kernels, which both read the count. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* The count um_cpu_set_threads () chose (0: none chosen yet). */
void um_cpu_threads_store (int n_threads);
/* OMP_NUM_THREADS if set, else the CPUs this process may run on. */
int  um_cpu_threads_default (void);
int  um_cpu_get_threads (void);

/* Around OpenBLAS calls in a loop's body: OpenBLAS's OpenMP build sizes its
 * team by the calling thread's omp_get_max_threads (), not by
 * openblas_set_num_threads (), and a thread that never set it (um-pool's
 * workers, GLib's pool threads that run the app's generations) would start
 * a team of all the cores inside every call.  Begin makes it 1 for the
 * calling thread; end gives the thread its own value back (for the OpenMP
 * work that thread may do later). */
int  um_cpu_blas_serial_begin (void);
void um_cpu_blas_serial_end (int saved);

G_END_DECLS

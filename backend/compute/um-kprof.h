/* um-kprof.h — where a forward pass spends its time, per kernel family.
 *
 * Off by default: then every op pays one load of a global flag.  On, the
 * CPU backend reads the monotonic clock around each op (and attention
 * around each of its tasks' phases) and adds the nanoseconds to its
 * family; the CUDA backend records events around each op on its stream
 * and adds their device time at its next sync.  Nothing computed changes
 * either way.
 *
 * The ops run on one thread at a time (the forward's), so the totals are
 * plain sums; turn profiling on or off and reset only between passes. */
#pragma once

#include <glib.h>
#include <stdint.h>
#include <time.h>

G_BEGIN_DECLS

typedef enum {
  UM_KPROF_MATMUL,    /* weight products (q, k, v, o, gate, up, down) */
  UM_KPROF_ATTN_QK,   /* attention scores q·kᵀ */
  UM_KPROF_SOFTMAX,   /* attention softmax */
  UM_KPROF_ATTN_PV,   /* attention weights · v */
  UM_KPROF_ROPE,
  UM_KPROF_RMSNORM,
  UM_KPROF_ELEMENTWISE, /* SwiGLU, residual adds, biases */
  UM_KPROF_COPIES,    /* embedding rows, row gathers, uploads and downloads */
  UM_KPROF_HEAD,      /* the LM head's product */
  UM_KPROF_MOE,       /* mixture of experts: routing, grouping, combining (on a GPU) */
  UM_KPROF_CHOOSE,    /* choosing tokens from the logits (on a GPU) */
  UM_KPROF_N
} UmKprofFamily;

extern gboolean um_kprof_on;

/* Starts counting (from zero) or stops (the sums stay readable). */
void        um_kprof_enable (gboolean on);
void        um_kprof_reset (void);
/* Seconds per family since the last reset. */
void        um_kprof_get (double seconds[UM_KPROF_N]);
const char *um_kprof_family_name (UmKprofFamily f);
/* The forward says when its products are the LM head's (any backend may
 * be told; the CPU backend files those products under UM_KPROF_HEAD). */
void        um_kprof_set_head (gboolean head);
gboolean    um_kprof_in_head (void);

void        um_kprof_add (UmKprofFamily f, int64_t ns);

static inline int64_t
um_kprof_now (void)
{
  struct timespec ts;
  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

G_END_DECLS

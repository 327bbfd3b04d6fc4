/* um-attn-cpu.h — CPU attention's work for one task (one head, a chunk of
 * at most 64 query rows, the nk keys they see), in three steps on a score
 * block held transposed, t[j·ld + r] (key j, query row r):
 *
 *   scores   t[j·ld + r] = scale · Σ_d q[r·qs + d] · k[j·ks + d]   r < nb, j < nk
 *   softmax  of each row r over its first n[r] keys; keys n[r] … nk weigh 0
 *   values   o[r·os + c] = Σ_j t[j·ld + r] · v[j·vs + c]            r < nb, c < hd
 *
 * The products run in our own kernels, picked at run time like the others
 * (portable C, AVX2 + FMA, AVX-512; see um-cpu-isa.h), or in OpenBLAS's
 * sgemm, which on a CPU newer than the library runs whatever older kernel
 * set it falls back to.  The default at each level is what measured
 * fastest (see um-attn-cpu.c); UM_ATTN_IMPL=blas|portable|avx2|avx512 in the
 * environment, or um_attn_set_impl (), picks one for comparisons.
 *
 * Transposed, because a vector then holds 16 (8) query rows: our score
 * kernel broadcasts k and loads q packed by rows, the softmax runs down
 * the keys for 16 rows at once, and the values kernel broadcasts weights
 * that lie side by side (against v packed in column blocks). */
#pragma once

#include <glib.h>
#include <stdint.h>

G_BEGIN_DECLS

typedef enum {
  UM_ATTN_AUTO = 0,   /* the default for the current ISA level */
  UM_ATTN_BLAS,       /* OpenBLAS sgemm */
  UM_ATTN_PORTABLE,   /* plain C */
  UM_ATTN_AVX2,       /* AVX2 + FMA */
  UM_ATTN_AVX512,     /* AVX-512 F */
  UM_ATTN_N_IMPLS
} UmAttnImpl;

/* Process-wide choice (tests, benchmarks); UM_ATTN_AUTO restores the
 * default.  A kernel the current ISA level (um_cpu_isa ()) cannot run is
 * replaced by the default. */
void        um_attn_set_impl (UmAttnImpl impl);
/* What attention runs now: the choice, else the default, resolved. */
UmAttnImpl  um_attn_impl (void);
/* Whether @impl can run at the current ISA level. */
gboolean    um_attn_impl_available (UmAttnImpl impl);
const char *um_attn_impl_name (UmAttnImpl impl);
gboolean    um_attn_impl_from_name (const char *name, UmAttnImpl *impl);

/* The leading dimension of a score block of @nb rows (a whole number of
 * 16-row vectors), and the floats of packing space our kernels need (the
 * task's q rows for the scores, then its v rows for the values). */
int64_t um_attn_ld (int64_t nb);
size_t  um_attn_pack_floats (int64_t nb, int64_t nk, int hd);

/* @impl: a resolved kernel (not AUTO) that is available.  They run on the
 * calling thread (attention calls them from its own parallel loop, where
 * OpenBLAS keeps to one thread too).  @ld = um_attn_ld (nb): the scores
 * fill rows nb … ld − 1 too, as a query of zeros would (0 for finite
 * keys), and the softmax leaves 0 there; @pack: um_attn_pack_floats ()
 * floats, 64-byte aligned (for both). */
void um_attn_scores (UmAttnImpl impl, const float *q, int64_t qs, const float *k, int64_t ks,
                     int64_t nb, int64_t nk, int hd, float scale, float *t, int64_t ld, float *pack);
/* @n: per row, the keys it sees (1 … nk).  Uses the CPU level's exp. */
void um_attn_softmax (float *t, int64_t ld, int64_t nb, int64_t nk, const int32_t *n);
void um_attn_values (UmAttnImpl impl, const float *t, int64_t ld, int64_t nb, int64_t nk,
                     const float *v, int64_t vs, int hd, float *o, int64_t os, float *pack);

G_END_DECLS

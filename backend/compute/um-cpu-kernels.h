/* um-cpu-kernels.h — the CPU backend's kernels on plain float arrays,
 * parallelised with um-pool; matrix products with our own kernels or OpenBLAS.
 * compute/um-ref-kernels.h has the plain scalar references they are tested
 * against. */
#pragma once

#include <glib.h>
#include <stdint.h>

#include "um-backend.h"
#include "um-cpu-threads.h"
#include "um-model.h"

G_BEGIN_DECLS

/* Working memory of the matrix products (per-thread weight tiles, packed
 * activations), grown on demand and kept, so steady-state passes allocate
 * nothing. */
typedef struct {
  float  *data;
  size_t  bytes;
} UmCpuScratch;

void um_cpu_scratch_clear (UmCpuScratch *scratch);
/* The scratch a product of m rows with an n × k weight of type t grows to
 * (what the memory plan predicts for the CPU backend's own overhead). */
size_t um_cpu_matmul_scratch_bytes (UmDType t, int64_t n, int64_t k, int64_t m, UmProducts products);

/* How a weight product is computed on this CPU (run-time dispatch, see
 * um-cpu-isa.h):
 *  - INT8: quantized weights times activations rounded to 8 bits per block
 *    of 32, integer dot products (AVX-512 VNNI); only for already-lossy
 *    quantized weights and only when not asked for the exact path;
 *  - INT8_AVX2: the same arithmetic with AVX-VNNI or AVX2;
 *  - GEMM_AVX512: weights converted exactly to f32 in cache-sized pieces and
 *    multiplied by our AVX-512 kernel;
 *  - GEMM_AVX2: the same with our AVX2 + FMA kernel;
 *  - SGEMM: weights converted exactly to f32 tiles (portable C) and
 *    multiplied by OpenBLAS sgemm, below AVX2. */
typedef enum {
  UM_CPU_MATMUL_SGEMM,
  UM_CPU_MATMUL_GEMM_AVX512,
  UM_CPU_MATMUL_INT8,
  UM_CPU_MATMUL_GEMM_AVX2,
  UM_CPU_MATMUL_INT8_AVX2,
} UmCpuMatmulPath;

UmCpuMatmulPath um_cpu_matmul_path (UmDType t, UmProducts products);
const char     *um_cpu_matmul_path_name (UmCpuMatmulPath path);

/* out[m, w.rows] = x[m, w.cols] · wᵀ for any stored format (F32 weights must
 * be 4-byte aligned); products: see um-backend.h. */
gboolean um_cpu_matmul (const float *x, int64_t m, const UmWeight *w, float *out,
                        UmCpuScratch *scratch, UmProducts products, GError **error);

void um_cpu_rms_norm (const float *x, int64_t rows, int64_t dim, const float *w, float eps, float *out);

/* The backend's rope op: the first @rope_dim values of each head turn. */
void um_cpu_rope (float *x, int64_t rows, const gint32 *pos, int n_heads, int head_dim, int rope_dim,
                  double theta, gboolean interleaved);

/* RoPE's cos/sin for some positions, kept between calls: bit for bit what
 * um_cpu_rope () computes for them each time. */
typedef struct {
  int64_t rows;
  int     rope_dim;
  double  theta;
  guint64 last_use;
  gint32 *pos;
  float  *cs, *sn;   /* rows × rope_dim / 2 */
} UmCpuRopeTable;

/* Tables kept: the forward turns all rows, and in its last layer maybe a
 * subset, at each pass. */
#define UM_CPU_ROPE_TABLES 2

void um_cpu_rope_table_clear (UmCpuRopeTable *t);
/* um_cpu_rope () with its tables kept in @tables (zero-initialised at
 * first; cleared with um_cpu_rope_table_clear ()). */
void um_cpu_rope_cached (UmCpuRopeTable tables[UM_CPU_ROPE_TABLES], float *x, int64_t rows, const gint32 *pos,
                         int n_heads, int head_dim, int rope_dim, double theta, gboolean interleaved);

/* The backend's attention op; @q_kv_len NULL or every value in 1 … seq_len.
 * Masked keys are skipped, not weighted by 0 after the fact: a row costs
 * the keys it sees (plus at most 64). */
void um_cpu_attention (const float *q, int64_t nq, const gint32 *q_seq, const gint32 *q_kv_len,
                       const float *k, const float *v, int64_t seq_len,
                       int n_heads, int n_kv_heads, int head_dim, float *out);

void um_cpu_swiglu (const float *gate, const float *up, size_t n, float *out);
void um_cpu_add (float *x, const float *y, size_t n);
/* x[r, :] += bias for r < rows. */
void um_cpu_add_bias (float *x, int rows, int dim, const float *bias);
/* dst[rows[i], :] += scale[i] · src[i, :]; rows distinct. */
void um_cpu_add_rows_scaled (float *dst, int dim, const gint32 *rows, const float *scale, int n,
                             const float *src);

/* Threads used by our kernels and OpenBLAS (0 = all cores). */
void um_cpu_set_threads (int n_threads);
/* Starts the thread pool and OpenBLAS, as the first pass would (so memory
 * measured afterwards includes them). */
void um_cpu_warm_up (void);

G_END_DECLS

/* um-backend.h — the compute backend vtable.
 *
 * The forward pass (engine/um-forward.c) is written once against these ops;
 * the CPU backend implements them with its own kernels on um-pool's threads, the CUDA backend
 * in gpu/. Activations are float32 row-major matrices in backend buffers.
 * Device memory is allocated under a hard budget: beyond it allocation fails
 * with UM_ERROR_OUT_OF_MEMORY, never silently. Small index arrays (token ids,
 * positions, selected rows) are passed as host pointers.
 */
#pragma once

#include <glib.h>
#include <stdint.h>

#include "um-model.h"

G_BEGIN_DECLS

typedef struct _UmBackend   UmBackend;
typedef struct _UmBuf       UmBuf;        /* device memory, backend specific */
typedef struct _UmDevWeight UmDevWeight;  /* a weight as the backend holds it */
typedef struct _UmChooseRule UmChooseRule; /* compute/um-choose.h */

typedef struct {
  uint64_t budget;      /* hard limit on buffer + weight bytes */
  uint64_t in_use;
  uint64_t peak;
  uint64_t total;       /* device memory, 0 if unknown */
  uint64_t free;        /* device memory free now, 0 if unknown */
  guint64  n_allocs;    /* buf_alloc calls so far: steady state adds none */
  uint64_t weight_bytes;/* of in_use: resident weights (views into buffers are not counted twice) */
  uint64_t overhead;    /* held by the backend itself, outside in_use: a GPU's context and
                         * cuBLAS workspace; the CPU's product scratch (host memory) */
} UmBackendMemInfo;

typedef struct {
  const char *name;
  /* TRUE when weight_load references the host bytes instead of copying
   * them (the CPU): the host pages then are the device copy. */
  gboolean     weights_in_place;
  void         (*destroy)      (UmBackend *be);
  void         (*mem_info)     (UmBackend *be, UmBackendMemInfo *info);

  UmBuf       *(*buf_alloc)    (UmBackend *be, size_t bytes, GError **error);
  void         (*buf_free)     (UmBackend *be, UmBuf *buf);
  /* @bytes of @parent from @offset as a buffer of its own, for ops on part
   * of a buffer (row chunks, one arena carved into work buffers). Costs no
   * device memory; buf_free releases only the view; @parent outlives it. */
  UmBuf       *(*buf_view)     (UmBackend *be, UmBuf *parent, size_t offset, size_t bytes, GError **error);
  gboolean     (*buf_upload)   (UmBackend *be, UmBuf *dst, size_t offset, const void *src, size_t bytes, GError **error);
  gboolean     (*buf_download) (UmBackend *be, UmBuf *src, size_t offset, void *dst, size_t bytes, GError **error);

  /* The backend may reference host memory (CPU) or copy it (GPU); either
   * way the weight's bytes count as device memory, under the budget. */
  UmDevWeight *(*weight_load)  (UmBackend *be, const UmWeight *w, GError **error);
  void         (*weight_free)  (UmBackend *be, UmDevWeight *w);
  /* A weight whose bytes are in @buf at @offset (a layer-streaming slot),
   * described by @meta (its data pointer is ignored). Costs no device
   * memory beyond @buf; valid while @buf is; freed with weight_free. */
  UmDevWeight *(*weight_view)  (UmBackend *be, UmBuf *buf, size_t offset, const UmWeight *meta, GError **error);

  /* Host memory for a weight store that feeds streaming slots: pinned on a
   * GPU (so copies are asynchronous DMA), plain 64-byte aligned memory on
   * the CPU. Not counted against the device budget. */
  void        *(*host_alloc)   (UmBackend *be, size_t bytes, GError **error);
  void         (*host_free)    (UmBackend *be, void *ptr, size_t bytes);
  /* buf_upload for a second (copy) thread: may run while the compute
   * thread issues ops, on its own stream on a GPU; returns once the bytes
   * are in @dst. The caller keeps @dst out of use by queued ops (sync). */
  gboolean     (*copy_upload)  (UmBackend *be, UmBuf *dst, size_t offset, const void *src, size_t bytes,
                                GError **error);
  /* Waits until every op issued so far has finished (a GPU queues them);
   * the CPU's ops are synchronous. */
  gboolean     (*sync)         (UmBackend *be, GError **error);

  /* out[i, :] = table[ids[i], :] as float. */
  gboolean (*embed)     (UmBackend *be, const UmDevWeight *table, const gint32 *ids, int n, UmBuf *out, GError **error);
  /* out[i, :] = src[rows[i], :]; dim floats per row. */
  gboolean (*get_rows)  (UmBackend *be, UmBuf *src, int dim, const gint32 *rows, int n, UmBuf *out, GError **error);
  /* out = x / sqrt(mean(x^2) + eps) * w, row-wise; out may be x. */
  gboolean (*rms_norm)  (UmBackend *be, UmBuf *x, int rows, int dim, const UmDevWeight *w, float eps, UmBuf *out, GError **error);
  /* out[rows, w.rows] = x[rows, w.cols] · wᵀ, for any stored format of w. */
  gboolean (*matmul)    (UmBackend *be, UmBuf *x, int rows, const UmDevWeight *w, UmBuf *out, GError **error);
  /* In place on x[rows, n_heads*head_dim]; row i is at position pos[i].
   * Only the first @rope_dim (even, ≤ head_dim) values of each head turn
   * (partial RoPE); the rest are left as they are. */
  gboolean (*rope)      (UmBackend *be, UmBuf *x, int rows, const gint32 *pos, int n_heads, int head_dim,
                         int rope_dim, double theta, gboolean interleaved, GError **error);
  /* Attention. q[nq, H*hd]: query row i belongs to sequence q_seq[i] (rows
   * of one sequence are contiguous); k, v[n_seq*L, Hkv*hd]; out[nq, H*hd].
   * @q_kv_len NULL: bidirectional, every row sees all seq_len keys of its
   * sequence. Otherwise row i sees only the keys 0 … q_kv_len[i] − 1 of its
   * sequence (1 ≤ q_kv_len[i] ≤ seq_len; block-causal masks). Host array.
   * Never needs the whole L×L score matrix at once. */
  gboolean (*attention) (UmBackend *be, UmBuf *q, int nq, const gint32 *q_seq, const gint32 *q_kv_len,
                         UmBuf *k, UmBuf *v, int seq_len, int n_heads, int n_kv_heads, int head_dim, UmBuf *out,
                         GError **error);
  /* out = silu(gate) ⊙ up over n floats; out may be gate. */
  gboolean (*swiglu)    (UmBackend *be, UmBuf *gate, UmBuf *up, size_t n, UmBuf *out, GError **error);
  /* x += y over n floats. */
  gboolean (*add)       (UmBackend *be, UmBuf *x, UmBuf *y, size_t n, GError **error);
  /* x[r, :] += bias[:] for r < rows, @dim floats per row (a [1, dim] float weight). */
  gboolean (*add_bias)  (UmBackend *be, UmBuf *x, int rows, int dim, const UmDevWeight *bias, GError **error);
  /* dst[rows[i], :] += scale[i] · src[i, :] for i < n, @dim floats per row,
   * in order of i (an expert's output into the residual). @rows, @scale:
   * host arrays; the rows are distinct. */
  gboolean (*add_rows_scaled) (UmBackend *be, UmBuf *dst, int dim, const gint32 *rows, const float *scale,
                               int n, UmBuf *src, GError **error);

  /* Optional (NULL: the engine downloads the logits and chooses on the
   * host). For each of @rows rows of @logits (2·rows with rule->cfg_scale
   * > 0: the conditional rows, then the unconditional ones; @vocab floats
   * each), the token and confidence of um_choose_row () (engine/
   * um-choose.h) for the row at positions[i] (host); ids equal, the
   * confidence's sum in another order. @out_ids, @out_conf: host arrays of
   * @rows. Returns once they are written. */
  gboolean (*choose)    (UmBackend *be, UmBuf *logits, int rows, int vocab, const UmChooseRule *rule,
                         const gint32 *positions, gint32 *out_ids, double *out_conf, GError **error);

  /* Optional (NULL: add then rms_norm). x += y, then out = rms_norm (x) ·
   * w: the bits of the two ops, in one (a launch on a GPU). @out may be @y,
   * not @x. */
  gboolean (*add_rms_norm) (UmBackend *be, UmBuf *x, UmBuf *y, int rows, int dim, const UmDevWeight *w, float eps,
                            UmBuf *out, GError **error);
  /* Optional (NULL: the forward routes on the host and runs each expert
   * with the ops above). A mixture-of-experts layer's routed experts on
   * @n normalised rows @h, added into the residual rows @x: the router's
   * logits @logits [n, E] are routed by @cfg's rule (um-moe.h; @bias
   * the selection bias, NULL for none), the rows grouped per expert and
   * each group multiplied, all on the backend: nothing is read back.
   * @experts: gate, up and down of each of the E experts (ffn @F) in turn;
   * @work: um_moe_work_layout (n, E, k, D, F) bytes (um-moe-work.h). */
  gboolean (*moe)        (UmBackend *be, UmBuf *x, UmBuf *h, int n, UmBuf *logits, const UmDevWeight *bias,
                          const UmModelConfig *cfg, int E, int F, UmDevWeight *const *experts, UmBuf *work,
                          GError **error);
  /* Optional (with moe). One expert (@w: its gate, up and down, ffn @F)
   * over the @n rows of @h at @rows (host, distinct), into @out [n, D]:
   * the same arithmetic per row as moe's, so experts run one at a time
   * (fetched into slots) give its bits. @work: as moe's for n rows, E 1,
   * k 1. */
  gboolean (*expert_ffn) (UmBackend *be, UmBuf *h, const gint32 *rows, int n, UmDevWeight *const *w, int F,
                          UmBuf *work, UmBuf *out, GError **error);

  /* Optional (NULL: none). The bounds of a forward pass. pass_end waits for
   * the pass's work; *@redo TRUE says its results are not to be used and
   * the pass must run again (a GPU's products took half-precision
   * activations that turned out not to fit, and take fp32 ones from now
   * on): a backend that defers such checks to the end of the pass never
   * waits inside it. */
  gboolean (*pass_begin)    (UmBackend *be, GError **error);
  gboolean (*pass_end)      (UmBackend *be, gboolean *redo, GError **error);
  /* Optional. Work of a fixed shape that the backend may record once and
   * replay (CUDA graphs, so a small model is not bound by launches): the
   * ops between segment_begin and segment_end are issued as usual, and the
   * same @key promises the same ops with the same arguments (buffers,
   * sizes), the contents of host arrays aside, which may differ. Inside, no
   * op may read results back to the host (download, sync, choose).
   * segment_end with @failed (an op failed) drops the segment's work;
   * otherwise *@redo TRUE says the ops were neither run nor recorded (a
   * recording could not be made or did not match) and must be issued
   * again, as they then run as usual. */
  gboolean (*segment_begin) (UmBackend *be, guint64 key, GError **error);
  gboolean (*segment_end)   (UmBackend *be, gboolean failed, gboolean *redo, GError **error);
} UmBackendOps;

struct _UmBackend {
  const UmBackendOps *ops;
  void               *ctx;
};

/* CPU backend. @budget_bytes 0 means no limit beyond the machine;
 * @n_threads sets the process's CPU thread count (um_cpu_set_threads ():
 * 0 the adaptive default, N a fixed count); below 0 it leaves it as it is
 * (a second backend beside an engine's, which must not turn its count or
 * its adaptation off). */
UmBackend *um_backend_cpu_new (uint64_t budget_bytes, int n_threads, GError **error);
/* How products with quantized weights treat the activations on the CPU:
 *  - EXACT (the default of a new CPU backend): f32, the exact product with
 *    the dequantized weights, for every weight type;
 *  - AUTO: rounded to 8 bits per block of 32 for integer dot products where
 *    the CPU has them (AVX2 and up), for every quantized type (Q8_0, Q6_K
 *    and the 4- and 5-bit ones), as llama.cpp computes them.  Measured with
 *    unmask-cli compare on the demo model (docs/cpu-avx2.md): 4-5e-5 mean
 *    KL for every type, a tenth to a hundredth of the 4- to 6-bit weights'
 *    own quantization cost and about twice Q8_0's (still under 1e-4, 99.4 %
 *    arg-max agreement);
 *  - INT8: the same, by name.
 * F32/F16/BF16 weights always multiply f32 activations; below AVX2 there
 * are no integer products and every product is exact.  The engine resolves
 * AUTO per model, by the type of its first layer's weights. */
typedef enum {
  UM_PRODUCTS_EXACT,
  UM_PRODUCTS_AUTO,
  UM_PRODUCTS_INT8,
} UmProducts;

gboolean    um_products_from_string (const char *s, UmProducts *out);
const char *um_products_to_string (UmProducts products);
/* Whether AUTO gives weights of type t 8-bit activations. */
gboolean   um_products_auto_int8 (UmDType t);
void       um_backend_cpu_set_products (UmBackend *be, UmProducts products);
UmProducts um_backend_cpu_get_products (UmBackend *be);

void       um_backend_free (UmBackend *be);
/* For implementations: may @bytes more be held under @budget when @used
 * is held already? Sets an out-of-memory error naming @backend and its
 * budget (@budget_name: "memory", "GPU memory") if not. Both backends
 * account their device memory with it, so their refusals read alike. */
gboolean   um_backend_budget_check (const char *backend, const char *budget_name, guint64 budget, guint64 used,
                                    size_t bytes, const char *what, GError **error);
/* For implementations: is a copy of @bytes at @offset inside a buffer of
 * @buf_bytes? Sets an error naming @backend if not. */
gboolean   um_backend_check_copy (const char *backend, size_t buf_bytes, size_t offset, size_t bytes,
                                  GError **error);
/* For implementations: is @rope_dim even and within 0 … @head_dim? Is every
 * key count of @q_kv_len (NULL: none) within 1 … @seq_len? Errors name
 * @backend. */
gboolean   um_backend_check_rope_dim (const char *backend, int head_dim, int rope_dim, GError **error);
gboolean   um_backend_check_kv_len (const char *backend, const gint32 *q_kv_len, int nq, int seq_len,
                                    GError **error);
const char *um_backend_name (UmBackend *be);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmBackend, um_backend_free)

G_END_DECLS

/* um-layer-store.h — the host copy of every layer's matrices, for layer
 * streaming: the compute device keeps only a few layer slots, and each layer
 * is copied (decoded) from this store into a slot before it runs.
 *
 * The store holds the matrices of every layer (the norm vectors are
 * small and stay resident) in memory from the backend's host_alloc (pinned
 * on a GPU), either as they are or zstd-compressed. Building it releases the
 * model's mapped file pages it copied, so the process holds the store instead
 * of the file, not both.
 */
#pragma once

#include <gio/gio.h>

#include "um-backend.h"
#include "um-model.h"

G_BEGIN_DECLS

/* The zstd level a layer store is built with: fast to build; decoding
 * speed hardly depends on it. */
#define UM_LAYER_STORE_ZSTD_LEVEL 1

/* A zstd store cuts each matrix into frames of this many raw bytes (the
 * last one of a matrix shorter), each FRAME_ALIGN-aligned in its block. */
#define UM_LAYER_STORE_FRAME_BYTES ((size_t) 2 << 20)
#define UM_LAYER_STORE_FRAME_ALIGN 64

/* wq, wk, wv, wo, w_gate, w_up, w_down, then the shared expert's sh_gate,
 * sh_up, sh_down (empty where a layer has none), in this order. A fused
 * q/k/v (LLaDA 2) is stored as its three row slices, the same bytes. */
#define UM_LAYER_N_MATS 10
/* Alignment of each matrix in a slot: enough for any vector load or DMA. */
#define UM_LAYER_ALIGN 256

/* Where each matrix of a layer goes in a slot. */
typedef struct {
  size_t offset[UM_LAYER_N_MATS];   /* multiples of UM_LAYER_ALIGN */
  size_t bytes[UM_LAYER_N_MATS];    /* rows * row_bytes */
  size_t total;                     /* end of the last matrix, rounded up to UM_LAYER_ALIGN */
} UmLayerLayout;

void            um_layer_layout     (const UmLayerWeights *L, UmLayerLayout *out);
/* The largest layout total over the model's layers: the size of a slot. */
size_t          um_layer_slot_bytes (const UmModel *model);
/* The i-th matrix (0 ≤ i < UM_LAYER_N_MATS) in layout order; NULL otherwise. */
const UmWeight *um_layer_mat        (const UmLayerWeights *L, int i);

typedef enum {
  UM_STORE_RAW,     /* as stored in the file: a fetch is one copy */
  UM_STORE_ZSTD,    /* zstd frames: less host memory, a fetch decodes */
} UmStoreCompression;

typedef struct {
  guint64 raw_bytes;                          /* the layers' matrices as in the model */
  guint64 stored_bytes;                       /* what the store keeps for them */
  guint64 dtype_raw_bytes[UM_DTYPE_N_TYPES];  /* the same, by matrix type */
  guint64 dtype_stored_bytes[UM_DTYPE_N_TYPES];
  guint64 n_fetches;                          /* successful um_layer_store_fetch () calls */
  double  fetch_seconds;                      /* in those fetches, decoding and copying */
  double  decode_seconds;                     /* of which zstd decoding and reassembly */
  guint64 decoded_bytes;                      /* bytes those decoded (raw frames are copied) */
  guint64 uploaded_bytes;                     /* bytes those wrote into slots (host → device) */
} UmLayerStoreStats;

/* Called after each layer is stored, with the fraction done. */
typedef void (*UmLayerStoreProgress) (double fraction, gpointer user_data);

typedef struct _UmLayerStore UmLayerStore;

/* Copies the matrices of every layer of @model into host memory of @be, one
 * layer at a time, and releases the copied pages of the model's mapped files
 * (they are re-read from the file only if something touches them again, so
 * the model's UmWeight pointers stay valid). @zstd_level is zstd's (1 is
 * fast; ignored for UM_STORE_RAW). @model and @be must outlive the store.
 * Fails with G_IO_ERROR_CANCELLED if @cancellable fires (checked between
 * layers), UM_ERROR_OUT_OF_MEMORY if the host memory is not there. */
UmLayerStore *um_layer_store_new        (UmBackend            *be,
                                         const UmModel        *model,
                                         UmStoreCompression    comp,
                                         int                   zstd_level,
                                         UmLayerStoreProgress  progress,
                                         gpointer              user_data,
                                         GCancellable         *cancellable,
                                         GError              **error);

/* Puts the stored bytes of @layer's matrices into @slot (at least
 * um_layer_slot_bytes () long) at the offsets of um_layer_layout (), with
 * the backend's copy_upload, so it may run on a copy thread while the
 * compute thread works; the caller keeps queued ops off @slot. Fetches of
 * one store take turns (a lock: it has one decoding buffer), so calling from
 * two threads is safe but not parallel. Fails on a layer out of range, a
 * corrupt frame (UM_ERROR_FORMAT: frames carry checksums) or a failed
 * upload; @slot then holds a partial layer. */
gboolean      um_layer_store_fetch      (UmLayerStore      *s,
                                         guint              layer,
                                         UmBuf             *slot,
                                         GError           **error);

/* A RAW store's copy of @layer, laid out as a slot (um_layer_layout ()
 * offsets), for reading in place: host memory that lives as long as the
 * store. NULL for a ZSTD store or a layer out of range. */
const guint8 *um_layer_store_raw_block  (UmLayerStore      *s,
                                         guint              layer);
guint         um_layer_store_n_layers   (UmLayerStore      *s);
UmStoreCompression um_layer_store_compression (UmLayerStore *s);
/* Safe to call while another thread fetches. */
void          um_layer_store_get_stats  (UmLayerStore      *s,
                                         UmLayerStoreStats *stats);
/* Host memory the store holds: its layer blocks, the decoding buffer, the
 * decoder and frame tables. */
guint64       um_layer_store_host_bytes (UmLayerStore      *s);

/* How well zstd shrinks each matrix of a layer, by matrix (wq … w_down)
 * and type: stored / raw bytes, frames kept raw included. */
typedef struct {
  double   ratio[UM_LAYER_N_MATS][UM_DTYPE_N_TYPES];
  gboolean measured;        /* compressed from the model's own bytes; FALSE: an estimate by type */
  guint64  sampled_bytes;   /* raw bytes compressed to measure it */
  gboolean complete;        /* the sample was every frame: the prediction is exact */
  guint64  cctx_bytes;      /* one zstd compressor's state (0: not measured) */
} UmStoreRatios;

/* An estimate from the types alone, no weight read: zstd level 1 on
 * random-normal weights, byte planes split as the store does (BF16 0.684,
 * F16 0.843, F32 0.842; quantized blocks stay raw). Trained weights differ
 * (the shipped demo model's BF16 stores at 0.74): measure where the bytes
 * are at hand. */
void          um_layer_store_estimate_ratios (const UmModel *model, UmStoreRatios *out);
/* Measured: compresses at most @max_bytes of @model's layer matrices, frame
 * by frame exactly as a store at @zstd_level would, spread over every
 * matrix and type (each gets its share of the sample, at least one frame,
 * from layers spread over the model); everything when the layers are
 * smaller than @max_bytes. Reads those bytes from the model's file. */
gboolean      um_layer_store_measure_ratios  (const UmModel *model, int zstd_level, guint64 max_bytes,
                                              UmStoreRatios *out, GError **error);
/* Stored / raw bytes of @model's layer matrices with @ratios, weighted by
 * their raw bytes. */
double        um_layer_store_mean_ratio      (const UmModel *model, const UmStoreRatios *ratios);
/* Host bytes a store of @model with @comp would hold (what
 * um_layer_store_host_bytes () then says): every layer's block, frame
 * tables, decoding buffer and decoder, with zstd from @ratios (ignored for
 * RAW).
 * @decode_bytes (may be NULL): of which the decoding buffer, allocated
 * once the layers are stored. */
guint64       um_layer_store_predict_bytes   (const UmModel *model, UmStoreCompression comp,
                                              const UmStoreRatios *ratios, guint64 *decode_bytes);
/* Host bytes building such a store holds besides the store, per
 * compressing thread (zstd: a frame's planes and output and a compressor;
 * RAW: none), and the frames of one layer kept until the block is laid out. */
guint64       um_layer_store_build_bytes     (const UmModel *model, UmStoreCompression comp,
                                              const UmStoreRatios *ratios, int n_threads);
void          um_layer_store_free       (UmLayerStore      *s);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmLayerStore, um_layer_store_free)

G_END_DECLS

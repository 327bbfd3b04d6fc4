/* um-dtype.h — element types of stored tensors.
 *
 * Block-quantized types follow llama.cpp's layouts (see um-quant-blocks.h);
 * a row of a quantized tensor is a whole number of blocks.
 */
#pragma once

#include <stdint.h>

/* The enum is plain C so that CUDA sources (.cu, built without GLib) can
 * use it; everything else needs GLib and is hidden from nvcc. */
typedef enum {
  UM_DTYPE_F32,
  UM_DTYPE_F16,
  UM_DTYPE_BF16,
  UM_DTYPE_Q8_0,
  UM_DTYPE_Q4_0,
  UM_DTYPE_Q4_1,
  UM_DTYPE_Q5_0,
  UM_DTYPE_Q5_1,
  UM_DTYPE_Q4_K,
  UM_DTYPE_Q5_K,
  UM_DTYPE_Q6_K,
  UM_DTYPE_I32,             /* only for non-weight tensors some files carry */
  UM_DTYPE_N_TYPES
} UmDType;

#ifndef __CUDACC__

#include <glib.h>

G_BEGIN_DECLS

typedef struct {
  const char *name;         /* "F32", "Q4_K", ... */
  guint       block_elems;  /* elements per block (1 for plain types) */
  guint       block_bytes;  /* bytes per block */
  gboolean    quantized;
} UmDTypeInfo;

const UmDTypeInfo *um_dtype_info (UmDType type);
const char        *um_dtype_name (UmDType type);
/* Parses "F32", "f16", "bf16", "q4_k", ...; returns FALSE if unknown. */
gboolean           um_dtype_from_name (const char *name, UmDType *out);

/* Bytes needed for n elements (n must be a multiple of the block size).
 * Returns FALSE on a partial block or on overflow. */
gboolean           um_dtype_bytes (UmDType type, uint64_t n_elems, uint64_t *out_bytes);

/* Bits per weight, for reports. */
double             um_dtype_bits_per_weight (UmDType type);

G_END_DECLS

#endif /* !__CUDACC__ */

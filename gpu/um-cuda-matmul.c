/* um-cuda-matmul.c — weight products on the GPU: cuBLAS for F32, F16 and
 * BF16 weights, quantized ones dequantized per tile on their own stream a
 * tile ahead of the product, and half-precision activations guarded against
 * values f16 cannot hold. */
#include "um-cuda-private.h"

#include "um-cuda-tiles.h"
#include "um-error.h"

#define TILE_ELEMS UM_CUDA_TILE_ELEMS

/* A weight cuBLAS cannot take as stored, multiplied in tiles of rows
 * dequantized to @type (F16, or F32 for fp32 activations) on the dequant
 * stream into the two tile buffers in turn, each multiplied on the compute
 * stream once ready: tile i + 2 is dequantized while tile i is multiplied.
 * The same tiles and products as one buffer in series: the same results. */
typedef struct {
  const UmDevWeight *dw;
  UmCudaOutType      type;
  int64_t            tile_rows;
  int64_t            n_tiles;
} Tiles;

static gboolean
tiles_begin (CudaCtx *c, const UmDevWeight *dw, UmCudaOutType type, Tiles *t, GError **error)
{
  const int64_t n = dw->w.rows, k = dw->w.cols;
  const size_t elt = type == UM_CUDA_OUT_F32 ? 4 : 2;
  size_t bytes;

  t->dw = dw;
  t->type = type;
  /* F32 tiles have half the rows: the same memory either way. */
  t->tile_rows = um_cuda_tile_rows (n, k, TILE_ELEMS * 2 / elt);
  t->n_tiles = (n + t->tile_rows - 1) / t->tile_rows;
  bytes = (size_t) t->tile_rows * k * elt;
  return um_cuda_scratch_ensure (c, &c->tiles[0], bytes, error) && um_cuda_scratch_ensure (c, &c->tiles[1], bytes, error)
         /* What the ops before wrote (a weight uploaded into a buffer on
          * the compute stream) and read (the tiles, by the last product)
          * first. */
         && um_cuda_ok (cudaEventRecord (c->product_start, c->stream), "ordering the GPU streams", error)
         && um_cuda_ok (cudaStreamWaitEvent (c->dequant_stream, c->product_start, 0), "ordering the GPU streams",
                     error);
}

/* Queues the dequantization of tile @i into tiles[i % 2]. */
static gboolean
tiles_dequant (CudaCtx *c, const Tiles *t, int64_t i, GError **error)
{
  const UmWeight *w = &t->dw->w;
  const int b = (int) (i & 1);
  const int64_t r0 = i * t->tile_rows, nr = MIN (t->tile_rows, (int64_t) w->rows - r0);

  if (i >= t->n_tiles)
    return TRUE;
  /* tiles[b] was last read by the product of tile i − 2. */
  return (i < 2 || um_cuda_ok (cudaStreamWaitEvent (c->dequant_stream, c->tile_free[b], 0), "ordering the GPU streams",
                            error))
         && um_cuda_ok (um_cuda_dequant_rows (w->dtype, (const char *) t->dw->dev + r0 * w->row_bytes, w->row_bytes, nr,
                                           w->cols, c->tiles[b].ptr, t->type, c->dequant_stream), "dequantizing",
                     error)
         && um_cuda_ok (cudaEventRecord (c->tile_ready[b], c->dequant_stream), "ordering the GPU streams", error);
}

/* out[rows, n] = x · Wᵀ with x in @t's type, tiles 0 and 1 already queued
 * by tiles_dequant. */
static gboolean
tiles_multiply (CudaCtx *c, const Tiles *t, const void *x, int rows, float *out, GError **error)
{
  const UmWeight *w = &t->dw->w;
  const cudaDataType type = t->type == UM_CUDA_OUT_F32 ? CUDA_R_32F : CUDA_R_16F;

  for (int64_t i = 0; i < t->n_tiles; i++)
    {
      const int b = (int) (i & 1);
      const int64_t r0 = i * t->tile_rows, nr = MIN (t->tile_rows, (int64_t) w->rows - r0);
      if (!um_cuda_ok (cudaStreamWaitEvent (c->stream, c->tile_ready[b], 0), "ordering the GPU streams", error)
          || !um_cuda_gemm (c, c->tiles[b].ptr, type, (int) nr, (int) w->cols, x, type, rows, out + r0, (int) w->rows, error)
          || !um_cuda_ok (cudaEventRecord (c->tile_free[b], c->stream), "ordering the GPU streams", error)
          || !tiles_dequant (c, t, i + 2, error))
        return FALSE;
    }
  return TRUE;
}

/* The fp32 path: x as it is, the weight dequantized to f32 tiles. */
static gboolean
matmul_f32_tiles (CudaCtx *c, const UmDevWeight *dw, const float *x, int rows, float *out, GError **error)
{
  Tiles t;
  return tiles_begin (c, dw, UM_CUDA_OUT_F32, &t, error) && tiles_dequant (c, &t, 0, error)
         && tiles_dequant (c, &t, 1, error) && tiles_multiply (c, &t, x, rows, out, error);
}

/* Converts x to f16 in act_half and says whether every value fit: one wait
 * for the GPU per product (the conversion, not the products queued before
 * it, is what the host waits for last), since whether the product may run
 * on f16 must be known before it is queued. */
static gboolean
activations_to_f16 (CudaCtx *c, const float *x, size_t n, gboolean *fits, GError **error)
{
  const gint serial = g_atomic_int_get (&c->op_serial);

  if (c->act_valid && !c->act_deferred && c->act_src == x && c->act_n == n && serial == c->act_serial + 1)
    {
      c->act_serial = serial;
      *fits = c->act_fits;
      return TRUE;
    }
  c->act_valid = FALSE;
  if (!um_cuda_scratch_ensure (c, &c->act_half, n * 2, error)
      || !um_cuda_ok (cudaMemsetAsync (c->range_flag, 0, sizeof (int), c->stream), "converting activations", error)
      || !um_cuda_ok (um_cuda_convert_f32_checked (x, n, c->act_half.ptr, UM_CUDA_OUT_F16, c->range_flag, c->stream),
                   "converting activations", error)
      || !um_cuda_ok (cudaMemcpyAsync (c->range_flag_host, c->range_flag, sizeof (int), cudaMemcpyDeviceToHost,
                                    c->stream), "converting activations", error)
      || !um_cuda_ok (cudaEventRecord (c->range_done, c->stream), "converting activations", error)
      || !um_cuda_ok (cudaEventSynchronize (c->range_done), "waiting for the GPU", error))
    return FALSE;
  *fits = *(volatile int *) c->range_flag_host == 0;
  c->act_valid = TRUE;
  c->act_deferred = FALSE;
  c->act_src = x;
  c->act_n = n;
  c->act_serial = serial;
  c->act_fits = *fits;
  return TRUE;
}

/* In a pass (pass_begin … pass_end), nothing waits: the conversion's range
 * check sets the product's flag slot on the device, read once at pass_end
 * (um_cuda_pass_end), which then sends the flagged weights to fp32 products
 * and has the pass run again. A product right after another on the same
 * input reuses its conversion and its slot. FALSE with no error: no slot
 * left, check as outside a pass. */
static gboolean
activations_to_f16_deferred (CudaCtx *c, const UmDevWeight *dw, const float *x, size_t n, gboolean *queued,
                             GError **error)
{
  const gint serial = g_atomic_int_get (&c->op_serial);
  UmCudaFlagged f = { 0, dw->dev };

  *queued = FALSE;
  if (c->act_valid && c->act_deferred && c->act_src == x && c->act_n == n && serial == c->act_serial + 1)
    {
      c->act_serial = serial;
      f.slot = c->act_slot;
      g_array_append_val (c->flagged, f);
      *queued = TRUE;
      return TRUE;
    }
  if (c->n_flag_slots >= UM_CUDA_FLAG_SLOTS)
    return TRUE;
  c->act_valid = FALSE;
  f.slot = c->n_flag_slots++;
  if (!um_cuda_scratch_ensure (c, &c->act_half, n * 2, error)
      || !um_cuda_ok (um_cuda_convert_f32_checked (x, n, c->act_half.ptr, UM_CUDA_OUT_F16, c->flags + f.slot,
                                                   c->stream), "converting activations", error))
    return FALSE;
  g_array_append_val (c->flagged, f);
  c->act_valid = TRUE;
  c->act_deferred = TRUE;
  c->act_slot = f.slot;
  c->act_src = x;
  c->act_n = n;
  c->act_serial = serial;
  c->act_fits = TRUE;
  *queued = TRUE;
  return TRUE;
}

/* F32 weights: exact fp32. F16 weights (and BF16 ones uploaded as F16,
 * every value being exact there): f16 activations, fp32 accumulation.
 * Quantized: f16 tiles × f16 activations; the first two tiles are queued
 * before the range check, so the GPU dequantizes while the host waits for
 * it. Whenever an activation does not fit f16 (|x| > 65504, or not finite)
 * the product is done with fp32 activations and the weight dequantized to
 * f32 instead, like the CPU, rather than giving inf or NaN rows; BF16
 * weights not exact in f16 always take that path (bf16 activations would
 * round 8× coarser than f16). Inside a pass that is known only at its end
 * (activations_to_f16_deferred); a weight found so takes fp32 products from
 * then on (c->fp32_weights). */
static gboolean
matmul_product (CudaCtx *c, const float *x, int rows, const UmDevWeight *dw, float *out, GError **error)
{
  const UmWeight *w = &dw->w;
  const int n = w->rows, k = w->cols;
  const gboolean quantized = w->dtype != UM_DTYPE_F16 && w->dtype != UM_DTYPE_BF16;
  gboolean fits = FALSE, queued = FALSE;
  Tiles t;

  if (w->dtype == UM_DTYPE_F32)
    return um_cuda_gemm (c, dw->dev, CUDA_R_32F, n, k, x, CUDA_R_32F, rows, out, n, error);
  /* UNMASK_CUDA_EXACT_PRODUCTS: the CPU's exact products (the weight
   * dequantized to f32, fp32 activations), e.g. to check against it. */
  if (w->dtype == UM_DTYPE_BF16 || c->exact_products || g_hash_table_contains (c->fp32_weights, dw->dev))
    return matmul_f32_tiles (c, dw, x, rows, out, error);
  if (quantized
      && (!tiles_begin (c, dw, UM_CUDA_OUT_F16, &t, error) || !tiles_dequant (c, &t, 0, error)
          || !tiles_dequant (c, &t, 1, error)))
    return FALSE;
  if (c->in_pass && !activations_to_f16_deferred (c, dw, x, (size_t) rows * k, &queued, error))
    return FALSE;
  if (!queued)
    {
      if (!activations_to_f16 (c, x, (size_t) rows * k, &fits, error))
        return FALSE;
      if (!fits)
        {
          /* The tiles queued above are overwritten in stream order. */
          g_debug ("cuda: “%s”: an activation does not fit f16; product in fp32", w->name);
          return matmul_f32_tiles (c, dw, x, rows, out, error);
        }
    }
  if (!quantized)
    return um_cuda_gemm (c, dw->dev, CUDA_R_16F, n, k, c->act_half.ptr, CUDA_R_16F, rows, out, n, error);
  return tiles_multiply (c, &t, c->act_half.ptr, rows, out, error);
}

gboolean
um_cuda_op_matmul (UmBackend *be, UmBuf *x, int rows, const UmDevWeight *dw, UmBuf *out, GError **error)
{
  CudaCtx *c = CTX (be);
  const gboolean fp32 = g_hash_table_contains (c->fp32_weights, dw->dev);
  Timer t;
  gboolean ok, timed;

  if (rows == 0)
    return TRUE;
  if (dw->w.rows > G_MAXINT || dw->w.cols > G_MAXINT)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "cuda: weight “%s” is too large for one product",
                   dw->w.name);
      return FALSE;
    }
  /* Its path is part of what it does (the flag slots it uses, the
   * segment's: um-cuda-graph.c). */
  if (!UM_CUDA_ISSUE (c, UM_CUDA_OP_MATMUL, UM_CUDA_P (x->ptr), rows, UM_CUDA_P (dw->dev), dw->w.dtype, dw->w.rows,
                      dw->w.cols, UM_CUDA_P (out->ptr), fp32, c->in_pass))
    {
      /* Replayed: the conversion it would reuse is the graph's. */
      c->act_valid = FALSE;
      return TRUE;
    }
  timed = um_cuda_timing_allowed (c);
  if (timed && !um_cuda_timer_start (c, &t, error))
    return FALSE;
  ok = matmul_product (c, x->ptr, rows, dw, out->ptr, error);
  if (timed)
    um_cuda_timer_end (c, &t, ok);
  /* An output over the converted input makes its conversion stale. */
  if (!ok || ((const char *) out->ptr < (const char *) x->ptr + x->bytes
              && (const char *) x->ptr < (const char *) out->ptr + out->bytes))
    c->act_valid = FALSE;
  return ok;
}

gboolean
um_cuda_pass_begin (UmBackend *be, GError **error)
{
  CudaCtx *c = CTX (be);

  c->in_pass = TRUE;
  c->n_flag_slots = 0;
  g_array_set_size (c->flagged, 0);
  c->act_valid = FALSE;
  return um_cuda_ok (cudaMemsetAsync (c->flags, 0, UM_CUDA_FLAG_SLOTS * sizeof (int), c->stream),
                     "starting a pass", error);
}

gboolean
um_cuda_pass_end (UmBackend *be, gboolean *redo, GError **error)
{
  CudaCtx *c = CTX (be);
  const int n = c->n_flag_slots;

  *redo = FALSE;
  c->in_pass = FALSE;
  c->act_valid = FALSE;
  if (n > 0
      && !um_cuda_ok (cudaMemcpyAsync (c->flags_host, c->flags, (size_t) n * sizeof (int), cudaMemcpyDeviceToHost,
                                       c->stream), "reading the range checks", error))
    return FALSE;
  if (!um_cuda_ok (cudaStreamSynchronize (c->stream), "waiting for the GPU", error)
      || !um_cuda_ok (cudaStreamSynchronize (c->dequant_stream), "waiting for the GPU", error))
    return FALSE;
  um_cuda_timers_collect (c);
  for (guint i = 0; i < c->flagged->len; i++)
    {
      const UmCudaFlagged *f = &g_array_index (c->flagged, UmCudaFlagged, i);
      if (((volatile int *) c->flags_host)[f->slot] != 0)
        {
          g_debug ("cuda: an activation did not fit f16: that weight's products go fp32, the pass again");
          g_hash_table_add (c->fp32_weights, f->dev);
          *redo = TRUE;
        }
    }
  g_array_set_size (c->flagged, 0);
  c->n_flag_slots = 0;
  return TRUE;
}

/* The host layer store (raw and zstd) and the prefetch thread: every fetch
 * puts exactly the model's bytes in the slot, for every weight type; errors
 * are errors; the prefetcher delivers the right layer and shuts down
 * promptly. Run with -m perf for compression ratios and decode speeds. */
#include <math.h>
#include <string.h>

#include "um-backend.h"
#include "um-error.h"
#include "um-layer-store.h"
#include "um-prefetch.h"
#include "um-quant.h"
#include "um-test-util.h"

/* A CPU backend seen through a wrapper that records host blocks (to damage
 * a stored frame, to check they are all freed) and can slow uploads down. */
typedef struct {
  UmBackend     be;          /* what the store gets */
  UmBackendOps  ops;
  UmBackend    *real;
  GPtrArray    *blocks;      /* live host_alloc pointers, in allocation order */
  GArray       *block_bytes;
  gulong        upload_delay_us;
  gboolean      fail_uploads;
} TestBackend;

static void *
tb_host_alloc (UmBackend *be, size_t bytes, GError **error)
{
  TestBackend *tb = (TestBackend *) be;
  void *p = tb->real->ops->host_alloc (tb->real, bytes, error);
  if (p != NULL)
    {
      g_ptr_array_add (tb->blocks, p);
      g_array_append_val (tb->block_bytes, bytes);
    }
  return p;
}

static void
tb_host_free (UmBackend *be, void *ptr, size_t bytes)
{
  TestBackend *tb = (TestBackend *) be;
  guint i;

  g_assert_true (g_ptr_array_find (tb->blocks, ptr, &i));
  g_assert_cmpuint (g_array_index (tb->block_bytes, size_t, i), ==, bytes);
  g_ptr_array_remove_index (tb->blocks, i);
  g_array_remove_index (tb->block_bytes, i);
  tb->real->ops->host_free (tb->real, ptr, bytes);
}

static gboolean
tb_copy_upload (UmBackend *be, UmBuf *dst, size_t offset, const void *src, size_t bytes, GError **error)
{
  TestBackend *tb = (TestBackend *) be;
  if (tb->upload_delay_us > 0)
    g_usleep (tb->upload_delay_us);
  if (tb->fail_uploads)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FAILED, "test: upload failed");
      return FALSE;
    }
  return tb->real->ops->copy_upload (tb->real, dst, offset, src, bytes, error);
}

static TestBackend *
test_backend_new (void)
{
  g_autoptr(GError) error = NULL;
  TestBackend *tb = g_new0 (TestBackend, 1);

  tb->real = um_backend_cpu_new (0, 0, &error);
  g_assert_no_error (error);
  tb->ops = *tb->real->ops;
  tb->ops.host_alloc = tb_host_alloc;
  tb->ops.host_free = tb_host_free;
  tb->ops.copy_upload = tb_copy_upload;
  tb->be.ops = &tb->ops;
  tb->be.ctx = tb->real->ctx;
  tb->blocks = g_ptr_array_new ();
  tb->block_bytes = g_array_new (FALSE, FALSE, sizeof (size_t));
  return tb;
}

static void
test_backend_free (TestBackend *tb)
{
  /* Every host block went back. */
  g_assert_cmpuint (tb->blocks->len, ==, 0);
  g_ptr_array_unref (tb->blocks);
  g_array_unref (tb->block_bytes);
  um_backend_free (tb->real);
  g_free (tb);
}

/* A model built by hand over our own (heap) buffers: only what the store
 * reads (the layer count and the layers' matrices). */
typedef struct {
  UmModel    model;
  GPtrArray *bufs;
} TestModel;

/* Standard normal numbers, two at a time (Box–Muller over xorshift64*):
 * fast enough for tens of millions. */
typedef struct {
  guint64  state;
  float    spare;
  gboolean has_spare;
} Rng;

static double
rng_uniform (Rng *r)
{
  r->state ^= r->state >> 12;
  r->state ^= r->state << 25;
  r->state ^= r->state >> 27;
  return ((r->state * G_GUINT64_CONSTANT (2685821657736338717)) >> 11) * (1.0 / 9007199254740992.0);
}

static float
randn (Rng *r)
{
  double u, v, m;

  if (r->has_spare)
    {
      r->has_spare = FALSE;
      return r->spare;
    }
  u = 1.0 - rng_uniform (r);   /* (0, 1] */
  v = rng_uniform (r);
  m = sqrt (-2.0 * log (u));
  r->spare = (float) (m * sin (2 * G_PI * v));
  r->has_spare = TRUE;
  return (float) (m * cos (2 * G_PI * v));
}

static void
fill_weight (TestModel *tm, UmWeight *w, const char *name, UmDType t, guint64 rows, guint64 cols, gboolean sparse,
             Rng *r)
{
  g_autofree float *row = g_new (float, cols);
  uint64_t rb;
  guint8 *data;

  g_assert_true (um_dtype_bytes (t, cols, &rb));
  data = g_malloc (rows * rb);
  for (guint64 i = 0; i < rows; i++)
    {
      for (guint64 j = 0; j < cols; j++)
        row[j] = sparse && rng_uniform (r) < 0.9 ? 0.0f : 0.02f * randn (r);
      g_assert_true (um_quant_quantize_row_ref (t, row, data + i * rb, (int64_t) cols));
    }
  g_ptr_array_add (tm->bufs, data);
  w->name = name;
  w->dtype = t;
  w->rows = rows;
  w->cols = cols;
  w->row_bytes = rb;
  w->data = data;
}

/* @types: the seven matrices' types (wq … w_down). Layer 1 is "pruned" to
 * half the FFN, so layers differ in size. @sparse: nine weights in ten are
 * zero, so that quantized data compresses too. */
static TestModel *
test_model_new (const UmDType types[UM_LAYER_N_MATS], gboolean sparse, guint n_layers, guint D, guint Dkv, guint F,
                guint32 seed)
{
  TestModel *tm = g_new0 (TestModel, 1);
  Rng rng = { G_GUINT64_CONSTANT (0x9e3779b97f4a7c15) * (seed + 1), 0, FALSE }, *r = &rng;

  tm->bufs = g_ptr_array_new_with_free_func (g_free);
  tm->model.cfg.n_layers = n_layers;
  tm->model.layers = g_new0 (UmLayerWeights, n_layers);
  for (guint l = 0; l < n_layers; l++)
    {
      UmLayerWeights *L = &tm->model.layers[l];
      guint f = l == 1 ? F / 2 : F;
      fill_weight (tm, &L->wq, "wq", types[0], D, D, sparse, r);
      fill_weight (tm, &L->wk, "wk", types[1], Dkv, D, sparse, r);
      fill_weight (tm, &L->wv, "wv", types[2], Dkv, D, sparse, r);
      fill_weight (tm, &L->wo, "wo", types[3], D, D, sparse, r);
      fill_weight (tm, &L->w_gate, "w_gate", types[4], f, D, sparse, r);
      fill_weight (tm, &L->w_up, "w_up", types[5], f, D, sparse, r);
      fill_weight (tm, &L->w_down, "w_down", types[6], D, f, sparse, r);
      L->ffn = f;
    }
  return tm;
}

static TestModel *
test_model_new_1 (UmDType t, guint n_layers, guint D, guint Dkv, guint F, guint32 seed)
{
  const UmDType types[UM_LAYER_N_MATS] = { t, t, t, t, t, t, t };
  return test_model_new (types, FALSE, n_layers, D, Dkv, F, seed);
}

static void
test_model_free (TestModel *tm)
{
  g_ptr_array_unref (tm->bufs);
  g_free (tm->model.layers);
  g_free (tm);
}

/* The slot holds exactly layer @l's bytes at the layout offsets. */
static void
check_slot (UmBackend *be, UmBuf *slot, const UmModel *model, guint l)
{
  const UmLayerWeights *L = &model->layers[l];
  g_autoptr(GError) error = NULL;
  UmLayerLayout lay;
  g_autofree guint8 *got = NULL;

  um_layer_layout (L, &lay);
  got = g_malloc (lay.total);
  g_assert_true (be->ops->buf_download (be, slot, 0, got, lay.total, &error));
  g_assert_no_error (error);
  /* A matrix the layer lacks (the shared expert's) has no bytes and no data. */
  for (int i = 0; i < UM_LAYER_N_MATS; i++)
    g_assert_true (lay.bytes[i] == 0 || memcmp (got + lay.offset[i], um_layer_mat (L, i)->data, lay.bytes[i]) == 0);
}

static UmBuf *
new_slot (UmBackend *be, size_t bytes)
{
  g_autoptr(GError) error = NULL;
  g_autofree guint8 *junk = g_malloc (bytes);
  UmBuf *slot = be->ops->buf_alloc (be, bytes, &error);

  g_assert_no_error (error);
  /* Garbage first, so a missed byte shows. */
  memset (junk, 0xa5, bytes);
  g_assert_true (be->ops->buf_upload (be, slot, 0, junk, bytes, &error));
  return slot;
}

static void
test_layout (void)
{
  const UmDType types[UM_LAYER_N_MATS] = { UM_DTYPE_Q4_K, UM_DTYPE_Q4_K, UM_DTYPE_Q6_K, UM_DTYPE_Q4_K,
                                           UM_DTYPE_Q4_K, UM_DTYPE_Q4_K, UM_DTYPE_Q6_K };
  TestModel *tm = test_model_new (types, FALSE, 3, 256, 128, 1024, 1);
  size_t slot = 0;

  for (guint l = 0; l < 3; l++)
    {
      const UmLayerWeights *L = &tm->model.layers[l];
      UmLayerLayout lay;
      size_t end = 0;

      um_layer_layout (L, &lay);
      g_assert_true (um_layer_mat (L, 0) == &L->wq);
      g_assert_true (um_layer_mat (L, 4) == &L->w_gate);
      g_assert_true (um_layer_mat (L, 6) == &L->w_down);
      g_assert_true (um_layer_mat (L, 7) == &L->sh_gate);
      g_assert_true (um_layer_mat (L, 9) == &L->sh_down);
      g_assert_null (um_layer_mat (L, UM_LAYER_N_MATS));
      g_assert_null (um_layer_mat (L, -1));
      for (int i = 0; i < UM_LAYER_N_MATS; i++)
        {
          const UmWeight *w = um_layer_mat (L, i);
          g_assert_cmpuint (lay.offset[i] % UM_LAYER_ALIGN, ==, 0);
          g_assert_cmpuint (lay.offset[i], >=, end);
          g_assert_cmpuint (lay.bytes[i], ==, w->rows * w->row_bytes);
          end = lay.offset[i] + lay.bytes[i];
        }
      g_assert_cmpuint (lay.total, >=, end);
      g_assert_cmpuint (lay.total % UM_LAYER_ALIGN, ==, 0);
      g_assert_cmpuint (lay.total, <, end + UM_LAYER_ALIGN);
      slot = MAX (slot, lay.total);
    }
  g_assert_cmpuint (um_layer_slot_bytes (&tm->model), ==, slot);
  test_model_free (tm);
}

typedef struct {
  int    calls;
  double last;
} Progress;

static void
on_progress (double fraction, gpointer user_data)
{
  Progress *p = user_data;
  g_assert_cmpfloat (fraction, >, p->last);
  p->last = fraction;
  p->calls++;
}

/* What the memory plan predicts for the store @s of @tm is what it holds.
 * Raw: the same layout, exactly. zstd with ratios measured on every frame:
 * the ratios are per matrix and type, so each frame's predicted length may
 * round differently (1 byte) and pad differently to the next frame's
 * alignment (FRAME_ALIGN − 1 bytes); nothing else differs. A sample of a
 * few frames: each matrix and type sampled, within the bytes asked for
 * plus one frame each. */
static void
check_prediction (TestModel *tm, UmStoreCompression comp, UmLayerStore *s)
{
  g_autoptr(GError) error = NULL;
  UmStoreRatios ratios;
  guint64 have = um_layer_store_host_bytes (s), want, frames = 0, raw = 0;

  for (guint l = 0; l < tm->model.cfg.n_layers; l++)
    {
      UmLayerLayout lay;
      um_layer_layout (&tm->model.layers[l], &lay);
      for (int i = 0; i < UM_LAYER_N_MATS; i++)
        {
          frames += (lay.bytes[i] + UM_LAYER_STORE_FRAME_BYTES - 1) / UM_LAYER_STORE_FRAME_BYTES;
          raw += lay.bytes[i];
        }
    }
  if (comp == UM_STORE_RAW)
    {
      um_layer_store_estimate_ratios (&tm->model, &ratios);
      g_assert_cmpuint (um_layer_store_predict_bytes (&tm->model, comp, &ratios, NULL), ==, have);
      return;
    }
  g_assert_true (um_layer_store_measure_ratios (&tm->model, 1, G_MAXUINT64, &ratios, &error));
  g_assert_no_error (error);
  g_assert_true (ratios.measured);
  g_assert_true (ratios.complete);
  g_assert_cmpuint (ratios.sampled_bytes, ==, raw);
  want = um_layer_store_predict_bytes (&tm->model, comp, &ratios, NULL);
  g_test_message ("zstd store: %" G_GUINT64_FORMAT " B held, %" G_GUINT64_FORMAT " B predicted (%" G_GUINT64_FORMAT
                  " frames)", have, want, frames);
  g_assert_cmpuint (want, <=, have + frames * UM_LAYER_STORE_FRAME_ALIGN);
  g_assert_cmpuint (have, <=, want + frames * UM_LAYER_STORE_FRAME_ALIGN);

  /* A sample: at most a quarter of the bytes, at least a frame of each
   * of the seven matrices (types here are one per matrix). */
  g_assert_true (um_layer_store_measure_ratios (&tm->model, 1, raw / 4, &ratios, &error));
  g_assert_no_error (error);
  g_assert_false (ratios.complete);
  g_assert_cmpuint (ratios.sampled_bytes, <=, raw / 4 + UM_LAYER_N_MATS * UM_LAYER_STORE_FRAME_BYTES);
  g_assert_cmpuint (ratios.sampled_bytes, >=, UM_LAYER_N_MATS);
  g_test_message ("from a sample of %" G_GUINT64_FORMAT " of %" G_GUINT64_FORMAT " B: %" G_GUINT64_FORMAT
                  " B predicted", ratios.sampled_bytes, raw,
                  um_layer_store_predict_bytes (&tm->model, comp, &ratios, NULL));
}

static void
check_roundtrip (TestModel *tm, const char *what, UmStoreCompression comp, double max_ratio, double min_ratio)
{
  TestBackend *tb = test_backend_new ();
  UmBackend *be = &tb->be;
  g_autoptr(GError) error = NULL;
  UmLayerStore *s;
  UmLayerStoreStats st;
  Progress prog = { 0 };
  UmBuf *slot;
  double ratio;

  s = um_layer_store_new (be, &tm->model, comp, 1, on_progress, &prog, NULL, &error);
  g_assert_no_error (error);
  g_assert_nonnull (s);
  g_assert_cmpint (prog.calls, ==, 3);
  g_assert_cmpfloat (prog.last, ==, 1.0);   /* exact: n_layers / n_layers */
  g_assert_cmpuint (um_layer_store_n_layers (s), ==, 3);

  slot = new_slot (be, um_layer_slot_bytes (&tm->model));
  /* Twice round, out of order, so a slot is overwritten with other layers. */
  for (guint k = 0; k < 6; k++)
    {
      guint l = (k * 2) % 3;
      g_assert_true (um_layer_store_fetch (s, l, slot, &error));
      g_assert_no_error (error);
      check_slot (be, slot, &tm->model, l);
    }

  um_layer_store_get_stats (s, &st);
  g_assert_cmpuint (st.n_fetches, ==, 6);
  {
    guint64 raw = 0, by_type = 0, stored_by_type = 0;
    for (guint l = 0; l < 3; l++)
      {
        UmLayerLayout lay;
        um_layer_layout (&tm->model.layers[l], &lay);
        for (int i = 0; i < UM_LAYER_N_MATS; i++)
          raw += lay.bytes[i];
      }
    for (int t = 0; t < UM_DTYPE_N_TYPES; t++)
      {
        by_type += st.dtype_raw_bytes[t];
        stored_by_type += st.dtype_stored_bytes[t];
      }
    g_assert_cmpuint (st.raw_bytes, ==, raw);
    g_assert_cmpuint (by_type, ==, raw);
    g_assert_cmpuint (stored_by_type, ==, st.stored_bytes);
  }
  g_assert_cmpuint (um_layer_store_host_bytes (s), >=, st.stored_bytes);
  check_prediction (tm, comp, s);
  ratio = (double) st.stored_bytes / st.raw_bytes;
  g_test_message ("%s %s: %.1f MiB stored as %.1f MiB (%.1f %%), host %.1f MiB; fetch %.1f ms, decode %.1f ms",
                  what, comp == UM_STORE_RAW ? "raw" : "zstd-1", st.raw_bytes / 1048576.0,
                  st.stored_bytes / 1048576.0, 100 * ratio, um_layer_store_host_bytes (s) / 1048576.0,
                  1e3 * st.fetch_seconds, 1e3 * st.decode_seconds);
  if (comp == UM_STORE_RAW)
    {
      g_assert_cmpuint (st.stored_bytes, ==, st.raw_bytes);
      g_assert_cmpfloat (st.decode_seconds, ==, 0);   /* exact: never added to */
      g_assert_cmpuint (st.decoded_bytes, ==, 0);
    }
  g_assert_cmpfloat (ratio, <=, max_ratio);
  g_assert_cmpfloat (ratio, >=, min_ratio);

  be->ops->buf_free (be, slot);
  um_layer_store_free (s);
  test_backend_free (tb);
}

typedef struct {
  const char *name;
  UmDType     types[UM_LAYER_N_MATS];
  double      zstd_max;   /* bounds on the zstd store's size / raw */
  double      zstd_min;
  gboolean    sparse;
} Case;

#define ALL(t) { t, t, t, t, t, t, t }
static const Case cases[] = {
  /* Byte planes: the sign+exponent byte of random-normal weights shrinks to
   * well under half, the mantissa byte hardly. */
  { "F32", ALL (UM_DTYPE_F32), 0.95, 0.5 },
  { "F16", ALL (UM_DTYPE_F16), 0.95, 0.5 },
  { "BF16", ALL (UM_DTYPE_BF16), 0.85, 0.5 },
  /* Quantized random-normal values are close to random bytes: zstd saves
   * 2–4 %, not worth decoding, so the frames stay raw. */
  { "Q8_0", ALL (UM_DTYPE_Q8_0), 1.0, 0.9 },
  { "Q4_K", ALL (UM_DTYPE_Q4_K), 1.0, 0.9 },
  { "Q6_K", ALL (UM_DTYPE_Q6_K), 1.0, 0.85 },
  { "Q4_K_M", { UM_DTYPE_Q4_K, UM_DTYPE_Q4_K, UM_DTYPE_Q6_K, UM_DTYPE_Q4_K,
                UM_DTYPE_Q4_K, UM_DTYPE_Q4_K, UM_DTYPE_Q6_K }, 1.0, 0.85 },
  /* Compressed and raw frames in one layer. */
  { "mixed", { UM_DTYPE_BF16, UM_DTYPE_Q4_K, UM_DTYPE_Q8_0, UM_DTYPE_F16,
               UM_DTYPE_Q6_K, UM_DTYPE_BF16, UM_DTYPE_Q4_K }, 0.95, 0.6 },
  /* Mostly zeros: compressed as they are (no planes). */
  { "Q8_0-sparse", ALL (UM_DTYPE_Q8_0), 0.6, 0.05, TRUE },
  { "Q4_K-sparse", ALL (UM_DTYPE_Q4_K), 0.8, 0.05, TRUE },
  { "BF16-sparse", ALL (UM_DTYPE_BF16), 0.6, 0.05, TRUE },
};

static void
test_roundtrip (gconstpointer data)
{
  const Case *c = data;
  /* Layers of 2.6 MiB BF16 matrices: several frames, the last one short. */
  TestModel *tm = test_model_new (c->types, c->sparse, 3, 512, 256, 2560, g_str_hash (c->name));

  check_roundtrip (tm, c->name, UM_STORE_RAW, 1.0, 1.0);
  check_roundtrip (tm, c->name, UM_STORE_ZSTD, c->zstd_max, c->zstd_min);
  test_model_free (tm);
}

/* 2 slots over many layers: wait for l, request l + 1 into the other slot,
 * "compute" l (check its bytes). */
static void
check_prefetch_loop (UmStoreCompression comp)
{
  TestBackend *tb = test_backend_new ();
  UmBackend *be = &tb->be;
  const guint n = 9;
  TestModel *tm = test_model_new_1 (UM_DTYPE_BF16, n, 256, 128, 768, 7);
  g_autoptr(GError) error = NULL;
  UmLayerStore *s = um_layer_store_new (be, &tm->model, comp, 1, NULL, NULL, NULL, &error);
  UmPrefetcher *p;
  UmPrefetcherStats st;
  UmBuf *slots[2];
  const guint passes = 5;

  g_assert_no_error (error);
  p = um_prefetcher_new (s, &error);
  g_assert_no_error (error);
  for (int k = 0; k < 2; k++)
    {
      slots[k] = new_slot (be, um_layer_slot_bytes (&tm->model));
      g_assert_cmpint (um_prefetcher_holds (p, k), ==, -1);
    }
  um_prefetcher_set_slot (p, 0, slots[0]);

  for (guint step = 0; step < passes * n; step++)
    {
      guint l = step % n, next = (step + 1) % n;
      int k = step % 2;

      /* The first wait finds nothing requested and fetches itself. */
      g_assert_true (um_prefetcher_wait (p, k, l, &error));
      g_assert_no_error (error);
      g_assert_cmpint (um_prefetcher_holds (p, k), ==, l);
      um_prefetcher_request (p, 1 - k, slots[1 - k], next);
      check_slot (be, slots[k], &tm->model, l);
      /* Waiting again costs nothing and changes nothing. */
      g_assert_true (um_prefetcher_wait (p, k, l, &error));
      g_assert_cmpint (um_prefetcher_holds (p, k), ==, l);
    }

  /* The last request (layer 0 again) has run. */
  g_assert_true (um_prefetcher_wait (p, (passes * n) % 2, 0, &error));
  um_prefetcher_get_stats (p, &st);
  g_test_message ("%s: %" G_GUINT64_FORMAT " fetches on the thread, %" G_GUINT64_FORMAT " in wait, waited %.1f ms",
                  comp == UM_STORE_RAW ? "raw" : "zstd", st.n_fetches, st.n_sync_fetches, 1e3 * st.wait_seconds);
  g_assert_cmpuint (st.n_sync_fetches, ==, 1);
  g_assert_cmpuint (st.n_fetches, ==, passes * n);
  g_assert_cmpuint (st.n_failed, ==, 0);

  /* A request for what the slot already holds is skipped. */
  {
    int k = (passes * n) % 2;   /* holds layer (passes * n) % n == 0 */
    guint l = (passes * n) % n;
    g_assert_true (um_prefetcher_wait (p, k, l, &error));
    um_prefetcher_request (p, k, slots[k], l);
    g_assert_true (um_prefetcher_wait (p, k, l, &error));
    um_prefetcher_get_stats (p, &st);
    g_assert_cmpuint (st.n_skipped, ==, 1);
  }

  /* Several requests for one slot run in order: the last one stays. */
  um_prefetcher_request (p, 0, slots[0], 3);
  um_prefetcher_request (p, 0, slots[0], 5);
  um_prefetcher_request (p, 0, slots[0], 4);
  g_assert_true (um_prefetcher_wait (p, 0, 4, &error));
  check_slot (be, slots[0], &tm->model, 4);

  um_prefetcher_free (p);
  for (int k = 0; k < 2; k++)
    be->ops->buf_free (be, slots[k]);
  um_layer_store_free (s);
  test_model_free (tm);
  test_backend_free (tb);
}

static void
test_prefetch_loop (void)
{
  check_prefetch_loop (UM_STORE_RAW);
  check_prefetch_loop (UM_STORE_ZSTD);
}

static void
test_errors (void)
{
  TestBackend *tb = test_backend_new ();
  UmBackend *be = &tb->be;
  TestModel *tm = test_model_new_1 (UM_DTYPE_BF16, 3, 512, 256, 2560, 3);
  g_autoptr(GError) error = NULL;
  UmLayerStore *s;
  UmPrefetcher *p;
  UmBuf *slot, *small;
  guint8 *block;
  size_t bytes;

  /* Bad parameters. */
  g_assert_null (um_layer_store_new (be, &tm->model, UM_STORE_ZSTD, 1000, NULL, NULL, NULL, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  g_clear_error (&error);
  g_assert_null (um_layer_store_new (be, &tm->model, (UmStoreCompression) 7, 1, NULL, NULL, NULL, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  g_clear_error (&error);

  s = um_layer_store_new (be, &tm->model, UM_STORE_ZSTD, 1, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  slot = new_slot (be, um_layer_slot_bytes (&tm->model));

  /* A layer out of range. */
  g_assert_false (um_layer_store_fetch (s, 3, slot, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  g_clear_error (&error);

  /* A slot too small, and an upload that fails. */
  small = new_slot (be, 4096);
  g_assert_false (um_layer_store_fetch (s, 0, small, &error));
  g_assert_nonnull (error);
  g_clear_error (&error);
  tb->fail_uploads = TRUE;
  g_assert_false (um_layer_store_fetch (s, 0, slot, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_FAILED);
  g_clear_error (&error);
  tb->fail_uploads = FALSE;

  /* Damage layer 1's block (host blocks: the layers in order, then the
   * decoding buffer) over more than the padding between frames. */
  g_assert_cmpuint (tb->blocks->len, ==, 4);
  block = g_ptr_array_index (tb->blocks, 1);
  bytes = g_array_index (tb->block_bytes, size_t, 1);
  for (size_t i = bytes / 2; i < bytes / 2 + 256; i++)
    block[i] ^= 0x5a;
  g_assert_false (um_layer_store_fetch (s, 1, slot, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
  g_test_message ("corrupt frame: %s", error->message);
  g_clear_error (&error);
  /* Its neighbours are fine. */
  g_assert_true (um_layer_store_fetch (s, 2, slot, &error));
  check_slot (be, slot, &tm->model, 2);

  /* The same through the prefetcher: the error comes out of wait. */
  p = um_prefetcher_new (s, &error);
  g_assert_no_error (error);
  um_prefetcher_request (p, 0, slot, 1);
  g_assert_false (um_prefetcher_wait (p, 0, 1, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
  g_clear_error (&error);
  g_assert_cmpint (um_prefetcher_holds (p, 0), ==, -1);
  /* Waiting again fetches again, here in the caller, and fails again. */
  g_assert_false (um_prefetcher_wait (p, 0, 1, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
  g_clear_error (&error);
  um_prefetcher_request (p, 0, slot, 99);
  g_assert_false (um_prefetcher_wait (p, 0, 99, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  g_clear_error (&error);
  /* A slot with no buffer, a slot index that cannot be. */
  g_assert_false (um_prefetcher_wait (p, 5, 0, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  g_clear_error (&error);
  g_assert_false (um_prefetcher_wait (p, -1, 0, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  g_clear_error (&error);
  g_assert_cmpint (um_prefetcher_holds (p, 1000), ==, -1);
  /* And it still works. */
  um_prefetcher_request (p, 0, slot, 0);
  g_assert_true (um_prefetcher_wait (p, 0, 0, &error));
  g_assert_no_error (error);
  check_slot (be, slot, &tm->model, 0);
  um_prefetcher_free (p);

  be->ops->buf_free (be, small);
  um_layer_store_free (s);
  test_model_free (tm);

  /* A model with no layers has an empty store. */
  tm = test_model_new_1 (UM_DTYPE_BF16, 0, 256, 128, 512, 1);
  g_assert_cmpuint (um_layer_slot_bytes (&tm->model), ==, 0);
  s = um_layer_store_new (be, &tm->model, UM_STORE_ZSTD, 1, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_false (um_layer_store_fetch (s, 0, slot, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  g_clear_error (&error);
  um_layer_store_free (s);
  test_model_free (tm);

  be->ops->buf_free (be, slot);
  test_backend_free (tb);
}

static void
test_cancel (void)
{
  TestBackend *tb = test_backend_new ();
  TestModel *tm = test_model_new_1 (UM_DTYPE_Q8_0, 3, 256, 128, 768, 5);
  g_autoptr(GCancellable) cancellable = g_cancellable_new ();
  g_autoptr(GError) error = NULL;

  g_cancellable_cancel (cancellable);
  for (int comp = UM_STORE_RAW; comp <= UM_STORE_ZSTD; comp++)
    {
      g_assert_null (um_layer_store_new (&tb->be, &tm->model, comp, 3, NULL, NULL, cancellable, &error));
      g_assert_error (error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
      g_clear_error (&error);
    }
  test_model_free (tm);
  test_backend_free (tb);   /* checks that nothing was left allocated */
}

/* Freeing with a queue of slow fetches drops them: it waits for one. */
static void
test_free_pending (void)
{
  TestBackend *tb = test_backend_new ();
  UmBackend *be = &tb->be;
  TestModel *tm = test_model_new_1 (UM_DTYPE_Q4_K, 4, 256, 256, 512, 9);
  g_autoptr(GError) error = NULL;
  UmLayerStore *s = um_layer_store_new (be, &tm->model, UM_STORE_RAW, 1, NULL, NULL, NULL, &error);
  UmPrefetcher *p;
  UmBuf *slots[2];
  gint64 t0;
  double seconds;

  g_assert_no_error (error);
  for (int k = 0; k < 2; k++)
    slots[k] = new_slot (be, um_layer_slot_bytes (&tm->model));
  tb->upload_delay_us = 20000;     /* a raw fetch is one upload: 20 ms */
  p = um_prefetcher_new (s, &error);
  g_assert_no_error (error);
  for (guint i = 0; i < 200; i++)  /* 4 s of work */
    um_prefetcher_request (p, i % 2, slots[i % 2], i % 4);
  g_usleep (30000);
  t0 = g_get_monotonic_time ();
  um_prefetcher_free (p);
  seconds = (g_get_monotonic_time () - t0) / 1e6;
  g_test_message ("freed with requests pending in %.1f ms", 1e3 * seconds);
  g_assert_cmpfloat (seconds, <, 1.0);

  /* An idle prefetcher goes as promptly. */
  p = um_prefetcher_new (s, &error);
  g_assert_no_error (error);
  um_prefetcher_free (p);

  for (int k = 0; k < 2; k++)
    be->ops->buf_free (be, slots[k]);
  um_layer_store_free (s);
  test_model_free (tm);
  test_backend_free (tb);
}

/* The file-backed pages of this process, in KiB. */
static guint64
rss_file_kib (void)
{
  g_autofree char *text = NULL;
  const char *line;

  g_assert_true (g_file_get_contents ("/proc/self/status", &text, NULL, NULL));
  line = strstr (text, "RssFile:");
  g_assert_nonnull (line);
  return g_ascii_strtoull (line + strlen ("RssFile:"), NULL, 10);
}

/* A real model file: the pages the store copied leave our RSS, and the
 * weights still read back right (from the file) afterwards. */
static void
test_file_model (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autoptr(GError) error = NULL;
  g_autoptr(UmModel) model = NULL;
  UmTestModelSpec spec;
  TestBackend *tb = test_backend_new ();
  UmBackend *be = &tb->be;
  UmLayerStore *s;
  UmLayerStoreStats st;
  UmBuf *slot;
  guint64 before, after;

  um_test_model_spec_init (&spec);
  spec.dtype = UM_DTYPE_BF16;
  spec.n_layers = 4;
  spec.d_model = 512;
  spec.n_heads = 8;
  spec.n_kv_heads = 8;
  spec.mlp_hidden = 2048;
  g_assert_true (um_test_write_model (dir, &spec, &error));
  g_assert_no_error (error);
  model = um_model_load (dir, NULL, &error);
  g_assert_no_error (error);

  before = rss_file_kib ();
  s = um_layer_store_new (be, model, UM_STORE_ZSTD, 1, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  after = rss_file_kib ();
  um_layer_store_get_stats (s, &st);
  g_test_message ("file pages in RSS: %" G_GUINT64_FORMAT " KiB before, %" G_GUINT64_FORMAT
                  " KiB after storing %.1f MiB of layers",
                  before, after, st.raw_bytes / 1048576.0);
  /* Without the release it would grow by the whole 32 MiB read. */
  g_assert_cmpuint (after, <, before + st.raw_bytes / 1024 / 8);

  slot = new_slot (be, um_layer_slot_bytes (model));
  for (guint l = 0; l < spec.n_layers; l++)
    {
      g_assert_true (um_layer_store_fetch (s, l, slot, &error));
      g_assert_no_error (error);
      check_slot (be, slot, model, l);
    }
  be->ops->buf_free (be, slot);
  um_layer_store_free (s);
  test_backend_free (tb);
  um_test_rmtree (dir);
}

/* -m perf: ratio and single-core decode speed at zstd levels 1 and 3. */
static void
test_perf (void)
{
  const UmDType types[] = { UM_DTYPE_BF16, UM_DTYPE_Q8_0, UM_DTYPE_Q4_K, UM_DTYPE_Q6_K };

  if (!g_test_perf ())
    {
      g_test_skip ("run with -m perf");
      return;
    }
  for (guint t = 0; t < G_N_ELEMENTS (types); t++)
    {
      TestModel *tm = test_model_new_1 (types[t], 2, 1024, 1024, 4096, 11);
      for (int level = 1; level <= 3; level += 2)
        {
          TestBackend *tb = test_backend_new ();
          UmBackend *be = &tb->be;
          g_autoptr(GError) error = NULL;
          gint64 t0 = g_get_monotonic_time ();
          UmLayerStore *s = um_layer_store_new (be, &tm->model, UM_STORE_ZSTD, level, NULL, NULL, NULL, &error);
          double build = (g_get_monotonic_time () - t0) / 1e6;
          UmLayerStoreStats st;
          UmBuf *slot;

          g_assert_no_error (error);
          slot = new_slot (be, um_layer_slot_bytes (&tm->model));
          for (int rep = 0; rep < 3; rep++)
            for (guint l = 0; l < 2; l++)
              g_assert_true (um_layer_store_fetch (s, l, slot, &error));
          um_layer_store_get_stats (s, &st);
          g_test_message ("%-5s zstd-%d: %6.1f MiB -> %6.1f MiB (%5.1f %%); compress %5.0f MB/s (%d threads); "
                          "fetch %5.0f MB/s, of which decode %5.0f MB/s (1 thread)",
                          um_dtype_name (types[t]), level, st.raw_bytes / 1048576.0, st.stored_bytes / 1048576.0,
                          100.0 * st.stored_bytes / st.raw_bytes, st.raw_bytes / build / 1e6,
                          g_get_num_processors (), 3 * st.raw_bytes / st.fetch_seconds / 1e6,
                          st.decode_seconds > 0 ? st.decoded_bytes / st.decode_seconds / 1e6 : 0.0);
          be->ops->buf_free (be, slot);
          um_layer_store_free (s);
          test_backend_free (tb);
        }
      test_model_free (tm);
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/layer-store/layout", test_layout);
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autofree char *path = g_strdup_printf ("/layer-store/roundtrip/%s", cases[i].name);
      g_test_add_data_func (path, &cases[i], test_roundtrip);
    }
  g_test_add_func ("/layer-store/prefetch-loop", test_prefetch_loop);
  g_test_add_func ("/layer-store/errors", test_errors);
  g_test_add_func ("/layer-store/cancel", test_cancel);
  g_test_add_func ("/layer-store/free-pending", test_free_pending);
  g_test_add_func ("/layer-store/file-model", test_file_model);
  g_test_add_func ("/layer-store/perf", test_perf);
  return g_test_run ();
}

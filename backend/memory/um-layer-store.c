/* um-layer-store.c — the host weight store that feeds layer-streaming slots.
 *
 * RAW: each layer is one host block laid out exactly like a slot, so a fetch
 * is a single copy_upload.
 *
 * ZSTD: each matrix is cut into independent frames of FRAME_BYTES (so they
 * can be compressed in parallel, decoded in parallel later, and decoding
 * needs only a small staging buffer). Float types are split into byte planes
 * first (byte 0 of every element, then byte 1, ...): the high byte of a
 * BF16/F16 weight (sign and exponent) is highly predictable, the low
 * (mantissa) bytes hardly at all, and interleaved they hide each other from
 * the entropy coder. Quantized blocks are compressed as they are: Q4 nibbles
 * are close to random, and only their scales and Q8_0's int8s shrink. A
 * frame that does not shrink by at least 1/MIN_GAIN is kept raw, so data
 * that hardly compresses costs nothing to decode. Frames carry zstd's
 * checksum, so a damaged store is an error, not silently wrong weights.
 */
#include "um-layer-store.h"

#include <omp.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zstd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "um-error.h"

/* Raw bytes per frame: a multiple of every element width (planes). */
#define FRAME_BYTES UM_LAYER_STORE_FRAME_BYTES
/* Keep a frame raw unless compression saves at least 1/MIN_GAIN of it:
 * decoding runs at 1.5–3 GB/s on one core, a copy (or DMA) at 10–25, so a
 * few per cent less memory is not worth it. Random-normal Q4_K (97.8 %)
 * and Q8_0 (96.4 %) stay raw by this rule. */
#define MIN_GAIN 16
/* Alignment of frames inside a layer block (raw frames are copied from there). */
#define FRAME_ALIGN UM_LAYER_STORE_FRAME_ALIGN

#define ALIGN_UP(x, a) (((x) + (a) - 1) / (a) * (a))

typedef struct {
  size_t  src;          /* offset in the layer block */
  size_t  dst;          /* offset in the slot */
  guint32 raw_len;
  guint32 stored_len;
  guint8  zstd;         /* FALSE: raw bytes, uploaded straight from the block */
  guint8  planes;       /* element width split into byte planes (1: none) */
  guint8  dtype;
  guint8  mat;          /* index in layout order */
} Frame;

typedef struct {
  guint8 *block;        /* host_alloc */
  size_t  block_bytes;
  Frame  *frames;       /* ZSTD only */
  guint   n_frames;
} StoredLayer;

struct _UmLayerStore {
  UmBackend          *be;
  UmStoreCompression  comp;
  guint               n_layers;
  StoredLayer        *layers;

  GMutex              fetch_lock;   /* one fetch at a time: dctx and staging */
  ZSTD_DCtx          *dctx;
  /* host_alloc: decoded planes (planes_bytes), then the frame; as large as
   * the largest frame that is decoded (and split), none when every frame
   * stays raw, so the store holds what um_layer_store_predict_bytes () says. */
  guint8             *staging;
  size_t              staging_bytes;
  size_t              planes_bytes;

  GMutex              stats_lock;
  UmLayerStoreStats   stats;
};

void
um_layer_layout (const UmLayerWeights *L, UmLayerLayout *out)
{
  size_t off = 0;

  for (int i = 0; i < UM_LAYER_N_MATS; i++)
    {
      const UmWeight *w = um_layer_mat (L, i);
      out->offset[i] = off;
      out->bytes[i] = (size_t) (w->rows * w->row_bytes);
      off = ALIGN_UP (off + out->bytes[i], UM_LAYER_ALIGN);
    }
  out->total = off;
}

size_t
um_layer_slot_bytes (const UmModel *model)
{
  size_t best = 0;

  for (guint l = 0; l < model->cfg.n_layers; l++)
    {
      UmLayerLayout lay;
      um_layer_layout (&model->layers[l], &lay);
      best = MAX (best, lay.total);
    }
  return best;
}

const UmWeight *
um_layer_mat (const UmLayerWeights *L, int i)
{
  switch (i)
    {
    case 0: return &L->wq;
    case 1: return &L->wk;
    case 2: return &L->wv;
    case 3: return &L->wo;
    case 4: return &L->w_gate;
    case 5: return &L->w_up;
    case 6: return &L->w_down;
    case 7: return &L->sh_gate;
    case 8: return &L->sh_up;
    case 9: return &L->sh_down;
    default: return NULL;
    }
}

/* Element width to split into byte planes: float types only. */
static guint
plane_width (UmDType t)
{
  switch (t)
    {
    case UM_DTYPE_F16:
    case UM_DTYPE_BF16:
      return 2;
    case UM_DTYPE_F32:
      return 4;   /* not asked for, but the same argument holds */
    default:
      return 1;
    }
}

/* Byte p of every w-byte element to plane p. The 2-byte case is the hot
 * one; SSE2 (every x86-64) because compilers do not vectorize it at -O2. */
static void
split_planes (const guint8 *src, guint8 *dst, size_t n, guint w)
{
  size_t m = n / w, j = 0;

  if (w == 2)
    {
      guint8 *lo = dst, *hi = dst + m;
#ifdef __SSE2__
      const __m128i mask = _mm_set1_epi16 (0xff);
      for (; j + 16 <= m; j += 16)
        {
          __m128i a = _mm_loadu_si128 ((const __m128i *) (src + 2 * j));
          __m128i b = _mm_loadu_si128 ((const __m128i *) (src + 2 * j + 16));
          _mm_storeu_si128 ((__m128i *) (lo + j),
                            _mm_packus_epi16 (_mm_and_si128 (a, mask), _mm_and_si128 (b, mask)));
          _mm_storeu_si128 ((__m128i *) (hi + j), _mm_packus_epi16 (_mm_srli_epi16 (a, 8), _mm_srli_epi16 (b, 8)));
        }
#endif
      for (; j < m; j++)
        {
          lo[j] = src[2 * j];
          hi[j] = src[2 * j + 1];
        }
      return;
    }
  for (guint p = 0; p < w; p++)
    for (j = 0; j < m; j++)
      dst[p * m + j] = src[j * w + p];
}

static void
join_planes (const guint8 *src, guint8 *dst, size_t n, guint w)
{
  size_t m = n / w, j = 0;

  if (w == 2)
    {
      const guint8 *lo = src, *hi = src + m;
#ifdef __SSE2__
      for (; j + 16 <= m; j += 16)
        {
          __m128i a = _mm_loadu_si128 ((const __m128i *) (lo + j));
          __m128i b = _mm_loadu_si128 ((const __m128i *) (hi + j));
          _mm_storeu_si128 ((__m128i *) (dst + 2 * j), _mm_unpacklo_epi8 (a, b));
          _mm_storeu_si128 ((__m128i *) (dst + 2 * j + 16), _mm_unpackhi_epi8 (a, b));
        }
#endif
      for (; j < m; j++)
        {
          dst[2 * j] = lo[j];
          dst[2 * j + 1] = hi[j];
        }
      return;
    }
  for (guint p = 0; p < w; p++)
    for (j = 0; j < m; j++)
      dst[j * w + p] = src[p * m + j];
}

/* Read-only file mappings of this process, from /proc/self/maps: the only
 * memory where MADV_DONTNEED is harmless (the pages come back from the
 * file). On anonymous memory it would zero the weights, and a model's
 * weights may live there (converted, or a file read from bytes). */
typedef struct {
  guintptr start, end;
} MapRange;

static GArray *
readonly_file_maps (void)
{
  GArray *ranges = g_array_new (FALSE, FALSE, sizeof (MapRange));
  g_autofree char *text = NULL;
  g_auto(GStrv) lines = NULL;

  if (!g_file_get_contents ("/proc/self/maps", &text, NULL, NULL))
    return ranges;
  lines = g_strsplit (text, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++)
    {
      unsigned long start, end, inode;
      char perms[8];
      if (sscanf (lines[i], "%lx-%lx %7s %*s %*s %lu", &start, &end, perms, &inode) == 4
          && perms[0] == 'r' && perms[1] == '-' && inode != 0)
        {
          MapRange r = { start, end };
          g_array_append_val (ranges, r);
        }
    }
  return ranges;
}

/* Drops the whole pages of [data, data + bytes) from our RSS, if they lie in
 * a read-only file mapping. */
static void
release_source (const GArray *maps, const void *data, size_t bytes)
{
  size_t page = (size_t) sysconf (_SC_PAGESIZE);
  guintptr a, b;

  a = ALIGN_UP ((guintptr) data, page);
  b = ((guintptr) data + bytes) / page * page;
  if (data == NULL || b <= a)
    return;
  for (guint i = 0; i < maps->len; i++)
    {
      const MapRange *r = &g_array_index (maps, MapRange, i);
      if (a >= r->start && b <= r->end)
        {
          /* Only a hint: if it fails the pages merely stay. */
          (void) madvise ((void *) a, b - a, MADV_DONTNEED);
          return;
        }
    }
}

static void
count_frame (UmLayerStore *s, UmDType t, guint64 raw, guint64 stored)
{
  s->stats.raw_bytes += raw;
  s->stats.stored_bytes += stored;
  if ((guint) t < UM_DTYPE_N_TYPES)
    {
      s->stats.dtype_raw_bytes[t] += raw;
      s->stats.dtype_stored_bytes[t] += stored;
    }
}

static gboolean
store_layer_raw (UmLayerStore *s, const UmLayerWeights *L, StoredLayer *out, GError **error)
{
  UmLayerLayout lay;

  um_layer_layout (L, &lay);
  out->block = s->be->ops->host_alloc (s->be, lay.total, error);
  if (out->block == NULL)
    return FALSE;
  out->block_bytes = lay.total;
  for (int i = 0; i < UM_LAYER_N_MATS; i++)
    {
      const UmWeight *w = um_layer_mat (L, i);
      size_t end = lay.offset[i] + lay.bytes[i];
      size_t next = i + 1 < UM_LAYER_N_MATS ? lay.offset[i + 1] : lay.total;

      if (lay.bytes[i] > 0)
        memcpy (out->block + lay.offset[i], w->data, lay.bytes[i]);
      /* Padding zeroed: the whole block is uploaded in one copy. */
      memset (out->block + end, 0, next - end);
      count_frame (s, w->dtype, lay.bytes[i], lay.bytes[i]);
    }
  return TRUE;
}

/* The model's bytes of frame @f. */
static const guint8 *
frame_source (const UmLayerWeights *L, const UmLayerLayout *lay, const Frame *f)
{
  return (const guint8 *) um_layer_mat (L, f->mat)->data + (f->dst - lay->offset[f->mat]);
}

/* The frames of a layer in order: each matrix cut into FRAME_BYTES
 * pieces, float types split into byte planes. @out NULL: only counts. */
static guint
layer_frames (const UmLayerWeights *L, const UmLayerLayout *lay, Frame *out)
{
  guint n = 0;

  for (int i = 0; i < UM_LAYER_N_MATS; i++)
    {
      const UmWeight *w = um_layer_mat (L, i);
      for (size_t a = 0; a < lay->bytes[i]; a += FRAME_BYTES, n++)
        if (out != NULL)
          {
            Frame *f = &out[n];
            memset (f, 0, sizeof *f);
            f->dst = lay->offset[i] + a;
            f->raw_len = (guint32) MIN (FRAME_BYTES, lay->bytes[i] - a);
            f->planes = (guint8) plane_width (w->dtype);
            f->dtype = (guint8) w->dtype;
            f->mat = (guint8) i;
            if (f->raw_len % f->planes != 0)
              f->planes = 1;
          }
    }
  return n;
}

/* The frames of a layer, newly allocated (at least one slot, so a layer
 * without frames still gets a pointer); *@n gets their count. */
static Frame *
layer_frames_new (const UmLayerWeights *L, const UmLayerLayout *lay, guint *n)
{
  Frame *frames;

  *n = layer_frames (L, lay, NULL);
  frames = g_new (Frame, MAX (*n, 1));
  layer_frames (L, lay, frames);
  return frames;
}

/* Per-thread compression state. */
typedef struct {
  ZSTD_CCtx *cctx;
  guint8    *planes;
  guint8    *dst;
  size_t     dst_bytes;
} Compressor;

/* The largest frame of @model, and the largest one split into planes (0:
 * none): what a compressor's buffers must hold. */
static void
largest_frames (const UmModel *model, size_t *frame, size_t *planes)
{
  *frame = *planes = 0;
  for (guint l = 0; l < model->cfg.n_layers; l++)
    {
      const UmLayerWeights *L = &model->layers[l];
      UmLayerLayout lay;
      g_autofree Frame *frames = NULL;
      guint n;

      um_layer_layout (L, &lay);
      frames = layer_frames_new (L, &lay, &n);
      for (guint k = 0; k < n; k++)
        {
          *frame = MAX (*frame, frames[k].raw_len);
          if (frames[k].planes > 1)
            *planes = MAX (*planes, frames[k].raw_len);
        }
    }
}

/* Buffers as large as @model's frames need, no larger: allocated is what
 * is used (and what the plan counts, see um_layer_store_build_bytes). */
static gboolean
compressor_init (Compressor *c, int level, const UmModel *model)
{
  size_t frame, planes;

  largest_frames (model, &frame, &planes);
  c->cctx = ZSTD_createCCtx ();
  c->planes = planes > 0 ? g_try_malloc (planes) : NULL;
  c->dst_bytes = ZSTD_compressBound (MAX (frame, 1));
  c->dst = g_try_malloc (c->dst_bytes);
  return c->cctx != NULL && (planes == 0 || c->planes != NULL) && c->dst != NULL
         && !ZSTD_isError (ZSTD_CCtx_setParameter (c->cctx, ZSTD_c_compressionLevel, level))
         && !ZSTD_isError (ZSTD_CCtx_setParameter (c->cctx, ZSTD_c_checksumFlag, 1));
}

static void
compressor_clear (Compressor *c)
{
  ZSTD_freeCCtx (c->cctx);
  g_free (c->planes);
  g_free (c->dst);
}

/* Compresses frame @f, whose raw bytes are @src, into c->dst: zstd's
 * result (a length or an error code); *@keep says whether the store keeps
 * it compressed (it saves at least 1/MIN_GAIN). The store and the
 * measurement of its ratios both decide here. */
static size_t
compress_frame (Compressor *c, const Frame *f, const guint8 *src, gboolean *keep)
{
  size_t r;

  if (f->planes > 1)
    {
      split_planes (src, c->planes, f->raw_len, f->planes);
      src = c->planes;
    }
  r = ZSTD_compress2 (c->cctx, c->dst, c->dst_bytes, src, f->raw_len);
  *keep = !ZSTD_isError (r) && r < f->raw_len - f->raw_len / MIN_GAIN;
  return r;
}

/* A kept frame's bytes until its layer's block is laid out: mapped
 * anonymous memory, not malloc's. The compressing threads would otherwise
 * allocate from their own malloc arenas, whose free top glibc keeps after
 * the store is built; a mapping goes back whole when unmapped. */
static guint8 *
packed_new (const guint8 *bytes, size_t n)
{
  void *p = mmap (NULL, MAX (n, 1), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return NULL;
  memcpy (p, bytes, n);
  return p;
}

static void
packed_free (guint8 *p, size_t n)
{
  if (p != NULL)
    munmap (p, MAX (n, 1));
}

static gboolean
store_layer_zstd (UmLayerStore *s, const UmLayerWeights *L, Compressor *comps, int n_threads,
                  StoredLayer *out, GError **error)
{
  UmLayerLayout lay;
  g_autofree Frame *frames = NULL;
  g_autofree size_t *results = NULL;
  g_autofree guint8 **packed = NULL;
  g_autofree gboolean *kept = NULL;
  size_t off = 0;
  gboolean ok = TRUE;
  guint un;
  int n;

  um_layer_layout (L, &lay);
  frames = layer_frames_new (L, &lay, &un);
  /* OpenMP's loop counts in int. */
  n = (int) un;
  results = g_new0 (size_t, MAX (n, 1));
  kept = g_new0 (gboolean, MAX (n, 1));
  packed = g_new0 (guint8 *, MAX (n, 1));
#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads)
  for (int k = 0; k < n; k++)
    {
      const Frame *f = &frames[k];
      Compressor *c = &comps[omp_get_thread_num ()];

      results[k] = compress_frame (c, f, frame_source (L, &lay, f), &kept[k]);
      if (kept[k] && (packed[k] = packed_new (c->dst, results[k])) == NULL)
        kept[k] = FALSE;   /* no memory for it: stored raw */
    }

  /* Lay the block out: each frame FRAME_ALIGN-aligned. */
  for (int k = 0; k < n; k++)
    {
      Frame *f = &frames[k];
      if (ZSTD_isError (results[k]))
        {
          if (ok)
            g_set_error (error, UM_ERROR, UM_ERROR_FAILED, "zstd compression failed: %s",
                         ZSTD_getErrorName (results[k]));
          ok = FALSE;
        }
      f->zstd = kept[k];
      f->stored_len = f->zstd ? (guint32) results[k] : f->raw_len;
      off = ALIGN_UP (off, FRAME_ALIGN);
      f->src = off;
      off += f->stored_len;
    }
  if (ok)
    {
      out->block = s->be->ops->host_alloc (s->be, MAX (off, 1), error);
      ok = out->block != NULL;
    }
  if (ok)
    {
      out->block_bytes = MAX (off, 1);
      for (int k = 0; k < n; k++)
        {
          Frame *f = &frames[k];
          memcpy (out->block + f->src, f->zstd ? packed[k] : frame_source (L, &lay, f), f->stored_len);
          count_frame (s, f->dtype, f->raw_len, f->stored_len);
        }
      out->n_frames = n;
    }
  for (int k = 0; k < n; k++)
    if (kept[k])
      packed_free (packed[k], results[k]);
  if (ok)
    out->frames = g_steal_pointer (&frames);
  return ok;
}

/* zstd sizes a compressor's state for the frame it compresses, and grows
 * it for a larger one: compress the model's largest frame once with each
 * compressor here, so that the state is this thread's memory (see
 * store_layer_zstd), then let go of the file's pages it read. */
static gboolean
warm_up (Compressor *comps, int n_threads, const UmModel *model, const GArray *maps)
{
  const UmLayerWeights *big_layer = NULL;
  UmLayerLayout lay;
  Frame big = { 0 };

  for (guint l = 0; l < model->cfg.n_layers; l++)
    {
      const UmLayerWeights *L = &model->layers[l];
      g_autofree Frame *frames = NULL;
      guint n;

      um_layer_layout (L, &lay);
      frames = layer_frames_new (L, &lay, &n);
      for (guint k = 0; k < n; k++)
        if (frames[k].raw_len > big.raw_len)
          {
            big = frames[k];
            big_layer = L;
          }
    }
  if (big_layer == NULL)
    return TRUE;
  um_layer_layout (big_layer, &lay);
  for (int t = 0; t < n_threads; t++)
    {
      gboolean keep;
      if (ZSTD_isError (compress_frame (&comps[t], &big, frame_source (big_layer, &lay, &big), &keep)))
        return FALSE;
    }
  release_source (maps, frame_source (big_layer, &lay, &big), big.raw_len);
  return TRUE;
}

/* The decoding buffer: the largest decoded frame, and before it the
 * largest one split into planes. */
static void
staging_sizes (const Frame *frames, guint n, size_t *planes, size_t *frame)
{
  for (guint k = 0; k < n; k++)
    if (frames[k].zstd)
      {
        *frame = MAX (*frame, frames[k].raw_len);
        if (frames[k].planes > 1)
          *planes = MAX (*planes, frames[k].raw_len);
      }
}

UmLayerStore *
um_layer_store_new (UmBackend            *be,
                    const UmModel        *model,
                    UmStoreCompression    comp,
                    int                   zstd_level,
                    UmLayerStoreProgress  progress,
                    gpointer              user_data,
                    GCancellable         *cancellable,
                    GError              **error)
{
  g_autoptr(UmLayerStore) s = NULL;
  g_autoptr(GArray) maps = NULL;
  Compressor *comps = NULL;
  int n_threads = 1;
  gboolean ok = TRUE;

  if (comp != UM_STORE_RAW && comp != UM_STORE_ZSTD)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "unknown layer store compression %d", comp);
      return NULL;
    }
  if (comp == UM_STORE_ZSTD && (zstd_level < ZSTD_minCLevel () || zstd_level > ZSTD_maxCLevel ()))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "zstd level %d is outside %d…%d",
                   zstd_level, ZSTD_minCLevel (), ZSTD_maxCLevel ());
      return NULL;
    }

  s = g_new0 (UmLayerStore, 1);
  s->be = be;
  s->comp = comp;
  s->n_layers = model->cfg.n_layers;
  s->layers = g_new0 (StoredLayer, MAX (s->n_layers, 1));
  g_mutex_init (&s->fetch_lock);
  g_mutex_init (&s->stats_lock);

  if (comp == UM_STORE_ZSTD)
    {
      s->dctx = ZSTD_createDCtx ();
      if (s->dctx == NULL)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY, "no memory for a zstd decoder");
          return NULL;
        }
      n_threads = MAX (omp_get_max_threads (), 1);
      comps = g_new0 (Compressor, n_threads);
      for (int t = 0; t < n_threads && ok; t++)
        ok = compressor_init (&comps[t], zstd_level, model);
      maps = readonly_file_maps ();
      if (ok)
        ok = warm_up (comps, n_threads, model, maps);
      if (!ok)
        g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY, "no memory for zstd compressors");
    }

  if (maps == NULL)
    maps = readonly_file_maps ();
  for (guint l = 0; l < s->n_layers && ok; l++)
    {
      const UmLayerWeights *L = &model->layers[l];

      if (g_cancellable_set_error_if_cancelled (cancellable, error))
        {
          ok = FALSE;
          break;
        }
      if (comp == UM_STORE_RAW)
        ok = store_layer_raw (s, L, &s->layers[l], error);
      else
        ok = store_layer_zstd (s, L, comps, n_threads, &s->layers[l], error);
      if (!ok)
        {
          g_prefix_error (error, "layer %u: ", l);
          break;
        }
      for (int i = 0; i < UM_LAYER_N_MATS; i++)
        {
          const UmWeight *w = um_layer_mat (L, i);
          release_source (maps, w->data, (size_t) (w->rows * w->row_bytes));
        }
      if (progress != NULL)
        progress ((double) (l + 1) / s->n_layers, user_data);
    }

  for (int t = 0; comps != NULL && t < n_threads; t++)
    compressor_clear (&comps[t]);
  g_free (comps);
  if (ok && comp == UM_STORE_ZSTD)
    {
      size_t planes = 0, frame = 0;
      for (guint l = 0; l < s->n_layers; l++)
        staging_sizes (s->layers[l].frames, s->layers[l].n_frames, &planes, &frame);
      if (planes + frame > 0)
        {
          s->staging = be->ops->host_alloc (be, planes + frame, error);
          ok = s->staging != NULL;
          s->staging_bytes = ok ? planes + frame : 0;
          s->planes_bytes = planes;
        }
    }
  if (!ok)
    return NULL;
  return g_steal_pointer (&s);
}

static gboolean
fetch_zstd (UmLayerStore *s, guint layer, const StoredLayer *sl, UmBuf *slot, double *decode_s,
            guint64 *decoded, GError **error)
{
  UmBackend *be = s->be;
  guint8 *planes = s->staging, *frame = s->staging + s->planes_bytes;

  for (guint k = 0; k < sl->n_frames; k++)
    {
      const Frame *f = &sl->frames[k];
      const guint8 *src = sl->block + f->src;

      if (f->zstd)
        {
          gint64 t0 = g_get_monotonic_time ();
          guint8 *into = f->planes > 1 ? planes : frame;
          size_t r = ZSTD_decompressDCtx (s->dctx, into, f->raw_len, src, f->stored_len);
          if (ZSTD_isError (r) || r != f->raw_len)
            {
              g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                           "layer %u: stored frame %u is corrupt (%s)", layer, k,
                           ZSTD_isError (r) ? ZSTD_getErrorName (r) : "wrong length");
              return FALSE;
            }
          if (f->planes > 1)
            join_planes (planes, frame, f->raw_len, f->planes);
          *decode_s += (g_get_monotonic_time () - t0) / 1e6;
          *decoded += f->raw_len;
          src = frame;
        }
      if (!be->ops->copy_upload (be, slot, f->dst, src, f->raw_len, error))
        {
          g_prefix_error (error, "layer %u: ", layer);
          return FALSE;
        }
    }
  return TRUE;
}

gboolean
um_layer_store_fetch (UmLayerStore *s, guint layer, UmBuf *slot, GError **error)
{
  const StoredLayer *sl;
  gint64 t0;
  double decode_s = 0;
  guint64 decoded = 0;
  gboolean ok;

  if (layer >= s->n_layers)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "layer %u is outside the model (%u layers)",
                   layer, s->n_layers);
      return FALSE;
    }
  sl = &s->layers[layer];

  g_mutex_lock (&s->fetch_lock);
  t0 = g_get_monotonic_time ();
  if (s->comp == UM_STORE_RAW)
    {
      ok = s->be->ops->copy_upload (s->be, slot, 0, sl->block, sl->block_bytes, error);
      if (!ok)
        g_prefix_error (error, "layer %u: ", layer);
    }
  else
    ok = fetch_zstd (s, layer, sl, slot, &decode_s, &decoded, error);
  g_mutex_unlock (&s->fetch_lock);

  if (ok)
    {
      g_mutex_lock (&s->stats_lock);
      s->stats.n_fetches++;
      s->stats.fetch_seconds += (g_get_monotonic_time () - t0) / 1e6;
      s->stats.decode_seconds += decode_s;
      s->stats.decoded_bytes += decoded;
      if (s->comp == UM_STORE_RAW)
        s->stats.uploaded_bytes += sl->block_bytes;
      else
        for (guint f = 0; f < sl->n_frames; f++)
          s->stats.uploaded_bytes += sl->frames[f].raw_len;
      g_mutex_unlock (&s->stats_lock);
    }
  return ok;
}

const guint8 *
um_layer_store_raw_block (UmLayerStore *s, guint layer)
{
  if (s->comp != UM_STORE_RAW || layer >= s->n_layers)
    return NULL;
  return s->layers[layer].block;
}

guint
um_layer_store_n_layers (UmLayerStore *s)
{
  return s->n_layers;
}

UmStoreCompression
um_layer_store_compression (UmLayerStore *s)
{
  return s->comp;
}

void
um_layer_store_get_stats (UmLayerStore *s, UmLayerStoreStats *stats)
{
  g_mutex_lock (&s->stats_lock);
  *stats = s->stats;
  g_mutex_unlock (&s->stats_lock);
}

guint64
um_layer_store_host_bytes (UmLayerStore *s)
{
  guint64 sum = s->staging_bytes + (s->dctx != NULL ? ZSTD_sizeof_DCtx (s->dctx) : 0);

  for (guint l = 0; l < s->n_layers; l++)
    sum += s->layers[l].block_bytes + s->layers[l].n_frames * sizeof (Frame);
  return sum;
}

void
um_layer_store_free (UmLayerStore *s)
{
  if (s == NULL)
    return;
  for (guint l = 0; l < s->n_layers; l++)
    {
      if (s->layers[l].block != NULL)
        s->be->ops->host_free (s->be, s->layers[l].block, s->layers[l].block_bytes);
      g_free (s->layers[l].frames);
    }
  g_free (s->layers);
  if (s->staging != NULL)
    s->be->ops->host_free (s->be, s->staging, s->staging_bytes);
  ZSTD_freeDCtx (s->dctx);
  g_mutex_clear (&s->fetch_lock);
  g_mutex_clear (&s->stats_lock);
  g_free (s);
}

/* ---- predicting a store ---- */

void
um_layer_store_estimate_ratios (const UmModel *model, UmStoreRatios *out)
{
  memset (out, 0, sizeof *out);
  for (int i = 0; i < UM_LAYER_N_MATS; i++)
    for (int t = 0; t < UM_DTYPE_N_TYPES; t++)
      switch (t)
        {
        case UM_DTYPE_BF16: out->ratio[i][t] = 0.684; break;
        case UM_DTYPE_F16: out->ratio[i][t] = 0.843; break;
        case UM_DTYPE_F32: out->ratio[i][t] = 0.842; break;
        default: out->ratio[i][t] = 1.0; break;   /* quantized blocks save < 1/MIN_GAIN: kept raw */
        }
}

/* Frames of every layer, with the layer each belongs to. */
typedef struct {
  Frame *frames;
  guint *layer;
  guint  n;
} AllFrames;

static void
all_frames (const UmModel *model, AllFrames *a)
{
  guint n = 0;

  for (guint l = 0; l < model->cfg.n_layers; l++)
    {
      UmLayerLayout lay;
      um_layer_layout (&model->layers[l], &lay);
      n += layer_frames (&model->layers[l], &lay, NULL);
    }
  a->frames = g_new (Frame, MAX (n, 1));
  a->layer = g_new (guint, MAX (n, 1));
  a->n = 0;
  for (guint l = 0; l < model->cfg.n_layers; l++)
    {
      UmLayerLayout lay;
      guint k;
      um_layer_layout (&model->layers[l], &lay);
      k = layer_frames (&model->layers[l], &lay, a->frames + a->n);
      for (guint j = 0; j < k; j++)
        a->layer[a->n + j] = l;
      a->n += k;
    }
}

static void
all_frames_clear (AllFrames *a)
{
  g_free (a->frames);
  g_free (a->layer);
}

gboolean
um_layer_store_measure_ratios (const UmModel *model, int zstd_level, guint64 max_bytes, UmStoreRatios *out,
                               GError **error)
{
  /* Per (matrix, type): raw bytes and frames in all, frames to sample,
   * frames seen so far, and what the sampled ones raw and stored take. */
  typedef struct {
    guint64 raw, sampled_raw, sampled_stored;
    guint   count, take, seen, picked;
  } Group;
  g_autofree Group *groups = g_new0 (Group, UM_LAYER_N_MATS * UM_DTYPE_N_TYPES);
  g_autoptr(GArray) maps = NULL;
  AllFrames a;
  Compressor c = { 0 };
  guint64 total = 0;
  gboolean ok = TRUE;

  um_layer_store_estimate_ratios (model, out);
  if (!compressor_init (&c, zstd_level, model))
    {
      compressor_clear (&c);
      g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY, "no memory for a zstd compressor");
      return FALSE;
    }
  all_frames (model, &a);
  maps = readonly_file_maps ();
  for (guint k = 0; k < a.n; k++)
    {
      Group *g = &groups[a.frames[k].mat * UM_DTYPE_N_TYPES + a.frames[k].dtype];
      g->raw += a.frames[k].raw_len;
      g->count++;
      total += a.frames[k].raw_len;
    }
  out->complete = total <= max_bytes;
  /* Each group's share of the sample, in frames (nearly all are
   * FRAME_BYTES long), at least one. */
  for (int i = 0; i < UM_LAYER_N_MATS * UM_DTYPE_N_TYPES; i++)
    if (groups[i].count > 0)
      groups[i].take = out->complete ? groups[i].count
                                     : CLAMP ((guint) ((double) groups[i].count * max_bytes / total), 1,
                                              groups[i].count);
  for (guint k = 0; k < a.n && ok; k++)
    {
      const Frame *f = &a.frames[k];
      Group *g = &groups[f->mat * UM_DTYPE_N_TYPES + f->dtype];
      const UmLayerWeights *L = &model->layers[a.layer[k]];
      /* A group's j-th sampled frame is its ⌊(2j + 1)·count / 2take⌋-th:
       * spread evenly over the layers (the steps are count/take ≥ 1 apart). */
      gboolean pick = g->seen++ == (guint) (((guint64) 2 * g->picked + 1) * g->count / (2 * g->take));
      UmLayerLayout lay;
      gboolean keep;
      size_t r;

      if (!pick)
        continue;
      g->picked++;
      um_layer_layout (L, &lay);
      r = compress_frame (&c, f, frame_source (L, &lay, f), &keep);
      if (ZSTD_isError (r))
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FAILED, "zstd compression failed: %s", ZSTD_getErrorName (r));
          ok = FALSE;
          break;
        }
      g->sampled_raw += f->raw_len;
      g->sampled_stored += keep ? r : f->raw_len;
      out->sampled_bytes += f->raw_len;
      /* As building the store does: the file's pages just read go, so
       * measuring does not hold the model's layers at once. */
      release_source (maps, frame_source (L, &lay, f), f->raw_len);
    }
  if (ok)
    {
      for (int i = 0; i < UM_LAYER_N_MATS; i++)
        for (int t = 0; t < UM_DTYPE_N_TYPES; t++)
          {
            const Group *g = &groups[i * UM_DTYPE_N_TYPES + t];
            if (g->sampled_raw > 0)
              out->ratio[i][t] = (double) g->sampled_stored / g->sampled_raw;
          }
      out->measured = TRUE;
      out->cctx_bytes = ZSTD_sizeof_CCtx (c.cctx);
    }
  compressor_clear (&c);
  all_frames_clear (&a);
  return ok;
}

/* A zstd decoder's state, as the store holds one. */
static size_t
dctx_bytes (void)
{
  static gsize bytes;

  if (g_once_init_enter (&bytes))
    {
      ZSTD_DCtx *d = ZSTD_createDCtx ();
      gsize b = d != NULL ? ZSTD_sizeof_DCtx (d) : 0;
      ZSTD_freeDCtx (d);
      g_once_init_leave (&bytes, MAX (b, 1));
    }
  return bytes;
}

/* A frame's stored length as @ratios predict it, and whether it is decoded. */
static size_t
predicted_stored (const Frame *f, const UmStoreRatios *ratios, gboolean *zstd)
{
  double r = ratios->ratio[f->mat][f->dtype];

  /* A ratio under 1 means the sample kept such frames compressed. */
  *zstd = r < 1.0;
  return *zstd ? (size_t) (f->raw_len * r + 0.5) : f->raw_len;
}

guint64
um_layer_store_predict_bytes (const UmModel *model, UmStoreCompression comp, const UmStoreRatios *ratios,
                              guint64 *decode_bytes)
{
  guint64 sum = 0;
  size_t planes = 0, frame = 0;

  for (guint l = 0; l < model->cfg.n_layers; l++)
    {
      const UmLayerWeights *L = &model->layers[l];
      UmLayerLayout lay;
      g_autofree Frame *frames = NULL;
      size_t off = 0;
      guint n;

      um_layer_layout (L, &lay);
      if (comp == UM_STORE_RAW)
        {
          sum += lay.total;
          continue;
        }
      frames = layer_frames_new (L, &lay, &n);
      /* As store_layer_zstd lays the block out. */
      for (guint k = 0; k < n; k++)
        {
          gboolean zstd;
          size_t stored = predicted_stored (&frames[k], ratios, &zstd);
          frames[k].zstd = zstd;
          off = ALIGN_UP (off, FRAME_ALIGN) + stored;
        }
      staging_sizes (frames, n, &planes, &frame);
      sum += MAX (off, 1) + n * sizeof (Frame);
    }
  if (decode_bytes != NULL)
    *decode_bytes = planes + frame;
  return sum + planes + frame + (comp == UM_STORE_ZSTD ? dctx_bytes () : 0);
}

guint64
um_layer_store_build_bytes (const UmModel *model, UmStoreCompression comp, const UmStoreRatios *ratios,
                            int n_threads)
{
  size_t frame, planes, layer_packed = 0;

  if (comp == UM_STORE_RAW)
    return 0;
  largest_frames (model, &frame, &planes);
  /* A layer's kept frames, each mapped until its block is laid out. */
  for (guint l = 0; l < model->cfg.n_layers; l++)
    {
      const UmLayerWeights *L = &model->layers[l];
      const size_t page = (size_t) sysconf (_SC_PAGESIZE);
      UmLayerLayout lay;
      g_autofree Frame *fr = NULL;
      size_t packed = 0;
      guint n;

      um_layer_layout (L, &lay);
      fr = layer_frames_new (L, &lay, &n);
      for (guint k = 0; k < n; k++)
        {
          gboolean zstd;
          size_t stored = predicted_stored (&fr[k], ratios, &zstd);
          if (zstd)
            packed += ALIGN_UP (stored, page);
        }
      layer_packed = MAX (layer_packed, packed);
    }
  if (n_threads <= 0)
    n_threads = MAX (omp_get_max_threads (), 1);
  /* Per thread, as compressor_init allocates: the planes and zstd's output
   * of the largest frame, and the compressor's state (measured). */
  return (guint64) n_threads * (planes + ZSTD_compressBound (MAX (frame, 1)) + ratios->cctx_bytes) + layer_packed;
}

double
um_layer_store_mean_ratio (const UmModel *model, const UmStoreRatios *ratios)
{
  double raw = 0, stored = 0;

  for (guint l = 0; l < model->cfg.n_layers; l++)
    for (int i = 0; i < UM_LAYER_N_MATS; i++)
      {
        const UmWeight *w = um_layer_mat (&model->layers[l], i);
        double b = (double) w->rows * w->row_bytes;
        raw += b;
        stored += b * ((guint) w->dtype < UM_DTYPE_N_TYPES ? ratios->ratio[i][w->dtype] : 1.0);
      }
  return raw > 0 ? stored / raw : 1.0;
}

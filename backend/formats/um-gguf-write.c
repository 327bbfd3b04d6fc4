/* um-gguf-write.c — a streaming GGUF v3 writer.
 *
 * Metadata and tensor infos are small and kept in memory; tensor data is
 * not: it goes straight to a temporary file next to the target, in the order
 * the tensors were declared, so quantizing a multi-GB model needs one tensor
 * in memory at a time. The temporary file only replaces the target after
 * everything was written and fsynced, so a crash or an error never leaves a
 * half-written model under the real name.
 */
#include "um-gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>
#include <glib/gstdio.h>

#include "um-error.h"

#define GGUF_VERSION   3u
#define MAX_KEY_LEN    65535u
#define MAX_ALIGNMENT  (16u << 20)
#define GGML_MAX_NAME  64u   /* llama.cpp stores names in char[64] */
#define ALIGNMENT_KEY  "general.alignment"

typedef struct {
  char       *key;
  GByteArray *value;   /* u32 type + encoded value, exactly as in the file */
} WKv;

typedef struct {
  char    *name;
  UmDType  dtype;
  guint    n_dims;
  guint64  shape[UM_MAX_DIMS];   /* outermost first */
  guint64  n_bytes;
  guint64  offset;               /* in the data section, set by begin */
} WTensor;

struct _UmGgufWriter {
  GPtrArray  *kvs;           /* WKv*, in insertion order */
  GHashTable *kv_index;      /* key -> WKv* */
  GArray     *tensors;       /* WTensor */
  GHashTable *tensor_names;  /* name (owned by tensors) */
  guint32     alignment;

  /* Streaming state. */
  gboolean    begun;
  gboolean    done;          /* finished or failed: nothing more to write */
  char       *path;
  char       *tmp_path;
  char       *file;          /* base name for messages */
  int         fd;
  guint       cur;           /* tensor being written */
  guint64     cur_written;   /* bytes of it written so far */
};

static void
wkv_free (gpointer p)
{
  WKv *kv = p;
  g_free (kv->key);
  g_byte_array_unref (kv->value);
  g_free (kv);
}

static void
wtensor_clear (gpointer p)
{
  g_free (((WTensor *) p)->name);
}

UmGgufWriter *
um_gguf_writer_new (void)
{
  UmGgufWriter *w = g_new0 (UmGgufWriter, 1);
  w->kvs = g_ptr_array_new_with_free_func (wkv_free);
  w->kv_index = g_hash_table_new (g_str_hash, g_str_equal);
  w->tensors = g_array_new (FALSE, TRUE, sizeof (WTensor));
  g_array_set_clear_func (w->tensors, wtensor_clear);
  w->tensor_names = g_hash_table_new (g_str_hash, g_str_equal);
  w->alignment = UM_GGUF_DEFAULT_ALIGNMENT;
  w->fd = -1;
  return w;
}

/* Drops the temporary file: used on failure and when freed unfinished. */
static void
abandon (UmGgufWriter *w)
{
  if (w->fd >= 0)
    {
      close (w->fd);
      w->fd = -1;
    }
  if (w->tmp_path != NULL)
    {
      g_unlink (w->tmp_path);
      g_clear_pointer (&w->tmp_path, g_free);
    }
  w->done = TRUE;
}

void
um_gguf_writer_free (UmGgufWriter *w)
{
  if (w == NULL)
    return;
  abandon (w);
  g_hash_table_unref (w->kv_index);
  g_ptr_array_unref (w->kvs);
  g_hash_table_unref (w->tensor_names);
  g_array_unref (w->tensors);
  g_free (w->path);
  g_free (w->file);
  g_free (w);
}

/* ---- encoding ---------------------------------------------------------- */

static void
put_u32 (GByteArray *b, guint32 v)
{
  v = GUINT32_TO_LE (v);
  g_byte_array_append (b, (const guint8 *) &v, 4);
}

static void
put_u64 (GByteArray *b, guint64 v)
{
  v = GUINT64_TO_LE (v);
  g_byte_array_append (b, (const guint8 *) &v, 8);
}

/* One host-order element of @size bytes, little-endian. */
static void
put_elem (GByteArray *b, const guint8 *src, gsize size)
{
  guint16 v16;
  guint32 v32;
  guint64 v64;

  switch (size)
    {
    case 1: g_byte_array_append (b, src, 1); break;
    case 2: memcpy (&v16, src, 2); v16 = GUINT16_TO_LE (v16); g_byte_array_append (b, (guint8 *) &v16, 2); break;
    case 4: memcpy (&v32, src, 4); v32 = GUINT32_TO_LE (v32); g_byte_array_append (b, (guint8 *) &v32, 4); break;
    case 8: memcpy (&v64, src, 8); v64 = GUINT64_TO_LE (v64); g_byte_array_append (b, (guint8 *) &v64, 8); break;
    default: g_assert_not_reached ();
    }
}

static void
put_string (GByteArray *b, const char *s, gsize len)
{
  put_u64 (b, len);
  g_byte_array_append (b, (const guint8 *) s, len);
}

static gboolean
key_is_valid (const char *key)
{
  gsize len = key ? strlen (key) : 0;
  return len > 0 && len <= MAX_KEY_LEN && g_utf8_validate (key, len, NULL);
}

/* Returns the (emptied) value buffer of @key, creating the KV if needed;
 * setting a key again replaces its value but keeps its position. */
static GByteArray *
kv_slot (UmGgufWriter *w, const char *key, UmGgufType type)
{
  WKv *kv = g_hash_table_lookup (w->kv_index, key);

  if (kv == NULL)
    {
      kv = g_new0 (WKv, 1);
      kv->key = g_strdup (key);
      kv->value = g_byte_array_new ();
      g_ptr_array_add (w->kvs, kv);
      g_hash_table_insert (w->kv_index, kv->key, kv);
    }
  g_byte_array_set_size (kv->value, 0);
  put_u32 (kv->value, type);
  return kv->value;
}

#define CHECK_KV(w, key)                                  \
  G_STMT_START {                                          \
    g_return_if_fail ((w) != NULL && !(w)->begun);        \
    g_return_if_fail (key_is_valid (key));                \
  } G_STMT_END

static void
set_scalar (UmGgufWriter *w, const char *key, UmGgufType type, const void *v)
{
  CHECK_KV (w, key);
  /* The writer owns the alignment so that offsets and the key agree. */
  g_return_if_fail (strcmp (key, ALIGNMENT_KEY) != 0);
  put_elem (kv_slot (w, key, type), v, um_gguf_type_size (type));
}

void um_gguf_writer_set_u8  (UmGgufWriter *w, const char *key, guint8 v)  { set_scalar (w, key, UM_GGUF_UINT8, &v); }
void um_gguf_writer_set_i8  (UmGgufWriter *w, const char *key, gint8 v)   { set_scalar (w, key, UM_GGUF_INT8, &v); }
void um_gguf_writer_set_u16 (UmGgufWriter *w, const char *key, guint16 v) { set_scalar (w, key, UM_GGUF_UINT16, &v); }
void um_gguf_writer_set_i16 (UmGgufWriter *w, const char *key, gint16 v)  { set_scalar (w, key, UM_GGUF_INT16, &v); }
void um_gguf_writer_set_i32 (UmGgufWriter *w, const char *key, gint32 v)  { set_scalar (w, key, UM_GGUF_INT32, &v); }
void um_gguf_writer_set_u64 (UmGgufWriter *w, const char *key, guint64 v) { set_scalar (w, key, UM_GGUF_UINT64, &v); }
void um_gguf_writer_set_i64 (UmGgufWriter *w, const char *key, gint64 v)  { set_scalar (w, key, UM_GGUF_INT64, &v); }
void um_gguf_writer_set_f32 (UmGgufWriter *w, const char *key, float v)   { set_scalar (w, key, UM_GGUF_FLOAT32, &v); }
void um_gguf_writer_set_f64 (UmGgufWriter *w, const char *key, double v)  { set_scalar (w, key, UM_GGUF_FLOAT64, &v); }

void
um_gguf_writer_set_u32 (UmGgufWriter *w, const char *key, guint32 v)
{
  if (key != NULL && strcmp (key, ALIGNMENT_KEY) == 0)
    {
      g_autoptr (GError) error = NULL;
      if (!um_gguf_writer_set_alignment (w, v, &error))
        g_critical ("%s", error->message);
      else
        kv_slot (w, ALIGNMENT_KEY, UM_GGUF_UINT32);   /* its place; begin fills it */
      return;
    }
  set_scalar (w, key, UM_GGUF_UINT32, &v);
}

void
um_gguf_writer_set_bool (UmGgufWriter *w, const char *key, gboolean v)
{
  guint8 b = v ? 1 : 0;
  set_scalar (w, key, UM_GGUF_BOOL, &b);
}

void
um_gguf_writer_set_string_len (UmGgufWriter *w, const char *key, const char *value, gsize len)
{
  CHECK_KV (w, key);
  g_return_if_fail (value != NULL || len == 0);
  g_return_if_fail (strcmp (key, ALIGNMENT_KEY) != 0);
  put_string (kv_slot (w, key, UM_GGUF_STRING), value, len);
}

void
um_gguf_writer_set_string (UmGgufWriter *w, const char *key, const char *value)
{
  g_return_if_fail (value != NULL);
  um_gguf_writer_set_string_len (w, key, value, strlen (value));
}

void
um_gguf_writer_set_string_array (UmGgufWriter *w, const char *key,
                                 const char * const *strs, guint64 n)
{
  GByteArray *b;

  CHECK_KV (w, key);
  g_return_if_fail (strs != NULL || n == 0);
  g_return_if_fail (strcmp (key, ALIGNMENT_KEY) != 0);
  b = kv_slot (w, key, UM_GGUF_ARRAY);
  put_u32 (b, UM_GGUF_STRING);
  put_u64 (b, n);
  for (guint64 i = 0; i < n; i++)
    put_string (b, strs[i], strlen (strs[i]));
}

void
um_gguf_writer_set_array (UmGgufWriter *w, const char *key, UmGgufType elem_type,
                          const void *vals, guint64 n)
{
  gsize size = um_gguf_type_size (elem_type);
  const guint8 *src = vals;
  GByteArray *b;

  CHECK_KV (w, key);
  g_return_if_fail (size > 0);
  g_return_if_fail (vals != NULL || n == 0);
  g_return_if_fail (strcmp (key, ALIGNMENT_KEY) != 0);
  b = kv_slot (w, key, UM_GGUF_ARRAY);
  put_u32 (b, elem_type);
  put_u64 (b, n);
  for (guint64 i = 0; i < n; i++)
    {
      if (elem_type == UM_GGUF_BOOL)
        {
          guint8 v = src[i] ? 1 : 0;
          g_byte_array_append (b, &v, 1);
        }
      else
        put_elem (b, src + i * size, size);
    }
}

void
um_gguf_writer_set_i32_array (UmGgufWriter *w, const char *key, const void *vals, guint64 n)
{
  um_gguf_writer_set_array (w, key, UM_GGUF_INT32, vals, n);
}

void
um_gguf_writer_set_f32_array (UmGgufWriter *w, const char *key, const void *vals, guint64 n)
{
  um_gguf_writer_set_array (w, key, UM_GGUF_FLOAT32, vals, n);
}

gboolean
um_gguf_writer_set_alignment (UmGgufWriter *w, guint32 alignment, GError **error)
{
  g_return_val_if_fail (w != NULL, FALSE);
  if (w->begun)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "GGUF writer: the alignment cannot change once writing has begun");
      return FALSE;
    }
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > MAX_ALIGNMENT)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "GGUF writer: alignment %u is not a power of two from 1 to %u",
                   alignment, MAX_ALIGNMENT);
      return FALSE;
    }
  w->alignment = alignment;
  return TRUE;
}

gboolean
um_gguf_writer_copy_kv (UmGgufWriter *w, UmGguf *src, const char *key, GError **error)
{
  const guint8 *raw;
  gsize raw_len;
  GByteArray *b;
  gint idx;

  g_return_val_if_fail (w != NULL && !w->begun, FALSE);
  g_return_val_if_fail (src != NULL && key != NULL, FALSE);
  idx = um_gguf_find_key (src, key);
  if (idx < 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: key “%s” is missing",
                   um_gguf_file_name (src), key);
      return FALSE;
    }
  /* The source's alignment describes the source's layout, not ours: keep
   * only its place in the order, begin writes our value. */
  if (strcmp (key, ALIGNMENT_KEY) == 0)
    {
      kv_slot (w, ALIGNMENT_KEY, UM_GGUF_UINT32);
      return TRUE;
    }
  /* The reader validated the encoding, so the bytes can be copied as is. */
  raw = um_gguf_kv_raw (src, idx, &raw_len);
  b = kv_slot (w, key, um_gguf_kv_type (src, idx));
  g_byte_array_set_size (b, 0);
  g_byte_array_append (b, raw, raw_len);
  return TRUE;
}

gboolean
um_gguf_writer_copy_all_kv (UmGgufWriter *w, UmGguf *src, GError **error)
{
  for (guint i = 0; i < um_gguf_n_kv (src); i++)
    if (!um_gguf_writer_copy_kv (w, src, um_gguf_kv_key (src, i), error))
      return FALSE;
  return TRUE;
}

/* ---- tensors ----------------------------------------------------------- */

gboolean
um_gguf_writer_add_tensor_info (UmGgufWriter  *w,
                                const char    *name,
                                UmDType        dtype,
                                guint          n_dims,
                                const guint64 *shape,
                                guint64       *n_bytes,
                                GError       **error)
{
  UmTensorInfo info = { 0 };
  WTensor t = { 0 };
  gsize len;

  g_return_val_if_fail (w != NULL && name != NULL && shape != NULL, FALSE);
  if (w->begun)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "GGUF writer: tensor “%s” added after writing began", name);
      return FALSE;
    }
  len = strlen (name);
  if (len == 0 || len >= GGML_MAX_NAME || !g_utf8_validate (name, len, NULL))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "GGUF writer: tensor name “%s” must be 1 to %u bytes of UTF-8",
                   g_utf8_validate (name, len, NULL) ? name : "(invalid UTF-8)",
                   GGML_MAX_NAME - 1);
      return FALSE;
    }
  if (g_hash_table_contains (w->tensor_names, name))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "GGUF writer: tensor “%s” added twice", name);
      return FALSE;
    }
  if (um_dtype_info (dtype) == NULL || n_dims == 0 || n_dims > UM_MAX_DIMS)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "GGUF writer: tensor “%s” has an invalid type or %u dimensions", name, n_dims);
      return FALSE;
    }
  info.name = (char *) name;
  info.dtype = dtype;
  info.n_dims = n_dims;
  for (guint d = 0; d < n_dims; d++)
    {
      /* The reader (and llama.cpp) refuse empty or int64-overflowing tensors. */
      if (shape[d] == 0 || shape[d] > G_MAXINT64)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                       "GGUF writer: tensor “%s” has an empty or absurd dimension", name);
          return FALSE;
        }
      info.shape[d] = shape[d];
    }
  if (!um_tensor_info_compute_sizes (&info, "GGUF writer", error))
    return FALSE;
  if (info.n_elems > G_MAXINT64)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "GGUF writer: tensor “%s” is too large", name);
      return FALSE;
    }

  t.name = g_strdup (name);
  t.dtype = dtype;
  t.n_dims = n_dims;
  memcpy (t.shape, info.shape, sizeof t.shape);
  t.n_bytes = info.n_bytes;
  g_array_append_val (w->tensors, t);
  g_hash_table_add (w->tensor_names, t.name);
  if (n_bytes)
    *n_bytes = t.n_bytes;
  return TRUE;
}

/* ---- streaming --------------------------------------------------------- */

static gboolean
io_failed (UmGgufWriter *w, int err, const char *what, GError **error)
{
  g_set_error (error, UM_ERROR, UM_ERROR_IO, "%s: %s: %s", w->file, what, g_strerror (err));
  abandon (w);
  return FALSE;
}

static gboolean
write_all (UmGgufWriter *w, const void *data, gsize len, GError **error)
{
  const guint8 *p = data;

  while (len > 0)
    {
      /* Keep single writes well under what every kernel accepts at once. */
      gssize n = write (w->fd, p, MIN (len, (gsize) 1 << 30));
      if (n < 0)
        {
          if (errno == EINTR)
            continue;
          return io_failed (w, errno, "could not write", error);
        }
      p += n;
      len -= (gsize) n;
    }
  return TRUE;
}

static gboolean
write_zeros (UmGgufWriter *w, guint64 n, GError **error)
{
  static const guint8 zeros[4096];

  while (n > 0)
    {
      gsize k = (gsize) MIN (n, sizeof zeros);
      if (!write_all (w, zeros, k, error))
        return FALSE;
      n -= k;
    }
  return TRUE;
}

static guint64
pad_to (guint64 x, guint32 alignment)
{
  return (alignment - x % alignment) % alignment;
}

static gboolean
misuse (GError **error, const char *fmt, ...) G_GNUC_PRINTF (2, 3);

static gboolean
misuse (GError **error, const char *fmt, ...)
{
  g_autofree char *msg = NULL;
  va_list ap;

  va_start (ap, fmt);
  msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "GGUF writer: %s", msg);
  return FALSE;
}

/* Moves past tensors that are complete (writing their padding). */
static gboolean
advance (UmGgufWriter *w, GError **error)
{
  while (w->cur < w->tensors->len
         && w->cur_written == g_array_index (w->tensors, WTensor, w->cur).n_bytes)
    {
      /* llama.cpp pads every tensor, the last one included. */
      if (!write_zeros (w, pad_to (w->cur_written, w->alignment), error))
        return FALSE;
      w->cur++;
      w->cur_written = 0;
    }
  return TRUE;
}

gboolean
um_gguf_writer_begin (UmGgufWriter *w, const char *path, GError **error)
{
  g_autoptr (GByteArray) b = NULL;
  guint32 align_le;
  guint64 offset = 0;
  WKv *akv;

  g_return_val_if_fail (w != NULL && path != NULL, FALSE);
  if (w->begun)
    return misuse (error, "begin called twice");
  w->begun = TRUE;
  w->path = g_strdup (path);
  w->file = g_path_get_basename (path);

  /* general.alignment always states the alignment the offsets use. */
  kv_slot (w, ALIGNMENT_KEY, UM_GGUF_UINT32);
  akv = g_hash_table_lookup (w->kv_index, ALIGNMENT_KEY);
  align_le = GUINT32_TO_LE (w->alignment);
  g_byte_array_append (akv->value, (const guint8 *) &align_le, 4);

  b = g_byte_array_new ();
  g_byte_array_append (b, (const guint8 *) "GGUF", 4);
  put_u32 (b, GGUF_VERSION);
  put_u64 (b, w->tensors->len);
  put_u64 (b, w->kvs->len);
  for (guint i = 0; i < w->kvs->len; i++)
    {
      WKv *kv = g_ptr_array_index (w->kvs, i);
      put_string (b, kv->key, strlen (kv->key));
      g_byte_array_append (b, kv->value->data, kv->value->len);
    }
  for (guint i = 0; i < w->tensors->len; i++)
    {
      WTensor *t = &g_array_index (w->tensors, WTensor, i);
      put_string (b, t->name, strlen (t->name));
      put_u32 (b, t->n_dims);
      /* GGUF wants ne[0] (innermost) first. */
      for (guint d = 0; d < t->n_dims; d++)
        put_u64 (b, t->shape[t->n_dims - 1 - d]);
      put_u32 (b, um_gguf_dtype_to_ggml (t->dtype));
      t->offset = offset;
      put_u64 (b, offset);
      offset += t->n_bytes + pad_to (t->n_bytes, w->alignment);
    }
  /* Padding before the data section, zeroed. */
  {
    guint old = b->len;
    guint pad = (guint) pad_to (old, w->alignment);
    g_byte_array_set_size (b, old + pad);
    memset (b->data + old, 0, pad);
  }

  w->tmp_path = g_strdup_printf ("%s.XXXXXX.part", path);
  w->fd = g_mkstemp_full (w->tmp_path, O_WRONLY | O_CLOEXEC, 0666);
  if (w->fd < 0)
    {
      int err = errno;
      g_clear_pointer (&w->tmp_path, g_free);
      return io_failed (w, err, "could not create a temporary file", error);
    }
  /* Held while the file is written: a .part nobody holds is left over
   * from a killed writer (um_convert_cache_list () tells them apart). */
  (void) flock (w->fd, LOCK_EX | LOCK_NB);
  if (!write_all (w, b->data, b->len, error))
    return FALSE;
  w->cur = 0;
  w->cur_written = 0;
  return TRUE;
}

gboolean
um_gguf_writer_write_tensor_data (UmGgufWriter *w, const void *data, gsize len, GError **error)
{
  const WTensor *t;

  g_return_val_if_fail (w != NULL && (data != NULL || len == 0), FALSE);
  if (!w->begun || w->done)
    return misuse (error, "tensor data written %s", w->begun ? "after finishing or failing"
                                                             : "before begin");
  if (w->cur >= w->tensors->len)
    return misuse (error, "%s: more tensor data than declared", w->file);
  t = &g_array_index (w->tensors, WTensor, w->cur);
  if (len > t->n_bytes - w->cur_written)
    return misuse (error, "%s: tensor “%s”: %" G_GSIZE_FORMAT " bytes given but only %"
                   G_GUINT64_FORMAT " of its %" G_GUINT64_FORMAT " bytes remain",
                   w->file, t->name, len, t->n_bytes - w->cur_written, t->n_bytes);
  if (!write_all (w, data, len, error))
    return FALSE;
  w->cur_written += len;
  return advance (w, error);
}

gboolean
um_gguf_writer_finish (UmGgufWriter *w, GError **error)
{
  g_autofree char *dir = NULL;
  int dfd;

  g_return_val_if_fail (w != NULL, FALSE);
  if (!w->begun || w->done)
    return misuse (error, "finish called %s", w->begun ? "twice or after a failure"
                                                       : "before begin");
  if (w->cur < w->tensors->len)
    {
      const WTensor *t = &g_array_index (w->tensors, WTensor, w->cur);
      misuse (error, "%s: tensor “%s”: only %" G_GUINT64_FORMAT " of its %" G_GUINT64_FORMAT
              " bytes were written", w->file, t->name, w->cur_written, t->n_bytes);
      abandon (w);
      return FALSE;
    }
  if (fsync (w->fd) != 0)
    return io_failed (w, errno, "could not sync", error);
  if (close (w->fd) != 0)
    {
      w->fd = -1;
      return io_failed (w, errno, "could not close", error);
    }
  w->fd = -1;
  if (g_rename (w->tmp_path, w->path) != 0)
    return io_failed (w, errno, "could not rename the temporary file into place", error);
  g_clear_pointer (&w->tmp_path, g_free);
  w->done = TRUE;

  /* Make the rename itself durable; failure here loses nothing written. */
  dir = g_path_get_dirname (w->path);
  dfd = open (dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0)
    {
      fsync (dfd);
      close (dfd);
    }
  return TRUE;
}

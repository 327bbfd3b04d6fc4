/* um-gguf.c — a strict GGUF reader.
 *
 * Layout (all little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv,
 * n_kv × {string key, u32 type, value}, n_tensors × {string name, u32 n_dims,
 * u64 ne[n_dims] (innermost first), u32 ggml type, u64 offset}, padding to
 * general.alignment, tensor data (offsets relative to its start). A string is
 * u64 length + bytes; an array is u32 element type + u64 count + elements.
 *
 * The file is hostile until proven otherwise: every read goes through a
 * bounds-checked cursor, every count is checked against the bytes left before
 * it sizes anything, and nothing is allocated in proportion to a number the
 * file merely claims (arrays grow with what was actually parsed).
 */
#include "um-gguf.h"

#include <math.h>
#include <string.h>

#include "um-error.h"

#define MAX_KEY_LEN   65535u
#define MAX_ALIGNMENT (16u << 20)
/* Smallest possible encodings, used to reject counts that cannot fit:
 * a KV is a key length (8), >= 1 key byte, a type (4) and >= 1 value byte;
 * a tensor info is a name length (8), >= 1 name byte, n_dims (4), >= 1 dim
 * (8), a type (4) and an offset (8). */
#define MIN_KV_BYTES          14u
#define MIN_TENSOR_INFO_BYTES 33u
/* How many array items um_gguf_kv_to_string() shows. */
#define SUMMARY_ITEMS 8
#define SUMMARY_STRING_CHARS 120

typedef struct {
  char         *key;
  UmGgufType    type;
  const guint8 *raw;        /* the type field, so a KV can be copied verbatim */
  gsize         raw_len;    /* type field + value */
  const guint8 *value;      /* scalar bytes, string bytes, or first array element */
  guint64       len;        /* string: bytes */
  UmGgufType    elem_type;  /* array */
  guint64       count;      /* array */
  char         *str;        /* string: NUL-terminated copy */
  char        **strv;       /* string array: built once, on demand, one block */
} Kv;

struct _UmGguf {
  GMappedFile   *mapping;   /* NULL for um_gguf_open_from_bytes() */
  char          *path;      /* the file mapped, or NULL */
  const guint8  *data;
  gsize          len;
  char          *name;      /* base name, for messages */
  guint32        version;
  guint32        alignment;
  guint64        header_size;
  guint64        data_offset;
  GArray        *kvs;       /* Kv */
  GHashTable    *kv_index;  /* key (owned by kvs) -> index + 1 */
  UmTensorTable *tensors;
};

typedef struct {
  UmTensorInfo info;        /* name owned here until added to the table */
  guint32      ggml_type;
  guint64      offset;      /* relative to the data section */
} TensorInfo;

/* Parser state: a bounds-checked cursor over the file plus where errors go. */
typedef struct {
  const guint8 *p;
  gsize         len;
  gsize         off;
  const char   *file;
  GError      **error;
} Parser;

/* ---- type tables ------------------------------------------------------- */

static const char *const type_names[UM_GGUF_N_TYPES] = {
  "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool",
  "string", "array", "uint64", "int64", "float64",
};

static const gsize type_sizes[UM_GGUF_N_TYPES] = {
  1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8,
};

const char *
um_gguf_type_name (UmGgufType type)
{
  return (guint) type < UM_GGUF_N_TYPES ? type_names[type] : "invalid";
}

gsize
um_gguf_type_size (UmGgufType type)
{
  return (guint) type < UM_GGUF_N_TYPES ? type_sizes[type] : 0;
}

static gboolean
type_is_integer (UmGgufType t)
{
  switch (t)
    {
    case UM_GGUF_UINT8: case UM_GGUF_INT8: case UM_GGUF_UINT16: case UM_GGUF_INT16:
    case UM_GGUF_UINT32: case UM_GGUF_INT32: case UM_GGUF_UINT64: case UM_GGUF_INT64:
      return TRUE;
    default:
      return FALSE;
    }
}

/* ggml_type ids as of llama.cpp 2025 (gaps are removed types). */
static const char *const ggml_type_names[] = {
  [0] = "F32", [1] = "F16", [2] = "Q4_0", [3] = "Q4_1", [6] = "Q5_0", [7] = "Q5_1",
  [8] = "Q8_0", [9] = "Q8_1", [10] = "Q2_K", [11] = "Q3_K", [12] = "Q4_K",
  [13] = "Q5_K", [14] = "Q6_K", [15] = "Q8_K", [16] = "IQ2_XXS", [17] = "IQ2_XS",
  [18] = "IQ3_XXS", [19] = "IQ1_S", [20] = "IQ4_NL", [21] = "IQ3_S", [22] = "IQ2_S",
  [23] = "IQ4_XS", [24] = "I8", [25] = "I16", [26] = "I32", [27] = "I64",
  [28] = "F64", [29] = "IQ1_M", [30] = "BF16", [34] = "TQ1_0", [35] = "TQ2_0",
  [39] = "MXFP4",
};

static const struct { guint32 ggml; UmDType dtype; } ggml_dtype_map[] = {
  { 0, UM_DTYPE_F32 },  { 1, UM_DTYPE_F16 },   { 2, UM_DTYPE_Q4_0 }, { 3, UM_DTYPE_Q4_1 },
  { 6, UM_DTYPE_Q5_0 }, { 7, UM_DTYPE_Q5_1 },  { 8, UM_DTYPE_Q8_0 }, { 12, UM_DTYPE_Q4_K },
  { 13, UM_DTYPE_Q5_K }, { 14, UM_DTYPE_Q6_K }, { 26, UM_DTYPE_I32 }, { 30, UM_DTYPE_BF16 },
};

const char *
um_gguf_ggml_type_name (guint32 ggml_type)
{
  return ggml_type < G_N_ELEMENTS (ggml_type_names) ? ggml_type_names[ggml_type] : NULL;
}

gboolean
um_gguf_dtype_from_ggml (guint32 ggml_type, UmDType *out)
{
  for (guint i = 0; i < G_N_ELEMENTS (ggml_dtype_map); i++)
    if (ggml_dtype_map[i].ggml == ggml_type)
      {
        *out = ggml_dtype_map[i].dtype;
        return TRUE;
      }
  return FALSE;
}

guint32
um_gguf_dtype_to_ggml (UmDType dtype)
{
  for (guint i = 0; i < G_N_ELEMENTS (ggml_dtype_map); i++)
    if (ggml_dtype_map[i].dtype == dtype)
      return ggml_dtype_map[i].ggml;
  g_return_val_if_reached (G_MAXUINT32);
}

/* ---- little-endian loads (the mapping is only byte-aligned) ------------ */

static inline guint16
le_u16 (const guint8 *p)
{
  guint16 v;
  memcpy (&v, p, sizeof v);
  return GUINT16_FROM_LE (v);
}

static inline guint32
le_u32 (const guint8 *p)
{
  guint32 v;
  memcpy (&v, p, sizeof v);
  return GUINT32_FROM_LE (v);
}

static inline guint64
le_u64 (const guint8 *p)
{
  guint64 v;
  memcpy (&v, p, sizeof v);
  return GUINT64_FROM_LE (v);
}

static inline float
le_f32 (const guint8 *p)
{
  guint32 u = le_u32 (p);
  float f;
  memcpy (&f, &u, sizeof f);
  return f;
}

static inline double
le_f64 (const guint8 *p)
{
  guint64 u = le_u64 (p);
  double d;
  memcpy (&d, &u, sizeof d);
  return d;
}

/* Loads an integer element: sets *neg and either *sv (negative) or *uv. */
static void
load_int (UmGgufType t, const guint8 *p, gboolean *neg, gint64 *sv, guint64 *uv)
{
  gint64 s = 0;

  *neg = FALSE;
  switch (t)
    {
    case UM_GGUF_UINT8:  *uv = p[0]; return;
    case UM_GGUF_UINT16: *uv = le_u16 (p); return;
    case UM_GGUF_UINT32: *uv = le_u32 (p); return;
    case UM_GGUF_UINT64: *uv = le_u64 (p); return;
    case UM_GGUF_INT8:   s = (gint8) p[0]; break;
    case UM_GGUF_INT16:  s = (gint16) le_u16 (p); break;
    case UM_GGUF_INT32:  s = (gint32) le_u32 (p); break;
    case UM_GGUF_INT64:  s = (gint64) le_u64 (p); break;
    default: g_assert_not_reached ();
    }
  *sv = s;
  if (s < 0)
    *neg = TRUE;
  else
    *uv = (guint64) s;
}

/* ---- parser helpers ---------------------------------------------------- */

static gboolean G_GNUC_PRINTF (3, 4)
fail (Parser *p, gint code, const char *fmt, ...)
{
  g_autofree char *msg = NULL;
  va_list ap;

  va_start (ap, fmt);
  msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  g_set_error (p->error, UM_ERROR, code, "%s: %s", p->file, msg);
  return FALSE;
}

/* Reports that @need bytes for @what are not there. */
static gboolean G_GNUC_PRINTF (3, 4)
fail_truncated (Parser *p, guint64 need, const char *fmt, ...)
{
  g_autofree char *what = NULL;
  va_list ap;

  va_start (ap, fmt);
  what = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  return fail (p, UM_ERROR_FORMAT,
               "truncated: %s needs %" G_GUINT64_FORMAT " bytes at byte %" G_GSIZE_FORMAT
               " but the file ends at byte %" G_GSIZE_FORMAT,
               what, need, p->off, p->len);
}

static inline gsize
left (const Parser *p)
{
  return p->len - p->off;
}

static inline gboolean
take_u32 (Parser *p, guint32 *out)
{
  if (left (p) < 4)
    return FALSE;
  *out = le_u32 (p->p + p->off);
  p->off += 4;
  return TRUE;
}

static inline gboolean
take_u64 (Parser *p, guint64 *out)
{
  if (left (p) < 8)
    return FALSE;
  *out = le_u64 (p->p + p->off);
  p->off += 8;
  return TRUE;
}

/* Reads a GGUF string header and checks the bytes are there; *bytes points
 * at them and the cursor moves past. @what names it in messages. */
static gboolean
take_string (Parser *p, const guint8 **bytes, guint64 *len, const char *what)
{
  if (!take_u64 (p, len))
    return fail_truncated (p, 8, "the length of %s", what);
  if (*len > left (p))
    return fail (p, UM_ERROR_FORMAT,
                 "%s claims %" G_GUINT64_FORMAT " bytes at byte %" G_GSIZE_FORMAT
                 " but only %" G_GSIZE_FORMAT " are left in the file",
                 what, *len, p->off, left (p));
  *bytes = p->p + p->off;
  p->off += *len;
  return TRUE;
}

/* Keys and tensor names end up in messages and hash tables: they must be
 * non-empty, short, NUL-free UTF-8. Returns a copy. */
static char *
take_name (Parser *p, const char *what)
{
  const guint8 *bytes = NULL;
  guint64 len = 0;

  if (!take_string (p, &bytes, &len, what))
    return NULL;
  if (len == 0)
    {
      fail (p, UM_ERROR_FORMAT, "%s is empty", what);
      return NULL;
    }
  if (len > MAX_KEY_LEN)
    {
      fail (p, UM_ERROR_FORMAT, "%s is %" G_GUINT64_FORMAT " bytes long (at most %u allowed)",
            what, len, MAX_KEY_LEN);
      return NULL;
    }
  if (memchr (bytes, 0, len) != NULL || !g_utf8_validate_len ((const char *) bytes, len, NULL))
    {
      fail (p, UM_ERROR_FORMAT, "%s is not valid UTF-8 or contains a NUL byte", what);
      return NULL;
    }
  return g_strndup ((const char *) bytes, len);
}

static gboolean
check_bools (Parser *p, const guint8 *v, guint64 n, const char *key)
{
  for (guint64 i = 0; i < n; i++)
    if (v[i] > 1)
      return fail (p, UM_ERROR_FORMAT, "key “%s”: bool value %u is neither 0 nor 1", key, v[i]);
  return TRUE;
}

/* Parses the value of @kv (whose type is set) at the cursor. */
static gboolean
parse_value (Parser *p, Kv *kv)
{
  gsize size;

  switch (kv->type)
    {
    case UM_GGUF_STRING:
      {
        g_autofree char *what = g_strdup_printf ("the string value of key “%s”", kv->key);
        if (!take_string (p, &kv->value, &kv->len, what))
          return FALSE;
        kv->str = g_strndup ((const char *) kv->value, kv->len);
        return TRUE;
      }

    case UM_GGUF_ARRAY:
      {
        guint32 et;
        if (!take_u32 (p, &et))
          return fail_truncated (p, 4, "the element type of array “%s”", kv->key);
        if (et >= UM_GGUF_N_TYPES)
          return fail (p, UM_ERROR_FORMAT, "key “%s”: unknown array element type %u", kv->key, et);
        /* llama.cpp rejects arrays of arrays too; no model needs them and
         * refusing them keeps the parser free of recursion. */
        if (et == UM_GGUF_ARRAY)
          return fail (p, UM_ERROR_UNSUPPORTED, "key “%s”: arrays of arrays are not supported",
                       kv->key);
        kv->elem_type = et;
        if (!take_u64 (p, &kv->count))
          return fail_truncated (p, 8, "the element count of array “%s”", kv->key);
        kv->value = p->p + p->off;
        if (et == UM_GGUF_STRING)
          {
            /* Every string takes at least its 8-byte length. */
            if (kv->count > left (p) / 8)
              return fail (p, UM_ERROR_FORMAT,
                           "array “%s” claims %" G_GUINT64_FORMAT " strings but only %"
                           G_GSIZE_FORMAT " bytes are left in the file",
                           kv->key, kv->count, left (p));
            for (guint64 i = 0; i < kv->count; i++)
              {
                guint64 len;
                if (!take_u64 (p, &len))
                  return fail_truncated (p, 8, "the length of string %" G_GUINT64_FORMAT
                                         " of array “%s”", i, kv->key);
                if (len > left (p))
                  return fail (p, UM_ERROR_FORMAT,
                               "string %" G_GUINT64_FORMAT " of array “%s” claims %"
                               G_GUINT64_FORMAT " bytes at byte %" G_GSIZE_FORMAT
                               " but only %" G_GSIZE_FORMAT " are left in the file",
                               i, kv->key, len, p->off, left (p));
                p->off += len;
              }
            return TRUE;
          }
        size = type_sizes[et];
        if (kv->count > left (p) / size)
          return fail (p, UM_ERROR_FORMAT,
                       "array “%s” claims %" G_GUINT64_FORMAT " elements of type %s at byte %"
                       G_GSIZE_FORMAT " but only %" G_GSIZE_FORMAT " bytes are left in the file",
                       kv->key, kv->count, type_names[et], p->off, left (p));
        if (et == UM_GGUF_BOOL && !check_bools (p, kv->value, kv->count, kv->key))
          return FALSE;
        p->off += kv->count * size;
        return TRUE;
      }

    default:
      size = type_sizes[kv->type];
      if (left (p) < size)
        return fail_truncated (p, size, "the value of key “%s”", kv->key);
      kv->value = p->p + p->off;
      if (kv->type == UM_GGUF_BOOL && !check_bools (p, kv->value, 1, kv->key))
        return FALSE;
      p->off += size;
      return TRUE;
    }
}

static void
kv_clear (Kv *kv)
{
  g_free (kv->key);
  g_free (kv->str);
  g_free (kv->strv);   /* one block, see build_strv() */
}

static gboolean
parse_kvs (UmGguf *g, Parser *p, guint64 n_kv)
{
  for (guint64 i = 0; i < n_kv; i++)
    {
      g_autofree char *what = g_strdup_printf ("key %" G_GUINT64_FORMAT, i);
      Kv kv = { 0 };
      guint32 type;

      kv.key = take_name (p, what);
      if (kv.key == NULL)
        return FALSE;
      if (g_hash_table_contains (g->kv_index, kv.key))
        {
          fail (p, UM_ERROR_FORMAT, "key “%s” appears more than once", kv.key);
          kv_clear (&kv);
          return FALSE;
        }
      kv.raw = p->p + p->off;
      if (!take_u32 (p, &type))
        {
          fail_truncated (p, 4, "the type of key “%s”", kv.key);
          kv_clear (&kv);
          return FALSE;
        }
      if (type >= UM_GGUF_N_TYPES)
        {
          fail (p, UM_ERROR_FORMAT, "key “%s” has unknown value type %u", kv.key, type);
          kv_clear (&kv);
          return FALSE;
        }
      kv.type = type;
      if (!parse_value (p, &kv))
        {
          kv_clear (&kv);
          return FALSE;
        }
      kv.raw_len = (gsize) (p->p + p->off - kv.raw);
      g_array_append_val (g->kvs, kv);
      g_hash_table_insert (g->kv_index, kv.key, GUINT_TO_POINTER (g->kvs->len));
    }
  return TRUE;
}

static gboolean
parse_alignment (UmGguf *g, Parser *p)
{
  gint idx = um_gguf_find_key (g, "general.alignment");
  const Kv *kv;
  gboolean neg;
  gint64 sv;
  guint64 uv = 0;

  g->alignment = UM_GGUF_DEFAULT_ALIGNMENT;
  if (idx < 0)
    return TRUE;
  kv = &g_array_index (g->kvs, Kv, idx);
  /* The spec says uint32; any integer that holds a sane value is fine. */
  if (!type_is_integer (kv->type))
    return fail (p, UM_ERROR_FORMAT, "key “general.alignment” has type %s, expected an integer",
                 type_names[kv->type]);
  load_int (kv->type, kv->value, &neg, &sv, &uv);
  if (neg || uv == 0 || (uv & (uv - 1)) != 0 || uv > MAX_ALIGNMENT)
    return fail (p, UM_ERROR_FORMAT,
                 "key “general.alignment” is %s%" G_GUINT64_FORMAT
                 ", not a power of two from 1 to %u",
                 neg ? "-" : "", neg ? (guint64) 0 - (guint64) sv : uv, MAX_ALIGNMENT);
  g->alignment = (guint32) uv;
  return TRUE;
}

static gboolean
parse_tensor_info (UmGguf *g, Parser *p, guint64 i, GHashTable *seen, TensorInfo *ti)
{
  g_autofree char *what = g_strdup_printf ("the name of tensor %" G_GUINT64_FORMAT, i);
  UmTensorInfo *info = &ti->info;
  const char *name;
  const char *tname;
  guint32 n_dims;
  guint64 n = 1;

  info->name = take_name (p, what);
  if (info->name == NULL)
    return FALSE;
  name = info->name;
  if (g_hash_table_contains (seen, name))
    return fail (p, UM_ERROR_FORMAT, "tensor “%s” appears more than once", name);
  g_hash_table_add (seen, (gpointer) name);

  if (!take_u32 (p, &n_dims))
    return fail_truncated (p, 4, "the dimension count of tensor “%s”", name);
  if (n_dims == 0 || n_dims > UM_MAX_DIMS)
    return fail (p, UM_ERROR_FORMAT, "tensor “%s” has %u dimensions (1 to %d supported)",
                 name, n_dims, UM_MAX_DIMS);
  info->n_dims = n_dims;
  for (guint d = 0; d < n_dims; d++)
    {
      guint64 ne;
      if (!take_u64 (p, &ne))
        return fail_truncated (p, 8, "dimension %u of tensor “%s”", d, name);
      if (ne == 0)
        return fail (p, UM_ERROR_FORMAT, "tensor “%s” has a zero dimension", name);
      /* ggml counts elements in int64_t. */
      if (ne > G_MAXINT64 || n > (guint64) G_MAXINT64 / ne)
        return fail (p, UM_ERROR_FORMAT, "tensor “%s” has an absurd shape (its size overflows)",
                     name);
      n *= ne;
      /* GGUF lists ne[0] (innermost) first; the table is outermost first. */
      info->shape[n_dims - 1 - d] = ne;
    }

  if (!take_u32 (p, &ti->ggml_type))
    return fail_truncated (p, 4, "the type of tensor “%s”", name);
  if (!um_gguf_dtype_from_ggml (ti->ggml_type, &info->dtype))
    {
      tname = um_gguf_ggml_type_name (ti->ggml_type);
      if (tname != NULL)
        return fail (p, UM_ERROR_UNSUPPORTED, "tensor “%s” has type %s (ggml type %u), "
                     "which is not supported", name, tname, ti->ggml_type);
      return fail (p, UM_ERROR_UNSUPPORTED, "tensor “%s” has unknown ggml type %u",
                   name, ti->ggml_type);
    }
  /* Block multiple, byte size overflow. */
  if (!um_tensor_info_compute_sizes (info, p->file, p->error))
    return FALSE;

  if (!take_u64 (p, &ti->offset))
    return fail_truncated (p, 8, "the data offset of tensor “%s”", name);
  return TRUE;
}

static int
compare_offsets (gconstpointer a, gconstpointer b)
{
  const TensorInfo *x = *(TensorInfo * const *) a;
  const TensorInfo *y = *(TensorInfo * const *) b;
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Places the tensors: aligned, inside the file, not overlapping. */
static gboolean
check_tensor_data (UmGguf *g, Parser *p, TensorInfo *tis, guint n)
{
  g_autofree TensorInfo **sorted = NULL;
  guint64 avail;

  if (n == 0)
    return TRUE;
  if (g->data_offset > g->len)
    return fail (p, UM_ERROR_FORMAT,
                 "tensor data should start at byte %" G_GUINT64_FORMAT
                 " but the file ends at byte %" G_GSIZE_FORMAT, g->data_offset, g->len);
  avail = g->len - g->data_offset;

  for (guint i = 0; i < n; i++)
    {
      const TensorInfo *ti = &tis[i];
      if (ti->offset % g->alignment != 0)
        return fail (p, UM_ERROR_FORMAT,
                     "tensor “%s”: data offset %" G_GUINT64_FORMAT
                     " is not a multiple of the alignment %u",
                     ti->info.name, ti->offset, g->alignment);
      if (ti->offset > avail || ti->info.n_bytes > avail - ti->offset)
        {
          /* Say where it would end; saturate rather than wrap. */
          guint64 start = ti->offset > G_MAXUINT64 - g->data_offset
                          ? G_MAXUINT64 : g->data_offset + ti->offset;
          guint64 end = ti->info.n_bytes > G_MAXUINT64 - start ? G_MAXUINT64 : start + ti->info.n_bytes;
          return fail (p, UM_ERROR_FORMAT,
                       "tensor “%s”: data ends at byte %" G_GUINT64_FORMAT
                       ", past the end of the file (%" G_GSIZE_FORMAT " bytes)",
                       ti->info.name, end, g->len);
        }
    }

  sorted = g_new (TensorInfo *, n);
  for (guint i = 0; i < n; i++)
    sorted[i] = &tis[i];
  qsort (sorted, n, sizeof *sorted, compare_offsets);
  for (guint i = 1; i < n; i++)
    if (sorted[i - 1]->offset + sorted[i - 1]->info.n_bytes > sorted[i]->offset)
      return fail (p, UM_ERROR_FORMAT, "tensors “%s” and “%s” overlap",
                   sorted[i - 1]->info.name, sorted[i]->info.name);
  return TRUE;
}

static gboolean
parse (UmGguf *g, GError **error)
{
  Parser p = { g->data, g->len, 0, g->name, error };
  GArray *tis = NULL;
  g_autoptr (GHashTable) seen = NULL;
  guint64 n_tensors, n_kv;
  guint32 version;
  const char *file;
  gboolean ok = FALSE;

  if (g->len < 4)
    return fail (&p, UM_ERROR_FORMAT, "not a GGUF file (only %" G_GSIZE_FORMAT " bytes)", g->len);
  if (memcmp (g->data, "GGUF", 4) != 0)
    return fail (&p, UM_ERROR_FORMAT, "not a GGUF file (bad magic %02x %02x %02x %02x)",
                 g->data[0], g->data[1], g->data[2], g->data[3]);
  p.off = 4;
  if (!take_u32 (&p, &version))
    return fail_truncated (&p, 4, "the version");
  if (version == 1)
    return fail (&p, UM_ERROR_UNSUPPORTED,
                 "GGUF version 1 is obsolete and not supported (convert it again with llama.cpp)");
  if (GUINT32_SWAP_LE_BE (version) == 2 || GUINT32_SWAP_LE_BE (version) == 3)
    return fail (&p, UM_ERROR_UNSUPPORTED, "big-endian GGUF files are not supported");
  /* Version 2 has the same layout as 3 (3 only added big-endian files). */
  if (version != 2 && version != 3)
    return fail (&p, UM_ERROR_UNSUPPORTED, "GGUF version %u is not supported (only 2 and 3)",
                 version);
  g->version = version;

  if (!take_u64 (&p, &n_tensors))
    return fail_truncated (&p, 8, "the tensor count");
  if (!take_u64 (&p, &n_kv))
    return fail_truncated (&p, 8, "the key-value count");
  /* Check the counts against the smallest bytes they could take before
   * they size anything. */
  if (n_kv > left (&p) / MIN_KV_BYTES || n_kv > G_MAXINT)
    return fail (&p, UM_ERROR_FORMAT,
                 "header claims %" G_GUINT64_FORMAT " key-value pairs but only %"
                 G_GSIZE_FORMAT " bytes follow", n_kv, left (&p));
  if (n_tensors > (left (&p) - n_kv * MIN_KV_BYTES) / MIN_TENSOR_INFO_BYTES || n_tensors > G_MAXINT)
    return fail (&p, UM_ERROR_FORMAT,
                 "header claims %" G_GUINT64_FORMAT " tensors and %" G_GUINT64_FORMAT
                 " key-value pairs but only %" G_GSIZE_FORMAT " bytes follow",
                 n_tensors, n_kv, left (&p));

  if (!parse_kvs (g, &p, n_kv))
    return FALSE;
  if (!parse_alignment (g, &p))
    return FALSE;

  tis = g_array_new (FALSE, TRUE, sizeof (TensorInfo));
  seen = g_hash_table_new (g_str_hash, g_str_equal);
  for (guint64 i = 0; i < n_tensors; i++)
    {
      TensorInfo ti = { 0 };
      gboolean good = parse_tensor_info (g, &p, i, seen, &ti);
      /* Appended even on failure so its name is freed with the others. */
      g_array_append_val (tis, ti);
      if (!good)
        goto out;
    }
  g->header_size = p.off;
  g->data_offset = (g->header_size + g->alignment - 1) / g->alignment * g->alignment;
  if (!check_tensor_data (g, &p, (TensorInfo *) (void *) tis->data, tis->len))
    goto out;

  g->tensors = um_tensor_table_new ();
  file = um_tensor_table_add_mapping (g->tensors, g->mapping, g->name, g->path);
  for (guint i = 0; i < tis->len; i++)
    {
      TensorInfo *ti = &g_array_index (tis, TensorInfo, i);
      ti->info.file = file;
      ti->info.data = g->data + g->data_offset + ti->offset;
      if (!um_tensor_table_add (g->tensors, &ti->info, error))
        goto out;
    }
  ok = TRUE;

out:
  for (guint i = 0; i < tis->len; i++)
    g_free (g_array_index (tis, TensorInfo, i).info.name);
  g_array_unref (tis);
  return ok;
}

static UmGguf *
gguf_new (GMappedFile *mapping, const guint8 *data, gsize len, const char *name)
{
  UmGguf *g = g_new0 (UmGguf, 1);
  g->mapping = mapping ? g_mapped_file_ref (mapping) : NULL;
  g->data = data;
  g->len = len;
  g->name = g_path_get_basename (name ? name : "model.gguf");
  g->path = mapping && name ? g_strdup (name) : NULL;
  g->kvs = g_array_new (FALSE, TRUE, sizeof (Kv));
  g_array_set_clear_func (g->kvs, (GDestroyNotify) kv_clear);
  g->kv_index = g_hash_table_new (g_str_hash, g_str_equal);
  return g;
}

UmGguf *
um_gguf_open_from_bytes (const guint8 *data, gsize len, const char *name, GError **error)
{
  g_autoptr (UmGguf) g = NULL;

  g_return_val_if_fail (data != NULL || len == 0, NULL);
  g = gguf_new (NULL, data, len, name);
  if (!parse (g, error))
    return NULL;
  return g_steal_pointer (&g);
}

UmGguf *
um_gguf_open (const char *path, GError **error)
{
  g_autoptr (GMappedFile) mapping = NULL;
  g_autoptr (GError) local = NULL;
  g_autoptr (UmGguf) g = NULL;

  g_return_val_if_fail (path != NULL, NULL);
  mapping = g_mapped_file_new (path, FALSE, &local);
  if (mapping == NULL)
    {
      g_autofree char *base = g_path_get_basename (path);
      g_set_error (error, UM_ERROR, UM_ERROR_IO, "%s: %s", base, local->message);
      return NULL;
    }
  um_tensor_mapping_small_pages (mapping);
  g = gguf_new (mapping, (const guint8 *) g_mapped_file_get_contents (mapping),
                g_mapped_file_get_length (mapping), path);
  if (!parse (g, error))
    return NULL;
  return g_steal_pointer (&g);
}

void
um_gguf_free (UmGguf *g)
{
  if (g == NULL)
    return;
  um_tensor_table_free (g->tensors);
  g_hash_table_unref (g->kv_index);
  g_array_unref (g->kvs);
  if (g->mapping)
    g_mapped_file_unref (g->mapping);
  g_free (g->name);
  g_free (g->path);
  g_free (g);
}

/* ---- accessors --------------------------------------------------------- */

const char *
um_gguf_file_name (UmGguf *g)
{
  return g->name;
}

guint32
um_gguf_version (UmGguf *g)
{
  return g->version;
}

guint32
um_gguf_alignment (UmGguf *g)
{
  return g->alignment;
}

guint64
um_gguf_header_size (UmGguf *g)
{
  return g->header_size;
}

guint64
um_gguf_data_offset (UmGguf *g)
{
  return g->data_offset;
}

const guint8 *
um_gguf_get_bytes (UmGguf *g, gsize *len)
{
  if (len)
    *len = g->len;
  return g->data;
}

guint
um_gguf_n_kv (UmGguf *g)
{
  return g->kvs->len;
}

const char *
um_gguf_kv_key (UmGguf *g, guint i)
{
  g_return_val_if_fail (i < g->kvs->len, NULL);
  return g_array_index (g->kvs, Kv, i).key;
}

UmGgufType
um_gguf_kv_type (UmGguf *g, guint i)
{
  g_return_val_if_fail (i < g->kvs->len, UM_GGUF_N_TYPES);
  return g_array_index (g->kvs, Kv, i).type;
}

gint
um_gguf_find_key (UmGguf *g, const char *key)
{
  return (gint) GPOINTER_TO_UINT (g_hash_table_lookup (g->kv_index, key)) - 1;
}

const guint8 *
um_gguf_kv_raw (UmGguf *g, guint i, gsize *len)
{
  const Kv *kv;
  g_return_val_if_fail (i < g->kvs->len, NULL);
  kv = &g_array_index (g->kvs, Kv, i);
  *len = kv->raw_len;
  return kv->raw;
}

static Kv *
lookup (UmGguf *g, const char *key, GError **error)
{
  gint i = um_gguf_find_key (g, key);
  if (i < 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: key “%s” is missing", g->name, key);
      return NULL;
    }
  return &g_array_index (g->kvs, Kv, i);
}

static gboolean
wrong_type (UmGguf *g, const Kv *kv, const char *expected, GError **error)
{
  if (kv->type == UM_GGUF_ARRAY)
    g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                 "%s: key “%s” is an array of %s, expected %s",
                 g->name, kv->key, type_names[kv->elem_type], expected);
  else
    g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: key “%s” has type %s, expected %s",
                 g->name, kv->key, type_names[kv->type], expected);
  return FALSE;
}

static gboolean
does_not_fit (UmGguf *g, const char *key, gboolean neg, gint64 sv, guint64 uv,
              const char *target, GError **error)
{
  if (neg)
    g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                 "%s: key “%s”: value %" G_GINT64_FORMAT " does not fit in %s",
                 g->name, key, sv, target);
  else
    g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                 "%s: key “%s”: value %" G_GUINT64_FORMAT " does not fit in %s",
                 g->name, key, uv, target);
  return FALSE;
}

gboolean
um_gguf_get_u64 (UmGguf *g, const char *key, guint64 *out, GError **error)
{
  Kv *kv = lookup (g, key, error);
  gboolean neg;
  gint64 sv = 0;
  guint64 uv = 0;

  if (kv == NULL)
    return FALSE;
  if (!type_is_integer (kv->type))
    return wrong_type (g, kv, "an integer", error);
  load_int (kv->type, kv->value, &neg, &sv, &uv);
  if (neg)
    return does_not_fit (g, key, neg, sv, uv, "an unsigned integer", error);
  *out = uv;
  return TRUE;
}

gboolean
um_gguf_get_u32 (UmGguf *g, const char *key, guint32 *out, GError **error)
{
  guint64 v;

  if (!um_gguf_get_u64 (g, key, &v, error))
    return FALSE;
  if (v > G_MAXUINT32)
    return does_not_fit (g, key, FALSE, 0, v, "uint32", error);
  *out = (guint32) v;
  return TRUE;
}

gboolean
um_gguf_get_i64 (UmGguf *g, const char *key, gint64 *out, GError **error)
{
  Kv *kv = lookup (g, key, error);
  gboolean neg;
  gint64 sv = 0;
  guint64 uv = 0;

  if (kv == NULL)
    return FALSE;
  if (!type_is_integer (kv->type))
    return wrong_type (g, kv, "an integer", error);
  load_int (kv->type, kv->value, &neg, &sv, &uv);
  if (neg)
    *out = sv;
  else if (uv > G_MAXINT64)
    return does_not_fit (g, key, neg, sv, uv, "int64", error);
  else
    *out = (gint64) uv;
  return TRUE;
}

gboolean
um_gguf_get_f64 (UmGguf *g, const char *key, double *out, GError **error)
{
  Kv *kv = lookup (g, key, error);
  gboolean neg;
  gint64 sv = 0;
  guint64 uv = 0;

  if (kv == NULL)
    return FALSE;
  if (kv->type == UM_GGUF_FLOAT32)
    *out = le_f32 (kv->value);
  else if (kv->type == UM_GGUF_FLOAT64)
    *out = le_f64 (kv->value);
  else if (type_is_integer (kv->type))
    {
      load_int (kv->type, kv->value, &neg, &sv, &uv);
      *out = neg ? (double) sv : (double) uv;
    }
  else
    return wrong_type (g, kv, "a number", error);
  return TRUE;
}

gboolean
um_gguf_get_bool (UmGguf *g, const char *key, gboolean *out, GError **error)
{
  Kv *kv = lookup (g, key, error);

  if (kv == NULL)
    return FALSE;
  if (kv->type != UM_GGUF_BOOL)
    return wrong_type (g, kv, "bool", error);
  *out = kv->value[0] != 0;
  return TRUE;
}

const char *
um_gguf_get_string (UmGguf *g, const char *key, GError **error)
{
  Kv *kv = lookup (g, key, error);

  if (kv == NULL)
    return NULL;
  if (kv->type != UM_GGUF_STRING)
    {
      wrong_type (g, kv, "string", error);
      return NULL;
    }
  return kv->str;
}

static Kv *
lookup_array (UmGguf *g, const char *key, GError **error)
{
  Kv *kv = lookup (g, key, error);

  if (kv == NULL)
    return NULL;
  if (kv->type != UM_GGUF_ARRAY)
    {
      wrong_type (g, kv, "an array", error);
      return NULL;
    }
  return kv;
}

gboolean
um_gguf_get_array_info (UmGguf *g, const char *key, UmGgufType *elem_type,
                        guint64 *count, GError **error)
{
  Kv *kv = lookup_array (g, key, error);

  if (kv == NULL)
    return FALSE;
  if (elem_type)
    *elem_type = kv->elem_type;
  if (count)
    *count = kv->count;
  return TRUE;
}

/* Walks a validated string array. The vector and all the strings are one
 * allocation (pointers first, then the NUL-terminated copies): a 126k-token
 * vocabulary costs one malloc, and a hostile array of empty strings at most
 * about twice its size in the file. */
static char **
build_strv (const Kv *kv)
{
  gsize ptrs = (kv->count + 1) * sizeof (char *);
  gsize total = ptrs;
  const guint8 *q = kv->value;
  char **strv;
  char *dst;

  for (guint64 i = 0; i < kv->count; i++)
    {
      guint64 len = le_u64 (q);
      total += len + 1;
      q += 8 + len;
    }
  strv = g_malloc (total);
  dst = (char *) strv + ptrs;
  q = kv->value;
  for (guint64 i = 0; i < kv->count; i++)
    {
      guint64 len = le_u64 (q);
      strv[i] = dst;
      memcpy (dst, q + 8, len);
      dst[len] = '\0';
      dst += len + 1;
      q += 8 + len;
    }
  strv[kv->count] = NULL;
  return strv;
}

const char * const *
um_gguf_get_string_array (UmGguf *g, const char *key, guint64 *count, GError **error)
{
  Kv *kv = lookup_array (g, key, error);

  if (kv == NULL)
    return NULL;
  if (kv->elem_type != UM_GGUF_STRING)
    {
      wrong_type (g, kv, "an array of strings", error);
      return NULL;
    }
  if (g_once_init_enter (&kv->strv))
    g_once_init_leave (&kv->strv, build_strv (kv));
  if (count)
    *count = kv->count;
  return (const char * const *) kv->strv;
}

const void *
um_gguf_get_array_data (UmGguf *g, const char *key, UmGgufType *elem_type,
                        guint64 *count, GError **error)
{
  Kv *kv = lookup_array (g, key, error);

  if (kv == NULL)
    return NULL;
  if (kv->elem_type == UM_GGUF_STRING)
    {
      wrong_type (g, kv, "a numeric array", error);
      return NULL;
    }
  if (elem_type)
    *elem_type = kv->elem_type;
  if (count)
    *count = kv->count;
  return kv->value;
}

/* An integer array as int32 (@is_signed) or uint32 values, each checked
 * to fit: one loop for both getters. */
static gboolean
get_int_array (UmGguf *g, const char *key, gboolean is_signed, void **out_copy, guint64 *count, GError **error)
{
  Kv *kv = lookup_array (g, key, error);
  g_autofree guint32 *copy = NULL;
  gsize size;

  if (kv == NULL)
    return FALSE;
  if (!type_is_integer (kv->elem_type))
    return wrong_type (g, kv, "an array of integers", error);
  size = type_sizes[kv->elem_type];
  /* count * size <= file size, so this is bounded by the file. */
  copy = kv->count ? g_new (guint32, kv->count) : NULL;
  for (guint64 i = 0; i < kv->count; i++)
    {
      gboolean neg;
      gint64 sv = 0;
      guint64 uv = 0;

      load_int (kv->elem_type, kv->value + i * size, &neg, &sv, &uv);
      if (is_signed ? (neg ? sv < G_MININT32 : uv > G_MAXINT32) : (neg || uv > G_MAXUINT32))
        {
          g_autofree char *what = g_strdup_printf ("%s[%" G_GUINT64_FORMAT "]", key, i);
          return does_not_fit (g, what, neg, sv, uv, is_signed ? "int32" : "uint32", error);
        }
      if (is_signed)
        ((gint32 *) copy)[i] = neg ? (gint32) sv : (gint32) uv;
      else
        copy[i] = (guint32) uv;
    }
  *out_copy = g_steal_pointer (&copy);
  if (count)
    *count = kv->count;
  return TRUE;
}

gboolean
um_gguf_get_int32_array (UmGguf *g, const char *key, gint32 **out_copy,
                         guint64 *count, GError **error)
{
  return get_int_array (g, key, TRUE, (void **) out_copy, count, error);
}

gboolean
um_gguf_get_u32_array (UmGguf *g, const char *key, guint32 **out_copy,
                       guint64 *count, GError **error)
{
  return get_int_array (g, key, FALSE, (void **) out_copy, count, error);
}

gboolean
um_gguf_get_f32_array (UmGguf *g, const char *key, float **out_copy,
                       guint64 *count, GError **error)
{
  Kv *kv = lookup_array (g, key, error);
  float *copy;

  if (kv == NULL)
    return FALSE;
  if (kv->elem_type != UM_GGUF_FLOAT32 && kv->elem_type != UM_GGUF_FLOAT64)
    return wrong_type (g, kv, "an array of floats", error);
  copy = kv->count ? g_new (float, kv->count) : NULL;
  for (guint64 i = 0; i < kv->count; i++)
    copy[i] = kv->elem_type == UM_GGUF_FLOAT32
              ? le_f32 (kv->value + i * 4) : (float) le_f64 (kv->value + i * 8);
  *out_copy = copy;
  if (count)
    *count = kv->count;
  return TRUE;
}

UmTensorTable *
um_gguf_get_tensors (UmGguf *g)
{
  return g->tensors;
}

UmTensorTable *
um_gguf_steal_tensors (UmGguf *g)
{
  return g_steal_pointer (&g->tensors);
}

/* ---- formatting for inspect -------------------------------------------- */

/* Shortest %g form that reads back as the same value (so 1e-5 stored as a
 * float prints as 1e-05, not 9.99999975e-06). */
static void
append_float (GString *s, double v, gboolean is_f32)
{
  char buf[G_ASCII_DTOSTR_BUF_SIZE];
  char fmt[8];

  for (int prec = is_f32 ? 6 : 15; ; prec++)
    {
      double back;

      g_snprintf (fmt, sizeof fmt, "%%.%dg", prec);
      g_ascii_formatd (buf, sizeof buf, fmt, v);
      back = g_ascii_strtod (buf, NULL);
      if (!isfinite (v) || prec >= (is_f32 ? 9 : 17)
          || (is_f32 ? (float) back == (float) v : back == v))
        break;
    }
  g_string_append (s, buf);
}

/* Quoted, escaped, shortened to about SUMMARY_STRING_CHARS characters;
 * invalid UTF-8 bytes are shown as \xNN. */
static void
append_quoted (GString *s, const guint8 *bytes, guint64 len)
{
  const char *p = (const char *) bytes;
  const char *end = p + len;
  guint chars = 0;

  g_string_append_c (s, '"');
  while (p < end)
    {
      gunichar c;

      if (chars++ >= SUMMARY_STRING_CHARS)
        {
          g_string_append (s, "…");
          break;
        }
      c = g_utf8_get_char_validated (p, end - p);
      if (c == (gunichar) -1 || c == (gunichar) -2)
        {
          g_string_append_printf (s, "\\x%02x", (guint8) *p);
          p++;
          continue;
        }
      switch (c)
        {
        case '"':  g_string_append (s, "\\\""); break;
        case '\\': g_string_append (s, "\\\\"); break;
        case '\n': g_string_append (s, "\\n"); break;
        case '\t': g_string_append (s, "\\t"); break;
        case '\r': g_string_append (s, "\\r"); break;
        default:
          if (c < 0x20 || c == 0x7f)
            g_string_append_printf (s, "\\x%02x", (guint) c);
          else
            g_string_append_len (s, p, g_utf8_next_char (p) - p);
        }
      p = g_utf8_next_char (p);
    }
  g_string_append_c (s, '"');
}

static void
append_scalar (GString *s, UmGgufType t, const guint8 *v)
{
  gboolean neg;
  gint64 sv = 0;
  guint64 uv = 0;

  switch (t)
    {
    case UM_GGUF_FLOAT32: append_float (s, le_f32 (v), TRUE); break;
    case UM_GGUF_FLOAT64: append_float (s, le_f64 (v), FALSE); break;
    case UM_GGUF_BOOL:    g_string_append (s, v[0] ? "true" : "false"); break;
    default:
      load_int (t, v, &neg, &sv, &uv);
      if (neg)
        g_string_append_printf (s, "%" G_GINT64_FORMAT, sv);
      else
        g_string_append_printf (s, "%" G_GUINT64_FORMAT, uv);
    }
}

char *
um_gguf_kv_to_string (UmGguf *g, guint i)
{
  const Kv *kv;
  GString *s;

  g_return_val_if_fail (i < g->kvs->len, NULL);
  kv = &g_array_index (g->kvs, Kv, i);
  s = g_string_new (NULL);
  if (kv->type == UM_GGUF_STRING)
    append_quoted (s, kv->value, kv->len);
  else if (kv->type == UM_GGUF_ARRAY)
    {
      const guint8 *q = kv->value;
      guint64 shown = MIN (kv->count, SUMMARY_ITEMS);

      g_string_append_printf (s, "array[%s, %" G_GUINT64_FORMAT "] [",
                              type_names[kv->elem_type], kv->count);
      for (guint64 j = 0; j < shown; j++)
        {
          if (j)
            g_string_append (s, ", ");
          if (kv->elem_type == UM_GGUF_STRING)
            {
              guint64 len = le_u64 (q);
              append_quoted (s, q + 8, len);
              q += 8 + len;
            }
          else
            {
              append_scalar (s, kv->elem_type, q);
              q += type_sizes[kv->elem_type];
            }
        }
      if (kv->count > shown)
        g_string_append (s, ", …");
      g_string_append_c (s, ']');
    }
  else
    append_scalar (s, kv->type, kv->value);
  return g_string_free (s, FALSE);
}

/* um-make-malformed-gguf.c — writes the malformed GGUF corpus used by
 * test-gguf and as fuzzing seeds (tests/data/malformed/).
 *
 * Every file is a small, otherwise valid GGUF with exactly one defect, so
 * each exercises one check of the reader. The serializer here is
 * deliberately independent of the engine's writer: it must be able to
 * write what the writer never would.
 *
 *   cc -std=c11 -O1 tests/tools/um-make-malformed-gguf.c \
 *      $(pkg-config --cflags --libs glib-2.0) -o /tmp/um-make-malformed-gguf
 *   /tmp/um-make-malformed-gguf tests/data/malformed
 *   /tmp/um-make-malformed-gguf --valid /tmp/base.gguf   # the unbroken base
 */
#include <glib.h>
#include <glib/gstdio.h>
#include <string.h>

enum { T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64 };
enum { G_F32 = 0, G_Q8_0 = 8 };

typedef struct {
  char       *key;
  GByteArray *value;   /* u32 type + value */
} Kv;

typedef struct {
  const char *name;
  guint32     n_dims;
  guint64     ne[8];
  guint32     type;
  guint64     offset;
} Ti;

typedef struct {
  char     magic[4];
  guint32  version;
  gint64   n_tensors;      /* -1: the real count */
  gint64   n_kv;           /* -1: the real count */
  Kv       kvs[16];
  guint    n_kvs;
  Ti       tis[8];
  guint    n_tis;
  guint32  align;          /* padding used before the data section */
  guint    data_len;       /* data bytes written (then padded to align) */
} Desc;

/* Byte offsets recorded while serializing, for truncations and patches. */
typedef struct {
  gsize kv_start[16];
  gsize ti_start[8];
  gsize header_end;        /* end of tensor infos */
  gsize data_start;
} Marks;

/* ---- encoding ---------------------------------------------------------- */

static void
put_u32 (GByteArray *b, guint32 v)
{
  v = GUINT32_TO_LE (v);
  g_byte_array_append (b, (guint8 *) &v, 4);
}

static void
put_u64 (GByteArray *b, guint64 v)
{
  v = GUINT64_TO_LE (v);
  g_byte_array_append (b, (guint8 *) &v, 8);
}

static void
put_str_len (GByteArray *b, const char *s, gsize len)
{
  put_u64 (b, len);
  g_byte_array_append (b, (const guint8 *) s, len);
}

static void
put_str (GByteArray *b, const char *s)
{
  put_str_len (b, s, strlen (s));
}

static void
patch_u64 (GByteArray *b, gsize off, guint64 v)
{
  v = GUINT64_TO_LE (v);
  memcpy (b->data + off, &v, 8);
}

static GByteArray *
v_u32 (guint32 v)
{
  GByteArray *b = g_byte_array_new ();
  put_u32 (b, T_U32);
  put_u32 (b, v);
  return b;
}

static GByteArray *
v_str (const char *s)
{
  GByteArray *b = g_byte_array_new ();
  put_u32 (b, T_STR);
  put_str (b, s);
  return b;
}

static GByteArray *
v_bool (guint8 v)
{
  GByteArray *b = g_byte_array_new ();
  put_u32 (b, T_BOOL);
  g_byte_array_append (b, &v, 1);
  return b;
}

static GByteArray *
v_str_array (const char *const *s, guint n)
{
  GByteArray *b = g_byte_array_new ();
  put_u32 (b, T_ARR);
  put_u32 (b, T_STR);
  put_u64 (b, n);
  for (guint i = 0; i < n; i++)
    put_str (b, s[i]);
  return b;
}

static GByteArray *
v_i32_array (const gint32 *v, guint n)
{
  GByteArray *b = g_byte_array_new ();
  put_u32 (b, T_ARR);
  put_u32 (b, T_I32);
  put_u64 (b, n);
  for (guint i = 0; i < n; i++)
    put_u32 (b, (guint32) v[i]);
  return b;
}

static GByteArray *
v_raw (guint32 type, const void *bytes, gsize len)
{
  GByteArray *b = g_byte_array_new ();
  put_u32 (b, type);
  g_byte_array_append (b, bytes, len);
  return b;
}

static void
add_kv (Desc *d, const char *key, GByteArray *value)
{
  d->kvs[d->n_kvs].key = g_strdup (key);
  d->kvs[d->n_kvs].value = value;
  d->n_kvs++;
}

static Kv *
find_kv (Desc *d, const char *key)
{
  for (guint i = 0; i < d->n_kvs; i++)
    if (strcmp (d->kvs[i].key, key) == 0)
      return &d->kvs[i];
  g_error ("no key %s", key);
}

static void
replace_kv (Desc *d, const char *key, GByteArray *value)
{
  Kv *kv = find_kv (d, key);
  g_byte_array_unref (kv->value);
  kv->value = value;
}

static void
desc_clear (Desc *d)
{
  for (guint i = 0; i < d->n_kvs; i++)
    {
      g_free (d->kvs[i].key);
      g_byte_array_unref (d->kvs[i].value);
    }
}

/* The unbroken base: 5 KVs of several types, an F32 tensor [2, 4] at 0 and
 * a Q8_0 tensor [1, 32] at 32, alignment 32. */
static void
base_desc (Desc *d)
{
  static const char *const tokens[] = { "a", "b", "c" };
  static const gint32 types[] = { 1, 1, 3 };

  memset (d, 0, sizeof *d);
  memcpy (d->magic, "GGUF", 4);
  d->version = 3;
  d->n_tensors = -1;
  d->n_kv = -1;
  add_kv (d, "general.architecture", v_str ("llada"));
  add_kv (d, "general.alignment", v_u32 (32));
  add_kv (d, "llada.block_count", v_u32 (2));
  add_kv (d, "tokenizer.ggml.tokens", v_str_array (tokens, 3));
  add_kv (d, "tokenizer.ggml.token_type", v_i32_array (types, 3));
  d->tis[0] = (Ti) { "a.weight", 2, { 4, 2 }, G_F32, 0 };
  d->tis[1] = (Ti) { "b.weight", 2, { 32, 1 }, G_Q8_0, 32 };
  d->n_tis = 2;
  d->align = 32;
  d->data_len = 32 + 34;
}

static GByteArray *
serialize (const Desc *d, Marks *m)
{
  GByteArray *b = g_byte_array_new ();
  Marks dummy;

  if (m == NULL)
    m = &dummy;
  g_byte_array_append (b, (const guint8 *) d->magic, 4);
  put_u32 (b, d->version);
  put_u64 (b, d->n_tensors >= 0 ? (guint64) d->n_tensors : d->n_tis);
  put_u64 (b, d->n_kv >= 0 ? (guint64) d->n_kv : d->n_kvs);
  for (guint i = 0; i < d->n_kvs; i++)
    {
      m->kv_start[i] = b->len;
      put_str (b, d->kvs[i].key);
      g_byte_array_append (b, d->kvs[i].value->data, d->kvs[i].value->len);
    }
  for (guint i = 0; i < d->n_tis; i++)
    {
      m->ti_start[i] = b->len;
      put_str (b, d->tis[i].name);
      put_u32 (b, d->tis[i].n_dims);
      for (guint j = 0; j < d->tis[i].n_dims && j < 8; j++)
        put_u64 (b, d->tis[i].ne[j]);
      put_u32 (b, d->tis[i].type);
      put_u64 (b, d->tis[i].offset);
    }
  m->header_end = b->len;
  while (b->len % d->align)
    g_byte_array_append (b, (const guint8 *) "", 1);
  m->data_start = b->len;
  /* Recognisable data: F32 1.0, 2.0, ... then a byte ramp. */
  for (guint i = 0; i < d->data_len; i++)
    {
      guint8 v = i < 32 ? ((i % 4) == 3 ? 0x3f + (i / 16) : (i % 4) == 2 ? 0x80 : 0) : (guint8) i;
      g_byte_array_append (b, &v, 1);
    }
  while (b->len % d->align)
    g_byte_array_append (b, (const guint8 *) "", 1);
  return b;
}

/* ---- output ------------------------------------------------------------ */

static const char *out_dir;
static guint n_written;

static void
emit_len (const char *name, GByteArray *b, gsize len)
{
  g_autofree char *path = g_build_filename (out_dir, name, NULL);
  g_autoptr (GError) error = NULL;

  g_assert (len <= b->len);
  if (!g_file_set_contents (path, (const char *) b->data, len, &error))
    g_error ("%s", error->message);
  n_written++;
}

static void
emit (const char *name, GByteArray *b)
{
  emit_len (name, b, b->len);
  g_byte_array_unref (b);
}

/* Writes the first @len bytes of @d serialized with its KV count set to
 * @last_kv + 1 and no tensors (the KVs' offsets do not change). */
static void
emit_trunc (const char *name, Desc *d, guint last_kv, gsize len)
{
  gint64 n_kv = d->n_kv, n_tensors = d->n_tensors;
  GByteArray *b;

  d->n_kv = last_kv + 1;
  d->n_tensors = 0;
  b = serialize (d, NULL);
  emit_len (name, b, len);
  g_byte_array_unref (b);
  d->n_kv = n_kv;
  d->n_tensors = n_tensors;
}

/* Serializes @d, frees it and writes it as @name. */
static void
emit_desc (const char *name, Desc *d)
{
  emit (name, serialize (d, NULL));
  desc_clear (d);
}

int
main (int argc, char **argv)
{
  Desc d;
  Marks m;
  GByteArray *b;

  if (argc == 3 && strcmp (argv[1], "--valid") == 0)
    {
      g_autoptr (GError) error = NULL;
      base_desc (&d);
      b = serialize (&d, NULL);
      if (!g_file_set_contents (argv[2], (const char *) b->data, b->len, &error))
        g_error ("%s", error->message);
      g_byte_array_unref (b);
      desc_clear (&d);
      return 0;
    }
  if (argc != 2)
    {
      g_printerr ("usage: %s OUTDIR | --valid FILE\n", argv[0]);
      return 2;
    }
  out_dir = argv[1];
  g_mkdir_with_parents (out_dir, 0755);

  /* --- truncations of the base at interesting points --- */
  base_desc (&d);
  b = serialize (&d, &m);
  emit_len ("empty.gguf", b, 0);
  emit_len ("trunc-magic.gguf", b, 3);
  emit_len ("trunc-version.gguf", b, 6);
  emit_len ("trunc-header.gguf", b, 20);
  /* A real prefix: caught by the count check before any KV is read. */
  emit_len ("trunc-in-metadata.gguf", b, m.kv_start[1] + 3);
  /* The same truncations with the header's counts cut down to what is
   * before the cut, so that the check inside each field is what fires. */
  emit_trunc ("trunc-in-key-length.gguf", &d, 2, m.kv_start[2] + 5);
  emit_trunc ("trunc-in-key.gguf", &d, 0, m.kv_start[0] + 8 + 12);
  emit_trunc ("trunc-in-value-type.gguf", &d, 0, m.kv_start[0] + 8 + 20 + 2);
  emit_trunc ("trunc-in-string-length.gguf", &d, 0, m.kv_start[0] + 8 + 20 + 4 + 5);
  emit_trunc ("trunc-in-string-value.gguf", &d, 0, m.kv_start[0] + 8 + 20 + 4 + 8 + 2);
  emit_trunc ("trunc-in-scalar-value.gguf", &d, 2, m.kv_start[2] + 8 + 17 + 4 + 2);
  emit_trunc ("trunc-in-array-header.gguf", &d, 3, m.kv_start[3] + 8 + 21 + 4 + 4 + 3);
  emit_trunc ("trunc-in-string-array.gguf", &d, 3, m.kv_start[3] + 8 + 21 + 4 + 4 + 8 + 9 + 9 + 8);
  emit_trunc ("trunc-in-int-array.gguf", &d, 4, m.kv_start[4] + 8 + 25 + 4 + 4 + 8 + 6);
  emit_len ("trunc-in-tensor-name.gguf", b, m.ti_start[0] + 8 + 3);
  emit_len ("trunc-in-tensor-dims.gguf", b, m.ti_start[1] + 8 + 8 + 4 + 8 + 3);
  emit_len ("trunc-in-tensor-offset.gguf", b, m.header_end - 3);
  emit_len ("trunc-before-data.gguf", b, m.header_end);
  emit_len ("trunc-in-data.gguf", b, m.data_start + 40);
  emit_len ("trunc-in-last-tensor.gguf", b, m.data_start + 65);
  g_byte_array_unref (b);
  desc_clear (&d);

  /* --- header --- */
  base_desc (&d);
  memcpy (d.magic, "GGML", 4);
  emit_desc ("bad-magic.gguf", &d);

  base_desc (&d);
  d.version = 1;
  emit_desc ("version-1.gguf", &d);

  base_desc (&d);
  d.version = 4;
  emit_desc ("version-4.gguf", &d);

  base_desc (&d);
  d.version = GUINT32_SWAP_LE_BE (3);
  emit_desc ("version-big-endian.gguf", &d);

  base_desc (&d);
  d.n_tensors = G_GINT64_CONSTANT (1) << 60;
  emit_desc ("n-tensors-huge.gguf", &d);

  base_desc (&d);
  d.n_kv = G_GINT64_CONSTANT (1) << 60;
  emit_desc ("n-kv-huge.gguf", &d);

  base_desc (&d);
  d.n_kv = G_MAXINT64;
  d.n_tensors = G_MAXINT64;
  emit_desc ("counts-max.gguf", &d);

  /* One KV more than there is: the first tensor info is read as a KV. */
  base_desc (&d);
  d.n_kv = 6;
  emit_desc ("n-kv-plus-one.gguf", &d);

  /* One tensor more than there is: the padding/data is read as an info. */
  base_desc (&d);
  d.n_tensors = 3;
  emit_desc ("n-tensors-plus-one.gguf", &d);

  /* --- lying lengths --- */
  base_desc (&d);
  b = serialize (&d, &m);
  patch_u64 (b, m.kv_start[0], G_GUINT64_CONSTANT (1) << 63);
  emit ("key-length-huge.gguf", b);
  desc_clear (&d);

  base_desc (&d);
  b = serialize (&d, &m);
  patch_u64 (b, m.kv_start[0] + 8 + 20 + 4, G_GUINT64_CONSTANT (1) << 63);
  emit ("string-length-huge.gguf", b);
  desc_clear (&d);

  base_desc (&d);
  b = serialize (&d, &m);
  patch_u64 (b, m.kv_start[0] + 8 + 20 + 4, G_MAXUINT64);
  emit ("string-length-max.gguf", b);
  desc_clear (&d);

  base_desc (&d);
  b = serialize (&d, &m);
  /* tokens: key len, key (21), type, elem type, count */
  patch_u64 (b, m.kv_start[3] + 8 + 21 + 4 + 4, G_GUINT64_CONSTANT (1) << 62);
  emit ("array-count-huge.gguf", b);
  desc_clear (&d);

  base_desc (&d);
  b = serialize (&d, &m);
  /* token_type (25 bytes key), int32 elements: 2^62 * 4 overflows 64 bits. */
  patch_u64 (b, m.kv_start[4] + 8 + 25 + 4 + 4, G_GUINT64_CONSTANT (1) << 62);
  emit ("array-count-overflow.gguf", b);
  desc_clear (&d);

  base_desc (&d);
  b = serialize (&d, &m);
  /* The second string of the tokens array lies. */
  patch_u64 (b, m.kv_start[3] + 8 + 21 + 4 + 4 + 8 + 9, G_GUINT64_CONSTANT (1) << 63);
  emit ("array-string-length-huge.gguf", b);
  desc_clear (&d);

  base_desc (&d);
  b = serialize (&d, &m);
  patch_u64 (b, m.ti_start[1], G_GUINT64_CONSTANT (1) << 63);
  emit ("tensor-name-length-huge.gguf", b);
  desc_clear (&d);

  /* --- value types --- */
  base_desc (&d);
  replace_kv (&d, "llada.block_count", v_raw (13, "\2\0\0\0", 4));
  emit_desc ("unknown-value-type.gguf", &d);

  base_desc (&d);
  replace_kv (&d, "llada.block_count", v_raw (0xffffffffu, "\2\0\0\0", 4));
  emit_desc ("unknown-value-type-max.gguf", &d);

  base_desc (&d);
  {
    GByteArray *v = g_byte_array_new ();
    put_u32 (v, T_ARR);
    put_u32 (v, 0xffffffffu);
    put_u64 (v, 1);
    put_u32 (v, 0);
    replace_kv (&d, "tokenizer.ggml.token_type", v);
  }
  emit_desc ("unknown-array-type.gguf", &d);

  base_desc (&d);
  {
    /* [[1, 2]] : an array of one array of int32 */
    GByteArray *v = g_byte_array_new ();
    put_u32 (v, T_ARR);
    put_u32 (v, T_ARR);
    put_u64 (v, 1);
    put_u32 (v, T_I32);
    put_u64 (v, 2);
    put_u32 (v, 1);
    put_u32 (v, 2);
    replace_kv (&d, "tokenizer.ggml.token_type", v);
  }
  emit_desc ("nested-array.gguf", &d);

  base_desc (&d);
  add_kv (&d, "llada.attention.causal", v_bool (2));
  emit_desc ("bool-value-2.gguf", &d);

  base_desc (&d);
  {
    GByteArray *v = g_byte_array_new ();
    put_u32 (v, T_ARR);
    put_u32 (v, T_BOOL);
    put_u64 (v, 3);
    g_byte_array_append (v, (const guint8 *) "\1\0\7", 3);
    add_kv (&d, "test.flags", v);
  }
  emit_desc ("bool-array-value-7.gguf", &d);

  /* --- keys --- */
  base_desc (&d);
  add_kv (&d, "llada.block_count", v_u32 (3));
  emit_desc ("duplicate-key.gguf", &d);

  base_desc (&d);
  b = serialize (&d, &m);
  /* "general.architecture" -> length 0, the key bytes become garbage after */
  {
    GByteArray *c = g_byte_array_new ();
    g_byte_array_append (c, b->data, m.kv_start[0]);
    put_str (c, "");
    g_byte_array_append (c, b->data + m.kv_start[0] + 8 + 20, b->len - m.kv_start[0] - 8 - 20);
    emit ("key-empty.gguf", c);
  }
  b->data[m.kv_start[0] + 8 + 3] = 0;
  emit_len ("key-nul.gguf", b, b->len);
  b->data[m.kv_start[0] + 8 + 3] = 0xff;
  emit_len ("key-invalid-utf8.gguf", b, b->len);
  g_byte_array_unref (b);
  desc_clear (&d);

  base_desc (&d);
  b = serialize (&d, &m);
  b->data[m.ti_start[0] + 8 + 1] = 0xc0;
  emit ("tensor-name-invalid-utf8.gguf", b);
  desc_clear (&d);

  /* --- alignment --- */
  base_desc (&d);
  replace_kv (&d, "general.alignment", v_u32 (0));
  emit_desc ("alignment-zero.gguf", &d);

  base_desc (&d);
  replace_kv (&d, "general.alignment", v_u32 (48));
  emit_desc ("alignment-not-pow2.gguf", &d);

  base_desc (&d);
  replace_kv (&d, "general.alignment", v_u32 (1u << 31));
  emit_desc ("alignment-huge.gguf", &d);

  base_desc (&d);
  replace_kv (&d, "general.alignment", v_str ("32"));
  emit_desc ("alignment-string.gguf", &d);

  /* --- tensor infos --- */
  base_desc (&d);
  d.tis[1].name = "a.weight";
  emit_desc ("duplicate-tensor.gguf", &d);

  base_desc (&d);
  d.tis[1].type = 99;
  emit_desc ("unknown-tensor-type.gguf", &d);

  base_desc (&d);
  d.tis[1].type = 10;   /* Q2_K: known to ggml, not to us */
  emit_desc ("unsupported-tensor-type.gguf", &d);

  base_desc (&d);
  d.tis[0] = (Ti) { "a.weight", 5, { 2, 2, 2, 1, 1 }, G_F32, 0 };
  emit_desc ("n-dims-5.gguf", &d);

  base_desc (&d);
  d.tis[0].n_dims = 0;
  emit_desc ("n-dims-0.gguf", &d);

  base_desc (&d);
  d.tis[0].n_dims = 0xffffffffu;
  emit_desc ("n-dims-max.gguf", &d);

  base_desc (&d);
  d.tis[0].ne[1] = 0;
  emit_desc ("zero-dim.gguf", &d);

  base_desc (&d);
  d.tis[0] = (Ti) { "a.weight", 3, { 1ull << 32, 1ull << 32, 1ull << 32 }, G_F32, 0 };
  emit_desc ("overflowing-shape.gguf", &d);

  base_desc (&d);
  d.tis[0] = (Ti) { "a.weight", 2, { 1ull << 31, 1ull << 31 }, G_F32, 0 };
  emit_desc ("shape-bytes-overflow.gguf", &d);   /* 2^62 elements * 4 bytes */

  base_desc (&d);
  d.tis[0].ne[0] = G_MAXUINT64;
  d.tis[0].n_dims = 1;
  emit_desc ("dim-max.gguf", &d);

  base_desc (&d);
  d.tis[1].ne[0] = 48;
  emit_desc ("partial-block.gguf", &d);

  base_desc (&d);
  d.tis[0].ne[1] = 1 << 20;   /* 16 MiB of F32 in a 160-byte file */
  emit_desc ("tensor-larger-than-file.gguf", &d);

  /* --- placement --- */
  base_desc (&d);
  d.tis[1].offset = 40;
  emit_desc ("misaligned-offset.gguf", &d);

  base_desc (&d);
  d.tis[1].offset = 1ull << 40;
  emit_desc ("offset-past-end.gguf", &d);

  base_desc (&d);
  d.tis[1].offset = G_MAXUINT64 - 31;   /* aligned; start + offset wraps */
  emit_desc ("offset-wraps.gguf", &d);

  base_desc (&d);
  d.tis[1].offset = 64;   /* 64 + 34 > 96 */
  emit_desc ("data-past-end.gguf", &d);

  base_desc (&d);
  d.tis[1].offset = 0;
  emit_desc ("overlapping-tensors.gguf", &d);

  g_print ("wrote %u files to %s\n", n_written, out_dir);
  return 0;
}

/* Safetensors: good files of every float type, and one test per kind of
 * malformed file — each must give a GError naming the file and the field,
 * never a crash. */
#include <glib/gstdio.h>
#include <string.h>

#include "um-error.h"
#include "um-safetensors.h"
#include "um-test-util.h"

/* A file image: 8-byte length, the header, then @data_len bytes of data. */
static GBytes *
make_file (const char *header, gsize data_len)
{
  gsize hlen = strlen (header);
  guint8 *buf = g_malloc0 (8 + hlen + data_len);
  guint64 le = GUINT64_TO_LE ((guint64) hlen);
  memcpy (buf, &le, 8);
  memcpy (buf + 8, header, hlen);
  for (gsize i = 0; i < data_len; i++)
    buf[8 + hlen + i] = (guint8) i;
  return g_bytes_new_take (buf, 8 + hlen + data_len);
}

static void
expect_error (const char *header, gsize data_len, gint code, const char *needle)
{
  g_autoptr(GBytes) bytes = make_file (header, data_len);
  g_autoptr(GError) error = NULL;
  gsize len;
  const guint8 *data = g_bytes_get_data (bytes, &len);
  UmTensorTable *t = um_safetensors_open_from_bytes (data, len, "bad.safetensors", &error);

  g_assert_null (t);
  g_assert_error (error, UM_ERROR, code);
  g_assert_nonnull (strstr (error->message, "bad.safetensors"));
  if (needle != NULL && strstr (error->message, needle) == NULL)
    g_error ("message “%s” does not mention “%s”", error->message, needle);
}

static void
test_good (void)
{
  const char *h = "{\"__metadata__\":{\"format\":\"pt\"},"
                  "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                  "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]},"
                  "\"c\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[32,40]}}";
  g_autoptr(GBytes) bytes = make_file (h, 40);
  g_autoptr(GError) error = NULL;
  gsize len;
  const guint8 *data = g_bytes_get_data (bytes, &len);
  g_autoptr(UmTensorTable) t = um_safetensors_open_from_bytes (data, len, "good.safetensors", &error);
  const UmTensorInfo *a, *b, *c;

  g_assert_no_error (error);
  g_assert_cmpuint (um_tensor_table_size (t), ==, 3);
  a = um_tensor_table_lookup (t, "a");
  b = um_tensor_table_lookup (t, "b");
  c = um_tensor_table_lookup (t, "c");
  g_assert_cmpint (a->dtype, ==, UM_DTYPE_F32);
  g_assert_cmpuint (a->shape[0], ==, 2);
  g_assert_cmpuint (a->shape[1], ==, 3);
  g_assert_cmpuint (a->n_bytes, ==, 24);
  g_assert_cmpint (b->dtype, ==, UM_DTYPE_BF16);
  g_assert_cmpint (c->dtype, ==, UM_DTYPE_F16);
  g_assert_true (b->data == a->data + 24);
  g_assert_cmpuint (um_tensor_table_total_bytes (t), ==, 40);
}

static void
test_fixture_file (void)
{
  g_autofree char *dir = um_test_data_path ("tiny-llada");
  g_autoptr(GError) error = NULL;
  g_autoptr(UmTensorTable) t = um_safetensors_open_dir (dir, &error);
  const UmTensorInfo *wte;

  g_assert_no_error (error);
  wte = um_tensor_table_lookup (t, "model.transformer.wte.weight");
  g_assert_nonnull (wte);
  g_assert_cmpuint (wte->shape[0], ==, 512);
  g_assert_cmpuint (wte->shape[1], ==, 64);
  g_assert_cmpstr (wte->file, ==, "model.safetensors");
}

static void
test_short_and_lying_header (void)
{
  g_autoptr(GError) error = NULL;
  const guint8 tiny[4] = { 1, 2, 3, 4 };
  guint8 huge[16] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, '{', '}' };

  g_assert_null (um_safetensors_open_from_bytes (tiny, 4, "bad.safetensors", &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
  g_clear_error (&error);
  g_assert_null (um_safetensors_open_from_bytes (huge, 16, "bad.safetensors", &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
  g_assert_nonnull (strstr (error->message, "header length"));
}

static void
test_malformed_headers (void)
{
  expect_error ("not json at all", 0, UM_ERROR_FORMAT, "JSON");
  expect_error ("{\"a\": ", 0, UM_ERROR_FORMAT, "JSON");
  expect_error ("[1, 2, 3]", 0, UM_ERROR_FORMAT, NULL);
  expect_error ("{\"a\": 5}", 0, UM_ERROR_FORMAT, "“a”");
  expect_error ("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, UM_ERROR_FORMAT, "dtype");
  expect_error ("{\"a\":{\"dtype\":\"Q9\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, UM_ERROR_FORMAT, "unknown dtype");
  expect_error ("{\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, UM_ERROR_UNSUPPORTED, "F64");
  expect_error ("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, UM_ERROR_FORMAT, "shape");
  expect_error ("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, UM_ERROR_FORMAT, "shape[0]");
  expect_error ("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, UM_ERROR_FORMAT, "shape[0]");
  expect_error ("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, UM_ERROR_UNSUPPORTED, "dimensions");
  expect_error ("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, UM_ERROR_FORMAT, "data_offsets");
  expect_error ("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, UM_ERROR_FORMAT, "data_offsets");
  expect_error ("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,\"4\"]}}", 4, UM_ERROR_FORMAT, "data_offsets");
}

static void
test_shape_disagrees_with_offsets (void)
{
  expect_error ("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", 16, UM_ERROR_FORMAT, "needs 16");
}

static void
test_offsets_past_end (void)
{
  expect_error ("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 12, UM_ERROR_FORMAT, "past its end");
  expect_error ("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[9223372036854775800,9223372036854775804]}}",
                8, UM_ERROR_FORMAT, "past its end");
}

static void
test_overflowing_shape (void)
{
  expect_error ("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,4]}}",
                4, UM_ERROR_FORMAT, "overflows");
  expect_error ("{\"a\":{\"dtype\":\"BF16\",\"shape\":[9223372036854775807,4],\"data_offsets\":[0,4]}}",
                4, UM_ERROR_FORMAT, "overflows");
}

static void
test_overlap (void)
{
  expect_error ("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, UM_ERROR_FORMAT, "overlap");
}

/* Truncating the real fixture anywhere must fail cleanly. */
static void
test_truncated_fixture (void)
{
  g_autofree char *path = um_test_data_path ("tiny-llada/model.safetensors");
  g_autofree char *contents = NULL;
  gsize len;

  g_assert_true (g_file_get_contents (path, &contents, &len, NULL));
  for (gsize cut = 0; cut < len; cut += (cut < 4096 ? 7 : 4093))
    {
      g_autoptr(GError) error = NULL;
      UmTensorTable *t = um_safetensors_open_from_bytes ((const guint8 *) contents, cut, "cut.safetensors", &error);
      g_assert_null (t);
      g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
    }
}

static void
test_missing (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *bogus = g_build_filename (dir, "model.safetensors", NULL);
  g_autoptr(GError) error = NULL;

  g_assert_null (um_safetensors_open_dir (dir, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_IO);
  g_clear_error (&error);
  /* an empty file */
  um_test_write_file (bogus, "", 0);
  g_assert_null (um_safetensors_open_dir (dir, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
  g_assert_nonnull (strstr (error->message, "model.safetensors"));
  um_test_rmtree (dir);
}

static void
test_sharded_index_errors (void)
{
  UmTestModelSpec spec;
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *index = g_build_filename (dir, "model.safetensors.index.json", NULL);
  g_autofree char *shard2 = g_build_filename (dir, "model-00002-of-00002.safetensors", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(UmTensorTable) t = NULL;
  g_autofree char *good = NULL;

  um_test_model_spec_init (&spec);
  spec.n_shards = 2;
  spec.n_layers = 1;
  g_assert_true (um_test_write_model (dir, &spec, &error));
  t = um_safetensors_open_dir (dir, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (um_tensor_table_size (t), ==, 12);
  g_assert_true (g_file_get_contents (index, &good, NULL, NULL));

  um_test_write_file (index, "{\"weight_map\": ", -1);
  g_assert_null (um_safetensors_open_dir (dir, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
  g_assert_nonnull (strstr (error->message, "model.safetensors.index.json"));
  g_clear_error (&error);

  um_test_write_file (index, "{\"weight_map\": {\"x\": \"../../etc/passwd\"}}", -1);
  g_assert_null (um_safetensors_open_dir (dir, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
  g_clear_error (&error);

  um_test_write_file (index, "{\"weight_map\": {\"not.there\": \"model-00001-of-00002.safetensors\"}}", -1);
  g_assert_null (um_safetensors_open_dir (dir, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
  g_assert_nonnull (strstr (error->message, "not.there"));
  g_clear_error (&error);

  um_test_write_file (index, good, -1);
  g_unlink (shard2);
  g_assert_null (um_safetensors_open_dir (dir, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_IO);
  g_assert_nonnull (strstr (error->message, "model-00002-of-00002.safetensors"));
  um_test_rmtree (dir);
}

/* The header is JSON from a stranger: each hostile text is a format error
 * naming the file. Texts that do not start with '{' are refused before
 * JSON is parsed at all. */
static void
test_hostile_headers (void)
{
  g_autoptr(GPtrArray) cases = um_test_hostile_json ();

  for (guint i = 0; i < cases->len; i++)
    {
      const UmTestHostileJson *h = g_ptr_array_index (cases, i);
      g_autofree guint8 *buf = g_malloc (8 + h->len);
      guint64 le = GUINT64_TO_LE ((guint64) h->len);
      g_autoptr(GError) error = NULL;
      const char *needle = h->len > 0 && h->text[0] == '{' ? h->needle : "does not start with a JSON object";

      g_test_message ("header: %s", h->name);
      memcpy (buf, &le, 8);
      memcpy (buf + 8, h->text, h->len);
      g_assert_null (um_safetensors_open_from_bytes (buf, 8 + h->len, "bad.safetensors", &error));
      g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
      g_assert_true (g_str_has_prefix (error->message, "bad.safetensors: "));
      if (strstr (error->message, needle) == NULL)
        g_error ("message “%s” does not mention “%s”", error->message, needle);
    }
  /* Writers pad the header with spaces: still a good file. */
  {
    g_autoptr(GBytes) bytes = make_file ("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                                         "\"__metadata__\":{\"format\":\"pt\"}}      ", 4);
    g_autoptr(GError) error = NULL;
    gsize len;
    const guint8 *data = g_bytes_get_data (bytes, &len);
    g_autoptr(UmTensorTable) t = um_safetensors_open_from_bytes (data, len, "padded.safetensors", &error);
    g_assert_no_error (error);
    g_assert_cmpuint (um_tensor_table_size (t), ==, 1);
  }
}

/* The shard index, likewise. */
static void
test_hostile_index (void)
{
  UmTestModelSpec spec;
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *index = g_build_filename (dir, "model.safetensors.index.json", NULL);
  g_autoptr(GPtrArray) cases = um_test_hostile_json ();
  g_autoptr(GError) error = NULL;

  um_test_model_spec_init (&spec);
  spec.n_shards = 2;
  spec.n_layers = 1;
  g_assert_true (um_test_write_model (dir, &spec, &error));
  for (guint i = 0; i < cases->len; i++)
    {
      const UmTestHostileJson *h = g_ptr_array_index (cases, i);
      g_test_message ("index: %s", h->name);
      um_test_write_file (index, h->text, (gssize) h->len);
      g_assert_null (um_safetensors_open_dir (dir, &error));
      g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
      g_assert_true (g_str_has_prefix (error->message, "model.safetensors.index.json: "));
      if (strstr (error->message, h->needle) == NULL)
        g_error ("message “%s” does not mention “%s”", error->message, h->needle);
      g_clear_error (&error);
    }
  um_test_rmtree (dir);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/safetensors/good", test_good);
  g_test_add_func ("/safetensors/fixture", test_fixture_file);
  g_test_add_func ("/safetensors/short-and-lying-header", test_short_and_lying_header);
  g_test_add_func ("/safetensors/malformed-headers", test_malformed_headers);
  g_test_add_func ("/safetensors/shape-vs-offsets", test_shape_disagrees_with_offsets);
  g_test_add_func ("/safetensors/offsets-past-end", test_offsets_past_end);
  g_test_add_func ("/safetensors/overflowing-shape", test_overflowing_shape);
  g_test_add_func ("/safetensors/overlap", test_overlap);
  g_test_add_func ("/safetensors/truncated", test_truncated_fixture);
  g_test_add_func ("/safetensors/missing", test_missing);
  g_test_add_func ("/safetensors/sharded-index", test_sharded_index_errors);
  g_test_add_func ("/safetensors/hostile-headers", test_hostile_headers);
  g_test_add_func ("/safetensors/hostile-index", test_hostile_index);
  return g_test_run ();
}

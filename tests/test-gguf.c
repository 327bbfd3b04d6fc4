/* test-gguf.c — the GGUF reader on real files, the writer round trip and
 * the reader's behaviour on hostile input.
 *
 * Data comes from $UM_TEST_DATA (default tests/data): the tiny-llada and
 * small-kquant GGUF fixtures, their Hugging Face directories (config.json,
 * model.safetensors) and the malformed corpus in malformed/, written by
 * tests/tools/um-make-malformed-gguf.c.
 */
#include <glib.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

#include "um-error.h"
#include "um-gguf.h"

static char *
data_path (const char *name)
{
  const char *dir = g_getenv ("UM_TEST_DATA");
  return g_build_filename (dir && *dir ? dir : "tests/data", name, NULL);
}

static guint64
rd_u64 (const guint8 *p)
{
  guint64 v;
  memcpy (&v, p, 8);
  return GUINT64_FROM_LE (v);
}

/* Reads every byte a consumer could: all KV values and each tensor's first
 * and last byte. Under ASan this proves the accessors stay in bounds. */
static guint
touch_everything (UmGguf *g)
{
  UmTensorTable *t = um_gguf_get_tensors (g);
  guint sum = 0;

  for (guint i = 0; i < um_gguf_n_kv (g); i++)
    {
      g_autofree char *s = um_gguf_kv_to_string (g, i);
      const char *key = um_gguf_kv_key (g, i);
      sum += strlen (s);
      if (um_gguf_kv_type (g, i) == UM_GGUF_ARRAY)
        {
          UmGgufType et;
          guint64 n;
          g_assert_true (um_gguf_get_array_info (g, key, &et, &n, NULL));
          if (et == UM_GGUF_STRING)
            {
              const char * const *v = um_gguf_get_string_array (g, key, &n, NULL);
              g_assert_nonnull (v);
              g_assert_null (v[n]);
              for (guint64 j = 0; j < n; j++)
                sum += strlen (v[j]);
            }
        }
    }
  for (guint i = 0; i < um_tensor_table_size (t); i++)
    {
      const UmTensorInfo *info = um_tensor_table_get (t, i);
      sum += info->data[0] + info->data[info->n_bytes - 1];
    }
  return sum;
}

/* ---- the fixtures ------------------------------------------------------ */

typedef struct {
  const char *file;
  const char *hf_dir;     /* Hugging Face directory with config.json */
  UmDType     main;       /* type of the big matrices */
  gboolean    mixed;      /* *_K_M: attn_v, ffn_down and output in Q6_K */
} Fixture;

static const Fixture fixtures[] = {
  { "tiny-llada-f32.gguf",      "tiny-llada",   UM_DTYPE_F32,  FALSE },
  { "tiny-llada-q8_0.gguf",     "tiny-llada",   UM_DTYPE_Q8_0, FALSE },
  { "tiny-llada-q4_0.gguf",     "tiny-llada",   UM_DTYPE_Q4_0, FALSE },
  { "small-kquant-f32.gguf",    "small-kquant", UM_DTYPE_F32,  FALSE },
  { "small-kquant-q4_1.gguf",   "small-kquant", UM_DTYPE_Q4_1, FALSE },
  { "small-kquant-q5_0.gguf",   "small-kquant", UM_DTYPE_Q5_0, FALSE },
  { "small-kquant-q5_1.gguf",   "small-kquant", UM_DTYPE_Q5_1, FALSE },
  { "small-kquant-q4_k.gguf",   "small-kquant", UM_DTYPE_Q4_K, FALSE },
  { "small-kquant-q5_k.gguf",   "small-kquant", UM_DTYPE_Q5_K, FALSE },
  { "small-kquant-q6_k.gguf",   "small-kquant", UM_DTYPE_Q6_K, FALSE },
  { "small-kquant-q4_k_m.gguf", "small-kquant", UM_DTYPE_Q4_K, TRUE },
  { "small-kquant-q5_k_m.gguf", "small-kquant", UM_DTYPE_Q5_K, TRUE },
};

static JsonObject *
load_config (const char *hf_dir, JsonParser **parser_out)
{
  g_autofree char *rel = g_build_filename (hf_dir, "config.json", NULL);
  g_autofree char *path = data_path (rel);
  g_autoptr (GError) error = NULL;
  JsonParser *parser = json_parser_new ();

  json_parser_load_from_file (parser, path, &error);
  g_assert_no_error (error);
  *parser_out = parser;
  return json_node_get_object (json_parser_get_root (parser));
}

static void
check_tensor (UmGguf *g, const char *name, UmDType dtype, guint n_dims, guint64 d0, guint64 d1)
{
  const UmTensorInfo *info = um_tensor_table_lookup (um_gguf_get_tensors (g), name);
  gsize len;
  const guint8 *bytes = um_gguf_get_bytes (g, &len);
  guint64 n_bytes;

  if (info == NULL)
    g_error ("%s: no tensor %s", um_gguf_file_name (g), name);
  g_assert_cmpstr (um_dtype_name (info->dtype), ==, um_dtype_name (dtype));
  g_assert_cmpuint (info->n_dims, ==, n_dims);
  g_assert_cmpuint (info->shape[0], ==, d0);
  if (n_dims > 1)
    g_assert_cmpuint (info->shape[1], ==, d1);
  g_assert_cmpuint (info->n_elems, ==, d0 * (n_dims > 1 ? d1 : 1));
  g_assert_true (um_dtype_bytes (dtype, info->n_elems, &n_bytes));
  g_assert_cmpuint (info->n_bytes, ==, n_bytes);
  g_assert_cmpstr (info->file, ==, um_gguf_file_name (g));
  g_assert_true (info->data >= bytes + um_gguf_data_offset (g));
  g_assert_true (info->data + info->n_bytes <= bytes + len);
  g_assert_cmpuint ((guint64) (info->data - bytes) % um_gguf_alignment (g), ==, 0);
}

static void
test_fixture (gconstpointer data)
{
  const Fixture *fx = data;
  g_autofree char *path = data_path (fx->file);
  g_autoptr (GError) error = NULL;
  g_autoptr (UmGguf) g = NULL;
  g_autoptr (JsonParser) parser = NULL;
  JsonObject *cfg;
  guint64 u, n_layers, d, f, v;
  double x;
  gboolean b;
  UmGgufType et;
  const char * const *tokens;
  guint64 n_tokens;

  g = um_gguf_open (path, &error);
  g_assert_no_error (error);
  g_assert_nonnull (g);
  cfg = load_config (fx->hf_dir, &parser);

  g_assert_cmpuint (um_gguf_version (g), ==, 3);
  g_assert_cmpuint (um_gguf_alignment (g), ==, 32);
  g_assert_cmpstr (um_gguf_get_string (g, "general.architecture", &error), ==, "llada");
  g_assert_no_error (error);

  n_layers = json_object_get_int_member (cfg, "n_layers");
  d = json_object_get_int_member (cfg, "d_model");
  f = json_object_get_int_member (cfg, "mlp_hidden_size");
  v = json_object_get_int_member (cfg, "vocab_size");

  g_assert_true (um_gguf_get_u64 (g, "llada.block_count", &u, &error));
  g_assert_cmpuint (u, ==, n_layers);
  g_assert_true (um_gguf_get_u64 (g, "llada.embedding_length", &u, &error));
  g_assert_cmpuint (u, ==, d);
  g_assert_true (um_gguf_get_u64 (g, "llada.feed_forward_length", &u, &error));
  g_assert_cmpuint (u, ==, f);
  g_assert_true (um_gguf_get_u64 (g, "llada.attention.head_count", &u, &error));
  g_assert_cmpuint (u, ==, json_object_get_int_member (cfg, "n_heads"));
  g_assert_true (um_gguf_get_u64 (g, "llada.attention.head_count_kv", &u, &error));
  g_assert_cmpuint (u, ==, json_object_get_int_member (cfg, "n_kv_heads"));
  g_assert_true (um_gguf_get_f64 (g, "llada.rope.freq_base", &x, &error));
  /* Stored as float32: the writer's rounding of the config's double is
   * (float) of it, and the float read back widens exactly. */
  g_assert_cmpfloat ((float) x, ==, (float) json_object_get_double_member (cfg, "rope_theta"));
  g_assert_true (um_gguf_get_f64 (g, "llada.attention.layer_norm_rms_epsilon", &x, &error));
  /* Stored as float32. */
  g_assert_cmpfloat ((float) x, ==, (float) json_object_get_double_member (cfg, "rms_norm_eps"));
  g_assert_true (um_gguf_get_bool (g, "llada.attention.causal", &b, &error));
  g_assert_false (b);
  g_assert_true (um_gguf_get_bool (g, "diffusion.shift_logits", &b, &error));
  g_assert_false (b);
  g_assert_true (um_gguf_get_u64 (g, "tokenizer.ggml.mask_token_id", &u, &error));
  g_assert_cmpuint (u, ==, json_object_get_int_member (cfg, "mask_token_id"));
  g_assert_true (um_gguf_get_u64 (g, "tokenizer.ggml.eos_token_id", &u, &error));
  g_assert_cmpuint (u, ==, json_object_get_int_member (cfg, "eos_token_id"));
  g_assert_no_error (error);

  g_assert_true (um_gguf_get_array_info (g, "tokenizer.ggml.tokens", &et, &n_tokens, &error));
  g_assert_cmpint (et, ==, UM_GGUF_STRING);
  g_assert_cmpuint (n_tokens, ==, v);
  tokens = um_gguf_get_string_array (g, "tokenizer.ggml.tokens", &n_tokens, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (n_tokens, ==, v);
  g_assert_cmpstr (tokens[0], ==, "!");
  g_assert_cmpstr (tokens[508], ==, "<|mdm_mask|>");
  g_assert_null (tokens[v]);
  /* Built once: the same vector every time. */
  g_assert_true (tokens == um_gguf_get_string_array (g, "tokenizer.ggml.tokens", NULL, NULL));

  /* Tensors, outermost first. */
  g_assert_cmpuint (um_tensor_table_size (um_gguf_get_tensors (g)), ==, 3 + 9 * n_layers);
  check_tensor (g, "token_embd.weight", fx->main, 2, v, d);
  check_tensor (g, "output_norm.weight", UM_DTYPE_F32, 1, d, 0);
  check_tensor (g, "output.weight", fx->mixed ? UM_DTYPE_Q6_K : fx->main, 2, v, d);
  for (guint64 l = 0; l < n_layers; l++)
    {
      static const char *const square[] = { "attn_q", "attn_k", "attn_v", "attn_output" };
      char name[64];

      g_snprintf (name, sizeof name, "blk.%" G_GUINT64_FORMAT ".attn_norm.weight", l);
      check_tensor (g, name, UM_DTYPE_F32, 1, d, 0);
      g_snprintf (name, sizeof name, "blk.%" G_GUINT64_FORMAT ".ffn_norm.weight", l);
      check_tensor (g, name, UM_DTYPE_F32, 1, d, 0);
      for (guint k = 0; k < G_N_ELEMENTS (square); k++)
        {
          g_snprintf (name, sizeof name, "blk.%" G_GUINT64_FORMAT ".%s.weight", l, square[k]);
          check_tensor (g, name, fx->mixed && k == 2 ? UM_DTYPE_Q6_K : fx->main, 2, d, d);
        }
      g_snprintf (name, sizeof name, "blk.%" G_GUINT64_FORMAT ".ffn_gate.weight", l);
      check_tensor (g, name, fx->main, 2, f, d);
      g_snprintf (name, sizeof name, "blk.%" G_GUINT64_FORMAT ".ffn_up.weight", l);
      check_tensor (g, name, fx->main, 2, f, d);
      g_snprintf (name, sizeof name, "blk.%" G_GUINT64_FORMAT ".ffn_down.weight", l);
      check_tensor (g, name, fx->mixed ? UM_DTYPE_Q6_K : fx->main, 2, d, f);
    }
  touch_everything (g);
}

/* The smallest safetensors reader that can find one F32 tensor. */
static const float *
safetensors_f32 (GBytes *file, const char *name, guint64 *n)
{
  gsize len;
  const guint8 *p = g_bytes_get_data (file, &len);
  g_autoptr (JsonParser) parser = json_parser_new ();
  g_autoptr (GError) error = NULL;
  guint64 hlen;
  JsonObject *entry;
  JsonArray *offsets;
  guint64 begin, end;

  g_assert_cmpuint (len, >=, 8);
  hlen = rd_u64 (p);
  g_assert_cmpuint (hlen, <=, len - 8);
  json_parser_load_from_data (parser, (const char *) p + 8, hlen, &error);
  g_assert_no_error (error);
  entry = json_object_get_object_member (json_node_get_object (json_parser_get_root (parser)), name);
  g_assert_nonnull (entry);
  g_assert_cmpstr (json_object_get_string_member (entry, "dtype"), ==, "F32");
  offsets = json_object_get_array_member (entry, "data_offsets");
  begin = json_array_get_int_element (offsets, 0);
  end = json_array_get_int_element (offsets, 1);
  g_assert_cmpuint (begin, <=, end);
  g_assert_cmpuint (end, <=, len - 8 - hlen);
  *n = (end - begin) / 4;
  return (const float *) (const void *) (p + 8 + hlen + begin);
}

static void
compare_with_safetensors (UmGguf *g, GBytes *st, const char *gguf_name, const char *st_name)
{
  const UmTensorInfo *info = um_tensor_table_lookup (um_gguf_get_tensors (g), gguf_name);
  guint64 n;
  const float *ref = safetensors_f32 (st, st_name, &n);

  g_assert_nonnull (info);
  g_assert_cmpint (info->dtype, ==, UM_DTYPE_F32);
  g_assert_cmpuint (info->n_elems, ==, n);
  for (guint64 i = 0; i < n; i++)
    {
      float a, b;
      memcpy (&a, info->data + 4 * i, 4);
      memcpy (&b, (const guint8 *) ref + 4 * i, 4);
      g_assert_cmpfloat (a, ==, b);   /* the same bytes copied */
    }
}

static void
test_f32_values (void)
{
  g_autofree char *path = data_path ("tiny-llada-f32.gguf");
  g_autofree char *st_path = data_path ("tiny-llada/model.safetensors");
  g_autoptr (GError) error = NULL;
  g_autoptr (UmGguf) g = NULL;
  g_autoptr (GMappedFile) st_map = NULL;
  g_autoptr (GBytes) st = NULL;

  g = um_gguf_open (path, &error);
  g_assert_no_error (error);
  st_map = g_mapped_file_new (st_path, FALSE, &error);
  g_assert_no_error (error);
  st = g_mapped_file_get_bytes (st_map);
  compare_with_safetensors (g, st, "output_norm.weight", "model.transformer.ln_f.weight");
  compare_with_safetensors (g, st, "blk.1.ffn_norm.weight", "model.transformer.blocks.1.ff_norm.weight");
  /* Neither is permuted: same [V, D] row-major layout in both files. */
  compare_with_safetensors (g, st, "token_embd.weight", "model.transformer.wte.weight");
  compare_with_safetensors (g, st, "output.weight", "model.transformer.ff_out.weight");
}

static void
assert_error_names (GError *error, const char *file, const char *fragment)
{
  g_assert_nonnull (error);
  g_assert_true (error->domain == UM_ERROR);
  if (strstr (error->message, file) == NULL || (fragment && strstr (error->message, fragment) == NULL))
    g_error ("message “%s” lacks “%s” or “%s”", error->message, file, fragment ? fragment : "");
}

static void
test_getters (void)
{
  g_autofree char *path = data_path ("tiny-llada-q8_0.gguf");
  g_autoptr (GError) error = NULL;
  g_autoptr (UmGguf) g = NULL;
  g_autofree gint32 *types = NULL;
  g_autofree float *floats = NULL;
  guint64 u, n;
  gint64 i;
  guint32 u32;
  double x;
  gboolean b;
  UmGgufType et;
  const void *raw;
  gint idx;
  char *s;

  g = um_gguf_open (path, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (um_gguf_file_name (g), ==, "tiny-llada-q8_0.gguf");
  g_assert_cmpuint (um_gguf_n_kv (g), ==, 25);
  g_assert_cmpuint (um_gguf_data_offset (g) % 32, ==, 0);
  g_assert_cmpuint (um_gguf_header_size (g), <=, um_gguf_data_offset (g));
  g_assert_cmpuint (um_gguf_data_offset (g) - um_gguf_header_size (g), <, 32);

  idx = um_gguf_find_key (g, "llada.block_count");
  g_assert_cmpint (idx, >=, 0);
  g_assert_cmpstr (um_gguf_kv_key (g, idx), ==, "llada.block_count");
  g_assert_cmpint (um_gguf_kv_type (g, idx), ==, UM_GGUF_UINT32);
  g_assert_cmpint (um_gguf_find_key (g, "no.such.key"), ==, -1);

  /* Integer conversions. */
  g_assert_true (um_gguf_get_i64 (g, "llada.block_count", &i, &error));
  g_assert_cmpint (i, ==, 2);
  g_assert_true (um_gguf_get_u32 (g, "llada.block_count", &u32, &error));
  g_assert_cmpuint (u32, ==, 2);
  g_assert_true (um_gguf_get_f64 (g, "llada.block_count", &x, &error));
  g_assert_cmpfloat (x, ==, 2.0);
  g_assert_no_error (error);

  /* Wrong types and missing keys name the file and the key. */
  g_assert_false (um_gguf_get_u64 (g, "llada.rope.freq_base", &u, &error));
  assert_error_names (error, "tiny-llada-q8_0.gguf", "llada.rope.freq_base");
  g_clear_error (&error);
  g_assert_false (um_gguf_get_bool (g, "llada.block_count", &b, &error));
  assert_error_names (error, "tiny-llada-q8_0.gguf", "llada.block_count");
  g_clear_error (&error);
  g_assert_null (um_gguf_get_string (g, "llada.block_count", &error));
  assert_error_names (error, "tiny-llada-q8_0.gguf", "uint32");
  g_clear_error (&error);
  g_assert_false (um_gguf_get_u64 (g, "llada.missing", &u, &error));
  assert_error_names (error, "tiny-llada-q8_0.gguf", "“llada.missing” is missing");
  g_clear_error (&error);
  g_assert_false (um_gguf_get_f64 (g, "tokenizer.ggml.tokens", &x, &error));
  assert_error_names (error, "tiny-llada-q8_0.gguf", "array of string");
  g_clear_error (&error);
  g_assert_null (um_gguf_get_string_array (g, "tokenizer.ggml.token_type", &n, &error));
  assert_error_names (error, "tiny-llada-q8_0.gguf", "tokenizer.ggml.token_type");
  g_clear_error (&error);
  g_assert_null (um_gguf_get_array_data (g, "tokenizer.ggml.tokens", &et, &n, &error));
  g_assert_nonnull (error);
  g_clear_error (&error);
  g_assert_false (um_gguf_get_f32_array (g, "tokenizer.ggml.token_type", &floats, &n, &error));
  g_assert_nonnull (error);
  g_clear_error (&error);
  g_assert_false (um_gguf_get_int32_array (g, "general.name", &types, &n, &error));
  g_assert_nonnull (error);
  g_clear_error (&error);

  /* Numeric arrays. */
  g_assert_true (um_gguf_get_int32_array (g, "tokenizer.ggml.token_type", &types, &n, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (n, ==, 512);
  g_assert_cmpint (types[0], ==, 1);
  raw = um_gguf_get_array_data (g, "tokenizer.ggml.token_type", &et, &n, &error);
  g_assert_nonnull (raw);
  g_assert_cmpint (et, ==, UM_GGUF_INT32);
  g_assert_cmpuint (n, ==, 512);
  for (guint k = 0; k < n; k++)
    {
      gint32 t;
      memcpy (&t, (const guint8 *) raw + 4 * k, 4);
      g_assert_cmpint (GINT32_FROM_LE (t), ==, types[k]);
    }

  /* inspect strings. */
  s = um_gguf_kv_to_string (g, um_gguf_find_key (g, "llada.block_count"));
  g_assert_cmpstr (s, ==, "2");
  g_free (s);
  s = um_gguf_kv_to_string (g, um_gguf_find_key (g, "llada.attention.layer_norm_rms_epsilon"));
  g_assert_cmpstr (s, ==, "1e-05");
  g_free (s);
  s = um_gguf_kv_to_string (g, um_gguf_find_key (g, "general.architecture"));
  g_assert_cmpstr (s, ==, "\"llada\"");
  g_free (s);
  s = um_gguf_kv_to_string (g, um_gguf_find_key (g, "llada.attention.causal"));
  g_assert_cmpstr (s, ==, "false");
  g_free (s);
  s = um_gguf_kv_to_string (g, um_gguf_find_key (g, "tokenizer.ggml.tokens"));
  g_assert_true (g_str_has_prefix (s, "array[string, 512] [\"!\", \"\\\"\", \"#\""));
  g_assert_true (g_str_has_suffix (s, ", …]"));
  g_free (s);
}

static void
test_steal_tensors (void)
{
  g_autofree char *path = data_path ("tiny-llada-q4_0.gguf");
  g_autoptr (GError) error = NULL;
  g_autoptr (UmTensorTable) table = NULL;
  UmGguf *g;
  const UmTensorInfo *info;
  float first;

  g = um_gguf_open (path, &error);
  g_assert_no_error (error);
  table = um_gguf_steal_tensors (g);
  g_assert_null (um_gguf_get_tensors (g));
  um_gguf_free (g);
  /* The table keeps the mapping alive on its own. */
  info = um_tensor_table_lookup (table, "output_norm.weight");
  g_assert_nonnull (info);
  g_assert_cmpstr (info->file, ==, "tiny-llada-q4_0.gguf");
  memcpy (&first, info->data, 4);
  g_assert_true (isfinite (first));
}

static void
test_open_errors (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *dir = data_path ("tiny-llada");
  g_autofree char *st = data_path ("tiny-llada/model.safetensors");

  g_assert_null (um_gguf_open ("/nonexistent/dir/missing-model.gguf", &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_IO);
  assert_error_names (error, "missing-model.gguf", NULL);
  g_clear_error (&error);

  g_assert_null (um_gguf_open (dir, &error));
  assert_error_names (error, "tiny-llada", NULL);
  g_clear_error (&error);

  /* A safetensors file is not GGUF. */
  g_assert_null (um_gguf_open (st, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
  assert_error_names (error, "model.safetensors", "not a GGUF file");
  g_clear_error (&error);

  g_assert_null (um_gguf_open_from_bytes (NULL, 0, "/some/where/empty.gguf", &error));
  assert_error_names (error, "empty.gguf", NULL);
  g_assert_null (strstr (error->message, "/some/where"));
}

/* ---- writer ------------------------------------------------------------ */

typedef struct {
  const char *name;
  UmDType     dtype;
  guint       n_dims;
  guint64     shape[4];
} WT;

static const WT write_tensors[] = {
  { "t.f32",  UM_DTYPE_F32,  2, { 3, 5 } },
  { "t.f16",  UM_DTYPE_F16,  1, { 7 } },
  { "t.bf16", UM_DTYPE_BF16, 2, { 2, 3 } },
  { "t.q8_0", UM_DTYPE_Q8_0, 2, { 2, 64 } },
  { "t.q4_0", UM_DTYPE_Q4_0, 2, { 3, 32 } },
  { "t.q4_k", UM_DTYPE_Q4_K, 2, { 1, 256 } },
  { "t.q6_k", UM_DTYPE_Q6_K, 2, { 2, 256 } },
  { "t.i32",  UM_DTYPE_I32,  1, { 4 } },
  { "t.4d",   UM_DTYPE_F32,  4, { 2, 1, 3, 2 } },
};

static GBytes *
random_bytes (GRand *rand, gsize n)
{
  guint8 *p = g_malloc (n);
  for (gsize i = 0; i < n; i++)
    p[i] = (guint8) g_rand_int_range (rand, 0, 256);
  return g_bytes_new_take (p, n);
}

static void
check_zero (const guint8 *p, guint64 from, guint64 to)
{
  for (guint64 i = from; i < to; i++)
    if (p[i] != 0)
      g_error ("padding byte %" G_GUINT64_FORMAT " is %u", i, p[i]);
}

static void
test_writer_roundtrip (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp ("um-gguf-XXXXXX", &error);
  g_autofree char *path = g_build_filename (dir, "round.gguf", NULL);
  g_autoptr (UmGgufWriter) w = um_gguf_writer_new ();
  g_autoptr (GRand) rand = g_rand_new_with_seed (1234);
  g_autoptr (GPtrArray) datas = g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref);
  g_autoptr (UmGguf) g = NULL;
  static const guint8 a_u8[] = { 0, 1, 255 };
  static const gint8 a_i8[] = { -128, 0, 127 };
  static const guint16 a_u16[] = { 0, 65535 };
  static const gint16 a_i16[] = { -32768, 32767, -1 };
  static const guint32 a_u32[] = { 4000000000u, 7 };
  static const gint32 a_i32[] = { -5, 0, 2000000000 };
  static const float a_f32[] = { 0.5f, -1e-30f, 3.25f };
  static const guint8 a_bool[] = { 1, 0, 1, 1 };
  static const guint64 a_u64[] = { G_MAXUINT64, 0 };
  static const gint64 a_i64[] = { G_MININT64, G_MAXINT64 };
  static const double a_f64[] = { 1e300, -0.0 };
  static const char *const strs[] = { "x", "", "ŷ\n\"q\"", NULL };
  const guint8 *bytes;
  gsize len;
  guint64 u, n, prev_end;
  gint64 i;
  guint32 u32;
  double x;
  gboolean b;
  const void *raw;
  UmGgufType et;
  const char * const *sv;
  g_autofree gint32 *i32s = NULL;
  g_autofree float *f32s = NULL;
  UmTensorTable *t;

  g_assert_no_error (error);
  um_gguf_writer_set_string (w, "general.architecture", "llada");
  um_gguf_writer_set_u8 (w, "t.u8", 200);
  um_gguf_writer_set_i8 (w, "t.i8", -100);
  um_gguf_writer_set_u16 (w, "t.u16", 60000);
  um_gguf_writer_set_i16 (w, "t.i16", -30000);
  um_gguf_writer_set_u32 (w, "t.u32", 4000000000u);
  um_gguf_writer_set_i32 (w, "t.i32", -2000000000);
  um_gguf_writer_set_u64 (w, "t.u64", G_GUINT64_CONSTANT (9223372036854775813));
  um_gguf_writer_set_i64 (w, "t.i64", -G_GINT64_CONSTANT (4611686018427387904));
  um_gguf_writer_set_f32 (w, "t.f32", 1.5f);
  um_gguf_writer_set_f64 (w, "t.f64", -2.25e300);
  um_gguf_writer_set_bool (w, "t.bool", TRUE);
  um_gguf_writer_set_string (w, "t.string", "wrong, replaced below");
  um_gguf_writer_set_string (w, "t.string", "héllo\nworld");
  um_gguf_writer_set_string_len (w, "t.string_nul", "a\0b", 3);
  um_gguf_writer_set_string_array (w, "t.strings", strs, 3);
  um_gguf_writer_set_string_array (w, "t.no_strings", strs, 0);
  um_gguf_writer_set_array (w, "t.a_u8", UM_GGUF_UINT8, a_u8, G_N_ELEMENTS (a_u8));
  um_gguf_writer_set_array (w, "t.a_i8", UM_GGUF_INT8, a_i8, G_N_ELEMENTS (a_i8));
  um_gguf_writer_set_array (w, "t.a_u16", UM_GGUF_UINT16, a_u16, G_N_ELEMENTS (a_u16));
  um_gguf_writer_set_array (w, "t.a_i16", UM_GGUF_INT16, a_i16, G_N_ELEMENTS (a_i16));
  um_gguf_writer_set_array (w, "t.a_u32", UM_GGUF_UINT32, a_u32, G_N_ELEMENTS (a_u32));
  um_gguf_writer_set_i32_array (w, "t.a_i32", a_i32, G_N_ELEMENTS (a_i32));
  um_gguf_writer_set_f32_array (w, "t.a_f32", a_f32, G_N_ELEMENTS (a_f32));
  um_gguf_writer_set_array (w, "t.a_bool", UM_GGUF_BOOL, a_bool, G_N_ELEMENTS (a_bool));
  um_gguf_writer_set_array (w, "t.a_u64", UM_GGUF_UINT64, a_u64, G_N_ELEMENTS (a_u64));
  um_gguf_writer_set_array (w, "t.a_i64", UM_GGUF_INT64, a_i64, G_N_ELEMENTS (a_i64));
  um_gguf_writer_set_array (w, "t.a_f64", UM_GGUF_FLOAT64, a_f64, G_N_ELEMENTS (a_f64));
  um_gguf_writer_set_i32_array (w, "t.a_empty", NULL, 0);

  for (guint k = 0; k < G_N_ELEMENTS (write_tensors); k++)
    {
      const WT *wt = &write_tensors[k];
      guint64 nb = 0;
      g_assert_true (um_gguf_writer_add_tensor_info (w, wt->name, wt->dtype, wt->n_dims,
                                                     wt->shape, &nb, &error));
      g_assert_no_error (error);
      g_ptr_array_add (datas, random_bytes (rand, nb));
    }
  g_assert_true (um_gguf_writer_begin (w, path, &error));
  g_assert_no_error (error);
  for (guint k = 0; k < datas->len; k++)
    {
      /* In two pieces, to exercise partial writes. */
      const guint8 *p = g_bytes_get_data (datas->pdata[k], &len);
      g_assert_true (um_gguf_writer_write_tensor_data (w, p, len / 3, &error));
      g_assert_true (um_gguf_writer_write_tensor_data (w, p + len / 3, len - len / 3, &error));
      g_assert_no_error (error);
    }
  g_assert_true (um_gguf_writer_finish (w, &error));
  g_assert_no_error (error);

  g = um_gguf_open (path, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (um_gguf_version (g), ==, 3);
  g_assert_cmpuint (um_gguf_alignment (g), ==, 32);
  /* 28 keys set (one of them twice) + general.alignment, last. */
  g_assert_cmpuint (um_gguf_n_kv (g), ==, 29);
  g_assert_cmpstr (um_gguf_kv_key (g, 0), ==, "general.architecture");
  g_assert_cmpstr (um_gguf_kv_key (g, 28), ==, "general.alignment");
  g_assert_cmpint (um_gguf_kv_type (g, 28), ==, UM_GGUF_UINT32);

#define KV_TYPE(key, type) g_assert_cmpint (um_gguf_kv_type (g, um_gguf_find_key (g, key)), ==, type)
  KV_TYPE ("t.u8", UM_GGUF_UINT8);
  KV_TYPE ("t.i8", UM_GGUF_INT8);
  KV_TYPE ("t.u16", UM_GGUF_UINT16);
  KV_TYPE ("t.i16", UM_GGUF_INT16);
  KV_TYPE ("t.u32", UM_GGUF_UINT32);
  KV_TYPE ("t.i32", UM_GGUF_INT32);
  KV_TYPE ("t.u64", UM_GGUF_UINT64);
  KV_TYPE ("t.i64", UM_GGUF_INT64);
  KV_TYPE ("t.f32", UM_GGUF_FLOAT32);
  KV_TYPE ("t.f64", UM_GGUF_FLOAT64);
  KV_TYPE ("t.bool", UM_GGUF_BOOL);
  KV_TYPE ("t.string", UM_GGUF_STRING);
  KV_TYPE ("t.strings", UM_GGUF_ARRAY);
#undef KV_TYPE

  g_assert_true (um_gguf_get_u64 (g, "t.u8", &u, &error) && u == 200);
  g_assert_true (um_gguf_get_i64 (g, "t.i8", &i, &error) && i == -100);
  g_assert_true (um_gguf_get_u64 (g, "t.u16", &u, &error) && u == 60000);
  g_assert_true (um_gguf_get_i64 (g, "t.i16", &i, &error) && i == -30000);
  g_assert_true (um_gguf_get_u64 (g, "t.u32", &u, &error) && u == 4000000000u);
  g_assert_true (um_gguf_get_i64 (g, "t.i32", &i, &error) && i == -2000000000);
  g_assert_true (um_gguf_get_u64 (g, "t.u64", &u, &error));
  g_assert_cmpuint (u, ==, G_GUINT64_CONSTANT (9223372036854775813));
  g_assert_true (um_gguf_get_i64 (g, "t.i64", &i, &error));
  g_assert_cmpint (i, ==, -G_GINT64_CONSTANT (4611686018427387904));
  /* Exact: values a float32 and a float64 hold, written and read back. */
  g_assert_true (um_gguf_get_f64 (g, "t.f32", &x, &error) && x == 1.5);
  g_assert_true (um_gguf_get_f64 (g, "t.f64", &x, &error) && x == -2.25e300);
  g_assert_true (um_gguf_get_bool (g, "t.bool", &b, &error) && b);
  g_assert_cmpstr (um_gguf_get_string (g, "t.string", &error), ==, "héllo\nworld");
  g_assert_no_error (error);
  /* Values that do not fit are refused, naming the key. */
  g_assert_false (um_gguf_get_u64 (g, "t.i8", &u, &error));
  assert_error_names (error, "round.gguf", "t.i8");
  g_clear_error (&error);
  g_assert_false (um_gguf_get_i64 (g, "t.u64", &i, &error));
  assert_error_names (error, "round.gguf", "t.u64");
  g_clear_error (&error);
  g_assert_false (um_gguf_get_u32 (g, "t.u64", &u32, &error));
  assert_error_names (error, "round.gguf", "uint32");
  g_clear_error (&error);

  /* Embedded NUL: the copy stops there, the raw bytes are all kept. */
  g_assert_cmpstr (um_gguf_get_string (g, "t.string_nul", NULL), ==, "a");
  raw = um_gguf_kv_raw (g, um_gguf_find_key (g, "t.string_nul"), &len);
  g_assert_cmpuint (len, ==, 4 + 8 + 3);
  g_assert_cmpmem ((const guint8 *) raw + 12, 3, "a\0b", 3);

  sv = um_gguf_get_string_array (g, "t.strings", &n, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (n, ==, 3);
  g_assert_cmpstrv (sv, (const char * const *) strs);
  sv = um_gguf_get_string_array (g, "t.no_strings", &n, &error);
  g_assert_cmpuint (n, ==, 0);
  g_assert_null (sv[0]);

#define ARR(key, type, values)                                                    \
  G_STMT_START {                                                                  \
    raw = um_gguf_get_array_data (g, key, &et, &n, &error);                       \
    g_assert_no_error (error);                                                    \
    g_assert_cmpint (et, ==, type);                                               \
    g_assert_cmpuint (n, ==, G_N_ELEMENTS (values));                              \
    if (G_BYTE_ORDER == G_LITTLE_ENDIAN)                                          \
      g_assert_cmpmem (raw, n * sizeof values[0], values, sizeof values);         \
  } G_STMT_END
  ARR ("t.a_u8", UM_GGUF_UINT8, a_u8);
  ARR ("t.a_i8", UM_GGUF_INT8, a_i8);
  ARR ("t.a_u16", UM_GGUF_UINT16, a_u16);
  ARR ("t.a_i16", UM_GGUF_INT16, a_i16);
  ARR ("t.a_u32", UM_GGUF_UINT32, a_u32);
  ARR ("t.a_i32", UM_GGUF_INT32, a_i32);
  ARR ("t.a_f32", UM_GGUF_FLOAT32, a_f32);
  ARR ("t.a_bool", UM_GGUF_BOOL, a_bool);
  ARR ("t.a_u64", UM_GGUF_UINT64, a_u64);
  ARR ("t.a_i64", UM_GGUF_INT64, a_i64);
  ARR ("t.a_f64", UM_GGUF_FLOAT64, a_f64);
#undef ARR
  g_assert_true (um_gguf_get_int32_array (g, "t.a_i16", &i32s, &n, &error));
  g_assert_cmpuint (n, ==, 3);
  g_assert_cmpint (i32s[0], ==, -32768);
  g_assert_cmpint (i32s[2], ==, -1);
  g_clear_pointer (&i32s, g_free);
  g_assert_false (um_gguf_get_int32_array (g, "t.a_u32", &i32s, &n, &error));
  assert_error_names (error, "round.gguf", "t.a_u32[0]");
  g_clear_error (&error);
  g_assert_true (um_gguf_get_int32_array (g, "t.a_empty", &i32s, &n, &error));
  g_assert_cmpuint (n, ==, 0);
  g_assert_null (i32s);
  g_assert_true (um_gguf_get_f32_array (g, "t.a_f64", &f32s, &n, &error));
  g_assert_cmpfloat (f32s[1], ==, 0.0);   /* −0.0 narrowed: exact, sign kept */
  g_assert_true (signbit (f32s[1]));
  g_assert_true (isinf (f32s[0]));

  /* Tensors: same order, types, shapes, bytes; aligned; zero padding. */
  t = um_gguf_get_tensors (g);
  bytes = um_gguf_get_bytes (g, &len);
  g_assert_cmpuint (um_tensor_table_size (t), ==, G_N_ELEMENTS (write_tensors));
  g_assert_cmpuint (um_gguf_data_offset (g) % 32, ==, 0);
  check_zero (bytes, um_gguf_header_size (g), um_gguf_data_offset (g));
  prev_end = um_gguf_data_offset (g);
  for (guint k = 0; k < G_N_ELEMENTS (write_tensors); k++)
    {
      const UmTensorInfo *info = um_tensor_table_get (t, k);
      const WT *wt = &write_tensors[k];
      guint64 off = info->data - bytes;
      gsize dlen;
      const guint8 *d = g_bytes_get_data (datas->pdata[k], &dlen);

      g_assert_cmpstr (info->name, ==, wt->name);
      g_assert_cmpint (info->dtype, ==, wt->dtype);
      g_assert_cmpuint (info->n_dims, ==, wt->n_dims);
      for (guint j = 0; j < wt->n_dims; j++)
        g_assert_cmpuint (info->shape[j], ==, wt->shape[j]);
      g_assert_cmpmem (info->data, info->n_bytes, d, dlen);
      g_assert_cmpuint (off % 32, ==, 0);
      check_zero (bytes, prev_end, off);
      prev_end = off + info->n_bytes;
    }
  /* The last tensor is padded too, as llama.cpp does. */
  g_assert_cmpuint (len % 32, ==, 0);
  check_zero (bytes, prev_end, len);
  touch_everything (g);

  g_clear_pointer (&g, um_gguf_free);
  g_assert_cmpint (g_remove (path), ==, 0);
  g_assert_cmpint (g_rmdir (dir), ==, 0);
}

static void
test_writer_copy (void)
{
  g_autofree char *src_path = data_path ("tiny-llada-q4_0.gguf");
  g_autoptr (GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp ("um-gguf-XXXXXX", &error);
  g_autofree char *path = g_build_filename (dir, "copy.gguf", NULL);
  g_autoptr (UmGguf) src = um_gguf_open (src_path, &error);
  g_autoptr (UmGgufWriter) w = um_gguf_writer_new ();
  g_autoptr (UmGguf) g = NULL;
  UmTensorTable *st = um_gguf_get_tensors (src);

  g_assert_no_error (error);
  g_assert_false (um_gguf_writer_set_alignment (w, 48, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  g_clear_error (&error);
  g_assert_true (um_gguf_writer_copy_all_kv (w, src, &error));
  /* Alignment 64, to see it is ours and not the source's 32 that counts;
   * the key keeps the place the copy gave it. */
  um_gguf_writer_set_u32 (w, "general.alignment", 64);
  g_assert_false (um_gguf_writer_copy_kv (w, src, "no.such.key", &error));
  assert_error_names (error, "tiny-llada-q4_0.gguf", "no.such.key");
  g_clear_error (&error);

  /* Re-write every tensor, streamed, like quantize does. */
  for (guint k = 0; k < um_tensor_table_size (st); k++)
    {
      const UmTensorInfo *info = um_tensor_table_get (st, k);
      g_assert_true (um_gguf_writer_add_tensor_info (w, info->name, info->dtype, info->n_dims,
                                                     info->shape, NULL, &error));
    }
  g_assert_true (um_gguf_writer_begin (w, path, &error));
  for (guint k = 0; k < um_tensor_table_size (st); k++)
    {
      const UmTensorInfo *info = um_tensor_table_get (st, k);
      g_assert_true (um_gguf_writer_write_tensor_data (w, info->data, info->n_bytes, &error));
    }
  g_assert_true (um_gguf_writer_finish (w, &error));
  g_assert_no_error (error);

  g = um_gguf_open (path, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (um_gguf_alignment (g), ==, 64);
  g_assert_cmpuint (um_gguf_n_kv (g), ==, um_gguf_n_kv (src));
  for (guint k = 0; k < um_gguf_n_kv (src); k++)
    {
      const char *key = um_gguf_kv_key (src, k);
      gsize a_len, b_len;
      const guint8 *a = um_gguf_kv_raw (src, k, &a_len);
      const guint8 *b = um_gguf_kv_raw (g, um_gguf_find_key (g, key), &b_len);

      g_assert_cmpstr (um_gguf_kv_key (g, k), ==, key);
      if (strcmp (key, "general.alignment") == 0)
        continue;
      g_assert_cmpmem (a, a_len, b, b_len);
    }
  for (guint k = 0; k < um_tensor_table_size (st); k++)
    {
      const UmTensorInfo *a = um_tensor_table_get (st, k);
      const UmTensorInfo *b = um_tensor_table_lookup (um_gguf_get_tensors (g), a->name);
      gsize len;
      const guint8 *base = um_gguf_get_bytes (g, &len);

      g_assert_nonnull (b);
      g_assert_cmpint (a->dtype, ==, b->dtype);
      g_assert_cmpmem (a->shape, sizeof a->shape, b->shape, sizeof b->shape);
      g_assert_cmpmem (a->data, a->n_bytes, b->data, b->n_bytes);
      g_assert_cmpuint ((guint64) (b->data - base) % 64, ==, 0);
    }
  g_clear_pointer (&g, um_gguf_free);
  g_remove (path);
  g_rmdir (dir);
}

/* Rewriting a llama.cpp file (its KVs copied, tensors streamed in the same
 * order, default alignment) reproduces it byte for byte: the writer's
 * layout, padding included, is llama.cpp's. */
static void
test_writer_identical (gconstpointer data)
{
  const char *name = data;
  g_autofree char *src_path = data_path (name);
  g_autoptr (GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp ("um-gguf-XXXXXX", &error);
  g_autofree char *path = g_build_filename (dir, name, NULL);
  g_autoptr (UmGguf) src = um_gguf_open (src_path, &error);
  g_autoptr (UmGgufWriter) w = um_gguf_writer_new ();
  g_autofree char *a = NULL, *b = NULL;
  gsize a_len, b_len;
  UmTensorTable *st;

  g_assert_no_error (error);
  st = um_gguf_get_tensors (src);
  g_assert_true (um_gguf_writer_copy_all_kv (w, src, &error));
  for (guint k = 0; k < um_tensor_table_size (st); k++)
    {
      const UmTensorInfo *info = um_tensor_table_get (st, k);
      g_assert_true (um_gguf_writer_add_tensor_info (w, info->name, info->dtype, info->n_dims,
                                                     info->shape, NULL, &error));
    }
  g_assert_true (um_gguf_writer_begin (w, path, &error));
  for (guint k = 0; k < um_tensor_table_size (st); k++)
    {
      const UmTensorInfo *info = um_tensor_table_get (st, k);
      g_assert_true (um_gguf_writer_write_tensor_data (w, info->data, info->n_bytes, &error));
    }
  g_assert_true (um_gguf_writer_finish (w, &error));
  g_assert_no_error (error);

  g_assert_true (g_file_get_contents (src_path, &a, &a_len, &error));
  g_assert_true (g_file_get_contents (path, &b, &b_len, &error));
  g_assert_cmpmem (a, a_len, b, b_len);
  g_remove (path);
  g_rmdir (dir);
}

static guint
dir_entries (const char *dir)
{
  g_autoptr (GDir) d = g_dir_open (dir, 0, NULL);
  guint n = 0;
  while (g_dir_read_name (d) != NULL)
    n++;
  return n;
}

static void
test_writer_interrupted (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp ("um-gguf-XXXXXX", &error);
  g_autofree char *path = g_build_filename (dir, "model.gguf", NULL);
  static const guint64 shape[] = { 4, 32 };
  static const guint64 bad_shape[] = { 4, 33 };
  guint8 data[4 * 32 * 4] = { 0 };
  g_autofree char *contents = NULL;
  char long_name[80];
  UmGgufWriter *w;

  /* Freed after begin, before finish: nothing at the target, no leftovers. */
  w = um_gguf_writer_new ();
  um_gguf_writer_set_string (w, "general.architecture", "llada");
  g_assert_true (um_gguf_writer_add_tensor_info (w, "a", UM_DTYPE_F32, 2, shape, NULL, &error));
  g_assert_true (um_gguf_writer_add_tensor_info (w, "b", UM_DTYPE_F32, 2, shape, NULL, &error));
  g_assert_true (um_gguf_writer_begin (w, path, &error));
  g_assert_true (um_gguf_writer_write_tensor_data (w, data, sizeof data, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (dir_entries (dir), ==, 1);   /* the temporary file */
  um_gguf_writer_free (w);
  g_assert_false (g_file_test (path, G_FILE_TEST_EXISTS));
  g_assert_cmpuint (dir_entries (dir), ==, 0);

  /* Same with an existing file: it stays as it was. */
  g_assert_true (g_file_set_contents (path, "old", -1, &error));
  w = um_gguf_writer_new ();
  g_assert_true (um_gguf_writer_add_tensor_info (w, "a", UM_DTYPE_F32, 2, shape, NULL, &error));
  g_assert_true (um_gguf_writer_begin (w, path, &error));
  um_gguf_writer_free (w);
  g_assert_true (g_file_get_contents (path, &contents, NULL, &error));
  g_assert_cmpstr (contents, ==, "old");
  g_clear_pointer (&contents, g_free);
  g_assert_cmpuint (dir_entries (dir), ==, 1);

  /* finish with a tensor missing: an error, and still the old file. */
  w = um_gguf_writer_new ();
  g_assert_true (um_gguf_writer_add_tensor_info (w, "a", UM_DTYPE_F32, 2, shape, NULL, &error));
  g_assert_true (um_gguf_writer_add_tensor_info (w, "b", UM_DTYPE_F32, 2, shape, NULL, &error));
  g_assert_true (um_gguf_writer_begin (w, path, &error));
  g_assert_true (um_gguf_writer_write_tensor_data (w, data, 100, &error));
  /* A piece may not run into the next tensor. */
  g_assert_false (um_gguf_writer_write_tensor_data (w, data, sizeof data, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  g_clear_error (&error);
  g_assert_true (um_gguf_writer_write_tensor_data (w, data, sizeof data - 100, &error));
  g_assert_false (um_gguf_writer_finish (w, &error));
  assert_error_names (error, "model.gguf", "“b”");
  g_clear_error (&error);
  g_assert_false (um_gguf_writer_write_tensor_data (w, data, 1, &error));
  g_clear_error (&error);
  um_gguf_writer_free (w);
  g_assert_true (g_file_get_contents (path, &contents, NULL, &error));
  g_assert_cmpstr (contents, ==, "old");
  g_clear_pointer (&contents, g_free);
  g_assert_cmpuint (dir_entries (dir), ==, 1);

  /* Bad tensor declarations. */
  w = um_gguf_writer_new ();
  memset (long_name, 'x', 64);
  long_name[64] = '\0';
  g_assert_false (um_gguf_writer_add_tensor_info (w, long_name, UM_DTYPE_F32, 2, shape, NULL, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  g_clear_error (&error);
  g_assert_false (um_gguf_writer_add_tensor_info (w, "q", UM_DTYPE_Q8_0, 2, bad_shape, NULL, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
  g_clear_error (&error);
  g_assert_true (um_gguf_writer_add_tensor_info (w, "a", UM_DTYPE_F32, 2, shape, NULL, &error));
  g_assert_false (um_gguf_writer_add_tensor_info (w, "a", UM_DTYPE_F32, 2, shape, NULL, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  g_clear_error (&error);
  /* A directory that does not exist: an I/O error, no crash. */
  {
    g_autofree char *bad = g_build_filename (dir, "no", "such", "x.gguf", NULL);
    g_assert_false (um_gguf_writer_begin (w, bad, &error));
    g_assert_error (error, UM_ERROR, UM_ERROR_IO);
    g_clear_error (&error);
  }
  um_gguf_writer_free (w);

  /* A complete write replaces the old file. */
  w = um_gguf_writer_new ();
  g_assert_true (um_gguf_writer_add_tensor_info (w, "a", UM_DTYPE_F32, 2, shape, NULL, &error));
  g_assert_true (um_gguf_writer_begin (w, path, &error));
  g_assert_true (um_gguf_writer_write_tensor_data (w, data, sizeof data, &error));
  g_assert_true (um_gguf_writer_finish (w, &error));
  g_assert_no_error (error);
  um_gguf_writer_free (w);
  {
    g_autoptr (UmGguf) g = um_gguf_open (path, &error);
    g_assert_no_error (error);
    g_assert_cmpuint (um_tensor_table_size (um_gguf_get_tensors (g)), ==, 1);
  }
  g_assert_cmpuint (dir_entries (dir), ==, 1);
  g_remove (path);
  g_rmdir (dir);
}

/* ---- hostile input ----------------------------------------------------- */

typedef struct {
  const char *file;
  gint        code;       /* -1: any UM_ERROR code */
  const char *fragment;   /* must appear in the message */
} Malformed;

static const Malformed malformed[] = {
  { "empty.gguf",                    UM_ERROR_FORMAT,      "not a GGUF file" },
  { "trunc-magic.gguf",              UM_ERROR_FORMAT,      "not a GGUF file" },
  { "trunc-version.gguf",            UM_ERROR_FORMAT,      "the version" },
  { "trunc-header.gguf",             UM_ERROR_FORMAT,      "key-value count" },
  { "trunc-in-metadata.gguf",        UM_ERROR_FORMAT,      "header claims 5 key-value pairs" },
  { "trunc-in-key-length.gguf",      UM_ERROR_FORMAT,      "the length of key 2" },
  { "trunc-in-key.gguf",             UM_ERROR_FORMAT,      "key 0 claims 20 bytes" },
  { "trunc-in-value-type.gguf",      UM_ERROR_FORMAT,      "the type of key “general.architecture”" },
  { "trunc-in-string-length.gguf",   UM_ERROR_FORMAT,      "the length of the string value of key" },
  { "trunc-in-string-value.gguf",    UM_ERROR_FORMAT,      "string value of key “general.architecture” claims 5" },
  { "trunc-in-scalar-value.gguf",    UM_ERROR_FORMAT,      "the value of key “llada.block_count”" },
  { "trunc-in-array-header.gguf",    UM_ERROR_FORMAT,      "element count of array" },
  { "trunc-in-string-array.gguf",    UM_ERROR_FORMAT,      "string 2 of array “tokenizer.ggml.tokens”" },
  { "trunc-in-int-array.gguf",       UM_ERROR_FORMAT,      "claims 3 elements of type int32" },
  { "trunc-in-tensor-name.gguf",     UM_ERROR_FORMAT,      "the name of tensor 0" },
  { "trunc-in-tensor-dims.gguf",     UM_ERROR_FORMAT,      "dimension 1 of tensor “b.weight”" },
  { "trunc-in-tensor-offset.gguf",   UM_ERROR_FORMAT,      "data offset of tensor “b.weight”" },
  { "trunc-before-data.gguf",        UM_ERROR_FORMAT,      "tensor data should start at byte" },
  { "trunc-in-data.gguf",            UM_ERROR_FORMAT,      "past the end of the file" },
  { "trunc-in-last-tensor.gguf",     UM_ERROR_FORMAT,      "data ends at byte 450, past the end of the file (449 bytes)" },
  { "bad-magic.gguf",                UM_ERROR_FORMAT,      "bad magic" },
  { "version-1.gguf",                UM_ERROR_UNSUPPORTED, "version 1" },
  { "version-4.gguf",                UM_ERROR_UNSUPPORTED, "version 4" },
  { "version-big-endian.gguf",       UM_ERROR_UNSUPPORTED, "big-endian" },
  { "n-tensors-huge.gguf",           UM_ERROR_FORMAT,      "1152921504606846976 tensors" },
  { "n-kv-huge.gguf",                UM_ERROR_FORMAT,      "1152921504606846976 key-value pairs" },
  { "counts-max.gguf",               UM_ERROR_FORMAT,      "header claims" },
  { "n-kv-plus-one.gguf",            -1,                   NULL },
  { "n-tensors-plus-one.gguf",       -1,                   "tensor 2" },
  { "key-length-huge.gguf",          UM_ERROR_FORMAT,      "key 0 claims 9223372036854775808 bytes" },
  { "string-length-huge.gguf",       UM_ERROR_FORMAT,      "claims 9223372036854775808 bytes" },
  { "string-length-max.gguf",        UM_ERROR_FORMAT,      "claims 18446744073709551615 bytes" },
  { "array-count-huge.gguf",         UM_ERROR_FORMAT,      "claims 4611686018427387904 strings" },
  { "array-count-overflow.gguf",     UM_ERROR_FORMAT,      "claims 4611686018427387904 elements" },
  { "array-string-length-huge.gguf", UM_ERROR_FORMAT,      "string 1 of array" },
  { "tensor-name-length-huge.gguf",  UM_ERROR_FORMAT,      "the name of tensor 1 claims" },
  { "unknown-value-type.gguf",       UM_ERROR_FORMAT,      "unknown value type 13" },
  { "unknown-value-type-max.gguf",   UM_ERROR_FORMAT,      "unknown value type 4294967295" },
  { "unknown-array-type.gguf",       UM_ERROR_FORMAT,      "unknown array element type" },
  { "nested-array.gguf",             UM_ERROR_UNSUPPORTED, "arrays of arrays" },
  { "bool-value-2.gguf",             UM_ERROR_FORMAT,      "bool value 2" },
  { "bool-array-value-7.gguf",       UM_ERROR_FORMAT,      "bool value 7" },
  { "duplicate-key.gguf",            UM_ERROR_FORMAT,      "key “llada.block_count” appears more than once" },
  { "key-empty.gguf",                UM_ERROR_FORMAT,      "key 0 is empty" },
  { "key-nul.gguf",                  UM_ERROR_FORMAT,      "NUL" },
  { "key-invalid-utf8.gguf",         UM_ERROR_FORMAT,      "UTF-8" },
  { "tensor-name-invalid-utf8.gguf", UM_ERROR_FORMAT,      "UTF-8" },
  { "alignment-zero.gguf",           UM_ERROR_FORMAT,      "general.alignment" },
  { "alignment-not-pow2.gguf",       UM_ERROR_FORMAT,      "is 48, not a power of two" },
  { "alignment-huge.gguf",           UM_ERROR_FORMAT,      "is 2147483648" },
  { "alignment-string.gguf",         UM_ERROR_FORMAT,      "has type string" },
  { "duplicate-tensor.gguf",         UM_ERROR_FORMAT,      "tensor “a.weight” appears more than once" },
  { "unknown-tensor-type.gguf",      UM_ERROR_UNSUPPORTED, "tensor “b.weight” has unknown ggml type 99" },
  { "unsupported-tensor-type.gguf",  UM_ERROR_UNSUPPORTED, "tensor “b.weight” has type Q2_K (ggml type 10)" },
  { "n-dims-5.gguf",                 UM_ERROR_FORMAT,      "has 5 dimensions" },
  { "n-dims-0.gguf",                 UM_ERROR_FORMAT,      "has 0 dimensions" },
  { "n-dims-max.gguf",               UM_ERROR_FORMAT,      "has 4294967295 dimensions" },
  { "zero-dim.gguf",                 UM_ERROR_FORMAT,      "zero dimension" },
  { "overflowing-shape.gguf",        UM_ERROR_FORMAT,      "absurd shape" },
  { "shape-bytes-overflow.gguf",     UM_ERROR_FORMAT,      "absurd shape" },
  { "dim-max.gguf",                  UM_ERROR_FORMAT,      "absurd shape" },
  { "partial-block.gguf",            UM_ERROR_FORMAT,      "not a multiple of its block size 32" },
  { "tensor-larger-than-file.gguf",  UM_ERROR_FORMAT,      "tensor “a.weight”: data ends at byte 16777600" },
  { "misaligned-offset.gguf",        UM_ERROR_FORMAT,      "data offset 40 is not a multiple of the alignment 32" },
  { "offset-past-end.gguf",          UM_ERROR_FORMAT,      "tensor “b.weight”: data ends at byte 1099511628194, past the end of the file (480 bytes)" },
  { "offset-wraps.gguf",             UM_ERROR_FORMAT,      "past the end of the file" },
  { "data-past-end.gguf",            UM_ERROR_FORMAT,      "data ends at byte 482, past the end of the file (480 bytes)" },
  { "overlapping-tensors.gguf",      UM_ERROR_FORMAT,      "tensors “a.weight” and “b.weight” overlap" },
};

static void
test_malformed_corpus (void)
{
  g_autofree char *dir = data_path ("malformed");
  g_autoptr (GError) error = NULL;
  g_autoptr (GDir) d = g_dir_open (dir, 0, &error);
  g_autoptr (GHashTable) seen = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  const char *name;

  g_assert_no_error (error);
  while ((name = g_dir_read_name (d)) != NULL)
    {
      g_autofree char *path = NULL;
      const Malformed *expect = NULL;
      UmGguf *g;

      if (!g_str_has_suffix (name, ".gguf"))
        continue;
      path = g_build_filename (dir, name, NULL);
      for (guint i = 0; i < G_N_ELEMENTS (malformed); i++)
        if (strcmp (malformed[i].file, name) == 0)
          expect = &malformed[i];
      g = um_gguf_open (path, &error);
      if (g != NULL)
        g_error ("%s opened without error", name);
      g_test_message ("%s", error->message);
      assert_error_names (error, name, expect ? expect->fragment : NULL);
      g_assert_true (g_str_has_prefix (error->message, name));
      if (expect && expect->code >= 0 && error->code != expect->code)
        g_error ("%s: error code %d, expected %d (%s)", name, error->code, expect->code,
                 error->message);
      g_clear_error (&error);
      g_hash_table_add (seen, g_strdup (name));
    }
  /* Every expected file is there (a regenerated corpus lost nothing). */
  for (guint i = 0; i < G_N_ELEMENTS (malformed); i++)
    if (!g_hash_table_contains (seen, malformed[i].file))
      g_error ("malformed/%s is missing", malformed[i].file);
}

static GBytes *
load (const char *name)
{
  g_autofree char *path = data_path (name);
  g_autoptr (GError) error = NULL;
  char *contents;
  gsize len;

  g_file_get_contents (path, &contents, &len, &error);
  g_assert_no_error (error);
  return g_bytes_new_take (contents, len);
}

static void
test_defaults_and_v2 (void)
{
  g_autoptr (GBytes) file = load ("tiny-llada-q4_0.gguf");
  g_autoptr (GError) error = NULL;
  gsize len;
  guint8 *buf = g_memdup2 (g_bytes_get_data (file, &len), g_bytes_get_size (file));
  UmGguf *g;
  guint8 *key;

  /* Version 2 has the same layout. */
  buf[4] = 2;
  g = um_gguf_open_from_bytes (buf, len, "v2.gguf", &error);
  g_assert_no_error (error);
  g_assert_cmpuint (um_gguf_version (g), ==, 2);
  um_gguf_free (g);
  buf[4] = 3;

  /* Without general.alignment the default, 32, applies. */
  key = memmem (buf, len, "general.alignment", 17);
  g_assert_nonnull (key);
  key[16] = 'X';
  g = um_gguf_open_from_bytes (buf, len, "noalign.gguf", &error);
  g_assert_no_error (error);
  g_assert_cmpint (um_gguf_find_key (g, "general.alignment"), ==, -1);
  g_assert_cmpuint (um_gguf_alignment (g), ==, 32);
  g_assert_cmpuint (um_tensor_table_size (um_gguf_get_tensors (g)), ==, 21);
  um_gguf_free (g);
  g_free (buf);
}

/* Every prefix of the metadata and a spread of prefixes through the data
 * must fail cleanly: the file ends exactly at its last tensor, so no strict
 * prefix holds all the data. Each prefix is its own heap block so ASan sees
 * any read past its end. */
static void
test_truncation (void)
{
  g_autoptr (GBytes) file = load ("tiny-llada-q4_0.gguf");
  g_autoptr (GError) error = NULL;
  g_autoptr (UmGguf) full = NULL;
  gsize len;
  const guint8 *p = g_bytes_get_data (file, &len);
  guint64 data_end = 0, meta;
  guint n_tried = 0;

  full = um_gguf_open_from_bytes (p, len, "tiny-llada-q4_0.gguf", &error);
  g_assert_no_error (error);
  for (guint i = 0; i < um_tensor_table_size (um_gguf_get_tensors (full)); i++)
    {
      const UmTensorInfo *info = um_tensor_table_get (um_gguf_get_tensors (full), i);
      data_end = MAX (data_end, (guint64) (info->data - p) + info->n_bytes);
    }
  g_assert_cmpuint (data_end, ==, len);
  meta = um_gguf_data_offset (full);

  for (gsize cut = 0; cut < len; cut += cut < meta + 64 ? 1 : 397)
    {
      guint8 *copy = g_memdup2 (p, cut);
      UmGguf *g = um_gguf_open_from_bytes (copy, cut, "cut.gguf", &error);
      if (g != NULL)
        g_error ("a prefix of %" G_GSIZE_FORMAT " bytes opened", cut);
      assert_error_names (error, "cut.gguf", NULL);
      g_clear_error (&error);
      g_free (copy);
      n_tried++;
    }
  /* The last byte too. */
  {
    guint8 *copy = g_memdup2 (p, len - 1);
    g_assert_null (um_gguf_open_from_bytes (copy, len - 1, "cut.gguf", &error));
    assert_error_names (error, "cut.gguf", "past the end of the file");
    g_clear_error (&error);
    g_free (copy);
  }
  g_test_message ("%u truncations rejected", n_tried);
}

/* Random byte edits in the metadata of a real file: whatever happens, no
 * crash, no leak, and an accepted file is safe to use. */
static void
test_mutations (void)
{
  g_autoptr (GBytes) file = load ("tiny-llada-q4_0.gguf");
  g_autoptr (GRand) rand = g_rand_new_with_seed (42);
  gsize len;
  const guint8 *p = g_bytes_get_data (file, &len);
  guint8 *buf = g_malloc (len);
  guint accepted = 0, rejected = 0;
  static const guint8 specials[] = { 0x00, 0xff, 0x7f, 0x80, 0x01, 0x20, 0x40 };

  for (guint iter = 0; iter < 3000; iter++)
    {
      g_autoptr (GError) error = NULL;
      UmGguf *g;
      guint n_edits = g_rand_int_range (rand, 1, 5);

      memcpy (buf, p, len);
      for (guint e = 0; e < n_edits; e++)
        {
          /* Mostly the metadata, where the structure is. */
          gsize at = g_rand_int_range (rand, 0, g_rand_boolean (rand) ? 600 : 13200);
          buf[at] = g_rand_boolean (rand) ? (guint8) g_rand_int (rand)
                                          : specials[g_rand_int_range (rand, 0, G_N_ELEMENTS (specials))];
        }
      g = um_gguf_open_from_bytes (buf, len, "mutant.gguf", &error);
      if (g != NULL)
        {
          touch_everything (g);
          um_gguf_free (g);
          accepted++;
        }
      else
        {
          assert_error_names (error, "mutant.gguf", NULL);
          rejected++;
        }
    }
  g_test_message ("mutations: %u accepted, %u rejected", accepted, rejected);
  g_free (buf);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  for (guint i = 0; i < G_N_ELEMENTS (fixtures); i++)
    {
      g_autofree char *name = g_strdup_printf ("/gguf/fixture/%s", fixtures[i].file);
      g_test_add_data_func (name, &fixtures[i], test_fixture);
    }
  g_test_add_func ("/gguf/f32-values", test_f32_values);
  g_test_add_func ("/gguf/getters", test_getters);
  g_test_add_func ("/gguf/steal-tensors", test_steal_tensors);
  g_test_add_func ("/gguf/open-errors", test_open_errors);
  g_test_add_func ("/gguf/writer/roundtrip", test_writer_roundtrip);
  g_test_add_func ("/gguf/writer/copy", test_writer_copy);
  g_test_add_func ("/gguf/writer/interrupted", test_writer_interrupted);
  g_test_add_data_func ("/gguf/writer/identical/tiny-llada-q8_0", "tiny-llada-q8_0.gguf",
                        test_writer_identical);
  g_test_add_data_func ("/gguf/writer/identical/small-kquant-q4_k_m", "small-kquant-q4_k_m.gguf",
                        test_writer_identical);
  g_test_add_func ("/gguf/malformed-corpus", test_malformed_corpus);
  g_test_add_func ("/gguf/defaults-and-v2", test_defaults_and_v2);
  g_test_add_func ("/gguf/truncation", test_truncation);
  g_test_add_func ("/gguf/mutations", test_mutations);
  return g_test_run ();
}

/* fuzz-json.c — libFuzzer target for the JSON entry point (um-json) and the
 * loaders of a model folder's JSON files.
 *
 * Each input is:
 *   - parsed by um_json_parse () (default limits, then a depth of 4 with
 *     repeated keys allowed); a refusal must be an UM_ERROR_FORMAT naming
 *     the text, and what is accepted must be what json-glib itself reads
 *     from it, and must survive being written back and read again;
 *   - loaded as tokenizer.json from memory (and used to encode and decode a
 *     short text when it loads);
 *   - written as config.json (beside an empty generation_config.json), then
 *     as generation_config.json beside a good config.json, of a temporary
 *     model folder (on /dev/shm where there is one), which
 *     um_model_config_load_hf () reads.
 * A crash, a leak, a critical or a warning is a failure.
 *
 * Built and run by tests/fuzz/run-fuzz.sh, seeded with tests/fuzz/seeds-json
 * (and a 200,000-deep nesting it writes). */
#include <glib.h>
#include <glib/gstdio.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "um-error.h"
#include "um-json.h"
#include "um-model-config.h"
#include "um-tokenizer.h"

int LLVMFuzzerInitialize (int *argc, char ***argv);
int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

/* The tiny fixture's config.json, for the generation_config.json runs. */
static const char good_config[] =
  "{\"architectures\": [\"LLaDAModelLM\"], \"model_type\": \"llada\", \"d_model\": 64, \"n_heads\": 4,"
  " \"n_kv_heads\": 4, \"n_layers\": 2, \"mlp_hidden_size\": 160, \"vocab_size\": 512,"
  " \"max_sequence_length\": 256, \"rope_theta\": 10000.0, \"rms_norm_eps\": 1e-05,"
  " \"block_type\": \"llama\", \"include_bias\": false, \"mask_token_id\": 508, \"eos_token_id\": 507}";

static char *model_dir;
static char *config_path;
static char *gen_path;

static void
remove_model_dir (void)
{
  g_unlink (config_path);
  g_unlink (gen_path);
  g_rmdir (model_dir);
}

/* A critical or warning means a broken invariant: make it a crash. */
int
LLVMFuzzerInitialize (int *argc, char ***argv)
{
  g_log_set_always_fatal (G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING);
  /* In memory where there is a tmpfs: creating files on ext4 thousands of
   * times a second is most of the time otherwise. */
  model_dir = g_build_filename (g_file_test ("/dev/shm", G_FILE_TEST_IS_DIR) ? "/dev/shm" : g_get_tmp_dir (),
                                "fuzz-json-XXXXXX", NULL);
  g_assert (g_mkdtemp (model_dir) != NULL);
  config_path = g_build_filename (model_dir, "config.json", NULL);
  gen_path = g_build_filename (model_dir, "generation_config.json", NULL);
  atexit (remove_model_dir);
  return 0;
}

static void
check_refusal (const GError *error, const char *what)
{
  g_assert (error != NULL && error->domain == UM_ERROR && error->code == UM_ERROR_FORMAT);
  g_assert (g_str_has_prefix (error->message, what));
}

/* json-glib 1.6 writes the double 1e17 as "1e+17.0", which is not JSON:
 * takes such a ".0" off, outside strings. */
static char *
drop_exponent_dot_zero (const char *text)
{
  GString *out = g_string_new (NULL);
  gboolean in_string = FALSE;

  for (const char *p = text; *p != '\0'; p++)
    {
      if (in_string && *p == '\\')
        {
          g_string_append_c (out, *p++);
          g_string_append_c (out, *p);
          continue;
        }
      if (*p == '"')
        in_string = !in_string;
      if (!in_string && (*p == 'e' || *p == 'E'))
        {
          const char *q = p + 1;
          if (*q == '+' || *q == '-')
            q++;
          while (g_ascii_isdigit (*q))
            q++;
          g_string_append_len (out, p, q - p);
          if (q[0] == '.' && q[1] == '0' && !g_ascii_isdigit (q[2]))
            q += 2;
          p = q - 1;
          continue;
        }
      g_string_append_c (out, *p);
    }
  return g_string_free (out, FALSE);
}

static void
parse (const uint8_t *data, size_t size, const UmJsonLimits *limits)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonNode) root = um_json_parse ((const char *) data, (gssize) size, "fuzz.json", limits, &error);
  g_autoptr(JsonParser) parser = NULL;
  g_autofree char *again = NULL;
  g_autoptr(JsonNode) back = NULL;

  if (root == NULL)
    {
      check_refusal (error, "fuzz.json: ");
      return;
    }
  g_assert (error == NULL);
  /* What passed the check is plain JSON: json-glib reads the same tree
   * (with repeated keys, it keeps the last, as um_json_parse did). */
  parser = json_parser_new ();
  g_assert (json_parser_load_from_data (parser, (const char *) data, (gssize) size, NULL));
  g_assert (json_node_equal (root, json_parser_get_root (parser)));
  /* And what json-glib writes of it is read back the same, once the ".0"
   * json-glib 1.6 appends to a double it wrote as "1e+17" is taken off
   * ("1e+17.0" is not JSON; json-glib cannot read it back either). */
  {
    g_autofree char *written = json_to_string (root, FALSE);
    again = drop_exponent_dot_zero (written);
  }
  back = um_json_parse (again, -1, "again.json", limits, &error);
  g_assert (back != NULL && error == NULL);
  g_assert (json_node_equal (root, back));
}

static void
load_tokenizer (const uint8_t *data, size_t size)
{
  g_autoptr(GError) error = NULL;
  UmTokenizer *tok = um_tokenizer_new_from_data ((const char *) data, (gssize) size, "tokenizer.json", &error);
  g_autoptr(GArray) ids = NULL;

  if (tok == NULL)
    {
      g_assert (error != NULL && error->domain == UM_ERROR);
      g_assert (g_str_has_prefix (error->message, "tokenizer.json"));
      return;
    }
  ids = g_array_new (FALSE, FALSE, sizeof (gint32));
  if (um_tokenizer_encode (tok, "Hello, wörld 12!", -1, ids, NULL))
    {
      g_autofree char *text = um_tokenizer_decode (tok, (const gint32 *) ids->data, ids->len, FALSE, NULL);
      (void) text;
    }
  um_tokenizer_free (tok);
}

/* No fsync (g_file_set_contents syncs): thousands of writes a second to a
 * scratch folder. Not G_FILE_SET_CONTENTS_NONE either: GLib 2.74 does not
 * truncate the file then. */
static void
put (const char *path, const char *data, gssize len)
{
  FILE *f = fopen (path, "wb");
  gsize n = len < 0 ? strlen (data) : (gsize) len;

  g_assert (f != NULL);
  g_assert (fwrite (data, 1, n, f) == n);
  g_assert (fclose (f) == 0);
}

static void
load_config (const uint8_t *data, size_t size, gboolean as_generation_config)
{
  g_autoptr(GError) error = NULL;
  UmModelConfig cfg;

  if (as_generation_config)
    {
      put (config_path, good_config, -1);
      put (gen_path, (const char *) data, (gssize) size);
    }
  else
    {
      put (config_path, (const char *) data, (gssize) size);
      put (gen_path, "{}", -1);
    }
  if (!um_model_config_load_hf (&cfg, model_dir, &error))
    {
      g_assert (error != NULL && error->domain == UM_ERROR);
      /* Names the file; a bos_token_id out of the vocabulary in
       * generation_config.json is checked with config.json's values and
       * reported under config.json's name. */
      g_assert (strstr (error->message, "config.json") != NULL);
    }
  else
    g_assert (error == NULL);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  static const UmJsonLimits shallow = { .max_depth = 4, .allow_duplicate_keys = TRUE };

  parse (data, size, NULL);
  parse (data, size, &shallow);
  load_tokenizer (data, size);
  load_config (data, size, FALSE);
  load_config (data, size, TRUE);
  return 0;
}

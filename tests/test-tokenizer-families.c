/* test-tokenizer-families.c — the tokenizers and chat templates of Dream,
 * LLaDA-MoE, RND1 and LLaDA 2.
 *
 * Expected ids are the `tokenize` cases of tiny-{dream,llada-moe,rnd1,llada2}
 * .expected.json, computed by Hugging Face `tokenizers` from each folder's
 * tokenizer.json. The same cases go through Dream's slow files (vocab.json +
 * merges.txt) and through each GGUF's vocabulary; where our choice differs
 * from that tokenizer.json (Dream composes to NFC, as its DreamTokenizer
 * does, and its fixture tokenizer.json does not), the ids must be those of
 * the NFC text. The chat prompts must give the generate cases' prompt_ids.
 */
#include <glib.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <string.h>

#include "um-chat-template.h"
#include "um-error.h"
#include "um-gguf.h"
#include "um-model.h"
#include "um-model-gguf.h"
#include "um-test-util.h"
#include "um-tokenizer.h"

static const char *const families[] = { "dream", "llada-moe", "rnd1", "llada2" };

/* ---- helpers -------------------------------------------------------------------- */

static UmTokenizer *
load_json_tokenizer (const char *family)
{
  g_autofree char *rel = g_strdup_printf ("tiny-%s/tokenizer.json", family);
  g_autofree char *path = um_test_data_path (rel);
  g_autoptr(GError) error = NULL;
  UmTokenizer *tok = um_tokenizer_new_from_file (path, &error);

  g_assert_no_error (error);
  g_assert_nonnull (tok);
  return tok;
}

static UmTokenizer *
load_gguf_tokenizer (const char *family, GError **error)
{
  g_autofree char *rel = g_strdup_printf ("tiny-%s-f32.gguf", family);
  g_autofree char *path = um_test_data_path (rel);
  g_autoptr(GError) local = NULL;
  g_autoptr(UmGguf) g = um_gguf_open (path, &local);
  g_autofree gint32 *types = NULL;
  const char * const *tokens, * const *merges;
  guint64 n_tokens = 0, n_merges = 0, n_types = 0;

  g_assert_no_error (local);
  tokens = um_gguf_get_string_array (g, "tokenizer.ggml.tokens", &n_tokens, &local);
  g_assert_no_error (local);
  merges = um_gguf_get_string_array (g, "tokenizer.ggml.merges", &n_merges, &local);
  g_assert_no_error (local);
  g_assert_true (um_gguf_get_int32_array (g, "tokenizer.ggml.token_type", &types, &n_types, &local));
  g_assert_cmpuint (n_types, ==, n_tokens);
  return um_tokenizer_new_from_gguf_vocab (tokens, (guint) n_tokens, merges, (guint) n_merges, types,
                                           um_gguf_get_string (g, "general.architecture", NULL),
                                           um_gguf_get_string (g, "tokenizer.ggml.pre", NULL), error);
}

static JsonObject *
expected (const char *family, JsonParser **parser)
{
  g_autofree char *rel = g_strdup_printf ("tiny-%s.expected.json", family);

  *parser = um_test_load_json (rel);
  return json_node_get_object (json_parser_get_root (*parser));
}

static GArray *
encode (UmTokenizer *tok, const char *text, gssize len)
{
  g_autoptr(GError) error = NULL;
  GArray *ids = g_array_new (FALSE, FALSE, sizeof (gint32));

  g_assert_true (um_tokenizer_encode (tok, text, len, ids, &error));
  g_assert_no_error (error);
  return ids;
}

static char *
decode (UmTokenizer *tok, GArray *ids, gboolean skip_special)
{
  g_autoptr(GError) error = NULL;
  char *text = um_tokenizer_decode (tok, (const gint32 *) ids->data, ids->len, skip_special, &error);

  g_assert_no_error (error);
  g_assert_nonnull (text);
  return text;
}

static char *
ids_string (const GArray *ids)
{
  GString *s = g_string_new ("[");
  for (guint i = 0; i < ids->len; i++)
    g_string_append_printf (s, "%s%d", i ? ", " : "", g_array_index (ids, gint32, i));
  g_string_append_c (s, ']');
  return g_string_free (s, FALSE);
}

static gboolean
ids_equal (const GArray *a, const GArray *b)
{
  /* An empty GArray's data may be NULL, which memcmp must not see. */
  return a->len == b->len && (a->len == 0 || memcmp (a->data, b->data, a->len * sizeof (gint32)) == 0);
}

static void
assert_ids_equal (const GArray *got, const GArray *want, const char *what)
{
  if (!ids_equal (got, want))
    {
      g_autofree char *g = ids_string (got);
      g_autofree char *w = ids_string (want);
      g_error ("%s: got %s, expected %s", what, g, w);
    }
}

static char *
nfc (const char *text)
{
  return g_utf8_normalize (text, -1, G_NORMALIZE_NFC);
}

static gboolean
is_nfc (const char *text)
{
  g_autofree char *n = nfc (text);
  return g_str_equal (n, text);
}

typedef enum {
  EXACT,         /* the fixture's ids on every case */
  NFC_OF_JSON,   /* NFC-stable texts: the fixture's ids; others: the json tokenizer's ids of NFC(text) */
} Expect;

/* Every tokenize case of @family through @tok, and the decode round trip. */
static guint
check_cases (UmTokenizer *tok, const char *family, Expect how, gboolean tok_nfc)
{
  g_autoptr(JsonParser) parser = NULL;
  JsonArray *cases = json_object_get_array_member (expected (family, &parser), "tokenize");
  g_autoptr(UmTokenizer) ref = how == NFC_OF_JSON ? load_json_tokenizer (family) : NULL;
  guint n_nfc_changed = 0;

  g_assert_cmpuint (json_array_get_length (cases), >=, 10);
  for (guint i = 0; i < json_array_get_length (cases); i++)
    {
      JsonObject *c = json_array_get_object_element (cases, i);
      const char *text = json_object_get_string_member (c, "text");
      g_autoptr(GArray) want = um_test_json_ids (json_object_get_array_member (c, "ids"));
      g_autoptr(GArray) got = encode (tok, text, -1);
      g_autofree char *composed = nfc (text);
      g_autofree char *back = decode (tok, got, FALSE);
      g_autofree char *what = g_strdup_printf ("tiny-%s case %u (%s)", family, i, text);

      if (!is_nfc (text))
        n_nfc_changed++;
      if (how == NFC_OF_JSON && !is_nfc (text))
        {
          g_autoptr(GArray) want_nfc = encode (ref, composed, -1);
          assert_ids_equal (got, want_nfc, what);
          g_assert_false (ids_equal (got, want));
        }
      else
        assert_ids_equal (got, want, what);
      /* byte-level BPE is lossless; NFC is not undone */
      g_assert_cmpstr (back, ==, tok_nfc ? composed : text);
    }
  /* the fixtures hold one decomposed text (the NFC case) */
  g_assert_cmpuint (n_nfc_changed, ==, 1);
  return json_array_get_length (cases);
}

/* ---- tokenizer.json --------------------------------------------------------------- */

static void
test_json_cases (void)
{
  for (guint f = 0; f < G_N_ELEMENTS (families); f++)
    {
      g_autoptr(UmTokenizer) tok = load_json_tokenizer (families[f]);
      gboolean rnd1 = g_str_equal (families[f], "rnd1");

      check_cases (tok, families[f], EXACT, rnd1);
      /* the heap merge gives the same ids */
      um_tokenizer_set_force_heap (tok, TRUE);
      check_cases (tok, families[f], EXACT, rnd1);
    }
}

/* Special tokens are dropped by decode with skip_special; RND1's <think> is
 * an added token but not special. */
static void
test_special_tokens (void)
{
  static const struct {
    const char *family, *text, *skipped;
  } cases[] = {
    { "dream", "<|im_start|>user\nhi<|im_end|><|mask|><|endoftext|>", "user\nhi" },
    { "llada-moe", "<role>HUMAN</role>hi<|role_end|><|mask|><|endoftext|>", "HUMANhi" },
    { "llada2", "<role>HUMAN</role>hi<|role_end|><|mask|><|endoftext|>", "HUMANhi" },
    { "rnd1", "<|im_start|>x<|im_end|><think>y</think><|endoftext|>", "x<think>y</think>" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    for (guint form = 0; form < 2; form++)
      {
        g_autoptr(GError) error = NULL;
        g_autoptr(UmTokenizer) tok = form == 0 ? load_json_tokenizer (cases[i].family)
                                               : load_gguf_tokenizer (cases[i].family, &error);
        g_autoptr(GArray) ids = NULL;
        g_autofree char *all = NULL, *skipped = NULL;

        g_assert_no_error (error);
        ids = encode (tok, cases[i].text, -1);
        all = decode (tok, ids, FALSE);
        skipped = decode (tok, ids, TRUE);
        g_assert_cmpstr (all, ==, cases[i].text);
        g_assert_cmpstr (skipped, ==, cases[i].skipped);
      }

  {
    g_autoptr(UmTokenizer) tok = load_json_tokenizer ("rnd1");
    gint32 think = um_tokenizer_token_to_id (tok, "<think>");
    g_assert_cmpint (think, ==, 504);
    g_assert_true (um_tokenizer_is_added (tok, think));
    g_assert_false (um_tokenizer_is_special (tok, think));
    g_assert_true (um_tokenizer_is_special (tok, um_tokenizer_token_to_id (tok, "<|im_end|>")));
  }
}

/* A tokenizer.json with an NFC normalizer and two added tokens written
 * decomposed: the normalized one is matched in composed text (tokenizers
 * normalizes its content too), the other only in the raw text. */
static void
add_token (JsonArray *added, gint64 id, const char *content, gboolean normalized)
{
  JsonObject *o = json_object_new ();

  json_object_set_int_member (o, "id", id);
  json_object_set_string_member (o, "content", content);
  json_object_set_boolean_member (o, "normalized", normalized);
  json_object_set_boolean_member (o, "special", FALSE);
  json_array_add_object_element (added, o);
}

static void
test_nfc_added_tokens (void)
{
  g_autofree char *path = um_test_data_path ("tiny-rnd1/tokenizer.json");
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(UmTokenizer) plain = load_json_tokenizer ("rnd1");
  g_autoptr(UmTokenizer) tok = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *json = NULL;
  JsonObject *root;

  json_parser_load_from_file (parser, path, &error);
  g_assert_no_error (error);
  root = json_node_get_object (json_parser_get_root (parser));
  add_token (json_object_get_array_member (root, "added_tokens"), 506, "cafe\xcc\x81", TRUE);
  add_token (json_object_get_array_member (root, "added_tokens"), 507, "nai\xcc\x88ve", FALSE);
  json = json_to_string (json_parser_get_root (parser), FALSE);
  tok = um_tokenizer_new_from_data (json, -1, "nfc-added.json", &error);
  g_assert_no_error (error);

  {
    static const struct {
      const char *text;
      gint32      ids[3];
      guint       n;
    } cases[] = {
      { "caf\xc3\xa9", { 506 }, 1 },                    /* composed: normalized token */
      { "cafe\xcc\x81", { 506 }, 1 },                   /* decomposed: composed first */
      { "nai\xcc\x88ve", { 507 }, 1 },                  /* raw token, raw text */
      { "<think>cafe\xcc\x81", { 504, 506 }, 2 },
    };
    for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
      {
        g_autoptr(GArray) got = encode (tok, cases[i].text, -1);
        g_autoptr(GArray) want = g_array_new (FALSE, FALSE, sizeof (gint32));
        g_array_append_vals (want, cases[i].ids, cases[i].n);
        assert_ids_equal (got, want, cases[i].text);
      }
  }
  /* the raw token is not found once the text is composed */
  {
    g_autoptr(GArray) got = encode (tok, "na\xc3\xafve", -1);
    g_autoptr(GArray) want = encode (plain, "na\xc3\xafve", -1);
    assert_ids_equal (got, want, "naïve composed");
  }
  /* NUL never composes: each side of it is composed alone */
  {
    static const char decomposed[] = "cafe\xcc\x81\0e\xcc\x81 x";
    static const char composed[] = "caf\xc3\xa9\0\xc3\xa9 x";
    g_autoptr(GArray) a = encode (plain, decomposed, sizeof decomposed - 1);
    g_autoptr(GArray) b = encode (plain, composed, sizeof composed - 1);
    assert_ids_equal (a, b, "NUL");
  }
}

static void
expect_data_error (const char *json, gint code, const char *needle)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(UmTokenizer) tok = um_tokenizer_new_from_data (json, -1, "t.json", &error);

  g_assert_null (tok);
  g_assert_error (error, UM_ERROR, code);
  if (strstr (error->message, needle) == NULL)
    g_error ("error “%s” does not name %s", error->message, needle);
}

static void
test_normalizers (void)
{
  static const char model[] = "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}";
  g_autofree char *seq = g_strdup_printf ("{\"normalizer\": {\"type\": \"Sequence\", \"normalizers\":"
                                          " [{\"type\": \"NFC\"}]}, %s}", model);
  g_autofree char *nfkc = g_strdup_printf ("{\"normalizer\": {\"type\": \"NFKC\"}, %s}", model);
  g_autofree char *mixed = g_strdup_printf ("{\"normalizer\": {\"type\": \"Sequence\", \"normalizers\":"
                                            " [{\"type\": \"NFC\"}, {\"type\": \"Lowercase\"}]}, %s}",
                                            model);
  g_autofree char *bad = g_strdup_printf ("{\"normalizer\": [\"NFC\"], %s}", model);
  g_autoptr(GError) error = NULL;
  g_autoptr(UmTokenizer) tok = um_tokenizer_new_from_data (seq, -1, "t.json", &error);

  g_assert_no_error (error);
  g_assert_nonnull (tok);
  expect_data_error (nfkc, UM_ERROR_UNSUPPORTED, "“NFKC”");
  expect_data_error (mixed, UM_ERROR_UNSUPPORTED, "normalizer.normalizers[1]");
  expect_data_error (bad, UM_ERROR_FORMAT, "normalizer");
}

/* ---- slow files (Dream) ---------------------------------------------------------- */

static UmTokenizer *
load_slow (const char *config, GError **error)
{
  g_autofree char *vocab = um_test_data_path ("tiny-dream/vocab.json");
  g_autofree char *merges = um_test_data_path ("tiny-dream/merges.txt");
  g_autofree char *cfg = config ? um_test_data_path (config) : NULL;

  return um_tokenizer_new_from_slow_files (vocab, merges, cfg, error);
}

static void
test_slow_files (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(UmTokenizer) slow = load_slow ("tiny-dream/tokenizer_config.json", &error);
  g_autoptr(UmTokenizer) json = load_json_tokenizer ("dream");

  g_assert_no_error (error);
  g_assert_cmpuint (um_tokenizer_vocab_size (slow), ==, um_tokenizer_vocab_size (json));
  g_assert_cmpuint (um_tokenizer_n_merges (slow), ==, um_tokenizer_n_merges (json));
  for (guint r = 0; r < um_tokenizer_n_merges (json); r++)
    g_assert_cmpstr (um_tokenizer_get_merge (slow, r), ==, um_tokenizer_get_merge (json, r));
  for (gint32 id = 0; id < (gint32) um_tokenizer_vocab_size (json); id++)
    {
      g_assert_cmpstr (um_tokenizer_id_to_token (slow, id), ==, um_tokenizer_id_to_token (json, id));
      g_assert_cmpint (um_tokenizer_is_special (slow, id), ==, um_tokenizer_is_special (json, id));
    }
  /* DreamTokenizer composes to NFC; the fixture's tokenizer.json does not */
  check_cases (slow, "dream", NFC_OF_JSON, TRUE);

  /* without tokenizer_config.json: no added tokens and no NFC */
  {
    g_autoptr(UmTokenizer) bare = load_slow (NULL, &error);
    g_autoptr(GArray) a = NULL, b = NULL;
    const char *text = "cafe\xcc\x81 na\xc3\xafve <|mask|>";

    g_assert_no_error (error);
    g_assert_cmpuint (um_tokenizer_vocab_size (bare), ==, 504);
    a = encode (bare, text, -1);
    b = encode (json, "cafe\xcc\x81 na\xc3\xafve <|", -1);
    g_assert_cmpuint (a->len, >, b->len);
    g_array_set_size (a, b->len);
    assert_ids_equal (a, b, "bare slow tokenizer");
  }
}

/* um_tokenizer_new_from_dir takes tokenizer.json first, then the slow files;
 * merges.txt as Python reads it (CRLF, blank lines, the #version line). */
static void
test_slow_dir (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *src = um_test_data_path ("tiny-dream");
  g_autofree char *tj = g_build_filename (dir, "tokenizer.json", NULL);
  g_autofree char *mt = g_build_filename (dir, "merges.txt", NULL);
  g_autofree char *vj = g_build_filename (dir, "vocab.json", NULL);
  g_autoptr(UmTokenizer) json = load_json_tokenizer ("dream");
  g_autoptr(GError) error = NULL;
  const char *text = "<|im_start|>user\nWhat is free software?<|im_end|>\n";
  g_autoptr(GArray) want = encode (json, text, -1);

  um_test_copy_dir (src, dir);
  {
    g_autoptr(UmTokenizer) tok = um_tokenizer_new_from_dir (dir, &error);
    g_autoptr(GArray) got = NULL;
    g_assert_no_error (error);
    got = encode (tok, text, -1);
    assert_ids_equal (got, want, "dir with tokenizer.json");
  }
  g_assert_cmpint (g_unlink (tj), ==, 0);
  {
    g_autofree char *merges = um_test_read_file (mt);
    g_auto(GStrv) lines = g_strsplit (merges, "\n", -1);
    g_autofree char *crlf = g_strjoinv ("\r\n\r\n", lines);
    g_autoptr(UmTokenizer) tok = NULL;
    g_autoptr(GArray) got = NULL;

    um_test_write_file (mt, crlf, -1);
    tok = um_tokenizer_new_from_dir (dir, &error);
    g_assert_no_error (error);
    g_assert_cmpuint (um_tokenizer_n_merges (tok), ==, um_tokenizer_n_merges (json));
    got = encode (tok, text, -1);
    assert_ids_equal (got, want, "slow files");

    /* a line with three fields, and a merge of tokens not in vocab.json */
    um_test_write_file (mt, "#version: 0.2\n\xc4\xa0 t\n\xc4\xa0 a x\n", -1);
    g_assert_null (um_tokenizer_new_from_dir (dir, &error));
    g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
    g_assert_nonnull (strstr (error->message, "line 3"));
    g_clear_error (&error);
    um_test_write_file (mt, "\xc4\xa0 t\nzz qq\n", -1);
    g_assert_null (um_tokenizer_new_from_dir (dir, &error));
    g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
    g_assert_nonnull (strstr (error->message, "“zz”"));
    g_clear_error (&error);
    /* "#version" only counts on the first line */
    um_test_write_file (mt, "\xc4\xa0 t\n#version: 0.2\n", -1);
    g_assert_null (um_tokenizer_new_from_dir (dir, &error));
    g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
    g_clear_error (&error);
    um_test_write_file (vj, "[1, 2]", -1);
    g_assert_null (um_tokenizer_new_from_dir (dir, &error));
    g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
    g_clear_error (&error);
  }
  g_assert_cmpint (g_unlink (mt), ==, 0);
  g_assert_null (um_tokenizer_new_from_dir (dir, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_IO);
  g_assert_nonnull (strstr (error->message, "tokenizer.json"));
  g_clear_error (&error);
  um_test_rmtree (dir);
}

/* ---- GGUF vocabularies ------------------------------------------------------------ */

static void
test_gguf_cases (void)
{
  for (guint f = 0; f < G_N_ELEMENTS (families); f++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(UmTokenizer) tok = load_gguf_tokenizer (families[f], &error);
      gboolean dream = g_str_equal (families[f], "dream");
      gboolean rnd1 = g_str_equal (families[f], "rnd1");

      g_assert_no_error (error);
      g_assert_cmpuint (um_tokenizer_vocab_size (tok), ==, 512);
      /* dream and rnd1 compose to NFC as their HF tokenizers do (RND1's
       * tokenizer.json; Dream's slow DreamTokenizer, not its fixture json) */
      check_cases (tok, families[f], dream ? NFC_OF_JSON : EXACT, dream || rnd1);
    }
}

/* The [PAD…] rows past the tokenizer (RND1's mask 506 among them) decode to
 * nothing; the strings stay readable. */
static void
test_gguf_unused_rows (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(UmTokenizer) tok = load_gguf_tokenizer ("rnd1", &error);
  gint32 ids[] = { 87, 506, 511, 88 };
  g_autofree char *text = NULL;

  g_assert_no_error (error);
  g_assert_cmpstr (um_tokenizer_id_to_token (tok, 506), ==, "[PAD506]");
  g_assert_true (um_tokenizer_is_special (tok, 506));
  g_assert_false (um_tokenizer_is_added (tok, 506));
  text = um_tokenizer_decode (tok, ids, G_N_ELEMENTS (ids), FALSE, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (text, ==, "xy");
  /* the string of an unused row is ordinary text */
  {
    g_autoptr(GArray) got = encode (tok, "[PAD506]", -1);
    for (guint i = 0; i < got->len; i++)
      g_assert_cmpint (g_array_index (got, gint32, i), <, 501);
  }
}

/* tokenizer.ggml.pre: known names, the family's own split for "default" or
 * none, an unknown name refused for the new families and kept for LLaDA. */
static void
test_gguf_pre_names (void)
{
  g_autofree char *path = um_test_data_path ("tiny-llada-moe-f32.gguf");
  g_autoptr(UmGguf) g = um_gguf_open (path, NULL);
  g_autofree gint32 *types = NULL;
  const char * const *tokens, * const *merges;
  guint64 n_tokens = 0, n_merges = 0, n_types = 0;
  static const struct {
    const char *arch, *pre;
    gboolean    ok;
  } cases[] = {
    { "llada-moe", "llada-moe", TRUE }, { "llada-moe", "bailingmoe", TRUE },
    { "llada-moe", "bailingmoe2", TRUE }, { "llada-moe", NULL, TRUE },
    { "llada-moe", "default", TRUE }, { "llada-moe", "llama-bpe", FALSE },
    { "llada2", "bailingmoe2", TRUE }, { "dream", "qwen2", TRUE }, { "dream", "gpt-2", FALSE },
    { "rnd1", "qwen2", TRUE }, { "rnd1", "deepseek-r1-qwen", TRUE }, { "rnd1", "tekken", FALSE },
    { "llada", "llama-bpe", TRUE }, { NULL, "whatever", TRUE },
  };

  g_assert_nonnull (g);
  tokens = um_gguf_get_string_array (g, "tokenizer.ggml.tokens", &n_tokens, NULL);
  merges = um_gguf_get_string_array (g, "tokenizer.ggml.merges", &n_merges, NULL);
  g_assert_true (um_gguf_get_int32_array (g, "tokenizer.ggml.token_type", &types, &n_types, NULL));
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(UmTokenizer) tok = um_tokenizer_new_from_gguf_vocab (tokens, (guint) n_tokens, merges,
                                                                     (guint) n_merges, types,
                                                                     cases[i].arch, cases[i].pre,
                                                                     &error);
      if (cases[i].ok)
        {
          g_assert_no_error (error);
          g_assert_nonnull (tok);
        }
      else
        {
          g_assert_null (tok);
          g_assert_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED);
          g_assert_nonnull (strstr (error->message, cases[i].pre));
        }
    }
  /* what our GGUF writer should name each family's split */
  g_assert_cmpstr (um_tokenizer_gguf_pre_name ("dream"), ==, "qwen2");
  g_assert_cmpstr (um_tokenizer_gguf_pre_name ("rnd1"), ==, "qwen2");
  g_assert_cmpstr (um_tokenizer_gguf_pre_name ("llada-moe"), ==, "llada-moe");
  g_assert_cmpstr (um_tokenizer_gguf_pre_name ("llada2"), ==, "bailingmoe2");
  g_assert_cmpstr (um_tokenizer_gguf_pre_name ("llada"), ==, "default");
  g_assert_cmpstr (um_tokenizer_gguf_pre_name (NULL), ==, "default");
}

/* ---- chat templates -------------------------------------------------------------- */

static char *
config_template (const char *family)
{
  g_autofree char *rel = g_strdup_printf ("tiny-%s/tokenizer_config.json", family);
  g_autoptr(JsonParser) parser = um_test_load_json (rel);
  JsonObject *o = json_node_get_object (json_parser_get_root (parser));

  return g_strdup (json_object_get_string_member (o, "chat_template"));
}

static void
test_chat_detect (void)
{
  static const struct {
    const char  *family;
    UmChatFormat format;
    const char  *system;
  } cases[] = {
    { "dream", UM_CHAT_FORMAT_CHATML, "You are a helpful assistant." },
    { "rnd1", UM_CHAT_FORMAT_CHATML, "You are a helpful assistant." },
    { "llada-moe", UM_CHAT_FORMAT_LING, "detailed thinking off" },
    { "llada2", UM_CHAT_FORMAT_LING, "detailed thinking off" },
    { "llada", UM_CHAT_FORMAT_LLADA, NULL },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autofree char *jinja = config_template (cases[i].family);
      g_autoptr(UmChatTemplate) t = um_chat_template_detect (jinja);

      g_assert_nonnull (t);
      g_assert_cmpint (t->format, ==, cases[i].format);
      g_assert_cmpstr (t->default_system, ==, cases[i].system);
    }

  /* Qwen2.5's template: the default is in the third literal that starts a
   * system turn (the first two go on with an expression) */
  {
    static const char qwen[] =
      "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0]['role'] == 'system' %}"
      "{{- messages[0]['content'] }}{%- endif %}{%- else %}{%- if messages[0]['role'] == 'system' %}"
      "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}{%- else %}"
      "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You\\'re \"helpful\".<|im_end|>\\n' }}"
      "{%- endif %}{%- endif %}";
    static const char none[] =
      "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n'}}"
      "{% endfor %}";
    g_autoptr(UmChatTemplate) t = um_chat_template_detect (qwen);
    g_autoptr(UmChatTemplate) t2 = um_chat_template_detect (none);

    g_assert_cmpint (t->format, ==, UM_CHAT_FORMAT_CHATML);
    g_assert_cmpstr (t->default_system, ==, "You are Qwen, created by Alibaba Cloud. You're \"helpful\".");
    g_assert_cmpint (t2->format, ==, UM_CHAT_FORMAT_CHATML);
    g_assert_null (t2->default_system);
  }

  /* unknown templates: NULL, and each family's own */
  g_assert_null (um_chat_template_detect ("{{ messages[0]['content'] }}"));
  g_assert_null (um_chat_template_detect (NULL));
  {
    static const struct {
      UmArch       arch;
      UmChatFormat format;
      const char  *system;
    } fallbacks[] = {
      { UM_ARCH_LLADA, UM_CHAT_FORMAT_LLADA, NULL },
      { UM_ARCH_DREAM, UM_CHAT_FORMAT_CHATML, "You are a helpful assistant." },
      { UM_ARCH_LLADA_MOE, UM_CHAT_FORMAT_LING, "detailed thinking off" },
      { UM_ARCH_LLADA2, UM_CHAT_FORMAT_LING, "detailed thinking off" },
      { UM_ARCH_RND1, UM_CHAT_FORMAT_TASK, NULL },
    };
    for (guint i = 0; i < G_N_ELEMENTS (fallbacks); i++)
      {
        g_autoptr(UmChatTemplate) t = um_chat_template_for_arch (fallbacks[i].arch, "{{ x }}");
        g_assert_cmpint (t->format, ==, fallbacks[i].format);
        g_assert_cmpstr (t->default_system, ==, fallbacks[i].system);
      }
  }
  /* RND1 is a base model: the task mode whatever its template */
  {
    g_autofree char *jinja = config_template ("rnd1");
    g_autoptr(UmChatTemplate) t = um_chat_template_for_arch (UM_ARCH_RND1, jinja);
    g_assert_cmpint (t->format, ==, UM_CHAT_FORMAT_TASK);
  }
}

/* From a folder: tokenizer_config.json (string or list), else chat_template.jinja. */
static void
test_chat_from_dir (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *cfg = g_build_filename (dir, "tokenizer_config.json", NULL);
  g_autofree char *jinja = g_build_filename (dir, "chat_template.jinja", NULL);
  g_autoptr(GError) error = NULL;

  for (guint f = 0; f < G_N_ELEMENTS (families); f++)
    {
      g_autofree char *rel = g_strdup_printf ("tiny-%s", families[f]);
      g_autofree char *src = um_test_data_path (rel);
      UmArch arch = g_str_equal (families[f], "dream") ? UM_ARCH_DREAM
                    : g_str_equal (families[f], "rnd1") ? UM_ARCH_RND1
                    : g_str_equal (families[f], "llada2") ? UM_ARCH_LLADA2 : UM_ARCH_LLADA_MOE;
      g_autoptr(UmChatTemplate) t = um_chat_template_from_dir (src, arch, &error);

      g_assert_no_error (error);
      g_assert_cmpint (t->format, ==, arch == UM_ARCH_DREAM ? UM_CHAT_FORMAT_CHATML
                                      : arch == UM_ARCH_RND1 ? UM_CHAT_FORMAT_TASK
                                      : UM_CHAT_FORMAT_LING);
    }

  /* no file at all: the family's own */
  {
    g_autoptr(UmChatTemplate) t = um_chat_template_from_dir (dir, UM_ARCH_DREAM, &error);
    g_assert_no_error (error);
    g_assert_cmpint (t->format, ==, UM_CHAT_FORMAT_CHATML);
  }
  um_test_write_file (cfg, "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"{{ x }}\"},"
                           " {\"name\": \"default\", \"template\": \"<role>SYSTEM</role>"
                           "S<|role_end|>\"}]}", -1);
  {
    g_autoptr(UmChatTemplate) t = um_chat_template_from_dir (dir, UM_ARCH_DREAM, &error);
    g_assert_no_error (error);
    g_assert_cmpint (t->format, ==, UM_CHAT_FORMAT_LING);
    g_assert_cmpstr (t->default_system, ==, "S");
  }
  um_test_write_file (cfg, "{\"bos_token\": null}", -1);
  um_test_write_file (jinja, "{{ '<|im_start|>system\nHi.<|im_end|>\n' }}", -1);
  {
    g_autoptr(UmChatTemplate) t = um_chat_template_from_dir (dir, UM_ARCH_LLADA_MOE, &error);
    g_assert_no_error (error);
    g_assert_cmpint (t->format, ==, UM_CHAT_FORMAT_CHATML);
    g_assert_cmpstr (t->default_system, ==, "Hi.");
  }
  um_test_write_file (cfg, "{\"chat_template\": ", -1);
  g_assert_null (um_chat_template_from_dir (dir, UM_ARCH_DREAM, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
  g_assert_nonnull (strstr (error->message, "tokenizer_config.json"));
  g_clear_error (&error);
  um_test_rmtree (dir);
}

typedef struct {
  const char *family;
  UmArch      arch;
  const char *question;
  guint       n_prompt;
} PromptCase;

static const PromptCase prompt_cases[] = {
  { "dream", UM_ARCH_DREAM, "What is free software?", 49 },
  { "llada-moe", UM_ARCH_LLADA_MOE, "What is free software, in short?", 54 },
  { "llada2", UM_ARCH_LLADA2, "What is free software, in short?", 54 },
  { "rnd1", UM_ARCH_RND1, "What is free software?", 23 },
};

static UmChatTemplate *
case_template (const PromptCase *pc)
{
  g_autofree char *jinja = config_template (pc->family);
  return um_chat_template_for_arch (pc->arch, jinja);
}

/* The generate cases' prompt_ids are each family's chat prompt for one
 * question (decoded from them: the text is not in the fixtures), from the
 * tokenizer.json and from the GGUF vocabulary. */
static void
test_chat_prompt_ids (void)
{
  for (guint i = 0; i < G_N_ELEMENTS (prompt_cases); i++)
    for (guint form = 0; form < 2; form++)
      {
        const PromptCase *pc = &prompt_cases[i];
        g_autoptr(JsonParser) parser = NULL;
        JsonObject *exp = expected (pc->family, &parser);
        JsonArray *gen = json_object_get_array_member (exp, "generate");
        g_autoptr(GError) error = NULL;
        g_autoptr(UmTokenizer) tok = form == 0 ? load_json_tokenizer (pc->family)
                                               : load_gguf_tokenizer (pc->family, &error);
        g_autoptr(UmChatTemplate) t = case_template (pc);
        g_autoptr(GArray) ids = g_array_new (FALSE, FALSE, sizeof (gint32));
        g_autofree char *text = NULL, *what = g_strdup_printf ("%s prompt (%s)", pc->family,
                                                               form ? "GGUF" : "json");
        UmChatMessage msg = { "user", pc->question };

        g_assert_no_error (error);
        g_assert_true (um_chat_template_build_prompt (t, tok, NULL, 0, pc->question, -1, -1, -1, ids,
                                                      &error));
        g_assert_no_error (error);
        g_assert_cmpuint (ids->len, ==, pc->n_prompt);
        for (guint c = 0; c < json_array_get_length (gen); c++)
          {
            JsonObject *gc = json_array_get_object_element (gen, c);
            g_autoptr(GArray) want = um_test_json_ids (json_object_get_array_member (gc, "prompt_ids"));
            assert_ids_equal (ids, want, what);
          }
        /* the rendered text is what the ids decode to */
        text = um_chat_template_render_messages (t, &msg, 1, TRUE, NULL);
        {
          g_autofree char *back = decode (tok, ids, FALSE);
          g_assert_cmpstr (back, ==, text);
        }

        /* through a model: the template the folder's files give */
        {
          g_autofree char *rel = g_strdup_printf ("tiny-%s", pc->family);
          g_autofree char *dir = um_test_data_path (rel);
          UmModel model = { 0 };
          g_autoptr(GArray) got = g_array_new (FALSE, FALSE, sizeof (gint32));

          model.tokenizer = tok;
          model.chat_template = um_chat_template_from_dir (dir, pc->arch, &error);
          model.cfg.arch = pc->arch;
          g_assert_no_error (error);
          model.cfg.bos_id = -1;
          model.cfg.eos_id = (gint32) json_object_get_int_member (exp, "eos_token_id");
          model.cfg.pad_id = (gint32) json_object_get_int_member (exp, "pad_token_id");
          g_assert_true (um_model_build_chat_prompt (&model, NULL, 0, pc->question, got, &error));
          g_assert_no_error (error);
          assert_ids_equal (got, ids, what);
          /* the turn end the answer is cut at, from the vocabulary */
          model.cfg.eot_id = -1;
          um_model_resolve_special_ids (&model);
          g_assert_cmpint (model.cfg.eot_id, ==, json_object_get_int_member (exp, "eot_token_id"));
          um_chat_template_free (model.chat_template);
        }
      }
}

/* Text the Jinja templates give for whole conversations. */
static void
test_chat_render (void)
{
  g_autoptr(UmChatTemplate) chatml = um_chat_template_new (UM_CHAT_FORMAT_CHATML, "Be brief.");
  g_autoptr(UmChatTemplate) ling = um_chat_template_new (UM_CHAT_FORMAT_LING, "detailed thinking off");
  g_autoptr(UmChatTemplate) task = um_chat_template_new (UM_CHAT_FORMAT_TASK, NULL);
  const UmChatMessage conv[] = { { "user", " Hi " }, { "assistant", "Hello." }, { "user", "Bye" } };
  const UmChatMessage sys[] = { { "system", "S" }, { "user", "Q" } };
  const struct {
    const UmChatMessage  *msgs;
    guint                 n;
    gboolean              gen;
    const char           *text;
  } cases[] = {
    { conv, 3, TRUE,
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi <|im_end|>\n<|im_start|>assistant\n"
      "Hello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n" },
    { sys, 2, FALSE, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n" },
    { conv, 3, TRUE,
      "<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role> Hi <|role_end|>"
      "<role>ASSISTANT</role>Hello.<|role_end|><role>HUMAN</role>Bye<|role_end|><role>ASSISTANT</role>" },
    { sys, 2, TRUE, "<role>SYSTEM</role>S<|role_end|><role>HUMAN</role>Q<|role_end|><role>ASSISTANT</role>" },
    { conv, 3, TRUE, "Question: Bye\nAnswer:" },
  };
  UmChatTemplate *tmpls[] = { chatml, chatml, ling, ling, task };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autofree char *text = um_chat_template_render_messages (tmpls[i], cases[i].msgs, cases[i].n,
                                                                cases[i].gen, NULL);
      g_assert_cmpstr (text, ==, cases[i].text);
    }
  /* the task mode keeps a prompt that is already a question */
  {
    const UmChatMessage q = { "user", "  Question: why?\nAnswer:" };
    g_autofree char *text = um_chat_template_render_messages (task, &q, 1, TRUE, NULL);
    g_assert_cmpstr (text, ==, "  Question: why?\nAnswer:");
  }
}

/* A second turn built from ids equals the ids of the whole conversation
 * rendered as text, when the answer ids are the answer's own tokenization:
 * EOS and pad padding dropped, a missing turn end added. */
static void
test_chat_multi_turn (void)
{
  static const char answer[] = " Free software respects freedom";
  static const char q2[] = "And open source?";

  for (guint i = 0; i < G_N_ELEMENTS (prompt_cases); i++)
    for (guint closed = 0; closed < 2; closed++)
      {
        const PromptCase *pc = &prompt_cases[i];
        g_autoptr(JsonParser) parser = NULL;
        JsonObject *exp = expected (pc->family, &parser);
        gint32 eos = (gint32) json_object_get_int_member (exp, "eos_token_id");
        gint32 pad = (gint32) json_object_get_int_member (exp, "pad_token_id");
        g_autoptr(UmTokenizer) tok = load_json_tokenizer (pc->family);
        g_autoptr(UmChatTemplate) t = case_template (pc);
        g_autoptr(GArray) hist = g_array_new (FALSE, FALSE, sizeof (gint32));
        g_autoptr(GArray) got = g_array_new (FALSE, FALSE, sizeof (gint32));
        g_autoptr(GArray) ans = encode (tok, answer, -1);
        g_autoptr(GError) error = NULL;
        g_autofree char *whole = NULL;
        g_autoptr(GArray) want = NULL;
        const char *end = t->format == UM_CHAT_FORMAT_CHATML ? "<|im_end|>"
                          : t->format == UM_CHAT_FORMAT_LING ? "<|role_end|>" : NULL;

        g_assert_true (um_chat_template_build_prompt (t, tok, NULL, 0, pc->question, -1, eos, pad,
                                                      hist, &error));
        g_array_append_vals (hist, ans->data, ans->len);
        if (closed && end != NULL)
          {
            gint32 e = um_tokenizer_token_to_id (tok, end);
            g_array_append_val (hist, e);
          }
        g_array_append_val (hist, eos);
        g_array_append_val (hist, pad);
        g_assert_true (um_chat_template_build_prompt (t, tok, (const gint32 *) hist->data, hist->len,
                                                      q2, -1, eos, pad, got, &error));
        g_assert_no_error (error);

        if (t->format == UM_CHAT_FORMAT_TASK)
          whole = g_strdup_printf ("Question: %s\nAnswer:%s\nQuestion: %s\nAnswer:", pc->question,
                                   answer, q2);
        else
          {
            const UmChatMessage conv[] = { { "user", pc->question }, { "assistant", answer },
                                           { "user", q2 } };
            whole = um_chat_template_render_messages (t, conv, 3, TRUE, NULL);
          }
        want = encode (tok, whole, -1);
        assert_ids_equal (got, want, whole);
      }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/tokenizer-families/json-cases", test_json_cases);
  g_test_add_func ("/tokenizer-families/special-tokens", test_special_tokens);
  g_test_add_func ("/tokenizer-families/nfc-added-tokens", test_nfc_added_tokens);
  g_test_add_func ("/tokenizer-families/normalizers", test_normalizers);
  g_test_add_func ("/tokenizer-families/slow-files", test_slow_files);
  g_test_add_func ("/tokenizer-families/slow-dir", test_slow_dir);
  g_test_add_func ("/tokenizer-families/gguf-cases", test_gguf_cases);
  g_test_add_func ("/tokenizer-families/gguf-unused-rows", test_gguf_unused_rows);
  g_test_add_func ("/tokenizer-families/gguf-pre-names", test_gguf_pre_names);
  g_test_add_func ("/chat-template/detect", test_chat_detect);
  g_test_add_func ("/chat-template/from-dir", test_chat_from_dir);
  g_test_add_func ("/chat-template/prompt-ids", test_chat_prompt_ids);
  g_test_add_func ("/chat-template/render-families", test_chat_render);
  g_test_add_func ("/chat-template/multi-turn-families", test_chat_multi_turn);
  return g_test_run ();
}

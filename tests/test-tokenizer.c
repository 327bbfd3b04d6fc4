/* test-tokenizer.c — byte-level BPE tokenizer and LLaDA chat template.
 *
 * Expected ids come from Hugging Face `tokenizers` (tiny-llada.expected.json)
 * and from transformers.js (tokenizer-extra.json, see its "source" field).
 */
#include <glib.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <string.h>

#include "um-chat-template.h"
#include "um-error.h"
#include "um-test-util.h"
#include "um-tokenizer.h"

static char *
data_path (const char *rel)
{
  const char *dir = g_getenv ("UM_TEST_DATA");
  return g_build_filename (dir ? dir : "tests/data", rel, NULL);
}

static UmTokenizer *
load_fixture (void)
{
  g_autofree char *path = data_path ("tiny-llada/tokenizer.json");
  g_autoptr(GError) error = NULL;
  UmTokenizer *tok = um_tokenizer_new_from_file (path, &error);

  g_assert_no_error (error);
  g_assert_nonnull (tok);
  return tok;
}

static JsonParser *
load_json (const char *rel)
{
  g_autofree char *path = data_path (rel);
  g_autoptr(GError) error = NULL;
  JsonParser *parser = json_parser_new ();

  json_parser_load_from_file (parser, path, &error);
  g_assert_no_error (error);
  return parser;
}

static JsonObject *
root_object (JsonParser *parser)
{
  return json_node_get_object (json_parser_get_root (parser));
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
ids_string (const gint32 *ids, guint n)
{
  GString *s = g_string_new ("[");
  for (guint i = 0; i < n; i++)
    g_string_append_printf (s, "%s%d", i ? ", " : "", ids[i]);
  g_string_append_c (s, ']');
  return g_string_free (s, FALSE);
}

static void
assert_ids_json (GArray *got, JsonArray *expected, const char *text)
{
  gboolean same = got->len == json_array_get_length (expected);

  for (guint i = 0; same && i < got->len; i++)
    same = g_array_index (got, gint32, i) == (gint32) json_array_get_int_element (expected, i);
  if (!same)
    {
      g_autofree char *g = ids_string ((const gint32 *) got->data, got->len);
      g_autoptr(JsonNode) node = json_node_new (JSON_NODE_ARRAY);
      g_autofree char *es = NULL;

      json_node_set_array (node, expected);
      es = json_to_string (node, FALSE);
      g_error ("text %s: got %s, expected %s", text, g, es);
    }
}

static void
assert_ids (GArray *got, const gint32 *expected, guint n, const char *what)
{
  if (got->len != n || memcmp (got->data, expected, n * sizeof (gint32)) != 0)
    {
      g_autofree char *g = ids_string ((const gint32 *) got->data, got->len);
      g_autofree char *e = ids_string (expected, n);
      g_error ("%s: got %s, expected %s", what, g, e);
    }
}

/* Every {text, ids} of a file's "tokenize" list, plus the decode round trip. */
static void
check_cases (UmTokenizer *tok, const char *rel, guint min_cases)
{
  g_autoptr(JsonParser) parser = load_json (rel);
  JsonArray *cases = json_object_get_array_member (root_object (parser), "tokenize");

  g_assert_nonnull (cases);
  g_assert_cmpuint (json_array_get_length (cases), >=, min_cases);
  for (guint i = 0; i < json_array_get_length (cases); i++)
    {
      JsonObject *c = json_array_get_object_element (cases, i);
      const char *text = json_object_get_string_member (c, "text");
      g_autoptr(GArray) ids = encode (tok, text, -1);
      g_autofree char *back = NULL;

      assert_ids_json (ids, json_object_get_array_member (c, "ids"), text);
      back = decode (tok, ids, FALSE);
      g_assert_cmpstr (back, ==, text);
    }
}

static void
test_fixture_cases (void)
{
  g_autoptr(UmTokenizer) tok = load_fixture ();
  check_cases (tok, "tiny-llada.expected.json", 7);
}

static void
test_extra_cases (void)
{
  g_autoptr(UmTokenizer) tok = load_fixture ();
  check_cases (tok, "tokenizer-extra.json", 200);
}

/* ---- round trips ------------------------------------------------------------------ */

static void
append_random_char (GString *s, GRand *rand)
{
  static const gunichar spaces[] = { ' ', ' ', ' ', '\t', '\n', '\r', 0x0B, 0x0C, 0x85, 0xA0,
                                     0x1680, 0x2003, 0x2028, 0x202F, 0x3000, 0xFEFF, 0x200B };
  static const char *specials[] = { "<|startoftext|>", "<|endoftext|>", "<|mdm_mask|>",
                                    "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                                    "<|", "|>", "'s", "'LL", "\r\n" };
  gunichar c;

  switch (g_rand_int_range (rand, 0, 12))
    {
    case 0:
    case 1:
    case 2:
      c = g_rand_int_range (rand, 0x20, 0x7F);
      break;
    case 3:
      c = spaces[g_rand_int_range (rand, 0, G_N_ELEMENTS (spaces))];
      break;
    case 4:
      c = g_rand_int_range (rand, 0x80, 0x250);
      break;
    case 5:
      c = g_rand_int_range (rand, 0x4E00, 0x9FFF);
      break;
    case 6:
      c = g_rand_int_range (rand, 0x1F300, 0x1FAFF);
      break;
    case 7:
      c = g_rand_int_range (rand, 0x300, 0x370);   /* combining marks */
      break;
    case 8:
      g_string_append (s, specials[g_rand_int_range (rand, 0, G_N_ELEMENTS (specials))]);
      return;
    case 9:
      c = g_rand_int_range (rand, '0', '9' + 1);
      break;
    case 10:
      c = g_rand_int_range (rand, 1, 0x20);        /* controls */
      break;
    default:
      do
        c = g_rand_int_range (rand, 0x80, 0x110000);
      while (c >= 0xD800 && c <= 0xDFFF);
      break;
    }
  g_string_append_unichar (s, c);
}

static void
test_round_trip_random (void)
{
  g_autoptr(UmTokenizer) tok = load_fixture ();
  g_autoptr(GRand) rand = g_rand_new_with_seed (20260131);

  for (guint i = 0; i < 400; i++)
    {
      g_autoptr(GString) s = g_string_new (NULL);
      guint n = g_rand_int_range (rand, 0, 60);
      g_autoptr(GArray) ids = NULL;
      g_autofree char *back = NULL;

      for (guint k = 0; k < n; k++)
        append_random_char (s, rand);
      ids = encode (tok, s->str, s->len);
      back = decode (tok, ids, FALSE);
      g_assert_cmpstr (back, ==, s->str);
      for (guint k = 0; k < ids->len; k++)
        g_assert_cmpint (g_array_index (ids, gint32, k), <, 512);
    }
}

/* NUL is a valid character: encoded with an explicit length, like any byte. */
static void
test_nul (void)
{
  g_autoptr(UmTokenizer) tok = load_fixture ();
  static const gint32 expect[] = { 87, 188, 88 };   /* x, byte 0x00, y (transformers.js) */
  g_autoptr(GArray) ids = encode (tok, "x\0y", 3);
  g_autofree char *back = decode (tok, ids, FALSE);

  assert_ids (ids, expect, 3, "x\\0y");
  g_assert_cmpmem (back, 4, "x\0y", 4);
}

/* A loaded tokenizer is shared by threads without locking. */
typedef struct {
  UmTokenizer *tok;
  JsonArray   *cases;
  gboolean     ok;
} ThreadJob;

static gpointer
thread_encode (gpointer data)
{
  ThreadJob *job = data;

  job->ok = TRUE;
  for (guint round = 0; round < 20; round++)
    for (guint i = 0; i < json_array_get_length (job->cases); i++)
      {
        JsonObject *c = json_array_get_object_element (job->cases, i);
        JsonArray *want = json_object_get_array_member (c, "ids");
        g_autoptr(GArray) ids = g_array_new (FALSE, FALSE, sizeof (gint32));

        if (!um_tokenizer_encode (job->tok, json_object_get_string_member (c, "text"), -1, ids, NULL)
            || ids->len != json_array_get_length (want))
          {
            job->ok = FALSE;
            continue;
          }
        for (guint k = 0; k < ids->len; k++)
          if (g_array_index (ids, gint32, k) != (gint32) json_array_get_int_element (want, k))
            job->ok = FALSE;
      }
  return NULL;
}

static void
test_threads (void)
{
  g_autoptr(UmTokenizer) tok = load_fixture ();
  g_autoptr(JsonParser) parser = load_json ("tokenizer-extra.json");
  JsonArray *cases = json_object_get_array_member (root_object (parser), "tokenize");
  ThreadJob jobs[4];
  GThread *threads[4];

  for (guint i = 0; i < G_N_ELEMENTS (jobs); i++)
    {
      jobs[i] = (ThreadJob) { tok, cases, FALSE };
      threads[i] = g_thread_new ("encode", thread_encode, &jobs[i]);
    }
  for (guint i = 0; i < G_N_ELEMENTS (jobs); i++)
    {
      g_thread_join (threads[i]);
      g_assert_true (jobs[i].ok);
    }
}

/* ---- special tokens and lookups ---------------------------------------------------- */

static void
test_special_tokens (void)
{
  g_autoptr(UmTokenizer) tok = load_fixture ();
  g_autoptr(GArray) hello = encode (tok, "hello", -1);
  g_autoptr(GArray) world = encode (tok, " world", -1);
  g_autoptr(GArray) glued = encode (tok, "hello<|eot_id|> world", -1);
  g_autoptr(GArray) partial = encode (tok, "<|eot_id", -1);
  g_autoptr(GArray) expect = g_array_new (FALSE, FALSE, sizeof (gint32));
  gint32 eot = 511;
  g_autofree char *skipped = NULL;
  g_autofree char *kept = NULL;

  g_array_append_vals (expect, hello->data, hello->len);
  g_array_append_val (expect, eot);
  g_array_append_vals (expect, world->data, world->len);
  assert_ids (glued, (const gint32 *) expect->data, expect->len, "hello<|eot_id|> world");
  for (guint i = 0; i < partial->len; i++)
    g_assert_false (um_tokenizer_is_special (tok, g_array_index (partial, gint32, i)));

  g_assert_cmpint (um_tokenizer_token_to_id (tok, "<|startoftext|>"), ==, 506);
  g_assert_cmpint (um_tokenizer_token_to_id (tok, "<|endoftext|>"), ==, 507);
  g_assert_cmpint (um_tokenizer_token_to_id (tok, "<|mdm_mask|>"), ==, 508);
  g_assert_cmpint (um_tokenizer_token_to_id (tok, "<|eot_id|>"), ==, 511);
  g_assert_cmpint (um_tokenizer_token_to_id (tok, "Ġthe"), ==, 266);
  g_assert_cmpint (um_tokenizer_token_to_id (tok, "no such token"), ==, -1);
  g_assert_cmpint (um_tokenizer_token_to_id (tok, NULL), ==, -1);
  g_assert_cmpstr (um_tokenizer_id_to_token (tok, 506), ==, "<|startoftext|>");
  g_assert_cmpstr (um_tokenizer_id_to_token (tok, 0), ==, "!");
  g_assert_null (um_tokenizer_id_to_token (tok, 512));
  g_assert_null (um_tokenizer_id_to_token (tok, -1));
  g_assert_true (um_tokenizer_is_special (tok, 506));
  g_assert_true (um_tokenizer_is_special (tok, 511));
  g_assert_true (um_tokenizer_is_added (tok, 508));
  g_assert_false (um_tokenizer_is_special (tok, 64));
  g_assert_false (um_tokenizer_is_added (tok, 64));
  g_assert_false (um_tokenizer_is_special (tok, 9999));
  g_assert_cmpuint (um_tokenizer_vocab_size (tok), ==, 512);

  skipped = decode (tok, glued, TRUE);
  g_assert_cmpstr (skipped, ==, "hello world");
  kept = decode (tok, glued, FALSE);
  g_assert_cmpstr (kept, ==, "hello<|eot_id|> world");
}

/* ---- decode: invalid byte sequences ------------------------------------------------- */

/* GPT-2 bytes_to_unicode, written again here so the test does not trust the
 * tokenizer's own table. */
static gint32
byte_id (UmTokenizer *tok, guint8 b)
{
  gunichar c = b;
  char buf[8] = { 0 };

  if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE))
    {
      guint n = 0;
      for (guint x = 0; x < b; x++)
        if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE))
          n++;
      c = 256 + n;
    }
  g_unichar_to_utf8 (c, buf);
  return um_tokenizer_token_to_id (tok, buf);
}

static void
check_lossy (UmTokenizer *tok, const guint8 *bytes, guint n, const char *expect)
{
  g_autoptr(GArray) ids = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autofree char *text = NULL;

  for (guint i = 0; i < n; i++)
    {
      gint32 id = byte_id (tok, bytes[i]);
      g_assert_cmpint (id, >=, 0);
      g_array_append_val (ids, id);
    }
  text = decode (tok, ids, FALSE);
  g_assert_cmpstr (text, ==, expect);
  g_assert_true (g_utf8_validate (text, -1, NULL));
}

#define FFFD "\xEF\xBF\xBD"

static void
test_decode_lossy (void)
{
  g_autoptr(UmTokenizer) tok = load_fixture ();

  /* Rust's String::from_utf8_lossy: one U+FFFD per maximal invalid subpart */
  check_lossy (tok, (const guint8 *) "\xE2", 1, FFFD);
  check_lossy (tok, (const guint8 *) "\xE2\x82", 2, FFFD);
  check_lossy (tok, (const guint8 *) "\xE2\x82\xAC", 3, "€");
  check_lossy (tok, (const guint8 *) "\xF0\x9F", 2, FFFD);
  check_lossy (tok, (const guint8 *) "\xF0\x9F\x99\x82", 4, "🙂");
  check_lossy (tok, (const guint8 *) "\xF0(", 2, FFFD "(");
  check_lossy (tok, (const guint8 *) "\xC0\x80", 2, FFFD FFFD);
  check_lossy (tok, (const guint8 *) "\xED\xA0\x80", 3, FFFD FFFD FFFD);
  check_lossy (tok, (const guint8 *) "\xF4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD);
  check_lossy (tok, (const guint8 *) "\xFF", 1, FFFD);
  check_lossy (tok, (const guint8 *) "\x80" "A", 2, FFFD "A");
  check_lossy (tok, (const guint8 *) "a\xE2\x82" "b", 4, "a" FFFD "b");
  check_lossy (tok, (const guint8 *) "\xE2\x82\xE2\x82\xAC", 5, FFFD "€");
}

/* ---- BPE core against a naive reference --------------------------------------------- */

/* Plain-string BPE as in the original paper's reference code: repeatedly merge
 * the adjacent pair of lowest rank, leftmost first. Quadratic, obviously right. */
static GPtrArray *
naive_bpe (const char *word, GHashTable *ranks)
{
  GPtrArray *syms = g_ptr_array_new_with_free_func (g_free);

  for (const char *p = word; *p; p++)
    g_ptr_array_add (syms, g_strndup (p, 1));
  for (;;)
    {
      guint best = 0;
      gint best_rank = G_MAXINT;

      for (guint i = 0; i + 1 < syms->len; i++)
        {
          g_autofree char *key = g_strconcat (g_ptr_array_index (syms, i), " ",
                                              g_ptr_array_index (syms, i + 1), NULL);
          gpointer r = g_hash_table_lookup (ranks, key);
          if (r && GPOINTER_TO_INT (r) - 1 < best_rank)
            {
              best_rank = GPOINTER_TO_INT (r) - 1;
              best = i;
            }
        }
      if (best_rank == G_MAXINT)
        return syms;
      {
        char *merged = g_strconcat (g_ptr_array_index (syms, best),
                                    g_ptr_array_index (syms, best + 1), NULL);
        g_ptr_array_remove_index (syms, best + 1);
        g_free (g_ptr_array_index (syms, best));
        g_ptr_array_index (syms, best) = merged;
      }
    }
}

static void
test_bpe_reference (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (7);
  g_autoptr(GPtrArray) tokens = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GPtrArray) merges = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GHashTable) index = g_hash_table_new (g_str_hash, g_str_equal);
  g_autoptr(GHashTable) ranks = g_hash_table_new (g_str_hash, g_str_equal);
  g_autoptr(UmTokenizer) tok = NULL;
  g_autoptr(GError) error = NULL;

  for (char c = 'a'; c <= 'h'; c++)
    {
      char *t = g_strndup (&c, 1);
      g_ptr_array_add (tokens, t);
      g_hash_table_insert (index, t, GUINT_TO_POINTER (tokens->len));
    }
  /* random merges of existing tokens; some pairs spell a token that already
   * exists (as in merges converted from tiktoken ranks) */
  while (merges->len < 600)
    {
      const char *a = g_ptr_array_index (tokens, g_rand_int_range (rand, 0, MIN (tokens->len, 60 + merges->len / 2)));
      const char *b = g_ptr_array_index (tokens, g_rand_int_range (rand, 0, MIN (tokens->len, 60 + merges->len / 2)));
      g_autofree char *ab = g_strconcat (a, b, NULL);
      char *key = g_strconcat (a, " ", b, NULL);

      if (strlen (ab) > 12 || g_hash_table_contains (ranks, key))
        {
          g_free (key);
          continue;
        }
      if (!g_hash_table_contains (index, ab))
        {
          char *t = g_steal_pointer (&ab);
          g_ptr_array_add (tokens, t);
          g_hash_table_insert (index, t, GUINT_TO_POINTER (tokens->len));
        }
      g_ptr_array_add (merges, key);
      g_hash_table_insert (ranks, key, GINT_TO_POINTER (merges->len));
    }

  tok = um_tokenizer_new_from_vocab ((const char * const *) tokens->pdata, tokens->len,
                                     (const char * const *) merges->pdata, merges->len, NULL,
                                     "[a-h]+", &error);
  g_assert_no_error (error);

  for (guint round = 0; round < 2; round++)
    {
      um_tokenizer_set_force_heap (tok, round == 1);
      for (guint i = 0; i < 1500; i++)
        {
          char word[80];
          guint n = 1 + g_rand_int_range (rand, 0, i < 1200 ? 30 : 78);
          g_autoptr(GArray) ids = NULL;
          g_autoptr(GPtrArray) ref = NULL;
          g_autoptr(GArray) expect = g_array_new (FALSE, FALSE, sizeof (gint32));

          for (guint k = 0; k < n; k++)
            word[k] = 'a' + g_rand_int_range (rand, 0, 8);
          word[n] = '\0';
          ids = encode (tok, word, -1);
          ref = naive_bpe (word, ranks);
          for (guint k = 0; k < ref->len; k++)
            {
              gint32 id = GPOINTER_TO_INT (g_hash_table_lookup (index, g_ptr_array_index (ref, k))) - 1;
              g_array_append_val (expect, id);
            }
          assert_ids (ids, (const gint32 *) expect->data, expect->len, word);
        }
    }
}

/* ---- chat template --------------------------------------------------------------- */

static JsonArray *
generate_prompt_ids (JsonParser *parser)
{
  JsonArray *gen = json_object_get_array_member (root_object (parser), "generate");
  return json_object_get_array_member (json_array_get_object_element (gen, 0), "prompt_ids");
}

static void
test_chat_template (void)
{
  g_autoptr(UmTokenizer) tok = load_fixture ();
  g_autoptr(JsonParser) parser = load_json ("tiny-llada.expected.json");
  JsonArray *prompt_ids = generate_prompt_ids (parser);
  UmChatMessage msg = { "user", "What is free software?" };
  UmChatMessage padded = { "user", " \n\tWhat is free software?\u3000 \n" };
  g_autofree char *text = um_chat_template_render (&msg, 1, TRUE, "<|startoftext|>");
  g_autofree char *text2 = um_chat_template_render (&padded, 1, TRUE, "<|startoftext|>");
  g_autoptr(GArray) ids = encode (tok, text, -1);
  g_autoptr(GArray) built = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autoptr(GError) error = NULL;

  g_assert_cmpstr (text, ==,
                   "<|startoftext|><|start_header_id|>user<|end_header_id|>\n\nWhat is free software?"
                   "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  g_assert_cmpstr (text2, ==, text);
  assert_ids_json (ids, prompt_ids, text);

  g_assert_true (um_chat_build_prompt (tok, NULL, 0, "What is free software?", 506, 507, built,
                                       &error));
  g_assert_no_error (error);
  assert_ids_json (built, prompt_ids, "first turn");
}

static void
test_chat_render_messages (void)
{
  UmChatMessage msgs[] = {
    { "system", "  Be brief. " },
    { "user", "Hi" },
    { "assistant", "Hello!\n" },
    { "user", "\x1c" "Bye" },
  };
  g_autofree char *all = um_chat_template_render (msgs, 4, FALSE, "<|startoftext|>");
  g_autofree char *none = um_chat_template_render (msgs, 0, TRUE, "<|startoftext|>");
  g_autofree char *nobos = um_chat_template_render (msgs + 1, 1, FALSE, NULL);
  g_autofree char *s1 = um_chat_strip ("\u3000\u00a0 x y \x1f\u2029");
  g_autofree char *s2 = um_chat_strip (" \u200b ");

  /* the Jinja template renders every message, system included */
  g_assert_cmpstr (all, ==,
                   "<|startoftext|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                   "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                   "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
                   "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>");
  /* bos_token is only emitted with the first message */
  g_assert_cmpstr (none, ==, "<|start_header_id|>assistant<|end_header_id|>\n\n");
  g_assert_cmpstr (nobos, ==, "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
  g_assert_cmpstr (s1, ==, "x y");
  g_assert_cmpstr (s2, ==, "\u200b");   /* ZWSP is not whitespace for Python */
}

static void
test_chat_multi_turn (void)
{
  g_autoptr(UmTokenizer) tok = load_fixture ();
  g_autoptr(JsonParser) parser = load_json ("tiny-llada.expected.json");
  JsonArray *gen = json_object_get_array_member (root_object (parser), "generate");
  JsonObject *g0 = json_array_get_object_element (gen, 0);
  JsonArray *prompt = json_object_get_array_member (g0, "prompt_ids");
  JsonArray *answer = json_object_get_array_member (g0, "ids");
  g_autoptr(GArray) prev = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autoptr(GArray) expect = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autoptr(GArray) built = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autoptr(GArray) turn = NULL;
  g_autoptr(GError) error = NULL;
  guint n_eos = 0, n_bos = 0;

  for (guint i = 0; i < json_array_get_length (prompt); i++)
    {
      gint32 id = (gint32) json_array_get_int_element (prompt, i);
      g_array_append_val (prev, id);
      g_array_append_val (expect, id);
    }
  for (guint i = 0; i < json_array_get_length (answer); i++)
    {
      gint32 id = (gint32) json_array_get_int_element (answer, i);
      g_array_append_val (prev, id);
      if (id != 507)
        g_array_append_val (expect, id);
      else
        n_eos++;
    }
  g_assert_cmpuint (n_eos, >, 0);   /* the fixture answer has EOS padding to strip */
  turn = encode (tok, "<|start_header_id|>user<|end_header_id|>\n\nAnd GNU?<|eot_id|>"
                      "<|start_header_id|>assistant<|end_header_id|>\n\n", -1);
  g_array_append_vals (expect, turn->data, turn->len);

  g_assert_true (um_chat_build_prompt (tok, (const gint32 *) prev->data, prev->len, "  And GNU?\n",
                                       506, 507, built, &error));
  g_assert_no_error (error);
  assert_ids (built, (const gint32 *) expect->data, expect->len, "second turn");
  for (guint i = 0; i < built->len; i++)
    {
      g_assert_cmpint (g_array_index (built, gint32, i), !=, 507);
      n_bos += g_array_index (built, gint32, i) == 506;
    }
  g_assert_cmpuint (n_bos, ==, 1);

  /* a BOS id the tokenizer does not know is a parameter error */
  g_array_set_size (built, 0);
  g_assert_false (um_chat_build_prompt (tok, NULL, 0, "x", 100000, 507, built, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  g_assert_cmpuint (built->len, ==, 0);
}

/* ---- other construction paths ------------------------------------------------------- */

/* The GGUF path: tokens by id, "a b" merges, token types. */
static void
test_from_vocab (void)
{
  g_autoptr(UmTokenizer) ref = load_fixture ();
  g_autoptr(JsonParser) parser = load_json ("tiny-llada/tokenizer.json");
  JsonArray *merges = json_object_get_array_member (
    json_object_get_object_member (root_object (parser), "model"), "merges");
  guint n_tokens = um_tokenizer_vocab_size (ref), n_merges = json_array_get_length (merges);
  g_autofree const char **tokens = g_new0 (const char *, n_tokens);
  g_autofree const char **merge_strs = g_new0 (const char *, n_merges);
  g_autofree gint32 *types = g_new0 (gint32, n_tokens);
  g_autoptr(UmTokenizer) tok = NULL;
  g_autoptr(GError) error = NULL;

  for (guint i = 0; i < n_tokens; i++)
    {
      tokens[i] = um_tokenizer_id_to_token (ref, (gint32) i);
      types[i] = um_tokenizer_is_special (ref, (gint32) i) ? UM_TOKEN_TYPE_CONTROL
                                                           : UM_TOKEN_TYPE_NORMAL;
    }
  /* the merges as the tokenizer hands them out for GGUF writing */
  g_assert_cmpuint (um_tokenizer_n_merges (ref), ==, n_merges);
  for (guint i = 0; i < n_merges; i++)
    {
      merge_strs[i] = um_tokenizer_get_merge (ref, i);
      g_assert_cmpstr (merge_strs[i], ==, json_array_get_string_element (merges, i));
    }
  g_assert_null (um_tokenizer_get_merge (ref, n_merges));

  tok = um_tokenizer_new_from_vocab (tokens, n_tokens, merge_strs, n_merges, types, NULL, &error);
  g_assert_no_error (error);
  g_assert_nonnull (tok);
  g_assert_cmpuint (um_tokenizer_vocab_size (tok), ==, 512);
  g_assert_true (um_tokenizer_is_special (tok, 511));
  check_cases (tok, "tiny-llada.expected.json", 7);
  check_cases (tok, "tokenizer-extra.json", 200);

  /* a merge naming a token that is not in the vocabulary */
  {
    const char *bad[] = { "Ġ t", "Ġ zzz" };
    g_autoptr(UmTokenizer) t2 = um_tokenizer_new_from_vocab (tokens, n_tokens, bad, 2, types,
                                                              NULL, &error);
    g_assert_null (t2);
    g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
    g_assert_nonnull (strstr (error->message, "tokenizer.ggml.merges[1]"));
    g_clear_error (&error);
  }
  /* a regex PCRE2 cannot compile */
  {
    g_autoptr(UmTokenizer) t3 = um_tokenizer_new_from_vocab (tokens, n_tokens, merge_strs, n_merges,
                                                              types, "(unclosed", &error);
    g_assert_null (t3);
    g_assert_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED);
    g_clear_error (&error);
  }
}

static char *
write_temp (const char *dir, const char *name, const char *contents)
{
  char *path = g_build_filename (dir, name, NULL);
  g_autoptr(GError) error = NULL;

  g_file_set_contents (path, contents, -1, &error);
  g_assert_no_error (error);
  return path;
}

/* Newer `tokenizers` write merges as ["a", "b"] pairs. */
static void
test_merges_as_pairs (void)
{
  g_autoptr(JsonParser) parser = load_json ("tiny-llada/tokenizer.json");
  JsonObject *model = json_object_get_object_member (root_object (parser), "model");
  JsonArray *merges = json_object_get_array_member (model, "merges");
  g_autoptr(JsonArray) pairs = json_array_new ();
  g_autofree char *dir = g_dir_make_tmp ("um-tok-XXXXXX", NULL);
  g_autofree char *json = NULL;
  g_autofree char *path = NULL;
  g_autoptr(UmTokenizer) tok = NULL;
  g_autoptr(GError) error = NULL;

  for (guint i = 0; i < json_array_get_length (merges); i++)
    {
      g_auto(GStrv) parts = g_strsplit (json_array_get_string_element (merges, i), " ", 2);
      JsonArray *pair = json_array_new ();
      json_array_add_string_element (pair, parts[0]);
      json_array_add_string_element (pair, parts[1]);
      json_array_add_array_element (pairs, pair);
    }
  json_object_set_array_member (model, "merges", json_array_ref (pairs));
  json = json_to_string (json_parser_get_root (parser), FALSE);
  path = write_temp (dir, "tokenizer.json", json);
  tok = um_tokenizer_new_from_file (path, &error);
  g_assert_no_error (error);
  check_cases (tok, "tiny-llada.expected.json", 7);
  g_unlink (path);
  g_rmdir (dir);
}

static UmTokenizer *
tokenizer_from_string (const char *json, GError **error)
{
  return um_tokenizer_new_from_data (json, -1, "tokenizer.json", error);
}

/* ignore_merges (Llama-3 style) and a tokenizer without ByteLevel: BPE over
 * plain characters, tokens joined by spaces on decode (no decoder). */
static void
test_ignore_merges (void)
{
  static const char fmt[] =
    "{\"model\": {\"type\": \"BPE\", \"ignore_merges\": %s,"
    " \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"bc\": 3, \"abc\": 4},"
    " \"merges\": [\"b c\"]}}";
  g_autofree char *on = g_strdup_printf (fmt, "true");
  g_autofree char *off = g_strdup_printf (fmt, "false");
  g_autoptr(GError) error = NULL;
  g_autoptr(UmTokenizer) t_on = tokenizer_from_string (on, &error);
  g_autoptr(UmTokenizer) t_off = NULL;
  static const gint32 whole[] = { 4 }, parts[] = { 0, 3 }, dropped[] = { 0, 3 };
  g_autoptr(GArray) a = NULL, b = NULL, c = NULL;
  g_autofree char *text = NULL;

  g_assert_no_error (error);
  t_off = tokenizer_from_string (off, &error);
  g_assert_no_error (error);
  a = encode (t_on, "abc", -1);
  b = encode (t_off, "abc", -1);
  assert_ids (a, whole, 1, "ignore_merges");
  assert_ids (b, parts, 2, "merges");
  /* no unk_token: characters outside the vocabulary are dropped, as in tokenizers */
  c = encode (t_off, "axbc", -1);
  assert_ids (c, dropped, 2, "unknown character");
  text = decode (t_off, b, FALSE);
  g_assert_cmpstr (text, ==, "a bc");
}

/* Split behaviours, observed through whole-piece tokens (ignore_merges). */
static void
test_split_behaviors (void)
{
  static const char fmt[] =
    "{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"String\": \"-\"},"
    "   \"behavior\": \"%s\", \"invert\": false},"
    " \"model\": {\"type\": \"BPE\", \"ignore_merges\": true, \"merges\": [],"
    "   \"vocab\": {\"T\": 0, \"h\": 1, \"e\": 2, \"-\": 3, \"f\": 4, \"i\": 5, \"n\": 6, \"a\": 7,"
    "     \"l\": 8, \"c\": 9, \"o\": 10, \"u\": 11, \"t\": 12, \"d\": 13, \"w\": 14,"
    "     \"The\": 20, \"final\": 21, \"countdown\": 22, \"The-\": 23, \"final-\": 24,"
    "     \"-final\": 25, \"-countdown\": 26, \"--\": 27}}}";
  static const struct {
    const char *behavior;
    gint32      ids[8];
    guint       n;
  } cases[] = {
    { "Removed", { 20, 21, 22 }, 3 },
    { "Isolated", { 20, 3, 21, 3, 3, 22 }, 6 },
    { "MergedWithPrevious", { 23, 24, 3, 22 }, 4 },
    { "MergedWithNext", { 20, 25, 3, 26 }, 4 },
    { "Contiguous", { 20, 3, 21, 27, 22 }, 5 },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autofree char *json = g_strdup_printf (fmt, cases[i].behavior);
      g_autoptr(GError) error = NULL;
      g_autoptr(UmTokenizer) tok = tokenizer_from_string (json, &error);
      g_autoptr(GArray) ids = NULL;

      g_assert_no_error (error);
      ids = encode (tok, "The-final--countdown", -1);
      assert_ids (ids, cases[i].ids, cases[i].n, cases[i].behavior);
    }
}

/* Long words and long runs must not be quadratic (BPE uses a heap). */
static void
test_long_inputs (void)
{
  g_autoptr(UmTokenizer) tok = load_fixture ();
  static const char *units[] = { "a", " ", "1", "!", "\n", "é", "ab ", " \t", "東" };
  guint reps = g_test_slow () ? 400000 : 60000;

  for (guint u = 0; u < G_N_ELEMENTS (units); u++)
    {
      g_autoptr(GString) s = g_string_new (NULL);
      gint64 t0;
      g_autoptr(GArray) ids = NULL;
      g_autofree char *back = NULL;
      g_autofree char *esc = g_strescape (units[u], NULL);

      for (guint i = 0; i < reps; i++)
        g_string_append (s, units[u]);
      t0 = g_get_monotonic_time ();
      ids = encode (tok, s->str, s->len);
      g_test_message ("%u x \"%s\": %u bytes -> %u ids in %.1f ms", reps, esc, (guint) s->len,
                      ids->len, (g_get_monotonic_time () - t0) / 1000.0);
      back = decode (tok, ids, FALSE);
      g_assert_true (strcmp (back, s->str) == 0);
    }
}

/* ---- errors ------------------------------------------------------------------------ */

static void
expect_load_error (const char *json, gint code, const char *needle)
{
  g_autofree char *dir = g_dir_make_tmp ("um-tok-XXXXXX", NULL);
  g_autofree char *path = write_temp (dir, "tokenizer.json", json);
  g_autoptr(GError) error = NULL;
  g_autoptr(UmTokenizer) tok = um_tokenizer_new_from_file (path, &error);

  g_assert_null (tok);
  g_assert_error (error, UM_ERROR, code);
  if (strstr (error->message, "tokenizer.json") == NULL || strstr (error->message, needle) == NULL)
    g_error ("message “%s” should name the file and “%s”", error->message, needle);
  g_unlink (path);
  g_rmdir (dir);
}


/* The fixture's tokenizer.json with every non-ASCII character written as a
 * \u escape (surrogate pairs past U+FFFF), as Python's json.dumps writes
 * it by default: outside strings JSON has no such characters, so the
 * whole text can be rewritten. */
static char *
escape_non_ascii (const char *text)
{
  GString *out = g_string_new (NULL);

  for (const char *p = text; *p; p = g_utf8_next_char (p))
    {
      gunichar c = g_utf8_get_char (p);
      if (c < 0x80)
        g_string_append_c (out, (char) c);
      else if (c < 0x10000)
        g_string_append_printf (out, "\\u%04x", c);
      else
        g_string_append_printf (out, "\\u%04x\\u%04x", 0xD800 + ((c - 0x10000) >> 10), 0xDC00 + ((c - 0x10000) & 0x3FF));
    }
  return g_string_free (out, FALSE);
}

/* model.vocab and model.merges are read without json-glib (um-json.h's
 * lifted values): escaped keys and merges must read as json-glib reads
 * them, and the reader's own checks must hold. */
static void
test_lifted_vocab (void)
{
  g_autofree char *path = data_path ("tiny-llada/tokenizer.json");
  g_autofree char *text = NULL;
  g_autofree char *escaped = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(UmTokenizer) tok = NULL;

  g_assert_true (g_file_get_contents (path, &text, NULL, NULL));
  escaped = escape_non_ascii (text);
  g_assert_cmpstr (escaped, !=, text);   /* the fixture has non-ASCII tokens */
  tok = um_tokenizer_new_from_data (escaped, -1, "tokenizer.json", &error);
  g_assert_no_error (error);
  check_cases (tok, "tiny-llada.expected.json", 7);
  check_cases (tok, "tokenizer-extra.json", 100);

  /* A token twice, once escaped; merges null, malformed, or with an
   * escape; ids that are not integers. */
  expect_load_error ("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"\\u0061\": 1}, \"merges\": []}}",
                     UM_ERROR_FORMAT, "“a” appears twice");
  expect_load_error ("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": null}}",
                     UM_ERROR_FORMAT, "model.merges is missing");
  expect_load_error ("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": {}}}",
                     UM_ERROR_FORMAT, "model.merges is not an array");
  expect_load_error ("{\"model\": {\"type\": \"BPE\", \"vocab\": null, \"merges\": []}}",
                     UM_ERROR_FORMAT, "model.vocab is not an object");
  expect_load_error ("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 1.0}, \"merges\": []}}",
                     UM_ERROR_FORMAT, "model.vocab[“a”] is not an integer id");
  expect_load_error ("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 1e2}, \"merges\": []}}",
                     UM_ERROR_FORMAT, "model.vocab[“a”] is not an integer id");
  expect_load_error ("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2},"
                     " \"merges\": [\"a b c\"]}}", UM_ERROR_FORMAT, "model.merges[0] (“a b c”) is not two tokens");
  expect_load_error ("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2},"
                     " \"merges\": [\"a b\", [\"a\", \"b\", \"c\"]]}}", UM_ERROR_FORMAT,
                     "model.merges[1] is not a pair of strings");
  expect_load_error ("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2},"
                     " \"merges\": [[\"a\", 2]]}}", UM_ERROR_FORMAT, "model.merges[0] is not a pair of strings");
  {
    g_autoptr(UmTokenizer) t2 = NULL;
    g_autoptr(GArray) ids = g_array_new (FALSE, FALSE, sizeof (gint32));
    /* "\u0061" is "a", "\"" a quote, and merges name tokens as decoded. */
    static const char json[] =
      "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"\\u0061\": 0, \"\\\"\": 1, \"a\\\"\": 2},"
      " \"merges\": [\"a \\\"\"]}}";
    t2 = um_tokenizer_new_from_data (json, -1, "tokenizer.json", &error);
    g_assert_no_error (error);
    g_assert_cmpuint (um_tokenizer_vocab_size (t2), ==, 3);
    g_assert_true (um_tokenizer_encode (t2, "a\"", -1, ids, &error));
    g_assert_no_error (error);
    g_assert_cmpuint (ids->len, ==, 1);
    g_assert_cmpint (g_array_index (ids, gint32, 0), ==, 2);
  }
}

static void
test_load_errors (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(UmTokenizer) tok = um_tokenizer_new_from_file ("/nonexistent/dir/tokenizer.json", &error);

  g_assert_null (tok);
  g_assert_error (error, UM_ERROR, UM_ERROR_IO);
  g_assert_nonnull (strstr (error->message, "/nonexistent/dir/tokenizer.json"));

  expect_load_error ("{\"model\": {\"vocab\": {", UM_ERROR_FORMAT, "JSON");
  expect_load_error ("", UM_ERROR_FORMAT, "tokenizer.json");
  expect_load_error ("[1, 2]", UM_ERROR_FORMAT, "top level");
  expect_load_error ("{\"added_tokens\": []}", UM_ERROR_FORMAT, "model");
  expect_load_error ("{\"model\": {\"type\": \"BPE\", \"vocab\": [\"a\"], \"merges\": []}}",
                     UM_ERROR_FORMAT, "model.vocab");
  expect_load_error ("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"x\"}, \"merges\": []}}",
                     UM_ERROR_FORMAT, "model.vocab[“a”]");
  expect_load_error ("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -3}, \"merges\": []}}",
                     UM_ERROR_FORMAT, "model.vocab[“a”]");
  expect_load_error ("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2},"
                     " \"merges\": [\"a b\", \"a q\"]}}",
                     UM_ERROR_FORMAT, "model.merges[1]");
  expect_load_error ("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1},"
                     " \"merges\": [\"a b\"]}}",
                     UM_ERROR_FORMAT, "model.merges[0]");   /* "ab" missing */
  expect_load_error ("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [12]}}",
                     UM_ERROR_FORMAT, "model.merges[0] is not a string");
  expect_load_error ("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a\"]}}",
                     UM_ERROR_FORMAT, "model.merges[0]");
  expect_load_error ("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [[\"a\"]]}}",
                     UM_ERROR_FORMAT, "model.merges[0]");
  expect_load_error ("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}}",
                     UM_ERROR_FORMAT, "model.merges");
  expect_load_error ("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}",
                     UM_ERROR_UNSUPPORTED, "model.type");
  expect_load_error ("{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": [],"
                     " \"dropout\": 0.1}}", UM_ERROR_UNSUPPORTED, "model.dropout");
  expect_load_error ("{\"normalizer\": {\"type\": \"Lowercase\"}, \"model\": {\"type\": \"BPE\","
                     " \"vocab\": {}, \"merges\": []}}", UM_ERROR_UNSUPPORTED, "normalizer");
  expect_load_error ("{\"pre_tokenizer\": {\"type\": \"Whitespace\"}, \"model\": {\"type\": \"BPE\","
                     " \"vocab\": {}, \"merges\": []}}", UM_ERROR_UNSUPPORTED, "pre_tokenizer.type");
  expect_load_error ("{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
                     "{\"type\": \"ByteLevel\"}, {\"type\": \"Split\", \"pattern\": {\"String\": \"x\"}}]},"
                     " \"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}",
                     UM_ERROR_UNSUPPORTED, "pre_tokenizer.pretokenizers[1]");
  expect_load_error ("{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"},"
                     " \"behavior\": \"Isolated\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {},"
                     " \"merges\": []}}", UM_ERROR_UNSUPPORTED, "pre_tokenizer.pattern.Regex");
  expect_load_error ("{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": 5}},"
                     " \"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}",
                     UM_ERROR_FORMAT, "pre_tokenizer.pattern.Regex is not a string");
  expect_load_error ("{\"added_tokens\": [{\"id\": 0, \"special\": true}], \"model\": {\"type\": \"BPE\","
                     " \"vocab\": {}, \"merges\": []}}", UM_ERROR_FORMAT, "added_tokens[0].content");
  expect_load_error ("{\"added_tokens\": [{\"id\": 0, \"content\": \"x\", \"special\": 1}],"
                     " \"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}",
                     UM_ERROR_FORMAT, "added_tokens[0].special");
  expect_load_error ("{\"decoder\": {\"type\": \"WordPiece\"}, \"model\": {\"type\": \"BPE\","
                     " \"vocab\": {}, \"merges\": []}}", UM_ERROR_UNSUPPORTED, "decoder.type");
}

static void
test_encode_decode_errors (void)
{
  g_autoptr(UmTokenizer) tok = load_fixture ();
  g_autoptr(GArray) ids = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autoptr(GError) error = NULL;
  static const char *bad_utf8[] = { "abc\xff", "\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80",
                                    "x\xE2\x82", "\x80" };
  gint32 seven = 7;
  char *text;

  g_array_append_val (ids, seven);
  for (guint i = 0; i < G_N_ELEMENTS (bad_utf8); i++)
    {
      g_assert_false (um_tokenizer_encode (tok, bad_utf8[i], -1, ids, &error));
      g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
      g_assert_nonnull (strstr (error->message, "UTF-8"));
      g_assert_cmpuint (ids->len, ==, 1);   /* nothing appended */
      g_clear_error (&error);
    }

  {
    gint32 out_of_range[] = { 64, 512 };
    text = um_tokenizer_decode (tok, out_of_range, 2, FALSE, &error);
    g_assert_null (text);
    g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
    g_assert_nonnull (strstr (error->message, "512"));
    g_clear_error (&error);
  }
  {
    gint32 negative[] = { -1 };
    text = um_tokenizer_decode (tok, negative, 1, TRUE, &error);
    g_assert_null (text);
    g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
    g_clear_error (&error);
  }
  text = um_tokenizer_decode (tok, NULL, 0, FALSE, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (text, ==, "");
  g_free (text);
}

/* tokenizer.json comes from strangers on the Hub: every hostile text is a
 * format error naming it, from memory and from a file. */
static void
test_hostile_json (void)
{
  g_autoptr(GPtrArray) cases = um_test_hostile_json ();

  for (guint i = 0; i < cases->len; i++)
    {
      const UmTestHostileJson *h = g_ptr_array_index (cases, i);
      g_autofree char *dir = g_dir_make_tmp ("um-tok-XXXXXX", NULL);
      g_autofree char *path = g_build_filename (dir, "tokenizer.json", NULL);
      g_autoptr(GError) error = NULL;
      UmTokenizer *tok;

      g_test_message ("%s", h->name);
      tok = um_tokenizer_new_from_data (h->text, (gssize) h->len, "tokenizer.json", &error);
      g_assert_null (tok);
      g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
      if (!g_str_has_prefix (error->message, "tokenizer.json: ") || strstr (error->message, h->needle) == NULL)
        g_error ("message “%s” should name the file and “%s”", error->message, h->needle);
      g_clear_error (&error);

      um_test_write_file (path, h->text, (gssize) h->len);
      tok = um_tokenizer_new_from_file (path, &error);
      g_assert_null (tok);
      g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
      if (!g_str_has_prefix (error->message, path) || strstr (error->message, h->needle) == NULL)
        g_error ("message “%s” should name the file and “%s”", error->message, h->needle);
      g_unlink (path);
      g_rmdir (dir);
    }
  /* A token twice in the vocabulary: json-glib would keep the last id. */
  expect_load_error ("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"a\": 1}, \"merges\": []}}",
                     UM_ERROR_FORMAT, "“a” appears twice");
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/tokenizer/fixture-cases", test_fixture_cases);
  g_test_add_func ("/tokenizer/extra-cases", test_extra_cases);
  g_test_add_func ("/tokenizer/round-trip-random", test_round_trip_random);
  g_test_add_func ("/tokenizer/nul", test_nul);
  g_test_add_func ("/tokenizer/threads", test_threads);
  g_test_add_func ("/tokenizer/special-tokens", test_special_tokens);
  g_test_add_func ("/tokenizer/decode-lossy", test_decode_lossy);
  g_test_add_func ("/tokenizer/bpe-reference", test_bpe_reference);
  g_test_add_func ("/tokenizer/from-vocab", test_from_vocab);
  g_test_add_func ("/tokenizer/merges-as-pairs", test_merges_as_pairs);
  g_test_add_func ("/tokenizer/ignore-merges", test_ignore_merges);
  g_test_add_func ("/tokenizer/split-behaviors", test_split_behaviors);
  g_test_add_func ("/tokenizer/long-inputs", test_long_inputs);
  g_test_add_func ("/tokenizer/load-errors", test_load_errors);
  g_test_add_func ("/tokenizer/lifted-vocab", test_lifted_vocab);
  g_test_add_func ("/tokenizer/hostile-json", test_hostile_json);
  g_test_add_func ("/tokenizer/encode-decode-errors", test_encode_decode_errors);
  g_test_add_func ("/chat-template/render", test_chat_template);
  g_test_add_func ("/chat-template/messages", test_chat_render_messages);
  g_test_add_func ("/chat-template/multi-turn", test_chat_multi_turn);

  return g_test_run ();
}

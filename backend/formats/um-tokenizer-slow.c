/* um-tokenizer-slow.c — the "slow" GPT-2-style tokenizer files: vocab.json +
 * merges.txt (+ tokenizer_config.json), read into the same UmTokenizer.
 *
 * Dream ships only these (its DreamTokenizer is a copy of transformers'
 * Qwen2Tokenizer). What that class does, and what is done here:
 *   - vocab.json maps byte-level token strings to ids;
 *   - merges.txt holds one "a b" merge per line, ranked in file order, after
 *     an optional "#version" first line; blank lines are skipped;
 *   - added tokens (tokenizer_config.json's added_tokens_decoder) are split
 *     out of the text before BPE, with their own ids;
 *   - the text is split with the Qwen2 regex and mapped to byte-level
 *     characters; prepare_for_tokenization composes it to NFC first.
 * transformers composes the whole text before it looks for added tokens,
 * here each piece between them is composed: the same text unless a piece
 * starts with a combining mark that would compose with the end of an added
 * token (their last characters, ASCII '>' and '|', compose with nothing).
 */
#include "um-tokenizer.h"
#include "um-tokenizer-private.h"

#include <errno.h>
#include <json-glib/json-glib.h>
#include <stdlib.h>
#include <string.h>

#include "um-error.h"
#include "um-json.h"

/* PRETOKENIZE_REGEX of transformers' Qwen2Tokenizer and of DreamTokenizer. */
static const char slow_qwen2_regex[] =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
  " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* Far above a real merges.txt (Qwen2's is about 1.7 MB). */
#define MAX_MERGES_BYTES ((gsize) 256 << 20)

static gboolean
read_vocab (UmTokenizer *tok, const char *path, gint32 *max_id, GError **error)
{
  g_autoptr(JsonNode) root = um_json_parse_file (path, path, &um_json_limits_model_file, error);
  JsonObject *vocab;
  JsonObjectIter it;
  const char *name;
  JsonNode *value;

  if (root == NULL)
    return FALSE;
  if ((vocab = um_json_root_object (root, path, error)) == NULL)
    return FALSE;
  g_free (tok->vocab.e);
  um_tok_vocab_table_init (&tok->vocab, json_object_get_size (vocab));
  json_object_iter_init (&it, vocab);
  while (json_object_iter_next (&it, &name, &value))
    {
      gint64 id = -1;

      if (JSON_NODE_HOLDS_VALUE (value) && json_node_get_value_type (value) == G_TYPE_INT64)
        id = json_node_get_int (value);
      if (id < 0 || id >= MAX_TOKEN_ID)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                       "%s: “%s” does not map to an integer id in [0, %d)", path, name, MAX_TOKEN_ID);
          return FALSE;
        }
      um_tok_vocab_insert (tok, name, strlen (name), (gint32) id);
      *max_id = MAX (*max_id, (gint32) id);
    }
  return TRUE;
}

static gboolean
is_ascii_space (char c)
{
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* merges.txt as the slow tokenizers read it: Python's universal newlines
 * (\n, \r\n and \r end a line), line.strip(), the first line skipped when it
 * starts with "#version:", blank lines skipped, line.split() into a pair. */
static gboolean
read_merges (UmTokenizer *tok, const char *path, GError **error)
{
  g_autoptr(GMappedFile) file = NULL;
  g_autoptr(GError) local = NULL;
  const char *p, *end;
  guint line_no = 0, rank = 0, expected = 0;

  file = g_mapped_file_new (path, FALSE, &local);
  if (file == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_IO, "%s: cannot read: %s", path, local->message);
      return FALSE;
    }
  if (g_mapped_file_get_length (file) == 0)
    {
      um_tok_merge_table_init (&tok->merges, 0);
      return TRUE;
    }
  p = g_mapped_file_get_contents (file);
  end = p + g_mapped_file_get_length (file);
  if ((gsize) (end - p) > MAX_MERGES_BYTES)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: the file is larger than %" G_GSIZE_FORMAT
                   " bytes", path, MAX_MERGES_BYTES);
      return FALSE;
    }
  if (!g_utf8_validate_len (p, end - p, NULL))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: not valid UTF-8", path);
      return FALSE;
    }
  for (const char *q = p; q < end; q++)
    expected += *q == '\n';
  um_tok_merge_table_init (&tok->merges, expected + 1);

  while (p < end)
    {
      const char *eol = p, *s, *e, *a_end, *b, *b_end;

      while (eol < end && *eol != '\n' && *eol != '\r')
        eol++;
      line_no++;
      s = p;
      e = eol;
      p = eol < end && *eol == '\r' && eol + 1 < end && eol[1] == '\n' ? eol + 2 : eol + 1;
      while (s < e && is_ascii_space (*s))
        s++;
      while (e > s && is_ascii_space (e[-1]))
        e--;
      if (s == e || (line_no == 1 && e - s >= 9 && memcmp (s, "#version:", 9) == 0))
        continue;
      a_end = s;
      while (a_end < e && !is_ascii_space (*a_end))
        a_end++;
      b = a_end;
      while (b < e && is_ascii_space (*b))
        b++;
      b_end = b;
      while (b_end < e && !is_ascii_space (*b_end))
        b_end++;
      if (b == e || b_end != e)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                       "%s: line %u is not two tokens separated by a space", path, line_no);
          return FALSE;
        }
      if (!um_tok_add_merge (tok, s, a_end - s, b, e - b, rank, path, "line", line_no, error))
        return FALSE;
      rank++;
    }
  return TRUE;
}

static gboolean
config_bool (JsonObject *o, const char *name, gboolean def, const char *path, const char *key,
             gboolean *out, GError **error)
{
  JsonNode *n = json_object_get_member (o, name);

  *out = def;
  if (n == NULL || JSON_NODE_HOLDS_NULL (n))
    return TRUE;
  if (!JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_BOOLEAN)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                   "%s: added_tokens_decoder[“%s”].%s is not a boolean", path, key, name);
      return FALSE;
    }
  *out = json_node_get_boolean (n);
  return TRUE;
}

/* tokenizer_config.json: the added tokens and the class. A missing file
 * leaves the tokenizer without added tokens. */
static gboolean
read_config (UmTokenizer *tok, const char *path, gint32 *max_id, GError **error)
{
  g_autoptr(GError) local = NULL;
  g_autoptr(JsonNode) root = NULL;
  JsonObject *obj;
  JsonNode *n;

  root = um_json_parse_file (path, path, NULL, &local);
  if (root == NULL)
    {
      if (um_json_error_is_missing (local))
        return TRUE;
      g_propagate_error (error, g_steal_pointer (&local));
      return FALSE;
    }
  if ((obj = um_json_root_object (root, path, error)) == NULL)
    return FALSE;

  n = json_object_get_member (obj, "tokenizer_class");
  if (n && JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_STRING)
    {
      const char *cls = json_node_get_string (n);
      /* their prepare_for_tokenization: unicodedata.normalize("NFC", text) */
      tok->nfc = g_str_equal (cls, "Qwen2Tokenizer") || g_str_equal (cls, "DreamTokenizer");
    }

  n = json_object_get_member (obj, "added_tokens_decoder");
  if (n == NULL || JSON_NODE_HOLDS_NULL (n))
    return TRUE;
  if (!JSON_NODE_HOLDS_OBJECT (n))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: added_tokens_decoder is not an object", path);
      return FALSE;
    }
  {
    JsonObjectIter it;
    const char *key;
    JsonNode *value;

    json_object_iter_init (&it, json_node_get_object (n));
    while (json_object_iter_next (&it, &key, &value))
      {
        AddedToken t = { 0 };
        JsonObject *o;
        JsonNode *cn;
        char *endp = NULL;
        gint64 id;
        gboolean special, single_word, lstrip, rstrip, normalized;

        errno = 0;
        id = g_ascii_strtoll (key, &endp, 10);
        if (*key == '\0' || *endp != '\0' || errno != 0 || id < 0 || id >= MAX_TOKEN_ID)
          {
            g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                         "%s: added_tokens_decoder key “%s” is not an id in [0, %d)",
                         path, key, MAX_TOKEN_ID);
            return FALSE;
          }
        if (!JSON_NODE_HOLDS_OBJECT (value))
          {
            g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                         "%s: added_tokens_decoder[“%s”] is not an object", path, key);
            return FALSE;
          }
        o = json_node_get_object (value);
        cn = json_object_get_member (o, "content");
        if (cn == NULL || !JSON_NODE_HOLDS_VALUE (cn) || json_node_get_value_type (cn) != G_TYPE_STRING)
          {
            g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                         "%s: added_tokens_decoder[“%s”].content is missing or not a string", path, key);
            return FALSE;
          }
        /* transformers' AddedToken: normalized defaults to not special */
        if (!config_bool (o, "special", FALSE, path, key, &special, error)
            || !config_bool (o, "single_word", FALSE, path, key, &single_word, error)
            || !config_bool (o, "lstrip", FALSE, path, key, &lstrip, error)
            || !config_bool (o, "rstrip", FALSE, path, key, &rstrip, error)
            || !config_bool (o, "normalized", !special, path, key, &normalized, error))
          return FALSE;
        if (*json_node_get_string (cn) == '\0')
          continue;
        t.content = g_string_chunk_insert (tok->strings, json_node_get_string (cn));
        t.len = strlen (t.content);
        t.id = (gint32) id;
        t.special = special;
        t.single_word = single_word;
        t.lstrip = lstrip;
        t.rstrip = rstrip;
        t.normalized = normalized;
        um_tok_put_added (tok, &t);
        *max_id = MAX (*max_id, (gint32) id);
      }
  }
  return TRUE;
}

UmTokenizer *
um_tokenizer_new_from_slow_files (const char *vocab_json_path,
                                  const char *merges_txt_path,
                                  const char *config_path,
                                  GError    **error)
{
  g_autoptr(UmTokenizer) tok = NULL;
  gint32 max_id = -1;
  GRegex *re;

  g_return_val_if_fail (vocab_json_path != NULL && merges_txt_path != NULL, NULL);

  tok = um_tok_alloc (vocab_json_path);
  if (!read_vocab (tok, vocab_json_path, &max_id, error)
      || !read_merges (tok, merges_txt_path, error)
      || (config_path != NULL && !read_config (tok, config_path, &max_id, error)))
    return NULL;
  if (max_id < 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: the vocabulary is empty", vocab_json_path);
      return NULL;
    }
  um_tok_build_id_tables (tok, (guint) max_id + 1);
  um_tok_finish_added (tok);

  re = um_tok_compile_regex (slow_qwen2_regex, FALSE, vocab_json_path, "pre-tokenizer regex", error);
  if (re == NULL)
    return NULL;
  um_tok_add_step (tok, STEP_SPLIT, re, SPLIT_ISOLATED, FALSE, FALSE);
  um_tok_add_step (tok, STEP_BYTE_LEVEL, NULL, SPLIT_ISOLATED, FALSE, FALSE);
  tok->decode_byte_level = TRUE;
  um_tok_finish_byte_ids (tok);
  return g_steal_pointer (&tok);
}

UmTokenizer *
um_tokenizer_new_from_dir (const char *dir,
                           GError    **error)
{
  g_autofree char *json = NULL, *vocab = NULL, *merges = NULL, *config = NULL;

  g_return_val_if_fail (dir != NULL, NULL);

  json = g_build_filename (dir, "tokenizer.json", NULL);
  vocab = g_build_filename (dir, "vocab.json", NULL);
  merges = g_build_filename (dir, "merges.txt", NULL);
  if (g_file_test (json, G_FILE_TEST_EXISTS)
      || !g_file_test (vocab, G_FILE_TEST_EXISTS) || !g_file_test (merges, G_FILE_TEST_EXISTS))
    {
      g_autoptr(GError) local = NULL;
      UmTokenizer *tok = um_tokenizer_new_from_file (json, &local);

      if (tok == NULL && !g_file_test (json, G_FILE_TEST_EXISTS))
        g_set_error (error, UM_ERROR, UM_ERROR_IO,
                     "%s: cannot read: the file is missing (and there is no vocab.json + merges.txt)",
                     json);
      else if (tok == NULL)
        g_propagate_error (error, g_steal_pointer (&local));
      return tok;
    }
  config = g_build_filename (dir, "tokenizer_config.json", NULL);
  return um_tokenizer_new_from_slow_files (vocab, merges, config, error);
}

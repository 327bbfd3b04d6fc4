/* um-tokenizer-json.c — reading a Hugging Face tokenizer.json into an UmTokenizer.
 *
 * Accepts an NFC normalizer, a BPE model, added tokens, Split/ByteLevel
 * pre-tokenizers (alone or in a Sequence) and a ByteLevel decoder; options
 * that would change the ids and are not implemented are refused rather than
 * ignored.
 */
#include "um-tokenizer.h"
#include "um-tokenizer-private.h"

#include <json-glib/json-glib.h>
#include <string.h>

#include "um-error.h"
#include "um-json.h"

/* The GPT-2 regex ByteLevel applies itself when use_regex is true. */
static const char gpt2_pre_regex[] =
  "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ---- tokenizer.json ------------------------------------------------------------- */

static JsonObject *
get_object_member (JsonObject *obj, const char *name, const char *src, const char *field,
                   gboolean required, GError **error)
{
  JsonNode *n = json_object_get_member (obj, name);

  if (n == NULL || JSON_NODE_HOLDS_NULL (n))
    {
      if (required)
        g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: %s is missing", src, field);
      return NULL;
    }
  if (!JSON_NODE_HOLDS_OBJECT (n))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: %s is not an object", src, field);
      return NULL;
    }
  return json_node_get_object (n);
}

/* Optional boolean member; FALSE with @error set when present but not a boolean. */
static gboolean
get_bool_member (JsonObject *obj, const char *name, gboolean def, gboolean *out,
                 const char *src, const char *path, GError **error)
{
  JsonNode *n = json_object_get_member (obj, name);

  if (n == NULL || JSON_NODE_HOLDS_NULL (n))
    {
      *out = def;
      return TRUE;
    }
  if (!JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_BOOLEAN)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: %s.%s is not a boolean",
                   src, path, name);
      return FALSE;
    }
  *out = json_node_get_boolean (n);
  return TRUE;
}

/* Optional string member: *out is NULL when absent or null; FALSE with
 * @error set when present but not a string. */
static gboolean
get_string_member (JsonObject *obj, const char *name, const char **out, const char *src,
                   const char *path, GError **error)
{
  JsonNode *n = json_object_get_member (obj, name);

  *out = NULL;
  if (n == NULL || JSON_NODE_HOLDS_NULL (n))
    return TRUE;
  if (!JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_STRING)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: %s.%s is not a string",
                   src, path, name);
      return FALSE;
    }
  *out = json_node_get_string (n);
  return TRUE;
}

/* Required string member. */
static const char *
require_string_member (JsonObject *obj, const char *name, const char *src, const char *path,
                       GError **error)
{
  const char *s;

  if (!get_string_member (obj, name, &s, src, path, error))
    return NULL;
  if (s == NULL)
    g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: %s.%s is missing", src, path, name);
  return s;
}

static gboolean
node_is_int (JsonNode *n)
{
  return n && JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_INT64;
}

static gboolean
parse_pre_tokenizer (UmTokenizer *tok, JsonNode *node, const char *path, GError **error)
{
  const char *src = tok->source;
  JsonObject *obj;
  const char *type;

  if (node == NULL || JSON_NODE_HOLDS_NULL (node))
    return TRUE;
  if (!JSON_NODE_HOLDS_OBJECT (node))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: %s is not an object", src, path);
      return FALSE;
    }
  obj = json_node_get_object (node);
  type = require_string_member (obj, "type", src, path, error);
  if (type == NULL)
    return FALSE;

  if (tok->byte_level)
    {
      /* ByteLevel rewrites the text into byte-level characters; nothing here
       * reads such text, so a step after it would silently misbehave. */
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                   "%s: %s (%s) comes after a ByteLevel pre-tokenizer, which is not supported",
                   src, path, type);
      return FALSE;
    }

  if (g_str_equal (type, "Sequence"))
    {
      JsonNode *list = json_object_get_member (obj, "pretokenizers");
      JsonArray *arr;

      if (list == NULL || !JSON_NODE_HOLDS_ARRAY (list))
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                       "%s: %s.pretokenizers is missing or not an array", src, path);
          return FALSE;
        }
      arr = json_node_get_array (list);
      for (guint i = 0; i < json_array_get_length (arr); i++)
        {
          g_autofree char *sub = g_strdup_printf ("%s.pretokenizers[%u]", path, i);
          if (!parse_pre_tokenizer (tok, json_array_get_element (arr, i), sub, error))
            return FALSE;
        }
      return TRUE;
    }
  if (g_str_equal (type, "Split"))
    {
      g_autofree char *pfield = g_strdup_printf ("%s.pattern", path);
      JsonObject *pat = get_object_member (obj, "pattern", src, pfield, TRUE, error);
      const char *behavior, *regex_str, *literal_str;
      SplitBehavior beh;
      gboolean invert;
      GRegex *re;

      if (pat == NULL)
        return FALSE;
      if (!get_string_member (pat, "Regex", &regex_str, src, pfield, error)
          || !get_string_member (pat, "String", &literal_str, src, pfield, error))
        return FALSE;
      if (regex_str == NULL && literal_str == NULL)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                       "%s: %s has neither Regex nor String", src, pfield);
          return FALSE;
        }
      if (!get_string_member (obj, "behavior", &behavior, src, path, error))
        return FALSE;
      if (behavior == NULL || g_str_equal (behavior, "Isolated"))
        beh = SPLIT_ISOLATED;
      else if (g_str_equal (behavior, "Removed"))
        beh = SPLIT_REMOVED;
      else if (g_str_equal (behavior, "MergedWithPrevious"))
        beh = SPLIT_MERGED_WITH_PREVIOUS;
      else if (g_str_equal (behavior, "MergedWithNext"))
        beh = SPLIT_MERGED_WITH_NEXT;
      else if (g_str_equal (behavior, "Contiguous"))
        beh = SPLIT_CONTIGUOUS;
      else
        {
          g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                       "%s: %s.behavior “%s” is not supported", src, path, behavior);
          return FALSE;
        }
      if (!get_bool_member (obj, "invert", FALSE, &invert, src, path, error))
        return FALSE;
      {
        g_autofree char *rfield = g_strdup_printf ("%s.%s", pfield, regex_str ? "Regex" : "String");
        re = um_tok_compile_regex (regex_str ? regex_str : literal_str, regex_str == NULL, src,
                                   rfield, error);
      }
      if (re == NULL)
        return FALSE;
      um_tok_add_step (tok, STEP_SPLIT, re, beh, invert, FALSE);
      return TRUE;
    }
  if (g_str_equal (type, "ByteLevel"))
    {
      gboolean prefix, use_regex;
      GRegex *re = NULL;

      if (!get_bool_member (obj, "add_prefix_space", TRUE, &prefix, src, path, error)
          || !get_bool_member (obj, "use_regex", TRUE, &use_regex, src, path, error))
        return FALSE;
      if (use_regex)
        {
          re = um_tok_compile_regex (gpt2_pre_regex, FALSE, src, "ByteLevel regex", error);
          if (re == NULL)
            return FALSE;
        }
      um_tok_add_step (tok, STEP_BYTE_LEVEL, re, SPLIT_ISOLATED, FALSE, prefix);
      return TRUE;
    }
  g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
               "%s: %s.type “%s” is not supported (Sequence, Split and ByteLevel are)",
               src, path, type);
  return FALSE;
}

/* Only NFC (RND1, Qwen2/Qwen3 tokenizers), alone or in a Sequence, is
 * implemented; any other normalizer would change the ids and is refused. */
static gboolean
parse_normalizer (UmTokenizer *tok, JsonNode *node, const char *path, GError **error)
{
  JsonObject *obj;
  const char *type;

  if (node == NULL || JSON_NODE_HOLDS_NULL (node))
    return TRUE;
  if (!JSON_NODE_HOLDS_OBJECT (node))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: %s is not an object", tok->source, path);
      return FALSE;
    }
  obj = json_node_get_object (node);
  type = require_string_member (obj, "type", tok->source, path, error);
  if (type == NULL)
    return FALSE;
  if (g_str_equal (type, "NFC"))
    {
      tok->nfc = TRUE;   /* NFC twice is NFC once */
      return TRUE;
    }
  if (g_str_equal (type, "Sequence"))
    {
      JsonNode *list = json_object_get_member (obj, "normalizers");
      JsonArray *arr;

      if (list == NULL || !JSON_NODE_HOLDS_ARRAY (list))
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                       "%s: %s.normalizers is missing or not an array", tok->source, path);
          return FALSE;
        }
      arr = json_node_get_array (list);
      for (guint i = 0; i < json_array_get_length (arr); i++)
        {
          g_autofree char *sub = g_strdup_printf ("%s.normalizers[%u]", path, i);
          if (!parse_normalizer (tok, json_array_get_element (arr, i), sub, error))
            return FALSE;
        }
      return TRUE;
    }
  g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
               "%s: %s.type “%s” is not supported (only NFC, alone or in a Sequence, is)",
               tok->source, path, type);
  return FALSE;
}

static gboolean
parse_decoder (UmTokenizer *tok, JsonNode *node, const char *path, GError **error)
{
  JsonObject *obj;
  const char *type;

  if (node == NULL || JSON_NODE_HOLDS_NULL (node))
    return TRUE;
  if (!JSON_NODE_HOLDS_OBJECT (node))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: %s is not an object", tok->source, path);
      return FALSE;
    }
  obj = json_node_get_object (node);
  type = require_string_member (obj, "type", tok->source, path, error);
  if (type == NULL)
    return FALSE;
  if (g_str_equal (type, "ByteLevel"))
    {
      tok->decode_byte_level = TRUE;
      return TRUE;
    }
  if (g_str_equal (type, "Sequence"))
    {
      JsonNode *list = json_object_get_member (obj, "decoders");
      JsonArray *arr;

      if (list == NULL || !JSON_NODE_HOLDS_ARRAY (list))
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                       "%s: %s.decoders is missing or not an array", tok->source, path);
          return FALSE;
        }
      arr = json_node_get_array (list);
      if (json_array_get_length (arr) <= 1)
        {
          g_autofree char *sub = g_strdup_printf ("%s.decoders[0]", path);
          return json_array_get_length (arr) == 0
                 || parse_decoder (tok, json_array_get_element (arr, 0), sub, error);
        }
    }
  g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
               "%s: %s.type “%s” is not supported (only ByteLevel is)", tok->source, path, type);
  return FALSE;
}

/* The two big values of tokenizer.json, read without json-glib (see
 * um_json_parse_lifted ()): the paths, and what loading lifts. */
enum { LIFT_VOCAB, LIFT_MERGES, N_LIFTED };

typedef struct {
  const char  *text;              /* NULL: nothing lifted, all in the tree */
  UmJsonLifted v[N_LIFTED];
} Lifted;

static void
lifted_init (Lifted *l)
{
  l->text = NULL;
  l->v[LIFT_VOCAB] = (UmJsonLifted) { "model.vocab", TRUE, 0, 0, 0 };
  l->v[LIFT_MERGES] = (UmJsonLifted) { "model.merges", FALSE, 0, 0, 0 };
}

static gboolean
has_lifted (const Lifted *l, int which)
{
  return l != NULL && l->text != NULL && l->v[which].end > l->v[which].start;
}

/* model.vocab from its text: as the tree's code below, and a repeated
 * token (which the check leaves to this reader) is an error here. */
static gboolean
read_vocab (UmTokenizer *tok, const Lifted *l, gint32 *max_id, GError **error)
{
  const char *src = tok->source;
  g_autoptr(GString) buf = g_string_new (NULL);
  UmJsonReader r;

  um_json_reader_init (&r, l->text, l->v[LIFT_VOCAB].start, l->v[LIFT_VOCAB].end);
  if (!um_json_reader_accept (&r, '{'))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: model.vocab is not an object", src);
      return FALSE;
    }
  g_free (tok->vocab.e);
  /* (the check counted the members; the table grows anyway) */
  um_tok_vocab_table_init (&tok->vocab, (guint) MIN (l->v[LIFT_VOCAB].count, (gsize) MAX_TOKEN_ID));
  if (um_json_reader_accept (&r, '}'))
    return TRUE;
  for (;;)
    {
      const char *name;
      gsize n;
      gint64 id;

      if (!um_json_reader_string (&r, buf, &name, &n) || !um_json_reader_accept (&r, ':'))
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: model.vocab cannot be read", src);
          return FALSE;
        }
      if (!um_json_reader_int (&r, &id) || id < 0 || id >= MAX_TOKEN_ID)
        {
          g_autofree char *shown = g_strndup (name, n);
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                       "%s: model.vocab[“%s”] is not an integer id in [0, %d)", src, shown, MAX_TOKEN_ID);
          return FALSE;
        }
      if (um_tok_vocab_get (tok, name, n) >= 0)
        {
          /* json-glib would have kept the last id. */
          g_autofree char *shown = g_strndup (name, MIN (n, (gsize) 60));
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                       "%s: model.vocab: the token “%s%s” appears twice", src, shown, n > 60 ? "…" : "");
          return FALSE;
        }
      um_tok_vocab_insert (tok, name, n, (gint32) id);
      *max_id = MAX (*max_id, (gint32) id);
      if (um_json_reader_accept (&r, ','))
        continue;
      if (um_json_reader_accept (&r, '}'))
        return TRUE;
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: model.vocab cannot be read", src);
      return FALSE;
    }
}

/* model.merges from its text: strings "a b" or pairs ["a", "b"], as the
 * tree's code below. */
static gboolean
read_merges (UmTokenizer *tok, const Lifted *l, GError **error)
{
  const char *src = tok->source;
  g_autoptr(GString) buf_a = g_string_new (NULL);
  g_autoptr(GString) buf_b = g_string_new (NULL);
  UmJsonReader r;
  guint i = 0;

  um_json_reader_init (&r, l->text, l->v[LIFT_MERGES].start, l->v[LIFT_MERGES].end);
  if (um_json_reader_peek (&r) == 'n')
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: model.merges is missing", src);
      return FALSE;
    }
  if (!um_json_reader_accept (&r, '['))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: model.merges is not an array", src);
      return FALSE;
    }
  um_tok_merge_table_init (&tok->merges, (guint) MIN (l->v[LIFT_MERGES].count, (gsize) G_MAXINT32));
  if (um_json_reader_accept (&r, ']'))
    return TRUE;
  for (;; i++)
    {
      const char *a, *b;
      gsize la, lb;
      const char c = um_json_reader_peek (&r);

      if (c == '"')
        {
          const char *sp;
          if (!um_json_reader_string (&r, buf_a, &a, &la))
            break;
          sp = memchr (a, ' ', la);
          if (sp == NULL || memchr (sp + 1, ' ', la - (gsize) (sp + 1 - a)) != NULL)
            {
              g_autofree char *shown = g_strndup (a, la);
              g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                           "%s: model.merges[%u] (“%s”) is not two tokens separated by one space", src, i, shown);
              return FALSE;
            }
          b = sp + 1;
          lb = la - (gsize) (b - a);
          la = (gsize) (sp - a);
        }
      else if (c == '[')
        {
          if (!um_json_reader_accept (&r, '[') || um_json_reader_peek (&r) != '"'
              || !um_json_reader_string (&r, buf_a, &a, &la) || !um_json_reader_accept (&r, ',')
              || um_json_reader_peek (&r) != '"' || !um_json_reader_string (&r, buf_b, &b, &lb)
              || !um_json_reader_accept (&r, ']'))
            {
              g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: model.merges[%u] is not a pair of strings",
                           src, i);
              return FALSE;
            }
        }
      else
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: model.merges[%u] is not a string", src, i);
          return FALSE;
        }
      if (!um_tok_add_merge (tok, a, la, b, lb, i, src, "model.merges", i, error))
        return FALSE;
      if (um_json_reader_accept (&r, ','))
        continue;
      if (um_json_reader_accept (&r, ']'))
        return TRUE;
      break;
    }
  g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: model.merges cannot be read", src);
  return FALSE;
}

static gboolean
parse_model (UmTokenizer *tok, JsonObject *root, const Lifted *lifted, GError **error)
{
  const char *src = tok->source;
  JsonObject *model, *vocab;
  JsonNode *merges_node, *n;
  JsonArray *merges;
  JsonObjectIter it;
  const char *name, *type, *s;
  JsonNode *value;
  gint32 max_id = -1;
  model = get_object_member (root, "model", src, "model", TRUE, error);
  if (model == NULL)
    return FALSE;
  if (!get_string_member (model, "type", &type, src, "model", error))
    return FALSE;
  if (type != NULL && !g_str_equal (type, "BPE"))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                   "%s: model.type “%s” is not supported (only BPE is)", src, type);
      return FALSE;
    }

  n = json_object_get_member (model, "vocab");
  if (has_lifted (lifted, LIFT_VOCAB))
    {
      if (!read_vocab (tok, lifted, &max_id, error))
        return FALSE;
    }
  else if (n == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: model.vocab is missing", src);
      return FALSE;
    }
  else if (!JSON_NODE_HOLDS_OBJECT (n))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: model.vocab is not an object", src);
      return FALSE;
    }
  else
  {
  vocab = json_node_get_object (n);
  g_free (tok->vocab.e);
  um_tok_vocab_table_init (&tok->vocab, json_object_get_size (vocab));
  json_object_iter_init (&it, vocab);
  while (json_object_iter_next (&it, &name, &value))
    {
      gint64 id;

      if (!node_is_int (value) || (id = json_node_get_int (value)) < 0 || id >= MAX_TOKEN_ID)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                       "%s: model.vocab[“%s”] is not an integer id in [0, %d)",
                       src, name, MAX_TOKEN_ID);
          return FALSE;
        }
      um_tok_vocab_insert (tok, name, strlen (name), (gint32) id);
      max_id = MAX (max_id, (gint32) id);
    }
  }

  /* Options of the BPE model. Those that change results and are not
   * implemented are refused rather than ignored. */
  {
    JsonNode *d = json_object_get_member (model, "dropout");
    if (d && !JSON_NODE_HOLDS_NULL (d))
      {
        if (!JSON_NODE_HOLDS_VALUE (d)
            || (json_node_get_value_type (d) != G_TYPE_DOUBLE
                && json_node_get_value_type (d) != G_TYPE_INT64))
          {
            g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: model.dropout is not a number", src);
            return FALSE;
          }
        if (json_node_get_double (d) != 0.0)
          {
            g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                         "%s: model.dropout is not supported (it makes encoding random)", src);
            return FALSE;
          }
      }
  }
  for (guint k = 0; k < 2; k++)
    {
      const char *opt = k == 0 ? "continuing_subword_prefix" : "end_of_word_suffix";
      if (!get_string_member (model, opt, &s, src, "model", error))
        return FALSE;
      if (s != NULL && *s != '\0')
        {
          g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                       "%s: model.%s is not supported", src, opt);
          return FALSE;
        }
    }
  if (!get_bool_member (model, "ignore_merges", FALSE, &tok->ignore_merges, src, "model", error)
      || !get_bool_member (model, "byte_fallback", FALSE, &tok->byte_fallback, src, "model", error)
      || !get_bool_member (model, "fuse_unk", FALSE, &tok->fuse_unk, src, "model", error))
    return FALSE;
  if (!get_string_member (model, "unk_token", &s, src, "model", error))
    return FALSE;
  if (s != NULL)
    {
      tok->unk_id = um_tok_vocab_lookup (tok, s);
      if (tok->unk_id < 0)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                       "%s: model.unk_token “%s” is not in model.vocab", src, s);
          return FALSE;
        }
    }

  if (has_lifted (lifted, LIFT_MERGES))
    {
      if (!read_merges (tok, lifted, error))
        return FALSE;
      tok->n_ids = (guint) (max_id + 1);
      return TRUE;
    }
  merges_node = json_object_get_member (model, "merges");
  if (merges_node == NULL || JSON_NODE_HOLDS_NULL (merges_node))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: model.merges is missing", src);
      return FALSE;
    }
  if (!JSON_NODE_HOLDS_ARRAY (merges_node))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: model.merges is not an array", src);
      return FALSE;
    }
  merges = json_node_get_array (merges_node);
  um_tok_merge_table_init (&tok->merges, json_array_get_length (merges));
  for (guint i = 0; i < json_array_get_length (merges); i++)
    {
      JsonNode *m = json_array_get_element (merges, i);
      const char *a, *b;
      gsize la;

      if (JSON_NODE_HOLDS_VALUE (m) && json_node_get_value_type (m) == G_TYPE_STRING)
        {
          a = json_node_get_string (m);
          if (!um_tok_split_merge_string (a, &la, &b))
            {
              g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                           "%s: model.merges[%u] (“%s”) is not two tokens separated by one space",
                           src, i, a);
              return FALSE;
            }
        }
      else if (JSON_NODE_HOLDS_ARRAY (m))
        {
          JsonArray *pair = json_node_get_array (m);
          JsonNode *na, *nb;

          if (json_array_get_length (pair) != 2
              || !JSON_NODE_HOLDS_VALUE ((na = json_array_get_element (pair, 0)))
              || json_node_get_value_type (na) != G_TYPE_STRING
              || !JSON_NODE_HOLDS_VALUE ((nb = json_array_get_element (pair, 1)))
              || json_node_get_value_type (nb) != G_TYPE_STRING)
            {
              g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                           "%s: model.merges[%u] is not a pair of strings", src, i);
              return FALSE;
            }
          a = json_node_get_string (na);
          la = strlen (a);
          b = json_node_get_string (nb);
        }
      else
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                       "%s: model.merges[%u] is not a string", src, i);
          return FALSE;
        }
      if (!um_tok_add_merge (tok, a, la, b, strlen (b), i, src, "model.merges", i, error))
        return FALSE;
    }

  tok->n_ids = (guint) (max_id + 1);
  return TRUE;
}

/* Records an added token the way AddedVocabulary::add_tokens does and returns
 * the id tokenizers gives it: the model's id when the content is already a
 * model token, otherwise the next id after the model vocabulary / the largest
 * added id. */
static gint32
register_added (UmTokenizer *tok, const AddedToken *in, gint32 *max_added)
{
  AddedToken t = *in;
  gpointer existing = g_hash_table_lookup (tok->added_vocab, t.content);
  gint32 id;

  if (existing)
    {
      AddedToken *old = &g_array_index (tok->added, AddedToken, GPOINTER_TO_UINT (existing) - 1);
      if (old->single_word == t.single_word && old->lstrip == t.lstrip && old->rstrip == t.rstrip
          && old->normalized == t.normalized && old->special == t.special)
        return old->id;
      /* same content, new options: tokenizers keeps the id and takes the new options */
      t.id = old->id;
      *old = t;
      return t.id;
    }
  id = um_tok_vocab_lookup (tok, t.content);
  if (id < 0)
    {
      if (*max_added < 0)
        id = (gint32) tok->n_model_tokens;
      else if ((guint) *max_added >= tok->n_model_tokens || tok->n_model_tokens == 0)
        id = *max_added + 1;
      else
        id = (gint32) tok->n_model_tokens;
    }
  if (id > *max_added)
    *max_added = id;
  t.id = id;
  g_array_append_val (tok->added, t);
  g_hash_table_insert (tok->added_vocab, (gpointer) t.content, GUINT_TO_POINTER (tok->added->len));
  return id;
}

static gboolean
parse_added_tokens (UmTokenizer *tok, JsonObject *root, GError **error)
{
  const char *src = tok->source;
  JsonNode *n = json_object_get_member (root, "added_tokens");
  JsonArray *arr;
  gint32 max_added = -1;
  guint max_id = tok->n_ids;

  if (n == NULL || JSON_NODE_HOLDS_NULL (n))
    {
      um_tok_build_id_tables (tok, max_id);
      um_tok_finish_added (tok);
      return TRUE;
    }
  if (!JSON_NODE_HOLDS_ARRAY (n))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: added_tokens is not an array", src);
      return FALSE;
    }
  arr = json_node_get_array (n);
  for (guint i = 0; i < json_array_get_length (arr); i++)
    {
      JsonNode *e = json_array_get_element (arr, i);
      g_autofree char *path = g_strdup_printf ("added_tokens[%u]", i);
      JsonObject *o;
      JsonNode *idn;
      const char *content;
      gboolean single_word, lstrip, rstrip, normalized, special;
      AddedToken t = { 0 };
      gint32 id;

      if (!JSON_NODE_HOLDS_OBJECT (e))
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: %s is not an object", src, path);
          return FALSE;
        }
      o = json_node_get_object (e);
      idn = json_object_get_member (o, "id");
      if (!node_is_int (idn) || json_node_get_int (idn) < 0 || json_node_get_int (idn) >= MAX_TOKEN_ID)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                       "%s: %s.id is not an integer id in [0, %d)", src, path, MAX_TOKEN_ID);
          return FALSE;
        }
      content = require_string_member (o, "content", src, path, error);
      if (content == NULL)
        return FALSE;
      if (!get_bool_member (o, "special", FALSE, &special, src, path, error)
          || !get_bool_member (o, "single_word", FALSE, &single_word, src, path, error)
          || !get_bool_member (o, "lstrip", FALSE, &lstrip, src, path, error)
          || !get_bool_member (o, "rstrip", FALSE, &rstrip, src, path, error)
          || !get_bool_member (o, "normalized", !special, &normalized, src, path, error))
        return FALSE;
      if (*content == '\0')
        continue;   /* tokenizers ignores empty added tokens */
      t.content = g_string_chunk_insert (tok->strings, content);
      t.len = strlen (content);
      t.single_word = single_word;
      t.lstrip = lstrip;
      t.rstrip = rstrip;
      t.normalized = normalized;
      t.special = special;
      id = register_added (tok, &t, &max_added);
      /* tokenizers assigns ids itself and only warns when the file disagrees;
       * follow it so the ids stay identical. */
      if (id != (gint32) json_node_get_int (idn))
        g_debug ("%s: %s “%s” has id %" G_GINT64_FORMAT " in the file but gets %d, as in tokenizers",
                 src, path, content, json_node_get_int (idn), id);
      max_id = MAX (max_id, (guint) id + 1);
    }
  um_tok_build_id_tables (tok, max_id);
  um_tok_finish_added (tok);
  return TRUE;
}

static UmTokenizer *
tokenizer_from_json (JsonNode *root_node, const Lifted *lifted, const char *src, GError **error)
{
  g_autoptr(UmTokenizer) tok = um_tok_alloc (src);
  JsonObject *root;

  if (root_node == NULL || !JSON_NODE_HOLDS_OBJECT (root_node))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: the top level is not an object", src);
      return NULL;
    }
  root = json_node_get_object (root_node);

  /* before the added tokens: normalized ones are matched in NFC form */
  if (!parse_normalizer (tok, json_object_get_member (root, "normalizer"), "normalizer", error))
    return NULL;
  if (!parse_model (tok, root, lifted, error))
    return NULL;
  if (!parse_added_tokens (tok, root, error))
    return NULL;
  if (!parse_pre_tokenizer (tok, json_object_get_member (root, "pre_tokenizer"), "pre_tokenizer",
                            error))
    return NULL;
  if (!parse_decoder (tok, json_object_get_member (root, "decoder"), "decoder", error))
    return NULL;
  um_tok_finish_byte_ids (tok);
  return g_steal_pointer (&tok);
}

UmTokenizer *
um_tokenizer_new_from_data (const char *data,
                            gssize      len,
                            const char *source_name,
                            GError    **error)
{
  const char *src = source_name ? source_name : "tokenizer.json";
  g_autoptr(JsonNode) root = NULL;
  Lifted lifted;

  lifted_init (&lifted);
  root = um_json_parse_lifted (data, len, src, &um_json_limits_model_file, lifted.v, N_LIFTED, error);
  if (root == NULL)
    return NULL;
  lifted.text = data;
  return tokenizer_from_json (root, &lifted, src, error);
}

UmTokenizer *
um_tokenizer_new_from_file (const char *tokenizer_json_path,
                            GError    **error)
{
  g_autoptr(JsonNode) root = NULL;
  g_autoptr(GError) local = NULL;
  g_autoptr(GMappedFile) map = NULL;
  Lifted lifted;

  g_return_val_if_fail (tokenizer_json_path != NULL, NULL);

  lifted_init (&lifted);
  root = um_json_parse_file_lifted (tokenizer_json_path, tokenizer_json_path, &um_json_limits_model_file, &map,
                                    lifted.v, N_LIFTED, &local);
  if (root == NULL)
    {
      /* Callers take a missing tokenizer for an I/O failure, as before. */
      if (um_json_error_is_missing (local))
        g_set_error (error, UM_ERROR, UM_ERROR_IO, "%s: cannot read: the file is missing", tokenizer_json_path);
      else
        g_propagate_error (error, g_steal_pointer (&local));
      return NULL;
    }
  lifted.text = g_mapped_file_get_contents (map);
  return tokenizer_from_json (root, &lifted, tokenizer_json_path, error);
}

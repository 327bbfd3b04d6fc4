/* um-json.c — a non-recursive scan of JSON text before json-glib sees it. */
#include "um-json.h"

#include <errno.h>
#include <gio/gio.h>
#include <glib/gstdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "um-error.h"

const UmJsonLimits um_json_limits_model_file = { .max_bytes = (gsize) 256 << 20, .max_depth = 0 };

typedef struct {
  gboolean    object;
  gboolean    expect_key;   /* in an object: the next string is a key */
  GHashTable *keys;         /* made on the first key; raw bytes as written */
} Frame;

typedef struct {
  const char *text;
  gsize       len;
  const char *what;
  GError    **error;
} Scan;

static void
position (const Scan *s, gsize at, int *line, int *col)
{
  *line = 1;
  *col = 1;
  for (gsize i = 0; i < at && i < s->len; i++)
    {
      if (s->text[i] == '\n')
        {
          (*line)++;
          *col = 1;
        }
      /* Columns count characters, not the bytes of their UTF-8. */
      else if (((guchar) s->text[i] & 0xC0) != 0x80)
        (*col)++;
    }
}

G_GNUC_PRINTF (3, 4) static gboolean
fail_at (const Scan *s, gsize at, const char *fmt, ...)
{
  g_autofree char *msg = NULL;
  va_list ap;
  int line, col;

  va_start (ap, fmt);
  msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  position (s, at, &line, &col);
  g_set_error (s->error, UM_ERROR, UM_ERROR_FORMAT, "%s: %s (line %d, column %d)", s->what, msg, line, col);
  return FALSE;
}

/* A number token starting at @i; sets *@end past it. Only its range is
 * judged here: its syntax is json-glib's to refuse. */
static gboolean
check_number (const Scan *s, gsize i, gsize *end)
{
  gsize j = i;
  gboolean integer = TRUE;
  char buf[64];

  while (j < s->len && (g_ascii_isdigit (s->text[j]) || strchr ("+-.eE", s->text[j]) != NULL))
    {
      integer &= s->text[j] != '.' && s->text[j] != 'e' && s->text[j] != 'E';
      j++;
    }
  *end = j;
  if (j - i >= sizeof buf)
    {
      /* Long numbers: only digits beyond 19 can overflow an integer, and a
       * double's mantissa digits do not change its range; check the
       * integer case by its length, the rest through strtod on the copy. */
      if (integer)
        return fail_at (s, i, "the number %.20s… does not fit in 64 bits", s->text + i);
      {
        g_autofree char *copy = g_strndup (s->text + i, j - i);
        double v = g_ascii_strtod (copy, NULL);
        if (!isfinite (v))
          return fail_at (s, i, "the number %.20s… is out of range", copy);
      }
      return TRUE;
    }
  memcpy (buf, s->text + i, j - i);
  buf[j - i] = '\0';
  errno = 0;
  if (integer)
    {
      /* Beyond gint64 json-glib would wrap or saturate without a word. */
      gboolean range;
      if (buf[0] == '-')
        {
          (void) g_ascii_strtoll (buf, NULL, 10);
          range = errno == ERANGE;
        }
      else
        range = g_ascii_strtoull (buf, NULL, 10) > (guint64) G_MAXINT64 || errno == ERANGE;
      if (range)
        return fail_at (s, i, "the integer %s does not fit in 64 bits", buf);
    }
  else if (!isfinite (g_ascii_strtod (buf, NULL)))
    return fail_at (s, i, "the number %s is out of range", buf);
  return TRUE;
}

/* A string token whose opening quote is at @i; sets *@end past the closing
 * quote (or to the end of the text if there is none: json-glib says so). */
static void
skip_string (const Scan *s, gsize i, gsize *end)
{
  gsize j = i + 1;
  while (j < s->len && s->text[j] != '"')
    j += s->text[j] == '\\' ? 2 : 1;
  *end = MIN (j + 1, s->len);
}

gboolean
um_json_check (const char *text, gssize len_in, const char *what, const UmJsonLimits *limits, GError **error)
{
  gsize max_bytes = limits && limits->max_bytes ? limits->max_bytes : UM_JSON_MAX_BYTES_DEFAULT;
  guint max_depth = limits && limits->max_depth ? limits->max_depth : UM_JSON_MAX_DEPTH_DEFAULT;
  gboolean dup_ok = limits && limits->allow_duplicate_keys;
  Scan s = { text, 0, what ? what : "JSON", error };
  Frame *stack;
  guint depth = 0;
  gboolean ok = TRUE;
  const char *bad_utf8;

  if (text == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: no text", s.what);
      return FALSE;
    }
  s.len = len_in < 0 ? strlen (text) : (gsize) len_in;
  if (s.len > max_bytes)
    {
      g_autofree char *have = g_format_size_full (s.len, G_FORMAT_SIZE_IEC_UNITS);
      g_autofree char *limit = g_format_size_full (max_bytes, G_FORMAT_SIZE_IEC_UNITS);
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: %s of JSON is more than the %s this file may have", s.what,
                   have, limit);
      return FALSE;
    }
  {
    const char *nul = memchr (text, '\0', s.len);
    if (nul != NULL)
      return fail_at (&s, (gsize) (nul - text), "a NUL byte at offset %" G_GSIZE_FORMAT, (gsize) (nul - text));
  }
  if (!g_utf8_validate_len (text, s.len, &bad_utf8))
    return fail_at (&s, (gsize) (bad_utf8 - text), "invalid UTF-8 at offset %" G_GSIZE_FORMAT,
                    (gsize) (bad_utf8 - text));

  stack = g_new0 (Frame, max_depth + 1);
  for (gsize i = 0; i < s.len && ok;)
    {
      char c = text[i];
      Frame *top = depth > 0 ? &stack[depth - 1] : NULL;

      switch (c)
        {
        case '[':
        case '{':
          if (depth == max_depth)
            {
              ok = fail_at (&s, i, "nested more than %u levels deep", max_depth);
              break;
            }
          if (top != NULL && top->object && top->expect_key)
            {
              /* "{[" or "{{": not JSON; stop here, json-glib reports it. */
              i = s.len;
              break;
            }
          stack[depth].object = c == '{';
          stack[depth].expect_key = c == '{';
          stack[depth].keys = NULL;
          depth++;
          i++;
          break;
        case ']':
        case '}':
          if (depth > 0)
            {
              g_clear_pointer (&stack[depth - 1].keys, g_hash_table_unref);
              depth--;
            }
          i++;
          break;
        case ',':
          if (top != NULL && top->object)
            top->expect_key = TRUE;
          i++;
          break;
        case ':':
          if (top != NULL && top->object)
            top->expect_key = FALSE;
          i++;
          break;
        case '"':
          {
            gsize end;
            skip_string (&s, i, &end);
            if (!dup_ok && top != NULL && top->object && top->expect_key)
              {
                /* Borrowed from the text, which outlives the scan. */
                char *key = g_strndup (text + i, end - i);
                if (top->keys == NULL)
                  top->keys = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
                if (!g_hash_table_add (top->keys, key))
                  ok = fail_at (&s, i, "the key %.*s appears twice in one object", (int) MIN (end - i, 80),
                                text + i);
              }
            i = end;
          }
          break;
        default:
          if (c == '-' || g_ascii_isdigit (c))
            {
              gsize end;
              ok = check_number (&s, i, &end);
              i = end;
            }
          else
            i++;
          break;
        }
    }
  while (depth > 0)
    {
      g_clear_pointer (&stack[depth - 1].keys, g_hash_table_unref);
      depth--;
    }
  g_free (stack);
  return ok;
}

JsonNode *
um_json_parse (const char *text, gssize len, const char *what, const UmJsonLimits *limits, GError **error)
{
  g_autoptr(JsonParser) parser = NULL;
  g_autoptr(GError) perr = NULL;
  JsonNode *root;

  if (!um_json_check (text, len, what, limits, error))
    return NULL;
  parser = json_parser_new_immutable ();
  if (!json_parser_load_from_data (parser, text, len, &perr))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: not valid JSON: %s", what ? what : "JSON", perr->message);
      return NULL;
    }
  root = json_parser_steal_root (parser);
  if (root == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: empty, not JSON", what ? what : "JSON");
      return NULL;
    }
  return root;
}

JsonNode *
um_json_parse_file (const char *path, const char *what, const UmJsonLimits *limits, GError **error)
{
  gsize max_bytes = limits && limits->max_bytes ? limits->max_bytes : UM_JSON_MAX_BYTES_DEFAULT;
  g_autoptr(GError) err = NULL;
  g_autoptr(GMappedFile) map = NULL;
  GStatBuf st;

  if (what == NULL)
    what = path;
  /* The size first: a 40 GiB "config.json" is refused before it is mapped. */
  if (g_stat (path, &st) == 0 && S_ISREG (st.st_mode) && (guint64) st.st_size > max_bytes)
    {
      g_autofree char *have = g_format_size_full ((guint64) st.st_size, G_FORMAT_SIZE_IEC_UNITS);
      g_autofree char *limit = g_format_size_full (max_bytes, G_FORMAT_SIZE_IEC_UNITS);
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: %s of JSON is more than the %s this file may have", what,
                   have, limit);
      return NULL;
    }
  map = g_mapped_file_new (path, FALSE, &err);
  if (map == NULL)
    {
      if (g_error_matches (err, G_FILE_ERROR, G_FILE_ERROR_NOENT))
        g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND, "%s: missing (looked for %s)", what, path);
      else
        g_set_error (error, UM_ERROR, UM_ERROR_IO, "%s: cannot be read: %s", what, err->message);
      return NULL;
    }
  /* An empty file maps to NULL contents. */
  return um_json_parse (g_mapped_file_get_contents (map) ? g_mapped_file_get_contents (map) : "",
                        (gssize) g_mapped_file_get_length (map), what, limits, error);
}

gboolean
um_json_error_is_missing (const GError *error)
{
  return g_error_matches (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND);
}

JsonObject *
um_json_root_object (JsonNode *root, const char *what, GError **error)
{
  if (root == NULL || !JSON_NODE_HOLDS_OBJECT (root))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: not a JSON object", what ? what : "JSON");
      return NULL;
    }
  return json_node_get_object (root);
}

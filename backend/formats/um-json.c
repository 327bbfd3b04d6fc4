/* um-json.c — a strict, non-recursive check of JSON text before json-glib
 * sees it.
 *
 * json-glib 1.6 reads more than JSON: comments, single-quoted strings, hex
 * and leading-zero numbers, text after the value. A scan that only counted
 * brackets would disagree with it about where strings are, and a comment
 * holding a quote would hide any nesting from the count. So the scan is a
 * full RFC 8259 recogniser with an explicit stack: what it passes is plain
 * JSON, which json-glib reads with the same structure and depth. */
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

/* Far longer than any number a program writes (Python's repr of a double
 * is at most 24 characters); keeps strtod away from megabytes of digits. */
#define MAX_NUMBER_CHARS 512

typedef struct {
  gsize       open_at;  /* the offset of its bracket, for "never closed" */
  gboolean    object;
  GHashTable *keys;     /* an object's keys so far, decoded; made on the first */
  char       *key;      /* the member being read (decoded), while lifting */
  int         lifted;   /* the lifted value this container is, or -1 */
  gboolean    dup_ok;   /* its reader checks repeated keys itself */
} Frame;

/* Paths are at most this many keys deep. */
#define LIFT_MAX_DEPTH 4

typedef enum {
  WANT_VALUE,          /* at the start, after ':' and after an array's ',' */
  WANT_VALUE_OR_CLOSE, /* after '[' */
  WANT_KEY,            /* after an object's ',' */
  WANT_KEY_OR_CLOSE,   /* after '{' */
  WANT_COLON,
  WANT_COMMA_OR_CLOSE, /* after a value inside an array or object */
  WANT_END,            /* after the root value: only whitespace may follow */
} State;

typedef struct {
  const char *text;
  gsize       len;
  const char *what;
  GError    **error;
  GString    *key;      /* the key being read, decoded */
  UmJsonLifted *lifted; /* values to record, not to hand to json-glib */
  guint       n_lifted;
  char      **parts[8]; /* each lifted path's keys (n_lifted <= 8) */
  guint       n_parts[8];
} Scan;

/* The lifted value (an index) whose path the frames 0 .. depth-1 spell,
 * all objects, or -1. */
static int
lifted_at (const Scan *s, const Frame *stack, guint depth)
{
  for (guint l = 0; l < s->n_lifted; l++)
    {
      guint d = 0;
      if (s->n_parts[l] != depth)
        continue;
      for (; d < depth; d++)
        if (!stack[d].object || stack[d].key == NULL || strcmp (stack[d].key, s->parts[l][d]) != 0)
          break;
      if (d == depth)
        return (int) l;
    }
  return -1;
}

/* g_utf8_validate_len () with a fast path for ASCII, which most of a
 * tokenizer.json is: the same answer and the same first bad byte (a
 * character's bytes are all >= 0x80, so none spans an ASCII byte). */
static gboolean
utf8_validate (const char *text, gsize len, const char **bad)
{
  gsize i = 0;

  while (i < len)
    {
      gsize j;
      for (; i + 8 <= len; i += 8)
        {
          guint64 w;
          memcpy (&w, text + i, sizeof w);
          if (w & G_GUINT64_CONSTANT (0x8080808080808080))
            break;
        }
      while (i < len && (guchar) text[i] < 0x80)
        i++;
      for (j = i; j < len && (guchar) text[j] >= 0x80; j++)
        ;
      if (j > i && !g_utf8_validate_len (text + i, j - i, bad))
        return FALSE;
      i = j;
    }
  return TRUE;
}

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
  g_set_error (s->error, UM_ERROR, UM_ERROR_FORMAT, "%s: not valid JSON: %s (line %d, column %d)", s->what, msg,
               line, col);
  return FALSE;
}

/* The character at @at for a message: itself, or its code point when it
 * would not show. The text is valid UTF-8 by the time this is called. */
static char *
describe (const Scan *s, gsize at)
{
  gunichar c;

  if (at >= s->len)
    return g_strdup ("the end of the text");
  c = g_utf8_get_char (s->text + at);
  if (c < 0x20 || c == 0x7F || !g_unichar_isprint (c))
    return g_strdup_printf ("U+%04X", c);
  return g_strdup_printf ("“%.*s”", (int) (g_utf8_next_char (s->text + at) - (s->text + at)), s->text + at);
}

static gboolean
hex4 (const Scan *s, gsize j, gunichar *out)
{
  gunichar u = 0;

  if (j + 6 > s->len || s->text[j] != '\\' || s->text[j + 1] != 'u')
    return FALSE;
  for (int k = 2; k < 6; k++)
    {
      int d = g_ascii_xdigit_value (s->text[j + k]);
      if (d < 0)
        return FALSE;
      u = u << 4 | (gunichar) d;
    }
  *out = u;
  return TRUE;
}

/* A string whose opening quote is at @i; sets *@end past its closing
 * quote. A key is decoded into s->key, so that "a" and "\u0061" are found
 * to be the same key, as json-glib would find them. */
static gboolean
scan_string (Scan *s, gsize i, gboolean key, gsize *end)
{
  const char *t = s->text;
  gsize j = i + 1;

  if (key)
    g_string_truncate (s->key, 0);
  for (;;)
    {
      guchar c;
      char plain;
      gunichar u;

      if (j >= s->len)
        return fail_at (s, i, "a string that is never closed");
      c = (guchar) t[j];
      if (c == '"')
        break;
      if (c < 0x20)
        return fail_at (s, j, "a control character (U+%04X) inside a string, where JSON wants an escape", c);
      if (c != '\\')
        {
          gsize k = j;
          while (k < s->len && t[k] != '"' && t[k] != '\\' && (guchar) t[k] >= 0x20)
            k++;
          if (key)
            g_string_append_len (s->key, t + j, (gssize) (k - j));
          j = k;
          continue;
        }
      if (j + 1 >= s->len)
        return fail_at (s, i, "a string that is never closed");
      switch (t[j + 1])
        {
        case '"': plain = '"'; break;
        case '\\': plain = '\\'; break;
        case '/': plain = '/'; break;
        case 'b': plain = '\b'; break;
        case 'f': plain = '\f'; break;
        case 'n': plain = '\n'; break;
        case 'r': plain = '\r'; break;
        case 't': plain = '\t'; break;
        case 'u': plain = 0; break;
        default:
          {
            g_autofree char *d = describe (s, j + 1);
            return fail_at (s, j, "an unknown escape: a backslash before %s", d);
          }
        }
      if (plain != 0)
        {
          if (key)
            g_string_append_c (s->key, plain);
          j += 2;
          continue;
        }
      if (!hex4 (s, j, &u))
        return fail_at (s, j, "a \\u escape without four hex digits");
      if (u >= 0xD800 && u <= 0xDBFF)
        {
          gunichar low;
          /* json-glib refuses a lone half of a pair, or turns it into
           * replacement characters; say so here instead. */
          if (!hex4 (s, j + 6, &low) || low < 0xDC00 || low > 0xDFFF)
            return fail_at (s, j, "\\u%04X is half of a UTF-16 surrogate pair without its other half", u);
          u = 0x10000 + ((u - 0xD800) << 10) + (low - 0xDC00);
          j += 6;
        }
      else if (u >= 0xDC00 && u <= 0xDFFF)
        return fail_at (s, j, "\\u%04X is half of a UTF-16 surrogate pair without its other half", u);
      else if (u == 0)
        /* json-glib's strings end at a NUL: "a\u0000b" would become "a". */
        return fail_at (s, j, "\\u0000 inside a string, which would cut it short");
      if (key)
        g_string_append_unichar (s->key, u);
      j += 6;
    }
  *end = j + 1;
  return TRUE;
}

static gboolean
is_digit (const Scan *s, gsize j)
{
  return j < s->len && g_ascii_isdigit (s->text[j]);
}

/* A number starting at @i (a '-' or a digit); sets *@end past it. Beyond
 * the syntax, its range: json-glib turns 1e999 into infinity and wraps an
 * integer beyond 64 bits without a word. */
static gboolean
scan_number (const Scan *s, gsize i, gsize *end)
{
  const char *t = s->text;
  gsize j = i;
  gboolean integer = TRUE;
  char buf[MAX_NUMBER_CHARS + 1];

  if (t[j] == '-')
    j++;
  if (!is_digit (s, j))
    return fail_at (s, i, "a minus sign without a number after it");
  if (t[j] == '0')
    j++;
  else
    while (is_digit (s, j))
      j++;
  if (j < s->len && t[j] == '.')
    {
      integer = FALSE;
      j++;
      if (!is_digit (s, j))
        return fail_at (s, i, "a number without digits after its decimal point");
      while (is_digit (s, j))
        j++;
    }
  if (j < s->len && (t[j] == 'e' || t[j] == 'E'))
    {
      integer = FALSE;
      j++;
      if (j < s->len && (t[j] == '+' || t[j] == '-'))
        j++;
      if (!is_digit (s, j))
        return fail_at (s, i, "a number without digits in its exponent");
      while (is_digit (s, j))
        j++;
    }
  *end = j;
  /* An integer of at most 18 digits fits 64 bits: no need to convert it
   * (a vocabulary has a hundred thousand). */
  if (integer && j - i - (t[i] == '-') <= 18)
    return TRUE;
  if (j - i > MAX_NUMBER_CHARS)
    return fail_at (s, i, "a number %" G_GSIZE_FORMAT " characters long", j - i);
  memcpy (buf, t + i, j - i);
  buf[j - i] = '\0';
  errno = 0;
  if (integer)
    {
      (void) g_ascii_strtoll (buf, NULL, 10);
      if (errno == ERANGE)
        return fail_at (s, i, "the integer %.40s%s does not fit in 64 bits", buf, j - i > 40 ? "…" : "");
    }
  else if (!isfinite (g_ascii_strtod (buf, NULL)))
    return fail_at (s, i, "the number %.40s%s is too large for a double", buf, j - i > 40 ? "…" : "");
  return TRUE;
}

static gboolean
scan_literal (const Scan *s, gsize i, gsize *end)
{
  static const char *const words[] = { "true", "false", "null" };

  for (guint w = 0; w < G_N_ELEMENTS (words); w++)
    {
      gsize n = strlen (words[w]);
      if (s->len - i >= n && memcmp (s->text + i, words[w], n) == 0)
        {
          *end = i + n;
          return TRUE;
        }
    }
  return FALSE;
}

static void
pop (Frame *stack, guint *depth)
{
  g_clear_pointer (&stack[*depth - 1].keys, g_hash_table_unref);
  g_clear_pointer (&stack[*depth - 1].key, g_free);
  (*depth)--;
}

/* Closes the container on top at @i (its closing bracket): a lifted one
 * records where it ends. */
static void
close_top (Scan *s, Frame *stack, guint *depth, gsize i)
{
  if (stack[*depth - 1].lifted >= 0)
    s->lifted[stack[*depth - 1].lifted].end = i + 1;
  pop (stack, depth);
}

static gboolean
check_key (Scan *s, Frame *top, gsize at)
{
  if (top->keys == NULL)
    top->keys = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  /* No key holds a NUL (\u0000 is refused), so C strings compare them. */
  if (!g_hash_table_add (top->keys, g_strndup (s->key->str, s->key->len)))
    {
      glong n = g_utf8_strlen (s->key->str, -1);
      g_autofree char *shown = g_utf8_substring (s->key->str, 0, MIN (n, 60));
      return fail_at (s, at, "the key “%s%s” appears twice in one object", shown, n > 60 ? "…" : "");
    }
  return TRUE;
}

static gboolean
check (const char *text, gssize len_in, const char *what, const UmJsonLimits *limits,
       UmJsonLifted *lifted, guint n_lifted, GError **error)
{
  gsize max_bytes = limits && limits->max_bytes ? limits->max_bytes : UM_JSON_MAX_BYTES_DEFAULT;
  guint max_depth = limits && limits->max_depth ? limits->max_depth : UM_JSON_MAX_DEPTH_DEFAULT;
  gboolean dup_ok = limits && limits->allow_duplicate_keys;
  Scan s = { text, 0, what ? what : "JSON", error, NULL, lifted, MIN (n_lifted, 8u), { NULL }, { 0 } };
  State state = WANT_VALUE;
  Frame *stack;
  guint depth = 0;
  gboolean ok = TRUE;
  const char *bad_utf8;
  gsize i = 0;

  /* Whatever a caller asks, json-glib must not recurse deeper than this. */
  max_depth = MIN (max_depth, UM_JSON_MAX_DEPTH_CEILING);
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
  if (!utf8_validate (text, s.len, &bad_utf8))
    return fail_at (&s, (gsize) (bad_utf8 - text), "invalid UTF-8 at offset %" G_GSIZE_FORMAT,
                    (gsize) (bad_utf8 - text));

  for (guint l = 0; l < s.n_lifted; l++)
    {
      s.parts[l] = g_strsplit (lifted[l].path, ".", LIFT_MAX_DEPTH + 1);
      s.n_parts[l] = g_strv_length (s.parts[l]);
      lifted[l].start = lifted[l].end = 0;
      lifted[l].count = 0;
    }
  s.key = g_string_new (NULL);
  stack = g_new0 (Frame, max_depth);
  while (ok)
    {
      Frame *top;
      char c;
      gsize end = s.len;

      while (i < s.len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r'))
        i++;
      if (i == s.len)
        break;
      c = text[i];
      top = depth > 0 ? &stack[depth - 1] : NULL;
      switch (state)
        {
        case WANT_VALUE_OR_CLOSE:
          if (c == ']')
            {
              close_top (&s, stack, &depth, i);
              state = depth > 0 ? WANT_COMMA_OR_CLOSE : WANT_END;
              i++;
              break;
            }
          G_GNUC_FALLTHROUGH;
        case WANT_VALUE:
          {
            /* A lifted value: its start, and (below) its end. */
            const int lift = s.n_lifted > 0 && depth > 0 && depth <= LIFT_MAX_DEPTH
                             ? lifted_at (&s, stack, depth) : -1;
            if (lift >= 0)
              lifted[lift].start = i;
            /* A member or element of a lifted value: counted. */
            if (depth > 0 && stack[depth - 1].lifted >= 0)
              lifted[stack[depth - 1].lifted].count++;
          if (c == '[' || c == '{')
            {
              if (depth == max_depth)
                {
                  ok = fail_at (&s, i, "nested more than %u levels deep", max_depth);
                  break;
                }
              stack[depth].open_at = i;
              stack[depth].object = c == '{';
              stack[depth].keys = NULL;
              stack[depth].key = NULL;
              stack[depth].lifted = lift;
              stack[depth].dup_ok = lift >= 0 && lifted[lift].reader_checks_keys;
              depth++;
              state = c == '{' ? WANT_KEY_OR_CLOSE : WANT_VALUE_OR_CLOSE;
              i++;
              break;
            }
          if (c == '"')
            ok = scan_string (&s, i, FALSE, &end);
          else if (c == '-' || g_ascii_isdigit (c))
            ok = scan_number (&s, i, &end);
          else if (!scan_literal (&s, i, &end))
            {
              g_autofree char *d = describe (&s, i);
              ok = fail_at (&s, i, "expected a value but found %s", d);
            }
          if (ok)
            {
              if (lift >= 0)
                lifted[lift].end = end;
              i = end;
              state = depth > 0 ? WANT_COMMA_OR_CLOSE : WANT_END;
            }
          }
          break;
        case WANT_KEY_OR_CLOSE:
        case WANT_KEY:
          if (c == '}' && state == WANT_KEY_OR_CLOSE)
            {
              close_top (&s, stack, &depth, i);
              state = depth > 0 ? WANT_COMMA_OR_CLOSE : WANT_END;
              i++;
            }
          else if (c == '"')
            {
              ok = scan_string (&s, i, TRUE, &end) && (dup_ok || top->dup_ok || check_key (&s, top, i));
              /* The path to lifted values: only shallow keys matter. */
              if (ok && s.n_lifted > 0 && depth <= LIFT_MAX_DEPTH)
                {
                  g_free (top->key);
                  top->key = g_strndup (s.key->str, s.key->len);
                }
              i = end;
              state = WANT_COLON;
            }
          else
            {
              g_autofree char *d = describe (&s, i);
              ok = fail_at (&s, i, "expected a key in double quotes but found %s", d);
            }
          break;
        case WANT_COLON:
          if (c == ':')
            {
              state = WANT_VALUE;
              i++;
            }
          else
            {
              g_autofree char *d = describe (&s, i);
              ok = fail_at (&s, i, "expected “:” after the key but found %s", d);
            }
          break;
        case WANT_COMMA_OR_CLOSE:
          if (c == ',')
            {
              state = top->object ? WANT_KEY : WANT_VALUE;
              i++;
            }
          else if (c == (top->object ? '}' : ']'))
            {
              close_top (&s, stack, &depth, i);
              state = depth > 0 ? WANT_COMMA_OR_CLOSE : WANT_END;
              i++;
            }
          else
            {
              g_autofree char *d = describe (&s, i);
              ok = fail_at (&s, i, "expected “,” or “%c” but found %s", top->object ? '}' : ']', d);
            }
          break;
        case WANT_END:
        default:
          {
            g_autofree char *d = describe (&s, i);
            ok = fail_at (&s, i, "more text after the end of the JSON value: %s", d);
          }
          break;
        }
    }
  if (ok && depth > 0)
    {
      int line, col;
      position (&s, stack[depth - 1].open_at, &line, &col);
      ok = fail_at (&s, s.len, "the text ends before the “%c” at line %d, column %d is closed",
                    stack[depth - 1].object ? '{' : '[', line, col);
    }
  else if (ok && state != WANT_END)
    ok = fail_at (&s, s.len, "no JSON value, the text is empty");
  while (depth > 0)
    pop (stack, &depth);
  g_free (stack);
  g_string_free (s.key, TRUE);
  for (guint l = 0; l < s.n_lifted; l++)
    {
      g_strfreev (s.parts[l]);
      /* A lifted value is all or nothing. */
      if (!ok || lifted[l].end <= lifted[l].start)
        lifted[l].start = lifted[l].end = lifted[l].count = 0;
    }
  return ok;
}

gboolean
um_json_check (const char *text, gssize len, const char *what, const UmJsonLimits *limits, GError **error)
{
  return check (text, len, what, limits, NULL, 0, error);
}

/* json-glib on text the check has passed. */
static JsonNode *
parse_checked (const char *text, gssize len, const char *what, GError **error)
{
  g_autoptr(JsonParser) parser = NULL;
  g_autoptr(GError) perr = NULL;
  JsonNode *root;

  parser = json_parser_new_immutable ();
  /* Not expected to fail on text the check passed; kept for safety. */
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
um_json_parse (const char *text, gssize len, const char *what, const UmJsonLimits *limits, GError **error)
{
  return um_json_parse_lifted (text, len, what, limits, NULL, 0, error);
}

JsonNode *
um_json_parse_lifted (const char *text, gssize len, const char *what, const UmJsonLimits *limits,
                      UmJsonLifted *lifted, guint n_lifted, GError **error)
{
  g_autoptr(GString) rest = NULL;
  gsize at = 0;
  guint order[8];
  guint n = 0;

  g_return_val_if_fail (n_lifted <= 8, NULL);
  if (!check (text, len, what, limits, lifted, n_lifted, error))
    return NULL;
  if (len < 0)
    len = (gssize) strlen (text);
  for (guint l = 0; l < n_lifted; l++)
    if (lifted[l].end > lifted[l].start)
      order[n++] = l;
  if (n == 0)
    return parse_checked (text, len, what, error);
  /* In text order (values at distinct paths never overlap). */
  for (guint a = 1; a < n; a++)
    for (guint b = a; b > 0 && lifted[order[b]].start < lifted[order[b - 1]].start; b--)
      {
        guint t = order[b];
        order[b] = order[b - 1];
        order[b - 1] = t;
      }
  /* json-glib gets the rest, each lifted value a null in its place. */
  rest = g_string_sized_new ((gsize) len);
  for (guint k = 0; k < n; k++)
    {
      const UmJsonLifted *v = &lifted[order[k]];
      g_string_append_len (rest, text + at, (gssize) (v->start - at));
      g_string_append (rest, "null");
      at = v->end;
    }
  g_string_append_len (rest, text + at, (gssize) ((gsize) len - at));
  return parse_checked (rest->str, (gssize) rest->len, what, error);
}

JsonNode *
um_json_parse_file (const char *path, const char *what, const UmJsonLimits *limits, GError **error)
{
  return um_json_parse_file_lifted (path, what, limits, NULL, NULL, 0, error);
}

JsonNode *
um_json_parse_file_lifted (const char *path, const char *what, const UmJsonLimits *limits,
                           GMappedFile **mapped, UmJsonLifted *lifted, guint n_lifted, GError **error)
{
  JsonNode *root;
  gsize max_bytes = limits && limits->max_bytes ? limits->max_bytes : UM_JSON_MAX_BYTES_DEFAULT;
  g_autoptr(GError) err = NULL;
  g_autoptr(GMappedFile) map = NULL;
  GStatBuf st;

  if (what == NULL)
    what = path;
  if (g_stat (path, &st) == 0)
    {
      /* A FIFO or device named config.json would block or never end. */
      if (!S_ISREG (st.st_mode))
        {
          g_set_error (error, UM_ERROR, UM_ERROR_IO, "%s: not a regular file (%s)", what, path);
          return NULL;
        }
      /* The size first: a 40 GiB "config.json" is refused before it is mapped. */
      if ((guint64) st.st_size > max_bytes)
        {
          g_autofree char *have = g_format_size_full ((guint64) st.st_size, G_FORMAT_SIZE_IEC_UNITS);
          g_autofree char *limit = g_format_size_full (max_bytes, G_FORMAT_SIZE_IEC_UNITS);
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: %s of JSON is more than the %s this file may have",
                       what, have, limit);
          return NULL;
        }
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
  root = um_json_parse_lifted (g_mapped_file_get_contents (map) ? g_mapped_file_get_contents (map) : "",
                               (gssize) g_mapped_file_get_length (map), what, limits, lifted, n_lifted, error);
  if (root != NULL && mapped != NULL)
    *mapped = g_steal_pointer (&map);
  return root;
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

const char *
um_json_get_string (JsonObject *o, const char *name)
{
  JsonNode *n = o != NULL ? json_object_get_member (o, name) : NULL;

  return n != NULL && JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_STRING
         ? json_node_get_string (n) : NULL;
}

void
um_json_add_int (JsonBuilder *b, const char *name, gint64 value)
{
  json_builder_set_member_name (b, name);
  json_builder_add_int_value (b, value);
}

void
um_json_add_double (JsonBuilder *b, const char *name, double value)
{
  json_builder_set_member_name (b, name);
  json_builder_add_double_value (b, value);
}

void
um_json_add_string (JsonBuilder *b, const char *name, const char *value)
{
  json_builder_set_member_name (b, name);
  json_builder_add_string_value (b, value);
}

void
um_json_add_bool (JsonBuilder *b, const char *name, gboolean value)
{
  json_builder_set_member_name (b, name);
  json_builder_add_boolean_value (b, value);
}

/* ---- reading lifted values ------------------------------------------------- */

void
um_json_reader_init (UmJsonReader *r, const char *text, gsize start, gsize end)
{
  r->p = text + start;
  r->end = text + end;
}

static void
reader_ws (UmJsonReader *r)
{
  while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
    r->p++;
}

char
um_json_reader_peek (UmJsonReader *r)
{
  reader_ws (r);
  return r->p < r->end ? *r->p : 0;
}

gboolean
um_json_reader_accept (UmJsonReader *r, char c)
{
  if (um_json_reader_peek (r) != c)
    return FALSE;
  r->p++;
  return TRUE;
}

static gboolean
reader_hex4 (const char *p, const char *end, gunichar *u)
{
  *u = 0;
  if (end - p < 4)
    return FALSE;
  for (int k = 0; k < 4; k++)
    {
      int d = g_ascii_xdigit_value (p[k]);
      if (d < 0)
        return FALSE;
      *u = *u << 4 | (gunichar) d;
    }
  return TRUE;
}

gboolean
um_json_reader_string (UmJsonReader *r, GString *buf, const char **s, gsize *n)
{
  const char *p, *run;

  if (!um_json_reader_accept (r, '"'))
    return FALSE;
  p = r->p;
  /* Most strings have no escape: the text itself. */
  while (p < r->end && *p != '"' && *p != '\\')
    p++;
  if (p < r->end && *p == '"')
    {
      *s = r->p;
      *n = (gsize) (p - r->p);
      r->p = p + 1;
      return TRUE;
    }
  g_string_truncate (buf, 0);
  run = r->p;
  while (p < r->end && *p != '"')
    {
      gunichar u;
      char plain = 0;

      if (*p != '\\')
        {
          p++;
          continue;
        }
      g_string_append_len (buf, run, p - run);
      if (r->end - p < 2)
        return FALSE;
      switch (p[1])
        {
        case '"': plain = '"'; break;
        case '\\': plain = '\\'; break;
        case '/': plain = '/'; break;
        case 'b': plain = '\b'; break;
        case 'f': plain = '\f'; break;
        case 'n': plain = '\n'; break;
        case 'r': plain = '\r'; break;
        case 't': plain = '\t'; break;
        case 'u': break;
        default: return FALSE;
        }
      if (plain != 0)
        {
          g_string_append_c (buf, plain);
          p += 2;
        }
      else
        {
          if (!reader_hex4 (p + 2, r->end, &u))
            return FALSE;
          p += 6;
          if (u >= 0xD800 && u <= 0xDBFF)
            {
              gunichar low;
              if (r->end - p < 6 || p[0] != '\\' || p[1] != 'u' || !reader_hex4 (p + 2, r->end, &low)
                  || low < 0xDC00 || low > 0xDFFF)
                return FALSE;
              u = 0x10000 + ((u - 0xD800) << 10) + (low - 0xDC00);
              p += 6;
            }
          g_string_append_unichar (buf, u);
        }
      run = p;
    }
  if (p >= r->end)
    return FALSE;
  g_string_append_len (buf, run, p - run);
  r->p = p + 1;
  *s = buf->str;
  *n = buf->len;
  return TRUE;
}

gboolean
um_json_reader_int (UmJsonReader *r, gint64 *v)
{
  const char *p;
  gboolean neg;
  guint64 u = 0;
  int digits = 0;
  char c = um_json_reader_peek (r);

  if (c != '-' && !g_ascii_isdigit (c))
    return FALSE;
  neg = c == '-';
  p = r->p + neg;
  for (; p < r->end && g_ascii_isdigit (*p); p++, digits++)
    u = u * 10 + (guint64) (*p - '0');
  /* 18 digits cannot overflow; the check passed no integer beyond 64
   * bits, but keep the arithmetic defined for anything longer. */
  if (digits == 0 || digits > 18 || (p < r->end && (*p == '.' || *p == 'e' || *p == 'E')))
    return FALSE;
  *v = neg ? -(gint64) u : (gint64) u;
  r->p = p;
  return TRUE;
}

gboolean
um_json_reader_skip (UmJsonReader *r)
{
  guint depth = 0;

  do
    {
      char c = um_json_reader_peek (r);
      if (c == '"')
        {
          r->p++;
          while (r->p < r->end && *r->p != '"')
            r->p += *r->p == '\\' ? 2 : 1;
          if (r->p >= r->end)
            return FALSE;
          r->p++;
        }
      else if (c == '[' || c == '{')
        {
          depth++;
          r->p++;
        }
      else if (c == ']' || c == '}')
        {
          if (depth == 0)
            return FALSE;
          depth--;
          r->p++;
        }
      else if (c == ',' || c == ':')
        r->p++;
      else if (c == 0)
        return FALSE;
      else
        while (r->p < r->end && (g_ascii_isalnum (*r->p) || *r->p == '-' || *r->p == '+' || *r->p == '.'))
          r->p++;
    }
  while (depth > 0);
  return TRUE;
}

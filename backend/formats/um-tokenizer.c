/* um-tokenizer.c — byte-level BPE that gives the ids of Hugging Face `tokenizers`.
 *
 * Pipeline (as in tokenizers' TokenizerImpl::encode without post-processing):
 *   1. added tokens that are not "normalized" are split out of the raw text
 *      (Aho-Corasick LeftmostLongest semantics, single_word/lstrip/rstrip);
 *   2. the same for "normalized" added tokens in the remaining pieces (there is
 *      no normalizer to run: only `normalizer: null` is accepted);
 *   3. the pre-tokenizer chain (Split with a regex or a string, ByteLevel) cuts
 *      each remaining piece into words;
 *   4. each word goes through BPE with integer ids: pair -> (rank, merged id)
 *      in an open-addressing table, merges applied lowest rank first, leftmost
 *      first on ties; long words use a binary heap so they stay O(n log n).
 *
 * The split regex is written for Oniguruma (what `tokenizers` uses). It runs
 * here through GRegex (PCRE2, UTF + UCP); the escapes whose meaning differs
 * (\s, \S, \w, \W, \h, \H, '.') are rewritten to explicit classes first.
 */
#include "um-tokenizer.h"

#include <json-glib/json-glib.h>
#include <string.h>

#include "um-error.h"

/* Ids above this are refused: they would make the id table absurdly large. */
#define MAX_TOKEN_ID (1 << 26)

/* The split regex of the LLaDA tokenizer.json, used when a GGUF file gives none. */
static const char default_pre_regex[] =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
  " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* The GPT-2 regex ByteLevel applies itself when use_regex is true. */
static const char gpt2_pre_regex[] =
  "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* Oniguruma's \s (and Rust's char::is_whitespace): the White_Space property. */
#define WS_CLASS_BODY \
  "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
/* Oniguruma's Unicode \w: letters, marks, decimal digits, connector punctuation. */
#define WORD_CLASS_BODY "\\p{L}\\p{M}\\p{Nd}\\p{Pc}"

typedef enum {
  STEP_SPLIT,
  STEP_BYTE_LEVEL,
} StepKind;

typedef enum {
  SPLIT_REMOVED,
  SPLIT_ISOLATED,
  SPLIT_MERGED_WITH_PREVIOUS,
  SPLIT_MERGED_WITH_NEXT,
  SPLIT_CONTIGUOUS,
} SplitBehavior;

typedef struct {
  StepKind      kind;
  GRegex       *regex;             /* Split; ByteLevel with use_regex */
  SplitBehavior behavior;
  gboolean      invert;
  gboolean      add_prefix_space;  /* ByteLevel */
} PreStep;

typedef struct {
  const char *content;             /* in tok->strings */
  gsize       len;
  gint32      id;
  guint       single_word : 1;
  guint       lstrip      : 1;
  guint       rstrip      : 1;
  guint       normalized  : 1;
  guint       special     : 1;
} AddedToken;

/* Leftmost-longest matcher over a set of added tokens: indices into
 * tok->added grouped by first byte, longest first inside a group. */
typedef struct {
  guint *order;
  guint  start[257];
} AddedMatcher;

#define EMPTY_KEY G_MAXUINT64

/* One slot per cache-line quarter: the key and its value are read together. */
typedef struct {
  guint64 key;                     /* (left << 32) | right, EMPTY_KEY when free */
  guint32 rank;
  gint32  new_id;
} MergeSlot;

typedef struct {
  MergeSlot *slots;
  guint32    mask;
  guint      n;
} MergeTable;

/* Model vocabulary: open addressing over (hash, length, key), so lookups
 * need no NUL-terminated copy and "a" + "b" can be looked up unjoined. */
typedef struct {
  const char *key;                 /* in tok->strings; NULL when free */
  guint32     hash;
  guint32     len;
  gint32      id;
} VocabEntry;

typedef struct {
  VocabEntry *e;
  guint32     mask;
  guint       n;
} VocabTable;

enum {
  ID_MODEL   = 1 << 0,
  ID_ADDED   = 1 << 1,
  ID_SPECIAL = 1 << 2,
};

struct _UmTokenizer {
  char         *source;            /* file name or GGUF, for messages */
  GStringChunk *strings;
  VocabTable    vocab;             /* model token -> id */
  GHashTable   *added_vocab;       /* added content -> index into added + 1 */
  guint         n_model_tokens;    /* distinct model tokens (HF's get_vocab_size) */
  const char  **id_tokens;         /* [n_ids]; an added token's content wins */
  guint8       *id_flags;          /* [n_ids] ID_* */
  guint         n_ids;
  MergeTable    merges;
  GArray       *merge_list;        /* (left, right) vocabulary strings per merge, in file order */
  GMutex        merge_text_lock;
  char        **merge_text;        /* "a b" per merge, built on first use */
  gboolean      ignore_merges;
  gboolean      byte_fallback;
  gboolean      fuse_unk;
  gint32        unk_id;            /* -1: unknown characters are dropped, as in HF */
  gint32        byte_ids[256];     /* id of each byte's byte-level character, -1 if absent */
  GArray       *added;             /* AddedToken */
  AddedMatcher  match_raw;         /* added tokens with normalized = false */
  AddedMatcher  match_norm;        /* added tokens with normalized = true */
  gboolean      has_norm;
  GArray       *steps;             /* PreStep */
  gboolean      byte_level;        /* a ByteLevel pre-tokenizer maps bytes before the model */
  gboolean      decode_byte_level; /* ByteLevel decoder; without one tokens are joined by ' ' */
  gboolean      force_heap;        /* testing: use the heap merge for every word */
};

/* ---- GPT-2 bytes_to_unicode ------------------------------------------------ */

#define BYTE_CP_LIMIT 324          /* every byte-level character is below U+0144 */

static gunichar byte_cp[256];
static gint16   cp_byte[BYTE_CP_LIMIT];
static char     byte_utf8[256][3];
static guint8   byte_utf8_len[256];

static void
byte_tables_init (void)
{
  static gsize done = 0;

  if (g_once_init_enter (&done))
    {
      guint n = 0;

      for (guint c = 0; c < BYTE_CP_LIMIT; c++)
        cp_byte[c] = -1;
      for (guint b = 0; b < 256; b++)
        {
          gboolean printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
          byte_cp[b] = printable ? b : 256 + n++;
          cp_byte[byte_cp[b]] = (gint16) b;
          byte_utf8_len[b] = (guint8) g_unichar_to_utf8 (byte_cp[b], byte_utf8[b]);
        }
      g_once_init_leave (&done, 1);
    }
}

/* ---- small helpers ---------------------------------------------------------- */

/* Strict UTF-8 (no overlongs, surrogates or values above U+10FFFF); unlike
 * g_utf8_validate_len it accepts NUL, which is a valid character. */
static gboolean
utf8_valid (const guint8 *s, gsize n, gsize *bad_at)
{
  gsize i = 0;

  while (i < n)
    {
      guint8 b = s[i];
      guint need;
      guint8 lo = 0x80, hi = 0xBF;

      if (b < 0x80)
        {
          i++;
          continue;
        }
      if (b >= 0xC2 && b <= 0xDF)
        need = 1;
      else if (b >= 0xE0 && b <= 0xEF)
        {
          need = 2;
          if (b == 0xE0)
            lo = 0xA0;
          else if (b == 0xED)
            hi = 0x9F;
        }
      else if (b >= 0xF0 && b <= 0xF4)
        {
          need = 3;
          if (b == 0xF0)
            lo = 0x90;
          else if (b == 0xF4)
            hi = 0x8F;
        }
      else
        goto bad;
      if (i + need >= n)
        goto bad;
      if (s[i + 1] < lo || s[i + 1] > hi)
        goto bad;
      for (guint k = 2; k <= need; k++)
        if ((s[i + k] & 0xC0) != 0x80)
          goto bad;
      i += need + 1;
    }
  return TRUE;

bad:
  if (bad_at)
    *bad_at = i;
  return FALSE;
}

/* Rust's String::from_utf8_lossy: one U+FFFD per maximal invalid subpart. */
static char *
utf8_lossy (const guint8 *s, gsize n)
{
  GString *out = g_string_sized_new (n + 1);
  gsize i = 0;

  while (i < n)
    {
      guint8 b = s[i];
      guint need, got;
      guint8 lo = 0x80, hi = 0xBF;

      if (b < 0x80)
        {
          g_string_append_c (out, (char) b);
          i++;
          continue;
        }
      if (b >= 0xC2 && b <= 0xDF)
        need = 1;
      else if (b >= 0xE0 && b <= 0xEF)
        {
          need = 2;
          lo = b == 0xE0 ? 0xA0 : 0x80;
          hi = b == 0xED ? 0x9F : 0xBF;
        }
      else if (b >= 0xF0 && b <= 0xF4)
        {
          need = 3;
          lo = b == 0xF0 ? 0x90 : 0x80;
          hi = b == 0xF4 ? 0x8F : 0xBF;
        }
      else
        {
          g_string_append (out, "\xEF\xBF\xBD");
          i++;
          continue;
        }
      got = 1;
      if (i + 1 < n && s[i + 1] >= lo && s[i + 1] <= hi)
        {
          got = 2;
          while (got <= need && i + got < n && (s[i + got] & 0xC0) == 0x80)
            got++;
        }
      if (got == need + 1)
        g_string_append_len (out, (const char *) s + i, got);
      else
        g_string_append (out, "\xEF\xBF\xBD");
      i += got;
    }
  return g_string_free (out, FALSE);
}

/* Rust's char::is_whitespace (Unicode White_Space). */
static gboolean
is_white_space (gunichar c)
{
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680
         || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F
         || c == 0x205F || c == 0x3000;
}

/* Rust regex's Unicode \w, used by single_word added tokens. */
static gboolean
is_word_char (gunichar c)
{
  switch (g_unichar_type (c))
    {
    case G_UNICODE_LOWERCASE_LETTER:
    case G_UNICODE_MODIFIER_LETTER:
    case G_UNICODE_OTHER_LETTER:
    case G_UNICODE_TITLECASE_LETTER:
    case G_UNICODE_UPPERCASE_LETTER:
    case G_UNICODE_SPACING_MARK:
    case G_UNICODE_ENCLOSING_MARK:
    case G_UNICODE_NON_SPACING_MARK:
    case G_UNICODE_DECIMAL_NUMBER:
    case G_UNICODE_LETTER_NUMBER:
    case G_UNICODE_CONNECT_PUNCTUATION:
      return TRUE;
    default:
      return c == 0x200C || c == 0x200D;
    }
}

/* ---- merge table ---------------------------------------------------------------- */

static inline guint32
merge_slot (guint64 key, guint32 mask)
{
  return (guint32) ((key * G_GUINT64_CONSTANT (0x9E3779B97F4A7C15)) >> 32) & mask;
}

static void
merge_table_init (MergeTable *t, guint expected)
{
  guint32 cap = 16;

  /* load factor at most 2/3 */
  while (cap < expected + expected / 2 + 1)
    cap <<= 1;
  t->slots = g_new (MergeSlot, cap);
  for (guint32 i = 0; i < cap; i++)
    t->slots[i].key = EMPTY_KEY;
  t->mask = cap - 1;
  t->n = 0;
}

static void
merge_table_clear (MergeTable *t)
{
  g_free (t->slots);
  memset (t, 0, sizeof *t);
}

/* A later merge of the same pair replaces the earlier one, like the HashMap
 * that tokenizers collects the merges into. */
static void
merge_table_put (MergeTable *t, gint32 a, gint32 b, guint32 rank, gint32 new_id)
{
  guint64 key = ((guint64) (guint32) a << 32) | (guint32) b;
  guint32 i = merge_slot (key, t->mask);

  while (t->slots[i].key != EMPTY_KEY && t->slots[i].key != key)
    i = (i + 1) & t->mask;
  if (t->slots[i].key == EMPTY_KEY)
    t->n++;
  t->slots[i].key = key;
  t->slots[i].rank = rank;
  t->slots[i].new_id = new_id;
}

static inline gboolean
merge_table_get (const MergeTable *t, gint32 a, gint32 b, guint32 *rank, gint32 *new_id)
{
  guint64 key = ((guint64) (guint32) a << 32) | (guint32) b;
  guint32 i = merge_slot (key, t->mask);

  for (;;)
    {
      const MergeSlot *sl = &t->slots[i];
      if (sl->key == key)
        {
          *rank = sl->rank;
          *new_id = sl->new_id;
          return TRUE;
        }
      if (sl->key == EMPTY_KEY)
        return FALSE;
      i = (i + 1) & t->mask;
    }
}

/* ---- vocabulary table ------------------------------------------------------------ */

/* FNV-1a, continued from @h: hashing "a" then "b" equals hashing "ab". */
static inline guint32
hash_bytes (guint32 h, const char *s, gsize n)
{
  for (gsize i = 0; i < n; i++)
    {
      h ^= (guchar) s[i];
      h *= 16777619u;
    }
  return h;
}

#define HASH_SEED 2166136261u

/* Slot of the key a + b (b may be empty), or of the free slot where it goes. */
static guint32
vocab_slot (const VocabTable *t, guint32 h, const char *a, gsize la, const char *b, gsize lb)
{
  guint32 i = (h ^ (h >> 15)) & t->mask;

  for (;;)
    {
      const VocabEntry *e = &t->e[i];
      if (e->key == NULL)
        return i;
      if (e->hash == h && e->len == la + lb && memcmp (e->key, a, la) == 0
          && (lb == 0 || memcmp (e->key + la, b, lb) == 0))
        return i;
      i = (i + 1) & t->mask;
    }
}

static void
vocab_table_init (VocabTable *t, guint expected)
{
  guint32 cap = 64;

  while (cap < expected * 2 + 1)
    cap <<= 1;
  t->e = g_new0 (VocabEntry, cap);
  t->mask = cap - 1;
  t->n = 0;
}

static void
vocab_table_grow (VocabTable *t)
{
  VocabEntry *old = t->e;
  guint32 old_cap = t->mask + 1;

  t->e = g_new0 (VocabEntry, old_cap * 2);
  t->mask = old_cap * 2 - 1;
  for (guint32 i = 0; i < old_cap; i++)
    if (old[i].key)
      {
        guint32 j = (old[i].hash ^ (old[i].hash >> 15)) & t->mask;
        while (t->e[j].key)
          j = (j + 1) & t->mask;
        t->e[j] = old[i];
      }
  g_free (old);
}

static inline const VocabEntry *
vocab_entry2 (const UmTokenizer *tok, const char *a, gsize la, const char *b, gsize lb)
{
  guint32 h = hash_bytes (hash_bytes (HASH_SEED, a, la), b, lb);
  const VocabEntry *e = &tok->vocab.e[vocab_slot (&tok->vocab, h, a, la, b, lb)];
  return e->key ? e : NULL;
}

static inline gint32
vocab_get2 (const UmTokenizer *tok, const char *a, gsize la, const char *b, gsize lb)
{
  const VocabEntry *e = vocab_entry2 (tok, a, la, b, lb);
  return e ? e->id : -1;
}

static inline gint32
vocab_get (const UmTokenizer *tok, const char *s, gsize len)
{
  return vocab_get2 (tok, s, len, NULL, 0);
}

static gint32
vocab_lookup (const UmTokenizer *tok, const char *token)
{
  return vocab_get (tok, token, strlen (token));
}

/* ---- construction --------------------------------------------------------------- */

static UmTokenizer *
tokenizer_alloc (const char *source)
{
  UmTokenizer *tok = g_new0 (UmTokenizer, 1);

  byte_tables_init ();
  tok->source = g_strdup (source);
  tok->strings = g_string_chunk_new (1 << 16);
  vocab_table_init (&tok->vocab, 1024);
  tok->added_vocab = g_hash_table_new (g_str_hash, g_str_equal);
  tok->added = g_array_new (FALSE, TRUE, sizeof (AddedToken));
  tok->steps = g_array_new (FALSE, TRUE, sizeof (PreStep));
  tok->merge_list = g_array_new (FALSE, FALSE, 2 * sizeof (const char *));
  g_mutex_init (&tok->merge_text_lock);
  tok->unk_id = -1;
  return tok;
}

void
um_tokenizer_free (UmTokenizer *tok)
{
  if (tok == NULL)
    return;
  for (guint i = 0; tok->steps && i < tok->steps->len; i++)
    {
      PreStep *st = &g_array_index (tok->steps, PreStep, i);
      if (st->regex)
        g_regex_unref (st->regex);
    }
  if (tok->steps)
    g_array_unref (tok->steps);
  if (tok->added)
    g_array_unref (tok->added);
  g_free (tok->match_raw.order);
  g_free (tok->match_norm.order);
  merge_table_clear (&tok->merges);
  if (tok->merge_list)
    g_array_unref (tok->merge_list);
  g_free (tok->merge_text);   /* the strings live in tok->strings */
  g_mutex_clear (&tok->merge_text_lock);
  g_free (tok->id_tokens);
  g_free (tok->id_flags);
  g_free (tok->vocab.e);
  if (tok->added_vocab)
    g_hash_table_unref (tok->added_vocab);
  if (tok->strings)
    g_string_chunk_free (tok->strings);
  g_free (tok->source);
  g_free (tok);
}


/* Rewrites an Oniguruma pattern into one PCRE2 reads the same way. */
static char *
rewrite_regex (const char *pat, const char *src, const char *field, GError **error)
{
  g_autoptr(GString) out = g_string_sized_new (strlen (pat) * 2 + 16);
  gboolean in_class = FALSE;
  const char *p = pat;

  while (*p)
    {
      if (*p == '\\')
        {
          char n = p[1];
          const char *rep = NULL;

          switch (n)
            {
            case '\0':
              g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                           "%s: %s ends with a lone backslash", src, field);
              return NULL;
            case 's':
              rep = in_class ? WS_CLASS_BODY : "[" WS_CLASS_BODY "]";
              break;
            case 'S':
              rep = in_class ? "\\S" : "[^" WS_CLASS_BODY "]";
              break;
            case 'w':
              rep = in_class ? WORD_CLASS_BODY : "[" WORD_CLASS_BODY "]";
              break;
            case 'W':
              rep = in_class ? "\\W" : "[^" WORD_CLASS_BODY "]";
              break;
            case 'h':
              rep = in_class ? "0-9a-fA-F" : "[0-9a-fA-F]";
              break;
            case 'H':
              if (in_class)
                {
                  g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                               "%s: %s uses \\H inside a character class", src, field);
                  return NULL;
                }
              rep = "[^0-9a-fA-F]";
              break;
            default:
              break;
            }
          if (rep)
            {
              g_string_append (out, rep);
              p += 2;
              continue;
            }
          if ((n == 'p' || n == 'P' || n == 'x') && p[2] == '{')
            {
              const char *end = strchr (p + 3, '}');
              if (end == NULL)
                {
                  g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                               "%s: %s has an unterminated \\%c{", src, field, n);
                  return NULL;
                }
              g_string_append_len (out, p, end + 1 - p);
              p = end + 1;
              continue;
            }
          g_string_append_c (out, '\\');
          p++;
          /* copy the escaped character whole, it may be multi-byte */
          {
            const char *next = g_utf8_next_char (p);
            g_string_append_len (out, p, next - p);
            p = next;
          }
          continue;
        }
      if (*p == '[')
        {
          if (in_class)
            {
              if (p[1] == ':')
                {
                  const char *end = strstr (p + 2, ":]");
                  if (end == NULL)
                    {
                      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                                   "%s: %s has an unterminated POSIX class", src, field);
                      return NULL;
                    }
                  g_string_append_len (out, p, end + 2 - p);
                  p = end + 2;
                  continue;
                }
              g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                           "%s: %s uses a nested character class (Oniguruma only)", src, field);
              return NULL;
            }
          in_class = TRUE;
          g_string_append_c (out, '[');
          p++;
          if (*p == '^')
            {
              g_string_append_c (out, '^');
              p++;
            }
          if (*p == ']')
            {
              g_string_append (out, "\\]");
              p++;
            }
          continue;
        }
      if (in_class && p[0] == '&' && p[1] == '&')
        {
          g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                       "%s: %s uses a class intersection (Oniguruma only)", src, field);
          return NULL;
        }
      if (*p == ']' && in_class)
        {
          in_class = FALSE;
          g_string_append_c (out, ']');
          p++;
          continue;
        }
      if (*p == '.' && !in_class)
        {
          /* Oniguruma's '.' excludes only \n */
          g_string_append (out, "[^\\n]");
          p++;
          continue;
        }
      {
        const char *next = g_utf8_next_char (p);
        g_string_append_len (out, p, next - p);
        p = next;
      }
    }
  return g_string_free (g_steal_pointer (&out), FALSE);
}

static GRegex *
compile_regex (const char *pattern, gboolean literal, const char *src, const char *field,
               GError **error)
{
  g_autofree char *rewritten = NULL;
  g_autoptr(GError) local = NULL;
  GRegex *re;

  if (!g_utf8_validate (pattern, -1, NULL))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: %s is not valid UTF-8", src, field);
      return NULL;
    }
  if (literal)
    rewritten = g_regex_escape_string (pattern, -1);
  else
    rewritten = rewrite_regex (pattern, src, field, error);
  if (rewritten == NULL)
    return NULL;
  /* Oniguruma's ^ and $ are line anchors, and only \n ends a line. */
  re = g_regex_new (rewritten, G_REGEX_OPTIMIZE | G_REGEX_MULTILINE | G_REGEX_NEWLINE_LF, 0,
                    &local);
  if (re == NULL)
    g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "%s: %s cannot be compiled: %s",
                 src, field, local->message);
  return re;
}

static void
add_step (UmTokenizer *tok, StepKind kind, GRegex *regex, SplitBehavior behavior,
          gboolean invert, gboolean add_prefix_space)
{
  PreStep st = { kind, regex, behavior, invert, add_prefix_space };
  g_array_append_val (tok->steps, st);
  if (kind == STEP_BYTE_LEVEL)
    tok->byte_level = TRUE;
}

/* Adds a model token; a repeated string keeps the last id. */
static void
vocab_insert (UmTokenizer *tok, const char *token, gsize len, gint32 id)
{
  VocabTable *t = &tok->vocab;
  guint32 h = hash_bytes (HASH_SEED, token, len);
  VocabEntry *e = &t->e[vocab_slot (t, h, token, len, NULL, 0)];

  if (e->key == NULL)
    {
      e->key = g_string_chunk_insert_len (tok->strings, token, len);
      e->hash = h;
      e->len = (guint32) len;
      tok->n_model_tokens++;
      if (++t->n * 2 > t->mask)
        {
          e->id = id;
          vocab_table_grow (t);
          return;
        }
    }
  e->id = id;
}

/* Sizes the id tables and records the model vocabulary in them. */
static void
build_id_tables (UmTokenizer *tok, guint n_ids)
{
  tok->n_ids = n_ids;
  tok->id_tokens = g_new0 (const char *, n_ids);
  tok->id_flags = g_new0 (guint8, n_ids);
  for (guint32 i = 0; i <= tok->vocab.mask; i++)
    {
      const VocabEntry *e = &tok->vocab.e[i];
      if (e->key)
        {
          tok->id_tokens[e->id] = e->key;
          tok->id_flags[e->id] |= ID_MODEL;
        }
    }
}

static void
finish_byte_ids (UmTokenizer *tok)
{
  for (guint b = 0; b < 256; b++)
    tok->byte_ids[b] = vocab_get (tok, byte_utf8[b], byte_utf8_len[b]);
}

static gint
cmp_added_order (gconstpointer a, gconstpointer b, gpointer user_data)
{
  const AddedToken *tokens = user_data;
  const AddedToken *x = &tokens[*(const guint *) a];
  const AddedToken *y = &tokens[*(const guint *) b];
  guint8 fx = (guint8) x->content[0], fy = (guint8) y->content[0];

  if (fx != fy)
    return fx < fy ? -1 : 1;
  if (x->len != y->len)
    return x->len > y->len ? -1 : 1;   /* longest first */
  return *(const guint *) a < *(const guint *) b ? -1 : (*(const guint *) a > *(const guint *) b);
}

static void
build_matcher (UmTokenizer *tok, AddedMatcher *m, gboolean normalized)
{
  const AddedToken *tokens = (const AddedToken *) tok->added->data;
  guint n = 0;

  m->order = g_new (guint, tok->added->len + 1);
  for (guint i = 0; i < tok->added->len; i++)
    if (tokens[i].normalized == (guint) normalized)
      m->order[n++] = i;
  g_qsort_with_data (m->order, n, sizeof (guint), cmp_added_order, (gpointer) tokens);
  memset (m->start, 0, sizeof m->start);
  for (guint i = 0; i < n; i++)
    m->start[(guint8) tokens[m->order[i]].content[0] + 1]++;
  for (guint b = 0; b < 256; b++)
    m->start[b + 1] += m->start[b];
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
  id = vocab_lookup (tok, t.content);
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

/* Finishes a tokenizer once vocab, merges list, added tokens and steps are in. */
static void
finish_added (UmTokenizer *tok)
{
  const AddedToken *tokens = (const AddedToken *) tok->added->data;

  for (guint i = 0; i < tok->added->len; i++)
    {
      gint32 id = tokens[i].id;
      tok->id_tokens[id] = tokens[i].content;
      tok->id_flags[id] |= ID_ADDED;
      if (tokens[i].special)
        tok->id_flags[id] |= ID_SPECIAL;
      else
        tok->id_flags[id] &= ~ID_SPECIAL;
      if (tokens[i].normalized)
        tok->has_norm = TRUE;
    }
  build_matcher (tok, &tok->match_raw, FALSE);
  build_matcher (tok, &tok->match_norm, TRUE);
}

/* Looks up merge "a b" (a, b given with lengths) and stores it. */
static gboolean
add_merge (UmTokenizer *tok, const char *a, gsize la, const char *b, gsize lb,
           guint rank, const char *src, const char *field, guint index, GError **error)
{
  const VocabEntry *ea = vocab_entry2 (tok, a, la, NULL, 0);
  const VocabEntry *eb = vocab_entry2 (tok, b, lb, NULL, 0);
  gint32 ia = ea ? ea->id : -1;
  gint32 ib = eb ? eb->id : -1;
  gint32 inew = vocab_get2 (tok, a, la, b, lb);
  g_autofree char *missing = NULL;

  if (ia >= 0 && ib >= 0 && inew >= 0)
    {
      /* the vocabulary's own strings: stable, and unlike id_tokens never an
       * added token's content */
      const char *pair[2] = { ea->key, eb->key };
      merge_table_put (&tok->merges, ia, ib, rank, inew);
      g_array_append_val (tok->merge_list, pair);
      return TRUE;
    }
  if (ia < 0)
    missing = g_strndup (a, la);
  else if (ib < 0)
    missing = g_strndup (b, lb);
  else
    {
      g_autofree char *head = g_strndup (a, la);
      g_autofree char *tail = g_strndup (b, lb);
      missing = g_strconcat (head, tail, NULL);
    }
  g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
               "%s: %s[%u] names token “%s”, which is not in the vocabulary",
               src, field, index, missing);
  return FALSE;
}

/* Splits a "a b" merge string; tokenizers requires exactly one space. */
static gboolean
split_merge_string (const char *s, gsize *la, const char **b)
{
  const char *sp = strchr (s, ' ');

  if (sp == NULL || strchr (sp + 1, ' ') != NULL)
    return FALSE;
  *la = sp - s;
  *b = sp + 1;
  return TRUE;
}

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
        re = compile_regex (regex_str ? regex_str : literal_str, regex_str == NULL, src, rfield,
                            error);
      }
      if (re == NULL)
        return FALSE;
      add_step (tok, STEP_SPLIT, re, beh, invert, FALSE);
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
          re = compile_regex (gpt2_pre_regex, FALSE, src, "ByteLevel regex", error);
          if (re == NULL)
            return FALSE;
        }
      add_step (tok, STEP_BYTE_LEVEL, re, SPLIT_ISOLATED, FALSE, prefix);
      return TRUE;
    }
  g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
               "%s: %s.type “%s” is not supported (Sequence, Split and ByteLevel are)",
               src, path, type);
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

static gboolean
parse_model (UmTokenizer *tok, JsonObject *root, GError **error)
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
  if (n == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: model.vocab is missing", src);
      return FALSE;
    }
  if (!JSON_NODE_HOLDS_OBJECT (n))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: model.vocab is not an object", src);
      return FALSE;
    }
  vocab = json_node_get_object (n);
  g_free (tok->vocab.e);
  vocab_table_init (&tok->vocab, json_object_get_size (vocab));
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
      vocab_insert (tok, name, strlen (name), (gint32) id);
      max_id = MAX (max_id, (gint32) id);
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
      tok->unk_id = vocab_lookup (tok, s);
      if (tok->unk_id < 0)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                       "%s: model.unk_token “%s” is not in model.vocab", src, s);
          return FALSE;
        }
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
  merge_table_init (&tok->merges, json_array_get_length (merges));
  for (guint i = 0; i < json_array_get_length (merges); i++)
    {
      JsonNode *m = json_array_get_element (merges, i);
      const char *a, *b;
      gsize la;

      if (JSON_NODE_HOLDS_VALUE (m) && json_node_get_value_type (m) == G_TYPE_STRING)
        {
          a = json_node_get_string (m);
          if (!split_merge_string (a, &la, &b))
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
      if (!add_merge (tok, a, la, b, strlen (b), i, src, "model.merges", i, error))
        return FALSE;
    }

  tok->n_ids = (guint) (max_id + 1);
  return TRUE;
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
      build_id_tables (tok, max_id);
      finish_added (tok);
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
  build_id_tables (tok, max_id);
  finish_added (tok);
  return TRUE;
}

static UmTokenizer *
tokenizer_from_json (JsonNode *root_node, const char *src, GError **error)
{
  g_autoptr(UmTokenizer) tok = tokenizer_alloc (src);
  JsonObject *root;
  JsonNode *n;

  if (root_node == NULL || !JSON_NODE_HOLDS_OBJECT (root_node))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: the top level is not an object", src);
      return NULL;
    }
  root = json_node_get_object (root_node);

  n = json_object_get_member (root, "normalizer");
  if (n && !JSON_NODE_HOLDS_NULL (n))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                   "%s: normalizer is not supported (only null is)", src);
      return NULL;
    }
  if (!parse_model (tok, root, error))
    return NULL;
  if (!parse_added_tokens (tok, root, error))
    return NULL;
  if (!parse_pre_tokenizer (tok, json_object_get_member (root, "pre_tokenizer"), "pre_tokenizer",
                            error))
    return NULL;
  if (!parse_decoder (tok, json_object_get_member (root, "decoder"), "decoder", error))
    return NULL;
  finish_byte_ids (tok);
  return g_steal_pointer (&tok);
}

UmTokenizer *
um_tokenizer_new_from_data (const char *data,
                            gssize      len,
                            const char *source_name,
                            GError    **error)
{
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(GError) local = NULL;
  const char *src = source_name ? source_name : "tokenizer.json";

  if (!json_parser_load_from_data (parser, data, len, &local))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: invalid JSON: %s", src, local->message);
      return NULL;
    }
  return tokenizer_from_json (json_parser_get_root (parser), src, error);
}

UmTokenizer *
um_tokenizer_new_from_file (const char *tokenizer_json_path,
                            GError    **error)
{
  g_autoptr(GMappedFile) mf = NULL;
  g_autoptr(GError) local = NULL;

  g_return_val_if_fail (tokenizer_json_path != NULL, NULL);

  mf = g_mapped_file_new (tokenizer_json_path, FALSE, &local);
  if (mf == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_IO, "%s: cannot read: %s",
                   tokenizer_json_path, local->message);
      return NULL;
    }
  /* an empty file maps to NULL contents */
  return um_tokenizer_new_from_data (g_mapped_file_get_contents (mf) ? g_mapped_file_get_contents (mf) : "",
                                     (gssize) g_mapped_file_get_length (mf),
                                     tokenizer_json_path, error);
}

UmTokenizer *
um_tokenizer_new_from_vocab (const char * const *tokens,
                             guint               n_tokens,
                             const char * const *merges,
                             guint               n_merges,
                             const gint32       *token_types,
                             const char         *pre_regex,
                             GError            **error)
{
  const char *src = "GGUF tokenizer";
  g_autoptr(UmTokenizer) tok = tokenizer_alloc (src);
  GRegex *re;

  if (n_tokens == 0 || n_tokens >= MAX_TOKEN_ID || tokens == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: tokenizer.ggml.tokens has %u entries",
                   src, n_tokens);
      return NULL;
    }
  if (n_merges > 0 && merges == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "%s: tokenizer.ggml.merges is NULL", src);
      return NULL;
    }

  g_free (tok->vocab.e);
  vocab_table_init (&tok->vocab, n_tokens);
  for (guint i = 0; i < n_tokens; i++)
    {
      const char *t = tokens[i];
      gint32 type = token_types ? token_types[i] : UM_TOKEN_TYPE_NORMAL;

      if (t == NULL || !g_utf8_validate (t, -1, NULL))
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                       "%s: tokenizer.ggml.tokens[%u] is not a UTF-8 string", src, i);
          return NULL;
        }
      if (type == UM_TOKEN_TYPE_CONTROL || type == UM_TOKEN_TYPE_USER_DEFINED)
        continue;
      /* like llama.cpp's token_to_id map, a repeated string keeps the last id */
      vocab_insert (tok, t, strlen (t), (gint32) i);
    }

  merge_table_init (&tok->merges, n_merges);
  for (guint i = 0; i < n_merges; i++)
    {
      const char *a = merges[i], *b;
      gsize la;

      if (a == NULL || !split_merge_string (a, &la, &b))
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                       "%s: tokenizer.ggml.merges[%u] is not two tokens separated by one space",
                       src, i);
          return NULL;
        }
      if (!add_merge (tok, a, la, b, strlen (b), i, src, "tokenizer.ggml.merges", i, error))
        return NULL;
    }

  build_id_tables (tok, n_tokens);
  for (guint i = 0; token_types && i < n_tokens; i++)
    {
      if (token_types[i] == UM_TOKEN_TYPE_CONTROL || token_types[i] == UM_TOKEN_TYPE_USER_DEFINED)
        {
          AddedToken t = { 0 };
          gpointer old;

          if (tokens[i][0] == '\0')
            continue;
          t.content = g_string_chunk_insert (tok->strings, tokens[i]);
          t.len = strlen (tokens[i]);
          t.id = (gint32) i;
          t.special = token_types[i] == UM_TOKEN_TYPE_CONTROL;
          /* a repeated string keeps the last id, as above */
          old = g_hash_table_lookup (tok->added_vocab, t.content);
          if (old)
            g_array_index (tok->added, AddedToken, GPOINTER_TO_UINT (old) - 1) = t;
          else
            {
              g_array_append_val (tok->added, t);
              g_hash_table_insert (tok->added_vocab, (gpointer) t.content,
                                   GUINT_TO_POINTER (tok->added->len));
            }
        }
    }
  finish_added (tok);
  /* ids whose string is repeated later still decode to their own text */
  for (guint i = 0; i < n_tokens; i++)
    if (tok->id_tokens[i] == NULL)
      {
        gint32 type = token_types ? token_types[i] : UM_TOKEN_TYPE_NORMAL;
        tok->id_tokens[i] = g_string_chunk_insert (tok->strings, tokens[i]);
        if (type == UM_TOKEN_TYPE_CONTROL)
          tok->id_flags[i] |= ID_ADDED | ID_SPECIAL;
        else if (type == UM_TOKEN_TYPE_USER_DEFINED)
          tok->id_flags[i] |= ID_ADDED;
        else
          tok->id_flags[i] |= ID_MODEL;
      }

  re = compile_regex (pre_regex ? pre_regex : default_pre_regex, FALSE, src,
                      "pre-tokenizer regex", error);
  if (re == NULL)
    return NULL;
  add_step (tok, STEP_SPLIT, re, SPLIT_ISOLATED, FALSE, FALSE);
  add_step (tok, STEP_BYTE_LEVEL, NULL, SPLIT_ISOLATED, FALSE, FALSE);
  tok->decode_byte_level = TRUE;
  finish_byte_ids (tok);
  return g_steal_pointer (&tok);
}

/* ---- encoding ------------------------------------------------------------------- */

typedef struct {
  gsize off;
  gsize len;
} Span;

typedef struct {
  gint32  id;
  gint32  prev;
  gint32  next;
  guint32 len;   /* bytes covered; 0 once merged into its left neighbour */
} Symbol;

typedef struct {
  guint32 rank;
  guint32 pos;
  gint32  new_id;
} MergeEntry;

typedef struct {
  GString *buf;      /* text being pre-tokenized (plus prefix-space copies) */
  GArray  *spans;    /* Span */
  GArray  *spans2;   /* Span */
  GArray  *parts;    /* Span; regex_split flags matches in off's top bit */
  GArray  *syms;     /* Symbol */
  GArray  *heap;     /* MergeEntry */
  GString *word;     /* byte-level form of a word */
} Scratch;

static void
scratch_init (Scratch *sc)
{
  sc->buf = g_string_new (NULL);
  memset (sc->buf->str, 0, sc->buf->allocated_len);   /* see encode_plain */
  sc->spans = g_array_new (FALSE, FALSE, sizeof (Span));
  sc->spans2 = g_array_new (FALSE, FALSE, sizeof (Span));
  sc->parts = g_array_new (FALSE, FALSE, sizeof (Span));
  sc->syms = g_array_new (FALSE, FALSE, sizeof (Symbol));
  sc->heap = g_array_new (FALSE, FALSE, sizeof (MergeEntry));
  sc->word = g_string_new (NULL);
}

static void
scratch_clear (Scratch *sc)
{
  g_string_free (sc->buf, TRUE);
  g_array_unref (sc->spans);
  g_array_unref (sc->spans2);
  g_array_unref (sc->parts);
  g_array_unref (sc->syms);
  g_array_unref (sc->heap);
  g_string_free (sc->word, TRUE);
}

static inline gboolean
heap_less (const MergeEntry *a, const MergeEntry *b)
{
  return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void
heap_push (GArray *heap, guint32 rank, guint32 pos, gint32 new_id)
{
  MergeEntry e = { rank, pos, new_id };
  MergeEntry *h;
  guint i;

  g_array_append_val (heap, e);
  h = (MergeEntry *) heap->data;
  i = heap->len - 1;
  while (i > 0)
    {
      guint parent = (i - 1) / 2;
      if (!heap_less (&h[i], &h[parent]))
        break;
      e = h[i];
      h[i] = h[parent];
      h[parent] = e;
      i = parent;
    }
}

static MergeEntry
heap_pop (GArray *heap)
{
  MergeEntry *h = (MergeEntry *) heap->data;
  MergeEntry top = h[0];
  guint n = heap->len - 1, i = 0;

  h[0] = h[n];
  g_array_set_size (heap, n);
  for (;;)
    {
      guint l = 2 * i + 1, r = l + 1, m = i;
      MergeEntry t;

      if (l < n && heap_less (&h[l], &h[m]))
        m = l;
      if (r < n && heap_less (&h[r], &h[m]))
        m = r;
      if (m == i)
        break;
      t = h[i];
      h[i] = h[m];
      h[m] = t;
      i = m;
    }
  return top;
}

static void
push_symbol (GArray *syms, gint32 id, guint32 len)
{
  Symbol s = { id, (gint32) syms->len - 1, (gint32) syms->len + 1, len };
  g_array_append_val (syms, s);
}

#define SMALL_WORD 24

/* The same merge order for short words without the heap: ranks of the
 * current adjacent pairs are kept per left symbol and the lowest (leftmost
 * on ties) is merged; only the two pairs around a merge are looked up again. */
static void
bpe_merge_small (const UmTokenizer *tok, Symbol *s, guint n)
{
  guint32 ranks[SMALL_WORD];
  gint32 ids[SMALL_WORD];

  for (guint i = 0; i < n; i++)
    if (i + 1 == n || !merge_table_get (&tok->merges, s[i].id, s[i + 1].id, &ranks[i], &ids[i]))
      ranks[i] = G_MAXUINT32;

  for (;;)
    {
      gint32 best = -1, nx;
      guint32 best_rank = G_MAXUINT32;

      for (gint32 i = 0; i >= 0; i = s[i].next)
        if (ranks[i] < best_rank)
          {
            best_rank = ranks[i];
            best = i;
          }
      if (best < 0)
        return;
      nx = s[best].next;
      s[best].id = ids[best];
      s[best].len += s[nx].len;
      s[best].next = s[nx].next;
      s[nx].len = 0;
      if (s[best].next >= 0)
        s[s[best].next].prev = best;
      if (s[best].next < 0
          || !merge_table_get (&tok->merges, s[best].id, s[s[best].next].id, &ranks[best], &ids[best]))
        ranks[best] = G_MAXUINT32;
      if (s[best].prev >= 0)
        {
          gint32 pv = s[best].prev;
          if (!merge_table_get (&tok->merges, s[pv].id, s[best].id, &ranks[pv], &ids[pv]))
            ranks[pv] = G_MAXUINT32;
        }
    }
}

/* Word::merge_all of tokenizers: lowest rank first, then leftmost. */
static void
bpe_merge (const UmTokenizer *tok, Scratch *sc)
{
  Symbol *s = (Symbol *) sc->syms->data;
  guint n = sc->syms->len;
  guint32 rank;
  gint32 new_id;

  if (n == 0)
    return;
  s[n - 1].next = -1;
  if (n < 2)
    return;
  if (n <= SMALL_WORD && !tok->force_heap)
    {
      bpe_merge_small (tok, s, n);
      return;
    }
  g_array_set_size (sc->heap, 0);
  for (guint i = 0; i + 1 < n; i++)
    if (merge_table_get (&tok->merges, s[i].id, s[i + 1].id, &rank, &new_id))
      heap_push (sc->heap, rank, i, new_id);

  while (sc->heap->len > 0)
    {
      MergeEntry top = heap_pop (sc->heap);
      Symbol *cur = &s[top.pos];
      gint32 next;

      if (cur->len == 0 || cur->next < 0)
        continue;
      next = cur->next;
      /* skip entries made stale by an earlier merge */
      if (!merge_table_get (&tok->merges, cur->id, s[next].id, &rank, &new_id)
          || new_id != top.new_id)
        continue;
      cur->id = top.new_id;
      cur->len += s[next].len;
      cur->next = s[next].next;
      s[next].len = 0;
      if (cur->next >= 0)
        s[cur->next].prev = (gint32) top.pos;
      if (cur->prev >= 0
          && merge_table_get (&tok->merges, s[cur->prev].id, cur->id, &rank, &new_id))
        heap_push (sc->heap, rank, (guint32) cur->prev, new_id);
      if (cur->next >= 0
          && merge_table_get (&tok->merges, cur->id, s[cur->next].id, &rank, &new_id))
        heap_push (sc->heap, rank, top.pos, new_id);
    }
}

/* The model's view of one "character" of a word that is not in the vocab:
 * byte fallback, else the unknown token (fused or not), else dropped. */
static void
unknown_char (const UmTokenizer *tok, Scratch *sc, const guint8 *c, gsize len,
              gint32 *pending_unk, guint32 *pending_len)
{
  if (tok->byte_fallback)
    {
      gint32 ids[8];
      gboolean all = len <= G_N_ELEMENTS (ids);

      for (gsize k = 0; all && k < len; k++)
        {
          char code[8];
          g_snprintf (code, sizeof code, "<0x%02X>", c[k]);
          ids[k] = vocab_lookup (tok, code);
          all = ids[k] >= 0;
        }
      if (all)
        {
          for (gsize k = 0; k < len; k++)
            push_symbol (sc->syms, ids[k], 1);
          return;
        }
    }
  if (tok->unk_id < 0)
    return;
  if (*pending_unk >= 0 && tok->fuse_unk)
    {
      *pending_len += (guint32) len;
      return;
    }
  if (*pending_unk >= 0)
    push_symbol (sc->syms, *pending_unk, *pending_len);
  *pending_unk = tok->unk_id;
  *pending_len = (guint32) len;
}

static void
bpe_word (const UmTokenizer *tok, Scratch *sc, const guint8 *w, gsize n, GArray *out)
{
  gint32 pending_unk = -1;
  guint32 pending_len = 0;
  Symbol *s;

  if (n == 0)
    return;
  if (tok->ignore_merges || !tok->byte_level)
    {
      g_string_truncate (sc->word, 0);
      if (tok->byte_level)
        for (gsize i = 0; i < n; i++)
          g_string_append_len (sc->word, byte_utf8[w[i]], byte_utf8_len[w[i]]);
      else
        g_string_append_len (sc->word, (const char *) w, n);
    }
  if (tok->ignore_merges)
    {
      gint32 id = vocab_get (tok, sc->word->str, sc->word->len);
      if (id >= 0)
        {
          g_array_append_val (out, id);
          return;
        }
    }

  g_array_set_size (sc->syms, 0);
  if (tok->byte_level)
    {
      for (gsize i = 0; i < n; i++)
        {
          gint32 id = tok->byte_ids[w[i]];
          if (id >= 0)
            {
              if (pending_unk >= 0)
                {
                  push_symbol (sc->syms, pending_unk, pending_len);
                  pending_unk = -1;
                }
              push_symbol (sc->syms, id, 1);
            }
          else
            unknown_char (tok, sc, (const guint8 *) byte_utf8[w[i]], byte_utf8_len[w[i]],
                          &pending_unk, &pending_len);
        }
    }
  else
    {
      const char *p = sc->word->str, *end = sc->word->str + sc->word->len;
      while (p < end)
        {
          const char *next = g_utf8_next_char (p);
          gint32 id;

          id = vocab_get (tok, p, next - p);
          if (id >= 0)
            {
              if (pending_unk >= 0)
                {
                  push_symbol (sc->syms, pending_unk, pending_len);
                  pending_unk = -1;
                }
              push_symbol (sc->syms, id, (guint32) (next - p));
            }
          else
            unknown_char (tok, sc, (const guint8 *) p, next - p, &pending_unk, &pending_len);
          p = next;
        }
    }
  if (pending_unk >= 0)
    push_symbol (sc->syms, pending_unk, pending_len);
  if (sc->syms->len == 0)
    return;
  /* symbols were linked to their array neighbours as they were pushed */
  ((Symbol *) sc->syms->data)[0].prev = -1;
  bpe_merge (tok, sc);
  s = (Symbol *) sc->syms->data;
  for (gint32 i = 0; i >= 0; i = s[i].next)
    g_array_append_val (out, s[i].id);
}

static void
push_span (GArray *spans, gsize off, gsize len)
{
  Span sp = { off, len };
  if (len > 0)   /* tokenizers drops empty splits */
    g_array_append_val (spans, sp);
}

/* NormalizedString::split with a regex Pattern and a SplitDelimiterBehavior;
 * appends the non-empty pieces of @in (offsets into sc->buf) to @out. */
static gboolean
regex_split (const PreStep *st, Scratch *sc, Span in, GArray *out, GError **error)
{
  const char *text = sc->buf->str + in.off;
  g_autoptr(GMatchInfo) mi = NULL;
  g_autoptr(GError) local = NULL;
  gsize prev = 0;
  GArray *parts = sc->parts;   /* Span, with off's top bit as the is-match flag */
  const gsize MATCH = (gsize) 1 << (sizeof (gsize) * 8 - 1);
  gboolean prev_match = FALSE;

  g_array_set_size (parts, 0);
  g_regex_match_full (st->regex, text, (gssize) in.len, 0, 0, &mi, &local);
  while (local == NULL && g_match_info_matches (mi))
    {
      gint ms, me;
      g_match_info_fetch_pos (mi, 0, &ms, &me);
      if ((gsize) ms != prev)
        {
          Span sp = { prev, ms - prev };
          g_array_append_val (parts, sp);
        }
      {
        Span sp = { (gsize) ms | MATCH, me - ms };
        g_array_append_val (parts, sp);
      }
      prev = me;
      g_match_info_next (mi, &local);
    }
  if (local)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FAILED, "pre-tokenizer regex failed: %s",
                   local->message);
      return FALSE;
    }
  if (prev != in.len)
    {
      Span sp = { prev, in.len - prev };
      g_array_append_val (parts, sp);
    }

  /* now the delimiter behaviour, as in tokenizers' normalizer.rs; empty
   * pieces are dropped only at the end, as PreTokenizedString::split does */
  {
    Span *p = (Span *) parts->data;
    guint np = parts->len;
    guint first_out = out->len;

    for (guint i = 0; i < np; i++)
      {
        gboolean is_match = ((p[i].off & MATCH) != 0) != (st->invert != FALSE);
        gsize off = (p[i].off & ~MATCH) + in.off, len = p[i].len;
        Span *last = out->len > first_out ? &g_array_index (out, Span, out->len - 1) : NULL;

        Span sp = { off, len };

        switch (st->behavior)
          {
          case SPLIT_ISOLATED:
            g_array_append_val (out, sp);
            break;
          case SPLIT_REMOVED:
            if (!is_match)
              g_array_append_val (out, sp);
            break;
          case SPLIT_MERGED_WITH_PREVIOUS:
            if (is_match && !prev_match && last)
              last->len = off + len - last->off;
            else
              g_array_append_val (out, sp);
            break;
          case SPLIT_CONTIGUOUS:
            if (is_match == prev_match && last)
              last->len = off + len - last->off;
            else
              g_array_append_val (out, sp);
            break;
          case SPLIT_MERGED_WITH_NEXT:
            /* handled below, walking backwards */
            break;
          default:
            g_assert_not_reached ();
          }
        prev_match = is_match;
      }
    if (st->behavior == SPLIT_MERGED_WITH_NEXT)
      {
        /* a match is glued to the piece after it (unless that is a match too) */
        gboolean have = FALSE;
        gboolean next_match = FALSE;

        /* walk backwards building reversed pieces, then reverse in place */
        for (guint i = np; i-- > 0;)
          {
            gboolean is_match = ((p[i].off & MATCH) != 0) != (st->invert != FALSE);
            gsize off = (p[i].off & ~MATCH) + in.off, len = p[i].len;

            if (is_match && !next_match && have)
              {
                Span *cur = &g_array_index (out, Span, out->len - 1);
                cur->len = cur->off + cur->len - off;
                cur->off = off;
              }
            else
              {
                Span sp = { off, len };
                g_array_append_val (out, sp);
                have = TRUE;
              }
            next_match = is_match;
          }
        /* back to text order */
        {
          guint n = out->len - first_out;
          Span *o = (Span *) out->data;
          for (guint i = 0; i < n / 2; i++)
            {
              Span t = o[first_out + i];
              o[first_out + i] = o[out->len - 1 - i];
              o[out->len - 1 - i] = t;
            }
        }
      }
    {
      Span *o = (Span *) out->data;
      guint w = first_out;
      for (guint i = first_out; i < out->len; i++)
        if (o[i].len > 0)
          o[w++] = o[i];
      g_array_set_size (out, w);
    }
  }
  return TRUE;
}

/* Pre-tokenizes one piece that holds no added token and runs BPE on each word. */
static gboolean
encode_plain (const UmTokenizer *tok, Scratch *sc, const char *s, gsize n, GArray *out,
              GError **error)
{
  GArray *cur, *next;

  if (n == 0)
    return TRUE;
  /* Room for the text and a prefix-space copy of every piece, all zeroed:
   * PCRE2's JIT scans ahead in aligned blocks past the subject, and bytes it
   * reads must be initialized (valgrind) and the buffer must not move. */
  if (sc->buf->allocated_len < 3 * n + 64)
    {
      g_string_set_size (sc->buf, 3 * n + 64);
      memset (sc->buf->str, 0, sc->buf->allocated_len);
    }
  g_string_truncate (sc->buf, 0);
  g_string_append_len (sc->buf, s, n);
  g_array_set_size (sc->spans, 0);
  push_span (sc->spans, 0, n);
  cur = sc->spans;
  next = sc->spans2;

  for (guint k = 0; k < tok->steps->len; k++)
    {
      const PreStep *st = &g_array_index (tok->steps, PreStep, k);

      g_array_set_size (next, 0);
      for (guint i = 0; i < cur->len; i++)
        {
          Span sp = g_array_index (cur, Span, i);

          if (st->kind == STEP_BYTE_LEVEL && st->add_prefix_space && sc->buf->str[sp.off] != ' ')
            {
              /* prepend a space: copy the piece after a space at the end of buf */
              gsize noff = sc->buf->len;
              g_string_set_size (sc->buf, noff + 1 + sp.len);
              sc->buf->str[noff] = ' ';
              memmove (sc->buf->str + noff + 1, sc->buf->str + sp.off, sp.len);
              sp.off = noff;
              sp.len += 1;
            }
          if (st->regex)
            {
              if (!regex_split (st, sc, sp, next, error))
                return FALSE;
            }
          else
            push_span (next, sp.off, sp.len);
        }
      {
        GArray *t = cur;
        cur = next;
        next = t;
      }
    }

  for (guint i = 0; i < cur->len; i++)
    {
      Span sp = g_array_index (cur, Span, i);
      bpe_word (tok, sc, (const guint8 *) sc->buf->str + sp.off, sp.len, out);
    }
  return TRUE;
}

/* AddedVocabulary::find_matches + split_with_indices for one matcher;
 * @pass 0 looks for non-normalized added tokens, pass 1 for normalized ones. */
static gboolean
encode_segment (const UmTokenizer *tok, Scratch *sc, const char *s, gsize n, guint pass,
                GArray *out, GError **error)
{
  const AddedMatcher *m = pass == 0 ? &tok->match_raw : &tok->match_norm;
  const AddedToken *tokens = (const AddedToken *) tok->added->data;
  gsize pos = 0, start_offset = 0;
  gboolean any = pass == 0 ? tok->added->len > 0 : tok->has_norm;

  if (n == 0)
    return TRUE;
  if (!any)
    return pass == 0 ? encode_segment (tok, sc, s, n, 1, out, error)
                     : encode_plain (tok, sc, s, n, out, error);

  while (pos < n)
    {
      const AddedToken *t = NULL;
      gsize ms = 0, me, start, stop;

      /* leftmost, then longest */
      for (gsize p = pos; p < n && t == NULL; p++)
        {
          guint8 b = (guint8) s[p];
          for (guint j = m->start[b]; j < m->start[b + 1]; j++)
            {
              const AddedToken *c = &tokens[m->order[j]];
              if (c->len <= n - p && memcmp (c->content, s + p, c->len) == 0)
                {
                  t = c;
                  ms = p;
                  break;
                }
            }
        }
      if (t == NULL)
        break;
      me = ms + t->len;
      pos = me;
      if (t->single_word)
        {
          gboolean start_ok = ms == 0
                              || !is_word_char (g_utf8_get_char (g_utf8_prev_char (s + ms)));
          gboolean stop_ok = me == n || !is_word_char (g_utf8_get_char (s + me));
          if (!start_ok || !stop_ok)
            continue;
        }
      start = ms;
      stop = me;
      if (t->lstrip)
        {
          gsize ws = ms;
          while (ws > 0)
            {
              const char *pc = g_utf8_prev_char (s + ws);
              if (!is_white_space (g_utf8_get_char (pc)))
                break;
              ws = pc - s;
            }
          start = MAX (ws, start_offset);
        }
      if (t->rstrip)
        while (stop < n && is_white_space (g_utf8_get_char (s + stop)))
          stop = g_utf8_next_char (s + stop) - s;
      if (start_offset < start)
        {
          gboolean ok = pass == 0
                        ? encode_segment (tok, sc, s + start_offset, start - start_offset, 1, out, error)
                        : encode_plain (tok, sc, s + start_offset, start - start_offset, out, error);
          if (!ok)
            return FALSE;
        }
      g_array_append_val (out, t->id);
      start_offset = stop;
    }
  if (start_offset < n)
    return pass == 0 ? encode_segment (tok, sc, s + start_offset, n - start_offset, 1, out, error)
                     : encode_plain (tok, sc, s + start_offset, n - start_offset, out, error);
  return TRUE;
}

gboolean
um_tokenizer_encode (UmTokenizer *tok,
                     const char  *text,
                     gssize       len,
                     GArray      *out_ids,
                     GError     **error)
{
  Scratch sc;
  gsize n, bad = 0;
  guint first = 0;
  gboolean ok;

  g_return_val_if_fail (tok != NULL, FALSE);
  g_return_val_if_fail (out_ids != NULL, FALSE);
  g_return_val_if_fail (g_array_get_element_size (out_ids) == sizeof (gint32), FALSE);

  if (text == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "encode: text is NULL");
      return FALSE;
    }
  n = len < 0 ? strlen (text) : (gsize) len;
  if (!utf8_valid ((const guint8 *) text, n, &bad))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "encode: text is not valid UTF-8 (byte %" G_GSIZE_FORMAT ")", bad);
      return FALSE;
    }
  first = out_ids->len;
  scratch_init (&sc);
  ok = encode_segment (tok, &sc, text, n, 0, out_ids, error);
  scratch_clear (&sc);
  if (!ok)
    g_array_set_size (out_ids, first);
  return ok;
}

/* ---- decoding and lookups ------------------------------------------------------- */

char *
um_tokenizer_decode (UmTokenizer  *tok,
                     const gint32 *ids,
                     gsize         n_ids,
                     gboolean      skip_special,
                     GError      **error)
{
  g_autoptr(GByteArray) bytes = g_byte_array_new ();
  guint emitted = 0;

  g_return_val_if_fail (tok != NULL, NULL);

  for (gsize i = 0; i < n_ids; i++)
    {
      gint32 id = ids[i];
      const char *t;

      if (id < 0 || (guint) id >= tok->n_ids || tok->id_tokens[id] == NULL)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                       "decode: token id %d (position %" G_GSIZE_FORMAT ") is not in the "
                       "vocabulary of %s (size %u)", id, i, tok->source, tok->n_ids);
          return NULL;
        }
      if (skip_special && (tok->id_flags[id] & ID_SPECIAL))
        continue;
      t = tok->id_tokens[id];
      if (tok->decode_byte_level)
        {
          /* every character must be a byte-level one, else the token's own
           * UTF-8 is used (tokenizers' ByteLevel::decode_chain) */
          guint mark = bytes->len;
          const char *p = t;
          while (*p)
            {
              gunichar c = g_utf8_get_char (p);
              if (c >= BYTE_CP_LIMIT || cp_byte[c] < 0)
                break;
              {
                guint8 b = (guint8) cp_byte[c];
                g_byte_array_append (bytes, &b, 1);
              }
              p = g_utf8_next_char (p);
            }
          if (*p)
            {
              g_byte_array_set_size (bytes, mark);
              g_byte_array_append (bytes, (const guint8 *) t, strlen (t));
            }
        }
      else
        {
          if (emitted > 0)
            g_byte_array_append (bytes, (const guint8 *) " ", 1);
          g_byte_array_append (bytes, (const guint8 *) t, strlen (t));
        }
      emitted++;
    }
  return utf8_lossy (bytes->data, bytes->len);
}

gint32
um_tokenizer_token_to_id (UmTokenizer *tok,
                          const char  *token)
{
  gpointer a;

  g_return_val_if_fail (tok != NULL, -1);
  if (token == NULL)
    return -1;
  a = g_hash_table_lookup (tok->added_vocab, token);
  if (a)
    return g_array_index (tok->added, AddedToken, GPOINTER_TO_UINT (a) - 1).id;
  return vocab_lookup (tok, token);
}

const char *
um_tokenizer_id_to_token (UmTokenizer *tok,
                          gint32       id)
{
  g_return_val_if_fail (tok != NULL, NULL);
  if (id < 0 || (guint) id >= tok->n_ids)
    return NULL;
  return tok->id_tokens[id];
}

gboolean
um_tokenizer_is_special (UmTokenizer *tok,
                         gint32       id)
{
  g_return_val_if_fail (tok != NULL, FALSE);
  return id >= 0 && (guint) id < tok->n_ids && (tok->id_flags[id] & ID_SPECIAL);
}

gboolean
um_tokenizer_is_added (UmTokenizer *tok,
                       gint32       id)
{
  g_return_val_if_fail (tok != NULL, FALSE);
  return id >= 0 && (guint) id < tok->n_ids && (tok->id_flags[id] & ID_ADDED);
}

guint
um_tokenizer_n_merges (UmTokenizer *tok)
{
  g_return_val_if_fail (tok != NULL, 0);
  return tok->merge_list->len;
}

const char *
um_tokenizer_get_merge (UmTokenizer *tok,
                        guint        rank)
{
  const char *text;

  g_return_val_if_fail (tok != NULL, NULL);
  if (rank >= tok->merge_list->len)
    return NULL;
  /* built once, for all merges: only GGUF writing asks for them */
  g_mutex_lock (&tok->merge_text_lock);
  if (tok->merge_text == NULL)
    {
      g_autoptr(GString) buf = g_string_new (NULL);
      char **texts = g_new (char *, tok->merge_list->len);

      for (guint r = 0; r < tok->merge_list->len; r++)
        {
          const char **pair = &g_array_index (tok->merge_list, const char *, 2 * r);
          g_string_truncate (buf, 0);
          g_string_append (buf, pair[0]);
          g_string_append_c (buf, ' ');
          g_string_append (buf, pair[1]);
          texts[r] = g_string_chunk_insert_len (tok->strings, buf->str, buf->len);
        }
      tok->merge_text = texts;
    }
  text = tok->merge_text[rank];
  g_mutex_unlock (&tok->merge_text_lock);
  return text;
}

void
um_tokenizer_set_force_heap (UmTokenizer *tok,
                             gboolean     force)
{
  g_return_if_fail (tok != NULL);
  tok->force_heap = force != FALSE;
}

guint
um_tokenizer_vocab_size (UmTokenizer *tok)
{
  g_return_val_if_fail (tok != NULL, 0);
  return tok->n_ids;
}

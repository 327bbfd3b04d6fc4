/* um-tokenizer.c — byte-level BPE that gives the ids of Hugging Face `tokenizers`.
 *
 * Pipeline (as in tokenizers' TokenizerImpl::encode without post-processing):
 *   1. added tokens that are not "normalized" are split out of the raw text
 *      (Aho-Corasick LeftmostLongest semantics, single_word/lstrip/rstrip);
 *   2. each remaining piece is normalized (the only normalizer is NFC, which
 *      RND1's tokenizer.json and the slow Qwen2/Dream tokenizers apply), then
 *      "normalized" added tokens are split out of it the same way;
 *   3. the pre-tokenizer chain (Split with a regex or a string, ByteLevel) cuts
 *      each remaining piece into words;
 *   4. each word goes through BPE with integer ids: pair -> (rank, merged id)
 *      in an open-addressing table, merges applied lowest rank first, leftmost
 *      first on ties; long words use a binary heap so they stay O(n log n).
 *
 * The split regex is written for Oniguruma (what `tokenizers` uses). It runs
 * here through GRegex (PCRE2, UTF + UCP); the escapes whose meaning differs
 * (\s, \S, \w, \W, \h, \H, '.') are rewritten to explicit classes first.
 *
 * This file holds the byte tables, the merge and vocabulary tables, the
 * construction helpers, the GGUF constructor, decoding and the lookups;
 * um-tokenizer-json.c reads tokenizer.json, um-tokenizer-slow.c the slow
 * vocab.json + merges.txt files and um-tokenizer-encode.c encodes.
 */
#include "um-tokenizer.h"
#include "um-tokenizer-private.h"

#include <string.h>

#include "um-error.h"

/* The split regex of the LLaDA tokenizer.json, used when a GGUF file gives
 * none. It is also Qwen2's (Dream, RND1: llama.cpp's "qwen2"). */
static const char default_pre_regex[] =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
  " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
#define qwen2_pre_regex default_pre_regex

/* The Ling/Bailing regex of LLaDA-MoE's and LLaDA 2's tokenizer.json, as
 * written there: PCRE2 has Oniguruma's possessive quantifiers (llama.cpp makes
 * them greedy, which splits the same: backtracking into them never lets the
 * rest match otherwise). Note \s*[\r\n] takes a single line break. */
static const char ling_pre_regex[] =
  "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}|"
  " ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";

/* Oniguruma's \s (and Rust's char::is_whitespace): the White_Space property. */
#define WS_CLASS_BODY \
  "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
/* Oniguruma's Unicode \w: letters, marks, decimal digits, connector punctuation. */
#define WORD_CLASS_BODY "\\p{L}\\p{M}\\p{Nd}\\p{Pc}"

/* ---- GPT-2 bytes_to_unicode ------------------------------------------------ */

#define BYTE_CP_LIMIT 324          /* every byte-level character is below U+0144 */

static gunichar byte_cp[256];
static gint16   cp_byte[BYTE_CP_LIMIT];
char            um_tok_byte_utf8[256][3];
guint8          um_tok_byte_utf8_len[256];

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
          um_tok_byte_utf8_len[b] = (guint8) g_unichar_to_utf8 (byte_cp[b], um_tok_byte_utf8[b]);
        }
      g_once_init_leave (&done, 1);
    }
}

/* ---- small helpers ---------------------------------------------------------- */

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

/* ---- merge table ---------------------------------------------------------------- */

/* The lookup, um_tok_merge_table_get(), is inline in um-tokenizer-private.h. */

void
um_tok_merge_table_init (MergeTable *t, guint expected)
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

/* Doubles the table (a caller's expected count may be an estimate). */
static void
merge_table_grow (MergeTable *t)
{
  MergeSlot *old = t->slots;
  const guint32 old_cap = t->mask + 1;

  t->slots = g_new (MergeSlot, (gsize) old_cap * 2);
  t->mask = old_cap * 2 - 1;
  for (guint32 i = 0; i <= t->mask; i++)
    t->slots[i].key = EMPTY_KEY;
  for (guint32 i = 0; i < old_cap; i++)
    if (old[i].key != EMPTY_KEY)
      {
        guint32 j = um_tok_merge_slot (old[i].key, t->mask);
        while (t->slots[j].key != EMPTY_KEY)
          j = (j + 1) & t->mask;
        t->slots[j] = old[i];
      }
  g_free (old);
}

/* A later merge of the same pair replaces the earlier one, like the HashMap
 * that tokenizers collects the merges into. */
static void
merge_table_put (MergeTable *t, gint32 a, gint32 b, guint32 rank, gint32 new_id)
{
  guint64 key = ((guint64) (guint32) a << 32) | (guint32) b;
  guint32 i;

  /* Load factor at most 2/3, as um_tok_merge_table_init () sizes it. */
  if ((guint64) (t->n + 1) * 3 > (guint64) (t->mask + 1) * 2)
    merge_table_grow (t);
  i = um_tok_merge_slot (key, t->mask);

  while (t->slots[i].key != EMPTY_KEY && t->slots[i].key != key)
    i = (i + 1) & t->mask;
  if (t->slots[i].key == EMPTY_KEY)
    t->n++;
  t->slots[i].key = key;
  t->slots[i].rank = rank;
  t->slots[i].new_id = new_id;
}

/* ---- vocabulary table ------------------------------------------------------------ */

/* Hashing and the lookups are inline in um-tokenizer-private.h. */

void
um_tok_vocab_table_init (VocabTable *t, guint expected)
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

/* ---- construction --------------------------------------------------------------- */

UmTokenizer *
um_tok_alloc (const char *source)
{
  UmTokenizer *tok = g_new0 (UmTokenizer, 1);

  byte_tables_init ();
  tok->source = g_strdup (source);
  tok->strings = g_string_chunk_new (1 << 16);
  um_tok_vocab_table_init (&tok->vocab, 1024);
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

GRegex *
um_tok_compile_regex (const char *pattern, gboolean literal, const char *src, const char *field,
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

void
um_tok_add_step (UmTokenizer *tok, StepKind kind, GRegex *regex, SplitBehavior behavior,
                 gboolean invert, gboolean add_prefix_space)
{
  PreStep st = { kind, regex, behavior, invert, add_prefix_space };
  g_array_append_val (tok->steps, st);
  if (kind == STEP_BYTE_LEVEL)
    tok->byte_level = TRUE;
}

/* Adds a model token; a repeated string keeps the last id. */
void
um_tok_vocab_insert (UmTokenizer *tok, const char *token, gsize len, gint32 id)
{
  VocabTable *t = &tok->vocab;
  guint32 h = um_tok_hash_bytes (HASH_SEED, token, len);
  VocabEntry *e = &t->e[um_tok_vocab_slot (t, h, token, len, NULL, 0)];

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
void
um_tok_build_id_tables (UmTokenizer *tok, guint n_ids)
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

void
um_tok_finish_byte_ids (UmTokenizer *tok)
{
  for (guint b = 0; b < 256; b++)
    tok->byte_ids[b] = um_tok_vocab_get (tok, um_tok_byte_utf8[b], um_tok_byte_utf8_len[b]);
}

static gint
cmp_added_order (gconstpointer a, gconstpointer b, gpointer user_data)
{
  const AddedToken *tokens = user_data;
  const AddedToken *x = &tokens[*(const guint *) a];
  const AddedToken *y = &tokens[*(const guint *) b];
  guint8 fx = (guint8) x->match[0], fy = (guint8) y->match[0];

  if (fx != fy)
    return fx < fy ? -1 : 1;
  if (x->match_len != y->match_len)
    return x->match_len > y->match_len ? -1 : 1;   /* longest first */
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
    m->start[(guint8) tokens[m->order[i]].match[0] + 1]++;
  for (guint b = 0; b < 256; b++)
    m->start[b + 1] += m->start[b];
}

/* Finishes the added tokens once vocab, merges, added tokens and the
 * normalizer are in. */
void
um_tok_finish_added (UmTokenizer *tok)
{
  AddedToken *tokens = (AddedToken *) tok->added->data;

  for (guint i = 0; i < tok->added->len; i++)
    {
      gint32 id = tokens[i].id;

      /* tokenizers matches normalized added tokens in normalized text, so
       * it normalizes their content too (AddedVocabulary::refresh_added_tokens) */
      tokens[i].match = tokens[i].content;
      tokens[i].match_len = tokens[i].len;
      if (tok->nfc && tokens[i].normalized)
        {
          gsize n;
          g_autofree char *nf = um_tok_nfc (tokens[i].content, tokens[i].len, &n);
          if (nf != NULL && n > 0)
            {
              tokens[i].match = g_string_chunk_insert_len (tok->strings, nf, n);
              tokens[i].match_len = n;
            }
        }
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
gboolean
um_tok_add_merge (UmTokenizer *tok, const char *a, gsize la, const char *b, gsize lb,
                  guint rank, const char *src, const char *field, guint index, GError **error)
{
  const VocabEntry *ea = um_tok_vocab_entry2 (tok, a, la, NULL, 0);
  const VocabEntry *eb = um_tok_vocab_entry2 (tok, b, lb, NULL, 0);
  gint32 ia = ea ? ea->id : -1;
  gint32 ib = eb ? eb->id : -1;
  gint32 inew = um_tok_vocab_get2 (tok, a, la, b, lb);
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

/* Adds or replaces an added token with its own id: a repeated content keeps
 * the last one, like llama.cpp's token_to_id map and transformers' slow
 * added_tokens_encoder. */
void
um_tok_put_added (UmTokenizer *tok, const AddedToken *t)
{
  gpointer old = g_hash_table_lookup (tok->added_vocab, t->content);

  if (old)
    g_array_index (tok->added, AddedToken, GPOINTER_TO_UINT (old) - 1) = *t;
  else
    {
      g_array_append_val (tok->added, *t);
      g_hash_table_insert (tok->added_vocab, (gpointer) t->content,
                           GUINT_TO_POINTER (tok->added->len));
    }
}

/* NFC of valid UTF-8 @s: NULL when @s is already NFC for certain (ASCII),
 * else a new string of *@out_len bytes. g_utf8_normalize stops at NUL, so
 * the pieces between NULs are composed one by one (NUL never composes). */
char *
um_tok_nfc (const char *s, gsize n, gsize *out_len)
{
  GString *out;
  const char *p = s, *end = s + n;
  gsize i = 0;

  while (i < n && (guchar) s[i] < 0x80)
    i++;
  if (i == n)
    return NULL;
  out = g_string_sized_new (n + 16);
  while (p < end)
    {
      const char *z = memchr (p, '\0', end - p);
      gsize len = z ? (gsize) (z - p) : (gsize) (end - p);

      if (len > 0)
        {
          g_autofree char *nf = g_utf8_normalize (p, (gssize) len, G_NORMALIZE_NFC);
          if (nf != NULL)
            g_string_append (out, nf);
          else
            g_string_append_len (out, p, len);   /* not reached: the text was validated */
        }
      if (z == NULL)
        break;
      g_string_append_len (out, "", 1);
      p = z + 1;
    }
  *out_len = out->len;
  return g_string_free (out, FALSE);
}

/* Splits a "a b" merge string; tokenizers requires exactly one space. */
gboolean
um_tok_split_merge_string (const char *s, gsize *la, const char **b)
{
  const char *sp = strchr (s, ' ');

  if (sp == NULL || strchr (sp + 1, ' ') != NULL)
    return FALSE;
  *la = sp - s;
  *b = sp + 1;
  return TRUE;
}

/* ---- GGUF vocabulary ------------------------------------------------------------ */

static UmTokenizer *
tokenizer_from_vocab (const char * const *tokens,
                      guint               n_tokens,
                      const char * const *merges,
                      guint               n_merges,
                      const gint32       *token_types,
                      const char         *pre_regex,
                      gboolean            nfc,
                      GError            **error)
{
  const char *src = "GGUF tokenizer";
  g_autoptr(UmTokenizer) tok = um_tok_alloc (src);
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
  tok->nfc = nfc;

  g_free (tok->vocab.e);
  um_tok_vocab_table_init (&tok->vocab, n_tokens);
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
      um_tok_vocab_insert (tok, t, strlen (t), (gint32) i);
    }

  um_tok_merge_table_init (&tok->merges, n_merges);
  for (guint i = 0; i < n_merges; i++)
    {
      const char *a = merges[i], *b;
      gsize la;

      if (a == NULL || !um_tok_split_merge_string (a, &la, &b))
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                       "%s: tokenizer.ggml.merges[%u] is not two tokens separated by one space",
                       src, i);
          return NULL;
        }
      if (!um_tok_add_merge (tok, a, la, b, strlen (b), i, src, "tokenizer.ggml.merges", i, error))
        return NULL;
    }

  um_tok_build_id_tables (tok, n_tokens);
  for (guint i = 0; token_types && i < n_tokens; i++)
    {
      if (token_types[i] == UM_TOKEN_TYPE_CONTROL || token_types[i] == UM_TOKEN_TYPE_USER_DEFINED)
        {
          AddedToken t = { 0 };

          if (tokens[i][0] == '\0')
            continue;
          t.content = g_string_chunk_insert (tok->strings, tokens[i]);
          t.len = strlen (tokens[i]);
          t.id = (gint32) i;
          /* USER_DEFINED (RND1's <think>) is split out but is text, not special */
          t.special = token_types[i] == UM_TOKEN_TYPE_CONTROL;
          um_tok_put_added (tok, &t);
        }
    }
  um_tok_finish_added (tok);
  for (guint i = 0; i < n_tokens; i++)
    {
      gint32 type = token_types ? token_types[i] : UM_TOKEN_TYPE_NORMAL;

      /* ids whose string is repeated later still decode to their own text */
      if (tok->id_tokens[i] == NULL)
        {
          tok->id_tokens[i] = g_string_chunk_insert (tok->strings, tokens[i]);
          if (type == UM_TOKEN_TYPE_CONTROL)
            tok->id_flags[i] |= ID_ADDED | ID_SPECIAL;
          else if (type == UM_TOKEN_TYPE_USER_DEFINED)
            tok->id_flags[i] |= ID_ADDED;
          else
            tok->id_flags[i] |= ID_MODEL;
        }
      /* the converters' [PAD…] rows past the tokenizer (RND1's mask among
       * them): llama.cpp decodes them to nothing, tokenizers has no such id */
      if (type == UM_TOKEN_TYPE_UNUSED)
        tok->id_flags[i] |= ID_UNUSED | ID_SPECIAL;
    }

  re = um_tok_compile_regex (pre_regex ? pre_regex : default_pre_regex, FALSE, src,
                             "pre-tokenizer regex", error);
  if (re == NULL)
    return NULL;
  um_tok_add_step (tok, STEP_SPLIT, re, SPLIT_ISOLATED, FALSE, FALSE);
  um_tok_add_step (tok, STEP_BYTE_LEVEL, NULL, SPLIT_ISOLATED, FALSE, FALSE);
  tok->decode_byte_level = TRUE;
  um_tok_finish_byte_ids (tok);
  return g_steal_pointer (&tok);
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
  return tokenizer_from_vocab (tokens, n_tokens, merges, n_merges, token_types, pre_regex, FALSE,
                               error);
}

/* tokenizer.ggml.pre names (llama.cpp's llama-vocab.cpp) whose split we know. */
static const struct {
  const char *name;
  const char *regex;
} gguf_pre_names[] = {
  { "qwen2", qwen2_pre_regex },
  { "deepseek-r1-qwen", qwen2_pre_regex },
  { "llada-moe", ling_pre_regex },
  { "bailingmoe", ling_pre_regex },
  { "bailingmoe2", ling_pre_regex },
};

/* What each family's HF tokenizer does, by general.architecture: its split
 * regex, whether it composes to NFC, the name our GGUF writer gives the
 * split, and whether an unknown tokenizer.ggml.pre is refused. */
static const struct {
  const char *arch;
  const char *regex;
  gboolean    nfc;
  const char *pre;
  gboolean    strict;
} gguf_arch_tokenizers[] = {
  /* tokenizer.ggml.pre was never read for LLaDA: every name keeps its regex */
  { "llada", default_pre_regex, FALSE, "default", FALSE },
  /* Qwen2/Qwen3 tokenizers compose to NFC (RND1's tokenizer.json, Dream's
   * slow DreamTokenizer.prepare_for_tokenization); llama.cpp does not */
  { "dream", qwen2_pre_regex, TRUE, "qwen2", TRUE },
  { "rnd1", qwen2_pre_regex, TRUE, "qwen2", TRUE },
  { "llada-moe", ling_pre_regex, FALSE, "llada-moe", TRUE },
  { "llada2", ling_pre_regex, FALSE, "bailingmoe2", TRUE },
};

UmTokenizer *
um_tokenizer_new_from_gguf_vocab (const char * const *tokens,
                                  guint               n_tokens,
                                  const char * const *merges,
                                  guint               n_merges,
                                  const gint32       *token_types,
                                  const char         *gguf_arch,
                                  const char         *pre,
                                  GError            **error)
{
  const char *regex = default_pre_regex;
  gboolean nfc = FALSE, strict = FALSE;

  for (guint i = 0; gguf_arch && i < G_N_ELEMENTS (gguf_arch_tokenizers); i++)
    if (g_str_equal (gguf_arch, gguf_arch_tokenizers[i].arch))
      {
        regex = gguf_arch_tokenizers[i].regex;
        nfc = gguf_arch_tokenizers[i].nfc;
        strict = gguf_arch_tokenizers[i].strict;
      }
  if (pre != NULL && !g_str_equal (pre, "default"))
    {
      guint i;

      for (i = 0; i < G_N_ELEMENTS (gguf_pre_names); i++)
        if (g_str_equal (pre, gguf_pre_names[i].name))
          break;
      if (i < G_N_ELEMENTS (gguf_pre_names))
        regex = gguf_pre_names[i].regex;
      else if (strict)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                       "GGUF tokenizer: tokenizer.ggml.pre “%s” is not supported for a %s model "
                       "(qwen2, llada-moe, bailingmoe and bailingmoe2 are)", pre, gguf_arch);
          return NULL;
        }
    }
  return tokenizer_from_vocab (tokens, n_tokens, merges, n_merges, token_types, regex, nfc, error);
}

const char *
um_tokenizer_gguf_pre_name (const char *gguf_arch)
{
  for (guint i = 0; gguf_arch && i < G_N_ELEMENTS (gguf_arch_tokenizers); i++)
    if (g_str_equal (gguf_arch, gguf_arch_tokenizers[i].arch))
      return gguf_arch_tokenizers[i].pre;
  return "default";
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
      if ((skip_special && (tok->id_flags[id] & ID_SPECIAL)) || (tok->id_flags[id] & ID_UNUSED))
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
  return um_tok_vocab_lookup (tok, token);
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

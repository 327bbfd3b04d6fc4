/* um-make-tokenizer.c — writes a synthetic tokenizer.json with the shape of LLaDA's.
 *
 *   um-make-tokenizer [--seed N] [--pairs] [--bench] OUT.json
 *
 * The vocabulary is learnt, not invented: a Zipf-distributed corpus of
 * pseudo-words (Latin syllables, capitals, accents, Cyrillic, CJK, digits,
 * punctuation) is trained with byte-level BPE until the model vocabulary has
 * 126080 tokens. The merges list is then written the way converted Llama-3 /
 * LLaDA files have it: for every token in id order, every split of it into two
 * vocabulary tokens (about 2.2 merges per token, ~280k in all). LLaDA's 384
 * added tokens (BOS 126080, EOS 126081, mask 126336, headers 126346-126348,
 * the rest reserved) complete the 126464 ids.
 *
 * With --bench the file is then loaded back with um_tokenizer (load time) and
 * used to encode and decode a few MB of text (throughput).
 */
#include <glib.h>
#include <glib/gstdio.h>
#include <stdio.h>
#include <string.h>

#include "um-tokenizer.h"

#define N_MODEL_TOKENS 126080
#define N_TOTAL_TOKENS 126464

/* ---- corpus ------------------------------------------------------------------- */

static const char *consonants[] = { "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p",
                                    "r", "s", "t", "v", "w", "z", "ch", "sh", "th", "st", "tr",
                                    "pl", "gr", "br", "qu", "x", "y", "ck" };
static const char *vowels[] = { "a", "e", "i", "o", "u", "y", "ai", "ea", "ou", "io", "ee", "oo",
                                "é", "è", "ü", "ö", "à", "ñ" };
static const char *cyrillic[] = { "а", "б", "в", "г", "д", "е", "ж", "з", "и", "к", "л", "м",
                                  "н", "о", "п", "р", "с", "т", "у", "я" };
static const char *puncts[] = { ".", ",", "!", "?", ";", ":", "\"", "'", "(", ")", "-", "...",
                                "--", "/", "*", "#", "=", "==", "->", "{", "}", "[", "]", "'s",
                                "’", "“", "”", "—", "…", "\n", "\n\n", "  ", "\t" };

static void
make_word (GRand *r, GString *w)
{
  guint kind = g_rand_int_range (r, 0, 100);

  g_string_truncate (w, 0);
  if (kind < 80)
    {
      guint syl = 1 + g_rand_int_range (r, 0, 4);
      for (guint i = 0; i < syl; i++)
        {
          if (i > 0 || g_rand_boolean (r))
            g_string_append (w, consonants[g_rand_int_range (r, 0, G_N_ELEMENTS (consonants))]);
          g_string_append (w, vowels[g_rand_int_range (r, 0, kind < 70 ? 12 : G_N_ELEMENTS (vowels))]);
          if (g_rand_int_range (r, 0, 3) == 0)
            g_string_append (w, consonants[g_rand_int_range (r, 0, G_N_ELEMENTS (consonants))]);
        }
      if (kind < 12)
        w->str[0] = g_ascii_toupper (w->str[0]);
    }
  else if (kind < 88)
    {
      guint n = 2 + g_rand_int_range (r, 0, 6);
      for (guint i = 0; i < n; i++)
        g_string_append (w, cyrillic[g_rand_int_range (r, 0, G_N_ELEMENTS (cyrillic))]);
    }
  else if (kind < 97)
    {
      /* CJK: a few hundred common-looking ideographs, 1-3 per word */
      guint n = 1 + g_rand_int_range (r, 0, 3);
      for (guint i = 0; i < n; i++)
        g_string_append_unichar (w, 0x4E00 + g_rand_int_range (r, 0, 900) * 7);
    }
  else
    {
      guint n = 1 + g_rand_int_range (r, 0, 4);
      for (guint i = 0; i < n; i++)
        g_string_append_c (w, '0' + g_rand_int_range (r, 0, 10));
    }
}

/* ---- BPE training --------------------------------------------------------------- */

typedef struct {
  guint32 *syms;
  guint32  len;
  guint32  stamp;
  gint64   freq;
} Word;

typedef struct {
  guint64 key;
  gint64  count;
  GArray *where;   /* word indices (guint32), possibly stale */
} Pair;

typedef struct {
  gint64  count;
  guint64 key;
} HeapItem;

typedef struct {
  GArray  *pairs;   /* Pair */
  guint32 *slots;   /* index + 1 into pairs, 0 = empty */
  guint32  mask;
} PairTable;

static guint32
slot_of (guint64 key, guint32 mask)
{
  return (guint32) ((key * G_GUINT64_CONSTANT (0x9E3779B97F4A7C15)) >> 32) & mask;
}

static void
pair_table_grow (PairTable *t)
{
  guint32 cap = (t->mask + 1) * 2;
  g_free (t->slots);
  t->slots = g_new0 (guint32, cap);
  t->mask = cap - 1;
  for (guint i = 0; i < t->pairs->len; i++)
    {
      guint32 s = slot_of (g_array_index (t->pairs, Pair, i).key, t->mask);
      while (t->slots[s])
        s = (s + 1) & t->mask;
      t->slots[s] = i + 1;
    }
}

static Pair *
pair_get (PairTable *t, guint32 a, guint32 b, gboolean create)
{
  guint64 key = ((guint64) a << 32) | b;
  guint32 s = slot_of (key, t->mask);

  while (t->slots[s])
    {
      Pair *p = &g_array_index (t->pairs, Pair, t->slots[s] - 1);
      if (p->key == key)
        return p;
      s = (s + 1) & t->mask;
    }
  if (!create)
    return NULL;
  {
    Pair np = { key, 0, g_array_new (FALSE, FALSE, sizeof (guint32)) };
    g_array_append_val (t->pairs, np);
    t->slots[s] = t->pairs->len;
    if (t->pairs->len * 2 > t->mask)
      pair_table_grow (t);
    return &g_array_index (t->pairs, Pair, t->pairs->len - 1);
  }
}

static gboolean
heap_above (const HeapItem *x, const HeapItem *y)
{
  return x->count > y->count || (x->count == y->count && x->key < y->key);
}

static void
heap_push (GArray *h, gint64 count, guint64 key)
{
  HeapItem it = { count, key };
  HeapItem *d;
  guint i;

  g_array_append_val (h, it);
  d = (HeapItem *) h->data;
  for (i = h->len - 1; i > 0 && heap_above (&d[i], &d[(i - 1) / 2]); i = (i - 1) / 2)
    {
      HeapItem t = d[i];
      d[i] = d[(i - 1) / 2];
      d[(i - 1) / 2] = t;
    }
}

static HeapItem
heap_pop (GArray *h)
{
  HeapItem *d = (HeapItem *) h->data;
  HeapItem top = d[0];
  guint n = h->len - 1, i = 0;

  d[0] = d[n];
  g_array_set_size (h, n);
  for (;;)
    {
      guint l = 2 * i + 1, r = l + 1, m = i;
      HeapItem t;
      if (l < n && heap_above (&d[l], &d[m]))
        m = l;
      if (r < n && heap_above (&d[r], &d[m]))
        m = r;
      if (m == i)
        break;
      t = d[i];
      d[i] = d[m];
      d[m] = t;
      i = m;
    }
  return top;
}

typedef struct {
  GByteArray *pool;     /* token bytes */
  GArray     *off;      /* guint32 */
  GArray     *len;      /* guint32 */
} Tokens;

static void
tokens_add (Tokens *t, const guint8 *bytes, guint32 len)
{
  guint32 off = t->pool->len;
  g_byte_array_append (t->pool, bytes, len);
  g_array_append_val (t->off, off);
  g_array_append_val (t->len, len);
}

#define TOK_BYTES(t, i) ((t)->pool->data + g_array_index ((t)->off, guint32, i))
#define TOK_LEN(t, i) g_array_index ((t)->len, guint32, i)

static guint
train (Word *words, guint n_words, Tokens *toks, guint target)
{
  PairTable pt = { g_array_new (FALSE, FALSE, sizeof (Pair)), g_new0 (guint32, 1 << 20),
                   (1 << 20) - 1 };
  g_autoptr(GArray) heap = g_array_new (FALSE, FALSE, sizeof (HeapItem));
  g_autoptr(GArray) touched = g_array_new (FALSE, FALSE, sizeof (guint64));
  guint32 stamp = 0;

  for (guint w = 0; w < n_words; w++)
    for (guint i = 0; i + 1 < words[w].len; i++)
      {
        Pair *p = pair_get (&pt, words[w].syms[i], words[w].syms[i + 1], TRUE);
        p->count += words[w].freq;
        if (p->where->len == 0 || g_array_index (p->where, guint32, p->where->len - 1) != w)
          g_array_append_val (p->where, w);
      }
  for (guint i = 0; i < pt.pairs->len; i++)
    heap_push (heap, g_array_index (pt.pairs, Pair, i).count, g_array_index (pt.pairs, Pair, i).key);

  while (toks->off->len < target && heap->len > 0)
    {
      HeapItem top = heap_pop (heap);
      guint32 a = top.key >> 32, b = (guint32) top.key, z;
      Pair *p = pair_get (&pt, a, b, FALSE);
      GArray *where;

      if (p == NULL || p->count <= 0)
        continue;
      if (p->count != top.count)
        {
          if (p->count < top.count)
            heap_push (heap, p->count, p->key);
          continue;
        }

      /* a new token */
      {
        g_autoptr(GByteArray) nb = g_byte_array_new ();
        g_byte_array_append (nb, TOK_BYTES (toks, a), TOK_LEN (toks, a));
        g_byte_array_append (nb, TOK_BYTES (toks, b), TOK_LEN (toks, b));
        z = toks->off->len;
        tokens_add (toks, nb->data, nb->len);
      }

      where = p->where;
      p->where = g_array_new (FALSE, FALSE, sizeof (guint32));
      stamp++;
      g_array_set_size (touched, 0);
      for (guint k = 0; k < where->len; k++)
        {
          guint32 w = g_array_index (where, guint32, k);
          Word *wd = &words[w];
          guint32 j = 0;
          gboolean has = FALSE;

          if (wd->stamp == stamp)
            continue;
          wd->stamp = stamp;
          for (guint i = 0; i + 1 < wd->len && !has; i++)
            has = wd->syms[i] == a && wd->syms[i + 1] == b;
          if (!has)
            continue;
          for (guint i = 0; i + 1 < wd->len; i++)
            pair_get (&pt, wd->syms[i], wd->syms[i + 1], FALSE)->count -= wd->freq;
          for (guint i = 0; i < wd->len;)
            {
              if (i + 1 < wd->len && wd->syms[i] == a && wd->syms[i + 1] == b)
                {
                  wd->syms[j++] = z;
                  i += 2;
                }
              else
                wd->syms[j++] = wd->syms[i++];
            }
          wd->len = j;
          for (guint i = 0; i + 1 < wd->len; i++)
            {
              Pair *q = pair_get (&pt, wd->syms[i], wd->syms[i + 1], TRUE);
              q->count += wd->freq;
              if (wd->syms[i] == z || wd->syms[i + 1] == z)
                {
                  if (q->where->len == 0 || g_array_index (q->where, guint32, q->where->len - 1) != w)
                    g_array_append_val (q->where, w);
                  g_array_append_val (touched, q->key);
                }
            }
        }
      g_array_unref (where);
      for (guint k = 0; k < touched->len; k++)
        {
          guint64 key = g_array_index (touched, guint64, k);
          Pair *q = pair_get (&pt, key >> 32, (guint32) key, FALSE);
          if (q->count > 0)
            heap_push (heap, q->count, key);
        }
    }

  for (guint i = 0; i < pt.pairs->len; i++)
    g_array_unref (g_array_index (pt.pairs, Pair, i).where);
  g_array_unref (pt.pairs);
  g_free (pt.slots);
  return toks->off->len;
}

/* ---- output --------------------------------------------------------------------- */

static gunichar byte_cp[256];

static void
init_byte_cp (void)
{
  guint n = 0;
  for (guint b = 0; b < 256; b++)
    {
      gboolean printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      byte_cp[b] = printable ? b : 256 + n++;
    }
}

static char *
byte_level (const guint8 *s, guint len)
{
  GString *o = g_string_new (NULL);
  for (guint i = 0; i < len; i++)
    g_string_append_unichar (o, byte_cp[s[i]]);
  return g_string_free (o, FALSE);
}

static void
json_string (GString *out, const char *s)
{
  g_string_append_c (out, '"');
  for (; *s; s++)
    {
      if (*s == '"' || *s == '\\')
        g_string_append_c (out, '\\');
      if ((guchar) *s < 0x20)
        g_string_append_printf (out, "\\u%04x", (guchar) *s);
      else
        g_string_append_c (out, *s);
    }
  g_string_append_c (out, '"');
}

static const char *
added_name (guint id, char *buf, gsize size)
{
  switch (id)
    {
    case 126080: return "<|startoftext|>";
    case 126081: return "<|endoftext|>";
    case 126336: return "<|mdm_mask|>";
    case 126346: return "<|start_header_id|>";
    case 126347: return "<|end_header_id|>";
    case 126348: return "<|eot_id|>";
    default:
      g_snprintf (buf, size, "<|reserved_token_%u|>", id - N_MODEL_TOKENS);
      return buf;
    }
}

static const char pre_regex[] =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
  " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static gint
cmp_pair (gconstpointer x, gconstpointer y)
{
  const guint64 *a = x, *b = y;
  return *a < *b ? -1 : *a > *b;
}

/* ---- benchmark ------------------------------------------------------------------ */

static void
bench (const char *path, GRand *r, GPtrArray *lexicon)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GString) text = g_string_new (NULL);
  g_autoptr(GString) w = g_string_new (NULL);
  gint64 best = G_MAXINT64, t0;
  g_autoptr(GArray) ids = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autofree char *back = NULL;
  double secs;

  for (guint k = 0; k < 5; k++)
    {
      UmTokenizer *tok;
      t0 = g_get_monotonic_time ();
      tok = um_tokenizer_new_from_file (path, &error);
      if (tok == NULL)
        g_error ("%s", error->message);
      best = MIN (best, g_get_monotonic_time () - t0);
      if (k == 0)
        g_print ("load: %.1f ms (first), vocab size %u\n", (g_get_monotonic_time () - t0) / 1000.0,
                 um_tokenizer_vocab_size (tok));
      um_tokenizer_free (tok);
    }
  g_print ("load: %.1f ms (best of 5)\n", best / 1000.0);

  {
    g_autoptr(UmTokenizer) tok = um_tokenizer_new_from_file (path, &error);
    guint n_words = 0;

    /* ~4 MB of running text from the training lexicon, plus fresh words */
    while (text->len < 4 * 1000 * 1000)
      {
        if (g_rand_int_range (r, 0, 10) == 0)
          {
            make_word (r, w);
            g_string_append (text, w->str);
          }
        else
          {
            /* Zipf draw: rank ~ exp(uniform * log N) */
            guint rank = (guint) (g_rand_double (r) * g_rand_double (r) * lexicon->len);
            g_string_append (text, g_ptr_array_index (lexicon, rank));
          }
        n_words++;
        if (g_rand_int_range (r, 0, 8) == 0)
          g_string_append (text, puncts[g_rand_int_range (r, 0, G_N_ELEMENTS (puncts))]);
        if (g_rand_int_range (r, 0, 200) == 0)
          g_string_append (text, "<|eot_id|>");
        g_string_append_c (text, ' ');
      }
    um_tokenizer_encode (tok, text->str, text->len, ids, NULL);   /* warm up */
    g_array_set_size (ids, 0);
    t0 = g_get_monotonic_time ();
    if (!um_tokenizer_encode (tok, text->str, text->len, ids, &error))
      g_error ("%s", error->message);
    secs = (g_get_monotonic_time () - t0) / 1e6;
    g_print ("encode: %.2f MB, %u words -> %u tokens in %.3f s: %.2f MB/s, %.0f tokens/s\n",
             text->len / 1e6, n_words, ids->len, secs, text->len / 1e6 / secs, ids->len / secs);
    t0 = g_get_monotonic_time ();
    back = um_tokenizer_decode (tok, (const gint32 *) ids->data, ids->len, FALSE, &error);
    secs = (g_get_monotonic_time () - t0) / 1e6;
    if (back == NULL || strcmp (back, text->str) != 0)
      g_error ("decode does not give the text back");
    g_print ("decode: %u tokens in %.3f s: %.0f tokens/s (round trip exact)\n", ids->len, secs,
             ids->len / secs);

    /* one 1 MB word: must be n log n, not quadratic */
    g_string_truncate (text, 0);
    while (text->len < 1000 * 1000)
      g_string_append (text, g_ptr_array_index (lexicon, g_rand_int_range (r, 0, 2000)));
    for (gsize i = 0; i < text->len; i++)
      if (!g_ascii_isalpha (text->str[i]) && (guchar) text->str[i] < 0x80)
        text->str[i] = 'a';
    g_array_set_size (ids, 0);
    t0 = g_get_monotonic_time ();
    um_tokenizer_encode (tok, text->str, text->len, ids, NULL);
    secs = (g_get_monotonic_time () - t0) / 1e6;
    g_print ("one %.2f MB word -> %u tokens in %.3f s\n", text->len / 1e6, ids->len, secs);
  }
}

/* ---- main --------------------------------------------------------------------------- */

int
main (int argc, char **argv)
{
  gint64 seed = 20260131;
  gboolean pairs = FALSE, do_bench = FALSE;
  g_autoptr(GOptionContext) ctx = g_option_context_new ("OUT.json");
  GOptionEntry entries[] = {
    { "seed", 0, 0, G_OPTION_ARG_INT64, &seed, "Random seed", "N" },
    { "pairs", 0, 0, G_OPTION_ARG_NONE, &pairs, "Write merges as [\"a\", \"b\"] pairs", NULL },
    { "bench", 0, 0, G_OPTION_ARG_NONE, &do_bench, "Load the file back and time encode/decode", NULL },
    { NULL }
  };
  g_autoptr(GError) error = NULL;
  g_autoptr(GRand) r = NULL;
  g_autoptr(GHashTable) lex = g_hash_table_new (g_str_hash, g_str_equal);
  g_autoptr(GPtrArray) lexicon = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GString) w = g_string_new (NULL);
  Tokens toks = { g_byte_array_new (), g_array_new (FALSE, FALSE, sizeof (guint32)),
                  g_array_new (FALSE, FALSE, sizeof (guint32)) };
  Word *words;
  guint n_words, n_tok;
  gint64 t0 = g_get_monotonic_time ();
  g_autoptr(GPtrArray) mapped = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GHashTable) by_str = g_hash_table_new (g_str_hash, g_str_equal);
  g_autoptr(GString) out = g_string_sized_new (16 << 20);
  guint n_merges = 0;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!g_option_context_parse (ctx, &argc, &argv, &error) || argc != 2)
    {
      g_printerr ("usage: %s [--seed N] [--pairs] [--bench] OUT.json\n", argv[0]);
      return 2;
    }
  r = g_rand_new_with_seed ((guint32) seed);
  init_byte_cp ();

  /* lexicon of distinct words; word i gets frequency ~ 1e6 / (i + 1) */
  while (lexicon->len < 260000)
    {
      make_word (r, w);
      if (!g_hash_table_contains (lex, w->str))
        {
          char *s = g_strdup (w->str);
          g_hash_table_add (lex, s);
          g_ptr_array_add (lexicon, s);
        }
    }
  /* training "words" as the split regex cuts them: with and without a leading
   * space, plus punctuation runs */
  n_words = lexicon->len * 2 + G_N_ELEMENTS (puncts) * 2;
  words = g_new0 (Word, n_words);
  for (guint i = 0; i < 256; i++)
    {
      guint8 b = i;
      tokens_add (&toks, &b, 1);
    }
  for (guint i = 0; i < n_words; i++)
    {
      const char *s;
      gboolean space = i % 2 == 0;
      gsize len;
      guint src = i / 2;

      if (src < lexicon->len)
        s = g_ptr_array_index (lexicon, src);
      else
        s = puncts[src - lexicon->len];
      len = strlen (s) + (space ? 1 : 0);
      words[i].syms = g_new (guint32, len);
      words[i].len = 0;
      if (space)
        words[i].syms[words[i].len++] = ' ';
      for (const guchar *p = (const guchar *) s; *p; p++)
        words[i].syms[words[i].len++] = *p;
      words[i].freq = 1 + 1000000 / (src + 1) / (space ? 1 : 4);
    }
  n_tok = train (words, n_words, &toks, N_MODEL_TOKENS);
  g_printerr ("trained %u tokens (%u merges) from %u words in %.1f s\n", n_tok, n_tok - 256,
              n_words, (g_get_monotonic_time () - t0) / 1e6);
  if (n_tok < N_MODEL_TOKENS)
    g_error ("corpus too small: only %u tokens", n_tok);
  for (guint i = 0; i < n_words; i++)
    g_free (words[i].syms);
  g_free (words);

  for (guint i = 0; i < n_tok; i++)
    {
      char *m = byte_level (TOK_BYTES (&toks, i), TOK_LEN (&toks, i));
      g_ptr_array_add (mapped, m);
      g_hash_table_insert (by_str, m, GUINT_TO_POINTER (i + 1));
    }

  /* tokenizer.json */
  g_string_append (out, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n"
                        "  \"added_tokens\": [");
  for (guint id = N_MODEL_TOKENS; id < N_TOTAL_TOKENS; id++)
    {
      char buf[64];
      g_string_append_printf (out, "%s\n    {\"id\": %u, \"content\": ", id > N_MODEL_TOKENS ? "," : "", id);
      json_string (out, added_name (id, buf, sizeof buf));
      g_string_append (out, ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false,"
                            " \"normalized\": false, \"special\": true}");
    }
  g_string_append (out, "\n  ],\n  \"normalizer\": null,\n  \"pre_tokenizer\": {\"type\": \"Sequence\", "
                        "\"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": ");
  {
    /* the regex as a JSON string: backslashes doubled */
    g_autoptr(GString) esc = g_string_new (NULL);
    for (const char *p = pre_regex; *p; p++)
      {
        if (*p == '\\' || *p == '"')
          g_string_append_c (esc, '\\');
        g_string_append_c (esc, *p);
      }
    g_string_append_printf (out, "\"%s\"", esc->str);
  }
  g_string_append (out, "}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", "
                        "\"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": false}]},\n"
                        "  \"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
                        "\"trim_offsets\": false, \"use_regex\": true},\n"
                        "  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
                        "\"trim_offsets\": true, \"use_regex\": true},\n"
                        "  \"model\": {\n    \"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, "
                        "\"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, "
                        "\"fuse_unk\": false, \"byte_fallback\": false, \"ignore_merges\": false,\n"
                        "    \"vocab\": {");
  for (guint i = 0; i < n_tok; i++)
    {
      g_string_append (out, i ? ",\n      " : "\n      ");
      json_string (out, g_ptr_array_index (mapped, i));
      g_string_append_printf (out, ": %u", i);
    }
  g_string_append (out, "\n    },\n    \"merges\": [");
  {
    g_autoptr(GArray) local = g_array_new (FALSE, FALSE, sizeof (guint64));
    g_autoptr(GString) piece = g_string_new (NULL);

    for (guint t = 256; t < n_tok; t++)
      {
        const char *m = g_ptr_array_index (mapped, t);
        const char *p = g_utf8_next_char (m);

        g_array_set_size (local, 0);
        for (; *p; p = g_utf8_next_char (p))
          {
            guint l, rr;
            g_string_truncate (piece, 0);
            g_string_append_len (piece, m, p - m);
            l = GPOINTER_TO_UINT (g_hash_table_lookup (by_str, piece->str));
            rr = GPOINTER_TO_UINT (g_hash_table_lookup (by_str, p));
            if (l && rr)
              {
                guint64 k = ((guint64) (l - 1) << 32) | (rr - 1);
                g_array_append_val (local, k);
              }
          }
        g_array_sort (local, cmp_pair);
        for (guint k = 0; k < local->len; k++)
          {
            guint64 key = g_array_index (local, guint64, k);
            const char *a = g_ptr_array_index (mapped, key >> 32);
            const char *b = g_ptr_array_index (mapped, (guint32) key);

            g_string_append (out, n_merges ? ",\n      " : "\n      ");
            if (pairs)
              {
                g_string_append_c (out, '[');
                json_string (out, a);
                g_string_append (out, ", ");
                json_string (out, b);
                g_string_append_c (out, ']');
              }
            else
              {
                g_autofree char *ab = g_strconcat (a, " ", b, NULL);
                json_string (out, ab);
              }
            n_merges++;
          }
      }
  }
  g_string_append (out, "\n    ]\n  }\n}\n");
  if (!g_file_set_contents (argv[1], out->str, out->len, &error))
    g_error ("%s", error->message);
  g_printerr ("wrote %s: %u model tokens, %u added tokens, %u merges, %.1f MB, %.1f s in all\n",
              argv[1], n_tok, N_TOTAL_TOKENS - N_MODEL_TOKENS, n_merges, out->len / 1e6,
              (g_get_monotonic_time () - t0) / 1e6);

  g_byte_array_unref (toks.pool);
  g_array_unref (toks.off);
  g_array_unref (toks.len);

  if (do_bench)
    bench (argv[1], r, lexicon);
  return 0;
}

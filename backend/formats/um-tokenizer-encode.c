/* um-tokenizer-encode.c — text to ids: added tokens split out first, then the
 * pre-tokenizer steps, then BPE on each word (see um-tokenizer.c for the
 * whole pipeline).
 */
#include "um-tokenizer.h"
#include "um-tokenizer-private.h"

#include <string.h>

#include "um-error.h"

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
    if (i + 1 == n
        || !um_tok_merge_table_get (&tok->merges, s[i].id, s[i + 1].id, &ranks[i], &ids[i]))
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
          || !um_tok_merge_table_get (&tok->merges, s[best].id, s[s[best].next].id, &ranks[best],
                                      &ids[best]))
        ranks[best] = G_MAXUINT32;
      if (s[best].prev >= 0)
        {
          gint32 pv = s[best].prev;
          if (!um_tok_merge_table_get (&tok->merges, s[pv].id, s[best].id, &ranks[pv], &ids[pv]))
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
    if (um_tok_merge_table_get (&tok->merges, s[i].id, s[i + 1].id, &rank, &new_id))
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
      if (!um_tok_merge_table_get (&tok->merges, cur->id, s[next].id, &rank, &new_id)
          || new_id != top.new_id)
        continue;
      cur->id = top.new_id;
      cur->len += s[next].len;
      cur->next = s[next].next;
      s[next].len = 0;
      if (cur->next >= 0)
        s[cur->next].prev = (gint32) top.pos;
      if (cur->prev >= 0
          && um_tok_merge_table_get (&tok->merges, s[cur->prev].id, cur->id, &rank, &new_id))
        heap_push (sc->heap, rank, (guint32) cur->prev, new_id);
      if (cur->next >= 0
          && um_tok_merge_table_get (&tok->merges, cur->id, s[cur->next].id, &rank, &new_id))
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
          ids[k] = um_tok_vocab_lookup (tok, code);
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
          g_string_append_len (sc->word, um_tok_byte_utf8[w[i]], um_tok_byte_utf8_len[w[i]]);
      else
        g_string_append_len (sc->word, (const char *) w, n);
    }
  if (tok->ignore_merges)
    {
      gint32 id = um_tok_vocab_get (tok, sc->word->str, sc->word->len);
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
            unknown_char (tok, sc, (const guint8 *) um_tok_byte_utf8[w[i]],
                          um_tok_byte_utf8_len[w[i]], &pending_unk, &pending_len);
        }
    }
  else
    {
      const char *p = sc->word->str, *end = sc->word->str + sc->word->len;
      while (p < end)
        {
          const char *next = g_utf8_next_char (p);
          gint32 id;

          id = um_tok_vocab_get (tok, p, next - p);
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

static gboolean encode_segment (const UmTokenizer *tok, Scratch *sc, const char *s, gsize n,
                                guint pass, GArray *out, GError **error);

/* A piece between non-normalized added tokens: the normalizer runs on it
 * (AddedVocabulary::extract_and_normalize), then normalized added tokens are
 * split out of the result. */
static gboolean
encode_normalized (const UmTokenizer *tok, Scratch *sc, const char *s, gsize n, GArray *out,
                   GError **error)
{
  g_autofree char *nf = NULL;
  gsize nn = 0;

  if (tok->nfc && (nf = um_tok_nfc (s, n, &nn)) != NULL)
    return encode_segment (tok, sc, nf, nn, 1, out, error);
  return encode_segment (tok, sc, s, n, 1, out, error);
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
    return pass == 0 ? encode_normalized (tok, sc, s, n, out, error)
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
              if (c->match_len <= n - p && memcmp (c->match, s + p, c->match_len) == 0)
                {
                  t = c;
                  ms = p;
                  break;
                }
            }
        }
      if (t == NULL)
        break;
      me = ms + t->match_len;
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
                        ? encode_normalized (tok, sc, s + start_offset, start - start_offset, out, error)
                        : encode_plain (tok, sc, s + start_offset, start - start_offset, out, error);
          if (!ok)
            return FALSE;
        }
      g_array_append_val (out, t->id);
      start_offset = stop;
    }
  if (start_offset < n)
    return pass == 0 ? encode_normalized (tok, sc, s + start_offset, n - start_offset, out, error)
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

/* um-tokenizer-private.h — internal: what the um-tokenizer*.c files share.
 *
 * Not public API: only um-tokenizer.c (tables, construction, decoding),
 * um-tokenizer-json.c (tokenizer.json), um-tokenizer-slow.c (vocab.json +
 * merges.txt) and um-tokenizer-encode.c include it.
 * The hash-table lookups the encoder runs per symbol are static inline here.
 */
#pragma once

#include <string.h>

#include "um-tokenizer.h"

G_BEGIN_DECLS

/* Ids above this are refused: they would make the id table absurdly large. */
#define MAX_TOKEN_ID (1 << 26)

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
  const char *match;               /* what the matcher looks for: content, or its NFC form */
  gsize       match_len;
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
  ID_UNUSED  = 1 << 3,             /* GGUF UNUSED row ([PAD…]): decodes to nothing */
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
  gboolean      nfc;               /* NFC normalizer: pieces between raw added tokens are composed */
  GArray       *steps;             /* PreStep */
  gboolean      byte_level;        /* a ByteLevel pre-tokenizer maps bytes before the model */
  gboolean      decode_byte_level; /* ByteLevel decoder; without one tokens are joined by ' ' */
  gboolean      force_heap;        /* testing: use the heap merge for every word */
};

/* ---- GPT-2 bytes_to_unicode ------------------------------------------------ */

/* UTF-8 of each byte's byte-level character; filled by um_tok_alloc(). */
extern char   um_tok_byte_utf8[256][3];
extern guint8 um_tok_byte_utf8_len[256];

/* ---- merge table ---------------------------------------------------------------- */

static inline guint32
um_tok_merge_slot (guint64 key, guint32 mask)
{
  return (guint32) ((key * G_GUINT64_CONSTANT (0x9E3779B97F4A7C15)) >> 32) & mask;
}

static inline gboolean
um_tok_merge_table_get (const MergeTable *t, gint32 a, gint32 b, guint32 *rank, gint32 *new_id)
{
  guint64 key = ((guint64) (guint32) a << 32) | (guint32) b;
  guint32 i = um_tok_merge_slot (key, t->mask);

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
um_tok_hash_bytes (guint32 h, const char *s, gsize n)
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
static inline guint32
um_tok_vocab_slot (const VocabTable *t, guint32 h, const char *a, gsize la, const char *b,
                   gsize lb)
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

static inline const VocabEntry *
um_tok_vocab_entry2 (const UmTokenizer *tok, const char *a, gsize la, const char *b, gsize lb)
{
  guint32 h = um_tok_hash_bytes (um_tok_hash_bytes (HASH_SEED, a, la), b, lb);
  const VocabEntry *e = &tok->vocab.e[um_tok_vocab_slot (&tok->vocab, h, a, la, b, lb)];
  return e->key ? e : NULL;
}

static inline gint32
um_tok_vocab_get2 (const UmTokenizer *tok, const char *a, gsize la, const char *b, gsize lb)
{
  const VocabEntry *e = um_tok_vocab_entry2 (tok, a, la, b, lb);
  return e ? e->id : -1;
}

static inline gint32
um_tok_vocab_get (const UmTokenizer *tok, const char *s, gsize len)
{
  return um_tok_vocab_get2 (tok, s, len, NULL, 0);
}

static inline gint32
um_tok_vocab_lookup (const UmTokenizer *tok, const char *token)
{
  return um_tok_vocab_get (tok, token, strlen (token));
}

/* ---- construction helpers (um-tokenizer.c) -------------------------------------- */

UmTokenizer *um_tok_alloc              (const char    *source);
void         um_tok_vocab_table_init   (VocabTable    *t,
                                        guint          expected);
void         um_tok_vocab_insert       (UmTokenizer   *tok,
                                        const char    *token,
                                        gsize          len,
                                        gint32         id);
void         um_tok_merge_table_init   (MergeTable    *t,
                                        guint          expected);
GRegex      *um_tok_compile_regex      (const char    *pattern,
                                        gboolean       literal,
                                        const char    *src,
                                        const char    *field,
                                        GError       **error);
void         um_tok_add_step           (UmTokenizer   *tok,
                                        StepKind       kind,
                                        GRegex        *regex,
                                        SplitBehavior  behavior,
                                        gboolean       invert,
                                        gboolean       add_prefix_space);
void         um_tok_build_id_tables    (UmTokenizer   *tok,
                                        guint          n_ids);
void         um_tok_finish_byte_ids    (UmTokenizer   *tok);
void         um_tok_finish_added       (UmTokenizer   *tok);
gboolean     um_tok_add_merge          (UmTokenizer   *tok,
                                        const char    *a,
                                        gsize          la,
                                        const char    *b,
                                        gsize          lb,
                                        guint          rank,
                                        const char    *src,
                                        const char    *field,
                                        guint          index,
                                        GError       **error);
gboolean     um_tok_split_merge_string (const char    *s,
                                        gsize         *la,
                                        const char   **b);
void         um_tok_put_added          (UmTokenizer   *tok,
                                        const AddedToken *t);
char        *um_tok_nfc                (const char    *s,
                                        gsize          n,
                                        gsize         *out_len);

G_END_DECLS

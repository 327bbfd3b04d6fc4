/* um-tokenizer.h — byte-level BPE tokenizer compatible with Hugging Face `tokenizers`.
 *
 * Reads a `tokenizer.json` (NFC normalizer, BPE model, added tokens,
 * Split/ByteLevel pre-tokenizers, ByteLevel decoder), the slow vocab.json +
 * merges.txt files or a GGUF-style vocabulary, and produces
 * the same ids as the `tokenizers` library: added tokens are split out first
 * (leftmost-longest match), the rest goes through the split regex (Oniguruma
 * semantics, run with PCRE2 through GRegex), the GPT-2 byte-to-unicode mapping
 * and BPE merges by rank.
 *
 * A loaded tokenizer is immutable: encode and decode may be called from
 * several threads at once.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef struct _UmTokenizer UmTokenizer;

/* GGUF token types (tokenizer.ggml.token_type). */
enum {
  UM_TOKEN_TYPE_NORMAL       = 1,
  UM_TOKEN_TYPE_UNKNOWN      = 2,
  UM_TOKEN_TYPE_CONTROL      = 3,
  UM_TOKEN_TYPE_USER_DEFINED = 4,
  UM_TOKEN_TYPE_UNUSED       = 5,
  UM_TOKEN_TYPE_BYTE         = 6,
};

UmTokenizer *um_tokenizer_new_from_file (const char *tokenizer_json_path,
                                         GError    **error);

/* Same as um_tokenizer_new_from_file() on JSON text already in memory;
 * @source_name names it in error messages. */
UmTokenizer *um_tokenizer_new_from_data (const char *data,
                                         gssize      len,
                                         const char *source_name,
                                         GError    **error);

/* The tokenizer of a Hugging Face model folder: tokenizer.json when there is
 * one, else the slow files vocab.json + merges.txt (Dream ships only those;
 * see um_tokenizer_new_from_slow_files). */
UmTokenizer *um_tokenizer_new_from_dir (const char *dir,
                                        GError    **error);

/* A slow GPT-2-style tokenizer (transformers' Qwen2Tokenizer, DreamTokenizer):
 * vocab.json (token -> id), merges.txt (ranks in file order after an optional
 * "#version" line) and, if @config_path is not NULL and exists,
 * tokenizer_config.json, whose added_tokens_decoder gives the added tokens with
 * their ids and flags. The split is the Qwen2 regex, byte-level. The text is
 * composed to NFC when tokenizer_class is Qwen2Tokenizer or DreamTokenizer,
 * as their prepare_for_tokenization does. */
UmTokenizer *um_tokenizer_new_from_slow_files (const char *vocab_json_path,
                                               const char *merges_txt_path,
                                               const char *config_path,
                                               GError    **error);

/* For GGUF files (tokenizer.ggml.tokens / merges / token_type): tokens[i] is
 * the byte-level string of id i, merges are "a b" strings. token_types may be
 * NULL; CONTROL (3) and USER_DEFINED (4) tokens become added tokens that are
 * split out before BPE, and CONTROL ones are special (dropped by decode with
 * skip_special); UNUSED (5) rows (the converters' "[PAD…]") decode to nothing.
 * pre_regex NULL means the default LLaDA split regex. */
UmTokenizer *um_tokenizer_new_from_vocab (const char * const *tokens,
                                          guint               n_tokens,
                                          const char * const *merges,
                                          guint               n_merges,
                                          const gint32       *token_types,
                                          const char         *pre_regex,
                                          GError            **error);

/* Same, with the split and normalizer of the HF tokenizer of the family
 * @gguf_arch (general.architecture; NULL: LLaDA's) and @pre
 * (tokenizer.ggml.pre; NULL or "default": the family's own split):
 *   qwen2, deepseek-r1-qwen               the Qwen2 regex
 *   llada-moe, bailingmoe, bailingmoe2    the Ling/Bailing regex
 * Families: llada (any pre name we do not know keeps LLaDA's regex, as
 * before pre was read), dream and rnd1 (Qwen2 regex and NFC, as their HF
 * tokenizers compose; llama.cpp does not), llada-moe and llada2 (Ling regex).
 * For the other families an unknown pre name is an error
 * (UM_ERROR_UNSUPPORTED). */
UmTokenizer *um_tokenizer_new_from_gguf_vocab (const char * const *tokens,
                                               guint               n_tokens,
                                               const char * const *merges,
                                               guint               n_merges,
                                               const gint32       *token_types,
                                               const char         *gguf_arch,
                                               const char         *pre,
                                               GError            **error);

/* The tokenizer.ggml.pre a GGUF of family @gguf_arch should carry for
 * llama.cpp to split as the HF tokenizer does ("default" for LLaDA and for
 * families we do not know). */
const char  *um_tokenizer_gguf_pre_name (const char *gguf_arch);

void         um_tokenizer_free (UmTokenizer *tok);

/* Appends the ids (gint32) of @text to @out_ids. No BOS/EOS is added; special
 * token strings inside the text map to their ids. @len -1 means NUL-terminated.
 * Invalid UTF-8 is an error (UM_ERROR_INVALID_PARAM) and appends nothing. */
gboolean     um_tokenizer_encode (UmTokenizer *tok,
                                  const char  *text,
                                  gssize       len,
                                  GArray      *out_ids,
                                  GError     **error);

/* Decodes to UTF-8 the way `tokenizers` does: byte-level characters back to
 * bytes, invalid byte sequences replaced by U+FFFD (one per maximal invalid
 * subpart, like Rust's String::from_utf8_lossy). @skip_special drops special
 * tokens. An unknown id is an error (UM_ERROR_INVALID_PARAM). */
char        *um_tokenizer_decode (UmTokenizer  *tok,
                                  const gint32 *ids,
                                  gsize         n_ids,
                                  gboolean      skip_special,
                                  GError      **error);

gint32       um_tokenizer_token_to_id (UmTokenizer *tok,
                                       const char  *token);   /* -1 if absent */
const char  *um_tokenizer_id_to_token (UmTokenizer *tok,
                                       gint32       id);      /* NULL if absent */
/* TRUE for added tokens marked special (skipped by decode with skip_special). */
gboolean     um_tokenizer_is_special (UmTokenizer *tok,
                                      gint32       id);
/* TRUE for any added token (special or not): split out before BPE. */
gboolean     um_tokenizer_is_added (UmTokenizer *tok,
                                    gint32       id);
/* Max id + 1 over the model vocabulary and the added tokens. */
guint        um_tokenizer_vocab_size (UmTokenizer *tok);

/* The merges in rank order, as "a b" strings of byte-level tokens (what GGUF's
 * tokenizer.ggml.merges holds). The strings belong to the tokenizer. */
guint        um_tokenizer_n_merges (UmTokenizer *tok);
const char  *um_tokenizer_get_merge (UmTokenizer *tok,
                                     guint        rank);   /* NULL if out of range */

/* Testing only: merge every word with the heap algorithm used for long words
 * (short words normally take a simpler path; the ids must not change).
 * Call before the tokenizer is shared between threads. */
void         um_tokenizer_set_force_heap (UmTokenizer *tok,
                                          gboolean     force);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmTokenizer, um_tokenizer_free)

G_END_DECLS

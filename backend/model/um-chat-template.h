/* um-chat-template.h — the LLaDA Instruct chat template, at text and id level.
 *
 * The template of LLaDA-8B-Instruct's tokenizer_config.json (Llama-3 headers):
 *   bos + for each message "<|start_header_id|>" ROLE "<|end_header_id|>\n\n"
 *   content.strip() "<|eot_id|>", then, for generation,
 *   "<|start_header_id|>assistant<|end_header_id|>\n\n".
 * Multi-turn prompts follow the reference chat.py: the previous prompt plus
 * answer with every EOS removed, then the new user turn without its BOS.
 */
#pragma once

#include <glib.h>

#include "um-tokenizer.h"

G_BEGIN_DECLS

typedef struct {
  const char *role;
  const char *content;
} UmChatMessage;

/* Text of the template for @msgs (all roles, system included, exactly as the
 * Jinja template renders them; content is trimmed like Jinja's `trim`).
 * @bos_token (NULL = none) goes before the first message; the assistant header
 * follows if @add_generation_prompt. */
char     *um_chat_template_render (const UmChatMessage *msgs,
                                   guint                n,
                                   gboolean             add_generation_prompt,
                                   const char          *bos_token);

/* Python's str.strip(): removes leading and trailing Unicode whitespace
 * (str.isspace). Returns a new string. */
char     *um_chat_strip (const char *text);

/* First turn (@prev_ids NULL): the ids of render(user message) with the
 * generation prompt. Later turns: @prev_ids (previous prompt + answer) with
 * every @eos_id removed, then the new turn's ids without its leading BOS.
 * Appends to @out_ids (gint32). @bos_id must be a token of @tok. */
gboolean  um_chat_build_prompt (UmTokenizer  *tok,
                                const gint32 *prev_ids,
                                gsize         n_prev,
                                const char   *user_text,
                                gint32        bos_id,
                                gint32        eos_id,
                                GArray       *out_ids,
                                GError      **error);

G_END_DECLS

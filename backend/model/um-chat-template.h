/* um-chat-template.h — the chat templates of the families, at text and id level.
 *
 * A model's Jinja template (tokenizer_config.json's chat_template, or
 * chat_template.jinja, or the GGUF's tokenizer.chat_template) is recognized,
 * not interpreted: each format below is rendered by code that gives exactly
 * the text its Jinja gives.
 *
 * LLaDA (LLaDA-8B Instruct, Llama-3 headers):
 *   bos + for each message "<|start_header_id|>" ROLE "<|end_header_id|>\n\n"
 *   content.strip() "<|eot_id|>", then, for generation,
 *   "<|start_header_id|>assistant<|end_header_id|>\n\n".
 * ChatML (Dream; Qwen2): a default system turn when the first message is not
 *   a system one, "<|im_start|>system\n" DEFAULT "<|im_end|>\n", then for each
 *   message "<|im_start|>" ROLE "\n" content "<|im_end|>\n", then, for
 *   generation, "<|im_start|>assistant\n".
 * Ling (LLaDA-MoE, LLaDA 2): "<role>SYSTEM</role>" DEFAULT "<|role_end|>"
 *   when the first message is not a system one, then for each message
 *   "<role>HUMAN</role>" (user) or "<role>" ROLE.upper() "</role>", content,
 *   "<|role_end|>", then, for generation, "<role>ASSISTANT</role>".
 * Task (RND1, a base model; its demo's task mode): "Question: " q "\nAnswer:"
 *   unless q.strip() already starts with "Question:".
 * The default system prompts are read from the template's own text.
 *
 * Multi-turn prompts are built from ids: the previous prompt + answer, then
 * the new turn. LLaDA follows its reference chat.py (every EOS removed, the
 * new turn without its BOS). The others drop EOS and pad ids (unless one is
 * the turn-end token), close the answer with the turn-end token when it lacks
 * one (<|im_end|>, <|role_end|>), and append what the template renders between
 * that and the new generation prompt ("\n" before a ChatML turn, "\n" before
 * a task-mode "Question:").
 */
#pragma once

#include <glib.h>

#include "um-model-config.h"
#include "um-tokenizer.h"

G_BEGIN_DECLS

typedef struct {
  const char *role;
  const char *content;
} UmChatMessage;

typedef enum {
  UM_CHAT_FORMAT_LLADA,
  UM_CHAT_FORMAT_CHATML,
  UM_CHAT_FORMAT_LING,
  UM_CHAT_FORMAT_TASK,
} UmChatFormat;

typedef struct {
  UmChatFormat format;
  char        *default_system;   /* ChatML, Ling: added when no system message; NULL: none */
} UmChatTemplate;

UmChatTemplate *um_chat_template_new  (UmChatFormat    format,
                                       const char     *default_system);
void            um_chat_template_free (UmChatTemplate *tmpl);

/* The format of a Jinja chat template, with its default system prompt;
 * NULL when @jinja is NULL or none of the formats above. */
UmChatTemplate *um_chat_template_detect (const char *jinja);

/* The template a model of family @arch uses: RND1 is a base model and
 * always uses the task mode; the others use @jinja when it is recognized,
 * else their family's own (LLaDA: LLaDA; Dream: ChatML with "You are a
 * helpful assistant."; LLaDA-MoE: Ling with "detailed thinking off"). */
UmChatTemplate *um_chat_template_for_arch (UmArch      arch,
                                           const char *jinja);

/* The template text of a Hugging Face folder, as um_chat_template_from_dir
 * () finds it: *@out is NULL when there is none. FALSE with an error for a
 * tokenizer_config.json that is not JSON (read through um-json.c). */
gboolean um_chat_template_text_from_dir (const char *dir, char **out, GError **error);

/* The template of a Hugging Face folder: tokenizer_config.json's
 * chat_template (a string, or a list of {name, template} where "default" is
 * taken), else chat_template.jinja, given to um_chat_template_for_arch().
 * Missing files are no error; a tokenizer_config.json that is not JSON is. */
UmChatTemplate *um_chat_template_from_dir (const char *dir,
                                           UmArch      arch,
                                           GError    **error);

/* Text of @tmpl for @msgs (all roles, system included, exactly as the Jinja
 * template renders them). @bos_token (NULL = none) goes before the first
 * message in the LLaDA format; the generation prompt follows if
 * @add_generation_prompt. The task format renders the last user message. */
char     *um_chat_template_render_messages (const UmChatTemplate *tmpl,
                                            const UmChatMessage  *msgs,
                                            guint                 n,
                                            gboolean              add_generation_prompt,
                                            const char           *bos_token);

/* First turn (@prev_ids NULL): the ids of render(user message) with the
 * generation prompt. Later turns: see the top of this file. @bos_id must be
 * a token of @tok for the LLaDA format; @eos_id and @pad_id may be -1.
 * Appends to @out_ids (gint32). */
gboolean  um_chat_template_build_prompt (const UmChatTemplate *tmpl,
                                         UmTokenizer          *tok,
                                         const gint32         *prev_ids,
                                         gsize                 n_prev,
                                         const char           *user_text,
                                         gint32                bos_id,
                                         gint32                eos_id,
                                         gint32                pad_id,
                                         GArray               *out_ids,
                                         GError              **error);

/* The LLaDA format (kept for callers that know they have LLaDA). */
char     *um_chat_template_render (const UmChatMessage *msgs,
                                   guint                n,
                                   gboolean             add_generation_prompt,
                                   const char          *bos_token);
gboolean  um_chat_build_prompt (UmTokenizer  *tok,
                                const gint32 *prev_ids,
                                gsize         n_prev,
                                const char   *user_text,
                                gint32        bos_id,
                                gint32        eos_id,
                                GArray       *out_ids,
                                GError      **error);

/* Python's str.strip(): removes leading and trailing Unicode whitespace
 * (str.isspace). Returns a new string. */
char     *um_chat_strip (const char *text);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmChatTemplate, um_chat_template_free)

G_END_DECLS

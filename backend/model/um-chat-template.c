/* um-chat-template.c — the families' chat templates (see um-chat-template.h). */
#include "um-chat-template.h"

#include <string.h>

#include "um-error.h"
#include "um-json.h"
#include "um-model.h"

/* Python's str.isspace(): what Jinja's trim (str.strip) removes. */
static gboolean
py_isspace (gunichar c)
{
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0
         || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029
         || c == 0x202F || c == 0x205F || c == 0x3000;
}

char *
um_chat_strip (const char *text)
{
  const char *start, *end;

  if (text == NULL)
    return g_strdup ("");
  start = text;
  end = text + strlen (text);
  while (start < end && py_isspace (g_utf8_get_char_validated (start, end - start)))
    start = g_utf8_next_char (start);
  while (end > start)
    {
      const char *prev = g_utf8_find_prev_char (start, end);
      if (prev == NULL || !py_isspace (g_utf8_get_char_validated (prev, end - prev)))
        break;
      end = prev;
    }
  return g_strndup (start, end - start);
}

/* ---- templates ------------------------------------------------------------------ */

UmChatTemplate *
um_chat_template_new (UmChatFormat format, const char *default_system)
{
  UmChatTemplate *t = g_new0 (UmChatTemplate, 1);

  t->format = format;
  t->default_system = g_strdup (default_system);
  return t;
}

void
um_chat_template_free (UmChatTemplate *tmpl)
{
  if (tmpl == NULL)
    return;
  g_free (tmpl->default_system);
  g_free (tmpl);
}

/* The literal text from @after up to @stop, or NULL when something that is
 * not literal text comes first (such as a system message's content). @after
 * is either in a string literal of a {{ }} or {% %} tag (Python's escapes are
 * undone) or in the template's raw text (up to the next tag). */
static char *
literal_until (const char *jinja, const char *after, const char *stop)
{
  g_autoptr(GString) out = g_string_new (NULL);
  gboolean in_tag = FALSE;
  char quote = 0;
  const char *p;

  /* where @after is: raw text, a tag, or a string literal in a tag */
  for (p = jinja; p < after; p++)
    {
      if (quote != 0)
        {
          if (*p == '\\' && p + 1 < after)
            p++;
          else if (*p == quote)
            quote = 0;
        }
      else if (in_tag)
        {
          if (*p == '\'' || *p == '"')
            quote = *p;
          else if ((*p == '}' || *p == '%') && p[1] == '}')
            {
              in_tag = FALSE;
              p++;
            }
        }
      else if (*p == '{' && (p[1] == '{' || p[1] == '%'))
        {
          in_tag = TRUE;
          p++;
        }
    }
  if (in_tag && quote == 0)
    return NULL;
  for (p = after; *p; )
    {
      if (g_str_has_prefix (p, stop))
        return g_string_free (g_steal_pointer (&out), FALSE);
      if (quote == 0 && *p == '{' && (p[1] == '{' || p[1] == '%' || p[1] == '#'))
        return NULL;
      if (quote != 0 && *p == quote)
        return NULL;
      if (quote != 0 && *p == '\\' && p[1] != '\0')
        {
          switch (p[1])
            {
            case 'n': g_string_append_c (out, '\n'); break;
            case 't': g_string_append_c (out, '\t'); break;
            case 'r': g_string_append_c (out, '\r'); break;
            case '\\': case '\'': case '"': g_string_append_c (out, p[1]); break;
            default: g_string_append_len (out, p, 2); break;
            }
          p += 2;
          continue;
        }
      g_string_append_c (out, *p);
      p++;
    }
  return NULL;
}

/* The default system prompt: the first literal text between @marker (then
 * @sep, written as an escape or as itself) and @stop. */
static char *
find_default_system (const char *jinja, const char *marker, const char *sep, const char *stop)
{
  const char *p = jinja;

  while ((p = strstr (p, marker)) != NULL)
    {
      const char *after = p + strlen (marker);
      char *text;

      p = after;
      if (sep != NULL)
        {
          if (g_str_has_prefix (after, "\\n"))
            after += 2;
          else if (g_str_has_prefix (after, sep))
            after += strlen (sep);
          else
            continue;
        }
      if ((text = literal_until (jinja, after, stop)) != NULL)
        return text;
    }
  return NULL;
}

UmChatTemplate *
um_chat_template_detect (const char *jinja)
{
  g_autofree char *system = NULL;

  if (jinja == NULL)
    return NULL;
  if (strstr (jinja, "<|start_header_id|>") != NULL)
    return um_chat_template_new (UM_CHAT_FORMAT_LLADA, NULL);
  if (strstr (jinja, "<|im_start|>") != NULL)
    {
      system = find_default_system (jinja, "<|im_start|>system", "\n", "<|im_end|>");
      return um_chat_template_new (UM_CHAT_FORMAT_CHATML, system);
    }
  if (strstr (jinja, "<role>") != NULL && strstr (jinja, "<|role_end|>") != NULL)
    {
      system = find_default_system (jinja, "<role>SYSTEM</role>", NULL, "<|role_end|>");
      return um_chat_template_new (UM_CHAT_FORMAT_LING, system);
    }
  return NULL;
}

UmChatTemplate *
um_chat_template_for_arch (UmArch arch, const char *jinja)
{
  UmChatTemplate *t;

  /* RND1 ships only a base model; its demo wraps prompts in the task mode
   * whatever the tokenizer's (Qwen3) template says. */
  if (arch == UM_ARCH_RND1)
    return um_chat_template_new (UM_CHAT_FORMAT_TASK, NULL);
  if ((t = um_chat_template_detect (jinja)) != NULL)
    return t;
  switch (arch)
    {
    case UM_ARCH_DREAM:
      return um_chat_template_new (UM_CHAT_FORMAT_CHATML, "You are a helpful assistant.");
    case UM_ARCH_LLADA_MOE:
    case UM_ARCH_LLADA2:
      return um_chat_template_new (UM_CHAT_FORMAT_LING, "detailed thinking off");
    case UM_ARCH_LLADA:
    case UM_ARCH_RND1:
    case UM_ARCH_N:
    default:
      return um_chat_template_new (UM_CHAT_FORMAT_LLADA, NULL);
    }
}

/* chat_template as a string, or as [{name, template}] ("default" wins). */
static const char *
config_template (JsonObject *obj)
{
  JsonNode *n = json_object_get_member (obj, "chat_template");

  if (n == NULL)
    return NULL;
  if (JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_STRING)
    return json_node_get_string (n);
  if (JSON_NODE_HOLDS_ARRAY (n))
    {
      JsonArray *arr = json_node_get_array (n);
      const char *first = NULL;

      for (guint i = 0; i < json_array_get_length (arr); i++)
        {
          JsonNode *e = json_array_get_element (arr, i);
          JsonObject *o;
          const char *name, *text;

          if (!JSON_NODE_HOLDS_OBJECT (e))
            continue;
          o = json_node_get_object (e);
          name = json_object_get_string_member_with_default (o, "name", NULL);
          text = json_object_get_string_member_with_default (o, "template", NULL);
          if (text != NULL && first == NULL)
            first = text;
          if (text != NULL && g_strcmp0 (name, "default") == 0)
            return text;
        }
      return first;
    }
  return NULL;
}

gboolean
um_chat_template_text_from_dir (const char *dir, char **out, GError **error)
{
  g_autofree char *path = g_build_filename (dir, "tokenizer_config.json", NULL);
  g_autofree char *jinja_path = g_build_filename (dir, "chat_template.jinja", NULL);
  g_autofree char *file_text = NULL;
  g_autoptr(GError) local = NULL;
  g_autoptr(JsonNode) root = NULL;
  const char *jinja = NULL;

  *out = NULL;
  root = um_json_parse_file (path, "tokenizer_config.json", NULL, &local);
  if (root == NULL && !um_json_error_is_missing (local))
    {
      g_propagate_error (error, g_steal_pointer (&local));
      return FALSE;
    }
  if (root != NULL)
    {
      JsonObject *obj = um_json_root_object (root, "tokenizer_config.json", error);
      if (obj == NULL)
        return FALSE;
      jinja = config_template (obj);
    }
  /* newer transformers save the template beside the config */
  if (jinja == NULL && g_file_get_contents (jinja_path, &file_text, NULL, NULL)
      && g_utf8_validate (file_text, -1, NULL))
    jinja = file_text;
  *out = g_strdup (jinja);
  return TRUE;
}

UmChatTemplate *
um_chat_template_from_dir (const char *dir, UmArch arch, GError **error)
{
  g_autofree char *jinja = NULL;

  if (!um_chat_template_text_from_dir (dir, &jinja, error))
    return NULL;
  return um_chat_template_for_arch (arch, jinja);
}

/* ---- rendering ------------------------------------------------------------------ */

static const char *
msg_text (const char *s)
{
  return s != NULL ? s : "";
}

static void
render_task (GString *out, const char *question)
{
  g_autofree char *stripped = um_chat_strip (question);

  if (g_str_has_prefix (stripped, "Question:"))
    g_string_append (out, msg_text (question));
  else
    g_string_append_printf (out, "Question: %s\nAnswer:", msg_text (question));
}

char *
um_chat_template_render_messages (const UmChatTemplate *tmpl,
                                  const UmChatMessage  *msgs,
                                  guint                 n,
                                  gboolean              add_generation_prompt,
                                  const char           *bos_token)
{
  GString *out = g_string_new (NULL);
  gboolean has_system = n > 0 && g_strcmp0 (msgs[0].role, "system") == 0;

  g_return_val_if_fail (tmpl != NULL, NULL);

  switch (tmpl->format)
    {
    case UM_CHAT_FORMAT_LLADA:
      for (guint i = 0; i < n; i++)
        {
          g_autofree char *content = um_chat_strip (msgs[i].content);

          /* the template puts bos_token before the first message only */
          if (i == 0 && bos_token)
            g_string_append (out, bos_token);
          g_string_append (out, "<|start_header_id|>");
          g_string_append (out, msg_text (msgs[i].role));
          g_string_append (out, "<|end_header_id|>\n\n");
          g_string_append (out, content);
          g_string_append (out, "<|eot_id|>");
        }
      if (add_generation_prompt)
        g_string_append (out, "<|start_header_id|>assistant<|end_header_id|>\n\n");
      break;

    case UM_CHAT_FORMAT_CHATML:
      /* the Jinja adds it on the first message (loop.first) */
      if (n > 0 && !has_system && tmpl->default_system != NULL)
        g_string_append_printf (out, "<|im_start|>system\n%s<|im_end|>\n", tmpl->default_system);
      for (guint i = 0; i < n; i++)
        g_string_append_printf (out, "<|im_start|>%s\n%s<|im_end|>\n", msg_text (msgs[i].role),
                                msg_text (msgs[i].content));
      if (add_generation_prompt)
        g_string_append (out, "<|im_start|>assistant\n");
      break;

    case UM_CHAT_FORMAT_LING:
      if (!has_system && tmpl->default_system != NULL)
        g_string_append_printf (out, "<role>SYSTEM</role>%s<|role_end|>", tmpl->default_system);
      for (guint i = 0; i < n; i++)
        {
          if (g_strcmp0 (msgs[i].role, "user") == 0)
            g_string_append (out, "<role>HUMAN</role>");
          else
            {
              g_autofree char *upper = g_utf8_strup (msg_text (msgs[i].role), -1);
              g_string_append_printf (out, "<role>%s</role>", upper);
            }
          g_string_append (out, msg_text (msgs[i].content));
          g_string_append (out, "<|role_end|>");
        }
      if (add_generation_prompt)
        g_string_append (out, "<role>ASSISTANT</role>");
      break;

    case UM_CHAT_FORMAT_TASK:
    default:
      for (guint i = n; i-- > 0;)
        if (g_strcmp0 (msgs[i].role, "user") == 0)
          {
            render_task (out, msgs[i].content);
            break;
          }
      break;
    }
  return g_string_free (out, FALSE);
}

char *
um_chat_template_render (const UmChatMessage *msgs,
                         guint                n,
                         gboolean             add_generation_prompt,
                         const char          *bos_token)
{
  UmChatTemplate llada = { UM_CHAT_FORMAT_LLADA, NULL };

  return um_chat_template_render_messages (&llada, msgs, n, add_generation_prompt, bos_token);
}

/* ---- prompts as ids ------------------------------------------------------------- */

/* What follows a closed answer up to the new turn's generation prompt. */
static char *
next_turn_text (const UmChatTemplate *tmpl, const char *user_text)
{
  GString *out = g_string_new (NULL);

  switch (tmpl->format)
    {
    case UM_CHAT_FORMAT_CHATML:
      g_string_append_printf (out, "\n<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n",
                              user_text);
      break;
    case UM_CHAT_FORMAT_LING:
      g_string_append_printf (out, "<role>HUMAN</role>%s<|role_end|><role>ASSISTANT</role>",
                              user_text);
      break;
    case UM_CHAT_FORMAT_TASK:
      g_string_append_c (out, '\n');
      render_task (out, user_text);
      break;
    case UM_CHAT_FORMAT_LLADA:
    default:
      g_assert_not_reached ();
    }
  return g_string_free (out, FALSE);
}

static const char *
turn_end_token (UmChatFormat format)
{
  switch (format)
    {
    case UM_CHAT_FORMAT_CHATML: return "<|im_end|>";
    case UM_CHAT_FORMAT_LING:   return "<|role_end|>";
    case UM_CHAT_FORMAT_LLADA:  /* chat.py keeps the answer as generated */
    case UM_CHAT_FORMAT_TASK:
    default:                    return NULL;
    }
}

gboolean
um_chat_template_build_prompt (const UmChatTemplate *tmpl,
                               UmTokenizer          *tok,
                               const gint32         *prev_ids,
                               gsize                 n_prev,
                               const char           *user_text,
                               gint32                bos_id,
                               gint32                eos_id,
                               gint32                pad_id,
                               GArray               *out_ids,
                               GError              **error)
{
  UmChatMessage msg = { "user", user_text };
  const char *bos = NULL, *end_str;
  g_autofree char *text = NULL;
  gint32 end_id;
  guint first, before;

  g_return_val_if_fail (tmpl != NULL, FALSE);
  g_return_val_if_fail (tok != NULL, FALSE);
  g_return_val_if_fail (out_ids != NULL, FALSE);

  if (user_text == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "chat prompt: user text is NULL");
      return FALSE;
    }
  if (tmpl->format == UM_CHAT_FORMAT_LLADA)
    {
      bos = um_tokenizer_id_to_token (tok, bos_id);
      if (bos == NULL)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                       "chat prompt: BOS id %d is not a token of the tokenizer", bos_id);
          return FALSE;
        }
    }
  end_str = turn_end_token (tmpl->format);
  end_id = end_str ? um_tokenizer_token_to_id (tok, end_str) : -1;
  if (end_str != NULL && end_id < 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "chat prompt: the template's turn end %s is not a token of the tokenizer", end_str);
      return FALSE;
    }

  first = out_ids->len;
  if (prev_ids != NULL && tmpl->format == UM_CHAT_FORMAT_LLADA)
    {
      /* chat.py: prompt = out[out != EOS], then cat(prompt, input_ids[:, 1:]) */
      for (gsize i = 0; i < n_prev; i++)
        if (prev_ids[i] != eos_id)
          g_array_append_val (out_ids, prev_ids[i]);
    }
  else if (prev_ids != NULL && n_prev > 0)
    {
      for (gsize i = 0; i < n_prev; i++)
        if (prev_ids[i] == end_id || (prev_ids[i] != eos_id && prev_ids[i] != pad_id))
          g_array_append_val (out_ids, prev_ids[i]);
      /* an answer cut short is closed as the template closes every turn */
      if (end_id >= 0 && (out_ids->len == first || g_array_index (out_ids, gint32, out_ids->len - 1) != end_id))
        g_array_append_val (out_ids, end_id);
      text = next_turn_text (tmpl, user_text);
    }
  if (text == NULL)
    text = um_chat_template_render_messages (tmpl, &msg, 1, TRUE, bos);

  before = out_ids->len;
  if (!um_tokenizer_encode (tok, text, -1, out_ids, error))
    {
      g_array_set_size (out_ids, first);
      return FALSE;
    }
  if (prev_ids != NULL && tmpl->format == UM_CHAT_FORMAT_LLADA && out_ids->len > before)
    g_array_remove_index (out_ids, before);   /* the new turn's leading BOS */
  return TRUE;
}

gboolean
um_chat_build_prompt (UmTokenizer  *tok,
                      const gint32 *prev_ids,
                      gsize         n_prev,
                      const char   *user_text,
                      gint32        bos_id,
                      gint32        eos_id,
                      GArray       *out_ids,
                      GError      **error)
{
  UmChatTemplate llada = { UM_CHAT_FORMAT_LLADA, NULL };

  return um_chat_template_build_prompt (&llada, tok, prev_ids, n_prev, user_text, bos_id, eos_id, -1,
                                        out_ids, error);
}

gboolean
um_model_build_chat_prompt (UmModel      *model,
                            const gint32 *prev_ids,
                            gsize         n_prev,
                            const char   *user_text,
                            GArray       *out_ids,
                            GError      **error)
{
  UmChatTemplate llada = { UM_CHAT_FORMAT_LLADA, NULL };

  g_return_val_if_fail (model != NULL, FALSE);
  return um_chat_template_build_prompt (model->chat_template ? model->chat_template : &llada,
                                        model->tokenizer, prev_ids, n_prev, user_text,
                                        model->cfg.bos_id, model->cfg.eos_id, model->cfg.pad_id,
                                        out_ids, error);
}

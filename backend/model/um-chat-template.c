/* um-chat-template.c — LLaDA Instruct chat template (see um-chat-template.h). */
#include "um-chat-template.h"

#include <string.h>

#include "um-error.h"

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

char *
um_chat_template_render (const UmChatMessage *msgs,
                         guint                n,
                         gboolean             add_generation_prompt,
                         const char          *bos_token)
{
  GString *out = g_string_new (NULL);

  for (guint i = 0; i < n; i++)
    {
      g_autofree char *content = um_chat_strip (msgs[i].content);

      /* the template puts bos_token before the first message only */
      if (i == 0 && bos_token)
        g_string_append (out, bos_token);
      g_string_append (out, "<|start_header_id|>");
      g_string_append (out, msgs[i].role ? msgs[i].role : "");
      g_string_append (out, "<|end_header_id|>\n\n");
      g_string_append (out, content);
      g_string_append (out, "<|eot_id|>");
    }
  if (add_generation_prompt)
    g_string_append (out, "<|start_header_id|>assistant<|end_header_id|>\n\n");
  return g_string_free (out, FALSE);
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
  UmChatMessage msg = { "user", user_text };
  const char *bos;
  g_autofree char *text = NULL;
  guint first;

  g_return_val_if_fail (tok != NULL, FALSE);
  g_return_val_if_fail (out_ids != NULL, FALSE);

  if (user_text == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "chat prompt: user text is NULL");
      return FALSE;
    }
  bos = um_tokenizer_id_to_token (tok, bos_id);
  if (bos == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "chat prompt: BOS id %d is not a token of the tokenizer", bos_id);
      return FALSE;
    }

  first = out_ids->len;
  if (prev_ids != NULL)
    {
      /* chat.py: prompt = out[out != EOS], then cat(prompt, input_ids[:, 1:]) */
      for (gsize i = 0; i < n_prev; i++)
        if (prev_ids[i] != eos_id)
          g_array_append_val (out_ids, prev_ids[i]);
    }
  text = um_chat_template_render (&msg, 1, TRUE, bos);
  {
    guint before = out_ids->len;

    if (!um_tokenizer_encode (tok, text, -1, out_ids, error))
      {
        g_array_set_size (out_ids, first);
        return FALSE;
      }
    if (prev_ids != NULL && out_ids->len > before)
      g_array_remove_index (out_ids, before);   /* the new turn's leading BOS */
  }
  return TRUE;
}

/* um-chat-store.c — saved chat conversations (see um-chat-store.h). */
#include "config.h"

#include "um-chat-store.h"

#include <errno.h>
#include <gio/gio.h>
#include <glib/gi18n.h>
#include <json-glib/json-glib.h>
#include <string.h>

#include "um-error.h"
#include "um-json.h"

#define FORMAT_NAME    "unmask-chat"
#define FORMAT_VERSION 1

/* ---- conversations ---- */

void
um_chat_store_message_free (UmChatStoreMessage *m)
{
  if (m == NULL)
    return;
  g_free (m->role);
  g_free (m->content);
  g_free (m);
}

UmChatConversation *
um_chat_conversation_new (void)
{
  UmChatConversation *c = g_new0 (UmChatConversation, 1);

  um_gen_params_init (&c->params);
  c->messages = g_ptr_array_new_with_free_func ((GDestroyNotify) um_chat_store_message_free);
  c->ids = g_array_new (FALSE, FALSE, sizeof (gint32));
  c->prev_ids = g_array_new (FALSE, FALSE, sizeof (gint32));
  return c;
}

void
um_chat_conversation_free (UmChatConversation *c)
{
  if (c == NULL)
    return;
  g_free (c->id);
  g_free (c->title);
  g_clear_pointer (&c->created, g_date_time_unref);
  g_clear_pointer (&c->updated, g_date_time_unref);
  g_free (c->model_path);
  g_free (c->model_name);
  g_ptr_array_unref (c->messages);
  g_array_unref (c->ids);
  g_array_unref (c->prev_ids);
  g_free (c);
}

UmChatStoreMessage *
um_chat_conversation_add_message (UmChatConversation *c,
                                  const char         *role,
                                  const char         *content,
                                  gboolean            stopped)
{
  UmChatStoreMessage *m = g_new0 (UmChatStoreMessage, 1);

  m->role = g_strdup (role);
  m->content = g_strdup (content ? content : "");
  m->stopped = stopped;
  g_ptr_array_add (c->messages, m);
  return m;
}

void
um_chat_conversation_ensure_title (UmChatConversation *c)
{
  if (c->title != NULL && c->title[0] != '\0')
    return;
  for (guint i = 0; i < c->messages->len; i++)
    {
      UmChatStoreMessage *m = g_ptr_array_index (c->messages, i);
      if (g_strcmp0 (m->role, "user") == 0)
        {
          g_free (c->title);
          c->title = um_chat_make_title (m->content, 48);
          return;
        }
    }
}

void
um_chat_summary_free (UmChatSummary *s)
{
  if (s == NULL)
    return;
  g_free (s->path);
  g_free (s->id);
  g_free (s->title);
  g_free (s->model_name);
  g_clear_pointer (&s->updated, g_date_time_unref);
  g_free (s->error);
  g_free (s);
}

char *
um_chat_make_title (const char *text, guint max_chars)
{
  GString *out = g_string_new (NULL);
  const char *p = text ? text : "";
  gboolean space = FALSE;
  glong n_chars;

  if (!g_utf8_validate (p, -1, NULL))
    return g_string_free (out, FALSE);
  /* The first non-empty line, whitespace runs as one space. */
  while (*p != '\0' && g_unichar_isspace (g_utf8_get_char (p)))
    p = g_utf8_next_char (p);
  for (; *p != '\0' && *p != '\n' && *p != '\r'; p = g_utf8_next_char (p))
    {
      gunichar ch = g_utf8_get_char (p);
      if (g_unichar_isspace (ch))
        space = TRUE;
      else
        {
          if (space && out->len > 0)
            g_string_append_c (out, ' ');
          space = FALSE;
          g_string_append_unichar (out, ch);
        }
    }

  n_chars = g_utf8_strlen (out->str, -1);
  if (max_chars > 1 && n_chars > (glong) max_chars)
    {
      /* Cut at the last space before the limit if it is not too far back. */
      const char *limit = g_utf8_offset_to_pointer (out->str, max_chars - 1);
      const char *cut = limit;
      for (const char *q = limit; q > out->str + out->len / 3; q = g_utf8_prev_char (q))
        if (*q == ' ')
          {
            cut = q;
            break;
          }
      g_string_truncate (out, cut - out->str);
      while (out->len > 0 && out->str[out->len - 1] == ' ')
        g_string_truncate (out, out->len - 1);
      g_string_append (out, "…");
    }
  return g_string_free (out, FALSE);
}

/* ---- paths ---- */

char *
um_chat_store_default_dir (void)
{
  return g_build_filename (g_get_user_data_dir (), "unmask", "chats", NULL);
}

/* Ids name files: nothing that could leave the folder or hide a file. */
static gboolean
id_is_valid (const char *id)
{
  if (id == NULL || id[0] == '\0' || id[0] == '-' || strlen (id) > 128)
    return FALSE;
  for (const char *p = id; *p != '\0'; p++)
    if (!g_ascii_isalnum (*p) && *p != '-' && *p != '_')
      return FALSE;
  return TRUE;
}

char *
um_chat_store_path_for_id (const char *dir, const char *id)
{
  g_autofree char *name = NULL;

  if (!id_is_valid (id))
    return NULL;
  name = g_strconcat (id, ".json", NULL);
  return g_build_filename (dir, name, NULL);
}

/* A new id that sorts by creation time and names no existing file. */
static char *
new_id (const char *dir, GDateTime *now)
{
  g_autofree char *stamp = g_date_time_format (now, "%Y%m%d-%H%M%S");

  for (;;)
    {
      char *id = g_strdup_printf ("%s-%06x", stamp, g_random_int_range (0, 0x1000000));
      g_autofree char *path = um_chat_store_path_for_id (dir, id);
      if (!g_file_test (path, G_FILE_TEST_EXISTS))
        return id;
      g_free (id);
    }
}

/* ---- writing ---- */

static void
add_ids (JsonBuilder *b, const char *name, GArray *ids)
{
  json_builder_set_member_name (b, name);
  json_builder_begin_array (b);
  for (guint i = 0; ids != NULL && i < ids->len; i++)
    json_builder_add_int_value (b, g_array_index (ids, gint32, i));
  json_builder_end_array (b);
}

static void
add_string (JsonBuilder *b, const char *name, const char *value)
{
  json_builder_set_member_name (b, name);
  if (value != NULL)
    json_builder_add_string_value (b, value);
  else
    json_builder_add_null_value (b);
}

static void
add_time (JsonBuilder *b, const char *name, GDateTime *t)
{
  g_autofree char *text = t ? g_date_time_format_iso8601 (t) : NULL;
  add_string (b, name, text);
}

static JsonNode *
conversation_to_json (UmChatConversation *c)
{
  g_autoptr(JsonBuilder) b = json_builder_new ();
  const UmGenParams *p = &c->params;

  json_builder_begin_object (b);
  add_string (b, "format", FORMAT_NAME);
  um_json_add_int (b, "version", FORMAT_VERSION);
  add_string (b, "id", c->id);
  add_string (b, "title", c->title);
  add_time (b, "created", c->created);
  add_time (b, "updated", c->updated);

  json_builder_set_member_name (b, "model");
  json_builder_begin_object (b);
  add_string (b, "path", c->model_path);
  add_string (b, "name", c->model_name);
  json_builder_end_object (b);

  json_builder_set_member_name (b, "params");
  json_builder_begin_object (b);
  um_json_add_int (b, "gen_length", p->gen_length);
  um_json_add_int (b, "steps", p->steps);
  um_json_add_int (b, "block_length", p->block_length);
  um_json_add_double (b, "temperature", p->temperature);
  um_json_add_double (b, "cfg_scale", p->cfg_scale);
  add_string (b, "remasking", um_remasking_to_string (p->remasking));
  um_json_add_bool (b, "logits_eos_inf", p->logits_eos_inf);
  um_json_add_bool (b, "confidence_eos_eot_inf", p->confidence_eos_eot_inf);
  /* Dream's and RND1's schedules (generation_config.json's names). */
  add_string (b, "alg", um_alg_to_string (p->alg));
  um_json_add_double (b, "eps", p->eps);
  um_json_add_double (b, "alg_temp", p->alg_temp);
  um_json_add_double (b, "top_p", p->top_p);
  um_json_add_int (b, "top_k", p->top_k);
  um_json_add_bool (b, "greedy", p->greedy);
  /* JSON readers lose integers above 2^53: the seed goes as text. */
  json_builder_set_member_name (b, "seed");
  {
    g_autofree char *seed = g_strdup_printf ("%" G_GUINT64_FORMAT, p->seed);
    json_builder_add_string_value (b, seed);
  }
  json_builder_end_object (b);

  json_builder_set_member_name (b, "messages");
  json_builder_begin_array (b);
  for (guint i = 0; i < c->messages->len; i++)
    {
      UmChatStoreMessage *m = g_ptr_array_index (c->messages, i);
      json_builder_begin_object (b);
      add_string (b, "role", m->role);
      add_string (b, "content", m->content ? m->content : "");
      if (m->stopped)
        um_json_add_bool (b, "stopped", TRUE);
      json_builder_end_object (b);
    }
  json_builder_end_array (b);

  add_ids (b, "ids", c->ids);
  add_ids (b, "prev_ids", c->prev_ids);
  json_builder_end_object (b);
  return json_builder_get_root (b);
}

gboolean
um_chat_store_save (const char *dir, UmChatConversation *c, GError **error)
{
  g_autoptr(JsonGenerator) gen = json_generator_new ();
  g_autoptr(JsonNode) root = NULL;
  g_autoptr(GDateTime) now = g_date_time_new_now_utc ();
  g_autofree char *path = NULL;
  g_autofree char *text = NULL;
  gsize len;

  g_return_val_if_fail (dir != NULL, FALSE);
  g_return_val_if_fail (c != NULL, FALSE);

  if (g_mkdir_with_parents (dir, 0700) != 0)
    {
      int saved_errno = errno;
      g_set_error (error, G_FILE_ERROR, g_file_error_from_errno (saved_errno),
                   _("Could not create the folder “%s”: %s"), dir, g_strerror (saved_errno));
      return FALSE;
    }
  if (c->id != NULL && !id_is_valid (c->id))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_FILENAME,
                   _("“%s” is not a valid conversation id"), c->id);
      return FALSE;
    }
  if (c->id == NULL)
    c->id = new_id (dir, now);
  if (c->created == NULL)
    c->created = g_date_time_ref (now);
  g_clear_pointer (&c->updated, g_date_time_unref);
  c->updated = g_date_time_ref (now);
  um_chat_conversation_ensure_title (c);

  root = conversation_to_json (c);
  json_generator_set_root (gen, root);
  json_generator_set_pretty (gen, TRUE);
  text = json_generator_to_data (gen, &len);
  path = um_chat_store_path_for_id (dir, c->id);
  /* CONSISTENT: a temporary file renamed over the old one, so a crash leaves
   * the previous version or the new one, never half of it. */
  return g_file_set_contents_full (path, text, len, G_FILE_SET_CONTENTS_CONSISTENT, 0600, error);
}

/* ---- reading ---- */

/* Sets a "file: what is wrong" error; returns NULL for the caller to return. */
static gpointer
corrupt (GError **error, const char *path, const char *what)
{
  g_autofree char *name = g_path_get_basename (path);
  g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA, "%s: %s", name, what);
  return NULL;
}

/* Optional string member: absent or null gives NULL; another type fails. */
static gboolean
get_opt_string (JsonObject *o, const char *name, char **out)
{
  JsonNode *n = json_object_get_member (o, name);

  *out = NULL;
  if (n == NULL || JSON_NODE_HOLDS_NULL (n))
    return TRUE;
  if (!JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_STRING)
    return FALSE;
  *out = g_strdup (json_node_get_string (n));
  return TRUE;
}

static gboolean
get_opt_time (JsonObject *o, const char *name, GDateTime **out)
{
  g_autofree char *text = NULL;

  *out = NULL;
  if (!get_opt_string (o, name, &text))
    return FALSE;
  if (text == NULL)
    return TRUE;
  *out = g_date_time_new_from_iso8601 (text, NULL);
  return *out != NULL;
}

static gboolean
get_ids (JsonObject *o, const char *name, GArray *ids)
{
  JsonNode *n = json_object_get_member (o, name);
  JsonArray *arr;

  if (n == NULL || JSON_NODE_HOLDS_NULL (n))
    return TRUE;
  if (!JSON_NODE_HOLDS_ARRAY (n))
    return FALSE;
  arr = json_node_get_array (n);
  for (guint i = 0; i < json_array_get_length (arr); i++)
    {
      JsonNode *e = json_array_get_element (arr, i);
      gint64 v;
      gint32 id;
      if (!JSON_NODE_HOLDS_VALUE (e) || json_node_get_value_type (e) != G_TYPE_INT64)
        return FALSE;
      v = json_node_get_int (e);
      if (v < 0 || v > G_MAXINT32)
        return FALSE;
      id = (gint32) v;
      g_array_append_val (ids, id);
    }
  return TRUE;
}

/* Parameters are informational (the page's own ones are used to continue):
 * members of the wrong type keep their defaults. */
static void
read_params (JsonObject *o, UmGenParams *p)
{
  const char *s;
  JsonNode *n;

  um_gen_params_init (p);
  if (o == NULL)
    return;
#define GET_INT(field)                                                             \
  n = json_object_get_member (o, #field);                                          \
  if (n && JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_INT64) \
    p->field = (int) CLAMP (json_node_get_int (n), 0, G_MAXINT);
#define GET_DOUBLE(field)                                                          \
  n = json_object_get_member (o, #field);                                          \
  if (n && JSON_NODE_HOLDS_VALUE (n)                                               \
      && (json_node_get_value_type (n) == G_TYPE_DOUBLE || json_node_get_value_type (n) == G_TYPE_INT64)) \
    p->field = json_node_get_double (n);
#define GET_BOOL(field)                                                            \
  n = json_object_get_member (o, #field);                                          \
  if (n && JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_BOOLEAN) \
    p->field = json_node_get_boolean (n);
  GET_INT (gen_length)
  GET_INT (steps)
  GET_INT (block_length)
  GET_DOUBLE (temperature)
  GET_DOUBLE (cfg_scale)
  GET_BOOL (logits_eos_inf)
  GET_BOOL (confidence_eos_eot_inf)
  GET_DOUBLE (eps)
  GET_DOUBLE (alg_temp)
  GET_DOUBLE (top_p)
  GET_INT (top_k)
  GET_BOOL (greedy)
#undef GET_INT
#undef GET_DOUBLE
#undef GET_BOOL
  /* A name that is not one is ignored: the value stays. */
  um_remasking_from_string (um_json_get_string (o, "remasking"), &p->remasking);
  um_alg_from_string (um_json_get_string (o, "alg"), &p->alg);
  if ((s = um_json_get_string (o, "seed")) != NULL)
    {
      guint64 seed;
      if (g_ascii_string_to_unsigned (s, 10, 0, G_MAXUINT64, &seed, NULL))
        p->seed = seed;
    }
  else if (n && JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_INT64)
    p->seed = (guint64) MAX (json_node_get_int (n), 0);
}

static UmChatConversation *
conversation_from_json (JsonNode *root, const char *path, GError **error)
{
  g_autoptr(UmChatConversation) c = um_chat_conversation_new ();
  g_autofree char *base = g_path_get_basename (path);
  g_autofree char *format = NULL;
  JsonObject *o, *model = NULL, *params = NULL;
  JsonNode *n;
  JsonArray *msgs;

  if (root == NULL || !JSON_NODE_HOLDS_OBJECT (root))
    return corrupt (error, path, _("not a JSON object"));
  o = json_node_get_object (root);
  if (!get_opt_string (o, "format", &format) || (format != NULL && !g_str_equal (format, FORMAT_NAME)))
    return corrupt (error, path, _("not an Unmask conversation"));
  n = json_object_get_member (o, "version");
  if (n != NULL && (!JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_INT64
                    || json_node_get_int (n) > FORMAT_VERSION))
    return corrupt (error, path, _("written by a newer version of Unmask"));

  /* The file name is the id: that is the file a later save replaces. */
  if (g_str_has_suffix (base, ".json"))
    base[strlen (base) - 5] = '\0';
  if (!id_is_valid (base))
    return corrupt (error, path, _("the file name is not a conversation id"));
  c->id = g_strdup (base);

  if (!get_opt_string (o, "title", &c->title)
      || !get_opt_time (o, "created", &c->created)
      || !get_opt_time (o, "updated", &c->updated))
    return corrupt (error, path, _("a title or a date is malformed"));

  n = json_object_get_member (o, "model");
  if (n != NULL && JSON_NODE_HOLDS_OBJECT (n))
    model = json_node_get_object (n);
  if (model != NULL && (!get_opt_string (model, "path", &c->model_path)
                        || !get_opt_string (model, "name", &c->model_name)))
    return corrupt (error, path, _("the model is malformed"));
  n = json_object_get_member (o, "params");
  if (n != NULL && JSON_NODE_HOLDS_OBJECT (n))
    params = json_node_get_object (n);
  read_params (params, &c->params);

  n = json_object_get_member (o, "messages");
  if (n == NULL || !JSON_NODE_HOLDS_ARRAY (n))
    return corrupt (error, path, _("the messages are missing"));
  msgs = json_node_get_array (n);
  for (guint i = 0; i < json_array_get_length (msgs); i++)
    {
      JsonNode *e = json_array_get_element (msgs, i);
      JsonObject *mo;
      g_autofree char *role = NULL, *content = NULL;
      gboolean stopped = FALSE;

      if (!JSON_NODE_HOLDS_OBJECT (e))
        return corrupt (error, path, _("a message is malformed"));
      mo = json_node_get_object (e);
      if (!get_opt_string (mo, "role", &role) || !get_opt_string (mo, "content", &content)
          || content == NULL || (g_strcmp0 (role, "user") != 0 && g_strcmp0 (role, "assistant") != 0))
        return corrupt (error, path, _("a message is malformed"));
      n = json_object_get_member (mo, "stopped");
      if (n != NULL && JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_BOOLEAN)
        stopped = json_node_get_boolean (n);
      um_chat_conversation_add_message (c, role, content, stopped);
    }

  if (!get_ids (o, "ids", c->ids) || !get_ids (o, "prev_ids", c->prev_ids))
    return corrupt (error, path, _("the token history is malformed"));

  um_chat_conversation_ensure_title (c);
  return g_steal_pointer (&c);
}

UmChatConversation *
um_chat_store_load (const char *path, GError **error)
{
  /* Far above a long conversation's few hundred kB. */
  static const UmJsonLimits limits = { .max_bytes = (gsize) 64 << 20 };
  g_autofree char *name = NULL;
  g_autoptr(JsonNode) root = NULL;
  g_autoptr(GError) local = NULL;

  g_return_val_if_fail (path != NULL, NULL);

  name = g_path_get_basename (path);
  root = um_json_parse_file (path, name, &limits, &local);
  if (root == NULL)
    {
      /* Not JSON is a damaged conversation; a file that cannot be read is
       * reported as it is. */
      if (g_error_matches (local, UM_ERROR, UM_ERROR_FORMAT))
        g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA, local->message);
      else
        g_propagate_error (error, g_steal_pointer (&local));
      return NULL;
    }
  return conversation_from_json (root, path, error);
}

static int
compare_summaries (gconstpointer a, gconstpointer b)
{
  const UmChatSummary *x = *(UmChatSummary * const *) a;
  const UmChatSummary *y = *(UmChatSummary * const *) b;
  int cmp;

  if ((x->error != NULL) != (y->error != NULL))
    return x->error != NULL ? 1 : -1;
  if (x->updated != NULL && y->updated != NULL && (cmp = g_date_time_compare (y->updated, x->updated)) != 0)
    return cmp;
  if ((x->updated != NULL) != (y->updated != NULL))
    return x->updated != NULL ? -1 : 1;
  return g_strcmp0 (y->id, x->id);
}

GPtrArray *
um_chat_store_list (const char *dir, GError **error)
{
  g_autoptr(GPtrArray) list = g_ptr_array_new_with_free_func ((GDestroyNotify) um_chat_summary_free);
  g_autoptr(GDir) d = NULL;
  g_autoptr(GError) local = NULL;
  const char *name;

  g_return_val_if_fail (dir != NULL, NULL);

  d = g_dir_open (dir, 0, &local);
  if (d == NULL)
    {
      if (g_error_matches (local, G_FILE_ERROR, G_FILE_ERROR_NOENT))
        return g_steal_pointer (&list);
      g_propagate_error (error, g_steal_pointer (&local));
      return NULL;
    }
  /* Only NAME.json: g_file_set_contents' temporary files (NAME.json.XXXXXX)
   * and anything else are not conversations. */
  while ((name = g_dir_read_name (d)) != NULL)
    {
      g_autoptr(GError) load_error = NULL;
      g_autoptr(UmChatConversation) c = NULL;
      UmChatSummary *s;

      if (!g_str_has_suffix (name, ".json") || name[0] == '.')
        continue;
      s = g_new0 (UmChatSummary, 1);
      s->path = g_build_filename (dir, name, NULL);
      s->id = g_strndup (name, strlen (name) - 5);
      c = um_chat_store_load (s->path, &load_error);
      if (c != NULL)
        {
          s->title = g_strdup (c->title ? c->title : "");
          s->model_name = g_strdup (c->model_name);
          s->updated = c->updated ? g_date_time_ref (c->updated)
                       : c->created ? g_date_time_ref (c->created) : NULL;
          s->n_messages = c->messages->len;
        }
      else
        s->error = g_strdup (load_error->message);
      if (s->updated == NULL)
        {
          g_autoptr(GFile) file = g_file_new_for_path (s->path);
          g_autoptr(GFileInfo) info = g_file_query_info (file, G_FILE_ATTRIBUTE_TIME_MODIFIED,
                                                         G_FILE_QUERY_INFO_NONE, NULL, NULL);
          if (info != NULL)
            s->updated = g_file_info_get_modification_date_time (info);
        }
      g_ptr_array_add (list, s);
    }
  g_ptr_array_sort (list, compare_summaries);
  return g_steal_pointer (&list);
}

gboolean
um_chat_store_delete (const char *dir, const char *id, GError **error)
{
  g_autofree char *path = um_chat_store_path_for_id (dir, id);
  g_autoptr(GFile) file = NULL;

  if (path == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_FILENAME,
                   _("“%s” is not a valid conversation id"), id ? id : "");
      return FALSE;
    }
  file = g_file_new_for_path (path);
  return g_file_delete (file, NULL, error);
}

/* ---- Markdown ---- */

/* Content goes in verbatim; a code fence left open (an answer stopped in the
 * middle of a code block) is closed so it does not swallow what follows. */
static void
append_content (GString *out, const char *content)
{
  g_auto(GStrv) lines = g_strsplit (content ? content : "", "\n", -1);
  char fence = 0;
  gsize fence_len = 0;

  g_string_append (out, content ? content : "");
  if (out->len > 0 && out->str[out->len - 1] != '\n')
    g_string_append_c (out, '\n');
  for (guint i = 0; lines[i] != NULL; i++)
    {
      const char *l = lines[i];
      gsize run = 0;
      int indent = 0;

      while (*l == ' ' && indent < 4)
        l++, indent++;
      if (indent > 3 || (*l != '`' && *l != '~'))
        continue;
      while (l[run] == *l)
        run++;
      if (run < 3)
        continue;
      if (fence == 0)
        fence = *l, fence_len = run;
      else if (*l == fence && run >= fence_len && l[run + strspn (l + run, " \t")] == '\0')
        fence = 0;
    }
  if (fence != 0)
    {
      for (gsize i = 0; i < fence_len; i++)
        g_string_append_c (out, fence);
      g_string_append_c (out, '\n');
    }
}

char *
um_chat_conversation_to_markdown (UmChatConversation *c)
{
  GString *out = g_string_new (NULL);
  g_autofree char *title = NULL;

  g_return_val_if_fail (c != NULL, NULL);

  title = um_chat_make_title (c->title && c->title[0] ? c->title : _("Conversation"), 200);
  g_string_append_printf (out, "# %s\n", title);
  for (guint i = 0; i < c->messages->len; i++)
    {
      UmChatStoreMessage *m = g_ptr_array_index (c->messages, i);
      gboolean user = g_strcmp0 (m->role, "user") == 0;

      g_string_append_printf (out, "\n**%s**\n\n", user ? _("You:") : _("Assistant:"));
      if (m->content != NULL && m->content[0] != '\0')
        append_content (out, m->content);
      if (m->stopped)
        g_string_append_printf (out, "%s_(%s)_\n",
                                m->content && m->content[0] ? "\n" : "", _("stopped"));
    }
  return g_string_free (out, FALSE);
}

/* um-chat-conversations.c — the Chat page's saved conversations (see
 * um-chat-page.h): the Chats popover that lists them, opens one and deletes
 * one (after asking), and the export of the one shown as Markdown.
 */
#include "config.h"

#include "um-chat-page-private.h"

#include <glib/gi18n.h>
#include <string.h>

/* ---- saved conversations ---- */

static char *
format_date (GDateTime *t)
{
  g_autoptr(GDateTime) local = g_date_time_to_local (t);
  g_autoptr(GDateTime) now = g_date_time_new_now_local ();

  if (g_date_time_get_year (local) == g_date_time_get_year (now)
      && g_date_time_get_day_of_year (local) == g_date_time_get_day_of_year (now))
    /* Translators: a date format (see g_date_time_format), for today
     * xgettext:no-c-format */
    return g_date_time_format (local, _("Today %H:%M"));
  if (g_date_time_get_year (local) == g_date_time_get_year (now))
    /* Translators: a date format (see g_date_time_format), for this year
     * xgettext:no-c-format */
    return g_date_time_format (local, _("%-e %B, %H:%M"));
  /* Translators: a date format (see g_date_time_format), for older dates
   * xgettext:no-c-format */
  return g_date_time_format (local, _("%-e %B %Y"));
}

static void on_delete_response (AdwMessageDialog *dialog, const char *response, UmChatPage *self);

static void
confirm_delete (UmChatPage *self, const char *id, const char *title)
{
  GtkRoot *root = gtk_widget_get_root (GTK_WIDGET (self));
  GtkWidget *dialog;

  if (!GTK_IS_WINDOW (root))
    return;
  dialog = adw_message_dialog_new (GTK_WINDOW (root), _("Delete Conversation?"), NULL);
  adw_message_dialog_format_body (ADW_MESSAGE_DIALOG (dialog),
                                  _("“%s” will be deleted permanently."),
                                  title && title[0] ? title : _("Untitled"));
  adw_message_dialog_add_responses (ADW_MESSAGE_DIALOG (dialog),
                                    "cancel", _("_Cancel"),
                                    "delete", _("_Delete"),
                                    NULL);
  adw_message_dialog_set_response_appearance (ADW_MESSAGE_DIALOG (dialog), "delete",
                                              ADW_RESPONSE_DESTRUCTIVE);
  adw_message_dialog_set_default_response (ADW_MESSAGE_DIALOG (dialog), "cancel");
  adw_message_dialog_set_close_response (ADW_MESSAGE_DIALOG (dialog), "cancel");
  g_object_set_data_full (G_OBJECT (dialog), "um-chat-id", g_strdup (id), g_free);
  g_signal_connect_object (dialog, "response", G_CALLBACK (on_delete_response), self, 0);
  gtk_window_present (GTK_WINDOW (dialog));
}

static void
on_row_delete_clicked (GtkButton *button, UmChatPage *self)
{
  GtkWidget *row = gtk_widget_get_ancestor (GTK_WIDGET (button), ADW_TYPE_ACTION_ROW);

  gtk_popover_popdown (self->chats_popover);
  confirm_delete (self, g_object_get_data (G_OBJECT (row), "um-chat-id"),
                  adw_preferences_row_get_title (ADW_PREFERENCES_ROW (row)));
}

static GtkWidget *
chat_row_new (UmChatPage *self, UmChatSummary *s)
{
  GtkWidget *row = adw_action_row_new ();

  adw_preferences_row_set_use_markup (ADW_PREFERENCES_ROW (row), FALSE);
  g_object_set_data_full (G_OBJECT (row), "um-chat-id", g_strdup (s->id), g_free);
  if (s->error != NULL)
    {
      /* Shown so the user knows it is there; never opened, deleted or overwritten. */
      GtkWidget *icon = gtk_image_new_from_icon_name ("dialog-warning-symbolic");
      adw_preferences_row_set_title (ADW_PREFERENCES_ROW (row), _("Unreadable Conversation"));
      adw_action_row_set_subtitle (ADW_ACTION_ROW (row), s->error);
      adw_action_row_set_subtitle_lines (ADW_ACTION_ROW (row), 3);
      adw_action_row_add_prefix (ADW_ACTION_ROW (row), icon);
      gtk_list_box_row_set_activatable (GTK_LIST_BOX_ROW (row), FALSE);
      return row;
    }
  {
    GtkWidget *button = gtk_button_new_from_icon_name ("user-trash-symbolic");
    g_autofree char *date = s->updated ? format_date (s->updated) : g_strdup ("");
    g_autofree char *subtitle = NULL;

    if (s->model_name != NULL && s->model_name[0] != '\0')
      subtitle = g_strdup_printf ("%s · %s", date, s->model_name);
    else
      subtitle = g_strdup (date);
    adw_preferences_row_set_title (ADW_PREFERENCES_ROW (row), s->title && s->title[0] ? s->title : _("Untitled"));
    adw_action_row_set_title_lines (ADW_ACTION_ROW (row), 1);
    adw_action_row_set_subtitle (ADW_ACTION_ROW (row), subtitle);
    adw_action_row_set_subtitle_lines (ADW_ACTION_ROW (row), 1);
    if (g_strcmp0 (s->id, self->conv->id) == 0)
      adw_action_row_add_prefix (ADW_ACTION_ROW (row), gtk_image_new_from_icon_name ("object-select-symbolic"));
    gtk_widget_set_valign (button, GTK_ALIGN_CENTER);
    gtk_widget_add_css_class (button, "flat");
    gtk_widget_set_tooltip_text (button, _("Delete Conversation"));
    gtk_accessible_update_property (GTK_ACCESSIBLE (button), GTK_ACCESSIBLE_PROPERTY_LABEL,
                                    _("Delete Conversation"), -1);
    g_signal_connect_object (button, "clicked", G_CALLBACK (on_row_delete_clicked), self, 0);
    adw_action_row_add_suffix (ADW_ACTION_ROW (row), button);
    gtk_list_box_row_set_activatable (GTK_LIST_BOX_ROW (row), TRUE);
  }
  return row;
}

static void
refresh_chat_list (UmChatPage *self)
{
  g_autofree char *dir = um_chat_page_get_store_dir (self);
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) list = um_chat_store_list (dir, &error);
  GtkWidget *child;

  while ((child = gtk_widget_get_first_child (GTK_WIDGET (self->chats_list))) != NULL)
    gtk_list_box_remove (self->chats_list, child);
  if (list == NULL)
    {
      GtkWidget *row = adw_action_row_new ();
      adw_preferences_row_set_use_markup (ADW_PREFERENCES_ROW (row), FALSE);
      adw_preferences_row_set_title (ADW_PREFERENCES_ROW (row), _("Could not list the saved conversations"));
      adw_action_row_set_subtitle (ADW_ACTION_ROW (row), error->message);
      gtk_list_box_row_set_activatable (GTK_LIST_BOX_ROW (row), FALSE);
      gtk_list_box_append (self->chats_list, row);
      return;
    }
  for (guint i = 0; i < list->len; i++)
    gtk_list_box_append (self->chats_list, chat_row_new (self, g_ptr_array_index (list, i)));
}

void
um_chat_page_on_chats_popover_show (GtkPopover *popover, UmChatPage *self)
{
  refresh_chat_list (self);
}

void
um_chat_page_on_chat_row_activated (GtkListBox *list, GtkListBoxRow *row, UmChatPage *self)
{
  const char *id = g_object_get_data (G_OBJECT (row), "um-chat-id");
  g_autoptr(GError) error = NULL;

  gtk_popover_popdown (self->chats_popover);
  if (id == NULL || g_strcmp0 (id, self->conv->id) == 0)
    return;
  if (!um_chat_page_open_conversation (self, id, &error))
    {
      g_autofree char *msg = g_strdup_printf (_("Could not open the conversation: %s"), error->message);
      um_chat_page_show_error (self, msg);
    }
}

static void
on_delete_response (AdwMessageDialog *dialog, const char *response, UmChatPage *self)
{
  const char *id = g_object_get_data (G_OBJECT (dialog), "um-chat-id");
  g_autofree char *dir = NULL;
  g_autoptr(GError) error = NULL;

  if (g_strcmp0 (response, "delete") != 0 || id == NULL)
    return;
  dir = um_chat_page_get_store_dir (self);
  if (!um_chat_store_delete (dir, id, &error))
    {
      g_autofree char *msg = g_strdup_printf (_("Could not delete the conversation: %s"), error->message);
      um_chat_page_show_error (self, msg);
      return;
    }
  if (g_strcmp0 (id, self->conv->id) == 0 && self->run == NULL)
    um_chat_page_new_chat (self);
  else if (g_strcmp0 (id, self->conv->id) == 0)
    g_clear_pointer (&self->conv->id, g_free);   /* the next save makes a new file */
  um_chat_page_update_state (self);
}

void
um_chat_page_delete_activated (GtkWidget *widget, const char *action_name, GVariant *parameter)
{
  UmChatPage *self = UM_CHAT_PAGE (widget);

  if (self->conv->id != NULL && self->run == NULL)
    confirm_delete (self, self->conv->id, self->conv->title);
}

/* ---- export ---- */

gboolean
um_chat_page_export_markdown (UmChatPage *self, GFile *file, GError **error)
{
  g_autofree char *md = NULL;

  g_return_val_if_fail (UM_IS_CHAT_PAGE (self), FALSE);
  g_return_val_if_fail (G_IS_FILE (file), FALSE);

  um_chat_conversation_ensure_title (self->conv);
  md = um_chat_conversation_to_markdown (self->conv);
  return g_file_replace_contents (file, md, strlen (md), NULL, FALSE, G_FILE_CREATE_NONE, NULL, NULL, error);
}

static void
on_export_response (GtkNativeDialog *dialog, int response, UmChatPage *self)
{
  if (response == GTK_RESPONSE_ACCEPT)
    {
      g_autoptr(GFile) file = gtk_file_chooser_get_file (GTK_FILE_CHOOSER (dialog));
      g_autoptr(GError) error = NULL;

      if (file != NULL && !um_chat_page_export_markdown (self, file, &error))
        {
          g_autofree char *msg = g_strdup_printf (_("Could not export the conversation: %s"), error->message);
          um_chat_page_show_error (self, msg);
        }
      else if (file != NULL)
        {
          g_autofree char *name = g_file_get_basename (file);
          g_autofree char *msg = g_strdup_printf (_("Exported as “%s”"), name);
          um_chat_page_add_toast (self, msg);
        }
    }
  gtk_native_dialog_destroy (dialog);
  g_clear_object (&self->export_dialog);
}

/* A file name from the title: no path separators, no hidden files. */
static char *
export_file_name (UmChatConversation *c)
{
  g_autofree char *title = um_chat_make_title (c->title && c->title[0] ? c->title : _("Conversation"), 60);
  GString *name = g_string_new (NULL);

  for (const char *p = title; *p != '\0'; p++)
    g_string_append_c (name, (*p == '/' || *p == '\\' || (name->len == 0 && *p == '.')) ? '-' : *p);
  if (name->len == 0)
    g_string_append (name, "conversation");
  g_string_append (name, ".md");
  return g_string_free (name, FALSE);
}

void
um_chat_page_export_activated (GtkWidget *widget, const char *action_name, GVariant *parameter)
{
  UmChatPage *self = UM_CHAT_PAGE (widget);
  GtkRoot *root = gtk_widget_get_root (widget);
  GtkFileChooserNative *native;
  g_autoptr(GtkFileFilter) filter = gtk_file_filter_new ();
  g_autofree char *name = NULL;

  if (self->export_dialog != NULL || self->conv->messages->len == 0)
    return;
  um_chat_conversation_ensure_title (self->conv);
  native = gtk_file_chooser_native_new (_("Export Conversation"),
                                        GTK_IS_WINDOW (root) ? GTK_WINDOW (root) : NULL,
                                        GTK_FILE_CHOOSER_ACTION_SAVE, _("_Export"), _("_Cancel"));
  gtk_native_dialog_set_modal (GTK_NATIVE_DIALOG (native), TRUE);
  name = export_file_name (self->conv);
  gtk_file_chooser_set_current_name (GTK_FILE_CHOOSER (native), name);
  gtk_file_filter_set_name (filter, _("Markdown"));
  gtk_file_filter_add_mime_type (filter, "text/markdown");
  gtk_file_filter_add_pattern (filter, "*.md");
  gtk_file_chooser_add_filter (GTK_FILE_CHOOSER (native), filter);
  g_signal_connect_object (native, "response", G_CALLBACK (on_export_response), self, 0);
  self->export_dialog = GTK_NATIVE_DIALOG (native);
  gtk_native_dialog_show (self->export_dialog);
}

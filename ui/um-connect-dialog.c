/* um-connect-dialog.c — "Connect to a Server…" (see um-connect-dialog.h). */
#include "config.h"

#include "um-connect-dialog.h"

#include <glib/gi18n.h>

#include "um-remote-generator.h"

struct _UmConnectDialog {
  AdwWindow       parent_instance;

  /* template */
  AdwEntryRow    *url_row;
  AdwEntryRow    *key_row;
  GtkListBox     *list;
  GtkLabel       *status_label;
  GtkButton      *connect_button;
  GtkButton      *list_button;
  GtkSpinner     *spinner;

  GCancellable   *cancellable;   /* the listing in progress */
  GPtrArray      *rows;          /* GtkWidget*, one per model */
  char           *listed_url;    /* what the list is of */
  char           *listed_key;
};

G_DEFINE_FINAL_TYPE (UmConnectDialog, um_connect_dialog, ADW_TYPE_WINDOW)

enum { PROP_0, PROP_BUSY, N_PROPS };
static GParamSpec *props[N_PROPS];

enum { CONNECT, N_SIGNALS };
static guint signals[N_SIGNALS];

static void
set_status (UmConnectDialog *self, const char *text, gboolean error)
{
  gtk_label_set_text (self->status_label, text ? text : "");
  gtk_widget_set_visible (GTK_WIDGET (self->status_label), text != NULL);
  if (error)
    {
      gtk_widget_remove_css_class (GTK_WIDGET (self->status_label), "dim-label");
      gtk_widget_add_css_class (GTK_WIDGET (self->status_label), "error");
    }
  else
    {
      gtk_widget_remove_css_class (GTK_WIDGET (self->status_label), "error");
      gtk_widget_add_css_class (GTK_WIDGET (self->status_label), "dim-label");
    }
}

static void
set_busy (UmConnectDialog *self, gboolean busy)
{
  gtk_spinner_set_spinning (self->spinner, busy);
  gtk_widget_set_sensitive (GTK_WIDGET (self->list_button), !busy);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_BUSY]);
}

static GtkCheckButton *
row_check (GtkWidget *row)
{
  return g_object_get_data (G_OBJECT (row), "um-check");
}

static void
update_connect (UmConnectDialog *self)
{
  gboolean chosen = FALSE;

  for (guint i = 0; i < self->rows->len; i++)
    chosen |= gtk_check_button_get_active (row_check (g_ptr_array_index (self->rows, i)));
  gtk_widget_set_sensitive (GTK_WIDGET (self->connect_button), chosen);
}

static void
clear_list (UmConnectDialog *self)
{
  GtkWidget *child;

  while ((child = gtk_widget_get_first_child (GTK_WIDGET (self->list))) != NULL)
    gtk_list_box_remove (self->list, child);
  g_ptr_array_set_size (self->rows, 0);
  gtk_widget_set_visible (GTK_WIDGET (self->list), FALSE);
  g_clear_pointer (&self->listed_url, g_free);
  g_clear_pointer (&self->listed_key, g_free);
  update_connect (self);
}

static GtkWidget *
make_row (UmConnectDialog *self, const UmRemoteModel *m)
{
  GtkWidget *row = adw_action_row_new ();
  GtkWidget *check = gtk_check_button_new ();
  g_autofree char *subtitle = NULL;

  if (m->unmask && m->arch != NULL)
    /* Translators: a server's model: Unmask, with the model's family, e.g. "Unmask · llada" */
    subtitle = g_strdup_printf (_("Unmask · %s · every step shown"), m->arch);
  else if (m->unmask)
    subtitle = g_strdup (_("Unmask · every step shown"));
  else
    subtitle = g_strdup (_("OpenAI-compatible · the text as it arrives"));
  adw_preferences_row_set_use_markup (ADW_PREFERENCES_ROW (row), FALSE);
  adw_preferences_row_set_title (ADW_PREFERENCES_ROW (row), m->id);
  adw_action_row_set_subtitle (ADW_ACTION_ROW (row), subtitle);
  gtk_widget_set_valign (check, GTK_ALIGN_CENTER);
  if (self->rows->len > 0)
    gtk_check_button_set_group (GTK_CHECK_BUTTON (check), row_check (g_ptr_array_index (self->rows, 0)));
  adw_action_row_add_prefix (ADW_ACTION_ROW (row), check);
  adw_action_row_set_activatable_widget (ADW_ACTION_ROW (row), check);
  g_signal_connect_object (check, "toggled", G_CALLBACK (update_connect), self, G_CONNECT_SWAPPED);
  g_object_set_data (G_OBJECT (row), "um-check", check);
  g_object_set_data_full (G_OBJECT (row), "um-model", g_strdup (m->id), g_free);
  return row;
}

static void
on_listed (GObject *source, GAsyncResult *result, gpointer user_data)
{
  g_autoptr(UmConnectDialog) self = user_data;
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) models = um_remote_list_models_finish (result, &error);

  if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    return;   /* another listing, or the dialog closed */
  g_clear_object (&self->cancellable);
  set_busy (self, FALSE);
  if (models == NULL)
    {
      /* Translators: %s says why, e.g. "Could not connect: Connection refused" */
      g_autofree char *msg = g_strdup_printf (_("Could not list the server’s models: %s"), error->message);
      set_status (self, msg, TRUE);
      return;
    }
  if (models->len == 0)
    {
      set_status (self, _("The server lists no models."), TRUE);
      return;
    }
  self->listed_url = g_strdup (gtk_editable_get_text (GTK_EDITABLE (self->url_row)));
  self->listed_key = g_strdup (gtk_editable_get_text (GTK_EDITABLE (self->key_row)));
  for (guint i = 0; i < models->len; i++)
    {
      GtkWidget *row = make_row (self, g_ptr_array_index (models, i));
      g_ptr_array_add (self->rows, row);
      gtk_list_box_append (self->list, row);
    }
  gtk_check_button_set_active (row_check (g_ptr_array_index (self->rows, 0)), TRUE);
  gtk_widget_set_visible (GTK_WIDGET (self->list), TRUE);
  set_status (self, NULL, FALSE);
  update_connect (self);
  gtk_widget_grab_focus (GTK_WIDGET (self->connect_button));
}

void
um_connect_dialog_list_models (UmConnectDialog *self)
{
  const char *url, *key;

  g_return_if_fail (UM_IS_CONNECT_DIALOG (self));
  if (self->cancellable != NULL)
    g_cancellable_cancel (self->cancellable);
  g_clear_object (&self->cancellable);
  clear_list (self);
  url = gtk_editable_get_text (GTK_EDITABLE (self->url_row));
  key = gtk_editable_get_text (GTK_EDITABLE (self->key_row));
  if (url == NULL || url[0] == '\0')
    {
      set_status (self, _("Enter the server’s address to list its models."), FALSE);
      return;
    }
  self->cancellable = g_cancellable_new ();
  set_status (self, _("Asking the server…"), FALSE);
  set_busy (self, TRUE);
  um_remote_list_models_async (url, key[0] != '\0' ? key : NULL, self->cancellable, on_listed, g_object_ref (self));
}

gboolean
um_connect_dialog_get_busy (UmConnectDialog *self)
{
  g_return_val_if_fail (UM_IS_CONNECT_DIALOG (self), FALSE);
  return self->cancellable != NULL;
}

guint
um_connect_dialog_get_n_models (UmConnectDialog *self)
{
  g_return_val_if_fail (UM_IS_CONNECT_DIALOG (self), 0);
  return self->rows->len;
}

void
um_connect_dialog_select (UmConnectDialog *self, guint index)
{
  g_return_if_fail (UM_IS_CONNECT_DIALOG (self));
  if (index < self->rows->len)
    gtk_check_button_set_active (row_check (g_ptr_array_index (self->rows, index)), TRUE);
}

const char *
um_connect_dialog_get_status (UmConnectDialog *self)
{
  g_return_val_if_fail (UM_IS_CONNECT_DIALOG (self), NULL);
  return gtk_widget_get_visible (GTK_WIDGET (self->status_label)) ? gtk_label_get_text (self->status_label) : NULL;
}

void
um_connect_dialog_set_url (UmConnectDialog *self, const char *url)
{
  g_return_if_fail (UM_IS_CONNECT_DIALOG (self));
  gtk_editable_set_text (GTK_EDITABLE (self->url_row), url ? url : "");
}

void
um_connect_dialog_set_key (UmConnectDialog *self, const char *key)
{
  g_return_if_fail (UM_IS_CONNECT_DIALOG (self));
  gtk_editable_set_text (GTK_EDITABLE (self->key_row), key ? key : "");
}

void
um_connect_dialog_connect (UmConnectDialog *self)
{
  const char *model = NULL;

  g_return_if_fail (UM_IS_CONNECT_DIALOG (self));
  for (guint i = 0; i < self->rows->len; i++)
    if (gtk_check_button_get_active (row_check (g_ptr_array_index (self->rows, i))))
      model = g_object_get_data (G_OBJECT (g_ptr_array_index (self->rows, i)), "um-model");
  if (model == NULL || self->listed_url == NULL)
    return;
  /* The address and key the list came from, whatever the entries say now. */
  g_signal_emit (self, signals[CONNECT], 0, self->listed_url,
                 self->listed_key != NULL && self->listed_key[0] != '\0' ? self->listed_key : NULL, model);
  gtk_window_destroy (GTK_WINDOW (self));
}

static void
on_row_activated (UmConnectDialog *self, GtkListBoxRow *row)
{
  gtk_check_button_set_active (row_check (GTK_WIDGET (row)), TRUE);
}

static void
on_cancel_clicked (UmConnectDialog *self)
{
  gtk_window_destroy (GTK_WINDOW (self));
}

/* Another address or key: the list shown is no longer the server's. */
static void
on_entry_changed (UmConnectDialog *self)
{
  if (self->listed_url != NULL
      && (g_strcmp0 (self->listed_url, gtk_editable_get_text (GTK_EDITABLE (self->url_row))) != 0
          || g_strcmp0 (self->listed_key, gtk_editable_get_text (GTK_EDITABLE (self->key_row))) != 0))
    {
      clear_list (self);
      set_status (self, _("Press Return or List Models to list this server’s models."), FALSE);
    }
}

static void
um_connect_dialog_get_property (GObject *object, guint id, GValue *value, GParamSpec *pspec)
{
  UmConnectDialog *self = UM_CONNECT_DIALOG (object);
  switch (id)
    {
    case PROP_BUSY: g_value_set_boolean (value, self->cancellable != NULL); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
um_connect_dialog_dispose (GObject *object)
{
  UmConnectDialog *self = UM_CONNECT_DIALOG (object);

  if (self->cancellable != NULL)
    g_cancellable_cancel (self->cancellable);
  g_clear_object (&self->cancellable);
  gtk_widget_dispose_template (GTK_WIDGET (self), UM_TYPE_CONNECT_DIALOG);
  G_OBJECT_CLASS (um_connect_dialog_parent_class)->dispose (object);
}

static void
um_connect_dialog_finalize (GObject *object)
{
  UmConnectDialog *self = UM_CONNECT_DIALOG (object);

  g_ptr_array_unref (self->rows);
  g_free (self->listed_url);
  g_free (self->listed_key);
  G_OBJECT_CLASS (um_connect_dialog_parent_class)->finalize (object);
}

static void
um_connect_dialog_class_init (UmConnectDialogClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);

  object_class->get_property = um_connect_dialog_get_property;
  object_class->dispose = um_connect_dialog_dispose;
  object_class->finalize = um_connect_dialog_finalize;

  props[PROP_BUSY] = g_param_spec_boolean ("busy", NULL, NULL, FALSE,
                                           G_PARAM_READABLE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties (object_class, N_PROPS, props);

  /* (url, key or NULL, model id) */
  signals[CONNECT] = g_signal_new ("connect", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                                   G_TYPE_NONE, 3, G_TYPE_STRING, G_TYPE_STRING, G_TYPE_STRING);

  gtk_widget_class_set_template_from_resource (widget_class, "/io/github/unmask/Unmask/ui/um-connect-dialog.ui");
  gtk_widget_class_bind_template_child (widget_class, UmConnectDialog, url_row);
  gtk_widget_class_bind_template_child (widget_class, UmConnectDialog, key_row);
  gtk_widget_class_bind_template_child (widget_class, UmConnectDialog, list);
  gtk_widget_class_bind_template_child (widget_class, UmConnectDialog, status_label);
  gtk_widget_class_bind_template_child (widget_class, UmConnectDialog, connect_button);
  gtk_widget_class_bind_template_child (widget_class, UmConnectDialog, list_button);
  gtk_widget_class_bind_template_child (widget_class, UmConnectDialog, spinner);
  gtk_widget_class_bind_template_callback (widget_class, um_connect_dialog_list_models);
  gtk_widget_class_bind_template_callback (widget_class, um_connect_dialog_connect);
  gtk_widget_class_bind_template_callback (widget_class, on_row_activated);
  gtk_widget_class_bind_template_callback (widget_class, on_cancel_clicked);
  gtk_widget_class_add_binding_action (widget_class, GDK_KEY_Escape, 0, "window.close", NULL);
}

static void
um_connect_dialog_init (UmConnectDialog *self)
{
  self->rows = g_ptr_array_new ();
  gtk_widget_init_template (GTK_WIDGET (self));
  g_signal_connect_object (self->url_row, "changed", G_CALLBACK (on_entry_changed), self, G_CONNECT_SWAPPED);
  g_signal_connect_object (self->key_row, "changed", G_CALLBACK (on_entry_changed), self, G_CONNECT_SWAPPED);
}

GtkWidget *
um_connect_dialog_new (const char *url)
{
  UmConnectDialog *self = g_object_new (UM_TYPE_CONNECT_DIALOG, NULL);

  um_connect_dialog_set_url (self, url != NULL ? url : "http://127.0.0.1:8765/v1");
  return GTK_WIDGET (self);
}

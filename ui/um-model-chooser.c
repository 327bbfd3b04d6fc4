#include "config.h"

#include "um-model-chooser.h"

#include <glib/gi18n.h>

#include "um-model-scan.h"

struct _UmModelChooser {
  AdwWindow     parent_instance;
  GtkListBox   *list;
  GtkStack     *stack;
  GtkSpinner   *spinner;
  UmSettings   *settings;
  GCancellable *cancellable;
  GtkFileChooserNative *native;
  gboolean      scanned;
};

G_DEFINE_FINAL_TYPE (UmModelChooser, um_model_chooser, ADW_TYPE_WINDOW)

enum { MODEL_CHOSEN, N_SIGNALS };
static guint signals[N_SIGNALS];

static void
choose (UmModelChooser *self, const char *path)
{
  g_signal_emit (self, signals[MODEL_CHOSEN], 0, path);
  gtk_window_destroy (GTK_WINDOW (self));
}

static void
on_row_activated (UmModelChooser *self, GtkListBoxRow *row)
{
  const char *path = g_object_get_data (G_OBJECT (row), "path");
  if (path != NULL && gtk_widget_get_sensitive (GTK_WIDGET (row)))
    choose (self, path);
}

static GtkWidget *
make_row (const UmModelEntry *e)
{
  GtkWidget *row = adw_action_row_new ();
  g_autofree char *size = g_format_size (e->size);
  g_autofree char *subtitle = NULL;
  GtkWidget *icon;

  if (e->loadable && e->family != NULL)
    /* Translators: the model family, format, size and path: "Dream · safetensors · 16.0 GB · /path/to/model" */
    subtitle = g_strdup_printf (_("%s · %s · %s · %s"), e->family, e->format, size, e->path);
  else if (e->loadable)
    /* Translators: "safetensors · 16.0 GB · /path/to/model" */
    subtitle = g_strdup_printf (_("%s · %s · %s"), e->format, size, e->path);
  else
    subtitle = g_strdup_printf (_("Cannot be loaded: %s · %s"), e->problem, e->path);
  adw_preferences_row_set_title (ADW_PREFERENCES_ROW (row), e->name);
  adw_preferences_row_set_use_markup (ADW_PREFERENCES_ROW (row), FALSE);
  adw_action_row_set_subtitle (ADW_ACTION_ROW (row), subtitle);
  adw_action_row_set_subtitle_lines (ADW_ACTION_ROW (row), 2);
  icon = gtk_image_new_from_icon_name (e->loadable ? "go-next-symbolic" : "dialog-warning-symbolic");
  adw_action_row_add_suffix (ADW_ACTION_ROW (row), icon);
  if (e->recent)
    adw_action_row_add_prefix (ADW_ACTION_ROW (row), gtk_image_new_from_icon_name ("document-open-recent-symbolic"));
  gtk_list_box_row_set_activatable (GTK_LIST_BOX_ROW (row), e->loadable);
  g_object_set_data_full (G_OBJECT (row), "path", g_strdup (e->path), g_free);
  g_object_set_data_full (G_OBJECT (row), "family", g_strdup (e->family), g_free);
  if (!e->loadable)
    gtk_widget_add_css_class (row, "dim-label");
  return row;
}

static void
on_scanned (GObject *source, GAsyncResult *result, gpointer user_data)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) entries = um_model_scan_finish (result, &error);
  UmModelChooser *self;

  if (entries == NULL)
    return;   /* cancelled: the window is gone */
  self = UM_MODEL_CHOOSER (user_data);
  gtk_spinner_stop (self->spinner);
  for (guint i = 0; i < entries->len; i++)
    gtk_list_box_append (self->list, make_row (g_ptr_array_index (entries, i)));
  gtk_stack_set_visible_child_name (self->stack, entries->len ? "list" : "empty");
  self->scanned = TRUE;
}

static void
on_native_response (GtkNativeDialog *native, int response, UmModelChooser *self)
{
  if (response == GTK_RESPONSE_ACCEPT)
    {
      g_autoptr(GFile) file = gtk_file_chooser_get_file (GTK_FILE_CHOOSER (native));
      g_autofree char *path = file ? g_file_get_path (file) : NULL;
      if (path != NULL)
        {
          g_clear_object (&self->native);
          choose (self, path);
          return;
        }
    }
  g_clear_object (&self->native);
}

static void
open_native (UmModelChooser *self, GtkFileChooserAction action, const char *title)
{
  /* GtkFileDialog needs GTK 4.10; the native chooser works on 4.8 and in portals. */
  self->native = gtk_file_chooser_native_new (title, GTK_WINDOW (self), action,
                                              /* Translators: the file chooser's buttons */
                                              _("_Open"), _("_Cancel"));
  if (action == GTK_FILE_CHOOSER_ACTION_OPEN)
    {
      g_autoptr(GtkFileFilter) gguf = gtk_file_filter_new ();
      g_autoptr(GtkFileFilter) all = gtk_file_filter_new ();
      gtk_file_filter_set_name (gguf, _("GGUF models"));
      gtk_file_filter_add_pattern (gguf, "*.gguf");
      gtk_file_filter_set_name (all, _("All files"));
      gtk_file_filter_add_pattern (all, "*");
      gtk_file_chooser_add_filter (GTK_FILE_CHOOSER (self->native), gguf);
      gtk_file_chooser_add_filter (GTK_FILE_CHOOSER (self->native), all);
    }
  g_signal_connect (self->native, "response", G_CALLBACK (on_native_response), self);
  gtk_native_dialog_show (GTK_NATIVE_DIALOG (self->native));
}

static void
on_open_folder_clicked (UmModelChooser *self)
{
  open_native (self, GTK_FILE_CHOOSER_ACTION_SELECT_FOLDER, _("Open a Model Folder"));
}

static void
on_open_file_clicked (UmModelChooser *self)
{
  open_native (self, GTK_FILE_CHOOSER_ACTION_OPEN, _("Open a GGUF Model"));
}

static void
um_model_chooser_dispose (GObject *object)
{
  UmModelChooser *self = UM_MODEL_CHOOSER (object);
  g_cancellable_cancel (self->cancellable);
  g_clear_object (&self->cancellable);
  if (self->native)
    gtk_native_dialog_destroy (GTK_NATIVE_DIALOG (self->native));
  g_clear_object (&self->native);
  g_clear_object (&self->settings);
  gtk_widget_dispose_template (GTK_WIDGET (self), UM_TYPE_MODEL_CHOOSER);
  G_OBJECT_CLASS (um_model_chooser_parent_class)->dispose (object);
}

static void
um_model_chooser_class_init (UmModelChooserClass *klass)
{
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);

  G_OBJECT_CLASS (klass)->dispose = um_model_chooser_dispose;
  signals[MODEL_CHOSEN] = g_signal_new ("model-chosen", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                                        0, NULL, NULL, NULL, G_TYPE_NONE, 1, G_TYPE_STRING);
  gtk_widget_class_set_template_from_resource (widget_class, "/io/github/unmask/Unmask/ui/um-model-chooser.ui");
  gtk_widget_class_bind_template_child (widget_class, UmModelChooser, list);
  gtk_widget_class_bind_template_child (widget_class, UmModelChooser, stack);
  gtk_widget_class_bind_template_child (widget_class, UmModelChooser, spinner);
  gtk_widget_class_bind_template_callback (widget_class, on_row_activated);
  gtk_widget_class_bind_template_callback (widget_class, on_open_folder_clicked);
  gtk_widget_class_bind_template_callback (widget_class, on_open_file_clicked);
  gtk_widget_class_add_binding_action (widget_class, GDK_KEY_Escape, 0, "window.close", NULL);
}

static void
um_model_chooser_init (UmModelChooser *self)
{
  gtk_widget_init_template (GTK_WIDGET (self));
  self->cancellable = g_cancellable_new ();
}

GtkWidget *
um_model_chooser_new (UmSettings *settings)
{
  UmModelChooser *self = g_object_new (UM_TYPE_MODEL_CHOOSER, NULL);
  self->settings = g_object_ref (settings);
  gtk_spinner_start (self->spinner);
  um_model_scan_async (um_settings_get_recent_models (settings), self->cancellable, on_scanned, self);
  return GTK_WIDGET (self);
}

gboolean
um_model_chooser_get_scanned (UmModelChooser *self)
{
  g_return_val_if_fail (UM_IS_MODEL_CHOOSER (self), FALSE);
  return self->scanned;
}

GtkListBox *
um_model_chooser_get_list (UmModelChooser *self)
{
  g_return_val_if_fail (UM_IS_MODEL_CHOOSER (self), NULL);
  return self->list;
}

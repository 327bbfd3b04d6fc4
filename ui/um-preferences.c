#include "config.h"

#include "um-preferences.h"

#include <glib/gi18n.h>

#include "um-server.h"

struct _UmPreferences {
  AdwPreferencesWindow parent_instance;
  GtkSpinButton *threads_spin, *seed_spin;
  GtkSwitch     *exact_switch;
  GtkSwitch     *eos_switch, *eot_switch;
  GtkWidget     *eos_row, *eot_row;
  /* Serve this model */
  GtkSwitch     *serve_switch;
  AdwComboRow   *scope_row;
  GtkSpinButton *port_spin;
  AdwActionRow  *key_row;
  GtkLabel      *key_label;
  UmSettings    *settings;
};

G_DEFINE_FINAL_TYPE (UmPreferences, um_preferences, ADW_TYPE_PREFERENCES_WINDOW)

static gboolean
int64_to_double (GBinding *b, const GValue *from, GValue *to, gpointer data)
{
  g_value_set_double (to, (double) g_value_get_int64 (from));
  return TRUE;
}

static gboolean
double_to_int64 (GBinding *b, const GValue *from, GValue *to, gpointer data)
{
  g_value_set_int64 (to, (gint64) g_value_get_double (from));
  return TRUE;
}

/* The model family's schedule decides which sampling flags exist. */
static void
update_family (UmPreferences *self)
{
  UmArch arch = um_settings_get_arch (self->settings);

  gtk_widget_set_visible (self->eos_row, um_family_has_option (arch, "logits-eos-inf"));
  gtk_widget_set_visible (self->eot_row, um_family_has_option (arch, "confidence-eos-eot-inf"));
}

/* "local" ↔ 0, "network" ↔ 1 (the combo row's items). */
static gboolean
scope_to_selected (GBinding *b, const GValue *from, GValue *to, gpointer data)
{
  g_value_set_uint (to, g_strcmp0 (g_value_get_string (from), "network") == 0 ? 1 : 0);
  return TRUE;
}

static gboolean
selected_to_scope (GBinding *b, const GValue *from, GValue *to, gpointer data)
{
  g_value_set_string (to, g_value_get_uint (from) == 1 ? "network" : "local");
  return TRUE;
}

/* The key matters on the local network only, and is made when first needed. */
static void
update_key (UmPreferences *self)
{
  g_autofree char *scope = NULL;
  g_autofree char *key = NULL;
  gboolean network;

  g_object_get (self->settings, "serve-scope", &scope, "serve-key", &key, NULL);
  network = g_strcmp0 (scope, "network") == 0;
  if (network && (key == NULL || key[0] == '\0'))
    {
      g_free (key);
      key = um_server_generate_key ();
      g_object_set (self->settings, "serve-key", key, NULL);
      return;   /* notify::serve-key comes back here */
    }
  gtk_label_set_text (self->key_label, key ? key : "");
  gtk_widget_set_visible (GTK_WIDGET (self->key_row), network);
}

static void
on_copy_key_clicked (UmPreferences *self)
{
  gdk_clipboard_set_text (gtk_widget_get_clipboard (GTK_WIDGET (self)), gtk_label_get_text (self->key_label));
  adw_preferences_window_add_toast (ADW_PREFERENCES_WINDOW (self), adw_toast_new (_("Key copied")));
}

static void
on_new_key_clicked (UmPreferences *self)
{
  g_autofree char *key = um_server_generate_key ();
  g_object_set (self->settings, "serve-key", key, NULL);
}

const char *
um_preferences_get_key (UmPreferences *self)
{
  g_return_val_if_fail (UM_IS_PREFERENCES (self), NULL);
  return gtk_widget_get_visible (GTK_WIDGET (self->key_row)) ? gtk_label_get_text (self->key_label) : NULL;
}

gboolean
um_preferences_get_eos_visible (UmPreferences *self)
{
  g_return_val_if_fail (UM_IS_PREFERENCES (self), FALSE);
  return gtk_widget_get_visible (self->eos_row);
}

static void
um_preferences_dispose (GObject *object)
{
  UmPreferences *self = UM_PREFERENCES (object);
  g_clear_object (&self->settings);
  gtk_widget_dispose_template (GTK_WIDGET (self), UM_TYPE_PREFERENCES);
  G_OBJECT_CLASS (um_preferences_parent_class)->dispose (object);
}

static void
um_preferences_class_init (UmPreferencesClass *klass)
{
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);
  G_OBJECT_CLASS (klass)->dispose = um_preferences_dispose;
  gtk_widget_class_set_template_from_resource (widget_class, "/io/github/unmask/Unmask/ui/um-preferences.ui");
  gtk_widget_class_bind_template_child (widget_class, UmPreferences, threads_spin);
  gtk_widget_class_bind_template_child (widget_class, UmPreferences, seed_spin);
  gtk_widget_class_bind_template_child (widget_class, UmPreferences, exact_switch);
  gtk_widget_class_bind_template_child (widget_class, UmPreferences, eos_switch);
  gtk_widget_class_bind_template_child (widget_class, UmPreferences, eot_switch);
  gtk_widget_class_bind_template_child (widget_class, UmPreferences, eos_row);
  gtk_widget_class_bind_template_child (widget_class, UmPreferences, eot_row);
  gtk_widget_class_bind_template_child (widget_class, UmPreferences, serve_switch);
  gtk_widget_class_bind_template_child (widget_class, UmPreferences, scope_row);
  gtk_widget_class_bind_template_child (widget_class, UmPreferences, port_spin);
  gtk_widget_class_bind_template_child (widget_class, UmPreferences, key_row);
  gtk_widget_class_bind_template_child (widget_class, UmPreferences, key_label);
  gtk_widget_class_bind_template_callback (widget_class, on_copy_key_clicked);
  gtk_widget_class_bind_template_callback (widget_class, on_new_key_clicked);
}

static void
um_preferences_init (UmPreferences *self)
{
  gtk_widget_init_template (GTK_WIDGET (self));
}

GtkWidget *
um_preferences_new (UmSettings *settings)
{
  UmPreferences *self = g_object_new (UM_TYPE_PREFERENCES, NULL);
  const GBindingFlags f = G_BINDING_BIDIRECTIONAL | G_BINDING_SYNC_CREATE;

  self->settings = g_object_ref (settings);
  g_object_bind_property (settings, "threads", self->threads_spin, "value", f);
  g_object_bind_property (settings, "exact-products", self->exact_switch, "active", f);
  g_object_bind_property_full (settings, "seed", self->seed_spin, "value", f,
                               int64_to_double, double_to_int64, NULL, NULL);
  g_object_bind_property (settings, "logits-eos-inf", self->eos_switch, "active", f);
  g_object_bind_property (settings, "confidence-eos-eot-inf", self->eot_switch, "active", f);
  g_signal_connect_object (settings, "notify::family", G_CALLBACK (update_family), self, G_CONNECT_SWAPPED);
  update_family (self);
  g_object_bind_property (settings, "serve", self->serve_switch, "active", f);
  g_object_bind_property_full (settings, "serve-scope", self->scope_row, "selected", f,
                               scope_to_selected, selected_to_scope, NULL, NULL);
  g_object_bind_property (settings, "serve-port", self->port_spin, "value", f);
  g_signal_connect_object (settings, "notify::serve-scope", G_CALLBACK (update_key), self, G_CONNECT_SWAPPED);
  g_signal_connect_object (settings, "notify::serve-key", G_CALLBACK (update_key), self, G_CONNECT_SWAPPED);
  update_key (self);
  return GTK_WIDGET (self);
}

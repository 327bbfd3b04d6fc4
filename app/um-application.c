#include "config.h"

#include "um-application.h"

#include <glib/gi18n.h>

#include "um-preferences.h"
#include "um-settings.h"
#include "um-window.h"

struct _UmApplication {
  AdwApplication  parent_instance;
  UmSettings     *settings;
};

G_DEFINE_FINAL_TYPE (UmApplication, um_application, ADW_TYPE_APPLICATION)

static UmWindow *
get_window (UmApplication *self)
{
  GtkWindow *win = gtk_application_get_active_window (GTK_APPLICATION (self));
  if (win == NULL)
    {
      win = GTK_WINDOW (um_window_new (GTK_APPLICATION (self), self->settings));
      if (um_settings_get_load_warning (self->settings))
        um_window_show_error (UM_WINDOW (win), um_settings_get_load_warning (self->settings));
    }
  return UM_WINDOW (win);
}

static void
um_application_activate (GApplication *app)
{
  gtk_window_present (GTK_WINDOW (get_window (UM_APPLICATION (app))));
}

static int
um_application_command_line (GApplication *app, GApplicationCommandLine *cmdline)
{
  UmApplication *self = UM_APPLICATION (app);
  GVariantDict *options = g_application_command_line_get_options_dict (cmdline);
  const char *model = NULL;
  UmWindow *win;

  win = get_window (self);
  gtk_window_present (GTK_WINDOW (win));
  if (g_variant_dict_lookup (options, "model", "&s", &model))
    {
      g_autoptr(GFile) file = g_application_command_line_create_file_for_arg (cmdline, model);
      g_autofree char *path = g_file_get_path (file);
      um_window_load_model (win, path);
    }
  else if (g_variant_dict_contains (options, "demo"))
    um_window_load_demo_model (win);
  return 0;
}

static void
quit_activated (GSimpleAction *action, GVariant *param, gpointer user_data)
{
  g_application_quit (G_APPLICATION (user_data));
}

static void
preferences_activated (GSimpleAction *action, GVariant *param, gpointer user_data)
{
  UmApplication *self = user_data;
  GtkWindow *prefs = GTK_WINDOW (um_preferences_new (self->settings));
  gtk_window_set_transient_for (prefs, GTK_WINDOW (get_window (self)));
  gtk_window_present (prefs);
}

static void
about_activated (GSimpleAction *action, GVariant *param, gpointer user_data)
{
  UmApplication *self = user_data;
  const char *developers[] = { _("The Unmask developers"), NULL };

  adw_show_about_window (GTK_WINDOW (get_window (self)),
                         "application-name", _("Unmask"),
                         "application-icon", APPLICATION_ID,
                         "version", PACKAGE_VERSION,
                         "comments", _("Run masked-diffusion language models on your own machine and watch them unmask"),
                         "website", "https://github.com/unmask/unmask",
                         "issue-url", "https://github.com/unmask/unmask/issues",
                         "developers", developers,
                         "copyright", _("© 2026 The Unmask developers"),
                         "license-type", GTK_LICENSE_GPL_3_0,
                         /* Translators: your names, one per line */
                         "translator-credits", _("translator-credits"),
                         NULL);
}

static void
open_model_activated (GSimpleAction *action, GVariant *param, gpointer user_data)
{
  um_window_open_model_chooser (get_window (UM_APPLICATION (user_data)));
}

static const GActionEntry app_actions[] = {
  { "quit", quit_activated },
  { "preferences", preferences_activated },
  { "about", about_activated },
  { "open-model", open_model_activated },
};

static void
um_application_startup (GApplication *app)
{
  UmApplication *self = UM_APPLICATION (app);
  static const char *quit_accels[] = { "<Control>q", NULL };
  static const char *open_accels[] = { "<Control>o", NULL };
  static const char *prefs_accels[] = { "<Control>comma", NULL };
  static const char *generate_accels[] = { "<Control>Return", NULL };
  static const char *stop_accels[] = { "Escape", NULL };
  static const char *help_accels[] = { "F1", "<Control>question", NULL };

  G_APPLICATION_CLASS (um_application_parent_class)->startup (app);

  self->settings = um_settings_new (NULL);
  g_action_map_add_action_entries (G_ACTION_MAP (app), app_actions, G_N_ELEMENTS (app_actions), app);
  gtk_application_set_accels_for_action (GTK_APPLICATION (app), "app.quit", quit_accels);
  gtk_application_set_accels_for_action (GTK_APPLICATION (app), "app.open-model", open_accels);
  gtk_application_set_accels_for_action (GTK_APPLICATION (app), "app.preferences", prefs_accels);
  gtk_application_set_accels_for_action (GTK_APPLICATION (app), "win.generate", generate_accels);
  gtk_application_set_accels_for_action (GTK_APPLICATION (app), "win.stop", stop_accels);
  gtk_application_set_accels_for_action (GTK_APPLICATION (app), "win.show-help-overlay", help_accels);
}

static void
um_application_shutdown (GApplication *app)
{
  UmApplication *self = UM_APPLICATION (app);
  G_APPLICATION_CLASS (um_application_parent_class)->shutdown (app);
  g_clear_object (&self->settings);
}

static void
um_application_class_init (UmApplicationClass *klass)
{
  GApplicationClass *app_class = G_APPLICATION_CLASS (klass);
  app_class->activate = um_application_activate;
  app_class->command_line = um_application_command_line;
  app_class->startup = um_application_startup;
  app_class->shutdown = um_application_shutdown;
}

static void
um_application_init (UmApplication *self)
{
  static const GOptionEntry options[] = {
    { "model", 'm', 0, G_OPTION_ARG_FILENAME, NULL, N_("Open this model folder or .gguf file"), N_("PATH") },
    { "demo", 0, 0, G_OPTION_ARG_NONE, NULL, N_("Open the small demo model"), NULL },
    { NULL }
  };
  g_application_add_main_option_entries (G_APPLICATION (self), options);
}

UmApplication *
um_application_new (void)
{
  return g_object_new (UM_TYPE_APPLICATION,
                       "application-id", APPLICATION_ID,
                       "flags", G_APPLICATION_HANDLES_COMMAND_LINE,
                       "resource-base-path", "/io/github/unmask/Unmask",
                       NULL);
}

#include "config.h"

#include "um-application.h"

#include <glib/gi18n.h>

#include "um-frame-stats.h"
#include "um-optimizer-page.h"
#include "um-pool.h"
#include "um-preferences.h"
#include "um-settings.h"
#include "um-window.h"

struct _UmApplication {
  AdwApplication  parent_instance;
  UmSettings     *settings;
};

G_DEFINE_FINAL_TYPE (UmApplication, um_application, ADW_TYPE_APPLICATION)

/* --extreme[=LEVEL] and --restore[=WHICH] take an optional value, which
 * GOption only offers to callbacks. They run while parsing in the process
 * that was started; handle-local-options then puts the values into the
 * options dictionary, which goes to the primary instance. */
static char *opt_extreme;
static char *opt_restore;

static gboolean
parse_extreme (const char *name, const char *value, gpointer data, GError **error)
{
  g_autofree char *mode = g_strconcat ("extreme-", value ? value : "moderate", NULL);
  UmMemMode m;

  if (!um_mem_mode_from_string (mode, &m) || !um_mem_mode_is_extreme (m))
    {
      g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                   _("--extreme takes mild, moderate or aggressive, not “%s”"), value);
      return FALSE;
    }
  g_free (opt_extreme);
  opt_extreme = g_steal_pointer (&mode);
  return TRUE;
}

static gboolean
parse_restore (const char *name, const char *value, gpointer data, GError **error)
{
  if (value != NULL && value[0] == '\0')
    {
      g_set_error_literal (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                           _("--restore takes original, latest or a backup’s id"));
      return FALSE;
    }
  g_free (opt_restore);
  opt_restore = g_strdup (value ? value : "original");
  return TRUE;
}

static int
um_application_handle_local_options (GApplication *app, GVariantDict *options)
{
  if (opt_restore != NULL)
    g_variant_dict_insert (options, "restore", "s", opt_restore);
  if (opt_extreme != NULL)
    g_variant_dict_insert (options, "extreme", "s", opt_extreme);
  g_clear_pointer (&opt_restore, g_free);
  g_clear_pointer (&opt_extreme, g_free);
  return -1;
}

static UmWindow *
get_window (UmApplication *self)
{
  GtkWindow *win = gtk_application_get_active_window (GTK_APPLICATION (self));
  if (win == NULL)
    {
      /* The window shows the settings' load warning in its notice banner. */
      const char *stats = g_getenv ("UM_FRAME_STATS");

      win = GTK_WINDOW (um_window_new (GTK_APPLICATION (self), self->settings));
      /* A measurement (tests/tools/frame-bench.sh); nothing runs without it. */
      if (stats != NULL && stats[0] != '\0')
        um_frame_stats_attach (UM_WINDOW (win), stats);
    }
  return UM_WINDOW (win);
}

static void
um_application_activate (GApplication *app)
{
  gtk_window_present (GTK_WINDOW (get_window (UM_APPLICATION (app))));
}

/* The model the command line names: --model, --demo, or with --optimize
 * alone the one in use or the most recent. */
static char *
command_line_model (UmApplication *self, GApplicationCommandLine *cmdline, GVariantDict *options,
                    UmWindow *win, gboolean optimize)
{
  const char *model = NULL;

  if (g_variant_dict_lookup (options, "model", "^&ay", &model))
    {
      g_autoptr(GFile) file = g_application_command_line_create_file_for_arg (cmdline, model);
      return g_file_get_path (file);
    }
  if (g_variant_dict_contains (options, "demo"))
    return um_window_find_demo_model ();
  if (optimize && um_window_get_model_path (win) != NULL)
    return g_strdup (um_window_get_model_path (win));
  if (optimize && um_settings_get_recent_models (self->settings)[0] != NULL)
    return g_strdup (um_settings_get_recent_models (self->settings)[0]);
  return NULL;
}

static int
um_application_command_line (GApplication *app, GApplicationCommandLine *cmdline)
{
  UmApplication *self = UM_APPLICATION (app);
  GVariantDict *options = g_application_command_line_get_options_dict (cmdline);
  UmOptimizerPage *page;
  g_autofree char *path = NULL;
  const char *restore = NULL, *extreme = NULL;
  gboolean optimize, demo;
  UmWindow *win;
  int status = 0;

  win = get_window (self);
  page = UM_OPTIMIZER_PAGE (um_window_get_optimizer_page (win));
  gtk_window_present (GTK_WINDOW (win));
  optimize = g_variant_dict_contains (options, "optimize");
  demo = g_variant_dict_contains (options, "demo") && !g_variant_dict_contains (options, "model");
  path = command_line_model (self, cmdline, options, win, optimize);
  if (demo && path == NULL)
    um_window_show_error (win, _("The demo model is not installed."));

  /* Profile changes first, so the model opens under them. */
  if (g_variant_dict_lookup (options, "restore", "&s", &restore))
    {
      g_autoptr(GError) error = NULL;
      if (!um_optimizer_page_restore (page, restore, FALSE, &error))
        {
          g_autofree char *msg = g_strdup_printf (_("Could not restore the optimizer settings “%s”: %s"), restore,
                                                  error->message);
          g_application_command_line_printerr (cmdline, "%s\n", msg);
          um_window_show_error (win, msg);
          status = 1;
        }
    }
  if (g_variant_dict_lookup (options, "extreme", "&s", &extreme))
    {
      g_autoptr(GError) error = NULL;
      UmMemMode mode;
      if (!um_mem_mode_from_string (extreme, &mode)
          || !um_optimizer_page_apply_mode (page, mode, &error))
        {
          g_autofree char *msg = g_strdup_printf (_("Could not switch to %s: %s"), extreme,
                                                  error ? error->message : _("unknown mode"));
          g_application_command_line_printerr (cmdline, "%s\n", msg);
          um_window_show_error (win, msg);
          status = 1;
        }
    }
  if (optimize)
    {
      /* One click, then open: plans for the model, applies, loads it. */
      um_window_show_optimizer (win);
      um_optimizer_page_optimize (page, path);
    }
  else if (path != NULL && g_strcmp0 (path, um_window_get_model_path (win)) != 0)
    um_window_load_model (win, path);
  if (g_variant_dict_contains (options, "optimizer"))
    um_window_show_optimizer (win);
  return status;
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

/* The engine's threads run at this nice value, the window's at 0, so that
 * drawing and input do not wait for the engine on a busy machine (3 busy
 * programs on 2 cores: p99 frame 60 ms unniced, 34 at 5).  5, not more:
 * the engine pays, the more the higher it is (2 busy programs in the
 * app's session: twice the time per step at 5, 5.7 times at 10; quiet:
 * +7 %, +19 %).  docs/performance.md, "A smooth window", has the figures;
 * UM_ENGINE_NICE sets another (0: as the CLI). */
#define ENGINE_NICE 5

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
  static const char *optimizer_accels[] = { "<Control><Shift>o", NULL };
  static const char *connect_accels[] = { "<Control>l", NULL };

  G_APPLICATION_CLASS (um_application_parent_class)->startup (app);

  {
    const char *nice = g_getenv ("UM_ENGINE_NICE");
    um_pool_set_nice (nice != NULL ? (int) g_ascii_strtoll (nice, NULL, 10) : ENGINE_NICE);
  }

  self->settings = um_settings_new (NULL);
  g_action_map_add_action_entries (G_ACTION_MAP (app), app_actions, G_N_ELEMENTS (app_actions), app);
  gtk_application_set_accels_for_action (GTK_APPLICATION (app), "app.quit", quit_accels);
  gtk_application_set_accels_for_action (GTK_APPLICATION (app), "app.open-model", open_accels);
  gtk_application_set_accels_for_action (GTK_APPLICATION (app), "app.preferences", prefs_accels);
  gtk_application_set_accels_for_action (GTK_APPLICATION (app), "win.generate", generate_accels);
  gtk_application_set_accels_for_action (GTK_APPLICATION (app), "win.stop", stop_accels);
  gtk_application_set_accels_for_action (GTK_APPLICATION (app), "win.show-help-overlay", help_accels);
  gtk_application_set_accels_for_action (GTK_APPLICATION (app), "win.show-optimizer", optimizer_accels);
  gtk_application_set_accels_for_action (GTK_APPLICATION (app), "win.connect-server", connect_accels);
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
  app_class->handle_local_options = um_application_handle_local_options;
  app_class->startup = um_application_startup;
  app_class->shutdown = um_application_shutdown;
}

static void
um_application_init (UmApplication *self)
{
  static const GOptionEntry options[] = {
    { "model", 'm', 0, G_OPTION_ARG_FILENAME, NULL, N_("Open this model folder or .gguf file"), N_("PATH") },
    { "demo", 0, 0, G_OPTION_ARG_NONE, NULL, N_("Open the small demo model"), NULL },
    { "optimize", 0, 0, G_OPTION_ARG_NONE, NULL,
      N_("Pick the fastest memory mode that fits this computer for the model (with a backup), then open it"), NULL },
    { "extreme", 0, G_OPTION_FLAG_OPTIONAL_ARG, G_OPTION_ARG_CALLBACK, parse_extreme,
      N_("Use an extreme memory mode (with a backup): mild, moderate (the default) or aggressive"), N_("LEVEL") },
    { "restore", 0, G_OPTION_FLAG_OPTIONAL_ARG, G_OPTION_ARG_CALLBACK, parse_restore,
      N_("Restore optimizer settings from the history: original (the default), latest or a backup’s id"),
      N_("WHICH") },
    { "optimizer", 0, 0, G_OPTION_ARG_NONE, NULL, N_("Show the Optimizer page"), NULL },
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

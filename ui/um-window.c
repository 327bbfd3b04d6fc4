#include "config.h"

#include "um-window.h"

#include <glib/gi18n.h>
#include <string.h>

#include "um-chat-page.h"
#include "um-connect-dialog.h"
#include "um-generate-page.h"
#include "um-memory-monitor.h"
#include "um-memory-page.h"
#include "um-mode-limits.h"
#include "um-model-chooser.h"
#include "um-model-scan.h"
#include "um-local-generator.h"
#include "um-optimizer-page.h"
#include "um-remote-generator.h"
#include "um-serving.h"
#include "um-worker.h"

struct _UmWindow {
  AdwApplicationWindow parent_instance;

  /* template */
  AdwToastOverlay *toast_overlay;
  AdwViewSwitcherTitle *switcher_title;
  AdwViewSwitcherBar *switcher_bar;
  GtkRevealer     *error_revealer;
  GtkLabel        *error_label;
  GtkRevealer     *notice_revealer;
  GtkLabel        *notice_label;
  GtkRevealer     *loading_revealer;
  GtkLabel        *loading_label;
  GtkProgressBar  *loading_progress;
  GtkLabel        *memory_label;
  GtkLabel        *model_label;
  GtkLabel        *family_label;
  GtkLabel        *serve_label;
  GtkWidget       *serve_box;
  GtkLabel        *serve_waiting_label;
  char            *serve_text;       /* what the serving pill says, or NULL */
  GtkLabel        *remote_label;
  GtkWidget       *connect_button;
  GtkStack        *content_stack;
  AdwViewStack    *view_stack;
  UmGeneratePage  *generate_page;
  UmChatPage      *chat_page;
  UmMemoryPage    *memory_page;
  UmOptimizerPage *optimizer_page;

  UmSettings      *settings;
  UmMemoryMonitor *monitor;
  UmGenerator     *generator;        /* "an engine": a loaded model, or a server's */
  UmServing       *serving;          /* Preferences → Serve this model */
  char            *serve_error;      /* shown once in the banner */
  char            *connecting_url;   /* while um_window_connect_server () runs */
  GCancellable    *load_cancellable;
  char            *loading_path;
  char            *error_message;
  char            *notice;
  UmProfile       *profile;
  char            *revision;         /* of the profile shown: what the app read or wrote last */
  UmProfile       *load_profile;     /* the profile the running load was started under */
  UmProfile       *engine_profile;   /* ... and the one the engine was loaded under */
  GFileMonitor    *profile_monitor;  /* the config folder: writes are renames into it */
  guint            profile_check_id; /* a check waiting for a burst of events to end */
  AdwToast        *profile_toast;    /* "changed outside Unmask", while shown */
  char            *last_toast;
  char            *profile_name;     /* optimizer.json */
  char            *model_path;       /* in use, or last asked for */
  gboolean         show_workspace;   /* the pages without a model: the Optimizer asked for */
};

G_DEFINE_FINAL_TYPE (UmWindow, um_window, ADW_TYPE_APPLICATION_WINDOW)

/* How long a burst of folder events may last before the file is read. */
#define PROFILE_CHECK_DELAY_MS 150

enum { PROP_0, PROP_LOADING, PROP_ERROR_MESSAGE, PROP_HAS_ENGINE, PROP_NOTICE, PROP_PROFILE, N_PROPS };
static GParamSpec *props[N_PROPS];

UmEngine *
um_window_get_engine (UmWindow *self)
{
  return self->generator != NULL ? um_generator_get_engine (self->generator) : NULL;
}

UmGenerator *
um_window_get_generator (UmWindow *self)
{
  g_return_val_if_fail (UM_IS_WINDOW (self), NULL);
  return self->generator;
}

const char *
um_window_get_subtitle (UmWindow *self)
{
  g_return_val_if_fail (UM_IS_WINDOW (self), NULL);
  return adw_view_switcher_title_get_subtitle (self->switcher_title);
}

const char *
um_window_get_family_label (UmWindow *self)
{
  g_return_val_if_fail (UM_IS_WINDOW (self), NULL);
  return gtk_widget_get_visible (GTK_WIDGET (self->family_label)) ? gtk_label_get_text (self->family_label) : NULL;
}

gboolean
um_window_get_loading (UmWindow *self)
{
  return self->load_cancellable != NULL;
}

const char *
um_window_get_error_message (UmWindow *self)
{
  return self->error_message;
}

GtkWidget *
um_window_get_generate_page (UmWindow *self)
{
  return GTK_WIDGET (self->generate_page);
}

GtkWidget *
um_window_get_chat_page (UmWindow *self)
{
  return GTK_WIDGET (self->chat_page);
}

UmSettings *
um_window_get_settings (UmWindow *self)
{
  return self->settings;
}

GtkWidget *
um_window_get_optimizer_page (UmWindow *self)
{
  return GTK_WIDGET (self->optimizer_page);
}

GtkWidget *
um_window_get_memory_page (UmWindow *self)
{
  return GTK_WIDGET (self->memory_page);
}

const char *
um_window_get_config_dir (UmWindow *self)
{
  const char *dir = g_getenv ("UNMASK_CONFIG_DIR");
  return dir != NULL && dir[0] != '\0' ? dir : NULL;
}

const UmProfile *
um_window_get_profile (UmWindow *self)
{
  return self->profile;
}

const char *
um_window_get_model_path (UmWindow *self)
{
  return self->model_path;
}

gboolean
um_window_get_generating (UmWindow *self)
{
  return (self->generate_page != NULL && um_generate_page_get_running (self->generate_page))
         || (self->chat_page != NULL && um_chat_page_get_busy (self->chat_page));
}

const char *
um_window_get_notice (UmWindow *self)
{
  return self->notice;
}

void
um_window_show_notice (UmWindow *self, const char *message)
{
  g_free (self->notice);
  self->notice = g_strdup (message);
  gtk_label_set_text (self->notice_label, message ? message : "");
  gtk_revealer_set_reveal_child (self->notice_revealer, message != NULL);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_NOTICE]);
}

static void
on_notice_close_clicked (UmWindow *self)
{
  um_window_show_notice (self, NULL);
}

static AdwToast *
make_toast (UmWindow *self, const char *message)
{
  /* Toast titles are markup in libadwaita 1.2. */
  g_autofree char *escaped = g_markup_escape_text (message, -1);

  g_free (self->last_toast);
  self->last_toast = g_strdup (message);
  return adw_toast_new (escaped);
}

void
um_window_add_toast (UmWindow *self, const char *message)
{
  adw_toast_overlay_add_toast (self->toast_overlay, make_toast (self, message));
}

const char *
um_window_get_last_toast (UmWindow *self)
{
  return self->last_toast;
}

void
um_window_show_error (UmWindow *self, const char *message)
{
  g_free (self->error_message);
  self->error_message = g_strdup (message);
  gtk_label_set_text (self->error_label, message ? message : "");
  gtk_revealer_set_reveal_child (self->error_revealer, message != NULL);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_ERROR_MESSAGE]);
}

static void
on_error_close_clicked (UmWindow *self)
{
  um_window_show_error (self, NULL);
}

/* The bottom switcher replaces the title's on narrow windows, and like it
 * only exists once a model is loaded. */
static void
update_switcher_bar (UmWindow *self)
{
  adw_view_switcher_bar_set_reveal (self->switcher_bar,
                                    (self->generator != NULL || self->show_workspace)
                                    && adw_view_switcher_title_get_title_visible (self->switcher_title));
}

/* The mode in use for the model, on the Generate and Chat pages. */
static void
update_mode_info (UmWindow *self)
{
  g_autofree char *id = self->model_path ? um_model_identity (self->model_path) : NULL;
  UmModeInfo info;

  /* This computer's memory mode says nothing of a model on a server. */
  if (self->generator != NULL && um_generator_get_info (self->generator)->remote)
    {
      um_generate_page_set_mode_info (self->generate_page, NULL);
      um_chat_page_set_mode_info (self->chat_page, NULL);
      return;
    }

  um_mode_info_from_profile (&info, self->profile, id);
  um_generate_page_set_mode_info (self->generate_page, &info);
  um_chat_page_set_mode_info (self->chat_page, &info);
}

/* The defaults of the generation parameters the user has not chosen: the
 * model's recommendation, then the profile's mode (um_gen_resolve ()). */
static void
update_gen_layers (UmWindow *self)
{
  g_autofree char *id = self->model_path ? um_model_identity (self->model_path) : NULL;
  const UmGenRecommendation *rec = self->generator ? um_generator_get_info (self->generator)->recommendation : NULL;
  gboolean remote = self->generator != NULL && um_generator_get_info (self->generator)->remote;
  UmGenLayer profile;

  if (self->settings == NULL)
    return;
  /* The profile's limits are this computer's: not for a server's model. */
  um_profile_gen_layer (self->profile, id, &profile);
  um_settings_set_layers (self->settings, rec ? &rec->layer : NULL, rec ? rec->origin : NULL,
                          remote ? NULL : &profile);
}

/* The pages need a model, except the Optimizer once asked for. */
static void
update_workspace (UmWindow *self)
{
  gboolean workspace = self->generator != NULL || self->show_workspace;

  gtk_stack_set_visible_child_name (self->content_stack, workspace ? "workspace" : "welcome");
  adw_view_switcher_title_set_view_switcher_enabled (self->switcher_title, workspace);
  update_switcher_bar (self);
}

/* Whether a model loaded under @a runs differently under @b. */
static gboolean
engine_settings_differ (UmWindow *self, const UmProfile *a, const UmProfile *b)
{
  g_autofree char *id = um_model_identity (self->model_path);
  UmEngineOptions x, y;

  um_engine_options_init (&x);
  um_engine_options_init (&y);
  um_profile_to_engine_options (a, id, &x);
  um_profile_to_engine_options (b, id, &y);
  return x.mem.mode != y.mem.mode || g_strcmp0 (x.mem.weight_format, y.mem.weight_format) != 0
         || x.mem.resident_layers != y.mem.resident_layers || x.mem.host_zstd != y.mem.host_zstd
         || x.mem.prune_heads != y.mem.prune_heads || x.mem.prune_ffn != y.mem.prune_ffn
         || x.mem.row_chunk != y.mem.row_chunk || x.device != y.device || x.gpu_index != y.gpu_index
         || x.n_threads != y.n_threads || x.memory_budget != y.memory_budget;
}

gboolean
um_window_get_model_outdated (UmWindow *self)
{
  return um_window_get_engine (self) != NULL && self->engine_profile != NULL
         && engine_settings_differ (self, self->engine_profile, self->profile);
}

/* Reload Model (the toast's button) only does something while the model
 * runs under other settings than those shown. */
static void
update_reload_action (UmWindow *self)
{
  gtk_widget_action_set_enabled (GTK_WIDGET (self), "win.reload-model", um_window_get_model_outdated (self));
}

static void update_serve_label (UmWindow *self);

/* Makes @generator (taken; NULL: none) the window's engine, local or remote. */
static void
set_generator (UmWindow *self, UmGenerator *generator)
{
  const UmGeneratorInfo *info = generator ? um_generator_get_info (generator) : NULL;
  UmEngine *engine = generator ? um_generator_get_engine (generator) : NULL;
  g_autoptr(UmGenerator) old = g_steal_pointer (&self->generator);

  /* The pages offer the family's options, with its remembered values. */
  if (info != NULL)
    um_settings_set_family (self->settings, um_arch_info (info->arch)->name);
  self->generator = generator;
  /* Pages drop their references before the old engine goes. */
  um_generate_page_set_generator (self->generate_page, generator);
  um_chat_page_set_generator (self->chat_page, generator);
  um_memory_monitor_set_engine (self->monitor, engine);
  /* The memory figures and the optimizer are this computer's. */
  um_memory_page_set_remote (self->memory_page, info != NULL && info->remote ? info->location : NULL);
  um_optimizer_page_set_remote (self->optimizer_page, info != NULL && info->remote ? info->location : NULL);
  um_optimizer_page_set_model (self->optimizer_page, engine != NULL || generator == NULL ? self->model_path : NULL,
                               engine);
  /* The server serves a model of this computer, never a server's. */
  if (self->serving != NULL)
    {
      g_autofree char *id = engine != NULL && self->model_path ? um_model_identity (self->model_path) : NULL;
      UmGenLayer profile;

      um_profile_gen_layer (self->profile, id, &profile);
      um_serving_set_generator (self->serving, engine != NULL ? generator : NULL, engine != NULL ? &profile : NULL);
    }
  g_clear_object (&old);
  update_workspace (self);
  /* The model in use names the button that opens another one. */
  if (info != NULL)
    {
      const char *family = um_arch_info (info->arch)->name;
      g_autofree char *subtitle = NULL;

      if (info->remote)
        /* Translators: the header's subtitle for a model on a server: the model, its family and the server, e.g. "LLaDA-8B-Instruct · LLaDA · http://gpu-box:8765/v1" */
        subtitle = g_strdup_printf (_("%s · %s · %s"), info->display_name, family, info->location);
      else
        /* Translators: the header's subtitle: the model's name, then its family, e.g. "Dream-v0-Instruct-7B · Dream" */
        subtitle = g_strdup_printf (_("%s · %s"), info->display_name, family);
      adw_view_switcher_title_set_subtitle (self->switcher_title, subtitle);
      gtk_label_set_text (self->model_label, info->display_name);
      /* The subtitle hides behind a wide window's view switcher: the
       * server also names the button that connects to one. */
      if (info->remote)
        {
          g_autoptr(GUri) uri = g_uri_parse (info->location, G_URI_FLAGS_NONE, NULL);
          g_autofree char *host = uri != NULL && g_uri_get_host (uri) != NULL
                                  ? (g_uri_get_port (uri) > 0
                                     ? g_strdup_printf ("%s:%d", g_uri_get_host (uri), g_uri_get_port (uri))
                                     : g_strdup (g_uri_get_host (uri)))
                                  : g_strdup (info->location);
          /* Translators: the tooltip of the header's server button while connected; %s is the server's address */
          g_autofree char *tip = g_strdup_printf (_("Running on %s — Connect to Another Server…"), info->location);
          gtk_label_set_text (self->remote_label, host);
          gtk_widget_set_tooltip_text (self->connect_button, tip);
        }
      gtk_label_set_text (self->family_label, family);
      gtk_widget_set_visible (GTK_WIDGET (self->family_label), TRUE);
    }
  else
    {
      adw_view_switcher_title_set_subtitle (self->switcher_title, NULL);
      gtk_label_set_text (self->model_label, _("Open Model"));
      gtk_widget_set_visible (GTK_WIDGET (self->family_label), FALSE);
    }
  gtk_widget_set_visible (GTK_WIDGET (self->remote_label), info != NULL && info->remote);
  if (info == NULL || !info->remote)
    gtk_widget_set_tooltip_text (self->connect_button, _("Connect to a Server…"));
  update_serve_label (self);
  update_reload_action (self);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_HAS_ENGINE]);
}

static void
on_load_progress (double fraction, const char *stage, gpointer user_data)
{
  UmWindow *self = user_data;
  gtk_progress_bar_set_fraction (self->loading_progress, fraction);
  /* The engine's stage names are marked with N_() there. */
  gtk_progress_bar_set_text (self->loading_progress, _(stage));
  gtk_progress_bar_set_show_text (self->loading_progress, TRUE);
}

static void
finish_loading (UmWindow *self)
{
  g_clear_object (&self->load_cancellable);
  g_clear_pointer (&self->loading_path, g_free);
  gtk_revealer_set_reveal_child (self->loading_revealer, FALSE);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_LOADING]);
}

static void
on_model_loaded (GObject *source, GAsyncResult *result, gpointer user_data)
{
  g_autoptr(UmWindow) self = user_data;
  g_autoptr(GError) error = NULL;
  UmEngine *engine = um_engine_load_finish (result, &error);
  g_autofree char *path = g_strdup (self->loading_path);

  /* Replaced by a connection to a server meanwhile: that one decides. */
  if (g_task_get_cancellable (G_TASK (result)) != self->load_cancellable)
    {
      g_clear_pointer (&engine, um_engine_free);
      return;
    }
  finish_loading (self);
  if (engine == NULL)
    {
      if (!g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
        {
          g_autofree char *msg = g_strdup_printf (_("Could not open the model: %s"), error->message);
          um_window_show_error (self, msg);
        }
      return;
    }
  um_window_show_error (self, NULL);
  g_free (self->model_path);
  self->model_path = g_strdup (path);
  g_clear_pointer (&self->engine_profile, um_profile_free);
  self->engine_profile = g_steal_pointer (&self->load_profile);
  set_generator (self, um_local_generator_new (engine));
  update_mode_info (self);
  update_gen_layers (self);
  um_settings_add_recent_model (self->settings, path);
}

/* Engine options as the profile says for @path, the generation settings
 * giving the shape the plan is made for. */
static void
build_engine_options (UmWindow *self, const char *path, UmEngineOptions *options)
{
  g_autofree char *id = um_model_identity (path);
  /* The family's parameters are what it will run with: its description
   * says which (a small file, or the GGUF's header). */
  g_autoptr(UmModelEntry) probe = um_model_probe (path);
  const char *family = probe->family;
  UmArch arch = um_arch_fallback ();
  UmDeviceKind env_device;
  UmGenParams params;

  um_engine_options_init (options);
  env_device = options->device;
  um_profile_to_engine_options (self->profile, id, options);
  /* UNMASK_DEVICE (scripts, tests) decides where a profile leaves it open. */
  if (self->profile->device == UM_DEVICE_AUTO)
    options->device = env_device;
  if (options->n_threads == 0)
    options->n_threads = um_settings_get_threads (self->settings);
  /* Preferences: f32 activations with quantized weights (else the
   * default, which UNMASK_PRODUCTS may set). */
  if (um_settings_get_exact_products (self->settings))
    options->products = UM_PRODUCTS_EXACT;
  /* Planned for the parameters the run will have: the new model's
   * recommendation counts (a small file, or the GGUF's header). */
  {
    g_autoptr(UmGenRecommendation) rec = um_gen_recommendation_load (path);
    UmGenLayer profile;
    UmGenResolved resolved;
    um_profile_gen_layer (self->profile, id, &profile);
    um_settings_resolve_with (self->settings, family, &rec->layer, &profile, &resolved);
    params = resolved.params;
  }
  if (family != NULL)
    um_settings_family_to_arch (family, &arch);
  um_settings_plan_shape (&params, um_arch_info (arch)->schedule, &options->shape);
}

void
um_window_load_model (UmWindow *self, const char *path)
{
  UmEngineOptions options;
  g_autofree char *base = NULL;

  g_return_if_fail (path != NULL);
  if (self->load_cancellable != NULL)
    g_cancellable_cancel (self->load_cancellable);
  if (um_generate_page_get_running (self->generate_page) || um_chat_page_get_busy (self->chat_page))
    {
      um_window_show_error (self, _("Stop the running generation before opening another model."));
      return;
    }
  build_engine_options (self, path, &options);
  g_clear_pointer (&self->load_profile, um_profile_free);
  self->load_profile = um_profile_copy (self->profile);
  g_clear_object (&self->load_cancellable);
  self->load_cancellable = g_cancellable_new ();
  g_free (self->loading_path);
  self->loading_path = g_strdup (path);
  base = g_path_get_basename (path);
  gtk_label_set_text (self->loading_label, base);
  gtk_progress_bar_set_fraction (self->loading_progress, 0.0);
  gtk_revealer_set_reveal_child (self->loading_revealer, TRUE);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_LOADING]);
  um_engine_load_async (path, &options, self->load_cancellable, on_load_progress, self,
                        on_model_loaded, g_object_ref (self));
}

void
um_window_reload_model (UmWindow *self)
{
  g_autofree char *path = g_strdup (self->model_path);

  if (path == NULL)
    return;
  if (um_generate_page_get_running (self->generate_page) || um_chat_page_get_busy (self->chat_page))
    {
      um_window_show_error (self, _("Stop the running generation before opening another model."));
      return;
    }
  /* The old engine goes first: the new plan is made for the memory it holds.
   * The pages stay, showing that no model is loaded until it is back. */
  if (self->load_cancellable != NULL)
    g_cancellable_cancel (self->load_cancellable);
  self->show_workspace = TRUE;
  if (self->generator != NULL)
    set_generator (self, NULL);
  um_window_load_model (self, path);
}

/* Shows @profile (taken) everywhere and remembers its @revision. */
static void
set_profile (UmWindow *self, UmProfile *profile, const char *revision)
{
  g_clear_pointer (&self->profile, um_profile_free);
  self->profile = profile;
  g_free (self->revision);
  self->revision = g_strdup (revision);
  update_mode_info (self);
  um_optimizer_page_set_profile (self->optimizer_page, self->profile);
  /* After the page has the profile: the parameters it changes re-plan it. */
  update_gen_layers (self);
  update_reload_action (self);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_PROFILE]);
}

/* Reads the file; a damaged one, or one a newer Unmask wrote, gives the
 * defaults and the notice banner says why (the file stays as it is: only
 * a commit moves a damaged one aside), the same at start and whenever it
 * is read again. */
static UmProfile *
read_profile (UmWindow *self, char **revision, gboolean *damaged)
{
  g_autofree char *notice = NULL;
  g_autoptr(GError) error = NULL;
  UmProfile *profile = um_profile_load_full (um_window_get_config_dir (self), &notice, revision, NULL, &error);

  if (profile == NULL)
    {
      g_autofree char *msg = g_strdup_printf (_("Could not read the optimizer settings, using the defaults: %s"),
                                              error->message);
      um_window_show_notice (self, msg);
      /* No revision: the next commit is not built on what could not be read. */
      g_clear_pointer (revision, g_free);
      *damaged = TRUE;
      return um_profile_new_default ();
    }
  if (notice != NULL)
    um_window_show_notice (self, notice);
  *damaged = notice != NULL;
  return profile;
}

void
um_window_reload_profile (UmWindow *self)
{
  g_autofree char *revision = NULL;
  gboolean damaged;
  UmProfile *profile = read_profile (self, &revision, &damaged);

  set_profile (self, profile, revision);
}

void
um_window_set_committed_profile (UmWindow *self, const UmProfile *profile, const char *revision)
{
  g_return_if_fail (profile != NULL);
  set_profile (self, um_profile_copy (profile), revision);
}

const char *
um_window_get_profile_revision (UmWindow *self)
{
  return self->revision;
}

AdwToast *
um_window_get_profile_toast (UmWindow *self)
{
  return self->profile_toast;
}

static void
on_profile_toast_dismissed (AdwToast *toast, UmWindow *self)
{
  if (self->profile_toast == toast)
    self->profile_toast = NULL;
}

/* Says what changed; offers to reload a model that runs under other settings. */
static void
announce_profile (UmWindow *self, const char *message)
{
  AdwToast *toast = make_toast (self, message);

  /* Never dismissed from here: libadwaita 1.2 frees a toast dismissed
   * during its show animation too early. The button goes insensitive once
   * the model is reloaded (update_reload_action ()). */
  if (um_window_get_model_outdated (self))
    {
      adw_toast_set_button_label (toast, _("_Reload Model"));
      adw_toast_set_action_name (toast, "win.reload-model");
      /* Time to decide. */
      adw_toast_set_timeout (toast, 10);
    }
  self->profile_toast = toast;
  g_signal_connect_object (toast, "dismissed", G_CALLBACK (on_profile_toast_dismissed), self, 0);
  adw_toast_overlay_add_toast (self->toast_overlay, toast);
}

gboolean
um_window_check_profile (UmWindow *self)
{
  g_autofree char *now = um_profile_current_revision (um_window_get_config_dir (self), NULL);
  g_autofree char *revision = NULL;
  g_autoptr(UmProfile) before = NULL;
  gboolean damaged;
  UmProfile *profile;

  /* Our own writes and repeated events for one write end here. */
  if (now != NULL && self->revision != NULL && g_ascii_strcasecmp (now, self->revision) == 0)
    return FALSE;
  profile = read_profile (self, &revision, &damaged);
  before = um_profile_copy (self->profile);
  set_profile (self, profile, revision);
  if (damaged)
    {
      /* Damaged: the banner says it; the toast only offers the reload. */
      if (um_window_get_model_outdated (self))
        announce_profile (self, _("The loaded model still runs under the settings from before"));
      return TRUE;
    }
  if (!um_profile_equal (before, self->profile))
    {
      g_autofree char *summary = um_profile_summary (self->profile);
      /* Translators: %s is a profile summary, e.g. "extreme-moderate, Q4_K_M, cpu, budget 3.0 GiB" */
      g_autofree char *text = g_strdup_printf (_("Optimizer settings changed outside Unmask: now %s"), summary);
      announce_profile (self, text);
    }
  return TRUE;
}

static gboolean
profile_check_cb (gpointer data)
{
  UmWindow *self = data;

  self->profile_check_id = 0;
  um_window_check_profile (self);
  return G_SOURCE_REMOVE;
}

static void
on_config_dir_changed (GFileMonitor *monitor, GFile *file, GFile *other, GFileMonitorEvent event, UmWindow *self)
{
  g_autofree char *name = g_file_get_basename (file);
  g_autofree char *other_name = other ? g_file_get_basename (other) : NULL;

  /* Backups, the lock and temporary files are not the profile. */
  if (g_strcmp0 (name, self->profile_name) != 0 && g_strcmp0 (other_name, self->profile_name) != 0)
    return;
  /* One write is several events (and the CLI may write twice in a row):
   * look once they have settled. */
  if (self->profile_check_id == 0)
    self->profile_check_id = g_timeout_add (PROFILE_CHECK_DELAY_MS, profile_check_cb, self);
}

static void
watch_profile (UmWindow *self)
{
  g_autofree char *dir = um_profile_dir (um_window_get_config_dir (self));
  g_autofree char *path = um_profile_path (um_window_get_config_dir (self));
  g_autoptr(GFile) file = g_file_new_for_path (dir);
  g_autoptr(GError) error = NULL;

  self->profile_name = g_path_get_basename (path);
  /* The folder, not the file: an atomic write renames a new file over it. */
  self->profile_monitor = g_file_monitor_directory (file, G_FILE_MONITOR_WATCH_MOVES, NULL, &error);
  if (self->profile_monitor == NULL)
    {
      g_debug ("Not watching %s: %s", dir, error->message);
      return;
    }
  g_signal_connect_object (self->profile_monitor, "changed", G_CALLBACK (on_config_dir_changed), self, 0);
}

void
um_window_show_optimizer (UmWindow *self)
{
  self->show_workspace = TRUE;
  update_workspace (self);
  adw_view_stack_set_visible_child_name (self->view_stack, "optimizer");
}

static void
show_optimizer_activated (GtkWidget *widget, const char *action, GVariant *param)
{
  um_window_show_optimizer (UM_WINDOW (widget));
}

/* Brings the generation parameters within what the mode recommends. */
static void
use_recommended_activated (GtkWidget *widget, const char *action, GVariant *param)
{
  UmWindow *self = UM_WINDOW (widget);
  g_autofree char *id = self->model_path ? um_model_identity (self->model_path) : NULL;
  UmModeInfo info;
  UmGenParams params;

  um_mode_info_from_profile (&info, self->profile, id);
  um_settings_get_params (self->settings, &params);
  um_mode_info_recommend (&info, &params);
  g_object_set (self->settings, "block-length", params.block_length, "gen-length", params.gen_length,
                "steps", params.steps, NULL);
}

/* Forgets the user's choice of one parameter ("gen_length", "temperature", …). */
static void
reset_param_activated (GtkWidget *widget, const char *action, GVariant *param)
{
  UmWindow *self = UM_WINDOW (widget);
  UmGenKey key;

  if (um_gen_key_from_name (g_variant_get_string (param, NULL), &key))
    um_settings_reset (self->settings, key);
}

static void
reset_params_activated (GtkWidget *widget, const char *action, GVariant *param)
{
  um_settings_reset_all (UM_WINDOW (widget)->settings);
}

static void
reload_model_activated (GtkWidget *widget, const char *action, GVariant *param)
{
  um_window_reload_model (UM_WINDOW (widget));
}

static void
on_loading_cancel_clicked (UmWindow *self)
{
  if (self->load_cancellable)
    g_cancellable_cancel (self->load_cancellable);
}

char *
um_window_find_demo_model (void)
{
  const char *env = g_getenv ("UNMASK_DEMO_MODEL");
  g_autofree char *installed = g_build_filename (PKGDATADIR, "demo-model", NULL);
  g_autofree char *source = g_build_filename (UM_SOURCE_DATADIR, "demo-model", NULL);

  if (env != NULL && g_file_test (env, G_FILE_TEST_IS_DIR))
    return g_strdup (env);
  if (g_file_test (installed, G_FILE_TEST_IS_DIR))
    return g_steal_pointer (&installed);
  if (g_file_test (source, G_FILE_TEST_IS_DIR))
    return g_steal_pointer (&source);
  return NULL;
}

void
um_window_load_demo_model (UmWindow *self)
{
  g_autofree char *path = um_window_find_demo_model ();
  if (path == NULL)
    {
      um_window_show_error (self, _("The demo model is not installed."));
      return;
    }
  um_window_load_model (self, path);
}

static void
on_demo_clicked (UmWindow *self)
{
  um_window_load_demo_model (self);
}

static void
on_model_chosen (UmModelChooser *chooser, const char *path, gpointer user_data)
{
  um_window_load_model (UM_WINDOW (user_data), path);
}

void
um_window_open_model_chooser (UmWindow *self)
{
  GtkWidget *chooser = um_model_chooser_new (self->settings);
  gtk_window_set_transient_for (GTK_WINDOW (chooser), GTK_WINDOW (self));
  g_signal_connect_object (chooser, "model-chosen", G_CALLBACK (on_model_chosen), self, 0);
  gtk_window_present (GTK_WINDOW (chooser));
}

static void
on_memory_updated (UmMemoryMonitor *monitor, UmWindow *self)
{
  g_autofree char *text = um_memory_monitor_format_summary (monitor);
  gtk_label_set_text (self->memory_label, text);
}

static void
generate_activated (GtkWidget *widget, const char *action, GVariant *param)
{
  UmWindow *self = UM_WINDOW (widget);
  if (self->generator == NULL)
    return;
  if (g_strcmp0 (adw_view_stack_get_visible_child_name (self->view_stack), "chat") == 0)
    return;   /* the chat entry sends with Return itself */
  adw_view_stack_set_visible_child_name (self->view_stack, "generate");
  um_generate_page_generate (self->generate_page);
}

static void
stop_activated (GtkWidget *widget, const char *action, GVariant *param)
{
  UmWindow *self = UM_WINDOW (widget);
  if (self->load_cancellable)
    g_cancellable_cancel (self->load_cancellable);
  um_generate_page_stop (self->generate_page);
  um_chat_page_stop (self->chat_page);
}

/* ---- serving this model, and models on a server ---- */

static void
update_serve_label (UmWindow *self)
{
  g_autofree char *text = self->serving != NULL ? um_serving_describe (self->serving) : NULL;
  const char * const *uris = self->serving != NULL ? um_serving_get_uris (self->serving) : NULL;
  g_autofree char *all = uris != NULL ? g_strjoinv ("\n", (char **) uris) : NULL;
  g_autofree char *tip = NULL;

  const char *dot = text != NULL ? strstr (text, " · ") : NULL;

  /* The address may shrink; the count after it may not. */
  g_free (self->serve_text);
  self->serve_text = g_strdup (text);
  if (dot != NULL)
    {
      g_autofree char *where = g_strndup (text, dot - text);
      gtk_label_set_text (self->serve_label, where);
      gtk_label_set_text (self->serve_waiting_label, dot + 1);
    }
  else
    gtk_label_set_text (self->serve_label, text ? text : "");
  gtk_widget_set_visible (GTK_WIDGET (self->serve_waiting_label), dot != NULL);
  gtk_widget_set_visible (self->serve_box, text != NULL);
  if (all != NULL)
    {
      int waiting = um_serving_get_n_waiting (self->serving);
      /* Translators: the tooltip of the header's serving pill: the addresses, one a line, then the requests waiting */
      tip = g_strdup_printf (g_dngettext (GETTEXT_PACKAGE,
                                          "Serving this model (Preferences → Serve this model) at\n%s\n%d request waiting",
                                          "Serving this model (Preferences → Serve this model) at\n%s\n%d requests waiting",
                                          waiting),
                             all, waiting);
    }
  gtk_widget_set_tooltip_text (self->serve_box, tip);
  gtk_accessible_update_property (GTK_ACCESSIBLE (self->serve_box), GTK_ACCESSIBLE_PROPERTY_LABEL,
                                  tip ? tip : "", -1);
}

static void
on_serving_changed (UmServing *serving, UmWindow *self)
{
  const char *error = um_serving_get_error (serving);

  update_serve_label (self);
  /* A failure is said once, not at every change of the queue. */
  if (g_strcmp0 (error, self->serve_error) != 0)
    {
      g_free (self->serve_error);
      self->serve_error = g_strdup (error);
      if (error != NULL)
        um_window_show_error (self, error);
    }
}

const char * const *
um_window_get_serve_uris (UmWindow *self)
{
  g_return_val_if_fail (UM_IS_WINDOW (self), NULL);
  return self->serving != NULL ? um_serving_get_uris (self->serving) : NULL;
}

const char *
um_window_get_remote_label (UmWindow *self)
{
  g_return_val_if_fail (UM_IS_WINDOW (self), NULL);
  return gtk_widget_get_visible (GTK_WIDGET (self->remote_label)) ? gtk_label_get_text (self->remote_label) : NULL;
}

const char *
um_window_get_serve_label (UmWindow *self)
{
  g_return_val_if_fail (UM_IS_WINDOW (self), NULL);
  return self->serve_text;
}

typedef struct {
  UmWindow     *self;
  GCancellable *cancellable;
  char         *url;
} Connecting;

static void
on_remote_ready (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Connecting *c = user_data;
  g_autoptr(UmWindow) self = c->self;
  g_autoptr(GError) error = NULL;
  UmGenerator *generator = um_remote_generator_new_finish (result, &error);
  g_autofree char *url = c->url;
  gboolean current = self->load_cancellable == c->cancellable;

  g_object_unref (c->cancellable);
  g_free (c);
  /* Replaced by another load or connection meanwhile: that one decides. */
  if (!current)
    {
      g_clear_object (&generator);
      return;
    }
  finish_loading (self);
  if (generator == NULL)
    {
      if (!g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
        {
          /* Translators: the first %s is a server's address, the second why, e.g. "Connection refused" */
          g_autofree char *msg = g_strdup_printf (_("Could not connect to %s: %s"), url, error->message);
          um_window_show_error (self, msg);
        }
      return;
    }
  um_window_show_error (self, NULL);
  /* No model of this computer is in use: nothing to reload or optimize. */
  g_clear_pointer (&self->model_path, g_free);
  g_clear_pointer (&self->engine_profile, um_profile_free);
  set_generator (self, generator);
  update_mode_info (self);
  update_gen_layers (self);
  g_object_set (self->settings, "remote-url", url, NULL);
}

void
um_window_connect_server (UmWindow *self, const char *url, const char *key, const char *model_id)
{
  Connecting *c;

  g_return_if_fail (UM_IS_WINDOW (self));
  g_return_if_fail (url != NULL);
  if (um_window_get_generating (self))
    {
      um_window_show_error (self, _("Stop the running generation before connecting to a server."));
      return;
    }
  if (self->load_cancellable != NULL)
    g_cancellable_cancel (self->load_cancellable);
  g_clear_object (&self->load_cancellable);
  g_clear_pointer (&self->loading_path, g_free);
  self->load_cancellable = g_cancellable_new ();
  c = g_new0 (Connecting, 1);
  c->self = g_object_ref (self);
  c->cancellable = g_object_ref (self->load_cancellable);
  c->url = g_strdup (url);
  {
    /* Translators: shown while connecting; %s is a server's address */
    g_autofree char *text = g_strdup_printf (_("Connecting to %s"), url);
    gtk_label_set_text (self->loading_label, text);
  }
  gtk_progress_bar_set_fraction (self->loading_progress, 0.0);
  gtk_progress_bar_set_show_text (self->loading_progress, FALSE);
  gtk_progress_bar_pulse (self->loading_progress);
  gtk_revealer_set_reveal_child (self->loading_revealer, TRUE);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_LOADING]);
  um_remote_generator_new_async (url, key, model_id, self->load_cancellable, on_remote_ready, c);
}

static void
on_connect_chosen (UmConnectDialog *dialog, const char *url, const char *key, const char *model, UmWindow *self)
{
  um_window_connect_server (self, url, key, model);
}

void
um_window_open_connect_dialog (UmWindow *self)
{
  g_autofree char *url = NULL;
  GtkWidget *dialog;

  g_object_get (self->settings, "remote-url", &url, NULL);
  dialog = um_connect_dialog_new (url != NULL && url[0] != '\0' ? url : NULL);
  gtk_window_set_transient_for (GTK_WINDOW (dialog), GTK_WINDOW (self));
  g_signal_connect_object (dialog, "connect", G_CALLBACK (on_connect_chosen), self, 0);
  gtk_window_present (GTK_WINDOW (dialog));
}

static void
connect_server_activated (GtkWidget *widget, const char *action, GVariant *param)
{
  um_window_open_connect_dialog (UM_WINDOW (widget));
}

/* A model on a server fails for reasons of the network or the server:
 * say so where the window's errors go, not only on the page. */
static void
on_generate_finished (UmGeneratePage *page, UmWindow *self)
{
  const GError *error = um_generate_page_get_last_error (page);
  const UmGeneratorInfo *info = self->generator ? um_generator_get_info (self->generator) : NULL;

  if (error != NULL && info != NULL && info->remote && !g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    {
      /* Translators: the first %s is a server's address, the second what went wrong */
      g_autofree char *msg = g_strdup_printf (_("The server at %s did not answer: %s"), info->location,
                                              error->message);
      um_window_show_error (self, msg);
    }
}

static void
um_window_get_property (GObject *object, guint id, GValue *value, GParamSpec *pspec)
{
  UmWindow *self = UM_WINDOW (object);
  switch (id)
    {
    case PROP_LOADING: g_value_set_boolean (value, um_window_get_loading (self)); break;
    case PROP_ERROR_MESSAGE: g_value_set_string (value, self->error_message); break;
    case PROP_HAS_ENGINE: g_value_set_boolean (value, self->generator != NULL); break;
    case PROP_NOTICE: g_value_set_string (value, self->notice); break;
    case PROP_PROFILE: g_value_set_pointer (value, self->profile); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
um_window_dispose (GObject *object)
{
  UmWindow *self = UM_WINDOW (object);

  /* Its clients' runs end (on this context) while the pages are whole. */
  if (self->serving != NULL)
    {
      g_signal_handlers_disconnect_by_data (self->serving, self);
      um_serving_shutdown (self->serving);
    }
  if (self->load_cancellable)
    g_cancellable_cancel (self->load_cancellable);
  g_clear_handle_id (&self->profile_check_id, g_source_remove);
  if (self->profile_monitor != NULL)
    {
      g_file_monitor_cancel (self->profile_monitor);
      g_clear_object (&self->profile_monitor);
    }
  self->profile_toast = NULL;
  if (self->generate_page != NULL)
    {
      um_generate_page_set_generator (self->generate_page, NULL);
      um_chat_page_set_generator (self->chat_page, NULL);
    }
  if (self->monitor)
    um_memory_monitor_set_engine (self->monitor, NULL);
  if (self->optimizer_page != NULL)
    um_optimizer_page_set_model (self->optimizer_page, NULL, NULL);
  gtk_widget_dispose_template (GTK_WIDGET (self), UM_TYPE_WINDOW);
  self->generate_page = NULL;
  self->chat_page = NULL;
  self->optimizer_page = NULL;
  g_clear_object (&self->serving);
  g_clear_object (&self->generator);
  g_clear_object (&self->monitor);
  g_clear_object (&self->settings);
  G_OBJECT_CLASS (um_window_parent_class)->dispose (object);
}

static void
um_window_finalize (GObject *object)
{
  UmWindow *self = UM_WINDOW (object);
  g_free (self->loading_path);
  g_free (self->serve_error);
  g_free (self->serve_text);
  g_free (self->connecting_url);
  g_free (self->error_message);
  g_free (self->notice);
  g_free (self->model_path);
  g_free (self->revision);
  g_free (self->last_toast);
  g_free (self->profile_name);
  g_clear_pointer (&self->profile, um_profile_free);
  g_clear_pointer (&self->load_profile, um_profile_free);
  g_clear_pointer (&self->engine_profile, um_profile_free);
  G_OBJECT_CLASS (um_window_parent_class)->finalize (object);
}

static void
um_window_class_init (UmWindowClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);

  object_class->get_property = um_window_get_property;
  object_class->dispose = um_window_dispose;
  object_class->finalize = um_window_finalize;

  props[PROP_LOADING] = g_param_spec_boolean ("loading", NULL, NULL, FALSE,
                                              G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  props[PROP_ERROR_MESSAGE] = g_param_spec_string ("error-message", NULL, NULL, NULL,
                                                   G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  props[PROP_HAS_ENGINE] = g_param_spec_boolean ("has-engine", NULL, NULL, FALSE,
                                                 G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  props[PROP_NOTICE] = g_param_spec_string ("notice", NULL, NULL, NULL,
                                            G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  /* The UmProfile in use; notifies when it changes. */
  props[PROP_PROFILE] = g_param_spec_pointer ("profile", NULL, NULL,
                                              G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties (object_class, N_PROPS, props);

  g_type_ensure (UM_TYPE_GENERATE_PAGE);
  g_type_ensure (UM_TYPE_CHAT_PAGE);
  g_type_ensure (UM_TYPE_MEMORY_PAGE);
  g_type_ensure (UM_TYPE_OPTIMIZER_PAGE);

  gtk_widget_class_set_template_from_resource (widget_class, "/io/github/unmask/Unmask/ui/um-window.ui");
  gtk_widget_class_bind_template_child (widget_class, UmWindow, toast_overlay);
  gtk_widget_class_bind_template_child (widget_class, UmWindow, switcher_title);
  gtk_widget_class_bind_template_child (widget_class, UmWindow, switcher_bar);
  gtk_widget_class_bind_template_child (widget_class, UmWindow, error_revealer);
  gtk_widget_class_bind_template_child (widget_class, UmWindow, error_label);
  gtk_widget_class_bind_template_child (widget_class, UmWindow, notice_revealer);
  gtk_widget_class_bind_template_child (widget_class, UmWindow, notice_label);
  gtk_widget_class_bind_template_child (widget_class, UmWindow, loading_revealer);
  gtk_widget_class_bind_template_child (widget_class, UmWindow, loading_label);
  gtk_widget_class_bind_template_child (widget_class, UmWindow, loading_progress);
  gtk_widget_class_bind_template_child (widget_class, UmWindow, memory_label);
  gtk_widget_class_bind_template_child (widget_class, UmWindow, model_label);
  gtk_widget_class_bind_template_child (widget_class, UmWindow, family_label);
  gtk_widget_class_bind_template_child (widget_class, UmWindow, serve_label);
  gtk_widget_class_bind_template_child (widget_class, UmWindow, serve_box);
  gtk_widget_class_bind_template_child (widget_class, UmWindow, serve_waiting_label);
  gtk_widget_class_bind_template_child (widget_class, UmWindow, remote_label);
  gtk_widget_class_bind_template_child (widget_class, UmWindow, connect_button);
  gtk_widget_class_bind_template_child (widget_class, UmWindow, content_stack);
  gtk_widget_class_bind_template_child (widget_class, UmWindow, view_stack);
  gtk_widget_class_bind_template_child (widget_class, UmWindow, generate_page);
  gtk_widget_class_bind_template_child (widget_class, UmWindow, chat_page);
  gtk_widget_class_bind_template_child (widget_class, UmWindow, memory_page);
  gtk_widget_class_bind_template_child (widget_class, UmWindow, optimizer_page);
  gtk_widget_class_bind_template_callback (widget_class, on_error_close_clicked);
  gtk_widget_class_bind_template_callback (widget_class, on_notice_close_clicked);
  gtk_widget_class_bind_template_callback (widget_class, on_loading_cancel_clicked);
  gtk_widget_class_bind_template_callback (widget_class, on_demo_clicked);

  gtk_widget_class_install_action (widget_class, "win.generate", NULL, generate_activated);
  gtk_widget_class_install_action (widget_class, "win.stop", NULL, stop_activated);
  gtk_widget_class_install_action (widget_class, "win.show-optimizer", NULL, show_optimizer_activated);
  gtk_widget_class_install_action (widget_class, "win.use-recommended", NULL, use_recommended_activated);
  gtk_widget_class_install_action (widget_class, "win.reload-model", NULL, reload_model_activated);
  gtk_widget_class_install_action (widget_class, "win.reset-param", "s", reset_param_activated);
  gtk_widget_class_install_action (widget_class, "win.reset-params", NULL, reset_params_activated);
  gtk_widget_class_install_action (widget_class, "win.connect-server", NULL, connect_server_activated);
}

static void
um_window_init (UmWindow *self)
{
  /* Until um_window_new () reads the file. */
  self->profile = um_profile_new_default ();
  gtk_widget_init_template (GTK_WIDGET (self));
  /* GtkApplication adds this for the app; tests make windows without one. */
  gtk_icon_theme_add_resource_path (gtk_icon_theme_get_for_display (gtk_widget_get_display (GTK_WIDGET (self))),
                                    "/io/github/unmask/Unmask/icons");
  adw_view_switcher_title_set_view_switcher_enabled (self->switcher_title, FALSE);
  g_signal_connect_swapped (self->switcher_title, "notify::title-visible", G_CALLBACK (update_switcher_bar), self);
  self->monitor = um_memory_monitor_new ();
  g_signal_connect_object (self->monitor, "updated", G_CALLBACK (on_memory_updated), self, 0);
  um_memory_page_set_monitor (self->memory_page, self->monitor);
  um_optimizer_page_set_monitor (self->optimizer_page, self->monitor);
  gtk_stack_set_visible_child_name (self->content_stack, "welcome");
}

/* The chat answers with the same parameters as the Generate page. */
static void
on_settings_changed (UmSettings *settings, GParamSpec *pspec, UmWindow *self)
{
  UmGenParams params;
  um_settings_get_params (settings, &params);
  if (self->chat_page != NULL)
    um_chat_page_set_params (self->chat_page, &params);
}

UmWindow *
um_window_new (GtkApplication *app, UmSettings *settings)
{
  UmWindow *self = g_object_new (UM_TYPE_WINDOW, "application", app, NULL);
  UmGenParams params;

  self->settings = g_object_ref (settings);
  um_generate_page_set_settings (self->generate_page, settings);
  self->serving = um_serving_new (settings);
  g_signal_connect_object (self->serving, "changed", G_CALLBACK (on_serving_changed), self, 0);
  g_signal_connect_object (self->generate_page, "finished", G_CALLBACK (on_generate_finished), self, 0);
  um_settings_get_params (settings, &params);
  um_chat_page_set_params (self->chat_page, &params);
  g_signal_connect_object (settings, "notify", G_CALLBACK (on_settings_changed), self, 0);
  /* The optimizer profile: a damaged or newer one gives the defaults and
   * the banner says so. */
  um_window_reload_profile (self);
  /* unmask-cli may change it while the app runs. */
  watch_profile (self);
  /* Damaged settings were moved aside the same way: the same banner, after
   * the profile's notice when both were. */
  if (um_settings_get_load_warning (settings) != NULL)
    {
      g_autofree char *both = self->notice != NULL
                                ? g_strconcat (self->notice, "\n", um_settings_get_load_warning (settings), NULL)
                                : NULL;
      um_window_show_notice (self, both != NULL ? both : um_settings_get_load_warning (settings));
    }
  return self;
}

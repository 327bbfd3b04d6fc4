#include "config.h"

#include "um-window.h"

#include <glib/gi18n.h>

#include "um-chat-page.h"
#include "um-generate-page.h"
#include "um-memory-monitor.h"
#include "um-memory-page.h"
#include "um-mode-limits.h"
#include "um-model-chooser.h"
#include "um-optimizer-page.h"
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
  GtkStack        *content_stack;
  AdwViewStack    *view_stack;
  UmGeneratePage  *generate_page;
  UmChatPage      *chat_page;
  UmMemoryPage    *memory_page;
  UmOptimizerPage *optimizer_page;

  UmSettings      *settings;
  UmMemoryMonitor *monitor;
  UmEngine        *engine;
  GCancellable    *load_cancellable;
  char            *loading_path;
  char            *error_message;
  char            *notice;
  UmProfile       *profile;
  char            *model_path;       /* in use, or last asked for */
  gboolean         show_workspace;   /* the pages without a model: the Optimizer asked for */
};

G_DEFINE_FINAL_TYPE (UmWindow, um_window, ADW_TYPE_APPLICATION_WINDOW)

enum { PROP_0, PROP_LOADING, PROP_ERROR_MESSAGE, PROP_HAS_ENGINE, PROP_NOTICE, PROP_PROFILE, N_PROPS };
static GParamSpec *props[N_PROPS];

UmEngine *
um_window_get_engine (UmWindow *self)
{
  return self->engine;
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

void
um_window_add_toast (UmWindow *self, const char *message)
{
  /* Toast titles are markup in libadwaita 1.2. */
  g_autofree char *escaped = g_markup_escape_text (message, -1);
  adw_toast_overlay_add_toast (self->toast_overlay, adw_toast_new (escaped));
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
                                    (self->engine != NULL || self->show_workspace)
                                    && adw_view_switcher_title_get_title_visible (self->switcher_title));
}

/* The mode in use for the model, on the Generate and Chat pages. */
static void
update_mode_info (UmWindow *self)
{
  g_autofree char *id = self->model_path ? um_model_identity (self->model_path) : NULL;
  UmModeInfo info;

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
  const UmGenRecommendation *rec = self->engine ? um_engine_get_recommendation (self->engine) : NULL;
  UmGenLayer profile;

  if (self->settings == NULL)
    return;
  um_profile_gen_layer (self->profile, id, &profile);
  um_settings_set_layers (self->settings, rec ? &rec->layer : NULL, rec ? rec->origin : NULL, &profile);
}

/* The pages need a model, except the Optimizer once asked for. */
static void
update_workspace (UmWindow *self)
{
  gboolean workspace = self->engine != NULL || self->show_workspace;

  gtk_stack_set_visible_child_name (self->content_stack, workspace ? "workspace" : "welcome");
  adw_view_switcher_title_set_view_switcher_enabled (self->switcher_title, workspace);
  update_switcher_bar (self);
}

static void
set_engine (UmWindow *self, UmEngine *engine)
{
  /* Pages drop their references before the old engine goes. */
  um_generate_page_set_engine (self->generate_page, engine);
  um_chat_page_set_engine (self->chat_page, engine);
  um_memory_monitor_set_engine (self->monitor, engine);
  um_optimizer_page_set_model (self->optimizer_page, self->model_path, engine);
  g_clear_pointer (&self->engine, um_engine_free);
  self->engine = engine;
  update_workspace (self);
  /* The model in use names the button that opens another one. */
  if (engine != NULL)
    {
      UmModel *model = um_engine_get_model (engine);
      adw_view_switcher_title_set_subtitle (self->switcher_title, model->display_name);
      gtk_label_set_text (self->model_label, model->display_name);
    }
  else
    {
      adw_view_switcher_title_set_subtitle (self->switcher_title, NULL);
      gtk_label_set_text (self->model_label, _("Open Model"));
    }
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
  update_mode_info (self);
  set_engine (self, engine);
  update_gen_layers (self);
  um_settings_add_recent_model (self->settings, path);
}

/* Engine options as the profile says for @path, the generation settings
 * giving the shape the plan is made for. */
static void
build_engine_options (UmWindow *self, const char *path, UmEngineOptions *options)
{
  g_autofree char *id = um_model_identity (path);
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
  /* Planned for the parameters the run will have: the new model's
   * recommendation counts (a small file, or the GGUF's header). */
  {
    g_autoptr(UmGenRecommendation) rec = um_gen_recommendation_load (path);
    UmGenLayer profile;
    UmGenResolved resolved;
    um_profile_gen_layer (self->profile, id, &profile);
    um_settings_resolve_with (self->settings, &rec->layer, &profile, &resolved);
    params = resolved.params;
  }
  options->shape.gen_length = params.gen_length;
  options->shape.block_length = params.block_length;
  options->shape.cfg = params.cfg_scale > 0;
  /* Fast decoding's KV cache is memory too: plan for it when it is on. */
  options->shape.kv_cache = params.cache != UM_CACHE_NONE;
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
  self->load_cancellable = g_cancellable_new ();
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
  if (self->engine != NULL)
    set_engine (self, NULL);
  um_window_load_model (self, path);
}

void
um_window_reload_profile (UmWindow *self)
{
  g_autofree char *notice = NULL;
  g_autoptr(GError) error = NULL;
  UmProfile *profile = um_profile_load (um_window_get_config_dir (self), &notice, &error);

  if (profile == NULL)
    {
      g_autofree char *msg = g_strdup_printf (_("Could not read the optimizer settings, using the defaults: %s"),
                                              error->message);
      um_window_show_notice (self, msg);
      profile = um_profile_new_default ();
    }
  else if (notice != NULL)
    um_window_show_notice (self, notice);
  g_clear_pointer (&self->profile, um_profile_free);
  self->profile = profile;
  update_mode_info (self);
  update_gen_layers (self);
  um_optimizer_page_set_profile (self->optimizer_page, self->profile);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_PROFILE]);
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
  if (self->engine == NULL)
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

static void
um_window_get_property (GObject *object, guint id, GValue *value, GParamSpec *pspec)
{
  UmWindow *self = UM_WINDOW (object);
  switch (id)
    {
    case PROP_LOADING: g_value_set_boolean (value, um_window_get_loading (self)); break;
    case PROP_ERROR_MESSAGE: g_value_set_string (value, self->error_message); break;
    case PROP_HAS_ENGINE: g_value_set_boolean (value, self->engine != NULL); break;
    case PROP_NOTICE: g_value_set_string (value, self->notice); break;
    case PROP_PROFILE: g_value_set_pointer (value, self->profile); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
um_window_dispose (GObject *object)
{
  UmWindow *self = UM_WINDOW (object);

  if (self->load_cancellable)
    g_cancellable_cancel (self->load_cancellable);
  if (self->generate_page != NULL)
    {
      um_generate_page_set_engine (self->generate_page, NULL);
      um_chat_page_set_engine (self->chat_page, NULL);
    }
  if (self->monitor)
    um_memory_monitor_set_engine (self->monitor, NULL);
  if (self->optimizer_page != NULL)
    um_optimizer_page_set_model (self->optimizer_page, NULL, NULL);
  gtk_widget_dispose_template (GTK_WIDGET (self), UM_TYPE_WINDOW);
  self->generate_page = NULL;
  self->chat_page = NULL;
  self->optimizer_page = NULL;
  g_clear_pointer (&self->engine, um_engine_free);
  g_clear_object (&self->monitor);
  g_clear_object (&self->settings);
  G_OBJECT_CLASS (um_window_parent_class)->dispose (object);
}

static void
um_window_finalize (GObject *object)
{
  UmWindow *self = UM_WINDOW (object);
  g_free (self->loading_path);
  g_free (self->error_message);
  g_free (self->notice);
  g_free (self->model_path);
  g_clear_pointer (&self->profile, um_profile_free);
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
  gtk_widget_class_install_action (widget_class, "win.reset-param", "s", reset_param_activated);
  gtk_widget_class_install_action (widget_class, "win.reset-params", NULL, reset_params_activated);
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
  um_settings_get_params (settings, &params);
  um_chat_page_set_params (self->chat_page, &params);
  g_signal_connect_object (settings, "notify", G_CALLBACK (on_settings_changed), self, 0);
  /* The optimizer profile: a corrupt one is moved aside and the banner says so. */
  um_window_reload_profile (self);
  return self;
}

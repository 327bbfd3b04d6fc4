/* The main window under Xvfb: opens and closes without leaks, a generation
 * on the fixture model updates the diffusion view step by step and ends with
 * the reference ids, Stop cancels within one step, the step slider replays,
 * a bad model file shows an error and the app keeps working. With
 * UM_SCREENSHOT_DIR set it also saves screenshots of the window. */
#include "config.h"

#include <adwaita.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <string.h>

#include "um-chat-page.h"
#include "um-generate-page.h"
#include "um-profile.h"
#include "um-settings.h"
#include "um-test-util.h"
#include "um-window.h"

static char *tmp_dir;

static void
wait_for (gboolean (*done) (gpointer), gpointer data, int timeout_s)
{
  gint64 end = g_get_monotonic_time () + (gint64) timeout_s * G_USEC_PER_SEC;
  while (!done (data))
    {
      g_assert_cmpint (g_get_monotonic_time (), <, end);
      g_main_context_iteration (NULL, TRUE);
    }
}

static gboolean
not_loading (gpointer win)
{
  return !um_window_get_loading (win);
}

static gboolean
mapped (gpointer win)
{
  return gtk_widget_get_mapped (win);
}

static gboolean
not_running (gpointer page)
{
  return !um_generate_page_get_running (page);
}

static UmWindow *
make_window_with (const char *settings_name, int width, int height)
{
  g_autofree char *settings_path = g_build_filename (tmp_dir, settings_name, NULL);
  g_autoptr(UmSettings) settings = um_settings_new (settings_path);
  UmWindow *win = um_window_new (NULL, settings);

  gtk_window_set_default_size (GTK_WINDOW (win), width, height);
  gtk_window_present (GTK_WINDOW (win));
  wait_for (mapped, win, 10);
  return win;
}

static UmWindow *
make_window_sized (int width, int height)
{
  return make_window_with ("settings.json", width, height);
}

static UmWindow *
make_window (void)
{
  return make_window_sized (1180, 780);
}

static void
destroy_window (UmWindow *win)
{
  g_object_ref (win);
  gtk_window_destroy (GTK_WINDOW (win));
  while (g_main_context_pending (NULL))
    g_main_context_iteration (NULL, FALSE);
  g_assert_finalize_object (win);
}

static void
load (UmWindow *win, const char *path)
{
  um_window_load_model (win, path);
  wait_for (not_loading, win, 30);
}

static void
save_screenshot_full (GtkWidget *widget, const char *name, gboolean settle)
{
  const char *dir = g_getenv ("UM_SCREENSHOT_DIR");
  g_autoptr(GdkPaintable) paintable = NULL;
  g_autoptr(GtkSnapshot) snapshot = NULL;
  g_autoptr(GskRenderNode) node = NULL;
  g_autoptr(GdkTexture) texture = NULL;
  g_autofree char *path = NULL;
  int w, h;

  if (dir == NULL)
    return;
  /* Let transitions (crossfades, revealers) finish and drawing settle. */
  if (settle)
    {
      gint64 end = g_get_monotonic_time () + 800 * 1000;
      while (g_get_monotonic_time () < end)
        g_main_context_iteration (NULL, FALSE);
    }
  w = gtk_widget_get_width (widget);
  h = gtk_widget_get_height (widget);
  paintable = gtk_widget_paintable_new (widget);
  snapshot = gtk_snapshot_new ();
  gdk_paintable_snapshot (paintable, GDK_SNAPSHOT (snapshot), w, h);
  node = gtk_snapshot_free_to_node (g_steal_pointer (&snapshot));
  g_assert_nonnull (node);
  texture = gsk_renderer_render_texture (gtk_native_get_renderer (GTK_NATIVE (widget)), node,
                                         &GRAPHENE_RECT_INIT (0, 0, w, h));
  path = g_build_filename (dir, name, NULL);
  g_assert_true (gdk_texture_save_to_png (texture, path));
  g_test_message ("saved %s", path);
}

static void
save_screenshot (GtkWidget *widget, const char *name)
{
  save_screenshot_full (widget, name, TRUE);
}

/* Preferences' Exact Products: quantized weights meet f32 activations in
 * the next model loaded; off, the engine's default (8-bit activations for
 * every quantized type) holds. */
static void
test_exact_products (void)
{
  g_autofree char *model = um_test_data_path ("tiny-llada-q8_0.gguf");
  UmWindow *win = make_window ();
  UmSettings *settings = um_window_get_settings (win);

  load (win, model);
  g_assert_nonnull (um_window_get_engine (win));
  g_assert_cmpint (um_backend_cpu_get_products (um_engine_get_backend (um_window_get_engine (win))), ==,
                   UM_PRODUCTS_INT8);
  g_object_set (settings, "exact-products", TRUE, NULL);
  g_assert_true (um_settings_get_exact_products (settings));
  load (win, model);
  g_assert_cmpint (um_backend_cpu_get_products (um_engine_get_backend (um_window_get_engine (win))), ==,
                   UM_PRODUCTS_EXACT);
  g_object_set (settings, "exact-products", FALSE, NULL);
  destroy_window (win);
}

static void
test_open_close (void)
{
  UmWindow *win = make_window ();
  g_assert_null (um_window_get_engine (win));
  save_screenshot (GTK_WIDGET (win), "welcome.png");
  destroy_window (win);
}

typedef struct {
  UmDiffusionView *view;
  int notifies;
  gboolean monotonic;
} StepWatch;

static void
mark_painted (gboolean *painted)
{
  *painted = TRUE;
}

/* Each new step adds exactly one committed cell (steps == gen_length here). */
static void
on_steps_recorded (UmDiffusionView *view, GParamSpec *pspec, StepWatch *w)
{
  g_autoptr(GArray) shown = um_diffusion_view_get_shown_ids (view);
  int n = um_diffusion_view_get_n_steps_recorded (view), filled = 0;

  if (n == 0)
    return;
  for (guint i = 0; i < shown->len; i++)
    filled += g_array_index (shown, gint32, i) != 508;
  if (filled != n)
    w->monotonic = FALSE;
  w->notifies++;
}

static JsonObject *
fixture_case (JsonParser *parser, guint index)
{
  JsonArray *cases = json_object_get_array_member (json_node_get_object (json_parser_get_root (parser)), "generate");
  return json_array_get_object_element (cases, index);
}

static void
set_params (UmWindow *win, int gen, int steps, int block)
{
  UmGeneratePage *page = UM_GENERATE_PAGE (um_window_get_generate_page (win));

  um_generate_page_set_prompt (page, "What is free software?");
  /* The page's controls are bound to the settings. */
  g_object_set (um_window_get_settings (win), "gen-length", gen, "steps", steps, "block-length", block,
                "chat-template", TRUE, "temperature", 0.0, "cfg-scale", 0.0, "remasking", "low_confidence",
                NULL);
}

static void
test_generate_live_and_replay (void)
{
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autofree char *json = um_test_data_path ("tiny-llada.expected.json");
  g_autofree char *model = um_test_data_path ("tiny-llada");
  UmWindow *win = make_window ();
  UmGeneratePage *page = UM_GENERATE_PAGE (um_window_get_generate_page (win));
  UmDiffusionView *view = um_generate_page_get_view (page);
  StepWatch watch = { view, 0, TRUE };
  JsonObject *c;
  JsonArray *want;
  GArray *got;
  g_autoptr(GArray) shown = NULL;
  gulong id;

  g_assert_true (json_parser_load_from_file (parser, json, NULL));
  c = fixture_case (parser, 0);   /* gen 32, steps 32, block 8, chat prompt */
  load (win, model);
  g_assert_nonnull (um_window_get_engine (win));
  g_assert_null (um_window_get_error_message (win));

  set_params (win, 32, 32, 8);
  g_assert_null (um_generate_page_get_problem (page));
  id = g_signal_connect (view, "notify::n-steps-recorded", G_CALLBACK (on_steps_recorded), &watch);
  gtk_widget_activate_action (GTK_WIDGET (win), "win.generate", NULL);
  g_assert_true (um_generate_page_get_running (page));
  wait_for (not_running, page, 60);
  g_signal_handler_disconnect (view, id);

  g_assert_null (um_generate_page_get_last_error (page));
  got = um_generate_page_get_last_ids (page);
  want = json_object_get_array_member (c, "ids");
  g_assert_cmpuint (got->len, ==, json_array_get_length (want));
  for (guint i = 0; i < got->len; i++)
    g_assert_cmpint (g_array_index (got, gint32, i), ==, json_array_get_int_element (want, i));
  /* The view saw every step, one committed cell more each time. */
  g_assert_cmpint (um_diffusion_view_get_n_steps_recorded (view), ==, 32);
  g_assert_cmpint (watch.notifies, ==, 32);
  g_assert_true (watch.monotonic);
  shown = um_diffusion_view_get_shown_ids (view);
  g_assert_cmpmem (shown->data, shown->len * 4, got->data, got->len * 4);

  /* The slider replays: position 5 shows the canvas after 5 steps. */
  gtk_range_set_value (um_generate_page_get_step_scale (page), 5);
  g_assert_cmpint (um_diffusion_view_get_shown_step (view), ==, 4);
  {
    g_autoptr(GArray) at5 = um_diffusion_view_get_shown_ids (view);
    int filled = 0;
    for (guint i = 0; i < at5->len; i++)
      filled += g_array_index (at5, gint32, i) != 508;
    g_assert_cmpint (filled, ==, 5);
  }
  destroy_window (win);
}

typedef struct {
  UmWindow *win;
  guint64 passes_at_stop;
  gboolean stopped;
} StopWatch;

static void
on_first_step (UmDiffusionView *view, GParamSpec *pspec, StopWatch *w)
{
  if (w->stopped)
    return;
  w->stopped = TRUE;
  w->passes_at_stop = um_forward_get_stats (um_engine_get_forward (um_window_get_engine (w->win)))->n_passes;
  gtk_widget_activate_action (GTK_WIDGET (w->win), "win.stop", NULL);
}

static void
test_stop_within_one_step (void)
{
  g_autofree char *model = um_test_data_path ("small-kquant");
  UmWindow *win = make_window ();
  UmGeneratePage *page = UM_GENERATE_PAGE (um_window_get_generate_page (win));
  UmDiffusionView *view = um_generate_page_get_view (page);
  gboolean interrupted = FALSE;

  load (win, model);
  /* Step events reach the main thread later than the engine makes them, and
   * on a loaded machine the whole 256-step run of this small model can end
   * before the first event is handled: then the stop lands after the last
   * pass and there is nothing to interrupt. The property checked on every
   * run does not depend on timing (at most one pass after the stop, the run
   * ends cancelled); that a stop really cuts a run short needs one run where
   * it was made before the last pass, so up to five runs are tried. */
  for (int attempt = 0; attempt < 5 && !interrupted; attempt++)
    {
      StopWatch w = { win, 0, FALSE };
      guint64 passes_end;
      gulong id;

      set_params (win, 256, 256, 256);
      um_forward_reset_stats (um_engine_get_forward (um_window_get_engine (win)));
      id = g_signal_connect (view, "notify::n-steps-recorded", G_CALLBACK (on_first_step), &w);
      um_generate_page_generate (page);
      wait_for (not_running, page, 120);
      g_signal_handler_disconnect (view, id);
      g_assert_true (w.stopped);
      g_assert_error ((GError *) um_generate_page_get_last_error (page), G_IO_ERROR, G_IO_ERROR_CANCELLED);
      passes_end = um_forward_get_stats (um_engine_get_forward (um_window_get_engine (win)))->n_passes;
      g_test_message ("run %d: forward passes at stop: %" G_GUINT64_FORMAT ", at the end: %" G_GUINT64_FORMAT,
                      attempt, w.passes_at_stop, passes_end);
      g_assert_cmpuint (passes_end - w.passes_at_stop, <=, 1);
      if (w.passes_at_stop + 1 < 256)
        {
          g_assert_cmpint (um_diffusion_view_get_n_steps_recorded (view), <, 256);
          interrupted = TRUE;
        }
    }
  g_assert_true (interrupted);

  /* The app keeps working: a new run completes. */
  set_params (win, 16, 16, 8);
  um_generate_page_generate (page);
  wait_for (not_running, page, 60);
  g_assert_null (um_generate_page_get_last_error (page));
  destroy_window (win);
}

static void
test_bad_model_then_good (void)
{
  g_autofree char *bad = g_build_filename (tmp_dir, "broken.gguf", NULL);
  g_autofree char *model = um_test_data_path ("tiny-llada");
  UmWindow *win = make_window ();

  g_assert_true (g_file_set_contents (bad, "GGUF\x03\0\0\0garbage", 15, NULL));
  load (win, bad);
  g_assert_null (um_window_get_engine (win));
  g_assert_nonnull (um_window_get_error_message (win));
  g_assert_nonnull (strstr (um_window_get_error_message (win), "broken.gguf"));

  load (win, "/nonexistent/model");
  g_assert_nonnull (strstr (um_window_get_error_message (win), "/nonexistent/model"));

  load (win, model);
  g_assert_nonnull (um_window_get_engine (win));
  g_assert_null (um_window_get_error_message (win));
  destroy_window (win);
}

/* A long answer: the view scrolls along with the newest step. */
static void
test_view_follows_by_scrolling (void)
{
  g_autofree char *model = um_test_data_path ("tiny-llada");
  UmWindow *win = make_window_sized (900, 560);
  UmGeneratePage *page = UM_GENERATE_PAGE (um_window_get_generate_page (win));
  GtkWidget *scrolled;
  GtkAdjustment *adj;

  load (win, model);
  /* Blocks fill the canvas top to bottom: the last step is in the last rows. */
  set_params (win, 512, 128, 64);
  um_generate_page_generate (page);
  wait_for (not_running, page, 120);
  g_assert_null (um_generate_page_get_last_error (page));
  /* Let the last scroll happen after layout. */
  for (int i = 0; i < 50; i++)
    g_main_context_iteration (NULL, FALSE);
  scrolled = gtk_widget_get_ancestor (GTK_WIDGET (um_generate_page_get_view (page)), GTK_TYPE_SCROLLED_WINDOW);
  adj = gtk_scrolled_window_get_vadjustment (GTK_SCROLLED_WINDOW (scrolled));
  g_test_message ("canvas %.0f px high, page %.0f, scrolled to %.0f", gtk_adjustment_get_upper (adj),
                  gtk_adjustment_get_page_size (adj), gtk_adjustment_get_value (adj));
  g_assert_cmpfloat (gtk_adjustment_get_upper (adj), >, gtk_adjustment_get_page_size (adj));
  g_assert_cmpfloat (gtk_adjustment_get_value (adj), >, 0);
  g_assert_cmpfloat (gtk_adjustment_get_value (adj) + gtk_adjustment_get_page_size (adj), >=,
                     gtk_adjustment_get_upper (adj) - 80);
  destroy_window (win);
}

static gboolean
flap_folded (gpointer flap)
{
  return adw_flap_get_folded (flap);
}

/* A phone-sized window: the parameters fold away and the app still works. */
static void
test_narrow_window (void)
{
  g_autofree char *model = um_test_data_path ("tiny-llada");
  UmWindow *win = make_window_sized (400, 720);
  UmGeneratePage *page = UM_GENERATE_PAGE (um_window_get_generate_page (win));
  AdwFlap *flap;

  load (win, model);
  set_params (win, 32, 32, 8);
  save_screenshot (GTK_WIDGET (win), "narrow.png");
  flap = ADW_FLAP (adw_bin_get_child (ADW_BIN (page)));
  wait_for (flap_folded, flap, 10);
  g_assert_cmpint (gtk_widget_get_width (GTK_WIDGET (win)), <=, 420);
  um_generate_page_generate (page);
  g_assert_false (adw_flap_get_reveal_flap (flap));
  wait_for (not_running, page, 60);
  g_assert_null (um_generate_page_get_last_error (page));
  destroy_window (win);
}

typedef struct {
  UmDiffusionView *view;
  int min_steps;
} Progress;

static gboolean
reached_steps (gpointer data)
{
  Progress *p = data;
  return um_diffusion_view_get_n_steps_recorded (p->view) >= p->min_steps;
}

/* The generate page in the middle of a run, on a model big enough (made
 * here) that the run is still going when the frame is painted. */
static void
test_generate_screenshot (void)
{
  g_autofree char *dir = g_build_filename (tmp_dir, "screenshot-model", NULL);
  g_autoptr(GError) error = NULL;
  UmTestModelSpec spec;
  UmWindow *win;
  UmGeneratePage *page;
  Progress progress;
  GdkFrameClock *clock;
  gboolean painted = FALSE;
  gulong id;

  if (g_getenv ("UM_SCREENSHOT_DIR") == NULL)
    {
      g_test_skip ("UM_SCREENSHOT_DIR is not set");
      return;
    }
  um_test_model_spec_init (&spec);
  spec.d_model = 512;
  spec.n_heads = 8;
  spec.n_kv_heads = 8;
  spec.mlp_hidden = 2048;
  spec.n_layers = 8;
  g_assert_true (um_test_write_model (dir, &spec, &error));
  win = make_window ();
  page = UM_GENERATE_PAGE (um_window_get_generate_page (win));
  load (win, dir);
  set_params (win, 64, 64, 16);
  um_generate_page_generate (page);
  progress.view = um_generate_page_get_view (page);
  progress.min_steps = 26;
  wait_for (reached_steps, &progress, 120);
  /* One painted frame, then the picture, while the engine keeps going. */
  clock = gtk_widget_get_frame_clock (GTK_WIDGET (win));
  id = g_signal_connect_swapped (clock, "after-paint", G_CALLBACK (mark_painted), &painted);
  gtk_widget_queue_draw (GTK_WIDGET (win));
  while (!painted)
    g_main_context_iteration (NULL, TRUE);
  g_signal_handler_disconnect (clock, id);
  g_assert_true (um_generate_page_get_running (page));
  save_screenshot_full (GTK_WIDGET (win), "generate.png", FALSE);
  um_generate_page_stop (page);
  wait_for (not_running, page, 60);
  destroy_window (win);
}

/* The shipped demo model (data/demo-model) after a whole run on the app's
 * default settings: the README's picture of what it writes. */
static void
test_demo_screenshot (void)
{
  g_autofree char *model = um_window_find_demo_model ();
  UmWindow *win;
  UmGeneratePage *page;

  if (g_getenv ("UM_SCREENSHOT_DIR") == NULL)
    {
      g_test_skip ("UM_SCREENSHOT_DIR is not set");
      return;
    }
  g_assert_nonnull (model);
  win = make_window ();
  page = UM_GENERATE_PAGE (um_window_get_generate_page (win));
  load (win, model);
  um_generate_page_set_prompt (page, "The history of the city");
  /* What a first start shows: no choices of earlier tests, the model's
   * recommendation and the defaults. */
  um_settings_reset_all (um_window_get_settings (win));
  g_object_set (um_window_get_settings (win), "chat-template", FALSE, NULL);
  um_generate_page_generate (page);
  wait_for (not_running, page, 300);
  g_assert_null (um_generate_page_get_last_error (page));
  save_screenshot (GTK_WIDGET (win), "demo.png");
  destroy_window (win);
}

static gboolean
chat_idle (gpointer page)
{
  return !um_chat_page_get_busy (page);
}

static void
test_chat_screenshot (void)
{
  g_autofree char *model = um_test_data_path ("tiny-llada");
  UmWindow *win;
  UmChatPage *chat;
  AdwViewStack *stack;

  if (g_getenv ("UM_SCREENSHOT_DIR") == NULL)
    {
      g_test_skip ("UM_SCREENSHOT_DIR is not set");
      return;
    }
  win = make_window ();
  load (win, model);
  chat = UM_CHAT_PAGE (um_window_get_chat_page (win));
  stack = ADW_VIEW_STACK (gtk_widget_get_ancestor (GTK_WIDGET (chat), ADW_TYPE_VIEW_STACK));
  adw_view_stack_set_visible_child_name (stack, "chat");
  um_chat_page_send (chat, "What is free software?");
  wait_for (chat_idle, chat, 60);
  um_chat_page_send (chat, "And what is copyleft?");
  wait_for (chat_idle, chat, 60);
  save_screenshot (GTK_WIDGET (win), "chat.png");
  destroy_window (win);
}

/* A settings.json and an optimizer.json of 200,000 nested '[' at start
 * (json-glib alone overflowed the stack on either, before any window):
 * the settings are moved aside, the profile stays until a change commits
 * over it (only a commit moves it aside), one banner tells of both, no
 * error is shown, and the app loads a model and generates. */
static void
test_hostile_config_files (void)
{
  g_autofree char *dir = g_build_filename (tmp_dir, "hostile", NULL);
  g_autofree char *settings_path = g_build_filename (dir, "settings.json", NULL);
  g_autofree char *profile_path = NULL;
  g_autofree char *model = um_test_data_path ("tiny-llada");
  g_autofree char *deep = g_strnfill (200000, '[');
  g_autoptr(UmSettings) settings = NULL;
  UmGeneratePage *page;
  UmWindow *win;
  const char *notice;

  g_assert_cmpint (g_mkdir_with_parents (dir, 0700), ==, 0);
  g_setenv ("UNMASK_CONFIG_DIR", dir, TRUE);
  profile_path = um_profile_path (dir);
  g_assert_true (g_file_set_contents (settings_path, deep, -1, NULL));
  g_assert_true (g_file_set_contents (profile_path, deep, -1, NULL));

  settings = um_settings_new (settings_path);
  win = um_window_new (NULL, settings);
  gtk_window_set_default_size (GTK_WINDOW (win), 1180, 780);
  gtk_window_present (GTK_WINDOW (win));
  wait_for (mapped, win, 10);
  notice = um_window_get_notice (win);
  g_test_message ("notice: %s", notice);
  g_assert_nonnull (notice);
  g_assert_nonnull (strstr (notice, "optimizer.json.corrupt-"));
  g_assert_nonnull (strstr (notice, "settings.json.corrupt-"));
  g_assert_nonnull (strstr (notice, "nested more than 64 levels deep"));
  g_assert_null (um_window_get_error_message (win));
  g_assert_false (g_file_test (settings_path, G_FILE_TEST_EXISTS));
  {
    g_autofree char *text = um_test_read_file (profile_path);
    g_assert_cmpstr (text, ==, deep);
  }
  g_assert_cmpint (um_window_get_profile (win)->mem.mode, ==, UM_MEM_STANDARD);

  /* The app works. */
  load (win, model);
  g_assert_nonnull (um_window_get_engine (win));
  g_assert_null (um_window_get_error_message (win));
  page = UM_GENERATE_PAGE (um_window_get_generate_page (win));
  set_params (win, 16, 16, 8);
  um_generate_page_generate (page);
  wait_for (not_running, page, 60);
  g_assert_null (um_generate_page_get_last_error (page));
  destroy_window (win);
  g_unsetenv ("UNMASK_CONFIG_DIR");
}

/* An optimizer.json a newer Unmask wrote: the banner says so, the app
 * runs on the defaults, and the file stays byte for byte. */
static void
test_newer_profile (void)
{
  g_autofree char *dir = g_build_filename (tmp_dir, "newer", NULL);
  g_autofree char *profile_path = NULL;
  g_autoptr(UmSettings) settings = NULL;
  g_autofree char *settings_path = g_build_filename (dir, "settings.json", NULL);
  const char *newer = "{\"version\": 3, \"memory\": {\"mode\": \"warp-drive\"}, \"quantum\": true}\n";
  UmWindow *win;
  const char *notice;

  g_assert_cmpint (g_mkdir_with_parents (dir, 0700), ==, 0);
  g_setenv ("UNMASK_CONFIG_DIR", dir, TRUE);
  profile_path = um_profile_path (dir);
  g_assert_true (g_file_set_contents (profile_path, newer, -1, NULL));
  settings = um_settings_new (settings_path);
  win = um_window_new (NULL, settings);
  gtk_window_present (GTK_WINDOW (win));
  wait_for (mapped, win, 10);
  notice = um_window_get_notice (win);
  g_test_message ("notice: %s", notice);
  g_assert_nonnull (notice);
  g_assert_nonnull (strstr (notice, "written by a newer Unmask"));
  g_assert_null (um_window_get_error_message (win));
  g_assert_cmpint (um_window_get_profile (win)->mem.mode, ==, UM_MEM_STANDARD);
  destroy_window (win);
  {
    g_autofree char *text = um_test_read_file (profile_path);
    g_assert_cmpstr (text, ==, newer);
  }
  g_assert_cmpuint (um_test_count_prefix (dir, "optimizer.json.corrupt-"), ==, 0);
  g_unsetenv ("UNMASK_CONFIG_DIR");
}

/* The spin button of the Generate page's parameter row titled @title. */
static GtkSpinButton *
find_row_spin (GtkWidget *widget, const char *title)
{
  if (ADW_IS_ACTION_ROW (widget)
      && g_strcmp0 (adw_preferences_row_get_title (ADW_PREFERENCES_ROW (widget)), title) == 0)
    {
      GtkWidget *spin = adw_action_row_get_activatable_widget (ADW_ACTION_ROW (widget));
      return GTK_IS_SPIN_BUTTON (spin) ? GTK_SPIN_BUTTON (spin) : NULL;
    }
  for (GtkWidget *c = gtk_widget_get_first_child (widget); c != NULL; c = gtk_widget_get_next_sibling (c))
    {
      GtkSpinButton *found = find_row_spin (c, title);
      if (found != NULL)
        return found;
    }
  return NULL;
}

/* The button that activates @action with the string target @target. */
static GtkWidget *
find_action_button (GtkWidget *widget, const char *action, const char *target)
{
  if (GTK_IS_BUTTON (widget) && g_strcmp0 (gtk_actionable_get_action_name (GTK_ACTIONABLE (widget)), action) == 0)
    {
      GVariant *t = gtk_actionable_get_action_target_value (GTK_ACTIONABLE (widget));
      if (t != NULL && g_variant_is_of_type (t, G_VARIANT_TYPE_STRING) && g_str_equal (g_variant_get_string (t, NULL), target))
        return widget;
    }
  for (GtkWidget *c = gtk_widget_get_first_child (widget); c != NULL; c = gtk_widget_get_next_sibling (c))
    {
      GtkWidget *found = find_action_button (c, action, target);
      if (found != NULL)
        return found;
    }
  return NULL;
}

static void
assert_note (UmGeneratePage *page, UmGenKey key, const char *needle)
{
  const char *note = um_generate_page_get_source_note (page, key);
  g_test_message ("%s: %s", um_gen_key_name (key), note ? note : "(built-in)");
  if (needle == NULL)
    g_assert_null (note);
  else
    g_assert_nonnull (strstr (note, needle));
}

/* Opening the demo model sets the parameters the user has not chosen to the
 * model's recommendation and says so; a value the user changes stays theirs
 * when another model is opened, an untouched one follows the new model. */
static void
test_model_defaults (void)
{
  g_autofree char *demo = um_window_find_demo_model ();
  g_autofree char *fixture = um_test_data_path ("tiny-llada");
  g_autofree char *other = g_build_filename (tmp_dir, "tiny-llada-warm", NULL);
  g_autofree char *other_config = g_build_filename (other, "generation_config.json", NULL);
  g_autofree char *settings_path = g_build_filename (tmp_dir, "defaults-settings.json", NULL);
  g_autoptr(UmGenRecommendation) rec = NULL;
  UmWindow *win;
  UmGeneratePage *page;
  UmChatPage *chat;
  UmSettings *settings;
  GtkSpinButton *cfg_spin;
  UmGenParams p;

  g_assert_nonnull (demo);
  rec = um_gen_recommendation_load (demo);
  /* The demo model recommends sampling, not the greedy default. */
  g_assert_true (um_gen_layer_has (&rec->layer, UM_GEN_KEY_TEMPERATURE));
  g_assert_cmpfloat (rec->layer.params.temperature, >, 0.0);
  g_assert_cmpuint (rec->warnings->len, ==, 0);

  /* The fixture with a recommendation of its own. */
  g_mkdir_with_parents (other, 0700);
  um_test_copy_dir (fixture, other);
  um_test_write_file (other_config, "{\"bos_token_id\": 506, \"eos_token_id\": 507, \"temperature\": 0.3,"
                                    " \"top_k\": 40}", -1);

  g_unlink (settings_path);
  win = make_window_with ("defaults-settings.json", 1180, 780);
  page = UM_GENERATE_PAGE (um_window_get_generate_page (win));
  chat = UM_CHAT_PAGE (um_window_get_chat_page (win));
  settings = um_window_get_settings (win);
  /* Nothing loaded: the built-in defaults, nothing to say. */
  um_generate_page_get_params (page, &p);
  g_assert_cmpfloat (p.temperature, ==, 0.0);
  assert_note (page, UM_GEN_KEY_TEMPERATURE, NULL);

  load (win, demo);
  g_assert_nonnull (um_window_get_engine (win));
  um_generate_page_get_params (page, &p);
  g_assert_cmpfloat (p.temperature, ==, rec->layer.params.temperature);
  g_assert_cmpint (um_settings_get_source (settings, UM_GEN_KEY_TEMPERATURE), ==, UM_GEN_SOURCE_MODEL);
  assert_note (page, UM_GEN_KEY_TEMPERATURE, "recommended by the model");
  g_assert_false (um_generate_page_get_reset_visible (page, UM_GEN_KEY_TEMPERATURE));
  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    if (um_gen_layer_has (&rec->layer, k))
      g_assert_nonnull (strstr (um_generate_page_get_source_note (page, k), "recommended by the model"));
  g_assert_nonnull (strstr (um_chat_page_get_params_text (chat), "recommended by the model"));

  /* The user changes the guidance scale on the page. */
  cfg_spin = find_row_spin (GTK_WIDGET (page), "Guidance Sc_ale");
  g_assert_nonnull (cfg_spin);
  gtk_spin_button_set_value (cfg_spin, 1.5);
  g_assert_cmpint (um_settings_get_source (settings, UM_GEN_KEY_CFG_SCALE), ==, UM_GEN_SOURCE_USER);
  assert_note (page, UM_GEN_KEY_CFG_SCALE, "your choice");
  g_assert_true (um_generate_page_get_reset_visible (page, UM_GEN_KEY_CFG_SCALE));
  /* Remembered as the user's in settings.json. */
  g_assert_true (um_settings_save (settings, NULL));
  {
    g_autoptr(UmSettings) again = um_settings_new (settings_path);
    g_assert_cmpuint (um_settings_get_user_set (again), ==, UM_GEN_KEY_BIT (UM_GEN_KEY_CFG_SCALE));
  }

  /* Another model: the untouched temperature follows it, the guidance stays. */
  load (win, other);
  um_generate_page_get_params (page, &p);
  g_assert_cmpfloat (p.temperature, ==, 0.3);
  g_assert_cmpfloat (p.cfg_scale, ==, 1.5);
  assert_note (page, UM_GEN_KEY_TEMPERATURE, "0.3 — recommended by the model");
  assert_note (page, UM_GEN_KEY_CFG_SCALE, "your choice");
  /* What the model recommends and the sampler lacks is said, not dropped. */
  g_assert_nonnull (um_generate_page_get_model_note (page));
  g_assert_nonnull (strstr (um_generate_page_get_model_note (page), "top_k 40"));
  g_assert_nonnull (strstr (um_chat_page_get_params_text (chat), "Temperature: 0.3 — recommended by the model"));

  /* A model without a recommendation: back to the built-in default. */
  load (win, fixture);
  um_generate_page_get_params (page, &p);
  g_assert_cmpfloat (p.temperature, ==, 0.0);
  g_assert_cmpfloat (p.cfg_scale, ==, 1.5);
  assert_note (page, UM_GEN_KEY_TEMPERATURE, NULL);
  g_assert_null (um_generate_page_get_model_note (page));

  /* The row's reset button forgets the user's choice: the default again. */
  load (win, other);
  {
    GtkWidget *reset = find_action_button (GTK_WIDGET (page), "win.reset-param", "cfg_scale");
    g_assert_nonnull (reset);
    g_assert_true (gtk_widget_get_visible (reset));
    g_signal_emit_by_name (reset, "clicked");
  }
  um_generate_page_get_params (page, &p);
  g_assert_cmpfloat (p.cfg_scale, ==, 0.0);
  g_assert_false (um_generate_page_get_reset_visible (page, UM_GEN_KEY_CFG_SCALE));
  g_assert_cmpuint (um_settings_get_user_set (settings), ==, 0);
  destroy_window (win);
  um_test_rmtree (other);
}

int
main (int argc, char **argv)
{
  int rc;

  tmp_dir = g_dir_make_tmp ("unmask-gui-XXXXXX", NULL);
  {
    g_autofree char *data_home = g_build_filename (tmp_dir, "data", NULL);
    g_setenv ("XDG_DATA_HOME", data_home, TRUE);
  }
  gtk_test_init (&argc, &argv, NULL);
  adw_init ();
  /* AdwApplication loads the app's style sheet; these windows have no app. */
  {
    g_autoptr(GtkCssProvider) css = gtk_css_provider_new ();
    gtk_css_provider_load_from_resource (css, "/io/github/unmask/Unmask/style.css");
    gtk_style_context_add_provider_for_display (gdk_display_get_default (), GTK_STYLE_PROVIDER (css),
                                                GTK_STYLE_PROVIDER_PRIORITY_APPLICATION);
  }

  g_test_add_func ("/gui/open-close", test_open_close);
  g_test_add_func ("/gui/exact-products", test_exact_products);
  g_test_add_func ("/gui/generate-live-and-replay", test_generate_live_and_replay);
  g_test_add_func ("/gui/stop-within-one-step", test_stop_within_one_step);
  g_test_add_func ("/gui/bad-model", test_bad_model_then_good);
  g_test_add_func ("/gui/hostile-config-files", test_hostile_config_files);
  g_test_add_func ("/gui/newer-profile", test_newer_profile);
  g_test_add_func ("/gui/view-follows-by-scrolling", test_view_follows_by_scrolling);
  g_test_add_func ("/gui/narrow-window", test_narrow_window);
  g_test_add_func ("/gui/generate-screenshot", test_generate_screenshot);
  g_test_add_func ("/gui/chat-screenshot", test_chat_screenshot);
  g_test_add_func ("/gui/demo-screenshot", test_demo_screenshot);
  g_test_add_func ("/gui/model-defaults", test_model_defaults);
  rc = g_test_run ();
  return rc;
}

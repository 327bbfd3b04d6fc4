/* The Optimizer page under Xvfb, on the CPU backend with a small budget
 * standing in for a small GPU: the plan reads "needs X of Y"; Optimize on
 * the fixture picks a mode that fits where standard does not, asks (a model
 * is loaded), applies it (backup first), reloads the model, which
 * generates; Restore Original brings back the first profile, Undo the
 * optimized one, and the history shows every step. An extreme mode shows
 * its pill and warns about parameters beyond its limits until "Use
 * Recommended"; Level shows only for Extreme; a corrupt profile shows the
 * notice banner and the app still works, also when it turns corrupt while
 * the window is open; a damaged backup is marked and cannot be restored,
 * and Undo over one names it; without a model Optimize says to open one. A
 * change made with unmask-cli while the window is open is picked up (page,
 * pills, toast, Reload Model), and a change asked for on the settings from
 * before asks Keep Theirs / Apply Mine Over It instead of writing over it.
 * A mixture of experts that fits a budget only with its routed experts in
 * RAM shows where they are, is offered that when its knobs keep them on the
 * device, and Optimize picks it.
 * With UM_SCREENSHOT_DIR set it also saves optimizer-does-not-fit.png,
 * optimizer-fits.png and optimizer-experts.png. */
#include "config.h"

#include <adwaita.h>
#include <glib/gstdio.h>
#include <string.h>

#include "um-backups.h"
#include "um-chat-page.h"
#include "um-expert-store.h"
#include "um-generate-page.h"
#include "um-optimizer-page.h"
#include "um-plan-bars.h"
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

static void
iterate_for (int ms)
{
  gint64 end = g_get_monotonic_time () + (gint64) ms * 1000;
  while (g_get_monotonic_time () < end)
    g_main_context_iteration (NULL, FALSE);
}

static gboolean
mapped (gpointer win)
{
  return gtk_widget_get_mapped (win);
}

static gboolean
not_loading (gpointer win)
{
  return !um_window_get_loading (win);
}

static gboolean
not_running (gpointer page)
{
  return !um_generate_page_get_running (page);
}

static gboolean
page_idle (gpointer page)
{
  return !um_optimizer_page_get_busy (page);
}

static gboolean
page_planned (gpointer page)
{
  return !um_optimizer_page_get_busy (page) && um_optimizer_page_get_plan (page) != NULL;
}

/* A fresh optimizer folder for each test. */
static char *
use_config_dir (const char *name)
{
  char *dir = g_build_filename (tmp_dir, name, NULL);
  g_assert_cmpint (g_mkdir_with_parents (dir, 0700), ==, 0);
  g_setenv ("UNMASK_CONFIG_DIR", dir, TRUE);
  return dir;
}

static UmWindow *
make_window_sized (int width, int height)
{
  g_autofree char *settings_path = g_build_filename (tmp_dir, "settings.json", NULL);
  g_autoptr(UmSettings) settings = um_settings_new (settings_path);
  UmWindow *win = um_window_new (NULL, settings);

  gtk_window_set_default_size (GTK_WINDOW (win), width, height);
  gtk_window_present (GTK_WINDOW (win));
  wait_for (mapped, win, 10);
  return win;
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
  wait_for (not_loading, win, 60);
}

static void
set_params (UmWindow *win, int gen, int steps, int block)
{
  um_generate_page_set_prompt (UM_GENERATE_PAGE (um_window_get_generate_page (win)), "What is free software?");
  g_object_set (um_window_get_settings (win), "gen-length", gen, "steps", steps, "block-length", block,
                "chat-template", TRUE, "temperature", 0.0, "cfg-scale", 0.0, "remasking", "low_confidence",
                NULL);
}

/* A run on the loaded model completes with @gen ids. */
static void
assert_generates (UmWindow *win, int gen)
{
  UmGeneratePage *page = UM_GENERATE_PAGE (um_window_get_generate_page (win));

  g_assert_nonnull (um_window_get_engine (win));
  um_generate_page_generate (page);
  g_assert_true (um_generate_page_get_running (page));
  wait_for (not_running, page, 120);
  g_assert_no_error ((GError *) um_generate_page_get_last_error (page));
  g_assert_nonnull (um_generate_page_get_last_ids (page));
  g_assert_cmpuint (um_generate_page_get_last_ids (page)->len, ==, gen);
}

/* The message dialog that is open (the newest if several). */
static AdwMessageDialog *
find_dialog (void)
{
  GListModel *toplevels = gtk_window_get_toplevels ();
  GtkWidget *dialog = NULL;

  iterate_for (50);
  for (guint i = 0; i < g_list_model_get_n_items (toplevels); i++)
    {
      g_autoptr(GObject) w = g_list_model_get_item (toplevels, i);
      if (ADW_IS_MESSAGE_DIALOG (w) && gtk_widget_get_visible (GTK_WIDGET (w)))
        dialog = GTK_WIDGET (w);
    }
  g_assert_nonnull (dialog);
  return ADW_MESSAGE_DIALOG (dialog);
}

/* Answers @dialog now, without running the main loop first. */
static void
respond_to (AdwMessageDialog *dialog, const char *response)
{
  g_object_ref (dialog);
  adw_message_dialog_response (dialog, response);
  gtk_window_destroy (GTK_WINDOW (dialog));
  g_object_unref (dialog);
}

/* Answers the confirmation dialog that is open. */
static void
respond (const char *response)
{
  respond_to (find_dialog (), response);
}

/* No message dialog is open. */
static void
assert_no_dialog (void)
{
  GListModel *toplevels = gtk_window_get_toplevels ();

  iterate_for (50);
  for (guint i = 0; i < g_list_model_get_n_items (toplevels); i++)
    {
      g_autoptr(GObject) w = g_list_model_get_item (toplevels, i);
      g_assert_false (ADW_IS_MESSAGE_DIALOG (w) && gtk_widget_get_visible (GTK_WIDGET (w)));
    }
}

/* The first descendant of @widget of @type (and, if @title, with that
 * preferences-row title). */
static GtkWidget *
find_widget (GtkWidget *widget, GType type, const char *title)
{
  if (G_TYPE_CHECK_INSTANCE_TYPE (widget, type)
      && (title == NULL || g_strcmp0 (adw_preferences_row_get_title (ADW_PREFERENCES_ROW (widget)), title) == 0))
    return widget;
  for (GtkWidget *c = gtk_widget_get_first_child (widget); c != NULL; c = gtk_widget_get_next_sibling (c))
    {
      GtkWidget *found = find_widget (c, type, title);
      if (found != NULL)
        return found;
    }
  return NULL;
}

/* Writes @mode as unmask-cli would: read, change, commit against what was
 * read, from outside the window. */
static void
commit_outside (UmMemMode mode)
{
  const char *dir = g_getenv ("UNMASK_CONFIG_DIR");
  g_autoptr(GError) error = NULL;
  g_autofree char *revision = NULL;
  g_autoptr(UmProfile) p = um_profile_load_full (dir, NULL, &revision, NULL, &error);
  g_auto(UmCommit) commit = { 0 };

  g_assert_no_error (error);
  um_profile_set_mode (p, mode);
  p->written_by = UM_PROFILE_BY_USER;
  p->written_at = g_get_real_time () / G_USEC_PER_SEC;
  g_assert_true (um_backups_commit (p, dir, "before test", revision, &commit, &error));
  g_assert_no_error (error);
  g_assert_false (commit.unchanged);
}

static UmMemMode
file_mode (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(UmProfile) p = um_profile_load (g_getenv ("UNMASK_CONFIG_DIR"), NULL, &error);

  g_assert_no_error (error);
  return p->mem.mode;
}

static guint
n_history_rows (UmOptimizerPage *page)
{
  GtkListBox *list = um_optimizer_page_get_history_list (page);
  guint n = 0;
  while (gtk_list_box_get_row_at_index (list, n) != NULL)
    n++;
  return n;
}

/* The Restore button of history row @index (newest first). */
static GtkWidget *
find_restore_button (GtkWidget *widget)
{
  if (GTK_IS_BUTTON (widget) && g_object_get_data (G_OBJECT (widget), "um-backup-id") != NULL)
    return widget;
  for (GtkWidget *c = gtk_widget_get_first_child (widget); c != NULL; c = gtk_widget_get_next_sibling (c))
    {
      GtkWidget *found = find_restore_button (c);
      if (found != NULL)
        return found;
    }
  return NULL;
}

static GtkWidget *
history_restore_button (UmOptimizerPage *page, int index)
{
  GtkListBoxRow *row = gtk_list_box_get_row_at_index (um_optimizer_page_get_history_list (page), index);
  g_assert_nonnull (row);
  return find_restore_button (GTK_WIDGET (row));
}

static guint
n_backups (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) list = um_backups_list (g_getenv ("UNMASK_CONFIG_DIR"), NULL, &error);
  g_assert_no_error (error);
  return list->len;
}

static void
save_screenshot (GtkWidget *widget, const char *name)
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
  iterate_for (800);
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

/* Scrolls the page to the top for the pictures. */
static void
scroll_to_top (UmOptimizerPage *page)
{
  GtkWidget *scroller = gtk_widget_get_first_child (GTK_WIDGET (page));

  if (!GTK_IS_SCROLLED_WINDOW (scroller))
    return;
  iterate_for (100);
  gtk_adjustment_set_value (gtk_scrolled_window_get_vadjustment (GTK_SCROLLED_WINDOW (scroller)), 0);
}

static void
test_optimize_restore_undo (void)
{
  g_autofree char *dir = use_config_dir ("optimize");
  g_autofree char *model = um_test_data_path ("tiny-llada");
  g_autoptr(UmProfile) first = NULL;
  g_autoptr(GError) error = NULL;
  UmWindow *win = make_window_sized (1180, 1180);
  UmOptimizerPage *page = UM_OPTIMIZER_PAGE (um_window_get_optimizer_page (win));
  UmGeneratePage *gen = UM_GENERATE_PAGE (um_window_get_generate_page (win));
  const UmOptimizeResult *r;
  const UmPlan *plan;
  UmMemMode chosen;
  guint64 budget;

  g_assert_null (um_window_get_notice (win));
  set_params (win, 32, 32, 8);
  load (win, model);
  g_assert_nonnull (um_window_get_engine (win));
  first = um_profile_copy (um_window_get_profile (win));
  g_assert_cmpint (first->mem.mode, ==, UM_MEM_STANDARD);
  g_assert_cmpstr (um_generate_page_get_mode_label (gen), ==, "standard");
  g_assert_null (um_generate_page_get_limits_warning (gen));

  /* The page plans for the loaded model on this machine. */
  um_window_show_optimizer (win);
  wait_for (page_planned, page, 30);
  g_assert_cmpuint (n_history_rows (page), ==, 0);

  /* A budget just under what standard needs on the device (about 1 MiB on
   * the fixture, where the 8-bit and extreme modes need half of it):
   * standard does not fit, a smaller mode does. */
  r = um_optimizer_page_get_result (page);
  g_assert_nonnull (r);
  g_assert_false (r->cuda);
  budget = (g_array_index (r->table, UmPlan, UM_MEM_STANDARD).device_peak / 1024 - 1) * 1024;
  g_test_message ("standard needs %" G_GUINT64_FORMAT " bytes; budget %" G_GUINT64_FORMAT,
                  g_array_index (r->table, UmPlan, UM_MEM_STANDARD).device_peak, budget);
  um_optimizer_page_set_budget (page, budget);
  r = um_optimizer_page_get_result (page);
  g_assert_nonnull (r);
  g_assert_cmpuint (r->capacity, ==, budget);
  g_assert_false (g_array_index (r->table, UmPlan, UM_MEM_STANDARD).fits);
  g_assert_cmpint (r->chosen, >, UM_MEM_STANDARD);
  chosen = (UmMemMode) r->chosen;
  plan = um_optimizer_page_get_plan (page);
  g_assert_nonnull (plan);
  g_assert_cmpint (plan->mode, ==, UM_MEM_STANDARD);
  g_assert_false (plan->fits);
  /* The heading says what the plan needs against the budget, not "X of Y"
   * as if X were in use. */
  {
    UmPlanBars *bars = UM_PLAN_BARS (find_widget (GTK_WIDGET (page), UM_TYPE_PLAN_BARS, NULL));
    g_autofree char *need = um_format_bytes (plan->device_peak);
    g_autofree char *cap = um_format_bytes (budget);
    g_autofree char *want = g_strdup_printf ("Memory budget: needs %s of %s", need, cap);
    g_assert_cmpstr (um_plan_bars_get_title (bars), ==, want);
    g_assert_cmpstr (um_plan_bars_get_verdict (bars), ==, "Does not fit");
  }
  scroll_to_top (page);
  save_screenshot (GTK_WIDGET (win), "optimizer-does-not-fit.png");

  /* One click: plan, then, as the model is loaded, a question before
   * anything is written or reloaded. */
  um_optimizer_page_optimize (page, NULL);
  wait_for (page_idle, page, 30);
  {
    AdwMessageDialog *dialog = find_dialog ();
    g_assert_cmpstr (adw_message_dialog_get_heading (dialog), ==, "Optimize and Reload?");
    g_assert_nonnull (strstr (adw_message_dialog_get_body (dialog), um_mem_mode_to_string (chosen)));
    g_assert_cmpint (um_window_get_profile (win)->mem.mode, ==, UM_MEM_STANDARD);
    g_assert_cmpint (file_mode (), ==, UM_MEM_STANDARD);
    g_assert_false (um_window_get_loading (win));
    g_assert_cmpuint (n_backups (), ==, 0);
    respond_to (dialog, "apply");
  }
  wait_for (not_loading, win, 60);
  g_test_message ("optimize: %s", um_optimizer_page_get_status (page));
  g_assert_null (um_window_get_error_message (win));
  g_assert_nonnull (um_window_get_engine (win));
  g_assert_cmpint (um_window_get_profile (win)->mem.mode, ==, chosen);
  g_assert_cmpuint (um_window_get_profile (win)->memory_budget, ==, budget);
  g_assert_cmpint (um_engine_get_plan (um_window_get_engine (win))->mode, ==, chosen);
  g_assert_true (um_engine_get_plan (um_window_get_engine (win))->fits);
  g_assert_nonnull (um_optimizer_page_get_measured (page));
  g_test_message ("measured: %s", um_optimizer_page_get_measured (page));
  plan = um_optimizer_page_get_plan (page);
  g_assert_nonnull (plan);
  g_assert_cmpint (plan->mode, ==, chosen);
  g_assert_true (plan->fits);
  g_assert_cmpstr (um_generate_page_get_mode_label (gen), ==, um_mem_mode_to_string (chosen));
  g_assert_cmpuint (n_backups (), ==, 1);
  g_assert_cmpuint (n_history_rows (page), ==, 1);

  /* The model generates under the new plan; then the measured peaks
   * include a run (the monitor samples once a second). */
  assert_generates (win, 32);
  iterate_for (1200);
  g_test_message ("measured after a run: %s", um_optimizer_page_get_measured (page));
  scroll_to_top (page);
  save_screenshot (GTK_WIDGET (win), "optimizer-fits.png");

  /* Optimizing again changes nothing: no question, no backup, no reload. */
  um_optimizer_page_optimize (page, NULL);
  wait_for (page_idle, page, 30);
  assert_no_dialog ();
  g_assert_false (um_window_get_loading (win));
  g_assert_nonnull (strstr (um_optimizer_page_get_status (page), "Nothing to change"));
  g_assert_cmpuint (n_backups (), ==, 1);

  /* Restore Original asks first, then brings back the first profile. */
  g_assert_true (um_optimizer_page_restore (page, "original", TRUE, &error));
  g_assert_no_error (error);
  g_assert_cmpint (um_window_get_profile (win)->mem.mode, ==, chosen);   /* not before the answer */
  respond ("apply");
  wait_for (not_loading, win, 60);
  g_assert_true (um_profile_equal (um_window_get_profile (win), first));
  g_assert_nonnull (um_window_get_engine (win));
  g_assert_cmpint (um_engine_get_plan (um_window_get_engine (win))->mode, ==, UM_MEM_STANDARD);
  g_assert_cmpuint (n_backups (), ==, 2);
  g_assert_cmpuint (n_history_rows (page), ==, 2);
  assert_generates (win, 32);

  /* Undo goes back to the optimized settings; that too is in the history. */
  um_optimizer_page_undo (page);
  respond ("apply");
  wait_for (not_loading, win, 60);
  g_assert_cmpint (um_window_get_profile (win)->mem.mode, ==, chosen);
  g_assert_cmpuint (n_backups (), ==, 3);
  g_assert_cmpuint (n_history_rows (page), ==, 3);

  /* A cancelled confirmation changes nothing. */
  g_assert_true (um_optimizer_page_restore (page, "original", TRUE, &error));
  respond ("cancel");
  iterate_for (100);
  g_assert_cmpint (um_window_get_profile (win)->mem.mode, ==, chosen);
  g_assert_cmpuint (n_backups (), ==, 3);

  /* Each history row restores its backup: the newest is the standard
   * profile Undo left. */
  {
    GtkWidget *button = history_restore_button (page, 0);
    g_assert_nonnull (button);
    g_assert_true (gtk_widget_get_sensitive (button));
    g_assert_true (gtk_widget_get_focusable (button));
    g_signal_emit_by_name (button, "clicked");
  }
  respond ("apply");
  wait_for (not_loading, win, 60);
  g_assert_cmpint (um_window_get_profile (win)->mem.mode, ==, UM_MEM_STANDARD);
  g_assert_cmpuint (n_backups (), ==, 4);
  g_assert_cmpuint (n_history_rows (page), ==, 4);
  destroy_window (win);
}

/* --extreme=moderate: the pill, the limits and "Use Recommended". */
static void
test_extreme_limits (void)
{
  g_autofree char *dir = use_config_dir ("extreme");
  g_autofree char *model = um_test_data_path ("tiny-llada");
  g_autoptr(GError) error = NULL;
  UmWindow *win = make_window_sized (1180, 780);
  UmOptimizerPage *page = UM_OPTIMIZER_PAGE (um_window_get_optimizer_page (win));
  UmGeneratePage *gen = UM_GENERATE_PAGE (um_window_get_generate_page (win));
  UmChatPage *chat = UM_CHAT_PAGE (um_window_get_chat_page (win));
  UmGenParams params;

  set_params (win, 128, 128, 32);
  load (win, model);
  g_assert_true (um_optimizer_page_apply_mode (page, UM_MEM_EXTREME_MODERATE, &error));
  g_assert_no_error (error);
  wait_for (not_loading, win, 60);
  g_assert_nonnull (um_window_get_engine (win));
  g_assert_cmpint (um_engine_get_plan (um_window_get_engine (win))->mode, ==, UM_MEM_EXTREME_MODERATE);
  g_assert_cmpstr (um_generate_page_get_mode_label (gen), ==, "extreme-moderate");
  g_assert_cmpuint (n_backups (), ==, 1);

  /* 128 tokens are beyond what extreme modes recommend: a warning on both
   * pages, and the run may still go on. */
  g_assert_nonnull (um_generate_page_get_limits_warning (gen));
  g_assert_nonnull (strstr (um_generate_page_get_limits_warning (gen), "extreme-moderate"));
  g_assert_nonnull (um_chat_page_get_limits_warning (chat));
  g_assert_null (um_generate_page_get_problem (gen));
  gtk_widget_activate_action (GTK_WIDGET (win), "win.use-recommended", NULL);
  um_settings_get_params (um_window_get_settings (win), &params);
  g_test_message ("recommended: length %d, block %d, steps %d", params.gen_length, params.block_length,
                  params.steps);
  g_assert_cmpint (params.gen_length, <=, um_window_get_profile (win)->limit_gen_length);
  g_assert_cmpint (params.block_length, <=, um_window_get_profile (win)->limit_block_length);
  g_assert_cmpint (params.steps, <=, um_window_get_profile (win)->limit_steps);
  g_assert_null (um_generate_page_get_limits_warning (gen));
  g_assert_null (um_chat_page_get_limits_warning (chat));
  g_assert_null (um_generate_page_get_problem (gen));
  assert_generates (win, params.gen_length);

  /* Restore from the command line's way (no question): standard again. */
  g_assert_true (um_optimizer_page_restore (page, "original", FALSE, &error));
  g_assert_no_error (error);
  wait_for (not_loading, win, 60);
  g_assert_cmpint (um_window_get_profile (win)->mem.mode, ==, UM_MEM_STANDARD);
  g_assert_cmpstr (um_generate_page_get_mode_label (gen), ==, "standard");
  destroy_window (win);
}

static void
test_corrupt_profile (void)
{
  g_autofree char *dir = use_config_dir ("corrupt");
  g_autofree char *path = um_profile_path (dir);
  g_autofree char *model = um_test_data_path ("tiny-llada");
  UmWindow *win;

  g_assert_true (g_file_set_contents (path, "{ \"version\": 1, \"mode\": ", -1, NULL));
  win = make_window_sized (1180, 780);
  g_test_message ("notice: %s", um_window_get_notice (win));
  g_assert_nonnull (um_window_get_notice (win));
  g_assert_cmpint (um_window_get_profile (win)->mem.mode, ==, UM_MEM_STANDARD);
  /* The app still works. */
  set_params (win, 32, 32, 8);
  load (win, model);
  g_assert_null (um_window_get_error_message (win));
  assert_generates (win, 32);
  /* The banner goes with its Close button. */
  um_window_show_notice (win, NULL);
  g_assert_null (um_window_get_notice (win));
  destroy_window (win);

  /* Reading changed nothing: the next start says it again. */
  win = make_window_sized (1180, 780);
  g_assert_nonnull (um_window_get_notice (win));
  g_assert_cmpuint (um_test_count_prefix (dir, "optimizer.json.corrupt-"), ==, 0);
  /* A change commits over it: moved aside then, and the banner says where. */
  {
    UmOptimizerPage *page = UM_OPTIMIZER_PAGE (um_window_get_optimizer_page (win));
    um_window_show_notice (win, NULL);
    load (win, model);
    um_window_show_optimizer (win);
    wait_for (page_planned, page, 30);
    um_optimizer_page_select_mode (page, UM_MEM_EXTREME_MILD);
    um_optimizer_page_apply (page);
    respond ("apply");
    wait_for (not_loading, win, 60);
    g_test_message ("after apply: %s", um_window_get_notice (win));
    g_assert_nonnull (um_window_get_notice (win));
    g_assert_nonnull (strstr (um_window_get_notice (win), "optimizer.json.corrupt-"));
    g_assert_cmpuint (um_test_count_prefix (dir, "optimizer.json.corrupt-"), ==, 1);
  }
  destroy_window (win);

  /* Moved aside: the next start has nothing to say. */
  win = make_window_sized (1180, 780);
  g_assert_null (um_window_get_notice (win));
  destroy_window (win);
}

/* Apply: the mode and knobs shown, after a question; nothing to apply
 * asks nothing. */
static void
test_apply (void)
{
  g_autofree char *dir = use_config_dir ("apply");
  g_autofree char *model = um_test_data_path ("tiny-llada");
  UmWindow *win = make_window_sized (1180, 780);
  UmOptimizerPage *page = UM_OPTIMIZER_PAGE (um_window_get_optimizer_page (win));

  GtkWidget *level;

  set_params (win, 32, 32, 8);
  load (win, model);
  um_window_show_optimizer (win);
  wait_for (page_planned, page, 30);

  /* Level is how extreme: not shown for the standard modes. */
  level = find_widget (GTK_WIDGET (page), ADW_TYPE_COMBO_ROW, "_Level");
  g_assert_nonnull (level);
  g_assert_false (gtk_widget_get_visible (level));
  um_optimizer_page_select_mode (page, UM_MEM_STANDARD_8BIT);
  g_assert_cmpint (um_optimizer_page_get_plan (page)->mode, ==, UM_MEM_STANDARD_8BIT);
  g_assert_false (gtk_widget_get_visible (level));
  um_optimizer_page_select_mode (page, UM_MEM_EXTREME_AGGRESSIVE);
  g_assert_true (gtk_widget_get_visible (level));
  g_assert_cmpuint (adw_combo_row_get_selected (ADW_COMBO_ROW (level)), ==, 2);
  um_optimizer_page_select_mode (page, UM_MEM_EXTREME_MILD);
  g_assert_cmpint (um_optimizer_page_get_plan (page)->mode, ==, UM_MEM_EXTREME_MILD);
  um_optimizer_page_apply (page);
  g_assert_cmpint (um_window_get_profile (win)->mem.mode, ==, UM_MEM_STANDARD);
  respond ("apply");
  wait_for (not_loading, win, 60);
  g_assert_cmpint (um_window_get_profile (win)->mem.mode, ==, UM_MEM_EXTREME_MILD);
  g_assert_cmpint (um_window_get_profile (win)->written_by, ==, UM_PROFILE_BY_USER);
  g_assert_cmpint (um_engine_get_plan (um_window_get_engine (win))->mode, ==, UM_MEM_EXTREME_MILD);
  g_assert_cmpuint (n_history_rows (page), ==, 1);
  assert_generates (win, 32);

  /* The same again: nothing to apply, no question, no backup. */
  um_optimizer_page_apply (page);
  g_assert_nonnull (strstr (um_optimizer_page_get_status (page), "Nothing to apply"));
  g_assert_cmpuint (n_backups (), ==, 1);

  /* Under a budget nothing fits, Optimize changes nothing. */
  um_optimizer_page_set_budget (page, 64 * 1024);
  g_assert_false (um_optimizer_page_get_plan (page)->fits);
  g_assert_cmpint (um_optimizer_page_get_result (page)->chosen, <, 0);
  um_optimizer_page_optimize (page, NULL);
  wait_for (page_idle, page, 30);
  g_assert_nonnull (strstr (um_optimizer_page_get_status (page), "Nothing was changed"));
  g_assert_cmpint (um_window_get_profile (win)->mem.mode, ==, UM_MEM_EXTREME_MILD);
  g_assert_cmpuint (n_backups (), ==, 1);
  g_assert_false (um_window_get_loading (win));
  destroy_window (win);
}

/* A mixture of experts under a budget it fits only with its routed experts
 * off the device: the plan shows where they are, the page offers them in
 * RAM when the knobs keep them on the device, Use takes the offer, and the
 * one-click optimizer picks the placement (standard mode, experts in RAM),
 * under which the model loads and generates. */
static void
test_experts (void)
{
  g_autofree char *dir = use_config_dir ("experts");
  /* Float weights: its experts are a third of its device bytes. */
  g_autofree char *model = um_test_data_path ("tiny-llada-moe");
  UmWindow *win = make_window_sized (1180, 1180);
  UmOptimizerPage *page = UM_OPTIMIZER_PAGE (um_window_get_optimizer_page (win));
  UmPlanBars *bars = UM_PLAN_BARS (find_widget (GTK_WIDGET (page), UM_TYPE_PLAN_BARS, NULL));
  GtkWidget *experts_row;
  const UmOptimizeResult *r;
  const UmPlan *plan, *standard;
  UmExpertPlacement placement;
  guint64 resident, off, budget;

  set_params (win, 32, 32, 8);
  load (win, model);
  um_window_show_optimizer (win);
  wait_for (page_planned, page, 30);
  experts_row = find_widget (GTK_WIDGET (page), ADW_TYPE_COMBO_ROW, "_Experts");
  g_assert_nonnull (experts_row);
  g_assert_true (gtk_widget_get_visible (experts_row));
  plan = um_optimizer_page_get_plan (page);
  g_assert_cmpint (plan->experts, ==, UM_EXPERTS_RESIDENT);
  g_assert_cmpuint (plan->expert_bytes, >, 0);
  g_assert_nonnull (strstr (um_plan_bars_get_experts_text (bars), "in the device budget"));
  g_assert_null (um_optimizer_page_get_offer (page));

  /* A budget the model fits without its experts (and with FETCH's two
   * slots), with the headroom kept free, but not with them. */
  resident = plan->device_peak;
  off = resident - plan->expert_bytes + 2 * um_expert_slot_bytes (um_engine_get_model (um_window_get_engine (win)));
  budget = (guint64) (off / (1.0 - UM_OPTIMIZER_HEADROOM)) + 4096;
  g_test_message ("resident %" G_GUINT64_FORMAT ", experts off %" G_GUINT64_FORMAT ", budget %" G_GUINT64_FORMAT,
                  resident, off, budget);
  g_assert_cmpuint (budget, <, resident);
  um_optimizer_page_set_budget (page, budget);
  r = um_optimizer_page_get_result (page);
  standard = &g_array_index (r->table, UmPlan, UM_MEM_STANDARD);
  /* Computed in RAM or fetched as routed, as the time model says is
   * faster for this tiny model's shapes on this machine. */
  placement = standard->experts;
  g_assert_true (placement == UM_EXPERTS_HOST || placement == UM_EXPERTS_FETCH);
  g_assert_cmpint (r->chosen, ==, UM_MEM_STANDARD);
  g_test_message ("optimize: %s", r->reason);
  g_assert_nonnull (strstr (r->reason, "routed experts in RAM"));
  plan = um_optimizer_page_get_plan (page);
  g_assert_true (plan->fits);
  g_assert_cmpint (plan->experts, ==, placement);
  g_test_message ("experts: %s", um_plan_bars_get_experts_text (bars));
  g_assert_nonnull (strstr (um_plan_bars_get_experts_text (bars),
                            placement == UM_EXPERTS_HOST ? "in RAM, computed by the processor" : "in RAM, fetched into"));

  /* Kept on the device, it does not fit: the page offers RAM. */
  adw_combo_row_set_selected (ADW_COMBO_ROW (experts_row), UM_EXPERTS_RESIDENT);
  plan = um_optimizer_page_get_plan (page);
  g_assert_false (plan->fits);
  g_assert_cmpint (plan->experts, ==, UM_EXPERTS_RESIDENT);
  g_assert_nonnull (um_optimizer_page_get_offer (page));
  g_test_message ("offer: %s", um_optimizer_page_get_offer (page));
  g_assert_nonnull (strstr (um_optimizer_page_get_offer (page), placement == UM_EXPERTS_HOST
                                                                   ? "Computed by the processor" : "Fetched into"));
  um_optimizer_page_use_offer (page);
  g_assert_cmpuint (adw_combo_row_get_selected (ADW_COMBO_ROW (experts_row)), ==, placement);
  plan = um_optimizer_page_get_plan (page);
  g_assert_true (plan->fits);
  g_assert_cmpint (plan->experts, ==, placement);
  g_assert_null (um_optimizer_page_get_offer (page));
  /* The picture shows the plan and the knobs that made it. */
  {
    GtkWidget *scroller = gtk_widget_get_first_child (GTK_WIDGET (page));
    double x, y;
    iterate_for (100);
    if (GTK_IS_SCROLLED_WINDOW (scroller)
        && gtk_widget_translate_coordinates (experts_row, scroller, 0, 0, &x, &y))
      gtk_adjustment_set_value (gtk_scrolled_window_get_vadjustment (GTK_SCROLLED_WINDOW (scroller)), y - 40);
  }
  save_screenshot (GTK_WIDGET (win), "optimizer-experts.png");

  /* One click: standard with the experts in RAM, reloaded, generating. */
  um_optimizer_page_optimize (page, NULL);
  wait_for (page_idle, page, 30);
  respond ("apply");
  wait_for (not_loading, win, 60);
  g_assert_null (um_window_get_error_message (win));
  g_assert_cmpint (um_window_get_profile (win)->mem.mode, ==, UM_MEM_STANDARD);
  g_assert_cmpuint (um_window_get_profile (win)->memory_budget, ==, budget);
  g_assert_nonnull (strstr (um_window_get_profile (win)->reason, "routed experts in RAM"));
  g_assert_cmpint (um_engine_get_plan (um_window_get_engine (win))->experts, ==, placement);
  g_assert_true (um_engine_get_plan (um_window_get_engine (win))->fits);
  /* It generates (as long an answer as the family's settings say). */
  {
    UmGeneratePage *gen = UM_GENERATE_PAGE (um_window_get_generate_page (win));
    um_generate_page_generate (gen);
    wait_for (not_running, gen, 120);
    g_assert_no_error ((GError *) um_generate_page_get_last_error (gen));
    g_assert_nonnull (um_generate_page_get_last_ids (gen));
    g_assert_cmpuint (um_generate_page_get_last_ids (gen)->len, >, 0);
  }
  destroy_window (win);
}

/* A backup whose copy was changed is marked and cannot be restored. */
static void
test_damaged_backup (void)
{
  g_autofree char *dir = use_config_dir ("damaged");
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) list = NULL;
  g_autofree char *copy = NULL;
  UmWindow *win;
  UmOptimizerPage *page;
  GtkListBoxRow *row;

  g_assert_true (um_backups_save (dir, "before test", NULL, &error));
  g_assert_no_error (error);
  list = um_backups_list (dir, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (list->len, ==, 1);
  copy = g_build_filename (dir, "backups", ((UmBackup *) g_ptr_array_index (list, 0))->file, NULL);
  g_assert_true (g_file_set_contents (copy, "{ \"damaged\": true }", -1, NULL));

  win = make_window_sized (1180, 780);
  page = UM_OPTIMIZER_PAGE (um_window_get_optimizer_page (win));
  um_window_show_optimizer (win);
  wait_for (page_idle, page, 30);
  g_assert_cmpuint (n_history_rows (page), ==, 1);
  row = gtk_list_box_get_row_at_index (um_optimizer_page_get_history_list (page), 0);
  g_assert_false (GPOINTER_TO_INT (g_object_get_data (G_OBJECT (row), "um-backup-valid")));
  g_assert_false (gtk_widget_get_sensitive (history_restore_button (page, 0)));
  g_assert_false (um_optimizer_page_restore (page, "original", FALSE, &error));
  g_assert_nonnull (error);
  g_test_message ("restore: %s", error->message);
  destroy_window (win);
}

/* Without a model, Optimize plans for nothing and says so. */
static void
test_no_model (void)
{
  g_autofree char *dir = use_config_dir ("no-model");
  UmWindow *win = make_window_sized (1180, 780);
  UmOptimizerPage *page = UM_OPTIMIZER_PAGE (um_window_get_optimizer_page (win));

  gtk_widget_activate_action (GTK_WIDGET (win), "win.show-optimizer", NULL);
  wait_for (page_idle, page, 30);
  g_assert_null (um_optimizer_page_get_plan (page));
  um_optimizer_page_optimize (page, NULL);
  g_assert_false (um_optimizer_page_get_busy (page));
  g_assert_nonnull (strstr (um_optimizer_page_get_status (page), "Open a model first"));
  g_assert_cmpuint (n_backups (), ==, 0);
  g_assert_null (um_window_get_engine (win));
  destroy_window (win);
}

typedef struct {
  UmWindow *win;
  UmMemMode mode;
} ProfileWait;

static gboolean
profile_is (gpointer data)
{
  ProfileWait *w = data;
  return um_window_get_profile (w->win)->mem.mode == w->mode;
}

/* unmask-cli changes the profile while the window is open: the window
 * notices, shows it on every page, says so and offers to reload the
 * model; a change made on a page that had not seen it yet asks instead of
 * writing over it. */
static void
test_outside_change (void)
{
  g_autofree char *dir = use_config_dir ("outside");
  g_autofree char *model = um_test_data_path ("tiny-llada");
  UmWindow *win = make_window_sized (1180, 780);
  UmOptimizerPage *page = UM_OPTIMIZER_PAGE (um_window_get_optimizer_page (win));
  UmGeneratePage *gen = UM_GENERATE_PAGE (um_window_get_generate_page (win));
  ProfileWait w = { win, UM_MEM_EXTREME_MILD };
  g_autofree char *last_toast = NULL;
  AdwToast *toast;
  guint backups;

  set_params (win, 32, 32, 8);
  load (win, model);
  um_window_show_optimizer (win);
  wait_for (page_planned, page, 30);
  g_assert_cmpint (um_optimizer_page_get_plan (page)->mode, ==, UM_MEM_STANDARD);

  /* Noticed without anything done in the window. */
  commit_outside (UM_MEM_EXTREME_MILD);
  wait_for (profile_is, &w, 10);
  g_assert_cmpint (um_optimizer_page_get_plan (page)->mode, ==, UM_MEM_EXTREME_MILD);
  g_assert_cmpstr (um_generate_page_get_mode_label (gen), ==, "extreme-mild");
  g_test_message ("toast: %s", um_window_get_last_toast (win));
  g_assert_nonnull (strstr (um_window_get_last_toast (win), "Optimizer settings changed outside Unmask: now extreme-mild"));
  /* The model still runs as loaded: the toast offers the reload. */
  toast = um_window_get_profile_toast (win);
  g_assert_nonnull (toast);
  g_assert_cmpstr (adw_toast_get_button_label (toast), ==, "_Reload Model");
  g_assert_cmpstr (adw_toast_get_action_name (toast), ==, "win.reload-model");
  g_assert_cmpint (um_engine_get_plan (um_window_get_engine (win))->mode, ==, UM_MEM_STANDARD);
  g_assert_true (um_window_get_model_outdated (win));
  gtk_widget_activate_action (GTK_WIDGET (win), adw_toast_get_action_name (toast), NULL);
  wait_for (not_loading, win, 60);
  g_assert_nonnull (um_window_get_engine (win));
  g_assert_cmpint (um_engine_get_plan (um_window_get_engine (win))->mode, ==, UM_MEM_EXTREME_MILD);
  g_assert_false (um_window_get_model_outdated (win));

  /* Apply from a page that has not seen the newest change: the question,
   * and Keep Theirs keeps it. */
  backups = n_backups ();
  um_optimizer_page_select_mode (page, UM_MEM_EXTREME_MODERATE);
  um_optimizer_page_apply (page);
  {
    AdwMessageDialog *confirm = find_dialog ();
    AdwMessageDialog *conflict;

    /* Written between the question and the answer: the answer was given
     * to what the question showed. */
    commit_outside (UM_MEM_STANDARD_8BIT);
    w.mode = UM_MEM_STANDARD_8BIT;
    wait_for (profile_is, &w, 10);
    respond_to (confirm, "apply");
    conflict = find_dialog ();
    g_test_message ("conflict: %s", adw_message_dialog_get_body (conflict));
    g_assert_cmpstr (adw_message_dialog_get_heading (conflict), ==, "Settings Changed Outside Unmask");
    g_assert_nonnull (strstr (adw_message_dialog_get_body (conflict), "standard-8bit"));
    g_assert_nonnull (strstr (adw_message_dialog_get_body (conflict), "extreme-moderate"));
    g_assert_true (adw_message_dialog_has_response (conflict, "mine"));
    g_assert_cmpint (file_mode (), ==, UM_MEM_STANDARD_8BIT);
    g_assert_cmpint (um_window_get_profile (win)->mem.mode, ==, UM_MEM_STANDARD_8BIT);
    respond_to (conflict, "theirs");
  }
  g_assert_cmpint (file_mode (), ==, UM_MEM_STANDARD_8BIT);
  g_assert_cmpint (um_window_get_profile (win)->mem.mode, ==, UM_MEM_STANDARD_8BIT);
  g_assert_cmpint (um_optimizer_page_get_plan (page)->mode, ==, UM_MEM_STANDARD_8BIT);
  g_assert_nonnull (strstr (um_optimizer_page_get_status (page), "Kept the settings changed outside Unmask"));
  /* Only the outside commit made a backup. */
  g_assert_cmpuint (n_backups (), ==, backups + 1);
  g_assert_false (um_window_get_loading (win));

  /* Edits made before a change the window then saw stay on the page, and
   * Apply asks the same question; Apply Mine Over It writes mine, built on
   * theirs, with theirs backed up. */
  um_optimizer_page_select_mode (page, UM_MEM_EXTREME_MODERATE);
  commit_outside (UM_MEM_STANDARD);
  w.mode = UM_MEM_STANDARD;
  wait_for (profile_is, &w, 10);
  g_assert_cmpint (um_optimizer_page_get_plan (page)->mode, ==, UM_MEM_EXTREME_MODERATE);
  g_assert_nonnull (strstr (um_optimizer_page_get_status (page), "not applied yet"));
  um_optimizer_page_apply (page);
  {
    AdwMessageDialog *conflict = find_dialog ();
    g_assert_cmpstr (adw_message_dialog_get_heading (conflict), ==, "Settings Changed Outside Unmask");
    g_assert_nonnull (strstr (adw_message_dialog_get_body (conflict), "“standard,"));
    g_assert_cmpint (file_mode (), ==, UM_MEM_STANDARD);
    respond_to (conflict, "mine");
  }
  last_toast = g_strdup (um_window_get_last_toast (win));
  g_assert_nonnull (strstr (last_toast, "now standard,"));
  wait_for (not_loading, win, 60);
  g_assert_cmpint (file_mode (), ==, UM_MEM_EXTREME_MODERATE);
  g_assert_cmpint (um_window_get_profile (win)->mem.mode, ==, UM_MEM_EXTREME_MODERATE);
  g_assert_cmpint (um_engine_get_plan (um_window_get_engine (win))->mode, ==, UM_MEM_EXTREME_MODERATE);
  g_assert_cmpuint (n_backups (), ==, backups + 3);
  /* The app's own write is not news. */
  iterate_for (500);
  g_assert_cmpstr (um_window_get_last_toast (win), ==, last_toast);
  g_assert_false (um_window_get_model_outdated (win));
  destroy_window (win);
}

static gboolean
has_notice (gpointer win)
{
  return um_window_get_notice (win) != NULL;
}

/* The profile turns corrupt while the window is open: moved aside, the
 * defaults used, and the same banner as at start. */
static void
test_corrupt_while_running (void)
{
  g_autofree char *dir = use_config_dir ("corrupt-running");
  g_autofree char *path = um_profile_path (dir);
  UmWindow *win;
  ProfileWait w = { NULL, UM_MEM_EXTREME_MILD };

  commit_outside (UM_MEM_EXTREME_MILD);
  win = make_window_sized (1180, 780);
  w.win = win;
  g_assert_true (profile_is (&w));
  g_assert_null (um_window_get_notice (win));

  g_assert_true (g_file_set_contents (path, "{ \"version\": 1, \"mode\": ", -1, NULL));
  wait_for (has_notice, win, 10);
  g_test_message ("notice: %s", um_window_get_notice (win));
  g_assert_nonnull (strstr (um_window_get_notice (win), "could not be read"));
  g_assert_cmpint (um_window_get_profile (win)->mem.mode, ==, UM_MEM_STANDARD);
  /* A reader leaves the file (only a commit moves it aside), so reading it
   * is no change to report again either. */
  g_assert_true (g_file_test (path, G_FILE_TEST_EXISTS));
  g_assert_cmpuint (um_test_count_prefix (dir, "optimizer.json.corrupt-"), ==, 0);
  iterate_for (500);
  g_assert_nonnull (um_window_get_notice (win));
  destroy_window (win);
}

/* Undo over damaged newer backups names them; restoring what is already
 * there says nothing changed and writes nothing. */
static void
test_restore_skipped (void)
{
  g_autofree char *dir = use_config_dir ("skipped");
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) list = NULL;
  g_autofree char *copy = NULL;
  const UmBackup *damaged;
  UmWindow *win;
  UmOptimizerPage *page;

  /* original (standard), then extreme-mild's backup, then 8-bit now. */
  commit_outside (UM_MEM_EXTREME_MILD);
  commit_outside (UM_MEM_STANDARD_8BIT);
  list = um_backups_list (dir, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (list->len, ==, 2);
  damaged = g_ptr_array_index (list, 1);
  copy = g_build_filename (dir, "backups", damaged->file, NULL);
  g_assert_true (g_file_set_contents (copy, "{ \"damaged\": true }", -1, NULL));

  win = make_window_sized (1180, 780);
  page = UM_OPTIMIZER_PAGE (um_window_get_optimizer_page (win));
  um_window_show_optimizer (win);
  wait_for (page_idle, page, 30);
  /* No model: nothing to reload, nothing to ask. */
  um_optimizer_page_undo (page);
  g_test_message ("undo: %s", um_optimizer_page_get_status (page));
  g_assert_nonnull (strstr (um_optimizer_page_get_status (page), "Passed over"));
  g_assert_nonnull (strstr (um_optimizer_page_get_status (page), damaged->id));
  g_assert_cmpint (um_window_get_profile (win)->mem.mode, ==, UM_MEM_STANDARD);
  g_assert_cmpint (file_mode (), ==, UM_MEM_STANDARD);
  g_assert_cmpuint (n_backups (), ==, 3);

  /* The original is what is in use now: nothing to write. */
  g_assert_true (um_optimizer_page_restore (page, "original", FALSE, &error));
  g_assert_no_error (error);
  g_test_message ("restore: %s", um_optimizer_page_get_status (page));
  g_assert_nonnull (strstr (um_optimizer_page_get_status (page), "Nothing changed"));
  g_assert_cmpuint (n_backups (), ==, 3);
  destroy_window (win);
}

int
main (int argc, char **argv)
{
  tmp_dir = g_dir_make_tmp ("unmask-optimizer-XXXXXX", NULL);
  {
    g_autofree char *data_home = g_build_filename (tmp_dir, "data", NULL);
    g_autofree char *config_home = g_build_filename (tmp_dir, "config", NULL);
    g_autofree char *cache_home = g_build_filename (tmp_dir, "cache", NULL);
    g_setenv ("XDG_DATA_HOME", data_home, TRUE);
    g_setenv ("XDG_CONFIG_HOME", config_home, TRUE);
    /* Converted weights are cached here. */
    g_setenv ("XDG_CACHE_HOME", cache_home, TRUE);
  }
  /* The CPU backend: its budget stands in for a small GPU. */
  g_setenv ("UNMASK_DEVICE", "cpu", TRUE);
  gtk_test_init (&argc, &argv, NULL);
  adw_init ();
  /* AdwApplication loads the app's style sheet; these windows have no app. */
  {
    g_autoptr(GtkCssProvider) css = gtk_css_provider_new ();
    gtk_css_provider_load_from_resource (css, "/io/github/unmask/Unmask/style.css");
    gtk_style_context_add_provider_for_display (gdk_display_get_default (), GTK_STYLE_PROVIDER (css),
                                                GTK_STYLE_PROVIDER_PRIORITY_APPLICATION);
  }

  g_test_add_func ("/optimizer/optimize-restore-undo", test_optimize_restore_undo);
  g_test_add_func ("/optimizer/extreme-limits", test_extreme_limits);
  g_test_add_func ("/optimizer/apply", test_apply);
  g_test_add_func ("/optimizer/experts", test_experts);
  g_test_add_func ("/optimizer/corrupt-profile", test_corrupt_profile);
  g_test_add_func ("/optimizer/damaged-backup", test_damaged_backup);
  g_test_add_func ("/optimizer/no-model", test_no_model);
  g_test_add_func ("/optimizer/outside-change", test_outside_change);
  g_test_add_func ("/optimizer/corrupt-while-running", test_corrupt_while_running);
  g_test_add_func ("/optimizer/restore-skipped", test_restore_skipped);
  return g_test_run ();
}

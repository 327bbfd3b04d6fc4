/* test-fast-controls.c — the "Fast decoding" controls and word constraints
 * of the Generate page, the Chat page's Fast decoding, the settings round
 * trip, and replay of a run that took fewer steps than asked for.
 *
 * Runs under a display: dbus-run-session -- xvfb-run -a, with
 * GSK_RENDERER=cairo GTK_A11Y=test.
 */
#include <adwaita.h>
#include <glib/gstdio.h>
#include <string.h>

#include "um-chat-page.h"
#include "um-generate-page.h"
#include "um-settings.h"

static char *tmp_dir;

static void
flush_events (void)
{
  while (g_main_context_iteration (NULL, FALSE))
    ;
}

/* Depth-first search for the first widget of @type under @w (found ones
 * that @skip lists are passed over). */
static GtkWidget *
find_widget (GtkWidget *w, GType type, guint skip)
{
  guint seen = 0;
  GQueue q = G_QUEUE_INIT;

  g_queue_push_tail (&q, w);
  while (!g_queue_is_empty (&q))
    {
      GtkWidget *cur = g_queue_pop_head (&q);
      if (g_type_is_a (G_OBJECT_TYPE (cur), type) && seen++ == skip)
        {
          g_queue_clear (&q);
          return cur;
        }
      for (GtkWidget *c = gtk_widget_get_first_child (cur); c; c = gtk_widget_get_next_sibling (c))
        g_queue_push_tail (&q, c);
    }
  return NULL;
}

static AdwExpanderRow *
fast_row_of (GtkWidget *page)
{
  GtkWidget *row = find_widget (page, ADW_TYPE_EXPANDER_ROW, 0);
  g_assert_nonnull (row);
  return ADW_EXPANDER_ROW (row);
}

/* The expander's combo rows: cache, then rule. */
static AdwComboRow *
combo_in_fast_row (AdwExpanderRow *row, guint index)
{
  GtkWidget *w = find_widget (GTK_WIDGET (row), ADW_TYPE_COMBO_ROW, index);
  g_assert_nonnull (w);
  return ADW_COMBO_ROW (w);
}

static GtkSpinButton *
spin_in_fast_row (AdwExpanderRow *row, guint index)
{
  GtkWidget *w = find_widget (GTK_WIDGET (row), GTK_TYPE_SPIN_BUTTON, index);
  g_assert_nonnull (w);
  return GTK_SPIN_BUTTON (w);
}

static GtkWidget *
new_window_with (GtkWidget *child)
{
  GtkWidget *win = gtk_window_new ();
  gtk_window_set_default_size (GTK_WINDOW (win), 1200, 900);
  gtk_window_set_child (GTK_WINDOW (win), child);
  gtk_window_present (GTK_WINDOW (win));
  flush_events ();
  return win;
}

static void
test_generate_params (void)
{
  UmGeneratePage *page = g_object_new (UM_TYPE_GENERATE_PAGE, NULL);
  GtkWidget *win = new_window_with (GTK_WIDGET (page));
  AdwExpanderRow *fast = fast_row_of (GTK_WIDGET (page));
  UmGenParams p;

  /* Off by default: the exact schedule. (threshold and factor == 0.0 are
   * exact here and below: the page assigns 0.0 for a rule that is off.) */
  g_assert_false (adw_expander_row_get_enable_expansion (fast));
  um_generate_page_get_params (page, &p);
  g_assert_cmpint (p.cache, ==, UM_CACHE_NONE);
  g_assert_cmpfloat (p.threshold, ==, 0.0);
  g_assert_cmpfloat (p.factor, ==, 0.0);
  g_assert_cmpint (p.n_constraints, ==, 0);
  g_assert_null (p.constraints);

  /* On: Dual cache, threshold 0.90. */
  adw_expander_row_set_enable_expansion (fast, TRUE);
  um_generate_page_get_params (page, &p);
  g_assert_cmpint (p.cache, ==, UM_CACHE_DUAL);
  g_assert_cmpfloat_with_epsilon (p.threshold, 0.9, 1e-9);
  g_assert_cmpfloat (p.factor, ==, 0.0);

  /* Prefix cache, τ 0.75. */
  adw_combo_row_set_selected (combo_in_fast_row (fast, 0), 1);
  gtk_spin_button_set_value (spin_in_fast_row (fast, 0), 0.75);
  um_generate_page_get_params (page, &p);
  g_assert_cmpint (p.cache, ==, UM_CACHE_PREFIX);
  g_assert_cmpfloat_with_epsilon (p.threshold, 0.75, 1e-9);

  /* τ stays within 0.50–1.00. */
  gtk_spin_button_set_value (spin_in_fast_row (fast, 0), 0.2);
  g_assert_cmpfloat_with_epsilon (gtk_spin_button_get_value (spin_in_fast_row (fast, 0)), 0.5, 1e-9);

  /* The factor rule: f 1.0 by default, shown instead of τ. */
  adw_combo_row_set_selected (combo_in_fast_row (fast, 1), 1);
  um_generate_page_get_params (page, &p);
  g_assert_cmpfloat (p.threshold, ==, 0.0);
  g_assert_cmpfloat_with_epsilon (p.factor, 1.0, 1e-9);
  g_assert_false (gtk_widget_get_visible (gtk_widget_get_ancestor (GTK_WIDGET (spin_in_fast_row (fast, 0)),
                                                                   ADW_TYPE_ACTION_ROW)));
  g_assert_true (gtk_widget_get_visible (gtk_widget_get_ancestor (GTK_WIDGET (spin_in_fast_row (fast, 1)),
                                                                  ADW_TYPE_ACTION_ROW)));
  gtk_spin_button_set_value (spin_in_fast_row (fast, 1), 2.5);
  um_generate_page_get_params (page, &p);
  g_assert_cmpfloat_with_epsilon (p.factor, 2.5, 1e-9);

  /* Off again: nothing of it reaches the params. */
  adw_expander_row_set_enable_expansion (fast, FALSE);
  um_generate_page_get_params (page, &p);
  g_assert_cmpint (p.cache, ==, UM_CACHE_NONE);
  g_assert_cmpfloat (p.threshold, ==, 0.0);
  g_assert_cmpfloat (p.factor, ==, 0.0);

  gtk_window_destroy (GTK_WINDOW (win));
  flush_events ();
}

static GtkButton *
add_constraint_button (UmGeneratePage *page)
{
  /* The header suffix of the "Word Constraints" group. */
  GtkWidget *content = NULL;
  for (guint i = 0; (content = find_widget (GTK_WIDGET (page), ADW_TYPE_BUTTON_CONTENT, i)) != NULL; i++)
    if (g_strcmp0 (adw_button_content_get_label (ADW_BUTTON_CONTENT (content)), "_Add Constraint") == 0)
      return GTK_BUTTON (gtk_widget_get_parent (content));
  g_assert_not_reached ();
}

static void
test_constraints (void)
{
  UmGeneratePage *page = g_object_new (UM_TYPE_GENERATE_PAGE, NULL);
  GtkWidget *win = new_window_with (GTK_WIDGET (page));
  GtkButton *add = add_constraint_button (page);
  UmGenParams p;
  GtkWidget *entry;
  GtkListBoxRow *row;

  /* The button adds an empty row (empty words are left out) and focuses it. */
  g_signal_emit_by_name (add, "clicked");
  flush_events ();
  g_assert_cmpuint (um_generate_page_get_n_constraints (page), ==, 1);
  um_generate_page_get_params (page, &p);
  g_assert_cmpint (p.n_constraints, ==, 0);
  entry = gtk_window_get_focus (GTK_WINDOW (win));
  g_assert_nonnull (entry);
  g_assert_nonnull (gtk_widget_get_ancestor (entry, GTK_TYPE_ENTRY));
  gtk_editable_set_text (GTK_EDITABLE (gtk_widget_get_ancestor (entry, GTK_TYPE_ENTRY)), "Paris");
  row = GTK_LIST_BOX_ROW (gtk_widget_get_ancestor (entry, GTK_TYPE_LIST_BOX_ROW));
  gtk_spin_button_set_value (GTK_SPIN_BUTTON (find_widget (GTK_WIDGET (row), GTK_TYPE_SPIN_BUTTON, 0)), 5);

  um_generate_page_add_constraint (page, 12, " capital");
  um_generate_page_add_constraint (page, 20, "France");
  g_assert_cmpuint (um_generate_page_get_n_constraints (page), ==, 3);
  um_generate_page_get_params (page, &p);
  g_assert_cmpint (p.n_constraints, ==, 3);
  g_assert_nonnull (p.constraints);
  g_assert_cmpint (p.constraints[0].offset, ==, 5);
  g_assert_cmpstr (p.constraints[0].word, ==, "Paris");
  g_assert_cmpint (p.constraints[1].offset, ==, 12);
  g_assert_cmpstr (p.constraints[1].word, ==, " capital");
  g_assert_cmpint (p.constraints[2].offset, ==, 20);
  g_assert_cmpstr (p.constraints[2].word, ==, "France");

  /* The next Add guesses the position after the last one. */
  g_signal_emit_by_name (add, "clicked");
  flush_events ();
  g_assert_cmpuint (um_generate_page_get_n_constraints (page), ==, 4);
  {
    GtkWidget *focus = gtk_window_get_focus (GTK_WINDOW (win));
    GtkWidget *last = gtk_widget_get_ancestor (focus, GTK_TYPE_LIST_BOX_ROW);
    g_assert_cmpint (gtk_spin_button_get_value_as_int (GTK_SPIN_BUTTON (find_widget (last, GTK_TYPE_SPIN_BUTTON, 0))),
                     ==, 21);
  }

  /* Removing the middle one keeps the others in order. */
  um_generate_page_remove_constraint (page, 1);
  flush_events ();
  g_assert_cmpuint (um_generate_page_get_n_constraints (page), ==, 3);
  um_generate_page_get_params (page, &p);
  g_assert_cmpint (p.n_constraints, ==, 2);
  g_assert_cmpstr (p.constraints[0].word, ==, "Paris");
  g_assert_cmpstr (p.constraints[1].word, ==, "France");

  /* A row's remove button, clicked. */
  {
    GtkWidget *rm = find_widget (GTK_WIDGET (row), GTK_TYPE_BUTTON, 0);
    while (rm != NULL && g_strcmp0 (gtk_button_get_icon_name (GTK_BUTTON (rm)), "list-remove-symbolic") != 0)
      rm = NULL;
    g_assert_nonnull (rm);
    g_signal_emit_by_name (rm, "clicked");
  }
  flush_events ();
  um_generate_page_remove_constraint (page, 0);
  um_generate_page_remove_constraint (page, 0);
  um_generate_page_remove_constraint (page, 7);   /* out of range: ignored */
  flush_events ();
  g_assert_cmpuint (um_generate_page_get_n_constraints (page), ==, 0);
  um_generate_page_get_params (page, &p);
  g_assert_cmpint (p.n_constraints, ==, 0);
  g_assert_null (p.constraints);

  gtk_window_destroy (GTK_WINDOW (win));
  flush_events ();
}

static void
test_settings_round_trip (void)
{
  g_autofree char *config = g_build_filename (tmp_dir, "config", NULL);
  g_autofree char *path = NULL;
  UmGenParams p;

  g_setenv ("XDG_CONFIG_HOME", config, TRUE);
  path = g_build_filename (g_get_user_config_dir (), "unmask", "settings.json", NULL);
  /* GLib caches the config dir: the file is wherever it says. */
  g_unlink (path);

  /* An old file without the keys: off, Dual, τ 0.90, f 1.0. */
  {
    g_autofree char *dir = g_path_get_dirname (path);
    g_mkdir_with_parents (dir, 0700);
    g_assert_true (g_file_set_contents (path, "{ \"steps\": 64, \"gen-length\": 64 }", -1, NULL));
  }
  {
    g_autoptr(UmSettings) settings = um_settings_new (NULL);
    UmGeneratePage *page = g_object_new (UM_TYPE_GENERATE_PAGE, NULL);
    GtkWidget *win = new_window_with (GTK_WIDGET (page));
    AdwExpanderRow *fast = fast_row_of (GTK_WIDGET (page));
    gboolean on;
    g_autofree char *cache = NULL;

    g_assert_null (um_settings_get_load_warning (settings));
    g_object_get (settings, "fast-decoding", &on, "cache", &cache, NULL);
    g_assert_false (on);
    g_assert_cmpstr (cache, ==, "dual");
    um_settings_get_params (settings, &p);
    g_assert_cmpint (p.steps, ==, 64);
    g_assert_cmpint (p.cache, ==, UM_CACHE_NONE);
    g_assert_cmpfloat (p.threshold, ==, 0.0);

    um_generate_page_set_settings (page, settings);
    g_assert_false (adw_expander_row_get_enable_expansion (fast));
    g_assert_cmpuint (adw_combo_row_get_selected (combo_in_fast_row (fast, 0)), ==, 2);

    /* Turn it on, factor rule, Prefix cache, f 1.5. */
    adw_expander_row_set_enable_expansion (fast, TRUE);
    adw_combo_row_set_selected (combo_in_fast_row (fast, 0), 1);
    adw_combo_row_set_selected (combo_in_fast_row (fast, 1), 1);
    gtk_spin_button_set_value (spin_in_fast_row (fast, 1), 1.5);
    um_settings_get_params (settings, &p);
    g_assert_cmpint (p.cache, ==, UM_CACHE_PREFIX);
    g_assert_cmpfloat_with_epsilon (p.factor, 1.5, 1e-9);
    g_assert_cmpfloat (p.threshold, ==, 0.0);
    gtk_window_destroy (GTK_WINDOW (win));
    flush_events ();
    /* Dropping the last reference writes the pending change. */
  }
  g_assert_true (g_file_test (path, G_FILE_TEST_EXISTS));

  /* A new page and settings instance read it back. */
  {
    g_autoptr(UmSettings) settings = um_settings_new (NULL);
    UmGeneratePage *page = g_object_new (UM_TYPE_GENERATE_PAGE, NULL);
    GtkWidget *win = new_window_with (GTK_WIDGET (page));
    AdwExpanderRow *fast = fast_row_of (GTK_WIDGET (page));

    um_generate_page_set_settings (page, settings);
    g_assert_true (adw_expander_row_get_enable_expansion (fast));
    g_assert_cmpuint (adw_combo_row_get_selected (combo_in_fast_row (fast, 0)), ==, 1);
    g_assert_cmpuint (adw_combo_row_get_selected (combo_in_fast_row (fast, 1)), ==, 1);
    g_assert_cmpfloat_with_epsilon (gtk_spin_button_get_value (spin_in_fast_row (fast, 1)), 1.5, 1e-9);
    um_generate_page_get_params (page, &p);
    g_assert_cmpint (p.steps, ==, 64);
    g_assert_cmpint (p.cache, ==, UM_CACHE_PREFIX);
    g_assert_cmpfloat_with_epsilon (p.factor, 1.5, 1e-9);

    /* Back to threshold τ 0.8, then off. */
    adw_combo_row_set_selected (combo_in_fast_row (fast, 1), 0);
    gtk_spin_button_set_value (spin_in_fast_row (fast, 0), 0.8);
    adw_expander_row_set_enable_expansion (fast, FALSE);
    g_assert_true (um_settings_save (settings, NULL));
    gtk_window_destroy (GTK_WINDOW (win));
    flush_events ();
  }
  {
    g_autoptr(UmSettings) settings = um_settings_new (NULL);
    gboolean on = TRUE;
    double tau = 0;
    g_autofree char *rule = NULL;

    g_object_get (settings, "fast-decoding", &on, "fast-rule", &rule, "threshold", &tau, NULL);
    g_assert_false (on);
    g_assert_cmpstr (rule, ==, "threshold");
    g_assert_cmpfloat_with_epsilon (tau, 0.8, 1e-9);
    um_settings_get_params (settings, &p);
    g_assert_cmpint (p.cache, ==, UM_CACHE_NONE);
    g_assert_cmpfloat (p.threshold, ==, 0.0);
  }
  /* Bad values in the file are ignored, not trusted. */
  g_assert_true (g_file_set_contents (path,
                                      "{ \"fast-decoding\": true, \"threshold\": 3.0, \"cache\": \"bogus\" }",
                                      -1, NULL));
  {
    g_autoptr(UmSettings) settings = um_settings_new (NULL);
    um_settings_get_params (settings, &p);
    g_assert_cmpint (p.cache, ==, UM_CACHE_DUAL);
    g_assert_cmpfloat_with_epsilon (p.threshold, 0.9, 1e-9);
  }
}

static void
test_chat_page (void)
{
  g_autofree char *path = g_build_filename (tmp_dir, "chat-settings.json", NULL);
  g_autoptr(UmSettings) settings = um_settings_new (path);
  UmChatPage *page = UM_CHAT_PAGE (um_chat_page_new ());
  GtkWidget *win = new_window_with (GTK_WIDGET (page));
  AdwExpanderRow *fast = NULL;
  GtkWidget *button;
  UmGenParams in, p;

  um_gen_params_init (&in);
  in.steps = 64;
  um_chat_page_set_params (page, &in);
  um_chat_page_get_params (page, &p);
  g_assert_cmpint (p.steps, ==, 64);
  g_assert_cmpint (p.cache, ==, UM_CACHE_NONE);
  g_assert_cmpfloat (p.threshold, ==, 0.0);

  /* The header's Fast Decoding button opens the controls. */
  for (guint i = 0; (button = find_widget (GTK_WIDGET (page), GTK_TYPE_MENU_BUTTON, i)) != NULL; i++)
    if (g_strcmp0 (gtk_widget_get_tooltip_text (button), "Fast Decoding") == 0)
      break;
  g_assert_nonnull (button);
  g_assert_true (gtk_widget_get_focusable (button) || gtk_widget_get_focusable (gtk_widget_get_first_child (button)));
  gtk_menu_button_popup (GTK_MENU_BUTTON (button));
  flush_events ();
  fast = ADW_EXPANDER_ROW (find_widget (GTK_WIDGET (gtk_menu_button_get_popover (GTK_MENU_BUTTON (button))),
                                        ADW_TYPE_EXPANDER_ROW, 0));
  g_assert_nonnull (fast);

  um_chat_page_set_settings (page, settings);
  adw_expander_row_set_enable_expansion (fast, TRUE);
  um_chat_page_get_params (page, &p);
  g_assert_cmpint (p.cache, ==, UM_CACHE_DUAL);
  g_assert_cmpfloat_with_epsilon (p.threshold, 0.9, 1e-9);
  g_assert_cmpint (p.n_constraints, ==, 0);
  /* Bound to the settings, both ways. */
  {
    gboolean on = FALSE;
    g_object_get (settings, "fast-decoding", &on, NULL);
    g_assert_true (on);
  }
  g_object_set (settings, "fast-rule", "factor", "factor", 2.0, "cache", "none", NULL);
  um_chat_page_get_params (page, &p);
  g_assert_cmpint (p.cache, ==, UM_CACHE_NONE);
  g_assert_cmpfloat (p.threshold, ==, 0.0);
  g_assert_cmpfloat_with_epsilon (p.factor, 2.0, 1e-9);
  g_object_set (settings, "fast-decoding", FALSE, NULL);
  g_assert_false (adw_expander_row_get_enable_expansion (fast));

  gtk_menu_button_popdown (GTK_MENU_BUTTON (button));
  gtk_window_destroy (GTK_WINDOW (win));
  flush_events ();
}

/* Threshold decoding runs fewer steps than params.steps: the slider and
 * the replay cover the steps recorded, not the maximum. */
static void
test_replay_fewer_steps (void)
{
  UmGeneratePage *page = g_object_new (UM_TYPE_GENERATE_PAGE, NULL);
  GtkWidget *win = new_window_with (GTK_WIDGET (page));
  UmDiffusionView *view = um_generate_page_get_view (page);
  GtkRange *scale = um_generate_page_get_step_scale (page);
  GtkAdjustment *adj = gtk_range_get_adjustment (scale);
  /* 16 positions in 4 steps of 7, 1, 5 and 3 (asked for: 16 steps). */
  const int counts[] = { 7, 1, 5, 3 };
  int pos = 4;

  um_diffusion_view_reset (view, 4, 16, 16, 16);
  for (int s = 0; s < 4; s++)
    {
      gint32 positions[8], ids[8];
      float conf[8];
      for (int i = 0; i < counts[s]; i++)
        {
          positions[i] = pos++;
          ids[i] = 100 + positions[i];
          conf[i] = 0.95f;
        }
      um_diffusion_view_add_step (view, s, positions, ids, conf, counts[s]);
    }
  g_assert_cmpint (um_diffusion_view_get_n_steps_recorded (view), ==, 4);
  gtk_adjustment_configure (adj, 4, 0, 4, 1, 8, 0);
  gtk_widget_set_sensitive (GTK_WIDGET (scale), TRUE);
  for (int v = 4; v >= 0; v--)
    {
      gtk_adjustment_set_value (adj, v);
      flush_events ();
      g_assert_cmpint (um_diffusion_view_get_shown_step (view), ==, v - 1);
    }
  gtk_adjustment_set_value (adj, 4);
  g_assert_cmpint (um_diffusion_view_get_shown_step (view), ==, 3);

  gtk_window_destroy (GTK_WINDOW (win));
  flush_events ();
}

int
main (int argc, char **argv)
{
  int rc;

  tmp_dir = g_dir_make_tmp ("unmask-fast-XXXXXX", NULL);
  {
    g_autofree char *config = g_build_filename (tmp_dir, "config", NULL);
    g_autofree char *data_home = g_build_filename (tmp_dir, "data", NULL);
    g_setenv ("XDG_CONFIG_HOME", config, TRUE);
    g_setenv ("XDG_DATA_HOME", data_home, TRUE);
  }
  gtk_test_init (&argc, &argv, NULL);
  adw_init ();

  g_test_add_func ("/fast-decoding/generate-params", test_generate_params);
  g_test_add_func ("/fast-decoding/constraints", test_constraints);
  g_test_add_func ("/fast-decoding/settings-round-trip", test_settings_round_trip);
  g_test_add_func ("/fast-decoding/chat-page", test_chat_page);
  g_test_add_func ("/fast-decoding/replay-fewer-steps", test_replay_fewer_steps);
  rc = g_test_run ();
  {
    g_autofree char *cmd = g_strdup_printf ("rm -rf '%s'", tmp_dir);
    (void) !system (cmd);
  }
  return rc;
}

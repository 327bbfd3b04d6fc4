/* Model families in the app: the pages offer only the options of the
 * family's schedule (Dream's algorithm and the rest, RND1's greedy tokens,
 * LLaDA's blocks) and keep each family's values; the model chooser and the
 * header name the family; Dream (tests/data/tiny-dream) and RND1, which
 * shift their logits, run and the diffusion view shows each token where
 * the engine committed it, RND1's reserved pad slot and word constraints
 * from the start; the Optimizer plans LLaDA-MoE with every expert. */
#include "config.h"

#include <adwaita.h>
#include <glib/gstdio.h>
#include <string.h>

#include "um-chat-page.h"
#include "um-chat-store.h"
#include "um-generate-page.h"
#include "um-gguf.h"
#include "um-model-chooser.h"
#include "um-model-scan.h"
#include "um-optimizer-page.h"
#include "um-preferences.h"
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
mapped (gpointer widget)
{
  return gtk_widget_get_mapped (widget);
}

static gboolean
not_running (gpointer page)
{
  return !um_generate_page_get_running (page);
}

static gboolean
chat_idle (gpointer chat)
{
  return !um_chat_page_get_busy (chat);
}

static gboolean
scanned (gpointer chooser)
{
  return um_model_chooser_get_scanned (chooser);
}

/* A window with settings of its own (a fresh file per test). */
static UmWindow *
make_window (const char *settings_name)
{
  g_autofree char *settings_path = g_build_filename (tmp_dir, settings_name, NULL);
  g_autoptr(UmSettings) settings = NULL;
  UmWindow *win;

  g_remove (settings_path);
  settings = um_settings_new (settings_path);
  win = um_window_new (NULL, settings);
  gtk_window_set_default_size (GTK_WINDOW (win), 1180, 780);
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
  wait_for (not_loading, win, 30);
  if (um_window_get_error_message (win) != NULL)
    g_error ("%s: %s", path, um_window_get_error_message (win));
  g_assert_nonnull (um_window_get_engine (win));
}

/* The options some schedules have and others not, and each schedule's. */
static const char *const optional[] = {
  "block-length", "cfg-scale", "remasking", "fast-decoding", "cache", "factor", "constraints",
  "alg", "alg-temp", "eps", "top-p", "top-k", "greedy", NULL
};
static const char *const block_options[] = {
  "block-length", "cfg-scale", "remasking", "fast-decoding", "cache", "factor", "constraints", NULL
};
/* Dream's fast decoding is Fast-dLLM's threshold, without cache or factor. */
static const char *const timestep_options[] = {
  "alg", "alg-temp", "eps", "top-p", "top-k", "fast-decoding", "constraints", NULL
};
static const char *const entropy_options[] = { "greedy", "top-p", "top-k", "constraints", NULL };
static const char *const every_schedule[] = { "gen-length", "steps", "temperature", NULL };

/* The Generate page shows exactly @shown of the schedules' options; the
 * Chat page lists the same; Preferences has LLaDA's EOS switches only for
 * the block schedule. */
static void
assert_options (UmWindow *win, const char *const *shown, const char *chat_has, const char *chat_lacks)
{
  UmGeneratePage *page = UM_GENERATE_PAGE (um_window_get_generate_page (win));
  UmChatPage *chat = UM_CHAT_PAGE (um_window_get_chat_page (win));
  const char *text = um_chat_page_get_params_text (chat);
  GtkWidget *prefs = um_preferences_new (um_window_get_settings (win));

  for (guint i = 0; every_schedule[i] != NULL; i++)
    g_assert_true (um_generate_page_get_option_visible (page, every_schedule[i]));
  for (guint i = 0; optional[i] != NULL; i++)
    {
      gboolean want = g_strv_contains (shown, optional[i]);
      if (um_generate_page_get_option_visible (page, optional[i]) != want)
        g_error ("option “%s” is %s", optional[i], want ? "hidden" : "shown");
    }
  if (strstr (text, chat_has) == NULL || strstr (text, chat_lacks) != NULL)
    g_error ("the chat's parameters do not fit the family: %s", text);
  g_assert_cmpint (um_preferences_get_eos_visible (UM_PREFERENCES (prefs)), ==, shown == block_options);
  gtk_window_destroy (GTK_WINDOW (prefs));
}

/* Switching the settings' family, as loading a model does: the options
 * follow, each family keeps its own values, and a value that would break
 * LLaDA's blocks is no problem for Dream, which has none. */
static void
test_options_follow_family (void)
{
  UmWindow *win = make_window ("settings-options.json");
  UmSettings *settings = um_window_get_settings (win);
  UmGeneratePage *page = UM_GENERATE_PAGE (um_window_get_generate_page (win));
  UmGenParams p;

  g_assert_cmpstr (um_settings_get_family (settings), ==, "LLaDA");
  assert_options (win, block_options, "Block Length", "Algorithm");
  g_object_set (settings, "gen-length", 100, "fast-decoding", TRUE, NULL);
  /* 100 tokens do not make blocks of 32. */
  g_assert_nonnull (um_generate_page_get_problem (page));

  um_settings_set_family (settings, "Dream");
  g_assert_cmpint (um_generate_page_get_schedule (page), ==, UM_SCHEDULE_TIMESTEP);
  assert_options (win, timestep_options, "Algorithm", "Block Length");
  /* Dream's defaults: its README's temperature, steps that follow the length. */
  um_generate_page_get_params (page, &p);
  g_assert_cmpfloat (p.temperature, ==, 0.2);   /* the literal of the defaults, exact */
  g_assert_false (um_generate_page_get_reset_visible (page, UM_GEN_KEY_ALG));
  g_object_set (settings, "gen-length", 100, "alg", "entropy", "top-p", 0.95, NULL);
  g_assert_null (um_generate_page_get_problem (page));
  /* Dream's options are model parameters like the others: where they come
   * from, and a reset button once chosen. */
  g_assert_true (um_generate_page_get_reset_visible (page, UM_GEN_KEY_ALG));
  g_assert_nonnull (strstr (um_generate_page_get_source_note (page, UM_GEN_KEY_TOP_P), "your choice"));
  g_assert_false (um_generate_page_get_reset_visible (page, UM_GEN_KEY_EPS));
  /* The row's reset button (its action and target from the template). */
  g_assert_true (gtk_widget_activate_action (GTK_WIDGET (win), "win.reset-param", "s", "top_p"));
  g_assert_false (um_generate_page_get_reset_visible (page, UM_GEN_KEY_TOP_P));
  um_generate_page_get_params (page, &p);
  g_assert_cmpfloat (p.top_p, ==, 0.0);
  g_object_set (settings, "top-p", 0.95, NULL);
  um_generate_page_get_params (page, &p);
  g_assert_cmpint (p.gen_length, ==, 100);
  g_assert_cmpint (p.steps, ==, 100);
  g_assert_cmpint (p.alg, ==, UM_ALG_ENTROPY);
  g_assert_cmpfloat (p.top_p, ==, 0.95);
  /* LLaDA's fast decoding (still on in the settings) does not reach Dream. */
  g_assert_cmpint (p.cache, ==, UM_CACHE_NONE);
  g_assert_cmpfloat (p.threshold, ==, 0.0);
  g_assert_cmpint (p.block_length, ==, p.gen_length);
  {
    UmGenParams chat;
    um_chat_page_get_params (UM_CHAT_PAGE (um_window_get_chat_page (win)), &chat);
    g_assert_cmpint (chat.cache, ==, UM_CACHE_NONE);
    g_assert_cmpint (chat.alg, ==, UM_ALG_ENTROPY);
  }
  /* Dream's own fast decoding: the threshold, whatever rule LLaDA uses. */
  g_object_set (settings, "fast-decoding", TRUE, "fast-rule", "factor", "threshold", 0.8, NULL);
  um_generate_page_get_params (page, &p);
  g_assert_cmpint (p.cache, ==, UM_CACHE_NONE);
  g_assert_cmpfloat (p.factor, ==, 0.0);
  g_assert_cmpfloat (p.threshold, ==, 0.8);
  g_assert_null (um_generate_page_get_problem (page));
  {
    UmGenParams chat;
    um_chat_page_get_params (UM_CHAT_PAGE (um_window_get_chat_page (win)), &chat);
    g_assert_cmpfloat (chat.threshold, ==, 0.8);
    g_assert_cmpfloat (chat.factor, ==, 0.0);
  }
  g_assert_nonnull (strstr (um_chat_page_get_params_text (UM_CHAT_PAGE (um_window_get_chat_page (win))),
                            "Entropy"));

  um_settings_set_family (settings, "RND1");
  assert_options (win, entropy_options, "Greedy Tokens", "Algorithm");

  um_settings_set_family (settings, "LLaDA-MoE");
  assert_options (win, block_options, "Guidance Scale", "Top-k");

  um_settings_set_family (settings, "Dream");
  um_generate_page_get_params (page, &p);
  g_assert_cmpint (p.alg, ==, UM_ALG_ENTROPY);
  um_settings_set_family (settings, "LLaDA");
  assert_options (win, block_options, "Block Length", "Algorithm");
  um_generate_page_get_params (page, &p);
  g_assert_cmpint (p.gen_length, ==, 100);
  g_assert_cmpint (p.cache, !=, UM_CACHE_NONE);
  g_assert_cmpfloat (p.factor, >, 0.0);
  destroy_window (win);
}

static void
copy_data_file (const char *from_dir, const char *name, const char *to_dir)
{
  g_autofree char *from = g_build_filename (from_dir, name, NULL);
  g_autofree char *to = g_build_filename (to_dir, name, NULL);
  g_autofree char *bytes = NULL;
  gsize len;

  g_assert_true (g_file_get_contents (from, &bytes, &len, NULL));
  um_test_write_file (to, bytes, len);
}

static GtkWidget *
find_row (GtkListBox *list, const char *path)
{
  for (GtkWidget *w = gtk_widget_get_first_child (GTK_WIDGET (list)); w != NULL; w = gtk_widget_get_next_sibling (w))
    if (g_strcmp0 (g_object_get_data (G_OBJECT (w), "path"), path) == 0)
      return w;
  return NULL;
}

/* The chooser lists a Dream snapshot as Dream ships it (vocab.json +
 * merges.txt, no tokenizer.json) and a Dream GGUF, naming the family. */
static void
test_chooser_names_family (void)
{
  const char *hub = g_getenv ("HF_HUB_CACHE");
  g_autofree char *snap = g_build_filename (hub, "models--Dream-org--Dream-Tiny", "snapshots", "0123abcd", NULL);
  g_autofree char *gguf_snap = g_build_filename (hub, "models--someone--Dream-GGUF", "snapshots", "0123abcd", NULL);
  g_autofree char *gguf = g_build_filename (gguf_snap, "dream-tiny.gguf", NULL);
  g_autofree char *dream = um_test_data_path ("tiny-dream");
  g_autofree char *settings_path = g_build_filename (tmp_dir, "settings-chooser.json", NULL);
  g_autoptr(UmSettings) settings = um_settings_new (settings_path);
  static const char *const files[] = { "config.json", "generation_config.json", "model.safetensors", "vocab.json",
                                       "merges.txt", "tokenizer_config.json" };
  GtkWidget *chooser;
  GtkWidget *row;

  g_mkdir_with_parents (snap, 0755);
  g_mkdir_with_parents (gguf_snap, 0755);
  for (guint i = 0; i < G_N_ELEMENTS (files); i++)
    copy_data_file (dream, files[i], snap);
  {
    /* The chooser reads only the GGUF's header. */
    g_autoptr(UmGgufWriter) w = um_gguf_writer_new ();
    g_autoptr(GError) error = NULL;
    um_gguf_writer_set_string (w, "general.architecture", "dream");
    g_assert_true (um_gguf_writer_begin (w, gguf, &error) && um_gguf_writer_finish (w, &error));
    g_assert_no_error (error);
  }
  chooser = um_model_chooser_new (settings);
  gtk_window_present (GTK_WINDOW (chooser));
  wait_for (scanned, chooser, 30);

  row = find_row (um_model_chooser_get_list (UM_MODEL_CHOOSER (chooser)), gguf);
  g_assert_nonnull (row);
  g_assert_cmpstr (g_object_get_data (G_OBJECT (row), "family"), ==, "Dream");
  g_assert_true (g_str_has_prefix (adw_action_row_get_subtitle (ADW_ACTION_ROW (row)), "Dream · gguf · "));

  row = find_row (um_model_chooser_get_list (UM_MODEL_CHOOSER (chooser)), snap);
  g_assert_nonnull (row);
  if (!gtk_list_box_row_get_activatable (GTK_LIST_BOX_ROW (row)))
    g_error ("the Dream snapshot cannot be loaded: %s", adw_action_row_get_subtitle (ADW_ACTION_ROW (row)));
  g_assert_cmpstr (g_object_get_data (G_OBJECT (row), "family"), ==, "Dream");
  g_assert_true (g_str_has_prefix (adw_action_row_get_subtitle (ADW_ACTION_ROW (row)), "Dream · safetensors · "));

  gtk_window_destroy (GTK_WINDOW (chooser));
}

typedef struct {
  UmDiffusionView *view;
  int commits;        /* cells filled so far, as the steps said */
  gboolean agree;
} StepWatch;

/* After each step, the view has exactly the cells committed so far. */
static void
on_steps_recorded (UmDiffusionView *view, GParamSpec *pspec, StepWatch *w)
{
  g_autoptr(GArray) shown = um_diffusion_view_get_shown_ids (view);
  int filled = 0;

  for (guint i = 0; i < shown->len; i++)
    filled += g_array_index (shown, gint32, i) != 508;   /* tiny-dream's mask */
  if (filled < w->commits)
    w->agree = FALSE;
  w->commits = filled;
}

/* A Dream model: the header names the family, Generate shows Dream's
 * options, a run ends with the view showing the answer exactly (tokens
 * where they were committed, not one row off), and LLaDA's options come
 * back with a LLaDA model while Dream's choices are kept for Dream. */
static void
test_dream_model (void)
{
  g_autofree char *dream = um_test_data_path ("tiny-dream");
  g_autofree char *llada = um_test_data_path ("tiny-llada");
  UmWindow *win = make_window ("settings-dream.json");
  UmSettings *settings = um_window_get_settings (win);
  UmGeneratePage *page = UM_GENERATE_PAGE (um_window_get_generate_page (win));
  UmDiffusionView *view = um_generate_page_get_view (page);
  StepWatch watch = { view, 0, TRUE };
  g_autoptr(GArray) shown = NULL;
  GArray *got;
  gulong id;
  UmGenParams p;

  load (win, dream);
  g_assert_cmpstr (um_settings_get_family (settings), ==, "Dream");
  g_assert_cmpstr (um_window_get_family_label (win), ==, "Dream");
  g_assert_true (g_str_has_suffix (um_window_get_subtitle (win), " · Dream"));
  assert_options (win, timestep_options, "Algorithm", "Block Length");
  /* tiny-dream's generation_config.json is DreamGenerationConfig's class
   * defaults (alg origin, 512 steps): said, not applied; Dream's own
   * defaults hold. */
  g_assert_nonnull (um_generate_page_get_model_note (page));
  g_assert_nonnull (strstr (um_generate_page_get_model_note (page), "alg"));
  um_generate_page_get_params (page, &p);
  g_assert_cmpint (p.alg, ==, UM_ALG_ENTROPY);
  g_assert_cmpint (p.steps, ==, p.gen_length);

  um_generate_page_set_prompt (page, "What is free software?");
  g_object_set (settings, "gen-length", 16, "steps", 8, "alg", "maskgit_plus", "temperature", 0.0,
                "chat-template", TRUE, NULL);
  g_assert_null (um_generate_page_get_problem (page));
  id = g_signal_connect (view, "notify::n-steps-recorded", G_CALLBACK (on_steps_recorded), &watch);
  um_generate_page_generate (page);
  g_assert_true (um_generate_page_get_running (page));
  wait_for (not_running, page, 60);
  g_signal_handler_disconnect (view, id);

  g_assert_null (um_generate_page_get_last_error (page));
  got = um_generate_page_get_last_ids (page);
  g_assert_cmpuint (got->len, ==, 16);
  g_assert_true (watch.agree);
  g_assert_cmpint (um_diffusion_view_get_n_steps_recorded (view), ==, 8);
  shown = um_diffusion_view_get_shown_ids (view);
  g_assert_cmpmem (shown->data, shown->len * 4, got->data, got->len * 4);

  /* A chat turn in the model's own template (ChatML), not LLaDA's. */
  {
    UmChatPage *chat = UM_CHAT_PAGE (um_window_get_chat_page (win));
    g_autofree char *store = g_build_filename (tmp_dir, "chats", NULL);
    g_autoptr(GArray) want = g_array_new (FALSE, FALSE, sizeof (gint32));
    g_autoptr(GError) error = NULL;
    UmChatConversation *conv;

    g_assert_true (um_model_build_chat_prompt (um_engine_get_model (um_window_get_engine (win)), NULL, 0, "Hello",
                                               want, &error));
    g_assert_no_error (error);
    um_chat_page_set_store_dir (chat, store);
    um_chat_page_send (chat, "Hello");
    wait_for (chat_idle, chat, 60);
    conv = um_chat_page_get_conversation (chat);
    g_assert_cmpuint (conv->messages->len, ==, 2);
    g_assert_cmpuint (conv->ids->len, >, want->len);
    g_assert_cmpmem (conv->ids->data, want->len * 4, want->data, want->len * 4);
  }

  load (win, llada);
  g_assert_cmpstr (um_window_get_family_label (win), ==, "LLaDA");
  assert_options (win, block_options, "Block Length", "Algorithm");
  um_generate_page_get_params (page, &p);
  g_assert_cmpint (p.gen_length, !=, 16);

  load (win, dream);
  um_generate_page_get_params (page, &p);
  g_assert_cmpint (p.gen_length, ==, 16);
  g_assert_cmpint (p.steps, ==, 8);
  g_assert_cmpint (p.alg, ==, UM_ALG_MASKGIT_PLUS);
  destroy_window (win);
}

/* Word constraints are in the canvas from the start: the view shows them
 * there before any step (they were masks before), and the final canvas is
 * the answer. The same path shows RND1's reserved end slot. */
static void
test_fixed_tokens_shown (void)
{
  g_autofree char *llada = um_test_data_path ("tiny-llada");
  UmWindow *win = make_window ("settings-fixed.json");
  UmGeneratePage *page = UM_GENERATE_PAGE (um_window_get_generate_page (win));
  UmDiffusionView *view = um_generate_page_get_view (page);
  g_autoptr(GArray) shown = NULL;
  g_autoptr(GArray) start = NULL;
  GArray *got;
  int filled = 0;

  load (win, llada);
  um_generate_page_set_prompt (page, "What is free software?");
  g_object_set (um_window_get_settings (win), "gen-length", 16, "steps", 16, "block-length", 8,
                "temperature", 0.0, NULL);
  um_generate_page_add_constraint (page, 5, "France");
  um_generate_page_generate (page);
  wait_for (not_running, page, 60);
  g_assert_null (um_generate_page_get_last_error (page));
  got = um_generate_page_get_last_ids (page);
  shown = um_diffusion_view_get_shown_ids (view);
  g_assert_cmpmem (shown->data, shown->len * 4, got->data, got->len * 4);

  um_diffusion_view_set_shown_step (view, -1);
  start = um_diffusion_view_get_shown_ids (view);
  for (guint i = 0; i < start->len; i++)
    if (g_array_index (start, gint32, i) != 508)   /* tiny-llada's mask */
      {
        g_assert_cmpint (g_array_index (start, gint32, i), ==, g_array_index (got, gint32, i));
        filled++;
      }
  /* " France" is at least one token, at offset 5. */
  g_assert_cmpint (filled, >=, 1);
  g_assert_cmpint (g_array_index (start, gint32, 5), !=, 508);
  destroy_window (win);
}

/* RND1 (shifted, entropy-ordered) reserves the answer's last position for
 * a pad token that no step commits: the view shows it from the start, and
 * ends with the answer exactly. */
static void
test_rnd1_model (void)
{
  g_autofree char *rnd1 = um_test_data_path ("tiny-rnd1");
  UmWindow *win = make_window ("settings-rnd1.json");
  UmSettings *settings = um_window_get_settings (win);
  UmGeneratePage *page = UM_GENERATE_PAGE (um_window_get_generate_page (win));
  UmDiffusionView *view = um_generate_page_get_view (page);
  const UmModelConfig *cfg;
  g_autoptr(GArray) shown = NULL;
  g_autoptr(GArray) start = NULL;
  GArray *got;

  load (win, rnd1);
  cfg = &um_engine_get_model (um_window_get_engine (win))->cfg;
  g_assert_cmpstr (um_window_get_family_label (win), ==, "RND1");
  assert_options (win, entropy_options, "Greedy Tokens", "Algorithm");

  um_generate_page_set_prompt (page, "What is free software?");
  g_object_set (settings, "gen-length", 12, "steps", 4, "greedy", TRUE, "chat-template", FALSE, NULL);
  g_assert_null (um_generate_page_get_problem (page));
  um_generate_page_generate (page);
  wait_for (not_running, page, 60);
  g_assert_null (um_generate_page_get_last_error (page));
  got = um_generate_page_get_last_ids (page);
  g_assert_cmpuint (got->len, ==, 12);
  g_assert_cmpint (g_array_index (got, gint32, 11), ==, cfg->pad_id);
  shown = um_diffusion_view_get_shown_ids (view);
  g_assert_cmpmem (shown->data, shown->len * 4, got->data, got->len * 4);

  um_diffusion_view_set_shown_step (view, -1);
  start = um_diffusion_view_get_shown_ids (view);
  for (guint i = 0; i < 11; i++)
    g_assert_cmpint (g_array_index (start, gint32, i), ==, cfg->mask_id);
  g_assert_cmpint (g_array_index (start, gint32, 11), ==, cfg->pad_id);
  destroy_window (win);
}

static gboolean
page_planned (gpointer page)
{
  return !um_optimizer_page_get_busy (page) && um_optimizer_page_get_plan (page) != NULL;
}

/* The Optimizer plans a mixture of experts: it names the family and how
 * much of the model one token uses, and its Standard plan holds every
 * expert's weights as stored (not a dense model's share). */
static void
test_moe_optimizer (void)
{
  g_autofree char *moe = um_test_data_path ("tiny-llada-moe");
  g_autoptr(UmModelEntry) entry = um_model_probe (moe);
  UmWindow *win = make_window ("settings-moe.json");
  UmOptimizerPage *page = UM_OPTIMIZER_PAGE (um_window_get_optimizer_page (win));
  const UmModelConfig *cfg;
  const UmPlan *plan;
  const char *summary;

  load (win, moe);
  cfg = &um_engine_get_model (um_window_get_engine (win))->cfg;
  g_assert_cmpuint (cfg->n_experts, ==, 8);
  g_assert_cmpuint (um_model_config_n_active_params (cfg), <, um_model_config_n_params (cfg));
  um_window_show_optimizer (win);
  wait_for (page_planned, page, 30);

  summary = um_optimizer_page_get_model_summary (page);
  g_assert_nonnull (summary);
  if (!g_str_has_prefix (summary, "LLaDA-MoE · ") || strstr (summary, "active per token (3 of 8 experts)") == NULL)
    g_error ("the optimizer's model line: %s", summary);

  plan = um_optimizer_page_get_plan (page);
  g_assert_cmpint (plan->mode, ==, UM_MEM_STANDARD);
  g_assert_true (entry->loadable);
  g_test_message ("plan weights %" G_GUINT64_FORMAT ", tensors %" G_GUINT64_FORMAT, plan->weight_bytes, entry->size);
  g_assert_cmpuint (plan->weight_bytes, ==, entry->size);
  destroy_window (win);
}

int
main (int argc, char **argv)
{
  int rc;

  tmp_dir = g_dir_make_tmp ("unmask-gui-XXXXXX", NULL);
  {
    g_autofree char *data_home = g_build_filename (tmp_dir, "data", NULL);
    /* The chooser's cache: set before any thread starts. */
    g_autofree char *hub = g_build_filename (tmp_dir, "hub", NULL);
    g_setenv ("XDG_DATA_HOME", data_home, TRUE);
    g_setenv ("HF_HUB_CACHE", hub, TRUE);
  }
  gtk_test_init (&argc, &argv, NULL);
  adw_init ();

  g_test_add_func ("/families/options-follow-family", test_options_follow_family);
  g_test_add_func ("/families/chooser-names-family", test_chooser_names_family);
  g_test_add_func ("/families/fixed-tokens-shown", test_fixed_tokens_shown);
  g_test_add_func ("/families/dream-model", test_dream_model);
  g_test_add_func ("/families/rnd1-model", test_rnd1_model);
  g_test_add_func ("/families/moe-optimizer", test_moe_optimizer);
  rc = g_test_run ();
  um_test_rmtree (tmp_dir);
  g_free (tmp_dir);
  return rc;
}

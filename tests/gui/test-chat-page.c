/* test-chat-page.c — the Chat page against the tiny fixture model: turns and
 * the chat.py token history, Regenerate, Stop within a step, saving and
 * reopening, deletion, errors shown inline, finalization while busy.
 *
 * Run under a display: dbus-run-session -- xvfb-run -a, with
 * GSK_RENDERER=cairo GTK_A11Y=test. UM_TEST_SCREENSHOT_DIR=DIR also saves
 * PNGs of the window mid-answer and after two turns. */
#include "config.h"

#include <adwaita.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <string.h>

#include "um-chat-page.h"
#include "um-chat-store.h"
#include "um-chat-template.h"
#include "um-local-generator.h"
#include "um-worker.h"

static char      *xdg_dir;
static UmEngine  *engine;        /* owned by generator */
static UmGenerator *generator;   /* what the window gives the page */
static JsonObject *generate_case;
static JsonParser *expected;

/* ---- helpers ---- */

static char *
data_path (const char *name)
{
  const char *dir = g_getenv ("UM_TEST_DATA");
  return g_build_filename (dir ? dir : "tests/data", name, NULL);
}

static void
rm_rf (const char *dir)
{
  g_autoptr(GDir) d = g_dir_open (dir, 0, NULL);
  const char *name;

  if (d == NULL)
    return;
  while ((name = g_dir_read_name (d)) != NULL)
    {
      g_autofree char *path = g_build_filename (dir, name, NULL);
      if (g_file_test (path, G_FILE_TEST_IS_DIR) && !g_file_test (path, G_FILE_TEST_IS_SYMLINK))
        rm_rf (path);
      else
        g_unlink (path);
    }
  g_rmdir (dir);
}

static char *
store_dir (void)
{
  return g_build_filename (xdg_dir, "unmask", "chats", NULL);
}

static void
clear_store (void)
{
  g_autofree char *dir = store_dir ();
  rm_rf (dir);
}

static gboolean
set_flag (gpointer data)
{
  *(gboolean *) data = TRUE;
  return G_SOURCE_REMOVE;
}

static void
iterate_for (guint ms)
{
  gboolean done = FALSE;
  g_timeout_add (ms, set_flag, &done);
  while (!done)
    g_main_context_iteration (NULL, TRUE);
}

static void
wait_not_busy (UmChatPage *page)
{
  gboolean timed_out = FALSE;
  guint id = g_timeout_add_seconds (120, set_flag, &timed_out);

  while (um_chat_page_get_busy (page) && !timed_out)
    g_main_context_iteration (NULL, TRUE);
  g_assert_false (timed_out);
  g_source_remove (id);
  while (g_main_context_pending (NULL))
    g_main_context_iteration (NULL, FALSE);
}

static void
set_params (UmChatPage *page, int gen_length, int steps, int block_length)
{
  UmGenParams p;
  um_gen_params_init (&p);
  p.gen_length = gen_length;
  p.steps = steps;
  p.block_length = block_length;
  um_chat_page_set_params (page, &p);
}

typedef struct {
  GtkWidget  *window;
  UmChatPage *page;
} Fixture;

static void
fixture_open (Fixture *f, UmGenerator *e)
{
  GtkWidget *box = gtk_box_new (GTK_ORIENTATION_VERTICAL, 0);
  GtkWidget *header = adw_header_bar_new ();
  GtkWidget *overlay = adw_toast_overlay_new ();

  f->window = adw_window_new ();
  gtk_window_set_default_size (GTK_WINDOW (f->window), 900, 720);
  gtk_window_set_title (GTK_WINDOW (f->window), "Unmask");
  f->page = UM_CHAT_PAGE (um_chat_page_new ());
  gtk_widget_set_vexpand (GTK_WIDGET (f->page), TRUE);
  adw_toast_overlay_set_child (ADW_TOAST_OVERLAY (overlay), GTK_WIDGET (f->page));
  gtk_box_append (GTK_BOX (box), header);
  gtk_box_append (GTK_BOX (box), overlay);
  adw_window_set_content (ADW_WINDOW (f->window), box);
  um_chat_page_set_generator (f->page, e);
  gtk_window_present (GTK_WINDOW (f->window));
  iterate_for (50);
}

/* Destroys the window and checks that the page is finalized. */
static void
fixture_close (Fixture *f)
{
  gpointer weak = f->page;

  g_object_add_weak_pointer (G_OBJECT (f->page), &weak);
  gtk_window_destroy (GTK_WINDOW (f->window));
  for (int i = 0; i < 200 && weak != NULL; i++)
    iterate_for (5);
  g_assert_null (weak);
}

static GtkWidget *
find_actionable (GtkWidget *root, const char *action)
{
  for (GtkWidget *c = gtk_widget_get_first_child (root); c != NULL; c = gtk_widget_get_next_sibling (c))
    {
      GtkWidget *found;
      if (GTK_IS_BUTTON (c) && g_strcmp0 (gtk_actionable_get_action_name (GTK_ACTIONABLE (c)), action) == 0
          && gtk_widget_get_ancestor (c, GTK_TYPE_POPOVER) == NULL && gtk_widget_get_visible (c))
        return c;
      if ((found = find_actionable (c, action)) != NULL)
        return found;
    }
  return NULL;
}

static GtkWidget *
find_type (GtkWidget *root, GType type)
{
  for (GtkWidget *c = gtk_widget_get_first_child (root); c != NULL; c = gtk_widget_get_next_sibling (c))
    {
      GtkWidget *found;
      if (G_TYPE_CHECK_INSTANCE_TYPE (c, type))
        return c;
      if ((found = find_type (c, type)) != NULL)
        return found;
    }
  return NULL;
}

/* The page's stack of "status" and "messages" (menus have stacks too). */
static GtkStack *
find_main_stack (GtkWidget *root)
{
  for (GtkWidget *c = gtk_widget_get_first_child (root); c != NULL; c = gtk_widget_get_next_sibling (c))
    {
      GtkStack *found;
      if (GTK_IS_STACK (c) && gtk_stack_get_child_by_name (GTK_STACK (c), "messages") != NULL)
        return GTK_STACK (c);
      if ((found = find_main_stack (c)) != NULL)
        return found;
    }
  return NULL;
}

/* Whether the button bound to @action is sensitive: that follows the
 * action's enabled state. */
static gboolean
action_enabled (UmChatPage *page, const char *action)
{
  GtkWidget *button = find_actionable (GTK_WIDGET (page), action);
  g_assert_nonnull (button);
  return gtk_widget_is_sensitive (button);
}

/* What the entry's key controller does with a key press. */
static gboolean
press_key (GtkWidget *view, guint keyval, GdkModifierType state)
{
  g_autoptr(GListModel) controllers = gtk_widget_observe_controllers (view);
  gboolean handled = FALSE;

  for (guint i = 0; i < g_list_model_get_n_items (controllers); i++)
    {
      g_autoptr(GtkEventController) c = g_list_model_get_item (controllers, i);
      if (GTK_IS_EVENT_CONTROLLER_KEY (c) && gtk_event_controller_get_propagation_phase (c) == GTK_PHASE_CAPTURE)
        {
          g_signal_emit_by_name (c, "key-pressed", keyval, 0, state, &handled);
          return handled;
        }
    }
  g_assert_not_reached ();
  return FALSE;
}

static GArray *
slice_ids (GArray *ids, guint from, guint to)
{
  GArray *out = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_assert_cmpuint (to, <=, ids->len);
  g_array_append_vals (out, &g_array_index (ids, gint32, from), to - from);
  return out;
}

static void
assert_ids_equal (GArray *a, GArray *b)
{
  g_assert_cmpuint (a->len, ==, b->len);
  g_assert_cmpmem (a->data, a->len * sizeof (gint32), b->data, b->len * sizeof (gint32));
}

/* The chat.py rule, computed here independently of the page. */
static GArray *
expected_prompt (GArray *history, const char *user_text)
{
  UmModel *m = um_engine_get_model (engine);
  UmChatMessage msg = { "user", user_text };
  g_autofree char *text = um_chat_template_render (&msg, 1, TRUE, um_tokenizer_id_to_token (m->tokenizer, m->cfg.bos_id));
  g_autoptr(GArray) turn = g_array_new (FALSE, FALSE, sizeof (gint32));
  GArray *out = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autoptr(GError) error = NULL;

  um_tokenizer_encode (m->tokenizer, text, -1, turn, &error);
  g_assert_no_error (error);
  if (history == NULL || history->len == 0)
    {
      g_array_append_vals (out, turn->data, turn->len);
      return out;
    }
  for (guint i = 0; i < history->len; i++)
    if (g_array_index (history, gint32, i) != m->cfg.eos_id)
      g_array_append_val (out, g_array_index (history, gint32, i));
  g_assert_cmpint (g_array_index (turn, gint32, 0), ==, m->cfg.bos_id);
  g_array_append_vals (out, &g_array_index (turn, gint32, 1), turn->len - 1);
  return out;
}

static void
save_screenshot (GtkWidget *window, const char *name)
{
  const char *dir = g_getenv ("UM_TEST_SCREENSHOT_DIR");
  g_autoptr(GdkPaintable) paintable = NULL;
  g_autoptr(GskRenderNode) node = NULL;
  g_autoptr(GdkTexture) texture = NULL;
  g_autofree char *path = NULL;
  GtkSnapshot *snapshot;
  int w, h;

  if (dir == NULL)
    return;
  iterate_for (150);   /* a frame or two: layout and paint the latest state */
  paintable = gtk_widget_paintable_new (window);
  w = gtk_widget_get_width (window);
  h = gtk_widget_get_height (window);
  snapshot = gtk_snapshot_new ();
  gdk_paintable_snapshot (paintable, snapshot, w, h);
  node = gtk_snapshot_free_to_node (snapshot);
  g_test_message ("screenshot %s: %dx%d, mapped %d", name, w, h, gtk_widget_get_mapped (window));
  g_assert_nonnull (node);
  texture = gsk_renderer_render_texture (gtk_native_get_renderer (GTK_NATIVE (window)), node,
                                         &GRAPHENE_RECT_INIT (0, 0, w, h));
  path = g_build_filename (dir, name, NULL);
  g_assert_true (gdk_texture_save_to_png (texture, path));
  g_test_message ("screenshot: %s", path);
}

/* Counts step events, and those the engine produced after Stop: an event
 * of a run sent at t_send was produced no earlier than t_send + elapsed (the
 * engine's clock starts after the send), so that is after Stop when it is
 * later than t_stop, however late the UI gets to it. */
typedef struct {
  int         n_steps;         /* events seen */
  int         stop_at;         /* call Stop when this many were seen; 0: never */
  int         after_stop;      /* events seen after Stop */
  int         late;            /* events surely produced after Stop */
  gint64      t_send, t_stop;
  gboolean    stopped;
} StepCounter;

static void
counter_stop (StepCounter *sc, UmChatPage *page)
{
  sc->stopped = TRUE;
  sc->t_stop = g_get_monotonic_time ();
  um_chat_page_stop (page);
}

static void
on_page_step (UmChatPage *page, int step, int n_steps, double elapsed, StepCounter *sc)
{
  if (sc->stopped)
    {
      sc->after_stop++;
      if (sc->t_send + (gint64) (elapsed * G_USEC_PER_SEC) > sc->t_stop)
        sc->late++;
    }
  sc->n_steps++;
  if (sc->stop_at > 0 && sc->n_steps == sc->stop_at && !sc->stopped)
    counter_stop (sc, page);
}

static UmChatConversation *
load_saved (UmChatPage *page)
{
  UmChatConversation *c = um_chat_page_get_conversation (page);
  g_autofree char *dir = store_dir ();
  g_autofree char *path = um_chat_store_path_for_id (dir, c->id);
  g_autoptr(GError) error = NULL;
  UmChatConversation *saved;

  g_assert_nonnull (path);
  saved = um_chat_store_load (path, &error);
  g_assert_no_error (error);
  return saved;
}

/* A user message long enough that each step of the tiny model takes a few
 * milliseconds, so a Stop lands while the engine is still running. */
static char *
long_message (void)
{
  GString *s = g_string_new ("Summarise this:");
  for (int i = 0; i < 80; i++)
    g_string_append (s, " free software respects the freedom of its users;");
  return g_string_free (s, FALSE);
}

/* ---- tests ---- */

static void
test_no_engine (void)
{
  Fixture f;

  fixture_open (&f, NULL);
  g_assert_false (um_chat_page_get_busy (f.page));
  g_assert_false (action_enabled (f.page, "chat.send"));
  g_assert_false (action_enabled (f.page, "chat.stop"));
  um_chat_page_send (f.page, "hello");
  g_assert_false (um_chat_page_get_busy (f.page));
  g_assert_cmpuint (um_chat_page_get_conversation (f.page)->messages->len, ==, 0);
  g_assert_nonnull (find_type (GTK_WIDGET (f.page), ADW_TYPE_STATUS_PAGE));
  fixture_close (&f);
}

static void
count_notify (GObject *object, GParamSpec *pspec, int *count)
{
  (*count)++;
}

static void
test_turns (void)
{
  Fixture f;
  UmModel *m = um_engine_get_model (engine);
  UmChatConversation *c;
  g_autoptr(GArray) fixture_prompt = NULL;
  g_autoptr(GArray) fixture_ids = NULL;
  g_autoptr(GArray) prompt1 = NULL, answer1 = NULL, history1 = NULL;
  g_autoptr(GArray) prompt2 = NULL, expected2 = NULL, history2 = NULL;
  g_autofree char *answer_text = NULL;
  g_autoptr(GError) error = NULL;
  JsonArray *arr;
  int gen = (int) json_object_get_int_member (generate_case, "gen_length");
  guint bos = 0, eos = 0;
  char *id;
  int busy_notified = 0;

  clear_store ();
  fixture_open (&f, generator);
  /* The fixture's generate case: the same ids must come out. */
  set_params (f.page, gen, (int) json_object_get_int_member (generate_case, "steps"),
              (int) json_object_get_int_member (generate_case, "block_length"));
  g_signal_connect (f.page, "notify::busy", G_CALLBACK (count_notify), &busy_notified);

  g_assert_false (action_enabled (f.page, "chat.send"));   /* empty entry */
  g_assert_false (action_enabled (f.page, "chat.stop"));

  um_chat_page_send (f.page, "What is free software?");
  g_assert_true (um_chat_page_get_busy (f.page));
  g_assert_cmpint (busy_notified, ==, 1);
  g_assert_true (action_enabled (f.page, "chat.stop"));
  g_assert_false (action_enabled (f.page, "chat.send"));
  wait_not_busy (f.page);
  g_assert_cmpint (busy_notified, ==, 2);
  g_assert_false (action_enabled (f.page, "chat.stop"));

  c = um_chat_page_get_conversation (f.page);
  g_assert_cmpuint (c->messages->len, ==, 2);
  arr = json_object_get_array_member (generate_case, "prompt_ids");
  fixture_prompt = g_array_new (FALSE, FALSE, sizeof (gint32));
  for (guint i = 0; i < json_array_get_length (arr); i++)
    {
      gint32 v = (gint32) json_array_get_int_element (arr, i);
      g_array_append_val (fixture_prompt, v);
    }
  arr = json_object_get_array_member (generate_case, "ids");
  fixture_ids = g_array_new (FALSE, FALSE, sizeof (gint32));
  for (guint i = 0; i < json_array_get_length (arr); i++)
    {
      gint32 v = (gint32) json_array_get_int_element (arr, i);
      g_array_append_val (fixture_ids, v);
    }

  g_assert_cmpuint (c->ids->len, ==, fixture_prompt->len + gen);
  prompt1 = slice_ids (c->ids, 0, c->ids->len - gen);
  answer1 = slice_ids (c->ids, c->ids->len - gen, c->ids->len);
  assert_ids_equal (prompt1, fixture_prompt);
  assert_ids_equal (answer1, fixture_ids);
  g_assert_cmpuint (c->prev_ids->len, ==, 0);
  answer_text = um_engine_decode_answer (engine, (const gint32 *) answer1->data, answer1->len, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (um_chat_page_get_message_text (f.page, 1), ==, answer_text);
  g_assert_cmpstr (((UmChatStoreMessage *) g_ptr_array_index (c->messages, 1))->content, ==, answer_text);
  g_assert_cmpstr (um_chat_page_get_message_text (f.page, 0), ==, "What is free software?");
  g_assert_cmpstr (c->title, ==, "What is free software?");
  history1 = slice_ids (c->ids, 0, c->ids->len);

  /* Saved after the turn. */
  {
    g_autoptr(UmChatConversation) saved = load_saved (f.page);
    g_assert_cmpuint (saved->messages->len, ==, 2);
    assert_ids_equal (saved->ids, c->ids);
    g_assert_cmpstr (saved->model_path, ==, m->path);
  }

  /* Second turn: previous prompt + answer without EOS, then the turn without BOS. */
  um_chat_page_send (f.page, "Tell me more.");
  wait_not_busy (f.page);
  c = um_chat_page_get_conversation (f.page);
  g_assert_cmpuint (c->messages->len, ==, 4);
  prompt2 = slice_ids (c->ids, 0, c->ids->len - gen);
  expected2 = expected_prompt (history1, "Tell me more.");
  assert_ids_equal (prompt2, expected2);
  for (guint i = 0; i < prompt2->len; i++)
    {
      bos += g_array_index (prompt2, gint32, i) == m->cfg.bos_id;
      eos += g_array_index (prompt2, gint32, i) == m->cfg.eos_id;
    }
  g_assert_cmpuint (bos, ==, 1);
  g_assert_cmpint (g_array_index (prompt2, gint32, 0), ==, m->cfg.bos_id);
  g_assert_cmpuint (eos, ==, 0);
  assert_ids_equal (c->prev_ids, history1);
  history2 = slice_ids (c->ids, 0, c->ids->len);
  save_screenshot (f.window, "chat-two-turns.png");

  /* Regenerate: greedy, so the same answer on the same history. */
  g_assert_true (action_enabled (f.page, "chat.regenerate"));
  gtk_widget_activate_action (GTK_WIDGET (f.page), "chat.regenerate", NULL);
  g_assert_true (um_chat_page_get_busy (f.page));
  g_assert_cmpuint (c->messages->len, ==, 3);   /* the old answer is gone */
  wait_not_busy (f.page);
  g_assert_cmpuint (c->messages->len, ==, 4);
  assert_ids_equal (c->ids, history2);
  assert_ids_equal (c->prev_ids, history1);
  g_assert_cmpuint (c->params.seed, ==, 1);      /* bumped for a different sample */

  /* Copy the last answer. */
  {
    GdkClipboard *clipboard = gtk_widget_get_clipboard (GTK_WIDGET (f.page));
    GdkContentProvider *content;
    g_auto(GValue) value = G_VALUE_INIT;
    const char *last = ((UmChatStoreMessage *) g_ptr_array_index (c->messages, 3))->content;

    gtk_widget_activate_action (GTK_WIDGET (f.page), "chat.copy-last", NULL);
    content = gdk_clipboard_get_content (clipboard);
    g_assert_nonnull (content);
    g_value_init (&value, G_TYPE_STRING);
    g_assert_true (gdk_content_provider_get_value (content, &value, NULL));
    g_assert_cmpstr (g_value_get_string (&value), ==, last);
  }

  /* Export as Markdown. */
  {
    g_autofree char *path = g_build_filename (xdg_dir, "export.md", NULL);
    g_autoptr(GFile) file = g_file_new_for_path (path);
    g_autofree char *md = NULL;
    g_autofree char *expected_md = um_chat_conversation_to_markdown (c);

    g_assert_true (um_chat_page_export_markdown (f.page, file, &error));
    g_assert_no_error (error);
    g_file_get_contents (path, &md, NULL, &error);
    g_assert_no_error (error);
    g_assert_cmpstr (md, ==, expected_md);
    g_assert_true (g_str_has_prefix (md, "# What is free software?\n\n**You:**\n\nWhat is free software?\n"));
    g_assert_nonnull (strstr (md, "**Assistant:**"));
  }

  /* New chat, then reopen the saved one and continue exactly from its ids. */
  id = g_strdup (c->id);
  gtk_widget_activate_action (GTK_WIDGET (f.page), "chat.new", NULL);
  c = um_chat_page_get_conversation (f.page);
  g_assert_cmpuint (c->messages->len, ==, 0);
  g_assert_null (c->id);
  g_assert_cmpuint (c->ids->len, ==, 0);
  g_assert_true (um_chat_page_open_conversation (f.page, id, &error));
  g_assert_no_error (error);
  c = um_chat_page_get_conversation (f.page);
  g_assert_cmpstr (c->id, ==, id);
  g_assert_cmpuint (c->messages->len, ==, 4);
  assert_ids_equal (c->ids, history2);
  assert_ids_equal (c->prev_ids, history1);
  g_assert_cmpstr (um_chat_page_get_message_text (f.page, 1), ==, answer_text);
  {
    g_autoptr(GArray) prompt3 = NULL, expected3 = NULL;
    um_chat_page_send (f.page, "Thanks!");
    wait_not_busy (f.page);
    g_assert_cmpuint (c->messages->len, ==, 6);
    prompt3 = slice_ids (c->ids, 0, c->ids->len - gen);
    expected3 = expected_prompt (history2, "Thanks!");
    assert_ids_equal (prompt3, expected3);
  }
  {
    g_autofree char *dir = store_dir ();
    g_autoptr(GPtrArray) list = um_chat_store_list (dir, &error);
    g_assert_no_error (error);
    g_assert_cmpuint (list->len, ==, 1);   /* the same file, updated */
    g_assert_cmpuint (((UmChatSummary *) g_ptr_array_index (list, 0))->n_messages, ==, 6);
  }
  g_free (id);
  fixture_close (&f);
}

static void
test_stop (void)
{
  Fixture f;
  UmChatConversation *c;
  StepCounter sc = { 0 };
  g_autofree char *text = long_message ();
  g_autoptr(GArray) history = NULL, prev = NULL;
  gulong handler;
  gint64 t0;

  clear_store ();
  fixture_open (&f, generator);
  set_params (f.page, 16, 16, 8);
  um_chat_page_send (f.page, "What is free software?");
  wait_not_busy (f.page);
  c = um_chat_page_get_conversation (f.page);
  history = slice_ids (c->ids, 0, c->ids->len);
  prev = slice_ids (c->prev_ids, 0, c->prev_ids->len);
  g_assert_cmpuint (history->len, >, 0);

  set_params (f.page, 64, 64, 32);
  {
    UmModel *m = um_engine_get_model (engine);
    g_autoptr(GArray) p = g_array_new (FALSE, FALSE, sizeof (gint32));
    um_tokenizer_encode (m->tokenizer, text, -1, p, NULL);
    g_test_message ("long message: %u tokens", p->len);
  }
  handler = g_signal_connect (f.page, "step", G_CALLBACK (on_page_step), &sc);

  /* Stop right away: the engine does at most one more step. */
  t0 = sc.t_send = g_get_monotonic_time ();
  um_chat_page_send (f.page, text);
  g_assert_true (um_chat_page_get_busy (f.page));
  counter_stop (&sc, f.page);
  g_assert_false (action_enabled (f.page, "chat.stop"));
  g_assert_true (um_chat_page_get_busy (f.page));   /* until the engine lets go */
  wait_not_busy (f.page);
  g_test_message ("stopped at once: %d step events after Stop (%d produced after it), %.1f ms",
                  sc.after_stop, sc.late, (g_get_monotonic_time () - t0) / 1000.0);
  g_assert_cmpint (sc.late, <=, 1);
  g_assert_cmpuint (c->messages->len, ==, 4);
  g_assert_true (((UmChatStoreMessage *) g_ptr_array_index (c->messages, 3))->stopped);
  assert_ids_equal (c->ids, history);
  assert_ids_equal (c->prev_ids, prev);

  /* Stop in the middle of the answer, from a step: what was shown stays. */
  memset (&sc, 0, sizeof sc);
  sc.stop_at = 3;
  t0 = sc.t_send = g_get_monotonic_time ();
  um_chat_page_send (f.page, text);
  wait_not_busy (f.page);
  g_test_message ("stopped mid-answer: %d step events in all, %d after Stop (%d produced after it), %.1f ms",
                  sc.n_steps, sc.after_stop, sc.late, (g_get_monotonic_time () - t0) / 1000.0);
  g_assert_true (sc.stopped);
  g_assert_cmpint (sc.late, <=, 1);
  g_assert_cmpint (sc.n_steps, <, 64);
  g_assert_cmpuint (c->messages->len, ==, 6);
  {
    UmChatStoreMessage *m = g_ptr_array_index (c->messages, 5);
    g_assert_true (m->stopped);
    g_assert_cmpstr (um_chat_page_get_message_text (f.page, 5), ==, m->content);
  }
  assert_ids_equal (c->ids, history);
  assert_ids_equal (c->prev_ids, prev);
  {
    g_autoptr(UmChatConversation) saved = load_saved (f.page);
    g_assert_cmpuint (saved->messages->len, ==, 6);
    g_assert_true (((UmChatStoreMessage *) g_ptr_array_index (saved->messages, 5))->stopped);
    assert_ids_equal (saved->ids, history);
  }
  g_signal_handler_disconnect (f.page, handler);

  /* Regenerate after a stopped answer builds on the same history. */
  set_params (f.page, 16, 16, 8);
  um_chat_page_regenerate (f.page);
  wait_not_busy (f.page);
  g_assert_cmpuint (c->messages->len, ==, 6);
  g_assert_false (((UmChatStoreMessage *) g_ptr_array_index (c->messages, 5))->stopped);
  assert_ids_equal (c->prev_ids, history);
  {
    g_autoptr(GArray) prompt = slice_ids (c->ids, 0, c->ids->len - 16);
    g_autoptr(GArray) want = expected_prompt (history, text);
    assert_ids_equal (prompt, want);
  }

  /* The next turn continues from the last complete one. */
  {
    g_autoptr(GArray) before = slice_ids (c->ids, 0, c->ids->len);
    g_autoptr(GArray) prompt = NULL, want = NULL;
    um_chat_page_send (f.page, "Short, please.");
    wait_not_busy (f.page);
    prompt = slice_ids (c->ids, 0, c->ids->len - 16);
    want = expected_prompt (before, "Short, please.");
    assert_ids_equal (prompt, want);
  }

  /* The long messages overflow the view, which follows the newest one. */
  iterate_for (100);
  {
    GtkWidget *scroller = gtk_stack_get_child_by_name (find_main_stack (GTK_WIDGET (f.page)), "messages");
    GtkAdjustment *adj = gtk_scrolled_window_get_vadjustment (GTK_SCROLLED_WINDOW (scroller));
    g_assert_cmpfloat (gtk_adjustment_get_upper (adj), >, gtk_adjustment_get_page_size (adj));
    g_assert_cmpfloat (gtk_adjustment_get_value (adj) + gtk_adjustment_get_page_size (adj), >=,
                       gtk_adjustment_get_upper (adj) - 1.0);
  }

  /* Escape in the entry stops too. */
  set_params (f.page, 64, 64, 32);
  um_chat_page_send (f.page, text);
  g_assert_true (press_key (find_type (GTK_WIDGET (f.page), GTK_TYPE_TEXT_VIEW), GDK_KEY_Escape, 0));
  wait_not_busy (f.page);
  g_assert_true (((UmChatStoreMessage *) g_ptr_array_index (c->messages, c->messages->len - 1))->stopped);
  fixture_close (&f);
}

/* A history the tokenizer here did not make (a conversation saved with
 * another model; one held with a server) goes as messages, rendered by the
 * generator with this model's template; the page keeps no ids of it. */
static void
test_history_as_messages (void)
{
  Fixture f;
  UmChatConversation *c;

  clear_store ();
  fixture_open (&f, generator);
  set_params (f.page, 16, 16, 8);
  um_chat_page_send (f.page, "What is free software?");
  wait_not_busy (f.page);
  c = um_chat_page_get_conversation (f.page);
  g_assert_cmpuint (c->ids->len, >, 16);

  g_free (c->model_path);
  c->model_path = g_strdup ("/elsewhere/another-model");
  um_chat_page_send (f.page, "And open source?");
  wait_not_busy (f.page);
  g_assert_cmpuint (c->messages->len, ==, 4);
  g_assert_false (((UmChatStoreMessage *) g_ptr_array_index (c->messages, 3))->stopped);
  g_assert_cmpuint (c->ids->len, ==, 0);
  g_assert_cmpuint (c->prev_ids->len, ==, 0);

  /* The next turn and Regenerate build on the messages too. */
  um_chat_page_send (f.page, "Thanks.");
  wait_not_busy (f.page);
  g_assert_cmpuint (c->messages->len, ==, 6);
  um_chat_page_regenerate (f.page);
  wait_not_busy (f.page);
  g_assert_cmpuint (c->messages->len, ==, 6);
  g_assert_cmpuint (c->ids->len, ==, 0);
  fixture_close (&f);
}

static void
on_other_done (GObject *source, GAsyncResult *result, gpointer data)
{
  g_autoptr(UmGeneratorResult) r = um_generator_generate_finish (generator, result, NULL);
  *(gboolean *) data = TRUE;
}

static void
test_errors (void)
{
  Fixture f;
  UmChatConversation *c;
  UmGeneratorRequest req;
  g_autoptr(GCancellable) cancellable = g_cancellable_new ();
  gboolean other_done = FALSE;
  g_autofree char *text = long_message ();
  g_autoptr(GArray) long_prompt = g_array_new (FALSE, FALSE, sizeof (gint32));
  UmModel *m = um_engine_get_model (engine);

  clear_store ();
  fixture_open (&f, generator);
  c = um_chat_page_get_conversation (f.page);

  /* Impossible parameters: nothing is sent, the problem is shown inline. */
  set_params (f.page, 30, 30, 8);
  um_chat_page_send (f.page, "hello");
  g_assert_false (um_chat_page_get_busy (f.page));
  g_assert_cmpuint (c->messages->len, ==, 0);
  g_assert_cmpstr (gtk_stack_get_visible_child_name (find_main_stack (GTK_WIDGET (f.page))), ==, "messages");

  /* The engine busy with another generation (the Generate page, a client
   * of the server) and no room to wait: the user turn stays, the error is
   * inline, and Retry works once it is free. */
  um_tokenizer_encode (m->tokenizer, text, -1, long_prompt, NULL);
  um_generator_set_max_waiting (generator, 0);
  um_generator_request_init (&req);
  req.params.gen_length = 64;
  req.params.steps = 64;
  req.params.block_length = 64;
  req.prompt_ids = (const gint32 *) long_prompt->data;
  req.n_prompt_ids = long_prompt->len;
  um_generator_generate_async (generator, &req, NULL, NULL, cancellable, on_other_done, &other_done);
  iterate_for (5);
  set_params (f.page, 16, 16, 8);
  um_chat_page_send (f.page, "hello");
  wait_not_busy (f.page);
  g_assert_cmpuint (c->messages->len, ==, 1);
  g_assert_cmpuint (c->ids->len, ==, 0);
  um_generator_set_max_waiting (generator, -1);
  g_cancellable_cancel (cancellable);
  while (!other_done)
    g_main_context_iteration (NULL, TRUE);
  g_assert_true (action_enabled (f.page, "chat.regenerate"));
  um_chat_page_regenerate (f.page);
  wait_not_busy (f.page);
  g_assert_cmpuint (c->messages->len, ==, 2);
  g_assert_cmpuint (c->ids->len, >, 16);
  fixture_close (&f);
}

static void
test_delete_and_broken (void)
{
  Fixture f;
  g_autofree char *dir = store_dir ();
  g_autofree char *broken = g_build_filename (dir, "broken.json", NULL);
  g_autofree char *path = NULL;
  g_autofree char *contents = NULL;
  g_autoptr(GError) error = NULL;
  GtkWidget *dialog = NULL;
  GtkWidget *menu_button;
  GListModel *toplevels;

  clear_store ();
  fixture_open (&f, generator);
  set_params (f.page, 16, 16, 8);
  /* Typed in the entry: Shift+Return is a newline, Return sends. */
  {
    GtkWidget *view = find_type (GTK_WIDGET (f.page), GTK_TYPE_TEXT_VIEW);
    GtkTextBuffer *buffer = gtk_text_view_get_buffer (GTK_TEXT_VIEW (view));
    GtkTextIter start, end;
    g_autofree char *left = NULL;

    g_assert_false (action_enabled (f.page, "chat.send"));
    gtk_text_buffer_set_text (buffer, "  \n ", -1);
    g_assert_false (action_enabled (f.page, "chat.send"));   /* blank */
    gtk_text_buffer_set_text (buffer, "Delete me", -1);
    g_assert_true (action_enabled (f.page, "chat.send"));
    g_assert_false (press_key (view, GDK_KEY_Return, GDK_SHIFT_MASK));
    g_assert_false (um_chat_page_get_busy (f.page));
    g_assert_true (press_key (view, GDK_KEY_Return, 0));
    g_assert_true (um_chat_page_get_busy (f.page));
    gtk_text_buffer_get_bounds (buffer, &start, &end);
    left = gtk_text_buffer_get_text (buffer, &start, &end, FALSE);
    g_assert_cmpstr (left, ==, "");
  }
  wait_not_busy (f.page);
  g_assert_cmpstr (um_chat_page_get_message_text (f.page, 0), ==, "Delete me");
  path = um_chat_store_path_for_id (dir, um_chat_page_get_conversation (f.page)->id);
  g_assert_true (g_file_test (path, G_FILE_TEST_EXISTS));
  g_file_set_contents (broken, "{ broken", -1, &error);
  g_assert_no_error (error);

  /* The list shows both; the broken file stays as it is. */
  menu_button = find_type (GTK_WIDGET (f.page), GTK_TYPE_MENU_BUTTON);
  gtk_menu_button_popup (GTK_MENU_BUTTON (menu_button));
  iterate_for (50);
  {
    GtkPopover *popover = gtk_menu_button_get_popover (GTK_MENU_BUTTON (menu_button));
    GtkWidget *list = find_type (GTK_WIDGET (popover), GTK_TYPE_LIST_BOX);
    int n = 0;
    for (GtkWidget *r = gtk_widget_get_first_child (list); r; r = gtk_widget_get_next_sibling (r))
      n += GTK_IS_LIST_BOX_ROW (r);
    g_assert_cmpint (n, ==, 2);
    gtk_menu_button_popdown (GTK_MENU_BUTTON (menu_button));
  }

  /* Delete asks first. */
  gtk_widget_activate_action (GTK_WIDGET (f.page), "chat.delete", NULL);
  iterate_for (20);
  toplevels = gtk_window_get_toplevels ();
  for (guint i = 0; i < g_list_model_get_n_items (toplevels); i++)
    {
      g_autoptr(GObject) w = g_list_model_get_item (toplevels, i);
      if (ADW_IS_MESSAGE_DIALOG (w) && gtk_widget_get_visible (GTK_WIDGET (w)))
        dialog = GTK_WIDGET (w);
    }
  g_assert_nonnull (dialog);
  g_assert_true (g_file_test (path, G_FILE_TEST_EXISTS));
  adw_message_dialog_response (ADW_MESSAGE_DIALOG (dialog), "delete");
  iterate_for (20);
  g_assert_false (g_file_test (path, G_FILE_TEST_EXISTS));
  g_assert_cmpuint (um_chat_page_get_conversation (f.page)->messages->len, ==, 0);
  g_file_get_contents (broken, &contents, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (contents, ==, "{ broken");
  fixture_close (&f);
}

/* The window goes away mid-answer: the run is cancelled, its callback copes
 * with the page gone, and the stopped turn is saved. */
static void
test_dispose_while_busy (void)
{
  Fixture f;
  g_autofree char *text = long_message ();
  g_autofree char *dir = store_dir ();
  g_autoptr(GPtrArray) list = NULL;
  g_autoptr(GError) error = NULL;
  UmGenRequest req;
  gint32 one = 1;
  gboolean free_again = FALSE;

  clear_store ();
  fixture_open (&f, generator);
  set_params (f.page, 64, 64, 32);
  um_chat_page_send (f.page, text);
  iterate_for (5);
  g_assert_true (um_chat_page_get_busy (f.page));
  um_chat_page_set_generator (f.page, NULL);   /* what the window does at dispose */
  fixture_close (&f);

  /* The engine is free again once the worker has finished. */
  um_gen_request_init (&req);
  req.params.gen_length = 8;
  req.params.steps = 8;
  req.params.block_length = 8;
  req.prompt_ids = &one;
  req.n_prompt_ids = 1;
  for (int i = 0; i < 2000 && !free_again; i++)
    {
      g_autoptr(UmGenResult) r = NULL;
      g_clear_error (&error);
      iterate_for (2);
      r = um_engine_generate (engine, &req, NULL, NULL, NULL, &error);
      free_again = r != NULL;
    }
  g_assert_true (free_again);

  list = um_chat_store_list (dir, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (list->len, ==, 1);
  {
    UmChatSummary *s = g_ptr_array_index (list, 0);
    g_autoptr(UmChatConversation) saved = um_chat_store_load (s->path, &error);
    g_assert_no_error (error);
    g_assert_cmpuint (saved->messages->len, ==, 2);
    g_assert_true (((UmChatStoreMessage *) g_ptr_array_index (saved->messages, 1))->stopped);
    g_assert_cmpuint (saved->ids->len, ==, 0);
  }
}

/* Screenshots only: the window mid-answer. */
static void
on_screenshot_step (UmChatPage *page, int step, int n_steps, double elapsed, gboolean *reached)
{
  if (step >= n_steps / 3)
    *reached = TRUE;
}

static void
test_screenshot_mid_answer (void)
{
  Fixture f;
  gboolean reached = FALSE;

  if (g_getenv ("UM_TEST_SCREENSHOT_DIR") == NULL)
    {
      g_test_skip ("UM_TEST_SCREENSHOT_DIR is not set");
      return;
    }
  clear_store ();
  fixture_open (&f, generator);
  save_screenshot (f.window, "chat-empty.png");
  set_params (f.page, 16, 16, 8);
  um_chat_page_send (f.page, "What is free software?");
  wait_not_busy (f.page);
  /* Long enough that the steps are slow and the view catches up. */
  set_params (f.page, 768, 768, 96);
  g_signal_connect (f.page, "step", G_CALLBACK (on_screenshot_step), &reached);
  um_chat_page_send (f.page, "Explain how diffusion language models write an answer, in detail.");
  while (!reached && um_chat_page_get_busy (f.page))
    g_main_context_iteration (NULL, TRUE);
  iterate_for (100);
  save_screenshot (f.window, "chat-mid-answer.png");
  um_chat_page_stop (f.page);
  wait_not_busy (f.page);
  iterate_for (100);
  save_screenshot (f.window, "chat-stopped.png");
  adw_style_manager_set_color_scheme (adw_style_manager_get_default (), ADW_COLOR_SCHEME_FORCE_DARK);
  iterate_for (200);
  save_screenshot (f.window, "chat-stopped-dark.png");
  adw_style_manager_set_color_scheme (adw_style_manager_get_default (), ADW_COLOR_SCHEME_DEFAULT);
  /* An inline error and the list of saved conversations. */
  set_params (f.page, 30, 30, 8);
  um_chat_page_send (f.page, "This cannot be answered with these parameters.");
  {
    GtkMenuButton *chats = GTK_MENU_BUTTON (find_type (GTK_WIDGET (f.page), GTK_TYPE_MENU_BUTTON));
    gtk_menu_button_popup (chats);
    save_screenshot (f.window, "chat-list-and-error.png");
    save_screenshot (GTK_WIDGET (gtk_menu_button_get_popover (chats)), "chat-list-popover.png");
  }
  fixture_close (&f);
}

int
main (int argc, char **argv)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *model_path = NULL;
  g_autofree char *expected_path = NULL;
  int ret;

  /* Before anything reads it: g_get_user_data_dir () caches. */
  xdg_dir = g_dir_make_tmp ("um-chat-page-XXXXXX", &error);
  g_assert_no_error (error);
  g_setenv ("XDG_DATA_HOME", xdg_dir, TRUE);
  g_setenv ("GSK_RENDERER", "cairo", FALSE);
  g_setenv ("GTK_A11Y", "test", FALSE);

  gtk_test_init (&argc, &argv, NULL);
  adw_init ();
  /* What AdwApplication does for the app: the bubbles' style. */
  {
    g_autoptr(GtkCssProvider) css = gtk_css_provider_new ();
    gtk_css_provider_load_from_resource (css, "/io/github/unmask/Unmask/style.css");
    gtk_style_context_add_provider_for_display (gdk_display_get_default (), GTK_STYLE_PROVIDER (css),
                                                GTK_STYLE_PROVIDER_PRIORITY_APPLICATION);
  }
  g_assert_cmpstr (g_get_user_data_dir (), ==, xdg_dir);

  model_path = data_path ("tiny-llada");
  engine = um_engine_load (model_path, NULL, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  generator = um_local_generator_new (engine);
  expected_path = data_path ("tiny-llada.expected.json");
  expected = json_parser_new ();
  json_parser_load_from_file (expected, expected_path, &error);
  g_assert_no_error (error);
  generate_case = json_array_get_object_element (
    json_object_get_array_member (json_node_get_object (json_parser_get_root (expected)), "generate"), 0);

  g_test_add_func ("/chat-page/no-engine", test_no_engine);
  g_test_add_func ("/chat-page/turns", test_turns);
  g_test_add_func ("/chat-page/stop", test_stop);
  g_test_add_func ("/chat-page/errors", test_errors);
  g_test_add_func ("/chat-page/history-as-messages", test_history_as_messages);
  g_test_add_func ("/chat-page/delete-and-broken", test_delete_and_broken);
  g_test_add_func ("/chat-page/dispose-while-busy", test_dispose_while_busy);
  g_test_add_func ("/chat-page/screenshot-mid-answer", test_screenshot_mid_answer);
  ret = g_test_run ();

  g_object_unref (generator);
  g_object_unref (expected);
  rm_rf (xdg_dir);
  g_free (xdg_dir);
  return ret;
}

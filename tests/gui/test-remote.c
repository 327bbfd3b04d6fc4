/* test-remote.c — the app as a client and as a server, under Xvfb, on
 * 127.0.0.1 only:
 *   - against `unmask-cli serve --port 0` on the demo model: Connect to a
 *     Server… lists the model, Generate runs on it with the live view fed
 *     step by step, Stop cancels the server's run (the next request runs at
 *     once), and a server killed mid-run is an error shown in the window,
 *     which keeps working;
 *   - Preferences → Serve this model: the demo model loaded here is served
 *     (/health, a completion), the header bar says where, and switching it
 *     off closes the port;
 *   - against llama.cpp's llama-server (UM_LLAMA_SERVER; skipped without):
 *     Connect to a Server… and Generate, then the server killed.
 * UNMASK_CLI names the unmask-cli to start (tests/meson.build sets it). */
#include "config.h"

#include <adwaita.h>
#include <libsoup/soup.h>
#include <signal.h>
#include <sys/prctl.h>
#include <string.h>

#include "um-connect-dialog.h"
#include "um-generate-page.h"
#include "um-memory-page.h"
#include "um-optimizer-page.h"
#include "um-preferences.h"
#include "um-settings.h"
#include "um-test-llama.h"
#include "um-test-util.h"
#include "um-window.h"

static char        *tmp_dir;
static GSubprocess *server;
static char        *server_url;     /* http://127.0.0.1:PORT/ */

/* ---- helpers ---- */

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
set_flag (gpointer data)
{
  *(gboolean *) data = TRUE;
  return G_SOURCE_REMOVE;
}

static gboolean
is_true (gpointer data)
{
  return *(gboolean *) data;
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
mapped (gpointer win)
{
  return gtk_widget_get_mapped (win);
}

static UmWindow *
make_window (const char *settings_name)
{
  g_autofree char *settings_path = g_build_filename (tmp_dir, settings_name, NULL);
  g_autoptr(UmSettings) settings = um_settings_new (settings_path);
  UmWindow *win = um_window_new (NULL, settings);

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

/* With UM_SCREENSHOT_DIR set, a PNG of @widget (after drawing settles). */
static void
save_screenshot (GtkWidget *widget, const char *name)
{
  const char *dir = g_getenv ("UM_SCREENSHOT_DIR");
  g_autoptr(GdkPaintable) paintable = NULL;
  g_autoptr(GtkSnapshot) snapshot = NULL;
  g_autoptr(GskRenderNode) node = NULL;
  g_autoptr(GdkTexture) texture = NULL;
  g_autofree char *path = NULL;
  gint64 end = g_get_monotonic_time () + 800 * 1000;
  int w, h;

  if (dir == NULL)
    return;
  while (g_get_monotonic_time () < end)
    g_main_context_iteration (NULL, FALSE);
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
set_params (UmWindow *win, int gen, int steps)
{
  g_object_set (um_window_get_settings (win), "gen-length", gen, "steps", steps, "block-length", gen,
                "chat-template", FALSE, "temperature", 0.0, "cfg-scale", 0.0, "fast-decoding", FALSE, NULL);
}

typedef struct {
  GDataInputStream *in;
  char             *line;
  gboolean          done;
} LineRead;

static void
on_line (GObject *source, GAsyncResult *result, gpointer data)
{
  LineRead *r = data;
  r->line = g_data_input_stream_read_line_finish_utf8 (G_DATA_INPUT_STREAM (source), result, NULL, NULL);
  r->done = TRUE;
}

static void
die_with_parent (gpointer data)
{
  prctl (PR_SET_PDEATHSIG, SIGKILL);
}

/* Starts `unmask-cli serve --port 0 --model <demo>` and reads the address
 * it prints ("Listening on http://127.0.0.1:PORT/"). */
static void
start_server (void)
{
  const char *cli = g_getenv ("UNMASK_CLI");
  g_autofree char *model = um_window_find_demo_model ();
  g_autoptr(GError) error = NULL;
  g_autoptr(GDataInputStream) in = NULL;
  g_autoptr(GSubprocessLauncher) launcher = NULL;

  g_assert_nonnull (cli);
  g_assert_nonnull (model);
  launcher = g_subprocess_launcher_new (G_SUBPROCESS_FLAGS_STDOUT_PIPE);
  /* Never outlives the test, even one that aborts. */
  g_subprocess_launcher_set_child_setup (launcher, die_with_parent, NULL, NULL);
  server = g_subprocess_launcher_spawn (launcher, &error, cli, "serve", "--port", "0", "--model", model, NULL);
  g_assert_no_error (error);
  in = g_data_input_stream_new (g_subprocess_get_stdout_pipe (server));
  while (server_url == NULL)
    {
      LineRead r = { in, NULL, FALSE };
      guint timeout;
      gboolean late = FALSE;

      timeout = g_timeout_add_seconds (60, set_flag, &late);
      g_data_input_stream_read_line_async (in, G_PRIORITY_DEFAULT, NULL, on_line, &r);
      while (!r.done)
        {
          g_assert_false (late);
          g_main_context_iteration (NULL, TRUE);
        }
      g_source_remove (timeout);
      g_assert_nonnull (r.line);   /* the server exited without serving */
      g_test_message ("server: %s", r.line);
      if (g_str_has_prefix (r.line, "Listening on http://127.0.0.1:"))
        server_url = g_strdup (r.line + strlen ("Listening on "));
      g_free (r.line);
    }
}

static void
kill_server (void)
{
  if (server == NULL)
    return;
  g_subprocess_force_exit (server);
  g_subprocess_wait (server, NULL, NULL);
  g_clear_object (&server);
}

static GtkWidget *
find_toplevel (GType type)
{
  GListModel *toplevels = gtk_window_get_toplevels ();

  for (guint i = 0; i < g_list_model_get_n_items (toplevels); i++)
    {
      g_autoptr(GObject) w = g_list_model_get_item (toplevels, i);
      if (G_TYPE_CHECK_INSTANCE_TYPE (w, type))
        return GTK_WIDGET (w);
    }
  return NULL;
}

static gboolean
dialog_idle (gpointer dialog)
{
  return !um_connect_dialog_get_busy (dialog);
}

/* What the user does: Connect to a Server…, the address, List, Connect. */
static void
connect_window (UmWindow *win, const char *url)
{
  UmConnectDialog *dialog;
  const UmGeneratorInfo *info;

  gtk_widget_activate_action (GTK_WIDGET (win), "win.connect-server", NULL);
  dialog = UM_CONNECT_DIALOG (find_toplevel (UM_TYPE_CONNECT_DIALOG));
  g_assert_nonnull (dialog);
  um_connect_dialog_set_url (dialog, url);
  um_connect_dialog_list_models (dialog);
  wait_for (dialog_idle, dialog, 30);
  g_test_message ("dialog: %s", um_connect_dialog_get_status (dialog) ? um_connect_dialog_get_status (dialog) : "-");
  g_assert_cmpuint (um_connect_dialog_get_n_models (dialog), ==, 1);
  save_screenshot (GTK_WIDGET (dialog), "connect-dialog.png");
  um_connect_dialog_connect (dialog);
  g_assert_null (find_toplevel (UM_TYPE_CONNECT_DIALOG));
  wait_for (not_loading, win, 30);
  g_assert_null (um_window_get_error_message (win));
  g_assert_nonnull (um_window_get_generator (win));
  info = um_generator_get_info (um_window_get_generator (win));
  g_assert_true (info->remote);
  g_assert_null (um_window_get_engine (win));
}

typedef struct {
  UmWindow *win;
  int       notifies;
  int       stop_at;        /* the n-th notification stops (0: never) */
  gboolean  kill;           /* … by killing the server instead */
  gboolean  acted;
} Watch;

static void
on_steps_recorded (UmDiffusionView *view, GParamSpec *pspec, Watch *w)
{
  /* A new run empties the view first. */
  if (um_diffusion_view_get_n_steps_recorded (view) == 0)
    return;
  w->notifies++;
  if (w->stop_at > 0 && w->notifies == w->stop_at && !w->acted)
    {
      w->acted = TRUE;
      if (w->kill)
        kill_server ();
      else
        gtk_widget_activate_action (GTK_WIDGET (w->win), "win.stop", NULL);
    }
}

/* Runs Generate; returns the steps recorded by the view. */
static int
generate (UmWindow *win, Watch *w, int timeout_s)
{
  UmGeneratePage *page = UM_GENERATE_PAGE (um_window_get_generate_page (win));
  UmDiffusionView *view = um_generate_page_get_view (page);
  gulong id = g_signal_connect (view, "notify::n-steps-recorded", G_CALLBACK (on_steps_recorded), w);

  gtk_widget_activate_action (GTK_WIDGET (win), "win.generate", NULL);
  g_assert_true (um_generate_page_get_running (page));
  wait_for (not_running, page, timeout_s);
  g_signal_handler_disconnect (view, id);
  return um_diffusion_view_get_n_steps_recorded (view);
}

/* ---- the app as a client ---- */

static void
test_client (void)
{
  UmWindow *win = make_window ("client.json");
  UmGeneratePage *page = UM_GENERATE_PAGE (um_window_get_generate_page (win));
  g_autofree char *base = g_strconcat (server_url, "v1", NULL);
  Watch w = { win, 0, 0, FALSE, FALSE };
  gint64 start;
  int steps;

  connect_window (win, base);
  /* The header says where the model runs; Memory and Optimizer that they
   * describe this computer. */
  g_assert_nonnull (strstr (um_window_get_subtitle (win), "127.0.0.1"));
  g_assert_nonnull (um_window_get_remote_label (win));
  g_assert_true (g_str_has_prefix (server_url + strlen ("http://"), um_window_get_remote_label (win)));
  g_assert_nonnull (um_memory_page_get_remote_note (UM_MEMORY_PAGE (um_window_get_memory_page (win))));
  g_assert_nonnull (um_optimizer_page_get_remote_note (UM_OPTIMIZER_PAGE (um_window_get_optimizer_page (win))));

  /* Live: every step reaches the view as it happens. */
  um_generate_page_set_prompt (page, "The");
  set_params (win, 32, 32);
  steps = generate (win, &w, 60);
  g_assert_null (um_generate_page_get_last_error (page));
  g_assert_cmpint (steps, ==, 32);
  g_assert_cmpint (w.notifies, >=, 2);
  g_assert_cmpuint (um_generate_page_get_last_ids (page)->len, ==, 32);
  save_screenshot (GTK_WIDGET (win), "remote-generate.png");
  {
    g_autoptr(GArray) shown = um_diffusion_view_get_shown_ids (um_generate_page_get_view (page));
    g_assert_cmpmem (shown->data, shown->len * sizeof (gint32), um_generate_page_get_last_ids (page)->data,
                     um_generate_page_get_last_ids (page)->len * sizeof (gint32));
  }

  /* Stop at the first step: the run ends cancelled long before its end. */
  set_params (win, 1024, 1024);
  w = (Watch) { win, 0, 1, FALSE, FALSE };
  steps = generate (win, &w, 60);
  g_assert_true (w.acted);
  g_assert_error ((GError *) um_generate_page_get_last_error (page), G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_assert_cmpint (steps, <, 1024);
  g_assert_null (um_window_get_error_message (win));

  /* The server let go of the stopped run: the next one starts at once. */
  set_params (win, 16, 16);
  w = (Watch) { win, 0, 0, FALSE, FALSE };
  start = g_get_monotonic_time ();
  steps = generate (win, &w, 60);
  g_assert_null (um_generate_page_get_last_error (page));
  g_assert_cmpint (steps, ==, 16);
  g_test_message ("after Stop, a 16-step run took %.2f s", (g_get_monotonic_time () - start) / 1e6);

  /* The server killed mid-run: an error in the window, never a hang. */
  set_params (win, 1024, 1024);
  w = (Watch) { win, 0, 2, TRUE, FALSE };
  start = g_get_monotonic_time ();
  generate (win, &w, 30);
  g_assert_true (w.acted);
  g_test_message ("server killed: the run ended %.2f s later: %s", (g_get_monotonic_time () - start) / 1e6,
                  um_window_get_error_message (win));
  g_assert_nonnull (um_generate_page_get_last_error (page));
  g_assert_false (g_error_matches (um_generate_page_get_last_error (page), G_IO_ERROR, G_IO_ERROR_CANCELLED));
  g_assert_nonnull (um_window_get_error_message (win));

  /* Still responsive: another try fails quickly, and the app goes on. */
  um_window_show_error (win, NULL);
  set_params (win, 16, 16);
  w = (Watch) { win, 0, 0, FALSE, FALSE };
  generate (win, &w, 30);
  g_assert_nonnull (um_generate_page_get_last_error (page));
  g_assert_nonnull (um_window_get_error_message (win));
  g_assert_true (gtk_widget_get_sensitive (GTK_WIDGET (win)));
  destroy_window (win);
}

/* Connect to a Server… against llama.cpp's llama-server (a server nobody
 * here wrote) on a small random llama GGUF: listed, connected, Generate
 * fills the view piece by piece, and the text is llama-server's. */
static void
test_llama_server (void)
{
  UmTestLlamaServer ls;
  UmWindow *win;
  UmGeneratePage *page;
  g_autofree char *base = NULL;
  Watch w;
  int steps;

  if (um_test_llama_server_path () == NULL)
    {
      g_test_skip (UM_TEST_LLAMA_SERVER_HOWTO);
      return;
    }
  um_test_llama_server_start (&ls, 1024);
  base = g_strconcat (ls.url, "/v1", NULL);
  win = make_window ("llama.json");
  page = UM_GENERATE_PAGE (um_window_get_generate_page (win));
  connect_window (win, base);
  g_assert_nonnull (strstr (um_window_get_subtitle (win), "127.0.0.1"));
  um_generate_page_set_prompt (page, "Once upon a time");
  set_params (win, 16, 16);
  w = (Watch) { win, 0, 0, FALSE, FALSE };
  steps = generate (win, &w, 60);
  g_test_message ("llama-server: %d pieces, %d view updates", steps, w.notifies);
  g_assert_null (um_generate_page_get_last_error (page));
  g_assert_cmpint (steps, >=, 1);
  g_assert_cmpint (steps, <=, 16 * 4);
  g_assert_cmpint (w.notifies, >=, 1);
  save_screenshot (GTK_WIDGET (win), "llama-server-generate.png");

  /* Killed mid-answer: an error in the window, which goes on. */
  set_params (win, 1000, 1000);
  um_test_llama_server_kill (&ls);
  w = (Watch) { win, 0, 0, FALSE, FALSE };
  generate (win, &w, 30);
  g_assert_nonnull (um_generate_page_get_last_error (page));
  g_assert_nonnull (um_window_get_error_message (win));
  g_assert_true (gtk_widget_get_sensitive (GTK_WIDGET (win)));
  destroy_window (win);
  um_test_llama_server_stop (&ls);
}

/* ---- the app as a server ---- */

static gboolean
serving (gpointer win)
{
  return um_window_get_serve_uris (win) != NULL;
}

static gboolean
not_serving (gpointer win)
{
  return um_window_get_serve_uris (win) == NULL;
}

typedef struct {
  GBytes  *body;
  GError  *error;
  gboolean done;
} Fetch;

static void
on_fetched (GObject *source, GAsyncResult *result, gpointer data)
{
  Fetch *f = data;
  f->body = soup_session_send_and_read_finish (SOUP_SESSION (source), result, &f->error);
  f->done = TRUE;
}

static SoupMessage *
fetch_start (SoupSession *session, const char *method, const char *url, const char *json, Fetch *f)
{
  SoupMessage *msg = soup_message_new (method, url);

  if (json != NULL)
    {
      g_autoptr(GBytes) bytes = g_bytes_new (json, strlen (json));
      soup_message_set_request_body_from_bytes (msg, "application/json", bytes);
    }
  *f = (Fetch) { NULL, NULL, FALSE };
  soup_session_send_and_read_async (session, msg, G_PRIORITY_DEFAULT, NULL, on_fetched, f);
  return msg;
}

/* The status of a request started by fetch_start () once it is answered
 * (the main loop runs meanwhile: the app's generator lives on it); 0 when
 * it could not connect. */
static guint
fetch_end (SoupMessage *msg, Fetch *f, char **body)
{
  guint status;

  wait_for (is_true, &f->done, 60);
  status = soup_message_get_status (msg);
  g_object_unref (msg);
  if (f->body == NULL)
    {
      g_test_message ("%s", f->error->message);
      g_error_free (f->error);
      return 0;
    }
  if (body != NULL)
    *body = g_strndup (g_bytes_get_data (f->body, NULL), g_bytes_get_size (f->body));
  g_bytes_unref (f->body);
  return status;
}

static guint
fetch (SoupSession *session, const char *method, const char *url, const char *json, char **body)
{
  Fetch f;
  SoupMessage *msg = fetch_start (session, method, url, json, &f);
  return fetch_end (msg, &f, body);
}

static gboolean
one_waiting (gpointer win)
{
  const char *label = um_window_get_serve_label (win);
  return label != NULL && strstr (label, "1 waiting") != NULL;
}

static void
test_serve_switch (void)
{
  UmWindow *win = make_window ("serve.json");
  UmSettings *settings = um_window_get_settings (win);
  g_autoptr(SoupSession) session = soup_session_new ();
  g_autofree char *model = um_window_find_demo_model ();
  g_autofree char *health = NULL;
  g_autofree char *completions = NULL;
  g_autofree char *body = NULL;
  const char *uri;

  um_window_load_model (win, model);
  wait_for (not_loading, win, 30);
  g_assert_nonnull (um_window_get_engine (win));
  g_assert_null (um_window_get_serve_label (win));

  /* Preferences: off by default; "Local network" makes a key to copy
   * (nothing is bound while the switch is off). */
  {
    GtkWidget *prefs = um_preferences_new (settings);
    g_autofree char *key = NULL;
    gboolean on = TRUE;

    g_object_get (settings, "serve", &on, NULL);
    g_assert_false (on);
    g_assert_null (um_preferences_get_key (UM_PREFERENCES (prefs)));
    g_object_set (settings, "serve-scope", "network", NULL);
    g_object_get (settings, "serve-key", &key, NULL);
    g_assert_true (g_str_has_prefix (key, "um-"));
    g_assert_cmpstr (um_preferences_get_key (UM_PREFERENCES (prefs)), ==, key);
    g_object_set (settings, "serve-scope", "local", NULL);
    g_assert_null (um_preferences_get_key (UM_PREFERENCES (prefs)));
    gtk_window_destroy (GTK_WINDOW (prefs));
  }

  /* On, on a free port of this computer only. */
  g_object_set (settings, "serve-port", 0, "serve-scope", "local", "serve", TRUE, NULL);
  wait_for (serving, win, 10);
  uri = um_window_get_serve_uris (win)[0];
  g_test_message ("serving at %s: %s", uri, um_window_get_serve_label (win));
  g_assert_true (g_str_has_prefix (uri, "http://127.0.0.1:") || g_str_has_prefix (uri, "http://[::1]:"));
  g_assert_nonnull (um_window_get_serve_label (win));
  {
    /* "http://127.0.0.1:PORT/" is shown as "127.0.0.1:PORT". */
    g_autofree char *host_port = g_strndup (uri + strlen ("http://"), strlen (uri) - strlen ("http://") - 1);
    g_assert_cmpstr (um_window_get_serve_label (win), ==, host_port);
  }
  g_assert_null (um_window_get_error_message (win));

  health = g_strconcat (uri, "health", NULL);
  g_assert_cmpuint (fetch (session, "GET", health, NULL, &body), ==, 200);
  g_assert_nonnull (strstr (body, "ok"));
  g_clear_pointer (&body, g_free);
  /* A completion runs on the app's model, through its queue. */
  completions = g_strconcat (uri, "v1/completions", NULL);
  g_assert_cmpuint (fetch (session, "POST", completions,
                           "{\"prompt\":\"The\",\"max_tokens\":8,\"unmask\":{\"steps\":8,\"block_length\":8}}",
                           &body), ==, 200);
  g_assert_nonnull (strstr (body, "\"choices\""));
  g_clear_pointer (&body, g_free);

  /* The app generating: a client waits its turn, and the header says so. */
  {
    UmGeneratePage *page = UM_GENERATE_PAGE (um_window_get_generate_page (win));
    SoupMessage *msg;
    Fetch f;

    um_generate_page_set_prompt (page, "The");
    set_params (win, 1024, 1024);
    um_generate_page_generate (page);
    msg = fetch_start (session, "POST", completions,
                       "{\"prompt\":\"The\",\"max_tokens\":8,\"unmask\":{\"steps\":8,\"block_length\":8}}", &f);
    wait_for (one_waiting, win, 10);
    g_test_message ("%s", um_window_get_serve_label (win));
    save_screenshot (GTK_WIDGET (win), "serving.png");
    um_generate_page_stop (page);
    g_assert_cmpuint (fetch_end (msg, &f, &body), ==, 200);
    g_assert_nonnull (strstr (body, "\"choices\""));
    wait_for (not_running, page, 10);
    g_assert_false (one_waiting (win));
  }

  /* Off: the port closes. */
  g_object_set (settings, "serve", FALSE, NULL);
  wait_for (not_serving, win, 10);
  g_assert_null (um_window_get_serve_label (win));
  g_assert_cmpuint (fetch (session, "GET", health, NULL, NULL), ==, 0);

  /* Closing the window while it serves stops the server with it. */
  g_object_set (settings, "serve", TRUE, NULL);
  wait_for (serving, win, 10);
  g_clear_pointer (&health, g_free);
  health = g_strconcat (um_window_get_serve_uris (win)[0], "health", NULL);
  g_assert_cmpuint (fetch (session, "GET", health, NULL, NULL), ==, 200);
  destroy_window (win);
  g_assert_cmpuint (fetch (session, "GET", health, NULL, NULL), ==, 0);
}

int
main (int argc, char **argv)
{
  int rc;

  tmp_dir = g_dir_make_tmp ("unmask-gui-remote-XXXXXX", NULL);
  {
    g_autofree char *data_home = g_build_filename (tmp_dir, "data", NULL);
    g_setenv ("XDG_DATA_HOME", data_home, TRUE);
  }
  gtk_test_init (&argc, &argv, NULL);
  adw_init ();
  start_server ();

  g_test_add_func ("/remote/client", test_client);
  g_test_add_func ("/remote/serve-switch", test_serve_switch);
  g_test_add_func ("/remote/llama-server", test_llama_server);
  rc = g_test_run ();
  kill_server ();
  g_free (server_url);
  um_test_rmtree (tmp_dir);
  g_free (tmp_dir);
  return rc;
}

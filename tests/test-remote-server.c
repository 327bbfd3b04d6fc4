/* test-remote-server.c — UmRemoteGenerator against the real server
 * (`unmask-cli serve` on the demo model, 127.0.0.1, a free port): the model
 * is listed and described as the local engine describes it; generations
 * through the server give the ids, text and per-step canvases of the same
 * request run by UmLocalGenerator here (same seed, same exact schedule);
 * a cancelled generation frees the server's engine within a step
 * (GET /v1/unmask/info); a full server queue is UM_ERROR_BUSY; a server
 * killed mid-answer is an error at once, never a hang. */
#include <errno.h>
#include <libsoup/soup.h>
#include <signal.h>
#include <sys/prctl.h>
#include <glib/gstdio.h>
#include <string.h>

#include "um-error.h"
#include "um-json.h"
#include "um-local-generator.h"
#include "um-remote-generator.h"

typedef struct {
  GSubprocess      *proc;
  GDataInputStream *out;
  char             *url;       /* http://127.0.0.1:PORT */
} Server;

static Server server;           /* shared by the tests (one load) */
static UmGenerator *local;

static gboolean
on_guard (gpointer user_data)
{
  g_error ("%s: waited more than 60 s", (const char *) user_data);
  return G_SOURCE_REMOVE;
}

static void
spin (gboolean *flag, const char *what)
{
  guint guard = g_timeout_add_seconds (60, on_guard, (gpointer) what);
  while (!*flag)
    g_main_context_iteration (NULL, TRUE);
  g_source_remove (guard);
}

/* ---- the server process ---- */

typedef struct {
  gboolean done;
  char    *line;
} LineWait;

static void
on_line (GObject *source, GAsyncResult *result, gpointer user_data)
{
  LineWait *lw = user_data;
  lw->line = g_data_input_stream_read_line_finish_utf8 (G_DATA_INPUT_STREAM (source), result, NULL, NULL);
  lw->done = TRUE;
}

/* Its stdout is drained after the address so that it never blocks on it. */
static void
on_drain (GObject *source, GAsyncResult *result, gpointer user_data)
{
  g_autofree char *line = g_data_input_stream_read_line_finish_utf8 (G_DATA_INPUT_STREAM (source), result, NULL, NULL);
  if (line != NULL)
    g_data_input_stream_read_line_async (G_DATA_INPUT_STREAM (source), G_PRIORITY_DEFAULT, NULL, on_drain, NULL);
}

static void
die_with_parent (gpointer data)
{
  prctl (PR_SET_PDEATHSIG, SIGKILL);
}

static void
server_start (Server *s, const char *max_queue)
{
  const char *cli = g_getenv ("UM_CLI");
  const char *model = g_getenv ("UM_DEMO_MODEL");
  g_autoptr(GError) error = NULL;

  g_assert_nonnull (cli);
  g_assert_nonnull (model);
  {
    g_autoptr(GSubprocessLauncher) launcher = g_subprocess_launcher_new (G_SUBPROCESS_FLAGS_STDOUT_PIPE);
    /* A failed assertion here must not leave the server running (and
     * meson waiting on its inherited stderr). */
    g_subprocess_launcher_set_child_setup (launcher, die_with_parent, NULL, NULL);
    s->proc = g_subprocess_launcher_spawn (launcher, &error, cli, "serve", "--model", model, "--port", "0",
                                           "--threads", "1", "--max-queue", max_queue, NULL);
  }
  g_assert_no_error (error);
  s->out = g_data_input_stream_new (g_subprocess_get_stdout_pipe (s->proc));
  for (;;)
    {
      LineWait lw = { 0 };
      g_data_input_stream_read_line_async (s->out, G_PRIORITY_DEFAULT, NULL, on_line, &lw);
      spin (&lw.done, "the server's address");
      if (lw.line == NULL)
        g_error ("unmask-cli serve ended before it listened");
      if (g_str_has_prefix (lw.line, "Listening on http://127.0.0.1:"))
        {
          gsize n = strlen (lw.line);
          if (lw.line[n - 1] == '/')
            lw.line[n - 1] = '\0';
          s->url = g_strdup (lw.line + strlen ("Listening on "));
          g_free (lw.line);
          break;
        }
      g_free (lw.line);
    }
  g_data_input_stream_read_line_async (s->out, G_PRIORITY_DEFAULT, NULL, on_drain, NULL);
}

static void
server_kill (Server *s)
{
  if (s->proc == NULL)
    return;
  g_subprocess_force_exit (s->proc);
  g_subprocess_wait (s->proc, NULL, NULL);
  g_clear_object (&s->out);
  g_clear_object (&s->proc);
  g_clear_pointer (&s->url, g_free);
}

/* ---- generators ---- */

typedef struct {
  gboolean           done;
  UmGenerator       *gen;
  GPtrArray         *models;
  UmGeneratorResult *res;
  GError            *error;
  /* Per step: the answer part of the canvas, by step number. */
  GPtrArray         *canvases;        /* GArray* (gint32) or NULL for a step not reported */
  int                n_events;
  int                answer_from;     /* the canvas's prompt length */
  GCancellable      *cancel_at;       /* cancelled at the third event */
  Server            *kill_at;         /* killed at the third event */
  gint64             t_event3;
} Run;

static void
on_new (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Run *r = user_data;
  r->gen = um_remote_generator_new_finish (result, &r->error);
  r->done = TRUE;
}

static void
on_listed (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Run *r = user_data;
  r->models = um_remote_list_models_finish (result, &r->error);
  r->done = TRUE;
}

static void
on_generated (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Run *r = user_data;
  r->res = um_generator_generate_finish (UM_GENERATOR (source), result, &r->error);
  r->done = TRUE;
}

static void
on_step (const UmStepEvent *ev, gpointer user_data)
{
  Run *r = user_data;
  GArray *c = g_array_new (FALSE, FALSE, sizeof (gint32));

  g_array_append_vals (c, ev->canvas + ev->prompt_len, ev->seq_len - ev->prompt_len);
  while ((int) r->canvases->len <= ev->step)
    g_ptr_array_add (r->canvases, NULL);
  g_assert_null (g_ptr_array_index (r->canvases, ev->step));   /* each step once, in order */
  g_ptr_array_index (r->canvases, ev->step) = c;
  r->answer_from = ev->prompt_len;
  if (++r->n_events == 3)
    {
      r->t_event3 = g_get_monotonic_time ();
      if (r->cancel_at != NULL)
        g_cancellable_cancel (r->cancel_at);
      if (r->kill_at != NULL)
        kill (g_ascii_strtoll (g_subprocess_get_identifier (r->kill_at->proc), NULL, 10), SIGKILL);
    }
}

static void
run_clear (Run *r)
{
  g_clear_object (&r->gen);
  g_clear_pointer (&r->models, g_ptr_array_unref);
  g_clear_pointer (&r->res, um_generator_result_free);
  g_clear_error (&r->error);
  if (r->canvases != NULL)
    {
      for (guint i = 0; i < r->canvases->len; i++)
        if (g_ptr_array_index (r->canvases, i) != NULL)
          g_array_unref (g_ptr_array_index (r->canvases, i));
      g_ptr_array_unref (r->canvases);
    }
  memset (r, 0, sizeof *r);
}

static UmGenerator *
connect_remote (const char *url)
{
  Run r = { 0 };
  UmGenerator *gen;

  um_remote_generator_new_async (url, NULL, NULL, NULL, on_new, &r);
  spin (&r.done, "connecting");
  g_assert_no_error (r.error);
  gen = g_steal_pointer (&r.gen);
  run_clear (&r);
  return gen;
}

static void
start (UmGenerator *gen, const UmGeneratorRequest *req, GCancellable *cancellable, Run *r)
{
  memset (r, 0, sizeof *r);
  r->canvases = g_ptr_array_new ();
  um_generator_generate_async (gen, req, on_step, r, cancellable, on_generated, r);
}

static void
generate (UmGenerator *gen, const UmGeneratorRequest *req, GCancellable *cancellable, Run *r)
{
  start (gen, req, cancellable, r);
  spin (&r->done, "a generation");
}

static void
small_params (UmGenParams *p, guint64 seed)
{
  um_gen_params_init (p);
  p->gen_length = 16;
  p->steps = 8;
  p->block_length = 8;
  p->temperature = 0.5;
  p->seed = seed;
}

/* ---- GET /v1/unmask/info ---- */

/* Whether the server's engine is running a request now, read from
 * /v1/unmask/info. */
static gboolean
server_running (const char *url)
{
  g_autoptr(SoupSession) session = soup_session_new ();
  g_autofree char *info_url = g_strconcat (url, "/v1/unmask/info", NULL);
  g_autoptr(SoupMessage) msg = soup_message_new ("GET", info_url);
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) body = soup_session_send_and_read (session, msg, NULL, &error);
  g_autoptr(JsonNode) root = NULL;
  JsonObject *obj, *queue;
  JsonNode *n;
  gsize len;
  const char *data;

  g_assert_no_error (error);
  g_assert_cmpuint (soup_message_get_status (msg), ==, 200);
  data = g_bytes_get_data (body, &len);
  root = um_json_parse (data, (gssize) len, "/v1/unmask/info", NULL, &error);
  g_assert_no_error (error);
  obj = json_node_get_object (root);
  queue = json_object_has_member (obj, "queue") ? json_object_get_object_member (obj, "queue") : obj;
  n = json_object_get_member (queue, "running");
  g_assert_nonnull (n);
  if (JSON_NODE_HOLDS_NULL (n))
    return FALSE;
  if (JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_BOOLEAN)
    return json_node_get_boolean (n);
  if (JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_INT64)
    return json_node_get_int (n) > 0;
  return TRUE;   /* a request id */
}

/* ---- tests ---- */

static void
test_models (void)
{
  g_autoptr(UmGenerator) gen = connect_remote (server.url);
  const UmGeneratorInfo *want = um_generator_get_info (local);
  const UmGeneratorInfo *got = um_generator_get_info (gen);
  UmRemoteModel *m;
  Run r = { 0 };

  um_remote_list_models_async (server.url, NULL, NULL, on_listed, &r);
  spin (&r.done, "the model list");
  g_assert_no_error (r.error);
  g_assert_cmpuint (r.models->len, ==, 1);
  m = g_ptr_array_index (r.models, 0);
  g_assert_true (m->unmask);
  g_assert_cmpstr (m->arch, ==, "llada");
  g_assert_cmpstr (m->id, ==, got->model_id);
  run_clear (&r);

  g_assert_true (got->remote);
  g_assert_cmpstr (got->location, ==, um_remote_generator_get_url (UM_REMOTE_GENERATOR (gen)));
  g_assert_true (g_str_has_prefix (got->location, server.url));
  g_assert_cmpstr (got->model_id, ==, want->model_id);
  g_assert_cmpint (got->arch, ==, want->arch);
  g_assert_cmpuint (got->max_seq_len, ==, want->max_seq_len);
  g_assert_cmpint (got->mask_id, ==, want->mask_id);
  g_assert_cmpint (got->eos_id, ==, want->eos_id);
  g_assert_cmpint (got->eot_id, ==, want->eot_id);
  /* The server's defaults: the model's recommended temperature among them. */
  g_assert_nonnull (got->recommendation->origin);
  g_assert_true (um_gen_layer_has (&want->recommendation->layer, UM_GEN_KEY_TEMPERATURE));
  g_assert_true (um_gen_layer_has (&got->recommendation->layer, UM_GEN_KEY_TEMPERATURE));
  g_assert_cmpfloat_with_epsilon (got->recommendation->layer.params.temperature,
                                  want->recommendation->layer.params.temperature, 1e-6);
  g_assert_true (um_gen_layer_has (&got->recommendation->layer, UM_GEN_KEY_STEPS));
}

/* The same request locally and through the server: equal ids, text, and
 * canvas after every step the server reported (it may merge steps when the
 * socket lags, never reorder or skip the last). */
static void
compare_runs (UmGenerator *remote, const UmGeneratorRequest *req, const char *what)
{
  Run l, r;

  g_test_message ("%s", what);
  generate (local, req, NULL, &l);
  generate (remote, req, NULL, &r);
  g_assert_no_error (l.error);
  g_assert_no_error (r.error);
  g_assert_cmpuint (r.res->ids->len, ==, l.res->ids->len);
  g_assert_cmpmem (r.res->ids->data, r.res->ids->len * 4, l.res->ids->data, l.res->ids->len * 4);
  g_assert_cmpstr (r.res->text, ==, l.res->text);
  g_assert_cmpint (r.res->hit_eos, ==, l.res->hit_eos);
  g_assert_cmpint (r.res->completion_tokens, ==, l.res->completion_tokens);
  g_assert_cmpint (r.res->steps, ==, l.res->steps);
  g_assert_cmpint (r.answer_from, ==, l.answer_from);
  g_assert_cmpuint (r.canvases->len, ==, l.canvases->len);
  g_assert_nonnull (g_ptr_array_index (r.canvases, r.canvases->len - 1));
  for (guint s = 0; s < r.canvases->len; s++)
    {
      GArray *rc = g_ptr_array_index (r.canvases, s), *lc = g_ptr_array_index (l.canvases, s);
      if (rc == NULL)
        continue;
      g_assert_cmpuint (rc->len, ==, lc->len);
      g_assert_cmpmem (rc->data, rc->len * 4, lc->data, lc->len * 4);
    }
  run_clear (&l);
  run_clear (&r);
}

static void
test_same_as_local (void)
{
  g_autoptr(UmGenerator) gen = connect_remote (server.url);
  static const gint32 ids[] = { 4090, 100, 200, 300 };
  UmGenMessage msgs[] = { { "system", "Be brief." }, { "user", "Tell me about cats." } };
  UmGeneratorRequest req;

  um_generator_request_init (&req);
  req.prompt = "Once upon a time";
  small_params (&req.params, 11);
  compare_runs (gen, &req, "completion text");

  um_generator_request_init (&req);
  req.prompt_ids = ids;
  req.n_prompt_ids = G_N_ELEMENTS (ids);
  small_params (&req.params, 12);
  req.params.remasking = UM_REMASK_RANDOM;
  compare_runs (gen, &req, "completion ids, random remasking");

  um_generator_request_init (&req);
  req.messages = msgs;
  req.n_messages = 2;
  small_params (&req.params, 13);
  req.params.gen_length = 32;
  req.params.block_length = 16;
  compare_runs (gen, &req, "chat messages, two blocks");

  um_generator_request_init (&req);
  req.prompt = "The cat";
  req.chat = TRUE;
  small_params (&req.params, 14);
  req.params.threshold = 0.3;
  compare_runs (gen, &req, "chat text, threshold");

  um_generator_request_init (&req);
  req.prompt = "The cat";
  req.suffix = " on the mat.";
  small_params (&req.params, 15);
  req.params.block_length = 16;
  compare_runs (gen, &req, "infill");
}

/* unmask-cli with @argv (NULL-terminated, after the program), @input on
 * its stdin; its exit status, stdout and stderr. The environment is the
 * test's, without the user's profile. */
static int
cli (const char *const *argv, const char *input, char **out, char **err)
{
  g_autoptr(GPtrArray) args = g_ptr_array_new ();
  g_autoptr(GSubprocessLauncher) launcher = g_subprocess_launcher_new (
    G_SUBPROCESS_FLAGS_STDIN_PIPE | G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_PIPE);
  g_autoptr(GSubprocess) proc = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *config = g_dir_make_tmp ("unmask-cli-XXXXXX", NULL);

  g_ptr_array_add (args, (gpointer) g_getenv ("UM_CLI"));
  for (guint i = 0; argv[i]; i++)
    g_ptr_array_add (args, (gpointer) argv[i]);
  g_ptr_array_add (args, NULL);
  g_subprocess_launcher_setenv (launcher, "UNMASK_CONFIG_DIR", config, TRUE);
  g_subprocess_launcher_setenv (launcher, "UNMASK_DEVICE", "cpu", TRUE);
  g_subprocess_launcher_set_child_setup (launcher, die_with_parent, NULL, NULL);
  proc = g_subprocess_launcher_spawnv (launcher, (const char *const *) args->pdata, &error);
  g_assert_no_error (error);
  g_assert_true (g_subprocess_communicate_utf8 (proc, input, NULL, out, err, &error));
  g_assert_no_error (error);
  g_rmdir (config);
  return g_subprocess_get_if_exited (proc) ? g_subprocess_get_exit_status (proc) : -1;
}

/* unmask-cli generate and chat --server URL: the remote engine from a
 * terminal, the same answer as unmask-cli generate on the model here. */
static void
test_cli_server (void)
{
  const char *model = g_getenv ("UM_DEMO_MODEL");
  const char *common[] = { "--prompt", "Once upon a time", "--gen-length", "16", "--steps", "8", "--block-length",
                           "8", "--temperature", "0.5", "--seed", "11", "--json", NULL };
  g_autoptr(GPtrArray) here = g_ptr_array_new (), there = g_ptr_array_new ();
  g_autofree char *out_here = NULL, *err_here = NULL, *out_there = NULL, *err_there = NULL;
  g_autoptr(JsonNode) a = NULL, b = NULL;
  JsonObject *ja, *jb;

  g_ptr_array_add (here, "generate");
  g_ptr_array_add (here, "--model");
  g_ptr_array_add (here, (gpointer) model);
  g_ptr_array_add (there, "generate");
  g_ptr_array_add (there, "--server");
  g_ptr_array_add (there, server.url);
  for (guint i = 0; common[i]; i++)
    {
      g_ptr_array_add (here, (gpointer) common[i]);
      g_ptr_array_add (there, (gpointer) common[i]);
    }
  g_ptr_array_add (here, NULL);
  g_ptr_array_add (there, NULL);
  g_assert_cmpint (cli ((const char *const *) here->pdata, NULL, &out_here, &err_here), ==, 0);
  g_test_message ("generate --server: %s", err_there ? err_there : "");
  g_assert_cmpint (cli ((const char *const *) there->pdata, NULL, &out_there, &err_there), ==, 0);
  a = json_from_string (out_here, NULL);
  b = json_from_string (out_there, NULL);
  g_assert_nonnull (a);
  g_assert_nonnull (b);
  ja = json_node_get_object (a);
  jb = json_node_get_object (b);
  g_assert_cmpstr (json_object_get_string_member (jb, "text"), ==, json_object_get_string_member (ja, "text"));
  {
    JsonArray *ia = json_object_get_array_member (ja, "ids"), *ib = json_object_get_array_member (jb, "ids");
    g_assert_cmpuint (json_array_get_length (ib), ==, json_array_get_length (ia));
    for (guint i = 0; i < json_array_get_length (ia); i++)
      g_assert_cmpint (json_array_get_int_element (ib, i), ==, json_array_get_int_element (ia, i));
  }
  g_assert_true (g_str_has_prefix (json_object_get_string_member (jb, "server"), server.url));
  /* A trace per step, from the server's step events. */
  g_assert_cmpuint (json_array_get_length (json_object_get_array_member (jb, "trace")), >, 0);

  /* chat: two turns on stdin, two answers. */
  {
    const char *argv[] = { "chat", "--server", server.url, "--gen-length", "8", "--steps", "4", "--block-length", "8",
                           NULL };
    g_autofree char *out = NULL, *err = NULL;
    g_auto(GStrv) lines = NULL;
    g_assert_cmpint (cli (argv, "Hello\nAnd then?\n", &out, &err), ==, 0);
    lines = g_strsplit (out, "\n", -1);
    g_test_message ("chat --server: %u lines", g_strv_length (lines));
    g_assert_cmpuint (g_strv_length (lines), >=, 2);
  }
  /* A server that is not there: a clear error, exit 1. */
  {
    const char *argv[] = { "generate", "--server", "http://127.0.0.1:1", "--prompt", "x", NULL };
    g_autofree char *out = NULL, *err = NULL;
    g_assert_cmpint (cli (argv, NULL, &out, &err), ==, 1);
    g_assert_nonnull (strstr (err, "127.0.0.1:1"));
  }
  /* Options of a model run here are refused with --server. */
  {
    const char *argv[] = { "generate", "--server", server.url, "--threads", "2", "--prompt", "x", NULL };
    g_autofree char *out = NULL, *err = NULL;
    g_assert_cmpint (cli (argv, NULL, &out, &err), ==, 1);
    g_assert_nonnull (strstr (err, "--threads"));
  }
}

static void
test_cancel (void)
{
  g_autoptr(UmGenerator) gen = connect_remote (server.url);
  g_autoptr(GCancellable) cancel = g_cancellable_new ();
  UmGeneratorRequest req;
  gint64 t_done, t_free;
  Run r;

  um_generator_request_init (&req);
  req.prompt = "A long story:";
  small_params (&req.params, 3);
  req.params.gen_length = 128;
  req.params.block_length = 128;
  req.params.steps = 128;
  start (gen, &req, cancel, &r);
  r.cancel_at = cancel;
  spin (&r.done, "a cancelled generation");
  t_done = g_get_monotonic_time ();
  g_assert_error (r.error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_assert_cmpint (t_done - r.t_event3, <, G_USEC_PER_SEC / 2);
  /* The server notices the closed connection and stops its engine. */
  while (server_running (server.url))
    {
      g_assert_cmpint (g_get_monotonic_time () - t_done, <, 10 * G_USEC_PER_SEC);
      g_usleep (10000);
    }
  t_free = g_get_monotonic_time ();
  g_test_message ("the server's engine was free %.0f ms after the cancel", (t_free - r.t_event3) / 1e3);
  run_clear (&r);

  /* And serves the next request. */
  um_generator_request_init (&req);
  req.prompt = "Again";
  small_params (&req.params, 4);
  generate (gen, &req, NULL, &r);
  g_assert_no_error (r.error);
  run_clear (&r);
}

/* Three clients, a queue of one on the server: the third is refused. */
static void
test_busy (void)
{
  UmGenerator *gens[3];
  Run runs[3];
  UmGeneratorRequest req;
  g_autoptr(GCancellable) stop = g_cancellable_new ();
  int n_busy = 0;

  um_generator_request_init (&req);
  req.prompt = "A long story:";
  small_params (&req.params, 5);
  req.params.gen_length = 128;
  req.params.block_length = 128;
  req.params.steps = 128;
  for (int i = 0; i < 3; i++)
    gens[i] = connect_remote (server.url);
  start (gens[0], &req, stop, &runs[0]);
  /* The first runs (its steps arrive) before the others ask. */
  while (runs[0].n_events == 0 && !runs[0].done)
    g_main_context_iteration (NULL, TRUE);
  start (gens[1], &req, stop, &runs[1]);
  start (gens[2], &req, stop, &runs[2]);
  {
    guint guard = g_timeout_add_seconds (60, on_guard, (gpointer) "a refusal");
    while (!runs[1].done && !runs[2].done)
      g_main_context_iteration (NULL, TRUE);
    g_source_remove (guard);
  }
  g_cancellable_cancel (stop);
  for (int i = 0; i < 3; i++)
    {
      spin (&runs[i].done, "a client");
      if (g_error_matches (runs[i].error, UM_ERROR, UM_ERROR_BUSY))
        n_busy++;
      else
        g_assert_error (runs[i].error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
      run_clear (&runs[i]);
      g_object_unref (gens[i]);
    }
  g_assert_cmpint (n_busy, ==, 1);
}

static void
test_killed (void)
{
  Server doomed = { 0 };
  g_autoptr(UmGenerator) gen = NULL;
  UmGeneratorRequest req;
  gint64 t_done;
  Run r;

  server_start (&doomed, "2");
  gen = connect_remote (doomed.url);
  um_generator_request_init (&req);
  req.prompt = "A long story:";
  small_params (&req.params, 6);
  req.params.gen_length = 128;
  req.params.block_length = 128;
  req.params.steps = 128;
  start (gen, &req, NULL, &r);
  r.kill_at = &doomed;
  spin (&r.done, "a generation on a killed server");
  t_done = g_get_monotonic_time ();
  g_test_message ("killed: %s", r.error ? r.error->message : "(no error)");
  g_assert_error (r.error, UM_ERROR, UM_ERROR_REMOTE);
  g_assert_cmpint (t_done - r.t_event3, <, 5 * G_USEC_PER_SEC);
  run_clear (&r);

  /* A new request finds nobody: an error naming the address, at once. */
  um_generator_request_init (&req);
  req.prompt = "Anyone?";
  small_params (&req.params, 7);
  generate (gen, &req, NULL, &r);
  g_assert_nonnull (r.error);
  g_assert_nonnull (strstr (r.error->message, doomed.url));
  run_clear (&r);
  server_kill (&doomed);
}

int
main (int argc, char **argv)
{
  g_autoptr(GError) error = NULL;
  UmEngineOptions opt;
  UmEngine *engine;
  int ret;

  g_test_init (&argc, &argv, NULL);
  /* The server is part of every build: one that does not start fails
   * (server_start), never turns into a skip. */
  if (g_getenv ("UM_CLI") == NULL || g_getenv ("UM_DEMO_MODEL") == NULL)
    g_error ("UM_CLI and UM_DEMO_MODEL must name unmask-cli and the demo model (meson test sets them)");
  um_engine_options_init (&opt);
  opt.device = UM_DEVICE_CPU;
  opt.n_threads = 1;
  engine = um_engine_load (g_getenv ("UM_DEMO_MODEL"), &opt, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  local = um_local_generator_new (engine);
  server_start (&server, "1");

  g_test_add_func ("/remote-server/models", test_models);
  g_test_add_func ("/remote-server/same-as-local", test_same_as_local);
  g_test_add_func ("/remote-server/cli-server", test_cli_server);
  g_test_add_func ("/remote-server/cancel", test_cancel);
  g_test_add_func ("/remote-server/busy", test_busy);
  g_test_add_func ("/remote-server/killed", test_killed);
  ret = g_test_run ();
  server_kill (&server);
  g_object_unref (local);
  return ret;
}

/* test-llama-server.c — the remote client (backend/remote, and unmask-cli's
 * --server) against a server nobody here wrote: llama.cpp's llama-server
 * on 127.0.0.1 serving a small random llama-architecture GGUF this test
 * writes (um-test-llama.c). Chat and completions, streamed (the client's
 * way) and compared with llama-server's own non-streamed answer, errors,
 * a server killed mid-answer, and unmask-cli generate --server.
 *
 * Exits 77 (skip) without UM_LLAMA_SERVER, saying how to build it: CI has
 * no llama-server. */
#include <libsoup/soup.h>
#include <stdio.h>
#include <string.h>

#include "um-error.h"
#include "um-remote-generator.h"
#include "um-test-llama.h"
#include "um-test-util.h"

static UmTestLlamaServer server;

/* ---- waiting on the main loop ---- */

typedef struct {
  gboolean           done;
  GObject           *object;
  UmGeneratorResult *res;
  GError            *error;
  int                n_events;
  int                max_canvas;
  GString           *pieces;
  UmGenerator       *gen;
  UmTestLlamaServer *kill_at_third;
} Wait;

static gboolean
on_guard (gpointer data)
{
  g_error ("waited more than 120 s: %s", (const char *) data);
  return G_SOURCE_REMOVE;
}

static void
spin (gboolean *flag, const char *what)
{
  guint guard = g_timeout_add_seconds (120, on_guard, (gpointer) what);
  while (!*flag)
    g_main_context_iteration (NULL, TRUE);
  g_source_remove (guard);
}

static void
on_new (GObject *source, GAsyncResult *result, gpointer data)
{
  Wait *w = data;
  w->object = G_OBJECT (um_remote_generator_new_finish (result, &w->error));
  w->done = TRUE;
}

static void
on_generated (GObject *source, GAsyncResult *result, gpointer data)
{
  Wait *w = data;
  w->res = um_generator_generate_finish (UM_GENERATOR (source), result, &w->error);
  w->done = TRUE;
}

static void
on_step (const UmStepEvent *ev, gpointer data)
{
  Wait *w = data;

  w->n_events++;
  w->max_canvas = MAX (w->max_canvas, ev->seq_len - ev->prompt_len);
  /* Another server's text arrives as committed positions, left to right:
   * the pieces read back through token_text () rebuild the answer. */
  for (int i = 0; i < ev->n_committed; i++)
    {
      g_autofree char *piece = um_generator_token_text (w->gen, ev->ids[i]);
      g_assert_nonnull (piece);
      g_string_append (w->pieces, piece);
    }
  if (w->kill_at_third != NULL && w->n_events == 3)
    um_test_llama_server_kill (w->kill_at_third);
}

static UmGenerator *
connect_to (const char *url)
{
  Wait w = { 0 };
  um_remote_generator_new_async (url, NULL, NULL, NULL, on_new, &w);
  spin (&w.done, "connecting");
  g_assert_no_error (w.error);
  return UM_GENERATOR (w.object);
}

static void
generate (UmGenerator *gen, const UmGeneratorRequest *req, Wait *w)
{
  memset (w, 0, sizeof *w);
  w->gen = gen;
  w->pieces = g_string_new (NULL);
  um_generator_generate_async (gen, req, on_step, w, NULL, on_generated, w);
  spin (&w->done, "a generation");
}

static void
wait_clear (Wait *w)
{
  g_clear_pointer (&w->res, um_generator_result_free);
  g_clear_error (&w->error);
  g_clear_object (&w->object);
  if (w->pieces)
    g_string_free (w->pieces, TRUE);
  w->pieces = NULL;
}

static void
params (UmGenParams *p, int max_tokens)
{
  um_gen_params_init (p);
  p->gen_length = max_tokens;
  p->temperature = 0.0;   /* greedy: the same answer streamed or not */
  p->seed = 1;
}

/* llama-server's own non-streamed answer to @path with @body, its
 * "content" (or the choice's text/message). */
static char *
plain_answer (const char *path, const char *body, guint *status)
{
  g_autoptr(SoupSession) session = soup_session_new_with_options ("timeout", 60, NULL);
  g_autofree char *url = g_strconcat (server.url, path, NULL);
  g_autoptr(SoupMessage) msg = soup_message_new ("POST", url);
  g_autoptr(GBytes) in = g_bytes_new (body, strlen (body));
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) out = NULL;
  g_autoptr(JsonNode) root = NULL;
  JsonObject *c0;
  gsize len;
  const char *data;

  soup_message_set_request_body_from_bytes (msg, "application/json", in);
  out = soup_session_send_and_read (session, msg, NULL, &error);
  g_assert_no_error (error);
  *status = soup_message_get_status (msg);
  data = g_bytes_get_data (out, &len);
  if (*status != 200)
    return g_strndup (data, len);
  root = json_from_string (data, &error);
  g_assert_no_error (error);
  c0 = json_array_get_object_element (json_object_get_array_member (json_node_get_object (root), "choices"), 0);
  if (json_object_has_member (c0, "message"))
    return g_strdup (json_object_get_string_member (json_object_get_object_member (c0, "message"), "content"));
  return g_strdup (json_object_get_string_member (c0, "text"));
}

/* ---- tests ---- */

static void
test_models (void)
{
  g_autoptr(UmGenerator) gen = connect_to (server.url);
  const UmGeneratorInfo *info = um_generator_get_info (gen);

  g_test_message ("model %s at %s", info->model_id, info->location);
  g_assert_true (info->remote);
  g_assert_nonnull (info->model_id);
  g_assert_true (g_str_has_prefix (info->location, server.url));
  /* Not an Unmask server: no mask id, no recommendation of its own. */
  g_assert_cmpint (info->mask_id, ==, -1);
}

/* Completions and chat, streamed, against llama-server's non-streamed
 * answer to the same request: the same text, every piece a committed
 * position, the canvas within UM_REMOTE_PIECES_PER_TOKEN × max_tokens. */
static void
test_streamed_equals_plain (void)
{
  g_autoptr(UmGenerator) gen = connect_to (server.url);
  const int max_tokens = 24;

  for (int chat = 0; chat < 2; chat++)
    {
      UmGenMessage msgs[] = { { "user", "Say something." } };
      UmGeneratorRequest req;
      g_autofree char *body = NULL, *plain = NULL;
      guint status;
      Wait w;

      um_generator_request_init (&req);
      if (chat)
        {
          req.messages = msgs;
          req.n_messages = 1;
        }
      else
        req.prompt = "Once upon a time";
      params (&req.params, max_tokens);
      generate (gen, &req, &w);
      g_assert_no_error (w.error);
      g_test_message ("%s: %d events, %d tokens, finish %s: “%s”", chat ? "chat" : "completion", w.n_events,
                      w.res->completion_tokens, w.res->hit_eos ? "stop" : "length", w.res->text);
      g_assert_cmpint (w.res->completion_tokens, <=, max_tokens);
      g_assert_cmpint (w.max_canvas, <=, max_tokens * 4);
      g_assert_cmpstr (w.pieces->str, ==, w.res->text);
      body = chat ? g_strdup_printf ("{\"messages\":[{\"role\":\"user\",\"content\":\"Say something.\"}],"
                                     "\"max_tokens\":%d,\"temperature\":0,\"seed\":1}", max_tokens)
                  : g_strdup_printf ("{\"prompt\":\"Once upon a time\",\"max_tokens\":%d,\"temperature\":0,"
                                     "\"seed\":1}", max_tokens);
      plain = plain_answer (chat ? "/v1/chat/completions" : "/v1/completions", body, &status);
      g_assert_cmpuint (status, ==, 200);
      g_assert_cmpstr (w.res->text, ==, plain);
      wait_clear (&w);
    }
}

/* llama-server's refusal (a prompt longer than its context) is an
 * UM_ERROR_REMOTE error carrying its message; the generator goes on. */
static void
test_errors (void)
{
  g_autoptr(UmGenerator) gen = connect_to (server.url);
  g_autoptr(GString) long_prompt = g_string_new (NULL);
  UmGeneratorRequest req;
  Wait w;

  for (int i = 0; i < 600; i++)
    g_string_append (long_prompt, "word ");
  um_generator_request_init (&req);
  req.prompt = long_prompt->str;
  params (&req.params, 8);
  generate (gen, &req, &w);
  g_assert_null (w.res);
  g_test_message ("too long: %s", w.error->message);
  g_assert_error (w.error, UM_ERROR, UM_ERROR_REMOTE);
  g_assert_nonnull (strstr (w.error->message, "400"));
  wait_clear (&w);

  um_generator_request_init (&req);
  req.prompt = "Again";
  params (&req.params, 4);
  generate (gen, &req, &w);
  g_assert_no_error (w.error);
  wait_clear (&w);
}

/* unmask-cli generate --server: the same answer as the client above. */
static void
test_cli (void)
{
  g_autoptr(UmGenerator) gen = connect_to (server.url);
  const char *argv[] = { g_getenv ("UM_CLI"), "generate", "--server", server.url, "--prompt", "Once upon a time",
                         "--gen-length", "16", "--temperature", "0", "--seed", "1", "--json", NULL };
  g_autoptr(GError) error = NULL;
  g_autofree char *out = NULL, *err = NULL;
  g_autoptr(JsonNode) root = NULL;
  UmGeneratorRequest req;
  int status;
  Wait w;

  if (argv[0] == NULL)
    {
      g_test_skip ("UM_CLI is not set");
      return;
    }
  g_assert_true (g_spawn_sync (NULL, (char **) argv, NULL, G_SPAWN_DEFAULT, NULL, NULL, &out, &err, &status, &error));
  g_assert_no_error (error);
  g_test_message ("unmask-cli: %s", err);
  g_assert_true (g_spawn_check_wait_status (status, NULL));
  root = json_from_string (out, &error);
  g_assert_no_error (error);
  um_generator_request_init (&req);
  req.prompt = "Once upon a time";
  params (&req.params, 16);
  generate (gen, &req, &w);
  g_assert_no_error (w.error);
  g_assert_cmpstr (json_object_get_string_member (json_node_get_object (root), "text"), ==, w.res->text);
  wait_clear (&w);
}

/* Last: the server killed in the middle of an answer is an error, not a
 * hang or a truncated answer given as complete. */
static void
test_killed (void)
{
  g_autoptr(UmGenerator) gen = connect_to (server.url);
  UmGeneratorRequest req;
  Wait w;

  um_generator_request_init (&req);
  req.prompt = "Tell a long story";
  params (&req.params, 1000);
  memset (&w, 0, sizeof w);
  w.gen = gen;
  w.pieces = g_string_new (NULL);
  w.kill_at_third = &server;
  um_generator_generate_async (gen, &req, on_step, &w, NULL, on_generated, &w);
  spin (&w.done, "a generation whose server was killed");
  g_assert_null (w.res);
  g_test_message ("killed after %d events: %s", w.n_events, w.error->message);
  g_assert_error (w.error, UM_ERROR, UM_ERROR_REMOTE);
  wait_clear (&w);
}

int
main (int argc, char **argv)
{
  int rc;

  if (um_test_llama_server_path () == NULL)
    {
      printf ("SKIP: %s\n", UM_TEST_LLAMA_SERVER_HOWTO);
      return 77;
    }
  g_test_init (&argc, &argv, NULL);
  /* A context small enough that a long prompt is refused, big enough for
   * the long answer that is cut by the kill. */
  um_test_llama_server_start (&server, 1024);
  g_test_add_func ("/llama-server/models", test_models);
  g_test_add_func ("/llama-server/streamed-equals-plain", test_streamed_equals_plain);
  g_test_add_func ("/llama-server/errors", test_errors);
  g_test_add_func ("/llama-server/cli", test_cli);
  g_test_add_func ("/llama-server/killed", test_killed);
  rc = g_test_run ();
  um_test_llama_server_stop (&server);
  return rc;
}

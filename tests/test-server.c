/* test-server.c — UmServer in this process (127.0.0.1, a free port) on the
 * tiny LLaDA model, its generator on a "home" thread of its own as the
 * app's is on the GTK thread, driven over raw sockets so that the test
 * decides when the client reads or leaves:
 * - a stream's shape as OpenAI's SDKs parse it (role first, usage null
 *   until the usage chunk, one finish chunk, [DONE] last), its text equal
 *   to the non-streamed answer, with and without a stop string;
 * - a client that reads nothing: the generation still ends (the engine
 *   never waits on the socket), then the steps arrive merged (first_step
 *   < step), contiguous, and rebuild the canvas and commit steps that
 *   return_trace gives;
 * - clients that leave, running or queued, streaming or not, free the
 *   engine at once;
 * - um_server_free () while admissions are still queued on the home
 *   context (ASan catches a run that outlives the server). */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <json-glib/json-glib.h>

#include "um-error.h"
#include "um-engine.h"
#include "um-tokenizer.h"
#include "um-server.h"
#include "um-test-server.h"
#include "um-test-util.h"

/* The "data: " payloads of an SSE body, in order; each event exactly
 * "data: ...\n\n" (comments aside). */
static GPtrArray *
sse_events (const char *body)
{
  GPtrArray *v = g_ptr_array_new_with_free_func (g_free);
  g_auto(GStrv) parts = g_strsplit (body, "\n\n", -1);
  guint n = g_strv_length (parts);

  g_assert_cmpuint (n, >=, 2);
  g_assert_cmpstr (parts[n - 1], ==, "");   /* ends with a blank line */
  for (guint i = 0; i + 1 < n; i++)
    {
      if (parts[i][0] == ':')
        continue;
      g_assert_true (g_str_has_prefix (parts[i], "data: "));
      g_assert_null (strchr (parts[i], '\n'));   /* one line of JSON */
      g_ptr_array_add (v, g_strdup (parts[i] + 6));
    }
  return v;
}

static JsonObject *
first_choice (JsonObject *chunk)
{
  JsonArray *c = json_object_get_array_member (chunk, "choices");
  return json_array_get_length (c) ? json_array_get_object_element (c, 0) : NULL;
}

/* A non-streamed answer's text. */
static char *
answer_text (JsonObject *o, gboolean chat, const char **finish)
{
  JsonObject *c = first_choice (o);
  *finish = json_object_get_string_member (c, "finish_reason");
  if (chat)
    return g_strdup (json_object_get_string_member (json_object_get_object_member (c, "message"), "content"));
  return g_strdup (json_object_get_string_member (c, "text"));
}

/* Checks a stream's framing and returns its text and finish reason. */
static char *
stream_text (const char *body, gboolean chat, gboolean usage, char **finish)
{
  g_autoptr(GPtrArray) ev = sse_events (body);
  g_autoptr(GString) text = g_string_new (NULL);
  g_autofree char *id = NULL;
  guint n_finish = 0, last = ev->len - 1;

  g_assert_cmpstr (g_ptr_array_index (ev, last), ==, "[DONE]");
  *finish = NULL;
  for (guint i = 0; i < last; i++)
    {
      g_autoptr(JsonObject) o = parse_object (g_ptr_array_index (ev, i));
      JsonObject *c = first_choice (o);
      gboolean usage_chunk = usage && i == last - 1;

      g_assert_false (json_object_has_member (o, "error"));
      g_assert_cmpstr (json_object_get_string_member (o, "object"), ==,
                       chat ? "chat.completion.chunk" : "text_completion");
      if (id == NULL)
        id = g_strdup (json_object_get_string_member (o, "id"));
      g_assert_cmpstr (json_object_get_string_member (o, "id"), ==, id);
      g_assert_true (json_object_has_member (o, "created"));
      if (usage)
        {
          /* OpenAI: "usage":null on every chunk but the last, which has
           * "choices":[] and the counts. */
          g_assert_true (json_object_has_member (o, "usage"));
          if (usage_chunk)
            {
              JsonObject *u = json_object_get_object_member (o, "usage");
              g_assert_null (c);
              g_assert_cmpint (json_object_get_int_member (u, "total_tokens"), ==,
                               json_object_get_int_member (u, "prompt_tokens")
                               + json_object_get_int_member (u, "completion_tokens"));
              g_assert_cmpint (json_object_get_int_member (u, "prompt_tokens"), >, 0);
              continue;
            }
          g_assert_true (json_object_get_null_member (o, "usage"));
        }
      else
        g_assert_false (json_object_has_member (o, "usage"));
      g_assert_nonnull (c);
      g_assert_cmpint (json_object_get_int_member (c, "index"), ==, 0);
      if (chat)
        {
          JsonObject *d = json_object_get_object_member (c, "delta");
          /* The role first, and only there. */
          g_assert_true (json_object_has_member (d, "role") == (i == 0));
          if (i == 0)
            g_assert_cmpstr (json_object_get_string_member (d, "role"), ==, "assistant");
          if (json_object_has_member (d, "content"))
            g_string_append (text, json_object_get_string_member (d, "content"));
        }
      else
        g_string_append (text, json_object_get_string_member (c, "text"));
      if (!json_object_get_null_member (c, "finish_reason"))
        {
          JsonObject *u = json_object_get_object_member (o, "unmask");
          n_finish++;
          *finish = g_strdup (json_object_get_string_member (c, "finish_reason"));
          g_assert_cmpstr (json_object_get_string_member (u, "type"), ==, "done");
          g_assert_cmpint (json_object_get_int_member (u, "steps_run"), >, 0);
          /* Only the usage chunk may follow. */
          g_assert_cmpuint (i, ==, last - (usage ? 2 : 1));
        }
    }
  g_assert_cmpuint (n_finish, ==, 1);
  return g_string_free (g_steal_pointer (&text), FALSE);
}

/* ---- tests ---- */

static void
test_stream_shape (void)
{
  Home *home = home_new (4);
  const char *req = "\"max_tokens\":32,\"seed\":5,\"temperature\":0.5,\"unmask\":{\"steps\":16,\"block_length\":16}";
  g_autofree char *plain = g_strdup_printf ("{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],%s}", req);
  g_autofree char *streamed = g_strdup_printf ("{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],%s,"
                                               "\"stream\":true,\"stream_options\":{\"include_usage\":true}}", req);
  guint status;
  g_autofree char *a = request (home, "/v1/chat/completions", plain, &status);
  g_autoptr(JsonObject) ao = NULL;
  g_autofree char *b = NULL, *text = NULL, *stext = NULL, *sfinish = NULL;
  const char *finish;

  g_assert_cmpuint (status, ==, 200);
  ao = parse_object (a);
  text = answer_text (ao, TRUE, &finish);
  b = request (home, "/v1/chat/completions", streamed, &status);
  g_assert_cmpuint (status, ==, 200);
  stext = stream_text (b, TRUE, TRUE, &sfinish);
  g_assert_cmpstr (stext, ==, text);
  g_assert_cmpstr (sfinish, ==, finish);
  home_free (home);
}

/* The tokens the text @cut takes: the fewest leading @ids whose text
 * reaches its length (the last may run past it, into a stop string). */
static int
tokens_covering (Home *home, JsonArray *ids, const char *cut)
{
  UmModel *model = um_engine_get_model (um_generator_get_engine (home->gen));
  g_autoptr(GArray) v = um_test_json_ids (ids);
  gsize want = strlen (cut);

  for (guint n = 0; n <= v->len; n++)
    {
      g_autofree char *t = um_tokenizer_decode (model->tokenizer, (const gint32 *) (gpointer) v->data, (int) n, TRUE,
                                                NULL);
      if (strlen (t) >= want)
        return (int) n;
    }
  g_assert_not_reached ();
  return -1;
}

static gint64
completion_tokens (JsonObject *o)
{
  return json_object_get_int_member (json_object_get_object_member (o, "usage"), "completion_tokens");
}

/* A stop string cuts both the same way, whether found streaming (the
 * stream ends early) or at the end, and the usage counts the tokens of
 * the answer given, not of the generation. The stop string is taken from
 * the answer itself, so it is there whatever the model says. */
static void
test_stop (void)
{
  Home *home = home_new (4);
  const char *req = "\"prompt\":\"Hello\",\"max_tokens\":64,\"seed\":7,\"temperature\":0.5,"
                    "\"unmask\":{\"steps\":32,\"block_length\":16";
  g_autofree char *plain = g_strdup_printf ("{%s,\"return_trace\":true}}", req);
  guint status;
  g_autofree char *a = request (home, "/v1/completions", plain, &status);
  g_autoptr(JsonObject) ao = parse_object (a);
  JsonArray *ids = json_object_get_array_member (json_object_get_object_member (ao, "unmask"), "token_ids");
  const char *finish;
  g_autofree char *full = answer_text (ao, FALSE, &finish);
  glong n_chars = g_utf8_strlen (full, -1);
  g_autofree char *stop = NULL, *cut = NULL;
  g_autoptr(JsonBuilder) jb = json_builder_new ();
  g_autoptr(JsonGenerator) jg = json_generator_new ();
  g_autoptr(JsonNode) jn = NULL;
  g_autofree char *stop_json = NULL;
  int want_tokens;

  g_assert_cmpuint (status, ==, 200);
  /* 64 tokens of a byte-level BPE: far more than 8 characters. */
  g_assert_cmpint (n_chars, >=, 8);
  /* Two characters from the middle; the answer is cut at their first
   * appearance, which may be earlier. */
  stop = g_utf8_substring (full, n_chars / 2, n_chars / 2 + 2);
  cut = g_strndup (full, strstr (full, stop) - full);
  want_tokens = tokens_covering (home, ids, cut);
  g_assert_cmpint (want_tokens, <, completion_tokens (ao));
  json_builder_begin_array (jb);
  json_builder_add_string_value (jb, "zzzzzz");
  json_builder_add_string_value (jb, stop);
  json_builder_end_array (jb);
  jn = json_builder_get_root (jb);
  json_generator_set_root (jg, jn);
  stop_json = json_generator_to_data (jg, NULL);
  g_test_message ("stop %s after %d of %" G_GINT64_FORMAT " tokens", stop_json, want_tokens, completion_tokens (ao));
  for (int streaming = 0; streaming < 2; streaming++)
    {
      g_autofree char *body = g_strdup_printf ("{%s},\"stop\":%s%s}", req, stop_json,
                                               streaming ? ",\"stream\":true,\"stream_options\":{\"include_usage\":true}"
                                                         : "");
      g_autofree char *r = request (home, "/v1/completions", body, &status);
      g_autofree char *text = NULL, *sfinish = NULL;
      gint64 used;

      g_assert_cmpuint (status, ==, 200);
      if (streaming)
        {
          g_autoptr(GPtrArray) ev = sse_events (r);
          g_autoptr(JsonObject) last = parse_object (g_ptr_array_index (ev, ev->len - 2));
          text = stream_text (r, FALSE, TRUE, &sfinish);
          used = completion_tokens (last);
        }
      else
        {
          g_autoptr(JsonObject) o = parse_object (r);
          text = answer_text (o, FALSE, &finish);
          sfinish = g_strdup (finish);
          used = completion_tokens (o);
        }
      g_test_message ("%s: %" G_GINT64_FORMAT " completion tokens", streaming ? "stream" : "plain", used);
      g_assert_cmpstr (text, ==, cut);
      g_assert_cmpstr (sfinish, ==, "stop");
      g_assert_cmpint (used, ==, want_tokens);
    }
  home_free (home);
}

typedef struct {
  UmEngine     *engine;
  GCancellable *cancel;
  gint          stepped;
} Busy;

static void
busy_step (const UmStepEvent *ev, gpointer data)
{
  g_atomic_int_set (&((Busy *) data)->stepped, 1);
}

static gpointer
busy_thread (gpointer data)
{
  Busy *b = data;
  UmGenRequest req;
  g_autoptr(GError) error = NULL;
  UmGenResult *res;

  um_gen_request_init (&req);
  req.prompt = "Hello";
  um_gen_params_init (&req.params);
  req.params.gen_length = 2048;
  req.params.block_length = 2048;
  req.params.steps = 2048;
  res = um_engine_generate (b->engine, &req, busy_step, b, b->cancel, &error);
  um_gen_result_free (res);
  return NULL;
}

/* An error after a stream has started goes in band, with OpenAI's
 * envelope: its "code" a string or null, never a number. The error here:
 * the engine is generating for someone else (a direct caller). */
static void
test_stream_error (void)
{
  Home *home = home_new (4);
  Busy b = { um_generator_get_engine (home->gen), g_cancellable_new (), 0 };
  GThread *t = g_thread_new ("busy", busy_thread, &b);
  const char *body = "{\"prompt\":\"Hello\",\"max_tokens\":16,\"stream\":true}";
  g_autofree char *r = NULL;
  g_autoptr(GPtrArray) ev = NULL;
  gboolean seen = FALSE;
  guint status;

  while (!g_atomic_int_get (&b.stepped))
    g_usleep (1000);
  r = request (home, "/v1/completions", body, &status);
  g_cancellable_cancel (b.cancel);
  g_thread_join (t);
  g_object_unref (b.cancel);
  g_assert_cmpuint (status, ==, 200);
  ev = sse_events (r);
  g_assert_cmpstr (g_ptr_array_index (ev, ev->len - 1), ==, "[DONE]");
  for (guint i = 0; i + 1 < ev->len; i++)
    {
      g_autoptr(JsonObject) o = parse_object (g_ptr_array_index (ev, i));
      JsonObject *e;
      JsonNode *code;

      if (!json_object_has_member (o, "error"))
        continue;
      e = json_object_get_object_member (o, "error");
      code = json_object_get_member (e, "code");
      g_test_message ("in-band error: %s", json_object_get_string_member (e, "message"));
      g_assert_nonnull (code);
      g_assert_true (JSON_NODE_HOLDS_NULL (code) || json_node_get_value_type (code) == G_TYPE_STRING);
      g_assert_cmpstr (json_object_get_string_member (e, "type"), ==, "server_error");
      g_assert_true (JSON_NODE_HOLDS_NULL (json_object_get_member (e, "param")));
      seen = TRUE;
    }
  g_assert_true (seen);
  home_free (home);
}

/* The server's end of the client's connection @s, found among this
 * process's descriptors (the server runs here). */
static int
server_fd_of (GSocket *s)
{
  struct sockaddr_in mine, peer;
  socklen_t len = sizeof mine;

  g_assert_cmpint (getsockname (g_socket_get_fd (s), (struct sockaddr *) &mine, &len), ==, 0);
  for (int tries = 0; tries < 200; tries++)
    {
      for (int fd = 3; fd < 4096; fd++)
        {
          struct sockaddr_in a;
          socklen_t l = sizeof peer;
          if (fd == g_socket_get_fd (s) || getpeername (fd, (struct sockaddr *) &peer, &l) != 0
              || peer.sin_family != AF_INET)
            continue;
          l = sizeof a;
          if (peer.sin_port == mine.sin_port && getsockname (fd, (struct sockaddr *) &a, &l) == 0
              && a.sin_port != mine.sin_port)
            return fd;
        }
      g_usleep (10000);
    }
  g_error ("the server's end of the connection was not found");
  return -1;
}

static gboolean
wait_for (gint *flag, double seconds)
{
  gint64 end = g_get_monotonic_time () + (gint64) (seconds * G_USEC_PER_SEC);
  while (!g_atomic_int_get (flag))
    {
      if (g_get_monotonic_time () > end)
        return FALSE;
      g_usleep (2000);
    }
  return TRUE;
}

static gboolean
noop (gpointer data)
{
  return G_SOURCE_REMOVE;
}

static void
test_lagging_socket (void)
{
  Home *home = home_new (4);
  const char *req = "\"prompt\":\"Hello\",\"max_tokens\":256,\"seed\":3,\"temperature\":0.8,"
                    "\"unmask\":{\"steps\":256,\"block_length\":256";
  g_autofree char *traced = g_strdup_printf ("{%s,\"return_trace\":true}}", req);
  g_autofree char *streamed = g_strdup_printf ("{%s,\"stream_steps\":\"diff\"},\"stream\":true}", req);
  guint status;
  g_autofree char *a = request (home, "/v1/completions", traced, &status);
  g_autoptr(JsonObject) ao = parse_object (a);
  JsonObject *trace = json_object_get_object_member (ao, "unmask");
  JsonArray *want_ids = json_object_get_array_member (trace, "token_ids");
  JsonArray *want_at = json_object_get_array_member (trace, "unmasked_at_step");
  g_autoptr(GSocket) s = NULL;
  g_autofree char *body = NULL;
  g_autoptr(GPtrArray) ev = NULL;
  g_autofree gint64 *ids = NULL;
  g_autofree int *lo = NULL, *hi = NULL;
  int small = 4096, next = 0, merged = 0, c = 0, steps = 0;

  g_assert_cmpuint (status, ==, 200);
  /* The first generation's last notifications are over before the flags
   * are reset: the queue is empty, and a call through the home context
   * comes after anything it still had to run. */
  home_wait_counts (home, 0, 0, 30);
  home_call (home, noop, NULL);
  g_atomic_int_set (&home->seen_running, 0);
  g_atomic_int_set (&home->idle_after_run, 0);
  /* Small buffers on both ends: a few KB of a ~100 KB stream fit. */
  s = client_connect (home, small);
  g_assert_cmpint (setsockopt (server_fd_of (s), SOL_SOCKET, SO_SNDBUF, &small, sizeof small), ==, 0);
  client_send (s, "/v1/completions", streamed);
  /* Nothing read: the generation ends all the same. */
  g_assert_true (wait_for (&home->idle_after_run, 60));
  g_usleep (200000);
  body = client_read (s, &status);
  g_assert_cmpuint (status, ==, 200);
  ev = sse_events (body);
  for (guint i = 0; i + 1 < ev->len; i++)
    {
      g_autoptr(JsonObject) o = parse_object (g_ptr_array_index (ev, i));
      JsonObject *u = json_object_get_object_member (o, "unmask");
      int first, step;

      if (u == NULL || strcmp (json_object_get_string_member (u, "type"), "step") != 0)
        continue;
      first = (int) json_object_get_int_member (u, "first_step");
      step = (int) json_object_get_int_member (u, "step");
      steps = (int) json_object_get_int_member (u, "steps");
      /* Every step once, in order: merged steps are a range. */
      g_assert_cmpint (first, ==, next);
      g_assert_cmpint (step, >=, first);
      merged += step > first;
      next = step + 1;
      if (json_object_has_member (u, "canvas"))
        {
          JsonArray *canvas = json_object_get_array_member (u, "canvas");
          g_assert_cmpint (first, ==, 0);   /* the keyframe is the first step chunk */
          c = (int) json_array_get_length (canvas);
          g_assert_cmpint (c, ==, json_object_get_int_member (u, "canvas_len"));
          ids = g_new (gint64, c);
          lo = g_new (int, c);
          hi = g_new (int, c);
          for (int k = 0; k < c; k++)
            {
              JsonNode *e = json_array_get_element (canvas, k);
              ids[k] = JSON_NODE_HOLDS_NULL (e) ? -1 : json_array_get_int_element (json_node_get_array (e), 0);
              lo[k] = -1;   /* fixed before step 0, or committed by this step */
              hi[k] = JSON_NODE_HOLDS_NULL (e) ? -1 : step;
            }
        }
      else
        {
          JsonArray *changes = json_object_get_array_member (u, "changes");
          g_assert_nonnull (ids);
          for (guint k = 0; k < json_array_get_length (changes); k++)
            {
              JsonArray *ch = json_array_get_array_element (changes, k);
              int pos = (int) json_array_get_int_element (ch, 0);
              g_assert_cmpint (pos, >=, 0);
              g_assert_cmpint (pos, <, c);
              g_assert_cmpint (ids[pos], ==, -1);   /* committed once, never remasked */
              ids[pos] = json_array_get_int_element (ch, 1);
              lo[pos] = first;
              hi[pos] = step;
            }
        }
    }
  g_assert_cmpint (next, ==, steps);
  /* The socket lagged, so steps were merged into fewer chunks. */
  g_assert_cmpint (merged, >, 0);
  /* The canvas rebuilt from the keyframe and the diffs is the trace's,
   * each position committed within its chunk's step range. */
  g_assert_cmpint (c, ==, (int) json_array_get_length (want_ids));
  for (int k = 0; k < c; k++)
    {
      int at = (int) json_array_get_int_element (want_at, k);
      g_assert_cmpint (ids[k], ==, json_array_get_int_element (want_ids, k));
      g_assert_cmpint (at, >=, lo[k]);
      g_assert_cmpint (at, <=, hi[k]);
    }
  if (g_test_verbose ())
    g_printerr ("%d steps, %d chunks merged several\n", steps, merged);
  home_free (home);
}

static const char *long_req = "{\"prompt\":\"Hello\",\"max_tokens\":2048,\"unmask\":{\"steps\":2048,\"block_length\":2048}%s}";

static void
test_disconnect (void)
{
  Home *home = home_new (4);
  g_autofree char *plain = g_strdup_printf (long_req, "");
  g_autofree char *streamed = g_strdup_printf (long_req, ",\"stream\":true");
  GSocket *running, *queued, *queued_stream;
  double t;

  running = client_connect (home, 0);
  client_send (running, "/v1/completions", plain);
  home_wait_counts (home, 1, 0, 30);
  queued = client_connect (home, 0);
  client_send (queued, "/v1/completions", plain);
  queued_stream = client_connect (home, 0);
  client_send (queued_stream, "/v1/completions", streamed);
  home_wait_counts (home, 1, 2, 30);
  /* Queued clients leave: dropped before their turn. */
  g_object_unref (queued);
  g_object_unref (queued_stream);
  t = home_wait_counts (home, 1, 0, 5);
  g_assert_cmpfloat (t, <, 2.0);
  /* The running one leaves: the engine stops within a step (the server
   * looks every 100 ms). */
  g_object_unref (running);
  t = home_wait_counts (home, 0, 0, 5);
  if (g_test_verbose ())
    g_printerr ("engine free %.3f s after the client left\n", t);
  g_assert_cmpfloat (t, <, 2.0);

  /* A streaming client leaving mid-answer, the same. */
  running = client_connect (home, 0);
  client_send (running, "/v1/completions", streamed);
  home_wait_counts (home, 1, 0, 30);
  g_usleep (100000);
  g_object_unref (running);
  t = home_wait_counts (home, 0, 0, 5);
  g_assert_cmpfloat (t, <, 2.0);
  home_free (home);
}

static gboolean
sleep_then_free (gpointer data)
{
  Home *home = data;
  /* The home context is busy: the server's admissions wait here. */
  g_usleep (500000);
  home_free_server (home);
  return G_SOURCE_REMOVE;
}

static void
test_stop_with_admissions_pending (void)
{
  Home *home = home_new (4);
  g_autofree char *plain = g_strdup_printf (long_req, "");
  GSocket *s[3];
  HomeCall *c;

  c = home_call_async (home, sleep_then_free, home);
  for (int i = 0; i < 3; i++)
    {
      s[i] = client_connect (home, 0);
      client_send (s[i], "/v1/completions", plain);
    }
  home_wait (c);
  /* The server is gone: every client sees its connection closed. */
  for (int i = 0; i < 3; i++)
    {
      char buf[256];
      gssize n;
      while ((n = g_socket_receive (s[i], buf, sizeof buf, NULL, NULL)) > 0)
        ;
      g_object_unref (s[i]);
    }
  home_free (home);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/server/stream-shape", test_stream_shape);
  g_test_add_func ("/server/stop", test_stop);
  g_test_add_func ("/server/stream-error", test_stream_error);
  g_test_add_func ("/server/lagging-socket", test_lagging_socket);
  g_test_add_func ("/server/disconnect", test_disconnect);
  g_test_add_func ("/server/stop-with-admissions-pending", test_stop_with_admissions_pending);
  return g_test_run ();
}

/* test-remote-generator.c — UmRemoteGenerator against a scripted server in
 * this process (libsoup, 127.0.0.1, a free port): what it sends (endpoint,
 * the OpenAI fields and the "unmask" object), models listed and described
 * (with the fallback for servers without GET /v1/models/{id}), generations
 * from an Unmask and from another server, and every way a server fails:
 * HTTP errors (503 → busy), an error after the 200, a connection cut in the
 * middle, silence (the read timeout), an address that is no server. A
 * cancelled generation closes its connection: the server sees it go. The
 * real server (unmask-cli serve) is exercised by test-remote-server. */
#include <libsoup/soup.h>
#include <string.h>

#include "um-error.h"
#include "um-remote-generator.h"
#include "um-remote-private.h"

typedef struct {
  SoupServer        *server;
  char              *url;             /* http://127.0.0.1:PORT */
  char              *key;             /* required when set */
  char              *last_path;
  char              *last_body;
  GPtrArray         *held;            /* paused messages, never answered */
  SoupServerMessage *slow;            /* the streaming one that never ends */
  guint              slow_source;
  int                slow_chunks;
  gboolean           slow_finished;
  char              *elsewhere;       /* a second server's URL, where redirects point */
  GPtrArray         *elsewhere_seen;  /* "PATH AUTHORIZATION" of each request it got */
} Fake;

static Fake fake;

static const char *um_model =
  "{\"id\":\"um\",\"object\":\"model\",\"created\":1,\"owned_by\":\"unmask\","
  "\"unmask\":{\"arch\":\"llada\",\"display_name\":\"Unmask demo\",\"max_seq_len\":4096,\"mask_id\":99,\"eos_id\":2,"
  "\"eot_id\":3,\"defaults\":{\"gen_length\":64,\"steps\":16,\"block_length\":8,\"temperature\":0.5,"
  "\"remasking\":\"random\",\"cfg_scale\":0,\"cache\":\"none\",\"threshold\":0,\"factor\":0,\"alg\":\"entropy\","
  "\"eps\":0.001,\"alg_temp\":0,\"top_p\":0,\"top_k\":0,\"greedy\":false}}}";
static const char *plain_model = "{\"id\":\"plain\",\"object\":\"model\",\"created\":1,\"owned_by\":\"someone\"}";

/* Two steps over a canvas of 2 after a prompt of 2. */
static const char *um_stream =
  "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n"
  "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":null}],\"unmask\":{\"type\":\"step\",\"step\":0,"
  "\"first_step\":0,\"steps\":2,\"block\":0,\"n_blocks\":1,\"n_masked\":1,\"prompt_len\":2,\"canvas_len\":2,"
  "\"elapsed_ms\":5,\"canvas\":[null,[21,\"b\",0.5]]}}\n\n"
  ":\n\n"
  "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ab\"},\"finish_reason\":null}],\"unmask\":{\"type\":\"step\","
  "\"step\":1,\"first_step\":1,\"steps\":2,\"block\":0,\"n_blocks\":1,\"n_masked\":0,\"prompt_len\":2,\"canvas_len\":2,"
  "\"elapsed_ms\":9,\"changes\":[[0,20,\"a\",0.75]]}}\n\n"
  "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}],"
  "\"unmask\":{\"type\":\"done\",\"steps_run\":2,\"forward_passes\":2,\"elapsed_ms\":10}}\n\n"
  "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":2,\"total_tokens\":4}}\n\n"
  "data: [DONE]\n\n";

static const char *plain_stream =
  "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n"
  "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n"
  "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" there\"},\"finish_reason\":\"stop\"}]}\n\n"
  "data: [DONE]\n\n";

static void
respond (SoupServerMessage *msg, guint status, const char *type, const char *body)
{
  soup_server_message_set_status (msg, status, NULL);
  soup_server_message_set_response (msg, type, SOUP_MEMORY_COPY, body, strlen (body));
}

static void
respond_error (SoupServerMessage *msg, guint status, const char *message)
{
  g_autofree char *body = g_strdup_printf ("{\"error\":{\"message\":\"%s\",\"type\":\"x\",\"param\":null,"
                                           "\"code\":null}}", message);
  respond (msg, status, "application/json", body);
}

static void
begin_stream (SoupServerMessage *msg)
{
  SoupMessageHeaders *h = soup_server_message_get_response_headers (msg);

  soup_server_message_set_status (msg, 200, NULL);
  soup_message_headers_set_content_type (h, "text/event-stream", NULL);
  soup_message_headers_set_encoding (h, SOUP_ENCODING_CHUNKED);
}

static void
append (SoupServerMessage *msg, const char *text)
{
  soup_message_body_append (soup_server_message_get_response_body (msg), SOUP_MEMORY_COPY, text, strlen (text));
  soup_server_message_unpause (msg);
}

static gboolean
on_slow_tick (gpointer user_data)
{
  append (fake.slow, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"finish_reason\":null}]}\n\n");
  fake.slow_chunks++;
  return G_SOURCE_CONTINUE;
}

static void
on_slow_finished (SoupServerMessage *msg, gpointer user_data)
{
  fake.slow_finished = TRUE;
  g_clear_handle_id (&fake.slow_source, g_source_remove);
  fake.slow = NULL;
}

/* "cut": the connection closed after one chunk, as a killed server's is. */
static gboolean
on_cut (gpointer user_data)
{
  SoupServerMessage *msg = user_data;
  g_autoptr(GIOStream) conn = soup_server_message_steal_connection (msg);
  g_io_stream_close (conn, NULL, NULL);
  g_object_unref (msg);
  return G_SOURCE_REMOVE;
}

static void
on_request (SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *query, gpointer user_data)
{
  const char *method = soup_server_message_get_method (msg);
  const char *auth = soup_message_headers_get_one (soup_server_message_get_request_headers (msg), "Authorization");
  SoupMessageBody *body = soup_server_message_get_request_body (msg);

  g_free (fake.last_path);
  fake.last_path = g_strdup (path);
  if (fake.key != NULL)
    {
      g_autofree char *want = g_strdup_printf ("Bearer %s", fake.key);
      if (g_strcmp0 (auth, want) != 0)
        {
          respond_error (msg, 401, "Invalid API Key");
          return;
        }
    }
  if (g_str_equal (method, "GET"))
    {
      if (g_str_equal (path, "/v1/models"))
        {
          g_autofree char *list = g_strdup_printf ("{\"object\":\"list\",\"data\":[%s,7,%s]}", um_model, plain_model);
          respond (msg, 200, "application/json", list);
        }
      else if (g_str_equal (path, "/v1/models/um"))
        respond (msg, 200, "application/json", um_model);
      else if (g_str_equal (path, "/v1/models/garbage"))
        respond (msg, 200, "application/json", "{\"id\":");
      else if (g_str_equal (path, "/v1/models/moved") && fake.elsewhere != NULL)
        {
          /* Somewhere else: another host, as a hostile or misconfigured
           * server would send the client (and its key). */
          g_autofree char *to = g_strdup_printf ("%s/v1/models/moved", fake.elsewhere);
          soup_message_headers_replace (soup_server_message_get_response_headers (msg), "Location", to);
          respond (msg, 308, "text/plain", "moved");
        }
      else
        respond_error (msg, 404, "no such thing");
      return;
    }
  g_free (fake.last_body);
  fake.last_body = g_strndup (body->data, body->length);
  if (strstr (fake.last_body, "MARK-busy"))
    respond_error (msg, 503, "the engine is busy: 8 requests already waiting");
  else if (strstr (fake.last_body, "MARK-bad"))
    respond_error (msg, 400, "steps must be positive");
  else if (strstr (fake.last_body, "MARK-inband"))
    {
      begin_stream (msg);
      append (msg, "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"},\"finish_reason\":null}]}\n\n"
                   "data: {\"error\":{\"message\":\"NaN in the logits\",\"type\":\"server_error\"}}\n\n");
      soup_message_body_complete (soup_server_message_get_response_body (msg));
    }
  else if (strstr (fake.last_body, "MARK-hang"))
    {
      /* Not even headers. */
      soup_server_message_pause (msg);
      g_ptr_array_add (fake.held, g_object_ref (msg));
    }
  else if (strstr (fake.last_body, "MARK-silent"))
    {
      /* Headers, then nothing (chunked with no chunk pauses). */
      begin_stream (msg);
      g_ptr_array_add (fake.held, g_object_ref (msg));
    }
  else if (strstr (fake.last_body, "MARK-cut"))
    {
      begin_stream (msg);
      append (msg, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"finish_reason\":null}]}\n\n");
      g_timeout_add (100, on_cut, g_object_ref (msg));
    }
  else if (strstr (fake.last_body, "MARK-slow"))
    {
      begin_stream (msg);
      fake.slow = msg;
      fake.slow_finished = FALSE;
      fake.slow_chunks = 0;
      g_signal_connect (msg, "finished", G_CALLBACK (on_slow_finished), NULL);
      fake.slow_source = g_timeout_add (20, on_slow_tick, NULL);
    }
  else if (strstr (fake.last_body, "MARK-moved") && fake.elsewhere != NULL)
    {
      g_autofree char *to = g_strdup_printf ("%s/v1/chat/completions", fake.elsewhere);
      soup_message_headers_replace (soup_server_message_get_response_headers (msg), "Location", to);
      respond (msg, 303, "text/plain", "moved");
    }
  else if (strstr (fake.last_body, "\"model\":\"plain\""))
    respond (msg, 200, "text/event-stream", plain_stream);
  else
    respond (msg, 200, "text/event-stream", um_stream);
}

static void
fake_start (void)
{
  g_autoptr(GError) error = NULL;
  GSList *uris;

  fake.server = soup_server_new (NULL, NULL);
  fake.held = g_ptr_array_new_with_free_func (g_object_unref);
  soup_server_add_handler (fake.server, NULL, on_request, NULL, NULL);
  g_assert_true (soup_server_listen_local (fake.server, 0, SOUP_SERVER_LISTEN_IPV4_ONLY, &error));
  g_assert_no_error (error);
  uris = soup_server_get_uris (fake.server);
  fake.url = g_strdup_printf ("http://127.0.0.1:%d", g_uri_get_port (uris->data));
  g_slist_free_full (uris, (GDestroyNotify) g_uri_unref);
}

/* ---- waiting on the main loop ---- */

typedef struct {
  gboolean           done;
  GObject           *object;
  GPtrArray         *models;
  UmGeneratorResult *res;
  GError            *error;
  int                n_steps;
  GString           *steps;
  GCancellable      *cancel_at;     /* cancelled at the third step */
  gint64             cancelled_at;
} Wait;

static gboolean
on_guard (gpointer user_data)
{
  g_error ("the test waited more than 30 s: something hangs");
  return G_SOURCE_REMOVE;
}

static void
spin (gboolean *flag)
{
  guint guard = g_timeout_add_seconds (30, on_guard, NULL);
  while (!*flag)
    g_main_context_iteration (NULL, TRUE);
  g_source_remove (guard);
}

static void
on_new (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Wait *w = user_data;
  w->object = G_OBJECT (um_remote_generator_new_finish (result, &w->error));
  w->done = TRUE;
}

static void
on_listed (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Wait *w = user_data;
  w->models = um_remote_list_models_finish (result, &w->error);
  w->done = TRUE;
}

static void
on_generated (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Wait *w = user_data;
  w->res = um_generator_generate_finish (UM_GENERATOR (source), result, &w->error);
  w->done = TRUE;
}

static void
on_step (const UmStepEvent *ev, gpointer user_data)
{
  Wait *w = user_data;

  if (w->steps == NULL)
    w->steps = g_string_new (NULL);
  g_string_append_printf (w->steps, "%d:", ev->step);
  for (int i = 0; i < ev->n_committed; i++)
    g_string_append_printf (w->steps, " %d=%d", ev->positions[i], ev->ids[i]);
  g_string_append (w->steps, " |");
  for (int i = 0; i < ev->seq_len; i++)
    g_string_append_printf (w->steps, " %d", ev->canvas[i]);
  g_string_append_c (w->steps, '\n');
  if (++w->n_steps == 3 && w->cancel_at != NULL)
    {
      w->cancelled_at = g_get_monotonic_time ();
      g_cancellable_cancel (w->cancel_at);
    }
}

static void
wait_clear (Wait *w)
{
  g_clear_object (&w->object);
  g_clear_pointer (&w->models, g_ptr_array_unref);
  g_clear_pointer (&w->res, um_generator_result_free);
  g_clear_error (&w->error);
  if (w->steps)
    g_string_free (w->steps, TRUE);
  memset (w, 0, sizeof *w);
}

static UmGenerator *
connect_to (const char *url, const char *key, const char *model)
{
  Wait w = { 0 };
  UmGenerator *gen;

  um_remote_generator_new_async (url, key, model, NULL, on_new, &w);
  spin (&w.done);
  g_assert_no_error (w.error);
  gen = UM_GENERATOR (g_steal_pointer (&w.object));
  wait_clear (&w);
  return gen;
}

static void
generate (UmGenerator *gen, const UmGeneratorRequest *req, GCancellable *cancel_at_third, Wait *w)
{
  memset (w, 0, sizeof *w);
  w->cancel_at = cancel_at_third;
  um_generator_generate_async (gen, req, on_step, w, cancel_at_third, on_generated, w);
  spin (&w->done);
}

static JsonObject *
last_body (JsonNode **root)
{
  *root = json_from_string (fake.last_body, NULL);
  g_assert_nonnull (*root);
  return json_node_get_object (*root);
}

/* ---- tests ---- */

static void
test_list (void)
{
  Wait w = { 0 };
  UmRemoteModel *m;

  fake.key = g_strdup ("k1");
  um_remote_list_models_async (fake.url, NULL, NULL, on_listed, &w);
  spin (&w.done);
  g_assert_error (w.error, UM_ERROR, UM_ERROR_REMOTE);
  g_assert_nonnull (strstr (w.error->message, "401"));
  g_assert_nonnull (strstr (w.error->message, "Invalid API Key"));
  wait_clear (&w);

  /* With the key, and a base URL given with /v1/ and spaces. */
  {
    g_autofree char *url = g_strdup_printf ("  %s/v1/ ", fake.url);
    um_remote_list_models_async (url, "k1", NULL, on_listed, &w);
  }
  spin (&w.done);
  g_assert_no_error (w.error);
  g_assert_cmpstr (fake.last_path, ==, "/v1/models");
  g_assert_cmpuint (w.models->len, ==, 2);   /* the 7 in the list is skipped */
  m = g_ptr_array_index (w.models, 0);
  g_assert_cmpstr (m->id, ==, "um");
  g_assert_true (m->unmask);
  g_assert_cmpstr (m->arch, ==, "llada");
  m = g_ptr_array_index (w.models, 1);
  g_assert_cmpstr (m->id, ==, "plain");
  g_assert_false (m->unmask);
  g_assert_null (m->arch);
  wait_clear (&w);
  g_clear_pointer (&fake.key, g_free);
}

static void
test_new (void)
{
  g_autoptr(UmGenerator) um = connect_to (fake.url, NULL, "um");
  g_autoptr(UmGenerator) plain = NULL;
  g_autoptr(UmGenerator) first = NULL;
  const UmGeneratorInfo *info = um_generator_get_info (um);
  Wait w = { 0 };

  g_assert_cmpstr (fake.last_path, ==, "/v1/models/um");
  g_assert_cmpstr (info->model_id, ==, "um");
  g_assert_cmpstr (info->display_name, ==, "Unmask demo");
  g_assert_true (info->remote);
  g_assert_cmpint (info->arch, ==, UM_ARCH_LLADA);
  g_assert_cmpuint (info->max_seq_len, ==, 4096);
  g_assert_cmpint (info->mask_id, ==, 99);
  g_assert_cmpint (info->eos_id, ==, 2);
  g_assert_cmpint (info->eot_id, ==, 3);
  g_assert_nonnull (strstr (info->location, fake.url));
  g_assert_cmpstr (um_remote_generator_get_url (UM_REMOTE_GENERATOR (um)), ==, info->location);
  g_assert_null (um_generator_get_engine (um));
  /* The server's defaults, as a recommendation the pages resolve. */
  g_assert_nonnull (info->recommendation);
  g_assert_true (um_gen_layer_has (&info->recommendation->layer, UM_GEN_KEY_STEPS));
  g_assert_cmpint (info->recommendation->layer.params.steps, ==, 16);
  g_assert_cmpint (info->recommendation->layer.params.block_length, ==, 8);
  g_assert_cmpint (info->recommendation->layer.params.remasking, ==, UM_REMASK_RANDOM);
  g_assert_false (um_gen_layer_has (&info->recommendation->layer, UM_GEN_KEY_TOP_P));   /* not LLaDA's */

  /* No GET /v1/models/plain on this server: found in the list. */
  plain = connect_to (fake.url, NULL, "plain");
  info = um_generator_get_info (plain);
  g_assert_cmpstr (fake.last_path, ==, "/v1/models");
  g_assert_cmpstr (info->model_id, ==, "plain");
  g_assert_cmpint (info->mask_id, ==, -1);
  g_assert_cmpuint (info->recommendation->layer.set, ==, 0);

  first = connect_to (fake.url, NULL, NULL);
  g_assert_cmpstr (um_generator_get_info (first)->model_id, ==, "um");

  um_remote_generator_new_async (fake.url, NULL, "nope", NULL, on_new, &w);
  spin (&w.done);
  g_assert_error (w.error, UM_ERROR, UM_ERROR_REMOTE);
  g_assert_nonnull (strstr (w.error->message, "no model “nope”"));
  wait_clear (&w);

  um_remote_generator_new_async (fake.url, NULL, "garbage", NULL, on_new, &w);
  spin (&w.done);
  g_assert_error (w.error, UM_ERROR, UM_ERROR_REMOTE);
  g_assert_nonnull (strstr (w.error->message, "not JSON"));
  wait_clear (&w);
}

static void
test_bad_address (void)
{
  static const char *bad[] = { "", "not a url", "ftp://127.0.0.1/", "http://", "http://127.0.0.1:1/v1?x=1" };
  g_autoptr(GSocketListener) listener = g_socket_listener_new ();
  g_autofree char *refused = NULL;
  Wait w = { 0 };
  guint16 port;

  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      um_remote_generator_new_async (bad[i], NULL, NULL, NULL, on_new, &w);
      spin (&w.done);
      g_assert_error (w.error, UM_ERROR, UM_ERROR_INVALID_PARAM);
      g_assert_null (w.object);
      wait_clear (&w);
    }
  /* A port nobody listens on: a free one, released. */
  port = g_socket_listener_add_any_inet_port (listener, NULL, NULL);
  g_assert_cmpuint (port, >, 0);
  g_socket_listener_close (listener);
  refused = g_strdup_printf ("http://127.0.0.1:%u", port);
  um_remote_generator_new_async (refused, NULL, NULL, NULL, on_new, &w);
  spin (&w.done);
  g_assert_error (w.error, G_IO_ERROR, G_IO_ERROR_CONNECTION_REFUSED);
  g_assert_nonnull (strstr (w.error->message, refused));
  wait_clear (&w);
}

static void
test_generate_unmask (void)
{
  static const gint32 prompt[] = { 5, 6 };
  g_autoptr(UmGenerator) gen = connect_to (fake.url, NULL, "um");
  g_autoptr(JsonNode) root = NULL;
  UmGeneratorRequest req;
  JsonObject *body, *u;
  Wait w;

  um_generator_request_init (&req);
  req.prompt_ids = prompt;
  req.n_prompt_ids = 2;
  req.suffix = "END";
  req.params.gen_length = 2;
  req.params.steps = 2;
  req.params.block_length = 2;
  req.params.temperature = 0.25;
  req.params.seed = 1234567890123ULL;
  req.params.remasking = UM_REMASK_RANDOM;
  req.params.cache = UM_CACHE_PREFIX;
  req.params.threshold = 0.9;
  generate (gen, &req, NULL, &w);
  g_assert_no_error (w.error);
  /* What was sent. */
  g_assert_cmpstr (fake.last_path, ==, "/v1/completions");
  body = last_body (&root);
  g_assert_cmpstr (json_object_get_string_member (body, "model"), ==, "um");
  g_assert_cmpint (json_array_get_length (json_object_get_array_member (body, "prompt")), ==, 2);
  g_assert_cmpint (json_array_get_int_element (json_object_get_array_member (body, "prompt"), 1), ==, 6);
  g_assert_cmpstr (json_object_get_string_member (body, "suffix"), ==, "END");
  g_assert_cmpint (json_object_get_int_member (body, "max_tokens"), ==, 2);
  g_assert_cmpint (json_object_get_int_member (body, "seed"), ==, 1234567890123LL);
  g_assert_cmpfloat_with_epsilon (json_object_get_double_member (body, "temperature"), 0.25, 1e-12);
  g_assert_true (json_object_get_boolean_member (body, "stream"));
  g_assert_true (json_object_get_boolean_member (json_object_get_object_member (body, "stream_options"),
                                                 "include_usage"));
  u = json_object_get_object_member (body, "unmask");
  g_assert_nonnull (u);
  g_assert_cmpstr (json_object_get_string_member (u, "stream_steps"), ==, "diff");
  g_assert_cmpint (json_object_get_int_member (u, "steps"), ==, 2);
  g_assert_cmpint (json_object_get_int_member (u, "block_length"), ==, 2);
  g_assert_cmpstr (json_object_get_string_member (u, "remasking"), ==, "random");
  g_assert_cmpstr (json_object_get_string_member (u, "cache"), ==, "prefix");
  g_assert_cmpfloat_with_epsilon (json_object_get_double_member (u, "threshold"), 0.9, 1e-12);
  /* A LLaDA model: the other families' options are not sent. */
  g_assert_false (json_object_has_member (u, "alg"));
  g_assert_false (json_object_has_member (u, "greedy"));
  /* What came back: the canvas after the prompt, step by step. */
  g_assert_cmpstr (w.steps->str, ==, "0: 3=21 | 5 6 99 21\n1: 2=20 | 5 6 20 21\n");
  g_assert_cmpuint (w.res->ids->len, ==, 2);
  g_assert_cmpint (g_array_index (w.res->ids, gint32, 0), ==, 20);
  g_assert_cmpint (g_array_index (w.res->ids, gint32, 1), ==, 21);
  g_assert_cmpuint (w.res->prompt_ids->len, ==, 2);
  g_assert_cmpstr (w.res->text, ==, "ab");
  g_assert_false (w.res->hit_eos);
  g_assert_cmpint (w.res->completion_tokens, ==, 2);
  g_assert_cmpint (w.res->steps, ==, 2);
  {
    g_autofree char *a = um_generator_token_text (gen, 20);
    g_autofree char *b = um_generator_token_text (gen, 21);
    g_autofree char *none = um_generator_token_text (gen, 5);
    g_assert_cmpstr (a, ==, "a");
    g_assert_cmpstr (b, ==, "b");
    g_assert_null (none);
  }
  wait_clear (&w);
  g_clear_pointer (&root, json_node_unref);

  /* Messages → chat completions; chat text → one user message. */
  {
    UmGenMessage msgs[2] = { { "system", "Be brief." }, { "user", "Hi" } };
    um_generator_request_init (&req);
    req.messages = msgs;
    req.n_messages = 2;
    generate (gen, &req, NULL, &w);
    g_assert_no_error (w.error);
    g_assert_cmpstr (fake.last_path, ==, "/v1/chat/completions");
    body = last_body (&root);
    g_assert_cmpint (json_array_get_length (json_object_get_array_member (body, "messages")), ==, 2);
    g_assert_false (json_object_has_member (body, "prompt"));
    wait_clear (&w);
    g_clear_pointer (&root, json_node_unref);

    um_generator_request_init (&req);
    req.prompt = "Hello";
    req.chat = TRUE;
    generate (gen, &req, NULL, &w);
    g_assert_no_error (w.error);
    g_assert_cmpstr (fake.last_path, ==, "/v1/chat/completions");
    body = last_body (&root);
    {
      JsonObject *m0 = json_array_get_object_element (json_object_get_array_member (body, "messages"), 0);
      g_assert_cmpstr (json_object_get_string_member (m0, "role"), ==, "user");
      g_assert_cmpstr (json_object_get_string_member (m0, "content"), ==, "Hello");
    }
    /* The prompt's ids are not known: the canvas's prompt reads -1. */
    g_assert_true (g_str_has_prefix (w.steps->str, "0: 3=21 | -1 -1 99 21\n"));
    g_assert_cmpuint (w.res->prompt_ids->len, ==, 0);
    wait_clear (&w);
    g_clear_pointer (&root, json_node_unref);
  }

  /* What the API cannot carry is refused, not dropped. */
  {
    UmGenConstraint c = { 0, "cat", NULL, 0 };
    um_generator_request_init (&req);
    req.prompt = "x";
    req.params.constraints = &c;
    req.params.n_constraints = 1;
    generate (gen, &req, NULL, &w);
    g_assert_error (w.error, UM_ERROR, UM_ERROR_UNSUPPORTED);
    wait_clear (&w);
    um_generator_request_init (&req);
    req.prompt = "x";
    req.chat = TRUE;
    req.suffix = "y";
    generate (gen, &req, NULL, &w);
    g_assert_error (w.error, UM_ERROR, UM_ERROR_UNSUPPORTED);
    wait_clear (&w);
  }
}

static void
test_generate_plain (void)
{
  g_autoptr(UmGenerator) gen = connect_to (fake.url, NULL, "plain");
  g_autoptr(JsonNode) root = NULL;
  UmGeneratorRequest req;
  Wait w;

  um_generator_request_init (&req);
  req.prompt = "Say hi";
  req.chat = TRUE;
  req.params.gen_length = 8;
  generate (gen, &req, NULL, &w);
  g_assert_no_error (w.error);
  g_assert_false (json_object_has_member (last_body (&root), "unmask"));
  g_assert_cmpstr (w.res->text, ==, "Hi there");
  g_assert_true (w.res->hit_eos);
  g_assert_cmpuint (w.res->ids->len, ==, 2);
  g_assert_cmpint (w.n_steps, ==, 2);
  for (int i = 0; i < 2; i++)
    {
      g_autofree char *piece = um_generator_token_text (gen, g_array_index (w.res->ids, gint32, i));
      g_assert_cmpstr (piece, ==, i == 0 ? "Hi" : " there");
    }
  wait_clear (&w);
}

static void
expect_failure (UmGenerator *gen, const char *mark, GQuark domain, int code, const char *fragment)
{
  UmGeneratorRequest req;
  Wait w;

  um_generator_request_init (&req);
  req.prompt = mark;
  generate (gen, &req, NULL, &w);
  g_assert_null (w.res);
  g_test_message ("%s: %s", mark, w.error->message);
  g_assert_error (w.error, domain, code);
  if (strstr (w.error->message, fragment) == NULL)
    g_error ("%s: expected “%s” in “%s”", mark, fragment, w.error->message);
  wait_clear (&w);
}

static void
test_failures (void)
{
  g_autoptr(UmGenerator) gen = connect_to (fake.url, NULL, "um");
  gint64 t0;

  expect_failure (gen, "MARK-busy", UM_ERROR, UM_ERROR_BUSY, "8 requests already waiting");
  expect_failure (gen, "MARK-bad", UM_ERROR, UM_ERROR_REMOTE, "400 Bad Request: steps must be positive");
  expect_failure (gen, "MARK-inband", UM_ERROR, UM_ERROR_REMOTE, "NaN in the logits");
  expect_failure (gen, "MARK-cut", UM_ERROR, UM_ERROR_REMOTE, "");
  /* Silence: given up after the read timeout, whether headers came or not. */
  um_remote_generator_set_read_timeout (UM_REMOTE_GENERATOR (gen), 1);
  t0 = g_get_monotonic_time ();
  expect_failure (gen, "MARK-silent", UM_ERROR, UM_ERROR_REMOTE, "did not answer for 1 s");
  expect_failure (gen, "MARK-hang", UM_ERROR, UM_ERROR_REMOTE, "did not answer for 1 s");
  g_assert_cmpint (g_get_monotonic_time () - t0, <, 10 * G_USEC_PER_SEC);
  g_ptr_array_set_size (fake.held, 0);
}

static void
on_elsewhere (SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *query, gpointer user_data)
{
  const char *auth = soup_message_headers_get_one (soup_server_message_get_request_headers (msg), "Authorization");

  g_ptr_array_add (fake.elsewhere_seen, g_strdup_printf ("%s %s", path, auth ? auth : "(no key)"));
  respond (msg, 200, "application/json", um_model);
}

/* A server that answers with a redirect to another host: not followed
 * (the key would go with it), and said so. */
static void
test_redirect (void)
{
  g_autoptr(SoupServer) other = soup_server_new (NULL, NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(UmGenerator) gen = NULL;
  UmGeneratorRequest req;
  GSList *uris;
  Wait w = { 0 };

  soup_server_add_handler (other, NULL, on_elsewhere, NULL, NULL);
  g_assert_true (soup_server_listen_local (other, 0, SOUP_SERVER_LISTEN_IPV4_ONLY, &error));
  uris = soup_server_get_uris (other);
  fake.elsewhere = g_strdup_printf ("http://127.0.0.1:%d", g_uri_get_port (uris->data));
  g_slist_free_full (uris, (GDestroyNotify) g_uri_unref);
  fake.elsewhere_seen = g_ptr_array_new_with_free_func (g_free);
  fake.key = g_strdup ("sk-secret");

  um_remote_generator_new_async (fake.url, "sk-secret", "moved", NULL, on_new, &w);
  spin (&w.done);
  g_test_message ("GET redirected: %s", w.error ? w.error->message : "connected");
  g_assert_cmpuint (fake.elsewhere_seen->len, ==, 0);
  g_assert_error (w.error, UM_ERROR, UM_ERROR_REMOTE);
  g_assert_nonnull (strstr (w.error->message, fake.elsewhere));
  wait_clear (&w);

  gen = connect_to (fake.url, "sk-secret", "um");
  um_generator_request_init (&req);
  req.prompt = "MARK-moved";
  generate (gen, &req, NULL, &w);
  g_test_message ("POST redirected: %s", w.error ? w.error->message : "answered");
  g_assert_cmpuint (fake.elsewhere_seen->len, ==, 0);
  g_assert_error (w.error, UM_ERROR, UM_ERROR_REMOTE);
  g_assert_nonnull (strstr (w.error->message, "redirect"));
  wait_clear (&w);

  g_clear_pointer (&fake.key, g_free);
  g_clear_pointer (&fake.elsewhere, g_free);
  g_clear_pointer (&fake.elsewhere_seen, g_ptr_array_unref);
  soup_server_disconnect (other);
}

static void
test_cancel (void)
{
  g_autoptr(UmGenerator) gen = connect_to (fake.url, NULL, "plain");
  g_autoptr(GCancellable) cancel = g_cancellable_new ();
  UmGeneratorRequest req;
  gint64 t_done;
  guint guard;
  Wait w;

  um_generator_request_init (&req);
  req.prompt = "MARK-slow";
  generate (gen, &req, cancel, &w);
  t_done = g_get_monotonic_time ();
  g_assert_error (w.error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_assert_cmpint (w.n_steps, ==, 3);
  /* At once, not at the next chunk or a timeout. */
  g_assert_cmpint (t_done - w.cancelled_at, <, G_USEC_PER_SEC);
  /* The server sees the client leave (at its next write). */
  guard = g_timeout_add_seconds (30, on_guard, NULL);
  while (!fake.slow_finished)
    g_main_context_iteration (NULL, TRUE);
  g_source_remove (guard);
  g_assert_cmpint (g_get_monotonic_time () - t_done, <, 5 * G_USEC_PER_SEC);
  wait_clear (&w);

  /* The generator still works. */
  req.prompt = "again";
  generate (gen, &req, NULL, &w);
  g_assert_no_error (w.error);
  g_assert_cmpstr (w.res->text, ==, "Hi there");
  wait_clear (&w);
}

int
main (int argc, char **argv)
{
  int ret;

  g_test_init (&argc, &argv, NULL);
  fake_start ();
  g_test_add_func ("/remote-generator/list", test_list);
  g_test_add_func ("/remote-generator/new", test_new);
  g_test_add_func ("/remote-generator/bad-address", test_bad_address);
  g_test_add_func ("/remote-generator/generate-unmask", test_generate_unmask);
  g_test_add_func ("/remote-generator/generate-plain", test_generate_plain);
  g_test_add_func ("/remote-generator/failures", test_failures);
  g_test_add_func ("/remote-generator/cancel", test_cancel);
  g_test_add_func ("/remote-generator/redirect", test_redirect);
  ret = g_test_run ();
  soup_server_disconnect (fake.server);
  g_clear_object (&fake.server);
  g_ptr_array_unref (fake.held);
  g_free (fake.url);
  g_free (fake.last_path);
  g_free (fake.last_body);
  return ret;
}

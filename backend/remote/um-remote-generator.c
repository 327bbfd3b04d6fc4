/* um-remote-generator.c — UmGenerator over HTTP (libsoup 3).
 *
 * Every exchange is one "call": a message sent on the generator's session,
 * its body read in pieces on the home context, under a cancellable that the
 * caller's, the generator's disposal and a silence timer all chain into.
 * Cancelling it makes the pending read fail at once; the body is then
 * dropped unread, which closes the connection (libsoup never reuses a
 * connection whose body was not read to its end), and the server sees the
 * disconnect. The timer ends a call that has heard nothing, not even a
 * ping, for too long (a server stopped or cut off without a FIN). */
#include "um-remote-generator.h"

#include <libsoup/soup.h>
#include <string.h>

#include "config.h"
#include "um-error.h"
#include "um-json.h"
#include "um-remote-private.h"

/* Silence before a call gives up. An Unmask server pings every 15 s
 * (UM_SERVER_DEFAULT_PING_S) while it waits or computes; other servers may
 * not ping at all during a long step, so they get Node's own fetch timeout. */
#define FETCH_TIMEOUT_S        30
#define UNMASK_STREAM_TIMEOUT_S 60
#define OTHER_STREAM_TIMEOUT_S 300
/* How much of an error body is kept (only its message is shown). */
#define MAX_ERROR_BODY         ((gsize) 64 << 10)
#define MAX_MODELS             4096

struct _UmRemoteGenerator
{
  UmGenerator          parent_instance;
  SoupSession         *session;
  char                *base_url;      /* ".../v1" */
  char                *api_key;
  UmGeneratorInfo      info;
  UmGenRecommendation *rec;
  gboolean             unmask;
  UmRemotePieces       pieces;
  guint                read_timeout_s;   /* 0: the defaults above */
  GCancellable        *closing;          /* cancelled on dispose */
};

G_DEFINE_FINAL_TYPE (UmRemoteGenerator, um_remote_generator, UM_TYPE_GENERATOR)

void
um_remote_model_free (UmRemoteModel *m)
{
  if (m == NULL)
    return;
  g_free (m->id);
  g_free (m->arch);
  g_free (m);
}

/* ---- URLs and sessions ---- */

/* "http://host:8765", "http://host:8765/", "http://host:8765/v1/" →
 * "http://host:8765/v1". */
static char *
normalize_base_url (const char *url, GError **error)
{
  g_autofree char *s = g_strstrip (g_strdup (url != NULL ? url : ""));
  g_autoptr(GUri) uri = NULL;
  gsize n = strlen (s);
  const char *scheme;

  while (n > 0 && s[n - 1] == '/')
    s[--n] = '\0';
  uri = g_uri_parse (s, G_URI_FLAGS_NONE, NULL);
  scheme = uri ? g_uri_get_scheme (uri) : NULL;
  if (uri == NULL || g_uri_get_host (uri) == NULL || g_uri_get_host (uri)[0] == '\0'
      || (g_ascii_strcasecmp (scheme, "http") != 0 && g_ascii_strcasecmp (scheme, "https") != 0)
      || g_uri_get_query (uri) != NULL || g_uri_get_fragment (uri) != NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "“%s” is not a server address: give one like http://127.0.0.1:8765", url ? url : "");
      return NULL;
    }
  if (g_str_has_suffix (s, "/v1"))
    return g_steal_pointer (&s);
  return g_strconcat (s, "/v1", NULL);
}

static SoupSession *
new_session (void)
{
  /* libsoup's own I/O timeout (60 s by default) would cut a silent but
   * live stream of a server that does not ping: the calls' own timer
   * decides instead. */
  return soup_session_new_with_options ("user-agent", "unmask/" PACKAGE_VERSION, "timeout", 0, NULL);
}

static SoupMessage *
new_message (const char *method, const char *url, const char *api_key, GBytes *body, GError **error)
{
  SoupMessage *msg = soup_message_new (method, url);
  SoupMessageHeaders *h;

  if (msg == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "“%s” is not a valid address", url);
      return NULL;
    }
  /* A redirect is not followed: libsoup would take the key along to
   * wherever the server points (another host), and a POST would arrive
   * there as a GET. http_error () names the address instead. */
  soup_message_add_flags (msg, SOUP_MESSAGE_NO_REDIRECT);
  h = soup_message_get_request_headers (msg);
  if (api_key != NULL && api_key[0] != '\0')
    {
      g_autofree char *auth = g_strdup_printf ("Bearer %s", api_key);
      soup_message_headers_replace (h, "Authorization", auth);
    }
  if (body != NULL)
    {
      soup_message_headers_replace (h, "Accept", "text/event-stream");
      soup_message_set_request_body_from_bytes (msg, "application/json", body);
    }
  else
    soup_message_headers_replace (h, "Accept", "application/json");
  return msg;
}

/* ---- one call ---- */

typedef struct _Call Call;
/* A body piece (2xx answers only); FALSE with an error stops the call. */
typedef gboolean (*CallDataFunc) (Call *call, const char *data, gsize len, GError **error);
/* The end: @error NULL at the end of a 2xx body; owned by the callee. */
typedef void (*CallDoneFunc) (Call *call, GError *error);

struct _Call
{
  SoupMessage  *msg;
  GInputStream *in;
  char         *url;              /* for messages */
  GCancellable *cancellable;      /* ours */
  GCancellable *caller;
  gulong        caller_handler;
  GCancellable *closing;
  gulong        closing_handler;
  GSource      *timer;
  guint         timeout_s;
  gint64        last_activity;
  gboolean      timed_out;
  gboolean      headers;          /* the response's headers arrived */
  GByteArray   *error_body;       /* the body of a non-2xx answer */
  CallDataFunc  on_data;
  CallDoneFunc  on_done;
  gpointer      user_data;
  char          buf[16384];
};

static void
on_chained_cancel (GCancellable *source, gpointer user_data)
{
  g_cancellable_cancel (G_CANCELLABLE (user_data));
}

static gboolean
on_call_timer (gpointer user_data)
{
  Call *call = user_data;

  if (g_get_monotonic_time () - call->last_activity < (gint64) call->timeout_s * G_USEC_PER_SEC)
    return G_SOURCE_CONTINUE;
  call->timed_out = TRUE;
  g_cancellable_cancel (call->cancellable);
  return G_SOURCE_CONTINUE;
}

static Call *
call_new (SoupMessage *msg, const char *url, guint timeout_s, GCancellable *caller, GCancellable *closing,
          CallDataFunc on_data, CallDoneFunc on_done, gpointer user_data)
{
  Call *call = g_new0 (Call, 1);

  call->msg = msg;
  call->url = g_strdup (url);
  call->cancellable = g_cancellable_new ();
  call->timeout_s = MAX (timeout_s, 1);
  call->on_data = on_data;
  call->on_done = on_done;
  call->user_data = user_data;
  if (caller != NULL)
    {
      call->caller = g_object_ref (caller);
      call->caller_handler = g_cancellable_connect (caller, G_CALLBACK (on_chained_cancel),
                                                    g_object_ref (call->cancellable), g_object_unref);
    }
  if (closing != NULL)
    {
      call->closing = g_object_ref (closing);
      call->closing_handler = g_cancellable_connect (closing, G_CALLBACK (on_chained_cancel),
                                                     g_object_ref (call->cancellable), g_object_unref);
    }
  return call;
}

static void
call_free (Call *call)
{
  if (call->timer != NULL)
    {
      g_source_destroy (call->timer);
      g_source_unref (call->timer);
    }
  if (call->caller_handler)
    g_cancellable_disconnect (call->caller, call->caller_handler);
  if (call->closing_handler)
    g_cancellable_disconnect (call->closing, call->closing_handler);
  g_clear_object (&call->caller);
  g_clear_object (&call->closing);
  /* Unread, the body is skipped and the connection closed: the server sees
   * the client leave. */
  g_clear_object (&call->in);
  g_clear_object (&call->msg);
  g_clear_object (&call->cancellable);
  g_clear_pointer (&call->error_body, g_byte_array_unref);
  g_free (call->url);
  g_free (call);
}

/* What went wrong, in words a user reads; takes @error. */
static GError *
call_error (Call *call, GError *error)
{
  GError *out;

  if (call->timed_out)
    out = g_error_new (UM_ERROR, UM_ERROR_REMOTE, "%s did not answer for %u s: giving up", call->url,
                       call->timeout_s);
  else if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED) || g_cancellable_is_cancelled (call->cancellable))
    out = g_error_new_literal (G_IO_ERROR, G_IO_ERROR_CANCELLED, "cancelled");
  else if (!call->headers)
    out = g_error_new (error->domain, error->code, "could not reach %s: %s", call->url, error->message);
  else
    out = g_error_new (UM_ERROR, UM_ERROR_REMOTE, "the connection to %s was lost: %s", call->url, error->message);
  g_error_free (error);
  return out;
}

static GError *
http_error (Call *call)
{
  guint status = soup_message_get_status (call->msg);
  const char *reason = soup_message_get_reason_phrase (call->msg);
  g_autofree char *msg = call->error_body ? um_remote_error_message ((const char *) call->error_body->data,
                                                                     call->error_body->len) : NULL;

  if (SOUP_STATUS_IS_REDIRECTION (status))
    {
      const char *to = soup_message_headers_get_one (soup_message_get_response_headers (call->msg), "Location");
      g_autofree char *shown = to != NULL ? g_utf8_make_valid (to, MIN (strlen (to), 300)) : NULL;
      return g_error_new (UM_ERROR, UM_ERROR_REMOTE,
                          "the server answered %u, a redirect to %s: not followed (the API key would go with it); "
                          "connect to that address if you trust it",
                          status, shown ? shown : "(nowhere)");
    }
  return g_error_new (UM_ERROR, status == SOUP_STATUS_SERVICE_UNAVAILABLE ? UM_ERROR_BUSY : UM_ERROR_REMOTE,
                      "the server answered %u %s: %s", status, reason ? reason : "",
                      msg ? msg : "(no message)");
}

static void call_read_next (Call *call);

static void
call_end (Call *call, GError *error)
{
  call->on_done (call, error);
}

static void
on_call_read (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Call *call = user_data;
  GError *error = NULL;
  gssize n = g_input_stream_read_finish (G_INPUT_STREAM (source), result, &error);

  if (n < 0)
    {
      call_end (call, call_error (call, error));
      return;
    }
  if (n == 0)
    {
      if (call->error_body != NULL)
        call_end (call, http_error (call));
      else if (g_cancellable_is_cancelled (call->cancellable))
        call_end (call, call_error (call, g_error_new_literal (G_IO_ERROR, G_IO_ERROR_CANCELLED, "cancelled")));
      else
        call_end (call, NULL);
      return;
    }
  call->last_activity = g_get_monotonic_time ();
  if (call->error_body != NULL)
    {
      if (call->error_body->len < MAX_ERROR_BODY)
        g_byte_array_append (call->error_body, (const guint8 *) call->buf,
                             (guint) MIN ((gsize) n, MAX_ERROR_BODY - call->error_body->len));
    }
  else if (!call->on_data (call, call->buf, (gsize) n, &error))
    {
      call_end (call, error);
      return;
    }
  if (g_cancellable_is_cancelled (call->cancellable))
    {
      call_end (call, call_error (call, g_error_new_literal (G_IO_ERROR, G_IO_ERROR_CANCELLED, "cancelled")));
      return;
    }
  call_read_next (call);
}

static void
call_read_next (Call *call)
{
  g_input_stream_read_async (call->in, call->buf, sizeof call->buf, G_PRIORITY_DEFAULT, call->cancellable,
                             on_call_read, call);
}

static void
on_call_sent (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Call *call = user_data;
  GError *error = NULL;
  guint status;

  call->in = soup_session_send_finish (SOUP_SESSION (source), result, &error);
  if (call->in == NULL)
    {
      call_end (call, call_error (call, error));
      return;
    }
  call->headers = TRUE;
  call->last_activity = g_get_monotonic_time ();
  status = soup_message_get_status (call->msg);
  if (!SOUP_STATUS_IS_SUCCESSFUL (status))
    call->error_body = g_byte_array_new ();
  call_read_next (call);
}

static void
call_start (Call *call, SoupSession *session)
{
  GMainContext *ctx = g_main_context_ref_thread_default ();

  call->last_activity = g_get_monotonic_time ();
  call->timer = g_timeout_source_new (MIN (1000u, call->timeout_s * 250u));
  g_source_set_callback (call->timer, on_call_timer, call, NULL);
  g_source_attach (call->timer, ctx);
  g_main_context_unref (ctx);
  soup_session_send_async (session, call->msg, G_PRIORITY_DEFAULT, call->cancellable, on_call_sent, call);
}

/* ---- GET and parse ---- */

typedef struct {
  GTask      *task;
  GByteArray *body;
} Fetch;

static gboolean
fetch_on_data (Call *call, const char *data, gsize len, GError **error)
{
  Fetch *f = call->user_data;

  if (f->body->len + len > UM_REMOTE_MAX_BODY_BYTES)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_REMOTE, "%s sent more than %u MiB", call->url,
                   (guint) (UM_REMOTE_MAX_BODY_BYTES >> 20));
      return FALSE;
    }
  g_byte_array_append (f->body, (const guint8 *) data, (guint) len);
  return TRUE;
}

static void
fetch_on_done (Call *call, GError *error)
{
  static const UmJsonLimits limits = { UM_REMOTE_MAX_BODY_BYTES, 32, FALSE };
  Fetch *f = call->user_data;
  g_autoptr(GTask) task = f->task;
  GError *perr = NULL;
  JsonNode *root;

  /* The status, for callers that fall back on a 404. */
  g_task_set_task_data (task, GUINT_TO_POINTER (call->headers ? soup_message_get_status (call->msg) : 0), NULL);
  if (error != NULL)
    g_task_return_error (task, error);
  else if ((root = um_json_parse ((const char *) f->body->data, f->body->len, call->url, &limits, &perr)) == NULL)
    {
      g_task_return_new_error (task, UM_ERROR, UM_ERROR_REMOTE, "the server's answer is not JSON: %s",
                               perr->message);
      g_error_free (perr);
    }
  else if (!JSON_NODE_HOLDS_OBJECT (root))
    {
      json_node_unref (root);
      g_task_return_new_error (task, UM_ERROR, UM_ERROR_REMOTE, "%s: the answer is not a JSON object", call->url);
    }
  else
    g_task_return_pointer (task, root, (GDestroyNotify) json_node_unref);
  g_byte_array_unref (f->body);
  g_free (f);
  call_free (call);
}

/* GETs @url and parses its JSON object; the task's result is a JsonNode. */
static void
fetch_json (SoupSession *session, const char *url, const char *api_key, GCancellable *cancellable,
            GAsyncReadyCallback callback, gpointer user_data)
{
  GTask *task = g_task_new (session, cancellable, callback, user_data);
  GError *error = NULL;
  SoupMessage *msg = new_message (SOUP_METHOD_GET, url, api_key, NULL, &error);
  Fetch *f;

  g_task_set_check_cancellable (task, FALSE);
  if (msg == NULL)
    {
      g_task_return_error (task, error);
      g_object_unref (task);
      return;
    }
  f = g_new0 (Fetch, 1);
  f->task = task;
  f->body = g_byte_array_new ();
  call_start (call_new (msg, url, FETCH_TIMEOUT_S, cancellable, NULL, fetch_on_data, fetch_on_done, f), session);
}

/* ---- listing ---- */

/* The "data" array of a /v1/models answer. */
static JsonArray *
models_array (JsonNode *root, GError **error)
{
  JsonNode *d = json_object_get_member (json_node_get_object (root), "data");

  if (d == NULL || !JSON_NODE_HOLDS_ARRAY (d))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_REMOTE, "the server's model list has no \"data\" array");
      return NULL;
    }
  return json_node_get_array (d);
}

static void
on_list_fetched (GObject *source, GAsyncResult *result, gpointer user_data)
{
  g_autoptr(GTask) task = user_data;
  GError *error = NULL;
  g_autoptr(JsonNode) root = g_task_propagate_pointer (G_TASK (result), &error);
  g_autoptr(GPtrArray) models = NULL;
  JsonArray *data;

  if (root == NULL || (data = models_array (root, &error)) == NULL)
    {
      g_task_return_error (task, error);
      return;
    }
  models = g_ptr_array_new_with_free_func ((GDestroyNotify) um_remote_model_free);
  for (guint i = 0; i < json_array_get_length (data) && models->len < MAX_MODELS; i++)
    {
      JsonNode *e = json_array_get_element (data, i);
      g_autoptr(UmGenRecommendation) rec = NULL;
      UmGeneratorInfo info;
      UmRemoteModel *m;
      gboolean unmask;

      if (!JSON_NODE_HOLDS_OBJECT (e)
          || !um_remote_parse_model (json_node_get_object (e), "", &info, &unmask, &rec, NULL))
        continue;   /* one odd element does not hide the others */
      m = g_new0 (UmRemoteModel, 1);
      m->id = g_strdup (info.model_id);
      m->unmask = unmask;
      if (unmask)
        {
          /* As the server says it, even a family unknown here. */
          JsonNode *u = json_object_get_member (json_node_get_object (e), "unmask");
          JsonNode *a = json_object_get_member (json_node_get_object (u), "arch");
          if (a != NULL && JSON_NODE_HOLDS_VALUE (a) && json_node_get_value_type (a) == G_TYPE_STRING)
            m->arch = g_utf8_substring (json_node_get_string (a), 0, MIN (g_utf8_strlen (json_node_get_string (a), -1), 40));
        }
      um_remote_info_clear (&info);
      g_ptr_array_add (models, m);
    }
  g_task_return_pointer (task, g_steal_pointer (&models), (GDestroyNotify) g_ptr_array_unref);
}

void
um_remote_list_models_async (const char          *base_url,
                             const char          *api_key,
                             GCancellable        *cancellable,
                             GAsyncReadyCallback  callback,
                             gpointer             user_data)
{
  GTask *task = g_task_new (NULL, cancellable, callback, user_data);
  g_autoptr(SoupSession) session = NULL;
  g_autofree char *base = NULL;
  g_autofree char *url = NULL;
  GError *error = NULL;

  g_task_set_source_tag (task, um_remote_list_models_async);
  g_task_set_check_cancellable (task, FALSE);
  if ((base = normalize_base_url (base_url, &error)) == NULL)
    {
      g_task_return_error (task, error);
      g_object_unref (task);
      return;
    }
  session = new_session ();
  url = g_strconcat (base, "/models", NULL);
  /* The fetch's task keeps the session alive until it ends. */
  fetch_json (session, url, api_key, cancellable, on_list_fetched, task);
}

GPtrArray *
um_remote_list_models_finish (GAsyncResult *result, GError **error)
{
  g_return_val_if_fail (g_task_is_valid (result, NULL), NULL);
  return g_task_propagate_pointer (G_TASK (result), error);
}

/* ---- a generator for one model ---- */

typedef struct {
  SoupSession *session;
  char        *base;
  char        *api_key;
  char        *model_id;
  gboolean     listed;     /* the list was asked for (no id, or /models/{id} missing) */
} NewData;

static void
new_data_free (NewData *nd)
{
  g_clear_object (&nd->session);
  g_free (nd->base);
  g_free (nd->api_key);
  g_free (nd->model_id);
  g_free (nd);
}

static void on_model_fetched (GObject *source, GAsyncResult *result, gpointer user_data);

static void
new_fetch_list (GTask *task)
{
  NewData *nd = g_task_get_task_data (task);
  g_autofree char *url = g_strconcat (nd->base, "/models", NULL);

  nd->listed = TRUE;
  fetch_json (nd->session, url, nd->api_key, g_task_get_cancellable (task), on_model_fetched, task);
}

static void
on_model_fetched (GObject *source, GAsyncResult *result, gpointer user_data)
{
  GTask *task = user_data;
  NewData *nd = g_task_get_task_data (task);
  GError *error = NULL;
  g_autoptr(JsonNode) root = g_task_propagate_pointer (G_TASK (result), &error);
  g_autoptr(UmGenRecommendation) rec = NULL;
  JsonObject *model = NULL;
  UmRemoteGenerator *self;
  UmGeneratorInfo info;
  gboolean unmask;

  if (root == NULL)
    {
      /* Not every OpenAI-compatible server has GET /v1/models/{id}. */
      if (!nd->listed && GPOINTER_TO_UINT (g_task_get_task_data (G_TASK (result))) == SOUP_STATUS_NOT_FOUND)
        {
          g_error_free (error);
          new_fetch_list (task);
          return;
        }
      g_task_return_error (task, error);
      g_object_unref (task);
      return;
    }
  if (!nd->listed)
    model = json_node_get_object (root);
  else
    {
      JsonArray *data = models_array (root, &error);

      for (guint i = 0; data != NULL && i < json_array_get_length (data) && model == NULL; i++)
        {
          JsonNode *e = json_array_get_element (data, i);
          JsonNode *id;

          if (!JSON_NODE_HOLDS_OBJECT (e))
            continue;
          id = json_object_get_member (json_node_get_object (e), "id");
          if (nd->model_id == NULL
              || (id != NULL && JSON_NODE_HOLDS_VALUE (id) && json_node_get_value_type (id) == G_TYPE_STRING
                  && g_strcmp0 (json_node_get_string (id), nd->model_id) == 0))
            model = json_node_get_object (e);
        }
      if (data != NULL && model == NULL)
        error = nd->model_id ? g_error_new (UM_ERROR, UM_ERROR_REMOTE, "the server has no model “%s”", nd->model_id)
                             : g_error_new_literal (UM_ERROR, UM_ERROR_REMOTE, "the server lists no model");
    }
  if (model == NULL || !um_remote_parse_model (model, nd->base, &info, &unmask, &rec, &error))
    {
      g_task_return_error (task, error);
      g_object_unref (task);
      return;
    }

  self = g_object_new (UM_TYPE_REMOTE_GENERATOR, NULL);
  self->session = g_steal_pointer (&nd->session);
  self->base_url = g_steal_pointer (&nd->base);
  self->api_key = g_steal_pointer (&nd->api_key);
  self->info = info;
  self->unmask = unmask;
  self->rec = g_steal_pointer (&rec);
  self->info.recommendation = self->rec;
  g_task_return_pointer (task, self, g_object_unref);
  g_object_unref (task);
}

void
um_remote_generator_new_async (const char          *base_url,
                               const char          *api_key,
                               const char          *model_id,
                               GCancellable        *cancellable,
                               GAsyncReadyCallback  callback,
                               gpointer             user_data)
{
  GTask *task = g_task_new (NULL, cancellable, callback, user_data);
  NewData *nd = g_new0 (NewData, 1);
  GError *error = NULL;

  g_task_set_source_tag (task, um_remote_generator_new_async);
  g_task_set_check_cancellable (task, FALSE);
  g_task_set_task_data (task, nd, (GDestroyNotify) new_data_free);
  if ((nd->base = normalize_base_url (base_url, &error)) == NULL)
    {
      g_task_return_error (task, error);
      g_object_unref (task);
      return;
    }
  nd->session = new_session ();
  nd->api_key = g_strdup (api_key);
  nd->model_id = model_id != NULL && model_id[0] != '\0' ? g_strdup (model_id) : NULL;
  if (nd->model_id == NULL)
    new_fetch_list (task);
  else
    {
      g_autofree char *escaped = g_uri_escape_string (nd->model_id, NULL, FALSE);
      g_autofree char *url = g_strconcat (nd->base, "/models/", escaped, NULL);
      fetch_json (nd->session, url, nd->api_key, cancellable, on_model_fetched, task);
    }
}

UmGenerator *
um_remote_generator_new_finish (GAsyncResult *result, GError **error)
{
  g_return_val_if_fail (g_task_is_valid (result, NULL), NULL);
  return g_task_propagate_pointer (G_TASK (result), error);
}

const char *
um_remote_generator_get_url (UmRemoteGenerator *self)
{
  g_return_val_if_fail (UM_IS_REMOTE_GENERATOR (self), NULL);
  return self->base_url;
}

void
um_remote_generator_set_read_timeout (UmRemoteGenerator *self, guint seconds)
{
  g_return_if_fail (UM_IS_REMOTE_GENERATOR (self));
  self->read_timeout_s = seconds;
}

/* ---- generating ---- */

typedef struct {
  UmRemoteGenerator *self;
  GTask             *task;
  UmRemoteStream    *stream;
  gint64             t0;
  UmStepFunc         step_cb;
  gpointer           step_data;
  GCancellable      *cancelled;   /* the call's: no step reaches the caller after a cancel */
} Run;

/* A chunk read at once may hold several steps: once the caller cancelled
 * (from a step callback, say), the rest are not delivered. */
static void
run_on_step (const UmStepEvent *ev, gpointer user_data)
{
  Run *run = user_data;

  if (run->step_cb != NULL && !g_cancellable_is_cancelled (run->cancelled))
    run->step_cb (ev, run->step_data);
}

static gboolean
run_on_data (Call *call, const char *data, gsize len, GError **error)
{
  Run *run = call->user_data;
  return um_remote_stream_feed (run->stream, data, len, error);
}

static void
run_on_done (Call *call, GError *error)
{
  Run *run = call->user_data;
  g_autoptr(GTask) task = run->task;
  UmGeneratorResult *res = NULL;

  if (error == NULL)
    res = um_remote_stream_finish (run->stream, (g_get_monotonic_time () - run->t0) / 1e6, &error);
  if (res != NULL)
    g_task_return_pointer (task, res, (GDestroyNotify) um_generator_result_free);
  else
    g_task_return_error (task, error);
  um_remote_stream_free (run->stream);
  g_free (run);
  call_free (call);
}

/* The request as OpenAI's API spells it; NULL with an error for what the
 * API cannot carry. */
static GBytes *
build_body (UmRemoteGenerator *self, const UmGeneratorRequest *req, const char **out_path, GError **error)
{
  const UmGenParams *p = &req->params;
  g_autoptr(JsonBuilder) b = json_builder_new ();
  g_autoptr(JsonGenerator) gen = json_generator_new ();
  g_autoptr(JsonNode) root = NULL;
  gboolean chat = (req->messages != NULL && req->n_messages > 0) || (req->prompt != NULL && req->chat);
  char *text;
  gsize len;

  if (p->n_constraints > 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                   "a server has no way to take words placed in the answer: remove them to run remotely");
      return NULL;
    }
  if (chat && req->suffix != NULL && req->suffix[0] != '\0')
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                   "a server infills only plain completions, not chats: give a prompt without chat");
      return NULL;
    }
  if (p->seed > (guint64) G_MAXINT64)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "the seed must be below 2^63 to be sent to a server");
      return NULL;
    }
  if (!chat && req->prompt == NULL && (req->prompt_ids == NULL || req->n_prompt_ids <= 0))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "the request has no prompt");
      return NULL;
    }

  json_builder_begin_object (b);
  json_builder_set_member_name (b, "model");
  json_builder_add_string_value (b, self->info.model_id);
  if (req->messages != NULL && req->n_messages > 0)
    {
      json_builder_set_member_name (b, "messages");
      json_builder_begin_array (b);
      for (int i = 0; i < req->n_messages; i++)
        {
          if (req->messages[i].role == NULL || req->messages[i].content == NULL)
            {
              g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "message %d has no role or no content", i);
              return NULL;
            }
          json_builder_begin_object (b);
          json_builder_set_member_name (b, "role");
          json_builder_add_string_value (b, req->messages[i].role);
          json_builder_set_member_name (b, "content");
          json_builder_add_string_value (b, req->messages[i].content);
          json_builder_end_object (b);
        }
      json_builder_end_array (b);
    }
  else if (chat)
    {
      json_builder_set_member_name (b, "messages");
      json_builder_begin_array (b);
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "role");
      json_builder_add_string_value (b, "user");
      json_builder_set_member_name (b, "content");
      json_builder_add_string_value (b, req->prompt);
      json_builder_end_object (b);
      json_builder_end_array (b);
    }
  else
    {
      json_builder_set_member_name (b, "prompt");
      if (req->prompt != NULL)
        json_builder_add_string_value (b, req->prompt);
      else
        {
          json_builder_begin_array (b);
          for (int i = 0; i < req->n_prompt_ids; i++)
            json_builder_add_int_value (b, req->prompt_ids[i]);
          json_builder_end_array (b);
        }
      if (req->suffix != NULL && req->suffix[0] != '\0')
        {
          json_builder_set_member_name (b, "suffix");
          json_builder_add_string_value (b, req->suffix);
        }
    }
  json_builder_set_member_name (b, "max_tokens");
  json_builder_add_int_value (b, p->gen_length);
  json_builder_set_member_name (b, "temperature");
  json_builder_add_double_value (b, p->temperature);
  json_builder_set_member_name (b, "seed");
  json_builder_add_int_value (b, (gint64) p->seed);
  json_builder_set_member_name (b, "stream");
  json_builder_add_boolean_value (b, TRUE);
  json_builder_set_member_name (b, "stream_options");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "include_usage");
  json_builder_add_boolean_value (b, TRUE);
  json_builder_end_object (b);
  if (self->unmask)
    {
      json_builder_set_member_name (b, "unmask");
      json_builder_begin_object (b);
      um_remote_add_unmask_params (b, p, self->info.arch);
      json_builder_set_member_name (b, "stream_steps");
      json_builder_add_string_value (b, "diff");
      json_builder_end_object (b);
    }
  json_builder_end_object (b);

  root = json_builder_get_root (b);
  json_generator_set_root (gen, root);
  text = json_generator_to_data (gen, &len);
  *out_path = chat ? "/chat/completions" : "/completions";
  return g_bytes_new_take (text, len);
}

static void
remote_run_async (UmGenerator              *gen,
                  const UmGeneratorRequest *req,
                  UmStepFunc                step_cb,
                  gpointer                  step_data,
                  GCancellable             *cancellable,
                  GAsyncReadyCallback       callback,
                  gpointer                  user_data)
{
  UmRemoteGenerator *self = UM_REMOTE_GENERATOR (gen);
  GTask *task = g_task_new (self, cancellable, callback, user_data);
  g_autoptr(GBytes) body = NULL;
  g_autofree char *url = NULL;
  UmRemoteStreamSetup setup = { 0 };
  const char *path = NULL;
  GError *error = NULL;
  SoupMessage *msg;
  guint timeout;
  Call *call;
  Run *run;

  g_task_set_check_cancellable (task, FALSE);
  if ((body = build_body (self, req, &path, &error)) == NULL)
    {
      g_task_return_error (task, error);
      g_object_unref (task);
      return;
    }
  url = g_strconcat (self->base_url, path, NULL);
  if ((msg = new_message (SOUP_METHOD_POST, url, self->api_key, body, &error)) == NULL)
    {
      g_task_return_error (task, error);
      g_object_unref (task);
      return;
    }

  setup.unmask = self->unmask;
  setup.answer_len = req->params.gen_length;
  setup.mask_id = self->info.mask_id;
  setup.eos_id = self->info.eos_id;
  setup.eot_id = self->info.eot_id;
  if (req->messages == NULL && req->prompt == NULL)
    {
      setup.prompt_ids = req->prompt_ids;
      setup.n_prompt_ids = req->n_prompt_ids;
    }
  run = g_new0 (Run, 1);
  run->self = self;
  run->task = task;
  run->t0 = g_get_monotonic_time ();
  run->step_cb = step_cb;
  run->step_data = step_data;
  run->stream = um_remote_stream_new (&setup, &self->pieces, run_on_step, run);
  timeout = self->read_timeout_s ? self->read_timeout_s : self->unmask ? UNMASK_STREAM_TIMEOUT_S
                                                                       : OTHER_STREAM_TIMEOUT_S;
  call = call_new (msg, url, timeout, cancellable, self->closing, run_on_data, run_on_done, run);
  run->cancelled = call->cancellable;
  call_start (call, self->session);
}

static UmGeneratorResult *
remote_run_finish (UmGenerator *gen, GAsyncResult *result, GError **error)
{
  return g_task_propagate_pointer (G_TASK (result), error);
}

static const UmGeneratorInfo *
remote_get_info (UmGenerator *gen)
{
  return &UM_REMOTE_GENERATOR (gen)->info;
}

static char *
remote_token_text (UmGenerator *gen, gint32 id)
{
  return um_remote_pieces_get (&UM_REMOTE_GENERATOR (gen)->pieces, id);
}

static UmEngine *
remote_get_engine (UmGenerator *gen)
{
  return NULL;
}

static void
um_remote_generator_dispose (GObject *object)
{
  UmRemoteGenerator *self = UM_REMOTE_GENERATOR (object);

  g_cancellable_cancel (self->closing);
  G_OBJECT_CLASS (um_remote_generator_parent_class)->dispose (object);
}

static void
um_remote_generator_finalize (GObject *object)
{
  UmRemoteGenerator *self = UM_REMOTE_GENERATOR (object);

  /* A running call holds a ref on self through its task: none is left. */
  g_clear_object (&self->session);
  g_clear_object (&self->closing);
  g_free (self->base_url);
  g_free (self->api_key);
  um_remote_info_clear (&self->info);
  um_gen_recommendation_free (self->rec);
  um_remote_pieces_clear (&self->pieces);
  G_OBJECT_CLASS (um_remote_generator_parent_class)->finalize (object);
}

static void
um_remote_generator_class_init (UmRemoteGeneratorClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  UmGeneratorClass *gen_class = UM_GENERATOR_CLASS (klass);

  object_class->dispose = um_remote_generator_dispose;
  object_class->finalize = um_remote_generator_finalize;
  gen_class->get_info = remote_get_info;
  gen_class->run_async = remote_run_async;
  gen_class->run_finish = remote_run_finish;
  gen_class->token_text = remote_token_text;
  gen_class->get_engine = remote_get_engine;
}

static void
um_remote_generator_init (UmRemoteGenerator *self)
{
  self->closing = g_cancellable_new ();
  um_remote_pieces_init (&self->pieces);
}

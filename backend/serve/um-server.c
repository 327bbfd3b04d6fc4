/* um-server.c — the HTTP side of the server: thread, binding, security
 * checks, routes and the small JSON answers. Generations are in
 * um-server-run.c. */
#include "config.h"

#include "um-server-private.h"

#include "um-error.h"
#include "um-json.h"

#include <stdio.h>
#include <string.h>

/* ---- options ---- */

void
um_server_options_init (UmServerOptions *opt)
{
  memset (opt, 0, sizeof *opt);
  opt->port = UM_SERVER_DEFAULT_PORT;
  opt->max_queue = UM_SERVER_DEFAULT_MAX_QUEUE;
  opt->max_body = UM_SERVER_DEFAULT_MAX_BODY;
  opt->ping_interval_s = UM_SERVER_DEFAULT_PING_S;
  opt->max_connections = UM_SERVER_DEFAULT_MAX_CONNECTIONS;
  opt->head_timeout_s = UM_SERVER_DEFAULT_HEAD_TIMEOUT_S;
  opt->body_timeout_s = UM_SERVER_DEFAULT_BODY_TIMEOUT_S;
  opt->idle_timeout_s = UM_SERVER_DEFAULT_IDLE_TIMEOUT_S;
  um_gen_params_init (&opt->gen_base);
  um_gen_layer_init (&opt->gen_user);
  um_gen_layer_init (&opt->gen_profile);
}

void
um_server_options_clear (UmServerOptions *opt)
{
  g_strfreev (opt->hosts);
  g_strfreev (opt->api_keys);
  g_strfreev (opt->cors_origins);
  g_free (opt->model_id);
  um_server_options_init (opt);
}

char *
um_server_generate_key (void)
{
  guint8 bytes[24];
  g_autofree char *b64 = NULL;

  /* GRand is not a CSPRNG: read the kernel's. */
  if (g_file_test ("/dev/urandom", G_FILE_TEST_EXISTS))
    {
      FILE *f = fopen ("/dev/urandom", "rb");
      if (f != NULL && fread (bytes, 1, sizeof bytes, f) == sizeof bytes)
        {
          fclose (f);
          goto encode;
        }
      if (f != NULL)
        fclose (f);
    }
  for (guint i = 0; i < sizeof bytes; i++)
    bytes[i] = (guint8) g_random_int ();
encode:
  b64 = g_base64_encode (bytes, sizeof bytes);
  g_strdelimit (b64, "+", '-');
  g_strdelimit (b64, "/", '_');
  return g_strconcat ("um-", b64, NULL);
}

/* ---- errors and JSON answers ---- */

static void
send_json (SoupServerMessage *msg, guint status, JsonNode *root)
{
  g_autoptr(JsonGenerator) gen = json_generator_new ();
  gsize len;
  char *text;

  json_generator_set_root (gen, root);
  text = json_generator_to_data (gen, &len);
  soup_server_message_set_status (msg, status, NULL);
  soup_server_message_set_response (msg, "application/json", SOUP_MEMORY_TAKE, text, len);
}

void
um_server_add_error (JsonBuilder *b, const char *message, const char *type, const char *param, const char *code)
{
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "error");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "message");
  json_builder_add_string_value (b, message);
  json_builder_set_member_name (b, "type");
  json_builder_add_string_value (b, type);
  json_builder_set_member_name (b, "param");
  if (param)
    json_builder_add_string_value (b, param);
  else
    json_builder_add_null_value (b);
  /* A string or null, as OpenAI's SDKs type it. */
  json_builder_set_member_name (b, "code");
  if (code)
    json_builder_add_string_value (b, code);
  else
    json_builder_add_null_value (b);
  json_builder_end_object (b);
  json_builder_end_object (b);
}

void
um_server_send_error (SoupServerMessage *msg, guint status, const char *type, const char *message,
                      const char *param, const char *code)
{
  g_autoptr(JsonBuilder) b = json_builder_new ();
  g_autoptr(JsonNode) root = NULL;
  SoupMessageHeaders *h = soup_server_message_get_response_headers (msg);

  um_server_add_error (b, message, type, param, code);
  root = json_builder_get_root (b);
  /* A failed generation would fail again (and OpenAI's SDKs retry twice
   * by default); a busy or loading server is worth another try, after
   * Retry-After. */
  if (status >= 500 && status != 503)
    soup_message_headers_replace (h, "x-should-retry", "false");
  if (status == 503)
    soup_message_headers_replace (h, "Retry-After", "1");
  send_json (msg, status, root);
}

/* ---- the generator, across threads ---- */

UmGenerator *
um_server_ref_generator (UmServer *server)
{
  UmGenerator *g;
  g_mutex_lock (&server->lock);
  g = server->generator ? g_object_ref (server->generator) : NULL;
  g_mutex_unlock (&server->lock);
  return g;
}

static gboolean
notify_changed_home (gpointer data)
{
  UmServer *server = data;
  if (server->changed_cb)
    server->changed_cb (server, server->changed_data);
  return G_SOURCE_REMOVE;
}

void
um_server_notify_changed (UmServer *server)
{
  if (server->changed_cb)
    g_main_context_invoke (server->home, notify_changed_home, server);
}

/* Home context. */
static void
on_queue_changed (UmGenerator *gen, UmServer *server)
{
  int running, waiting;
  um_generator_get_queue (gen, &running, &waiting);
  g_atomic_int_set (&server->n_running, running);
  g_atomic_int_set (&server->n_waiting, waiting);
  if (server->changed_cb)
    server->changed_cb (server, server->changed_data);
}

void
um_server_set_generator (UmServer *server, UmGenerator *generator)
{
  g_mutex_lock (&server->lock);
  if (server->generator != NULL)
    {
      g_signal_handler_disconnect (server->generator, server->queue_handler);
      g_object_unref (server->generator);
    }
  server->generator = generator ? g_object_ref (generator) : NULL;
  server->queue_handler = 0;
  if (generator != NULL)
    {
      um_generator_set_max_waiting (generator, server->opt.max_queue);
      server->queue_handler = g_signal_connect (generator, "queue-changed", G_CALLBACK (on_queue_changed), server);
    }
  g_mutex_unlock (&server->lock);
}

/* ---- security checks, before the body is read ---- */

static gboolean
host_is_loopback_name (const char *host)
{
  return g_ascii_strcasecmp (host, "localhost") == 0 || strcmp (host, "127.0.0.1") == 0
         || strcmp (host, "::1") == 0 || strcmp (host, "[::1]") == 0;
}

/* "127.0.0.1:8765" → "127.0.0.1"; "[::1]:8765" → "::1". */
static char *
host_part (const char *host_header)
{
  if (host_header[0] == '[')
    {
      const char *end = strchr (host_header, ']');
      return end ? g_strndup (host_header + 1, end - host_header - 1) : g_strdup (host_header);
    }
  {
    const char *colon = strchr (host_header, ':');
    return colon ? g_strndup (host_header, colon - host_header) : g_strdup (host_header);
  }
}

static gboolean
host_allowed (UmServer *server, const char *host_header)
{
  g_autofree char *host = NULL;

  if (!server->loopback)
    return TRUE;
  /* DNS rebinding: a page of evil.example resolving to 127.0.0.1 sends
   * "Host: evil.example". */
  if (host_header == NULL)
    return FALSE;
  host = host_part (host_header);
  if (host_is_loopback_name (host))
    return TRUE;
  for (guint i = 0; server->opt.hosts && server->opt.hosts[i]; i++)
    if (g_ascii_strcasecmp (host, server->opt.hosts[i]) == 0)
      return TRUE;
  return FALSE;
}

/* An Origin is scheme://host[:port], never with a path: an allowed origin
 * written with a trailing slash (as copied from an address bar) means the
 * same; "*" allows any (the answer still names the origin, so that no
 * "*" goes out beside credentials). */
static gboolean
origin_allowed (UmServer *server, const char *origin)
{
  gsize olen = strlen (origin);

  for (guint i = 0; server->opt.cors_origins && server->opt.cors_origins[i]; i++)
    {
      const char *allowed = server->opt.cors_origins[i];
      gsize alen = strlen (allowed);

      if (strcmp (allowed, "*") == 0)
        return TRUE;
      while (alen > 0 && allowed[alen - 1] == '/')
        alen--;
      if (alen == olen && g_ascii_strncasecmp (origin, allowed, alen) == 0)
        return TRUE;
    }
  return FALSE;
}

/* Equal in time independent of where they differ: both sides are hashed
 * first, so lengths leak nothing either. */
static gboolean
key_matches (const char *given, const char *key)
{
  g_autofree char *a = g_compute_checksum_for_string (G_CHECKSUM_SHA256, given, -1);
  g_autofree char *b = g_compute_checksum_for_string (G_CHECKSUM_SHA256, key, -1);
  guint8 diff = 0;

  for (gsize i = 0; a[i] && b[i]; i++)
    diff |= (guint8) (a[i] ^ b[i]);
  return diff == 0;
}

static gboolean
authorized (UmServer *server, SoupMessageHeaders *h)
{
  const char *auth = soup_message_headers_get_one (h, "Authorization");
  const char *xkey = soup_message_headers_get_one (h, "x-api-key");
  gboolean ok = FALSE;

  if (server->opt.api_keys == NULL || server->opt.api_keys[0] == NULL)
    return TRUE;
  if (auth != NULL && g_ascii_strncasecmp (auth, "Bearer ", 7) == 0)
    auth += 7;
  else
    auth = NULL;
  /* Every key is compared, whatever matched before. */
  for (guint i = 0; server->opt.api_keys[i]; i++)
    {
      if (auth != NULL && key_matches (auth, server->opt.api_keys[i]))
        ok = TRUE;
      if (xkey != NULL && key_matches (xkey, server->opt.api_keys[i]))
        ok = TRUE;
    }
  return ok;
}

static gboolean
is_public_path (const char *path)
{
  return strcmp (path, "/health") == 0 || strcmp (path, "/v1/health") == 0;
}

static void
early_handler (SoupServer *soup, SoupServerMessage *msg, const char *path, GHashTable *query, gpointer data)
{
  UmServer *server = data;
  SoupMessageHeaders *req = soup_server_message_get_request_headers (msg);
  SoupMessageHeaders *resp = soup_server_message_get_response_headers (msg);
  const char *method = soup_server_message_get_method (msg);
  const char *origin = soup_message_headers_get_one (req, "Origin");
  g_autofree char *request_id = g_strdup_printf ("req-%08x%08x", g_random_int (), g_random_int ());

  soup_message_headers_replace (resp, "x-request-id", request_id);
  if (!host_allowed (server, soup_message_headers_get_one (req, "Host")))
    {
      um_server_send_error (msg, 403, "permission_error",
                            "this server answers only requests addressed to localhost (Host header)", NULL, NULL);
      return;
    }
  if (origin != NULL)
    {
      /* A browser page: refused before any compute unless its origin is
       * allowed; never "*" with credentials. */
      if (!origin_allowed (server, origin))
        {
          um_server_send_error (msg, 403, "permission_error",
                                "cross-origin requests from this origin are not allowed (see --cors-origin)", NULL,
                                NULL);
          return;
        }
      soup_message_headers_replace (resp, "Access-Control-Allow-Origin", origin);
      soup_message_headers_replace (resp, "Access-Control-Expose-Headers", "x-request-id, Retry-After, x-should-retry");
      soup_message_headers_replace (resp, "Vary", "Origin");
    }
  if (strcmp (method, "OPTIONS") == 0)
    {
      /* Preflights carry no credentials: answered before the key check. */
      soup_message_headers_replace (resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      /* An allowed page may send what its client sends (openai-node adds
       * its X-Stainless-* headers); without an Origin nothing reads this. */
      const char *asked = soup_message_headers_get_one (req, "Access-Control-Request-Headers");
      soup_message_headers_replace (resp, "Access-Control-Allow-Headers",
                                    origin != NULL && asked != NULL ? asked
                                    : "Authorization, Content-Type, x-api-key, OpenAI-Organization, OpenAI-Project");
      soup_message_headers_replace (resp, "Access-Control-Max-Age", "600");
      /* Chrome asks before a public page may reach a server on a private
       * network or this machine: granted to the origins allowed above. */
      if (origin != NULL
          && g_strcmp0 (soup_message_headers_get_one (req, "Access-Control-Request-Private-Network"), "true") == 0)
        soup_message_headers_replace (resp, "Access-Control-Allow-Private-Network", "true");
      soup_message_headers_replace (resp, "Allow", "GET, POST, OPTIONS");
      soup_server_message_set_status (msg, 204, NULL);
      return;
    }
  if (!is_public_path (path) && !authorized (server, req))
    {
      soup_message_headers_replace (resp, "WWW-Authenticate", "Bearer");
      um_server_send_error (msg, 401, "authentication_error", "invalid or missing API key", NULL, "invalid_api_key");
      return;
    }
  if (strcmp (method, "POST") == 0 || strcmp (method, "PUT") == 0)
    {
      SoupEncoding enc = soup_message_headers_get_encoding (req);
      if (enc != SOUP_ENCODING_CONTENT_LENGTH)
        {
          um_server_send_error (msg, 411, "invalid_request_error", "a request body needs a Content-Length", NULL,
                                NULL);
          return;
        }
    }
  /* The body's size, whatever the method, is checked as it arrives
   * (um-server-conn.c). */
}

/* ---- routes ---- */

static void
add_defaults (JsonBuilder *b, UmServer *server, UmGenerator *gen)
{
  const UmGeneratorInfo *info = um_generator_get_info (gen);
  UmApiRequest empty = { 0 };
  UmGenParams p;

  um_gen_layer_init (&empty.user);
  if (!um_api_request_resolve (&empty, info->arch, &server->base, &server->user_layer,
                               &info->recommendation->layer, &server->profile_layer, -1, -1, info->max_seq_len, &p,
                               NULL, NULL))
    um_gen_params_init_for_arch (&p, info->arch);
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "max_tokens");
  json_builder_add_int_value (b, p.gen_length);
  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    {
      UmGenKey key = (UmGenKey) k;
      if (!um_gen_key_applies (key, info->arch) && key != UM_GEN_KEY_GEN_LENGTH && key != UM_GEN_KEY_TEMPERATURE)
        continue;
      json_builder_set_member_name (b, um_gen_key_name (key));
      switch (key)
        {
        case UM_GEN_KEY_GEN_LENGTH: json_builder_add_int_value (b, p.gen_length); break;
        case UM_GEN_KEY_STEPS: json_builder_add_int_value (b, p.steps); break;
        case UM_GEN_KEY_BLOCK_LENGTH: json_builder_add_int_value (b, p.block_length); break;
        case UM_GEN_KEY_TEMPERATURE: json_builder_add_double_value (b, p.temperature); break;
        case UM_GEN_KEY_CFG_SCALE: json_builder_add_double_value (b, p.cfg_scale); break;
        case UM_GEN_KEY_REMASKING: json_builder_add_string_value (b, um_remasking_to_string (p.remasking)); break;
        case UM_GEN_KEY_ALG: json_builder_add_string_value (b, um_alg_to_string (p.alg)); break;
        case UM_GEN_KEY_EPS: json_builder_add_double_value (b, p.eps); break;
        case UM_GEN_KEY_ALG_TEMP: json_builder_add_double_value (b, p.alg_temp); break;
        case UM_GEN_KEY_TOP_P: json_builder_add_double_value (b, p.top_p); break;
        case UM_GEN_KEY_TOP_K: json_builder_add_int_value (b, p.top_k); break;
        case UM_GEN_KEY_GREEDY: json_builder_add_boolean_value (b, p.greedy); break;
        default: json_builder_add_null_value (b); break;
        }
    }
  /* The extension's settings that are not keys, where the family has them. */
  if (um_gen_option_applies (UM_GEN_OPT_CACHE, info->arch))
    {
      json_builder_set_member_name (b, "cache");
      json_builder_add_string_value (b, um_cache_mode_to_string (p.cache));
    }
  if (um_gen_option_applies (UM_GEN_OPT_FACTOR, info->arch))
    {
      json_builder_set_member_name (b, "factor");
      json_builder_add_double_value (b, p.factor);
    }
  if (um_gen_option_applies (UM_GEN_OPT_THRESHOLD, info->arch))
    {
      json_builder_set_member_name (b, "threshold");
      json_builder_add_double_value (b, p.threshold);
    }
  json_builder_end_object (b);
}

static const char *
model_id (UmServer *server, UmGenerator *gen)
{
  return server->opt.model_id ? server->opt.model_id : um_generator_get_info (gen)->model_id;
}

static void
add_model (JsonBuilder *b, UmServer *server, UmGenerator *gen)
{
  const UmGeneratorInfo *info = um_generator_get_info (gen);

  json_builder_begin_object (b);
  json_builder_set_member_name (b, "id");
  json_builder_add_string_value (b, model_id (server, gen));
  json_builder_set_member_name (b, "object");
  json_builder_add_string_value (b, "model");
  json_builder_set_member_name (b, "created");
  json_builder_add_int_value (b, 0);
  json_builder_set_member_name (b, "owned_by");
  json_builder_add_string_value (b, "unmask");
  json_builder_set_member_name (b, "unmask");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "arch");
  json_builder_add_string_value (b, um_arch_info (info->arch)->gguf_arch);
  json_builder_set_member_name (b, "display_name");
  json_builder_add_string_value (b, info->display_name ? info->display_name : "");
  json_builder_set_member_name (b, "max_seq_len");
  json_builder_add_int_value (b, info->max_seq_len);
  json_builder_set_member_name (b, "mask_id");
  json_builder_add_int_value (b, info->mask_id);
  json_builder_set_member_name (b, "eos_id");
  json_builder_add_int_value (b, info->eos_id);
  json_builder_set_member_name (b, "eot_id");
  json_builder_add_int_value (b, info->eot_id);
  json_builder_set_member_name (b, "defaults");
  add_defaults (b, server, gen);
  json_builder_end_object (b);
  json_builder_end_object (b);
}

static void
serve_models (UmServer *server, SoupServerMessage *msg, UmGenerator *gen, const char *id)
{
  g_autoptr(JsonBuilder) b = json_builder_new ();
  g_autoptr(JsonNode) root = NULL;

  if (id != NULL)
    {
      if (strcmp (id, model_id (server, gen)) != 0)
        {
          g_autofree char *m = g_strdup_printf ("the model “%s” does not exist here", id);
          um_server_send_error (msg, 404, "not_found_error", m, "model", "model_not_found");
          return;
        }
      add_model (b, server, gen);
    }
  else
    {
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "object");
      json_builder_add_string_value (b, "list");
      json_builder_set_member_name (b, "data");
      json_builder_begin_array (b);
      add_model (b, server, gen);
      json_builder_end_array (b);
      json_builder_end_object (b);
    }
  root = json_builder_get_root (b);
  send_json (msg, 200, root);
}

static void
serve_info (UmServer *server, SoupServerMessage *msg, UmGenerator *gen)
{
  g_autoptr(JsonBuilder) b = json_builder_new ();
  g_autoptr(JsonNode) root = NULL;
  const UmGeneratorInfo *info = um_generator_get_info (gen);
  UmEngine *engine = um_generator_get_engine (gen);

  json_builder_begin_object (b);
  json_builder_set_member_name (b, "version");
  json_builder_add_string_value (b, PACKAGE_VERSION);
  json_builder_set_member_name (b, "model");
  json_builder_add_string_value (b, model_id (server, gen));
  json_builder_set_member_name (b, "arch");
  json_builder_add_string_value (b, um_arch_info (info->arch)->gguf_arch);
  json_builder_set_member_name (b, "backend");
  if (engine != NULL)
    json_builder_add_string_value (b, um_backend_name (um_engine_get_backend (engine)));
  else
    json_builder_add_string_value (b, info->location ? info->location : "remote");
  if (engine != NULL)
    {
      json_builder_set_member_name (b, "memory_mode");
      json_builder_add_string_value (b, um_mem_mode_to_string (um_engine_get_plan (engine)->mode));
      json_builder_set_member_name (b, "weight_format");
      json_builder_add_string_value (b, um_engine_get_plan (engine)->weight_format);
    }
  json_builder_set_member_name (b, "queue");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "running");
  json_builder_add_int_value (b, g_atomic_int_get (&server->n_running));
  json_builder_set_member_name (b, "waiting");
  json_builder_add_int_value (b, g_atomic_int_get (&server->n_waiting));
  json_builder_set_member_name (b, "limit");
  json_builder_add_int_value (b, server->opt.max_queue);
  json_builder_set_member_name (b, "running_id");
  g_mutex_lock (&server->lock);
  if (server->running_id)
    json_builder_add_string_value (b, server->running_id);
  else
    json_builder_add_null_value (b);
  g_mutex_unlock (&server->lock);
  json_builder_end_object (b);
  json_builder_set_member_name (b, "served");
  json_builder_add_int_value (b, (gint64) server->served);
  json_builder_set_member_name (b, "defaults");
  add_defaults (b, server, gen);
  json_builder_end_object (b);
  root = json_builder_get_root (b);
  send_json (msg, 200, root);
}

static void
method_not_allowed (SoupServerMessage *msg, const char *allow)
{
  g_autofree char *m = g_strdup_printf ("%s is not allowed here; use %s", soup_server_message_get_method (msg), allow);
  soup_message_headers_replace (soup_server_message_get_response_headers (msg), "Allow", allow);
  um_server_send_error (msg, 405, "invalid_request_error", m, NULL, "method_not_allowed");
}

static void
handler (SoupServer *soup, SoupServerMessage *msg, const char *path, GHashTable *query, gpointer data)
{
  UmServer *server = data;
  const char *method = soup_server_message_get_method (msg);
  gboolean get = strcmp (method, "GET") == 0 || strcmp (method, "HEAD") == 0;
  gboolean post = strcmp (method, "POST") == 0;
  g_autoptr(UmGenerator) gen = NULL;

  if (soup_server_message_get_status (msg) != 0)
    return;   /* answered by the early handler */
  if (is_public_path (path))
    {
      g_autoptr(JsonNode) root = NULL;
      if (!get)
        {
          method_not_allowed (msg, "GET");
          return;
        }
      gen = um_server_ref_generator (server);
      if (gen == NULL)
        {
          um_server_send_error (msg, 503, "unavailable_error", "Loading model", NULL, NULL);
          return;
        }
      root = json_from_string ("{\"status\":\"ok\"}", NULL);
      send_json (msg, 200, root);
      return;
    }
  if (strcmp (path, "/v1/embeddings") == 0 || strcmp (path, "/v1/responses") == 0
      || g_str_has_prefix (path, "/v1/responses/"))
    {
      um_server_send_error (msg, 501, "not_supported_error",
                            "this endpoint is not supported by Unmask (diffusion text generation only)", NULL, NULL);
      return;
    }
  {
    gboolean known = strcmp (path, "/v1/models") == 0 || g_str_has_prefix (path, "/v1/models/")
                     || strcmp (path, "/v1/chat/completions") == 0 || strcmp (path, "/v1/completions") == 0
                     || strcmp (path, "/v1/unmask/info") == 0;
    if (!known)
      {
        g_autofree char *m = g_strdup_printf ("no such endpoint: %s %s", method, path);
        um_server_send_error (msg, 404, "not_found_error", m, NULL, NULL);
        return;
      }
  }
  gen = um_server_ref_generator (server);
  if (gen == NULL)
    {
      um_server_send_error (msg, 503, "unavailable_error", "Loading model", NULL, NULL);
      return;
    }
  if (strcmp (path, "/v1/chat/completions") == 0 || strcmp (path, "/v1/completions") == 0)
    {
      if (!post)
        method_not_allowed (msg, "POST");
      else
        um_server_handle_generation (server, msg, path[4] == 'c' && path[5] == 'h' ? UM_API_CHAT : UM_API_COMPLETIONS);
      return;
    }
  if (!get)
    {
      method_not_allowed (msg, "GET");
      return;
    }
  if (strcmp (path, "/v1/models") == 0)
    serve_models (server, msg, gen, NULL);
  else if (g_str_has_prefix (path, "/v1/models/"))
    serve_models (server, msg, gen, path + strlen ("/v1/models/"));
  else
    serve_info (server, msg, gen);
}

/* ---- lifecycle ---- */

static gboolean
is_loopback_host (const char *host)
{
  g_autoptr(GInetAddress) a = NULL;
  if (g_ascii_strcasecmp (host, "localhost") == 0)
    return TRUE;
  a = g_inet_address_new_from_string (host);
  return a != NULL && g_inet_address_get_is_loopback (a);
}

static gpointer
server_thread (gpointer data)
{
  UmServer *server = data;
  GError *error = NULL;

  g_main_context_push_thread_default (server->context);
  server->soup = soup_server_new ("server-header", "unmask/" PACKAGE_VERSION " ", NULL);
  soup_server_add_early_handler (server->soup, NULL, early_handler, server, NULL);
  soup_server_add_handler (server->soup, NULL, handler, server, NULL);
  /* Our own listening sockets and accept loop (um-server-conn.c). */
  if (!um_server_conns_listen (server, &error))
    {
      g_prefix_error (&error, "cannot listen: ");
      g_mutex_lock (&server->lock);
      server->start_error = error;
      server->started = TRUE;
      g_cond_broadcast (&server->cond);
      g_mutex_unlock (&server->lock);
      um_server_conns_stop (server);
      g_clear_object (&server->soup);
      g_main_context_pop_thread_default (server->context);
      return NULL;
    }
  g_mutex_lock (&server->lock);
  server->uris = um_server_conns_uris (server);
  server->started = TRUE;
  g_cond_broadcast (&server->cond);
  g_mutex_unlock (&server->lock);

  g_main_loop_run (server->loop);

  um_server_cancel_runs (server);
  /* libsoup closes the connections it serves, then ours go (the
   * listening sockets, and those being closed after an answer). */
  soup_server_disconnect (server->soup);
  um_server_conns_stop (server);
  /* Let cancelled runs and closed connections settle. */
  while (g_main_context_iteration (server->context, FALSE))
    ;
  g_clear_object (&server->soup);
  g_main_context_pop_thread_default (server->context);
  return NULL;
}

UmServer *
um_server_new (UmGenerator *generator, const UmServerOptions *opt)
{
  UmServer *server = g_new0 (UmServer, 1);

  g_mutex_init (&server->lock);
  g_cond_init (&server->cond);
  server->opt = *opt;
  server->opt.hosts = g_strdupv (opt->hosts);
  server->opt.api_keys = g_strdupv (opt->api_keys);
  server->opt.cors_origins = g_strdupv (opt->cors_origins);
  server->opt.model_id = g_strdup (opt->model_id);
  if (server->opt.max_body == 0)
    server->opt.max_body = UM_SERVER_DEFAULT_MAX_BODY;
  server->base = opt->gen_base;
  server->user_layer = opt->gen_user;
  server->profile_layer = opt->gen_profile;
  server->home = g_main_context_ref_thread_default ();
  server->context = g_main_context_new ();
  server->loop = g_main_loop_new (server->context, FALSE);
  server->runs = g_ptr_array_new ();
  server->keepalive_fd = -1;
  server->loopback = TRUE;
  for (guint i = 0; opt->hosts && opt->hosts[i]; i++)
    if (!is_loopback_host (opt->hosts[i]))
      server->loopback = FALSE;
  um_server_set_generator (server, generator);
  return server;
}

gboolean
um_server_start (UmServer *server, GError **error)
{
  if (server->thread != NULL)
    return TRUE;
  /* A key of spaces (a stray line, UNMASK_API_KEY=" ") is no key: never
   * one that opens the server beyond this computer, nor one a client's
   * empty Bearer matches. */
  for (guint i = 0; server->opt.api_keys && server->opt.api_keys[i]; i++)
    {
      const char *k = server->opt.api_keys[i];
      gboolean blank = TRUE;
      for (const char *c = k; *c && blank; c++)
        blank = g_ascii_isspace (*c);
      if (blank)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                       "an API key is empty or only spaces: give real keys (--api-key-file, UNMASK_API_KEY)");
          return FALSE;
        }
    }
  if (!server->loopback && (server->opt.api_keys == NULL || server->opt.api_keys[0] == NULL)
      && !server->opt.insecure_no_auth)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "refusing to serve beyond this computer without an API key: give one in a file "
                   "(--api-key-file) or in UNMASK_API_KEY, or pass --insecure-no-auth");
      return FALSE;
    }
  server->thread = g_thread_new ("unmask-server", server_thread, server);
  g_mutex_lock (&server->lock);
  while (!server->started)
    g_cond_wait (&server->cond, &server->lock);
  g_mutex_unlock (&server->lock);
  if (server->start_error != NULL)
    {
      g_propagate_error (error, g_steal_pointer (&server->start_error));
      g_thread_join (g_steal_pointer (&server->thread));
      return FALSE;
    }
  return TRUE;
}

char **
um_server_get_uris (UmServer *server)
{
  char **v;
  g_mutex_lock (&server->lock);
  v = g_strdupv (server->uris);
  g_mutex_unlock (&server->lock);
  return v;
}

void
um_server_get_counts (UmServer *server, int *n_running, int *n_waiting, guint64 *n_served)
{
  if (n_running)
    *n_running = g_atomic_int_get (&server->n_running);
  if (n_waiting)
    *n_waiting = g_atomic_int_get (&server->n_waiting);
  if (n_served)
    *n_served = server->served;
}

void
um_server_set_changed_func (UmServer *server, UmServerChangedFunc cb, gpointer user_data)
{
  server->changed_cb = cb;
  server->changed_data = user_data;
}

static gboolean
stop_in_thread (gpointer data)
{
  UmServer *server = data;
  um_server_cancel_runs (server);
  g_main_loop_quit (server->loop);
  return G_SOURCE_REMOVE;
}

void
um_server_stop (UmServer *server)
{
  if (server->thread == NULL)
    return;
  g_main_context_invoke (server->context, stop_in_thread, server);
  g_thread_join (g_steal_pointer (&server->thread));
  /* Cancelled generations end on the home context (this thread): wait
   * for them, so none outlives the server. */
  while (g_atomic_int_get (&server->n_generations) > 0)
    g_main_context_iteration (server->home, TRUE);
}

void
um_server_free (UmServer *server)
{
  if (server == NULL)
    return;
  um_server_stop (server);
  um_server_set_generator (server, NULL);
  g_ptr_array_unref (server->runs);
  g_strfreev (server->uris);
  g_free (server->running_id);
  g_main_loop_unref (server->loop);
  g_main_context_unref (server->context);
  g_main_context_unref (server->home);
  g_strfreev (server->opt.hosts);
  g_strfreev (server->opt.api_keys);
  g_strfreev (server->opt.cors_origins);
  g_free (server->opt.model_id);
  g_mutex_clear (&server->lock);
  g_cond_clear (&server->cond);
  g_free (server);
}

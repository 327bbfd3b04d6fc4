/* um-cli-serve.c — `unmask-cli serve`: the engine behind OpenAI's API. */
#include "config.h"

#include "um-cli.h"
#include "um-error.h"
#include "um-local-generator.h"
#include "um-server.h"

#include <glib-unix.h>
#include <glib/gstdio.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static gboolean
on_signal (gpointer data)
{
  g_main_loop_quit (data);
  return G_SOURCE_REMOVE;
}

/* Keys from the file (one per line) and UNMASK_API_KEY; never from argv,
 * which every user of the machine can read in ps. */
static gboolean
read_keys (const char *file, GPtrArray *keys, GError **error)
{
  const char *env = g_getenv ("UNMASK_API_KEY");

  if (env != NULL && env[0] != '\0')
    {
      char *k = g_strstrip (g_strdup (env));
      if (k[0] == '\0')
        {
          g_free (k);
          g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "UNMASK_API_KEY is only spaces: no key");
          return FALSE;
        }
      g_ptr_array_add (keys, k);
    }
  if (file != NULL)
    {
      g_autofree char *text = NULL;
      g_auto(GStrv) lines = NULL;
      GStatBuf st;

      if (!g_file_get_contents (file, &text, NULL, error))
        return FALSE;
      if (g_stat (file, &st) == 0 && (st.st_mode & 077) != 0)
        fprintf (stderr, "unmask-cli: %s can be read by other users (chmod 600 it)\n", file);
      lines = g_strsplit (text, "\n", -1);
      for (guint i = 0; lines[i]; i++)
        {
          g_strstrip (lines[i]);
          if (lines[i][0] != '\0' && lines[i][0] != '#')
            g_ptr_array_add (keys, g_strdup (lines[i]));
        }
      if (keys->len == 0)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "%s holds no key", file);
          return FALSE;
        }
    }
  return TRUE;
}

int
um_cli_serve (int argc, char **argv)
{
  g_autoptr(GOptionContext) ctx = g_option_context_new ("— serve a model over OpenAI's API (chat/completions, completions)");
  g_autofree char *model = NULL, *key_file = NULL, *max_body = NULL, *model_id = NULL;
  g_auto(GStrv) hosts = NULL, origins = NULL;
  int port = UM_SERVER_DEFAULT_PORT, max_queue = UM_SERVER_DEFAULT_MAX_QUEUE, ping = UM_SERVER_DEFAULT_PING_S;
  int max_conns = UM_SERVER_DEFAULT_MAX_CONNECTIONS, head_s = UM_SERVER_DEFAULT_HEAD_TIMEOUT_S;
  int body_s = UM_SERVER_DEFAULT_BODY_TIMEOUT_S, idle_s = UM_SERVER_DEFAULT_IDLE_TIMEOUT_S;
  gboolean insecure = FALSE;
  g_auto(UmCliGenOptions) go = { 0 };
  GOptionEntry entries[] = {
    { "model", 'm', 0, G_OPTION_ARG_FILENAME, &model, "Model folder or .gguf file", "PATH" },
    { "host", 0, 0, G_OPTION_ARG_STRING_ARRAY, &hosts,
      "Address to listen on (repeatable; default: 127.0.0.1 and ::1 only)", "ADDR" },
    { "port", 0, 0, G_OPTION_ARG_INT, &port, "Port (default 8765; 0: a free one, printed)", "N" },
    { "api-key-file", 0, 0, G_OPTION_ARG_FILENAME, &key_file,
      "Accepted API keys, one per line (also UNMASK_API_KEY); required beyond loopback", "FILE" },
    { "insecure-no-auth", 0, 0, G_OPTION_ARG_NONE, &insecure, "Serve beyond loopback without a key", NULL },
    { "max-queue", 0, 0, G_OPTION_ARG_INT, &max_queue, "Requests waiting behind the running one, then 503 (default 8)", "N" },
    { "max-body", 0, 0, G_OPTION_ARG_STRING, &max_body, "Largest request body (default 2MiB)", "SIZE" },
    { "cors-origin", 0, 0, G_OPTION_ARG_STRING_ARRAY, &origins, "Allow browser requests from this origin (repeatable)",
      "URL" },
    { "sse-ping-interval", 0, 0, G_OPTION_ARG_INT, &ping, "Seconds of stream silence before a ping comment (0: none)", "S" },
    { "model-id", 0, 0, G_OPTION_ARG_STRING, &model_id, "The id /v1/models lists (default: the model's name)", "ID" },
    { "max-connections", 0, 0, G_OPTION_ARG_INT, &max_conns,
      "Open connections at once; beyond, 503 and closed (default 128)", "N" },
    { "head-timeout", 0, 0, G_OPTION_ARG_INT, &head_s, "Seconds a request head may take (default 10)", "S" },
    { "body-timeout", 0, 0, G_OPTION_ARG_INT, &body_s, "Seconds a request body may take after its head (default 30)",
      "S" },
    { "idle-timeout", 0, 0, G_OPTION_ARG_INT, &idle_s, "Seconds an idle kept-alive connection stays open (default 15)",
      "S" },
    { NULL }
  };
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) keys = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(UmGenerator) gen = NULL;
  g_autoptr(GMainLoop) loop = NULL;
  g_auto(GStrv) uris = NULL;
  UmServerOptions so;
  UmEngineOptions opts;
  UmServer *server;
  UmEngine *engine;
  UmGenParams params;

  um_cli_gen_options_init (&go, 128, 128, 32);
  g_option_context_add_main_entries (ctx, entries, NULL);
  um_cli_gen_options_add (ctx, &go);
  if (!um_cli_parse_options (ctx, &argc, &argv))
    return 2;
  if (model == NULL)
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "give the model with --model PATH");
      return um_cli_fail (error);
    }
  if (port < 0 || port > 65535 || max_queue < 0 || max_queue > 100000 || ping < 0)
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "--port must be 0..65535, --max-queue 0..100000, "
                   "--sse-ping-interval ≥ 0");
      return um_cli_fail (error);
    }
  if (max_conns < 1 || max_conns > 100000 || head_s < 1 || head_s > 3600 || body_s < 1 || body_s > 3600 || idle_s < 1
      || idle_s > 3600)
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "--max-connections must be 1..100000, --head-timeout, --body-timeout and --idle-timeout 1..3600");
      return um_cli_fail (error);
    }
  if (go.constraints != NULL)
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "--constraint belongs to one generation, not to a server");
      return um_cli_fail (error);
    }
  if (!read_keys (key_file, keys, &error))
    return um_cli_fail (error);
  um_server_options_init (&so);
  if (max_body != NULL)
    {
      guint64 v;
      if (!um_parse_size (max_body, &v) || v == 0 || v > ((guint64) 1 << 30))
        {
          g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "--max-body must be a size up to 1GiB, not “%s”",
                       max_body);
          return um_cli_fail (error);
        }
      so.max_body = (gsize) v;
    }

  /* The command line's generation options become the server's defaults,
   * above the model's recommendation, as they would be for generate. */
  if (!um_cli_gen_options_to_params (&go, &params, &error))
    return um_cli_fail (error);
  so.gen_base = params;
  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    if ((go.given & UM_GEN_KEY_BIT (k)) || (k == UM_GEN_KEY_REMASKING && go.remasking != NULL))
      um_gen_layer_take (&so.gen_user, (UmGenKey) k, &params);
  if (go.mode == NULL)
    {
      g_autoptr(UmProfile) profile = um_profile_load (NULL, NULL, NULL);
      g_autofree char *identity = um_model_identity (model);
      if (profile != NULL && profile->written_by != UM_PROFILE_BY_DEFAULT)
        um_profile_gen_layer (profile, identity, &so.gen_profile);
    }
  if (!um_cli_engine_options (&go, &params, 64, model, &opts, &error))
    return um_cli_fail (error);
  engine = um_cli_load_engine_with (model, &opts, &error);
  if (engine == NULL)
    return um_cli_fail (error);
  gen = um_local_generator_new (engine);

  so.hosts = g_steal_pointer (&hosts);
  so.port = (guint) port;
  if (keys->len > 0)
    {
      g_ptr_array_add (keys, NULL);
      so.api_keys = (char **) g_ptr_array_free (g_steal_pointer (&keys), FALSE);
    }
  so.insecure_no_auth = insecure;
  so.max_queue = max_queue;
  so.cors_origins = g_steal_pointer (&origins);
  so.ping_interval_s = (guint) ping;
  so.max_connections = (guint) max_conns;
  so.head_timeout_s = (guint) head_s;
  so.body_timeout_s = (guint) body_s;
  so.idle_timeout_s = (guint) idle_s;
  so.model_id = g_steal_pointer (&model_id);
  server = um_server_new (gen, &so);
  um_server_options_clear (&so);
  if (!um_server_start (server, &error))
    {
      um_server_free (server);
      return um_cli_fail (error);
    }
  uris = um_server_get_uris (server);
  for (guint i = 0; uris && uris[i]; i++)
    printf ("Listening on %s\n", uris[i]);
  fflush (stdout);

  loop = g_main_loop_new (NULL, FALSE);
  g_unix_signal_add (SIGINT, on_signal, loop);
  g_unix_signal_add (SIGTERM, on_signal, loop);
  g_main_loop_run (loop);
  fprintf (stderr, "unmask-cli: stopping the server\n");
  um_server_free (server);
  return 0;
}

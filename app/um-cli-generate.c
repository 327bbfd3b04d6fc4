/* unmask-cli generate and chat. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "um-chat-template.h"
#include "um-cli.h"
#include "um-error.h"
#include "um-json.h"
#include "um-remote-generator.h"

/* ---- live view of the canvas on a terminal ---- */

typedef struct {
  UmEngine *engine;
  gboolean  live;
  int       lines_drawn;
  GPtrArray *trace;    /* GArray of gint32 per step */
  UmGenerator *gen;    /* --server: the remote engine (pieces, special ids) */
} GenState;

static int
terminal_width (void)
{
  struct winsize ws;
  if (ioctl (STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
    return ws.ws_col;
  return 80;
}

/* Rows the plain text occupies on a terminal @width columns wide. */
static int
count_rows (const char *plain, int width)
{
  int rows = 0;
  g_auto(GStrv) lines = g_strsplit (plain, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++)
    {
      glong n = g_utf8_strlen (lines[i], -1);
      rows += MAX (1, (int) ((n + width - 1) / width));
    }
  return rows;
}

static void
erase_live (GenState *st)
{
  if (st->lines_drawn > 1)
    printf ("\033[%dA", st->lines_drawn - 1);
  printf ("\r\033[J");
  st->lines_drawn = 0;
}

static void
draw_live (GenState *st, const UmStepEvent *ev)
{
  UmModel *model = st->engine != NULL ? um_engine_get_model (st->engine) : NULL;
  const UmGeneratorInfo *info = st->gen != NULL ? um_generator_get_info (st->gen) : NULL;
  const gint32 mask_id = model ? model->cfg.mask_id : info->mask_id;
  const gint32 eos_id = model ? model->cfg.eos_id : info->eos_id, eot_id = model ? model->cfg.eot_id : info->eot_id;
  g_autoptr(GString) color = g_string_new (NULL);
  g_autoptr(GString) plain = g_string_new (NULL);
  g_autoptr(GHashTable) fresh = g_hash_table_new (NULL, NULL);
  int k = 0;

  for (int i = 0; i < ev->n_committed; i++)
    g_hash_table_add (fresh, GINT_TO_POINTER (ev->positions[i]));

  g_string_append_printf (plain, "step %d/%d · block %d/%d · %.1f s\n",
                          ev->step + 1, ev->n_steps, ev->block + 1, ev->n_blocks, ev->elapsed);
  g_string_append_printf (color, "\033[2m%s\033[0m", plain->str);
  for (int pos = ev->prompt_len; pos < ev->seq_len; pos++, k++)
    {
      gint32 id = ev->canvas[pos];
      g_autofree char *piece = NULL;
      if (id == mask_id)
        {
          g_string_append (plain, "░");
          g_string_append (color, "\033[90m░\033[0m");
          continue;
        }
      if (id >= 0 && (id == eos_id || id == eot_id))
        piece = g_strdup ("·");
      else if (model != NULL)
        piece = um_tokenizer_decode (model->tokenizer, &id, 1, TRUE, NULL);
      else
        piece = um_generator_token_text (st->gen, id);
      if (piece == NULL)
        piece = g_strdup ("?");
      g_string_append (plain, piece);
      if (g_hash_table_contains (fresh, GINT_TO_POINTER (pos)))
        g_string_append_printf (color, "\033[1;32m%s\033[0m", piece);
      else
        g_string_append (color, piece);
    }
  erase_live (st);
  fputs (color->str, stdout);
  fflush (stdout);
  st->lines_drawn = count_rows (plain->str, terminal_width ());
}

static void
on_step (const UmStepEvent *ev, gpointer user_data)
{
  GenState *st = user_data;
  GArray *committed = g_array_sized_new (FALSE, FALSE, sizeof (gint32), ev->n_committed);

  g_array_append_vals (committed, ev->positions, ev->n_committed);
  g_ptr_array_add (st->trace, committed);
  if (st->live)
    draw_live (st, ev);
}

static JsonNode *
trace_to_json (GPtrArray *trace)
{
  JsonArray *arr = json_array_sized_new (trace->len);
  JsonNode *node = json_node_new (JSON_NODE_ARRAY);
  for (guint i = 0; i < trace->len; i++)
    {
      GArray *a = g_ptr_array_index (trace, i);
      json_array_add_element (arr, um_cli_ids_to_json ((const gint32 *) a->data, a->len));
    }
  json_node_take_array (node, arr);
  return node;
}

/* ---- --server: the remote engine from a terminal ---- */

typedef struct {
  GMainLoop         *loop;
  GObject           *object;
  UmGeneratorResult *res;
  GError            *error;
} RemoteWait;

static void
on_remote_connected (GObject *source, GAsyncResult *result, gpointer user_data)
{
  RemoteWait *w = user_data;
  w->object = G_OBJECT (um_remote_generator_new_finish (result, &w->error));
  g_main_loop_quit (w->loop);
}

static void
on_remote_generated (GObject *source, GAsyncResult *result, gpointer user_data)
{
  RemoteWait *w = user_data;
  w->res = um_generator_generate_finish (UM_GENERATOR (source), result, &w->error);
  g_main_loop_quit (w->loop);
}

/* The generator for @model_id (NULL: the server's first) at @url; the key
 * is @key, else UNMASK_API_KEY (the environment: argv is visible in ps). */
static UmGenerator *
remote_connect (const char *url, const char *key, const char *model_id, GError **error)
{
  RemoteWait w = { g_main_loop_new (NULL, FALSE) };

  if (key == NULL || key[0] == '\0')
    key = g_getenv ("UNMASK_API_KEY");
  um_remote_generator_new_async (url, key, model_id, NULL, on_remote_connected, &w);
  g_main_loop_run (w.loop);
  g_main_loop_unref (w.loop);
  if (w.object == NULL)
    {
      g_propagate_error (error, w.error);
      return NULL;
    }
  return UM_GENERATOR (w.object);
}

static UmGeneratorResult *
remote_generate (UmGenerator *gen, const UmGeneratorRequest *req, GenState *st, GError **error)
{
  RemoteWait w = { g_main_loop_new (NULL, FALSE) };

  um_generator_generate_async (gen, req, on_step, st, NULL, on_remote_generated, &w);
  g_main_loop_run (w.loop);
  g_main_loop_unref (w.loop);
  if (st->live)
    erase_live (st);
  if (w.res == NULL)
    g_propagate_error (error, w.error);
  return w.res;
}

/* The parameters a server gets: those the command line gave, then the
 * server's own defaults (what /v1/models says of the model), then the
 * family's built-in ones; the server checks them. */
static void
remote_params (UmCliGenOptions *o, UmGenerator *gen, UmGenParams *p)
{
  const UmGeneratorInfo *info = um_generator_get_info (gen);
  UmGenLayer user;

  um_gen_layer_init (&user);
  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    if ((o->given & UM_GEN_KEY_BIT (k)) || (k == UM_GEN_KEY_REMASKING && o->remasking != NULL))
      um_gen_layer_take (&user, (UmGenKey) k, p);
  um_gen_resolve_for (info->arch, p, &user, info->recommendation ? &info->recommendation->layer : NULL, NULL,
                      &o->resolved);
  *p = o->resolved.params;
}

/* Options of the engine in this process, which a server run has no use
 * for: an error rather than silently nothing. */
static gboolean
remote_refuses_local_options (const UmCliGenOptions *o, GError **error)
{
  const char *flag = o->threads > 0 ? "--threads" : o->device ? "--device" : o->mode ? "--mode"
                     : o->budget ? "--budget" : o->weight_format ? "--weight-format" : o->experts ? "--experts"
                     : o->cache_dir ? "--cache-dir" : o->constraints ? "--constraint" : NULL;

  if (flag == NULL)
    return TRUE;
  g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "%s is for a model run here, not with --server", flag);
  return FALSE;
}

static int
generate_remote (UmCliGenOptions *go, UmGeneratorRequest *greq, const char *url, const char *key,
                 const char *model_id, gboolean json, gboolean no_live)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(UmGenerator) gen = NULL;
  g_autoptr(GPtrArray) trace = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  g_autoptr(UmGeneratorResult) res = NULL;
  GenState st = { 0 };

  if (!remote_refuses_local_options (go, &error) || (gen = remote_connect (url, key, model_id, &error)) == NULL)
    return um_cli_fail (error);
  remote_params (go, gen, &greq->params);
  st.gen = gen;
  st.trace = trace;
  st.live = !json && !no_live && isatty (STDOUT_FILENO);
  if ((res = remote_generate (gen, greq, &st, &error)) == NULL)
    return um_cli_fail (error);
  if (json)
    {
      g_autoptr(JsonBuilder) b = json_builder_new ();
      g_autoptr(JsonNode) root = NULL;
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "ids");
      json_builder_add_value (b, um_cli_ids_to_json ((const gint32 *) res->ids->data, res->ids->len));
      json_builder_set_member_name (b, "trace");
      json_builder_add_value (b, trace_to_json (trace));
      json_builder_set_member_name (b, "text");
      json_builder_add_string_value (b, res->text);
      json_builder_set_member_name (b, "finish_reason");
      json_builder_add_string_value (b, res->hit_eos ? "stop" : "length");
      json_builder_set_member_name (b, "completion_tokens");
      json_builder_add_int_value (b, res->completion_tokens);
      json_builder_set_member_name (b, "seconds");
      json_builder_add_double_value (b, res->seconds);
      json_builder_set_member_name (b, "steps");
      json_builder_add_int_value (b, res->steps);
      json_builder_set_member_name (b, "server");
      json_builder_add_string_value (b, um_remote_generator_get_url (UM_REMOTE_GENERATOR (gen)));
      json_builder_set_member_name (b, "model");
      json_builder_add_string_value (b, um_generator_get_info (gen)->model_id);
      json_builder_end_object (b);
      root = json_builder_get_root (b);
      um_cli_print_json (root, FALSE);
    }
  else
    {
      printf ("%s\n", res->text);
      if (isatty (STDERR_FILENO))
        fprintf (stderr, "\033[2m%d tokens, %d steps, %.2f s (%s)\033[0m\n", res->completion_tokens, res->steps,
                 res->seconds, um_remote_generator_get_url (UM_REMOTE_GENERATOR (gen)));
    }
  return 0;
}

int
um_cli_generate (int argc, char **argv)
{
  g_autoptr(GOptionContext) ctx = g_option_context_new ("— generate with a diffusion LM (LLaDA, LLaDA-MoE, Dream, RND1)");
  g_autofree char *model = NULL, *prompt = NULL, *ids_text = NULL, *server = NULL, *api_key = NULL;
  g_autofree char *server_model = NULL;
  gboolean chat = FALSE, json = FALSE, no_live = FALSE;
  /* Cleared on return: the params' constraints point into it. */
  g_auto(UmCliGenOptions) go = { 0 };
  GOptionEntry entries[] = {
    { "model", 'm', 0, G_OPTION_ARG_FILENAME, &model, "Model folder or .gguf file", "PATH" },
    { "server", 0, 0, G_OPTION_ARG_STRING, &server,
      "Generate on a server instead (unmask-cli serve, or any OpenAI-compatible one)", "URL" },
    { "api-key", 0, 0, G_OPTION_ARG_STRING, &api_key,
      "The server's API key (default: UNMASK_API_KEY, which ps does not show)", "KEY" },
    { "server-model", 0, 0, G_OPTION_ARG_STRING, &server_model, "The server's model id (default: its first)", "ID" },
    { "prompt", 'p', 0, G_OPTION_ARG_STRING, &prompt, "Prompt text", "TEXT" },
    { "chat", 0, 0, G_OPTION_ARG_NONE, &chat, "Wrap the prompt in the Instruct chat template", NULL },
    { "ids", 0, 0, G_OPTION_ARG_STRING, &ids_text, "Prompt as token ids", "1,2,3" },
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "Print one JSON object: ids, trace, text, timing", NULL },
    { "no-live", 0, 0, G_OPTION_ARG_NONE, &no_live, "Do not animate the canvas on a terminal", NULL },
    { "verbose", 'v', 0, G_OPTION_ARG_NONE, &go.verbose,
      "Say where each generation setting came from (command line, model, profile, built-in)", NULL },
    { NULL }
  };
  g_autoptr(GError) error = NULL;
  g_autoptr(UmEngine) engine = NULL;
  g_autoptr(UmGenResult) result = NULL;
  g_autoptr(GArray) ids = NULL;
  g_autoptr(GPtrArray) trace = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  UmGenRequest req;
  GenState st = { 0 };

  um_cli_gen_options_init (&go, 128, 128, 32);
  go.resolve = TRUE;
  g_option_context_add_main_entries (ctx, entries, NULL);
  um_cli_gen_options_add (ctx, &go);
  if (!um_cli_parse_options (ctx, &argc, &argv))
    return 2;

  um_gen_request_init (&req);
  if (!um_cli_gen_options_to_params (&go, &req.params, &error))
    return um_cli_fail (error);
  if ((prompt == NULL) == (ids_text == NULL))
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "give exactly one of --prompt TEXT or --ids LIST");
      return um_cli_fail (error);
    }
  if (ids_text != NULL)
    {
      if (chat)
        {
          g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "--chat needs --prompt, not --ids");
          return um_cli_fail (error);
        }
      if ((ids = um_cli_parse_ids (ids_text, &error)) == NULL)
        return um_cli_fail (error);
      req.prompt_ids = (const gint32 *) ids->data;
      req.n_prompt_ids = ids->len;
    }
  req.prompt = prompt;
  req.chat = chat;

  if (server != NULL)
    {
      UmGeneratorRequest greq;
      if (model != NULL)
        {
          g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "give --model PATH or --server URL, not both");
          return um_cli_fail (error);
        }
      um_generator_request_init (&greq);
      greq.prompt = prompt;
      greq.chat = chat;
      greq.prompt_ids = req.prompt_ids;
      greq.n_prompt_ids = req.n_prompt_ids;
      greq.params = req.params;
      return generate_remote (&go, &greq, server, api_key, server_model, json, no_live);
    }
  if (api_key != NULL || server_model != NULL)
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "--api-key and --server-model go with --server URL");
      return um_cli_fail (error);
    }

  {
    UmEngineOptions opts;
    if (um_cli_engine_options (&go, &req.params, ids ? (int) ids->len : 64, model, &opts, &error))
      engine = um_cli_load_engine_with (model, &opts, &error);
  }
  if (engine == NULL)
    return um_cli_fail (error);
  if (go.verbose)
    um_cli_print_defaults (&go);

  st.engine = engine;
  st.trace = trace;
  st.live = !json && !no_live && isatty (STDOUT_FILENO);
  result = um_engine_generate (engine, &req, on_step, &st, NULL, &error);
  if (st.live)
    erase_live (&st);
  if (result == NULL)
    return um_cli_fail (error);

  if (json)
    {
      g_autoptr(JsonBuilder) b = json_builder_new ();
      g_autoptr(JsonNode) root = NULL;
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "ids");
      json_builder_add_value (b, um_cli_ids_to_json ((const gint32 *) result->ids->data, result->ids->len));
      json_builder_set_member_name (b, "trace");
      json_builder_add_value (b, trace_to_json (trace));
      um_json_add_string (b, "text", result->text);
      json_builder_set_member_name (b, "prompt_ids");
      json_builder_add_value (b, um_cli_ids_to_json ((const gint32 *) result->prompt_ids->data,
                                                     result->prompt_ids->len));
      um_json_add_double (b, "seconds", result->seconds);
      json_builder_set_member_name (b, "steps");
      /* One event per step run: right with threshold/factor too, where
       * the step count is only known at the end. */
      json_builder_add_int_value (b, trace->len);
      um_json_add_double (b, "tokens_per_second", result->seconds > 0 ? result->ids->len / result->seconds : 0.0);
      um_cli_defaults_json (b, &go);
      {
        /* Where it ran and the most compute memory it took (weights on a GPU included). */
        UmBackend *be = um_engine_get_backend (engine);
        UmBackendMemInfo mem;
        be->ops->mem_info (be, &mem);
        um_json_add_string (b, "backend", um_backend_name (be));
        um_json_add_int (b, "backend_peak_bytes", mem.peak);
        um_cli_memory_json (b, engine);
        {
          /* Since load: the generation's passes are the forward's only ones. */
          const UmStreamCounters none[2] = { { 0 } };
          um_cli_streaming_json (b, engine, um_forward_get_stats (um_engine_get_forward (engine)), none);
        }
      }
      json_builder_end_object (b);
      root = json_builder_get_root (b);
      um_cli_print_json (root, FALSE);
    }
  else
    {
      printf ("%s\n", result->text);
      if (isatty (STDERR_FILENO))
        fprintf (stderr, "\033[2m%u tokens, %d steps, %.2f s, %.2f tokens/s\033[0m\n",
                 result->ids->len, (int) trace->len, result->seconds,
                 result->seconds > 0 ? result->ids->len / result->seconds : 0.0);
    }
  return 0;
}

/* Chat with a server: the conversation so far goes as messages, each
 * turn's answer added as the assistant's. */
static int
chat_remote (UmCliGenOptions *go, UmGenParams *params, const char *url, const char *key, const char *model_id)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(UmGenerator) gen = NULL;
  g_autoptr(GPtrArray) trace = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  g_autoptr(GArray) messages = g_array_new (FALSE, FALSE, sizeof (UmGenMessage));
  gboolean tty = isatty (STDIN_FILENO);
  char line[8192];
  int rc = 0;

  if (!remote_refuses_local_options (go, &error) || (gen = remote_connect (url, key, model_id, &error)) == NULL)
    return um_cli_fail (error);
  remote_params (go, gen, params);
  for (;;)
    {
      g_autoptr(UmGeneratorResult) res = NULL;
      GenState st = { NULL, tty && isatty (STDOUT_FILENO), 0, trace, gen };
      UmGeneratorRequest req;
      UmGenMessage m;

      if (tty)
        {
          fputs ("\033[1m> \033[0m", stdout);
          fflush (stdout);
        }
      if (fgets (line, sizeof line, stdin) == NULL)
        break;
      g_strstrip (line);
      if (line[0] == '\0')
        continue;
      m.role = g_strdup ("user");
      m.content = g_strdup (line);
      g_array_append_val (messages, m);
      um_generator_request_init (&req);
      req.messages = (const UmGenMessage *) (gpointer) messages->data;
      req.n_messages = (int) messages->len;
      req.params = *params;
      if ((res = remote_generate (gen, &req, &st, &error)) == NULL)
        {
          rc = um_cli_fail (error);
          break;
        }
      printf ("%s\n", res->text);
      fflush (stdout);
      m.role = g_strdup ("assistant");
      m.content = g_strdup (res->text);
      g_array_append_val (messages, m);
    }
  for (guint i = 0; i < messages->len; i++)
    {
      g_free (g_array_index (messages, UmGenMessage, i).role);
      g_free (g_array_index (messages, UmGenMessage, i).content);
    }
  return rc;
}

/* Multi-turn chat on stdin/stdout, following the reference chat.py: each
 * turn's prompt is the previous prompt + answer without EOS, then the new
 * user turn. */
int
um_cli_chat (int argc, char **argv)
{
  g_autoptr(GOptionContext) ctx = g_option_context_new ("— chat with a LLaDA Instruct model");
  g_autofree char *model = NULL, *server = NULL, *api_key = NULL, *server_model = NULL;
  /* Cleared on return: the params' constraints point into it. */
  g_auto(UmCliGenOptions) go = { 0 };
  GOptionEntry entries[] = {
    { "model", 'm', 0, G_OPTION_ARG_FILENAME, &model, "Model folder or .gguf file", "PATH" },
    { "server", 0, 0, G_OPTION_ARG_STRING, &server,
      "Chat with a server instead (unmask-cli serve, or any OpenAI-compatible one)", "URL" },
    { "api-key", 0, 0, G_OPTION_ARG_STRING, &api_key,
      "The server's API key (default: UNMASK_API_KEY, which ps does not show)", "KEY" },
    { "server-model", 0, 0, G_OPTION_ARG_STRING, &server_model, "The server's model id (default: its first)", "ID" },
    { "verbose", 'v', 0, G_OPTION_ARG_NONE, &go.verbose,
      "Say where each generation setting came from (command line, model, profile, built-in)", NULL },
    { NULL }
  };
  g_autoptr(GError) error = NULL;
  g_autoptr(UmEngine) engine = NULL;
  g_autoptr(GArray) history = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autoptr(GPtrArray) trace = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  UmGenParams params;
  char line[8192];
  gboolean tty = isatty (STDIN_FILENO);

  um_cli_gen_options_init (&go, 128, 128, 32);
  go.resolve = TRUE;
  g_option_context_add_main_entries (ctx, entries, NULL);
  um_cli_gen_options_add (ctx, &go);
  if (!um_cli_parse_options (ctx, &argc, &argv))
    return 2;
  if (!um_cli_gen_options_to_params (&go, &params, &error))
    return um_cli_fail (error);
  if (server != NULL)
    {
      if (model != NULL)
        {
          g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "give --model PATH or --server URL, not both");
          return um_cli_fail (error);
        }
      return chat_remote (&go, &params, server, api_key, server_model);
    }
  if (api_key != NULL || server_model != NULL)
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "--api-key and --server-model go with --server URL");
      return um_cli_fail (error);
    }
  {
    UmEngineOptions opts;
    if (um_cli_engine_options (&go, &params, 64, model, &opts, &error))
      engine = um_cli_load_engine_with (model, &opts, &error);
  }
  if (engine == NULL)
    return um_cli_fail (error);
  if (go.verbose)
    um_cli_print_defaults (&go);

  for (;;)
    {
      UmModel *m = um_engine_get_model (engine);
      g_autoptr(GArray) prompt = g_array_new (FALSE, FALSE, sizeof (gint32));
      g_autoptr(UmGenResult) result = NULL;
      UmGenRequest req;
      GenState st = { engine, tty && isatty (STDOUT_FILENO), 0, trace, NULL };

      if (tty)
        {
          fputs ("\033[1m> \033[0m", stdout);
          fflush (stdout);
        }
      if (fgets (line, sizeof line, stdin) == NULL)
        break;
      g_strstrip (line);
      if (line[0] == '\0')
        continue;
      if (!um_model_build_chat_prompt (m, history->len ? (const gint32 *) history->data : NULL,
                                       history->len, line, prompt, &error))
        return um_cli_fail (error);
      um_gen_request_init (&req);
      req.params = params;
      req.prompt_ids = (const gint32 *) prompt->data;
      req.n_prompt_ids = prompt->len;
      result = um_engine_generate (engine, &req, on_step, &st, NULL, &error);
      if (st.live)
        erase_live (&st);
      if (result == NULL)
        return um_cli_fail (error);
      printf ("%s\n", result->text);
      fflush (stdout);
      g_array_set_size (history, 0);
      g_array_append_vals (history, prompt->data, prompt->len);
      g_array_append_vals (history, result->ids->data, result->ids->len);
    }
  return 0;
}

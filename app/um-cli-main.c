/* unmask-cli — the Unmask engine without a display, for scripts and benchmarks. */
#include "config.h"

#include <locale.h>
#include <stdio.h>
#include <string.h>

#include "um-cli.h"
#include "um-error.h"

static const struct {
  const char   *name;
  UmCliCommand  run;
  const char   *summary;
} commands[] = {
  { "generate",   um_cli_generate,   "generate text from a prompt, showing the canvas fill in" },
  { "chat",       um_cli_chat,       "multi-turn chat with an Instruct model" },
  { "serve",      um_cli_serve,      "serve the model over OpenAI's API (chat/completions, completions)" },
  { "logits",     um_cli_logits,     "print the logits of a token sequence as JSON" },
  { "tokenize",   um_cli_tokenize,   "text to token ids" },
  { "detokenize", um_cli_detokenize, "token ids to text" },
  { "inspect",    um_cli_inspect,    "architecture, parameters, dtypes and special ids of a model" },
  { "compare",    um_cli_compare,    "KL divergence and arg-max agreement of a model against a reference" },
  { "score",      um_cli_score,      "log-likelihood of answers under the full model (to judge fast decoding)" },
  { "bench",      um_cli_bench,      "measure forward passes, GFLOP/s and memory" },
  { "plan",       um_cli_plan,       "predict memory of every mode for a model on this machine, before loading" },
  { "cache",      um_cli_cache,      "list or remove converted weights (list | remove FILE | clear)" },
  { "optimize",   um_cli_optimize,   "pick the memory mode that fits this machine and write the profile" },
  { "restore",    um_cli_restore,    "restore the optimizer profile from a backup (original | latest | ID)" },
  { "backups",    um_cli_backups,    "list the optimizer profile's backups" },
  { "quantize",   um_cli_quantize,   "write a model as a GGUF of another type (Q8_0, Q4_K_M, ...)" },
  { "devices",    um_cli_devices,    "the GPUs Unmask can use, or why none" },
};

static void
usage (FILE *out)
{
  fprintf (out, "Usage: unmask-cli COMMAND [OPTIONS]\n\nCommands:\n");
  for (guint i = 0; i < G_N_ELEMENTS (commands); i++)
    fprintf (out, "  %-11s %s\n", commands[i].name, commands[i].summary);
  fprintf (out, "\nRun “unmask-cli COMMAND --help” for a command's options.\n");
}

int
main (int argc, char **argv)
{
  setlocale (LC_ALL, "");

  if (argc < 2)
    {
      usage (stderr);
      return 2;
    }
  if (g_str_equal (argv[1], "--help") || g_str_equal (argv[1], "-h") || g_str_equal (argv[1], "help"))
    {
      usage (stdout);
      return 0;
    }
  if (g_str_equal (argv[1], "--version"))
    {
      printf ("unmask-cli %s\n", PACKAGE_VERSION);
      return 0;
    }
  for (guint i = 0; i < G_N_ELEMENTS (commands); i++)
    if (g_str_equal (argv[1], commands[i].name))
      return commands[i].run (argc - 1, argv + 1);

  fprintf (stderr, "unmask-cli: unknown command “%s”\n\n", argv[1]);
  usage (stderr);
  return 2;
}

GArray *
um_cli_parse_ids (const char *text, GError **error)
{
  g_autoptr(GArray) ids = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_auto(GStrv) parts = g_strsplit (text, ",", -1);

  for (guint i = 0; parts[i] != NULL; i++)
    {
      g_autofree char *item = g_strstrip (g_strdup (parts[i]));
      gint64 v;
      if (item[0] == '\0' && parts[1] == NULL)
        break;  /* "" is an empty list */
      if (!g_ascii_string_to_signed (item, 10, 0, G_MAXINT32, &v, NULL))
        {
          g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                       "“%s” is not a token id (expected a list like 1,2,3)", item);
          return NULL;
        }
      gint32 id = (gint32) v;
      g_array_append_val (ids, id);
    }
  return g_steal_pointer (&ids);
}

int
um_cli_fail (GError *error)
{
  fprintf (stderr, "unmask-cli: %s\n", error ? error->message : "failed");
  return 1;
}

void
um_cli_print_json (JsonNode *node, gboolean pretty)
{
  g_autoptr(JsonGenerator) gen = json_generator_new ();
  g_autofree char *text = NULL;

  json_generator_set_pretty (gen, pretty);
  json_generator_set_root (gen, node);
  text = json_generator_to_data (gen, NULL);
  fputs (text, stdout);
  fputc ('\n', stdout);
  fflush (stdout);
}

JsonNode *
um_cli_ids_to_json (const gint32 *ids, guint n)
{
  JsonArray *arr = json_array_sized_new (n);
  JsonNode *node = json_node_new (JSON_NODE_ARRAY);
  for (guint i = 0; i < n; i++)
    json_array_add_int_element (arr, ids[i]);
  json_node_take_array (node, arr);
  return node;
}

gboolean
um_cli_parse_options (GOptionContext *ctx, int *argc, char ***argv)
{
  g_autoptr(GError) error = NULL;
  if (!g_option_context_parse (ctx, argc, argv, &error))
    {
      fprintf (stderr, "unmask-cli: %s\n", error->message);
      return FALSE;
    }
  return TRUE;
}

/* unmask-cli score — the log-likelihood of answers under the full model
 * (um-score.h), to judge what a faster schedule gave up: score the outputs
 * of `generate --json` run with and without it. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "um-cli.h"
#include "um-error.h"
#include "um-json.h"
#include "um-score.h"

static GArray *
ids_member (JsonObject *o, const char *name, guint line, GError **error)
{
  JsonArray *a;
  GArray *ids;

  if (!json_object_has_member (o, name)
      || JSON_NODE_TYPE (json_object_get_member (o, name)) != JSON_NODE_ARRAY)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "entry %u: no list “%s”", line, name);
      return NULL;
    }
  a = json_object_get_array_member (o, name);
  ids = g_array_sized_new (FALSE, FALSE, sizeof (gint32), json_array_get_length (a));
  for (guint i = 0; i < json_array_get_length (a); i++)
    {
      JsonNode *n = json_array_get_element (a, i);
      gint64 v;
      if (JSON_NODE_TYPE (n) != JSON_NODE_VALUE || json_node_get_value_type (n) != G_TYPE_INT64
          || (v = json_node_get_int (n)) < 0 || v > G_MAXINT32)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "entry %u: “%s”[%u] is not a token id", line, name, i);
          g_array_unref (ids);
          return NULL;
        }
      gint32 t = (gint32) v;
      g_array_append_val (ids, t);
    }
  return ids;
}

/* Appends entry @n's prompt_ids and ids to @pairs (@where names it in errors). */
static gboolean
add_pair (JsonNode *n, const char *where, guint index, GPtrArray *pairs, GError **error)
{
  GArray *p, *q;

  if (n == NULL || JSON_NODE_TYPE (n) != JSON_NODE_OBJECT)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s, entry %u: not a JSON object", where, index);
      return FALSE;
    }
  if ((p = ids_member (json_node_get_object (n), "prompt_ids", index, error)) == NULL)
    return FALSE;
  if ((q = ids_member (json_node_get_object (n), "ids", index, error)) == NULL)
    {
      g_array_unref (p);
      return FALSE;
    }
  g_ptr_array_add (pairs, p);
  g_ptr_array_add (pairs, q);
  return TRUE;
}

/* @path: one JSON object per line (what `generate --json` prints) or a
 * JSON list of them; each gives prompt_ids and ids. Appends pairs of
 * arrays to @pairs. */
static gboolean
read_generations (const char *path, GPtrArray *pairs, GError **error)
{
  g_autofree char *text = NULL;
  g_auto(GStrv) lines = NULL;
  const char *start;
  gsize len;

  if (!g_file_get_contents (path, &text, &len, error))
    return FALSE;
  /* Lines are split as C strings, which a NUL would cut short unseen. */
  if (memchr (text, '\0', len) != NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: a NUL byte at offset %" G_GSIZE_FORMAT ", not text", path,
                   (gsize) ((const char *) memchr (text, '\0', len) - text));
      return FALSE;
    }
  /* A JSON list starts with '['; anything else is read as lines. */
  for (start = text; g_ascii_isspace (*start); start++)
    ;
  if (*start == '[')
    {
      g_autoptr(JsonNode) root = um_json_parse (text, (gssize) len, path, &um_json_limits_model_file, error);
      JsonArray *a;
      if (root == NULL)
        return FALSE;
      a = json_node_get_array (root);
      for (guint i = 0; i < json_array_get_length (a); i++)
        if (!add_pair (json_array_get_element (a, i), path, i + 1, pairs, error))
          return FALSE;
    }
  else
    {
      lines = g_strsplit (text, "\n", -1);
      for (guint i = 0; lines[i] != NULL; i++)
        {
          g_autofree char *what = g_strdup_printf ("%s, line %u", path, i + 1);
          g_autoptr(JsonNode) line = NULL;
          if (g_strstrip (lines[i])[0] == '\0')
            continue;
          if ((line = um_json_parse (lines[i], -1, what, NULL, error)) == NULL)
            return FALSE;
          if (!add_pair (line, path, i + 1, pairs, error))
            return FALSE;
        }
    }
  if (pairs->len == 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: no generations", path);
      return FALSE;
    }
  return TRUE;
}

int
um_cli_score (int argc, char **argv)
{
  g_autoptr(GOptionContext) ctx = g_option_context_new ("— log-likelihood of answers under the full model");
  g_autofree char *model = NULL, *device = NULL, *prompt_ids = NULL, *answer_ids = NULL, *gens = NULL;
  int threads = 0, samples = 32, batch = 8;
  gint64 seed = 0;
  gboolean json = FALSE;
  GOptionEntry entries[] = {
    { "model", 'm', 0, G_OPTION_ARG_FILENAME, &model, "Model folder or .gguf file", "PATH" },
    { "prompt-ids", 0, 0, G_OPTION_ARG_STRING, &prompt_ids, "Prompt token ids", "1,2,3" },
    { "answer-ids", 0, 0, G_OPTION_ARG_STRING, &answer_ids, "Answer token ids to score", "1,2,3" },
    { "generations", 0, 0, G_OPTION_ARG_FILENAME, &gens,
      "Score every output in this file: `generate --json` lines, or a JSON list of them", "FILE" },
    { "samples", 0, 0, G_OPTION_ARG_INT, &samples, "Masked copies per answer (default 32)", "N" },
    { "batch", 0, 0, G_OPTION_ARG_INT, &batch, "Copies per forward pass (default 8)", "N" },
    { "seed", 0, 0, G_OPTION_ARG_INT64, &seed, "Seed of the masks (default 0)", "S" },
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "JSON output", NULL },
    { "threads", 0, 0, G_OPTION_ARG_INT, &threads, "CPU threads (default: all cores)", "N" },
    { "device", 0, 0, G_OPTION_ARG_STRING, &device, "cpu (default), cuda or auto", "DEVICE" },
    { NULL }
  };
  g_autoptr(GError) error = NULL;
  g_autoptr(UmEngine) engine = NULL;
  g_autoptr(GPtrArray) pairs = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  g_autoptr(JsonBuilder) b = json_builder_new ();
  g_autoptr(JsonNode) root = NULL;
  UmScoreParams params;
  double sum_ll = 0, sum_pt = 0;
  long tokens = 0;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!um_cli_parse_options (ctx, &argc, &argv))
    return 2;
  if (model == NULL)
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "--model PATH is required");
      return um_cli_fail (error);
    }
  if ((gens != NULL) == (answer_ids != NULL))
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "give exactly one of --answer-ids LIST (with --prompt-ids) or --generations FILE");
      return um_cli_fail (error);
    }
  if (samples < 1 || batch < 1 || seed < 0)
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "--samples and --batch must be ≥ 1, --seed ≥ 0");
      return um_cli_fail (error);
    }
  if (gens != NULL)
    {
      if (!read_generations (gens, pairs, &error))
        return um_cli_fail (error);
    }
  else
    {
      GArray *p = prompt_ids ? um_cli_parse_ids (prompt_ids, &error)
                             : g_array_new (FALSE, FALSE, sizeof (gint32));
      GArray *q;
      if (p == NULL)
        return um_cli_fail (error);
      if ((q = um_cli_parse_ids (answer_ids, &error)) == NULL)
        {
          g_array_unref (p);
          return um_cli_fail (error);
        }
      g_ptr_array_add (pairs, p);
      g_ptr_array_add (pairs, q);
    }

  /* Scores judge outputs: the CPU's exact fp32 unless asked otherwise. */
  engine = um_cli_load_engine (model, threads, device ? device : "cpu", UM_PRODUCTS_EXACT, &error);
  if (engine == NULL)
    return um_cli_fail (error);

  um_score_params_init (&params);
  params.mc_samples = samples;
  params.batch = batch;
  params.seed = (guint64) seed;

  json_builder_begin_object (b);
  json_builder_set_member_name (b, "results");
  json_builder_begin_array (b);
  for (guint i = 0; i < pairs->len; i += 2)
    {
      GArray *p = pairs->pdata[i], *q = pairs->pdata[i + 1];
      UmScore s;
      if (!um_score_answer (um_engine_get_forward (engine), (const gint32 *) p->data, p->len,
                            (const gint32 *) q->data, q->len, &params, &s, NULL, &error))
        {
          g_prefix_error (&error, "answer %u: ", i / 2 + 1);
          return um_cli_fail (error);
        }
      sum_ll += s.log_likelihood;
      sum_pt += s.per_token;
      tokens += s.n_tokens;
      json_builder_begin_object (b);
      um_json_add_double (b, "log_likelihood", s.log_likelihood);
      um_json_add_double (b, "per_token", s.per_token);
      um_json_add_double (b, "std_error", s.std_error);
      um_json_add_int (b, "tokens", s.n_tokens);
      json_builder_end_object (b);
      if (!json)
        printf ("%4u  %5d tokens  log-likelihood %10.3f ± %.3f  (%.4f per token)\n", i / 2 + 1, s.n_tokens,
                s.log_likelihood, s.std_error, s.per_token);
    }
  json_builder_end_array (b);
  um_json_add_int (b, "samples", samples);
  um_json_add_int (b, "seed", seed);
  um_json_add_double (b, "mean_log_likelihood", sum_ll / (pairs->len / 2));
  um_json_add_double (b, "mean_per_token", sum_pt / (pairs->len / 2));
  json_builder_end_object (b);
  if (json)
    {
      root = json_builder_get_root (b);
      um_cli_print_json (root, TRUE);
    }
  else
    printf ("mean over %u answers (%ld tokens): log-likelihood %.3f, %.4f per token\n", pairs->len / 2, tokens,
            sum_ll / (pairs->len / 2), sum_pt / (pairs->len / 2));
  return 0;
}

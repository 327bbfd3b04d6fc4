/* unmask-cli quantize — write a model as a GGUF of another type. */
#include "config.h"

#include <stdio.h>
#include <unistd.h>

#include "um-cli.h"
#include "um-error.h"
#include "um-quantize.h"

static void
on_progress (double fraction, const char *tensor, gpointer user_data)
{
  gboolean *tty = user_data;
  if (*tty)
    fprintf (stderr, "\r\033[K%5.1f%%  %s", 100.0 * fraction, tensor);
}

int
um_cli_quantize (int argc, char **argv)
{
  g_autoptr(GOptionContext) ctx = g_option_context_new ("— write a model as a llama.cpp-compatible GGUF");
  g_autofree char *model_path = NULL, *type = NULL, *out = NULL;
  int threads = 0;
  double prune_heads = 0.0, prune_ffn = 0.0;
  GOptionEntry entries[] = {
    { "model", 'm', 0, G_OPTION_ARG_FILENAME, &model_path, "Model folder or .gguf file", "PATH" },
    { "type", 't', 0, G_OPTION_ARG_STRING, &type,
      "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q4_K_M or Q5_K_M", "TYPE" },
    { "out", 'o', 0, G_OPTION_ARG_FILENAME, &out, "GGUF file to write", "FILE.gguf" },
    { "prune-heads", 0, 0, G_OPTION_ARG_DOUBLE, &prune_heads,
      "Remove this share of each layer's attention heads (KV groups), those of smallest weight norm "
      "(0 to 0.3; default 0)", "R" },
    { "prune-ffn", 0, 0, G_OPTION_ARG_DOUBLE, &prune_ffn,
      "Remove this share of each layer's FFN neurons, those of smallest weight norm (0 to 0.2; default 0)", "R" },
    { "threads", 0, 0, G_OPTION_ARG_INT, &threads, "CPU threads (default: all cores)", "N" },
    { NULL }
  };
  g_autoptr(GError) error = NULL;
  g_autoptr(UmModel) model = NULL;
  gboolean tty = isatty (STDERR_FILENO);
  UmQuantizeOptions opts = { NULL, 0.0, 0.0 };
  gint64 t0;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!um_cli_parse_options (ctx, &argc, &argv))
    return 2;
  if (model_path == NULL || type == NULL || out == NULL)
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "--model PATH, --type TYPE and --out FILE are required");
      return um_cli_fail (error);
    }
  if (!um_quantize_type_is_valid (type))
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "unknown --type “%s”", type);
      return um_cli_fail (error);
    }
  /* Checked before the (possibly long) model load. */
  if (!(prune_heads >= 0.0 && prune_heads <= 0.3) || !(prune_ffn >= 0.0 && prune_ffn <= 0.2))
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "--prune-heads must be 0 to 0.3 and --prune-ffn 0 to 0.2");
      return um_cli_fail (error);
    }
  opts.type = type;
  opts.prune_heads = prune_heads;
  opts.prune_ffn = prune_ffn;
  um_cpu_set_threads (threads);
  model = um_model_load (model_path, NULL, &error);
  if (model == NULL)
    return um_cli_fail (error);
  t0 = g_get_monotonic_time ();
  if (!um_quantize_model_full (model, &opts, out, on_progress, &tty, NULL, &error))
    {
      if (tty)
        fprintf (stderr, "\n");
      return um_cli_fail (error);
    }
  if (tty)
    fprintf (stderr, "\r\033[K");
  if (prune_heads > 0.0 || prune_ffn > 0.0)
    fprintf (stderr, "wrote %s (%s, pruned %g of heads, %g of FFN neurons) in %.1f s\n", out, type,
             prune_heads, prune_ffn, (g_get_monotonic_time () - t0) / 1e6);
  else
    fprintf (stderr, "wrote %s (%s) in %.1f s\n", out, type, (g_get_monotonic_time () - t0) / 1e6);
  return 0;
}

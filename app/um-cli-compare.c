/* unmask-cli compare — how far one model's output distributions land from a
 * reference's on the same inputs: mean KL(reference ‖ model), greedy
 * (arg-max) agreement and the largest logit difference.  The yardstick for
 * lossy choices: weight quantization (a Q4_K_M file against its F32 source)
 * and 8-bit activations (a quantized file against itself with --exact). */
#include "config.h"

#include <math.h>
#include <stdio.h>

#include "um-cli.h"
#include "um-error.h"
#include "um-json.h"

/* Softmax of one row into p (double), returning nothing; p sums to 1. */
static void
softmax (const float *logits, int V, double *p)
{
  double mx = -INFINITY, sum = 0;
  for (int v = 0; v < V; v++)
    mx = MAX (mx, logits[v]);
  for (int v = 0; v < V; v++)
    sum += (p[v] = exp ((double) logits[v] - mx));
  for (int v = 0; v < V; v++)
    p[v] /= sum;
}

static int
argmax (const float *x, int V)
{
  int best = 0;
  for (int v = 1; v < V; v++)
    if (x[v] > x[best])
      best = v;
  return best;
}

int
um_cli_compare (int argc, char **argv)
{
  g_autoptr(GOptionContext) ctx = g_option_context_new ("— compare a model's outputs with a reference's");
  g_autofree char *model = NULL, *reference = NULL, *device = NULL, *text_file = NULL;
  int threads = 0, sequences = 8, length = 96;
  double mask_ratio = 0.5;
  gboolean exact = FALSE, int8 = FALSE, ref_int8 = FALSE;
  GOptionEntry entries[] = {
    { "model", 'm', 0, G_OPTION_ARG_FILENAME, &model, "Model to judge", "PATH" },
    { "reference", 'r', 0, G_OPTION_ARG_FILENAME, &reference, "Reference model (same vocabulary)", "PATH" },
    { "exact", 0, 0, G_OPTION_ARG_NONE, &exact, "Judge the model with exact f32 activations", NULL },
    { "int8", 0, 0, G_OPTION_ARG_NONE, &int8, "Judge the model with 8-bit products for every quantized type", NULL },
    { "reference-int8", 0, 0, G_OPTION_ARG_NONE, &ref_int8,
      "Let the reference use 8-bit products for every quantized type (default: exact)", NULL },
    { "text-file", 0, 0, G_OPTION_ARG_FILENAME, &text_file,
      "Take the sequences from this text (consecutive windows) instead of random tokens", "FILE" },
    { "sequences", 0, 0, G_OPTION_ARG_INT, &sequences, "Sequences (default 8)", "N" },
    { "length", 0, 0, G_OPTION_ARG_INT, &length, "Tokens per sequence (default 96)", "N" },
    { "mask-ratio", 0, 0, G_OPTION_ARG_DOUBLE, &mask_ratio, "Share of masked positions (default 0.5)", "R" },
    { "threads", 0, 0, G_OPTION_ARG_INT, &threads, "CPU threads (default: all cores)", "N" },
    { "device", 0, 0, G_OPTION_ARG_STRING, &device, "cpu (default), cuda or auto", "DEVICE" },
    { NULL }
  };
  g_autoptr(GError) error = NULL;
  g_autoptr(UmEngine) a = NULL, b = NULL;
  g_autoptr(JsonBuilder) jb = json_builder_new ();
  g_autoptr(JsonNode) root = NULL;
  g_autofree gint32 *ids = NULL;
  g_autoptr(GArray) text_ids = NULL;
  g_autofree float *la = NULL, *lb = NULL;
  g_autofree double *pa = NULL, *pb = NULL;
  const UmModelConfig *c;
  double kl_sum = 0, kl_max = 0, dmax = 0, kl_masked = 0;
  long rows = 0, agree = 0, masked_rows = 0, agree_masked = 0;
  GRand *rng;
  int V;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!um_cli_parse_options (ctx, &argc, &argv))
    return 2;
  if (sequences < 1 || length < 1 || !(mask_ratio >= 0 && mask_ratio <= 1) || reference == NULL)
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "--reference is required; --sequences and --length ≥ 1, --mask-ratio in [0, 1]");
      return um_cli_fail (error);
    }
  if ((a = um_cli_load_engine (model, threads, device ? device : "cpu", um_cli_products (exact, int8), &error)) == NULL
      || (b = um_cli_load_engine (reference, threads, device ? device : "cpu",
                                  ref_int8 ? UM_PRODUCTS_INT8 : UM_PRODUCTS_EXACT, &error)) == NULL)
    return um_cli_fail (error);
  c = &um_engine_get_model (a)->cfg;
  if (c->vocab_size != um_engine_get_model (b)->cfg.vocab_size || c->mask_id != um_engine_get_model (b)->cfg.mask_id)
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "the two models have different vocabularies");
      return um_cli_fail (error);
    }
  V = (int) c->vocab_size;
  if (text_file != NULL)
    {
      g_autofree char *text = NULL;
      gsize len;

      text_ids = g_array_new (FALSE, FALSE, sizeof (gint32));
      if (!g_file_get_contents (text_file, &text, &len, &error)
          || !um_tokenizer_encode (um_engine_get_model (b)->tokenizer, text, (gssize) len, text_ids, &error))
        return um_cli_fail (error);
      if (text_ids->len < (guint) length)
        {
          g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "%s has %u tokens, fewer than --length %d",
                       text_file, text_ids->len, length);
          return um_cli_fail (error);
        }
    }
  ids = g_new (gint32, length);
  la = g_try_malloc ((size_t) length * V * sizeof (float));
  lb = g_try_malloc ((size_t) length * V * sizeof (float));
  pa = g_new (double, V);
  pb = g_new (double, V);
  if (la == NULL || lb == NULL)
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY, "out of memory for %d × %d logits", length, V);
      return um_cli_fail (error);
    }

  rng = g_rand_new_with_seed (20261124);
  for (int s = 0; s < sequences; s++)
    {
      /* Windows spread evenly over the text, or random ordinary tokens. */
      guint off = text_ids ? (guint) ((guint64) s * (text_ids->len - length) / MAX (sequences - 1, 1)) : 0;
      for (int i = 0; i < length; i++)
        {
          gint32 tok = text_ids ? g_array_index (text_ids, gint32, off + i)
                                : (gint32) g_rand_int_range (rng, 0, MIN (V, (int) c->mask_id));
          ids[i] = g_rand_double (rng) < mask_ratio ? c->mask_id : tok;
        }
      if (!um_forward_logits (um_engine_get_forward (a), ids, 1, length, NULL, 0, la, NULL, &error)
          || !um_forward_logits (um_engine_get_forward (b), ids, 1, length, NULL, 0, lb, NULL, &error))
        {
          g_rand_free (rng);
          return um_cli_fail (error);
        }
      for (int i = 0; i < length; i++)
        {
          const float *ra = la + (size_t) i * V, *rb = lb + (size_t) i * V;
          double kl = 0;
          gboolean same = argmax (ra, V) == argmax (rb, V);

          softmax (ra, V, pa);
          softmax (rb, V, pb);
          for (int v = 0; v < V; v++)
            {
              if (pb[v] > 0)
                kl += pb[v] * (log (pb[v]) - log (MAX (pa[v], 1e-300)));
              dmax = MAX (dmax, fabs ((double) ra[v] - rb[v]));
            }
          kl = MAX (kl, 0.0);
          kl_sum += kl;
          kl_max = MAX (kl_max, kl);
          rows++;
          agree += same;
          if (ids[i] == c->mask_id)
            {
              kl_masked += kl;
              masked_rows++;
              agree_masked += same;
            }
        }
    }
  g_rand_free (rng);

  json_builder_begin_object (jb);
  um_json_add_string (jb, "model", model);
  um_json_add_string (jb, "reference", reference);
  json_builder_set_member_name (jb, "model_products");
  json_builder_add_string_value (jb, um_products_to_string (exact ? UM_PRODUCTS_EXACT
                                                             : int8 ? UM_PRODUCTS_INT8 : UM_PRODUCTS_AUTO));
  um_json_add_int (jb, "positions", rows);
  um_json_add_double (jb, "mean_kl", kl_sum / rows);
  um_json_add_double (jb, "max_kl", kl_max);
  um_json_add_double (jb, "argmax_agreement", (double) agree / rows);
  um_json_add_int (jb, "masked_positions", masked_rows);
  um_json_add_double (jb, "mean_kl_masked", masked_rows ? kl_masked / masked_rows : 0);
  um_json_add_double (jb, "argmax_agreement_masked", masked_rows ? (double) agree_masked / masked_rows : 1);
  um_json_add_double (jb, "max_abs_logit_diff", dmax);
  json_builder_end_object (jb);
  root = json_builder_get_root (jb);
  um_cli_print_json (root, TRUE);
  return 0;
}

/* unmask-cli's generation options, shared by generate, chat, plan, bench
 * and serve: parsing them, resolving them against the model's and the
 * profile's defaults, and loading an engine with them. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "um-cli.h"
#include "um-error.h"
#include "um-json.h"

void
um_cli_gen_options_init (UmCliGenOptions *o, int gen_length, int steps, int block_length)
{
  UmGenParams p;

  um_gen_params_init (&p);
  memset (o, 0, sizeof *o);
  o->gen_length = gen_length;
  o->steps = steps;
  o->block_length = block_length;
  o->eps = p.eps;
  o->alg_temp = p.alg_temp;
  o->top_p = p.top_p;
  o->top_k = p.top_k;
  o->constraint_list = g_array_new (FALSE, FALSE, sizeof (UmGenConstraint));
}

/* The generation options that are UmGenKeys remember that they were
 * given: a value given is the user's and wins over the model's
 * recommendation. */
static gboolean
parse_gen_option (const char *name, const char *value, gpointer data, GError **error)
{
  UmCliGenOptions *o = data;
  UmGenKey key;
  g_autofree char *key_name = NULL;

  /* "--gen-length" → "gen_length"; --no-greedy is greedy's "false". */
  key_name = g_strdelimit (g_strdup (name + 2), "-", '_');
  if (g_str_equal (key_name, "no_greedy"))
    key = UM_GEN_KEY_GREEDY;
  else if (!um_gen_key_from_name (key_name, &key))
    {
      g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_UNKNOWN_OPTION, "unknown option %s", name);
      return FALSE;
    }
  switch (key)
    {
    case UM_GEN_KEY_TEMPERATURE:
    case UM_GEN_KEY_CFG_SCALE:
    case UM_GEN_KEY_EPS:
    case UM_GEN_KEY_ALG_TEMP:
    case UM_GEN_KEY_TOP_P:
      {
        char *end = NULL;
        /* As G_OPTION_ARG_DOUBLE reads it: the locale's form or the C one. */
        double v = g_strtod (value, &end);
        if (end == value || *end != '\0' || !isfinite (v))
          {
            g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, "%s must be a number, not “%s”", name,
                         value);
            return FALSE;
          }
        *(key == UM_GEN_KEY_TEMPERATURE ? &o->temperature
          : key == UM_GEN_KEY_CFG_SCALE ? &o->cfg_scale
          : key == UM_GEN_KEY_EPS       ? &o->eps
          : key == UM_GEN_KEY_ALG_TEMP  ? &o->alg_temp
                                        : &o->top_p) = v;
      }
      break;
    case UM_GEN_KEY_ALG:
      g_free (o->alg);
      o->alg = g_strdup (value);
      break;
    case UM_GEN_KEY_GREEDY:
      o->greedy = !g_str_equal (key_name, "no_greedy");
      break;
    case UM_GEN_KEY_GEN_LENGTH:
    case UM_GEN_KEY_STEPS:
    case UM_GEN_KEY_BLOCK_LENGTH:
    case UM_GEN_KEY_TOP_K:
    case UM_GEN_KEY_REMASKING:
    case UM_GEN_N_KEYS:
    default:
      {
        gint64 v;
        if (!g_ascii_string_to_signed (value, 10, G_MININT, G_MAXINT, &v, NULL))
          {
            g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, "%s must be a whole number, not “%s”", name,
                         value);
            return FALSE;
          }
        *(key == UM_GEN_KEY_GEN_LENGTH ? &o->gen_length
          : key == UM_GEN_KEY_STEPS    ? &o->steps
          : key == UM_GEN_KEY_TOP_K    ? &o->top_k
                                       : &o->block_length) = (int) v;
      }
      break;
    }
  o->given |= UM_GEN_KEY_BIT (key);
  return TRUE;
}

/* What each family's schedule is, for help and errors. */
static const char *
schedule_name (UmArch arch)
{
  return um_schedule_for_arch (arch)->title;
}

/* "LLaDA and LLaDA-MoE": the families whose schedule has @key. */
static char *
families_with (UmGenKey key)
{
  g_autoptr(GString) s = g_string_new (NULL);
  int n = 0, seen = 0;

  for (guint a = 0; a < um_arch_count (); a++)
    n += um_gen_key_applies (key, (UmArch) a);
  for (guint a = 0; a < um_arch_count (); a++)
    if (um_gen_key_applies (key, (UmArch) a))
      {
        seen++;
        g_string_append_printf (s, "%s%s", seen == 1 ? "" : seen == n ? " and " : ", ", um_arch_info ((UmArch) a)->name);
      }
  return g_string_free (g_steal_pointer (&s), FALSE);
}

/* The built-in defaults of each family, for --help. */
static char *
defaults_description (void)
{
  g_autoptr(GString) s = g_string_new ("Unset generation options come from the model's recommendation "
                                       "(generation_config.json or GGUF metadata), then the optimizer profile, "
                                       "then each family's defaults:\n");

  for (guint a = 0; a < um_arch_count (); a++)
    {
      UmGenParams p;
      gboolean first = TRUE;
      um_gen_params_init_for_arch (&p, (UmArch) a);
      g_string_append_printf (s, "  %s (%s):", um_arch_info ((UmArch) a)->name, schedule_name ((UmArch) a));
      for (guint k = 0; k < UM_GEN_N_KEYS; k++)
        {
          g_autofree char *key = NULL, *v = NULL;
          if (!um_gen_key_applies ((UmGenKey) k, (UmArch) a) || k == UM_GEN_KEY_GEN_LENGTH)
            continue;
          key = g_strdelimit (g_strdup (um_gen_key_name ((UmGenKey) k)), "_", '-');
          v = um_schedule_for_arch ((UmArch) a)->steps_follow_length && k == UM_GEN_KEY_STEPS
                ? g_strdup ("gen-length") : um_gen_params_format (&p, (UmGenKey) k);
          g_string_append_printf (s, "%s --%s %s", first ? "" : ",", key, v);
          first = FALSE;
        }
      g_string_append_c (s, '\n');
    }
  g_string_append (s, "See docs/families-and-schedules.md, “Schedules”, for how each differs from llama.cpp's diffusion sampler.");
  return g_string_free (g_steal_pointer (&s), FALSE);
}

void
um_cli_gen_options_add (GOptionContext *ctx, UmCliGenOptions *o)
{
  GOptionEntry entries[] = {
    { "gen-length", 0, 0, G_OPTION_ARG_CALLBACK, (gpointer) parse_gen_option, "Tokens to generate", "N" },
    { "steps", 0, 0, G_OPTION_ARG_CALLBACK, (gpointer) parse_gen_option,
      "Diffusion steps in all (RND1: forward passes)", "N" },
    { "temperature", 0, 0, G_OPTION_ARG_CALLBACK, (gpointer) parse_gen_option,
      "LLaDA: Gumbel temperature, Dream: sampling temperature (0: greedy), RND1: scales logits and entropies", "T" },
    { "seed", 0, 0, G_OPTION_ARG_INT64, &o->seed, "Random seed for sampling and the random rules", "N" },
    { "threshold", 0, 0, G_OPTION_ARG_DOUBLE, &o->threshold,
      "Parallel decoding (e.g. 0.9): commit every mask whose confidence is ≥ T (LLaDA, LLaDA-MoE: in the block, "
      "at least one; Dream: p of its token, besides the schedule's count; LLaDA 2: every p > T if they are at "
      "least the step's count, default 0.95, 1 for the counts alone)", "T" },
    { "eos-early-stop", 0, 0, G_OPTION_ARG_NONE, &o->eos_early_stop,
      "LLaDA 2: stop as soon as a committed EOS has no mask before it", NULL },
    { "constraint", 0, 0, G_OPTION_ARG_STRING_ARRAY, &o->constraints,
      "Place WORD at answer position POS before decoding (repeatable)", "POS:WORD" },
    { "threads", 0, 0, G_OPTION_ARG_INT, &o->threads, "CPU threads (default: all cores)", "N" },
    { "device", 0, 0, G_OPTION_ARG_STRING, &o->device, "cpu, cuda or auto (default: a usable GPU, else the CPU)",
      "DEVICE" },
    { "exact", 0, 0, G_OPTION_ARG_NONE, &o->exact,
      "Keep activations f32 with quantized weights (no 8-bit integer products; slower)", NULL },
    { "int8", 0, 0, G_OPTION_ARG_NONE, &o->int8,
      "8-bit integer products with every quantized type (the default where the CPU has AVX2)", NULL },
    { NULL }
  };
  GOptionEntry block_entries[] = {
    { "block-length", 0, 0, G_OPTION_ARG_CALLBACK, (gpointer) parse_gen_option, "Tokens per semi-autoregressive block", "N" },
    { "cfg-scale", 0, 0, G_OPTION_ARG_CALLBACK, (gpointer) parse_gen_option, "Classifier-free guidance scale (0: off)", "S" },
    { "remasking", 0, 0, G_OPTION_ARG_STRING, &o->remasking, "low_confidence (default) or random", "WHICH" },
    { "logits-eos-inf", 0, 0, G_OPTION_ARG_NONE, &o->logits_eos_inf, "Never choose EOS", NULL },
    { "confidence-eos-eot-inf", 0, 0, G_OPTION_ARG_NONE, &o->confidence_eos_eot_inf,
      "Commit EOS/EOT only after everything else", NULL },
    { "cache", 0, 0, G_OPTION_ARG_STRING, &o->kv_cache,
      "Block KV cache: none (default, exact), prefix or dual (approximate, faster); LLaDA 2: finished blocks, "
      "exact and on by default (none recomputes them)", "MODE" },
    { "factor", 0, 0, G_OPTION_ARG_DOUBLE, &o->factor,
      "Parallel decoding: commit the top n with (n + 1)(1 − c(n)) < F (e.g. 1.0)", "F" },
    { NULL }
  };
  GOptionEntry dream_entries[] = {
    { "alg", 0, 0, G_OPTION_ARG_CALLBACK, (gpointer) parse_gen_option,
      "Confidence rule: maskgit_plus (max p), topk_margin (p1 − p2), entropy (−H, default) or origin (random)",
      "RULE" },
    { "eps", 0, 0, G_OPTION_ARG_CALLBACK, (gpointer) parse_gen_option,
      "Last time of linspace(1, eps, steps + 1) (default 0.001)", "E" },
    { "alg-temp", 0, 0, G_OPTION_ARG_CALLBACK, (gpointer) parse_gen_option,
      "> 0: draw the positions from softmax(confidence / T) instead of the most confident (default 0)", "T" },
    { NULL }
  };
  GOptionEntry filter_entries[] = {
    { "top-p", 0, 0, G_OPTION_ARG_CALLBACK, (gpointer) parse_gen_option,
      "Nucleus filter before the softmax (1: off, the default; Dream's README uses 0.95)", "P" },
    { "top-k", 0, 0, G_OPTION_ARG_CALLBACK, (gpointer) parse_gen_option,
      "Keep the K largest logits (0: off, the default)", "K" },
    { NULL }
  };
  GOptionEntry rnd1_entries[] = {
    { "greedy", 0, G_OPTION_FLAG_NO_ARG, G_OPTION_ARG_CALLBACK, (gpointer) parse_gen_option,
      "Arg-max tokens; the temperature then only orders by entropy (default: drawn)", NULL },
    { "no-greedy", 0, G_OPTION_FLAG_NO_ARG, G_OPTION_ARG_CALLBACK, (gpointer) parse_gen_option,
      "Draw the tokens (overrides a model's greedy recommendation)", NULL },
    { NULL }
  };
  GOptionEntry mem_entries[] = {
    { "mode", 0, 0, G_OPTION_ARG_STRING, &o->mode,
      "standard (default), standard-8bit, extreme-mild, extreme-moderate or extreme-aggressive", "MODE" },
    { "budget", 0, 0, G_OPTION_ARG_STRING, &o->budget,
      "Device memory to plan for and stay under, e.g. 3GiB (on the CPU backend too)", "SIZE" },
    { "weight-format", 0, 0, G_OPTION_ARG_STRING, &o->weight_format,
      "Override the mode's weight format: stored, Q8_0, Q4_K_M, …", "TYPE" },
    { "resident-layers", 0, 0, G_OPTION_ARG_INT, &o->resident_layers,
      "Layer slots on the device when streaming (default: as many as the budget holds)", "K" },
    { "zstd", 0, 0, G_OPTION_ARG_NONE, &o->zstd,
      "Compress the streamed layers' or the experts' host copy (lossless)", NULL },
    { "experts", 0, 0, G_OPTION_ARG_STRING, &o->experts,
      "MoE models: routed experts resident on the device, in host memory and computed there (host), fetched "
      "into device slots as routed (fetch), or auto (default: off the device when the model does not fit)",
      "PLACEMENT" },
    { "expert-slots", 0, 0, G_OPTION_ARG_INT, &o->expert_slots, "Device slots experts are fetched into (default 2)",
      "K" },
    { "prune-heads", 0, 0, G_OPTION_ARG_DOUBLE, &o->prune_heads,
      "Drop this fraction of attention heads per layer, lowest L2 norm first (≤ 0.3)", "R" },
    { "prune-ffn", 0, 0, G_OPTION_ARG_DOUBLE, &o->prune_ffn,
      "Drop this fraction of FFN neurons per layer, lowest L2 norm first (≤ 0.2)", "R" },
    { "row-chunk", 0, 0, G_OPTION_ARG_INT, &o->row_chunk,
      "MLP and LM-head rows at a time (default: the mode's; -1 none)", "N" },
    { "cache-dir", 0, 0, G_OPTION_ARG_FILENAME, &o->cache_dir,
      "Where converted weights are cached (default $XDG_CACHE_HOME/unmask/converted)", "DIR" },
    { NULL }
  };
  GOptionGroup *mem = g_option_group_new ("memory", "Memory options:", "Show memory-mode options", NULL, NULL);
  g_option_group_add_entries (mem, mem_entries);
  g_option_context_add_group (ctx, mem);
  GOptionGroup *group = g_option_group_new ("generation", "Generation options (every family):",
                                            "Show generation options", o, NULL);
  GOptionGroup *block = g_option_group_new ("block", "LLaDA and LLaDA-MoE options (block schedule):",
                                            "Show LLaDA and LLaDA-MoE options", o, NULL);
  GOptionGroup *dream = g_option_group_new ("dream", "Dream options (timestep schedule):", "Show Dream options",
                                            o, NULL);
  GOptionGroup *filters = g_option_group_new ("filters", "Dream and RND1 options (logit filters):",
                                              "Show Dream and RND1 filter options", o, NULL);
  GOptionGroup *rnd1 = g_option_group_new ("rnd1", "RND1 options (entropy schedule):", "Show RND1 options", o, NULL);
  g_autofree char *description = defaults_description ();

  g_option_group_add_entries (group, entries);
  g_option_context_add_group (ctx, group);
  g_option_group_add_entries (block, block_entries);
  g_option_context_add_group (ctx, block);
  g_option_group_add_entries (dream, dream_entries);
  g_option_context_add_group (ctx, dream);
  g_option_group_add_entries (filters, filter_entries);
  g_option_context_add_group (ctx, filters);
  g_option_group_add_entries (rnd1, rnd1_entries);
  g_option_context_add_group (ctx, rnd1);
  /* Only generate and chat resolve unset options that way. */
  if (o->resolve)
    g_option_context_set_description (ctx, description);
}

gboolean
um_cli_gen_options_to_params (const UmCliGenOptions *o, UmGenParams *p, GError **error)
{
  um_gen_params_init (p);
  p->gen_length = o->gen_length;
  p->steps = o->steps;
  p->block_length = o->block_length;
  p->temperature = o->temperature;
  p->cfg_scale = o->cfg_scale;
  p->seed = (guint64) o->seed;
  p->logits_eos_inf = o->logits_eos_inf;
  p->confidence_eos_eot_inf = o->confidence_eos_eot_inf;
  if (o->remasking != NULL && !um_remasking_from_string (o->remasking, &p->remasking))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "--remasking must be low_confidence or random, not “%s”", o->remasking);
      return FALSE;
    }
  if (o->kv_cache != NULL && !um_cache_mode_from_string (o->kv_cache, &p->cache))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "--cache must be none, prefix or dual, not “%s”",
                   o->kv_cache);
      return FALSE;
    }
  p->threshold = o->threshold;
  p->factor = o->factor;
  p->eos_early_stop = o->eos_early_stop;
  if (o->alg != NULL && !um_alg_from_string (o->alg, &p->alg))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "--alg must be maskgit_plus, topk_margin, entropy or origin, not “%s”", o->alg);
      return FALSE;
    }
  p->eps = o->eps;
  p->alg_temp = o->alg_temp;
  p->top_p = o->top_p;
  p->top_k = o->top_k;
  p->greedy = o->greedy;
  g_array_set_size (o->constraint_list, 0);
  for (guint i = 0; o->constraints != NULL && o->constraints[i] != NULL; i++)
    {
      const char *colon = strchr (o->constraints[i], ':');
      g_autofree char *pos = colon ? g_strndup (o->constraints[i], colon - o->constraints[i]) : NULL;
      gint64 offset;
      UmGenConstraint ci = { 0 };

      if (pos == NULL || !g_ascii_string_to_signed (pos, 10, 0, G_MAXINT, &offset, NULL) || colon[1] == '\0')
        {
          g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                       "--constraint must be POS:WORD with POS a position in the answer, not “%s”",
                       o->constraints[i]);
          return FALSE;
        }
      /* The word points into o->constraints, which lives as long as o. */
      ci.offset = (int) offset;
      ci.word = colon + 1;
      g_array_append_val (o->constraint_list, ci);
    }
  p->constraints = (const UmGenConstraint *) o->constraint_list->data;
  p->n_constraints = (int) o->constraint_list->len;
  if (o->device != NULL)
    {
      UmDeviceKind kind;
      if (!um_device_kind_from_string (o->device, &kind))
        {
          g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "--device must be cpu, cuda or auto, not “%s”",
                       o->device);
          return FALSE;
        }
    }
  if (o->threads < 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "--threads must be ≥ 0");
      return FALSE;
    }
  /* Parameters not given may still come from the model: the schedule is
   * checked once resolved (um_cli_engine_options). Prompt length is
   * checked against the model later. */
  if (o->resolve)
    return TRUE;
  return um_gen_params_validate (p, 0, G_MAXUINT, error);
}

void
um_cli_gen_options_clear (UmCliGenOptions *o)
{
  g_clear_pointer (&o->remasking, g_free);
  g_clear_pointer (&o->alg, g_free);
  g_clear_pointer (&o->device, g_free);
  g_clear_pointer (&o->mode, g_free);
  g_clear_pointer (&o->budget, g_free);
  g_clear_pointer (&o->experts, g_free);
  g_clear_pointer (&o->weight_format, g_free);
  g_clear_pointer (&o->cache_dir, g_free);
  g_clear_pointer (&o->kv_cache, g_free);
  g_clear_pointer (&o->constraints, g_strfreev);
  g_clear_pointer (&o->constraint_list, g_array_unref);
  g_clear_pointer (&o->recommendation, um_gen_recommendation_free);
}

/* The precedence rule itself is um_gen_resolve (); this gathers its layers. */
static gboolean
resolve_params (UmCliGenOptions *o, UmGenParams *p, const char *model, const UmProfile *profile,
                const char *model_id, GError **error)
{
  UmGenLayer user, profile_layer;
  UmArch arch;

  um_gen_layer_init (&user);
  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    if ((o->given & UM_GEN_KEY_BIT (k)) || (k == UM_GEN_KEY_REMASKING && o->remasking != NULL))
      um_gen_layer_take (&user, (UmGenKey) k, p);
  g_clear_pointer (&o->recommendation, um_gen_recommendation_free);
  o->recommendation = um_gen_recommendation_load (model);
  for (guint i = 0; i < o->recommendation->warnings->len; i++)
    fprintf (stderr, "unmask-cli: %s\n", (const char *) g_ptr_array_index (o->recommendation->warnings, i));
  /* An option the model's family does not have is a mistake, not a no-op. */
  arch = o->recommendation->arch;
  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    if (um_gen_layer_has (&user, (UmGenKey) k) && !um_gen_key_applies ((UmGenKey) k, arch))
      {
        g_autofree char *flag = g_strdelimit (g_strdup (um_gen_key_name ((UmGenKey) k)), "_", '-');
        g_autofree char *with = families_with ((UmGenKey) k);
        g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                     "--%s is not an option of %s models (%s); only %s %s it (see unmask-cli generate --help-all)",
                     flag, um_arch_info (arch)->name, schedule_name (arch), with, strchr (with, ' ') ? "have" : "has");
        return FALSE;
      }
  if (profile != NULL)
    um_profile_gen_layer (profile, model_id, &profile_layer);
  else
    um_gen_layer_init (&profile_layer);
  um_gen_resolve_for (arch, p, &user, &o->recommendation->layer, &profile_layer, &o->resolved);
  /* An explicit --cache stands (LLaDA 2's resolved default is its cache). */
  if (o->kv_cache != NULL)
    um_cache_mode_from_string (o->kv_cache, &o->resolved.params.cache);
  *p = o->resolved.params;
  return um_gen_resolved_validate (&o->resolved, o->recommendation->origin, 0, G_MAXUINT, error);
}

static const char *
source_name (const UmCliGenOptions *o, UmGenKey k)
{
  switch (o->resolved.source[k])
    {
    case UM_GEN_SOURCE_USER: return "user";
    case UM_GEN_SOURCE_MODEL: return o->recommendation && o->recommendation->origin ? o->recommendation->origin : "model";
    case UM_GEN_SOURCE_PROFILE: return "profile";
    case UM_GEN_SOURCE_BUILTIN:
    default: return "built-in";
    }
}

void
um_cli_print_defaults (const UmCliGenOptions *o)
{
  static const char *const said[] = {
    [UM_GEN_SOURCE_BUILTIN] = "built-in default",
    [UM_GEN_SOURCE_PROFILE] = "the optimizer profile's mode default",
    [UM_GEN_SOURCE_MODEL] = "recommended by the model",
    [UM_GEN_SOURCE_USER] = "given on the command line",
  };

  fprintf (stderr, "unmask-cli: generation settings (%s, %s):\n", um_arch_info (o->resolved.arch)->name,
           schedule_name (o->resolved.arch));
  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    {
      g_autofree char *v = NULL;
      UmGenSource s = o->resolved.source[k];
      if (!um_gen_key_applies ((UmGenKey) k, o->resolved.arch))
        continue;
      v = um_gen_params_format (&o->resolved.params, (UmGenKey) k);
      fprintf (stderr, "  %-13s %-15s %s", um_gen_key_name ((UmGenKey) k), v, said[s]);
      if (s == UM_GEN_SOURCE_MODEL && o->recommendation->origin != NULL)
        fprintf (stderr, " (%s)", o->recommendation->origin);
      /* Overridden: say what the model would have used. */
      if (s == UM_GEN_SOURCE_USER && o->recommendation != NULL
          && um_gen_layer_has (&o->recommendation->layer, (UmGenKey) k)
          && !um_gen_params_equal_at (&o->resolved.params, &o->recommendation->layer.params, (UmGenKey) k))
        {
          g_autofree char *m = um_gen_params_format (&o->recommendation->layer.params, (UmGenKey) k);
          fprintf (stderr, " (the model recommends %s)", m);
        }
      fputc ('\n', stderr);
    }
  for (guint i = 0; o->recommendation != NULL && i < o->recommendation->not_applied->len; i++)
    {
      const UmGenNote *n = g_ptr_array_index (o->recommendation->not_applied, i);
      fprintf (stderr, "  not applied: %s %s (%s)\n", n->key, n->value, n->reason);
    }
}

void
um_cli_defaults_json (JsonBuilder *b, const UmCliGenOptions *o)
{
  json_builder_set_member_name (b, "defaults");
  json_builder_begin_object (b);
  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    {
      const UmGenParams *p = &o->resolved.params;
      if (!um_gen_key_applies ((UmGenKey) k, o->resolved.arch))
        continue;
      json_builder_set_member_name (b, um_gen_key_name ((UmGenKey) k));
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "value");
      switch ((UmGenKey) k)
        {
        case UM_GEN_KEY_GEN_LENGTH: json_builder_add_int_value (b, p->gen_length); break;
        case UM_GEN_KEY_STEPS: json_builder_add_int_value (b, p->steps); break;
        case UM_GEN_KEY_BLOCK_LENGTH: json_builder_add_int_value (b, p->block_length); break;
        case UM_GEN_KEY_TEMPERATURE: json_builder_add_double_value (b, p->temperature); break;
        case UM_GEN_KEY_CFG_SCALE: json_builder_add_double_value (b, p->cfg_scale); break;
        case UM_GEN_KEY_ALG: json_builder_add_string_value (b, um_alg_to_string (p->alg)); break;
        case UM_GEN_KEY_EPS: json_builder_add_double_value (b, p->eps); break;
        case UM_GEN_KEY_ALG_TEMP: json_builder_add_double_value (b, p->alg_temp); break;
        case UM_GEN_KEY_TOP_P: json_builder_add_double_value (b, p->top_p > 0.0 && p->top_p < 1.0 ? p->top_p : 1.0); break;
        case UM_GEN_KEY_TOP_K: json_builder_add_int_value (b, p->top_k); break;
        case UM_GEN_KEY_GREEDY: json_builder_add_boolean_value (b, p->greedy); break;
        case UM_GEN_KEY_REMASKING:
        case UM_GEN_N_KEYS:
        default: json_builder_add_string_value (b, um_remasking_to_string (p->remasking)); break;
        }
      um_json_add_string (b, "source", source_name (o, (UmGenKey) k));
      json_builder_end_object (b);
    }
  json_builder_end_object (b);
  json_builder_set_member_name (b, "not_applied");
  json_builder_begin_array (b);
  for (guint i = 0; o->recommendation != NULL && i < o->recommendation->not_applied->len; i++)
    {
      const UmGenNote *n = g_ptr_array_index (o->recommendation->not_applied, i);
      json_builder_begin_object (b);
      um_json_add_string (b, "key", n->key);
      um_json_add_string (b, "value", n->value);
      um_json_add_string (b, "reason", n->reason);
      json_builder_end_object (b);
    }
  json_builder_end_array (b);
  json_builder_set_member_name (b, "defaults_warnings");
  json_builder_begin_array (b);
  for (guint i = 0; o->recommendation != NULL && i < o->recommendation->warnings->len; i++)
    json_builder_add_string_value (b, g_ptr_array_index (o->recommendation->warnings, i));
  json_builder_end_array (b);
}

gboolean
um_cli_engine_options (UmCliGenOptions *o, UmGenParams *p, int prompt_length,
                       const char *model, UmEngineOptions *opts, GError **error)
{
  g_autofree char *model_id = model ? um_model_identity (model) : NULL;
  g_autoptr(UmProfile) profile = NULL;
  g_autoptr(GError) profile_error = NULL;
  g_autofree char *notice = NULL;
  gboolean mode_from_profile = FALSE;

  um_engine_options_init (opts);
  /* The optimizer's profile first (UNMASK_CONFIG_DIR or
   * $XDG_CONFIG_HOME/unmask), then what the command line says. */
  profile = um_profile_load (NULL, &notice, &profile_error);
  if (notice != NULL)
    fprintf (stderr, "unmask-cli: %s\n", notice);
  if (profile != NULL)
    {
      um_profile_to_engine_options (profile, model_id, opts);
      mode_from_profile = profile->written_by != UM_PROFILE_BY_DEFAULT;
    }
  else
    fprintf (stderr, "unmask-cli: the optimizer profile is ignored: %s\n", profile_error->message);

  if (o->threads > 0)
    opts->n_threads = o->threads;
  if (um_cli_products (o->exact, o->int8) >= 0)
    opts->products = (UmProducts) um_cli_products (o->exact, o->int8);
  if (o->device != NULL && !um_device_kind_from_string (o->device, &opts->device))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "--device must be cpu, cuda or auto, not “%s”",
                   o->device);
      return FALSE;
    }
  if (o->mode != NULL)
    {
      UmMemMode mode;
      if (!um_mem_mode_from_string (o->mode, &mode))
        {
          g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                       "--mode must be standard, standard-8bit, extreme-mild, extreme-moderate or "
                       "extreme-aggressive, not “%s”", o->mode);
          return FALSE;
        }
      /* Another mode than the profile's: its knobs do not carry over. */
      if (mode != opts->mem.mode)
        um_mem_options_init (&opts->mem, mode);
      mode_from_profile = FALSE;
    }
  if (o->budget != NULL && !um_parse_size (o->budget, &opts->memory_budget))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "--budget must be a size like 3GiB or 512MiB, not “%s”",
                   o->budget);
      return FALSE;
    }
  if (o->weight_format != NULL)
    g_strlcpy (opts->mem.weight_format, o->weight_format, sizeof opts->mem.weight_format);
  if (o->resident_layers != 0)
    opts->mem.resident_layers = o->resident_layers;
  if (o->zstd)
    opts->mem.host_zstd = TRUE;
  if (o->experts != NULL && !um_expert_placement_from_string (o->experts, &opts->mem.experts))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "--experts must be auto, resident, host or fetch, not “%s”", o->experts);
      return FALSE;
    }
  if (o->expert_slots != 0)
    opts->mem.expert_slots = o->expert_slots;
  if (o->prune_heads != 0)
    opts->mem.prune_heads = o->prune_heads;
  if (o->prune_ffn != 0)
    opts->mem.prune_ffn = o->prune_ffn;
  if (o->row_chunk != 0)
    opts->mem.row_chunk = o->row_chunk;
  opts->cache_dir = o->cache_dir;
  /* The mode is known now: its defaults take their place in the rule. */
  if (p != NULL && o->resolve
      && !resolve_params (o, p, model, mode_from_profile ? profile : NULL, model_id, error))
    return FALSE;
  if (p != NULL)
    {
      opts->shape.prompt_length = prompt_length;
      opts->shape.gen_length = p->gen_length;
      opts->shape.block_length = p->block_length;
      opts->shape.cfg = p->cfg_scale > 0;
      opts->shape.kv_cache = p->cache != UM_CACHE_NONE;
      /* Without answer blocks (Dream, RND1, LLaDA 2) a pass asks for every mask's row. */
      if (o->resolve && !um_schedule_for_arch (o->resolved.arch)->answer_blocks)
        opts->shape.block_length = p->gen_length;
      /* Said, not enforced: the run is what the command line asks. */
      if (mode_from_profile
          && ((profile->limit_gen_length > 0 && p->gen_length > profile->limit_gen_length)
              || (profile->limit_block_length > 0 && p->block_length > profile->limit_block_length)
              || (profile->limit_steps > 0 && p->steps > profile->limit_steps)))
        fprintf (stderr, "unmask-cli: the profile's mode %s recommends --gen-length ≤ %d, --block-length ≤ %d and "
                 "--steps ≤ %d\n", um_mem_mode_to_string (opts->mem.mode), profile->limit_gen_length,
                 profile->limit_block_length, profile->limit_steps);
    }
  return um_mem_options_validate (&opts->mem, error);
}

UmEngine *
um_cli_load_engine_with (const char *model, const UmEngineOptions *opts, GError **error)
{
  UmEngine *engine;

  if (model == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "--model PATH is required");
      return NULL;
    }
  engine = um_engine_load (model, opts, NULL, NULL, NULL, error);
  /* Scripts read stdout; the notice goes to stderr. */
  if (engine != NULL && um_engine_get_notice (engine) != NULL)
    fprintf (stderr, "unmask-cli: %s\n", um_engine_get_notice (engine));
  return engine;
}

int
um_cli_products (gboolean exact, gboolean int8)
{
  return exact ? UM_PRODUCTS_EXACT : int8 ? UM_PRODUCTS_INT8 : -1;
}

UmEngine *
um_cli_load_engine (const char *model, int threads, const char *device, int products, GError **error)
{
  UmEngineOptions opts;

  um_engine_options_init (&opts);
  opts.n_threads = threads;
  if (products >= 0)
    opts.products = (UmProducts) products;
  if (device != NULL && !um_device_kind_from_string (device, &opts.device))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "--device must be cpu, cuda or auto, not “%s”", device);
      return NULL;
    }
  return um_cli_load_engine_with (model, &opts, error);
}

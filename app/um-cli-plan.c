/* unmask-cli plan and cache: the memory modes' predictions for a model on
 * this machine, before anything is loaded; the converted-weight cache. */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "um-backend-cuda.h"
#include "um-cli.h"
#include "um-convert.h"
#include "um-error.h"
#include "um-json.h"
#include "um-nvml.h"

static void
add_components (JsonBuilder *b, const char *name, const guint64 *bytes)
{
  json_builder_set_member_name (b, name);
  json_builder_begin_object (b);
  for (int i = 0; i < UM_PLAN_N_COMPONENTS; i++)
    um_json_add_int (b, um_plan_component_name (i), bytes[i]);
  json_builder_end_object (b);
}

JsonNode *
um_cli_plan_to_json (const UmPlan *p)
{
  g_autoptr(JsonBuilder) b = json_builder_new ();

  json_builder_begin_object (b);
  um_json_add_string (b, "mode", um_mem_mode_to_string (p->mode));
  um_json_add_string (b, "weight_format", p->weight_format);
  um_json_add_bool (b, "converts", p->converts);
  if (p->converts)
    um_json_add_int (b, "converted_file_bytes", p->converted_file_bytes);
  um_json_add_int (b, "weight_bytes", p->weight_bytes);
  um_json_add_int (b, "resident_layers", p->stream_slots ? p->stream_slots : p->n_layers);
  um_json_add_int (b, "n_layers", p->n_layers);
  um_json_add_bool (b, "streams_layers", p->stream_slots > 0);
  um_json_add_bool (b, "host_zstd", p->options.host_zstd);
  if (p->options.host_zstd)
    {
      /* Stored / raw bytes of the layers: an estimate by type in a plan
       * made before loading, measured on the weights at load. */
      um_json_add_double (b, "zstd_ratio", p->zstd_ratio);
      um_json_add_bool (b, "zstd_ratio_measured", p->zstd_measured);
      um_json_add_int (b, "zstd_sampled_bytes", p->zstd_sampled_bytes);
    }
  um_json_add_string (b, "experts", um_expert_placement_to_string (p->experts));
  if (p->expert_bytes > 0)
    {
      um_json_add_int (b, "expert_bytes", p->expert_bytes);
      if (p->expert_slots)
        um_json_add_int (b, "expert_slots", p->expert_slots);
      if (p->expert_store)
        um_json_add_int (b, "expert_store_bytes", p->expert_store);
      /* The time model's seconds per pass of the planned shape in the
       * experts' products, in each placement. */
      json_builder_set_member_name (b, "expert_seconds_per_pass");
      json_builder_begin_object (b);
      for (int i = UM_EXPERTS_RESIDENT; i < UM_EXPERTS_N_PLACEMENTS; i++)
        um_json_add_double (b, um_expert_placement_to_string (i), p->expert_seconds[i]);
      json_builder_end_object (b);
    }
  um_json_add_bool (b, "embedding_on_host", p->embed_on_host);
  um_json_add_double (b, "prune_heads", p->options.prune_heads);
  um_json_add_double (b, "prune_ffn", p->options.prune_ffn);
  um_json_add_int (b, "row_chunk", MAX (p->options.row_chunk, 0));
  add_components (b, "device_bytes", p->device);
  add_components (b, "host_bytes", p->host);
  um_json_add_int (b, "device_peak_bytes", p->device_peak);
  um_json_add_int (b, "host_peak_bytes", p->host_peak);
  um_json_add_int (b, "host_load_peak_bytes", p->host_load_peak);
  if (p->device_capacity)
    um_json_add_int (b, "device_capacity_bytes", p->device_capacity);
  um_json_add_bool (b, "fits", p->fits);
  if (p->limit_gen)
    {
      json_builder_set_member_name (b, "recommended_limits");
      json_builder_begin_object (b);
      um_json_add_int (b, "gen_length", p->limit_gen);
      um_json_add_int (b, "block_length", p->limit_block);
      um_json_add_int (b, "steps", p->limit_steps);
      json_builder_end_object (b);
    }
  json_builder_end_object (b);
  return json_builder_get_root (b);
}

void
um_cli_stream_counters (UmEngine *engine, UmStreamCounters out[2])
{
  um_stream_counters_read (um_engine_get_layer_store (engine), &out[0]);
  um_stream_counters_read (um_forward_get_expert_store (um_engine_get_forward (engine)), &out[1]);
}

static void
stream_report_json (JsonBuilder *b, const char *name, const UmStreamReport *r)
{
  json_builder_set_member_name (b, name);
  json_builder_begin_object (b);
  um_json_add_double (b, "fetches_per_forward", r->fetches);
  um_json_add_double (b, "bytes_per_forward", r->bytes);
  um_json_add_double (b, "copy_seconds_per_forward", r->copy_seconds);
  um_json_add_double (b, "decode_seconds_per_forward", r->decode_seconds);
  um_json_add_double (b, "wait_seconds_per_forward", r->wait_seconds);
  um_json_add_double (b, "compute_seconds_per_forward", r->compute_seconds);
  um_json_add_double (b, "seconds_per_forward", r->forward_seconds);
  um_json_add_double (b, "bandwidth_bytes_per_s", r->bandwidth);
  um_json_add_double (b, "transfer_seconds_per_forward", r->transfer_seconds);
  um_json_add_double (b, "bound_seconds_per_forward", r->bound_seconds);
  um_json_add_double (b, "ratio_to_bound", r->ratio);
  json_builder_end_object (b);
}

void
um_cli_streaming_json (JsonBuilder *b, UmEngine *engine, const UmForwardStats *st, const UmStreamCounters before[2])
{
  UmStreamCounters now[2];
  UmEngineMemory m;
  UmStreamReport r;

  um_engine_get_memory (engine, &m);
  um_cli_stream_counters (engine, now);
  if (um_engine_get_layer_store (engine) == NULL && um_forward_get_expert_store (um_engine_get_forward (engine)) == NULL)
    return;
  /* The host→device copies per forward and the bound they set: what
   * streaming costs, beside what the pass would take with the bytes
   * resident (its compute time) and what the bus allows. */
  json_builder_set_member_name (b, "streaming");
  json_builder_begin_object (b);
  um_json_add_double (b, "upload_bytes_per_s", m.upload_bytes_per_s);
  if (um_engine_get_layer_store (engine) != NULL)
    {
      um_stream_report (&before[0], &now[0], st->n_passes, st->seconds, st->seconds_stream_wait,
                        m.upload_bytes_per_s, &r);
      um_json_add_int (b, "layer_slots", um_engine_get_plan (engine)->stream_slots);
      stream_report_json (b, "layers", &r);
    }
  if (um_forward_get_expert_store (um_engine_get_forward (engine)) != NULL)
    {
      um_stream_report (&before[1], &now[1], st->n_passes, st->seconds, st->seconds_expert_wait,
                        m.upload_bytes_per_s, &r);
      stream_report_json (b, "experts", &r);
    }
  json_builder_end_object (b);
}

/* What the device itself says this process holds, beside the accounting:
 * cudaMemGetInfo's fall in free memory since the context was made, and
 * NVML's per-process figure where the driver's library is there. */
static void
device_usage_json (JsonBuilder *b, UmEngine *engine)
{
  UmCudaDeviceUsage u;
  UmNvmlUsage n;
  g_autofree char *why = NULL;

  if (!um_backend_cuda_device_usage (um_engine_get_backend (engine), &u))
    return;
  um_json_add_int (b, "device_used_delta_peak_bytes", u.delta_peak);
  um_json_add_int (b, "device_context_estimate_bytes", u.context_estimate);
  um_json_add_int (b, "device_used_at_start_bytes", u.used_at_start);
  um_json_add_int (b, "device_free_bytes", u.free);
  if (um_nvml_usage_for ((guint) getpid (), u.pci_bus_id, &n, &why))
    um_json_add_int (b, "nvml_process_bytes", n.used_bytes);
  else
    {
      json_builder_set_member_name (b, "nvml_process_bytes");
      json_builder_add_null_value (b);
      um_json_add_string (b, "nvml_why", why);
    }
}

void
um_cli_memory_json (JsonBuilder *b, UmEngine *engine)
{
  UmEngineMemory m;
  const UmPlan *p = um_engine_get_plan (engine);

  um_engine_get_memory (engine, &m);
  json_builder_set_member_name (b, "plan");
  json_builder_add_value (b, um_cli_plan_to_json (p));
  json_builder_set_member_name (b, "measured");
  json_builder_begin_object (b);
  um_json_add_int (b, "device_peak_bytes", m.device_peak);
  um_json_add_int (b, "device_weight_bytes", m.device_weights);
  um_json_add_int (b, "backend_overhead_bytes", m.backend_overhead);
  um_json_add_int (b, "host_peak_bytes", m.host_peak);
  um_json_add_int (b, "host_load_peak_bytes", m.host_load_peak);
  if (m.host_store_raw)
    {
      um_json_add_int (b, "host_store_bytes", m.host_store);
      um_json_add_int (b, "host_store_raw_bytes", m.host_store_raw);
    }
  device_usage_json (b, engine);
  um_json_add_double (b, "load_seconds", m.seconds_load);
  um_json_add_bool (b, "converted_from_cache", m.cached);
  um_json_add_string (b, "weights_path", m.weights_path);
  /* How far the prediction is from what happened: the CPU backend's device
   * peak adds its overhead (scratch), which the plan keeps on the host. */
  um_json_add_double (b, "device_error",
                      p->device_peak ? ((double) m.device_peak - p->device_peak) / p->device_peak : 0);
  json_builder_set_member_name (b, "host_error");
  {
    guint64 predicted = MAX (p->host_peak, p->host_load_peak);
    json_builder_add_double_value (b, predicted ? ((double) m.host_peak - predicted) / predicted : 0);
  }
  json_builder_end_object (b);
}

static void
print_table (const UmModel *model, GArray *table, const UmPlanTarget *t)
{
  const UmModelConfig *c = &model->cfg;
  g_autofree char *ffn = c->n_experts > 0 ? g_strdup_printf ("%u experts of %u (%u per token)", c->n_experts,
                                                              c->expert_ffn, c->n_experts_used)
                                          : g_strdup_printf ("ffn %u", c->mlp_hidden);

  printf ("%s: %s, %u layers, d_model %u, %s, vocab %u, %s\n", model->display_name, um_arch_info (c->arch)->name,
          c->n_layers, c->d_model, ffn, c->vocab_size, t->cuda ? "on the GPU" : "on the CPU backend");
  printf ("%-20s %-14s %8s %-9s %12s %12s %12s  %s\n", "mode", "weights", "layers", "experts", "device", "host",
          "load peak", "fits");
  for (guint i = 0; i < table->len; i++)
    {
      const UmPlan *p = &g_array_index (table, UmPlan, i);
      g_autofree char *d = g_format_size_full (p->device_peak, G_FORMAT_SIZE_IEC_UNITS);
      g_autofree char *h = g_format_size_full (p->host_peak, G_FORMAT_SIZE_IEC_UNITS);
      g_autofree char *l = g_format_size_full (p->host_load_peak, G_FORMAT_SIZE_IEC_UNITS);
      g_autofree char *layers = p->stream_slots ? g_strdup_printf ("%u/%u", p->stream_slots, p->n_layers)
                                                : g_strdup_printf ("%u", p->n_layers);
      printf ("%-20s %-14s %8s %-9s %12s %12s %12s  %s\n", um_mem_mode_to_string (p->mode), p->weight_format, layers,
              c->n_experts > 0 ? um_expert_placement_to_string (p->experts) : "-", d, h, l, p->fits ? "yes" : "no");
    }
  if (c->n_experts > 0 && table->len > 0)
    {
      const UmPlan *p = &g_array_index (table, UmPlan, 0);
      printf ("experts' products per pass (time model, this machine): resident %.1f ms, host %.1f ms, fetch %.1f ms\n",
              1e3 * p->expert_seconds[UM_EXPERTS_RESIDENT], 1e3 * p->expert_seconds[UM_EXPERTS_HOST],
              1e3 * p->expert_seconds[UM_EXPERTS_FETCH]);
      if (t->cuda && t->device_rates_measured)
        printf ("GPU rates measured on the device: experts' products %.3g GFLOP/s, copies %.3g GB/s pinned, "
                "%.1f GB/s pageable\n", t->device_gflops, t->fetch_bytes_per_s / 1e9, t->rows_bytes_per_s / 1e9);
      else if (t->cuda)
        printf ("GPU rates estimated (the device could not be measured): products %.0f GFLOP/s, copies %.1f GB/s\n",
                t->device_gflops > 0 ? t->device_gflops : 20000.0,
                (t->fetch_bytes_per_s > 0 ? t->fetch_bytes_per_s : 20e9) / 1e9);
    }
  for (guint i = 0; i < table->len; i++)
    {
      const UmPlan *p = &g_array_index (table, UmPlan, i);
      if ((p->stream_slots > 0 || p->experts == UM_EXPERTS_HOST || p->experts == UM_EXPERTS_FETCH)
          && p->options.host_zstd)
        {
          printf ("zstd host store%s: %.3f of the raw bytes in %s, %s\n", p->stream_slots > 0 ? "" : " (experts)",
                  p->zstd_ratio, um_mem_mode_to_string (p->mode),
                  p->zstd_measured ? "measured on the weights"
                                   : "estimated by type (loading measures it on the weights)");
        }
    }
}

int
um_cli_plan (int argc, char **argv)
{
  g_autoptr(GOptionContext) ctx = g_option_context_new ("— predict memory for every mode, before loading");
  g_autofree char *model_path = NULL;
  gboolean json = FALSE;
  int prompt_length = 64;
  g_auto(UmCliGenOptions) go = { 0 };
  GOptionEntry entries[] = {
    { "model", 'm', 0, G_OPTION_ARG_FILENAME, &model_path, "Model folder or .gguf file", "PATH" },
    { "prompt-length", 0, 0, G_OPTION_ARG_INT, &prompt_length, "Prompt tokens to plan for (default 64)", "N" },
    { "cfg", 0, 0, G_OPTION_ARG_NONE, NULL, "Plan for classifier-free guidance (a doubled canvas)", NULL },
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "Print JSON", NULL },
    { NULL }
  };
  gboolean cfg = FALSE;
  g_autoptr(GError) error = NULL;
  g_autoptr(UmModel) model = NULL;
  g_autoptr(GArray) table = NULL;
  UmEngineOptions opts;
  UmGenParams params;
  UmPlanTarget t;

  entries[2].arg_data = &cfg;
  um_cli_gen_options_init (&go, 128, 128, 32);
  g_option_context_add_main_entries (ctx, entries, NULL);
  um_cli_gen_options_add (ctx, &go);
  if (!um_cli_parse_options (ctx, &argc, &argv))
    return 2;
  if (!um_cli_gen_options_to_params (&go, &params, &error)
      || !um_cli_engine_options (&go, &params, prompt_length, model_path, &opts, &error))
    return um_cli_fail (error);
  opts.shape.cfg = cfg || params.cfg_scale > 0;
  if (model_path == NULL)
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "--model PATH is required");
      return um_cli_fail (error);
    }
  /* Metadata, tokenizer and the tensor table; no weight is read. */
  model = um_model_load (model_path, NULL, &error);
  if (model == NULL)
    return um_cli_fail (error);

  um_plan_target_cpu (&t, opts.memory_budget, opts.n_threads);
  t.products = opts.products;
  t.cache_dir = opts.cache_dir;
  t.headroom = opts.headroom;
  if (opts.device != UM_DEVICE_CPU)
    {
      g_autoptr(UmGpuReport) report = um_gpu_report_new ();
      if (report->devices->len > (guint) opts.gpu_index)
        {
          const UmGpuDevice *d = &g_array_index (report->devices, UmGpuDevice, opts.gpu_index);
          um_plan_target_set_gpu (&t, d->total_bytes, d->free_bytes);
          /* The experts' placements on this GPU's rates, not estimates. */
          um_plan_calibrate_gpu (&t, model, opts.gpu_index);
        }
      else if (opts.device == UM_DEVICE_CUDA)
        {
          g_set_error (&error, UM_ERROR, UM_ERROR_UNSUPPORTED, "no usable GPU: %s",
                       report->why_none ? report->why_none : "device index out of range");
          return um_cli_fail (error);
        }
    }

  table = g_array_new (FALSE, TRUE, sizeof (UmPlan));
  for (int m = 0; m < UM_MEM_N_MODES; m++)
    {
      UmMemOptions mo = opts.mem;
      UmPlan p;
      mo.mode = (UmMemMode) m;
      if (!um_plan_compute (model, &mo, &opts.shape, &t, &p, &error))
        return um_cli_fail (error);
      g_array_append_val (table, p);
    }

  if (json)
    {
      g_autoptr(JsonBuilder) b = json_builder_new ();
      g_autoptr(JsonNode) root = NULL;
      json_builder_begin_object (b);
      um_json_add_string (b, "model", model_path);
      um_json_add_string (b, "device", t.cuda ? "cuda" : "cpu");
      if (t.cuda && model->cfg.n_experts > 0)
        {
          json_builder_set_member_name (b, "gpu_rates");
          json_builder_begin_object (b);
          um_json_add_bool (b, "measured", t.device_rates_measured);
          um_json_add_double (b, "expert_gflops", t.device_gflops);
          um_json_add_double (b, "fetch_bytes_per_s", t.fetch_bytes_per_s);
          um_json_add_double (b, "rows_bytes_per_s", t.rows_bytes_per_s);
          json_builder_end_object (b);
        }
      um_json_add_int (b, "device_total_bytes", t.device_total);
      um_json_add_int (b, "device_free_bytes", t.device_free);
      if (t.device_budget)
        um_json_add_int (b, "device_budget_bytes", t.device_budget);
      um_json_add_int (b, "host_total_bytes", t.host_total);
      um_json_add_int (b, "host_available_bytes", t.host_available);
      json_builder_set_member_name (b, "shape");
      json_builder_begin_object (b);
      um_json_add_int (b, "prompt_length", opts.shape.prompt_length);
      um_json_add_int (b, "gen_length", opts.shape.gen_length);
      um_json_add_int (b, "block_length", opts.shape.block_length);
      um_json_add_bool (b, "cfg", opts.shape.cfg);
      json_builder_end_object (b);
      json_builder_set_member_name (b, "modes");
      json_builder_begin_array (b);
      for (guint i = 0; i < table->len; i++)
        json_builder_add_value (b, um_cli_plan_to_json (&g_array_index (table, UmPlan, i)));
      json_builder_end_array (b);
      json_builder_end_object (b);
      root = json_builder_get_root (b);
      um_cli_print_json (root, TRUE);
    }
  else
    print_table (model, table, &t);
  return 0;
}

int
um_cli_cache (int argc, char **argv)
{
  g_autoptr(GOptionContext) ctx = g_option_context_new ("[list | remove FILE | clear] — converted weights");
  g_autofree char *dir = NULL;
  gboolean json = FALSE;
  GOptionEntry entries[] = {
    { "cache-dir", 0, 0, G_OPTION_ARG_FILENAME, &dir, "The cache folder (default $XDG_CACHE_HOME/unmask/converted)",
      "DIR" },
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "Print JSON", NULL },
    { NULL }
  };
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) entries_list = NULL;
  const char *what;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!um_cli_parse_options (ctx, &argc, &argv))
    return 2;
  what = argc > 1 ? argv[1] : "list";
  /* No --cache-dir: the default folder and the temporary one it falls
   * back to, both (NULL). */
  if (g_str_equal (what, "remove"))
    {
      if (argc < 3)
        {
          g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "cache remove FILE: which file?");
          return um_cli_fail (error);
        }
      return um_convert_cache_remove (dir, argv[2], &error) ? 0 : um_cli_fail (error);
    }
  entries_list = um_convert_cache_list (dir, &error);
  if (entries_list == NULL)
    return um_cli_fail (error);
  if (g_str_equal (what, "clear"))
    {
      guint busy = 0;
      for (guint i = 0; i < entries_list->len; i++)
        {
          const UmConvertedEntry *e = g_ptr_array_index (entries_list, i);
          /* A conversion running now keeps its file; it is finished or
           * removed by its own process. */
          if (e->in_progress)
            {
              busy++;
              continue;
            }
          if (!um_convert_cache_remove (dir, e->path, &error))
            return um_cli_fail (error);
        }
      if (busy > 0)
        fprintf (stderr, "unmask-cli: %u conversion%s still running; %s left.\n", busy, busy == 1 ? " is" : "s are",
                 busy == 1 ? "its file is" : "their files are");
      return 0;
    }
  if (!g_str_equal (what, "list"))
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "cache: “%s” is not list, remove or clear", what);
      return um_cli_fail (error);
    }
  if (json)
    {
      g_autoptr(JsonBuilder) b = json_builder_new ();
      g_autoptr(JsonNode) root = NULL;
      json_builder_begin_array (b);
      for (guint i = 0; i < entries_list->len; i++)
        {
          const UmConvertedEntry *e = g_ptr_array_index (entries_list, i);
          json_builder_begin_object (b);
          um_json_add_string (b, "path", e->path);
          um_json_add_int (b, "bytes", e->bytes);
          um_json_add_string (b, "source", e->source);
          um_json_add_string (b, "type", e->type);
          um_json_add_double (b, "prune_heads", e->prune_heads);
          um_json_add_double (b, "prune_ffn", e->prune_ffn);
          um_json_add_bool (b, "partial", e->partial);
          um_json_add_bool (b, "in_progress", e->in_progress);
          json_builder_end_object (b);
        }
      json_builder_end_array (b);
      root = json_builder_get_root (b);
      um_cli_print_json (root, TRUE);
      return 0;
    }
  for (guint i = 0; i < entries_list->len; i++)
    {
      const UmConvertedEntry *e = g_ptr_array_index (entries_list, i);
      g_autofree char *size = g_format_size_full (e->bytes, G_FORMAT_SIZE_IEC_UNITS);
      if (e->partial)
        printf ("%10s  %-8s %s\n            %s\n", size, "partial", e->path,
                e->in_progress ? "a conversion running now" : "left by a conversion that was stopped; cache clear removes it");
      else
        printf ("%10s  %-8s %s\n            from %s\n", size, e->type ? e->type : "?", e->path,
                e->source ? e->source : "?");
    }
  return 0;
}

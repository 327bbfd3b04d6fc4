#include "config.h"

#include "um-engine.h"

#include "um-cpu-kernels.h"

/* Stage names are marked for translation; the UI translates them. */
#include <glib/gi18n-lib.h>

#include "um-backend-cuda.h"
#include "um-chat-template.h"
#include "um-convert-model.h"
#include "um-error.h"
#include "um-expert-store.h"
#include "um-layer-store.h"
#include "um-stream-report.h"
#include "um-quantize.h"

#include <malloc.h>
#include <string.h>

struct _UmEngine {
  char         *notice;
  UmModel      *model;
  UmGenRecommendation *recommendation;
  UmBackend    *backend;
  UmForward    *forward;
  UmLayerStore *store;
  UmPlan        plan;
  char         *weights_path;
  gboolean      cached;
  guint64       host_load_peak;
  double        seconds_load;
  double        upload_rate;    /* host → device bytes/s, measured at load when weights stream; 0 */
  GMutex        busy;
};

void
um_engine_options_init (UmEngineOptions *options)
{
  memset (options, 0, sizeof *options);
  options->n_threads = 0;
  options->memory_budget = 0;
  options->device = UM_DEVICE_AUTO;
  options->gpu_index = 0;
  options->products = UM_PRODUCTS_AUTO;
  um_products_from_string (g_getenv ("UNMASK_PRODUCTS"), &options->products);
  /* UNMASK_DEVICE=cpu|cuda|auto overrides the default, e.g. to keep a
   * machine's GPU out of a test run. */
  um_device_kind_from_string (g_getenv ("UNMASK_DEVICE"), &options->device);
  um_mem_options_init (&options->mem, UM_MEM_STANDARD);
  um_plan_shape_init (&options->shape);
}

gboolean
um_device_kind_from_string (const char *s, UmDeviceKind *out)
{
  if (g_strcmp0 (s, "auto") == 0)
    *out = UM_DEVICE_AUTO;
  else if (g_strcmp0 (s, "cpu") == 0)
    *out = UM_DEVICE_CPU;
  else if (g_strcmp0 (s, "cuda") == 0 || g_strcmp0 (s, "gpu") == 0)
    *out = UM_DEVICE_CUDA;
  else
    return FALSE;
  return TRUE;
}

const char *
um_engine_get_notice (UmEngine *engine)
{
  return engine->notice;
}

typedef struct {
  UmProgressFunc cb;
  gpointer       data;
  const char    *stage;
  double         from, to;   /* the part of the whole load this stage covers */
} LoadProgress;

static void
on_stage_progress (double fraction, gpointer user_data)
{
  LoadProgress *lp = user_data;
  if (lp->cb)
    lp->cb (lp->from + (lp->to - lp->from) * fraction, lp->stage, lp->data);
}

static void
on_convert_progress (double fraction, const char *tensor, gpointer user_data)
{
  on_stage_progress (fraction, user_data);
}

static char *
format_bytes (guint64 b)
{
  return g_format_size_full (b, G_FORMAT_SIZE_IEC_UNITS);
}

/* "needs 4.9 GiB of device memory (weights 4.4 GiB, activations 12 MiB, …)" */
static char *
describe_need (const UmPlan *p)
{
  GString *s = g_string_new (NULL);
  g_autofree char *total = format_bytes (p->device_peak);
  gboolean first = TRUE;

  g_string_append_printf (s, "%s needs %s of device memory (", um_mem_mode_to_string (p->mode), total);
  for (int i = 0; i < UM_PLAN_N_COMPONENTS; i++)
    if (p->device[i] > 0)
      {
        g_autofree char *b = format_bytes (p->device[i]);
        g_string_append_printf (s, "%s%s %s", first ? "" : ", ", um_plan_component_name (i), b);
        first = FALSE;
      }
  g_string_append (s, ")");
  return g_string_free (s, FALSE);
}

/* The error for a plan over its budget, naming the numbers and the modes
 * that would fit. */
static void
set_does_not_fit (GError **error, const UmModel *model, const UmPlan *p, const UmEngineOptions *o,
                  const UmPlanTarget *t, const char *where)
{
  g_autofree char *need = describe_need (p);
  g_autofree char *cap = format_bytes (p->device_capacity);
  g_autoptr(GArray) table = um_plan_table (model, &o->shape, t, NULL);
  GString *alt = g_string_new (NULL);

  for (guint i = 0; table != NULL && i < table->len; i++)
    {
      const UmPlan *q = &g_array_index (table, UmPlan, i);
      if (q->fits)
        {
          g_autofree char *b = format_bytes (q->device_peak);
          g_string_append_printf (alt, "%s%s (%s)", alt->len ? ", " : "", um_mem_mode_to_string (q->mode), b);
        }
    }
  if (alt->len)
    g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY, "%s, but %s has %s. Modes that fit: %s.",
                 need, where, cap, alt->str);
  else
    {
      const UmPlan *a = table && table->len ? &g_array_index (table, UmPlan, UM_MEM_EXTREME_AGGRESSIVE) : p;
      g_autofree char *least = format_bytes (a->device_peak);
      g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY,
                   "%s, but %s has %s; even extreme-aggressive needs %s.", need, where, cap, least);
    }
  g_string_free (alt, TRUE);
}

/* Decides the device: the GPU when asked for, or when AUTO finds one the
 * plan fits; else the CPU, with a notice saying why. Plans before any
 * weight is read. */
static gboolean
choose_device (UmEngine *engine, const UmEngineOptions *o, UmPlanTarget *target, GError **error)
{
  g_autoptr(UmGpuReport) report = NULL;
  g_autofree char *why = NULL;

  if (o->device != UM_DEVICE_CPU)
    {
      report = um_gpu_report_new ();
      if (report->devices->len > (guint) o->gpu_index)
        {
          const UmGpuDevice *d = &g_array_index (report->devices, UmGpuDevice, o->gpu_index);
          UmPlanTarget t;
          um_plan_target_cpu (&t, o->memory_budget, o->n_threads);
          um_plan_target_set_gpu (&t, d->total_bytes, d->free_bytes);
          t.cache_dir = o->cache_dir;
          t.headroom = o->headroom;
          if (!um_plan_compute (engine->model, &o->mem, &o->shape, &t, &engine->plan, error))
            return FALSE;
          /* Experts that fit stay on the device whatever the rates; only
           * when they go off it does the time model pick host or fetch,
           * and then on this GPU's measured rates (estimates if they cannot
           * be measured). Measuring opens a second CUDA context, so a load
           * that keeps them resident does not pay for it. */
          if (engine->model->cfg.n_experts > 0 && o->mem.experts == UM_EXPERTS_AUTO
              && engine->plan.experts != UM_EXPERTS_RESIDENT)
            {
              um_plan_calibrate_gpu (&t, engine->model, o->gpu_index);
              if (!um_plan_compute (engine->model, &o->mem, &o->shape, &t, &engine->plan, error))
                return FALSE;
            }
          /* A budget says what this process may take, not what the GPU has
           * free: another program may hold the rest. Found here, before a
           * weight is read, rather than as an allocation failing mid-load. */
          if (engine->plan.fits && o->memory_budget != 0 && engine->plan.device_peak > d->free_bytes)
            {
              g_autofree char *need = format_bytes (engine->plan.device_peak);
              g_autofree char *have = format_bytes (d->free_bytes);
              g_autofree char *held = format_bytes (d->total_bytes - MIN (d->free_bytes, d->total_bytes));
              if (o->device == UM_DEVICE_CUDA)
                {
                  g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY,
                               "%s needs %s on GPU %d, within its budget, but the GPU has only %s free: other "
                               "programs hold %s of it. Close them, or choose a smaller budget or mode.",
                               um_mem_mode_to_string (o->mem.mode), need, d->index, have, held);
                  return FALSE;
                }
              why = g_strdup_printf ("%s needs %s on the GPU, which has %s free (other programs hold %s)",
                                     um_mem_mode_to_string (o->mem.mode), need, have, held);
            }
          else if (engine->plan.fits)
            {
              *target = t;
              return TRUE;
            }
          else if (o->device == UM_DEVICE_CUDA)
            {
              g_autofree char *where = g_strdup_printf ("GPU %d (%s)", d->index,
                                                        o->memory_budget ? "its budget" : "free memory");
              set_does_not_fit (error, engine->model, &engine->plan, o, &t, where);
              return FALSE;
            }
          if (why == NULL)
            {
              g_autofree char *need = format_bytes (engine->plan.device_peak);
              g_autofree char *have = format_bytes (engine->plan.device_capacity);
              why = g_strdup_printf ("%s needs %s on the GPU, which has %s free",
                                     um_mem_mode_to_string (o->mem.mode), need, have);
            }
        }
      else if (o->device == UM_DEVICE_CUDA)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "no usable GPU: %s",
                       report->why_none ? report->why_none : "device index out of range");
          return FALSE;
        }
      else
        why = g_strdup (report->why_none ? report->why_none : "no GPU");
      engine->notice = g_strdup_printf ("No usable GPU (%s); running on the CPU", why);
    }
  um_plan_target_cpu (target, o->memory_budget, o->n_threads);
  target->products = o->products;
  target->cache_dir = o->cache_dir;
  target->headroom = o->headroom;
  if (!um_plan_compute (engine->model, &o->mem, &o->shape, target, &engine->plan, error))
    return FALSE;
  if (o->memory_budget != 0 && engine->plan.device_peak > o->memory_budget)
    {
      set_does_not_fit (error, engine->model, &engine->plan, o, target, "the memory budget");
      return FALSE;
    }
  return TRUE;
}

/* Converts the weights as the plan says (or finds them in the cache) and
 * continues with the converted file. */
static gboolean
convert_weights (UmEngine *engine, const UmEngineOptions *o, LoadProgress *lp, GCancellable *cancellable,
                 GError **error)
{
  UmQuantizeOptions q = { engine->plan.options.weight_format, o->mem.prune_heads, o->mem.prune_ffn };
  g_autofree char *path = NULL;
  g_autofree char *name = NULL;
  UmModel *converted;

  lp->stage = N_("Converting the weights (once; then cached)");
  path = um_convert_model (engine->model, &q, o->cache_dir, on_convert_progress, lp, cancellable,
                           &engine->cached, error);
  if (path == NULL)
    return FALSE;
  /* The source model (its tokenizer, its maps) goes before the converted
   * one is read, so the two are never held at once. */
  name = g_strdup_printf ("%s (%s)", engine->model->display_name, engine->plan.weight_format);
  g_clear_pointer (&engine->model, um_model_free);
  malloc_trim (0);
  converted = um_model_load (path, cancellable, error);
  if (converted == NULL)
    return FALSE;
  g_free (converted->display_name);
  converted->display_name = g_steal_pointer (&name);
  engine->model = converted;
  g_free (engine->weights_path);
  engine->weights_path = g_steal_pointer (&path);
  return TRUE;
}

/* Copies of @bytes (at most 64 MiB, so the block it may allocate stays
 * small beside the store) from host memory into a device buffer; 0 when the
 * measure could not be made (it is a report, never a reason to fail). */
static double
measure_upload (UmBackend *be, size_t bytes, const guint8 *src)
{
  g_autoptr(GError) error = NULL;
  double rate;

  bytes = MIN (bytes, (size_t) 64 << 20);
  rate = um_stream_measure_upload (be, bytes, src, &error);
  if (rate <= 0)
    g_debug ("the host-to-device bandwidth was not measured: %s", error ? error->message : "no copy");
  return rate;
}

static gboolean
setup_compute (UmEngine *engine, const UmEngineOptions *options, const UmPlanTarget *target, LoadProgress *lp,
               GCancellable *cancellable, GError **error)
{
  const UmPlan *p = &engine->plan;
  UmForwardOptions fo;
  UmForwardShape shape;

  if (target->cuda)
    {
      /* The host's share (routed experts, embeddings) runs on the CPU's
       * threads: the count asked for, or the adaptive default. --budget is
       * a hard cap on all the process holds on the GPU, its context and
       * cuBLAS included (the plan counts them too). */
      um_cpu_set_threads (options->n_threads);
      engine->backend = um_backend_cuda_new_capped (options->gpu_index, options->memory_budget, error);
    }
  else
    {
      UmProducts products = options->products;
      engine->backend = um_backend_cpu_new (options->memory_budget, options->n_threads, error);
      /* AUTO is decided for the file as a whole (see um-backend.h): by the
       * type of the MLP weights, which hold most of the parameters. */
      if (engine->backend != NULL && products == UM_PRODUCTS_AUTO)
        products = um_products_auto_int8 (engine->model->layers[0].w_gate.dtype) ? UM_PRODUCTS_INT8
                                                                                 : UM_PRODUCTS_EXACT;
      if (engine->backend != NULL)
        um_backend_cpu_set_products (engine->backend, products);
    }
  if (engine->backend == NULL)
    return FALSE;

  um_forward_options_init (&fo);
  fo.embed_on_host = p->embed_on_host;
  fo.row_chunk = MAX (p->options.row_chunk, 0);
  fo.experts = p->experts;
  fo.expert_zstd = p->experts != UM_EXPERTS_RESIDENT && p->options.host_zstd;
  fo.expert_slots = p->expert_slots;
  if (p->stream_slots > 0)
    {
      lp->stage = p->options.host_zstd ? N_("Compressing the layers into host memory")
                                       : N_("Copying the layers into host memory");
      lp->from = lp->to;
      lp->to = lp->from + (1.0 - lp->from) * 0.8;
      engine->store = um_layer_store_new (engine->backend, engine->model,
                                          p->options.host_zstd ? UM_STORE_ZSTD : UM_STORE_RAW,
                                          UM_LAYER_STORE_ZSTD_LEVEL,
                                          on_stage_progress, lp, cancellable, error);
      if (engine->store == NULL)
        return FALSE;
      /* The compressors' buffers, freed, go back to the system rather than
       * stay in the footprint while generating (as the plan has it). */
      malloc_trim (0);
      fo.stream_slots = p->stream_slots;
      fo.store = engine->store;
      /* The bus as a layer's copy sees it, for the streaming report's bound:
       * before the slots exist, so the one slot it borrows never raises the
       * peak; from the store's own pinned block of layer 0 where it is raw
       * (that block's size: layers differ, the _M mixes' most). */
      {
        const guint8 *block = um_layer_store_raw_block (engine->store, 0);
        UmLayerLayout first;
        um_layer_layout (&engine->model->layers[0], &first);
        engine->upload_rate = measure_upload (engine->backend,
                                              block != NULL ? first.total : um_layer_slot_bytes (engine->model),
                                              block);
      }
    }
  else if (p->experts == UM_EXPERTS_FETCH || p->experts == UM_EXPERTS_HOST)
    engine->upload_rate = measure_upload (engine->backend, um_expert_slot_bytes (engine->model), NULL);
  if (p->experts == UM_EXPERTS_FETCH || fo.expert_zstd)
    lp->stage = fo.expert_zstd ? N_("Compressing the experts into host memory")
                               : N_("Copying the experts into host memory");
  else
    lp->stage = target->cuda ? N_("Uploading the weights to the GPU") : N_("Preparing the weights");
  lp->from = lp->to;
  lp->to = 1.0;
  engine->forward = um_forward_new_with (engine->model, engine->backend, &fo, on_stage_progress, lp,
                                         cancellable, error);
  if (engine->forward == NULL)
    return FALSE;
  /* The work buffers and the KV cache of the planned generation, now: the
   * device then holds what the plan predicted from load on (what the app
   * shows as measured before the first answer), and a budget they do not
   * fit fails here rather than at the first step. */
  {
    UmPlanShape aligned = options->shape;
    aligned.block_aligned |= engine->model->cfg.block_causal;
    um_plan_forward_shape (&aligned, engine->backend->ops->choose != NULL, &shape);
  }
  return um_forward_reserve (engine->forward, &shape, error);
}

void
um_gen_request_init (UmGenRequest *request)
{
  memset (request, 0, sizeof *request);
  um_gen_params_init (&request->params);
}

UmEngine *
um_engine_load (const char             *path,
                const UmEngineOptions  *options,
                GCancellable           *cancellable,
                UmProgressFunc          progress_cb,
                gpointer                user_data,
                GError                **error)
{
  g_autoptr(UmEngine) engine = g_new0 (UmEngine, 1);
  UmEngineOptions defaults;
  UmPlanTarget target;
  LoadProgress lp = { progress_cb, user_data, NULL, 0.0, 0.05 };
  gint64 t0 = g_get_monotonic_time ();

  g_mutex_init (&engine->busy);
  if (options == NULL)
    {
      um_engine_options_init (&defaults);
      options = &defaults;
    }
  if (progress_cb)
    progress_cb (0.0, N_("Reading the model"), user_data);
  engine->model = um_model_load (path, cancellable, error);
  if (engine->model == NULL)
    return NULL;
  engine->weights_path = g_strdup (path);
  /* Small (a JSON file or the GGUF's header); problems are warnings in it. */
  engine->recommendation = um_gen_recommendation_load (path);
  if (g_cancellable_set_error_if_cancelled (cancellable, error)
      || !choose_device (engine, options, &target, error))
    return NULL;
  if (engine->plan.converts)
    {
      lp.from = 0.05;
      lp.to = 0.7;
      if (!convert_weights (engine, options, &lp, cancellable, error))
        return NULL;
    }
  /* The zstd store's size, measured on the weights as streamed (a sample
   * of them) now that they are at hand: the plan had estimated it by type. */
  if (!um_plan_measure_store (&engine->plan, engine->model, &target, error))
    return NULL;
  if (progress_cb)
    progress_cb (lp.to, N_("Preparing the compute backend"), user_data);
  if (!setup_compute (engine, options, &target, &lp, cancellable, error))
    return NULL;
  engine->host_load_peak = um_process_peak_rss ();
  engine->seconds_load = (g_get_monotonic_time () - t0) / 1e6;
  if (progress_cb)
    progress_cb (1.0, N_("Ready"), user_data);
  return g_steal_pointer (&engine);
}

void
um_engine_free (UmEngine *engine)
{
  if (engine == NULL)
    return;
  /* A generation still in its thread (cancelled by the caller) ends at the
   * next layer or step; wait for it rather than pull the model away. */
  g_mutex_lock (&engine->busy);
  g_mutex_unlock (&engine->busy);
  g_clear_pointer (&engine->forward, um_forward_free);
  g_clear_pointer (&engine->store, um_layer_store_free);
  g_clear_pointer (&engine->backend, um_backend_free);
  g_clear_pointer (&engine->model, um_model_free);
  g_clear_pointer (&engine->recommendation, um_gen_recommendation_free);
  g_free (engine->notice);
  g_free (engine->weights_path);
  g_mutex_clear (&engine->busy);
  g_free (engine);
}

const UmGenRecommendation *
um_engine_get_recommendation (UmEngine *engine)
{
  return engine->recommendation;
}

const UmPlan *
um_engine_get_plan (UmEngine *engine)
{
  return &engine->plan;
}

void
um_engine_get_memory (UmEngine *engine, UmEngineMemory *out)
{
  UmBackendMemInfo mem;

  memset (out, 0, sizeof *out);
  engine->backend->ops->mem_info (engine->backend, &mem);
  out->device_peak = mem.peak;
  out->device_weights = mem.weight_bytes;
  out->backend_overhead = mem.overhead;
  out->host_peak = um_process_peak_rss ();
  out->host_load_peak = engine->host_load_peak;
  if (engine->store != NULL || um_forward_get_expert_store (engine->forward) != NULL)
    {
      UmLayerStoreStats st;
      um_layer_store_get_stats (engine->store != NULL ? engine->store : um_forward_get_expert_store (engine->forward),
                                &st);
      out->host_store = st.stored_bytes;
      out->host_store_raw = st.raw_bytes;
    }
  out->seconds_load = engine->seconds_load;
  out->upload_bytes_per_s = engine->upload_rate;
  out->cached = engine->cached;
  out->weights_path = engine->weights_path;
}

UmModel *
um_engine_get_model (UmEngine *engine)
{
  return engine->model;
}

UmLayerStore *
um_engine_get_layer_store (UmEngine *engine)
{
  return engine->store;
}

UmForward *
um_engine_get_forward (UmEngine *engine)
{
  return engine->forward;
}

UmBackend *
um_engine_get_backend (UmEngine *engine)
{
  return engine->backend;
}

void
um_gen_result_free (UmGenResult *result)
{
  if (result == NULL)
    return;
  g_clear_pointer (&result->prompt_ids, g_array_unref);
  g_clear_pointer (&result->ids, g_array_unref);
  g_free (result->text);
  g_free (result);
}

char *
um_engine_decode_answer (UmEngine *engine, const gint32 *ids, int n_ids, GError **error)
{
  const UmModelConfig *c = &engine->model->cfg;
  int n = 0;

  while (n < n_ids && ids[n] != c->eos_id && ids[n] != c->eot_id)
    n++;
  return um_tokenizer_decode (engine->model->tokenizer, ids, n, TRUE, error);
}

UmGenResult *
um_engine_generate (UmEngine           *engine,
                    const UmGenRequest *request,
                    UmStepFunc          step_cb,
                    gpointer            user_data,
                    GCancellable       *cancellable,
                    GError            **error)
{
  g_autoptr(UmGenResult) result = g_new0 (UmGenResult, 1);
  UmModel *model = engine->model;
  gint64 t0;
  gboolean ok;

  if (!g_mutex_trylock (&engine->busy))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FAILED, "the engine is already generating");
      return NULL;
    }

  result->prompt_ids = g_array_new (FALSE, FALSE, sizeof (gint32));
  result->ids = g_array_new (FALSE, FALSE, sizeof (gint32));
  if (request->prompt != NULL && request->chat)
    ok = um_model_build_chat_prompt (model, NULL, 0, request->prompt, result->prompt_ids, error);
  else if (request->prompt != NULL)
    ok = um_tokenizer_encode (model->tokenizer, request->prompt, -1, result->prompt_ids, error);
  else
    {
      g_array_append_vals (result->prompt_ids, request->prompt_ids, request->n_prompt_ids);
      ok = TRUE;
    }

  t0 = g_get_monotonic_time ();
  /* Steps actually run: with threshold decoding, params.steps is a maximum. */
  ok = ok && um_sampler_generate_full (engine->forward, (const gint32 *) result->prompt_ids->data,
                                       result->prompt_ids->len, &request->params, step_cb, user_data,
                                       cancellable, result->ids, &result->steps, error);
  result->seconds = (g_get_monotonic_time () - t0) / 1e6;
  if (ok)
    {
      result->text = um_engine_decode_answer (engine, (const gint32 *) result->ids->data,
                                              result->ids->len, error);
      ok = result->text != NULL;
    }
  g_mutex_unlock (&engine->busy);
  return ok ? g_steal_pointer (&result) : NULL;
}

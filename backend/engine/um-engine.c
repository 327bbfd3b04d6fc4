#include "config.h"

#include "um-engine.h"

/* Stage names are marked for translation; the UI translates them. */
#include <glib/gi18n-lib.h>

#include "um-chat-template.h"
#include "um-backend-cuda.h"
#include "um-error.h"

#include <string.h>

struct _UmEngine {
  char      *notice;
  UmModel   *model;
  UmBackend *backend;
  UmForward *forward;
  GMutex     busy;
};

void
um_engine_options_init (UmEngineOptions *options)
{
  options->n_threads = 0;
  options->memory_budget = 0;
  options->device = UM_DEVICE_AUTO;
  options->gpu_index = 0;
  options->products = UM_PRODUCTS_AUTO;
  um_products_from_string (g_getenv ("UNMASK_PRODUCTS"), &options->products);
  /* UNMASK_DEVICE=cpu|cuda|auto overrides the default, e.g. to keep a
   * machine's GPU out of a test run. */
  um_device_kind_from_string (g_getenv ("UNMASK_DEVICE"), &options->device);
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
} LoadProgress;

/* Weights become available between 50 % and 100 % of the load. */
static void
on_weights_progress (double fraction, gpointer user_data)
{
  LoadProgress *lp = user_data;
  if (lp->cb)
    lp->cb (0.5 + 0.5 * fraction, lp->stage, lp->data);
}

/* The GPU when asked for (or when AUTO finds one that holds the model), else
 * the CPU with a notice saying why. */
static gboolean
setup_compute (UmEngine *engine, const UmEngineOptions *options, LoadProgress *lp,
               GCancellable *cancellable, GError **error)
{
  g_autoptr(GError) gpu_error = NULL;

  if (options->device != UM_DEVICE_CPU)
    {
      engine->backend = um_backend_cuda_new (options->gpu_index, options->memory_budget, &gpu_error);
      if (engine->backend != NULL)
        {
          lp->stage = N_("Uploading the weights to the GPU");
          engine->forward = um_forward_new_full (engine->model, engine->backend, on_weights_progress, lp,
                                                 cancellable, &gpu_error);
          if (engine->forward != NULL)
            return TRUE;
          g_clear_pointer (&engine->backend, um_backend_free);
          if (g_error_matches (gpu_error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
            {
              g_propagate_error (error, g_steal_pointer (&gpu_error));
              return FALSE;
            }
        }
      if (options->device == UM_DEVICE_CUDA)
        {
          g_propagate_error (error, g_steal_pointer (&gpu_error));
          return FALSE;
        }
      engine->notice = g_strdup_printf ("No usable GPU (%s); running on the CPU", gpu_error->message);
    }
  engine->backend = um_backend_cpu_new (options->memory_budget, options->n_threads, error);
  if (engine->backend == NULL)
    return FALSE;
  {
    UmProducts products = options->products;
    /* AUTO is decided for the file as a whole (see um-backend.h): by the
     * type of the MLP weights, which hold most of the parameters. */
    if (products == UM_PRODUCTS_AUTO)
      products = um_products_auto_int8 (engine->model->layers[0].w_gate.dtype) ? UM_PRODUCTS_INT8
                                                                               : UM_PRODUCTS_EXACT;
    um_backend_cpu_set_products (engine->backend, products);
  }
  lp->stage = N_("Preparing the weights");
  engine->forward = um_forward_new_full (engine->model, engine->backend, on_weights_progress, lp, cancellable, error);
  return engine->forward != NULL;
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
  if (g_cancellable_set_error_if_cancelled (cancellable, error))
    return NULL;
  if (progress_cb)
    progress_cb (0.5, N_("Preparing the compute backend"), user_data);
  {
    LoadProgress lp = { progress_cb, user_data, NULL };
    if (!setup_compute (engine, options, &lp, cancellable, error))
      return NULL;
  }
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
  g_clear_pointer (&engine->backend, um_backend_free);
  g_clear_pointer (&engine->model, um_model_free);
  g_free (engine->notice);
  g_mutex_clear (&engine->busy);
  g_free (engine);
}

UmModel *
um_engine_get_model (UmEngine *engine)
{
  return engine->model;
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
    ok = um_chat_build_prompt (model->tokenizer, NULL, 0, request->prompt,
                               model->cfg.bos_id, model->cfg.eos_id, result->prompt_ids, error);
  else if (request->prompt != NULL)
    ok = um_tokenizer_encode (model->tokenizer, request->prompt, -1, result->prompt_ids, error);
  else
    {
      g_array_append_vals (result->prompt_ids, request->prompt_ids, request->n_prompt_ids);
      ok = TRUE;
    }

  t0 = g_get_monotonic_time ();
  ok = ok && um_sampler_generate (engine->forward, (const gint32 *) result->prompt_ids->data,
                                  result->prompt_ids->len, &request->params, step_cb, user_data,
                                  cancellable, result->ids, error);
  result->seconds = (g_get_monotonic_time () - t0) / 1e6;
  result->steps = request->params.steps;
  if (ok)
    {
      result->text = um_engine_decode_answer (engine, (const gint32 *) result->ids->data,
                                              result->ids->len, error);
      ok = result->text != NULL;
    }
  g_mutex_unlock (&engine->busy);
  return ok ? g_steal_pointer (&result) : NULL;
}

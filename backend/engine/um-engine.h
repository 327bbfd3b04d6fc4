/* um-engine.h — the engine facade the GUI and the CLI use.
 *
 * Thread safety: an UmEngine may be used from any thread, but runs one
 * generation at a time; a second concurrent um_engine_generate() fails with
 * UM_ERROR_FAILED ("busy") instead of waiting. um_engine_free() waits for a
 * running generation to end, so cancel it first.
 */
#pragma once

#include <gio/gio.h>

#include "um-backend.h"
#include "um-forward.h"
#include "um-gen-defaults.h"
#include "um-model.h"
#include "um-plan.h"
#include "um-sampler.h"

G_BEGIN_DECLS

typedef struct _UmEngine UmEngine;

typedef enum {
  UM_DEVICE_AUTO,            /* a usable GPU if there is one, else the CPU */
  UM_DEVICE_CPU,
  UM_DEVICE_CUDA,            /* fail rather than fall back */
} UmDeviceKind;

typedef struct {
  int          n_threads;      /* 0: all cores */
  guint64      memory_budget;  /* compute-backend bytes, 0: the backend's default */
  UmDeviceKind device;
  int          gpu_index;
  /* Activations in products with quantized weights on the CPU (see
   * um-backend.h): AUTO by default, EXACT for f32 everywhere.  The
   * environment variable UNMASK_PRODUCTS=exact|auto|int8 sets the default. */
  UmProducts   products;
  /* The memory mode and its knobs (memory/um-plan.h): standard by default.
   * memory_budget stands for the device's size when planning, on the CPU
   * backend too. */
  UmMemOptions mem;
  /* Fraction of the device's capacity (budget or free memory) kept free
   * by the streaming slots extreme-aggressive sizes to fill it: the
   * optimizer's headroom (um_profile_to_engine_options ()), 0 by default. */
  double       headroom;
  /* The generation the plan is made for; longer canvases grow the work
   * buffers at run time, within the budget. */
  UmPlanShape  shape;
  /* Where converted weights are cached; NULL: $XDG_CACHE_HOME/unmask/converted. */
  const char  *cache_dir;
} UmEngineOptions;

void        um_engine_options_init (UmEngineOptions *options);
gboolean    um_device_kind_from_string (const char *s, UmDeviceKind *out);

/* Progress in [0, 1] with a short description of the current stage. */
typedef void (*UmProgressFunc) (double fraction, const char *stage, gpointer user_data);

UmEngine *um_engine_load (const char             *path,
                          const UmEngineOptions  *options,
                          GCancellable           *cancellable,
                          UmProgressFunc          progress_cb,
                          gpointer                user_data,
                          GError                **error);
void      um_engine_free (UmEngine *engine);

/* Why the engine is not on the device asked for (e.g. AUTO without a usable
 * GPU), or NULL. */
const char *um_engine_get_notice (UmEngine *engine);

UmModel   *um_engine_get_model (UmEngine *engine);
/* The model's recommended generation settings (never NULL); resolve them
 * with the user's and the profile's by um_gen_resolve (). */
const UmGenRecommendation *um_engine_get_recommendation (UmEngine *engine);
UmForward *um_engine_get_forward (UmEngine *engine);
/* The streamed layers' host store; NULL when no layer streams. */
UmLayerStore *um_engine_get_layer_store (UmEngine *engine);
UmBackend *um_engine_get_backend (UmEngine *engine);
/* The plan the engine was loaded with (predictions), and what a run
 * measured so far. */
const UmPlan *um_engine_get_plan (UmEngine *engine);

typedef struct {
  guint64 device_peak;      /* the backend's peak bytes in use */
  guint64 device_weights;   /* of which resident weights */
  guint64 backend_overhead;
  guint64 host_peak;        /* this process's peak RSS */
  guint64 host_load_peak;   /* its peak RSS when loading ended */
  guint64 host_store;       /* streamed layers' host copy, or the routed experts' */
  guint64 host_store_raw;   /* the same before compression */
  double  seconds_load;
  double  upload_bytes_per_s; /* host → device copies, measured at load when weights stream (0: not) */
  gboolean cached;          /* the converted weights came from the cache */
  const char *weights_path; /* the file the weights were read from */
} UmEngineMemory;

void         um_engine_get_memory (UmEngine *engine, UmEngineMemory *out);

typedef struct {
  const char   *prompt;        /* text; NULL to use prompt_ids */
  gboolean      chat;          /* wrap the text in the Instruct chat template */
  const gint32 *prompt_ids;
  int           n_prompt_ids;
  UmGenParams   params;
} UmGenRequest;

typedef struct {
  GArray *prompt_ids;  /* gint32 */
  GArray *ids;         /* gint32, gen_length generated ids */
  char   *text;        /* decoded answer: up to the first EOS/EOT, no special tokens */
  double  seconds;
  int     steps;
} UmGenResult;

void         um_gen_request_init (UmGenRequest *request);
UmGenResult *um_engine_generate (UmEngine           *engine,
                                 const UmGenRequest *request,
                                 UmStepFunc          step_cb,
                                 gpointer            user_data,
                                 GCancellable       *cancellable,
                                 GError            **error);
void         um_gen_result_free (UmGenResult *result);

/* Text of generated ids up to the first EOS/EOT, special tokens skipped. */
char        *um_engine_decode_answer (UmEngine *engine, const gint32 *ids, int n_ids, GError **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmEngine, um_engine_free)
G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmGenResult, um_gen_result_free)

G_END_DECLS

/* um-plan.h — memory modes and the memory plan.
 *
 * A mode says how the weights are held: as stored, converted to 8 or 4 bits
 * at load (cached, see um-convert.h), or streamed layer by layer through a
 * few device slots from a host store. The plan predicts, from the file's
 * metadata alone (no weight is read), the peak device and host bytes of a
 * mode per component, so the app can say what fits before loading anything;
 * the engine reports the measured peaks after a run beside it.
 *
 * Mode names are part of the interface (profiles, command line):
 * standard, standard-8bit, extreme-mild, extreme-moderate, extreme-aggressive.
 */
#pragma once

#include <glib.h>

#include "um-backend.h"
#include "um-forward-sizing.h"
#include "um-model.h"

G_BEGIN_DECLS

typedef enum {
  UM_MEM_STANDARD,
  UM_MEM_STANDARD_8BIT,
  UM_MEM_EXTREME_MILD,
  UM_MEM_EXTREME_MODERATE,
  UM_MEM_EXTREME_AGGRESSIVE,
  UM_MEM_N_MODES
} UmMemMode;

const char *um_mem_mode_to_string (UmMemMode mode);
gboolean    um_mem_mode_from_string (const char *s, UmMemMode *out);
gboolean    um_mem_mode_is_extreme (UmMemMode mode);
/* Parameter limits a mode recommends (0: none): extreme modes keep the
 * canvas small, gen ≤ 64, block ≤ 32, steps ≤ 64. */
void        um_mem_mode_limits (UmMemMode mode, int *gen_length, int *block_length, int *steps);

/* A mode and its knobs; zeros mean "the mode's own choice". */
typedef struct {
  UmMemMode mode;
  char      weight_format[16];  /* "": the mode's; "stored", or a type um_quantize_model() writes */
  int       resident_layers;    /* streaming slots: 0 as many as the budget holds (≥ 2); aggressive only */
  gboolean  host_zstd;          /* compress the host store losslessly (aggressive) */
  double    prune_heads;        /* structured pruning: fraction of attention heads, ≤ 0.3 */
  double    prune_ffn;          /* fraction of FFN neurons, ≤ 0.2 */
  int       row_chunk;          /* MLP / LM-head rows at a time: 0 the mode's, < 0 none */
  /* MoE models: where the routed experts live (um-forward-sizing.h). AUTO: on the
   * device when the model fits there, else in host memory, computed there
   * or fetched per step as the time model says is faster, before any
   * layer streaming; host_zstd then compresses their host copy. */
  UmExpertPlacement experts;
  int       expert_slots;       /* FETCH: device slots, 0 the default (2), else ≥ 2 */
} UmMemOptions;

void     um_mem_options_init (UmMemOptions *options, UmMemMode mode);
gboolean um_mem_options_validate (const UmMemOptions *options, GError **error);

/* The generation the plan is for. */
typedef struct {
  int      prompt_length;
  int      gen_length;
  int      block_length;
  gboolean cfg;             /* classifier-free guidance doubles the canvas */
  gboolean kv_cache;        /* fast decoding's block KV cache (prefix or dual) */
  gboolean block_aligned;   /* the canvas is rounded up to whole blocks (LLaDA 2.x; the plan and the
                             * engine set it from the model) */
} UmPlanShape;

void um_plan_shape_init (UmPlanShape *shape);

/* The forward's shape (um-forward-sizing.h) for a generation of @shape, on a
 * backend that chooses tokens itself (@backend_chooses) or not: the plan
 * predicts with it and the engine reserves the work buffers for it. */
void um_plan_forward_shape (const UmPlanShape *shape, gboolean backend_chooses, UmForwardShape *out);

/* Where it runs. */
typedef struct {
  gboolean cuda;               /* a GPU; else the CPU backend, whose "device" memory is RAM */
  guint64  device_budget;      /* 0: a GPU's free memory; on the CPU no limit */
  /* Fraction of the capacity (budget or free memory) kept free by what
   * grows to fill it, the streaming slots of extreme-aggressive: the
   * optimizer's headroom, so that the engine does what it promised. */
  double   headroom;
  guint64  device_total;
  guint64  device_free;
  guint64  backend_overhead;   /* a GPU's context + cuBLAS workspace */
  guint64  host_total;
  guint64  host_available;
  guint64  process_rss;        /* this process before loading weights */
  int      n_threads;
  UmProducts products;         /* CPU products policy (its scratch differs) */
  const char *cache_dir;       /* converted weights are looked up here (NULL: the default) */
  /* The experts' time model (um_plan_expert_seconds ()); 0: measured on
   * this machine when a plan needs them (um_plan_calibrate_experts ()). */
  double   host_gflops;        /* the host CPU's expert products */
  double   device_gflops;      /* the device's; on the CPU backend the host's */
  double   fetch_bytes_per_s;  /* a raw expert from its host copy into a device slot */
  double   rows_bytes_per_s;   /* activations between device and host (HOST) */
  /* A GPU's rates above were measured on the device (um_plan_calibrate_gpu ());
   * FALSE: estimates for a GPU of today (or the CPU backend's own). */
  gboolean device_rates_measured;
} UmPlanTarget;

/* The CPU backend on this machine, under @budget (0: none). */
void um_plan_target_cpu (UmPlanTarget *target, guint64 budget, int n_threads);
/* Turns @target into a GPU with @total and @free_bytes of memory; its
 * context and cuBLAS workspace take an estimated overhead until a backend
 * measures them. */
void um_plan_target_set_gpu (UmPlanTarget *target, guint64 total, guint64 free_bytes);
/* RAM in all and available now (/proc/meminfo); 0 where unknown. */
void um_host_memory (guint64 *total, guint64 *available);

typedef enum {
  UM_PLAN_WEIGHTS,        /* resident matrices, norms and LM head */
  UM_PLAN_EMBEDDING,      /* the token table (on the host in extreme modes) */
  UM_PLAN_STREAM_SLOTS,   /* layer slots (aggressive) */
  UM_PLAN_HOST_STORE,     /* streamed layers' host copy */
  UM_PLAN_ACTIVATIONS,    /* the forward's work arena */
  UM_PLAN_LOGITS,         /* logits on the host */
  UM_PLAN_SAMPLER,        /* canvas, candidates */
  UM_PLAN_BACKEND,        /* GPU context + cuBLAS, or the CPU's product scratch */
  UM_PLAN_PROCESS,        /* program, libraries, tokenizer */
  UM_PLAN_KV_CACHE,       /* block KV cache of fast decoding: K and V of every layer */
  UM_PLAN_EXPERT_SLOTS,   /* FETCH: device slots the routed experts are copied into */
  UM_PLAN_EXPERTS,        /* routed experts off the device: their host copy, HOST's work buffers
                           * and products' scratch */
  UM_PLAN_N_COMPONENTS
} UmPlanComponent;

const char *um_plan_component_name (UmPlanComponent c);

typedef struct {
  UmMemMode    mode;
  UmMemOptions options;            /* as resolved: format, slots, row chunk */
  char         weight_format[24];  /* what the matrices are held as, e.g. "Q4_K_M" or "BF16 (stored)" */
  gboolean     converts;           /* converted at load (then cached) */
  gboolean     cached;             /* ... and the cache has it already */
  guint64      converted_file_bytes;
  guint64      weight_bytes;       /* all weights in that format */
  guint        n_layers;
  guint        stream_slots;       /* 0: every layer resident */
  gboolean     embed_on_host;
  guint64      device[UM_PLAN_N_COMPONENTS];
  guint64      host[UM_PLAN_N_COMPONENTS];
  guint64      device_peak;
  guint64      host_peak;          /* while generating; on the CPU includes the device bytes */
  guint64      host_load_peak;     /* while loading and converting */
  guint64      device_capacity;    /* budget or free device memory; 0 unknown/unlimited */
  gboolean     fits;
  int          limit_gen, limit_block, limit_steps;
  /* The zstd host store (0 / FALSE without one): stored / raw bytes of the
   * layers' matrices (frames kept raw count as raw), and whether that was
   * measured on the weights (um_plan_measure_store ()) or is an estimate by
   * type. */
  double       zstd_ratio;
  gboolean     zstd_measured;
  guint64      zstd_sampled_bytes;
  guint64      host_convert;       /* converting holds this besides the process (when not cached) */
  /* MoE models: the routed experts' placement as resolved (RESIDENT for
   * dense models), FETCH's slots, and the time model's seconds per pass of
   * the planned shape for the experts' products in each placement
   * (expert_seconds[RESIDENT] on the device; 0 for dense models). zstd_*
   * above then describe the experts' copy. */
  UmExpertPlacement experts;
  guint        expert_slots;
  guint64      expert_bytes;       /* the routed experts as held */
  guint64      expert_store;       /* of host[UM_PLAN_EXPERTS]: their host copy */
  double       expert_seconds[UM_EXPERTS_N_PLACEMENTS];
  guint64      host_store_build;   /* building the host store holds this besides the store (less its decoding buffer, allocated after) */
} UmPlan;

/* Plans @options for @model (only its metadata is read). */
gboolean um_plan_compute (const UmModel       *model,
                          const UmMemOptions  *options,
                          const UmPlanShape   *shape,
                          const UmPlanTarget  *target,
                          UmPlan              *plan,
                          GError             **error);

/* The raw bytes um_plan_measure_store () compresses at most. */
#define UM_PLAN_ZSTD_SAMPLE_BYTES ((guint64) 8 << 20)

/* Measures the zstd ratio of @plan's host store (if it has one) on @held,
 * the model as it will be streamed (converted), compressing a sample of at
 * most UM_PLAN_ZSTD_SAMPLE_BYTES of its layers as the store would, and
 * predicts the store and the host peaks with it. */
gboolean um_plan_measure_store (UmPlan             *plan,
                                const UmModel      *held,
                                const UmPlanTarget *target,
                                GError            **error);

/* Measures the time model's rates on this machine, once per process and
 * expert type (a few tens of milliseconds): @target's host and device
 * GFLOP/s on @model's expert products with @rows rows, and the copy rate
 * into a slot. Rates already set are kept. */
void     um_plan_calibrate_experts (UmPlanTarget *target, const UmModel *model, int rows);

/* On a GPU target, replaces the time model's estimated GPU rates by ones
 * measured on GPU @gpu_index: the products of @model's first expert shape
 * (zeros: the kernels do not look at values) and copies of an expert's
 * bytes from pinned and pageable host memory. Makes and frees a CUDA
 * backend (a second or so); FALSE, with the estimates kept, when there is
 * no GPU or it fails. Nothing to do (TRUE) for a model without experts. */
gboolean um_plan_calibrate_gpu (UmPlanTarget *target, const UmModel *model, int gpu_index);

/* Every mode with its default knobs, in the order of UmMemMode. */
GArray  *um_plan_table (const UmModel      *model,
                        const UmPlanShape  *shape,
                        const UmPlanTarget *target,
                        GError            **error);

/* The type weights are converted to for @options on @model, or NULL when
 * they stay as stored (converting up never pays). */
const char *um_plan_convert_type (const UmModel *model, const UmMemOptions *options);
/* Whether @options can convert any model (FALSE: every model stays as
 * stored, so um_plan_convert_type () need not look at one). */
gboolean    um_mem_options_may_convert (const UmMemOptions *options);

/* Bytes of this process's resident memory now and at its peak. */
guint64 um_process_rss (void);
guint64 um_process_peak_rss (void);
/* The resident memory now in anonymous and in file-backed pages, bytes. */
void    um_process_rss_split (guint64 *anon, guint64 *file);
/* "3GiB", "512MiB", "1.5G", "2000000000": bytes, or FALSE. */
gboolean um_parse_size (const char *s, guint64 *out);

G_END_DECLS

/* um-cli.h — shared pieces of unmask-cli's subcommands. */
#pragma once

#include <glib.h>
#include <json-glib/json-glib.h>

#include "um-cpu-kernels.h"
#include "um-engine.h"
#include "um-profile.h"
#include "um-stream-report.h"

G_BEGIN_DECLS

typedef int (*UmCliCommand) (int argc, char **argv);

int um_cli_generate (int argc, char **argv);
int um_cli_chat (int argc, char **argv);
int um_cli_serve (int argc, char **argv);
int um_cli_logits (int argc, char **argv);
int um_cli_tokenize (int argc, char **argv);
int um_cli_detokenize (int argc, char **argv);
int um_cli_inspect (int argc, char **argv);
int um_cli_bench (int argc, char **argv);
int um_cli_quantize (int argc, char **argv);
int um_cli_devices (int argc, char **argv);
int um_cli_compare (int argc, char **argv);
int um_cli_score (int argc, char **argv);

/* Starts n processes that keep a core busy each (bench --background);
 * um_cli_busy_stop () kills and reaps them. */
GArray  *um_cli_busy_start (int n, GError **error);
void     um_cli_busy_stop (GArray *pids);

/* Parses "1,2,3" (spaces allowed). */
GArray  *um_cli_parse_ids (const char *text, GError **error);
/* Prints @error as "unmask-cli: message" on stderr; returns 1. */
int      um_cli_fail (GError *error);
/* Prints a JSON node to stdout followed by a newline. */
void     um_cli_print_json (JsonNode *node, gboolean pretty);
JsonNode *um_cli_ids_to_json (const gint32 *ids, guint n);
/* Parses the subcommand's options; on failure prints the error and returns FALSE. */
gboolean um_cli_parse_options (GOptionContext *ctx, int *argc, char ***argv);

G_END_DECLS

G_BEGIN_DECLS

/* Generation options shared by generate, chat and bench. */
typedef struct {
  int      gen_length;
  int      steps;
  int      block_length;
  double   temperature;
  double   cfg_scale;
  char    *remasking;
  gint64   seed;
  gboolean logits_eos_inf;
  gboolean confidence_eos_eot_inf;
  int      threads;
  char    *device;
  gboolean exact;
  gboolean int8;
  /* memory mode and knobs */
  char    *mode;
  char    *budget;
  char    *weight_format;
  int      resident_layers;
  gboolean zstd;
  char    *experts;
  int      expert_slots;
  double   prune_heads;
  double   prune_ffn;
  int      row_chunk;
  char    *cache_dir;
  /* fast decoding */
  char    *kv_cache;
  double   threshold;
  double   factor;
  gboolean eos_early_stop;     /* LLaDA 2 */
  char   **constraints;        /* "POS:WORD" as given */
  /* Dream's timestep and RND1's entropy schedules */
  char    *alg;
  double   eps;
  double   alg_temp;
  double   top_p;
  int      top_k;
  gboolean greedy;
  /* Which UmGenKey parameters the command line gave (UM_GEN_KEY_BIT;
   * remasking: given when not NULL). */
  guint32  given;
  gboolean verbose;
  /* generate and chat: the parameters not given come from the model's
   * recommendation, then the profile's mode, then the built-in defaults
   * (um_gen_resolve ()); um_cli_engine_options () resolves them. */
  gboolean resolve;
  UmGenRecommendation *recommendation;   /* the model's, once resolved */
  UmGenResolved        resolved;
  /* The parsed constraints UmGenParams points into: they live until
   * um_cli_gen_options_clear (), so clear only after generating. */
  GArray  *constraint_list;    /* UmGenConstraint */
} UmCliGenOptions;

void     um_cli_gen_options_init (UmCliGenOptions *o, int gen_length, int steps, int block_length);
void     um_cli_gen_options_add (GOptionContext *ctx, UmCliGenOptions *o);
gboolean um_cli_gen_options_to_params (const UmCliGenOptions *o, UmGenParams *p, GError **error);
void     um_cli_gen_options_clear (UmCliGenOptions *o);
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (UmCliGenOptions, um_cli_gen_options_clear)
/* products: how activations meet quantized weights; -1 keeps the default. */
UmEngine *um_cli_load_engine (const char *model, int threads, const char *device, int products,
                              GError **error);
int       um_cli_products (gboolean exact, gboolean int8);
/* Engine options from the command line: device, threads, products, memory
 * mode and budget, and the plan's shape from the generation parameters. */
/* @model (may be NULL): the model path, for the profile's per-model override.
 * With o->resolve, @p's generation parameters are resolved first (see
 * UmCliGenOptions) and validated, naming where the values came from. */
gboolean  um_cli_engine_options (UmCliGenOptions *o, UmGenParams *p, int prompt_length,
                                 const char *model, UmEngineOptions *opts, GError **error);
/* The resolved parameters and where each came from: on stderr (--verbose)
 * and as the JSON members "defaults", "not_applied" and "defaults_warnings". */
void      um_cli_print_defaults (const UmCliGenOptions *o);
void      um_cli_defaults_json (JsonBuilder *b, const UmCliGenOptions *o);
UmEngine *um_cli_load_engine_with (const char *model, const UmEngineOptions *opts, GError **error);
/* The plan's predictions beside the run's measured peaks, as JSON members
 * "plan" and "measured" of the object being built. */
void      um_cli_memory_json (JsonBuilder *b, UmEngine *engine);
/* The streamed stores' counters now (layers, experts), and the "streaming"
 * member: per forward since @before, over the passes of @st. */
void      um_cli_stream_counters (UmEngine *engine, UmStreamCounters out[2]);
void      um_cli_streaming_json (JsonBuilder *b, UmEngine *engine, const UmForwardStats *st,
                                 const UmStreamCounters before[2]);
JsonNode *um_cli_plan_to_json (const UmPlan *p);
int       um_cli_plan (int argc, char **argv);
int       um_cli_cache (int argc, char **argv);
/* um-cli-optimize.c: the optimizer profile and its backups. */
int       um_cli_optimize (int argc, char **argv);
int       um_cli_restore (int argc, char **argv);
int       um_cli_backups (int argc, char **argv);

G_END_DECLS

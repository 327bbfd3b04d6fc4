/* um-gen-defaults.h — where each generation parameter's value comes from.
 *
 * Models carry their recommended sampling: a Hugging Face folder in
 * generation_config.json (the file transformers' generate () honours), a
 * GGUF file in llama.cpp's general.sampling.* keys plus unmask.generation.*
 * for the diffusion schedule (what unmask-cli quantize writes). This reads
 * them, validates every value, and resolves the parameters by one rule that
 * unmask-cli and the app both use:
 *
 *   the user's choice > the model's recommendation
 *                     > the optimizer profile's mode defaults > built-in
 *
 * (built-in: um_gen_params_init ()). The mode's limits are not applied here:
 * they stay warnings, checked after resolving. */
#pragma once

#include <glib.h>

#include "um-gguf.h"
#include "um-sampler.h"

G_BEGIN_DECLS

/* Which keys a family's schedule takes and its built-in defaults are the
 * schedule table's (um-schedule-table.h: um_gen_key_applies (),
 * um_gen_params_init_for_arch ()). */

/* Lowest precedence first. */
typedef enum {
  UM_GEN_SOURCE_BUILTIN,
  UM_GEN_SOURCE_PROFILE,
  UM_GEN_SOURCE_MODEL,
  UM_GEN_SOURCE_USER,
} UmGenSource;

/* "built-in", "profile", "model", "user". */
const char *um_gen_source_to_string (UmGenSource source);

/* Some of the parameters: those whose bit is in @set (the rest of @params
 * is unused). A plain value: copy it freely. */
typedef struct {
  guint32     set;
  UmGenParams params;
} UmGenLayer;

void     um_gen_layer_init (UmGenLayer *layer);
gboolean um_gen_layer_has (const UmGenLayer *layer, UmGenKey key);
/* Copies @key's value from @from into @layer and marks it set. */
void     um_gen_layer_take (UmGenLayer *layer, UmGenKey key, const UmGenParams *from);
/* The value of @key in @params, as text ("0.7", "128", "random"). */
char    *um_gen_params_format (const UmGenParams *params, UmGenKey key);
gboolean um_gen_params_equal_at (const UmGenParams *a, const UmGenParams *b, UmGenKey key);

typedef struct {
  UmGenParams params;                   /* every key resolved; the rest is @base's */
  UmGenSource source[UM_GEN_N_KEYS];
  UmArch      arch;                     /* the family whose defaults and schedule apply */
} UmGenResolved;

/* The precedence rule for LLaDA (um_gen_resolve_for () with UM_ARCH_LLADA). */
void     um_gen_resolve (const UmGenParams *base,
                         const UmGenLayer  *user,
                         const UmGenLayer  *model,
                         const UmGenLayer  *profile,
                         UmGenResolved     *out);
/* The precedence rule. @base gives everything that is not a UmGenKey
 * (seed, flags, fast decoding, constraints; NULL: um_gen_params_init ());
 * for each key the first layer that sets it wins, in the order @user,
 * @model, @profile (each may be NULL), else family @arch's built-in
 * default (um_gen_params_init_for_arch ()); Dream's and RND1's built-in
 * steps are the resolved gen_length. */
void     um_gen_resolve_for (UmArch             arch,
                             const UmGenParams *base,
                             const UmGenLayer  *user,
                             const UmGenLayer  *model,
                             const UmGenLayer  *profile,
                             UmGenResolved     *out);

/* um_gen_params_validate () of the resolved parameters; a failure names
 * where the values that are not the user's came from, so the user knows
 * which option overrides them. */
gboolean um_gen_resolved_validate (const UmGenResolved *resolved,
                                   const char          *model_origin,
                                   int                  prompt_len,
                                   guint                max_seq_len,
                                   GError             **error);

/* A recommendation the sampler does not follow, kept to be shown. */
typedef struct {
  char *key;      /* as written: "top_p", "general.sampling.top_k" */
  char *value;    /* as text: "0.95", "\"entropy\"" */
  char *reason;   /* why it is not applied (English, for logs and --json) */
} UmGenNote;

typedef struct {
  UmGenLayer layer;        /* the values applied */
  char      *origin;       /* "generation_config.json", "GGUF metadata"; NULL: the model recommends nothing */
  GPtrArray *not_applied;  /* UmGenNote* */
  GPtrArray *warnings;     /* char*: values ignored because they are invalid, an unreadable file */
  UmArch     arch;         /* the model's family (LLaDA when unknown): which keys apply */
} UmGenRecommendation;

/* The recommendation of the model at @path (a Hugging Face folder or a
 * .gguf file), for its family (config.json or general.architecture; a
 * model that cannot be read counts as LLaDA, its load then fails). Never
 * NULL and never fails: a missing file is no recommendation, a bad file
 * or value a warning, each bad key ignored. */
UmGenRecommendation *um_gen_recommendation_load (const char *path);
/* From generation_config.json's text, for LLaDA (the _for variant: for
 * family @arch); @what names it in warnings. Dream's file as
 * save_pretrained writes DreamGenerationConfig's class defaults (alg
 * origin, steps 512, eps 0.001, temperature 0, no top_p, top_k or
 * alg_temp) is not a recommendation: its keys become notes. */
UmGenRecommendation *um_gen_recommendation_from_json (const char *text, gssize len, const char *what);
UmGenRecommendation *um_gen_recommendation_from_json_for (UmArch arch, const char *text, gssize len,
                                                          const char *what);
UmGenRecommendation *um_gen_recommendation_from_gguf (UmGguf *gguf);
UmGenRecommendation *um_gen_recommendation_new_empty (void);
UmGenRecommendation *um_gen_recommendation_copy (const UmGenRecommendation *rec);
void                 um_gen_recommendation_free (UmGenRecommendation *rec);

/* The recommendation as GGUF keys (general.sampling.temp and
 * unmask.generation.*), for writers that carry it into a new file. */
void                 um_gen_recommendation_write_gguf (const UmGenRecommendation *rec, UmGgufWriter *w);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmGenRecommendation, um_gen_recommendation_free)

G_END_DECLS

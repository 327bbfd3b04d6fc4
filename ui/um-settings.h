/* um-settings.h — the app's remembered choices: generation parameters,
 * threads and recently used models, in $XDG_CONFIG_HOME/unmask/settings.json.
 * Writes are atomic (temporary file + rename); a corrupt file is moved aside
 * and reported, never silently lost. Properties can be bound to widgets. */
#pragma once

#include <glib-object.h>

#include "um-gen-defaults.h"
#include "um-model-config.h"
#include "um-plan.h"
#include "um-sampler.h"

G_BEGIN_DECLS

#define UM_TYPE_SETTINGS (um_settings_get_type ())
G_DECLARE_FINAL_TYPE (UmSettings, um_settings, UM, SETTINGS, GObject)

/* Loads @path (NULL: the default location). */
UmSettings  *um_settings_new (const char *path);
/* A problem met while loading (corrupt file moved aside), or NULL. */
const char  *um_settings_get_load_warning (UmSettings *self);

void         um_settings_get_params (UmSettings *self, UmGenParams *params);
int          um_settings_get_threads (UmSettings *self);
/* Quantized weights multiply f32 activations (as unmask-cli's --exact),
 * not 8-bit ones: slower, without the 8-bit rounding. */
gboolean     um_settings_get_exact_products (UmSettings *self);

/* The generation parameters the model may recommend (UmGenKey: length,
 * steps, block length, temperature, guidance, remasking, and Dream's and
 * RND1's alg, eps, alg-temp, top-p, top-k, greedy) are the user's once
 * changed through a property (a control bound to it); the others follow
 * um_gen_resolve_for () of the current family with the model's and the
 * profile's layers given here, and change when these do. Which are the user's is remembered in
 * settings.json ("user-set"). "sources-changed" tells when a source, the
 * layers or the defaults change. */
void         um_settings_set_layers (UmSettings       *self,
                                     const UmGenLayer *model,          /* NULL: no model or no recommendation */
                                     const char       *model_origin,   /* "generation_config.json", … */
                                     const UmGenLayer *profile);       /* NULL: none */
/* The parameters of @family (NULL: the current one) as they would be with
 * these layers (that family's user choices kept), without changing
 * anything: e.g. for a model about to be loaded. */
void         um_settings_resolve_with (UmSettings       *self,
                                       const char       *family,
                                       const UmGenLayer *model,
                                       const UmGenLayer *profile,
                                       UmGenResolved    *out);
UmGenSource  um_settings_get_source (UmSettings *self, UmGenKey key);
/* What @key would be without the user's choice, and where that comes from. */
UmGenSource  um_settings_get_default (UmSettings *self, UmGenKey key, UmGenParams *out);
const UmGenLayer *um_settings_get_model_layer (UmSettings *self);
const char  *um_settings_get_model_origin (UmSettings *self);
/* Forgets the user's choice: the value goes back to the default. */
void         um_settings_reset (UmSettings *self, UmGenKey key);
void         um_settings_reset_all (UmSettings *self);
guint32      um_settings_get_user_set (UmSettings *self);
/* A short translated line with @key's value and where it comes from ("0.7
 * — recommended by the model", "0.9 — your choice; the model recommends
 * 0.7"), or NULL for a built-in default. @mode_name: the memory mode, may be NULL. */
char        *um_settings_describe_source (UmSettings *self, UmGenKey key, const char *mode_name);
/* The value of @key as shown in the app (locale's decimal point). */
char        *um_settings_format_value (const UmGenParams *params, UmGenKey key);

/* Dream's algorithm as the app names it. */
char        *um_settings_format_alg (UmAlg alg);

/* Binds an AdwComboRow's "selected" (Confidence, Random) to "remasking". */
void         um_settings_bind_remasking (UmSettings *self, GObject *combo_row);
/* Binds an AdwComboRow's "selected" (MaskGIT+, Top-k margin, Entropy,
 * Origin) to "alg". */
void         um_settings_bind_alg (UmSettings *self, GObject *combo_row);

/* Each model family keeps its own generation parameters (length, steps,
 * temperature, the schedule's options) and which of them are the user's:
 * the properties hold the family named by "family" (um_arch_info ()->name,
 * "LLaDA" by default). Setting another family keeps these aside and brings
 * back what that family had (its defaults the first time); call
 * um_settings_set_layers () after, for the new model's recommendation. */
const char  *um_settings_get_family (UmSettings *self);
void         um_settings_set_family (UmSettings *self, const char *family);
/* The current family (LLaDA for an unknown name). */
UmArch       um_settings_get_arch (UmSettings *self);
gboolean     um_settings_family_to_arch (const char *family, UmArch *out);
/* Whether family @arch has the option of this property name: the model
 * parameters as um_gen_key_applies () says ("block-length", "alg",
 * "greedy", …), the others by schedule ("fast-decoding", "cache",
 * "factor", "constraints", the EOS flags). The pages show only those. */
gboolean     um_family_has_option (UmArch arch, const char *property);
/* Leaves out of @p what family @arch does not have (its defaults
 * instead), so that settings of another kind neither act nor fail: with no
 * blocks the answer is one block, no guidance, no block cache.
 * um_settings_get_params () gives them so already. */
void         um_gen_params_for_family (UmGenParams *p, UmArch arch);
/* The shape the memory plan is made for, for a generation of @params under @schedule. */
void         um_settings_plan_shape (const UmGenParams *params, UmSchedule schedule, UmPlanShape *shape);

/* Binds the Fast decoding controls both ways (their state is then what
 * um_settings_get_params fills in): the AdwExpanderRow's "enable-expansion",
 * the cache and rule AdwComboRows' "selected" (None / Prefix / Dual and
 * Confidence threshold / Factor) and the τ and f adjustments' "value". */
void         um_settings_bind_fast_decoding (UmSettings *self,
                                             GObject    *expander,
                                             GObject    *cache_row,
                                             GObject    *rule_row,
                                             GObject    *threshold_adjustment,
                                             GObject    *factor_adjustment);

/* Most recent first, at most 10; returns a NULL-terminated borrowed vector. */
const char * const *um_settings_get_recent_models (UmSettings *self);
void         um_settings_add_recent_model (UmSettings *self, const char *path);

/* Writes now (changes are otherwise saved shortly after they happen). */
gboolean     um_settings_save (UmSettings *self, GError **error);

G_END_DECLS

/* um-settings.h — the app's remembered choices: generation parameters,
 * threads and recently used models, in $XDG_CONFIG_HOME/unmask/settings.json.
 * Writes are atomic (temporary file + rename); a corrupt file is moved aside
 * and reported, never silently lost. Properties can be bound to widgets. */
#pragma once

#include <glib-object.h>

#include "um-gen-defaults.h"
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

/* The generation parameters the model may recommend (UmGenKey: length,
 * steps, block length, temperature, guidance, remasking) are the user's
 * once changed through a property (a control bound to it); the others
 * follow um_gen_resolve () of the model's and the profile's layers given
 * here, and change when these do. Which are the user's is remembered in
 * settings.json ("user-set"). "sources-changed" tells when a source, the
 * layers or the defaults change. */
void         um_settings_set_layers (UmSettings       *self,
                                     UmArch            arch,           /* the model's family: its defaults */
                                     const UmGenLayer *model,          /* NULL: no model or no recommendation */
                                     const char       *model_origin,   /* "generation_config.json", … */
                                     const UmGenLayer *profile);       /* NULL: none */
/* The parameters as they would be with these layers (the user's choices
 * kept), without changing anything: e.g. for a model about to be loaded.
 * The options family @arch lacks are off (um_gen_params_drop_foreign ()). */
void         um_settings_resolve_with (UmSettings       *self,
                                       UmArch            arch,
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

/* Binds an AdwComboRow's "selected" (Confidence, Random) to "remasking". */
void         um_settings_bind_remasking (UmSettings *self, GObject *combo_row);

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

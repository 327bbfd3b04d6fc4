/* um-settings.h — the app's remembered choices: generation parameters,
 * threads and recently used models, in $XDG_CONFIG_HOME/unmask/settings.json.
 * Writes are atomic (temporary file + rename); a corrupt file is moved aside
 * and reported, never silently lost. Properties can be bound to widgets. */
#pragma once

#include <glib-object.h>

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

/* um-preferences.h — the Preferences window (Ctrl+comma). */
#pragma once

#include <adwaita.h>

#include "um-settings.h"

G_BEGIN_DECLS

#define UM_TYPE_PREFERENCES (um_preferences_get_type ())
G_DECLARE_FINAL_TYPE (UmPreferences, um_preferences, UM, PREFERENCES, AdwPreferencesWindow)

GtkWidget *um_preferences_new (UmSettings *settings);
/* For tests: whether the block schedule's EOS switches are shown. */
gboolean   um_preferences_get_eos_visible (UmPreferences *self);
/* The serving key shown (for the local network), or NULL. */
const char *um_preferences_get_key (UmPreferences *self);

G_END_DECLS

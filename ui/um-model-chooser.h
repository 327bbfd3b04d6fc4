/* um-model-chooser.h — choose a model: open a folder or a .gguf, or pick one
 * already in the Hugging Face cache or used recently, with its size and
 * whether it can be loaded. Emits "model-chosen" (path) and closes. */
#pragma once

#include <adwaita.h>

#include "um-settings.h"

G_BEGIN_DECLS

#define UM_TYPE_MODEL_CHOOSER (um_model_chooser_get_type ())
G_DECLARE_FINAL_TYPE (UmModelChooser, um_model_chooser, UM, MODEL_CHOOSER, AdwWindow)

GtkWidget *um_model_chooser_new (UmSettings *settings);

/* For tests: whether the search has finished, and the list of models found
 * (AdwActionRows; each row's "path" and "family" data name its model). */
gboolean    um_model_chooser_get_scanned (UmModelChooser *self);
GtkListBox *um_model_chooser_get_list (UmModelChooser *self);

G_END_DECLS

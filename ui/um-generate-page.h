/* um-generate-page.h — prompt, the reference parameters, Generate / Stop and
 * the live diffusion view with a step slider to replay. */
#pragma once

#include <adwaita.h>

#include "um-diffusion-view.h"
#include "um-generator.h"
#include "um-mode-limits.h"
#include "um-settings.h"

G_BEGIN_DECLS

#define UM_TYPE_GENERATE_PAGE (um_generate_page_get_type ())
G_DECLARE_FINAL_TYPE (UmGeneratePage, um_generate_page, UM, GENERATE_PAGE, AdwBin)

/* The engine to run on, local or remote (a reference is kept); NULL: none. */
void             um_generate_page_set_generator (UmGeneratePage *self, UmGenerator *generator);
void             um_generate_page_set_settings (UmGeneratePage *self, UmSettings *settings);

void             um_generate_page_set_prompt (UmGeneratePage *self, const char *text);
/* Starts a run (what Generate and Ctrl+Return do); no-op while running or
 * when the parameters break the schedule's rules. */
void             um_generate_page_generate (UmGeneratePage *self);
/* Cancels the run; the engine stops before the next step or layer. */
void             um_generate_page_stop (UmGeneratePage *self);
/* "running" property. */
gboolean         um_generate_page_get_running (UmGeneratePage *self);

/* The memory mode in use (a pill that opens the Optimizer) and its limits:
 * parameters beyond them show a warning with "Use Recommended"
 * (win.use-recommended) and "Go On Anyway"; NULL hides the pill. */
void             um_generate_page_set_mode_info (UmGeneratePage *self, const UmModeInfo *info);
/* The warning about the limits (also while hidden by "Go On Anyway"), or NULL. */
const char      *um_generate_page_get_limits_warning (UmGeneratePage *self);
/* What the parameter row of @key says about where its value comes from
 * ("0.7 — recommended by the model"), or NULL (a built-in default). */
const char      *um_generate_page_get_source_note (UmGeneratePage *self, UmGenKey key);
gboolean         um_generate_page_get_reset_visible (UmGeneratePage *self, UmGenKey key);
/* The model's recommendations not applied and values ignored, or NULL. */
const char      *um_generate_page_get_model_note (UmGeneratePage *self);
/* What the pill says, or NULL. */
const char      *um_generate_page_get_mode_label (UmGeneratePage *self);

/* Word constraints: a word placed at token @offset of the answer (what
 * "Add Constraint" does, with an empty word); removal by row index. */
void             um_generate_page_add_constraint (UmGeneratePage *self, int offset, const char *word);
void             um_generate_page_remove_constraint (UmGeneratePage *self, guint index);
guint            um_generate_page_get_n_constraints (UmGeneratePage *self);
/* The parameters a run would use now, Fast decoding and constraints
 * included; params->constraints stays valid until the next call. */
void             um_generate_page_get_params (UmGeneratePage *self, UmGenParams *params);

/* For tests and screenshots. */
UmDiffusionView *um_generate_page_get_view (UmGeneratePage *self);
GtkRange        *um_generate_page_get_step_scale (UmGeneratePage *self);
/* Why the parameters cannot run, or NULL ("problem" property). */
const char      *um_generate_page_get_problem (UmGeneratePage *self);
/* The schedule whose options the page shows (the settings' family's). */
UmSchedule       um_generate_page_get_schedule (UmGeneratePage *self);
/* For tests: whether the row of a settings property ("alg", "block-length",
 * "fast-decoding", "constraints", …) is shown. */
gboolean         um_generate_page_get_option_visible (UmGeneratePage *self, const char *property);
/* Result of the last finished run: generated ids (NULL before any), and the
 * error that ended it, if any. */
GArray          *um_generate_page_get_last_ids (UmGeneratePage *self);
const GError    *um_generate_page_get_last_error (UmGeneratePage *self);

G_END_DECLS

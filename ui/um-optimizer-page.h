/* um-optimizer-page.h — the Optimizer page: this computer's hardware, the
 * memory mode and its knobs, the memory plan as bars against the device's
 * capacity, one-click Optimize, Apply, Restore Original, Undo, and the
 * history of backups with a Restore button each.
 *
 * The page works on its window's optimizer profile (um-profile.h) and model:
 * every change is committed (um-backups.h: backup first) against the
 * revision the window showed when it was asked for, and the model is
 * reloaded under the new plan through um_window_reload_model (). If the
 * file changed elsewhere meanwhile, nothing is written: the window shows
 * what it says now and a dialog asks "Keep Theirs" or "Apply Mine Over It".
 * A commit that changes nothing says "Nothing changed".
 */
#pragma once

#include <adwaita.h>

#include "um-engine.h"
#include "um-memory-monitor.h"
#include "um-optimizer.h"
#include "um-profile.h"

G_BEGIN_DECLS

#define UM_TYPE_OPTIMIZER_PAGE (um_optimizer_page_get_type ())
G_DECLARE_FINAL_TYPE (UmOptimizerPage, um_optimizer_page, UM, OPTIMIZER_PAGE, AdwBin)

/* Kept free of the device's memory when the optimizer picks a mode. */
#define UM_OPTIMIZER_HEADROOM 0.10

/* The window tells the page what it works on: the model in use (@path, NULL
 * when none; @engine NULL while not loaded), the active profile (copied), and
 * the monitor whose samples refresh the measured figures. */
void        um_optimizer_page_set_model (UmOptimizerPage *self, const char *path, UmEngine *engine);
void        um_optimizer_page_set_profile (UmOptimizerPage *self, const UmProfile *profile);
void        um_optimizer_page_set_monitor (UmOptimizerPage *self, UmMemoryMonitor *monitor);
/* While the window's model runs on a server (@server: its address; NULL:
 * here), the page says that it describes this computer, not the server. */
void        um_optimizer_page_set_remote (UmOptimizerPage *self, const char *server);
/* What it says then, or NULL (for tests). */
const char *um_optimizer_page_get_remote_note (UmOptimizerPage *self);

/* One click: probes the hardware, plans every mode for @model_path (NULL:
 * the window's model) at the current generation settings, applies the
 * fastest that fits (backup first), then loads the model under it; with a
 * model loaded it asks first, as Apply does. Without a model it only says
 * "Open a model first". Runs partly in a thread: the "busy" property is
 * TRUE until the plan is made. */
void        um_optimizer_page_optimize (UmOptimizerPage *self, const char *model_path);
/* Saves the mode and knobs shown (backup first); asks before reloading. */
void        um_optimizer_page_apply (UmOptimizerPage *self);
/* Restores "original", "latest" or a backup's id (backup first); with
 * @confirm asks before a reload. The damaged newer backups "latest" passes
 * over are named in the question and the status line. FALSE with @error
 * when it cannot. */
gboolean    um_optimizer_page_restore (UmOptimizerPage *self, const char *which, gboolean confirm, GError **error);
/* Back to the settings from before the last change. */
void        um_optimizer_page_undo (UmOptimizerPage *self);
/* Writes @mode with its defaults (backup first) and reloads: --extreme. */
gboolean    um_optimizer_page_apply_mode (UmOptimizerPage *self, UmMemMode mode, GError **error);

/* For tests and screenshots. */
gboolean    um_optimizer_page_get_busy (UmOptimizerPage *self);
/* Sets the budget entry (0: empty) and re-plans. */
void        um_optimizer_page_set_budget (UmOptimizerPage *self, guint64 budget);
/* Shows @mode with its default knobs and re-plans. */
void        um_optimizer_page_select_mode (UmOptimizerPage *self, UmMemMode mode);
/* The plan shown (NULL before the model's metadata is read). */
const UmPlan *um_optimizer_page_get_plan (UmOptimizerPage *self);
/* Every mode's plan at the budget, as the optimizer sees it (or NULL). */
const UmOptimizeResult *um_optimizer_page_get_result (UmOptimizerPage *self);
/* The status line: what Optimize did or would do, "Open a model first", … */
const char *um_optimizer_page_get_status (UmOptimizerPage *self);
/* The Memory Plan group's line about the model: family, parameters and, for
 * a mixture of experts, those one token uses. */
const char *um_optimizer_page_get_model_summary (UmOptimizerPage *self);
/* A mixture of experts that does not fit with its routed experts on the
 * device: the offer to keep them in RAM ("Computed by the processor: needs
 * X of Y"), or NULL when none is shown; Use takes it (the knobs then say
 * it, and Apply saves it). */
const char *um_optimizer_page_get_offer (UmOptimizerPage *self);
void        um_optimizer_page_use_offer (UmOptimizerPage *self);
/* The history list's rows, newest first. */
GtkListBox *um_optimizer_page_get_history_list (UmOptimizerPage *self);
/* Predicted against measured, once a model is loaded (or NULL). */
const char *um_optimizer_page_get_measured (UmOptimizerPage *self);

G_END_DECLS

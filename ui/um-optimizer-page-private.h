/* um-optimizer-page-private.h — what the Optimizer page's files share (not
 * for other files): the instance struct and the helpers they call across.
 *
 * um-optimizer-page.c holds the controls, the hardware, the plan, the
 * history and the GObject; um-optimizer-changes.c holds the writes (Apply,
 * Optimize, Restore, Undo: building a change, committing it against the
 * window's revision, the conflict dialog, finishing it).
 */
#pragma once

#include "um-optimizer-page.h"
#include "um-plan-bars.h"
#include "um-window.h"

G_BEGIN_DECLS

struct _UmOptimizerPage {
  AdwBin            parent_instance;

  /* template */
  AdwActionRow     *gpu_row, *ram_row, *cpu_row;
  AdwComboRow      *mode_row, *level_row, *format_row, *experts_row;
  GtkStringList    *format_list;
  AdwExpanderRow   *knobs_row;
  AdwActionRow     *layers_row, *zstd_row;
  GtkSpinButton    *layers_spin, *heads_spin, *ffn_spin, *chunk_spin;
  GtkSwitch        *zstd_switch;
  AdwEntryRow      *budget_row;
  UmPlanBars       *plan_bars;
  GtkLabel         *status_label;
  GtkLabel         *remote_label;     /* the model runs on a server */
  GtkWidget        *loaded_list;
  AdwActionRow     *loaded_row;
  AdwPreferencesGroup *plan_group;
  GtkWidget        *offer_list;      /* "Keep the routed experts in RAM": shown when that fits and this does not */
  AdwActionRow     *offer_row;
  GtkButton        *offer_button;
  UmExpertPlacement offer;           /* what Use selects */
  GtkButton        *optimize_button, *apply_button, *restore_button, *undo_button;
  GtkListBox       *history_list;

  UmEngine         *engine;          /* not owned: the window's */
  char             *model_path;      /* the window's model */
  UmMemoryMonitor  *monitor;
  UmProfile        *profile;         /* the window's, copied */

  char             *prepared_path;   /* whose metadata ... */
  UmModel          *model;           /* ... this is */
  UmHardware       *hw;
  UmOptimizeResult *result;          /* every mode at the budget */
  UmPlan            plan;            /* the one shown */
  gboolean          have_plan;

  GCancellable     *cancellable;     /* the running prepare */
  char             *undo_id;         /* the backup made by the last change */
  char             *status;
  char             *measured;
  gboolean          filling;         /* controls being set from the profile */
  gboolean          dirty;           /* the controls differ from the profile */
  gboolean          committing;      /* the page shows its own commit */
  gboolean          stale;           /* the controls were edited on settings changed since */
  gboolean          busy;            /* an Optimize runs */
  gboolean          has_original, has_backup;
};

/* um-optimizer-page.c */

/* The window the page is in, or NULL. */
UmWindow   *um_optimizer_page_get_window (UmOptimizerPage *self);
/* The window's configuration folder (or $UNMASK_CONFIG_DIR outside one). */
const char *um_optimizer_page_config_dir (UmOptimizerPage *self);
/* The status line (and the "status" property); NULL hides it. */
void        um_optimizer_page_set_status (UmOptimizerPage *self, const char *text);
/* "@what: @error's message" in the status line. */
void        um_optimizer_page_set_status_error (UmOptimizerPage *self, const char *what, const GError *error);
/* The generation the plan is for: the window's settings. */
void        um_optimizer_page_current_shape (UmOptimizerPage *self, UmPlanShape *shape);
/* The budget typed in; empty is 0 (the whole device). FALSE if unreadable. */
gboolean    um_optimizer_page_read_budget (UmOptimizerPage *self, guint64 *out);
/* The mode and knobs the controls show. */
void        um_optimizer_page_read_options (UmOptimizerPage *self, UmMemOptions *o);
/* Puts @mem and @budget into @p: into the model's override if it has one
 * (that is what its loads use), else as the profile's mode. */
void        um_optimizer_page_profile_put_options (UmOptimizerPage    *self,
                                                   UmProfile          *p,
                                                   const UmMemOptions *mem,
                                                   guint64             budget);
/* The controls back to the profile in use. */
void        um_optimizer_page_show_profile_controls (UmOptimizerPage *self);

/* um-optimizer-changes.c */

/* FALSE with @error while a generation runs: a change reloads the model. */
gboolean    um_optimizer_page_check_idle (UmOptimizerPage *self, GError **error);
/* Optimize, once the model's metadata is read: plans every mode for @path
 * at the budget shown and commits the fastest that fits, asking first when
 * a loaded model would be reloaded. */
void        um_optimizer_page_do_optimize (UmOptimizerPage *self, const char *path);

G_END_DECLS

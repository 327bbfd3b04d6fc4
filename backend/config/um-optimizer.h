/* um-optimizer.h — the one-click optimizer: probe the hardware, plan every
 * mode for a model at the current generation settings, pick the first mode
 * in the order standard, standard-8bit, extreme-mild, extreme-moderate,
 * extreme-aggressive (fastest on a GPU and most faithful first) that fits
 * with headroom, back up, write the profile. */
#pragma once

#include <glib.h>

#include "um-backend-cuda.h"
#include "um-backups.h"
#include "um-convert.h"
#include "um-plan.h"
#include "um-profile.h"

G_BEGIN_DECLS

typedef struct {
  GArray  *gpus;            /* UmGpuDevice (total and free memory) */
  char    *why_no_gpu;      /* or NULL */
  guint64  ram_total;
  guint64  ram_available;
  int      cores;
  char    *cpu_name;
} UmHardware;

UmHardware *um_hardware_probe (void);
void        um_hardware_free (UmHardware *hw);

typedef struct {
  gboolean  cuda;           /* planned for GPU 0; else for the CPU and RAM */
  guint64   capacity;       /* device bytes planned against (budget, or free memory) */
  double    headroom;       /* kept free, e.g. 0.10 */
  GArray   *table;          /* UmPlan, one per mode in UmMemMode order */
  int       chosen;         /* index into table, -1 if nothing fits */
  char     *reason;         /* "extreme-moderate: the fastest mode that fits 7.2 of 8.0 GiB" */
  guint64   budget;         /* the budget asked for (0: none), written to the profile */
  UmPlanShape shape;        /* what was planned for */
  UmPlanTarget target;      /* where: plan other knobs against it to compare with the table */
  char    *model_id;        /* um_model_identity () of the model planned for, or NULL */
} UmOptimizeResult;

void              um_optimize_result_free (UmOptimizeResult *r);
/* Whether mode @i of the table fits with the headroom kept free. */
gboolean          um_optimize_result_fits (const UmOptimizeResult *r, int i);
/* Takes @mode instead of the pick (a user's choice): sets chosen and a
 * reason saying whether it fits. */
void              um_optimize_result_choose (UmOptimizeResult *r, UmMemMode mode);
/* The profile um_optimizer_apply () writes: @current with the chosen mode
 * (its knobs the mode's own), device and budget, written_by optimize, and
 * without an override for the model planned for (which would otherwise
 * keep its own mode). NULL when nothing was chosen. */
UmProfile        *um_optimizer_profile (const UmOptimizeResult *r, const UmProfile *current);

/* Plans every mode for @model (metadata only) on @hw: the first GPU if there
 * is one (@budget, if not 0, stands for its memory), else the CPU backend
 * under @budget or, with none, the available RAM. */
UmOptimizeResult *um_optimizer_plan (const UmModel      *model,
                                     const UmHardware   *hw,
                                     const UmPlanShape  *shape,
                                     guint64             budget,
                                     double              headroom,
                                     GError            **error);

/* Commits um_optimizer_profile () of the profile as it is now, read and
 * written under the backups' lock ("before optimize → MODE";
 * um_backups_update ()): @out says what was written (backup id, or
 * unchanged when the profile already said this) and holds the profile.
 * Fails (UM_ERROR_OUT_OF_MEMORY) when nothing was chosen: nothing fits. */
gboolean          um_optimizer_apply (const UmOptimizeResult *r,
                                      const char             *config_dir,
                                      UmCommit               *out,
                                      GError                **error);

/* Whether loading with @p would use the converted file @e: its source is
 * still there and the mode @p gives that model (its override, or the
 * profile's own mode) converts to @e's type and pruning. A partial or
 * unreadable file is used by nothing; a source that no longer loads gives
 * TRUE (kept: nothing here can tell). */
gboolean          um_profile_uses_converted (const UmProfile *p, const UmConvertedEntry *e);
/* The files of the converted-weight cache (@cache_dir, NULL: the default
 * folders) that loading with @p would not use and no conversion is
 * writing (UmConvertedEntry*): what restore can remove. *@kept (if given)
 * counts the others. NULL when the cache cannot be listed. */
GPtrArray        *um_profile_unused_converted (const UmProfile *p, const char *cache_dir, guint *kept,
                                               GError **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmHardware, um_hardware_free)
G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmOptimizeResult, um_optimize_result_free)

G_END_DECLS

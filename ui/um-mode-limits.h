/* um-mode-limits.h — the memory mode in use and the parameter limits it
 * recommends, as the Generate and Chat pages show them: a small pill with
 * the mode's name, and a warning with "Use Recommended" when the parameters
 * go beyond the limits (the run may still go on). */
#pragma once

#include <glib.h>

#include "um-plan.h"
#include "um-profile.h"
#include "um-sampler.h"

G_BEGIN_DECLS

typedef struct {
  UmMemMode mode;
  /* 0: no limit / no default. */
  int       limit_gen, limit_block, limit_steps;
  int       default_gen, default_block, default_steps;
} UmModeInfo;

/* The mode @profile uses for the model @model_id (its override if there is
 * one; NULL: none) and the limits and defaults that go with it. */
void  um_mode_info_from_profile (UmModeInfo *info, const UmProfile *profile, const char *model_id);
/* What the pill says, e.g. "extreme-moderate". */
const char *um_mode_info_name (const UmModeInfo *info);
/* Why @params go beyond the mode's limits (translated), or NULL. */
char *um_mode_info_check (const UmModeInfo *info, const UmGenParams *params);
/* @params brought within the limits (the mode's defaults where it has them),
 * still a valid schedule: the length a multiple of the block length, the
 * steps a multiple of the blocks. */
void  um_mode_info_recommend (const UmModeInfo *info, UmGenParams *params);

/* A page's limits warning and the one "Go On Anyway" hid. */
typedef struct {
  char *warning;
  char *dismissed;
} UmLimitsWarning;

/* Takes @warning (may be NULL); TRUE when it should be shown: there is one
 * and it is not the one dismissed. No warning forgets the dismissal. */
gboolean um_limits_warning_set (UmLimitsWarning *w, char *warning);
void     um_limits_warning_dismiss (UmLimitsWarning *w);
void     um_limits_warning_clear (UmLimitsWarning *w);

G_END_DECLS

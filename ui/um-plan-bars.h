/* um-plan-bars.h — a memory plan drawn as one bar per component against the
 * device's capacity, with the total and "Fits" / "Does not fit". The bars
 * are GtkLevelBars coloured by the style sheet (.plan-bars). */
#pragma once

#include <adwaita.h>

#include "um-plan.h"

G_BEGIN_DECLS

#define UM_TYPE_PLAN_BARS (um_plan_bars_get_type ())
G_DECLARE_FINAL_TYPE (UmPlanBars, um_plan_bars, UM, PLAN_BARS, AdwBin)

GtkWidget  *um_plan_bars_new (void);
/* Shows @plan (copied; NULL: nothing planned yet). */
void        um_plan_bars_set_plan (UmPlanBars *self, const UmPlan *plan);
/* The bars are for @cuda: "Graphics memory", else the CPU's budgeted RAM. */
void        um_plan_bars_set_cuda (UmPlanBars *self, gboolean cuda);
/* A line under the bars, e.g. predicted against measured (NULL: none). */
void        um_plan_bars_set_note (UmPlanBars *self, const char *note);

gboolean    um_plan_bars_get_fits (UmPlanBars *self);
/* The heading, e.g. "Memory budget: needs 907.2 KiB of 906.0 KiB". */
const char *um_plan_bars_get_title (UmPlanBars *self);
/* "Fits" / "Does not fit" as shown, or NULL with no plan. */
const char *um_plan_bars_get_verdict (UmPlanBars *self);

/* The line about a mixture of experts' routed experts under the bars, e.g.
 * "Routed experts (3.8 GiB) in RAM, computed by the processor", or NULL. */
const char *um_plan_bars_get_experts_text (UmPlanBars *self);
/* That line for @p (NULL for a dense model); free with g_free. */
char       *um_plan_experts_text (const UmPlan *p, gboolean cuda);

/* A translated name for a plan component, e.g. "Activations". */
const char *um_plan_component_label (UmPlanComponent c);
/* Bytes as the optimizer shows them: binary units ("3.0 GiB"). */
char       *um_format_bytes (guint64 bytes);

G_END_DECLS

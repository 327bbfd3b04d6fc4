/* um-sampler.h — a generation: the parameters checked against the
 * family's schedule, then that schedule's run, from the schedule table
 * (um-schedule-table.h: LLaDA's blocks, Dream's timesteps, RND1's entropy
 * order, LLaDA 2.x's block-causal blocks, each in its own file). */
#pragma once

#include <gio/gio.h>

#include "um-forward.h"
#include "um-gen-params.h"
#include "um-schedule-table.h"

G_BEGIN_DECLS

/* Runs the schedule of the model's family (um_arch_info (cfg.arch)->
 * schedule) after um_gen_params_validate_for (); families that shift
 * their logits read position i from row i − 1.
 * @out_ids receives the gen_length generated ids (gint32).
 * @step_cb (may be NULL) is called after every step from this thread.
 * Cancellation is checked between steps and between layers. */
gboolean um_sampler_generate (UmForward         *fw,
                              const gint32      *prompt,
                              int                prompt_len,
                              const UmGenParams *params,
                              UmStepFunc         step_cb,
                              gpointer           user_data,
                              GCancellable      *cancellable,
                              GArray            *out_ids,
                              GError           **error);

/* um_sampler_generate () that also says how many steps ran (@out_n_steps,
 * may be NULL): params->steps for the exact schedule, fewer or more with
 * a threshold or factor (the steps until every block is filled). */
gboolean um_sampler_generate_full (UmForward         *fw,
                                   const gint32      *prompt,
                                   int                prompt_len,
                                   const UmGenParams *params,
                                   UmStepFunc         step_cb,
                                   gpointer           user_data,
                                   GCancellable      *cancellable,
                                   GArray            *out_ids,
                                   int               *out_n_steps,
                                   GError           **error);

G_END_DECLS

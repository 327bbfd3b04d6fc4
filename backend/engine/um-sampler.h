/* um-sampler.h — the reference LLaDA schedule (see docs: llada.md):
 * blocks, per-block step split, Gumbel-max temperature in float64,
 * low_confidence / random remasking, classifier-free guidance, the EOS/EOT
 * flags and the lower-position-first tie rule. */
#pragma once

#include <gio/gio.h>

#include "um-forward.h"
#include "um-gen-params.h"

G_BEGIN_DECLS

/* The parameters of LLaDA's block schedule (um_gen_params_validate_for ()
 * with UM_ARCH_LLADA). */
gboolean    um_gen_params_validate (const UmGenParams *p,
                                    int                prompt_len,
                                    guint              max_seq_len,
                                    GError           **error);
/* The parameters of family @arch's schedule (um_arch_info ()->schedule):
 * its own options in range, and the options it does not have off (the
 * block schedule's block_length and the timestep schedule's alg and eps
 * are simply unused elsewhere, as they have defaults). */
gboolean    um_gen_params_validate_for (const UmGenParams *p,
                                        UmArch             arch,
                                        int                prompt_len,
                                        guint              max_seq_len,
                                        GError           **error);

/* Runs the schedule of the model's family (um_arch_info (cfg.arch)->
 * schedule): LLaDA's blocks, Dream's timesteps or RND1's entropy order;
 * families that shift their logits read position i from row i − 1.
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

/* Host bytes a generation over a canvas of @canvas_len positions in @n_seq
 * sequences (2 with guidance) allocates besides the forward's: the canvas,
 * the rows asked for, the per-position candidate and commit arrays, and the
 * top-k selection's scratch. The memory plan predicts with it. */
guint64  um_sampler_host_bytes (int n_seq, int canvas_len);
/* um_sampler_host_bytes () for the schedule of @cfg's family: the timestep
 * and entropy schedules also hold every answer position's logits row. */
guint64  um_sampler_host_bytes_for (const UmModelConfig *cfg, int n_seq, int canvas_len);

G_END_DECLS

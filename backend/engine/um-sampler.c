/* um-sampler.c — the sampler dispatches: it checks the parameters and the
 * prompt, then runs the schedule of the model's family from the schedule
 * table (see um-sampler.h). */
#include "um-sampler.h"

#include "um-error.h"
#include "um-schedule.h"

gboolean
um_sampler_generate (UmForward         *fw,
                     const gint32      *prompt,
                     int                prompt_len,
                     const UmGenParams *params,
                     UmStepFunc         step_cb,
                     gpointer           user_data,
                     GCancellable      *cancellable,
                     GArray            *out_ids,
                     GError           **error)
{
  return um_sampler_generate_full (fw, prompt, prompt_len, params, step_cb, user_data, cancellable, out_ids,
                                   NULL, error);
}

gboolean
um_sampler_generate_full (UmForward         *fw,
                          const gint32      *prompt,
                          int                prompt_len,
                          const UmGenParams *p,
                          UmStepFunc         step_cb,
                          gpointer           user_data,
                          GCancellable      *cancellable,
                          GArray            *out_ids,
                          int               *out_n_steps,
                          GError           **error)
{
  const UmModelConfig *c = &um_forward_get_model (fw)->cfg;
  const int V = c->vocab_size;
  const UmScheduleRun run = { fw, prompt, prompt_len, p, step_cb, user_data, cancellable, out_ids, out_n_steps };

  if (out_n_steps != NULL)
    *out_n_steps = 0;
  if (!um_gen_params_validate_for (p, c->arch, prompt_len, c->max_seq_len, error))
    return FALSE;
  for (int i = 0; i < prompt_len; i++)
    if (prompt[i] < 0 || prompt[i] >= V)
      {
        g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                     "prompt token %d at position %d is outside the vocabulary (%d)", prompt[i], i, V);
        return FALSE;
      }
  return um_schedule_for_arch (c->arch)->run (&run, error);
}

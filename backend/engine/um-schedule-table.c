/* um-schedule-table.c — the schedules' rows (see um-schedule-table.h).
 * What a column means is said where the struct declares it; a row's
 * functions live in the schedule's own file (um-schedule.h declares them). */
#include "config.h"

#include "um-schedule-table.h"

#include <glib/gi18n-lib.h>

#include "um-schedule.h"

/* Recommendations LLaDA's sampler does not follow. */
static const UmGenNoteReason block_notes[] = {
  { "top_p", "LLaDA's sampler has no nucleus (top-p) filter" },
  { "top_k", "LLaDA's sampler has no top-k filter" },
  { "min_p", "LLaDA's sampler has no min-p filter" },
  { "max_length", "it counts the prompt too; Unmask reads max_new_tokens or gen_length" },
  { "alg", "Dream's unmasking order; Unmask runs LLaDA's schedule (remasking)" },
  { "alg_temp", "Dream's unmasking order; Unmask runs LLaDA's schedule (remasking)" },
  { "eps", "Dream's time steps; Unmask runs LLaDA's block schedule" },
  { "greedy", "RND1's switch; LLaDA's schedule is greedy at temperature 0" },
  { "threshold", "fast decoding is the user's to turn on" },
  { "repetition_penalty", "LLaDA's sampler has no repetition penalty" },
  { "num_beams", "there is no beam search in diffusion sampling" },
  { NULL, NULL }
};

/* ... and the other schedules (a key a family does have is applied before
 * it is looked up here). */
static const UmGenNoteReason other_notes[] = {
  { "min_p", "no min-p filter in this family's sampler" },
  { "max_length", "it counts the prompt too; Unmask reads max_new_tokens or gen_length" },
  { "block_length", "LLaDA's block schedule; this family has no blocks" },
  { "cfg_scale", "LLaDA's classifier-free guidance; not in this family's sampler" },
  { "remasking", "LLaDA's remasking; not in this family's sampler" },
  { "alg", "Dream's confidence rule; RND1 orders by entropy" },
  { "alg_temp", "Dream's confidence rule; RND1 orders by entropy" },
  { "eps", "Dream's time steps; RND1's schedule has none" },
  { "greedy", "RND1's switch; Dream is greedy at temperature 0" },
  { "do_sample", "Dream's sampler ignores it: the temperature decides" },
  { "eb_gamma", "RND1's entropy-bounded variant is not implemented" },
  { "threshold", "fast decoding is the user's to turn on" },
  { "repetition_penalty", "no repetition penalty in diffusion sampling" },
  { "num_beams", "there is no beam search in diffusion sampling" },
  { NULL, NULL }
};

/* DreamGenerationConfig's class defaults: alg origin, 512 steps, eps 0.001,
 * temperature 0, no top_p, top_k or alg_temp. What save_pretrained writes
 * and real Dream checkpoints ship; no Dream document recommends it. */
static const UmGenClassDefaults dream_class_defaults = {
  .keys = UM_GEN_KEY_BIT (UM_GEN_KEY_ALG) | UM_GEN_KEY_BIT (UM_GEN_KEY_STEPS) | UM_GEN_KEY_BIT (UM_GEN_KEY_EPS)
          | UM_GEN_KEY_BIT (UM_GEN_KEY_TEMPERATURE),
  .unset = UM_GEN_KEY_BIT (UM_GEN_KEY_TOP_P) | UM_GEN_KEY_BIT (UM_GEN_KEY_TOP_K)
           | UM_GEN_KEY_BIT (UM_GEN_KEY_ALG_TEMP),
  .values = { .alg = UM_ALG_ORIGIN, .steps = 512, .eps = 1e-3, .temperature = 0.0 },
};

#define KEY(k) UM_GEN_KEY_BIT (UM_GEN_KEY_##k)
#define OPT(o) UM_GEN_OPT_BIT (UM_GEN_OPT_##o)

static const UmScheduleInfo schedules[] = {
  [UM_SCHEDULE_BLOCK] = {
    .id = UM_SCHEDULE_BLOCK,
    .title = "block schedule",
    .description = N_("The reference schedule: the answer is split into blocks, and each block gets an equal "
                      "share of the steps."),
    .temperature_hint = N_("0 always picks the most likely token"),
    .keys = KEY (GEN_LENGTH) | KEY (STEPS) | KEY (BLOCK_LENGTH) | KEY (TEMPERATURE) | KEY (CFG_SCALE)
            | KEY (REMASKING),
    .options = OPT (LOGITS_EOS_INF) | OPT (CONFIDENCE_EOS_EOT_INF) | OPT (THRESHOLD) | OPT (CACHE) | OPT (FACTOR)
               | OPT (CONSTRAINTS),
    .answer_blocks = TRUE,
    .do_sample = UM_DO_SAMPLE_TEMPERATURE,
    .not_applied = block_notes,
    .not_applied_other = "not a setting of LLaDA's sampler",
    .defaults = um_schedule_block_defaults,
    .validate = um_schedule_block_validate,
    .run = um_schedule_block_run,
  },
  [UM_SCHEDULE_TIMESTEP] = {
    .id = UM_SCHEDULE_TIMESTEP,
    .title = "timestep schedule",
    .description = N_("Dream’s schedule: each step commits the share of the masks that the noise schedule gives, "
                      "the positions chosen by the algorithm."),
    .temperature_hint = N_("0 always picks the most likely token"),
    .keys = KEY (GEN_LENGTH) | KEY (STEPS) | KEY (TEMPERATURE) | KEY (TOP_P) | KEY (TOP_K) | KEY (ALG) | KEY (EPS)
            | KEY (ALG_TEMP),
    .options = OPT (THRESHOLD) | OPT (CONSTRAINTS),
    .steps_follow_length = TRUE,
    .do_sample = UM_DO_SAMPLE_NOTED,
    .class_defaults = &dream_class_defaults,
    .not_applied = other_notes,
    .not_applied_other = "not a setting of this family's sampler",
    .defaults = um_schedule_timestep_defaults,
    .validate = um_schedule_timestep_validate,
    .run = um_schedule_timestep_run,
  },
  [UM_SCHEDULE_ENTROPY] = {
    .id = UM_SCHEDULE_ENTROPY,
    .title = "entropy schedule",
    .description = N_("RND1’s schedule: each step keeps the most uncertain positions masked and commits the "
                      "rest."),
    .temperature_hint = N_("Scales the uncertainty that decides which positions wait; without Greedy Tokens it "
                           "also samples the tokens"),
    .keys = KEY (GEN_LENGTH) | KEY (STEPS) | KEY (TEMPERATURE) | KEY (TOP_P) | KEY (TOP_K) | KEY (GREEDY),
    .options = OPT (CONSTRAINTS),
    .steps_follow_length = TRUE,
    .reserves_last = TRUE,
    .do_sample = UM_DO_SAMPLE_GREEDY,
    .not_applied = other_notes,
    .not_applied_other = "not a setting of this family's sampler",
    .defaults = um_schedule_entropy_defaults,
    .validate = um_schedule_entropy_validate,
    .run = um_schedule_entropy_run,
  },
  [UM_SCHEDULE_BLOCK_CAUSAL] = {
    .id = UM_SCHEDULE_BLOCK_CAUSAL,
    .title = "block-causal schedule",
    .description = N_("LLaDA 2’s schedule: blocks are decoded in turn, each seeing only the blocks before it; a "
                      "step commits every position above the threshold, or else its share of the most "
                      "confident."),
    .temperature_hint = N_("0 always picks the most likely token"),
    .keys = KEY (GEN_LENGTH) | KEY (STEPS) | KEY (BLOCK_LENGTH) | KEY (TEMPERATURE),
    .options = OPT (THRESHOLD) | OPT (CACHE) | OPT (CONSTRAINTS) | OPT (EOS_EARLY_STOP),
    .canvas_blocks = TRUE,
    .fast_always_on = TRUE,
    .do_sample = UM_DO_SAMPLE_IGNORED,
    .not_applied = other_notes,
    .not_applied_other = "not a setting of this family's sampler",
    .defaults = um_schedule_block_causal_defaults,
    .validate = um_schedule_block_causal_validate,
    /* The block schedule's arrays bound its own (a block's at a time). */
    .run = um_schedule_block_causal_run,
  },
};

#undef KEY
#undef OPT

const UmScheduleInfo *
um_schedule_info (UmSchedule schedule)
{
  /* An unknown value is LLaDA's, as the switches this table replaced read it. */
  return (guint) schedule < G_N_ELEMENTS (schedules) ? &schedules[schedule] : &schedules[UM_SCHEDULE_BLOCK];
}

const UmScheduleInfo *
um_schedule_for_arch (UmArch arch)
{
  return um_schedule_info (um_arch_info (arch)->schedule);
}

gboolean
um_gen_key_applies (UmGenKey key, UmArch arch)
{
  return (guint) key < UM_GEN_N_KEYS && (um_schedule_for_arch (arch)->keys & UM_GEN_KEY_BIT (key)) != 0;
}

gboolean
um_gen_option_applies (UmGenOption option, UmArch arch)
{
  return (guint) option < UM_GEN_N_OPTS && (um_schedule_for_arch (arch)->options & UM_GEN_OPT_BIT (option)) != 0;
}

void
um_gen_params_init_for_arch (UmGenParams *p, UmArch arch)
{
  um_gen_params_init (p);
  um_schedule_for_arch (arch)->defaults (p);
}

gboolean
um_gen_params_validate_for (const UmGenParams *p,
                            UmArch             arch,
                            int                prompt_len,
                            guint              max_seq_len,
                            GError           **error)
{
  if (!um_gen_params_check_common (p, prompt_len, max_seq_len, error))
    return FALSE;
  return um_schedule_for_arch (arch)->validate (p, um_arch_info (arch)->name, prompt_len, max_seq_len, error);
}

gboolean
um_gen_params_validate (const UmGenParams *p,
                        int                prompt_len,
                        guint              max_seq_len,
                        GError           **error)
{
  return um_gen_params_validate_for (p, UM_ARCH_LLADA, prompt_len, max_seq_len, error);
}

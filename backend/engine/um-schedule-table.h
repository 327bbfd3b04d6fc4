/* um-schedule-table.h — the table of unmasking schedules: one row per
 * schedule (LLaDA's blocks, Dream's timesteps, RND1's entropy order,
 * LLaDA 2.x's block-causal blocks), a column per fact. A family names its
 * schedule (um_arch_info ()->schedule); the engine, the app, unmask-cli
 * and the server read the row and never test a schedule by name.
 *
 * Every schedule runs in its own file (um-schedule-block.c,
 * um-schedule-timestep.c, um-schedule-entropy.c,
 * um-schedule-block-causal.c) and emits the same step event (UmStepEvent)
 * after each step; the sampler (um-sampler.h) validates and dispatches. */
#pragma once

#include <gio/gio.h>

#include "um-forward.h"
#include "um-gen-params.h"
#include "um-model-config.h"

G_BEGIN_DECLS

/* One generation as a schedule runs it (um-schedule.h has its fields:
 * the forward, the prompt, the validated parameters, where the step
 * events go, the cancellable, and where the ids and the step count go). */
typedef struct _UmScheduleRun UmScheduleRun;
typedef gboolean (*UmScheduleRunFunc) (const UmScheduleRun *run, GError **error);

/* What a schedule does with a recommendation's do_sample. */
typedef enum {
  UM_DO_SAMPLE_IGNORED,      /* nothing: the temperature decides */
  UM_DO_SAMPLE_NOTED,        /* nothing, and the key is reported as not applied */
  UM_DO_SAMPLE_TEMPERATURE,  /* transformers' rule: false is temperature 0, true without one is 1.0 */
  UM_DO_SAMPLE_GREEDY,       /* read as the greedy switch (greedy = not do_sample) */
} UmDoSample;

/* A recommendation's key the schedule does not follow, and why. */
typedef struct {
  const char *key;
  const char *reason;
} UmGenNoteReason;

/* A reference config class's defaults as transformers' save_pretrained
 * writes them when nobody chose anything: a file that holds exactly these
 * is no recommendation. */
typedef struct {
  guint32     keys;     /* UmGenKey bits that must hold values' value */
  guint32     unset;    /* UmGenKey bits that must be absent or null */
  UmGenParams values;
} UmGenClassDefaults;

typedef struct {
  UmSchedule  id;
  const char *title;             /* "block schedule": in help and errors */
  const char *description;       /* N_(): what a step does, for the app */
  const char *temperature_hint;  /* N_(): what the temperature does here, for the app */
  guint32     keys;              /* UmGenKey bits of the parameters it takes */
  guint32     options;           /* UmGenOption bits of the switches it takes */
  /* The answer is whole blocks of block_length, each with an equal share of
   * the steps, and a pass reads the current block's rows (what the plan
   * sizes, with guidance and the block KV cache). Otherwise a pass reads
   * every mask's row and the plan takes the answer as one block. */
  gboolean    answer_blocks;
  /* Blocks of block_length tile the canvas from position 0, the prompt's
   * end inside the first one decoded. */
  gboolean    canvas_blocks;
  /* The built-in steps are the answer's length (one token per step). */
  gboolean    steps_follow_length;
  /* Its threshold rule and its cache are always on: a threshold of 0 and
   * the cache "none" of a layer below the user's mean its defaults. */
  gboolean    fast_always_on;
  /* The answer's last position is reserved (a pad token) and stays so. */
  gboolean    reserves_last;
  UmDoSample  do_sample;
  const UmGenClassDefaults *class_defaults;   /* NULL: none */
  const UmGenNoteReason    *not_applied;      /* { NULL, NULL }-terminated */
  const char               *not_applied_other;
  /* The schedule's built-in defaults over um_gen_params_init ()'s. */
  void     (*defaults)   (UmGenParams *p);
  /* Its own options in range and the others off, after
   * um_gen_params_check_common (); @family names the family in messages. */
  gboolean (*validate)   (const UmGenParams *p,
                          const char        *family,
                          int                prompt_len,
                          guint              max_seq_len,
                          GError           **error);
  /* The host bytes a run allocates are no column here: the memory plan,
   * below the engine, reads them by the family's schedule from
   * um_schedule_host_bytes_for () (memory/um-schedule-sizing.h). */
  UmScheduleRunFunc run;
} UmScheduleInfo;

const UmScheduleInfo *um_schedule_info (UmSchedule schedule);
/* The row of family @arch's schedule. */
const UmScheduleInfo *um_schedule_for_arch (UmArch arch);

/* Whether family @arch's schedule takes @key, or @option. */
gboolean    um_gen_key_applies (UmGenKey key, UmArch arch);
gboolean    um_gen_option_applies (UmGenOption option, UmArch arch);

/* The built-in defaults of family @arch: um_gen_params_init () and its
 * schedule's own (LLaDA's reference chat defaults; Dream's README:
 * temperature 0.2, alg entropy, eps 1e-3, alg_temp 0, top_p off as in its
 * code; RND1's RND1GenerationConfig: temperature 0.1, not greedy; LLaDA 2's
 * generate (): 256 tokens, blocks of 32 in 32 steps, threshold 0.95, the
 * cache of finished blocks). Dream and RND1 take as many steps as tokens
 * unless a layer says otherwise (um_gen_resolve_for ()). */
void        um_gen_params_init_for_arch (UmGenParams *p, UmArch arch);

/* The parameters of LLaDA's block schedule (um_gen_params_validate_for ()
 * with UM_ARCH_LLADA). */
gboolean    um_gen_params_validate (const UmGenParams *p,
                                    int                prompt_len,
                                    guint              max_seq_len,
                                    GError           **error);
/* The parameters of family @arch's schedule: its own options in range, and
 * the options it does not have off (the block schedule's block_length and
 * the timestep schedule's alg and eps are simply unused elsewhere, as they
 * have defaults). */
gboolean    um_gen_params_validate_for (const UmGenParams *p,
                                        UmArch             arch,
                                        int                prompt_len,
                                        guint              max_seq_len,
                                        GError           **error);

G_END_DECLS

/* um-sampler.h — the reference LLaDA schedule (see docs: llada.md):
 * blocks, per-block step split, Gumbel-max temperature in float64,
 * low_confidence / random remasking, classifier-free guidance, the EOS/EOT
 * flags and the lower-position-first tie rule. */
#pragma once

#include <gio/gio.h>

#include "um-forward.h"

G_BEGIN_DECLS

typedef enum {
  UM_REMASK_LOW_CONFIDENCE,
  UM_REMASK_RANDOM,
} UmRemasking;

/* Block KV cache (Fast-dLLM): NONE is the exact schedule. */
typedef enum {
  UM_CACHE_NONE,
  UM_CACHE_PREFIX,     /* later steps of a block compute the block and what follows it */
  UM_CACHE_DUAL,       /* ... only the block, the suffix's keys and values kept from the block start */
} UmCacheMode;

const char *um_cache_mode_to_string (UmCacheMode m);
gboolean    um_cache_mode_from_string (const char *s, UmCacheMode *out);

/* A word placed at @offset of the answer before the first step and never
 * remasked (as the official LLaDA demo does). The word is tokenized with
 * the model's tokenizer after a leading space (added unless it starts with
 * whitespace, as the demo does); its tokens fill offset, offset + 1, … and
 * count as committed: they are never candidates and the per-block step
 * split counts only the real masks. */
typedef struct {
  int           offset;
  const char   *word;
  /* Instead of @word (which is then NULL): these tokens verbatim, with no
   * space added (a completion's suffix when infilling). */
  const gint32 *ids;
  int           n_ids;
} UmGenConstraint;

/* The confidence rule of Dream's timestep schedule (the model family's
 * UmSchedule, um-model-config.h, decides which schedule runs). */
typedef enum {
  UM_ALG_ORIGIN,         /* each mask committed with probability 1 − s/t (random) */
  UM_ALG_MASKGIT_PLUS,   /* max p */
  UM_ALG_TOPK_MARGIN,    /* p1 − p2 */
  UM_ALG_ENTROPY,        /* Σ p·log(p + 1e-10): higher is more certain */
} UmAlg;

typedef struct {
  int         gen_length;
  int         steps;
  int         block_length;
  double      temperature;
  double      cfg_scale;
  UmRemasking remasking;
  gboolean    logits_eos_inf;
  gboolean    confidence_eos_eot_inf;
  guint64     seed;
  /* Fast decoding, all off by default (the exact reference schedule).
   * With a threshold or factor, each step looks at the current block's
   * masks only and the block ends when it has none: steps is then unused
   * (still validated). With remasking random the rules apply to the random
   * score, so they commit a random subset (at least one) per step. */
  UmCacheMode cache;
  double      threshold;     /* > 0: commit every masked position of the block with confidence ≥ it, at least one */
  double      factor;        /* > 0: Fast-dLLM's factor rule instead */
  const UmGenConstraint *constraints;   /* borrowed */
  int         n_constraints;
  /* Timestep schedule (Dream) and entropy schedule (RND1); ignored by the
   * block schedule. */
  UmAlg       alg;
  double      eps;           /* the last time of linspace(1, eps, steps + 1) */
  double      alg_temp;      /* > 0: positions drawn from softmax(conf / alg_temp), without replacement */
  double      top_p;         /* in (0, 1): nucleus filter before the softmax; 0 or 1: off */
  int         top_k;         /* > 0: only the k largest logits; 0: off */
  gboolean    greedy;        /* RND1: argmax tokens; the temperature only scales the entropies */
  /* LLaDA 2.x: stop as soon as a committed EOS has no mask before it (the
   * reference's eos_early_stop), not only after the block holding it. */
  gboolean    eos_early_stop;
} UmGenParams;

/* The reference chat defaults: 128 tokens, 128 steps, blocks of 32, greedy;
 * for the other schedules' fields Dream's entropy rule and eps 1e-3, no
 * filters (a family's own defaults: um_gen_params_init_for_arch ()). */
void        um_gen_params_init (UmGenParams *p);
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
const char *um_remasking_to_string (UmRemasking r);
gboolean    um_remasking_from_string (const char *s, UmRemasking *out);
/* "origin", "maskgit_plus", "topk_margin", "entropy": Dream's names. */
const char *um_alg_to_string (UmAlg alg);
gboolean    um_alg_from_string (const char *s, UmAlg *out);

typedef struct {
  int           step;         /* 0-based, over the whole generation */
  int           n_steps;      /* params->steps; with threshold/factor an upper bound, exact at the last step */
  int           block;        /* 0-based */
  int           n_blocks;
  int           n_committed;
  const gint32 *positions;    /* absolute positions committed this step, ascending */
  const gint32 *ids;          /* their tokens */
  const float  *confidences;  /* their confidences: LLaDA's (softmax probability or random score); Dream's
                               and RND1's the probability of the token */
  const gint32 *canvas;       /* the whole sequence after this step */
  int           prompt_len;
  int           seq_len;
  double        elapsed;      /* seconds since the start */
} UmStepEvent;

typedef void (*UmStepFunc) (const UmStepEvent *event, gpointer user_data);

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

/* Tokens per step of one block: the first (n % steps) steps get one more. */
void     um_sampler_split_steps (int n_masks, int steps, int *out_counts);

/* Host bytes a generation over a canvas of @canvas_len positions in @n_seq
 * sequences (2 with guidance) allocates besides the forward's: the canvas,
 * the rows asked for, the per-position candidate and commit arrays, and the
 * top-k selection's scratch. The memory plan predicts with it. */
guint64  um_sampler_host_bytes (int n_seq, int canvas_len);
/* um_sampler_host_bytes () for the schedule of @cfg's family: the timestep
 * and entropy schedules also hold every answer position's logits row. */
guint64  um_sampler_host_bytes_for (const UmModelConfig *cfg, int n_seq, int canvas_len);

G_END_DECLS

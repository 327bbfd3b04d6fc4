/* um-gen-params.h — what a generation takes and what each of its steps
 * gives back: the parameters every schedule reads (UmGenParams), their
 * names, and the step event every schedule emits (UmStepEvent).
 *
 * Below the schedules and the sampler: a schedule reads these, the table
 * of schedules (um-schedule-table.h) says which of them each one takes,
 * and the sampler dispatches. Nothing here knows a schedule. */
#pragma once

#include <gio/gio.h>

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
const char *um_remasking_to_string (UmRemasking r);
gboolean    um_remasking_from_string (const char *s, UmRemasking *out);
/* "origin", "maskgit_plus", "topk_margin", "entropy": Dream's names. */
const char *um_alg_to_string (UmAlg alg);
gboolean    um_alg_from_string (const char *s, UmAlg *out);

/* The parameters a model may recommend. */
typedef enum {
  UM_GEN_KEY_GEN_LENGTH,
  UM_GEN_KEY_STEPS,
  UM_GEN_KEY_BLOCK_LENGTH,
  UM_GEN_KEY_TEMPERATURE,
  UM_GEN_KEY_CFG_SCALE,
  UM_GEN_KEY_REMASKING,
  /* Dream's timestep and RND1's entropy schedules. */
  UM_GEN_KEY_ALG,
  UM_GEN_KEY_EPS,
  UM_GEN_KEY_ALG_TEMP,
  UM_GEN_KEY_TOP_P,
  UM_GEN_KEY_TOP_K,
  UM_GEN_KEY_GREEDY,
  UM_GEN_N_KEYS
} UmGenKey;

/* The keys of LLaDA's block schedule, the first ones: those the app's
 * settings show. */
#define UM_GEN_N_BLOCK_KEYS (UM_GEN_KEY_REMASKING + 1)

#define UM_GEN_KEY_BIT(k) (1u << (k))
#define UM_GEN_ALL_KEYS   ((1u << UM_GEN_N_KEYS) - 1)

/* "gen_length", "steps", "block_length", "temperature", "cfg_scale",
 * "remasking", "alg", "eps", "alg_temp", "top_p", "top_k", "greedy": the
 * generation_config.json names. */
const char *um_gen_key_name (UmGenKey key);
gboolean    um_gen_key_from_name (const char *name, UmGenKey *out);

/* The options that are not a model's recommendation (no UmGenKey): the
 * user's switches. Named as the app's settings name them. */
typedef enum {
  UM_GEN_OPT_LOGITS_EOS_INF,          /* "logits-eos-inf" */
  UM_GEN_OPT_CONFIDENCE_EOS_EOT_INF,  /* "confidence-eos-eot-inf" */
  UM_GEN_OPT_THRESHOLD,               /* "fast-decoding": the threshold rule */
  UM_GEN_OPT_CACHE,                   /* "cache" */
  UM_GEN_OPT_FACTOR,                  /* "factor" */
  UM_GEN_OPT_CONSTRAINTS,             /* "constraints" */
  UM_GEN_OPT_EOS_EARLY_STOP,          /* "eos-early-stop" */
  UM_GEN_N_OPTS
} UmGenOption;

#define UM_GEN_OPT_BIT(o) (1u << (o))

const char *um_gen_option_name (UmGenOption option);
gboolean    um_gen_option_from_name (const char *name, UmGenOption *out);

/* ---- the checks every schedule's validation shares (the schedule table
 * runs them, um_gen_params_validate_for ()) ---- */

/* Lengths, steps, temperature, fast decoding's values, the constraints, and
 * prompt + gen_length within @max_seq_len. */
gboolean    um_gen_params_check_common (const UmGenParams *p, int prompt_len, guint max_seq_len, GError **error);
/* The nucleus and top-k filters of Dream and RND1 in range. */
gboolean    um_gen_params_check_filters (const UmGenParams *p, GError **error);
/* The block schedule's options (guidance, remasking, the EOS rules, the
 * block KV cache, the factor rule, LLaDA 2's early stop) are off; @family
 * names the schedule's family in the message. */
gboolean    um_gen_params_check_no_blocks (const UmGenParams *p, const char *family, GError **error);

/* Tokens per step of one block: the first (n % steps) steps get one more. */
void        um_sampler_split_steps (int n_masks, int steps, int *out_counts);

/* ---- what every schedule reports after each step ---- */

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

G_END_DECLS

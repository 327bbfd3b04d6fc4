/* um-gen-params.c — the generation parameters: defaults, names, and the
 * checks every schedule's validation shares (see um-gen-params.h). */
#include "um-gen-params.h"

#include <math.h>
#include <string.h>

#include "um-enum.h"
#include "um-error.h"

void
um_gen_params_init (UmGenParams *p)
{
  memset (p, 0, sizeof *p);
  p->gen_length = 128;
  p->steps = 128;
  p->block_length = 32;
  p->temperature = 0.0;
  p->cfg_scale = 0.0;
  p->remasking = UM_REMASK_LOW_CONFIDENCE;
  p->seed = 0;
  p->alg = UM_ALG_ENTROPY;
  p->eps = 1e-3;
}

/* Each enum's names, indexed by value (um-enum.h). Dream's alg names;
 * the cache modes' are read whatever their case. */
static const char *const alg_names[] = { "origin", "maskgit_plus", "topk_margin", "entropy" };
static const char *const cache_names[] = { "none", "prefix", "dual" };
static const char *const remasking_names[] = { "low_confidence", "random" };
/* generation_config.json's names. */
static const char *const key_names[UM_GEN_N_KEYS] = {
  "gen_length", "steps", "block_length", "temperature", "cfg_scale", "remasking",
  "alg", "eps", "alg_temp", "top_p", "top_k", "greedy",
};
/* The app's settings' names. */
static const char *const option_names[UM_GEN_N_OPTS] = {
  "logits-eos-inf", "confidence-eos-eot-inf", "fast-decoding", "cache", "factor", "constraints", "eos-early-stop",
};

UM_ENUM_STRINGS (UmAlg, um_alg_to_string, um_alg_from_string, alg_names, FALSE)
UM_ENUM_STRINGS (UmCacheMode, um_cache_mode_to_string, um_cache_mode_from_string, cache_names, TRUE)
UM_ENUM_STRINGS (UmRemasking, um_remasking_to_string, um_remasking_from_string, remasking_names, FALSE)
UM_ENUM_STRINGS (UmGenKey, um_gen_key_name, um_gen_key_from_name, key_names, FALSE)
UM_ENUM_STRINGS (UmGenOption, um_gen_option_name, um_gen_option_from_name, option_names, FALSE)

#define FAIL(...) G_STMT_START { g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, __VA_ARGS__); return FALSE; } G_STMT_END

/* What every schedule checks. */
gboolean
um_gen_params_check_common (const UmGenParams *p, int prompt_len, guint max_seq_len, GError **error)
{
  if (p->gen_length <= 0)
    FAIL ("gen_length must be positive (got %d)", p->gen_length);
  if (p->steps <= 0)
    FAIL ("steps must be positive (got %d)", p->steps);
  if (!(p->temperature >= 0.0) || !isfinite (p->temperature))
    FAIL ("temperature must be a finite number ≥ 0 (got %g)", p->temperature);
  if (p->cache != UM_CACHE_NONE && p->cache != UM_CACHE_PREFIX && p->cache != UM_CACHE_DUAL)
    FAIL ("unknown cache mode %d", (int) p->cache);
  /* 0 is "off"; anything else must be a usable probability. */
  if (p->threshold != 0.0 && !(p->threshold > 0.0 && p->threshold <= 1.0))
    FAIL ("threshold must be in (0, 1] (got %g)", p->threshold);
  if (p->factor != 0.0 && !(p->factor > 0.0 && isfinite (p->factor)))
    FAIL ("factor must be a finite number > 0 (got %g)", p->factor);
  if (p->threshold > 0.0 && p->factor > 0.0)
    FAIL ("give a threshold or a factor, not both");
  if (p->n_constraints < 0 || (p->n_constraints > 0 && p->constraints == NULL))
    FAIL ("bad constraint list (%d constraints)", p->n_constraints);
  for (int i = 0; i < p->n_constraints; i++)
    {
      const UmGenConstraint *ci = &p->constraints[i];
      if (ci->offset < 0 || ci->offset >= p->gen_length)
        FAIL ("constraint offset %d is outside the answer [0, %d)", ci->offset, p->gen_length);
      if (ci->word == NULL && ci->ids != NULL)
        {
          if (ci->n_ids <= 0 || (gint64) ci->offset + ci->n_ids > p->gen_length)
            FAIL ("the %d tokens at offset %d do not fit in the answer (%d tokens)", ci->n_ids, ci->offset,
                  p->gen_length);
        }
      else if (ci->word == NULL || ci->word[0] == '\0')
        FAIL ("the constraint at offset %d has an empty word", ci->offset);
      else if (!g_utf8_validate (ci->word, -1, NULL))
        FAIL ("the constraint at offset %d is not valid UTF-8", ci->offset);
      /* Token-level overlaps are checked once the words are tokenized. */
      for (int j = 0; j < i; j++)
        if (p->constraints[j].offset == ci->offset)
          FAIL ("two constraints at offset %d", ci->offset);
    }
  if (prompt_len < 0 || (gint64) prompt_len + p->gen_length > (gint64) max_seq_len)
    FAIL ("prompt (%d tokens) + gen_length (%d) exceeds the model's maximum sequence length (%u)",
          prompt_len, p->gen_length, max_seq_len);
  return TRUE;
}

/* The nucleus and top-k filters of Dream and RND1. */
gboolean
um_gen_params_check_filters (const UmGenParams *p, GError **error)
{
  if (!(p->top_p >= 0.0 && p->top_p <= 1.0))
    FAIL ("top_p must be in [0, 1] (got %g; 0 and 1 are off)", p->top_p);
  if (p->top_k < 0)
    FAIL ("top_k must be ≥ 0 (got %d; 0 is off)", p->top_k);
  return TRUE;
}

/* The LLaDA reference's options, which the other schedules do not have. */
gboolean
um_gen_params_check_no_blocks (const UmGenParams *p, const char *family, GError **error)
{
  if (p->cfg_scale != 0.0)
    FAIL ("%s's schedule has no classifier-free guidance (cfg_scale is LLaDA's)", family);
  if (p->remasking != UM_REMASK_LOW_CONFIDENCE)
    FAIL ("%s's schedule has no remasking strategy (remasking is LLaDA's)", family);
  if (p->logits_eos_inf || p->confidence_eos_eot_inf)
    FAIL ("%s's schedule has no EOS/EOT rules (logits_eos_inf and confidence_eos_eot_inf are LLaDA's)", family);
  /* The block KV cache needs blocks. */
  if (p->cache != UM_CACHE_NONE)
    FAIL ("the block KV cache needs LLaDA's block schedule; %s's schedule has no blocks", family);
  if (p->factor > 0.0)
    FAIL ("%s's schedule has no factor rule (it is Fast-dLLM's rule for LLaDA's blocks)", family);
  if (p->eos_early_stop)
    FAIL ("eos_early_stop is LLaDA 2's; %s's schedule stops as its reference does", family);
  return TRUE;
}
#undef FAIL

/* Tokens step @i of @steps commits of a block's @n_masks. */
static int
step_count (int n_masks, int steps, int i)
{
  return n_masks / steps + (i < n_masks % steps ? 1 : 0);
}

void
um_sampler_split_steps (int n_masks, int steps, int *out_counts)
{
  for (int i = 0; i < steps; i++)
    out_counts[i] = step_count (n_masks, steps, i);
}

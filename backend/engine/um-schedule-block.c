#include "um-sampler.h"
#include "um-choose.h"

#include <math.h>
#include <string.h>

#include "um-error.h"
#include "um-schedule.h"
#include "um-topk.h"

#define FAIL(...) G_STMT_START { g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, __VA_ARGS__); return FALSE; } G_STMT_END

gboolean
um_gen_params_validate_for (const UmGenParams *p,
                            UmArch             arch,
                            int                prompt_len,
                            guint              max_seq_len,
                            GError           **error)
{
  const UmArchInfo *info = um_arch_info (arch);

  if (!um_gen_params_check_common (p, prompt_len, max_seq_len, error))
    return FALSE;
  switch (info->schedule)
    {
    case UM_SCHEDULE_TIMESTEP:
      if (!um_gen_params_check_filters (p, error) || !um_gen_params_check_no_blocks (p, info->name, error))
        return FALSE;
      if ((guint) p->alg > (guint) UM_ALG_ENTROPY)
        FAIL ("unknown alg %d", (int) p->alg);
      if (!(p->eps >= 0.0 && p->eps < 1.0))
        FAIL ("eps must be in [0, 1) (got %g)", p->eps);
      if (!(p->alg_temp >= 0.0) || !isfinite (p->alg_temp))
        FAIL ("alg_temp must be a finite number ≥ 0 (got %g)", p->alg_temp);
      if (p->greedy)
        FAIL ("%s has no greedy switch (it is RND1's): temperature 0 takes the arg-max", info->name);
      if (p->threshold > 0.0 && p->alg == UM_ALG_ORIGIN)
        FAIL ("a threshold needs a confidence: alg origin commits at random");
      return TRUE;
    case UM_SCHEDULE_ENTROPY:
      if (!um_gen_params_check_filters (p, error) || !um_gen_params_check_no_blocks (p, info->name, error))
        return FALSE;
      if (p->gen_length < 2)
        FAIL ("%s reserves the answer's last position: gen_length must be at least 2 (got %d)", info->name,
              p->gen_length);
      for (int i = 0; i < p->n_constraints; i++)
        if (p->constraints[i].offset >= p->gen_length - 1)
          FAIL ("%s reserves the answer's last position (%d): no constraint may start there", info->name,
                p->gen_length - 1);
      if (p->alg_temp != 0.0)
        FAIL ("%s's schedule has no alg_temp (it is Dream's)", info->name);
      if (p->threshold > 0.0)
        FAIL ("%s's schedule has no threshold rule: each step's count is fixed by its entropy order", info->name);
      return TRUE;
    case UM_SCHEDULE_BLOCK_CAUSAL:
      if (p->block_length <= 0)
        FAIL ("block_length must be positive (got %d)", p->block_length);
      if ((gint64) um_block_causal_canvas (prompt_len, p) > (gint64) max_seq_len)
        FAIL ("prompt (%d tokens) + gen_length (%d), rounded up to whole blocks of %d, exceeds the model's maximum "
              "sequence length (%u)", prompt_len, p->gen_length, p->block_length, max_seq_len);
      if (p->cfg_scale != 0.0)
        FAIL ("%s's schedule has no classifier-free guidance (cfg_scale is LLaDA's)", info->name);
      if (p->remasking != UM_REMASK_LOW_CONFIDENCE)
        FAIL ("%s's schedule has no remasking strategy (remasking is LLaDA's)", info->name);
      if (p->logits_eos_inf || p->confidence_eos_eot_inf)
        FAIL ("%s's schedule has no EOS/EOT rules (logits_eos_inf and confidence_eos_eot_inf are LLaDA's)",
              info->name);
      if (p->factor > 0.0)
        FAIL ("%s's schedule has no factor rule (it is Fast-dLLM's rule for LLaDA's blocks)", info->name);
      if (p->alg_temp != 0.0)
        FAIL ("%s's schedule has no alg_temp (it is Dream's)", info->name);
      if (p->greedy)
        FAIL ("%s has no greedy switch (it is RND1's): temperature 0 takes the arg-max", info->name);
      if ((p->top_p != 0.0 && p->top_p != 1.0) || p->top_k != 0)
        FAIL ("%s's schedule here has no top-p or top-k filter yet: use the temperature alone", info->name);
      return TRUE;
    case UM_SCHEDULE_BLOCK:
    default:
      break;
    }
  if (p->eos_early_stop)
    FAIL ("eos_early_stop is LLaDA 2's; %s's schedule stops as its reference does", info->name);
  if (p->block_length <= 0)
    FAIL ("block_length must be positive (got %d)", p->block_length);
  if (p->gen_length % p->block_length != 0)
    FAIL ("gen_length (%d) must be a multiple of block_length (%d)", p->gen_length, p->block_length);
  if (p->steps % (p->gen_length / p->block_length) != 0)
    FAIL ("steps (%d) must be a multiple of the number of blocks (gen_length / block_length = %d)",
          p->steps, p->gen_length / p->block_length);
  if (!(p->cfg_scale >= 0.0) || !isfinite (p->cfg_scale))
    FAIL ("cfg_scale must be a finite number ≥ 0 (got %g)", p->cfg_scale);
  if (p->remasking != UM_REMASK_LOW_CONFIDENCE && p->remasking != UM_REMASK_RANDOM)
    FAIL ("unknown remasking strategy %d", (int) p->remasking);
  /* Dream's and RND1's options. */
  if (p->top_p != 0.0 && p->top_p != 1.0)
    FAIL ("%s's block schedule has no top-p filter (top_p is Dream's and RND1's)", info->name);
  if (p->top_k != 0)
    FAIL ("%s's block schedule has no top-k filter (top_k is Dream's and RND1's)", info->name);
  if (p->alg_temp != 0.0)
    FAIL ("%s's block schedule has no alg_temp (it is Dream's)", info->name);
  if (p->greedy)
    FAIL ("%s's block schedule has no greedy switch (it is RND1's): temperature 0 is greedy", info->name);
  return TRUE;
}
#undef FAIL

gboolean
um_gen_params_validate (const UmGenParams *p,
                        int                prompt_len,
                        guint              max_seq_len,
                        GError           **error)
{
  return um_gen_params_validate_for (p, UM_ARCH_LLADA, prompt_len, max_seq_len, error);
}

/* Tokens step @i of @steps commits of a block's @n_masks. */
static int
step_count (int n_masks, int steps, int i)
{
  return n_masks / steps + (i < n_masks % steps ? 1 : 0);
}

/* Noise comes from um-rng.h: counter-based, so the same (seed, step,
 * position, token) gives the same draw on every backend; each row's token
 * and confidence follow um-choose.h, on the backend when it can. */

typedef struct {
  gint32 pos;
  gint32 id;
  double conf;
} Candidate;

static int
candidate_position_compare (gconstpointer a, gconstpointer b)
{
  const Candidate *x = a, *y = b;
  return (x->pos > y->pos) - (x->pos < y->pos);
}

/* Fast decoding order: most confident first, lower position first on ties
 * (the reference top-k's tie rule). */
static int
candidate_confidence_compare (gconstpointer a, gconstpointer b)
{
  const Candidate *x = a, *y = b;
  if (x->conf != y->conf)
    return x->conf > y->conf ? -1 : 1;
  return (x->pos > y->pos) - (x->pos < y->pos);
}

/* The sampler's arrays in one block, 8-byte ones first: offsets of each. */
typedef struct {
  size_t cands, scores, pick_conf, x, rows, chosen, commit_pos, commit_ids, commit_conf, pick_ids;
  size_t total;
} SamplerLayout;

static void
sampler_layout (int n_seq, int L, SamplerLayout *s)
{
  const size_t n = (size_t) MAX (L, 0), canvas = (size_t) MAX (n_seq, 1) * n;
  size_t off = 0;

#define PLACE(field, bytes) G_STMT_START { s->field = off; off += (bytes); } G_STMT_END
  PLACE (cands, n * sizeof (Candidate));
  PLACE (scores, n * sizeof (double));
  PLACE (pick_conf, n * sizeof (double));
  PLACE (x, canvas * sizeof (gint32));
  PLACE (rows, canvas * sizeof (gint32));
  PLACE (chosen, n * sizeof (gint32));
  PLACE (commit_pos, n * sizeof (gint32));
  PLACE (commit_ids, n * sizeof (gint32));
  PLACE (commit_conf, n * sizeof (float));
  PLACE (pick_ids, n * sizeof (gint32));
#undef PLACE
  s->total = off;
}

guint64
um_sampler_host_bytes (int n_seq, int canvas_len)
{
  SamplerLayout s;
  sampler_layout (n_seq, canvas_len, &s);
  return s.total + um_topk_scratch_bytes (canvas_len);
}

guint64
um_sampler_host_bytes_for (const UmModelConfig *cfg, int n_seq, int canvas_len)
{
  if (um_arch_info (cfg->arch)->schedule == UM_SCHEDULE_BLOCK
      || um_arch_info (cfg->arch)->schedule == UM_SCHEDULE_BLOCK_CAUSAL)
    return um_sampler_host_bytes (n_seq, canvas_len);
  return um_schedule_host_bytes (canvas_len, (int) cfg->vocab_size);
}

/* How many of the @n candidates, sorted by candidate_confidence_compare,
 * the threshold or factor rule commits; always at least one. */
static int
fast_commit_count (const Candidate *cands, int n, const UmGenParams *p)
{
  int k = 0;

  if (p->threshold > 0.0)
    {
      while (k < n && cands[k].conf >= p->threshold)
        k++;
    }
  else
    {
      /* (n + 1)(1 − c(n)) grows with n, so the n that pass are a prefix. */
      while (k < n && (k + 2) * (1.0 - cands[k].conf) < p->factor)
        k++;
    }
  return MAX (k, 1);
}

/* Writes the constraints' tokens into the answer of @x. A leading space is
 * added to a word that has none, as the official LLaDA demo does: a word
 * inside an answer is a mid-sentence token of the byte-level BPE. */
static gboolean
place_constraints (UmModel           *model,
                   const UmGenParams *p,
                   gint32            *x,
                   int                prompt_len,
                   GError           **error)
{
  g_autofree gboolean *taken = NULL;

  if (p->n_constraints == 0)
    return TRUE;
  taken = g_new0 (gboolean, p->gen_length);
  for (int i = 0; i < p->n_constraints; i++)
    {
      const UmGenConstraint *ci = &p->constraints[i];
      g_autoptr(GArray) ids = g_array_new (FALSE, FALSE, sizeof (gint32));

      if (ci->word == NULL)
        g_array_append_vals (ids, ci->ids, ci->n_ids);
      else
        {
          g_autofree char *text = g_ascii_isspace (ci->word[0]) ? g_strdup (ci->word)
                                                                 : g_strconcat (" ", ci->word, NULL);
          if (model->tokenizer == NULL)
            {
              g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "word constraints need the model's tokenizer");
              return FALSE;
            }
          if (!um_tokenizer_encode (model->tokenizer, text, -1, ids, error))
            return FALSE;
        }
      if (ids->len == 0 || (gint64) ci->offset + ids->len > p->gen_length)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                       "the constraint “%s” at offset %d (%u tokens) does not fit in the answer (%d tokens)",
                       ci->word ? ci->word : "(tokens)", ci->offset, ids->len, p->gen_length);
          return FALSE;
        }
      for (guint t = 0; t < ids->len; t++)
        {
          gint32 id = g_array_index (ids, gint32, t);
          int at = ci->offset + (int) t;
          if (id < 0 || (guint) id >= model->cfg.vocab_size || id == model->cfg.mask_id)
            {
              g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                           "the constraint “%s” tokenizes to %d, which the model cannot take",
                           ci->word ? ci->word : "(tokens)", id);
              return FALSE;
            }
          if (taken[at])
            {
              g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                           "the constraint “%s” at offset %d overlaps another one at answer position %d",
                           ci->word ? ci->word : "(tokens)", ci->offset, at);
              return FALSE;
            }
          taken[at] = TRUE;
          x[prompt_len + at] = id;
        }
    }
  return TRUE;
}

/* um_forward_choose () for the @n candidate positions @pos (ascending) of
 * a model that shifts its logits: each reads the row before (row 0 for
 * position 0; with guidance the rows + L of the unconditional copy). A row
 * read by two positions (0 and 1) is chosen once, for the first. */
static gboolean
choose_shifted (UmForward *fw, const gint32 *x, int n_seq, int L, const gint32 *pos, int n, const UmChooseRule *rule,
                gint32 *out_ids, double *out_conf, GCancellable *cancellable, GError **error)
{
  g_autofree gint32 *src = g_new (gint32, (gsize) MAX (n, 1) * n_seq), *row_of = g_new (gint32, MAX (n, 1));
  g_autofree gint32 *src_pos = g_new (gint32, MAX (n, 1));
  const int n_src = um_logit_rows (TRUE, pos, n, src, row_of);

  for (int i = n - 1; i >= 0; i--)
    src_pos[row_of[i]] = pos[i];
  for (int s = 1; s < n_seq; s++)
    for (int i = 0; i < n_src; i++)
      src[s * n_src + i] = src[i] + s * L;
  if (!um_forward_choose (fw, x, n_seq, L, src, n_src * n_seq, rule, src_pos, out_ids, out_conf, cancellable,
                          error))
    return FALSE;
  /* Spread the rows' choices over the positions, from the end: row_of[i] ≤ i. */
  for (int i = n - 1; i >= 0; i--)
    {
      out_ids[i] = out_ids[row_of[i]];
      out_conf[i] = out_conf[row_of[i]];
    }
  return TRUE;
}

static gboolean
forward_logits (gpointer data, const gint32 *ids, int seq_len, const gint32 *rows, int n_rows, float *logits,
                GCancellable *cancellable, GError **error)
{
  return um_forward_logits (data, ids, 1, seq_len, rows, n_rows, logits, cancellable, error);
}

typedef struct {
  UmForward   *fw;
  UmChooseRule rule;
} WindowChoose;

static gboolean
window_choose (gpointer data, const gint32 *ids, int canvas, int window, int start, const gint32 *rows, int n_rows,
               guint64 step, gint32 *out_ids, double *out_conf, GCancellable *cancellable, GError **error)
{
  WindowChoose *w = data;

  w->rule.step = step;
  return um_forward_choose_window (w->fw, ids, canvas, window, start, rows, n_rows, &w->rule, rows, out_ids,
                                   out_conf, cancellable, error);
}

/* LLaDA 2.x's block-causal schedule (um-schedule.h): the answer ends at
 * its first EOS. */
static gboolean
block_causal_schedule (UmForward         *fw,
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
  UmModel *model = um_forward_get_model (fw);
  const UmModelConfig *c = &model->cfg;
  const int canvas = um_block_causal_canvas (prompt_len, p);
  g_autofree gint32 *x = g_new (gint32, canvas);
  WindowChoose w = { .fw = fw };
  UmBlockCausalModel m = { .mask_id = c->mask_id, .eos_id = c->eos_id, .choose = window_choose, .choose_data = &w };
  int n_ids = 0;
  gboolean ok;

  memcpy (x, prompt, sizeof (gint32) * prompt_len);
  for (int i = prompt_len; i < canvas; i++)
    x[i] = c->mask_id;
  if (!place_constraints (model, p, x, prompt_len, error))
    return FALSE;
  w.rule.seed = p->seed;
  w.rule.temperature = p->temperature;
  w.rule.eos_id = c->eos_id;
  w.rule.eot_id = c->eot_id;
  w.rule.conf_tempered = TRUE;
  um_forward_set_attention_block (fw, p->block_length);
  ok = um_schedule_block_causal (&m, x, prompt_len, p, step_cb, user_data, cancellable, out_n_steps, &n_ids, error);
  um_forward_set_attention_block (fw, 0);
  if (ok)
    g_array_append_vals (out_ids, x + prompt_len, n_ids);
  return ok;
}

/* Dream's timestep and RND1's entropy schedules (um-schedule.h). */
static gboolean
other_schedule (UmForward         *fw,
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
  UmModel *model = um_forward_get_model (fw);
  const UmModelConfig *c = &model->cfg;
  const int L = prompt_len + p->gen_length;
  g_autofree gint32 *x = g_new (gint32, L);
  UmScheduleModel m = { 0 };
  gboolean ok;

  m.vocab = (int) c->vocab_size;
  m.mask_id = c->mask_id;
  m.eos_id = c->eos_id;
  m.pad_id = c->pad_id;
  m.bos_id = c->bos_id;
  m.shift = c->shift_logits;
  m.logits = forward_logits;
  m.logits_data = fw;
  memcpy (x, prompt, sizeof (gint32) * prompt_len);
  for (int i = prompt_len; i < L; i++)
    x[i] = c->mask_id;
  if (!place_constraints (model, p, x, prompt_len, error))
    return FALSE;
  if (um_arch_info (c->arch)->schedule == UM_SCHEDULE_ENTROPY)
    ok = um_schedule_entropy (&m, x, prompt_len, L, p, step_cb, user_data, cancellable, out_n_steps, error);
  else
    ok = um_schedule_timestep (&m, x, prompt_len, L, p, step_cb, user_data, cancellable, out_n_steps, error);
  if (ok)
    g_array_append_vals (out_ids, x + prompt_len, p->gen_length);
  return ok;
}

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
  UmModel *model = um_forward_get_model (fw);
  const UmModelConfig *c = &model->cfg;
  const int V = c->vocab_size;
  const gint32 mask = c->mask_id;
  const gboolean cfg = p->cfg_scale > 0.0;
  const gboolean fast = p->threshold > 0.0 || p->factor > 0.0;
  const gboolean cached = p->cache != UM_CACHE_NONE;
  const int n_seq = cfg ? 2 : 1;
  int L, n_blocks, steps_per_block, global_step = 0, masks_left = 0;
  g_autofree guint8 *arrays = NULL;
  SamplerLayout lay;
  gint32 *x, *rows, *commit_pos, *commit_ids, *pick_ids, *chosen;
  float *commit_conf;
  double *pick_conf, *scores;
  Candidate *cands;
  UmChooseRule rule = { 0 };
  gint64 t0 = g_get_monotonic_time ();

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
  if (um_arch_info (c->arch)->schedule == UM_SCHEDULE_BLOCK_CAUSAL)
    return block_causal_schedule (fw, prompt, prompt_len, p, step_cb, user_data, cancellable, out_ids, out_n_steps,
                                  error);
  if (um_arch_info (c->arch)->schedule != UM_SCHEDULE_BLOCK)
    return other_schedule (fw, prompt, prompt_len, p, step_cb, user_data, cancellable, out_ids, out_n_steps,
                           error);
  /* The cache computes the block's rows only; a shift reads the row before. */
  if (cached && c->shift_logits)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "the block KV cache cannot run a model that shifts its logits (%s)", um_arch_info (c->arch)->name);
      return FALSE;
    }

  L = prompt_len + p->gen_length;
  n_blocks = p->gen_length / p->block_length;
  steps_per_block = p->steps / n_blocks;

  sampler_layout (n_seq, L, &lay);
  arrays = g_malloc (lay.total);
  cands = (Candidate *) (arrays + lay.cands);
  scores = (double *) (arrays + lay.scores);
  pick_conf = (double *) (arrays + lay.pick_conf);
  x = (gint32 *) (arrays + lay.x);
  rows = (gint32 *) (arrays + lay.rows);
  chosen = (gint32 *) (arrays + lay.chosen);
  commit_pos = (gint32 *) (arrays + lay.commit_pos);
  commit_ids = (gint32 *) (arrays + lay.commit_ids);
  commit_conf = (float *) (arrays + lay.commit_conf);
  pick_ids = (gint32 *) (arrays + lay.pick_ids);
  memcpy (x, prompt, sizeof (gint32) * prompt_len);
  for (int i = prompt_len; i < L; i++)
    x[i] = mask;
  if (!place_constraints (model, p, x, prompt_len, error))
    return FALSE;
  for (int i = prompt_len; i < L; i++)
    masks_left += x[i] == mask;
  rule.seed = p->seed;
  rule.temperature = p->temperature;
  rule.cfg_scale = p->cfg_scale;
  rule.eos_id = c->eos_id;
  rule.eot_id = c->eot_id;
  rule.logits_eos_inf = p->logits_eos_inf;
  rule.confidence_eos_eot_inf = p->confidence_eos_eot_inf;
  rule.remask_random = p->remasking == UM_REMASK_RANDOM;

  for (int b = 0; b < n_blocks; b++)
    {
      const int block_start = prompt_len + b * p->block_length;
      const int block_end = block_start + p->block_length;
      int n_masks = 0, n_masks0;
      gboolean refreshed = FALSE;

      for (int i = block_start; i < block_end; i++)
        n_masks += x[i] == mask;
      n_masks0 = n_masks;

      /* Exact: the block's fixed steps. Fast: until the block has no masks
       * (each step commits at least one, so at most n_masks steps). */
      for (int s = 0; fast ? n_masks > 0 : s < steps_per_block; s++, global_step++)
        {
          int n_cand = 0, k = fast ? 1 : step_count (n_masks0, steps_per_block, s);
          UmStepEvent ev = { 0 };

          if (g_cancellable_set_error_if_cancelled (cancellable, error))
            return FALSE;

          /* Candidates. Exact schedule: every mask before the end of the
           * block (prompt masks included, as in the reference); later
           * positions score −inf. Fast decoding and the cache: the block's
           * masks only (the cache computes no other rows). */
          for (int i = fast || cached ? block_start : 0; i < block_end; i++)
            if (x[i] == mask)
              rows[n_cand++] = i;
          k = MIN (k, n_cand);

          /* A step that commits nothing needs no forward pass. */
          if (k > 0)
            {
              int n_rows = n_cand * n_seq;
              gboolean ok;
              if (cfg)
                {
                  /* Unconditional copy: the prompt replaced by masks. */
                  memcpy (x + L, x, sizeof (gint32) * L);
                  for (int i = 0; i < prompt_len; i++)
                    x[L + i] = mask;
                  for (int i = 0; i < n_cand; i++)
                    rows[n_cand + i] = rows[i] + L;
                }
              /* Only an id and a confidence per row come back from the
               * backend (the guided combination included, see
               * um_forward_choose). */
              rule.step = (guint64) global_step;
              if (cached)
                ok = um_forward_choose_cached (fw, x, n_seq, L, block_start, block_end, !refreshed,
                                               p->cache == UM_CACHE_DUAL, rows, n_rows, &rule, rows, pick_ids,
                                               pick_conf, cancellable, error);
              else if (c->shift_logits)
                ok = choose_shifted (fw, x, n_seq, L, rows, n_cand, &rule, pick_ids, pick_conf, cancellable, error);
              else
                ok = um_forward_choose (fw, x, n_seq, L, rows, n_rows, &rule, rows, pick_ids, pick_conf,
                                        cancellable, error);
              if (!ok)
                return FALSE;
              refreshed = TRUE;
              for (int i = 0; i < n_cand; i++)
                {
                  cands[i].pos = rows[i];
                  cands[i].id = pick_ids[i];
                  cands[i].conf = pick_conf[i];
                }
              if (fast)
                {
                  /* Candidates are in position order, so a full sort with
                   * the tie rule gives the reference's top-k order. */
                  qsort (cands, n_cand, sizeof (Candidate), candidate_confidence_compare);
                  k = fast_commit_count (cands, n_cand, p);
                }
              else
                {
                  /* Pick the k most confident as torch.topk over the whole
                   * canvas does, non-candidates at −inf (ties as the reference). */
                  for (int i = 0; i < L; i++)
                    scores[i] = -INFINITY;
                  for (int i = 0; i < n_cand; i++)
                    scores[cands[i].pos] = cands[i].conf;
                  um_topk_reference (scores, L, k, chosen);
                  for (int j = 0; j < k; j++)
                    for (int i = 0; i < n_cand; i++)
                      if (cands[i].pos == chosen[j])
                        {
                          Candidate t = cands[j];
                          cands[j] = cands[i];
                          cands[i] = t;
                          break;
                        }
                }
            }

          /* Commit the k best; report them in position order. */
          qsort (cands, k, sizeof (Candidate), candidate_position_compare);
          for (int j = 0; j < k; j++)
            {
              if (cands[j].pos >= block_start && cands[j].pos < block_end)
                n_masks--;
              if (cands[j].pos >= prompt_len)
                masks_left--;
              x[cands[j].pos] = cands[j].id;
              commit_pos[j] = cands[j].pos;
              commit_ids[j] = cands[j].id;
              commit_conf[j] = (float) cands[j].conf;
            }

          if (step_cb != NULL)
            {
              ev.step = global_step;
              /* Fast decoding cannot know its step count in advance: the
               * bound left (one step per remaining mask), exact at the end. */
              ev.n_steps = fast ? global_step + 1 + masks_left : p->steps;
              ev.block = b;
              ev.n_blocks = n_blocks;
              ev.n_committed = k;
              ev.positions = commit_pos;
              ev.ids = commit_ids;
              ev.confidences = commit_conf;
              ev.canvas = x;
              ev.prompt_len = prompt_len;
              ev.seq_len = L;
              ev.elapsed = (g_get_monotonic_time () - t0) / 1e6;
              step_cb (&ev, user_data);
            }
        }
    }

  if (out_n_steps != NULL)
    *out_n_steps = global_step;
  g_array_append_vals (out_ids, x + prompt_len, p->gen_length);
  return TRUE;
}

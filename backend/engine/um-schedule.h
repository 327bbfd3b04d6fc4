/* um-schedule.h — what the schedules share, and each schedule's part of
 * its row in the schedule table (engine-internal; the tests call the
 * schedules' cores with a fake forward).
 *
 *  - the rows' functions: each schedule's defaults, validation and run,
 *    defined in its own file (um-schedule-block.c, um-schedule-timestep.c,
 *    um-schedule-entropy.c, um-schedule-block-causal.c) and listed in
 *    um-schedule-table.c (their host bytes and the layouts they are
 *    counted from: memory/um-schedule-sizing.h, below the memory plan);
 *  - the canvas every run starts from (prompt, masks, constraints) and the
 *    step event every run emits;
 *  - the logits shift: Dream and RND1 read position i from the logits row
 *    i − 1 (row 0 for position 0); the forward always returns raw rows and
 *    um_logit_rows () is the one place that maps positions to rows;
 *  - Dream's timestep schedule (generation_utils.py _sample):
 *    um_schedule_timestep ();
 *  - RND1's entropy schedule (rnd/sampling.py diffusion_sample):
 *    um_schedule_entropy ();
 *  - the row rules both use: the top-k and top-p filters, Dream's
 *    confidences, RND1's entropy.
 *
 * Arithmetic follows the reference where it decides anything: the counts
 * are computed in float32 as torch computes them, probabilities in double
 * (the references' float32 only differs at exact ties, which the fixtures'
 * margins exclude). */
#pragma once

#include <gio/gio.h>

#include "um-forward.h"
#include "um-gen-params.h"
#include "um-schedule-sizing.h"

G_BEGIN_DECLS

/* The forward as the schedules see it: raw logits rows @rows (ascending,
 * unique) of the canvas @ids, @n_rows × vocab floats into @logits. */
typedef gboolean (*UmLogitsFunc) (gpointer      data,
                                  const gint32 *ids,
                                  int           seq_len,
                                  const gint32 *rows,
                                  int           n_rows,
                                  float        *logits,
                                  GCancellable *cancellable,
                                  GError      **error);

typedef struct {
  int          vocab;
  gint32       mask_id;
  gint32       eos_id;         /* < 0: none */
  gint32       pad_id;         /* < 0: none */
  gint32       bos_id;         /* < 0: none */
  gboolean     shift;          /* position i reads row i − 1 */
  UmLogitsFunc logits;
  gpointer     logits_data;
} UmScheduleModel;

/* One generation as a schedule runs it: the canvas is the prompt, then
 * the answer (masks and the constraints' tokens). */
typedef struct _UmScheduleRun UmScheduleRun;
struct _UmScheduleRun {
  UmForward         *fw;
  const gint32      *prompt;
  int                prompt_len;
  const UmGenParams *p;             /* validated (um_gen_params_validate_for ()) */
  UmStepFunc         step_cb;       /* may be NULL; called after every step from this thread */
  gpointer           user_data;
  GCancellable      *cancellable;
  GArray            *out_ids;       /* receives the generated ids (gint32) */
  int               *out_n_steps;   /* may be NULL: the steps run */
};

/* ---- the rows' functions (um-schedule-table.h says what each does) ---- */

void     um_schedule_block_defaults (UmGenParams *p);
gboolean um_schedule_block_validate (const UmGenParams *p, const char *family, int prompt_len, guint max_seq_len,
                                     GError **error);
gboolean um_schedule_block_run (const UmScheduleRun *run, GError **error);

void     um_schedule_timestep_defaults (UmGenParams *p);
gboolean um_schedule_timestep_validate (const UmGenParams *p, const char *family, int prompt_len,
                                        guint max_seq_len, GError **error);
gboolean um_schedule_timestep_run (const UmScheduleRun *run, GError **error);

void     um_schedule_entropy_defaults (UmGenParams *p);
gboolean um_schedule_entropy_validate (const UmGenParams *p, const char *family, int prompt_len, guint max_seq_len,
                                       GError **error);
gboolean um_schedule_entropy_run (const UmScheduleRun *run, GError **error);

void     um_schedule_block_causal_defaults (UmGenParams *p);
gboolean um_schedule_block_causal_validate (const UmGenParams *p, const char *family, int prompt_len,
                                            guint max_seq_len, GError **error);
/* The answer ends at its first EOS. */
gboolean um_schedule_block_causal_run (const UmScheduleRun *run, GError **error);

/* ---- the canvas and the step events every run shares ---- */

/* The canvas of @canvas_len a run starts from: @prompt, then masks, then
 * the constraints' tokens written into the answer (a word tokenized with
 * @model's tokenizer after a leading space, as the official LLaDA demo
 * does: inside an answer it is a mid-sentence token of the byte-level BPE). */
gboolean um_schedule_canvas_init (UmModel           *model,
                                  const gint32      *prompt,
                                  int                prompt_len,
                                  const UmGenParams *p,
                                  gint32            *x,
                                  int                canvas_len,
                                  GError           **error);

/* Where a run's step events go and what they show. */
typedef struct {
  UmStepFunc    step_cb;       /* NULL: no events */
  gpointer      user_data;
  const gint32 *canvas;
  int           prompt_len;
  int           seq_len;
  gint64        t0;            /* the run's start, g_get_monotonic_time () */
} UmScheduleEvents;

/* The logits rows positions @positions[0..n) (ascending) read: themselves,
 * or with @shift the row before (row 0 for position 0). Writes the distinct
 * rows, ascending, to @rows and the index into @rows of each position to
 * @row_of; returns how many rows. Two positions share a row only for 0 and
 * 1 with a shift. */
int      um_logit_rows (gboolean      shift,
                        const gint32 *positions,
                        int           n,
                        gint32       *rows,
                        gint32       *row_of);

/* torch.linspace (1, eps, steps + 1) in float32 as torch's kernels compute
 * it (the first half from 1, the second from eps, each a fused
 * multiply-add): @ts gets steps + 1 values. */
void     um_timesteps_f32 (double eps, int steps, float *ts);

/* Tokens step @i of @steps commits of @n_masked: int (n·(1 − s/t)) in
 * float32, t = ts[i], s = ts[i + 1]; all at the last step. */
int      um_timestep_count (const float *ts, int steps, int i, int n_masked);

/* Positions RND1 keeps masked at @step of @steps (counting down from
 * steps − 1): (total · (step / steps)) in float32, truncated, as
 * (tensor.long () * python float).long () computes it. */
int      um_entropy_keep_count (int total, int step, int steps);

/* Scratch for the row rules over a vocabulary of @vocab (one per thread). */
typedef struct _UmRowScratch UmRowScratch;
UmRowScratch *um_row_scratch_new (int vocab);
void          um_row_scratch_free (UmRowScratch *s);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmRowScratch, um_row_scratch_free)

/* Dream's sample_tokens () on one row: logits / T (T > 0), top_p, top_k,
 * softmax; T > 0 draws the token from @u (uniform in (0, 1)) by the
 * cumulative distribution, T = 0 takes the arg-max (lowest index on ties).
 * @out_conf: the confidence of @alg (maskgit_plus and origin: p of the
 * token; topk_margin: p1 − p2; entropy: Σ p·log (p + 1e-10)); @out_p: p of
 * the token. */
void     um_dream_row (UmRowScratch      *s,
                       const float       *logits,
                       const UmGenParams *p,
                       double             u,
                       gint32            *out_id,
                       double            *out_conf,
                       double            *out_p);

/* RND1's forward_scores () on one row: logits / max (T, 1e-8), top_k (the
 * k of torch.topk), top_p, log-softmax; greedy: arg-max, else the token
 * drawn from @u. @out_entropy: −Σ p·log p, NaN when a filter removed a
 * token (0 · −inf, as upstream computes it); @out_p: p of the token. */
void     um_rnd1_row (UmRowScratch      *s,
                      const float       *logits,
                      const UmGenParams *p,
                      double             u,
                      gint32            *out_id,
                      double            *out_entropy,
                      double            *out_p);

/* The schedules. @x: the canvas of @seq_len tokens, the prompt's
 * @prompt_len first, then the answer (masks, and the constraints' tokens);
 * generated in place. @out_n_steps: the steps run (events sent). */
gboolean um_schedule_timestep (const UmScheduleModel *m,
                               gint32                *x,
                               int                    prompt_len,
                               int                    seq_len,
                               const UmGenParams     *p,
                               UmStepFunc             step_cb,
                               gpointer               user_data,
                               GCancellable          *cancellable,
                               int                   *out_n_steps,
                               GError               **error);

/* RND1: the answer's last position must be a mask; it becomes the pad
 * token upstream reserves, and stays one. */
gboolean um_schedule_entropy (const UmScheduleModel *m,
                              gint32                *x,
                              int                    prompt_len,
                              int                    seq_len,
                              const UmGenParams     *p,
                              UmStepFunc             step_cb,
                              gpointer               user_data,
                              GCancellable          *cancellable,
                              int                   *out_n_steps,
                              GError               **error);

/* The timestep and entropy schedules as the engine runs them: the canvas
 * of prompt + gen_length (um_schedule_canvas_init ()), the forward's raw
 * logits rows through the family's shift, then @core; the answer's
 * gen_length ids into @out_ids. */
typedef gboolean (*UmScheduleRowsCore) (const UmScheduleModel *m,
                                        gint32                *x,
                                        int                    prompt_len,
                                        int                    seq_len,
                                        const UmGenParams     *p,
                                        UmStepFunc             step_cb,
                                        gpointer               user_data,
                                        GCancellable          *cancellable,
                                        int                   *out_n_steps,
                                        GError               **error);
gboolean um_schedule_run_rows (UmScheduleRowsCore core, const UmScheduleRun *run, GError **error);

/* LLaDA 2.x's block-causal schedule (um-schedule-block-causal.c). The
 * forward as it sees it: um_forward_choose_window () with the step's
 * noise counter @step. */
typedef gboolean (*UmWindowChooseFunc) (gpointer      data,
                                        const gint32 *ids,
                                        int           canvas,
                                        int           window,
                                        int           start,
                                        const gint32 *rows,
                                        int           n_rows,
                                        guint64       step,
                                        gint32       *out_ids,
                                        double       *out_conf,
                                        GCancellable *cancellable,
                                        GError      **error);

typedef struct {
  gint32             mask_id;
  gint32             eos_id;     /* < 0: none */
  UmWindowChooseFunc choose;
  gpointer           choose_data;
} UmBlockCausalModel;

/* The canvas: ⌈(prompt + gen_length) / block_length⌉ · block_length. */
int      um_block_causal_canvas (int prompt_len, const UmGenParams *p);
/* Steps per block: min (steps, gen_length). */
int      um_block_causal_steps (const UmGenParams *p);

/* @x: the canvas (um_block_causal_canvas () tokens: the prompt, then masks
 * and the constraints' tokens), generated in place. @out_n_ids: the
 * answer's length, up to its first EOS included, else gen_length. */
gboolean um_schedule_block_causal (const UmBlockCausalModel *m,
                                   gint32                   *x,
                                   int                       prompt_len,
                                   const UmGenParams        *p,
                                   UmStepFunc                step_cb,
                                   gpointer                  user_data,
                                   GCancellable             *cancellable,
                                   int                      *out_n_steps,
                                   int                      *out_n_ids,
                                   GError                  **error);

/* ---- shared by the schedules' implementations ---- */

/* The logits rows a step reads, through the shift, and the row rules'
 * scratch per thread. */
typedef struct {
  gint32        *rows;
  gint32        *row_of;     /* per position asked for: its row's index in rows */
  float         *logits;     /* n_rows × vocab */
  int            n_rows;
  UmRowScratch **scratch;
  int            n_scratch;
} UmScheduleRows;

/* Room for @max_positions positions. */
gboolean um_schedule_rows_init (UmScheduleRows        *r,
                                const UmScheduleModel *m,
                                int                    max_positions,
                                GError               **error);
void     um_schedule_rows_clear (UmScheduleRows *r);
/* One forward: the rows positions @positions[0..n) (ascending) read. */
gboolean um_schedule_rows_compute (UmScheduleRows        *r,
                                   const UmScheduleModel *m,
                                   const gint32          *x,
                                   int                    seq_len,
                                   const gint32          *positions,
                                   int                    n,
                                   GCancellable          *cancellable,
                                   GError               **error);

static inline const float *
um_schedule_rows_get (const UmScheduleRows *r, const UmScheduleModel *m, int i)
{
  return r->logits + (size_t) r->row_of[i] * m->vocab;
}

/* A step's commits, in position order. */
typedef struct {
  gint32 *pos;
  gint32 *ids;
  float  *conf;
  int     n;
} UmScheduleCommits;

/* Sends step @step of @n_steps (exact, or a bound exact at the last step)
 * of block @block of @n_blocks: @commits, the canvas after them, the time. */
void     um_schedule_emit (const UmScheduleEvents  *events,
                           const UmScheduleCommits *commits,
                           int                      step,
                           int                      n_steps,
                           int                      block,
                           int                      n_blocks);

G_END_DECLS

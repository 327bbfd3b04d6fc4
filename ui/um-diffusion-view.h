/* um-diffusion-view.h — the canvas of a diffusion run, live and replayable.
 *
 * Every generated position is a cell: a mask cell until it is committed,
 * then its token's text. Cells committed in the shown step are highlighted
 * and coloured by confidence (< 0.3, < 0.7, above); earlier ones are drawn in
 * a calm colour; block boundaries are visible. The view records every step it
 * is given, so any step can be shown again afterwards (the step slider).
 */
#pragma once

#include <gtk/gtk.h>

G_BEGIN_DECLS

#define UM_TYPE_DIFFUSION_VIEW (um_diffusion_view_get_type ())
G_DECLARE_FINAL_TYPE (UmDiffusionView, um_diffusion_view, UM, DIFFUSION_VIEW, GtkWidget)

/* Display text of a token id (newly allocated), e.g. from the tokenizer. */
typedef char *(*UmTokenTextFunc) (gint32 id, gpointer user_data);

GtkWidget *um_diffusion_view_new (void);

void       um_diffusion_view_set_token_text_func (UmDiffusionView *self,
                                                  UmTokenTextFunc  func,
                                                  gpointer         user_data,
                                                  GDestroyNotify   destroy);
/* EOS/EOT are drawn as small end markers; -1 if the model has none. */
void       um_diffusion_view_set_special_ids (UmDiffusionView *self,
                                              gint32           mask_id,
                                              gint32           eos_id,
                                              gint32           eot_id);

/* Starts a new canvas of @gen_length masks in blocks of @block_length, for a
 * run of @n_steps steps. Forgets the previous run. */
void       um_diffusion_view_reset (UmDiffusionView *self,
                                    int              prompt_len,
                                    int              gen_length,
                                    int              block_length,
                                    int              n_steps);
/* Blocks aligned to the canvas's start rather than the answer's (LLaDA 2
 * counts blocks from position 0): the first block boundary falls at answer
 * position block_length − @offset (offset = prompt length % block_length). */
void       um_diffusion_view_set_block_offset (UmDiffusionView *self,
                                               int              offset);
/* Clears the view to its empty state (no run). */
void       um_diffusion_view_clear (UmDiffusionView *self);

/* Records step @step (0-based, in order): @n positions (absolute, i.e.
 * counting the prompt) got @ids with @confidences. While following (the
 * default), the view shows each new step as it arrives. */
void       um_diffusion_view_add_step (UmDiffusionView *self,
                                       int              step,
                                       const gint32    *positions,
                                       const gint32    *ids,
                                       const float     *confidences,
                                       int              n);

/* Tokens in place before the first step that no step commits (word
 * constraints, RND1's reserved end slot): @n absolute positions holding
 * @ids. Shown from the start and at every replayed step, never as a step's
 * news. Forgotten by reset. */
void       um_diffusion_view_set_fixed (UmDiffusionView *self,
                                        const gint32    *positions,
                                        const gint32    *ids,
                                        int              n);

/* Steps recorded so far ("n-steps-recorded" property). */
int        um_diffusion_view_get_n_steps_recorded (UmDiffusionView *self);
/* Steps the run will have ("n-steps" property, from reset). */
int        um_diffusion_view_get_n_steps (UmDiffusionView *self);

/* Replay: show the canvas as it was after step @step (-1: all masks). Stops
 * following; um_diffusion_view_set_following() resumes. ("shown-step") */
void       um_diffusion_view_set_shown_step (UmDiffusionView *self, int step);
int        um_diffusion_view_get_shown_step (UmDiffusionView *self);
void       um_diffusion_view_set_following (UmDiffusionView *self, gboolean following);
gboolean   um_diffusion_view_get_following (UmDiffusionView *self);

/* The generated part as shown now: gen_length ids, the mask id where masked.
 * For tests and for copying. Free with g_array_unref. */
GArray    *um_diffusion_view_get_shown_ids (UmDiffusionView *self);

/* The generated position (0-based) under widget point (@x, @y), or -1. */
int        um_diffusion_view_get_position_at (UmDiffusionView *self,
                                              double           x,
                                              double           y);
/* The tooltip text of generated position @index (0-based) as shown now,
 * e.g. "Position 3 · token “ the” · confidence 0.87 · step 5", counting
 * positions and steps from 1 as the step slider does; NULL if out of range.
 * Free with g_free. */
char      *um_diffusion_view_describe_position (UmDiffusionView *self,
                                                int              index);

G_END_DECLS

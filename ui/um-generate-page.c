#include "config.h"

#include "um-generate-page.h"

#include <glib/gi18n.h>


#include <string.h>

/* The settings property of each option whose row (or group) a family
 * shows or not (um_family_has_option ()); the first ones in UmGenKey order. */
static const char *const option_props[] = {
  "gen-length", "steps", "block-length", "temperature", "cfg-scale", "remasking",
  "alg", "eps", "alg-temp", "top-p", "top-k", "greedy", "fast-decoding", "cache", "factor", "constraints",
};

struct _UmGeneratePage {
  AdwBin           parent_instance;

  GtkTextView     *prompt_view;
  GtkSwitch       *chat_switch;
  GtkSpinButton   *length_spin, *steps_spin, *block_spin, *temperature_spin, *cfg_spin;
  AdwComboRow     *remasking_row;
  /* The timestep (Dream) and entropy (RND1) schedules' options. */
  AdwComboRow     *alg_row;
  GtkSpinButton   *alg_temp_spin, *eps_spin, *top_p_spin, *top_k_spin;
  GtkSwitch       *greedy_switch;
  AdwPreferencesGroup *params_group, *fast_group;
  UmArch           arch;             /* the family whose options are shown */
  GtkWidget       *option_widgets[G_N_ELEMENTS (option_props)];
  AdwExpanderRow  *fast_row;
  AdwComboRow     *cache_row, *rule_row;
  AdwActionRow    *threshold_row, *factor_row;
  GtkAdjustment   *threshold_adjustment, *factor_adjustment;
  AdwPreferencesGroup *constraints_group;
  GPtrArray       *constraint_rows;    /* GtkWidget*, in order */
  GtkLabel        *problem_label;
  GtkButton       *generate_button, *stop_button, *copy_button;
  UmDiffusionView *view;
  GtkScale        *step_scale;
  GtkAdjustment   *step_adjustment;
  GtkLabel        *stats_label;
  GtkRevealer     *limits_revealer;
  GtkLabel        *limits_label;
  GtkButton       *mode_button;
  AdwFlap         *flap;
  /* The parameter rows by UmGenKey, their reset buttons, and what they
   * say below the description: where the value comes from. */
  AdwActionRow    *param_rows[UM_GEN_N_KEYS];
  GtkWidget       *reset_buttons[UM_GEN_N_KEYS];
  char            *descriptions[UM_GEN_N_KEYS];
  char            *source_notes[UM_GEN_N_KEYS];
  GtkWidget       *reset_all_button;
  GtkLabel        *model_note_label;

  UmGenerator     *generator;       /* "an engine", local or remote */
  UmSettings      *settings;
  GCancellable    *cancellable;
  char            *problem;
  GArray          *last_ids;
  GError          *last_error;
  char            *last_text;
  gint64           started;
  int              committed;
  gboolean         variable_steps;   /* threshold or factor: steps is only a bound */
  gboolean         updating_scale;
  gboolean         fixed_seen;       /* the run's tokens in place from the start are known */
  gboolean         laid_out;         /* the view knows the run's prompt length (first step) */
  int              run_block_length;
  UmModeInfo       mode_info;
  gboolean         have_mode;
  UmLimitsWarning     limits;
  /* What params.constraints points to: rebuilt by read_params (snapshot)
   * and kept for the run in progress (run), which borrows it. */
  GArray          *snap_constraints;   /* UmGenConstraint */
  GPtrArray       *snap_words;         /* char* */
  GArray          *run_constraints;
  GPtrArray       *run_words;
};

G_DEFINE_FINAL_TYPE (UmGeneratePage, um_generate_page, ADW_TYPE_BIN)

enum { PROP_0, PROP_RUNNING, PROP_PROBLEM, N_PROPS };
static GParamSpec *props[N_PROPS];

enum { FINISHED, N_SIGNALS };
static guint signals[N_SIGNALS];

static void update_problem (UmGeneratePage *self);
static void update_sources (UmGeneratePage *self);

/* The Algorithm row's items (um_settings_bind_alg's order). */
static const UmAlg alg_items[] = { UM_ALG_MASKGIT_PLUS, UM_ALG_TOPK_MARGIN, UM_ALG_ENTROPY, UM_ALG_ORIGIN };

static void
read_params (UmGeneratePage *self, UmGenParams *p)
{
  if (self->settings)
    um_settings_get_params (self->settings, p);
  else
    um_gen_params_init (p);
  p->gen_length = gtk_spin_button_get_value_as_int (self->length_spin);
  p->steps = gtk_spin_button_get_value_as_int (self->steps_spin);
  p->block_length = gtk_spin_button_get_value_as_int (self->block_spin);
  p->temperature = gtk_spin_button_get_value (self->temperature_spin);
  p->cfg_scale = gtk_spin_button_get_value (self->cfg_spin);
  p->remasking = adw_combo_row_get_selected (self->remasking_row) == 1 ? UM_REMASK_RANDOM : UM_REMASK_LOW_CONFIDENCE;
  p->alg = alg_items[MIN (adw_combo_row_get_selected (self->alg_row), G_N_ELEMENTS (alg_items) - 1)];
  p->alg_temp = gtk_spin_button_get_value (self->alg_temp_spin);
  p->eps = gtk_spin_button_get_value (self->eps_spin);
  p->top_p = gtk_spin_button_get_value (self->top_p_spin);
  p->top_k = gtk_spin_button_get_value_as_int (self->top_k_spin);
  p->greedy = gtk_switch_get_active (self->greedy_switch);

  p->cache = UM_CACHE_NONE;
  p->threshold = 0.0;
  p->factor = 0.0;
  if (adw_expander_row_get_enable_expansion (self->fast_row))
    {
      p->cache = (UmCacheMode) MIN (adw_combo_row_get_selected (self->cache_row), UM_CACHE_DUAL);
      if (adw_combo_row_get_selected (self->rule_row) == 1 && um_family_has_option (self->arch, "factor"))
        p->factor = gtk_adjustment_get_value (self->factor_adjustment);
      else
        p->threshold = gtk_adjustment_get_value (self->threshold_adjustment);
    }

  /* The rows' words, copied: the entries may change while a run borrows them. */
  g_array_set_size (self->snap_constraints, 0);
  g_ptr_array_set_size (self->snap_words, 0);
  for (guint i = 0; i < self->constraint_rows->len; i++)
    {
      GtkWidget *row = g_ptr_array_index (self->constraint_rows, i);
      GtkSpinButton *spin = g_object_get_data (G_OBJECT (row), "um-spin");
      GtkEditable *entry = g_object_get_data (G_OBJECT (row), "um-entry");
      const char *word = gtk_editable_get_text (entry);
      char *copy;
      UmGenConstraint c = { 0 };

      if (word == NULL || word[0] == '\0')
        continue;
      copy = g_strdup (word);
      g_ptr_array_add (self->snap_words, copy);
      c.offset = gtk_spin_button_get_value_as_int (spin);
      c.word = copy;
      g_array_append_val (self->snap_constraints, c);
    }
  p->constraints = self->snap_constraints->len ? (const UmGenConstraint *) self->snap_constraints->data : NULL;
  p->n_constraints = (int) self->snap_constraints->len;
  /* Hidden options of another family's schedule neither act nor fail. */
  um_gen_params_for_family (p, self->arch);
}

/* ---- word constraints ---- */

static void on_param_changed (UmGeneratePage *self);

static void
on_remove_constraint_clicked (GtkButton *button, UmGeneratePage *self)
{
  GtkWidget *row = gtk_widget_get_ancestor (GTK_WIDGET (button), GTK_TYPE_LIST_BOX_ROW);
  guint index;

  if (row == NULL || !g_ptr_array_find (self->constraint_rows, row, &index))
    return;
  g_ptr_array_remove_index (self->constraint_rows, index);
  adw_preferences_group_remove (self->constraints_group, row);
  /* Keep the focus in the list: on the next row, else the Add button. */
  if (index < self->constraint_rows->len)
    gtk_widget_grab_focus (g_object_get_data (g_ptr_array_index (self->constraint_rows, index), "um-entry"));
  else if (self->constraint_rows->len > 0)
    gtk_widget_grab_focus (g_object_get_data (g_ptr_array_index (self->constraint_rows, index - 1), "um-entry"));
  update_problem (self);
}

void
um_generate_page_add_constraint (UmGeneratePage *self, int offset, const char *word)
{
  GtkWidget *row, *box, *spin, *entry, *remove;
  GtkAdjustment *adj;

  g_return_if_fail (UM_IS_GENERATE_PAGE (self));

  adj = gtk_adjustment_new (MAX (offset, 0), 0, 4095, 1, 8, 0);
  spin = gtk_spin_button_new (adj, 1, 0);
  gtk_spin_button_set_numeric (GTK_SPIN_BUTTON (spin), TRUE);
  gtk_widget_set_valign (spin, GTK_ALIGN_CENTER);
  gtk_widget_set_tooltip_text (spin, _("Token position in the answer, from 0"));
  gtk_accessible_update_property (GTK_ACCESSIBLE (spin), GTK_ACCESSIBLE_PROPERTY_LABEL,
                                  _("Position"), -1);

  entry = gtk_entry_new ();
  gtk_widget_set_hexpand (entry, TRUE);
  gtk_widget_set_valign (entry, GTK_ALIGN_CENTER);
  gtk_entry_set_placeholder_text (GTK_ENTRY (entry), _("Word"));
  gtk_editable_set_width_chars (GTK_EDITABLE (entry), 8);
  gtk_editable_set_text (GTK_EDITABLE (entry), word ? word : "");
  gtk_accessible_update_property (GTK_ACCESSIBLE (entry), GTK_ACCESSIBLE_PROPERTY_LABEL,
                                  _("Word"), -1);

  remove = gtk_button_new_from_icon_name ("list-remove-symbolic");
  gtk_widget_set_valign (remove, GTK_ALIGN_CENTER);
  gtk_widget_add_css_class (remove, "flat");
  gtk_widget_set_tooltip_text (remove, _("Remove this constraint"));
  gtk_accessible_update_property (GTK_ACCESSIBLE (remove), GTK_ACCESSIBLE_PROPERTY_LABEL,
                                  _("Remove Constraint"), -1);

  box = gtk_box_new (GTK_ORIENTATION_HORIZONTAL, 6);
  gtk_widget_set_margin_start (box, 12);
  gtk_widget_set_margin_end (box, 6);
  gtk_widget_set_margin_top (box, 6);
  gtk_widget_set_margin_bottom (box, 6);
  gtk_box_append (GTK_BOX (box), spin);
  gtk_box_append (GTK_BOX (box), entry);
  gtk_box_append (GTK_BOX (box), remove);

  row = gtk_list_box_row_new ();
  gtk_list_box_row_set_activatable (GTK_LIST_BOX_ROW (row), FALSE);
  gtk_list_box_row_set_child (GTK_LIST_BOX_ROW (row), box);
  gtk_widget_add_css_class (row, "constraint-row");
  g_object_set_data (G_OBJECT (row), "um-spin", spin);
  g_object_set_data (G_OBJECT (row), "um-entry", entry);
  g_object_set_data (G_OBJECT (row), "um-remove", remove);

  g_signal_connect_swapped (spin, "value-changed", G_CALLBACK (on_param_changed), self);
  g_signal_connect_swapped (entry, "changed", G_CALLBACK (on_param_changed), self);
  g_signal_connect (remove, "clicked", G_CALLBACK (on_remove_constraint_clicked), self);

  g_ptr_array_add (self->constraint_rows, row);
  adw_preferences_group_add (self->constraints_group, row);
  update_problem (self);
}

static void
on_add_constraint_clicked (UmGeneratePage *self)
{
  int offset = 0;

  /* After the last one, a guess at where the next word goes. */
  if (self->constraint_rows->len > 0)
    {
      GtkWidget *last = g_ptr_array_index (self->constraint_rows, self->constraint_rows->len - 1);
      offset = gtk_spin_button_get_value_as_int (g_object_get_data (G_OBJECT (last), "um-spin")) + 1;
    }
  um_generate_page_add_constraint (self, offset, NULL);
  gtk_widget_grab_focus (g_object_get_data (g_ptr_array_index (self->constraint_rows,
                                                               self->constraint_rows->len - 1),
                                            "um-entry"));
}

void
um_generate_page_remove_constraint (UmGeneratePage *self, guint index)
{
  g_return_if_fail (UM_IS_GENERATE_PAGE (self));
  if (index >= self->constraint_rows->len)
    return;
  on_remove_constraint_clicked (g_object_get_data (g_ptr_array_index (self->constraint_rows, index), "um-remove"), self);
}

guint
um_generate_page_get_n_constraints (UmGeneratePage *self)
{
  return self->constraint_rows->len;
}

void
um_generate_page_get_params (UmGeneratePage *self, UmGenParams *params)
{
  g_return_if_fail (UM_IS_GENERATE_PAGE (self));
  read_params (self, params);
}

static void
on_rule_selected (UmGeneratePage *self)
{
  /* Dream's fast decoding has the threshold only. */
  gboolean factor = um_family_has_option (self->arch, "factor") && adw_combo_row_get_selected (self->rule_row) == 1;
  gtk_widget_set_visible (GTK_WIDGET (self->threshold_row), !factor);
  gtk_widget_set_visible (GTK_WIDGET (self->factor_row), factor);
  update_problem (self);
}

/* Warns when the parameters go beyond what the memory mode recommends. */
static void
update_limits (UmGeneratePage *self)
{
  UmGenParams p;
  char *warning = NULL;
  gboolean show;

  read_params (self, &p);
  if (self->have_mode)
    warning = um_mode_info_check (&self->mode_info, &p);
  show = um_limits_warning_set (&self->limits, warning);
  gtk_label_set_text (self->limits_label, warning ? warning : "");
  gtk_revealer_set_reveal_child (self->limits_revealer, show);
}

static void
on_limits_dismiss_clicked (UmGeneratePage *self)
{
  um_limits_warning_dismiss (&self->limits);
  gtk_revealer_set_reveal_child (self->limits_revealer, FALSE);
}

void
um_generate_page_set_mode_info (UmGeneratePage *self, const UmModeInfo *info)
{
  self->have_mode = info != NULL;
  if (info != NULL)
    {
      g_autofree char *accessible = NULL;
      self->mode_info = *info;
      gtk_button_set_label (self->mode_button, um_mode_info_name (info));
      /* Translators: accessible name of the pill that shows the memory mode, e.g. "Memory mode extreme-moderate" */
      accessible = g_strdup_printf (_("Memory mode %s"), um_mode_info_name (info));
      gtk_accessible_update_property (GTK_ACCESSIBLE (self->mode_button), GTK_ACCESSIBLE_PROPERTY_LABEL,
                                      accessible, -1);
    }
  gtk_widget_set_visible (GTK_WIDGET (self->mode_button), info != NULL);
  g_clear_pointer (&self->limits.dismissed, g_free);
  update_limits (self);
  /* The sources name the mode. */
  update_sources (self);
}

const char *
um_generate_page_get_limits_warning (UmGeneratePage *self)
{
  return self->limits.warning;
}

const char *
um_generate_page_get_mode_label (UmGeneratePage *self)
{
  return self->have_mode ? gtk_button_get_label (self->mode_button) : NULL;
}

/* The family whose schedule runs: the model's, else the settings'. */
static UmArch
current_arch (UmGeneratePage *self)
{
  UmArch arch = um_arch_fallback ();

  if (self->generator != NULL)
    return um_generator_get_info (self->generator)->arch;
  if (self->settings != NULL)
    um_settings_family_to_arch (um_settings_get_family (self->settings), &arch);
  return arch;
}

/* Explains, before running, which rule of the schedule the parameters break. */
static void
update_problem (UmGeneratePage *self)
{
  UmGenParams p;
  g_autoptr(GError) error = NULL;
  guint max_len = self->generator ? um_generator_get_info (self->generator)->max_seq_len : 4096;
  gboolean running = self->cancellable != NULL;

  read_params (self, &p);
  g_clear_pointer (&self->problem, g_free);
  if (!um_gen_params_validate_for (&p, current_arch (self), 0, max_len, &error))
    {
      if (!um_schedule_for_arch (current_arch (self))->answer_blocks)
        self->problem = g_strdup (error->message);
      else if (p.gen_length % p.block_length != 0)
        self->problem = g_strdup_printf (_("The length (%d) must be a multiple of the block length (%d)."),
                                         p.gen_length, p.block_length);
      else if (p.steps % (p.gen_length / p.block_length) != 0)
        {
          int blocks = p.gen_length / p.block_length;
          self->problem = g_strdup_printf (g_dngettext (GETTEXT_PACKAGE,
                                                        "The steps (%d) must divide evenly among the %d block: use a multiple of %d.",
                                                        "The steps (%d) must divide evenly among the %d blocks: use a multiple of %d.",
                                                        blocks),
                                           p.steps, blocks, blocks);
        }
      else
        self->problem = g_strdup (error->message);
    }
  gtk_label_set_text (self->problem_label, self->problem ? self->problem : "");
  gtk_widget_set_visible (GTK_WIDGET (self->problem_label), self->problem != NULL);
  gtk_widget_set_sensitive (GTK_WIDGET (self->generate_button),
                            self->generator != NULL && !running && self->problem == NULL);
  gtk_widget_set_sensitive (GTK_WIDGET (self->stop_button), running);
  update_limits (self);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_PROBLEM]);
}

static char *
token_text (gint32 id, gpointer user_data)
{
  UmGeneratePage *self = user_data;
  char *text;

  if (self->generator == NULL)
    return g_strdup ("?");
  text = um_generator_token_text (self->generator, id);
  return text != NULL ? text : g_strdup ("?");
}

/* @n_this: tokens committed by this step, or -1 before the first. With a
 * threshold or factor the step count is only a bound and steps commit
 * varying numbers of tokens: say both. */
static void
update_stats (UmGeneratePage *self, int step, int n_steps, int n_this, double elapsed)
{
  g_autofree char *text = NULL;
  double tps = elapsed > 0 ? self->committed / elapsed : 0.0;
  if (self->variable_steps && n_this >= 0)
    text = g_strdup_printf (g_dngettext (GETTEXT_PACKAGE, "Step %d (at most %d) · %d token this step · %.1f tokens/s · %.1f s",
                                         "Step %d (at most %d) · %d tokens this step · %.1f tokens/s · %.1f s", n_this),
                            step, n_steps, n_this, tps, elapsed);
  else if (self->variable_steps)
    text = g_strdup_printf (_("Step %d (at most %d) · %.1f tokens/s · %.1f s"), step, n_steps, tps, elapsed);
  else
    text = g_strdup_printf (_("Step %d of %d · %.1f tokens/s · %.1f s"), step, n_steps, tps, elapsed);
  gtk_label_set_text (self->stats_label, text);
}

/* The answer's tokens that no step commits (word constraints, RND1's
 * reserved end slot) are in the canvas from the first step on. */
static void
show_fixed (UmGeneratePage *self, const UmStepEvent *ev)
{
  gint32 mask = um_generator_get_info (self->generator)->mask_id;
  g_autoptr(GArray) positions = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autoptr(GArray) ids = g_array_new (FALSE, FALSE, sizeof (gint32));
  int k = 0;

  self->fixed_seen = TRUE;
  /* ev->positions is ascending. */
  for (gint32 i = ev->prompt_len; i < ev->seq_len; i++)
    {
      while (k < ev->n_committed && ev->positions[k] < i)
        k++;
      if (ev->canvas[i] == mask || (k < ev->n_committed && ev->positions[k] == i))
        continue;
      g_array_append_val (positions, i);
      g_array_append_val (ids, ev->canvas[i]);
    }
  um_diffusion_view_set_fixed (self->view, (const gint32 *) (gpointer) positions->data,
                               (const gint32 *) (gpointer) ids->data, (int) positions->len);
}

static void
on_step (const UmStepEvent *ev, gpointer user_data)
{
  UmGeneratePage *self = user_data;

  if (self->cancellable == NULL)
    return;
  /* The generator tokenizes the prompt (here or on a server): the canvas
   * starts where the first step says. */
  if (!self->laid_out)
    {
      self->laid_out = TRUE;
      um_diffusion_view_reset (self->view, ev->prompt_len, ev->seq_len - ev->prompt_len, self->run_block_length,
                               ev->n_steps);
      /* LLaDA 2's blocks are aligned to the canvas's start. */
      if (um_schedule_for_arch (self->arch)->canvas_blocks && self->run_block_length > 0)
        um_diffusion_view_set_block_offset (self->view, ev->prompt_len % self->run_block_length);
    }
  if (!self->fixed_seen)
    show_fixed (self, ev);
  um_diffusion_view_add_step (self->view, ev->step, ev->positions, ev->ids, ev->confidences, ev->n_committed);
  self->committed += ev->n_committed;
  /* The slider follows the run unless the user is looking at an older step. */
  self->updating_scale = TRUE;
  gtk_adjustment_set_upper (self->step_adjustment, ev->step + 1);
  if (um_diffusion_view_get_following (self->view))
    gtk_adjustment_set_value (self->step_adjustment, ev->step + 1);
  self->updating_scale = FALSE;
  update_stats (self, ev->step + 1, ev->n_steps, ev->n_committed, ev->elapsed);
}

static void
on_generated (GObject *source, GAsyncResult *result, gpointer user_data)
{
  g_autoptr(UmGeneratePage) self = user_data;
  g_autoptr(GError) error = NULL;
  g_autoptr(UmGeneratorResult) res = NULL;

  res = um_generator_generate_finish (UM_GENERATOR (source), result, &error);
  g_clear_object (&self->cancellable);
  g_clear_error (&self->last_error);
  g_clear_pointer (&self->last_text, g_free);
  if (res != NULL)
    {
      g_clear_pointer (&self->last_ids, g_array_unref);
      self->last_ids = g_array_ref (res->ids);
      self->last_text = g_strdup (res->text);
      gtk_widget_set_sensitive (GTK_WIDGET (self->copy_button), TRUE);
    }
  else
    {
      self->last_error = g_steal_pointer (&error);
      if (g_error_matches (self->last_error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
        gtk_label_set_text (self->stats_label, _("Stopped"));
      else
        {
          g_autofree char *msg = g_strdup_printf (_("Generation failed: %s"), self->last_error->message);
          gtk_label_set_text (self->stats_label, msg);
        }
    }
  /* Replay: the slider now scrubs through the recorded steps. */
  gtk_widget_set_sensitive (GTK_WIDGET (self->step_scale),
                            um_diffusion_view_get_n_steps_recorded (self->view) > 0);
  update_problem (self);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_RUNNING]);
  g_signal_emit (self, signals[FINISHED], 0);
}

void
um_generate_page_generate (UmGeneratePage *self)
{
  GtkTextIter start, end;
  g_autofree char *prompt = NULL;
  UmGeneratorRequest req;
  GtkTextBuffer *buffer = gtk_text_view_get_buffer (self->prompt_view);

  update_problem (self);
  if (self->generator == NULL || self->cancellable != NULL || self->problem != NULL)
    return;
  gtk_text_buffer_get_bounds (buffer, &start, &end);
  prompt = gtk_text_buffer_get_text (buffer, &start, &end, FALSE);

  /* The text, not ids: the generator tokenizes it (with the chat template
   * when asked), here or on the server. Errors about the prompt's length
   * come back as the run's error. */
  um_generator_request_init (&req);
  read_params (self, &req.params);
  req.prompt = prompt;
  req.chat = gtk_switch_get_active (self->chat_switch);
  /* The run borrows the words: move the snapshot to the run's storage,
   * which stays until the next run (never rebuilt while one is going). */
  {
    GArray *tmp_c = self->run_constraints;
    GPtrArray *tmp_w = self->run_words;
    self->run_constraints = self->snap_constraints;
    self->run_words = self->snap_words;
    self->snap_constraints = tmp_c;
    self->snap_words = tmp_w;
    req.params.constraints = self->run_constraints->len ? (const UmGenConstraint *) self->run_constraints->data : NULL;
  }

  /* Masks at once; the prompt's length is known at the first step. */
  um_diffusion_view_reset (self->view, 0, req.params.gen_length, req.params.block_length, req.params.steps);
  um_diffusion_view_set_following (self->view, TRUE);
  self->run_block_length = req.params.block_length;
  self->laid_out = FALSE;
  self->updating_scale = TRUE;
  gtk_adjustment_configure (self->step_adjustment, 0, 0, 0, 1, 8, 0);
  self->updating_scale = FALSE;
  gtk_widget_set_sensitive (GTK_WIDGET (self->step_scale), TRUE);
  gtk_widget_set_sensitive (GTK_WIDGET (self->copy_button), FALSE);
  self->committed = 0;
  self->fixed_seen = FALSE;
  self->started = g_get_monotonic_time ();
  self->variable_steps = req.params.threshold > 0 || req.params.factor > 0;
  update_stats (self, 0, req.params.steps, -1, 0.0);

  self->cancellable = g_cancellable_new ();
  /* On a narrow window the parameters cover the canvas: get out of the way. */
  if (adw_flap_get_folded (self->flap))
    adw_flap_set_reveal_flap (self->flap, FALSE);
  um_generator_generate_async (self->generator, &req, on_step, self, self->cancellable, on_generated,
                               g_object_ref (self));
  /* Queued behind another request (the chat, or a client of the server):
   * say so until the first step. */
  if (self->cancellable != NULL && !self->laid_out)
    {
      int n_running = 0, n_waiting = 0;
      um_generator_get_queue (self->generator, &n_running, &n_waiting);
      if (n_waiting > 0)
        gtk_label_set_text (self->stats_label, _("Waiting for the engine…"));
    }
  update_problem (self);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_RUNNING]);
}

void
um_generate_page_stop (UmGeneratePage *self)
{
  if (self->cancellable != NULL)
    g_cancellable_cancel (self->cancellable);
}

gboolean
um_generate_page_get_running (UmGeneratePage *self)
{
  return self->cancellable != NULL;
}

static void
on_scale_changed (GtkAdjustment *adj, UmGeneratePage *self)
{
  int step;
  if (self->updating_scale)
    return;
  /* Slider position n shows the canvas after n steps. */
  step = (int) gtk_adjustment_get_value (adj) - 1;
  um_diffusion_view_set_shown_step (self->view, step);
  /* Back at the newest step during a run: follow it live again. */
  if (self->cancellable != NULL && step + 1 >= um_diffusion_view_get_n_steps_recorded (self->view))
    um_diffusion_view_set_following (self->view, TRUE);
  if (self->cancellable == NULL)
    {
      g_autofree char *text = g_strdup_printf (_("Showing step %d of %d"), step + 1,
                                               um_diffusion_view_get_n_steps_recorded (self->view));
      gtk_label_set_text (self->stats_label, text);
    }
}

static void
on_copy_clicked (UmGeneratePage *self)
{
  if (self->last_text != NULL)
    gdk_clipboard_set_text (gtk_widget_get_clipboard (GTK_WIDGET (self)), self->last_text);
}

static void
on_param_changed (UmGeneratePage *self)
{
  update_problem (self);
}

void
um_generate_page_set_generator (UmGeneratePage *self, UmGenerator *generator)
{
  if (self->cancellable != NULL)
    {
      /* A running generation keeps the generator busy; the window only swaps
       * them when nothing runs, but be safe on teardown. */
      g_cancellable_cancel (self->cancellable);
    }
  g_set_object (&self->generator, generator);
  um_diffusion_view_clear (self->view);
  if (generator != NULL)
    {
      const UmGeneratorInfo *info = um_generator_get_info (generator);
      g_autofree char *name = g_strconcat (info->model_id ? info->model_id : "", " ",
                                           info->display_name ? info->display_name : "", NULL);
      g_autofree char *lower = g_ascii_strdown (name, -1);
      um_diffusion_view_set_special_ids (self->view, info->mask_id, info->eos_id, info->eot_id);
      /* Base models are prompted with plain text, Instruct models with the
       * template; the shipped demo model is a base model (data/training). */
      if (strstr (lower, "base") != NULL || strstr (lower, "demo-model") != NULL)
        gtk_switch_set_active (self->chat_switch, FALSE);
      else if (strstr (lower, "instruct") != NULL || strstr (lower, "llada-1.5") != NULL)
        gtk_switch_set_active (self->chat_switch, TRUE);
    }
  gtk_label_set_text (self->stats_label, "");
  update_problem (self);
  update_sources (self);
}

/* ---- where the parameters come from ---- */

/* The model's recommendations the sampler does not follow, and the values
 * it ignored as invalid: said once, below the parameters. */
static void
update_model_note (UmGeneratePage *self)
{
  const UmGenRecommendation *rec = self->generator ? um_generator_get_info (self->generator)->recommendation : NULL;
  g_autoptr(GString) text = g_string_new (NULL);
  g_autoptr(GString) tooltip = g_string_new (NULL);

  if (rec != NULL && rec->not_applied->len > 0)
    {
      g_autoptr(GString) list = g_string_new (NULL);
      for (guint i = 0; i < rec->not_applied->len; i++)
        {
          const UmGenNote *n = g_ptr_array_index (rec->not_applied, i);
          g_string_append_printf (list, "%s%s %s", i ? ", " : "", n->key, n->value);
          g_string_append_printf (tooltip, "%s%s: %s", i ? "\n" : "", n->key, n->reason);
        }
      /* Not only samplers Unmask lacks: Dream's files hold its class
       * defaults, which are no recommendation. The tooltip says why each. */
      /* Translators: %s is a list of settings as written in the model's files, e.g. "top_p 0.95, top_k 50" */
      g_string_append_printf (text, _("The model’s files also set %s, which Unmask does not apply (the tooltip says why)."),
                              list->str);
    }
  for (guint i = 0; rec != NULL && i < rec->warnings->len; i++)
    {
      if (text->len > 0)
        g_string_append_c (text, '\n');
      /* Translators: %s is a problem found in the model's settings file (in English) */
      g_string_append_printf (text, _("Not used: %s"), (const char *) g_ptr_array_index (rec->warnings, i));
    }
  gtk_label_set_text (self->model_note_label, text->str);
  gtk_widget_set_tooltip_text (GTK_WIDGET (self->model_note_label), tooltip->len ? tooltip->str : NULL);
  gtk_widget_set_visible (GTK_WIDGET (self->model_note_label), text->len > 0);
}

/* Each parameter row says where its value comes from, and offers to forget
 * the user's choice. */
static void
update_sources (UmGeneratePage *self)
{
  const char *mode = self->have_mode ? um_mode_info_name (&self->mode_info) : NULL;
  guint32 user = self->settings ? um_settings_get_user_set (self->settings) : 0;

  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    {
      g_autofree char *note = self->settings ? um_settings_describe_source (self->settings, k, mode) : NULL;
      g_autofree char *subtitle = NULL;
      gboolean mine = (user & UM_GEN_KEY_BIT (k)) != 0;

      if (g_strcmp0 (note, self->source_notes[k]) != 0)
        {
          subtitle = note ? g_markup_printf_escaped ("%s\n%s", self->descriptions[k], note)
                          : g_markup_escape_text (self->descriptions[k], -1);
          adw_action_row_set_subtitle (self->param_rows[k], subtitle);
          g_free (self->source_notes[k]);
          self->source_notes[k] = g_steal_pointer (&note);
        }
      gtk_widget_set_visible (self->reset_buttons[k], mine);
      if (mine)
        {
          UmGenParams def;
          UmGenSource from = um_settings_get_default (self->settings, k, &def);
          g_autofree char *value = um_settings_format_value (&def, k);
          g_autofree char *tip = from == UM_GEN_SOURCE_MODEL
                                 /* Translators: %s is a parameter's value */
                                 ? g_strdup_printf (_("Reset to the model’s recommendation (%s)"), value)
                                 /* Translators: %s is a parameter's value */
                                 : g_strdup_printf (_("Reset to the default (%s)"), value);
          gtk_widget_set_tooltip_text (self->reset_buttons[k], tip);
          gtk_accessible_update_property (GTK_ACCESSIBLE (self->reset_buttons[k]), GTK_ACCESSIBLE_PROPERTY_LABEL,
                                          tip, -1);
        }
    }
  gtk_widget_set_visible (self->reset_all_button, user != 0);
  update_model_note (self);
}

const char *
um_generate_page_get_source_note (UmGeneratePage *self, UmGenKey key)
{
  g_return_val_if_fail (UM_IS_GENERATE_PAGE (self) && (guint) key < UM_GEN_N_KEYS, NULL);
  return self->source_notes[key];
}

gboolean
um_generate_page_get_reset_visible (UmGeneratePage *self, UmGenKey key)
{
  g_return_val_if_fail (UM_IS_GENERATE_PAGE (self) && (guint) key < UM_GEN_N_KEYS, FALSE);
  return gtk_widget_get_visible (self->reset_buttons[key]);
}

const char *
um_generate_page_get_model_note (UmGeneratePage *self)
{
  g_return_val_if_fail (UM_IS_GENERATE_PAGE (self), NULL);
  return gtk_widget_get_visible (GTK_WIDGET (self->model_note_label))
         ? gtk_label_get_text (self->model_note_label) : NULL;
}

/* Only the options of the model family's schedule are shown. */
static void
update_family (UmGeneratePage *self)
{
  UmArch arch = self->settings ? um_settings_get_arch (self->settings) : um_arch_fallback ();
  const char *description, *temperature;

  self->arch = arch;
  for (guint i = 0; i < G_N_ELEMENTS (option_props); i++)
    gtk_widget_set_visible (self->option_widgets[i], um_family_has_option (arch, option_props[i]));
  on_rule_selected (self);

  /* What the schedule does, in the table's words (translated here). */
  description = _(um_schedule_for_arch (arch)->description);
  temperature = _(um_schedule_for_arch (arch)->temperature_hint);
  adw_preferences_group_set_description (self->params_group, description);
  adw_expander_row_set_subtitle (self->fast_row,
                                 um_family_has_option (arch, "cache")
                                 ? _("Cache keys and values per block and commit every confident token at once; "
                                     "Steps becomes a maximum")
                                 : _("Commit every token above the confidence threshold at once; Steps becomes a "
                                     "maximum"));
  if (g_strcmp0 (self->descriptions[UM_GEN_KEY_TEMPERATURE], temperature) != 0)
    {
      g_free (self->descriptions[UM_GEN_KEY_TEMPERATURE]);
      self->descriptions[UM_GEN_KEY_TEMPERATURE] = g_strdup (temperature);
      /* The row's subtitle is the description and the source: redo it. */
      g_clear_pointer (&self->source_notes[UM_GEN_KEY_TEMPERATURE], g_free);
      adw_action_row_set_subtitle (self->param_rows[UM_GEN_KEY_TEMPERATURE], temperature);
    }
  update_problem (self);
  update_sources (self);
}

gboolean
um_generate_page_get_option_visible (UmGeneratePage *self, const char *property)
{
  g_return_val_if_fail (UM_IS_GENERATE_PAGE (self), FALSE);
  for (guint i = 0; i < G_N_ELEMENTS (option_props); i++)
    if (g_str_equal (property, option_props[i]))
      return gtk_widget_get_visible (self->option_widgets[i]);
  g_return_val_if_reached (FALSE);
}

UmSchedule
um_generate_page_get_schedule (UmGeneratePage *self)
{
  g_return_val_if_fail (UM_IS_GENERATE_PAGE (self), um_arch_info (um_arch_fallback ())->schedule);
  return um_arch_info (self->arch)->schedule;
}

void
um_generate_page_set_settings (UmGeneratePage *self, UmSettings *settings)
{
  g_set_object (&self->settings, settings);
  g_object_bind_property (settings, "gen-length", self->length_spin, "value",
                          G_BINDING_BIDIRECTIONAL | G_BINDING_SYNC_CREATE);
  g_object_bind_property (settings, "steps", self->steps_spin, "value",
                          G_BINDING_BIDIRECTIONAL | G_BINDING_SYNC_CREATE);
  g_object_bind_property (settings, "block-length", self->block_spin, "value",
                          G_BINDING_BIDIRECTIONAL | G_BINDING_SYNC_CREATE);
  g_object_bind_property (settings, "temperature", self->temperature_spin, "value",
                          G_BINDING_BIDIRECTIONAL | G_BINDING_SYNC_CREATE);
  g_object_bind_property (settings, "cfg-scale", self->cfg_spin, "value",
                          G_BINDING_BIDIRECTIONAL | G_BINDING_SYNC_CREATE);
  g_object_bind_property (settings, "chat-template", self->chat_switch, "active",
                          G_BINDING_BIDIRECTIONAL | G_BINDING_SYNC_CREATE);
  /* Bound, not copied once: the model's recommendation may change it. */
  um_settings_bind_remasking (settings, G_OBJECT (self->remasking_row));
  um_settings_bind_alg (settings, G_OBJECT (self->alg_row));
  g_object_bind_property (settings, "alg-temp", self->alg_temp_spin, "value",
                          G_BINDING_BIDIRECTIONAL | G_BINDING_SYNC_CREATE);
  g_object_bind_property (settings, "eps", self->eps_spin, "value",
                          G_BINDING_BIDIRECTIONAL | G_BINDING_SYNC_CREATE);
  g_object_bind_property (settings, "top-p", self->top_p_spin, "value",
                          G_BINDING_BIDIRECTIONAL | G_BINDING_SYNC_CREATE);
  g_object_bind_property (settings, "top-k", self->top_k_spin, "value",
                          G_BINDING_BIDIRECTIONAL | G_BINDING_SYNC_CREATE);
  g_object_bind_property (settings, "greedy", self->greedy_switch, "active",
                          G_BINDING_BIDIRECTIONAL | G_BINDING_SYNC_CREATE);
  g_signal_connect_object (settings, "notify::family", G_CALLBACK (update_family), self, G_CONNECT_SWAPPED);
  g_signal_connect_object (settings, "sources-changed", G_CALLBACK (update_sources), self, G_CONNECT_SWAPPED);
  /* "Your choice — the model recommends …" depends on the value too. */
  g_signal_connect_object (settings, "notify", G_CALLBACK (update_sources), self, G_CONNECT_SWAPPED);
  um_settings_bind_fast_decoding (settings, G_OBJECT (self->fast_row), G_OBJECT (self->cache_row),
                                  G_OBJECT (self->rule_row), G_OBJECT (self->threshold_adjustment),
                                  G_OBJECT (self->factor_adjustment));
  update_family (self);
}

void
um_generate_page_set_prompt (UmGeneratePage *self, const char *text)
{
  gtk_text_buffer_set_text (gtk_text_view_get_buffer (self->prompt_view), text, -1);
}

UmDiffusionView *
um_generate_page_get_view (UmGeneratePage *self)
{
  return self->view;
}

GtkRange *
um_generate_page_get_step_scale (UmGeneratePage *self)
{
  return GTK_RANGE (self->step_scale);
}

const char *
um_generate_page_get_problem (UmGeneratePage *self)
{
  return self->problem;
}

GArray *
um_generate_page_get_last_ids (UmGeneratePage *self)
{
  return self->last_ids;
}

const GError *
um_generate_page_get_last_error (UmGeneratePage *self)
{
  return self->last_error;
}

static void
um_generate_page_get_property (GObject *object, guint id, GValue *value, GParamSpec *pspec)
{
  UmGeneratePage *self = UM_GENERATE_PAGE (object);
  switch (id)
    {
    case PROP_RUNNING: g_value_set_boolean (value, self->cancellable != NULL); break;
    case PROP_PROBLEM: g_value_set_string (value, self->problem); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
um_generate_page_dispose (GObject *object)
{
  UmGeneratePage *self = UM_GENERATE_PAGE (object);
  if (self->cancellable)
    g_cancellable_cancel (self->cancellable);
  gtk_widget_dispose_template (GTK_WIDGET (self), UM_TYPE_GENERATE_PAGE);
  g_clear_object (&self->settings);
  g_clear_object (&self->generator);
  G_OBJECT_CLASS (um_generate_page_parent_class)->dispose (object);
}

static void
um_generate_page_finalize (GObject *object)
{
  UmGeneratePage *self = UM_GENERATE_PAGE (object);
  g_clear_object (&self->cancellable);
  g_free (self->problem);
  g_free (self->last_text);
  um_limits_warning_clear (&self->limits);
  g_clear_pointer (&self->last_ids, g_array_unref);
  g_clear_error (&self->last_error);
  g_ptr_array_unref (self->constraint_rows);
  g_array_unref (self->snap_constraints);
  g_array_unref (self->run_constraints);
  g_ptr_array_unref (self->snap_words);
  g_ptr_array_unref (self->run_words);
  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    {
      g_free (self->descriptions[k]);
      g_free (self->source_notes[k]);
    }
  G_OBJECT_CLASS (um_generate_page_parent_class)->finalize (object);
}

static void
um_generate_page_class_init (UmGeneratePageClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);

  object_class->get_property = um_generate_page_get_property;
  object_class->dispose = um_generate_page_dispose;
  object_class->finalize = um_generate_page_finalize;

  props[PROP_RUNNING] = g_param_spec_boolean ("running", NULL, NULL, FALSE,
                                              G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  props[PROP_PROBLEM] = g_param_spec_string ("problem", NULL, NULL, NULL,
                                             G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties (object_class, N_PROPS, props);

  /* After every run, whatever ended it. */
  signals[FINISHED] = g_signal_new ("finished", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                                    0, NULL, NULL, NULL, G_TYPE_NONE, 0);

  g_type_ensure (UM_TYPE_DIFFUSION_VIEW);
  gtk_widget_class_set_template_from_resource (widget_class, "/io/github/unmask/Unmask/ui/um-generate-page.ui");
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, prompt_view);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, chat_switch);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, length_spin);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, steps_spin);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, block_spin);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, temperature_spin);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, cfg_spin);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, remasking_row);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, alg_row);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, alg_temp_spin);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, eps_spin);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, top_p_spin);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, top_k_spin);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, greedy_switch);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, params_group);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, fast_group);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, fast_row);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, cache_row);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, rule_row);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, threshold_row);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, factor_row);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, threshold_adjustment);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, factor_adjustment);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, constraints_group);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, problem_label);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, generate_button);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, stop_button);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, copy_button);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, view);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, step_scale);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, step_adjustment);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, stats_label);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, limits_revealer);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, limits_label);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, mode_button);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, reset_all_button);
  gtk_widget_class_bind_template_child (widget_class, UmGeneratePage, model_note_label);
  {
    static const char *const names[UM_GEN_N_KEYS] = {
      "length", "steps", "block", "temperature", "cfg", "remasking", "alg", "eps", "alg_temp", "top_p", "top_k", "greedy",
    };
    for (guint k = 0; k < UM_GEN_N_KEYS; k++)
      {
        g_autofree char *row = g_strdup_printf ("%s_row", names[k]);
        g_autofree char *reset = g_strdup_printf ("%s_reset", names[k]);
        /* The combo rows are bound as remasking_row and alg_row. */
        if (k != UM_GEN_KEY_REMASKING && k != UM_GEN_KEY_ALG)
          gtk_widget_class_bind_template_child_full (widget_class, row, FALSE,
                                                     G_STRUCT_OFFSET (UmGeneratePage, param_rows)
                                                     + k * sizeof (gpointer));
        gtk_widget_class_bind_template_child_full (widget_class, reset, FALSE,
                                                   G_STRUCT_OFFSET (UmGeneratePage, reset_buttons)
                                                   + k * sizeof (gpointer));
      }
  }
  gtk_widget_class_bind_template_callback (widget_class, um_generate_page_generate);
  gtk_widget_class_bind_template_callback (widget_class, um_generate_page_stop);
  gtk_widget_class_bind_template_callback (widget_class, on_copy_clicked);
  gtk_widget_class_bind_template_callback (widget_class, on_limits_dismiss_clicked);
  gtk_widget_class_bind_template_callback (widget_class, on_add_constraint_clicked);
}

static void
um_generate_page_init (UmGeneratePage *self)
{
  self->constraint_rows = g_ptr_array_new ();
  self->snap_constraints = g_array_new (FALSE, FALSE, sizeof (UmGenConstraint));
  self->run_constraints = g_array_new (FALSE, FALSE, sizeof (UmGenConstraint));
  self->snap_words = g_ptr_array_new_with_free_func (g_free);
  self->run_words = g_ptr_array_new_with_free_func (g_free);
  gtk_widget_init_template (GTK_WIDGET (self));
  /* The flap is the bin's child: not a bound template child, so that
   * disposing the template and the bin do not both unparent it. */
  self->flap = ADW_FLAP (adw_bin_get_child (ADW_BIN (self)));
  self->param_rows[UM_GEN_KEY_REMASKING] = ADW_ACTION_ROW (self->remasking_row);
  self->param_rows[UM_GEN_KEY_ALG] = ADW_ACTION_ROW (self->alg_row);
  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    self->descriptions[k] = g_strdup (adw_action_row_get_subtitle (self->param_rows[k]));
  um_diffusion_view_set_token_text_func (self->view, token_text, self, NULL);
  /* Without settings: the fallback family's schedule (LLaDA's blocks; the
   * other rows start hidden). */
  self->arch = um_arch_fallback ();
  {
    GtkWidget *extra[] = {
      GTK_WIDGET (self->fast_group), GTK_WIDGET (self->cache_row), GTK_WIDGET (self->rule_row),
      GTK_WIDGET (self->constraints_group),
    };
    G_STATIC_ASSERT (G_N_ELEMENTS (option_props) == UM_GEN_N_KEYS + G_N_ELEMENTS (extra));
    for (guint k = 0; k < UM_GEN_N_KEYS; k++)
      self->option_widgets[k] = GTK_WIDGET (self->param_rows[k]);
    for (guint i = 0; i < G_N_ELEMENTS (extra); i++)
      self->option_widgets[UM_GEN_N_KEYS + i] = extra[i];
  }
  gtk_text_buffer_set_text (gtk_text_view_get_buffer (self->prompt_view),
                            _("What is free software? Answer in two sentences."), -1);
  g_signal_connect_swapped (self->length_spin, "value-changed", G_CALLBACK (on_param_changed), self);
  g_signal_connect_swapped (self->steps_spin, "value-changed", G_CALLBACK (on_param_changed), self);
  g_signal_connect_swapped (self->block_spin, "value-changed", G_CALLBACK (on_param_changed), self);
  g_signal_connect_swapped (self->temperature_spin, "value-changed", G_CALLBACK (on_param_changed), self);
  g_signal_connect_swapped (self->cfg_spin, "value-changed", G_CALLBACK (on_param_changed), self);
  g_signal_connect_swapped (self->remasking_row, "notify::selected", G_CALLBACK (on_param_changed), self);
  g_signal_connect_swapped (self->alg_row, "notify::selected", G_CALLBACK (on_param_changed), self);
  g_signal_connect_swapped (self->alg_temp_spin, "value-changed", G_CALLBACK (on_param_changed), self);
  g_signal_connect_swapped (self->eps_spin, "value-changed", G_CALLBACK (on_param_changed), self);
  g_signal_connect_swapped (self->top_p_spin, "value-changed", G_CALLBACK (on_param_changed), self);
  g_signal_connect_swapped (self->top_k_spin, "value-changed", G_CALLBACK (on_param_changed), self);
  g_signal_connect_swapped (self->greedy_switch, "notify::active", G_CALLBACK (on_param_changed), self);
  g_signal_connect (self->step_adjustment, "value-changed", G_CALLBACK (on_scale_changed), self);
  g_signal_connect_swapped (self->fast_row, "notify::enable-expansion", G_CALLBACK (on_param_changed), self);
  g_signal_connect_swapped (self->cache_row, "notify::selected", G_CALLBACK (on_param_changed), self);
  g_signal_connect_swapped (self->rule_row, "notify::selected", G_CALLBACK (on_rule_selected), self);
  g_signal_connect_swapped (self->threshold_adjustment, "value-changed", G_CALLBACK (on_param_changed), self);
  g_signal_connect_swapped (self->factor_adjustment, "value-changed", G_CALLBACK (on_param_changed), self);
  update_problem (self);
}

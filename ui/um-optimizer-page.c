/* um-optimizer-page.c — the Optimizer page (see um-optimizer-page.h).
 *
 * Planning reads only the model's metadata and the hardware (in a thread,
 * both kept while the page lives); every knob change re-plans on the main
 * thread, which is arithmetic. Writes go through the backend: a backup
 * first, then the profile, then the window reloads the model under it
 * (um-optimizer-changes.c).
 */
#include "config.h"

#include "um-optimizer-page-private.h"

#include <glib/gi18n.h>
#include <string.h>

#include "um-backups.h"
#include "um-plan-bars.h"
#include "um-settings.h"
#include "um-window.h"

/* The weight formats offered: the mode's own, as stored, what the
 * converter writes. */
static const char *const format_ids[] = { "", "stored", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_0" };

G_DEFINE_FINAL_TYPE (UmOptimizerPage, um_optimizer_page, ADW_TYPE_BIN)

enum { PROP_0, PROP_BUSY, PROP_STATUS, N_PROPS };
static GParamSpec *props[N_PROPS];

static void update_plan (UmOptimizerPage *self);
static void update_buttons (UmOptimizerPage *self);

/* ---- helpers ---- */

UmWindow *
um_optimizer_page_get_window (UmOptimizerPage *self)
{
  GtkRoot *root = gtk_widget_get_root (GTK_WIDGET (self));
  return UM_IS_WINDOW (root) ? UM_WINDOW (root) : NULL;
}

const char *
um_optimizer_page_config_dir (UmOptimizerPage *self)
{
  UmWindow *win = um_optimizer_page_get_window (self);
  return win ? um_window_get_config_dir (win) : g_getenv ("UNMASK_CONFIG_DIR");
}

void
um_optimizer_page_set_status (UmOptimizerPage *self, const char *text)
{
  if (g_strcmp0 (text, self->status) == 0)
    return;
  g_free (self->status);
  self->status = g_strdup (text);
  gtk_label_set_text (self->status_label, text ? text : "");
  gtk_widget_set_visible (GTK_WIDGET (self->status_label), text != NULL);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_STATUS]);
}

void
um_optimizer_page_set_status_error (UmOptimizerPage *self, const char *what, const GError *error)
{
  g_autofree char *text = g_strdup_printf ("%s: %s", what, error->message);
  um_optimizer_page_set_status (self, text);
}

static void
set_busy (UmOptimizerPage *self, gboolean busy)
{
  if (self->busy == busy)
    return;
  self->busy = busy;
  update_buttons (self);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_BUSY]);
}

static void
toast (UmOptimizerPage *self, const char *text)
{
  UmWindow *win = um_optimizer_page_get_window (self);
  if (win != NULL)
    um_window_add_toast (win, text);
}

/* The generation the plan is for: the window's settings. */
void
um_optimizer_page_current_shape (UmOptimizerPage *self, UmPlanShape *shape)
{
  UmWindow *win = um_optimizer_page_get_window (self);
  UmGenParams params;

  um_plan_shape_init (shape);
  if (win == NULL || um_window_get_settings (win) == NULL)
    return;
  um_settings_get_params (um_window_get_settings (win), &params);
  um_settings_plan_shape (&params, um_arch_info (um_settings_get_arch (um_window_get_settings (win)))->schedule,
                          shape);
}

/* ---- the controls ---- */

/* Mode rows: Standard, Standard 8-bit, Extreme; the Level row picks
 * how extreme, and is shown only for Extreme. */
enum { MODE_ROW_STANDARD, MODE_ROW_8BIT, MODE_ROW_EXTREME };

static UmMemMode
selected_mode (UmOptimizerPage *self)
{
  guint level = adw_combo_row_get_selected (self->level_row);

  if (level == GTK_INVALID_LIST_POSITION)
    level = 0;
  switch (adw_combo_row_get_selected (self->mode_row))
    {
    case MODE_ROW_EXTREME: return (UmMemMode) MIN (UM_MEM_EXTREME_MILD + level, UM_MEM_EXTREME_AGGRESSIVE);
    case MODE_ROW_8BIT: return UM_MEM_STANDARD_8BIT;
    default: return UM_MEM_STANDARD;
    }
}

static void
update_level_row (UmOptimizerPage *self)
{
  gtk_widget_set_visible (GTK_WIDGET (self->level_row),
                          adw_combo_row_get_selected (self->mode_row) == MODE_ROW_EXTREME);
}

static void
show_mode (UmOptimizerPage *self, UmMemMode mode)
{
  if (um_mem_mode_is_extreme (mode))
    {
      adw_combo_row_set_selected (self->mode_row, MODE_ROW_EXTREME);
      adw_combo_row_set_selected (self->level_row, (guint) (mode - UM_MEM_EXTREME_MILD));
    }
  else
    adw_combo_row_set_selected (self->mode_row, mode == UM_MEM_STANDARD_8BIT ? MODE_ROW_8BIT : MODE_ROW_STANDARD);
  update_level_row (self);
}

static char *
format_budget (guint64 bytes)
{
  if (bytes == 0)
    return g_strdup ("");
  if (bytes % (1ull << 30) == 0)
    return g_strdup_printf ("%" G_GUINT64_FORMAT " GiB", bytes >> 30);
  if (bytes % (1ull << 20) == 0)
    return g_strdup_printf ("%" G_GUINT64_FORMAT " MiB", bytes >> 20);
  if (bytes % (1ull << 10) == 0)
    return g_strdup_printf ("%" G_GUINT64_FORMAT " KiB", bytes >> 10);
  return g_strdup_printf ("%" G_GUINT64_FORMAT, bytes);
}

/* The budget typed in; empty is 0 (the whole device). FALSE if unreadable. */
gboolean
um_optimizer_page_read_budget (UmOptimizerPage *self, guint64 *out)
{
  g_autofree char *text = g_strstrip (g_strdup (gtk_editable_get_text (GTK_EDITABLE (self->budget_row))));

  *out = 0;
  if (text[0] == '\0')
    return TRUE;
  /* "1,5 GiB" in languages that write a decimal comma. */
  g_strdelimit (text, ",", '.');
  return um_parse_size (text, out);
}

void
um_optimizer_page_read_options (UmOptimizerPage *self, UmMemOptions *o)
{
  UmMemMode mode = selected_mode (self);
  guint format = adw_combo_row_get_selected (self->format_row);

  um_mem_options_init (o, mode);
  if (format < G_N_ELEMENTS (format_ids))
    g_strlcpy (o->weight_format, format_ids[format], sizeof o->weight_format);
  if (mode == UM_MEM_EXTREME_AGGRESSIVE)
    {
      /* One slot cannot stream: 1 means at least two. */
      int layers = gtk_spin_button_get_value_as_int (self->layers_spin);
      o->resident_layers = layers == 1 ? 2 : layers;
      o->host_zstd = gtk_switch_get_active (self->zstd_switch);
    }
  o->prune_heads = gtk_spin_button_get_value (self->heads_spin) / 100.0;
  o->prune_ffn = gtk_spin_button_get_value (self->ffn_spin) / 100.0;
  o->row_chunk = gtk_spin_button_get_value_as_int (self->chunk_spin);
  /* The rows are in UmExpertPlacement's order. */
  o->experts = (UmExpertPlacement) MIN (adw_combo_row_get_selected (self->experts_row), UM_EXPERTS_FETCH);
  /* The experts' copy in RAM can be compressed too. */
  if (o->experts == UM_EXPERTS_HOST || o->experts == UM_EXPERTS_FETCH)
    o->host_zstd = gtk_switch_get_active (self->zstd_switch);
}

/* Whether the zstd switch means something: layers streamed, or experts
 * kept in RAM. */
static gboolean
zstd_applies (UmOptimizerPage *self)
{
  guint experts = adw_combo_row_get_selected (self->experts_row);
  return selected_mode (self) == UM_MEM_EXTREME_AGGRESSIVE || experts == UM_EXPERTS_HOST
         || experts == UM_EXPERTS_FETCH;
}

static gboolean
options_are_defaults (const UmMemOptions *o)
{
  return o->weight_format[0] == '\0' && o->resident_layers == 0 && !o->host_zstd && o->prune_heads == 0
         && o->prune_ffn == 0 && o->row_chunk == 0 && o->experts == UM_EXPERTS_AUTO && o->expert_slots == 0;
}

static void
fill_controls (UmOptimizerPage *self, const UmMemOptions *o, guint64 budget)
{
  g_autofree char *budget_text = format_budget (budget);
  guint format = 0;

  self->filling = TRUE;
  show_mode (self, o->mode);
  for (guint i = 0; i < G_N_ELEMENTS (format_ids); i++)
    if (g_ascii_strcasecmp (o->weight_format, format_ids[i]) == 0)
      format = i;
  adw_combo_row_set_selected (self->format_row, format);
  gtk_spin_button_set_value (self->layers_spin, o->resident_layers);
  gtk_switch_set_active (self->zstd_switch, o->host_zstd);
  gtk_spin_button_set_value (self->heads_spin, o->prune_heads * 100.0);
  gtk_spin_button_set_value (self->ffn_spin, o->prune_ffn * 100.0);
  gtk_spin_button_set_value (self->chunk_spin, o->row_chunk);
  adw_combo_row_set_selected (self->experts_row, (guint) o->experts);
  gtk_editable_set_text (GTK_EDITABLE (self->budget_row), budget_text);
  self->filling = FALSE;
}

/* The mode and knobs in use for the window's model: its override if the
 * profile has one. */
static void
effective_options (UmOptimizerPage *self, const UmProfile *p, UmMemOptions *mem, guint64 *budget)
{
  g_autofree char *id = self->model_path ? um_model_identity (self->model_path) : NULL;
  UmEngineOptions o;

  um_engine_options_init (&o);
  um_profile_to_engine_options (p, id, &o);
  *mem = o.mem;
  *budget = o.memory_budget;
}

/* Puts @mem and @budget into @p: into the model's override if it has one
 * (that is what its loads use), else as the profile's mode. */
void
um_optimizer_page_profile_put_options (UmOptimizerPage *self, UmProfile *p, const UmMemOptions *mem, guint64 budget)
{
  g_autofree char *id = self->model_path ? um_model_identity (self->model_path) : NULL;
  UmProfileOverride *ov = NULL;

  for (guint i = 0; id != NULL && p->overrides != NULL && i < p->overrides->len; i++)
    {
      UmProfileOverride *o = g_ptr_array_index (p->overrides, i);
      if (g_strcmp0 (o->model_id, id) == 0)
        ov = o;
    }
  if (ov != NULL)
    ov->mem = *mem;
  else
    {
      um_profile_set_mode (p, mem->mode);
      p->mem = *mem;
    }
  p->memory_budget = budget;
  /* This page judges what fits with the headroom kept free: loads keep it
   * too (extreme-aggressive sizes its slots within it). */
  p->headroom = UM_OPTIMIZER_HEADROOM;
}

/* Whether the controls say something else than the profile in use. */
static void
update_dirty (UmOptimizerPage *self)
{
  g_autoptr(UmProfile) p = NULL;
  UmMemOptions o;
  guint64 budget;

  self->dirty = TRUE;
  if (self->profile != NULL && um_optimizer_page_read_budget (self, &budget))
    {
      um_optimizer_page_read_options (self, &o);
      p = um_profile_copy (self->profile);
      um_optimizer_page_profile_put_options (self, p, &o, budget);
      /* The headroom is no control here: Apply writes the page's, but it
       * alone does not make the controls say something else. */
      p->headroom = self->profile->headroom;
      self->dirty = !um_profile_equal (p, self->profile);
    }
  /* Back to what is in use: later edits are made on it. */
  if (!self->dirty)
    self->stale = FALSE;
}

static void
update_buttons (UmOptimizerPage *self)
{
  gboolean idle = !self->busy;

  gtk_widget_set_sensitive (GTK_WIDGET (self->optimize_button), idle);
  gtk_widget_set_sensitive (GTK_WIDGET (self->apply_button), idle && self->dirty);
  gtk_widget_set_sensitive (GTK_WIDGET (self->restore_button), idle && self->has_original);
  gtk_widget_set_sensitive (GTK_WIDGET (self->undo_button), idle && self->has_backup);
}

/* The controls back to the profile in use. */
void
um_optimizer_page_show_profile_controls (UmOptimizerPage *self)
{
  UmMemOptions mem;
  guint64 budget;

  if (self->profile == NULL)
    return;
  self->stale = FALSE;
  effective_options (self, self->profile, &mem, &budget);
  fill_controls (self, &mem, budget);
  update_plan (self);
}

/* ---- hardware ---- */

static void
show_hardware (UmOptimizerPage *self)
{
  const UmHardware *hw = self->hw;
  g_autoptr(GString) gpus = g_string_new (NULL);

  if (hw == NULL)
    {
      adw_action_row_set_subtitle (self->gpu_row, _("Looking…"));
      adw_action_row_set_subtitle (self->ram_row, "");
      adw_action_row_set_subtitle (self->cpu_row, "");
      return;
    }
  for (guint i = 0; hw->gpus != NULL && i < hw->gpus->len; i++)
    {
      const UmGpuDevice *d = &g_array_index (hw->gpus, UmGpuDevice, i);
      g_autofree char *free_text = um_format_bytes (d->free_bytes);
      g_autofree char *total = um_format_bytes (d->total_bytes);
      if (gpus->len > 0)
        g_string_append_c (gpus, '\n');
      /* Translators: a graphics card, e.g. "NVIDIA RTX 4060: 7.1 GiB free of 8.0 GiB" */
      g_string_append_printf (gpus, _("%s: %s free of %s"), d->name, free_text, total);
    }
  if (gpus->len == 0 && hw->why_no_gpu != NULL)
    /* Translators: %s says why, e.g. "this build of Unmask has no CUDA support" */
    g_string_append_printf (gpus, _("No usable GPU, the model runs on the processor: %s"), hw->why_no_gpu);
  else if (gpus->len == 0)
    g_string_append (gpus, _("No usable GPU: the model runs on the processor"));
  adw_action_row_set_subtitle (self->gpu_row, gpus->str);
  {
    g_autofree char *avail = um_format_bytes (hw->ram_available);
    g_autofree char *total = um_format_bytes (hw->ram_total);
    /* Translators: RAM, e.g. "21.3 GiB available of 31.2 GiB" */
    g_autofree char *text = g_strdup_printf (_("%s available of %s"), avail, total);
    adw_action_row_set_subtitle (self->ram_row, text);
  }
  {
    g_autofree char *cores = g_strdup_printf (g_dngettext (GETTEXT_PACKAGE, "%d core", "%d cores", hw->cores),
                                              hw->cores);
    g_autofree char *text = hw->cpu_name && hw->cpu_name[0] ? g_strdup_printf ("%s · %s", hw->cpu_name, cores)
                                                              : g_strdup (cores);
    adw_action_row_set_subtitle (self->cpu_row, text);
  }
}

/* UNMASK_DEVICE=cpu keeps the engine off the GPU: plan as it will run. */
static void
apply_device_choice (UmHardware *hw)
{
  UmDeviceKind kind = UM_DEVICE_AUTO;

  um_device_kind_from_string (g_getenv ("UNMASK_DEVICE"), &kind);
  if (kind != UM_DEVICE_CPU || hw->gpus == NULL || hw->gpus->len == 0)
    return;
  g_array_set_size (hw->gpus, 0);
  g_free (hw->why_no_gpu);
  hw->why_no_gpu = g_strdup (_("UNMASK_DEVICE=cpu keeps it off the GPU"));
}

/* ---- the plan ---- */

/* Where a plan with other knobs than the mode's runs: as the optimizer
 * planned the table (its capacity, and on a GPU its overhead estimate). */
static void
make_target (UmOptimizerPage *self, UmPlanTarget *t)
{
  /* The optimizer's own target, so the knobs' plan compares with its table. */
  *t = self->result->target;
}

static void
show_no_plan (UmOptimizerPage *self, const char *note)
{
  self->have_plan = FALSE;
  um_plan_bars_set_plan (self->plan_bars, NULL);
  um_plan_bars_set_note (self->plan_bars, note);
}

/* "7.3 B": parameter counts as people quote them. */
static char *
format_params (guint64 n)
{
  if (n >= 1000000000u)
    /* Translators: a parameter count in billions, e.g. "7.3 B" */
    return g_strdup_printf (C_("parameters", "%.1f B"), n / 1e9);
  if (n >= 1000000u)
    /* Translators: a parameter count in millions, e.g. "950.0 M" */
    return g_strdup_printf (C_("parameters", "%.1f M"), n / 1e6);
  return g_strdup_printf ("%" G_GUINT64_FORMAT, n);
}

/* The model planned for: its family and size; a mixture of experts says how
 * much of it one token uses (the plan holds every expert). */
static void
update_model_summary (UmOptimizerPage *self)
{
  const UmModelConfig *cfg = self->model ? &self->model->cfg : NULL;
  g_autofree char *text = NULL;

  if (cfg != NULL)
    {
      const char *family = um_arch_info (cfg->arch)->name;
      g_autofree char *total = format_params (um_model_config_n_params (cfg));

      if (cfg->n_experts > 0)
        {
          g_autofree char *active = format_params (um_model_config_n_active_params (cfg));
          /* Translators: a mixture-of-experts model, e.g. "LLaDA-MoE · 7.3 B parameters, 1.4 B active per token (8 of 64 experts)" */
          text = g_strdup_printf (_("%s · %s parameters, %s active per token (%u of %u experts)"), family, total,
                                  active, cfg->n_experts_used, cfg->n_experts);
        }
      else
        /* Translators: e.g. "Dream · 7.6 B parameters" */
        text = g_strdup_printf (_("%s · %s parameters"), family, total);
    }
  adw_preferences_group_set_description (self->plan_group, text);
}

const char *
um_optimizer_page_get_model_summary (UmOptimizerPage *self)
{
  g_return_val_if_fail (UM_IS_OPTIMIZER_PAGE (self), NULL);
  return adw_preferences_group_get_description (self->plan_group);
}

/* A mixture of experts whose plan does not fit with its routed experts on
 * the device: offers the placement off it (the faster by the plan's time
 * model) when that fits. */
static void
update_offer (UmOptimizerPage *self, const UmMemOptions *o, const UmPlanShape *shape)
{
  const UmPlan *p = &self->plan;
  UmMemOptions off = *o;
  UmPlanTarget target;
  UmPlan q;
  g_autofree char *need = NULL, *cap = NULL, *subtitle = NULL;

  if (p->fits || p->expert_bytes == 0 || p->experts != UM_EXPERTS_RESIDENT || p->device_capacity == 0)
    return;
  off.experts = p->expert_seconds[UM_EXPERTS_HOST] <= p->expert_seconds[UM_EXPERTS_FETCH] ? UM_EXPERTS_HOST
                                                                                        : UM_EXPERTS_FETCH;
  off.resident_layers = 0;
  make_target (self, &target);
  if (!um_plan_compute (self->model, &off, shape, &target, &q, NULL) || !q.fits
      || q.device_peak > (1.0 - UM_OPTIMIZER_HEADROOM) * q.device_capacity)
    return;
  self->offer = off.experts;
  need = um_format_bytes (q.device_peak);
  cap = um_format_bytes (q.device_capacity);
  subtitle = off.experts == UM_EXPERTS_HOST
               /* Translators: e.g. "Computed by the processor: needs 620.5 MiB of 2.0 GiB" */
               ? g_strdup_printf (_("Computed by the processor: needs %s of %s"), need, cap)
               /* Translators: e.g. "Fetched into device slots as the tokens are routed: needs 650.1 MiB of 2.0 GiB" */
               : g_strdup_printf (_("Fetched into device slots as the tokens are routed: needs %s of %s"), need, cap);
  adw_action_row_set_subtitle (self->offer_row, subtitle);
  gtk_widget_set_visible (self->offer_list, TRUE);
}

static void
on_offer_clicked (UmOptimizerPage *self)
{
  /* The knobs then say it: the plan, Apply and the profile follow. */
  adw_expander_row_set_expanded (self->knobs_row, TRUE);
  adw_combo_row_set_selected (self->experts_row, (guint) self->offer);
}

const char *
um_optimizer_page_get_offer (UmOptimizerPage *self)
{
  g_return_val_if_fail (UM_IS_OPTIMIZER_PAGE (self), NULL);
  return gtk_widget_get_visible (self->offer_list) ? adw_action_row_get_subtitle (self->offer_row) : NULL;
}

void
um_optimizer_page_use_offer (UmOptimizerPage *self)
{
  g_return_if_fail (UM_IS_OPTIMIZER_PAGE (self));
  if (gtk_widget_get_visible (self->offer_list))
    g_signal_emit_by_name (self->offer_button, "clicked");
}

static void
update_plan (UmOptimizerPage *self)
{
  g_autoptr(GError) error = NULL;
  UmPlanShape shape;
  UmMemOptions o;
  guint64 budget = 0;
  gboolean budget_ok = um_optimizer_page_read_budget (self, &budget);

  update_model_summary (self);

  if (budget_ok)
    gtk_widget_remove_css_class (GTK_WIDGET (self->budget_row), "error");
  else
    gtk_widget_add_css_class (GTK_WIDGET (self->budget_row), "error");
  gtk_widget_set_sensitive (GTK_WIDGET (self->layers_row), selected_mode (self) == UM_MEM_EXTREME_AGGRESSIVE);
  gtk_widget_set_sensitive (GTK_WIDGET (self->zstd_row), zstd_applies (self));
  gtk_widget_set_visible (GTK_WIDGET (self->experts_row), self->model != NULL && self->model->cfg.n_experts > 0);
  gtk_widget_set_visible (self->offer_list, FALSE);
  update_dirty (self);
  update_buttons (self);

  if (self->model_path == NULL && self->model == NULL)
    {
      show_no_plan (self, _("Open a model first: the plan is made for a model, from its file’s description alone."));
      return;
    }
  if (self->model == NULL || self->hw == NULL)
    {
      show_no_plan (self, _("Reading the model’s description…"));
      return;
    }
  if (!budget_ok)
    {
      show_no_plan (self, _("The budget is not a size: write it like 3 GiB or 512 MiB, or leave it empty."));
      return;
    }
  um_optimizer_page_current_shape (self, &shape);
  g_clear_pointer (&self->result, um_optimize_result_free);
  self->result = um_optimizer_plan (self->model, self->hw, &shape, budget, UM_OPTIMIZER_HEADROOM, &error);
  if (self->result == NULL)
    {
      g_autofree char *msg = g_strdup_printf (_("Could not plan: %s"), error->message);
      show_no_plan (self, msg);
      return;
    }
  um_optimizer_page_read_options (self, &o);
  if (!um_mem_options_validate (&o, &error))
    {
      show_no_plan (self, error->message);
      return;
    }
  /* "Fits" as the optimizer means it: with the headroom kept free. */
  if (options_are_defaults (&o) && o.mode < self->result->table->len)
    {
      self->plan = g_array_index (self->result->table, UmPlan, o.mode);
      self->plan.fits = um_optimize_result_fits (self->result, o.mode);
    }
  else
    {
      UmPlanTarget target;
      make_target (self, &target);
      if (!um_plan_compute (self->model, &o, &shape, &target, &self->plan, &error))
        {
          g_autofree char *msg = g_strdup_printf (_("Could not plan: %s"), error->message);
          show_no_plan (self, msg);
          return;
        }
      if (self->plan.device_capacity > 0)
        self->plan.fits = self->plan.fits && self->plan.device_peak
                                             <= (1.0 - UM_OPTIMIZER_HEADROOM) * self->plan.device_capacity;
    }
  self->have_plan = TRUE;
  um_plan_bars_set_cuda (self->plan_bars, self->result->cuda);
  um_plan_bars_set_plan (self->plan_bars, &self->plan);
  update_offer (self, &o, &shape);
  {
    g_autofree char *note = NULL;
    if (self->result->chosen >= 0)
      /* Translators: %s is the backend's reason, e.g. "extreme-moderate: the fastest mode that fits 7.2 of 8.0 GiB" */
      note = g_strdup_printf (_("Optimize would choose %s"), self->result->reason ? self->result->reason : "");
    else
      /* Translators: %s is the backend's reason, e.g. "no mode fits a 600.0 KiB budget on the CPU with 10 % kept free: …" */
      note = g_strdup_printf (_("Optimize finds nothing that fits (%s): shorten the answer, raise the budget or free memory."),
                              self->result->reason ? self->result->reason : "");
    um_plan_bars_set_note (self->plan_bars, note);
  }
}

static void
update_measured (UmOptimizerPage *self)
{
  g_autofree char *text = NULL;

  if (self->engine == NULL)
    {
      gtk_widget_set_visible (self->loaded_list, FALSE);
      g_clear_pointer (&self->measured, g_free);
      return;
    }
  {
    const UmPlan *p = um_engine_get_plan (self->engine);
    UmEngineMemory m;
    g_autofree char *dev_plan = NULL, *dev_meas = NULL, *host_plan = NULL, *host_meas = NULL;

    um_engine_get_memory (self->engine, &m);
    dev_plan = um_format_bytes (p->device_peak);
    dev_meas = um_format_bytes (m.device_peak);
    host_plan = um_format_bytes (MAX (p->host_peak, p->host_load_peak));
    host_meas = um_format_bytes (m.host_peak);
    /* Translators: predicted against measured memory of the loaded model,
     * e.g. "extreme-moderate, weights as Q4_K_M. Device: predicted 3.1 GiB,
     * measured 3.0 GiB. RAM: predicted 1.2 GiB, measured 1.1 GiB." */
    text = g_strdup_printf (_("%s, weights as %s. Device: predicted %s, measured %s. RAM: predicted %s, measured %s."),
                            um_mem_mode_to_string (p->mode), p->weight_format, dev_plan, dev_meas, host_plan,
                            host_meas);
  }
  if (g_strcmp0 (text, self->measured) != 0)
    {
      g_free (self->measured);
      self->measured = g_steal_pointer (&text);
      adw_action_row_set_subtitle (self->loaded_row, self->measured);
    }
  gtk_widget_set_visible (self->loaded_list, TRUE);
}

static void
on_monitor_updated (UmMemoryMonitor *monitor, UmOptimizerPage *self)
{
  if (gtk_widget_get_mapped (GTK_WIDGET (self)))
    update_measured (self);
}

/* ---- history ---- */

static void on_history_restore_clicked (GtkButton *button, UmOptimizerPage *self);

static GtkWidget *
history_row_new (UmOptimizerPage *self, const UmBackup *b)
{
  GtkWidget *row = adw_action_row_new ();
  GtkWidget *button;
  g_autoptr(GDateTime) t = g_date_time_new_from_unix_local (b->time);
  /* Translators: when a backup was made, see g_date_time_format (); e.g. "24 November 2026, 10:53:01"
   * xgettext:no-c-format */
  g_autofree char *when = t ? g_date_time_format (t, _("%-e %B %Y, %H:%M:%S")) : g_strdup ("?");
  g_autofree char *subtitle = b->summary ? g_strdup_printf ("%s · %s", when, b->summary) : g_strdup (when);
  g_autofree char *accessible = NULL;
  gboolean original = g_strcmp0 (b->id, "original") == 0;

  adw_preferences_row_set_use_markup (ADW_PREFERENCES_ROW (row), FALSE);
  adw_preferences_row_set_title (ADW_PREFERENCES_ROW (row),
                                 original ? _("Original settings") : (b->reason ? b->reason : b->id));
  adw_action_row_set_subtitle (ADW_ACTION_ROW (row), subtitle);
  adw_action_row_set_subtitle_lines (ADW_ACTION_ROW (row), 2);
  if (!b->valid)
    {
      GtkWidget *icon = gtk_image_new_from_icon_name ("dialog-warning-symbolic");
      g_autofree char *why = g_strdup_printf (_("This backup cannot be restored: %s"),
                                              b->problem ? b->problem : _("it is damaged"));
      gtk_widget_add_css_class (icon, "warning");
      gtk_widget_set_tooltip_text (icon, why);
      gtk_accessible_update_property (GTK_ACCESSIBLE (icon), GTK_ACCESSIBLE_PROPERTY_LABEL, why, -1);
      adw_action_row_add_prefix (ADW_ACTION_ROW (row), icon);
    }
  button = gtk_button_new_with_label (_("Restore"));
  gtk_widget_set_valign (button, GTK_ALIGN_CENTER);
  gtk_widget_set_sensitive (button, b->valid);
  /* Translators: accessible name of a history row's Restore button, %s is when the backup was made */
  accessible = g_strdup_printf (_("Restore the backup of %s"), when);
  gtk_widget_set_tooltip_text (button, accessible);
  gtk_accessible_update_property (GTK_ACCESSIBLE (button), GTK_ACCESSIBLE_PROPERTY_LABEL, accessible, -1);
  g_object_set_data_full (G_OBJECT (button), "um-backup-id", g_strdup (b->id), g_free);
  g_object_set_data_full (G_OBJECT (row), "um-backup-id", g_strdup (b->id), g_free);
  g_object_set_data (G_OBJECT (row), "um-backup-valid", GINT_TO_POINTER (b->valid));
  g_signal_connect_object (button, "clicked", G_CALLBACK (on_history_restore_clicked), self, 0);
  adw_action_row_add_suffix (ADW_ACTION_ROW (row), button);
  return row;
}

static void
update_history (UmOptimizerPage *self)
{
  g_autoptr(GPtrArray) list = NULL;
  g_autofree char *notice = NULL;
  g_autoptr(GError) error = NULL;
  GtkListBoxRow *row;

  while ((row = gtk_list_box_get_row_at_index (self->history_list, 0)) != NULL)
    gtk_list_box_remove (self->history_list, GTK_WIDGET (row));
  self->has_original = self->has_backup = FALSE;
  list = um_backups_list (um_optimizer_page_config_dir (self), &notice, &error);
  if (notice != NULL && um_optimizer_page_get_window (self) != NULL)
    um_window_show_notice (um_optimizer_page_get_window (self), notice);
  if (list == NULL)
    {
      um_optimizer_page_set_status_error (self, _("Could not read the backups"), error);
      update_buttons (self);
      return;
    }
  /* Newest first. */
  for (guint i = list->len; i-- > 0;)
    {
      const UmBackup *b = g_ptr_array_index (list, i);
      gtk_list_box_append (self->history_list, history_row_new (self, b));
      if (b->valid)
        {
          self->has_backup = TRUE;
          if (g_strcmp0 (b->id, "original") == 0)
            self->has_original = TRUE;
        }
    }
  update_buttons (self);
}

/* ---- optimize ---- */

typedef struct {
  char       *path;       /* the model to read, or NULL to keep the one read */
  char       *target;     /* the model to optimize for, or NULL: only plan */
  UmModel    *model;
  UmHardware *hw;
} Prepare;

static void
prepare_free (Prepare *p)
{
  g_free (p->path);
  g_free (p->target);
  g_clear_pointer (&p->model, um_model_free);
  g_clear_pointer (&p->hw, um_hardware_free);
  g_free (p);
}

static void
prepare_thread (GTask *task, gpointer source, gpointer data, GCancellable *cancellable)
{
  Prepare *p = data;
  GError *error = NULL;

  p->hw = um_hardware_probe ();
  if (p->path != NULL)
    {
      /* Metadata, tokenizer and the tensor table; no weight is read. */
      p->model = um_model_load (p->path, cancellable, &error);
      if (p->model == NULL)
        {
          g_task_return_error (task, error);
          return;
        }
    }
  g_task_return_boolean (task, TRUE);
}

static void
on_prepared (GObject *source, GAsyncResult *result, gpointer user_data)
{
  UmOptimizerPage *self = UM_OPTIMIZER_PAGE (source);
  Prepare *p = g_task_get_task_data (G_TASK (result));
  g_autoptr(GError) error = NULL;
  gboolean ok = g_task_propagate_boolean (G_TASK (result), &error);

  if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    return;
  if (g_task_get_cancellable (G_TASK (result)) == self->cancellable)
    g_clear_object (&self->cancellable);
  if (p->hw != NULL)
    {
      g_clear_pointer (&self->hw, um_hardware_free);
      self->hw = g_steal_pointer (&p->hw);
      apply_device_choice (self->hw);
      show_hardware (self);
    }
  if (!ok)
    {
      g_autofree char *text = g_strdup_printf (_("Could not read the model: %s"), error->message);
      um_optimizer_page_set_status (self, text);
      show_no_plan (self, text);
      set_busy (self, FALSE);
      return;
    }
  if (p->model != NULL)
    {
      g_clear_pointer (&self->model, um_model_free);
      self->model = g_steal_pointer (&p->model);
      g_free (self->prepared_path);
      self->prepared_path = g_strdup (p->path);
    }
  update_plan (self);
  if (p->target != NULL)
    {
      um_optimizer_page_do_optimize (self, p->target);
      set_busy (self, FALSE);
    }
}

/* Probes the hardware and reads @path's metadata (unless read already) in a
 * thread; with @optimize, optimizes for it when done. */
static void
prepare (UmOptimizerPage *self, const char *path, gboolean optimize)
{
  g_autoptr(GTask) task = NULL;
  Prepare *p;

  if (self->cancellable != NULL)
    g_cancellable_cancel (self->cancellable);
  g_clear_object (&self->cancellable);
  self->cancellable = g_cancellable_new ();
  p = g_new0 (Prepare, 1);
  if (path != NULL && (self->model == NULL || g_strcmp0 (path, self->prepared_path) != 0))
    p->path = g_strdup (path);
  if (optimize)
    p->target = g_strdup (path);
  task = g_task_new (self, self->cancellable, on_prepared, NULL);
  g_task_set_task_data (task, p, (GDestroyNotify) prepare_free);
  g_task_run_in_thread (task, prepare_thread);
}

void
um_optimizer_page_optimize (UmOptimizerPage *self, const char *model_path)
{
  UmWindow *win;
  const char *path;
  g_autoptr(GError) error = NULL;

  g_return_if_fail (UM_IS_OPTIMIZER_PAGE (self));

  win = um_optimizer_page_get_window (self);
  path = model_path ? model_path : (win ? um_window_get_model_path (win) : self->model_path);
  if (self->busy)
    return;
  if (path == NULL)
    {
      um_optimizer_page_set_status (self, _("Open a model first: the optimizer plans for a model."));
      toast (self, _("Open a model first"));
      return;
    }
  if (!um_optimizer_page_check_idle (self, &error))
    {
      um_optimizer_page_set_status (self, error->message);
      return;
    }
  set_busy (self, TRUE);
  um_optimizer_page_set_status (self, _("Planning every mode for this computer…"));
  prepare (self, path, TRUE);
}

/* ---- public ---- */

void
um_optimizer_page_set_model (UmOptimizerPage *self, const char *path, UmEngine *engine)
{
  g_return_if_fail (UM_IS_OPTIMIZER_PAGE (self));

  self->engine = engine;
  if (g_strcmp0 (path, self->model_path) != 0)
    {
      g_free (self->model_path);
      self->model_path = g_strdup (path);
    }
  if (path != NULL && !self->busy && g_strcmp0 (path, self->prepared_path) != 0)
    prepare (self, path, FALSE);
  else if (!self->busy)
    update_plan (self);
  update_measured (self);
}

void
um_optimizer_page_set_remote (UmOptimizerPage *self, const char *server)
{
  g_return_if_fail (UM_IS_OPTIMIZER_PAGE (self));

  if (server != NULL)
    {
      /* Translators: %s is a server's address, e.g. "http://gpu-box:8765/v1" */
      g_autofree char *text = g_strdup_printf (_("The model in use runs on the server at %s. The optimizer describes "
                                                 "and plans for this computer, not the server; open a model here to "
                                                 "use its plan."), server);
      gtk_label_set_text (self->remote_label, text);
    }
  gtk_widget_set_visible (GTK_WIDGET (self->remote_label), server != NULL);
}

const char *
um_optimizer_page_get_remote_note (UmOptimizerPage *self)
{
  g_return_val_if_fail (UM_IS_OPTIMIZER_PAGE (self), NULL);
  return gtk_widget_get_visible (GTK_WIDGET (self->remote_label)) ? gtk_label_get_text (self->remote_label) : NULL;
}

void
um_optimizer_page_set_profile (UmOptimizerPage *self, const UmProfile *profile)
{
  UmMemOptions mem;
  guint64 budget;

  gboolean keep;

  g_return_if_fail (UM_IS_OPTIMIZER_PAGE (self));
  g_return_if_fail (profile != NULL);

  /* Edits not applied yet stay when the file changes from outside, and
   * Apply asks before putting them over it (the page's own commits show
   * what they wrote). */
  keep = self->profile != NULL && self->dirty && !self->committing && !um_profile_equal (self->profile, profile);
  g_clear_pointer (&self->profile, um_profile_free);
  self->profile = um_profile_copy (profile);
  self->stale = keep;
  if (!keep)
    {
      effective_options (self, profile, &mem, &budget);
      fill_controls (self, &mem, budget);
    }
  else
    um_optimizer_page_set_status (self, _("The settings in use changed; the changes shown here are not applied yet."));
  update_history (self);
  update_plan (self);
}

void
um_optimizer_page_set_monitor (UmOptimizerPage *self, UmMemoryMonitor *monitor)
{
  g_return_if_fail (UM_IS_OPTIMIZER_PAGE (self));

  if (self->monitor != NULL)
    g_signal_handlers_disconnect_by_func (self->monitor, on_monitor_updated, self);
  g_set_object (&self->monitor, monitor);
  if (monitor != NULL)
    g_signal_connect_object (monitor, "updated", G_CALLBACK (on_monitor_updated), self, 0);
}

gboolean
um_optimizer_page_get_busy (UmOptimizerPage *self)
{
  g_return_val_if_fail (UM_IS_OPTIMIZER_PAGE (self), FALSE);
  return self->busy || self->cancellable != NULL;
}

void
um_optimizer_page_set_budget (UmOptimizerPage *self, guint64 budget)
{
  g_autofree char *text = format_budget (budget);

  g_return_if_fail (UM_IS_OPTIMIZER_PAGE (self));
  gtk_editable_set_text (GTK_EDITABLE (self->budget_row), text);
  update_plan (self);
}

void
um_optimizer_page_select_mode (UmOptimizerPage *self, UmMemMode mode)
{
  UmMemOptions o;
  guint64 budget = 0;

  g_return_if_fail (UM_IS_OPTIMIZER_PAGE (self));
  um_mem_options_init (&o, mode);
  um_optimizer_page_read_budget (self, &budget);
  fill_controls (self, &o, budget);
  update_plan (self);
}

const UmPlan *
um_optimizer_page_get_plan (UmOptimizerPage *self)
{
  g_return_val_if_fail (UM_IS_OPTIMIZER_PAGE (self), NULL);
  return self->have_plan ? &self->plan : NULL;
}

const UmOptimizeResult *
um_optimizer_page_get_result (UmOptimizerPage *self)
{
  g_return_val_if_fail (UM_IS_OPTIMIZER_PAGE (self), NULL);
  return self->result;
}

const char *
um_optimizer_page_get_status (UmOptimizerPage *self)
{
  g_return_val_if_fail (UM_IS_OPTIMIZER_PAGE (self), NULL);
  return self->status;
}

GtkListBox *
um_optimizer_page_get_history_list (UmOptimizerPage *self)
{
  g_return_val_if_fail (UM_IS_OPTIMIZER_PAGE (self), NULL);
  return self->history_list;
}

const char *
um_optimizer_page_get_measured (UmOptimizerPage *self)
{
  g_return_val_if_fail (UM_IS_OPTIMIZER_PAGE (self), NULL);
  return self->measured;
}

/* ---- signals ---- */

static void
on_optimize_clicked (UmOptimizerPage *self)
{
  um_optimizer_page_optimize (self, NULL);
}

static void
on_apply_clicked (UmOptimizerPage *self)
{
  um_optimizer_page_apply (self);
}

static void
on_restore_clicked (UmOptimizerPage *self)
{
  g_autoptr(GError) error = NULL;

  if (!um_optimizer_page_restore (self, "original", TRUE, &error))
    um_optimizer_page_set_status_error (self, _("Could not restore"), error);
}

static void
on_undo_clicked (UmOptimizerPage *self)
{
  um_optimizer_page_undo (self);
}

static void
on_history_restore_clicked (GtkButton *button, UmOptimizerPage *self)
{
  const char *id = g_object_get_data (G_OBJECT (button), "um-backup-id");
  g_autoptr(GError) error = NULL;

  if (id != NULL && !self->busy && !um_optimizer_page_restore (self, id, TRUE, &error))
    um_optimizer_page_set_status_error (self, _("Could not restore"), error);
}

static void
on_mode_changed (UmOptimizerPage *self)
{
  update_level_row (self);
  if (!self->filling)
    update_plan (self);
}

static void
on_knob_changed (UmOptimizerPage *self)
{
  if (!self->filling)
    update_plan (self);
}

static void
on_map (UmOptimizerPage *self)
{
  /* Free memory changes: probe again whenever the page is shown. */
  if (!self->busy && self->cancellable == NULL)
    prepare (self, self->model_path, FALSE);
  update_measured (self);
}

/* ---- GObject ---- */

static void
um_optimizer_page_get_property (GObject *object, guint id, GValue *value, GParamSpec *pspec)
{
  UmOptimizerPage *self = UM_OPTIMIZER_PAGE (object);

  switch (id)
    {
    case PROP_BUSY: g_value_set_boolean (value, um_optimizer_page_get_busy (self)); break;
    case PROP_STATUS: g_value_set_string (value, self->status); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
um_optimizer_page_dispose (GObject *object)
{
  UmOptimizerPage *self = UM_OPTIMIZER_PAGE (object);

  if (self->cancellable != NULL)
    g_cancellable_cancel (self->cancellable);
  g_clear_object (&self->cancellable);
  if (self->monitor != NULL)
    g_signal_handlers_disconnect_by_func (self->monitor, on_monitor_updated, self);
  g_clear_object (&self->monitor);
  self->engine = NULL;
  gtk_widget_dispose_template (GTK_WIDGET (self), UM_TYPE_OPTIMIZER_PAGE);
  G_OBJECT_CLASS (um_optimizer_page_parent_class)->dispose (object);
}

static void
um_optimizer_page_finalize (GObject *object)
{
  UmOptimizerPage *self = UM_OPTIMIZER_PAGE (object);

  g_free (self->model_path);
  g_free (self->prepared_path);
  g_free (self->undo_id);
  g_free (self->status);
  g_free (self->measured);
  g_clear_pointer (&self->profile, um_profile_free);
  g_clear_pointer (&self->model, um_model_free);
  g_clear_pointer (&self->hw, um_hardware_free);
  g_clear_pointer (&self->result, um_optimize_result_free);
  G_OBJECT_CLASS (um_optimizer_page_parent_class)->finalize (object);
}

static void
um_optimizer_page_class_init (UmOptimizerPageClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);

  object_class->get_property = um_optimizer_page_get_property;
  object_class->dispose = um_optimizer_page_dispose;
  object_class->finalize = um_optimizer_page_finalize;

  props[PROP_BUSY] = g_param_spec_boolean ("busy", NULL, NULL, FALSE,
                                           G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  props[PROP_STATUS] = g_param_spec_string ("status", NULL, NULL, NULL,
                                            G_PARAM_READABLE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties (object_class, N_PROPS, props);

  g_type_ensure (UM_TYPE_PLAN_BARS);
  gtk_widget_class_set_template_from_resource (widget_class, "/io/github/unmask/Unmask/ui/um-optimizer-page.ui");
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, gpu_row);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, ram_row);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, cpu_row);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, mode_row);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, level_row);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, format_row);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, experts_row);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, offer_list);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, offer_row);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, offer_button);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, format_list);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, knobs_row);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, layers_row);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, zstd_row);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, layers_spin);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, heads_spin);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, ffn_spin);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, chunk_spin);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, zstd_switch);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, budget_row);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, plan_bars);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, status_label);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, loaded_list);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, loaded_row);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, plan_group);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, optimize_button);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, apply_button);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, restore_button);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, undo_button);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, history_list);
  gtk_widget_class_bind_template_child (widget_class, UmOptimizerPage, remote_label);
  gtk_widget_class_bind_template_callback (widget_class, on_optimize_clicked);
  gtk_widget_class_bind_template_callback (widget_class, on_apply_clicked);
  gtk_widget_class_bind_template_callback (widget_class, on_restore_clicked);
  gtk_widget_class_bind_template_callback (widget_class, on_undo_clicked);
}

static void
um_optimizer_page_init (UmOptimizerPage *self)
{
  GtkWidget *placeholder;
  const char *formats[G_N_ELEMENTS (format_ids) + 1] = { NULL };

  gtk_widget_init_template (GTK_WIDGET (self));

  formats[0] = _("The mode’s choice");
  formats[1] = _("As stored");
  for (guint i = 2; i < G_N_ELEMENTS (format_ids); i++)
    formats[i] = format_ids[i];
  gtk_string_list_splice (self->format_list, 0, 0, formats);
  update_level_row (self);

  placeholder = gtk_label_new (_("No backups yet: the first change keeps the original settings here."));
  gtk_label_set_wrap (GTK_LABEL (placeholder), TRUE);
  gtk_widget_add_css_class (placeholder, "dim-label");
  gtk_widget_set_margin_top (placeholder, 18);
  gtk_widget_set_margin_bottom (placeholder, 18);
  gtk_widget_set_margin_start (placeholder, 12);
  gtk_widget_set_margin_end (placeholder, 12);
  gtk_list_box_set_placeholder (self->history_list, placeholder);

  g_signal_connect_swapped (self->mode_row, "notify::selected", G_CALLBACK (on_mode_changed), self);
  g_signal_connect_swapped (self->level_row, "notify::selected", G_CALLBACK (on_knob_changed), self);
  g_signal_connect_swapped (self->format_row, "notify::selected", G_CALLBACK (on_knob_changed), self);
  g_signal_connect_swapped (self->layers_spin, "value-changed", G_CALLBACK (on_knob_changed), self);
  g_signal_connect_swapped (self->heads_spin, "value-changed", G_CALLBACK (on_knob_changed), self);
  g_signal_connect_swapped (self->ffn_spin, "value-changed", G_CALLBACK (on_knob_changed), self);
  g_signal_connect_swapped (self->chunk_spin, "value-changed", G_CALLBACK (on_knob_changed), self);
  g_signal_connect_swapped (self->zstd_switch, "notify::active", G_CALLBACK (on_knob_changed), self);
  g_signal_connect_swapped (self->experts_row, "notify::selected", G_CALLBACK (on_knob_changed), self);
  g_signal_connect_swapped (self->offer_button, "clicked", G_CALLBACK (on_offer_clicked), self);
  g_signal_connect_swapped (self->budget_row, "changed", G_CALLBACK (on_knob_changed), self);
  g_signal_connect_swapped (self, "map", G_CALLBACK (on_map), self);

  show_hardware (self);
  um_optimizer_page_set_status (self, NULL);
  update_buttons (self);
  update_plan (self);
}

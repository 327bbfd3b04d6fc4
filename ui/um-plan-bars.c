/* um-plan-bars.c — a memory plan as bars (see um-plan-bars.h). */
#include "config.h"

#include "um-plan-bars.h"

#include <glib/gi18n.h>
#include <string.h>

/* Rows: one per component, then the total. */
#define TOTAL_ROW UM_PLAN_N_COMPONENTS

struct _UmPlanBars {
  AdwBin       parent_instance;

  /* template */
  GtkLabel    *title_label;
  GtkLabel    *fits_label;
  GtkGrid     *grid;
  GtkLabel    *host_label;
  GtkLabel    *experts_label;
  GtkLabel    *note_label;

  GtkWidget   *names[UM_PLAN_N_COMPONENTS + 1];
  GtkLevelBar *bars[UM_PLAN_N_COMPONENTS + 1];
  GtkWidget   *sizes[UM_PLAN_N_COMPONENTS + 1];
  UmPlan       plan;
  gboolean     have_plan;
  gboolean     cuda;
};

G_DEFINE_FINAL_TYPE (UmPlanBars, um_plan_bars, ADW_TYPE_BIN)

const char *
um_plan_component_label (UmPlanComponent c)
{
  switch (c)
    {
    case UM_PLAN_WEIGHTS: return C_("plan component", "Weights");
    case UM_PLAN_EMBEDDING: return C_("plan component", "Token table");
    case UM_PLAN_STREAM_SLOTS: return C_("plan component", "Layer slots");
    case UM_PLAN_HOST_STORE: return C_("plan component", "Layer store");
    case UM_PLAN_ACTIVATIONS: return C_("plan component", "Activations");
    case UM_PLAN_LOGITS: return C_("plan component", "Logits");
    case UM_PLAN_SAMPLER: return C_("plan component", "Sampler");
    case UM_PLAN_BACKEND: return C_("plan component", "Backend");
    case UM_PLAN_PROCESS: return C_("plan component", "Program");
    case UM_PLAN_KV_CACHE: return C_("plan component", "KV cache");
    case UM_PLAN_EXPERT_SLOTS: return C_("plan component", "Expert slots");
    case UM_PLAN_EXPERTS: return C_("plan component", "Experts");
    case UM_PLAN_N_COMPONENTS:
    default: return "?";
    }
}

char *
um_format_bytes (guint64 bytes)
{
  return g_format_size_full (bytes, G_FORMAT_SIZE_IEC_UNITS);
}

GtkWidget *
um_plan_bars_new (void)
{
  return g_object_new (UM_TYPE_PLAN_BARS, NULL);
}

static void
set_row_visible (UmPlanBars *self, int row, gboolean visible)
{
  gtk_widget_set_visible (self->names[row], visible);
  gtk_widget_set_visible (GTK_WIDGET (self->bars[row]), visible);
  gtk_widget_set_visible (self->sizes[row], visible);
}

static void
update (UmPlanBars *self)
{
  const UmPlan *p = &self->plan;
  guint64 scale;
  gboolean over;

  gtk_widget_remove_css_class (GTK_WIDGET (self->fits_label), "fits");
  gtk_widget_remove_css_class (GTK_WIDGET (self->fits_label), "over");
  if (!self->have_plan)
    {
      gtk_label_set_text (self->title_label, _("Nothing planned yet"));
      gtk_widget_set_visible (GTK_WIDGET (self->fits_label), FALSE);
      gtk_widget_set_visible (GTK_WIDGET (self->host_label), FALSE);
      gtk_widget_set_visible (GTK_WIDGET (self->experts_label), FALSE);
      for (int i = 0; i <= TOTAL_ROW; i++)
        set_row_visible (self, i, FALSE);
      return;
    }

  /* Every bar on the same scale: the device's capacity, or the total when
   * it does not fit (or nothing limits it). */
  scale = MAX (p->device_capacity, p->device_peak);
  scale = MAX (scale, 1);
  over = !p->fits;
  {
    g_autofree char *peak = um_format_bytes (p->device_peak);
    g_autofree char *title = NULL;
    /* What the plan needs against what there is: "needs", so that a total
     * over the capacity does not read as memory in use. */
    if (p->device_capacity > 0)
      {
        g_autofree char *cap = um_format_bytes (p->device_capacity);
        /* Translators: "Graphics memory: needs 3.1 GiB of 8.0 GiB" */
        title = g_strdup_printf (self->cuda ? _("Graphics memory: needs %s of %s")
                                            /* Translators: the CPU's budgeted RAM, "Memory budget: needs 3.1 GiB of 4.0 GiB" */
                                            : _("Memory budget: needs %s of %s"),
                                 peak, cap);
      }
    else
      /* Translators: "Memory: needs 3.1 GiB" */
      title = g_strdup_printf (self->cuda ? _("Graphics memory: needs %s") : _("Memory: needs %s"), peak);
    gtk_label_set_text (self->title_label, title);
  }
  gtk_label_set_text (self->fits_label, p->fits ? _("Fits") : _("Does not fit"));
  gtk_widget_add_css_class (GTK_WIDGET (self->fits_label), p->fits ? "fits" : "over");
  gtk_widget_set_visible (GTK_WIDGET (self->fits_label), TRUE);

  for (int c = 0; c < UM_PLAN_N_COMPONENTS; c++)
    {
      guint64 bytes = p->device[c];
      g_autofree char *size = um_format_bytes (bytes);
      set_row_visible (self, c, bytes > 0);
      gtk_level_bar_set_max_value (self->bars[c], (double) scale);
      gtk_level_bar_set_value (self->bars[c], (double) bytes);
      gtk_label_set_text (GTK_LABEL (self->sizes[c]), size);
    }
  {
    g_autofree char *size = um_format_bytes (p->device_peak);
    set_row_visible (self, TOTAL_ROW, TRUE);
    gtk_level_bar_set_max_value (self->bars[TOTAL_ROW], (double) scale);
    gtk_level_bar_set_value (self->bars[TOTAL_ROW], (double) p->device_peak);
    gtk_label_set_text (GTK_LABEL (self->sizes[TOTAL_ROW]), size);
    if (over)
      {
        gtk_widget_remove_css_class (GTK_WIDGET (self->bars[TOTAL_ROW]), "fits");
        gtk_widget_add_css_class (GTK_WIDGET (self->bars[TOTAL_ROW]), "over");
      }
    else
      {
        gtk_widget_remove_css_class (GTK_WIDGET (self->bars[TOTAL_ROW]), "over");
        gtk_widget_add_css_class (GTK_WIDGET (self->bars[TOTAL_ROW]), "fits");
      }
  }
  {
    g_autofree char *host = um_format_bytes (p->host_peak);
    g_autofree char *load = um_format_bytes (p->host_load_peak);
    g_autofree char *text = NULL;
    /* Translators: the host (RAM) side of a plan, e.g. "Weights as Q4_K_M · RAM up to 1.2 GiB (2.0 GiB while loading)" */
    text = g_strdup_printf (_("Weights as %s · RAM up to %s (%s while loading)"), p->weight_format, host, load);
    gtk_label_set_text (self->host_label, text);
    gtk_widget_set_visible (GTK_WIDGET (self->host_label), TRUE);
  }
  {
    g_autofree char *text = um_plan_experts_text (p, self->cuda);
    gtk_label_set_text (self->experts_label, text ? text : "");
    gtk_widget_set_visible (GTK_WIDGET (self->experts_label), text != NULL);
  }
}

char *
um_plan_experts_text (const UmPlan *p, gboolean cuda)
{
  g_autofree char *bytes = NULL;
  g_autofree char *zstd = NULL;

  if (p->expert_bytes == 0)
    return NULL;
  bytes = um_format_bytes (p->expert_bytes);
  if (p->experts != UM_EXPERTS_RESIDENT && p->options.host_zstd && p->zstd_ratio < 1.0)
    /* Translators: how small the experts' compressed copy is, e.g. " (zstd: 73 % of their size)" */
    zstd = g_strdup_printf (_(" (zstd: %.0f %% of their size)"), 100.0 * p->zstd_ratio);
  switch (p->experts)
    {
    case UM_EXPERTS_HOST:
      /* Translators: a mixture of experts' routed experts, e.g. "Routed experts (3.8 GiB) in RAM, computed by the processor" */
      return g_strdup_printf (_("Routed experts (%s) in RAM%s, computed by the processor"), bytes, zstd ? zstd : "");
    case UM_EXPERTS_FETCH:
      /* Translators: e.g. "Routed experts (3.8 GiB) in RAM, fetched into 2 device slots as the tokens are routed" */
      return g_strdup_printf (g_dngettext (GETTEXT_PACKAGE,
                                           "Routed experts (%s) in RAM%s, fetched into %u device slot as the tokens are routed",
                                           "Routed experts (%s) in RAM%s, fetched into %u device slots as the tokens are routed",
                                           p->expert_slots),
                              bytes, zstd ? zstd : "", p->expert_slots);
    case UM_EXPERTS_RESIDENT:
    case UM_EXPERTS_AUTO:
    default:
      return g_strdup_printf (cuda ? _("Routed experts (%s) on the GPU") : _("Routed experts (%s) in the device budget"),
                              bytes);
    }
}

const char *
um_plan_bars_get_experts_text (UmPlanBars *self)
{
  g_return_val_if_fail (UM_IS_PLAN_BARS (self), NULL);

  return gtk_widget_get_visible (GTK_WIDGET (self->experts_label)) ? gtk_label_get_text (self->experts_label) : NULL;
}

void
um_plan_bars_set_plan (UmPlanBars *self, const UmPlan *plan)
{
  g_return_if_fail (UM_IS_PLAN_BARS (self));

  /* The memory page sets the same plan every second. */
  if (plan != NULL && self->have_plan && memcmp (&self->plan, plan, sizeof *plan) == 0)
    return;
  self->have_plan = plan != NULL;
  if (plan != NULL)
    self->plan = *plan;
  update (self);
}

void
um_plan_bars_set_cuda (UmPlanBars *self, gboolean cuda)
{
  g_return_if_fail (UM_IS_PLAN_BARS (self));

  self->cuda = cuda;
  update (self);
}

void
um_plan_bars_set_note (UmPlanBars *self, const char *note)
{
  g_return_if_fail (UM_IS_PLAN_BARS (self));

  gtk_label_set_text (self->note_label, note ? note : "");
  gtk_widget_set_visible (GTK_WIDGET (self->note_label), note != NULL && note[0] != '\0');
}

gboolean
um_plan_bars_get_fits (UmPlanBars *self)
{
  g_return_val_if_fail (UM_IS_PLAN_BARS (self), FALSE);

  return self->have_plan && self->plan.fits;
}

const char *
um_plan_bars_get_title (UmPlanBars *self)
{
  g_return_val_if_fail (UM_IS_PLAN_BARS (self), NULL);

  return gtk_label_get_text (self->title_label);
}

const char *
um_plan_bars_get_verdict (UmPlanBars *self)
{
  g_return_val_if_fail (UM_IS_PLAN_BARS (self), NULL);

  return self->have_plan ? gtk_label_get_text (self->fits_label) : NULL;
}

static GtkLevelBar *
make_bar (const char *name)
{
  GtkLevelBar *bar = GTK_LEVEL_BAR (gtk_level_bar_new ());

  /* One colour from the style sheet, not the low/high/full steps. */
  gtk_level_bar_remove_offset_value (bar, GTK_LEVEL_BAR_OFFSET_LOW);
  gtk_level_bar_remove_offset_value (bar, GTK_LEVEL_BAR_OFFSET_HIGH);
  gtk_level_bar_remove_offset_value (bar, GTK_LEVEL_BAR_OFFSET_FULL);
  gtk_widget_set_hexpand (GTK_WIDGET (bar), TRUE);
  gtk_widget_set_valign (GTK_WIDGET (bar), GTK_ALIGN_CENTER);
  gtk_accessible_update_property (GTK_ACCESSIBLE (bar), GTK_ACCESSIBLE_PROPERTY_LABEL, name, -1);
  return bar;
}

static void
um_plan_bars_dispose (GObject *object)
{
  gtk_widget_dispose_template (GTK_WIDGET (object), UM_TYPE_PLAN_BARS);
  G_OBJECT_CLASS (um_plan_bars_parent_class)->dispose (object);
}

static void
um_plan_bars_class_init (UmPlanBarsClass *klass)
{
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);

  G_OBJECT_CLASS (klass)->dispose = um_plan_bars_dispose;
  gtk_widget_class_set_template_from_resource (widget_class, "/io/github/unmask/Unmask/ui/um-plan-bars.ui");
  gtk_widget_class_bind_template_child (widget_class, UmPlanBars, title_label);
  gtk_widget_class_bind_template_child (widget_class, UmPlanBars, fits_label);
  gtk_widget_class_bind_template_child (widget_class, UmPlanBars, grid);
  gtk_widget_class_bind_template_child (widget_class, UmPlanBars, host_label);
  gtk_widget_class_bind_template_child (widget_class, UmPlanBars, experts_label);
  gtk_widget_class_bind_template_child (widget_class, UmPlanBars, note_label);
}

static void
um_plan_bars_init (UmPlanBars *self)
{
  gtk_widget_init_template (GTK_WIDGET (self));

  for (int row = 0; row <= TOTAL_ROW; row++)
    {
      const char *name = row == TOTAL_ROW ? C_("plan component", "Total") : um_plan_component_label (row);
      GtkWidget *label = gtk_label_new (name);
      GtkWidget *size = gtk_label_new (NULL);

      gtk_label_set_xalign (GTK_LABEL (label), 0);
      gtk_label_set_xalign (GTK_LABEL (size), 1);
      gtk_label_set_width_chars (GTK_LABEL (size), 10);
      gtk_widget_add_css_class (size, "numeric");
      self->bars[row] = make_bar (name);
      if (row == TOTAL_ROW)
        {
          gtk_widget_add_css_class (label, "heading");
          gtk_widget_add_css_class (GTK_WIDGET (self->bars[row]), "total");
          gtk_widget_set_margin_top (label, 4);
          gtk_widget_set_margin_top (GTK_WIDGET (self->bars[row]), 4);
          gtk_widget_set_margin_top (size, 4);
        }
      else
        gtk_widget_add_css_class (GTK_WIDGET (self->bars[row]), "component");
      self->names[row] = label;
      self->sizes[row] = size;
      gtk_grid_attach (self->grid, label, 0, row, 1, 1);
      gtk_grid_attach (self->grid, GTK_WIDGET (self->bars[row]), 1, row, 1, 1);
      gtk_grid_attach (self->grid, size, 2, row, 1, 1);
    }
  update (self);
}

#include "config.h"

#include "um-memory-page.h"

#include <glib/gi18n.h>

#include "um-plan-bars.h"

struct _UmMemoryPage {
  AdwBin           parent_instance;
  GtkDrawingArea  *graph;
  GtkLabel        *process_label, *weights_label, *buffers_label, *system_label, *device_label;
  AdwActionRow    *device_row;
  AdwActionRow    *compute_row;
  GtkLabel        *compute_label;
  GtkWidget       *device_legend;
  AdwPreferencesGroup *device_group;
  AdwActionRow    *device_use_row;
  GtkLevelBar     *device_level;
  GtkLabel        *device_use_label, *dev_weights_label, *dev_buffers_label, *dev_backend_label;
  UmPlanBars      *plan_bars;
  AdwPreferencesGroup *remote_group;
  GtkLabel        *remote_label;
  UmMemoryMonitor *monitor;
};

G_DEFINE_FINAL_TYPE (UmMemoryPage, um_memory_page, ADW_TYPE_BIN)

static void
set_size_label (GtkLabel *label, guint64 bytes)
{
  g_autofree char *text = g_format_size (bytes);
  gtk_label_set_text (label, text);
}

static void
draw_series (cairo_t *cr, const UmMemorySample *s, guint n, int width, int height, guint64 max,
             gsize offset, const GdkRGBA *color)
{
  if (n < 2)
    return;
  cairo_set_line_width (cr, 2.0);
  gdk_cairo_set_source_rgba (cr, color);
  for (guint i = 0; i < n; i++)
    {
      guint64 v = *(const guint64 *) ((const guint8 *) &s[i] + offset);
      double x = width * (double) (UM_MEMORY_HISTORY - n + i) / (UM_MEMORY_HISTORY - 1);
      double y = height - 4 - (height - 8) * (double) v / (double) MAX (max, 1);
      if (i == 0)
        cairo_move_to (cr, x, y);
      else
        cairo_line_to (cr, x, y);
    }
  cairo_stroke (cr);
}

static void
draw_graph (GtkDrawingArea *area, cairo_t *cr, int width, int height, gpointer data)
{
  UmMemoryPage *self = data;
  const UmMemorySample *s;
  guint n;
  guint64 max = 1;
  GdkRGBA ram = { 0.21, 0.52, 0.89, 1.0 }, dev = { 0.90, 0.38, 0.0, 1.0 }, grid;

  if (self->monitor == NULL)
    return;
  s = um_memory_monitor_get_history (self->monitor, &n);
  /* Scale to the largest figure, rounded up to a whole GiB. */
  for (guint i = 0; i < n; i++)
    max = MAX (max, MAX (s[i].process_rss, s[i].device_used));
  max = ((max >> 30) + 1) << 30;
  /* GTK 4.8 has no gtk_widget_get_color (). */
  gtk_style_context_get_color (gtk_widget_get_style_context (GTK_WIDGET (area)), &grid);
  grid.alpha = 0.15;
  gdk_cairo_set_source_rgba (cr, &grid);
  cairo_set_line_width (cr, 1.0);
  for (int i = 1; i < 4; i++)
    {
      cairo_move_to (cr, 0, height * i / 4.0);
      cairo_line_to (cr, width, height * i / 4.0);
    }
  cairo_stroke (cr);
  draw_series (cr, s, n, width, height, max, G_STRUCT_OFFSET (UmMemorySample, process_rss), &ram);
  /* What the backend holds: VRAM on a GPU, the budgeted RAM on the CPU. */
  if (n > 0 && s[n - 1].has_engine)
    draw_series (cr, s, n, width, height, max, G_STRUCT_OFFSET (UmMemorySample, device_used), &dev);
}

static void
set_pair_label (GtkLabel *label, guint64 now, guint64 planned, gboolean have_plan)
{
  g_autofree char *a = um_format_bytes (now);
  g_autofree char *b = have_plan ? um_format_bytes (planned) : g_strdup ("—");
  g_autofree char *text = g_strdup_printf ("%s / %s", a, b);
  gtk_label_set_text (label, text);
}

/* Device memory, live and per component, beside the plan. */
static void
update_device (UmMemoryPage *self, const UmMemorySample *s)
{
  const UmPlan *p = um_memory_monitor_get_plan (self->monitor);
  guint64 cap = s->device_budget ? s->device_budget : s->device_total;

  gtk_widget_set_visible (GTK_WIDGET (self->device_group), s->has_engine);
  gtk_widget_set_visible (self->device_legend, s->has_engine);
  if (!s->has_engine)
    return;
  adw_preferences_group_set_title (self->device_group,
                                   s->has_device ? _("Graphics Memory")
                                   : s->device_budget ? _("Compute Budget (RAM)") : _("Compute Memory (RAM)"));
  {
    /* On a GPU, the process's whole figure, from the driver where NVML
     * answers (what nvidia-smi shows), else the backend's own count; said
     * which. */
    g_autofree char *used = um_format_bytes (s->has_device ? s->device_process : s->device_used);
    g_autofree char *peak = um_format_bytes (s->device_peak + s->device_weights);
    g_autofree char *text = NULL;
    g_autofree char *subtitle = !s->has_device ? g_strdup_printf (_("Peak %s"), peak)
                                : s->device_process_nvml
                                ? g_strdup_printf (_("This process, as the driver counts it (NVML); buffers’ peak %s"),
                                                   peak)
                                : g_strdup_printf (_("The backend’s own count (NVML not available); buffers’ peak %s"),
                                                   peak);
    if (cap > 0)
      {
        g_autofree char *limit = um_format_bytes (cap);
        text = g_strdup_printf (_("%s of %s"), used, limit);
      }
    else
      text = g_strdup (used);
    gtk_label_set_text (self->device_use_label, text);
    adw_action_row_set_subtitle (self->device_use_row, subtitle);
    /* A bar only against a limit. */
    gtk_widget_set_visible (GTK_WIDGET (self->device_level), cap > 0);
    gtk_level_bar_set_max_value (self->device_level, (double) MAX (MAX (cap, s->device_used), 1));
    gtk_level_bar_set_value (self->device_level, (double) s->device_used);
  }
  set_pair_label (self->dev_weights_label, s->device_weights,
                  p ? p->device[UM_PLAN_WEIGHTS] + p->device[UM_PLAN_EMBEDDING] + p->device[UM_PLAN_STREAM_SLOTS] : 0,
                  p != NULL);
  set_pair_label (self->dev_buffers_label, s->device_used - MIN (s->device_used, s->device_weights),
                  p ? p->device[UM_PLAN_ACTIVATIONS] + p->device[UM_PLAN_LOGITS] + p->device[UM_PLAN_SAMPLER] : 0,
                  p != NULL);
  set_pair_label (self->dev_backend_label, s->device_overhead,
                  p ? p->device[UM_PLAN_BACKEND] + p->host[UM_PLAN_BACKEND] : 0, p != NULL);
  um_plan_bars_set_cuda (self->plan_bars, s->has_device);
  um_plan_bars_set_plan (self->plan_bars, p);
}

static void
on_updated (UmMemoryMonitor *monitor, UmMemoryPage *self)
{
  const UmMemorySample *s = um_memory_monitor_get_latest (monitor);
  g_autofree char *peak = g_format_size (s->device_peak);
  g_autofree char *now = g_format_size (s->device_in_use);
  g_autofree char *buffers = g_strdup_printf ("%s / %s", now, peak);
  g_autofree char *avail = g_format_size (s->ram_available);
  g_autofree char *total = g_format_size (s->ram_total);
  /* Translators: "5.1 GB free of 24 GB" */
  g_autofree char *system = g_strdup_printf (_("%s free of %s"), avail, total);

  {
    g_autofree char *why = NULL;
    g_autofree char *where = um_memory_monitor_describe_compute (monitor, &why);
    gtk_label_set_text (self->compute_label, where);
    adw_action_row_set_subtitle (self->compute_row, why ? why : "");
  }
  set_size_label (self->process_label, s->process_rss);
  set_size_label (self->weights_label, s->weights_bytes);
  gtk_label_set_text (self->buffers_label, buffers);
  gtk_label_set_text (self->system_label, system);
  gtk_widget_set_visible (GTK_WIDGET (self->device_row), s->has_device);
  if (s->has_device)
    {
      g_autofree char *used = g_format_size (s->device_used);
      g_autofree char *cap = g_format_size (s->device_total);
      g_autofree char *text = g_strdup_printf (_("%s of %s"), used, cap);
      gtk_label_set_text (self->device_label, text);
    }
  update_device (self, s);
  gtk_widget_queue_draw (GTK_WIDGET (self->graph));
}

void
um_memory_page_set_monitor (UmMemoryPage *self, UmMemoryMonitor *monitor)
{
  if (self->monitor)
    g_signal_handlers_disconnect_by_func (self->monitor, on_updated, self);
  g_set_object (&self->monitor, monitor);
  if (monitor)
    {
      g_signal_connect_object (monitor, "updated", G_CALLBACK (on_updated), self, 0);
      on_updated (monitor, self);
    }
}

static void
um_memory_page_dispose (GObject *object)
{
  UmMemoryPage *self = UM_MEMORY_PAGE (object);
  g_clear_object (&self->monitor);
  gtk_widget_dispose_template (GTK_WIDGET (self), UM_TYPE_MEMORY_PAGE);
  G_OBJECT_CLASS (um_memory_page_parent_class)->dispose (object);
}

static void
um_memory_page_class_init (UmMemoryPageClass *klass)
{
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);
  g_type_ensure (UM_TYPE_PLAN_BARS);
  G_OBJECT_CLASS (klass)->dispose = um_memory_page_dispose;
  gtk_widget_class_set_template_from_resource (widget_class, "/io/github/unmask/Unmask/ui/um-memory-page.ui");
  gtk_widget_class_bind_template_child (widget_class, UmMemoryPage, graph);
  gtk_widget_class_bind_template_child (widget_class, UmMemoryPage, process_label);
  gtk_widget_class_bind_template_child (widget_class, UmMemoryPage, weights_label);
  gtk_widget_class_bind_template_child (widget_class, UmMemoryPage, buffers_label);
  gtk_widget_class_bind_template_child (widget_class, UmMemoryPage, system_label);
  gtk_widget_class_bind_template_child (widget_class, UmMemoryPage, device_label);
  gtk_widget_class_bind_template_child (widget_class, UmMemoryPage, device_row);
  gtk_widget_class_bind_template_child (widget_class, UmMemoryPage, compute_row);
  gtk_widget_class_bind_template_child (widget_class, UmMemoryPage, compute_label);
  gtk_widget_class_bind_template_child (widget_class, UmMemoryPage, device_legend);
  gtk_widget_class_bind_template_child (widget_class, UmMemoryPage, device_group);
  gtk_widget_class_bind_template_child (widget_class, UmMemoryPage, device_use_row);
  gtk_widget_class_bind_template_child (widget_class, UmMemoryPage, device_level);
  gtk_widget_class_bind_template_child (widget_class, UmMemoryPage, device_use_label);
  gtk_widget_class_bind_template_child (widget_class, UmMemoryPage, dev_weights_label);
  gtk_widget_class_bind_template_child (widget_class, UmMemoryPage, dev_buffers_label);
  gtk_widget_class_bind_template_child (widget_class, UmMemoryPage, dev_backend_label);
  gtk_widget_class_bind_template_child (widget_class, UmMemoryPage, plan_bars);
  gtk_widget_class_bind_template_child (widget_class, UmMemoryPage, remote_group);
  gtk_widget_class_bind_template_child (widget_class, UmMemoryPage, remote_label);
}

void
um_memory_page_set_remote (UmMemoryPage *self, const char *server)
{
  g_return_if_fail (UM_IS_MEMORY_PAGE (self));

  if (server != NULL)
    {
      /* Translators: %s is a server's address, e.g. "http://gpu-box:8765/v1" */
      g_autofree char *text = g_strdup_printf (_("The model runs on the server at %s. This page shows the memory of "
                                                 "this computer, not the server’s."), server);
      gtk_label_set_text (self->remote_label, text);
    }
  gtk_widget_set_visible (GTK_WIDGET (self->remote_group), server != NULL);
}

const char *
um_memory_page_get_remote_note (UmMemoryPage *self)
{
  g_return_val_if_fail (UM_IS_MEMORY_PAGE (self), NULL);
  return gtk_widget_get_visible (GTK_WIDGET (self->remote_group)) ? gtk_label_get_text (self->remote_label) : NULL;
}

static void
um_memory_page_init (UmMemoryPage *self)
{
  gtk_widget_init_template (GTK_WIDGET (self));
  gtk_drawing_area_set_draw_func (self->graph, draw_graph, self, NULL);
}

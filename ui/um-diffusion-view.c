/* um-diffusion-view.c — the canvas of a diffusion run, live and replayable.
 *
 * Cells flow like text. Every distinct token id gets one cached glyph (its
 * PangoLayout and width) shared by all cells that show it, so a frame only
 * lays out tokens it has not seen; all mask cells share one prebuilt render
 * node. Steps are kept as one flat array of commits, so the canvas after any
 * step can be rebuilt in O(commits), and forward from the shown step
 * incrementally.
 */
#include "um-diffusion-view-private.h"

#include <glib/gi18n.h>


G_DEFINE_FINAL_TYPE (UmDiffusionView, um_diffusion_view, GTK_TYPE_WIDGET)

enum {
  PROP_0,
  PROP_SHOWN_STEP,
  PROP_N_STEPS,
  PROP_N_STEPS_RECORDED,
  PROP_FOLLOWING,
  N_PROPS
};
static GParamSpec *props[N_PROPS];


static void
glyph_free (gpointer data)
{
  Glyph *glyph = data;

  g_clear_object (&glyph->layout);
  g_free (glyph->text);
  g_free (glyph);
}

/* The cell text of a token: leading spaces become the gap before the cell,
 * newlines "↵" (and the next cell starts a row), tabs "→"; text with nothing
 * visible becomes a placeholder. */
static char *
format_token (const char *text, guint *flags)
{
  GString *out = g_string_new (NULL);
  const char *p = text;
  gboolean visible = FALSE;
  int n_chars = 0;

  while (*p == ' ')
    p++;
  if (p != text && *p == '\0')
    {
      /* Only spaces (indentation): one "␣" each, so the cell is not blank. */
      long n = p - text;
      for (long i = 0; i < MIN (n, 8); i++)
        g_string_append (out, "␣");
      if (n > 8)
        g_string_append (out, "…");
      return g_string_free (out, FALSE);
    }
  if (p != text)
    *flags |= GLYPH_WORD_START;

  for (; *p != '\0'; p = g_utf8_next_char (p))
    {
      gunichar c = g_utf8_get_char (p);

      if (n_chars == MAX_TOKEN_CHARS)
        {
          g_string_append (out, "…");
          break;
        }
      if (c == '\n')
        {
          g_string_append (out, "↵");
          *flags |= GLYPH_BREAK;
        }
      else if (c == '\t')
        g_string_append (out, "→");
      else if (c == '\r' || !g_unichar_isprint (c)
               || g_unichar_type (c) == G_UNICODE_FORMAT)
        continue;
      else
        g_string_append_unichar (out, c);
      if (!g_unichar_isspace (c) || c == '\n' || c == '\t')
        visible = TRUE;
      n_chars++;
    }

  if (!visible)
    {
      g_string_assign (out, "◌");
      *flags |= GLYPH_PLACEHOLDER;
    }
  return g_string_free (out, FALSE);
}

/* The token text as quoted in a tooltip: control characters made visible. */
static char *
escape_for_tip (const char *text)
{
  GString *out = g_string_new (NULL);
  int n_chars = 0;

  for (const char *p = text; *p != '\0'; p = g_utf8_next_char (p))
    {
      gunichar c = g_utf8_get_char (p);

      if (n_chars++ == MAX_TIP_CHARS)
        {
          g_string_append (out, "…");
          break;
        }
      if (c == '\n')
        g_string_append (out, "↵");
      else if (c == '\t')
        g_string_append (out, "→");
      else if (!g_unichar_isprint (c))
        g_string_append (out, "�");
      else
        g_string_append_unichar (out, c);
    }
  return g_string_free (out, FALSE);
}

static void
invalidate_glyphs (UmDiffusionView *self)
{
  g_hash_table_remove_all (self->glyphs);
  for (int i = 0; i < self->gen_length; i++)
    self->cells[i].glyph = NULL;
  self->flow_width = -1;
  self->measured_width = -1;
}

static void
invalidate_flow (UmDiffusionView *self)
{
  self->flow_width = -1;
  self->measured_width = -1;
  gtk_widget_queue_resize (GTK_WIDGET (self));
}

/* Re-measures the font when the widget's Pango context changed (font, DPI,
 * scale): every cached width is wrong then. */
void
um_diffusion_view_ensure_metrics (UmDiffusionView *self)
{
  PangoContext *context = gtk_widget_get_pango_context (GTK_WIDGET (self));
  guint serial = pango_context_get_serial (context);
  g_autoptr(PangoLayout) layout = NULL;
  PangoRectangle logical;

  if (self->metrics_valid && serial == self->pango_serial)
    return;
  self->metrics_valid = TRUE;
  self->pango_serial = serial;
  invalidate_glyphs (self);
  g_clear_pointer (&self->mask_node, gsk_render_node_unref);
  g_clear_object (&self->hint_layout);

  layout = pango_layout_new (context);
  pango_layout_set_text (layout, " ", -1);
  pango_layout_get_pixel_extents (layout, NULL, &logical);
  self->space_w = MAX (logical.width, 2);
  pango_layout_set_text (layout, "Mg", -1);
  pango_layout_get_pixel_extents (layout, NULL, &logical);
  self->cell_h = MAX (logical.height, 8) + 2 * PAD_Y;
  self->mask_w = MAX (logical.width + PAD_X, self->cell_h);
}

static Glyph *
make_glyph (UmDiffusionView *self, gint32 id)
{
  Glyph *glyph = g_new0 (Glyph, 1);
  g_autofree char *raw = NULL;
  g_autofree char *shown = NULL;
  PangoRectangle logical;

  if (id < 0)
    raw = g_strdup ("?");
  else if (self->text_func != NULL)
    raw = self->text_func (id, self->text_data);
  else
    raw = g_strdup_printf ("%d", id);
  glyph->text = g_utf8_make_valid (raw != NULL ? raw : "", -1);

  if (id >= 0 && (id == self->eos_id || id == self->eot_id))
    {
      glyph->flags |= GLYPH_END;
      shown = g_strdup ("∎");
    }
  else
    shown = format_token (glyph->text, &glyph->flags);

  glyph->layout = gtk_widget_create_pango_layout (GTK_WIDGET (self), shown);
  if (glyph->flags & GLYPH_END)
    {
      PangoAttrList *attrs = pango_attr_list_new ();
      pango_attr_list_insert (attrs, pango_attr_scale_new (0.8));
      pango_layout_set_attributes (glyph->layout, attrs);
      pango_attr_list_unref (attrs);
    }
  pango_layout_get_pixel_extents (glyph->layout, NULL, &logical);
  glyph->width = logical.width + 2 * PAD_X;
  glyph->text_y = (self->cell_h - logical.height) / 2;
  return glyph;
}

Glyph *
um_diffusion_view_cell_glyph (UmDiffusionView *self, Cell *cell)
{
  if (cell->glyph == NULL)
    {
      cell->glyph = g_hash_table_lookup (self->glyphs, GINT_TO_POINTER (cell->id));
      if (cell->glyph == NULL)
        {
          cell->glyph = make_glyph (self, cell->id);
          g_hash_table_insert (self->glyphs, GINT_TO_POINTER (cell->id), cell->glyph);
        }
    }
  return cell->glyph;
}

/* Lays the cells out like text in @width; stores their positions if @store.
 * Returns the height. */
static int
flow (UmDiffusionView *self, int width, gboolean store)
{
  int right = MAX (width - INSET, INSET + 1);
  int x = INSET, y = INSET, height;
  gboolean row_empty = TRUE, force_break = FALSE;

  um_diffusion_view_ensure_metrics (self);
  for (int i = 0; i < self->gen_length; i++)
    {
      Cell *cell = &self->cells[i];
      const Glyph *glyph = cell_filled (cell) ? um_diffusion_view_cell_glyph (self, cell) : NULL;
      gboolean boundary = i > 0 && (i + self->block_offset) % self->block_length == 0;
      int w = glyph != NULL ? glyph->width : self->mask_w;
      int gap = CELL_GAP;

      if (glyph != NULL && (glyph->flags & GLYPH_WORD_START))
        gap += self->space_w;
      if (boundary)
        gap = MAX (gap, BLOCK_GAP);
      if (!row_empty && (force_break || x + gap + w > right))
        {
          x = INSET;
          y += self->cell_h + ROW_GAP;
          row_empty = TRUE;
        }
      /* A row starts flush, except that a block's start keeps its bar. */
      if (row_empty)
        gap = boundary ? BLOCK_GAP : 0;
      if (store)
        {
          cell->bar_x = boundary ? x + gap / 2 : -1;
          cell->x = x + gap;
          cell->y = y;
          cell->w = w;
        }
      x += gap + w;
      row_empty = FALSE;
      force_break = glyph != NULL && (glyph->flags & GLYPH_BREAK);
    }

  height = self->gen_length > 0 ? y + self->cell_h + INSET : 0;
  if (store)
    {
      self->flow_width = width;
      self->flow_height = height;
    }
  return height;
}

void
um_diffusion_view_ensure_flow (UmDiffusionView *self)
{
  int width = gtk_widget_get_width (GTK_WIDGET (self));

  um_diffusion_view_ensure_metrics (self);
  if (self->flow_width != width)
    flow (self, width, TRUE);
}

static int
height_for_width (UmDiffusionView *self, int width)
{
  um_diffusion_view_ensure_metrics (self);
  if (width == self->flow_width)
    return self->flow_height;
  if (width != self->measured_width)
    {
      self->measured_height = flow (self, width, FALSE);
      self->measured_width = width;
    }
  return self->measured_height;
}

/* First cell whose row reaches down to @y (cells are sorted by row). */
int
um_diffusion_view_first_cell_below (UmDiffusionView *self, double y)
{
  int lo = 0, hi = self->gen_length;

  while (lo < hi)
    {
      int mid = lo + (hi - lo) / 2;
      if (self->cells[mid].y + self->cell_h < y)
        lo = mid + 1;
      else
        hi = mid;
    }
  return lo;
}

/* Accessibility: the shown text, updated at most every A11Y_DELAY_MS. */
static void
update_accessible (UmDiffusionView *self)
{
  g_autofree char *description = NULL;

  if (!self->has_run)
    description = g_strdup (_("No run yet"));
  else
    {
      g_autoptr(GString) text = g_string_new (NULL);
      int n_masked = 0;

      um_diffusion_view_ensure_metrics (self);
      for (int i = 0; i < self->gen_length; i++)
        {
          Cell *cell = &self->cells[i];
          const Glyph *glyph;

          if (!cell_filled (cell))
            {
              n_masked++;
              continue;
            }
          glyph = um_diffusion_view_cell_glyph (self, cell);
          if (!(glyph->flags & GLYPH_END))
            g_string_append (text, glyph->text);
        }
      if (n_masked > 0)
        /* Translators: %d masked positions, then the text committed so far. */
        description = g_strdup_printf (ngettext ("%d position still masked. %s",
                                                 "%d positions still masked. %s", n_masked),
                                       n_masked, text->str);
      else
        description = g_strdup (text->str);
    }
  gtk_accessible_update_property (GTK_ACCESSIBLE (self),
                                  GTK_ACCESSIBLE_PROPERTY_DESCRIPTION, description,
                                  -1);
}

static gboolean
update_accessible_cb (gpointer data)
{
  UmDiffusionView *self = data;

  self->a11y_id = 0;
  update_accessible (self);
  return G_SOURCE_REMOVE;
}

static void
schedule_accessible (UmDiffusionView *self)
{
  if (self->a11y_id == 0)
    self->a11y_id = g_timeout_add (A11Y_DELAY_MS, update_accessible_cb, self);
}

static void
stop_animation (UmDiffusionView *self)
{
  if (self->tick_id != 0)
    gtk_widget_remove_tick_callback (GTK_WIDGET (self), self->tick_id);
  self->tick_id = 0;
  self->anim_progress = 1.0;
}

static gboolean
on_tick (GtkWidget     *widget,
         GdkFrameClock *clock,
         gpointer       user_data)
{
  UmDiffusionView *self = UM_DIFFUSION_VIEW (widget);
  gint64 now = gdk_frame_clock_get_frame_time (clock);

  if (self->anim_start == 0)
    self->anim_start = now;
  self->anim_progress = CLAMP ((double) (now - self->anim_start) / self->anim_duration, 0.0, 1.0);
  gtk_widget_queue_draw (widget);
  if (self->anim_progress < 1.0)
    return G_SOURCE_CONTINUE;
  self->tick_id = 0;
  return G_SOURCE_REMOVE;
}

static void
start_animation (UmDiffusionView *self)
{
  GtkWidget *widget = GTK_WIDGET (self);
  gboolean enabled = TRUE;
  gint64 now = g_get_monotonic_time ();
  gint64 interval = self->last_step_time > 0 ? now - self->last_step_time : ANIM_USEC * 2;

  self->last_step_time = now;
  g_object_get (gtk_widget_get_settings (widget), "gtk-enable-animations", &enabled, NULL);
  /* Steps that come faster than the animation shorten it, and faster than
   * frames they just jump: drawing must never hold the run back. */
  self->anim_duration = MIN (ANIM_USEC, interval * 4 / 5);
  if (!enabled || self->anim_duration < MIN_ANIM_USEC || !gtk_widget_get_mapped (widget))
    {
      stop_animation (self);
      return;
    }
  self->anim_start = 0;
  self->anim_progress = 0.0;
  if (self->tick_id == 0)
    self->tick_id = gtk_widget_add_tick_callback (widget, on_tick, NULL, NULL);
}

/* Rebuilds the canvas as it was after @step: incrementally going forward,
 * from all masks going back. */
static void
show_step (UmDiffusionView *self, int step)
{
  int n_recorded = self->step_ends->len;
  const Commit *commits = (const Commit *) (gpointer) self->commits->data;
  const guint *ends = (const guint *) (gpointer) self->step_ends->data;
  int from = self->shown_step + 1;
  int old = self->shown_step;

  step = CLAMP (step, -1, n_recorded - 1);
  if (step < self->shown_step)
    {
      for (int i = 0; i < self->gen_length; i++)
        {
          Cell *cell = &self->cells[i];
          cell->step = -1;
          if (cell->fixed_id >= 0 && cell->id != cell->fixed_id)
            {
              cell->id = cell->fixed_id;
              cell->glyph = NULL;
            }
        }
      from = 0;
    }
  for (int k = from; k <= step; k++)
    for (guint c = k > 0 ? ends[k - 1] : 0; c < ends[k]; c++)
      {
        Cell *cell = &self->cells[commits[c].pos];

        if (cell->id != commits[c].id)
          cell->glyph = NULL;
        cell->id = commits[c].id;
        cell->step = k;
        cell->confidence = commits[c].confidence;
      }
  self->shown_step = step;

  self->current_block = -1;
  if (step >= 0 && ends[step] > (step > 0 ? ends[step - 1] : 0))
    self->current_block = (commits[step > 0 ? ends[step - 1] : 0].pos + self->block_offset) / self->block_length;

  invalidate_flow (self);
  schedule_accessible (self);
  if (old != step)
    g_object_notify_by_pspec (G_OBJECT (self), props[PROP_SHOWN_STEP]);
}

static void
set_following_internal (UmDiffusionView *self, gboolean following)
{
  following = !!following;
  if (self->following == following)
    return;
  self->following = following;
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_FOLLOWING]);
}

static void
set_n_steps (UmDiffusionView *self, int n_steps)
{
  if (self->n_steps == n_steps)
    return;
  self->n_steps = n_steps;
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_N_STEPS]);
}

/* Forgets the run's steps and canvas; @gen_length fresh masks. */
static void
reset_canvas (UmDiffusionView *self, int gen_length)
{
  int old_recorded = self->step_ends->len;

  stop_animation (self);
  g_hash_table_remove_all (self->glyphs);
  g_free (self->cells);
  self->gen_length = gen_length;
  self->cells = g_new0 (Cell, gen_length);
  for (int i = 0; i < gen_length; i++)
    {
      self->cells[i].id = -1;
      self->cells[i].step = -1;
      self->cells[i].fixed_id = -1;
      self->cells[i].bar_x = -1;
    }
  g_array_set_size (self->commits, 0);
  g_array_set_size (self->step_ends, 0);
  self->current_block = -1;
  self->last_step_time = 0;
  self->warned = FALSE;
  if (self->shown_step != -1)
    {
      self->shown_step = -1;
      g_object_notify_by_pspec (G_OBJECT (self), props[PROP_SHOWN_STEP]);
    }
  if (old_recorded != 0)
    g_object_notify_by_pspec (G_OBJECT (self), props[PROP_N_STEPS_RECORDED]);
  invalidate_flow (self);
  schedule_accessible (self);
}


static GtkSizeRequestMode
um_diffusion_view_get_request_mode (GtkWidget *widget)
{
  return GTK_SIZE_REQUEST_HEIGHT_FOR_WIDTH;
}

static void
um_diffusion_view_measure (GtkWidget      *widget,
                           GtkOrientation  orientation,
                           int             for_size,
                           int            *minimum,
                           int            *natural,
                           int            *minimum_baseline,
                           int            *natural_baseline)
{
  UmDiffusionView *self = UM_DIFFUSION_VIEW (widget);
  int min_width, nat_width;

  um_diffusion_view_ensure_metrics (self);
  if (!self->has_run)
    {
      PangoRectangle logical;

      if (self->hint_layout == NULL)
        self->hint_layout = gtk_widget_create_pango_layout (widget, _("No run yet"));
      pango_layout_get_pixel_extents (self->hint_layout, NULL, &logical);
      *minimum = *natural = orientation == GTK_ORIENTATION_HORIZONTAL
                            ? logical.width + 2 * INSET
                            : logical.height + 2 * INSET;
      return;
    }

  /* Narrow is fine: cells wrap, and the rare token wider than the view
   * overflows its own row. */
  min_width = 2 * INSET + 4 * (self->mask_w + CELL_GAP);
  nat_width = 2 * INSET + NAT_CELLS * (self->mask_w + CELL_GAP);
  if (orientation == GTK_ORIENTATION_HORIZONTAL)
    {
      *minimum = min_width;
      *natural = nat_width;
    }
  else
    *minimum = *natural = height_for_width (self, for_size >= 0 ? for_size : nat_width);
}

static void
um_diffusion_view_size_allocate (GtkWidget *widget,
                                 int        width,
                                 int        height,
                                 int        baseline)
{
  UmDiffusionView *self = UM_DIFFUSION_VIEW (widget);

  if (self->has_run)
    flow (self, width, TRUE);
}

int
um_diffusion_view_get_position_at (UmDiffusionView *self,
                                   double           x,
                                   double           y)
{
  g_return_val_if_fail (UM_IS_DIFFUSION_VIEW (self), -1);

  if (!self->has_run || self->gen_length == 0)
    return -1;
  um_diffusion_view_ensure_flow (self);
  for (int i = um_diffusion_view_first_cell_below (self, y); i < self->gen_length; i++)
    {
      const Cell *cell = &self->cells[i];

      if (cell->y > y)
        break;
      if (x >= cell->x && x < cell->x + cell->w && y < cell->y + self->cell_h)
        return i;
    }
  return -1;
}

char *
um_diffusion_view_describe_position (UmDiffusionView *self,
                                     int              index)
{
  Cell *cell;
  g_autofree char *token = NULL;

  g_return_val_if_fail (UM_IS_DIFFUSION_VIEW (self), NULL);

  if (!self->has_run || index < 0 || index >= self->gen_length)
    return NULL;
  cell = &self->cells[index];
  if (!cell_filled (cell))
    /* Translators: a still masked position of the generated text. */
    return g_strdup_printf (_("Position %d · Masked"), index + 1);
  um_diffusion_view_ensure_metrics (self);
  token = escape_for_tip (um_diffusion_view_cell_glyph (self, cell)->text);
  if (cell->step < 0)
    /* Translators: a token in place before the first step (a word constraint, a reserved end slot). */
    return g_strdup_printf (_("Position %d · token “%s” · in place from the start"), index + 1, token);
  /* Translators: a committed position: its token, the model's confidence
   * in it (0 to 1) and the step that committed it. */
  return g_strdup_printf (_("Position %d · token “%s” · confidence %.2f · step %d"),
                          index + 1, token, cell->confidence, cell->step + 1);
}

static gboolean
um_diffusion_view_query_tooltip (GtkWidget  *widget,
                                 int         x,
                                 int         y,
                                 gboolean    keyboard_tooltip,
                                 GtkTooltip *tooltip)
{
  UmDiffusionView *self = UM_DIFFUSION_VIEW (widget);
  int index = keyboard_tooltip ? -1 : um_diffusion_view_get_position_at (self, x, y);
  g_autofree char *text = NULL;
  const Cell *cell;

  if (index < 0)
    return FALSE;
  cell = &self->cells[index];
  text = um_diffusion_view_describe_position (self, index);
  gtk_tooltip_set_text (tooltip, text);
  /* Moving onto the next cell must ask again. */
  gtk_tooltip_set_tip_area (tooltip, &(GdkRectangle) { cell->x, cell->y, cell->w, self->cell_h });
  return TRUE;
}

static void
on_dark_changed (UmDiffusionView *self)
{
  self->dark = adw_style_manager_get_dark (self->style_manager);
  g_clear_pointer (&self->mask_node, gsk_render_node_unref);
  gtk_widget_queue_draw (GTK_WIDGET (self));
}

static void
on_vadjustment_changed (UmDiffusionView *self)
{
  GtkAdjustment *adjustment = NULL;

  if (self->scrollable != NULL)
    adjustment = gtk_scrollable_get_vadjustment (GTK_SCROLLABLE (self->scrollable));
  if (adjustment == self->vadjustment)
    return;
  if (self->vadjustment != NULL)
    g_signal_handlers_disconnect_by_data (self->vadjustment, self);
  g_set_object (&self->vadjustment, adjustment);
  /* Scrolling moves this widget without redrawing it, but the culled rows
   * must be drawn now. */
  if (adjustment != NULL)
    {
      g_signal_connect_swapped (adjustment, "value-changed", G_CALLBACK (gtk_widget_queue_draw), self);
      g_signal_connect_swapped (adjustment, "changed", G_CALLBACK (gtk_widget_queue_draw), self);
      gtk_widget_queue_draw (GTK_WIDGET (self));
    }
}

static void
um_diffusion_view_root (GtkWidget *widget)
{
  UmDiffusionView *self = UM_DIFFUSION_VIEW (widget);

  GTK_WIDGET_CLASS (um_diffusion_view_parent_class)->root (widget);

  for (GtkWidget *w = gtk_widget_get_parent (widget); w != NULL; w = gtk_widget_get_parent (w))
    if (GTK_IS_SCROLLABLE (w))
      {
        self->scrollable = w;
        g_signal_connect_swapped (w, "notify::vadjustment", G_CALLBACK (on_vadjustment_changed), self);
        on_vadjustment_changed (self);
        break;
      }

  if (adw_is_initialized ())
    {
      self->style_manager = adw_style_manager_get_for_display (gtk_widget_get_display (widget));
      g_signal_connect_swapped (self->style_manager, "notify::dark", G_CALLBACK (on_dark_changed), self);
      on_dark_changed (self);
    }
}

static void
um_diffusion_view_unroot (GtkWidget *widget)
{
  UmDiffusionView *self = UM_DIFFUSION_VIEW (widget);

  if (self->scrollable != NULL)
    g_signal_handlers_disconnect_by_data (self->scrollable, self);
  self->scrollable = NULL;
  on_vadjustment_changed (self);
  if (self->style_manager != NULL)
    g_signal_handlers_disconnect_by_data (self->style_manager, self);
  self->style_manager = NULL;

  GTK_WIDGET_CLASS (um_diffusion_view_parent_class)->unroot (widget);
}

static void
um_diffusion_view_unmap (GtkWidget *widget)
{
  stop_animation (UM_DIFFUSION_VIEW (widget));
  GTK_WIDGET_CLASS (um_diffusion_view_parent_class)->unmap (widget);
}

static void
um_diffusion_view_get_property (GObject    *object,
                                guint       prop_id,
                                GValue     *value,
                                GParamSpec *pspec)
{
  UmDiffusionView *self = UM_DIFFUSION_VIEW (object);

  switch (prop_id)
    {
    case PROP_SHOWN_STEP:
      g_value_set_int (value, self->shown_step);
      break;
    case PROP_N_STEPS:
      g_value_set_int (value, self->n_steps);
      break;
    case PROP_N_STEPS_RECORDED:
      g_value_set_int (value, (int) self->step_ends->len);
      break;
    case PROP_FOLLOWING:
      g_value_set_boolean (value, self->following);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
um_diffusion_view_set_property (GObject      *object,
                                guint         prop_id,
                                const GValue *value,
                                GParamSpec   *pspec)
{
  UmDiffusionView *self = UM_DIFFUSION_VIEW (object);

  switch (prop_id)
    {
    case PROP_SHOWN_STEP:
      um_diffusion_view_set_shown_step (self, g_value_get_int (value));
      break;
    case PROP_FOLLOWING:
      um_diffusion_view_set_following (self, g_value_get_boolean (value));
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
um_diffusion_view_dispose (GObject *object)
{
  UmDiffusionView *self = UM_DIFFUSION_VIEW (object);

  g_clear_handle_id (&self->scroll_id, g_source_remove);

  stop_animation (self);
  g_clear_handle_id (&self->a11y_id, g_source_remove);

  G_OBJECT_CLASS (um_diffusion_view_parent_class)->dispose (object);
}

static void
um_diffusion_view_finalize (GObject *object)
{
  UmDiffusionView *self = UM_DIFFUSION_VIEW (object);

  if (self->text_destroy != NULL)
    self->text_destroy (self->text_data);
  g_hash_table_unref (self->glyphs);
  g_array_unref (self->commits);
  g_array_unref (self->step_ends);
  g_free (self->cells);
  g_clear_pointer (&self->mask_node, gsk_render_node_unref);
  g_clear_object (&self->hint_layout);
  g_clear_object (&self->vadjustment);

  G_OBJECT_CLASS (um_diffusion_view_parent_class)->finalize (object);
}

static void
um_diffusion_view_class_init (UmDiffusionViewClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);
  const GParamFlags rw = G_PARAM_READWRITE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS;
  const GParamFlags ro = G_PARAM_READABLE | G_PARAM_STATIC_STRINGS;

  object_class->get_property = um_diffusion_view_get_property;
  object_class->set_property = um_diffusion_view_set_property;
  object_class->dispose = um_diffusion_view_dispose;
  object_class->finalize = um_diffusion_view_finalize;

  widget_class->get_request_mode = um_diffusion_view_get_request_mode;
  widget_class->measure = um_diffusion_view_measure;
  widget_class->size_allocate = um_diffusion_view_size_allocate;
  widget_class->snapshot = um_diffusion_view_draw;
  widget_class->query_tooltip = um_diffusion_view_query_tooltip;
  widget_class->root = um_diffusion_view_root;
  widget_class->unroot = um_diffusion_view_unroot;
  widget_class->unmap = um_diffusion_view_unmap;

  props[PROP_SHOWN_STEP] = g_param_spec_int ("shown-step", NULL, NULL, -1, G_MAXINT, -1, rw);
  props[PROP_N_STEPS] = g_param_spec_int ("n-steps", NULL, NULL, 0, G_MAXINT, 0, ro);
  props[PROP_N_STEPS_RECORDED] = g_param_spec_int ("n-steps-recorded", NULL, NULL, 0, G_MAXINT, 0, ro);
  props[PROP_FOLLOWING] = g_param_spec_boolean ("following", NULL, NULL, TRUE, rw);
  g_object_class_install_properties (object_class, N_PROPS, props);

  gtk_widget_class_set_css_name (widget_class, "diffusionview");
  /* No text interface for custom widgets in GTK 4.8: screen readers get the
   * text as the image's description. */
  gtk_widget_class_set_accessible_role (widget_class, GTK_ACCESSIBLE_ROLE_IMG);
}

static void
um_diffusion_view_init (UmDiffusionView *self)
{
  self->mask_id = self->eos_id = self->eot_id = -1;
  self->commits = g_array_new (FALSE, FALSE, sizeof (Commit));
  self->step_ends = g_array_new (FALSE, FALSE, sizeof (guint));
  self->glyphs = g_hash_table_new_full (NULL, NULL, NULL, glyph_free);
  self->shown_step = -1;
  self->current_block = -1;
  self->following = TRUE;
  self->anim_progress = 1.0;
  self->flow_width = -1;
  self->measured_width = -1;
  self->block_length = 1;

  gtk_widget_set_has_tooltip (GTK_WIDGET (self), TRUE);
  gtk_accessible_update_property (GTK_ACCESSIBLE (self),
                                  GTK_ACCESSIBLE_PROPERTY_LABEL, _("Diffusion canvas"),
                                  GTK_ACCESSIBLE_PROPERTY_DESCRIPTION, _("No run yet"),
                                  -1);
}

GtkWidget *
um_diffusion_view_new (void)
{
  return g_object_new (UM_TYPE_DIFFUSION_VIEW, NULL);
}

void
um_diffusion_view_set_token_text_func (UmDiffusionView *self,
                                       UmTokenTextFunc  func,
                                       gpointer         user_data,
                                       GDestroyNotify   destroy)
{
  g_return_if_fail (UM_IS_DIFFUSION_VIEW (self));

  if (self->text_destroy != NULL)
    self->text_destroy (self->text_data);
  self->text_func = func;
  self->text_data = user_data;
  self->text_destroy = destroy;
  invalidate_glyphs (self);
  invalidate_flow (self);
  schedule_accessible (self);
}

void
um_diffusion_view_set_special_ids (UmDiffusionView *self,
                                   gint32           mask_id,
                                   gint32           eos_id,
                                   gint32           eot_id)
{
  g_return_if_fail (UM_IS_DIFFUSION_VIEW (self));

  self->mask_id = mask_id;
  self->eos_id = eos_id;
  self->eot_id = eot_id;
  invalidate_glyphs (self);
  invalidate_flow (self);
  schedule_accessible (self);
}

void
um_diffusion_view_reset (UmDiffusionView *self,
                         int              prompt_len,
                         int              gen_length,
                         int              block_length,
                         int              n_steps)
{
  g_return_if_fail (UM_IS_DIFFUSION_VIEW (self));

  if (gen_length < 0 || gen_length > MAX_GEN_LENGTH)
    {
      g_warning ("Diffusion view: generation length %d out of range", gen_length);
      gen_length = CLAMP (gen_length, 0, MAX_GEN_LENGTH);
    }
  g_object_freeze_notify (G_OBJECT (self));
  reset_canvas (self, gen_length);
  self->has_run = TRUE;
  self->prompt_len = MAX (prompt_len, 0);
  /* No (or a bad) block length: one block, no boundaries. */
  self->block_length = block_length > 0 ? block_length : MAX (gen_length, 1);
  self->block_offset = 0;
  set_n_steps (self, MAX (n_steps, 0));
  set_following_internal (self, TRUE);
  g_object_thaw_notify (G_OBJECT (self));
}

void
um_diffusion_view_set_block_offset (UmDiffusionView *self,
                                    int              offset)
{
  g_return_if_fail (UM_IS_DIFFUSION_VIEW (self));

  self->block_offset = self->block_length > 0 ? CLAMP (offset, 0, self->block_length - 1) : 0;
  invalidate_flow (self);
}

void
um_diffusion_view_clear (UmDiffusionView *self)
{
  g_return_if_fail (UM_IS_DIFFUSION_VIEW (self));

  g_object_freeze_notify (G_OBJECT (self));
  reset_canvas (self, 0);
  self->has_run = FALSE;
  self->prompt_len = 0;
  self->block_length = 1;
  self->block_offset = 0;
  set_n_steps (self, 0);
  set_following_internal (self, TRUE);
  g_object_thaw_notify (G_OBJECT (self));
}

/* After the frame's layout (below redraw priority): scroll so the cells of
 * the shown step are visible. Watching a long answer, the user should not
 * have to chase the canvas. */
static gboolean
scroll_to_shown_step (gpointer data)
{
  UmDiffusionView *self = data;
  const Commit *commits = (const Commit *) (gpointer) self->commits->data;
  const guint *ends = (const guint *) (gpointer) self->step_ends->data;
  int step = self->shown_step;
  double lo = G_MAXDOUBLE, hi = -1, ox = 0, oy = 0, value, page, target;

  self->scroll_id = 0;
  if (self->vadjustment == NULL || self->scrollable == NULL || step < 0 || !self->following
      || !gtk_widget_get_mapped (GTK_WIDGET (self)))
    return G_SOURCE_REMOVE;
  um_diffusion_view_ensure_flow (self);
  for (guint c = step > 0 ? ends[step - 1] : 0; c < ends[step]; c++)
    {
      const Cell *cell = &self->cells[commits[c].pos];
      lo = MIN (lo, cell->y);
      hi = MAX (hi, cell->y + self->cell_h);
    }
  if (hi < 0 || !gtk_widget_translate_coordinates (GTK_WIDGET (self), self->scrollable, 0, 0, &ox, &oy))
    return G_SOURCE_REMOVE;
  /* The scrollable's coordinates are already scrolled by the value. */
  value = gtk_adjustment_get_value (self->vadjustment);
  page = gtk_adjustment_get_page_size (self->vadjustment);
  lo += oy + value;
  hi += oy + value;
  target = value;
  if (hi > value + page)
    target = hi - page + self->cell_h;
  if (lo < target)
    target = lo - self->cell_h;
  if (target != value)
    gtk_adjustment_set_value (self->vadjustment, target);
  return G_SOURCE_REMOVE;
}

void
um_diffusion_view_add_step (UmDiffusionView *self,
                            int              step,
                            const gint32    *positions,
                            const gint32    *ids,
                            const float     *confidences,
                            int              n)
{
  int n_recorded;
  guint end;
  int n_ignored = 0;

  g_return_if_fail (UM_IS_DIFFUSION_VIEW (self));
  g_return_if_fail (n <= 0 || (positions != NULL && ids != NULL));

  n_recorded = self->step_ends->len;
  if (!self->has_run || step < n_recorded || step > n_recorded + MAX_STEP_GAP)
    {
      if (!self->warned)
        g_warning ("Diffusion view: step %d ignored (%s)", step,
                   !self->has_run ? "no run" : "out of order");
      self->warned = TRUE;
      return;
    }

  /* A step that never came is recorded empty, so that step numbers stay
   * the engine's. */
  end = self->commits->len;
  while ((int) self->step_ends->len < step)
    g_array_append_val (self->step_ends, end);
  for (int i = 0; i < n; i++)
    {
      gint64 pos = (gint64) positions[i] - self->prompt_len;
      Commit commit;

      if (pos < 0 || pos >= self->gen_length)
        {
          n_ignored++;
          continue;
        }
      commit.pos = (gint32) pos;
      commit.id = ids[i];
      commit.confidence = confidences != NULL ? confidences[i] : 1.f;
      g_array_append_val (self->commits, commit);
    }
  end = self->commits->len;
  g_array_append_val (self->step_ends, end);
  if (n_ignored > 0 && !self->warned)
    {
      g_warning ("Diffusion view: %d position(s) of step %d outside the canvas ignored",
                 n_ignored, step);
      self->warned = TRUE;
    }

  g_object_freeze_notify (G_OBJECT (self));
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_N_STEPS_RECORDED]);
  if ((int) self->step_ends->len > self->n_steps)
    set_n_steps (self, self->step_ends->len);
  if (self->following)
    {
      show_step (self, step);
      start_animation (self);
      if (self->scroll_id == 0)
        self->scroll_id = g_idle_add_full (GDK_PRIORITY_REDRAW + 10, scroll_to_shown_step, self, NULL);
    }
  g_object_thaw_notify (G_OBJECT (self));
}

int
um_diffusion_view_get_n_steps_recorded (UmDiffusionView *self)
{
  g_return_val_if_fail (UM_IS_DIFFUSION_VIEW (self), 0);

  return self->step_ends->len;
}

int
um_diffusion_view_get_n_steps (UmDiffusionView *self)
{
  g_return_val_if_fail (UM_IS_DIFFUSION_VIEW (self), 0);

  return self->n_steps;
}

void
um_diffusion_view_set_shown_step (UmDiffusionView *self,
                                  int              step)
{
  g_return_if_fail (UM_IS_DIFFUSION_VIEW (self));

  g_object_freeze_notify (G_OBJECT (self));
  stop_animation (self);
  set_following_internal (self, FALSE);
  show_step (self, step);
  g_object_thaw_notify (G_OBJECT (self));
}

int
um_diffusion_view_get_shown_step (UmDiffusionView *self)
{
  g_return_val_if_fail (UM_IS_DIFFUSION_VIEW (self), -1);

  return self->shown_step;
}

void
um_diffusion_view_set_following (UmDiffusionView *self,
                                 gboolean         following)
{
  g_return_if_fail (UM_IS_DIFFUSION_VIEW (self));

  g_object_freeze_notify (G_OBJECT (self));
  set_following_internal (self, following);
  if (following)
    {
      stop_animation (self);
      show_step (self, self->step_ends->len - 1);
    }
  g_object_thaw_notify (G_OBJECT (self));
}

gboolean
um_diffusion_view_get_following (UmDiffusionView *self)
{
  g_return_val_if_fail (UM_IS_DIFFUSION_VIEW (self), FALSE);

  return self->following;
}

GArray *
um_diffusion_view_get_shown_ids (UmDiffusionView *self)
{
  GArray *ids;

  g_return_val_if_fail (UM_IS_DIFFUSION_VIEW (self), NULL);

  ids = g_array_sized_new (FALSE, FALSE, sizeof (gint32), self->gen_length);
  for (int i = 0; i < self->gen_length; i++)
    {
      gint32 id = cell_filled (&self->cells[i]) ? self->cells[i].id : self->mask_id;
      g_array_append_val (ids, id);
    }
  return ids;
}

void
um_diffusion_view_set_fixed (UmDiffusionView *self,
                             const gint32    *positions,
                             const gint32    *ids,
                             int              n)
{
  g_return_if_fail (UM_IS_DIFFUSION_VIEW (self));
  g_return_if_fail (n <= 0 || (positions != NULL && ids != NULL));

  for (int i = 0; i < n; i++)
    {
      gint64 pos = (gint64) positions[i] - self->prompt_len;
      Cell *cell;

      if (pos < 0 || pos >= self->gen_length || ids[i] < 0)
        continue;
      cell = &self->cells[pos];
      cell->fixed_id = ids[i];
      /* A cell committed in the shown step keeps its token until replay goes back. */
      if (cell->step < 0 && cell->id != ids[i])
        {
          cell->id = ids[i];
          cell->glyph = NULL;
        }
    }
  invalidate_flow (self);
  schedule_accessible (self);
}

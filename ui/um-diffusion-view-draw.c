/* um-diffusion-view-draw.c — drawing the diffusion view: mask cells from
 * one prebuilt node, committed cells coloured by confidence (the newest
 * step's fading in), the current block's outline; only the rows the
 * scrolled window shows. */
#include "um-diffusion-view-private.h"

#include <glib/gi18n.h>

static void
get_palette (UmDiffusionView *self, Palette *pal)
{
  const GdkRGBA mask_light = HEX_RGBA (COLOR_MASK, 0.85f);
  const GdkRGBA mask_dark = HEX_RGBA (0x4e4e4e, 1.f);
  const GdkRGBA earlier = HEX_RGBA (COLOR_EARLIER, 1.f);

  G_GNUC_BEGIN_IGNORE_DEPRECATIONS
  gtk_style_context_get_color (gtk_widget_get_style_context (GTK_WIDGET (self)), &pal->fg);
  G_GNUC_END_IGNORE_DEPRECATIONS

  /* Without libadwaita (other hosts) a light text colour means dark. */
  if (self->style_manager == NULL)
    {
      gboolean dark = 0.299f * pal->fg.red + 0.587f * pal->fg.green + 0.114f * pal->fg.blue > 0.5f;
      if (dark != self->dark)
        g_clear_pointer (&self->mask_node, gsk_render_node_unref);
      self->dark = dark;
    }

  pal->mask = self->dark ? mask_dark : mask_light;
  pal->earlier = earlier;
  pal->earlier.alpha = self->dark ? 0.42f : 0.32f;
  pal->on_highlight = (GdkRGBA) { 0.f, 0.f, 0.f, 0.87f };
  pal->bar = pal->fg;
  pal->bar.alpha = 0.35f;
  pal->outline = earlier;
  pal->outline.alpha = self->dark ? 0.7f : 0.8f;
  pal->outline_fill = pal->fg;
  pal->outline_fill.alpha = 0.05f;
}

static void
confidence_color (float confidence, gboolean dark, GdkRGBA *color)
{
  const GdkRGBA low = HEX_RGBA (COLOR_LOW, 1.f);
  const GdkRGBA medium = HEX_RGBA (COLOR_MEDIUM, 1.f);
  const GdkRGBA high = HEX_RGBA (COLOR_HIGH, 1.f);

  /* NaN counts as low. */
  *color = !(confidence >= 0.3f) ? low : confidence < 0.7f ? medium : high;
  if (dark)
    {
      /* A touch deeper, so the highlights do not glare on a dark canvas. */
      color->red *= 0.9f;
      color->green *= 0.9f;
      color->blue *= 0.9f;
    }
}

static void
append_rounded (GtkSnapshot           *snapshot,
                const graphene_rect_t *rect,
                float                  radius,
                const GdkRGBA         *color)
{
  GskRoundedRect rounded;

  gsk_rounded_rect_init_from_rect (&rounded, rect, radius);
  gtk_snapshot_push_rounded_clip (snapshot, &rounded);
  gtk_snapshot_append_color (snapshot, color, rect);
  gtk_snapshot_pop (snapshot);
}

static void
append_ring (GtkSnapshot           *snapshot,
             const graphene_rect_t *rect,
             float                  radius,
             const GdkRGBA         *color)
{
  GskRoundedRect rounded;
  const float widths[4] = { 1.f, 1.f, 1.f, 1.f };
  const GdkRGBA colors[4] = { *color, *color, *color, *color };

  gsk_rounded_rect_init_from_rect (&rounded, rect, radius);
  gtk_snapshot_append_border (snapshot, &rounded, widths, colors);
}

/* One mask cell: a dark rounded box with three faint dots, the "still
 * noise" look of ▒ without a font lookup per cell. */
static GskRenderNode *
build_mask_node (UmDiffusionView *self, const Palette *pal)
{
  GtkSnapshot *snapshot = gtk_snapshot_new ();
  float w = self->mask_w, h = self->cell_h;
  GdkRGBA dot = { 1.f, 1.f, 1.f, self->dark ? 0.28f : 0.38f };

  append_rounded (snapshot, &GRAPHENE_RECT_INIT (0, 0, w, h), RADIUS, &pal->mask);
  for (int i = -1; i <= 1; i++)
    {
      float r = 1.5f;
      float cx = w / 2 + i * w / 5.f, cy = h / 2;
      append_rounded (snapshot, &GRAPHENE_RECT_INIT (cx - r, cy - r, 2 * r, 2 * r), r, &dot);
    }
  return gtk_snapshot_free_to_node (snapshot);
}

static void
snapshot_committed (UmDiffusionView *self,
                    GtkSnapshot     *snapshot,
                    Cell            *cell,
                    const Palette   *pal)
{
  const Glyph *glyph = um_diffusion_view_cell_glyph (self, cell);
  graphene_rect_t rect = GRAPHENE_RECT_INIT (cell->x, cell->y, cell->w, self->cell_h);
  /* A token in place from the start was never the news of a step. */
  gboolean current = cell->step >= 0 && cell->step == self->shown_step;
  double p = current ? self->anim_progress : 1.0;
  float opacity = 1.f;
  GdkRGBA bg, text;

  if (current)
    {
      confidence_color (cell->confidence, self->dark, &bg);
      text = pal->on_highlight;
    }
  else
    {
      bg = pal->earlier;
      text = pal->fg;
    }
  if (glyph->flags & GLYPH_PLACEHOLDER)
    text.alpha *= 0.5f;
  if (glyph->flags & GLYPH_END)
    opacity = 0.55f;

  if (p < 1.0)
    {
      /* Fade in over the fading mask, with a small pulse. */
      GdkRGBA mask = pal->mask;
      float q = 1.f - (float) p;
      float ease = 1.f - q * q * q;
      float scale = 1.3f - 0.3f * ease;
      graphene_point_t centre = GRAPHENE_POINT_INIT (cell->x + cell->w / 2.f,
                                                     cell->y + self->cell_h / 2.f);

      mask.alpha *= 1.f - (float) p;
      append_rounded (snapshot, &rect, RADIUS, &mask);
      gtk_snapshot_save (snapshot);
      gtk_snapshot_translate (snapshot, &centre);
      gtk_snapshot_scale (snapshot, scale, scale);
      gtk_snapshot_translate (snapshot, &GRAPHENE_POINT_INIT (-centre.x, -centre.y));
      opacity *= (float) p;
    }
  if (opacity < 1.f)
    gtk_snapshot_push_opacity (snapshot, opacity);

  append_rounded (snapshot, &rect, RADIUS, &bg);
  if (current)
    {
      GdkRGBA ring = { bg.red * 0.65f, bg.green * 0.65f, bg.blue * 0.65f, 1.f };
      append_ring (snapshot, &rect, RADIUS, &ring);
    }
  gtk_snapshot_save (snapshot);
  gtk_snapshot_translate (snapshot, &GRAPHENE_POINT_INIT (cell->x + PAD_X, cell->y + glyph->text_y));
  gtk_snapshot_append_layout (snapshot, glyph->layout, &text);
  gtk_snapshot_restore (snapshot);

  if (opacity < 1.f)
    gtk_snapshot_pop (snapshot);
  if (p < 1.0)
    gtk_snapshot_restore (snapshot);
}

/* The current block, one rounded outline per row it spans. */
static void
snapshot_current_block (UmDiffusionView *self,
                        GtkSnapshot     *snapshot,
                        const Palette   *pal)
{
  int start = MAX (self->current_block * self->block_length - self->block_offset, 0);
  int end = MIN (self->current_block * self->block_length - self->block_offset + self->block_length,
                 self->gen_length);
  int i = start;

  while (i < end)
    {
      int row_y = self->cells[i].y;
      int x0 = self->cells[i].x, x1;
      graphene_rect_t rect;

      while (i + 1 < end && self->cells[i + 1].y == row_y)
        i++;
      x1 = self->cells[i].x + self->cells[i].w;
      rect = GRAPHENE_RECT_INIT (x0 - OUTLINE, row_y - OUTLINE,
                                 x1 - x0 + 2 * OUTLINE, self->cell_h + 2 * OUTLINE);
      append_rounded (snapshot, &rect, RADIUS + OUTLINE, &pal->outline_fill);
      append_ring (snapshot, &rect, RADIUS + OUTLINE, &pal->outline);
      i++;
    }
}

static void
snapshot_hint (UmDiffusionView *self,
               GtkSnapshot     *snapshot,
               const Palette   *pal)
{
  GdkRGBA color = pal->fg;
  PangoRectangle logical;

  if (self->hint_layout == NULL)
    self->hint_layout = gtk_widget_create_pango_layout (GTK_WIDGET (self), _("No run yet"));
  pango_layout_get_pixel_extents (self->hint_layout, NULL, &logical);
  color.alpha *= 0.5f;
  gtk_snapshot_save (snapshot);
  gtk_snapshot_translate (snapshot, &GRAPHENE_POINT_INIT (
                            (gtk_widget_get_width (GTK_WIDGET (self)) - logical.width) / 2,
                            (gtk_widget_get_height (GTK_WIDGET (self)) - logical.height) / 2));
  gtk_snapshot_append_layout (snapshot, self->hint_layout, &color);
  gtk_snapshot_restore (snapshot);
}

void
um_diffusion_view_draw (GtkWidget   *widget,
                        GtkSnapshot *snapshot)
{
  UmDiffusionView *self = UM_DIFFUSION_VIEW (widget);
  float top = -G_MAXFLOAT, bottom = G_MAXFLOAT;
  graphene_rect_t view;
  Palette pal;

  um_diffusion_view_ensure_metrics (self);
  get_palette (self, &pal);
  if (!self->has_run)
    {
      snapshot_hint (self, snapshot, &pal);
      return;
    }
  um_diffusion_view_ensure_flow (self);

  /* Only what the scrolled window shows (a row of slack for the pulse). */
  if (self->scrollable != NULL
      && gtk_widget_compute_bounds (self->scrollable, widget, &view))
    {
      top = view.origin.y - self->cell_h;
      bottom = view.origin.y + view.size.height + self->cell_h;
    }

  if (self->current_block >= 0)
    snapshot_current_block (self, snapshot, &pal);

  if (self->mask_node == NULL)
    self->mask_node = build_mask_node (self, &pal);

  for (int i = um_diffusion_view_first_cell_below (self, top); i < self->gen_length; i++)
    {
      Cell *cell = &self->cells[i];

      if (cell->y > bottom)
        break;
      if (cell->bar_x >= 0)
        gtk_snapshot_append_color (snapshot, &pal.bar,
                                   &GRAPHENE_RECT_INIT (cell->bar_x - 1, cell->y + 1,
                                                        2, self->cell_h - 2));
      if (cell_filled (cell))
        snapshot_committed (self, snapshot, cell, &pal);
      else if (self->mask_node != NULL)
        {
          gtk_snapshot_save (snapshot);
          gtk_snapshot_translate (snapshot, &GRAPHENE_POINT_INIT (cell->x, cell->y));
          gtk_snapshot_append_node (snapshot, self->mask_node);
          gtk_snapshot_restore (snapshot);
        }
    }
}

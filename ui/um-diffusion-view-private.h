/* um-diffusion-view-private.h — the diffusion view's state, shared by
 * um-diffusion-view.c (recording, layout, input) and
 * um-diffusion-view-draw.c (drawing). */
#pragma once

#include <adwaita.h>

#include "um-diffusion-view.h"

#define INSET           3     /* room for the current block's outline */
#define OUTLINE         2
#define PAD_X           4
#define PAD_Y           2
#define CELL_GAP        2
#define ROW_GAP         6
#define BLOCK_GAP       10
#define RADIUS          4.f
#define NAT_CELLS       24    /* natural width, in mask cells */
#define ANIM_USEC       (250 * G_TIME_SPAN_MILLISECOND)
#define MIN_ANIM_USEC   (40 * G_TIME_SPAN_MILLISECOND)
#define A11Y_DELAY_MS   500
#define MAX_TOKEN_CHARS 32
#define MAX_TIP_CHARS   80
#define MAX_GEN_LENGTH  (1 << 20)
#define MAX_STEP_GAP    65536

typedef enum {
  GLYPH_WORD_START  = 1 << 0,  /* began with a space: a word gap goes before it */
  GLYPH_BREAK       = 1 << 1,  /* held a newline: the next cell starts a row */
  GLYPH_END         = 1 << 2,  /* EOS/EOT: a small dimmed end marker */
  GLYPH_PLACEHOLDER = 1 << 3,  /* nothing printable: a dim placeholder */
} GlyphFlags;

typedef struct {
  PangoLayout *layout;
  char        *text;      /* the token's text, valid UTF-8 */
  int          width;     /* of the cell, padding included */
  int          text_y;    /* centres the layout in the cell */
  guint        flags;
} Glyph;

typedef struct {
  gint32 id;          /* last id committed here; kept while masked so that
                       * scrubbing back and forth reuses the glyph */
  int    step;        /* step that committed it, as shown; -1: masked */
  gint32 fixed_id;    /* in place before the first step, or -1 */
  float  confidence;
  Glyph *glyph;       /* of id, borrowed from glyphs; NULL: not looked up */
  int    x, y, w;     /* from the last stored flow */
  int    bar_x;       /* block boundary bar before the cell, or -1 */
} Cell;

typedef struct {
  gint32 pos;         /* relative to the first generated position */
  gint32 id;
  float  confidence;
} Commit;

typedef struct {
  GdkRGBA fg;
  GdkRGBA earlier;      /* background of cells committed before the shown step */
  GdkRGBA on_highlight; /* text on the confidence colours */
  GdkRGBA mask;
  GdkRGBA bar;
  GdkRGBA outline;
  GdkRGBA outline_fill;
} Palette;

struct _UmDiffusionView {
  GtkWidget        parent_instance;

  UmTokenTextFunc  text_func;
  gpointer         text_data;
  GDestroyNotify   text_destroy;
  gint32           mask_id, eos_id, eot_id;

  /* The run as recorded. */
  gboolean         has_run;
  int              prompt_len, gen_length, block_length, n_steps;
  int              block_offset;   /* blocks start where (i + block_offset) % block_length == 0 */
  GArray          *commits;       /* Commit, all steps in order */
  GArray          *step_ends;     /* guint: end of step k's commits */
  gboolean         warned;        /* bad input was reported for this run */

  /* The canvas as shown. */
  Cell            *cells;
  int              shown_step;
  int              current_block; /* holds the shown step's commits; -1: none */
  gboolean         following;

  /* Layout caches. */
  GHashTable      *glyphs;        /* id -> Glyph */
  gboolean         metrics_valid;
  guint            pango_serial;
  int              cell_h, mask_w, space_w;
  GskRenderNode   *mask_node;     /* one mask cell at the origin */
  PangoLayout     *hint_layout;
  int              flow_width;    /* cells' x/y are for this width; -1: stale */
  int              flow_height;
  int              measured_width, measured_height;

  AdwStyleManager *style_manager; /* while rooted and libadwaita is up */
  gboolean         dark;

  /* The newest step's cells fade in. */
  guint            tick_id;
  gint64           anim_start;    /* frame time; 0: at the next frame */
  gint64           anim_duration;
  double           anim_progress; /* 1: settled */
  gint64           last_step_time;

  /* Only rows inside the scrolled window's view are drawn. */
  GtkWidget       *scrollable;
  GtkAdjustment   *vadjustment;

  guint            a11y_id;
  guint            scroll_id;     /* keeps the newest step in view */
};

/* Colours of the LLaDA Gradio demo. */
#define HEX_RGBA(hex, a) { ((hex) >> 16 & 0xff) / 255.f, ((hex) >> 8 & 0xff) / 255.f, \
                           ((hex) & 0xff) / 255.f, (a) }
#define COLOR_MASK      0x444444
#define COLOR_EARLIER   0x6699cc
#define COLOR_LOW       0xff6666
#define COLOR_MEDIUM    0xffaa33
#define COLOR_HIGH      0x66cc66

/* Whether the cell shows a token (committed by the shown step or before,
 * or in place from the start); its id is then cell->id. */
static inline gboolean
cell_filled (const Cell *cell)
{
  return cell->step >= 0 || cell->fixed_id >= 0;
}

/* Layout (um-diffusion-view.c). */
void         um_diffusion_view_ensure_metrics (UmDiffusionView *self);
void         um_diffusion_view_ensure_flow (UmDiffusionView *self);
Glyph       *um_diffusion_view_cell_glyph (UmDiffusionView *self, Cell *cell);
int          um_diffusion_view_first_cell_below (UmDiffusionView *self, double y);

/* GtkWidget::snapshot (um-diffusion-view-draw.c). */
void         um_diffusion_view_draw (GtkWidget *widget, GtkSnapshot *snapshot);

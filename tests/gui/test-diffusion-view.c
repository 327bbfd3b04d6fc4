/* test-diffusion-view.c — the diffusion canvas widget: recording, replay,
 * properties, layout, rendering and lifetime.
 *
 * Runs under a display: dbus-run-session -- xvfb-run -a, with
 * GSK_RENDERER=cairo GTK_A11Y=test.
 */
#include <adwaita.h>
#include <math.h>
#include <string.h>

#include "um-diffusion-view.h"

#define MASK_ID 126336
#define EOS_ID  126081
#define EOT_ID  126348

static const char *const vocab[] = {
  " the", " quick", " brown", " fox", "\n", "\t", "", "   ", "\xff", " jumps",
  " over", " lazy", " dog", ".", ",", " 1", "2", "Hello", " world",
};

static char *
fake_text (gint32 id, gpointer user_data)
{
  int *calls = user_data;

  if (calls != NULL)
    (*calls)++;
  if (id == EOS_ID)
    return g_strdup ("<|endoftext|>");
  if (id == EOT_ID)
    return g_strdup ("<|eot_id|>");
  return g_strdup (vocab[id % G_N_ELEMENTS (vocab)]);
}

/* A fake run in LLaDA's semi-autoregressive order: the blocks one after
 * another, each committed over its share of the steps in random order. */
typedef struct {
  int     prompt_len, gen_length, block_length, n_steps;
  GArray *positions;   /* gint32, absolute */
  GArray *ids;         /* gint32 */
  GArray *confidences; /* float */
  GArray *ends;        /* int: end of step k */
} FakeRun;

static void
fake_run_free (FakeRun *run)
{
  g_array_unref (run->positions);
  g_array_unref (run->ids);
  g_array_unref (run->confidences);
  g_array_unref (run->ends);
  g_free (run);
}

G_DEFINE_AUTOPTR_CLEANUP_FUNC (FakeRun, fake_run_free)

static FakeRun *
fake_run_new (int prompt_len, int gen_length, int block_length, int n_steps, guint32 seed)
{
  FakeRun *run = g_new0 (FakeRun, 1);
  g_autoptr(GRand) rand = g_rand_new_with_seed (seed);
  int n_blocks = gen_length / block_length;
  int steps_per_block = n_steps / n_blocks;

  g_assert_cmpint (gen_length % block_length, ==, 0);
  g_assert_cmpint (n_steps % n_blocks, ==, 0);
  run->prompt_len = prompt_len;
  run->gen_length = gen_length;
  run->block_length = block_length;
  run->n_steps = n_steps;
  run->positions = g_array_new (FALSE, FALSE, sizeof (gint32));
  run->ids = g_array_new (FALSE, FALSE, sizeof (gint32));
  run->confidences = g_array_new (FALSE, FALSE, sizeof (float));
  run->ends = g_array_new (FALSE, FALSE, sizeof (int));

  for (int b = 0; b < n_blocks; b++)
    {
      g_autofree int *order = g_new (int, block_length);
      int done = 0;

      for (int i = 0; i < block_length; i++)
        order[i] = i;
      for (int i = block_length - 1; i > 0; i--)
        {
          int j = g_rand_int_range (rand, 0, i + 1);
          int t = order[i];
          order[i] = order[j];
          order[j] = t;
        }
      for (int s = 0; s < steps_per_block; s++)
        {
          int count = block_length / steps_per_block + (s < block_length % steps_per_block);
          for (int i = 0; i < count; i++, done++)
            {
              gint32 pos = prompt_len + b * block_length + order[done];
              gint32 id = g_rand_int_range (rand, 0, 64);
              float confidence = (float) g_rand_double (rand);
              /* The tail of the canvas ends up end-of-text, as in real runs. */
              if (pos - prompt_len >= gen_length - gen_length / 8)
                id = (pos % 2) ? EOS_ID : EOT_ID;
              g_array_append_val (run->positions, pos);
              g_array_append_val (run->ids, id);
              g_array_append_val (run->confidences, confidence);
            }
          g_array_append_val (run->ends, run->positions->len);
        }
    }
  return run;
}

static int
fake_run_step_start (FakeRun *run, int step)
{
  return step > 0 ? g_array_index (run->ends, int, step - 1) : 0;
}

static void
fake_run_add_step (FakeRun *run, UmDiffusionView *view, int step)
{
  int start = fake_run_step_start (run, step);
  int n = g_array_index (run->ends, int, step) - start;

  um_diffusion_view_add_step (view, step,
                              &g_array_index (run->positions, gint32, start),
                              &g_array_index (run->ids, gint32, start),
                              &g_array_index (run->confidences, float, start),
                              n);
}

/* The canvas after @step, built by hand. */
static GArray *
fake_run_canvas (FakeRun *run, int step)
{
  GArray *canvas = g_array_new (FALSE, FALSE, sizeof (gint32));
  gint32 mask = MASK_ID;

  for (int i = 0; i < run->gen_length; i++)
    g_array_append_val (canvas, mask);
  for (int c = 0; step >= 0 && c < g_array_index (run->ends, int, step); c++)
    g_array_index (canvas, gint32, g_array_index (run->positions, gint32, c) - run->prompt_len)
      = g_array_index (run->ids, gint32, c);
  return canvas;
}

static void
assert_ids_equal (GArray *a, GArray *b)
{
  g_assert_cmpuint (a->len, ==, b->len);
  for (guint i = 0; i < a->len; i++)
    if (g_array_index (a, gint32, i) != g_array_index (b, gint32, i))
      g_error ("canvas differs at %u: %d != %d", i,
               g_array_index (a, gint32, i), g_array_index (b, gint32, i));
}

static void
assert_shown (UmDiffusionView *view, FakeRun *run, int step)
{
  g_autoptr(GArray) shown = um_diffusion_view_get_shown_ids (view);
  g_autoptr(GArray) expected = fake_run_canvas (run, step);

  assert_ids_equal (shown, expected);
  g_assert_cmpint (um_diffusion_view_get_shown_step (view), ==, step);
}

static UmDiffusionView *
new_view (void)
{
  UmDiffusionView *view = UM_DIFFUSION_VIEW (g_object_ref_sink (um_diffusion_view_new ()));

  um_diffusion_view_set_token_text_func (view, fake_text, NULL, NULL);
  um_diffusion_view_set_special_ids (view, MASK_ID, EOS_ID, EOT_ID);
  return view;
}

static gboolean
set_flag (gpointer data)
{
  *(gboolean *) data = TRUE;
  return G_SOURCE_REMOVE;
}

/* Runs the main loop for @ms, so frames (layout, ticks) happen. */
static void
run_main_loop_for (guint ms)
{
  gboolean done = FALSE;

  g_timeout_add (ms, set_flag, &done);
  while (!done)
    g_main_context_iteration (NULL, TRUE);
}

static void
wait_until_mapped (GtkWidget *widget)
{
  gint64 deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;

  while (!gtk_widget_get_mapped (widget) || gtk_widget_get_width (widget) == 0)
    {
      g_assert_cmpint (g_get_monotonic_time (), <, deadline);
      g_main_context_iteration (NULL, FALSE);
      g_usleep (1000);
    }
  run_main_loop_for (50);
}

/* A window with the view in a vertical scrolled window, as in the app. */
static GtkWidget *
new_window (UmDiffusionView *view, int width, int height)
{
  GtkWidget *window = gtk_window_new ();
  GtkWidget *scrolled = gtk_scrolled_window_new ();

  gtk_scrolled_window_set_policy (GTK_SCROLLED_WINDOW (scrolled), GTK_POLICY_NEVER,
                                  GTK_POLICY_AUTOMATIC);
  gtk_scrolled_window_set_child (GTK_SCROLLED_WINDOW (scrolled), GTK_WIDGET (view));
  gtk_window_set_child (GTK_WINDOW (window), scrolled);
  gtk_window_set_default_size (GTK_WINDOW (window), width, height);
  return window;
}

static void
destroy_window (GtkWidget *window)
{
  gtk_window_destroy (GTK_WINDOW (window));
  run_main_loop_for (20);
}

static void
set_dark (gboolean dark)
{
  adw_style_manager_set_color_scheme (adw_style_manager_get_default (),
                                      dark ? ADW_COLOR_SCHEME_FORCE_DARK : ADW_COLOR_SCHEME_FORCE_LIGHT);
  run_main_loop_for (100);
}

/* Renders the widget's own snapshot, as its parent would, to a texture. */
static GdkTexture *
render_view (UmDiffusionView *view)
{
  GtkWidget *widget = GTK_WIDGET (view);
  int width = gtk_widget_get_width (widget);
  int height = MIN (gtk_widget_get_height (widget), 2000);
  GtkSnapshot *snapshot = gtk_snapshot_new ();
  GskRenderer *renderer = gtk_native_get_renderer (gtk_widget_get_native (widget));
  g_autoptr(GskRenderNode) node = NULL;

  g_assert_cmpint (width, >, 0);
  g_assert_cmpint (height, >, 0);
  GTK_WIDGET_GET_CLASS (widget)->snapshot (widget, snapshot);
  node = gtk_snapshot_free_to_node (snapshot);
  g_assert_nonnull (node);
  return gsk_renderer_render_texture (renderer, node, &GRAPHENE_RECT_INIT (0, 0, width, height));
}

static guchar *
download (GdkTexture *texture, gsize *size)
{
  int width = gdk_texture_get_width (texture);
  int height = gdk_texture_get_height (texture);
  guchar *data = g_malloc (width * height * 4);

  gdk_texture_download (texture, data, width * 4);
  *size = width * height * 4;
  return data;
}

/* Pixels within a small tolerance of an opaque @rgb (texture bytes are
 * B, G, R, A). */
static int
count_color (GdkTexture *texture, guint32 rgb, float scale)
{
  gsize size;
  g_autofree guchar *data = download (texture, &size);
  int r = (int) (((rgb >> 16) & 0xff) * scale + 0.5f);
  int g = (int) (((rgb >> 8) & 0xff) * scale + 0.5f);
  int b = (int) ((rgb & 0xff) * scale + 0.5f);
  int count = 0;

  for (gsize i = 0; i < size; i += 4)
    if (data[i + 3] == 255 && ABS (data[i + 2] - r) <= 3 && ABS (data[i + 1] - g) <= 3
        && ABS (data[i] - b) <= 3)
      count++;
  return count;
}

/* Opaque grey pixels darker than @level: mask cells on a light window. */
static int
count_dark_grey (GdkTexture *texture, int level)
{
  gsize size;
  g_autofree guchar *data = download (texture, &size);
  int count = 0;

  for (gsize i = 0; i < size; i += 4)
    if (data[i + 3] == 255 && data[i] < level && data[i] == data[i + 1] && data[i] == data[i + 2])
      count++;
  return count;
}

static gboolean
textures_equal (GdkTexture *a, GdkTexture *b)
{
  gsize size_a, size_b;
  g_autofree guchar *da = download (a, &size_a);
  g_autofree guchar *db = download (b, &size_b);

  return size_a == size_b && memcmp (da, db, size_a) == 0;
}

static void
test_reset (void)
{
  g_autoptr(UmDiffusionView) view = new_view ();
  g_autoptr(GArray) empty = um_diffusion_view_get_shown_ids (view);
  g_autoptr(GArray) ids = NULL;

  g_assert_cmpuint (empty->len, ==, 0);
  g_assert_cmpint (um_diffusion_view_get_shown_step (view), ==, -1);
  g_assert_true (um_diffusion_view_get_following (view));
  g_assert_cmpint (um_diffusion_view_get_n_steps (view), ==, 0);

  um_diffusion_view_reset (view, 7, 64, 16, 32);
  ids = um_diffusion_view_get_shown_ids (view);
  g_assert_cmpuint (ids->len, ==, 64);
  for (guint i = 0; i < ids->len; i++)
    g_assert_cmpint (g_array_index (ids, gint32, i), ==, MASK_ID);
  g_assert_cmpint (um_diffusion_view_get_n_steps (view), ==, 32);
  g_assert_cmpint (um_diffusion_view_get_n_steps_recorded (view), ==, 0);
  g_assert_cmpint (um_diffusion_view_get_shown_step (view), ==, -1);

  /* A second reset forgets the first run. */
  {
    g_autoptr(FakeRun) run = fake_run_new (7, 64, 16, 32, 1);
    g_autoptr(GArray) again = NULL;

    for (int s = 0; s < 5; s++)
      fake_run_add_step (run, view, s);
    um_diffusion_view_reset (view, 3, 32, 32, 8);
    again = um_diffusion_view_get_shown_ids (view);
    g_assert_cmpuint (again->len, ==, 32);
    for (guint i = 0; i < again->len; i++)
      g_assert_cmpint (g_array_index (again, gint32, i), ==, MASK_ID);
    g_assert_cmpint (um_diffusion_view_get_n_steps_recorded (view), ==, 0);
    g_assert_cmpint (um_diffusion_view_get_n_steps (view), ==, 8);
  }

  um_diffusion_view_clear (view);
  g_clear_pointer (&ids, g_array_unref);
  ids = um_diffusion_view_get_shown_ids (view);
  g_assert_cmpuint (ids->len, ==, 0);
  g_assert_null (um_diffusion_view_describe_position (view, 0));
}

static void
test_follow (void)
{
  g_autoptr(UmDiffusionView) view = new_view ();
  g_autoptr(FakeRun) run = fake_run_new (11, 128, 32, 64, 2);

  um_diffusion_view_reset (view, run->prompt_len, run->gen_length, run->block_length, run->n_steps);
  assert_shown (view, run, -1);
  for (int s = 0; s < run->n_steps; s++)
    {
      fake_run_add_step (run, view, s);
      assert_shown (view, run, s);
      g_assert_cmpint (um_diffusion_view_get_n_steps_recorded (view), ==, s + 1);
      g_assert_true (um_diffusion_view_get_following (view));
    }
  g_assert_cmpint (um_diffusion_view_get_n_steps (view), ==, run->n_steps);
}

static void
test_replay (void)
{
  g_autoptr(UmDiffusionView) view = new_view ();
  g_autoptr(FakeRun) run = fake_run_new (5, 96, 32, 48, 3);
  const int order[] = { 10, 11, 30, 2, 2, 47, 0, -1, 20, 19, 21, 46, 5 };

  um_diffusion_view_reset (view, run->prompt_len, run->gen_length, run->block_length, run->n_steps);
  for (int s = 0; s < 30; s++)
    fake_run_add_step (run, view, s);

  /* Scrubbing back and forth shows exactly the canvas after each step. */
  um_diffusion_view_set_shown_step (view, 10);
  g_assert_false (um_diffusion_view_get_following (view));
  assert_shown (view, run, 10);

  /* Not following: new steps are recorded but the shown canvas stays. */
  for (int s = 30; s < run->n_steps; s++)
    fake_run_add_step (run, view, s);
  g_assert_cmpint (um_diffusion_view_get_n_steps_recorded (view), ==, run->n_steps);
  assert_shown (view, run, 10);

  for (guint i = 0; i < G_N_ELEMENTS (order); i++)
    {
      um_diffusion_view_set_shown_step (view, order[i]);
      assert_shown (view, run, order[i]);
    }
  for (int s = run->n_steps - 1; s >= -1; s--)
    {
      um_diffusion_view_set_shown_step (view, s);
      assert_shown (view, run, s);
    }
  for (int s = -1; s < run->n_steps; s++)
    {
      um_diffusion_view_set_shown_step (view, s);
      assert_shown (view, run, s);
    }

  /* Out of range: clamped. */
  um_diffusion_view_set_shown_step (view, 1000);
  assert_shown (view, run, run->n_steps - 1);
  um_diffusion_view_set_shown_step (view, -5);
  assert_shown (view, run, -1);

  /* Following again jumps to the last step. */
  um_diffusion_view_set_following (view, TRUE);
  g_assert_true (um_diffusion_view_get_following (view));
  assert_shown (view, run, run->n_steps - 1);

  /* Through the property too. */
  g_object_set (view, "shown-step", 3, NULL);
  assert_shown (view, run, 3);
  g_assert_false (um_diffusion_view_get_following (view));
  g_object_set (view, "following", TRUE, NULL);
  assert_shown (view, run, run->n_steps - 1);
}

/* A shifted family (Dream, RND1) commits the token read from row i − 1 at
 * position i: the engine reports position i, and the view shows it there,
 * whatever order the positions come in. Tokens in place from the start
 * (RND1's reserved end slot, word constraints) show at every step and are
 * never a step's news. */
static void
test_positions_and_fixed (void)
{
  g_autoptr(UmDiffusionView) view = new_view ();
  const int prompt = 7, gen = 8;
  const gint32 fixed_pos[] = { prompt + 7, prompt + 3 }, fixed_ids[] = { 42, 43 };
  /* The first answer position (read from the prompt's last row) and the
   * one before the reserved slot. */
  const gint32 pos0[] = { prompt + 0, prompt + 6 }, ids0[] = { 100, 106 };
  const gint32 pos1[] = { prompt + 1, prompt + 2, prompt + 4, prompt + 5 }, ids1[] = { 101, 102, 104, 105 };
  const float conf[] = { 0.9f, 0.8f, 0.7f, 0.6f };
  const gint32 want_start[] = { MASK_ID, MASK_ID, MASK_ID, 43, MASK_ID, MASK_ID, MASK_ID, 42 };
  const gint32 want_0[] = { 100, MASK_ID, MASK_ID, 43, MASK_ID, MASK_ID, 106, 42 };
  const gint32 want_1[] = { 100, 101, 102, 43, 104, 105, 106, 42 };
  g_autoptr(GArray) shown = NULL;
  g_autofree char *tip = NULL;

  um_diffusion_view_reset (view, prompt, gen, gen, 2);
  um_diffusion_view_set_fixed (view, fixed_pos, fixed_ids, G_N_ELEMENTS (fixed_pos));
  shown = um_diffusion_view_get_shown_ids (view);
  g_assert_cmpmem (shown->data, shown->len * 4, want_start, sizeof want_start);
  g_clear_pointer (&shown, g_array_unref);

  um_diffusion_view_add_step (view, 0, pos0, ids0, conf, G_N_ELEMENTS (pos0));
  shown = um_diffusion_view_get_shown_ids (view);
  g_assert_cmpmem (shown->data, shown->len * 4, want_0, sizeof want_0);
  g_clear_pointer (&shown, g_array_unref);
  um_diffusion_view_add_step (view, 1, pos1, ids1, conf, G_N_ELEMENTS (pos1));
  shown = um_diffusion_view_get_shown_ids (view);
  g_assert_cmpmem (shown->data, shown->len * 4, want_1, sizeof want_1);
  g_clear_pointer (&shown, g_array_unref);

  /* Back to before the first step and forward again. */
  um_diffusion_view_set_shown_step (view, -1);
  shown = um_diffusion_view_get_shown_ids (view);
  g_assert_cmpmem (shown->data, shown->len * 4, want_start, sizeof want_start);
  g_clear_pointer (&shown, g_array_unref);
  um_diffusion_view_set_shown_step (view, 0);
  shown = um_diffusion_view_get_shown_ids (view);
  g_assert_cmpmem (shown->data, shown->len * 4, want_0, sizeof want_0);

  tip = um_diffusion_view_describe_position (view, 7);
  g_assert_nonnull (strstr (tip, "from the start"));
  g_clear_pointer (&tip, g_free);
  tip = um_diffusion_view_describe_position (view, 6);
  g_assert_nonnull (strstr (tip, "step 1"));

  /* A new run forgets them. */
  um_diffusion_view_reset (view, prompt, gen, gen, 2);
  g_clear_pointer (&shown, g_array_unref);
  shown = um_diffusion_view_get_shown_ids (view);
  for (guint i = 0; i < shown->len; i++)
    g_assert_cmpint (g_array_index (shown, gint32, i), ==, MASK_ID);
}

typedef struct {
  int shown_step, n_steps, n_steps_recorded, following;
} NotifyCounts;

static void
on_notify (GObject *object, GParamSpec *pspec, NotifyCounts *counts)
{
  const char *name = g_param_spec_get_name (pspec);

  if (g_str_equal (name, "shown-step"))
    counts->shown_step++;
  else if (g_str_equal (name, "n-steps"))
    counts->n_steps++;
  else if (g_str_equal (name, "n-steps-recorded"))
    counts->n_steps_recorded++;
  else if (g_str_equal (name, "following"))
    counts->following++;
}

static void
test_notify (void)
{
  g_autoptr(UmDiffusionView) view = new_view ();
  g_autoptr(FakeRun) run = fake_run_new (0, 32, 32, 8, 4);
  NotifyCounts counts = { 0, };
  int value = 0;

  g_signal_connect (view, "notify", G_CALLBACK (on_notify), &counts);

  um_diffusion_view_reset (view, 0, 32, 32, 8);
  g_assert_cmpint (counts.n_steps, ==, 1);
  g_assert_cmpint (counts.shown_step, ==, 0);
  g_assert_cmpint (counts.following, ==, 0);

  fake_run_add_step (run, view, 0);
  g_assert_cmpint (counts.n_steps_recorded, ==, 1);
  g_assert_cmpint (counts.shown_step, ==, 1);
  fake_run_add_step (run, view, 1);
  g_assert_cmpint (counts.n_steps_recorded, ==, 2);
  g_assert_cmpint (counts.shown_step, ==, 2);

  um_diffusion_view_set_shown_step (view, 0);
  g_assert_cmpint (counts.shown_step, ==, 3);
  g_assert_cmpint (counts.following, ==, 1);
  /* Same values: no notification. */
  um_diffusion_view_set_shown_step (view, 0);
  g_assert_cmpint (counts.shown_step, ==, 3);
  g_assert_cmpint (counts.following, ==, 1);

  fake_run_add_step (run, view, 2);
  g_assert_cmpint (counts.n_steps_recorded, ==, 3);
  g_assert_cmpint (counts.shown_step, ==, 3);

  um_diffusion_view_set_following (view, TRUE);
  g_assert_cmpint (counts.following, ==, 2);
  g_assert_cmpint (counts.shown_step, ==, 4);
  g_object_get (view, "shown-step", &value, NULL);
  g_assert_cmpint (value, ==, 2);
  g_object_get (view, "n-steps-recorded", &value, NULL);
  g_assert_cmpint (value, ==, 3);
  g_object_get (view, "n-steps", &value, NULL);
  g_assert_cmpint (value, ==, 8);

  /* A run longer than announced raises n-steps. */
  for (int s = 3; s < 8; s++)
    fake_run_add_step (run, view, s);
  g_assert_cmpint (counts.n_steps, ==, 1);
  um_diffusion_view_add_step (view, 8, NULL, NULL, NULL, 0);
  g_assert_cmpint (counts.n_steps, ==, 2);
  g_assert_cmpint (um_diffusion_view_get_n_steps (view), ==, 9);

  um_diffusion_view_clear (view);
  g_assert_cmpint (counts.n_steps, ==, 3);
  g_assert_cmpint (um_diffusion_view_get_n_steps_recorded (view), ==, 0);
  g_assert_cmpint (um_diffusion_view_get_shown_step (view), ==, -1);
}

static void
test_bad_input (void)
{
  g_autoptr(UmDiffusionView) view = new_view ();
  const gint32 positions[] = { 4, 5, 100, 6, -3 };
  const gint32 ids[] = { -1, 7, 8, EOS_ID, 9 };
  const float confidences[] = { 0.5f, 0.1f, 0.2f, NAN, 0.9f };
  g_autoptr(GArray) shown = NULL;
  g_autofree char *masked = NULL;
  g_autofree char *unknown = NULL;
  g_autofree char *end = NULL;

  /* No run yet: ignored. */
  g_test_expect_message (G_LOG_DOMAIN, G_LOG_LEVEL_WARNING, "*no run*");
  um_diffusion_view_add_step (view, 0, positions, ids, confidences, 1);
  g_test_assert_expected_messages ();

  um_diffusion_view_reset (view, 4, 8, 4, 4);
  g_test_expect_message (G_LOG_DOMAIN, G_LOG_LEVEL_WARNING, "*outside the canvas*");
  um_diffusion_view_add_step (view, 0, positions, ids, confidences, G_N_ELEMENTS (positions));
  g_test_assert_expected_messages ();
  shown = um_diffusion_view_get_shown_ids (view);
  g_assert_cmpint (g_array_index (shown, gint32, 0), ==, -1);
  g_assert_cmpint (g_array_index (shown, gint32, 1), ==, 7);
  g_assert_cmpint (g_array_index (shown, gint32, 2), ==, EOS_ID);
  g_assert_cmpint (g_array_index (shown, gint32, 3), ==, MASK_ID);

  unknown = um_diffusion_view_describe_position (view, 0);
  g_assert_nonnull (strstr (unknown, "Position 1"));
  g_assert_nonnull (strstr (unknown, "“?”"));
  g_assert_nonnull (strstr (unknown, "step 1"));
  g_assert_true (strstr (unknown, "0.50") != NULL || strstr (unknown, "0,50") != NULL);
  end = um_diffusion_view_describe_position (view, 2);
  g_assert_nonnull (strstr (end, "<|endoftext|>"));
  masked = um_diffusion_view_describe_position (view, 3);
  g_assert_cmpstr (masked, ==, "Position 4 · Masked");
  g_assert_null (um_diffusion_view_describe_position (view, 8));
  g_assert_null (um_diffusion_view_describe_position (view, -1));

  /* Out of order (warned about once per run, already done): ignored. */
  um_diffusion_view_add_step (view, 0, positions, ids, confidences, 1);
  g_assert_cmpint (um_diffusion_view_get_n_steps_recorded (view), ==, 1);

  /* A gap: the missing steps are recorded empty. */
  um_diffusion_view_add_step (view, 3, positions + 4, ids + 4, confidences + 4, 0);
  g_assert_cmpint (um_diffusion_view_get_n_steps_recorded (view), ==, 4);
  g_assert_cmpint (um_diffusion_view_get_shown_step (view), ==, 3);
  um_diffusion_view_set_shown_step (view, 2);
  g_clear_pointer (&shown, g_array_unref);
  shown = um_diffusion_view_get_shown_ids (view);
  g_assert_cmpint (g_array_index (shown, gint32, 1), ==, 7);

  /* Odd reset arguments do not crash. */
  um_diffusion_view_reset (view, -3, 5, 0, -1);
  g_assert_cmpint (um_diffusion_view_get_n_steps (view), ==, 0);
  um_diffusion_view_add_step (view, 0, (const gint32[]) { 2 }, (const gint32[]) { 3 }, NULL, 1);
  g_clear_pointer (&shown, g_array_unref);
  shown = um_diffusion_view_get_shown_ids (view);
  g_assert_cmpint (g_array_index (shown, gint32, 2), ==, 3);
  um_diffusion_view_reset (view, 0, 0, 4, 4);
  g_clear_pointer (&shown, g_array_unref);
  shown = um_diffusion_view_get_shown_ids (view);
  g_assert_cmpuint (shown->len, ==, 0);
}

static void
test_large (void)
{
  g_autoptr(UmDiffusionView) view = new_view ();
  g_autoptr(FakeRun) run = fake_run_new (50, 4096, 64, 512, 5);
  GtkWidget *window = new_window (view, 900, 700);
  g_autoptr(GRand) rand = g_rand_new_with_seed (6);
  gint64 start;
  double add_s, replay_s, frame_s;
  int text_calls = 0;

  um_diffusion_view_set_token_text_func (view, fake_text, &text_calls, NULL);
  gtk_window_present (GTK_WINDOW (window));
  wait_until_mapped (GTK_WIDGET (view));

  um_diffusion_view_reset (view, run->prompt_len, run->gen_length, run->block_length, run->n_steps);
  start = g_get_monotonic_time ();
  for (int s = 0; s < run->n_steps; s++)
    {
      fake_run_add_step (run, view, s);
      /* A frame now and then, as the engine's steps would get. */
      if (s % 32 == 0)
        while (g_main_context_iteration (NULL, FALSE))
          ;
    }
  add_s = (g_get_monotonic_time () - start) / (double) G_USEC_PER_SEC;
  assert_shown (view, run, run->n_steps - 1);
  run_main_loop_for (50);
  /* One glyph per distinct token, not per cell or per frame. */
  g_assert_cmpint (text_calls, <=, 64 + 2);

  start = g_get_monotonic_time ();
  for (int i = 0; i < 200; i++)
    {
      int step = g_rand_int_range (rand, -1, run->n_steps);
      um_diffusion_view_set_shown_step (view, step);
      if (i % 20 == 0)
        {
          assert_shown (view, run, step);
          while (g_main_context_iteration (NULL, FALSE))
            ;
        }
    }
  replay_s = (g_get_monotonic_time () - start) / (double) G_USEC_PER_SEC;

  /* What a frame costs: measure (a full reflow) and snapshot, after each of
   * a series of steps scrubbed forward. */
  start = g_get_monotonic_time ();
  for (int step = 0; step < run->n_steps; step += 16)
    {
      GtkWidget *widget = GTK_WIDGET (view);
      GtkSnapshot *snapshot = gtk_snapshot_new ();
      int min, nat;

      um_diffusion_view_set_shown_step (view, step);
      gtk_widget_measure (widget, GTK_ORIENTATION_VERTICAL, gtk_widget_get_width (widget),
                          &min, &nat, NULL, NULL);
      GTK_WIDGET_GET_CLASS (widget)->snapshot (widget, snapshot);
      gsk_render_node_unref (gtk_snapshot_free_to_node (snapshot));
    }
  frame_s = (g_get_monotonic_time () - start) / (double) G_USEC_PER_SEC / (run->n_steps / 16);

  g_test_message ("4096 cells: 512 steps added in %.3f s, 200 replays in %.3f s, "
                  "%.2f ms per reflow + snapshot", add_s, replay_s, frame_s * 1000);
  /* Generous: also true under valgrind. */
  g_assert_cmpfloat (add_s, <, 20.0);
  g_assert_cmpfloat (replay_s, <, 20.0);
  g_assert_cmpfloat (frame_s, <, 1.0);

  {
    g_autoptr(GdkTexture) texture = render_view (view);
    g_assert_nonnull (texture);
  }
  destroy_window (window);
}

static void
test_height_for_width (void)
{
  g_autoptr(UmDiffusionView) view = new_view ();
  g_autoptr(FakeRun) run = fake_run_new (0, 256, 32, 64, 7);
  GtkWidget *window = new_window (view, 800, 600);
  int min_width, nat_width, h300, h1200, dummy, empty_h;

  gtk_window_present (GTK_WINDOW (window));
  wait_until_mapped (GTK_WIDGET (view));
  g_assert_cmpint (gtk_widget_get_request_mode (GTK_WIDGET (view)), ==,
                   GTK_SIZE_REQUEST_HEIGHT_FOR_WIDTH);

  um_diffusion_view_clear (view);
  gtk_widget_measure (GTK_WIDGET (view), GTK_ORIENTATION_VERTICAL, 300, &empty_h, &dummy, NULL, NULL);
  g_assert_cmpint (empty_h, >, 0);
  g_assert_cmpint (empty_h, <, 100);

  um_diffusion_view_reset (view, 0, 256, 32, 64);
  for (int pass = 0; pass < 2; pass++)
    {
      gtk_widget_measure (GTK_WIDGET (view), GTK_ORIENTATION_HORIZONTAL, -1,
                          &min_width, &nat_width, NULL, NULL);
      g_assert_cmpint (min_width, >, 0);
      g_assert_cmpint (min_width, <=, 300);
      g_assert_cmpint (nat_width, >=, min_width);
      gtk_widget_measure (GTK_WIDGET (view), GTK_ORIENTATION_VERTICAL, 300, &h300, &dummy, NULL, NULL);
      g_assert_cmpint (dummy, ==, h300);
      gtk_widget_measure (GTK_WIDGET (view), GTK_ORIENTATION_VERTICAL, 1200, &h1200, &dummy, NULL, NULL);
      g_test_message ("pass %d: height %d at 300 px, %d at 1200 px", pass, h300, h1200);
      g_assert_cmpint (h1200, >, 0);
      /* Four times the width: well under half the rows. */
      g_assert_cmpint (h300, >, 2 * h1200);
      /* 256 cells of at least a line each cannot fit in a few rows. */
      g_assert_cmpint (h300, >, 10 * 12);

      /* Second pass: committed text instead of masks. */
      for (int s = 0; pass == 0 && s < run->n_steps; s++)
        fake_run_add_step (run, view, s);
    }

  /* A bigger font: every cached width is redone. */
  {
    int before, after;
    GtkSettings *settings = gtk_widget_get_settings (window);
    g_autofree char *font = NULL;

    g_object_get (settings, "gtk-font-name", &font, NULL);
    gtk_widget_measure (GTK_WIDGET (view), GTK_ORIENTATION_VERTICAL, 600, &before, &dummy, NULL, NULL);
    g_object_set (settings, "gtk-font-name", "Sans 24", NULL);
    run_main_loop_for (100);
    gtk_widget_measure (GTK_WIDGET (view), GTK_ORIENTATION_VERTICAL, 600, &after, &dummy, NULL, NULL);
    g_test_message ("height at 600 px: %d, %d with a 24 pt font", before, after);
    g_assert_cmpint (after, >, before * 3 / 2);
    g_object_set (settings, "gtk-font-name", font, NULL);
    run_main_loop_for (100);
  }

  /* Allocated: the scrolled window gives it the width, it takes the height. */
  run_main_loop_for (100);
  gtk_widget_measure (GTK_WIDGET (view), GTK_ORIENTATION_VERTICAL,
                      gtk_widget_get_width (GTK_WIDGET (view)), &h300, &dummy, NULL, NULL);
  g_assert_cmpint (gtk_widget_get_height (GTK_WIDGET (view)), >=, h300);
  destroy_window (window);
}

/* Scrolling moves the view without redrawing it, but only the rows in view
 * are drawn: the rows scrolled to must show up. */
static void
test_scroll (void)
{
  g_autoptr(UmDiffusionView) view = new_view ();
  GtkWidget *window = new_window (view, 400, 300);
  GtkWidget *scrolled = gtk_window_get_child (GTK_WINDOW (window));
  GtkAdjustment *adjustment;
  g_autoptr(GdkPaintable) paintable = gtk_widget_paintable_new (window);

  g_object_set (gtk_widget_get_settings (window), "gtk-enable-animations", FALSE, NULL);
  set_dark (FALSE);
  gtk_window_present (GTK_WINDOW (window));
  wait_until_mapped (GTK_WIDGET (view));
  um_diffusion_view_reset (view, 0, 4096, 64, 512);
  adjustment = gtk_scrolled_window_get_vadjustment (GTK_SCROLLED_WINDOW (scrolled));
  /* Layout takes frames, more of them on a loaded machine: wait for it
   * (up to 10 s) rather than a fixed 100 ms. */
  for (int i = 0; i < 100 && gtk_adjustment_get_upper (adjustment) <= 5000; i++)
    run_main_loop_for (100);
  g_assert_cmpfloat (gtk_adjustment_get_upper (adjustment), >, 5000);

  for (int i = 1; i <= 3; i++)
    {
      g_autoptr(GdkTexture) texture = NULL;
      GtkSnapshot *snapshot = gtk_snapshot_new ();
      g_autoptr(GskRenderNode) node = NULL;
      int width = gtk_widget_get_width (window), height = gtk_widget_get_height (window);

      gtk_adjustment_set_value (adjustment, gtk_adjustment_get_upper (adjustment) * i / 4);
      run_main_loop_for (100);
      gdk_paintable_snapshot (paintable, snapshot, width, height);
      node = gtk_snapshot_free_to_node (snapshot);
      texture = gsk_renderer_render_texture (gtk_native_get_renderer (GTK_NATIVE (window)), node,
                                             &GRAPHENE_RECT_INIT (0, 0, width, height));
      /* The window is full of mask cells. */
      g_assert_cmpint (count_dark_grey (texture, 0x80), >, width * height / 10);
    }
  destroy_window (window);
}

static void
test_render (void)
{
  g_autoptr(UmDiffusionView) view = new_view ();
  g_autoptr(FakeRun) run = fake_run_new (0, 64, 32, 16, 8);
  GtkWidget *window = new_window (view, 600, 400);
  g_autoptr(GdkTexture) hint = NULL;
  g_autoptr(GdkTexture) masks = NULL;
  g_autoptr(GdkTexture) committed = NULL;
  g_autoptr(GdkTexture) dark = NULL;
  const gint32 high_pos[] = { 0, 1, 2, 3 };
  const gint32 high_ids[] = { 17, 18, 0, 1 };
  const float high_conf[] = { 0.95f, 0.9f, 0.8f, 0.99f };
  const gint32 low_pos[] = { 4, 5 };
  const gint32 low_ids[] = { 9, 10 };
  const float low_conf[] = { 0.1f, 0.2f };
  int pos;

  g_object_set (gtk_widget_get_settings (window), "gtk-enable-animations", FALSE, NULL);
  set_dark (FALSE);
  gtk_window_present (GTK_WINDOW (window));
  wait_until_mapped (GTK_WIDGET (view));

  um_diffusion_view_clear (view);
  run_main_loop_for (50);
  hint = render_view (view);

  um_diffusion_view_reset (view, 0, 64, 32, 16);
  run_main_loop_for (50);
  masks = render_view (view);
  g_assert_false (textures_equal (hint, masks));
  g_assert_cmpint (count_color (masks, 0x66cc66, 1.f), ==, 0);

  /* High confidence: green, as in the LLaDA demo. */
  um_diffusion_view_add_step (view, 0, high_pos, high_ids, high_conf, G_N_ELEMENTS (high_pos));
  run_main_loop_for (50);
  committed = render_view (view);
  g_assert_false (textures_equal (masks, committed));
  g_assert_cmpint (count_color (committed, 0x66cc66, 1.f), >, 50);
  g_assert_cmpint (count_color (committed, 0xff6666, 1.f), ==, 0);

  /* Next step low confidence: red; the earlier cells turn calm blue. */
  um_diffusion_view_add_step (view, 1, low_pos, low_ids, low_conf, G_N_ELEMENTS (low_pos));
  run_main_loop_for (50);
  g_clear_object (&committed);
  committed = render_view (view);
  g_assert_cmpint (count_color (committed, 0xff6666, 1.f), >, 50);
  g_assert_cmpint (count_color (committed, 0x66cc66, 1.f), ==, 0);

  /* Hit testing and the tooltip text agree with what is drawn. */
  pos = um_diffusion_view_get_position_at (view, 6, 6);
  g_assert_cmpint (pos, ==, 0);
  {
    g_autofree char *tip = um_diffusion_view_describe_position (view, pos);
    g_assert_nonnull (strstr (tip, "“Hello”"));
    g_assert_nonnull (strstr (tip, "step 1"));
  }
  g_assert_cmpint (um_diffusion_view_get_position_at (view, -10, -10), ==, -1);
  g_assert_cmpint (um_diffusion_view_get_position_at (view, 5, 5000), ==, -1);

  /* Dark mode draws differently, still with the demo's hues. */
  set_dark (TRUE);
  dark = render_view (view);
  g_assert_false (textures_equal (committed, dark));
  g_assert_cmpint (count_color (dark, 0xff6666, 0.9f), >, 50);
  set_dark (FALSE);

  /* Replaying step 1 (0-based 0) highlights it again. */
  um_diffusion_view_set_shown_step (view, 0);
  run_main_loop_for (50);
  g_clear_object (&committed);
  committed = render_view (view);
  g_assert_cmpint (count_color (committed, 0x66cc66, 1.f), >, 50);

  /* A whole run renders. */
  um_diffusion_view_reset (view, 0, 64, 32, 16);
  for (int s = 0; s < run->n_steps; s++)
    fake_run_add_step (run, view, s);
  run_main_loop_for (50);
  g_clear_object (&committed);
  committed = render_view (view);
  g_assert_false (textures_equal (masks, committed));

  destroy_window (window);
}

static void
test_animation (void)
{
  g_autoptr(UmDiffusionView) view = new_view ();
  GtkWidget *window = new_window (view, 600, 400);
  GtkSettings *settings = gtk_widget_get_settings (window);
  const gint32 pos[] = { 0, 1, 2, 3 };
  const gint32 ids[] = { 17, 18, 0, 1 };
  const float conf[] = { 0.95f, 0.9f, 0.8f, 0.99f };
  g_autoptr(GdkTexture) before = NULL;
  g_autoptr(GdkTexture) after = NULL;

  set_dark (FALSE);
  gtk_window_present (GTK_WINDOW (window));
  wait_until_mapped (GTK_WIDGET (view));

  /* Animated: the new cells start invisible and settle within ~250 ms. */
  g_object_set (settings, "gtk-enable-animations", TRUE, NULL);
  um_diffusion_view_reset (view, 0, 32, 32, 8);
  um_diffusion_view_add_step (view, 0, pos, ids, conf, 4);
  before = render_view (view);
  run_main_loop_for (400);
  after = render_view (view);
  g_assert_false (textures_equal (before, after));
  g_assert_cmpint (count_color (after, 0x66cc66, 1.f), >, 50);

  /* Not animated: drawn final at once. */
  g_object_set (settings, "gtk-enable-animations", FALSE, NULL);
  um_diffusion_view_reset (view, 0, 32, 32, 8);
  run_main_loop_for (50);
  um_diffusion_view_add_step (view, 0, pos, ids, conf, 4);
  g_clear_object (&before);
  g_clear_object (&after);
  before = render_view (view);
  run_main_loop_for (400);
  after = render_view (view);
  g_assert_true (textures_equal (before, after));

  /* Steps faster than frames: no animation piles up, the last one shows. */
  g_object_set (settings, "gtk-enable-animations", TRUE, NULL);
  um_diffusion_view_reset (view, 0, 32, 32, 8);
  for (int s = 0; s < 4; s++)
    um_diffusion_view_add_step (view, s, pos + s, ids + s, conf + s, 1);
  run_main_loop_for (400);
  g_assert_cmpint (um_diffusion_view_get_shown_step (view), ==, 3);

  destroy_window (window);
}

static void
test_accessible (void)
{
  g_autoptr(UmDiffusionView) view = new_view ();
  const gint32 pos[] = { 0, 1, 3 };
  const gint32 ids[] = { 17, 18, EOS_ID };
  const float conf[] = { 0.9f, 0.9f, 0.9f };
  char *error;

  gtk_test_accessible_assert_role (GTK_ACCESSIBLE (view), GTK_ACCESSIBLE_ROLE_IMG);
  gtk_test_accessible_assert_property (GTK_ACCESSIBLE (view), GTK_ACCESSIBLE_PROPERTY_LABEL,
                                       "Diffusion canvas");

  um_diffusion_view_reset (view, 0, 4, 4, 2);
  um_diffusion_view_add_step (view, 0, pos, ids, conf, 3);
  /* Throttled: the text arrives a little later. */
  run_main_loop_for (700);
  error = gtk_test_accessible_check_property (GTK_ACCESSIBLE (view),
                                              GTK_ACCESSIBLE_PROPERTY_DESCRIPTION,
                                              "1 position still masked. Hello world");
  g_assert_cmpstr (error, ==, NULL);

  um_diffusion_view_clear (view);
  run_main_loop_for (700);
  gtk_test_accessible_assert_property (GTK_ACCESSIBLE (view), GTK_ACCESSIBLE_PROPERTY_DESCRIPTION,
                                       "No run yet");
}

static void
test_finalize (void)
{
  UmDiffusionView *view = UM_DIFFUSION_VIEW (um_diffusion_view_new ());
  g_autoptr(FakeRun) run = fake_run_new (0, 128, 32, 32, 9);
  GtkWidget *window;
  gpointer weak = view;

  um_diffusion_view_set_token_text_func (view, fake_text, NULL, NULL);
  window = new_window (view, 500, 300);
  g_object_add_weak_pointer (G_OBJECT (view), &weak);
  gtk_window_present (GTK_WINDOW (window));
  wait_until_mapped (GTK_WIDGET (view));

  g_object_set (gtk_widget_get_settings (window), "gtk-enable-animations", TRUE, NULL);
  um_diffusion_view_reset (view, 0, 128, 32, 32);
  for (int s = 0; s < 16; s++)
    fake_run_add_step (run, view, s);
  /* Destroyed mid-animation, with the accessible update pending. */
  run_main_loop_for (30);
  destroy_window (window);
  run_main_loop_for (50);
  g_assert_null (weak);
}

int
main (int argc, char *argv[])
{
  gtk_test_init (&argc, &argv, NULL);
  adw_init ();

  g_test_add_func ("/diffusion-view/reset", test_reset);
  g_test_add_func ("/diffusion-view/follow", test_follow);
  g_test_add_func ("/diffusion-view/replay", test_replay);
  g_test_add_func ("/diffusion-view/positions-and-fixed", test_positions_and_fixed);
  g_test_add_func ("/diffusion-view/notify", test_notify);
  g_test_add_func ("/diffusion-view/bad-input", test_bad_input);
  g_test_add_func ("/diffusion-view/large", test_large);
  g_test_add_func ("/diffusion-view/height-for-width", test_height_for_width);
  g_test_add_func ("/diffusion-view/render", test_render);
  g_test_add_func ("/diffusion-view/scroll", test_scroll);
  g_test_add_func ("/diffusion-view/animation", test_animation);
  g_test_add_func ("/diffusion-view/accessible", test_accessible);
  g_test_add_func ("/diffusion-view/finalize", test_finalize);
  return g_test_run ();
}

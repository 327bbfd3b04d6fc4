/* um-frame-stats.c — frame intervals and input delays while the engine
 * works, for tests/tools/frame-bench.sh (see the header). */
#include "um-frame-stats.h"

#include <json-glib/json-glib.h>

#include "um-diffusion-view.h"
#include "um-generate-page.h"
#include "um-pool.h"
#include "um-json.h"

typedef struct {
  double handled_ms;   /* event timestamp → the window's key handler */
  double stopped_ms;   /* → the page no longer running */
  double shown_ms;     /* → the next frame painted after that */
} StopTiming;

typedef struct {
  double seconds;
  int    steps;
  gboolean stopped;
  double ui_cpu_ms;    /* the main thread's CPU time during the run */
  double ui_wait_ms;   /* its time runnable but waiting for a CPU */
} RunTiming;

typedef struct {
  char           *path;
  UmWindow       *win;           /* owns us */
  UmGeneratePage *page;
  GtkWidget      *view;
  guint           tick_id;
  gint64          last_tick;     /* µs, monotonic; 0: none yet this run */
  gboolean        tick_unpainted;
  GdkFrameClock  *clock;         /* the view's during a run */
  gulong          work_id;
  gint64          run_start;
  gint64          run_cpu_ns, run_wait_ns;
  GArray         *frames_ms;     /* double */
  GArray         *work_ms;       /* double: tick to after-paint */
  GArray         *keys_ms;       /* double */
  GArray         *stops;         /* StopTiming */
  GArray         *runs;          /* RunTiming */
  int             keys_unstamped;
  gboolean        stop_pending;  /* Escape seen during this run */
  gint64          stop_event;    /* µs, monotonic: the Escape's timestamp */
  StopTiming      stop;
  GdkFrameClock  *paint_clock;   /* waiting for the frame that shows the stop */
  gulong          paint_id;
} FrameStats;

static void
frame_stats_free (gpointer data)
{
  FrameStats *fs = data;

  g_free (fs->path);
  g_array_unref (fs->frames_ms);
  g_array_unref (fs->work_ms);
  g_array_unref (fs->keys_ms);
  g_array_unref (fs->stops);
  g_array_unref (fs->runs);
  g_free (fs);
}

static void
add_doubles (JsonBuilder *b, const char *name, GArray *a)
{
  json_builder_set_member_name (b, name);
  json_builder_begin_array (b);
  for (guint i = 0; i < a->len; i++)
    json_builder_add_double_value (b, g_array_index (a, double, i));
  json_builder_end_array (b);
}

static void
write_stats (FrameStats *fs)
{
  g_autoptr(JsonBuilder) b = json_builder_new ();
  g_autoptr(JsonGenerator) gen = json_generator_new ();
  g_autoptr(JsonNode) root = NULL;
  g_autoptr(GError) error = NULL;

  json_builder_begin_object (b);
  um_json_add_bool (b, "running", fs->run_start != 0);
  um_json_add_int (b, "engine_nice", um_pool_get_nice ());
  add_doubles (b, "frames_ms", fs->frames_ms);
  add_doubles (b, "work_ms", fs->work_ms);
  add_doubles (b, "keys_ms", fs->keys_ms);
  um_json_add_int (b, "keys_unstamped", fs->keys_unstamped);
  json_builder_set_member_name (b, "stops");
  json_builder_begin_array (b);
  for (guint i = 0; i < fs->stops->len; i++)
    {
      StopTiming *s = &g_array_index (fs->stops, StopTiming, i);
      json_builder_begin_object (b);
      um_json_add_double (b, "handled_ms", s->handled_ms);
      um_json_add_double (b, "stopped_ms", s->stopped_ms);
      um_json_add_double (b, "shown_ms", s->shown_ms);
      json_builder_end_object (b);
    }
  json_builder_end_array (b);
  json_builder_set_member_name (b, "runs");
  json_builder_begin_array (b);
  for (guint i = 0; i < fs->runs->len; i++)
    {
      RunTiming *r = &g_array_index (fs->runs, RunTiming, i);
      json_builder_begin_object (b);
      um_json_add_double (b, "seconds", r->seconds);
      um_json_add_int (b, "steps", r->steps);
      um_json_add_bool (b, "stopped", r->stopped);
      um_json_add_double (b, "ui_cpu_ms", r->ui_cpu_ms);
      um_json_add_double (b, "ui_wait_ms", r->ui_wait_ms);
      json_builder_end_object (b);
    }
  json_builder_end_array (b);
  json_builder_end_object (b);

  root = json_builder_get_root (b);
  json_generator_set_root (gen, root);
  /* Whole or not at all: the bench script polls this file. */
  {
    g_autofree char *text = json_generator_to_data (gen, NULL);
    if (!g_file_set_contents (fs->path, text, -1, &error))
      g_warning ("UM_FRAME_STATS: %s", error->message);
  }
}

/* The delay from an event's timestamp to now. X11 stamps events with the
 * server's CLOCK_MONOTONIC in milliseconds (32 bits), the clock
 * g_get_monotonic_time () reads: the difference is good to about 1 ms.
 * FALSE when the event carries no such time (another backend's clock). */
static gboolean
event_delay (GdkEvent *event, gint64 now, double *out_ms)
{
  guint32 t = event != NULL ? gdk_event_get_time (event) : GDK_CURRENT_TIME;
  gint32 d = (gint32) ((guint32) (now / 1000) - t);

  if (t == GDK_CURRENT_TIME || d < 0 || d > 60 * 1000)
    return FALSE;
  *out_ms = d + (double) (now % 1000) / 1000.0;
  return TRUE;
}

/* The calling thread's CPU time and run-queue wait from Linux's schedstat
 * (zeros elsewhere): whether the UI thread was starved, not just slow. */
static void
thread_schedstat (gint64 *cpu_ns, gint64 *wait_ns)
{
  g_autofree char *text = NULL;

  *cpu_ns = *wait_ns = 0;
  if (g_file_get_contents ("/proc/thread-self/schedstat", &text, NULL, NULL))
    {
      char *end = NULL;
      *cpu_ns = g_ascii_strtoll (text, &end, 10);
      *wait_ns = g_ascii_strtoll (end, NULL, 10);
    }
}

static gboolean
on_key_pressed (GtkEventControllerKey *controller, guint keyval, guint keycode, GdkModifierType state,
                FrameStats *fs)
{
  gint64 now = g_get_monotonic_time ();
  double ms;

  /* Only the presses while the engine works: the figures are about those. */
  if (fs->run_start == 0)
    return GDK_EVENT_PROPAGATE;
  if (!event_delay (gtk_event_controller_get_current_event (GTK_EVENT_CONTROLLER (controller)), now, &ms))
    {
      fs->keys_unstamped++;
      return GDK_EVENT_PROPAGATE;
    }
  g_array_append_val (fs->keys_ms, ms);
  if (keyval == GDK_KEY_Escape && fs->run_start != 0 && !fs->stop_pending)
    {
      fs->stop_pending = TRUE;
      fs->stop_event = now - (gint64) (ms * 1000);
      fs->stop.handled_ms = ms;
    }
  return GDK_EVENT_PROPAGATE;
}

static gboolean
on_tick (GtkWidget *widget, GdkFrameClock *clock, gpointer data)
{
  FrameStats *fs = data;
  gint64 now = g_get_monotonic_time ();

  if (fs->last_tick != 0)
    {
      double ms = (now - fs->last_tick) / 1000.0;
      g_array_append_val (fs->frames_ms, ms);
    }
  fs->last_tick = now;
  fs->tick_unpainted = TRUE;
  return G_SOURCE_CONTINUE;
}

/* How much of the frame the main thread spent in the frame itself. */
static void
on_frame_done (GdkFrameClock *clock, FrameStats *fs)
{
  double ms;

  if (!fs->tick_unpainted)
    return;
  ms = (g_get_monotonic_time () - fs->last_tick) / 1000.0;
  g_array_append_val (fs->work_ms, ms);
  fs->tick_unpainted = FALSE;
}

static void
on_after_paint (GdkFrameClock *clock, FrameStats *fs)
{
  fs->stop.shown_ms = (g_get_monotonic_time () - fs->stop_event) / 1000.0;
  g_array_append_val (fs->stops, fs->stop);
  fs->stop_pending = FALSE;
  g_clear_signal_handler (&fs->paint_id, fs->paint_clock);
  g_clear_object (&fs->paint_clock);
  write_stats (fs);
}

static void
stop_frames (FrameStats *fs)
{
  if (fs->tick_id != 0)
    gtk_widget_remove_tick_callback (fs->view, fs->tick_id);
  fs->tick_id = 0;
  g_clear_signal_handler (&fs->work_id, fs->clock);
  g_clear_object (&fs->clock);
}

static void
on_running (UmGeneratePage *page, GParamSpec *pspec, FrameStats *fs)
{
  gint64 now = g_get_monotonic_time ();
  gboolean running = um_generate_page_get_running (page);

  if (running && fs->run_start == 0)
    {
      fs->run_start = now;
      fs->last_tick = 0;
      fs->stop_pending = FALSE;
      fs->tick_id = gtk_widget_add_tick_callback (fs->view, on_tick, fs, NULL);
      fs->clock = gtk_widget_get_frame_clock (fs->view);
      if (fs->clock != NULL)
        {
          g_object_ref (fs->clock);
          fs->work_id = g_signal_connect (fs->clock, "after-paint", G_CALLBACK (on_frame_done), fs);
        }
      thread_schedstat (&fs->run_cpu_ns, &fs->run_wait_ns);
      write_stats (fs);
    }
  else if (!running && fs->run_start != 0)
    {
      RunTiming r = { (now - fs->run_start) / 1e6,
                      um_diffusion_view_get_n_steps_recorded (UM_DIFFUSION_VIEW (fs->view)), fs->stop_pending,
                      0, 0 };
      gint64 cpu, wait;

      thread_schedstat (&cpu, &wait);
      r.ui_cpu_ms = (cpu - fs->run_cpu_ns) / 1e6;
      r.ui_wait_ms = (wait - fs->run_wait_ns) / 1e6;
      g_array_append_val (fs->runs, r);
      stop_frames (fs);
      fs->run_start = 0;
      if (fs->stop_pending && fs->paint_id == 0)
        {
          /* The page says "Stopped" and greys Stop out: the next frame shows it. */
          fs->stop.stopped_ms = (now - fs->stop_event) / 1000.0;
          fs->paint_clock = g_object_ref (gtk_widget_get_frame_clock (GTK_WIDGET (fs->win)));
          fs->paint_id = g_signal_connect (fs->paint_clock, "after-paint", G_CALLBACK (on_after_paint), fs);
        }
      write_stats (fs);
    }
}

static void
on_destroy (GtkWidget *win, FrameStats *fs)
{
  stop_frames (fs);
  g_clear_signal_handler (&fs->paint_id, fs->paint_clock);
  g_clear_object (&fs->paint_clock);
  g_signal_handlers_disconnect_by_data (fs->page, fs);
  write_stats (fs);
}

void
um_frame_stats_attach (UmWindow *win, const char *path)
{
  FrameStats *fs = g_new0 (FrameStats, 1);
  GtkEventController *keys = gtk_event_controller_key_new ();

  fs->path = g_strdup (path);
  fs->win = win;
  fs->page = UM_GENERATE_PAGE (um_window_get_generate_page (win));
  fs->view = GTK_WIDGET (um_generate_page_get_view (fs->page));
  fs->frames_ms = g_array_new (FALSE, FALSE, sizeof (double));
  fs->work_ms = g_array_new (FALSE, FALSE, sizeof (double));
  fs->keys_ms = g_array_new (FALSE, FALSE, sizeof (double));
  fs->stops = g_array_new (FALSE, FALSE, sizeof (StopTiming));
  fs->runs = g_array_new (FALSE, FALSE, sizeof (RunTiming));
  g_object_set_data_full (G_OBJECT (win), "um-frame-stats", fs, frame_stats_free);

  /* Capture phase: before any widget (or shortcut) can take the key. */
  gtk_event_controller_set_propagation_phase (keys, GTK_PHASE_CAPTURE);
  g_signal_connect (keys, "key-pressed", G_CALLBACK (on_key_pressed), fs);
  gtk_widget_add_controller (GTK_WIDGET (win), keys);
  g_signal_connect (fs->page, "notify::running", G_CALLBACK (on_running), fs);
  g_signal_connect (win, "destroy", G_CALLBACK (on_destroy), fs);
  write_stats (fs);
}

#include "um-worker.h"

#include <string.h>

#include "um-pool.h"

/* ---- events crossing from the worker thread to the main context ---- */

typedef struct {
  UmStepEvent ev;
  gint32     *positions, *ids, *canvas;
  float      *confidences;
} StepCopy;

static void
step_copy_free (gpointer p)
{
  StepCopy *c = p;
  g_free (c->positions);
  g_free (c->ids);
  g_free (c->canvas);
  g_free (c->confidences);
  g_free (c);
}

typedef struct {
  GMainContext *context;
  GMutex        lock;
  GQueue        pending;       /* StepCopy* or ProgressCopy*, by kind */
  gboolean      scheduled;
  UmStepFunc    step_cb;
  UmProgressFunc progress_cb;
  gpointer      user_data;
  gint          ref;
} Relay;

typedef struct {
  double fraction;
  char  *stage;
} ProgressCopy;

static Relay *
relay_new (UmStepFunc step_cb, UmProgressFunc progress_cb, gpointer user_data)
{
  Relay *r = g_new0 (Relay, 1);
  r->context = g_main_context_ref_thread_default ();
  g_mutex_init (&r->lock);
  g_queue_init (&r->pending);
  r->step_cb = step_cb;
  r->progress_cb = progress_cb;
  r->user_data = user_data;
  r->ref = 1;
  return r;
}

static void
relay_unref (Relay *r)
{
  if (!g_atomic_int_dec_and_test (&r->ref))
    return;
  while (!g_queue_is_empty (&r->pending))
    {
      gpointer item = g_queue_pop_head (&r->pending);
      if (r->step_cb)
        step_copy_free (item);
      else
        {
          g_free (((ProgressCopy *) item)->stage);
          g_free (item);
        }
    }
  g_mutex_clear (&r->lock);
  g_main_context_unref (r->context);
  g_free (r);
}

/* Main context: hand over everything queued so far. */
static gboolean
relay_dispatch (gpointer data)
{
  Relay *r = data;
  GQueue batch = G_QUEUE_INIT;

  g_mutex_lock (&r->lock);
  batch = r->pending;
  g_queue_init (&r->pending);
  r->scheduled = FALSE;
  g_mutex_unlock (&r->lock);

  for (GList *l = batch.head; l != NULL; l = l->next)
    {
      if (r->step_cb)
        {
          StepCopy *c = l->data;
          r->step_cb (&c->ev, r->user_data);
          step_copy_free (c);
        }
      else
        {
          ProgressCopy *p = l->data;
          r->progress_cb (p->fraction, p->stage, r->user_data);
          g_free (p->stage);
          g_free (p);
        }
    }
  g_list_free (batch.head);
  return G_SOURCE_REMOVE;
}

static void
relay_push (Relay *r, gpointer item)
{
  gboolean schedule;

  g_mutex_lock (&r->lock);
  g_queue_push_tail (&r->pending, item);
  schedule = !r->scheduled;
  r->scheduled = TRUE;
  g_mutex_unlock (&r->lock);
  if (schedule)
    {
      g_atomic_int_inc (&r->ref);
      /* Below redraw priority, so a fast engine never starves drawing; the
       * finish call drains what is left, so no event arrives after it. */
      g_main_context_invoke_full (r->context, G_PRIORITY_DEFAULT_IDLE, relay_dispatch, r,
                                  (GDestroyNotify) relay_unref);
    }
}


static void
on_worker_step (const UmStepEvent *ev, gpointer data)
{
  Relay *r = data;
  StepCopy *c = g_new0 (StepCopy, 1);

  c->ev = *ev;
  c->positions = g_memdup2 (ev->positions, sizeof (gint32) * ev->n_committed);
  c->ids = g_memdup2 (ev->ids, sizeof (gint32) * ev->n_committed);
  c->confidences = g_memdup2 (ev->confidences, sizeof (float) * ev->n_committed);
  c->canvas = g_memdup2 (ev->canvas, sizeof (gint32) * ev->seq_len);
  c->ev.positions = c->positions;
  c->ev.ids = c->ids;
  c->ev.confidences = c->confidences;
  c->ev.canvas = c->canvas;
  relay_push (r, c);
}

static void
on_worker_progress (double fraction, const char *stage, gpointer data)
{
  Relay *r = data;
  ProgressCopy *p = g_new0 (ProgressCopy, 1);
  p->fraction = fraction;
  p->stage = g_strdup (stage);
  relay_push (r, p);
}

/* ---- loading ---- */

typedef struct {
  char           *path;
  UmEngineOptions options;
  Relay          *relay;
} LoadData;

static void
load_data_free (gpointer p)
{
  LoadData *d = p;
  g_free (d->path);
  if (d->relay)
    relay_unref (d->relay);
  g_free (d);
}

static void
load_thread (GTask *task, gpointer source, gpointer task_data, GCancellable *cancellable)
{
  LoadData *d = task_data;
  GError *error = NULL;
  UmEngine *engine = um_engine_load (d->path, &d->options, cancellable,
                                     d->relay ? on_worker_progress : NULL, d->relay, &error);
  if (engine == NULL)
    g_task_return_error (task, error);
  else
    g_task_return_pointer (task, engine, (GDestroyNotify) um_engine_free);
}

void
um_engine_load_async (const char             *path,
                      const UmEngineOptions  *options,
                      GCancellable           *cancellable,
                      UmProgressFunc          progress_cb,
                      gpointer                progress_data,
                      GAsyncReadyCallback     callback,
                      gpointer                user_data)
{
  g_autoptr(GTask) task = g_task_new (NULL, cancellable, callback, user_data);
  LoadData *d = g_new0 (LoadData, 1);

  g_task_set_source_tag (task, um_engine_load_async);
  d->path = g_strdup (path);
  if (options)
    d->options = *options;
  else
    um_engine_options_init (&d->options);
  if (progress_cb)
    d->relay = relay_new (NULL, progress_cb, progress_data);
  g_task_set_task_data (task, d, load_data_free);
  g_task_run_in_thread (task, load_thread);
}

UmEngine *
um_engine_load_finish (GAsyncResult *result, GError **error)
{
  LoadData *d;

  g_return_val_if_fail (g_task_is_valid (result, NULL), NULL);
  d = g_task_get_task_data (G_TASK (result));
  if (d->relay != NULL)
    relay_dispatch (d->relay);
  return g_task_propagate_pointer (G_TASK (result), error);
}

/* ---- generation ---- */

typedef struct {
  UmEngine     *engine;
  UmGenRequest  request;
  char         *prompt;
  gint32       *prompt_ids;
  Relay        *relay;
} GenData;

static void
gen_data_free (gpointer p)
{
  GenData *d = p;
  g_free (d->prompt);
  g_free (d->prompt_ids);
  if (d->relay)
    relay_unref (d->relay);
  g_free (d);
}

static void
generate_thread (GTask *task, gpointer source, gpointer task_data, GCancellable *cancellable)
{
  GenData *d = task_data;
  GError *error = NULL;
  UmGenResult *result = um_engine_generate (d->engine, &d->request, d->relay ? on_worker_step : NULL,
                                            d->relay, cancellable, &error);
  if (result == NULL)
    g_task_return_error (task, error);
  else
    g_task_return_pointer (task, result, (GDestroyNotify) um_gen_result_free);
}

/* A thread of the run's own when the engine runs niced (um_pool_set_nice):
 * the thread that dispatches the loops computes too, and a nice value
 * cannot be taken back, so it must not be one of GLib's shared pool
 * threads, which go on to other work. */
static gpointer
niced_generate_main (gpointer data)
{
  GTask *task = data;

  um_pool_nice_thread ();
  generate_thread (task, g_task_get_source_object (task), g_task_get_task_data (task),
                   g_task_get_cancellable (task));
  g_object_unref (task);
  return NULL;
}

void
um_engine_generate_async (UmEngine           *engine,
                          const UmGenRequest *request,
                          UmStepFunc          step_cb,
                          gpointer            step_data,
                          GCancellable       *cancellable,
                          GAsyncReadyCallback callback,
                          gpointer            user_data)
{
  g_autoptr(GTask) task = g_task_new (NULL, cancellable, callback, user_data);
  GenData *d = g_new0 (GenData, 1);

  g_task_set_source_tag (task, um_engine_generate_async);
  d->engine = engine;
  d->request = *request;
  d->prompt = g_strdup (request->prompt);
  d->request.prompt = d->prompt;
  if (request->prompt_ids != NULL && request->n_prompt_ids > 0)
    d->prompt_ids = g_memdup2 (request->prompt_ids, sizeof (gint32) * request->n_prompt_ids);
  d->request.prompt_ids = d->prompt_ids;
  if (step_cb)
    d->relay = relay_new (step_cb, NULL, step_data);
  g_task_set_task_data (task, d, gen_data_free);
  if (um_pool_get_nice () > 0)
    {
      GThread *thread = g_thread_try_new ("um-generate", niced_generate_main, g_object_ref (task), NULL);
      if (thread != NULL)
        {
          g_thread_unref (thread);
          return;
        }
      /* No thread to spare: the shared pool's, not niced, still runs it. */
      g_object_unref (task);
    }
  g_task_run_in_thread (task, generate_thread);
}

UmGenResult *
um_engine_generate_finish (UmEngine *engine, GAsyncResult *result, GError **error)
{
  GenData *d;

  g_return_val_if_fail (g_task_is_valid (result, NULL), NULL);
  /* Deliver the steps still queued before the caller hears the end. */
  d = g_task_get_task_data (G_TASK (result));
  if (d->relay != NULL)
    relay_dispatch (d->relay);
  return g_task_propagate_pointer (G_TASK (result), error);
}

/* um-generator.c — the base class: the FIFO every generator keeps.
 *
 * One request runs at a time (the engine generates one at a time, and a
 * server's queue must say how many wait); the others wait in order. A
 * waiting request whose cancellable fires is dropped at once, from the
 * home context, so a client that left never reaches the engine. */
#include "um-generator.h"

#include "um-error.h"

#include <string.h>

typedef struct {
  UmGenerator       *self;          /* borrowed: the task holds a ref */
  GTask             *task;
  UmGeneratorRequest req;           /* deep copy */
  UmGenMessage      *messages;
  char              *prompt, *suffix;
  gint32            *prompt_ids;
  UmGenConstraint   *constraints;
  char             **words;
  gint32           **constraint_ids;
  UmStepFunc         step_cb;
  gpointer           step_data;
  GSource           *cancel_source; /* while waiting */
} Job;

typedef struct {
  GMainContext *context;
  GQueue        waiting;       /* Job* */
  Job          *running;
  int           max_waiting;
} UmGeneratorPrivate;

G_DEFINE_ABSTRACT_TYPE_WITH_PRIVATE (UmGenerator, um_generator, G_TYPE_OBJECT)

enum { QUEUE_CHANGED, N_SIGNALS };
static guint signals[N_SIGNALS];

void
um_generator_request_init (UmGeneratorRequest *req)
{
  memset (req, 0, sizeof *req);
  um_gen_params_init (&req->params);
}

void
um_generator_result_free (UmGeneratorResult *res)
{
  if (res == NULL)
    return;
  g_clear_pointer (&res->prompt_ids, g_array_unref);
  g_clear_pointer (&res->ids, g_array_unref);
  g_free (res->text);
  g_free (res);
}

static void
job_free (Job *job)
{
  if (job->cancel_source != NULL)
    {
      g_source_destroy (job->cancel_source);
      g_source_unref (job->cancel_source);
    }
  for (int i = 0; i < job->req.n_messages; i++)
    {
      g_free (job->messages[i].role);
      g_free (job->messages[i].content);
    }
  g_free (job->messages);
  g_free (job->prompt);
  g_free (job->suffix);
  g_free (job->prompt_ids);
  for (int i = 0; i < job->req.params.n_constraints; i++)
    {
      g_free (job->words[i]);
      g_free (job->constraint_ids[i]);
    }
  g_free (job->words);
  g_free (job->constraint_ids);
  g_free (job->constraints);
  g_free (job);
}

/* Everything the request points to is copied: callers may free theirs as
 * soon as generate_async () returns. */
static void
job_copy_request (Job *job, const UmGeneratorRequest *req)
{
  const UmGenParams *p = &req->params;

  job->req = *req;
  if (req->messages != NULL && req->n_messages > 0)
    {
      job->messages = g_new0 (UmGenMessage, req->n_messages);
      for (int i = 0; i < req->n_messages; i++)
        {
          job->messages[i].role = g_strdup (req->messages[i].role);
          job->messages[i].content = g_strdup (req->messages[i].content);
        }
    }
  else
    job->req.n_messages = 0;
  job->req.messages = job->messages;
  job->prompt = g_strdup (req->prompt);
  job->req.prompt = job->prompt;
  job->suffix = g_strdup (req->suffix);
  job->req.suffix = job->suffix;
  if (req->prompt_ids != NULL && req->n_prompt_ids > 0)
    job->prompt_ids = g_memdup2 (req->prompt_ids, sizeof (gint32) * req->n_prompt_ids);
  else
    job->req.n_prompt_ids = 0;
  job->req.prompt_ids = job->prompt_ids;
  if (p->constraints != NULL && p->n_constraints > 0)
    {
      job->constraints = g_new0 (UmGenConstraint, p->n_constraints);
      job->words = g_new0 (char *, p->n_constraints);
      job->constraint_ids = g_new0 (gint32 *, p->n_constraints);
      for (int i = 0; i < p->n_constraints; i++)
        {
          job->constraints[i] = p->constraints[i];
          job->words[i] = g_strdup (p->constraints[i].word);
          job->constraints[i].word = job->words[i];
          if (p->constraints[i].ids != NULL && p->constraints[i].n_ids > 0)
            job->constraint_ids[i] = g_memdup2 (p->constraints[i].ids, sizeof (gint32) * p->constraints[i].n_ids);
          job->constraints[i].ids = job->constraint_ids[i];
        }
    }
  else
    job->req.params.n_constraints = 0;
  job->req.params.constraints = job->constraints;
}

static void pump (UmGenerator *self);

static void
on_run_done (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Job *job = user_data;
  UmGenerator *self = job->self;
  UmGeneratorPrivate *priv = um_generator_get_instance_private (self);
  GError *error = NULL;
  UmGeneratorResult *res = UM_GENERATOR_GET_CLASS (self)->run_finish (self, result, &error);
  g_autoptr(GTask) task = job->task;

  if (res != NULL)
    g_task_return_pointer (task, res, (GDestroyNotify) um_generator_result_free);
  else
    g_task_return_error (task, error);
  if (priv->running == job)
    priv->running = NULL;
  job_free (job);
  g_signal_emit (self, signals[QUEUE_CHANGED], 0);
  pump (self);
}

static void
pump (UmGenerator *self)
{
  UmGeneratorPrivate *priv = um_generator_get_instance_private (self);
  Job *job;

  if (priv->running != NULL || g_queue_is_empty (&priv->waiting))
    return;
  job = g_queue_pop_head (&priv->waiting);
  if (job->cancel_source != NULL)
    {
      g_source_destroy (job->cancel_source);
      g_clear_pointer (&job->cancel_source, g_source_unref);
    }
  priv->running = job;
  g_signal_emit (self, signals[QUEUE_CHANGED], 0);
  UM_GENERATOR_GET_CLASS (self)->run_async (self, &job->req, job->step_cb, job->step_data,
                                                 g_task_get_cancellable (job->task), on_run_done, job);
}

/* Home context: a waiting request's client left. */
static gboolean
on_waiting_cancelled (GCancellable *cancellable, gpointer user_data)
{
  Job *job = user_data;
  UmGenerator *self = job->self;
  UmGeneratorPrivate *priv = um_generator_get_instance_private (self);
  g_autoptr(GTask) task = job->task;

  if (!g_queue_remove (&priv->waiting, job))
    return G_SOURCE_REMOVE;
  g_task_return_new_error (task, G_IO_ERROR, G_IO_ERROR_CANCELLED, "cancelled while waiting in the queue");
  g_clear_pointer (&job->cancel_source, g_source_unref);   /* this source: removed by returning */
  job_free (job);
  g_signal_emit (self, signals[QUEUE_CHANGED], 0);
  return G_SOURCE_REMOVE;
}

void
um_generator_generate_async (UmGenerator              *self,
                             const UmGeneratorRequest *req,
                             UmStepFunc                step_cb,
                             gpointer                  step_data,
                             GCancellable             *cancellable,
                             GAsyncReadyCallback       callback,
                             gpointer                  user_data)
{
  UmGeneratorPrivate *priv;
  GTask *task;
  Job *job;

  g_return_if_fail (UM_IS_GENERATOR (self));
  g_return_if_fail (req != NULL);
  priv = um_generator_get_instance_private (self);
  task = g_task_new (self, cancellable, callback, user_data);
  g_task_set_source_tag (task, um_generator_generate_async);
  g_task_set_check_cancellable (task, FALSE);

  if (cancellable != NULL && g_cancellable_is_cancelled (cancellable))
    {
      g_task_return_new_error (task, G_IO_ERROR, G_IO_ERROR_CANCELLED, "cancelled before it started");
      g_object_unref (task);
      return;
    }
  if (priv->running != NULL && priv->max_waiting >= 0 && (int) priv->waiting.length >= priv->max_waiting)
    {
      g_task_return_new_error (task, UM_ERROR, UM_ERROR_BUSY,
                               "the engine is busy: %d request%s already waiting", (int) priv->waiting.length,
                               priv->waiting.length == 1 ? "" : "s");
      g_object_unref (task);
      return;
    }

  job = g_new0 (Job, 1);
  job->self = self;
  job->task = task;
  job->step_cb = step_cb;
  job->step_data = step_data;
  job_copy_request (job, req);
  if (cancellable != NULL)
    {
      job->cancel_source = g_cancellable_source_new (cancellable);
      g_source_set_callback (job->cancel_source, G_SOURCE_FUNC (on_waiting_cancelled), job, NULL);
      g_source_attach (job->cancel_source, priv->context);
    }
  g_queue_push_tail (&priv->waiting, job);
  g_signal_emit (self, signals[QUEUE_CHANGED], 0);
  pump (self);
}

UmGeneratorResult *
um_generator_generate_finish (UmGenerator *self, GAsyncResult *result, GError **error)
{
  g_return_val_if_fail (g_task_is_valid (result, self), NULL);
  return g_task_propagate_pointer (G_TASK (result), error);
}

const UmGeneratorInfo *
um_generator_get_info (UmGenerator *self)
{
  g_return_val_if_fail (UM_IS_GENERATOR (self), NULL);
  return UM_GENERATOR_GET_CLASS (self)->get_info (self);
}

char *
um_generator_token_text (UmGenerator *self, gint32 id)
{
  g_return_val_if_fail (UM_IS_GENERATOR (self), NULL);
  return UM_GENERATOR_GET_CLASS (self)->token_text (self, id);
}

UmEngine *
um_generator_get_engine (UmGenerator *self)
{
  UmGeneratorClass *klass;

  g_return_val_if_fail (UM_IS_GENERATOR (self), NULL);
  klass = UM_GENERATOR_GET_CLASS (self);
  return klass->get_engine ? klass->get_engine (self) : NULL;
}

void
um_generator_set_max_waiting (UmGenerator *self, int max_waiting)
{
  UmGeneratorPrivate *priv = um_generator_get_instance_private (self);
  priv->max_waiting = max_waiting < 0 ? -1 : max_waiting;
}

int
um_generator_get_max_waiting (UmGenerator *self)
{
  UmGeneratorPrivate *priv = um_generator_get_instance_private (self);
  return priv->max_waiting;
}

void
um_generator_get_queue (UmGenerator *self, int *n_running, int *n_waiting)
{
  UmGeneratorPrivate *priv = um_generator_get_instance_private (self);
  if (n_running)
    *n_running = priv->running != NULL;
  if (n_waiting)
    *n_waiting = (int) priv->waiting.length;
}

static void
um_generator_dispose (GObject *object)
{
  UmGeneratorPrivate *priv = um_generator_get_instance_private (UM_GENERATOR (object));
  Job *job;

  /* Waiting requests hold a ref on the generator through their task, so
   * none can be left here; the loop is a safeguard. */
  while ((job = g_queue_pop_head (&priv->waiting)) != NULL)
    {
      g_autoptr(GTask) task = job->task;
      g_task_return_new_error (task, G_IO_ERROR, G_IO_ERROR_CANCELLED, "the engine was closed");
      job_free (job);
    }
  G_OBJECT_CLASS (um_generator_parent_class)->dispose (object);
}

static void
um_generator_finalize (GObject *object)
{
  UmGeneratorPrivate *priv = um_generator_get_instance_private (UM_GENERATOR (object));
  g_main_context_unref (priv->context);
  G_OBJECT_CLASS (um_generator_parent_class)->finalize (object);
}

static void
um_generator_class_init (UmGeneratorClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->dispose = um_generator_dispose;
  object_class->finalize = um_generator_finalize;
  /* "queue-changed": a request started, ended, was queued or dropped. */
  signals[QUEUE_CHANGED] = g_signal_new ("queue-changed", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0,
                                         NULL, NULL, NULL, G_TYPE_NONE, 0);
}

static void
um_generator_init (UmGenerator *self)
{
  UmGeneratorPrivate *priv = um_generator_get_instance_private (self);
  priv->context = g_main_context_ref_thread_default ();
  g_queue_init (&priv->waiting);
  priv->max_waiting = -1;
}

/* um-local-generator.c — UmGenerator for an engine in this process. */
#include "um-local-generator.h"

#include "um-chat-template.h"
#include "um-error.h"
#include "um-worker.h"

#include <string.h>

struct _UmLocalGenerator
{
  UmGenerator      parent_instance;
  UmEngine        *engine;
  UmGeneratorInfo  info;
  GCancellable    *closing;      /* cancelled on dispose: stops a running generation */
};

G_DEFINE_FINAL_TYPE (UmLocalGenerator, um_local_generator, UM_TYPE_GENERATOR)

/* One run: what the engine borrows lives here until the callback. */
typedef struct {
  UmLocalGenerator *self;
  GTask            *task;
  GArray           *prompt;          /* gint32 */
  GArray           *suffix;          /* gint32, may be empty */
  GArray           *constraints;     /* UmGenConstraint: the request's + the suffix */
  UmGenParams       params;
  int               answer_len;      /* gen_length without the suffix */
  GCancellable     *cancellable;     /* the caller's, or one chained to closing */
  gulong            closing_handler;
  GCancellable     *caller;
  gulong            caller_handler;
} Run;

static void
run_free (Run *run)
{
  if (run->closing_handler)
    g_cancellable_disconnect (run->self->closing, run->closing_handler);
  if (run->caller_handler)
    g_cancellable_disconnect (run->caller, run->caller_handler);
  g_clear_object (&run->caller);
  g_clear_pointer (&run->prompt, g_array_unref);
  g_clear_pointer (&run->suffix, g_array_unref);
  g_clear_pointer (&run->constraints, g_array_unref);
  g_clear_object (&run->cancellable);
  g_free (run);
}

static UmChatTemplate llada_template = { UM_CHAT_FORMAT_LLADA, NULL };

gboolean
um_local_generator_prompt_ids (UmLocalGenerator         *self,
                               const UmGeneratorRequest *req,
                               GArray                   *out_prompt,
                               GArray                   *out_suffix,
                               GError                  **error)
{
  UmModel *model = um_engine_get_model (self->engine);

  if (req->messages != NULL && req->n_messages > 0)
    {
      const UmChatTemplate *tmpl = model->chat_template ? model->chat_template : &llada_template;
      g_autofree UmChatMessage *msgs = g_new0 (UmChatMessage, req->n_messages);
      g_autofree char *text = NULL;
      const char *bos = um_tokenizer_id_to_token (model->tokenizer, model->cfg.bos_id);

      for (int i = 0; i < req->n_messages; i++)
        {
          if (req->messages[i].role == NULL || req->messages[i].content == NULL)
            {
              g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "message %d has no role or no content", i);
              return FALSE;
            }
          msgs[i].role = req->messages[i].role;
          msgs[i].content = req->messages[i].content;
        }
      if (tmpl->format == UM_CHAT_FORMAT_LLADA && bos == NULL)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                       "chat prompt: BOS id %d is not a token of the tokenizer", model->cfg.bos_id);
          return FALSE;
        }
      text = um_chat_template_render_messages (tmpl, msgs, req->n_messages, TRUE, bos);
      if (!um_tokenizer_encode (model->tokenizer, text, -1, out_prompt, error))
        return FALSE;
    }
  else if (req->prompt != NULL && req->chat)
    {
      if (!um_model_build_chat_prompt (model, NULL, 0, req->prompt, out_prompt, error))
        return FALSE;
    }
  else if (req->prompt != NULL)
    {
      if (!um_tokenizer_encode (model->tokenizer, req->prompt, -1, out_prompt, error))
        return FALSE;
    }
  else if (req->prompt_ids != NULL && req->n_prompt_ids > 0)
    {
      for (int i = 0; i < req->n_prompt_ids; i++)
        if (req->prompt_ids[i] < 0 || (guint) req->prompt_ids[i] >= model->cfg.vocab_size)
          {
            g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                         "prompt token %d at index %d is not in the vocabulary (0..%u)", req->prompt_ids[i], i,
                         model->cfg.vocab_size - 1);
            return FALSE;
          }
      g_array_append_vals (out_prompt, req->prompt_ids, req->n_prompt_ids);
    }
  else
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "the request has no prompt");
      return FALSE;
    }
  if (out_suffix != NULL && req->suffix != NULL && req->suffix[0] != '\0'
      && !um_tokenizer_encode (model->tokenizer, req->suffix, -1, out_suffix, error))
    return FALSE;
  return TRUE;
}

static void
on_engine_done (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Run *run = user_data;
  UmLocalGenerator *self = run->self;
  g_autoptr(GTask) task = run->task;
  GError *error = NULL;
  g_autoptr(UmGenResult) res = um_engine_generate_finish (self->engine, result, &error);
  const UmModelConfig *cfg = &um_engine_get_model (self->engine)->cfg;
  UmGeneratorResult *out;
  int n = 0;

  if (res == NULL)
    {
      g_task_return_error (task, error);
      run_free (run);
      return;
    }
  out = g_new0 (UmGeneratorResult, 1);
  out->prompt_ids = g_array_ref (res->prompt_ids);
  out->ids = g_array_ref (res->ids);
  /* The answer ends at the first EOS/EOT; a suffix is not part of it. */
  while (n < run->answer_len && n < (int) res->ids->len && g_array_index (res->ids, gint32, n) != cfg->eos_id
         && g_array_index (res->ids, gint32, n) != cfg->eot_id)
    n++;
  out->hit_eos = n < run->answer_len;
  out->completion_tokens = n;
  if (run->suffix->len > 0)
    out->text = um_engine_decode_answer (self->engine, (const gint32 *) res->ids->data, run->answer_len, &error);
  else
    out->text = g_steal_pointer (&res->text);
  out->seconds = res->seconds;
  out->steps = res->steps;
  out->forward_passes = res->steps * (run->params.cfg_scale > 0 ? 2 : 1);
  if (out->text == NULL)
    {
      um_generator_result_free (out);
      g_task_return_error (task, error);
    }
  else
    g_task_return_pointer (task, out, (GDestroyNotify) um_generator_result_free);
  run_free (run);
}

static void
on_closing (GCancellable *closing, gpointer user_data)
{
  g_cancellable_cancel (G_CANCELLABLE (user_data));
}

static void
local_run_async (UmGenerator              *gen,
                 const UmGeneratorRequest *req,
                 UmStepFunc                step_cb,
                 gpointer                  step_data,
                 GCancellable             *cancellable,
                 GAsyncReadyCallback       callback,
                 gpointer                  user_data)
{
  UmLocalGenerator *self = UM_LOCAL_GENERATOR (gen);
  const UmModelConfig *cfg = &um_engine_get_model (self->engine)->cfg;
  Run *run = g_new0 (Run, 1);
  GError *error = NULL;
  UmGenRequest ereq;

  run->self = self;
  run->task = g_task_new (self, cancellable, callback, user_data);
  run->prompt = g_array_new (FALSE, FALSE, sizeof (gint32));
  run->suffix = g_array_new (FALSE, FALSE, sizeof (gint32));
  run->constraints = g_array_new (FALSE, FALSE, sizeof (UmGenConstraint));
  run->params = req->params;
  run->answer_len = req->params.gen_length;
  /* The generator's own cancellable stops the run when it is disposed. */
  run->cancellable = g_cancellable_new ();
  run->closing_handler = g_cancellable_connect (self->closing, G_CALLBACK (on_closing),
                                                g_object_ref (run->cancellable), g_object_unref);
  if (cancellable != NULL)
    {
      run->caller = g_object_ref (cancellable);
      run->caller_handler = g_cancellable_connect (cancellable, G_CALLBACK (on_closing),
                                                   g_object_ref (run->cancellable), g_object_unref);
    }

  if (!um_local_generator_prompt_ids (self, req, run->prompt, run->suffix, &error))
    goto fail;
  if (req->params.n_constraints > 0)
    g_array_append_vals (run->constraints, req->params.constraints, req->params.n_constraints);
  if (run->suffix->len > 0)
    {
      /* Infilling: the suffix's tokens are fixed after the answer and the
       * canvas grows by them; a single block stays a single block. */
      UmGenConstraint c = { 0 };
      c.offset = run->answer_len;
      c.ids = (const gint32 *) (gpointer) run->suffix->data;
      c.n_ids = (int) run->suffix->len;
      g_array_append_val (run->constraints, c);
      if (run->params.block_length == run->params.gen_length)
        run->params.block_length += (int) run->suffix->len;
      run->params.gen_length += (int) run->suffix->len;
    }
  run->params.constraints = run->constraints->len ? (const UmGenConstraint *) (gpointer) run->constraints->data : NULL;
  run->params.n_constraints = (int) run->constraints->len;
  if (!um_gen_params_validate_for (&run->params, cfg->arch, (int) run->prompt->len, cfg->max_seq_len, &error))
    goto fail;

  um_gen_request_init (&ereq);
  ereq.prompt_ids = (const gint32 *) (gpointer) run->prompt->data;
  ereq.n_prompt_ids = (int) run->prompt->len;
  ereq.params = run->params;
  um_engine_generate_async (self->engine, &ereq, step_cb, step_data, run->cancellable, on_engine_done, run);
  return;

fail:
  g_task_return_error (run->task, error);
  g_clear_object (&run->task);
  run_free (run);
}

static UmGeneratorResult *
local_run_finish (UmGenerator *gen, GAsyncResult *result, GError **error)
{
  return g_task_propagate_pointer (G_TASK (result), error);
}

static const UmGeneratorInfo *
local_get_info (UmGenerator *gen)
{
  return &UM_LOCAL_GENERATOR (gen)->info;
}

static char *
local_token_text (UmGenerator *gen, gint32 id)
{
  UmLocalGenerator *self = UM_LOCAL_GENERATOR (gen);
  return um_tokenizer_decode (um_engine_get_model (self->engine)->tokenizer, &id, 1, FALSE, NULL);
}

static UmEngine *
local_get_engine (UmGenerator *gen)
{
  return UM_LOCAL_GENERATOR (gen)->engine;
}

static void
um_local_generator_dispose (GObject *object)
{
  UmLocalGenerator *self = UM_LOCAL_GENERATOR (object);
  g_cancellable_cancel (self->closing);
  G_OBJECT_CLASS (um_local_generator_parent_class)->dispose (object);
}

static void
um_local_generator_finalize (GObject *object)
{
  UmLocalGenerator *self = UM_LOCAL_GENERATOR (object);

  /* A running generation holds a ref on self through its task, so none
   * runs here: the engine can go. */
  g_clear_pointer (&self->engine, um_engine_free);
  g_clear_object (&self->closing);
  g_free (self->info.model_id);
  g_free (self->info.display_name);
  g_free (self->info.location);
  G_OBJECT_CLASS (um_local_generator_parent_class)->finalize (object);
}

static void
um_local_generator_class_init (UmLocalGeneratorClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  UmGeneratorClass *gen_class = UM_GENERATOR_CLASS (klass);

  object_class->dispose = um_local_generator_dispose;
  object_class->finalize = um_local_generator_finalize;
  gen_class->get_info = local_get_info;
  gen_class->run_async = local_run_async;
  gen_class->run_finish = local_run_finish;
  gen_class->token_text = local_token_text;
  gen_class->get_engine = local_get_engine;
}

static void
um_local_generator_init (UmLocalGenerator *self)
{
  self->closing = g_cancellable_new ();
}

/* "/models/LLaDA-8B-Instruct/" → "LLaDA-8B-Instruct"; "x/demo.Q8_0.gguf" → "demo.Q8_0". */
static char *
model_id_from_path (const char *path)
{
  g_autofree char *trimmed = g_strdup (path);
  char *base;
  gsize n = strlen (trimmed);

  while (n > 1 && trimmed[n - 1] == '/')
    trimmed[--n] = '\0';
  base = g_path_get_basename (trimmed);
  if (g_str_has_suffix (base, ".gguf"))
    base[strlen (base) - 5] = '\0';
  return base;
}

UmGenerator *
um_local_generator_new (UmEngine *engine)
{
  UmLocalGenerator *self;
  UmModel *model;

  g_return_val_if_fail (engine != NULL, NULL);
  self = g_object_new (UM_TYPE_LOCAL_GENERATOR, NULL);
  self->engine = engine;
  model = um_engine_get_model (engine);
  self->info.model_id = model_id_from_path (model->path);
  self->info.display_name = g_strdup (model->display_name);
  self->info.arch = model->cfg.arch;
  self->info.max_seq_len = model->cfg.max_seq_len;
  self->info.mask_id = model->cfg.mask_id;
  self->info.eos_id = model->cfg.eos_id;
  self->info.eot_id = model->cfg.eot_id;
  self->info.remote = FALSE;
  self->info.location = g_strdup ("this computer");
  self->info.recommendation = um_engine_get_recommendation (engine);
  return UM_GENERATOR (self);
}

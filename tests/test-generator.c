/* test-generator.c — UmGenerator's FIFO and the local generator: results
 * equal the engine's own, a full queue refuses at once, a cancelled
 * waiting request never runs, a running one stops, messages render as the
 * chat template does, and a suffix is infilled after the answer. */
#include "um-local-generator.h"
#include "um-error.h"
#include "um-test-util.h"

typedef struct {
  GMainLoop         *loop;
  int                pending;
  UmGeneratorResult *res[8];
  GError            *err[8];
  int                steps[8];
  int                order[8];
  int                n_done;
} Ctx;

typedef struct {
  Ctx          *ctx;
  int           index;
  GCancellable *cancel_at_step_2;   /* stops the run while it runs */
} Slot;

static void
on_step (const UmStepEvent *ev, gpointer user_data)
{
  Slot *s = user_data;
  if (++s->ctx->steps[s->index] == 2 && s->cancel_at_step_2 != NULL)
    g_cancellable_cancel (s->cancel_at_step_2);
}

static void
on_done (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Slot *s = user_data;
  Ctx *ctx = s->ctx;

  ctx->res[s->index] = um_generator_generate_finish (UM_GENERATOR (source), result, &ctx->err[s->index]);
  ctx->order[ctx->n_done++] = s->index;
  if (--ctx->pending == 0)
    g_main_loop_quit (ctx->loop);
}

static UmGenerator *
load_generator (void)
{
  g_autofree char *path = um_test_data_path ("tiny-llada");
  g_autoptr(GError) error = NULL;
  UmEngineOptions opt;
  UmEngine *engine;

  um_engine_options_init (&opt);
  opt.device = UM_DEVICE_CPU;
  opt.n_threads = 1;
  engine = um_engine_load (path, &opt, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  return um_local_generator_new (engine);
}

static void
small_params (UmGenParams *p, guint64 seed)
{
  um_gen_params_init (p);
  p->gen_length = 16;
  p->steps = 8;
  p->block_length = 8;
  p->temperature = 0.5;
  p->seed = seed;
}

static void
test_queue (void)
{
  g_autoptr(UmGenerator) gen = load_generator ();
  UmEngine *engine = um_generator_get_engine (gen);
  Ctx ctx = { 0 };
  Slot slots[5];
  g_autoptr(GCancellable) dropped = g_cancellable_new ();
  g_autoptr(GCancellable) stopped = g_cancellable_new ();
  int queue_changes = 0;

  ctx.loop = g_main_loop_new (NULL, FALSE);
  g_signal_connect_swapped (gen, "queue-changed", G_CALLBACK (g_atomic_int_inc), &queue_changes);
  um_generator_set_max_waiting (gen, 3);
  g_assert_cmpint (um_generator_get_max_waiting (gen), ==, 3);
  for (int i = 0; i < 5; i++)
    {
      UmGeneratorRequest req;
      GCancellable *c = i == 1 ? stopped : i == 2 ? dropped : NULL;

      slots[i] = (Slot) { &ctx, i, i == 1 ? stopped : NULL };
      um_generator_request_init (&req);
      req.prompt = "The cat";
      small_params (&req.params, 100 + i);
      if (i == 1)
        {
          /* Step events reach this thread later than the worker makes
           * them: a long run, so the stop lands well before its end. */
          req.params.gen_length = req.params.steps = req.params.block_length = 256;
        }
      ctx.pending++;
      um_generator_generate_async (gen, &req, on_step, &slots[i], c, on_done, &slots[i]);
    }
  {
    int running, waiting;
    um_generator_get_queue (gen, &running, &waiting);
    g_assert_cmpint (running, ==, 1);
    g_assert_cmpint (waiting, ==, 3);   /* the fifth was refused */
  }
  /* Request 2 leaves while waiting; request 1 is stopped once it runs. */
  g_cancellable_cancel (dropped);
  g_main_loop_run (ctx.loop);

  g_assert_error (ctx.err[4], UM_ERROR, UM_ERROR_BUSY);
  g_assert_error (ctx.err[2], G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_assert_cmpint (ctx.steps[2], ==, 0);
  g_assert_error (ctx.err[1], G_IO_ERROR, G_IO_ERROR_CANCELLED);
  /* Cancellation is checked between steps and layers: the run stops at
   * the first check after the cancel, which is step 2's event here plus
   * however many steps the worker made while that event was on its way. */
  g_assert_cmpint (ctx.steps[1], >=, 2);
  g_assert_cmpint (ctx.steps[1], <, 256);
  /* FIFO: 0 then 3 ran to the end, in order. (When the refusal's callback
   * comes relative to 0's is not fixed: on a loaded machine the worker can
   * finish 0 before request 4 is even made.) */
  {
    int at0 = -1, at3 = -1;
    for (int i = 0; i < ctx.n_done; i++)
      {
        if (ctx.order[i] == 0)
          at0 = i;
        if (ctx.order[i] == 3)
          at3 = i;
      }
    g_assert_cmpint (at0, >=, 0);
    g_assert_cmpint (at3, >, at0);
  }
  for (int i = 0; i < 5; i++)
    if (i == 0 || i == 3)
      {
        UmGenRequest ereq;
        g_autoptr(GError) error = NULL;
        g_autoptr(UmGenResult) want = NULL;

        g_assert_no_error (ctx.err[i]);
        g_assert_cmpint (ctx.steps[i], ==, 8);
        um_gen_request_init (&ereq);
        ereq.prompt = "The cat";
        small_params (&ereq.params, 100 + i);
        want = um_engine_generate (engine, &ereq, NULL, NULL, NULL, &error);
        g_assert_no_error (error);
        g_assert_cmpuint (want->ids->len, ==, ctx.res[i]->ids->len);
        /* Token ids: the same schedule, seed and arithmetic, so equal exactly. */
        g_assert_cmpmem (want->ids->data, want->ids->len * 4, ctx.res[i]->ids->data, ctx.res[i]->ids->len * 4);
        g_assert_cmpstr (want->text, ==, ctx.res[i]->text);
        g_assert_cmpint (ctx.res[i]->steps, ==, 8);
        g_assert_cmpint (ctx.res[i]->forward_passes, ==, 8);
        g_assert_cmpint (ctx.res[i]->completion_tokens, <=, 16);
      }
  g_assert_cmpint (queue_changes, >, 0);
  for (int i = 0; i < 5; i++)
    {
      um_generator_result_free (ctx.res[i]);
      g_clear_error (&ctx.err[i]);
    }
  g_main_loop_unref (ctx.loop);
}

static UmGeneratorResult *
run_one (UmGenerator *gen, const UmGeneratorRequest *req, GError **error)
{
  Ctx ctx = { 0 };
  Slot slot = { &ctx, 0, NULL };

  ctx.loop = g_main_loop_new (NULL, FALSE);
  ctx.pending = 1;
  um_generator_generate_async (gen, req, on_step, &slot, NULL, on_done, &slot);
  g_main_loop_run (ctx.loop);
  g_main_loop_unref (ctx.loop);
  if (ctx.err[0] != NULL)
    g_propagate_error (error, ctx.err[0]);
  return ctx.res[0];
}

static void
test_messages_and_suffix (void)
{
  g_autoptr(UmGenerator) gen = load_generator ();
  UmModel *model = um_engine_get_model (um_generator_get_engine (gen));
  UmGenMessage msgs[] = { { "user", "Hello there" } };
  UmGeneratorRequest req;
  g_autoptr(GArray) a = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autoptr(GArray) b = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autoptr(GArray) suffix = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autoptr(GError) error = NULL;
  g_autoptr(UmGeneratorResult) res = NULL;
  const UmGeneratorInfo *info = um_generator_get_info (gen);

  g_assert_cmpstr (info->model_id, ==, "tiny-llada");
  g_assert_false (info->remote);
  g_assert_cmpint (info->mask_id, ==, model->cfg.mask_id);
  g_assert_nonnull (info->recommendation);

  /* One user message renders as the chat text of that turn. */
  um_generator_request_init (&req);
  req.messages = msgs;
  req.n_messages = 1;
  g_assert_true (um_local_generator_prompt_ids (UM_LOCAL_GENERATOR (gen), &req, a, NULL, &error));
  g_assert_no_error (error);
  g_assert_true (um_model_build_chat_prompt (model, NULL, 0, "Hello there", b, &error));
  g_assert_cmpuint (a->len, ==, b->len);
  g_assert_cmpmem (a->data, a->len * 4, b->data, b->len * 4);

  /* Infill: the suffix's ids follow the answer in the canvas, verbatim. */
  um_generator_request_init (&req);
  req.prompt = "The cat";
  req.suffix = " on the mat";
  small_params (&req.params, 7);
  req.params.block_length = 16;
  res = run_one (gen, &req, &error);
  g_assert_no_error (error);
  g_assert_true (um_tokenizer_encode (model->tokenizer, " on the mat", -1, suffix, &error));
  g_assert_cmpuint (res->ids->len, ==, 16 + suffix->len);
  g_assert_cmpmem ((gint32 *) res->ids->data + 16, suffix->len * 4, suffix->data, suffix->len * 4);

  /* Bad requests fail cleanly. */
  um_generator_request_init (&req);
  small_params (&req.params, 7);
  g_assert_null (run_one (gen, &req, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  g_clear_error (&error);
  {
    gint32 bad[] = { 1, -5 };
    req.prompt_ids = bad;
    req.n_prompt_ids = 2;
    g_assert_null (run_one (gen, &req, &error));
    g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/generator/queue", test_queue);
  g_test_add_func ("/generator/messages-and-suffix", test_messages_and_suffix);
  return g_test_run ();
}

/* The reference schedule: every fixture case's ids and trace exactly, the
 * parameter rules, seeds, cancellation, and the engine facade. */
#include <string.h>

#include "um-engine.h"
#include "um-error.h"
#include "um-test-util.h"

typedef struct {
  GPtrArray *trace;
  int        calls;
  int        cancel_after;
  GCancellable *cancel;
} Recorder;

static void
record_step (const UmStepEvent *ev, gpointer user_data)
{
  Recorder *r = user_data;
  GArray *a = g_array_new (FALSE, FALSE, sizeof (gint32));

  g_array_append_vals (a, ev->positions, ev->n_committed);
  g_ptr_array_add (r->trace, a);
  g_assert_cmpint (ev->step, ==, r->calls);
  for (int i = 1; i < ev->n_committed; i++)
    g_assert_cmpint (ev->positions[i - 1], <, ev->positions[i]);
  for (int i = 0; i < ev->n_committed; i++)
    g_assert_cmpint (ev->canvas[ev->positions[i]], ==, ev->ids[i]);
  r->calls++;
  if (r->cancel != NULL && r->calls == r->cancel_after)
    g_cancellable_cancel (r->cancel);
}

static UmEngine *
load_engine (const char *name)
{
  g_autofree char *path = um_test_data_path (name);
  /* The expected ids and traces are those of exact arithmetic. */
  return um_test_load_engine (path, TRUE);
}

static void
params_from_case (JsonObject *c, UmGenParams *p)
{
  um_gen_params_init (p);
  p->gen_length = json_object_get_int_member (c, "gen_length");
  p->steps = json_object_get_int_member (c, "steps");
  p->block_length = json_object_get_int_member (c, "block_length");
  p->temperature = json_object_get_double_member_with_default (c, "temperature", 0.0);
  p->cfg_scale = json_object_get_double_member_with_default (c, "cfg_scale", 0.0);
  p->logits_eos_inf = json_object_get_boolean_member_with_default (c, "logits_eos_inf", FALSE);
  p->confidence_eos_eot_inf = json_object_get_boolean_member_with_default (c, "confidence_eos_eot_inf", FALSE);
  g_assert_true (um_remasking_from_string (json_object_get_string_member (c, "remasking"), &p->remasking));
}

static void
check_cases (const char *model_name, const char *json_name)
{
  g_autoptr(JsonParser) parser = um_test_load_json (json_name);
  JsonArray *cases = json_object_get_array_member (json_node_get_object (json_parser_get_root (parser)), "generate");
  g_autoptr(UmEngine) engine = load_engine (model_name);

  g_assert_cmpuint (json_array_get_length (cases), >, 0);
  for (guint i = 0; i < json_array_get_length (cases); i++)
    {
      JsonObject *c = json_array_get_object_element (cases, i);
      g_autoptr(GArray) prompt = um_test_json_ids (json_object_get_array_member (c, "prompt_ids"));
      g_autoptr(GArray) want = um_test_json_ids (json_object_get_array_member (c, "ids"));
      JsonArray *want_trace = json_object_get_array_member (c, "trace");
      g_autoptr(GPtrArray) trace = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
      g_autoptr(GError) error = NULL;
      g_autoptr(UmGenResult) result = NULL;
      Recorder rec = { trace, 0, 0, NULL };
      UmGenRequest req;

      um_gen_request_init (&req);
      params_from_case (c, &req.params);
      req.prompt_ids = (const gint32 *) prompt->data;
      req.n_prompt_ids = prompt->len;
      result = um_engine_generate (engine, &req, record_step, &rec, NULL, &error);
      g_assert_no_error (error);
      g_test_message ("case %u: gen %d steps %d block %d cfg %g", i, req.params.gen_length,
                      req.params.steps, req.params.block_length, req.params.cfg_scale);
      g_assert_cmpmem (result->ids->data, result->ids->len * 4, want->data, want->len * 4);
      g_assert_cmpuint (trace->len, ==, json_array_get_length (want_trace));
      for (guint s = 0; s < trace->len; s++)
        {
          g_autoptr(GArray) w = um_test_json_ids (json_array_get_array_element (want_trace, s));
          GArray *got = g_ptr_array_index (trace, s);
          g_assert_cmpmem (got->data, got->len * 4, w->data, w->len * 4);
        }
    }
}

static void
test_fixture_cases (void)
{
  check_cases ("tiny-llada", "tiny-llada.expected.json");
}

static void
test_small_kquant_cases (void)
{
  check_cases ("small-kquant", "small-kquant.expected.json");
}

static void
test_split_steps (void)
{
  int counts[4];
  um_sampler_split_steps (10, 4, counts);
  g_assert_cmpint (counts[0], ==, 3);
  g_assert_cmpint (counts[1], ==, 3);
  g_assert_cmpint (counts[2], ==, 2);
  g_assert_cmpint (counts[3], ==, 2);
  um_sampler_split_steps (2, 4, counts);
  g_assert_cmpint (counts[0] + counts[1] + counts[2] + counts[3], ==, 2);
  g_assert_cmpint (counts[2], ==, 0);
}

static void
test_invalid_params (void)
{
  static const struct { int gen, steps, block; double temp, cfg; int prompt; const char *needle; } bad[] = {
    { 30, 30, 8, 0, 0, 4, "multiple of block_length" },
    { 32, 6, 8, 0, 0, 4, "multiple of the number of blocks" },
    { 0, 8, 8, 0, 0, 4, "gen_length" },
    { -8, 8, 8, 0, 0, 4, "gen_length" },
    { 8, 0, 8, 0, 0, 4, "steps" },
    { 8, 8, 0, 0, 0, 4, "block_length" },
    { 8, 8, 8, -1, 0, 4, "temperature" },
    { 8, 8, 8, 0, -2, 4, "cfg_scale" },
    { 64, 64, 64, 0, 0, 4090, "maximum sequence length" },
  };
  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      UmGenParams p;
      g_autoptr(GError) error = NULL;
      um_gen_params_init (&p);
      p.gen_length = bad[i].gen;
      p.steps = bad[i].steps;
      p.block_length = bad[i].block;
      p.temperature = bad[i].temp;
      p.cfg_scale = bad[i].cfg;
      g_assert_false (um_gen_params_validate (&p, bad[i].prompt, 4096, &error));
      g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
      g_assert_nonnull (strstr (error->message, bad[i].needle));
    }
}

static GArray *
run (UmEngine *engine, const UmGenParams *p, const gint32 *prompt, int n, GError **error)
{
  UmGenRequest req;
  g_autoptr(UmGenResult) result = NULL;
  um_gen_request_init (&req);
  req.params = *p;
  req.prompt_ids = prompt;
  req.n_prompt_ids = n;
  result = um_engine_generate (engine, &req, NULL, NULL, NULL, error);
  return result ? g_array_ref (result->ids) : NULL;
}

static void
test_seeded_sampling (void)
{
  g_autoptr(UmEngine) engine = load_engine ("tiny-llada");
  const gint32 prompt[] = { 506, 509, 84, 460, 510, 299 };
  g_autoptr(GError) error = NULL;
  UmGenParams p;
  gboolean differs = FALSE;

  um_gen_params_init (&p);
  p.gen_length = 16;
  p.steps = 8;
  p.block_length = 8;
  p.temperature = 1.0;
  p.seed = 42;
  for (int remask = 0; remask < 2; remask++)
    {
      p.remasking = remask ? UM_REMASK_RANDOM : UM_REMASK_LOW_CONFIDENCE;
      p.seed = 42;
      g_autoptr(GArray) a = run (engine, &p, prompt, 6, &error);
      g_autoptr(GArray) b = run (engine, &p, prompt, 6, &error);
      g_assert_no_error (error);
      g_assert_cmpmem (a->data, a->len * 4, b->data, b->len * 4);
      for (p.seed = 1; p.seed < 6 && !differs; p.seed++)
        {
          g_autoptr(GArray) c = run (engine, &p, prompt, 6, &error);
          differs = memcmp (a->data, c->data, a->len * 4) != 0;
        }
      g_assert_true (differs);
      differs = FALSE;
    }
}

static void
test_cancel_between_steps (void)
{
  g_autoptr(UmEngine) engine = load_engine ("tiny-llada");
  g_autoptr(GPtrArray) trace = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  g_autoptr(GCancellable) cancel = g_cancellable_new ();
  g_autoptr(GError) error = NULL;
  Recorder rec = { trace, 0, 3, cancel };
  const gint32 prompt[] = { 506, 509, 84 };
  UmGenRequest req;
  UmGenResult *result;

  um_gen_request_init (&req);
  req.params.gen_length = 16;
  req.params.steps = 16;
  req.params.block_length = 8;
  req.prompt_ids = prompt;
  req.n_prompt_ids = 3;
  result = um_engine_generate (engine, &req, record_step, &rec, cancel, &error);
  g_assert_null (result);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_assert_cmpint (rec.calls, ==, 3);

  /* The engine is usable again after a cancelled run. */
  g_clear_error (&error);
  result = um_engine_generate (engine, &req, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  um_gen_result_free (result);
}

/* More steps than tokens: the empty steps run no forward pass. */
static void
test_empty_steps_skip_forward (void)
{
  g_autoptr(UmEngine) engine = load_engine ("tiny-llada");
  g_autoptr(GPtrArray) trace = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  g_autoptr(GError) error = NULL;
  g_autoptr(UmGenResult) result = NULL;
  Recorder rec = { trace, 0, 0, NULL };
  const gint32 prompt[] = { 506, 509, 84 };
  UmGenRequest req;

  um_gen_request_init (&req);
  req.params.gen_length = 4;
  req.params.steps = 8;
  req.params.block_length = 4;
  req.prompt_ids = prompt;
  req.n_prompt_ids = 3;
  um_forward_reset_stats (um_engine_get_forward (engine));
  result = um_engine_generate (engine, &req, record_step, &rec, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpint (rec.calls, ==, 8);
  g_assert_cmpuint (um_forward_get_stats (um_engine_get_forward (engine))->n_passes, ==, 4);
}

/* A text prompt with the chat template gives the fixture's prompt ids. */
static void
test_chat_prompt (void)
{
  g_autoptr(JsonParser) parser = um_test_load_json ("tiny-llada.expected.json");
  JsonArray *cases = json_object_get_array_member (json_node_get_object (json_parser_get_root (parser)), "generate");
  JsonObject *c = json_array_get_object_element (cases, 0);
  g_autoptr(GArray) want = um_test_json_ids (json_object_get_array_member (c, "prompt_ids"));
  g_autoptr(GArray) want_ids = um_test_json_ids (json_object_get_array_member (c, "ids"));
  g_autoptr(UmEngine) engine = load_engine ("tiny-llada");
  g_autoptr(GError) error = NULL;
  g_autoptr(UmGenResult) result = NULL;
  g_autofree char *expected_text = NULL;
  UmGenRequest req;

  um_gen_request_init (&req);
  params_from_case (c, &req.params);
  req.prompt = "What is free software?";
  req.chat = TRUE;
  result = um_engine_generate (engine, &req, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpmem (result->prompt_ids->data, result->prompt_ids->len * 4, want->data, want->len * 4);
  g_assert_cmpmem (result->ids->data, result->ids->len * 4, want_ids->data, want_ids->len * 4);
  /* The answer stops at the first EOS/EOT. */
  expected_text = um_engine_decode_answer (engine, (const gint32 *) want_ids->data, 1, &error);
  g_assert_cmpstr (result->text, ==, expected_text);
}

static void
test_bad_prompt_ids (void)
{
  g_autoptr(UmEngine) engine = load_engine ("tiny-llada");
  g_autoptr(GError) error = NULL;
  const gint32 prompt[] = { 1, 9999 };
  UmGenParams p;

  um_gen_params_init (&p);
  p.gen_length = p.steps = p.block_length = 8;
  g_assert_null (run (engine, &p, prompt, 2, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/generate/fixture-cases", test_fixture_cases);
  g_test_add_func ("/generate/small-kquant-cases", test_small_kquant_cases);
  g_test_add_func ("/generate/split-steps", test_split_steps);
  g_test_add_func ("/generate/invalid-params", test_invalid_params);
  g_test_add_func ("/generate/seeded", test_seeded_sampling);
  g_test_add_func ("/generate/cancel", test_cancel_between_steps);
  g_test_add_func ("/generate/empty-steps", test_empty_steps_skip_forward);
  g_test_add_func ("/generate/chat-prompt", test_chat_prompt);
  g_test_add_func ("/generate/bad-prompt-ids", test_bad_prompt_ids);
  return g_test_run ();
}

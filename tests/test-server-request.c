/* test-server-request.c — the server's request checks, without a socket:
 * OpenAI bodies parsed field by field (what is honoured, what is refused
 * as "not supported" with its param, what is a plain 400, what is
 * ignored), and the parameters a request runs with (the model's
 * recommendation under the request, never OpenAI's temperature 1; lengths
 * from max_tokens that a default block does not divide; a completion's
 * suffix as the generator grows the canvas; the context limit). */
#include <string.h>

#include "um-error.h"
#include "um-server-request.h"

#define MAX_BODY ((gsize) 2 << 20)

static gboolean
parse (UmApiKind kind, const char *body, UmApiRequest *r, char **param, GError **error)
{
  return um_api_request_parse (kind, body, strlen (body), MAX_BODY, r, param, error);
}

static void
test_chat_fields (void)
{
  UmApiRequest r;
  g_autofree char *param = NULL;
  g_autoptr(GError) error = NULL;
  const char *body =
    "{\"model\":\"gpt-4o\",\"messages\":["
    "{\"role\":\"developer\",\"content\":\"Be brief.\"},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hello \"},{\"type\":\"text\",\"text\":\"there\"}]},"
    "{\"role\":\"assistant\",\"content\":null},"
    "{\"role\":\"user\",\"content\":\"Go on\"}],"
    "\"max_completion_tokens\":48,\"max_tokens\":7,\"temperature\":0.25,\"seed\":-3,"
    "\"stop\":[\"\\n\\n\",\"END\"],\"stream\":true,\"stream_options\":{\"include_usage\":true},"
    "\"n\":1,\"tools\":[],\"response_format\":{\"type\":\"text\"},"
    /* ignored, as docs/server-api.md's table says */
    "\"top_p\":0.5,\"presence_penalty\":1,\"frequency_penalty\":1,\"logit_bias\":{\"1\":2},\"logprobs\":true,"
    "\"user\":\"u\",\"metadata\":{},\"store\":false,\"service_tier\":\"auto\",\"parallel_tool_calls\":true,"
    "\"reasoning_effort\":\"low\",\"something_new\":[1,2],"
    "\"unmask\":{\"steps\":24,\"block_length\":16,\"remasking\":\"random\",\"cfg_scale\":1.5,\"cache\":\"dual\","
    "\"threshold\":0.9,\"stream_steps\":\"diff\",\"step_interval_ms\":20,\"return_trace\":true,\"confidence\":true}}";

  g_assert_true (parse (UM_API_CHAT, body, &r, &param, &error));
  g_assert_no_error (error);
  g_assert_null (param);
  g_assert_cmpstr (r.model, ==, "gpt-4o");
  g_assert_cmpuint (r.messages->len, ==, 4);
  g_assert_cmpstr (g_array_index (r.messages, UmGenMessage, 0).role, ==, "system");   /* developer */
  g_assert_cmpstr (g_array_index (r.messages, UmGenMessage, 1).content, ==, "Hello there");
  g_assert_cmpstr (g_array_index (r.messages, UmGenMessage, 2).role, ==, "assistant");
  g_assert_cmpstr (g_array_index (r.messages, UmGenMessage, 2).content, ==, "");
  /* max_completion_tokens is the newer name and wins. */
  g_assert_true (um_gen_layer_has (&r.user, UM_GEN_KEY_GEN_LENGTH));
  g_assert_cmpint (r.user.params.gen_length, ==, 48);
  g_assert_true (um_gen_layer_has (&r.user, UM_GEN_KEY_TEMPERATURE));
  g_assert_cmpfloat_with_epsilon (r.user.params.temperature, 0.25, 1e-12);
  g_assert_true (r.has_seed);
  g_assert_cmpuint (r.given.seed, ==, (guint64) -3);
  g_assert_cmpuint (g_strv_length (r.stop), ==, 2);
  g_assert_cmpstr (r.stop[1], ==, "END");
  g_assert_true (r.stream);
  g_assert_true (r.include_usage);
  g_assert_cmpint (r.user.params.steps, ==, 24);
  g_assert_cmpint (r.user.params.block_length, ==, 16);
  g_assert_cmpint (r.user.params.remasking, ==, UM_REMASK_RANDOM);
  g_assert_true (um_gen_layer_has (&r.user, UM_GEN_KEY_CFG_SCALE));
  g_assert_true (r.has_cache && r.given.cache == UM_CACHE_DUAL);
  g_assert_true (r.has_threshold);
  g_assert_false (r.has_factor);
  g_assert_cmpint (r.stream_steps, ==, UM_STREAM_STEPS_DIFF);
  g_assert_cmpuint (r.step_interval_ms, ==, 20);
  g_assert_true (r.return_trace);
  /* top_p at top level is OpenAI's (ignored), not the extension's. */
  g_assert_false (um_gen_layer_has (&r.user, UM_GEN_KEY_TOP_P));
  um_api_request_clear (&r);
}

static void
test_completion_fields (void)
{
  UmApiRequest r;
  g_autoptr(GError) error = NULL;

  g_assert_true (parse (UM_API_COMPLETIONS, "{\"prompt\":\"def f(\",\"suffix\":\"\\n  return x\",\"stop\":\"\\n\\n\","
                        "\"echo\":false,\"best_of\":1,\"max_tokens\":12.0}", &r, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpstr (r.prompt, ==, "def f(");
  g_assert_cmpstr (r.suffix, ==, "\n  return x");
  g_assert_cmpuint (g_strv_length (r.stop), ==, 1);
  g_assert_cmpint (r.user.params.gen_length, ==, 12);   /* 12.0 is an integer */
  g_assert_false (r.stream);
  g_assert_cmpint (r.stream_steps, ==, UM_STREAM_STEPS_NONE);
  um_api_request_clear (&r);

  g_assert_true (parse (UM_API_COMPLETIONS, "{\"prompt\":[1,2,3]}", &r, NULL, &error));
  g_assert_no_error (error);
  g_assert_null (r.prompt);
  g_assert_cmpuint (r.prompt_ids->len, ==, 3);
  g_assert_cmpint (g_array_index (r.prompt_ids, gint32, 2), ==, 3);
  um_api_request_clear (&r);

  /* ["text"] is one prompt. */
  g_assert_true (parse (UM_API_COMPLETIONS, "{\"prompt\":[\"one\"]}", &r, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpstr (r.prompt, ==, "one");
  um_api_request_clear (&r);
}

typedef struct {
  UmApiKind   kind;
  const char *body;
  const char *param;        /* NULL: none */
  gboolean    unsupported;  /* UM_ERROR_UNSUPPORTED ("not supported") rather than a plain 400 */
} Bad;

#define MSG "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

static const Bad bad[] = {
  /* not JSON, or not an object */
  { UM_API_CHAT, "", NULL, FALSE },
  { UM_API_CHAT, "{\"messages\":", NULL, FALSE },
  { UM_API_CHAT, "[1,2]", NULL, FALSE },
  { UM_API_CHAT, "{\"messages\":[],\"messages\":[]}", NULL, FALSE },   /* duplicate keys */
  { UM_API_CHAT, "{\"temperature\":NaN," MSG "}", NULL, FALSE },
  { UM_API_CHAT, "{\"temperature\":1e999," MSG "}", NULL, FALSE },
  /* messages */
  { UM_API_CHAT, "{}", "messages", FALSE },
  { UM_API_CHAT, "{\"messages\":[]}", "messages", FALSE },
  { UM_API_CHAT, "{\"messages\":\"hi\"}", "messages", FALSE },
  { UM_API_CHAT, "{\"messages\":[\"hi\"]}", "messages", FALSE },
  { UM_API_CHAT, "{\"messages\":[{\"content\":\"hi\"}]}", "messages[0].role", FALSE },
  { UM_API_CHAT, "{\"messages\":[{\"role\":7,\"content\":\"hi\"}]}", "messages[0].role", FALSE },
  { UM_API_CHAT, "{\"messages\":[{\"role\":\"robot\",\"content\":\"hi\"}]}", "messages[0].role", FALSE },
  { UM_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"tool\",\"content\":\"b\","
                 "\"tool_call_id\":\"x\"}]}", "messages[1].role", TRUE },
  { UM_API_CHAT, "{\"messages\":[{\"role\":\"function\",\"content\":\"b\"}]}", "messages[0].role", TRUE },
  { UM_API_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"1\"}]}]}",
    "messages", TRUE },
  { UM_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":"
                 "{\"url\":\"data:,\"}}]}]}", "messages[0].content", TRUE },
  { UM_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                 "{\"type\":\"input_audio\",\"input_audio\":{}}]}]}", "messages[0].content", TRUE },
  { UM_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"a\"}]}]}", "messages[0].content", FALSE },
  { UM_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":3}]}]}",
    "messages[0].content", FALSE },
  { UM_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":42}]}", "messages[0].content", FALSE },
  { UM_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":{}}]}]}", "messages[0].content", FALSE },
  { UM_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":[1]}]}]}", "messages[0].content", FALSE },
  { UM_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":3}]}]}", "messages[0].content", FALSE },
  /* what OpenAI has and we do not */
  { UM_API_CHAT, "{" MSG ",\"n\":2}", "n", TRUE },
  { UM_API_CHAT, "{" MSG ",\"n\":0}", "n", FALSE },
  { UM_API_CHAT, "{" MSG ",\"n\":\"1\"}", "n", FALSE },
  { UM_API_CHAT, "{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}", "tools", TRUE },
  { UM_API_CHAT, "{" MSG ",\"functions\":[{\"name\":\"f\"}]}", "functions", TRUE },
  { UM_API_CHAT, "{" MSG ",\"response_format\":{\"type\":\"json_object\"}}", "response_format", TRUE },
  { UM_API_CHAT, "{" MSG ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{}}}", "response_format",
    TRUE },
  { UM_API_CHAT, "{" MSG ",\"response_format\":\"json\"}", "response_format", FALSE },
  { UM_API_CHAT, "{" MSG ",\"response_format\":{\"type\":{\"a\":1}}}", "response_format", FALSE },
  { UM_API_CHAT, "{" MSG ",\"response_format\":{\"type\":7}}", "response_format", FALSE },
  /* the sampling fields */
  { UM_API_CHAT, "{" MSG ",\"model\":3}", "model", FALSE },
  { UM_API_CHAT, "{" MSG ",\"temperature\":-0.1}", "temperature", FALSE },
  { UM_API_CHAT, "{" MSG ",\"temperature\":\"hot\"}", "temperature", FALSE },
  { UM_API_CHAT, "{" MSG ",\"temperature\":1000}", "temperature", FALSE },
  { UM_API_CHAT, "{" MSG ",\"max_tokens\":0}", "max_tokens", FALSE },
  { UM_API_CHAT, "{" MSG ",\"max_tokens\":1.5}", "max_tokens", FALSE },
  { UM_API_CHAT, "{" MSG ",\"max_tokens\":1e12}", "max_tokens", FALSE },
  { UM_API_CHAT, "{" MSG ",\"max_completion_tokens\":-4}", "max_completion_tokens", FALSE },
  { UM_API_CHAT, "{" MSG ",\"seed\":\"x\"}", "seed", FALSE },
  { UM_API_CHAT, "{" MSG ",\"seed\":0.5}", "seed", FALSE },
  { UM_API_CHAT, "{" MSG ",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", "stop", FALSE },
  { UM_API_CHAT, "{" MSG ",\"stop\":\"\"}", "stop", FALSE },
  { UM_API_CHAT, "{" MSG ",\"stop\":[1]}", "stop", FALSE },
  { UM_API_CHAT, "{" MSG ",\"stop\":{}}", "stop", FALSE },
  { UM_API_CHAT, "{" MSG ",\"stream\":\"yes\"}", "stream", FALSE },
  { UM_API_CHAT, "{" MSG ",\"stream_options\":true}", "stream_options", FALSE },
  { UM_API_CHAT, "{" MSG ",\"stream_options\":{\"include_usage\":1}}", "stream_options.include_usage", FALSE },
  /* the extension: types, ranges, finite, known keys */
  { UM_API_CHAT, "{" MSG ",\"unmask\":[]}", "unmask", FALSE },
  { UM_API_CHAT, "{" MSG ",\"unmask\":{\"steps\":0}}", "unmask.steps", FALSE },
  { UM_API_CHAT, "{" MSG ",\"unmask\":{\"steps\":4097}}", "unmask.steps", FALSE },
  { UM_API_CHAT, "{" MSG ",\"unmask\":{\"steps\":2.5}}", "unmask.steps", FALSE },
  { UM_API_CHAT, "{" MSG ",\"unmask\":{\"steps\":\"8\"}}", "unmask.steps", FALSE },
  { UM_API_CHAT, "{" MSG ",\"unmask\":{\"block_length\":0}}", "unmask.block_length", FALSE },
  { UM_API_CHAT, "{" MSG ",\"unmask\":{\"remasking\":\"best\"}}", "unmask.remasking", FALSE },
  { UM_API_CHAT, "{" MSG ",\"unmask\":{\"cfg_scale\":-1}}", "unmask.cfg_scale", FALSE },
  { UM_API_CHAT, "{" MSG ",\"unmask\":{\"cache\":\"full\"}}", "unmask.cache", FALSE },
  { UM_API_CHAT, "{" MSG ",\"unmask\":{\"threshold\":2}}", "unmask.threshold", FALSE },
  { UM_API_CHAT, "{" MSG ",\"unmask\":{\"factor\":-1}}", "unmask.factor", FALSE },
  { UM_API_CHAT, "{" MSG ",\"unmask\":{\"alg\":\"fastest\"}}", "unmask.alg", FALSE },
  { UM_API_CHAT, "{" MSG ",\"unmask\":{\"eps\":1.5}}", "unmask.eps", FALSE },
  { UM_API_CHAT, "{" MSG ",\"unmask\":{\"top_p\":2}}", "unmask.top_p", FALSE },
  { UM_API_CHAT, "{" MSG ",\"unmask\":{\"top_k\":-1}}", "unmask.top_k", FALSE },
  { UM_API_CHAT, "{" MSG ",\"unmask\":{\"greedy\":1}}", "unmask.greedy", FALSE },
  { UM_API_CHAT, "{" MSG ",\"unmask\":{\"stream_steps\":\"all\"}}", "unmask.stream_steps", FALSE },
  { UM_API_CHAT, "{" MSG ",\"unmask\":{\"step_interval_ms\":-1}}", "unmask.step_interval_ms", FALSE },
  { UM_API_CHAT, "{" MSG ",\"unmask\":{\"return_trace\":\"yes\"}}", "unmask.return_trace", FALSE },
  { UM_API_CHAT, "{" MSG ",\"unmask\":{\"stepz\":8}}", "unmask.stepz", FALSE },
  /* completions */
  { UM_API_COMPLETIONS, "{}", "prompt", FALSE },
  { UM_API_COMPLETIONS, "{\"prompt\":[]}", "prompt", FALSE },
  { UM_API_COMPLETIONS, "{\"prompt\":{\"text\":\"a\"}}", "prompt", FALSE },
  { UM_API_COMPLETIONS, "{\"prompt\":[\"a\",\"b\"]}", "prompt", TRUE },
  { UM_API_COMPLETIONS, "{\"prompt\":[[1,2],[3]]}", "prompt", TRUE },
  { UM_API_COMPLETIONS, "{\"prompt\":[1,-2]}", "prompt", FALSE },
  { UM_API_COMPLETIONS, "{\"prompt\":[1,2.5]}", "prompt", FALSE },
  { UM_API_COMPLETIONS, "{\"prompt\":[1,\"a\"]}", "prompt", FALSE },
  { UM_API_COMPLETIONS, "{\"prompt\":\"a\",\"suffix\":3}", "suffix", FALSE },
  { UM_API_COMPLETIONS, "{\"prompt\":\"a\",\"echo\":true}", "echo", TRUE },
  { UM_API_COMPLETIONS, "{\"prompt\":\"a\",\"best_of\":3}", "best_of", TRUE },
  { UM_API_COMPLETIONS, "{\"prompt\":\"a\",\"best_of\":\"x\"}", "best_of", TRUE },
  { UM_API_COMPLETIONS, "{\"prompt\":[\"a\",3]}", "prompt", TRUE },
  { UM_API_COMPLETIONS, "{\"prompt\":\"a\",\"n\":4}", "n", TRUE },
};

static void
test_rejected (void)
{
  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      UmApiRequest r;
      g_autofree char *param = NULL;
      g_autoptr(GError) error = NULL;

      if (g_test_verbose ())
        g_printerr ("%s\n", bad[i].body);
      g_assert_false (parse (bad[i].kind, bad[i].body, &r, &param, &error));
      g_assert_nonnull (error);
      g_assert_true (error->domain == UM_ERROR);
      g_assert_cmpint (error->code, ==, bad[i].unsupported ? UM_ERROR_UNSUPPORTED : UM_ERROR_INVALID_PARAM);
      g_assert_cmpstr (param, ==, bad[i].param);
      g_assert_cmpuint (strlen (error->message), >, 0);
      if (bad[i].unsupported)
        g_assert_nonnull (strstr (error->message, "not supported"));
      um_api_request_clear (&r);
    }
}

/* Hostile bodies: an error, never a crash or a long wait. */
static void
test_hostile (void)
{
  UmApiRequest r;
  g_autoptr(GError) error = NULL;
  g_autoptr(GString) deep = g_string_new ("{\"messages\":");
  char bad_utf8[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}";

  for (int i = 0; i < 200000; i++)
    g_string_append_c (deep, '[');
  g_assert_false (um_api_request_parse (UM_API_CHAT, deep->str, deep->len, MAX_BODY, &r, NULL, &error));
  g_assert_nonnull (error);
  g_clear_error (&error);
  um_api_request_clear (&r);

  g_assert_false (parse (UM_API_CHAT, bad_utf8, &r, NULL, &error));
  g_assert_nonnull (error);
  g_clear_error (&error);
  um_api_request_clear (&r);

  /* Longer than the limit given. */
  g_assert_false (um_api_request_parse (UM_API_CHAT, "{" MSG ",\"user\":\"xxxxxxxxxxxxxxxx\"}",
                                        strlen ("{" MSG ",\"user\":\"xxxxxxxxxxxxxxxx\"}"), 40, &r, NULL, &error));
  g_assert_nonnull (error);
  um_api_request_clear (&r);
}

/* A stop string is matched against the committed text at every step, on
 * the server thread: one longer than UM_API_MAX_STOP_BYTES is refused, one
 * of exactly that length taken. */
static void
test_stop_length (void)
{
  for (int over = 0; over < 2; over++)
    {
      g_autofree char *stop = g_strnfill (UM_API_MAX_STOP_BYTES + over, 'z');
      g_autofree char *body = g_strdup_printf ("{" MSG ",\"stop\":[\"a\",\"%s\"]}", stop);
      g_autofree char *param = NULL;
      g_autoptr(GError) error = NULL;
      UmApiRequest r;
      gboolean ok = parse (UM_API_CHAT, body, &r, &param, &error);

      g_assert_true (ok == !over);
      if (over)
        {
          g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
          g_assert_cmpstr (param, ==, "stop");
        }
      um_api_request_clear (&r);
    }
}

/* ---- resolve ---- */

/* A model that recommends temperature 0.3, 64 steps, 128 tokens in blocks
 * of 32 (what generation_config.json gives). */
static void
model_layer (UmGenLayer *model)
{
  UmGenParams p;

  um_gen_params_init (&p);
  p.temperature = 0.3;
  p.steps = 64;
  p.gen_length = 128;
  p.block_length = 32;
  um_gen_layer_init (model);
  um_gen_layer_take (model, UM_GEN_KEY_TEMPERATURE, &p);
  um_gen_layer_take (model, UM_GEN_KEY_STEPS, &p);
  um_gen_layer_take (model, UM_GEN_KEY_GEN_LENGTH, &p);
  um_gen_layer_take (model, UM_GEN_KEY_BLOCK_LENGTH, &p);
}

/* Parses @body and resolves it for LLaDA with @prompt_len and @suffix_len. */
static gboolean
resolve (UmApiKind kind, const char *body, int prompt_len, int suffix_len, UmGenParams *out, char **param,
         GError **error)
{
  UmApiRequest r;
  UmGenParams base;
  UmGenLayer server_user, model, profile;
  gboolean ok;

  g_assert_true (parse (kind, body, &r, NULL, NULL));
  um_gen_params_init (&base);
  um_gen_layer_init (&server_user);
  um_gen_layer_init (&profile);
  model_layer (&model);
  ok = um_api_request_resolve (&r, UM_ARCH_LLADA, &base, &server_user, &model, &profile, prompt_len, suffix_len,
                               4096, out, param, error);
  um_api_request_clear (&r);
  return ok;
}

static void
test_resolve_defaults (void)
{
  UmGenParams p;
  g_autoptr(GError) error = NULL;

  /* Nothing given: the model's recommendation, not OpenAI's temperature 1. */
  g_assert_true (resolve (UM_API_CHAT, "{" MSG "}", 10, -1, &p, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpfloat_with_epsilon (p.temperature, 0.3, 1e-12);
  g_assert_cmpint (p.gen_length, ==, 128);
  g_assert_cmpint (p.steps, ==, 64);
  g_assert_cmpint (p.block_length, ==, 32);

  /* The request's own values win; the seed is passed on. */
  g_assert_true (resolve (UM_API_CHAT, "{" MSG ",\"temperature\":0,\"seed\":99,\"max_tokens\":64,"
                          "\"unmask\":{\"steps\":32,\"block_length\":16,\"cfg_scale\":2}}", 10, -1, &p, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpfloat_with_epsilon (p.temperature, 0.0, 1e-12);
  g_assert_cmpuint (p.seed, ==, 99);
  g_assert_cmpint (p.gen_length, ==, 64);
  g_assert_cmpint (p.steps, ==, 32);
  g_assert_cmpint (p.block_length, ==, 16);
  g_assert_cmpfloat_with_epsilon (p.cfg_scale, 2.0, 1e-12);

  /* max_tokens alone: a default block that does not divide it becomes
   * the whole canvas, steps at most one per token. */
  g_assert_true (resolve (UM_API_CHAT, "{" MSG ",\"max_tokens\":48}", 10, -1, &p, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpint (p.gen_length, ==, 48);
  g_assert_cmpint (p.block_length, ==, 48);
  g_assert_cmpint (p.steps, ==, 48);
  g_assert_true (resolve (UM_API_CHAT, "{" MSG ",\"max_tokens\":16}", 10, -1, &p, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpint (p.block_length, ==, 16);
  g_assert_cmpint (p.steps, ==, 16);
  /* ... and the model's steps rounded down to a multiple of the blocks. */
  g_assert_true (resolve (UM_API_CHAT, "{" MSG ",\"max_tokens\":96}", 10, -1, &p, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpint (p.block_length, ==, 32);
  g_assert_cmpint (p.steps, ==, 63);

  /* What the request itself gets wrong is its error. */
  {
    g_autofree char *param = NULL;
    g_assert_false (resolve (UM_API_CHAT, "{" MSG ",\"max_tokens\":16,\"unmask\":{\"block_length\":7}}", 10, -1, &p,
                             &param, &error));
    g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
    g_assert_cmpstr (param, ==, "unmask");
    g_clear_error (&error);
  }
  {
    g_autofree char *param = NULL;
    g_assert_false (resolve (UM_API_CHAT, "{" MSG ",\"unmask\":{\"alg\":\"entropy\"}}", 10, -1, &p, &param, &error));
    g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
    g_assert_cmpstr (param, ==, "unmask.alg");   /* Dream's, not LLaDA's */
    g_clear_error (&error);
  }
}

static void
test_resolve_context (void)
{
  UmGenParams p;
  g_autoptr(GError) error = NULL;
  g_autofree char *param = NULL;

  g_assert_true (resolve (UM_API_CHAT, "{" MSG ",\"max_tokens\":96}", 4000, -1, &p, NULL, &error));
  g_assert_no_error (error);
  g_assert_false (resolve (UM_API_CHAT, "{" MSG ",\"max_tokens\":128}", 4000, -1, &p, &param, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_CONFIG);   /* context_length_exceeded */
  g_assert_cmpstr (param, ==, "messages");
  g_clear_error (&error);
  g_clear_pointer (&param, g_free);
  /* A suffix takes room in the context too. */
  g_assert_false (resolve (UM_API_COMPLETIONS, "{\"prompt\":\"a\",\"suffix\":\"b\",\"max_tokens\":64}", 4000, 40, &p,
                           &param, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_CONFIG);
  g_assert_cmpstr (param, ==, "prompt");
  g_clear_error (&error);
  /* Not known (a remote engine counts for itself): no check here. */
  g_assert_true (resolve (UM_API_CHAT, "{" MSG ",\"max_tokens\":128}", -1, -1, &p, NULL, &error));
  g_assert_no_error (error);
}

static void
test_resolve_suffix (void)
{
  UmGenParams p;
  g_autoptr(GError) error = NULL;

  /* Default blocks: one block, which the generator grows by the suffix. */
  g_assert_true (resolve (UM_API_COMPLETIONS, "{\"prompt\":\"a\",\"suffix\":\"b\",\"max_tokens\":64}", 3, 3, &p, NULL,
                          &error));
  g_assert_no_error (error);
  g_assert_cmpint (p.gen_length, ==, 64);   /* the answer; the generator adds the suffix */
  g_assert_cmpint (p.block_length, ==, 64);
  g_assert_cmpint (p.steps, ==, 64);
  /* The suffix's length not known here: the same single block. */
  g_assert_true (resolve (UM_API_COMPLETIONS, "{\"prompt\":\"a\",\"suffix\":\"b\",\"max_tokens\":64}", -1, -1, &p, NULL,
                          &error));
  g_assert_no_error (error);
  g_assert_cmpint (p.block_length, ==, 64);
  /* The request's block: it must divide the grown canvas (16 + 8)... */
  g_assert_true (resolve (UM_API_COMPLETIONS, "{\"prompt\":\"a\",\"suffix\":\"b\",\"max_tokens\":16,"
                          "\"unmask\":{\"block_length\":8}}", 3, 8, &p, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpint (p.block_length, ==, 8);
  g_assert_cmpint (p.steps % 3, ==, 0);   /* three blocks once grown */
  /* ... or equal max_tokens (one block). */
  g_assert_true (resolve (UM_API_COMPLETIONS, "{\"prompt\":\"a\",\"suffix\":\"b\",\"max_tokens\":16,"
                          "\"unmask\":{\"block_length\":16,\"steps\":4}}", 3, 3, &p, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpint (p.steps, ==, 4);
  {
    g_autofree char *param = NULL;
    g_assert_false (resolve (UM_API_COMPLETIONS, "{\"prompt\":\"a\",\"suffix\":\"b\",\"max_tokens\":16,"
                             "\"unmask\":{\"block_length\":8}}", 3, 3, &p, &param, &error));
    g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
    g_assert_cmpstr (param, ==, "unmask.block_length");
    g_assert_nonnull (strstr (error->message, "suffix"));
  }
}

/* RND1 keeps the canvas's last position for its pad: no suffix there. */
static void
test_resolve_suffix_rnd1 (void)
{
  UmApiRequest r;
  UmGenParams base, p;
  UmGenLayer none;
  g_autofree char *param = NULL;
  g_autoptr(GError) error = NULL;

  g_assert_true (parse (UM_API_COMPLETIONS, "{\"prompt\":\"a\",\"suffix\":\"b\",\"max_tokens\":16}", &r, NULL, NULL));
  um_gen_params_init (&base);
  um_gen_layer_init (&none);
  g_assert_false (um_api_request_resolve (&r, UM_ARCH_RND1, &base, &none, &none, &none, 3, 2, 4096, &p, &param,
                                          &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED);
  g_assert_cmpstr (param, ==, "suffix");
  g_clear_error (&error);
  g_clear_pointer (&param, g_free);
  /* Dream infills. */
  g_assert_true (um_api_request_resolve (&r, UM_ARCH_DREAM, &base, &none, &none, &none, 3, 2, 4096, &p, &param,
                                         &error));
  g_assert_no_error (error);
  um_api_request_clear (&r);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/server-request/chat-fields", test_chat_fields);
  g_test_add_func ("/server-request/completion-fields", test_completion_fields);
  g_test_add_func ("/server-request/rejected", test_rejected);
  g_test_add_func ("/server-request/hostile", test_hostile);
  g_test_add_func ("/server-request/stop-length", test_stop_length);
  g_test_add_func ("/server-request/resolve-defaults", test_resolve_defaults);
  g_test_add_func ("/server-request/resolve-context", test_resolve_context);
  g_test_add_func ("/server-request/resolve-suffix", test_resolve_suffix);
  g_test_add_func ("/server-request/resolve-suffix-rnd1", test_resolve_suffix_rnd1);
  return g_test_run ();
}

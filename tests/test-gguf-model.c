/* GGUF models end to end: every gguf_* expected entry of both fixture files
 * to float32 accuracy (F32, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K
 * and the Q4_K_M / Q5_K_M mixes), the same traces from the F32 GGUF as from
 * the safetensors folder, and tokenization from GGUF metadata equal to
 * tokenizer.json. */
#include <math.h>
#include <string.h>

#include "um-engine.h"
#include "um-error.h"
#include "um-test-util.h"

/* Values of an expected entry as doubles, and its ids. */
static double *
entry_values (JsonObject *entry, GArray **ids, guint V)
{
  JsonArray *values = json_object_get_array_member (entry, "values");
  double *want;

  *ids = um_test_json_ids (json_object_get_array_member (entry, "ids"));
  want = g_new (double, (*ids)->len * V);
  g_assert_cmpuint (json_array_get_length (values), ==, (*ids)->len);
  for (guint r = 0; r < (*ids)->len; r++)
    {
      JsonArray *row = json_array_get_array_element (values, r);
      g_assert_cmpuint (json_array_get_length (row), ==, V);
      for (guint v = 0; v < V; v++)
        want[r * V + v] = json_array_get_double_element (row, v);
    }
  return want;
}

static void
check_entries (const char *json_name)
{
  g_autoptr(JsonParser) parser = um_test_load_json (json_name);
  JsonObject *root = json_node_get_object (json_parser_get_root (parser));
  g_autoptr(GList) members = json_object_get_members (root);
  JsonObject *f32_entry = json_object_get_object_member (root, "gguf_f32");
  guint checked = 0;

  for (GList *l = members; l != NULL; l = l->next)
    {
      const char *key = l->data;
      JsonObject *entry;
      g_autoptr(GArray) ids = NULL, f32_ids = NULL;
      g_autofree char *path = NULL;
      g_autoptr(UmEngine) engine = NULL;
      g_autoptr(GError) error = NULL;
      g_autofree float *logits = NULL;
      g_autofree double *want = NULL, *truth = NULL;
      const UmModel *model;
      guint V;
      double err, tol;

      if (!g_str_has_prefix (key, "gguf_"))
        continue;
      entry = json_object_get_object_member (root, key);
      path = um_test_data_path (json_object_get_string_member (entry, "file"));
      engine = um_test_load_engine (path, TRUE);
      model = um_engine_get_model (engine);
      V = model->cfg.vocab_size;
      want = entry_values (entry, &ids, V);
      logits = g_new (float, ids->len * V);
      g_assert_true (um_forward_logits (um_engine_get_forward (engine), (const gint32 *) ids->data, 1, ids->len,
                                        NULL, 0, logits, NULL, &error));
      g_assert_no_error (error);
      tol = um_test_f32_tolerance (model, (const gint32 *) ids->data, ids->len, want, key);
      err = um_test_rel_error (logits, want, (size_t) ids->len * V);
      g_test_message ("%s (%s): max relative error %.3g", key, json_object_get_string_member (entry, "file"), err);
      g_assert_cmpfloat (err, <, tol);
      checked++;

      /* 8-bit activations (the default with quantized weights where the CPU
       * has integer dot products) are allowed only because their cost is
       * small next to the weights' own quantization: the logits must land
       * closer to the exact quantized model's than those land from the
       * unquantized model's. */
      if (g_str_equal (key, "gguf_f32"))
        continue;
      truth = entry_values (f32_entry, &f32_ids, V);
      g_assert_cmpmem (f32_ids->data, f32_ids->len * 4, ids->data, ids->len * 4);
      {
        g_autoptr(UmEngine) fast = um_test_load_engine (path, FALSE);
        double quant_cost = 0, int8_cost;

        g_assert_true (um_forward_logits (um_engine_get_forward (fast), (const gint32 *) ids->data, 1, ids->len,
                                          NULL, 0, logits, NULL, &error));
        g_assert_no_error (error);
        for (size_t i = 0; i < (size_t) ids->len * V; i++)
          quant_cost = MAX (quant_cost, fabs (want[i] - truth[i]) / (1.0 + fabs (truth[i])));
        int8_cost = um_test_rel_error (logits, want, (size_t) ids->len * V);
        g_test_message ("%s: default products %.3g from exact, weight quantization %.3g from f32",
                        key, int8_cost, quant_cost);
        g_assert_cmpfloat (int8_cost, <, quant_cost);
      }
    }
  g_assert_cmpuint (checked, >=, 3);
}

static void
test_tiny_entries (void)
{
  check_entries ("tiny-llada.expected.json");
}

static void
test_kquant_entries (void)
{
  check_entries ("small-kquant.expected.json");
}

static GArray *
generate (UmEngine *engine, JsonObject *c)
{
  g_autoptr(GArray) prompt = um_test_json_ids (json_object_get_array_member (c, "prompt_ids"));
  g_autoptr(GError) error = NULL;
  g_autoptr(UmGenResult) result = NULL;
  UmGenRequest req;

  um_gen_request_init (&req);
  req.params.gen_length = json_object_get_int_member (c, "gen_length");
  req.params.steps = json_object_get_int_member (c, "steps");
  req.params.block_length = json_object_get_int_member (c, "block_length");
  req.params.cfg_scale = json_object_get_double_member_with_default (c, "cfg_scale", 0.0);
  req.params.logits_eos_inf = json_object_get_boolean_member_with_default (c, "logits_eos_inf", FALSE);
  req.params.confidence_eos_eot_inf = json_object_get_boolean_member_with_default (c, "confidence_eos_eot_inf", FALSE);
  req.prompt_ids = (const gint32 *) prompt->data;
  req.n_prompt_ids = prompt->len;
  result = um_engine_generate (engine, &req, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  return g_array_ref (result->ids);
}

/* The F32 GGUF and the safetensors folder hold the same weights: every
 * fixture case must give the expected ids from the GGUF too. */
static void
test_gguf_generate_matches (void)
{
  g_autoptr(JsonParser) parser = um_test_load_json ("tiny-llada.expected.json");
  JsonArray *cases = json_object_get_array_member (json_node_get_object (json_parser_get_root (parser)), "generate");
  g_autofree char *path = um_test_data_path ("tiny-llada-f32.gguf");
  g_autoptr(GError) error = NULL;
  g_autoptr(UmEngine) engine = um_test_load_engine (path, TRUE);

  for (guint i = 0; i < json_array_get_length (cases); i++)
    {
      JsonObject *c = json_array_get_object_element (cases, i);
      g_autoptr(GArray) want = um_test_json_ids (json_object_get_array_member (c, "ids"));
      g_autoptr(GArray) got = generate (engine, c);
      g_assert_cmpmem (got->data, got->len * 4, want->data, want->len * 4);
    }
}

static void
test_gguf_tokenizer (void)
{
  g_autoptr(JsonParser) parser = um_test_load_json ("tiny-llada.expected.json");
  JsonArray *cases = json_object_get_array_member (json_node_get_object (json_parser_get_root (parser)), "tokenize");
  g_autofree char *path = um_test_data_path ("tiny-llada-q4_0.gguf");
  g_autoptr(GError) error = NULL;
  g_autoptr(UmModel) model = um_model_load (path, NULL, &error);

  g_assert_no_error (error);
  g_assert_cmpint (model->cfg.mask_id, ==, 508);
  g_assert_cmpint (model->cfg.eos_id, ==, 507);
  g_assert_cmpint (model->cfg.bos_id, ==, 506);
  g_assert_cmpint (model->cfg.eot_id, ==, 511);
  g_assert_true (model->cfg.rope_interleaved);
  for (guint i = 0; i < json_array_get_length (cases); i++)
    {
      JsonObject *c = json_array_get_object_element (cases, i);
      g_autoptr(GArray) want = um_test_json_ids (json_object_get_array_member (c, "ids"));
      g_autoptr(GArray) got = g_array_new (FALSE, FALSE, sizeof (gint32));
      g_autofree char *back = NULL;
      const char *text = json_object_get_string_member (c, "text");
      g_assert_true (um_tokenizer_encode (model->tokenizer, text, -1, got, &error));
      g_assert_cmpmem (got->data, got->len * 4, want->data, want->len * 4);
      back = um_tokenizer_decode (model->tokenizer, (const gint32 *) got->data, got->len, FALSE, &error);
      g_assert_cmpstr (back, ==, text);
    }
}

/* A GGUF that is not LLaDA, or lacks what LLaDA needs, is refused clearly. */
static void
test_wrong_architecture (void)
{
  g_autofree char *src = um_test_data_path ("tiny-llada-q4_0.gguf");
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *path = g_build_filename (dir, "llama.gguf", NULL);
  g_autofree char *bytes = NULL;
  g_autoptr(GError) error = NULL;
  gsize len;
  char *at;

  g_assert_true (g_file_get_contents (src, &bytes, &len, NULL));
  at = memmem (bytes, len, "llada", 5);
  g_assert_nonnull (at);
  memcpy (at, "llama", 5);
  um_test_write_file (path, bytes, len);
  g_assert_null (um_model_load (path, NULL, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "llama.gguf"));
  um_test_rmtree (dir);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/gguf-model/tiny-entries", test_tiny_entries);
  g_test_add_func ("/gguf-model/kquant-entries", test_kquant_entries);
  g_test_add_func ("/gguf-model/generate", test_gguf_generate_matches);
  g_test_add_func ("/gguf-model/tokenizer", test_gguf_tokenizer);
  g_test_add_func ("/gguf-model/wrong-architecture", test_wrong_architecture);
  return g_test_run ();
}

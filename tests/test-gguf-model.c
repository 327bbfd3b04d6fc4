/* GGUF models end to end: every gguf_* expected entry of both fixture files
 * to float32 accuracy (F32, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K
 * and the Q4_K_M / Q5_K_M mixes), the same traces from the F32 GGUF as from
 * the safetensors folder, and tokenization from GGUF metadata equal to
 * tokenizer.json. */
#include <math.h>
#include <string.h>

#include "um-cpu-kernels.h"
#include "um-engine.h"
#include "um-error.h"
#include "um-gguf.h"
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
        g_test_message ("%s: 8-bit products %.3g from exact (%s), weight quantization %.3g from f32",
                        key, int8_cost, um_cpu_matmul_path_name (um_cpu_matmul_path (model->layers[0].wq.dtype,
                                                                                     UM_PRODUCTS_INT8)),
                        quant_cost);
        /* As far as the activations' rounding itself moves them, no
         * further (a derived bound: um_test_int8_tolerance_blocks ()). */
        g_assert_cmpfloat (int8_cost, <, um_test_int8_tolerance_blocks (model, (const gint32 *) ids->data, ids->len, 0,
                                                                        want, key));
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

/* One change to a fixture GGUF: a key set (as uint32 or bool) or dropped,
 * and a tensor dropped. */
typedef struct {
  const char *src;
  const char *key;         /* NULL: none */
  enum { SET_U32, SET_BOOL, DROP_KEY } how;
  guint32     value;
  const char *key2;        /* a second key set to the same value, or NULL */
  const char *drop_tensor; /* NULL: none; "*SUFFIX": every tensor whose name ends so */
  gint        code;        /* 0: loads */
  const char *needle1, *needle2;
} GgufCase;

static gboolean
dropped (const GgufCase *c, const char *name)
{
  if (c->drop_tensor == NULL)
    return FALSE;
  if (c->drop_tensor[0] == '*')
    return g_str_has_suffix (name, c->drop_tensor + 1);
  return g_str_equal (name, c->drop_tensor);
}

/* Writes @c's variant of its source file to @path. */
static void
write_variant (const GgufCase *c, const char *path)
{
  g_autofree char *src = um_test_data_path (c->src);
  g_autoptr(GError) error = NULL;
  g_autoptr(UmGguf) g = um_gguf_open (src, &error);
  g_autoptr(UmGgufWriter) w = um_gguf_writer_new ();
  UmTensorTable *t;

  g_assert_no_error (error);
  for (guint i = 0; i < um_gguf_n_kv (g); i++)
    {
      const char *key = um_gguf_kv_key (g, i);
      if (c->how == DROP_KEY && g_strcmp0 (key, c->key) == 0)
        continue;
      g_assert_true (um_gguf_writer_copy_kv (w, g, key, &error));
    }
  for (guint k = 0; k < 2 && c->how != DROP_KEY; k++)
    {
      const char *key = k == 0 ? c->key : c->key2;
      if (key == NULL)
        continue;
      if (c->how == SET_BOOL)
        um_gguf_writer_set_bool (w, key, c->value != 0);
      else
        um_gguf_writer_set_u32 (w, key, c->value);
    }
  t = um_gguf_get_tensors (g);
  for (guint i = 0; i < um_tensor_table_size (t); i++)
    {
      const UmTensorInfo *info = um_tensor_table_get (t, i);
      if (!dropped (c, info->name))
        g_assert_true (um_gguf_writer_add_tensor_info (w, info->name, info->dtype, info->n_dims, info->shape,
                                                       NULL, &error));
    }
  g_assert_true (um_gguf_writer_begin (w, path, &error));
  for (guint i = 0; i < um_tensor_table_size (t); i++)
    {
      const UmTensorInfo *info = um_tensor_table_get (t, i);
      if (!dropped (c, info->name))
        g_assert_true (um_gguf_writer_write_tensor_data (w, info->data, info->n_bytes, &error));
    }
  g_assert_true (um_gguf_writer_finish (w, &error));
  g_assert_no_error (error);
}

/* Dream, LLaDA-MoE, RND1 and LLaDA 2 files that lie: expert counts of 0 or 2^31,
 * more experts per token than experts, shapes that disagree with the
 * metadata, a router or a bias missing, a rotated width above the head
 * size, an odd head size, options we do not run: each a clear error.
 * And what llama.cpp allows: no output.weight (tied), no biases at all. */
static void
test_family_variants (void)
{
  static const GgufCase cases[] = {
    { "tiny-llada-moe-f32.gguf", "llada-moe.expert_count", SET_U32, 0, NULL, NULL,
      UM_ERROR_CONFIG, "llada-moe.gguf", "experts is 0" },
    { "tiny-llada-moe-f32.gguf", "llada-moe.expert_count", SET_U32, 1u << 31, NULL, NULL,
      UM_ERROR_CONFIG, "llada-moe.gguf", "2147483648" },
    { "tiny-llada-moe-f32.gguf", "llada-moe.expert_count", DROP_KEY, 0, NULL, NULL,
      UM_ERROR_CONFIG, "llada-moe.gguf", "llada-moe.expert_count" },
    { "tiny-llada-moe-f32.gguf", "llada-moe.expert_used_count", SET_U32, 9, NULL, NULL,
      UM_ERROR_CONFIG, "llada-moe.gguf", "experts per token (9)" },
    { "tiny-llada-moe-f32.gguf", "llada-moe.expert_used_count", SET_U32, 0, NULL, NULL,
      UM_ERROR_CONFIG, "llada-moe.gguf", "experts per token (0)" },
    { "tiny-llada-moe-q8_0.gguf", "llada-moe.expert_feed_forward_length", SET_U32, 16, NULL, NULL,
      UM_ERROR_CONFIG, "blk.0.ffn_gate_exps.weight", "[8, 16, 64]" },
    { "tiny-llada-moe-q8_0.gguf", "llada-moe.expert_count", SET_U32, 4, NULL, NULL,
      UM_ERROR_CONFIG, "blk.0.ffn_gate_inp.weight", "[4, 64]" },
    { "tiny-llada-moe-f32.gguf", NULL, SET_U32, 0, NULL, "blk.1.ffn_gate_inp.weight",
      UM_ERROR_FORMAT, "blk.1.ffn_gate_inp.weight", "missing" },
    { "tiny-llada-moe-f32.gguf", NULL, SET_U32, 0, NULL, "blk.0.ffn_down_exps.weight",
      UM_ERROR_FORMAT, "blk.0.ffn_down_exps.weight", "missing" },
    { "tiny-llada-moe-f32.gguf", NULL, SET_U32, 0, NULL, "blk.1.attn_k_norm.weight",
      UM_ERROR_FORMAT, "blk.1.attn_k_norm.weight", "missing" },
    { "tiny-llada-moe-f32.gguf", "llada-moe.expert_gating_func", SET_U32, 7, NULL, NULL,
      UM_ERROR_UNSUPPORTED, "llada-moe.gguf", "expert_gating_func" },
    { "tiny-llada-moe-f32.gguf", "llada-moe.attention.causal", SET_BOOL, 1, NULL, NULL,
      UM_ERROR_UNSUPPORTED, "llada-moe.gguf", "causal" },
    { "tiny-dream-q8_0.gguf", NULL, SET_U32, 0, NULL, "blk.1.attn_k.bias",
      UM_ERROR_FORMAT, "blk.1.attn_k.bias", "missing" },
    { "tiny-dream-q8_0.gguf", "dream.attention.head_count_kv", SET_U32, 3, NULL, NULL,
      UM_ERROR_CONFIG, "dream.gguf", "head_count_kv" },
    { "tiny-dream-f32.gguf", "dream.feed_forward_length", SET_U32, 96, NULL, NULL,
      UM_ERROR_CONFIG, "blk.0.ffn_gate.weight", "[96, 64]" },
    { "tiny-dream-f32.gguf", "dream.rope.dimension_count", SET_U32, 8, NULL, NULL,
      UM_ERROR_UNSUPPORTED, "dream.gguf", "rope.dimension_count" },
    { "tiny-rnd1-f32.gguf", "rnd1.rope.dimension_count", SET_U32, 32, NULL, NULL,
      UM_ERROR_CONFIG, "rnd1.gguf", "above the head size" },
    { "tiny-rnd1-f32.gguf", "rnd1.attention.key_length", SET_U32, 15, "rnd1.attention.value_length", NULL,
      UM_ERROR_CONFIG, "rnd1.attention.key_length", "even" },
    { "tiny-rnd1-f32.gguf", "rnd1.attention.key_length", SET_U32, 0, "rnd1.attention.value_length", NULL,
      UM_ERROR_CONFIG, "rnd1.attention.key_length", "even" },
    { "tiny-rnd1-f32.gguf", "rnd1.attention.key_length", SET_U32, 32, "rnd1.attention.value_length", NULL,
      UM_ERROR_CONFIG, "blk.0.attn_q.weight", "[256, 64]" },
    { "tiny-rnd1-f32.gguf", "rnd1.attention.value_length", SET_U32, 32, NULL, NULL,
      UM_ERROR_UNSUPPORTED, "rnd1.attention.value_length", "differs" },
    { "tiny-rnd1-f32.gguf", "rnd1.expert_group_count", SET_U32, 4, NULL, NULL,
      UM_ERROR_UNSUPPORTED, "rnd1.gguf", "grouped" },
    { "tiny-rnd1-q8_0.gguf", NULL, SET_U32, 0, NULL, "blk.0.ffn_gate_inp.weight",
      UM_ERROR_FORMAT, "blk.0.ffn_gate_inp.weight", "missing" },
    /* llada2: groups that do not fit, a rotated width RoPE cannot pair, a
     * fused q/k/v of other heads, required router keys, a shared expert
     * lost, attention that says causal. */
    { "tiny-llada2-f32.gguf", "llada2.expert_group_count", SET_U32, 3, NULL, NULL,
      UM_ERROR_CONFIG, "llada2.gguf", "expert_group_count" },
    { "tiny-llada2-f32.gguf", "llada2.expert_group_used_count", SET_U32, 5, NULL, NULL,
      UM_ERROR_CONFIG, "llada2.gguf", "expert_group_used_count" },
    { "tiny-llada2-f32.gguf", "llada2.expert_group_used_count", SET_U32, 1, NULL, NULL,
      UM_ERROR_CONFIG, "llada2.gguf", "3 experts per token" },
    { "tiny-llada2-f32.gguf", "llada2.rope.dimension_count", SET_U32, 7, NULL, NULL,
      UM_ERROR_CONFIG, "llada2.rope.dimension_count", "even" },
    { "tiny-llada2-f32.gguf", "llada2.rope.dimension_count", SET_U32, 32, NULL, NULL,
      UM_ERROR_CONFIG, "llada2.gguf", "above the head size" },
    { "tiny-llada2-q8_0.gguf", "llada2.attention.head_count_kv", SET_U32, 1, NULL, NULL,
      UM_ERROR_CONFIG, "blk.0.attn_qkv.weight", "[96, 64]" },
    { "tiny-llada2-f32.gguf", "llada2.expert_weights_scale", DROP_KEY, 0, NULL, NULL,
      UM_ERROR_CONFIG, "llada2.expert_weights_scale", "missing" },
    { "tiny-llada2-f32.gguf", "llada2.expert_gating_func", DROP_KEY, 0, NULL, NULL,
      UM_ERROR_CONFIG, "llada2.expert_gating_func", "missing" },
    { "tiny-llada2-f32.gguf", "llada2.leading_dense_block_count", SET_U32, 0, NULL, NULL,
      UM_ERROR_FORMAT, "blk.0.ffn_gate_inp.weight", "missing" },
    { "tiny-llada2-f32.gguf", "llada2.expert_shared_feed_forward_length", SET_U32, 64, NULL, NULL,
      UM_ERROR_CONFIG, "blk.1.ffn_gate_shexp.weight", "[64, 64]" },
    { "tiny-llada2-q8_0.gguf", NULL, SET_U32, 0, NULL, "blk.1.ffn_down_shexp.weight",
      UM_ERROR_FORMAT, "blk.1.ffn_down_shexp.weight", "missing" },
    { "tiny-llada2-f32.gguf", NULL, SET_U32, 0, NULL, "blk.0.attn_qkv.weight",
      UM_ERROR_FORMAT, "blk.0.attn_qkv.weight", "missing" },
    { "tiny-llada2-f32.gguf", "llada2.attention.causal", SET_BOOL, 1, NULL, NULL,
      UM_ERROR_UNSUPPORTED, "llada2.gguf", "causal" },
    /* Allowed: the head tied to the embedding, and no biases anywhere
     * (llada2: no selection bias, as llama.cpp allows). */
    { "tiny-llada2-f32.gguf", NULL, SET_U32, 0, NULL, "*.bias", 0, NULL, NULL },
    { "tiny-rnd1-f32.gguf", NULL, SET_U32, 0, NULL, "output.weight", 0, NULL, NULL },
    { "tiny-dream-f32.gguf", NULL, SET_U32, 0, NULL, "*.bias", 0, NULL, NULL },
    { "tiny-llada-moe-f32.gguf", "diffusion.shift_logits", SET_BOOL, 1, NULL, NULL, 0, NULL, NULL },
  };
  g_autofree char *dir = um_test_mkdtemp ();

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      const GgufCase *c = &cases[i];
      g_autofree char *path = NULL;
      g_autoptr(GError) error = NULL;
      g_autoptr(UmModel) m = NULL;

      path = g_build_filename (dir, g_str_has_prefix (c->src, "tiny-llada-moe") ? "llada-moe.gguf"
                                    : g_str_has_prefix (c->src, "tiny-llada2") ? "llada2.gguf"
                                    : g_str_has_prefix (c->src, "tiny-dream") ? "dream.gguf" : "rnd1.gguf", NULL);
      g_test_message ("case %u: %s, %s, tensor %s", i, c->src, c->key ? c->key : "-",
                      c->drop_tensor ? c->drop_tensor : "-");
      write_variant (c, path);
      m = um_model_load (path, NULL, &error);
      if (c->code == 0)
        {
          g_assert_no_error (error);
          if (g_strcmp0 (c->drop_tensor, "output.weight") == 0)
            {
              g_assert_true (m->cfg.tied_embeddings);
              g_assert_true (m->output.data == m->tok_embd.data);
            }
          else if (c->drop_tensor != NULL)
            {
              g_assert_true (!m->cfg.qkv_bias && m->layers[1].bq.data == NULL);
              g_assert_false (m->cfg.expert_bias);
              g_assert_null (m->layers[1].router_bias.data);
            }
          else
            g_assert_true (m->cfg.shift_logits);
          continue;
        }
      g_assert_null (m);
      g_assert_nonnull (error);
      g_test_message ("→ %s", error->message);
      if (error->domain != UM_ERROR || error->code != c->code)
        g_error ("expected code %d, got %s %d: %s", c->code, g_quark_to_string (error->domain), error->code,
                 error->message);
      if (!strstr (error->message, c->needle1) || !strstr (error->message, c->needle2))
        g_error ("“%s” does not mention “%s” and “%s”", error->message, c->needle1, c->needle2);
    }
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
  g_test_add_func ("/gguf-model/family-variants", test_family_variants);
  return g_test_run ();
}

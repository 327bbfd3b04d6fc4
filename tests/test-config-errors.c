/* Loading a model folder: every broken file or field gives a GError that
 * names the file and the field; nothing aborts. */
#include <glib/gstdio.h>
#include <string.h>

#include "um-error.h"
#include "um-model.h"
#include "um-test-util.h"

static char *
copy_fixture_named (const char *name)
{
  g_autofree char *src = um_test_data_path (name);
  char *dir = um_test_mkdtemp ();
  um_test_copy_dir (src, dir);
  return dir;
}

static char *
copy_fixture (void)
{
  return copy_fixture_named ("tiny-llada");
}

/* Replaces the first occurrence of @from in @file by @to. */
static void
patch (const char *dir, const char *file, const char *from, const char *to)
{
  g_autofree char *path = g_build_filename (dir, file, NULL);
  g_autofree char *text = NULL;
  g_autoptr(GString) s = NULL;
  char *at;

  g_assert_true (g_file_get_contents (path, &text, NULL, NULL));
  at = strstr (text, from);
  g_assert_nonnull (at);
  s = g_string_new_len (text, at - text);
  g_string_append (s, to);
  g_string_append (s, at + strlen (from));
  um_test_write_file (path, s->str, s->len);
}

/* Replaces the first occurrence of the bytes @from in a binary file by as
 * many bytes @to (a tensor renamed in a safetensors header). */
static void
patch_bytes (const char *dir, const char *file, const char *from, const char *to)
{
  g_autofree char *path = g_build_filename (dir, file, NULL);
  g_autofree char *data = NULL;
  gsize len;
  char *at;

  g_assert_cmpuint (strlen (from), ==, strlen (to));
  g_assert_true (g_file_get_contents (path, &data, &len, NULL));
  at = memmem (data, len, from, strlen (from));
  g_assert_nonnull (at);
  memcpy (at, to, strlen (to));
  um_test_write_file (path, data, (gssize) len);
}

static void
expect_load_error (const char *dir, gint code, const char *needle1, const char *needle2)
{
  g_autoptr(GError) error = NULL;
  UmModel *m = um_model_load (dir, NULL, &error);
  g_assert_null (m);
  g_assert_nonnull (error);
  g_test_message ("→ %s", error->message);
  if (error->domain != UM_ERROR || error->code != code)
    g_error ("expected code %d, got %s %d: %s", code, g_quark_to_string (error->domain), error->code, error->message);
  if (needle1 && !strstr (error->message, needle1))
    g_error ("“%s” does not mention “%s”", error->message, needle1);
  if (needle2 && !strstr (error->message, needle2))
    g_error ("“%s” does not mention “%s”", error->message, needle2);
}

typedef struct {
  const char *file, *from, *to;
  gint code;
  const char *needle1, *needle2;
} Case;

static void
test_config_cases (void)
{
  static const Case cases[] = {
    { "config.json", "\"d_model\": 64,", "", UM_ERROR_CONFIG, "config.json", "d_model" },
    { "config.json", "\"d_model\": 64", "\"d_model\": 66", UM_ERROR_CONFIG, "config.json", "n_heads" },
    { "config.json", "\"n_kv_heads\": 4", "\"n_kv_heads\": 3", UM_ERROR_CONFIG, "config.json", "n_kv_heads" },
    { "config.json", "\"n_layers\": 2", "\"n_layers\": 0", UM_ERROR_CONFIG, "config.json", "n_layers" },
    { "config.json", "\"n_layers\": 2", "\"n_layers\": -3", UM_ERROR_CONFIG, "config.json", "n_layers" },
    { "config.json", "\"n_layers\": 2", "\"n_layers\": \"two\"", UM_ERROR_CONFIG, "config.json", "n_layers" },
    { "config.json", "\"n_layers\": 2", "\"n_layers\": 99999999999", UM_ERROR_CONFIG, "config.json", "n_layers" },
    { "config.json", "\"vocab_size\": 512", "\"vocab_size\": 0", UM_ERROR_CONFIG, "config.json", "vocab_size" },
    { "config.json", "\"mask_token_id\": 508", "\"mask_token_id\": 9999", UM_ERROR_CONFIG, "config.json", "mask_token_id" },
    { "config.json", "\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": -1", UM_ERROR_CONFIG, "config.json", "rms_norm_eps" },
    { "config.json", "\"rope_theta\": 10000.0", "\"rope_theta\": 0", UM_ERROR_CONFIG, "config.json", "rope_theta" },
    { "config.json", "\"include_bias\": false", "\"include_bias\": true", UM_ERROR_UNSUPPORTED, "config.json", "include_bias" },
    { "config.json", "\"block_type\": \"llama\"", "\"block_type\": \"moe\"", UM_ERROR_UNSUPPORTED, "config.json", "block_type" },
    { "config.json", "{", "[", UM_ERROR_FORMAT, "config.json", NULL },
    { "config.json", "\"d_model\": 64,", "\"d_model\": 64", UM_ERROR_FORMAT, "config.json", NULL },
    /* shapes that disagree with the configuration name the tensor */
    { "config.json", "\"mlp_hidden_size\": 160", "\"mlp_hidden_size\": 128", UM_ERROR_CONFIG, "ff_proj", "[160, 64]" },
    { "config.json", "\"n_layers\": 2", "\"n_layers\": 3", UM_ERROR_FORMAT, "blocks.2", "missing" },
    { "generation_config.json", "{", "{{", UM_ERROR_FORMAT, "generation_config.json", NULL },
    { "tokenizer.json", "\"model\"", "\"modell\"", UM_ERROR_FORMAT, "tokenizer.json", NULL },
  };
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autofree char *dir = copy_fixture ();
      g_test_message ("case %u: %s: %s → %s", i, cases[i].file, cases[i].from, cases[i].to);
      patch (dir, cases[i].file, cases[i].from, cases[i].to);
      expect_load_error (dir, cases[i].code, cases[i].needle1, cases[i].needle2);
      um_test_rmtree (dir);
    }
}

/* The other families' config.json keys and tensors: counts of experts
 * that are zero or absurd, more experts per token than experts, a head
 * size RoPE cannot pair, options we do not run, shapes that disagree with
 * the configuration and missing biases, norms or routers, each refused
 * with an error naming what is wrong. */
typedef struct {
  const char *model, *file, *from, *to;
  gint code;
  const char *needle1, *needle2;
} FamilyCase;

static void
test_family_cases (void)
{
  static const FamilyCase cases[] = {
    { "tiny-dream", "config.json", "\"hidden_size\": 64,", "", UM_ERROR_CONFIG, "config.json", "hidden_size" },
    { "tiny-dream", "config.json", "\"intermediate_size\": 128", "\"intermediate_size\": 96",
      UM_ERROR_CONFIG, "mlp.gate_proj", "[96, 64]" },
    { "tiny-dream", "config.json", "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3",
      UM_ERROR_CONFIG, "config.json", "n_kv_heads" },
    { "tiny-dream", "config.json", "\"rope_scaling\": null", "\"rope_scaling\": {\"type\": \"yarn\"}",
      UM_ERROR_UNSUPPORTED, "config.json", "rope_scaling" },
    { "tiny-dream", "config.json", "\"mask_token_id\": 508,", "", UM_ERROR_CONFIG, "config.json", "mask_token_id" },
    { "tiny-dream", "model.safetensors", "layers.1.self_attn.k_proj.bias", "layers.1.self_attn.k_proj.biaz",
      UM_ERROR_FORMAT, "model.layers.1.self_attn.k_proj.bias", "missing" },
    { "tiny-llada-moe", "config.json", "\"num_experts\": 8", "\"num_experts\": 0",
      UM_ERROR_CONFIG, "config.json", "experts is 0" },
    { "tiny-llada-moe", "config.json", "\"num_experts\": 8", "\"num_experts\": 2147483648",
      UM_ERROR_CONFIG, "config.json", "2147483648" },
    { "tiny-llada-moe", "config.json", "\"num_experts\": 8", "\"num_experts\": 99999999999",
      UM_ERROR_CONFIG, "config.json", "num_experts" },
    { "tiny-llada-moe", "config.json", "\"num_experts_per_tok\": 3", "\"num_experts_per_tok\": 9",
      UM_ERROR_CONFIG, "config.json", "experts per token (9)" },
    { "tiny-llada-moe", "config.json", "\"num_experts_per_tok\": 3", "\"num_experts_per_tok\": 0",
      UM_ERROR_CONFIG, "config.json", "experts per token (0)" },
    { "tiny-llada-moe", "config.json", "\"expert_intermediate_size\": 32", "\"expert_intermediate_size\": 16",
      UM_ERROR_CONFIG, "mlp.experts.0.gate_proj", "[16, 64]" },
    { "tiny-llada-moe", "config.json", "\"moe_router_enable_expert_bias\": false",
      "\"moe_router_enable_expert_bias\": true", UM_ERROR_UNSUPPORTED, "config.json", "expert_bias" },
    { "tiny-llada-moe", "config.json", "\"moe_router_score_function\": \"softmax\"",
      "\"moe_router_score_function\": 3", UM_ERROR_CONFIG, "config.json", "moe_router_score_function" },
    { "tiny-llada-moe", "config.json", "\"moe_layer_freq\": [\n  1,\n  1\n ]", "\"moe_layer_freq\": [1, 0]",
      UM_ERROR_UNSUPPORTED, "config.json", "moe_layer_freq" },
    { "tiny-llada-moe", "config.json", "\"moe_layer_freq\": [\n  1,\n  1\n ]", "\"moe_layer_freq\": [1]",
      UM_ERROR_CONFIG, "config.json", "moe_layer_freq" },
    { "tiny-llada-moe", "config.json", "\"partial_rotary_factor\": 1.0", "\"partial_rotary_factor\": 0.5",
      UM_ERROR_UNSUPPORTED, "config.json", "partial_rotary_factor" },
    { "tiny-llada-moe", "model.safetensors", "layers.1.mlp.gate.weight", "layers.1.mlp.gatX.weight",
      UM_ERROR_FORMAT, "model.layers.1.mlp.gate.weight", "missing" },
    { "tiny-llada-moe", "model.safetensors", "layers.1.mlp.experts.7.down_proj", "layers.1.mlp.experts.7.down_proX",
      UM_ERROR_FORMAT, "model.layers.1.mlp.experts.7.down_proj.weight", "missing" },
    { "tiny-llada-moe", "model.safetensors", "layers.0.self_attn.k_norm", "layers.0.self_attn.k_norX",
      UM_ERROR_FORMAT, "model.layers.0.self_attn.k_norm.weight", "missing" },
    { "tiny-rnd1", "config.json", "\"head_dim\": 16", "\"head_dim\": 15", UM_ERROR_CONFIG, "config.json", "even" },
    { "tiny-rnd1", "config.json", "\"head_dim\": 16", "\"head_dim\": 32",
      UM_ERROR_CONFIG, "self_attn.q_proj", "[256, 64]" },
    { "tiny-rnd1", "model.safetensors", "layers.1.self_attn.q_norm", "layers.1.self_attn.q_norX",
      UM_ERROR_FORMAT, "model.layers.1.self_attn.q_norm.weight", "missing" },
    { "tiny-rnd1", "config.json", "\"moe_intermediate_size\": 32", "\"moe_intermediate_size\": 0",
      UM_ERROR_CONFIG, "config.json", "moe_intermediate_size" },
    { "tiny-rnd1", "config.json", "\"num_experts\": 8", "\"num_experts\": 4097",
      UM_ERROR_CONFIG, "config.json", "absurd" },
    { "tiny-rnd1", "config.json", "\"mlp_only_layers\": []", "\"mlp_only_layers\": [0]",
      UM_ERROR_UNSUPPORTED, "config.json", "mlp_only_layers" },
    { "tiny-rnd1", "config.json", "\"model_type\": \"rnd1\"", "\"model_type\": \"mamba\"",
      UM_ERROR_UNSUPPORTED, "config.json", "mamba" },
    /* LLaDA 2: groups that do not split the experts or hold too few, a
     * rotated width RoPE cannot pair, a fused q/k/v of other heads, a
     * shared expert of another width, options we do not run. */
    { "tiny-llada2", "config.json", "\"n_group\": 4", "\"n_group\": 3",
      UM_ERROR_CONFIG, "config.json", "n_group" },
    { "tiny-llada2", "config.json", "\"n_group\": 4", "\"n_group\": 8",
      UM_ERROR_CONFIG, "config.json", "groups (n_group" },
    { "tiny-llada2", "config.json", "\"topk_group\": 2", "\"topk_group\": 5",
      UM_ERROR_CONFIG, "config.json", "topk_group" },
    { "tiny-llada2", "config.json", "\"topk_group\": 2", "\"topk_group\": 1",
      UM_ERROR_CONFIG, "3 experts per token", "topk_group" },
    { "tiny-llada2", "config.json", "\"partial_rotary_factor\": 0.5", "\"partial_rotary_factor\": 0.3125",
      UM_ERROR_CONFIG, "partial_rotary_factor", "rotates 5" },
    { "tiny-llada2", "config.json", "\"partial_rotary_factor\": 0.5", "\"partial_rotary_factor\": 0",
      UM_ERROR_CONFIG, "config.json", "partial_rotary_factor" },
    { "tiny-llada2", "config.json", "\"partial_rotary_factor\": 0.5", "\"partial_rotary_factor\": 1.5",
      UM_ERROR_CONFIG, "config.json", "partial_rotary_factor" },
    { "tiny-llada2", "config.json", "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 1",
      UM_ERROR_CONFIG, "model.layers.0.attention.query_key_value.weight", "[96, 64]" },
    { "tiny-llada2", "config.json", "\"num_shared_experts\": 1", "\"num_shared_experts\": 2",
      UM_ERROR_CONFIG, "mlp.shared_experts.gate_proj", "[64, 64]" },
    { "tiny-llada2", "config.json", "\"first_k_dense_replace\": 1", "\"first_k_dense_replace\": 3",
      UM_ERROR_CONFIG, "config.json", "first_k_dense_replace" },
    { "tiny-llada2", "config.json", "\"first_k_dense_replace\": 1", "\"first_k_dense_replace\": 0",
      UM_ERROR_FORMAT, "model.layers.0.mlp.gate.weight", "missing" },
    { "tiny-llada2", "config.json", "\"use_cache\": false,\n \"mask_token_id\": 507", "\"use_cache\": false",
      UM_ERROR_CONFIG, "mask_token_id", "156895" },
    { "tiny-llada2", "config.json", "\"use_bias\": false", "\"use_bias\": true",
      UM_ERROR_UNSUPPORTED, "config.json", "use_bias" },
    { "tiny-llada2", "config.json", "\"norm_head\": false", "\"norm_head\": true",
      UM_ERROR_UNSUPPORTED, "config.json", "norm_head" },
    { "tiny-llada2", "config.json", "\"score_function\": \"sigmoid\"", "\"score_function\": \"relu\"",
      UM_ERROR_UNSUPPORTED, "config.json", "sigmoid" },
    { "tiny-llada2", "config.json", "\"rope_scaling\": null", "\"rope_scaling\": {\"type\": \"yarn\"}",
      UM_ERROR_UNSUPPORTED, "config.json", "rope_scaling" },
    { "tiny-llada2", "model.safetensors", "layers.1.attention.query_key_value", "layers.1.attention.query_key_valuX",
      UM_ERROR_FORMAT, "model.layers.1.attention.query_key_value.weight", "missing" },
    { "tiny-llada2", "model.safetensors", "layers.1.mlp.shared_experts.up_proj", "layers.1.mlp.shared_experts.up_proX",
      UM_ERROR_FORMAT, "model.layers.1.mlp.shared_experts.up_proj.weight", "missing" },
    { "tiny-llada2", "model.safetensors", "layers.1.attention.key_layernorm", "layers.1.attention.key_layernorX",
      UM_ERROR_FORMAT, "model.layers.1.attention.key_layernorm.weight", "missing" },
    /* A tensor renamed to an output bias (JSON allows the blanks before the colon). */
    { "tiny-llada2", "model.safetensors", "layers.1.attention.query_layernorm.weight\"",
      "layers.0.attention.dense.bias\"            ", UM_ERROR_UNSUPPORTED, "model.layers.0.attention.dense.bias",
      "not supported" },
  };
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autofree char *dir = copy_fixture_named (cases[i].model);
      g_test_message ("case %u: %s %s: %s → %s", i, cases[i].model, cases[i].file, cases[i].from, cases[i].to);
      if (g_str_equal (cases[i].file, "model.safetensors"))
        patch_bytes (dir, cases[i].file, cases[i].from, cases[i].to);
      else
        patch (dir, cases[i].file, cases[i].from, cases[i].to);
      /* RND1's architectures name says RND1 too. */
      if (strstr (cases[i].to, "mamba") != NULL)
        patch (dir, "config.json", "\"RND1\"", "\"Mamba\"");
      expect_load_error (dir, cases[i].code, cases[i].needle1, cases[i].needle2);
      um_test_rmtree (dir);
    }
}

static void
test_missing_files (void)
{
  static const char *const files[] = { "config.json", "tokenizer.json", "model.safetensors" };
  for (guint i = 0; i < G_N_ELEMENTS (files); i++)
    {
      g_autofree char *dir = copy_fixture ();
      g_autofree char *path = g_build_filename (dir, files[i], NULL);
      g_unlink (path);
      expect_load_error (dir, UM_ERROR_IO, files[i], NULL);
      um_test_rmtree (dir);
    }
  expect_load_error ("/nonexistent/model", UM_ERROR_IO, "/nonexistent/model", NULL);
}

/* A truncated weight file is caught at load, not at the first forward pass. */
static void
test_truncated_weights (void)
{
  g_autofree char *dir = copy_fixture ();
  g_autofree char *path = g_build_filename (dir, "model.safetensors", NULL);
  g_autofree char *text = NULL;
  gsize len;

  g_assert_true (g_file_get_contents (path, &text, &len, NULL));
  um_test_write_file (path, text, len - 1000);
  expect_load_error (dir, UM_ERROR_FORMAT, "model.safetensors", "truncated");
  um_test_rmtree (dir);
}

/* Optional ids come from the tokenizer when config files lack them. */
static void
test_special_ids (void)
{
  g_autofree char *dir = copy_fixture ();
  g_autoptr(GError) error = NULL;
  g_autoptr(UmModel) m = um_model_load (dir, NULL, &error);

  g_assert_no_error (error);
  g_assert_cmpint (m->cfg.mask_id, ==, 508);
  g_assert_cmpint (m->cfg.eos_id, ==, 507);
  g_assert_cmpint (m->cfg.bos_id, ==, 506);
  g_assert_cmpint (m->cfg.eot_id, ==, 511);
  g_assert_cmpuint (m->cfg.head_dim, ==, 16);
  g_assert_cmpuint (um_model_config_n_params (&m->cfg), ==, 2 * 512 * 64 + 64 + 2 * (64 * 2 + 4 * 64 * 64 + 3 * 64 * 160));
  g_clear_pointer (&m, um_model_free);

  patch (dir, "generation_config.json", "\"bos_token_id\": 506", "\"bos_token_id\": null");
  m = um_model_load (dir, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpint (m->cfg.bos_id, ==, 506);
  um_test_rmtree (dir);
}

/* Every JSON file of a model folder, written with each hostile text: the
 * load fails with a format error naming the file, and does not crash. */
static void
test_hostile_json (void)
{
  static const char *const files[] = { "config.json", "generation_config.json", "tokenizer.json",
                                       "tokenizer_config.json", "model.safetensors.index.json" };
  g_autoptr(GPtrArray) cases = um_test_hostile_json ();

  for (guint f = 0; f < G_N_ELEMENTS (files); f++)
    for (guint i = 0; i < cases->len; i++)
      {
        const UmTestHostileJson *h = g_ptr_array_index (cases, i);
        g_autofree char *dir = copy_fixture ();
        g_autofree char *path = g_build_filename (dir, files[f], NULL);

        g_test_message ("%s: %s", files[f], h->name);
        /* tokenizer_config.json is read for the BOS id only when the
         * configuration has none. */
        if (g_str_equal (files[f], "tokenizer_config.json"))
          patch (dir, "generation_config.json", "\"bos_token_id\": 506", "\"bos_token_id\": null");
        um_test_write_file (path, h->text, (gssize) h->len);
        expect_load_error (dir, UM_ERROR_FORMAT, files[f], h->needle);
        um_test_rmtree (dir);
      }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/config/cases", test_config_cases);
  g_test_add_func ("/config/family-cases", test_family_cases);
  g_test_add_func ("/config/missing-files", test_missing_files);
  g_test_add_func ("/config/truncated-weights", test_truncated_weights);
  g_test_add_func ("/config/special-ids", test_special_ids);
  g_test_add_func ("/config/hostile-json", test_hostile_json);
  return g_test_run ();
}

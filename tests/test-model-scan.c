/* Finding models on disk: a fake Hugging Face cache with a safetensors
 * snapshot, a GGUF repository, a broken snapshot and a non-LLaDA GGUF, plus
 * recent paths first and without duplicates; snapshots and GGUFs of every
 * family (Dream without tokenizer.json, LLaDA-MoE, RND1, LLaDA 2) found with
 * their family named. */
#include <glib/gstdio.h>
#include <string.h>

#include "um-gguf.h"
#include "um-model-scan.h"
#include "um-test-util.h"

/* The fixtures' config.json (../shared/fixtures/tiny-llada-moe and
 * tiny-rnd1), as their families' checkpoints write them. */
static const char llada_moe_config[] =
  "{\"architectures\": [\"LLaDAMoEModelLM\"], \"model_type\": \"llada\","
  " \"vocab_size\": 512, \"hidden_size\": 64, \"dense_intermediate_size\": 128,"
  " \"expert_intermediate_size\": 32, \"shared_expert_intermediate_size\": null,"
  " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 4,"
  " \"hidden_act\": \"silu\", \"max_position_embeddings\": 8192, \"rms_norm_eps\": 1e-05,"
  " \"pad_token_id\": 510, \"bos_token_id\": null, \"eos_token_id\": 510,"
  " \"tie_word_embeddings\": false, \"rope_theta\": 50000.0, \"partial_rotary_factor\": 1.0,"
  " \"rope_scaling\": null, \"attention_bias\": false, \"clip_qkv\": null,"
  " \"num_experts_per_tok\": 3, \"num_experts\": 8, \"norm_topk_prob\": null,"
  " \"qk_layernorm\": true, \"moe_layer_freq\": [1, 1], \"moe_router_enable_expert_bias\": false,"
  " \"moe_router_score_function\": \"softmax\", \"routed_scaling_factor\": 1,"
  " \"router_num_group\": null, \"router_topk_group\": null, \"mask_token_id\": 511,"
  " \"torch_dtype\": \"float32\"}";

/* @MODEL_TYPE@ is "rnd1" or "RND1" (both are in use). */
static const char rnd1_config[] =
  "{\"architectures\": [\"RND1\"], \"model_type\": \"@MODEL_TYPE@\", \"attention_bias\": false,"
  " \"decoder_sparse_step\": 1, \"eos_token_id\": 503, \"head_dim\": 16, \"hidden_act\": \"silu\","
  " \"hidden_size\": 64, \"intermediate_size\": 96, \"max_position_embeddings\": 40960,"
  " \"mlp_only_layers\": [], \"moe_intermediate_size\": 32, \"norm_topk_prob\": true,"
  " \"num_attention_heads\": 8, \"num_experts\": 8, \"num_experts_per_tok\": 3,"
  " \"num_hidden_layers\": 2, \"num_key_value_heads\": 2, \"pad_token_id\": 501,"
  " \"rms_norm_eps\": 1e-06, \"rope_scaling\": false, \"rope_theta\": 1000000.0,"
  " \"sliding_window\": false, \"tie_word_embeddings\": false, \"use_sliding_window\": false,"
  " \"vocab_size\": 512, \"is_causal\": false, \"num_diffusion_steps\": 256,"
  " \"mask_token_id\": 506, \"torch_dtype\": \"float32\"}";

static char *
make_snapshot (const char *hub, const char *repo_dir)
{
  char *snap = g_build_filename (hub, repo_dir, "snapshots", "0123abcd", NULL);
  g_mkdir_with_parents (snap, 0755);
  return snap;
}

static const UmModelEntry *
find (GPtrArray *entries, const char *name)
{
  for (guint i = 0; i < entries->len; i++)
    {
      const UmModelEntry *e = g_ptr_array_index (entries, i);
      if (g_str_equal (e->name, name))
        return e;
    }
  return NULL;
}

static void
test_scan (void)
{
  g_autofree char *root = um_test_mkdtemp ();
  g_autofree char *hub = g_build_filename (root, "hub", NULL);
  g_autofree char *tiny = um_test_data_path ("tiny-llada");
  g_autofree char *gguf_src = um_test_data_path ("tiny-llada-q4_0.gguf");
  g_autofree char *snap1 = make_snapshot (hub, "models--GSAI-ML--LLaDA-Tiny");
  g_autofree char *snap2 = make_snapshot (hub, "models--someone--LLaDA-GGUF");
  g_autofree char *snap3 = make_snapshot (hub, "models--broken--Model");
  g_autofree char *gguf = g_build_filename (snap2, "llada-q4_0.gguf", NULL);
  g_autofree char *other = g_build_filename (snap2, "not-llada.gguf", NULL);
  g_autofree char *broken_cfg = g_build_filename (snap3, "config.json", NULL);
  g_autofree char *bytes = NULL;
  g_autoptr(GPtrArray) entries = NULL;
  const UmModelEntry *e;
  gsize len;
  char *at;

  um_test_copy_dir (tiny, snap1);
  g_assert_true (g_file_get_contents (gguf_src, &bytes, &len, NULL));
  um_test_write_file (gguf, bytes, len);
  at = memmem (bytes, len, "llada", 5);
  memcpy (at, "llama", 5);
  um_test_write_file (other, bytes, len);
  um_test_write_file (broken_cfg, "{ not json", -1);

  g_setenv ("HF_HUB_CACHE", hub, TRUE);
  {
    g_autofree char *dir = um_model_scan_hf_cache_dir ();
    g_assert_cmpstr (dir, ==, hub);
  }
  {
    const char *recent[] = { gguf, "/does/not/exist", NULL };
    entries = um_model_scan (recent, NULL);
  }

  /* The recent GGUF comes first and is not listed twice. */
  g_assert_cmpuint (entries->len, ==, 4);
  e = g_ptr_array_index (entries, 0);
  g_assert_true (e->recent);
  g_assert_cmpstr (e->path, ==, gguf);
  g_assert_true (e->loadable);
  g_assert_cmpstr (e->family, ==, "LLaDA");

  e = find (entries, "GSAI-ML/LLaDA-Tiny");
  g_assert_nonnull (e);
  g_assert_true (e->loadable);
  g_assert_cmpstr (e->format, ==, "safetensors");
  g_assert_cmpstr (e->family, ==, "LLaDA");
  g_assert_cmpuint (e->size, ==, 640256);

  e = find (entries, "someone/LLaDA-GGUF · not-llada.gguf");
  g_assert_nonnull (e);
  g_assert_false (e->loadable);
  g_assert_nonnull (strstr (e->problem, "llama"));

  e = find (entries, "broken/Model");
  g_assert_nonnull (e);
  g_assert_false (e->loadable);
  g_assert_nonnull (strstr (e->problem, "config.json"));

  g_unsetenv ("HF_HUB_CACHE");
  um_test_rmtree (root);
}

static void
test_default_cache_dir (void)
{
  g_autofree char *dir = NULL;
  g_unsetenv ("HF_HUB_CACHE");
  g_setenv ("HF_HOME", "/opt/hf", TRUE);
  dir = um_model_scan_hf_cache_dir ();
  g_assert_cmpstr (dir, ==, "/opt/hf/hub");
  g_unsetenv ("HF_HOME");
}

/* A GGUF with only general.architecture: all the probe reads. */
static void
write_gguf_of_arch (const char *path, const char *arch)
{
  g_autoptr(UmGgufWriter) w = um_gguf_writer_new ();
  g_autoptr(GError) error = NULL;

  um_gguf_writer_set_string (w, "general.architecture", arch);
  g_assert_true (um_gguf_writer_begin (w, path, &error));
  g_assert_no_error (error);
  g_assert_true (um_gguf_writer_finish (w, &error));
  g_assert_no_error (error);
}

typedef enum { TOKENIZER_JSON, TOKENIZER_SLOW, TOKENIZER_NONE } Tokenizer;

static void
copy_data_file (const char *data_dir, const char *name, const char *to_dir)
{
  g_autofree char *from = g_build_filename (data_dir, name, NULL);
  g_autofree char *to = g_build_filename (to_dir, name, NULL);
  g_autofree char *bytes = NULL;
  gsize len;

  g_assert_true (g_file_get_contents (from, &bytes, &len, NULL));
  um_test_write_file (to, bytes, len);
}

/* A snapshot of @config (NULL: tiny-dream's) whose weights are tiny-dream's
 * (the probe reads only the safetensors header), with @tokenizer:
 * tokenizer.json, or vocab.json + merges.txt only as real Dream ships, or none. */
static void
make_family_snapshot (const char *hub, const char *repo_dir, const char *config, Tokenizer tokenizer)
{
  g_autofree char *snap = make_snapshot (hub, repo_dir);
  g_autofree char *dream = um_test_data_path ("tiny-dream");
  g_autofree char *config_path = g_build_filename (snap, "config.json", NULL);

  copy_data_file (dream, "model.safetensors", snap);
  if (tokenizer == TOKENIZER_JSON)
    copy_data_file (dream, "tokenizer.json", snap);
  else if (tokenizer == TOKENIZER_SLOW)
    {
      copy_data_file (dream, "vocab.json", snap);
      copy_data_file (dream, "merges.txt", snap);
    }
  if (config == NULL)
    copy_data_file (dream, "config.json", snap);
  else
    um_test_write_file (config_path, config, -1);
}

static void
assert_family (GPtrArray *entries, const char *name, const char *family)
{
  const UmModelEntry *e = find (entries, name);

  g_assert_nonnull (e);
  if (!e->loadable)
    g_test_message ("%s: %s", name, e->problem);
  g_assert_true (e->loadable);
  g_assert_cmpstr (e->family, ==, family);
}

static void
test_families (void)
{
  g_autofree char *root = um_test_mkdtemp ();
  g_autofree char *hub = g_build_filename (root, "hub", NULL);
  g_autofree char *ggufs = make_snapshot (hub, "models--someone--dllm-GGUF");
  g_auto(GStrv) rnd1_parts = g_strsplit (rnd1_config, "@MODEL_TYPE@", 2);
  g_autofree char *rnd1_lower = g_strjoinv ("rnd1", rnd1_parts);
  g_autofree char *rnd1_upper = g_strjoinv ("RND1", rnd1_parts);
  g_autofree char *llada2_config_path = um_test_data_path ("tiny-llada2/config.json");
  g_autofree char *llada2_config = um_test_read_file (llada2_config_path);
  g_autoptr(GPtrArray) entries = NULL;
  static const char *const archs[][2] = {
    { "dream", "Dream" }, { "llada-moe", "LLaDA-MoE" }, { "rnd1", "RND1" }, { "llada", "LLaDA" },
    { "llada2", "LLaDA 2" },
  };
  const UmModelEntry *e;

  /* Dream as it ships: vocab.json + merges.txt, no tokenizer.json. */
  make_family_snapshot (hub, "models--Dream-org--Dream-Tiny", NULL, TOKENIZER_SLOW);
  /* No tokenizer at all: found, named, not loadable. */
  make_family_snapshot (hub, "models--Dream-org--Dream-NoTokenizer", NULL, TOKENIZER_NONE);
  make_family_snapshot (hub, "models--inclusionAI--LLaDA-MoE-Tiny", llada_moe_config, TOKENIZER_JSON);
  make_family_snapshot (hub, "models--radicalnumerics--RND1-Tiny", rnd1_lower, TOKENIZER_JSON);
  make_family_snapshot (hub, "models--someone--RND1-Upper", rnd1_upper, TOKENIZER_JSON);
  make_family_snapshot (hub, "models--inclusionAI--LLaDA2.0-Tiny", llada2_config, TOKENIZER_JSON);
  for (guint i = 0; i < G_N_ELEMENTS (archs); i++)
    {
      g_autofree char *name = g_strdup_printf ("%s.gguf", archs[i][0]);
      g_autofree char *path = g_build_filename (ggufs, name, NULL);
      write_gguf_of_arch (path, archs[i][0]);
    }
  {
    g_autofree char *path = g_build_filename (ggufs, "qwen2.gguf", NULL);
    write_gguf_of_arch (path, "qwen2");
  }

  g_setenv ("HF_HUB_CACHE", hub, TRUE);
  entries = um_model_scan (NULL, NULL);
  g_assert_cmpuint (entries->len, ==, 12);

  assert_family (entries, "Dream-org/Dream-Tiny", "Dream");
  assert_family (entries, "inclusionAI/LLaDA-MoE-Tiny", "LLaDA-MoE");
  assert_family (entries, "radicalnumerics/RND1-Tiny", "RND1");
  assert_family (entries, "someone/RND1-Upper", "RND1");
  assert_family (entries, "inclusionAI/LLaDA2.0-Tiny", "LLaDA 2");
  for (guint i = 0; i < G_N_ELEMENTS (archs); i++)
    {
      g_autofree char *name = g_strdup_printf ("someone/dllm-GGUF · %s.gguf", archs[i][0]);
      assert_family (entries, name, archs[i][1]);
    }

  e = find (entries, "Dream-org/Dream-NoTokenizer");
  g_assert_nonnull (e);
  g_assert_false (e->loadable);
  g_assert_cmpstr (e->family, ==, "Dream");
  g_assert_nonnull (strstr (e->problem, "merges.txt"));

  e = find (entries, "someone/dllm-GGUF · qwen2.gguf");
  g_assert_nonnull (e);
  g_assert_false (e->loadable);
  g_assert_null (e->family);
  g_assert_nonnull (strstr (e->problem, "qwen2"));

  g_unsetenv ("HF_HUB_CACHE");
  um_test_rmtree (root);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/model-scan/scan", test_scan);
  g_test_add_func ("/model-scan/default-cache-dir", test_default_cache_dir);
  g_test_add_func ("/model-scan/families", test_families);
  return g_test_run ();
}

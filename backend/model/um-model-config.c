#include "um-model-config.h"

#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

#include "um-error.h"
#include "um-json.h"

/* Upper bounds far above any real model; they catch absurd values before
 * they turn into absurd allocations. */
#define MAX_DIM      (1u << 20)
#define MAX_LAYERS   1024u
#define MAX_VOCAB    (1u << 24)
#define MAX_SEQ      (1u << 20)
#define MAX_EXPERTS  4096u

/* The id LLaDA2MoeModelLM.generate () masks with when the config names
 * none (llama.cpp's converters hard-code it for the Ling vocabulary). */
#define LING_MASK_ID 156895

static const UmArchInfo arch_infos[UM_ARCH_N] = {
  [UM_ARCH_LLADA] = {
    .arch = UM_ARCH_LLADA, .name = "LLaDA", .gguf_arch = "llada", .shift_logits = FALSE,
    .schedule = UM_SCHEDULE_BLOCK,
    .qkv_bias = UM_FAMILY_NEVER, .head_dim_fixed = TRUE, .gguf_rope_interleaved = TRUE,
    .eot_token = "<|eot_id|>", .hf_mask_id = -1,
    .hf_names = &um_weight_names_olmo, .gguf_names = &um_weight_names_gguf,
  },
  [UM_ARCH_DREAM] = {
    .arch = UM_ARCH_DREAM, .name = "Dream", .gguf_arch = "dream", .shift_logits = TRUE,
    .schedule = UM_SCHEDULE_TIMESTEP,
    .qkv_bias = UM_FAMILY_ALWAYS,
    .eot_token = "<|im_end|>", .hf_mask_id = -1,
    .hf_names = &um_weight_names_hf, .gguf_names = &um_weight_names_gguf,
  },
  [UM_ARCH_LLADA_MOE] = {
    .arch = UM_ARCH_LLADA_MOE, .name = "LLaDA-MoE", .gguf_arch = "llada-moe", .shift_logits = FALSE,
    .schedule = UM_SCHEDULE_BLOCK,
    .qkv_bias = UM_FAMILY_BY_FILE, .qk_norm = TRUE, .hf_qk_norm_key = "qk_layernorm",
    /* Its upstream code never renormalises (its released config says null). */
    .experts = TRUE, .router_norm = FALSE,
    .eot_token = "<|role_end|>", .hf_mask_id = LING_MASK_ID,
    .hf_names = &um_weight_names_hf, .gguf_names = &um_weight_names_gguf,
  },
  [UM_ARCH_RND1] = {
    .arch = UM_ARCH_RND1, .name = "RND1", .gguf_arch = "rnd1", .shift_logits = TRUE,
    .schedule = UM_SCHEDULE_ENTROPY,
    .qkv_bias = UM_FAMILY_BY_FILE, .qk_norm = TRUE,
    /* Qwen3-MoE's rule: renormalised. */
    .experts = TRUE, .router_norm = TRUE,
    .eot_token = "<|im_end|>", .hf_mask_id = -1,
    .hf_names = &um_weight_names_hf, .gguf_names = &um_weight_names_gguf,
  },
  [UM_ARCH_LLADA2] = {
    .arch = UM_ARCH_LLADA2, .name = "LLaDA 2", .gguf_arch = "llada2", .shift_logits = FALSE,
    .schedule = UM_SCHEDULE_BLOCK_CAUSAL,
    .qkv_bias = UM_FAMILY_BY_FILE, .qk_norm = TRUE, .hf_qk_norm_key = "use_qk_norm",
    .rope_partial = TRUE, .block_causal = TRUE,
    /* The reference gate renormalises. */
    .experts = TRUE, .router_norm = TRUE,
    .eot_token = "<|role_end|>", .hf_mask_id = LING_MASK_ID,
    .hf_names = &um_weight_names_llada2_hf, .gguf_names = &um_weight_names_llada2_gguf,
  },
};

const UmArchInfo *
um_arch_info (UmArch arch)
{
  return &arch_infos[(guint) arch < UM_ARCH_N ? arch : um_arch_fallback ()];
}

UmArch
um_arch_fallback (void)
{
  return UM_ARCH_LLADA;
}

guint
um_arch_count (void)
{
  return UM_ARCH_N;
}

gboolean
um_arch_from_name (const char *name, UmArch *out)
{
  for (guint i = 0; name != NULL && i < UM_ARCH_N; i++)
    if (g_str_equal (arch_infos[i].name, name))
      {
        *out = (UmArch) i;
        return TRUE;
      }
  return FALSE;
}

gboolean
um_arch_from_gguf (const char *gguf_arch, UmArch *out)
{
  for (guint i = 0; gguf_arch != NULL && i < UM_ARCH_N; i++)
    if (g_str_equal (arch_infos[i].gguf_arch, gguf_arch))
      {
        *out = arch_infos[i].arch;
        return TRUE;
      }
  return FALSE;
}

/* Sets *@root to the parsed file (the caller frees it) and returns its
 * object. A missing optional file is NULL without an error. */
static JsonObject *
load_object (const char *path, const char *file, gboolean required, JsonNode **root, GError **error)
{
  g_autoptr(GError) local_error = NULL;

  *root = um_json_parse_file (path, file, NULL, &local_error);
  if (*root == NULL)
    {
      if (!um_json_error_is_missing (local_error))
        g_propagate_error (error, g_steal_pointer (&local_error));
      else if (required)
        g_set_error (error, UM_ERROR, UM_ERROR_IO, "%s: missing (looked for %s)", file, path);
      return NULL;
    }
  return um_json_root_object (*root, file, error);
}

typedef enum { OPTIONAL, REQUIRED } Need;

/* Integer field: absent (and optional) leaves *out untouched. null counts as absent. */
static gboolean
get_int (JsonObject *obj, const char *file, const char *key, Need need,
         gint64 min, gint64 max, gint64 *out, GError **error)
{
  JsonNode *node = json_object_get_member (obj, key);
  gint64 v;

  if (node == NULL || JSON_NODE_HOLDS_NULL (node))
    {
      if (need == REQUIRED)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_CONFIG, "%s: “%s” is missing", file, key);
          return FALSE;
        }
      return TRUE;
    }
  if (JSON_NODE_TYPE (node) != JSON_NODE_VALUE || json_node_get_value_type (node) != G_TYPE_INT64)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_CONFIG, "%s: “%s” is not an integer", file, key);
      return FALSE;
    }
  v = json_node_get_int (node);
  if (v < min || v > max)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_CONFIG,
                   "%s: “%s” is %" G_GINT64_FORMAT ", outside %" G_GINT64_FORMAT "…%" G_GINT64_FORMAT,
                   file, key, v, min, max);
      return FALSE;
    }
  *out = v;
  return TRUE;
}

static gboolean
get_double (JsonObject *obj, const char *file, const char *key, Need need,
            double *out, GError **error)
{
  JsonNode *node = json_object_get_member (obj, key);
  GType t;

  if (node == NULL || JSON_NODE_HOLDS_NULL (node))
    {
      if (need == REQUIRED)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_CONFIG, "%s: “%s” is missing", file, key);
          return FALSE;
        }
      return TRUE;
    }
  t = JSON_NODE_TYPE (node) == JSON_NODE_VALUE ? json_node_get_value_type (node) : G_TYPE_INVALID;
  if (t == G_TYPE_DOUBLE)
    *out = json_node_get_double (node);
  else if (t == G_TYPE_INT64)
    *out = (double) json_node_get_int (node);
  else
    {
      g_set_error (error, UM_ERROR, UM_ERROR_CONFIG, "%s: “%s” is not a number", file, key);
      return FALSE;
    }
  return TRUE;
}

static gboolean
get_bool (JsonObject *obj, const char *key, gboolean fallback)
{
  JsonNode *node = json_object_get_member (obj, key);
  if (node == NULL || JSON_NODE_TYPE (node) != JSON_NODE_VALUE
      || json_node_get_value_type (node) != G_TYPE_BOOLEAN)
    return fallback;
  return json_node_get_boolean (node);
}

/* Options of the OLMo-style config that would change the forward pass: refuse
 * the ones we do not implement rather than computing something else. */
static gboolean
check_unsupported (JsonObject *obj, const char *file, GError **error)
{
  static const struct { const char *key; gboolean bad_if; } flags[] = {
    { "include_bias", TRUE }, { "include_qkv_bias", TRUE }, { "alibi", TRUE },
    { "scale_logits", TRUE }, { "input_emb_norm", TRUE }, { "attention_layer_norm", TRUE },
    { "rope", FALSE },
  };
  static const struct { const char *key; const char *want; } strings[] = {
    { "block_type", "llama" }, { "activation_type", "silu" }, { "layer_norm_type", "rms" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (flags); i++)
    {
      JsonNode *node = json_object_get_member (obj, flags[i].key);
      if (node != NULL && JSON_NODE_TYPE (node) == JSON_NODE_VALUE
          && json_node_get_value_type (node) == G_TYPE_BOOLEAN
          && json_node_get_boolean (node) == flags[i].bad_if)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "%s: “%s”: %s is not supported",
                       file, flags[i].key, flags[i].bad_if ? "true" : "false");
          return FALSE;
        }
    }
  for (guint i = 0; i < G_N_ELEMENTS (strings); i++)
    {
      JsonNode *node = json_object_get_member (obj, strings[i].key);
      if (node != NULL && JSON_NODE_TYPE (node) == JSON_NODE_VALUE
          && json_node_get_value_type (node) == G_TYPE_STRING
          && !g_str_equal (json_node_get_string (node), strings[i].want))
        {
          g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "%s: “%s”: “%s” is not supported (only “%s”)",
                       file, strings[i].key, json_node_get_string (node), strings[i].want);
          return FALSE;
        }
    }
  return TRUE;
}

/* An id: an integer, or (generation_config.json may list several end ids)
 * the first integer of an array. Absent or null leaves *out untouched. */
static gboolean
get_id (JsonObject *obj, const char *file, const char *key, gint64 *out, GError **error)
{
  JsonNode *node = json_object_get_member (obj, key);

  if (node != NULL && JSON_NODE_TYPE (node) == JSON_NODE_ARRAY)
    {
      JsonArray *a = json_node_get_array (node);
      JsonNode *first = json_array_get_length (a) > 0 ? json_array_get_element (a, 0) : NULL;
      gint64 v;

      if (first == NULL || JSON_NODE_TYPE (first) != JSON_NODE_VALUE
          || json_node_get_value_type (first) != G_TYPE_INT64
          || (v = json_node_get_int (first)) < 0 || v > MAX_VOCAB)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_CONFIG, "%s: “%s” is not a token id or a list of them",
                       file, key);
          return FALSE;
        }
      *out = v;
      return TRUE;
    }
  return get_int (obj, file, key, OPTIONAL, 0, MAX_VOCAB, out, error);
}

/* A string field: absent or null leaves *out untouched. */
static gboolean
get_string (JsonObject *obj, const char *file, const char *key, const char **out, GError **error)
{
  JsonNode *node = json_object_get_member (obj, key);

  if (node == NULL || JSON_NODE_HOLDS_NULL (node))
    return TRUE;
  if (JSON_NODE_TYPE (node) != JSON_NODE_VALUE || json_node_get_value_type (node) != G_TYPE_STRING)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_CONFIG, "%s: “%s” is not a string", file, key);
      return FALSE;
    }
  *out = json_node_get_string (node);
  return TRUE;
}

/* Whether @obj's "architectures" array holds a name starting with @prefix. */
static gboolean
has_architecture (JsonObject *obj, const char *prefix)
{
  JsonNode *node = json_object_get_member (obj, "architectures");
  JsonArray *a;

  if (node == NULL || JSON_NODE_TYPE (node) != JSON_NODE_ARRAY)
    return FALSE;
  a = json_node_get_array (node);
  for (guint i = 0; i < json_array_get_length (a); i++)
    {
      JsonNode *e = json_array_get_element (a, i);
      if (JSON_NODE_TYPE (e) == JSON_NODE_VALUE && json_node_get_value_type (e) == G_TYPE_STRING
          && g_str_has_prefix (json_node_get_string (e), prefix))
        return TRUE;
    }
  return FALSE;
}

/* The family of a config.json. LLaDA and LLaDA-MoE both say "llada": the
 * MoE one has Hugging Face (not OLMo) keys and experts. */
static gboolean
detect_arch (JsonObject *obj, const char *file, UmArch *arch, GError **error)
{
  const char *type = NULL;

  if (!get_string (obj, file, "model_type", &type, error))
    return FALSE;
  if (g_strcmp0 (type, "llada2_moe") == 0 || has_architecture (obj, "LLaDA2Moe"))
    *arch = UM_ARCH_LLADA2;
  else if (has_architecture (obj, "LLaDAMoE") || g_strcmp0 (type, "lladamoe") == 0
      || g_strcmp0 (type, "llada_moe") == 0
      || (g_strcmp0 (type, "llada") == 0 && !json_object_has_member (obj, "d_model")
          && json_object_has_member (obj, "num_experts")))
    *arch = UM_ARCH_LLADA_MOE;
  else if (g_strcmp0 (type, "Dream") == 0 || g_strcmp0 (type, "dream") == 0 || has_architecture (obj, "Dream"))
    *arch = UM_ARCH_DREAM;
  else if (g_strcmp0 (type, "rnd1") == 0 || has_architecture (obj, "RND1"))
    *arch = UM_ARCH_RND1;
  else if (type == NULL || g_str_equal (type, "llada") || json_object_has_member (obj, "d_model"))
    *arch = UM_ARCH_LLADA;
  else
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                   "%s: “model_type” is “%s”; Unmask runs LLaDA, Dream, LLaDA-MoE, RND1 and LLaDA 2 models",
                   file, type);
      return FALSE;
    }
  return TRUE;
}

/* LLaDA-8B / 1.5: OLMo's keys. */
static gboolean
load_olmo (UmModelConfig *cfg, JsonObject *obj, JsonObject *gen, const char *file, GError **error)
{
  gint64 n_layers = 0, d_model = 0, n_heads = 0, n_kv = 0, mlp = 0, vocab = 0, emb = 0;
  gint64 max_seq = 4096, mask = 0, eos = 0, pad = -1, bos = -1;
  double theta = 10000.0, eps = 1e-5;

  if (!check_unsupported (obj, file, error))
    return FALSE;
  if (!get_int (obj, file, "n_layers", REQUIRED, 1, MAX_LAYERS, &n_layers, error)
      || !get_int (obj, file, "d_model", REQUIRED, 1, MAX_DIM, &d_model, error)
      || !get_int (obj, file, "n_heads", REQUIRED, 1, MAX_DIM, &n_heads, error)
      || !get_int (obj, file, "mlp_hidden_size", REQUIRED, 1, MAX_DIM, &mlp, error)
      || !get_int (obj, file, "vocab_size", REQUIRED, 1, MAX_VOCAB, &vocab, error)
      || !get_int (obj, file, "mask_token_id", REQUIRED, 0, MAX_VOCAB, &mask, error)
      || !get_int (obj, file, "eos_token_id", REQUIRED, 0, MAX_VOCAB, &eos, error)
      || !get_int (obj, file, "max_sequence_length", OPTIONAL, 1, MAX_SEQ, &max_seq, error)
      || !get_int (obj, file, "pad_token_id", OPTIONAL, 0, MAX_VOCAB, &pad, error)
      || !get_double (obj, file, "rope_theta", OPTIONAL, &theta, error)
      || !get_double (obj, file, "rms_norm_eps", OPTIONAL, &eps, error))
    return FALSE;
  n_kv = n_heads;
  emb = vocab;
  /* n_kv_heads may be null (= n_heads); multi_query_attention true means 1. */
  if (get_bool (obj, "multi_query_attention", FALSE))
    n_kv = 1;
  if (!get_int (obj, file, "n_kv_heads", OPTIONAL, 1, MAX_DIM, &n_kv, error)
      || !get_int (obj, file, "embedding_size", OPTIONAL, 1, MAX_VOCAB, &emb, error))
    return FALSE;
  if (gen != NULL
      && !get_int (gen, "generation_config.json", "bos_token_id", OPTIONAL, 0, MAX_VOCAB, &bos, error))
    return FALSE;

  cfg->n_layers = n_layers;
  cfg->d_model = d_model;
  cfg->n_heads = n_heads;
  cfg->n_kv_heads = n_kv;
  cfg->head_dim = d_model % n_heads == 0 ? d_model / n_heads : 0;
  cfg->rope_dim = cfg->head_dim;
  cfg->mlp_hidden = mlp;
  /* embedding_size may pad vocab_size; the tensors have embedding_size rows. */
  cfg->vocab_size = MAX (vocab, emb);
  cfg->max_seq_len = max_seq;
  cfg->rope_theta = theta;
  cfg->rms_eps = eps;
  cfg->tied_embeddings = get_bool (obj, "weight_tying", FALSE);
  cfg->mask_id = mask;
  cfg->eos_id = eos;
  cfg->pad_id = pad >= 0 ? pad : eos;
  cfg->bos_id = bos;
  return TRUE;
}

/* A key whose presence with another value than the neutral one changes the
 * forward pass in a way we do not implement. */
static gboolean
refuse_if (JsonObject *obj, const char *file, const char *key, gboolean refused, GError **error)
{
  if (refused)
    g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "%s: “%s” is not supported (only %s)", file, key,
                 g_str_equal (key, "moe_router_score_function") || g_str_equal (key, "score_function")
                 ? "“softmax” or “sigmoid”"
                 : g_str_equal (key, "moe_layer_freq") ? "dense layers first, then expert layers"
                 : g_str_equal (key, "partial_rotary_factor") ? "1"
                 : g_str_equal (key, "decoder_sparse_step") ? "1"
                 : g_str_equal (key, "use_bias") ? "false: the attention output has no bias"
                 : "false, null or empty");
  return !refused;
}

static gboolean
node_is_set (JsonObject *obj, const char *key)
{
  JsonNode *n = json_object_get_member (obj, key);
  if (n == NULL || JSON_NODE_HOLDS_NULL (n))
    return FALSE;
  if (JSON_NODE_TYPE (n) == JSON_NODE_VALUE && json_node_get_value_type (n) == G_TYPE_BOOLEAN)
    return json_node_get_boolean (n);
  if (JSON_NODE_TYPE (n) == JSON_NODE_ARRAY)
    return json_array_get_length (json_node_get_array (n)) > 0;
  if (JSON_NODE_TYPE (n) == JSON_NODE_OBJECT)
    return json_object_get_size (json_node_get_object (n)) > 0;
  return TRUE;
}

/* LLaDA-MoE's moe_layer_freq: 1 for an expert layer. Dense layers must
 * come first (n_dense_leading), as the forward assumes. */
static gboolean
read_layer_freq (JsonObject *obj, const char *file, guint n_layers, guint *n_dense, GError **error)
{
  JsonNode *node = json_object_get_member (obj, "moe_layer_freq");
  JsonArray *a;
  gboolean seen_moe = FALSE;

  *n_dense = 0;
  if (node == NULL || JSON_NODE_HOLDS_NULL (node))
    return TRUE;
  if (JSON_NODE_TYPE (node) != JSON_NODE_ARRAY
      || json_array_get_length (a = json_node_get_array (node)) != n_layers)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_CONFIG,
                   "%s: “moe_layer_freq” is not a list of one 0 or 1 per layer (%u layers)", file, n_layers);
      return FALSE;
    }
  for (guint l = 0; l < n_layers; l++)
    {
      JsonNode *e = json_array_get_element (a, l);
      gint64 v = -1;
      if (JSON_NODE_TYPE (e) == JSON_NODE_VALUE && json_node_get_value_type (e) == G_TYPE_INT64)
        v = json_node_get_int (e);
      if (v != 0 && v != 1)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_CONFIG, "%s: “moe_layer_freq”[%u] is not 0 or 1", file, l);
          return FALSE;
        }
      if (v == 1)
        seen_moe = TRUE;
      else if (seen_moe)
        return refuse_if (obj, file, "moe_layer_freq", TRUE, error);
      else
        (*n_dense)++;
    }
  return TRUE;
}

/* LLaDA 2.x's attention and experts (LLaDA2MoeConfig, BailingMoeV2's keys).
 * An absent key takes the config class's default, as transformers would:
 * half of each head rotated, QK-norm on, 8 groups of which 4 are kept,
 * routed weights × 2.5, no leading dense layer, no shared expert. The
 * reference gate is sigmoid and renormalises; the config may say so. */
static gboolean
load_llada2_parts (UmModelConfig *cfg, JsonObject *obj, const char *file, guint n_layers, guint head_dim,
                   GError **error)
{
  const UmArchInfo *info = um_arch_info (UM_ARCH_LLADA2);
  gint64 n_exp = 0, n_used = 0, exp_ffn = 0, n_dense = 0, n_group = 8, topk_group = 4, n_shared = 0;
  double partial = 0.5, scale = 2.5, rot;
  const char *score = "sigmoid";

  if (!get_int (obj, file, "num_experts", REQUIRED, 0, G_MAXUINT32, &n_exp, error)
      || !get_int (obj, file, "num_experts_per_tok", REQUIRED, 0, G_MAXUINT32, &n_used, error)
      || !get_int (obj, file, "moe_intermediate_size", REQUIRED, 0, G_MAXUINT32, &exp_ffn, error)
      || !get_int (obj, file, "first_k_dense_replace", OPTIONAL, 0, n_layers, &n_dense, error)
      || !get_int (obj, file, "n_group", OPTIONAL, 0, G_MAXUINT32, &n_group, error)
      || !get_int (obj, file, "topk_group", OPTIONAL, 0, G_MAXUINT32, &topk_group, error)
      || !get_int (obj, file, "num_shared_experts", OPTIONAL, 0, MAX_EXPERTS, &n_shared, error)
      || !get_double (obj, file, "routed_scaling_factor", OPTIONAL, &scale, error)
      || !get_double (obj, file, "partial_rotary_factor", OPTIONAL, &partial, error)
      || !get_string (obj, file, "score_function", &score, error)
      || !refuse_if (obj, file, "score_function",
                     !g_str_equal (score, "softmax") && !g_str_equal (score, "sigmoid"), error)
      || !refuse_if (obj, file, "use_bias", get_bool (obj, "use_bias", FALSE), error)
      || !refuse_if (obj, file, "norm_head", get_bool (obj, "norm_head", FALSE), error))
    return FALSE;
  if (exp_ffn == 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_CONFIG, "%s: “moe_intermediate_size” is 0", file);
      return FALSE;
    }
  /* transformers rotates int(head_dim · partial_rotary_factor) values. */
  if (!(partial > 0.0 && partial <= 1.0))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_CONFIG, "%s: “partial_rotary_factor” is %g; it must be in (0, 1]",
                   file, partial);
      return FALSE;
    }
  rot = floor ((double) head_dim * partial);
  /* No head size (validation names that) leaves the width unset. */
  if (head_dim > 0 && (rot < 2 || (guint) rot % 2 != 0))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_CONFIG,
                   "%s: “partial_rotary_factor” %g of the head size %u rotates %u values; RoPE needs an even, "
                   "non-zero count", file, partial, head_dim, (guint) rot);
      return FALSE;
    }
  cfg->rope_dim = (guint) rot;
  cfg->n_experts = n_exp;
  cfg->n_experts_used = n_used;
  cfg->expert_ffn = exp_ffn;
  cfg->n_dense_leading = n_dense;
  /* One group (or none) is no grouping; topk_group then has no say. */
  cfg->n_expert_groups = n_group > 1 ? n_group : 0;
  cfg->n_groups_used = n_group > 1 ? topk_group : 0;
  /* An absurd product is left for validation to name. */
  cfg->shared_ffn = (guint) MIN ((guint64) exp_ffn * n_shared, G_MAXUINT32);
  cfg->router_func = g_str_equal (score, "softmax") ? UM_ROUTER_SOFTMAX : UM_ROUTER_SIGMOID;
  cfg->router_norm = get_bool (obj, "norm_topk_prob", info->router_norm);
  cfg->router_scale = scale;
  /* A first guess for readers of the configuration alone: binding the
   * weights decides from the tensors (the gate registers expert_bias
   * whatever the flag says, zeros when it is off). */
  cfg->expert_bias = get_bool (obj, "moe_router_enable_expert_bias", TRUE);
  cfg->block_causal = info->block_causal;
  cfg->qk_norm = info->qk_norm && get_bool (obj, info->hf_qk_norm_key, TRUE);
  cfg->qkv_bias = get_bool (obj, "use_qkv_bias", FALSE);
  return TRUE;
}

/* Dream (Qwen2 keys), LLaDA-MoE (OLMoE-like keys) and RND1 (Qwen3-MoE keys). */
static gboolean
load_hf_family (UmModelConfig *cfg, UmArch arch, JsonObject *obj, JsonObject *gen, const char *file,
                GError **error)
{
  const char *gen_file = "generation_config.json";
  gint64 n_layers = 0, d_model = 0, n_heads = 0, n_kv = 0, mlp = 0, vocab = 0, head_dim = 0;
  gint64 max_seq = 4096, mask = -1, eos = -1, pad = -1, bos = -1;
  gint64 n_exp = 0, n_used = 0, exp_ffn = 0;
  const gboolean llada2 = arch == UM_ARCH_LLADA2;
  /* LLaDA2MoeConfig's own default eps */
  double theta = 10000.0, eps = llada2 ? 1e-5 : 1e-6;
  /* LLaDA 2's experts come with its attention (load_llada2_parts ()). */
  gboolean moe = um_arch_info (arch)->experts && !llada2;
  const char *score = "softmax";

  if (!get_int (obj, file, "num_hidden_layers", REQUIRED, 1, MAX_LAYERS, &n_layers, error)
      || !get_int (obj, file, "hidden_size", REQUIRED, 1, MAX_DIM, &d_model, error)
      || !get_int (obj, file, "num_attention_heads", REQUIRED, 1, MAX_DIM, &n_heads, error)
      || !get_int (obj, file, "vocab_size", REQUIRED, 1, MAX_VOCAB, &vocab, error)
      || !get_int (obj, file, "intermediate_size", moe || llada2 ? OPTIONAL : REQUIRED, 1, MAX_DIM, &mlp, error)
      || !get_int (obj, file, "max_position_embeddings", OPTIONAL, 1, MAX_SEQ, &max_seq, error)
      || !get_double (obj, file, "rope_theta", OPTIONAL, &theta, error)
      || !get_double (obj, file, "rms_norm_eps", OPTIONAL, &eps, error)
      || !get_id (obj, file, "mask_token_id", &mask, error)
      || !get_id (obj, file, "eos_token_id", &eos, error)
      || !get_id (obj, file, "pad_token_id", &pad, error)
      || !get_id (obj, file, "bos_token_id", &bos, error))
    return FALSE;
  n_kv = n_heads;
  if (!get_int (obj, file, "num_key_value_heads", OPTIONAL, 1, MAX_DIM, &n_kv, error)
      || !get_int (obj, file, "head_dim", OPTIONAL, 1, MAX_DIM, &head_dim, error))
    return FALSE;
  if (gen != NULL
      && ((eos < 0 && !get_id (gen, gen_file, "eos_token_id", &eos, error))
          || (bos < 0 && !get_id (gen, gen_file, "bos_token_id", &bos, error))
          || (pad < 0 && !get_id (gen, gen_file, "pad_token_id", &pad, error))))
    return FALSE;
  /* Options that would change the forward pass. */
  if (!refuse_if (obj, file, "rope_scaling", node_is_set (obj, "rope_scaling"), error)
      || !refuse_if (obj, file, "use_sliding_window", node_is_set (obj, "use_sliding_window"), error)
      || !refuse_if (obj, file, "clip_qkv", node_is_set (obj, "clip_qkv"), error)
      || !refuse_if (obj, file, "mlp_only_layers", node_is_set (obj, "mlp_only_layers"), error)
      || !refuse_if (obj, file, "shared_expert_intermediate_size",
                     node_is_set (obj, "shared_expert_intermediate_size"), error)
      || !refuse_if (obj, file, "moe_router_enable_expert_bias",
                     !llada2 && node_is_set (obj, "moe_router_enable_expert_bias"), error))
    return FALSE;
  /* LLaDA 2 rotates part of each head (load_llada2_parts ()). */
  if (!llada2)
    {
      double partial = 1.0;
      gint64 sparse_step = 1;
      if (!get_double (obj, file, "partial_rotary_factor", OPTIONAL, &partial, error)
          || !refuse_if (obj, file, "partial_rotary_factor", partial != 1.0, error)
          || !get_int (obj, file, "decoder_sparse_step", OPTIONAL, 0, G_MAXINT32, &sparse_step, error)
          || !refuse_if (obj, file, "decoder_sparse_step", sparse_step != 1, error))
        return FALSE;
    }
  /* Experts: any count is read so that validation can name it. */
  if (moe)
    {
      if (!get_int (obj, file, "num_experts", REQUIRED, 0, G_MAXUINT32, &n_exp, error)
          || !get_int (obj, file, "num_experts_per_tok", REQUIRED, 0, G_MAXUINT32, &n_used, error)
          || !get_int (obj, file, "moe_intermediate_size", OPTIONAL, 0, G_MAXUINT32, &exp_ffn, error)
          || !get_int (obj, file, "expert_intermediate_size", OPTIONAL, 0, G_MAXUINT32, &exp_ffn, error))
        return FALSE;
      if (exp_ffn == 0)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_CONFIG, "%s: “%s” is missing or 0", file,
                       arch == UM_ARCH_LLADA_MOE ? "expert_intermediate_size" : "moe_intermediate_size");
          return FALSE;
        }
      /* The dense layers' width, if there are any. */
      if (!get_int (obj, file, "dense_intermediate_size", OPTIONAL, 1, MAX_DIM, &mlp, error))
        return FALSE;
      score = "softmax";
      if (!get_string (obj, file, "moe_router_score_function", &score, error)
          || !refuse_if (obj, file, "moe_router_score_function",
                      !g_str_equal (score, "softmax") && !g_str_equal (score, "sigmoid"), error)
          || !read_layer_freq (obj, file, n_layers, &cfg->n_dense_leading, error))
        return FALSE;
      cfg->n_experts = n_exp;
      cfg->n_experts_used = n_used;
      cfg->expert_ffn = exp_ffn;
      cfg->router_func = g_str_equal (score, "sigmoid") ? UM_ROUTER_SIGMOID : UM_ROUTER_SOFTMAX;
      /* The family's rule unless norm_topk_prob says (RND1's config
       * forces it true; LLaDA-MoE's released config says null). */
      cfg->router_norm = get_bool (obj, "norm_topk_prob", um_arch_info (arch)->router_norm);
    }
  if (mask < 0)
    {
      /* Real LLaDA-MoE and LLaDA 2 configs may lack it (Ling's vocabulary). */
      const gint32 ref_mask = um_arch_info (arch)->hf_mask_id;
      if (ref_mask >= 0 && vocab > ref_mask)
        mask = ref_mask;
      else if (ref_mask >= 0)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_CONFIG,
                       "%s: “mask_token_id” is missing, and the reference's default (%d) is outside the "
                       "vocabulary (%" G_GINT64_FORMAT ")", file, ref_mask, vocab);
          return FALSE;
        }
      else
        {
          g_set_error (error, UM_ERROR, UM_ERROR_CONFIG, "%s: “mask_token_id” is missing", file);
          return FALSE;
        }
    }
  if (eos < 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_CONFIG, "%s: “eos_token_id” is missing", file);
      return FALSE;
    }

  cfg->n_layers = n_layers;
  cfg->d_model = d_model;
  cfg->n_heads = n_heads;
  cfg->n_kv_heads = n_kv;
  cfg->head_dim = head_dim > 0 ? head_dim : d_model % n_heads == 0 ? d_model / n_heads : 0;
  cfg->rope_dim = cfg->head_dim;
  if (llada2 && !load_llada2_parts (cfg, obj, file, n_layers, cfg->head_dim, error))
    return FALSE;
  if (llada2 && cfg->n_dense_leading > 0 && mlp == 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_CONFIG, "%s: “intermediate_size” is missing for the %u leading "
                   "dense layers (“first_k_dense_replace”)", file, cfg->n_dense_leading);
      return FALSE;
    }
  cfg->mlp_hidden = mlp > 0 ? mlp : cfg->expert_ffn;
  cfg->vocab_size = vocab;
  cfg->max_seq_len = max_seq;
  cfg->rope_theta = theta;
  cfg->rms_eps = eps;
  cfg->tied_embeddings = get_bool (obj, "tie_word_embeddings", FALSE);
  cfg->mask_id = mask;
  cfg->eos_id = eos;
  cfg->pad_id = pad >= 0 ? pad : eos;
  cfg->bos_id = bos;
  /* LLaDA 2's attention options were read with its experts. */
  if (llada2)
    return TRUE;
  /* Qwen2 (Dream) always has q/k/v biases; the others say attention_bias. */
  cfg->qkv_bias = um_arch_info (arch)->qkv_bias == UM_FAMILY_ALWAYS || get_bool (obj, "attention_bias", FALSE);
  cfg->qk_norm = um_arch_info (arch)->qk_norm
                 && (um_arch_info (arch)->hf_qk_norm_key == NULL
                     || get_bool (obj, um_arch_info (arch)->hf_qk_norm_key, TRUE));
  return TRUE;
}

gboolean
um_model_config_load_hf (UmModelConfig *cfg,
                         const char    *dir,
                         GError       **error)
{
  g_autofree char *config_path = g_build_filename (dir, "config.json", NULL);
  g_autofree char *gen_path = g_build_filename (dir, "generation_config.json", NULL);
  g_autoptr(JsonNode) root = NULL;
  g_autoptr(JsonNode) gen_root = NULL;
  const char *file = "config.json";
  JsonObject *obj, *gen;
  GError *local_error = NULL;
  UmArch arch;

  memset (cfg, 0, sizeof *cfg);
  obj = load_object (config_path, file, TRUE, &root, error);
  if (obj == NULL)
    return FALSE;
  if (!detect_arch (obj, file, &arch, error))
    return FALSE;
  gen = load_object (gen_path, "generation_config.json", FALSE, &gen_root, &local_error);
  if (local_error != NULL)
    {
      g_propagate_error (error, local_error);
      return FALSE;
    }
  cfg->router_scale = 1.0;
  if (arch == UM_ARCH_LLADA ? !load_olmo (cfg, obj, gen, file, error)
                            : !load_hf_family (cfg, arch, obj, gen, file, error))
    return FALSE;
  cfg->arch = arch;
  cfg->shift_logits = um_arch_info (arch)->shift_logits;
  cfg->eot_id = -1;
  return um_model_config_validate (cfg, file, error);
}

gboolean
um_model_config_validate (const UmModelConfig *cfg,
                          const char          *source,
                          GError             **error)
{
#define FAIL(...) G_STMT_START { g_set_error (error, UM_ERROR, UM_ERROR_CONFIG, __VA_ARGS__); return FALSE; } G_STMT_END
  if (cfg->n_layers == 0 || cfg->n_layers > MAX_LAYERS)
    FAIL ("%s: the number of layers (%u) is zero or absurd", source, cfg->n_layers);
  if (cfg->d_model == 0 || cfg->d_model > MAX_DIM || cfg->mlp_hidden == 0 || cfg->mlp_hidden > MAX_DIM)
    FAIL ("%s: d_model (%u) or the MLP size (%u) is zero or absurd", source, cfg->d_model, cfg->mlp_hidden);
  if (cfg->n_heads == 0 || cfg->n_heads > MAX_DIM)
    FAIL ("%s: n_heads (%u) is zero or absurd", source, cfg->n_heads);
  /* LLaDA's head size is d_model / n_heads; the other families may say it
   * (RND1: 8 heads of 16 on a 64-wide model). */
  if (cfg->head_dim == 0)
    FAIL ("%s: n_heads (%u) does not divide d_model (%u) and no head size is given",
          source, cfg->n_heads, cfg->d_model);
  if (um_arch_info (cfg->arch)->head_dim_fixed && cfg->head_dim != cfg->d_model / cfg->n_heads)
    FAIL ("%s: the head size (%u) must be d_model / n_heads for LLaDA", source, cfg->head_dim);
  if (cfg->head_dim % 2 != 0)
    FAIL ("%s: the head size (%u) must be even for RoPE", source, cfg->head_dim);
  if ((guint64) cfg->n_heads * cfg->head_dim > MAX_DIM)
    FAIL ("%s: %u heads of size %u are absurdly wide", source, cfg->n_heads, cfg->head_dim);
  if (cfg->n_kv_heads == 0 || cfg->n_heads % cfg->n_kv_heads != 0)
    FAIL ("%s: n_kv_heads (%u) does not divide n_heads (%u)", source, cfg->n_kv_heads, cfg->n_heads);
  /* Every loader sets the rotated width (the whole head but for LLaDA 2). */
  if (cfg->rope_dim == 0 || cfg->rope_dim % 2 != 0 || cfg->rope_dim > cfg->head_dim)
    FAIL ("%s: RoPE's rotated width (%u) must be even, non-zero and at most the head size (%u)",
          source, cfg->rope_dim, cfg->head_dim);
  if (um_arch_info (cfg->arch)->experts && cfg->n_experts == 0)
    FAIL ("%s: the number of experts is 0 for a mixture-of-experts family (%s)",
          source, um_arch_info (cfg->arch)->name);
  if (cfg->n_experts > 0)
    {
      if (cfg->n_experts > MAX_EXPERTS)
        FAIL ("%s: the number of experts (%u) is absurd (at most %u)", source, cfg->n_experts, MAX_EXPERTS);
      if (cfg->n_experts_used == 0 || cfg->n_experts_used > cfg->n_experts)
        FAIL ("%s: the number of experts per token (%u) must be 1 to the number of experts (%u)",
              source, cfg->n_experts_used, cfg->n_experts);
      if (cfg->expert_ffn == 0 || cfg->expert_ffn > MAX_DIM)
        FAIL ("%s: the expert FFN size (%u) is zero or absurd", source, cfg->expert_ffn);
      if (cfg->n_dense_leading > cfg->n_layers)
        FAIL ("%s: %u leading dense layers of %u", source, cfg->n_dense_leading, cfg->n_layers);
      if (!(cfg->router_scale > 0.0) || !isfinite (cfg->router_scale))
        FAIL ("%s: the routed weights' scale (%g) must be a positive number", source, cfg->router_scale);
      /* Groups: equal ones, each scored by its two best experts. */
      if (cfg->n_expert_groups > 1)
        {
          guint per_group;
          if (cfg->n_experts % cfg->n_expert_groups != 0 || cfg->n_experts / cfg->n_expert_groups < 2)
            FAIL ("%s: the %u experts do not split into %u equal expert groups (n_group, expert_group_count) "
                  "of two or more",
                  source, cfg->n_experts, cfg->n_expert_groups);
          per_group = cfg->n_experts / cfg->n_expert_groups;
          if (cfg->n_groups_used == 0 || cfg->n_groups_used > cfg->n_expert_groups)
            FAIL ("%s: the expert groups kept per token (%u; topk_group, expert_group_used_count) must be 1 to "
                  "the number of groups (%u)",
                  source, cfg->n_groups_used, cfg->n_expert_groups);
          if (cfg->n_experts_used > (guint64) cfg->n_groups_used * per_group)
            FAIL ("%s: %u experts per token do not fit in the %u expert groups kept (topk_group, "
                  "expert_group_used_count), of %u experts each",
                  source, cfg->n_experts_used, cfg->n_groups_used, per_group);
        }
      else if (cfg->n_groups_used > 1)
        FAIL ("%s: %u expert groups kept per token without groups (%u)",
              source, cfg->n_groups_used, cfg->n_expert_groups);
      if (cfg->shared_ffn > MAX_DIM)
        FAIL ("%s: the shared expert's width (%u) is absurd", source, cfg->shared_ffn);
    }
  else if (cfg->shared_ffn > 0 || cfg->n_expert_groups > 1 || cfg->expert_bias)
    FAIL ("%s: expert groups, a shared expert or a selection bias without experts", source);
  if (cfg->vocab_size == 0 || cfg->vocab_size > MAX_VOCAB)
    FAIL ("%s: the vocabulary size (%u) is zero or absurd", source, cfg->vocab_size);
  if (cfg->max_seq_len == 0 || cfg->max_seq_len > MAX_SEQ)
    FAIL ("%s: max_sequence_length (%u) is zero or absurd", source, cfg->max_seq_len);
  if (!(cfg->rope_theta > 0.0) || !isfinite (cfg->rope_theta))
    FAIL ("%s: rope_theta (%g) must be a positive number", source, cfg->rope_theta);
  if (!(cfg->rms_eps > 0.0) || !(cfg->rms_eps < 1.0))
    FAIL ("%s: rms_norm_eps (%g) must be in (0, 1)", source, cfg->rms_eps);
  if (cfg->mask_id < 0 || (guint) cfg->mask_id >= cfg->vocab_size)
    FAIL ("%s: mask_token_id (%d) is outside the vocabulary (%u)", source, cfg->mask_id, cfg->vocab_size);
  if (cfg->eos_id < 0 || (guint) cfg->eos_id >= cfg->vocab_size)
    FAIL ("%s: eos_token_id (%d) is outside the vocabulary (%u)", source, cfg->eos_id, cfg->vocab_size);
  if (cfg->bos_id >= 0 && (guint) cfg->bos_id >= cfg->vocab_size)
    FAIL ("%s: bos_token_id (%d) is outside the vocabulary (%u)", source, cfg->bos_id, cfg->vocab_size);
  if (cfg->eot_id >= 0 && (guint) cfg->eot_id >= cfg->vocab_size)
    FAIL ("%s: the end-of-turn id (%d) is outside the vocabulary (%u)", source, cfg->eot_id, cfg->vocab_size);
#undef FAIL
  return TRUE;
}

/* Parameters of the model with @experts experts counted per MoE layer:
 * all of them for the total, the ones a token uses for the active count. */
static uint64_t
count_params (const UmModelConfig *cfg, uint64_t experts)
{
  uint64_t d = cfg->d_model, f = cfg->mlp_hidden, v = cfg->vocab_size;
  uint64_t qd = (uint64_t) cfg->n_heads * cfg->head_dim, kv = (uint64_t) cfg->n_kv_heads * cfg->head_dim;
  uint64_t attn = d /* attn_norm */ + 2 * qd * d /* q, out */ + 2 * kv * d + d /* ffn_norm */;
  uint64_t total = v * d * (cfg->tied_embeddings ? 1 : 2) + d;

  if (cfg->qkv_bias)
    attn += qd + 2 * kv;
  if (cfg->qk_norm)
    attn += 2 * (uint64_t) cfg->head_dim;
  for (guint l = 0; l < cfg->n_layers; l++)
    {
      total += attn;
      if (um_model_config_layer_is_moe (cfg, l))
        total += (uint64_t) cfg->n_experts * (d /* router */ + (cfg->expert_bias ? 1 : 0))
                 + experts * 3 * d * cfg->expert_ffn + 3 * d * (uint64_t) cfg->shared_ffn;
      else
        total += 3 * d * f;
    }
  return total;
}

uint64_t
um_model_config_n_params (const UmModelConfig *cfg)
{
  return count_params (cfg, cfg->n_experts);
}

uint64_t
um_model_config_n_active_params (const UmModelConfig *cfg)
{
  return count_params (cfg, cfg->n_experts_used);
}

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

static const UmArchInfo arch_infos[UM_ARCH_N] = {
  [UM_ARCH_LLADA]     = { UM_ARCH_LLADA,     "LLaDA",     "llada",     FALSE, UM_SCHEDULE_BLOCK },
  [UM_ARCH_DREAM]     = { UM_ARCH_DREAM,     "Dream",     "dream",     TRUE,  UM_SCHEDULE_TIMESTEP },
  [UM_ARCH_LLADA_MOE] = { UM_ARCH_LLADA_MOE, "LLaDA-MoE", "llada-moe", FALSE, UM_SCHEDULE_BLOCK },
  [UM_ARCH_RND1]      = { UM_ARCH_RND1,      "RND1",      "rnd1",      TRUE,  UM_SCHEDULE_ENTROPY },
};

const UmArchInfo *
um_arch_info (UmArch arch)
{
  return &arch_infos[(guint) arch < UM_ARCH_N ? arch : UM_ARCH_LLADA];
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
  gint64 n_layers = 0, d_model = 0, n_heads = 0, n_kv = 0, mlp = 0, vocab = 0, emb = 0;
  gint64 max_seq = 4096, mask = 0, eos = 0, pad = -1, bos = -1;
  double theta = 10000.0, eps = 1e-5;
  GError *local_error = NULL;

  memset (cfg, 0, sizeof *cfg);
  obj = load_object (config_path, file, TRUE, &root, error);
  if (obj == NULL)
    return FALSE;
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

  gen = load_object (gen_path, "generation_config.json", FALSE, &gen_root, &local_error);
  if (local_error != NULL)
    {
      g_propagate_error (error, local_error);
      return FALSE;
    }
  if (gen != NULL
      && !get_int (gen, "generation_config.json", "bos_token_id", OPTIONAL, 0, MAX_VOCAB, &bos, error))
    return FALSE;

  cfg->n_layers = n_layers;
  cfg->d_model = d_model;
  cfg->n_heads = n_heads;
  cfg->n_kv_heads = n_kv;
  cfg->head_dim = d_model % n_heads == 0 ? d_model / n_heads : 0;
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
  cfg->eot_id = -1;
  cfg->arch = UM_ARCH_LLADA;
  cfg->router_scale = 1.0;
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
  if (cfg->n_heads == 0 || cfg->d_model % cfg->n_heads != 0)
    FAIL ("%s: n_heads (%u) does not divide d_model (%u)", source, cfg->n_heads, cfg->d_model);
  if (cfg->head_dim != cfg->d_model / cfg->n_heads || cfg->head_dim % 2 != 0)
    FAIL ("%s: the head size (%u) must be d_model / n_heads and even for RoPE", source, cfg->head_dim);
  if (cfg->n_kv_heads == 0 || cfg->n_heads % cfg->n_kv_heads != 0)
    FAIL ("%s: n_kv_heads (%u) does not divide n_heads (%u)", source, cfg->n_kv_heads, cfg->n_heads);
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

uint64_t
um_model_config_n_params (const UmModelConfig *cfg)
{
  uint64_t d = cfg->d_model, f = cfg->mlp_hidden, v = cfg->vocab_size;
  uint64_t kv = (uint64_t) cfg->n_kv_heads * cfg->head_dim;
  uint64_t layer = d /* attn_norm */ + d * d * 2 /* q, out */ + 2 * kv * d + d /* ff_norm */ + 3 * d * f;
  return v * d * (cfg->tied_embeddings ? 1 : 2) + d + cfg->n_layers * layer;
}

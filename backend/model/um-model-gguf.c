/* Filling an UmModel from a llama.cpp GGUF file of architecture "llada",
 * "dream", "llada-moe" or "rnd1" (llama.cpp's keys and tensor names), or of
 * our "llada2" (BailingMoeV2's keys and names; see docs/families-and-schedules.md). */
#include "um-model-gguf.h"

#include <string.h>

#include "um-error.h"
#include "um-gguf.h"

#define MAX_DIM    (1u << 20)
#define MAX_LAYERS 1024u
#define MAX_VOCAB  (1u << 24)

/* "{arch}.{suffix}": the arch-prefixed key names of llama.cpp. */
typedef struct {
  char buf[128];
} Key;

static const char *
arch_key (Key *k, const UmModelConfig *c, const char *suffix)
{
  g_snprintf (k->buf, sizeof k->buf, "%s.%s", um_arch_info (c->arch)->gguf_arch, suffix);
  return k->buf;
}

/* An optional unsigned key: absent leaves *out as is. */
static gboolean
opt_u32 (UmGguf *g, const char *key, guint max, guint *out, GError **error)
{
  guint64 v;
  if (um_gguf_find_key (g, key) < 0)
    return TRUE;
  if (!um_gguf_get_u64 (g, key, &v, error))
    return FALSE;
  if (v > max)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_CONFIG, "%s: “%s” is %" G_GUINT64_FORMAT ", absurdly large",
                   um_gguf_file_name (g), key, v);
      return FALSE;
    }
  *out = (guint) v;
  return TRUE;
}

static gboolean
req_u32 (UmGguf *g, const char *key, guint max, guint *out, GError **error)
{
  if (um_gguf_find_key (g, key) < 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_CONFIG, "%s: “%s” is missing", um_gguf_file_name (g), key);
      return FALSE;
    }
  return opt_u32 (g, key, max, out, error);
}

static gboolean
opt_id (UmGguf *g, const char *key, gint32 *out, GError **error)
{
  guint v = 0;
  if (um_gguf_find_key (g, key) < 0)
    return TRUE;
  if (!opt_u32 (g, key, MAX_VOCAB, &v, error))
    return FALSE;
  *out = (gint32) v;
  return TRUE;
}

static gboolean
opt_f64 (UmGguf *g, const char *key, double *out, GError **error)
{
  if (um_gguf_find_key (g, key) < 0)
    return TRUE;
  return um_gguf_get_f64 (g, key, out, error);
}

/* Per-layer counts: each of n_layers values, from a scalar (every layer)
 * or, as llama.cpp writes per-layer values, an array of one per layer. */
typedef struct {
  guint32 *heads, *kv_heads, *ffn;
} LayerCounts;

static void
layer_counts_clear (LayerCounts *lc)
{
  g_clear_pointer (&lc->heads, g_free);
  g_clear_pointer (&lc->kv_heads, g_free);
  g_clear_pointer (&lc->ffn, g_free);
}

G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (LayerCounts, layer_counts_clear)

/* Reads @key as a scalar or a per-layer array into *out (n_layers values,
 * each from 1 to MAX_DIM) and its maximum into *max. Absent: *out stays
 * NULL unless @required. */
static gboolean
read_per_layer (UmGguf *g, const UmModelConfig *c, const char *key, gboolean required,
                guint32 **out, guint *max, GError **error)
{
  const guint n_layers = c->n_layers;
  Key block_count;
  const char *file = um_gguf_file_name (g);
  gint idx = um_gguf_find_key (g, key);
  g_autofree guint32 *vals = NULL;
  gboolean is_array;

  if (idx < 0)
    {
      if (required)
        g_set_error (error, UM_ERROR, UM_ERROR_CONFIG, "%s: “%s” is missing", file, key);
      return !required;
    }
  is_array = um_gguf_kv_type (g, idx) == UM_GGUF_ARRAY;
  if (is_array)
    {
      guint64 n = 0;
      if (!um_gguf_get_u32_array (g, key, &vals, &n, error))
        return FALSE;
      if (n != n_layers)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_CONFIG,
                       "%s: “%s” has %" G_GUINT64_FORMAT " per-layer values but %s is %u",
                       file, key, n, arch_key (&block_count, c, "block_count"), n_layers);
          return FALSE;
        }
    }
  else
    {
      guint v = 0;
      if (!opt_u32 (g, key, MAX_DIM, &v, error))
        return FALSE;
      vals = g_new (guint32, n_layers);
      for (guint l = 0; l < n_layers; l++)
        vals[l] = v;
    }
  *max = 0;
  for (guint l = 0; l < n_layers; l++)
    {
      if (vals[l] == 0 || vals[l] > MAX_DIM)
        {
          if (is_array)
            g_set_error (error, UM_ERROR, UM_ERROR_CONFIG, "%s: “%s”[%u] is %u; it must be 1 to %u",
                         file, key, l, vals[l], MAX_DIM);
          else
            g_set_error (error, UM_ERROR, UM_ERROR_CONFIG, "%s: “%s” is 0", file, key);
          return FALSE;
        }
      *max = MAX (*max, vals[l]);
    }
  *out = g_steal_pointer (&vals);
  return TRUE;
}

/* The per-layer counts, the configuration's maxima and the head size. A
 * pruned LLaDA has fewer heads than d_model / head_size, so the head size
 * comes from {arch}.attention.key_length when present; RND1 says it too
 * (its queries are wider than the model). */
static gboolean
read_counts (UmModel *model, UmGguf *g, LayerCounts *lc, GError **error)
{
  UmModelConfig *c = &model->cfg;
  const char *file = um_gguf_file_name (g);
  const gboolean head_dim_fixed = um_arch_info (c->arch)->head_dim_fixed;
  guint key_len = 0, value_len = 0;
  Key k1, k2, k3;

  /* The MoE families' feed_forward_length is the dense width the
   * converter copies from the config; their expert layers do not use it,
   * leading dense layers (LLaDA 2) do. */
  if (!read_per_layer (g, c, arch_key (&k1, c, "attention.head_count"), TRUE, &lc->heads, &c->n_heads, error)
      || !read_per_layer (g, c, arch_key (&k1, c, "attention.head_count_kv"), FALSE, &lc->kv_heads,
                          &c->n_kv_heads, error)
      || !read_per_layer (g, c, arch_key (&k1, c, "feed_forward_length"),
                          c->n_experts == 0 || c->n_dense_leading > 0, &lc->ffn, &c->mlp_hidden, error)
      || !opt_u32 (g, arch_key (&k1, c, "attention.key_length"), MAX_DIM, &key_len, error)
      || !opt_u32 (g, arch_key (&k2, c, "attention.value_length"), MAX_DIM, &value_len, error))
    return FALSE;
  if (lc->kv_heads == NULL)
    {
      lc->kv_heads = g_memdup2 (lc->heads, c->n_layers * sizeof (guint32));
      c->n_kv_heads = c->n_heads;
    }
  if (lc->ffn == NULL)
    {
      /* Only expert layers: the dense width is the experts'. */
      lc->ffn = g_new (guint32, c->n_layers);
      for (guint l = 0; l < c->n_layers; l++)
        lc->ffn[l] = c->expert_ffn;
      c->mlp_hidden = c->expert_ffn;
    }
  if (value_len != 0 && key_len != 0 && value_len != key_len)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "%s: %s (%u) differs from %s (%u)",
                   file, k2.buf, value_len, k1.buf, key_len);
      return FALSE;
    }
  if (key_len == 0)
    key_len = value_len;
  if (key_len % 2 != 0
      || (key_len == 0 && (um_gguf_find_key (g, k1.buf) >= 0 || um_gguf_find_key (g, k2.buf) >= 0)))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_CONFIG,
                   "%s: %s is %u; RoPE needs an even, non-zero head size", file, k1.buf, key_len);
      return FALSE;
    }
  if (key_len != 0)
    c->head_dim = key_len;
  else
    c->head_dim = c->d_model % c->n_heads == 0 ? c->d_model / c->n_heads : 0;
  if (head_dim_fixed && (guint64) c->n_heads * c->head_dim > c->d_model)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_CONFIG,
                   "%s: %s: %u heads of size %u do not fit in %s (%u)", file,
                   arch_key (&k1, c, "attention.head_count"), c->n_heads, c->head_dim,
                   arch_key (&k2, c, "embedding_length"), c->d_model);
      return FALSE;
    }
  for (guint l = 0; l < c->n_layers; l++)
    if (lc->heads[l] % lc->kv_heads[l] != 0)
      {
        g_set_error (error, UM_ERROR, UM_ERROR_CONFIG,
                     "%s: layer %u: %s (%u) does not divide %s (%u)", file, l,
                     arch_key (&k1, c, "attention.head_count_kv"), lc->kv_heads[l],
                     arch_key (&k3, c, "attention.head_count"), lc->heads[l]);
        return FALSE;
      }
  return TRUE;
}

/* An optional boolean key: absent leaves *out as is. */
static gboolean
opt_bool (UmGguf *g, const char *key, gboolean *out, GError **error)
{
  if (um_gguf_find_key (g, key) < 0)
    return TRUE;
  return um_gguf_get_bool (g, key, out, error);
}

/* A count that may be absurd (0, 2^31): read whole so that validation can
 * name the value instead of a parser limit. */
static gboolean
opt_count (UmGguf *g, const char *key, guint *out, GError **error)
{
  return opt_u32 (g, key, G_MAXUINT32, out, error);
}

/* A key llada2 files must carry (BailingMoeV2's loader requires it too). */
static gboolean
need_key (UmGguf *g, const UmModelConfig *c, const char *suffix, GError **error)
{
  Key k;

  if (um_gguf_find_key (g, arch_key (&k, c, suffix)) >= 0)
    return TRUE;
  g_set_error (error, UM_ERROR, UM_ERROR_CONFIG, "%s: “%s” is missing", um_gguf_file_name (g), k.buf);
  return FALSE;
}

/* Mixture-of-experts keys (llama.cpp's names). */
static gboolean
read_moe (UmModel *model, UmGguf *g, GError **error)
{
  UmModelConfig *c = &model->cfg;
  const char *file = um_gguf_file_name (g);
  const gboolean llada2 = c->arch == UM_ARCH_LLADA2;
  guint gating = 0, groups = 0, groups_used = 0, ffn = 0, shared_ffn = 0, shared_count = 0;
  double scale = 0.0;
  Key k;

  if (!need_key (g, c, "expert_count", error)
      || (llada2 && (!need_key (g, c, "expert_used_count", error)
                     || !need_key (g, c, "expert_feed_forward_length", error)
                     || !need_key (g, c, "expert_gating_func", error)
                     || !need_key (g, c, "expert_weights_scale", error))))
    return FALSE;
  if (!opt_count (g, arch_key (&k, c, "expert_count"), &c->n_experts, error)
      || !opt_count (g, arch_key (&k, c, "expert_used_count"), &c->n_experts_used, error)
      || !opt_count (g, arch_key (&k, c, "expert_feed_forward_length"), &c->expert_ffn, error)
      || !opt_u32 (g, arch_key (&k, c, "leading_dense_block_count"), MAX_LAYERS, &c->n_dense_leading, error)
      || !opt_u32 (g, arch_key (&k, c, "expert_gating_func"), G_MAXUINT32, &gating, error)
      || !opt_u32 (g, arch_key (&k, c, "expert_group_count"), G_MAXUINT32, &groups, error)
      || !opt_u32 (g, arch_key (&k, c, "expert_group_used_count"), G_MAXUINT32, &groups_used, error)
      || !opt_u32 (g, arch_key (&k, c, "expert_shared_feed_forward_length"), G_MAXUINT32, &shared_ffn, error)
      || !opt_u32 (g, arch_key (&k, c, "expert_shared_count"), MAX_DIM, &shared_count, error)
      || !opt_f64 (g, arch_key (&k, c, "expert_weights_scale"), &scale, error))
    return FALSE;
  /* llama.cpp's graphs: LLaDA-MoE does not renormalise, RND1 does (as
   * Qwen3-MoE), and so does LLaDA 2's reference gate (the family's
   * router_norm); the key, when written, decides. */
  c->router_norm = um_arch_info (c->arch)->router_norm;
  if (!opt_bool (g, arch_key (&k, c, "expert_weights_norm"), &c->router_norm, error))
    return FALSE;
  if (c->expert_ffn == 0)
    {
      /* llama.cpp's fallback: the dense width shared among the used experts. */
      if (!opt_u32 (g, arch_key (&k, c, "feed_forward_length"), MAX_DIM, &ffn, error))
        return FALSE;
      if (c->n_experts_used != 0)
        c->expert_ffn = ffn / c->n_experts_used;
    }
  if (gating > 2)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "%s: %s is %u; only softmax (1) and sigmoid (2) "
                   "routers are supported", file, arch_key (&k, c, "expert_gating_func"), gating);
      return FALSE;
    }
  c->router_func = gating == 2 ? UM_ROUTER_SIGMOID : UM_ROUTER_SOFTMAX;
  if (llada2)
    {
      /* Groups and the shared expert; validation checks the counts. The
       * converter writes the shared width (moe_intermediate_size ×
       * num_shared_experts) and the count; without the width, each shared
       * expert is one expert wide. */
      c->n_expert_groups = groups > 1 ? groups : 0;
      c->n_groups_used = groups > 1 ? groups_used : 0;
      if (shared_count > 0)
        c->shared_ffn = shared_ffn > 0 ? shared_ffn : (guint) MIN ((guint64) c->expert_ffn * shared_count,
                                                                    G_MAXUINT32);
      if (!(scale > 0.0))
        {
          g_set_error (error, UM_ERROR, UM_ERROR_CONFIG, "%s: %s is %g; the routed weights' scale must be "
                       "positive", file, arch_key (&k, c, "expert_weights_scale"), scale);
          return FALSE;
        }
    }
  else if (groups > 1)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "%s: %s is %u; grouped expert routing is not "
                   "supported", file, arch_key (&k, c, "expert_group_count"), groups);
      return FALSE;
    }
  /* llama.cpp scales only by a value other than 0 and 1. */
  c->router_scale = scale != 0.0 ? scale : 1.0;
  return TRUE;
}

static gboolean
read_config (UmModel *model, UmGguf *g, LayerCounts *lc, GError **error)
{
  UmModelConfig *c = &model->cfg;
  const char *file = um_gguf_file_name (g);
  const char *arch;
  gboolean flag = FALSE;
  guint rope_dims = 0;
  const UmArchInfo *info;
  UmArch family;
  Key k;

  arch = um_gguf_get_string (g, "general.architecture", error);
  if (arch == NULL)
    return FALSE;
  if (!um_arch_from_gguf (arch, &family))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                   "%s: general.architecture is “%s”; Unmask runs “llada”, “dream”, “llada-moe”, “rnd1” and "
                   "“llada2” models", file, arch);
      return FALSE;
    }
  info = um_arch_info (family);
  memset (c, 0, sizeof *c);
  c->arch = family;
  c->max_seq_len = 4096;
  c->rope_theta = 10000.0;
  c->rms_eps = 1e-5;
  c->router_scale = 1.0;
  if (!req_u32 (g, arch_key (&k, c, "block_count"), MAX_LAYERS, &c->n_layers, error)
      || !req_u32 (g, arch_key (&k, c, "embedding_length"), MAX_DIM, &c->d_model, error))
    return FALSE;
  if (c->n_layers == 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_CONFIG, "%s: %s is 0", file, arch_key (&k, c, "block_count"));
      return FALSE;
    }
  if (info->experts && !read_moe (model, g, error))
    return FALSE;
  if (!read_counts (model, g, lc, error)
      || !opt_u32 (g, arch_key (&k, c, "context_length"), 1u << 20, &c->max_seq_len, error)
      || !opt_f64 (g, arch_key (&k, c, "rope.freq_base"), &c->rope_theta, error)
      || !opt_f64 (g, arch_key (&k, c, "attention.layer_norm_rms_epsilon"), &c->rms_eps, error)
      || !opt_u32 (g, arch_key (&k, c, "rope.dimension_count"), MAX_DIM, &rope_dims, error))
    return FALSE;
  if (rope_dims > c->head_dim)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_CONFIG,
                   "%s: %s is %u, above the head size (%u)", file, k.buf, rope_dims, c->head_dim);
      return FALSE;
    }
  /* Only LLaDA 2 rotates part of each head (llama.cpp's n_rot; absent: all). */
  if (info->rope_partial && rope_dims != 0 && rope_dims % 2 != 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_CONFIG,
                   "%s: %s is %u; RoPE rotates pairs, so it must be even", file, k.buf, rope_dims);
      return FALSE;
    }
  if (!info->rope_partial && rope_dims != 0 && rope_dims != c->head_dim)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                   "%s: %s is %u; only RoPE over the whole head (%u) is supported",
                   file, k.buf, rope_dims, c->head_dim);
      return FALSE;
    }
  c->rope_dim = rope_dims != 0 ? rope_dims : c->head_dim;
  c->block_causal = info->block_causal;
  if (!opt_bool (g, arch_key (&k, c, "attention.causal"), &flag, error))
    return FALSE;
  if (flag)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                   "%s: %s is true; diffusion models attend in both directions", file, k.buf);
      return FALSE;
    }
  /* llama.cpp shifts unless the file says false: Dream and RND1 files do
   * not say, LLaDA and LLaDA-MoE ones write false. */
  c->shift_logits = info->shift_logits;
  if (!opt_bool (g, "diffusion.shift_logits", &c->shift_logits, error))
    return FALSE;
  if (family == UM_ARCH_LLADA && c->shift_logits)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                   "%s: diffusion.shift_logits is true for a LLaDA model; not supported", file);
      return FALSE;
    }
  /* Only LLaDA's converter permutes Q and K rows for the interleaved
   * rotation; the others run NEOX RoPE on the rows as trained. */
  c->rope_interleaved = info->gguf_rope_interleaved;
  c->mask_id = c->eos_id = c->bos_id = c->eot_id = c->pad_id = -1;
  if (!opt_id (g, "tokenizer.ggml.mask_token_id", &c->mask_id, error)
      || !opt_id (g, "tokenizer.ggml.eos_token_id", &c->eos_id, error)
      || !opt_id (g, "tokenizer.ggml.bos_token_id", &c->bos_id, error)
      || !opt_id (g, "tokenizer.ggml.padding_token_id", &c->pad_id, error))
    return FALSE;
  return TRUE;
}

static gboolean
read_tokenizer (UmModel *model, UmGguf *g, GError **error)
{
  const char *file = um_gguf_file_name (g);
  const char *kind, *arch = NULL, *pre = NULL, *jinja = NULL;
  const char * const *tokens, * const *merges = NULL;
  guint64 n_tokens = 0, n_merges = 0, n_types = 0;
  g_autofree gint32 *types = NULL;

  kind = um_gguf_get_string (g, "tokenizer.ggml.model", error);
  if (kind == NULL)
    return FALSE;
  if (!g_str_equal (kind, "gpt2"))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                   "%s: tokenizer.ggml.model is “%s”; only byte-level BPE (“gpt2”) is supported", file, kind);
      return FALSE;
    }
  tokens = um_gguf_get_string_array (g, "tokenizer.ggml.tokens", &n_tokens, error);
  if (tokens == NULL)
    return FALSE;
  if (um_gguf_find_key (g, "tokenizer.ggml.merges") >= 0
      && (merges = um_gguf_get_string_array (g, "tokenizer.ggml.merges", &n_merges, error)) == NULL)
    return FALSE;
  if (um_gguf_find_key (g, "tokenizer.ggml.token_type") >= 0)
    {
      if (!um_gguf_get_int32_array (g, "tokenizer.ggml.token_type", &types, &n_types, error))
        return FALSE;
      if (n_types != n_tokens)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                       "%s: tokenizer.ggml.token_type has %" G_GUINT64_FORMAT " entries for %" G_GUINT64_FORMAT
                       " tokens", file, n_types, n_tokens);
          return FALSE;
        }
    }
  if (n_tokens == 0 || n_tokens > MAX_VOCAB)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: tokenizer.ggml.tokens has %" G_GUINT64_FORMAT " tokens",
                   file, n_tokens);
      return FALSE;
    }
  /* the split and normalizer follow the family's HF tokenizer */
  if (um_gguf_find_key (g, "general.architecture") >= 0
      && (arch = um_gguf_get_string (g, "general.architecture", error)) == NULL)
    return FALSE;
  if (um_gguf_find_key (g, "tokenizer.ggml.pre") >= 0
      && (pre = um_gguf_get_string (g, "tokenizer.ggml.pre", error)) == NULL)
    return FALSE;
  model->tokenizer = um_tokenizer_new_from_gguf_vocab (tokens, n_tokens, merges, n_merges, types,
                                                       arch, pre, error);
  if (model->tokenizer == NULL)
    {
      if (error && *error)
        g_prefix_error (error, "%s: ", file);
      return FALSE;
    }
  if (um_gguf_find_key (g, "tokenizer.chat_template") >= 0
      && (jinja = um_gguf_get_string (g, "tokenizer.chat_template", error)) == NULL)
    return FALSE;
  model->chat_template = um_chat_template_for_arch (model->cfg.arch, jinja);
  return TRUE;
}

static gboolean
has_qkv_bias (const UmTensorTable *t)
{
  for (guint i = 0; i < um_tensor_table_size (t); i++)
    {
      const char *name = um_tensor_table_get (t, i)->name;
      if (g_str_has_prefix (name, "blk.")
          && (g_str_has_suffix (name, ".attn_q.bias") || g_str_has_suffix (name, ".attn_k.bias")
              || g_str_has_suffix (name, ".attn_v.bias") || g_str_has_suffix (name, ".attn_qkv.bias")))
        return TRUE;
    }
  return FALSE;
}

gboolean
um_model_load_gguf (UmModel *model, GError **error)
{
  UmGguf *g = um_gguf_open (model->path, error);

  return g != NULL && um_model_load_gguf_from (model, g, error);
}

gboolean
um_model_load_gguf_from (UmModel *model, UmGguf *g, GError **error)
{
  const UmTensorInfo *embd;
  guint vocab = 0;
  g_auto(LayerCounts) lc = { NULL, NULL, NULL };
  const UmArchInfo *info;
  UmModelConfig check;
  Key k;

  model->gguf = g;
  model->tensors = um_gguf_get_tensors (g);
  if (!read_config (model, g, &lc, error) || !read_tokenizer (model, g, error))
    return FALSE;

  /* The vocabulary size is the embedding's row count. */
  embd = um_tensor_table_lookup (model->tensors, "token_embd.weight");
  if (embd == NULL || embd->n_dims != 2)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: tensor “token_embd.weight” is missing or not 2-D",
                   um_gguf_file_name (g));
      return FALSE;
    }
  model->cfg.vocab_size = embd->shape[0];
  if (!opt_u32 (g, arch_key (&k, &model->cfg, "vocab_size"), MAX_VOCAB, &vocab, error))
    return FALSE;
  if (vocab != 0 && vocab != model->cfg.vocab_size)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_CONFIG,
                   "%s: %s is %u but token_embd.weight has %u rows",
                   um_gguf_file_name (g), k.buf, vocab, model->cfg.vocab_size);
      return FALSE;
    }
  model->cfg.tied_embeddings = um_tensor_table_lookup (model->tensors, "output.weight") == NULL;

  /* Ids missing from the metadata come from the vocabulary. */
  if (model->cfg.mask_id < 0)
    model->cfg.mask_id = um_tokenizer_token_to_id (model->tokenizer, "<|mdm_mask|>");
  if (model->cfg.mask_id < 0)
    model->cfg.mask_id = um_tokenizer_token_to_id (model->tokenizer, "<|mask|>");
  if (model->cfg.eos_id < 0)
    model->cfg.eos_id = um_tokenizer_token_to_id (model->tokenizer, "<|endoftext|>");
  um_model_resolve_special_ids (model);
  if (model->cfg.pad_id < 0)
    model->cfg.pad_id = model->cfg.eos_id;
  if (model->cfg.mask_id < 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_CONFIG,
                   "%s: no mask token (tokenizer.ggml.mask_token_id or <|mdm_mask|>); not a diffusion model?",
                   um_gguf_file_name (g));
      return FALSE;
    }
  if (model->cfg.eos_id < 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_CONFIG, "%s: no end-of-sequence token", um_gguf_file_name (g));
      return FALSE;
    }
  if (um_tokenizer_vocab_size (model->tokenizer) > model->cfg.vocab_size)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_CONFIG,
                   "%s: the vocabulary has %u tokens but token_embd.weight only %u rows",
                   um_gguf_file_name (g), um_tokenizer_vocab_size (model->tokenizer), model->cfg.vocab_size);
      return FALSE;
    }
  /* A pruned model's widest layer may have fewer heads than d_model /
   * head_dim: the rest of the configuration is checked as for the full
   * width, the per-layer counts were checked by read_counts(). */
  info = um_arch_info (model->cfg.arch);
  check = model->cfg;
  if (info->head_dim_fixed && (guint64) check.n_heads * check.head_dim != check.d_model
      && check.head_dim != 0 && check.d_model % check.head_dim == 0)
    check.n_heads = check.n_kv_heads = check.d_model / check.head_dim;
  if (!um_model_config_validate (&check, um_gguf_file_name (g), error))
    return FALSE;
  model->layers = g_new0 (UmLayerWeights, model->cfg.n_layers);
  for (guint l = 0; l < model->cfg.n_layers; l++)
    {
      model->layers[l].n_heads = lc.heads[l];
      model->layers[l].n_kv_heads = lc.kv_heads[l];
      model->layers[l].ffn = lc.ffn[l];
    }
  /* llama.cpp's biases are optional: any one there means all of them,
   * so a file that lost some is refused rather than run without (LLaDA
   * has none). */
  model->cfg.qkv_bias = info->qkv_bias != UM_FAMILY_NEVER && has_qkv_bias (model->tensors);
  model->cfg.qk_norm = info->qk_norm;
  return um_model_bind_weights (model, info->gguf_names, error);
}

void
um_model_gguf_release (UmModel *model)
{
  model->tensors = NULL;
  g_clear_pointer ((UmGguf **) &model->gguf, um_gguf_free);
}

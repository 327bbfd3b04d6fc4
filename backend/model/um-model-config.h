/* um-model-config.h — hyperparameters and special ids of a diffusion LM
 * (LLaDA, Dream, LLaDA-MoE, RND1, LLaDA 2.x), read from config.json (+
 * generation_config.json) or GGUF metadata, and validated against the
 * tensor table. Nothing is hard-coded: what a family has (biases, QK-norm,
 * RoPE variant, logits shift, dense or MoE FFN and its router) is data
 * here, read by the one forward pass and the samplers. */
#pragma once

#include <glib.h>
#include <stdint.h>

#include "um-tensor-table.h"
#include "um-weight-names.h"

G_BEGIN_DECLS

/* The model families. The forward reads only the configuration fields
 * below; the family decides the defaults, the schedule and the names. */
typedef enum {
  UM_ARCH_LLADA,       /* LLaDA-8B / 1.5: HF "llada" (OLMo keys), GGUF "llada" */
  UM_ARCH_DREAM,       /* Dream-7B, Dream-Coder, DiffuCoder: HF "Dream", GGUF "dream" */
  UM_ARCH_LLADA_MOE,   /* LLaDA-MoE-7B-A1B: HF "lladamoe"/"llada" with experts, GGUF "llada-moe" */
  UM_ARCH_RND1,        /* RND1-30B-A3B: HF "rnd1"/"RND1", GGUF "rnd1" */
  UM_ARCH_LLADA2,      /* LLaDA 2.x mini/flash: HF "llada2_moe", GGUF "llada2" (BailingMoeV2's keys) */
  UM_ARCH_N
} UmArch;

/* How a family schedules its unmasking by default. */
typedef enum {
  UM_SCHEDULE_BLOCK,     /* LLaDA: semi-autoregressive blocks, low-confidence remasking */
  UM_SCHEDULE_TIMESTEP,  /* Dream: linspace(1, eps, steps+1), confidence rules */
  UM_SCHEDULE_ENTROPY,   /* RND1: keep the highest-entropy positions masked */
  UM_SCHEDULE_BLOCK_CAUSAL, /* LLaDA 2.x: blocks in turn under a block-causal mask; each step commits
                             * the positions above the threshold, or the step's count of the most confident */
} UmSchedule;

/* Whether a family's layers have something, or its files say. */
typedef enum {
  UM_FAMILY_NEVER,
  UM_FAMILY_BY_FILE,
  UM_FAMILY_ALWAYS,
} UmFamilyHas;

/* The family table: a row per family, a column per fact. The loaders
 * write these facts into UmModelConfig (where a file may still decide,
 * the column is the default) and the forward reads the configuration. */
typedef struct {
  UmArch      arch;
  const char *name;          /* shown to the user: "LLaDA", "Dream", "LLaDA-MoE", "RND1", "LLaDA 2" */
  const char *gguf_arch;     /* general.architecture */
  gboolean    shift_logits;  /* position i reads the logits row i-1 (row 0 for position 0); a file may say */
  UmSchedule  schedule;
  /* Attention. */
  UmFamilyHas qkv_bias;      /* Dream's always; LLaDA's never; the others' as the file has them */
  gboolean    qk_norm;       /* per-head RMSNorm of q and k */
  const char *hf_qk_norm_key;   /* the config.json switch that may turn qk_norm off (default on); NULL: none */
  gboolean    head_dim_fixed;   /* the head size is d_model / n_heads (OLMo's layout); pruned files keep it */
  gboolean    rope_partial;     /* RoPE may rotate only the first rope.dimension_count values of a head */
  gboolean    gguf_rope_interleaved;  /* llama.cpp's converter permuted Q/K rows for pairs (2i, 2i+1) */
  gboolean    block_causal;  /* a query sees its own block and earlier ones (cfg.block_causal) */
  /* Experts. */
  gboolean    experts;       /* a mixture-of-experts family: its files must have experts */
  gboolean    router_norm;   /* the chosen experts' weights are renormalised, unless the file says */
  /* Tokens and names. */
  const char *eot_token;     /* the end of a turn in its chat template */
  gint32      hf_mask_id;    /* config.json's mask_token_id when absent (the reference's); -1: required */
  const UmWeightNames *hf_names;    /* a Hugging Face folder's tensor names */
  const UmWeightNames *gguf_names;  /* a GGUF file's */
} UmArchInfo;

const UmArchInfo *um_arch_info (UmArch arch);
/* The family a model is taken for while its own is unknown or not chosen
 * yet (its options and schedule are shown): the table's first row, which
 * um_arch_info () also gives for an arch out of range. */
UmArch            um_arch_fallback (void);
/* The rows of the family table: front ends list the families by walking
 * arch 0 .. um_arch_count () - 1, never naming one. */
guint             um_arch_count (void);
/* The family whose table name (UmArchInfo.name) is @name; FALSE if none. */
gboolean          um_arch_from_name (const char *name, UmArch *out);
/* The family of a GGUF general.architecture; FALSE for one we do not run. */
gboolean          um_arch_from_gguf (const char *gguf_arch, UmArch *out);

typedef enum {
  UM_ROUTER_SOFTMAX,
  UM_ROUTER_SIGMOID,
} UmRouterFunc;

typedef struct {
  UmArch   arch;
  guint    n_layers;
  guint    d_model;
  guint    n_heads;
  guint    n_kv_heads;
  guint    head_dim;
  guint    mlp_hidden;
  guint    vocab_size;      /* rows of the embedding and of the LM head */
  guint    max_seq_len;
  double   rope_theta;
  double   rms_eps;
  gboolean rope_interleaved; /* GGUF stores Q/K rows permuted for pairs (2i, 2i+1) */
  gboolean tied_embeddings;  /* LM head is the embedding (weight_tying) */
  gint32   mask_id;
  gint32   eos_id;
  gint32   eot_id;          /* -1 when the vocabulary has no <|eot_id|> */
  gint32   bos_id;          /* -1 when unknown */
  gint32   pad_id;

  /* Attention. head_dim need not be d_model / n_heads (RND1: queries are
   * n_heads·head_dim = 128 wide on a 64-wide model). */
  gboolean qkv_bias;         /* q, k and v projections add a bias (Dream) */
  gboolean qk_norm;          /* per-head RMSNorm of q and k (weights [head_dim]) before RoPE */
  gboolean shift_logits;     /* the sampler reads row i-1 for position i (Dream, RND1) */
  /* RoPE rotates the first rope_dim of each head's head_dim values (NEOX:
   * pairs (i, i + rope_dim/2), frequencies theta^(-2i/rope_dim)); the rest
   * pass unchanged. rope_dim = head_dim except LLaDA 2.x (half). Even. */
  guint    rope_dim;
  /* Attention is block-causal (LLaDA 2.x): a query sees the keys of its own
   * block and of earlier ones, blocks of the generation's block_length
   * aligned to position 0 (um_forward_set_attention_block ()). */
  gboolean block_causal;

  /* Mixture of experts. n_experts 0: every layer has the dense SwiGLU FFN
   * of mlp_hidden. Otherwise layers from n_dense_leading on route each
   * token to n_experts_used of n_experts SwiGLU experts of expert_ffn. */
  guint        n_experts;
  guint        n_experts_used;
  guint        expert_ffn;
  guint        n_dense_leading;
  UmRouterFunc router_func;
  gboolean     router_norm;  /* renormalise the chosen experts' weights to sum 1 */
  double       router_scale; /* the routed weights × this (1: none) */
  /* Group-limited routing (LLaDA 2.x, DeepSeek-V3): n_expert_groups > 1
   * splits the experts into that many equal groups; a group scores the sum
   * of its two best selection scores (probability + selection bias), the
   * n_groups_used best groups are kept and the top-k is taken inside them.
   * 0 or 1: no groups. */
  guint        n_expert_groups;
  guint        n_groups_used;
  /* Every MoE layer has a per-expert selection bias (LLaDA 2.x's
   * expert_bias, GGUF exp_probs_b.bias): UmLayerWeights.router_bias. */
  gboolean     expert_bias;
  /* Shared expert of every MoE layer: a SwiGLU FFN of this width applied to
   * every token and added unweighted (LLaDA 2.x: moe_intermediate_size ×
   * num_shared_experts). 0: none. */
  guint        shared_ffn;
} UmModelConfig;

/* Reads config.json and, if present, generation_config.json in @dir. */
gboolean um_model_config_load_hf (UmModelConfig *cfg,
                                  const char    *dir,
                                  GError       **error);

/* Checks internal consistency (heads divide d_model, ...); @source names the
 * file in messages. */
gboolean um_model_config_validate (const UmModelConfig *cfg,
                                   const char          *source,
                                   GError             **error);

/* Whether layer @l has a mixture-of-experts FFN. */
static inline gboolean
um_model_config_layer_is_moe (const UmModelConfig *cfg, guint l)
{
  return cfg->n_experts > 0 && l >= cfg->n_dense_leading;
}

/* Parameter count implied by the configuration (every expert). */
uint64_t um_model_config_n_params (const UmModelConfig *cfg);
/* The parameters one token uses: the same with n_experts_used experts per
 * MoE layer (the router counts whole). Equal to the total for dense models. */
uint64_t um_model_config_n_active_params (const UmModelConfig *cfg);

G_END_DECLS

/* um-weight-names.h — the tensor names of each file layout the families
 * use: a column of the family table (um_arch_info ()->hf_names and
 * ->gguf_names), read by the loaders' one binder (um_model_bind_weights ()). */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* Tensor names of one file layout; layer tensors are
 * layer_prefix + index + "." + suffix. The optional ones are looked up only
 * when the configuration has them (biases, QK-norm, experts). Experts are
 * either stacked in one tensor per matrix ([E, rows, cols], GGUF), or, when
 * experts_prefix is set, one tensor per expert named
 * layer_prefix + index + "." + experts_prefix + e + "." + suffix (HF).
 * With wqkv set, q, k and v are one stored tensor [(H + 2·Hkv)·hd, D]
 * (and bqkv their one bias) instead of wq, wk, wv (bq, bk, bv). A file
 * holding wo_bias is refused (no family adds one). router_bias: each MoE
 * layer's selection bias, bound when the first MoE layer has it; the
 * shared expert is bound when the configuration has one. */
typedef struct {
  const char *tok_embd, *out_norm, *output;
  const char *layer_prefix;
  const char *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w_gate, *w_up, *w_down;
  const char *bq, *bk, *bv, *q_norm, *k_norm;
  const char *router, *experts_prefix, *exp_gate, *exp_up, *exp_down;
  const char *wqkv, *bqkv, *wo_bias;
  const char *router_bias, *sh_gate, *sh_up, *sh_down;
} UmWeightNames;

/* LLaDA's Hugging Face folders: OLMo's names. */
extern const UmWeightNames um_weight_names_olmo;
/* Dream, LLaDA-MoE and RND1 folders: the Llama/Qwen names. */
extern const UmWeightNames um_weight_names_hf;
/* LLaDA 2.x folders: BailingMoeV2's names (LLaDA2MoeModelLM). */
extern const UmWeightNames um_weight_names_llada2_hf;
/* llama.cpp's GGUF names (llada, dream, llada-moe, rnd1). */
extern const UmWeightNames um_weight_names_gguf;
/* Our llada2 GGUF: BailingMoeV2's names (fused attn_qkv, selection bias, shared expert). */
extern const UmWeightNames um_weight_names_llada2_gguf;

G_END_DECLS

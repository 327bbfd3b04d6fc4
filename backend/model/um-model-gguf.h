/* um-model-gguf.h — internal: filling an UmModel from a llama.cpp GGUF. */
#pragma once

#include "um-gguf.h"
#include "um-model.h"

G_BEGIN_DECLS

gboolean um_model_load_gguf (UmModel *model, GError **error);
/* The same from a file already open (the fuzzer's, in memory); @model
 * takes @g over, and frees it with itself. */
gboolean um_model_load_gguf_from (UmModel *model, UmGguf *g, GError **error);
void     um_model_gguf_release (UmModel *model);

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

/* Binds every weight by name, checking shapes against the configuration. */
gboolean um_model_bind_weights (UmModel *model, const UmWeightNames *names, GError **error);

/* Shared with um-model.c */
gboolean um_model_bind_weight (UmModel *model, UmWeight *w, const char *name,
                               uint64_t rows, uint64_t cols, GError **error);
gboolean um_model_weight_to_f32 (UmModel *model, UmWeight *w, GError **error);
void     um_model_resolve_special_ids (UmModel *model);

G_END_DECLS

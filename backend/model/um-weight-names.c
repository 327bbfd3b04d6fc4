/* um-weight-names.c — the tensor names of each file layout (see
 * um-weight-names.h). */
#include "um-weight-names.h"

const UmWeightNames um_weight_names_olmo = {
  .tok_embd = "model.transformer.wte.weight", .out_norm = "model.transformer.ln_f.weight",
  .output = "model.transformer.ff_out.weight", .layer_prefix = "model.transformer.blocks.",
  .attn_norm = "attn_norm.weight", .wq = "q_proj.weight", .wk = "k_proj.weight", .wv = "v_proj.weight",
  .wo = "attn_out.weight", .ffn_norm = "ff_norm.weight", .w_gate = "ff_proj.weight",
  .w_up = "up_proj.weight", .w_down = "ff_out.weight",
};

const UmWeightNames um_weight_names_hf = {
  .tok_embd = "model.embed_tokens.weight", .out_norm = "model.norm.weight", .output = "lm_head.weight",
  .layer_prefix = "model.layers.", .attn_norm = "input_layernorm.weight",
  .wq = "self_attn.q_proj.weight", .wk = "self_attn.k_proj.weight", .wv = "self_attn.v_proj.weight",
  .wo = "self_attn.o_proj.weight", .ffn_norm = "post_attention_layernorm.weight",
  .w_gate = "mlp.gate_proj.weight", .w_up = "mlp.up_proj.weight", .w_down = "mlp.down_proj.weight",
  .bq = "self_attn.q_proj.bias", .bk = "self_attn.k_proj.bias", .bv = "self_attn.v_proj.bias",
  .q_norm = "self_attn.q_norm.weight", .k_norm = "self_attn.k_norm.weight",
  .router = "mlp.gate.weight", .experts_prefix = "mlp.experts.",
  .exp_gate = "gate_proj.weight", .exp_up = "up_proj.weight", .exp_down = "down_proj.weight",
};

const UmWeightNames um_weight_names_llada2_hf = {
  .tok_embd = "model.word_embeddings.weight", .out_norm = "model.norm.weight", .output = "lm_head.weight",
  .layer_prefix = "model.layers.", .attn_norm = "input_layernorm.weight",
  .wqkv = "attention.query_key_value.weight", .bqkv = "attention.query_key_value.bias",
  .wo = "attention.dense.weight", .wo_bias = "attention.dense.bias",
  .ffn_norm = "post_attention_layernorm.weight",
  .w_gate = "mlp.gate_proj.weight", .w_up = "mlp.up_proj.weight", .w_down = "mlp.down_proj.weight",
  .q_norm = "attention.query_layernorm.weight", .k_norm = "attention.key_layernorm.weight",
  .router = "mlp.gate.weight", .router_bias = "mlp.gate.expert_bias", .experts_prefix = "mlp.experts.",
  .exp_gate = "gate_proj.weight", .exp_up = "up_proj.weight", .exp_down = "down_proj.weight",
  .sh_gate = "mlp.shared_experts.gate_proj.weight", .sh_up = "mlp.shared_experts.up_proj.weight",
  .sh_down = "mlp.shared_experts.down_proj.weight",
};

const UmWeightNames um_weight_names_gguf = {
  .tok_embd = "token_embd.weight", .out_norm = "output_norm.weight", .output = "output.weight",
  .layer_prefix = "blk.", .attn_norm = "attn_norm.weight", .wq = "attn_q.weight", .wk = "attn_k.weight",
  .wv = "attn_v.weight", .wo = "attn_output.weight", .ffn_norm = "ffn_norm.weight",
  .w_gate = "ffn_gate.weight", .w_up = "ffn_up.weight", .w_down = "ffn_down.weight",
  .bq = "attn_q.bias", .bk = "attn_k.bias", .bv = "attn_v.bias",
  .q_norm = "attn_q_norm.weight", .k_norm = "attn_k_norm.weight",
  .router = "ffn_gate_inp.weight",
  .exp_gate = "ffn_gate_exps.weight", .exp_up = "ffn_up_exps.weight", .exp_down = "ffn_down_exps.weight",
};

const UmWeightNames um_weight_names_llada2_gguf = {
  .tok_embd = "token_embd.weight", .out_norm = "output_norm.weight", .output = "output.weight",
  .layer_prefix = "blk.", .attn_norm = "attn_norm.weight", .wqkv = "attn_qkv.weight", .bqkv = "attn_qkv.bias",
  .wo = "attn_output.weight", .wo_bias = "attn_output.bias", .ffn_norm = "ffn_norm.weight",
  .w_gate = "ffn_gate.weight", .w_up = "ffn_up.weight", .w_down = "ffn_down.weight",
  .q_norm = "attn_q_norm.weight", .k_norm = "attn_k_norm.weight",
  .router = "ffn_gate_inp.weight", .router_bias = "exp_probs_b.bias",
  .exp_gate = "ffn_gate_exps.weight", .exp_up = "ffn_up_exps.weight", .exp_down = "ffn_down_exps.weight",
  .sh_gate = "ffn_gate_shexp.weight", .sh_up = "ffn_up_shexp.weight", .sh_down = "ffn_down_shexp.weight",
};

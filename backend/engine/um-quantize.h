/* um-quantize.h — writing a model as a llama.cpp-compatible GGUF in any
 * supported type, optionally with structured pruning: what `unmask-cli
 * quantize` and the memory modes (um-convert-model.h) use. What is written
 * (types, pruning, the tensor list) is planned in um-quantize-plan.h. */
#pragma once

#include <gio/gio.h>

#include "um-model.h"
#include "um-quantize-plan.h"

G_BEGIN_DECLS

typedef void (*UmQuantizeProgress) (double fraction, const char *tensor, gpointer user_data);

/* Writes @model converted with @opts (um-quantize-plan.h) to @out_path.
 * The file is what llama.cpp's converter writes for the model's family
 * (general.architecture llada, dream, llada-moe or rnd1, with that family's
 * keys, tensor names and tokenizer pre-tokenizer name): experts as 3-D
 * ffn_{gate,up,down}_exps, the router as ffn_gate_inp, biases as
 * attn_{q,k,v}.bias, QK-norms as attn_{q,k}_norm. Only LLaDA's Q/K rows are
 * permuted (its GGUF runs interleaved RoPE); the other families are NeoX in
 * both layouts. LLaDA 2 is written as our "llada2" (BailingMoeV2's keys and
 * names, see docs/families-and-schedules.md): q/k/v as one attn_qkv (from the stored fused
 * tensor; its _M type is llama-quantize's for attn_qkv: Q5_K in Q4_K_M,
 * Q6_K in Q5_K_M), the selection bias as exp_probs_b.bias (F32), the shared
 * expert as ffn_{gate,up,down}_shexp (ffn_down_shexp typed as ffn_down).
 *
 * The file is written atomically: @out_path is either untouched or complete.
 * Pruned files record the ratios (unmask.prune.heads, unmask.prune.ffn) and
 * their per-layer counts as arrays (llada.attention.head_count, ...). Source
 * pages are dropped after each tensor (um_tensor_data_release()), so memory
 * stays near one tensor plus 16 MiB of output rows, whatever the model. */
gboolean um_quantize_model_full (UmModel                 *model,
                                 const UmQuantizeOptions *opts,
                                 const char              *out_path,
                                 UmQuantizeProgress       progress_cb,
                                 gpointer                 user_data,
                                 GCancellable            *cancellable,
                                 GError                 **error);

/* um_quantize_model_full() without pruning. */
gboolean um_quantize_model (UmModel            *model,
                            const char         *type,
                            const char         *out_path,
                            UmQuantizeProgress  progress_cb,
                            gpointer            user_data,
                            GCancellable       *cancellable,
                            GError            **error);

/* um_quantize_model_full() adding string metadata: @extra_kv is key, value,
 * key, value, ..., NULL. For the converted-weight cache (um-convert-model.c). */
gboolean um_quantize_model_with_metadata (UmModel                 *model,
                                          const UmQuantizeOptions *opts,
                                          const char              *out_path,
                                          const char * const      *extra_kv,
                                          UmQuantizeProgress       progress_cb,
                                          gpointer                 user_data,
                                          GCancellable            *cancellable,
                                          GError                 **error);

G_END_DECLS

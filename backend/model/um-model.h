/* um-model.h — a loaded diffusion-LM checkpoint: configuration, tokenizer and the
 * weights as views into the memory-mapped files (nothing is copied except
 * tiny norm vectors that need converting to float). */
#pragma once

#include <gio/gio.h>

#include "um-chat-template.h"
#include "um-model-config.h"
#include "um-tensor-table.h"
#include "um-tokenizer.h"

G_BEGIN_DECLS

/* A 2-D weight [rows, cols] (cols contiguous) in its stored format. */
typedef struct {
  const char   *name;
  UmDType       dtype;
  uint64_t      rows;
  uint64_t      cols;
  uint64_t      row_bytes;
  const void   *data;
} UmWeight;

typedef struct {
  UmWeight attn_norm;   /* [1, D] float */
  UmWeight wq;          /* [H*hd, D] */
  UmWeight wk;          /* [Hkv*hd, D] */
  UmWeight wv;          /* [Hkv*hd, D] */
  UmWeight wo;          /* [D, H*hd] */
  UmWeight ffn_norm;    /* [1, D] float */
  UmWeight w_gate;      /* [F, D]; MoE: the experts stacked, [E·F, D] (expert e: rows e·F…) */
  UmWeight w_up;        /* [F, D]; MoE: [E·F, D] */
  UmWeight w_down;      /* [D, F]; MoE: [E·D, F] (expert e: rows e·D…) */
  /* Small tensors, held as float like the norms; data NULL when the
   * family or layer has none. */
  UmWeight bq, bk, bv;  /* [1, H·hd], [1, Hkv·hd], [1, Hkv·hd]: projection biases (Dream) */
  UmWeight q_norm;      /* [1, hd]: per-head RMSNorm of q (QK-norm) */
  UmWeight k_norm;      /* [1, hd] */
  UmWeight router;      /* [E, D]: the router's logits are x · routerᵀ (MoE layers) */
  UmWeight router_bias; /* [1, E]: added for the choice of experts only (selection bias) */
  UmWeight sh_gate;     /* [Fs, D]: the shared expert (data NULL when none) */
  UmWeight sh_up;       /* [Fs, D] */
  UmWeight sh_down;     /* [D, Fs] */
  /* Fused q/k/v (LLaDA 2.x stores query_key_value [(H + 2·Hkv)·hd, D]):
   * wq, wk and wv are then row slices of this stored tensor, which writers
   * keep whole; data NULL for separate projections. */
  UmWeight wqkv;
  /* This layer's counts: the configuration's, unless structured pruning
   * (memory modes) removed heads or FFN neurons from it. */
  guint    n_heads;
  guint    n_kv_heads;
  guint    ffn;           /* F: the dense FFN's, or one expert's */
  guint    n_experts;     /* E: 0 for a dense FFN */
  guint    shared_ffn;    /* Fs: the shared expert's width, 0 when none */
} UmLayerWeights;

/* Expert @e's slice of a stacked expert matrix @w of @n_experts experts. */
static inline UmWeight
um_weight_expert (const UmWeight *w, guint n_experts, guint e)
{
  UmWeight s = *w;
  s.rows = w->rows / n_experts;
  s.data = (const guint8 *) w->data + (size_t) e * s.rows * w->row_bytes;
  return s;
}

typedef enum {
  UM_MODEL_FORMAT_SAFETENSORS,
  UM_MODEL_FORMAT_GGUF,
} UmModelFormat;

typedef struct {
  char            *path;
  char            *display_name;
  UmModelFormat    format;
  UmModelConfig    cfg;
  UmTokenizer     *tokenizer;
  UmChatTemplate  *chat_template; /* recognized from the model's Jinja template, or the family's */
  UmTensorTable   *tensors;       /* borrowed from the GGUF for GGUF files */
  UmWeight         tok_embd;      /* [V, D] */
  UmWeight         out_norm;      /* [1, D] float */
  UmWeight         output;        /* [V, D] */
  UmLayerWeights  *layers;        /* n_layers */

  /*< private >*/
  gpointer         gguf;
  GPtrArray       *owned;         /* converted norm vectors */
} UmModel;

/* @path: a Hugging Face model folder or a .gguf file. */
UmModel *um_model_load (const char   *path,
                        GCancellable *cancellable,
                        GError      **error);
void     um_model_free (UmModel *model);

/* The chat prompt for @user_text in @model's template (see
 * um_chat_template_build_prompt; @prev_ids NULL for the first turn). */
gboolean um_model_build_chat_prompt (UmModel      *model,
                                     const gint32 *prev_ids,
                                     gsize         n_prev,
                                     const char   *user_text,
                                     GArray       *out_ids,
                                     GError      **error);

/* Bytes of all weights as stored. */
uint64_t um_model_weight_bytes (const UmModel *model);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmModel, um_model_free)

G_END_DECLS

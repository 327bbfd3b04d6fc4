/* um-model-config.h — hyperparameters and special ids of a LLaDA model,
 * read from config.json (+ generation_config.json) or GGUF metadata, and
 * validated against the tensor table. Nothing is hard-coded. */
#pragma once

#include <glib.h>
#include <stdint.h>

#include "um-tensor-table.h"

G_BEGIN_DECLS

typedef struct {
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

/* Parameter count implied by the configuration. */
uint64_t um_model_config_n_params (const UmModelConfig *cfg);

G_END_DECLS

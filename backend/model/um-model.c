#include "um-model.h"

#include <json-glib/json-glib.h>
#include <string.h>

#include "um-error.h"
#include "um-half.h"
#include "um-json.h"
#include "um-model-gguf.h"
#include "um-safetensors.h"

/* Checks a tensor against the shape the configuration implies and fills @w. */
gboolean
um_model_bind_weight (UmModel    *model,
                      UmWeight   *w,
                      const char *name,
                      uint64_t    rows,
                      uint64_t    cols,
                      GError    **error)
{
  const UmTensorInfo *info = um_tensor_table_lookup (model->tensors, name);
  uint64_t got_rows, got_cols;

  if (info == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: tensor “%s” is missing",
                   model->display_name, name);
      return FALSE;
    }
  if (info->dtype == UM_DTYPE_I32)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "%s: tensor “%s” is integer, not a weight",
                   info->file, name);
      return FALSE;
    }
  /* Norm vectors are 1-D; everything else [rows, cols]. */
  if (info->n_dims == 1)
    {
      got_rows = 1;
      got_cols = info->shape[0];
    }
  else if (info->n_dims == 2)
    {
      got_rows = info->shape[0];
      got_cols = info->shape[1];
    }
  else
    got_rows = got_cols = 0;
  if (got_rows != rows || got_cols != cols)
    {
      g_autofree char *shape = um_tensor_shape_string (info);
      g_set_error (error, UM_ERROR, UM_ERROR_CONFIG,
                   "%s: tensor “%s” has shape %s but the configuration implies [%" G_GUINT64_FORMAT
                   ", %" G_GUINT64_FORMAT "]",
                   info->file, name, shape, rows, cols);
      return FALSE;
    }
  w->name = info->name;
  w->dtype = info->dtype;
  w->rows = rows;
  w->cols = cols;
  w->row_bytes = info->n_bytes / rows;
  w->data = info->data;
  return TRUE;
}

/* Norms, biases and routers are small; keep them as aligned floats whatever
 * the file holds. */
gboolean
um_model_weight_to_f32 (UmModel *model, UmWeight *w, GError **error)
{
  float *copy;
  uint64_t n = w->rows * w->cols;

  if (w->dtype == UM_DTYPE_F32 && ((uintptr_t) w->data % sizeof (float)) == 0)
    return TRUE;
  copy = g_new (float, n);
  if (w->dtype == UM_DTYPE_F32)
    memcpy (copy, w->data, n * sizeof (float));
  else if (w->dtype == UM_DTYPE_F16 || w->dtype == UM_DTYPE_BF16)
    {
      for (uint64_t i = 0; i < n; i++)
        {
          uint16_t h;
          memcpy (&h, (const guint8 *) w->data + 2 * i, 2);
          copy[i] = w->dtype == UM_DTYPE_F16 ? um_f16_to_f32 (h) : um_bf16_to_f32 (h);
        }
    }
  else
    {
      g_free (copy);
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                   "%s: tensor “%s” is stored as %s; norms, biases and routers must be float",
                   model->display_name, w->name, um_dtype_name (w->dtype));
      return FALSE;
    }
  g_ptr_array_add (model->owned, copy);
  w->dtype = UM_DTYPE_F32;
  w->data = copy;
  w->row_bytes = w->cols * sizeof (float);
  return TRUE;
}

/* A stacked expert tensor [E, rows, cols] (GGUF's ffn_*_exps), seen as the
 * 2-D [E·rows, cols] the forward slices with um_weight_expert(). */
static gboolean
bind_stacked (UmModel *model, UmWeight *w, const char *name, guint n_experts,
              uint64_t rows, uint64_t cols, GError **error)
{
  const UmTensorInfo *info = um_tensor_table_lookup (model->tensors, name);

  if (info == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "%s: tensor “%s” is missing", model->display_name, name);
      return FALSE;
    }
  if (info->dtype == UM_DTYPE_I32)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "%s: tensor “%s” is integer, not a weight",
                   info->file, name);
      return FALSE;
    }
  if (info->n_dims != 3 || info->shape[0] != n_experts || info->shape[1] != rows || info->shape[2] != cols)
    {
      g_autofree char *shape = um_tensor_shape_string (info);
      g_set_error (error, UM_ERROR, UM_ERROR_CONFIG,
                   "%s: tensor “%s” has shape %s but the configuration implies [%u, %" G_GUINT64_FORMAT
                   ", %" G_GUINT64_FORMAT "]", info->file, name, shape, n_experts, rows, cols);
      return FALSE;
    }
  w->name = info->name;
  w->dtype = info->dtype;
  w->rows = n_experts * rows;
  w->cols = cols;
  w->row_bytes = info->n_bytes / w->rows;
  w->data = info->data;
  return TRUE;
}

/* Experts stored one tensor each (Hugging Face): a view when they lie one
 * after the other in one file, in order; otherwise copied, in their stored
 * format, into one buffer the model owns (64-byte aligned, like a
 * mapping's pages, for the vector kernels). */
static gboolean
bind_split_experts (UmModel *model, UmWeight *w, const char *prefix, const char *suffix,
                    guint n_experts, uint64_t rows, uint64_t cols, GError **error)
{
  g_autofree UmWeight *parts = g_new0 (UmWeight, n_experts);
  g_autofree const UmTensorInfo **infos = g_new0 (const UmTensorInfo *, n_experts);
  gboolean contiguous = TRUE;
  uint64_t part_bytes;
  guint8 *raw, *dst;

  for (guint e = 0; e < n_experts; e++)
    {
      g_autofree char *name = g_strdup_printf ("%s%u.%s", prefix, e, suffix);
      if (!um_model_bind_weight (model, &parts[e], name, rows, cols, error))
        return FALSE;
      infos[e] = um_tensor_table_lookup (model->tensors, name);
      if (parts[e].dtype != parts[0].dtype)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                       "%s: tensor “%s” is stored as %s but expert 0's as %s; the experts of a layer must "
                       "share one format", infos[e]->file, name, um_dtype_name (parts[e].dtype),
                       um_dtype_name (parts[0].dtype));
          return FALSE;
        }
      if (e > 0 && (infos[e]->file != infos[0]->file
                    || infos[e]->data != infos[e - 1]->data + infos[e - 1]->n_bytes))
        contiguous = FALSE;
    }
  *w = parts[0];
  w->rows = (uint64_t) n_experts * rows;
  w->name = g_strdup_printf ("%s*.%s", prefix, suffix);
  g_ptr_array_add (model->owned, (char *) w->name);
  if (contiguous)
    return TRUE;

  part_bytes = infos[0]->n_bytes;
  raw = g_try_malloc (part_bytes * n_experts + 63);
  if (raw == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY,
                   "%s: no memory to gather the %u experts of “%s” (%.1f MiB)", model->display_name,
                   n_experts, w->name, (double) part_bytes * n_experts / 1048576.0);
      return FALSE;
    }
  g_ptr_array_add (model->owned, raw);
  dst = (guint8 *) (((uintptr_t) raw + 63) & ~(uintptr_t) 63);
  for (guint e = 0; e < n_experts; e++)
    um_tensor_data_read (infos[e]->data, part_bytes, dst + e * part_bytes);
  w->data = dst;
  return TRUE;
}

/* Rows [r0, r0 + n) of @w: a view (whole rows, so any block format). */
static UmWeight
weight_rows (const UmWeight *w, uint64_t r0, uint64_t n)
{
  UmWeight s = *w;
  s.rows = n;
  s.data = (const guint8 *) w->data + r0 * w->row_bytes;
  return s;
}

/* Values [c0, c0 + n) of a float vector: a view. */
static UmWeight
vector_cols (const UmWeight *v, uint64_t c0, uint64_t n)
{
  UmWeight s = *v;
  s.cols = n;
  s.row_bytes = n * sizeof (float);
  s.data = (const float *) v->data + c0;
  return s;
}

/* Layer @l's fused q/k/v (LLaDA 2.x's query_key_value): the stored tensor,
 * with q, k and v as views of its rows [q (H·hd) | k (Hkv·hd) | v (Hkv·hd)]. */
static gboolean
bind_fused_qkv (UmModel *model, const UmWeightNames *names, guint l, UmLayerWeights *L, GError **error)
{
  const UmModelConfig *c = &model->cfg;
  const uint64_t qd = (uint64_t) L->n_heads * c->head_dim, kvd = (uint64_t) L->n_kv_heads * c->head_dim;
  const UmTensorInfo *info;
  char name[256];

  g_snprintf (name, sizeof name, "%s%u.%s", names->layer_prefix, l, names->wqkv);
  info = um_tensor_table_lookup (model->tensors, name);
  if (info != NULL && info->n_dims == 2 && (info->shape[0] != qd + 2 * kvd || info->shape[1] != c->d_model))
    {
      g_autofree char *shape = um_tensor_shape_string (info);
      g_set_error (error, UM_ERROR, UM_ERROR_CONFIG,
                   "%s: tensor “%s” has shape %s but %u query and 2 × %u key/value heads of %u on a model of "
                   "width %u imply [%" G_GUINT64_FORMAT ", %u]", info->file, name, shape, L->n_heads,
                   L->n_kv_heads, c->head_dim, c->d_model, qd + 2 * kvd, c->d_model);
      return FALSE;
    }
  if (!um_model_bind_weight (model, &L->wqkv, name, qd + 2 * kvd, c->d_model, error))
    return FALSE;
  L->wq = weight_rows (&L->wqkv, 0, qd);
  L->wk = weight_rows (&L->wqkv, qd, kvd);
  L->wv = weight_rows (&L->wqkv, qd + kvd, kvd);
  return TRUE;
}

/* The mixture-of-experts FFN of layer @l: router and experts. */
static gboolean
bind_experts (UmModel *model, const UmWeightNames *names, guint l, UmLayerWeights *L, GError **error)
{
  const UmModelConfig *c = &model->cfg;
  uint64_t d = c->d_model, f = c->expert_ffn;
  guint E = c->n_experts;
  char name[256];
  const struct { UmWeight *w; const char *suffix; uint64_t rows, cols; } mats[] = {
    { &L->w_gate, names->exp_gate, f, d },
    { &L->w_up, names->exp_up, f, d },
    { &L->w_down, names->exp_down, d, f },
  };

  if (names->router == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "%s: this layout has no experts",
                   model->display_name);
      return FALSE;
    }
  L->n_experts = E;
  L->ffn = f;
  g_snprintf (name, sizeof name, "%s%u.%s", names->layer_prefix, l, names->router);
  if (!um_model_bind_weight (model, &L->router, name, E, d, error)
      || !um_model_weight_to_f32 (model, &L->router, error))
    return FALSE;
  if (c->expert_bias)
    {
      g_snprintf (name, sizeof name, "%s%u.%s", names->layer_prefix, l, names->router_bias);
      if (!um_model_bind_weight (model, &L->router_bias, name, 1, E, error)
          || !um_model_weight_to_f32 (model, &L->router_bias, error))
        return FALSE;
    }
  if (c->shared_ffn > 0)
    {
      const struct { UmWeight *w; const char *suffix; uint64_t rows, cols; } shared[] = {
        { &L->sh_gate, names->sh_gate, c->shared_ffn, d },
        { &L->sh_up, names->sh_up, c->shared_ffn, d },
        { &L->sh_down, names->sh_down, d, c->shared_ffn },
      };
      for (guint i = 0; i < G_N_ELEMENTS (shared); i++)
        {
          if (shared[i].suffix == NULL)
            {
              g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "%s: this layout has no shared expert",
                           model->display_name);
              return FALSE;
            }
          g_snprintf (name, sizeof name, "%s%u.%s", names->layer_prefix, l, shared[i].suffix);
          if (!um_model_bind_weight (model, shared[i].w, name, shared[i].rows, shared[i].cols, error))
            return FALSE;
        }
      L->shared_ffn = c->shared_ffn;
    }
  for (guint i = 0; i < G_N_ELEMENTS (mats); i++)
    {
      if (names->experts_prefix != NULL)
        {
          g_snprintf (name, sizeof name, "%s%u.%s", names->layer_prefix, l, names->experts_prefix);
          if (!bind_split_experts (model, mats[i].w, name, mats[i].suffix, E, mats[i].rows, mats[i].cols, error))
            return FALSE;
        }
      else
        {
          g_snprintf (name, sizeof name, "%s%u.%s", names->layer_prefix, l, mats[i].suffix);
          if (!bind_stacked (model, mats[i].w, name, E, mats[i].rows, mats[i].cols, error))
            return FALSE;
        }
    }
  return TRUE;
}

/* Biases and QK-norm weights of layer @l: small vectors, held as float. */
static gboolean
bind_attention_extras (UmModel *model, const UmWeightNames *names, guint l, UmLayerWeights *L, GError **error)
{
  const UmModelConfig *c = &model->cfg;
  uint64_t qd = (uint64_t) L->n_heads * c->head_dim, kvd = (uint64_t) L->n_kv_heads * c->head_dim;
  const struct { gboolean want; UmWeight *w; const char *suffix; uint64_t cols; } vecs[] = {
    { c->qkv_bias, &L->bq, names->bq, qd },
    { c->qkv_bias, &L->bk, names->bk, kvd },
    { c->qkv_bias, &L->bv, names->bv, kvd },
    { c->qk_norm, &L->q_norm, names->q_norm, c->head_dim },
    { c->qk_norm, &L->k_norm, names->k_norm, c->head_dim },
  };
  char name[256];
  guint first = 0;

  /* One bias for the fused q/k/v: q's, k's and v's are views of it. */
  if (c->qkv_bias && names->bqkv != NULL)
    {
      UmWeight b;
      g_snprintf (name, sizeof name, "%s%u.%s", names->layer_prefix, l, names->bqkv);
      if (!um_model_bind_weight (model, &b, name, 1, qd + 2 * kvd, error)
          || !um_model_weight_to_f32 (model, &b, error))
        return FALSE;
      L->bq = vector_cols (&b, 0, qd);
      L->bk = vector_cols (&b, qd, kvd);
      L->bv = vector_cols (&b, qd + kvd, kvd);
      first = 3;
    }
  for (guint i = first; i < G_N_ELEMENTS (vecs); i++)
    {
      if (!vecs[i].want)
        continue;
      if (vecs[i].suffix == NULL)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "%s: this layout has no %s",
                       model->display_name, i < 3 ? "attention biases" : "QK-norm");
          return FALSE;
        }
      g_snprintf (name, sizeof name, "%s%u.%s", names->layer_prefix, l, vecs[i].suffix);
      if (!um_model_bind_weight (model, vecs[i].w, name, 1, vecs[i].cols, error)
          || !um_model_weight_to_f32 (model, vecs[i].w, error))
        return FALSE;
    }
  return TRUE;
}

gboolean
um_model_bind_weights (UmModel *model, const UmWeightNames *names, GError **error)
{
  const UmModelConfig *c = &model->cfg;
  uint64_t d = c->d_model, f = c->mlp_hidden, v = c->vocab_size;
  uint64_t qd = (uint64_t) c->n_heads * c->head_dim, kvd = (uint64_t) c->n_kv_heads * c->head_dim;
  char name[256];

  if (!um_model_bind_weight (model, &model->tok_embd, names->tok_embd, v, d, error)
      || !um_model_bind_weight (model, &model->out_norm, names->out_norm, 1, d, error)
      || !um_model_weight_to_f32 (model, &model->out_norm, error))
    return FALSE;
  if (c->tied_embeddings)
    model->output = model->tok_embd;
  else if (!um_model_bind_weight (model, &model->output, names->output, v, d, error))
    return FALSE;
  /* The selection bias is optional (llama.cpp's exp_probs_b); the first
   * expert layer decides for all. */
  model->cfg.expert_bias = FALSE;
  if (names->router_bias != NULL && c->n_experts > 0 && c->n_dense_leading < c->n_layers)
    {
      g_snprintf (name, sizeof name, "%s%u.%s", names->layer_prefix, c->n_dense_leading, names->router_bias);
      model->cfg.expert_bias = um_tensor_table_lookup (model->tensors, name) != NULL;
    }

  for (guint l = 0; l < c->n_layers; l++)
    {
      UmLayerWeights *L = &model->layers[l];
      gboolean moe = um_model_config_layer_is_moe (c, l);
      if (L->n_heads == 0)
        {
          L->n_heads = c->n_heads;
          L->n_kv_heads = c->n_kv_heads;
          L->ffn = c->mlp_hidden;
        }
      qd = (uint64_t) L->n_heads * c->head_dim;
      kvd = (uint64_t) L->n_kv_heads * c->head_dim;
      f = L->ffn;
      const struct { UmWeight *w; const char *suffix; uint64_t rows, cols; } per_layer[] = {
        { &L->attn_norm, names->attn_norm, 1, d },
        { &L->wq, names->wq, qd, d },
        { &L->wk, names->wk, kvd, d },
        { &L->wv, names->wv, kvd, d },
        { &L->wo, names->wo, d, qd },
        { &L->ffn_norm, names->ffn_norm, 1, d },
        { &L->w_gate, names->w_gate, f, d },
        { &L->w_up, names->w_up, f, d },
        { &L->w_down, names->w_down, d, f },
      };
      /* A MoE layer binds its experts instead of the dense FFN (the last
       * three); a fused layout its q/k/v as one (their names NULL). */
      for (guint i = 0; i < G_N_ELEMENTS (per_layer) - (moe ? 3 : 0); i++)
        {
          if (per_layer[i].suffix == NULL)
            continue;
          g_snprintf (name, sizeof name, "%s%u.%s", names->layer_prefix, l, per_layer[i].suffix);
          if (!um_model_bind_weight (model, per_layer[i].w, name, per_layer[i].rows, per_layer[i].cols, error))
            return FALSE;
        }
      if (names->wqkv != NULL && !bind_fused_qkv (model, names, l, L, error))
        return FALSE;
      if (names->wo_bias != NULL)
        {
          g_snprintf (name, sizeof name, "%s%u.%s", names->layer_prefix, l, names->wo_bias);
          if (um_tensor_table_lookup (model->tensors, name) != NULL)
            {
              g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                           "%s: tensor “%s”: a bias on the attention output is not supported",
                           model->display_name, name);
              return FALSE;
            }
        }
      if (!um_model_weight_to_f32 (model, &L->attn_norm, error)
          || !um_model_weight_to_f32 (model, &L->ffn_norm, error)
          || !bind_attention_extras (model, names, l, L, error)
          || (moe && !bind_experts (model, names, l, L, error)))
        return FALSE;
    }
  return TRUE;
}

/* tokenizer_config.json's "bos_token" may be a string or {"content": ...}.
 * A missing file or field leaves *@bos at -1; a file that is not JSON is
 * an error like any other broken model file. */
static gboolean
bos_from_tokenizer_config (UmModel *model, const char *dir, gint32 *bos, GError **error)
{
  g_autofree char *path = g_build_filename (dir, "tokenizer_config.json", NULL);
  g_autoptr(GError) local = NULL;
  g_autoptr(JsonNode) root = NULL;
  JsonObject *obj;
  JsonNode *node;
  const char *text = NULL;

  *bos = -1;
  root = um_json_parse_file (path, "tokenizer_config.json", NULL, &local);
  if (root == NULL)
    {
      if (um_json_error_is_missing (local))
        return TRUE;
      g_propagate_error (error, g_steal_pointer (&local));
      return FALSE;
    }
  if ((obj = um_json_root_object (root, "tokenizer_config.json", error)) == NULL)
    return FALSE;
  /* A string, or an added token's object with its content. */
  node = json_object_get_member (obj, "bos_token");
  text = um_json_get_string (obj, "bos_token");
  if (text == NULL && node != NULL && JSON_NODE_TYPE (node) == JSON_NODE_OBJECT)
    text = json_object_get_string_member_with_default (json_node_get_object (node), "content", NULL);
  if (text != NULL)
    *bos = um_tokenizer_token_to_id (model->tokenizer, text);
  return TRUE;
}

/* Ids the configuration does not carry come from the vocabulary: the end
 * of a turn is each family's chat template's (LLaDA's Llama-3 one, Dream's
 * and RND1's ChatML, LLaDA-MoE's and LLaDA 2's Ling one). */
void
um_model_resolve_special_ids (UmModel *model)
{
  UmModelConfig *c = &model->cfg;
  if (c->eot_id < 0)
    c->eot_id = um_tokenizer_token_to_id (model->tokenizer, um_arch_info (c->arch)->eot_token);
  if (c->bos_id < 0)
    c->bos_id = um_tokenizer_token_to_id (model->tokenizer, "<|startoftext|>");
}

static gboolean
load_hf_dir (UmModel *model, GError **error)
{
  if (!um_model_config_load_hf (&model->cfg, model->path, error))
    return FALSE;
  /* tokenizer.json, else the slow vocab.json + merges.txt (Dream) */
  model->tokenizer = um_tokenizer_new_from_dir (model->path, error);
  if (model->tokenizer == NULL)
    return FALSE;
  if (um_tokenizer_vocab_size (model->tokenizer) > model->cfg.vocab_size)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_CONFIG,
                   "tokenizer.json: the vocabulary has %u tokens but config.json's vocab_size is %u",
                   um_tokenizer_vocab_size (model->tokenizer), model->cfg.vocab_size);
      return FALSE;
    }
  if (model->cfg.bos_id < 0 && !bos_from_tokenizer_config (model, model->path, &model->cfg.bos_id, error))
    return FALSE;
  model->chat_template = um_chat_template_from_dir (model->path, model->cfg.arch, error);
  if (model->chat_template == NULL)
    return FALSE;
  um_model_resolve_special_ids (model);
  if (!um_model_config_validate (&model->cfg, "config.json", error))
    return FALSE;

  model->tensors = um_safetensors_open_dir (model->path, error);
  if (model->tensors == NULL)
    return FALSE;
  model->layers = g_new0 (UmLayerWeights, model->cfg.n_layers);
  return um_model_bind_weights (model, um_arch_info (model->cfg.arch)->hf_names, error);
}

UmModel *
um_model_load (const char   *path,
               GCancellable *cancellable,
               GError      **error)
{
  g_autoptr(UmModel) model = g_new0 (UmModel, 1);

  model->path = g_strdup (path);
  model->display_name = g_path_get_basename (path);
  model->owned = g_ptr_array_new_with_free_func (g_free);

  if (g_cancellable_set_error_if_cancelled (cancellable, error))
    return NULL;
  if (g_file_test (path, G_FILE_TEST_IS_DIR))
    {
      model->format = UM_MODEL_FORMAT_SAFETENSORS;
      if (!load_hf_dir (model, error))
        return NULL;
    }
  else if (g_file_test (path, G_FILE_TEST_IS_REGULAR))
    {
      model->format = UM_MODEL_FORMAT_GGUF;
      if (!um_model_load_gguf (model, error))
        return NULL;
    }
  else
    {
      g_set_error (error, UM_ERROR, UM_ERROR_IO,
                   "%s: no such model folder or .gguf file", path);
      return NULL;
    }
  return g_steal_pointer (&model);
}

void
um_model_free (UmModel *model)
{
  if (model == NULL)
    return;
  g_clear_pointer (&model->tokenizer, um_tokenizer_free);
  g_clear_pointer (&model->chat_template, um_chat_template_free);
  if (model->gguf != NULL)
    um_model_gguf_release (model);
  else
    g_clear_pointer (&model->tensors, um_tensor_table_free);
  g_clear_pointer (&model->owned, g_ptr_array_unref);
  g_free (model->layers);
  g_free (model->path);
  g_free (model->display_name);
  g_free (model);
}

uint64_t
um_model_weight_bytes (const UmModel *model)
{
  return model->tensors ? um_tensor_table_total_bytes (model->tensors) : 0;
}

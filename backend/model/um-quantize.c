#include "um-quantize.h"

#include <omp.h>
#include <string.h>

#include "um-error.h"
#include "um-gguf.h"
#include "um-quant.h"

typedef struct {
  const char *name;
  UmDType     base;
  gboolean    k_mix;        /* the _M mixes */
  guint32     file_type;    /* llama.cpp's general.file_type */
} QuantType;

static const QuantType quant_types[] = {
  { "F32",    UM_DTYPE_F32,  FALSE, 0 },
  { "F16",    UM_DTYPE_F16,  FALSE, 1 },
  { "BF16",   UM_DTYPE_BF16, FALSE, 32 },
  { "Q8_0",   UM_DTYPE_Q8_0, FALSE, 7 },
  { "Q4_0",   UM_DTYPE_Q4_0, FALSE, 2 },
  { "Q4_1",   UM_DTYPE_Q4_1, FALSE, 3 },
  { "Q5_0",   UM_DTYPE_Q5_0, FALSE, 8 },
  { "Q5_1",   UM_DTYPE_Q5_1, FALSE, 9 },
  { "Q4_K",   UM_DTYPE_Q4_K, FALSE, 14 },
  { "Q5_K",   UM_DTYPE_Q5_K, FALSE, 16 },
  { "Q6_K",   UM_DTYPE_Q6_K, FALSE, 18 },
  { "Q4_K_M", UM_DTYPE_Q4_K, TRUE,  15 },
  { "Q5_K_M", UM_DTYPE_Q5_K, TRUE,  17 },
};

static const QuantType *
find_type (const char *name)
{
  for (guint i = 0; i < G_N_ELEMENTS (quant_types); i++)
    if (g_ascii_strcasecmp (name, quant_types[i].name) == 0)
      return &quant_types[i];
  return NULL;
}

gboolean
um_quantize_type_is_valid (const char *type)
{
  return type != NULL && find_type (type) != NULL;
}

/* llama.cpp's rule for which layers get more bits in the _M mixes. */
static gboolean
use_more_bits (guint layer, guint n_layers)
{
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

/* A row length the type cannot hold falls back as llama.cpp does. */
static UmDType
fit_type (UmDType t, uint64_t cols)
{
  const UmDTypeInfo *info = um_dtype_info (t);
  if (cols % info->block_elems == 0)
    return t;
  switch (t)
    {
    case UM_DTYPE_Q4_K: t = UM_DTYPE_Q5_0; break;
    case UM_DTYPE_Q5_K: t = UM_DTYPE_Q5_1; break;
    case UM_DTYPE_Q6_K: t = UM_DTYPE_Q8_0; break;
    default: t = UM_DTYPE_F16; break;
    }
  return cols % um_dtype_info (t)->block_elems == 0 ? t : UM_DTYPE_F16;
}

typedef struct {
  char           *name;
  const UmWeight *src;
  UmDType         dtype;
  guint           permute_heads;   /* 0: rows as stored */
  gboolean        is_vector;
} OutTensor;

static void
out_tensor_clear (gpointer p)
{
  g_free (((OutTensor *) p)->name);
}

static void
add_out (GArray *list, const char *name, const UmWeight *src, UmDType dtype, guint permute, gboolean vec)
{
  OutTensor t = { g_strdup (name), src, vec ? UM_DTYPE_F32 : fit_type (dtype, src->cols), permute, vec };
  g_array_append_val (list, t);
}

/* Hugging Face rows of a head are [first halves…, second halves…] (NeoX);
 * GGUF's are interleaved pairs. Output row r of a head comes from: */
static uint64_t
permuted_source_row (uint64_t r, guint heads, uint64_t rows)
{
  uint64_t hd = rows / heads, h = r / hd, j = r % hd;
  return h * hd + (j % 2 == 0 ? j / 2 : hd / 2 + j / 2);
}

static void
write_metadata (UmGgufWriter *w, UmModel *model, const QuantType *qt)
{
  const UmModelConfig *c = &model->cfg;
  UmTokenizer *tok = model->tokenizer;
  g_autoptr(GPtrArray) tokens = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GArray) types = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autoptr(GPtrArray) merges = g_ptr_array_new ();

  um_gguf_writer_set_string (w, "general.architecture", "llada");
  um_gguf_writer_set_string (w, "general.name", model->display_name);
  um_gguf_writer_set_u32 (w, "general.file_type", qt->file_type);
  um_gguf_writer_set_u32 (w, "general.quantization_version", 2);
  um_gguf_writer_set_u32 (w, "llada.context_length", c->max_seq_len);
  um_gguf_writer_set_u32 (w, "llada.embedding_length", c->d_model);
  um_gguf_writer_set_u32 (w, "llada.block_count", c->n_layers);
  um_gguf_writer_set_u32 (w, "llada.feed_forward_length", c->mlp_hidden);
  um_gguf_writer_set_u32 (w, "llada.attention.head_count", c->n_heads);
  um_gguf_writer_set_u32 (w, "llada.attention.head_count_kv", c->n_kv_heads);
  um_gguf_writer_set_f32 (w, "llada.rope.freq_base", (float) c->rope_theta);
  um_gguf_writer_set_u32 (w, "llada.rope.dimension_count", c->head_dim);
  um_gguf_writer_set_f32 (w, "llada.attention.layer_norm_rms_epsilon", (float) c->rms_eps);
  um_gguf_writer_set_bool (w, "llada.attention.causal", FALSE);
  um_gguf_writer_set_u32 (w, "llada.vocab_size", c->vocab_size);
  um_gguf_writer_set_bool (w, "diffusion.shift_logits", FALSE);

  /* The vocabulary as llama.cpp's converter writes it: byte-level token
   * strings, special tokens as control, unused ids padded. */
  for (guint id = 0; id < c->vocab_size; id++)
    {
      const char *s = um_tokenizer_id_to_token (tok, id);
      gint32 type = 1;
      if (s == NULL)
        {
          g_ptr_array_add (tokens, g_strdup_printf ("[PAD%u]", id));
          type = 5;
        }
      else
        {
          g_ptr_array_add (tokens, g_strdup (s));
          if (um_tokenizer_is_special (tok, id))
            type = 3;
          else if (um_tokenizer_is_added (tok, id))
            type = 4;
        }
      g_array_append_val (types, type);
    }
  for (guint r = 0; r < um_tokenizer_n_merges (tok); r++)
    g_ptr_array_add (merges, (gpointer) um_tokenizer_get_merge (tok, r));
  um_gguf_writer_set_string (w, "tokenizer.ggml.model", "gpt2");
  um_gguf_writer_set_string (w, "tokenizer.ggml.pre", "default");
  um_gguf_writer_set_string_array (w, "tokenizer.ggml.tokens", (const char * const *) tokens->pdata, tokens->len);
  um_gguf_writer_set_i32_array (w, "tokenizer.ggml.token_type", types->data, types->len);
  um_gguf_writer_set_string_array (w, "tokenizer.ggml.merges", (const char * const *) merges->pdata, merges->len);
  if (c->bos_id >= 0)
    um_gguf_writer_set_u32 (w, "tokenizer.ggml.bos_token_id", c->bos_id);
  um_gguf_writer_set_u32 (w, "tokenizer.ggml.eos_token_id", c->eos_id);
  um_gguf_writer_set_u32 (w, "tokenizer.ggml.padding_token_id", c->pad_id);
  um_gguf_writer_set_u32 (w, "tokenizer.ggml.mask_token_id", c->mask_id);
  um_gguf_writer_set_bool (w, "tokenizer.ggml.add_bos_token", FALSE);
}

/* Converts rows [r0, r0+n) of @t to its output type into @dst. */
static gboolean
convert_rows (const OutTensor *t, uint64_t r0, uint64_t n, guint8 *dst, uint64_t out_row_bytes)
{
  const UmWeight *w = t->src;
  gboolean ok = TRUE;

#pragma omp parallel
  {
    float *row = g_malloc (w->cols * sizeof (float));
#pragma omp for schedule(dynamic, 4)
    for (uint64_t i = 0; i < n; i++)
      {
        uint64_t r = r0 + i;
        uint64_t src_r = t->permute_heads ? permuted_source_row (r, t->permute_heads, w->rows) : r;
        if (!um_quant_dequantize_row (w->dtype, (const guint8 *) w->data + src_r * w->row_bytes, row, w->cols)
            || !um_quant_quantize_row_ref (t->dtype, row, dst + i * out_row_bytes, w->cols))
          {
#pragma omp atomic write
            ok = FALSE;
          }
      }
    g_free (row);
  }
  return ok;
}

gboolean
um_quantize_model (UmModel            *model,
                   const char         *type,
                   const char         *out_path,
                   UmQuantizeProgress  progress_cb,
                   gpointer            user_data,
                   GCancellable       *cancellable,
                   GError            **error)
{
  const QuantType *qt = type ? find_type (type) : NULL;
  const UmModelConfig *c = &model->cfg;
  g_autoptr(UmGgufWriter) w = NULL;
  g_autoptr(GArray) list = g_array_new (FALSE, FALSE, sizeof (OutTensor));
  /* Safetensors rows are in NeoX order; GGUF wants Q/K interleaved. */
  const gboolean permute = !c->rope_interleaved;
  uint64_t total = 0, done = 0;
  char name[128];

  g_array_set_clear_func (list, out_tensor_clear);
  if (qt == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "unknown quantization type “%s” (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, "
                   "Q6_K, Q4_K_M, Q5_K_M)", type ? type : "");
      return FALSE;
    }

  add_out (list, "token_embd.weight", &model->tok_embd, qt->base, 0, FALSE);
  for (guint l = 0; l < c->n_layers; l++)
    {
      const UmLayerWeights *L = &model->layers[l];
      UmDType more = qt->k_mix && use_more_bits (l, c->n_layers) ? UM_DTYPE_Q6_K : qt->base;
#define OUT(suffix, src, dt, perm, vec) G_STMT_START { \
        g_snprintf (name, sizeof name, "blk.%u.%s", l, suffix); add_out (list, name, src, dt, perm, vec); } G_STMT_END
      OUT ("attn_norm.weight", &L->attn_norm, UM_DTYPE_F32, 0, TRUE);
      OUT ("attn_q.weight", &L->wq, qt->base, permute ? c->n_heads : 0, FALSE);
      OUT ("attn_k.weight", &L->wk, qt->base, permute ? c->n_kv_heads : 0, FALSE);
      OUT ("attn_v.weight", &L->wv, more, 0, FALSE);
      OUT ("attn_output.weight", &L->wo, qt->base, 0, FALSE);
      OUT ("ffn_norm.weight", &L->ffn_norm, UM_DTYPE_F32, 0, TRUE);
      OUT ("ffn_gate.weight", &L->w_gate, qt->base, 0, FALSE);
      OUT ("ffn_up.weight", &L->w_up, qt->base, 0, FALSE);
      OUT ("ffn_down.weight", &L->w_down, more, 0, FALSE);
#undef OUT
    }
  add_out (list, "output_norm.weight", &model->out_norm, UM_DTYPE_F32, 0, TRUE);
  if (!c->tied_embeddings)
    add_out (list, "output.weight", &model->output, qt->k_mix ? UM_DTYPE_Q6_K : qt->base, 0, FALSE);

  w = um_gguf_writer_new ();
  write_metadata (w, model, qt);
  for (guint i = 0; i < list->len; i++)
    {
      OutTensor *t = &g_array_index (list, OutTensor, i);
      guint64 shape[2] = { t->src->rows, t->src->cols };
      guint64 bytes;
      if (!um_gguf_writer_add_tensor_info (w, t->name, t->dtype, t->is_vector ? 1 : 2,
                                           t->is_vector ? shape + 1 : shape, &bytes, error))
        return FALSE;
      total += t->src->rows * t->src->cols;
    }
  if (!um_gguf_writer_begin (w, out_path, error))
    return FALSE;

  for (guint i = 0; i < list->len; i++)
    {
      const OutTensor *t = &g_array_index (list, OutTensor, i);
      uint64_t out_row_bytes;
      /* Chunks of rows bound the memory to a few MiB whatever the tensor. */
      uint64_t chunk;
      g_autofree guint8 *buf = NULL;

      um_dtype_bytes (t->dtype, t->src->cols, &out_row_bytes);
      chunk = MAX (1, MIN (t->src->rows, (16u << 20) / MAX (out_row_bytes, 1)));
      buf = g_malloc (chunk * out_row_bytes);
      for (uint64_t r0 = 0; r0 < t->src->rows; r0 += chunk)
        {
          uint64_t n = MIN (chunk, t->src->rows - r0);
          if (g_cancellable_set_error_if_cancelled (cancellable, error))
            return FALSE;
          if (!convert_rows (t, r0, n, buf, out_row_bytes))
            {
              g_set_error (error, UM_ERROR, UM_ERROR_FAILED, "cannot convert tensor “%s” from %s to %s",
                           t->name, um_dtype_name (t->src->dtype), um_dtype_name (t->dtype));
              return FALSE;
            }
          if (!um_gguf_writer_write_tensor_data (w, buf, n * out_row_bytes, error))
            return FALSE;
          done += n * t->src->cols;
          if (progress_cb)
            progress_cb ((double) done / MAX (total, 1), t->name, user_data);
        }
    }
  return um_gguf_writer_finish (w, error);
}

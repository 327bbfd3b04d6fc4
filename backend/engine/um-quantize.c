#include "um-quantize.h"

#include "um-chat-template.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "um-error.h"
#include "um-gen-defaults.h"
#include "um-gguf.h"
#include "um-quant.h"

/* Rows of output converted at a time: bounds memory whatever the tensor. */
#define CHUNK_BYTES     (16u << 20)
/* Column sums of wo / w_down are added up in this many fixed row ranges,
 * then in order, so the scores do not depend on the thread count. */
#define SCORE_PARTS     32

/* ---- scoring and the kept units ------------------------------------------ */

/* Squared L2 norm of every row of @w (in float, summed in double), in
 * blocks of rows whose source pages are dropped once read. */
static gboolean
row_sq_norms (const UmWeight *w, double *out)
{
  const uint64_t block = MAX (1, MIN (w->rows, CHUNK_BYTES / MAX (w->row_bytes, 1)));
  gboolean ok = TRUE;

  for (uint64_t r0 = 0; r0 < w->rows && ok; r0 += block)
    {
      const uint64_t r1 = MIN (w->rows, r0 + block);
#pragma omp parallel
      {
        float *row = g_malloc (w->cols * sizeof (float));
#pragma omp for schedule(dynamic, 16)
        for (uint64_t r = r0; r < r1; r++)
          {
            double acc = 0.0;
            if (!um_quant_dequantize_row (w->dtype, (const guint8 *) w->data + r * w->row_bytes, row, w->cols))
              {
#pragma omp atomic write
                ok = FALSE;
                continue;
              }
            for (uint64_t c = 0; c < w->cols; c++)
              acc += (double) row[c] * row[c];
            out[r] = acc;
          }
        g_free (row);
      }
      um_tensor_data_release ((const guint8 *) w->data + r0 * w->row_bytes, (r1 - r0) * w->row_bytes);
    }
  um_tensor_data_release (w->data, w->rows * w->row_bytes);
  return ok;
}

/* Squared L2 norm of every column of @w: fixed row ranges, each summed by
 * one thread, then the ranges in order (deterministic for any thread count). */
static gboolean
col_sq_norms (const UmWeight *w, double *out)
{
  const uint64_t parts = MIN ((uint64_t) SCORE_PARTS, w->rows);
  g_autofree double *partial = g_new0 (double, parts * w->cols);
  gboolean ok = TRUE;

#pragma omp parallel
  {
    float *row = g_malloc (w->cols * sizeof (float));
#pragma omp for schedule(dynamic, 1)
    for (uint64_t p = 0; p < parts; p++)
      {
        double *acc = partial + p * w->cols;
        for (uint64_t r = p * w->rows / parts; r < (p + 1) * w->rows / parts; r++)
          {
            if (!um_quant_dequantize_row (w->dtype, (const guint8 *) w->data + r * w->row_bytes, row, w->cols))
              {
#pragma omp atomic write
                ok = FALSE;
                break;
              }
            for (uint64_t c = 0; c < w->cols; c++)
              acc[c] += (double) row[c] * row[c];
          }
        um_tensor_data_release ((const guint8 *) w->data + p * w->rows / parts * w->row_bytes,
                                ((p + 1) * w->rows / parts - p * w->rows / parts) * w->row_bytes);
      }
    g_free (row);
  }
  memset (out, 0, w->cols * sizeof (double));
  for (uint64_t p = 0; p < parts; p++)
    for (uint64_t c = 0; c < w->cols; c++)
      out[c] += partial[p * w->cols + c];
  um_tensor_data_release (w->data, w->rows * w->row_bytes);
  return ok;
}

typedef struct {
  double score;
  guint  index;
} Scored;

/* Highest score first; NaN (a broken weight) counts as lowest; ties keep
 * the lower index first, so the choice is reproducible. */
static int
scored_compare (const void *a, const void *b)
{
  const Scored *x = a, *y = b;
  double sx = isnan (x->score) ? -INFINITY : x->score, sy = isnan (y->score) ? -INFINITY : y->score;
  if (sx != sy)
    return sx > sy ? -1 : 1;
  return (x->index > y->index) - (x->index < y->index);
}

static int
guint_compare (const void *a, const void *b)
{
  guint x = *(const guint *) a, y = *(const guint *) b;
  return (x > y) - (x < y);
}

/* The @k best of @n scores, as indices in their original order. */
static guint *
top_k (const double *scores, guint n, guint k)
{
  g_autofree Scored *s = g_new (Scored, n);
  guint *keep = g_new (guint, k);

  for (guint i = 0; i < n; i++)
    s[i] = (Scored) { scores[i], i };
  qsort (s, n, sizeof *s, scored_compare);
  for (guint i = 0; i < k; i++)
    keep[i] = s[i].index;
  qsort (keep, k, sizeof *keep, guint_compare);
  return keep;
}

/* Which source rows / columns each output row / column of a layer's
 * tensors comes from; NULL: the same index (no permutation, no pruning). */
typedef struct {
  guint64 *q_rows, *k_rows, *v_rows, *o_cols;
  guint64 *qkv_rows;         /* a fused q/k/v's: q's, then k's and v's, offset to their rows */
  guint64 *ffn_rows, *down_cols;
  guint64  down_cols_rows;   /* w_down rows sharing one column map (an expert's D); 0: all */
} LayerMaps;

static void
layer_maps_clear (LayerMaps *m)
{
  g_clear_pointer (&m->q_rows, g_free);
  g_clear_pointer (&m->k_rows, g_free);
  g_clear_pointer (&m->v_rows, g_free);
  g_clear_pointer (&m->qkv_rows, g_free);
  g_clear_pointer (&m->o_cols, g_free);
  g_clear_pointer (&m->ffn_rows, g_free);
  g_clear_pointer (&m->down_cols, g_free);
  m->down_cols_rows = 0;
}

/* Hugging Face rows of a head are [first halves…, second halves…] (NeoX);
 * GGUF's are interleaved pairs. Output row j of a head comes from row: */
static guint64
permuted_head_row (guint64 j, guint64 hd)
{
  return j % 2 == 0 ? j / 2 : hd / 2 + j / 2;
}

/* Rows of @n_out heads: output head i is source head heads[i] (NULL:
 * i), rows permuted within the head when @permute. */
static guint64 *
head_rows (const guint *heads, guint n_out, guint64 hd, gboolean permute)
{
  guint64 *map = g_new (guint64, n_out * hd);
  for (guint i = 0; i < n_out; i++)
    for (guint64 j = 0; j < hd; j++)
      map[i * hd + j] = (guint64) (heads ? heads[i] : i) * hd + (permute ? permuted_head_row (j, hd) : j);
  return map;
}

/* Scores layer @l and fills @maps for the counts of @pl. Reads the
 * layer's weights only when something is pruned. */
static gboolean
prepare_layer (const UmModel *m, guint l, const UmPlannedLayer *pl, gboolean permute, LayerMaps *maps,
               GCancellable *cancellable, GError **error)
{
  const UmLayerWeights *L = &m->layers[l];
  const guint64 hd = m->cfg.head_dim;
  const guint group = L->n_heads / L->n_kv_heads;
  g_autofree guint *kv_keep = NULL, *q_keep = NULL, *ffn_keep = NULL;

  layer_maps_clear (maps);
  if (pl->n_kv_heads < L->n_kv_heads)
    {
      g_autofree double *unit = g_new0 (double, L->n_kv_heads);
      g_autofree double *rq = g_new (double, L->wq.rows), *rk = g_new (double, L->wk.rows);
      g_autofree double *rv = g_new (double, L->wv.rows), *co = g_new (double, L->wo.cols);

      if (g_cancellable_set_error_if_cancelled (cancellable, error))
        return FALSE;
      if (!row_sq_norms (&L->wq, rq) || !row_sq_norms (&L->wk, rk) || !row_sq_norms (&L->wv, rv)
          || !col_sq_norms (&L->wo, co))
        goto bad_weights;
      for (guint g = 0; g < L->n_kv_heads; g++)
        {
          for (guint64 r = (guint64) g * group * hd; r < (guint64) (g + 1) * group * hd; r++)
            unit[g] += rq[r] + co[r];
          for (guint64 r = g * hd; r < (g + 1) * hd; r++)
            unit[g] += rk[r] + rv[r];
        }
      kv_keep = top_k (unit, L->n_kv_heads, pl->n_kv_heads);
      q_keep = g_new (guint, pl->n_heads);
      for (guint i = 0; i < pl->n_kv_heads; i++)
        for (guint t = 0; t < group; t++)
          q_keep[i * group + t] = kv_keep[i] * group + t;
      maps->v_rows = head_rows (kv_keep, pl->n_kv_heads, hd, FALSE);
      maps->o_cols = head_rows (q_keep, pl->n_heads, hd, FALSE);
    }
  if (q_keep != NULL || permute)
    {
      maps->q_rows = head_rows (q_keep, pl->n_heads, hd, permute);
      maps->k_rows = head_rows (kv_keep, pl->n_kv_heads, hd, permute);
    }
  /* A fused q/k/v's rows: its slices' maps, each offset to where the slice
   * starts in the stored tensor. */
  if (L->wqkv.data != NULL && maps->q_rows != NULL)
    {
      const guint64 qd = (guint64) pl->n_heads * hd, kvd = (guint64) pl->n_kv_heads * hd;
      const guint64 *parts[] = { maps->q_rows, maps->k_rows, maps->v_rows };
      const guint64 len[] = { qd, kvd, kvd }, start[] = { 0, L->wq.rows, L->wq.rows + L->wk.rows };
      guint64 *map = maps->qkv_rows = g_new (guint64, qd + 2 * kvd);

      for (guint i = 0; i < 3; i++)
        for (guint64 j = 0; j < len[i]; j++)
          *map++ = start[i] + (parts[i] != NULL ? parts[i][j] : j);
    }
  if (pl->ffn < L->ffn)
    {
      /* A dense FFN is one "expert"; in a MoE layer each expert keeps its
       * own best pl->ffn neurons (the stacked tensors need the same count
       * for every expert), scored over its own rows and columns. */
      const guint n_exp = MAX (L->n_experts, 1);
      const guint64 F = L->ffn, K = pl->ffn;
      g_autofree double *neuron = g_new (double, F), *ru = g_new (double, F);
      g_autofree double *cd = g_new (double, F);

      maps->ffn_rows = g_new (guint64, n_exp * K);
      maps->down_cols = g_new (guint64, n_exp * K);
      maps->down_cols_rows = L->n_experts > 0 ? L->w_down.rows / n_exp : 0;
      for (guint e = 0; e < n_exp; e++)
        {
          const UmWeight g = um_weight_expert (&L->w_gate, n_exp, e), u = um_weight_expert (&L->w_up, n_exp, e);
          const UmWeight d = um_weight_expert (&L->w_down, n_exp, e);

          if (g_cancellable_set_error_if_cancelled (cancellable, error))
            return FALSE;
          if (!row_sq_norms (&g, neuron) || !row_sq_norms (&u, ru) || !col_sq_norms (&d, cd))
            goto bad_weights;
          for (guint j = 0; j < F; j++)
            neuron[j] += ru[j] + cd[j];
          g_free (ffn_keep);
          ffn_keep = top_k (neuron, F, K);
          for (guint j = 0; j < K; j++)
            {
              maps->ffn_rows[e * K + j] = e * F + ffn_keep[j];
              maps->down_cols[e * K + j] = ffn_keep[j];
            }
        }
    }
  return TRUE;

bad_weights:
  g_set_error (error, UM_ERROR, UM_ERROR_FAILED, "%s: cannot read the weights of layer %u to prune them",
               m->display_name, l);
  return FALSE;
}

/* ---- writing ------------------------------------------------------------- */

/* A per-layer count as one scalar when every layer has the configuration's
 * value, else as llama.cpp's per-layer array. */
static gboolean
set_per_layer (UmGgufWriter *w, const char *key, guint cfg_value, const GArray *layers, gsize offset)
{
  g_autofree guint32 *vals = g_new (guint32, MAX (layers->len, 1));
  gboolean differs = FALSE;

  for (guint l = 0; l < layers->len; l++)
    {
      vals[l] = G_STRUCT_MEMBER (guint, &g_array_index (layers, UmPlannedLayer, l), offset);
      differs |= vals[l] != cfg_value;
    }
  if (differs)
    um_gguf_writer_set_array (w, key, UM_GGUF_UINT32, vals, layers->len);
  else
    um_gguf_writer_set_u32 (w, key, cfg_value);
  return differs;
}

/* Copies @key from @src if it is there. */
static void
copy_key (UmGgufWriter *w, UmGguf *src, const char *key)
{
  if (src != NULL && um_gguf_find_key (src, key) >= 0)
    um_gguf_writer_copy_kv (w, src, key, NULL);
}

/* @chat_template: the folder's (a safetensors source), or NULL. */
static void
write_metadata (UmGgufWriter *w, UmModel *model, const UmQuantizePlan *p, const char *chat_template)
{
  const UmModelConfig *c = &model->cfg;
  const UmArchInfo *info = um_arch_info (c->arch);
  const char *arch = info->gguf_arch;
  const gboolean llada2 = c->arch == UM_ARCH_LLADA2;
  UmTokenizer *tok = model->tokenizer;
  g_autoptr(GPtrArray) tokens = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GArray) types = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autoptr(GPtrArray) merges = g_ptr_array_new ();
  /* A GGUF source's own tokenizer keys are kept where they say more than
   * the tokenizer can (token types such as unused padding, the
   * pre-tokenizer's name, the chat template); a folder's come from its
   * files. */
  g_autoptr(UmGguf) src = model->format == UM_MODEL_FORMAT_GGUF ? um_gguf_open (model->path, NULL) : NULL;
  guint64 n_src_types = 0;
  gboolean heads_per_layer;
  char key[128];
#define KEY(suffix) (g_snprintf (key, sizeof key, "%s.%s", arch, suffix), key)

  um_gguf_writer_set_string (w, "general.architecture", arch);
  um_gguf_writer_set_string (w, "general.type", "model");
  um_gguf_writer_set_string (w, "general.name", model->display_name);
  copy_key (w, src, "general.name");
  um_gguf_writer_set_u32 (w, "general.file_type", um_quantize_plan_file_type (p));
  um_gguf_writer_set_u32 (w, "general.quantization_version", 2);
  um_gguf_writer_set_u32 (w, KEY ("context_length"), c->max_seq_len);
  um_gguf_writer_set_u32 (w, KEY ("embedding_length"), c->d_model);
  um_gguf_writer_set_u32 (w, KEY ("block_count"), c->n_layers);
  if (c->n_experts == 0)
    set_per_layer (w, KEY ("feed_forward_length"), c->mlp_hidden, p->layers, G_STRUCT_OFFSET (UmPlannedLayer, ffn));
  else
    {
      /* Pruning keeps the same count in every layer of one shape: the
       * leading dense layers share one width, the expert layers another,
       * each written as llama.cpp reads it, a scalar. */
      const guint dense_ffn = c->n_dense_leading > 0 ? g_array_index (p->layers, UmPlannedLayer, 0).ffn
                                                     : c->mlp_hidden;
      const guint expert_ffn = g_array_index (p->layers, UmPlannedLayer,
                                              MIN (c->n_dense_leading, c->n_layers - 1)).ffn;

      /* The dense width (the converter writes the configuration's even
       * without dense layers), then the experts'. */
      if (dense_ffn > 0)
        um_gguf_writer_set_u32 (w, KEY ("feed_forward_length"), dense_ffn);
      um_gguf_writer_set_u32 (w, KEY ("expert_feed_forward_length"), expert_ffn);
      um_gguf_writer_set_u32 (w, KEY ("expert_count"), c->n_experts);
      um_gguf_writer_set_u32 (w, KEY ("expert_used_count"), c->n_experts_used);
      if (c->n_dense_leading > 0 || llada2)
        um_gguf_writer_set_u32 (w, KEY ("leading_dense_block_count"), c->n_dense_leading);
      /* llama.cpp's graphs hard-code each family's router (softmax;
       * renormalised for RND1 only, unscaled); say so only where a model
       * departs from that, with llama.cpp's own keys. BailingMoeV2's
       * loader wants them all. */
      if (c->router_func == UM_ROUTER_SIGMOID || llada2)
        um_gguf_writer_set_u32 (w, KEY ("expert_gating_func"), c->router_func == UM_ROUTER_SIGMOID ? 2 : 1);
      if (c->router_norm != (c->arch == UM_ARCH_RND1) || llada2)
        um_gguf_writer_set_bool (w, KEY ("expert_weights_norm"), c->router_norm);
      if (c->router_scale != 1.0 || llada2)
        um_gguf_writer_set_f32 (w, KEY ("expert_weights_scale"), (float) c->router_scale);
      if (c->n_expert_groups > 1)
        {
          um_gguf_writer_set_u32 (w, KEY ("expert_group_count"), c->n_expert_groups);
          um_gguf_writer_set_u32 (w, KEY ("expert_group_used_count"), c->n_groups_used);
        }
      /* The shared expert's whole width, as one expert: llama.cpp's
       * loader multiplies the width by the count. */
      if (llada2)
        {
          um_gguf_writer_set_u32 (w, KEY ("expert_shared_feed_forward_length"), c->shared_ffn);
          um_gguf_writer_set_u32 (w, KEY ("expert_shared_count"), c->shared_ffn > 0 ? 1 : 0);
        }
    }
  heads_per_layer = set_per_layer (w, KEY ("attention.head_count"), c->n_heads, p->layers,
                                   G_STRUCT_OFFSET (UmPlannedLayer, n_heads));
  heads_per_layer |= set_per_layer (w, KEY ("attention.head_count_kv"), c->n_kv_heads, p->layers,
                                    G_STRUCT_OFFSET (UmPlannedLayer, n_kv_heads));
  /* With fewer heads than d_model / head_dim the head size cannot be
   * derived; llama.cpp reads it from here (RND1's and LLaDA 2's converters
   * always write it: their configs name head_dim). */
  if (heads_per_layer || (guint64) c->n_heads * c->head_dim != c->d_model || c->arch == UM_ARCH_RND1 || llada2)
    {
      um_gguf_writer_set_u32 (w, KEY ("attention.key_length"), c->head_dim);
      um_gguf_writer_set_u32 (w, KEY ("attention.value_length"), c->head_dim);
    }
  um_gguf_writer_set_f32 (w, KEY ("rope.freq_base"), (float) c->rope_theta);
  /* LLaDA 2 rotates part of each head (llama.cpp's n_rot). */
  if (c->arch == UM_ARCH_LLADA || llada2)
    um_gguf_writer_set_u32 (w, KEY ("rope.dimension_count"), c->rope_dim);
  um_gguf_writer_set_f32 (w, KEY ("attention.layer_norm_rms_epsilon"), (float) c->rms_eps);
  /* Diffusion models attend both ways (LLaDA 2 block-causally, which the
   * generation's block length decides: not a file key). */
  um_gguf_writer_set_bool (w, KEY ("attention.causal"), FALSE);
  if (c->arch == UM_ARCH_LLADA || llada2)
    um_gguf_writer_set_u32 (w, KEY ("vocab_size"), c->vocab_size);
  /* Absent means "shift" to llama-diffusion-cli: Dream's and RND1's
   * converters write nothing, LLaDA's false. */
  if (!c->shift_logits)
    um_gguf_writer_set_bool (w, "diffusion.shift_logits", FALSE);
#undef KEY
  /* The model's recommended sampling travels with it (GGUF has no
   * generation_config.json beside it). */
  {
    g_autoptr(UmGenRecommendation) rec = um_gen_recommendation_load (model->path);
    um_gen_recommendation_write_gguf (rec, w);
  }
  if (p->prune_heads > 0.0 || p->prune_ffn > 0.0)
    {
      um_gguf_writer_set_f32 (w, "unmask.prune.heads", (float) p->prune_heads);
      um_gguf_writer_set_f32 (w, "unmask.prune.ffn", (float) p->prune_ffn);
    }

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
  /* What llama.cpp's converter writes for each family's tokenizer (Dream
   * and RND1 have Qwen's, LLaDA-MoE Ling's as "llada-moe", LLaDA 2 Ling's
   * as "bailingmoe2"; LLaDA's files say "default"). */
  um_gguf_writer_set_string (w, "tokenizer.ggml.pre", um_tokenizer_gguf_pre_name (arch));
  copy_key (w, src, "tokenizer.ggml.pre");
  um_gguf_writer_set_string_array (w, "tokenizer.ggml.tokens", (const char * const *) tokens->pdata, tokens->len);
  um_gguf_writer_set_i32_array (w, "tokenizer.ggml.token_type", types->data, types->len);
  if (src != NULL && um_gguf_find_key (src, "tokenizer.ggml.token_type") >= 0
      && um_gguf_get_array_info (src, "tokenizer.ggml.token_type", NULL, &n_src_types, NULL)
      && n_src_types == types->len)
    copy_key (w, src, "tokenizer.ggml.token_type");
  um_gguf_writer_set_string_array (w, "tokenizer.ggml.merges", (const char * const *) merges->pdata, merges->len);
  if (c->bos_id >= 0)
    um_gguf_writer_set_u32 (w, "tokenizer.ggml.bos_token_id", c->bos_id);
  um_gguf_writer_set_u32 (w, "tokenizer.ggml.eos_token_id", c->eos_id);
  um_gguf_writer_set_u32 (w, "tokenizer.ggml.padding_token_id", c->pad_id);
  um_gguf_writer_set_u32 (w, "tokenizer.ggml.mask_token_id", c->mask_id);
  um_gguf_writer_set_bool (w, "tokenizer.ggml.add_bos_token", FALSE);
  um_gguf_writer_set_bool (w, "tokenizer.ggml.add_eos_token", FALSE);
  if (chat_template != NULL)
    um_gguf_writer_set_string (w, "tokenizer.chat_template", chat_template);
  copy_key (w, src, "tokenizer.chat_template");
}

/* One output tensor being converted. */
typedef struct {
  const UmWeight *src;
  UmDType         dtype;
  guint64         cols;       /* output row length */
  const guint64  *row_map;    /* NULL: row r is source row r */
  const guint64  *col_map;    /* NULL: every source column */
  guint64         col_map_rows;  /* rows sharing one map of @cols entries (one expert's); 0: all rows */
} Conv;

/* Converts output rows [r0, r0+n) of @t into @dst. */
static gboolean
convert_rows (const Conv *t, uint64_t r0, uint64_t n, guint8 *dst, uint64_t out_row_bytes)
{
  const UmWeight *w = t->src;
  gboolean ok = TRUE;

#pragma omp parallel
  {
    float *row = g_malloc (w->cols * sizeof (float));
    float *gathered = t->col_map ? g_malloc (t->cols * sizeof (float)) : NULL;
#pragma omp for schedule(dynamic, 4)
    for (uint64_t i = 0; i < n; i++)
      {
        uint64_t r = r0 + i;
        uint64_t src_r = t->row_map ? t->row_map[r] : r;
        if (!um_quant_dequantize_row (w->dtype, (const guint8 *) w->data + src_r * w->row_bytes, row, w->cols))
          {
#pragma omp atomic write
            ok = FALSE;
            continue;
          }
        /* Column pruning: the whole source row, then the kept columns. */
        if (gathered != NULL)
          {
            const guint64 *map = t->col_map + (t->col_map_rows ? r / t->col_map_rows * t->cols : 0);
            for (uint64_t c = 0; c < t->cols; c++)
              gathered[c] = row[map[c]];
          }
        if (!um_quant_quantize_row_ref (t->dtype, gathered ? gathered : row, dst + i * out_row_bytes, t->cols))
          {
#pragma omp atomic write
            ok = FALSE;
          }
      }
    g_free (gathered);
    g_free (row);
  }
  return ok;
}

/* Drops the source pages output rows [r0, r0+n) were made from: the
 * embedding alone is a GiB at LLaDA-8B's size, so waiting for the end of a
 * tensor would leave that much resident. Rows a later chunk still needs
 * (maps reorder rows within a head) are simply read again. */
static void
release_source_rows (const Conv *t, uint64_t r0, uint64_t n)
{
  const UmWeight *w = t->src;
  uint64_t lo = r0, hi = r0 + n - 1;

  if (t->row_map != NULL)
    {
      lo = G_MAXUINT64;
      hi = 0;
      for (uint64_t r = r0; r < r0 + n; r++)
        {
          lo = MIN (lo, t->row_map[r]);
          hi = MAX (hi, t->row_map[r]);
        }
    }
  um_tensor_data_release ((const guint8 *) w->data + lo * w->row_bytes, (hi - lo + 1) * w->row_bytes);
}

static void
conv_for (const UmQuantizePlanItem *it, const LayerMaps *maps, Conv *t)
{
  t->src = it->src;
  t->dtype = it->pub.dtype;
  t->cols = it->pub.cols;
  t->row_map = NULL;
  t->col_map = NULL;
  t->col_map_rows = 0;
  switch (it->pub.kind)
    {
    case UM_PLANNED_Q: t->row_map = maps->q_rows; break;
    case UM_PLANNED_K: t->row_map = maps->k_rows; break;
    case UM_PLANNED_V: t->row_map = maps->v_rows; break;
    case UM_PLANNED_QKV: t->row_map = maps->qkv_rows; break;
    case UM_PLANNED_QKV_BIAS: t->col_map = maps->qkv_rows; break;
    /* A bias entry goes with its projection's row. */
    case UM_PLANNED_Q_BIAS: t->col_map = maps->q_rows; break;
    case UM_PLANNED_K_BIAS: t->col_map = maps->k_rows; break;
    case UM_PLANNED_V_BIAS: t->col_map = maps->v_rows; break;
    case UM_PLANNED_O: t->col_map = maps->o_cols; break;
    case UM_PLANNED_GATE:
    case UM_PLANNED_UP: t->row_map = maps->ffn_rows; break;
    case UM_PLANNED_DOWN:
      t->col_map = maps->down_cols;
      t->col_map_rows = maps->down_cols_rows;
      break;
    default: break;
    }
}

gboolean
um_quantize_model_with_metadata (UmModel                 *model,
                                 const UmQuantizeOptions *opts,
                                 const char              *out_path,
                                 const char * const      *extra_kv,
                                 UmQuantizeProgress       progress_cb,
                                 gpointer                 user_data,
                                 GCancellable            *cancellable,
                                 GError                 **error)
{
  const UmModelConfig *c = &model->cfg;
  g_autoptr(UmGgufWriter) w = NULL;
  g_auto(UmQuantizePlan) p = { 0 };
  LayerMaps maps = { 0 };
  /* LLaDA's safetensors rows are in NeoX order, its GGUF wants Q/K
   * interleaved (llama.cpp runs it with NORM RoPE); the other families are
   * NeoX in both. */
  const gboolean permute = c->arch == UM_ARCH_LLADA && !c->rope_interleaved;
  uint64_t total = 0, done = 0;
  int prepared = -1;
  gboolean ok = FALSE;
  g_autofree char *chat_template = NULL;

  if (!um_quantize_plan_build (&p, model, opts, TRUE, error))
    return FALSE;
  /* A Hugging Face folder's template, read through the one JSON entry
   * point (a GGUF source's is copied from it). */
  if (model->format != UM_MODEL_FORMAT_GGUF && model->path != NULL
      && !um_chat_template_text_from_dir (model->path, &chat_template, error))
    return FALSE;

  w = um_gguf_writer_new ();
  write_metadata (w, model, &p, chat_template);
  for (guint i = 0; extra_kv != NULL && extra_kv[i] != NULL && extra_kv[i + 1] != NULL; i += 2)
    um_gguf_writer_set_string (w, extra_kv[i], extra_kv[i + 1]);
  for (guint i = 0; i < p.items->len; i++)
    {
      const UmPlannedTensor *t = &g_array_index (p.items, UmQuantizePlanItem, i).pub;
      guint64 shape[3], bytes;
      const guint n_dims = um_planned_tensor_shape (t, shape);
      if (!um_gguf_writer_add_tensor_info (w, t->name, t->dtype, n_dims, shape, &bytes, error))
        return FALSE;
      /* The plan is what callers predict from: it must be what is written. */
      if (bytes != t->bytes)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FAILED, "tensor “%s”: planned %" G_GUINT64_FORMAT
                       " bytes but %" G_GUINT64_FORMAT " to write", t->name, t->bytes, bytes);
          return FALSE;
        }
      total += t->rows * t->cols;
    }
  if (!um_gguf_writer_begin (w, out_path, error))
    return FALSE;

  for (guint i = 0; i < p.items->len; i++)
    {
      const UmQuantizePlanItem *it = &g_array_index (p.items, UmQuantizePlanItem, i);
      uint64_t out_row_bytes, chunk;
      g_autofree guint8 *buf = NULL;
      Conv t;

      /* A layer's kept units are chosen when its first tensor comes up,
       * so pruning reads one layer at a time. */
      if (it->pub.layer >= 0 && it->pub.layer != prepared)
        {
          prepared = it->pub.layer;
          if (!prepare_layer (model, prepared, &g_array_index (p.layers, UmPlannedLayer, prepared), permute,
                              &maps, cancellable, error))
            goto out;
        }
      conv_for (it, &maps, &t);
      um_dtype_bytes (t.dtype, t.cols, &out_row_bytes);
      chunk = MAX (1, MIN (it->pub.rows, CHUNK_BYTES / MAX (out_row_bytes, 1)));
      buf = g_malloc (chunk * out_row_bytes);
      for (uint64_t r0 = 0; r0 < it->pub.rows; r0 += chunk)
        {
          uint64_t n = MIN (chunk, it->pub.rows - r0);
          if (g_cancellable_set_error_if_cancelled (cancellable, error))
            goto out;
          if (!convert_rows (&t, r0, n, buf, out_row_bytes))
            {
              g_set_error (error, UM_ERROR, UM_ERROR_FAILED, "cannot convert tensor “%s” from %s to %s",
                           it->pub.name, um_dtype_name (t.src->dtype), um_dtype_name (t.dtype));
              goto out;
            }
          if (!um_gguf_writer_write_tensor_data (w, buf, n * out_row_bytes, error))
            goto out;
          if (!um_planned_kind_stays_f32 (it->pub.kind))
            release_source_rows (&t, r0, n);
          done += n * t.cols;
          if (progress_cb)
            progress_cb ((double) done / MAX (total, 1), it->pub.name, user_data);
        }
      /* Done with the source: none of its pages need stay resident (the
       * chunks released theirs; this catches pages shared with neighbours
       * at the chunk edges). Small tensors may be heap copies and are tiny. */
      if (!um_planned_kind_stays_f32 (it->pub.kind))
        um_tensor_data_release (t.src->data, t.src->rows * t.src->row_bytes);
    }
  ok = um_gguf_writer_finish (w, error);

out:
  layer_maps_clear (&maps);
  return ok;
}

gboolean
um_quantize_model_full (UmModel                 *model,
                        const UmQuantizeOptions *opts,
                        const char              *out_path,
                        UmQuantizeProgress       progress_cb,
                        gpointer                 user_data,
                        GCancellable            *cancellable,
                        GError                 **error)
{
  return um_quantize_model_with_metadata (model, opts, out_path, NULL, progress_cb, user_data, cancellable, error);
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
  UmQuantizeOptions opts = { type ? type : "", 0.0, 0.0 };
  return um_quantize_model_full (model, &opts, out_path, progress_cb, user_data, cancellable, error);
}

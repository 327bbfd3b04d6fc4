/* unmask-cli logits, tokenize, detokenize and inspect. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "um-cli.h"
#include "um-error.h"
#include "um-json.h"

int
um_cli_logits (int argc, char **argv)
{
  g_autoptr(GOptionContext) ctx = g_option_context_new ("— logits of a token sequence as JSON");
  g_autofree char *model = NULL, *ids_text = NULL, *rows_text = NULL;
  gboolean json = TRUE;
  int threads = 0, block = 0;
  gboolean int8 = FALSE;
  g_autofree char *device = NULL;
  GOptionEntry entries[] = {
    { "model", 'm', 0, G_OPTION_ARG_FILENAME, &model, "Model folder or .gguf file", "PATH" },
    { "ids", 0, 0, G_OPTION_ARG_STRING, &ids_text, "Token ids", "1,2,3" },
    { "int8", 0, 0, G_OPTION_ARG_NONE, &int8,
      "Allow 8-bit integer products with quantized weights (default: exact f32 activations)", NULL },
    { "rows", 0, 0, G_OPTION_ARG_STRING, &rows_text, "Positions to print (default: all)", "0,4" },
    { "block-length", 0, 0, G_OPTION_ARG_INT, &block,
      "Block-causal attention in blocks of N from position 0 (LLaDA 2.x; default: full attention)", "N" },
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "JSON output (the only format)", NULL },
    { "threads", 0, 0, G_OPTION_ARG_INT, &threads, "CPU threads (default: all cores)", "N" },
    { "device", 0, 0, G_OPTION_ARG_STRING, &device, "cpu (default), cuda or auto", "DEVICE" },
    { NULL }
  };
  g_autoptr(GError) error = NULL;
  g_autoptr(UmEngine) engine = NULL;
  g_autoptr(GArray) ids = NULL, rows = NULL;
  g_autofree float *logits = NULL;
  g_autoptr(GString) out = NULL;
  int n_rows;
  guint V;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!um_cli_parse_options (ctx, &argc, &argv))
    return 2;
  if (ids_text == NULL)
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "--ids LIST is required");
      return um_cli_fail (error);
    }
  if ((ids = um_cli_parse_ids (ids_text, &error)) == NULL
      || (rows_text != NULL && (rows = um_cli_parse_ids (rows_text, &error)) == NULL))
    return um_cli_fail (error);
  if (ids->len == 0)
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "--ids is empty");
      return um_cli_fail (error);
    }
  if (block < 0)
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "--block-length must be positive");
      return um_cli_fail (error);
    }
  /* Logits are for comparing numbers: the CPU's exact fp32 unless asked. */
  engine = um_cli_load_engine (model, threads, device ? device : "cpu",
                               int8 ? UM_PRODUCTS_INT8 : UM_PRODUCTS_EXACT, &error);
  if (engine == NULL)
    return um_cli_fail (error);

  /* The forward wants ascending unique rows; print in the order asked. */
  g_autoptr(GArray) sorted = NULL;
  g_autofree int *order = NULL;
  if (rows != NULL)
    {
      sorted = g_array_copy (rows);
      for (guint i = 0; i < rows->len; i++)
        {
          gint32 r = g_array_index (rows, gint32, i);
          if (r < 0 || (guint) r >= ids->len)
            {
              g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                           "--rows: position %d is outside the %u tokens", r, ids->len);
              return um_cli_fail (error);
            }
        }
      /* insertion sort + dedupe: row lists are short */
      for (guint i = 1; i < sorted->len; i++)
        for (guint j = i; j > 0 && g_array_index (sorted, gint32, j - 1) > g_array_index (sorted, gint32, j); j--)
          {
            gint32 t = g_array_index (sorted, gint32, j);
            g_array_index (sorted, gint32, j) = g_array_index (sorted, gint32, j - 1);
            g_array_index (sorted, gint32, j - 1) = t;
          }
      for (guint i = 1; i < sorted->len;)
        if (g_array_index (sorted, gint32, i) == g_array_index (sorted, gint32, i - 1))
          g_array_remove_index (sorted, i);
        else
          i++;
      order = g_new (int, rows->len);
      for (guint i = 0; i < rows->len; i++)
        for (guint j = 0; j < sorted->len; j++)
          if (g_array_index (sorted, gint32, j) == g_array_index (rows, gint32, i))
            order[i] = j;
    }

  if (block > 0)
    {
      if (!um_engine_get_model (engine)->cfg.block_causal)
        {
          g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                       "--block-length: this model's attention is not block-causal (only LLaDA 2.x's is)");
          return um_cli_fail (error);
        }
      um_forward_set_attention_block (um_engine_get_forward (engine), block);
    }
  V = um_engine_get_model (engine)->cfg.vocab_size;
  n_rows = sorted ? (int) sorted->len : (int) ids->len;
  logits = g_try_malloc ((size_t) n_rows * V * sizeof (float));
  if (logits == NULL)
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY, "out of memory for %d × %u logits", n_rows, V);
      return um_cli_fail (error);
    }
  if (!um_forward_logits (um_engine_get_forward (engine), (const gint32 *) ids->data, 1, ids->len,
                          sorted ? (const gint32 *) sorted->data : NULL, n_rows, logits, NULL, &error))
    return um_cli_fail (error);

  out = g_string_sized_new ((size_t) n_rows * V * 12);
  g_string_append (out, "{\"logits\": [");
  for (guint i = 0; i < (rows ? rows->len : (guint) n_rows); i++)
    {
      const float *row = logits + (size_t) (rows ? order[i] : (int) i) * V;
      char buf[G_ASCII_DTOSTR_BUF_SIZE];
      g_string_append (out, i ? ", [" : "[");
      for (guint v = 0; v < V; v++)
        {
          if (v)
            g_string_append (out, ", ");
          /* 9 significant digits round-trip a float exactly. */
          g_string_append (out, g_ascii_formatd (buf, sizeof buf, "%.9g", row[v]));
        }
      g_string_append_c (out, ']');
    }
  g_string_append (out, "]}\n");
  fwrite (out->str, 1, out->len, stdout);
  return 0;
}

/* --model (folder or GGUF) or --tokenizer FILE. */
static UmTokenizer *
load_tokenizer (const char *model, const char *tokenizer, UmModel **model_out, GError **error)
{
  if ((model == NULL) == (tokenizer == NULL))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "give exactly one of --model PATH or --tokenizer FILE");
      return NULL;
    }
  if (tokenizer != NULL)
    return um_tokenizer_new_from_file (tokenizer, error);
  if (g_file_test (model, G_FILE_TEST_IS_DIR))
    return um_tokenizer_new_from_dir (model, error);
  *model_out = um_model_load (model, NULL, error);
  return *model_out ? (*model_out)->tokenizer : NULL;
}

int
um_cli_tokenize (int argc, char **argv)
{
  g_autoptr(GOptionContext) ctx = g_option_context_new ("— text to token ids");
  g_autofree char *model = NULL, *tokenizer = NULL, *text = NULL, *texts_file = NULL;
  gboolean json = FALSE;
  GOptionEntry entries[] = {
    { "model", 'm', 0, G_OPTION_ARG_FILENAME, &model, "Model folder or .gguf file", "PATH" },
    { "tokenizer", 0, 0, G_OPTION_ARG_FILENAME, &tokenizer, "A tokenizer.json", "FILE" },
    { "text", 't', 0, G_OPTION_ARG_STRING, &text, "Text to encode", "TEXT" },
    { "texts-file", 0, 0, G_OPTION_ARG_FILENAME, &texts_file, "JSON list of texts to encode", "FILE" },
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "JSON output", NULL },
    { NULL }
  };
  g_autoptr(GError) error = NULL;
  g_autoptr(UmModel) owner = NULL;
  g_autoptr(JsonNode) texts_root = NULL;
  g_autoptr(JsonBuilder) b = json_builder_new ();
  g_autoptr(JsonNode) root = NULL;
  UmTokenizer *tok;
  JsonArray *texts = NULL;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!um_cli_parse_options (ctx, &argc, &argv))
    return 2;
  if ((text == NULL) == (texts_file == NULL))
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "give exactly one of --text TEXT or --texts-file FILE");
      return um_cli_fail (error);
    }
  if (texts_file != NULL)
    {
      texts_root = um_json_parse_file (texts_file, texts_file, &um_json_limits_model_file, &error);
      if (texts_root == NULL)
        return um_cli_fail (error);
      if (JSON_NODE_TYPE (texts_root) != JSON_NODE_ARRAY)
        {
          g_set_error (&error, UM_ERROR, UM_ERROR_FORMAT, "%s: expected a JSON list of strings", texts_file);
          return um_cli_fail (error);
        }
      texts = json_node_get_array (texts_root);
      for (guint i = 0; i < json_array_get_length (texts); i++)
        {
          JsonNode *e = json_array_get_element (texts, i);
          if (JSON_NODE_TYPE (e) != JSON_NODE_VALUE || json_node_get_value_type (e) != G_TYPE_STRING)
            {
              g_set_error (&error, UM_ERROR, UM_ERROR_FORMAT, "%s: item %u is not a string", texts_file, i);
              return um_cli_fail (error);
            }
        }
    }
  tok = load_tokenizer (model, tokenizer, &owner, &error);
  if (tok == NULL)
    return um_cli_fail (error);

  json_builder_begin_object (b);
  json_builder_set_member_name (b, "ids");
  if (texts != NULL)
    json_builder_begin_array (b);
  for (guint i = 0; i < (texts ? json_array_get_length (texts) : 1); i++)
    {
      const char *t = texts ? json_array_get_string_element (texts, i) : text;
      g_autoptr(GArray) ids = g_array_new (FALSE, FALSE, sizeof (gint32));
      if (!um_tokenizer_encode (tok, t, -1, ids, &error))
        {
          if (owner == NULL)
            um_tokenizer_free (tok);
          return um_cli_fail (error);
        }
      if (!json)
        {
          for (guint j = 0; j < ids->len; j++)
            printf ("%s%d", j ? "," : "", g_array_index (ids, gint32, j));
          printf ("\n");
        }
      json_builder_add_value (b, um_cli_ids_to_json ((const gint32 *) ids->data, ids->len));
    }
  if (texts != NULL)
    json_builder_end_array (b);
  json_builder_end_object (b);
  root = json_builder_get_root (b);
  if (json)
    um_cli_print_json (root, FALSE);
  if (owner == NULL)
    um_tokenizer_free (tok);
  return 0;
}

int
um_cli_detokenize (int argc, char **argv)
{
  g_autoptr(GOptionContext) ctx = g_option_context_new ("— token ids to text");
  g_autofree char *model = NULL, *tokenizer = NULL, *ids_text = NULL;
  gboolean json = FALSE, skip_special = FALSE;
  GOptionEntry entries[] = {
    { "model", 'm', 0, G_OPTION_ARG_FILENAME, &model, "Model folder or .gguf file", "PATH" },
    { "tokenizer", 0, 0, G_OPTION_ARG_FILENAME, &tokenizer, "A tokenizer.json", "FILE" },
    { "ids", 0, 0, G_OPTION_ARG_STRING, &ids_text, "Token ids", "1,2,3" },
    { "skip-special", 0, 0, G_OPTION_ARG_NONE, &skip_special, "Leave out special tokens", NULL },
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "JSON output: {\"text\": ...}", NULL },
    { NULL }
  };
  g_autoptr(GError) error = NULL;
  g_autoptr(UmModel) owner = NULL;
  g_autoptr(GArray) ids = NULL;
  g_autofree char *text = NULL;
  UmTokenizer *tok;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!um_cli_parse_options (ctx, &argc, &argv))
    return 2;
  if (ids_text == NULL)
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "--ids LIST is required");
      return um_cli_fail (error);
    }
  if ((ids = um_cli_parse_ids (ids_text, &error)) == NULL)
    return um_cli_fail (error);
  tok = load_tokenizer (model, tokenizer, &owner, &error);
  if (tok == NULL)
    return um_cli_fail (error);
  text = um_tokenizer_decode (tok, (const gint32 *) ids->data, ids->len, skip_special, &error);
  if (owner == NULL)
    um_tokenizer_free (tok);
  if (text == NULL)
    return um_cli_fail (error);
  if (json)
    {
      g_autoptr(JsonBuilder) b = json_builder_new ();
      g_autoptr(JsonNode) root = NULL;
      json_builder_begin_object (b);
      um_json_add_string (b, "text", text);
      json_builder_end_object (b);
      root = json_builder_get_root (b);
      um_cli_print_json (root, FALSE);
    }
  else
    printf ("%s\n", text);
  return 0;
}

int
um_cli_inspect (int argc, char **argv)
{
  g_autoptr(GOptionContext) ctx = g_option_context_new ("— describe a model");
  g_autofree char *model_path = NULL;
  gboolean json = FALSE;
  GOptionEntry entries[] = {
    { "model", 'm', 0, G_OPTION_ARG_FILENAME, &model_path, "Model folder or .gguf file", "PATH" },
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "JSON output", NULL },
    { NULL }
  };
  g_autoptr(GError) error = NULL;
  g_autoptr(UmModel) model = NULL;
  g_autoptr(JsonBuilder) b = json_builder_new ();
  g_autoptr(JsonNode) root = NULL;
  guint64 count[UM_DTYPE_N_TYPES] = { 0 }, bytes[UM_DTYPE_N_TYPES] = { 0 }, elems[UM_DTYPE_N_TYPES] = { 0 };
  guint64 n_params = 0;
  const UmModelConfig *c;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!um_cli_parse_options (ctx, &argc, &argv))
    return 2;
  if (model_path == NULL)
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "--model PATH is required");
      return um_cli_fail (error);
    }
  model = um_model_load (model_path, NULL, &error);
  if (model == NULL)
    return um_cli_fail (error);
  c = &model->cfg;
  for (guint i = 0; i < um_tensor_table_size (model->tensors); i++)
    {
      const UmTensorInfo *t = um_tensor_table_get (model->tensors, i);
      count[t->dtype]++;
      bytes[t->dtype] += t->n_bytes;
      elems[t->dtype] += t->n_elems;
      n_params += t->n_elems;
    }

  json_builder_begin_object (b);
  um_json_add_string (b, "path", model->path);
  um_json_add_string (b, "format", model->format == UM_MODEL_FORMAT_GGUF ? "gguf" : "safetensors");
  um_json_add_string (b, "architecture", um_arch_info (c->arch)->gguf_arch);
  um_json_add_int (b, "n_layers", c->n_layers);
  um_json_add_int (b, "d_model", c->d_model);
  um_json_add_int (b, "n_heads", c->n_heads);
  um_json_add_int (b, "n_kv_heads", c->n_kv_heads);
  um_json_add_int (b, "head_dim", c->head_dim);
  um_json_add_int (b, "rope_dim", c->rope_dim);
  um_json_add_bool (b, "block_causal", c->block_causal);
  um_json_add_int (b, "mlp_hidden", c->mlp_hidden);
  um_json_add_int (b, "vocab_size", c->vocab_size);
  um_json_add_int (b, "max_sequence_length", c->max_seq_len);
  um_json_add_double (b, "rope_theta", c->rope_theta);
  um_json_add_double (b, "rms_norm_eps", c->rms_eps);
  um_json_add_int (b, "parameters", n_params);
  um_json_add_int (b, "bytes", um_model_weight_bytes (model));
  um_json_add_int (b, "tensors", um_tensor_table_size (model->tensors));
  json_builder_set_member_name (b, "dtypes");
  json_builder_begin_object (b);
  for (int t = 0; t < UM_DTYPE_N_TYPES; t++)
    if (count[t] > 0)
      {
        json_builder_set_member_name (b, um_dtype_name (t));
        json_builder_begin_object (b);
        um_json_add_int (b, "tensors", count[t]);
        um_json_add_int (b, "parameters", elems[t]);
        um_json_add_int (b, "bytes", bytes[t]);
        um_json_add_double (b, "bits_per_weight", 8.0 * bytes[t] / MAX (elems[t], 1));
        json_builder_end_object (b);
      }
  json_builder_end_object (b);
  json_builder_set_member_name (b, "special_ids");
  json_builder_begin_object (b);
  um_json_add_int (b, "mask", c->mask_id);
  um_json_add_int (b, "eos", c->eos_id);
  um_json_add_int (b, "eot", c->eot_id);
  um_json_add_int (b, "bos", c->bos_id);
  um_json_add_int (b, "pad", c->pad_id);
  json_builder_end_object (b);
  json_builder_end_object (b);
  root = json_builder_get_root (b);

  if (json)
    {
      um_cli_print_json (root, TRUE);
      return 0;
    }
  printf ("%s (%s)\n", model->display_name, model->format == UM_MODEL_FORMAT_GGUF ? "GGUF" : "safetensors");
  printf ("  architecture  %s: %u layers, d_model %u, %u heads (%u KV) of %u, MLP %u\n",
          um_arch_info (c->arch)->gguf_arch, c->n_layers, c->d_model, c->n_heads, c->n_kv_heads, c->head_dim,
          c->mlp_hidden);
  if (c->n_experts > 0)
    printf ("  experts       %u of %u per token, FFN %u each\n", c->n_experts_used, c->n_experts, c->expert_ffn);
  if (c->n_experts > 0 && (c->n_expert_groups > 1 || c->shared_ffn > 0 || c->n_dense_leading > 0))
    printf ("  routing       %s, %u groups (%u kept), ×%g%s%s; shared expert %u; leading dense layers: %u\n",
            c->router_func == UM_ROUTER_SIGMOID ? "sigmoid" : "softmax", MAX (c->n_expert_groups, 1),
            MAX (c->n_groups_used, 1), c->router_scale, c->router_norm ? ", renormalised" : "",
            c->expert_bias ? ", selection bias" : "", c->shared_ffn, c->n_dense_leading);
  if (c->rope_dim != c->head_dim || c->block_causal)
    printf ("  attention     RoPE over %u of %u values per head%s\n", c->rope_dim, c->head_dim,
            c->block_causal ? ", block-causal" : "");
  printf ("  vocabulary    %u tokens, max sequence %u, RoPE θ %g, RMSNorm ε %g\n",
          c->vocab_size, c->max_seq_len, c->rope_theta, c->rms_eps);
  printf ("  parameters    %" G_GUINT64_FORMAT " (%.3f B), %.2f GiB as stored, %u tensors\n",
          n_params, n_params / 1e9, um_model_weight_bytes (model) / 1073741824.0,
          um_tensor_table_size (model->tensors));
  for (int t = 0; t < UM_DTYPE_N_TYPES; t++)
    if (count[t] > 0)
      printf ("  %-5s         %" G_GUINT64_FORMAT " tensors, %" G_GUINT64_FORMAT " parameters, %.2f MiB, %.2f bits/weight\n",
              um_dtype_name (t), count[t], elems[t], bytes[t] / 1048576.0, 8.0 * bytes[t] / MAX (elems[t], 1));
  printf ("  special ids   mask %d, EOS %d, EOT %d, BOS %d, pad %d\n",
          c->mask_id, c->eos_id, c->eot_id, c->bos_id, c->pad_id);
  return 0;
}

/* fuzz-safetensors.c — libFuzzer target for the safetensors reader.
 *
 * Parses the input as a .safetensors file straight from memory (libFuzzer's
 * buffer is exactly the input's size, so ASan sees any read past it); an
 * accepted file must only yield tensors that lie inside the input, each of
 * which is read at its first and last byte. A file that holds
 * "model.embed_tokens.weight" is then loaded as the weights of a tiny
 * Dream, LLaDA-MoE or RND1 model (whichever its tensors suggest) from a
 * scratch folder: every refusal must be an UM_ERROR, and a model that loads
 * runs the reference forward pass on a few tokens (the Hugging Face names,
 * biases, QK-norm, routers and per-expert tensors, gathered when they are
 * not contiguous).
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -std=c11 -D_GNU_SOURCE \
 *     -Ibackend -Ibackend/formats backend/um-error.c backend/formats/um-dtype.c \
 *     backend/formats/um-tensor-table.c backend/formats/um-safetensors.c \
 *     tests/fuzz/fuzz-safetensors.c \
 *     $(pkg-config --cflags --libs glib-2.0 gio-2.0 json-glib-1.0) -lm -o fuzz-safetensors
 *   mkdir -p corpus && ./fuzz-safetensors -max_total_time=60 corpus tests/data/tiny-llada
 */
#include <glib.h>
#include <glib/gstdio.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "um-error.h"
#include "um-model.h"
#include "um-ref-kernels.h"
#include "um-safetensors.h"
#include "um-tensor-table.h"

int LLVMFuzzerInitialize (int *argc, char ***argv);
int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static volatile guint64 sink;

/* The fixtures' shapes (config.json of tests/data/tiny-dream and the others, trimmed). */
static const char dream_config[] =
  "{\"model_type\": \"Dream\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
  " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 512, \"rms_norm_eps\": 1e-06,"
  " \"rope_theta\": 1000000.0, \"mask_token_id\": 508, \"eos_token_id\": 504}";
static const char moe_config[] =
  "{\"model_type\": \"llada\", \"architectures\": [\"LLaDAMoEModelLM\"], \"hidden_size\": 64,"
  " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 4, \"vocab_size\": 512,"
  " \"num_experts\": 8, \"num_experts_per_tok\": 3, \"expert_intermediate_size\": 32, \"qk_layernorm\": true,"
  " \"rope_theta\": 50000.0, \"mask_token_id\": 511, \"eos_token_id\": 510}";
static const char rnd1_config[] =
  "{\"model_type\": \"rnd1\", \"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 8,"
  " \"num_key_value_heads\": 2, \"head_dim\": 16, \"vocab_size\": 512, \"num_experts\": 8,"
  " \"num_experts_per_tok\": 3, \"moe_intermediate_size\": 32, \"norm_topk_prob\": true,"
  " \"mask_token_id\": 506, \"eos_token_id\": 503}";
static const char tokenizer[] =
  "{\"version\": \"1.0\", \"added_tokens\": [], \"normalizer\": null, \"pre_tokenizer\": {\"type\":"
  " \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true},"
  " \"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"H\": 0,"
  " \"e\": 1, \"He\": 2}, \"merges\": [\"H e\"]}}";

static char *model_dir;

static char *
model_file (const char *name)
{
  return g_build_filename (model_dir, name, NULL);
}

/* No fsync: thousands of writes a second to a scratch folder. */
static void
put (const char *name, const void *data, gsize len)
{
  g_autofree char *path = model_file (name);
  FILE *f = fopen (path, "wb");

  g_assert (f != NULL);
  g_assert (fwrite (data, 1, len, f) == len);
  g_assert (fclose (f) == 0);
}

static void
remove_model_dir (void)
{
  static const char *const files[] = { "config.json", "tokenizer.json", "model.safetensors" };
  for (guint i = 0; i < G_N_ELEMENTS (files); i++)
    {
      g_autofree char *path = model_file (files[i]);
      g_unlink (path);
    }
  g_rmdir (model_dir);
}

/* A critical or warning means a broken invariant: make it a crash. */
int
LLVMFuzzerInitialize (int *argc, char ***argv)
{
  g_log_set_always_fatal (G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING);
  /* In memory where there is a tmpfs. */
  model_dir = g_build_filename (g_file_test ("/dev/shm", G_FILE_TEST_IS_DIR) ? "/dev/shm" : g_get_tmp_dir (),
                                "fuzz-safetensors-XXXXXX", NULL);
  g_assert (g_mkdtemp (model_dir) != NULL);
  put ("tokenizer.json", tokenizer, strlen (tokenizer));
  atexit (remove_model_dir);
  return 0;
}

static void
load_model (const UmTensorTable *t, const uint8_t *data, size_t size)
{
  const UmTensorInfo *q = um_tensor_table_lookup (t, "model.layers.0.self_attn.q_proj.weight");
  g_autoptr(GError) error = NULL;
  g_autoptr(UmModel) m = NULL;
  g_autofree char *dir = g_strdup (model_dir);
  const char *config;

  if (um_tensor_table_lookup (t, "model.layers.0.self_attn.q_proj.bias") != NULL)
    config = dream_config;
  else if (q != NULL && q->n_dims == 2 && q->shape[0] == 128)
    config = rnd1_config;
  else
    config = moe_config;
  put ("config.json", config, strlen (config));
  put ("model.safetensors", data, size);
  m = um_model_load (dir, NULL, &error);
  if (m == NULL)
    {
      g_assert (error != NULL && error->domain == UM_ERROR);
      return;
    }
  {
    const gint32 ids[4] = { 0, 511, 7, 300 };
    double logits[4 * 512];
    g_assert (um_ref_forward (m, ids, 4, logits, NULL));
    sink += (guint64) (logits[0] == logits[0]);
  }
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (UmTensorTable) t = um_safetensors_open_from_bytes (data, size, "fuzz.safetensors",
                                                                &error);

  if (t == NULL)
    {
      /* Every failure is a GError in UM_ERROR that names the file. */
      g_assert (error != NULL && error->domain == UM_ERROR);
      g_assert (strstr (error->message, "fuzz.safetensors") != NULL);
      return 0;
    }
  g_assert (error == NULL);
  for (guint i = 0; i < um_tensor_table_size (t); i++)
    {
      const UmTensorInfo *info = um_tensor_table_get (t, i);
      g_autofree char *shape = um_tensor_shape_string (info);
      uint64_t n_bytes;

      g_assert (info->name != NULL);
      g_assert (um_tensor_table_lookup (t, info->name) == info);
      g_assert (info->n_dims <= UM_MAX_DIMS);
      g_assert (um_dtype_bytes (info->dtype, info->n_elems, &n_bytes) && n_bytes == info->n_bytes);
      sink += strlen (shape);
      /* Zero-element tensors are legal in safetensors. */
      if (info->n_bytes == 0)
        continue;
      g_assert (info->data >= data && info->n_bytes <= size
                && (size_t) (info->data - data) <= size - info->n_bytes);
      sink += info->data[0] + info->data[info->n_bytes - 1];
    }
  sink += um_tensor_table_total_bytes (t);
  if (um_tensor_table_lookup (t, "model.embed_tokens.weight") != NULL)
    load_model (t, data, size);
  return 0;
}

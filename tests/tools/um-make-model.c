/* um-make-model — writes a randomly initialised LLaDA-architecture model
 * folder (safetensors), for benchmarks and tests:
 *   um-make-model --out DIR [--shape llada-8b|tiny] [--layers N] [--dtype f32|f16|bf16]
 *                 [--shards N] [--seed N] [--tokenizer tokenizer.json]
 */
#include <stdio.h>

#include "um-test-util.h"

int
main (int argc, char **argv)
{
  g_autofree char *out = NULL, *shape = NULL, *dtype = NULL, *tokenizer = NULL;
  int layers = -1, shards = 1, seed = 1, d_model = 0, heads = 0, kv_heads = 0, mlp = 0, vocab = 0;
  GOptionEntry entries[] = {
    { "out", 'o', 0, G_OPTION_ARG_FILENAME, &out, "Folder to write", "DIR" },
    { "shape", 0, 0, G_OPTION_ARG_STRING, &shape, "llada-8b (default) or tiny", "SHAPE" },
    { "layers", 0, 0, G_OPTION_ARG_INT, &layers, "Number of layers", "N" },
    { "dtype", 0, 0, G_OPTION_ARG_STRING, &dtype, "f32, f16 or bf16 (default)", "TYPE" },
    { "shards", 0, 0, G_OPTION_ARG_INT, &shards, "Number of safetensors shards", "N" },
    { "seed", 0, 0, G_OPTION_ARG_INT, &seed, "Random seed", "N" },
    { "tokenizer", 0, 0, G_OPTION_ARG_FILENAME, &tokenizer, "tokenizer.json to copy in", "FILE" },
    { "d-model", 0, 0, G_OPTION_ARG_INT, &d_model, "Override the model width", "N" },
    { "heads", 0, 0, G_OPTION_ARG_INT, &heads, "Override the number of heads", "N" },
    { "kv-heads", 0, 0, G_OPTION_ARG_INT, &kv_heads, "Override the number of KV heads", "N" },
    { "mlp", 0, 0, G_OPTION_ARG_INT, &mlp, "Override the MLP width", "N" },
    { "vocab", 0, 0, G_OPTION_ARG_INT, &vocab, "Override the vocabulary size (≥ 512)", "N" },
    { NULL }
  };
  g_autoptr(GOptionContext) ctx = g_option_context_new ("— write a random LLaDA model");
  g_autoptr(GError) error = NULL;
  UmTestModelSpec spec;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!g_option_context_parse (ctx, &argc, &argv, &error) || out == NULL)
    {
      fprintf (stderr, "um-make-model: %s\n", error ? error->message : "--out DIR is required");
      return 2;
    }
  if (shape == NULL || g_str_equal (shape, "llada-8b"))
    um_test_model_spec_init_llada8b (&spec, layers > 0 ? layers : 32);
  else if (g_str_equal (shape, "tiny"))
    {
      um_test_model_spec_init (&spec);
      if (layers > 0)
        spec.n_layers = layers;
    }
  else
    {
      fprintf (stderr, "um-make-model: unknown shape “%s”\n", shape);
      return 2;
    }
  if (dtype != NULL && !um_dtype_from_name (dtype, &spec.dtype))
    {
      fprintf (stderr, "um-make-model: unknown dtype “%s”\n", dtype);
      return 2;
    }
  if (spec.dtype != UM_DTYPE_F32 && spec.dtype != UM_DTYPE_F16 && spec.dtype != UM_DTYPE_BF16)
    {
      fprintf (stderr, "um-make-model: safetensors models are F32, F16 or BF16\n");
      return 2;
    }
  if (d_model > 0)
    spec.d_model = d_model;
  if (heads > 0)
    spec.n_heads = spec.n_kv_heads = heads;
  if (kv_heads > 0)
    spec.n_kv_heads = kv_heads;
  if (mlp > 0)
    spec.mlp_hidden = mlp;
  if (vocab >= 512)
    {
      spec.vocab_size = vocab;
      /* Special tokens keep their place at the end of the vocabulary, as in
       * the tiny shape, when the LLaDA-8B ids no longer fit. */
      if (spec.mask_id >= vocab)
        {
          spec.mask_id = vocab - 4;
          spec.eos_id = vocab - 5;
          spec.bos_id = vocab - 6;
        }
    }
  spec.n_shards = MAX (shards, 1);
  spec.seed = seed;
  spec.tokenizer = tokenizer;
  if (!um_test_write_model (out, &spec, &error))
    {
      fprintf (stderr, "um-make-model: %s\n", error->message);
      return 1;
    }
  return 0;
}

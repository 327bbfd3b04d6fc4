/* um-make-model — writes a randomly initialised diffusion-LM folder
 * (safetensors, in the family's own Hugging Face layout), and optionally
 * GGUF files of it in llama.cpp's layout, for benchmarks and tests:
 *   um-make-model --out DIR [--shape SHAPE] [--family FAMILY] [--layers N]
 *                 [--dtype f32|f16|bf16] [--shards N] [--seed N] [--tokenizer tokenizer.json]
 *                 [--gguf TYPE,TYPE…] [--gguf-only]
 * Shapes: llada-8b (default), tiny (the fixture tiny-<family>), dream-7b,
 * llada-moe-7b, rnd1-30b, llada2-mini (the real checkpoints' dimensions), dream-100m,
 * llada-moe-100m (about 100M parameters, for speed comparisons; see below).
 * --gguf writes DIR-TYPE.gguf for each type (as `unmask-cli quantize`
 * does); --gguf-only then removes the folder, so a 7B-shaped model never
 * needs its safetensors for longer than the conversion.
 *
 * The families' tokenizers are the tiny fixtures' (512 tokens, with the
 * family's pre-tokenizer and special tokens at ids 500–511); the other rows
 * of a larger vocabulary are unused ([PADn] in a GGUF). */
#include <glib/gstdio.h>
#include <stdio.h>

#include "um-quantize.h"
#include "um-test-util.h"

typedef struct {
  const char *name;
  UmArch      arch;
  guint       layers, d_model, heads, kv_heads, head_dim, mlp, vocab, experts, used, expert_ffn;
} Shape;

/* The real checkpoints' dimensions (../shared/docs/dllm-archs.md), and
 * about-100M-parameter models that keep the family's head size, GQA ratio,
 * FFN/width ratio and expert count but not the vocabulary (152k rows would
 * be most of 100M parameters), with every row length a multiple of 256 so
 * Q4_K_M needs no fallback type. */
static const Shape shapes[] = {
  { "dream-7b", UM_ARCH_DREAM, 28, 3584, 28, 4, 128, 18944, 152064, 0, 0, 0 },
  { "llada-moe-7b", UM_ARCH_LLADA_MOE, 16, 2048, 16, 16, 128, 8192, 157184, 64, 8, 1024 },
  { "rnd1-30b", UM_ARCH_RND1, 48, 2048, 32, 4, 128, 6144, 151936, 128, 8, 768 },
  /* 5 × 10.8M + 2 × 32768 × 768: 104M parameters. */
  { "dream-100m", UM_ARCH_DREAM, 5, 768, 6, 1, 128, 4096, 32768, 0, 0, 0 },
  /* 3 × 26.2M + 2 × 32768 × 512: 112M parameters, 46M active. */
  { "llada-moe-100m", UM_ARCH_LLADA_MOE, 3, 512, 4, 4, 128, 2048, 32768, 64, 8, 256 },
  /* LLaDA2.0-mini: 16B parameters, 1.4B active (the first layer dense of
   * 5120; experts in 8 groups, top 4; a shared expert of 512; half of each
   * head rotated). */
  { "llada2-mini", UM_ARCH_LLADA2, 20, 2048, 16, 4, 128, 5120, 157184, 256, 8, 512 },
};

static gboolean
family_from_name (const char *name, UmArch *out)
{
  if (g_str_equal (name, "llada"))
    {
      *out = UM_ARCH_LLADA;
      return TRUE;
    }
  return um_arch_from_gguf (name, out);
}

static void
progress (double fraction, const char *tensor, gpointer user_data)
{
  static int last = -1;
  int pct = (int) (fraction * 100);
  (void) tensor;
  (void) user_data;
  if (pct / 10 != last / 10)
    {
      fprintf (stderr, "  %d %%\n", pct);
      last = pct;
    }
}

int
main (int argc, char **argv)
{
  g_autofree char *out = NULL, *shape = NULL, *dtype = NULL, *tokenizer = NULL, *family = NULL, *gguf = NULL;
  int layers = -1, shards = 1, seed = 1, d_model = 0, heads = 0, kv_heads = 0, mlp = 0, vocab = 0;
  int experts = -1, used = 0, expert_ffn = 0, head_dim = 0;
  gboolean gguf_only = FALSE;
  GOptionEntry entries[] = {
    { "out", 'o', 0, G_OPTION_ARG_FILENAME, &out, "Folder to write", "DIR" },
    { "shape", 0, 0, G_OPTION_ARG_STRING, &shape,
      "llada-8b (default), tiny, dream-7b, llada-moe-7b, rnd1-30b, llada2-mini, dream-100m or llada-moe-100m", "SHAPE" },
    { "family", 0, 0, G_OPTION_ARG_STRING, &family,
      "llada, dream, llada-moe or rnd1 (default: the shape's; with tiny, the fixture tiny-FAMILY's)", "FAMILY" },
    { "layers", 0, 0, G_OPTION_ARG_INT, &layers, "Number of layers", "N" },
    { "dtype", 0, 0, G_OPTION_ARG_STRING, &dtype, "f32, f16 or bf16 (default)", "TYPE" },
    { "shards", 0, 0, G_OPTION_ARG_INT, &shards, "Number of safetensors shards", "N" },
    { "seed", 0, 0, G_OPTION_ARG_INT, &seed, "Random seed", "N" },
    { "tokenizer", 0, 0, G_OPTION_ARG_FILENAME, &tokenizer, "tokenizer.json to copy in", "FILE" },
    { "d-model", 0, 0, G_OPTION_ARG_INT, &d_model, "Override the model width", "N" },
    { "heads", 0, 0, G_OPTION_ARG_INT, &heads, "Override the number of heads", "N" },
    { "kv-heads", 0, 0, G_OPTION_ARG_INT, &kv_heads, "Override the number of KV heads", "N" },
    { "head-dim", 0, 0, G_OPTION_ARG_INT, &head_dim, "Override the head size (families)", "N" },
    { "mlp", 0, 0, G_OPTION_ARG_INT, &mlp, "Override the MLP width", "N" },
    { "vocab", 0, 0, G_OPTION_ARG_INT, &vocab, "Override the vocabulary size (≥ 512)", "N" },
    { "experts", 0, 0, G_OPTION_ARG_INT, &experts, "Override the number of experts (0: dense)", "N" },
    { "experts-used", 0, 0, G_OPTION_ARG_INT, &used, "Override the experts per token", "N" },
    { "expert-ffn", 0, 0, G_OPTION_ARG_INT, &expert_ffn, "Override an expert's FFN width", "N" },
    { "gguf", 0, 0, G_OPTION_ARG_STRING, &gguf, "Also write DIR-TYPE.gguf for each type (F16, Q8_0, Q4_K_M, …)",
      "TYPE,…" },
    { "gguf-only", 0, 0, G_OPTION_ARG_NONE, &gguf_only, "Remove the folder once the GGUF files are written", NULL },
    { NULL }
  };
  g_autoptr(GOptionContext) ctx = g_option_context_new ("— write a random diffusion LM");
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) types = NULL;
  const Shape *preset = NULL;
  UmTestModelSpec spec;
  UmArch arch = UM_ARCH_LLADA;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!g_option_context_parse (ctx, &argc, &argv, &error) || out == NULL)
    {
      fprintf (stderr, "um-make-model: %s\n", error ? error->message : "--out DIR is required");
      return 2;
    }
  for (guint i = 0; shape != NULL && i < G_N_ELEMENTS (shapes); i++)
    if (g_str_equal (shape, shapes[i].name))
      preset = &shapes[i];
  if (family != NULL && !family_from_name (family, &arch))
    {
      fprintf (stderr, "um-make-model: unknown family “%s” (llada, dream, llada-moe, rnd1)\n", family);
      return 2;
    }
  if (preset != NULL)
    {
      if (family != NULL && arch != preset->arch)
        {
          fprintf (stderr, "um-make-model: the shape %s is a %s model\n", preset->name,
                   um_arch_info (preset->arch)->name);
          return 2;
        }
      um_test_model_spec_init_family (&spec, preset->arch);
      spec.n_layers = preset->layers;
      spec.d_model = preset->d_model;
      spec.n_heads = preset->heads;
      spec.n_kv_heads = preset->kv_heads;
      spec.head_dim = preset->head_dim;
      spec.mlp_hidden = preset->mlp;
      spec.vocab_size = preset->vocab;
      spec.n_experts = preset->experts;
      spec.n_experts_used = preset->used;
      spec.expert_ffn = preset->expert_ffn;
      if (preset->arch == UM_ARCH_LLADA2)
        {
          spec.n_expert_groups = 8;
          spec.n_groups_used = 4;
          spec.shared_ffn = preset->expert_ffn;
        }
      spec.dtype = UM_DTYPE_BF16;
      if (layers > 0)
        spec.n_layers = layers;
    }
  else if (shape == NULL || g_str_equal (shape, "llada-8b"))
    {
      if (arch != UM_ARCH_LLADA)
        {
          fprintf (stderr, "um-make-model: llada-8b is a LLaDA shape; give a shape of the family\n");
          return 2;
        }
      um_test_model_spec_init_llada8b (&spec, layers > 0 ? layers : 32);
    }
  else if (g_str_equal (shape, "tiny"))
    {
      um_test_model_spec_init_family (&spec, arch);
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
  if (head_dim > 0)
    spec.head_dim = head_dim;
  if (mlp > 0)
    spec.mlp_hidden = mlp;
  if (spec.head_dim > 0 && spec.arch != UM_ARCH_RND1 && spec.head_dim * spec.n_heads != spec.d_model)
    {
      fprintf (stderr, "um-make-model: only RND1's configuration has a head size other than d_model / heads\n");
      return 2;
    }
  if (experts >= 0 && spec.arch != UM_ARCH_LLADA_MOE && spec.arch != UM_ARCH_RND1)
    {
      fprintf (stderr, "um-make-model: only LLaDA-MoE and RND1 models have experts\n");
      return 2;
    }
  if (experts > 0)
    spec.n_experts = experts;
  if (used > 0)
    spec.n_experts_used = used;
  if (expert_ffn > 0)
    spec.expert_ffn = expert_ffn;
  if (spec.n_experts > 0 && (spec.n_experts_used == 0 || spec.n_experts_used > spec.n_experts))
    {
      fprintf (stderr, "um-make-model: %u experts per token of %u\n", spec.n_experts_used, spec.n_experts);
      return 2;
    }
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
  if (gguf != NULL)
    {
      types = g_strsplit (gguf, ",", -1);
      for (guint i = 0; types[i] != NULL; i++)
        if (!um_quantize_type_is_valid (types[i]))
          {
            fprintf (stderr, "um-make-model: unknown GGUF type “%s”\n", types[i]);
            return 2;
          }
    }
  if (!um_test_write_model (out, &spec, &error))
    {
      fprintf (stderr, "um-make-model: %s\n", error->message);
      return 1;
    }
  for (guint i = 0; types != NULL && types[i] != NULL; i++)
    {
      g_autoptr(UmModel) model = um_model_load (out, NULL, &error);
      g_autofree char *path = g_strdup_printf ("%s-%s.gguf", out, um_quantize_type_name (types[i]));

      fprintf (stderr, "um-make-model: writing %s\n", path);
      if (model == NULL || !um_quantize_model (model, types[i], path, progress, NULL, NULL, &error))
        {
          fprintf (stderr, "um-make-model: %s\n", error->message);
          return 1;
        }
    }
  if (gguf_only && types != NULL)
    um_test_rmtree (out);
  return 0;
}

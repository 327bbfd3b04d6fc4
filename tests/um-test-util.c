#include "um-test-util.h"

#include "um-choose.h"
#include "um-engine.h"
#include "um-ref-kernels.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "um-error.h"
#include "um-half.h"

char *
um_test_data_path (const char *name)
{
  const char *dir = g_getenv ("UM_TEST_DATA");
  return g_build_filename (dir ? dir : "tests/data", name, NULL);
}

JsonParser *
um_test_load_json (const char *name)
{
  g_autofree char *path = um_test_data_path (name);
  g_autoptr(GError) error = NULL;
  JsonParser *parser = json_parser_new_immutable ();

  json_parser_load_from_mapped_file (parser, path, &error);
  g_assert_no_error (error);
  return parser;
}

GArray *
um_test_json_ids (JsonArray *array)
{
  GArray *ids = g_array_new (FALSE, FALSE, sizeof (gint32));
  for (guint i = 0; i < json_array_get_length (array); i++)
    {
      gint32 v = (gint32) json_array_get_int_element (array, i);
      g_array_append_val (ids, v);
    }
  return ids;
}

/* What the abort handler writes: formatted before the seed runs, since a
 * signal handler may only write(2). Empty while no seed runs. */
static char   seed_note[128];
static size_t seed_note_len;

static void
seed_abort_handler (int sig)
{
  if (seed_note_len > 0)
    {
      ssize_t r = write (STDERR_FILENO, seed_note, seed_note_len);
      (void) r;
    }
  /* SA_RESETHAND restored the default action: abort for real. */
  raise (sig);
}

static void
seed_note_set (guint32 seed)
{
  static gboolean installed;

  if (!installed)
    {
      struct sigaction sa;
      memset (&sa, 0, sizeof sa);
      sa.sa_handler = seed_abort_handler;
      sa.sa_flags = (int) SA_RESETHAND;
      sigemptyset (&sa.sa_mask);
      /* g_assert* abort; g_error traps. */
      sigaction (SIGABRT, &sa, NULL);
      sigaction (SIGTRAP, &sa, NULL);
      installed = TRUE;
    }
  g_snprintf (seed_note, sizeof seed_note,
              "\n** failed with test seed %u: replay it with UM_TEST_SEED=%u\n", seed, seed);
  seed_note_len = strlen (seed_note);
}

gboolean
um_test_seed_next (guint *it, guint32 *seed)
{
  /* Fixed seeds: arbitrary, spread over the 32 bits. */
  static const guint32 fixed[UM_TEST_N_FIXED_SEEDS] = {
    1, 2, 3, 42, 1234, 99991, 0x9e3779b9u, 0x85ebca6bu, 0xc2b2ae35u, 0x27d4eb2fu,
    0x165667b1u, 0xdeadbeefu, 0x01000193u, 0x811c9dc5u, 0x5bd1e995u, 0xcc9e2d51u,
    0x1b873593u, 0xe6546b64u, 0x7fffffffu, 0xffffffffu,
  };
  const char *env = g_getenv ("UM_TEST_SEED");
  guint i = (*it)++;

  if (env != NULL && *env != '\0')
    {
      guint64 v;
      if (!g_ascii_string_to_unsigned (env, 10, 0, G_MAXUINT32, &v, NULL))
        g_error ("UM_TEST_SEED=%s is not a number from 0 to %u", env, G_MAXUINT32);
      if (i > 0)
        goto done;
      *seed = (guint32) v;
      g_test_message ("test seed %u (from UM_TEST_SEED)", *seed);
    }
  else if (i < UM_TEST_N_FIXED_SEEDS)
    *seed = fixed[i];
  else if (i == UM_TEST_N_FIXED_SEEDS)
    {
      /* The clock's microseconds mixed (splitmix64's finalizer) so that
       * runs close in time still get unrelated seeds. */
      guint64 z = (guint64) g_get_real_time () + 0x9e3779b97f4a7c15ull * (guint64) getpid ();
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      *seed = (guint32) (z ^ (z >> 31));
      g_test_message ("test seed %u varies per run; replay it with UM_TEST_SEED=%u", *seed, *seed);
    }
  else
    goto done;
  seed_note_set (*seed);
  return TRUE;

done:
  seed_note_len = 0;
  return FALSE;
}

char *
um_test_mkdtemp (void)
{
  g_autoptr(GError) error = NULL;
  char *dir = g_dir_make_tmp ("unmask-test-XXXXXX", &error);
  g_assert_no_error (error);
  return dir;
}

void
um_test_rmtree (const char *path)
{
  GDir *dir = g_dir_open (path, 0, NULL);
  const char *name;

  if (dir != NULL)
    {
      while ((name = g_dir_read_name (dir)) != NULL)
        {
          g_autofree char *child = g_build_filename (path, name, NULL);
          if (g_file_test (child, G_FILE_TEST_IS_DIR) && !g_file_test (child, G_FILE_TEST_IS_SYMLINK))
            um_test_rmtree (child);
          else
            g_unlink (child);
        }
      g_dir_close (dir);
    }
  g_rmdir (path);
}

void
um_test_write_file (const char *path, const char *contents, gssize len)
{
  g_autoptr(GError) error = NULL;
  g_file_set_contents (path, contents, len, &error);
  g_assert_no_error (error);
}

char *
um_test_read_file (const char *path)
{
  char *text = NULL;
  g_autoptr(GError) error = NULL;
  g_file_get_contents (path, &text, NULL, &error);
  g_assert_no_error (error);
  return text;
}

guint
um_test_count_prefix (const char *dir, const char *prefix)
{
  g_autoptr(GDir) d = g_dir_open (dir, 0, NULL);
  const char *name;
  guint n = 0;
  while (d != NULL && (name = g_dir_read_name (d)) != NULL)
    n += g_str_has_prefix (name, prefix);
  return n;
}

void
um_test_copy_dir (const char *from, const char *to)
{
  g_autoptr(GError) error = NULL;
  GDir *dir = g_dir_open (from, 0, &error);
  const char *name;

  g_assert_no_error (error);
  g_mkdir_with_parents (to, 0755);
  while ((name = g_dir_read_name (dir)) != NULL)
    {
      g_autofree char *src = g_build_filename (from, name, NULL);
      g_autofree char *dst = g_build_filename (to, name, NULL);
      g_autofree char *contents = NULL;
      gsize len;
      if (g_file_test (src, G_FILE_TEST_IS_DIR))
        continue;
      g_file_get_contents (src, &contents, &len, &error);
      g_assert_no_error (error);
      um_test_write_file (dst, contents, len);
    }
  g_dir_close (dir);
}

void
um_test_model_spec_init (UmTestModelSpec *spec)
{
  memset (spec, 0, sizeof *spec);
  spec->n_layers = 2;
  spec->d_model = 64;
  spec->n_heads = 4;
  spec->n_kv_heads = 4;
  spec->mlp_hidden = 160;
  spec->vocab_size = 512;
  spec->rope_theta = 10000.0;
  spec->rms_eps = 1e-5;
  spec->mask_id = 508;
  spec->eos_id = 507;
  spec->bos_id = 506;
  spec->dtype = UM_DTYPE_F32;
  spec->n_shards = 1;
  spec->seed = 1;
}

void
um_test_model_spec_init_llada8b (UmTestModelSpec *spec, guint n_layers)
{
  um_test_model_spec_init (spec);
  spec->n_layers = n_layers;
  spec->d_model = 4096;
  spec->n_heads = 32;
  spec->n_kv_heads = 32;
  spec->mlp_hidden = 12288;
  spec->vocab_size = 126464;
  spec->rope_theta = 500000.0;
  spec->mask_id = 126336;
  spec->eos_id = 126081;
  spec->bos_id = 126080;
  spec->dtype = UM_DTYPE_BF16;
}

void
um_test_model_spec_init_family (UmTestModelSpec *spec, UmArch arch)
{
  um_test_model_spec_init (spec);
  spec->arch = arch;
  switch (arch)
    {
    case UM_ARCH_DREAM:
      spec->n_kv_heads = 2;
      spec->mlp_hidden = 128;
      spec->rope_theta = 1e6;
      spec->rms_eps = 1e-6;
      spec->mask_id = 508;
      spec->eos_id = 504;
      spec->bos_id = 507;
      break;
    case UM_ARCH_LLADA_MOE:
      spec->mlp_hidden = 128;
      spec->n_experts = 8;
      spec->n_experts_used = 3;
      spec->expert_ffn = 32;
      spec->rope_theta = 5e4;
      spec->rms_eps = 1e-5;
      spec->mask_id = 511;
      spec->eos_id = 510;
      spec->bos_id = 509;
      break;
    case UM_ARCH_LLADA2:
      spec->n_kv_heads = 2;
      spec->head_dim = 16;
      spec->mlp_hidden = 128;
      spec->n_experts = 8;
      spec->n_experts_used = 3;
      spec->expert_ffn = 32;
      spec->n_dense_leading = 1;
      spec->n_expert_groups = 4;
      spec->n_groups_used = 2;
      spec->shared_ffn = 32;
      spec->rotary_factor = 0.5;
      spec->rope_theta = 6e5;
      spec->rms_eps = 1e-6;
      spec->mask_id = 507;
      spec->eos_id = 506;
      spec->bos_id = 505;
      break;
    case UM_ARCH_RND1:
      spec->n_heads = 8;
      spec->n_kv_heads = 2;
      spec->head_dim = 16;
      spec->mlp_hidden = 96;
      spec->n_experts = 8;
      spec->n_experts_used = 3;
      spec->expert_ffn = 32;
      spec->rope_theta = 1e6;
      spec->rms_eps = 1e-6;
      spec->mask_id = 506;
      spec->eos_id = 503;
      spec->bos_id = -1;
      break;
    default:
      break;
    }
}

const char *
um_test_family_fixture (UmArch arch)
{
  switch (arch)
    {
    case UM_ARCH_DREAM: return "tiny-dream";
    case UM_ARCH_LLADA_MOE: return "tiny-llada-moe";
    case UM_ARCH_RND1: return "tiny-rnd1";
    case UM_ARCH_LLADA2: return "tiny-llada2";
    default: return "tiny-llada";
    }
}

typedef struct {
  char    *name;
  guint64  rows, cols;   /* rows 0: a 1-D tensor of cols */
  double   scale;        /* uniform in [-scale, scale] */
  double   offset;       /* added (norms are ~1) */
  guint    shard;
  guint64  begin, end;
} Spec;

/* xorshift64*: fast and reproducible; quality does not matter here. */
static inline double
next_uniform (guint64 *s)
{
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return ((*s * 0x2545F4914F6CDD1Dull) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0;
}

static void
add_spec (GArray *specs, const char *name, guint64 rows, guint64 cols, double scale, double offset)
{
  Spec s = { g_strdup (name), rows, cols, scale, offset, 0, 0, 0 };
  g_array_append_val (specs, s);
}

static gboolean
write_config (const char *dir, const UmTestModelSpec *m, GError **error)
{
  g_autofree char *config = g_strdup_printf (
    "{\n \"architectures\": [\"LLaDAModelLM\"],\n \"model_type\": \"llada\",\n"
    " \"d_model\": %u,\n \"n_heads\": %u,\n \"n_kv_heads\": %u,\n \"n_layers\": %u,\n"
    " \"mlp_hidden_size\": %u,\n \"vocab_size\": %u,\n \"embedding_size\": %u,\n"
    " \"max_sequence_length\": 4096,\n \"rope_theta\": %.17g,\n \"rms_norm_eps\": %.17g,\n"
    " \"block_type\": \"llama\",\n \"activation_type\": \"silu\",\n \"layer_norm_type\": \"rms\",\n"
    " \"include_bias\": false,\n \"weight_tying\": false,\n"
    " \"eos_token_id\": %d,\n \"pad_token_id\": %d,\n \"mask_token_id\": %d\n}\n",
    m->d_model, m->n_heads, m->n_kv_heads, m->n_layers, m->mlp_hidden, m->vocab_size, m->vocab_size,
    m->rope_theta, m->rms_eps, m->eos_id, m->eos_id, m->mask_id);
  g_autofree char *gen = g_strdup_printf ("{\n \"bos_token_id\": %d,\n \"eos_token_id\": %d\n}\n",
                                          m->bos_id, m->eos_id);
  g_autofree char *config_path = g_build_filename (dir, "config.json", NULL);
  g_autofree char *gen_path = g_build_filename (dir, "generation_config.json", NULL);
  g_autofree char *tok_src = m->tokenizer ? g_strdup (m->tokenizer) : um_test_data_path ("tiny-llada/tokenizer.json");
  g_autofree char *tokcfg_src = um_test_data_path ("tiny-llada/tokenizer_config.json");
  g_autofree char *tok_dst = g_build_filename (dir, "tokenizer.json", NULL);
  g_autofree char *tokcfg_dst = g_build_filename (dir, "tokenizer_config.json", NULL);
  g_autofree char *contents = NULL;
  gsize len;

  if (!g_file_set_contents (config_path, config, -1, error)
      || !g_file_set_contents (gen_path, gen, -1, error)
      || !g_file_get_contents (tok_src, &contents, &len, error)
      || !g_file_set_contents (tok_dst, contents, len, error))
    return FALSE;
  g_clear_pointer (&contents, g_free);
  if (g_file_get_contents (tokcfg_src, &contents, &len, NULL))
    return g_file_set_contents (tokcfg_dst, contents, len, error);
  return TRUE;
}

/* Sets @key of @obj to @v where the family's config names it. */
static void
set_if_present (JsonObject *obj, const char *key, gint64 v)
{
  if (json_object_has_member (obj, key))
    json_object_set_int_member (obj, key, v);
}

/* The fixture's config.json with @m's shape; its tokenizer files and
 * generation_config.json as they are. */
static gboolean
write_family_config (const char *dir, const UmTestModelSpec *m, GError **error)
{
  const char *fixture = um_test_family_fixture (m->arch);
  g_autofree char *src_dir = um_test_data_path (fixture);
  g_autofree char *config_src = g_build_filename (src_dir, "config.json", NULL);
  g_autofree char *config_dst = g_build_filename (dir, "config.json", NULL);
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(JsonGenerator) gen = json_generator_new ();
  static const char *const copied[] = {
    "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "generation_config.json",
  };
  JsonObject *obj;

  if (!json_parser_load_from_file (parser, config_src, error))
    return FALSE;
  obj = json_node_get_object (json_parser_get_root (parser));
  set_if_present (obj, "hidden_size", m->d_model);
  set_if_present (obj, "intermediate_size", m->mlp_hidden);
  set_if_present (obj, "dense_intermediate_size", m->mlp_hidden);
  set_if_present (obj, "expert_intermediate_size", m->expert_ffn);
  set_if_present (obj, "moe_intermediate_size", m->expert_ffn);
  set_if_present (obj, "num_experts", m->n_experts);
  set_if_present (obj, "num_experts_per_tok", m->n_experts_used);
  set_if_present (obj, "head_dim", m->head_dim ? m->head_dim : m->d_model / m->n_heads);
  set_if_present (obj, "num_hidden_layers", m->n_layers);
  set_if_present (obj, "max_window_layers", m->n_layers);
  set_if_present (obj, "num_attention_heads", m->n_heads);
  set_if_present (obj, "num_key_value_heads", m->n_kv_heads);
  set_if_present (obj, "vocab_size", m->vocab_size);
  set_if_present (obj, "first_k_dense_replace", m->n_dense_leading);
  set_if_present (obj, "n_group", m->n_expert_groups);
  set_if_present (obj, "topk_group", m->n_groups_used);
  if (m->expert_ffn > 0)
    set_if_present (obj, "num_shared_experts", m->shared_ffn / m->expert_ffn);
  if (m->rotary_factor > 0.0 && json_object_has_member (obj, "partial_rotary_factor"))
    json_object_set_double_member (obj, "partial_rotary_factor", m->rotary_factor);
  json_object_set_double_member (obj, "rope_theta", m->rope_theta);
  json_object_set_double_member (obj, "rms_norm_eps", m->rms_eps);
  json_object_set_int_member (obj, "mask_token_id", m->mask_id);
  json_object_set_int_member (obj, "eos_token_id", m->eos_id);
  json_object_set_string_member (obj, "torch_dtype",
                                 m->dtype == UM_DTYPE_F32 ? "float32" : m->dtype == UM_DTYPE_F16 ? "float16" : "bfloat16");
  if (json_object_has_member (obj, "moe_layer_freq"))
    {
      JsonArray *freq = json_array_sized_new (m->n_layers);
      for (guint l = 0; l < m->n_layers; l++)
        json_array_add_int_element (freq, 1);
      json_object_set_array_member (obj, "moe_layer_freq", freq);
    }
  json_generator_set_root (gen, json_parser_get_root (parser));
  json_generator_set_pretty (gen, TRUE);
  if (!json_generator_to_file (gen, config_dst, error))
    return FALSE;
  for (guint i = 0; i < G_N_ELEMENTS (copied); i++)
    {
      g_autofree char *from = g_build_filename (src_dir, copied[i], NULL);
      g_autofree char *to = g_build_filename (dir, copied[i], NULL);
      g_autofree char *contents = NULL;
      gsize len;
      if (i == 0 && m->tokenizer != NULL)
        {
          g_free (from);
          from = g_strdup (m->tokenizer);
        }
      if (!g_file_test (from, G_FILE_TEST_EXISTS))
        continue;
      if (!g_file_get_contents (from, &contents, &len, error) || !g_file_set_contents (to, contents, len, error))
        return FALSE;
    }
  return TRUE;
}

/* A LLaDA 2.x checkpoint (LLaDA2MoeModelLM's names): fused QKV, QK-norm,
 * leading dense layers, then experts with a selection bias and the shared
 * expert; each projection's experts one after another. */
static void
add_llada2_specs (GArray *specs, const UmTestModelSpec *m)
{
  const guint hd = m->head_dim ? m->head_dim : m->d_model / m->n_heads;
  const double sd = 1.0 / sqrt (m->d_model), sq = 1.0 / sqrt (m->n_heads * hd);
  char name[256];

  add_spec (specs, "model.word_embeddings.weight", m->vocab_size, m->d_model, 1.0, 0.0);
  for (guint l = 0; l < m->n_layers; l++)
    {
#define ADD(suffix, r, c, sc, off) G_STMT_START { \
        g_snprintf (name, sizeof name, "model.layers.%u.%s", l, suffix); \
        add_spec (specs, name, r, c, sc, off); } G_STMT_END
      ADD ("input_layernorm.weight", 0, m->d_model, 0.1, 1.0);
      ADD ("attention.query_key_value.weight", (m->n_heads + 2 * m->n_kv_heads) * hd, m->d_model, 1.7 * sd, 0.0);
      ADD ("attention.query_layernorm.weight", 0, hd, 0.1, 1.0);
      ADD ("attention.key_layernorm.weight", 0, hd, 0.1, 1.0);
      ADD ("attention.dense.weight", m->d_model, m->n_heads * hd, 1.7 * sq, 0.0);
      ADD ("post_attention_layernorm.weight", 0, m->d_model, 0.1, 1.0);
      if (l < m->n_dense_leading || m->n_experts == 0)
        {
          ADD ("mlp.gate_proj.weight", m->mlp_hidden, m->d_model, 1.7 * sd, 0.0);
          ADD ("mlp.up_proj.weight", m->mlp_hidden, m->d_model, 1.7 * sd, 0.0);
          ADD ("mlp.down_proj.weight", m->d_model, m->mlp_hidden, 1.7 / sqrt (m->mlp_hidden), 0.0);
        }
      else
        {
          static const char *const proj[] = { "gate_proj", "up_proj", "down_proj" };
          const double sf = 1.0 / sqrt (m->expert_ffn);
          ADD ("mlp.gate.weight", m->n_experts, m->d_model, 4.0 * sd, 0.0);
          ADD ("mlp.gate.expert_bias", 0, m->n_experts, 0.05, 0.0);
          for (guint i = 0; i < G_N_ELEMENTS (proj); i++)
            for (guint e = 0; e < m->n_experts; e++)
              {
                char ename[128];
                g_snprintf (ename, sizeof ename, "mlp.experts.%u.%s.weight", e, proj[i]);
                if (i < 2)
                  ADD (ename, m->expert_ffn, m->d_model, 1.7 * sd, 0.0);
                else
                  ADD (ename, m->d_model, m->expert_ffn, 1.7 * sf, 0.0);
              }
          if (m->shared_ffn > 0)
            {
              ADD ("mlp.shared_experts.gate_proj.weight", m->shared_ffn, m->d_model, 1.7 * sd, 0.0);
              ADD ("mlp.shared_experts.up_proj.weight", m->shared_ffn, m->d_model, 1.7 * sd, 0.0);
              ADD ("mlp.shared_experts.down_proj.weight", m->d_model, m->shared_ffn, 1.7 / sqrt (m->shared_ffn), 0.0);
            }
        }
#undef ADD
    }
  add_spec (specs, "model.norm.weight", 0, m->d_model, 0.1, 1.0);
  add_spec (specs, "lm_head.weight", m->vocab_size, m->d_model, 8.0 * sd, 0.0);
}

/* The tensors of a Dream, LLaDA-MoE or RND1 checkpoint, in the order of
 * the fixtures' files. */
static void
add_family_specs (GArray *specs, const UmTestModelSpec *m)
{
  if (m->arch == UM_ARCH_LLADA2)
    {
      add_llada2_specs (specs, m);
      return;
    }
  const guint hd = m->head_dim ? m->head_dim : m->d_model / m->n_heads;
  const double sd = 1.0 / sqrt (m->d_model), sq = 1.0 / sqrt (m->n_heads * hd);
  const gboolean moe = m->n_experts > 0, bias = m->arch == UM_ARCH_DREAM;
  const double sf = 1.0 / sqrt (moe ? m->expert_ffn : m->mlp_hidden);
  char name[256];

  add_spec (specs, "model.embed_tokens.weight", m->vocab_size, m->d_model, 1.0, 0.0);
  for (guint l = 0; l < m->n_layers; l++)
    {
#define ADD(suffix, r, c, sc, off) G_STMT_START { \
        g_snprintf (name, sizeof name, "model.layers.%u.%s", l, suffix); \
        add_spec (specs, name, r, c, sc, off); } G_STMT_END
      ADD ("input_layernorm.weight", 0, m->d_model, 0.1, 1.0);
      ADD ("self_attn.q_proj.weight", m->n_heads * hd, m->d_model, 1.7 * sd, 0.0);
      ADD ("self_attn.k_proj.weight", m->n_kv_heads * hd, m->d_model, 1.7 * sd, 0.0);
      ADD ("self_attn.v_proj.weight", m->n_kv_heads * hd, m->d_model, 1.7 * sd, 0.0);
      if (bias)
        {
          ADD ("self_attn.q_proj.bias", 0, m->n_heads * hd, 0.5, 0.0);
          ADD ("self_attn.k_proj.bias", 0, m->n_kv_heads * hd, 0.5, 0.0);
          ADD ("self_attn.v_proj.bias", 0, m->n_kv_heads * hd, 0.5, 0.0);
        }
      ADD ("self_attn.o_proj.weight", m->d_model, m->n_heads * hd, 1.7 * sq, 0.0);
      if (moe)
        {
          ADD ("self_attn.q_norm.weight", 0, hd, 0.1, 1.0);
          ADD ("self_attn.k_norm.weight", 0, hd, 0.1, 1.0);
        }
      ADD ("post_attention_layernorm.weight", 0, m->d_model, 0.1, 1.0);
      if (!moe)
        {
          ADD ("mlp.gate_proj.weight", m->mlp_hidden, m->d_model, 1.7 * sd, 0.0);
          ADD ("mlp.up_proj.weight", m->mlp_hidden, m->d_model, 1.7 * sd, 0.0);
          ADD ("mlp.down_proj.weight", m->d_model, m->mlp_hidden, 1.7 * sf, 0.0);
        }
      else
        {
          static const char *const proj[] = { "gate_proj", "up_proj", "down_proj" };
          /* A router scale that spreads the choices over the experts. */
          ADD ("mlp.gate.weight", m->n_experts, m->d_model, 4.0 * sd, 0.0);
          /* Each projection's experts one after another in the file, so
           * the loader can view them stacked instead of gathering them. */
          for (guint i = 0; i < G_N_ELEMENTS (proj); i++)
            for (guint e = 0; e < m->n_experts; e++)
              {
                char ename[128];
                g_snprintf (ename, sizeof ename, "mlp.experts.%u.%s.weight", e, proj[i]);
                if (i < 2)
                  ADD (ename, m->expert_ffn, m->d_model, 1.7 * sd, 0.0);
                else
                  ADD (ename, m->d_model, m->expert_ffn, 1.7 * sf, 0.0);
              }
        }
#undef ADD
    }
  add_spec (specs, "model.norm.weight", 0, m->d_model, 0.1, 1.0);
  add_spec (specs, "lm_head.weight", m->vocab_size, m->d_model, 8.0 * sd, 0.0);
}

static guint64
elem_bytes (UmDType t)
{
  return t == UM_DTYPE_F32 ? 4 : 2;
}

static gboolean
write_shard (const char *path, GArray *specs, guint shard, const UmTestModelSpec *m, GError **error)
{
  g_autoptr(GString) header = g_string_new ("{\"__metadata__\":{\"format\":\"pt\"}");
  const char *dtype = m->dtype == UM_DTYPE_F32 ? "F32" : m->dtype == UM_DTYPE_F16 ? "F16" : "BF16";
  guint64 offset = 0, hlen;
  FILE *f;
  enum { CHUNK = 1 << 16 };
  g_autofree float *buf = g_new (float, CHUNK);
  g_autofree guint8 *out = g_new (guint8, CHUNK * 4);

  for (guint i = 0; i < specs->len; i++)
    {
      Spec *s = &g_array_index (specs, Spec, i);
      guint64 n = (s->rows ? s->rows : 1) * s->cols;
      if (s->shard != shard)
        continue;
      s->begin = offset;
      s->end = offset + n * elem_bytes (m->dtype);
      offset = s->end;
      if (s->rows)
        g_string_append_printf (header, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%" G_GUINT64_FORMAT ",%" G_GUINT64_FORMAT
                                "],\"data_offsets\":[%" G_GUINT64_FORMAT ",%" G_GUINT64_FORMAT "]}",
                                s->name, dtype, s->rows, s->cols, s->begin, s->end);
      else
        g_string_append_printf (header, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%" G_GUINT64_FORMAT
                                "],\"data_offsets\":[%" G_GUINT64_FORMAT ",%" G_GUINT64_FORMAT "]}",
                                s->name, dtype, s->cols, s->begin, s->end);
    }
  g_string_append_c (header, '}');
  /* Pad so tensor data is 8-byte aligned, as the reference writer does. */
  while ((header->len + 8) % 8 != 0)
    g_string_append_c (header, ' ');

  f = fopen (path, "wb");
  if (f == NULL)
    {
      g_set_error (error, G_FILE_ERROR, g_file_error_from_errno (errno), "%s: %s", path, g_strerror (errno));
      return FALSE;
    }
  hlen = GUINT64_TO_LE (header->len);
  fwrite (&hlen, 8, 1, f);
  fwrite (header->str, 1, header->len, f);
  for (guint i = 0; i < specs->len; i++)
    {
      Spec *s = &g_array_index (specs, Spec, i);
      guint64 n = (s->rows ? s->rows : 1) * s->cols;
      guint64 state = (guint64) m->seed * 0x9E3779B97F4A7C15ull + (i + 1) * 0xD1B54A32D192ED03ull;
      if (s->shard != shard)
        continue;
      for (guint64 done = 0; done < n;)
        {
          guint64 c = MIN ((guint64) CHUNK, n - done);
          for (guint64 j = 0; j < c; j++)
            buf[j] = (float) (s->offset + s->scale * next_uniform (&state));
          for (guint64 j = 0; j < c; j++)
            {
              if (m->dtype == UM_DTYPE_F32)
                memcpy (out + 4 * j, &buf[j], 4);
              else
                {
                  guint16 h = m->dtype == UM_DTYPE_F16 ? um_f32_to_f16 (buf[j]) : um_f32_to_bf16 (buf[j]);
                  memcpy (out + 2 * j, &h, 2);
                }
            }
          fwrite (out, elem_bytes (m->dtype), c, f);
          done += c;
        }
    }
  if (fclose (f) != 0)
    {
      g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_IO, "%s: write failed", path);
      return FALSE;
    }
  return TRUE;
}

gboolean
um_test_write_model (const char *dir, const UmTestModelSpec *m, GError **error)
{
  g_autoptr(GArray) specs = g_array_new (FALSE, FALSE, sizeof (Spec));
  const guint hd = m->d_model / m->n_heads;
  const double sd = 1.0 / sqrt (m->d_model), sf = 1.0 / sqrt (m->mlp_hidden);
  char name[256];
  gboolean ok = TRUE;

  g_mkdir_with_parents (dir, 0755);
  if (m->arch != UM_ARCH_LLADA)
    {
      if (!write_family_config (dir, m, error))
        return FALSE;
      add_family_specs (specs, m);
    }
  else if (!write_config (dir, m, error))
    return FALSE;

  /* Uniform in [-a, a] has standard deviation a/√3: scale so activations stay O(1). */
  if (m->arch == UM_ARCH_LLADA)
    add_spec (specs, "model.transformer.wte.weight", m->vocab_size, m->d_model, 1.0, 0.0);
  for (guint l = 0; m->arch == UM_ARCH_LLADA && l < m->n_layers; l++)
    {
#define ADD(suffix, r, c, sc, off) G_STMT_START { \
        g_snprintf (name, sizeof name, "model.transformer.blocks.%u.%s", l, suffix); \
        add_spec (specs, name, r, c, sc, off); } G_STMT_END
      ADD ("attn_norm.weight", 0, m->d_model, 0.1, 1.0);
      ADD ("q_proj.weight", m->n_heads * hd, m->d_model, 1.7 * sd, 0.0);
      ADD ("k_proj.weight", m->n_kv_heads * hd, m->d_model, 1.7 * sd, 0.0);
      ADD ("v_proj.weight", m->n_kv_heads * hd, m->d_model, 1.7 * sd, 0.0);
      ADD ("attn_out.weight", m->d_model, m->n_heads * hd, 1.7 * sd, 0.0);
      ADD ("ff_norm.weight", 0, m->d_model, 0.1, 1.0);
      ADD ("ff_proj.weight", m->mlp_hidden, m->d_model, 1.7 * sd, 0.0);
      ADD ("up_proj.weight", m->mlp_hidden, m->d_model, 1.7 * sd, 0.0);
      ADD ("ff_out.weight", m->d_model, m->mlp_hidden, 1.7 * sf, 0.0);
#undef ADD
    }
  if (m->arch == UM_ARCH_LLADA)
    {
      add_spec (specs, "model.transformer.ln_f.weight", 0, m->d_model, 0.1, 1.0);
      /* A larger head scale makes the logits confident, like a trained model. */
      add_spec (specs, "model.transformer.ff_out.weight", m->vocab_size, m->d_model, 8.0 * sd, 0.0);
    }

  if (m->n_shards <= 1)
    {
      g_autofree char *path = g_build_filename (dir, "model.safetensors", NULL);
      ok = write_shard (path, specs, 0, m, error);
    }
  else
    {
      g_autoptr(GString) index = g_string_new ("{\"metadata\": {}, \"weight_map\": {");
      g_autofree char *index_path = g_build_filename (dir, "model.safetensors.index.json", NULL);
      for (guint i = 0; i < specs->len; i++)
        {
          Spec *s = &g_array_index (specs, Spec, i);
          s->shard = (guint) ((guint64) i * m->n_shards / specs->len);
        }
      for (guint sh = 0; ok && sh < m->n_shards; sh++)
        {
          g_autofree char *file = g_strdup_printf ("model-%05u-of-%05u.safetensors", sh + 1, m->n_shards);
          g_autofree char *path = g_build_filename (dir, file, NULL);
          ok = write_shard (path, specs, sh, m, error);
        }
      for (guint i = 0; i < specs->len; i++)
        {
          Spec *s = &g_array_index (specs, Spec, i);
          g_string_append_printf (index, "%s\"%s\": \"model-%05u-of-%05u.safetensors\"", i ? ", " : "",
                                  s->name, s->shard + 1, m->n_shards);
        }
      g_string_append (index, "}}\n");
      ok = ok && g_file_set_contents (index_path, index->str, -1, error);
    }
  for (guint i = 0; i < specs->len; i++)
    g_free (g_array_index (specs, Spec, i).name);
  return ok;
}

UmEngine *
um_test_load_engine (const char *path, gboolean exact)
{
  g_autoptr(GError) error = NULL;
  UmEngineOptions opts;
  UmEngine *engine;

  um_engine_options_init (&opts);
  opts.device = UM_DEVICE_CPU;
  opts.products = exact ? UM_PRODUCTS_EXACT : UM_PRODUCTS_INT8;
  engine = um_engine_load (path, &opts, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_nonnull (engine);
  return engine;
}

/* How far float32 compute may land from the float64 truth.  Not a number
 * tuned on one CPU: every test measures, on its own model and input, how far
 * an independent, naive float32 forward (um_ref32_forward: left-to-right sums,
 * no FMA, no BLAS) lands from the float64 one, and allows F32_MULTIPLE times
 * that.  Any correct float32 implementation rounds each product and sum once;
 * blocked and FMA-based sums (OpenBLAS, our kernels) grow their error no
 * faster than sequential ones, so their distance from float64 is of the same
 * order; a factor of 5 covers the spread between summation orders (on the
 * fixtures: Haswell sgemm 1.0e-4, AVX-512 sgemm 4.0e-5; the widest seen is
 * tiny-dream's Q8_0 GGUF on the AVX-512 path, 9.5e-5 against a naive 2.5e-5,
 * 3.7×) while a real defect (a wrong index, a missed scale, bf16 rounding of
 * activations) is orders of magnitude larger.
 *
 * The naive forward reads the model through the same loader as the code
 * under test, so a loader bug would move both and loosen its own bound.
 * Hence a fixed ceiling from the arithmetic alone: these test models' widest
 * sum has at most 2^9 terms (the vocabulary, or d_model·n_layers), each
 * rounded sum loses at most γ_n ≈ n·u = 2^9·2^-24 relative in the worst
 * case, and a pass compounds at most 2^5 such steps (norms, attention, the
 * FFN, per layer, over the few layers these models have): 2^14 u = 2^-10.
 * The naive forward must land within it (a loader bug shows there), and no
 * tolerance is larger. */
#define F32_MULTIPLE 5.0
#define F32_CEILING  (1.0 / 1024.0)

double
um_test_rel_error (const float *got, const double *want, size_t n)
{
  double worst = 0.0;
  for (size_t i = 0; i < n; i++)
    worst = MAX (worst, fabs (got[i] - want[i]) / (1.0 + fabs (want[i])));
  return worst;
}

double
um_test_norm_error (const float *a, const float *b, size_t n)
{
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++)
    {
      num += ((double) a[i] - b[i]) * ((double) a[i] - b[i]);
      den += (double) b[i] * b[i];
    }
  return sqrt (num / MAX (den, 1e-300));
}

float *
um_test_backend_download (UmBackend *be, UmBuf *b, size_t n)
{
  g_autoptr(GError) error = NULL;
  float *host = g_new (float, n);
  g_assert_true (be->ops->buf_download (be, b, 0, host, n * sizeof (float), &error));
  g_assert_no_error (error);
  return host;
}

/* The tolerance for logits of @model on @ids whose float64 values are @want. */
double
um_test_f32_tolerance (const UmModel *model, const gint32 *ids, int L, const double *want,
                       const char *what)
{
  return um_test_f32_tolerance_blocks (model, ids, L, 0, want, what);
}

double
um_test_f32_tolerance_blocks (const UmModel *model, const gint32 *ids, int L, int block, const double *want,
                              const char *what)
{
  g_autoptr(GError) error = NULL;
  g_autofree float *naive = g_new (float, (size_t) L * model->cfg.vocab_size);
  double err;

  g_assert_true (um_ref32_forward_blocks (model, ids, L, block, naive, &error));
  g_assert_no_error (error);
  err = um_test_rel_error (naive, want, (size_t) L * model->cfg.vocab_size);
  g_test_message ("%s: naive float32 forward lands %.3g from float64; tolerance %.3g (ceiling %.3g)",
                  what, err, MIN (F32_MULTIPLE * err, F32_CEILING), F32_CEILING);
  /* A naive float32 forward that matched float64 exactly would mean the
   * test model exercises no rounding at all. */
  g_assert_cmpfloat (err, >, 0.0);
  /* One that lands further than float32 rounding can take it: the weights
   * it read are not the fixture's (the loader), or the fixture is wrong. */
  if (F32_MULTIPLE * err > F32_CEILING)
    g_error ("%s: the naive float32 forward lands %.3g from float64, more than float32 rounding allows "
             "(%.3g): the model as loaded is not the one the fixture was made from", what, err,
             F32_CEILING / F32_MULTIPLE);
  return MIN (F32_MULTIPLE * err, F32_CEILING);
}


/* 8-bit activations (um-qgemm.c) move the logits by what rounding the
 * activations costs on the model, which the reference measures on its own
 * (um_ref_forward_int8_blocks: the documented rounding rule in float64): the
 * integer products' logits may land INT8_MULTIPLE times that far from the
 * exact ones, plus float32's own tolerance.  It is the same rule on nearly
 * the same values (they differ by float32 noise, so a rare value on a
 * rounding tie goes the other way: a quantum of one activation), and on
 * every fixture file and type the two distances agree to three digits
 * (0.227 to 1.46 in these units, AVX2 and AVX-VNNI); a rule that rounds
 * toward zero instead of to nearest lands 2.7 times as far (Q8_0: 2.19
 * against 0.806) and fails here, though it stays inside the weights' own
 * quantization cost (2.98), the other bound test-gguf-model checks. */
#define INT8_MULTIPLE 1.5

double
um_test_int8_tolerance_blocks (const UmModel *model, const gint32 *ids, int L, int block, const double *want,
                               const char *what)
{
  g_autoptr(GError) error = NULL;
  const size_t n = (size_t) L * model->cfg.vocab_size;
  g_autofree double *rounded = g_new (double, n);
  double cost = 0.0, f32;

  g_assert_true (um_ref_forward_int8_blocks (model, ids, L, block, rounded, &error));
  g_assert_no_error (error);
  for (size_t i = 0; i < n; i++)
    cost = MAX (cost, fabs (rounded[i] - want[i]) / (1.0 + fabs (want[i])));
  f32 = um_test_f32_tolerance_blocks (model, ids, L, block, want, what);
  g_test_message ("%s: 8-bit activations cost %.3g in the float64 reference; tolerance %.3g",
                  what, cost, INT8_MULTIPLE * cost + f32);
  return INT8_MULTIPLE * cost + f32;
}

static void
hostile_free (gpointer p)
{
  UmTestHostileJson *h = p;
  g_free (h->text);
  g_free (h);
}

static void
hostile_add (GPtrArray *a, const char *name, char *text, gssize len, const char *needle)
{
  UmTestHostileJson *h = g_new0 (UmTestHostileJson, 1);
  h->name = name;
  h->text = text;
  h->len = len < 0 ? strlen (text) : (gsize) len;
  h->needle = needle;
  g_ptr_array_add (a, h);
}

static char *
hostile_repeat (const char *head, const char *unit, guint n, const char *tail)
{
  GString *s = g_string_new (head);
  for (guint i = 0; i < n; i++)
    g_string_append (s, unit);
  g_string_append (s, tail);
  return g_string_free (s, FALSE);
}

GPtrArray *
um_test_hostile_json (void)
{
  GPtrArray *a = g_ptr_array_new_with_free_func (hostile_free);

  /* json-glib recurses once per level: these crashed every reader. */
  hostile_add (a, "200,000 nested [", hostile_repeat ("", "[", 200000, ""), -1, "nested more than");
  hostile_add (a, "200,000 nested {\"a\":", hostile_repeat ("", "{\"a\":", 200000, ""), -1, "nested more than");
  hostile_add (a, "200,000 [ after a comment with a quote",
               hostile_repeat ("{\"a\": /* \" */ ", "[", 200000, " /* \" */}"), -1, "expected a value");
  hostile_add (a, "200,000 [ after a single-quoted quote",
               hostile_repeat ("{\"a\": ['\"', ", "[", 200000, "]}"), -1, "expected a value");
  hostile_add (a, "1e999", g_strdup ("{\"a\": 1e999}"), -1, "too large for a double");
  hostile_add (a, "99999999999999999999", g_strdup ("{\"a\": 99999999999999999999}"), -1, "does not fit in 64 bits");
  hostile_add (a, "-99999999999999999999", g_strdup ("{\"a\": -99999999999999999999}"), -1, "does not fit in 64 bits");
  hostile_add (a, "invalid UTF-8", g_strdup ("{\"a\": \"\xff\xfe\"}"), -1, "invalid UTF-8");
  hostile_add (a, "a NUL byte", g_memdup2 ("{\"a\": \"b\0c\"}", 13), 13, "NUL byte");
  hostile_add (a, "\\u0000", g_strdup ("{\"a\": \"b\\u0000c\"}"), -1, "\\u0000");
  hostile_add (a, "a duplicate key", g_strdup ("{\"a\": 1, \"a\": 2}"), -1, "appears twice");
  hostile_add (a, "a truncated object", g_strdup ("{\"a\": [1, "), -1, "ends before");
  hostile_add (a, "an empty file", g_strdup (""), 0, "empty");
  hostile_add (a, "whitespace only", g_strdup (" \n\t"), -1, "empty");
  hostile_add (a, "a list, not an object", g_strdup ("[1, 2]"), -1, "object");
  hostile_add (a, "a string, not an object", g_strdup ("\"text\""), -1, "object");
  return a;
}

/* ---- every kind of pass, for comparing two engines ---- */

void
um_test_outputs_init (UmTestOutputs *o)
{
  o->names = g_ptr_array_new_with_free_func (g_free);
  o->blocks = g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref);
}

void
um_test_outputs_clear (UmTestOutputs *o)
{
  g_clear_pointer (&o->names, g_ptr_array_unref);
  g_clear_pointer (&o->blocks, g_ptr_array_unref);
}

static void
outputs_add (UmTestOutputs *o, const char *name, const void *data, size_t bytes)
{
  g_ptr_array_add (o->names, g_strdup (name));
  g_ptr_array_add (o->blocks, g_bytes_new (data, bytes));
}

/* The canvas of the guided passes: prompt, block 0 partly committed,
 * block 1 masked; sequence 1 the unconditional copy (prompt masked). */
#define GP 8            /* prompt */
#define GB 8            /* block length */
#define GL (GP + 2 * GB)

static void
guided_canvas (const UmModelConfig *c, int filled, gint32 x[2 * GL])
{
  for (int i = 0; i < GL; i++)
    x[i] = i < GP + filled ? (gint32) ((i * 7919 + 3) % 500) : c->mask_id;
  memcpy (x + GL, x, GL * sizeof (gint32));
  for (int i = 0; i < GP; i++)
    x[GL + i] = c->mask_id;
}

/* The masked rows of block [bs, bs + GB) in both sequences, conditional
 * first; returns how many per sequence. */
static int
block_rows (const UmModelConfig *c, const gint32 *x, int bs, gint32 *rows)
{
  int n = 0;
  for (int i = bs; i < bs + GB; i++)
    if (x[i] == c->mask_id)
      rows[n++] = i;
  for (int i = 0; i < n; i++)
    rows[n + i] = rows[i] + GL;
  return n;
}

static void
record_positions (const UmStepEvent *ev, gpointer data)
{
  g_array_append_vals (data, ev->positions, ev->n_committed);
}

void
um_test_engine_passes (UmEngine *engine, gboolean brief, UmTestOutputs *o)
{
  const UmModelConfig *c = &um_engine_get_model (engine)->cfg;
  UmForward *fw = um_engine_get_forward (engine);
  const size_t V = c->vocab_size;
  g_autofree float *logits = g_new (float, 2 * GL * V);
  g_autoptr(GError) error = NULL;
  gint32 x[2 * GL], rows[2 * GL], ids[GL];
  double conf[GL];
  UmChooseRule rule = { 0 };
  int n;

  /* Plain: one sequence, the last rows. */
  for (int i = 0; i < GL; i++)
    x[i] = i < GL - 8 ? (gint32) ((i * 7919 + 3) % 500) : c->mask_id;
  for (int i = 0; i < 8; i++)
    rows[i] = GL - 8 + i;
  g_assert_true (um_forward_logits (fw, x, 1, GL, rows, 8, logits, NULL, &error));
  g_assert_no_error (error);
  outputs_add (o, "plain logits", logits, 8 * V * sizeof (float));

  if (!brief)
    {
      /* Guidance: both sequences in one pass. */
      guided_canvas (c, 3, x);
      n = block_rows (c, x, GP, rows);
      g_assert_true (um_forward_logits (fw, x, 2, GL, rows, 2 * n, logits, NULL, &error));
      g_assert_no_error (error);
      outputs_add (o, "guided logits", logits, 2 * n * V * sizeof (float));

      /* Cached: a refresh, then steps on the kept keys and values. */
      for (int step = 0; step < 3; step++)
        {
          static const char *const what[] = { "cached refresh logits", "cached prefix logits", "cached dual logits" };
          guided_canvas (c, 2 * step, x);
          n = block_rows (c, x, GP, rows);
          g_assert_true (um_forward_logits_cached (fw, x, 2, GL, GP, GP + GB, step == 0, step == 2, rows, 2 * n,
                                                   logits, NULL, &error));
          g_assert_no_error (error);
          outputs_add (o, what[step], logits, 2 * n * V * sizeof (float));
        }
    }

  /* The choice where the logits are: guided Gumbel-max, then argmax. */
  rule.seed = 17;
  rule.step = 2;
  rule.temperature = 0.7;
  rule.cfg_scale = 1.5;
  rule.eos_id = c->eos_id;
  rule.eot_id = c->eot_id;
  guided_canvas (c, 1, x);
  n = block_rows (c, x, GP, rows);
  g_assert_true (um_forward_choose (fw, x, 2, GL, rows, 2 * n, &rule, rows, ids, conf, NULL, &error));
  g_assert_no_error (error);
  outputs_add (o, "guided choose ids", ids, n * sizeof (gint32));
  outputs_add (o, "guided choose confidences", conf, n * sizeof (double));
  if (!brief)
    {
      rule.temperature = 0.0;
      rule.cfg_scale = 0.0;
      g_assert_true (um_forward_choose (fw, x, 1, GL, rows, n, &rule, rows, ids, conf, NULL, &error));
      g_assert_no_error (error);
      outputs_add (o, "choose ids", ids, n * sizeof (gint32));
      outputs_add (o, "choose confidences", conf, n * sizeof (double));
      rule.temperature = 0.7;
      rule.cfg_scale = 1.5;
    }
  for (int step = 0; step < 3; step++)
    {
      static const char *const what[] = { "cached refresh choose", "cached prefix choose", "cached dual choose" };
      g_autofree char *ids_name = g_strconcat (what[step], " ids", NULL);
      g_autofree char *conf_name = g_strconcat (what[step], " confidences", NULL);
      guided_canvas (c, 2 * step + 1, x);
      n = block_rows (c, x, GP, rows);
      rule.step = 3 + step;
      g_assert_true (um_forward_choose_cached (fw, x, 2, GL, GP, GP + GB, step == 0, step == 2, rows, 2 * n, &rule,
                                               rows, ids, conf, NULL, &error));
      g_assert_no_error (error);
      outputs_add (o, ids_name, ids, n * sizeof (gint32));
      outputs_add (o, conf_name, conf, n * sizeof (double));
    }

  /* Whole generations; brief: the first, in fewer steps. */
  {
    static const struct {
      double temperature, cfg_scale, threshold, factor;
      UmRemasking remasking;
      UmCacheMode cache;
    } cases[] = {
      { 0.5, 1.5, 0.0, 0.0, UM_REMASK_LOW_CONFIDENCE, UM_CACHE_DUAL },
      { 0.0, 0.5, 0.9, 0.0, UM_REMASK_LOW_CONFIDENCE, UM_CACHE_PREFIX },
      { 0.7, 1.0, 0.0, 0.0, UM_REMASK_RANDOM, UM_CACHE_NONE },
    };
    const gint32 prompt[GP] = { 11, 12, 13, 14, 15, 16, 17, 18 };

    for (guint k = 0; k < (brief ? 1 : G_N_ELEMENTS (cases)); k++)
      {
        g_autoptr(UmGenResult) r = NULL;
        g_autoptr(GArray) trace = g_array_new (FALSE, FALSE, sizeof (gint32));
        g_autofree char *ids_name = g_strdup_printf ("generation %u ids", k);
        g_autofree char *trace_name = g_strdup_printf ("generation %u trace", k);
        UmGenRequest req;

        um_gen_request_init (&req);
        req.prompt_ids = prompt;
        req.n_prompt_ids = GP;
        req.params.gen_length = 2 * GB;
        req.params.steps = brief ? 4 : GB;
        req.params.block_length = GB;
        req.params.temperature = cases[k].temperature;
        req.params.cfg_scale = cases[k].cfg_scale;
        req.params.threshold = cases[k].threshold;
        req.params.factor = cases[k].factor;
        req.params.remasking = cases[k].remasking;
        req.params.cache = cases[k].cache;
        req.params.seed = 5 + k;
        r = um_engine_generate (engine, &req, record_positions, trace, NULL, &error);
        g_assert_no_error (error);
        outputs_add (o, ids_name, r->ids->data, r->ids->len * sizeof (gint32));
        outputs_add (o, trace_name, trace->data, trace->len * sizeof (gint32));
      }
  }
}

int
um_test_outputs_differ (const UmTestOutputs *a, const UmTestOutputs *b)
{
  g_assert_cmpuint (a->blocks->len, ==, b->blocks->len);
  for (guint i = 0; i < a->blocks->len; i++)
    if (!g_bytes_equal (g_ptr_array_index (a->blocks, i), g_ptr_array_index (b->blocks, i)))
      return (int) i;
  return -1;
}

const char *
um_test_outputs_name (const UmTestOutputs *o, int i)
{
  return g_ptr_array_index (o->names, i);
}

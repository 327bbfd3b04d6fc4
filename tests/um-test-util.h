/* um-test-util.h — helpers shared by the engine tests and tools: fixture
 * paths, JSON, and writing small (or LLaDA-8B-shaped) safetensors models. */
#pragma once

#include <glib.h>
#include <json-glib/json-glib.h>

#include "um-backend.h"
#include "um-dtype.h"
#include "um-engine.h"
#include "um-model.h"
#include "um-model-config.h"

G_BEGIN_DECLS

/* Path of a file in the test data folder ($UM_TEST_DATA). */
char       *um_test_data_path (const char *name);
/* Parses a JSON file of the test data folder; aborts the test on failure. */
JsonParser *um_test_load_json (const char *name);
GArray     *um_test_json_ids (JsonArray *array);

/* A fresh temporary folder, removed with um_test_rmtree. */
char       *um_test_mkdtemp (void);
/* An engine on the CPU with exact f32 activations (what parity with the
 * float64 fixtures is defined for), or with 8-bit integer products for every
 * quantized type where the CPU has them when exact is FALSE. */
UmEngine  *um_test_load_engine (const char *path, gboolean exact);

/* max_i |got_i - want_i| / (1 + |want_i|): logits' error on their own scale. */
double      um_test_rel_error (const float *got, const double *want, size_t n);
/* sqrt (Σ (a − b)² / Σ b²): a whole tensor's error relative to b's size. */
double      um_test_norm_error (const float *a, const float *b, size_t n);
/* @n floats of @b read back from backend @be (newly allocated). */
float      *um_test_backend_download (UmBackend *be, UmBuf *b, size_t n);
/* The tolerance float32 compute gets for the logits of model on ids whose
 * float64 values are want (see um-test-util.c for the derivation). */
double      um_test_f32_tolerance (const UmModel *model, const gint32 *ids, int L,
                                   const double *want, const char *what);
/* The same for a block-causal forward of blocks of @block (0: none). */
/* The tolerance for logits computed with 8-bit activations (the integer
 * products) against @want, the exact float64 logits. */
double      um_test_int8_tolerance_blocks (const UmModel *model, const gint32 *ids, int L, int block,
                                           const double *want, const char *what);
double      um_test_f32_tolerance_blocks (const UmModel *model, const gint32 *ids, int L, int block,
                                          const double *want, const char *what);
void        um_test_rmtree (const char *path);
/* Copies a whole folder (not recursive). */
void        um_test_copy_dir (const char *from, const char *to);
void        um_test_write_file (const char *path, const char *contents, gssize len);
/* The file's contents (fails the test if unreadable). */
char       *um_test_read_file (const char *path);
/* Entries of @dir whose names start with @prefix (0 if @dir is missing). */
guint       um_test_count_prefix (const char *dir, const char *prefix);

/* Seeds for a property that must hold for any input. Iterate with
 *
 *   guint32 seed;
 *   for (guint it = 0; um_test_seed_next (&it, &seed);)
 *     { ... random data from seed ... }
 *
 * to get UM_TEST_N_FIXED_SEEDS fixed seeds, then one that differs from run
 * to run (so a value-dependent failure the fixed ones miss shows up in time).
 * The varying seed goes to g_test_message; while any seed runs, an abort or
 * a trap (a failed g_assert, a g_error) prints it with how to replay it:
 * UM_TEST_SEED=<n> runs only seed n. Leave the loop only by its end, or the
 * note stays armed for later failures. */
#define UM_TEST_N_FIXED_SEEDS 20
gboolean    um_test_seed_next (guint *it, guint32 *seed);

typedef struct {
  UmArch   arch;           /* LLaDA (OLMo names) or a family in its own HF layout */
  guint    n_layers;
  guint    d_model;
  guint    n_heads;
  guint    n_kv_heads;
  guint    mlp_hidden;
  guint    vocab_size;
  double   rope_theta;
  double   rms_eps;
  gint32   mask_id;
  gint32   eos_id;
  gint32   bos_id;
  UmDType  dtype;          /* F32, F16 or BF16 */
  guint    n_shards;       /* 1: model.safetensors; more: index + shards */
  guint32  seed;
  const char *tokenizer;   /* tokenizer.json to copy in; NULL: the tiny fixture's */
  /* Families (arch other than LLaDA): the fixture tiny-<family>'s
   * config.json, tokenizer and generation_config.json with these shapes. */
  guint    head_dim;       /* 0: d_model / n_heads (what Dream's and LLaDA-MoE's configs imply) */
  guint    n_experts;      /* 0: dense FFN of mlp_hidden */
  guint    n_experts_used;
  guint    expert_ffn;
  /* LLaDA 2.x: leading dense layers (of mlp_hidden), expert groups, the
   * shared expert's width (a multiple of expert_ffn) and the rotated share
   * of each head (partial_rotary_factor). */
  guint    n_dense_leading;
  guint    n_expert_groups;
  guint    n_groups_used;
  guint    shared_ffn;
  double   rotary_factor;
} UmTestModelSpec;

/* The tiny fixture's shape (vocab 512, special ids 506–511). */
void     um_test_model_spec_init (UmTestModelSpec *spec);
/* LLaDA-8B's shape with @n_layers layers. */
void     um_test_model_spec_init_llada8b (UmTestModelSpec *spec, guint n_layers);
/* The shape of the fixture tiny-<family> (tests/data/tiny-dream, ...): its
 * special ids, RoPE θ and ε; Dream with q/k/v biases, LLaDA-MoE and RND1
 * with QK-norms and experts. */
void     um_test_model_spec_init_family (UmTestModelSpec *spec, UmArch arch);
/* The fixture folder a family's files come from ("tiny-dream", ...). */
const char *um_test_family_fixture (UmArch arch);
/* Writes config.json, generation_config.json, tokenizer files and random
 * weights (streamed to disk, never all in memory), in the layout of the
 * family's checkpoints (LLaDA: OLMo names; Dream, LLaDA-MoE, RND1: Qwen-style
 * model.layers.N.…, experts one tensor each). */
gboolean um_test_write_model (const char *dir, const UmTestModelSpec *spec, GError **error);

/* Hostile JSON every reader is tested with: each text must be refused
 * with a clean error (that contains @needle), never crash or hang. */
typedef struct {
  const char *name;
  char       *text;
  gsize       len;
  const char *needle;
} UmTestHostileJson;

/* The cases, as UmTestHostileJson*; free with g_ptr_array_unref. */
GPtrArray *um_test_hostile_json (void);

/* What an engine computed, as named byte blocks, to compare two engines
 * that must agree bit for bit. */
typedef struct {
  GPtrArray *names;   /* char * */
  GPtrArray *blocks;  /* GBytes */
} UmTestOutputs;

void        um_test_outputs_init (UmTestOutputs *o);
void        um_test_outputs_clear (UmTestOutputs *o);
/* Every kind of pass the sampler runs, on @engine (a model with at least
 * 500 tokens): the plain forward, guidance (two sequences), the cached
 * passes (a refresh, then prefix and dual steps on a canvas that moved on),
 * the choose passes (the token choice where the logits are, guided and not,
 * cached and not), and whole generations with guidance, both caches,
 * Gumbel noise, random remasking and the threshold rule: logits, ids,
 * confidences and step traces appended to @o. @brief: the plain forward,
 * the guided choose passes and one short generation (for slow backends). */
void        um_test_engine_passes (UmEngine *engine, gboolean brief, UmTestOutputs *o);
/* The first block where @a and @b differ, or -1. */
int         um_test_outputs_differ (const UmTestOutputs *a, const UmTestOutputs *b);
const char *um_test_outputs_name (const UmTestOutputs *o, int i);

G_END_DECLS

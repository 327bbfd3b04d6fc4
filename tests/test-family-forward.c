/* The one forward pass on the new families (Dream: q/k/v biases, GQA,
 * NEOX RoPE; LLaDA-MoE: QK-norm, softmax top-k experts; RND1: query width
 * ≠ model width, renormalised top-k) against the independent float64
 * fixtures, in every form they come in (HF safetensors, GGUF F32 and
 * Q8_0), on the CPU backend; and the same logits whatever way the weights
 * are held (layer streaming, row chunks) and whichever rows are asked.
 *
 * UM_TEST_BACKEND=cuda runs it all on the CUDA backend: on a GPU (suite
 * gpu; skipped without one) and on the host emulation of tests/cuda-emu
 * (built a second time there, UM_TEST_REQUIRE_CUDA: never skipped), with
 * its fp32 attention and products (UNMASK_CUDA_EXACT_*), where the same
 * float32 tolerance holds. Its default fast path (f16 activations, TF32
 * attention: unit roundoff 2^-11 instead of 2^-24) is checked against the
 * same error scale times 2^13, capped at FAST_CEILING (a loose bound: it
 * catches a wrong index or a lost bias, not a rounding detail, which the
 * exact path covers). Every form is checked against its own tolerance. */
#include <math.h>
#include <string.h>

#include "um-backend.h"
#include "um-backend-cuda.h"
#include "um-error.h"
#include "um-forward.h"
#include "um-layer-store.h"
#include "um-model.h"
#include "um-quant.h"
#include "um-sampler.h"
#include "um-ref-kernels.h"
#include "um-test-util.h"

typedef struct {
  const char *family;      /* expected file stem */
  const char *model;       /* path in tests/data */
  const char *key;         /* entry of the expected file */
} Case;

static const Case cases[] = {
  { "tiny-dream", "tiny-dream", "logits" },
  { "tiny-dream", "tiny-dream-f32.gguf", "gguf_f32" },
  { "tiny-dream", "tiny-dream-q8_0.gguf", "gguf_q8_0" },
  { "tiny-llada-moe", "tiny-llada-moe", "logits" },
  { "tiny-llada-moe", "tiny-llada-moe-f32.gguf", "gguf_f32" },
  { "tiny-llada-moe", "tiny-llada-moe-q8_0.gguf", "gguf_q8_0" },
  { "tiny-rnd1", "tiny-rnd1", "logits" },
  { "tiny-rnd1", "tiny-rnd1-f32.gguf", "gguf_f32" },
  { "tiny-rnd1", "tiny-rnd1-q8_0.gguf", "gguf_q8_0" },
  /* LLaDA 2.x: block-causal attention (blocks of the entry's
   * block_length), and without a mask. */
  { "tiny-llada2", "tiny-llada2", "logits" },
  { "tiny-llada2", "tiny-llada2", "logits_full_attention" },
  { "tiny-llada2", "tiny-llada2-f32.gguf", "gguf_f32" },
  { "tiny-llada2", "tiny-llada2-q8_0.gguf", "gguf_q8_0" },
};

static gboolean use_cuda;

static UmBackend *
new_backend (GError **error)
{
  return use_cuda ? um_backend_cuda_new (0, 0, error) : um_backend_cpu_new (0, 0, error);
}

static UmModel *
load_model (const char *name)
{
  g_autofree char *path = um_test_data_path (name);
  g_autoptr(GError) error = NULL;
  UmModel *model = um_model_load (path, NULL, &error);
  g_assert_no_error (error);
  g_assert_nonnull (model);
  return model;
}

/* The block length of @c's entry (0: bidirectional). */
static int
entry_block (const Case *c)
{
  g_autofree char *json = g_strconcat (c->family, ".expected.json", NULL);
  g_autoptr(JsonParser) parser = um_test_load_json (json);
  JsonObject *entry = json_object_get_object_member (json_node_get_object (json_parser_get_root (parser)), c->key);

  return (int) json_object_get_int_member_with_default (entry, "block_length", 0);
}

/* The expected logits [ids->len, V] of @c. */
static double *
expected (const Case *c, GArray **ids_out, guint V)
{
  g_autofree char *json = g_strconcat (c->family, ".expected.json", NULL);
  g_autoptr(JsonParser) parser = um_test_load_json (json);
  JsonObject *entry = json_object_get_object_member (json_node_get_object (json_parser_get_root (parser)), c->key);
  GArray *ids = um_test_json_ids (json_object_get_array_member (entry, "ids"));
  JsonArray *values = json_object_get_array_member (entry, "values");
  double *want = g_new (double, (size_t) ids->len * V);

  g_assert_cmpuint (json_array_get_length (values), ==, ids->len);
  for (guint r = 0; r < ids->len; r++)
    {
      JsonArray *row = json_array_get_array_element (values, r);
      g_assert_cmpuint (json_array_get_length (row), ==, V);
      for (guint v = 0; v < V; v++)
        want[(size_t) r * V + v] = json_array_get_double_element (row, v);
    }
  *ids_out = ids;
  return want;
}

static float *
run_blocks (UmModel *model, const UmForwardOptions *o, const GArray *ids, const gint32 *rows, int n_rows, int block)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(UmBackend) be = new_backend (&error);
  UmLayerStore *store = NULL;
  UmForwardOptions opts = *o;
  const guint V = model->cfg.vocab_size;
  float *logits = g_new (float, (size_t) (rows ? n_rows : (int) ids->len) * V);

  if (opts.stream_slots > 0)
    {
      store = um_layer_store_new (be, model, UM_STORE_ZSTD, 1, NULL, NULL, NULL, &error);
      g_assert_no_error (error);
      opts.store = store;
    }
  {
    g_autoptr(UmForward) fw = um_forward_new_with (model, be, &opts, NULL, NULL, NULL, &error);
    g_assert_no_error (error);
    um_forward_set_attention_block (fw, block);
    g_assert_true (um_forward_logits (fw, (const gint32 *) ids->data, 1, ids->len, rows, n_rows, logits, NULL,
                                      &error));
    g_assert_no_error (error);
  }
  if (store != NULL)
    um_layer_store_free (store);
  return logits;
}

static int current_block;

static float *
run (UmModel *model, const UmForwardOptions *o, const GArray *ids, const gint32 *rows, int n_rows)
{
  return run_blocks (model, o, ids, rows, n_rows, current_block);
}

/* The naive float32 forward's distance from float64, times a margin, on
 * this form alone (um-test-util.c): each form's loader is checked on its
 * own, and a bug in one cannot loosen the bound of the others. */
static double
form_tolerance (const Case *c, UmModel *model, const GArray *ids, const double *want)
{
  return um_test_f32_tolerance_blocks (model, (const gint32 *) ids->data, ids->len, entry_block (c), want, c->model);
}

/* The default GPU path: f16 activations for quantized weights and TF32
 * attention, unit roundoff 2^-11 instead of 2^-24: the float32 scale times
 * 2^13, never more than FAST_CEILING = 2^-2. Measured on the emulation:
 * 0.03 on tiny-dream's F32 forms, 0.12 on its Q8_0 GGUF (f16-rounded
 * tiles), below 0.03 elsewhere; a lost bias moves tiny-dream's logits by
 * 7.3 and an attention index off by one by 13 (mutations of the fast
 * path only, see docs/hardening.md). */
#define FAST_CEILING 0.25

static void
test_case (gconstpointer data)
{
  const Case *c = data;
  g_autoptr(UmModel) model = load_model (c->model);
  const guint V = model->cfg.vocab_size;
  g_autoptr(GArray) ids = NULL;
  g_autofree double *want = expected (c, &ids, V);
  UmForwardOptions o;
  double tol, err;

  um_forward_options_init (&o);
  current_block = entry_block (c);
  tol = form_tolerance (c, model, ids, want);
  {
    g_autofree float *logits = run (model, &o, ids, NULL, 0);
    err = um_test_rel_error (logits, want, (size_t) ids->len * V);
    g_test_message ("%s %s: max relative error %.3g, tolerance %.3g (%s)", c->model, c->key, err, tol,
                    use_cuda ? "cuda" : um_quant_simd_level ());
    g_assert_cmpfloat (err, <, tol);
  }
  /* Requested rows only: the last layer runs on them alone (queries,
   * biases, QK-norm and the experts' routing on a subset). */
  {
    const gint32 rows[] = { 0, 5, 6, 14, 15 };
    g_autofree float *sel = run (model, &o, ids, rows, G_N_ELEMENTS (rows));
    for (guint i = 0; i < G_N_ELEMENTS (rows); i++)
      g_assert_cmpfloat (um_test_rel_error (sel + (size_t) i * V, want + (size_t) rows[i] * V, V), <, tol);
  }
  /* Layers streamed through two slots, and the FFN and head in chunks of
   * 3 rows (an expert's group then spans chunks): the same products on
   * the same rows, so the same tolerance holds. */
  {
    g_autofree float *streamed = NULL, *chunked = NULL;
    o.stream_slots = 2;
    streamed = run (model, &o, ids, NULL, 0);
    g_assert_cmpfloat (um_test_rel_error (streamed, want, (size_t) ids->len * V), <, tol);
    o.stream_slots = 0;
    o.row_chunk = 3;
    chunked = run (model, &o, ids, NULL, 0);
    g_assert_cmpfloat (um_test_rel_error (chunked, want, (size_t) ids->len * V), <, tol);
  }
  if (use_cuda)
    {
      /* The default GPU path: f16 activations and TF32 attention. */
      g_autofree float *fast = NULL;
      um_forward_options_init (&o);
      g_unsetenv ("UNMASK_CUDA_EXACT_ATTENTION");
      g_unsetenv ("UNMASK_CUDA_EXACT_PRODUCTS");
      fast = run (model, &o, ids, NULL, 0);
      g_setenv ("UNMASK_CUDA_EXACT_ATTENTION", "1", TRUE);
      g_setenv ("UNMASK_CUDA_EXACT_PRODUCTS", "1", TRUE);
      err = um_test_rel_error (fast, want, (size_t) ids->len * V);
      g_test_message ("%s %s: f16/TF32 path: max relative error %.3g, bound %.3g", c->model, c->key, err,
                      MIN (tol * 8192.0, FAST_CEILING));
      g_assert_cmpfloat (err, <, MIN (tol * 8192.0, FAST_CEILING));
    }
}

/* What each family's description says, read from its files. */
static void
test_descriptions (void)
{
  g_autoptr(UmModel) dream = load_model ("tiny-dream");
  g_autoptr(UmModel) moe = load_model ("tiny-llada-moe-q8_0.gguf");
  g_autoptr(UmModel) rnd1 = load_model ("tiny-rnd1-f32.gguf");

  g_assert_cmpint (dream->cfg.arch, ==, UM_ARCH_DREAM);
  g_assert_true (dream->cfg.qkv_bias && dream->cfg.shift_logits && !dream->cfg.qk_norm);
  g_assert_cmpuint (dream->cfg.n_experts, ==, 0);
  g_assert_false (dream->cfg.rope_interleaved);
  g_assert_cmpint (moe->cfg.arch, ==, UM_ARCH_LLADA_MOE);
  g_assert_true (moe->cfg.qk_norm && !moe->cfg.shift_logits && !moe->cfg.router_norm);
  g_assert_cmpuint (moe->cfg.n_experts, ==, 8);
  g_assert_cmpuint (moe->cfg.n_experts_used, ==, 3);
  g_assert_cmpuint (moe->layers[1].n_experts, ==, 8);
  g_assert_cmpint (rnd1->cfg.arch, ==, UM_ARCH_RND1);
  g_assert_true (rnd1->cfg.qk_norm && rnd1->cfg.shift_logits && rnd1->cfg.router_norm);
  g_assert_cmpuint (rnd1->cfg.n_heads * rnd1->cfg.head_dim, ==, 128);
  g_assert_cmpuint (rnd1->cfg.d_model, ==, 64);
}

/* LLaDA 2's generation on this backend (the CPU, or the CUDA emulation in
 * its build): every fixture case from the HF folder and the F32 GGUF, with
 * the cache of finished blocks and without, gives the expected ids and
 * per-step commits (test-family-generate covers the CLI and the engine). */
typedef struct {
  GPtrArray *trace;
} Trace;

static void
trace_step (const UmStepEvent *ev, gpointer user_data)
{
  Trace *t = user_data;
  GArray *a = g_array_new (FALSE, FALSE, sizeof (gint32));

  g_array_append_vals (a, ev->positions, ev->n_committed);
  g_ptr_array_add (t->trace, a);
}

static void
test_llada2_generate (void)
{
  const char *const forms[] = { "tiny-llada2", "tiny-llada2-f32.gguf" };
  g_autoptr(JsonParser) parser = um_test_load_json ("tiny-llada2.expected.json");
  JsonArray *cases_ = json_object_get_array_member (json_node_get_object (json_parser_get_root (parser)),
                                                    "generate");

  for (guint f = 0; f < G_N_ELEMENTS (forms); f++)
    {
      g_autoptr(UmModel) model = load_model (forms[f]);
      g_autoptr(GError) error = NULL;
      g_autoptr(UmBackend) be = new_backend (&error);
      g_autoptr(UmForward) fw = NULL;

      g_assert_no_error (error);
      fw = um_forward_new (model, be, &error);
      g_assert_no_error (error);
      for (guint i = 0; i < 2 * json_array_get_length (cases_); i++)
        {
          JsonObject *c = json_array_get_object_element (cases_, i / 2);
          g_autoptr(GArray) prompt = um_test_json_ids (json_object_get_array_member (c, "prompt_ids"));
          g_autoptr(GArray) want = um_test_json_ids (json_object_get_array_member (c, "ids"));
          g_autoptr(GArray) got = g_array_new (FALSE, FALSE, sizeof (gint32));
          g_autoptr(GPtrArray) trace = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
          JsonArray *want_trace = json_object_get_array_member (c, "trace");
          Trace t = { trace };
          UmGenParams p;
          int n_steps = 0;

          um_gen_params_init_for_arch (&p, UM_ARCH_LLADA2);
          p.gen_length = json_object_get_int_member (c, "gen_length");
          p.steps = json_object_get_int_member (c, "steps");
          p.block_length = json_object_get_int_member (c, "block_length");
          p.threshold = json_object_get_double_member (c, "threshold");
          p.eos_early_stop = json_object_get_boolean_member_with_default (c, "eos_early_stop", FALSE);
          p.cache = i % 2 ? UM_CACHE_NONE : UM_CACHE_PREFIX;
          g_assert_true (um_sampler_generate_full (fw, (const gint32 *) prompt->data, prompt->len, &p, trace_step, &t,
                                                   NULL, got, &n_steps, &error));
          g_assert_no_error (error);
          g_assert_cmpmem (got->data, got->len * sizeof (gint32), want->data, want->len * sizeof (gint32));
          g_assert_cmpuint (trace->len, ==, json_array_get_length (want_trace));
          g_assert_cmpint (n_steps, ==, (int) trace->len);
          for (guint s = 0; s < trace->len; s++)
            {
              g_autoptr(GArray) w = um_test_json_ids (json_array_get_array_element (want_trace, s));
              GArray *g = g_ptr_array_index (trace, s);
              g_assert_cmpmem (g->data, g->len * sizeof (gint32), w->data, w->len * sizeof (gint32));
            }
        }
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  use_cuda = g_strcmp0 (g_getenv ("UM_TEST_BACKEND"), "cuda") == 0;
  if (use_cuda)
    {
      g_setenv ("UNMASK_CUDA_EXACT_ATTENTION", "1", TRUE);
      g_setenv ("UNMASK_CUDA_EXACT_PRODUCTS", "1", TRUE);
      g_autoptr(GError) error = NULL;
      g_autoptr(UmBackend) probe = um_backend_cuda_new (0, 0, &error);
      if (probe == NULL)
        {
          if (g_getenv ("UM_TEST_REQUIRE_CUDA") != NULL)
            {
              g_printerr ("the CUDA backend could not be created: %s\n", error->message);
              return 1;
            }
          g_print ("1..0 # SKIP no usable GPU: %s\n", error->message);
          return 77;
        }
    }
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autofree char *name = g_strdup_printf ("/family-forward/%s/%s", cases[i].model, cases[i].key);
      g_test_add_data_func (name, &cases[i], test_case);
    }
  g_test_add_func ("/family-forward/descriptions", test_descriptions);
  g_test_add_func ("/family-forward/llada2-generate", test_llada2_generate);
  return g_test_run ();
}

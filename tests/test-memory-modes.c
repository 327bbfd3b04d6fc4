/* Memory modes on the CPU backend, a budget standing in for a GPU: layer
 * streaming equals the resident run bit for bit (plain, guided, cached and
 * choose passes, whole generations), the plan predicts what a
 * run measures, budgets that cannot be met fail before loading, loading
 * converts progressively, and generations in a row neither allocate nor
 * grow. */
#include <malloc.h>
#include <stdio.h>
#include <string.h>

#include "um-engine.h"
#include "um-error.h"
#include "um-layer-store.h"
#include "um-test-util.h"

static char *cache_dir;
static char *model_dir;   /* a generated BF16 model, 4 layers */

static UmEngine *
load (const char *path, UmMemMode mode, guint64 budget, void (*tweak) (UmEngineOptions *), GError **error)
{
  UmEngineOptions o;
  um_engine_options_init (&o);
  o.device = UM_DEVICE_CPU;
  o.memory_budget = budget;
  o.cache_dir = cache_dir;
  o.mem.mode = mode;
  o.shape.prompt_length = 8;
  o.shape.gen_length = 16;
  o.shape.block_length = 8;
  if (tweak)
    tweak (&o);
  return um_engine_load (path, &o, NULL, NULL, NULL, error);
}

/* A canvas of prompt + masks, the last @n rows asked for. */
static float *
run_logits (UmEngine *engine, int L, int n)
{
  const UmModelConfig *c = &um_engine_get_model (engine)->cfg;
  g_autofree gint32 *ids = g_new (gint32, L), *rows = g_new (gint32, n);
  float *logits = g_new (float, (size_t) n * c->vocab_size);
  g_autoptr(GError) error = NULL;

  for (int i = 0; i < L; i++)
    ids[i] = i < L - n ? (gint32) ((i * 7919 + 3) % 500) : c->mask_id;
  for (int i = 0; i < n; i++)
    rows[i] = L - n + i;
  g_assert_true (um_forward_logits (um_engine_get_forward (engine), ids, 1, L, rows, n, logits, NULL, &error));
  g_assert_no_error (error);
  return logits;
}

static int slots_for_test = 2;
static gboolean zstd_for_test;
static const char *format_for_test = "";

static void
stream_knobs (UmEngineOptions *o)
{
  o->mem.resident_layers = slots_for_test;
  o->mem.host_zstd = zstd_for_test;
  g_strlcpy (o->mem.weight_format, format_for_test, sizeof o->mem.weight_format);
}

static void
format_knob (UmEngineOptions *o)
{
  g_strlcpy (o->mem.weight_format, format_for_test, sizeof o->mem.weight_format);
}

/* The same weights streamed through k slots (raw and zstd store) give the
 * resident run's results bit for bit in every kind of pass (plain, guided,
 * cached prefix and dual, choose, whole generations): a slot holds the
 * file's bytes and the same kernels run on them in the same order, only
 * where the weights live differs, so equality is exact by construction.
 * The many passes make the slots wrap around and layers be prefetched
 * across pass boundaries. */
static void
check_streaming_identical (const char *path, const char *format)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(UmEngine) resident = NULL;
  UmTestOutputs want[2];   /* every pass; brief */

  format_for_test = format;
  resident = load (path, UM_MEM_EXTREME_MODERATE, 0, format_knob, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (um_engine_get_plan (resident)->stream_slots, ==, 0);
  for (int b = 0; b < 2; b++)
    {
      um_test_outputs_init (&want[b]);
      um_test_engine_passes (resident, b, &want[b]);
    }
  for (int z = 0; z <= 1; z++)
    for (int k = 2; k <= 3; k++)
      {
        g_autoptr(UmEngine) streamed = NULL;
        const UmPlan *p;
        const UmForwardStats *st;
        UmTestOutputs got;
        /* Every pass for raw with 2 slots and zstd with 3, the brief set
         * for the other two: the slots and the store are independent of
         * the kind of pass, and this keeps the test short. */
        const gboolean brief = (z == 0) != (k == 2);
        int differ;

        slots_for_test = k;
        zstd_for_test = z;
        streamed = load (path, UM_MEM_EXTREME_AGGRESSIVE, 0, stream_knobs, &error);
        g_assert_no_error (error);
        p = um_engine_get_plan (streamed);
        g_assert_cmpuint (p->n_layers, >, 3);
        g_assert_cmpuint (p->stream_slots, ==, k);
        g_assert_cmpstr (um_engine_get_plan (resident)->weight_format, ==, p->weight_format);
        g_assert_cmpint (p->options.row_chunk, ==, um_engine_get_plan (resident)->options.row_chunk);
        um_test_outputs_init (&got);
        um_test_engine_passes (streamed, brief, &got);
        if ((differ = um_test_outputs_differ (&got, &want[brief])) >= 0)
          g_error ("%s weights, %s store, %d slots: %s differ from the resident model's",
                   p->weight_format, z ? "zstd" : "raw", k, um_test_outputs_name (&want[brief], differ));
        st = um_forward_get_stats (um_engine_get_forward (streamed));
        g_test_message ("%s weights, %s store, %d slots: %u results identical over %" G_GUINT64_FORMAT " passes",
                        p->weight_format, z ? "zstd" : "raw", k, got.blocks->len, st->n_passes);
        /* Every pass streamed every layer. */
        g_assert_cmpuint (st->layers_streamed, ==, st->n_passes * p->n_layers);
        um_test_outputs_clear (&got);
      }
  um_test_outputs_clear (&want[0]);
  um_test_outputs_clear (&want[1]);
}

static void
test_streaming_identical (void)
{
  /* Q4_K_M is the aggressive mode's own; the others as the knob sets. */
  check_streaming_identical (model_dir, "");
  check_streaming_identical (model_dir, "Q8_0");
  check_streaming_identical (model_dir, "Q6_K");
  check_streaming_identical (model_dir, "stored");
}

static guint64
rel_diff_permille (guint64 got, guint64 want)
{
  return want ? (guint64) (1000.0 * ABS ((double) got - (double) want) / want) : 0;
}

/* Peak RSS from now on: the kernel's high-water mark is reset, after
 * memory that earlier tests freed is given back. */
static void
reset_peak_rss (void)
{
  FILE *f = fopen ("/proc/self/clear_refs", "w");
  malloc_trim (0);
  if (f != NULL)
    {
      fputs ("5", f);
      fclose (f);
    }
}

/* Each mode's predicted device peak is what the backend's accounting
 * measures, and the host peak the process's, within 10 %. */
static void
test_plan_vs_measured (void)
{
  for (int mode = 0; mode < UM_MEM_N_MODES; mode++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(UmEngine) engine = NULL;
      g_autoptr(UmGenResult) r = NULL;
      UmGenRequest req;
      UmEngineMemory m;
      const UmPlan *p;
      gint32 prompt[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };

      /* Convert first (cached), so the measured load is the mode's own. */
      g_clear_pointer (&engine, um_engine_free);
      engine = load (model_dir, mode, 0, NULL, &error);
      g_assert_no_error (error);
      g_clear_pointer (&engine, um_engine_free);
      reset_peak_rss ();
      engine = load (model_dir, mode, 0, NULL, &error);
      g_assert_no_error (error);
      um_gen_request_init (&req);
      req.prompt_ids = prompt;
      req.n_prompt_ids = 8;
      req.params.gen_length = 16;
      req.params.steps = 16;
      req.params.block_length = 8;
      r = um_engine_generate (engine, &req, NULL, NULL, NULL, &error);
      g_assert_no_error (error);
      p = um_engine_get_plan (engine);
      um_engine_get_memory (engine, &m);
      g_test_message ("%s: device predicted %" G_GUINT64_FORMAT " measured %" G_GUINT64_FORMAT
                      "; host predicted %" G_GUINT64_FORMAT " measured %" G_GUINT64_FORMAT,
                      um_mem_mode_to_string (mode), p->device_peak, m.device_peak, MAX (p->host_peak, p->host_load_peak),
                      m.host_peak);
      g_assert_cmpuint (rel_diff_permille (m.device_peak, p->device_peak), <=, 100);
      g_assert_cmpuint (rel_diff_permille (m.host_peak, MAX (p->host_peak, p->host_load_peak)), <=, 100);
    }
}

/* A budget below what even the smallest mode needs fails before any
 * weight is read, naming the numbers and what would fit. */
static void
test_budget_too_small (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(UmEngine) engine = load (model_dir, UM_MEM_EXTREME_AGGRESSIVE, 4096, NULL, &error);

  g_assert_null (engine);
  g_assert_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY);
  g_assert_nonnull (strstr (error->message, "needs"));
  g_assert_nonnull (strstr (error->message, "budget"));
  g_test_message ("%s", error->message);
  g_assert_nonnull (strstr (error->message, "has 4.0"));
  g_clear_error (&error);

  /* Standard over a budget that only a smaller mode meets: the message
   * names the modes that fit. */
  {
    g_autoptr(UmEngine) probe = load (model_dir, UM_MEM_EXTREME_AGGRESSIVE, 0, NULL, &error);
    guint64 budget;
    g_assert_no_error (error);
    budget = um_engine_get_plan (probe)->device_peak + 4096;
    engine = load (model_dir, UM_MEM_STANDARD, budget, NULL, &error);
    g_assert_null (engine);
    g_assert_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY);
    g_assert_nonnull (strstr (error->message, "Modes that fit"));
    g_assert_nonnull (strstr (error->message, "extreme-aggressive"));
    g_clear_error (&error);
    /* And that mode runs under it. */
    engine = load (model_dir, UM_MEM_EXTREME_AGGRESSIVE, budget, NULL, &error);
    g_assert_no_error (error);
    g_free (run_logits (engine, 24, 8));
  }
}

/* Converting at load holds one chunk at a time: the peak during load stays
 * within the final footprint plus one layer plus 10 %. */
static void
test_progressive_load (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(UmEngine) engine = NULL;
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *big = g_build_filename (dir, "m", NULL);
  UmTestModelSpec spec;
  guint64 load_peak, footprint, layer;
  const UmLayerWeights *L0;

  /* F32, so a layer is big against the process (8 MiB a layer). */
  um_test_model_spec_init (&spec);
  spec.n_layers = 4;
  spec.d_model = 512;
  spec.n_heads = 8;
  spec.n_kv_heads = 8;
  spec.mlp_hidden = 1536;
  spec.dtype = UM_DTYPE_F32;
  g_assert_true (um_test_write_model (big, &spec, &error));
  g_assert_no_error (error);

  reset_peak_rss ();
  engine = load (big, UM_MEM_EXTREME_MILD, 0, NULL, &error);
  g_assert_no_error (error);
  load_peak = um_process_peak_rss ();
  g_free (run_logits (engine, 24, 8));
  footprint = um_process_rss ();
  L0 = &um_engine_get_model (engine)->layers[0];
  layer = 0;
  for (int i = 0; i < UM_LAYER_N_MATS; i++)
    layer += um_layer_mat (L0, i)->rows * um_layer_mat (L0, i)->row_bytes;
  g_test_message ("load peak %" G_GUINT64_FORMAT ", footprint %" G_GUINT64_FORMAT ", layer %" G_GUINT64_FORMAT,
                  load_peak, footprint, layer);
  g_assert_cmpuint (load_peak, <=, (footprint + layer) * 11 / 10);
  g_clear_pointer (&engine, um_engine_free);
  um_test_rmtree (dir);
}

/* After the first generation, later ones allocate no device memory, and
 * 100 in a row grow the process by at most 1 %. */
static void
test_soak (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(UmEngine) engine = load (model_dir, UM_MEM_EXTREME_AGGRESSIVE, 0, NULL, &error);
  UmBackend *be;
  UmBackendMemInfo mem;
  guint64 allocs = 0, rss0 = 0;
  gint32 prompt[8] = { 11, 12, 13, 14, 15, 16, 17, 18 };

  g_assert_no_error (error);
  be = um_engine_get_backend (engine);
  for (int i = 0; i < 101; i++)
    {
      g_autoptr(UmGenResult) r = NULL;
      UmGenRequest req;
      um_gen_request_init (&req);
      req.prompt_ids = prompt;
      req.n_prompt_ids = 8;
      req.params.gen_length = 16;
      req.params.steps = 8;
      req.params.block_length = 8;
      req.params.temperature = i % 2 ? 0.5 : 0.0;
      req.params.seed = i;
      r = um_engine_generate (engine, &req, NULL, NULL, NULL, &error);
      g_assert_no_error (error);
      if (i == 0)
        {
          be->ops->mem_info (be, &mem);
          allocs = mem.n_allocs;
          rss0 = um_process_rss ();
        }
    }
  be->ops->mem_info (be, &mem);
  g_assert_cmpuint (mem.n_allocs, ==, allocs);
  g_test_message ("RSS after 1 generation %" G_GUINT64_FORMAT ", after 101 %" G_GUINT64_FORMAT, rss0,
                  um_process_rss ());
  /* AddressSanitizer keeps freed memory in quarantine (RSS grows by
   * design); there its leak check stands in for this one. */
#ifndef __SANITIZE_ADDRESS__
  g_assert_cmpuint (um_process_rss (), <=, rss0 + rss0 / 100);
#endif
}

static void
prune_knobs (UmEngineOptions *o)
{
  o->mem.prune_heads = 0.25;
  o->mem.prune_ffn = 0.2;
}

/* Pruning through the engine: the planned shapes are the loaded ones. */
static void
test_pruned_mode (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(UmEngine) engine = load (model_dir, UM_MEM_STANDARD_8BIT, 0, prune_knobs, &error);
  const UmModel *m;
  UmEngineMemory mem;

  g_assert_no_error (error);
  m = um_engine_get_model (engine);
  for (guint l = 0; l < m->cfg.n_layers; l++)
    {
      g_assert_cmpuint (m->layers[l].n_heads, <, 8);
      g_assert_cmpuint (m->layers[l].ffn, <, 768);
      g_assert_cmpuint (m->layers[l].wq.rows, ==, m->layers[l].n_heads * m->cfg.head_dim);
    }
  g_free (run_logits (engine, 24, 8));
  um_engine_get_memory (engine, &mem);
  g_assert_cmpuint (rel_diff_permille (mem.device_peak, um_engine_get_plan (engine)->device_peak), <=, 100);
}

static void
test_parse_size (void)
{
  guint64 v;
  g_assert_true (um_parse_size ("3GiB", &v));
  g_assert_cmpuint (v, ==, 3ull << 30);
  g_assert_true (um_parse_size ("512MiB", &v));
  g_assert_cmpuint (v, ==, 512ull << 20);
  g_assert_true (um_parse_size ("1.5G", &v));
  g_assert_cmpuint (v, ==, 3ull << 29);
  g_assert_true (um_parse_size ("2GB", &v));
  g_assert_cmpuint (v, ==, 2000000000ull);
  g_assert_true (um_parse_size ("4096", &v));
  g_assert_cmpuint (v, ==, 4096);
  g_assert_false (um_parse_size ("", &v));
  g_assert_false (um_parse_size ("3 parsecs", &v));
  g_assert_false (um_parse_size ("-1G", &v));
  g_assert_false (um_parse_size ("1e30", &v));
}

static void
test_modes_names (void)
{
  UmMemMode m;
  for (int i = 0; i < UM_MEM_N_MODES; i++)
    {
      g_assert_true (um_mem_mode_from_string (um_mem_mode_to_string (i), &m));
      g_assert_cmpint (m, ==, i);
    }
  g_assert_true (um_mem_mode_from_string ("moderate", &m));
  g_assert_cmpint (m, ==, UM_MEM_EXTREME_MODERATE);
  g_assert_false (um_mem_mode_from_string ("ludicrous", &m));
}

int
main (int argc, char **argv)
{
  UmTestModelSpec spec;
  g_autoptr(GError) error = NULL;
  int rc;

  g_test_init (&argc, &argv, NULL);
  cache_dir = um_test_mkdtemp ();
  model_dir = g_build_filename (cache_dir, "model", NULL);
  um_test_model_spec_init (&spec);
  spec.n_layers = 4;
  spec.d_model = 256;
  spec.n_heads = 8;
  spec.n_kv_heads = 8;
  spec.mlp_hidden = 768;
  spec.dtype = UM_DTYPE_BF16;
  if (!um_test_write_model (model_dir, &spec, &error))
    g_error ("%s", error->message);

  g_test_add_func ("/memory/mode-names", test_modes_names);
  g_test_add_func ("/memory/parse-size", test_parse_size);
  g_test_add_func ("/memory/streaming-identical", test_streaming_identical);
  g_test_add_func ("/memory/plan-vs-measured", test_plan_vs_measured);
  g_test_add_func ("/memory/budget-too-small", test_budget_too_small);
  g_test_add_func ("/memory/progressive-load", test_progressive_load);
  g_test_add_func ("/memory/soak", test_soak);
  g_test_add_func ("/memory/pruned-mode", test_pruned_mode);
  rc = g_test_run ();
  um_test_rmtree (cache_dir);
  g_free (model_dir);
  g_free (cache_dir);
  return rc;
}

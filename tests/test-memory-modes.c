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
#include "um-optimizer.h"
#include "um-test-util.h"

static char *cache_dir;
static char *model_dir;   /* a generated BF16 model, 4 layers */
static char *moe_dir;     /* generated BF16 LLaDA-MoE and Dream models, 4 layers (so they stream) */
static char *dream_dir;

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

/* The runs the plan is checked against: plain, each KV cache, guidance,
 * and zstd layer streaming (models of 3 layers or more: 2 slots); for MoE
 * models the routed experts off the device, in host memory (from the file,
 * or a zstd copy) or fetched into slots (from a raw or a zstd copy). */
typedef enum {
  RUN_PLAIN, RUN_PREFIX, RUN_DUAL, RUN_CFG, RUN_ZSTD, RUN_HOST, RUN_HOST_ZSTD, RUN_FETCH, RUN_FETCH_ZSTD, N_RUNS
} RunKind;
static const char *const run_names[N_RUNS] = { "plain", "prefix", "dual", "cfg", "zstd", "host", "host-z", "fetch",
                                               "fetch-z" };

static gboolean
run_experts_off (RunKind run)
{
  return run >= RUN_HOST;
}
static RunKind run_for_test;
/* Dream's and RND1's schedules ask for every masked row in a pass (the
 * answer is one block), as unmask-cli and the app plan them. */
static gboolean whole_answer_for_test;

static void
run_knobs (UmEngineOptions *o)
{
  if (whole_answer_for_test)
    o->shape.block_length = o->shape.gen_length;
  o->shape.kv_cache = run_for_test == RUN_PREFIX || run_for_test == RUN_DUAL;
  o->shape.cfg = run_for_test == RUN_CFG;
  if (run_for_test == RUN_ZSTD)
    {
      o->mem.resident_layers = 2;
      o->mem.host_zstd = TRUE;
    }
  if (run_experts_off (run_for_test))
    {
      o->mem.experts = run_for_test <= RUN_HOST_ZSTD ? UM_EXPERTS_HOST : UM_EXPERTS_FETCH;
      o->mem.host_zstd = run_for_test == RUN_HOST_ZSTD || run_for_test == RUN_FETCH_ZSTD;
    }
}

/* Why the host figure is compared within 10 %: the plan predicts what the
 * code allocates (the same functions size both, and buffers are allocated
 * as large as they are used, so MALLOC_PERTURB_ changes nothing) on top of
 * the process's live memory when planning (after malloc_trim). Resident
 * memory also moves by what no allocation of the engine decides. Up:
 * library code first run after planning, a converted GGUF's metadata
 * pages (its tokenizer: 0.3 MiB for the demo model's 4096 tokens), thread
 * stacks and malloc arenas, the kernel's fault-around of mapped tensors
 * (up to 64 KiB a touch); with a zstd store also zstd's code (0.4 MiB) and
 * the prefetch thread's stack and arena (0.2 MiB). Down: pages resident
 * when planning that go with the source model when converting (mapped
 * around its norms: 0.55 MiB for the generated model). Measured, that is
 * under 0.8 MiB each way without streaming, against processes of at least
 * 13 MiB here (harness, libraries, tokenizer): 6 %; under 1.4 MiB with
 * zstd streaming, which only the 4-layer models do, in processes of at
 * least 15 MiB: 9.3 %. Seen: −4.0 … +2.4 % here after other tests, up to
 * +8.4 % in a fresh unmask-cli process (where every library page is new).
 * With experts, also down: a mapped expert no token of a run was routed to
 * is never read (the plan counts every expert, as a long run reads them
 * all); the 16 masked positions of these runs route alike, which left
 * 1.4 MiB of the generated MoE model's 15 MiB unread with 256-wide
 * experts (−5 … −8 %), so its experts are 128 wide.
 * The device figure has no such slack: the CPU backend counts the bytes
 * each buffer and weight asks for, and the plan computes them with the
 * allocator's own functions, so the two are equal. */
#define HOST_SLACK_PERMILLE 100

/* Runs @path in @mode as @run and compares the plan with what the engine
 * measured: device equal, host within HOST_SLACK_PERMILLE. FALSE when the
 * run does not apply (streaming a model of fewer than 3 layers). */
static gboolean host_retried G_GNUC_UNUSED;   /* unused under ASan, which compares no host figure */

static gboolean
check_plan_run (const char *path, UmMemMode mode, RunKind run)
{
  g_autoptr(GString) line = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(UmEngine) engine = NULL;
  g_autoptr(UmGenResult) r = NULL;
  UmGenRequest req;
  UmEngineMemory m;
  const UmPlan *p;
  gint32 prompt[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
  guint64 host_pred, host_err, anon, file;
  g_autofree char *base = g_path_get_basename (path);

  run_for_test = run;
  /* Experts off the device: MoE models (the caller sees to it), as stored
   * (test-experts covers converted weights and row chunks; CI time). */
  if (run_experts_off (run) && mode != UM_MEM_STANDARD)
    return FALSE;
  /* Convert first (cached), so the measured load is the mode's own. */
  whole_answer_for_test = FALSE;
  engine = load (path, mode, 0, run_knobs, &error);
  g_assert_no_error (error);
  if (run == RUN_ZSTD && um_engine_get_model (engine)->cfg.n_layers < 3)
    return FALSE;

  /* Only the block schedule has guidance and the block KV caches. */
  whole_answer_for_test = um_arch_info (um_engine_get_model (engine)->cfg.arch)->schedule != UM_SCHEDULE_BLOCK;
  if (whole_answer_for_test && (run == RUN_PREFIX || run == RUN_DUAL || run == RUN_CFG))
    return FALSE;
  g_clear_pointer (&engine, um_engine_free);
  reset_peak_rss ();
  engine = load (path, mode, 0, run_knobs, &error);
  g_assert_no_error (error);
  p = um_engine_get_plan (engine);
  /* Printed with the run: a host peak off the plan then shows which kind
   * moved (file pages: library code first run, fault-around of mapped
   * tensors; anonymous: allocations, thread stacks, malloc arenas). */
  um_process_rss_split (&anon, &file);
  /* extreme-aggressive streams in every run (2 slots without a budget). */
  g_assert_cmpint (p->stream_slots > 0, ==, run == RUN_ZSTD || (mode == UM_MEM_EXTREME_AGGRESSIVE
                                                                && p->n_layers > 2));
  g_assert_cmpint (p->options.host_zstd, ==, run == RUN_ZSTD || run == RUN_HOST_ZSTD || run == RUN_FETCH_ZSTD);
  g_assert_cmpint (p->experts, ==, run == RUN_HOST || run == RUN_HOST_ZSTD ? UM_EXPERTS_HOST
                                   : run == RUN_FETCH || run == RUN_FETCH_ZSTD ? UM_EXPERTS_FETCH
                                                                               : UM_EXPERTS_RESIDENT);
  /* Right after loading (what the app shows before the first answer), the
   * device already holds the plan: work buffers and cache are reserved. */
  um_engine_get_memory (engine, &m);
  g_assert_cmpuint (m.device_peak, ==, p->device_peak);
  um_gen_request_init (&req);
  req.prompt_ids = prompt;
  req.n_prompt_ids = 8;
  req.params.gen_length = 16;
  req.params.steps = 16;
  req.params.block_length = 8;
  req.params.cache = run == RUN_PREFIX ? UM_CACHE_PREFIX : run == RUN_DUAL ? UM_CACHE_DUAL : UM_CACHE_NONE;
  req.params.cfg_scale = run == RUN_CFG ? 1.0 : 0.0;
  r = um_engine_generate (engine, &req, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  um_engine_get_memory (engine, &m);
  host_pred = MAX (p->host_peak, p->host_load_peak);
  line = g_string_new (NULL);
  g_string_append_printf (line, "%-24s %-19s %-6s %10" G_GUINT64_FORMAT " %10" G_GUINT64_FORMAT
                          " %10" G_GUINT64_FORMAT " %10" G_GUINT64_FORMAT " %+6.1f%%  (load %" G_GUINT64_FORMAT
                          " / %" G_GUINT64_FORMAT "; after it anon %" G_GUINT64_FORMAT " KiB, file %"
                          G_GUINT64_FORMAT " KiB)",
                          base, um_mem_mode_to_string (mode), run_names[run], p->device_peak, m.device_peak,
                          host_pred, m.host_peak, 100.0 * ((double) m.host_peak - host_pred) / host_pred,
                          p->host_load_peak, m.host_load_peak, anon / 1024, file / 1024);
  if (run == RUN_ZSTD || run == RUN_HOST_ZSTD || run == RUN_FETCH_ZSTD)
    g_string_append_printf (line, "  zstd %.3f (%s, %" G_GUINT64_FORMAT " B sampled), store %" G_GUINT64_FORMAT
                            " predicted, %" G_GUINT64_FORMAT " measured", p->zstd_ratio,
                            p->zstd_measured ? "measured" : "estimated", p->zstd_sampled_bytes,
                            run == RUN_ZSTD ? p->host[UM_PLAN_HOST_STORE] : p->expert_store, m.host_store);
  /* Each run as it ends, so that a failure shows its figures. */
  g_test_message ("%s", line->str);
  g_assert_cmpuint (m.device_peak, ==, p->device_peak);
  /* Under AddressSanitizer the process's memory holds its shadow, redzones
   * and quarantine, which no plan predicts: the figures are printed, the
   * device (our own allocations) still compared exactly. */
  host_err = rel_diff_permille (m.host_peak, host_pred);
#ifndef __SANITIZE_ADDRESS__
  /* The process's peak also counts pages the kernel mapped in for it,
   * which depends on what the page cache holds: in 2 of about 8 loaded full
   * runs one run came out ~20 % high, and once (December 2026) a converted
   * model's run twice in a row, +2.7-3.7 MiB in the load, anonymous and
   * file pages normal after it: a 2 MiB page of the freshly written file
   * mapped whole.  Model mappings now ask for 4 KiB pages
   * (um_tensor_mapping_small_pages ()).  A run that misses is still measured
   * once more, from a fresh engine; a plan that is wrong misses twice. */
  if (host_err > HOST_SLACK_PERMILLE && !host_retried)
    {
      g_test_message ("host peak %+.1f %% off the plan: measuring once more",
                      100.0 * ((double) m.host_peak - host_pred) / host_pred);
      g_clear_pointer (&r, um_gen_result_free);
      g_clear_pointer (&engine, um_engine_free);
      host_retried = TRUE;
      {
        gboolean ran = check_plan_run (path, mode, run);
        host_retried = FALSE;
        return ran;
      }
    }
  g_assert_cmpuint (host_err, <=, HOST_SLACK_PERMILLE);
#else
  (void) host_err;
#endif
  /* A zstd store's size is predicted from a measured ratio. */
  if (run == RUN_ZSTD || run == RUN_HOST_ZSTD || run == RUN_FETCH_ZSTD)
    {
      g_assert_true (p->zstd_measured);
      g_assert_cmpuint (p->zstd_sampled_bytes, >, 0);
      g_assert_cmpuint (m.host_store, >, 0);
    }
  return TRUE;
}

static void
check_plan_model (const char *path)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(UmModel) model = um_model_load (path, NULL, &error);   /* metadata: is it a MoE? */
  const gboolean moe = model != NULL && model->cfg.n_experts > 0;

  g_assert_no_error (error);
  g_clear_pointer (&model, um_model_free);
  g_test_message ("%-24s %-19s %-6s %10s %10s %10s %10s", "model", "mode", "run", "dev pred", "dev meas",
                  "host pred", "host meas");
  for (int mode = 0; mode < UM_MEM_N_MODES; mode++)
    for (int run = 0; run < N_RUNS; run++)
      if (moe || !run_experts_off (run))
        check_plan_run (path, mode, run);
}

/* Each mode's predicted device peak is what the backend's accounting
 * measures, and the host peak the process's within HOST_SLACK_PERMILLE,
 * for every model of the tests and the shipped demo model, with and
 * without the KV caches, guidance and zstd streaming. */
static void
test_plan_vs_measured (gconstpointer data)
{
  const char *name = data;
  g_autofree char *path = g_str_equal (name, "generated") ? g_strdup (model_dir)
                          : g_str_equal (name, "generated-moe") ? g_strdup (moe_dir)
                          : g_str_equal (name, "generated-dream") ? g_strdup (dream_dir)
                          : g_str_has_prefix (name, "demo-model") ? g_build_filename (g_getenv ("UM_DEMO_MODEL"),
                                                                                        name + strlen ("demo-model"),
                                                                                        NULL)
                                                                    : um_test_data_path (name);
  check_plan_model (path);
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
  /* The plan sizes the pruned shapes with the allocator's functions: exact. */
  g_assert_cmpuint (mem.device_peak, ==, um_engine_get_plan (engine)->device_peak);
}

/* What the optimizer promises is what a load with its profile does: it
 * picks extreme-aggressive under a budget, planning the layer slots within
 * the headroom; the engine, loaded from the profile, streams through as
 * many slots and stays within budget × (1 − headroom) while generating.
 * The budget leaves room for one more slot than the headroom does, so an
 * engine that filled the whole budget would take it and break the
 * promise. */
static void
test_optimizer_headroom (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(UmModel) model = um_model_load (model_dir, NULL, &error);
  g_autoptr(UmHardware) hw = g_new0 (UmHardware, 1);
  g_autoptr(UmOptimizeResult) r = NULL;
  g_autoptr(UmProfile) profile = NULL;
  g_autoptr(UmEngine) engine = NULL;
  g_autoptr(UmGenResult) gen = NULL;
  const double headroom = 0.25;
  guint64 peak[2], slot, budget, usable;
  const UmPlan *promised, *p;
  UmPlanShape shape;
  UmPlanTarget t;
  UmEngineOptions o;
  UmGenRequest req;
  UmEngineMemory m;
  gint32 prompt[8] = { 21, 22, 23, 24, 25, 26, 27, 28 };

  g_assert_no_error (error);
  hw->gpus = g_array_new (FALSE, TRUE, sizeof (UmGpuDevice));
  hw->why_no_gpu = g_strdup ("none in this test");
  hw->ram_total = 16ull << 30;
  hw->ram_available = 12ull << 30;
  hw->cores = 2;
  hw->cpu_name = g_strdup ("test CPU");

  /* The shape a load from the profile plans for: the mode's default
   * answer and block (um_profile_set_mode), this test's prompt. */
  {
    g_autoptr(UmProfile) d = um_profile_new_default ();
    um_profile_set_mode (d, UM_MEM_EXTREME_AGGRESSIVE);
    um_plan_shape_init (&shape);
    shape.prompt_length = 8;
    shape.gen_length = d->default_gen_length;
    shape.block_length = d->default_block_length;
  }
  /* The device with 2 and with 3 slots, to place the budget between them. */
  um_plan_target_cpu (&t, 0, 0);
  for (int k = 2; k <= 3; k++)
    {
      UmMemOptions mo;
      UmPlan q;
      um_mem_options_init (&mo, UM_MEM_EXTREME_AGGRESSIVE);
      mo.resident_layers = k;
      g_assert_true (um_plan_compute (model, &mo, &shape, &t, &q, &error));
      g_assert_no_error (error);
      g_assert_cmpuint (q.stream_slots, ==, k);
      peak[k - 2] = q.device_peak;
    }
  slot = peak[1] - peak[0];
  usable = peak[0] + slot / 2;
  budget = (guint64) (usable / (1.0 - headroom));
  usable = (guint64) ((double) budget * (1.0 - headroom));
  g_assert_cmpuint (usable, >=, peak[0]);
  g_assert_cmpuint (usable, <, peak[1]);
  g_assert_cmpuint (budget, >=, peak[1]);   /* the budget alone holds 3 slots */

  r = um_optimizer_plan (model, hw, &shape, budget, headroom, &error);
  g_assert_no_error (error);
  g_test_message ("budget %" G_GUINT64_FORMAT ", usable %" G_GUINT64_FORMAT ": %s", budget, usable, r->reason);
  g_assert_cmpint (r->chosen, ==, UM_MEM_EXTREME_AGGRESSIVE);
  promised = &g_array_index (r->table, UmPlan, r->chosen);
  g_assert_cmpuint (promised->stream_slots, ==, 2);
  g_assert_cmpuint (promised->device_peak, <=, usable);

  profile = um_optimizer_profile (r, NULL);
  um_engine_options_init (&o);
  um_profile_to_engine_options (profile, NULL, &o);
  o.device = UM_DEVICE_CPU;
  o.cache_dir = cache_dir;
  o.shape.prompt_length = shape.prompt_length;
  g_assert_cmpuint (o.memory_budget, ==, budget);
  engine = um_engine_load (model_dir, &o, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  p = um_engine_get_plan (engine);
  g_assert_cmpuint (p->stream_slots, ==, promised->stream_slots);
  g_assert_cmpuint (p->device_peak, ==, promised->device_peak);

  um_gen_request_init (&req);
  req.prompt_ids = prompt;
  req.n_prompt_ids = 8;
  req.params.gen_length = shape.gen_length;
  req.params.block_length = shape.block_length;
  req.params.steps = profile->default_steps;
  gen = um_engine_generate (engine, &req, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  um_engine_get_memory (engine, &m);
  g_test_message ("device: promised %" G_GUINT64_FORMAT ", planned at load %" G_GUINT64_FORMAT ", measured %"
                  G_GUINT64_FORMAT ", budget × (1 − headroom) %" G_GUINT64_FORMAT, promised->device_peak,
                  p->device_peak, m.device_peak, usable);
  g_assert_cmpuint (m.device_peak, <=, usable);
  /* The prediction, as everywhere on the CPU backend, is exact. */
  g_assert_cmpuint (m.device_peak, ==, p->device_peak);
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
  /* The families: every small tensor (biases, QK-norms, routers) and
   * stacked experts, in every mode, streamed too. */
  moe_dir = g_build_filename (cache_dir, "moe", NULL);
  um_test_model_spec_init_family (&spec, UM_ARCH_LLADA_MOE);
  spec.n_layers = 4;
  spec.d_model = 256;
  spec.n_heads = spec.n_kv_heads = 4;
  spec.n_experts = 8;
  spec.n_experts_used = 3;
  /* Experts narrower than the attention is wide: see HOST_SLACK_PERMILLE
   * on experts a short run never reads. */
  spec.expert_ffn = 128;
  spec.dtype = UM_DTYPE_BF16;
  if (!um_test_write_model (moe_dir, &spec, &error))
    g_error ("%s", error->message);
  dream_dir = g_build_filename (cache_dir, "dream", NULL);
  um_test_model_spec_init_family (&spec, UM_ARCH_DREAM);
  spec.n_layers = 4;
  spec.d_model = 256;
  spec.n_heads = 8;
  spec.n_kv_heads = 2;
  spec.mlp_hidden = 512;
  spec.dtype = UM_DTYPE_BF16;
  if (!um_test_write_model (dream_dir, &spec, &error))
    g_error ("%s", error->message);

  g_test_add_func ("/memory/mode-names", test_modes_names);
  g_test_add_func ("/memory/parse-size", test_parse_size);
  g_test_add_func ("/memory/streaming-identical", test_streaming_identical);
  {
    /* Every LLaDA model of the test data, the shipped demo model (its
     * folder and its GGUF), the generated 4-layer BF16 ones (LLaDA,
     * LLaDA-MoE, Dream) and the families' Q8_0 fixtures. */
    static const char *const models[] = {
      "generated", "demo-model", "demo-model/demo-model-Q8_0.gguf", "tiny-llada", "tiny-llada-f32.gguf",
      "tiny-llada-q8_0.gguf", "tiny-llada-q4_0.gguf", "small-kquant", "small-kquant-f32.gguf",
      "small-kquant-q4_1.gguf", "small-kquant-q5_0.gguf", "small-kquant-q5_1.gguf", "small-kquant-q4_k.gguf",
      "small-kquant-q4_k_m.gguf", "small-kquant-q5_k.gguf", "small-kquant-q5_k_m.gguf", "small-kquant-q6_k.gguf",
      "generated-moe", "generated-dream", "tiny-dream-q8_0.gguf", "tiny-llada-moe-q8_0.gguf", "tiny-rnd1-q8_0.gguf",
    };
    for (guint i = 0; i < G_N_ELEMENTS (models); i++)
      {
        g_autofree char *name = g_strdup_printf ("/memory/plan-vs-measured/%s", models[i]);
        g_test_add_data_func (name, models[i], test_plan_vs_measured);
      }
  }
  g_test_add_func ("/memory/budget-too-small", test_budget_too_small);
  g_test_add_func ("/memory/progressive-load", test_progressive_load);
  g_test_add_func ("/memory/soak", test_soak);
  g_test_add_func ("/memory/pruned-mode", test_pruned_mode);
  g_test_add_func ("/memory/optimizer-headroom", test_optimizer_headroom);
  rc = g_test_run ();
  um_test_rmtree (cache_dir);
  g_free (model_dir);
  g_free (moe_dir);
  g_free (dream_dir);
  g_free (cache_dir);
  return rc;
}

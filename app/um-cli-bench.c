/* unmask-cli bench — forward passes per second, achieved GFLOP/s, share of
 * time in matrix products, tokens per second and peak RSS, next to what
 * OpenBLAS's sgemm alone reaches on the same shapes on this machine. */
#include "config.h"

#include <cblas.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "um-backend-cuda.h"
#include "um-choose.h"
#include "um-cli.h"
#include "um-cpu-isa.h"
#include "um-cpu-kernels.h"
#include "um-error.h"
#include "um-kprof.h"
#include "um-pool.h"
#include "um-json.h"

extern char *openblas_get_config (void);
extern char *openblas_get_corename (void);
extern int openblas_get_parallel (void);

static guint64
peak_rss_bytes (void)
{
  struct rusage ru;
  if (getrusage (RUSAGE_SELF, &ru) != 0)
    return 0;
  return (guint64) ru.ru_maxrss * 1024;
}

typedef struct {
  const char *what;
  int m, n, k;
  int count;   /* how many such products one forward pass does */
} Shape;

/* Best of three sgemm runs per shape; returns the flop-weighted GFLOP/s over
 * one forward pass's worth of products and adds a per-shape list to @b. */
static double
sgemm_baseline (const Shape *shapes, guint n_shapes, JsonBuilder *b)
{
  double total_flops = 0, total_time = 0;

  json_builder_begin_array (b);
  for (guint s = 0; s < n_shapes; s++)
    {
      const Shape *sh = &shapes[s];
      size_t na = (size_t) sh->m * sh->k, nb = (size_t) sh->n * sh->k, nc = (size_t) sh->m * sh->n;
      float *a = g_try_malloc (na * sizeof (float)), *w = g_try_malloc (nb * sizeof (float));
      float *c = g_try_malloc (nc * sizeof (float));
      double best = G_MAXDOUBLE, flops = 2.0 * sh->m * sh->n * (double) sh->k;

      if (a == NULL || w == NULL || c == NULL)
        {
          g_free (a), g_free (w), g_free (c);
          continue;
        }
      /* Small normal values: no denormals, no infinities. */
      for (size_t i = 0; i < na; i++)
        a[i] = (float) ((i * 2654435761u) % 2001) * 1e-3f - 1.0f;
      for (size_t i = 0; i < nb; i++)
        w[i] = (float) ((i * 40503u) % 2001) * 1e-5f - 0.01f;
      for (int r = 0; r < 3; r++)
        {
          gint64 t0 = g_get_monotonic_time ();
          cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasTrans, sh->m, sh->n, sh->k,
                       1.0f, a, sh->k, w, sh->k, 0.0f, c, sh->n);
          best = MIN (best, (g_get_monotonic_time () - t0) / 1e6);
        }
      total_flops += flops * sh->count;
      total_time += best * sh->count;
      json_builder_begin_object (b);
      um_json_add_string (b, "product", sh->what);
      um_json_add_int (b, "m", sh->m);
      um_json_add_int (b, "n", sh->n);
      um_json_add_int (b, "k", sh->k);
      um_json_add_double (b, "gflops", flops / best / 1e9);
      json_builder_end_object (b);
      g_free (a), g_free (w), g_free (c);
    }
  json_builder_end_array (b);
  return total_time > 0 ? total_flops / total_time / 1e9 : 0;
}

/* Forward passes over a fixed canvas with every position's logits. */
/* The products' device time so far where the backend measures it (CUDA
 * events: the host's clock around a GPU product sees only its queueing),
 * or -1. */
static double
device_matmul_seconds (UmBackend *be)
{
  double s;
  return um_backend_cuda_matmul_seconds (be, &s) ? s : -1;
}

/* One pass over the whole canvas: every row's logits downloaded, or (@choose)
 * every row's token and confidence chosen where the logits are (on a GPU,
 * only those come back, as in a generation step). */
static gboolean
canvas_pass (UmForward *fw, const gint32 *ids, int canvas, gboolean choose, float *logits, const gint32 *positions,
             gint32 *out_ids, double *out_conf, GError **error)
{
  UmChooseRule rule = { 0 };

  if (!choose)
    return um_forward_logits (fw, ids, 1, canvas, NULL, 0, logits, NULL, error);
  rule.eos_id = rule.eot_id = -1;
  return um_forward_choose (fw, ids, 1, canvas, NULL, canvas, &rule, positions, out_ids, out_conf, NULL, error);
}

static gboolean
bench_canvas (UmEngine *engine, int canvas, int passes, gboolean choose, double *warm_s, double *dev_matmul0,
              UmStreamCounters counters0[2], GError **error)
{
  UmForward *fw = um_engine_get_forward (engine);
  const UmModelConfig *c = &um_forward_get_model (fw)->cfg;
  g_autofree gint32 *ids = g_new (gint32, canvas), *out_ids = g_new (gint32, canvas), *pos = g_new (gint32, canvas);
  g_autofree double *out_conf = g_new (double, canvas);
  g_autofree float *logits = choose ? NULL : g_try_malloc ((size_t) canvas * c->vocab_size * sizeof (float));
  gint64 t0;

  if (!choose && logits == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY, "out of memory for %d × %u logits", canvas, c->vocab_size);
      return FALSE;
    }
  /* Half prompt, half masks, like a diffusion step. */
  for (int i = 0; i < canvas; i++)
    {
      ids[i] = i < canvas / 2 ? (gint32) ((i * 2654435761u + 12345u) % MIN (c->vocab_size, 100000u)) : c->mask_id;
      pos[i] = i;
    }
  /* Warm-up: the first pass pages the weights in; on a GPU the second
   * records the pass's graph (the first measures it). */
  t0 = g_get_monotonic_time ();
  if (!canvas_pass (fw, ids, canvas, choose, logits, pos, out_ids, out_conf, error))
    return FALSE;
  *warm_s = (g_get_monotonic_time () - t0) / 1e6;
  if (!canvas_pass (fw, ids, canvas, choose, logits, pos, out_ids, out_conf, error))
    return FALSE;
  um_forward_reset_stats (fw);
  um_cli_stream_counters (engine, counters0);
  um_kprof_reset ();
  *dev_matmul0 = device_matmul_seconds (um_forward_get_backend (fw));
  for (int p = 0; p < passes; p++)
    if (!canvas_pass (fw, ids, canvas, choose, logits, pos, out_ids, out_conf, error))
      return FALSE;
  return TRUE;
}

/* The kernel profile's families per forward pass, and the rest of the
 * forward's wall time ("outside": the forward's own bookkeeping and
 * anything between the ops), into @b and as one line on stderr. */
static void
profile_report (JsonBuilder *b, const UmForwardStats *st)
{
  double sec[UM_KPROF_N], in_ops = 0, n = MAX (st->n_passes, 1), total = st->seconds / n;
  g_autoptr(GString) line = g_string_new ("profile, per forward:");

  um_kprof_get (sec);
  json_builder_set_member_name (b, "profile");
  json_builder_begin_object (b);
  um_json_add_double (b, "seconds_per_forward", total);
  json_builder_set_member_name (b, "families");
  json_builder_begin_object (b);
  for (int f = 0; f <= UM_KPROF_N; f++)
    {
      const char *name = f < UM_KPROF_N ? um_kprof_family_name ((UmKprofFamily) f) : "outside";
      double s = f < UM_KPROF_N ? sec[f] / n : MAX (total - in_ops, 0);

      if (f < UM_KPROF_N)
        in_ops += s;
      json_builder_set_member_name (b, name);
      json_builder_begin_object (b);
      um_json_add_double (b, "seconds", s);
      um_json_add_double (b, "share", total > 0 ? s / total : 0);
      json_builder_end_object (b);
      g_string_append_printf (line, " %s %.1f %% (%.4f s)", name, total > 0 ? 100 * s / total : 0, s);
    }
  json_builder_end_object (b);
  json_builder_end_object (b);
  g_printerr ("%s; total %.4f s\n", line->str, total);
}

/* One canvas of several: its timings (and profile) as an object of the
 * "canvases" array. */
static void
canvas_report (JsonBuilder *b, UmBackend *be, int canvas, const UmForwardStats *stats, double warm_s,
               double dev_matmul0, gboolean profile)
{
  UmForwardStats st = *stats;
  double dev = dev_matmul0 >= 0 ? device_matmul_seconds (be) : -1;

  if (dev >= 0)
    st.seconds_matmul = dev - dev_matmul0;
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "canvas");
  json_builder_add_int_value (b, canvas);
  json_builder_set_member_name (b, "warmup_seconds");
  json_builder_add_double_value (b, warm_s);
  json_builder_set_member_name (b, "forward_passes");
  json_builder_add_int_value (b, st.n_passes);
  json_builder_set_member_name (b, "seconds_per_forward");
  json_builder_add_double_value (b, st.n_passes ? st.seconds / st.n_passes : 0);
  json_builder_set_member_name (b, "gflop_per_forward");
  json_builder_add_double_value (b, st.n_passes ? st.flops / st.n_passes / 1e9 : 0);
  json_builder_set_member_name (b, "gflops");
  json_builder_add_double_value (b, st.seconds > 0 ? st.flops / st.seconds / 1e9 : 0);
  json_builder_set_member_name (b, "matmul_gflops");
  json_builder_add_double_value (b, st.seconds_matmul > 0 ? st.flops_matmul / st.seconds_matmul / 1e9 : 0);
  json_builder_set_member_name (b, "matmul_share");
  json_builder_add_double_value (b, st.seconds > 0 ? st.seconds_matmul / st.seconds : 0);
  if (profile)
    profile_report (b, &st);
  json_builder_end_object (b);
}

int
um_cli_bench (int argc, char **argv)
{
  g_autoptr(GOptionContext) ctx = g_option_context_new ("— measure the engine on a model");
  g_autofree char *model_path = NULL;
  int prompt_length = 64, canvas = 0, passes = 5, background = 0;
  GArray *busy = NULL;
  gboolean no_sgemm = FALSE, profile = FALSE, choose = FALSE;
  g_autofree char *head = NULL, *canvas_list = NULL;
  g_autoptr(GArray) canvases = g_array_new (FALSE, FALSE, sizeof (int));
  g_autoptr(JsonBuilder) per_canvas = json_builder_new ();
  g_auto(UmCliGenOptions) go = { 0 };
  GOptionEntry entries[] = {
    { "model", 'm', 0, G_OPTION_ARG_FILENAME, &model_path, "Model folder or .gguf file", "PATH" },
    { "prompt-length", 0, 0, G_OPTION_ARG_INT, &prompt_length, "Random prompt tokens (default 64)", "N" },
    { "no-sgemm", 0, 0, G_OPTION_ARG_NONE, &no_sgemm, "Skip the OpenBLAS sgemm baseline", NULL },
    { "canvas", 0, 0, G_OPTION_ARG_STRING, &canvas_list,
      "Instead of generating, time forward passes over a canvas of N tokens with the logits of every "
      "position (the work llama.cpp's diffusion example does per step); N,N,… times each in turn with one "
      "load, each in \"canvases\", the last also at the top level", "N[,N…]" },
    { "passes", 0, 0, G_OPTION_ARG_INT, &passes, "Forward passes with --canvas (default 5)", "N" },
    { "profile", 0, 0, G_OPTION_ARG_NONE, &profile,
      "Time each kernel family (share of the forward's time, in the JSON and on stderr; on a GPU with events "
      "around every op, which turns its graphs off)", NULL },
    { "head", 0, 0, G_OPTION_ARG_STRING, &head,
      "With --canvas: logits (every row's logits downloaded, the default) or choose (every row's token and "
      "confidence chosen where the logits are: on a GPU only those come back)", "logits|choose" },
    { "background", 0, 0, G_OPTION_ARG_INT, &background,
      "Keep N other processes busy (one core each) while measuring, as a loaded desktop would", "N" },
    { NULL }
  };
  g_autoptr(GError) error = NULL;
  g_autoptr(UmEngine) engine = NULL;
  g_autoptr(GArray) out_ids = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autoptr(JsonBuilder) b = json_builder_new ();
  g_autoptr(JsonNode) root = NULL;
  g_autofree gint32 *prompt = NULL, *rows = NULL;
  g_autofree float *logits = NULL;
  UmGenParams params;
  UmForwardStats st;
  UmStreamCounters counters0[2] = { { 0 } };
  UmBackendMemInfo mem;
  UmForward *fw;
  const UmModelConfig *c;
  gint64 t0;
  double load_s, warm_s = 0, gen_s = 0, dev_matmul0 = -1, dev_matmul = -1;
  guint64 rss;
  int steps_run = 0;

  um_cli_gen_options_init (&go, 64, 64, 32);
  /* Unset options resolve for the model's family (Dream's and RND1's
   * schedules have no blocks), as generate's do. */
  go.resolve = TRUE;
  g_option_context_add_main_entries (ctx, entries, NULL);
  um_cli_gen_options_add (ctx, &go);
  if (!um_cli_parse_options (ctx, &argc, &argv))
    return 2;
  if (!um_cli_gen_options_to_params (&go, &params, &error))
    return um_cli_fail (error);
  if (head != NULL && !g_str_equal (head, "logits") && !g_str_equal (head, "choose"))
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "--head takes logits or choose, not “%s”", head);
      return um_cli_fail (error);
    }
  choose = head != NULL && g_str_equal (head, "choose");
  if (canvas_list != NULL)
    {
      g_auto(GStrv) parts = g_strsplit (canvas_list, ",", -1);
      for (guint i = 0; parts[i] != NULL; i++)
        {
          gint64 v = 0;
          if (!g_ascii_string_to_signed (g_strstrip (parts[i]), 10, 1, G_MAXINT / 2, &v, NULL))
            {
              g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "--canvas takes positive numbers, not “%s”",
                           parts[i]);
              return um_cli_fail (error);
            }
          g_array_append_val (canvases, v);
          canvas = MAX (canvas, (int) v);
        }
    }
  if (prompt_length < 1 || canvas < 0 || passes < 1 || background < 0 || background > 256)
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "--prompt-length and --passes must be at least 1, --canvas not negative, "
                   "--background 0 to 256");
      return um_cli_fail (error);
    }

  t0 = g_get_monotonic_time ();
  {
    UmEngineOptions opts;
    if (um_cli_engine_options (&go, &params, canvas > 0 ? 0 : prompt_length, model_path, &opts, &error))
      {
        if (canvas > 0)
          {
            /* The plan for a pass over the (largest) canvas with every row's logits. */
            opts.shape.prompt_length = 0;
            opts.shape.gen_length = canvas;
            opts.shape.block_length = canvas;
          }
        engine = um_cli_load_engine_with (model_path, &opts, &error);
      }
  }
  if (engine == NULL)
    return um_cli_fail (error);
  load_s = (g_get_monotonic_time () - t0) / 1e6;
  fw = um_engine_get_forward (engine);
  c = &um_engine_get_model (engine)->cfg;
  /* Counted from the reset after the warm-up pass. */
  um_kprof_enable (profile);

  /* After loading: the load's I/O is not what is measured.  On a failure
   * below the children die with this process (PR_SET_PDEATHSIG). */
  if (background > 0 && (busy = um_cli_busy_start (background, &error)) == NULL)
    return um_cli_fail (error);
  if (canvas > 0)
    {
      json_builder_begin_array (per_canvas);
      for (guint i = 0; i < canvases->len; i++)
        {
          const int cv = g_array_index (canvases, int, i);
          if (!bench_canvas (engine, cv, passes, choose, &warm_s, &dev_matmul0, counters0, &error))
            return um_cli_fail (error);
          canvas = cv;
          if (canvases->len > 1)
            canvas_report (per_canvas, um_engine_get_backend (engine), cv, um_forward_get_stats (fw), warm_s,
                           dev_matmul0, profile);
        }
      json_builder_end_array (per_canvas);
    }
  else
    {
      /* A reproducible random prompt of ordinary tokens. */
      int L = prompt_length + params.gen_length;
      g_autofree gint32 *start = g_new (gint32, L);
      prompt = g_new (gint32, prompt_length);
      for (int i = 0; i < prompt_length; i++)
        {
          prompt[i] = (gint32) ((i * 2654435761u + 12345u) % MIN (c->vocab_size, 100000u));
          if (prompt[i] == c->mask_id)
            prompt[i] = 0;
        }
      /* Warm-up: the first step's pass pages the weights in. */
      memcpy (start, prompt, sizeof (gint32) * prompt_length);
      for (int i = prompt_length; i < L; i++)
        start[i] = c->mask_id;
      /* A first step's rows: the first block's, or every mask's. */
      const int n_rows = um_schedule_for_arch (c->arch)->answer_blocks ? params.block_length : params.gen_length;
      rows = g_new (gint32, n_rows);
      for (int i = 0; i < n_rows; i++)
        rows[i] = prompt_length + i;
      logits = g_try_malloc ((size_t) n_rows * c->vocab_size * sizeof (float));
      t0 = g_get_monotonic_time ();
      if (logits == NULL
          || !um_forward_logits (fw, start, 1, L, rows, n_rows, logits, NULL, &error))
        {
          if (error == NULL)
            g_set_error (&error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY, "out of memory for the warm-up logits");
          return um_cli_fail (error);
        }
      warm_s = (g_get_monotonic_time () - t0) / 1e6;
      g_clear_pointer (&logits, g_free);

      um_forward_reset_stats (fw);
      um_cli_stream_counters (engine, counters0);
      um_kprof_reset ();
      dev_matmul0 = device_matmul_seconds (um_engine_get_backend (engine));
      t0 = g_get_monotonic_time ();
      if (!um_sampler_generate_full (fw, prompt, prompt_length, &params, NULL, NULL, NULL, out_ids, &steps_run,
                                     &error))
        return um_cli_fail (error);
      gen_s = (g_get_monotonic_time () - t0) / 1e6;
    }
  um_cli_busy_stop (busy);
  st = *um_forward_get_stats (fw);
  um_kprof_enable (FALSE);
  /* On a GPU: the products' time on the device, not their queueing. */
  if (dev_matmul0 >= 0 && (dev_matmul = device_matmul_seconds (um_engine_get_backend (engine))) >= 0)
    st.seconds_matmul = dev_matmul - dev_matmul0;
  rss = peak_rss_bytes ();
  um_engine_get_backend (engine)->ops->mem_info (um_engine_get_backend (engine), &mem);

  json_builder_begin_object (b);
  um_json_add_string (b, "model", model_path);
  um_json_add_string (b, "backend", um_backend_name (um_engine_get_backend (engine)));
  if (mem.total > 0)
    {
      um_json_add_int (b, "device_total_bytes", mem.total);
      um_json_add_int (b, "device_budget_bytes", mem.budget);
    }
  um_json_add_int (b, "threads", um_cpu_get_threads ());
  um_json_add_int (b, "background_processes", background);
  /* The default thread count adapts to the CPU obtained; this is the count
   * it had settled on at the end. */
  um_json_add_int (b, "threads_at_end", um_pool_active_threads ());
  {
    UmBackend *be = um_engine_get_backend (engine);
    gboolean cpu = g_str_equal (um_backend_name (be), "cpu");
    UmDType wt = um_engine_get_model (engine)->layers[0].w_gate.dtype;

    um_json_add_string (b, "cpu_isa", um_cpu_isa_name (um_cpu_isa ()));
    um_json_add_string (b, "weight_type", um_dtype_name (wt));
    if (cpu)
      {
        UmProducts products = um_backend_cpu_get_products (be);
        um_json_add_string (b, "products", um_products_to_string (products));
        um_json_add_string (b, "matmul_path", um_cpu_matmul_path_name (um_cpu_matmul_path (wt, products)));
      }
  }
  /* Which kernel set OpenBLAS runs: its own choice for this CPU (an older
   * OpenBLAS falls back to old kernels on a CPU newer than itself), unless
   * OPENBLAS_CORETYPE says otherwise (a user's desktop usually has none). */
  json_builder_set_member_name (b, "openblas");
  json_builder_begin_object (b);
  /* A string literal of the library: never written to. */
  um_json_add_string (b, "corename", openblas_get_corename ());
  um_json_add_string (b, "config", g_strstrip (openblas_get_config ()));
  um_json_add_string (b, "threading", openblas_get_parallel () == 2 ? "openmp"
                                      : openblas_get_parallel () == 1 ? "pthreads" : "sequential");
  json_builder_set_member_name (b, "coretype_env");
  if (g_getenv ("OPENBLAS_CORETYPE") != NULL)
    json_builder_add_string_value (b, g_getenv ("OPENBLAS_CORETYPE"));
  else
    json_builder_add_null_value (b);
  json_builder_end_object (b);
  um_json_add_int (b, "n_layers", c->n_layers);
  um_json_add_int (b, "d_model", c->d_model);
  um_json_add_int (b, "mlp_hidden", c->mlp_hidden);
  um_json_add_int (b, "vocab_size", c->vocab_size);
  um_json_add_int (b, "parameters", um_model_config_n_params (c));
  um_json_add_int (b, "weight_bytes", um_model_weight_bytes (um_engine_get_model (engine)));
  if (canvas > 0)
    {
      um_json_add_string (b, "mode", "canvas");
      um_json_add_int (b, "canvas", canvas);
      if (canvases->len > 1)
        {
          json_builder_set_member_name (b, "canvases");
          json_builder_add_value (b, json_builder_get_root (per_canvas));
        }
      um_json_add_string (b, "head", choose ? "choose" : "logits");
    }
  else
    {
      um_json_add_string (b, "mode", "generate");
      um_json_add_int (b, "prompt_length", prompt_length);
      um_json_add_int (b, "gen_length", params.gen_length);
      um_json_add_int (b, "steps", params.steps);
      um_json_add_int (b, "steps_run", steps_run);
      um_json_add_string (b, "cache", um_cache_mode_to_string (params.cache));
      um_json_add_double (b, "threshold", params.threshold);
      um_json_add_double (b, "factor", params.factor);
      um_json_add_int (b, "block_length", params.block_length);
    }
  um_json_add_double (b, "load_seconds", load_s);
  um_json_add_double (b, "warmup_seconds", warm_s);
  um_json_add_int (b, "forward_passes", st.n_passes);
  um_json_add_double (b, "forward_passes_per_second", st.seconds > 0 ? st.n_passes / st.seconds : 0);
  um_json_add_double (b, "seconds_per_forward", st.n_passes ? st.seconds / st.n_passes : 0);
  um_json_add_double (b, "gflop_per_forward", st.n_passes ? st.flops / st.n_passes / 1e9 : 0);
  um_json_add_double (b, "gflops", st.seconds > 0 ? st.flops / st.seconds / 1e9 : 0);
  um_json_add_double (b, "matmul_gflops", st.seconds_matmul > 0 ? st.flops_matmul / st.seconds_matmul / 1e9 : 0);
  um_json_add_double (b, "matmul_share", st.seconds > 0 ? st.seconds_matmul / st.seconds : 0);
  um_json_add_string (b, "matmul_timing", dev_matmul >= 0 ? "device" : "host");
  um_json_add_double (b, "logit_rows_per_forward", st.n_passes ? (double) st.logit_rows / st.n_passes : 0);
  if (canvas == 0)
    {
      um_json_add_double (b, "generate_seconds", gen_s);
      um_json_add_double (b, "tokens_per_second", gen_s > 0 ? params.gen_length / gen_s : 0);
      /* The prompt and what was generated, for comparing with a peer
       * given the same prompt. */
      json_builder_set_member_name (b, "prompt_ids");
      json_builder_begin_array (b);
      for (int i = 0; i < prompt_length; i++)
        json_builder_add_int_value (b, prompt[i]);
      json_builder_end_array (b);
      json_builder_set_member_name (b, "ids");
      json_builder_begin_array (b);
      for (guint i = 0; i < out_ids->len; i++)
        json_builder_add_int_value (b, g_array_index (out_ids, gint32, i));
      json_builder_end_array (b);
    }
  um_json_add_int (b, "peak_rss_bytes", rss);
  um_json_add_int (b, "backend_peak_bytes", mem.peak);
  um_json_add_double (b, "stream_wait_seconds_per_forward", st.n_passes ? st.seconds_stream_wait / st.n_passes : 0);
  um_json_add_string (b, "experts", um_expert_placement_to_string (um_engine_get_plan (engine)->experts));
  if (c->n_experts > 0)
    {
      um_json_add_double (b, "experts_fetched_per_forward",
                          st.n_passes ? (double) st.experts_fetched / st.n_passes : 0);
      um_json_add_double (b, "expert_bytes_fetched_per_forward",
                          st.n_passes ? (double) st.expert_bytes_fetched / st.n_passes : 0);
      um_json_add_double (b, "expert_wait_seconds_per_forward",
                          st.n_passes ? st.seconds_expert_wait / st.n_passes : 0);
      um_json_add_double (b, "experts_host_seconds_per_forward",
                          st.n_passes ? st.seconds_experts_host / st.n_passes : 0);
    }
  um_cli_memory_json (b, engine);
  um_cli_streaming_json (b, engine, &st, counters0);
  if (profile)
    profile_report (b, &st);
  {
    UmCudaGraphStats gs;
    if (um_backend_cuda_graph_stats (um_engine_get_backend (engine), &gs))
      {
        json_builder_set_member_name (b, "cuda_graphs");
        json_builder_begin_object (b);
        um_json_add_int (b, "recorded", gs.recorded);
        um_json_add_int (b, "replayed", gs.replayed);
        um_json_add_int (b, "redone", gs.redone);
        json_builder_end_object (b);
      }
  }
  if (!no_sgemm)
    {
      int L = canvas > 0 ? canvas : prompt_length + params.gen_length;
      int QD = c->n_heads * c->head_dim, KVD = c->n_kv_heads * c->head_dim;
      int R = canvas > 0 ? canvas : params.block_length;
      const Shape shapes[] = {
        { "q/out", L, QD, c->d_model, 2 * c->n_layers },
        { "k/v", L, KVD, c->d_model, 2 * c->n_layers },
        { "gate/up", L, c->mlp_hidden, c->d_model, 2 * c->n_layers },
        { "down", L, c->d_model, c->mlp_hidden, c->n_layers },
        { "lm_head", R, c->vocab_size, c->d_model, 1 },
      };
      double g;
      json_builder_set_member_name (b, "sgemm_shapes");
      g = sgemm_baseline (shapes, G_N_ELEMENTS (shapes), b);
      um_json_add_double (b, "sgemm_gflops", g);
      if (g > 0 && st.seconds_matmul > 0)
        um_json_add_double (b, "matmul_over_sgemm", st.flops_matmul / st.seconds_matmul / 1e9 / g);
    }
  json_builder_end_object (b);
  root = json_builder_get_root (b);
  um_cli_print_json (root, TRUE);
  return 0;
}

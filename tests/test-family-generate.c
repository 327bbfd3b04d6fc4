/* Each family's own schedule on its fixture: every generate case of
 * tiny-dream (timestep schedule), tiny-rnd1 (entropy schedule),
 * tiny-llada-moe (LLaDA's blocks) and tiny-llada2 (block-causal blocks,
 * with and without the cache of finished blocks) gives the expected ids and trace
 * exactly, from the Hugging Face folder and the F32 GGUF, through the
 * engine and through unmask-cli with the case's own command line (so the
 * CLI's defaults are the ones the cases assume). Also: the logits shift in
 * LLaDA's block schedule, unmask-cli logits printing raw rows, and the
 * options a family does not have. (The Q8_0 files hold other weights: the
 * fixtures give their logits, not their schedules.) */
#include <math.h>
#include <string.h>
#include <sys/wait.h>

#include "um-error.h"
#include "um-test-util.h"

static const char *const families[] = { "tiny-dream", "tiny-rnd1", "tiny-llada-moe", "tiny-llada2" };

typedef struct {
  GPtrArray *trace;
  int        calls;
} Recorder;

static void
record_step (const UmStepEvent *ev, gpointer user_data)
{
  Recorder *r = user_data;
  GArray *a = g_array_new (FALSE, FALSE, sizeof (gint32));

  g_assert_cmpint (ev->step, ==, r->calls);
  for (int i = 0; i < ev->n_committed; i++)
    {
      if (i > 0)
        g_assert_cmpint (ev->positions[i - 1], <, ev->positions[i]);
      g_assert_cmpint (ev->canvas[ev->positions[i]], ==, ev->ids[i]);
      g_assert_cmpint (ev->positions[i], >=, ev->prompt_len);
    }
  g_array_append_vals (a, ev->positions, ev->n_committed);
  g_ptr_array_add (r->trace, a);
  r->calls++;
}

static gboolean
cli_has (JsonObject *c, const char *flag)
{
  JsonArray *cli = json_object_get_array_member (c, "cli");

  for (guint i = 0; i < json_array_get_length (cli); i++)
    if (g_str_equal (json_array_get_string_element (cli, i), flag))
      return TRUE;
  return FALSE;
}

/* The case's parameters, each family's other options at their defaults. */
static void
params_from_case (UmArch arch, JsonObject *c, UmGenParams *p)
{
  um_gen_params_init_for_arch (p, arch);
  p->gen_length = json_object_get_int_member (c, "gen_length");
  p->steps = json_object_get_int_member (c, "steps");
  p->temperature = json_object_get_double_member_with_default (c, "temperature", 0.0);
  if (json_object_has_member (c, "block_length"))
    p->block_length = json_object_get_int_member (c, "block_length");
  p->cfg_scale = json_object_get_double_member_with_default (c, "cfg_scale", 0.0);
  p->logits_eos_inf = json_object_get_boolean_member_with_default (c, "logits_eos_inf", FALSE);
  p->confidence_eos_eot_inf = json_object_get_boolean_member_with_default (c, "confidence_eos_eot_inf", FALSE);
  if (json_object_has_member (c, "alg"))
    g_assert_true (um_alg_from_string (json_object_get_string_member (c, "alg"), &p->alg));
  p->eps = json_object_get_double_member_with_default (c, "eps", p->eps);
  p->greedy = cli_has (c, "--greedy");
  p->threshold = json_object_get_double_member_with_default (c, "threshold", p->threshold);
  p->eos_early_stop = json_object_get_boolean_member_with_default (c, "eos_early_stop", FALSE);
}

static void
assert_trace (GPtrArray *trace, JsonArray *want_trace)
{
  g_assert_cmpuint (trace->len, ==, json_array_get_length (want_trace));
  for (guint s = 0; s < trace->len; s++)
    {
      g_autoptr(GArray) w = um_test_json_ids (json_array_get_array_element (want_trace, s));
      GArray *got = g_ptr_array_index (trace, s);
      g_assert_cmpmem (got->data, got->len * sizeof (gint32), w->data, w->len * sizeof (gint32));
    }
}

static JsonArray *
cases_of (JsonParser *parser)
{
  return json_object_get_array_member (json_node_get_object (json_parser_get_root (parser)), "generate");
}

static void
check_engine (gconstpointer data)
{
  const char *name = data;
  g_autofree char *json_name = g_strdup_printf ("%s.expected.json", name);
  g_autofree char *gguf_name = g_strdup_printf ("%s-f32.gguf", name);
  const char *forms[] = { name, gguf_name };
  g_autoptr(JsonParser) parser = um_test_load_json (json_name);
  JsonArray *cases = cases_of (parser);

  g_assert_cmpuint (json_array_get_length (cases), >, 0);
  for (guint f = 0; f < G_N_ELEMENTS (forms); f++)
    {
      g_autofree char *path = um_test_data_path (forms[f]);
      /* The expected ids and traces are those of exact arithmetic. */
      g_autoptr(UmEngine) engine = um_test_load_engine (path, TRUE);
      const UmArch arch = um_engine_get_model (engine)->cfg.arch;

      /* LLaDA 2: with the cache of finished blocks (its default) and
       * without, the same ids and trace. */
      const int runs = um_arch_info (arch)->schedule == UM_SCHEDULE_BLOCK_CAUSAL ? 2 : 1;
      double flops[2] = { 0.0, 0.0 };

      for (guint i = 0; i < runs * json_array_get_length (cases); i++)
        {
          JsonObject *c = json_array_get_object_element (cases, i % json_array_get_length (cases));
          g_autoptr(GArray) prompt = um_test_json_ids (json_object_get_array_member (c, "prompt_ids"));
          g_autoptr(GArray) want = um_test_json_ids (json_object_get_array_member (c, "ids"));
          g_autoptr(GPtrArray) trace = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
          g_autoptr(GError) error = NULL;
          g_autoptr(UmGenResult) result = NULL;
          Recorder rec = { trace, 0 };
          UmGenRequest req;

          um_gen_request_init (&req);
          params_from_case (arch, c, &req.params);
          if (i >= json_array_get_length (cases))
            {
              g_assert_cmpint (req.params.cache, !=, UM_CACHE_NONE);
              req.params.cache = UM_CACHE_NONE;
            }
          req.prompt_ids = (const gint32 *) prompt->data;
          req.n_prompt_ids = prompt->len;
          g_test_message ("%s case %u: gen %d steps %d cache %s", forms[f], i, req.params.gen_length,
                          req.params.steps, um_cache_mode_to_string (req.params.cache));
          um_forward_reset_stats (um_engine_get_forward (engine));
          result = um_engine_generate (engine, &req, record_step, &rec, NULL, &error);
          g_assert_no_error (error);
          flops[i / json_array_get_length (cases)] += um_forward_get_stats (um_engine_get_forward (engine))->flops;
          g_assert_cmpint (result->steps, ==, (int) trace->len);
          g_assert_cmpmem (result->ids->data, result->ids->len * sizeof (gint32), want->data,
                           want->len * sizeof (gint32));
          assert_trace (trace, json_object_get_array_member (c, "trace"));
        }
      /* The cache's point: it computes less (counted products, exact
       * integers in double). */
      if (runs == 2)
        {
          g_test_message ("%s: %.3g flops cached, %.3g without", forms[f], flops[0], flops[1]);
          g_assert_cmpfloat (flops[0], <, flops[1]);
        }
    }
}

/* ---- unmask-cli ---- */

typedef struct {
  int   status;
  char *out, *err;
} Run;

static void
run_clear (Run *r)
{
  g_free (r->out);
  g_free (r->err);
}

G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (Run, run_clear)

static void
run_cli (Run *r, const char *config_dir, GPtrArray *args)
{
  g_autoptr(GPtrArray) argv = g_ptr_array_new ();
  g_auto(GStrv) env = g_get_environ ();
  g_autoptr(GError) error = NULL;
  int wait_status = 0;

  memset (r, 0, sizeof *r);
  g_ptr_array_add (argv, (char *) g_getenv ("UM_CLI"));
  for (guint i = 0; i < args->len; i++)
    g_ptr_array_add (argv, g_ptr_array_index (args, i));
  g_ptr_array_add (argv, NULL);
  /* No optimizer profile of the user's, exact products, the CPU. */
  env = g_environ_setenv (env, "UNMASK_CONFIG_DIR", config_dir, TRUE);
  env = g_environ_setenv (env, "UNMASK_DEVICE", "cpu", TRUE);
  env = g_environ_setenv (env, "UNMASK_PRODUCTS", "exact", TRUE);
  g_spawn_sync (NULL, (char **) argv->pdata, env, G_SPAWN_DEFAULT, NULL, NULL, &r->out, &r->err, &wait_status,
                &error);
  g_assert_no_error (error);
  r->status = g_spawn_check_wait_status (wait_status, NULL) ? 0 : WEXITSTATUS (wait_status);
}

static char *
ids_text (JsonArray *ids)
{
  g_autoptr(GString) s = g_string_new (NULL);

  for (guint i = 0; i < json_array_get_length (ids); i++)
    g_string_append_printf (s, "%s%" G_GINT64_FORMAT, i ? "," : "", json_array_get_int_element (ids, i));
  return g_string_free (g_steal_pointer (&s), FALSE);
}

static void
check_cli (gconstpointer data)
{
  const char *name = data;
  g_autofree char *json_name = g_strdup_printf ("%s.expected.json", name);
  g_autofree char *gguf_name = g_strdup_printf ("%s-f32.gguf", name);
  const char *forms[] = { name, gguf_name };
  g_autoptr(JsonParser) parser = um_test_load_json (json_name);
  JsonArray *cases = cases_of (parser);
  g_autofree char *config = um_test_mkdtemp ();

  if (g_getenv ("UM_CLI") == NULL)
    {
      g_test_skip ("UM_CLI is not set");
      return;
    }
  /* The per-ISA reruns (tests/run-tests.sh) check the numbers, which the
   * engine test does at each level; the CLI's plumbing is run once. */
  if (g_getenv ("UM_CPU_ISA") != NULL)
    {
      g_test_skip ("the command line is checked in the run at the machine's own ISA level");
      return;
    }
  /* Every case from the folder (whose generation_config.json the CLI
   * reads), two from the GGUF (built-in defaults only): the engine test
   * runs them all on both. */
  for (guint f = 0; f < G_N_ELEMENTS (forms); f++)
    for (guint i = 0; i < json_array_get_length (cases) && (f == 0 || i < 2); i++)
      {
        JsonObject *c = json_array_get_object_element (cases, i);
        JsonArray *cli = json_object_get_array_member (c, "cli");
        g_autofree char *path = um_test_data_path (forms[f]);
        g_autofree char *prompt = ids_text (json_object_get_array_member (c, "prompt_ids"));
        g_autoptr(GPtrArray) args = g_ptr_array_new ();
        g_autoptr(JsonParser) out = json_parser_new ();
        g_autoptr(GArray) want = um_test_json_ids (json_object_get_array_member (c, "ids"));
        g_autoptr(GArray) got = NULL;
        g_autoptr(GPtrArray) trace = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
        g_auto(Run) r;
        JsonObject *root;
        JsonArray *got_trace;

        /* As the fixtures' README says: after --model M --ids PROMPT,
         * before --json. */
        g_ptr_array_add (args, "generate");
        g_ptr_array_add (args, "--model");
        g_ptr_array_add (args, path);
        g_ptr_array_add (args, "--ids");
        g_ptr_array_add (args, prompt);
        for (guint a = 0; a < json_array_get_length (cli); a++)
          g_ptr_array_add (args, (char *) json_array_get_string_element (cli, a));
        g_ptr_array_add (args, "--json");
        run_cli (&r, config, args);
        g_test_message ("%s case %u → %d: %s", forms[f], i, r.status, r.err);
        g_assert_cmpint (r.status, ==, 0);
        g_assert_true (json_parser_load_from_data (out, r.out, -1, NULL));
        root = json_node_get_object (json_parser_get_root (out));
        got = um_test_json_ids (json_object_get_array_member (root, "ids"));
        g_assert_cmpmem (got->data, got->len * sizeof (gint32), want->data, want->len * sizeof (gint32));
        got_trace = json_object_get_array_member (root, "trace");
        for (guint s = 0; s < json_array_get_length (got_trace); s++)
          g_ptr_array_add (trace, um_test_json_ids (json_array_get_array_element (got_trace, s)));
        assert_trace (trace, json_object_get_array_member (c, "trace"));
        g_assert_cmpint (json_object_get_int_member (root, "steps"), ==, (gint64) trace->len);
      }
  um_test_rmtree (config);
}

/* Options the model's family does not have fail, naming the option; the
 * resolved defaults list only the family's own keys. */
static void
test_cli_family_options (void)
{
  static const struct {
    const char *model;
    const char *args[4];
    const char *needle;
  } bad[] = {
    { "tiny-dream", { "--block-length", "8" }, "--block-length is not an option of Dream" },
    { "tiny-dream", { "--remasking", "random" }, "--remasking is not an option of Dream" },
    { "tiny-dream", { "--greedy" }, "--greedy is not an option of Dream" },
    { "tiny-dream", { "--cache", "prefix" }, "block KV cache" },
    { "tiny-dream", { "--factor", "1" }, "factor" },
    { "tiny-dream", { "--alg", "origin", "--threshold", "0.9" }, "threshold" },
    { "tiny-rnd1-f32.gguf", { "--alg", "entropy" }, "--alg is not an option of RND1" },
    { "tiny-rnd1", { "--cfg-scale", "1" }, "--cfg-scale is not an option of RND1" },
    { "tiny-rnd1", { "--threshold", "0.9" }, "threshold" },
    { "tiny-llada-moe", { "--top-p", "0.9" }, "--top-p is not an option of LLaDA-MoE" },
    { "tiny-llada-moe-f32.gguf", { "--eps", "0.01" }, "--eps is not an option of LLaDA-MoE" },
  };
  g_autofree char *config = um_test_mkdtemp ();

  if (g_getenv ("UM_CLI") == NULL)
    {
      g_test_skip ("UM_CLI is not set");
      return;
    }
  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_autofree char *path = um_test_data_path (bad[i].model);
      g_autoptr(GPtrArray) args = g_ptr_array_new ();
      g_auto(Run) r;

      g_ptr_array_add (args, "generate");
      g_ptr_array_add (args, "--model");
      g_ptr_array_add (args, path);
      g_ptr_array_add (args, "--ids");
      g_ptr_array_add (args, "1,2,3");
      g_ptr_array_add (args, "--gen-length");
      g_ptr_array_add (args, "8");
      for (guint a = 0; a < G_N_ELEMENTS (bad[i].args) && bad[i].args[a] != NULL; a++)
        g_ptr_array_add (args, (char *) bad[i].args[a]);
      g_ptr_array_add (args, "--json");
      run_cli (&r, config, args);
      g_test_message ("%s %s → %d: %s", bad[i].model, bad[i].args[0], r.status, r.err);
      g_assert_cmpint (r.status, !=, 0);
      g_assert_nonnull (strstr (r.err, bad[i].needle));
    }

  /* Dream's defaults: steps follow the length, README's rule and
   * temperature, no nucleus; the HF folder's generation_config.json is
   * DreamGenerationConfig's saved defaults and recommends nothing. */
  {
    g_autofree char *path = um_test_data_path ("tiny-dream");
    g_autoptr(GPtrArray) args = g_ptr_array_new ();
    g_autoptr(JsonParser) out = json_parser_new ();
    JsonObject *root, *d;
    g_auto(Run) r;

    g_ptr_array_add (args, "generate");
    g_ptr_array_add (args, "--model");
    g_ptr_array_add (args, path);
    g_ptr_array_add (args, "--ids");
    g_ptr_array_add (args, "1,2,3");
    g_ptr_array_add (args, "--gen-length");
    g_ptr_array_add (args, "12");
    g_ptr_array_add (args, "--json");
    run_cli (&r, config, args);
    g_assert_cmpint (r.status, ==, 0);
    g_assert_true (json_parser_load_from_data (out, r.out, -1, NULL));
    root = json_node_get_object (json_parser_get_root (out));
    d = json_object_get_object_member (root, "defaults");
    g_assert_false (json_object_has_member (d, "block_length"));
    g_assert_false (json_object_has_member (d, "greedy"));
    g_assert_cmpint (json_object_get_int_member (json_object_get_object_member (d, "steps"), "value"), ==, 12);
    g_assert_cmpstr (json_object_get_string_member (json_object_get_object_member (d, "alg"), "value"), ==,
                     "entropy");
    g_assert_cmpstr (json_object_get_string_member (json_object_get_object_member (d, "alg"), "source"), ==,
                     "built-in");
    g_assert_cmpint (json_object_get_int_member (root, "steps"), ==, 12);
    g_assert_cmpuint (json_array_get_length (json_object_get_array_member (root, "ids")), ==, 12);
    g_assert_cmpuint (json_array_get_length (json_object_get_array_member (root, "not_applied")), ==, 4);
  }
  um_test_rmtree (config);
}

/* unmask-cli logits prints raw rows (row i from hidden state i), also for
 * a family that shifts: the shift is the sampler's. */
static void
test_cli_logits_raw (void)
{
  g_autoptr(JsonParser) parser = um_test_load_json ("tiny-dream.expected.json");
  JsonObject *logits = json_object_get_object_member (json_node_get_object (json_parser_get_root (parser)), "logits");
  JsonArray *want = json_object_get_array_member (logits, "values");
  g_autofree char *ids = ids_text (json_object_get_array_member (logits, "ids"));
  g_autofree char *path = um_test_data_path ("tiny-dream");
  g_autofree char *config = um_test_mkdtemp ();
  g_autoptr(GPtrArray) args = g_ptr_array_new ();
  g_autoptr(JsonParser) out = json_parser_new ();
  JsonArray *rows;
  g_auto(Run) r;

  if (g_getenv ("UM_CLI") == NULL)
    {
      g_test_skip ("UM_CLI is not set");
      return;
    }
  g_ptr_array_add (args, "logits");
  g_ptr_array_add (args, "--model");
  g_ptr_array_add (args, path);
  g_ptr_array_add (args, "--ids");
  g_ptr_array_add (args, ids);
  run_cli (&r, config, args);
  g_assert_cmpint (r.status, ==, 0);
  g_assert_true (json_parser_load_from_data (out, r.out, -1, NULL));
  rows = json_object_get_array_member (json_node_get_object (json_parser_get_root (out)), "logits");
  g_assert_nonnull (rows);
  g_assert_cmpuint (json_array_get_length (rows), ==, json_array_get_length (want));
  /* Row by row, nearer the raw expected row than the one before it: the
   * rows differ by whole logits, float32's error is ~1e-4 (issue 8). */
  for (guint i = 1; i < json_array_get_length (want); i++)
    {
      JsonArray *g = json_array_get_array_element (rows, i);
      JsonArray *w = json_array_get_array_element (want, i), *w1 = json_array_get_array_element (want, i - 1);
      double d_same = 0.0, d_prev = 0.0;
      for (guint v = 0; v < json_array_get_length (w); v++)
        {
          double x = json_array_get_double_element (g, v);
          d_same = MAX (d_same, fabs (x - json_array_get_double_element (w, v)));
          d_prev = MAX (d_prev, fabs (x - json_array_get_double_element (w1, v)));
        }
      g_assert_cmpfloat (d_same, <, 1e-2);
      g_assert_cmpfloat (d_prev, >, 10 * d_same);
    }
  um_test_rmtree (config);
}

/* unmask-cli logits --block-length: LLaDA 2.x's block-causal logits at a
 * chosen block, as the fixture's "cli" flags ask (its "logits" entry has
 * blocks of 4); without it, full attention (its other entry). A family
 * without block-causal attention refuses the flag. */
static void
test_cli_logits_block (void)
{
  g_autoptr(JsonParser) parser = um_test_load_json ("tiny-llada2.expected.json");
  JsonObject *root = json_node_get_object (json_parser_get_root (parser));
  g_autofree char *path = um_test_data_path ("tiny-llada2");
  g_autofree char *llada = um_test_data_path ("tiny-llada");
  g_autofree char *config = um_test_mkdtemp ();
  const char *entries[] = { "logits", "logits_full_attention" };

  if (g_getenv ("UM_CLI") == NULL)
    {
      g_test_skip ("UM_CLI is not set");
      return;
    }
  for (guint e = 0; e < G_N_ELEMENTS (entries); e++)
    {
      JsonObject *entry = json_object_get_object_member (root, entries[e]);
      JsonArray *want = json_object_get_array_member (entry, "values");
      JsonArray *cli = json_object_has_member (entry, "cli") ? json_object_get_array_member (entry, "cli") : NULL;
      g_autofree char *ids = ids_text (json_object_get_array_member (entry, "ids"));
      g_autoptr(GPtrArray) args = g_ptr_array_new ();
      g_autoptr(JsonParser) out = json_parser_new ();
      JsonArray *rows;
      double worst = 0.0;
      g_auto(Run) r;

      g_ptr_array_add (args, "logits");
      g_ptr_array_add (args, "--model");
      g_ptr_array_add (args, path);
      g_ptr_array_add (args, "--ids");
      g_ptr_array_add (args, ids);
      for (guint i = 0; cli != NULL && i < json_array_get_length (cli); i++)
        g_ptr_array_add (args, (gpointer) json_array_get_string_element (cli, i));
      run_cli (&r, config, args);
      g_assert_cmpint (r.status, ==, 0);
      g_assert_true (json_parser_load_from_data (out, r.out, -1, NULL));
      rows = json_object_get_array_member (json_node_get_object (json_parser_get_root (out)), "logits");
      g_assert_cmpuint (json_array_get_length (rows), ==, json_array_get_length (want));
      for (guint i = 0; i < json_array_get_length (want); i++)
        {
          JsonArray *g = json_array_get_array_element (rows, i), *w = json_array_get_array_element (want, i);
          for (guint v = 0; v < json_array_get_length (w); v++)
            {
              double x = json_array_get_double_element (w, v);
              worst = MAX (worst, fabs (json_array_get_double_element (g, v) - x) / (1.0 + fabs (x)));
            }
        }
      g_test_message ("%s: max relative error %.3g", entries[e], worst);
      /* float32's error on this model is ~1e-5 (test-family-forward); the
       * other mask moves logits by more than 1 (test-llada2-ref). */
      g_assert_cmpfloat (worst, <, 1e-3);
    }
  {
    const char *argv[] = { "logits", "--model", llada, "--ids", "1,2,3", "--block-length", "4", NULL };
    g_autoptr(GPtrArray) args = g_ptr_array_new ();
    g_auto(Run) r;
    for (guint i = 0; argv[i]; i++)
      g_ptr_array_add (args, (gpointer) argv[i]);
    run_cli (&r, config, args);
    g_assert_cmpint (r.status, !=, 0);
    g_assert_nonnull (strstr (r.err, "block-causal"));
  }
  um_test_rmtree (config);
}

/* LLaDA's block schedule on a model that shifts its logits: the first step
 * commits the candidate whose row before is the most confident, with that
 * row's arg-max. */
static void
test_block_schedule_shift (void)
{
  g_autofree char *path = um_test_data_path ("tiny-llada");
  g_autoptr(UmEngine) engine = um_test_load_engine (path, TRUE);
  UmModel *model = um_engine_get_model (engine);
  const int P = 5, G = 8, L = P + G, V = (int) model->cfg.vocab_size;
  const gint32 prompt[] = { 10, 20, 30, 40, 50 };
  g_autofree gint32 *x = g_new (gint32, L);
  g_autofree float *logits = g_new (float, (gsize) L * V);
  g_autoptr(GPtrArray) trace = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  g_autoptr(GError) error = NULL;
  g_autoptr(UmGenResult) result = NULL;
  Recorder rec = { trace, 0 };
  UmGenRequest req;
  double best = -1.0;
  int best_pos = -1;
  gint32 best_id = -1;

  memcpy (x, prompt, sizeof prompt);
  for (int i = P; i < L; i++)
    x[i] = model->cfg.mask_id;
  g_assert_true (um_forward_logits (um_engine_get_forward (engine), x, 1, L, NULL, L, logits, NULL, &error));
  /* Candidate i reads row i − 1; softmax maximum in double. Ties would be
   * resolved by position; the fixture's rows have none. */
  for (int i = P; i < L; i++)
    {
      const float *row = logits + (gsize) (i - 1) * V;
      double mx = -INFINITY, sum = 0.0;
      int arg = 0;
      for (int v = 0; v < V; v++)
        if (row[v] > mx)
          {
            mx = row[v];
            arg = v;
          }
      for (int v = 0; v < V; v++)
        sum += exp ((double) row[v] - mx);
      if (1.0 / sum > best)
        {
          best = 1.0 / sum;
          best_pos = i;
          best_id = arg;
        }
    }

  model->cfg.shift_logits = TRUE;
  um_gen_request_init (&req);
  req.params.gen_length = G;
  req.params.steps = G;
  req.params.block_length = G;
  req.prompt_ids = prompt;
  req.n_prompt_ids = P;
  result = um_engine_generate (engine, &req, record_step, &rec, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (trace->len, ==, G);
  g_assert_cmpuint (((GArray *) g_ptr_array_index (trace, 0))->len, ==, 1);
  g_assert_cmpint (g_array_index ((GArray *) g_ptr_array_index (trace, 0), gint32, 0), ==, best_pos);
  g_assert_cmpint (g_array_index (result->ids, gint32, best_pos - P), ==, best_id);

  /* The block KV cache computes the block's rows only: a shift cannot use it. */
  g_clear_pointer (&result, um_gen_result_free);
  req.params.cache = UM_CACHE_PREFIX;
  result = um_engine_generate (engine, &req, NULL, NULL, NULL, &error);
  g_assert_null (result);
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  model->cfg.shift_logits = FALSE;
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  for (guint i = 0; i < G_N_ELEMENTS (families); i++)
    {
      g_autofree char *engine_path = g_strdup_printf ("/family-generate/engine/%s", families[i]);
      g_autofree char *cli_path = g_strdup_printf ("/family-generate/cli/%s", families[i]);
      g_test_add_data_func (engine_path, families[i], check_engine);
      g_test_add_data_func (cli_path, families[i], check_cli);
    }
  g_test_add_func ("/family-generate/cli-family-options", test_cli_family_options);
  g_test_add_func ("/family-generate/cli-logits-raw", test_cli_logits_raw);
  g_test_add_func ("/family-generate/cli-logits-block", test_cli_logits_block);
  g_test_add_func ("/family-generate/block-schedule-shift", test_block_schedule_shift);
  return g_test_run ();
}

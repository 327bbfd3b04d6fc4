/* The model's recommended generation settings and the precedence rule
 * (um-gen-defaults.h): generation_config.json and GGUF metadata are read
 * and every hostile value is a warning, never a crash or a silent drop;
 * keys the sampler lacks are reported as not applied; the user's choice
 * beats the model's, which beats the profile's mode defaults, which beat
 * the built-in ones; and unmask-cli generate says where each value came
 * from (--verbose, --json).
 *
 * The float comparisons here are exact by construction: a value written as
 * a decimal in JSON is read by a correctly rounded strtod, the same double
 * the compiler makes of that literal; a GGUF float32 is printed to 6
 * significant digits and read back the same way (tidy_f32); and resolving
 * or copying a value never computes with it. */
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>
#include <sys/wait.h>

#include "um-error.h"
#include "um-gen-defaults.h"
#include "um-gguf.h"
#include "um-profile.h"
#include "um-quantize.h"
#include "um-test-util.h"

static UmGenRecommendation *
from_json (const char *text)
{
  return um_gen_recommendation_from_json (text, -1, "generation_config.json");
}

/* Some warning mentions @needle (and @needle2 if given). */
static void
assert_warned (const UmGenRecommendation *rec, const char *needle, const char *needle2)
{
  for (guint i = 0; i < rec->warnings->len; i++)
    {
      const char *w = g_ptr_array_index (rec->warnings, i);
      if (strstr (w, needle) != NULL && (needle2 == NULL || strstr (w, needle2) != NULL))
        return;
    }
  for (guint i = 0; i < rec->warnings->len; i++)
    g_test_message ("warning: %s", (const char *) g_ptr_array_index (rec->warnings, i));
  g_error ("no warning mentions “%s”%s%s", needle, needle2 ? " and " : "", needle2 ? needle2 : "");
}

static const UmGenNote *
find_note (const UmGenRecommendation *rec, const char *key)
{
  for (guint i = 0; i < rec->not_applied->len; i++)
    {
      const UmGenNote *n = g_ptr_array_index (rec->not_applied, i);
      if (g_str_equal (n->key, key))
        return n;
    }
  return NULL;
}

static void
test_json_values (void)
{
  g_autoptr(UmGenRecommendation) rec = from_json (
    "{\"bos_token_id\": 1, \"eos_token_id\": 2, \"temperature\": 0.7, \"max_new_tokens\": 64,"
    " \"steps\": 32, \"block_length\": 16, \"cfg_scale\": 0.5, \"remasking\": \"random\","
    " \"transformers_version\": \"4.46.0\", \"top_p\": 1.0, \"top_k\": 0}");

  g_assert_cmpuint (rec->layer.set, ==, (1u << UM_GEN_N_BLOCK_KEYS) - 1);
  g_assert_cmpint (rec->layer.params.gen_length, ==, 64);
  g_assert_cmpint (rec->layer.params.steps, ==, 32);
  g_assert_cmpint (rec->layer.params.block_length, ==, 16);
  g_assert_cmpfloat (rec->layer.params.temperature, ==, 0.7);
  g_assert_cmpfloat (rec->layer.params.cfg_scale, ==, 0.5);
  g_assert_cmpint (rec->layer.params.remasking, ==, UM_REMASK_RANDOM);
  g_assert_cmpstr (rec->origin, ==, "generation_config.json");
  /* Special ids, the version and the neutral top_p / top_k say nothing. */
  g_assert_cmpuint (rec->warnings->len, ==, 0);
  g_assert_cmpuint (rec->not_applied->len, ==, 0);
}

static void
test_json_nothing (void)
{
  g_autoptr(UmGenRecommendation) rec = from_json ("{\"bos_token_id\": 4090, \"eos_token_id\": 4091}");

  g_assert_cmpuint (rec->layer.set, ==, 0);
  g_assert_null (rec->origin);
  g_assert_cmpuint (rec->warnings->len, ==, 0);
  g_assert_cmpuint (rec->not_applied->len, ==, 0);
}

typedef struct {
  const char *json;
  UmGenKey    key;        /* must stay unset */
  const char *needle, *needle2;
} Hostile;

static void
test_json_hostile (void)
{
  static const Hostile cases[] = {
    { "{\"temperature\": \"hot\"}", UM_GEN_KEY_TEMPERATURE, "“temperature”", "not a number" },
    { "{\"temperature\": true}", UM_GEN_KEY_TEMPERATURE, "“temperature”", "a boolean" },
    { "{\"temperature\": [0.5]}", UM_GEN_KEY_TEMPERATURE, "“temperature”", "an array" },
    { "{\"temperature\": {\"value\": 1}}", UM_GEN_KEY_TEMPERATURE, "“temperature”", "an object" },
    { "{\"temperature\": -0.5}", UM_GEN_KEY_TEMPERATURE, "“temperature”", "outside 0…5" },
    { "{\"temperature\": 1e300}", UM_GEN_KEY_TEMPERATURE, "“temperature”", "outside 0…5" },
    { "{\"cfg_scale\": 11}", UM_GEN_KEY_CFG_SCALE, "“cfg_scale”", "outside 0…10" },
    { "{\"steps\": 0}", UM_GEN_KEY_STEPS, "“steps”", "outside 1…4096" },
    { "{\"steps\": -64}", UM_GEN_KEY_STEPS, "“steps”", "outside 1…4096" },
    { "{\"steps\": 64.5}", UM_GEN_KEY_STEPS, "“steps”", "not a whole number" },
    { "{\"steps\": \"64\"}", UM_GEN_KEY_STEPS, "“steps”", "not a whole number" },
    { "{\"steps\": 9223372036854775807}", UM_GEN_KEY_STEPS, "“steps”", "outside 1…4096" },
    { "{\"max_new_tokens\": 100000}", UM_GEN_KEY_GEN_LENGTH, "“max_new_tokens”", "outside 1…4096" },
    { "{\"gen_length\": 1e18}", UM_GEN_KEY_GEN_LENGTH, "“gen_length”", "not a whole number" },
    { "{\"block_length\": false}", UM_GEN_KEY_BLOCK_LENGTH, "“block_length”", "not a whole number" },
    { "{\"remasking\": \"sometimes\"}", UM_GEN_KEY_REMASKING, "“remasking”", "sometimes" },
    { "{\"remasking\": 1}", UM_GEN_KEY_REMASKING, "“remasking”", "a number" },
    { "{\"do_sample\": \"yes\", \"temperature\": 0.5}", UM_GEN_N_KEYS, "“do_sample”", "a string" },
    /* Whole files: nothing is used, and the warning says why. */
    { "{\"temperature\": 0.5", UM_GEN_KEY_TEMPERATURE, "generation_config.json", "not used" },
    { "[0.5]", UM_GEN_KEY_TEMPERATURE, "not a JSON object", NULL },
    { "", UM_GEN_KEY_TEMPERATURE, "generation_config.json", "not used" },
    { "{\"temperature\": 0.5, \"temperature\": 0.9}", UM_GEN_KEY_TEMPERATURE, "temperature", "not used" },
    { "{\"temperature\": 1e999}", UM_GEN_KEY_TEMPERATURE, "generation_config.json", "not used" },
    { "{\"temperature\": 0.5, \"k\": \"\xff\xfe\"}", UM_GEN_KEY_TEMPERATURE, "generation_config.json", "not used" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(UmGenRecommendation) rec = from_json (cases[i].json);
      g_autofree char *shown = g_strescape (cases[i].json, NULL);
      g_test_message ("case %u: %s", i, shown);
      if (cases[i].key < UM_GEN_N_KEYS)
        g_assert_false (um_gen_layer_has (&rec->layer, cases[i].key));
      assert_warned (rec, cases[i].needle, cases[i].needle2);
    }
  /* do_sample of the wrong type is ignored, the temperature still read. */
  {
    g_autoptr(UmGenRecommendation) rec = from_json ("{\"do_sample\": \"yes\", \"temperature\": 0.5}");
    g_assert_true (um_gen_layer_has (&rec->layer, UM_GEN_KEY_TEMPERATURE));
    g_assert_cmpfloat (rec->layer.params.temperature, ==, 0.5);
  }
  /* A bad key leaves the good ones. */
  {
    g_autoptr(UmGenRecommendation) rec = from_json ("{\"steps\": \"many\", \"temperature\": 0.25, \"block_length\": 8}");
    g_assert_cmpuint (rec->layer.set, ==, UM_GEN_KEY_BIT (UM_GEN_KEY_TEMPERATURE) | UM_GEN_KEY_BIT (UM_GEN_KEY_BLOCK_LENGTH));
    g_assert_cmpuint (rec->warnings->len, ==, 1);
  }
  /* Nesting deeper than the JSON entry point allows: refused before
   * json-glib recurses into it. */
  {
    g_autoptr(GString) deep = g_string_new ("{\"temperature\": 0.5, \"x\": ");
    g_autoptr(UmGenRecommendation) rec = NULL;
    for (int i = 0; i < 100000; i++)
      g_string_append_c (deep, '[');
    rec = from_json (deep->str);
    g_assert_cmpuint (rec->layer.set, ==, 0);
    assert_warned (rec, "not used", NULL);
  }
  /* Thousands of unknown keys: a bounded list of notes. */
  {
    g_autoptr(GString) many = g_string_new ("{\"temperature\": 0.5");
    g_autoptr(UmGenRecommendation) rec = NULL;
    for (int i = 0; i < 5000; i++)
      g_string_append_printf (many, ", \"k%d\": %d", i, i);
    g_string_append_c (many, '}');
    rec = from_json (many->str);
    g_assert_true (um_gen_layer_has (&rec->layer, UM_GEN_KEY_TEMPERATURE));
    g_assert_cmpuint (rec->not_applied->len, <=, 33);
  }
}

static void
test_json_do_sample (void)
{
  /* transformers: do_sample false is greedy whatever the temperature. */
  {
    g_autoptr(UmGenRecommendation) rec = from_json ("{\"do_sample\": false, \"temperature\": 0.6, \"top_p\": 0.9}");
    const UmGenNote *n = find_note (rec, "temperature");
    g_assert_true (um_gen_layer_has (&rec->layer, UM_GEN_KEY_TEMPERATURE));
    g_assert_cmpfloat (rec->layer.params.temperature, ==, 0.0);
    g_assert_nonnull (n);
    g_assert_cmpstr (n->value, ==, "0.6");
    g_assert_nonnull (strstr (n->reason, "do_sample"));
  }
  /* ... and true without a temperature samples at transformers' 1.0. */
  {
    g_autoptr(UmGenRecommendation) rec = from_json ("{\"do_sample\": true}");
    g_assert_true (um_gen_layer_has (&rec->layer, UM_GEN_KEY_TEMPERATURE));
    g_assert_cmpfloat (rec->layer.params.temperature, ==, 1.0);
  }
  {
    g_autoptr(UmGenRecommendation) rec = from_json ("{\"do_sample\": true, \"temperature\": 0.3}");
    g_assert_cmpfloat (rec->layer.params.temperature, ==, 0.3);
    g_assert_cmpuint (rec->not_applied->len, ==, 0);
  }
}

static void
test_json_not_applied (void)
{
  /* tiny-dream's generation_config.json (Dream's keys), plus the usual
   * transformers sampling filters. */
  g_autoptr(UmGenRecommendation) rec = from_json (
    "{\"bos_token_id\": 507, \"eos_token_id\": 504, \"pad_token_id\": 504, \"alg\": \"entropy\","
    " \"alg_temp\": null, \"eps\": 0.001, \"mask_token_id\": null, \"steps\": 512, \"temperature\": 0.2,"
    " \"top_k\": 20, \"top_p\": 0.95, \"max_length\": 512, \"repetition_penalty\": 1.1, \"num_beams\": 1}");
  static const char *const expected[] = { "alg", "eps", "top_k", "top_p", "max_length", "repetition_penalty" };

  g_assert_cmpuint (rec->layer.set, ==, UM_GEN_KEY_BIT (UM_GEN_KEY_STEPS) | UM_GEN_KEY_BIT (UM_GEN_KEY_TEMPERATURE));
  g_assert_cmpint (rec->layer.params.steps, ==, 512);
  g_assert_cmpuint (rec->not_applied->len, ==, G_N_ELEMENTS (expected));
  for (guint i = 0; i < G_N_ELEMENTS (expected); i++)
    {
      const UmGenNote *n = find_note (rec, expected[i]);
      g_assert_nonnull (n);
      g_assert_cmpstr (n->reason, !=, "");
    }
  g_assert_cmpstr (find_note (rec, "top_p")->value, ==, "0.95");
  g_assert_cmpstr (find_note (rec, "alg")->value, ==, "\"entropy\"");
  g_assert_cmpuint (rec->warnings->len, ==, 0);
  /* Only notes: the model still recommends something. */
  {
    g_autoptr(UmGenRecommendation) only = from_json ("{\"top_p\": 0.9}");
    g_assert_cmpuint (only->layer.set, ==, 0);
    g_assert_cmpstr (only->origin, ==, "generation_config.json");
  }
}

static void
test_json_aliases (void)
{
  g_autoptr(UmGenRecommendation) rec = from_json (
    "{\"gen_length\": 32, \"max_new_tokens\": 64, \"num_diffusion_steps\": 256}");

  g_assert_cmpint (rec->layer.params.gen_length, ==, 32);
  assert_warned (rec, "“max_new_tokens” (64) disagrees with “gen_length” (32)", NULL);
  g_assert_cmpint (rec->layer.params.steps, ==, 256);
  /* A bad first spelling leaves the second. */
  {
    g_autoptr(UmGenRecommendation) r2 = from_json ("{\"gen_length\": \"x\", \"max_new_tokens\": 48}");
    g_assert_cmpint (r2->layer.params.gen_length, ==, 48);
  }
}

/* ---- GGUF ---- */

static void
write_gguf (const char *path, void (*fill) (UmGgufWriter *w))
{
  g_autoptr(UmGgufWriter) w = um_gguf_writer_new ();
  g_autoptr(GError) error = NULL;
  float x = 1.0f;
  guint64 shape[1] = { 1 }, bytes;

  um_gguf_writer_set_string (w, "general.architecture", "llada");
  fill (w);
  g_assert_true (um_gguf_writer_add_tensor_info (w, "x", UM_DTYPE_F32, 1, shape, &bytes, &error));
  g_assert_true (um_gguf_writer_begin (w, path, &error));
  g_assert_true (um_gguf_writer_write_tensor_data (w, &x, sizeof x, &error));
  g_assert_true (um_gguf_writer_finish (w, &error));
  g_assert_no_error (error);
}

static void
fill_good (UmGgufWriter *w)
{
  um_gguf_writer_set_f32 (w, "general.sampling.temp", 0.7f);
  um_gguf_writer_set_i32 (w, "general.sampling.top_k", 40);
  um_gguf_writer_set_f32 (w, "general.sampling.top_p", 0.95f);
  um_gguf_writer_set_f32 (w, "general.sampling.min_p", 0.05f);
  um_gguf_writer_set_u32 (w, "unmask.generation.steps", 64);
  um_gguf_writer_set_u32 (w, "unmask.generation.block_length", 16);
  um_gguf_writer_set_f32 (w, "unmask.generation.cfg_scale", 0.5f);
  um_gguf_writer_set_string (w, "unmask.generation.remasking", "random");
}

static void
fill_hostile (UmGgufWriter *w)
{
  um_gguf_writer_set_f32 (w, "general.sampling.temp", -1.0f);
  um_gguf_writer_set_string (w, "unmask.generation.gen_length", "a lot");
  um_gguf_writer_set_i64 (w, "unmask.generation.steps", G_MAXINT64);
  um_gguf_writer_set_u32 (w, "unmask.generation.remasking", 1);
  um_gguf_writer_set_f64 (w, "unmask.generation.cfg_scale", NAN);
  um_gguf_writer_set_u32 (w, "unmask.generation.block_length", 8);
}

static void
test_gguf (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *good = g_build_filename (dir, "good.gguf", NULL);
  g_autofree char *bad = g_build_filename (dir, "bad.gguf", NULL);

  write_gguf (good, fill_good);
  write_gguf (bad, fill_hostile);
  {
    g_autoptr(UmGenRecommendation) rec = um_gen_recommendation_load (good);
    g_assert_cmpstr (rec->origin, ==, "GGUF metadata");
    /* Stored as float32: read as the 0.7 that was meant. */
    g_assert_cmpfloat (rec->layer.params.temperature, ==, 0.7);
    g_assert_cmpfloat (rec->layer.params.cfg_scale, ==, 0.5);
    g_assert_cmpint (rec->layer.params.steps, ==, 64);
    g_assert_cmpint (rec->layer.params.block_length, ==, 16);
    g_assert_cmpint (rec->layer.params.remasking, ==, UM_REMASK_RANDOM);
    g_assert_false (um_gen_layer_has (&rec->layer, UM_GEN_KEY_GEN_LENGTH));
    g_assert_nonnull (find_note (rec, "general.sampling.top_k"));
    g_assert_cmpstr (find_note (rec, "general.sampling.top_p")->value, ==, "0.95");
    g_assert_nonnull (find_note (rec, "general.sampling.min_p"));
    g_assert_cmpuint (rec->warnings->len, ==, 0);
  }
  {
    g_autoptr(UmGenRecommendation) rec = um_gen_recommendation_load (bad);
    g_assert_cmpuint (rec->layer.set, ==, UM_GEN_KEY_BIT (UM_GEN_KEY_BLOCK_LENGTH));
    assert_warned (rec, "general.sampling.temp", "outside");
    assert_warned (rec, "unmask.generation.gen_length", NULL);
    assert_warned (rec, "unmask.generation.steps", NULL);
    assert_warned (rec, "unmask.generation.remasking", NULL);
    assert_warned (rec, "unmask.generation.cfg_scale", NULL);
  }
  /* Not a GGUF, not there: a warning each, no recommendation. */
  {
    g_autofree char *junk = g_build_filename (dir, "junk.gguf", NULL);
    g_autoptr(UmGenRecommendation) r1 = NULL, r2 = NULL;
    um_test_write_file (junk, "GGUF\x03", 5);
    r1 = um_gen_recommendation_load (junk);
    r2 = um_gen_recommendation_load ("/nonexistent/model.gguf");
    g_assert_cmpuint (r1->layer.set | r2->layer.set, ==, 0);
    g_assert_cmpuint (r1->warnings->len, ==, 1);
    g_assert_cmpuint (r2->warnings->len, ==, 1);
  }
  um_test_rmtree (dir);
}

/* A folder's generation_config.json, as the engine and unmask-cli quantize read it. */
static char *
model_with_config (const char *json)
{
  g_autofree char *src = um_test_data_path ("tiny-llada");
  char *dir = um_test_mkdtemp ();
  g_autofree char *path = g_build_filename (dir, "generation_config.json", NULL);

  um_test_copy_dir (src, dir);
  um_test_write_file (path, json, -1);
  return dir;
}

static void
test_folder_engine_and_quantize (void)
{
  g_autofree char *dir = model_with_config ("{\"bos_token_id\": 506, \"eos_token_id\": 507, \"temperature\": 0.4,"
                                            " \"steps\": 64, \"top_p\": 0.9}");
  g_autofree char *gguf = g_build_filename (dir, "out.gguf", NULL);
  g_autoptr(UmGenRecommendation) folder = um_gen_recommendation_load (dir);
  g_autoptr(GError) error = NULL;

  g_assert_cmpfloat (folder->layer.params.temperature, ==, 0.4);
  g_assert_cmpint (folder->layer.params.steps, ==, 64);
  /* The engine carries it. */
  {
    g_autoptr(UmEngine) engine = um_test_load_engine (dir, TRUE);
    const UmGenRecommendation *rec = um_engine_get_recommendation (engine);
    g_assert_cmpuint (rec->layer.set, ==, folder->layer.set);
    g_assert_cmpfloat (rec->layer.params.temperature, ==, 0.4);
    g_assert_nonnull (find_note (rec, "top_p"));
  }
  /* A GGUF written from the folder carries it too. */
  {
    g_autoptr(UmModel) model = um_model_load (dir, NULL, &error);
    g_autoptr(UmGenRecommendation) rec = NULL;
    g_assert_no_error (error);
    g_assert_true (um_quantize_model (model, "Q8_0", gguf, NULL, NULL, NULL, &error));
    g_assert_no_error (error);
    rec = um_gen_recommendation_load (gguf);
    g_assert_cmpuint (rec->layer.set, ==, folder->layer.set);
    g_assert_cmpfloat (rec->layer.params.temperature, ==, 0.4);
    g_assert_cmpint (rec->layer.params.steps, ==, 64);
    g_assert_cmpstr (rec->origin, ==, "GGUF metadata");
  }
  /* No file: nothing, and nothing to warn about. */
  {
    g_autofree char *file = g_build_filename (dir, "generation_config.json", NULL);
    g_autoptr(UmGenRecommendation) none = NULL;
    g_assert_cmpint (g_unlink (file), ==, 0);
    none = um_gen_recommendation_load (dir);
    g_assert_cmpuint (none->layer.set, ==, 0);
    g_assert_cmpuint (none->warnings->len, ==, 0);
  }
  um_test_rmtree (dir);
}

/* ---- the rule ---- */

static void
layer_with (UmGenLayer *l, int gen, int steps, int block, double t, double cfg, UmRemasking r)
{
  UmGenParams p;

  um_gen_layer_init (l);
  um_gen_params_init (&p);
  p.gen_length = gen;
  p.steps = steps;
  p.block_length = block;
  p.temperature = t;
  p.cfg_scale = cfg;
  p.remasking = r;
  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    um_gen_layer_take (l, (UmGenKey) k, &p);
}

static void
test_precedence (void)
{
  UmGenLayer user, model, profile;
  UmGenParams base, builtin;
  UmGenResolved r;

  layer_with (&user, 16, 16, 16, 0.1, 1.0, UM_REMASK_RANDOM);
  layer_with (&model, 32, 32, 32, 0.7, 2.0, UM_REMASK_LOW_CONFIDENCE);
  layer_with (&profile, 64, 64, 8, 0.9, 3.0, UM_REMASK_RANDOM);
  um_gen_params_init (&builtin);
  um_gen_params_init (&base);
  base.seed = 42;
  base.threshold = 0.9;
  base.temperature = 4.0;    /* a key: base's value never counts */

  /* Key by key, each source wins where every source above it is silent. */
  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    {
      const UmGenLayer *layers[] = { &user, &model, &profile };
      const UmGenSource want[] = { UM_GEN_SOURCE_USER, UM_GEN_SOURCE_MODEL, UM_GEN_SOURCE_PROFILE,
                                   UM_GEN_SOURCE_BUILTIN };
      for (guint first = 0; first <= 3; first++)
        {
          /* Layers above @first do not set this key. */
          UmGenLayer l[3];
          for (guint i = 0; i < 3; i++)
            {
              l[i] = *layers[i];
              if (i < first)
                l[i].set &= ~UM_GEN_KEY_BIT (k);
            }
          um_gen_resolve (&base, &l[0], &l[1], &l[2], &r);
          g_assert_cmpint (r.source[k], ==, want[first]);
          g_assert_true (um_gen_params_equal_at (&r.params, first < 3 ? &layers[first]->params : &builtin,
                                                 (UmGenKey) k));
          g_assert_cmpuint (r.params.seed, ==, 42);
          g_assert_cmpfloat (r.params.threshold, ==, 0.9);
        }
    }
  /* NULL layers are silent ones. */
  um_gen_resolve (NULL, NULL, &model, NULL, &r);
  g_assert_cmpint (r.source[UM_GEN_KEY_TEMPERATURE], ==, UM_GEN_SOURCE_MODEL);
  g_assert_cmpfloat (r.params.temperature, ==, 0.7);
  um_gen_resolve (NULL, NULL, NULL, NULL, &r);
  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    g_assert_cmpint (r.source[k], ==, UM_GEN_SOURCE_BUILTIN);
  g_assert_cmpfloat (r.params.temperature, ==, 0.0);
}

static void
test_profile_layer (void)
{
  g_autoptr(UmProfile) p = um_profile_new_default ();
  UmGenLayer l;

  /* Never written: the built-in defaults are the standard mode's. */
  um_profile_gen_layer (p, NULL, &l);
  g_assert_cmpuint (l.set, ==, 0);

  um_profile_set_mode (p, UM_MEM_EXTREME_MODERATE);
  p->written_by = UM_PROFILE_BY_OPTIMIZE;
  um_profile_gen_layer (p, "some-model", &l);
  g_assert_cmpuint (l.set, ==, UM_GEN_KEY_BIT (UM_GEN_KEY_GEN_LENGTH) | UM_GEN_KEY_BIT (UM_GEN_KEY_STEPS)
                               | UM_GEN_KEY_BIT (UM_GEN_KEY_BLOCK_LENGTH));
  g_assert_cmpint (l.params.gen_length, ==, p->default_gen_length);
  g_assert_cmpint (l.params.steps, ==, p->default_steps);
  g_assert_cmpint (l.params.block_length, ==, p->default_block_length);

  /* A model kept in another mode: that mode's defaults are not these. */
  {
    UmProfileOverride *o = g_new0 (UmProfileOverride, 1);
    o->model_id = g_strdup ("other-model");
    um_mem_options_init (&o->mem, UM_MEM_STANDARD);
    g_ptr_array_add (p->overrides, o);
  }
  um_profile_gen_layer (p, "other-model", &l);
  g_assert_cmpuint (l.set, ==, 0);
}

static void
test_validate_names_sources (void)
{
  g_autoptr(UmGenRecommendation) rec = from_json ("{\"block_length\": 48}");
  g_autoptr(GError) error = NULL;
  UmGenLayer user;
  UmGenParams p;
  UmGenResolved r;

  um_gen_layer_init (&user);
  um_gen_params_init (&p);
  p.gen_length = 64;
  um_gen_layer_take (&user, UM_GEN_KEY_GEN_LENGTH, &p);
  um_gen_resolve (NULL, &user, &rec->layer, NULL, &r);
  g_assert_false (um_gen_resolved_validate (&r, rec->origin, 0, 4096, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  g_assert_nonnull (strstr (error->message, "block_length 48 is the model's recommendation from generation_config.json"));
  g_assert_nonnull (strstr (error->message, "steps 128 is the built-in default"));
  /* The user's own values need no explanation. */
  g_clear_error (&error);
  p.block_length = 48;
  um_gen_layer_take (&user, UM_GEN_KEY_BLOCK_LENGTH, &p);
  um_gen_layer_take (&user, UM_GEN_KEY_STEPS, &p);
  um_gen_resolve (NULL, &user, &rec->layer, NULL, &r);
  g_assert_false (um_gen_resolved_validate (&r, rec->origin, 0, 4096, &error));
  g_assert_null (strstr (error->message, " is the "));
  /* Other problems are not the schedule's: no sources named. */
  g_clear_error (&error);
  um_gen_resolve (NULL, NULL, NULL, NULL, &r);
  r.params.temperature = -1.0;
  g_assert_false (um_gen_resolved_validate (&r, NULL, 0, 4096, &error));
  g_assert_nonnull (strstr (error->message, "temperature"));
  g_assert_null (strstr (error->message, " is the "));
  /* And a valid resolution passes. */
  g_clear_error (&error);
  um_gen_resolve (NULL, NULL, NULL, NULL, &r);
  g_assert_true (um_gen_resolved_validate (&r, NULL, 10, 4096, &error));
  g_assert_no_error (error);
}

/* ---- the families ---- */

/* The keys set in @rec's layer. */
static guint32
bits (UmGenKey a, UmGenKey b, UmGenKey c, UmGenKey d, UmGenKey e)
{
  UmGenKey keys[] = { a, b, c, d, e };
  guint32 set = 0;

  for (guint i = 0; i < G_N_ELEMENTS (keys); i++)
    if (keys[i] < UM_GEN_N_KEYS)
      set |= UM_GEN_KEY_BIT (keys[i]);
  return set;
}

static void
test_family_json (void)
{
  /* tiny-dream's file, as Dream's own: DreamGenerationConfig's class
   * defaults, no recommendation. */
  {
    g_autoptr(UmGenRecommendation) rec = um_gen_recommendation_from_json_for (UM_ARCH_DREAM,
      "{\"bos_token_id\": 507, \"eos_token_id\": 504, \"pad_token_id\": 504, \"alg\": \"origin\","
      " \"alg_temp\": null, \"eps\": 0.001, \"mask_token_id\": null, \"steps\": 512, \"temperature\": 0.0,"
      " \"top_k\": null, \"top_p\": null}", -1, NULL);
    g_assert_cmpint (rec->arch, ==, UM_ARCH_DREAM);
    g_assert_cmpuint (rec->layer.set, ==, 0);
    for (guint i = 0; i < 4; i++)
      {
        const char *key = (const char *[]) { "alg", "steps", "eps", "temperature" }[i];
        g_assert_nonnull (find_note (rec, key));
        g_assert_nonnull (strstr (find_note (rec, key)->reason, "class default"));
      }
  }
  /* A Dream file that says something: Dream's keys apply, LLaDA's do not. */
  {
    g_autoptr(UmGenRecommendation) rec = um_gen_recommendation_from_json_for (UM_ARCH_DREAM,
      "{\"alg\": \"maskgit_plus\", \"steps\": 512, \"eps\": 0.01, \"temperature\": 0.2, \"top_p\": 0.95,"
      " \"top_k\": 20, \"alg_temp\": 0.1, \"block_length\": 32, \"remasking\": \"random\", \"do_sample\": true,"
      " \"greedy\": true}", -1, NULL);
    g_assert_cmpuint (rec->layer.set, ==,
                      bits (UM_GEN_KEY_ALG, UM_GEN_KEY_STEPS, UM_GEN_KEY_EPS, UM_GEN_KEY_TEMPERATURE, UM_GEN_KEY_TOP_P)
                      | bits (UM_GEN_KEY_TOP_K, UM_GEN_KEY_ALG_TEMP, UM_GEN_N_KEYS, UM_GEN_N_KEYS, UM_GEN_N_KEYS));
    g_assert_cmpint (rec->layer.params.alg, ==, UM_ALG_MASKGIT_PLUS);
    /* Written as doubles in the file: exact. */
    g_assert_cmpfloat (rec->layer.params.eps, ==, 0.01);
    g_assert_cmpfloat (rec->layer.params.top_p, ==, 0.95);
    g_assert_cmpfloat (rec->layer.params.alg_temp, ==, 0.1);
    g_assert_cmpint (rec->layer.params.top_k, ==, 20);
    g_assert_nonnull (find_note (rec, "block_length"));
    g_assert_nonnull (find_note (rec, "remasking"));
    g_assert_nonnull (find_note (rec, "do_sample"));
    g_assert_nonnull (find_note (rec, "greedy"));
    g_assert_cmpuint (rec->warnings->len, ==, 0);
  }
  /* Bad values are warnings; top_p 1 and top_k 0 say nothing. */
  {
    g_autoptr(UmGenRecommendation) rec = um_gen_recommendation_from_json_for (UM_ARCH_DREAM,
      "{\"alg\": \"confidence_threshold\", \"eps\": 1.0, \"top_p\": 1.0, \"top_k\": 0, \"alg_temp\": -1}",
      -1, NULL);
    g_assert_cmpuint (rec->layer.set, ==, 0);
    g_assert_cmpuint (rec->not_applied->len, ==, 0);
    assert_warned (rec, "“alg”", NULL);
    assert_warned (rec, "“eps”", NULL);
    assert_warned (rec, "“alg_temp”", NULL);
  }
  /* RND1: do_sample false is its greedy switch; the temperature stays. */
  {
    g_autoptr(UmGenRecommendation) rec = um_gen_recommendation_from_json_for (UM_ARCH_RND1,
      "{\"do_sample\": false, \"temperature\": 0.5, \"num_diffusion_steps\": 64, \"alg\": \"entropy\"}", -1, NULL);
    g_assert_cmpuint (rec->layer.set, ==,
                      bits (UM_GEN_KEY_GREEDY, UM_GEN_KEY_TEMPERATURE, UM_GEN_KEY_STEPS, UM_GEN_N_KEYS, UM_GEN_N_KEYS));
    g_assert_true (rec->layer.params.greedy);
    g_assert_cmpfloat (rec->layer.params.temperature, ==, 0.5);
    g_assert_nonnull (find_note (rec, "alg"));
  }
  {
    g_autoptr(UmGenRecommendation) rec = um_gen_recommendation_from_json_for (UM_ARCH_RND1,
      "{\"do_sample\": false, \"greedy\": false}", -1, NULL);
    g_assert_cmpuint (rec->layer.set, ==, UM_GEN_KEY_BIT (UM_GEN_KEY_GREEDY));
    g_assert_false (rec->layer.params.greedy);
  }
  /* LLaDA-MoE is LLaDA's schedule: the others' keys are notes. */
  {
    g_autoptr(UmGenRecommendation) rec = um_gen_recommendation_from_json_for (UM_ARCH_LLADA_MOE,
      "{\"greedy\": true, \"top_k\": 5, \"block_length\": 32}", -1, NULL);
    g_assert_cmpuint (rec->layer.set, ==, UM_GEN_KEY_BIT (UM_GEN_KEY_BLOCK_LENGTH));
    g_assert_nonnull (find_note (rec, "greedy"));
    g_assert_nonnull (find_note (rec, "top_k"));
  }
}

static void
test_family_resolve (void)
{
  UmGenLayer user;
  UmGenParams p;
  UmGenResolved r;
  g_autoptr(GError) error = NULL;

  um_gen_layer_init (&user);
  um_gen_params_init (&p);
  p.gen_length = 40;
  um_gen_layer_take (&user, UM_GEN_KEY_GEN_LENGTH, &p);

  /* Dream: steps follow the length; README's temperature and rule. The
   * defaults are exact constants: compared with ==. */
  um_gen_resolve_for (UM_ARCH_DREAM, NULL, &user, NULL, NULL, &r);
  g_assert_cmpint (r.arch, ==, UM_ARCH_DREAM);
  g_assert_cmpint (r.params.steps, ==, 40);
  g_assert_cmpint (r.source[UM_GEN_KEY_STEPS], ==, UM_GEN_SOURCE_BUILTIN);
  g_assert_cmpfloat (r.params.temperature, ==, 0.2);
  g_assert_cmpint (r.params.alg, ==, UM_ALG_ENTROPY);
  g_assert_cmpfloat (r.params.eps, ==, 1e-3);
  g_assert_false (r.params.top_p > 0.0 && r.params.top_p < 1.0);
  g_assert_cmpint (r.params.top_k, ==, 0);
  g_assert_cmpfloat (r.params.alg_temp, ==, 0.0);
  /* 40 is no multiple of the block length: no matter without blocks. */
  g_assert_true (um_gen_resolved_validate (&r, NULL, 10, 4096, &error));
  g_assert_no_error (error);

  /* Steps anyone set stay. */
  {
    UmGenLayer model;
    um_gen_layer_init (&model);
    p.steps = 20;
    um_gen_layer_take (&model, UM_GEN_KEY_STEPS, &p);
    um_gen_resolve_for (UM_ARCH_RND1, NULL, &user, &model, NULL, &r);
    g_assert_cmpint (r.params.steps, ==, 20);
    g_assert_cmpint (r.source[UM_GEN_KEY_STEPS], ==, UM_GEN_SOURCE_MODEL);
  }
  um_gen_resolve_for (UM_ARCH_RND1, NULL, &user, NULL, NULL, &r);
  g_assert_cmpint (r.params.steps, ==, 40);
  g_assert_cmpfloat (r.params.temperature, ==, 0.1);
  g_assert_false (r.params.greedy);
  g_assert_true (um_gen_resolved_validate (&r, NULL, 10, 4096, &error));

  /* LLaDA-MoE: LLaDA's defaults, and its block rules. */
  um_gen_resolve_for (UM_ARCH_LLADA_MOE, NULL, &user, NULL, NULL, &r);
  g_assert_cmpint (r.params.steps, ==, 128);
  g_assert_false (um_gen_resolved_validate (&r, NULL, 10, 4096, &error));
  g_assert_nonnull (strstr (error->message, "block_length 32 is the built-in default"));

  /* Which keys each family has. */
  g_assert_true (um_gen_key_applies (UM_GEN_KEY_ALG, UM_ARCH_DREAM));
  g_assert_false (um_gen_key_applies (UM_GEN_KEY_ALG, UM_ARCH_RND1));
  g_assert_true (um_gen_key_applies (UM_GEN_KEY_GREEDY, UM_ARCH_RND1));
  g_assert_true (um_gen_key_applies (UM_GEN_KEY_TOP_P, UM_ARCH_RND1));
  g_assert_false (um_gen_key_applies (UM_GEN_KEY_TOP_P, UM_ARCH_LLADA_MOE));
  g_assert_true (um_gen_key_applies (UM_GEN_KEY_CFG_SCALE, UM_ARCH_LLADA_MOE));
  g_assert_false (um_gen_key_applies (UM_GEN_KEY_BLOCK_LENGTH, UM_ARCH_DREAM));
  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    {
      UmGenKey back;
      g_assert_true (um_gen_key_from_name (um_gen_key_name ((UmGenKey) k), &back));
      g_assert_cmpint (back, ==, k);
    }
}

static void
fill_dream (UmGgufWriter *w)
{
  um_gguf_writer_set_f32 (w, "general.sampling.temp", 0.2f);
  um_gguf_writer_set_f32 (w, "general.sampling.top_p", 0.95f);
  um_gguf_writer_set_i32 (w, "general.sampling.top_k", 40);
  um_gguf_writer_set_string (w, "unmask.generation.alg", "topk_margin");
  um_gguf_writer_set_f32 (w, "unmask.generation.eps", 0.01f);
  um_gguf_writer_set_u32 (w, "unmask.generation.block_length", 16);
  um_gguf_writer_set_bool (w, "unmask.generation.greedy", TRUE);
}

static void
test_family_gguf (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *path = g_build_filename (dir, "dream.gguf", NULL);
  g_autofree char *copy = g_build_filename (dir, "copy.gguf", NULL);
  g_autoptr(UmGenRecommendation) rec = NULL;
  g_autoptr(UmGenRecommendation) back = NULL;
  g_autoptr(GError) error = NULL;

  {
    g_autoptr(UmGgufWriter) w = um_gguf_writer_new ();
    float x = 1.0f;
    guint64 shape[1] = { 1 }, bytes;
    um_gguf_writer_set_string (w, "general.architecture", "dream");
    fill_dream (w);
    g_assert_true (um_gguf_writer_add_tensor_info (w, "x", UM_DTYPE_F32, 1, shape, &bytes, &error));
    g_assert_true (um_gguf_writer_begin (w, path, &error));
    g_assert_true (um_gguf_writer_write_tensor_data (w, &x, sizeof x, &error));
    g_assert_true (um_gguf_writer_finish (w, &error));
  }
  rec = um_gen_recommendation_load (path);
  g_assert_cmpint (rec->arch, ==, UM_ARCH_DREAM);
  g_assert_cmpuint (rec->layer.set, ==,
                    bits (UM_GEN_KEY_TEMPERATURE, UM_GEN_KEY_TOP_P, UM_GEN_KEY_TOP_K, UM_GEN_KEY_ALG, UM_GEN_KEY_EPS));
  /* float32 in the file, read back as the decimal meant. */
  g_assert_cmpfloat (rec->layer.params.top_p, ==, 0.95);
  g_assert_cmpfloat (rec->layer.params.eps, ==, 0.01);
  g_assert_cmpint (rec->layer.params.top_k, ==, 40);
  g_assert_cmpint (rec->layer.params.alg, ==, UM_ALG_TOPK_MARGIN);
  g_assert_nonnull (find_note (rec, "unmask.generation.block_length"));
  g_assert_nonnull (find_note (rec, "unmask.generation.greedy"));

  /* What a writer carries over reads back the same. */
  {
    g_autoptr(UmGgufWriter) w = um_gguf_writer_new ();
    float x = 1.0f;
    guint64 shape[1] = { 1 }, bytes;
    um_gguf_writer_set_string (w, "general.architecture", "dream");
    um_gen_recommendation_write_gguf (rec, w);
    g_assert_true (um_gguf_writer_add_tensor_info (w, "x", UM_DTYPE_F32, 1, shape, &bytes, &error));
    g_assert_true (um_gguf_writer_begin (w, copy, &error));
    g_assert_true (um_gguf_writer_write_tensor_data (w, &x, sizeof x, &error));
    g_assert_true (um_gguf_writer_finish (w, &error));
  }
  back = um_gen_recommendation_load (copy);
  g_assert_cmpuint (back->layer.set, ==, rec->layer.set);
  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    if (um_gen_layer_has (&rec->layer, (UmGenKey) k))
      g_assert_true (um_gen_params_equal_at (&back->layer.params, &rec->layer.params, (UmGenKey) k));
  um_test_rmtree (dir);
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
run_cli (Run *r, const char *config_dir, const char *const *args)
{
  g_autoptr(GPtrArray) argv = g_ptr_array_new ();
  g_auto(GStrv) env = g_get_environ ();
  g_autoptr(GError) error = NULL;
  int wait_status = 0;

  memset (r, 0, sizeof *r);
  g_ptr_array_add (argv, (char *) g_getenv ("UM_CLI"));
  for (guint i = 0; args[i] != NULL; i++)
    g_ptr_array_add (argv, (char *) args[i]);
  g_ptr_array_add (argv, NULL);
  env = g_environ_setenv (env, "UNMASK_CONFIG_DIR", config_dir, TRUE);
  env = g_environ_setenv (env, "UNMASK_DEVICE", "cpu", TRUE);
  g_spawn_sync (NULL, (char **) argv->pdata, env, G_SPAWN_DEFAULT, NULL, NULL, &r->out, &r->err, &wait_status,
                &error);
  g_assert_no_error (error);
  r->status = g_spawn_check_wait_status (wait_status, NULL) ? 0 : WEXITSTATUS (wait_status);
  g_test_message ("unmask-cli %s → %d\nstderr: %s", args[0], r->status, r->err);
}

/* defaults.KEY.value and .source of a generate --json answer. */
static void
assert_default (JsonObject *root, const char *key, double value, const char *source)
{
  JsonObject *d = json_object_get_object_member (json_object_get_object_member (root, "defaults"), key);
  JsonNode *v = json_object_get_member (d, "value");

  g_assert_nonnull (d);
  if (json_node_get_value_type (v) == G_TYPE_STRING)
    g_assert_cmpstr (json_node_get_string (v), ==, value == 0 ? "low_confidence" : "random");
  else
    g_assert_cmpfloat (json_node_get_double (v), ==, value);
  g_assert_cmpstr (json_object_get_string_member (d, "source"), ==, source);
}

static void
test_cli (void)
{
  g_autofree char *dir = model_with_config ("{\"bos_token_id\": 506, \"eos_token_id\": 507, \"temperature\": 0.5,"
                                            " \"steps\": 16, \"top_p\": 0.9, \"cfg_scale\": \"x\"}");
  g_autofree char *config = um_test_mkdtemp ();

  if (g_getenv ("UM_CLI") == NULL)
    {
      g_test_skip ("UM_CLI is not set");
      return;
    }
  /* The model's values where the command line is silent, with their source. */
  {
    const char *args[] = { "generate", "-m", dir, "--prompt", "Hello", "--gen-length", "16", "--block-length", "8",
                           "--json", NULL };
    g_auto(Run) r;
    g_autoptr(JsonParser) parser = json_parser_new ();
    JsonObject *root;
    JsonArray *notes;

    run_cli (&r, config, args);
    g_assert_cmpint (r.status, ==, 0);
    g_assert_true (json_parser_load_from_data (parser, r.out, -1, NULL));
    root = json_node_get_object (json_parser_get_root (parser));
    assert_default (root, "temperature", 0.5, "generation_config.json");
    assert_default (root, "steps", 16, "generation_config.json");
    assert_default (root, "gen_length", 16, "user");
    assert_default (root, "block_length", 8, "user");
    assert_default (root, "cfg_scale", 0, "built-in");
    assert_default (root, "remasking", 0, "built-in");
    /* The run followed them: 16 steps. */
    g_assert_cmpint (json_object_get_int_member (root, "steps"), ==, 16);
    notes = json_object_get_array_member (root, "not_applied");
    g_assert_cmpuint (json_array_get_length (notes), ==, 1);
    g_assert_cmpstr (json_object_get_string_member (json_array_get_object_element (notes, 0), "key"), ==, "top_p");
    g_assert_cmpuint (json_array_get_length (json_object_get_array_member (root, "defaults_warnings")), ==, 1);
    /* The ignored value is said on stderr too. */
    g_assert_nonnull (strstr (r.err, "“cfg_scale”"));
  }
  /* --verbose, and the user's value over the model's. */
  {
    const char *args[] = { "generate", "-m", dir, "--prompt", "Hello", "--gen-length", "16", "--block-length", "8",
                           "--temperature", "0", "--verbose", "--no-live", NULL };
    g_auto(Run) r;

    run_cli (&r, config, args);
    g_assert_cmpint (r.status, ==, 0);
    g_assert_nonnull (strstr (r.err, "temperature   0               given on the command line (the model recommends 0.5)"));
    g_assert_nonnull (strstr (r.err, "steps         16              recommended by the model (generation_config.json)"));
    g_assert_nonnull (strstr (r.err, "cfg_scale     0               built-in default"));
    g_assert_nonnull (strstr (r.err, "not applied: top_p 0.9"));
  }
  /* A profile written for an extreme mode: its defaults where neither the
   * user nor the model says (gen_length), not over the model (steps). */
  {
    g_autoptr(UmProfile) p = um_profile_new_default ();
    g_autoptr(GError) error = NULL;
    const char *args[] = { "generate", "-m", dir, "--prompt", "Hello", "--json", NULL };
    g_auto(Run) r;
    g_autoptr(JsonParser) parser = json_parser_new ();
    JsonObject *root;

    um_profile_set_mode (p, UM_MEM_EXTREME_MILD);
    p->written_by = UM_PROFILE_BY_OPTIMIZE;
    g_assert_true (um_profile_save (p, config, &error));
    run_cli (&r, config, args);
    g_assert_cmpint (r.status, ==, 0);
    g_assert_true (json_parser_load_from_data (parser, r.out, -1, NULL));
    root = json_node_get_object (json_parser_get_root (parser));
    assert_default (root, "gen_length", p->default_gen_length, "profile");
    assert_default (root, "block_length", p->default_block_length, "profile");
    assert_default (root, "steps", 16, "generation_config.json");
    assert_default (root, "temperature", 0.5, "generation_config.json");
  }
  /* A schedule the model's value breaks: the error says where it came from. */
  {
    g_autofree char *bad = model_with_config ("{\"block_length\": 48}");
    g_autofree char *empty = um_test_mkdtemp ();
    const char *args[] = { "generate", "-m", bad, "--prompt", "Hello", "--gen-length", "64", NULL };
    g_auto(Run) r;

    run_cli (&r, empty, args);
    g_assert_cmpint (r.status, ==, 1);
    g_assert_nonnull (strstr (r.err, "block_length 48 is the model's recommendation from generation_config.json"));
    um_test_rmtree (bad);
    um_test_rmtree (empty);
  }
  um_test_rmtree (dir);
  um_test_rmtree (config);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/gen-defaults/json-values", test_json_values);
  g_test_add_func ("/gen-defaults/json-nothing", test_json_nothing);
  g_test_add_func ("/gen-defaults/json-hostile", test_json_hostile);
  g_test_add_func ("/gen-defaults/json-do-sample", test_json_do_sample);
  g_test_add_func ("/gen-defaults/json-not-applied", test_json_not_applied);
  g_test_add_func ("/gen-defaults/json-aliases", test_json_aliases);
  g_test_add_func ("/gen-defaults/gguf", test_gguf);
  g_test_add_func ("/gen-defaults/folder-engine-quantize", test_folder_engine_and_quantize);
  g_test_add_func ("/gen-defaults/precedence", test_precedence);
  g_test_add_func ("/gen-defaults/profile-layer", test_profile_layer);
  g_test_add_func ("/gen-defaults/validate-names-sources", test_validate_names_sources);
  g_test_add_func ("/gen-defaults/family-json", test_family_json);
  g_test_add_func ("/gen-defaults/family-resolve", test_family_resolve);
  g_test_add_func ("/gen-defaults/family-gguf", test_family_gguf);
  g_test_add_func ("/gen-defaults/cli", test_cli);
  return g_test_run ();
}

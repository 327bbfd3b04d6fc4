/* test-settings.c — settings.json read at startup: a damaged file (hostile
 * JSON, a member of the wrong type) is moved aside, the defaults are used
 * and the load warning says so; a good one is applied. Each model family
 * keeps its own generation parameters, across a restart. No display needed. */
#include "config.h"

#include <glib/gstdio.h>
#include <string.h>

#include "um-settings.h"
#include "um-test-util.h"

/* The one file in @dir whose name starts with "settings.json.corrupt-". */
static char *
moved_aside (const char *dir)
{
  g_autoptr(GDir) d = g_dir_open (dir, 0, NULL);
  const char *name;
  char *found = NULL;

  g_assert_nonnull (d);
  while ((name = g_dir_read_name (d)) != NULL)
    if (g_str_has_prefix (name, "settings.json.corrupt-"))
      {
        g_assert_null (found);
        found = g_build_filename (dir, name, NULL);
      }
  return found;
}

/* Writes @text as settings.json, loads it and checks the corrupt path:
 * the warning names the problem and the new name, the bytes are kept, the
 * defaults are in use and nothing is written back. */
static void
expect_moved_aside (const char *text, gsize len, const char *needle)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *path = g_build_filename (dir, "settings.json", NULL);
  g_autofree char *aside = NULL;
  g_autofree char *kept = NULL;
  g_autofree char *aside_name = NULL;
  gsize kept_len;
  UmSettings *settings;
  UmGenParams p;
  const char *warning;

  um_test_write_file (path, text, (gssize) len);
  settings = um_settings_new (path);
  warning = um_settings_get_load_warning (settings);
  g_assert_nonnull (warning);
  if (needle != NULL && strstr (warning, needle) == NULL)
    g_error ("warning “%s” does not mention “%s”", warning, needle);
  aside = moved_aside (dir);
  g_assert_nonnull (aside);
  aside_name = g_path_get_basename (aside);
  g_assert_nonnull (strstr (warning, aside_name));
  g_assert_true (g_file_get_contents (aside, &kept, &kept_len, NULL));
  g_assert_cmpmem (kept, kept_len, text, len);
  g_assert_false (g_file_test (path, G_FILE_TEST_EXISTS));
  um_settings_get_params (settings, &p);
  g_assert_cmpint (p.steps, ==, 128);
  g_assert_cmpint (p.gen_length, ==, 128);
  g_assert_null (um_settings_get_recent_models (settings)[0]);
  g_object_unref (settings);
  /* Loading is not a change: the defaults are not written over it. */
  g_assert_false (g_file_test (path, G_FILE_TEST_EXISTS));
  um_test_rmtree (dir);
}

static void
test_hostile_json (void)
{
  g_autoptr(GPtrArray) cases = um_test_hostile_json ();

  for (guint i = 0; i < cases->len; i++)
    {
      const UmTestHostileJson *h = g_ptr_array_index (cases, i);
      g_test_message ("%s", h->name);
      expect_moved_aside (h->text, h->len, h->needle);
    }
}

static void
test_wrong_types (void)
{
  static const struct {
    const char *text, *needle;
  } cases[] = {
    { "{\"steps\": \"64\"}", "“steps” is not an integer" },
    { "{\"steps\": 64.5}", "“steps” is not an integer" },
    { "{\"seed\": true}", "“seed” is not an integer" },
    { "{\"temperature\": \"hot\"}", "“temperature” is not a number" },
    { "{\"chat-template\": 1}", "“chat-template” is not true or false" },
    { "{\"remasking\": 3}", "“remasking” is not a string" },
    { "{\"cache\": {\"a\": 1}}", "“cache” is not a string" },
    { "{\"threshold\": [0.9]}", "“threshold” is not a number" },
    { "{\"recent-models\": \"/models/a\"}", "“recent-models” is not a list of paths" },
    { "{\"recent-models\": [\"/models/a\", 5]}", "“recent-models” is not a list of paths" },
    { "{\"alg\": 2}", "“alg” is not a string" },
    { "{\"top-k\": 0.5}", "“top-k” is not an integer" },
    { "{\"greedy\": \"yes\"}", "“greedy” is not true or false" },
    { "{\"families\": [1]}", "“families” is not an object" },
    { "{\"families\": {\"Dream\": 3}}", "“Dream” is not an object" },
    { "{\"families\": {\"Dream\": {\"eps\": \"small\"}}}", "“eps” is not a number" },
    /* A good member before the bad one is not applied either. */
    { "{\"steps\": 64, \"gen-length\": false}", "“gen-length” is not an integer" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_test_message ("%s", cases[i].text);
      expect_moved_aside (cases[i].text, strlen (cases[i].text), cases[i].needle);
    }
}

/* A good file: applied and left where it is; null and unknown members and
 * values out of range are ignored, as before. */
static void
test_good_file (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *path = g_build_filename (dir, "settings.json", NULL);
  const char *text = "{\"steps\": 64, \"gen-length\": 256, \"temperature\": 1, \"cfg-scale\": 0.5,"
                     " \"seed\": 123456789012345678, \"chat-template\": false, \"remasking\": \"random\","
                     " \"block-length\": 99999, \"threads\": null, \"exact-products\": true,"
                     " \"from-the-future\": [1, {\"a\": 2}],"
                     " \"recent-models\": [\"/models/b\", \"/models/a\"]}";
  g_autoptr(UmSettings) settings = NULL;
  const char * const *recent;
  UmGenParams p;
  gboolean chat_template = TRUE;

  um_test_write_file (path, text, -1);
  settings = um_settings_new (path);
  g_assert_null (um_settings_get_load_warning (settings));
  g_assert_null (moved_aside (dir));
  um_settings_get_params (settings, &p);
  g_assert_cmpint (p.steps, ==, 64);
  g_assert_cmpint (p.gen_length, ==, 256);
  g_assert_cmpint (p.block_length, ==, 32);
  g_assert_cmpfloat (p.temperature, ==, 1.0);
  g_assert_cmpfloat (p.cfg_scale, ==, 0.5);
  g_assert_cmpuint (p.seed, ==, 123456789012345678u);
  g_assert_cmpint (p.remasking, ==, UM_REMASK_RANDOM);
  g_object_get (settings, "chat-template", &chat_template, NULL);
  g_assert_false (chat_template);
  recent = um_settings_get_recent_models (settings);
  g_assert_cmpstr (recent[0], ==, "/models/b");
  g_assert_cmpstr (recent[1], ==, "/models/a");
  g_assert_null (recent[2]);
  g_assert_cmpint (um_settings_get_threads (settings), ==, 0);
  g_assert_true (um_settings_get_exact_products (settings));
  um_test_rmtree (dir);
}

/* A recent path that is not UTF-8 is not written: it would make the whole
 * file unreadable as JSON at the next start. */
static void
test_non_utf8_recent_path (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *path = g_build_filename (dir, "settings.json", NULL);
  g_autoptr(GError) error = NULL;

  {
    g_autoptr(UmSettings) settings = um_settings_new (path);
    um_settings_add_recent_model (settings, "/models/good");
    um_settings_add_recent_model (settings, "/models/\xff\xfe");
    g_object_set (settings, "steps", 32, NULL);
    g_assert_true (um_settings_save (settings, &error));
    g_assert_no_error (error);
  }
  {
    g_autoptr(UmSettings) settings = um_settings_new (path);
    UmGenParams p;
    g_assert_null (um_settings_get_load_warning (settings));
    um_settings_get_params (settings, &p);
    g_assert_cmpint (p.steps, ==, 32);
    g_assert_cmpstr (um_settings_get_recent_models (settings)[0], ==, "/models/good");
    g_assert_null (um_settings_get_recent_models (settings)[1]);
  }
  um_test_rmtree (dir);
}

/* Dream's choices are not LLaDA's: switching families keeps each one's
 * values and which are the user's, through a save and a new start. */
static void
test_families (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *path = g_build_filename (dir, "settings.json", NULL);
  g_autoptr(GError) error = NULL;
  UmGenParams p;

  {
    g_autoptr(UmSettings) settings = um_settings_new (path);
    UmGenResolved r;

    g_assert_cmpstr (um_settings_get_family (settings), ==, "LLaDA");
    g_assert_cmpint (um_settings_get_arch (settings), ==, UM_ARCH_LLADA);
    g_object_set (settings, "steps", 64, "remasking", "random", NULL);
    g_assert_true (um_settings_get_user_set (settings) & UM_GEN_KEY_BIT (UM_GEN_KEY_STEPS));

    /* A family met for the first time starts from the defaults, none the user's. */
    um_settings_set_family (settings, "Dream");
    g_assert_cmpint (um_settings_get_arch (settings), ==, UM_ARCH_DREAM);
    um_settings_get_params (settings, &p);
    g_assert_cmpint (p.steps, ==, 128);
    g_assert_cmpint (p.remasking, ==, UM_REMASK_LOW_CONFIDENCE);
    /* Dream's README temperature, a built-in default (exact: the same literal). */
    g_assert_cmpfloat (p.temperature, ==, 0.2);
    g_assert_cmpint (um_settings_get_source (settings, UM_GEN_KEY_TEMPERATURE), ==, UM_GEN_SOURCE_BUILTIN);
    g_assert_cmpuint (um_settings_get_user_set (settings), ==, 0);
    /* Dream's steps follow the length until the user chooses them. */
    g_object_set (settings, "gen-length", 48, NULL);
    um_settings_get_params (settings, &p);
    g_assert_cmpint (p.steps, ==, 48);
    g_assert_cmpuint (um_settings_get_user_set (settings), ==, UM_GEN_KEY_BIT (UM_GEN_KEY_GEN_LENGTH));
    g_object_set (settings, "steps", 256, "alg", "maskgit_plus", "alg-temp", 0.5, "top-p", 0.9, "top-k", 40,
                  "eps", 0.01, NULL);
    g_assert_true (um_settings_get_user_set (settings) & UM_GEN_KEY_BIT (UM_GEN_KEY_ALG));
    g_object_set (settings, "gen-length", 64, NULL);
    um_settings_get_params (settings, &p);
    g_assert_cmpint (p.steps, ==, 256);

    /* What LLaDA would run with, seen from Dream. */
    um_settings_resolve_with (settings, "LLaDA", NULL, NULL, &r);
    g_assert_cmpint (r.params.steps, ==, 64);
    g_assert_cmpint (r.source[UM_GEN_KEY_STEPS], ==, UM_GEN_SOURCE_USER);

    um_settings_set_family (settings, "RND1");
    g_assert_cmpint (um_settings_get_arch (settings), ==, UM_ARCH_RND1);
    g_object_set (settings, "greedy", TRUE, NULL);

    um_settings_set_family (settings, "LLaDA");
    um_settings_get_params (settings, &p);
    g_assert_cmpint (p.steps, ==, 64);
    g_assert_cmpint (p.remasking, ==, UM_REMASK_RANDOM);
    g_assert_false (p.greedy);
    g_assert_true (um_settings_get_user_set (settings) & UM_GEN_KEY_BIT (UM_GEN_KEY_STEPS));

    um_settings_set_family (settings, "Dream");
    g_assert_true (um_settings_save (settings, &error));
    g_assert_no_error (error);
  }
  {
    g_autoptr(UmSettings) settings = um_settings_new (path);
    UmGenResolved r;

    g_assert_null (um_settings_get_load_warning (settings));
    g_assert_cmpstr (um_settings_get_family (settings), ==, "Dream");
    um_settings_get_params (settings, &p);
    g_assert_cmpint (p.steps, ==, 256);
    g_assert_cmpint (p.alg, ==, UM_ALG_MASKGIT_PLUS);
    /* Exact: json-glib writes a double with 17 significant digits and
     * reads it back correctly rounded, which returns the same double. */
    g_assert_cmpfloat (p.alg_temp, ==, 0.5);
    g_assert_cmpfloat (p.top_p, ==, 0.9);
    g_assert_cmpfloat (p.eps, ==, 0.01);
    g_assert_cmpint (p.top_k, ==, 40);
    g_assert_true (um_settings_get_user_set (settings) & UM_GEN_KEY_BIT (UM_GEN_KEY_STEPS));
    g_assert_true (um_settings_get_user_set (settings) & UM_GEN_KEY_BIT (UM_GEN_KEY_TOP_K));

    um_settings_resolve_with (settings, "RND1", NULL, NULL, &r);
    g_assert_true (r.params.greedy);
    /* A family never seen: the defaults. */
    um_settings_resolve_with (settings, "LLaDA-MoE", NULL, NULL, &r);
    g_assert_cmpint (r.params.steps, ==, 128);
    g_assert_cmpint (r.source[UM_GEN_KEY_STEPS], ==, UM_GEN_SOURCE_BUILTIN);

    um_settings_set_family (settings, "LLaDA");
    um_settings_get_params (settings, &p);
    g_assert_cmpint (p.steps, ==, 64);
    g_assert_cmpint (p.remasking, ==, UM_REMASK_RANDOM);
    /* Dream's option is left out of LLaDA's parameters. */
    g_assert_cmpint (p.alg, ==, UM_ALG_ENTROPY);
    g_assert_cmpfloat (p.top_p, ==, 0.0);
  }
  um_test_rmtree (dir);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/settings/hostile-json", test_hostile_json);
  g_test_add_func ("/settings/wrong-types", test_wrong_types);
  g_test_add_func ("/settings/good-file", test_good_file);
  g_test_add_func ("/settings/non-utf8-recent-path", test_non_utf8_recent_path);
  g_test_add_func ("/settings/families", test_families);
  return g_test_run ();
}

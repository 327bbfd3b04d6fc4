/* unmask-cli optimize, restore and backups, run as a script would ($UM_CLI
 * with UNMASK_CONFIG_DIR pointing at a temporary folder): their --json
 * answers, notices on stderr for damaged files, and plan (as generate and
 * bench) starting from the profile. */
#include <glib/gstdio.h>
#include <string.h>
#include <sys/wait.h>

#include "um-profile.h"
#include "um-test-util.h"

static char *cli_path;
static char *model_path;

typedef struct {
  int         status;
  char       *out;
  char       *err;
  JsonParser *parser;
  JsonObject *root;     /* of --json output, when it parsed */
} Run;

static void
run_clear (Run *r)
{
  g_free (r->out);
  g_free (r->err);
  g_clear_object (&r->parser);
}

G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (Run, run_clear)

/* Runs unmask-cli with @args (NULL-terminated) in @config_dir, with
 * @extra_env ("NAME=VALUE", NULL-terminated; may be NULL) set. */
static void
run_cli_env (Run *r, const char *config_dir, const char *const *args, const char *const *extra_env)
{
  g_autoptr(GPtrArray) argv = g_ptr_array_new ();
  g_auto(GStrv) env = g_get_environ ();
  g_autoptr(GError) error = NULL;
  int wait_status = 0;

  memset (r, 0, sizeof *r);
  g_ptr_array_add (argv, cli_path);
  for (guint i = 0; args[i] != NULL; i++)
    g_ptr_array_add (argv, (char *) args[i]);
  g_ptr_array_add (argv, NULL);
  env = g_environ_setenv (env, "UNMASK_CONFIG_DIR", config_dir, TRUE);
  env = g_environ_setenv (env, "UNMASK_DEVICE", "cpu", TRUE);
  for (guint i = 0; extra_env != NULL && extra_env[i] != NULL; i++)
    {
      g_auto(GStrv) kv = g_strsplit (extra_env[i], "=", 2);
      env = g_environ_setenv (env, kv[0], kv[1], TRUE);
    }
  g_spawn_sync (NULL, (char **) argv->pdata, env, G_SPAWN_DEFAULT, NULL, NULL, &r->out, &r->err, &wait_status,
                &error);
  g_assert_no_error (error);
  r->status = g_spawn_check_wait_status (wait_status, NULL) ? 0 : WEXITSTATUS (wait_status);
  g_test_message ("unmask-cli %s → %d\nstderr: %s", args[0], r->status, r->err);
  r->parser = json_parser_new ();
  if (r->out[0] == '{' && json_parser_load_from_data (r->parser, r->out, -1, NULL))
    r->root = json_node_get_object (json_parser_get_root (r->parser));
}

static void
run_cli (Run *r, const char *config_dir, const char *const *args)
{
  run_cli_env (r, config_dir, args, NULL);
}

/* The standard mode's device peak for the tiny model generating 48 tokens,
 * from a dry run. */
static gint64
standard_peak (const char *dir)
{
  const char *args[] = { "optimize", "--model", model_path, "--gen-length", "48", "--dry-run", "--json", NULL };
  g_auto(Run) r;
  JsonArray *modes;

  run_cli (&r, dir, args);
  g_assert_cmpint (r.status, ==, 0);
  g_assert_nonnull (r.root);
  modes = json_object_get_array_member (r.root, "modes");
  g_assert_cmpstr (json_object_get_string_member (json_array_get_object_element (modes, 0), "mode"), ==,
                   "standard");
  return json_object_get_int_member (json_array_get_object_element (modes, 0), "device_peak_bytes");
}

static void
test_optimize (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *profile_path = g_build_filename (dir, "optimizer.json", NULL);
  g_autofree char *budget = NULL;
  g_autofree char *chosen = NULL;
  g_autofree char *before_dry = NULL, *after_dry = NULL;
  g_autoptr(GError) error = NULL;
  JsonObject *hw, *target, *profile;
  JsonArray *modes;
  gint64 peak;

  /* A dry run writes nothing. */
  peak = standard_peak (dir);
  g_assert_false (g_file_test (profile_path, G_FILE_TEST_EXISTS));
  g_assert_cmpint (um_test_count_prefix (dir, "backups"), ==, 0);

  /* A budget standard fills but without the 10 % headroom. */
  budget = g_strdup_printf ("%" G_GINT64_FORMAT, peak + peak / 20);
  {
    const char *args[] = { "optimize", "--model", model_path, "--budget", budget, "--gen-length", "48",
                           "--steps", "200", "--json", NULL };
    g_auto(Run) r;
    g_autoptr(UmProfile) on_disk = NULL;
    g_autofree char *text = NULL;

    run_cli (&r, dir, args);
    g_assert_cmpint (r.status, ==, 0);
    g_assert_nonnull (r.root);
    hw = json_object_get_object_member (r.root, "hardware");
    g_assert_cmpint (json_object_get_int_member (hw, "cores"), >=, 1);
    g_assert_cmpint (json_object_get_int_member (hw, "ram_total_bytes"), >, 0);
    g_assert_true (json_object_has_member (hw, "cpu"));
    g_assert_nonnull (json_object_get_array_member (hw, "gpus"));
    target = json_object_get_object_member (r.root, "target");
    g_assert_cmpstr (json_object_get_string_member (target, "device"), ==, "cpu");
    g_assert_cmpint (json_object_get_int_member (target, "capacity_bytes"), ==, peak + peak / 20);
    g_assert_cmpint (json_object_get_int_member (target, "budget_bytes"), ==, peak + peak / 20);
    g_assert_cmpint (json_object_get_int_member (json_object_get_object_member (r.root, "shape"), "gen_length"),
                     ==, 48);
    modes = json_object_get_array_member (r.root, "modes");
    g_assert_cmpuint (json_array_get_length (modes), ==, 5);
    g_assert_false (json_object_get_boolean_member (json_array_get_object_element (modes, 0),
                                                    "fits_with_headroom"));
    chosen = g_strdup (json_object_get_string_member (r.root, "chosen_mode"));
    g_assert_nonnull (chosen);
    g_assert_cmpstr (chosen, !=, "standard");
    g_assert_true (json_object_get_boolean_member (r.root, "fits"));
    g_assert_nonnull (strstr (json_object_get_string_member (r.root, "reason"), chosen));
    g_assert_cmpstr (json_object_get_string_member (r.root, "backup_id"), ==, "original");
    g_assert_cmpstr (json_object_get_string_member (r.root, "profile_path"), ==, profile_path);
    g_assert_true (json_object_get_boolean_member (r.root, "written"));
    profile = json_object_get_object_member (r.root, "profile");
    g_assert_cmpstr (json_object_get_string_member (json_object_get_object_member (profile, "memory"), "mode"), ==,
                     chosen);
    g_assert_cmpstr (json_object_get_string_member (profile, "written_by"), ==, "optimize");
    g_assert_cmpstr (json_object_get_string_member (profile, "device"), ==, "cpu");
    g_assert_cmpint (json_object_get_int_member (profile, "memory_budget"), ==, peak + peak / 20);
    /* The settings planned for, within the mode's limits. */
    g_assert_cmpint (json_object_get_int_member (json_object_get_object_member (profile, "defaults"), "gen_length"),
                     ==, 48);
    g_assert_cmpint (json_object_get_int_member (json_object_get_object_member (profile, "defaults"), "steps"), ==,
                     g_str_has_prefix (chosen, "extreme") ? 64 : 200);

    text = um_test_read_file (profile_path);
    on_disk = um_profile_from_json (text, -1, &error);
    g_assert_no_error (error);
    g_assert_cmpstr (um_mem_mode_to_string (on_disk->mem.mode), ==, chosen);
  }

  /* --mode takes a mode even where it does not fit; --dry-run keeps the file. */
  before_dry = um_test_read_file (profile_path);
  {
    const char *args[] = { "optimize", "--model", model_path, "--budget", budget, "--mode", "standard",
                           "--dry-run", "--json", NULL };
    g_auto(Run) r;
    run_cli (&r, dir, args);
    g_assert_cmpint (r.status, ==, 0);
    g_assert_nonnull (r.root);
    g_assert_cmpstr (json_object_get_string_member (r.root, "chosen_mode"), ==, "standard");
    g_assert_false (json_object_get_boolean_member (r.root, "fits"));
    g_assert_true (JSON_NODE_HOLDS_NULL (json_object_get_member (r.root, "backup_id")));
    g_assert_false (json_object_get_boolean_member (r.root, "written"));
    g_assert_true (json_object_get_boolean_member (r.root, "dry_run"));
  }
  after_dry = um_test_read_file (profile_path);
  g_assert_cmpstr (before_dry, ==, after_dry);

  /* Nothing fits a tiny budget: an error, and the answer says why. */
  {
    const char *args[] = { "optimize", "--model", model_path, "--budget", "4KiB", "--json", NULL };
    g_auto(Run) r;
    g_autofree char *unchanged = NULL;
    run_cli (&r, dir, args);
    g_assert_cmpint (r.status, ==, 1);
    g_assert_nonnull (r.root);
    g_assert_true (JSON_NODE_HOLDS_NULL (json_object_get_member (r.root, "chosen_mode")));
    g_assert_nonnull (strstr (r.err, "no mode fits"));
    unchanged = um_test_read_file (profile_path);
    g_assert_cmpstr (unchanged, ==, before_dry);
  }

  /* Bad options. */
  {
    const char *args[] = { "optimize", "--model", model_path, "--mode", "ludicrous", NULL };
    g_auto(Run) r;
    run_cli (&r, dir, args);
    g_assert_cmpint (r.status, ==, 1);
    g_assert_nonnull (strstr (r.err, "--mode"));
  }

  /* backups: the original (the defaults), valid. */
  {
    const char *args[] = { "backups", "--json", NULL };
    g_auto(Run) r;
    JsonArray *list;
    JsonObject *e;
    run_cli (&r, dir, args);
    g_assert_cmpint (r.status, ==, 0);
    g_assert_nonnull (r.root);
    g_assert_cmpstr (json_object_get_string_member (r.root, "config_dir"), ==, dir);
    list = json_object_get_array_member (r.root, "backups");
    g_assert_cmpuint (json_array_get_length (list), ==, 1);
    e = json_array_get_object_element (list, 0);
    g_assert_cmpstr (json_object_get_string_member (e, "id"), ==, "original");
    g_assert_true (json_object_get_boolean_member (e, "valid"));
    g_assert_true (JSON_NODE_HOLDS_NULL (json_object_get_member (e, "problem")));
    g_assert_cmpstr (json_object_get_string_member (e, "summary"), ==, "standard, auto");
    g_assert_nonnull (strstr (json_object_get_string_member (e, "reason"), "before optimize → "));
    g_assert_cmpuint (strlen (json_object_get_string_member (e, "sha256")), ==, 64);
  }

  /* restore latest (the original), then undo it. */
  {
    const char *args[] = { "restore", "latest", "--json", NULL };
    g_auto(Run) r;
    g_auto(Run) u;
    const char *undo_args[] = { "restore", NULL, "--json", NULL };
    g_autofree char *undo = NULL;
    run_cli (&r, dir, args);
    g_assert_cmpint (r.status, ==, 0);
    g_assert_nonnull (r.root);
    g_assert_cmpstr (json_object_get_string_member (r.root, "restored"), ==, "original");
    g_assert_cmpstr (json_object_get_string_member (r.root, "which"), ==, "latest");
    undo = g_strdup (json_object_get_string_member (r.root, "undo_id"));
    g_assert_nonnull (undo);
    profile = json_object_get_object_member (r.root, "profile");
    g_assert_cmpstr (json_object_get_string_member (profile, "written_by"), ==, "restore");
    g_assert_cmpstr (json_object_get_string_member (json_object_get_object_member (profile, "memory"), "mode"), ==,
                     "standard");

    undo_args[1] = undo;
    run_cli (&u, dir, undo_args);
    g_assert_cmpint (u.status, ==, 0);
    g_assert_nonnull (u.root);
    g_assert_cmpstr (json_object_get_string_member (u.root, "restored"), ==, undo);
    profile = json_object_get_object_member (u.root, "profile");
    g_assert_cmpstr (json_object_get_string_member (json_object_get_object_member (profile, "memory"), "mode"), ==,
                     chosen);
  }

  /* An unknown backup: an error, nothing changes. */
  {
    const char *args[] = { "restore", "19990101-000000-001", "--json", NULL };
    g_auto(Run) r;
    run_cli (&r, dir, args);
    g_assert_cmpint (r.status, ==, 1);
    g_assert_nonnull (strstr (r.err, "no backup"));
  }
  um_test_rmtree (dir);
}

/* Damaged files: moved aside, said on stderr, stdout still clean JSON. */
static void
test_notices (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *profile_path = g_build_filename (dir, "optimizer.json", NULL);
  g_autofree char *bdir = g_build_filename (dir, "backups", NULL);
  g_autofree char *manifest = g_build_filename (bdir, "manifest.json", NULL);

  {
    const char *args[] = { "optimize", "--model", model_path, "--json", NULL };
    g_auto(Run) r;
    run_cli (&r, dir, args);
    g_assert_cmpint (r.status, ==, 0);
  }
  um_test_write_file (profile_path, "{\"version\": 1, \"memory\": {\"mode\": \"standard\"", -1);
  um_test_write_file (manifest, "[\"not a manifest\"]", -1);
  {
    const char *args[] = { "backups", "--json", NULL };
    g_auto(Run) r;
    run_cli (&r, dir, args);
    g_assert_cmpint (r.status, ==, 0);
    g_assert_nonnull (r.root);
    g_assert_nonnull (strstr (r.err, "optimizer.json.corrupt-"));
    g_assert_nonnull (strstr (r.err, "manifest.json.corrupt-"));
    /* Rebuilt from the copy that was there. */
    g_assert_cmpuint (json_array_get_length (json_object_get_array_member (r.root, "backups")), ==, 1);
    g_assert_cmpuint (um_test_count_prefix (bdir, "manifest.json.corrupt-"), ==, 1);
    /* Listing changes no profile: only a commit moves it aside. */
    g_assert_cmpuint (um_test_count_prefix (dir, "optimizer.json.corrupt-"), ==, 0);
    g_assert_true (g_file_test (profile_path, G_FILE_TEST_EXISTS));
  }
  /* The next change moves it aside and says so. */
  {
    const char *args[] = { "optimize", "--model", model_path, "--mode", "extreme-mild", "--json", NULL };
    g_auto(Run) r;
    run_cli (&r, dir, args);
    g_assert_cmpint (r.status, ==, 0);
    g_assert_nonnull (strstr (r.err, "optimizer.json.corrupt-"));
    g_assert_cmpuint (um_test_count_prefix (dir, "optimizer.json.corrupt-"), ==, 1);
  }
  /* Said once: the next run finds sound files. */
  {
    const char *args[] = { "backups", "--json", NULL };
    g_auto(Run) r;
    run_cli (&r, dir, args);
    g_assert_cmpint (r.status, ==, 0);
    g_assert_cmpstr (r.err, ==, "");
  }
  um_test_rmtree (dir);
}

/* plan (and so generate, chat and bench, which build their engine options
 * the same way) starts from the profile; the command line overrides it. */
static void
test_commands_use_profile (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *profile_path = g_build_filename (dir, "optimizer.json", NULL);
  g_autoptr(UmProfile) p = um_profile_new_default ();
  g_autoptr(GError) error = NULL;

  um_profile_set_mode (p, UM_MEM_EXTREME_MILD);
  p->memory_budget = 123456789;
  p->written_by = UM_PROFILE_BY_USER;
  g_assert_true (um_profile_save (p, dir, &error));
  g_assert_no_error (error);
  {
    const char *args[] = { "plan", "--model", model_path, "--json", NULL };
    g_auto(Run) r;
    run_cli (&r, dir, args);
    g_assert_cmpint (r.status, ==, 0);
    g_assert_nonnull (r.root);
    g_assert_cmpint (json_object_get_int_member (r.root, "device_budget_bytes"), ==, 123456789);
    /* The profile's extreme mode recommends a shorter canvas than 128. */
    g_assert_nonnull (strstr (r.err, "recommends"));
  }
  {
    const char *args[] = { "plan", "--model", model_path, "--budget", "2GiB", "--mode", "standard", "--json", NULL };
    g_auto(Run) r;
    run_cli (&r, dir, args);
    g_assert_cmpint (r.status, ==, 0);
    g_assert_nonnull (r.root);
    g_assert_cmpint (json_object_get_int_member (r.root, "device_budget_bytes"), ==, 2ll << 30);
    g_assert_null (strstr (r.err, "recommends"));
  }
  /* A damaged profile: said on stderr, the defaults are used. */
  um_test_write_file (profile_path, "{\"version\": 1, \"memory_budget\": \"lots\"}", -1);
  {
    const char *args[] = { "plan", "--model", model_path, "--json", NULL };
    g_auto(Run) r;
    run_cli (&r, dir, args);
    g_assert_cmpint (r.status, ==, 0);
    g_assert_nonnull (r.root);
    g_assert_false (json_object_has_member (r.root, "device_budget_bytes"));
    g_assert_nonnull (strstr (r.err, "optimizer.json.corrupt-"));
  }
  um_test_rmtree (dir);
}

/* Restore can remove the weights the memory modes converted (after
 * asking, in the app; on request, in the CLI). */
static void
test_restore_removes_converted (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *cache = g_build_filename (dir, "converted", NULL);

  {
    const char *args[] = { "optimize", "--model", model_path, "--mode", "extreme-mild", NULL };
    g_auto(Run) r;
    run_cli (&r, dir, args);
    g_assert_cmpint (r.status, ==, 0);
  }
  {
    /* Generating under the profile's extreme-mild converts to Q8_0. */
    const char *args[] = { "generate", "--model", model_path, "--ids", "1,2,3", "--gen-length", "8", "--steps", "8",
                           "--block-length", "8", "--cache-dir", cache, "--json", NULL };
    g_auto(Run) r;
    run_cli (&r, dir, args);
    g_assert_cmpint (r.status, ==, 0);
    g_assert_cmpuint (um_test_count_prefix (cache, "tiny-llada-Q8_0-"), ==, 1);
  }
  {
    const char *args[] = { "restore", "original", "--remove-converted", "--cache-dir", cache, "--json", NULL };
    g_auto(Run) r;
    run_cli (&r, dir, args);
    g_assert_cmpint (r.status, ==, 0);
    g_assert_nonnull (r.root);
    g_assert_cmpint (json_object_get_int_member (r.root, "converted_removed"), ==, 1);
    g_assert_cmpint (json_object_get_int_member (r.root, "converted_removed_bytes"), >, 0);
    g_assert_cmpuint (um_test_count_prefix (cache, "tiny-llada-"), ==, 0);
  }
  um_test_rmtree (dir);
}

/* A per-model override in the profile applies to that model only. */
static void
test_override_applies (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autoptr(UmProfile) p = um_profile_new_default ();
  g_autoptr(GError) error = NULL;
  UmProfileOverride *ov = g_new0 (UmProfileOverride, 1);

  ov->model_id = um_model_identity (model_path);
  um_mem_options_init (&ov->mem, UM_MEM_EXTREME_MILD);
  g_ptr_array_add (p->overrides, ov);
  p->written_by = UM_PROFILE_BY_USER;
  g_assert_true (um_profile_save (p, dir, &error));
  g_assert_no_error (error);
  {
    const char *args[] = { "generate", "--model", model_path, "--ids", "1,2,3", "--gen-length", "8", "--steps", "8",
                           "--block-length", "8", "--cache-dir", dir, "--json", NULL };
    g_auto(Run) r;
    run_cli (&r, dir, args);
    g_assert_cmpint (r.status, ==, 0);
    g_assert_nonnull (r.root);
    g_assert_cmpstr (json_object_get_string_member (json_object_get_object_member (r.root, "plan"), "mode"), ==,
                     "extreme-mild");
  }
  um_test_rmtree (dir);
}

/* Optimize twice with the same result: the second writes nothing and
 * makes no backup, so repeating it never pushes real history out. */
static void
test_optimize_twice (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *bdir = g_build_filename (dir, "backups", NULL);
  const char *args[] = { "optimize", "--model", model_path, "--mode", "extreme-mild", "--json", NULL };

  for (int i = 0; i < 3; i++)
    {
      g_auto(Run) r;
      run_cli (&r, dir, args);
      g_assert_cmpint (r.status, ==, 0);
      g_assert_nonnull (r.root);
      g_assert_cmpint (json_object_get_boolean_member (r.root, "written"), ==, i == 0);
      g_assert_cmpint (json_object_get_boolean_member (r.root, "unchanged"), ==, i > 0);
      if (i > 0)
        g_assert_true (json_object_get_null_member (r.root, "backup_id"));
      g_assert_cmpstr (json_object_get_string_member (json_object_get_object_member (
                         json_object_get_object_member (r.root, "profile"), "memory"), "mode"), ==, "extreme-mild");
    }
  /* original and the manifest, nothing more. */
  g_assert_cmpuint (um_test_count_prefix (bdir, ""), ==, 2);
  {
    const char *text_args[] = { "optimize", "--model", model_path, "--mode", "extreme-mild", NULL };
    g_auto(Run) r;
    run_cli (&r, dir, text_args);
    g_assert_cmpint (r.status, ==, 0);
    g_assert_nonnull (strstr (r.out, "Nothing changed"));
  }
  um_test_rmtree (dir);
}

/* The measurement: history made by this version, then a newer
 * Unmask sets manifest.json and optimizer.json to version 3 and adds a
 * backup copy of its own. optimize, restore and backups refuse (exit 1,
 * "written by a newer Unmask") and every file stays as it is; a command
 * that only reads (plan) runs on the defaults. */
static void
set_version_3 (const char *path)
{
  g_autofree char *text = um_test_read_file (path);
  g_autoptr(GRegex) re = g_regex_new ("\"version\"\\s*:\\s*[0-9]+", 0, 0, NULL);
  g_autofree char *out = g_regex_replace_literal (re, text, -1, 0, "\"version\": 3", 0, NULL);
  um_test_write_file (path, out, -1);
}

static int
compare_names (gconstpointer a, gconstpointer b)
{
  return strcmp (*(char *const *) a, *(char *const *) b);
}

static char *
dir_listing (const char *dir)
{
  g_autoptr(GString) s = g_string_new (NULL);
  const char *sub[] = { "", "backups", NULL };

  for (guint i = 0; sub[i]; i++)
    {
      g_autofree char *d = g_build_filename (dir, sub[i], NULL);
      g_autoptr(GDir) gd = g_dir_open (d, 0, NULL);
      g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func (g_free);
      const char *name;
      while (gd != NULL && (name = g_dir_read_name (gd)) != NULL)
        g_ptr_array_add (names, g_strdup (name));
      g_ptr_array_sort (names, compare_names);
      for (guint k = 0; k < names->len; k++)
        {
          g_autofree char *path = g_build_filename (d, g_ptr_array_index (names, k), NULL);
          g_autofree char *text = NULL, *sum = NULL;
          if (g_str_equal (g_ptr_array_index (names, k), ".optimizer.lock")
              || g_file_test (path, G_FILE_TEST_IS_DIR))
            continue;
          text = um_test_read_file (path);
          sum = g_compute_checksum_for_string (G_CHECKSUM_SHA256, text, -1);
          g_string_append_printf (s, "%s/%s %s\n", sub[i], (char *) g_ptr_array_index (names, k), sum);
        }
    }
  return g_string_free (g_steal_pointer (&s), FALSE);
}

static void
test_newer_version (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *profile = g_build_filename (dir, "optimizer.json", NULL);
  g_autofree char *manifest = g_build_filename (dir, "backups", "manifest.json", NULL);
  g_autofree char *copy = g_build_filename (dir, "backups", "20991231-235959-001.json", NULL);
  g_autofree char *before = NULL;
  const char *modes[] = { "extreme-mild", "standard-8bit" };

  for (int i = 0; i < 2; i++)
    {
      const char *args[] = { "optimize", "--model", model_path, "--mode", modes[i], "--json", NULL };
      g_auto(Run) r;
      run_cli (&r, dir, args);
      g_assert_cmpint (r.status, ==, 0);
    }
  {
    g_autofree char *text = um_test_read_file (profile);
    um_test_write_file (copy, text, -1);
  }
  set_version_3 (copy);
  set_version_3 (manifest);
  set_version_3 (profile);
  before = dir_listing (dir);
  g_test_message ("before:\n%s", before);
  {
    const char *optimize[] = { "optimize", "--model", model_path, "--mode", "extreme-moderate", NULL };
    const char *restore[] = { "restore", "original", NULL };
    const char *backups[] = { "backups", NULL };
    const char *const *cmds[] = { optimize, restore, backups };
    for (guint i = 0; i < G_N_ELEMENTS (cmds); i++)
      {
        g_auto(Run) r;
        g_autofree char *after = NULL;
        run_cli (&r, dir, cmds[i]);
        g_assert_cmpint (r.status, ==, 1);
        g_assert_nonnull (strstr (r.err, "written by a newer Unmask"));
        after = dir_listing (dir);
        g_assert_cmpstr (after, ==, before);
      }
  }
  {
    const char *plan[] = { "plan", "--model", model_path, NULL };
    g_auto(Run) r;
    g_autofree char *after = NULL;
    run_cli (&r, dir, plan);
    g_assert_cmpint (r.status, ==, 0);
    g_assert_nonnull (strstr (r.err, "written by a newer Unmask"));
    after = dir_listing (dir);
    g_assert_cmpstr (after, ==, before);
  }
  um_test_rmtree (dir);
}

/* Optimize for a model that has an override: the model then runs in the
 * optimized mode, not the override's. */
static void
test_optimize_clears_override (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autoptr(UmProfile) p = um_profile_new_default ();
  g_autoptr(GError) error = NULL;
  UmProfileOverride *ov = g_new0 (UmProfileOverride, 1), *other = g_new0 (UmProfileOverride, 1);

  ov->model_id = um_model_identity (model_path);
  um_mem_options_init (&ov->mem, UM_MEM_EXTREME_AGGRESSIVE);
  g_ptr_array_add (p->overrides, ov);
  other->model_id = g_strdup ("00000000feedface");
  um_mem_options_init (&other->mem, UM_MEM_EXTREME_MODERATE);
  g_ptr_array_add (p->overrides, other);
  p->written_by = UM_PROFILE_BY_USER;
  g_assert_true (um_profile_save (p, dir, &error));
  g_assert_no_error (error);
  {
    const char *args[] = { "optimize", "--model", model_path, "--mode", "standard-8bit", "--json", NULL };
    g_auto(Run) r;
    JsonObject *overrides;
    run_cli (&r, dir, args);
    g_assert_cmpint (r.status, ==, 0);
    overrides = json_object_get_object_member (json_object_get_object_member (r.root, "profile"), "overrides");
    /* This model's override is gone, the other model's stays. */
    g_assert_nonnull (overrides);
    g_assert_false (json_object_has_member (overrides, ov->model_id));
    g_assert_true (json_object_has_member (overrides, "00000000feedface"));
  }
  {
    const char *args[] = { "generate", "--model", model_path, "--ids", "1,2,3", "--gen-length", "8", "--steps", "8",
                           "--block-length", "8", "--cache-dir", dir, "--json", NULL };
    g_auto(Run) r;
    run_cli (&r, dir, args);
    g_assert_cmpint (r.status, ==, 0);
    g_assert_cmpstr (json_object_get_string_member (json_object_get_object_member (r.root, "plan"), "mode"), ==,
                     "standard-8bit");
  }
  um_test_rmtree (dir);
}

/* restore latest over damaged newer entries names each one and why. */
static void
test_restore_names_skipped (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *bdir = g_build_filename (dir, "backups", NULL);
  const char *modes[] = { "standard-8bit", "extreme-mild", "extreme-moderate" };
  g_autofree char *newest_file = NULL, *newest_id = NULL;

  for (guint i = 0; i < G_N_ELEMENTS (modes); i++)
    {
      const char *args[] = { "optimize", "--model", model_path, "--mode", modes[i], "--json", NULL };
      g_auto(Run) r;
      run_cli (&r, dir, args);
      g_assert_cmpint (r.status, ==, 0);
      if (i + 1 == G_N_ELEMENTS (modes))
        {
          newest_id = g_strdup (json_object_get_string_member (r.root, "backup_id"));
          newest_file = g_strconcat (bdir, "/", newest_id, ".json", NULL);
        }
    }
  g_assert_cmpint (g_unlink (newest_file), ==, 0);
  {
    const char *args[] = { "restore", "latest", "--json", NULL };
    g_auto(Run) r;
    JsonArray *skipped;
    run_cli (&r, dir, args);
    g_assert_cmpint (r.status, ==, 0);
    skipped = json_object_get_array_member (r.root, "skipped");
    g_assert_cmpuint (json_array_get_length (skipped), ==, 1);
    g_assert_cmpstr (json_object_get_string_member (json_array_get_object_element (skipped, 0), "id"), ==,
                     newest_id);
    g_assert_nonnull (strstr (json_object_get_string_member (json_array_get_object_element (skipped, 0), "problem"),
                              "missing"));
    g_assert_nonnull (strstr (r.err, newest_id));
    /* What was restored is the entry before the damaged one. */
    g_assert_cmpstr (json_object_get_string_member (r.root, "restored"), !=, newest_id);
  }
  um_test_rmtree (dir);
}

/* --remove-converted after the restore: a failure to remove is a warning
 * (the restore happened; its undo id is printed, exit 0), and a file the
 * restored settings still use, through another model's override, stays. */
static void
test_restore_converted_in_use (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *cache = g_build_filename (dir, "converted", NULL);
  g_autofree char *other_model = g_build_filename (dir, "other-model", NULL);
  g_autofree char *not_a_folder = g_build_filename (dir, "not-a-folder", NULL);
  g_autoptr(UmProfile) p = um_profile_new_default ();
  g_autoptr(GError) error = NULL;
  UmProfileOverride *ov = g_new0 (UmProfileOverride, 1);

  /* Another model (a copy elsewhere is another model) has an override to
   * extreme-mild from the start, so "original" keeps using its Q8_0 file. */
  g_assert_cmpint (g_mkdir (other_model, 0700), ==, 0);
  um_test_copy_dir (model_path, other_model);
  ov->model_id = um_model_identity (other_model);
  um_mem_options_init (&ov->mem, UM_MEM_EXTREME_MILD);
  g_ptr_array_add (p->overrides, ov);
  p->written_by = UM_PROFILE_BY_USER;
  g_assert_true (um_profile_save (p, dir, &error));
  g_assert_no_error (error);
  {
    const char *args[] = { "optimize", "--model", model_path, "--mode", "extreme-mild", NULL };
    g_auto(Run) r;
    run_cli (&r, dir, args);
    g_assert_cmpint (r.status, ==, 0);
  }
  for (int m = 0; m < 2; m++)
    {
      const char *args[] = { "generate", "--model", m ? other_model : model_path, "--ids", "1,2,3", "--gen-length",
                             "8", "--steps", "8", "--block-length", "8", "--cache-dir", cache, "--json", NULL };
      g_auto(Run) r;
      run_cli (&r, dir, args);
      g_assert_cmpint (r.status, ==, 0);
    }
  g_assert_cmpuint (um_test_count_prefix (cache, ""), ==, 2);

  /* The cache cannot even be listed: a warning, the restore stands. */
  um_test_write_file (not_a_folder, "a file", -1);
  {
    const char *args[] = { "restore", "original", "--remove-converted", "--cache-dir", not_a_folder, "--json", NULL };
    g_auto(Run) r;
    run_cli (&r, dir, args);
    g_assert_cmpint (r.status, ==, 0);
    g_assert_nonnull (r.root);
    g_assert_false (json_object_get_null_member (r.root, "undo_id"));
    g_assert_cmpuint (json_array_get_length (json_object_get_array_member (r.root, "warnings")), ==, 1);
    g_assert_nonnull (strstr (r.err, "warning"));
  }
  /* Back to extreme-mild for this model, then restore the original with
   * the real cache: this model's file goes, the other model's stays. */
  {
    const char *args[] = { "optimize", "--model", model_path, "--mode", "extreme-mild", NULL };
    g_auto(Run) r;
    run_cli (&r, dir, args);
    g_assert_cmpint (r.status, ==, 0);
  }
  {
    const char *args[] = { "restore", "original", "--remove-converted", "--cache-dir", cache, "--json", NULL };
    g_auto(Run) r;
    run_cli (&r, dir, args);
    g_assert_cmpint (r.status, ==, 0);
    g_assert_cmpint (json_object_get_int_member (r.root, "converted_removed"), ==, 1);
    g_assert_cmpint (json_object_get_int_member (r.root, "converted_kept"), ==, 1);
    g_assert_cmpuint (um_test_count_prefix (cache, "tiny-llada-Q8_0-"), ==, 0);
    g_assert_cmpuint (um_test_count_prefix (cache, "other-model-Q8_0-"), ==, 1);
  }
  um_test_rmtree (dir);
}

/* cache list shows what killed conversions left, in the default folder and
 * the temporary one it falls back to; cache clear removes them. */
static void
test_cache_partial_files (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *xdg = g_build_filename (dir, "xdg-cache", NULL);
  g_autofree char *tmp = g_build_filename (dir, "tmp", NULL);
  g_autofree char *fallback = g_build_filename (tmp, "unmask-converted", NULL);
  g_autofree char *main_dir = g_build_filename (xdg, "unmask", "converted", NULL);
  g_autofree char *part1 = g_build_filename (main_dir, "m-Q8_0-00.gguf.AAAAAA.part", NULL);
  g_autofree char *part2 = g_build_filename (fallback, "m-Q4_0-11.gguf.BBBBBB.part", NULL);
  g_autofree char *env_xdg = g_strconcat ("XDG_CACHE_HOME=", xdg, NULL);
  g_autofree char *env_tmp = g_strconcat ("TMPDIR=", tmp, NULL);
  const char *env[] = { env_xdg, env_tmp, NULL };

  g_assert_cmpint (g_mkdir_with_parents (main_dir, 0700), ==, 0);
  g_assert_cmpint (g_mkdir_with_parents (fallback, 0700), ==, 0);
  um_test_write_file (part1, "stopped", -1);
  um_test_write_file (part2, "stopped too", -1);
  {
    const char *args[] = { "cache", "list", "--json", NULL };
    g_auto(Run) r;
    g_autoptr(JsonParser) parser = json_parser_new ();
    JsonArray *a;
    run_cli_env (&r, dir, args, env);
    g_assert_cmpint (r.status, ==, 0);
    g_assert_true (json_parser_load_from_data (parser, r.out, -1, NULL));
    a = json_node_get_array (json_parser_get_root (parser));
    g_assert_cmpuint (json_array_get_length (a), ==, 2);
    for (guint i = 0; i < 2; i++)
      {
        JsonObject *e = json_array_get_object_element (a, i);
        g_assert_true (json_object_get_boolean_member (e, "partial"));
        g_assert_false (json_object_get_boolean_member (e, "in_progress"));
      }
  }
  {
    const char *args[] = { "cache", "clear", NULL };
    g_auto(Run) r;
    run_cli_env (&r, dir, args, env);
    g_assert_cmpint (r.status, ==, 0);
    g_assert_false (g_file_test (part1, G_FILE_TEST_EXISTS));
    g_assert_false (g_file_test (part2, G_FILE_TEST_EXISTS));
  }
  um_test_rmtree (dir);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  cli_path = g_strdup (g_getenv ("UM_CLI"));
  if (cli_path == NULL)
    {
      /* An uninstalled build: app/ beside tests/. */
      g_autofree char *here = g_path_get_dirname (argv[0]);
      cli_path = g_build_filename (here, "..", "app", "unmask-cli", NULL);
    }
  model_path = um_test_data_path ("tiny-llada");
  g_test_add_func ("/cli/optimize", test_optimize);
  g_test_add_func ("/cli/override-applies", test_override_applies);
  g_test_add_func ("/cli/restore-removes-converted", test_restore_removes_converted);
  g_test_add_func ("/cli/notices", test_notices);
  g_test_add_func ("/cli/commands-use-profile", test_commands_use_profile);
  g_test_add_func ("/cli/optimize-twice", test_optimize_twice);
  g_test_add_func ("/cli/newer-version", test_newer_version);
  g_test_add_func ("/cli/optimize-clears-override", test_optimize_clears_override);
  g_test_add_func ("/cli/restore-names-skipped", test_restore_names_skipped);
  g_test_add_func ("/cli/restore-converted-in-use", test_restore_converted_in_use);
  g_test_add_func ("/cli/cache-partial-files", test_cache_partial_files);
  return g_test_run ();
}

/* The optimizer profile (JSON round trip, strict reading, bad files moved
 * aside, atomic writes), its backups (original kept forever, the limit,
 * latest, restore and undo, damaged entries reported and skipped) and the
 * one-click optimizer on the tiny fixture. */
#include <glib/gstdio.h>
#include <string.h>
#include <utime.h>

#include "um-backups.h"
#include "um-error.h"
#include "um-optimizer.h"
#include "um-profile.h"
#include "um-test-util.h"

static char *model_path;

/* A profile unlike the defaults in every field. */
static UmProfile *
full_profile (void)
{
  UmProfile *p = um_profile_new_default ();
  UmProfileOverride *o = g_new0 (UmProfileOverride, 1);

  um_profile_set_mode (p, UM_MEM_EXTREME_AGGRESSIVE);
  g_strlcpy (p->mem.weight_format, "Q4_K_M", sizeof p->mem.weight_format);
  p->mem.resident_layers = 3;
  p->mem.host_zstd = TRUE;
  p->mem.prune_heads = 0.1;
  p->mem.prune_ffn = 0.05;
  p->mem.row_chunk = -1;
  p->device = UM_DEVICE_CUDA;
  p->gpu_index = 1;
  p->n_threads = 6;
  p->memory_budget = (3ull << 30) + 17;
  p->headroom = 0.15;
  p->default_gen_length = 48;
  o->model_id = g_strdup ("feedfacecafebeef");
  um_mem_options_init (&o->mem, UM_MEM_STANDARD_8BIT);
  o->mem.row_chunk = 256;
  g_ptr_array_add (p->overrides, o);
  o = g_new0 (UmProfileOverride, 1);
  o->model_id = g_strdup ("0000000000000001");
  um_mem_options_init (&o->mem, UM_MEM_EXTREME_MILD);
  g_strlcpy (o->mem.weight_format, "stored", sizeof o->mem.weight_format);
  g_ptr_array_add (p->overrides, o);
  p->written_by = UM_PROFILE_BY_USER;
  p->written_at = 1764000123;
  p->reason = g_strdup ("tests → “quoted”, with a newline\nand unicode ✓");
  return p;
}

/* ---- the profile ---- */

static void
test_defaults (void)
{
  g_autoptr(UmProfile) p = um_profile_new_default ();
  g_autofree char *summary = um_profile_summary (p);

  g_assert_cmpint (p->version, ==, UM_PROFILE_VERSION);
  g_assert_cmpint (p->mem.mode, ==, UM_MEM_STANDARD);
  g_assert_cmpint (p->device, ==, UM_DEVICE_AUTO);
  g_assert_cmpint (p->limit_gen_length, ==, 0);
  g_assert_cmpint (p->limit_steps, ==, 0);
  g_assert_cmpint (p->default_gen_length, ==, 128);
  g_assert_cmpint (p->default_block_length, ==, 32);
  g_assert_cmpint (p->default_steps, ==, 128);
  g_assert_cmpint (p->written_by, ==, UM_PROFILE_BY_DEFAULT);
  g_assert_cmpstr (summary, ==, "standard, auto");

  um_profile_set_mode (p, UM_MEM_EXTREME_MODERATE);
  g_assert_cmpint (p->limit_gen_length, ==, 64);
  g_assert_cmpint (p->limit_block_length, ==, 32);
  g_assert_cmpint (p->limit_steps, ==, 64);
  g_assert_cmpint (p->default_gen_length, ==, 64);
  g_assert_cmpint (p->default_block_length, ==, 32);
  g_assert_cmpint (p->default_steps, ==, 64);
  g_assert_cmpstr (um_profile_writer_to_string (UM_PROFILE_BY_RESTORE), ==, "restore");
}

static void
test_round_trip (void)
{
  g_autoptr(UmProfile) p = full_profile ();
  g_autoptr(UmProfile) back = NULL;
  g_autoptr(UmProfile) copy = um_profile_copy (p);
  g_autoptr(GError) error = NULL;
  g_autofree char *text = um_profile_to_json (p);
  g_autofree char *again = NULL;
  g_autofree char *summary = um_profile_summary (p);

  back = um_profile_from_json (text, -1, &error);
  g_assert_no_error (error);
  g_assert_true (um_profile_equal (p, back));
  g_assert_true (um_profile_equal (p, copy));
  g_assert_cmpint (back->written_by, ==, UM_PROFILE_BY_USER);
  g_assert_cmpint (back->written_at, ==, 1764000123);
  g_assert_cmpstr (back->reason, ==, p->reason);
  /* Exact: a double written with 17 significant digits reads back as itself. */
  g_assert_cmpfloat (back->mem.prune_heads, ==, 0.1);
  g_assert_cmpuint (back->memory_budget, ==, (3ull << 30) + 17);
  g_assert_cmpfloat (back->headroom, ==, 0.15);
  g_assert_cmpuint (back->overrides->len, ==, 2);
  again = um_profile_to_json (back);
  g_assert_cmpstr (text, ==, again);
  g_assert_cmpstr (summary, ==, "extreme-aggressive, Q4_K_M, cuda:1, budget 3.0\u00a0GiB, 6 threads, 2 model overrides");

  /* Equality is about the settings, not about who wrote them. */
  back->written_at = 1;
  back->written_by = UM_PROFILE_BY_RESTORE;
  g_assert_true (um_profile_equal (p, back));
  back->mem.row_chunk = 0;
  g_assert_false (um_profile_equal (p, back));
  back->mem.row_chunk = -1;
  ((UmProfileOverride *) g_ptr_array_index (back->overrides, 1))->mem.mode = UM_MEM_EXTREME_MODERATE;
  g_assert_false (um_profile_equal (p, back));

  /* The defaults were never written: no time. */
  {
    g_autoptr(UmProfile) def = um_profile_new_default ();
    g_autofree char *def_text = um_profile_to_json (def);
    g_autoptr(UmProfile) def_back = um_profile_from_json (def_text, -1, &error);
    g_assert_no_error (error);
    g_assert_nonnull (strstr (def_text, "\"written_at\" : null"));
    g_assert_cmpint (def_back->written_at, ==, 0);
    g_assert_null (def_back->reason);
    g_assert_true (um_profile_equal (def, def_back));
  }

  /* Keys left out take their defaults. */
  {
    g_autoptr(UmProfile) minimal = um_profile_from_json ("{\"version\": 1}", -1, &error);
    g_autoptr(UmProfile) def = um_profile_new_default ();
    g_assert_no_error (error);
    g_assert_true (um_profile_equal (minimal, def));
  }
}

static const struct {
  const char *text;
  const char *what;     /* in the message */
  int         code;
} bad_profiles[] = {
  { "", "JSON", UM_ERROR_FORMAT },
  { "{", "JSON", UM_ERROR_FORMAT },
  { "{\"version\": 1,}", "JSON", UM_ERROR_FORMAT },
  { "[1, 2]", "object", UM_ERROR_FORMAT },
  { "null", "object", UM_ERROR_FORMAT },
  { "{}", "version", UM_ERROR_FORMAT },
  { "{\"version\": \"1\"}", "version", UM_ERROR_FORMAT },
  { "{\"version\": 0}", "version", UM_ERROR_FORMAT },
  { "{\"version\": 1.5}", "version", UM_ERROR_FORMAT },
  { "{\"version\": 2, \"memory\": {\"mode\": \"warp\"}}", "newer", UM_ERROR_UNSUPPORTED },
  { "{\"version\": 1, \"colour\": \"blue\"}", "colour", UM_ERROR_FORMAT },
  { "{\"version\": 1, \"memory\": {\"mode\": \"standard\", \"turbo\": true}}", "memory.turbo", UM_ERROR_FORMAT },
  { "{\"version\": 1, \"limits\": {\"gen\": 3}}", "limits.gen", UM_ERROR_FORMAT },
  { "{\"version\": 1, \"memory\": {\"mode\": 3}}", "memory.mode", UM_ERROR_FORMAT },
  { "{\"version\": 1, \"memory\": {\"mode\": \"warp\"}}", "memory.mode", UM_ERROR_FORMAT },
  { "{\"version\": 1, \"memory\": {\"mode\": \"moderate\"}}", "memory.mode", UM_ERROR_FORMAT },
  { "{\"version\": 1, \"memory\": {\"host_zstd\": true}}", "memory.mode", UM_ERROR_FORMAT },
  { "{\"version\": 1, \"memory\": {\"mode\": \"standard\", \"host_zstd\": 1}}", "host_zstd", UM_ERROR_FORMAT },
  { "{\"version\": 1, \"memory\": {\"mode\": \"standard\", \"prune_heads\": 0.9}}", "prun", UM_ERROR_FORMAT },
  { "{\"version\": 1, \"memory\": {\"mode\": \"standard\", \"prune_ffn\": \"a lot\"}}", "prune_ffn",
    UM_ERROR_FORMAT },
  { "{\"version\": 1, \"memory\": {\"mode\": \"standard\", \"weight_format\": \"Q3_XXL\"}}", "weight format",
    UM_ERROR_FORMAT },
  { "{\"version\": 1, \"memory\": {\"mode\": \"standard\", \"resident_layers\": 1}}", "slots", UM_ERROR_FORMAT },
  { "{\"version\": 1, \"memory\": \"standard\"}", "memory", UM_ERROR_FORMAT },
  { "{\"version\": 1, \"threads\": \"4\"}", "threads", UM_ERROR_FORMAT },
  { "{\"version\": 1, \"threads\": -2}", "threads", UM_ERROR_FORMAT },
  { "{\"version\": 1, \"memory_budget\": -1}", "memory_budget", UM_ERROR_FORMAT },
  { "{\"version\": 1, \"memory_budget\": 1e9}", "memory_budget", UM_ERROR_FORMAT },
  { "{\"version\": 1, \"headroom\": 1.5}", "headroom", UM_ERROR_FORMAT },
  { "{\"version\": 1, \"headroom\": -0.1}", "headroom", UM_ERROR_FORMAT },
  { "{\"version\": 1, \"headroom\": \"some\"}", "headroom", UM_ERROR_FORMAT },
  { "{\"version\": 1, \"device\": \"tpu\"}", "device", UM_ERROR_FORMAT },
  { "{\"version\": 1, \"device\": \"gpu\"}", "device", UM_ERROR_FORMAT },
  { "{\"version\": 1, \"written_by\": \"someone\"}", "written_by", UM_ERROR_FORMAT },
  { "{\"version\": 1, \"written_at\": \"yesterday\"}", "written_at", UM_ERROR_FORMAT },
  { "{\"version\": 1, \"written_at\": 1764000000}", "written_at", UM_ERROR_FORMAT },
  { "{\"version\": 1, \"reason\": 7}", "reason", UM_ERROR_FORMAT },
  { "{\"version\": 1, \"overrides\": []}", "overrides", UM_ERROR_FORMAT },
  { "{\"version\": 1, \"overrides\": {\"abc\": {\"mode\": \"fast\"}}}", "overrides.abc", UM_ERROR_FORMAT },
  { "{\"version\": 1, \"defaults\": {\"steps\": true}}", "defaults.steps", UM_ERROR_FORMAT },
};

static void
test_strict (void)
{
  for (guint i = 0; i < G_N_ELEMENTS (bad_profiles); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(UmProfile) p = um_profile_from_json (bad_profiles[i].text, -1, &error);
      g_test_message ("%s → %s", bad_profiles[i].text, error ? error->message : "(accepted)");
      g_assert_null (p);
      g_assert_error (error, UM_ERROR, bad_profiles[i].code);
      g_assert_nonnull (strstr (error->message, bad_profiles[i].what));
    }
}

/* A bad file gives the defaults and a notice; the next commit moves it
 * aside. (A newer version's file is never moved: test-config-newer.) */
static void
test_load_bad (void)
{
  const char *kinds[] = {
    "{\"version\": 1, \"memory\": ",                                 /* invalid JSON (truncated) */
    "{\"version\": 1, \"threads\": \"many\"}",                       /* wrong type */
    "{\"version\": 1, \"memory\": {\"mode\": \"standard\"}, \"x\": 1}", /* unknown key */
    "\xff\xfe garbage \x01",                                          /* not text */
  };

  for (guint i = 0; i < G_N_ELEMENTS (kinds); i++)
    {
      g_autofree char *dir = um_test_mkdtemp ();
      g_autofree char *path = um_profile_path (dir);
      g_autoptr(GError) error = NULL;
      g_autofree char *notice = NULL;
      g_autofree char *notice2 = NULL;
      g_autoptr(UmProfile) p = NULL;
      g_autoptr(UmProfile) again = NULL;
      g_autoptr(UmProfile) def = um_profile_new_default ();
      g_autoptr(GDir) d = NULL;
      const char *name;
      gboolean found = FALSE;

      um_test_write_file (path, kinds[i], -1);
      p = um_profile_load (dir, &notice, &error);
      g_assert_no_error (error);
      g_assert_nonnull (p);
      g_assert_true (um_profile_equal (p, def));
      g_assert_nonnull (notice);
      g_test_message ("%s", notice);
      g_assert_nonnull (strstr (notice, "optimizer.json.corrupt-"));
      /* A reader changes no file (it would race a commit): the file stays
       * until a commit, under the lock, moves it aside. */
      {
        g_autofree char *text = um_test_read_file (path);
        g_auto(UmCommit) c = { 0 };
        g_autoptr(UmProfile) next = um_profile_new_default ();
        g_assert_cmpstr (text, ==, kinds[i]);
        um_profile_set_mode (next, UM_MEM_EXTREME_MILD);
        g_assert_true (um_backups_commit (next, dir, "test", NULL, &c, &error));
        g_assert_no_error (error);
        g_assert_nonnull (c.notice);
        g_assert_nonnull (strstr (c.notice, "optimizer.json.corrupt-"));
        g_free (notice);
        notice = g_strdup (c.notice);
        /* The defaults were the state before: undo goes back to them. */
        g_assert_true (um_backups_restore (dir, "latest", NULL, NULL, &error));
        g_assert_no_error (error);
      }
      /* Kept, byte for byte, under the name the notice gives. */
      d = g_dir_open (dir, 0, NULL);
      while ((name = g_dir_read_name (d)) != NULL)
        if (g_str_has_prefix (name, "optimizer.json.corrupt-"))
          {
            g_autofree char *moved = g_build_filename (dir, name, NULL);
            g_autofree char *text = um_test_read_file (moved);
            g_assert_cmpstr (text, ==, kinds[i]);
            g_assert_nonnull (strstr (notice, name));
            found = TRUE;
          }
      g_assert_true (found);

      /* Next time: no file, the defaults, nothing to say. */
      again = um_profile_load (dir, &notice2, &error);
      g_assert_no_error (error);
      g_assert_null (notice2);
      g_assert_true (um_profile_equal (again, def));
      um_test_rmtree (dir);
    }
}

static void
test_load_missing (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *nowhere = g_build_filename (dir, "no", "such", "folder", NULL);
  g_autoptr(GError) error = NULL;
  g_autofree char *notice = NULL;
  g_autoptr(UmProfile) p = um_profile_load (nowhere, &notice, &error);
  g_autoptr(UmProfile) def = um_profile_new_default ();
  g_autofree char *path = um_profile_path (dir);

  g_assert_no_error (error);
  g_assert_null (notice);
  g_assert_true (um_profile_equal (p, def));

  /* A folder where the file should be cannot be read at all: an error. */
  g_assert_cmpint (g_mkdir (path, 0700), ==, 0);
  g_assert_null (um_profile_load (dir, NULL, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_IO);
  um_test_rmtree (dir);
}

static void
test_save_load (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *sub = g_build_filename (dir, "new", "unmask", NULL);
  g_autoptr(UmProfile) p = full_profile ();
  g_autoptr(UmProfile) back = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *notice = NULL;

  /* The folder is made as needed. */
  g_assert_true (um_profile_save (p, sub, &error));
  g_assert_no_error (error);
  back = um_profile_load (sub, &notice, &error);
  g_assert_no_error (error);
  g_assert_null (notice);
  g_assert_true (um_profile_equal (p, back));
  g_assert_cmpstr (back->reason, ==, p->reason);
  um_test_rmtree (dir);
}

static void
test_atomic_write (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *path = g_build_filename (dir, "f.json", NULL);
  g_autofree char *stale = g_build_filename (dir, ".f.json.tmp-AbC123", NULL);
  g_autofree char *fresh = g_build_filename (dir, ".f.json.tmp-XyZ789", NULL);
  g_autofree char *blocked = g_build_filename (path, "inside-a-file.json", NULL);
  g_autoptr(GError) error = NULL;
  struct utimbuf old = { 1000000000, 1000000000 };
  g_autofree char *t1 = NULL, *t2 = NULL;

  g_assert_true (um_atomic_write (path, "first", 5, &error));
  g_assert_no_error (error);
  t1 = um_test_read_file (path);
  g_assert_cmpstr (t1, ==, "first");
  /* A killed writer's temporary files: the old one is cleaned up, a
   * recent one (maybe another writer's) is left alone. */
  um_test_write_file (stale, "x", 1);
  um_test_write_file (fresh, "y", 1);
  g_assert_cmpint (utime (stale, &old), ==, 0);
  g_assert_true (um_atomic_write (path, "second, longer", 14, &error));
  g_assert_no_error (error);
  t2 = um_test_read_file (path);
  g_assert_cmpstr (t2, ==, "second, longer");
  g_assert_false (g_file_test (stale, G_FILE_TEST_EXISTS));
  g_assert_true (g_file_test (fresh, G_FILE_TEST_EXISTS));
  /* Nothing else is left behind. */
  g_assert_cmpuint (um_test_count_prefix (dir, "."), ==, 1);

  /* Failing is an error, not a crash, and the old file stays. */
  g_assert_false (um_atomic_write (blocked, "z", 1, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_IO);
  um_test_rmtree (dir);
}

static void
test_dir_env (void)
{
  g_autofree char *saved = g_strdup (g_getenv ("UNMASK_CONFIG_DIR"));
  g_autofree char *a = NULL, *b = NULL, *c = NULL;

  g_setenv ("UNMASK_CONFIG_DIR", "/tmp/somewhere-else", TRUE);
  a = um_profile_dir (NULL);
  b = um_profile_path (NULL);
  c = um_profile_dir ("/given");
  g_assert_cmpstr (a, ==, "/tmp/somewhere-else");
  g_assert_cmpstr (b, ==, "/tmp/somewhere-else/optimizer.json");
  g_assert_cmpstr (c, ==, "/given");
  g_unsetenv ("UNMASK_CONFIG_DIR");
  {
    g_autofree char *d = um_profile_dir (NULL);
    g_autofree char *want = g_build_filename (g_get_user_config_dir (), "unmask", NULL);
    g_assert_cmpstr (d, ==, want);
  }
  if (saved != NULL)
    g_setenv ("UNMASK_CONFIG_DIR", saved, TRUE);
}

static void
test_identity (void)
{
  g_autofree char *gguf = um_test_data_path ("tiny-llada-q8_0.gguf");
  g_autofree char *dotted = g_strconcat (model_path, "/.", NULL);
  g_autofree char *a = um_model_identity (model_path);
  g_autofree char *b = um_model_identity (dotted);
  g_autofree char *c = um_model_identity (gguf);
  g_autofree char *d = um_model_identity ("/no/such/model");

  g_assert_cmpuint (strlen (a), ==, 16);
  g_assert_cmpstr (a, ==, b);
  g_assert_cmpstr (a, !=, c);
  g_assert_nonnull (d);
  g_assert_cmpstr (d, !=, a);
}

static void
test_engine_options (void)
{
  g_autoptr(UmProfile) p = full_profile ();
  g_autofree char *saved = g_strdup (g_getenv ("UNMASK_DEVICE"));
  UmEngineOptions o;

  g_unsetenv ("UNMASK_DEVICE");
  um_engine_options_init (&o);
  um_profile_to_engine_options (p, NULL, &o);
  g_assert_cmpint (o.n_threads, ==, 6);
  g_assert_cmpuint (o.memory_budget, ==, (3ull << 30) + 17);
  g_assert_cmpfloat (o.headroom, ==, 0.15);
  g_assert_cmpint (o.device, ==, UM_DEVICE_CUDA);
  g_assert_cmpint (o.gpu_index, ==, 1);
  g_assert_cmpint (o.mem.mode, ==, UM_MEM_EXTREME_AGGRESSIVE);
  g_assert_cmpstr (o.mem.weight_format, ==, "Q4_K_M");
  g_assert_true (o.mem.host_zstd);
  g_assert_cmpint (o.shape.gen_length, ==, 48);
  g_assert_cmpint (o.shape.block_length, ==, 32);

  /* A model with an override gets its own memory options. */
  um_engine_options_init (&o);
  um_profile_to_engine_options (p, "feedfacecafebeef", &o);
  g_assert_cmpint (o.mem.mode, ==, UM_MEM_STANDARD_8BIT);
  g_assert_cmpint (o.mem.row_chunk, ==, 256);
  um_engine_options_init (&o);
  um_profile_to_engine_options (p, "some-other-model", &o);
  g_assert_cmpint (o.mem.mode, ==, UM_MEM_EXTREME_AGGRESSIVE);

  /* UNMASK_DEVICE keeps a GPU out of test runs, profile or not. */
  g_setenv ("UNMASK_DEVICE", "cpu", TRUE);
  um_engine_options_init (&o);
  um_profile_to_engine_options (p, NULL, &o);
  g_assert_cmpint (o.device, ==, UM_DEVICE_CPU);
  if (saved != NULL)
    g_setenv ("UNMASK_DEVICE", saved, TRUE);
  else
    g_unsetenv ("UNMASK_DEVICE");
}

/* ---- backups ---- */

static void
save_version (const char *dir, int n)
{
  g_autoptr(UmProfile) p = um_profile_new_default ();
  g_autoptr(GError) error = NULL;
  p->n_threads = n;
  g_assert_true (um_backups_save (dir, "test", NULL, &error));
  g_assert_no_error (error);
  g_assert_true (um_profile_save (p, dir, &error));
  g_assert_no_error (error);
}

static void
test_backups_limit (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *bdir = g_build_filename (dir, "backups", NULL);
  g_autoptr(GPtrArray) list = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *notice = NULL;
  g_autoptr(UmProfile) def = um_profile_new_default ();
  g_autoptr(UmProfile) original = NULL;
  g_autoptr(UmProfile) latest = NULL;
  const guint n = UM_BACKUPS_KEEP + 10;

  /* No backups yet: an empty list, and nothing to restore. */
  list = um_backups_list (dir, &notice, &error);
  g_assert_no_error (error);
  g_assert_null (notice);
  g_assert_cmpuint (list->len, ==, 0);
  g_clear_pointer (&list, g_ptr_array_unref);
  g_assert_null (um_backups_load (dir, "latest", &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  g_clear_error (&error);

  /* State k (threads k) is backed up by the save after it: the first
   * backup holds the defaults, the k-th holds threads k - 1. */
  for (guint k = 1; k <= n; k++)
    save_version (dir, (int) k);

  list = um_backups_list (dir, &notice, &error);
  g_assert_no_error (error);
  g_assert_null (notice);
  g_assert_cmpuint (list->len, ==, UM_BACKUPS_KEEP + 1);
  for (guint i = 0; i < list->len; i++)
    {
      const UmBackup *b = g_ptr_array_index (list, i);
      g_autofree char *path = g_build_filename (bdir, b->file, NULL);
      g_autoptr(UmProfile) copy = NULL;
      g_assert_true (b->valid);
      g_assert_null (b->problem);
      g_assert_cmpuint (strlen (b->sha256), ==, 64);
      g_assert_true (g_file_test (path, G_FILE_TEST_EXISTS));
      copy = um_backups_load (dir, b->id, &error);
      g_assert_no_error (error);
      /* The original first, then the newest 50, oldest first. */
      g_assert_cmpint (copy->n_threads, ==, i == 0 ? 0 : (int) (n - UM_BACKUPS_KEEP + i - 1));
    }
  g_assert_cmpstr (((UmBackup *) g_ptr_array_index (list, 0))->id, ==, "original");
  g_assert_cmpstr (((UmBackup *) g_ptr_array_index (list, 0))->summary, ==, "standard, auto");
  /* Dropped backups' copies are gone: 51 copies and the manifest. */
  g_assert_cmpuint (um_test_count_prefix (bdir, ""), ==, UM_BACKUPS_KEEP + 2);

  original = um_backups_load (dir, "original", &error);
  g_assert_no_error (error);
  g_assert_true (um_profile_equal (original, def));
  latest = um_backups_load (dir, "latest", &error);
  g_assert_no_error (error);
  g_assert_cmpint (latest->n_threads, ==, (int) n - 1);
  um_test_rmtree (dir);
}

static void
test_restore_undo (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autoptr(UmProfile) a = um_profile_new_default ();
  g_autoptr(UmProfile) b = full_profile ();
  g_autoptr(UmProfile) def = um_profile_new_default ();
  g_autoptr(GError) error = NULL;
  g_auto(UmCommit) c1 = { 0 }, c2 = { 0 }, r1 = { 0 }, r2 = { 0 }, r3 = { 0 };
  g_autofree char *resolved = NULL;
  g_autoptr(UmProfile) now = NULL;
  g_autoptr(GPtrArray) list = NULL;

  um_profile_set_mode (a, UM_MEM_EXTREME_MILD);
  a->written_by = UM_PROFILE_BY_USER;
  /* defaults → a → b, each change backed up. */
  g_assert_true (um_backups_commit (a, dir, "before user → a", NULL, &c1, &error));
  g_assert_no_error (error);
  g_assert_cmpstr (c1.backup_id, ==, "original");
  g_assert_true (um_backups_commit (b, dir, "before user → b", NULL, &c2, &error));
  g_assert_no_error (error);
  g_assert_cmpstr (c2.backup_id, !=, "original");
  resolved = um_backups_resolve (dir, "latest", NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (resolved, ==, c2.backup_id);

  /* Undo the last change: latest holds a. */
  g_assert_true (um_backups_restore (dir, "latest", &r1, NULL, &error));
  g_assert_no_error (error);
  g_assert_nonnull (r1.backup_id);
  g_assert_cmpstr (r1.restored_id, ==, c2.backup_id);
  now = um_profile_load (dir, NULL, &error);
  g_assert_true (um_profile_equal (now, a));
  g_assert_cmpint (now->written_by, ==, UM_PROFILE_BY_RESTORE);
  g_assert_nonnull (strstr (now->reason, c2.backup_id));
  g_clear_pointer (&now, um_profile_free);

  /* The restore is undone with the backup it made: b again. */
  g_assert_true (um_backups_restore (dir, r1.backup_id, &r2, NULL, &error));
  g_assert_no_error (error);
  now = um_profile_load (dir, NULL, &error);
  g_assert_true (um_profile_equal (now, b));
  g_clear_pointer (&now, um_profile_free);

  /* The original: the defaults, before anything was changed. */
  g_assert_true (um_backups_restore (dir, "original", &r3, NULL, &error));
  g_assert_no_error (error);
  now = um_profile_load (dir, NULL, &error);
  g_assert_true (um_profile_equal (now, def));
  g_clear_pointer (&now, um_profile_free);

  list = um_backups_list (dir, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (list->len, ==, 5);
  g_assert_cmpstr (((UmBackup *) g_ptr_array_index (list, 2))->reason, ==, "before restore → latest");
  g_assert_cmpstr (((UmBackup *) g_ptr_array_index (list, 4))->reason, ==, "before restore → original");
  g_assert_cmpstr (((UmBackup *) g_ptr_array_index (list, 4))->id, ==, r3.backup_id);

  /* An unknown backup: an error, and nothing changes. */
  g_assert_false (um_backups_restore (dir, "19990101-000000-001", NULL, NULL, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  g_clear_error (&error);
  now = um_profile_load (dir, NULL, &error);
  g_assert_true (um_profile_equal (now, def));
  g_clear_pointer (&list, g_ptr_array_unref);
  list = um_backups_list (dir, NULL, &error);
  g_assert_cmpuint (list->len, ==, 5);
  um_test_rmtree (dir);
}

static void
test_backups_problems (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *bdir = g_build_filename (dir, "backups", NULL);
  g_autoptr(GPtrArray) list = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *missing_id = NULL, *changed_id = NULL, *good_id = NULL;
  g_autoptr(UmProfile) before = NULL;
  g_autoptr(UmProfile) after = NULL;
  g_autoptr(UmProfile) latest = NULL;

  for (int k = 1; k <= 4; k++)
    save_version (dir, k);
  list = um_backups_list (dir, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (list->len, ==, 4);
  good_id = g_strdup (((UmBackup *) g_ptr_array_index (list, 1))->id);
  changed_id = g_strdup (((UmBackup *) g_ptr_array_index (list, 2))->id);
  missing_id = g_strdup (((UmBackup *) g_ptr_array_index (list, 3))->id);
  {
    g_autofree char *gone = g_build_filename (bdir, ((UmBackup *) g_ptr_array_index (list, 3))->file, NULL);
    g_autofree char *edited = g_build_filename (bdir, ((UmBackup *) g_ptr_array_index (list, 2))->file, NULL);
    g_autofree char *text = um_test_read_file (edited);
    char *n = strstr (text, "\"threads\" : 2");
    g_assert_nonnull (n);
    n[12] = '9';   /* still a valid profile, but not the one backed up */
    um_test_write_file (edited, text, -1);
    g_assert_cmpint (g_unlink (gone), ==, 0);
  }
  g_clear_pointer (&list, g_ptr_array_unref);

  list = um_backups_list (dir, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (list->len, ==, 4);
  for (guint i = 0; i < list->len; i++)
    {
      const UmBackup *b = g_ptr_array_index (list, i);
      g_test_message ("%s: %s", b->id, b->valid ? "valid" : b->problem);
      if (g_str_equal (b->id, missing_id))
        {
          g_assert_false (b->valid);
          g_assert_nonnull (strstr (b->problem, "missing"));
        }
      else if (g_str_equal (b->id, changed_id))
        {
          g_assert_false (b->valid);
          g_assert_nonnull (strstr (b->problem, "checksum"));
        }
      else
        g_assert_true (b->valid);
    }

  /* Never trusted: loading or restoring them fails, latest skips them. */
  g_assert_null (um_backups_load (dir, missing_id, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
  g_clear_error (&error);
  before = um_profile_load (dir, NULL, &error);
  g_assert_false (um_backups_restore (dir, changed_id, NULL, NULL, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
  g_clear_error (&error);
  after = um_profile_load (dir, NULL, &error);
  g_assert_true (um_profile_equal (before, after));
  latest = um_backups_load (dir, "latest", &error);
  g_assert_no_error (error);
  g_assert_cmpint (latest->n_threads, ==, 1);
  {
    g_autoptr(GPtrArray) skipped = NULL;
    g_autofree char *id = um_backups_resolve (dir, "latest", &skipped, &error);
    g_assert_cmpstr (id, ==, good_id);
    /* Each damaged newer entry is named with why, newest first. */
    g_assert_cmpuint (skipped->len, ==, 2);
    g_assert_cmpstr (((UmBackup *) g_ptr_array_index (skipped, 0))->id, ==, missing_id);
    g_assert_nonnull (strstr (((UmBackup *) g_ptr_array_index (skipped, 0))->problem, "missing"));
    g_assert_cmpstr (((UmBackup *) g_ptr_array_index (skipped, 1))->id, ==, changed_id);
    g_assert_nonnull (strstr (((UmBackup *) g_ptr_array_index (skipped, 1))->problem, "checksum"));
  }
  um_test_rmtree (dir);
}

static void
test_manifest_corrupt (void)
{
  const char *bad[] = {
    "{ not json",
    "{\"version\": 1, \"backups\": {}}",
    "{\"version\": 1, \"backups\": [], \"extra\": 1}",
    "{\"version\": 1, \"backups\": [{\"id\": \"x\", \"time\": \"now\", \"reason\": \"\", \"summary\": \"\", "
    "\"sha256\": \"\", \"file\": \"x.json\"}]}",
  };

  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_autofree char *dir = um_test_mkdtemp ();
      g_autofree char *bdir = g_build_filename (dir, "backups", NULL);
      g_autofree char *manifest = g_build_filename (bdir, "manifest.json", NULL);
      g_autoptr(GPtrArray) list = NULL;
      g_autoptr(GPtrArray) again = NULL;
      g_autoptr(GError) error = NULL;
      g_autofree char *notice = NULL;
      g_autofree char *notice2 = NULL;
      g_autoptr(UmProfile) original = NULL;
      g_autoptr(UmProfile) def = um_profile_new_default ();

      for (int k = 1; k <= 3; k++)
        save_version (dir, k);
      um_test_write_file (manifest, bad[i], -1);
      list = um_backups_list (dir, &notice, &error);
      g_assert_no_error (error);
      g_assert_nonnull (notice);
      g_test_message ("%s", notice);
      g_assert_nonnull (strstr (notice, "manifest.json.corrupt-"));
      g_assert_cmpuint (um_test_count_prefix (bdir, "manifest.json.corrupt-"), ==, 1);
      /* Rebuilt from the copies: nothing lost, original still first. */
      g_assert_cmpuint (list->len, ==, 3);
      g_assert_cmpstr (((UmBackup *) g_ptr_array_index (list, 0))->id, ==, "original");
      for (guint k = 0; k < list->len; k++)
        g_assert_true (((UmBackup *) g_ptr_array_index (list, k))->valid);
      original = um_backups_load (dir, "original", &error);
      g_assert_no_error (error);
      g_assert_true (um_profile_equal (original, def));
      /* ... and written back. */
      again = um_backups_list (dir, &notice2, &error);
      g_assert_no_error (error);
      g_assert_null (notice2);
      g_assert_cmpuint (again->len, ==, 3);
      um_test_rmtree (dir);
    }

  /* A newer Unmask's manifest is not damaged: refused, never moved. */
  {
    g_autofree char *dir = um_test_mkdtemp ();
    g_autofree char *bdir = g_build_filename (dir, "backups", NULL);
    g_autofree char *manifest = g_build_filename (bdir, "manifest.json", NULL);
    g_autoptr(GPtrArray) list = NULL;
    g_autoptr(GError) error = NULL;
    g_autofree char *text = NULL;

    for (int k = 1; k <= 3; k++)
      save_version (dir, k);
    um_test_write_file (manifest, "{\"version\": 7, \"backups\": []}", -1);
    list = um_backups_list (dir, NULL, &error);
    g_assert_null (list);
    g_assert_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED);
    g_assert_nonnull (strstr (error->message, "written by a newer Unmask"));
    g_assert_cmpuint (um_test_count_prefix (bdir, "manifest.json.corrupt-"), ==, 0);
    text = um_test_read_file (manifest);
    g_assert_cmpstr (text, ==, "{\"version\": 7, \"backups\": []}");
    um_test_rmtree (dir);
  }

  /* An entry pointing outside the folder is reported, never read. */
  {
    g_autofree char *dir = um_test_mkdtemp ();
    g_autofree char *bdir = g_build_filename (dir, "backups", NULL);
    g_autofree char *manifest = g_build_filename (bdir, "manifest.json", NULL);
    g_autoptr(GPtrArray) list = NULL;
    g_autoptr(GError) error = NULL;
    g_autoptr(UmProfile) p = um_profile_new_default ();

    g_assert_true (um_profile_save (p, dir, &error));
    g_assert_cmpint (g_mkdir (bdir, 0700), ==, 0);
    um_test_write_file (manifest,
                        "{\"version\": 1, \"backups\": [{\"id\": \"original\", \"time\": 1, \"reason\": \"r\", "
                        "\"summary\": \"s\", \"sha256\": \"00\", \"file\": \"../optimizer.json\"}]}", -1);
    list = um_backups_list (dir, NULL, &error);
    g_assert_no_error (error);
    g_assert_cmpuint (list->len, ==, 1);
    g_assert_false (((UmBackup *) g_ptr_array_index (list, 0))->valid);
    g_assert_null (um_backups_load (dir, "original", &error));
    g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
    um_test_rmtree (dir);
  }
}

/* ---- the optimizer ---- */

static void
test_probe (void)
{
  g_autoptr(UmHardware) hw = um_hardware_probe ();

  g_assert_nonnull (hw->gpus);
  g_assert_cmpint (hw->cores, >=, 1);
  g_assert_cmpuint (hw->ram_total, >, 0);
  g_assert_cmpuint (hw->ram_available, <=, hw->ram_total);
  g_assert_nonnull (hw->cpu_name);
  g_assert_cmpuint (strlen (hw->cpu_name), >, 0);
  g_assert_true ((hw->gpus->len == 0) == (hw->why_no_gpu != NULL));
  g_test_message ("%s, %d cores, %u GPUs", hw->cpu_name, hw->cores, hw->gpus->len);
}

static UmHardware *
cpu_only (void)
{
  UmHardware *hw = g_new0 (UmHardware, 1);
  hw->gpus = g_array_new (FALSE, TRUE, sizeof (UmGpuDevice));
  hw->why_no_gpu = g_strdup ("none in this test");
  hw->ram_total = 16ull << 30;
  hw->ram_available = 12ull << 30;
  hw->cores = 4;
  hw->cpu_name = g_strdup ("test CPU");
  return hw;
}

static UmModel *
load_tiny (void)
{
  g_autoptr(GError) error = NULL;
  UmModel *m = um_model_load (model_path, NULL, &error);
  g_assert_no_error (error);
  return m;
}

static void
test_optimizer_small_budget (void)
{
  g_autoptr(UmModel) model = load_tiny ();
  g_autoptr(UmHardware) hw = cpu_only ();
  g_autoptr(UmOptimizeResult) roomy = NULL;
  g_autoptr(UmOptimizeResult) r = NULL;
  g_autoptr(UmOptimizeResult) none = NULL;
  g_autoptr(GError) error = NULL;
  UmPlanShape shape;
  guint64 standard_peak, budget;
  const UmPlan *chosen;

  um_plan_shape_init (&shape);
  shape.prompt_length = 16;
  shape.gen_length = 64;
  shape.block_length = 32;

  /* With all the RAM: standard, planned for the available RAM. */
  roomy = um_optimizer_plan (model, hw, &shape, 0, 0.10, &error);
  g_assert_no_error (error);
  g_assert_false (roomy->cuda);
  g_assert_cmpuint (roomy->capacity, ==, hw->ram_available);
  g_assert_cmpuint (roomy->table->len, ==, UM_MEM_N_MODES);
  g_assert_cmpint (roomy->chosen, ==, UM_MEM_STANDARD);
  g_assert_nonnull (strstr (roomy->reason, "standard"));

  /* A budget standard fills but not with 10 % kept free. */
  standard_peak = g_array_index (roomy->table, UmPlan, UM_MEM_STANDARD).device_peak;
  budget = standard_peak + standard_peak / 20;
  r = um_optimizer_plan (model, hw, &shape, budget, 0.10, &error);
  g_assert_no_error (error);
  g_test_message ("standard needs %" G_GUINT64_FORMAT " B; budget %" G_GUINT64_FORMAT " B: %s", standard_peak,
                  budget, r->reason);
  g_assert_cmpuint (r->capacity, ==, budget);
  g_assert_cmpuint (r->budget, ==, budget);
  g_assert_true (g_array_index (r->table, UmPlan, UM_MEM_STANDARD).fits);   /* but without headroom */
  g_assert_false (um_optimize_result_fits (r, UM_MEM_STANDARD));
  g_assert_cmpint (r->chosen, >, UM_MEM_STANDARD);
  chosen = &g_array_index (r->table, UmPlan, r->chosen);
  g_assert_true (chosen->fits);
  g_assert_cmpuint (chosen->device_peak, <=, budget * 0.9);
  g_assert_true (um_optimize_result_fits (r, r->chosen));
  for (int i = 0; i < r->chosen; i++)
    g_assert_false (um_optimize_result_fits (r, i));
  g_assert_nonnull (strstr (r->reason, um_mem_mode_to_string (r->chosen)));

  /* Taking standard anyway is allowed, and said not to fit. */
  um_optimize_result_choose (r, UM_MEM_STANDARD);
  g_assert_cmpint (r->chosen, ==, UM_MEM_STANDARD);
  g_assert_nonnull (strstr (r->reason, "does not fit"));

  /* A budget nothing fits: no pick, and nothing is written. */
  none = um_optimizer_plan (model, hw, &shape, 4096, 0.10, &error);
  g_assert_no_error (error);
  g_assert_cmpint (none->chosen, ==, -1);
  g_assert_nonnull (strstr (none->reason, "no mode fits"));
  g_assert_null (um_optimizer_profile (none, NULL));
  {
    g_autofree char *dir = um_test_mkdtemp ();
    g_autofree char *path = um_profile_path (dir);
    g_auto(UmCommit) c = { 0 };
    g_assert_false (um_optimizer_apply (none, dir, &c, &error));
    g_assert_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY);
    g_clear_error (&error);
    g_assert_null (c.profile);
    g_assert_null (c.backup_id);
    g_assert_false (g_file_test (path, G_FILE_TEST_EXISTS));
    um_test_rmtree (dir);
  }

  /* A bad headroom is an error. */
  g_assert_null (um_optimizer_plan (model, hw, &shape, 0, 1.5, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
}

/* A GPU (described, not used): planned for its free memory with the CUDA
 * overhead, and the profile asks for CUDA. */
static void
test_optimizer_gpu (void)
{
  g_autoptr(UmModel) model = load_tiny ();
  g_autoptr(UmHardware) hw = cpu_only ();
  g_autoptr(UmOptimizeResult) r = NULL;
  g_autoptr(UmProfile) p = NULL;
  g_autoptr(GError) error = NULL;
  UmGpuDevice d = { 0 };

  g_strlcpy (d.name, "Test GPU", sizeof d.name);
  d.total_bytes = 8ull << 30;
  d.free_bytes = 7ull << 30;
  g_array_append_val (hw->gpus, d);
  g_clear_pointer (&hw->why_no_gpu, g_free);
  r = um_optimizer_plan (model, hw, NULL, 0, 0.10, &error);
  g_assert_no_error (error);
  g_assert_true (r->cuda);
  g_assert_cmpuint (r->capacity, ==, d.free_bytes);
  g_assert_cmpint (r->chosen, ==, UM_MEM_STANDARD);
  g_assert_cmpuint (g_array_index (r->table, UmPlan, 0).device[UM_PLAN_BACKEND], >, 0);
  p = um_optimizer_profile (r, NULL);
  g_assert_cmpint (p->device, ==, UM_DEVICE_AUTO);
  g_assert_cmpint (p->written_by, ==, UM_PROFILE_BY_OPTIMIZE);
  g_assert_cmpuint (p->memory_budget, ==, 0);
  /* The headroom the pick kept goes to the engine with the profile. */
  g_assert_cmpfloat (p->headroom, ==, 0.10);
}

static void
test_optimizer_apply (void)
{
  g_autoptr(UmModel) model = load_tiny ();
  g_autoptr(UmHardware) hw = cpu_only ();
  g_autoptr(UmOptimizeResult) r = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = um_test_mkdtemp ();
  g_auto(UmCommit) c1 = { 0 }, c2 = { 0 };
  const UmProfile *applied;
  g_autoptr(UmProfile) on_disk = NULL;
  g_autoptr(UmProfile) def = um_profile_new_default ();
  g_autoptr(UmProfile) first = NULL;
  g_autoptr(GPtrArray) list = NULL;
  g_autofree char *notice = NULL;
  guint64 budget;

  r = um_optimizer_plan (model, hw, NULL, 0, 0.10, &error);
  g_assert_no_error (error);
  budget = g_array_index (r->table, UmPlan, UM_MEM_STANDARD).device_peak;
  g_clear_pointer (&r, um_optimize_result_free);
  r = um_optimizer_plan (model, hw, NULL, budget, 0.10, &error);
  g_assert_no_error (error);
  g_assert_cmpint (r->chosen, >, 0);

  g_assert_true (um_optimizer_apply (r, dir, &c1, &error));
  g_assert_no_error (error);
  g_assert_cmpstr (c1.backup_id, ==, "original");
  g_assert_false (c1.unchanged);
  applied = c1.profile;
  g_assert_cmpint (applied->mem.mode, ==, r->chosen);
  g_assert_cmpint (applied->device, ==, UM_DEVICE_CPU);
  g_assert_cmpuint (applied->memory_budget, ==, budget);
  g_assert_cmpint (applied->written_by, ==, UM_PROFILE_BY_OPTIMIZE);
  g_assert_cmpint (applied->written_at, >, 0);
  g_assert_nonnull (strstr (applied->reason, "optimize → "));
  if (um_mem_mode_is_extreme (applied->mem.mode))
    {
      g_assert_cmpint (applied->limit_gen_length, ==, 64);
      g_assert_cmpint (applied->default_gen_length, ==, 64);
    }
  on_disk = um_profile_load (dir, &notice, &error);
  g_assert_no_error (error);
  g_assert_null (notice);
  g_assert_true (um_profile_equal (on_disk, applied));

  /* Again: nothing changes, so nothing is written and no backup pushes
   * real history out. */
  g_assert_true (um_optimizer_apply (r, dir, &c2, &error));
  g_assert_no_error (error);
  g_assert_true (c2.unchanged);
  g_assert_null (c2.backup_id);
  g_assert_true (um_profile_equal (c2.profile, applied));
  list = um_backups_list (dir, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (list->len, ==, 1);
  g_assert_nonnull (strstr (((UmBackup *) g_ptr_array_index (list, 0))->reason, "before optimize → "));
  first = um_backups_load (dir, "original", &error);
  g_assert_true (um_profile_equal (first, def));
  um_test_rmtree (dir);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  model_path = um_test_data_path ("tiny-llada");

  g_test_add_func ("/profile/defaults", test_defaults);
  g_test_add_func ("/profile/round-trip", test_round_trip);
  g_test_add_func ("/profile/strict", test_strict);
  g_test_add_func ("/profile/load-bad", test_load_bad);
  g_test_add_func ("/profile/load-missing", test_load_missing);
  g_test_add_func ("/profile/save-load", test_save_load);
  g_test_add_func ("/profile/atomic-write", test_atomic_write);
  g_test_add_func ("/profile/dir-env", test_dir_env);
  g_test_add_func ("/profile/identity", test_identity);
  g_test_add_func ("/profile/engine-options", test_engine_options);
  g_test_add_func ("/backups/limit", test_backups_limit);
  g_test_add_func ("/backups/restore-undo", test_restore_undo);
  g_test_add_func ("/backups/problems", test_backups_problems);
  g_test_add_func ("/backups/manifest-corrupt", test_manifest_corrupt);
  g_test_add_func ("/optimizer/probe", test_probe);
  g_test_add_func ("/optimizer/small-budget", test_optimizer_small_budget);
  g_test_add_func ("/optimizer/gpu", test_optimizer_gpu);
  g_test_add_func ("/optimizer/apply", test_optimizer_apply);
  return g_test_run ();
}

/* test-config-newer.c — files of the optimizer's profile and history that
 * this version must not lose or change behind the user's back:
 * - written by a newer Unmask (a higher "version"): reads give the
 *   defaults and leave every file as it is; commits, backups and restores
 *   refuse, naming it; its own backup copies are never pruned;
 * - a damaged profile is moved aside only by a commit, under the lock;
 * - the profile keeps its mode bits, and a symlinked profile stays a
 *   symlink (its target gets the new text);
 * - a directory fsync that fails fails the write.
 *
 * The fsync failure is real: this program defines fsync (), which the
 * backend's calls (linked into it) reach, and makes it fail on a directory
 * when asked. */
#include <errno.h>
#include <fcntl.h>
#include <glib/gstdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "um-backups.h"
#include "um-error.h"
#include "um-profile.h"
#include "um-test-util.h"

/* ---- fsync, failing on directories when asked ---- */

static gint fail_dir_fsync;
static gint dir_fsyncs;

int fsync (int fd);

int
fsync (int fd)
{
  struct stat st;

  if (fstat (fd, &st) == 0 && S_ISDIR (st.st_mode))
    {
      g_atomic_int_inc (&dir_fsyncs);
      if (g_atomic_int_get (&fail_dir_fsync))
        {
          errno = EIO;
          return -1;
        }
    }
  return (int) syscall (SYS_fsync, fd);
}

/* ---- the folder's files ---- */

/* Every file under @dir (relative name → contents), the lock aside. */
static GHashTable *
snapshot (const char *dir)
{
  GHashTable *t = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  const char *sub[] = { "", "backups", NULL };

  for (guint i = 0; sub[i]; i++)
    {
      g_autofree char *d = g_build_filename (dir, sub[i], NULL);
      g_autoptr(GDir) gd = g_dir_open (d, 0, NULL);
      const char *name;

      while (gd != NULL && (name = g_dir_read_name (gd)) != NULL)
        {
          g_autofree char *path = g_build_filename (d, name, NULL);
          char *text = NULL;
          if (g_str_equal (name, ".optimizer.lock") || g_file_test (path, G_FILE_TEST_IS_DIR))
            continue;
          g_assert_true (g_file_get_contents (path, &text, NULL, NULL));
          g_hash_table_insert (t, g_build_filename (sub[i], name, NULL), text);
        }
    }
  return t;
}

/* Takes @after. */
static void
assert_same (GHashTable *before, GHashTable *after_take, const char *what)
{
  g_autoptr(GHashTable) after = after_take;
  GHashTableIter it;
  gpointer k, v;

  g_hash_table_iter_init (&it, before);
  while (g_hash_table_iter_next (&it, &k, &v))
    {
      const char *now = g_hash_table_lookup (after, k);
      if (now == NULL)
        g_error ("%s: %s is gone", what, (char *) k);
      if (strcmp (now, v) != 0)
        g_error ("%s: %s changed", what, (char *) k);
    }
  g_hash_table_iter_init (&it, after);
  while (g_hash_table_iter_next (&it, &k, &v))
    if (!g_hash_table_contains (before, k))
      g_error ("%s: %s appeared", what, (char *) k);
}

static void
commit_mode (const char *dir, UmMemMode mode)
{
  g_autoptr(UmProfile) p = um_profile_new_default ();
  g_autoptr(GError) error = NULL;
  g_auto(UmCommit) c = { 0 };

  um_profile_set_mode (p, mode);
  p->written_by = UM_PROFILE_BY_USER;
  g_assert_true (um_backups_commit (p, dir, "test", NULL, &c, &error));
  g_assert_no_error (error);
}

/* Replaces "version": N by @v in the file's text. */
static void
set_version (const char *path, int v)
{
  g_autofree char *text = um_test_read_file (path);
  g_autoptr(GRegex) re = g_regex_new ("\"version\"\\s*:\\s*[0-9]+", 0, 0, NULL);
  g_autofree char *with = g_strdup_printf ("\"version\": %d", v);
  g_autofree char *out = g_regex_replace_literal (re, text, -1, 0, with, 0, NULL);

  g_assert_cmpstr (out, !=, text);
  um_test_write_file (path, out, -1);
}

static gboolean
edit_budget (UmProfile *p, gpointer data, GError **error)
{
  p->memory_budget = 1 << 30;
  return TRUE;
}

/* History made by this version; then a newer Unmask sets the manifest and
 * the profile to version 3 and adds a backup copy of its own. */
static char *
newer_history (void)
{
  char *dir = um_test_mkdtemp ();
  g_autofree char *profile = um_profile_path (dir);
  g_autofree char *manifest = g_build_filename (dir, "backups", "manifest.json", NULL);
  g_autofree char *copy = g_build_filename (dir, "backups", "20991231-235959-001.json", NULL);
  g_autofree char *text = NULL;

  commit_mode (dir, UM_MEM_EXTREME_MILD);
  commit_mode (dir, UM_MEM_STANDARD_8BIT);
  set_version (manifest, 3);
  text = um_test_read_file (profile);
  um_test_write_file (copy, text, -1);
  set_version (copy, 3);
  set_version (profile, 3);
  return dir;
}

static void
test_newer_refused (void)
{
  g_autofree char *dir = newer_history ();
  g_autoptr(GHashTable) before = snapshot (dir);
  g_autoptr(UmProfile) p = um_profile_new_default ();

  g_test_message ("%u files", g_hash_table_size (before));
  g_assert_cmpuint (g_hash_table_size (before), ==, 5);   /* profile, manifest, original, 1 backup, the newer copy */
  um_profile_set_mode (p, UM_MEM_EXTREME_AGGRESSIVE);
  /* Every change refuses, naming why. */
  {
    g_autoptr(GError) error = NULL;
    g_auto(UmCommit) c = { 0 };
    g_assert_false (um_backups_commit (p, dir, "test", NULL, &c, &error));
    g_test_message ("commit: %s", error->message);
    g_assert_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED);
    g_assert_nonnull (strstr (error->message, "written by a newer Unmask"));
    assert_same (before, snapshot (dir), "commit");
  }
  {
    g_autoptr(GError) error = NULL;
    g_auto(UmCommit) c = { 0 };
    g_assert_false (um_backups_update (dir, "test", edit_budget, NULL, &c, &error));
    g_assert_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED);
    g_assert_nonnull (strstr (error->message, "written by a newer Unmask"));
    assert_same (before, snapshot (dir), "update");
  }
  {
    g_autoptr(GError) error = NULL;
    g_autofree char *id = NULL;
    g_assert_false (um_backups_save (dir, "test", &id, &error));
    g_assert_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED);
    assert_same (before, snapshot (dir), "save");
  }
  {
    g_autoptr(GError) error = NULL;
    g_auto(UmCommit) c = { 0 };
    g_assert_false (um_backups_restore (dir, "original", &c, NULL, &error));
    g_assert_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED);
    g_assert_nonnull (strstr (error->message, "written by a newer Unmask"));
    assert_same (before, snapshot (dir), "restore");
  }
  um_test_rmtree (dir);
}

/* Reading gives the defaults, says why, and touches nothing. */
static void
test_newer_read (void)
{
  g_autofree char *dir = newer_history ();
  g_autoptr(GHashTable) before = snapshot (dir);
  g_autoptr(UmProfile) def = um_profile_new_default ();

  {
    g_autofree char *notice = NULL;
    g_autoptr(GError) error = NULL;
    g_autoptr(UmProfile) p = um_profile_load (dir, &notice, &error);
    g_assert_no_error (error);
    g_assert_nonnull (p);
    g_assert_true (um_profile_equal (p, def));
    g_assert_nonnull (notice);
    g_test_message ("load: %s", notice);
    g_assert_nonnull (strstr (notice, "written by a newer Unmask"));
  }
  {
    g_autoptr(UmProfile) p = um_profile_load (dir, NULL, NULL);
    g_assert_true (um_profile_equal (p, def));
  }
  {
    g_autofree char *notice = NULL;
    g_autoptr(GError) error = NULL;
    g_autoptr(GPtrArray) list = um_backups_list (dir, &notice, &error);
    g_assert_null (list);
    g_assert_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED);
    g_assert_nonnull (strstr (error->message, "written by a newer Unmask"));
  }
  assert_same (before, snapshot (dir), "reads");
  um_test_rmtree (dir);
}

/* Only the profile is newer: this version's history goes on, and the
 * newer copy in backups/ is never pruned (it reads as no profile of ours). */
static void
test_newer_copy_kept (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *copy = g_build_filename (dir, "backups", "20200101-000000-001.json", NULL);
  g_autofree char *profile = um_profile_path (dir);
  g_autofree char *text = NULL;

  commit_mode (dir, UM_MEM_EXTREME_MILD);
  text = um_test_read_file (profile);
  um_test_write_file (copy, text, -1);
  set_version (copy, 3);
  g_free (text);
  text = um_test_read_file (copy);
  for (int k = 0; k < UM_BACKUPS_KEEP + 4; k++)
    commit_mode (dir, k % 2 ? UM_MEM_STANDARD : UM_MEM_EXTREME_MODERATE);
  g_assert_true (g_file_test (copy, G_FILE_TEST_EXISTS));
  {
    g_autofree char *now = um_test_read_file (copy);
    g_assert_cmpstr (now, ==, text);
  }
  um_test_rmtree (dir);
}

/* A damaged profile: a plain load gives the defaults and leaves it; the
 * next commit (under the lock) moves it aside and says so. */
static void
test_damaged_moved_by_commit_only (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *profile = um_profile_path (dir);
  g_autoptr(UmProfile) def = um_profile_new_default ();

  um_test_write_file (profile, "{\"version\":1,", -1);
  {
    g_autofree char *notice = NULL;
    g_autoptr(UmProfile) p = um_profile_load (dir, &notice, NULL);
    g_assert_true (um_profile_equal (p, def));
    g_assert_nonnull (notice);
    g_test_message ("load: %s", notice);
    g_assert_true (g_file_test (profile, G_FILE_TEST_EXISTS));
    g_assert_cmpuint (um_test_count_prefix (dir, "optimizer.json.corrupt-"), ==, 0);
  }
  {
    g_autoptr(UmProfile) p = um_profile_new_default ();
    g_autoptr(GError) error = NULL;
    g_auto(UmCommit) c = { 0 };
    um_profile_set_mode (p, UM_MEM_EXTREME_MILD);
    g_assert_true (um_backups_commit (p, dir, "test", NULL, &c, &error));
    g_assert_no_error (error);
    g_assert_nonnull (c.notice);
    g_test_message ("commit: %s", c.notice);
    g_assert_cmpuint (um_test_count_prefix (dir, "optimizer.json.corrupt-"), ==, 1);
  }
  um_test_rmtree (dir);
}

static void
test_mode_kept (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *profile = um_profile_path (dir);
  GStatBuf st;

  commit_mode (dir, UM_MEM_EXTREME_MILD);
  g_assert_cmpint (g_chmod (profile, 0600), ==, 0);
  commit_mode (dir, UM_MEM_STANDARD_8BIT);
  g_assert_cmpint (g_stat (profile, &st), ==, 0);
  g_test_message ("mode after a commit: %o", st.st_mode & 0777);
  g_assert_cmpint (st.st_mode & 0777, ==, 0600);
  g_assert_cmpint (g_chmod (profile, 0640), ==, 0);
  commit_mode (dir, UM_MEM_EXTREME_MILD);
  g_assert_cmpint (g_stat (profile, &st), ==, 0);
  g_assert_cmpint (st.st_mode & 0777, ==, 0640);
  um_test_rmtree (dir);
}

static void
test_symlink_kept (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *dots = g_build_filename (dir, "dotfiles", NULL);
  g_autofree char *conf = g_build_filename (dir, "config", NULL);
  g_autofree char *target = g_build_filename (dots, "optimizer.json", NULL);
  g_autofree char *profile = um_profile_path (conf);
  g_autofree char *link = NULL;
  g_autoptr(UmProfile) p = NULL;
  GStatBuf st;

  g_assert_cmpint (g_mkdir_with_parents (dots, 0700), ==, 0);
  g_assert_cmpint (g_mkdir_with_parents (conf, 0700), ==, 0);
  commit_mode (dots, UM_MEM_EXTREME_MILD);
  g_assert_cmpint (symlink ("../dotfiles/optimizer.json", profile), ==, 0);
  commit_mode (conf, UM_MEM_EXTREME_AGGRESSIVE);
  g_assert_cmpint (g_lstat (profile, &st), ==, 0);
  g_assert_true (S_ISLNK (st.st_mode));
  link = g_file_read_link (profile, NULL);
  g_assert_cmpstr (link, ==, "../dotfiles/optimizer.json");
  /* The target holds the change. */
  p = um_profile_load (dots, NULL, NULL);
  g_assert_cmpint (p->mem.mode, ==, UM_MEM_EXTREME_AGGRESSIVE);
  g_assert_cmpuint (um_test_count_prefix (dots, ".optimizer.json.tmp-"), ==, 0);
  um_test_rmtree (dir);
}

static void
test_dir_fsync_checked (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *path = g_build_filename (dir, "f.json", NULL);
  g_autoptr(GError) error = NULL;
  gboolean ok;

  g_atomic_int_set (&dir_fsyncs, 0);
  g_assert_true (um_atomic_write (path, "{}", 2, &error));
  g_assert_no_error (error);
  g_assert_cmpint (g_atomic_int_get (&dir_fsyncs), >, 0);   /* the folder is synced */
  g_atomic_int_set (&fail_dir_fsync, 1);
  ok = um_atomic_write (path, "{\"a\":1}", 7, &error);
  g_atomic_int_set (&fail_dir_fsync, 0);
  g_assert_false (ok);
  g_assert_error (error, UM_ERROR, UM_ERROR_IO);
  g_test_message ("%s", error->message);
  um_test_rmtree (dir);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/config-newer/refused", test_newer_refused);
  g_test_add_func ("/config-newer/read", test_newer_read);
  g_test_add_func ("/config-newer/copy-kept", test_newer_copy_kept);
  g_test_add_func ("/config/damaged-moved-by-commit-only", test_damaged_moved_by_commit_only);
  g_test_add_func ("/config/mode-kept", test_mode_kept);
  g_test_add_func ("/config/symlink-kept", test_symlink_kept);
  g_test_add_func ("/config/dir-fsync-checked", test_dir_fsync_checked);
  return g_test_run ();
}

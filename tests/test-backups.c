/* The optimizer's history loses nothing: a lost manifest is rebuilt and
 * "original" is never written over; a change built on an old read is
 * refused (and um_backups_update builds on the latest); a commit that
 * changes nothing writes nothing; a commit stopped at any stage (a child
 * process that _exits at that stage) leaves the profile and the history as
 * if it had not started. */
#include <glib/gstdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "um-backups.h"
#include "um-error.h"
#include "um-json.h"
#include "um-profile.h"
#include "um-test-util.h"

static UmProfile *
version (int k)
{
  UmProfile *p = um_profile_new_default ();

  um_profile_set_mode (p, (UmMemMode) (k % UM_MEM_N_MODES));
  p->memory_budget = (guint64) (k + 1) << 20;
  p->written_by = UM_PROFILE_BY_USER;
  p->written_at = 1764000000 + k;
  p->reason = g_strdup_printf ("version %d", k);
  return p;
}

static void
commit_version (const char *dir, int k)
{
  g_autoptr(UmProfile) p = version (k);
  g_autoptr(GError) error = NULL;
  g_auto(UmCommit) c = { 0 };

  g_assert_true (um_backups_commit (p, dir, "test", NULL, &c, &error));
  g_assert_no_error (error);
  g_assert_false (c.unchanged);
}

static char *
file_in (const char *dir, const char *a, const char *b)
{
  return g_build_filename (dir, a, b, NULL);
}

/* The manifest gone (a kill after a damaged one was moved aside, a failed
 * rewrite, a user's rm): rebuilt from the copies, and the next commit does
 * not write its copy as "original" over the real one. */
static void
test_manifest_missing (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *manifest = file_in (dir, "backups", "manifest.json");
  g_autofree char *original = file_in (dir, "backups", "original.json");
  g_autofree char *first = NULL, *after = NULL, *notice = NULL;
  g_autoptr(GPtrArray) list = NULL;
  g_autoptr(GError) error = NULL;

  for (int k = 1; k <= 3; k++)
    commit_version (dir, k);
  first = um_test_read_file (original);
  g_assert_cmpint (g_unlink (manifest), ==, 0);

  list = um_backups_list (dir, &notice, &error);
  g_assert_no_error (error);
  g_assert_nonnull (notice);
  g_test_message ("%s", notice);
  g_assert_nonnull (strstr (notice, "missing"));
  g_assert_cmpuint (list->len, ==, 3);
  g_assert_cmpstr (((UmBackup *) g_ptr_array_index (list, 0))->id, ==, "original");
  g_clear_pointer (&list, g_ptr_array_unref);

  /* And when the folder is gone between two commits, with no list call. */
  g_assert_cmpint (g_unlink (manifest), ==, 0);
  commit_version (dir, 4);
  after = um_test_read_file (original);
  g_assert_cmpstr (after, ==, first);
  list = um_backups_list (dir, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (list->len, ==, 4);
  for (guint i = 0; i < list->len; i++)
    g_assert_true (((UmBackup *) g_ptr_array_index (list, i))->valid);
  um_test_rmtree (dir);
}

/* An original.json the manifest does not name (lost from it, or unreadable
 * so the rebuild skipped it) is never written over. */
static void
test_original_never_overwritten (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *bdir = g_build_filename (dir, "backups", NULL);
  g_autofree char *manifest = file_in (dir, "backups", "manifest.json");
  g_autofree char *original = file_in (dir, "backups", "original.json");
  const char *damaged = "{\"version\": 1, \"memory\": oops";
  g_autoptr(GPtrArray) list = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *text = NULL;

  g_assert_cmpint (g_mkdir_with_parents (bdir, 0700), ==, 0);
  um_test_write_file (original, damaged, -1);
  commit_version (dir, 1);
  commit_version (dir, 2);
  text = um_test_read_file (original);
  g_assert_cmpstr (text, ==, damaged);

  /* A readable original the manifest lost is taken back. */
  g_clear_pointer (&text, g_free);
  {
    g_autoptr(UmProfile) v = version (0);
    g_autofree char *json = um_profile_to_json (v);
    um_test_write_file (original, json, -1);
  }
  um_test_write_file (manifest, "{\"version\": 2, \"backups\": []}", -1);
  list = um_backups_list (dir, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (list->len, ==, 1);
  g_assert_cmpstr (((UmBackup *) g_ptr_array_index (list, 0))->id, ==, "original");
  um_test_rmtree (dir);
}

/* A change built on what was read earlier is refused once someone else
 * has committed; nothing is written. um_backups_update builds on the latest. */
static void
test_conflict (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *path = um_profile_path (dir);
  g_autofree char *rev = NULL, *on_disk = NULL, *rev2 = NULL, *rev_now = NULL, *rev_after = NULL;
  g_autoptr(UmProfile) seen = NULL;
  g_autoptr(UmProfile) mine = version (7);
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) list = NULL;
  g_auto(UmCommit) c = { 0 };

  commit_version (dir, 1);
  seen = um_profile_load_full (dir, NULL, &rev, NULL, &error);
  g_assert_no_error (error);
  rev_now = um_profile_current_revision (dir, NULL);
  g_assert_cmpstr (rev, ==, rev_now);
  /* unmask-cli commits meanwhile. */
  commit_version (dir, 2);
  on_disk = um_test_read_file (path);

  g_assert_false (um_backups_commit (mine, dir, "app", rev, &c, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_CONFLICT);
  g_test_message ("%s", error->message);
  g_assert_nonnull (strstr (error->message, "extreme-mild"));
  g_clear_error (&error);
  g_assert_null (c.backup_id);
  {
    g_autofree char *now = um_test_read_file (path);
    g_assert_cmpstr (now, ==, on_disk);
  }
  list = um_backups_list (dir, NULL, &error);
  g_assert_cmpuint (list->len, ==, 2);

  /* Against the new revision it goes through. */
  rev2 = um_profile_current_revision (dir, NULL);
  g_assert_true (um_backups_commit (mine, dir, "app", rev2, &c, &error));
  g_assert_no_error (error);
  rev_after = um_profile_current_revision (dir, NULL);
  g_assert_cmpstr (c.revision, ==, rev_after);
  um_test_rmtree (dir);
}

/* The file turned damaged before a commit: moved aside with the same notice
 * a load gives, even when the commit is then refused as a conflict. */
static void
test_commit_damaged (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *path = um_profile_path (dir);
  g_autofree char *rev = NULL;
  g_autoptr(UmProfile) mine = version (3);
  g_autoptr(GError) error = NULL;

  commit_version (dir, 1);
  rev = um_profile_current_revision (dir, NULL);
  um_test_write_file (path, "{\"version\": 1, \"threads\": [[[", -1);
  {
    g_auto(UmCommit) c = { 0 };
    g_assert_false (um_backups_commit (mine, dir, "app", rev, &c, &error));
    g_assert_error (error, UM_ERROR, UM_ERROR_CONFLICT);
    g_clear_error (&error);
    g_assert_nonnull (c.notice);
    g_assert_nonnull (strstr (c.notice, "optimizer.json.corrupt-"));
    g_assert_null (c.backup_id);
  }
  um_test_write_file (path, "not json", -1);
  {
    g_auto(UmCommit) c = { 0 };
    g_assert_true (um_backups_commit (mine, dir, "cli", NULL, &c, &error));
    g_assert_no_error (error);
    g_assert_nonnull (c.notice);
    g_assert_nonnull (c.backup_id);
  }
  g_assert_cmpuint (um_test_count_prefix (dir, "optimizer.json.corrupt-"), ==, 2);
  um_test_rmtree (dir);
}

static gboolean
add_threads (UmProfile *p, gpointer user_data, GError **error)
{
  p->n_threads += GPOINTER_TO_INT (user_data);
  return TRUE;
}

static gboolean
refuse (UmProfile *p, gpointer user_data, GError **error)
{
  g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "no");
  return FALSE;
}

static void
test_update (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autoptr(GError) error = NULL;
  g_autoptr(UmProfile) now = NULL;

  for (int i = 0; i < 5; i++)
    {
      g_auto(UmCommit) c = { 0 };
      g_assert_true (um_backups_update (dir, "add", add_threads, GINT_TO_POINTER (2), &c, &error));
      g_assert_no_error (error);
      g_assert_cmpint (c.profile->n_threads, ==, 2 * (i + 1));
    }
  now = um_profile_load (dir, NULL, &error);
  g_assert_cmpint (now->n_threads, ==, 10);
  {
    g_auto(UmCommit) c = { 0 };
    g_assert_false (um_backups_update (dir, "no", refuse, NULL, &c, &error));
    g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  }
  um_test_rmtree (dir);
}

/* Nothing to change: nothing written, no backup, history kept. */
static void
test_noop (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *bdir = g_build_filename (dir, "backups", NULL);
  g_autofree char *path = um_profile_path (dir);
  g_autofree char *before = NULL, *after = NULL;
  g_autoptr(GPtrArray) list = NULL;
  g_autoptr(GError) error = NULL;

  for (int k = 1; k <= 3; k++)
    commit_version (dir, k);
  before = um_test_read_file (path);
  for (int i = 0; i < UM_BACKUPS_KEEP + 10; i++)
    {
      /* Same settings, another reason and time: still nothing to write. */
      g_autoptr(UmProfile) p = version (3);
      g_auto(UmCommit) c = { 0 };
      p->written_at += i + 1;
      g_free (p->reason);
      p->reason = g_strdup ("again");
      g_assert_true (um_backups_commit (p, dir, "again", NULL, &c, &error));
      g_assert_no_error (error);
      g_assert_true (c.unchanged);
      g_assert_null (c.backup_id);
    }
  after = um_test_read_file (path);
  g_assert_cmpstr (after, ==, before);
  list = um_backups_list (dir, NULL, &error);
  g_assert_cmpuint (list->len, ==, 3);
  g_assert_cmpuint (um_test_count_prefix (bdir, ""), ==, 4);
  um_test_rmtree (dir);
}

/* ---- a commit stopped at each of its stages ---- */

static const char *stop_at;

static void
stop_hook (const char *stage, gpointer user_data)
{
  if (g_strcmp0 (stage, stop_at) == 0)
    _exit (0);
}

/* Commits version @k in a child that dies at @stage. */
static void
commit_stopped_at (const char *dir, int k, const char *stage)
{
  pid_t pid;
  int status;

  fflush (NULL);
  pid = fork ();
  g_assert_cmpint (pid, >=, 0);
  if (pid == 0)
    {
      g_autoptr(UmProfile) p = version (k);
      stop_at = stage;
      um_backups_set_stage_hook (stop_hook, NULL);
      um_backups_commit (p, dir, "stopped", NULL, NULL, NULL);
      _exit (3);   /* the stage never came */
    }
  g_assert_cmpint (waitpid (pid, &status, 0), ==, pid);
  g_assert_true (WIFEXITED (status));
  g_assert_cmpint (WEXITSTATUS (status), ==, 0);
}

static void
test_stopped_commits (void)
{
  const char *stages[] = { "locked", "copy", "manifest", "profile", "pruned" };

  for (guint s = 0; s < G_N_ELEMENTS (stages); s++)
    {
      g_autofree char *dir = um_test_mkdtemp ();
      g_autofree char *bdir = g_build_filename (dir, "backups", NULL);
      g_autofree char *path = um_profile_path (dir);
      g_autofree char *before = NULL, *newest_before = NULL, *now = NULL;
      g_autoptr(GPtrArray) list = NULL;
      g_autoptr(GError) error = NULL;
      gboolean happened = s >= 3;   /* the profile was written */
      const UmBackup *newest;

      for (int k = 1; k <= 3; k++)
        commit_version (dir, k);
      before = um_test_read_file (path);
      list = um_backups_list (dir, NULL, &error);
      newest_before = g_strdup (((UmBackup *) g_ptr_array_index (list, list->len - 1))->id);
      g_clear_pointer (&list, g_ptr_array_unref);

      commit_stopped_at (dir, 4, stages[s]);
      now = um_test_read_file (path);
      list = um_backups_list (dir, NULL, &error);
      g_assert_no_error (error);
      newest = g_ptr_array_index (list, list->len - 1);
      g_test_message ("stopped at %s: %u entries, newest %s", stages[s], list->len, newest->id);
      if (happened)
        {
          /* Done but for the pruning: version 4, the backup of 3 newest. */
          g_autoptr(UmProfile) copy = um_backups_load (dir, newest->id, &error);
          g_assert_cmpstr (now, !=, before);
          g_assert_cmpuint (list->len, ==, 4);
          g_assert_cmpint (copy->memory_budget, ==, 4 << 20);
        }
      else
        {
          /* As if it had not started: the stray copy or the entry of a
           * commit whose profile never came is not listed. */
          g_assert_cmpstr (now, ==, before);
          g_assert_cmpuint (list->len, ==, 3);
          g_assert_cmpstr (newest->id, ==, newest_before);
        }
      /* The next commit goes on from there and leaves no stray files. */
      g_clear_pointer (&list, g_ptr_array_unref);
      commit_version (dir, 5);
      list = um_backups_list (dir, NULL, &error);
      g_assert_cmpuint (list->len, ==, happened ? 5 : 4);
      /* The copies the list names and the manifest: no strays. */
      g_assert_cmpuint (um_test_count_prefix (bdir, "") - um_test_count_prefix (bdir, "."), ==, list->len + 1);
      for (guint i = 0; i < list->len; i++)
        g_assert_true (((UmBackup *) g_ptr_array_index (list, i))->valid);
      um_test_rmtree (dir);
    }
}

/* Hostile manifests: moved aside and rebuilt, never a crash. */
static void
test_manifest_hostile (void)
{
  g_autofree char *deep = NULL;
  GString *s = g_string_new (NULL);

  for (int i = 0; i < 200000; i++)
    g_string_append_c (s, '[');
  deep = g_string_free (s, FALSE);
  {
    const char *cases[] = {
      deep,
      "{\"version\": 2, \"backups\": [], \"backups\": []}",
      "{\"version\": 99999999999999999999, \"backups\": []}",
      "{\"version\": 2, \"backups\": [{\"id\": \"x\", \"time\": 1e999}]}",
      "{\"version\": \"2\", \"backups\": []}",
      "{\"version\": 2, \"backups\": [\"\xff\xfe\"]}",
    };
    for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
      {
        g_autofree char *dir = um_test_mkdtemp ();
        g_autofree char *manifest = file_in (dir, "backups", "manifest.json");
        g_autoptr(GPtrArray) list = NULL;
        g_autoptr(GError) error = NULL;
        g_autofree char *notice = NULL;

        for (int k = 1; k <= 2; k++)
          commit_version (dir, k);
        um_test_write_file (manifest, cases[i], -1);
        list = um_backups_list (dir, &notice, &error);
        g_assert_no_error (error);
        g_assert_nonnull (notice);
        g_test_message ("%.200s", notice);
        g_assert_cmpuint (list->len, ==, 2);
        um_test_rmtree (dir);
      }
  }
  /* A NUL byte inside. */
  {
    g_autofree char *dir = um_test_mkdtemp ();
    g_autofree char *manifest = file_in (dir, "backups", "manifest.json");
    g_autoptr(GPtrArray) list = NULL;
    g_autoptr(GError) error = NULL;
    g_autofree char *notice = NULL;
    commit_version (dir, 1);
    um_test_write_file (manifest, "{\"version\": 2,\0 \"backups\": []}", 30);
    list = um_backups_list (dir, &notice, &error);
    g_assert_no_error (error);
    g_assert_nonnull (strstr (notice, "NUL"));
    um_test_rmtree (dir);
  }
}

/* Hostile profiles: moved aside with a notice, the defaults used. */
static void
test_profile_hostile (void)
{
  g_autofree char *deep = NULL;
  GString *s = g_string_new ("{\"version\": 1, \"reason\": ");

  for (int i = 0; i < 200000; i++)
    g_string_append (s, "{\"a\":");
  deep = g_string_free (s, FALSE);
  {
    const char *cases[] = {
      deep,
      "{\"version\": 1, \"threads\": 2, \"threads\": 3}",
      "{\"version\": 1, \"memory_budget\": 1e999}",
      "{\"version\": 1, \"memory_budget\": 99999999999999999999}",
      "{\"version\": 1, \"threads\": \"two\"}",
      "{\"version\": 1, \"reason\": \"\xc3\x28\"}",
    };
    for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
      {
        g_autofree char *dir = um_test_mkdtemp ();
        g_autofree char *path = um_profile_path (dir);
        g_autoptr(UmProfile) p = NULL;
        g_autoptr(UmProfile) def = um_profile_new_default ();
        g_autoptr(GError) error = NULL;
        g_autofree char *notice = NULL;

        um_test_write_file (path, cases[i], -1);
        p = um_profile_load (dir, &notice, &error);
        g_assert_no_error (error);
        g_assert_nonnull (notice);
        g_test_message ("%.200s", notice);
        g_assert_nonnull (strstr (notice, "optimizer.json.corrupt-"));
        g_assert_true (um_profile_equal (p, def));
        /* A reader leaves it; the next commit keeps it aside. */
        g_assert_cmpuint (um_test_count_prefix (dir, "optimizer.json.corrupt-"), ==, 0);
        {
          g_auto(UmCommit) c = { 0 };
          g_autoptr(UmProfile) next = um_profile_new_default ();
          um_profile_set_mode (next, UM_MEM_EXTREME_MILD);
          g_assert_true (um_backups_commit (next, dir, "test", NULL, &c, &error));
          g_assert_no_error (error);
          g_assert_nonnull (c.notice);
        }
        g_assert_cmpuint (um_test_count_prefix (dir, "optimizer.json.corrupt-"), ==, 1);
        um_test_rmtree (dir);
      }
  }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/backups/manifest-missing", test_manifest_missing);
  g_test_add_func ("/backups/original-never-overwritten", test_original_never_overwritten);
  g_test_add_func ("/backups/conflict", test_conflict);
  g_test_add_func ("/backups/update", test_update);
  g_test_add_func ("/backups/commit-damaged", test_commit_damaged);
  g_test_add_func ("/backups/noop", test_noop);
  g_test_add_func ("/backups/stopped-commits", test_stopped_commits);
  g_test_add_func ("/backups/manifest-hostile", test_manifest_hostile);
  g_test_add_func ("/backups/profile-hostile", test_profile_hostile);
  return g_test_run ();
}

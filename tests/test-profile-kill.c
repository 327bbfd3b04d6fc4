/* The optimizer profile is never broken: a writer (tools/um-profile-writer)
 * is killed with SIGKILL at random moments, hundreds of times, while it
 * backs up and writes or restores; after every kill the profile parses as
 * one complete version and every manifest entry names an intact copy. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "um-backups.h"
#include "um-profile.h"
#include "um-test-util.h"
#include "tools/um-profile-writer.h"

#define ROUNDS 240
/* Every ROUNDS_RESTORE-th round kills a restore instead of a write. */
#define ROUNDS_RESTORE 4

static char *writer_path;

static gboolean
is_a_version (const UmProfile *p, UmProfile *const *versions)
{
  return um_profile_equal (p, versions[0]) || um_profile_equal (p, versions[1]);
}

static guint
count_temps (const char *dir)
{
  g_autoptr(GDir) d = g_dir_open (dir, 0, NULL);
  const char *name;
  guint n = 0;
  while (d != NULL && (name = g_dir_read_name (d)) != NULL)
    n += name[0] == '.' && strstr (name, ".tmp-") != NULL;
  return n;
}

/* Starts the writer, waits until it is in its loop, lets it run 0–20 ms,
 * kills it. */
static void
run_and_kill (const char *dir, const char *what)
{
  const char *argv[] = { writer_path, dir, what, NULL };
  g_autoptr(GError) error = NULL;
  GPid pid;
  int out = -1, status = 0;
  char buf[8];
  ssize_t n;

  g_spawn_async_with_pipes (NULL, (char **) argv, NULL, G_SPAWN_DO_NOT_REAP_CHILD, NULL, NULL, &pid, NULL, &out,
                            NULL, &error);
  g_assert_no_error (error);
  do
    n = read (out, buf, sizeof buf);
  while (n < 0 && errno == EINTR);
  g_assert_cmpint (n, >, 0);
  g_usleep (g_test_rand_int_range (0, 20001));
  g_assert_cmpint (kill (pid, SIGKILL), ==, 0);
  g_assert_cmpint (waitpid (pid, &status, 0), ==, pid);
  /* Killed, not failed on its own. */
  g_assert_true (WIFSIGNALED (status));
  g_assert_cmpint (WTERMSIG (status), ==, SIGKILL);
  close (out);
  g_spawn_close_pid (pid);
}

static void
check_state (const char *dir, UmProfile *const *versions, guint *n_entries)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *notice = NULL;
  g_autofree char *bnotice = NULL;
  g_autoptr(UmProfile) p = NULL;
  g_autoptr(GPtrArray) list = NULL;
  guint others = 0;

  p = um_profile_load (dir, &notice, &error);
  g_assert_no_error (error);
  g_assert_null (notice);
  g_assert_true (is_a_version (p, versions));

  list = um_backups_list (dir, &bnotice, &error);
  g_assert_no_error (error);
  g_assert_null (bnotice);
  g_assert_cmpuint (list->len, >=, 1);
  g_assert_cmpstr (((UmBackup *) g_ptr_array_index (list, 0))->id, ==, "original");
  for (guint i = 0; i < list->len; i++)
    {
      const UmBackup *b = g_ptr_array_index (list, i);
      g_autoptr(UmProfile) copy = NULL;
      if (!b->valid)
        g_error ("backup %s: %s", b->id, b->problem);
      copy = um_backups_load (dir, b->id, &error);
      g_assert_no_error (error);
      g_assert_true (is_a_version (copy, versions));
      others += !g_str_equal (b->id, "original");
    }
  g_assert_cmpuint (others, <=, UM_BACKUPS_KEEP);
  /* The original is the first state, version 0, forever. */
  {
    g_autoptr(UmProfile) original = um_backups_load (dir, "original", &error);
    g_assert_no_error (error);
    g_assert_true (um_profile_equal (original, versions[0]));
  }
  *n_entries = list->len;
}

static void
test_kill (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *bdir = g_build_filename (dir, "backups", NULL);
  g_autoptr(UmProfile) v0 = um_profile_writer_version (0);
  g_autoptr(UmProfile) v1 = um_profile_writer_version (1);
  UmProfile *versions[2] = { v0, v1 };
  g_autoptr(GError) error = NULL;
  g_autofree char *last_manifest = NULL;
  guint changed = 0, restores = 0, temps = 0, max_entries = 0;
  gint64 start = g_get_monotonic_time ();

  /* Version 0 is there before anything else, so it becomes "original". */
  g_assert_true (um_profile_save (v0, dir, &error));
  g_assert_no_error (error);
  g_assert_true (um_backups_save (dir, "seed", NULL, &error));
  g_assert_no_error (error);

  for (guint round = 0; round < ROUNDS; round++)
    {
      gboolean restore = round % ROUNDS_RESTORE == ROUNDS_RESTORE - 1;
      g_autofree char *manifest_path = g_build_filename (bdir, "manifest.json", NULL);
      g_autofree char *manifest = NULL;
      guint n_entries = 0;

      run_and_kill (dir, restore ? "restore" : "write");
      restores += restore;
      temps = MAX (temps, count_temps (dir) + count_temps (bdir));
      check_state (dir, versions, &n_entries);
      max_entries = MAX (max_entries, n_entries);
      g_file_get_contents (manifest_path, &manifest, NULL, NULL);
      changed += g_strcmp0 (manifest, last_manifest) != 0;
      g_free (last_manifest);
      last_manifest = g_steal_pointer (&manifest);
    }
  g_test_message ("%u rounds (%u killing a restore) in %.1f s; the manifest changed in %u, up to %u entries; "
                  "up to %u temporary files left by kills",
                  ROUNDS, restores, (g_get_monotonic_time () - start) / 1e6, changed, max_entries, temps);
  /* The kills landed in a writer that was making progress. */
  g_assert_cmpuint (changed, >=, ROUNDS / 4);
  um_test_rmtree (dir);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  writer_path = g_strdup (g_getenv ("UM_PROFILE_WRITER"));
  if (writer_path == NULL)
    {
      /* Built next to this test. */
      g_autofree char *here = g_path_get_dirname (argv[0]);
      writer_path = g_build_filename (here, "um-profile-writer", NULL);
    }
  g_test_add_func ("/profile/kill", test_kill);
  return g_test_run ();
}

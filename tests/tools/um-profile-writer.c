/* um-profile-writer DIR MODE START COUNT [NAME] — changes the optimizer
 * profile in DIR through the paths the app and unmask-cli use, for
 * test-profile-kill to kill at random moments and to race.
 *
 *   cli      um_backups_update () with version START, START + 1, … as
 *            unmask-cli optimize does (read-modify-write under the lock)
 *   app      um_profile_load_full (), then um_backups_commit () against the
 *            revision read, as the app's Apply does; on a conflict, read
 *            again and retry
 *   restore  restores "latest" and "original" in turn
 *   race-cli, race-app
 *            as cli and app, but commit k adds the override NAME-k to what
 *            is there, so a lost update shows as a missing override
 *
 * COUNT commits, then exit (0: until killed). Everything it says goes out
 * with write(2), unbuffered, so a kill loses nothing already said: "ready",
 * "stage S" at each stage of a commit (um_backups_set_stage_hook),
 * "conflict" when an app-like commit must read again, "done K" once
 * commit K has returned. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "um-backups.h"
#include "um-error.h"
#include "um-profile.h"

/* Also built into test-profile-kill, which checks against these. */
#include "um-profile-writer.h"

static void
say (const char *fmt, ...) G_GNUC_PRINTF (1, 2);

static void
say (const char *fmt, ...)
{
  g_autofree char *line = NULL;
  va_list ap;
  gsize done = 0, len;

  va_start (ap, fmt);
  line = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  len = strlen (line);
  while (done < len)
    {
      ssize_t n = write (STDOUT_FILENO, line + done, len - done);
      if (n <= 0)
        return;
      done += (gsize) n;
    }
}

static void
on_stage (const char *stage, gpointer user_data)
{
  say ("stage %s\n", stage);
}

typedef struct {
  const char *name;
  guint64     k;
} Edit;

/* The change commit k makes to what is there now. */
static void
apply (UmProfile *p, const Edit *e)
{
  if (e->name == NULL)
    {
      g_autoptr(UmProfile) v = um_profile_writer_version (e->k);
      UmProfile tmp = *p;
      *p = *v;
      *v = tmp;
      return;
    }
  {
    UmProfileOverride *o = g_new0 (UmProfileOverride, 1);
    o->model_id = g_strdup_printf ("%s-%06" G_GUINT64_FORMAT, e->name, e->k);
    um_mem_options_init (&o->mem, (UmMemMode) (e->k % UM_MEM_N_MODES));
    g_ptr_array_add (p->overrides, o);
    p->written_by = UM_PROFILE_BY_USER;
    p->written_at = g_get_real_time () / G_USEC_PER_SEC;
    g_free (p->reason);
    p->reason = g_strdup_printf ("race %s", o->model_id);
  }
}

static gboolean
edit_cb (UmProfile *p, gpointer user_data, GError **error)
{
  apply (p, user_data);
  return TRUE;
}

/* As the app: build on what was read, commit against its revision. */
static gboolean
commit_as_app (const char *dir, const Edit *e, const char *reason, GError **error)
{
  for (guint attempt = 0;; attempt++)
    {
      g_autofree char *revision = NULL;
      g_autoptr(UmProfile) p = um_profile_load_full (dir, NULL, &revision, NULL, error);
      g_auto(UmCommit) c = { 0 };
      g_autoptr(GError) local = NULL;

      if (p == NULL)
        return FALSE;
      apply (p, e);
      if (um_backups_commit (p, dir, reason, revision, &c, &local))
        return TRUE;
      /* Someone committed between the read and ours: read again. */
      if (!g_error_matches (local, UM_ERROR, UM_ERROR_CONFLICT) || attempt > 10000)
        {
          g_propagate_error (error, g_steal_pointer (&local));
          return FALSE;
        }
      say ("conflict\n");
    }
}

int
main (int argc, char **argv)
{
  const char *dir, *mode, *name;
  guint64 start, count;

  if (argc < 5)
    {
      fprintf (stderr, "usage: um-profile-writer DIR cli|app|restore|race-cli|race-app START COUNT [NAME]\n");
      return 2;
    }
  dir = argv[1];
  mode = argv[2];
  start = g_ascii_strtoull (argv[3], NULL, 10);
  count = g_ascii_strtoull (argv[4], NULL, 10);
  name = argc > 5 ? argv[5] : "w";
  um_backups_set_stage_hook (on_stage, NULL);
  say ("ready\n");
  /* Racers start together when the test says so. */
  if (g_str_has_prefix (mode, "race-"))
    {
      char go;
      if (read (STDIN_FILENO, &go, 1) != 1)
        return 1;
    }

  for (guint64 i = 0; count == 0 || i < count; i++)
    {
      g_autoptr(GError) error = NULL;
      Edit e = { g_str_has_prefix (mode, "race-") ? name : NULL, start + i };
      g_autofree char *reason = g_strdup_printf ("before %s %" G_GUINT64_FORMAT, mode, e.k);
      gboolean ok;

      if (g_str_equal (mode, "restore"))
        {
          g_auto(UmCommit) c = { 0 };
          ok = um_backups_restore (dir, i % 2 ? "original" : "latest", &c, NULL, &error);
        }
      else if (g_str_equal (mode, "cli") || g_str_equal (mode, "race-cli"))
        {
          g_auto(UmCommit) c = { 0 };
          ok = um_backups_update (dir, reason, edit_cb, &e, &c, &error);
        }
      else if (g_str_equal (mode, "app") || g_str_equal (mode, "race-app"))
        ok = commit_as_app (dir, &e, reason, &error);
      else
        {
          fprintf (stderr, "um-profile-writer: unknown mode %s\n", mode);
          return 2;
        }
      if (!ok)
        {
          fprintf (stderr, "um-profile-writer: %s\n", error->message);
          return 1;
        }
      say ("done %" G_GUINT64_FORMAT "\n", e.k);
    }
  return 0;
}

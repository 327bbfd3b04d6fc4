/* um-profile-writer DIR [write|restore] — changes the optimizer profile in
 * DIR forever, for test-profile-kill to kill at random moments.
 *
 * write: backs up (um_backups_save) and writes (um_profile_save) the two
 * versions of um_profile_writer_version () in turn. restore: restores
 * "latest" and "original" in turn. Prints "ready" once set up, so the
 * kills land in the loop rather than in the program's start. */
#include <stdio.h>
#include <string.h>

#include "um-backups.h"
#include "um-profile.h"

/* Also built into test-profile-kill, which checks against these. */
#include "um-profile-writer.h"

int
main (int argc, char **argv)
{
  const char *dir, *what;
  g_autoptr(UmProfile) v0 = NULL;
  g_autoptr(UmProfile) v1 = NULL;
  const UmProfile *versions[2];

  if (argc < 2)
    {
      fprintf (stderr, "usage: um-profile-writer DIR [write|restore]\n");
      return 2;
    }
  dir = argv[1];
  what = argc > 2 ? argv[2] : "write";
  versions[0] = v0 = um_profile_writer_version (0);
  versions[1] = v1 = um_profile_writer_version (1);
  printf ("ready\n");
  fflush (stdout);

  for (guint64 i = 0;; i++)
    {
      g_autoptr(GError) error = NULL;
      gboolean ok;
      if (g_str_equal (what, "restore"))
        {
          g_autofree char *undo = NULL;
          g_auto(UmCommit) c = { 0 };
          ok = um_backups_restore (dir, i % 2 ? "original" : "latest", &c, NULL, &error);
        }
      else
        {
          const UmProfile *p = versions[i % 2];
          g_autofree char *reason = g_strdup_printf ("before writer → version %u", (guint) (i % 2));
          ok = um_backups_save (dir, reason, NULL, &error) && um_profile_save (p, dir, &error);
        }
      if (!ok)
        {
          fprintf (stderr, "um-profile-writer: %s\n", error->message);
          return 1;
        }
    }
  return 0;
}

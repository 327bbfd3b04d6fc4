/* um-cli-busy.c — busy processes for unmask-cli bench --background: the
 * other work a desktop runs (a build, a browser) made reproducible, so a
 * loaded machine's figures are one command. */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "um-cli.h"
#include "um-error.h"

/* Each child spins until killed; it also dies with its parent (even a
 * killed one) and after an hour at most, so none is ever left behind. */
static void G_GNUC_NORETURN
busy_child (void)
{
  volatile unsigned long spin = 0;

  prctl (PR_SET_PDEATHSIG, SIGKILL);
  alarm (3600);
  for (;;)
    spin++;
}

GArray *
um_cli_busy_start (int n, GError **error)
{
  GArray *pids = g_array_new (FALSE, FALSE, sizeof (pid_t));
  pid_t parent = getpid ();

  for (int i = 0; i < n; i++)
    {
      pid_t pid = fork ();
      if (pid == 0)
        {
          /* The parent may have died between fork and prctl. */
          if (getppid () != parent)
            _exit (0);
          busy_child ();
        }
      if (pid < 0)
        {
          int e = errno;
          um_cli_busy_stop (pids);
          g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "cannot start a busy process: %s",
                       g_strerror (e));
          return NULL;
        }
      g_array_append_val (pids, pid);
    }
  return pids;
}

void
um_cli_busy_stop (GArray *pids)
{
  if (pids == NULL)
    return;
  for (guint i = 0; i < pids->len; i++)
    kill (g_array_index (pids, pid_t, i), SIGKILL);
  for (guint i = 0; i < pids->len; i++)
    waitpid (g_array_index (pids, pid_t, i), NULL, 0);
  g_array_free (pids, TRUE);
}

/* unmask — the desktop app. */
#include "config.h"

#include <glib/gi18n.h>
#include <locale.h>

#include "um-application.h"

int
main (int argc, char **argv)
{
  g_autoptr(UmApplication) app = NULL;
  const char *localedir = LOCALEDIR;

  /* Uninstalled builds use the translations compiled in the build tree. */
  if (!g_file_test (LOCALEDIR "/de/LC_MESSAGES/" GETTEXT_PACKAGE ".mo", G_FILE_TEST_EXISTS)
      && g_file_test (UM_BUILD_LOCALEDIR, G_FILE_TEST_IS_DIR))
    localedir = UM_BUILD_LOCALEDIR;
  setlocale (LC_ALL, "");
  bindtextdomain (GETTEXT_PACKAGE, localedir);
  bind_textdomain_codeset (GETTEXT_PACKAGE, "UTF-8");
  textdomain (GETTEXT_PACKAGE);

  app = um_application_new ();
  return g_application_run (G_APPLICATION (app), argc, argv);
}

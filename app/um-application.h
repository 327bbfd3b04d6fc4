/* um-application.h — the GtkApplication: actions, accelerators, command line. */
#pragma once

#include <adwaita.h>

G_BEGIN_DECLS

#define UM_TYPE_APPLICATION (um_application_get_type ())
G_DECLARE_FINAL_TYPE (UmApplication, um_application, UM, APPLICATION, AdwApplication)

UmApplication *um_application_new (void);

G_END_DECLS

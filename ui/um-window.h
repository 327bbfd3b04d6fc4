/* um-window.h — the main window: model loading, Generate · Chat · Memory. */
#pragma once

#include <adwaita.h>

#include "um-engine.h"
#include "um-settings.h"

G_BEGIN_DECLS

#define UM_TYPE_WINDOW (um_window_get_type ())
G_DECLARE_FINAL_TYPE (UmWindow, um_window, UM, WINDOW, AdwApplicationWindow)

UmWindow   *um_window_new (GtkApplication *app, UmSettings *settings);

/* Loads a model folder or .gguf off the main thread, with progress and
 * Cancel; errors are shown in the window. */
void        um_window_load_model (UmWindow *self, const char *path);
/* The small model shipped with the app (the welcome page offers it). */
void        um_window_load_demo_model (UmWindow *self);
void        um_window_open_model_chooser (UmWindow *self);
/* Shows @message in the window's error banner. */
void        um_window_show_error (UmWindow *self, const char *message);

/* State, mostly for tests: the loaded engine (NULL if none), whether a load
 * is running ("loading"), the banner's message or NULL ("error-message"). */
UmEngine   *um_window_get_engine (UmWindow *self);
gboolean    um_window_get_loading (UmWindow *self);
const char *um_window_get_error_message (UmWindow *self);
GtkWidget  *um_window_get_generate_page (UmWindow *self);
GtkWidget  *um_window_get_chat_page (UmWindow *self);
UmSettings *um_window_get_settings (UmWindow *self);

/* Where the demo model lives (installed or in the source tree). */
char       *um_window_find_demo_model (void);

G_END_DECLS

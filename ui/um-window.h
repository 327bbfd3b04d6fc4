/* um-window.h — the main window: model loading, Generate · Chat · Memory ·
 * Optimizer, and the optimizer profile the models are loaded under. */
#pragma once

#include <adwaita.h>

#include "um-engine.h"
#include "um-generator.h"
#include "um-profile.h"
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

/* "Connect to a Server…" (win.connect-server): asks for an address and a
 * key and lists the server's models; the chosen one is connected to. */
void        um_window_open_connect_dialog (UmWindow *self);
/* Makes model @model_id (NULL: the server's first) on the server at @url
 * (@key may be NULL) the window's engine, off the main thread with Cancel
 * ("loading" meanwhile); errors are shown in the window. Generate and Chat
 * then run on the server; Memory and Optimizer say they describe this
 * computer. */
void        um_window_connect_server (UmWindow *self, const char *url, const char *key, const char *model_id);

/* State, mostly for tests: the engine the pages run on, local or remote
 * (NULL if none); the loaded engine when it is local (NULL if none or
 * remote), whether a load or a connection is running ("loading"), the
 * banner's message or NULL ("error-message"). */
UmGenerator *um_window_get_generator (UmWindow *self);
UmEngine   *um_window_get_engine (UmWindow *self);
gboolean    um_window_get_loading (UmWindow *self);
const char *um_window_get_error_message (UmWindow *self);
/* The header's subtitle: the model in use and its family ("tiny-dream · Dream"). */
const char *um_window_get_subtitle (UmWindow *self);
/* The family shown beside the model's name on the Open button, or NULL. */
const char *um_window_get_family_label (UmWindow *self);
GtkWidget  *um_window_get_generate_page (UmWindow *self);
GtkWidget  *um_window_get_chat_page (UmWindow *self);
UmSettings *um_window_get_settings (UmWindow *self);

GtkWidget  *um_window_get_optimizer_page (UmWindow *self);
GtkWidget  *um_window_get_memory_page (UmWindow *self);

/* The optimizer profile (um-profile.h) models are loaded under. Its folder
 * is $UNMASK_CONFIG_DIR if set, else NULL: the default
 * ($XDG_CONFIG_HOME/unmask). */
const char *um_window_get_config_dir (UmWindow *self);
const UmProfile *um_window_get_profile (UmWindow *self);
/* Reads the profile again and shows its mode on every page; a corrupt file
 * is moved aside, defaults are used and the notice banner says so
 * ("profile" notifies). */
void        um_window_reload_profile (UmWindow *self);
/* The revision (um_profile_revision_of ()) of the profile shown: what
 * every change is committed against (um_backups_commit ()), so a change
 * made elsewhere meanwhile is a conflict, never overwritten. NULL when the
 * file could not be read. */
const char *um_window_get_profile_revision (UmWindow *self);
/* After the app's own commit: shows @profile, which the file now holds at
 * @revision (so the folder watch does not take it for a change from
 * outside). */
void        um_window_set_committed_profile (UmWindow *self, const UmProfile *profile, const char *revision);
/* The window watches the profile's folder and calls this when the file
 * changed; call it too where a commit met a conflict. If the file's
 * revision is not the one shown, reads it (a damaged one as at start: the
 * notice banner), shows it and says so in a toast that offers to reload a
 * model loaded under other settings. TRUE if it was read again. */
gboolean    um_window_check_profile (UmWindow *self);
/* The model in use, or the last one asked for when its load failed (NULL
 * when none was ever loaded). */
const char *um_window_get_model_path (UmWindow *self);
/* Loads that model again under the current profile, off the main thread
 * with progress and Cancel. The old engine is freed first, so the new plan
 * has its memory. */
void        um_window_reload_model (UmWindow *self);
/* The model runs under other settings than the profile shown (changed
 * since it was loaded): win.reload-model is enabled. */
gboolean    um_window_get_model_outdated (UmWindow *self);
/* A generation or a chat answer runs (the model cannot be reloaded). */
gboolean    um_window_get_generating (UmWindow *self);
/* The banner at the top for notices that are not errors, such as a corrupt
 * profile moved aside (NULL hides it; "notice" property). */
void        um_window_show_notice (UmWindow *self, const char *message);
const char *um_window_get_notice (UmWindow *self);
void        um_window_add_toast (UmWindow *self, const char *message);
/* For tests: the last toast's text, and the "changed outside Unmask" toast
 * while it is shown (its button reloads the model: win.reload-model). */
const char *um_window_get_last_toast (UmWindow *self);
AdwToast   *um_window_get_profile_toast (UmWindow *self);
/* Shows the Optimizer page, with or without a model (win.show-optimizer). */
void        um_window_show_optimizer (UmWindow *self);

/* The server the model runs on, as the header bar names it
 * ("127.0.0.1:8765"), or NULL when the model is local. */
const char *um_window_get_remote_label (UmWindow *self);
/* Preferences → Serve this model: the addresses served now (NULL when
 * not serving) and what the header bar says ("127.0.0.1:8765 · 2 waiting"),
 * or NULL. */
const char * const *um_window_get_serve_uris (UmWindow *self);
const char *um_window_get_serve_label (UmWindow *self);

/* Where the demo model lives (installed or in the source tree). */
char       *um_window_find_demo_model (void);

G_END_DECLS

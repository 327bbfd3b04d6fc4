/* um-connect-dialog.h — "Connect to a Server…": a server's address and an
 * optional key; lists the server's models (GET /v1/models) to choose the
 * one Generate and Chat run on. The window then connects to it
 * (um_window_connect_server ()). */
#pragma once

#include <adwaita.h>

G_BEGIN_DECLS

#define UM_TYPE_CONNECT_DIALOG (um_connect_dialog_get_type ())
G_DECLARE_FINAL_TYPE (UmConnectDialog, um_connect_dialog, UM, CONNECT_DIALOG, AdwWindow)

/* @url: the address to offer (the last one used), may be NULL. */
GtkWidget  *um_connect_dialog_new (const char *url);

void        um_connect_dialog_set_url (UmConnectDialog *self, const char *url);
void        um_connect_dialog_set_key (UmConnectDialog *self, const char *key);
/* Asks the server for its models (what List Models and Return in the
 * address do); "busy" is TRUE meanwhile. Errors are shown in the dialog. */
void        um_connect_dialog_list_models (UmConnectDialog *self);
gboolean    um_connect_dialog_get_busy (UmConnectDialog *self);
guint       um_connect_dialog_get_n_models (UmConnectDialog *self);
/* Chooses model @index of the list (the first is chosen when it arrives). */
void        um_connect_dialog_select (UmConnectDialog *self, guint index);
/* What the dialog says under Models: an error, "No models", … */
const char *um_connect_dialog_get_status (UmConnectDialog *self);
/* Emits "connect" (url, key or NULL, model id) with the chosen model and
 * closes the dialog (what Connect does); nothing if no model is chosen. */
void        um_connect_dialog_connect (UmConnectDialog *self);

G_END_DECLS

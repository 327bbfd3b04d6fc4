/* um-remote-generator.h — an UmGenerator that runs on a server speaking
 * OpenAI's API (libsoup 3 client, no GTK).
 *
 * Against an Unmask server it asks for the per-step extension
 * ("unmask": {"stream_steps": "diff"}) and rebuilds every step's event, so
 * the diffusion view is as live as local. Against any other OpenAI-
 * compatible server it streams chat/completions and turns the appended
 * text into committed positions as it arrives (piece by piece, with
 * confidence 1). Cancelling a generation closes the connection, which the
 * server treats as a disconnect and stops within one step. */
#pragma once

#include <gio/gio.h>

#include "um-generator.h"

G_BEGIN_DECLS

#define UM_TYPE_REMOTE_GENERATOR (um_remote_generator_get_type ())
G_DECLARE_FINAL_TYPE (UmRemoteGenerator, um_remote_generator, UM, REMOTE_GENERATOR, UmGenerator)

typedef struct {
  char    *id;
  gboolean unmask;       /* the server is Unmask (the model object has an "unmask" member) */
  char    *arch;         /* "llada", "dream", ... when the server says */
} UmRemoteModel;

void      um_remote_model_free (UmRemoteModel *m);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmRemoteModel, um_remote_model_free)

/* GET {base_url}/models: the server's models (UmRemoteModel*). @base_url
 * ends in /v1 (added when missing); @api_key may be NULL. */
void       um_remote_list_models_async  (const char          *base_url,
                                         const char          *api_key,
                                         GCancellable        *cancellable,
                                         GAsyncReadyCallback  callback,
                                         gpointer             user_data);
GPtrArray *um_remote_list_models_finish (GAsyncResult *result, GError **error);

/* A generator for @model_id on the server (NULL: its first model), with
 * what the server says of it (GET /v1/models/{id}). Errors are UM_ERROR_REMOTE
 * with the server's message, or G_IO_ERROR_* when it cannot be reached. */
void         um_remote_generator_new_async  (const char          *base_url,
                                             const char          *api_key,
                                             const char          *model_id,
                                             GCancellable        *cancellable,
                                             GAsyncReadyCallback  callback,
                                             gpointer             user_data);
UmGenerator *um_remote_generator_new_finish (GAsyncResult *result, GError **error);

const char  *um_remote_generator_get_url (UmRemoteGenerator *self);

/* Seconds of silence (not even a ping) after which a generation fails
 * with UM_ERROR_REMOTE; 0: the default (60 s against an Unmask server,
 * which pings every 15 s; 300 s against others, which may not ping). */
void         um_remote_generator_set_read_timeout (UmRemoteGenerator *self, guint seconds);

G_END_DECLS

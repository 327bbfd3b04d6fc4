/* um-serving.h — Preferences → "Serve this model": the app's UmServer.
 *
 * Follows the settings ("serve", "serve-scope", "serve-key", "serve-port";
 * um-settings.h): while "serve" is on, an OpenAI-compatible server
 * (backend/serve/um-server.h) listens, on this computer only or, with a key, on the
 * local network, and answers with the window's local model through its
 * generator, whose FIFO the app's own Generate and Chat share with the
 * server's clients. Without a local model (none loaded, or the window runs
 * one on another server) it answers /health with 503 until one loads. */
#pragma once

#include <glib-object.h>

#include "um-generator.h"
#include "um-settings.h"

G_BEGIN_DECLS

#define UM_TYPE_SERVING (um_serving_get_type ())
G_DECLARE_FINAL_TYPE (UmServing, um_serving, UM, SERVING, GObject)

UmServing          *um_serving_new (UmSettings *settings);
/* The model to serve: a local generator, or NULL; @profile: the optimizer
 * profile's generation layer for it (NULL: none). Requests get the app's
 * settings, as they are when serving starts, for what they leave out. */
void                um_serving_set_generator (UmServing         *self,
                                              UmGenerator       *generator,
                                              const UmGenLayer  *profile);
/* Listening now; its addresses (NULL when not). */
gboolean            um_serving_get_active (UmServing *self);
const char * const *um_serving_get_uris (UmServing *self);
/* Requests waiting for the engine (the app's own included). */
int                 um_serving_get_n_waiting (UmServing *self);
/* Why the server could not start (the port is taken, …), or NULL. */
const char         *um_serving_get_error (UmServing *self);
/* The header bar's line: "127.0.0.1:8765 · 2 waiting" (the count when
 * some wait), or NULL when not serving. */
char               *um_serving_describe (UmServing *self);
/* Stops serving until the settings change again (the window closes). */
void                um_serving_shutdown (UmServing *self);

/* "changed": started, stopped, failed, or the number waiting changed. */

G_END_DECLS

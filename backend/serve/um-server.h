/* um-server.h — the OpenAI-compatible HTTP server (libsoup 3) that
 * `unmask-cli serve` and the app's "Serve this model" switch share.
 *
 * The server runs on its own thread with its own GMainContext, so a busy
 * GTK main loop never stalls its sockets. It translates HTTP into calls on
 * one UmGenerator and nothing more: requests are validated before any
 * "200", then queued on the generator (its FIFO, um-generator.h), which
 * lives on the context that was thread-default when um_server_new () was
 * called (the GTK main thread, or unmask-cli's main loop); the server
 * reaches it through that context. The wire format: docs/server-api.md
 * (and ../shared/docs/api-server.md). */
#pragma once

#include <gio/gio.h>

#include "um-generator.h"

G_BEGIN_DECLS

typedef struct _UmServer UmServer;

typedef struct {
  char   **hosts;             /* addresses to bind; NULL or empty: loopback only (127.0.0.1 and ::1) */
  guint    port;              /* 0: a free port (um_server_get_uris () tells which) */
  char   **api_keys;          /* accepted keys; NULL: no auth (refused for a non-loopback bind
                               * unless insecure_no_auth) */
  gboolean insecure_no_auth;
  int      max_queue;         /* requests waiting behind the running one; then 503 */
  gsize    max_body;          /* bytes; larger bodies 413 */
  char   **cors_origins;      /* allowed Origins; NULL: CORS off, any Origin is refused */
  guint    ping_interval_s;   /* ": ping" comments after this much silence; 0: none */
  /* Connections: beyond @max_connections open at once a new one is
   * answered 503 and closed; a request head must arrive within
   * @head_timeout_s of the connection's start (or of its first byte on a
   * kept-alive connection), its body within @body_timeout_s of the head;
   * a kept-alive connection idle for @idle_timeout_s is closed. 0: the
   * default. */
  guint    max_connections;
  guint    head_timeout_s;
  guint    body_timeout_s;
  guint    idle_timeout_s;
  char    *model_id;          /* the id /v1/models lists; NULL: the generator's */
  /* Generation settings for what a request leaves out, below the
   * request's own and above the model's recommendation (unmask-cli serve's
   * generation options; the app: its settings): the keys @gen_user sets,
   * and everything that is not a key (seed, cache, threshold...) from
   * @gen_base. @gen_profile: the optimizer profile's layer, below the
   * model's. */
  UmGenParams gen_base;
  UmGenLayer  gen_user;
  UmGenLayer  gen_profile;
} UmServerOptions;

#define UM_SERVER_DEFAULT_PORT       8765
#define UM_SERVER_DEFAULT_MAX_QUEUE  8
#define UM_SERVER_DEFAULT_MAX_BODY   ((gsize) 2 << 20)
#define UM_SERVER_DEFAULT_PING_S     15
#define UM_SERVER_DEFAULT_MAX_CONNECTIONS 128
#define UM_SERVER_DEFAULT_HEAD_TIMEOUT_S  10
#define UM_SERVER_DEFAULT_BODY_TIMEOUT_S  30
#define UM_SERVER_DEFAULT_IDLE_TIMEOUT_S  15

void      um_server_options_init  (UmServerOptions *opt);   /* the defaults above, everything else NULL */
void      um_server_options_clear (UmServerOptions *opt);   /* frees the strings and vectors */

/* @generator may be NULL: the server answers /health with 503 "Loading
 * model" until um_server_set_generator () gives it one. */
UmServer *um_server_new   (UmGenerator *generator, const UmServerOptions *opt);
/* Binds and starts serving on the server's thread; FALSE with an error
 * when a bind fails or the options are unsafe (non-loopback without a key). */
gboolean  um_server_start (UmServer *server, GError **error);
/* Call from the generator's thread. */
void      um_server_set_generator (UmServer *server, UmGenerator *generator);
/* The URLs it listens on ("http://127.0.0.1:8765/"), NULL-terminated. */
char    **um_server_get_uris (UmServer *server);
/* Requests running, waiting and answered so far (for the app's header
 * bar); "changed" notifications arrive through @cb on the generator's
 * thread. */
void      um_server_get_counts (UmServer *server, int *n_running, int *n_waiting, guint64 *n_served);
typedef void (*UmServerChangedFunc) (UmServer *server, gpointer user_data);
void      um_server_set_changed_func (UmServer *server, UmServerChangedFunc cb, gpointer user_data);
/* Cancels every request (running and queued), closes the sockets, joins
 * the thread. Safe to call twice. */
void      um_server_stop  (UmServer *server);
void      um_server_free  (UmServer *server);

/* A random key for "Local network" ("um-" + 32 base64url characters). */
char     *um_server_generate_key (void);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmServer, um_server_free)

G_END_DECLS

/* um-server-private.h — what um-server.c (HTTP, security, routes) and
 * um-server-run.c (one generation per request) share. */
#pragma once

#include <json-glib/json-glib.h>
#include <libsoup/soup.h>

#include "um-server.h"
#include "um-server-request.h"

G_BEGIN_DECLS

struct _UmServer
{
  UmServerOptions  opt;
  gboolean         loopback;        /* bound to loopback only: the Host header is checked */
  GMainContext    *home;            /* the generator's context */
  GMainContext    *context;         /* the server thread's */
  GMainLoop       *loop;
  GThread         *thread;
  SoupServer      *soup;
  GMutex           lock;            /* generator, uris, runs */
  GCond            cond;
  gboolean         started, stopping;
  GError          *start_error;
  UmGenerator     *generator;       /* home context; NULL while loading */
  gulong           queue_handler;
  /* What the generator's queue holds, mirrored for /v1/unmask/info. */
  gint             n_running, n_waiting;
  gint             n_generations;   /* submitted and not yet ended (home context) */
  char            *running_id;      /* under lock */
  GPtrArray       *runs;            /* Run* alive, server thread */
  char           **uris;
  guint64          served;
  /* Generation settings for requests: the command line's, the profile's. */
  UmGenParams      base;
  UmGenLayer       user_layer, profile_layer;
  UmServerChangedFunc changed_cb;
  gpointer         changed_data;
  /* Connections (um-server-conn.c), server thread. */
  GPtrArray       *listeners;       /* our listening sockets */
  GHashTable      *conns;           /* UmConn* accepted and handed to libsoup */
  GHashTable      *lingering;       /* UmConn* refused at accept, closing */
  guint            tick, accept_retry;
  int              keepalive_fd;    /* the silent end of libsoup's own listener, or -1 */
  gboolean         accept_error_said;
  guint64          accept_errors, refused_connections;
};

typedef struct _UmConn UmConn;

/* Binds the listening sockets (the options' hosts and port) and starts
 * accepting into server->soup, with the connection cap, the timeouts and
 * the body limit (server thread). */
gboolean um_server_conns_listen (UmServer *server, GError **error);
/* The URLs listened on, NULL-terminated. */
char   **um_server_conns_uris   (UmServer *server);
/* Closes the listening sockets and the connections being closed. */
void     um_server_conns_stop   (UmServer *server);
/* Connections open now, refused at the cap, and accept () failures. */
void     um_server_conns_counts (UmServer *server, guint *open, guint64 *refused, guint64 *accept_errors);

typedef enum {
  UM_PEER_HERE,   /* connected (and maybe still sending) */
  UM_PEER_EOF,    /* its end of stream came: it left, or only stopped sending */
  UM_PEER_GONE,   /* reset or hung up: nobody there */
} UmPeerState;

/* Whether @msg's client is still there, without reading anything. */
UmPeerState um_server_peer_state (SoupServerMessage *msg);

/* OpenAI's error envelope {"error":{message,type,param,code}} into @b;
 * @param and @code NULL: null. */
void um_server_add_error (JsonBuilder *b, const char *message, const char *type, const char *param,
                          const char *code);
/* Answers with OpenAI's error envelope. */
void um_server_send_error (SoupServerMessage *msg, guint status, const char *type, const char *message,
                           const char *param, const char *code);
/* Serves POST /v1/chat/completions or /v1/completions (server thread). */
void um_server_handle_generation (UmServer *server, SoupServerMessage *msg, UmApiKind kind);
/* Cancels every run (server thread). */
void um_server_cancel_runs (UmServer *server);
/* The generator, referenced, or NULL (any thread). */
UmGenerator *um_server_ref_generator (UmServer *server);
/* Runs @func on the home context and tells the app something changed. */
void um_server_notify_changed (UmServer *server);

G_END_DECLS

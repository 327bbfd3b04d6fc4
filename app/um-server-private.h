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
};

/* OpenAI's error envelope {"error":{message,type,param,code}} into @b; the
 * code is @code, else @int_code when not 0 (an in-band stream error carries
 * the status there), else null. */
void um_server_add_error (JsonBuilder *b, const char *message, const char *type, const char *param,
                          const char *code, gint64 int_code);
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

/* um-test-server.h — UmServer in the test's own process for the server
 * tests: the tiny LLaDA model's generator and the server on a "home"
 * thread of their own (as the app's are on the GTK thread), and a raw
 * HTTP/1.1 client over sockets, so that a test decides when the client
 * reads, writes or leaves. 127.0.0.1 only, a free port. */
#pragma once

#include <gio/gio.h>
#include <json-glib/json-glib.h>

#include "um-server.h"

G_BEGIN_DECLS

typedef void (*UmTestServerSetup) (UmServerOptions *opt, gpointer data);

typedef struct {
  GThread      *thread;
  GMainContext *context;
  GMainLoop    *loop;
  UmGenerator  *gen;
  UmServer     *server;
  guint16       port;
  int           max_queue;
  UmTestServerSetup setup;
  gpointer      setup_data;
  gint          seen_running;   /* atomics: the generator's queue, as the server reported it */
  gint          idle_after_run;
  GMutex        lock;
  GCond         cond;
} Home;

typedef struct {
  Home       *home;
  GSourceFunc func;
  gpointer    data;
  gboolean    done;
} HomeCall;

/* A server with @max_queue (and @setup's changes to the options, if
 * given) on its home thread; ping_interval_s 0. */
Home     *home_new        (int max_queue);
Home     *home_new_full   (int max_queue, UmTestServerSetup setup, gpointer setup_data);
void      home_free       (Home *home);
HomeCall *home_call_async (Home *home, GSourceFunc func, gpointer data);
void      home_wait       (HomeCall *c);
void      home_call       (Home *home, GSourceFunc func, gpointer data);
/* Frees the server and generator (on the home thread). */
gboolean  home_free_server (gpointer home);
void      home_counts     (Home *home, int *running, int *waiting);
/* Waits until the counts are @running and @waiting; the seconds it took
 * (fails the test past @limit). */
double    home_wait_counts (Home *home, int running, int waiting, double limit);

/* A blocking client socket to the server (60 s timeouts); @rcvbuf > 0
 * shrinks its receive buffer. */
GSocket  *client_connect  (Home *home, int rcvbuf);
/* POST @path with @body (Content-Length, Connection: close). */
void      client_send     (GSocket *s, const char *path, const char *body);
void      client_send_raw (GSocket *s, const char *data, gsize len);
/* Everything until the server closes; the response's status and body
 * (de-chunked). */
char     *client_read     (GSocket *s, guint *status);
char     *request         (Home *home, const char *path, const char *body, guint *status);
JsonObject *parse_object  (const char *text);

G_END_DECLS

/* um-server-conn.c — the server's connections, below libsoup's messages:
 *
 * - its own accept loop: libsoup 3.2's listener drops its source on any
 *   accept () error, so running out of descriptors once would end
 *   accepting for good; here accepting pauses and resumes;
 * - a cap on open connections: beyond it a new one is answered 503 and
 *   closed;
 * - timeouts: a request head must come within head_timeout_s of the
 *   connection's start (or of its first byte on a kept-alive one), its
 *   body within body_timeout_s of the head, and a kept-alive connection
 *   idle for idle_timeout_s is closed;
 * - the body limit, enforced while the body arrives, whatever its
 *   encoding and method: past max_body, or when the request was already
 *   refused before its body, the answer goes out at once and the
 *   connection is closed (the rest of the body is read and thrown away for
 *   a moment, so that the client sees the answer rather than a reset);
 * - whether a client is still there: by end of stream or hang-up, never by
 *   peeking at unread bytes.
 *
 * Everything here runs on the server thread. Each accepted socket gets a
 * Conn, found from a message through the remote address object libsoup
 * keeps (soup_server_accept_iostream () stores the one given). */
#include "config.h"

#include "um-server-private.h"

#include "um-error.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define CONN_KEY "um-server-conn"
/* How often deadlines are checked. */
#define TICK_MS 250
/* After a refusal: how long the rest of a body is read and thrown away
 * before the connection is closed. */
#define LINGER_US (2 * G_USEC_PER_SEC)
/* A pause in accepting after it failed for want of descriptors or memory. */
#define ACCEPT_RETRY_MS 100

typedef enum {
  CONN_HEAD,      /* waiting for (the rest of) a request head */
  CONN_BODY,      /* reading a body */
  CONN_BUSY,      /* the request is being answered: no deadline */
  CONN_IDLE,      /* kept alive between requests */
  CONN_CLOSING,   /* answered and shut; reading what is left, then closed */
} ConnState;

struct _UmConn
{
  gint        ref;
  UmServer   *server;
  GSocket    *socket;
  ConnState   state;
  gint64      deadline;       /* monotonic µs; 0: none */
  gboolean    head_started;   /* bytes of a head came (a timeout is answered 408) */
  guint64     body_bytes;
  GIOStream  *stolen;         /* CONN_CLOSING: the stream taken from libsoup */
  GSource    *drain;          /* CONN_CLOSING: reads and drops what comes */
};

typedef struct {
  UmServer *server;
  GSocket  *socket;
  GSource  *source;
} Listener;

static UmConn *
conn_ref (UmConn *c)
{
  g_atomic_int_inc (&c->ref);
  return c;
}

static void
conn_unref (gpointer data)
{
  UmConn *c = data;

  if (!g_atomic_int_dec_and_test (&c->ref))
    return;
  if (c->drain != NULL)
    {
      g_source_destroy (c->drain);
      g_source_unref (c->drain);
    }
  if (c->stolen != NULL)
    {
      g_io_stream_close (c->stolen, NULL, NULL);
      g_object_unref (c->stolen);
    }
  g_clear_object (&c->socket);
  g_free (c);
}

static UmConn *
conn_of (SoupServerMessage *msg)
{
  GSocketAddress *remote = soup_server_message_get_remote_address (msg);
  return remote != NULL ? g_object_get_data (G_OBJECT (remote), CONN_KEY) : NULL;
}

static guint
opt_or (guint v, guint def)
{
  return v > 0 ? v : def;
}

static void
set_deadline (UmConn *c, ConnState state, guint seconds)
{
  c->state = state;
  c->deadline = seconds > 0 ? g_get_monotonic_time () + (gint64) seconds * G_USEC_PER_SEC : 0;
}

/* Whether the connection is done for: its socket closed (by libsoup, or
 * here after a drain). */
static gboolean
conn_closed (UmConn *c)
{
  return c->socket == NULL || g_socket_is_closed (c->socket);
}

/* Drops the connections that have closed; the number still open. */
static guint
sweep_closed (UmServer *server)
{
  GHashTableIter it;
  gpointer key;

  g_hash_table_iter_init (&it, server->conns);
  while (g_hash_table_iter_next (&it, &key, NULL))
    if (conn_closed (key))
      g_hash_table_iter_remove (&it);
  return g_hash_table_size (server->conns);
}

/* Best effort, without blocking: what a socket's buffer takes now. */
static void
send_now (GSocket *socket, const char *data, gsize len)
{
  while (len > 0)
    {
      gssize n = g_socket_send_with_blocking (socket, data, len, FALSE, NULL, NULL);
      if (n <= 0)
        return;
      data += n;
      len -= (gsize) n;
    }
}

/* ---- closing: the answer, then the rest of the body thrown away ---- */

static void
finish_close (UmConn *c)
{
  if (c->drain != NULL)
    {
      g_source_destroy (c->drain);
      g_clear_pointer (&c->drain, g_source_unref);
    }
  if (c->stolen != NULL)
    {
      g_io_stream_close (c->stolen, NULL, NULL);
      g_clear_object (&c->stolen);
    }
  if (c->socket != NULL && !g_socket_is_closed (c->socket))
    g_socket_close (c->socket, NULL);
}

static gboolean
on_drain (GSocket *socket, GIOCondition cond, gpointer data)
{
  UmConn *c = data;
  char buf[16384];

  /* Reads what is there, a bounded amount per wake-up so that a fast
   * sender does not keep this thread. */
  for (int i = 0; i < 64; i++)
    {
      gssize n = g_socket_receive_with_blocking (socket, buf, sizeof buf, FALSE, NULL, NULL);
      if (n == 0 || (n < 0 && !(cond & G_IO_IN)))
        {
          g_clear_pointer (&c->drain, g_source_unref);
          finish_close (c);
          return G_SOURCE_REMOVE;
        }
      if (n < 0)
        break;
    }
  if (g_get_monotonic_time () >= c->deadline)
    {
      g_clear_pointer (&c->drain, g_source_unref);
      finish_close (c);
      return G_SOURCE_REMOVE;
    }
  return G_SOURCE_CONTINUE;
}

/* After the answer went out: FIN to the client, and what it still sends
 * read and dropped for a moment (closing with unread bytes would reset
 * the connection, and the client could lose the answer). */
static void
linger (UmConn *c)
{
  c->state = CONN_CLOSING;
  c->deadline = g_get_monotonic_time () + LINGER_US;
  g_socket_shutdown (c->socket, FALSE, TRUE, NULL);
  c->drain = g_socket_create_source (c->socket, G_IO_IN | G_IO_HUP | G_IO_ERR, NULL);
  g_source_set_callback (c->drain, (GSourceFunc) (GCallback) on_drain, c, NULL);
  g_source_attach (c->drain, c->server->context);
}

/* HTTP/1.1's reason phrase, for the statuses answered here. */
static const char *
reason_of (guint status)
{
  const char *r = soup_status_get_phrase (status);
  return r != NULL ? r : "Error";
}

/* Writes @msg's answer (status, headers and body as set) by hand, takes
 * the connection from libsoup and closes it: libsoup would first read the
 * whole body, however large. */
static void
answer_and_close (UmConn *c, SoupServerMessage *msg)
{
  g_autoptr(GString) out = g_string_new (NULL);
  g_autoptr(GBytes) body = NULL;
  SoupMessageHeaders *h = soup_server_message_get_response_headers (msg);
  SoupMessageHeadersIter it;
  const char *name, *value;
  guint status = soup_server_message_get_status (msg);
  gsize len;
  const char *data;

  body = soup_message_body_flatten (soup_server_message_get_response_body (msg));
  data = g_bytes_get_data (body, &len);
  g_string_append_printf (out, "HTTP/1.1 %u %s\r\n", status, reason_of (status));
  soup_message_headers_iter_init (&it, h);
  while (soup_message_headers_iter_next (&it, &name, &value))
    if (g_ascii_strcasecmp (name, "Content-Length") != 0 && g_ascii_strcasecmp (name, "Connection") != 0
        && g_ascii_strcasecmp (name, "Transfer-Encoding") != 0)
      g_string_append_printf (out, "%s: %s\r\n", name, value);
  g_string_append_printf (out, "Content-Length: %" G_GSIZE_FORMAT "\r\nConnection: close\r\n\r\n", len);
  g_string_append_len (out, data, (gssize) len);

  g_object_ref (msg);
  c->stolen = soup_server_message_steal_connection (msg);
  g_object_unref (msg);
  send_now (c->socket, out->str, out->len);
  linger (c);
}

/* ---- requests: heads, bodies, ends ---- */

static gboolean
has_body (SoupMessageHeaders *h)
{
  SoupEncoding enc = soup_message_headers_get_encoding (h);

  if (enc == SOUP_ENCODING_CHUNKED)
    return TRUE;
  return enc == SOUP_ENCODING_CONTENT_LENGTH && soup_message_headers_get_content_length (h) > 0;
}

static void
too_large (UmServer *server, SoupServerMessage *msg)
{
  g_autofree char *m = g_strdup_printf ("the request body is larger than %" G_GSIZE_FORMAT " bytes",
                                        server->opt.max_body);
  soup_message_headers_replace (soup_server_message_get_response_headers (msg), "Connection", "close");
  um_server_send_error (msg, 413, "invalid_request_error", m, NULL, "request_too_large");
}

/* After the early handler (connected after libsoup's own got-headers). */
static void
on_got_headers (SoupServerMessage *msg, UmServer *server)
{
  UmConn *c = conn_of (msg);
  SoupMessageHeaders *h = soup_server_message_get_request_headers (msg);

  if (c == NULL || c->state == CONN_CLOSING)
    return;
  c->body_bytes = 0;
  if (!has_body (h))
    {
      set_deadline (c, CONN_BUSY, 0);
      return;
    }
  if (soup_server_message_get_status (msg) == 0 && soup_message_headers_get_encoding (h) == SOUP_ENCODING_CONTENT_LENGTH
      && (guint64) soup_message_headers_get_content_length (h) > server->opt.max_body)
    too_large (server, msg);
  /* Refused before its body (a foreign Host, no key, too large...): the
   * answer now, not after the body. */
  if (soup_server_message_get_status (msg) != 0)
    {
      answer_and_close (c, msg);
      return;
    }
  set_deadline (c, CONN_BODY, opt_or (server->opt.body_timeout_s, UM_SERVER_DEFAULT_BODY_TIMEOUT_S));
}

/* Each piece of a body as it arrives: counted, so that no encoding gets
 * past the limit (libsoup has appended it already: at most one piece of
 * 8 KiB over). */
static void
on_got_chunk (SoupServerMessage *msg, GBytes *chunk, UmServer *server)
{
  UmConn *c = conn_of (msg);

  if (c == NULL || c->state == CONN_CLOSING)
    return;
  c->body_bytes += g_bytes_get_size (chunk);
  if (c->body_bytes > server->opt.max_body)
    {
      too_large (server, msg);
      answer_and_close (c, msg);
    }
}

static void
on_got_body (SoupServerMessage *msg, UmServer *server)
{
  UmConn *c = conn_of (msg);

  if (c != NULL && c->state != CONN_CLOSING)
    set_deadline (c, CONN_BUSY, 0);
}

static void
on_msg_finished (SoupServerMessage *msg, UmServer *server)
{
  UmConn *c = conn_of (msg);

  if (c != NULL && c->state != CONN_CLOSING)
    {
      set_deadline (c, CONN_IDLE, opt_or (server->opt.idle_timeout_s, UM_SERVER_DEFAULT_IDLE_TIMEOUT_S));
      c->head_started = FALSE;
    }
}

/* A new message: at a connection's start, or at the first byte of the
 * next request on a kept-alive one. */
static void
on_request_started (SoupServer *soup, SoupServerMessage *msg, UmServer *server)
{
  UmConn *c = conn_of (msg);

  if (c == NULL)
    return;
  if (c->state == CONN_IDLE)
    {
      set_deadline (c, CONN_HEAD, opt_or (server->opt.head_timeout_s, UM_SERVER_DEFAULT_HEAD_TIMEOUT_S));
      c->head_started = TRUE;
    }
  g_signal_connect (msg, "got-headers", G_CALLBACK (on_got_headers), server);
  g_signal_connect (msg, "got-chunk", G_CALLBACK (on_got_chunk), server);
  g_signal_connect (msg, "got-body", G_CALLBACK (on_got_body), server);
  g_signal_connect (msg, "finished", G_CALLBACK (on_msg_finished), server);
}

/* ---- deadlines ---- */

static gboolean
on_tick (gpointer data)
{
  UmServer *server = data;
  GHashTableIter it;
  gpointer key;
  gint64 now = g_get_monotonic_time ();

  g_hash_table_iter_init (&it, server->lingering);
  while (g_hash_table_iter_next (&it, &key, NULL))
    if (conn_closed (key))
      g_hash_table_iter_remove (&it);
  g_hash_table_iter_init (&it, server->conns);
  while (g_hash_table_iter_next (&it, &key, NULL))
    {
      UmConn *c = key;

      if (conn_closed (c))
        {
          g_hash_table_iter_remove (&it);
          continue;
        }
      if (c->state == CONN_CLOSING || c->deadline == 0 || now < c->deadline)
        continue;
      /* A head or body that stopped coming is told why; an idle
       * connection is simply closed. Shutting the socket down ends
       * libsoup's read, and libsoup closes it. */
      if (c->state == CONN_BODY || (c->state == CONN_HEAD && c->head_started))
        {
          static const char timeout[] = "HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
          send_now (c->socket, timeout, sizeof timeout - 1);
        }
      c->deadline = 0;
      g_socket_shutdown (c->socket, TRUE, TRUE, NULL);
    }
  return G_SOURCE_CONTINUE;
}

/* ---- accepting ---- */

static void listeners_watch (UmServer *server, gboolean on);

static gboolean
on_accept_retry (gpointer data)
{
  UmServer *server = data;

  server->accept_retry = 0;
  listeners_watch (server, TRUE);
  return G_SOURCE_REMOVE;
}

/* Out of descriptors (or memory): accepting pauses, and the pending
 * connections wait in the backlog until some close. */
static void
pause_accepting (UmServer *server, const GError *error)
{
  g_autoptr(GSource) src = NULL;

  if (server->accept_retry != 0)
    return;
  server->accept_errors++;
  if (!server->accept_error_said)
    g_message ("the server cannot accept connections for now (%s); it tries again every %d ms", error->message,
               ACCEPT_RETRY_MS);
  server->accept_error_said = TRUE;
  listeners_watch (server, FALSE);
  src = g_timeout_source_new (ACCEPT_RETRY_MS);
  g_source_set_callback (src, on_accept_retry, server, NULL);
  server->accept_retry = g_source_attach (src, server->context);
}

/* Beyond the cap: 503, told without reading anything, and closed. */
static void
refuse_connection (UmServer *server, GSocket *socket)
{
  static const char body[] = "{\"error\":{\"message\":\"the server has too many open connections; try again later\","
                             "\"type\":\"unavailable_error\",\"param\":null,\"code\":\"too_many_connections\"}}";
  g_autofree char *answer = g_strdup_printf ("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                                             "Retry-After: 1\r\nContent-Length: %" G_GSIZE_FORMAT "\r\n"
                                             "Connection: close\r\n\r\n%s",
                                             sizeof body - 1, body);
  UmConn *c;

  server->refused_connections++;
  send_now (socket, answer, strlen (answer));
  /* Lingering, so that the 503 is read rather than reset, unless the
   * refused ones pile up too. */
  if (g_hash_table_size (server->lingering) >= opt_or (server->opt.max_connections, UM_SERVER_DEFAULT_MAX_CONNECTIONS))
    {
      g_socket_close (socket, NULL);
      return;
    }
  c = g_new0 (UmConn, 1);
  c->ref = 1;
  c->server = server;
  c->socket = g_object_ref (socket);
  g_hash_table_add (server->lingering, c);
  linger (c);
}

static void
accept_one (UmServer *server, GSocket *socket)
{
  g_autoptr(GSocketConnection) sc = NULL;
  g_autoptr(GSocketAddress) local = g_socket_get_local_address (socket, NULL);
  g_autoptr(GSocketAddress) remote = g_socket_get_remote_address (socket, NULL);
  guint cap = opt_or (server->opt.max_connections, UM_SERVER_DEFAULT_MAX_CONNECTIONS);
  UmConn *c;

  if (local == NULL || remote == NULL)
    {
      g_socket_close (socket, NULL);
      return;
    }
  if (g_hash_table_size (server->conns) >= cap && sweep_closed (server) >= cap)
    {
      refuse_connection (server, socket);
      return;
    }
  g_socket_set_option (socket, IPPROTO_TCP, TCP_NODELAY, TRUE, NULL);
  c = g_new0 (UmConn, 1);
  c->ref = 1;
  c->server = server;
  c->socket = g_object_ref (socket);
  set_deadline (c, CONN_HEAD, opt_or (server->opt.head_timeout_s, UM_SERVER_DEFAULT_HEAD_TIMEOUT_S));
  g_hash_table_add (server->conns, c);
  /* libsoup keeps this address object: how a message finds its Conn. */
  g_object_set_data_full (G_OBJECT (remote), CONN_KEY, conn_ref (c), conn_unref);
  sc = g_socket_connection_factory_create_connection (socket);
  soup_server_accept_iostream (server->soup, G_IO_STREAM (sc), local, remote, NULL);
}

static gboolean
on_listen_ready (GSocket *socket, GIOCondition cond, gpointer data)
{
  Listener *l = data;
  UmServer *server = l->server;

  /* A bounded batch per wake-up, so that requests are served between. */
  for (int i = 0; i < 32; i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(GSocket) s = g_socket_accept (socket, NULL, &error);

      if (s != NULL)
        {
          server->accept_error_said = FALSE;
          accept_one (server, s);
          continue;
        }
      if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK))
        break;
      /* A connection reset before it was taken: the next one. */
      if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CONNECTION_CLOSED)
          || g_error_matches (error, G_IO_ERROR, G_IO_ERROR_BROKEN_PIPE))
        continue;
      pause_accepting (server, error);
      return G_SOURCE_CONTINUE;
    }
  return G_SOURCE_CONTINUE;
}

static void
listeners_watch (UmServer *server, gboolean on)
{
  for (guint i = 0; i < server->listeners->len; i++)
    {
      Listener *l = g_ptr_array_index (server->listeners, i);

      if (!on && l->source != NULL)
        {
          g_source_destroy (l->source);
          g_clear_pointer (&l->source, g_source_unref);
        }
      else if (on && l->source == NULL)
        {
          l->source = g_socket_create_source (l->socket, G_IO_IN, NULL);
          g_source_set_callback (l->source, (GSourceFunc) (GCallback) on_listen_ready, l, NULL);
          g_source_attach (l->source, server->context);
        }
    }
}

static void
listener_free (gpointer data)
{
  Listener *l = data;

  if (l->source != NULL)
    {
      g_source_destroy (l->source);
      g_source_unref (l->source);
    }
  g_socket_close (l->socket, NULL);
  g_object_unref (l->socket);
  g_free (l);
}

/* Binds @addr:@port; *@port_out gets the port bound (for port 0). */
static gboolean
listen_on (UmServer *server, GInetAddress *addr, guint port, guint *port_out, GError **error)
{
  g_autoptr(GSocketAddress) sa = g_inet_socket_address_new (addr, (guint16) port);
  g_autoptr(GSocketAddress) bound = NULL;
  g_autoptr(GSocket) s = NULL;
  Listener *l;

  s = g_socket_new (g_inet_address_get_family (addr), G_SOCKET_TYPE_STREAM, G_SOCKET_PROTOCOL_TCP, error);
  if (s == NULL)
    return FALSE;
  g_socket_set_blocking (s, FALSE);
  g_socket_set_listen_backlog (s, 128);
  if (!g_socket_bind (s, sa, TRUE, error) || !g_socket_listen (s, error))
    return FALSE;
  bound = g_socket_get_local_address (s, error);
  if (bound == NULL)
    return FALSE;
  *port_out = g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (bound));
  l = g_new0 (Listener, 1);
  l->server = server;
  l->socket = g_steal_pointer (&s);
  g_ptr_array_add (server->listeners, l);
  return TRUE;
}

/* 127.0.0.1 and, where the machine has it, ::1, on one port. */
static gboolean
listen_loopback (UmServer *server, guint *port, GError **error)
{
  g_autoptr(GInetAddress) v4 = g_inet_address_new_loopback (G_SOCKET_FAMILY_IPV4);
  g_autoptr(GInetAddress) v6 = g_inet_address_new_loopback (G_SOCKET_FAMILY_IPV6);
  g_autoptr(GError) local = NULL;
  guint bound;

  if (!listen_on (server, v4, *port, &bound, error))
    return FALSE;
  *port = bound;
  if (!listen_on (server, v6, *port, &bound, &local))
    g_debug ("not listening on [::1]:%u: %s", *port, local->message);
  return TRUE;
}

gboolean
um_server_conns_listen (UmServer *server, GError **error)
{
  guint port = server->opt.port;

  server->listeners = g_ptr_array_new_with_free_func (listener_free);
  server->conns = g_hash_table_new_full (g_direct_hash, g_direct_equal, conn_unref, NULL);
  server->lingering = g_hash_table_new_full (g_direct_hash, g_direct_equal, conn_unref, NULL);
  if (server->opt.hosts == NULL || server->opt.hosts[0] == NULL)
    {
      if (!listen_loopback (server, &port, error))
        return FALSE;
    }
  else
    for (guint i = 0; server->opt.hosts[i]; i++)
      {
        const char *h = server->opt.hosts[i];
        g_autoptr(GInetAddress) addr = NULL;
        guint bound;

        if (g_ascii_strcasecmp (h, "localhost") == 0)
          {
            if (!listen_loopback (server, &port, error))
              return FALSE;
            continue;
          }
        addr = g_inet_address_new_from_string (h);
        if (addr == NULL)
          {
            g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                         "--host takes an IP address or localhost, not “%s”", h);
            return FALSE;
          }
        if (!listen_on (server, addr, port, &bound, error))
          return FALSE;
        /* Every address on the port the first one got. */
        port = bound;
      }
  /* libsoup 3.2 keeps a connection alive after an answer only while it
   * has a listener of its own: it gets one it never accepts on, one end of
   * a socket pair whose other end stays silent (nothing can connect to
   * it). */
  {
    int sv[2];
    if (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0)
      {
        g_autoptr(GSocket) end = g_socket_new_from_fd (sv[0], NULL);
        if (end == NULL || !soup_server_listen_socket (server->soup, end, 0, NULL))
          {
            if (end == NULL)
              close (sv[0]);
            close (sv[1]);
          }
        else
          server->keepalive_fd = sv[1];
      }
  }
  g_signal_connect (server->soup, "request-started", G_CALLBACK (on_request_started), server);
  listeners_watch (server, TRUE);
  {
    g_autoptr(GSource) tick = g_timeout_source_new (TICK_MS);
    g_source_set_callback (tick, on_tick, server, NULL);
    server->tick = g_source_attach (tick, server->context);
  }
  return TRUE;
}

char **
um_server_conns_uris (UmServer *server)
{
  GPtrArray *v = g_ptr_array_new ();

  for (guint i = 0; i < server->listeners->len; i++)
    {
      Listener *l = g_ptr_array_index (server->listeners, i);
      g_autoptr(GSocketAddress) a = g_socket_get_local_address (l->socket, NULL);
      GInetSocketAddress *ia = G_INET_SOCKET_ADDRESS (a);
      g_autofree char *host = NULL;

      if (a == NULL)
        continue;
      host = g_inet_address_to_string (g_inet_socket_address_get_address (ia));
      if (strchr (host, ':') != NULL)
        g_ptr_array_add (v, g_strdup_printf ("http://[%s]:%u/", host, g_inet_socket_address_get_port (ia)));
      else
        g_ptr_array_add (v, g_strdup_printf ("http://%s:%u/", host, g_inet_socket_address_get_port (ia)));
    }
  g_ptr_array_add (v, NULL);
  return (char **) g_ptr_array_free (v, FALSE);
}

/* Closes the listeners and every connection still draining; libsoup's
 * own are closed by soup_server_disconnect (). */
void
um_server_conns_stop (UmServer *server)
{
  GHashTableIter it;
  gpointer key;

  if (server->tick != 0)
    {
      GSource *src = g_main_context_find_source_by_id (server->context, server->tick);
      if (src != NULL)
        g_source_destroy (src);
      server->tick = 0;
    }
  if (server->accept_retry != 0)
    {
      GSource *src = g_main_context_find_source_by_id (server->context, server->accept_retry);
      if (src != NULL)
        g_source_destroy (src);
      server->accept_retry = 0;
    }
  g_clear_pointer (&server->listeners, g_ptr_array_unref);
  if (server->conns != NULL)
    {
      g_hash_table_iter_init (&it, server->conns);
      while (g_hash_table_iter_next (&it, &key, NULL))
        finish_close (key);
    }
  if (server->lingering != NULL)
    {
      g_hash_table_iter_init (&it, server->lingering);
      while (g_hash_table_iter_next (&it, &key, NULL))
        finish_close (key);
    }
  g_clear_pointer (&server->conns, g_hash_table_unref);
  g_clear_pointer (&server->lingering, g_hash_table_unref);
  if (server->keepalive_fd > 0)
    close (server->keepalive_fd);
  server->keepalive_fd = -1;
}

void
um_server_conns_counts (UmServer *server, guint *open, guint64 *refused, guint64 *accept_errors)
{
  if (open != NULL)
    *open = server->conns != NULL ? sweep_closed (server) : 0;
  if (refused != NULL)
    *refused = server->refused_connections;
  if (accept_errors != NULL)
    *accept_errors = server->accept_errors;
}

/* ---- is the client there? ---- */

UmPeerState
um_server_peer_state (SoupServerMessage *msg)
{
  UmConn *c = conn_of (msg);
  struct pollfd p;

  if (c == NULL || conn_closed (c))
    return UM_PEER_GONE;
  p.fd = g_socket_get_fd (c->socket);
  p.events = POLLIN | POLLRDHUP;
  p.revents = 0;
  if (poll (&p, 1, 0) <= 0)
    return UM_PEER_HERE;
  /* A reset, or both directions shut: nobody there. */
  if (p.revents & (POLLHUP | POLLERR | POLLNVAL))
    return UM_PEER_GONE;
  /* The client's end of stream: it left, or only stopped sending. Unread
   * bytes before it (a pipelined request, a stray byte) do not matter. */
  if (p.revents & POLLRDHUP)
    return UM_PEER_EOF;
  return UM_PEER_HERE;
}

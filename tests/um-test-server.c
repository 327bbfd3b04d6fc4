/* um-test-server.c — see um-test-server.h. */
#include "um-test-server.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "um-local-generator.h"
#include "um-test-util.h"

/* ---- the home thread: the generator and the server live there ---- */

static gboolean
call_cb (gpointer user_data)
{
  HomeCall *c = user_data;
  c->func (c->data);
  g_mutex_lock (&c->home->lock);
  c->done = TRUE;
  g_cond_broadcast (&c->home->cond);
  g_mutex_unlock (&c->home->lock);
  return G_SOURCE_REMOVE;
}

HomeCall *
home_call_async (Home *home, GSourceFunc func, gpointer data)
{
  HomeCall *c = g_new0 (HomeCall, 1);
  c->home = home;
  c->func = func;
  c->data = data;
  g_main_context_invoke (home->context, call_cb, c);
  return c;
}

void
home_wait (HomeCall *c)
{
  gint64 end = g_get_monotonic_time () + 60 * G_USEC_PER_SEC;
  g_mutex_lock (&c->home->lock);
  while (!c->done)
    if (!g_cond_wait_until (&c->home->cond, &c->home->lock, end))
      g_error ("the home thread did not answer within 60 s");
  g_mutex_unlock (&c->home->lock);
  g_free (c);
}

void
home_call (Home *home, GSourceFunc func, gpointer data)
{
  home_wait (home_call_async (home, func, data));
}

static void
on_changed (UmServer *server, gpointer user_data)
{
  Home *home = user_data;
  int running, waiting;

  um_server_get_counts (server, &running, &waiting, NULL);
  if (running > 0)
    g_atomic_int_set (&home->seen_running, 1);
  else if (waiting == 0 && g_atomic_int_get (&home->seen_running))
    g_atomic_int_set (&home->idle_after_run, 1);
}

static gboolean
start_in_home (gpointer data)
{
  Home *home = data;
  g_autofree char *path = um_test_data_path ("tiny-llada");
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) uris = NULL;
  UmServerOptions so;
  UmEngineOptions opt;
  UmEngine *engine;

  um_engine_options_init (&opt);
  opt.device = UM_DEVICE_CPU;
  opt.n_threads = 1;
  engine = um_engine_load (path, &opt, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  home->gen = um_local_generator_new (engine);
  um_server_options_init (&so);
  so.port = 0;
  so.max_queue = home->max_queue;
  so.ping_interval_s = 0;
  if (home->setup != NULL)
    home->setup (&so, home->setup_data);
  home->server = um_server_new (home->gen, &so);
  um_server_options_clear (&so);
  um_server_set_changed_func (home->server, on_changed, home);
  g_assert_true (um_server_start (home->server, &error));
  g_assert_no_error (error);
  uris = um_server_get_uris (home->server);
  for (guint i = 0; uris[i]; i++)
    if (g_str_has_prefix (uris[i], "http://127.0.0.1:"))
      home->port = (guint16) atoi (uris[i] + strlen ("http://127.0.0.1:"));
  g_assert_cmpuint (home->port, >, 0);
  return G_SOURCE_REMOVE;
}

gboolean
home_free_server (gpointer data)
{
  Home *home = data;
  g_clear_pointer (&home->server, um_server_free);
  g_clear_object (&home->gen);
  return G_SOURCE_REMOVE;
}

static gboolean
quit_in_home (gpointer data)
{
  Home *home = data;
  g_main_loop_quit (home->loop);
  return G_SOURCE_REMOVE;
}

static gpointer
home_thread (gpointer data)
{
  Home *home = data;
  g_main_context_push_thread_default (home->context);
  g_main_loop_run (home->loop);
  /* Whatever is still posted here runs now (an admission after a freed
   * server would be a use after free). */
  while (g_main_context_iteration (home->context, FALSE))
    ;
  g_main_context_pop_thread_default (home->context);
  return NULL;
}

Home *
home_new_full (int max_queue, UmTestServerSetup setup, gpointer setup_data)
{
  Home *home = g_new0 (Home, 1);
  g_mutex_init (&home->lock);
  g_cond_init (&home->cond);
  home->max_queue = max_queue;
  home->setup = setup;
  home->setup_data = setup_data;
  home->context = g_main_context_new ();
  home->loop = g_main_loop_new (home->context, FALSE);
  home->thread = g_thread_new ("home", home_thread, home);
  home_call (home, start_in_home, home);
  return home;
}

Home *
home_new (int max_queue)
{
  return home_new_full (max_queue, NULL, NULL);
}

void
home_free (Home *home)
{
  home_call (home, home_free_server, home);
  home_call (home, quit_in_home, home);
  g_thread_join (home->thread);
  g_main_loop_unref (home->loop);
  g_main_context_unref (home->context);
  g_mutex_clear (&home->lock);
  g_cond_clear (&home->cond);
  g_free (home);
}

void
home_counts (Home *home, int *running, int *waiting)
{
  um_server_get_counts (home->server, running, waiting, NULL);
}

double
home_wait_counts (Home *home, int running, int waiting, double limit)
{
  gint64 t0 = g_get_monotonic_time ();
  for (;;)
    {
      int r, w;
      home_counts (home, &r, &w);
      if (r == running && w == waiting)
        return (g_get_monotonic_time () - t0) / 1e6;
      if (g_get_monotonic_time () - t0 > (gint64) (limit * G_USEC_PER_SEC))
        g_error ("waited %g s for %d running and %d waiting (now %d and %d)", limit, running, waiting, r, w);
      g_usleep (5000);
    }
}

/* ---- a raw HTTP/1.1 client ---- */

GSocket *
client_connect (Home *home, int rcvbuf)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GInetAddress) lo = g_inet_address_new_loopback (G_SOCKET_FAMILY_IPV4);
  g_autoptr(GSocketAddress) sa = g_inet_socket_address_new (lo, home->port);
  GSocket *s = g_socket_new (G_SOCKET_FAMILY_IPV4, G_SOCKET_TYPE_STREAM, G_SOCKET_PROTOCOL_TCP, &error);

  g_assert_no_error (error);
  g_socket_set_timeout (s, 60);
  if (rcvbuf > 0)
    g_assert_true (g_socket_set_option (s, SOL_SOCKET, SO_RCVBUF, rcvbuf, NULL));
  g_assert_true (g_socket_connect (s, sa, NULL, &error));
  g_assert_no_error (error);
  return s;
}

void
client_send_raw (GSocket *s, const char *data, gsize len)
{
  g_autoptr(GError) error = NULL;
  gsize off = 0;

  while (off < len)
    {
      gssize n = g_socket_send (s, data + off, len - off, NULL, &error);
      g_assert_no_error (error);
      off += (gsize) n;
    }
}

void
client_send (GSocket *s, const char *path, const char *body)
{
  g_autofree char *req = g_strdup_printf ("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                                          "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                                          path, strlen (body), body);
  client_send_raw (s, req, strlen (req));
}

char *
client_read (GSocket *s, guint *status)
{
  g_autoptr(GString) raw = g_string_new (NULL);
  g_autoptr(GString) body = g_string_new (NULL);
  char buf[16384];
  const char *p, *end;
  gboolean chunked;

  for (;;)
    {
      g_autoptr(GError) error = NULL;
      gssize n = g_socket_receive (s, buf, sizeof buf, NULL, &error);
      if (n <= 0)
        {
          if (error != NULL && !g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CONNECTION_CLOSED))
            g_assert_no_error (error);
          break;
        }
      g_string_append_len (raw, buf, n);
    }
  g_assert_true (g_str_has_prefix (raw->str, "HTTP/1.1 "));
  *status = (guint) atoi (raw->str + 9);
  p = strstr (raw->str, "\r\n\r\n");
  g_assert_nonnull (p);
  {
    g_autofree char *head = g_ascii_strdown (raw->str, p - raw->str);
    chunked = strstr (head, "transfer-encoding: chunked") != NULL;
  }
  p += 4;
  end = raw->str + raw->len;
  if (!chunked)
    return g_strndup (p, end - p);
  while (p < end)
    {
      char *after;
      guint64 size = g_ascii_strtoull (p, &after, 16);
      p = strstr (after, "\r\n");
      g_assert_nonnull (p);
      p += 2;
      if (size == 0)
        break;
      g_assert_cmpuint (size, <=, (guint64) (end - p));
      g_string_append_len (body, p, (gssize) size);
      p += size + 2;
    }
  return g_string_free (g_steal_pointer (&body), FALSE);
}

char *
request (Home *home, const char *path, const char *body, guint *status)
{
  g_autoptr(GSocket) s = client_connect (home, 0);
  client_send (s, path, body);
  return client_read (s, status);
}

JsonObject *
parse_object (const char *text)
{
  g_autoptr(GError) error = NULL;
  JsonNode *root = json_from_string (text, &error);
  JsonObject *o;

  g_assert_no_error (error);
  g_assert_true (JSON_NODE_HOLDS_OBJECT (root));
  o = json_object_ref (json_node_get_object (root));
  json_node_unref (root);
  return o;
}

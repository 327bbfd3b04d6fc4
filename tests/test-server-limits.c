/* test-server-limits.c — what no client may do to the server (UmServer in
 * this process, 127.0.0.1, the tiny LLaDA model), each bounded in time:
 * - bodies past the limit, however they come (chunked, a huge
 *   Content-Length, a GET, a request already refused for its Host), are
 *   answered while the client is still sending, and the server's memory
 *   does not grow with them;
 * - a connection that sends half a head, half a body, or nothing after an
 *   answer is closed after its timeout; beyond the connection cap a new one
 *   is answered 503 and closed;
 * - running out of file descriptors stops accepting only while it lasts;
 * - a client that leaves is gone even when it left a byte unread, and one
 *   that only closes its sending side still gets its stream;
 * - an API key of spaces is no key; CORS's "*" and an origin written with
 *   a slash match; Chrome's private-network preflight is answered. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "um-error.h"
#include "um-server.h"
#include "um-test-server.h"
#include "um-test-util.h"

/* ---- helpers ---- */

/* The process's peak resident set since the last reset, bytes. */
static guint64
peak_rss (void)
{
  g_autofree char *text = NULL;
  const char *p;

  g_assert_true (g_file_get_contents ("/proc/self/status", &text, NULL, NULL));
  p = strstr (text, "VmHWM:");
  g_assert_nonnull (p);
  return g_ascii_strtoull (p + 6, NULL, 10) << 10;
}

/* Resets the peak to what is resident now (Linux ≥ 4.0). */
static gboolean
reset_peak_rss (void)
{
  FILE *f = fopen ("/proc/self/clear_refs", "w");
  gboolean ok;

  if (f == NULL)
    return FALSE;
  ok = fputs ("5", f) >= 0;
  return fclose (f) == 0 && ok;
}

/* Whether @s has something to read (or its end) within @ms. */
static gboolean
readable (GSocket *s, int ms)
{
  return g_socket_condition_timed_wait (s, G_IO_IN | G_IO_HUP | G_IO_ERR, (gint64) ms * 1000, NULL, NULL);
}

/* Reads what comes within @ms until the server closes (TRUE) or the
 * time is up (FALSE); what came is appended to @out. */
static gboolean
read_until_closed (GSocket *s, int ms, GString *out)
{
  gint64 end = g_get_monotonic_time () + (gint64) ms * 1000;

  for (;;)
    {
      char buf[4096];
      gssize n;
      gint64 left = end - g_get_monotonic_time ();

      if (left <= 0 || !g_socket_condition_timed_wait (s, G_IO_IN | G_IO_HUP | G_IO_ERR, left, NULL, NULL))
        return FALSE;
      n = g_socket_receive_with_blocking (s, buf, sizeof buf, FALSE, NULL, NULL);
      if (n <= 0)
        return TRUE;   /* the end, or a reset: closed either way */
      g_string_append_len (out, buf, n);
    }
}

static guint
status_of (const GString *raw)
{
  return g_str_has_prefix (raw->str, "HTTP/1.1 ") ? (guint) atoi (raw->str + 9) : 0;
}

/* All of @data, or FALSE when the server stopped taking it. */
static gboolean
send_all (GSocket *s, const char *data, gsize len)
{
  while (len > 0)
    {
      gssize n = g_socket_send (s, data, len, NULL, NULL);
      if (n <= 0)
        return FALSE;
      data += n;
      len -= (gsize) n;
    }
  return TRUE;
}

typedef struct {
  guint   status;     /* of the answer, 0 if none came */
  guint64 sent;       /* body bytes sent before it came */
  guint64 peak_growth;
} Flood;

/* Sends @head, then body bytes (as chunks when @chunked) until an answer
 * comes or @limit bytes went out, the way a page flooding a local server
 * would; then reads the answer. */
static Flood
flood (Home *home, const char *head, gboolean chunked, guint64 limit)
{
  g_autoptr(GSocket) s = client_connect (home, 0);
  g_autoptr(GString) raw = g_string_new (NULL);
  g_autofree char *block = g_malloc (65536);
  guint64 before;
  gboolean measured = reset_peak_rss ();
  Flood f = { 0 };

  before = peak_rss ();
  memset (block, ' ', 65536);
  g_socket_set_timeout (s, 5);
  client_send_raw (s, head, strlen (head));
  while (f.sent < limit && !readable (s, 0))
    {
      gssize n;

      if (chunked)
        {
          /* 65280 bytes, then CRLF; each part whole, or the stream stops. */
          static const char size_line[] = "ff00\r\n";
          if (!send_all (s, size_line, strlen (size_line)) || !send_all (s, block, 0xff00) || !send_all (s, "\r\n", 2))
            break;
          n = 0xff00;
        }
      else if ((n = g_socket_send (s, block, 65536, NULL, NULL)) <= 0)
        break;   /* a server that closed or reset: its answer may be waiting */
      f.sent += (guint64) n;
    }
  if (readable (s, 2000))
    read_until_closed (s, 5000, raw);
  f.status = status_of (raw);
  f.peak_growth = measured ? peak_rss () - before : 0;
  if (g_test_verbose ())
    g_printerr ("answer %u after %" G_GUINT64_FORMAT " body bytes, peak RSS +%" G_GUINT64_FORMAT " KiB\n", f.status,
                f.sent, f.peak_growth >> 10);
  return f;
}

/* ---- bodies ---- */

/* A flood stops at 64 MiB; an answer must come before 16 MiB went out (the
 * socket buffers on both ends hold a few MiB), and the server's peak may
 * grow by the 2 MiB limit, a few 64 KiB blocks in flight and the test's
 * own allocations, never by the body: 16 MiB. */
#define FLOOD_LIMIT   ((guint64) 64 << 20)
#define ANSWER_BEFORE ((guint64) 16 << 20)
#define PEAK_CEILING  ((guint64) 16 << 20)

static void
check_flood (const char *what, Home *home, const char *head, gboolean chunked, guint want_status)
{
  Flood f = flood (home, head, chunked, FLOOD_LIMIT);
  guint status;
  g_autofree char *health = NULL;

  g_test_message ("%s: %u after %" G_GUINT64_FORMAT " bytes, peak +%" G_GUINT64_FORMAT " KiB", what, f.status,
                  f.sent, f.peak_growth >> 10);
  g_assert_cmpuint (f.status, ==, want_status);
  g_assert_cmpuint (f.sent, <, ANSWER_BEFORE);
  g_assert_cmpuint (f.peak_growth, <, PEAK_CEILING);
  /* And the server serves on. */
  {
    g_autoptr(GSocket) s = client_connect (home, 0);
    const char *get = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    client_send_raw (s, get, strlen (get));
    health = client_read (s, &status);
    g_assert_cmpuint (status, ==, 200);
  }
}

static void
test_body_chunked_post (void)
{
  Home *home = home_new (4);
  check_flood ("chunked POST", home,
               "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               "Transfer-Encoding: chunked\r\n\r\n",
               TRUE, 411);
  home_free (home);
}

static void
test_body_chunked_get (void)
{
  Home *home = home_new (4);
  check_flood ("chunked GET /health", home,
               "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n", TRUE, 413);
  home_free (home);
}

static void
test_body_huge_length (void)
{
  Home *home = home_new (4);
  check_flood ("POST of 300 MB", home,
               "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               "Content-Length: 300000000\r\n\r\n",
               FALSE, 413);
  home_free (home);
}

static void
test_body_foreign_host (void)
{
  Home *home = home_new (4);
  check_flood ("POST of 300 MB to a foreign Host", home,
               "POST /v1/completions HTTP/1.1\r\nHost: evil.example\r\nContent-Type: application/json\r\n"
               "Content-Length: 300000000\r\n\r\n",
               FALSE, 403);
  home_free (home);
}

static void
test_body_get_health (void)
{
  Home *home = home_new (4);
  check_flood ("GET /health with 300 MB", home,
               "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 300000000\r\n\r\n", FALSE, 413);
  home_free (home);
}

/* ---- timeouts and the connection cap ---- */

static void
short_timeouts (UmServerOptions *opt, gpointer data)
{
  opt->head_timeout_s = 1;
  opt->body_timeout_s = 1;
  opt->idle_timeout_s = 1;
}

/* Sends @what, then waits: the server must close within 1 s + 3 s of
 * slack (its timers tick every 250 ms; a loaded machine). An answer, if
 * any, is 408. */
static void
check_closed_after (Home *home, const char *what, const char *bytes)
{
  g_autoptr(GSocket) s = client_connect (home, 0);
  g_autoptr(GString) raw = g_string_new (NULL);
  gint64 t0 = g_get_monotonic_time ();
  gboolean closed;

  if (bytes[0] != '\0')
    client_send_raw (s, bytes, strlen (bytes));
  closed = read_until_closed (s, 4000, raw);
  g_test_message ("%s: %s after %.2f s, %" G_GSIZE_FORMAT " bytes back", what, closed ? "closed" : "still open",
                  (g_get_monotonic_time () - t0) / 1e6, raw->len);
  g_assert_true (closed);
  if (raw->len > 0)
    g_assert_cmpuint (status_of (raw), ==, 408);
}

static void
test_timeout_head (void)
{
  Home *home = home_new_full (4, short_timeouts, NULL);
  check_closed_after (home, "nothing sent", "");
  check_closed_after (home, "half a head", "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le");
  home_free (home);
}

static void
test_timeout_body (void)
{
  Home *home = home_new_full (4, short_timeouts, NULL);
  check_closed_after (home, "10 bytes of 100",
                      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      "Content-Length: 100\r\n\r\n{\"prompt\":");
  home_free (home);
}

static void
test_timeout_idle (void)
{
  Home *home = home_new_full (4, short_timeouts, NULL);
  g_autoptr(GSocket) s = client_connect (home, 0);
  g_autoptr(GString) raw = g_string_new (NULL);
  const char *get = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  gint64 t0;
  gboolean closed;

  /* An answer on a kept-alive connection, then silence. */
  client_send_raw (s, get, strlen (get));
  t0 = g_get_monotonic_time ();
  closed = read_until_closed (s, 4000, raw);
  g_test_message ("kept alive: %s after %.2f s", closed ? "closed" : "still open", (g_get_monotonic_time () - t0) / 1e6);
  g_assert_cmpuint (status_of (raw), ==, 200);
  g_assert_true (closed);
  /* The first answer came at once, not at the close. */
  g_assert_nonnull (strstr (raw->str, "{\"status\":\"ok\"}"));
  home_free (home);
}

static void
cap_of_four (UmServerOptions *opt, gpointer data)
{
  opt->max_connections = 4;
  opt->head_timeout_s = 60;
}

static void
test_connection_cap (void)
{
  Home *home = home_new_full (4, cap_of_four, NULL);
  GSocket *held[4];
  g_autoptr(GString) raw = g_string_new (NULL);
  guint status;
  g_autofree char *body = NULL;

  for (int i = 0; i < 4; i++)
    held[i] = client_connect (home, 0);
  /* The fifth is answered and closed at once. */
  {
    g_autoptr(GSocket) s = client_connect (home, 0);
    gboolean closed = read_until_closed (s, 3000, raw);
    g_test_message ("fifth connection: %s, status %u", closed ? "closed" : "still open", status_of (raw));
    g_assert_true (closed);
    g_assert_cmpuint (status_of (raw), ==, 503);
  }
  for (int i = 0; i < 4; i++)
    g_object_unref (held[i]);
  /* Once they are gone, the server takes new ones. */
  {
    g_autoptr(GSocket) s = NULL;
    gint64 end = g_get_monotonic_time () + 5 * G_USEC_PER_SEC;
    const char *get = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    for (;;)
      {
        s = client_connect (home, 0);
        client_send_raw (s, get, strlen (get));
        body = client_read (s, &status);
        if (status == 200 || g_get_monotonic_time () > end)
          break;
        /* The server may not have seen the others close yet. */
        g_clear_pointer (&body, g_free);
        g_clear_object (&s);
        g_usleep (50000);
      }
    g_assert_cmpuint (status, ==, 200);
  }
  home_free (home);
}

static int
open_fds (void)
{
  g_autoptr(GDir) d = g_dir_open ("/proc/self/fd", 0, NULL);
  int n = 0;

  g_assert_nonnull (d);
  while (g_dir_read_name (d) != NULL)
    n++;
  return n - 1;   /* the GDir's own */
}

/* A non-blocking connect to the server; -1 when no descriptor is left. */
static int
raw_connect (Home *home)
{
  struct sockaddr_in a = { 0 };
  int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

  if (fd < 0)
    return -1;
  a.sin_family = AF_INET;
  a.sin_port = g_htons (home->port);
  a.sin_addr.s_addr = g_htonl (0x7f000001);
  if (connect (fd, (struct sockaddr *) &a, sizeof a) != 0)
    {
      close (fd);
      return -1;
    }
  return fd;
}

static void
test_emfile (void)
{
  Home *home = home_new_full (4, NULL, NULL);
  struct rlimit old, low;
  g_autoptr(GArray) fds = g_array_new (FALSE, FALSE, sizeof (int));
  int reserve, fd, n_open, extra = -1;
  guint status = 0;

  g_assert_cmpint (getrlimit (RLIMIT_NOFILE, &old), ==, 0);
  /* Room for a few connections beyond what is open now: the server's
   * accepted ends and the test's share it. */
  n_open = open_fds ();
  low = old;
  low.rlim_cur = (rlim_t) n_open + 24;
  g_assert_cmpint (setrlimit (RLIMIT_NOFILE, &low), ==, 0);
  reserve = open ("/dev/null", O_RDONLY | O_CLOEXEC);
  g_assert_cmpint (reserve, >=, 0);
  /* Connections until no descriptor is left on either side... */
  while (fds->len < 200 && (fd = raw_connect (home)) >= 0)
    g_array_append_val (fds, fd);
  g_assert_cmpuint (fds->len, <, 200);
  /* ... and one more, which the server cannot take: accept () fails with
   * EMFILE while it waits in the backlog. */
  close (reserve);
  extra = raw_connect (home);
  g_test_message ("%u connections, then one more (%s)", fds->len, extra >= 0 ? "made" : "no descriptor");
  g_usleep (300000);
  /* Everyone leaves; the server must accept again. */
  if (extra >= 0)
    close (extra);
  for (guint i = 0; i < fds->len; i++)
    close (g_array_index (fds, int, i));
  g_assert_cmpint (setrlimit (RLIMIT_NOFILE, &old), ==, 0);
  {
    g_autoptr(GSocket) s = client_connect (home, 0);
    g_autoptr(GString) raw = g_string_new (NULL);
    const char *get = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    client_send_raw (s, get, strlen (get));
    read_until_closed (s, 5000, raw);
    status = status_of (raw);
  }
  g_test_message ("/health after the flood: %u", status);
  g_assert_cmpuint (status, ==, 200);
  home_free (home);
}

/* ---- clients that leave, or only stop sending ---- */

static const char *long_req = "{\"prompt\":\"Hello\",\"max_tokens\":2048,\"unmask\":{\"steps\":2048,\"block_length\":2048}%s}";

/* A request, one stray byte after it, and the client leaves: the byte
 * unread must not keep the request alive. */
static void
test_leave_with_byte_unread (void)
{
  Home *home = home_new (4);

  for (int streaming = 0; streaming < 2; streaming++)
    {
      g_autofree char *body = g_strdup_printf (long_req, streaming ? ",\"stream\":true" : "");
      GSocket *s = client_connect (home, 0);
      double t;

      client_send (s, "/v1/completions", body);
      home_wait_counts (home, 1, 0, 30);
      client_send_raw (s, "x", 1);
      g_usleep (50000);
      g_object_unref (s);
      t = home_wait_counts (home, 0, 0, 10);
      g_test_message ("%s: engine free %.3f s after the client left", streaming ? "stream" : "plain", t);
      g_assert_cmpfloat (t, <, 2.0);
    }
  home_free (home);
}

/* A client that closes its sending side after the request still reads
 * the whole stream. */
static void
test_half_close_stream (void)
{
  Home *home = home_new (4);
  const char *body = "{\"prompt\":\"Hello\",\"max_tokens\":64,\"seed\":3,\"stream\":true,"
                     "\"unmask\":{\"steps\":64,\"block_length\":64}}";
  g_autoptr(GSocket) s = client_connect (home, 0);
  g_autoptr(GError) error = NULL;
  g_autofree char *text = NULL;
  guint status;

  client_send (s, "/v1/completions", body);
  g_assert_true (g_socket_shutdown (s, FALSE, TRUE, &error));
  g_assert_no_error (error);
  text = client_read (s, &status);
  g_assert_cmpuint (status, ==, 200);
  g_assert_nonnull (strstr (text, "\"finish_reason\":\""));
  g_assert_true (g_str_has_suffix (text, "data: [DONE]\n\n"));
  home_free (home);
}

/* ---- keys and origins ---- */

static void
test_blank_key (void)
{
  const char *blanks[] = { "   ", "", "\t \n", NULL };

  for (guint i = 0; blanks[i]; i++)
    {
      const char *keys[] = { "um-a-real-key", blanks[i], NULL };
      g_autoptr(GError) error = NULL;
      UmServerOptions so;
      UmServer *server;

      um_server_options_init (&so);
      so.port = 0;
      so.api_keys = g_strdupv ((char **) keys);
      server = um_server_new (NULL, &so);
      um_server_options_clear (&so);
      g_assert_false (um_server_start (server, &error));
      g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
      g_test_message ("key “%s”: %s", blanks[i], error->message);
      um_server_free (server);
    }
}

static void
cors_setup (UmServerOptions *opt, gpointer data)
{
  opt->cors_origins = g_strdupv ((char **) data);
}

/* The response head to @req. */
static char *
exchange_head (Home *home, const char *req)
{
  g_autoptr(GSocket) s = client_connect (home, 0);
  g_autoptr(GString) raw = g_string_new (NULL);
  const char *end;

  client_send_raw (s, req, strlen (req));
  read_until_closed (s, 5000, raw);
  end = strstr (raw->str, "\r\n\r\n");
  return g_ascii_strdown (raw->str, end ? end - raw->str : (gssize) raw->len);
}

static void
test_cors_origins (void)
{
  const char *star[] = { "*", NULL };
  const char *slash[] = { "http://app.test/", NULL };
  const char *get = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: %s\r\nConnection: close\r\n\r\n";
  const char *preflight = "OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: %s\r\n"
                          "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Private-Network: true\r\n"
                          "Connection: close\r\n\r\n";
  struct { const char **origins; const char *origin; } cases[] = {
    { star, "http://anything.test" },
    { slash, "http://app.test" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      Home *home = home_new_full (4, cors_setup, cases[i].origins);
      g_autofree char *req = g_strdup_printf (get, cases[i].origin);
      g_autofree char *pre = g_strdup_printf (preflight, cases[i].origin);
      g_autofree char *head = exchange_head (home, req);
      g_autofree char *phead = exchange_head (home, pre);

      g_test_message ("--cors-origin %s, Origin %s: %.12s", cases[i].origins[0], cases[i].origin, head);
      g_assert_true (g_str_has_prefix (head, "http/1.1 200"));
      g_assert_nonnull (strstr (head, "access-control-allow-origin: "));
      /* Chrome asks before a public page may reach a loopback server. */
      g_assert_true (g_str_has_prefix (phead, "http/1.1 204"));
      g_assert_nonnull (strstr (phead, "access-control-allow-private-network: true"));
      home_free (home);
    }
  /* Not allowed: refused, and no private-network grant. */
  {
    Home *home = home_new_full (4, cors_setup, slash);
    g_autofree char *req = g_strdup_printf (preflight, "http://other.test");
    g_autofree char *head = exchange_head (home, req);
    g_assert_true (g_str_has_prefix (head, "http/1.1 403"));
    g_assert_null (strstr (head, "access-control-allow-private-network"));
    home_free (home);
  }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/limits/body/chunked-post", test_body_chunked_post);
  g_test_add_func ("/limits/body/chunked-get", test_body_chunked_get);
  g_test_add_func ("/limits/body/huge-length", test_body_huge_length);
  g_test_add_func ("/limits/body/foreign-host", test_body_foreign_host);
  g_test_add_func ("/limits/body/get-health", test_body_get_health);
  g_test_add_func ("/limits/timeout/head", test_timeout_head);
  g_test_add_func ("/limits/timeout/body", test_timeout_body);
  g_test_add_func ("/limits/timeout/idle", test_timeout_idle);
  g_test_add_func ("/limits/connection-cap", test_connection_cap);
  g_test_add_func ("/limits/emfile", test_emfile);
  g_test_add_func ("/limits/leave-with-byte-unread", test_leave_with_byte_unread);
  g_test_add_func ("/limits/half-close-stream", test_half_close_stream);
  g_test_add_func ("/limits/blank-key", test_blank_key);
  g_test_add_func ("/limits/cors", test_cors_origins);
  return g_test_run ();
}

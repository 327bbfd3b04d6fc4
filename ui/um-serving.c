/* um-serving.c — the app's "Serve this model" (see um-serving.h). */
#include "config.h"

#include "um-serving.h"

#include <glib/gi18n.h>
#include <string.h>

#include "um-server.h"

struct _UmServing {
  GObject      parent_instance;
  UmSettings  *settings;
  UmGenerator *generator;      /* local, or NULL */
  UmGenLayer   profile;        /* the optimizer profile's layer for its model */
  gulong       queue_handler;
  UmServer    *server;
  char       **uris;
  char        *error;
  guint        apply_id;       /* a restart after a burst of settings changes */
  gboolean     starting;       /* a key it stores is no change to follow */
  gboolean     shut;
};

G_DEFINE_FINAL_TYPE (UmServing, um_serving, G_TYPE_OBJECT)

enum { CHANGED, N_SIGNALS };
static guint signals[N_SIGNALS];

static void
stop_server (UmServing *self)
{
  if (self->server == NULL)
    return;
  um_server_stop (self->server);
  g_clear_pointer (&self->server, um_server_free);
  g_clear_pointer (&self->uris, g_strfreev);
  /* The server bounded the queue for its clients; the app's own wait. */
  if (self->generator != NULL)
    um_generator_set_max_waiting (self->generator, -1);
}

static void
start_server (UmServing *self)
{
  g_autofree char *scope = NULL;
  g_autofree char *key = NULL;
  g_autoptr(GError) error = NULL;
  UmServerOptions opt;
  int port = 0;

  g_object_get (self->settings, "serve-scope", &scope, "serve-key", &key, "serve-port", &port, NULL);
  um_server_options_init (&opt);
  opt.port = (guint) port;
  /* What a request leaves out is what the app would use: its settings
   * (the user's choices above the model's recommendation), then the
   * profile. Read when serving starts. */
  um_settings_get_params (self->settings, &opt.gen_base);
  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    if (um_settings_get_user_set (self->settings) & UM_GEN_KEY_BIT (k))
      um_gen_layer_take (&opt.gen_user, (UmGenKey) k, &opt.gen_base);
  opt.gen_profile = self->profile;
  if (g_strcmp0 (scope, "network") == 0)
    {
      /* Reachable from other machines: never without a key. */
      const char *any[] = { "0.0.0.0", NULL };
      if (key == NULL || key[0] == '\0')
        {
          g_free (key);
          key = um_server_generate_key ();
          g_object_set (self->settings, "serve-key", key, NULL);
        }
      opt.hosts = g_strdupv ((char **) any);
      opt.api_keys = g_new0 (char *, 2);
      opt.api_keys[0] = g_strdup (key);
    }
  self->server = um_server_new (self->generator, &opt);
  um_server_options_clear (&opt);
  if (!um_server_start (self->server, &error))
    {
      g_clear_pointer (&self->server, um_server_free);
      /* Translators: %s says why, e.g. "Address already in use" */
      self->error = g_strdup_printf (_("Could not serve the model: %s"), error->message);
      return;
    }
  self->uris = um_server_get_uris (self->server);
}

/* Brings the server in line with the settings: (re)started with the
 * current ones, or stopped. */
static void
apply (UmServing *self)
{
  gboolean serve = FALSE;

  g_clear_handle_id (&self->apply_id, g_source_remove);
  g_object_get (self->settings, "serve", &serve, NULL);
  stop_server (self);
  g_clear_pointer (&self->error, g_free);
  if (serve && !self->shut)
    {
      self->starting = TRUE;
      start_server (self);
      self->starting = FALSE;
    }
  g_signal_emit (self, signals[CHANGED], 0);
}

static gboolean
apply_idle (gpointer data)
{
  UmServing *self = data;

  self->apply_id = 0;
  apply (self);
  return G_SOURCE_REMOVE;
}

static void
on_settings_changed (UmServing *self)
{
  /* Scope, key and port often change together (Preferences): restart once. */
  if (!self->starting && self->apply_id == 0)
    self->apply_id = g_idle_add (apply_idle, self);
}

static void
on_queue_changed (UmServing *self)
{
  if (self->server != NULL)
    g_signal_emit (self, signals[CHANGED], 0);
}

void
um_serving_set_generator (UmServing *self, UmGenerator *generator, const UmGenLayer *profile)
{
  g_return_if_fail (UM_IS_SERVING (self));

  if (profile != NULL)
    self->profile = *profile;
  else
    um_gen_layer_init (&self->profile);
  if (self->generator == generator)
    return;
  if (self->queue_handler != 0)
    g_clear_signal_handler (&self->queue_handler, self->generator);
  /* The server lets go of the old one before it goes. */
  if (self->server != NULL)
    um_server_set_generator (self->server, generator);
  if (self->generator != NULL)
    um_generator_set_max_waiting (self->generator, -1);
  g_set_object (&self->generator, generator);
  if (generator != NULL)
    self->queue_handler = g_signal_connect_swapped (generator, "queue-changed", G_CALLBACK (on_queue_changed), self);
  g_signal_emit (self, signals[CHANGED], 0);
}

gboolean
um_serving_get_active (UmServing *self)
{
  g_return_val_if_fail (UM_IS_SERVING (self), FALSE);
  return self->server != NULL;
}

const char * const *
um_serving_get_uris (UmServing *self)
{
  g_return_val_if_fail (UM_IS_SERVING (self), NULL);
  return (const char * const *) self->uris;
}

int
um_serving_get_n_waiting (UmServing *self)
{
  int running = 0, waiting = 0;

  g_return_val_if_fail (UM_IS_SERVING (self), 0);
  if (self->generator != NULL)
    um_generator_get_queue (self->generator, &running, &waiting);
  return waiting;
}

const char *
um_serving_get_error (UmServing *self)
{
  g_return_val_if_fail (UM_IS_SERVING (self), NULL);
  return self->error;
}

/* "http://127.0.0.1:8765/" → "127.0.0.1:8765"; a wildcard address (any
 * interface) reads as this computer's name, which the network knows. */
static char *
short_address (const char *uri)
{
  g_autoptr(GUri) parsed = g_uri_parse (uri, G_URI_FLAGS_NONE, NULL);
  const char *host;

  if (parsed == NULL || g_uri_get_host (parsed) == NULL)
    return g_strdup (uri);
  host = g_uri_get_host (parsed);
  if (g_str_equal (host, "0.0.0.0") || g_str_equal (host, "::"))
    host = g_get_host_name ();
  if (strchr (host, ':') != NULL)
    return g_strdup_printf ("[%s]:%d", host, g_uri_get_port (parsed));
  return g_strdup_printf ("%s:%d", host, g_uri_get_port (parsed));
}

char *
um_serving_describe (UmServing *self)
{
  g_autofree char *where = NULL;
  int waiting;

  g_return_val_if_fail (UM_IS_SERVING (self), NULL);
  if (self->server == NULL)
    return NULL;
  where = short_address (self->uris != NULL && self->uris[0] != NULL ? self->uris[0] : "");
  if (self->generator == NULL)
    /* Translators: the header bar while serving without a local model; %s is an address, e.g. "127.0.0.1:8765" */
    return g_strdup_printf (_("%s · no model"), where);
  waiting = um_serving_get_n_waiting (self);
  if (waiting == 0)
    return g_steal_pointer (&where);
  /* Translators: the header bar while serving: the address and the requests waiting for the engine */
  return g_strdup_printf (g_dngettext (GETTEXT_PACKAGE, "%s · %d waiting", "%s · %d waiting", waiting), where,
                          waiting);
}

void
um_serving_shutdown (UmServing *self)
{
  g_return_if_fail (UM_IS_SERVING (self));
  self->shut = TRUE;
  g_clear_handle_id (&self->apply_id, g_source_remove);
  stop_server (self);
}

static void
um_serving_dispose (GObject *object)
{
  UmServing *self = UM_SERVING (object);

  um_serving_shutdown (self);
  if (self->queue_handler != 0)
    g_clear_signal_handler (&self->queue_handler, self->generator);
  g_clear_object (&self->generator);
  g_clear_object (&self->settings);
  G_OBJECT_CLASS (um_serving_parent_class)->dispose (object);
}

static void
um_serving_finalize (GObject *object)
{
  UmServing *self = UM_SERVING (object);

  g_free (self->error);
  G_OBJECT_CLASS (um_serving_parent_class)->finalize (object);
}

static void
um_serving_class_init (UmServingClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->dispose = um_serving_dispose;
  object_class->finalize = um_serving_finalize;
  signals[CHANGED] = g_signal_new ("changed", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                                   G_TYPE_NONE, 0);
}

static void
um_serving_init (UmServing *self)
{
  um_gen_layer_init (&self->profile);
}

UmServing *
um_serving_new (UmSettings *settings)
{
  UmServing *self = g_object_new (UM_TYPE_SERVING, NULL);
  static const char *const names[] = { "serve", "serve-scope", "serve-key", "serve-port" };

  self->settings = g_object_ref (settings);
  for (guint i = 0; i < G_N_ELEMENTS (names); i++)
    {
      g_autofree char *signal = g_strconcat ("notify::", names[i], NULL);
      g_signal_connect_object (settings, signal, G_CALLBACK (on_settings_changed), self, G_CONNECT_SWAPPED);
    }
  /* On at start when it was on when the app closed. */
  on_settings_changed (self);
  return self;
}

#include "um-settings.h"

#include <glib/gi18n.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>

#include "um-error.h"
#include "um-json.h"
#include "um-plan.h"
#include "um-profile.h"

#define MAX_RECENT 10

struct _UmSettings {
  GObject  parent_instance;
  char    *path;
  char    *load_warning;
  guint    save_id;

  int      threads;
  gboolean exact_products; /* f32 activations with quantized weights */
  int      gen_length;
  int      steps;
  int      block_length;
  double   temperature;
  double   cfg_scale;
  char    *remasking;
  gboolean chat_template;
  gboolean logits_eos_inf;
  gboolean confidence_eos_eot_inf;
  gint64   seed;
  gboolean fast_decoding;
  char    *cache;
  char    *fast_rule;
  double   threshold;
  double   factor;
  /* Timestep (Dream) and entropy (RND1) schedules. */
  char    *alg;
  double   alg_temp;
  double   eps;
  double   top_p;
  int      top_k;
  gboolean greedy;
  GPtrArray *recent;       /* char*, NULL-terminated */
  /* Serve this model (Preferences): off by default. */
  gboolean serve;
  char    *serve_scope;    /* "local" or "network" */
  char    *serve_key;      /* "" until "Local network" makes one */
  int      serve_port;
  char    *remote_url;     /* the last server connected to */

  /* The family whose generation parameters the properties hold, and the
   * other families' (JsonObject, as settings.json has them). */
  char          *family;
  GHashTable    *families;

  /* Where the generation parameters come from (see um-settings.h). */
  guint32        user_set;      /* UM_GEN_KEY_BIT of the user's choices */
  gboolean       applying;      /* setting defaults or loading: not the user's doing */
  UmGenLayer     model_layer;
  char          *model_origin;
  UmGenLayer     profile_layer;
  UmGenResolved  defaults;      /* without the user's choices */
};

G_DEFINE_FINAL_TYPE (UmSettings, um_settings, G_TYPE_OBJECT)

enum {
  PROP_0,
  PROP_THREADS, PROP_EXACT_PRODUCTS, PROP_GEN_LENGTH, PROP_STEPS, PROP_BLOCK_LENGTH, PROP_TEMPERATURE, PROP_CFG_SCALE,
  PROP_REMASKING, PROP_CHAT_TEMPLATE, PROP_LOGITS_EOS_INF, PROP_CONFIDENCE_EOS_EOT_INF, PROP_SEED,
  PROP_FAST_DECODING, PROP_CACHE, PROP_FAST_RULE, PROP_THRESHOLD, PROP_FACTOR,
  PROP_ALG, PROP_ALG_TEMP, PROP_EPS, PROP_TOP_P, PROP_TOP_K, PROP_GREEDY,
  PROP_FAMILY,
  PROP_SERVE, PROP_SERVE_SCOPE, PROP_SERVE_KEY, PROP_SERVE_PORT, PROP_REMOTE_URL,
  N_PROPS
};
static GParamSpec *props[N_PROPS];

enum { SOURCES_CHANGED, N_SIGNALS };
static guint signals[N_SIGNALS];

/* The property of each UmGenKey, in UmGenKey order. */
static const guint key_props[UM_GEN_N_KEYS] = {
  PROP_GEN_LENGTH, PROP_STEPS, PROP_BLOCK_LENGTH, PROP_TEMPERATURE, PROP_CFG_SCALE, PROP_REMASKING,
  PROP_ALG, PROP_EPS, PROP_ALG_TEMP, PROP_TOP_P, PROP_TOP_K, PROP_GREEDY,
};

/* The properties each family keeps for itself: a family's schedule gives
 * them its own meaning (LLaDA's temperature is Gumbel noise, Dream's the
 * softmax's, RND1's orders the positions only), so a choice made for one
 * family is not imposed on another. */
static const guint family_props[] = {
  PROP_GEN_LENGTH, PROP_STEPS, PROP_BLOCK_LENGTH, PROP_TEMPERATURE, PROP_CFG_SCALE, PROP_REMASKING,
  PROP_ALG, PROP_ALG_TEMP, PROP_EPS, PROP_TOP_P, PROP_TOP_K, PROP_GREEDY, PROP_FAST_DECODING,
};

/* Their names, usable before the class exists (pages without settings);
 * class_init checks that they agree. */
static const char * const key_names[UM_GEN_N_KEYS] = {
  "gen-length", "steps", "block-length", "temperature", "cfg-scale", "remasking",
  "alg", "eps", "alg-temp", "top-p", "top-k", "greedy",
};

static int
prop_key (guint prop)
{
  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    if (key_props[k] == prop)
      return (int) k;
  return -1;
}

static gboolean
save_timeout (gpointer data)
{
  UmSettings *self = data;
  g_autoptr(GError) error = NULL;

  self->save_id = 0;
  if (!um_settings_save (self, &error))
    g_warning ("Could not save settings: %s", error->message);
  return G_SOURCE_REMOVE;
}

static void apply_defaults (UmSettings *self);

static void
schedule_save (UmSettings *self)
{
  if (self->save_id == 0)
    self->save_id = g_timeout_add_seconds (1, save_timeout, self);
}

static void
um_settings_get_property (GObject *object, guint id, GValue *value, GParamSpec *pspec)
{
  UmSettings *self = UM_SETTINGS (object);
  switch (id)
    {
    case PROP_THREADS: g_value_set_int (value, self->threads); break;
    case PROP_EXACT_PRODUCTS: g_value_set_boolean (value, self->exact_products); break;
    case PROP_GEN_LENGTH: g_value_set_int (value, self->gen_length); break;
    case PROP_STEPS: g_value_set_int (value, self->steps); break;
    case PROP_BLOCK_LENGTH: g_value_set_int (value, self->block_length); break;
    case PROP_TEMPERATURE: g_value_set_double (value, self->temperature); break;
    case PROP_CFG_SCALE: g_value_set_double (value, self->cfg_scale); break;
    case PROP_REMASKING: g_value_set_string (value, self->remasking); break;
    case PROP_CHAT_TEMPLATE: g_value_set_boolean (value, self->chat_template); break;
    case PROP_LOGITS_EOS_INF: g_value_set_boolean (value, self->logits_eos_inf); break;
    case PROP_CONFIDENCE_EOS_EOT_INF: g_value_set_boolean (value, self->confidence_eos_eot_inf); break;
    case PROP_SEED: g_value_set_int64 (value, self->seed); break;
    case PROP_FAST_DECODING: g_value_set_boolean (value, self->fast_decoding); break;
    case PROP_CACHE: g_value_set_string (value, self->cache); break;
    case PROP_FAST_RULE: g_value_set_string (value, self->fast_rule); break;
    case PROP_THRESHOLD: g_value_set_double (value, self->threshold); break;
    case PROP_FACTOR: g_value_set_double (value, self->factor); break;
    case PROP_ALG: g_value_set_string (value, self->alg); break;
    case PROP_ALG_TEMP: g_value_set_double (value, self->alg_temp); break;
    case PROP_EPS: g_value_set_double (value, self->eps); break;
    case PROP_TOP_P: g_value_set_double (value, self->top_p); break;
    case PROP_TOP_K: g_value_set_int (value, self->top_k); break;
    case PROP_GREEDY: g_value_set_boolean (value, self->greedy); break;
    case PROP_FAMILY: g_value_set_string (value, self->family); break;
    case PROP_SERVE: g_value_set_boolean (value, self->serve); break;
    case PROP_SERVE_SCOPE: g_value_set_string (value, self->serve_scope); break;
    case PROP_SERVE_KEY: g_value_set_string (value, self->serve_key); break;
    case PROP_SERVE_PORT: g_value_set_int (value, self->serve_port); break;
    case PROP_REMOTE_URL: g_value_set_string (value, self->remote_url); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
um_settings_set_property (GObject *object, guint id, const GValue *value, GParamSpec *pspec)
{
  UmSettings *self = UM_SETTINGS (object);
  switch (id)
    {
    case PROP_THREADS: self->threads = g_value_get_int (value); break;
    case PROP_EXACT_PRODUCTS: self->exact_products = g_value_get_boolean (value); break;
    case PROP_GEN_LENGTH: self->gen_length = g_value_get_int (value); break;
    case PROP_STEPS: self->steps = g_value_get_int (value); break;
    case PROP_BLOCK_LENGTH: self->block_length = g_value_get_int (value); break;
    case PROP_TEMPERATURE: self->temperature = g_value_get_double (value); break;
    case PROP_CFG_SCALE: self->cfg_scale = g_value_get_double (value); break;
    case PROP_REMASKING:
      g_free (self->remasking);
      self->remasking = g_value_dup_string (value);
      break;
    case PROP_CHAT_TEMPLATE: self->chat_template = g_value_get_boolean (value); break;
    case PROP_LOGITS_EOS_INF: self->logits_eos_inf = g_value_get_boolean (value); break;
    case PROP_CONFIDENCE_EOS_EOT_INF: self->confidence_eos_eot_inf = g_value_get_boolean (value); break;
    case PROP_SEED: self->seed = g_value_get_int64 (value); break;
    case PROP_FAST_DECODING: self->fast_decoding = g_value_get_boolean (value); break;
    case PROP_CACHE:
      g_free (self->cache);
      self->cache = g_value_dup_string (value);
      break;
    case PROP_FAST_RULE:
      g_free (self->fast_rule);
      self->fast_rule = g_value_dup_string (value);
      break;
    case PROP_THRESHOLD: self->threshold = g_value_get_double (value); break;
    case PROP_FACTOR: self->factor = g_value_get_double (value); break;
    case PROP_ALG:
      g_free (self->alg);
      self->alg = g_value_dup_string (value);
      break;
    case PROP_ALG_TEMP: self->alg_temp = g_value_get_double (value); break;
    case PROP_EPS: self->eps = g_value_get_double (value); break;
    case PROP_TOP_P: self->top_p = g_value_get_double (value); break;
    case PROP_TOP_K: self->top_k = g_value_get_int (value); break;
    case PROP_GREEDY: self->greedy = g_value_get_boolean (value); break;
    case PROP_FAMILY:
      um_settings_set_family (self, g_value_get_string (value));
      return;
    case PROP_SERVE: self->serve = g_value_get_boolean (value); break;
    case PROP_SERVE_SCOPE:
      /* Anything else (a hand-edited file) stays on this computer. */
      g_free (self->serve_scope);
      self->serve_scope = g_strdup (g_strcmp0 (g_value_get_string (value), "network") == 0 ? "network" : "local");
      break;
    case PROP_SERVE_KEY:
      g_free (self->serve_key);
      self->serve_key = g_strdup (g_value_get_string (value) ? g_value_get_string (value) : "");
      break;
    case PROP_SERVE_PORT: self->serve_port = g_value_get_int (value); break;
    case PROP_REMOTE_URL:
      g_free (self->remote_url);
      self->remote_url = g_strdup (g_value_get_string (value) ? g_value_get_string (value) : "");
      break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec); return;
    }
  {
    /* A change from outside (a control, the Use Recommended button) is the
     * user's choice from now on, even back to the default value. */
    int key = prop_key (id);
    gboolean newly_user = key >= 0 && !self->applying && !(self->user_set & UM_GEN_KEY_BIT (key));
    if (newly_user)
      self->user_set |= UM_GEN_KEY_BIT (key);
    g_object_notify_by_pspec (object, pspec);
    schedule_save (self);
    /* Defaults that follow the length (Dream's and RND1's steps) follow it. */
    if (key == UM_GEN_KEY_GEN_LENGTH && !self->applying)
      apply_defaults (self);
    else if (newly_user)
      g_signal_emit (self, signals[SOURCES_CHANGED], 0);
  }
}

/* A pending change is written before the object goes (still alive here). */
static void
um_settings_dispose (GObject *object)
{
  UmSettings *self = UM_SETTINGS (object);

  if (self->save_id != 0)
    {
      g_source_remove (self->save_id);
      save_timeout (self);
    }
  G_OBJECT_CLASS (um_settings_parent_class)->dispose (object);
}

static void
um_settings_finalize (GObject *object)
{
  UmSettings *self = UM_SETTINGS (object);

  g_free (self->path);
  g_free (self->load_warning);
  g_free (self->remasking);
  g_free (self->cache);
  g_free (self->fast_rule);
  g_free (self->model_origin);
  g_free (self->alg);
  g_free (self->family);
  g_free (self->serve_scope);
  g_free (self->serve_key);
  g_free (self->remote_url);
  g_hash_table_unref (self->families);
  g_ptr_array_unref (self->recent);
  G_OBJECT_CLASS (um_settings_parent_class)->finalize (object);
}

static void
um_settings_class_init (UmSettingsClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  const GParamFlags f = G_PARAM_READWRITE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS;

  object_class->get_property = um_settings_get_property;
  object_class->set_property = um_settings_set_property;
  object_class->dispose = um_settings_dispose;
  object_class->finalize = um_settings_finalize;

  /* Ranges are the reference's: lengths up to LLaDA's 4096-token context. */
  props[PROP_THREADS] = g_param_spec_int ("threads", NULL, NULL, 0, 256, 0, f);
  /* Off: 8-bit activations with quantized weights, the engine's default. */
  props[PROP_EXACT_PRODUCTS] = g_param_spec_boolean ("exact-products", NULL, NULL, FALSE, f);
  props[PROP_GEN_LENGTH] = g_param_spec_int ("gen-length", NULL, NULL, 1, 4096, 128, f);
  props[PROP_STEPS] = g_param_spec_int ("steps", NULL, NULL, 1, 4096, 128, f);
  props[PROP_BLOCK_LENGTH] = g_param_spec_int ("block-length", NULL, NULL, 1, 4096, 32, f);
  props[PROP_TEMPERATURE] = g_param_spec_double ("temperature", NULL, NULL, 0.0, 5.0, 0.0, f);
  props[PROP_CFG_SCALE] = g_param_spec_double ("cfg-scale", NULL, NULL, 0.0, 10.0, 0.0, f);
  props[PROP_REMASKING] = g_param_spec_string ("remasking", NULL, NULL, "low_confidence", f);
  props[PROP_CHAT_TEMPLATE] = g_param_spec_boolean ("chat-template", NULL, NULL, TRUE, f);
  props[PROP_LOGITS_EOS_INF] = g_param_spec_boolean ("logits-eos-inf", NULL, NULL, FALSE, f);
  props[PROP_CONFIDENCE_EOS_EOT_INF] = g_param_spec_boolean ("confidence-eos-eot-inf", NULL, NULL, FALSE, f);
  props[PROP_SEED] = g_param_spec_int64 ("seed", NULL, NULL, 0, G_MAXINT64, 0, f);
  /* Fast decoding (Fast-dLLM): off keeps the exact reference schedule. */
  props[PROP_FAST_DECODING] = g_param_spec_boolean ("fast-decoding", NULL, NULL, FALSE, f);
  props[PROP_CACHE] = g_param_spec_string ("cache", NULL, NULL, "dual", f);
  props[PROP_FAST_RULE] = g_param_spec_string ("fast-rule", NULL, NULL, "threshold", f);
  props[PROP_THRESHOLD] = g_param_spec_double ("threshold", NULL, NULL, 0.5, 1.0, 0.9, f);
  props[PROP_FACTOR] = g_param_spec_double ("factor", NULL, NULL, 0.1, 10.0, 1.0, f);
  /* Dream's timestep schedule: the confidence rule (um-sampler.h UmAlg),
   * the temperature of the positions' draw (0: the most confident), the
   * schedule's last time, and the token filters (0: off). */
  props[PROP_ALG] = g_param_spec_string ("alg", NULL, NULL, "entropy", f);
  props[PROP_ALG_TEMP] = g_param_spec_double ("alg-temp", NULL, NULL, 0.0, 10.0, 0.0, f);
  props[PROP_EPS] = g_param_spec_double ("eps", NULL, NULL, 1e-6, 0.5, 1e-3, f);
  props[PROP_TOP_P] = g_param_spec_double ("top-p", NULL, NULL, 0.0, 1.0, 0.0, f);
  props[PROP_TOP_K] = g_param_spec_int ("top-k", NULL, NULL, 0, 1 << 24, 0, f);
  /* RND1's entropy schedule: argmax tokens, the temperature ordering the positions only. */
  props[PROP_GREEDY] = g_param_spec_boolean ("greedy", NULL, NULL, FALSE, f);
  /* um_arch_info ()->name of the model the generation parameters are for. */
  props[PROP_FAMILY] = g_param_spec_string ("family", NULL, NULL, "LLaDA", f);
  /* Serve this model over OpenAI's API: the switch, "local" (this computer
   * only) or "network" (with a key), the key, and the port (0: any free). */
  props[PROP_SERVE] = g_param_spec_boolean ("serve", NULL, NULL, FALSE, f);
  props[PROP_SERVE_SCOPE] = g_param_spec_string ("serve-scope", NULL, NULL, "local", f);
  props[PROP_SERVE_KEY] = g_param_spec_string ("serve-key", NULL, NULL, "", f);
  props[PROP_SERVE_PORT] = g_param_spec_int ("serve-port", NULL, NULL, 0, 65535, 8765, f);
  /* Connect to a Server…: the address last connected to (never the key). */
  props[PROP_REMOTE_URL] = g_param_spec_string ("remote-url", NULL, NULL, "", f);
  g_object_class_install_properties (object_class, N_PROPS, props);
  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    g_assert (g_str_equal (key_names[k], g_param_spec_get_name (props[key_props[k]])));

  signals[SOURCES_CHANGED] = g_signal_new ("sources-changed", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                                           0, NULL, NULL, NULL, G_TYPE_NONE, 0);
}

static void
um_settings_init (UmSettings *self)
{
  self->gen_length = 128;
  self->steps = 128;
  self->block_length = 32;
  self->remasking = g_strdup ("low_confidence");
  self->chat_template = TRUE;
  self->cache = g_strdup ("dual");
  self->fast_rule = g_strdup ("threshold");
  self->threshold = 0.9;
  self->factor = 1.0;
  self->alg = g_strdup ("entropy");
  self->eps = 1e-3;
  self->family = g_strdup ("LLaDA");
  self->serve_scope = g_strdup ("local");
  self->serve_key = g_strdup ("");
  self->serve_port = 8765;
  self->remote_url = g_strdup ("");
  self->families = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, (GDestroyNotify) json_object_unref);
  self->recent = g_ptr_array_new_with_free_func (g_free);
  g_ptr_array_add (self->recent, NULL);
  um_gen_layer_init (&self->model_layer);
  um_gen_layer_init (&self->profile_layer);
  um_gen_resolve_for (um_arch_fallback (), NULL, NULL, NULL, NULL, &self->defaults);
}

/* A member's value as the type of @pspec, or FALSE and an error when the
 * file holds another type there (a hand-edited or foreign file). */
static gboolean
member_value (GParamSpec *pspec, JsonNode *node, GValue *v, GError **error)
{
  GType have = JSON_NODE_HOLDS_VALUE (node) ? json_node_get_value_type (node) : G_TYPE_INVALID;
  const char *want;

  g_value_init (v, pspec->value_type);
  switch (pspec->value_type)
    {
    case G_TYPE_INT:
      want = "an integer";
      if (have == G_TYPE_INT64)
        g_value_set_int (v, (int) CLAMP (json_node_get_int (node), G_MININT, G_MAXINT));
      break;
    case G_TYPE_INT64:
      want = "an integer";
      if (have == G_TYPE_INT64)
        g_value_set_int64 (v, json_node_get_int (node));
      break;
    case G_TYPE_DOUBLE:
      want = "a number";
      if (have == G_TYPE_INT64 || have == G_TYPE_DOUBLE)
        {
          g_value_set_double (v, json_node_get_double (node));
          have = G_TYPE_DOUBLE;
        }
      break;
    case G_TYPE_BOOLEAN:
      want = "true or false";
      if (have == G_TYPE_BOOLEAN)
        g_value_set_boolean (v, json_node_get_boolean (node));
      break;
    default:
      want = "a string";
      if (have == G_TYPE_STRING)
        g_value_set_string (v, json_node_get_string (node));
      break;
    }
  if (have != pspec->value_type && !(pspec->value_type == G_TYPE_INT && have == G_TYPE_INT64))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "settings.json: “%s” is not %s", g_param_spec_get_name (pspec),
                   want);
      return FALSE;
    }
  return TRUE;
}

/* The user-set bits named in @arr (property names of UmGenKeys). */
static guint32
user_set_from_array (JsonArray *arr)
{
  guint32 set = 0;

  for (guint i = 0; arr != NULL && i < json_array_get_length (arr); i++)
    {
      JsonNode *e = json_array_get_element (arr, i);
      if (!JSON_NODE_HOLDS_VALUE (e) || json_node_get_value_type (e) != G_TYPE_STRING)
        continue;
      for (guint k = 0; k < UM_GEN_N_KEYS; k++)
        if (g_strcmp0 (json_node_get_string (e), g_param_spec_get_name (props[key_props[k]])) == 0)
          set |= UM_GEN_KEY_BIT ((int) k);
    }
  return set;
}

/* "families": the other families' parameters, each an object of the
 * per-family properties and their "user-set". Wrong types fail the file as
 * at the top level. */
static gboolean
read_families (UmSettings *self, JsonNode *node, GError **error)
{
  JsonObject *families;
  g_autoptr(GList) names = NULL;

  if (node == NULL || JSON_NODE_HOLDS_NULL (node))
    return TRUE;
  if (!JSON_NODE_HOLDS_OBJECT (node))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "settings.json: “families” is not an object");
      return FALSE;
    }
  families = json_node_get_object (node);
  names = json_object_get_members (families);
  for (GList *l = names; l != NULL; l = l->next)
    {
      JsonNode *f = json_object_get_member (families, l->data);
      JsonObject *obj;

      if (!JSON_NODE_HOLDS_OBJECT (f))
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "settings.json: “families”: “%s” is not an object",
                       (const char *) l->data);
          return FALSE;
        }
      obj = json_node_get_object (f);
      for (guint i = 0; i < G_N_ELEMENTS (family_props); i++)
        {
          GParamSpec *pspec = props[family_props[i]];
          JsonNode *m = json_object_get_member (obj, g_param_spec_get_name (pspec));
          g_auto(GValue) v = G_VALUE_INIT;
          if (m != NULL && !JSON_NODE_HOLDS_NULL (m) && !member_value (pspec, m, &v, error))
            {
              g_prefix_error (error, "“families”: “%s”: ", (const char *) l->data);
              return FALSE;
            }
        }
      g_hash_table_replace (self->families, g_strdup (l->data), json_object_ref (obj));
    }
  return TRUE;
}

/* Applies the members of @obj that are present and in range (an absent or
 * null member keeps its default, an out-of-range one too); a member of the
 * wrong type fails the whole file, before anything is applied. */
static gboolean
apply_json (UmSettings *self, JsonObject *obj, GError **error)
{
  GValue values[N_PROPS] = { G_VALUE_INIT };
  JsonNode *recent = json_object_get_member (obj, "recent-models");
  gboolean ok = TRUE;

  for (guint i = 1; i < N_PROPS && ok; i++)
    {
      JsonNode *node = json_object_get_member (obj, g_param_spec_get_name (props[i]));
      if (node != NULL && !JSON_NODE_HOLDS_NULL (node))
        ok = member_value (props[i], node, &values[i], error);
    }
  if (ok && recent != NULL && !JSON_NODE_HOLDS_NULL (recent))
    {
      JsonArray *arr = JSON_NODE_HOLDS_ARRAY (recent) ? json_node_get_array (recent) : NULL;
      for (guint i = 0; arr != NULL && i < json_array_get_length (arr); i++)
        {
          JsonNode *e = json_array_get_element (arr, i);
          if (!JSON_NODE_HOLDS_VALUE (e) || json_node_get_value_type (e) != G_TYPE_STRING)
            arr = NULL;
        }
      if (arr == NULL)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "settings.json: “recent-models” is not a list of paths");
          ok = FALSE;
        }
    }
  if (ok)
    ok = read_families (self, json_object_get_member (obj, "families"), error);
  for (guint i = 1; i < N_PROPS; i++)
    {
      /* The top-level values are this family's: no switch. */
      if (ok && i == PROP_FAMILY && G_IS_VALUE (&values[i]))
        {
          g_free (self->family);
          self->family = g_value_dup_string (&values[i]);
          g_hash_table_remove (self->families, self->family);
        }
      else if (ok && G_IS_VALUE (&values[i]) && !g_param_value_validate (props[i], &values[i]))
        g_object_set_property (G_OBJECT (self), g_param_spec_get_name (props[i]), &values[i]);
      if (G_IS_VALUE (&values[i]))
        g_value_unset (&values[i]);
    }
  if (ok && recent != NULL && JSON_NODE_HOLDS_ARRAY (recent))
    {
      JsonArray *arr = json_node_get_array (recent);
      g_ptr_array_set_size (self->recent, 0);
      for (guint i = 0; i < json_array_get_length (arr) && i < MAX_RECENT; i++)
        g_ptr_array_add (self->recent, g_strdup (json_array_get_string_element (arr, i)));
      g_ptr_array_add (self->recent, NULL);
    }
  /* Which parameters are the user's. A file from before this was
   * remembered: the values that differ from the built-in defaults. */
  if (ok && json_object_has_member (obj, "user-set") && JSON_NODE_HOLDS_ARRAY (json_object_get_member (obj, "user-set")))
    self->user_set |= user_set_from_array (json_object_get_array_member (obj, "user-set"));
  else if (ok)
    for (guint k = 0; k < UM_GEN_N_KEYS; k++)
      {
        GParamSpec *pspec = props[key_props[k]];
        g_auto(GValue) v = G_VALUE_INIT;
        g_value_init (&v, pspec->value_type);
        g_object_get_property (G_OBJECT (self), g_param_spec_get_name (pspec), &v);
        if (!g_param_value_defaults (pspec, &v))
          self->user_set |= UM_GEN_KEY_BIT (k);
      }
  return ok;
}

UmSettings *
um_settings_new (const char *path)
{
  UmSettings *self = g_object_new (UM_TYPE_SETTINGS, NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonNode) root = NULL;
  JsonObject *obj = NULL;
  gboolean ok;

  self->path = path ? g_strdup (path) : g_build_filename (g_get_user_config_dir (), "unmask", "settings.json", NULL);
  root = um_json_parse_file (self->path, "settings.json", NULL, &error);
  if (root == NULL && um_json_error_is_missing (error))
    return self;
  /* What the file holds is not a change the user makes now. */
  self->applying = TRUE;
  ok = root != NULL && (obj = um_json_root_object (root, "settings.json", &error)) != NULL
       && apply_json (self, obj, &error);
  self->applying = FALSE;
  if (!ok)
    {
      /* Keep the broken file for the user and start from defaults (the
       * app alone writes this file, so it is moved aside now; a damaged
       * optimizer profile waits for a commit, under its lock). */
      g_autofree char *moved = um_config_move_aside (self->path);
      if (moved != NULL)
        self->load_warning = g_strdup_printf (_("Your settings could not be read (%s). They were moved aside to %s "
                                                "and the defaults are used."), error->message, moved);
      else
        self->load_warning = g_strdup_printf (_("Your settings in %s could not be read (%s) and could not be moved "
                                                "aside; the defaults are used."), self->path, error->message);
    }
  /* Loading is not a change. */
  if (self->save_id != 0)
    {
      g_source_remove (self->save_id);
      self->save_id = 0;
    }
  return self;
}

const char *
um_settings_get_load_warning (UmSettings *self)
{
  return self->load_warning;
}

/* A per-family property's value into @p. */
static void
set_param (UmGenParams *p, guint prop, const GValue *v)
{
  switch (prop)
    {
    case PROP_GEN_LENGTH: p->gen_length = g_value_get_int (v); break;
    case PROP_STEPS: p->steps = g_value_get_int (v); break;
    case PROP_BLOCK_LENGTH: p->block_length = g_value_get_int (v); break;
    case PROP_TEMPERATURE: p->temperature = g_value_get_double (v); break;
    case PROP_CFG_SCALE: p->cfg_scale = g_value_get_double (v); break;
    case PROP_REMASKING: um_remasking_from_string (g_value_get_string (v), &p->remasking); break;
    case PROP_ALG: um_alg_from_string (g_value_get_string (v), &p->alg); break;
    case PROP_ALG_TEMP: p->alg_temp = g_value_get_double (v); break;
    case PROP_EPS: p->eps = g_value_get_double (v); break;
    case PROP_TOP_P: p->top_p = g_value_get_double (v); break;
    case PROP_TOP_K: p->top_k = g_value_get_int (v); break;
    case PROP_GREEDY: p->greedy = g_value_get_boolean (v); break;
    default: g_assert_not_reached ();
    }
}

static UmArch
family_arch (const char *family)
{
  UmArch arch = um_arch_fallback ();

  um_settings_family_to_arch (family, &arch);
  return arch;
}

/* The parameters of @family: the properties' values for the current one,
 * else what "families" keeps for it (or the defaults); the rest (seed,
 * flags, fast decoding) is the same for every family. */
static void
family_params (UmSettings *self, const char *family, UmGenParams *p, guint32 *user_set)
{
  gboolean current = family == NULL || g_strcmp0 (family, self->family) == 0;
  JsonObject *obj = current ? NULL : g_hash_table_lookup (self->families, family);
  JsonNode *set = obj ? json_object_get_member (obj, "user-set") : NULL;
  UmArch arch = family_arch (current ? self->family : family);
  gboolean fast = FALSE;

  um_gen_params_init (p);
  for (guint i = 0; i < G_N_ELEMENTS (family_props); i++)
    {
      GParamSpec *pspec = props[family_props[i]];
      JsonNode *m = obj ? json_object_get_member (obj, g_param_spec_get_name (pspec)) : NULL;
      g_auto(GValue) v = G_VALUE_INIT;

      if (current)
        {
          g_value_init (&v, pspec->value_type);
          g_object_get_property (G_OBJECT (self), g_param_spec_get_name (pspec), &v);
        }
      else if (m == NULL || JSON_NODE_HOLDS_NULL (m) || !member_value (pspec, m, &v, NULL)
               || g_param_value_validate (pspec, &v))
        {
          if (G_IS_VALUE (&v))
            g_value_unset (&v);
          g_value_init (&v, pspec->value_type);
          g_param_value_set_default (pspec, &v);
        }
      if (family_props[i] == PROP_FAST_DECODING)
        fast = g_value_get_boolean (&v);
      else
        set_param (p, family_props[i], &v);
    }
  if (user_set != NULL)
    *user_set = current ? self->user_set
                        : set != NULL && JSON_NODE_HOLDS_ARRAY (set) ? user_set_from_array (json_node_get_array (set)) : 0;
  p->logits_eos_inf = self->logits_eos_inf;
  p->confidence_eos_eot_inf = self->confidence_eos_eot_inf;
  p->seed = (guint64) self->seed;
  if (fast)
    {
      if (!um_cache_mode_from_string (self->cache, &p->cache))
        p->cache = UM_CACHE_DUAL;
      /* A schedule without the factor rule (Dream's) has the threshold. */
      if (g_strcmp0 (self->fast_rule, "factor") == 0 && um_family_has_option (arch, "factor"))
        p->factor = self->factor;
      else
        p->threshold = self->threshold;
    }
  um_gen_params_for_family (p, arch);
}

void
um_settings_get_params (UmSettings *self, UmGenParams *p)
{
  family_params (self, NULL, p, NULL);
}

/* The names a string property takes, in the order of a combo row's items;
 * an unknown name reads as the fallback item. */
typedef struct {
  const char * const *names;
  guint               n;
  guint               fallback;
} NameList;

static const char * const cache_names[] = { "none", "prefix", "dual" };
static const char * const rule_names[] = { "threshold", "factor" };
static const char * const remasking_names[] = { "low_confidence", "random" };
static const NameList cache_list = { cache_names, G_N_ELEMENTS (cache_names), G_N_ELEMENTS (cache_names) - 1 };
static const NameList rule_list = { rule_names, G_N_ELEMENTS (rule_names), 0 };
static const NameList remasking_list = { remasking_names, G_N_ELEMENTS (remasking_names), 0 };
/* The Algorithm row's order: the rules that rank by a confidence first, the random one last. */
static const char * const alg_row_names[] = { "maskgit_plus", "topk_margin", "entropy", "origin" };
static const NameList alg_list = { alg_row_names, G_N_ELEMENTS (alg_row_names), 3 };

static gboolean
name_to_index (GBinding *binding G_GNUC_UNUSED, const GValue *from, GValue *to, gpointer user_data)
{
  const NameList *list = user_data;
  const char *s = g_value_get_string (from);

  for (guint i = 0; i < list->n; i++)
    if (g_strcmp0 (s, list->names[i]) == 0)
      {
        g_value_set_uint (to, i);
        return TRUE;
      }
  g_value_set_uint (to, list->fallback);
  return TRUE;
}

static gboolean
index_to_name (GBinding *binding G_GNUC_UNUSED, const GValue *from, GValue *to, gpointer user_data)
{
  const NameList *list = user_data;
  guint i = g_value_get_uint (from);

  if (i >= list->n)
    return FALSE;
  g_value_set_string (to, list->names[i]);
  return TRUE;
}

void
um_settings_bind_fast_decoding (UmSettings *self,
                                GObject    *expander,
                                GObject    *cache_row,
                                GObject    *rule_row,
                                GObject    *threshold_adjustment,
                                GObject    *factor_adjustment)
{
  const GBindingFlags flags = G_BINDING_BIDIRECTIONAL | G_BINDING_SYNC_CREATE;

  g_return_if_fail (UM_IS_SETTINGS (self));
  g_object_bind_property (self, "fast-decoding", expander, "enable-expansion", flags);
  g_object_bind_property_full (self, "cache", cache_row, "selected", flags,
                               name_to_index, index_to_name, (gpointer) &cache_list, NULL);
  g_object_bind_property_full (self, "fast-rule", rule_row, "selected", flags,
                               name_to_index, index_to_name, (gpointer) &rule_list, NULL);
  g_object_bind_property (self, "threshold", threshold_adjustment, "value", flags);
  g_object_bind_property (self, "factor", factor_adjustment, "value", flags);
}

void
um_settings_bind_alg (UmSettings *self, GObject *combo_row)
{
  g_return_if_fail (UM_IS_SETTINGS (self));
  g_object_bind_property_full (self, "alg", combo_row, "selected",
                               G_BINDING_BIDIRECTIONAL | G_BINDING_SYNC_CREATE,
                               name_to_index, index_to_name, (gpointer) &alg_list, NULL);
}

/* ---- which parameters a family has ---- */

gboolean
um_settings_family_to_arch (const char *family, UmArch *out)
{
  return um_arch_from_name (family, out);
}

UmArch
um_settings_get_arch (UmSettings *self)
{
  g_return_val_if_fail (UM_IS_SETTINGS (self), um_arch_fallback ());
  return family_arch (self->family);
}

gboolean
um_family_has_option (UmArch arch, const char *property)
{
  UmGenOption option;

  /* A model parameter (UmGenKey), or one of the switches that are not
   * (UmGenOption): which the family's schedule takes is its row's. */
  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    if (g_strcmp0 (property, key_names[k]) == 0)
      return um_gen_key_applies ((UmGenKey) k, arch);
  return um_gen_option_from_name (property, &option) && um_gen_option_applies (option, arch);
}

void
um_gen_params_for_family (UmGenParams *p, UmArch arch)
{
  UmGenParams def;
  UmGenLayer out;

  /* The family's own defaults for what it does not have: they are the
   * values its validation accepts. Without blocks the answer is one block. */
  um_gen_params_init_for_arch (&def, arch);
  um_gen_layer_init (&out);
  out.params = *p;
  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    if (!um_gen_key_applies ((UmGenKey) k, arch))
      um_gen_layer_take (&out, (UmGenKey) k, &def);
  *p = out.params;
  if (!um_gen_key_applies (UM_GEN_KEY_BLOCK_LENGTH, arch))
    p->block_length = p->gen_length;
  if (!um_family_has_option (arch, "logits-eos-inf"))
    p->logits_eos_inf = FALSE;
  if (!um_family_has_option (arch, "confidence-eos-eot-inf"))
    p->confidence_eos_eot_inf = FALSE;
  if (!um_family_has_option (arch, "cache"))
    p->cache = UM_CACHE_NONE;
  if (!um_family_has_option (arch, "factor"))
    p->factor = 0.0;
  if (!um_family_has_option (arch, "fast-decoding"))
    p->threshold = 0.0;
  /* A schedule whose threshold rule and exact cache are always on (LLaDA
   * 2): "off" is its defaults (um_gen_resolve_for () does the same). */
  if (um_schedule_for_arch (arch)->fast_always_on)
    {
      if (p->threshold == 0.0)
        p->threshold = def.threshold;
      if (p->cache == UM_CACHE_NONE)
        p->cache = def.cache;
    }
  if (!um_family_has_option (arch, "constraints"))
    {
      p->constraints = NULL;
      p->n_constraints = 0;
    }
}

void
um_settings_plan_shape (const UmGenParams *params, UmSchedule schedule, UmPlanShape *shape)
{
  gboolean blocks = um_schedule_info (schedule)->answer_blocks;

  um_plan_shape_init (shape);
  shape->gen_length = params->gen_length;
  /* The other schedules treat the answer as one block, without guidance. */
  shape->block_length = blocks ? params->block_length : params->gen_length;
  shape->cfg = blocks && params->cfg_scale > 0;
  /* Fast decoding's KV cache is memory too: plan for it when it is on. */
  shape->kv_cache = blocks && params->cache != UM_CACHE_NONE;
}

void
um_settings_bind_remasking (UmSettings *self, GObject *combo_row)
{
  g_return_if_fail (UM_IS_SETTINGS (self));
  g_object_bind_property_full (self, "remasking", combo_row, "selected",
                               G_BINDING_BIDIRECTIONAL | G_BINDING_SYNC_CREATE,
                               name_to_index, index_to_name, (gpointer) &remasking_list, NULL);
}

/* ---- where the generation parameters come from ---- */

static void
params_to_value (const UmGenParams *p, UmGenKey key, GValue *v)
{
  switch (key)
    {
    case UM_GEN_KEY_GEN_LENGTH: g_value_init (v, G_TYPE_INT); g_value_set_int (v, p->gen_length); break;
    case UM_GEN_KEY_STEPS: g_value_init (v, G_TYPE_INT); g_value_set_int (v, p->steps); break;
    case UM_GEN_KEY_BLOCK_LENGTH: g_value_init (v, G_TYPE_INT); g_value_set_int (v, p->block_length); break;
    case UM_GEN_KEY_TEMPERATURE: g_value_init (v, G_TYPE_DOUBLE); g_value_set_double (v, p->temperature); break;
    case UM_GEN_KEY_CFG_SCALE: g_value_init (v, G_TYPE_DOUBLE); g_value_set_double (v, p->cfg_scale); break;
    case UM_GEN_KEY_ALG: g_value_init (v, G_TYPE_STRING); g_value_set_string (v, um_alg_to_string (p->alg)); break;
    case UM_GEN_KEY_EPS: g_value_init (v, G_TYPE_DOUBLE); g_value_set_double (v, p->eps); break;
    case UM_GEN_KEY_ALG_TEMP: g_value_init (v, G_TYPE_DOUBLE); g_value_set_double (v, p->alg_temp); break;
    case UM_GEN_KEY_TOP_P: g_value_init (v, G_TYPE_DOUBLE); g_value_set_double (v, p->top_p); break;
    case UM_GEN_KEY_TOP_K: g_value_init (v, G_TYPE_INT); g_value_set_int (v, p->top_k); break;
    case UM_GEN_KEY_GREEDY: g_value_init (v, G_TYPE_BOOLEAN); g_value_set_boolean (v, p->greedy); break;
    case UM_GEN_KEY_REMASKING:
    case UM_GEN_N_KEYS:
    default:
      g_value_init (v, G_TYPE_STRING);
      g_value_set_string (v, um_remasking_to_string (p->remasking));
      break;
    }
}

/* The parameters that are not the user's take their defaults. */
static void
apply_defaults (UmSettings *self)
{
  UmArch arch = family_arch (self->family);
  UmGenParams current;
  UmGenLayer user;
  UmGenResolved with_user;

  um_gen_resolve_for (arch, NULL, NULL, &self->model_layer, &self->profile_layer, &self->defaults);
  um_settings_get_params (self, &current);
  /* What the other keys become next to the user's choices: Dream's and
   * RND1's built-in steps follow the length, the user's included. */
  um_gen_layer_init (&user);
  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    if (self->user_set & UM_GEN_KEY_BIT (k))
      um_gen_layer_take (&user, (UmGenKey) k, &current);
  um_gen_resolve_for (arch, &current, &user, &self->model_layer, &self->profile_layer, &with_user);
  self->applying = TRUE;
  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    {
      g_auto(GValue) v = G_VALUE_INIT;
      GParamSpec *pspec = props[key_props[k]];
      /* Options the family's schedule does not have are left alone: they do nothing for it. */
      if (!um_gen_key_applies ((UmGenKey) k, arch)
          || (self->user_set & UM_GEN_KEY_BIT (k))
          || um_gen_params_equal_at (&current, &with_user.params, (UmGenKey) k))
        continue;
      params_to_value (&with_user.params, (UmGenKey) k, &v);
      /* Out of the app's range (a model's value the UI cannot show):
       * the property keeps its value rather than half-apply it. */
      if (g_param_value_validate (pspec, &v))
        continue;
      g_object_set_property (G_OBJECT (self), g_param_spec_get_name (pspec), &v);
    }
  self->applying = FALSE;
  g_signal_emit (self, signals[SOURCES_CHANGED], 0);
}

void
um_settings_resolve_with (UmSettings       *self,
                          const char       *family,
                          const UmGenLayer *model,
                          const UmGenLayer *profile,
                          UmGenResolved    *out)
{
  UmGenParams current;
  UmGenLayer user;
  guint32 user_set;

  g_return_if_fail (UM_IS_SETTINGS (self));

  family_params (self, family, &current, &user_set);
  um_gen_layer_init (&user);
  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    if (user_set & UM_GEN_KEY_BIT (k))
      um_gen_layer_take (&user, (UmGenKey) k, &current);
  um_gen_resolve_for (family_arch (family ? family : self->family), &current, &user, model, profile, out);
}

void
um_settings_set_layers (UmSettings *self, const UmGenLayer *model, const char *model_origin, const UmGenLayer *profile)
{
  g_return_if_fail (UM_IS_SETTINGS (self));

  if (model != NULL)
    self->model_layer = *model;
  else
    um_gen_layer_init (&self->model_layer);
  g_free (self->model_origin);
  self->model_origin = g_strdup (model_origin);
  if (profile != NULL)
    self->profile_layer = *profile;
  else
    um_gen_layer_init (&self->profile_layer);
  apply_defaults (self);
}

UmGenSource
um_settings_get_source (UmSettings *self, UmGenKey key)
{
  g_return_val_if_fail (UM_IS_SETTINGS (self) && (guint) key < UM_GEN_N_KEYS, UM_GEN_SOURCE_BUILTIN);

  return (self->user_set & UM_GEN_KEY_BIT (key)) ? UM_GEN_SOURCE_USER : self->defaults.source[key];
}

UmGenSource
um_settings_get_default (UmSettings *self, UmGenKey key, UmGenParams *out)
{
  g_return_val_if_fail (UM_IS_SETTINGS (self) && (guint) key < UM_GEN_N_KEYS, UM_GEN_SOURCE_BUILTIN);

  *out = self->defaults.params;
  return self->defaults.source[key];
}

const UmGenLayer *
um_settings_get_model_layer (UmSettings *self)
{
  g_return_val_if_fail (UM_IS_SETTINGS (self), NULL);

  return &self->model_layer;
}

const char *
um_settings_get_model_origin (UmSettings *self)
{
  g_return_val_if_fail (UM_IS_SETTINGS (self), NULL);

  return self->model_origin;
}

guint32
um_settings_get_user_set (UmSettings *self)
{
  g_return_val_if_fail (UM_IS_SETTINGS (self), 0);

  return self->user_set;
}

void
um_settings_reset (UmSettings *self, UmGenKey key)
{
  g_return_if_fail (UM_IS_SETTINGS (self) && (guint) key < UM_GEN_N_KEYS);

  self->user_set &= ~UM_GEN_KEY_BIT (key);
  schedule_save (self);
  apply_defaults (self);
}

void
um_settings_reset_all (UmSettings *self)
{
  g_return_if_fail (UM_IS_SETTINGS (self));

  self->user_set = 0;
  schedule_save (self);
  apply_defaults (self);
}

char *
um_settings_format_value (const UmGenParams *p, UmGenKey key)
{
  switch (key)
    {
    case UM_GEN_KEY_TEMPERATURE: return g_strdup_printf ("%g", p->temperature);
    case UM_GEN_KEY_CFG_SCALE: return g_strdup_printf ("%g", p->cfg_scale);
    /* As the Remasking row names them. */
    case UM_GEN_KEY_REMASKING: return g_strdup (p->remasking == UM_REMASK_RANDOM ? _("Random") : _("Confidence"));
    case UM_GEN_KEY_ALG: return um_settings_format_alg (p->alg);
    case UM_GEN_KEY_EPS: return g_strdup_printf ("%g", p->eps);
    case UM_GEN_KEY_ALG_TEMP: return g_strdup_printf ("%g", p->alg_temp);
    /* Translators: the value of Top-p or Top-k when the filter is off */
    case UM_GEN_KEY_TOP_P: return p->top_p > 0 && p->top_p < 1 ? g_strdup_printf ("%g", p->top_p) : g_strdup (_("off"));
    case UM_GEN_KEY_TOP_K: return p->top_k > 0 ? g_strdup_printf ("%d", p->top_k) : g_strdup (_("off"));
    /* Translators: the value of Greedy Tokens */
    case UM_GEN_KEY_GREEDY: return g_strdup (p->greedy ? _("on") : _("off"));
    case UM_GEN_KEY_GEN_LENGTH:
    case UM_GEN_KEY_STEPS:
    case UM_GEN_KEY_BLOCK_LENGTH:
    case UM_GEN_N_KEYS:
    default: return um_gen_params_format (p, key);
    }
}

char *
um_settings_format_alg (UmAlg alg)
{
  /* As the Algorithm row names them. */
  switch (alg)
    {
    case UM_ALG_MASKGIT_PLUS: return g_strdup (_("Probability (MaskGIT+)"));
    case UM_ALG_TOPK_MARGIN: return g_strdup (_("Margin (Top-k)"));
    case UM_ALG_ENTROPY: return g_strdup (_("Entropy"));
    case UM_ALG_ORIGIN:
    default: return g_strdup (_("Random (Origin)"));
    }
}

char *
um_settings_describe_source (UmSettings *self, UmGenKey key, const char *mode_name)
{
  UmGenParams current, def;
  UmGenSource source, def_source;
  g_autofree char *value = NULL, *def_value = NULL;

  g_return_val_if_fail (UM_IS_SETTINGS (self) && (guint) key < UM_GEN_N_KEYS, NULL);

  um_settings_get_params (self, &current);
  source = um_settings_get_source (self, key);
  value = um_settings_format_value (&current, key);
  switch (source)
    {
    case UM_GEN_SOURCE_MODEL:
      /* Translators: %s is a parameter's value, e.g. "0.7 — recommended by the model" */
      return g_strdup_printf (_("%s — recommended by the model"), value);
    case UM_GEN_SOURCE_PROFILE:
      if (mode_name != NULL)
        /* Translators: %s is a parameter's value, then a memory mode, e.g. "64 — default of the memory mode extreme-mild" */
        return g_strdup_printf (_("%s — default of the memory mode %s"), value, mode_name);
      return g_strdup_printf (_("%s — default of the memory mode"), value);
    case UM_GEN_SOURCE_USER:
      def_source = um_settings_get_default (self, key, &def);
      if (um_gen_params_equal_at (&current, &def, key))
        /* Translators: %s is a parameter's value, e.g. "0.7 — your choice" */
        return g_strdup_printf (_("%s — your choice"), value);
      def_value = um_settings_format_value (&def, key);
      if (def_source == UM_GEN_SOURCE_MODEL)
        /* Translators: the user's value, then the model's, e.g. "0.9 — your choice; the model recommends 0.7" */
        return g_strdup_printf (_("%s — your choice; the model recommends %s"), value, def_value);
      /* Translators: the user's value, then the default, e.g. "0.9 — your choice; the default is 0" */
      return g_strdup_printf (_("%s — your choice; the default is %s"), value, def_value);
    case UM_GEN_SOURCE_BUILTIN:
    default:
      return NULL;
    }
}

gboolean
um_settings_get_exact_products (UmSettings *self)
{
  g_return_val_if_fail (UM_IS_SETTINGS (self), FALSE);
  return self->exact_products;
}

int
um_settings_get_threads (UmSettings *self)
{
  return self->threads;
}

const char * const *
um_settings_get_recent_models (UmSettings *self)
{
  return (const char * const *) self->recent->pdata;
}

void
um_settings_add_recent_model (UmSettings *self, const char *path)
{
  g_ptr_array_remove_index (self->recent, self->recent->len - 1);   /* the NULL */
  for (guint i = 0; i < self->recent->len; i++)
    if (g_str_equal (g_ptr_array_index (self->recent, i), path))
      {
        g_ptr_array_remove_index (self->recent, i);
        break;
      }
  g_ptr_array_insert (self->recent, 0, g_strdup (path));
  if (self->recent->len > MAX_RECENT)
    g_ptr_array_set_size (self->recent, MAX_RECENT);
  g_ptr_array_add (self->recent, NULL);
  schedule_save (self);
}

static void
add_prop_member (UmSettings *self, JsonBuilder *b, GParamSpec *pspec)
{
  g_auto(GValue) v = G_VALUE_INIT;
  const char *name = g_param_spec_get_name (pspec);

  g_value_init (&v, pspec->value_type);
  g_object_get_property (G_OBJECT (self), name, &v);
  json_builder_set_member_name (b, name);
  switch (pspec->value_type)
    {
    case G_TYPE_INT: json_builder_add_int_value (b, g_value_get_int (&v)); break;
    case G_TYPE_INT64: json_builder_add_int_value (b, g_value_get_int64 (&v)); break;
    case G_TYPE_DOUBLE: json_builder_add_double_value (b, g_value_get_double (&v)); break;
    case G_TYPE_BOOLEAN: json_builder_add_boolean_value (b, g_value_get_boolean (&v)); break;
    default: json_builder_add_string_value (b, g_value_get_string (&v));
    }
}

static void
add_user_set_member (UmSettings *self, JsonBuilder *b)
{
  json_builder_set_member_name (b, "user-set");
  json_builder_begin_array (b);
  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    if (self->user_set & UM_GEN_KEY_BIT (k))
      json_builder_add_string_value (b, g_param_spec_get_name (props[key_props[k]]));
  json_builder_end_array (b);
}

/* The current family's parameters as "families" keeps them. */
static JsonObject *
family_object (UmSettings *self)
{
  g_autoptr(JsonBuilder) b = json_builder_new ();
  g_autoptr(JsonNode) root = NULL;

  json_builder_begin_object (b);
  for (guint i = 0; i < G_N_ELEMENTS (family_props); i++)
    add_prop_member (self, b, props[family_props[i]]);
  add_user_set_member (self, b);
  json_builder_end_object (b);
  root = json_builder_get_root (b);
  return json_object_ref (json_node_get_object (root));
}

/* Sets the per-family properties from @obj (NULL: the defaults, none the
 * user's); a member missing or out of range takes its default. */
static void
apply_family_object (UmSettings *self, JsonObject *obj)
{
  JsonNode *set = obj ? json_object_get_member (obj, "user-set") : NULL;

  for (guint i = 0; i < G_N_ELEMENTS (family_props); i++)
    {
      GParamSpec *pspec = props[family_props[i]];
      JsonNode *m = obj ? json_object_get_member (obj, g_param_spec_get_name (pspec)) : NULL;
      g_auto(GValue) v = G_VALUE_INIT;

      if (m == NULL || JSON_NODE_HOLDS_NULL (m) || !member_value (pspec, m, &v, NULL)
          || g_param_value_validate (pspec, &v))
        {
          if (G_IS_VALUE (&v))
            g_value_unset (&v);
          g_value_init (&v, pspec->value_type);
          g_param_value_set_default (pspec, &v);
        }
      g_object_set_property (G_OBJECT (self), g_param_spec_get_name (pspec), &v);
    }
  self->user_set = set != NULL && JSON_NODE_HOLDS_ARRAY (set) ? user_set_from_array (json_node_get_array (set)) : 0;
}

const char *
um_settings_get_family (UmSettings *self)
{
  g_return_val_if_fail (UM_IS_SETTINGS (self), NULL);
  return self->family;
}

void
um_settings_set_family (UmSettings *self, const char *family)
{
  g_autoptr(JsonObject) theirs = NULL;
  g_autofree char *key = NULL;

  g_return_if_fail (UM_IS_SETTINGS (self));
  g_return_if_fail (family != NULL);

  if (g_strcmp0 (self->family, family) == 0)
    return;
  g_hash_table_replace (self->families, g_strdup (self->family), family_object (self));
  if (g_hash_table_steal_extended (self->families, family, (gpointer *) &key, (gpointer *) &theirs))
    g_clear_pointer (&key, g_free);
  g_free (self->family);
  self->family = g_strdup (family);
  g_object_freeze_notify (G_OBJECT (self));
  self->applying = TRUE;
  apply_family_object (self, theirs);
  self->applying = FALSE;
  /* The model's recommendation was another family's: until the new
   * model's layers come (um_settings_set_layers ()), the family's own
   * defaults and the profile's. */
  um_gen_layer_init (&self->model_layer);
  g_clear_pointer (&self->model_origin, g_free);
  apply_defaults (self);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_FAMILY]);
  g_object_thaw_notify (G_OBJECT (self));
  schedule_save (self);
}

gboolean
um_settings_save (UmSettings *self, GError **error)
{
  g_autoptr(JsonBuilder) b = json_builder_new ();
  g_autoptr(JsonGenerator) gen = json_generator_new ();
  g_autoptr(JsonNode) root = NULL;
  g_autofree char *dir = g_path_get_dirname (self->path);
  g_autofree char *text = NULL;

  json_builder_begin_object (b);
  for (guint i = 1; i < N_PROPS; i++)
    add_prop_member (self, b, props[i]);
  add_user_set_member (self, b);
  /* The other families' parameters, in a stable order. */
  json_builder_set_member_name (b, "families");
  json_builder_begin_object (b);
  {
    g_autoptr(GList) names = g_list_sort (g_hash_table_get_keys (self->families), (GCompareFunc) strcmp);
    for (GList *l = names; l != NULL; l = l->next)
      {
        JsonNode *node = json_node_alloc ();
        json_node_init_object (node, g_hash_table_lookup (self->families, l->data));
        json_builder_set_member_name (b, l->data);
        json_builder_add_value (b, node);
      }
  }
  json_builder_end_object (b);
  json_builder_set_member_name (b, "recent-models");
  json_builder_begin_array (b);
  for (guint i = 0; i + 1 < self->recent->len; i++)
    /* A path that is not UTF-8 would make the file unreadable as JSON. */
    if (g_utf8_validate (g_ptr_array_index (self->recent, i), -1, NULL))
      json_builder_add_string_value (b, g_ptr_array_index (self->recent, i));
  json_builder_end_array (b);
  json_builder_end_object (b);
  root = json_builder_get_root (b);
  json_generator_set_root (gen, root);
  json_generator_set_pretty (gen, TRUE);
  text = json_generator_to_data (gen, NULL);
  g_mkdir_with_parents (dir, 0700);
  /* g_file_set_contents writes a temporary file and renames it. */
  return g_file_set_contents_full (self->path, text, -1, G_FILE_SET_CONTENTS_CONSISTENT, 0600, error);
}

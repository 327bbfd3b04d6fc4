/* um-server-request.c — OpenAI request bodies to UmGeneratorRequest.
 *
 * Everything a request can get wrong is found here, before the server
 * answers "200": once a stream's headers are out, an error can only travel
 * in-band, and naive clients miss those. */
#include "um-server-request.h"

#include "um-error.h"
#include "um-json.h"

#include <math.h>
#include <string.h>

#define FAIL(param_name, ...) G_STMT_START {                                   \
    if (param) *param = g_strdup (param_name);                                  \
    g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, __VA_ARGS__);         \
    return FALSE;                                                              \
  } G_STMT_END
#define UNSUPPORTED(param_name, ...) G_STMT_START {                            \
    if (param) *param = g_strdup (param_name);                                  \
    g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, __VA_ARGS__);           \
    return FALSE;                                                              \
  } G_STMT_END

void
um_api_request_clear (UmApiRequest *r)
{
  if (r->messages != NULL)
    {
      for (guint i = 0; i < r->messages->len; i++)
        {
          UmGenMessage *m = &g_array_index (r->messages, UmGenMessage, i);
          g_free (m->role);
          g_free (m->content);
        }
      g_array_unref (r->messages);
    }
  g_clear_pointer (&r->prompt_ids, g_array_unref);
  g_free (r->model);
  g_free (r->prompt);
  g_free (r->suffix);
  g_strfreev (r->stop);
  memset (r, 0, sizeof *r);
}

static gboolean
is_null (JsonNode *n)
{
  return n == NULL || JSON_NODE_HOLDS_NULL (n);
}

static gboolean
get_bool (JsonNode *n, const char *name, gboolean *out, char **param, GError **error)
{
  if (!JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_BOOLEAN)
    FAIL (name, "%s must be true or false", name);
  *out = json_node_get_boolean (n);
  return TRUE;
}

static gboolean
get_number (JsonNode *n, const char *name, double lo, double hi, double *out, char **param, GError **error)
{
  GType t = JSON_NODE_HOLDS_VALUE (n) ? json_node_get_value_type (n) : G_TYPE_INVALID;
  double v;

  if (t != G_TYPE_INT64 && t != G_TYPE_DOUBLE)
    FAIL (name, "%s must be a number", name);
  v = t == G_TYPE_INT64 ? (double) json_node_get_int (n) : json_node_get_double (n);
  if (!isfinite (v) || v < lo || v > hi)
    FAIL (name, "%s must be between %g and %g (got %g)", name, lo, hi, v);
  *out = v;
  return TRUE;
}

/* An integer, also written as 12.0; @lo..@hi inclusive. */
static gboolean
get_int (JsonNode *n, const char *name, gint64 lo, gint64 hi, gint64 *out, char **param, GError **error)
{
  GType t = JSON_NODE_HOLDS_VALUE (n) ? json_node_get_value_type (n) : G_TYPE_INVALID;
  gint64 v;

  if (t == G_TYPE_INT64)
    v = json_node_get_int (n);
  else if (t == G_TYPE_DOUBLE && json_node_get_double (n) == floor (json_node_get_double (n))
           && fabs (json_node_get_double (n)) < 9e15)
    v = (gint64) json_node_get_double (n);
  else
    FAIL (name, "%s must be an integer", name);
  if (v < lo || v > hi)
    FAIL (name, "%s must be between %" G_GINT64_FORMAT " and %" G_GINT64_FORMAT " (got %" G_GINT64_FORMAT ")",
          name, lo, hi, v);
  *out = v;
  return TRUE;
}

static gboolean
get_string (JsonNode *n, const char *name, const char **out, char **param, GError **error)
{
  if (!JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_STRING)
    FAIL (name, "%s must be a string", name);
  *out = json_node_get_string (n);
  return TRUE;
}

/* A message's content: a string, or text parts joined. */
static gboolean
message_content (JsonNode *n, int index, char **out, char **param, GError **error)
{
  g_autofree char *name = g_strdup_printf ("messages[%d].content", index);

  if (is_null (n))
    {
      *out = g_strdup ("");
      return TRUE;
    }
  if (JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_STRING)
    {
      *out = g_strdup (json_node_get_string (n));
      return TRUE;
    }
  if (JSON_NODE_HOLDS_ARRAY (n))
    {
      JsonArray *parts = json_node_get_array (n);
      g_autoptr(GString) text = g_string_new (NULL);

      for (guint i = 0; i < json_array_get_length (parts); i++)
        {
          JsonNode *pn = json_array_get_element (parts, i);
          JsonObject *po = JSON_NODE_HOLDS_OBJECT (pn) ? json_node_get_object (pn) : NULL;
          const char *type = um_json_get_string (po, "type");
          const char *t;

          if (type == NULL)
            FAIL (name, "%s[%u] must be an object with a \"type\"", name, i);
          if (strcmp (type, "text") != 0)
            UNSUPPORTED (name, "%s[%u]: content of type \"%s\" is not supported (text only)", name, i, type);
          if (!json_object_has_member (po, "text") || !get_string (json_object_get_member (po, "text"), name, &t, NULL, NULL))
            FAIL (name, "%s[%u].text must be a string", name, i);
          g_string_append (text, t);
        }
      *out = g_string_free (g_steal_pointer (&text), FALSE);
      return TRUE;
    }
  FAIL (name, "%s must be a string or an array of text parts", name);
}

static gboolean
parse_messages (JsonNode *n, UmApiRequest *out, char **param, GError **error)
{
  JsonArray *a;

  if (is_null (n))
    FAIL ("messages", "messages is required");
  if (!JSON_NODE_HOLDS_ARRAY (n) || json_array_get_length (a = json_node_get_array (n)) == 0)
    FAIL ("messages", "messages must be a non-empty array");
  if (json_array_get_length (a) > 4096)
    FAIL ("messages", "messages has more than 4096 entries");
  out->messages = g_array_new (FALSE, TRUE, sizeof (UmGenMessage));
  for (guint i = 0; i < json_array_get_length (a); i++)
    {
      JsonNode *mn = json_array_get_element (a, i);
      JsonObject *mo = JSON_NODE_HOLDS_OBJECT (mn) ? json_node_get_object (mn) : NULL;
      g_autofree char *rname = g_strdup_printf ("messages[%u].role", i);
      const char *role;
      UmGenMessage m = { 0 };

      if (mo == NULL)
        FAIL ("messages", "messages[%u] must be an object", i);
      if (!json_object_has_member (mo, "role"))
        FAIL (rname, "%s is required", rname);
      if (!get_string (json_object_get_member (mo, "role"), rname, &role, param, error))
        return FALSE;
      if (strcmp (role, "developer") == 0)
        role = "system";   /* OpenAI's newer name for the system role */
      if (strcmp (role, "tool") == 0 || strcmp (role, "function") == 0)
        UNSUPPORTED (rname, "%s \"%s\" is not supported: this server has no tools", rname, role);
      if (strcmp (role, "system") != 0 && strcmp (role, "user") != 0 && strcmp (role, "assistant") != 0)
        FAIL (rname, "%s must be system, developer, user or assistant (got \"%s\")", rname, role);
      if (json_object_has_member (mo, "tool_calls") && !is_null (json_object_get_member (mo, "tool_calls")))
        UNSUPPORTED ("messages", "messages[%u].tool_calls is not supported: this server has no tools", i);
      if (!message_content (json_object_get_member (mo, "content"), (int) i, &m.content, param, error))
        return FALSE;
      m.role = g_strdup (role);
      g_array_append_val (out->messages, m);
    }
  return TRUE;
}

static gboolean
parse_prompt (JsonNode *n, UmApiRequest *out, char **param, GError **error)
{
  if (is_null (n))
    FAIL ("prompt", "prompt is required");
  if (JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_STRING)
    {
      out->prompt = g_strdup (json_node_get_string (n));
      return TRUE;
    }
  if (JSON_NODE_HOLDS_ARRAY (n))
    {
      JsonArray *a = json_node_get_array (n);
      guint len = json_array_get_length (a);

      if (len == 0)
        FAIL ("prompt", "prompt must not be empty");
      /* ["text"] is one prompt; several are a batch, which n>1 would be too. */
      if (JSON_NODE_HOLDS_VALUE (json_array_get_element (a, 0))
          && json_node_get_value_type (json_array_get_element (a, 0)) == G_TYPE_STRING)
        {
          if (len > 1)
            UNSUPPORTED ("prompt", "several prompts in one request are not supported: send them one by one");
          out->prompt = g_strdup (json_array_get_string_element (a, 0));
          return TRUE;
        }
      if (len > 65536)
        FAIL ("prompt", "prompt has more than 65536 token ids");
      out->prompt_ids = g_array_sized_new (FALSE, FALSE, sizeof (gint32), len);
      for (guint i = 0; i < len; i++)
        {
          gint64 v;
          if (JSON_NODE_HOLDS_ARRAY (json_array_get_element (a, i)))
            UNSUPPORTED ("prompt", "several prompts in one request are not supported: send them one by one");
          if (!get_int (json_array_get_element (a, i), "prompt", 0, G_MAXINT32, &v, param, error))
            return FALSE;
          gint32 id = (gint32) v;
          g_array_append_val (out->prompt_ids, id);
        }
      return TRUE;
    }
  FAIL ("prompt", "prompt must be a string or an array of token ids");
}

static gboolean
parse_stop (JsonNode *n, UmApiRequest *out, char **param, GError **error)
{
  g_autoptr(GPtrArray) v = g_ptr_array_new_with_free_func (g_free);

  if (is_null (n))
    return TRUE;
  if (JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_STRING)
    g_ptr_array_add (v, g_strdup (json_node_get_string (n)));
  else if (JSON_NODE_HOLDS_ARRAY (n))
    {
      JsonArray *a = json_node_get_array (n);
      if (json_array_get_length (a) > 4)
        FAIL ("stop", "stop takes at most 4 strings");
      for (guint i = 0; i < json_array_get_length (a); i++)
        {
          const char *s;
          if (!get_string (json_array_get_element (a, i), "stop", &s, param, error))
            return FALSE;
          g_ptr_array_add (v, g_strdup (s));
        }
    }
  else
    FAIL ("stop", "stop must be a string or an array of strings");
  for (guint i = 0; i < v->len; i++)
    {
      if (((char *) g_ptr_array_index (v, i))[0] == '\0')
        FAIL ("stop", "stop strings must not be empty");
      /* Every step matches the answer so far against each. */
      if (strlen (g_ptr_array_index (v, i)) > UM_API_MAX_STOP_BYTES)
        FAIL ("stop", "a stop string is longer than " G_STRINGIFY (UM_API_MAX_STOP_BYTES) " bytes");
    }
  if (v->len > 0)
    {
      g_ptr_array_add (v, NULL);
      out->stop = (char **) g_ptr_array_free (g_steal_pointer (&v), FALSE);
    }
  return TRUE;
}

static void
take_key (UmApiRequest *out, UmGenKey key)
{
  um_gen_layer_take (&out->user, key, &out->given);
}

/* The "unmask" extension object. Unknown keys are errors here: the
 * namespace is ours, and a typo should not run silently with a default. */
static gboolean
parse_extension (JsonNode *n, UmApiRequest *out, char **param, GError **error)
{
  JsonObject *o;
  g_autoptr(GList) members = NULL;
  UmGenParams *g = &out->given;

  if (is_null (n))
    return TRUE;
  if (!JSON_NODE_HOLDS_OBJECT (n))
    FAIL ("unmask", "unmask must be an object");
  o = json_node_get_object (n);
  members = json_object_get_members (o);
  for (GList *l = members; l != NULL; l = l->next)
    {
      const char *k = l->data;
      JsonNode *v = json_object_get_member (o, k);
      g_autofree char *name = g_strconcat ("unmask.", k, NULL);
      gint64 iv;
      const char *sv;
      gboolean bv;

      if (is_null (v))
        continue;
      if (strcmp (k, "steps") == 0)
        {
          if (!get_int (v, name, 1, 4096, &iv, param, error))
            return FALSE;
          g->steps = (int) iv;
          take_key (out, UM_GEN_KEY_STEPS);
        }
      else if (strcmp (k, "block_length") == 0)
        {
          if (!get_int (v, name, 1, 4096, &iv, param, error))
            return FALSE;
          g->block_length = (int) iv;
          take_key (out, UM_GEN_KEY_BLOCK_LENGTH);
        }
      else if (strcmp (k, "remasking") == 0)
        {
          if (!get_string (v, name, &sv, param, error))
            return FALSE;
          if (!um_remasking_from_string (sv, &g->remasking))
            FAIL (name, "%s must be low_confidence or random (got \"%s\")", name, sv);
          take_key (out, UM_GEN_KEY_REMASKING);
        }
      else if (strcmp (k, "cfg_scale") == 0)
        {
          if (!get_number (v, name, 0, 100, &g->cfg_scale, param, error))
            return FALSE;
          take_key (out, UM_GEN_KEY_CFG_SCALE);
        }
      else if (strcmp (k, "cache") == 0)
        {
          if (!get_string (v, name, &sv, param, error))
            return FALSE;
          if (!um_cache_mode_from_string (sv, &g->cache))
            FAIL (name, "%s must be none, prefix or dual (got \"%s\")", name, sv);
          out->has_cache = TRUE;
        }
      else if (strcmp (k, "threshold") == 0)
        {
          if (!get_number (v, name, 0, 1, &g->threshold, param, error))
            return FALSE;
          out->has_threshold = TRUE;
        }
      else if (strcmp (k, "factor") == 0)
        {
          if (!get_number (v, name, 0, 1e6, &g->factor, param, error))
            return FALSE;
          out->has_factor = TRUE;
        }
      else if (strcmp (k, "alg") == 0)
        {
          if (!get_string (v, name, &sv, param, error))
            return FALSE;
          if (!um_alg_from_string (sv, &g->alg))
            FAIL (name, "%s must be origin, maskgit_plus, topk_margin or entropy (got \"%s\")", name, sv);
          take_key (out, UM_GEN_KEY_ALG);
        }
      else if (strcmp (k, "eps") == 0)
        {
          if (!get_number (v, name, 0, 1, &g->eps, param, error))
            return FALSE;
          take_key (out, UM_GEN_KEY_EPS);
        }
      else if (strcmp (k, "alg_temp") == 0)
        {
          if (!get_number (v, name, 0, 1e6, &g->alg_temp, param, error))
            return FALSE;
          take_key (out, UM_GEN_KEY_ALG_TEMP);
        }
      else if (strcmp (k, "top_p") == 0)
        {
          if (!get_number (v, name, 0, 1, &g->top_p, param, error))
            return FALSE;
          take_key (out, UM_GEN_KEY_TOP_P);
        }
      else if (strcmp (k, "top_k") == 0)
        {
          if (!get_int (v, name, 0, G_MAXINT32, &iv, param, error))
            return FALSE;
          g->top_k = (int) iv;
          take_key (out, UM_GEN_KEY_TOP_K);
        }
      else if (strcmp (k, "greedy") == 0)
        {
          if (!get_bool (v, name, &g->greedy, param, error))
            return FALSE;
          take_key (out, UM_GEN_KEY_GREEDY);
        }
      else if (strcmp (k, "stream_steps") == 0)
        {
          if (!get_string (v, name, &sv, param, error))
            return FALSE;
          if (strcmp (sv, "none") == 0)
            out->stream_steps = UM_STREAM_STEPS_NONE;
          else if (strcmp (sv, "diff") == 0)
            out->stream_steps = UM_STREAM_STEPS_DIFF;
          else if (strcmp (sv, "full") == 0)
            out->stream_steps = UM_STREAM_STEPS_FULL;
          else
            FAIL (name, "%s must be none, diff or full (got \"%s\")", name, sv);
        }
      else if (strcmp (k, "step_interval_ms") == 0)
        {
          if (!get_int (v, name, 0, 60000, &iv, param, error))
            return FALSE;
          out->step_interval_ms = (guint) iv;
        }
      else if (strcmp (k, "return_trace") == 0)
        {
          if (!get_bool (v, name, &out->return_trace, param, error))
            return FALSE;
        }
      else if (strcmp (k, "confidence") == 0)
        {
          if (!get_bool (v, name, &bv, param, error))   /* confidences are always sent */
            return FALSE;
        }
      else
        FAIL (name, "%s is not a field of the unmask extension", name);
    }
  return TRUE;
}

gboolean
um_api_request_parse (UmApiKind     kind,
                      const char   *body,
                      gsize         len,
                      gsize         max_bytes,
                      UmApiRequest *out,
                      char        **param,
                      GError      **error)
{
  UmJsonLimits limits = { max_bytes, 32, FALSE };
  g_autoptr(JsonNode) root = NULL;
  g_autoptr(GError) jerr = NULL;
  JsonObject *o;
  JsonNode *n;
  gint64 iv;

  memset (out, 0, sizeof *out);
  out->kind = kind;
  um_gen_layer_init (&out->user);
  um_gen_params_init (&out->given);
  if (param)
    *param = NULL;

  root = um_json_parse (body, (gssize) len, "request body", &limits, &jerr);
  if (root == NULL)
    FAIL (NULL, "%s", jerr->message);
  if (!JSON_NODE_HOLDS_OBJECT (root))
    FAIL (NULL, "the request body must be a JSON object");
  o = json_node_get_object (root);

#define MEMBER(name) ((n = json_object_get_member (o, name)) != NULL && !JSON_NODE_HOLDS_NULL (n))
  if (MEMBER ("model"))
    {
      const char *s;
      if (!get_string (n, "model", &s, param, error))
        return FALSE;
      out->model = g_strdup (s);
    }
  if (kind == UM_API_CHAT)
    {
      if (!parse_messages (json_object_get_member (o, "messages"), out, param, error))
        return FALSE;
    }
  else
    {
      if (!parse_prompt (json_object_get_member (o, "prompt"), out, param, error))
        return FALSE;
      if (MEMBER ("suffix"))
        {
          const char *s;
          if (!get_string (n, "suffix", &s, param, error))
            return FALSE;
          out->suffix = g_strdup (s);
        }
      if (MEMBER ("echo"))
        {
          gboolean echo;
          if (!get_bool (n, "echo", &echo, param, error))
            return FALSE;
          if (echo)
            UNSUPPORTED ("echo", "echo is not supported");
        }
      if (MEMBER ("best_of") && (!get_int (n, "best_of", 1, 1, &iv, NULL, NULL)))
        UNSUPPORTED ("best_of", "best_of other than 1 is not supported");
    }
  if (MEMBER ("n"))
    {
      if (!get_int (n, "n", 1, G_MAXINT32, &iv, param, error))
        return FALSE;
      if (iv != 1)
        UNSUPPORTED ("n", "n > 1 is not supported: one answer per request");
    }
  for (guint i = 0; i < 2; i++)
    {
      const char *k = i == 0 ? "tools" : "functions";
      if (MEMBER (k) && (!JSON_NODE_HOLDS_ARRAY (n) || json_array_get_length (json_node_get_array (n)) > 0))
        UNSUPPORTED (k, "%s are not supported: this server has no tool calling", k);
    }
  if (MEMBER ("response_format"))
    {
      JsonObject *ro = JSON_NODE_HOLDS_OBJECT (n) ? json_node_get_object (n) : NULL;
      const char *type = um_json_get_string (ro, "type");
      if (type == NULL)
        FAIL ("response_format", "response_format must be an object with a \"type\"");
      if (strcmp (type, "text") != 0)
        UNSUPPORTED ("response_format", "response_format \"%s\" is not supported (structured output)", type);
    }
  if (MEMBER ("max_completion_tokens") || MEMBER ("max_tokens"))
    {
      const char *name = json_object_has_member (o, "max_completion_tokens")
                         && !JSON_NODE_HOLDS_NULL (json_object_get_member (o, "max_completion_tokens"))
                         ? "max_completion_tokens" : "max_tokens";
      if (!get_int (json_object_get_member (o, name), name, 1, 65536, &iv, param, error))
        return FALSE;
      out->given.gen_length = (int) iv;
      take_key (out, UM_GEN_KEY_GEN_LENGTH);
    }
  if (MEMBER ("temperature"))
    {
      if (!get_number (n, "temperature", 0, 100, &out->given.temperature, param, error))
        return FALSE;
      take_key (out, UM_GEN_KEY_TEMPERATURE);
    }
  if (MEMBER ("seed"))
    {
      if (!get_int (n, "seed", G_MININT64, G_MAXINT64, &iv, param, error))
        return FALSE;
      out->given.seed = (guint64) iv;
      out->has_seed = TRUE;
    }
  if (MEMBER ("stop") && !parse_stop (n, out, param, error))
    return FALSE;
  if (MEMBER ("stream") && !get_bool (n, "stream", &out->stream, param, error))
    return FALSE;
  if (MEMBER ("stream_options"))
    {
      JsonObject *so = JSON_NODE_HOLDS_OBJECT (n) ? json_node_get_object (n) : NULL;
      if (so == NULL)
        FAIL ("stream_options", "stream_options must be an object");
      if (json_object_has_member (so, "include_usage")
          && !get_bool (json_object_get_member (so, "include_usage"), "stream_options.include_usage",
                        &out->include_usage, param, error))
        return FALSE;
    }
  if (!parse_extension (json_object_get_member (o, "unmask"), out, param, error))
    return FALSE;
#undef MEMBER
  /* Everything else (top_p, penalties, logit_bias, logprobs, user, ...) is
   * ignored, as the field table of docs/server-api.md says. */
  return TRUE;
}

gboolean
um_api_request_resolve (const UmApiRequest *r,
                        UmArch              arch,
                        const UmGenParams  *base,
                        const UmGenLayer   *server_user,
                        const UmGenLayer   *model,
                        const UmGenLayer   *profile,
                        int                 prompt_len,
                        int                 suffix_len,
                        guint               max_seq_len,
                        UmGenParams        *out,
                        char              **param,
                        GError            **error)
{
  UmGenLayer user = *server_user;
  UmGenParams b = *base;
  UmGenParams run;
  UmGenResolved resolved;
  g_autoptr(GError) verr = NULL;
  gboolean infill = r->suffix != NULL && r->suffix[0] != '\0';
  gboolean user_block = um_gen_layer_has (&r->user, UM_GEN_KEY_BLOCK_LENGTH);

  if (param)
    *param = NULL;
  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    if (um_gen_layer_has (&r->user, (UmGenKey) k))
      {
        if (!um_gen_key_applies ((UmGenKey) k, arch) && k != UM_GEN_KEY_GEN_LENGTH && k != UM_GEN_KEY_TEMPERATURE)
          {
            g_autofree char *name = g_strconcat ("unmask.", um_gen_key_name ((UmGenKey) k), NULL);
            FAIL (name, "%s is not an option of %s models", name, um_arch_info (arch)->name);
          }
        um_gen_layer_take (&user, (UmGenKey) k, &r->user.params);
      }
  if (r->has_seed)
    b.seed = r->given.seed;
  if (r->has_cache)
    b.cache = r->given.cache;
  if (r->has_threshold)
    b.threshold = r->given.threshold;
  if (r->has_factor)
    b.factor = r->given.factor;
  um_gen_resolve_for (arch, &b, &user, model, profile, &resolved);
  *out = resolved.params;
  /* OpenAI clients set max_tokens and nothing of ours: a block length or
   * step count that came from the defaults must not make a plain request
   * fail. The block becomes the whole canvas if it does not divide it (or
   * with a suffix, which then sits in the one block after the answer);
   * steps stay at most one per token and a multiple of the blocks. */
  if (um_schedule_for_arch (arch)->answer_blocks && out->gen_length > 0
      && !user_block && (out->block_length <= 0 || out->gen_length % out->block_length != 0 || infill))
    out->block_length = out->gen_length;
  if (prompt_len >= 0
      && (gint64) prompt_len + MAX (suffix_len, 0) + out->gen_length > (gint64) max_seq_len)
    {
      if (param)
        *param = g_strdup (r->kind == UM_API_CHAT ? "messages" : "prompt");
      g_set_error (error, UM_ERROR, UM_ERROR_CONFIG,   /* answered as context_length_exceeded */
                   "the prompt (%d tokens%s) and max_tokens (%d) exceed the model's context of %u tokens",
                   prompt_len + MAX (suffix_len, 0), suffix_len > 0 ? " with the suffix" : "", out->gen_length,
                   max_seq_len);
      return FALSE;
    }
  /* RND1 keeps the canvas's last position for its pad token, where a
   * suffix's last token would go. */
  if (infill && um_schedule_for_arch (arch)->reserves_last)
    UNSUPPORTED ("suffix", "a suffix is not supported for %s models: their schedule reserves the canvas's last "
                 "position", um_arch_info (arch)->name);
  /* What the generator will run: a suffix's tokens are fixed after the
   * answer and grow the canvas; one block stays one block. */
  run = *out;
  if (suffix_len > 0)
    {
      if (run.block_length == run.gen_length)
        run.block_length += suffix_len;
      run.gen_length += suffix_len;
      if (um_schedule_for_arch (arch)->answer_blocks && run.block_length > 0
          && run.gen_length % run.block_length != 0)
        FAIL ("unmask.block_length",
              "with the suffix (%d tokens) the canvas is max_tokens + %d = %d tokens: unmask.block_length (%d) "
              "must divide it, or equal max_tokens (one block), or be left out",
              suffix_len, suffix_len, run.gen_length, run.block_length);
    }
  if (um_schedule_for_arch (arch)->answer_blocks && out->gen_length > 0 && run.block_length > 0
      && run.gen_length % run.block_length == 0 && !um_gen_layer_has (&r->user, UM_GEN_KEY_STEPS))
    {
      int blocks = run.gen_length / run.block_length;
      int steps = MIN (out->steps, out->gen_length);
      steps -= steps % blocks;
      out->steps = run.steps = MAX (steps, blocks);
    }
  if (!um_gen_params_validate_for (&run, arch, MAX (prompt_len, 0), max_seq_len, &verr))
    FAIL ("unmask", "%s", verr->message);
  return TRUE;
}

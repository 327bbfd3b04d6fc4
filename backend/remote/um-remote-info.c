/* um-remote-info.c — what a server says of its model (a /v1/models
 * element), its error bodies, and the request's "unmask" object. */
#include "um-remote-private.h"

#include <math.h>
#include <string.h>

#include "um-error.h"
#include "um-json.h"
#include "um-model-config.h"
#include "um-schedule-table.h"

/* A model without Unmask's description: the LLaDA family's options apply
 * (what the pages offer), no mask token, and a context no page limits. */
#define OTHER_SERVER_MAX_SEQ (1 << 20)

void
um_remote_info_clear (UmGeneratorInfo *info)
{
  g_clear_pointer (&info->model_id, g_free);
  g_clear_pointer (&info->display_name, g_free);
  g_clear_pointer (&info->location, g_free);
}

static gboolean
member_int (JsonObject *obj, const char *name, gint64 lo, gint64 hi, gint64 *out)
{
  JsonNode *n = json_object_get_member (obj, name);

  if (n == NULL || !JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_INT64)
    return FALSE;
  *out = json_node_get_int (n);
  return *out >= lo && *out <= hi;
}

static gboolean
member_double (JsonObject *obj, const char *name, double lo, double hi, double *out)
{
  JsonNode *n = json_object_get_member (obj, name);
  GType t;

  if (n == NULL || !JSON_NODE_HOLDS_VALUE (n))
    return FALSE;
  t = json_node_get_value_type (n);
  if (t != G_TYPE_INT64 && t != G_TYPE_DOUBLE)
    return FALSE;
  *out = json_node_get_double (n);
  return isfinite (*out) && *out >= lo && *out <= hi;
}

/* Text from a server, cut to @max characters (it goes into titles). */
static char *
bounded (const char *s, glong max)
{
  return g_utf8_substring (s, 0, MIN (g_utf8_strlen (s, -1), max));
}

/* One default of the server's "defaults" object into @rec's layer; a
 * value that is present but unusable becomes a warning. */
static void
take_default (UmGenRecommendation *rec, JsonObject *d, UmGenKey key, const char *name)
{
  UmGenParams *p = &rec->layer.params;
  gboolean ok = FALSE;
  const char *s;
  gint64 v;
  double x;

  if (!json_object_has_member (d, name))
    return;
  switch (key)
    {
    case UM_GEN_KEY_GEN_LENGTH:
    case UM_GEN_KEY_STEPS:
    case UM_GEN_KEY_BLOCK_LENGTH:
      if ((ok = member_int (d, name, 1, UM_REMOTE_MAX_SEQ, &v)))
        {
          if (key == UM_GEN_KEY_GEN_LENGTH)
            p->gen_length = (int) v;
          else if (key == UM_GEN_KEY_STEPS)
            p->steps = (int) v;
          else
            p->block_length = (int) v;
        }
      break;
    case UM_GEN_KEY_TOP_K:
      if ((ok = member_int (d, name, 0, G_MAXINT32, &v)))
        p->top_k = (int) v;
      break;
    case UM_GEN_KEY_TEMPERATURE:
      if ((ok = member_double (d, name, 0, 1e6, &x)))
        p->temperature = x;
      break;
    case UM_GEN_KEY_CFG_SCALE:
      if ((ok = member_double (d, name, 0, 1e6, &x)))
        p->cfg_scale = x;
      break;
    case UM_GEN_KEY_EPS:
      if ((ok = member_double (d, name, 0, 1, &x) && x < 1))
        p->eps = x;
      break;
    case UM_GEN_KEY_ALG_TEMP:
      if ((ok = member_double (d, name, 0, 1e6, &x)))
        p->alg_temp = x;
      break;
    case UM_GEN_KEY_TOP_P:
      if ((ok = member_double (d, name, 0, 1, &x)))
        p->top_p = x;
      break;
    case UM_GEN_KEY_REMASKING:
      ok = (s = um_json_get_string (d, name)) != NULL && um_remasking_from_string (s, &p->remasking);
      break;
    case UM_GEN_KEY_ALG:
      ok = (s = um_json_get_string (d, name)) != NULL && um_alg_from_string (s, &p->alg);
      break;
    case UM_GEN_KEY_GREEDY:
      {
        JsonNode *n = json_object_get_member (d, name);
        if ((ok = JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_BOOLEAN))
          p->greedy = json_node_get_boolean (n);
      }
      break;
    default:
      return;
    }
  if (!ok)
    {
      if (rec->warnings->len < 16)
        g_ptr_array_add (rec->warnings, g_strdup_printf ("the server's default \"%s\" is not usable: ignored", name));
      return;
    }
  /* Only what this family's schedule has: the others stay the pages'. */
  if (um_gen_key_applies (key, rec->arch))
    rec->layer.set |= UM_GEN_KEY_BIT (key);
}

gboolean
um_remote_parse_model (JsonObject           *obj,
                       const char           *base_url,
                       UmGeneratorInfo      *info,
                       gboolean             *out_unmask,
                       UmGenRecommendation **out_rec,
                       GError              **error)
{
  g_autoptr(UmGenRecommendation) rec = um_gen_recommendation_new_empty ();
  const char *id = um_json_get_string (obj, "id");
  JsonNode *un = json_object_get_member (obj, "unmask");
  gint64 v;

  memset (info, 0, sizeof *info);
  if (id == NULL || id[0] == '\0' || strlen (id) > 1024)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_REMOTE, "the server listed a model without a usable \"id\"");
      return FALSE;
    }
  info->model_id = g_strdup (id);
  info->remote = TRUE;
  info->location = g_strdup (base_url);
  info->arch = um_arch_fallback ();
  info->max_seq_len = OTHER_SERVER_MAX_SEQ;
  info->mask_id = info->eos_id = info->eot_id = -1;
  rec->arch = um_arch_fallback ();
  *out_unmask = un != NULL && JSON_NODE_HOLDS_OBJECT (un);

  if (*out_unmask)
    {
      JsonObject *u = json_node_get_object (un);
      const char *arch = um_json_get_string (u, "arch");
      const char *name = um_json_get_string (u, "display_name");
      JsonNode *d = json_object_get_member (u, "defaults");

      if (arch != NULL && !um_arch_from_gguf (arch, &info->arch))
        {
          g_autofree char *cut = bounded (arch, 40);
          g_ptr_array_add (rec->warnings, g_strdup_printf ("the server's model family \"%s\" is unknown here: "
                                                           "its options are shown as LLaDA's", cut));
          info->arch = um_arch_fallback ();
        }
      rec->arch = info->arch;
      if (name != NULL && name[0] != '\0')
        info->display_name = bounded (name, 200);
      if (member_int (u, "max_seq_len", 1, UM_REMOTE_MAX_SEQ, &v))
        info->max_seq_len = (guint) v;
      if (member_int (u, "mask_id", -1, G_MAXINT32, &v))
        info->mask_id = (gint32) v;
      if (member_int (u, "eos_id", -1, G_MAXINT32, &v))
        info->eos_id = (gint32) v;
      if (member_int (u, "eot_id", -1, G_MAXINT32, &v))
        info->eot_id = (gint32) v;
      if (d != NULL && JSON_NODE_HOLDS_OBJECT (d))
        {
          JsonObject *dobj = json_node_get_object (d);

          for (guint k = 0; k < UM_GEN_N_KEYS; k++)
            take_default (rec, dobj, (UmGenKey) k, um_gen_key_name ((UmGenKey) k));
          /* The request's name for the canvas. */
          if (!(rec->layer.set & UM_GEN_KEY_BIT (UM_GEN_KEY_GEN_LENGTH)))
            take_default (rec, dobj, UM_GEN_KEY_GEN_LENGTH, "max_tokens");
          rec->origin = g_strdup ("the server's defaults");
        }
    }
  if (info->display_name == NULL)
    info->display_name = bounded (id, 200);
  *out_rec = g_steal_pointer (&rec);
  return TRUE;
}

char *
um_remote_error_message (const char *body, gsize len)
{
  static const UmJsonLimits limits = { UM_REMOTE_MAX_BODY_BYTES, 16, TRUE };
  g_autoptr(JsonNode) root = NULL;
  JsonNode *err;
  const char *msg = NULL;

  if (body == NULL || len == 0)
    return NULL;
  root = um_json_parse (body, (gssize) len, "error", &limits, NULL);
  if (root == NULL || !JSON_NODE_HOLDS_OBJECT (root))
    return NULL;
  err = json_object_get_member (json_node_get_object (root), "error");
  if (err != NULL && JSON_NODE_HOLDS_OBJECT (err))
    msg = um_json_get_string (json_node_get_object (err), "message");
  else if (err != NULL && JSON_NODE_HOLDS_VALUE (err) && json_node_get_value_type (err) == G_TYPE_STRING)
    msg = json_node_get_string (err);
  return msg != NULL ? bounded (msg, 400) : NULL;
}

void
um_remote_add_unmask_params (JsonBuilder *b, const UmGenParams *p, UmArch arch)
{
  /* Only the options of the model's family: an Unmask server refuses the
   * others, as unmask-cli does. */
#define KEY(k) um_gen_key_applies (UM_GEN_KEY_##k, arch)
  if (KEY (STEPS))
    {
      json_builder_set_member_name (b, "steps");
      json_builder_add_int_value (b, p->steps);
    }
  if (KEY (BLOCK_LENGTH))
    {
      json_builder_set_member_name (b, "block_length");
      json_builder_add_int_value (b, p->block_length);
    }
  if (KEY (REMASKING))
    {
      json_builder_set_member_name (b, "remasking");
      json_builder_add_string_value (b, um_remasking_to_string (p->remasking));
    }
  if (KEY (CFG_SCALE))
    {
      json_builder_set_member_name (b, "cfg_scale");
      json_builder_add_double_value (b, p->cfg_scale);
    }
  if (um_schedule_for_arch (arch)->answer_blocks)
    {
      json_builder_set_member_name (b, "cache");
      json_builder_add_string_value (b, um_cache_mode_to_string (p->cache));
      json_builder_set_member_name (b, "threshold");
      json_builder_add_double_value (b, p->threshold);
      json_builder_set_member_name (b, "factor");
      json_builder_add_double_value (b, p->factor);
    }
  if (KEY (ALG))
    {
      json_builder_set_member_name (b, "alg");
      json_builder_add_string_value (b, um_alg_to_string (p->alg));
    }
  if (KEY (EPS))
    {
      json_builder_set_member_name (b, "eps");
      json_builder_add_double_value (b, p->eps);
    }
  if (KEY (ALG_TEMP))
    {
      json_builder_set_member_name (b, "alg_temp");
      json_builder_add_double_value (b, p->alg_temp);
    }
  if (KEY (TOP_P))
    {
      json_builder_set_member_name (b, "top_p");
      json_builder_add_double_value (b, p->top_p);
    }
  if (KEY (TOP_K))
    {
      json_builder_set_member_name (b, "top_k");
      json_builder_add_int_value (b, p->top_k);
    }
  if (KEY (GREEDY))
    {
      json_builder_set_member_name (b, "greedy");
      json_builder_add_boolean_value (b, p->greedy);
    }
#undef KEY
}

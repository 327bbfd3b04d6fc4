/* um-gen-defaults.c — the model's recommended generation settings and the
 * precedence rule (see um-gen-defaults.h). */
#include "um-gen-defaults.h"

#include <math.h>
#include <string.h>

#include "um-enum.h"
#include "um-error.h"
#include "um-json.h"

/* The app's ranges (ui/um-settings.c): lengths and steps up to LLaDA's
 * 4096-token context, temperatures and guidance that still mean something. */
#define MAX_LENGTH      4096
#define MAX_TEMPERATURE 5.0
#define MAX_CFG_SCALE   10.0
/* A hostile file may hold thousands of keys: keep the first few notes. */
#define MAX_NOTES       32
#define MAX_WARNINGS    32

static void copy_key (UmGenParams *to, const UmGenParams *from, UmGenKey key);

/* By UmGenSource value, lowest precedence first. */
static const char *const source_names[] = { "built-in", "profile", "model", "user" };

const char *
um_gen_source_to_string (UmGenSource source)
{
  return um_enum_to_string (source_names, G_N_ELEMENTS (source_names), (int) source);
}

/* ---- layers and the rule ---- */

void
um_gen_layer_init (UmGenLayer *layer)
{
  layer->set = 0;
  um_gen_params_init (&layer->params);
}

gboolean
um_gen_layer_has (const UmGenLayer *layer, UmGenKey key)
{
  return layer != NULL && (guint) key < UM_GEN_N_KEYS && (layer->set & UM_GEN_KEY_BIT (key)) != 0;
}

static void
copy_key (UmGenParams *to, const UmGenParams *from, UmGenKey key)
{
  switch (key)
    {
    case UM_GEN_KEY_GEN_LENGTH: to->gen_length = from->gen_length; break;
    case UM_GEN_KEY_STEPS: to->steps = from->steps; break;
    case UM_GEN_KEY_BLOCK_LENGTH: to->block_length = from->block_length; break;
    case UM_GEN_KEY_TEMPERATURE: to->temperature = from->temperature; break;
    case UM_GEN_KEY_CFG_SCALE: to->cfg_scale = from->cfg_scale; break;
    case UM_GEN_KEY_REMASKING: to->remasking = from->remasking; break;
    case UM_GEN_KEY_ALG: to->alg = from->alg; break;
    case UM_GEN_KEY_EPS: to->eps = from->eps; break;
    case UM_GEN_KEY_ALG_TEMP: to->alg_temp = from->alg_temp; break;
    case UM_GEN_KEY_TOP_P: to->top_p = from->top_p; break;
    case UM_GEN_KEY_TOP_K: to->top_k = from->top_k; break;
    case UM_GEN_KEY_GREEDY: to->greedy = from->greedy; break;
    case UM_GEN_N_KEYS:
    default: break;
    }
}

void
um_gen_layer_take (UmGenLayer *layer, UmGenKey key, const UmGenParams *from)
{
  if ((guint) key >= UM_GEN_N_KEYS)
    return;
  copy_key (&layer->params, from, key);
  layer->set |= UM_GEN_KEY_BIT (key);
}

char *
um_gen_params_format (const UmGenParams *p, UmGenKey key)
{
  char buf[G_ASCII_DTOSTR_BUF_SIZE];

  switch (key)
    {
    case UM_GEN_KEY_GEN_LENGTH: return g_strdup_printf ("%d", p->gen_length);
    case UM_GEN_KEY_STEPS: return g_strdup_printf ("%d", p->steps);
    case UM_GEN_KEY_BLOCK_LENGTH: return g_strdup_printf ("%d", p->block_length);
    /* Locale-independent, shortest: the same text in every language's logs. */
    case UM_GEN_KEY_TEMPERATURE: return g_strdup (g_ascii_formatd (buf, sizeof buf, "%g", p->temperature));
    case UM_GEN_KEY_CFG_SCALE: return g_strdup (g_ascii_formatd (buf, sizeof buf, "%g", p->cfg_scale));
    case UM_GEN_KEY_REMASKING: return g_strdup (um_remasking_to_string (p->remasking));
    case UM_GEN_KEY_ALG: return g_strdup (um_alg_to_string (p->alg));
    case UM_GEN_KEY_EPS: return g_strdup (g_ascii_formatd (buf, sizeof buf, "%g", p->eps));
    case UM_GEN_KEY_ALG_TEMP: return g_strdup (g_ascii_formatd (buf, sizeof buf, "%g", p->alg_temp));
    /* 0 and 1 are both "off": say so once. */
    case UM_GEN_KEY_TOP_P:
      return p->top_p > 0.0 && p->top_p < 1.0 ? g_strdup (g_ascii_formatd (buf, sizeof buf, "%g", p->top_p))
                                              : g_strdup ("1");
    case UM_GEN_KEY_TOP_K: return g_strdup_printf ("%d", p->top_k);
    case UM_GEN_KEY_GREEDY: return g_strdup (p->greedy ? "true" : "false");
    case UM_GEN_N_KEYS:
    default: return g_strdup ("?");
    }
}

gboolean
um_gen_params_equal_at (const UmGenParams *a, const UmGenParams *b, UmGenKey key)
{
  switch (key)
    {
    case UM_GEN_KEY_GEN_LENGTH: return a->gen_length == b->gen_length;
    case UM_GEN_KEY_STEPS: return a->steps == b->steps;
    case UM_GEN_KEY_BLOCK_LENGTH: return a->block_length == b->block_length;
    case UM_GEN_KEY_TEMPERATURE: return a->temperature == b->temperature;
    case UM_GEN_KEY_CFG_SCALE: return a->cfg_scale == b->cfg_scale;
    case UM_GEN_KEY_REMASKING: return a->remasking == b->remasking;
    case UM_GEN_KEY_ALG: return a->alg == b->alg;
    case UM_GEN_KEY_EPS: return a->eps == b->eps;
    case UM_GEN_KEY_ALG_TEMP: return a->alg_temp == b->alg_temp;
    /* Off either way. */
    case UM_GEN_KEY_TOP_P:
      return a->top_p == b->top_p || ((a->top_p <= 0.0 || a->top_p >= 1.0) && (b->top_p <= 0.0 || b->top_p >= 1.0));
    case UM_GEN_KEY_TOP_K: return a->top_k == b->top_k;
    case UM_GEN_KEY_GREEDY: return !a->greedy == !b->greedy;
    case UM_GEN_N_KEYS:
    default: return TRUE;
    }
}

void
um_gen_resolve (const UmGenParams *base,
                const UmGenLayer  *user,
                const UmGenLayer  *model,
                const UmGenLayer  *profile,
                UmGenResolved     *out)
{
  um_gen_resolve_for (UM_ARCH_LLADA, base, user, model, profile, out);
}

void
um_gen_resolve_for (UmArch             arch,
                    const UmGenParams *base,
                    const UmGenLayer  *user,
                    const UmGenLayer  *model,
                    const UmGenLayer  *profile,
                    UmGenResolved     *out)
{
  const UmGenLayer *layers[] = { user, model, profile };
  const UmGenSource sources[] = { UM_GEN_SOURCE_USER, UM_GEN_SOURCE_MODEL, UM_GEN_SOURCE_PROFILE };
  UmGenParams builtin, plain;

  um_gen_params_init_for_arch (&builtin, arch);
  um_gen_params_init (&plain);
  out->arch = arch;
  out->params = base != NULL ? *base : plain;
  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    {
      const UmGenParams *from = &builtin;
      UmGenSource source = UM_GEN_SOURCE_BUILTIN;
      for (guint i = 0; i < G_N_ELEMENTS (layers); i++)
        if (um_gen_layer_has (layers[i], (UmGenKey) k))
          {
            from = &layers[i]->params;
            source = sources[i];
            break;
          }
      copy_key (&out->params, from, (UmGenKey) k);
      out->source[k] = source;
    }
  /* LLaDA 2.x: its threshold rule and the (exact) cache of finished blocks
   * unless the base says otherwise: threshold 0 is "the family's" (1
   * commits by the counts alone); a caller that wants the uncached run
   * sets the cache after resolving (unmask-cli's explicit --cache none). */
  if (um_schedule_for_arch (arch)->fast_always_on)
    {
      if (out->params.threshold == 0.0)
        out->params.threshold = builtin.threshold;
      if (out->params.cache == UM_CACHE_NONE)
        out->params.cache = builtin.cache;
    }
  /* Dream's README and RND1's API: as many steps as tokens. */
  if (um_schedule_for_arch (arch)->steps_follow_length && out->source[UM_GEN_KEY_STEPS] == UM_GEN_SOURCE_BUILTIN)
    out->params.steps = out->params.gen_length;
}

gboolean
um_gen_resolved_validate (const UmGenResolved *r,
                          const char          *model_origin,
                          int                  prompt_len,
                          guint                max_seq_len,
                          GError             **error)
{
  static const UmGenKey schedule[] = { UM_GEN_KEY_GEN_LENGTH, UM_GEN_KEY_BLOCK_LENGTH, UM_GEN_KEY_STEPS };
  g_autoptr(GError) local = NULL;
  g_autoptr(GString) hint = NULL;

  UmGenParams schedule_only;

  if (um_gen_params_validate_for (&r->params, r->arch, prompt_len, max_seq_len, &local))
    return TRUE;
  /* Only a broken schedule (length, blocks, steps) is explained. */
  um_gen_params_init (&schedule_only);
  schedule_only.gen_length = r->params.gen_length;
  schedule_only.block_length = r->params.block_length;
  schedule_only.steps = r->params.steps;
  if (um_gen_params_validate_for (&schedule_only, r->arch, prompt_len, max_seq_len, NULL))
    {
      g_propagate_error (error, g_steal_pointer (&local));
      return FALSE;
    }
  /* Which values the user did not give: those are the surprise. */
  for (guint i = 0; i < G_N_ELEMENTS (schedule); i++)
    {
      UmGenKey k = schedule[i];
      g_autofree char *v = NULL;
      if (r->source[k] == UM_GEN_SOURCE_USER || !um_gen_key_applies (k, r->arch))
        continue;
      v = um_gen_params_format (&r->params, k);
      hint = hint ? g_string_append (hint, "; ") : g_string_new (" (");
      g_string_append_printf (hint, "%s %s is %s", um_gen_key_name (k), v,
                              r->source[k] == UM_GEN_SOURCE_MODEL ? "the model's recommendation"
                              : r->source[k] == UM_GEN_SOURCE_PROFILE ? "the memory mode's default"
                              : "the built-in default");
      if (r->source[k] == UM_GEN_SOURCE_MODEL && model_origin != NULL)
        g_string_append_printf (hint, " from %s", model_origin);
    }
  if (hint == NULL)
    {
      g_propagate_error (error, g_steal_pointer (&local));
      return FALSE;
    }
  g_string_append (hint, ")");
  g_set_error (error, local->domain, local->code, "%s%s", local->message, hint->str);
  return FALSE;
}

/* ---- the recommendation ---- */

static void
note_free (gpointer data)
{
  UmGenNote *n = data;
  g_free (n->key);
  g_free (n->value);
  g_free (n->reason);
  g_free (n);
}

UmGenRecommendation *
um_gen_recommendation_new_empty (void)
{
  UmGenRecommendation *rec = g_new0 (UmGenRecommendation, 1);

  um_gen_layer_init (&rec->layer);
  rec->not_applied = g_ptr_array_new_with_free_func (note_free);
  rec->warnings = g_ptr_array_new_with_free_func (g_free);
  return rec;
}

UmGenRecommendation *
um_gen_recommendation_copy (const UmGenRecommendation *rec)
{
  UmGenRecommendation *c = um_gen_recommendation_new_empty ();

  c->layer = rec->layer;
  c->arch = rec->arch;
  c->origin = g_strdup (rec->origin);
  for (guint i = 0; i < rec->not_applied->len; i++)
    {
      const UmGenNote *n = g_ptr_array_index (rec->not_applied, i);
      UmGenNote *m = g_new0 (UmGenNote, 1);
      m->key = g_strdup (n->key);
      m->value = g_strdup (n->value);
      m->reason = g_strdup (n->reason);
      g_ptr_array_add (c->not_applied, m);
    }
  for (guint i = 0; i < rec->warnings->len; i++)
    g_ptr_array_add (c->warnings, g_strdup (g_ptr_array_index (rec->warnings, i)));
  return c;
}

void
um_gen_recommendation_free (UmGenRecommendation *rec)
{
  if (rec == NULL)
    return;
  g_free (rec->origin);
  g_ptr_array_unref (rec->not_applied);
  g_ptr_array_unref (rec->warnings);
  g_free (rec);
}

G_GNUC_PRINTF (2, 3) static void
warn (UmGenRecommendation *rec, const char *format, ...)
{
  va_list args;

  if (rec->warnings->len > MAX_WARNINGS)
    return;
  if (rec->warnings->len == MAX_WARNINGS)
    {
      g_ptr_array_add (rec->warnings, g_strdup ("… more problems not listed"));
      return;
    }
  va_start (args, format);
  g_ptr_array_add (rec->warnings, g_strdup_vprintf (format, args));
  va_end (args);
}

static void
note (UmGenRecommendation *rec, const char *key, const char *value, const char *reason)
{
  UmGenNote *n;

  if (rec->not_applied->len > MAX_NOTES)
    return;
  n = g_new0 (UmGenNote, 1);
  if (rec->not_applied->len == MAX_NOTES)
    {
      n->key = g_strdup ("…");
      n->value = g_strdup ("");
      n->reason = g_strdup ("more keys not listed");
    }
  else
    {
      /* Keys and strings come from the file: keep them short in a UI. */
      n->key = g_utf8_make_valid (key, MIN (strlen (key), 64));
      n->value = g_utf8_make_valid (value, MIN (strlen (value), 64));
      n->reason = g_strdup (reason);
    }
  g_ptr_array_add (rec->not_applied, n);
}

/* Floats stored as float32 read back as 0.699999988: show and use 0.7. */
static double
tidy_f32 (double v)
{
  char buf[G_ASCII_DTOSTR_BUF_SIZE];
  return g_ascii_strtod (g_ascii_formatd (buf, sizeof buf, "%.6g", v), NULL);
}

/* Checks and applies one recommended value; FALSE (with a warning naming
 * @what and @key) when it is out of range. */
static gboolean
take_int (UmGenRecommendation *rec, const char *what, const char *key, UmGenKey k, gint64 v)
{
  /* top_k 0 is off, skipped before; lengths and steps count from 1. */
  if (v < 1 || v > MAX_LENGTH)
    {
      warn (rec, "%s: “%s” is %" G_GINT64_FORMAT ", outside 1…%d; ignored", what, key, v, MAX_LENGTH);
      return FALSE;
    }
  switch (k)
    {
    case UM_GEN_KEY_GEN_LENGTH: rec->layer.params.gen_length = (int) v; break;
    case UM_GEN_KEY_STEPS: rec->layer.params.steps = (int) v; break;
    case UM_GEN_KEY_BLOCK_LENGTH: rec->layer.params.block_length = (int) v; break;
    case UM_GEN_KEY_TOP_K: rec->layer.params.top_k = (int) v; break;
    default: return FALSE;
    }
  rec->layer.set |= UM_GEN_KEY_BIT (k);
  return TRUE;
}

static gboolean
take_double (UmGenRecommendation *rec, const char *what, const char *key, UmGenKey k, double v)
{
  /* eps must stay below 1 (a time), top_p above 0 (1 is off, skipped before). */
  double min = 0.0, max;
  gboolean open_min = k == UM_GEN_KEY_TOP_P, open_max = k == UM_GEN_KEY_EPS;
  char buf[G_ASCII_DTOSTR_BUF_SIZE];

  switch (k)
    {
    case UM_GEN_KEY_TEMPERATURE:
    case UM_GEN_KEY_ALG_TEMP: max = MAX_TEMPERATURE; break;
    case UM_GEN_KEY_EPS:
    case UM_GEN_KEY_TOP_P: max = 1.0; break;
    case UM_GEN_KEY_CFG_SCALE:
    default: max = MAX_CFG_SCALE; break;
    }
  if (!isfinite (v) || v < min || v > max || (open_min && v == min) || (open_max && v == max))
    {
      warn (rec, "%s: “%s” is %s, outside %s%g…%g%s; ignored", what, key, g_ascii_formatd (buf, sizeof buf, "%g", v),
            open_min ? "(" : "", min, max, open_max ? ")" : "");
      return FALSE;
    }
  switch (k)
    {
    case UM_GEN_KEY_TEMPERATURE: rec->layer.params.temperature = v; break;
    case UM_GEN_KEY_ALG_TEMP: rec->layer.params.alg_temp = v; break;
    case UM_GEN_KEY_EPS: rec->layer.params.eps = v; break;
    case UM_GEN_KEY_TOP_P: rec->layer.params.top_p = v; break;
    case UM_GEN_KEY_CFG_SCALE:
    default: rec->layer.params.cfg_scale = v; break;
    }
  rec->layer.set |= UM_GEN_KEY_BIT (k);
  return TRUE;
}

static gboolean
take_alg (UmGenRecommendation *rec, const char *what, const char *key, const char *s)
{
  UmAlg a;

  if (!um_alg_from_string (s, &a))
    {
      g_autofree char *shown = g_utf8_make_valid (s, MIN (strlen (s), 64));
      warn (rec, "%s: “%s” is “%s”, not origin, maskgit_plus, topk_margin or entropy; ignored", what, key, shown);
      return FALSE;
    }
  rec->layer.params.alg = a;
  rec->layer.set |= UM_GEN_KEY_BIT (UM_GEN_KEY_ALG);
  return TRUE;
}

static void
take_greedy (UmGenRecommendation *rec, gboolean greedy)
{
  rec->layer.params.greedy = greedy;
  rec->layer.set |= UM_GEN_KEY_BIT (UM_GEN_KEY_GREEDY);
}

static gboolean
take_remasking (UmGenRecommendation *rec, const char *what, const char *key, const char *s)
{
  UmRemasking r;

  if (!um_remasking_from_string (s, &r))
    {
      g_autofree char *shown = g_utf8_make_valid (s, MIN (strlen (s), 64));
      warn (rec, "%s: “%s” is “%s”, not low_confidence or random; ignored", what, key, shown);
      return FALSE;
    }
  rec->layer.params.remasking = r;
  rec->layer.set |= UM_GEN_KEY_BIT (UM_GEN_KEY_REMASKING);
  return TRUE;
}

/* ---- generation_config.json ---- */

static gboolean
node_number (JsonNode *n, double *out)
{
  GType t = JSON_NODE_HOLDS_VALUE (n) ? json_node_get_value_type (n) : G_TYPE_INVALID;

  if (t == G_TYPE_INT64)
    *out = (double) json_node_get_int (n);
  else if (t == G_TYPE_DOUBLE)
    *out = json_node_get_double (n);
  else
    return FALSE;
  return TRUE;
}

/* An integer, or a number with no fraction (128.0 is 128). */
static gboolean
node_integer (JsonNode *n, gint64 *out)
{
  double d;

  if (JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_INT64)
    {
      *out = json_node_get_int (n);
      return TRUE;
    }
  if (!node_number (n, &d) || d != floor (d) || fabs (d) > 1e15)
    return FALSE;
  *out = (gint64) d;
  return TRUE;
}

static char *
node_text (JsonNode *n)
{
  char buf[G_ASCII_DTOSTR_BUF_SIZE];

  switch (JSON_NODE_TYPE (n))
    {
    case JSON_NODE_OBJECT: return g_strdup ("{…}");
    case JSON_NODE_ARRAY: return g_strdup ("[…]");
    case JSON_NODE_NULL: return g_strdup ("null");
    case JSON_NODE_VALUE:
    default:
      break;
    }
  switch (json_node_get_value_type (n))
    {
    case G_TYPE_INT64: return g_strdup_printf ("%" G_GINT64_FORMAT, json_node_get_int (n));
    case G_TYPE_DOUBLE: return g_strdup (g_ascii_formatd (buf, sizeof buf, "%g", json_node_get_double (n)));
    case G_TYPE_BOOLEAN: return g_strdup (json_node_get_boolean (n) ? "true" : "false");
    case G_TYPE_STRING:
      {
        const char *s = json_node_get_string (n);
        g_autofree char *cut = g_utf8_make_valid (s, MIN (strlen (s), 48));
        return g_strdup_printf ("\"%s\"", cut);
      }
    default: return g_strdup ("?");
    }
}

static const char *
json_type_name (JsonNode *n)
{
  if (JSON_NODE_HOLDS_OBJECT (n))
    return "an object";
  if (JSON_NODE_HOLDS_ARRAY (n))
    return "an array";
  switch (json_node_get_value_type (n))
    {
    case G_TYPE_BOOLEAN: return "a boolean";
    case G_TYPE_STRING: return "a string";
    default: return "a number";
    }
}

/* Keys that say nothing about sampling, or are read elsewhere. */
static gboolean
silent_key (const char *key)
{
  static const char *const keys[] = {
    "transformers_version", "_from_model_config", "use_cache", "return_dict_in_generate",
    "output_attentions", "output_hidden_states", "output_scores", "output_logits",
  };
  if (g_str_has_suffix (key, "_token_id"))
    return TRUE;
  for (guint i = 0; i < G_N_ELEMENTS (keys); i++)
    if (g_str_equal (key, keys[i]))
      return TRUE;
  return FALSE;
}

/* Values that change nothing: transformers' defaults that mean "off". */
static gboolean
neutral_value (const char *key, JsonNode *n)
{
  static const struct { const char *key; double value; } neutral[] = {
    { "top_p", 1.0 }, { "top_k", 0.0 }, { "num_beams", 1.0 }, { "num_return_sequences", 1.0 },
    { "repetition_penalty", 1.0 }, { "length_penalty", 1.0 }, { "typical_p", 1.0 },
    { "min_p", 0.0 }, { "alg_temp", 0.0 },
  };
  double v;

  if (!node_number (n, &v))
    return FALSE;
  for (guint i = 0; i < G_N_ELEMENTS (neutral); i++)
    if (g_str_equal (key, neutral[i].key))
      return v == neutral[i].value;
  return FALSE;
}

static const char *
not_applied_reason (const char *key, UmArch arch)
{
  const UmScheduleInfo *schedule = um_schedule_for_arch (arch);

  for (const UmGenNoteReason *r = schedule->not_applied; r->key != NULL; r++)
    if (g_str_equal (key, r->key))
      return r->reason;
  return schedule->not_applied_other;
}

/* A length key: the first alias found wins; a disagreeing alias is a warning. */
static void
take_length (UmGenRecommendation *rec, JsonObject *obj, const char *what, UmGenKey k,
             const char *const *aliases)
{
  const char *taken = NULL;
  gint64 taken_value = 0;

  for (guint i = 0; aliases[i] != NULL; i++)
    {
      JsonNode *n = json_object_get_member (obj, aliases[i]);
      gint64 v;
      if (n == NULL || JSON_NODE_HOLDS_NULL (n))
        continue;
      if (!node_integer (n, &v))
        {
          g_autofree char *text = node_text (n);
          warn (rec, "%s: “%s” is %s, not a whole number; ignored", what, aliases[i], text);
          continue;
        }
      if (taken != NULL)
        {
          if (v != taken_value)
            warn (rec, "%s: “%s” (%" G_GINT64_FORMAT ") disagrees with “%s” (%" G_GINT64_FORMAT "); “%s” is used",
                  what, aliases[i], v, taken, taken_value, taken);
          continue;
        }
      if (take_int (rec, what, aliases[i], k, v))
        {
          taken = aliases[i];
          taken_value = v;
        }
    }
}

static gboolean
member_is (JsonObject *obj, const char *key, GType type)
{
  JsonNode *n = json_object_get_member (obj, key);
  return n != NULL && JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == type;
}

static gboolean
member_unset (JsonObject *obj, const char *key)
{
  JsonNode *n = json_object_get_member (obj, key);
  return n == NULL || JSON_NODE_HOLDS_NULL (n);
}

/* Whether member @key of @obj holds @v's value of it. */
static gboolean
member_holds (JsonObject *obj, UmGenKey key, const UmGenParams *v)
{
  const char *name = um_gen_key_name (key);
  JsonNode *n = json_object_get_member (obj, name);
  double d, want;

  switch (key)
    {
    case UM_GEN_KEY_ALG:
    case UM_GEN_KEY_REMASKING:
      return member_is (obj, name, G_TYPE_STRING)
             && g_str_equal (json_object_get_string_member (obj, name),
                             key == UM_GEN_KEY_ALG ? um_alg_to_string (v->alg) : um_remasking_to_string (v->remasking));
    case UM_GEN_KEY_GREEDY:
      return member_is (obj, name, G_TYPE_BOOLEAN) && !json_object_get_boolean_member (obj, name) == !v->greedy;
    case UM_GEN_KEY_GEN_LENGTH: want = v->gen_length; break;
    case UM_GEN_KEY_STEPS: want = v->steps; break;
    case UM_GEN_KEY_BLOCK_LENGTH: want = v->block_length; break;
    case UM_GEN_KEY_TEMPERATURE: want = v->temperature; break;
    case UM_GEN_KEY_CFG_SCALE: want = v->cfg_scale; break;
    case UM_GEN_KEY_EPS: want = v->eps; break;
    case UM_GEN_KEY_ALG_TEMP: want = v->alg_temp; break;
    case UM_GEN_KEY_TOP_P: want = v->top_p; break;
    case UM_GEN_KEY_TOP_K: want = v->top_k; break;
    case UM_GEN_N_KEYS:
    default: return FALSE;
    }
  /* Exact: the file's number against the class's literal, as written. */
  return n != NULL && node_number (n, &d) && d == want;
}

/* A generation_config.json as save_pretrained writes a reference config
 * class's defaults (@d, the schedule's row: Dream's DreamGenerationConfig,
 * what diffusion_generate () does with no arguments, a random order over
 * 512 steps, which no Dream document recommends; every example passes its
 * own values). */
static gboolean
is_class_defaults (JsonObject *obj, const UmGenClassDefaults *d)
{
  if (d == NULL)
    return FALSE;
  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    if (((d->keys & UM_GEN_KEY_BIT (k)) && !member_holds (obj, (UmGenKey) k, &d->values))
        || ((d->unset & UM_GEN_KEY_BIT (k)) && !member_unset (obj, um_gen_key_name ((UmGenKey) k))))
      return FALSE;
  return TRUE;
}

/* Dream's and RND1's keys in the file: applied when family @arch has
 * them; TRUE when @key was one of them. */
static gboolean
take_family_key (UmGenRecommendation *rec, UmArch arch, const char *what, const char *key, JsonNode *n)
{
  static const struct { const char *name; UmGenKey k; } keys[] = {
    { "alg", UM_GEN_KEY_ALG }, { "eps", UM_GEN_KEY_EPS }, { "alg_temp", UM_GEN_KEY_ALG_TEMP },
    { "top_p", UM_GEN_KEY_TOP_P }, { "top_k", UM_GEN_KEY_TOP_K }, { "greedy", UM_GEN_KEY_GREEDY },
  };
  guint i;
  double d;
  gint64 v;

  for (i = 0; i < G_N_ELEMENTS (keys) && !g_str_equal (key, keys[i].name); i++)
    ;
  if (i == G_N_ELEMENTS (keys) || !um_gen_key_applies (keys[i].k, arch))
    return FALSE;
  switch (keys[i].k)
    {
    case UM_GEN_KEY_ALG:
      if (!JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_STRING)
        warn (rec, "%s: “alg” is %s, not a name; ignored", what, json_type_name (n));
      else
        take_alg (rec, what, key, json_node_get_string (n));
      break;
    case UM_GEN_KEY_GREEDY:
      if (!JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_BOOLEAN)
        warn (rec, "%s: “greedy” is %s, not true or false; ignored", what, json_type_name (n));
      else
        take_greedy (rec, json_node_get_boolean (n));
      break;
    case UM_GEN_KEY_TOP_K:
      if (!node_integer (n, &v) || v < 0)
        {
          g_autofree char *text = node_text (n);
          warn (rec, "%s: “top_k” is %s, not a whole number ≥ 0; ignored", what, text);
        }
      else if (v > 0)
        take_int (rec, what, key, UM_GEN_KEY_TOP_K, v);
      break;
    default:
      if (!node_number (n, &d))
        {
          g_autofree char *text = node_text (n);
          warn (rec, "%s: “%s” is %s (%s), not a number; ignored", what, key, json_type_name (n), text);
        }
      /* top_p 1 is off: no recommendation. */
      else if (!(keys[i].k == UM_GEN_KEY_TOP_P && d == 1.0))
        take_double (rec, what, key, keys[i].k, d);
      break;
    }
  return TRUE;
}

/* @root: the parsed file, or NULL and @error saying why not. */
static UmGenRecommendation *
from_json_root (UmArch arch, JsonNode *root, GError *error, const char *what)
{
  /* The first name is the one used when aliases disagree. */
  static const char *const gen_aliases[] = { "gen_length", "max_new_tokens", NULL };
  static const char *const steps_aliases[] = { "steps", "num_diffusion_steps", "diffusion_steps", NULL };
  static const char *const block_aliases[] = { "block_length", NULL };
  const UmScheduleInfo *schedule = um_schedule_for_arch (arch);
  g_autoptr(UmGenRecommendation) rec = um_gen_recommendation_new_empty ();
  g_autoptr(GError) root_error = NULL;
  g_autoptr(GList) members = NULL;
  gboolean class_defaults;
  JsonObject *obj;
  JsonNode *n;
  int do_sample = -1;    /* -1: not said */

  rec->arch = arch;
  obj = root ? um_json_root_object (root, what, &root_error) : NULL;
  if (obj == NULL)
    {
      warn (rec, "%s; the model's recommended settings are not used",
            root_error ? root_error->message : error ? error->message : what);
      return g_steal_pointer (&rec);
    }
  class_defaults = is_class_defaults (obj, schedule->class_defaults);

  n = json_object_get_member (obj, "do_sample");
  if (n != NULL && !JSON_NODE_HOLDS_NULL (n))
    {
      if (JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_BOOLEAN)
        do_sample = json_node_get_boolean (n);
      else
        warn (rec, "%s: “do_sample” is %s, not true or false; ignored", what, json_type_name (n));
    }

  take_length (rec, obj, what, UM_GEN_KEY_GEN_LENGTH, gen_aliases);
  if (!class_defaults)
    take_length (rec, obj, what, UM_GEN_KEY_STEPS, steps_aliases);
  if (um_gen_key_applies (UM_GEN_KEY_BLOCK_LENGTH, arch))
    take_length (rec, obj, what, UM_GEN_KEY_BLOCK_LENGTH, block_aliases);

  members = json_object_get_members (obj);
  for (GList *l = members; l != NULL; l = l->next)
    {
      const char *key = l->data;
      UmGenKey k;
      double d;

      n = json_object_get_member (obj, key);
      /* null is how transformers writes "not set". */
      if (n == NULL || JSON_NODE_HOLDS_NULL (n) || silent_key (key))
        continue;
      if (g_str_equal (key, "do_sample"))
        {
          /* Dream's sampler never reads it. */
          if (schedule->do_sample == UM_DO_SAMPLE_NOTED)
            {
              g_autofree char *text_value = node_text (n);
              note (rec, key, text_value, not_applied_reason (key, arch));
            }
          continue;
        }
      if (class_defaults && um_gen_key_from_name (key, &k)
          && (schedule->class_defaults->keys & UM_GEN_KEY_BIT (k)))
        {
          g_autofree char *text_value = node_text (n);
          note (rec, key, text_value,
                "DreamGenerationConfig's class default as save_pretrained writes it, not a recommendation "
                "(Dream's README: alg entropy, temperature 0.2, top_p 0.95, as many steps as tokens)");
          continue;
        }
      if (g_str_equal (key, "temperature")
          || (g_str_equal (key, "cfg_scale") && um_gen_key_applies (UM_GEN_KEY_CFG_SCALE, arch)))
        {
          k = g_str_equal (key, "temperature") ? UM_GEN_KEY_TEMPERATURE : UM_GEN_KEY_CFG_SCALE;
          if (!node_number (n, &d))
            {
              g_autofree char *text_value = node_text (n);
              warn (rec, "%s: “%s” is %s (%s), not a number; ignored", what, key, json_type_name (n), text_value);
              continue;
            }
          /* do_sample false is greedy, whatever the temperature says (in
           * LLaDA's schedule; RND1 reads it as its greedy switch). */
          if (k == UM_GEN_KEY_TEMPERATURE && do_sample == 0 && d != 0.0
              && schedule->do_sample == UM_DO_SAMPLE_TEMPERATURE)
            {
              g_autofree char *text_value = node_text (n);
              note (rec, key, text_value, "do_sample is false: greedy decoding (temperature 0)");
              continue;
            }
          take_double (rec, what, key, k, d);
          continue;
        }
      if (g_str_equal (key, "remasking") && um_gen_key_applies (UM_GEN_KEY_REMASKING, arch))
        {
          if (!JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_STRING)
            warn (rec, "%s: “remasking” is %s, not low_confidence or random; ignored", what, json_type_name (n));
          else
            take_remasking (rec, what, key, json_node_get_string (n));
          continue;
        }
      if (take_family_key (rec, arch, what, key, n))
        continue;
      /* Read above. */
      if (g_strv_contains ((const char *const *) gen_aliases, key)
          || g_strv_contains ((const char *const *) steps_aliases, key)
          || (g_strv_contains ((const char *const *) block_aliases, key)
              && um_gen_key_applies (UM_GEN_KEY_BLOCK_LENGTH, arch)))
        continue;
      if (neutral_value (key, n))
        continue;
      {
        g_autofree char *text_value = node_text (n);
        note (rec, key, text_value, not_applied_reason (key, arch));
      }
    }

  if (schedule->do_sample == UM_DO_SAMPLE_GREEDY)
    {
      /* RND1: greedy = getattr (config, "greedy", not do_sample). */
      if (do_sample >= 0 && !um_gen_layer_has (&rec->layer, UM_GEN_KEY_GREEDY))
        take_greedy (rec, !do_sample);
    }
  else if (schedule->do_sample == UM_DO_SAMPLE_TEMPERATURE && do_sample == 0)
    {
      rec->layer.params.temperature = 0.0;
      rec->layer.set |= UM_GEN_KEY_BIT (UM_GEN_KEY_TEMPERATURE);
    }
  else if (schedule->do_sample == UM_DO_SAMPLE_TEMPERATURE && do_sample == 1
           && !um_gen_layer_has (&rec->layer, UM_GEN_KEY_TEMPERATURE))
    {
      /* transformers samples at its default temperature, 1.0. */
      rec->layer.params.temperature = 1.0;
      rec->layer.set |= UM_GEN_KEY_BIT (UM_GEN_KEY_TEMPERATURE);
    }
  if (rec->layer.set != 0 || rec->not_applied->len > 0)
    rec->origin = g_strdup (what);
  return g_steal_pointer (&rec);
}

UmGenRecommendation *
um_gen_recommendation_from_json (const char *text, gssize len, const char *what)
{
  return um_gen_recommendation_from_json_for (UM_ARCH_LLADA, text, len, what);
}

UmGenRecommendation *
um_gen_recommendation_from_json_for (UmArch arch, const char *text, gssize len, const char *what)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonNode) root = NULL;

  if (what == NULL)
    what = "generation_config.json";
  root = um_json_parse (text, len, what, NULL, &error);
  return from_json_root (arch, root, error, what);
}

/* ---- GGUF ---- */

#define GGUF_SAMPLING "general.sampling."
#define GGUF_GENERATION "unmask.generation."

static char *
gguf_value_text (UmGguf *g, const char *key)
{
  char buf[G_ASCII_DTOSTR_BUF_SIZE];
  double d;
  const char *s;

  if (um_gguf_get_f64 (g, key, &d, NULL))
    return g_strdup (g_ascii_formatd (buf, sizeof buf, "%g", tidy_f32 (d)));
  if ((s = um_gguf_get_string (g, key, NULL)) != NULL)
    {
      g_autofree char *cut = g_utf8_make_valid (s, MIN (strlen (s), 48));
      return g_strdup_printf ("\"%s\"", cut);
    }
  return g_strdup ("…");
}

typedef enum { KV_INT, KV_DOUBLE, KV_REMASKING, KV_ALG, KV_BOOL } KvKind;

/* The keys a GGUF may recommend with: llama.cpp's general.sampling.* and
 * ours (unmask.generation.*, what um_gen_recommendation_write_gguf ()
 * writes). */
static const struct {
  const char *key;
  UmGenKey    k;
  KvKind      kind;
} gguf_keys[] = {
  { GGUF_SAMPLING "temp", UM_GEN_KEY_TEMPERATURE, KV_DOUBLE },
  { GGUF_SAMPLING "top_p", UM_GEN_KEY_TOP_P, KV_DOUBLE },
  { GGUF_SAMPLING "top_k", UM_GEN_KEY_TOP_K, KV_INT },
  { GGUF_GENERATION "gen_length", UM_GEN_KEY_GEN_LENGTH, KV_INT },
  { GGUF_GENERATION "steps", UM_GEN_KEY_STEPS, KV_INT },
  { GGUF_GENERATION "block_length", UM_GEN_KEY_BLOCK_LENGTH, KV_INT },
  { GGUF_GENERATION "cfg_scale", UM_GEN_KEY_CFG_SCALE, KV_DOUBLE },
  { GGUF_GENERATION "remasking", UM_GEN_KEY_REMASKING, KV_REMASKING },
  { GGUF_GENERATION "alg", UM_GEN_KEY_ALG, KV_ALG },
  { GGUF_GENERATION "eps", UM_GEN_KEY_EPS, KV_DOUBLE },
  { GGUF_GENERATION "alg_temp", UM_GEN_KEY_ALG_TEMP, KV_DOUBLE },
  { GGUF_GENERATION "greedy", UM_GEN_KEY_GREEDY, KV_BOOL },
};

UmGenRecommendation *
um_gen_recommendation_from_gguf (UmGguf *g)
{
  UmGenRecommendation *rec = um_gen_recommendation_new_empty ();
  const char *what = um_gguf_file_name (g);
  const char *arch_name = um_gguf_get_string (g, "general.architecture", NULL);

  if (!um_arch_from_gguf (arch_name, &rec->arch))
    rec->arch = UM_ARCH_LLADA;
  for (guint i = 0; i < um_gguf_n_kv (g); i++)
    {
      const char *key = um_gguf_kv_key (g, i);
      gboolean ours = g_str_has_prefix (key, GGUF_GENERATION);
      g_autoptr(GError) error = NULL;
      const char *str;
      gboolean b;
      double d;
      gint64 v;
      guint t;

      if (!ours && !g_str_has_prefix (key, GGUF_SAMPLING))
        continue;
      /* The order of llama.cpp's sampler chain: no value to apply. */
      if (g_str_equal (key, GGUF_SAMPLING "sequence"))
        continue;
      /* llama.cpp: top_k ≤ 0 and top_p ≥ 1 are off. */
      if ((g_str_equal (key, GGUF_SAMPLING "top_k") && um_gguf_get_f64 (g, key, &d, NULL) && d <= 0.0)
          || (g_str_equal (key, GGUF_SAMPLING "top_p") && um_gguf_get_f64 (g, key, &d, NULL) && d >= 1.0))
        continue;
      for (t = 0; t < G_N_ELEMENTS (gguf_keys) && !g_str_equal (key, gguf_keys[t].key); t++)
        ;
      if (t == G_N_ELEMENTS (gguf_keys) || !um_gen_key_applies (gguf_keys[t].k, rec->arch))
        {
          g_autofree char *text = gguf_value_text (g, key);
          const char *base = ours ? key + strlen (GGUF_GENERATION) : key + strlen (GGUF_SAMPLING);
          note (rec, key, text, not_applied_reason (base, rec->arch));
          continue;
        }
      switch (gguf_keys[t].kind)
        {
        case KV_DOUBLE:
          if (!um_gguf_get_f64 (g, key, &d, &error))
            warn (rec, "%s; ignored", error->message);
          else
            take_double (rec, what, key, gguf_keys[t].k, um_gguf_kv_type (g, i) == UM_GGUF_FLOAT32 ? tidy_f32 (d) : d);
          break;
        case KV_INT:
          if (!um_gguf_get_i64 (g, key, &v, &error))
            warn (rec, "%s; ignored", error->message);
          else
            take_int (rec, what, key, gguf_keys[t].k, v);
          break;
        case KV_BOOL:
          if (!um_gguf_get_bool (g, key, &b, &error))
            warn (rec, "%s; ignored", error->message);
          else
            take_greedy (rec, b);
          break;
        case KV_REMASKING:
        case KV_ALG:
        default:
          if ((str = um_gguf_get_string (g, key, &error)) == NULL)
            warn (rec, "%s; ignored", error->message);
          else if (gguf_keys[t].kind == KV_ALG)
            take_alg (rec, what, key, str);
          else
            take_remasking (rec, what, key, str);
          break;
        }
    }
  if (rec->layer.set != 0 || rec->not_applied->len > 0)
    rec->origin = g_strdup ("GGUF metadata");
  return rec;
}

void
um_gen_recommendation_write_gguf (const UmGenRecommendation *rec, UmGgufWriter *w)
{
  const UmGenParams *p = &rec->layer.params;

  if (um_gen_layer_has (&rec->layer, UM_GEN_KEY_TEMPERATURE))
    um_gguf_writer_set_f32 (w, GGUF_SAMPLING "temp", (float) p->temperature);
  if (um_gen_layer_has (&rec->layer, UM_GEN_KEY_TOP_P))
    um_gguf_writer_set_f32 (w, GGUF_SAMPLING "top_p", (float) p->top_p);
  if (um_gen_layer_has (&rec->layer, UM_GEN_KEY_TOP_K))
    um_gguf_writer_set_i32 (w, GGUF_SAMPLING "top_k", p->top_k);
  if (um_gen_layer_has (&rec->layer, UM_GEN_KEY_GEN_LENGTH))
    um_gguf_writer_set_u32 (w, GGUF_GENERATION "gen_length", (guint32) p->gen_length);
  if (um_gen_layer_has (&rec->layer, UM_GEN_KEY_STEPS))
    um_gguf_writer_set_u32 (w, GGUF_GENERATION "steps", (guint32) p->steps);
  if (um_gen_layer_has (&rec->layer, UM_GEN_KEY_BLOCK_LENGTH))
    um_gguf_writer_set_u32 (w, GGUF_GENERATION "block_length", (guint32) p->block_length);
  if (um_gen_layer_has (&rec->layer, UM_GEN_KEY_CFG_SCALE))
    um_gguf_writer_set_f32 (w, GGUF_GENERATION "cfg_scale", (float) p->cfg_scale);
  if (um_gen_layer_has (&rec->layer, UM_GEN_KEY_REMASKING))
    um_gguf_writer_set_string (w, GGUF_GENERATION "remasking", um_remasking_to_string (p->remasking));
  if (um_gen_layer_has (&rec->layer, UM_GEN_KEY_ALG))
    um_gguf_writer_set_string (w, GGUF_GENERATION "alg", um_alg_to_string (p->alg));
  if (um_gen_layer_has (&rec->layer, UM_GEN_KEY_EPS))
    um_gguf_writer_set_f32 (w, GGUF_GENERATION "eps", (float) p->eps);
  if (um_gen_layer_has (&rec->layer, UM_GEN_KEY_ALG_TEMP))
    um_gguf_writer_set_f32 (w, GGUF_GENERATION "alg_temp", (float) p->alg_temp);
  if (um_gen_layer_has (&rec->layer, UM_GEN_KEY_GREEDY))
    um_gguf_writer_set_bool (w, GGUF_GENERATION "greedy", p->greedy);
}

/* The family of the model at @path, as its loader will see it; LLaDA when
 * it cannot be read (the load reports why). */
static UmArch
folder_arch (const char *path)
{
  UmModelConfig cfg;

  memset (&cfg, 0, sizeof cfg);
  if (!um_model_config_load_hf (&cfg, path, NULL))
    return UM_ARCH_LLADA;
  return cfg.arch;
}

UmGenRecommendation *
um_gen_recommendation_load (const char *path)
{
  g_autoptr(GError) error = NULL;

  if (path == NULL)
    return um_gen_recommendation_new_empty ();
  if (g_file_test (path, G_FILE_TEST_IS_DIR))
    {
      g_autofree char *file = g_build_filename (path, "generation_config.json", NULL);
      g_autoptr(JsonNode) root = um_json_parse_file (file, "generation_config.json", NULL, &error);

      UmGenRecommendation *rec;

      /* A folder without the file: the model recommends nothing. */
      if (root == NULL && um_json_error_is_missing (error))
        {
          rec = um_gen_recommendation_new_empty ();
          rec->arch = folder_arch (path);
          return rec;
        }
      return from_json_root (folder_arch (path), root, error, "generation_config.json");
    }
  {
    g_autoptr(UmGguf) g = um_gguf_open (path, &error);
    UmGenRecommendation *rec;
    if (g == NULL)
      {
        rec = um_gen_recommendation_new_empty ();
        warn (rec, "%s", error->message);
        return rec;
      }
    return um_gen_recommendation_from_gguf (g);
  }
}

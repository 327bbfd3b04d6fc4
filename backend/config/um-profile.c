/* um-profile.c — the optimizer profile: strict JSON, atomic writes. */
#include "um-profile.h"

#include <errno.h>
#include <fcntl.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "um-enum.h"
#include "um-error.h"
#include "um-json.h"

#define PROFILE_FILE "optimizer.json"

/* Temporary files older than this are left over from a killed writer. */
#define STALE_TEMP_SECONDS (60 * 60)

static const char *const writer_names[] = {
  [UM_PROFILE_BY_DEFAULT] = "default",
  [UM_PROFILE_BY_OPTIMIZE] = "optimize",
  [UM_PROFILE_BY_USER] = "user",
  [UM_PROFILE_BY_RESTORE] = "restore",
};

static gboolean writer_from_string (const char *s, UmProfileWriter *out);

UM_ENUM_STRINGS (UmProfileWriter, um_profile_writer_to_string, writer_from_string, writer_names, FALSE)

static const char *
device_to_string (UmDeviceKind d)
{
  switch (d)
    {
    case UM_DEVICE_CPU: return "cpu";
    case UM_DEVICE_CUDA: return "cuda";
    case UM_DEVICE_AUTO:
    default: return "auto";
    }
}

static void
override_free (UmProfileOverride *o)
{
  if (o == NULL)
    return;
  g_free (o->model_id);
  g_free (o);
}

static GPtrArray *
overrides_new (void)
{
  return g_ptr_array_new_with_free_func ((GDestroyNotify) override_free);
}

/* The generation defaults a mode recommends: extreme modes keep the canvas
 * within their limits. */
static void
mode_defaults (UmMemMode mode, int *gen, int *block, int *steps)
{
  gboolean x = um_mem_mode_is_extreme (mode);
  *gen = x ? 64 : 128;
  *block = 32;
  *steps = x ? 64 : 128;
}

UmProfile *
um_profile_new_default (void)
{
  UmProfile *p = g_new0 (UmProfile, 1);

  p->version = UM_PROFILE_VERSION;
  p->device = UM_DEVICE_AUTO;
  p->overrides = overrides_new ();
  p->written_by = UM_PROFILE_BY_DEFAULT;
  um_profile_set_mode (p, UM_MEM_STANDARD);
  return p;
}

UmProfile *
um_profile_copy (const UmProfile *p)
{
  UmProfile *c = g_new0 (UmProfile, 1);

  *c = *p;
  c->reason = g_strdup (p->reason);
  c->overrides = overrides_new ();
  for (guint i = 0; p->overrides != NULL && i < p->overrides->len; i++)
    {
      const UmProfileOverride *o = g_ptr_array_index (p->overrides, i);
      UmProfileOverride *n = g_new0 (UmProfileOverride, 1);
      n->model_id = g_strdup (o->model_id);
      n->mem = o->mem;
      g_ptr_array_add (c->overrides, n);
    }
  return c;
}

void
um_profile_free (UmProfile *p)
{
  if (p == NULL)
    return;
  g_clear_pointer (&p->overrides, g_ptr_array_unref);
  g_free (p->reason);
  g_free (p);
}

static gboolean
mem_equal (const UmMemOptions *a, const UmMemOptions *b)
{
  return a->mode == b->mode && strcmp (a->weight_format, b->weight_format) == 0
         && a->resident_layers == b->resident_layers && !a->host_zstd == !b->host_zstd
         && a->prune_heads == b->prune_heads && a->prune_ffn == b->prune_ffn && a->row_chunk == b->row_chunk
         && a->experts == b->experts && a->expert_slots == b->expert_slots;
}

static const UmProfileOverride *
find_override (const UmProfile *p, const char *model_id)
{
  for (guint i = 0; model_id != NULL && p->overrides != NULL && i < p->overrides->len; i++)
    {
      const UmProfileOverride *o = g_ptr_array_index (p->overrides, i);
      if (g_strcmp0 (o->model_id, model_id) == 0)
        return o;
    }
  return NULL;
}

gboolean
um_profile_equal (const UmProfile *a, const UmProfile *b)
{
  guint na = a->overrides ? a->overrides->len : 0, nb = b->overrides ? b->overrides->len : 0;

  if (a->version != b->version || !mem_equal (&a->mem, &b->mem) || a->device != b->device
      || a->gpu_index != b->gpu_index || a->n_threads != b->n_threads || a->memory_budget != b->memory_budget
      || a->headroom != b->headroom
      || a->limit_gen_length != b->limit_gen_length || a->limit_block_length != b->limit_block_length
      || a->limit_steps != b->limit_steps || a->default_gen_length != b->default_gen_length
      || a->default_block_length != b->default_block_length || a->default_steps != b->default_steps || na != nb)
    return FALSE;
  /* Overrides are keyed by model: their order does not matter. */
  for (guint i = 0; i < na; i++)
    {
      const UmProfileOverride *o = g_ptr_array_index (a->overrides, i);
      const UmProfileOverride *m = find_override (b, o->model_id);
      if (m == NULL || !mem_equal (&o->mem, &m->mem))
        return FALSE;
    }
  return TRUE;
}

void
um_profile_set_mode (UmProfile *p, UmMemMode mode)
{
  um_mem_options_init (&p->mem, mode);
  um_mem_mode_limits (mode, &p->limit_gen_length, &p->limit_block_length, &p->limit_steps);
  mode_defaults (mode, &p->default_gen_length, &p->default_block_length, &p->default_steps);
}

char *
um_profile_summary (const UmProfile *p)
{
  GString *s = g_string_new (um_mem_mode_to_string (p->mem.mode));

  if (p->mem.weight_format[0] != '\0')
    g_string_append_printf (s, ", %s", p->mem.weight_format);
  if (p->device == UM_DEVICE_CUDA && p->gpu_index > 0)
    g_string_append_printf (s, ", cuda:%d", p->gpu_index);
  else
    g_string_append_printf (s, ", %s", device_to_string (p->device));
  if (p->memory_budget > 0)
    {
      g_autofree char *b = g_format_size_full (p->memory_budget, G_FORMAT_SIZE_IEC_UNITS);
      g_string_append_printf (s, ", budget %s", b);
    }
  if (p->n_threads > 0)
    g_string_append_printf (s, ", %d threads", p->n_threads);
  if (p->overrides != NULL && p->overrides->len > 0)
    g_string_append_printf (s, ", %u model override%s", p->overrides->len, p->overrides->len == 1 ? "" : "s");
  return g_string_free (s, FALSE);
}

/* ---- JSON ---- */

static void
add_mem (JsonBuilder *b, const UmMemOptions *m)
{
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "mode");
  json_builder_add_string_value (b, um_mem_mode_to_string (m->mode));
  json_builder_set_member_name (b, "weight_format");
  json_builder_add_string_value (b, m->weight_format);
  json_builder_set_member_name (b, "resident_layers");
  json_builder_add_int_value (b, m->resident_layers);
  json_builder_set_member_name (b, "host_zstd");
  json_builder_add_boolean_value (b, m->host_zstd);
  json_builder_set_member_name (b, "prune_heads");
  json_builder_add_double_value (b, m->prune_heads);
  json_builder_set_member_name (b, "prune_ffn");
  json_builder_add_double_value (b, m->prune_ffn);
  json_builder_set_member_name (b, "row_chunk");
  json_builder_add_int_value (b, m->row_chunk);
  json_builder_set_member_name (b, "experts");
  json_builder_add_string_value (b, um_expert_placement_to_string (m->experts));
  json_builder_set_member_name (b, "expert_slots");
  json_builder_add_int_value (b, m->expert_slots);
  json_builder_end_object (b);
}

static void
add_triple (JsonBuilder *b, const char *name, int gen, int block, int steps)
{
  json_builder_set_member_name (b, name);
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "gen_length");
  json_builder_add_int_value (b, gen);
  json_builder_set_member_name (b, "block_length");
  json_builder_add_int_value (b, block);
  json_builder_set_member_name (b, "steps");
  json_builder_add_int_value (b, steps);
  json_builder_end_object (b);
}

static char *
time_to_iso (gint64 t)
{
  g_autoptr(GDateTime) dt = g_date_time_new_from_unix_utc (t);
  return dt ? g_date_time_format (dt, "%Y-%m-%dT%H:%M:%SZ") : g_strdup ("1970-01-01T00:00:00Z");
}

char *
um_profile_to_json (const UmProfile *p)
{
  g_autoptr(JsonBuilder) b = json_builder_new ();
  g_autoptr(JsonGenerator) gen = json_generator_new ();
  g_autoptr(JsonNode) root = NULL;
  g_autofree char *at = time_to_iso (p->written_at);
  GString *out;
  char *text;

  json_builder_begin_object (b);
  json_builder_set_member_name (b, "version");
  json_builder_add_int_value (b, UM_PROFILE_VERSION);
  json_builder_set_member_name (b, "memory");
  add_mem (b, &p->mem);
  json_builder_set_member_name (b, "device");
  json_builder_add_string_value (b, device_to_string (p->device));
  json_builder_set_member_name (b, "gpu_index");
  json_builder_add_int_value (b, p->gpu_index);
  json_builder_set_member_name (b, "threads");
  json_builder_add_int_value (b, p->n_threads);
  json_builder_set_member_name (b, "memory_budget");
  json_builder_add_int_value (b, (gint64) MIN (p->memory_budget, (guint64) G_MAXINT64));
  /* Only when set: a profile without one reads as before. */
  if (p->headroom > 0)
    {
      json_builder_set_member_name (b, "headroom");
      json_builder_add_double_value (b, p->headroom);
    }
  add_triple (b, "limits", p->limit_gen_length, p->limit_block_length, p->limit_steps);
  add_triple (b, "defaults", p->default_gen_length, p->default_block_length, p->default_steps);
  json_builder_set_member_name (b, "overrides");
  json_builder_begin_object (b);
  for (guint i = 0; p->overrides != NULL && i < p->overrides->len; i++)
    {
      const UmProfileOverride *o = g_ptr_array_index (p->overrides, i);
      json_builder_set_member_name (b, o->model_id);
      add_mem (b, &o->mem);
    }
  json_builder_end_object (b);
  json_builder_set_member_name (b, "written_by");
  json_builder_add_string_value (b, um_profile_writer_to_string (p->written_by));
  json_builder_set_member_name (b, "written_at");
  if (p->written_at != 0)
    json_builder_add_string_value (b, at);
  else
    json_builder_add_null_value (b);   /* never written: the defaults */
  json_builder_set_member_name (b, "reason");
  if (p->reason != NULL)
    json_builder_add_string_value (b, p->reason);
  else
    json_builder_add_null_value (b);
  json_builder_end_object (b);

  root = json_builder_get_root (b);
  json_generator_set_pretty (gen, TRUE);
  json_generator_set_root (gen, root);
  text = json_generator_to_data (gen, NULL);
  /* A final newline, as text files have. */
  out = g_string_new (text);
  g_free (text);
  g_string_append_c (out, '\n');
  return g_string_free (out, FALSE);
}

static gboolean
type_error (const char *where, const char *what, GError **error)
{
  g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "“%s” must be %s", where, what);
  return FALSE;
}

static gboolean
read_int (JsonNode *n, const char *where, gint64 min, gint64 max, gint64 *out, GError **error)
{
  gint64 v;

  if (!JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_INT64)
    return type_error (where, "an integer", error);
  v = json_node_get_int (n);
  if (v < min || v > max)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "“%s” is %" G_GINT64_FORMAT ", outside %" G_GINT64_FORMAT
                   "…%" G_GINT64_FORMAT, where, v, min, max);
      return FALSE;
    }
  *out = v;
  return TRUE;
}

static gboolean
read_int32 (JsonNode *n, const char *where, int min, int max, int *out, GError **error)
{
  gint64 v;
  if (!read_int (n, where, min, max, &v, error))
    return FALSE;
  *out = (int) v;
  return TRUE;
}

static gboolean
read_double (JsonNode *n, const char *where, double *out, GError **error)
{
  if (!JSON_NODE_HOLDS_VALUE (n))
    return type_error (where, "a number", error);
  if (json_node_get_value_type (n) == G_TYPE_DOUBLE)
    *out = json_node_get_double (n);
  else if (json_node_get_value_type (n) == G_TYPE_INT64)
    *out = (double) json_node_get_int (n);
  else
    return type_error (where, "a number", error);
  return TRUE;
}

static gboolean
read_bool (JsonNode *n, const char *where, gboolean *out, GError **error)
{
  if (!JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_BOOLEAN)
    return type_error (where, "true or false", error);
  *out = json_node_get_boolean (n);
  return TRUE;
}

static const char *
read_string (JsonNode *n, const char *where, GError **error)
{
  if (!JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_STRING)
    {
      type_error (where, "a string", error);
      return NULL;
    }
  return json_node_get_string (n);
}

static gboolean
unknown_key (const char *where, const char *key, GError **error)
{
  g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "unknown key “%s%s%s”", where ? where : "", where ? "." : "", key);
  return FALSE;
}

static gboolean
read_mem (JsonNode *node, const char *where, UmMemOptions *m, GError **error)
{
  JsonObjectIter it;
  const char *key;
  JsonNode *v;
  gboolean have_mode = FALSE;

  if (!JSON_NODE_HOLDS_OBJECT (node))
    return type_error (where, "an object", error);
  um_mem_options_init (m, UM_MEM_STANDARD);
  json_object_iter_init_ordered (&it, json_node_get_object (node));
  while (json_object_iter_next_ordered (&it, &key, &v))
    {
      g_autofree char *at = g_strconcat (where, ".", key, NULL);
      gboolean ok;
      if (g_str_equal (key, "mode"))
        {
          const char *s = read_string (v, at, error);
          if (s == NULL)
            return FALSE;
          /* Only the full names: the file is an interface. */
          ok = um_mem_mode_from_string (s, &m->mode) && g_str_equal (um_mem_mode_to_string (m->mode), s);
          if (!ok)
            {
              g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "“%s” is not a memory mode: “%s”", at, s);
              return FALSE;
            }
          have_mode = TRUE;
        }
      else if (g_str_equal (key, "weight_format"))
        {
          const char *s = read_string (v, at, error);
          if (s == NULL)
            return FALSE;
          if (strlen (s) >= sizeof m->weight_format)
            {
              g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "“%s” is too long", at);
              return FALSE;
            }
          g_strlcpy (m->weight_format, s, sizeof m->weight_format);
          ok = TRUE;
        }
      else if (g_str_equal (key, "resident_layers"))
        ok = read_int32 (v, at, 0, 1 << 20, &m->resident_layers, error);
      else if (g_str_equal (key, "host_zstd"))
        ok = read_bool (v, at, &m->host_zstd, error);
      else if (g_str_equal (key, "prune_heads"))
        ok = read_double (v, at, &m->prune_heads, error);
      else if (g_str_equal (key, "prune_ffn"))
        ok = read_double (v, at, &m->prune_ffn, error);
      else if (g_str_equal (key, "row_chunk"))
        ok = read_int32 (v, at, -1, 1 << 24, &m->row_chunk, error);
      else if (g_str_equal (key, "experts"))
        {
          const char *s = read_string (v, at, error);
          if (s == NULL)
            return FALSE;
          if (!um_expert_placement_from_string (s, &m->experts))
            {
              g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "“%s” must be auto, resident, host or fetch, not “%s”",
                           at, s);
              return FALSE;
            }
          ok = TRUE;
        }
      else if (g_str_equal (key, "expert_slots"))
        ok = read_int32 (v, at, 0, 1 << 16, &m->expert_slots, error);
      else
        ok = unknown_key (where, key, error);
      if (!ok)
        return FALSE;
    }
  if (!have_mode)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "“%s.mode” is missing", where);
      return FALSE;
    }
  if (!um_mem_options_validate (m, error))
    {
      g_prefix_error (error, "“%s”: ", where);
      if (*error != NULL)
        (*error)->code = UM_ERROR_FORMAT;
      return FALSE;
    }
  return TRUE;
}

static gboolean
read_triple (JsonNode *node, const char *where, int *gen, int *block, int *steps, GError **error)
{
  JsonObjectIter it;
  const char *key;
  JsonNode *v;

  if (!JSON_NODE_HOLDS_OBJECT (node))
    return type_error (where, "an object", error);
  json_object_iter_init_ordered (&it, json_node_get_object (node));
  while (json_object_iter_next_ordered (&it, &key, &v))
    {
      g_autofree char *at = g_strconcat (where, ".", key, NULL);
      gboolean ok;
      if (g_str_equal (key, "gen_length"))
        ok = read_int32 (v, at, 0, 1 << 20, gen, error);
      else if (g_str_equal (key, "block_length"))
        ok = read_int32 (v, at, 0, 1 << 20, block, error);
      else if (g_str_equal (key, "steps"))
        ok = read_int32 (v, at, 0, 1 << 20, steps, error);
      else
        ok = unknown_key (where, key, error);
      if (!ok)
        return FALSE;
    }
  return TRUE;
}

static gboolean
read_overrides (JsonNode *node, UmProfile *p, GError **error)
{
  JsonObjectIter it;
  const char *key;
  JsonNode *v;

  if (!JSON_NODE_HOLDS_OBJECT (node))
    return type_error ("overrides", "an object", error);
  json_object_iter_init_ordered (&it, json_node_get_object (node));
  while (json_object_iter_next_ordered (&it, &key, &v))
    {
      g_autofree char *at = g_strconcat ("overrides.", key, NULL);
      UmProfileOverride *o = g_new0 (UmProfileOverride, 1);
      o->model_id = g_strdup (key);
      g_ptr_array_add (p->overrides, o);
      if (key[0] == '\0')
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "an override has an empty model id");
          return FALSE;
        }
      if (!read_mem (v, at, &o->mem, error))
        return FALSE;
    }
  return TRUE;
}

UmProfile *
um_profile_from_json (const char *text, gssize len, GError **error)
{
  g_autoptr(UmProfile) p = um_profile_new_default ();
  g_autoptr(JsonNode) root = NULL;
  JsonObject *obj;
  JsonNode *vnode;
  JsonObjectIter it;
  const char *key;
  JsonNode *v;
  gint64 version;

  /* The project's one JSON entry point: nesting and size are bounded
   * before json-glib's recursive parser sees the text. */
  root = um_json_parse (text, len, "the profile", NULL, error);
  if (root == NULL || (obj = um_json_root_object (root, "the profile", error)) == NULL)
    return NULL;
  /* The version first: a newer file is refused as such, whatever it holds. */
  vnode = json_object_get_member (obj, "version");
  if (vnode == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "“version” is missing");
      return NULL;
    }
  if (!read_int (vnode, "version", 1, G_MAXINT32, &version, error))
    return NULL;
  if (version > UM_PROFILE_VERSION)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                   "written by a newer Unmask (version %" G_GINT64_FORMAT "; this one reads version %d)", version,
                   UM_PROFILE_VERSION);
      return NULL;
    }
  p->version = (int) version;

  json_object_iter_init_ordered (&it, obj);
  while (json_object_iter_next_ordered (&it, &key, &v))
    {
      gboolean ok = TRUE;
      if (g_str_equal (key, "version"))
        continue;
      else if (g_str_equal (key, "memory"))
        ok = read_mem (v, "memory", &p->mem, error);
      else if (g_str_equal (key, "device"))
        {
          const char *s = read_string (v, key, error);
          ok = s != NULL;
          if (ok && (!um_device_kind_from_string (s, &p->device) || !g_str_equal (device_to_string (p->device), s)))
            {
              g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "“device” must be auto, cpu or cuda, not “%s”", s);
              ok = FALSE;
            }
        }
      else if (g_str_equal (key, "gpu_index"))
        ok = read_int32 (v, key, 0, 1024, &p->gpu_index, error);
      else if (g_str_equal (key, "threads"))
        ok = read_int32 (v, key, 0, 1 << 16, &p->n_threads, error);
      else if (g_str_equal (key, "memory_budget"))
        {
          gint64 b;
          ok = read_int (v, key, 0, G_MAXINT64, &b, error);
          p->memory_budget = ok ? (guint64) b : 0;
        }
      else if (g_str_equal (key, "headroom"))
        {
          ok = read_double (v, key, &p->headroom, error);
          if (ok && !(p->headroom >= 0 && p->headroom < 1))
            {
              g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "“headroom” is %g, outside [0, 1)", p->headroom);
              ok = FALSE;
            }
        }
      else if (g_str_equal (key, "limits"))
        ok = read_triple (v, key, &p->limit_gen_length, &p->limit_block_length, &p->limit_steps, error);
      else if (g_str_equal (key, "defaults"))
        ok = read_triple (v, key, &p->default_gen_length, &p->default_block_length, &p->default_steps, error);
      else if (g_str_equal (key, "overrides"))
        ok = read_overrides (v, p, error);
      else if (g_str_equal (key, "written_by"))
        {
          const char *s = read_string (v, key, error);
          ok = s != NULL;
          if (ok && !writer_from_string (s, &p->written_by))
            {
              g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                           "“written_by” must be default, optimize, user or restore, not “%s”", s);
              ok = FALSE;
            }
        }
      else if (g_str_equal (key, "written_at") && JSON_NODE_HOLDS_NULL (v))
        p->written_at = 0;
      else if (g_str_equal (key, "written_at"))
        {
          const char *s = read_string (v, key, error);
          g_autoptr(GDateTime) dt = s ? g_date_time_new_from_iso8601 (s, NULL) : NULL;
          ok = s != NULL;
          if (ok && dt == NULL)
            {
              g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "“written_at” is not a time like 2026-11-24T10:53:01Z");
              ok = FALSE;
            }
          if (ok)
            p->written_at = g_date_time_to_unix (dt);
        }
      else if (g_str_equal (key, "reason"))
        {
          if (JSON_NODE_HOLDS_NULL (v))
            g_clear_pointer (&p->reason, g_free);
          else
            {
              const char *s = read_string (v, key, error);
              ok = s != NULL;
              g_free (p->reason);
              p->reason = g_strdup (s);
            }
        }
      else
        ok = unknown_key (NULL, key, error);
      if (!ok)
        return NULL;
    }
  return g_steal_pointer (&p);
}

/* ---- files ---- */

char *
um_profile_dir (const char *config_dir)
{
  const char *env;

  if (config_dir != NULL)
    return g_strdup (config_dir);
  /* Tests and scripts point unmask-cli at a folder of their own. */
  env = g_getenv ("UNMASK_CONFIG_DIR");
  if (env != NULL && env[0] != '\0')
    return g_strdup (env);
  return g_build_filename (g_get_user_config_dir (), "unmask", NULL);
}

char *
um_profile_path (const char *config_dir)
{
  g_autofree char *dir = um_profile_dir (config_dir);
  return g_build_filename (dir, PROFILE_FILE, NULL);
}

/* Removes temporary files a killed writer left behind in @dir. */
static void
remove_stale_temps (const char *dir)
{
  g_autoptr(GDir) d = g_dir_open (dir, 0, NULL);
  const char *name;
  gint64 now = g_get_real_time () / G_USEC_PER_SEC;

  while (d != NULL && (name = g_dir_read_name (d)) != NULL)
    {
      g_autofree char *path = NULL;
      GStatBuf st;
      const char *tmp = strstr (name, ".tmp-");
      if (name[0] != '.' || tmp == NULL || strlen (tmp) != 11)
        continue;
      path = g_build_filename (dir, name, NULL);
      if (g_lstat (path, &st) == 0 && S_ISREG (st.st_mode) && now - (gint64) st.st_mtime > STALE_TEMP_SECONDS)
        g_unlink (path);
    }
}

static gboolean
io_error (GError **error, int err, const char *what, const char *path)
{
  g_set_error (error, UM_ERROR, UM_ERROR_IO, "%s “%s”: %s", what, path, g_strerror (err));
  return FALSE;
}

/* The file a write to @path lands in: the target of a symlink (followed
 * through a chain), so that a profile kept elsewhere and linked here stays
 * linked; @path itself otherwise. */
static char *
write_target (const char *path)
{
  char *cur = g_strdup (path);

  for (int hops = 0; hops < 40; hops++)
    {
      GStatBuf st;
      g_autofree char *link = NULL;
      g_autofree char *dir = NULL;

      if (g_lstat (cur, &st) != 0 || !S_ISLNK (st.st_mode))
        return cur;
      link = g_file_read_link (cur, NULL);
      if (link == NULL)
        return cur;
      dir = g_path_get_dirname (cur);
      g_free (cur);
      cur = g_path_is_absolute (link) ? g_steal_pointer (&link) : g_build_filename (dir, link, NULL);
    }
  return cur;
}

gboolean
um_atomic_write (const char *path, const char *data, gsize len, GError **error)
{
  g_autofree char *target = write_target (path);
  g_autofree char *dir = g_path_get_dirname (target);
  g_autofree char *base = g_path_get_basename (target);
  g_autofree char *tmp = g_strdup_printf ("%s/.%s.tmp-XXXXXX", dir, base);
  gsize done = 0;
  GStatBuf old;
  gboolean have_old;
  int fd, dfd, err;

  if (g_mkdir_with_parents (dir, 0700) != 0)
    return io_error (error, errno, "cannot create the folder", dir);
  remove_stale_temps (dir);
  have_old = g_stat (target, &old) == 0 && S_ISREG (old.st_mode);
  fd = g_mkstemp_full (tmp, O_RDWR | O_CLOEXEC, 0644);
  if (fd < 0)
    return io_error (error, errno, "cannot create a temporary file in", dir);
  /* The new file keeps the old one's permissions (a user's chmod 600). */
  if (have_old && fchmod (fd, old.st_mode & 07777) != 0)
    goto fail;
  while (done < len)
    {
      ssize_t n = write (fd, data + done, len - done);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        goto fail;
      done += (gsize) n;
    }
  /* The data reaches the disk before the name points at it. */
  if (fsync (fd) != 0)
    goto fail;
  if (close (fd) != 0)
    {
      fd = -1;
      goto fail;
    }
  fd = -1;
  if (g_rename (tmp, target) != 0)
    goto fail;
  /* ... and the rename itself survives a crash: unless the folder is
   * synced, a crash may bring back the old file, or none. */
  dfd = open (dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return io_error (error, errno, "cannot open the folder to sync", dir);
  if (fsync (dfd) != 0)
    {
      err = errno;
      close (dfd);
      return io_error (error, err, "cannot sync the folder of", target);
    }
  close (dfd);
  return TRUE;

fail:
  err = errno;
  if (fd >= 0)
    close (fd);
  g_unlink (tmp);
  return io_error (error, err ? err : EIO, "cannot write", target);
}

char *
um_config_move_aside (const char *path)
{
  g_autoptr(GDateTime) now = g_date_time_new_now_utc ();
  g_autofree char *stamp = g_date_time_format (now, "%Y%m%d-%H%M%S");

  for (int i = 0; i < 1000; i++)
    {
      g_autofree char *to = i == 0 ? g_strdup_printf ("%s.corrupt-%s", path, stamp)
                                   : g_strdup_printf ("%s.corrupt-%s-%d", path, stamp, i);
      if (g_file_test (to, G_FILE_TEST_EXISTS))
        continue;
      if (g_rename (path, to) != 0)
        return NULL;
      return g_path_get_basename (to);
    }
  return NULL;
}

char *
um_profile_revision_of (const char *text, gsize len)
{
  return g_compute_checksum_for_data (G_CHECKSUM_SHA256, (const guchar *) text, len);
}

static char *
defaults_revision (void)
{
  g_autoptr(UmProfile) def = um_profile_new_default ();
  g_autofree char *text = um_profile_to_json (def);
  return um_profile_revision_of (text, strlen (text));
}

char *
um_profile_current_revision (const char *config_dir, GError **error)
{
  g_autofree char *path = um_profile_path (config_dir);
  g_autofree char *text = NULL;
  g_autoptr(GError) err = NULL;
  gsize len = 0;

  if (!g_file_get_contents (path, &text, &len, &err))
    {
      if (g_error_matches (err, G_FILE_ERROR, G_FILE_ERROR_NOENT))
        return defaults_revision ();
      g_set_error (error, UM_ERROR, UM_ERROR_IO, "cannot read the optimizer profile: %s", err->message);
      return NULL;
    }
  return um_profile_revision_of (text, len);
}

/* The profile in @config_dir. A damaged file gives the defaults and a
 * notice; @for_commit (under um-backups.c's lock) moves it aside first,
 * which only a commit may do: a reader moving it would race a commit. A
 * file of a newer Unmask is never changed: a reader gets the defaults and
 * a notice, a commit an error. */
static UmProfile *
load_profile (const char *config_dir, gboolean for_commit, char **notice, char **revision, GBytes **bytes,
              GError **error)
{
  g_autofree char *path = um_profile_path (config_dir);
  g_autofree char *text = NULL;
  g_autoptr(GError) err = NULL;
  g_autofree char *moved = NULL;
  gsize len = 0;
  UmProfile *p;

  if (notice != NULL)
    *notice = NULL;
  if (revision != NULL)
    *revision = NULL;
  if (bytes != NULL)
    *bytes = NULL;
  if (!g_file_get_contents (path, &text, &len, &err))
    {
      if (!g_error_matches (err, G_FILE_ERROR, G_FILE_ERROR_NOENT))
        {
          g_set_error (error, UM_ERROR, UM_ERROR_IO, "cannot read the optimizer profile: %s", err->message);
          return NULL;
        }
      if (revision != NULL)
        *revision = defaults_revision ();
      return um_profile_new_default ();
    }
  p = um_profile_from_json (text, (gssize) len, &err);
  if (p != NULL)
    {
      if (revision != NULL)
        *revision = um_profile_revision_of (text, len);
      if (bytes != NULL)
        *bytes = g_bytes_new_take (g_steal_pointer (&text), len);
      return p;
    }

  if (g_error_matches (err, UM_ERROR, UM_ERROR_UNSUPPORTED))
    {
      if (for_commit)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                       "the optimizer settings in %s were %s: this version changes nothing there (use that "
                       "version, or move the file away yourself)", path, err->message);
          return NULL;
        }
      if (notice != NULL)
        *notice = g_strdup_printf ("The optimizer settings in %s were %s. This version uses its defaults and "
                                   "leaves the file as it is; changing the settings here is refused.",
                                   path, err->message);
      else
        g_message ("optimizer profile %s: %s; the defaults are used", path, err->message);
      /* The file's own revision: nothing may be committed over it. */
      if (revision != NULL)
        *revision = um_profile_revision_of (text, len);
      return um_profile_new_default ();
    }

  if (!for_commit)
    {
      if (notice != NULL)
        *notice = g_strdup_printf ("The optimizer settings in %s could not be read (%s); the defaults are used. "
                                   "The file stays as it is until the next change, which keeps it aside as "
                                   "optimizer.json.corrupt-<time>.", path, err->message);
      else
        g_message ("optimizer profile %s: %s; the defaults are used", path, err->message);
      /* What a commit will find once it has moved the file aside. */
      if (revision != NULL)
        *revision = defaults_revision ();
      return um_profile_new_default ();
    }

  /* Kept for the user to look at, out of the way of the write to come. */
  moved = um_config_move_aside (path);
  if (notice != NULL)
    {
      if (moved != NULL)
        *notice = g_strdup_printf ("The optimizer settings could not be read (%s). They were moved aside to %s "
                                   "and the defaults are used.", err->message, moved);
      else
        *notice = g_strdup_printf ("The optimizer settings in %s could not be read (%s) and could not be moved "
                                   "aside; the defaults are used.", path, err->message);
    }
  else
    g_message ("optimizer profile %s: %s; moved aside as %s", path, err->message, moved ? moved : "(failed)");
  if (revision != NULL)
    *revision = defaults_revision ();
  return um_profile_new_default ();
}

UmProfile *
um_profile_load_full (const char *config_dir, char **notice, char **revision, GBytes **bytes, GError **error)
{
  return load_profile (config_dir, FALSE, notice, revision, bytes, error);
}

UmProfile *
um_profile_load_for_commit (const char *config_dir, char **notice, char **revision, GBytes **bytes, GError **error)
{
  return load_profile (config_dir, TRUE, notice, revision, bytes, error);
}

UmProfile *
um_profile_load (const char *config_dir, char **notice, GError **error)
{
  return um_profile_load_full (config_dir, notice, NULL, NULL, error);
}

gboolean
um_profile_save (const UmProfile *p, const char *config_dir, GError **error)
{
  g_autofree char *path = um_profile_path (config_dir);
  g_autofree char *text = um_profile_to_json (p);

  return um_atomic_write (path, text, strlen (text), error);
}

/* Bytes of a model: the file, or the files of the folder. */
static guint64
model_bytes (const char *path)
{
  GStatBuf st;
  guint64 total = 0;

  if (g_stat (path, &st) != 0)
    return 0;
  if (!S_ISDIR (st.st_mode))
    return (guint64) st.st_size;
  {
    g_autoptr(GDir) d = g_dir_open (path, 0, NULL);
    const char *name;
    while (d != NULL && (name = g_dir_read_name (d)) != NULL)
      {
        g_autofree char *child = g_build_filename (path, name, NULL);
        if (g_stat (child, &st) == 0 && S_ISREG (st.st_mode))
          total += (guint64) st.st_size;
      }
  }
  return total;
}

char *
um_model_identity (const char *model_path)
{
  g_autofree char *canon = NULL;
  g_autofree char *key = NULL;
  char *real;
  g_autofree char *sum = NULL;

  if (model_path == NULL)
    return NULL;
  real = realpath (model_path, NULL);
  canon = real ? g_strdup (real) : g_canonicalize_filename (model_path, NULL);
  free (real);
  key = g_strdup_printf ("%s\n%" G_GUINT64_FORMAT, canon, model_bytes (canon));
  sum = g_compute_checksum_for_string (G_CHECKSUM_SHA256, key, -1);
  return g_strndup (sum, 16);
}

void
um_profile_to_engine_options (const UmProfile *p, const char *model_id, UmEngineOptions *o)
{
  const UmProfileOverride *ov = find_override (p, model_id);

  o->n_threads = p->n_threads;
  o->memory_budget = p->memory_budget;
  o->headroom = p->headroom;
  /* "auto" states no preference, and UNMASK_DEVICE (which keeps a GPU out
   * of test runs) keeps its word over the profile. */
  if (g_getenv ("UNMASK_DEVICE") == NULL)
    {
      if (p->device != UM_DEVICE_AUTO)
        o->device = p->device;
      o->gpu_index = p->gpu_index;
    }
  o->mem = ov != NULL ? ov->mem : p->mem;
  if (p->default_gen_length > 0)
    o->shape.gen_length = p->default_gen_length;
  if (p->default_block_length > 0)
    o->shape.block_length = p->default_block_length;
}

void
um_profile_gen_layer (const UmProfile *p, const char *model_id, UmGenLayer *out)
{
  const UmProfileOverride *ov = find_override (p, model_id);
  UmGenParams v;

  um_gen_layer_init (out);
  /* Never written: its defaults are the built-in ones, and say so. The
   * defaults belong to the profile's mode; a model kept in another mode
   * has none (as the pages' mode pill shows, um_mode_info_from_profile). */
  if (p->written_by == UM_PROFILE_BY_DEFAULT || (ov != NULL && ov->mem.mode != p->mem.mode))
    return;
  um_gen_params_init (&v);
  v.gen_length = p->default_gen_length;
  v.block_length = p->default_block_length;
  v.steps = p->default_steps;
  if (p->default_gen_length > 0)
    um_gen_layer_take (out, UM_GEN_KEY_GEN_LENGTH, &v);
  if (p->default_block_length > 0)
    um_gen_layer_take (out, UM_GEN_KEY_BLOCK_LENGTH, &v);
  if (p->default_steps > 0)
    um_gen_layer_take (out, UM_GEN_KEY_STEPS, &v);
}

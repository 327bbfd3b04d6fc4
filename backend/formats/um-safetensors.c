#include "um-safetensors.h"

#include <json-glib/json-glib.h>
#include <string.h>

#include "um-error.h"
#include "um-json.h"

/* A header larger than this is not a real checkpoint (LLaDA-8B's is ~30 kB). */
#define MAX_HEADER_BYTES (100u * 1024u * 1024u)

typedef struct {
  uint64_t begin;
  uint64_t end;
  const char *name;
} Extent;

static int
extent_compare (gconstpointer a, gconstpointer b)
{
  const Extent *x = a, *y = b;
  return (x->begin > y->begin) - (x->begin < y->begin);
}

static gboolean
parse_dtype (const char *s, UmDType *out)
{
  if (g_str_equal (s, "F32"))
    *out = UM_DTYPE_F32;
  else if (g_str_equal (s, "F16"))
    *out = UM_DTYPE_F16;
  else if (g_str_equal (s, "BF16"))
    *out = UM_DTYPE_BF16;
  else if (g_str_equal (s, "I32"))
    *out = UM_DTYPE_I32;
  else
    return FALSE;
  return TRUE;
}

static gboolean
is_known_dtype (const char *s)
{
  static const char *const known[] = {
    "BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16",
    "I32", "U32", "F32", "F64", "I64", "U64", NULL
  };
  return g_strv_contains (known, s);
}

/* Reads a non-negative JSON integer; rejects doubles, strings, negatives. */
static gboolean
json_get_u64 (JsonNode *node, uint64_t *out)
{
  if (node == NULL || JSON_NODE_TYPE (node) != JSON_NODE_VALUE
      || json_node_get_value_type (node) != G_TYPE_INT64)
    return FALSE;
  gint64 v = json_node_get_int (node);
  if (v < 0)
    return FALSE;
  *out = (uint64_t) v;
  return TRUE;
}

static gboolean
parse_tensor (UmTensorTable *table,
              const char    *file,
              const char    *name,
              JsonNode      *node,
              const guint8  *data,
              uint64_t       data_len,
              GArray        *extents,
              GError       **error)
{
  JsonObject *obj;
  JsonNode *dtype_node, *shape_node, *offsets_node;
  JsonArray *shape, *offsets;
  const char *dtype_str;
  UmTensorInfo info = { 0 };
  uint64_t begin, end;

  if (JSON_NODE_TYPE (node) != JSON_NODE_OBJECT)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                   "%s: header entry “%s” is not an object", file, name);
      return FALSE;
    }
  obj = json_node_get_object (node);
  dtype_node = json_object_get_member (obj, "dtype");
  shape_node = json_object_get_member (obj, "shape");
  offsets_node = json_object_get_member (obj, "data_offsets");

  if (dtype_node == NULL || JSON_NODE_TYPE (dtype_node) != JSON_NODE_VALUE
      || json_node_get_value_type (dtype_node) != G_TYPE_STRING)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                   "%s: tensor “%s”: “dtype” is missing or not a string", file, name);
      return FALSE;
    }
  dtype_str = json_node_get_string (dtype_node);
  if (!parse_dtype (dtype_str, &info.dtype))
    {
      if (is_known_dtype (dtype_str))
        g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                     "%s: tensor “%s”: dtype %s is not supported (F32, F16 and BF16 are)",
                     file, name, dtype_str);
      else
        g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                     "%s: tensor “%s”: unknown dtype “%s”", file, name, dtype_str);
      return FALSE;
    }

  if (shape_node == NULL || JSON_NODE_TYPE (shape_node) != JSON_NODE_ARRAY)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                   "%s: tensor “%s”: “shape” is missing or not an array", file, name);
      return FALSE;
    }
  shape = json_node_get_array (shape_node);
  if (json_array_get_length (shape) > UM_MAX_DIMS)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                   "%s: tensor “%s” has %u dimensions (at most %d supported)",
                   file, name, json_array_get_length (shape), UM_MAX_DIMS);
      return FALSE;
    }
  info.n_dims = json_array_get_length (shape);
  for (guint d = 0; d < info.n_dims; d++)
    if (!json_get_u64 (json_array_get_element (shape, d), &info.shape[d]))
      {
        g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                     "%s: tensor “%s”: shape[%u] is not a non-negative integer", file, name, d);
        return FALSE;
      }

  if (offsets_node == NULL || JSON_NODE_TYPE (offsets_node) != JSON_NODE_ARRAY
      || json_array_get_length (json_node_get_array (offsets_node)) != 2)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                   "%s: tensor “%s”: “data_offsets” is missing or not a pair", file, name);
      return FALSE;
    }
  offsets = json_node_get_array (offsets_node);
  if (!json_get_u64 (json_array_get_element (offsets, 0), &begin)
      || !json_get_u64 (json_array_get_element (offsets, 1), &end)
      || end < begin)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                   "%s: tensor “%s”: “data_offsets” must be two non-negative integers, begin ≤ end",
                   file, name);
      return FALSE;
    }

  info.name = (char *) name;
  info.file = file;
  if (!um_tensor_info_compute_sizes (&info, file, error))
    return FALSE;
  if (end - begin != info.n_bytes)
    {
      g_autofree char *shape_str = um_tensor_shape_string (&info);
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                   "%s: tensor “%s”: data_offsets span %" G_GUINT64_FORMAT
                   " bytes but %s %s needs %" G_GUINT64_FORMAT,
                   file, name, end - begin, dtype_str, shape_str, info.n_bytes);
      return FALSE;
    }
  if (end > data_len)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                   "%s: tensor “%s”: data ends at byte %" G_GUINT64_FORMAT
                   " of the data section, past its end (%" G_GUINT64_FORMAT " bytes; truncated file?)",
                   file, name, end, data_len);
      return FALSE;
    }
  info.data = data + begin;

  Extent ext = { begin, end, NULL };
  g_array_append_val (extents, ext);
  return um_tensor_table_add (table, &info, error);
}

static gboolean
parse_into (UmTensorTable *table,
            const guint8  *bytes,
            gsize          len,
            const char    *file,
            GError       **error)
{
  uint64_t header_len;
  g_autoptr(JsonNode) root = NULL;
  g_autoptr(GArray) extents = NULL;
  g_autofree char *what = NULL;
  UmJsonLimits limits = { .max_bytes = MAX_HEADER_BYTES };
  JsonObject *obj;
  JsonObjectIter iter;
  const char *name;
  JsonNode *node;
  const guint8 *data;
  uint64_t data_len;

  if (len < 8)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                   "%s: file is %" G_GSIZE_FORMAT " bytes, too short for a safetensors header", file, len);
      return FALSE;
    }
  header_len = 0;
  for (int i = 7; i >= 0; i--)
    header_len = (header_len << 8) | bytes[i];
  if (header_len > len - 8 || header_len > MAX_HEADER_BYTES)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                   "%s: header length %" G_GUINT64_FORMAT " is larger than the file (%" G_GSIZE_FORMAT
                   " bytes) or than any real header; not a safetensors file or truncated",
                   file, header_len, len);
      return FALSE;
    }
  if (header_len < 2 || bytes[8] != '{')
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                   "%s: header does not start with a JSON object; not a safetensors file", file);
      return FALSE;
    }

  what = g_strdup_printf ("%s: header", file);
  root = um_json_parse ((const char *) bytes + 8, (gssize) header_len, what, &limits, error);
  if (root == NULL || (obj = um_json_root_object (root, what, error)) == NULL)
    return FALSE;

  data = bytes + 8 + header_len;
  data_len = len - 8 - header_len;
  extents = g_array_new (FALSE, FALSE, sizeof (Extent));
  json_object_iter_init (&iter, obj);
  while (json_object_iter_next (&iter, &name, &node))
    {
      if (g_str_equal (name, "__metadata__"))
        continue;
      if (!parse_tensor (table, file, name, node, data, data_len, extents, error))
        return FALSE;
    }

  /* The format forbids overlapping tensors; a file that has them lies. */
  g_array_sort (extents, extent_compare);
  for (guint i = 1; i < extents->len; i++)
    {
      const Extent *a = &g_array_index (extents, Extent, i - 1);
      const Extent *b = &g_array_index (extents, Extent, i);
      if (b->begin < a->end)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                       "%s: tensors overlap in the data section (bytes %" G_GUINT64_FORMAT
                       "–%" G_GUINT64_FORMAT " and %" G_GUINT64_FORMAT "–%" G_GUINT64_FORMAT ")",
                       file, a->begin, a->end, b->begin, b->end);
          return FALSE;
        }
    }
  return TRUE;
}

UmTensorTable *
um_safetensors_open_from_bytes (const guint8 *data,
                                gsize         len,
                                const char   *name,
                                GError      **error)
{
  g_autoptr(UmTensorTable) table = um_tensor_table_new ();
  const char *file = um_tensor_table_add_mapping (table, NULL, name, NULL);

  if (!parse_into (table, data, len, file, error))
    return NULL;
  return g_steal_pointer (&table);
}

gboolean
um_safetensors_add_file (UmTensorTable *table,
                         const char    *path,
                         GError       **error)
{
  g_autoptr(GMappedFile) mapping = NULL;
  g_autoptr(GError) local_error = NULL;
  g_autofree char *base = g_path_get_basename (path);
  const char *file;

  mapping = g_mapped_file_new (path, FALSE, &local_error);
  if (mapping == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_IO, "%s: cannot open: %s", base, local_error->message);
      return FALSE;
    }
  um_tensor_mapping_small_pages (mapping);
  file = um_tensor_table_add_mapping (table, mapping, base, path);
  return parse_into (table, (const guint8 *) g_mapped_file_get_contents (mapping),
                     g_mapped_file_get_length (mapping), file, error);
}

/* Shard names come from a file we do not trust: keep them inside the model folder. */
static gboolean
is_safe_shard_name (const char *name)
{
  return name[0] != '\0' && strchr (name, '/') == NULL && strchr (name, '\\') == NULL
         && !g_str_equal (name, ".") && !g_str_equal (name, "..");
}

static UmTensorTable *
open_sharded (const char *dir, const char *index_path, GError **error)
{
  g_autoptr(JsonNode) root = NULL;
  g_autoptr(UmTensorTable) table = um_tensor_table_new ();
  g_autoptr(GHashTable) shards = g_hash_table_new (g_str_hash, g_str_equal);
  g_autoptr(GPtrArray) order = g_ptr_array_new ();
  JsonNode *map_node;
  JsonObject *map;
  JsonObjectIter iter;
  const char *tensor;
  JsonNode *node;

  root = um_json_parse_file (index_path, "model.safetensors.index.json", NULL, error);
  if (root == NULL)
    return NULL;
  if (JSON_NODE_TYPE (root) != JSON_NODE_OBJECT
      || (map_node = json_object_get_member (json_node_get_object (root), "weight_map")) == NULL
      || JSON_NODE_TYPE (map_node) != JSON_NODE_OBJECT)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                   "model.safetensors.index.json: “weight_map” is missing or not an object");
      return NULL;
    }
  map = json_node_get_object (map_node);
  json_object_iter_init (&iter, map);
  while (json_object_iter_next (&iter, &tensor, &node))
    {
      const char *shard;
      if (JSON_NODE_TYPE (node) != JSON_NODE_VALUE || json_node_get_value_type (node) != G_TYPE_STRING
          || !is_safe_shard_name ((shard = json_node_get_string (node))))
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                       "model.safetensors.index.json: weight_map[“%s”] is not a file name in the model folder",
                       tensor);
          return NULL;
        }
      if (!g_hash_table_contains (shards, shard))
        {
          g_hash_table_add (shards, (gpointer) shard);
          g_ptr_array_add (order, (gpointer) shard);
        }
    }
  if (order->len == 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                   "model.safetensors.index.json: “weight_map” lists no tensors");
      return NULL;
    }
  for (guint i = 0; i < order->len; i++)
    {
      g_autofree char *path = g_build_filename (dir, g_ptr_array_index (order, i), NULL);
      if (!um_safetensors_add_file (table, path, error))
        return NULL;
    }
  /* Every tensor the index promises must be in the shard it names. */
  json_object_iter_init (&iter, map);
  while (json_object_iter_next (&iter, &tensor, &node))
    {
      const UmTensorInfo *info = um_tensor_table_lookup (table, tensor);
      const char *shard = json_node_get_string (node);
      if (info == NULL || !g_str_equal (info->file, shard))
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                       "model.safetensors.index.json: tensor “%s” is not in %s", tensor, shard);
          return NULL;
        }
    }
  return g_steal_pointer (&table);
}

UmTensorTable *
um_safetensors_open_dir (const char *dir, GError **error)
{
  g_autofree char *single = g_build_filename (dir, "model.safetensors", NULL);
  g_autofree char *index = g_build_filename (dir, "model.safetensors.index.json", NULL);
  g_autoptr(UmTensorTable) table = NULL;

  if (g_file_test (index, G_FILE_TEST_IS_REGULAR))
    return open_sharded (dir, index, error);
  if (!g_file_test (single, G_FILE_TEST_IS_REGULAR))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_IO,
                   "%s: neither model.safetensors nor model.safetensors.index.json is there", dir);
      return NULL;
    }
  table = um_tensor_table_new ();
  if (!um_safetensors_add_file (table, single, error))
    return NULL;
  return g_steal_pointer (&table);
}

/* um-convert-model.c — making a converted-weight file (see
 * um-convert-model.h). Carved out of backend/memory/um-convert.c, which
 * keeps the cache it writes into. */
#include "um-convert-model.h"

#include "um-error.h"

char *
um_convert_model (UmModel                 *src,
                  const UmQuantizeOptions *opts,
                  const char              *cache_dir,
                  UmQuantizeProgress       progress,
                  gpointer                 user_data,
                  GCancellable            *cancellable,
                  gboolean                *was_cached,
                  GError                 **error)
{
  g_autoptr(GArray) plan = NULL;
  g_autoptr(GPtrArray) dirs = NULL;
  g_autofree char *key = NULL, *name = NULL, *path = NULL, *abs = NULL;
  const char *write_dir = NULL;
  guint64 need = 0;

  if (was_cached)
    *was_cached = FALSE;
  if (opts == NULL || opts->type == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "no conversion type given");
      return NULL;
    }
  plan = um_quantize_plan_tensors (src, opts, error);
  if (plan == NULL)
    return NULL;
  key = um_convert_cache_key (src, opts);
  name = um_convert_cache_file_name (src, opts, key);
  dirs = um_convert_cache_dirs (cache_dir);
  /* What killed conversions left behind: gigabytes each, never reused. */
  um_convert_cache_clean_partial (cache_dir, UM_CONVERT_STALE_PART_SECONDS);

  for (guint i = 0; i < dirs->len; i++)
    {
      g_autofree char *candidate = g_build_filename (g_ptr_array_index (dirs, i), name, NULL);
      if (um_convert_cache_file_valid (candidate, key, plan))
        {
          if (was_cached)
            *was_cached = TRUE;
          return g_steal_pointer (&candidate);
        }
    }

  for (guint i = 0; i < dirs->len && write_dir == NULL; i++)
    if (um_convert_dir_writable (g_ptr_array_index (dirs, i)))
      write_dir = g_ptr_array_index (dirs, i);
    else if (i + 1 < dirs->len)
      g_message ("cannot write converted weights to %s; using %s", (char *) g_ptr_array_index (dirs, i),
                 (char *) g_ptr_array_index (dirs, i + 1));
  if (write_dir == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_IO, "cannot create or write the converted-weight folder %s",
                   (char *) g_ptr_array_index (dirs, 0));
      return NULL;
    }
  if (!um_convert_predict_bytes (src, opts, &need, error)
      || !um_convert_check_free_space (write_dir, need, src->display_name, error))
    return NULL;

  path = g_build_filename (write_dir, name, NULL);
  abs = g_canonicalize_filename (src->path, NULL);
  {
    const char *const extra[] = {
      UM_CONVERT_KEY_KEY, key, UM_CONVERT_SOURCE_KEY, abs,
      UM_CONVERT_TYPE_KEY, um_quantize_type_name (opts->type), NULL
    };
    if (!um_quantize_model_with_metadata (src, opts, path, extra, progress, user_data, cancellable, error))
      return NULL;
  }
  return g_steal_pointer (&path);
}

/* um-convert.c — the converted-weight cache (see um-convert.h). */
#include "um-convert.h"

#include <errno.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <glib/gstdio.h>

#include "um-error.h"
#include "um-gguf.h"

/* Bump when the converter writes different bytes for the same input, so
 * old cache files stop matching. */
#define FORMAT_VERSION "unmask-converted-v2"
#define MAX_NAME_CHARS 80

char *
um_convert_cache_dir (void)
{
  return g_build_filename (g_get_user_cache_dir (), "unmask", "converted", NULL);
}

static char *
fallback_dir (void)
{
  return g_build_filename (g_get_tmp_dir (), "unmask-converted", NULL);
}

/* NAME.gguf.XXXXXX.part: what um_gguf_writer writes before renaming. */
static gboolean
is_part_name (const char *name)
{
  return g_str_has_suffix (name, ".part") && strstr (name, ".gguf.") != NULL;
}

/* Its writer holds a lock on it for as long as it writes. */
static gboolean
part_in_progress (const char *path)
{
  int fd = open (path, O_RDONLY | O_CLOEXEC);
  gboolean held;

  if (fd < 0)
    return FALSE;
  held = flock (fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  close (fd);
  return held;
}

GPtrArray *
um_convert_cache_dirs (const char *dir)
{
  GPtrArray *dirs = g_ptr_array_new_with_free_func (g_free);
  if (dir != NULL)
    g_ptr_array_add (dirs, g_canonicalize_filename (dir, NULL));
  else
    {
      g_autofree char *a = um_convert_cache_dir (), *b = fallback_dir ();
      g_ptr_array_add (dirs, g_canonicalize_filename (a, NULL));
      g_ptr_array_add (dirs, g_canonicalize_filename (b, NULL));
    }
  return dirs;
}

/* ---- the key --------------------------------------------------------------- */

static int
compare_strings (gconstpointer a, gconstpointer b)
{
  return strcmp (*(char * const *) a, *(char * const *) b);
}

/* The files whose contents the converted file depends on. */
static GPtrArray *
source_files (const UmModel *src, const char *abs)
{
  GPtrArray *files = g_ptr_array_new_with_free_func (g_free);
  GDir *d;
  const char *name;

  if (!g_file_test (abs, G_FILE_TEST_IS_DIR))
    {
      g_ptr_array_add (files, g_strdup (abs));
      return files;
    }
  /* The weights, and the configuration and tokenizer files that end up in
   * the metadata. */
  d = g_dir_open (abs, 0, NULL);
  while (d != NULL && (name = g_dir_read_name (d)) != NULL)
    if (g_str_has_suffix (name, ".safetensors") || g_str_has_suffix (name, ".json"))
      g_ptr_array_add (files, g_build_filename (abs, name, NULL));
  if (d != NULL)
    g_dir_close (d);
  g_ptr_array_sort (files, compare_strings);
  return files;
}

static void
add_double (GChecksum *sum, const char *label, double v)
{
  char buf[G_ASCII_DTOSTR_BUF_SIZE];
  g_checksum_update (sum, (const guchar *) label, -1);
  g_ascii_formatd (buf, sizeof buf, "%.17g", v);
  g_checksum_update (sum, (const guchar *) buf, -1);
  g_checksum_update (sum, (const guchar *) "\n", 1);
}

char *
um_convert_cache_key (const UmModel *src, const UmQuantizeOptions *opts)
{
  g_autoptr(GChecksum) sum = g_checksum_new (G_CHECKSUM_SHA256);
  g_autofree char *abs = g_canonicalize_filename (src->path, NULL);
  g_autoptr(GPtrArray) files = source_files (src, abs);
  const char *type = opts && opts->type ? opts->type : "";

  g_checksum_update (sum, (const guchar *) FORMAT_VERSION "\n", -1);
  /* Lengths before strings: no two sources can produce the same text. */
  {
    g_autofree char *s = g_strdup_printf ("path %zu:%s\n", strlen (abs), abs);
    g_checksum_update (sum, (const guchar *) s, -1);
  }
  for (guint i = 0; i < files->len; i++)
    {
      const char *path = g_ptr_array_index (files, i);
      g_autofree char *base = g_path_get_basename (path);
      g_autofree char *s = NULL;
      GStatBuf st;

      if (g_stat (path, &st) == 0)
        s = g_strdup_printf ("file %zu:%s size %" G_GINT64_FORMAT " mtime %" G_GINT64_FORMAT ".%09ld\n",
                             strlen (base), base, (gint64) st.st_size, (gint64) st.st_mtim.tv_sec,
                             (long) st.st_mtim.tv_nsec);
      else
        s = g_strdup_printf ("file %zu:%s missing\n", strlen (base), base);
      g_checksum_update (sum, (const guchar *) s, -1);
    }
  {
    const char *canonical = um_quantize_type_name (type);
    g_autofree char *s = g_strdup_printf ("type %s\n", canonical ? canonical : type);
    g_checksum_update (sum, (const guchar *) s, -1);
  }
  add_double (sum, "prune_heads ", opts ? opts->prune_heads : 0.0);
  add_double (sum, "prune_ffn ", opts ? opts->prune_ffn : 0.0);
  return g_strdup (g_checksum_get_string (sum));
}

/* ---- prediction ------------------------------------------------------------ */

gboolean
um_convert_predict_bytes (const UmModel *src, const UmQuantizeOptions *opts, guint64 *bytes, GError **error)
{
  g_autoptr(GArray) plan = NULL;
  guint64 total = 64 * 1024;   /* header, the scalar keys and a chat template, generously */

  if (opts == NULL || opts->type == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "no conversion type given");
      return FALSE;
    }
  plan = um_quantize_plan_tensors (src, opts, error);
  if (plan == NULL)
    return FALSE;
  for (guint i = 0; i < plan->len; i++)
    {
      const UmPlannedTensor *t = &g_array_index (plan, UmPlannedTensor, i);
      /* Data, alignment padding and the tensor's info entry. */
      total += t->bytes + UM_GGUF_DEFAULT_ALIGNMENT + 64 + strlen (t->name);
    }
  /* The vocabulary: a length, the string and a type per token; merges. */
  for (guint id = 0; id < src->cfg.vocab_size; id++)
    {
      const char *s = um_tokenizer_id_to_token (src->tokenizer, id);
      total += 8 + (s ? strlen (s) : 16) + 4;
    }
  for (guint r = 0; r < um_tokenizer_n_merges (src->tokenizer); r++)
    total += 8 + strlen (um_tokenizer_get_merge (src->tokenizer, r));
  *bytes = total;
  return TRUE;
}

/* ---- the cache file -------------------------------------------------------- */

static void
append_percent (GString *s, double ratio)
{
  char buf[G_ASCII_DTOSTR_BUF_SIZE];
  g_string_append (s, g_ascii_formatd (buf, sizeof buf, "%.4g", ratio * 100.0));
}

char *
um_convert_cache_file_name (const UmModel *src, const UmQuantizeOptions *opts, const char *key)
{
  g_autofree char *base = g_strdup (src->display_name ? src->display_name : "model");
  GString *s = g_string_new (NULL);

  if (g_str_has_suffix (base, ".gguf"))
    base[strlen (base) - 5] = '\0';
  /* Only characters that need no quoting anywhere; no leading dot. */
  for (const char *p = base; *p && s->len < MAX_NAME_CHARS; p++)
    {
      char c = *p;
      if (!(g_ascii_isalnum (c) || c == '-' || c == '_' || c == '+' || (c == '.' && s->len > 0)))
        c = '_';
      g_string_append_c (s, c);
    }
  if (s->len == 0)
    g_string_append (s, "model");
  g_string_append_printf (s, "-%s", um_quantize_type_name (opts->type));
  if (opts->prune_heads > 0.0 || opts->prune_ffn > 0.0)
    {
      g_string_append (s, "-p");
      append_percent (s, opts->prune_heads);
      g_string_append_c (s, 'h');
      append_percent (s, opts->prune_ffn);
      g_string_append_c (s, 'f');
    }
  g_string_append_printf (s, "-%.16s.gguf", key);
  return g_string_free (s, FALSE);
}

gboolean
um_convert_cache_file_valid (const char *path, const char *key, const GArray *plan)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(UmGguf) g = NULL;
  const char *got;
  UmTensorTable *t;

  if (!g_file_test (path, G_FILE_TEST_IS_REGULAR))
    return FALSE;
  /* Parsing checks every tensor lies inside the file. */
  g = um_gguf_open (path, &error);
  if (g == NULL)
    {
      g_debug ("converted-weight cache: %s is unusable, rewriting it: %s", path, error->message);
      return FALSE;
    }
  got = um_gguf_get_string (g, UM_CONVERT_KEY_KEY, NULL);
  if (got == NULL || strcmp (got, key) != 0)
    return FALSE;
  t = um_gguf_get_tensors (g);
  if (um_tensor_table_size (t) != plan->len)
    return FALSE;
  for (guint i = 0; i < plan->len; i++)
    {
      const UmPlannedTensor *want = &g_array_index (plan, UmPlannedTensor, i);
      const UmTensorInfo *info = um_tensor_table_lookup (t, want->name);
      guint64 shape[3];
      const guint n_dims = um_planned_tensor_shape (want, shape);
      if (info == NULL || info->dtype != want->dtype || info->n_bytes != want->bytes || info->n_dims != n_dims
          || memcmp (info->shape, shape, n_dims * sizeof shape[0]) != 0)
        return FALSE;
    }
  return TRUE;
}

gboolean
um_convert_dir_writable (const char *dir)
{
  g_autofree char *probe = NULL;
  int fd;

  if (g_mkdir_with_parents (dir, 0755) != 0)
    return FALSE;
  probe = g_build_filename (dir, ".probe-XXXXXX", NULL);
  fd = g_mkstemp (probe);
  if (fd < 0)
    return FALSE;
  close (fd);
  g_unlink (probe);
  return TRUE;
}

gboolean
um_convert_check_free_space (const char *dir, guint64 need, const char *what, GError **error)
{
  g_autoptr(GFile) file = g_file_new_for_path (dir);
  g_autoptr(GFileInfo) info = g_file_query_filesystem_info (file, G_FILE_ATTRIBUTE_FILESYSTEM_FREE, NULL, NULL);
  guint64 free_bytes;

  /* A file system that does not say is given the benefit of the doubt. */
  if (info == NULL || !g_file_info_has_attribute (info, G_FILE_ATTRIBUTE_FILESYSTEM_FREE))
    return TRUE;
  free_bytes = g_file_info_get_attribute_uint64 (info, G_FILE_ATTRIBUTE_FILESYSTEM_FREE);
  if (free_bytes >= need)
    return TRUE;
  {
    g_autofree char *n = g_format_size (need), *f = g_format_size (free_bytes);
    g_set_error (error, UM_ERROR, UM_ERROR_IO,
                 "not enough disk space to convert %s: the converted weights need %s in %s, which has %s free",
                 what, n, dir, f);
  }
  return FALSE;
}

char *
um_convert_lookup (const UmModel *src, const UmQuantizeOptions *opts, const char *cache_dir)
{
  g_autoptr(GArray) plan = NULL;
  g_autoptr(GPtrArray) dirs = NULL;
  g_autofree char *key = NULL, *name = NULL;

  if (opts == NULL || opts->type == NULL || (plan = um_quantize_plan_tensors (src, opts, NULL)) == NULL)
    return NULL;
  key = um_convert_cache_key (src, opts);
  name = um_convert_cache_file_name (src, opts, key);
  dirs = um_convert_cache_dirs (cache_dir);
  for (guint i = 0; i < dirs->len; i++)
    {
      g_autofree char *candidate = g_build_filename (g_ptr_array_index (dirs, i), name, NULL);
      if (um_convert_cache_file_valid (candidate, key, plan))
        return g_steal_pointer (&candidate);
    }
  return NULL;
}

/* ---- management ------------------------------------------------------------ */

void
um_converted_entry_free (UmConvertedEntry *entry)
{
  if (entry == NULL)
    return;
  g_free (entry->path);
  g_free (entry->source);
  g_free (entry->type);
  g_free (entry);
}

static int
compare_entries (gconstpointer a, gconstpointer b)
{
  const UmConvertedEntry *x = *(UmConvertedEntry * const *) a, *y = *(UmConvertedEntry * const *) b;
  return strcmp (x->path, y->path);
}

static UmConvertedEntry *
read_entry (const char *path, const GStatBuf *st)
{
  UmConvertedEntry *e = g_new0 (UmConvertedEntry, 1);
  g_autoptr(UmGguf) g = um_gguf_open (path, NULL);

  e->path = g_strdup (path);
  e->bytes = st->st_size;
  e->mtime = st->st_mtime;
  if (g != NULL && um_gguf_find_key (g, UM_CONVERT_KEY_KEY) >= 0)
    {
      const char *s = um_gguf_get_string (g, UM_CONVERT_SOURCE_KEY, NULL);
      const char *t = um_gguf_get_string (g, UM_CONVERT_TYPE_KEY, NULL);
      e->source = g_strdup (s);
      e->type = g_strdup (t);
      if (um_gguf_find_key (g, "unmask.prune.heads") >= 0)
        um_gguf_get_f64 (g, "unmask.prune.heads", &e->prune_heads, NULL);
      if (um_gguf_find_key (g, "unmask.prune.ffn") >= 0)
        um_gguf_get_f64 (g, "unmask.prune.ffn", &e->prune_ffn, NULL);
    }
  return e;
}

/* The cache's files; with @gguf FALSE only the .part ones, so a load that
 * cleans up reads no GGUF header. */
static GPtrArray *
list_files (const char *dir, gboolean gguf, GError **error)
{
  g_autoptr(GPtrArray) dirs = um_convert_cache_dirs (dir);
  g_autoptr(GPtrArray) list = g_ptr_array_new_with_free_func ((GDestroyNotify) um_converted_entry_free);

  for (guint i = 0; i < dirs->len; i++)
    {
      const char *folder = g_ptr_array_index (dirs, i);
      g_autoptr(GError) local = NULL;
      GDir *d = g_dir_open (folder, 0, &local);
      const char *name;

      if (d == NULL)
        {
          /* A folder never created holds nothing. The default folders are
           * both optional: one that cannot be read is why the other exists. */
          if (g_error_matches (local, G_FILE_ERROR, G_FILE_ERROR_NOENT) || dir == NULL)
            continue;
          g_set_error (error, UM_ERROR, UM_ERROR_IO, "cannot list the converted-weight folder %s: %s",
                       folder, local->message);
          return NULL;
        }
      while ((name = g_dir_read_name (d)) != NULL)
        {
          g_autofree char *path = NULL;
          gboolean part = is_part_name (name);
          GStatBuf st;

          if (!part && !(gguf && g_str_has_suffix (name, ".gguf")))
            continue;
          path = g_build_filename (folder, name, NULL);
          if (g_lstat (path, &st) != 0 || !S_ISREG (st.st_mode))
            continue;
          if (part)
            {
              UmConvertedEntry *e = g_new0 (UmConvertedEntry, 1);
              e->path = g_steal_pointer (&path);
              e->bytes = st.st_size;
              e->mtime = st.st_mtime;
              e->partial = TRUE;
              e->in_progress = part_in_progress (e->path);
              g_ptr_array_add (list, e);
            }
          else
            g_ptr_array_add (list, read_entry (path, &st));
        }
      g_dir_close (d);
    }
  g_ptr_array_sort (list, compare_entries);
  return g_steal_pointer (&list);
}

guint
um_convert_cache_clean_partial (const char *dir, gint64 min_age_seconds)
{
  g_autoptr(GPtrArray) list = list_files (dir, FALSE, NULL);
  gint64 now = g_get_real_time () / G_USEC_PER_SEC;
  guint n = 0;

  for (guint i = 0; list != NULL && i < list->len; i++)
    {
      const UmConvertedEntry *e = g_ptr_array_index (list, i);
      /* The age covers a writer between creating the file and locking it. */
      if (!e->in_progress && now - e->mtime >= min_age_seconds && g_unlink (e->path) == 0)
        n++;
    }
  return n;
}

GPtrArray *
um_convert_cache_list (const char *dir, GError **error)
{
  return list_files (dir, TRUE, error);
}

gboolean
um_convert_cache_remove (const char *dir, const char *path, GError **error)
{
  g_autoptr(GPtrArray) dirs = um_convert_cache_dirs (dir);
  g_autofree char *abs = NULL, *parent = NULL, *base = NULL;
  gboolean inside = FALSE, ours;
  GStatBuf st;

  g_return_val_if_fail (path != NULL, FALSE);
  abs = g_canonicalize_filename (path, NULL);
  parent = g_path_get_dirname (abs);
  base = g_path_get_basename (abs);
  for (guint i = 0; i < dirs->len && !inside; i++)
    inside = strcmp (parent, g_ptr_array_index (dirs, i)) == 0;
  ours = g_str_has_suffix (base, ".gguf") || is_part_name (base);
  if (inside && ours && g_lstat (abs, &st) != 0)
    {
      int err = errno;
      g_set_error (error, UM_ERROR, UM_ERROR_IO, "cannot remove %s: %s", abs, g_strerror (err));
      return FALSE;
    }
  if (inside && ours && is_part_name (base) && part_in_progress (abs))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "%s is a conversion still being written; not removing it", abs);
      return FALSE;
    }
  if (!inside || !ours || !S_ISREG (st.st_mode))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "%s is not a converted-weight file of %s; not removing it", path,
                   (char *) g_ptr_array_index (dirs, 0));
      return FALSE;
    }
  if (g_unlink (abs) != 0)
    {
      int err = errno;
      g_set_error (error, UM_ERROR, UM_ERROR_IO, "cannot remove %s: %s", abs, g_strerror (err));
      return FALSE;
    }
  return TRUE;
}

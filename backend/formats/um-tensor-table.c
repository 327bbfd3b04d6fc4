#include "um-tensor-table.h"

#include <errno.h>
#include <fcntl.h>

#include <sys/mman.h>
#include <unistd.h>

#include "um-error.h"

struct _UmTensorTable {
  GPtrArray  *tensors;   /* UmTensorInfo*, owned */
  GHashTable *by_name;   /* name -> UmTensorInfo* (borrowed) */
  GPtrArray  *mappings;  /* GMappedFile* */
  GPtrArray  *files;     /* char* file names */
};

/* Read-only file mappings held by live tables: um_tensor_data_release ()
 * only drops pages inside one of these, since MADV_DONTNEED on anonymous
 * memory would zero it. A mapping may be held by several tables. */
typedef struct {
  const guint8 *begin, *end;
  guint         refs;
  int           fd;      /* the file, for um_tensor_data_read (); -1 none */
} MappedRange;

static GMutex  ranges_lock;
static GArray *ranges;   /* MappedRange */

static void
ranges_add (GMappedFile *mapping, const char *path)
{
  const guint8 *p = (const guint8 *) g_mapped_file_get_contents (mapping);
  gsize len = g_mapped_file_get_length (mapping);
  MappedRange r = { p, p + len, 1, -1 };

  if (p == NULL || len == 0)
    return;
  g_mutex_lock (&ranges_lock);
  if (ranges == NULL)
    ranges = g_array_new (FALSE, FALSE, sizeof (MappedRange));
  for (guint i = 0; i < ranges->len; i++)
    {
      MappedRange *q = &g_array_index (ranges, MappedRange, i);
      if (q->begin == r.begin && q->end == r.end)
        {
          q->refs++;
          g_mutex_unlock (&ranges_lock);
          return;
        }
    }
  r.fd = path ? open (path, O_RDONLY | O_CLOEXEC) : -1;
  g_array_append_val (ranges, r);
  g_mutex_unlock (&ranges_lock);
}

void
um_tensor_mapping_small_pages (GMappedFile *mapping)
{
  void *p = g_mapped_file_get_contents (mapping);
  gsize len = g_mapped_file_get_length (mapping);

  /* Advice only: a kernel without it maps as before. */
  if (p != NULL && len > 0)
    (void) madvise (p, len, MADV_NOHUGEPAGE);
}

static void
ranges_remove (GMappedFile *mapping)
{
  const guint8 *p = (const guint8 *) g_mapped_file_get_contents (mapping);
  gsize len = g_mapped_file_get_length (mapping);

  if (p == NULL || len == 0)
    return;
  g_mutex_lock (&ranges_lock);
  for (guint i = 0; ranges != NULL && i < ranges->len; i++)
    {
      MappedRange *q = &g_array_index (ranges, MappedRange, i);
      if (q->begin == p && q->end == p + len)
        {
          if (--q->refs == 0)
            {
              if (q->fd >= 0)
                close (q->fd);
              g_array_remove_index_fast (ranges, i);
            }
          break;
        }
    }
  g_mutex_unlock (&ranges_lock);
}

static void
mapping_release (gpointer p)
{
  ranges_remove (p);
  g_mapped_file_unref (p);
}

static void
advise_inside (const void *data, size_t bytes, int advice)
{
  const guint8 *begin = data, *end = begin + bytes;
  uintptr_t page = (uintptr_t) sysconf (_SC_PAGESIZE);
  uintptr_t a, b;
  gboolean inside = FALSE;

  if (data == NULL || bytes == 0 || page == 0 || end < begin)
    return;
  /* Only whole pages inside the range: neighbours may still be in use. */
  a = ((uintptr_t) begin + page - 1) / page * page;
  b = (uintptr_t) end / page * page;
  if (b <= a)
    return;
  /* Under the lock, so the mapping cannot be unmapped (and the addresses
   * reused) between the check and the madvise. */
  g_mutex_lock (&ranges_lock);
  for (guint i = 0; ranges != NULL && i < ranges->len && !inside; i++)
    {
      const MappedRange *q = &g_array_index (ranges, MappedRange, i);
      inside = begin >= q->begin && end <= q->end;
    }
  if (inside)
    madvise ((void *) a, b - a, advice);
  g_mutex_unlock (&ranges_lock);
}

void
um_tensor_data_release (const void *data, size_t bytes)
{
  advise_inside (data, bytes, MADV_DONTNEED);
}

gboolean
um_tensor_data_read (const void *data, size_t bytes, void *dst)
{
  const guint8 *begin = data;
  gboolean done = FALSE;

  g_mutex_lock (&ranges_lock);
  for (guint i = 0; ranges != NULL && i < ranges->len; i++)
    {
      const MappedRange *q = &g_array_index (ranges, MappedRange, i);
      if (begin >= q->begin && bytes <= (size_t) (q->end - begin))
        {
          size_t got = 0;
          while (q->fd >= 0 && got < bytes)
            {
              ssize_t r = pread (q->fd, (guint8 *) dst + got, bytes - got, (off_t) (begin - q->begin) + got);
              if (r <= 0 && !(r < 0 && errno == EINTR))
                break;
              got += MAX (r, 0);
            }
          done = got == bytes;
          break;
        }
    }
  g_mutex_unlock (&ranges_lock);
  if (!done)
    memcpy (dst, data, bytes);
  return done;
}

static void
tensor_info_free (gpointer p)
{
  UmTensorInfo *info = p;
  g_free (info->name);
  g_free (info);
}

UmTensorTable *
um_tensor_table_new (void)
{
  UmTensorTable *table = g_new0 (UmTensorTable, 1);
  table->tensors = g_ptr_array_new_with_free_func (tensor_info_free);
  table->by_name = g_hash_table_new (g_str_hash, g_str_equal);
  table->mappings = g_ptr_array_new_with_free_func (mapping_release);
  table->files = g_ptr_array_new_with_free_func (g_free);
  return table;
}

void
um_tensor_table_free (UmTensorTable *table)
{
  if (table == NULL)
    return;
  g_hash_table_unref (table->by_name);
  g_ptr_array_unref (table->tensors);
  g_ptr_array_unref (table->mappings);
  g_ptr_array_unref (table->files);
  g_free (table);
}

const char *
um_tensor_table_add_mapping (UmTensorTable *table,
                             GMappedFile   *mapping,
                             const char    *file_name,
                             const char    *path)
{
  char *name = g_strdup (file_name);
  if (mapping != NULL)
    {
      g_ptr_array_add (table->mappings, g_mapped_file_ref (mapping));
      ranges_add (mapping, path);
    }
  g_ptr_array_add (table->files, name);
  return name;
}

gboolean
um_tensor_table_add (UmTensorTable      *table,
                     const UmTensorInfo *info,
                     GError            **error)
{
  UmTensorInfo *copy;

  if (g_hash_table_contains (table->by_name, info->name))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                   "%s: tensor “%s” appears more than once",
                   info->file ? info->file : "model", info->name);
      return FALSE;
    }
  copy = g_memdup2 (info, sizeof *info);
  copy->name = g_strdup (info->name);
  g_ptr_array_add (table->tensors, copy);
  g_hash_table_insert (table->by_name, copy->name, copy);
  return TRUE;
}

const UmTensorInfo *
um_tensor_table_lookup (const UmTensorTable *table, const char *name)
{
  return g_hash_table_lookup (table->by_name, name);
}

guint
um_tensor_table_size (const UmTensorTable *table)
{
  return table->tensors->len;
}

const UmTensorInfo *
um_tensor_table_get (const UmTensorTable *table, guint index)
{
  g_return_val_if_fail (index < table->tensors->len, NULL);
  return g_ptr_array_index (table->tensors, index);
}

uint64_t
um_tensor_table_total_bytes (const UmTensorTable *table)
{
  uint64_t total = 0;
  for (guint i = 0; i < table->tensors->len; i++)
    total += ((UmTensorInfo *) g_ptr_array_index (table->tensors, i))->n_bytes;
  return total;
}

char *
um_tensor_shape_string (const UmTensorInfo *info)
{
  GString *s = g_string_new ("[");
  for (guint d = 0; d < info->n_dims; d++)
    g_string_append_printf (s, "%s%" G_GUINT64_FORMAT, d ? ", " : "", info->shape[d]);
  g_string_append_c (s, ']');
  return g_string_free (s, FALSE);
}

gboolean
um_tensor_info_compute_sizes (UmTensorInfo *info,
                              const char   *file,
                              GError      **error)
{
  uint64_t n = 1;
  const UmDTypeInfo *dt = um_dtype_info (info->dtype);

  if (info->n_dims > UM_MAX_DIMS)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                   "%s: tensor “%s” has %u dimensions (at most %d supported)",
                   file, info->name, info->n_dims, UM_MAX_DIMS);
      return FALSE;
    }
  for (guint d = 0; d < info->n_dims; d++)
    {
      if (info->shape[d] != 0 && n > UINT64_MAX / info->shape[d])
        goto overflow;
      n *= info->shape[d];
    }
  for (guint d = info->n_dims; d < UM_MAX_DIMS; d++)
    info->shape[d] = 1;
  /* A row of a block-quantized tensor must be whole blocks. */
  if (dt == NULL || (info->n_dims > 0 && info->shape[info->n_dims - 1] % dt->block_elems != 0))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                   "%s: tensor “%s” of type %s has rows of %" G_GUINT64_FORMAT
                   " elements, not a multiple of its block size %u",
                   file, info->name, um_dtype_name (info->dtype),
                   info->n_dims ? info->shape[info->n_dims - 1] : 0,
                   dt ? dt->block_elems : 0);
      return FALSE;
    }
  if (!um_dtype_bytes (info->dtype, n, &info->n_bytes))
    goto overflow;
  info->n_elems = n;
  return TRUE;

overflow:
  g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
               "%s: tensor “%s” has an absurd shape (its size overflows)", file, info->name);
  return FALSE;
}

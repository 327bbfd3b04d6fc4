/* um-tensor-table.h — the one tensor table every container yields.
 *
 * Safetensors and GGUF readers both fill an UmTensorTable: name, dtype,
 * shape (outermost first, i.e. PyTorch order: a weight is [rows, cols] with
 * cols contiguous) and a pointer into a read-only memory mapping the table
 * keeps alive. Readers validate every offset and size before adding a tensor,
 * so a tensor in the table is always fully inside its file.
 */
#pragma once

#include <glib.h>
#include <stdint.h>

#include "um-dtype.h"

G_BEGIN_DECLS

#define UM_MAX_DIMS 4

typedef struct {
  char         *name;
  UmDType       dtype;
  guint         n_dims;
  uint64_t      shape[UM_MAX_DIMS];   /* outermost first; unused dims are 1 */
  uint64_t      n_elems;
  uint64_t      n_bytes;
  const guint8 *data;                 /* inside a mapping owned by the table */
  const char   *file;                 /* basename of the source file (owned by the table) */
} UmTensorInfo;

typedef struct _UmTensorTable UmTensorTable;

UmTensorTable      *um_tensor_table_new (void);
void                um_tensor_table_free (UmTensorTable *table);

/* Keeps @mapping alive as long as the table; returns the interned file name to
 * store in UmTensorInfo.file. @path (may be NULL) is the file mapped, opened
 * for um_tensor_data_read (). */
const char         *um_tensor_table_add_mapping (UmTensorTable *table,
                                                 GMappedFile   *mapping,
                                                 const char    *file_name,
                                                 const char    *path);

/* Copies @info (and its name). Fails on a duplicate name. */
gboolean            um_tensor_table_add (UmTensorTable      *table,
                                         const UmTensorInfo *info,
                                         GError            **error);

const UmTensorInfo *um_tensor_table_lookup (const UmTensorTable *table,
                                            const char          *name);
guint               um_tensor_table_size (const UmTensorTable *table);
/* Tensors in the order they were added. */
const UmTensorInfo *um_tensor_table_get (const UmTensorTable *table,
                                         guint                index);

/* Sum of n_bytes over all tensors. */
uint64_t            um_tensor_table_total_bytes (const UmTensorTable *table);

/* Shape as "[a, b]" for messages; returns a newly allocated string. */
char               *um_tensor_shape_string (const UmTensorInfo *info);

/* Helper for readers: fills n_elems and n_bytes from dtype and shape, checking
 * for overflow and partial quantization blocks. */
gboolean            um_tensor_info_compute_sizes (UmTensorInfo *info,
                                                  const char   *file,
                                                  GError      **error);

/* Asks the kernel to map @mapping (a model file just mapped, before any
 * byte of it is read) 4 KiB at a time, never as 2 MiB pages: where the
 * page cache holds the file in PMD-sized folios (ext4 makes them on large
 * writes, as when a converted model was just written), one touched tensor
 * would otherwise map 2 MiB of the file at once, which no memory plan can
 * foresee (test-memory-modes saw load peaks 2.7-3.7 MiB over the plan,
 * now and then, for converted models).  2 MiB pages gained nothing on the
 * weight products (docs/cpu-avx2.md). */
void                um_tensor_mapping_small_pages (GMappedFile *mapping);

/* Drops the pages of [data, data + bytes) from this process's memory
 * (madvise MADV_DONTNEED on the page-aligned interior of the range). For a
 * read-only file mapping nothing is lost: the pages are read again from the
 * page cache or the file on the next access. Used by converters that stream
 * through a whole model once, so resident memory stays near one tensor.
 * Only ranges inside a mapping that a live tensor table holds are touched;
 * anything else (heap buffers, whose pages would be zeroed) is left alone. */
void                um_tensor_data_release (const void *data,
                                            size_t      bytes);
/* Copies @bytes of a tensor at @data into @dst by reading the file, without
 * mapping its pages into this process (a kernel maps a whole large folio,
 * up to 2 MiB, when one byte of it is touched): for a token table read a
 * row per token. Falls back to memcpy (and returns FALSE) outside a file
 * mapping of a live table. */
gboolean            um_tensor_data_read    (const void *data,
                                            size_t      bytes,
                                            void       *dst);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmTensorTable, um_tensor_table_free)

G_END_DECLS

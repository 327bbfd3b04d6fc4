/* um-safetensors.h — Hugging Face safetensors files and sharded directories.
 *
 * Files are memory-mapped, never read into RAM; every header field is checked
 * against the file before a tensor enters the table.
 */
#pragma once

#include <glib.h>

#include "um-tensor-table.h"

G_BEGIN_DECLS

/* Parses one safetensors image held in memory. The table does not own @data:
 * the caller keeps it alive as long as the table. @name is used in messages. */
UmTensorTable *um_safetensors_open_from_bytes (const guint8 *data,
                                               gsize         len,
                                               const char   *name,
                                               GError      **error);

/* Maps @path and adds its tensors to @table (which keeps the mapping). */
gboolean       um_safetensors_add_file (UmTensorTable *table,
                                        const char    *path,
                                        GError       **error);

/* A model directory: model.safetensors, or the shards listed by
 * model.safetensors.index.json. */
UmTensorTable *um_safetensors_open_dir (const char *dir,
                                        GError    **error);

G_END_DECLS

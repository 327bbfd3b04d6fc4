/* um-gguf.h — reading and writing llama.cpp GGUF files (versions 2 and 3).
 *
 * The reader maps the file, parses and validates all of it up front and
 * yields the engine's UmTensorTable. A GGUF file is untrusted input: every
 * count, length, offset and shape is checked against the bytes that are
 * actually there before anything is allocated or read, and every failure is a
 * GError in UM_ERROR whose message starts with the file's base name. After a
 * successful open every accessor is safe: values and tensors are known to lie
 * inside the file.
 *
 * Decisions a caller may care about:
 *  - Versions 2 and 3 are accepted (the layout is identical; v3 only added
 *    big-endian files, which are rejected). Version 1 used 32-bit counts and
 *    is rejected.
 *  - Arrays of arrays are rejected (UM_ERROR_UNSUPPORTED), as llama.cpp does.
 *  - Duplicate keys and duplicate tensor names are errors, as are keys that
 *    are empty, longer than 65535 bytes, not UTF-8 or contain NUL bytes.
 *  - A bool must be stored as 0 or 1.
 *  - Tensors must have 1 to 4 dimensions, no zero dimension, an element
 *    count that fits in int64, rows that are whole quantization blocks, an
 *    aligned offset, data inside the file and no overlap with another tensor.
 *  - general.alignment, when present, must be an integer that is a power of
 *    two between 1 and 16 MiB (the default is 32).
 *  - String values may hold any bytes; the NUL-terminated copies handed out
 *    end at the first embedded NUL, if any.
 *
 * Not thread-safe for concurrent mutation, but all getters may be called
 * from several threads at once (the lazily built string arrays use g_once).
 */
#pragma once

#include <glib.h>
#include <stdint.h>

#include "um-dtype.h"
#include "um-tensor-table.h"

G_BEGIN_DECLS

typedef struct _UmGguf UmGguf;

typedef enum {
  UM_GGUF_UINT8 = 0,
  UM_GGUF_INT8,
  UM_GGUF_UINT16,
  UM_GGUF_INT16,
  UM_GGUF_UINT32,
  UM_GGUF_INT32,
  UM_GGUF_FLOAT32,
  UM_GGUF_BOOL,
  UM_GGUF_STRING,
  UM_GGUF_ARRAY,
  UM_GGUF_UINT64,
  UM_GGUF_INT64,
  UM_GGUF_FLOAT64,
  UM_GGUF_N_TYPES
} UmGgufType;

#define UM_GGUF_DEFAULT_ALIGNMENT 32

/* "uint32", "string", ...; "invalid" for anything else. */
const char    *um_gguf_type_name (UmGgufType type);
/* Size in bytes of one value of a fixed-size type; 0 for string and array. */
gsize          um_gguf_type_size (UmGgufType type);

/* ggml tensor type ids <-> UmDType. Only the types the engine can run map;
 * um_gguf_ggml_type_name() knows the names of the others for messages. */
gboolean       um_gguf_dtype_from_ggml (guint32 ggml_type, UmDType *out);
guint32        um_gguf_dtype_to_ggml (UmDType dtype);
const char    *um_gguf_ggml_type_name (guint32 ggml_type);   /* NULL if unknown */

/* Maps @path read-only, parses and validates it. */
UmGguf        *um_gguf_open (const char *path, GError **error);
/* Parses a memory buffer. @data is borrowed: it must stay valid and
 * unchanged as long as the returned UmGguf and its tensor table live. @name
 * is used (as a base name) in error messages and UmTensorInfo.file. */
UmGguf        *um_gguf_open_from_bytes (const guint8 *data,
                                        gsize         len,
                                        const char   *name,
                                        GError      **error);
void           um_gguf_free (UmGguf *gguf);

const char    *um_gguf_file_name (UmGguf *gguf);      /* base name */
guint32        um_gguf_version (UmGguf *gguf);
guint32        um_gguf_alignment (UmGguf *gguf);
/* Bytes of header, metadata and tensor infos (before the alignment padding). */
guint64        um_gguf_header_size (UmGguf *gguf);
/* File offset of the tensor data section (tensor offsets are relative to it). */
guint64        um_gguf_data_offset (UmGguf *gguf);
/* The whole file as parsed. */
const guint8  *um_gguf_get_bytes (UmGguf *gguf, gsize *len);

guint          um_gguf_n_kv (UmGguf *gguf);
const char    *um_gguf_kv_key (UmGguf *gguf, guint i);
UmGgufType     um_gguf_kv_type (UmGguf *gguf, guint i);
gint           um_gguf_find_key (UmGguf *gguf, const char *key);   /* -1 if absent */

/* Typed getters: FALSE with a GError naming file and key when the key is
 * absent or its value cannot be converted. Integer getters accept any integer
 * type whose value fits; um_gguf_get_f64() also accepts integers. */
gboolean       um_gguf_get_u64 (UmGguf *g, const char *key, guint64 *out, GError **error);
gboolean       um_gguf_get_i64 (UmGguf *g, const char *key, gint64 *out, GError **error);
gboolean       um_gguf_get_u32 (UmGguf *g, const char *key, guint32 *out, GError **error);
gboolean       um_gguf_get_f64 (UmGguf *g, const char *key, double *out, GError **error);
gboolean       um_gguf_get_bool (UmGguf *g, const char *key, gboolean *out, GError **error);
/* NUL-terminated copy owned by @g. */
const char    *um_gguf_get_string (UmGguf *g, const char *key, GError **error);

/* Arrays. */
gboolean       um_gguf_get_array_info (UmGguf *g, const char *key, UmGgufType *elem_type,
                                       guint64 *count, GError **error);
/* NULL-terminated vector owned by @g, built on first use. */
const char * const *um_gguf_get_string_array (UmGguf *g, const char *key, guint64 *count,
                                              GError **error);
/* Raw little-endian elements of a numeric or bool array, inside the file
 * (not aligned: read with memcpy). NULL with an error for string arrays; for
 * an empty array returns a non-NULL pointer and *count = 0. */
const void    *um_gguf_get_array_data (UmGguf *g, const char *key, UmGgufType *elem_type,
                                       guint64 *count, GError **error);
/* Any integer element type, converted (each value must fit); free with
 * g_free. An empty array gives *out_copy = NULL, *count = 0 and TRUE. */
gboolean       um_gguf_get_int32_array (UmGguf *g, const char *key, gint32 **out_copy,
                                        guint64 *count, GError **error);
/* Any integer element type, each value converted to uint32 (negative or
 * larger values are an error naming the element); same conventions. */
gboolean       um_gguf_get_u32_array (UmGguf *g, const char *key, guint32 **out_copy,
                                      guint64 *count, GError **error);
/* float32 or float64 elements, converted to float; same conventions. */
gboolean       um_gguf_get_f32_array (UmGguf *g, const char *key, float **out_copy,
                                      guint64 *count, GError **error);

/* The tensors; borrowed (tensors point into the mapping, which the table
 * keeps alive). */
UmTensorTable *um_gguf_get_tensors (UmGguf *g);
/* Transfers the table to the caller: it keeps the mapping alive on its own,
 * so it may outlive @g (not for um_gguf_open_from_bytes(), whose buffer the
 * caller owns). Afterwards um_gguf_get_tensors() returns NULL. */
UmTensorTable *um_gguf_steal_tensors (UmGguf *g);

/* The KV's value exactly as encoded in the file: the u32 type field
 * followed by the value (what um_gguf_writer_copy_kv() copies). */
const guint8  *um_gguf_kv_raw (UmGguf *g, guint i, gsize *len);

/* Human-readable value for `inspect`: strings quoted and escaped (long ones
 * shortened), arrays summarised as type, count and the first few items. */
char          *um_gguf_kv_to_string (UmGguf *g, guint i);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmGguf, um_gguf_free)

/* ---- Writer (um-gguf-write.c) ------------------------------------------
 *
 * Writes llama.cpp-compatible GGUF v3: metadata first, then tensor infos,
 * then the tensor data, each tensor's data aligned to general.alignment
 * (always written; 32 unless changed) with zeroed padding, also after the
 * last tensor.
 *
 * Tensor data is streamed so a multi-GB model never has to be in memory:
 *   1. set KVs and um_gguf_writer_add_tensor_info() for every tensor;
 *   2. um_gguf_writer_begin(path) writes header, metadata and tensor infos
 *      to a temporary file next to @path;
 *   3. um_gguf_writer_write_tensor_data() gives the tensors' bytes in the
 *      order they were added, in one or several pieces per tensor;
 *   4. um_gguf_writer_finish() checks everything was written, fsyncs and
 *      renames the temporary file to @path atomically.
 * Freeing the writer before finish (or any failure) removes the temporary
 * file: @path is either untouched or the complete new file.
 *
 * Setting a key twice replaces its value in place. "general.alignment" is
 * owned by the writer and always written (as uint32, last unless placed
 * earlier): um_gguf_writer_set_alignment() changes the alignment,
 * um_gguf_writer_set_u32() of the key does the same and places the key, and
 * um_gguf_writer_copy_kv() of it only places the key (the source's value
 * describes the source's layout); other setters refuse the key.
 */
typedef struct _UmGgufWriter UmGgufWriter;

UmGgufWriter  *um_gguf_writer_new (void);
void           um_gguf_writer_free (UmGgufWriter *w);

/* A power of two from 1 to 16 MiB; only before um_gguf_writer_begin(). */
gboolean       um_gguf_writer_set_alignment (UmGgufWriter *w, guint32 alignment, GError **error);

void           um_gguf_writer_set_u8     (UmGgufWriter *w, const char *key, guint8 value);
void           um_gguf_writer_set_i8     (UmGgufWriter *w, const char *key, gint8 value);
void           um_gguf_writer_set_u16    (UmGgufWriter *w, const char *key, guint16 value);
void           um_gguf_writer_set_i16    (UmGgufWriter *w, const char *key, gint16 value);
void           um_gguf_writer_set_u32    (UmGgufWriter *w, const char *key, guint32 value);
void           um_gguf_writer_set_i32    (UmGgufWriter *w, const char *key, gint32 value);
void           um_gguf_writer_set_u64    (UmGgufWriter *w, const char *key, guint64 value);
void           um_gguf_writer_set_i64    (UmGgufWriter *w, const char *key, gint64 value);
void           um_gguf_writer_set_f32    (UmGgufWriter *w, const char *key, float value);
void           um_gguf_writer_set_f64    (UmGgufWriter *w, const char *key, double value);
void           um_gguf_writer_set_bool   (UmGgufWriter *w, const char *key, gboolean value);
void           um_gguf_writer_set_string (UmGgufWriter *w, const char *key, const char *value);
/* A string with explicit length (may contain any bytes). */
void           um_gguf_writer_set_string_len (UmGgufWriter *w, const char *key,
                                              const char *value, gsize len);
void           um_gguf_writer_set_string_array (UmGgufWriter *w, const char *key,
                                                const char * const *strs, guint64 n);
/* @vals: @n values of @elem_type in host byte order (any type but string
 * and array; bools as one byte each, 0 or 1). */
void           um_gguf_writer_set_array (UmGgufWriter *w, const char *key, UmGgufType elem_type,
                                         const void *vals, guint64 n);
void           um_gguf_writer_set_i32_array (UmGgufWriter *w, const char *key,
                                             const void *vals, guint64 n);
void           um_gguf_writer_set_f32_array (UmGgufWriter *w, const char *key,
                                             const void *vals, guint64 n);
/* Copies a KV (any type, arrays included) from an open file. */
gboolean       um_gguf_writer_copy_kv (UmGgufWriter *w, UmGguf *src, const char *key,
                                       GError **error);
/* Copies every KV of @src except general.alignment. */
gboolean       um_gguf_writer_copy_all_kv (UmGgufWriter *w, UmGguf *src, GError **error);

/* @shape outermost first, like UmTensorInfo. Names are limited to 63 bytes
 * (llama.cpp's GGML_MAX_NAME). Returns the tensor's size in bytes through
 * @n_bytes (may be NULL). */
gboolean       um_gguf_writer_add_tensor_info (UmGgufWriter  *w,
                                               const char    *name,
                                               UmDType        dtype,
                                               guint          n_dims,
                                               const guint64 *shape,
                                               guint64       *n_bytes,
                                               GError       **error);
gboolean       um_gguf_writer_begin (UmGgufWriter *w, const char *path, GError **error);
/* Appends @len bytes to the current tensor (the first one not yet complete);
 * a piece never spans two tensors. */
gboolean       um_gguf_writer_write_tensor_data (UmGgufWriter *w, const void *data,
                                                 gsize len, GError **error);
gboolean       um_gguf_writer_finish (UmGgufWriter *w, GError **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmGgufWriter, um_gguf_writer_free)

G_END_DECLS

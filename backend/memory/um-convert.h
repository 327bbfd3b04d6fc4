/* um-convert.h — the converted-weight cache: a model quantized (and maybe
 * pruned) at load time is written once as a GGUF under
 * $XDG_CACHE_HOME/unmask/converted/ and reused while its source is
 * unchanged.
 *
 * A cache file is named <model>-<TYPE>[-p<H>h<F>f]-<16 hex of its key>.gguf
 * (H and F: the pruning ratios in percent) and carries its full key in the
 * metadata (unmask.converted.key), with the source path
 * (unmask.converted.source) and type (unmask.converted.type). A file is
 * only reused when it parses as a whole (so a truncated one is rewritten),
 * its key matches and its tensors are the ones um_quantize_plan_tensors()
 * predicts.
 *
 * Where the default folder cannot be created or written, files go to
 * g_get_tmp_dir()/unmask-converted/ instead; the default-folder calls
 * (@dir NULL) of list and remove cover that folder too. An explicit @dir is
 * used as given, without fallback.
 *
 * Writing a cache file needs the writer (um-quantize.h), which is in the
 * engine: um_convert_model () is there (um-convert-model.h), built on the
 * cache's calls below. */
#pragma once

#include <gio/gio.h>

#include "um-model.h"
#include "um-quantize-plan.h"

G_BEGIN_DECLS

/* g_get_user_cache_dir()/unmask/converted */
char     *um_convert_cache_dir (void);

/* Hex SHA-256 of the cache format version, the source's identity (absolute
 * path; name, size and modification time of every file backing it: the
 * .gguf, or the folder's *.safetensors and *.json), the type and the pruning
 * ratios. A file that cannot be examined counts as missing (the conversion
 * itself then reports the error). */
char     *um_convert_cache_key (const UmModel           *src,
                                const UmQuantizeOptions *opts);

/* The file a conversion writes, with header and metadata, predicted from
 * shapes alone (an upper bound within a few KiB). */
gboolean  um_convert_predict_bytes (const UmModel           *src,
                                    const UmQuantizeOptions *opts,
                                    guint64                 *bytes,
                                    GError                 **error);

typedef struct {
  char    *path;
  guint64  bytes;
  gint64   mtime;          /* seconds since the epoch */
  char    *source;         /* NULL when unreadable or not made by unmask */
  char    *type;           /* NULL likewise: such a file is only good to remove */
  double   prune_heads;
  double   prune_ffn;
  gboolean partial;        /* a NAME.XXXXXX.part file: a conversion not finished */
  gboolean in_progress;    /* partial and still being written (its writer holds it) */
} UmConvertedEntry;

void      um_converted_entry_free (UmConvertedEntry *entry);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmConvertedEntry, um_converted_entry_free)

/* The valid cached conversion of @src for @opts, if there is one (what
 * um_convert_model () would return without converting), else NULL. */
char       *um_convert_lookup (const UmModel *src, const UmQuantizeOptions *opts, const char *cache_dir);

/* The .gguf files of the cache folder (UmConvertedEntry, sorted by path),
 * read from their metadata only; files that do not parse are listed with
 * source and type NULL. The .part files of conversions are listed too
 * (partial), with whether one is still being written. A missing folder is
 * an empty list. @dir NULL: the default folder and the temporary one. */
GPtrArray *um_convert_cache_list (const char *dir,
                                  GError    **error);

/* Removes the .part files no conversion is writing any more (a killed one
 * left them), unmodified for at least @min_age_seconds; returns how many. */
guint      um_convert_cache_clean_partial (const char *dir,
                                           gint64      min_age_seconds);

/* Deletes one file of the cache folder; refuses (UM_ERROR_INVALID_PARAM)
 * any path that is not a .gguf or .part file directly inside it, and a
 * .part file a conversion is still writing. */
gboolean   um_convert_cache_remove (const char *dir,
                                    const char *path,
                                    GError    **error);

/* ---- For the converter (um-convert-model.c) ------------------------------ */

/* The keys of a cache file's metadata (see above). */
#define UM_CONVERT_KEY_KEY    "unmask.converted.key"
#define UM_CONVERT_SOURCE_KEY "unmask.converted.source"
#define UM_CONVERT_TYPE_KEY   "unmask.converted.type"

/* A .part file unlocked and untouched this long has no writer: the lock is
 * the test, the age covers the moment between creating and locking it. */
#define UM_CONVERT_STALE_PART_SECONDS 60

/* The folders a call with @dir looks in, canonical: @dir alone, or the
 * default one and its fallback. */
GPtrArray *um_convert_cache_dirs (const char *dir);

/* The cache file's name (no folder) for @src, @opts (with a type) and @key. */
char      *um_convert_cache_file_name (const UmModel           *src,
                                       const UmQuantizeOptions *opts,
                                       const char              *key);

/* TRUE if @path is a complete cache file for @key holding the tensors of
 * @plan (UmPlannedTensor). Anything else (absent, truncated, foreign,
 * stale) is to be rewritten. */
gboolean   um_convert_cache_file_valid (const char   *path,
                                        const char   *key,
                                        const GArray *plan);

/* Creates @dir if needed and checks a file can be created in it. */
gboolean   um_convert_dir_writable (const char *dir);

/* FALSE (UM_ERROR_IO, naming @what) when @dir's file system says it has
 * less than @need bytes free; one that does not say passes. */
gboolean   um_convert_check_free_space (const char *dir,
                                        guint64     need,
                                        const char *what,
                                        GError    **error);

G_END_DECLS

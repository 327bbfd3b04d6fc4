/* um-convert-model.h — making a converted-weight file: @src converted with
 * the writer (um-quantize.h) into the cache of um-convert.h, or the cache's
 * file when it is there. The engine's because the writer is; the cache
 * itself (key, names, lookup, listing, cleaning) is memory's. */
#pragma once

#include <gio/gio.h>

#include "um-convert.h"
#include "um-quantize.h"

G_BEGIN_DECLS

/* Returns the path of @src converted with @opts, from the cache when it is
 * there (*was_cached TRUE, the file untouched), else written now (after
 * checking the folder's free space against the predicted size). @cache_dir
 * NULL: um_convert_cache_dir(), falling back to the temporary folder. */
char     *um_convert_model (UmModel                 *src,
                            const UmQuantizeOptions *opts,
                            const char              *cache_dir,
                            UmQuantizeProgress       progress,
                            gpointer                 user_data,
                            GCancellable            *cancellable,
                            gboolean                *was_cached,
                            GError                 **error);

G_END_DECLS

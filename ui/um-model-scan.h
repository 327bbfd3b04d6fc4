/* um-model-scan.h — models already on this computer: the Hugging Face cache
 * ($HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub) and recently
 * used paths, each with its size and whether Unmask can load it. GLib only. */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

typedef struct {
  char    *path;
  char    *name;       /* "GSAI-ML/LLaDA-8B-Instruct", or the file name */
  char    *format;     /* "safetensors" or "gguf" */
  char    *family;     /* um_arch_info ()->name: "LLaDA", "Dream", …; NULL when unknown */
  guint64  size;       /* bytes of weights on disk */
  gboolean loadable;
  char    *problem;    /* why not, when not loadable */
  gboolean recent;
} UmModelEntry;

void     um_model_entry_free (UmModelEntry *entry);

/* Checks one path without loading weights (configuration, tensor headers,
 * GGUF metadata); fills an entry. */
UmModelEntry *um_model_probe (const char *path);

/* The Hugging Face hub cache folder in use (may not exist). */
char    *um_model_scan_hf_cache_dir (void);

/* Recent paths first (marked recent), then the cache, without duplicates.
 * Returns UmModelEntry* with a free func. */
GPtrArray *um_model_scan (const char * const *recent, GCancellable *cancellable);
void       um_model_scan_async (const char * const *recent, GCancellable *cancellable,
                                GAsyncReadyCallback callback, gpointer user_data);
GPtrArray *um_model_scan_finish (GAsyncResult *result, GError **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmModelEntry, um_model_entry_free)

G_END_DECLS

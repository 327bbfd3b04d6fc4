#include "config.h"

#include "um-model-scan.h"

#include <glib/gi18n.h>

#include "um-gguf.h"
#include "um-model-config.h"
#include "um-safetensors.h"

#include <glib/gstdio.h>
#include <string.h>

void
um_model_entry_free (UmModelEntry *e)
{
  if (e == NULL)
    return;
  g_free (e->path);
  g_free (e->name);
  g_free (e->format);
  g_free (e->family);
  g_free (e->problem);
  g_free (e);
}

/* A Hugging Face folder's tokenizer: tokenizer.json, or the slow BPE pair
 * vocab.json + merges.txt that real Dream checkpoints ship instead. */
static gboolean
has_tokenizer (const char *dir)
{
  g_autofree char *json = g_build_filename (dir, "tokenizer.json", NULL);
  g_autofree char *vocab = g_build_filename (dir, "vocab.json", NULL);
  g_autofree char *merges = g_build_filename (dir, "merges.txt", NULL);

  return g_file_test (json, G_FILE_TEST_EXISTS)
         || (g_file_test (vocab, G_FILE_TEST_EXISTS) && g_file_test (merges, G_FILE_TEST_EXISTS));
}

static guint64
file_size (const char *path)
{
  GStatBuf st;
  /* g_stat follows the cache's symlinks to the blobs. */
  return g_stat (path, &st) == 0 ? (guint64) st.st_size : 0;
}

UmModelEntry *
um_model_probe (const char *path)
{
  UmModelEntry *e = g_new0 (UmModelEntry, 1);
  g_autoptr(GError) error = NULL;

  e->path = g_strdup (path);
  e->name = g_path_get_basename (path);
  if (g_file_test (path, G_FILE_TEST_IS_DIR))
    {
      UmModelConfig cfg;
      g_autoptr(UmTensorTable) table = NULL;

      e->format = g_strdup ("safetensors");
      if (!um_model_config_load_hf (&cfg, path, &error))
        {
          e->problem = g_strdup (error->message);
          return e;
        }
      e->family = g_strdup (um_arch_info (cfg.arch)->name);
      if (!has_tokenizer (path))
        e->problem = g_strdup (_("the tokenizer is missing (tokenizer.json, or vocab.json and merges.txt)"));
      else if ((table = um_safetensors_open_dir (path, &error)) == NULL)
        e->problem = g_strdup (error->message);
      else
        {
          for (guint i = 0; i < um_tensor_table_size (table); i++)
            e->size += um_tensor_table_get (table, i)->n_bytes;
          e->loadable = TRUE;
        }
    }
  else
    {
      g_autoptr(UmGguf) g = NULL;
      const char *arch;
      UmArch family;

      e->format = g_strdup ("gguf");
      e->size = file_size (path);
      if ((g = um_gguf_open (path, &error)) == NULL)
        {
          e->problem = g_strdup (error->message);
          return e;
        }
      arch = um_gguf_get_string (g, "general.architecture", NULL);
      if (!um_arch_from_gguf (arch, &family))
        /* Translators: %s is a GGUF architecture, e.g. "llama" */
        e->problem = g_strdup_printf (_("a “%s” model, not a diffusion model Unmask runs"), arch ? arch : "?");
      else
        {
          e->family = g_strdup (um_arch_info (family)->name);
          e->loadable = TRUE;
        }
    }
  return e;
}

char *
um_model_scan_hf_cache_dir (void)
{
  const char *hub = g_getenv ("HF_HUB_CACHE");
  const char *home = g_getenv ("HF_HOME");

  if (hub != NULL && *hub)
    return g_strdup (hub);
  if (home != NULL && *home)
    return g_build_filename (home, "hub", NULL);
  return g_build_filename (g_get_user_cache_dir (), "huggingface", "hub", NULL);
}

/* models--ORG--NAME → ORG/NAME */
static char *
repo_name (const char *dir_name)
{
  g_auto(GStrv) parts = g_strsplit (dir_name + strlen ("models--"), "--", -1);
  return g_strjoinv ("/", parts);
}

static void
scan_snapshot (GPtrArray *out, GHashTable *seen, const char *snapshot, const char *repo)
{
  g_autofree char *config = g_build_filename (snapshot, "config.json", NULL);
  GDir *dir;
  const char *name;

  if (g_file_test (config, G_FILE_TEST_EXISTS) && !g_hash_table_contains (seen, snapshot))
    {
      UmModelEntry *e = um_model_probe (snapshot);
      g_free (e->name);
      e->name = g_strdup (repo);
      g_hash_table_add (seen, g_strdup (snapshot));
      g_ptr_array_add (out, e);
    }
  /* GGUF repositories hold one or more .gguf files. */
  if ((dir = g_dir_open (snapshot, 0, NULL)) == NULL)
    return;
  while ((name = g_dir_read_name (dir)) != NULL)
    if (g_str_has_suffix (name, ".gguf"))
      {
        g_autofree char *path = g_build_filename (snapshot, name, NULL);
        UmModelEntry *e;
        if (g_hash_table_contains (seen, path))
          continue;
        e = um_model_probe (path);
        g_free (e->name);
        e->name = g_strdup_printf ("%s · %s", repo, name);
        g_hash_table_add (seen, g_strdup (path));
        g_ptr_array_add (out, e);
      }
  g_dir_close (dir);
}

GPtrArray *
um_model_scan (const char * const *recent, GCancellable *cancellable)
{
  GPtrArray *out = g_ptr_array_new_with_free_func ((GDestroyNotify) um_model_entry_free);
  g_autoptr(GHashTable) seen = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  g_autofree char *hub = um_model_scan_hf_cache_dir ();
  GDir *dir;
  const char *name;

  for (guint i = 0; recent != NULL && recent[i] != NULL; i++)
    {
      UmModelEntry *e;
      if (!g_file_test (recent[i], G_FILE_TEST_EXISTS) || g_hash_table_contains (seen, recent[i]))
        continue;
      e = um_model_probe (recent[i]);
      e->recent = TRUE;
      g_hash_table_add (seen, g_strdup (recent[i]));
      g_ptr_array_add (out, e);
    }

  if ((dir = g_dir_open (hub, 0, NULL)) == NULL)
    return out;
  while ((name = g_dir_read_name (dir)) != NULL && !g_cancellable_is_cancelled (cancellable))
    {
      g_autofree char *snapshots = NULL;
      g_autofree char *repo = NULL;
      GDir *sd;
      const char *snap;

      if (!g_str_has_prefix (name, "models--"))
        continue;
      repo = repo_name (name);
      snapshots = g_build_filename (hub, name, "snapshots", NULL);
      if ((sd = g_dir_open (snapshots, 0, NULL)) == NULL)
        continue;
      while ((snap = g_dir_read_name (sd)) != NULL)
        {
          g_autofree char *path = g_build_filename (snapshots, snap, NULL);
          scan_snapshot (out, seen, path, repo);
        }
      g_dir_close (sd);
    }
  g_dir_close (dir);
  return out;
}

static void
scan_thread (GTask *task, gpointer source, gpointer data, GCancellable *cancellable)
{
  g_task_return_pointer (task, um_model_scan (data, cancellable), (GDestroyNotify) g_ptr_array_unref);
}

void
um_model_scan_async (const char * const *recent, GCancellable *cancellable,
                     GAsyncReadyCallback callback, gpointer user_data)
{
  g_autoptr(GTask) task = g_task_new (NULL, cancellable, callback, user_data);
  g_task_set_task_data (task, g_strdupv ((char **) recent), (GDestroyNotify) g_strfreev);
  g_task_run_in_thread (task, scan_thread);
}

GPtrArray *
um_model_scan_finish (GAsyncResult *result, GError **error)
{
  return g_task_propagate_pointer (G_TASK (result), error);
}

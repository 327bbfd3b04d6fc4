/* Finding models on disk: a fake Hugging Face cache with a safetensors
 * snapshot, a GGUF repository, a broken snapshot and a non-LLaDA GGUF, plus
 * recent paths first and without duplicates. */
#include <glib/gstdio.h>
#include <string.h>

#include "um-model-scan.h"
#include "um-test-util.h"

static char *
make_snapshot (const char *hub, const char *repo_dir)
{
  char *snap = g_build_filename (hub, repo_dir, "snapshots", "0123abcd", NULL);
  g_mkdir_with_parents (snap, 0755);
  return snap;
}

static const UmModelEntry *
find (GPtrArray *entries, const char *name)
{
  for (guint i = 0; i < entries->len; i++)
    {
      const UmModelEntry *e = g_ptr_array_index (entries, i);
      if (g_str_equal (e->name, name))
        return e;
    }
  return NULL;
}

static void
test_scan (void)
{
  g_autofree char *root = um_test_mkdtemp ();
  g_autofree char *hub = g_build_filename (root, "hub", NULL);
  g_autofree char *tiny = um_test_data_path ("tiny-llada");
  g_autofree char *gguf_src = um_test_data_path ("tiny-llada-q4_0.gguf");
  g_autofree char *snap1 = make_snapshot (hub, "models--GSAI-ML--LLaDA-Tiny");
  g_autofree char *snap2 = make_snapshot (hub, "models--someone--LLaDA-GGUF");
  g_autofree char *snap3 = make_snapshot (hub, "models--broken--Model");
  g_autofree char *gguf = g_build_filename (snap2, "llada-q4_0.gguf", NULL);
  g_autofree char *other = g_build_filename (snap2, "not-llada.gguf", NULL);
  g_autofree char *broken_cfg = g_build_filename (snap3, "config.json", NULL);
  g_autofree char *bytes = NULL;
  g_autoptr(GPtrArray) entries = NULL;
  const UmModelEntry *e;
  gsize len;
  char *at;

  um_test_copy_dir (tiny, snap1);
  g_assert_true (g_file_get_contents (gguf_src, &bytes, &len, NULL));
  um_test_write_file (gguf, bytes, len);
  at = memmem (bytes, len, "llada", 5);
  memcpy (at, "llama", 5);
  um_test_write_file (other, bytes, len);
  um_test_write_file (broken_cfg, "{ not json", -1);

  g_setenv ("HF_HUB_CACHE", hub, TRUE);
  {
    g_autofree char *dir = um_model_scan_hf_cache_dir ();
    g_assert_cmpstr (dir, ==, hub);
  }
  {
    const char *recent[] = { gguf, "/does/not/exist", NULL };
    entries = um_model_scan (recent, NULL);
  }

  /* The recent GGUF comes first and is not listed twice. */
  g_assert_cmpuint (entries->len, ==, 4);
  e = g_ptr_array_index (entries, 0);
  g_assert_true (e->recent);
  g_assert_cmpstr (e->path, ==, gguf);
  g_assert_true (e->loadable);

  e = find (entries, "GSAI-ML/LLaDA-Tiny");
  g_assert_nonnull (e);
  g_assert_true (e->loadable);
  g_assert_cmpstr (e->format, ==, "safetensors");
  g_assert_cmpuint (e->size, ==, 640256);

  e = find (entries, "someone/LLaDA-GGUF · not-llada.gguf");
  g_assert_nonnull (e);
  g_assert_false (e->loadable);
  g_assert_nonnull (strstr (e->problem, "llama"));

  e = find (entries, "broken/Model");
  g_assert_nonnull (e);
  g_assert_false (e->loadable);
  g_assert_nonnull (strstr (e->problem, "config.json"));

  g_unsetenv ("HF_HUB_CACHE");
  um_test_rmtree (root);
}

static void
test_default_cache_dir (void)
{
  g_autofree char *dir = NULL;
  g_unsetenv ("HF_HUB_CACHE");
  g_setenv ("HF_HOME", "/opt/hf", TRUE);
  dir = um_model_scan_hf_cache_dir ();
  g_assert_cmpstr (dir, ==, "/opt/hf/hub");
  g_unsetenv ("HF_HOME");
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/model-scan/scan", test_scan);
  g_test_add_func ("/model-scan/default-cache-dir", test_default_cache_dir);
  return g_test_run ();
}

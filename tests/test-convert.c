/* The converted-weight cache and structured pruning: cache hits leave the
 * file untouched, keys follow type and ratios, broken files are rewritten,
 * list/remove stay inside the folder; what um_quantize_plan_tensors ()
 * predicts is what is written; pruning drops exactly the smallest units,
 * permutes Q/K within the kept heads and gives the same function as the
 * source with those units zeroed; per-layer counts in GGUF metadata are
 * validated. */
#include <fcntl.h>
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "um-backend.h"
#include "um-convert-model.h"
#include "um-error.h"
#include "um-forward.h"
#include "um-gguf.h"
#include "um-quantize.h"
#include "um-ref-kernels.h"
#include "um-test-util.h"

static UmModel *
load_model (const char *path)
{
  g_autoptr(GError) error = NULL;
  UmModel *model = um_model_load (path, NULL, &error);
  g_assert_no_error (error);
  g_assert_nonnull (model);
  return model;
}

static GStatBuf
stat_of (const char *path)
{
  GStatBuf st;
  g_assert_cmpint (g_stat (path, &st), ==, 0);
  return st;
}

/* ---- the cache ------------------------------------------------------------ */

static void
test_cache_hit (void)
{
  g_autofree char *src = um_test_data_path ("tiny-llada");
  g_autofree char *tmp = um_test_mkdtemp ();
  g_autofree char *dir = g_build_filename (tmp, "cache", "converted", NULL);
  g_autoptr(UmModel) model = load_model (src);
  g_autoptr(GError) error = NULL;
  UmQuantizeOptions opts = { "Q8_0", 0, 0 };
  g_autofree char *path = NULL, *again = NULL, *key = NULL, *base = NULL, *abs = NULL;
  g_autoptr(UmGguf) g = NULL;
  gboolean cached = TRUE;
  GStatBuf a, b;

  path = um_convert_model (model, &opts, dir, NULL, NULL, NULL, &cached, &error);
  g_assert_no_error (error);
  g_assert_false (cached);
  g_assert_true (g_str_has_prefix (path, dir));
  key = um_convert_cache_key (model, &opts);
  g_assert_cmpuint (strlen (key), ==, 64);
  base = g_path_get_basename (path);
  {
    g_autofree char *want = g_strdup_printf ("tiny-llada-Q8_0-%.16s.gguf", key);
    g_assert_cmpstr (base, ==, want);
  }
  g = um_gguf_open (path, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (um_gguf_get_string (g, "unmask.converted.key", &error), ==, key);
  abs = g_canonicalize_filename (src, NULL);
  g_assert_cmpstr (um_gguf_get_string (g, "unmask.converted.source", &error), ==, abs);
  g_assert_cmpstr (um_gguf_get_string (g, "unmask.converted.type", &error), ==, "Q8_0");
  g_assert_cmpint (um_gguf_find_key (g, "unmask.prune.heads"), <, 0);
  /* The same tensors as the llama.cpp-made file. */
  {
    g_autofree char *theirs_path = um_test_data_path ("tiny-llada-q8_0.gguf");
    g_autoptr(UmGguf) theirs = um_gguf_open (theirs_path, &error);
    UmTensorTable *tt = um_gguf_get_tensors (theirs), *ours = um_gguf_get_tensors (g);
    g_assert_cmpuint (um_tensor_table_size (tt), ==, um_tensor_table_size (ours));
    for (guint i = 0; i < um_tensor_table_size (tt); i++)
      {
        const UmTensorInfo *want = um_tensor_table_get (tt, i);
        const UmTensorInfo *got = um_tensor_table_lookup (ours, want->name);
        g_assert_nonnull (got);
        g_assert_cmpuint (got->n_bytes, ==, want->n_bytes);
        g_assert_true (memcmp (got->data, want->data, got->n_bytes) == 0);
      }
  }
  g_clear_pointer (&g, um_gguf_free);

  a = stat_of (path);
  /* Past the file system's timestamp granularity, so a rewrite would show. */
  g_usleep (20000);
  again = um_convert_model (model, &opts, dir, NULL, NULL, NULL, &cached, &error);
  g_assert_no_error (error);
  g_assert_true (cached);
  g_assert_cmpstr (again, ==, path);
  b = stat_of (path);
  g_assert_cmpuint (a.st_ino, ==, b.st_ino);
  g_assert_cmpint (a.st_mtim.tv_sec, ==, b.st_mtim.tv_sec);
  g_assert_cmpint (a.st_mtim.tv_nsec, ==, b.st_mtim.tv_nsec);
  g_assert_cmpint (a.st_size, ==, b.st_size);

  /* The converted file runs. */
  {
    g_autoptr(UmModel) conv = load_model (path);
    g_assert_cmpuint (conv->cfg.n_layers, ==, model->cfg.n_layers);
    g_assert_cmpint (conv->layers[0].wq.dtype, ==, UM_DTYPE_Q8_0);
  }
  um_test_rmtree (tmp);
}

static void
test_cache_key (void)
{
  g_autofree char *fixture = um_test_data_path ("tiny-llada");
  g_autofree char *tmp = um_test_mkdtemp ();
  g_autofree char *src = g_build_filename (tmp, "model", NULL);
  g_autofree char *weights = g_build_filename (src, "model.safetensors", NULL);
  g_autoptr(UmModel) model = NULL;
  const UmQuantizeOptions q8 = { "Q8_0", 0, 0 }, q8_lower = { "q8_0", 0, 0 }, q4 = { "Q4_0", 0, 0 };
  const UmQuantizeOptions ph = { "Q8_0", 0.25, 0 }, pf = { "Q8_0", 0, 0.125 }, ph2 = { "Q8_0", 0.2, 0 };
  g_autofree char *k = NULL, *k_lower = NULL, *k4 = NULL, *kh = NULL, *kf = NULL, *kh2 = NULL, *k_touched = NULL;
  struct timeval times[2] = { { 1000000000, 0 }, { 1000000000, 0 } };

  um_test_copy_dir (fixture, src);
  model = load_model (src);
  k = um_convert_cache_key (model, &q8);
  k_lower = um_convert_cache_key (model, &q8_lower);
  k4 = um_convert_cache_key (model, &q4);
  kh = um_convert_cache_key (model, &ph);
  kf = um_convert_cache_key (model, &pf);
  kh2 = um_convert_cache_key (model, &ph2);
  g_assert_cmpstr (k, ==, k_lower);
  g_assert_cmpstr (k, !=, k4);
  g_assert_cmpstr (k, !=, kh);
  g_assert_cmpstr (k, !=, kf);
  g_assert_cmpstr (kh, !=, kf);
  g_assert_cmpstr (kh, !=, kh2);
  for (const char *p = k; *p; p++)
    g_assert_true (g_ascii_isxdigit (*p) && !g_ascii_isupper (*p));
  {
    g_autofree char *again = um_convert_cache_key (model, &q8);
    g_assert_cmpstr (k, ==, again);
  }
  /* A changed source file (here only its modification time) is another
   * source. */
  g_assert_cmpint (utimes (weights, times), ==, 0);
  k_touched = um_convert_cache_key (model, &q8);
  g_assert_cmpstr (k, !=, k_touched);
  um_test_rmtree (tmp);
}

static void
test_cache_list_remove (void)
{
  g_autofree char *src = um_test_data_path ("tiny-llada");
  g_autofree char *tmp = um_test_mkdtemp ();
  g_autofree char *dir = g_build_filename (tmp, "converted", NULL);
  g_autofree char *other = g_build_filename (tmp, "elsewhere.gguf", NULL);
  g_autofree char *junk = g_build_filename (dir, "junk.gguf", NULL);
  g_autofree char *part = g_build_filename (dir, "x.gguf.ABC123.part", NULL);
  g_autofree char *sneaky = NULL, *p8 = NULL, *p4 = NULL, *abs = NULL;
  g_autoptr(UmModel) model = load_model (src);
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) list = NULL;
  const UmQuantizeOptions q8 = { "Q8_0", 0, 0 }, q4 = { "Q4_0", 0.25, 0.125 };

  /* An empty (absent) folder lists as empty. */
  list = um_convert_cache_list (dir, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (list->len, ==, 0);
  g_clear_pointer (&list, g_ptr_array_unref);

  p8 = um_convert_model (model, &q8, dir, NULL, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  p4 = um_convert_model (model, &q4, dir, NULL, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (p8, !=, p4);
  g_assert_nonnull (strstr (p4, "-Q4_0-p25h12.5f-"));
  um_test_write_file (junk, "not a gguf", -1);
  um_test_write_file (part, "in progress", -1);
  um_test_write_file (other, "outside", -1);

  /* The .part of a conversion that was stopped is listed too (it can be
   * gigabytes), as partial and not in progress: nothing holds it. */
  list = um_convert_cache_list (dir, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (list->len, ==, 4);
  abs = g_canonicalize_filename (src, NULL);
  for (guint i = 0; i < list->len; i++)
    {
      const UmConvertedEntry *e = g_ptr_array_index (list, i);
      GStatBuf st = stat_of (e->path);
      g_assert_cmpuint (e->bytes, ==, st.st_size);
      g_assert_cmpint (e->mtime, ==, st.st_mtime);
      g_assert_cmpint (e->partial, ==, strcmp (e->path, part) == 0);
      g_assert_false (e->in_progress);
      if (strcmp (e->path, junk) == 0 || strcmp (e->path, part) == 0)
        {
          g_assert_null (e->type);
          g_assert_null (e->source);
        }
      else if (strcmp (e->path, p8) == 0)
        {
          g_assert_cmpstr (e->type, ==, "Q8_0");
          g_assert_cmpstr (e->source, ==, abs);
          g_assert_cmpfloat (e->prune_heads, ==, 0.0);
          g_assert_cmpfloat (e->prune_ffn, ==, 0.0);
        }
      else
        {
          g_assert_cmpstr (e->path, ==, p4);
          g_assert_cmpstr (e->type, ==, "Q4_0");
          /* Exact: binary fractions written and read back. */
          g_assert_cmpfloat (e->prune_heads, ==, 0.25);
          g_assert_cmpfloat (e->prune_ffn, ==, 0.125);
        }
    }
  g_clear_pointer (&list, g_ptr_array_unref);

  /* Outside the folder, not a .gguf, a sub-folder trick: refused. */
  sneaky = g_build_filename (dir, "..", "elsewhere.gguf", NULL);
  g_assert_false (um_convert_cache_remove (dir, other, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  g_clear_error (&error);
  g_assert_false (um_convert_cache_remove (dir, sneaky, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  g_clear_error (&error);
  g_assert_false (um_convert_cache_remove (dir, dir, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  g_clear_error (&error);
  g_assert_true (g_file_test (other, G_FILE_TEST_EXISTS));
  g_assert_true (g_file_test (part, G_FILE_TEST_EXISTS));

  g_assert_true (um_convert_cache_remove (dir, junk, &error));
  g_assert_no_error (error);
  g_assert_true (um_convert_cache_remove (dir, p4, &error));
  g_assert_no_error (error);
  g_assert_false (g_file_test (p4, G_FILE_TEST_EXISTS));
  g_assert_false (um_convert_cache_remove (dir, p4, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_IO);
  g_clear_error (&error);
  g_assert_true (um_convert_cache_remove (dir, part, &error));
  g_assert_no_error (error);
  list = um_convert_cache_list (dir, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (list->len, ==, 1);
  g_assert_cmpstr (((UmConvertedEntry *) g_ptr_array_index (list, 0))->path, ==, p8);
  um_test_rmtree (tmp);
}

/* A killed conversion leaves NAME.gguf.XXXXXX.part behind: listed, removed
 * by the next conversion once stale, never while a writer holds it. */
static void
test_cache_partial (void)
{
  g_autofree char *src = um_test_data_path ("tiny-llada");
  g_autofree char *tmp = um_test_mkdtemp ();
  g_autofree char *dir = g_build_filename (tmp, "converted", NULL);
  g_autofree char *stale = g_build_filename (dir, "m-Q8_0-0123.gguf.AbC123.part", NULL);
  g_autofree char *fresh = g_build_filename (dir, "m-Q8_0-0123.gguf.XyZ789.part", NULL);
  g_autofree char *busy = g_build_filename (dir, "m-Q4_0-4567.gguf.QqQ000.part", NULL);
  g_autofree char *path = NULL;
  g_autoptr(UmModel) model = load_model (src);
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) list = NULL;
  const UmQuantizeOptions q8 = { "Q8_0", 0, 0 };
  struct timeval old[2] = { { 1000000000, 0 }, { 1000000000, 0 } };
  int held;

  g_assert_cmpint (g_mkdir_with_parents (dir, 0700), ==, 0);
  um_test_write_file (stale, "killed", -1);
  um_test_write_file (fresh, "just created", -1);
  um_test_write_file (busy, "being written", -1);
  g_assert_cmpint (utimes (stale, old), ==, 0);
  g_assert_cmpint (utimes (busy, old), ==, 0);
  /* A writer holds its file as um_gguf_writer does. */
  held = open (busy, O_RDWR | O_CLOEXEC);
  g_assert_cmpint (held, >=, 0);
  g_assert_cmpint (flock (held, LOCK_EX | LOCK_NB), ==, 0);

  list = um_convert_cache_list (dir, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (list->len, ==, 3);
  for (guint i = 0; i < list->len; i++)
    {
      const UmConvertedEntry *e = g_ptr_array_index (list, i);
      g_assert_true (e->partial);
      g_assert_cmpint (e->in_progress, ==, strcmp (e->path, busy) == 0);
    }
  g_clear_pointer (&list, g_ptr_array_unref);
  /* Never removed while written. */
  g_assert_false (um_convert_cache_remove (dir, busy, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  g_clear_error (&error);

  /* A load that converts cleans up: the stale one goes, the one just
   * created (its writer may not have locked it yet) and the held one stay. */
  path = um_convert_model (model, &q8, dir, NULL, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_false (g_file_test (stale, G_FILE_TEST_EXISTS));
  g_assert_true (g_file_test (fresh, G_FILE_TEST_EXISTS));
  g_assert_true (g_file_test (busy, G_FILE_TEST_EXISTS));

  /* Released: now it is stale too. */
  close (held);
  g_assert_cmpuint (um_convert_cache_clean_partial (dir, 60), ==, 1);
  g_assert_false (g_file_test (busy, G_FILE_TEST_EXISTS));
  g_assert_true (g_file_test (fresh, G_FILE_TEST_EXISTS));
  g_assert_cmpuint (um_convert_cache_clean_partial (dir, 0), ==, 1);
  list = um_convert_cache_list (dir, &error);
  g_assert_cmpuint (list->len, ==, 1);
  g_assert_cmpstr (((UmConvertedEntry *) g_ptr_array_index (list, 0))->path, ==, path);
  um_test_rmtree (tmp);
}

static void
test_cache_broken_file (void)
{
  g_autofree char *src = um_test_data_path ("tiny-llada");
  g_autofree char *tmp = um_test_mkdtemp ();
  g_autoptr(UmModel) model = load_model (src);
  g_autoptr(GError) error = NULL;
  const UmQuantizeOptions opts = { "Q4_0", 0, 0 };
  g_autofree char *path = NULL, *again = NULL, *contents = NULL;
  gsize len;
  gboolean cached = TRUE;

  path = um_convert_model (model, &opts, tmp, NULL, NULL, NULL, &cached, &error);
  g_assert_no_error (error);
  g_assert_false (cached);
  g_file_get_contents (path, &contents, &len, &error);
  g_assert_no_error (error);

  /* Truncated (a crash of something else, a full disk): rewritten. */
  g_assert_cmpint (truncate (path, len / 2), ==, 0);
  again = um_convert_model (model, &opts, tmp, NULL, NULL, NULL, &cached, &error);
  g_assert_no_error (error);
  g_assert_false (cached);
  g_assert_cmpstr (again, ==, path);
  {
    g_autofree char *now = NULL;
    gsize now_len;
    g_file_get_contents (path, &now, &now_len, &error);
    g_assert_no_error (error);
    g_assert_cmpmem (now, now_len, contents, len);
  }
  g_clear_pointer (&again, g_free);

  /* Another file under the same name (a different key): rewritten too. */
  {
    g_autofree char *other = um_test_data_path ("tiny-llada-q4_0.gguf");
    g_autofree char *theirs = NULL;
    gsize theirs_len;
    g_file_get_contents (other, &theirs, &theirs_len, &error);
    g_assert_no_error (error);
    um_test_write_file (path, theirs, theirs_len);
  }
  again = um_convert_model (model, &opts, tmp, NULL, NULL, NULL, &cached, &error);
  g_assert_no_error (error);
  g_assert_false (cached);
  g_clear_pointer (&again, g_free);
  again = um_convert_model (model, &opts, tmp, NULL, NULL, NULL, &cached, &error);
  g_assert_no_error (error);
  g_assert_true (cached);
  um_test_rmtree (tmp);
}

/* The default folder cannot be created: the temporary folder is used. Run
 * in a subprocess, whose environment is set before GLib reads it. */
static void
test_cache_fallback (void)
{
  if (g_test_subprocess ())
    {
      g_autofree char *src = um_test_data_path ("tiny-llada");
      g_autoptr(UmModel) model = load_model (src);
      g_autoptr(GError) error = NULL;
      const UmQuantizeOptions opts = { "Q8_0", 0, 0 };
      g_autofree char *want = g_build_filename (g_get_tmp_dir (), "unmask-converted", NULL);
      g_autofree char *path = um_convert_model (model, &opts, NULL, NULL, NULL, NULL, NULL, &error);
      g_autofree char *parent = NULL;
      g_autoptr(GPtrArray) list = NULL;

      g_assert_no_error (error);
      parent = g_path_get_dirname (path);
      g_assert_cmpstr (parent, ==, want);
      list = um_convert_cache_list (NULL, &error);
      g_assert_no_error (error);
      g_assert_cmpuint (list->len, ==, 1);
      g_assert_true (um_convert_cache_remove (NULL, path, &error));
      g_assert_no_error (error);
      return;
    }
  {
    g_autofree char *tmp = um_test_mkdtemp ();
    g_autofree char *blocker = g_build_filename (tmp, "not-a-folder", NULL);
    g_autofree char *cache = g_build_filename (blocker, "cache", NULL);
    g_autofree char *old_cache = g_strdup (g_getenv ("XDG_CACHE_HOME"));
    g_autofree char *old_tmp = g_strdup (g_getenv ("TMPDIR"));

    um_test_write_file (blocker, "a file where the cache folder would go", -1);
    g_setenv ("XDG_CACHE_HOME", cache, TRUE);
    g_setenv ("TMPDIR", tmp, TRUE);
    g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_INHERIT_STDERR);
    if (old_cache)
      g_setenv ("XDG_CACHE_HOME", old_cache, TRUE);
    else
      g_unsetenv ("XDG_CACHE_HOME");
    if (old_tmp)
      g_setenv ("TMPDIR", old_tmp, TRUE);
    else
      g_unsetenv ("TMPDIR");
    g_test_trap_assert_passed ();
    um_test_rmtree (tmp);
  }
}

/* ---- prediction ------------------------------------------------------------ */

/* Writes @src with @opts and checks every tensor against the plan. */
static char *
check_plan (const char *src, const UmQuantizeOptions *opts, const char *dir)
{
  g_autoptr(UmModel) model = load_model (src);
  g_autoptr(GError) error = NULL;
  g_autoptr(GArray) plan = um_quantize_plan_tensors (model, opts, &error);
  g_autoptr(GArray) layers = um_quantize_plan_layers (model, opts, &error);
  g_autofree char *file = g_strdup_printf ("%s-%g-%g.gguf", opts->type, opts->prune_heads, opts->prune_ffn);
  char *out = g_build_filename (dir, file, NULL);
  g_autoptr(UmGguf) g = NULL;
  g_autoptr(UmModel) written = NULL;
  UmTensorTable *t;
  guint64 predicted = 0;

  g_assert_no_error (error);
  g_assert_true (um_quantize_model_full (model, opts, out, NULL, NULL, NULL, &error));
  g_assert_no_error (error);
  g = um_gguf_open (out, &error);
  g_assert_no_error (error);
  t = um_gguf_get_tensors (g);
  g_assert_cmpuint (um_tensor_table_size (t), ==, plan->len);
  for (guint i = 0; i < plan->len; i++)
    {
      const UmPlannedTensor *p = &g_array_index (plan, UmPlannedTensor, i);
      const UmTensorInfo *info = um_tensor_table_get (t, i);
      g_assert_cmpstr (info->name, ==, p->name);
      g_assert_cmpint (info->dtype, ==, p->dtype);
      g_assert_cmpuint (info->n_bytes, ==, p->bytes);
      if (p->kind == UM_PLANNED_NORM)
        {
          g_assert_cmpuint (info->n_dims, ==, 1);
          g_assert_cmpuint (p->rows, ==, 1);
          g_assert_cmpuint (info->shape[0], ==, p->cols);
        }
      else
        {
          g_assert_cmpuint (info->n_dims, ==, 2);
          g_assert_cmpuint (info->shape[0], ==, p->rows);
          g_assert_cmpuint (info->shape[1], ==, p->cols);
        }
      predicted += p->bytes;
    }
  g_assert_cmpuint (predicted, ==, um_tensor_table_total_bytes (t));
  {
    guint64 file_bytes = 0;
    gsize len;
    UmQuantizeOptions o = *opts;
    um_gguf_get_bytes (g, &len);
    g_assert_true (um_convert_predict_bytes (model, &o, &file_bytes, &error));
    g_assert_no_error (error);
    g_assert_cmpuint (file_bytes, >=, len);
    g_assert_cmpuint (file_bytes, <, len + 256 * 1024);
  }
  /* The written model has the planned per-layer counts. */
  written = load_model (out);
  g_assert_cmpuint (layers->len, ==, written->cfg.n_layers);
  for (guint l = 0; l < layers->len; l++)
    {
      const UmPlannedLayer *pl = &g_array_index (layers, UmPlannedLayer, l);
      g_assert_cmpuint (written->layers[l].n_heads, ==, pl->n_heads);
      g_assert_cmpuint (written->layers[l].n_kv_heads, ==, pl->n_kv_heads);
      g_assert_cmpuint (written->layers[l].ffn, ==, pl->ffn);
    }
  return out;
}

static UmPlannedLayer
layer0 (const char *src, const UmQuantizeOptions *opts)
{
  g_autoptr(UmModel) model = load_model (src);
  g_autoptr(GError) error = NULL;
  g_autoptr(GArray) layers = um_quantize_plan_layers (model, opts, &error);
  g_assert_no_error (error);
  return g_array_index (layers, UmPlannedLayer, 0);
}

static const UmPlannedTensor *
find_planned (GArray *plan, const char *name)
{
  for (guint i = 0; i < plan->len; i++)
    if (strcmp (g_array_index (plan, UmPlannedTensor, i).name, name) == 0)
      return &g_array_index (plan, UmPlannedTensor, i);
  g_error ("%s not planned", name);
}

static void
test_plan_matches_written (void)
{
  g_autofree char *tiny = um_test_data_path ("tiny-llada");
  g_autofree char *tiny_gguf = um_test_data_path ("tiny-llada-f32.gguf");
  g_autofree char *small = um_test_data_path ("small-kquant");
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *gen = g_build_filename (dir, "gen", NULL);
  g_autoptr(GError) error = NULL;
  UmTestModelSpec spec;
  const UmQuantizeOptions q8 = { "Q8_0", 0, 0 }, q8p = { "Q8_0", 0.25, 0.125 };
  const UmQuantizeOptions q4km = { "Q4_K_M", 0, 0 }, q4kmp = { "Q4_K_M", 0.25, 0.125 };
  const UmQuantizeOptions f16p = { "F16", 0.25, 0.125 }, q5p = { "Q5_K_M", 0.3, 0.2 };
  UmPlannedLayer pl;

  um_test_model_spec_init (&spec);
  spec.d_model = 128;
  spec.n_heads = 8;
  spec.n_kv_heads = 4;
  spec.mlp_hidden = 256;
  g_assert_true (um_test_write_model (gen, &spec, &error));
  g_assert_no_error (error);

  g_free (check_plan (tiny, &q8, dir));
  g_free (check_plan (tiny_gguf, &q8p, dir));
  g_free (check_plan (small, &q4km, dir));
  g_free (check_plan (small, &q4kmp, dir));
  g_free (check_plan (small, &f16p, dir));
  g_free (check_plan (gen, &q8p, dir));
  g_free (check_plan (gen, &q5p, dir));
  /* Row lengths K-quants cannot hold fall back (Q4_K -> Q5_0 -> F16). */
  {
    g_autofree char *out = check_plan (tiny, &q4kmp, dir);
    g_autoptr(UmModel) model = load_model (tiny);
    g_autoptr(GArray) plan = um_quantize_plan_tensors (model, &q4kmp, &error);
    g_assert_cmpint (find_planned (plan, "blk.0.attn_q.weight")->dtype, ==, UM_DTYPE_Q5_0);
    g_assert_cmpint (find_planned (plan, "blk.0.attn_output.weight")->dtype, ==, UM_DTYPE_F16);
    g_assert_cmpint (find_planned (plan, "blk.0.ffn_down.weight")->dtype, ==, UM_DTYPE_F16);
    g_assert_cmpint (find_planned (plan, "blk.0.attn_v.weight")->dtype, ==, UM_DTYPE_Q5_0);
    g_assert_cmpint (find_planned (plan, "blk.1.attn_v.weight")->dtype, ==, UM_DTYPE_Q8_0);   /* Q6_K */
    g_assert_cmpint (find_planned (plan, "output.weight")->dtype, ==, UM_DTYPE_Q8_0);
  }

  /* Kept counts: ceil((1 - r) n), rounded up to whole blocks of wo / w_down
   * rows where possible. */
  pl = layer0 (gen, &q8p);                 /* 8 heads in 4 groups of 16-wide heads, F 256 */
  g_assert_cmpuint (pl.n_kv_heads, ==, 3);
  g_assert_cmpuint (pl.n_heads, ==, 6);    /* 96 columns: 3 blocks of 32 */
  g_assert_cmpuint (pl.ffn, ==, 224);
  pl = layer0 (tiny, &q8p);                /* 4 heads of 16, F 160 */
  g_assert_cmpuint (pl.n_heads, ==, 4);    /* 3 heads = 48 columns: not whole Q8_0 blocks */
  g_assert_cmpuint (pl.ffn, ==, 160);      /* 140 -> 160 */
  pl = layer0 (tiny, &f16p);
  g_assert_cmpuint (pl.n_heads, ==, 3);
  g_assert_cmpuint (pl.ffn, ==, 140);
  pl = layer0 (small, &q4kmp);             /* 4 heads of 64, F 512, 256-blocks */
  g_assert_cmpuint (pl.n_heads, ==, 4);
  g_assert_cmpuint (pl.ffn, ==, 512);
  pl = layer0 (small, &f16p);
  g_assert_cmpuint (pl.n_heads, ==, 3);
  g_assert_cmpuint (pl.ffn, ==, 448);
  pl = layer0 (tiny, &q4kmp);              /* no multiple of 256 possible */
  g_assert_cmpuint (pl.n_heads, ==, 3);
  g_assert_cmpuint (pl.ffn, ==, 140);

  /* As stored: the files' own tensors. */
  {
    const char *srcs[] = { tiny, tiny_gguf, small };
    for (guint i = 0; i < G_N_ELEMENTS (srcs); i++)
      {
        g_autoptr(UmModel) model = load_model (srcs[i]);
        g_autoptr(GArray) plan = um_quantize_plan_tensors (model, NULL, &error);
        guint64 sum = 0;
        g_assert_no_error (error);
        g_assert_cmpuint (plan->len, ==, um_tensor_table_size (model->tensors));
        for (guint j = 0; j < plan->len; j++)
          {
            const UmPlannedTensor *p = &g_array_index (plan, UmPlannedTensor, j);
            const UmTensorInfo *info = um_tensor_table_lookup (model->tensors, p->name);
            g_assert_nonnull (info);
            g_assert_cmpint (p->dtype, ==, info->dtype);
            g_assert_cmpuint (p->bytes, ==, info->n_bytes);
            sum += p->bytes;
          }
        g_assert_cmpuint (sum, ==, um_model_weight_bytes (model));
      }
  }
  um_test_rmtree (dir);
}

static void
test_bad_ratios (void)
{
  g_autofree char *src = um_test_data_path ("tiny-llada");
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *out = g_build_filename (dir, "out.gguf", NULL);
  g_autoptr(UmModel) model = load_model (src);
  const UmQuantizeOptions bad[] = {
    { "Q8_0", 0.31, 0 }, { "Q8_0", -0.01, 0 }, { "Q8_0", NAN, 0 }, { "Q8_0", 0, 0.21 },
    { "Q8_0", 0, -1 }, { "Q8_0", 0, INFINITY }, { "Q9_9", 0, 0 }, { NULL, 0.1, 0 },
  };

  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(GArray) plan = NULL;
      g_autofree char *path = NULL;
      g_assert_false (um_quantize_model_full (model, &bad[i], out, NULL, NULL, NULL, &error));
      g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
      g_clear_error (&error);
      plan = um_quantize_plan_tensors (model, &bad[i], &error);
      g_assert_null (plan);
      g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
      g_clear_error (&error);
      path = um_convert_model (model, &bad[i], dir, NULL, NULL, NULL, NULL, &error);
      g_assert_null (path);
      g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
    }
  g_assert_false (g_file_test (out, G_FILE_TEST_EXISTS));
  um_test_rmtree (dir);
}

/* ---- pruning ----------------------------------------------------------------- */

/* Multiplies rows (or columns) of an F32 tensor in a safetensors file. */
static void
scale_in_file (guint8 *file, gsize len, const char *tensor, const guint *idx, guint n_idx,
               guint64 width, gboolean columns, float factor)
{
  guint64 hlen;
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(GError) error = NULL;
  JsonObject *info;
  JsonArray *shape, *offsets;
  guint64 rows, cols, begin;
  float *data;

  memcpy (&hlen, file, 8);
  hlen = GUINT64_FROM_LE (hlen);
  g_assert_true (json_parser_load_from_data (parser, (const char *) file + 8, hlen, &error));
  info = json_object_get_object_member (json_node_get_object (json_parser_get_root (parser)), tensor);
  g_assert_nonnull (info);
  g_assert_cmpstr (json_object_get_string_member (info, "dtype"), ==, "F32");
  shape = json_object_get_array_member (info, "shape");
  offsets = json_object_get_array_member (info, "data_offsets");
  rows = json_array_get_int_element (shape, 0);
  cols = json_array_get_int_element (shape, 1);
  begin = 8 + hlen + json_array_get_int_element (offsets, 0);
  g_assert_cmpuint (begin + rows * cols * 4, <=, len);
  data = (float *) (file + begin);
  for (guint k = 0; k < n_idx; k++)
    for (guint64 j = 0; j < width; j++)
      {
        guint64 unit = (guint64) idx[k] * width + j;
        if (columns)
          for (guint64 r = 0; r < rows; r++)
            data[r * cols + unit] *= factor;
        else
          for (guint64 c = 0; c < cols; c++)
            data[unit * cols + c] *= factor;
      }
}

#define PR_LAYERS 2
#define PR_HEADS 8
#define PR_KV 4
#define PR_HD 16
#define PR_D (PR_HEADS * PR_HD)
#define PR_F 256
#define PR_SMALL_F 32      /* 12.5 % of 256 */

typedef struct {
  guint small_group[PR_LAYERS];
  guint small_neurons[PR_LAYERS][PR_SMALL_F];
} Weak;

/* A model whose weak units are known: one KV group per layer and 32 FFN
 * neurons per layer have weights ten times smaller than the rest. */
static void
write_weak_model (const char *dir, Weak *weak)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *path = g_build_filename (dir, "model.safetensors", NULL);
  g_autofree char *contents = NULL;
  gsize len;
  UmTestModelSpec spec;
  char name[128];

  um_test_model_spec_init (&spec);
  spec.n_layers = PR_LAYERS;
  spec.d_model = PR_D;
  spec.n_heads = PR_HEADS;
  spec.n_kv_heads = PR_KV;
  spec.mlp_hidden = PR_F;
  spec.seed = 7;
  g_assert_true (um_test_write_model (dir, &spec, &error));
  g_assert_no_error (error);
  g_file_get_contents (path, &contents, &len, &error);
  g_assert_no_error (error);
  weak->small_group[0] = 1;
  weak->small_group[1] = 3;
  for (guint l = 0; l < PR_LAYERS; l++)
    {
      guint g = weak->small_group[l];
      guint q_heads[PR_HEADS / PR_KV];
      for (guint t = 0; t < PR_HEADS / PR_KV; t++)
        q_heads[t] = g * (PR_HEADS / PR_KV) + t;
      /* Neurons spread over the range, different per layer. */
      for (guint i = 0; i < PR_SMALL_F; i++)
        weak->small_neurons[l][i] = (i * 8 + 3 + 5 * l) % PR_F;
#define SCALE(suffix, idx, n, width, cols) G_STMT_START { \
        g_snprintf (name, sizeof name, "model.transformer.blocks.%u.%s", l, suffix); \
        scale_in_file ((guint8 *) contents, len, name, idx, n, width, cols, 0.1f); } G_STMT_END
      SCALE ("q_proj.weight", q_heads, G_N_ELEMENTS (q_heads), PR_HD, FALSE);
      SCALE ("k_proj.weight", &g, 1, PR_HD, FALSE);
      SCALE ("v_proj.weight", &g, 1, PR_HD, FALSE);
      SCALE ("attn_out.weight", q_heads, G_N_ELEMENTS (q_heads), PR_HD, TRUE);
      SCALE ("ff_proj.weight", weak->small_neurons[l], PR_SMALL_F, 1, FALSE);
      SCALE ("up_proj.weight", weak->small_neurons[l], PR_SMALL_F, 1, FALSE);
      SCALE ("ff_out.weight", weak->small_neurons[l], PR_SMALL_F, 1, TRUE);
#undef SCALE
    }
  um_test_write_file (path, contents, len);
}

static float
weight_at (const UmWeight *w, guint64 r, guint64 c)
{
  float f;
  g_assert_cmpint (w->dtype, ==, UM_DTYPE_F32);
  memcpy (&f, (const guint8 *) w->data + r * w->row_bytes + 4 * c, 4);
  return f;
}

static gboolean
is_weak_neuron (const Weak *weak, guint l, guint j)
{
  for (guint i = 0; i < PR_SMALL_F; i++)
    if (weak->small_neurons[l][i] == j)
      return TRUE;
  return FALSE;
}

/* A copy of @w (F32) with some rows or columns zeroed, owned by @owned. */
static void
zero_units (UmWeight *w, const guint *idx, guint n, guint64 width, gboolean columns, GPtrArray *owned)
{
  float *copy = g_new (float, w->rows * w->cols);
  for (guint64 r = 0; r < w->rows; r++)
    for (guint64 c = 0; c < w->cols; c++)
      copy[r * w->cols + c] = weight_at (w, r, c);
  for (guint k = 0; k < n; k++)
    for (guint64 j = 0; j < width; j++)
      {
        guint64 unit = (guint64) idx[k] * width + j;
        if (columns)
          for (guint64 r = 0; r < w->rows; r++)
            copy[r * w->cols + unit] = 0.0f;
        else
          memset (copy + unit * w->cols, 0, w->cols * sizeof (float));
      }
  g_ptr_array_add (owned, copy);
  w->data = copy;
  w->row_bytes = w->cols * sizeof (float);
}

static void
test_prune_keeps_largest (void)
{
  g_autofree char *tmp = um_test_mkdtemp ();
  g_autofree char *src = g_build_filename (tmp, "weak", NULL);
  g_autofree char *out = g_build_filename (tmp, "pruned.gguf", NULL);
  g_autoptr(UmModel) model = NULL, pruned = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(UmGguf) g = NULL;
  const UmQuantizeOptions opts = { "F32", 0.25, 0.125 };
  const guint group = PR_HEADS / PR_KV;
  Weak weak;
  double v;

  write_weak_model (src, &weak);
  model = load_model (src);
  g_assert_true (um_quantize_model_full (model, &opts, out, NULL, NULL, NULL, &error));
  g_assert_no_error (error);
  g = um_gguf_open (out, &error);
  g_assert_no_error (error);
  g_assert_true (um_gguf_get_f64 (g, "unmask.prune.heads", &v, &error));
  g_assert_cmpfloat (v, ==, 0.25);   /* exact: the options' binary fractions stored */
  g_assert_true (um_gguf_get_f64 (g, "unmask.prune.ffn", &v, &error));
  g_assert_cmpfloat (v, ==, 0.125);
  g_assert_cmpint (um_gguf_kv_type (g, um_gguf_find_key (g, "llada.attention.head_count")), ==, UM_GGUF_ARRAY);
  g_assert_cmpint (um_gguf_kv_type (g, um_gguf_find_key (g, "llada.feed_forward_length")), ==, UM_GGUF_ARRAY);
  pruned = load_model (out);
  g_assert_cmpuint (pruned->cfg.n_heads, ==, 6);
  g_assert_cmpuint (pruned->cfg.n_kv_heads, ==, 3);
  g_assert_cmpuint (pruned->cfg.mlp_hidden, ==, 224);
  g_assert_cmpuint (pruned->cfg.head_dim, ==, PR_HD);

  for (guint l = 0; l < PR_LAYERS; l++)
    {
      const UmLayerWeights *S = &model->layers[l], *P = &pruned->layers[l];
      guint kept[PR_KV], n_kept = 0, neurons[PR_F], n_neurons = 0;

      g_assert_cmpuint (P->n_heads, ==, 6);
      g_assert_cmpuint (P->n_kv_heads, ==, 3);
      g_assert_cmpuint (P->ffn, ==, 224);
      /* Every group but the weak one, in order. */
      for (guint u = 0; u < PR_KV; u++)
        if (u != weak.small_group[l])
          kept[n_kept++] = u;
      for (guint j = 0; j < PR_F; j++)
        if (!is_weak_neuron (&weak, l, j))
          neurons[n_neurons++] = j;
      g_assert_cmpuint (n_neurons, ==, 224);

      for (guint i = 0; i < n_kept; i++)
        for (guint t = 0; t < group; t++)
          for (guint j = 0; j < PR_HD; j++)
            {
              guint out_head = i * group + t, src_head = kept[i] * group + t;
              /* Q and K rows go from NeoX halves to interleaved pairs. */
              guint perm = j % 2 == 0 ? j / 2 : PR_HD / 2 + j / 2;
              for (guint c = 0; c < PR_D; c++)
                {
                  g_assert_cmpfloat (weight_at (&P->wq, out_head * PR_HD + j, c), ==,
                                     weight_at (&S->wq, src_head * PR_HD + perm, c));
                  g_assert_cmpfloat (weight_at (&P->wo, c, out_head * PR_HD + j), ==,
                                     weight_at (&S->wo, c, src_head * PR_HD + j));
                  if (t == 0)
                    {
                      g_assert_cmpfloat (weight_at (&P->wk, i * PR_HD + j, c), ==,
                                         weight_at (&S->wk, kept[i] * PR_HD + perm, c));
                      g_assert_cmpfloat (weight_at (&P->wv, i * PR_HD + j, c), ==,
                                         weight_at (&S->wv, kept[i] * PR_HD + j, c));
                    }
                }
            }
      for (guint i = 0; i < n_neurons; i++)
        for (guint c = 0; c < PR_D; c++)
          {
            g_assert_cmpfloat (weight_at (&P->w_gate, i, c), ==, weight_at (&S->w_gate, neurons[i], c));
            g_assert_cmpfloat (weight_at (&P->w_up, i, c), ==, weight_at (&S->w_up, neurons[i], c));
            g_assert_cmpfloat (weight_at (&P->w_down, c, i), ==, weight_at (&S->w_down, c, neurons[i]));
          }
    }

  /* The pruned model computes what the source computes with those units
   * zeroed (float64 reference on both sides). */
  {
    g_autoptr(GPtrArray) owned = g_ptr_array_new_with_free_func (g_free);
    UmModel zeroed = *model;
    const int L = 19;
    gint32 ids[19];
    const guint V = model->cfg.vocab_size;
    g_autofree double *want = g_new (double, L * V), *got = g_new (double, L * V);
    double worst = 0;

    zeroed.layers = g_memdup2 (model->layers, model->cfg.n_layers * sizeof (UmLayerWeights));
    for (guint l = 0; l < PR_LAYERS; l++)
      {
        UmLayerWeights *Z = &zeroed.layers[l];
        guint weak_group = weak.small_group[l];
        guint q_heads[PR_HEADS / PR_KV];
        for (guint t = 0; t < group; t++)
          q_heads[t] = weak_group * group + t;
        zero_units (&Z->wq, q_heads, group, PR_HD, FALSE, owned);
        zero_units (&Z->wk, &weak_group, 1, PR_HD, FALSE, owned);
        zero_units (&Z->wv, &weak_group, 1, PR_HD, FALSE, owned);
        zero_units (&Z->wo, q_heads, group, PR_HD, TRUE, owned);
        zero_units (&Z->w_gate, weak.small_neurons[l], PR_SMALL_F, 1, FALSE, owned);
        zero_units (&Z->w_up, weak.small_neurons[l], PR_SMALL_F, 1, FALSE, owned);
        zero_units (&Z->w_down, weak.small_neurons[l], PR_SMALL_F, 1, TRUE, owned);
      }
    for (int i = 0; i < L; i++)
      ids[i] = (i * 53 + 7) % 500;
    ids[4] = ids[11] = model->cfg.mask_id;
    g_assert_true (um_ref_forward (&zeroed, ids, L, want, &error));
    g_assert_true (um_ref_forward (pruned, ids, L, got, &error));
    g_assert_no_error (error);
    for (guint i = 0; i < L * V; i++)
      worst = MAX (worst, fabs (got[i] - want[i]) / (1 + fabs (want[i])));
    g_test_message ("pruned vs zeroed source: max relative difference %.3g", worst);
    g_assert_cmpfloat (worst, <, 1e-9);
    g_free (zeroed.layers);
  }
  um_test_rmtree (tmp);
}

/* A model whose layers differ: layer 0 from @pruned, the rest from @full
 * (both written from the same source in the same type). */
static void
splice_layers (const char *pruned, const char *full, const char *out)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(UmGguf) a = um_gguf_open (pruned, &error);
  g_autoptr(UmGguf) b = um_gguf_open (full, &error);
  g_autoptr(UmGgufWriter) w = um_gguf_writer_new ();
  g_autoptr(UmModel) ma = load_model (pruned), mb = load_model (full);
  guint32 heads[PR_LAYERS], kv[PR_LAYERS], ffn[PR_LAYERS];
  UmTensorTable *ta, *tb;

  g_assert_no_error (error);
  g_assert_true (um_gguf_writer_copy_all_kv (w, a, &error));
  for (guint l = 0; l < PR_LAYERS; l++)
    {
      const UmLayerWeights *L = l == 0 ? &ma->layers[l] : &mb->layers[l];
      heads[l] = L->n_heads;
      kv[l] = L->n_kv_heads;
      ffn[l] = L->ffn;
    }
  um_gguf_writer_set_array (w, "llada.attention.head_count", UM_GGUF_UINT32, heads, PR_LAYERS);
  um_gguf_writer_set_array (w, "llada.attention.head_count_kv", UM_GGUF_UINT32, kv, PR_LAYERS);
  um_gguf_writer_set_array (w, "llada.feed_forward_length", UM_GGUF_UINT32, ffn, PR_LAYERS);
  ta = um_gguf_get_tensors (a);
  tb = um_gguf_get_tensors (b);
  for (int pass = 0; pass < 2; pass++)
    {
      if (pass == 1)
        g_assert_true (um_gguf_writer_begin (w, out, &error));
      for (guint i = 0; i < um_tensor_table_size (tb); i++)
        {
          const UmTensorInfo *info = um_tensor_table_get (tb, i);
          if (g_str_has_prefix (info->name, "blk.0."))
            info = um_tensor_table_lookup (ta, info->name);
          if (pass == 0)
            g_assert_true (um_gguf_writer_add_tensor_info (w, info->name, info->dtype, info->n_dims, info->shape,
                                                           NULL, &error));
          else
            g_assert_true (um_gguf_writer_write_tensor_data (w, info->data, info->n_bytes, &error));
        }
    }
  g_assert_true (um_gguf_writer_finish (w, &error));
  g_assert_no_error (error);
}

/* The engine's forward on a pruned model against the reference forward of
 * the same weights. The mixed case (layers with different counts) checks
 * that the forward uses each layer's own counts (W->n_heads, n_kv_heads,
 * ffn), not the configuration's, which are the maxima over the layers. */
static void
check_pruned_forward (gboolean mixed)
{
  g_autofree char *tmp = um_test_mkdtemp ();
  g_autofree char *src = g_build_filename (tmp, "weak", NULL);
  g_autofree char *cache = g_build_filename (tmp, "cache", NULL);
  g_autofree char *path = NULL;
  g_autoptr(UmModel) model = NULL, pruned = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(UmBackend) be = NULL;
  g_autoptr(UmForward) fw = NULL;
  const UmQuantizeOptions opts = { "Q8_0", 0.25, 0.125 };
  const int L = 23;
  gint32 ids[23];
  g_autofree float *logits = NULL;
  g_autofree double *ref = NULL;
  double err, tol;
  guint V;
  Weak weak;

  write_weak_model (src, &weak);
  model = load_model (src);
  path = um_convert_model (model, &opts, cache, NULL, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  if (mixed)
    {
      /* Layer 0 pruned, layer 1 whole: the layers' counts differ. */
      const UmQuantizeOptions whole = { "Q8_0", 0, 0 };
      g_autofree char *full = um_convert_model (model, &whole, cache, NULL, NULL, NULL, NULL, &error);
      g_autofree char *spliced = g_build_filename (tmp, "mixed.gguf", NULL);
      g_assert_no_error (error);
      splice_layers (path, full, spliced);
      pruned = load_model (spliced);
      g_assert_cmpuint (pruned->layers[0].n_heads, ==, 6);
      g_assert_cmpuint (pruned->layers[1].n_heads, ==, 8);
      g_assert_cmpuint (pruned->layers[0].ffn, ==, 224);
      g_assert_cmpuint (pruned->layers[1].ffn, ==, 256);
    }
  else
    {
      pruned = load_model (path);
      g_assert_cmpuint (pruned->layers[0].n_heads, ==, 6);
      g_assert_cmpuint (pruned->layers[1].ffn, ==, 224);
    }
  V = pruned->cfg.vocab_size;
  for (int i = 0; i < L; i++)
    ids[i] = (i * 37 + 11) % V;
  ids[5] = ids[9] = pruned->cfg.mask_id;
  logits = g_new (float, L * V);
  ref = g_new (double, L * V);
  g_assert_true (um_ref_forward (pruned, ids, L, ref, &error));
  g_assert_no_error (error);
  tol = um_test_f32_tolerance (pruned, ids, L, ref, "pruned model");
  be = um_backend_cpu_new (0, 0, &error);
  g_assert_no_error (error);
  fw = um_forward_new (pruned, be, &error);
  g_assert_no_error (error);
  g_assert_true (um_forward_logits (fw, ids, 1, L, NULL, 0, logits, NULL, &error));
  g_assert_no_error (error);
  err = um_test_rel_error (logits, ref, (size_t) L * V);
  g_test_message ("pruned model: engine vs reference max relative error %.3g (tolerance %.3g)", err, tol);
  g_assert_cmpfloat (err, <, tol);
  um_forward_free (g_steal_pointer (&fw));
  um_model_free (g_steal_pointer (&pruned));
  um_test_rmtree (tmp);
}

static void
test_pruned_forward (void)
{
  check_pruned_forward (FALSE);
}

static void
test_pruned_forward_mixed (void)
{
  check_pruned_forward (TRUE);
}

/* ---- per-layer counts in the metadata ---------------------------------------- */

typedef struct {
  const char *key;
  UmGgufType  type;        /* UM_GGUF_STRING: an array of strings */
  guint       n;
  gint64      vals[4];
  const char *message;     /* NULL: must load */
} ArrayCase;

/* Copies @src to @dst with @c's key replaced. */
static void
rewrite_gguf (const char *src, const char *dst, const ArrayCase *c)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(UmGguf) g = um_gguf_open (src, &error);
  g_autoptr(UmGgufWriter) w = um_gguf_writer_new ();
  UmTensorTable *t;

  g_assert_no_error (error);
  g_assert_true (um_gguf_writer_copy_all_kv (w, g, &error));
  if (c->type == UM_GGUF_STRING)
    {
      const char *strs[] = { "4", "4", "4", "4" };
      um_gguf_writer_set_string_array (w, c->key, strs, c->n);
    }
  else if (c->type == UM_GGUF_INT32)
    {
      gint32 v[4];
      for (guint i = 0; i < c->n; i++)
        v[i] = (gint32) c->vals[i];
      um_gguf_writer_set_array (w, c->key, UM_GGUF_INT32, v, c->n);
    }
  else
    {
      guint32 v[4];
      for (guint i = 0; i < c->n; i++)
        v[i] = (guint32) c->vals[i];
      um_gguf_writer_set_array (w, c->key, UM_GGUF_UINT32, v, c->n);
    }
  t = um_gguf_get_tensors (g);
  for (guint i = 0; i < um_tensor_table_size (t); i++)
    {
      const UmTensorInfo *info = um_tensor_table_get (t, i);
      g_assert_true (um_gguf_writer_add_tensor_info (w, info->name, info->dtype, info->n_dims, info->shape,
                                                     NULL, &error));
    }
  g_assert_true (um_gguf_writer_begin (w, dst, &error));
  for (guint i = 0; i < um_tensor_table_size (t); i++)
    {
      const UmTensorInfo *info = um_tensor_table_get (t, i);
      g_assert_true (um_gguf_writer_write_tensor_data (w, info->data, info->n_bytes, &error));
    }
  g_assert_true (um_gguf_writer_finish (w, &error));
  g_assert_no_error (error);
}

static void
test_hostile_arrays (void)
{
  static const ArrayCase cases[] = {
    { "llada.attention.head_count", UM_GGUF_UINT32, 2, { 4, 4 }, NULL },
    { "llada.attention.head_count_kv", UM_GGUF_UINT32, 2, { 2, 4 }, "attn_k.weight" },
    { "llada.attention.head_count", UM_GGUF_UINT32, 1, { 4 }, "“llada.attention.head_count” has 1 per-layer values" },
    { "llada.attention.head_count", UM_GGUF_UINT32, 3, { 4, 4, 4 }, "“llada.attention.head_count” has 3" },
    { "llada.attention.head_count", UM_GGUF_UINT32, 2, { 4, 0 }, "“llada.attention.head_count”[1] is 0" },
    { "llada.attention.head_count", UM_GGUF_UINT32, 2, { 4, 1u << 21 }, "“llada.attention.head_count”[1] is 2097152" },
    { "llada.attention.head_count", UM_GGUF_UINT32, 2, { 4, 0xffffffffu }, "llada.attention.head_count" },
    { "llada.attention.head_count", UM_GGUF_UINT32, 2, { 4, 5 }, "head_count_kv (4) does not divide llada.attention.head_count (5)" },
    { "llada.attention.head_count", UM_GGUF_INT32, 2, { 4, -4 }, "llada.attention.head_count[1]" },
    { "llada.attention.head_count", UM_GGUF_STRING, 2, { 0 }, "llada.attention.head_count" },
    { "llada.attention.head_count_kv", UM_GGUF_UINT32, 2, { 4, 3 }, "layer 1: llada.attention.head_count_kv (3) does not divide" },
    { "llada.attention.head_count_kv", UM_GGUF_UINT32, 2, { 4, 8 }, "layer 1: llada.attention.head_count_kv (8) does not divide" },
    { "llada.attention.head_count_kv", UM_GGUF_UINT32, 2, { 0, 4 }, "“llada.attention.head_count_kv”[0] is 0" },
    { "llada.attention.head_count_kv", UM_GGUF_UINT32, 0, { 0 }, "has 0 per-layer values" },
    { "llada.feed_forward_length", UM_GGUF_UINT32, 2, { 160, 0 }, "“llada.feed_forward_length”[1] is 0" },
    { "llada.feed_forward_length", UM_GGUF_UINT32, 2, { 160, 1u << 30 }, "“llada.feed_forward_length”[1]" },
    /* Consistent arrays that disagree with the tensors: a shape error. */
    { "llada.feed_forward_length", UM_GGUF_UINT32, 2, { 160, 96 }, "blk.1.ffn_gate.weight" },
  };
  g_autofree char *src = um_test_data_path ("tiny-llada-q8_0.gguf");
  g_autofree char *dir = um_test_mkdtemp ();

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autofree char *file = g_strdup_printf ("case-%u.gguf", i);
      g_autofree char *path = g_build_filename (dir, file, NULL);
      g_autoptr(GError) error = NULL;
      g_autoptr(UmModel) model = NULL;

      rewrite_gguf (src, path, &cases[i]);
      model = um_model_load (path, NULL, &error);
      if (cases[i].message == NULL)
        {
          g_assert_no_error (error);
          g_assert_cmpuint (model->layers[1].n_heads, ==, 4);
          continue;
        }
      g_test_message ("case %u: %s", i, error ? error->message : "(loaded)");
      g_assert_null (model);
      g_assert_nonnull (error);
      g_assert_true (error->domain == UM_ERROR);
      if (strstr (error->message, cases[i].message) == NULL)
        g_error ("case %u: “%s” does not mention “%s”", i, error->message, cases[i].message);
    }
  um_test_rmtree (dir);
}

/* Pruned GGUF in, GGUF out: the per-layer counts survive re-quantization
 * (uniformly pruned layers come back as scalars plus the head size). */
static void
test_pruned_roundtrip (void)
{
  g_autofree char *tmp = um_test_mkdtemp ();
  g_autofree char *src = g_build_filename (tmp, "weak", NULL);
  g_autofree char *a = g_build_filename (tmp, "a.gguf", NULL);
  g_autofree char *b = g_build_filename (tmp, "b.gguf", NULL);
  g_autoptr(UmModel) model = NULL, pa = NULL, pb = NULL;
  g_autoptr(GError) error = NULL;
  const UmQuantizeOptions pr = { "F16", 0.25, 0.125 }, plain = { "Q8_0", 0, 0 };
  g_autoptr(UmGguf) g = NULL;
  Weak weak;

  write_weak_model (src, &weak);
  model = load_model (src);
  g_assert_true (um_quantize_model_full (model, &pr, a, NULL, NULL, NULL, &error));
  g_assert_no_error (error);
  pa = load_model (a);
  g_assert_true (um_quantize_model_full (pa, &plain, b, NULL, NULL, NULL, &error));
  g_assert_no_error (error);
  g = um_gguf_open (b, &error);
  g_assert_no_error (error);
  g_assert_cmpint (um_gguf_kv_type (g, um_gguf_find_key (g, "llada.attention.head_count")), ==, UM_GGUF_UINT32);
  g_assert_cmpint (um_gguf_find_key (g, "llada.attention.key_length"), >=, 0);
  pb = load_model (b);
  for (guint l = 0; l < PR_LAYERS; l++)
    {
      g_assert_cmpuint (pb->layers[l].n_heads, ==, 6);
      g_assert_cmpuint (pb->layers[l].n_kv_heads, ==, 3);
      g_assert_cmpuint (pb->layers[l].ffn, ==, 224);
    }
  /* Pruning a pruned model again works on its own counts. */
  {
    g_autofree char *c = g_build_filename (tmp, "c.gguf", NULL);
    g_autoptr(UmModel) pc = NULL;
    const UmQuantizeOptions again = { "F32", 0.3, 0.2 };
    g_assert_true (um_quantize_model_full (pb, &again, c, NULL, NULL, NULL, &error));
    g_assert_no_error (error);
    pc = load_model (c);
    g_assert_cmpuint (pc->layers[0].n_kv_heads, ==, 3);   /* ceil (0.7 * 3) */
    g_assert_cmpuint (pc->layers[0].ffn, ==, 180);        /* ceil (0.8 * 224) */
  }
  um_test_rmtree (tmp);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/convert/cache-hit", test_cache_hit);
  g_test_add_func ("/convert/cache-key", test_cache_key);
  g_test_add_func ("/convert/cache-list-remove", test_cache_list_remove);
  g_test_add_func ("/convert/cache-partial", test_cache_partial);
  g_test_add_func ("/convert/cache-broken-file", test_cache_broken_file);
  g_test_add_func ("/convert/cache-fallback", test_cache_fallback);
  g_test_add_func ("/convert/plan-matches-written", test_plan_matches_written);
  g_test_add_func ("/convert/bad-ratios", test_bad_ratios);
  g_test_add_func ("/convert/prune-keeps-largest", test_prune_keeps_largest);
  g_test_add_func ("/convert/pruned-roundtrip", test_pruned_roundtrip);
  g_test_add_func ("/convert/hostile-arrays", test_hostile_arrays);
  /* Needs per-layer counts in the engine forward (um-forward.c). */
  g_test_add_func ("/convert/pruned-forward-engine", test_pruned_forward);
  g_test_add_func ("/convert/pruned-forward-engine-mixed-layers", test_pruned_forward_mixed);
  return g_test_run ();
}

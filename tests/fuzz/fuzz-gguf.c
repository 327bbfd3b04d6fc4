/* fuzz-gguf.c — libFuzzer target for the GGUF reader.
 *
 * Parses the input as a GGUF file straight from memory (libFuzzer's buffer
 * is exactly the input's size, so ASan sees any read past it) and, when the
 * file is accepted, reads everything a consumer could: every KV through
 * every getter and the inspect formatter, and the first and last byte of
 * every tensor. A file that names an architecture is then loaded as a
 * model (configuration keys of every family, tokenizer, tensor names and
 * shapes, stacked experts), and a model that loads runs the reference
 * forward pass on a few tokens.
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -std=c11 -D_GNU_SOURCE \
 *     -Ibackend -Ibackend/formats backend/um-error.c backend/formats/um-dtype.c \
 *     backend/formats/um-tensor-table.c backend/formats/um-gguf.c \
 *     backend/formats/um-gguf-write.c tests/fuzz/fuzz-gguf.c \
 *     $(pkg-config --cflags --libs glib-2.0) -lm -o fuzz-gguf
 *   mkdir -p corpus && ./fuzz-gguf -max_total_time=60 corpus tests/data/malformed tests/data
 */
#include <glib.h>
#include <stdint.h>
#include <string.h>

#include "um-error.h"
#include "um-gguf.h"
#include "um-model-gguf.h"
#include "um-ref-kernels.h"

int LLVMFuzzerInitialize (int *argc, char ***argv);
int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

/* A critical or warning means a broken invariant: make it a crash. */
int
LLVMFuzzerInitialize (int *argc, char ***argv)
{
  g_log_set_always_fatal (G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING);
  return 0;
}

static volatile guint64 sink;

static void
touch_kv (UmGguf *g, guint i)
{
  const char *key = um_gguf_kv_key (g, i);
  g_autofree char *s = um_gguf_kv_to_string (g, i);
  g_autofree gint32 *ints = NULL;
  g_autofree float *floats = NULL;
  const char * const *strv;
  const guint8 *raw;
  gsize raw_len;
  guint64 u, n;
  gint64 v;
  double d;
  gboolean b;
  UmGgufType et;
  const char *str;

  g_assert (um_gguf_find_key (g, key) == (gint) i);
  sink += strlen (s);
  raw = um_gguf_kv_raw (g, i, &raw_len);
  g_assert (raw_len >= 5);
  sink += raw[0] + raw[raw_len - 1];

  /* Every getter on every key: each either works or reports an error. */
  if (um_gguf_get_u64 (g, key, &u, NULL))
    sink += u;
  {
    guint32 u32;
    if (um_gguf_get_u32 (g, key, &u32, NULL))
      sink += u32;
  }
  if (um_gguf_get_i64 (g, key, &v, NULL))
    sink += (guint64) v;
  if (um_gguf_get_f64 (g, key, &d, NULL))
    sink += (guint64) (d == d);
  if (um_gguf_get_bool (g, key, &b, NULL))
    sink += b;
  str = um_gguf_get_string (g, key, NULL);
  if (str != NULL)
    sink += strlen (str);
  if (!um_gguf_get_array_info (g, key, &et, &n, NULL))
    return;
  strv = um_gguf_get_string_array (g, key, &u, NULL);
  if (strv != NULL)
    {
      g_assert (u == n && strv[n] == NULL);
      for (guint64 j = 0; j < n; j++)
        sink += strlen (strv[j]);
    }
  else
    {
      const guint8 *p = um_gguf_get_array_data (g, key, &et, &u, NULL);
      g_assert (p != NULL && u == n);
      if (n > 0)
        sink += p[0] + p[n * um_gguf_type_size (et) - 1];
    }
  if (um_gguf_get_int32_array (g, key, &ints, &u, NULL) && u > 0)
    sink += (guint64) ints[0] + (guint64) ints[u - 1];
  if (um_gguf_get_f32_array (g, key, &floats, &u, NULL) && u > 0)
    sink += (guint64) (floats[0] == floats[u - 1]);
}

/* Loads @g (taken over) as a model; every refusal is an UM_ERROR naming
 * the file, and a model that loads runs. */
static void
load_model (UmGguf *g)
{
  g_autoptr(UmModel) m = g_new0 (UmModel, 1);
  g_autoptr(GError) error = NULL;

  m->path = g_strdup ("fuzz.gguf");
  m->display_name = g_strdup ("fuzz.gguf");
  m->format = UM_MODEL_FORMAT_GGUF;
  m->owned = g_ptr_array_new_with_free_func (g_free);
  if (!um_model_load_gguf_from (m, g, &error))
    {
      g_assert (error != NULL && error->domain == UM_ERROR);
      g_assert (strstr (error->message, "fuzz.gguf") != NULL);
      return;
    }
  {
    const int L = 4;
    gint32 ids[4];
    g_autofree double *logits = g_new (double, (size_t) L * m->cfg.vocab_size);
    for (int t = 0; t < L; t++)
      ids[t] = (gint32) ((guint) t * 7919u % m->cfg.vocab_size);
    g_assert (um_ref_forward (m, ids, L, logits, NULL));
    sink += (guint64) (logits[0] == logits[0]);
  }
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (UmGguf) g = um_gguf_open_from_bytes (data, size, "fuzz.gguf", &error);
  UmTensorTable *t;

  if (g == NULL)
    {
      /* Every failure is a UM_ERROR naming the file. */
      g_assert (error != NULL && error->domain == UM_ERROR);
      g_assert (g_str_has_prefix (error->message, "fuzz.gguf: "));
      return 0;
    }
  g_assert (um_gguf_version (g) == 2 || um_gguf_version (g) == 3);
  g_assert (um_gguf_alignment (g) > 0 && um_gguf_data_offset (g) % um_gguf_alignment (g) == 0);
  g_assert (um_gguf_header_size (g) <= um_gguf_data_offset (g));
  for (guint i = 0; i < um_gguf_n_kv (g); i++)
    touch_kv (g, i);
  t = um_gguf_get_tensors (g);
  for (guint i = 0; i < um_tensor_table_size (t); i++)
    {
      const UmTensorInfo *info = um_tensor_table_get (t, i);
      g_assert (info->n_bytes > 0);
      g_assert (info->data >= data && info->data + info->n_bytes <= data + size);
      g_assert ((gsize) (info->data - data) % um_gguf_alignment (g) == 0);
      g_assert (strcmp (info->file, "fuzz.gguf") == 0);
      sink += info->data[0] + info->data[info->n_bytes - 1];
    }
  /* Copying metadata into a writer (in memory only) must work for any
   * accepted file. */
  {
    g_autoptr (UmGgufWriter) w = um_gguf_writer_new ();
    g_assert (um_gguf_writer_copy_all_kv (w, g, NULL));
  }
  if (um_gguf_find_key (g, "general.architecture") >= 0)
    load_model (g_steal_pointer (&g));
  return 0;
}

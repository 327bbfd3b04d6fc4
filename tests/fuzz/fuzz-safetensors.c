/* fuzz-safetensors.c — libFuzzer target for the safetensors reader.
 *
 * Parses the input as a .safetensors file straight from memory (libFuzzer's
 * buffer is exactly the input's size, so ASan sees any read past it); an
 * accepted file must only yield tensors that lie inside the input, each of
 * which is read at its first and last byte.
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -std=c11 -D_GNU_SOURCE \
 *     -Ibackend -Ibackend/formats backend/um-error.c backend/formats/um-dtype.c \
 *     backend/formats/um-tensor-table.c backend/formats/um-safetensors.c \
 *     tests/fuzz/fuzz-safetensors.c \
 *     $(pkg-config --cflags --libs glib-2.0 gio-2.0 json-glib-1.0) -lm -o fuzz-safetensors
 *   mkdir -p corpus && ./fuzz-safetensors -max_total_time=60 corpus tests/data/tiny-llada
 */
#include <glib.h>
#include <stdint.h>
#include <string.h>

#include "um-error.h"
#include "um-safetensors.h"
#include "um-tensor-table.h"

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

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (UmTensorTable) t = um_safetensors_open_from_bytes (data, size, "fuzz.safetensors",
                                                                &error);

  if (t == NULL)
    {
      /* Every failure is a GError in UM_ERROR that names the file. */
      g_assert (error != NULL && error->domain == UM_ERROR);
      g_assert (strstr (error->message, "fuzz.safetensors") != NULL);
      return 0;
    }
  g_assert (error == NULL);
  for (guint i = 0; i < um_tensor_table_size (t); i++)
    {
      const UmTensorInfo *info = um_tensor_table_get (t, i);
      g_autofree char *shape = um_tensor_shape_string (info);
      uint64_t n_bytes;

      g_assert (info->name != NULL);
      g_assert (um_tensor_table_lookup (t, info->name) == info);
      g_assert (info->n_dims <= UM_MAX_DIMS);
      g_assert (um_dtype_bytes (info->dtype, info->n_elems, &n_bytes) && n_bytes == info->n_bytes);
      sink += strlen (shape);
      /* Zero-element tensors are legal in safetensors. */
      if (info->n_bytes == 0)
        continue;
      g_assert (info->data >= data && info->n_bytes <= size
                && (size_t) (info->data - data) <= size - info->n_bytes);
      sink += info->data[0] + info->data[info->n_bytes - 1];
    }
  sink += um_tensor_table_total_bytes (t);
  return 0;
}

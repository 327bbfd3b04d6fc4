/* um-quantize.h — writing a model as a llama.cpp-compatible GGUF in any
 * supported type: what `unmask-cli quantize` and the memory modes use. */
#pragma once

#include <gio/gio.h>

#include "um-model.h"

G_BEGIN_DECLS

typedef void (*UmQuantizeProgress) (double fraction, const char *tensor, gpointer user_data);

/* @type: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K
 * (every weight in that type, norms in F32) or the llama.cpp mixes Q4_K_M and
 * Q5_K_M (attn_v and ffn_down of some layers and the LM head in Q6_K). The
 * file is written atomically: @out_path is either untouched or complete. */
gboolean um_quantize_model (UmModel            *model,
                            const char         *type,
                            const char         *out_path,
                            UmQuantizeProgress  progress_cb,
                            gpointer            user_data,
                            GCancellable       *cancellable,
                            GError            **error);

/* TRUE if @type names something um_quantize_model() writes. */
gboolean um_quantize_type_is_valid (const char *type);

G_END_DECLS

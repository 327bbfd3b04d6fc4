/* um-model-gguf.h — internal: filling an UmModel from a llama.cpp GGUF. */
#pragma once

#include "um-gguf.h"
#include "um-model.h"

G_BEGIN_DECLS

gboolean um_model_load_gguf (UmModel *model, GError **error);
/* The same from a file already open (the fuzzer's, in memory); @model
 * takes @g over, and frees it with itself. */
gboolean um_model_load_gguf_from (UmModel *model, UmGguf *g, GError **error);
void     um_model_gguf_release (UmModel *model);

/* Binds every weight by name, checking shapes against the configuration. */
gboolean um_model_bind_weights (UmModel *model, const UmWeightNames *names, GError **error);

/* Shared with um-model.c */
gboolean um_model_bind_weight (UmModel *model, UmWeight *w, const char *name,
                               uint64_t rows, uint64_t cols, GError **error);
gboolean um_model_weight_to_f32 (UmModel *model, UmWeight *w, GError **error);
void     um_model_resolve_special_ids (UmModel *model);

G_END_DECLS

/* um-local-generator.h — an UmGenerator over an UmEngine in this process:
 * requests run one at a time on the worker thread (um-worker.h), steps are
 * delivered on the generator's home context. */
#pragma once

#include "um-generator.h"

G_BEGIN_DECLS

#define UM_TYPE_LOCAL_GENERATOR (um_local_generator_get_type ())
G_DECLARE_FINAL_TYPE (UmLocalGenerator, um_local_generator, UM, LOCAL_GENERATOR, UmGenerator)

/* Takes ownership of @engine (freed with the generator, after any running
 * generation, which dispose cancels). */
UmGenerator *um_local_generator_new (UmEngine *engine);

/* The prompt ids @req asks for, as a local run builds them (the chat
 * template for messages or chat text; the tokenizer for text), and the
 * suffix's ids (NULL when none): the server counts prompt tokens with it
 * before accepting a request. */
gboolean     um_local_generator_prompt_ids (UmLocalGenerator         *self,
                                            const UmGeneratorRequest *req,
                                            GArray                   *out_prompt,
                                            GArray                   *out_suffix,
                                            GError                  **error);

G_END_DECLS

#include "um-model-gguf.h"

#include "um-error.h"

gboolean
um_model_load_gguf (UmModel *model, GError **error)
{
  g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "%s: GGUF loading is being written", model->display_name);
  return FALSE;
}

void
um_model_gguf_release (UmModel *model)
{
}

#include "um-backend.h"

#include "um-error.h"

void
um_backend_free (UmBackend *be)
{
  if (be == NULL)
    return;
  be->ops->destroy (be);
}

const char *
um_backend_name (UmBackend *be)
{
  return be->ops->name;
}

gboolean
um_backend_check_copy (const char *backend, size_t buf_bytes, size_t offset, size_t bytes, GError **error)
{
  if (offset > buf_bytes || bytes > buf_bytes - offset)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "%s: copy of %zu bytes at %zu is outside a %zu-byte buffer", backend, bytes, offset, buf_bytes);
      return FALSE;
    }
  return TRUE;
}

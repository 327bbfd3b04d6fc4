#include "um-backend.h"

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

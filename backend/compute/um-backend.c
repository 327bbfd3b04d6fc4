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
um_backend_budget_check (const char *backend, const char *budget_name, guint64 budget, guint64 used, size_t bytes,
                         const char *what, GError **error)
{
  if (bytes > budget || used > budget - bytes)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY,
                   "%s: %s of %.1f MiB would exceed the %s budget (%.1f of %.1f MiB in use)",
                   backend, what, bytes / 1048576.0, budget_name, used / 1048576.0, budget / 1048576.0);
      return FALSE;
    }
  return TRUE;
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

gboolean
um_backend_check_rope_dim (const char *backend, int head_dim, int rope_dim, GError **error)
{
  if (rope_dim < 0 || rope_dim > head_dim || rope_dim % 2 != 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "%s: RoPE over %d of a head's %d values (must be even and no more)", backend, rope_dim, head_dim);
      return FALSE;
    }
  return TRUE;
}

gboolean
um_backend_check_kv_len (const char *backend, const gint32 *q_kv_len, int nq, int seq_len, GError **error)
{
  for (int i = 0; q_kv_len != NULL && i < nq; i++)
    if (q_kv_len[i] < 1 || q_kv_len[i] > seq_len)
      {
        g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                     "%s: attention: query row %d sees %d keys (must be 1 to %d)", backend, i, q_kv_len[i],
                     seq_len);
        return FALSE;
      }
  return TRUE;
}

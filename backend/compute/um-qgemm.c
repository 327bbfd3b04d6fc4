/* um-qgemm.c — placeholder, being written. */
#include "um-gemm.h"

gboolean
um_qgemm_supported_type (UmDType t)
{
  return FALSE;
}

size_t
um_qgemm_scratch_bytes (UmDType t, int64_t n, int64_t k, int64_t m)
{
  return 0;
}

gboolean
um_qgemm_ref (UmDType t, const void *w, int64_t n, int64_t k, const float *x, int64_t m, float *out)
{
  return FALSE;
}

gboolean
um_qgemm_vnni (UmDType t, const void *w, int64_t n, int64_t k,
               const float *x, int64_t m, float *out, void *scratch, size_t scratch_bytes)
{
  return FALSE;
}

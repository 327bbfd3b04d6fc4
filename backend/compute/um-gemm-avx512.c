/* um-gemm-avx512.c — placeholder, being written. */
#include "um-gemm.h"

size_t
um_gemm_f32_scratch_bytes (UmDType t, int64_t n, int64_t k, int64_t m)
{
  return 0;
}

gboolean
um_gemm_f32_avx512 (UmDType t, const void *w, int64_t n, int64_t k,
                    const float *x, int64_t m, float *out, void *scratch, size_t scratch_bytes)
{
  return FALSE;
}

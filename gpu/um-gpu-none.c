/* Built when meson found no CUDA toolkit: the engine runs on the CPU. */
#include "um-backend-cuda.h"

#include <string.h>

#include "um-error.h"

UmGpuReport *
um_gpu_report_new (void)
{
  UmGpuReport *r = g_new0 (UmGpuReport, 1);
  r->devices = g_array_new (FALSE, TRUE, sizeof (UmGpuDevice));
  r->why_none = g_strdup ("this build of Unmask has no CUDA support (built without the CUDA toolkit)");
  return r;
}

UmBackend *
um_backend_cuda_new (int device, guint64 budget_bytes, GError **error)
{
  g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
               "this build of Unmask has no CUDA support (built without the CUDA toolkit)");
  return NULL;
}

UmBackend *
um_backend_cuda_new_capped (int device, guint64 cap_bytes, GError **error)
{
  return um_backend_cuda_new (device, cap_bytes, error);
}

gboolean
um_backend_cuda_matmul_seconds (UmBackend *be, double *seconds)
{
  return FALSE;
}

gboolean
um_backend_cuda_graph_stats (UmBackend *be, UmCudaGraphStats *stats)
{
  return FALSE;
}

gboolean
um_backend_cuda_device_usage (UmBackend *be, UmCudaDeviceUsage *out)
{
  memset (out, 0, sizeof *out);
  return FALSE;
}

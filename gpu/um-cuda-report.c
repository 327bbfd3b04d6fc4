/* um-cuda-report.c — which GPUs this build can use, and why none: for the
 * optimizer's report (um_gpu_report_new) and for um_backend_cuda_new, in
 * the same words. */
#include "um-cuda-report.h"

#include <cuda_runtime_api.h>

#include "um-backend-cuda.h"

char *
um_cuda_probe_devices (int *count)
{
  cudaError_t e = cudaGetDeviceCount (count);
  int driver = 0, runtime = 0;

  if (e == cudaSuccess && *count > 0)
    return NULL;
  (void) cudaGetLastError ();
  cudaDriverGetVersion (&driver);
  *count = 0;
  if (driver == 0)
    return g_strdup ("no NVIDIA driver is installed");
  cudaRuntimeGetVersion (&runtime);
  /* Any failure with a driver older than the runtime is most likely that. */
  if (e == cudaErrorInsufficientDriver || (e != cudaErrorNoDevice && e != cudaSuccess && driver < runtime))
    return g_strdup_printf ("the NVIDIA driver supports CUDA up to %d.%d, but Unmask was built with CUDA %d.%d: "
                            "update the driver", driver / 1000, driver % 1000 / 10, runtime / 1000,
                            runtime % 1000 / 10);
  if (e == cudaErrorNoDevice || e == cudaSuccess)
    return g_strdup ("the NVIDIA driver found no CUDA device");
  return g_strdup_printf ("CUDA is not usable: %s", cudaGetErrorString (e));
}

UmGpuReport *
um_gpu_report_new (void)
{
  UmGpuReport *r = g_new0 (UmGpuReport, 1);
  int count = 0;

  r->built_with_cuda = TRUE;
  r->devices = g_array_new (FALSE, TRUE, sizeof (UmGpuDevice));
  cudaRuntimeGetVersion (&r->runtime_version);
  cudaDriverGetVersion (&r->driver_version);
  r->why_none = um_cuda_probe_devices (&count);
  for (int i = 0; i < count; i++)
    {
      struct cudaDeviceProp prop;
      UmGpuDevice d = { 0 };
      size_t free_b = 0, total_b = 0;
      if (cudaGetDeviceProperties (&prop, i) != cudaSuccess)
        continue;
      /* The kernels are built for sm_80 and newer: an older GPU is not
       * usable, and saying so here keeps `auto` and the optimizer off it. */
      if (prop.major < 8)
        {
          g_autofree char *old = r->not_usable;
          r->not_usable = g_strdup_printf ("%s%s[%d] %s has compute capability %d.%d; Unmask needs 8.0 or newer",
                                           old ? old : "", old ? "; " : "", i, prop.name, prop.major, prop.minor);
          continue;
        }
      d.index = i;
      g_strlcpy (d.name, prop.name, sizeof d.name);
      d.cc_major = prop.major;
      d.cc_minor = prop.minor;
      d.multiprocessors = prop.multiProcessorCount;
      d.total_bytes = prop.totalGlobalMem;
      if (cudaSetDevice (i) == cudaSuccess && cudaMemGetInfo (&free_b, &total_b) == cudaSuccess)
        d.free_bytes = free_b;
      g_array_append_val (r->devices, d);
    }
  (void) cudaGetLastError ();
  if (count > 0 && r->devices->len == 0 && r->why_none == NULL)
    r->why_none = g_strdup (r->not_usable ? r->not_usable : "no CUDA device could be queried");
  else if (r->devices->len > 0)
    g_clear_pointer (&r->why_none, g_free);   /* one usable GPU is enough */
  return r;
}

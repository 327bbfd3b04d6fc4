/* um-nvml.c — NVML's per-process GPU memory through dlopen.
 *
 * Only the few entry points needed are looked up, with the struct layouts
 * of nvml.h (stable across driver versions): nvmlProcessInfo_t of the _v2
 * and _v3 calls is { pid, usedGpuMemory, gpuInstanceId, computeInstanceId },
 * the unversioned call's v1 struct { pid, usedGpuMemory }. The library is
 * opened once and kept; NVML is initialised once too (its calls are
 * thread-safe). */
#include "um-nvml.h"

#include <dlfcn.h>
#include <string.h>
#include <unistd.h>

typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_INSUFFICIENT_SIZE 7
/* usedGpuMemory when the driver cannot say (e.g. Windows WDDM, some vGPUs). */
#define NVML_VALUE_NOT_AVAILABLE (~0ULL)

typedef struct {
  unsigned int       pid;
  unsigned long long usedGpuMemory;
  unsigned int       gpuInstanceId;
  unsigned int       computeInstanceId;
} ProcessInfo;

typedef struct {
  unsigned int       pid;
  unsigned long long usedGpuMemory;
} ProcessInfoV1;

typedef struct {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} Memory;

typedef struct {
  void        *lib;
  char        *why;        /* why there is no NVML; NULL when there is */
  nvmlReturn_t (*init) (void);
  nvmlReturn_t (*count) (unsigned int *);
  nvmlReturn_t (*by_index) (unsigned int, nvmlDevice_t *);
  nvmlReturn_t (*by_bus) (const char *, nvmlDevice_t *);
  nvmlReturn_t (*memory) (nvmlDevice_t, Memory *);
  nvmlReturn_t (*procs) (nvmlDevice_t, unsigned int *, ProcessInfo *);     /* _v3 or _v2 */
  nvmlReturn_t (*procs_v1) (nvmlDevice_t, unsigned int *, ProcessInfoV1 *);
  const char  *(*error_string) (nvmlReturn_t);
} Nvml;

static Nvml nvml;

static const char *
nvml_error (nvmlReturn_t r)
{
  const char *s = nvml.error_string != NULL ? nvml.error_string (r) : NULL;
  return s != NULL ? s : "error";
}

static gpointer
open_nvml (gpointer data)
{
  const char *name = g_getenv ("UNMASK_NVML_LIBRARY");
  nvmlReturn_t r;

  (void) data;
  if (name == NULL || *name == 0)
    name = "libnvidia-ml.so.1";
  nvml.lib = dlopen (name, RTLD_NOW | RTLD_LOCAL);
  if (nvml.lib == NULL)
    {
      nvml.why = g_strdup_printf ("NVML is not available (%s)", dlerror ());
      return NULL;
    }
  /* The casts from void *: how dlsym's results are used (POSIX). */
  nvml.init = (nvmlReturn_t (*) (void)) dlsym (nvml.lib, "nvmlInit_v2");
  nvml.count = (nvmlReturn_t (*) (unsigned int *)) dlsym (nvml.lib, "nvmlDeviceGetCount_v2");
  nvml.by_index = (nvmlReturn_t (*) (unsigned int, nvmlDevice_t *)) dlsym (nvml.lib, "nvmlDeviceGetHandleByIndex_v2");
  nvml.by_bus = (nvmlReturn_t (*) (const char *, nvmlDevice_t *)) dlsym (nvml.lib, "nvmlDeviceGetHandleByPciBusId_v2");
  nvml.memory = (nvmlReturn_t (*) (nvmlDevice_t, Memory *)) dlsym (nvml.lib, "nvmlDeviceGetMemoryInfo");
  nvml.procs = (nvmlReturn_t (*) (nvmlDevice_t, unsigned int *, ProcessInfo *))
    dlsym (nvml.lib, "nvmlDeviceGetComputeRunningProcesses_v3");
  if (nvml.procs == NULL)
    nvml.procs = (nvmlReturn_t (*) (nvmlDevice_t, unsigned int *, ProcessInfo *))
      dlsym (nvml.lib, "nvmlDeviceGetComputeRunningProcesses_v2");
  if (nvml.procs == NULL)
    nvml.procs_v1 = (nvmlReturn_t (*) (nvmlDevice_t, unsigned int *, ProcessInfoV1 *))
      dlsym (nvml.lib, "nvmlDeviceGetComputeRunningProcesses");
  nvml.error_string = (const char *(*) (nvmlReturn_t)) dlsym (nvml.lib, "nvmlErrorString");
  if (nvml.init == NULL || nvml.count == NULL || nvml.by_index == NULL
      || (nvml.procs == NULL && nvml.procs_v1 == NULL))
    {
      nvml.why = g_strdup_printf ("%s lacks the NVML calls needed", name);
      return NULL;
    }
  if ((r = nvml.init ()) != NVML_SUCCESS)
    nvml.why = g_strdup_printf ("NVML did not start: %s", nvml_error (r));
  return NULL;
}

/* @dev's compute processes' memory used by @pid; FALSE if not listed. */
static gboolean
process_on (nvmlDevice_t dev, guint pid, guint64 *used, char **why)
{
  unsigned int n = 16;
  nvmlReturn_t r;

  for (int tries = 0; tries < 4; tries++)
    {
      g_autofree ProcessInfo *info = NULL;
      g_autofree ProcessInfoV1 *info1 = NULL;
      unsigned int got = n;

      if (nvml.procs != NULL)
        r = nvml.procs (dev, &got, info = g_new0 (ProcessInfo, n));
      else
        r = nvml.procs_v1 (dev, &got, info1 = g_new0 (ProcessInfoV1, n));
      if (r == NVML_ERROR_INSUFFICIENT_SIZE)
        {
          n = MAX (got, n) * 2;
          continue;
        }
      if (r != NVML_SUCCESS)
        {
          if (why != NULL && *why == NULL)
            *why = g_strdup_printf ("NVML could not list the GPU's processes: %s", nvml_error (r));
          return FALSE;
        }
      for (unsigned int i = 0; i < got && i < n; i++)
        {
          guint p = info != NULL ? info[i].pid : info1[i].pid;
          unsigned long long u = info != NULL ? info[i].usedGpuMemory : info1[i].usedGpuMemory;
          if (p != pid)
            continue;
          if (u == NVML_VALUE_NOT_AVAILABLE)
            {
              if (why != NULL && *why == NULL)
                *why = g_strdup ("NVML lists this process but not its memory");
              return FALSE;
            }
          *used = u;
          return TRUE;
        }
      return FALSE;
    }
  if (why != NULL && *why == NULL)
    *why = g_strdup ("the GPU's process list kept growing");
  return FALSE;
}

gboolean
um_nvml_usage_for (guint pid, const char *pci_bus_id, UmNvmlUsage *out, char **why)
{
  static GOnce once = G_ONCE_INIT;
  unsigned int count = 0;
  nvmlReturn_t r;
  g_autofree char *reason = NULL;

  memset (out, 0, sizeof *out);
  if (why != NULL)
    *why = NULL;
  g_once (&once, open_nvml, NULL);
  if (nvml.why != NULL)
    {
      if (why != NULL)
        *why = g_strdup (nvml.why);
      return FALSE;
    }
  if ((r = nvml.count (&count)) != NVML_SUCCESS)
    {
      if (why != NULL)
        *why = g_strdup_printf ("NVML could not count the GPUs: %s", nvml_error (r));
      return FALSE;
    }
  for (unsigned int i = 0; i < count; i++)
    {
      nvmlDevice_t dev = NULL;
      guint64 used = 0;
      Memory mem = { 0 };

      if (nvml.by_index (i, &dev) != NVML_SUCCESS)
        continue;
      if (pci_bus_id != NULL && *pci_bus_id != 0 && nvml.by_bus != NULL)
        {
          nvmlDevice_t want = NULL;
          if (nvml.by_bus (pci_bus_id, &want) == NVML_SUCCESS && want != dev)
            continue;
        }
      out->n_devices++;
      if (nvml.memory != NULL && nvml.memory (dev, &mem) == NVML_SUCCESS)
        {
          out->device_used += mem.used;
          out->device_total += mem.total;
        }
      if (process_on (dev, pid, &used, &reason))
        {
          out->used_bytes += used;
          out->n_listing++;
        }
    }
  if (out->n_listing == 0)
    {
      if (why != NULL)
        *why = reason != NULL ? g_steal_pointer (&reason)
                              : g_strdup_printf ("NVML does not list process %u on %s GPU (a container's pids "
                                                 "differ from the driver's)", pid,
                                                 out->n_devices == 1 ? "the" : "any");
      return FALSE;
    }
  return TRUE;
}

gboolean
um_nvml_process_usage (UmNvmlUsage *out, char **why)
{
  return um_nvml_usage_for ((guint) getpid (), NULL, out, why);
}

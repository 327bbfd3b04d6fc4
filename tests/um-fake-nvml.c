/* A stand-in for libnvidia-ml (test-nvml): the few NVML calls um-nvml.c
 * makes, with nvml.h's signatures and struct layouts, over one device
 * whose compute processes are the test's own pid (using
 * UM_FAKE_NVML_USED bytes) and, with UM_FAKE_NVML_OTHERS=N, N other pids
 * listed first (so the list outgrows um-nvml.c's first buffer). With
 * UM_FAKE_NVML_HIDE set, the test's pid is not listed (as in a container). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
  unsigned int       pid;
  unsigned long long usedGpuMemory;
  unsigned int       gpuInstanceId;
  unsigned int       computeInstanceId;
} ProcessInfo;

typedef struct {
  unsigned long long total, free, used;
} Memory;

/* The entry points, as nvml.h declares them (exported for dlsym). */
int nvmlInit_v2 (void);
const char *nvmlErrorString (int r);
int nvmlDeviceGetCount_v2 (unsigned int *n);
int nvmlDeviceGetHandleByIndex_v2 (unsigned int i, void **dev);
int nvmlDeviceGetMemoryInfo (void *dev, Memory *m);
int nvmlDeviceGetComputeRunningProcesses_v3 (void *dev, unsigned int *count, ProcessInfo *info);

static int device;   /* its address is the handle */

int nvmlInit_v2 (void) { return 0; }
const char *nvmlErrorString (int r) { return r == 7 ? "Insufficient Size" : "fake error"; }
int nvmlDeviceGetCount_v2 (unsigned int *n) { *n = 1; return 0; }

int
nvmlDeviceGetHandleByIndex_v2 (unsigned int i, void **dev)
{
  if (i != 0)
    return 2;
  *dev = &device;
  return 0;
}

int
nvmlDeviceGetMemoryInfo (void *dev, Memory *m)
{
  (void) dev;
  m->total = 80ull << 30;
  m->used = strtoull (getenv ("UM_FAKE_NVML_USED") ? getenv ("UM_FAKE_NVML_USED") : "0", NULL, 10) + (1ull << 30);
  m->free = m->total - m->used;
  return 0;
}

int
nvmlDeviceGetComputeRunningProcesses_v3 (void *dev, unsigned int *count, ProcessInfo *info)
{
  const char *others = getenv ("UM_FAKE_NVML_OTHERS");
  unsigned int n_others = others ? (unsigned int) atoi (others) : 0;
  unsigned int n = n_others + (getenv ("UM_FAKE_NVML_HIDE") ? 0 : 1);

  (void) dev;
  if (*count < n)
    {
      *count = n;
      return 7;   /* NVML_ERROR_INSUFFICIENT_SIZE */
    }
  for (unsigned int i = 0; i < n_others; i++)
    {
      memset (&info[i], 0, sizeof info[i]);
      info[i].pid = 1000000 + i;
      info[i].usedGpuMemory = 1ull << 20;
    }
  if (n > n_others)
    {
      memset (&info[n_others], 0, sizeof info[n_others]);
      info[n_others].pid = (unsigned int) getpid ();
      info[n_others].usedGpuMemory = strtoull (getenv ("UM_FAKE_NVML_USED") ? getenv ("UM_FAKE_NVML_USED") : "0",
                                               NULL, 10);
    }
  *count = n;
  return 0;
}

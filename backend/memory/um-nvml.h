/* um-nvml.h — the GPU memory a process holds, as the NVIDIA driver counts
 * it (NVML, what nvidia-smi shows): the measurement from outside that the
 * backend's own accounting is checked against, and the figure the Memory
 * page shows while a model runs on a GPU.
 *
 * libnvidia-ml is opened at run time (dlopen), so nothing links it and a
 * machine without the NVIDIA driver simply has no reading: every function
 * then returns FALSE with the reason, never fails harder.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef struct {
  guint64 used_bytes;      /* this process's device memory, over the devices that list it */
  guint   n_devices;       /* devices NVML sees */
  guint   n_listing;       /* of which list this process among their compute processes */
  guint64 device_used;     /* the devices' used memory (every process), for a reading without the pid */
  guint64 device_total;
} UmNvmlUsage;

/* This process's device memory now (pid: getpid ()). FALSE with @why
 * (may be NULL; free it) when NVML is not there, fails, or does not list
 * the process (a container's pid namespace hides it from the driver): the
 * device-wide figures may then still be set. The library is libnvidia-ml.so.1,
 * or $UNMASK_NVML_LIBRARY. */
gboolean um_nvml_process_usage (UmNvmlUsage *out, char **why);

/* The same for @pid, on the device whose PCI bus id is @pci_bus_id (NULL:
 * every device). */
gboolean um_nvml_usage_for (guint pid, const char *pci_bus_id, UmNvmlUsage *out, char **why);

G_END_DECLS

/* um-cuda-report.h — the device probe shared by the GPU report and the
 * CUDA backend (gpu/um-cuda-report.c). */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* Why no CUDA device is usable (no driver, one too old, no device), or
 * NULL with *count set to the number of devices. */
char *um_cuda_probe_devices (int *count);

G_END_DECLS

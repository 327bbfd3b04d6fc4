/* um-backend-cuda.h — the CUDA backend as the engine sees it. Declared here,
 * in the engine, and implemented by gpu/ (as ggml-backend does): by the CUDA
 * code when meson finds the toolkit, otherwise by gpu/um-gpu-none.c, whose
 * entry points report why there is no GPU. So backend/ includes nothing from
 * gpu/, and no CUDA types appear here. */
#pragma once

#include <glib.h>

#include "um-backend.h"

G_BEGIN_DECLS

typedef struct {
  int     index;
  char    name[256];
  int     cc_major;
  int     cc_minor;
  int     multiprocessors;
  guint64 total_bytes;
  guint64 free_bytes;
} UmGpuDevice;

typedef struct {
  gboolean built_with_cuda;
  int      driver_version;   /* e.g. 13000, 0 if no driver */
  int      runtime_version;  /* the CUDA runtime Unmask was built with */
  GArray  *devices;          /* UmGpuDevice; empty if none usable */
  char    *why_none;         /* set when no device is usable */
  char    *not_usable;       /* GPUs found but not usable, each with the reason ("; " between); NULL if none */
} UmGpuReport;

/* What GPUs this build can use on this machine, and why none if so. Never
 * fails: a missing driver or device is a report, not an error. */
UmGpuReport *um_gpu_report_new (void);

static inline void
um_gpu_report_free (UmGpuReport *report)
{
  if (report == NULL)
    return;
  g_array_unref (report->devices);
  g_free (report->why_none);
  g_free (report->not_usable);
  g_free (report);
}

/* The CUDA compute backend on @device. @budget_bytes 0 means the device's
 * free memory less a safety margin. Fails with a GError (no driver, no
 * device, no cuBLAS, out of memory), never aborts. */
UmBackend   *um_backend_cuda_new (int device, guint64 budget_bytes, GError **error);
/* um_backend_cuda_new () with @cap_bytes (> 0) a hard cap on everything the
 * backend holds on the device: buffers and weights, and also the CUDA
 * context (estimated from its limits), cuBLAS's handle and workspace and the
 * backend's work memory, which the plain budget leaves outside. A cap that
 * does not hold the context and cuBLAS fails here; any allocation past it
 * fails with UM_ERROR_OUT_OF_MEMORY. What --budget means (the engine). */
UmBackend   *um_backend_cuda_new_capped (int device, guint64 cap_bytes, GError **error);

/* The device time of @be's matrix products so far, measured on the GPU
 * with events (the host's clock around the calls sees only their queueing);
 * waits for the queued work. FALSE when @be is not a CUDA backend. */
gboolean     um_backend_cuda_matmul_seconds (UmBackend *be, double *seconds);

/* Fixed-shape segments of forward passes as CUDA graphs, since @be was
 * made: recorded, replayed, and run again as usual (a recording that could
 * not be made or replayed). FALSE when @be is not a CUDA backend. */
typedef struct {
  guint64 recorded;
  guint64 replayed;
  guint64 redone;
} UmCudaGraphStats;

gboolean     um_backend_cuda_graph_stats (UmBackend *be, UmCudaGraphStats *stats);

/* The device's own view of its memory (cudaMemGetInfo), beside the
 * backend's accounting (mem_info): what a measurement from outside sees.
 * The device counts every process, so the figures for this one are
 * differences from the reading taken once its CUDA context existed. */
typedef struct {
  guint64 total;
  guint64 free;              /* now */
  guint64 used_at_start;     /* total − free once the context was made: other processes' and our context */
  guint64 used_peak;         /* the most total − free seen since (at allocations and reports) */
  guint64 delta_peak;        /* used_peak − used_at_start: what this process took after its context
                              * (cuBLAS, its workspace, kernels loaded, buffers, weights, work memory),
                              * if no other process allocated meanwhile */
  guint64 context_estimate;  /* the context itself, estimated from its limits (not measurable) */
  char    pci_bus_id[32];    /* e.g. 0000:3B:00.0, to find the device in NVML; empty if unknown */
} UmCudaDeviceUsage;

/* FALSE when @be is not a CUDA backend. */
gboolean     um_backend_cuda_device_usage (UmBackend *be, UmCudaDeviceUsage *out);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmGpuReport, um_gpu_report_free)

G_END_DECLS

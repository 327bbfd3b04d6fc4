/* um-memory-monitor.h — live memory figures for the window: the process's
 * resident memory, the machine's RAM, and the compute backend's device
 * memory (budget, in use, peak) once a model is loaded. Samples once a
 * second and keeps a short history for the graph. */
#pragma once

#include <glib-object.h>

#include "um-engine.h"

G_BEGIN_DECLS

#define UM_TYPE_MEMORY_MONITOR (um_memory_monitor_get_type ())
G_DECLARE_FINAL_TYPE (UmMemoryMonitor, um_memory_monitor, UM, MEMORY_MONITOR, GObject)

#define UM_MEMORY_HISTORY 120

typedef struct {
  guint64 process_rss;      /* bytes resident in this process (weights mapped in count) */
  guint64 ram_total;
  guint64 ram_available;
  guint64 device_in_use;    /* compute backend buffers (weights not included) */
  guint64 device_peak;
  guint64 device_used;      /* all the backend holds: buffers and resident weights */
  guint64 device_budget;    /* 0: none */
  guint64 device_total;     /* 0: not a GPU / unknown */
  guint64 weights_bytes;    /* the model's weights as stored */
  gboolean has_device;      /* a GPU backend is in use */
  gboolean has_engine;      /* a model is loaded: the device figures are its backend's */
  guint64 device_weights;   /* of device_used: resident weights */
  guint64 device_overhead;  /* held by the backend outside its budget: a GPU's context and
                             * cuBLAS, the CPU's product scratch */
  /* On a GPU: all this process holds there, as the driver counts it (NVML,
   * what nvidia-smi shows) where NVML is there; else the backend's
   * accounting (device_used + device_overhead), and device_process_nvml
   * FALSE so the page says which. */
  guint64 device_process;
  gboolean device_process_nvml;
} UmMemorySample;

UmMemoryMonitor *um_memory_monitor_new (void);
/* The engine whose backend to watch (not owned; NULL to stop). */
void             um_memory_monitor_set_engine (UmMemoryMonitor *self, UmEngine *engine);
/* Takes a sample now (also done every second); emits "updated". */
void             um_memory_monitor_sample (UmMemoryMonitor *self);
const UmMemorySample *um_memory_monitor_get_latest (UmMemoryMonitor *self);
/* Oldest first; *n_samples ≤ UM_MEMORY_HISTORY. */
const UmMemorySample *um_memory_monitor_get_history (UmMemoryMonitor *self, guint *n_samples);
/* The plan the engine was loaded with, per component (NULL without one). */
const UmPlan    *um_memory_monitor_get_plan (UmMemoryMonitor *self);
/* Where the model computes, e.g. "CPU" or "GPU (CUDA)", and why not on the
 * GPU when that applies (both newly allocated; @why may be NULL). */
char            *um_memory_monitor_describe_compute (UmMemoryMonitor *self, char **why);
/* Short text for the header bar, e.g. "RAM 2.1 GB". */
char            *um_memory_monitor_format_summary (UmMemoryMonitor *self);

/* Reads /proc; exposed for tests. */
gboolean         um_memory_read_process_rss (guint64 *bytes);
gboolean         um_memory_read_system (guint64 *total, guint64 *available);

G_END_DECLS

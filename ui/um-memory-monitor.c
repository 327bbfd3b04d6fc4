#include "config.h"

#include "um-memory-monitor.h"

#include <glib/gi18n.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "um-backend-cuda.h"
#include "um-nvml.h"

struct _UmMemoryMonitor {
  GObject         parent_instance;
  UmEngine       *engine;
  guint           timeout_id;
  UmMemorySample  history[UM_MEMORY_HISTORY];
  guint           n_samples;
  guint           head;      /* next slot */
  UmMemorySample  ordered[UM_MEMORY_HISTORY];
};

G_DEFINE_FINAL_TYPE (UmMemoryMonitor, um_memory_monitor, G_TYPE_OBJECT)

enum { UPDATED, N_SIGNALS };
static guint signals[N_SIGNALS];

gboolean
um_memory_read_process_rss (guint64 *bytes)
{
  /* statm: size resident shared ... in pages */
  g_autofree char *text = NULL;
  unsigned long long size, resident;

  if (!g_file_get_contents ("/proc/self/statm", &text, NULL, NULL)
      || sscanf (text, "%llu %llu", &size, &resident) != 2)
    return FALSE;
  *bytes = (guint64) resident * (guint64) sysconf (_SC_PAGESIZE);
  return TRUE;
}

gboolean
um_memory_read_system (guint64 *total, guint64 *available)
{
  g_autofree char *text = NULL;
  g_auto(GStrv) lines = NULL;
  gboolean have_total = FALSE, have_avail = FALSE;

  if (!g_file_get_contents ("/proc/meminfo", &text, NULL, NULL))
    return FALSE;
  lines = g_strsplit (text, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++)
    {
      unsigned long long kb;
      if (sscanf (lines[i], "MemTotal: %llu kB", &kb) == 1)
        *total = kb * 1024, have_total = TRUE;
      else if (sscanf (lines[i], "MemAvailable: %llu kB", &kb) == 1)
        *available = kb * 1024, have_avail = TRUE;
    }
  return have_total && have_avail;
}

void
um_memory_monitor_sample (UmMemoryMonitor *self)
{
  UmMemorySample s = { 0 };

  um_memory_read_process_rss (&s.process_rss);
  um_memory_read_system (&s.ram_total, &s.ram_available);
  if (self->engine != NULL)
    {
      UmBackend *be = um_engine_get_backend (self->engine);
      UmBackendMemInfo mem;
      be->ops->mem_info (be, &mem);
      /* The backend counts resident weights in its memory (they are device
       * memory); the buffers row shows the rest. */
      s.device_used = mem.in_use;
      s.device_in_use = mem.in_use - MIN (mem.in_use, mem.weight_bytes);
      s.device_peak = mem.peak - MIN (mem.peak, mem.weight_bytes);
      s.device_budget = mem.budget;
      s.device_total = mem.total;
      s.has_device = mem.total > 0;
      s.has_engine = TRUE;
      s.device_weights = mem.weight_bytes;
      s.device_overhead = mem.overhead;
      s.weights_bytes = um_model_weight_bytes (um_engine_get_model (self->engine));
      s.device_process = mem.in_use + mem.overhead;
      if (s.has_device)
        {
          UmCudaDeviceUsage u;
          UmNvmlUsage n;
          if (um_backend_cuda_device_usage (be, &u) && um_nvml_usage_for ((guint) getpid (), u.pci_bus_id, &n, NULL))
            {
              s.device_process = n.used_bytes;
              s.device_process_nvml = TRUE;
            }
        }
    }
  self->history[self->head] = s;
  self->head = (self->head + 1) % UM_MEMORY_HISTORY;
  self->n_samples = MIN (self->n_samples + 1, UM_MEMORY_HISTORY);
  g_signal_emit (self, signals[UPDATED], 0);
}

static gboolean
on_timeout (gpointer data)
{
  um_memory_monitor_sample (UM_MEMORY_MONITOR (data));
  return G_SOURCE_CONTINUE;
}

const UmMemorySample *
um_memory_monitor_get_latest (UmMemoryMonitor *self)
{
  if (self->n_samples == 0)
    um_memory_monitor_sample (self);
  return &self->history[(self->head + UM_MEMORY_HISTORY - 1) % UM_MEMORY_HISTORY];
}

const UmMemorySample *
um_memory_monitor_get_history (UmMemoryMonitor *self, guint *n_samples)
{
  guint start = (self->head + UM_MEMORY_HISTORY - self->n_samples) % UM_MEMORY_HISTORY;
  for (guint i = 0; i < self->n_samples; i++)
    self->ordered[i] = self->history[(start + i) % UM_MEMORY_HISTORY];
  *n_samples = self->n_samples;
  return self->ordered;
}

const UmPlan *
um_memory_monitor_get_plan (UmMemoryMonitor *self)
{
  return self->engine ? um_engine_get_plan (self->engine) : NULL;
}

char *
um_memory_monitor_describe_compute (UmMemoryMonitor *self, char **why)
{
  const char *name;

  *why = NULL;
  if (self->engine == NULL)
    return g_strdup (_("No model loaded"));
  name = um_backend_name (um_engine_get_backend (self->engine));
  if (um_engine_get_notice (self->engine) != NULL)
    *why = g_strdup (um_engine_get_notice (self->engine));
  if (g_str_equal (name, "cuda"))
    return g_strdup (_("GPU (CUDA)"));
  return g_strdup (_("CPU"));
}

char *
um_memory_monitor_format_summary (UmMemoryMonitor *self)
{
  const UmMemorySample *s = um_memory_monitor_get_latest (self);
  g_autofree char *rss = g_format_size (s->process_rss);
  if (s->has_device)
    {
      g_autofree char *dev = g_format_size (s->device_used);
      /* Translators: memory in use by Unmask, e.g. "RAM 2.1 GB · VRAM 7.9 GB" */
      return g_strdup_printf (_("RAM %s · VRAM %s"), rss, dev);
    }
  return g_strdup_printf (_("RAM %s"), rss);
}

void
um_memory_monitor_set_engine (UmMemoryMonitor *self, UmEngine *engine)
{
  self->engine = engine;
  um_memory_monitor_sample (self);
}

static void
um_memory_monitor_finalize (GObject *object)
{
  UmMemoryMonitor *self = UM_MEMORY_MONITOR (object);
  g_clear_handle_id (&self->timeout_id, g_source_remove);
  G_OBJECT_CLASS (um_memory_monitor_parent_class)->finalize (object);
}

static void
um_memory_monitor_class_init (UmMemoryMonitorClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = um_memory_monitor_finalize;
  signals[UPDATED] = g_signal_new ("updated", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                                   0, NULL, NULL, NULL, G_TYPE_NONE, 0);
}

static void
um_memory_monitor_init (UmMemoryMonitor *self)
{
  self->timeout_id = g_timeout_add_seconds (1, on_timeout, self);
}

UmMemoryMonitor *
um_memory_monitor_new (void)
{
  return g_object_new (UM_TYPE_MEMORY_MONITOR, NULL);
}

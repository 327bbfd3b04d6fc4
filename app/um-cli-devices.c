/* unmask-cli devices — the GPUs this build can use, or why none. */
#include "config.h"

#include <stdio.h>

#include "um-cli.h"
#include "um-backend-cuda.h"
#include "um-json.h"

static char *
version_string (int v)
{
  return v > 0 ? g_strdup_printf ("%d.%d", v / 1000, (v % 1000) / 10) : g_strdup ("none");
}

int
um_cli_devices (int argc, char **argv)
{
  g_autoptr(GOptionContext) ctx = g_option_context_new ("— list the GPUs Unmask can use");
  gboolean json = FALSE;
  GOptionEntry entries[] = {
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "JSON output", NULL },
    { NULL }
  };
  g_autoptr(UmGpuReport) r = NULL;
  g_autofree char *driver = NULL, *runtime = NULL;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!um_cli_parse_options (ctx, &argc, &argv))
    return 2;
  r = um_gpu_report_new ();
  driver = version_string (r->driver_version);
  runtime = version_string (r->runtime_version);

  if (json)
    {
      g_autoptr(JsonBuilder) b = json_builder_new ();
      g_autoptr(JsonNode) root = NULL;
      json_builder_begin_object (b);
      um_json_add_bool (b, "built_with_cuda", r->built_with_cuda);
      um_json_add_string (b, "driver_version", driver);
      um_json_add_string (b, "runtime_version", runtime);
      json_builder_set_member_name (b, "devices");
      json_builder_begin_array (b);
      for (guint i = 0; i < r->devices->len; i++)
        {
          const UmGpuDevice *d = &g_array_index (r->devices, UmGpuDevice, i);
          g_autofree char *cc = g_strdup_printf ("%d.%d", d->cc_major, d->cc_minor);
          json_builder_begin_object (b);
          um_json_add_int (b, "index", d->index);
          um_json_add_string (b, "name", d->name);
          um_json_add_string (b, "compute_capability", cc);
          um_json_add_int (b, "multiprocessors", d->multiprocessors);
          um_json_add_int (b, "total_bytes", d->total_bytes);
          um_json_add_int (b, "free_bytes", d->free_bytes);
          json_builder_end_object (b);
        }
      json_builder_end_array (b);
      if (r->why_none)
        um_json_add_string (b, "why_none", r->why_none);
      if (r->not_usable)
        um_json_add_string (b, "not_usable", r->not_usable);
      json_builder_end_object (b);
      root = json_builder_get_root (b);
      um_cli_print_json (root, TRUE);
      return 0;
    }

  printf ("CUDA in this build: %s; runtime %s; driver %s\n",
          r->built_with_cuda ? "yes" : "no", runtime, driver);
  for (guint i = 0; i < r->devices->len; i++)
    {
      const UmGpuDevice *d = &g_array_index (r->devices, UmGpuDevice, i);
      printf ("  [%d] %s — compute capability %d.%d, %d SMs, %.1f GiB (%.1f GiB free)\n", d->index, d->name,
              d->cc_major, d->cc_minor, d->multiprocessors, d->total_bytes / 1073741824.0,
              d->free_bytes / 1073741824.0);
    }
  if (r->not_usable != NULL && r->devices->len > 0)
    printf ("Not usable: %s.\n", r->not_usable);
  if (r->devices->len == 0)
    printf ("No usable GPU: %s. Unmask runs on the CPU.\n", r->why_none ? r->why_none : "unknown reason");
  return 0;
}

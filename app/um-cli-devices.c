/* unmask-cli devices — the GPUs this build can use, or why none. */
#include "config.h"

#include <stdio.h>

#include "um-cli.h"
#include "um-backend-cuda.h"

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
      json_builder_set_member_name (b, "built_with_cuda");
      json_builder_add_boolean_value (b, r->built_with_cuda);
      json_builder_set_member_name (b, "driver_version");
      json_builder_add_string_value (b, driver);
      json_builder_set_member_name (b, "runtime_version");
      json_builder_add_string_value (b, runtime);
      json_builder_set_member_name (b, "devices");
      json_builder_begin_array (b);
      for (guint i = 0; i < r->devices->len; i++)
        {
          const UmGpuDevice *d = &g_array_index (r->devices, UmGpuDevice, i);
          g_autofree char *cc = g_strdup_printf ("%d.%d", d->cc_major, d->cc_minor);
          json_builder_begin_object (b);
          json_builder_set_member_name (b, "index");
          json_builder_add_int_value (b, d->index);
          json_builder_set_member_name (b, "name");
          json_builder_add_string_value (b, d->name);
          json_builder_set_member_name (b, "compute_capability");
          json_builder_add_string_value (b, cc);
          json_builder_set_member_name (b, "multiprocessors");
          json_builder_add_int_value (b, d->multiprocessors);
          json_builder_set_member_name (b, "total_bytes");
          json_builder_add_int_value (b, d->total_bytes);
          json_builder_set_member_name (b, "free_bytes");
          json_builder_add_int_value (b, d->free_bytes);
          json_builder_end_object (b);
        }
      json_builder_end_array (b);
      if (r->why_none)
        {
          json_builder_set_member_name (b, "why_none");
          json_builder_add_string_value (b, r->why_none);
        }
      if (r->not_usable)
        {
          json_builder_set_member_name (b, "not_usable");
          json_builder_add_string_value (b, r->not_usable);
        }
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

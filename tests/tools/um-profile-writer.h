/* um-profile-writer.h — the two profile versions um-profile-writer
 * alternates between, shared with test-profile-kill (header only). */
#pragma once

#include "um-profile.h"

static inline UmProfile *
um_profile_writer_version (int which)
{
  UmProfile *p = um_profile_new_default ();

  if (which == 0)
    {
      UmProfileOverride *o = g_new0 (UmProfileOverride, 1);
      um_profile_set_mode (p, UM_MEM_EXTREME_MODERATE);
      p->device = UM_DEVICE_CPU;
      p->memory_budget = 3ull << 30;
      p->mem.host_zstd = TRUE;
      o->model_id = g_strdup ("0123456789abcdef");
      um_mem_options_init (&o->mem, UM_MEM_EXTREME_AGGRESSIVE);
      o->mem.resident_layers = 4;
      g_ptr_array_add (p->overrides, o);
      p->reason = g_strdup ("version 0");
    }
  else
    {
      um_profile_set_mode (p, UM_MEM_STANDARD_8BIT);
      p->n_threads = 2;
      p->mem.prune_heads = 0.125;
      p->default_gen_length = 96;
      p->reason = g_strdup ("version 1 — a longer reason, so the two files differ in size as well as in content");
    }
  p->written_by = UM_PROFILE_BY_USER;
  p->written_at = 1764000000 + which;
  return p;
}

/* um-profile-writer.h — the profile versions um-profile-writer commits,
 * shared with test-profile-kill (header only). Version k is a function of
 * k alone, every field that is written (reason and time included), so a
 * profile on disk names exactly one version. */
#pragma once

#include <stdlib.h>
#include <string.h>

#include "um-profile.h"

static inline UmProfile *
um_profile_writer_version (guint64 k)
{
  UmProfile *p = um_profile_new_default ();

  um_profile_set_mode (p, (UmMemMode) (k % UM_MEM_N_MODES));
  p->device = k % 3 == 0 ? UM_DEVICE_CPU : UM_DEVICE_AUTO;
  p->memory_budget = (k + 1) << 20;
  p->n_threads = (int) (k % 8);
  p->written_by = UM_PROFILE_BY_USER;
  p->written_at = 1764000000 + (gint64) k;
  p->reason = g_strdup_printf ("version %" G_GUINT64_FORMAT, k);
  return p;
}

/* The version @p is, or -1 if it is none of them. */
static inline gint64
um_profile_writer_which (const UmProfile *p)
{
  guint64 k;
  char *end = NULL;

  if (p->reason == NULL || !g_str_has_prefix (p->reason, "version "))
    return -1;
  k = g_ascii_strtoull (p->reason + 8, &end, 10);
  return end != NULL && *end == '\0' ? (gint64) k : -1;
}

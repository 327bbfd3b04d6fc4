/* um-kprof.c — per-family time of the CPU kernels (see um-kprof.h). */
#include "um-kprof.h"

gboolean um_kprof_on = FALSE;

static int64_t totals[UM_KPROF_N];
static gboolean in_head = FALSE;

static const char *const names[UM_KPROF_N] = {
  "matmul", "attn_qk", "softmax", "attn_pv", "rope", "rmsnorm", "elementwise", "copies", "logits_head",
  "moe_routing", "choose",
};

void
um_kprof_enable (gboolean on)
{
  if (on && !um_kprof_on)
    um_kprof_reset ();
  um_kprof_on = on;
}

void
um_kprof_reset (void)
{
  for (int i = 0; i < UM_KPROF_N; i++)
    totals[i] = 0;
}

void
um_kprof_get (double seconds[UM_KPROF_N])
{
  for (int i = 0; i < UM_KPROF_N; i++)
    seconds[i] = totals[i] / 1e9;
}

const char *
um_kprof_family_name (UmKprofFamily f)
{
  return (unsigned) f < UM_KPROF_N ? names[f] : "unknown";
}

void
um_kprof_set_head (gboolean head)
{
  in_head = head;
}

gboolean
um_kprof_in_head (void)
{
  return in_head;
}

void
um_kprof_add (UmKprofFamily f, int64_t ns)
{
  if ((unsigned) f < UM_KPROF_N)
    totals[f] += ns;
}

/* um-mode-limits.c — the mode pill's name and its parameter limits (see
 * um-mode-limits.h). */
#include "config.h"

#include "um-mode-limits.h"

#include <glib/gi18n.h>
#include <string.h>

void
um_mode_info_from_profile (UmModeInfo *info, const UmProfile *profile, const char *model_id)
{
  UmMemMode mode = profile->mem.mode;

  memset (info, 0, sizeof *info);
  for (guint i = 0; model_id != NULL && profile->overrides != NULL && i < profile->overrides->len; i++)
    {
      const UmProfileOverride *o = g_ptr_array_index (profile->overrides, i);
      if (g_strcmp0 (o->model_id, model_id) == 0)
        mode = o->mem.mode;
    }
  info->mode = mode;
  if (mode == profile->mem.mode)
    {
      info->limit_gen = profile->limit_gen_length;
      info->limit_block = profile->limit_block_length;
      info->limit_steps = profile->limit_steps;
      info->default_gen = profile->default_gen_length;
      info->default_block = profile->default_block_length;
      info->default_steps = profile->default_steps;
    }
  else
    um_mem_mode_limits (mode, &info->limit_gen, &info->limit_block, &info->limit_steps);
}

const char *
um_mode_info_name (const UmModeInfo *info)
{
  return um_mem_mode_to_string (info->mode);
}

char *
um_mode_info_check (const UmModeInfo *info, const UmGenParams *p)
{
  g_autoptr(GPtrArray) parts = g_ptr_array_new_with_free_func (g_free);
  g_autofree char *list = NULL;

  if (info->limit_gen > 0 && p->gen_length > info->limit_gen)
    /* Translators: part of a list of recommended limits, e.g. "length ≤ 64" */
    g_ptr_array_add (parts, g_strdup_printf (_("length ≤ %d"), info->limit_gen));
  if (info->limit_block > 0 && p->block_length > info->limit_block)
    g_ptr_array_add (parts, g_strdup_printf (_("block length ≤ %d"), info->limit_block));
  if (info->limit_steps > 0 && p->steps > info->limit_steps)
    g_ptr_array_add (parts, g_strdup_printf (_("steps ≤ %d"), info->limit_steps));
  if (parts->len == 0)
    return NULL;
  g_ptr_array_add (parts, NULL);
  list = g_strjoinv (", ", (char **) parts->pdata);
  /* Translators: %s is a memory mode, e.g. "extreme-moderate"; then a list such as "length ≤ 64, steps ≤ 64" */
  return g_strdup_printf (_("The memory mode %s recommends %s: longer canvases need more memory than it planned "
                            "for, and the run may fail or be slow."),
                          um_mode_info_name (info), list);
}

void
um_mode_info_recommend (const UmModeInfo *info, UmGenParams *p)
{
  int blocks;

  if (info->default_gen > 0)
    p->gen_length = info->default_gen;
  if (info->limit_gen > 0)
    p->gen_length = MIN (p->gen_length, info->limit_gen);
  if (info->default_block > 0)
    p->block_length = info->default_block;
  if (info->limit_block > 0)
    p->block_length = MIN (p->block_length, info->limit_block);
  if (info->default_steps > 0)
    p->steps = info->default_steps;
  if (info->limit_steps > 0)
    p->steps = MIN (p->steps, info->limit_steps);
  p->gen_length = MAX (p->gen_length, 1);
  p->block_length = CLAMP (p->block_length, 1, p->gen_length);
  /* A whole number of blocks, and of steps per block. */
  p->gen_length -= p->gen_length % p->block_length;
  blocks = p->gen_length / p->block_length;
  p->steps = MAX (p->steps - p->steps % blocks, blocks);
}

gboolean
um_limits_warning_set (UmLimitsWarning *w, char *warning)
{
  if (warning == NULL)
    g_clear_pointer (&w->dismissed, g_free);
  g_free (w->warning);
  w->warning = warning;
  return warning != NULL && g_strcmp0 (warning, w->dismissed) != 0;
}

void
um_limits_warning_dismiss (UmLimitsWarning *w)
{
  g_free (w->dismissed);
  w->dismissed = g_strdup (w->warning);
}

void
um_limits_warning_clear (UmLimitsWarning *w)
{
  g_clear_pointer (&w->warning, g_free);
  g_clear_pointer (&w->dismissed, g_free);
}

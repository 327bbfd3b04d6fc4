/* um-optimizer.c — the one-click optimizer: probe, plan every mode, pick. */
#include "um-optimizer.h"

#include <math.h>
#include <string.h>

#include "um-backups.h"
#include "um-error.h"

static char *
cpu_name (void)
{
  g_autofree char *info = NULL;
  static const char *const keys[] = { "model name", "Model", "Hardware", "cpu model" };

  if (g_file_get_contents ("/proc/cpuinfo", &info, NULL, NULL))
    for (guint k = 0; k < G_N_ELEMENTS (keys); k++)
      {
        g_auto(GStrv) lines = g_strsplit (info, "\n", -1);
        for (guint i = 0; lines[i] != NULL; i++)
          {
            const char *colon = strchr (lines[i], ':');
            g_autofree char *name = NULL;
            if (colon == NULL || !g_str_has_prefix (lines[i], keys[k]))
              continue;
            name = g_strstrip (g_strndup (lines[i], colon - lines[i]));
            if (g_str_equal (name, keys[k]) && colon[1] != '\0')
              return g_strstrip (g_strdup (colon + 1));
          }
      }
  return g_strdup ("unknown CPU");
}

UmHardware *
um_hardware_probe (void)
{
  UmHardware *hw = g_new0 (UmHardware, 1);
  g_autoptr(UmGpuReport) report = um_gpu_report_new ();
  hw->gpus = g_array_ref (report->devices);
  hw->why_no_gpu = hw->gpus->len == 0 ? g_strdup (report->why_none ? report->why_none : "no usable GPU") : NULL;
  um_host_memory (&hw->ram_total, &hw->ram_available);
  hw->cores = (int) g_get_num_processors ();
  hw->cpu_name = cpu_name ();
  return hw;
}

void
um_hardware_free (UmHardware *hw)
{
  if (hw == NULL)
    return;
  g_clear_pointer (&hw->gpus, g_array_unref);
  g_free (hw->why_no_gpu);
  g_free (hw->cpu_name);
  g_free (hw);
}

void
um_optimize_result_free (UmOptimizeResult *r)
{
  if (r == NULL)
    return;
  g_clear_pointer (&r->table, g_array_unref);
  g_free (r->reason);
  g_free (r->model_id);
  g_free (r);
}

static guint64
usable (const UmOptimizeResult *r)
{
  return (guint64) ((double) r->capacity * (1.0 - r->headroom));
}

gboolean
um_optimize_result_fits (const UmOptimizeResult *r, int i)
{
  const UmPlan *p;

  if (r->table == NULL || i < 0 || (guint) i >= r->table->len)
    return FALSE;
  p = &g_array_index (r->table, UmPlan, i);
  return p->fits && (r->capacity == 0 || p->device_peak <= usable (r));
}

static char *
size_str (guint64 bytes)
{
  return g_format_size_full (bytes, G_FORMAT_SIZE_IEC_UNITS);
}

/* "the GPU's 7.5 GiB free", "a 3.0 GiB budget on the CPU", ... */
static char *
capacity_words (const UmOptimizeResult *r)
{
  g_autofree char *cap = size_str (r->capacity);

  if (r->budget > 0)
    return g_strdup_printf ("a %s budget on the %s", cap, r->cuda ? "GPU" : "CPU");
  return r->cuda ? g_strdup_printf ("the GPU's %s free", cap) : g_strdup_printf ("%s of available RAM", cap);
}

/* Where a mixture of experts' routed experts go when not on the device. */
static const char *
experts_words (const UmPlan *p)
{
  switch (p->experts)
    {
    case UM_EXPERTS_HOST: return "; routed experts in RAM, computed by the CPU";
    case UM_EXPERTS_FETCH: return "; routed experts in RAM, fetched into device slots as routed";
    default: return "";
    }
}

static char *
fit_words (const UmOptimizeResult *r, const UmPlan *p)
{
  g_autofree char *need = size_str (p->device_peak);
  g_autofree char *where = capacity_words (r);
  return g_strdup_printf ("%s of %s, %.0f %% kept free%s", need, where, r->headroom * 100, experts_words (p));
}

UmOptimizeResult *
um_optimizer_plan (const UmModel      *model,
                   const UmHardware   *hw,
                   const UmPlanShape  *shape,
                   guint64             budget,
                   double              headroom,
                   GError            **error)
{
  g_autoptr(UmOptimizeResult) r = g_new0 (UmOptimizeResult, 1);
  UmPlanTarget t;

  if (!(headroom >= 0 && headroom < 1))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "the headroom must be in [0, 1), not %g", headroom);
      return NULL;
    }
  r->headroom = headroom;
  r->budget = budget;
  r->chosen = -1;
  r->model_id = model->path != NULL ? um_model_identity (model->path) : NULL;
  if (shape != NULL)
    r->shape = *shape;
  else
    um_plan_shape_init (&r->shape);

  um_plan_target_cpu (&t, 0, 0);
  if (hw->ram_total > 0)
    t.host_total = hw->ram_total;
  if (hw->ram_available > 0)
    t.host_available = hw->ram_available;
  if (hw->gpus != NULL && hw->gpus->len > 0)
    {
      const UmGpuDevice *d = &g_array_index (hw->gpus, UmGpuDevice, 0);
      r->cuda = TRUE;
      um_plan_target_set_gpu (&t, d->total_bytes, d->free_bytes);
      r->capacity = budget ? budget : d->free_bytes;
    }
  else
    {
      t.device_total = t.host_total;
      t.device_free = t.host_available;
      r->capacity = budget ? budget : t.host_available;
    }
  /* Planned against the capacity itself, so the table shows what fits at
   * all; the pick then asks for the headroom on top. Streaming takes as
   * many layer slots as the capacity holds, which would leave none: its
   * slots are planned within the headroom (target.headroom), and the
   * profile carries the headroom to the engine, which plans the slots the
   * same way at load, whatever the model or shape. (Writing the slot
   * count instead would fix it for this model and shape only.) */
  t.device_budget = r->capacity;
  t.headroom = headroom;
  r->target = t;

  r->table = g_array_new (FALSE, TRUE, sizeof (UmPlan));
  for (int m = 0; m < UM_MEM_N_MODES; m++)
    {
      UmMemOptions o;
      UmPlan p;
      um_mem_options_init (&o, (UmMemMode) m);
      if (!um_plan_compute (model, &o, &r->shape, &t, &p, error))
        return NULL;
      g_array_append_val (r->table, p);
    }

  for (guint i = 0; i < r->table->len && r->chosen < 0; i++)
    if (um_optimize_result_fits (r, (int) i))
      r->chosen = (int) i;
  if (r->chosen >= 0)
    {
      const UmPlan *p = &g_array_index (r->table, UmPlan, r->chosen);
      g_autofree char *fit = fit_words (r, p);
      r->reason = g_strdup_printf ("%s: the fastest mode that fits (%s)", um_mem_mode_to_string (p->mode), fit);
    }
  else
    {
      const UmPlan *least = &g_array_index (r->table, UmPlan, r->table->len - 1);
      g_autofree char *where = capacity_words (r);
      g_autofree char *need = size_str (least->device_peak);
      if (!least->fits && least->device_peak <= r->capacity)
        r->reason = g_strdup_printf ("no mode fits: even %s needs more RAM than is available while loading",
                                     um_mem_mode_to_string (least->mode));
      else
        r->reason = g_strdup_printf ("no mode fits %s with %.0f %% kept free: %s needs %s",
                                     where, r->headroom * 100, um_mem_mode_to_string (least->mode), need);
    }
  return g_steal_pointer (&r);
}

void
um_optimize_result_choose (UmOptimizeResult *r, UmMemMode mode)
{
  const UmPlan *p;
  g_autofree char *fit = NULL;

  if (r->table == NULL || (guint) mode >= r->table->len)
    return;
  r->chosen = (int) mode;
  p = &g_array_index (r->table, UmPlan, r->chosen);
  fit = fit_words (r, p);
  g_free (r->reason);
  r->reason = um_optimize_result_fits (r, r->chosen)
                ? g_strdup_printf ("%s: chosen; it fits (%s)", um_mem_mode_to_string (mode), fit)
                : g_strdup_printf ("%s: chosen, but it does not fit (%s)", um_mem_mode_to_string (mode), fit);
}

static void
clear_override (UmProfile *p, const char *model_id)
{
  for (guint i = 0; model_id != NULL && p->overrides != NULL && i < p->overrides->len;)
    {
      const UmProfileOverride *o = g_ptr_array_index (p->overrides, i);
      if (g_strcmp0 (o->model_id, model_id) == 0)
        g_ptr_array_remove_index (p->overrides, i);
      else
        i++;
    }
}

UmProfile *
um_optimizer_profile (const UmOptimizeResult *r, const UmProfile *current)
{
  UmProfile *p;
  const UmPlan *plan;

  if (r->chosen < 0 || r->table == NULL || (guint) r->chosen >= r->table->len)
    return NULL;
  plan = &g_array_index (r->table, UmPlan, r->chosen);
  p = current != NULL ? um_profile_copy (current) : um_profile_new_default ();
  /* The mode's own knobs (zeros): the engine resolves them for the model
   * and budget it loads with, as the plan did. */
  um_profile_set_mode (p, plan->mode);
  /* auto, not cuda: if that GPU is gone later, run on the CPU with a notice. */
  p->device = r->cuda ? UM_DEVICE_AUTO : UM_DEVICE_CPU;
  p->gpu_index = 0;
  p->memory_budget = r->budget;
  /* Optimize for this model means this model runs as optimized: an
   * override it had would otherwise keep its old mode on the next load. */
  clear_override (p, r->model_id);
  p->headroom = r->headroom;
  p->written_by = UM_PROFILE_BY_OPTIMIZE;
  p->written_at = g_get_real_time () / G_USEC_PER_SEC;
  g_free (p->reason);
  {
    g_autofree char *need = size_str (plan->device_peak);
    g_autofree char *where = capacity_words (r);
    p->reason = g_strdup_printf ("optimize → %s (%s of %s%s)", um_mem_mode_to_string (plan->mode), need, where,
                                 experts_words (plan));
  }
  return p;
}

/* Replaces @p's settings with the optimizer's, on the current profile. */
static gboolean
apply_edit (UmProfile *p, gpointer user_data, GError **error)
{
  const UmOptimizeResult *r = user_data;
  g_autoptr(UmProfile) next = um_optimizer_profile (r, p);
  UmProfile tmp;

  if (next == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "the chosen mode is not in the plan");
      return FALSE;
    }
  /* Swapped, so the old contents go with @next. */
  tmp = *p;
  *p = *next;
  *next = tmp;
  return TRUE;
}

gboolean
um_optimizer_apply (const UmOptimizeResult *r,
                    const char             *config_dir,
                    UmCommit               *out,
                    GError                **error)
{
  g_autofree char *reason = NULL;

  if (r->chosen < 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY, "%s", r->reason ? r->reason : "no mode fits");
      return FALSE;
    }
  reason = g_strdup_printf ("before optimize → %s", um_mem_mode_to_string ((UmMemMode) r->chosen));
  /* Read, changed and written under one lock: a change made meanwhile by
   * the app or another unmask-cli is built on, not lost. */
  return um_backups_update (config_dir, reason, apply_edit, (gpointer) r, out, error);
}

gboolean
um_profile_uses_converted (const UmProfile *p, const UmConvertedEntry *e)
{
  g_autofree char *model_id = NULL;
  g_autoptr(UmModel) model = NULL;
  const UmMemOptions *mem = &p->mem;
  const char *type;

  if (e->partial || e->source == NULL || e->type == NULL)
    return FALSE;
  if (!g_file_test (e->source, G_FILE_TEST_EXISTS))
    return FALSE;
  model_id = um_model_identity (e->source);
  for (guint i = 0; p->overrides != NULL && i < p->overrides->len; i++)
    {
      const UmProfileOverride *o = g_ptr_array_index (p->overrides, i);
      if (g_strcmp0 (o->model_id, model_id) == 0)
        mem = &o->mem;
    }
  /* Most settings keep every model as stored: no model to read. */
  if (!um_mem_options_may_convert (mem))
    return FALSE;
  /* The type is resolved for the model, as a load would. */
  model = um_model_load (e->source, NULL, NULL);
  if (model == NULL)
    return TRUE;
  type = um_plan_convert_type (model, mem);
  /* The pruning ratios are the profile's doubles written into the file's
   * metadata and read back: equal unless they are different settings. */
  return type != NULL && g_ascii_strcasecmp (type, e->type) == 0 && fabs (mem->prune_heads - e->prune_heads) < 1e-9
         && fabs (mem->prune_ffn - e->prune_ffn) < 1e-9;
}

GPtrArray *
um_profile_unused_converted (const UmProfile *p, const char *cache_dir, guint *kept, GError **error)
{
  g_autoptr(GPtrArray) all = um_convert_cache_list (cache_dir, error);
  GPtrArray *unused;

  if (kept != NULL)
    *kept = 0;
  if (all == NULL)
    return NULL;
  unused = g_ptr_array_new_with_free_func ((GDestroyNotify) um_converted_entry_free);
  for (guint i = 0; i < all->len;)
    {
      UmConvertedEntry *e = g_ptr_array_index (all, i);
      /* A conversion running now finishes or removes its own file. */
      if (e->in_progress || um_profile_uses_converted (p, e))
        {
          if (kept != NULL)
            (*kept)++;
          i++;
          continue;
        }
      g_ptr_array_add (unused, g_ptr_array_steal_index (all, i));
    }
  return unused;
}

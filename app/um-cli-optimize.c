/* unmask-cli optimize, restore and backups: the one-click optimizer and the
 * profile's backups, for scripts. Notices about damaged files go to
 * stderr; stdout holds only the answer. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "um-backups.h"
#include "um-cli.h"
#include "um-convert.h"
#include "um-error.h"
#include "um-json.h"
#include "um-optimizer.h"

#define HEADROOM 0.10

static void
print_notice (const char *notice)
{
  if (notice != NULL)
    fprintf (stderr, "unmask-cli: %s\n", notice);
}

/* Loads the profile once up front so that a damaged one, or a newer
 * Unmask's, is reported here (the commit, if any, moves a damaged one
 * aside and says where). */
static UmProfile *
load_profile (const char *config_dir, GError **error)
{
  g_autofree char *notice = NULL;
  UmProfile *p = um_profile_load (config_dir, &notice, error);
  print_notice (notice);
  return p;
}

static JsonNode *
profile_node (const UmProfile *p)
{
  g_autofree char *text = um_profile_to_json (p);
  return um_json_parse (text, -1, "the profile", NULL, NULL);
}

/* What optimize writes: the optimizer's profile on the current one, with
 * the settings planned for as its defaults, within what the mode
 * recommends. */
typedef struct {
  const UmOptimizeResult *r;
  int gen_length, block_length, steps;
} OptimizeEdit;

static gboolean
optimize_edit (UmProfile *p, gpointer user_data, GError **error)
{
  const OptimizeEdit *e = user_data;
  g_autoptr(UmProfile) next = um_optimizer_profile (e->r, p);
  UmProfile tmp;

  if (next == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY, "%s", e->r->reason);
      return FALSE;
    }
#define CLAMP_TO(v, limit) ((limit) > 0 ? MIN ((v), (limit)) : (v))
  if (e->gen_length > 0)
    next->default_gen_length = CLAMP_TO (e->gen_length, next->limit_gen_length);
  if (e->block_length > 0)
    next->default_block_length = CLAMP_TO (e->block_length, next->limit_block_length);
  if (e->steps > 0)
    next->default_steps = CLAMP_TO (e->steps, next->limit_steps);
#undef CLAMP_TO
  /* Swapped, so the old contents go with @next. */
  tmp = *p;
  *p = *next;
  *next = tmp;
  return TRUE;
}

#define SET_INT(b, k, v) G_STMT_START { json_builder_set_member_name (b, k); json_builder_add_int_value (b, v); } G_STMT_END
#define SET_STR(b, k, v) G_STMT_START { json_builder_set_member_name (b, k); json_builder_add_string_value (b, v); } G_STMT_END
#define SET_BOOL(b, k, v) G_STMT_START { json_builder_set_member_name (b, k); json_builder_add_boolean_value (b, v); } G_STMT_END

static void
hardware_json (JsonBuilder *b, const UmHardware *hw)
{
  json_builder_set_member_name (b, "hardware");
  json_builder_begin_object (b);
  SET_STR (b, "cpu", hw->cpu_name);
  SET_INT (b, "cores", hw->cores);
  SET_INT (b, "ram_total_bytes", hw->ram_total);
  SET_INT (b, "ram_available_bytes", hw->ram_available);
  json_builder_set_member_name (b, "gpus");
  json_builder_begin_array (b);
  for (guint i = 0; i < hw->gpus->len; i++)
    {
      const UmGpuDevice *d = &g_array_index (hw->gpus, UmGpuDevice, i);
      json_builder_begin_object (b);
      SET_INT (b, "index", d->index);
      SET_STR (b, "name", d->name);
      SET_INT (b, "total_bytes", d->total_bytes);
      SET_INT (b, "free_bytes", d->free_bytes);
      json_builder_end_object (b);
    }
  json_builder_end_array (b);
  if (hw->why_no_gpu != NULL)
    SET_STR (b, "why_no_gpu", hw->why_no_gpu);
  json_builder_end_object (b);
}

static void
print_hardware (const UmHardware *hw, const UmOptimizeResult *r)
{
  g_autofree char *avail = g_format_size_full (hw->ram_available, G_FORMAT_SIZE_IEC_UNITS);
  g_autofree char *total = g_format_size_full (hw->ram_total, G_FORMAT_SIZE_IEC_UNITS);
  g_autofree char *cap = g_format_size_full (r->capacity, G_FORMAT_SIZE_IEC_UNITS);

  printf ("CPU: %s, %d cores; RAM %s available of %s\n", hw->cpu_name, hw->cores, avail, total);
  for (guint i = 0; i < hw->gpus->len; i++)
    {
      const UmGpuDevice *d = &g_array_index (hw->gpus, UmGpuDevice, i);
      g_autofree char *f = g_format_size_full (d->free_bytes, G_FORMAT_SIZE_IEC_UNITS);
      g_autofree char *t = g_format_size_full (d->total_bytes, G_FORMAT_SIZE_IEC_UNITS);
      printf ("GPU %d: %s, %s free of %s\n", d->index, d->name, f, t);
    }
  if (hw->why_no_gpu != NULL)
    printf ("No GPU: %s\n", hw->why_no_gpu);
  printf ("Planned for %s on the %s%s, %.0f %% kept free\n", cap, r->cuda ? "GPU" : "CPU",
          r->budget ? " (budget)" : "", r->headroom * 100);
  printf ("%-20s %-14s %-9s %12s %12s  %s\n", "mode", "weights", "experts", "device", "host", "fits");
  for (guint i = 0; i < r->table->len; i++)
    {
      const UmPlan *p = &g_array_index (r->table, UmPlan, i);
      g_autofree char *d = g_format_size_full (p->device_peak, G_FORMAT_SIZE_IEC_UNITS);
      g_autofree char *h = g_format_size_full (MAX (p->host_peak, p->host_load_peak), G_FORMAT_SIZE_IEC_UNITS);
      printf ("%-20s %-14s %-9s %12s %12s  %s%s\n", um_mem_mode_to_string (p->mode), p->weight_format,
              p->expert_bytes > 0 ? um_expert_placement_to_string (p->experts) : "-", d, h,
              um_optimize_result_fits (r, (int) i) ? "yes" : p->fits ? "only without headroom" : "no",
              (int) i == r->chosen ? "  ← chosen" : "");
    }
}

int
um_cli_optimize (int argc, char **argv)
{
  g_autoptr(GOptionContext) ctx = g_option_context_new ("— pick the memory mode that fits, back up, write the profile");
  g_autofree char *model_path = NULL, *mode = NULL, *budget_text = NULL, *device = NULL, *config_dir = NULL;
  int gen_length = 0, block_length = 0, steps = 0, prompt_length = 64;
  gboolean dry_run = FALSE, json = FALSE;
  GOptionEntry entries[] = {
    { "model", 'm', 0, G_OPTION_ARG_FILENAME, &model_path, "Model folder or .gguf file", "PATH" },
    { "mode", 0, 0, G_OPTION_ARG_STRING, &mode, "Take this mode instead of the first that fits", "MODE" },
    { "budget", 0, 0, G_OPTION_ARG_STRING, &budget_text,
      "Device memory to plan for, e.g. 3GiB (on the CPU it stands for a small GPU)", "SIZE" },
    { "device", 0, 0, G_OPTION_ARG_STRING, &device, "cpu, cuda or auto (default: a GPU if there is one)", "DEVICE" },
    { "gen-length", 0, 0, G_OPTION_ARG_INT, &gen_length, "Tokens to generate (default 128)", "N" },
    { "block-length", 0, 0, G_OPTION_ARG_INT, &block_length, "Tokens per block (default 32)", "N" },
    { "steps", 0, 0, G_OPTION_ARG_INT, &steps, "Diffusion steps (kept as the profile's default)", "N" },
    { "prompt-length", 0, 0, G_OPTION_ARG_INT, &prompt_length, "Prompt tokens to plan for (default 64)", "N" },
    { "dry-run", 0, 0, G_OPTION_ARG_NONE, &dry_run, "Plan and pick, but write nothing", NULL },
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "Print JSON", NULL },
    { "config-dir", 0, 0, G_OPTION_ARG_FILENAME, &config_dir,
      "Where optimizer.json and backups/ live (default $XDG_CONFIG_HOME/unmask)", "DIR" },
    { NULL }
  };
  g_autoptr(GError) error = NULL;
  g_autoptr(UmProfile) current = NULL;
  g_autoptr(UmProfile) profile = NULL;
  g_autoptr(UmModel) model = NULL;
  g_autoptr(UmHardware) hw = NULL;
  g_autoptr(UmOptimizeResult) r = NULL;
  g_auto(UmCommit) commit = { 0 };
  const char *backup_id = NULL;
  g_autofree char *profile_path = NULL;
  g_autofree char *model_id = NULL;
  UmDeviceKind kind = UM_DEVICE_AUTO;
  UmMemMode asked = UM_MEM_STANDARD;
  UmPlanShape shape;
  guint64 budget = 0;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!um_cli_parse_options (ctx, &argc, &argv))
    return 2;
  if (model_path == NULL)
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "--model PATH is required");
      return um_cli_fail (error);
    }
  if (mode != NULL && !um_mem_mode_from_string (mode, &asked))
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "--mode must be standard, standard-8bit, extreme-mild, extreme-moderate or extreme-aggressive, "
                   "not “%s”", mode);
      return um_cli_fail (error);
    }
  if (budget_text != NULL && (!um_parse_size (budget_text, &budget) || budget == 0))
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "--budget must be a size like 3GiB or 512MiB, not “%s”",
                   budget_text);
      return um_cli_fail (error);
    }
  /* As the engine: UNMASK_DEVICE sets the default. */
  um_device_kind_from_string (g_getenv ("UNMASK_DEVICE"), &kind);
  if (device != NULL && !um_device_kind_from_string (device, &kind))
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "--device must be cpu, cuda or auto, not “%s”", device);
      return um_cli_fail (error);
    }
  if (gen_length < 0 || block_length < 0 || steps < 0 || prompt_length < 0)
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "--gen-length, --block-length, --steps and --prompt-length must be positive");
      return um_cli_fail (error);
    }
  um_plan_shape_init (&shape);
  shape.prompt_length = prompt_length;
  if (gen_length > 0)
    shape.gen_length = gen_length;
  if (block_length > 0)
    shape.block_length = block_length;

  current = load_profile (config_dir, &error);
  if (current == NULL)
    return um_cli_fail (error);
  /* Metadata, tokenizer and the tensor table; no weight is read. */
  model = um_model_load (model_path, NULL, &error);
  if (model == NULL)
    return um_cli_fail (error);
  model_id = um_model_identity (model_path);

  hw = um_hardware_probe ();
  if (kind == UM_DEVICE_CPU && hw->gpus->len > 0)
    {
      g_array_set_size (hw->gpus, 0);
      g_free (hw->why_no_gpu);
      hw->why_no_gpu = g_strdup ("the CPU was asked for");
    }
  else if (kind == UM_DEVICE_CUDA && hw->gpus->len == 0)
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_UNSUPPORTED, "no usable GPU: %s", hw->why_no_gpu);
      return um_cli_fail (error);
    }
  r = um_optimizer_plan (model, hw, &shape, budget, HEADROOM, &error);
  if (r == NULL)
    return um_cli_fail (error);
  if (mode != NULL)
    um_optimize_result_choose (r, asked);

  profile_path = um_profile_path (config_dir);
  if (r->chosen >= 0)
    {
      OptimizeEdit e = { r, gen_length, block_length, steps };
      if (dry_run)
        {
          /* What it would write, on the profile as read above. */
          profile = um_profile_copy (current);
          if (!optimize_edit (profile, &e, &error))
            return um_cli_fail (error);
        }
      else
        {
          g_autofree char *reason = g_strdup_printf ("before optimize → %s",
                                                     um_mem_mode_to_string ((UmMemMode) r->chosen));
          /* Read, changed and written under one lock, so a change the app
           * made since the load above is built on, not reverted. */
          if (!um_backups_update (config_dir, reason, optimize_edit, &e, &commit, &error))
            return um_cli_fail (error);
          /* A damaged profile was moved aside by the commit: where to. */
          print_notice (commit.notice);
          profile = um_profile_copy (commit.profile);
          backup_id = commit.backup_id;
        }
    }

  if (json)
    {
      g_autoptr(JsonBuilder) b = json_builder_new ();
      g_autoptr(JsonNode) root = NULL;
      json_builder_begin_object (b);
      SET_STR (b, "model", model_path);
      SET_STR (b, "model_id", model_id);
      hardware_json (b, hw);
      json_builder_set_member_name (b, "target");
      json_builder_begin_object (b);
      SET_STR (b, "device", r->cuda ? "cuda" : "cpu");
      SET_INT (b, "capacity_bytes", r->capacity);
      if (r->budget)
        SET_INT (b, "budget_bytes", r->budget);
      um_json_add_double (b, "headroom", r->headroom);
      json_builder_end_object (b);
      json_builder_set_member_name (b, "shape");
      json_builder_begin_object (b);
      SET_INT (b, "prompt_length", r->shape.prompt_length);
      SET_INT (b, "gen_length", r->shape.gen_length);
      SET_INT (b, "block_length", r->shape.block_length);
      json_builder_end_object (b);
      json_builder_set_member_name (b, "modes");
      json_builder_begin_array (b);
      for (guint i = 0; i < r->table->len; i++)
        {
          JsonNode *n = um_cli_plan_to_json (&g_array_index (r->table, UmPlan, i));
          /* The plan's own fit has no headroom; this one does. */
          json_object_set_boolean_member (json_node_get_object (n), "fits_with_headroom",
                                          um_optimize_result_fits (r, (int) i));
          json_builder_add_value (b, n);
        }
      json_builder_end_array (b);
      json_builder_set_member_name (b, "chosen_mode");
      if (r->chosen >= 0)
        json_builder_add_string_value (b, um_mem_mode_to_string (r->chosen));
      else
        json_builder_add_null_value (b);
      SET_BOOL (b, "fits", r->chosen >= 0 && um_optimize_result_fits (r, r->chosen));
      SET_STR (b, "reason", r->reason);
      SET_BOOL (b, "dry_run", dry_run);
      json_builder_set_member_name (b, "backup_id");
      if (backup_id != NULL)
        json_builder_add_string_value (b, backup_id);
      else
        json_builder_add_null_value (b);
      SET_STR (b, "profile_path", profile_path);
      SET_BOOL (b, "written", backup_id != NULL);
      SET_BOOL (b, "unchanged", commit.unchanged);
      json_builder_set_member_name (b, "profile");
      if (profile != NULL)
        json_builder_add_value (b, profile_node (profile));
      else
        json_builder_add_null_value (b);
      json_builder_end_object (b);
      root = json_builder_get_root (b);
      um_cli_print_json (root, TRUE);
    }
  else
    {
      print_hardware (hw, r);
      printf ("%s\n", r->reason);
      if (backup_id != NULL)
        printf ("Wrote %s; the settings before are backup “%s” (unmask-cli restore %s undoes this).\n",
                profile_path, backup_id, backup_id);
      else if (commit.unchanged)
        printf ("Nothing changed: %s already says this, so nothing was written and no backup made.\n",
                profile_path);
      else if (profile != NULL)
        printf ("Dry run: nothing written.\n");
    }
  if (r->chosen < 0)
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY, "%s", r->reason);
      return um_cli_fail (error);
    }
  return 0;
}

int
um_cli_restore (int argc, char **argv)
{
  g_autoptr(GOptionContext) ctx = g_option_context_new ("original|latest|ID — restore an optimizer backup");
  g_autofree char *config_dir = NULL, *cache_dir = NULL;
  gboolean json = FALSE, remove_converted = FALSE;
  GOptionEntry entries[] = {
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "Print JSON", NULL },
    { "config-dir", 0, 0, G_OPTION_ARG_FILENAME, &config_dir,
      "Where optimizer.json and backups/ live (default $XDG_CONFIG_HOME/unmask)", "DIR" },
    { "remove-converted", 0, 0, G_OPTION_ARG_NONE, &remove_converted,
      "Also remove the converted weights the memory modes cached (they are made again when needed)", NULL },
    { "cache-dir", 0, 0, G_OPTION_ARG_FILENAME, &cache_dir,
      "Where converted weights are cached (default $XDG_CACHE_HOME/unmask/converted)", "DIR" },
    { NULL }
  };
  g_autoptr(GError) error = NULL;
  g_autoptr(UmProfile) current = NULL;
  g_auto(UmCommit) commit = { 0 };
  g_autoptr(GPtrArray) skipped = NULL;
  g_autoptr(GPtrArray) warnings = g_ptr_array_new_with_free_func (g_free);
  guint removed = 0, kept = 0;
  guint64 removed_bytes = 0;
  g_autofree char *path = NULL;
  const char *which;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!um_cli_parse_options (ctx, &argc, &argv))
    return 2;
  if (argc != 2)
    {
      g_set_error (&error, UM_ERROR, UM_ERROR_INVALID_PARAM, "restore original|latest|ID: which backup?");
      return um_cli_fail (error);
    }
  which = argv[1];
  current = load_profile (config_dir, &error);
  if (current == NULL)
    return um_cli_fail (error);
  {
    g_autofree char *notice = NULL;
    g_autoptr(GPtrArray) list = um_backups_list (config_dir, &notice, &error);
    print_notice (notice);
    if (list == NULL)
      return um_cli_fail (error);
  }
  if (!um_backups_restore (config_dir, which, &commit, &skipped, &error))
    return um_cli_fail (error);
  print_notice (commit.notice);
  path = um_profile_path (config_dir);
  /* The restore has happened: from here on a failure is a warning, and the
   * undo id is printed whatever else goes wrong. */
  if (remove_converted)
    {
      g_autoptr(GError) lerr = NULL;
      /* What the restored settings still use (through an override, or the
       * mode for all) stays: removing it would only cost a conversion. */
      g_autoptr(GPtrArray) unused = um_profile_unused_converted (commit.profile, cache_dir, &kept, &lerr);
      if (unused == NULL)
        g_ptr_array_add (warnings, g_strdup_printf ("converted weights were not removed: %s", lerr->message));
      for (guint i = 0; unused != NULL && i < unused->len; i++)
        {
          const UmConvertedEntry *e = g_ptr_array_index (unused, i);
          g_autoptr(GError) rerr = NULL;
          if (um_convert_cache_remove (cache_dir, e->path, &rerr))
            {
              removed++;
              removed_bytes += e->bytes;
            }
          else
            g_ptr_array_add (warnings, g_strdup_printf ("could not remove %s: %s", e->path, rerr->message));
        }
    }
  for (guint i = 0; i < warnings->len; i++)
    fprintf (stderr, "unmask-cli: warning: %s\n", (char *) g_ptr_array_index (warnings, i));
  for (guint i = 0; skipped != NULL && i < skipped->len; i++)
    {
      const UmBackup *b = g_ptr_array_index (skipped, i);
      fprintf (stderr, "unmask-cli: skipped the newer backup “%s”: %s\n", b->id, b->problem);
    }

  if (json)
    {
      g_autoptr(JsonBuilder) b = json_builder_new ();
      g_autoptr(JsonNode) root = NULL;
      json_builder_begin_object (b);
      SET_STR (b, "which", which);
      um_json_add_int (b, "converted_removed", removed);
      um_json_add_int (b, "converted_removed_bytes", removed_bytes);
      um_json_add_int (b, "converted_kept", kept);
      SET_STR (b, "restored", commit.restored_id);
      SET_BOOL (b, "unchanged", commit.unchanged);
      json_builder_set_member_name (b, "undo_id");
      if (commit.backup_id != NULL)
        json_builder_add_string_value (b, commit.backup_id);
      else
        json_builder_add_null_value (b);
      json_builder_set_member_name (b, "skipped");
      json_builder_begin_array (b);
      for (guint i = 0; skipped != NULL && i < skipped->len; i++)
        {
          const UmBackup *s = g_ptr_array_index (skipped, i);
          json_builder_begin_object (b);
          SET_STR (b, "id", s->id);
          SET_STR (b, "problem", s->problem);
          json_builder_end_object (b);
        }
      json_builder_end_array (b);
      json_builder_set_member_name (b, "warnings");
      json_builder_begin_array (b);
      for (guint i = 0; i < warnings->len; i++)
        json_builder_add_string_value (b, g_ptr_array_index (warnings, i));
      json_builder_end_array (b);
      SET_STR (b, "profile_path", path);
      json_builder_set_member_name (b, "profile");
      json_builder_add_value (b, profile_node (commit.profile));
      json_builder_end_object (b);
      root = json_builder_get_root (b);
      um_cli_print_json (root, TRUE);
    }
  else
    {
      g_autofree char *summary = um_profile_summary (commit.profile);
      if (commit.unchanged)
        printf ("Backup “%s” holds the settings already in use (%s); nothing was written.\n", commit.restored_id,
                summary);
      else
        printf ("Restored backup “%s”: %s.\nThe settings before are backup “%s” (unmask-cli restore %s undoes "
                "this).\n", commit.restored_id, summary, commit.backup_id, commit.backup_id);
      if (remove_converted)
        {
          g_autofree char *size = g_format_size (removed_bytes);
          printf ("Removed %u file(s) of converted weights (%s); kept %u the settings still use.\n", removed, size,
                  kept);
        }
    }
  return 0;
}

int
um_cli_backups (int argc, char **argv)
{
  g_autoptr(GOptionContext) ctx = g_option_context_new ("— list the optimizer's backups");
  g_autofree char *config_dir = NULL;
  gboolean json = FALSE;
  GOptionEntry entries[] = {
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "Print JSON", NULL },
    { "config-dir", 0, 0, G_OPTION_ARG_FILENAME, &config_dir,
      "Where optimizer.json and backups/ live (default $XDG_CONFIG_HOME/unmask)", "DIR" },
    { NULL }
  };
  g_autoptr(GError) error = NULL;
  g_autoptr(UmProfile) current = NULL;
  g_autoptr(GPtrArray) list = NULL;
  g_autofree char *notice = NULL;
  g_autofree char *dir = NULL;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!um_cli_parse_options (ctx, &argc, &argv))
    return 2;
  current = load_profile (config_dir, &error);
  if (current == NULL)
    return um_cli_fail (error);
  list = um_backups_list (config_dir, &notice, &error);
  print_notice (notice);
  if (list == NULL)
    return um_cli_fail (error);
  dir = um_profile_dir (config_dir);

  if (json)
    {
      g_autoptr(JsonBuilder) b = json_builder_new ();
      g_autoptr(JsonNode) root = NULL;
      json_builder_begin_object (b);
      SET_STR (b, "config_dir", dir);
      json_builder_set_member_name (b, "backups");
      json_builder_begin_array (b);
      for (guint i = 0; i < list->len; i++)
        {
          const UmBackup *e = g_ptr_array_index (list, i);
          g_autoptr(GDateTime) dt = g_date_time_new_from_unix_utc (e->time);
          g_autofree char *iso = dt ? g_date_time_format_iso8601 (dt) : g_strdup ("");
          json_builder_begin_object (b);
          SET_STR (b, "id", e->id);
          SET_INT (b, "time", e->time);
          SET_STR (b, "time_iso", iso);
          SET_STR (b, "reason", e->reason);
          SET_STR (b, "summary", e->summary);
          SET_STR (b, "sha256", e->sha256);
          SET_STR (b, "file", e->file);
          SET_BOOL (b, "valid", e->valid);
          json_builder_set_member_name (b, "problem");
          if (e->problem != NULL)
            json_builder_add_string_value (b, e->problem);
          else
            json_builder_add_null_value (b);
          json_builder_end_object (b);
        }
      json_builder_end_array (b);
      json_builder_end_object (b);
      root = json_builder_get_root (b);
      um_cli_print_json (root, TRUE);
      return 0;
    }
  if (list->len == 0)
    printf ("No backups yet in %s.\n", dir);
  for (guint i = 0; i < list->len; i++)
    {
      const UmBackup *e = g_ptr_array_index (list, i);
      g_autoptr(GDateTime) utc = g_date_time_new_from_unix_utc (e->time);
      g_autoptr(GDateTime) local = utc ? g_date_time_to_local (utc) : NULL;
      g_autofree char *when = local ? g_date_time_format (local, "%Y-%m-%d %H:%M:%S") : g_strdup ("?");
      printf ("%-20s %s  %s\n%20s %s%s%s\n", e->id, when, e->summary, "", e->reason, e->valid ? "" : " — PROBLEM: ",
              e->valid ? "" : e->problem);
    }
  return 0;
}

/* um-optimizer-changes.c — the Optimizer page's writes (see
 * um-optimizer-page.h): Apply, Optimize, Restore and Undo.
 *
 * Each is a Change, what the user asked for, committed (backup first)
 * against the revision the window showed when it was asked for. If the file
 * changed elsewhere meanwhile, nothing is written: the window shows what it
 * says now and a dialog asks "Keep Theirs" or "Apply Mine Over It". A
 * finished change is shown in the status line (with the damaged backups a
 * restore passed over), the model is loaded again under it, and a restore
 * to the weights as stored offers to remove the converted ones.
 */
#include "config.h"

#include "um-optimizer-page-private.h"

#include <glib/gi18n.h>

#include "um-backups.h"
#include "um-convert.h"
#include "um-error.h"
#include "um-window.h"

/* ---- writing ---- */

/* A change of the profile, kept as what the user asked for rather than as
 * a finished profile: when the file changed meanwhile it is built again on
 * what the file says now ("Apply Mine Over It"). */
typedef enum { CHANGE_APPLY, CHANGE_RESTORE, CHANGE_OPTIMIZE } ChangeKind;

typedef struct {
  ChangeKind        kind;
  UmMemOptions      mem;          /* apply: the mode and knobs */
  guint64           budget;
  gboolean          keep_budget;  /* apply: the profile's own budget (--extreme) */
  char             *which;        /* restore: "original", "latest" or an id */
  gboolean          offer_remove; /* restore: offer to remove converted weights after */
  UmOptimizeResult *result;       /* optimize: every mode planned, one chosen */
  char             *path;         /* optimize: the model planned for */
  char             *base;         /* the revision shown when it was asked for */
} Change;

static void
change_free (Change *c)
{
  g_free (c->which);
  g_clear_pointer (&c->result, um_optimize_result_free);
  g_free (c->path);
  g_free (c->base);
  g_free (c);
}

G_DEFINE_AUTOPTR_CLEANUP_FUNC (Change, change_free)

/* The profile the window shows and the revision it was read or written at. */
static const UmProfile *
shown_profile (UmOptimizerPage *self, const char **revision)
{
  UmWindow *win = um_optimizer_page_get_window (self);

  *revision = win ? um_window_get_profile_revision (win) : NULL;
  return win ? um_window_get_profile (win) : self->profile;
}

/* A change of the settings shown now: committed against their revision,
 * even if the window reads a newer file before it is confirmed. */
static Change *
change_new (UmOptimizerPage *self, ChangeKind kind)
{
  Change *c = g_new0 (Change, 1);
  const char *base;

  c->kind = kind;
  shown_profile (self, &base);
  c->base = g_strdup (base);
  return c;
}

static const char *
change_failed_text (const Change *c)
{
  switch (c->kind)
    {
    case CHANGE_RESTORE: return _("Could not restore");
    case CHANGE_OPTIMIZE: return _("Could not save the optimized settings");
    case CHANGE_APPLY:
    default: return _("Could not apply the settings");
    }
}

/* The profile @c makes of @current, the reason its backup records and, for
 * a restore, the backup's id and the damaged newer ones "latest" passed. */
static UmProfile *
build_change (UmOptimizerPage *self, const Change *c, const UmProfile *current, char **reason, char **restored_id,
              GPtrArray **skipped, GError **error)
{
  g_autoptr(UmProfile) p = NULL;
  g_autofree char *id = NULL;
  gint64 now = g_get_real_time () / G_USEC_PER_SEC;
  const char *mode;

  /* The reasons are the backend's record, in English like its own. */
  switch (c->kind)
    {
    case CHANGE_APPLY:
      p = um_profile_copy (current);
      um_optimizer_page_profile_put_options (self, p, &c->mem, c->keep_budget ? current->memory_budget : c->budget);
      mode = um_mem_mode_to_string (c->mem.mode);
      p->written_by = UM_PROFILE_BY_USER;
      p->written_at = now;
      g_free (p->reason);
      p->reason = g_strdup_printf ("user → %s", mode);
      *reason = g_strdup_printf ("before user → %s", mode);
      break;
    case CHANGE_OPTIMIZE:
      p = um_optimizer_profile (c->result, current);
      if (p == NULL)
        {
          g_set_error_literal (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY,
                               c->result->reason ? c->result->reason : "no mode fits");
          return NULL;
        }
      *reason = g_strdup_printf ("before optimize → %s", um_mem_mode_to_string (p->mem.mode));
      break;
    case CHANGE_RESTORE:
    default:
      /* As um_backups_restore () does, but committed against the revision
       * shown: a restore must not hide a change made elsewhere either. */
      id = um_backups_resolve (um_optimizer_page_config_dir (self), c->which, skipped, error);
      if (id == NULL || (p = um_backups_load (um_optimizer_page_config_dir (self), id, error)) == NULL)
        return NULL;
      p->written_by = UM_PROFILE_BY_RESTORE;
      p->written_at = now;
      g_free (p->reason);
      p->reason = g_str_equal (id, c->which) ? g_strdup_printf ("restore → %s", id)
                                             : g_strdup_printf ("restore → %s (%s)", c->which, id);
      *reason = g_strdup_printf ("before restore → %s", c->which);
      if (restored_id != NULL)
        *restored_id = g_steal_pointer (&id);
      break;
    }
  return g_steal_pointer (&p);
}

/* Commits @c built on the profile shown, against the revision it was asked
 * for on. */
static gboolean
commit_change (UmOptimizerPage *self, const Change *c, UmCommit *commit, GPtrArray **skipped, GError **error)
{
  g_autoptr(UmProfile) fallback = NULL;
  g_autoptr(UmProfile) p = NULL;
  g_autofree char *reason = NULL;
  g_autofree char *restored_id = NULL;
  const char *shown;
  const UmProfile *current = shown_profile (self, &shown);

  if (current == NULL)
    current = fallback = um_profile_new_default ();
  p = build_change (self, c, current, &reason, &restored_id, skipped, error);
  if (p == NULL || !um_backups_commit (p, um_optimizer_page_config_dir (self), reason, c->base, commit, error))
    return FALSE;
  commit->restored_id = g_steal_pointer (&restored_id);
  return TRUE;
}

/* "20261124-105301-123 (the copy is missing); original (checksum differs)",
 * or NULL when none was skipped. */
static char *
describe_skipped (GPtrArray *skipped)
{
  GString *s;

  if (skipped == NULL || skipped->len == 0)
    return NULL;
  s = g_string_new (NULL);
  for (guint i = 0; i < skipped->len; i++)
    {
      const UmBackup *b = g_ptr_array_index (skipped, i);
      if (s->len > 0)
        g_string_append (s, "; ");
      g_string_append_printf (s, "%s (%s)", b->id, b->problem ? b->problem : _("damaged"));
    }
  return g_string_free (s, FALSE);
}

/* @text, then which damaged backups were passed over. */
static void
set_status_skipped (UmOptimizerPage *self, const char *text, GPtrArray *skipped)
{
  g_autofree char *list = describe_skipped (skipped);
  g_autofree char *full = NULL;

  if (list == NULL)
    {
      um_optimizer_page_set_status (self, text);
      return;
    }
  /* Translators: %s lists backups with why, e.g. "20261124-105301-123 (the copy is missing)" */
  full = g_strdup_printf (_("%s Passed over the newer backups that are damaged: %s."), text, list);
  um_optimizer_page_set_status (self, full);
}

static void offer_remove_converted (UmOptimizerPage *self);

/* Shows what a commit did, and loads the model under it. */
static void
finish_change (UmOptimizerPage *self, const Change *c, UmCommit *commit, GPtrArray *skipped)
{
  UmWindow *win = um_optimizer_page_get_window (self);
  g_autofree char *summary = um_profile_summary (commit->profile);
  g_autofree char *text = NULL;

  /* Nothing was written: no backup, so nothing new to undo. */
  if (commit->unchanged)
    {
      /* Translators: %s is a profile summary, e.g. "extreme-moderate, Q4_K_M, cpu, budget 3.0 GiB" */
      text = g_strdup_printf (_("Nothing changed: the settings already are “%s”."), summary);
      set_status_skipped (self, text, skipped);
      if (win != NULL && c->kind == CHANGE_OPTIMIZE
          && (g_strcmp0 (c->path, um_window_get_model_path (win)) != 0 || um_window_get_engine (win) == NULL))
        um_window_load_model (win, c->path);
      return;
    }
  g_free (self->undo_id);
  self->undo_id = g_steal_pointer (&commit->backup_id);
  /* Our own write: the controls show what was written. */
  self->committing = TRUE;
  if (win != NULL)
    um_window_set_committed_profile (win, commit->profile, commit->revision);
  else
    um_optimizer_page_set_profile (self, commit->profile);
  self->committing = FALSE;

  switch (c->kind)
    {
    case CHANGE_APPLY:
      text = g_strdup_printf (_("Applied: %s."), summary);
      break;
    case CHANGE_OPTIMIZE:
      /* Translators: %s is a memory mode, e.g. "extreme-moderate" */
      text = g_strdup_printf (_("Optimized: now %s, and the model is loaded again. The settings before are in the history."),
                              um_mem_mode_to_string (commit->profile->mem.mode));
      break;
    case CHANGE_RESTORE:
    default:
      text = g_strdup (g_strcmp0 (c->which, "original") == 0
                       ? _("The original settings are back; what was in use is in the history.")
                       : _("Restored; what was in use is in the history."));
      break;
    }
  set_status_skipped (self, text, skipped);
  if (win != NULL)
    {
      if (c->kind == CHANGE_OPTIMIZE && g_strcmp0 (c->path, um_window_get_model_path (win)) != 0)
        um_window_load_model (win, c->path);
      else if (um_window_get_model_path (win) != NULL)
        um_window_reload_model (win);
    }
  if (c->offer_remove)
    offer_remove_converted (self);
}

/* FALSE with @error while a generation runs: a change reloads the model. */
gboolean
um_optimizer_page_check_idle (UmOptimizerPage *self, GError **error)
{
  UmWindow *win = um_optimizer_page_get_window (self);

  if (win != NULL && um_window_get_generating (win))
    {
      g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_BUSY,
                           _("Stop the running generation first: the model is reloaded under the new settings."));
      return FALSE;
    }
  return TRUE;
}

static void ask_conflict (UmOptimizerPage *self, Change *c);

/* Commits @c (taken) and shows it. When the file changed since the window
 * read it, nothing is written: the window shows what it says now and the
 * user decides (TRUE: asked). */
static gboolean
run_change (UmOptimizerPage *self, Change *c, GError **error)
{
  g_autoptr(Change) change = c;
  g_auto(UmCommit) commit = { 0 };
  g_autoptr(GPtrArray) skipped = NULL;
  g_autoptr(GError) local = NULL;
  UmWindow *win = um_optimizer_page_get_window (self);
  gboolean ok;

  if (!um_optimizer_page_check_idle (self, error))
    return FALSE;
  ok = commit_change (self, change, &commit, &skipped, &local);
  /* The file was damaged and moved aside on the way: the start-up banner. */
  if (win != NULL && commit.notice != NULL)
    um_window_show_notice (win, commit.notice);
  if (!ok)
    {
      if (win != NULL && g_error_matches (local, UM_ERROR, UM_ERROR_CONFLICT))
        {
          um_window_check_profile (win);
          ask_conflict (self, g_steal_pointer (&change));
          return TRUE;
        }
      g_propagate_error (error, g_steal_pointer (&local));
      return FALSE;
    }
  finish_change (self, change, &commit, skipped);
  return TRUE;
}

/* run_change (), a failure said in the status line. */
static void
run_change_status (UmOptimizerPage *self, Change *c)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *what = g_strdup (change_failed_text (c));

  if (!run_change (self, c, &error))
    um_optimizer_page_set_status_error (self, what, error);
}

static void
on_conflict_response (AdwMessageDialog *dialog, const char *response, UmOptimizerPage *self)
{
  Change *c = g_object_steal_data (G_OBJECT (dialog), "um-change");

  if (c == NULL)
    return;
  if (g_strcmp0 (response, "mine") == 0)
    {
      const char *base;
      /* Built again on what the file says now, against its revision. */
      shown_profile (self, &base);
      g_free (c->base);
      c->base = g_strdup (base);
      run_change_status (self, c);
      return;
    }
  change_free (c);
  um_optimizer_page_show_profile_controls (self);
  {
    g_autofree char *summary = self->profile ? um_profile_summary (self->profile) : NULL;
    /* Translators: %s is a profile summary, e.g. "extreme-moderate, Q4_K_M, cpu, budget 3.0 GiB" */
    g_autofree char *text = g_strdup_printf (_("Kept the settings changed outside Unmask: “%s”."),
                                             summary ? summary : "");
    um_optimizer_page_set_status (self, text);
  }
}

/* The file changed since the window read it: say what it says now and ask
 * whether @c (taken) goes over it. */
static void
ask_conflict (UmOptimizerPage *self, Change *c)
{
  UmWindow *win = um_optimizer_page_get_window (self);
  const char *base;
  const UmProfile *theirs = shown_profile (self, &base);
  g_autoptr(UmProfile) mine = NULL;
  g_autofree char *reason = NULL;
  g_autofree char *their_summary = um_profile_summary (theirs);
  g_autofree char *mine_summary = NULL;
  g_autofree char *when = NULL;
  g_autoptr(GString) body = g_string_new (NULL);
  GtkWidget *dialog;

  if (win == NULL)
    {
      change_free (c);
      um_optimizer_page_set_status (self, _("The settings were changed outside Unmask: nothing was written."));
      return;
    }
  mine = build_change (self, c, theirs, &reason, NULL, NULL, NULL);
  mine_summary = mine ? um_profile_summary (mine) : NULL;
  if (theirs->written_at > 0)
    {
      g_autoptr(GDateTime) t = g_date_time_new_from_unix_local (theirs->written_at);
      /* Translators: when the settings were written, see g_date_time_format (); e.g. "24 November 2026, 10:53:01"
       * xgettext:no-c-format */
      when = t ? g_date_time_format (t, _("%-e %B %Y, %H:%M:%S")) : NULL;
    }
  /* Translators: %s is a profile summary, e.g. "extreme-moderate, Q4_K_M, cpu, budget 3.0 GiB" */
  g_string_append_printf (body, _("The optimizer settings were changed outside Unmask, for example with "
                                  "unmask-cli, after this window read them. They now say “%s”."),
                          their_summary);
  if (when != NULL)
    {
      g_string_append_c (body, ' ');
      /* Translators: %s is a date and time */
      g_string_append_printf (body, _("They were written on %s."), when);
    }
  if (mine_summary != NULL)
    {
      g_string_append (body, "\n\n");
      /* Translators: %s is a profile summary */
      g_string_append_printf (body, _("Yours would make them “%s”; what they say now would be kept in the history."),
                              mine_summary);
      if (win != NULL && um_window_get_model_path (win) != NULL)
        {
          g_string_append_c (body, ' ');
          g_string_append (body, _("The model is loaded again under them."));
        }
    }
  dialog = adw_message_dialog_new (GTK_WINDOW (win), _("Settings Changed Outside Unmask"), body->str);
  adw_message_dialog_add_responses (ADW_MESSAGE_DIALOG (dialog), "theirs", _("_Keep Theirs"),
                                    "mine", _("_Apply Mine Over It"), NULL);
  adw_message_dialog_set_response_appearance (ADW_MESSAGE_DIALOG (dialog), "mine", ADW_RESPONSE_DESTRUCTIVE);
  adw_message_dialog_set_default_response (ADW_MESSAGE_DIALOG (dialog), "theirs");
  adw_message_dialog_set_close_response (ADW_MESSAGE_DIALOG (dialog), "theirs");
  g_object_set_data_full (G_OBJECT (dialog), "um-change", c, (GDestroyNotify) change_free);
  g_signal_connect_object (dialog, "response", G_CALLBACK (on_conflict_response), self, 0);
  um_optimizer_page_set_status (self, _("The settings were changed outside Unmask: nothing was written."));
  gtk_window_present (GTK_WINDOW (dialog));
}

static void
on_confirm_response (AdwMessageDialog *dialog, const char *response, UmOptimizerPage *self)
{
  Change *c = g_object_steal_data (G_OBJECT (dialog), "um-change");

  if (c == NULL)
    return;
  if (g_strcmp0 (response, "apply") == 0)
    run_change_status (self, c);
  else
    {
      change_free (c);
      um_optimizer_page_set_status (self, _("Nothing was changed."));
    }
}

/* Runs @c (taken) now, or after asking when a model would be reloaded. */
static void
confirm_reload (UmOptimizerPage *self, const char *heading, const char *body, const char *accept, Change *c)
{
  UmWindow *win = um_optimizer_page_get_window (self);
  GtkWidget *dialog;

  if (win == NULL || um_window_get_model_path (win) == NULL)
    {
      run_change_status (self, c);
      return;
    }
  dialog = adw_message_dialog_new (GTK_WINDOW (win), heading, NULL);
  /* Translators: the body of the dialogs that change the optimizer settings; %s says what changes */
  adw_message_dialog_format_body (ADW_MESSAGE_DIALOG (dialog),
                                  _("%s The model is loaded again under the new plan, which takes a moment. "
                                    "The settings in use now are backed up first."),
                                  body);
  adw_message_dialog_add_responses (ADW_MESSAGE_DIALOG (dialog), "cancel", _("_Cancel"), "apply", accept, NULL);
  adw_message_dialog_set_response_appearance (ADW_MESSAGE_DIALOG (dialog), "apply", ADW_RESPONSE_SUGGESTED);
  adw_message_dialog_set_default_response (ADW_MESSAGE_DIALOG (dialog), "apply");
  adw_message_dialog_set_close_response (ADW_MESSAGE_DIALOG (dialog), "cancel");
  g_object_set_data_full (G_OBJECT (dialog), "um-change", c, (GDestroyNotify) change_free);
  g_signal_connect_object (dialog, "response", G_CALLBACK (on_confirm_response), self, 0);
  gtk_window_present (GTK_WINDOW (dialog));
}

void
um_optimizer_page_apply (UmOptimizerPage *self)
{
  const char *base;
  const UmProfile *current;
  g_autoptr(UmProfile) p = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *summary = NULL;
  g_autofree char *body = NULL;
  Change *c;
  UmMemOptions o;
  guint64 budget;

  g_return_if_fail (UM_IS_OPTIMIZER_PAGE (self));

  if (self->busy)
    return;
  um_optimizer_page_read_options (self, &o);
  if (!um_mem_options_validate (&o, &error))
    {
      um_optimizer_page_set_status_error (self, _("Cannot apply"), error);
      return;
    }
  if (!um_optimizer_page_read_budget (self, &budget))
    {
      um_optimizer_page_set_status (self,
                                    _("The budget is not a size: write it like 3 GiB or 512 MiB, or leave it empty."));
      return;
    }
  current = shown_profile (self, &base);
  p = current ? um_profile_copy (current) : um_profile_new_default ();
  um_optimizer_page_profile_put_options (self, p, &o, budget);
  if (current != NULL && um_profile_equal (p, current))
    {
      um_optimizer_page_set_status (self, _("Nothing to apply: these are the settings in use."));
      return;
    }
  summary = um_profile_summary (p);
  c = change_new (self, CHANGE_APPLY);
  c->mem = o;
  c->budget = budget;
  /* Edited before the settings changed elsewhere: the same question as a
   * commit that meets the change. */
  if (self->stale)
    {
      ask_conflict (self, c);
      return;
    }
  /* Translators: %s is a profile summary, e.g. "extreme-moderate, Q4_K_M, cpu, budget 3.0 GiB" */
  body = g_strdup_printf (_("The settings become “%s”."), summary);
  confirm_reload (self, _("Apply and Reload?"), body, _("_Apply and Reload"), c);
}

gboolean
um_optimizer_page_apply_mode (UmOptimizerPage *self, UmMemMode mode, GError **error)
{
  Change *c;

  g_return_val_if_fail (UM_IS_OPTIMIZER_PAGE (self), FALSE);

  c = change_new (self, CHANGE_APPLY);
  um_mem_options_init (&c->mem, mode);
  c->keep_budget = TRUE;
  return run_change (self, c, error);
}

/* Optimize, once the model's metadata is read: plans every mode for @path
 * at the budget shown and commits the fastest that fits, asking first when
 * a loaded model would be reloaded. */
void
um_optimizer_page_do_optimize (UmOptimizerPage *self, const char *path)
{
  UmWindow *win = um_optimizer_page_get_window (self);
  g_autoptr(UmOptimizeResult) r = NULL;
  g_autoptr(UmProfile) would = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *summary = NULL;
  g_autofree char *body = NULL;
  const UmProfile *current;
  const char *base;
  UmPlanShape shape;
  guint64 budget = 0;
  Change *c;

  if (!um_optimizer_page_read_budget (self, &budget))
    {
      um_optimizer_page_set_status (self,
                                    _("The budget is not a size: write it like 3 GiB or 512 MiB, or leave it empty."));
      return;
    }
  if (!um_optimizer_page_check_idle (self, &error))
    {
      um_optimizer_page_set_status (self, error->message);
      return;
    }
  um_optimizer_page_current_shape (self, &shape);
  r = um_optimizer_plan (self->model, self->hw, &shape, budget, UM_OPTIMIZER_HEADROOM, &error);
  if (r == NULL)
    {
      um_optimizer_page_set_status_error (self, _("Could not plan"), error);
      return;
    }
  if (r->chosen < 0)
    {
      g_autofree char *text = g_strdup_printf (_("Nothing was changed, no mode fits: %s."), r->reason ? r->reason : "");
      um_optimizer_page_set_status (self, text);
      return;
    }
  /* Already in use: nothing to back up, ask or reload. */
  current = shown_profile (self, &base);
  would = um_optimizer_profile (r, current);
  if (current != NULL && um_profile_equal (would, current))
    {
      /* Translators: %s is a memory mode, e.g. "extreme-moderate" */
      g_autofree char *text = g_strdup_printf (_("Nothing to change: %s is already in use and is the best fit."),
                                               um_mem_mode_to_string (would->mem.mode));
      um_optimizer_page_set_status (self, text);
      if (win != NULL && (g_strcmp0 (path, um_window_get_model_path (win)) != 0 || um_window_get_engine (win) == NULL))
        um_window_load_model (win, path);
      return;
    }
  summary = um_profile_summary (would);
  {
    /* Translators: %s is the backend's reason, e.g. "extreme-moderate: the fastest mode that fits 7.2 of 8.0 GiB" */
    g_autofree char *text = g_strdup_printf (_("Optimize would choose %s"), r->reason ? r->reason : "");
    um_optimizer_page_set_status (self, text);
  }
  c = change_new (self, CHANGE_OPTIMIZE);
  c->result = g_steal_pointer (&r);
  c->path = g_strdup (path);
  /* Like Apply: a loaded model is not reloaded without asking. */
  /* Translators: %s is a profile summary, e.g. "extreme-moderate, Q4_K_M, cpu, budget 3.0 GiB" */
  body = g_strdup_printf (_("The settings become “%s”."), summary);
  confirm_reload (self, _("Optimize and Reload?"), body, _("_Optimize and Reload"), c);
}

static void
on_remove_converted_response (AdwMessageDialog *dialog, const char *response, UmOptimizerPage *self)
{
  UmWindow *win = um_optimizer_page_get_window (self);
  const UmProfile *now = win ? um_window_get_profile (win) : NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) list = NULL;
  guint removed = 0;

  if (g_strcmp0 (response, "remove") != 0 || now == NULL)
    return;
  /* As unmask-cli restore --remove-converted: only what the settings now
   * in use do not need, and one file that cannot go does not stop the rest. */
  list = um_profile_unused_converted (now, NULL, NULL, &error);
  for (guint i = 0; list != NULL && i < list->len; i++)
    {
      const UmConvertedEntry *e = g_ptr_array_index (list, i);
      g_autoptr(GError) rerr = NULL;
      if (um_convert_cache_remove (NULL, e->path, &rerr))
        removed++;
      else if (error == NULL)
        error = g_steal_pointer (&rerr);
    }
  if (error != NULL)
    um_optimizer_page_set_status_error (self, _("Could not remove the converted weights"), error);
  else
    {
      g_autofree char *text = g_strdup_printf (g_dngettext (GETTEXT_PACKAGE, "Removed %u file of converted weights.",
                                                            "Removed %u files of converted weights.", removed),
                                               removed);
      um_optimizer_page_set_status (self, text);
    }
}

/* After a restore to settings that use the weights as stored, the files
 * the memory modes converted are only taking disk space: offer to remove
 * them (a mode that needs them converts again). */
static void
offer_remove_converted (UmOptimizerPage *self)
{
  UmWindow *win = um_optimizer_page_get_window (self);
  /* What was just committed; reading the file here could move a damaged
   * one aside unseen. */
  const UmProfile *now = win ? um_window_get_profile (win) : NULL;
  g_autoptr(GPtrArray) list = NULL;
  g_autofree char *dir = um_convert_cache_dir ();
  g_autofree char *size = NULL;
  guint64 bytes = 0;
  GtkWidget *dialog;

  if (win == NULL || now == NULL || now->mem.mode != UM_MEM_STANDARD
      || (now->mem.weight_format[0] != '\0' && g_ascii_strcasecmp (now->mem.weight_format, "stored") != 0))
    return;
  list = um_profile_unused_converted (now, NULL, NULL, NULL);
  if (list == NULL || list->len == 0)
    return;
  for (guint i = 0; i < list->len; i++)
    bytes += ((const UmConvertedEntry *) g_ptr_array_index (list, i))->bytes;
  size = g_format_size (bytes);
  dialog = adw_message_dialog_new (GTK_WINDOW (win), _("Remove the Converted Weights?"), NULL);
  /* Translators: %u files, %s their size, %s the folder */
  adw_message_dialog_format_body (ADW_MESSAGE_DIALOG (dialog),
                                  g_dngettext (GETTEXT_PACKAGE,
                                               "The memory modes keep %u file of converted weights (%s) in %s. "
                                               "The restored settings do not use it; a mode that needs it "
                                               "converts the model again.",
                                               "The memory modes keep %u files of converted weights (%s) in %s. "
                                               "The restored settings do not use them; a mode that needs them "
                                               "converts the model again.", list->len),
                                  list->len, size, dir);
  adw_message_dialog_add_responses (ADW_MESSAGE_DIALOG (dialog), "keep", _("_Keep"), "remove", _("_Remove"), NULL);
  adw_message_dialog_set_response_appearance (ADW_MESSAGE_DIALOG (dialog), "remove", ADW_RESPONSE_DESTRUCTIVE);
  adw_message_dialog_set_default_response (ADW_MESSAGE_DIALOG (dialog), "keep");
  adw_message_dialog_set_close_response (ADW_MESSAGE_DIALOG (dialog), "keep");
  g_signal_connect_object (dialog, "response", G_CALLBACK (on_remove_converted_response), self, 0);
  gtk_window_present (GTK_WINDOW (dialog));
}

static Change *
change_new_restore (UmOptimizerPage *self, const char *which)
{
  Change *c = change_new (self, CHANGE_RESTORE);
  c->which = g_strdup (which);
  return c;
}

gboolean
um_optimizer_page_restore (UmOptimizerPage *self, const char *which, gboolean confirm, GError **error)
{
  g_autoptr(UmProfile) backup = NULL;
  g_autoptr(GPtrArray) skipped = NULL;
  g_autofree char *id = NULL;
  g_autofree char *summary = NULL;
  g_autofree char *list = NULL;
  g_autoptr(GString) body = g_string_new (NULL);
  Change *c;

  g_return_val_if_fail (UM_IS_OPTIMIZER_PAGE (self), FALSE);
  g_return_val_if_fail (which != NULL, FALSE);

  if (!confirm)
    return run_change (self, change_new_restore (self, which), error);
  /* Say what comes back and what "latest" passes over; a backup that
   * cannot be read fails here. */
  id = um_backups_resolve (um_optimizer_page_config_dir (self), which, &skipped, error);
  if (id == NULL || (backup = um_backups_load (um_optimizer_page_config_dir (self), id, error)) == NULL)
    return FALSE;
  summary = um_profile_summary (backup);
  g_string_append_printf (body, _("The settings become “%s”."), summary);
  list = describe_skipped (skipped);
  if (list != NULL)
    {
      g_string_append_c (body, ' ');
      /* Translators: %s lists backups with why, e.g. "20261124-105301-123 (the copy is missing)" */
      g_string_append_printf (body, _("The newer backups %s are damaged and are passed over."), list);
    }
  c = change_new_restore (self, which);
  c->offer_remove = TRUE;
  confirm_reload (self, g_strcmp0 (which, "original") == 0 ? _("Restore the Original Settings?")
                                                            : _("Restore These Settings?"),
                  body->str, _("_Restore and Reload"), c);
  return TRUE;
}

void
um_optimizer_page_undo (UmOptimizerPage *self)
{
  g_autoptr(GError) error = NULL;

  g_return_if_fail (UM_IS_OPTIMIZER_PAGE (self));

  if (self->busy)
    return;
  if (!um_optimizer_page_restore (self, self->undo_id ? self->undo_id : "latest", TRUE, &error))
    um_optimizer_page_set_status_error (self, _("Could not undo"), error);
}

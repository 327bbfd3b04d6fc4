/* um-backups.h — backups of the optimizer profile and restore.
 *
 * Before every change the current optimizer.json is copied into
 * $XDG_CONFIG_HOME/unmask/backups/ and recorded in backups/manifest.json
 * (id, time, reason, mode summary, sha256 of the copy). The first state
 * ever saved is kept as "original" forever; the others up to
 * UM_BACKUPS_KEEP, oldest dropped first. An entry whose copy is missing or
 * whose checksum differs is reported (valid FALSE, problem) and never
 * restored. Every file is written with um_atomic_write (), the copy before
 * the manifest that names it; changes take a lock (flock on
 * .optimizer.lock in the config folder) so two processes do not interleave.
 */
#pragma once

#include <glib.h>

#include "um-profile.h"

G_BEGIN_DECLS

#define UM_BACKUPS_KEEP 50

typedef struct {
  char    *id;        /* "original", or "20261124-105301-123" (time, then a counter) */
  gint64   time;      /* Unix seconds */
  char    *reason;    /* "before optimize → extreme-moderate", "before restore → original" */
  char    *summary;   /* um_profile_summary () of the copy */
  char    *sha256;
  char    *file;      /* its file name in backups/ */
  gboolean valid;     /* the copy exists and matches sha256 */
  char    *problem;   /* why not, or NULL */
} UmBackup;

void um_backup_free (UmBackup *b);

/* The entries of @config_dir's manifest (NULL: the default folder), oldest
 * first, each checked. A missing manifest is an empty list; a corrupt one
 * is moved aside (*@notice says so) and the list rebuilt from nothing. */
GPtrArray *um_backups_list (const char *config_dir, char **notice, GError **error);

/* Copies the current profile (the defaults if there is no file) into a new
 * backup with @reason; *@id_out gets its id ("original" the first time). */
gboolean   um_backups_save (const char *config_dir, const char *reason, char **id_out, GError **error);

/* "original", "latest" (the newest valid entry) or an id. */
UmProfile *um_backups_load (const char *config_dir, const char *which, GError **error);

/* The id "original", "latest" or an id stands for now, if it can be
 * restored (valid); else NULL and an error. */
char      *um_backups_resolve (const char *config_dir, const char *which, GError **error);

/* Backs up the current profile ("before restore → WHICH"), then writes the
 * backup's profile as the current one, written_by restore. *@undo_id gets
 * the id of the backup just made, so the restore can itself be undone. */
gboolean   um_backups_restore (const char *config_dir, const char *which, char **undo_id, GError **error);

/* Any change to the profile: backs up the current one with @reason, then
 * writes @p (as given: set written_by, written_at and reason first), both
 * under one lock so the app and unmask-cli do not interleave. *@backup_id
 * gets the backup's id. */
gboolean   um_backups_commit (const UmProfile *p, const char *config_dir, const char *reason,
                              char **backup_id, GError **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmBackup, um_backup_free)

G_END_DECLS

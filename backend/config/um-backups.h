/* um-backups.h — backups of the optimizer profile and restore.
 *
 * Every change of optimizer.json is a commit: under one lock (flock on
 * .optimizer.lock in the config folder, so the app and unmask-cli never
 * interleave) it reads the current file, checks it is still the revision
 * the change was built on, copies its bytes into backups/, records the copy
 * in backups/manifest.json (id, time, reason, mode summary, sha256 of the
 * copy, and the revision the commit is about to write) and writes the new
 * profile. Each file is written with um_atomic_write (), the copy before
 * the manifest that names it, the manifest before the profile.
 *
 * A kill between the manifest and the profile leaves a newest entry whose
 * copy is the current file and whose next revision never arrived: such an
 * entry is a commit that did not happen and is neither listed nor kept. So
 * after any kill the profile is one complete version and the newest backup
 * is the state before it.
 *
 * The first state ever saved is kept as "original" forever (a file of that
 * name is never written over); the others up to UM_BACKUPS_KEEP, oldest
 * dropped first. A missing or damaged manifest is rebuilt from the copies.
 * An entry whose copy is missing or whose checksum differs is reported
 * (valid FALSE, problem) and never restored. A commit that changes nothing
 * writes nothing.
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
  char    *next;      /* the revision the commit after this copy wrote, NULL if not recorded */
} UmBackup;

void um_backup_free (UmBackup *b);

UmBackup *um_backup_copy (const UmBackup *b);

/* What a commit did. */
typedef struct {
  char      *backup_id;   /* the backup of the state before; NULL when nothing was written */
  gboolean   unchanged;   /* the profile already said this: nothing was written */
  char      *revision;    /* the profile's revision now (um_profile_revision_of ()) */
  UmProfile *profile;     /* the profile now */
  char      *restored_id; /* um_backups_restore (): the backup brought back */
  char      *notice;      /* the profile was damaged and moved aside (um_profile_load ()'s
                           * notice); set even when the commit then fails */
} UmCommit;

void um_commit_clear (UmCommit *c);

/* The entries of @config_dir's manifest (NULL: the default folder), oldest
 * first, each checked. No manifest and no copies is an empty list; a
 * damaged or missing manifest with copies beside it is rebuilt from them
 * (and *@notice says so). */
GPtrArray *um_backups_list (const char *config_dir, char **notice, GError **error);

/* Copies the current profile (the defaults if there is no file) into a new
 * backup with @reason; *@id_out gets its id ("original" the first time).
 * Only a backup: no profile is written. */
gboolean   um_backups_save (const char *config_dir, const char *reason, char **id_out, GError **error);

/* "original", "latest" (the newest valid entry) or an id. */
UmProfile *um_backups_load (const char *config_dir, const char *which, GError **error);

/* The id "original", "latest" or an id stands for now, if it can be
 * restored (valid); else NULL and an error. For "latest", *@skipped (if
 * given) gets copies of the newer entries passed over because they are
 * damaged (UmBackup*, each with its problem), newest first. */
char      *um_backups_resolve (const char *config_dir, const char *which, GPtrArray **skipped, GError **error);

/* Writes the backup's profile as the current one (written_by restore),
 * committed like any change ("before restore → WHICH"); @out->backup_id is
 * the undo id. Restoring what the profile already says writes nothing
 * (@out->unchanged). *@skipped as for um_backups_resolve (). */
gboolean   um_backups_restore (const char *config_dir, const char *which, UmCommit *out, GPtrArray **skipped,
                               GError **error);

/* Commits @p (set written_by, written_at and reason first). @base_revision
 * is the revision @p was built on (um_profile_load_full ()): if the file
 * has changed since, nothing is written and the error is
 * UM_ERROR_CONFLICT (merge or ask, then try again); NULL commits over
 * whatever is there. */
gboolean   um_backups_commit (const UmProfile *p, const char *config_dir, const char *reason,
                              const char *base_revision, UmCommit *out, GError **error);

/* Read-modify-write under the lock: @edit changes a copy of the current
 * profile (returning FALSE with an error cancels), then it is committed.
 * What unmask-cli uses: a change is always made to the latest state. */
typedef gboolean (*UmProfileEdit) (UmProfile *p, gpointer user_data, GError **error);
gboolean   um_backups_update (const char *config_dir, const char *reason, UmProfileEdit edit, gpointer user_data,
                              UmCommit *out, GError **error);

/* For tests: called at each stage of a commit ("locked", "copy",
 * "manifest", "profile", "pruned"), under the lock. */
typedef void (*UmBackupsStageHook) (const char *stage, gpointer user_data);
void       um_backups_set_stage_hook (UmBackupsStageHook hook, gpointer user_data);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmBackup, um_backup_free)
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (UmCommit, um_commit_clear)

G_END_DECLS

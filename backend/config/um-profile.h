/* um-profile.h — the optimizer profile: $XDG_CONFIG_HOME/unmask/optimizer.json.
 *
 * What the one-click optimizer patches and the engine options are built
 * from: the memory mode and its knobs, device, threads, budget, the
 * parameter limits and defaults the mode recommends, per-model overrides,
 * and who wrote it when. Shared by unmask-cli and the app; no GTK.
 *
 * Reading is strict (invalid JSON, a wrong type, an unknown key, a newer
 * version are errors); um_profile_load() turns such a file into a notice
 * and the defaults, and changes no file. Only a commit (um-backups.h,
 * under its lock) moves a damaged file aside, as
 * optimizer.json.corrupt-<time>; a file of a newer Unmask is never moved,
 * pruned or written over: commits refuse it. Every write is atomic
 * (um_atomic_write ()).
 */
#pragma once

#include <glib.h>

#include "um-engine.h"
#include "um-gen-defaults.h"
#include "um-plan.h"

G_BEGIN_DECLS

#define UM_PROFILE_VERSION 1

typedef enum {
  UM_PROFILE_BY_DEFAULT,    /* never written: the defaults */
  UM_PROFILE_BY_OPTIMIZE,
  UM_PROFILE_BY_USER,
  UM_PROFILE_BY_RESTORE,
} UmProfileWriter;

const char *um_profile_writer_to_string (UmProfileWriter w);   /* "default", "optimize", "user", "restore" */

typedef struct {
  char         *model_id;    /* um_model_identity () of the model */
  UmMemOptions  mem;
} UmProfileOverride;

typedef struct {
  int             version;          /* UM_PROFILE_VERSION */
  UmMemOptions    mem;              /* the active mode and its knobs */
  UmDeviceKind    device;
  int             gpu_index;
  int             n_threads;        /* 0: all cores */
  guint64         memory_budget;    /* 0: the device's */
  /* Fraction of the device (budget or free memory) the engine keeps free
   * when it sizes what fills the rest, extreme-aggressive's layer slots:
   * the optimizer writes the headroom it planned with, so that a load
   * does what it promised. 0: none (the slots fill the device). */
  double          headroom;
  /* What the mode recommends (0: no limit / no default). */
  int             limit_gen_length, limit_block_length, limit_steps;
  int             default_gen_length, default_block_length, default_steps;
  GPtrArray      *overrides;        /* UmProfileOverride*, per model */
  UmProfileWriter written_by;
  gint64          written_at;       /* Unix seconds; 0 for defaults */
  char           *reason;           /* e.g. "optimize → extreme-moderate (fits 8.0 GiB GPU)", may be NULL */
} UmProfile;

UmProfile *um_profile_new_default (void);
UmProfile *um_profile_copy (const UmProfile *p);
void       um_profile_free (UmProfile *p);
/* Same settings (written_by, written_at and reason are not compared). */
gboolean   um_profile_equal (const UmProfile *a, const UmProfile *b);
/* Sets the mode and the limits and defaults it recommends. */
void       um_profile_set_mode (UmProfile *p, UmMemMode mode);
/* "extreme-moderate, Q4_K_M, cpu, budget 3.0 GiB": for lists and manifests. */
char      *um_profile_summary (const UmProfile *p);

char      *um_profile_to_json (const UmProfile *p);
UmProfile *um_profile_from_json (const char *text, gssize len, GError **error);

/* $XDG_CONFIG_HOME/unmask when @config_dir is NULL. */
char      *um_profile_dir (const char *config_dir);
char      *um_profile_path (const char *config_dir);

/* The profile in @config_dir: defaults if there is none; defaults too for
 * a damaged file or one written by a newer Unmask, which stays as it is
 * while *@notice (if given) says why; NULL only when the folder cannot be
 * read at all. */
UmProfile *um_profile_load (const char *config_dir, char **notice, GError **error);
/* The profile's revision: the hex SHA-256 of the file's bytes or, with no
 * file, of the defaults' JSON (what a backup of that state would hold).
 * Two readers agree on it exactly when they read the same state. */
char      *um_profile_revision_of (const char *text, gsize len);
/* um_profile_load () that also gives the revision of what it read (the
 * defaults' if the file was missing or moved aside) and, if @bytes is not
 * NULL, the file's bytes (NULL when there was no readable profile). */
UmProfile *um_profile_load_full (const char *config_dir, char **notice, char **revision, GBytes **bytes,
                                 GError **error);
/* For a commit, under um-backups.c's lock: um_profile_load_full (), but a
 * damaged file is moved aside first (*@notice names where), and a file of
 * a newer Unmask is an UM_ERROR_UNSUPPORTED error. */
UmProfile *um_profile_load_for_commit (const char *config_dir, char **notice, char **revision, GBytes **bytes,
                                       GError **error);
/* The revision of the file as it is now, without parsing or moving it. */
char      *um_profile_current_revision (const char *config_dir, GError **error);
/* Writes @p atomically (the caller backs up first: um_backups_save ()). */
gboolean   um_profile_save (const UmProfile *p, const char *config_dir, GError **error);

/* Temporary file in the same folder, fsync, rename over @path, fsync of
 * the folder (a failure of any is an error): @path is always either the
 * old or the new complete file. The new file keeps the old one's mode; a
 * symlink at @path stays, and the file it points to is written. */
gboolean   um_atomic_write (const char *path, const char *data, gsize len, GError **error);
/* Moves a damaged file aside as PATH.corrupt-<UTC time>; returns the new
 * base name, or NULL if it could not be moved. */
char      *um_config_move_aside (const char *path);

/* A short stable key for a model: its canonical path (a folder or a
 * .gguf) and size, hashed. */
char      *um_model_identity (const char *model_path);

/* Engine options as the profile says, for the model @model_id (its
 * override if it has one; NULL: none). Sets threads, budget, device and
 * GPU (unless UNMASK_DEVICE is set; "auto" leaves @o's device), the memory
 * mode and knobs, the headroom, and the plan's shape from the recommended defaults; the
 * rest of @o (products, cache folder, prompt length) is left as it is, so
 * call um_engine_options_init () first. */
void       um_profile_to_engine_options (const UmProfile *p, const char *model_id, UmEngineOptions *o);

/* The generation defaults the profile's mode recommends for @model_id, as
 * the "profile" layer of um_gen_resolve (): none for a profile never
 * written (the built-in defaults are the standard mode's) or for a model
 * whose override puts it in another mode. */
void       um_profile_gen_layer (const UmProfile *p, const char *model_id, UmGenLayer *out);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmProfile, um_profile_free)

G_END_DECLS

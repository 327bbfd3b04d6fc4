/* um-backups.c — backups of the optimizer profile, their manifest, commits and restore. */
#include "um-backups.h"

#include <errno.h>
#include <fcntl.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "um-error.h"
#include "um-json.h"

#define MANIFEST_FILE "manifest.json"
/* 2: entries may carry "next", the revision their commit wrote. */
#define MANIFEST_VERSION 2
#define ORIGINAL_ID "original"

static UmBackupsStageHook stage_hook;
static gpointer stage_hook_data;

void
um_backups_set_stage_hook (UmBackupsStageHook hook, gpointer user_data)
{
  stage_hook = hook;
  stage_hook_data = user_data;
}

static void
stage (const char *what)
{
  if (stage_hook != NULL)
    stage_hook (what, stage_hook_data);
}

void
um_backup_free (UmBackup *b)
{
  if (b == NULL)
    return;
  g_free (b->id);
  g_free (b->reason);
  g_free (b->summary);
  g_free (b->sha256);
  g_free (b->file);
  g_free (b->problem);
  g_free (b->next);
  g_free (b);
}

UmBackup *
um_backup_copy (const UmBackup *b)
{
  UmBackup *c = g_new0 (UmBackup, 1);

  *c = *b;
  c->id = g_strdup (b->id);
  c->reason = g_strdup (b->reason);
  c->summary = g_strdup (b->summary);
  c->sha256 = g_strdup (b->sha256);
  c->file = g_strdup (b->file);
  c->problem = g_strdup (b->problem);
  c->next = g_strdup (b->next);
  return c;
}

void
um_commit_clear (UmCommit *c)
{
  g_clear_pointer (&c->backup_id, g_free);
  g_clear_pointer (&c->revision, g_free);
  g_clear_pointer (&c->profile, um_profile_free);
  g_clear_pointer (&c->restored_id, g_free);
  g_clear_pointer (&c->notice, g_free);
  c->unchanged = FALSE;
}

static char *
backups_dir (const char *config_dir)
{
  g_autofree char *dir = um_profile_dir (config_dir);
  return g_build_filename (dir, "backups", NULL);
}

/* ---- a lock, so the app and unmask-cli do not interleave changes ---- */

/* @writing: about to change files, so the folder is made if needed; a
 * reader of a folder that is not there has nothing to lock. */
static int
lock_config (const char *config_dir, gboolean writing)
{
  g_autofree char *dir = um_profile_dir (config_dir);
  g_autofree char *path = g_build_filename (dir, ".optimizer.lock", NULL);
  int fd;

  if (writing)
    g_mkdir_with_parents (dir, 0700);
  fd = open (path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  /* Without a lock (a read-only or odd file system) the writes are still
   * atomic one by one; only concurrent writers could lose an entry. */
  if (fd < 0)
    return -1;
  while (flock (fd, LOCK_EX) != 0)
    if (errno != EINTR)
      {
        close (fd);
        return -1;
      }
  return fd;
}

static void
unlock_config (int fd)
{
  if (fd >= 0)
    close (fd);   /* releases the flock */
}

/* ---- the manifest ---- */

static gboolean
safe_file_name (const char *name)
{
  return name != NULL && name[0] != '\0' && name[0] != '.' && strchr (name, '/') == NULL
         && g_str_has_suffix (name, ".json") && !g_str_equal (name, MANIFEST_FILE);
}

/* "YYYYMMDD-HHMMSS-N….json": a name new_id () makes. */
static gboolean
is_dated_name (const char *name)
{
  gsize n = strlen (name);

  if (n < 22 || !g_str_has_suffix (name, ".json") || name[8] != '-' || name[15] != '-')
    return FALSE;
  for (gsize i = 0; i < n - 5; i++)
    if (i != 8 && i != 15 && !g_ascii_isdigit (name[i]))
      return FALSE;
  return TRUE;
}

static char *
sha256_of (const char *data, gsize len)
{
  return g_compute_checksum_for_data (G_CHECKSUM_SHA256, (const guchar *) data, len);
}

/* Sets valid and problem: the copy must exist and match its checksum. */
static void
check_entry (const char *bdir, UmBackup *b)
{
  g_autofree char *path = NULL;
  g_autofree char *text = NULL;
  g_autofree char *sum = NULL;
  g_autoptr(GError) err = NULL;
  gsize len;

  g_clear_pointer (&b->problem, g_free);
  b->valid = FALSE;
  if (!safe_file_name (b->file))
    {
      b->problem = g_strdup_printf ("its file name “%s” is not a backup's", b->file);
      return;
    }
  path = g_build_filename (bdir, b->file, NULL);
  if (!g_file_get_contents (path, &text, &len, &err))
    {
      if (g_error_matches (err, G_FILE_ERROR, G_FILE_ERROR_NOENT))
        b->problem = g_strdup_printf ("the copy %s is missing", b->file);
      else
        b->problem = g_strdup_printf ("the copy %s cannot be read: %s", b->file, err->message);
      return;
    }
  sum = sha256_of (text, len);
  if (g_ascii_strcasecmp (sum, b->sha256) != 0)
    {
      b->problem = g_strdup_printf ("the copy %s does not match its checksum (changed or damaged)", b->file);
      return;
    }
  b->valid = TRUE;
}

static const char *
member_string (JsonObject *o, const char *key, GError **error)
{
  const char *s = um_json_get_string (o, key);

  if (s == NULL)
    g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "an entry's “%s” is missing or not a string", key);
  return s;
}

static GPtrArray *
entries_new (void)
{
  return g_ptr_array_new_with_free_func ((GDestroyNotify) um_backup_free);
}

static gboolean
check_keys (JsonObject *o, const char *const *known, const char *where, GError **error)
{
  JsonObjectIter it;
  const char *key;
  JsonNode *v;

  json_object_iter_init_ordered (&it, o);
  while (json_object_iter_next_ordered (&it, &key, &v))
    if (!g_strv_contains (known, key))
      {
        g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "unknown key “%s” in %s", key, where);
        return FALSE;
      }
  return TRUE;
}

static GPtrArray *
manifest_from_json (const char *text, gsize len, GError **error)
{
  static const char *const top_keys[] = { "version", "backups", NULL };
  static const char *const entry_keys[] = { "id", "time", "reason", "summary", "sha256", "file", "next", NULL };
  g_autoptr(GPtrArray) entries = entries_new ();
  g_autoptr(GHashTable) ids = g_hash_table_new (g_str_hash, g_str_equal);
  g_autoptr(JsonNode) root = NULL;
  JsonNode *n;
  JsonObject *obj;
  JsonArray *arr;

  root = um_json_parse (text, (gssize) len, "manifest.json", NULL, error);
  if (root == NULL || (obj = um_json_root_object (root, "manifest.json", error)) == NULL)
    return NULL;
  if (!check_keys (obj, top_keys, "the manifest", error))
    return NULL;
  n = json_object_get_member (obj, "version");
  if (n == NULL || !JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_INT64
      || json_node_get_int (n) < 1)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "“version” is missing or not a positive integer");
      return NULL;
    }
  if (json_node_get_int (n) > MANIFEST_VERSION)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "written by a newer Unmask (version %" G_GINT64_FORMAT ")",
                   json_node_get_int (n));
      return NULL;
    }
  n = json_object_get_member (obj, "backups");
  if (n == NULL || !JSON_NODE_HOLDS_ARRAY (n))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "“backups” is missing or not a list");
      return NULL;
    }
  arr = json_node_get_array (n);
  for (guint i = 0; i < json_array_get_length (arr); i++)
    {
      JsonNode *en = json_array_get_element (arr, i);
      g_autoptr(UmBackup) b = g_new0 (UmBackup, 1);
      JsonObject *e;
      JsonNode *t;
      const char *s;

      if (!JSON_NODE_HOLDS_OBJECT (en))
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "entry %u is not an object", i);
          return NULL;
        }
      e = json_node_get_object (en);
      if (!check_keys (e, entry_keys, "an entry", error))
        return NULL;
#define STR(field, key) G_STMT_START { \
        if ((s = member_string (e, key, error)) == NULL) \
          return NULL; \
        b->field = g_strdup (s); \
      } G_STMT_END
      STR (id, "id");
      STR (reason, "reason");
      STR (summary, "summary");
      STR (sha256, "sha256");
      STR (file, "file");
      if (json_object_has_member (e, "next"))
        STR (next, "next");
#undef STR
      t = json_object_get_member (e, "time");
      if (t == NULL || !JSON_NODE_HOLDS_VALUE (t) || json_node_get_value_type (t) != G_TYPE_INT64)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "an entry's “time” is missing or not an integer");
          return NULL;
        }
      b->time = json_node_get_int (t);
      if (b->id[0] == '\0' || g_hash_table_contains (ids, b->id))
        {
          g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "the id “%s” is empty or repeated", b->id);
          return NULL;
        }
      g_hash_table_add (ids, b->id);
      g_ptr_array_add (entries, g_steal_pointer (&b));
    }
  return g_steal_pointer (&entries);
}

static char *
manifest_to_json (GPtrArray *entries)
{
  g_autoptr(JsonBuilder) b = json_builder_new ();
  g_autoptr(JsonGenerator) gen = json_generator_new ();
  g_autoptr(JsonNode) root = NULL;
  g_autofree char *text = NULL;

  json_builder_begin_object (b);
  json_builder_set_member_name (b, "version");
  json_builder_add_int_value (b, MANIFEST_VERSION);
  json_builder_set_member_name (b, "backups");
  json_builder_begin_array (b);
  for (guint i = 0; i < entries->len; i++)
    {
      const UmBackup *e = g_ptr_array_index (entries, i);
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "id");
      json_builder_add_string_value (b, e->id);
      json_builder_set_member_name (b, "time");
      json_builder_add_int_value (b, e->time);
      json_builder_set_member_name (b, "reason");
      json_builder_add_string_value (b, e->reason);
      json_builder_set_member_name (b, "summary");
      json_builder_add_string_value (b, e->summary);
      json_builder_set_member_name (b, "sha256");
      json_builder_add_string_value (b, e->sha256);
      json_builder_set_member_name (b, "file");
      json_builder_add_string_value (b, e->file);
      if (e->next != NULL)
        {
          json_builder_set_member_name (b, "next");
          json_builder_add_string_value (b, e->next);
        }
      json_builder_end_object (b);
    }
  json_builder_end_array (b);
  json_builder_end_object (b);
  root = json_builder_get_root (b);
  json_generator_set_pretty (gen, TRUE);
  json_generator_set_root (gen, root);
  text = json_generator_to_data (gen, NULL);
  return g_strconcat (text, "\n", NULL);
}

static gboolean
write_manifest (const char *bdir, GPtrArray *entries, GError **error)
{
  g_autofree char *path = g_build_filename (bdir, MANIFEST_FILE, NULL);
  g_autofree char *text = manifest_to_json (entries);
  return um_atomic_write (path, text, strlen (text), error);
}

static int
compare_entries (gconstpointer a, gconstpointer b)
{
  const UmBackup *x = *(UmBackup *const *) a, *y = *(UmBackup *const *) b;
  gboolean xo = g_str_equal (x->id, ORIGINAL_ID), yo = g_str_equal (y->id, ORIGINAL_ID);

  if (xo != yo)
    return xo ? -1 : 1;
  if (x->time != y->time)
    return x->time < y->time ? -1 : 1;
  return strcmp (x->id, y->id);
}

/* The time new_id () put in @id, or -1. */
static gint64
id_time (const char *id)
{
  int Y, M, D, h, m, sec;
  g_autoptr(GDateTime) dt = NULL;

  if (sscanf (id, "%4d%2d%2d-%2d%2d%2d-", &Y, &M, &D, &h, &m, &sec) != 6)
    return -1;
  dt = g_date_time_new_utc (Y, M, D, h, m, sec);
  return dt ? g_date_time_to_unix (dt) : -1;
}

/* Whether @name in @bdir is a profile a newer Unmask wrote (its backup,
 * which its own manifest lists): never garbage of ours. */
static gboolean
newer_copy (const char *bdir, const char *name)
{
  g_autofree char *path = g_build_filename (bdir, name, NULL);
  g_autofree char *text = NULL;
  g_autoptr(GError) err = NULL;
  g_autoptr(UmProfile) p = NULL;
  gsize len;

  if (!g_file_get_contents (path, &text, &len, NULL))
    return FALSE;
  p = um_profile_from_json (text, (gssize) len, &err);
  return p == NULL && g_error_matches (err, UM_ERROR, UM_ERROR_UNSUPPORTED);
}

/* An entry for the copy @name in @bdir, if it reads as a profile. */
static UmBackup *
recover_entry (const char *bdir, const char *name, const char *why)
{
  g_autofree char *path = g_build_filename (bdir, name, NULL);
  g_autofree char *text = NULL;
  g_autoptr(UmProfile) p = NULL;
  UmBackup *b;
  GStatBuf st;
  gsize len;

  if (!safe_file_name (name) || !g_file_get_contents (path, &text, &len, NULL)
      || (p = um_profile_from_json (text, (gssize) len, NULL)) == NULL)
    return NULL;
  b = g_new0 (UmBackup, 1);
  b->id = g_strndup (name, strlen (name) - strlen (".json"));
  b->time = id_time (b->id);
  if (b->time < 0)
    b->time = g_stat (path, &st) == 0 ? (gint64) st.st_mtime : 0;
  b->reason = g_strdup (why);
  b->summary = um_profile_summary (p);
  b->sha256 = sha256_of (text, len);
  b->file = g_strdup (name);
  return b;
}

/* After a damaged or missing manifest: an entry for every copy in the
 * folder that reads as a profile, so no backup is lost with the manifest. */
static GPtrArray *
rebuild_entries (const char *bdir)
{
  GPtrArray *entries = entries_new ();
  g_autoptr(GDir) d = g_dir_open (bdir, 0, NULL);
  const char *name;

  while (d != NULL && (name = g_dir_read_name (d)) != NULL)
    {
      UmBackup *b = recover_entry (bdir, name, "recovered after the list of backups was lost or damaged");
      if (b != NULL)
        g_ptr_array_add (entries, b);
    }
  g_ptr_array_sort (entries, compare_entries);
  return entries;
}

static UmBackup *
find_entry (GPtrArray *entries, const char *id)
{
  for (guint i = 0; i < entries->len; i++)
    {
      UmBackup *b = g_ptr_array_index (entries, i);
      if (g_str_equal (b->id, id))
        return b;
    }
  return NULL;
}

static gboolean
names_file (GPtrArray *entries, const char *file)
{
  for (guint i = 0; i < entries->len; i++)
    if (g_strcmp0 (((UmBackup *) g_ptr_array_index (entries, i))->file, file) == 0)
      return TRUE;
  return FALSE;
}

typedef struct {
  GPtrArray *entries;   /* UmBackup*, oldest first, checked */
  GPtrArray *garbage;   /* file names: copies of commits that never happened */
  gboolean   rewrite;   /* the manifest on disk differs from entries */
} Manifest;

static void
manifest_clear (Manifest *m)
{
  g_clear_pointer (&m->entries, g_ptr_array_unref);
  g_clear_pointer (&m->garbage, g_ptr_array_unref);
}

G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (Manifest, manifest_clear)

/* The manifest's entries as they stand for @revision (the profile's now):
 *  - a missing manifest beside copies, or a damaged one (moved aside), is
 *    rebuilt from the copies (*@notice says so);
 *  - "original" is taken back if the manifest lost it but the copy is there;
 *  - the newest entry is dropped if its commit never wrote its profile (its
 *    copy is the current file and "next" never arrived);
 *  - dated copies no entry names are garbage: a commit killed before its
 *    manifest (or after it, before deleting what it pruned). */
static gboolean
read_manifest (const char *bdir, const char *revision, Manifest *m, char **notice, GError **error)
{
  g_autofree char *path = g_build_filename (bdir, MANIFEST_FILE, NULL);
  g_autofree char *text = NULL;
  g_autofree char *msg = NULL;
  g_autoptr(GError) err = NULL;
  gboolean rebuilt = FALSE;
  gsize len = 0;

  m->entries = NULL;
  m->garbage = g_ptr_array_new_with_free_func (g_free);
  m->rewrite = FALSE;
  if (!g_file_get_contents (path, &text, &len, &err))
    {
      if (!g_error_matches (err, G_FILE_ERROR, G_FILE_ERROR_NOENT))
        {
          g_set_error (error, UM_ERROR, UM_ERROR_IO, "cannot read the list of backups: %s", err->message);
          return FALSE;
        }
      /* Lost (a kill after moving a damaged one aside, a failed rewrite, a
       * user's rm): the copies are the history. */
      m->entries = rebuild_entries (bdir);
      rebuilt = TRUE;
      if (m->entries->len > 0)
        msg = g_strdup_printf ("The list of optimizer backups was missing. It was rebuilt from the %u backup%s found.",
                               m->entries->len, m->entries->len == 1 ? "" : "s");
    }
  else if ((m->entries = manifest_from_json (text, len, &err)) == NULL)
    {
      if (g_error_matches (err, UM_ERROR, UM_ERROR_UNSUPPORTED))
        {
          /* Not ours to rebuild, move or prune. */
          g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED,
                       "the list of optimizer backups %s was %s: this version changes nothing there", path,
                       err->message);
          return FALSE;
        }

      g_autofree char *moved = um_config_move_aside (path);

      m->entries = rebuild_entries (bdir);
      rebuilt = TRUE;
      msg = g_strdup_printf ("The list of optimizer backups could not be read (%s). It was %s%s and rebuilt from "
                             "the %u backup%s found.", err->message, moved ? "moved aside to " : "left in place",
                             moved ? moved : "", m->entries->len, m->entries->len == 1 ? "" : "s");
    }
  m->rewrite = rebuilt && m->entries->len > 0;

  if (!rebuilt && find_entry (m->entries, ORIGINAL_ID) == NULL)
    {
      UmBackup *b = recover_entry (bdir, ORIGINAL_ID ".json", "recovered: the list of backups had lost it");
      if (b != NULL)
        {
          g_ptr_array_insert (m->entries, 0, b);
          m->rewrite = TRUE;
        }
    }

  if (revision != NULL && m->entries->len > 0)
    {
      UmBackup *newest = g_ptr_array_index (m->entries, m->entries->len - 1);
      if (!g_str_equal (newest->id, ORIGINAL_ID) && newest->next != NULL
          && g_ascii_strcasecmp (newest->sha256, revision) == 0 && g_ascii_strcasecmp (newest->next, revision) != 0)
        {
          if (safe_file_name (newest->file))
            g_ptr_array_add (m->garbage, g_strdup (newest->file));
          g_ptr_array_remove_index (m->entries, m->entries->len - 1);
          m->rewrite = TRUE;
        }
    }

  if (!rebuilt)
    {
      g_autoptr(GDir) d = g_dir_open (bdir, 0, NULL);
      const char *name;
      while (d != NULL && (name = g_dir_read_name (d)) != NULL)
        if (is_dated_name (name) && !names_file (m->entries, name)
            && !g_ptr_array_find_with_equal_func (m->garbage, name, g_str_equal, NULL) && !newer_copy (bdir, name))
          g_ptr_array_add (m->garbage, g_strdup (name));
    }

  for (guint i = 0; i < m->entries->len; i++)
    check_entry (bdir, g_ptr_array_index (m->entries, i));
  if (msg != NULL)
    {
      if (notice != NULL)
        *notice = g_steal_pointer (&msg);
      else
        g_message ("%s", msg);
    }
  return TRUE;
}

GPtrArray *
um_backups_list (const char *config_dir, char **notice, GError **error)
{
  g_autofree char *bdir = backups_dir (config_dir);
  g_autofree char *revision = NULL;
  g_auto(Manifest) m = { 0 };
  int lock;
  gboolean ok;

  if (notice != NULL)
    *notice = NULL;
  lock = lock_config (config_dir, FALSE);
  revision = um_profile_current_revision (config_dir, NULL);
  ok = read_manifest (bdir, revision, &m, notice, error);
  /* A rebuilt list is written back, so the notice is given once. */
  if (ok && m.rewrite)
    {
      g_autoptr(GError) werr = NULL;
      if (!write_manifest (bdir, m.entries, &werr))
        g_message ("cannot rewrite the list of backups: %s", werr->message);
    }
  unlock_config (lock);
  return ok ? g_steal_pointer (&m.entries) : NULL;
}

/* "YYYYMMDD-HHMMSS-NNN": the time, then a counter unique in @entries and in
 * the folder (a copy a killed writer left unlisted is not reused). */
static char *
new_id (const char *bdir, GPtrArray *entries, gint64 now)
{
  g_autoptr(GDateTime) dt = g_date_time_new_from_unix_utc (now);
  g_autofree char *stamp = g_date_time_format (dt, "%Y%m%d-%H%M%S");

  for (guint n = 1;; n++)
    {
      g_autofree char *id = g_strdup_printf ("%s-%03u", stamp, n);
      g_autofree char *file = g_strconcat (id, ".json", NULL);
      g_autofree char *path = g_build_filename (bdir, file, NULL);
      if (find_entry (entries, id) == NULL && !g_file_test (path, G_FILE_TEST_EXISTS))
        return g_steal_pointer (&id);
    }
}

/* Drops the oldest entries (never "original") while more than @keep others
 * remain; their files join the garbage. */
static guint
drop_excess (Manifest *m, guint keep)
{
  guint others = 0, dropped = 0;

  for (guint i = 0; i < m->entries->len; i++)
    others += !g_str_equal (((UmBackup *) g_ptr_array_index (m->entries, i))->id, ORIGINAL_ID);
  for (guint i = 0; i < m->entries->len && others > keep;)
    {
      UmBackup *e = g_ptr_array_index (m->entries, i);
      if (g_str_equal (e->id, ORIGINAL_ID))
        {
          i++;
          continue;
        }
      g_ptr_array_add (m->garbage, g_strdup (e->file));
      g_ptr_array_remove_index (m->entries, i);
      others--;
      dropped++;
    }
  return dropped;
}

/* Copies @current (its file's @bytes, or its JSON when there is no file)
 * into a new backup and lists it, with @next the revision about to be
 * written (NULL: none). */
static gboolean
add_backup (const char *bdir, Manifest *m, const UmProfile *current, GBytes *bytes, const char *reason,
            const char *next, char **id_out, GError **error)
{
  g_autoptr(UmBackup) b = g_new0 (UmBackup, 1);
  g_autofree char *json = NULL;
  g_autofree char *copy_path = NULL;
  g_autofree char *original_path = g_build_filename (bdir, ORIGINAL_ID ".json", NULL);
  const char *text;
  gsize len;
  gint64 now = g_get_real_time () / G_USEC_PER_SEC;

  /* The user's bytes as they were, not our rewriting of them. */
  if (bytes != NULL)
    text = g_bytes_get_data (bytes, &len);
  else
    {
      json = um_profile_to_json (current);
      text = json;
      len = strlen (json);
    }
  /* "original" once, and never over a file of that name, listed or not. */
  b->id = find_entry (m->entries, ORIGINAL_ID) == NULL && !g_file_test (original_path, G_FILE_TEST_EXISTS)
            ? g_strdup (ORIGINAL_ID)
            : new_id (bdir, m->entries, now);
  b->time = now;
  b->reason = g_strdup (reason ? reason : "before a change");
  b->summary = um_profile_summary (current);
  b->sha256 = sha256_of (text, len);
  b->file = g_strconcat (b->id, ".json", NULL);
  b->next = g_strdup (next);
  b->valid = TRUE;
  /* What a commit killed before its pruning left over the limit goes now,
   * so the list never holds more than one entry beyond it. */
  drop_excess (m, UM_BACKUPS_KEEP);
  /* The copy first: the manifest never names a file that is not there. */
  copy_path = g_build_filename (bdir, b->file, NULL);
  if (!um_atomic_write (copy_path, text, len, error))
    return FALSE;
  stage ("copy");
  if (id_out != NULL)
    *id_out = g_strdup (b->id);
  g_ptr_array_add (m->entries, g_steal_pointer (&b));
  if (!write_manifest (bdir, m->entries, error))
    {
      if (id_out != NULL)
        g_clear_pointer (id_out, g_free);
      return FALSE;
    }
  m->rewrite = FALSE;
  stage ("manifest");
  return TRUE;
}

/* After the profile is written: drops the oldest entries beyond
 * UM_BACKUPS_KEEP and deletes their copies and the garbage. Only once no
 * entry names them: a kill before this leaves stray files that the next
 * commit deletes, never a listed backup without its copy. A failure here
 * loses nothing and is only reported. */
static void
prune (const char *bdir, Manifest *m)
{
  g_autoptr(GError) err = NULL;

  if ((drop_excess (m, UM_BACKUPS_KEEP) > 0 || m->rewrite) && !write_manifest (bdir, m->entries, &err))
    {
      g_message ("cannot update the list of backups: %s", err->message);
      return;
    }
  for (guint i = 0; i < m->garbage->len; i++)
    {
      const char *file = g_ptr_array_index (m->garbage, i);
      if (safe_file_name (file) && !g_str_equal (file, ORIGINAL_ID ".json") && !names_file (m->entries, file))
        {
          g_autofree char *path = g_build_filename (bdir, file, NULL);
          g_unlink (path);
        }
    }
  g_ptr_array_set_size (m->garbage, 0);
  stage ("pruned");
}

static gboolean
save_locked (const char *config_dir, const char *reason, char **id_out, GError **error)
{
  g_autofree char *bdir = backups_dir (config_dir);
  g_autofree char *revision = NULL;
  g_autoptr(GBytes) bytes = NULL;
  g_autoptr(UmProfile) current = NULL;
  g_auto(Manifest) m = { 0 };

  if (id_out != NULL)
    *id_out = NULL;
  current = um_profile_load_for_commit (config_dir, NULL, &revision, &bytes, error);
  if (current == NULL || !read_manifest (bdir, revision, &m, NULL, error)
      || !add_backup (bdir, &m, current, bytes, reason, NULL, id_out, error))
    return FALSE;
  prune (bdir, &m);
  return TRUE;
}

gboolean
um_backups_save (const char *config_dir, const char *reason, char **id_out, GError **error)
{
  int lock = lock_config (config_dir, TRUE);
  gboolean ok = save_locked (config_dir, reason, id_out, error);
  unlock_config (lock);
  return ok;
}

/* The entry @which names; for "latest", the damaged newer ones passed over
 * go to @skipped. */
static UmBackup *
resolve (GPtrArray *entries, const char *which, GPtrArray *skipped, GError **error)
{
  UmBackup *b = NULL;

  if (which == NULL || which[0] == '\0')
    which = "latest";
  if (g_str_equal (which, "latest"))
    {
      for (guint i = entries->len; i > 0 && b == NULL; i--)
        {
          UmBackup *e = g_ptr_array_index (entries, i - 1);
          if (e->valid)
            b = e;
          else if (skipped != NULL)
            g_ptr_array_add (skipped, um_backup_copy (e));
        }
      if (b == NULL)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "there is no usable backup yet");
          return NULL;
        }
      return b;
    }
  b = find_entry (entries, which);
  if (b == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "there is no backup “%s”", which);
      return NULL;
    }
  if (!b->valid)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "the backup “%s” cannot be used: %s", b->id,
                   b->problem ? b->problem : "damaged");
      return NULL;
    }
  return b;
}

/* The profile in @b's copy, checked against its checksum once more. */
static UmProfile *
load_copy (const char *bdir, const UmBackup *b, GError **error)
{
  g_autofree char *path = g_build_filename (bdir, b->file, NULL);
  g_autofree char *text = NULL;
  g_autofree char *sum = NULL;
  g_autoptr(GError) err = NULL;
  UmProfile *p;
  gsize len;

  if (!g_file_get_contents (path, &text, &len, &err))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_IO, "the backup “%s” cannot be read: %s", b->id, err->message);
      return NULL;
    }
  sum = sha256_of (text, len);
  if (g_ascii_strcasecmp (sum, b->sha256) != 0)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT,
                   "the backup “%s” does not match its checksum (changed or damaged)", b->id);
      return NULL;
    }
  p = um_profile_from_json (text, (gssize) len, &err);
  if (p == NULL)
    g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "the backup “%s” cannot be used: %s", b->id, err->message);
  return p;
}

static UmProfile *
load_locked (const char *config_dir, const char *which, char **id_out, GPtrArray *skipped, GError **error)
{
  g_autofree char *bdir = backups_dir (config_dir);
  g_autofree char *revision = um_profile_current_revision (config_dir, NULL);
  g_auto(Manifest) m = { 0 };
  const UmBackup *b;
  UmProfile *p;

  if (!read_manifest (bdir, revision, &m, NULL, error) || (b = resolve (m.entries, which, skipped, error)) == NULL)
    return NULL;
  p = load_copy (bdir, b, error);
  if (p != NULL && id_out != NULL)
    *id_out = g_strdup (b->id);
  return p;
}

UmProfile *
um_backups_load (const char *config_dir, const char *which, GError **error)
{
  int lock = lock_config (config_dir, FALSE);
  UmProfile *p = load_locked (config_dir, which, NULL, NULL, error);
  unlock_config (lock);
  return p;
}

char *
um_backups_resolve (const char *config_dir, const char *which, GPtrArray **skipped, GError **error)
{
  g_autofree char *bdir = backups_dir (config_dir);
  g_autofree char *revision = NULL;
  g_auto(Manifest) m = { 0 };
  g_autoptr(GPtrArray) passed = g_ptr_array_new_with_free_func ((GDestroyNotify) um_backup_free);
  const UmBackup *b = NULL;
  gboolean ok;
  int lock = lock_config (config_dir, FALSE);

  if (skipped != NULL)
    *skipped = NULL;
  revision = um_profile_current_revision (config_dir, NULL);
  ok = read_manifest (bdir, revision, &m, NULL, error);
  unlock_config (lock);
  if (!ok || (b = resolve (m.entries, which, passed, error)) == NULL)
    return NULL;
  if (skipped != NULL)
    *skipped = g_steal_pointer (&passed);
  return g_strdup (b->id);
}

/* The one commit: under the lock, against the file as it is now. @p is
 * the new profile, or NULL and @edit makes it from the current one. */
static gboolean
commit_locked (const char *config_dir, const UmProfile *p, UmProfileEdit edit, gpointer user_data,
               const char *reason, const char *base_revision, UmCommit *out, GError **error)
{
  g_autofree char *bdir = backups_dir (config_dir);
  g_autofree char *revision = NULL;
  g_autofree char *next = NULL;
  g_autofree char *text = NULL;
  g_autofree char *path = um_profile_path (config_dir);
  g_autoptr(GBytes) bytes = NULL;
  g_autoptr(UmProfile) current = NULL;
  g_autoptr(UmProfile) wanted = NULL;
  g_auto(Manifest) m = { 0 };
  g_autofree char *backup_id = NULL;

  stage ("locked");
  /* A damaged file is moved aside here, and only here: the caller shows
   * why. A newer Unmask's is refused. */
  current = um_profile_load_for_commit (config_dir, &out->notice, &revision, &bytes, error);
  if (current == NULL)
    return FALSE;
  if (base_revision != NULL && g_ascii_strcasecmp (base_revision, revision) != 0)
    {
      g_autofree char *summary = um_profile_summary (current);
      g_autoptr(GDateTime) utc = current->written_at ? g_date_time_new_from_unix_utc (current->written_at) : NULL;
      g_autoptr(GDateTime) local = utc ? g_date_time_to_local (utc) : NULL;
      g_autofree char *when = local ? g_date_time_format (local, " at %H:%M:%S") : g_strdup ("");
      g_set_error (error, UM_ERROR, UM_ERROR_CONFLICT,
                   "the optimizer settings were changed elsewhere since they were read: they now say %s "
                   "(written by %s%s)", summary, um_profile_writer_to_string (current->written_by), when);
      return FALSE;
    }
  wanted = um_profile_copy (p != NULL ? p : current);
  if (edit != NULL && !edit (wanted, user_data, error))
    return FALSE;
  if (um_profile_equal (current, wanted))
    {
      /* Nothing to change: no backup that would push real history out. */
      out->unchanged = TRUE;
      out->revision = g_steal_pointer (&revision);
      out->profile = g_steal_pointer (&current);
      return TRUE;
    }
  text = um_profile_to_json (wanted);
  next = um_profile_revision_of (text, strlen (text));
  if (!read_manifest (bdir, revision, &m, NULL, error)
      || !add_backup (bdir, &m, current, bytes, reason, next, &backup_id, error))
    return FALSE;
  if (!um_atomic_write (path, text, strlen (text), error))
    return FALSE;
  stage ("profile");
  prune (bdir, &m);
  out->backup_id = g_steal_pointer (&backup_id);
  out->revision = g_steal_pointer (&next);
  out->profile = g_steal_pointer (&wanted);
  return TRUE;
}

static gboolean
commit_with_lock (const char *config_dir, const UmProfile *p, UmProfileEdit edit, gpointer user_data,
                  const char *reason, const char *base_revision, UmCommit *out, GError **error)
{
  UmCommit local = { 0 };
  int lock = lock_config (config_dir, TRUE);
  gboolean ok = commit_locked (config_dir, p, edit, user_data, reason, base_revision, &local, error);

  unlock_config (lock);
  if (ok && out != NULL)
    *out = local;
  else
    {
      if (out != NULL)
        out->notice = g_steal_pointer (&local.notice);
      um_commit_clear (&local);
    }
  return ok;
}

gboolean
um_backups_commit (const UmProfile *p, const char *config_dir, const char *reason, const char *base_revision,
                   UmCommit *out, GError **error)
{
  g_return_val_if_fail (p != NULL, FALSE);
  return commit_with_lock (config_dir, p, NULL, NULL, reason, base_revision, out, error);
}

gboolean
um_backups_update (const char *config_dir, const char *reason, UmProfileEdit edit, gpointer user_data,
                   UmCommit *out, GError **error)
{
  g_return_val_if_fail (edit != NULL, FALSE);
  return commit_with_lock (config_dir, NULL, edit, user_data, reason, NULL, out, error);
}

gboolean
um_backups_restore (const char *config_dir, const char *which, UmCommit *out, GPtrArray **skipped,
                    GError **error)
{
  g_autoptr(UmProfile) p = NULL;
  g_autoptr(GPtrArray) passed = g_ptr_array_new_with_free_func ((GDestroyNotify) um_backup_free);
  g_autofree char *id = NULL;
  g_autofree char *reason = NULL;
  UmCommit local = { 0 };
  gboolean ok = FALSE;
  int lock;

  if (skipped != NULL)
    *skipped = NULL;
  if (which == NULL || which[0] == '\0')
    which = "latest";
  lock = lock_config (config_dir, TRUE);
  /* Resolved before the commit below, whose backup becomes the latest. */
  p = load_locked (config_dir, which, &id, passed, error);
  if (p != NULL)
    {
      reason = g_strdup_printf ("before restore → %s", which);
      p->written_by = UM_PROFILE_BY_RESTORE;
      p->written_at = g_get_real_time () / G_USEC_PER_SEC;
      g_free (p->reason);
      p->reason = g_str_equal (id, which) ? g_strdup_printf ("restore → %s", id)
                                          : g_strdup_printf ("restore → %s (%s)", which, id);
      ok = commit_locked (config_dir, p, NULL, NULL, reason, NULL, &local, error);
      if (ok)
        local.restored_id = g_steal_pointer (&id);
    }
  unlock_config (lock);
  if (ok && out != NULL)
    *out = local;
  else
    um_commit_clear (&local);
  if (ok && skipped != NULL)
    *skipped = g_steal_pointer (&passed);
  return ok;
}

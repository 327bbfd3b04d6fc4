/* um-backups.c — backups of the optimizer profile, their manifest, restore. */
#include "um-backups.h"

#include <errno.h>
#include <fcntl.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "um-error.h"

#define MANIFEST_FILE "manifest.json"
#define MANIFEST_VERSION 1
#define ORIGINAL_ID "original"

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
  g_free (b);
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
  JsonNode *n = json_object_get_member (o, key);
  if (n == NULL || !JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_STRING)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "an entry's “%s” is missing or not a string", key);
      return NULL;
    }
  return json_node_get_string (n);
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
  static const char *const entry_keys[] = { "id", "time", "reason", "summary", "sha256", "file", NULL };
  g_autoptr(JsonParser) parser = json_parser_new_immutable ();
  g_autoptr(GPtrArray) entries = entries_new ();
  g_autoptr(GHashTable) ids = g_hash_table_new (g_str_hash, g_str_equal);
  g_autoptr(GError) perr = NULL;
  JsonNode *root, *n;
  JsonObject *obj;
  JsonArray *arr;

  if (!json_parser_load_from_data (parser, text, (gssize) len, &perr))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "not valid JSON: %s", perr->message);
      return NULL;
    }
  root = json_parser_get_root (parser);
  if (root == NULL || !JSON_NODE_HOLDS_OBJECT (root))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_FORMAT, "not a JSON object");
      return NULL;
    }
  obj = json_node_get_object (root);
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

/* After a damaged manifest: an entry for every copy in the folder that
 * reads as a profile, so no backup is lost with the manifest. */
static GPtrArray *
rebuild_entries (const char *bdir)
{
  GPtrArray *entries = entries_new ();
  g_autoptr(GDir) d = g_dir_open (bdir, 0, NULL);
  const char *name;

  while (d != NULL && (name = g_dir_read_name (d)) != NULL)
    {
      g_autofree char *path = NULL;
      g_autofree char *text = NULL;
      g_autoptr(UmProfile) p = NULL;
      UmBackup *b;
      GStatBuf st;
      gsize len;

      if (!safe_file_name (name))
        continue;
      path = g_build_filename (bdir, name, NULL);
      if (!g_file_get_contents (path, &text, &len, NULL)
          || (p = um_profile_from_json (text, (gssize) len, NULL)) == NULL)
        continue;
      b = g_new0 (UmBackup, 1);
      b->id = g_strndup (name, strlen (name) - strlen (".json"));
      b->time = g_stat (path, &st) == 0 ? (gint64) st.st_mtime : 0;
      b->reason = g_strdup ("recovered after the list of backups was damaged");
      b->summary = um_profile_summary (p);
      b->sha256 = sha256_of (text, len);
      b->file = g_strdup (name);
      g_ptr_array_add (entries, b);
    }
  g_ptr_array_sort (entries, compare_entries);
  return entries;
}

/* The manifest's entries, checked; a damaged manifest is moved aside and
 * rebuilt from the copies (then *@notice says so). NULL only when it
 * cannot be read at all. */
static GPtrArray *
read_manifest (const char *bdir, char **notice, GError **error)
{
  g_autofree char *path = g_build_filename (bdir, MANIFEST_FILE, NULL);
  g_autofree char *text = NULL;
  g_autoptr(GError) err = NULL;
  GPtrArray *entries;
  gsize len = 0;

  if (!g_file_get_contents (path, &text, &len, &err))
    {
      if (!g_error_matches (err, G_FILE_ERROR, G_FILE_ERROR_NOENT))
        {
          g_set_error (error, UM_ERROR, UM_ERROR_IO, "cannot read the list of backups: %s", err->message);
          return NULL;
        }
      entries = entries_new ();
    }
  else if ((entries = manifest_from_json (text, len, &err)) == NULL)
    {
      g_autofree char *moved = um_config_move_aside (path);
      g_autoptr(GError) werr = NULL;
      g_autofree char *msg = NULL;

      entries = rebuild_entries (bdir);
      /* Written back so the next change starts from a sound list. */
      if (!write_manifest (bdir, entries, &werr))
        g_message ("cannot rewrite the list of backups: %s", werr->message);
      msg = g_strdup_printf ("The list of optimizer backups could not be read (%s). It was %s%s and rebuilt from "
                             "the %u backup%s found.", err->message, moved ? "moved aside to " : "left in place",
                             moved ? moved : "", entries->len, entries->len == 1 ? "" : "s");
      if (notice != NULL)
        *notice = g_steal_pointer (&msg);
      else
        g_message ("%s", msg);
    }
  for (guint i = 0; i < entries->len; i++)
    check_entry (bdir, g_ptr_array_index (entries, i));
  return entries;
}

GPtrArray *
um_backups_list (const char *config_dir, char **notice, GError **error)
{
  g_autofree char *bdir = backups_dir (config_dir);
  int lock;
  GPtrArray *entries;

  if (notice != NULL)
    *notice = NULL;
  lock = lock_config (config_dir, FALSE);
  entries = read_manifest (bdir, notice, error);
  unlock_config (lock);
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

static gboolean
save_locked (const char *config_dir, const char *reason, char **id_out, GError **error)
{
  g_autofree char *bdir = backups_dir (config_dir);
  g_autoptr(GPtrArray) entries = NULL;
  g_autoptr(GPtrArray) dropped = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(UmProfile) current = NULL;
  g_autofree char *text = NULL;
  g_autofree char *copy_path = NULL;
  g_autoptr(UmBackup) b = g_new0 (UmBackup, 1);
  gint64 now = g_get_real_time () / G_USEC_PER_SEC;
  guint others = 0;

  if (id_out != NULL)
    *id_out = NULL;
  entries = read_manifest (bdir, NULL, error);
  if (entries == NULL)
    return FALSE;
  current = um_profile_load (config_dir, NULL, error);
  if (current == NULL)
    return FALSE;
  text = um_profile_to_json (current);

  b->id = find_entry (entries, ORIGINAL_ID) == NULL ? g_strdup (ORIGINAL_ID) : new_id (bdir, entries, now);
  b->time = now;
  b->reason = g_strdup (reason ? reason : "before a change");
  b->summary = um_profile_summary (current);
  b->sha256 = sha256_of (text, strlen (text));
  b->file = g_strconcat (b->id, ".json", NULL);
  b->valid = TRUE;
  /* The copy first: the manifest never names a file that is not there. */
  copy_path = g_build_filename (bdir, b->file, NULL);
  if (!um_atomic_write (copy_path, text, strlen (text), error))
    return FALSE;
  if (id_out != NULL)
    *id_out = g_strdup (b->id);
  g_ptr_array_add (entries, g_steal_pointer (&b));

  for (guint i = 0; i < entries->len; i++)
    others += !g_str_equal (((UmBackup *) g_ptr_array_index (entries, i))->id, ORIGINAL_ID);
  for (guint i = 0; i < entries->len && others > UM_BACKUPS_KEEP;)
    {
      UmBackup *e = g_ptr_array_index (entries, i);
      if (g_str_equal (e->id, ORIGINAL_ID))
        {
          i++;
          continue;
        }
      g_ptr_array_add (dropped, g_strdup (e->file));
      g_ptr_array_remove_index (entries, i);
      others--;
    }
  if (!write_manifest (bdir, entries, error))
    {
      if (id_out != NULL)
        g_clear_pointer (id_out, g_free);
      return FALSE;
    }
  /* Only once no entry names them: a kill before this leaves stray files,
   * never a listed backup without its copy. */
  for (guint i = 0; i < dropped->len; i++)
    {
      const char *file = g_ptr_array_index (dropped, i);
      gboolean still = FALSE;
      for (guint j = 0; j < entries->len; j++)
        still |= g_strcmp0 (((UmBackup *) g_ptr_array_index (entries, j))->file, file) == 0;
      if (!still && safe_file_name (file))
        {
          g_autofree char *path = g_build_filename (bdir, file, NULL);
          g_unlink (path);
        }
    }
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

static UmBackup *
resolve (GPtrArray *entries, const char *which, GError **error)
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
load_locked (const char *config_dir, const char *which, char **id_out, GError **error)
{
  g_autofree char *bdir = backups_dir (config_dir);
  g_autoptr(GPtrArray) entries = read_manifest (bdir, NULL, error);
  const UmBackup *b;
  UmProfile *p;

  if (entries == NULL || (b = resolve (entries, which, error)) == NULL)
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
  UmProfile *p = load_locked (config_dir, which, NULL, error);
  unlock_config (lock);
  return p;
}

char *
um_backups_resolve (const char *config_dir, const char *which, GError **error)
{
  g_autofree char *bdir = backups_dir (config_dir);
  g_autoptr(GPtrArray) entries = NULL;
  const UmBackup *b;
  int lock = lock_config (config_dir, FALSE);

  entries = read_manifest (bdir, NULL, error);
  unlock_config (lock);
  if (entries == NULL || (b = resolve (entries, which, error)) == NULL)
    return NULL;
  return g_strdup (b->id);
}

gboolean
um_backups_restore (const char *config_dir, const char *which, char **undo_id, GError **error)
{
  g_autoptr(UmProfile) p = NULL;
  g_autofree char *id = NULL;
  g_autofree char *reason = NULL;
  gboolean ok = FALSE;
  int lock;

  if (undo_id != NULL)
    *undo_id = NULL;
  if (which == NULL || which[0] == '\0')
    which = "latest";
  lock = lock_config (config_dir, TRUE);
  /* Resolved before the backup below, which becomes the latest. */
  p = load_locked (config_dir, which, &id, error);
  if (p != NULL)
    {
      reason = g_strdup_printf ("before restore → %s", which);
      if (save_locked (config_dir, reason, undo_id, error))
        {
          p->written_by = UM_PROFILE_BY_RESTORE;
          p->written_at = g_get_real_time () / G_USEC_PER_SEC;
          g_free (p->reason);
          p->reason = g_str_equal (id, which) ? g_strdup_printf ("restore → %s", id)
                                              : g_strdup_printf ("restore → %s (%s)", which, id);
          ok = um_profile_save (p, config_dir, error);
          if (!ok && undo_id != NULL)
            g_clear_pointer (undo_id, g_free);
        }
    }
  unlock_config (lock);
  return ok;
}

gboolean
um_backups_commit (const UmProfile *p, const char *config_dir, const char *reason, char **backup_id,
                   GError **error)
{
  int lock = lock_config (config_dir, TRUE);
  gboolean ok = save_locked (config_dir, reason, backup_id, error) && um_profile_save (p, config_dir, error);
  unlock_config (lock);
  if (!ok && backup_id != NULL)
    g_clear_pointer (backup_id, g_free);
  return ok;
}

/* Nothing a user keeps is lost, under SIGKILL and under a second writer.
 *
 * /profile/kill: tools/um-profile-writer commits versions 1, 2, 3, …
 * (each unique in every field, reason and time included) through the paths
 * the app (um_backups_commit against the revision it read) and unmask-cli
 * (um_backups_update) use, and is killed at a random moment, hundreds of
 * times; every few rounds a restorer is killed instead. After each kill,
 * before anything else touches the folder, the files say where the kill
 * landed (a temporary file of the copy, the manifest or the profile; a copy
 * no manifest names; a manifest entry whose profile never came; more
 * entries than are kept), and the writer's own trace says the same from
 * its side. Then, as the app and unmask-cli see it:
 *   - the profile is one complete version, byte for byte, and not older
 *     than the last commit the writer reported done;
 *   - the newest backup is the state before it, byte for byte;
 *   - "original" is byte for byte the first state;
 *   - every listed backup is intact, in the order its versions were made.
 *
 * /profile/race: an app-like and a CLI-like writer commit at once, each
 * adding overrides of its own; sometimes the app-like one is killed. Every
 * commit either reported done is in the final profile. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "um-backups.h"
#include "um-json.h"
#include "um-profile.h"
#include "um-test-util.h"
#include "tools/um-profile-writer.h"

#define KILL_ROUNDS 500
/* Every RESTORE_EVERY-th round kills a restore instead. */
#define RESTORE_EVERY 10
/* A kill lands at a random moment within the time this many commits take. */
#define KILL_WITHIN_COMMITS 4
#define SETUP_COMMITS 5
#define RACE_ROUNDS 16
#define RACE_COMMITS 25

static char *writer_path;

typedef enum {
  W_BETWEEN,            /* outside a commit, or in its reads */
  W_COPY_WRITE,         /* while the copy is written */
  W_COPY_TO_MANIFEST,   /* the copy is there, no manifest names it */
  W_MANIFEST_WRITE,
  W_MANIFEST_TO_PROFILE,/* the manifest names the copy, the profile is the old one */
  W_PROFILE_WRITE,
  W_PROFILE_TO_PRUNE,   /* written; older entries not yet dropped */
  N_WINDOWS
} Window;

static const char *const window_names[N_WINDOWS] = {
  "outside a commit", "writing the copy", "copy -> manifest", "writing the manifest", "manifest -> profile",
  "writing the profile", "profile -> pruning",
};

/* ---- the writer process ---- */

typedef struct {
  GPid     pid;
  int      in, out;
  GString *said;
} Writer;

static void
writer_start (Writer *w, const char *dir, const char *mode, guint64 start, guint64 count, const char *name)
{
  g_autofree char *s = g_strdup_printf ("%" G_GUINT64_FORMAT, start);
  g_autofree char *c = g_strdup_printf ("%" G_GUINT64_FORMAT, count);
  const char *argv[] = { writer_path, dir, mode, s, c, name, NULL };
  g_autoptr(GError) error = NULL;
  char buf[6];
  gsize got = 0;

  w->said = g_string_new (NULL);
  g_spawn_async_with_pipes (NULL, (char **) argv, NULL, G_SPAWN_DO_NOT_REAP_CHILD, NULL, NULL, &w->pid, &w->in,
                            &w->out, NULL, &error);
  g_assert_no_error (error);
  /* "ready\n": the kill lands in the loop, not in the program's start. */
  while (got < sizeof buf)
    {
      ssize_t n = read (w->out, buf + got, sizeof buf - got);
      if (n < 0 && errno == EINTR)
        continue;
      g_assert_cmpint (n, >, 0);
      got += (gsize) n;
    }
  g_assert_cmpint (memcmp (buf, "ready\n", 6), ==, 0);
}

/* Waits for the writer (after a kill, or until it is done) and keeps what
 * it said. Returns its wait status. */
static int
writer_finish (Writer *w)
{
  char buf[4096];
  int status = 0;
  ssize_t n;

  while ((n = read (w->out, buf, sizeof buf)) != 0)
    {
      if (n < 0 && errno == EINTR)
        continue;
      g_assert_cmpint (n, >, 0);
      g_string_append_len (w->said, buf, n);
    }
  g_assert_cmpint (waitpid (w->pid, &status, 0), ==, w->pid);
  close (w->out);
  if (w->in >= 0)
    close (w->in);
  g_spawn_close_pid (w->pid);
  return status;
}

static void
writer_kill (Writer *w)
{
  g_assert_cmpint (kill (w->pid, SIGKILL), ==, 0);
  {
    int status = writer_finish (w);
    /* Killed, not failed on its own. */
    if (!WIFSIGNALED (status))
      g_error ("the writer exited by itself (status %d): %s", status, w->said->str);
    g_assert_cmpint (WTERMSIG (status), ==, SIGKILL);
  }
}

/* Race writers wait for this, so both start at once. */
static void
writer_go (Writer *w)
{
  g_assert_cmpint (write (w->in, "g", 1), ==, 1);
  close (w->in);
  w->in = -1;
}

/* The last "done K" (-1: none) and the last stage said after it. */
static gint64
writer_last_done (const Writer *w, const char **stage)
{
  g_auto(GStrv) lines = g_strsplit (w->said->str, "\n", -1);
  gint64 done = -1;

  *stage = "done";
  for (guint i = 0; lines[i] != NULL; i++)
    if (g_str_has_prefix (lines[i], "done "))
      {
        done = (gint64) g_ascii_strtoull (lines[i] + 5, NULL, 10);
        *stage = "done";
      }
    else if (g_str_has_prefix (lines[i], "stage "))
      *stage = g_intern_string (lines[i] + 6);
  return done;
}

static void
writer_clear (Writer *w)
{
  g_string_free (w->said, TRUE);
}

/* ---- the files, read directly ---- */

static GBytes *
read_bytes (const char *path)
{
  g_autofree char *text = NULL;
  gsize len;

  if (!g_file_get_contents (path, &text, &len, NULL))
    return NULL;
  return g_bytes_new_take (g_steal_pointer (&text), len);
}

static GBytes *
version_bytes (guint64 k)
{
  g_autoptr(UmProfile) v = um_profile_writer_version (k);
  char *text = um_profile_to_json (v);
  return g_bytes_new_take (text, strlen (text));
}

/* Names in @dir containing @part. */
static GHashTable *
names_with (const char *dir, const char *part)
{
  GHashTable *set = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  g_autoptr(GDir) d = g_dir_open (dir, 0, NULL);
  const char *name;

  while (d != NULL && (name = g_dir_read_name (d)) != NULL)
    if (strstr (name, part) != NULL)
      g_hash_table_add (set, g_strdup (name));
  return set;
}

/* A name in @now that is not in @before, or NULL. */
static const char *
new_name (GHashTable *now, GHashTable *before)
{
  GHashTableIter it;
  gpointer key;

  g_hash_table_iter_init (&it, now);
  while (g_hash_table_iter_next (&it, &key, NULL))
    if (!g_hash_table_contains (before, key))
      return key;
  return NULL;
}

/* The manifest as written (the library hides what the checks here look
 * at): entries' files, and the newest entry's sha256 and next. */
typedef struct {
  GHashTable *files;
  guint       others;
  char       *newest_sha, *newest_next;
} RawManifest;

static void
raw_manifest_read (const char *bdir, RawManifest *m)
{
  g_autofree char *path = g_build_filename (bdir, "manifest.json", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonNode) root = um_json_parse_file (path, "manifest.json", NULL, &error);
  JsonArray *a;

  g_assert_no_error (error);
  memset (m, 0, sizeof *m);
  m->files = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  a = json_object_get_array_member (json_node_get_object (root), "backups");
  for (guint i = 0; i < json_array_get_length (a); i++)
    {
      JsonObject *e = json_array_get_object_element (a, i);
      g_hash_table_add (m->files, g_strdup (json_object_get_string_member (e, "file")));
      m->others += !g_str_equal (json_object_get_string_member (e, "id"), "original");
      if (i + 1 == json_array_get_length (a))
        {
          m->newest_sha = g_strdup (json_object_get_string_member (e, "sha256"));
          m->newest_next = g_strdup (json_object_get_string_member_with_default (e, "next", ""));
        }
    }
}

static void
raw_manifest_clear (RawManifest *m)
{
  g_clear_pointer (&m->files, g_hash_table_unref);
  g_clear_pointer (&m->newest_sha, g_free);
  g_clear_pointer (&m->newest_next, g_free);
}

/* YYYYMMDD-HHMMSS-N.json copies that no entry names. */
static gboolean
has_unlisted_copy (const char *bdir, const RawManifest *m, GHashTable *before)
{
  g_autoptr(GHashTable) copies = names_with (bdir, "-");
  GHashTableIter it;
  gpointer key;

  g_hash_table_iter_init (&it, copies);
  while (g_hash_table_iter_next (&it, &key, NULL))
    {
      const char *name = key;
      if (name[0] != '.' && g_str_has_suffix (name, ".json") && strlen (name) >= 22 && name[8] == '-'
          && !g_hash_table_contains (m->files, name) && !g_hash_table_contains (before, name))
        return TRUE;
    }
  return FALSE;
}

/* Where the kill landed, from the files alone. */
static Window
window_on_disk (const char *dir, const char *bdir, GHashTable *temps_before, GHashTable *btemps_before,
                GHashTable *strays_before, const char *revision)
{
  g_autoptr(GHashTable) temps = names_with (dir, ".tmp-");
  g_autoptr(GHashTable) btemps = names_with (bdir, ".tmp-");
  const char *t;
  RawManifest m;
  Window w = W_BETWEEN;

  if ((t = new_name (btemps, btemps_before)) != NULL)
    return g_str_has_prefix (t, ".manifest.json.tmp-") ? W_MANIFEST_WRITE : W_COPY_WRITE;
  if ((t = new_name (temps, temps_before)) != NULL && g_str_has_prefix (t, ".optimizer.json.tmp-"))
    return W_PROFILE_WRITE;
  raw_manifest_read (bdir, &m);
  if (has_unlisted_copy (bdir, &m, strays_before))
    w = W_COPY_TO_MANIFEST;
  else if (m.newest_next[0] != '\0' && g_str_equal (m.newest_sha, revision) && !g_str_equal (m.newest_next, revision))
    w = W_MANIFEST_TO_PROFILE;
  else if (m.others > UM_BACKUPS_KEEP)
    w = W_PROFILE_TO_PRUNE;
  raw_manifest_clear (&m);
  return w;
}

/* Where the kill landed, from the writer's trace: the last stage it said. */
static Window
window_said (const char *stage)
{
  if (g_str_equal (stage, "locked"))
    return W_COPY_WRITE;
  if (g_str_equal (stage, "copy"))
    return W_COPY_TO_MANIFEST;
  if (g_str_equal (stage, "manifest"))
    return W_MANIFEST_TO_PROFILE;
  if (g_str_equal (stage, "profile"))
    return W_PROFILE_TO_PRUNE;
  return W_BETWEEN;
}

static char *
bytes_sha (GBytes *b)
{
  gsize len;
  const char *data = g_bytes_get_data (b, &len);
  return um_profile_revision_of (data, len);
}

/* The checks every kill must pass, as the app and unmask-cli see the
 * folder. @profile_before, @newest_before: the profile and the newest
 * backup's copy when the round began.
 * Returns the version the profile holds (-1 after a restore). */
static gint64
check_after_kill (const char *dir, gboolean restore, guint64 start, gint64 last_done, GBytes *first_state,
                  GBytes *profile_before, GBytes *newest_before)
{
  g_autofree char *path = um_profile_path (dir);
  g_autofree char *bdir = g_build_filename (dir, "backups", NULL);
  g_autofree char *original_path = g_build_filename (bdir, "original.json", NULL);
  g_autoptr(GBytes) now = read_bytes (path);
  g_autoptr(GBytes) original = read_bytes (original_path);
  g_autoptr(UmProfile) p = NULL;
  g_autoptr(GPtrArray) list = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *notice = NULL;
  g_autofree char *revision = NULL;
  const UmBackup *newest;
  g_autoptr(GBytes) newest_copy = NULL;
  gint64 k = -1, prev = -1;

  g_assert_nonnull (now);
  p = um_profile_load_full (dir, &notice, &revision, NULL, &error);
  g_assert_no_error (error);
  g_assert_null (notice);
  /* "original" is the first state, byte for byte, forever. */
  g_assert_nonnull (original);
  g_assert_true (g_bytes_equal (original, first_state));

  if (!restore)
    {
      g_autoptr(GBytes) want = NULL;
      k = um_profile_writer_which (p);
      /* What a restore left, untouched since; or one complete version,
       * every byte of it. */
      if (k < 0)
        g_assert_true (g_bytes_equal (now, profile_before) && last_done < 0);
      else
        {
          want = version_bytes ((guint64) k);
          g_assert_true (g_bytes_equal (now, want));
        }
      /* Not older than the last commit reported done, and at most the one
       * in flight after it. */
      if (last_done >= 0)
        g_assert_true (k == last_done || k == last_done + 1);
      else
        g_assert_true (g_bytes_equal (now, profile_before) || k == (gint64) start);
    }

  list = um_backups_list (dir, &notice, &error);
  g_assert_no_error (error);
  g_assert_null (notice);
  g_assert_cmpuint (list->len, >=, 1);
  g_assert_cmpstr (((UmBackup *) g_ptr_array_index (list, 0))->id, ==, "original");
  /* A kill after the profile and before pruning leaves one entry over
   * the limit until the next commit. */
  g_assert_cmpuint (list->len - 1, <=, UM_BACKUPS_KEEP + 1);
  for (guint i = 0; i < list->len; i++)
    {
      const UmBackup *b = g_ptr_array_index (list, i);
      g_autofree char *copy_path = g_build_filename (bdir, b->file, NULL);
      g_autofree char *text = NULL;
      g_autoptr(UmProfile) copy = NULL;
      if (!b->valid)
        g_error ("backup %s: %s", b->id, b->problem);
      /* valid: the copy is there and matches its checksum; it parses. */
      text = um_test_read_file (copy_path);
      copy = um_profile_from_json (text, -1, &error);
      g_assert_no_error (error);
      /* History in the order it was made. */
      if (!restore && i > 0 && um_profile_writer_which (copy) >= 0)
        {
          g_assert_cmpint (um_profile_writer_which (copy), >, prev);
          prev = um_profile_writer_which (copy);
        }
    }
  newest = g_ptr_array_index (list, list->len - 1);
  {
    g_autofree char *copy_path = g_build_filename (bdir, newest->file, NULL);
    newest_copy = read_bytes (copy_path);
  }
  g_assert_nonnull (newest_copy);
  /* The newest backup is the state before the profile: never the profile
   * itself (a commit that did not finish is not listed)... */
  {
    g_autofree char *sha = bytes_sha (newest_copy);
    g_assert_cmpstr (sha, !=, revision);
  }
  /* ... and exactly the one before it. */
  if (!restore)
    {
      if (g_bytes_equal (now, profile_before))
        g_assert_true (g_bytes_equal (newest_copy, newest_before));
      else if (k == (gint64) start)
        g_assert_true (g_bytes_equal (newest_copy, profile_before));
      else
        {
          g_autoptr(GBytes) want = version_bytes ((guint64) k - 1);
          g_assert_true (g_bytes_equal (newest_copy, want));
        }
    }
  return k;
}

static GBytes *
newest_copy_bytes (const char *dir)
{
  g_autofree char *bdir = g_build_filename (dir, "backups", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) list = um_backups_list (dir, NULL, &error);
  g_autofree char *path = NULL;

  g_assert_no_error (error);
  path = g_build_filename (bdir, ((UmBackup *) g_ptr_array_index (list, list->len - 1))->file, NULL);
  return read_bytes (path);
}

static void
test_kill (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *bdir = g_build_filename (dir, "backups", NULL);
  g_autofree char *path = um_profile_path (dir);
  g_autoptr(GBytes) first_state = NULL;
  guint on_disk[N_WINDOWS] = { 0 }, said[N_WINDOWS] = { 0 };
  guint restores = 0, app_rounds = 0, commits_seen = 0, rounds_with_done = 0;
  guint64 next = 1;
  gint64 start_time = g_get_monotonic_time (), commit_us;

  /* The first state: the user's own file, before any commit. */
  {
    g_autoptr(UmProfile) v0 = um_profile_writer_version (0);
    g_autoptr(GError) error = NULL;
    g_assert_true (um_profile_save (v0, dir, &error));
    g_assert_no_error (error);
    first_state = read_bytes (path);
  }
  /* Whole commits, so there is an original and a history to check, timed:
   * the kills land anywhere in the first few commits of a writer, however
   * fast this machine's disk syncs. */
  {
    Writer w;
    gint64 t0;
    /* A full history first: a commit reads and checks every entry. */
    writer_start (&w, dir, "cli", next, UM_BACKUPS_KEEP + 1, NULL);
    g_assert_cmpint (writer_finish (&w), ==, 0);
    writer_clear (&w);
    next += UM_BACKUPS_KEEP + 1;
    writer_start (&w, dir, "cli", next, SETUP_COMMITS, NULL);
    t0 = g_get_monotonic_time ();
    g_assert_cmpint (writer_finish (&w), ==, 0);
    commit_us = MAX ((g_get_monotonic_time () - t0) / SETUP_COMMITS, 100);
    writer_clear (&w);
    next += SETUP_COMMITS;
  }

  for (guint round = 0; round < KILL_ROUNDS; round++)
    {
      gboolean restore = round % RESTORE_EVERY == RESTORE_EVERY - 1;
      const char *mode = restore ? "restore" : round % 2 ? "app" : "cli";
      g_autoptr(GBytes) profile_before = read_bytes (path);
      g_autoptr(GBytes) newest_before = newest_copy_bytes (dir);
      g_autoptr(GHashTable) temps_before = names_with (dir, ".tmp-");
      g_autoptr(GHashTable) btemps_before = names_with (bdir, ".tmp-");
      g_autoptr(GHashTable) strays_before = names_with (bdir, "-");
      g_autofree char *revision = NULL;
      const char *stage;
      gint64 done, k;
      Window w_disk, w_said;
      Writer w;

      writer_start (&w, dir, mode, next, 0, NULL);
      /* A machine that slows down (other tests, a busy disk) gets a longer
       * window: most rounds should see a commit finish. */
      if (round > 0 && round % 50 == 0 && rounds_with_done < 50 / 2 && commit_us < 100000)
        commit_us *= 2;
      if (round % 50 == 0)
        rounds_with_done = 0;
      g_usleep (g_test_rand_int_range (0, (gint32) MIN (KILL_WITHIN_COMMITS * commit_us, 400000) + 1));
      writer_kill (&w);
      done = writer_last_done (&w, &stage);
      /* The files first, as the kill left them. */
      revision = um_profile_current_revision (dir, NULL);
      w_disk = window_on_disk (dir, bdir, temps_before, btemps_before, strays_before, revision);
      w_said = window_said (stage);
      on_disk[w_disk]++;
      said[w_said]++;
      if (done >= 0)
        {
          commits_seen += (guint) (done - (gint64) next + 1);
          rounds_with_done++;
        }

      k = check_after_kill (dir, restore, next, restore ? -1 : done, first_state, profile_before, newest_before);
      restores += restore;
      app_rounds += !restore && round % 2;
      if (k >= 0)
        next = (guint64) k + 1;
      else if (restore)
        {
          /* The restorer brought back older versions: go on after the
           * newest version that exists anywhere. */
          next += 1000;
        }
      writer_clear (&w);
    }

  g_test_message ("%u kills in %.1f s (%u of an app-like writer, %u of a CLI-like one, %u of a restorer), each "
                  "within the first %d commits (one took %.1f ms here at the end); %u commits were reported done "
                  "between them",
                  KILL_ROUNDS, (g_get_monotonic_time () - start_time) / 1e6, app_rounds,
                  KILL_ROUNDS - app_rounds - restores, restores, KILL_WITHIN_COMMITS, commit_us / 1e3, commits_seen);
  for (int i = 0; i < N_WINDOWS; i++)
    g_test_message ("  %-22s %4u kills by the files left, %4u by the writer's last word", window_names[i],
                    on_disk[i], said[i]);
  g_test_message ("0 states lost or overwritten (each kill checked)");
  /* The kills landed in the windows that matter, or this proved nothing. */
  g_assert_cmpuint (on_disk[W_COPY_TO_MANIFEST], >, 0);
  g_assert_cmpuint (on_disk[W_MANIFEST_TO_PROFILE], >, 0);
  g_assert_cmpuint (said[W_COPY_TO_MANIFEST], >, 0);
  g_assert_cmpuint (said[W_MANIFEST_TO_PROFILE], >, 0);
  g_assert_cmpuint (commits_seen, >=, KILL_ROUNDS / 4);
  um_test_rmtree (dir);
}

/* The overrides commit k of each writer added, and how many there are. */
static void
check_race (const char *dir, const Writer *a, const Writer *b, guint *lost, guint *conflicts)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(UmProfile) p = um_profile_load (dir, NULL, &error);
  g_autoptr(GHashTable) have = g_hash_table_new (g_str_hash, g_str_equal);
  const Writer *ws[2] = { a, b };
  const char *names[2] = { "A", "B" };

  g_assert_no_error (error);
  for (guint i = 0; i < p->overrides->len; i++)
    {
      const UmProfileOverride *o = g_ptr_array_index (p->overrides, i);
      /* Never twice: a retried commit is one commit. */
      g_assert_false (g_hash_table_contains (have, o->model_id));
      g_hash_table_add (have, o->model_id);
    }
  for (int w = 0; w < 2; w++)
    {
      g_auto(GStrv) lines = g_strsplit (ws[w]->said->str, "\n", -1);
      for (guint i = 0; lines[i] != NULL; i++)
        if (g_str_has_prefix (lines[i], "done "))
          {
            g_autofree char *id = g_strdup_printf ("%s-%06" G_GUINT64_FORMAT, names[w],
                                                   g_ascii_strtoull (lines[i] + 5, NULL, 10));
            if (!g_hash_table_contains (have, id))
              {
                g_test_message ("lost: %s", id);
                (*lost)++;
              }
          }
        else if (g_str_equal (lines[i], "conflict"))
          (*conflicts)++;
    }
  /* The history is intact too. */
  {
    g_autoptr(GPtrArray) list = um_backups_list (dir, NULL, &error);
    g_assert_no_error (error);
    for (guint i = 0; i < list->len; i++)
      g_assert_true (((UmBackup *) g_ptr_array_index (list, i))->valid);
  }
}

static void
test_race (void)
{
  guint lost = 0, conflicts = 0, killed = 0, done_total = 0;

  for (guint round = 0; round < RACE_ROUNDS; round++)
    {
      g_autofree char *dir = um_test_mkdtemp ();
      gboolean kill_a = round % 2 == 1;
      Writer a, b;
      int sb;

      writer_start (&a, dir, "race-app", 0, RACE_COMMITS, "A");
      writer_start (&b, dir, "race-cli", 0, RACE_COMMITS, "B");
      writer_go (&a);
      writer_go (&b);
      if (kill_a)
        {
          g_usleep (g_test_rand_int_range (0, 20001));
          if (kill (a.pid, SIGKILL) == 0)
            killed++;
        }
      writer_finish (&a);
      sb = writer_finish (&b);
      g_assert_true (WIFEXITED (sb) && WEXITSTATUS (sb) == 0);
      check_race (dir, &a, &b, &lost, &conflicts);
      {
        const char *stage;
        done_total += (guint) (writer_last_done (&b, &stage) + 1);
        done_total += (guint) (writer_last_done (&a, &stage) + 1);
      }
      writer_clear (&a);
      writer_clear (&b);
      um_test_rmtree (dir);
    }
  g_test_message ("%u race rounds: %u commits done by two writers at once (the app-like one killed in %u), "
                  "%u conflicts read again and retried, %u lost",
                  RACE_ROUNDS, done_total, killed, conflicts, lost);
  g_assert_cmpuint (lost, ==, 0);
  /* They really interleaved. */
  g_assert_cmpuint (conflicts, >, 0);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  writer_path = g_strdup (g_getenv ("UM_PROFILE_WRITER"));
  if (writer_path == NULL)
    {
      /* Built next to this test. */
      g_autofree char *here = g_path_get_dirname (argv[0]);
      writer_path = g_build_filename (here, "um-profile-writer", NULL);
    }
  g_test_add_func ("/profile/kill", test_kill);
  g_test_add_func ("/profile/race", test_race);
  return g_test_run ();
}

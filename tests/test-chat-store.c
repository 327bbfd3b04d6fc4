/* test-chat-store.c — saved conversations: round trip, listing, broken
 * files, deletion, Markdown export and atomic writes. No display needed. */
#include "config.h"

#include <gio/gio.h>
#include <glib/gstdio.h>
#include <string.h>
#include <sys/stat.h>

#include "um-chat-store.h"
#include "um-test-util.h"

static char *
make_tmp_dir (void)
{
  g_autoptr(GError) error = NULL;
  char *dir = g_dir_make_tmp ("um-chat-store-XXXXXX", &error);
  g_assert_no_error (error);
  return dir;
}

static void
rm_rf (const char *dir)
{
  g_autoptr(GDir) d = g_dir_open (dir, 0, NULL);
  const char *name;

  if (d == NULL)
    return;
  while ((name = g_dir_read_name (d)) != NULL)
    {
      g_autofree char *path = g_build_filename (dir, name, NULL);
      if (g_file_test (path, G_FILE_TEST_IS_DIR))
        rm_rf (path);
      else
        g_unlink (path);
    }
  g_rmdir (dir);
}

static GPtrArray *
dir_entries (const char *dir)
{
  g_autoptr(GDir) d = g_dir_open (dir, 0, NULL);
  GPtrArray *names = g_ptr_array_new_with_free_func (g_free);
  const char *name;

  g_assert_nonnull (d);
  while ((name = g_dir_read_name (d)) != NULL)
    g_ptr_array_add (names, g_strdup (name));
  return names;
}

static void
write_file (const char *path, const char *contents)
{
  g_autoptr(GError) error = NULL;
  g_file_set_contents (path, contents, -1, &error);
  g_assert_no_error (error);
}

static char *
read_file (const char *path)
{
  g_autoptr(GError) error = NULL;
  char *data = NULL;
  g_file_get_contents (path, &data, NULL, &error);
  g_assert_no_error (error);
  return data;
}

static UmChatConversation *
sample_conversation (void)
{
  UmChatConversation *c = um_chat_conversation_new ();
  const gint32 ids[] = { 506, 509, 84, 0, 2147483647, 507, 507 };
  const gint32 prev[] = { 506, 1, 2 };

  c->model_path = g_strdup ("/models/LLaDA-8B-Instruct");
  c->model_name = g_strdup ("LLaDA 8B Instruct");
  c->params.gen_length = 64;
  c->params.steps = 32;
  c->params.block_length = 16;
  c->params.temperature = 0.7;
  c->params.cfg_scale = 1.5;
  c->params.remasking = UM_REMASK_RANDOM;
  c->params.alg = UM_ALG_TOPK_MARGIN;
  c->params.eps = 0.01;
  c->params.alg_temp = 0.5;
  c->params.top_p = 0.9;
  c->params.top_k = 40;
  c->params.greedy = TRUE;
  c->params.logits_eos_inf = TRUE;
  c->params.confidence_eos_eot_inf = TRUE;
  c->params.seed = G_GUINT64_CONSTANT (18446744073709551557);
  um_chat_conversation_add_message (c, "user", "Ünïcödé 🙂 日本語 — \"quoted\" \\ back\tslash\nsecond line", FALSE);
  um_chat_conversation_add_message (c, "assistant", "Here:\n```c\nint main (void) { return 0; }\n```\n", FALSE);
  um_chat_conversation_add_message (c, "user", "and then?", FALSE);
  um_chat_conversation_add_message (c, "assistant", "It was ░ going", TRUE);
  g_array_append_vals (c->ids, ids, G_N_ELEMENTS (ids));
  g_array_append_vals (c->prev_ids, prev, G_N_ELEMENTS (prev));
  return c;
}

static void
test_round_trip (void)
{
  g_autofree char *dir = make_tmp_dir ();
  g_autoptr(UmChatConversation) c = sample_conversation ();
  g_autoptr(UmChatConversation) back = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *path = NULL;
  GStatBuf st;

  g_assert_true (um_chat_store_save (dir, c, &error));
  g_assert_no_error (error);
  g_assert_nonnull (c->id);
  g_assert_nonnull (c->created);
  g_assert_nonnull (c->updated);
  g_assert_cmpstr (c->title, ==, "Ünïcödé 🙂 日本語 — \"quoted\" \\ back slash");

  path = um_chat_store_path_for_id (dir, c->id);
  g_assert_nonnull (path);
  g_assert_cmpint (g_stat (path, &st), ==, 0);
  g_assert_cmpint (st.st_mode & 0777, ==, 0600);

  back = um_chat_store_load (path, &error);
  g_assert_no_error (error);
  g_assert_nonnull (back);
  g_assert_cmpstr (back->id, ==, c->id);
  g_assert_cmpstr (back->title, ==, c->title);
  g_assert_true (g_date_time_equal (back->created, c->created));
  g_assert_true (g_date_time_equal (back->updated, c->updated));
  g_assert_cmpstr (back->model_path, ==, c->model_path);
  g_assert_cmpstr (back->model_name, ==, c->model_name);
  g_assert_cmpint (back->params.gen_length, ==, 64);
  g_assert_cmpint (back->params.steps, ==, 32);
  g_assert_cmpint (back->params.block_length, ==, 16);
  /* Exact: json-glib writes a double with 17 significant digits and reads
   * it back correctly rounded, which returns the same double. */
  g_assert_cmpfloat (back->params.temperature, ==, 0.7);
  g_assert_cmpfloat (back->params.cfg_scale, ==, 1.5);
  g_assert_cmpint (back->params.remasking, ==, UM_REMASK_RANDOM);
  /* Dream's and RND1's options too (exact as the temperature above). */
  g_assert_cmpint (back->params.alg, ==, UM_ALG_TOPK_MARGIN);
  g_assert_cmpfloat (back->params.eps, ==, 0.01);
  g_assert_cmpfloat (back->params.alg_temp, ==, 0.5);
  g_assert_cmpfloat (back->params.top_p, ==, 0.9);
  g_assert_cmpint (back->params.top_k, ==, 40);
  g_assert_true (back->params.greedy);
  g_assert_true (back->params.logits_eos_inf);
  g_assert_true (back->params.confidence_eos_eot_inf);
  g_assert_cmpuint (back->params.seed, ==, G_GUINT64_CONSTANT (18446744073709551557));

  g_assert_cmpuint (back->messages->len, ==, c->messages->len);
  for (guint i = 0; i < c->messages->len; i++)
    {
      UmChatStoreMessage *a = g_ptr_array_index (c->messages, i);
      UmChatStoreMessage *b = g_ptr_array_index (back->messages, i);
      g_assert_cmpstr (a->role, ==, b->role);
      g_assert_cmpstr (a->content, ==, b->content);
      g_assert_cmpint (a->stopped, ==, b->stopped);
    }
  g_assert_cmpmem (back->ids->data, back->ids->len * 4, c->ids->data, c->ids->len * 4);
  g_assert_cmpmem (back->prev_ids->data, back->prev_ids->len * 4, c->prev_ids->data, c->prev_ids->len * 4);

  /* Saving a loaded conversation replaces its own file. */
  um_chat_conversation_add_message (back, "user", "more", FALSE);
  g_assert_true (um_chat_store_save (dir, back, &error));
  g_assert_no_error (error);
  {
    g_autoptr(GPtrArray) names = dir_entries (dir);
    g_assert_cmpuint (names->len, ==, 1);
  }
  rm_rf (dir);
}

static void
test_titles (void)
{
  g_autofree char *a = um_chat_make_title ("  \n What   is\tfree software?\nMore text", 48);
  g_autofree char *b = um_chat_make_title ("one two three four five six seven eight nine ten", 20);
  g_autofree char *c = um_chat_make_title ("", 48);
  g_autofree char *d = um_chat_make_title ("\xff\xfe", 48);
  g_autofree char *e = um_chat_make_title ("ääääääääääääääääääääääääääääää", 10);

  g_assert_cmpstr (a, ==, "What is free software?");
  g_assert_cmpstr (b, ==, "one two three four…");
  g_assert_cmpstr (c, ==, "");
  g_assert_cmpstr (d, ==, "");
  g_assert_cmpstr (e, ==, "äääääääää…");
  g_assert_cmpint (g_utf8_strlen (b, -1), <=, 20);
}

static void
test_list_order_and_broken (void)
{
  g_autofree char *dir = make_tmp_dir ();
  g_autofree char *broken1 = g_build_filename (dir, "broken.json", NULL);
  g_autofree char *broken2 = g_build_filename (dir, "wrong-shape.json", NULL);
  g_autofree char *tmpfile = g_build_filename (dir, "x.json.AB12CD", NULL);
  g_autofree char *other = g_build_filename (dir, "notes.txt", NULL);
  const char *broken1_text = "{ \"messages\": [ not json";
  const char *broken2_text = "{ \"format\": \"unmask-chat\", \"messages\": 5 }";
  char *ids[3];
  g_autoptr(GPtrArray) list = NULL;
  g_autoptr(GError) error = NULL;

  /* A missing folder is an empty list, not an error. */
  {
    g_autofree char *missing = g_build_filename (dir, "missing", NULL);
    g_autoptr(GPtrArray) none = um_chat_store_list (missing, &error);
    g_assert_no_error (error);
    g_assert_cmpuint (none->len, ==, 0);
  }

  for (guint i = 0; i < 3; i++)
    {
      g_autoptr(UmChatConversation) c = um_chat_conversation_new ();
      g_autofree char *text = g_strdup_printf ("question %u", i);
      um_chat_conversation_add_message (c, "user", text, FALSE);
      g_assert_true (um_chat_store_save (dir, c, &error));
      g_assert_no_error (error);
      ids[i] = g_strdup (c->id);
      g_usleep (2000);   /* distinct updated times */
    }
  write_file (broken1, broken1_text);
  write_file (broken2, broken2_text);
  write_file (tmpfile, "{}");
  write_file (other, "hello");

  list = um_chat_store_list (dir, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (list->len, ==, 5);
  for (guint i = 0; i < 3; i++)
    {
      UmChatSummary *s = g_ptr_array_index (list, i);
      g_autofree char *title = g_strdup_printf ("question %u", 2 - i);
      g_assert_null (s->error);
      g_assert_cmpstr (s->id, ==, ids[2 - i]);
      g_assert_cmpstr (s->title, ==, title);
      g_assert_cmpuint (s->n_messages, ==, 1);
      g_assert_nonnull (s->updated);
    }
  for (guint i = 3; i < 5; i++)
    {
      UmChatSummary *s = g_ptr_array_index (list, i);
      g_assert_nonnull (s->error);
      g_assert_null (s->title);
      g_assert_true (g_str_equal (s->id, "broken") || g_str_equal (s->id, "wrong-shape"));
    }

  /* Loading a broken file fails with a message; nothing touches it. */
  {
    g_autoptr(UmChatConversation) c = um_chat_store_load (broken2, &error);
    g_assert_null (c);
    g_assert_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA);
    g_assert_nonnull (strstr (error->message, "wrong-shape.json"));
    g_clear_error (&error);
    c = um_chat_store_load (broken1, &error);
    g_assert_null (c);
    g_assert_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA);
    g_clear_error (&error);
  }
  {
    g_autoptr(UmChatConversation) c = um_chat_conversation_new ();
    g_autofree char *t1 = NULL, *t2 = NULL;
    um_chat_conversation_add_message (c, "user", "after the broken ones", FALSE);
    g_assert_true (um_chat_store_save (dir, c, &error));
    g_assert_no_error (error);
    t1 = read_file (broken1);
    t2 = read_file (broken2);
    g_assert_cmpstr (t1, ==, broken1_text);
    g_assert_cmpstr (t2, ==, broken2_text);
  }

  for (guint i = 0; i < 3; i++)
    g_free (ids[i]);
  rm_rf (dir);
}

static void
test_delete (void)
{
  g_autofree char *dir = make_tmp_dir ();
  g_autoptr(UmChatConversation) a = um_chat_conversation_new ();
  g_autoptr(UmChatConversation) b = um_chat_conversation_new ();
  g_autoptr(GPtrArray) list = NULL;
  g_autoptr(GError) error = NULL;

  um_chat_conversation_add_message (a, "user", "a", FALSE);
  um_chat_conversation_add_message (b, "user", "b", FALSE);
  g_assert_true (um_chat_store_save (dir, a, &error));
  g_assert_true (um_chat_store_save (dir, b, &error));
  g_assert_no_error (error);

  g_assert_true (um_chat_store_delete (dir, a->id, &error));
  g_assert_no_error (error);
  list = um_chat_store_list (dir, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (list->len, ==, 1);
  g_assert_cmpstr (((UmChatSummary *) g_ptr_array_index (list, 0))->id, ==, b->id);

  g_assert_false (um_chat_store_delete (dir, a->id, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND);
  g_clear_error (&error);
  /* Ids never reach outside the folder. */
  g_assert_false (um_chat_store_delete (dir, "../etc", &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_FILENAME);
  g_clear_error (&error);
  g_assert_false (um_chat_store_delete (dir, "", &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_FILENAME);
  g_clear_error (&error);
  g_assert_null (um_chat_store_path_for_id (dir, "a/b"));
  rm_rf (dir);
}

static void
test_markdown (void)
{
  g_autoptr(UmChatConversation) c = sample_conversation ();
  g_autofree char *md = NULL;
  const char *expected =
    "# Ünïcödé 🙂 日本語 — \"quoted\" \\ back slash\n"
    "\n**You:**\n\n"
    "Ünïcödé 🙂 日本語 — \"quoted\" \\ back\tslash\nsecond line\n"
    "\n**Assistant:**\n\n"
    "Here:\n```c\nint main (void) { return 0; }\n```\n"
    "\n**You:**\n\n"
    "and then?\n"
    "\n**Assistant:**\n\n"
    "It was ░ going\n"
    "\n_(stopped)_\n";

  um_chat_conversation_ensure_title (c);
  md = um_chat_conversation_to_markdown (c);
  g_assert_cmpstr (md, ==, expected);

  /* A stopped answer with an open code block gets it closed. */
  {
    g_autoptr(UmChatConversation) d = um_chat_conversation_new ();
    g_autofree char *md2 = NULL;
    d->title = g_strdup ("Code");
    um_chat_conversation_add_message (d, "user", "code please", FALSE);
    um_chat_conversation_add_message (d, "assistant", "```python\nprint(1", TRUE);
    md2 = um_chat_conversation_to_markdown (d);
    g_assert_cmpstr (md2, ==,
                     "# Code\n\n**You:**\n\ncode please\n\n**Assistant:**\n\n"
                     "```python\nprint(1\n```\n\n_(stopped)_\n");
  }
}

static void
test_atomic (void)
{
  g_autofree char *dir = make_tmp_dir ();
  g_autoptr(UmChatConversation) c = sample_conversation ();
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) names = NULL;
  g_autofree char *path = NULL;
  g_autofree char *expected_name = NULL;

  for (guint i = 0; i < 20; i++)
    {
      g_autofree char *text = g_strdup_printf ("turn %u", i);
      um_chat_conversation_add_message (c, "user", text, FALSE);
      g_assert_true (um_chat_store_save (dir, c, &error));
      g_assert_no_error (error);
    }
  names = dir_entries (dir);
  expected_name = g_strconcat (c->id, ".json", NULL);
  g_assert_cmpuint (names->len, ==, 1);   /* no temporary files left behind */
  g_assert_cmpstr (g_ptr_array_index (names, 0), ==, expected_name);

  /* A folder that cannot be created is an error, not a crash. */
  path = g_build_filename (dir, expected_name, "sub", NULL);
  {
    g_autoptr(UmChatConversation) d = um_chat_conversation_new ();
    g_assert_false (um_chat_store_save (path, d, &error));
    g_assert_nonnull (error);
    g_clear_error (&error);
  }
  /* An invalid id is refused before anything is written. */
  {
    g_autoptr(UmChatConversation) d = um_chat_conversation_new ();
    d->id = g_strdup ("../escape");
    g_assert_false (um_chat_store_save (dir, d, &error));
    g_assert_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_FILENAME);
    g_clear_error (&error);
  }
  rm_rf (dir);
}

/* Each hostile JSON text as a saved conversation: listed as unreadable
 * (after the good one), refused on load with a message naming the file,
 * never a crash. */
static void
test_hostile_json (void)
{
  g_autofree char *dir = make_tmp_dir ();
  g_autoptr(GPtrArray) cases = um_test_hostile_json ();
  g_autoptr(UmChatConversation) good = um_chat_conversation_new ();
  g_autoptr(GPtrArray) list = NULL;
  g_autoptr(GError) error = NULL;

  um_chat_conversation_add_message (good, "user", "still here", FALSE);
  g_assert_true (um_chat_store_save (dir, good, &error));
  g_assert_no_error (error);
  for (guint i = 0; i < cases->len; i++)
    {
      const UmTestHostileJson *h = g_ptr_array_index (cases, i);
      g_autofree char *name = g_strdup_printf ("hostile-%02u.json", i);
      g_autofree char *path = g_build_filename (dir, name, NULL);
      g_autoptr(UmChatConversation) c = NULL;

      g_test_message ("%s", h->name);
      um_test_write_file (path, h->text, (gssize) h->len);
      c = um_chat_store_load (path, &error);
      g_assert_null (c);
      g_assert_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA);
      if (!g_str_has_prefix (error->message, name) || strstr (error->message, h->needle) == NULL)
        g_error ("message “%s” should name %s and “%s”", error->message, name, h->needle);
      g_clear_error (&error);
    }
  list = um_chat_store_list (dir, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (list->len, ==, cases->len + 1);
  for (guint i = 0; i < list->len; i++)
    {
      UmChatSummary *s = g_ptr_array_index (list, i);
      if (i == 0)
        {
          g_assert_null (s->error);
          g_assert_cmpstr (s->id, ==, good->id);
        }
      else
        {
          g_assert_nonnull (s->error);
          g_assert_true (g_str_has_prefix (s->id, "hostile-"));
        }
    }
  rm_rf (dir);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/chat-store/round-trip", test_round_trip);
  g_test_add_func ("/chat-store/titles", test_titles);
  g_test_add_func ("/chat-store/list-order-and-broken", test_list_order_and_broken);
  g_test_add_func ("/chat-store/delete", test_delete);
  g_test_add_func ("/chat-store/markdown", test_markdown);
  g_test_add_func ("/chat-store/atomic", test_atomic);
  g_test_add_func ("/chat-store/hostile-json", test_hostile_json);
  return g_test_run ();
}

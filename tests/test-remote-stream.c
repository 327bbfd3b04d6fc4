/* test-remote-stream.c — the remote generator's stream reader on recorded
 * text (written from ../shared/docs/api-server.md and the wire decisions,
 * no network): step chunks rebuild the canvas and the step events, any
 * split of the bytes reads the same, other servers' text becomes committed
 * positions, and whatever a server sends that is malformed, truncated or
 * hostile ends in an UM_ERROR_REMOTE error, never a crash. */
#include <string.h>

#include "um-error.h"
#include "um-remote-private.h"
#include "um-model-config.h"

#define MASK 99

typedef struct {
  GString *log;        /* one line per event */
  GArray  *canvases;   /* GArray* of gint32 per event */
} Rec;

static void
rec_init (Rec *r)
{
  r->log = g_string_new (NULL);
  r->canvases = g_array_new (FALSE, FALSE, sizeof (GArray *));
}

static void
rec_clear (Rec *r)
{
  g_string_free (r->log, TRUE);
  for (guint i = 0; i < r->canvases->len; i++)
    g_array_unref (g_array_index (r->canvases, GArray *, i));
  g_array_unref (r->canvases);
}

static void
on_step (const UmStepEvent *ev, gpointer user_data)
{
  Rec *r = user_data;
  GArray *c = g_array_new (FALSE, FALSE, sizeof (gint32));

  g_string_append_printf (r->log, "step %d/%d block %d/%d P%d L%d:", ev->step, ev->n_steps, ev->block, ev->n_blocks,
                          ev->prompt_len, ev->seq_len);
  for (int i = 0; i < ev->n_committed; i++)
    g_string_append_printf (r->log, " %d=%d@%.2f", ev->positions[i], ev->ids[i], ev->confidences[i]);
  g_string_append_c (r->log, '\n');
  g_array_append_vals (c, ev->canvas, ev->seq_len);
  g_array_append_val (r->canvases, c);
}

/* An Unmask chat stream: a keyframe (a token fixed after the answer at 4
 * and 5 — the suffix — and step 0's commit), a diff, two steps merged,
 * content, the finish with "done", usage, [DONE]; with pings and an event
 * name between. */
static const char *unmask_stream =
  "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\","
  "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}],\"usage\":null}\n"
  "\n"
  ":\n"
  "\n"
  "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\","
  "\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":null}],\"usage\":null,"
  "\"unmask\":{\"type\":\"step\",\"step\":0,\"first_step\":0,\"steps\":4,\"block\":0,\"n_blocks\":2,\"n_masked\":3,"
  "\"prompt_len\":3,\"canvas_len\":6,\"elapsed_ms\":12.5,"
  "\"canvas\":[null,[11,\" the\",0.5],null,null,[40,\" end\",1],[41,\"!\",1]]}}\n"
  "\n"
  ": ping\n"
  "event: message\n"
  "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\","
  "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"A the\"},\"finish_reason\":null}],\"usage\":null,"
  "\"unmask\":{\"type\":\"step\",\"step\":1,\"first_step\":1,\"steps\":4,\"block\":0,\"n_blocks\":2,\"n_masked\":2,"
  "\"prompt_len\":3,\"canvas_len\":6,\"elapsed_ms\":20,\"changes\":[[0,10,\"A\",0.75]]}}\n"
  "\n"
  "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\","
  "\"choices\":[{\"index\":0,\"delta\":{\"content\":\" cat\\u00e9\"},\"finish_reason\":null}],\"usage\":null,"
  "\"unmask\":{\"type\":\"step\",\"step\":3,\"first_step\":2,\"steps\":4,\"block\":1,\"n_blocks\":2,\"n_masked\":0,"
  "\"prompt_len\":3,\"canvas_len\":6,\"elapsed_ms\":31,\"changes\":[[3,2,\"<eos>\",0.25],[2,12,\" cat\\u00e9\",0.5]]}}\n"
  "\n"
  "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\","
  "\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null,"
  "\"unmask\":{\"type\":\"done\",\"steps_run\":4,\"forward_passes\":8,\"elapsed_ms\":40}}\n"
  "\n"
  "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],"
  "\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":3,\"total_tokens\":6}}\n"
  "\n"
  "data: [DONE]\n"
  "\n";

static const char *unmask_log =
  "step 0/4 block 0/2 P3 L9: 4=11@0.50\n"
  "step 1/4 block 0/2 P3 L9: 3=10@0.75\n"
  "step 3/4 block 1/2 P3 L9: 5=12@0.50 6=2@0.25\n";

static void
setup_unmask (UmRemoteStreamSetup *setup, const gint32 *prompt, int n_prompt)
{
  memset (setup, 0, sizeof *setup);
  setup->unmask = TRUE;
  setup->answer_len = 4;
  setup->mask_id = MASK;
  setup->eos_id = 2;
  setup->eot_id = -1;
  setup->prompt_ids = prompt;
  setup->n_prompt_ids = n_prompt;
}

/* Feeds @text in pieces of @chunk bytes (0: at once). */
static UmGeneratorResult *
run_stream (const UmRemoteStreamSetup *setup, UmRemotePieces *pc, const char *text, gsize len, gsize chunk,
            Rec *rec, GError **error)
{
  g_autoptr(UmRemoteStream) s = um_remote_stream_new (setup, pc, on_step, rec);

  if (chunk == 0)
    chunk = len;
  for (gsize off = 0; off < len; off += chunk)
    if (!um_remote_stream_feed (s, text + off, MIN (chunk, len - off), error))
      return NULL;
  return um_remote_stream_finish (s, 9.0, error);
}

static void
check_unmask_result (UmGeneratorResult *res, Rec *rec, gboolean prompt_known)
{
  static const gint32 final[] = { 10, 11, 12, 2, 40, 41 };

  g_assert_nonnull (res);
  g_assert_cmpstr (rec->log->str, ==, unmask_log);
  g_assert_cmpuint (res->ids->len, ==, 6);
  g_assert_cmpmem (res->ids->data, 6 * sizeof (gint32), final, sizeof final);
  g_assert_cmpstr (res->text, ==, "A the cat\xc3\xa9");
  g_assert_true (res->hit_eos);
  g_assert_cmpint (res->completion_tokens, ==, 3);
  g_assert_cmpint (res->steps, ==, 4);
  g_assert_cmpint (res->forward_passes, ==, 8);
  g_assert_cmpfloat_with_epsilon (res->seconds, 0.040, 1e-9);
  g_assert_cmpuint (res->prompt_ids->len, ==, prompt_known ? 3 : 0);
  /* The canvases: prompt (or unknown), then masks filling in. */
  {
    const gint32 p = prompt_known ? 7 : -1;
    const gint32 want[3][9] = {
      { p, prompt_known ? 8 : -1, prompt_known ? 9 : -1, MASK, 11, MASK, MASK, 40, 41 },
      { p, prompt_known ? 8 : -1, prompt_known ? 9 : -1, 10, 11, MASK, MASK, 40, 41 },
      { p, prompt_known ? 8 : -1, prompt_known ? 9 : -1, 10, 11, 12, 2, 40, 41 },
    };
    g_assert_cmpuint (rec->canvases->len, ==, 3);
    for (int e = 0; e < 3; e++)
      {
        GArray *c = g_array_index (rec->canvases, GArray *, e);
        g_assert_cmpmem (c->data, c->len * sizeof (gint32), want[e], sizeof want[e]);
      }
  }
}

static void
test_unmask_stream (void)
{
  static const gint32 prompt[] = { 7, 8, 9 };
  UmRemoteStreamSetup setup;
  UmRemotePieces pc;
  gsize len = strlen (unmask_stream);

  um_remote_pieces_init (&pc);
  /* At once, byte by byte, and in odd pieces: the same events. */
  for (gsize chunk = 0; chunk < 40; chunk = chunk ? chunk + 13 : 1)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(UmGeneratorResult) res = NULL;
      Rec rec;

      rec_init (&rec);
      setup_unmask (&setup, prompt, chunk == 1 ? 3 : 0);
      res = run_stream (&setup, &pc, unmask_stream, len, chunk, &rec, &error);
      g_assert_no_error (error);
      check_unmask_result (res, &rec, chunk == 1);
      rec_clear (&rec);
    }
  {
    g_autofree char *a = um_remote_pieces_get (&pc, 12);
    g_autofree char *b = um_remote_pieces_get (&pc, 41);
    g_autofree char *c = um_remote_pieces_get (&pc, 5);
    g_assert_cmpstr (a, ==, " cat\xc3\xa9");
    g_assert_cmpstr (b, ==, "!");
    g_assert_null (c);
  }
  um_remote_pieces_clear (&pc);

  /* CRLF line ends (allowed by SSE) read the same. */
  {
    g_autofree char *crlf = NULL;
    g_auto(GStrv) lines = g_strsplit (unmask_stream, "\n", -1);
    g_autoptr(GError) error = NULL;
    g_autoptr(UmGeneratorResult) res = NULL;
    Rec rec;

    crlf = g_strjoinv ("\r\n", lines);
    um_remote_pieces_init (&pc);
    rec_init (&rec);
    setup_unmask (&setup, NULL, 0);
    res = run_stream (&setup, &pc, crlf, strlen (crlf), 7, &rec, &error);
    g_assert_no_error (error);
    check_unmask_result (res, &rec, FALSE);
    rec_clear (&rec);
    um_remote_pieces_clear (&pc);
  }
}

/* Any OpenAI server: appended text, no ids. */
static void
test_other_server (void)
{
  static const char *chat =
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"},\"finish_reason\":null}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" wor\"},\"finish_reason\":null}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ld\"},\"finish_reason\":null}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}],"
    "\"unmask\":{\"type\":\"step\",\"bogus\":1}}\n\n"
    "data: [DONE]\n\n";
  static const char *completion =
    "data: {\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":null}]}\n\n"
    "data: {\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\"b\",\"finish_reason\":\"stop\"}]}\n\n"
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":7}}\n\n"
    "data: [DONE]\n\n";
  UmRemoteStreamSetup setup = { 0 };
  UmRemotePieces pc;
  g_autoptr(GError) error = NULL;
  g_autoptr(UmGeneratorResult) res = NULL;
  g_autoptr(UmGeneratorResult) res2 = NULL;
  Rec rec;
  gint32 first;

  um_remote_pieces_init (&pc);
  setup.answer_len = 2;     /* three pieces: the canvas grows */
  setup.mask_id = -1;
  setup.eos_id = setup.eot_id = -1;
  rec_init (&rec);
  res = run_stream (&setup, &pc, chat, strlen (chat), 5, &rec, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (res->text, ==, "Hello world");
  g_assert_false (res->hit_eos);
  g_assert_cmpuint (res->ids->len, ==, 3);
  g_assert_cmpint (res->completion_tokens, ==, 3);
  g_assert_cmpint (res->steps, ==, 3);
  first = g_array_index (res->ids, gint32, 0);
  g_assert_cmpint (first, >=, UM_REMOTE_SYNTHETIC_ID_BASE);
  for (int i = 0; i < 3; i++)
    {
      static const char *want[] = { "Hello", " wor", "ld" };
      g_autofree char *piece = um_remote_pieces_get (&pc, g_array_index (res->ids, gint32, i));
      g_assert_cmpint (g_array_index (res->ids, gint32, i), ==, first + i);
      g_assert_cmpstr (piece, ==, want[i]);
    }
  {
    g_autofree char *want = g_strdup_printf ("step 0/2 block 0/1 P0 L2: 0=%d@1.00\n"
                                             "step 1/2 block 0/1 P0 L2: 1=%d@1.00\n"
                                             "step 2/3 block 0/1 P0 L3: 2=%d@1.00\n", first, first + 1, first + 2);
    g_assert_cmpstr (rec.log->str, ==, want);
  }
  {
    GArray *c = g_array_index (rec.canvases, GArray *, 0);
    g_assert_cmpint (g_array_index (c, gint32, 1), ==, -1);   /* not yet: "masked" */
  }
  rec_clear (&rec);

  /* Completions: "text" instead of "delta"; ids continue, never reused. */
  rec_init (&rec);
  setup.answer_len = 8;
  res2 = run_stream (&setup, &pc, completion, strlen (completion), 0, &rec, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (res2->text, ==, "ab");
  g_assert_true (res2->hit_eos);
  g_assert_cmpint (res2->completion_tokens, ==, 7);   /* the server's usage wins */
  g_assert_cmpint (g_array_index (res2->ids, gint32, 0), ==, first + 3);
  g_assert_cmpfloat_with_epsilon (res2->seconds, 9.0, 1e-9);   /* no server time: the wall clock's */
  rec_clear (&rec);
  um_remote_pieces_clear (&pc);
}

/* Another server sends far more pieces than max_tokens (one character
 * each): the canvas stops at UM_REMOTE_PIECES_PER_TOKEN × max_tokens
 * positions, so do the events, and the text is whole. */
static void
test_other_server_bounded (void)
{
  g_autoptr(GString) text = g_string_new (NULL);
  g_autoptr(GString) want = g_string_new (NULL);
  UmRemoteStreamSetup setup = { 0 };
  UmRemotePieces pc;
  g_autoptr(GError) error = NULL;
  g_autoptr(UmGeneratorResult) res = NULL;
  const int answer = 8, sent = answer * UM_REMOTE_PIECES_PER_TOKEN * 10;
  Rec rec;

  for (int i = 0; i < sent; i++)
    {
      g_string_append_printf (text, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%c\"},"
                                    "\"finish_reason\":null}]}\n\n", 'a' + i % 26);
      g_string_append_c (want, 'a' + i % 26);
    }
  g_string_append (text, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n"
                         "data: [DONE]\n\n");
  um_remote_pieces_init (&pc);
  setup.answer_len = answer;
  setup.mask_id = -1;
  setup.eos_id = setup.eot_id = -1;
  rec_init (&rec);
  res = run_stream (&setup, &pc, text->str, text->len, 0, &rec, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (res->text, ==, want->str);
  g_test_message ("%d pieces for max_tokens %d: %u positions, %u events", sent, answer, res->ids->len,
                  rec.canvases->len);
  g_assert_cmpuint (res->ids->len, <=, (guint) (answer * UM_REMOTE_PIECES_PER_TOKEN));
  g_assert_cmpuint (rec.canvases->len, <=, (guint) (answer * UM_REMOTE_PIECES_PER_TOKEN));
  for (guint i = 0; i < rec.canvases->len; i++)
    g_assert_cmpuint (g_array_index (rec.canvases, GArray *, i)->len, <=, (guint) (answer * UM_REMOTE_PIECES_PER_TOKEN));
  rec_clear (&rec);
  um_remote_pieces_clear (&pc);
}

static guint64
rss_bytes (void)
{
  g_autofree char *text = NULL;
  const char *p;

  g_assert_true (g_file_get_contents ("/proc/self/status", &text, NULL, NULL));
  p = strstr (text, "VmRSS:");
  g_assert_nonnull (p);
  return g_ascii_strtoull (p + 6, NULL, 10) << 10;
}

/* A hostile Unmask server names two million ids with one-byte pieces: the
 * cache's real memory, not only its string bytes, stays under its limit
 * (with half of it again for the allocator's rounding). */
static void
test_piece_cache_bound (void)
{
  UmRemotePieces pc;
  guint64 before, grown;
  const gint32 n = 2000000;

  um_remote_pieces_init (&pc);
  before = rss_bytes ();
  for (gint32 id = 0; id < n; id++)
    um_remote_pieces_set (&pc, id, "x");
  grown = rss_bytes () - before;
  g_test_message ("%u pieces cached of %d, RSS +%" G_GUINT64_FORMAT " MiB (limit %" G_GSIZE_FORMAT " MiB)",
                  g_hash_table_size (pc.pieces), n, grown >> 20, UM_REMOTE_MAX_PIECE_BYTES >> 20);
  /* What the cache takes is bounded by its count of entries... */
  g_assert_cmpuint (g_hash_table_size (pc.pieces), <=, UM_REMOTE_MAX_PIECE_BYTES / (2 + UM_REMOTE_PIECE_OVERHEAD));
  /* ... and that count by the memory they really take, where malloc is the
   * system's (AddressSanitizer's redzones more than double a small block). */
#if !defined(__SANITIZE_ADDRESS__)
  g_assert_cmpuint (grown, <=, UM_REMOTE_MAX_PIECE_BYTES + UM_REMOTE_MAX_PIECE_BYTES / 2);
#endif
  /* What was cached reads back; what was not reads as unknown. */
  {
    g_autofree char *first = um_remote_pieces_get (&pc, 0);
    g_autofree char *last = um_remote_pieces_get (&pc, n - 1);
    g_assert_cmpstr (first, ==, "x");
    g_assert_null (last);
  }
  um_remote_pieces_clear (&pc);
}

static void
expect_error (const char *text, const char *fragment)
{
  UmRemoteStreamSetup setup;
  UmRemotePieces pc;
  g_autoptr(GError) error = NULL;
  g_autoptr(UmGeneratorResult) res = NULL;
  Rec rec;

  um_remote_pieces_init (&pc);
  rec_init (&rec);
  setup_unmask (&setup, NULL, 0);
  res = run_stream (&setup, &pc, text, strlen (text), 0, &rec, &error);
  g_assert_null (res);
  g_assert_error (error, UM_ERROR, UM_ERROR_REMOTE);
  if (strstr (error->message, fragment) == NULL)
    g_error ("expected “%s” in “%s”", fragment, error->message);
  rec_clear (&rec);
  um_remote_pieces_clear (&pc);
}

#define STEP(body) "data: {\"choices\":[],\"unmask\":{\"type\":\"step\",\"step\":0,\"steps\":2,\"block\":0," \
                   "\"n_blocks\":1,\"prompt_len\":1,\"canvas_len\":2," body "}}\n\n"

static void
test_bad_streams (void)
{
  /* In-band error after the 200: the server's message. */
  expect_error ("data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n"
                "data: {\"error\":{\"message\":\"out of memory on the device\",\"type\":\"server_error\"}}\n\n",
                "out of memory on the device");
  expect_error ("data: {\"error\":\"plain text\"}\n\n", "plain text");
  /* Gone mid-answer: no finish, no [DONE]. */
  expect_error ("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n", "before the answer was complete");
  expect_error ("", "before the answer was complete");
  expect_error ("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]", "before the answer was complete");
  /* Not JSON, not an object, too deep. */
  expect_error ("data: {\"choices\":[}\n\n", "not a chunk");
  expect_error ("data: [1,2]\n\n", "not a JSON object");
  {
    GString *deep = g_string_new ("data: ");
    for (int i = 0; i < 100000; i++)
      g_string_append_c (deep, '[');
    g_string_append (deep, "\n\n");
    expect_error (deep->str, "not a chunk");
    g_string_free (deep, TRUE);
  }
  /* Steps that lie. */
  expect_error (STEP ("\"changes\":[[2,5,\"x\",0.5]]"), "outside the canvas");
  expect_error (STEP ("\"changes\":[[-1,5,\"x\",0.5]]"), "outside the canvas");
  expect_error (STEP ("\"changes\":[[0,-5,\"x\",0.5]]"), "not an id");
  expect_error (STEP ("\"changes\":[[0,5,7,0.5]]"), "without its text");
  expect_error (STEP ("\"changes\":[[0,5,\"x\",\"high\"]]"), "not a number");
  expect_error (STEP ("\"changes\":[[0,5,\"x\"]]"), "entry of 3 values");
  expect_error (STEP ("\"changes\":[7]"), "not [position");
  expect_error (STEP ("\"canvas\":[null]"), "canvas of 1 positions");
  expect_error (STEP ("\"canvas\":[null,7]"), "neither null nor a token");
  expect_error (STEP ("\"nothing\":1"), "neither \"changes\" nor \"canvas\"");
  expect_error ("data: {\"unmask\":{\"type\":\"step\",\"step\":0,\"steps\":2,\"block\":0,\"n_blocks\":1,"
                "\"prompt_len\":1,\"canvas_len\":5000000,\"changes\":[]}}\n\n", "out of range");
  expect_error ("data: {\"unmask\":{\"type\":\"step\",\"step\":1.5,\"steps\":2}}\n\n", "integer \"step\"");
  expect_error (STEP ("\"changes\":[]")
                "data: {\"unmask\":{\"type\":\"step\",\"step\":1,\"steps\":2,\"block\":0,\"n_blocks\":1,"
                "\"prompt_len\":1,\"canvas_len\":3,\"changes\":[]}}\n\n", "changed the canvas");
  /* A line without end that never stops: refused at the limit, not kept. */
  {
    UmRemoteStreamSetup setup;
    UmRemotePieces pc;
    g_autoptr(UmRemoteStream) s = NULL;
    g_autoptr(GError) error = NULL;
    g_autofree char *block = g_malloc (1 << 20);
    gboolean ok = TRUE;
    int i;

    memset (block, 'x', 1 << 20);
    memcpy (block, "data: ", 6);
    um_remote_pieces_init (&pc);
    setup_unmask (&setup, NULL, 0);
    s = um_remote_stream_new (&setup, &pc, NULL, NULL);
    for (i = 0; i < 64 && ok; i++)
      ok = um_remote_stream_feed (s, block, 1 << 20, &error);
    g_assert_false (ok);
    g_assert_cmpint (i, <=, (int) (UM_REMOTE_MAX_EVENT_BYTES >> 20) + 1);
    g_assert_error (error, UM_ERROR, UM_ERROR_REMOTE);
    um_remote_pieces_clear (&pc);
  }
}

/* Mutations of a good stream: each ends in a result or an error. */
static void
test_mutations (void)
{
  static const char alphabet[] = "{}[],:\"0123456789.eE-\n \\nul";
  gsize len = strlen (unmask_stream);
  GRand *rand = g_rand_new_with_seed (20);
  int n_ok = 0, n_err = 0;

  for (int it = 0; it < 3000; it++)
    {
      g_autofree char *text = g_strdup (unmask_stream);
      UmRemoteStreamSetup setup;
      UmRemotePieces pc;
      g_autoptr(GError) error = NULL;
      g_autoptr(UmGeneratorResult) res = NULL;
      gsize cut = len;
      Rec rec;

      for (int k = g_rand_int_range (rand, 1, 4); k > 0; k--)
        text[g_rand_int_range (rand, 0, (gint32) len)] = alphabet[g_rand_int_range (rand, 0, sizeof alphabet - 1)];
      if (g_rand_boolean (rand))
        cut = g_rand_int_range (rand, 0, (gint32) len);
      um_remote_pieces_init (&pc);
      rec_init (&rec);
      setup_unmask (&setup, NULL, 0);
      res = run_stream (&setup, &pc, text, cut, g_rand_int_range (rand, 0, 64), &rec, &error);
      g_assert_true ((res == NULL) == (error != NULL));
      if (res != NULL)
        {
          n_ok++;
          g_assert_cmpuint (res->ids->len, <=, 6);
        }
      else
        {
          n_err++;
          g_assert_error (error, UM_ERROR, UM_ERROR_REMOTE);
        }
      rec_clear (&rec);
      um_remote_pieces_clear (&pc);
    }
  g_rand_free (rand);
  g_assert_cmpint (n_ok, >, 0);
  g_assert_cmpint (n_err, >, 0);
}

static JsonObject *
parse_object (const char *text, JsonNode **root)
{
  *root = json_from_string (text, NULL);
  g_assert_nonnull (*root);
  return json_node_get_object (*root);
}

static void
test_model_info (void)
{
  g_autoptr(JsonNode) root = NULL;
  g_autoptr(UmGenRecommendation) rec = NULL;
  g_autoptr(GError) error = NULL;
  UmGeneratorInfo info;
  gboolean unmask;
  JsonObject *obj;

  obj = parse_object ("{\"id\":\"demo\",\"object\":\"model\",\"created\":1,\"owned_by\":\"unmask\","
                      "\"unmask\":{\"arch\":\"dream\",\"display_name\":\"Demo\",\"max_seq_len\":2048,"
                      "\"mask_id\":126336,\"eos_id\":126081,\"eot_id\":-1,"
                      "\"defaults\":{\"max_tokens\":64,\"steps\":32,\"block_length\":16,\"temperature\":0.2,"
                      "\"alg\":\"entropy\",\"eps\":0.001,\"top_p\":0.9,\"top_k\":\"many\",\"cache\":\"none\"}}}",
                      &root);
  g_assert_true (um_remote_parse_model (obj, "http://h:1/v1", &info, &unmask, &rec, &error));
  g_assert_no_error (error);
  g_assert_true (unmask);
  g_assert_cmpstr (info.model_id, ==, "demo");
  g_assert_cmpstr (info.display_name, ==, "Demo");
  g_assert_cmpstr (info.location, ==, "http://h:1/v1");
  g_assert_true (info.remote);
  g_assert_cmpint (info.arch, ==, UM_ARCH_DREAM);
  g_assert_cmpuint (info.max_seq_len, ==, 2048);
  g_assert_cmpint (info.mask_id, ==, 126336);
  g_assert_cmpint (info.eos_id, ==, 126081);
  g_assert_cmpint (info.eot_id, ==, -1);
  g_assert_cmpint (rec->arch, ==, UM_ARCH_DREAM);
  g_assert_nonnull (rec->origin);
  g_assert_true (um_gen_layer_has (&rec->layer, UM_GEN_KEY_GEN_LENGTH));
  g_assert_cmpint (rec->layer.params.gen_length, ==, 64);
  g_assert_cmpint (rec->layer.params.steps, ==, 32);
  g_assert_true (um_gen_layer_has (&rec->layer, UM_GEN_KEY_TOP_P));
  /* Dream has no blocks: the value is read but not recommended. */
  g_assert_false (um_gen_layer_has (&rec->layer, UM_GEN_KEY_BLOCK_LENGTH));
  /* A bad value: a warning, not a default. */
  g_assert_false (um_gen_layer_has (&rec->layer, UM_GEN_KEY_TOP_K));
  g_assert_cmpuint (rec->warnings->len, ==, 1);
  um_remote_info_clear (&info);
  g_clear_pointer (&rec, um_gen_recommendation_free);
  g_clear_pointer (&root, json_node_unref);

  /* Another server: LLaDA's options, no mask, a large context. */
  obj = parse_object ("{\"id\":\"inclusionAI/LLaDA2.0-flash\",\"object\":\"model\",\"owned_by\":\"sglang\"}", &root);
  g_assert_true (um_remote_parse_model (obj, "http://h:2/v1", &info, &unmask, &rec, &error));
  g_assert_false (unmask);
  g_assert_cmpint (info.arch, ==, UM_ARCH_LLADA);
  g_assert_cmpint (info.mask_id, ==, -1);
  g_assert_cmpuint (info.max_seq_len, >=, 65536);
  g_assert_cmpstr (info.display_name, ==, "inclusionAI/LLaDA2.0-flash");
  g_assert_null (rec->origin);
  g_assert_cmpuint (rec->layer.set, ==, 0);
  um_remote_info_clear (&info);
  g_clear_pointer (&rec, um_gen_recommendation_free);
  g_clear_pointer (&root, json_node_unref);

  /* An unknown family: LLaDA's options, said so. */
  obj = parse_object ("{\"id\":\"x\",\"unmask\":{\"arch\":\"mystery\",\"max_seq_len\":-4}}", &root);
  g_assert_true (um_remote_parse_model (obj, "u", &info, &unmask, &rec, &error));
  g_assert_cmpint (info.arch, ==, UM_ARCH_LLADA);
  g_assert_cmpuint (info.max_seq_len, >=, 65536);
  g_assert_cmpuint (rec->warnings->len, ==, 1);
  um_remote_info_clear (&info);
  g_clear_pointer (&rec, um_gen_recommendation_free);
  g_clear_pointer (&root, json_node_unref);

  obj = parse_object ("{\"id\":7}", &root);
  g_assert_false (um_remote_parse_model (obj, "u", &info, &unmask, &rec, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_REMOTE);
}

static void
test_error_message (void)
{
  static const char *env = "{\"error\":{\"message\":\"Invalid API Key\",\"type\":\"authentication_error\",\"code\":null}}";
  g_autofree char *a = um_remote_error_message (env, strlen (env));
  g_autofree char *b = um_remote_error_message ("{\"error\":\"busy\"}", 16);
  g_autofree char *c = um_remote_error_message ("<html>502</html>", 16);
  g_autofree char *d = um_remote_error_message (NULL, 0);
  GString *big = g_string_new ("{\"error\":{\"message\":\"");
  g_autofree char *e = NULL;

  for (int i = 0; i < 10000; i++)
    g_string_append (big, "ab");
  g_string_append (big, "\"}}");
  e = um_remote_error_message (big->str, big->len);
  g_assert_cmpstr (a, ==, "Invalid API Key");
  g_assert_cmpstr (b, ==, "busy");
  g_assert_null (c);
  g_assert_null (d);
  g_assert_cmpint (g_utf8_strlen (e, -1), ==, 400);
  g_string_free (big, TRUE);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/remote-stream/unmask", test_unmask_stream);
  g_test_add_func ("/remote-stream/other-server", test_other_server);
  g_test_add_func ("/remote-stream/other-server-bounded", test_other_server_bounded);
  g_test_add_func ("/remote-stream/piece-cache-bound", test_piece_cache_bound);
  g_test_add_func ("/remote-stream/bad", test_bad_streams);
  g_test_add_func ("/remote-stream/mutations", test_mutations);
  g_test_add_func ("/remote-stream/model-info", test_model_info);
  g_test_add_func ("/remote-stream/error-message", test_error_message);
  return g_test_run ();
}

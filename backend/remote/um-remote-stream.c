/* um-remote-stream.c — an OpenAI completion stream back into step events.
 *
 * The body is server-sent events (each "data: <json>" line, a blank line
 * ends the event, ":" lines are pings). Every chunk may carry appended
 * text (choices[0].delta.content, or .text for /v1/completions), a
 * finish_reason, usage, and from an Unmask server a top-level "unmask"
 * object: a step (changes, or a full canvas as keyframe) or the done
 * summary. The canvas is kept here, prompt first as the engine's is, so
 * each step's UmStepEvent looks like a local one.
 *
 * From any other server there are no ids: each non-empty appended text is
 * committed at the next position of the canvas with a synthetic id
 * (UM_REMOTE_SYNTHETIC_ID_BASE + n, never reused within a generator) whose
 * piece is that text, confidence 1; so the diffusion view fills left to
 * right and token_text () reads it back. The canvas holds at most
 * UM_REMOTE_PIECES_PER_TOKEN pieces per token asked for; the text of any
 * further piece is kept, with no position or event of its own. */
#include "um-remote-private.h"

#include <math.h>
#include <string.h>

#include "um-error.h"
#include "um-json.h"

/* ---- pieces ---- */

void
um_remote_pieces_init (UmRemotePieces *pc)
{
  pc->pieces = g_hash_table_new_full (g_direct_hash, g_direct_equal, NULL, g_free);
  pc->bytes = 0;
  pc->next_synthetic = 0;
}

void
um_remote_pieces_clear (UmRemotePieces *pc)
{
  g_clear_pointer (&pc->pieces, g_hash_table_unref);
  pc->bytes = 0;
}

void
um_remote_pieces_set (UmRemotePieces *pc, gint32 id, const char *piece)
{
  const char *old = g_hash_table_lookup (pc->pieces, GINT_TO_POINTER (id));
  gsize n = strlen (piece), cost = n + 1 + UM_REMOTE_PIECE_OVERHEAD;

  if (old != NULL)
    {
      if (strcmp (old, piece) == 0)
        return;
      pc->bytes -= strlen (old) + 1 + UM_REMOTE_PIECE_OVERHEAD;
    }
  if (pc->bytes + cost > UM_REMOTE_MAX_PIECE_BYTES)
    {
      /* A changed piece that no longer fits is forgotten, never kept stale. */
      if (old != NULL)
        g_hash_table_remove (pc->pieces, GINT_TO_POINTER (id));
      return;
    }
  pc->bytes += cost;
  g_hash_table_insert (pc->pieces, GINT_TO_POINTER (id), g_strndup (piece, n));
}

char *
um_remote_pieces_get (UmRemotePieces *pc, gint32 id)
{
  return g_strdup (g_hash_table_lookup (pc->pieces, GINT_TO_POINTER (id)));
}

/* ---- the stream ---- */

typedef struct {
  gint32 pos;       /* in the answer */
  gint32 id;
  float  conf;
  guint  order;     /* arrival, so that a position named twice keeps its last */
} Change;

struct _UmRemoteStream
{
  UmRemoteStreamSetup setup;
  gint32             *prompt_copy;
  UmRemotePieces     *pieces;
  UmStepFunc          step_cb;
  gpointer            step_data;
  gint64              t0;

  GString            *line;          /* the current, unfinished line */
  GString            *data;          /* the current event's data lines */
  gboolean            has_data;
  gboolean            done;          /* [DONE] */

  GString            *text;
  char               *finish_reason;
  int                 completion_tokens;   /* -1: the server did not say */

  /* The canvas: prompt_len + canvas_len ids, masks where nothing is committed. */
  gboolean            have_canvas;
  int                 prompt_len, canvas_len;
  GArray             *seq;           /* gint32 */
  int                 n_filled;      /* other servers: positions committed so far */
  int                 n_events;

  int                 steps_run, forward_passes;   /* -1: not said */
  double              server_seconds;              /* < 0: not said */

  GArray             *changes;       /* Change, scratch */
  GArray             *ev_pos, *ev_ids, *ev_conf;
};

UmRemoteStream *
um_remote_stream_new (const UmRemoteStreamSetup *setup,
                      UmRemotePieces            *pieces,
                      UmStepFunc                 step_cb,
                      gpointer                   step_data)
{
  UmRemoteStream *s = g_new0 (UmRemoteStream, 1);

  s->setup = *setup;
  if (setup->prompt_ids != NULL && setup->n_prompt_ids > 0)
    s->prompt_copy = g_memdup2 (setup->prompt_ids, sizeof (gint32) * setup->n_prompt_ids);
  else
    s->setup.n_prompt_ids = 0;
  s->setup.prompt_ids = s->prompt_copy;
  s->setup.answer_len = MAX (setup->answer_len, 1);
  s->pieces = pieces;
  s->step_cb = step_cb;
  s->step_data = step_data;
  s->t0 = g_get_monotonic_time ();
  s->line = g_string_new (NULL);
  s->data = g_string_new (NULL);
  s->text = g_string_new (NULL);
  s->completion_tokens = -1;
  s->steps_run = -1;
  s->forward_passes = -1;
  s->server_seconds = -1;
  s->seq = g_array_new (FALSE, FALSE, sizeof (gint32));
  s->changes = g_array_new (FALSE, FALSE, sizeof (Change));
  s->ev_pos = g_array_new (FALSE, FALSE, sizeof (gint32));
  s->ev_ids = g_array_new (FALSE, FALSE, sizeof (gint32));
  s->ev_conf = g_array_new (FALSE, FALSE, sizeof (float));
  return s;
}

void
um_remote_stream_free (UmRemoteStream *s)
{
  if (s == NULL)
    return;
  g_free (s->prompt_copy);
  g_string_free (s->line, TRUE);
  g_string_free (s->data, TRUE);
  g_string_free (s->text, TRUE);
  g_free (s->finish_reason);
  g_array_unref (s->seq);
  g_array_unref (s->changes);
  g_array_unref (s->ev_pos);
  g_array_unref (s->ev_ids);
  g_array_unref (s->ev_conf);
  g_free (s);
}

gboolean
um_remote_stream_is_done (UmRemoteStream *s)
{
  return s->done;
}

#define BAD(...) (g_set_error (error, UM_ERROR, UM_ERROR_REMOTE, __VA_ARGS__), FALSE)

/* An integer member in [lo, hi]. */
static gboolean
get_int (JsonObject *obj, const char *name, gint64 lo, gint64 hi, gint64 *out, GError **error)
{
  JsonNode *n = json_object_get_member (obj, name);

  if (n == NULL || !JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_INT64)
    return BAD ("the server sent a step without an integer \"%s\"", name);
  *out = json_node_get_int (n);
  if (*out < lo || *out > hi)
    return BAD ("the server sent a step whose \"%s\" (%" G_GINT64_FORMAT ") is out of range", name, *out);
  return TRUE;
}

static gboolean
node_is_number (JsonNode *n)
{
  GType t;

  if (n == NULL || !JSON_NODE_HOLDS_VALUE (n))
    return FALSE;
  t = json_node_get_value_type (n);
  return t == G_TYPE_INT64 || t == G_TYPE_DOUBLE;
}

static gboolean
node_is_int (JsonNode *n)
{
  return n != NULL && JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_INT64;
}

static const char *
node_string (JsonNode *n)
{
  if (n == NULL || !JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_STRING)
    return NULL;
  return json_node_get_string (n);
}

/* The answer's canvas, made at the first step: masks, after the prompt
 * when the request gave its ids (else unknown, -1). */
static gboolean
ensure_canvas (UmRemoteStream *s, int prompt_len, int canvas_len, GError **error)
{
  gint32 mask = s->setup.mask_id;

  if (s->have_canvas)
    {
      if (prompt_len != s->prompt_len || canvas_len != s->canvas_len)
        return BAD ("the server changed the canvas in the middle of the answer (%d + %d, then %d + %d)",
                    s->prompt_len, s->canvas_len, prompt_len, canvas_len);
      return TRUE;
    }
  s->have_canvas = TRUE;
  s->prompt_len = prompt_len;
  s->canvas_len = canvas_len;
  g_array_set_size (s->seq, prompt_len + canvas_len);
  for (int i = 0; i < prompt_len; i++)
    g_array_index (s->seq, gint32, i) = s->setup.n_prompt_ids == prompt_len ? s->prompt_copy[i] : -1;
  for (int i = 0; i < canvas_len; i++)
    g_array_index (s->seq, gint32, prompt_len + i) = mask;
  return TRUE;
}

static int
change_compare (gconstpointer a, gconstpointer b)
{
  const Change *x = a, *y = b;
  if (x->pos != y->pos)
    return (x->pos > y->pos) - (x->pos < y->pos);
  return (x->order > y->order) - (x->order < y->order);
}

/* One UmStepEvent from s->changes, sorted here by position (a position
 * named twice keeps its last change). */
static void
emit_step (UmRemoteStream *s, int step, int n_steps, int block, int n_blocks, double elapsed)
{
  UmStepEvent ev = { 0 };
  guint n;

  g_array_sort (s->changes, change_compare);
  g_array_set_size (s->ev_pos, 0);
  g_array_set_size (s->ev_ids, 0);
  g_array_set_size (s->ev_conf, 0);
  n = s->changes->len;
  for (guint i = 0; i < n; i++)
    {
      const Change *c = &g_array_index (s->changes, Change, i);
      gint32 abs = s->prompt_len + c->pos;

      if (i + 1 < n && g_array_index (s->changes, Change, i + 1).pos == c->pos)
        continue;
      g_array_append_val (s->ev_pos, abs);
      g_array_append_val (s->ev_ids, c->id);
      g_array_append_val (s->ev_conf, c->conf);
    }
  s->n_events++;
  if (s->step_cb == NULL)
    return;
  ev.step = step;
  ev.n_steps = n_steps;
  ev.block = block;
  ev.n_blocks = n_blocks;
  ev.n_committed = (int) s->ev_pos->len;
  ev.positions = (const gint32 *) (gpointer) s->ev_pos->data;
  ev.ids = (const gint32 *) (gpointer) s->ev_ids->data;
  ev.confidences = (const float *) (gpointer) s->ev_conf->data;
  ev.canvas = (const gint32 *) (gpointer) s->seq->data;
  ev.prompt_len = s->prompt_len;
  ev.seq_len = s->prompt_len + s->canvas_len;
  ev.elapsed = elapsed;
  s->step_cb (&ev, s->step_data);
}

/* [id, piece, conf] of a keyframe, or the tail of [pos, id, piece, conf]. */
static gboolean
read_token (JsonArray *a, guint first, gint32 *id, const char **piece, float *conf, GError **error)
{
  JsonNode *nid, *npiece, *nconf;
  gint64 v;
  double c;

  if (json_array_get_length (a) != first + 3)
    return BAD ("the server sent a step entry of %u values (expected %u)", json_array_get_length (a), first + 3);
  nid = json_array_get_element (a, first);
  npiece = json_array_get_element (a, first + 1);
  nconf = json_array_get_element (a, first + 2);
  if (!node_is_int (nid) || (v = json_node_get_int (nid)) < 0 || v > G_MAXINT32)
    return BAD ("the server sent a token id that is not an id");
  if ((*piece = node_string (npiece)) == NULL)
    return BAD ("the server sent a token without its text");
  if (!node_is_number (nconf) || !isfinite (c = json_node_get_double (nconf)))
    return BAD ("the server sent a confidence that is not a number");
  *id = (gint32) v;
  *conf = (float) c;
  return TRUE;
}

static gboolean
apply_step (UmRemoteStream *s, JsonObject *u, GError **error)
{
  gint64 step, n_steps, block, n_blocks, prompt_len, canvas_len;
  JsonNode *nel = json_object_get_member (u, "elapsed_ms");
  JsonNode *nchanges = json_object_get_member (u, "changes");
  JsonNode *ncanvas = json_object_get_member (u, "canvas");
  gboolean first = !s->have_canvas;
  double elapsed;

  if (!get_int (u, "step", 0, G_MAXINT32, &step, error)
      || !get_int (u, "steps", 1, G_MAXINT32, &n_steps, error)
      || !get_int (u, "block", 0, G_MAXINT32, &block, error)
      || !get_int (u, "n_blocks", 1, G_MAXINT32, &n_blocks, error)
      || !get_int (u, "prompt_len", 0, UM_REMOTE_MAX_SEQ, &prompt_len, error)
      || !get_int (u, "canvas_len", 1, UM_REMOTE_MAX_SEQ, &canvas_len, error))
    return FALSE;
  if (prompt_len + canvas_len > UM_REMOTE_MAX_SEQ)
    return BAD ("the server announced a canvas of %" G_GINT64_FORMAT " positions", prompt_len + canvas_len);
  if (!ensure_canvas (s, (int) prompt_len, (int) canvas_len, error))
    return FALSE;
  elapsed = node_is_number (nel) ? json_node_get_double (nel) / 1000.0 : (g_get_monotonic_time () - s->t0) / 1e6;
  if (!isfinite (elapsed) || elapsed < 0)
    elapsed = 0;
  g_array_set_size (s->changes, 0);

  if (ncanvas != NULL && JSON_NODE_HOLDS_ARRAY (ncanvas))
    {
      /* A keyframe: what differs from our canvas is what this step (or the
       * steps merged into it) committed, except on the first one the
       * tokens fixed after the answer (the suffix), which were never masks. */
      JsonArray *a = json_node_get_array (ncanvas);

      if (json_array_get_length (a) != (guint) canvas_len)
        return BAD ("the server sent a canvas of %u positions (expected %d)", json_array_get_length (a),
                    (int) canvas_len);
      for (guint i = 0; i < json_array_get_length (a); i++)
        {
          JsonNode *e = json_array_get_element (a, i);
          gint32 *slot = &g_array_index (s->seq, gint32, s->prompt_len + (int) i);
          const char *piece;
          Change c = { (gint32) i, 0, 0.f };

          if (JSON_NODE_HOLDS_NULL (e))
            {
              *slot = s->setup.mask_id;
              continue;
            }
          if (!JSON_NODE_HOLDS_ARRAY (e))
            return BAD ("the server sent a canvas entry that is neither null nor a token");
          if (!read_token (json_node_get_array (e), 0, &c.id, &piece, &c.conf, error))
            return FALSE;
          um_remote_pieces_set (s->pieces, c.id, piece);
          if (*slot == c.id && !first)
            continue;
          *slot = c.id;
          if (first && (int) i >= s->setup.answer_len)
            continue;
          c.order = s->changes->len;
          g_array_append_val (s->changes, c);
        }
    }
  else if (nchanges != NULL && JSON_NODE_HOLDS_ARRAY (nchanges))
    {
      JsonArray *a = json_node_get_array (nchanges);

      for (guint i = 0; i < json_array_get_length (a); i++)
        {
          JsonNode *e = json_array_get_element (a, i);
          JsonNode *npos;
          const char *piece;
          Change c = { 0 };
          gint64 pos;

          if (!JSON_NODE_HOLDS_ARRAY (e) || json_array_get_length (json_node_get_array (e)) < 1)
            return BAD ("the server sent a change that is not [position, id, text, confidence]");
          npos = json_array_get_element (json_node_get_array (e), 0);
          if (!node_is_int (npos) || (pos = json_node_get_int (npos)) < 0 || pos >= canvas_len)
            return BAD ("the server sent a change outside the canvas of %d positions", (int) canvas_len);
          if (!read_token (json_node_get_array (e), 1, &c.id, &piece, &c.conf, error))
            return FALSE;
          c.pos = (gint32) pos;
          um_remote_pieces_set (s->pieces, c.id, piece);
          g_array_index (s->seq, gint32, s->prompt_len + c.pos) = c.id;
          c.order = s->changes->len;
          g_array_append_val (s->changes, c);
        }
    }
  else
    return BAD ("the server sent a step with neither \"changes\" nor \"canvas\"");

  emit_step (s, (int) step, (int) n_steps, (int) block, (int) n_blocks, elapsed);
  return TRUE;
}

static void
apply_done (UmRemoteStream *s, JsonObject *u)
{
  JsonNode *n;

  if (node_is_int (n = json_object_get_member (u, "steps_run")) && json_node_get_int (n) >= 0
      && json_node_get_int (n) <= G_MAXINT32)
    s->steps_run = (int) json_node_get_int (n);
  if (node_is_int (n = json_object_get_member (u, "forward_passes")) && json_node_get_int (n) >= 0
      && json_node_get_int (n) <= G_MAXINT32)
    s->forward_passes = (int) json_node_get_int (n);
  if (node_is_number (n = json_object_get_member (u, "elapsed_ms")) && isfinite (json_node_get_double (n))
      && json_node_get_double (n) >= 0)
    s->server_seconds = json_node_get_double (n) / 1000.0;
}

/* Another server's appended text: the next position, committed. */
static gboolean
commit_text (UmRemoteStream *s, const char *content, GError **error)
{
  gint32 id, mask = s->setup.mask_id;
  Change c;

  if (!s->have_canvas)
    ensure_canvas (s, s->setup.n_prompt_ids, s->setup.answer_len, NULL);
  if (s->n_filled >= s->canvas_len)
    {
      /* More pieces than max_tokens (a server that splits tokens): grow,
       * up to UM_REMOTE_PIECES_PER_TOKEN per token asked for. Beyond,
       * the text grows alone: each event hands the whole canvas on, and
       * a server sending a piece per byte must not make that quadratic. */
      if (s->canvas_len >= s->setup.answer_len * UM_REMOTE_PIECES_PER_TOKEN
          || s->prompt_len + s->canvas_len >= UM_REMOTE_MAX_SEQ)
        return TRUE;
      g_array_append_val (s->seq, mask);
      s->canvas_len++;
    }
  id = UM_REMOTE_SYNTHETIC_ID_BASE + (gint32) (s->pieces->next_synthetic++ % UM_REMOTE_SYNTHETIC_ID_BASE);
  um_remote_pieces_set (s->pieces, id, content);
  g_array_index (s->seq, gint32, s->prompt_len + s->n_filled) = id;
  c.pos = s->n_filled++;
  c.id = id;
  c.conf = 1.f;
  c.order = 0;
  g_array_set_size (s->changes, 0);
  g_array_append_val (s->changes, c);
  emit_step (s, c.pos, MAX (s->setup.answer_len, c.pos + 1), 0, 1, (g_get_monotonic_time () - s->t0) / 1e6);
  return TRUE;
}

/* The error member of an in-band error event or an error body. */
static char *
error_text (JsonNode *err)
{
  const char *msg = NULL;

  if (JSON_NODE_HOLDS_OBJECT (err))
    msg = node_string (json_object_get_member (json_node_get_object (err), "message"));
  else
    msg = node_string (err);
  if (msg == NULL)
    return NULL;
  /* Bounded and printable: it ends up in a dialog. */
  return g_utf8_substring (msg, 0, MIN (g_utf8_strlen (msg, -1), 400));
}

static gboolean
dispatch (UmRemoteStream *s, const char *data, gsize len, GError **error)
{
  static const UmJsonLimits limits = { UM_REMOTE_MAX_EVENT_BYTES, 16, FALSE };
  g_autoptr(JsonNode) root = NULL;
  g_autoptr(GError) local = NULL;
  JsonObject *obj;
  JsonNode *n;

  if (s->done)
    return TRUE;   /* nothing counts after [DONE] */
  if (len == 6 && memcmp (data, "[DONE]", 6) == 0)
    {
      s->done = TRUE;
      return TRUE;
    }
  root = um_json_parse (data, (gssize) len, "the server's stream", &limits, &local);
  if (root == NULL)
    return BAD ("the server sent something that is not a chunk: %s", local->message);
  if (!JSON_NODE_HOLDS_OBJECT (root))
    return BAD ("the server sent a chunk that is not a JSON object");
  obj = json_node_get_object (root);

  if ((n = json_object_get_member (obj, "error")) != NULL && !JSON_NODE_HOLDS_NULL (n))
    {
      g_autofree char *msg = error_text (n);
      return BAD ("the server stopped with an error: %s", msg ? msg : "(no message)");
    }

  if ((n = json_object_get_member (obj, "choices")) != NULL && JSON_NODE_HOLDS_ARRAY (n)
      && json_array_get_length (json_node_get_array (n)) > 0)
    {
      JsonNode *c0 = json_array_get_element (json_node_get_array (n), 0);
      const char *content = NULL, *reason;

      if (!JSON_NODE_HOLDS_OBJECT (c0))
        return BAD ("the server sent a choice that is not an object");
      if ((n = json_object_get_member (json_node_get_object (c0), "delta")) != NULL && JSON_NODE_HOLDS_OBJECT (n))
        content = node_string (json_object_get_member (json_node_get_object (n), "content"));
      else
        content = node_string (json_object_get_member (json_node_get_object (c0), "text"));
      if (content != NULL && content[0] != '\0')
        {
          if (s->text->len + strlen (content) > UM_REMOTE_MAX_BODY_BYTES * 4)
            return BAD ("the server sent more text than any answer holds");
          g_string_append (s->text, content);
          if (!s->setup.unmask && !commit_text (s, content, error))
            return FALSE;
        }
      if ((reason = node_string (json_object_get_member (json_node_get_object (c0), "finish_reason"))) != NULL)
        {
          g_free (s->finish_reason);
          s->finish_reason = g_utf8_substring (reason, 0, MIN (g_utf8_strlen (reason, -1), 32));
        }
    }

  if ((n = json_object_get_member (obj, "usage")) != NULL && JSON_NODE_HOLDS_OBJECT (n))
    {
      JsonNode *ct = json_object_get_member (json_node_get_object (n), "completion_tokens");
      if (node_is_int (ct) && json_node_get_int (ct) >= 0 && json_node_get_int (ct) <= G_MAXINT32)
        s->completion_tokens = (int) json_node_get_int (ct);
    }

  if (s->setup.unmask && (n = json_object_get_member (obj, "unmask")) != NULL && JSON_NODE_HOLDS_OBJECT (n))
    {
      JsonObject *u = json_node_get_object (n);
      const char *type = node_string (json_object_get_member (u, "type"));

      if (g_strcmp0 (type, "step") == 0)
        return apply_step (s, u, error);
      if (g_strcmp0 (type, "done") == 0)
        apply_done (s, u);
    }
  return TRUE;
}

/* One line of the event stream (without its end). */
static gboolean
feed_line (UmRemoteStream *s, const char *line, gsize len, GError **error)
{
  const char *colon, *value;
  gsize flen, vlen;

  if (len > 0 && line[len - 1] == '\r')
    len--;
  if (len == 0)
    {
      gboolean ok = TRUE;
      if (s->has_data)
        ok = dispatch (s, s->data->str, s->data->len, error);
      g_string_truncate (s->data, 0);
      s->has_data = FALSE;
      return ok;
    }
  if (line[0] == ':')
    return TRUE;   /* a ping */
  colon = memchr (line, ':', len);
  flen = colon ? (gsize) (colon - line) : len;
  if (flen != 4 || memcmp (line, "data", 4) != 0)
    return TRUE;   /* event:, id:, retry: mean nothing here */
  value = colon ? colon + 1 : line + len;
  vlen = line + len - value;
  if (vlen > 0 && value[0] == ' ')
    value++, vlen--;
  if (s->data->len + vlen + 1 > UM_REMOTE_MAX_EVENT_BYTES)
    return BAD ("the server sent an event of more than %u MiB", (guint) (UM_REMOTE_MAX_EVENT_BYTES >> 20));
  if (s->has_data)
    g_string_append_c (s->data, '\n');
  g_string_append_len (s->data, value, vlen);
  s->has_data = TRUE;
  return TRUE;
}

gboolean
um_remote_stream_feed (UmRemoteStream *s, const char *data, gsize len, GError **error)
{
  while (len > 0)
    {
      const char *nl = memchr (data, '\n', len);
      gsize n = nl ? (gsize) (nl - data) : len;

      if (s->line->len + n > UM_REMOTE_MAX_EVENT_BYTES)
        return BAD ("the server sent a line of more than %u MiB", (guint) (UM_REMOTE_MAX_EVENT_BYTES >> 20));
      if (nl == NULL)
        {
          g_string_append_len (s->line, data, n);
          return TRUE;
        }
      if (s->line->len > 0)
        {
          gboolean ok;
          g_string_append_len (s->line, data, n);
          ok = feed_line (s, s->line->str, s->line->len, error);
          g_string_truncate (s->line, 0);
          if (!ok)
            return FALSE;
        }
      else if (!feed_line (s, data, n, error))
        return FALSE;
      data += n + 1;
      len -= n + 1;
    }
  return TRUE;
}

UmGeneratorResult *
um_remote_stream_finish (UmRemoteStream *s, double wall_seconds, GError **error)
{
  UmGeneratorResult *res;

  /* A last event without its blank line still counts if its line ended. */
  if (s->line->len == 0 && s->has_data)
    {
      if (!feed_line (s, "", 0, error))
        return NULL;
    }
  if (s->finish_reason == NULL && !s->done)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_REMOTE,
                   "the server closed the connection before the answer was complete");
      return NULL;
    }

  res = g_new0 (UmGeneratorResult, 1);
  res->prompt_ids = g_array_new (FALSE, FALSE, sizeof (gint32));
  if (s->setup.n_prompt_ids > 0)
    g_array_append_vals (res->prompt_ids, s->prompt_copy, s->setup.n_prompt_ids);
  res->ids = g_array_new (FALSE, FALSE, sizeof (gint32));
  if (s->have_canvas)
    g_array_append_vals (res->ids, &g_array_index (s->seq, gint32, s->prompt_len),
                         s->setup.unmask ? s->canvas_len : s->n_filled);
  res->text = g_strdup (s->text->str);
  res->hit_eos = g_strcmp0 (s->finish_reason, "stop") == 0;
  if (s->completion_tokens >= 0)
    res->completion_tokens = s->completion_tokens;
  else if (s->setup.unmask)
    {
      int n = 0;
      while (n < (int) res->ids->len && n < s->setup.answer_len
             && g_array_index (res->ids, gint32, n) != s->setup.eos_id
             && g_array_index (res->ids, gint32, n) != s->setup.eot_id)
        n++;
      res->completion_tokens = n;
    }
  else
    res->completion_tokens = s->n_filled;
  res->seconds = s->server_seconds >= 0 ? s->server_seconds : wall_seconds;
  res->steps = s->steps_run >= 0 ? s->steps_run : s->n_events;
  res->forward_passes = s->forward_passes >= 0 ? s->forward_passes : res->steps;
  return res;
}

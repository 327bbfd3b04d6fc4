/* um-server-run.c — one generation per request.
 *
 * Three places touch a run: the server thread (the HTTP message: parse,
 * answer, stream), the generator's home context (admission, steps, the
 * end), and nothing else. Home → server hand-over goes through @pending
 * under @lock and one posted flush at a time, so a slow socket makes
 * steps pile up and merge rather than make the engine wait. */
#include "config.h"

#include "um-server-private.h"

#include "um-error.h"
#include "um-local-generator.h"

#include <string.h>

typedef struct {
  int     pos;        /* in the answer */
  gint32  id;
  char   *piece;
  float   conf;
} Change;

typedef struct {
  int     step, n_steps, block, n_blocks, n_masked, prompt_len, canvas_len;
  double  elapsed;
  GArray *changes;     /* Change */
  char   *prefix;      /* committed text from the answer's start */
  int     prefix_tokens;  /* the tokens it decodes */
  gboolean prefix_final;
} StepOut;

typedef struct {
  guint  status;
  char  *type, *message, *param, *code;
} Refusal;

typedef struct {
  gint               ref;
  UmServer          *server;
  SoupServerMessage *msg;           /* server thread; NULL once libsoup is done with it */
  gulong             finished_handler, wrote_handler;
  UmApiRequest       req;
  char              *id;
  char              *model;
  gint64             created;
  GCancellable      *cancellable;   /* cancelled on the home context only (cancel_run ()) */
  gint               cancel_asked;  /* atomic: cancel_run () was called */
  gboolean           gone;          /* the client left */
  /* set on home, read on the server thread under lock */
  GMutex             lock;
  GQueue             pending;       /* StepOut* */
  gboolean           posted;
  gboolean           admitted;
  Refusal           *refusal;
  gboolean           done;
  UmGeneratorResult *result;
  GError            *error;
  int                prompt_len;     /* the canvas's offset */
  int                suffix_len;     /* tokens; counted as prompt in the usage */
  int                answer_len;    /* max_tokens: the canvas without a suffix */
  /* server thread */
  gboolean           headers_sent, finished;
  int                in_flight;
  GString           *emitted;
  int                canvas_len;
  gint32            *ids;
  float             *conf;
  int               *at_step;
  char             **pieces;
  gboolean           keyframe_sent;
  int                steps_seen;
  int                prefix_tokens;  /* of the last step seen */
  double             elapsed;        /* seconds, of the last step seen */
  gint64             last_write, last_step_sent;
  guint              ping_source, check_source, interval_source;
  char              *stop_text;     /* the text up to a stop string, once one was seen */
  gboolean           probed;        /* its end of stream came; a write was sent to tell */
} Run;

static void service (Run *run);

/* Timers on the server thread's context (g_timeout_add would use the
 * global default one, the app's). */
static guint
add_timeout (Run *run, guint ms, GSourceFunc func)
{
  g_autoptr(GSource) src = g_timeout_source_new (ms);
  g_source_set_callback (src, func, run, NULL);
  return g_source_attach (src, run->server->context);
}

static void
remove_timeout (Run *run, guint *id)
{
  if (*id != 0)
    {
      GSource *src = g_main_context_find_source_by_id (run->server->context, *id);
      if (src != NULL)
        g_source_destroy (src);
      *id = 0;
    }
}

static void
step_out_free (StepOut *s)
{
  for (guint i = 0; i < s->changes->len; i++)
    g_free (g_array_index (s->changes, Change, i).piece);
  g_array_unref (s->changes);
  g_free (s->prefix);
  g_free (s);
}

static void
refusal_free (Refusal *r)
{
  if (r == NULL)
    return;
  g_free (r->type);
  g_free (r->message);
  g_free (r->param);
  g_free (r->code);
  g_free (r);
}

static Run *
run_ref (Run *run)
{
  g_atomic_int_inc (&run->ref);
  return run;
}

static void
run_unref (gpointer data)
{
  Run *run = data;
  if (!g_atomic_int_dec_and_test (&run->ref))
    return;
  g_queue_clear_full (&run->pending, (GDestroyNotify) step_out_free);
  g_mutex_clear (&run->lock);
  refusal_free (run->refusal);
  um_generator_result_free (run->result);
  g_clear_error (&run->error);
  um_api_request_clear (&run->req);
  g_free (run->id);
  g_free (run->model);
  g_clear_object (&run->cancellable);
  if (run->emitted)
    g_string_free (run->emitted, TRUE);
  g_free (run->ids);
  g_free (run->conf);
  g_free (run->at_step);
  if (run->pieces)
    for (int i = 0; i < run->canvas_len; i++)
      g_free (run->pieces[i]);
  g_free (run->pieces);
  g_free (run->stop_text);
  g_free (run);
}

/* ---- home context → server thread ---- */

static gboolean
service_cb (gpointer data)
{
  Run *run = data;
  g_mutex_lock (&run->lock);
  run->posted = FALSE;
  g_mutex_unlock (&run->lock);
  service (run);
  return G_SOURCE_REMOVE;
}

/* Any thread, with run->lock held. */
static void
post_locked (Run *run)
{
  if (run->posted)
    return;
  run->posted = TRUE;
  g_main_context_invoke_full (run->server->context, G_PRIORITY_DEFAULT, service_cb, run_ref (run), run_unref);
}

static void
refuse (Run *run, guint status, const char *type, const char *message, const char *param, const char *code)
{
  Refusal *r = g_new0 (Refusal, 1);
  r->status = status;
  r->type = g_strdup (type);
  r->message = g_strdup (message);
  r->param = g_strdup (param);
  r->code = g_strdup (code);
  g_mutex_lock (&run->lock);
  run->refusal = r;
  post_locked (run);
  g_mutex_unlock (&run->lock);
}

static gboolean
cancel_cb (gpointer data)
{
  Run *run = data;
  g_cancellable_cancel (run->cancellable);
  return G_SOURCE_REMOVE;
}

/* Stops the run's generation, from any thread. The cancel itself happens
 * on the home context, where the generator's sources on the cancellable
 * live: GLib 2.74 leaks a GCancellableSource disposed on one thread while
 * its cancellable is being cancelled on another. */
static void
cancel_run (Run *run)
{
  if (g_atomic_int_compare_and_exchange (&run->cancel_asked, 0, 1))
    g_main_context_invoke_full (run->server->home, G_PRIORITY_DEFAULT, cancel_cb, run_ref (run), run_unref);
}

/* ---- home context: admission, steps, end ---- */

static char *
piece_text (UmGenerator *gen, gint32 id)
{
  g_autofree char *t = um_generator_token_text (gen, id);
  return t ? g_utf8_make_valid (t, -1) : g_strdup ("");
}

typedef struct {
  Run         *run;
  UmGenerator *gen;
  gboolean     first;
  int          prefix_n;      /* tokens of @prefix; -1: none yet */
  char        *prefix;        /* the last committed prefix decoded */
} StepCtx;

/* The committed answer text from position 0: contiguous committed
 * positions, up to the first EOS/EOT. Decoded again only when it grew
 * (it never shrinks), so a long canvas costs the home thread little. */
static char *
committed_prefix (StepCtx *sc, const UmStepEvent *ev, int answer_len, int *n_tokens, gboolean *final)
{
  UmGenerator *gen = sc->gen;
  const UmGeneratorInfo *info = um_generator_get_info (gen);
  const gint32 *a = ev->canvas + ev->prompt_len;
  /* A suffix (infilling) follows the answer in the canvas: not its text. */
  int c = MIN (ev->seq_len - ev->prompt_len, answer_len), n = 0;
  UmEngine *engine = um_generator_get_engine (gen);

  *final = FALSE;
  while (n < c && a[n] != info->mask_id)
    {
      if (a[n] == info->eos_id || a[n] == info->eot_id)
        {
          *final = TRUE;
          break;
        }
      n++;
    }
  if (n == c)
    *final = TRUE;
  *n_tokens = n;
  if (n == sc->prefix_n && sc->prefix != NULL)
    return g_strdup (sc->prefix);
  g_free (sc->prefix);
  sc->prefix_n = n;
  if (engine != NULL)
    {
      char *t = um_tokenizer_decode (um_engine_get_model (engine)->tokenizer, a, n, TRUE, NULL);
      sc->prefix = t ? t : g_strdup ("");
    }
  else
    {
      GString *s = g_string_new (NULL);
      for (int i = 0; i < n; i++)
        {
          g_autofree char *p = um_generator_token_text (gen, a[i]);
          if (p)
            g_string_append (s, p);
        }
      sc->prefix = g_string_free (s, FALSE);
    }
  return g_strdup (sc->prefix);
}

static void
on_step (const UmStepEvent *ev, gpointer data)
{
  StepCtx *sc = data;
  Run *run = sc->run;
  StepOut *s = g_new0 (StepOut, 1);
  const UmGeneratorInfo *info = um_generator_get_info (sc->gen);
  int c = ev->seq_len - ev->prompt_len, k = 0;

  s->step = ev->step;
  s->n_steps = ev->n_steps;
  s->block = ev->block;
  s->n_blocks = ev->n_blocks;
  s->prompt_len = ev->prompt_len;
  s->canvas_len = c;
  s->elapsed = ev->elapsed;
  s->changes = g_array_new (FALSE, FALSE, sizeof (Change));
  for (int i = 0; i < c; i++)
    if (ev->canvas[ev->prompt_len + i] == info->mask_id)
      s->n_masked++;
  /* The first step also carries what was fixed before it (constraints,
   * a suffix, RND1's reserved slot), with confidence 1 and step -1. */
  for (int i = 0; i < c; i++)
    {
      gint32 pos = ev->prompt_len + i;
      gboolean now = FALSE;
      Change ch;

      while (k < ev->n_committed && ev->positions[k] < pos)
        k++;
      now = k < ev->n_committed && ev->positions[k] == pos;
      if (now)
        {
          ch.pos = i;
          ch.id = ev->ids[k];
          ch.conf = ev->confidences[k];
        }
      else if (sc->first && ev->canvas[pos] != info->mask_id)
        {
          ch.pos = -1 - i;   /* marks "fixed" */
          ch.id = ev->canvas[pos];
          ch.conf = 1.0f;
        }
      else
        continue;
      ch.piece = piece_text (sc->gen, ch.id);
      g_array_append_val (s->changes, ch);
    }
  sc->first = FALSE;
  /* Only a stream sends text before the end. */
  if (run->req.stream)
    s->prefix = committed_prefix (sc, ev, run->answer_len, &s->prefix_tokens, &s->prefix_final);

  g_mutex_lock (&run->server->lock);
  if (g_strcmp0 (run->server->running_id, run->id) != 0)
    {
      g_free (run->server->running_id);
      run->server->running_id = g_strdup (run->id);
    }
  g_mutex_unlock (&run->server->lock);
  g_mutex_lock (&run->lock);
  /* Merged steps send the last prefix only: a stalled client must not
   * make every step's copy pile up. */
  if (!g_queue_is_empty (&run->pending))
    g_clear_pointer (&((StepOut *) g_queue_peek_tail (&run->pending))->prefix, g_free);
  g_queue_push_tail (&run->pending, s);
  post_locked (run);
  g_mutex_unlock (&run->lock);
}

typedef struct {
  Run         *run;
  StepCtx     *sc;
} DoneCtx;

static void
on_done (GObject *source, GAsyncResult *result, gpointer data)
{
  DoneCtx *dc = data;
  Run *run = dc->run;
  UmServer *server = run->server;
  GError *error = NULL;
  UmGeneratorResult *res = um_generator_generate_finish (UM_GENERATOR (source), result, &error);

  g_mutex_lock (&server->lock);
  if (g_strcmp0 (server->running_id, run->id) == 0)
    g_clear_pointer (&server->running_id, g_free);
  g_mutex_unlock (&server->lock);
  g_mutex_lock (&run->lock);
  run->done = TRUE;
  run->result = res;
  run->error = error;
  post_locked (run);
  g_mutex_unlock (&run->lock);
  g_object_unref (dc->sc->gen);
  g_free (dc->sc->prefix);
  g_free (dc->sc);
  g_free (dc);
  g_atomic_int_add (&server->n_generations, -1);
  um_server_notify_changed (server);
  run_unref (run);
}

/* Home context. TRUE when the generation was submitted (on_done ends it). */
static gboolean
admit_run (Run *run)
{
  UmServer *server = run->server;
  g_autoptr(UmGenerator) gen = um_server_ref_generator (server);
  g_autoptr(GArray) prompt = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autoptr(GArray) suffix = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autoptr(GError) error = NULL;
  g_autofree char *param = NULL;
  g_autofree UmGenMessage *msgs = NULL;
  const UmGeneratorInfo *info;
  UmGeneratorRequest greq;
  int running, waiting, prompt_len = -1, suffix_len = -1;
  DoneCtx *dc;

  if (gen == NULL)
    {
      refuse (run, 503, "unavailable_error", "Loading model", NULL, NULL);
      return FALSE;
    }
  if (g_atomic_int_get (&run->cancel_asked))
    return FALSE;   /* the client left before its turn came */
  info = um_generator_get_info (gen);

  um_generator_request_init (&greq);
  if (run->req.messages != NULL)
    {
      greq.messages = (const UmGenMessage *) (gpointer) run->req.messages->data;
      greq.n_messages = (int) run->req.messages->len;
    }
  greq.prompt = run->req.prompt;
  if (run->req.prompt_ids != NULL)
    {
      greq.prompt_ids = (const gint32 *) (gpointer) run->req.prompt_ids->data;
      greq.n_prompt_ids = (int) run->req.prompt_ids->len;
    }
  greq.suffix = run->req.suffix;
  /* Here the prompt is counted, so too long a request is refused before
   * it waits; a remote engine counts for itself. */
  if (UM_IS_LOCAL_GENERATOR (gen))
    {
      if (!um_local_generator_prompt_ids (UM_LOCAL_GENERATOR (gen), &greq, prompt, suffix, &error))
        {
          refuse (run, 400, "invalid_request_error", error->message,
                  run->req.kind == UM_API_CHAT ? "messages" : "prompt", NULL);
          return FALSE;
        }
      if (prompt->len == 0)
        {
          /* The engine needs a token to start from; say so before a 200. */
          refuse (run, 400, "invalid_request_error", "the prompt is empty",
                  run->req.kind == UM_API_CHAT ? "messages" : "prompt", NULL);
          return FALSE;
        }
      prompt_len = (int) prompt->len;
      suffix_len = (int) suffix->len;
    }
  if (!um_api_request_resolve (&run->req, info->arch, &server->base, &server->user_layer,
                               &info->recommendation->layer, &server->profile_layer, prompt_len, suffix_len,
                               info->max_seq_len, &greq.params, &param, &error))
    {
      gboolean context = g_error_matches (error, UM_ERROR, UM_ERROR_CONFIG);
      gboolean unsupported = g_error_matches (error, UM_ERROR, UM_ERROR_UNSUPPORTED);
      refuse (run, 400, "invalid_request_error", error->message, param,
              context ? "context_length_exceeded" : unsupported ? "unsupported" : NULL);
      return FALSE;
    }
  if (UM_IS_LOCAL_GENERATOR (gen))
    {
      /* Counted once: the engine takes the ids as they are. */
      greq.messages = NULL;
      greq.n_messages = 0;
      greq.prompt = NULL;
      greq.prompt_ids = (const gint32 *) (gpointer) prompt->data;
      greq.n_prompt_ids = (int) prompt->len;
    }
  run->prompt_len = UM_IS_LOCAL_GENERATOR (gen) ? (int) prompt->len : 0;
  run->suffix_len = UM_IS_LOCAL_GENERATOR (gen) ? (int) suffix->len : 0;
  run->answer_len = greq.params.gen_length;
  um_generator_get_queue (gen, &running, &waiting);
  if (running && server->opt.max_queue >= 0 && waiting >= server->opt.max_queue)
    {
      g_autofree char *m = g_strdup_printf ("the server is busy: %d request%s waiting (the limit); try again later",
                                            waiting, waiting == 1 ? "" : "s");
      refuse (run, 503, "unavailable_error", m, NULL, "server_busy");
      return FALSE;
    }

  dc = g_new0 (DoneCtx, 1);
  dc->run = run_ref (run);
  dc->sc = g_new0 (StepCtx, 1);
  dc->sc->run = run;
  dc->sc->gen = g_object_ref (gen);
  dc->sc->first = TRUE;
  dc->sc->prefix_n = -1;
  g_mutex_lock (&run->lock);
  run->admitted = TRUE;
  post_locked (run);
  g_mutex_unlock (&run->lock);
  um_generator_generate_async (gen, &greq, on_step, dc->sc, run->cancellable, on_done, dc);
  return TRUE;
}

/* A request counts in n_generations from the moment its admission is
 * posted, so that um_server_stop () waits for admissions still queued on
 * the home context too: none may run after the server is freed. */
static gboolean
admit (gpointer data)
{
  Run *run = data;
  UmServer *server = run->server;

  if (!admit_run (run))
    g_atomic_int_add (&server->n_generations, -1);
  return G_SOURCE_REMOVE;
}

/* ---- server thread: answering ---- */

/* The members every answer starts with; @object NULL: a stream chunk's. */
static void
begin_answer (Run *run, JsonBuilder *b, const char *object)
{
  if (object == NULL)
    object = run->req.kind == UM_API_CHAT ? "chat.completion.chunk" : "text_completion";
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "id");
  json_builder_add_string_value (b, run->id);
  json_builder_set_member_name (b, "object");
  json_builder_add_string_value (b, object);
  json_builder_set_member_name (b, "created");
  json_builder_add_int_value (b, run->created);
  json_builder_set_member_name (b, "model");
  json_builder_add_string_value (b, run->model);
  json_builder_set_member_name (b, "system_fingerprint");
  json_builder_add_string_value (b, "unmask-" PACKAGE_VERSION);
}

/* choices: [] when @usage_only, else one choice with @content (NULL: an
 * empty delta) and @finish (NULL: null). */
static void
add_choices (Run *run, JsonBuilder *b, gboolean usage_only, gboolean role, const char *content, const char *finish)
{
  json_builder_set_member_name (b, "choices");
  json_builder_begin_array (b);
  if (!usage_only)
    {
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "index");
      json_builder_add_int_value (b, 0);
      if (run->req.kind == UM_API_CHAT)
        {
          json_builder_set_member_name (b, "delta");
          json_builder_begin_object (b);
          if (role)
            {
              json_builder_set_member_name (b, "role");
              json_builder_add_string_value (b, "assistant");
            }
          if (content != NULL || role)
            {
              json_builder_set_member_name (b, "content");
              json_builder_add_string_value (b, content ? content : "");
            }
          json_builder_end_object (b);
        }
      else
        {
          json_builder_set_member_name (b, "text");
          json_builder_add_string_value (b, content ? content : "");
        }
      json_builder_set_member_name (b, "logprobs");
      json_builder_add_null_value (b);
      json_builder_set_member_name (b, "finish_reason");
      if (finish)
        json_builder_add_string_value (b, finish);
      else
        json_builder_add_null_value (b);
      json_builder_end_object (b);
    }
  json_builder_end_array (b);
}

static void
write_raw (Run *run, char *text, gsize len)
{
  SoupMessageBody *body = soup_server_message_get_response_body (run->msg);
  soup_message_body_append (body, SOUP_MEMORY_TAKE, text, len);
  run->in_flight++;
  run->last_write = g_get_monotonic_time ();
  soup_server_message_unpause (run->msg);
}

static void
write_event (Run *run, JsonBuilder *b)
{
  g_autoptr(JsonGenerator) gen = json_generator_new ();
  g_autoptr(JsonNode) root = json_builder_get_root (b);
  g_autofree char *json = NULL;
  char *event;

  json_generator_set_root (gen, root);
  json = json_generator_to_data (gen, NULL);
  event = g_strconcat ("data: ", json, "\n\n", NULL);
  write_raw (run, event, strlen (event));
}

/* The text of the first @n of @ids: the tokenizer's decoding for a local
 * engine, else the pieces the steps brought (server thread's). */
static gsize
decoded_len (Run *run, UmEngine *engine, const gint32 *ids, int n)
{
  gsize len = 0;

  if (engine != NULL)
    {
      g_autofree char *t = um_tokenizer_decode (um_engine_get_model (engine)->tokenizer, ids, n, TRUE, NULL);
      return t != NULL ? strlen (t) : 0;
    }
  for (int i = 0; i < n && i < run->canvas_len; i++)
    len += run->pieces[i] != NULL ? strlen (run->pieces[i]) : 0;
  return len;
}

/* The answer's tokens the text before a stop string takes: the fewest
 * leading ones whose text reaches its length (the last may run into the
 * stop string); what the generation went on to write is not counted. */
static int
stop_tokens (Run *run)
{
  g_autoptr(UmGenerator) gen = um_server_ref_generator (run->server);
  UmEngine *engine = gen != NULL ? um_generator_get_engine (gen) : NULL;
  const gint32 *ids;
  gsize want = strlen (run->stop_text);
  int n, lo = 0, hi;

  if (run->result != NULL)
    {
      ids = (const gint32 *) (gpointer) run->result->ids->data;
      n = MIN ((int) run->result->ids->len, run->result->completion_tokens);
    }
  else
    {
      /* A stream cut before the generation ended: its committed prefix. */
      ids = run->ids;
      n = MIN (run->prefix_tokens, run->canvas_len);
    }
  if (want == 0 || ids == NULL || n <= 0)
    return 0;
  /* Bisection (a prefix's text grows with it, but for a character split
   * across tokens), then back while one fewer still reaches. */
  hi = n;
  while (lo < hi)
    {
      int mid = (lo + hi) / 2;
      if (decoded_len (run, engine, ids, mid) >= want)
        hi = mid;
      else
        lo = mid + 1;
    }
  while (lo > 1 && decoded_len (run, engine, ids, lo - 1) >= want)
    lo--;
  return lo;
}

static void
add_usage (Run *run, JsonBuilder *b)
{
  /* A stream cut by a stop string ends before the generation does: its
   * answer is the committed prefix seen so far. */
  int completion = run->result ? run->result->completion_tokens : run->prefix_tokens;

  if (run->stop_text != NULL)
    completion = stop_tokens (run);
  json_builder_set_member_name (b, "usage");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "prompt_tokens");
  json_builder_add_int_value (b, run->prompt_len + run->suffix_len);
  json_builder_set_member_name (b, "completion_tokens");
  json_builder_add_int_value (b, completion);
  json_builder_set_member_name (b, "total_tokens");
  json_builder_add_int_value (b, run->prompt_len + run->suffix_len + completion);
  json_builder_end_object (b);
}

static void
ensure_canvas (Run *run, int c)
{
  if (run->ids != NULL || c <= 0)
    return;
  run->canvas_len = c;
  run->ids = g_new (gint32, c);
  run->conf = g_new0 (float, c);
  run->at_step = g_new (int, c);
  run->pieces = g_new0 (char *, c);
  for (int i = 0; i < c; i++)
    {
      run->ids[i] = -1;
      run->at_step[i] = -2;   /* masked */
    }
}

static void
apply_step (Run *run, StepOut *s)
{
  ensure_canvas (run, s->canvas_len);
  for (guint i = 0; i < s->changes->len; i++)
    {
      Change *ch = &g_array_index (s->changes, Change, i);
      int pos = ch->pos < 0 ? -1 - ch->pos : ch->pos;
      if (pos >= run->canvas_len)
        continue;
      run->ids[pos] = ch->id;
      run->conf[pos] = ch->conf;
      run->at_step[pos] = ch->pos < 0 ? -1 : s->step;
      g_free (run->pieces[pos]);
      run->pieces[pos] = g_strdup (ch->piece);
    }
  run->steps_seen++;
  run->prefix_tokens = s->prefix_tokens;
  run->elapsed = s->elapsed;
}

/* Of the committed text, what may go out now: not a possibly incomplete
 * character (a lone U+FFFD at the end), not what could start a stop
 * string. Sets run->stop_text when a stop string appeared. */
static gsize
releasable (Run *run, const char *text, gboolean final)
{
  gsize len = strlen (text), hold = 0;

  for (guint i = 0; run->req.stop && run->req.stop[i]; i++)
    {
      const char *at = strstr (text, run->req.stop[i]);
      if (at != NULL && (run->stop_text == NULL || (gsize) (at - text) < strlen (run->stop_text)))
        {
          g_free (run->stop_text);
          run->stop_text = g_strndup (text, at - text);
        }
    }
  if (run->stop_text != NULL)
    return strlen (run->stop_text);
  if (final)
    return len;
  while (len >= 3 && memcmp (text + len - 3, "\xEF\xBF\xBD", 3) == 0)
    len -= 3;
  for (guint i = 0; run->req.stop && run->req.stop[i]; i++)
    {
      gsize sl = strlen (run->req.stop[i]);
      for (gsize k = MIN (sl - 1, len); k > hold; k--)
        if (memcmp (text + len - k, run->req.stop[i], k) == 0)
          {
            hold = k;
            break;
          }
    }
  return len - hold;
}

/* The new text to send, or NULL. */
static char *
next_delta (Run *run, const char *text, gboolean final)
{
  gsize n = releasable (run, text, final);

  if (run->emitted->len > n || strncmp (text, run->emitted->str, run->emitted->len) != 0)
    return NULL;
  if (n == run->emitted->len)
    return NULL;
  {
    char *d = g_strndup (text + run->emitted->len, n - run->emitted->len);
    g_string_append (run->emitted, d);
    return d;
  }
}

static void
add_step_object (Run *run, JsonBuilder *b, StepOut *last, int first_step, GArray *merged, gboolean keyframe)
{
  json_builder_set_member_name (b, "unmask");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "type");
  json_builder_add_string_value (b, "step");
  json_builder_set_member_name (b, "step");
  json_builder_add_int_value (b, last->step);
  json_builder_set_member_name (b, "first_step");
  json_builder_add_int_value (b, first_step);
  json_builder_set_member_name (b, "steps");
  json_builder_add_int_value (b, last->n_steps);
  json_builder_set_member_name (b, "block");
  json_builder_add_int_value (b, last->block);
  json_builder_set_member_name (b, "n_blocks");
  json_builder_add_int_value (b, last->n_blocks);
  json_builder_set_member_name (b, "n_masked");
  json_builder_add_int_value (b, last->n_masked);
  json_builder_set_member_name (b, "prompt_len");
  json_builder_add_int_value (b, last->prompt_len);
  json_builder_set_member_name (b, "canvas_len");
  json_builder_add_int_value (b, last->canvas_len);
  json_builder_set_member_name (b, "elapsed_ms");
  json_builder_add_double_value (b, last->elapsed * 1000.0);
  if (keyframe)
    {
      json_builder_set_member_name (b, "canvas");
      json_builder_begin_array (b);
      for (int i = 0; i < run->canvas_len; i++)
        {
          if (run->at_step[i] == -2)
            {
              json_builder_add_null_value (b);
              continue;
            }
          json_builder_begin_array (b);
          json_builder_add_int_value (b, run->ids[i]);
          json_builder_add_string_value (b, run->pieces[i] ? run->pieces[i] : "");
          json_builder_add_double_value (b, run->conf[i]);
          json_builder_end_array (b);
        }
      json_builder_end_array (b);
    }
  else
    {
      json_builder_set_member_name (b, "changes");
      json_builder_begin_array (b);
      for (guint i = 0; i < merged->len; i++)
        {
          Change *ch = &g_array_index (merged, Change, i);
          json_builder_begin_array (b);
          json_builder_add_int_value (b, ch->pos < 0 ? -1 - ch->pos : ch->pos);
          json_builder_add_int_value (b, ch->id);
          json_builder_add_string_value (b, ch->piece);
          json_builder_add_double_value (b, ch->conf);
          json_builder_end_array (b);
        }
      json_builder_end_array (b);
    }
  json_builder_end_object (b);
}

static void
finish_message (Run *run)
{
  run->finished = TRUE;
  remove_timeout (run, &run->ping_source);
  remove_timeout (run, &run->check_source);
  remove_timeout (run, &run->interval_source);
  run->server->served++;
}

static void
send_headers (Run *run)
{
  SoupMessageHeaders *h = soup_server_message_get_response_headers (run->msg);
  g_autoptr(JsonBuilder) b = json_builder_new ();

  soup_server_message_set_status (run->msg, 200, NULL);
  soup_message_headers_replace (h, "Content-Type", "text/event-stream");
  soup_message_headers_replace (h, "Cache-Control", "no-cache");
  soup_message_headers_replace (h, "X-Accel-Buffering", "no");
  soup_message_headers_set_encoding (h, SOUP_ENCODING_CHUNKED);
  soup_message_body_set_accumulate (soup_server_message_get_response_body (run->msg), FALSE);
  run->headers_sent = TRUE;
  /* The role comes first: OpenAI's stream helpers insist. */
  begin_answer (run, b, NULL);
  add_choices (run, b, FALSE, run->req.kind == UM_API_CHAT, NULL, NULL);
  if (run->req.include_usage)
    {
      json_builder_set_member_name (b, "usage");
      json_builder_add_null_value (b);
    }
  json_builder_end_object (b);
  if (run->req.kind == UM_API_CHAT)
    write_event (run, b);
  else
    json_builder_reset (b);   /* completions have no role chunk */
}

/* The stream's last event, "[DONE]", then the end of the body. */
static void
send_done_and_close (Run *run)
{
  write_raw (run, g_strdup ("data: [DONE]\n\n"), strlen ("data: [DONE]\n\n"));
  soup_message_body_complete (soup_server_message_get_response_body (run->msg));
  soup_server_message_unpause (run->msg);
  finish_message (run);
}

static void
stream_end (Run *run, const char *finish)
{
  g_autoptr(JsonBuilder) b = json_builder_new ();

  begin_answer (run, b, NULL);
  add_choices (run, b, FALSE, FALSE, NULL, finish);
  if (run->req.include_usage)
    {
      json_builder_set_member_name (b, "usage");
      json_builder_add_null_value (b);
    }
  json_builder_set_member_name (b, "unmask");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "type");
  json_builder_add_string_value (b, "done");
  json_builder_set_member_name (b, "steps_run");
  json_builder_add_int_value (b, run->result ? run->result->steps : run->steps_seen);
  json_builder_set_member_name (b, "forward_passes");
  json_builder_add_int_value (b, run->result ? run->result->forward_passes : run->steps_seen);
  json_builder_set_member_name (b, "elapsed_ms");
  json_builder_add_double_value (b, (run->result ? run->result->seconds : run->elapsed) * 1000.0);
  json_builder_end_object (b);
  json_builder_end_object (b);
  write_event (run, b);
  if (run->req.include_usage)
    {
      g_autoptr(JsonBuilder) u = json_builder_new ();
      begin_answer (run, u, NULL);
      add_choices (run, u, TRUE, FALSE, NULL, NULL);
      add_usage (run, u);
      json_builder_end_object (u);
      write_event (run, u);
    }
  send_done_and_close (run);
}

/* An error after the stream began: in band, as OpenAI sends one (its
 * status went out as 200 already). */
static void
stream_error (Run *run, const char *type, const char *message, const char *code)
{
  g_autoptr(JsonBuilder) b = json_builder_new ();

  um_server_add_error (b, message, type, NULL, code);
  write_event (run, b);
  send_done_and_close (run);
}

static gboolean
interval_cb (gpointer data)
{
  Run *run = data;
  run->interval_source = 0;
  service (run);
  return G_SOURCE_REMOVE;
}

/* Sends what the pending steps add: one chunk however many there are. */
static void
stream_steps (Run *run, GQueue *steps)
{
  g_autoptr(JsonBuilder) b = json_builder_new ();
  g_autoptr(GArray) merged = g_array_new (FALSE, FALSE, sizeof (Change));
  g_autofree char *delta = NULL;
  StepOut *last = g_queue_peek_tail (steps);
  int first_step = ((StepOut *) g_queue_peek_head (steps))->step;
  gboolean keyframe, want_steps = run->req.stream_steps != UM_STREAM_STEPS_NONE;

  for (GList *l = steps->head; l != NULL; l = l->next)
    {
      StepOut *s = l->data;
      apply_step (run, s);
      g_array_append_vals (merged, s->changes->data, s->changes->len);
    }
  keyframe = !run->keyframe_sent || run->req.stream_steps == UM_STREAM_STEPS_FULL;
  delta = next_delta (run, last->prefix, FALSE);
  if (delta == NULL && !want_steps)
    return;
  begin_answer (run, b, NULL);
  add_choices (run, b, FALSE, FALSE, delta, NULL);
  if (run->req.include_usage)
    {
      json_builder_set_member_name (b, "usage");
      json_builder_add_null_value (b);
    }
  if (want_steps)
    {
      add_step_object (run, b, last, first_step, merged, keyframe);
      run->keyframe_sent = TRUE;
      run->last_step_sent = g_get_monotonic_time ();
    }
  json_builder_end_object (b);
  write_event (run, b);
}

static void
respond_json (Run *run)
{
  g_autoptr(JsonBuilder) b = json_builder_new ();
  g_autoptr(JsonGenerator) gen = json_generator_new ();
  g_autoptr(JsonNode) root = NULL;
  UmGeneratorResult *res = run->result;
  const char *text = res->text;
  const char *finish = res->hit_eos ? "stop" : "length";
  g_autofree char *cut = NULL;
  gsize len;
  char *data;

  releasable (run, text, TRUE);
  if (run->stop_text != NULL)
    {
      text = run->stop_text;
      finish = "stop";
    }
  begin_answer (run, b, run->req.kind == UM_API_CHAT ? "chat.completion" : "text_completion");
  json_builder_set_member_name (b, "choices");
  json_builder_begin_array (b);
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "index");
  json_builder_add_int_value (b, 0);
  if (run->req.kind == UM_API_CHAT)
    {
      json_builder_set_member_name (b, "message");
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "role");
      json_builder_add_string_value (b, "assistant");
      json_builder_set_member_name (b, "content");
      json_builder_add_string_value (b, text);
      json_builder_set_member_name (b, "refusal");
      json_builder_add_null_value (b);
      json_builder_end_object (b);
    }
  else
    {
      json_builder_set_member_name (b, "text");
      json_builder_add_string_value (b, text);
    }
  json_builder_set_member_name (b, "logprobs");
  json_builder_add_null_value (b);
  json_builder_set_member_name (b, "finish_reason");
  json_builder_add_string_value (b, finish);
  json_builder_end_object (b);
  json_builder_end_array (b);
  add_usage (run, b);
  json_builder_set_member_name (b, "unmask");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "steps_run");
  json_builder_add_int_value (b, res->steps);
  json_builder_set_member_name (b, "forward_passes");
  json_builder_add_int_value (b, res->forward_passes);
  json_builder_set_member_name (b, "elapsed_ms");
  json_builder_add_double_value (b, res->seconds * 1000.0);
  if (run->req.return_trace)
    {
      int c = (int) res->ids->len;
      ensure_canvas (run, c);
      json_builder_set_member_name (b, "prompt_len");
      json_builder_add_int_value (b, run->prompt_len);
      json_builder_set_member_name (b, "token_ids");
      json_builder_begin_array (b);
      for (int i = 0; i < c; i++)
        json_builder_add_int_value (b, g_array_index (res->ids, gint32, i));
      json_builder_end_array (b);
      json_builder_set_member_name (b, "unmasked_at_step");
      json_builder_begin_array (b);
      for (int i = 0; i < c; i++)
        json_builder_add_int_value (b, i < run->canvas_len ? run->at_step[i] : -2);
      json_builder_end_array (b);
      json_builder_set_member_name (b, "confidence");
      json_builder_begin_array (b);
      for (int i = 0; i < c; i++)
        json_builder_add_double_value (b, i < run->canvas_len ? run->conf[i] : 0.0);
      json_builder_end_array (b);
    }
  json_builder_end_object (b);
  json_builder_end_object (b);
  root = json_builder_get_root (b);
  json_generator_set_root (gen, root);
  data = json_generator_to_data (gen, &len);
  soup_server_message_set_status (run->msg, 200, NULL);
  soup_server_message_set_response (run->msg, "application/json", SOUP_MEMORY_TAKE, data, len);
  soup_server_message_unpause (run->msg);
  finish_message (run);
}

static void
respond_error (Run *run, const GError *error)
{
  guint status = 500;
  const char *type = "server_error", *code = NULL;

  if (g_error_matches (error, UM_ERROR, UM_ERROR_BUSY))
    status = 503, type = "unavailable_error", code = "server_busy";
  else if (g_error_matches (error, UM_ERROR, UM_ERROR_INVALID_PARAM))
    status = 400, type = "invalid_request_error";
  if (run->headers_sent)
    stream_error (run, type, error->message, code);
  else
    {
      um_server_send_error (run->msg, status, type, error->message, NULL, code);
      soup_server_message_unpause (run->msg);
      finish_message (run);
    }
}

static void
mark_gone (Run *run)
{
  if (!run->gone)
    {
      run->gone = TRUE;
      cancel_run (run);
    }
}

/* Whether the client is still there, by end of stream or hang-up (never by
 * peeking: a byte it sent and left unread would keep it "there"). Its end
 * of stream means it left, or only stopped sending (a half-close): a
 * stream tells the two apart by writing (a comment every SSE parser
 * skips), which a client that left answers with a reset; a non-streamed
 * answer has nothing to write before its end, so there the client is
 * taken as gone. */
static void
check_peer (Run *run)
{
  if (run->msg == NULL)
    {
      mark_gone (run);
      return;
    }
  switch (um_server_peer_state (run->msg))
    {
    case UM_PEER_GONE:
      mark_gone (run);
      break;
    case UM_PEER_EOF:
      /* A stream's headers go out at its admission, a moment after the
       * request: until then it waits to be told. */
      if (!run->req.stream)
        mark_gone (run);
      else if (run->headers_sent && !run->probed && !run->finished)
        {
          run->probed = TRUE;
          if (run->in_flight == 0)
            write_raw (run, g_strdup (":\n\n"), 3);
        }
      break;
    case UM_PEER_HERE:
      break;
    }
}

static void
service (Run *run)
{
  GQueue steps = G_QUEUE_INIT;
  Refusal *refusal;
  gboolean admitted, done;

  if (run->finished || run->msg == NULL)
    {
      mark_gone (run);
      g_mutex_lock (&run->lock);
      g_queue_clear_full (&run->pending, (GDestroyNotify) step_out_free);
      g_queue_init (&run->pending);
      g_mutex_unlock (&run->lock);
      return;
    }
  check_peer (run);

  g_mutex_lock (&run->lock);
  refusal = g_steal_pointer (&run->refusal);
  admitted = run->admitted;
  done = run->done;
  g_mutex_unlock (&run->lock);

  if (refusal != NULL)
    {
      if (run->headers_sent)
        stream_error (run, refusal->type, refusal->message, refusal->code);
      else
        {
          um_server_send_error (run->msg, refusal->status, refusal->type, refusal->message, refusal->param,
                                refusal->code);
          soup_server_message_unpause (run->msg);
          finish_message (run);
        }
      refusal_free (refusal);
      return;
    }
  if (run->req.stream && admitted && !run->headers_sent)
    send_headers (run);
  /* The socket has not taken the last chunk: merge until it has. */
  if (run->req.stream && run->in_flight > 0)
    return;
  if (run->req.stream && run->req.step_interval_ms > 0 && run->last_step_sent > 0 && !done
      && g_get_monotonic_time () - run->last_step_sent < (gint64) run->req.step_interval_ms * 1000)
    {
      if (run->interval_source == 0)
        run->interval_source = add_timeout (run, run->req.step_interval_ms, interval_cb);
      return;
    }
  g_mutex_lock (&run->lock);
  steps = run->pending;
  g_queue_init (&run->pending);
  g_mutex_unlock (&run->lock);

  if (!g_queue_is_empty (&steps))
    {
      if (run->req.stream)
        stream_steps (run, &steps);
      else
        for (GList *l = steps.head; l != NULL; l = l->next)
          apply_step (run, l->data);
      g_queue_clear_full (&steps, (GDestroyNotify) step_out_free);
      if (run->req.stream && run->stop_text != NULL && !done)
        {
          /* A stop string: the answer is complete, the engine can stop. */
          cancel_run (run);
          if (run->in_flight > 0)
            return;
        }
    }
  if (run->req.stream && run->stop_text != NULL && !run->finished && (done || run->in_flight == 0))
    {
      if (run->in_flight > 0)
        return;
      stream_end (run, "stop");
      return;
    }
  if (!done)
    return;
  if (run->result == NULL)
    {
      if (!g_error_matches (run->error, G_IO_ERROR, G_IO_ERROR_CANCELLED) || !run->gone)
        respond_error (run, run->error);
      else
        {
          /* Nobody to answer: let libsoup close it. */
          soup_server_message_set_status (run->msg, 499, "Client Closed Request");
          soup_server_message_unpause (run->msg);
          finish_message (run);
        }
      return;
    }
  if (!run->req.stream)
    {
      respond_json (run);
      return;
    }
  if (run->in_flight > 0)
    return;
  {
    g_autofree char *delta = next_delta (run, run->result->text, TRUE);
    const char *finish = run->stop_text != NULL || run->result->hit_eos ? "stop" : "length";
    if (delta != NULL)
      {
        g_autoptr(JsonBuilder) b = json_builder_new ();
        begin_answer (run, b, NULL);
        add_choices (run, b, FALSE, FALSE, delta, NULL);
        if (run->req.include_usage)
          {
            json_builder_set_member_name (b, "usage");
            json_builder_add_null_value (b);
          }
        json_builder_end_object (b);
        write_event (run, b);
      }
    stream_end (run, finish);
  }
}

/* ---- server thread: signals and timers ---- */

static void
on_finished (SoupServerMessage *msg, Run *run)
{
  g_signal_handler_disconnect (msg, run->finished_handler);
  if (run->wrote_handler)
    g_signal_handler_disconnect (msg, run->wrote_handler);
  run->finished_handler = run->wrote_handler = 0;
  if (!run->finished)
    {
      /* libsoup gave up on the message: the client is gone. */
      finish_message (run);
      mark_gone (run);
    }
  run->msg = NULL;
  g_ptr_array_remove (run->server->runs, run);
  g_object_unref (msg);
  run_unref (run);
}

static void
on_wrote_chunk (SoupServerMessage *msg, Run *run)
{
  if (run->in_flight > 0)
    run->in_flight--;
  if (run->in_flight == 0 && !run->finished)
    service (run);
}

static gboolean
ping_cb (gpointer data)
{
  Run *run = data;
  guint interval = run->server->opt.ping_interval_s;

  if (run->msg == NULL || run->finished)
    return G_SOURCE_CONTINUE;
  if (run->headers_sent && run->in_flight == 0
      && g_get_monotonic_time () - run->last_write >= (gint64) interval * G_USEC_PER_SEC)
    write_raw (run, g_strdup (":\n\n"), 3);   /* a bare comment: every SSE parser skips it */
  return G_SOURCE_CONTINUE;
}

static gboolean
check_cb (gpointer data)
{
  Run *run = data;
  if (!run->finished && !run->gone)
    {
      check_peer (run);
      if (run->gone)
        service (run);
    }
  return G_SOURCE_CONTINUE;
}

void
um_server_handle_generation (UmServer *server, SoupServerMessage *msg, UmApiKind kind)
{
  g_autoptr(GBytes) body = soup_message_body_flatten (soup_server_message_get_request_body (msg));
  g_autoptr(GError) error = NULL;
  g_autofree char *param = NULL;
  g_autoptr(UmGenerator) gen = um_server_ref_generator (server);
  Run *run = g_new0 (Run, 1);
  gsize len;
  const char *data = g_bytes_get_data (body, &len);

  run->ref = 1;
  run->server = server;
  g_mutex_init (&run->lock);
  g_queue_init (&run->pending);
  if (!um_api_request_parse (kind, data ? data : "", len, server->opt.max_body, &run->req, &param, &error))
    {
      gboolean unsupported = g_error_matches (error, UM_ERROR, UM_ERROR_UNSUPPORTED);
      um_server_send_error (msg, 400, "invalid_request_error", error->message, param,
                            unsupported ? "unsupported" : NULL);
      run_unref (run);
      return;
    }
  run->id = g_strdup_printf ("%s-%08x%08x", kind == UM_API_CHAT ? "chatcmpl" : "cmpl", g_random_int (),
                             g_random_int ());
  run->model = g_strdup (server->opt.model_id ? server->opt.model_id : um_generator_get_info (gen)->model_id);
  run->created = g_get_real_time () / G_USEC_PER_SEC;
  run->cancellable = g_cancellable_new ();
  run->emitted = g_string_new (NULL);
  run->msg = g_object_ref (msg);
  run->last_write = g_get_monotonic_time ();
  soup_message_headers_replace (soup_server_message_get_response_headers (msg), "x-request-id", run->id);
  /* The message's own reference on the run: dropped when libsoup is done. */
  run_ref (run);
  run->finished_handler = g_signal_connect (msg, "finished", G_CALLBACK (on_finished), run);
  run->wrote_handler = g_signal_connect (msg, "wrote-chunk", G_CALLBACK (on_wrote_chunk), run);
  g_ptr_array_add (server->runs, run);
  soup_server_message_pause (msg);
  if (run->req.stream && server->opt.ping_interval_s > 0)
    run->ping_source = add_timeout (run, 1000, ping_cb);
  run->check_source = add_timeout (run, 100, check_cb);
  g_atomic_int_inc (&server->n_generations);
  g_main_context_invoke_full (server->home, G_PRIORITY_DEFAULT, admit, run, run_unref);
}

void
um_server_cancel_runs (UmServer *server)
{
  for (guint i = 0; i < server->runs->len; i++)
    {
      Run *run = g_ptr_array_index (server->runs, i);
      cancel_run (run);
    }
}

/* um-generator.h — "an engine" as the pages, the server and the CLI see it:
 * something that runs one generation at a time from a FIFO queue and
 * reports every step. Two kinds implement it:
 *   - UmLocalGenerator (um-local-generator.h): an UmEngine in this process,
 *     run on a worker thread;
 *   - UmRemoteGenerator (remote/um-remote-generator.h): a server speaking
 *     OpenAI's API (with Unmask's per-step extension when it is Unmask).
 * Callers never branch on which one they hold: what differs (where the
 * model lives, what tokens read as) is asked of the generator.
 *
 * All calls are made from one thread, the one whose thread-default main
 * context was current when the generator was made (the GTK main thread, or
 * the server's thread); callbacks and signals arrive there. */
#pragma once

#include <gio/gio.h>

#include "um-engine.h"

G_BEGIN_DECLS

#define UM_TYPE_GENERATOR (um_generator_get_type ())
G_DECLARE_DERIVABLE_TYPE (UmGenerator, um_generator, UM, GENERATOR, GObject)

/* What a caller needs to know of the model, local or remote. */
typedef struct {
  char       *model_id;        /* the id a server lists ("llada-8b-instruct"), the local folder's name */
  char       *display_name;
  UmArch      arch;            /* which schedule and options apply */
  guint       max_seq_len;     /* prompt + canvas */
  gint32      mask_id, eos_id, eot_id;   /* -1 where the model has none */
  gboolean    remote;
  char       *location;        /* "this computer" or the server's URL, for titles */
  /* The model's recommended generation settings (never NULL): a remote
   * generator builds it from the server's resolved defaults. */
  const UmGenRecommendation *recommendation;
} UmGeneratorInfo;

/* Messages for a chat request: the local generator renders them with the
 * model's chat template, a remote one sends them as they are. */
typedef struct {
  char *role;      /* "system", "user", "assistant" */
  char *content;
} UmGenMessage;

typedef struct {
  /* Exactly one of: @messages (chat), @prompt (text; with @chat the text is
   * one user turn in the chat template), @prompt_ids (a local generator
   * uses them verbatim; a remote one sends them to /v1/completions). */
  const UmGenMessage *messages;
  int                 n_messages;
  const char         *prompt;
  gboolean            chat;
  const gint32       *prompt_ids;
  int                 n_prompt_ids;
  /* Text the answer must be followed by (infilling); NULL: none. */
  const char         *suffix;
  UmGenParams         params;
} UmGeneratorRequest;

void um_generator_request_init (UmGeneratorRequest *req);

/* The result of one generation: the engine's, plus what a server reports. */
typedef struct {
  GArray  *prompt_ids;       /* gint32; empty when a remote server did not say */
  GArray  *ids;              /* gint32, the canvas's generated ids */
  char    *text;             /* the answer, up to the first EOS/EOT */
  gboolean hit_eos;          /* an EOS/EOT ended the answer ("stop"), else "length" */
  int      completion_tokens;/* generated tokens before the first EOS/EOT */
  double   seconds;          /* the engine's time (not the queue's) */
  int      steps;
  int      forward_passes;
} UmGeneratorResult;

void um_generator_result_free (UmGeneratorResult *res);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmGeneratorResult, um_generator_result_free)

struct _UmGeneratorClass
{
  GObjectClass parent_class;

  const UmGeneratorInfo *(*get_info) (UmGenerator *self);
  /* Runs one request now (the base class queues; these never see two at
   * once). @req stays valid until the callback. */
  void               (*run_async)       (UmGenerator              *self,
                                         const UmGeneratorRequest *req,
                                         UmStepFunc                step_cb,
                                         gpointer                  step_data,
                                         GCancellable             *cancellable,
                                         GAsyncReadyCallback       callback,
                                         gpointer                  user_data);
  UmGeneratorResult *(*run_finish)      (UmGenerator   *self,
                                         GAsyncResult  *result,
                                         GError       **error);
  /* One token's text, for the diffusion view; NULL if unknown. */
  char              *(*token_text)      (UmGenerator *self, gint32 id);
  /* The engine in this process, or NULL (remote). */
  UmEngine          *(*get_engine)      (UmGenerator *self);

  gpointer padding[8];
};

const UmGeneratorInfo *um_generator_get_info (UmGenerator *self);

/* Queues a generation; step_cb runs on the caller's context for every step
 * in order, with an event valid during the call. The event's positions,
 * ids, confidences and canvas are those of the engine's canvas (prompt
 * first); a remote generator rebuilds them from the server's steps. When
 * the queue is full, finishes at once with UM_ERROR_BUSY. Cancelling the
 * cancellable drops a waiting request or stops a running one within one
 * step; it then finishes with G_IO_ERROR_CANCELLED. @req is copied. */
void               um_generator_generate_async  (UmGenerator              *self,
                                                 const UmGeneratorRequest *req,
                                                 UmStepFunc                step_cb,
                                                 gpointer                  step_data,
                                                 GCancellable             *cancellable,
                                                 GAsyncReadyCallback       callback,
                                                 gpointer                  user_data);
UmGeneratorResult *um_generator_generate_finish (UmGenerator   *self,
                                                 GAsyncResult  *result,
                                                 GError       **error);
char              *um_generator_token_text      (UmGenerator *self, gint32 id);
UmEngine          *um_generator_get_engine      (UmGenerator *self);

/* The queue, kept by this base class for both kinds: one running, at most
 * max_waiting waiting (-1: no limit). "queue-changed" is emitted when
 * either number changes. Subclasses call um_generator_queue_* below. */
void     um_generator_set_max_waiting (UmGenerator *self, int max_waiting);
int      um_generator_get_max_waiting (UmGenerator *self);
void     um_generator_get_queue       (UmGenerator *self, int *n_running, int *n_waiting);

G_END_DECLS

/* um-server-request.h — an OpenAI request body, checked field by field
 * before anything is queued (see the field table of docs/server-api.md). */
#pragma once

#include "um-generator.h"

G_BEGIN_DECLS

typedef enum {
  UM_API_CHAT,          /* /v1/chat/completions */
  UM_API_COMPLETIONS,   /* /v1/completions */
} UmApiKind;

typedef enum {
  UM_STREAM_STEPS_NONE,
  UM_STREAM_STEPS_DIFF,
  UM_STREAM_STEPS_FULL,
} UmStreamSteps;

/* The longest stop string, in bytes: every step matches the committed text
 * against each on the server thread. */
#define UM_API_MAX_STOP_BYTES 1024

typedef struct {
  UmApiKind     kind;
  char         *model;            /* as sent; echoed back as the loaded model's id */
  GArray       *messages;         /* UmGenMessage, owned strings (chat) */
  char         *prompt;           /* completions: text */
  GArray       *prompt_ids;       /* completions: gint32 ids */
  char         *suffix;
  gboolean      stream;
  gboolean      include_usage;
  char        **stop;             /* NULL or 1..4 non-empty strings of at most UM_API_MAX_STOP_BYTES */
  UmStreamSteps stream_steps;
  guint         step_interval_ms;
  gboolean      return_trace;
  /* Generation settings the request gave: keys in @user, the rest here
   * with a flag each. */
  UmGenLayer    user;
  UmGenParams   given;
  gboolean      has_seed, has_cache, has_threshold, has_factor;
} UmApiRequest;

void     um_api_request_clear (UmApiRequest *r);
/* Parses and checks @body. On failure returns FALSE with an
 * UM_ERROR_INVALID_PARAM (400) or UM_ERROR_UNSUPPORTED (400 "not
 * supported") error, and *@param the offending field ("messages[1].content")
 * or NULL. */
gboolean um_api_request_parse (UmApiKind     kind,
                               const char   *body,
                               gsize         len,
                               gsize         max_bytes,
                               UmApiRequest *out,
                               char        **param,
                               GError      **error);

/* The parameters the request runs with: @base (the server's non-key
 * settings) and the layers in precedence order (request, server command
 * line, model, profile, family default), then the request's other fields.
 * Validated for @arch with @prompt_len and @suffix_len (tokens; -1: not
 * known here) as the generator will run them: a suffix grows the canvas
 * after the answer (um-local-generator.c), and a request with one runs as
 * a single block unless it sets unmask.block_length. A prompt, suffix and
 * canvas longer than @max_seq_len is UM_ERROR_CONFIG (context_length_exceeded). */
gboolean um_api_request_resolve (const UmApiRequest *r,
                                 UmArch              arch,
                                 const UmGenParams  *base,
                                 const UmGenLayer   *server_user,
                                 const UmGenLayer   *model,
                                 const UmGenLayer   *profile,
                                 int                 prompt_len,
                                 int                 suffix_len,
                                 guint               max_seq_len,
                                 UmGenParams        *out,
                                 char              **param,
                                 GError            **error);

G_END_DECLS

/* um-remote-private.h — the parts of the remote generator that need no
 * network, so tests can feed them recorded text:
 *   - UmRemoteStream: an OpenAI server-sent-event stream (chat or text
 *     completion chunks, with or without Unmask's per-step extension) turned
 *     into step events and one UmGeneratorResult;
 *   - the model object of GET /v1/models into an UmGeneratorInfo;
 *   - a server's error body into its message.
 * Nothing a server sends is trusted: sizes are bounded, and anything
 * malformed is an UM_ERROR_REMOTE error. */
#pragma once

#include <json-glib/json-glib.h>

#include "um-generator.h"

G_BEGIN_DECLS

/* One SSE event's data (a chunk with a full canvas of a 4096-token model is
 * ~200 KB) and one non-streamed body (the model list, an error). */
#define UM_REMOTE_MAX_EVENT_BYTES ((gsize) 8 << 20)
#define UM_REMOTE_MAX_BODY_BYTES  ((gsize) 4 << 20)
/* Prompt + canvas a server may announce: far above any model's context. */
#define UM_REMOTE_MAX_SEQ         (1 << 22)
/* Ids given to the text pieces of a server that sends no ids (any
 * OpenAI-compatible server): far above any vocabulary, so they never
 * read as a real token, and they never repeat within a generator. */
#define UM_REMOTE_SYNTHETIC_ID_BASE 0x40000000
/* Bytes of token pieces cached for token_text (), each counted with what
 * its entry costs beside its text (the table's slots, the allocation's
 * rounding: UM_REMOTE_PIECE_OVERHEAD); beyond, new pieces are not cached
 * and read as unknown. A server naming millions of one-byte pieces fills
 * it with fewer entries, not with gigabytes. */
#define UM_REMOTE_MAX_PIECE_BYTES ((gsize) 64 << 20)
#define UM_REMOTE_PIECE_OVERHEAD  64
/* Positions another server's pieces may fill per token asked for (a
 * server may split a token's text); beyond, the text grows alone. */
#define UM_REMOTE_PIECES_PER_TOKEN 4

/* id → piece, shared by a generator's runs. */
typedef struct {
  GHashTable *pieces;       /* GINT_TO_POINTER (id) → char* */
  gsize       bytes;
  guint32     next_synthetic;
} UmRemotePieces;

void  um_remote_pieces_init  (UmRemotePieces *pc);
void  um_remote_pieces_clear (UmRemotePieces *pc);
void  um_remote_pieces_set   (UmRemotePieces *pc, gint32 id, const char *piece);
char *um_remote_pieces_get   (UmRemotePieces *pc, gint32 id);

typedef struct {
  gboolean      unmask;         /* the server is Unmask: step chunks are expected */
  int           answer_len;     /* max_tokens asked for */
  gint32        mask_id;        /* the model's, or -1 */
  gint32        eos_id, eot_id; /* for completion_tokens when the server sends no usage */
  const gint32 *prompt_ids;     /* known prompt (the request's ids), or NULL */
  int           n_prompt_ids;
} UmRemoteStreamSetup;

typedef struct _UmRemoteStream UmRemoteStream;

/* @pieces is borrowed and must outlive the stream; @step_cb may be NULL. */
UmRemoteStream    *um_remote_stream_new       (const UmRemoteStreamSetup *setup,
                                               UmRemotePieces            *pieces,
                                               UmStepFunc                 step_cb,
                                               gpointer                   step_data);
void               um_remote_stream_free      (UmRemoteStream *s);
/* Feeds bytes of the body as they arrive (any split). FALSE with an error
 * for an in-band error, a malformed chunk or an over-long event. */
gboolean           um_remote_stream_feed      (UmRemoteStream *s, const char *data, gsize len, GError **error);
/* Whether "data: [DONE]" was seen. */
gboolean           um_remote_stream_is_done   (UmRemoteStream *s);
/* At the end of the body: the result, or an error when the stream stopped
 * before its finish (a server gone mid-answer). */
UmGeneratorResult *um_remote_stream_finish    (UmRemoteStream *s, double wall_seconds, GError **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmRemoteStream, um_remote_stream_free)

/* What a model object of /v1/models says: @info's strings are newly
 * allocated (free them with um_remote_info_clear); @out_rec the
 * recommendation built from "unmask.defaults" (an empty one for other
 * servers). @base_url goes to info->location. */
gboolean um_remote_parse_model (JsonObject           *obj,
                                const char           *base_url,
                                UmGeneratorInfo      *info,
                                gboolean             *out_unmask,
                                UmGenRecommendation **out_rec,
                                GError              **error);
void     um_remote_info_clear  (UmGeneratorInfo *info);

/* The message of an OpenAI error envelope ({"error":{"message":…}} or
 * {"error":"…"}) in @body, or NULL; never longer than a few hundred bytes. */
char    *um_remote_error_message (const char *body, gsize len);

/* The "unmask" request object's keys from @p (what the server's defaults
 * carry too). */
void     um_remote_add_unmask_params (JsonBuilder *b, const UmGenParams *p, UmArch arch);

G_END_DECLS

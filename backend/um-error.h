/* um-error.h — the engine's single error domain.
 *
 * Every engine failure is reported as a GError in UM_ERROR (or G_IO_ERROR for
 * cancellation and plain I/O failures). The engine never aborts on bad input.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define UM_ERROR (um_error_quark ())

typedef enum {
  UM_ERROR_FAILED,          /* anything not covered below */
  UM_ERROR_IO,              /* a file could not be opened, read or mapped */
  UM_ERROR_FORMAT,          /* a file is malformed: bad JSON, lying header, truncated */
  UM_ERROR_UNSUPPORTED,     /* valid but not something we can run (dtype, architecture) */
  UM_ERROR_CONFIG,          /* hyperparameters missing, absurd or disagreeing with tensors */
  UM_ERROR_INVALID_PARAM,   /* caller passed impossible parameters */
  UM_ERROR_OUT_OF_MEMORY,   /* an allocation beyond the budget or the machine */
  UM_ERROR_CANCELLED,       /* kept for callers that do not use GIO; GCancellable gives G_IO_ERROR_CANCELLED */
  UM_ERROR_CONFLICT,        /* a file changed since the caller read it (another process wrote it) */
  UM_ERROR_BUSY,            /* the engine's queue is full: try again later */
  UM_ERROR_REMOTE,          /* a server answered with an error, or the connection failed */
} UmError;

GQuark um_error_quark (void);

G_END_DECLS

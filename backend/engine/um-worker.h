/* um-worker.h — asynchronous loading and generation for a main loop.
 *
 * The engine runs in a GTask thread; progress and step events are copied and
 * delivered on the main context that was the thread-default one when the
 * call was made. Events queue up while the UI is busy and are handed over in
 * batches, one dispatch per main-loop iteration, so a slow UI never slows the
 * engine and no step is lost (the diffusion view replays all of them).
 */
#pragma once

#include <gio/gio.h>

#include "um-engine.h"

G_BEGIN_DECLS

void      um_engine_load_async (const char             *path,
                                const UmEngineOptions  *options,
                                GCancellable           *cancellable,
                                UmProgressFunc          progress_cb,
                                gpointer                progress_data,
                                GAsyncReadyCallback     callback,
                                gpointer                user_data);
UmEngine *um_engine_load_finish (GAsyncResult  *result,
                                 GError       **error);

/* @step_cb runs on the caller's main context for every step, in order, with
 * an event that is valid during the call only. @request is copied (its
 * prompt text and ids too). */
void         um_engine_generate_async (UmEngine           *engine,
                                       const UmGenRequest *request,
                                       UmStepFunc          step_cb,
                                       gpointer            step_data,
                                       GCancellable       *cancellable,
                                       GAsyncReadyCallback callback,
                                       gpointer            user_data);
UmGenResult *um_engine_generate_finish (UmEngine      *engine,
                                        GAsyncResult  *result,
                                        GError       **error);

G_END_DECLS

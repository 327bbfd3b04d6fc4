/* um-frame-stats.h — a measurement of the window's smoothness while the
 * engine works (issue 22): the app attaches it when UM_FRAME_STATS names a
 * file; nothing of it runs otherwise. tests/tools/frame-bench.sh drives it. */
#pragma once

#include "um-window.h"

G_BEGIN_DECLS

/* Records, into @path (JSON, rewritten whenever a run starts or ends and
 * when @win is destroyed):
 * - "frames_ms": the intervals between frame-clock cycles while a
 *   generation runs (a tick callback on the diffusion view keeps the clock
 *   running, as its animation does, so a stalled main loop shows as a long
 *   interval); "work_ms": per frame, the main thread's time from the tick
 *   to the end of painting (its own work, as opposed to waiting);
 * - "keys_ms": for each key press during a run, the time from the event's
 *   X server timestamp to the window's capture-phase handler;
 * - "stops": for Escape during a run, the time from the event's timestamp
 *   to that handler, to the page no longer running, and to the frame that
 *   showed it;
 * - "runs": each run's seconds and steps, and the main thread's CPU time
 *   and run-queue wait (Linux schedstat) during it. */
void um_frame_stats_attach (UmWindow *win, const char *path);

G_END_DECLS

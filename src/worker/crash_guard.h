/*
 * crash_guard.h
 *		A flow whose worker dies by a signal twice at the same offsets is
 *		failed, not restarted in a loop (crash_guard.c).
 */
#ifndef SDP_CRASH_GUARD_H
#define SDP_CRASH_GUARD_H

#include "worker/worker_internal.h"

extern void sdp_crash_guard_start(FlowWorker *w);
extern void sdp_crash_guard_check(FlowWorker *w);

#endif							/* SDP_CRASH_GUARD_H */

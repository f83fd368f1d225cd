/*
 * skip.h
 *		The messages a flow's owner asked it to skip (skip.c).
 */
#ifndef SDP_SKIP_H
#define SDP_SKIP_H

#include "worker/worker_internal.h"

extern bool sdp_skips_changed(FlowWorker *w);
extern void sdp_skips_reload(FlowWorker *w);
extern void sdp_skips_mark(FlowWorker *w, Batch *b);

#endif							/* SDP_SKIP_H */

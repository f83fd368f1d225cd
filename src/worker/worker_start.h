/*
 * worker_start.h
 *		A flow worker's start: load, connect, assign partitions
 *		(worker_start.c).
 */
#ifndef SDP_WORKER_START_H
#define SDP_WORKER_START_H

#include "worker/worker_internal.h"

extern void sdp_wait_for_restore(FlowWorker *w);
extern void sdp_worker_load_flow(FlowWorker *w);
extern void sdp_worker_open_source(FlowWorker *w);
extern void sdp_worker_take_partitions(FlowWorker *w, int n, int32 *partitions);
extern bool sdp_flow_has_run(FlowWorker *w);
extern void sdp_assign_partitions(FlowWorker *w, int n, int32 *partitions);

#endif							/* SDP_WORKER_START_H */

/*
 * offsets.h
 *		A worker's partitions and the offsets it stores with its rows (offsets.c).
 */
#ifndef SDP_OFFSETS_H
#define SDP_OFFSETS_H

#include "worker.h"

extern void sdp_offsets_prepare(FlowWorker *w);
extern void sdp_wait_for_restore(FlowWorker *w);
extern bool sdp_flow_has_run(FlowWorker *w);
extern void sdp_assign_partitions(FlowWorker *w, int n, int32 *partitions);
extern void sdp_store_offsets(FlowWorker *w, int n, const int32 *partitions,
							  const int64 *offsets, const int64 *expected, bool fresh);
extern void sdp_next_offsets(FlowWorker *w, Batch *b, int64 *next);
extern void sdp_write_moved_offsets(FlowWorker *w, const int64 *next);
extern void sdp_publish_committed(FlowWorker *w);
extern void sdp_publish_high_watermarks(FlowWorker *w);

#endif							/* SDP_OFFSETS_H */

/*
 * offsets.h
 *		The offsets a worker stores with its rows (offsets.c).
 */
#ifndef SDP_OFFSETS_H
#define SDP_OFFSETS_H

#include "worker/worker_internal.h"

extern int	sdp_partitions_index_of(const SdpPartitionSet *ps, int32 id);
extern void sdp_partitions_add(SdpPartitionSet *ps, int n, const int32 *ids, const int64 *next,
							   MemoryContext cxt);

extern void sdp_offsets_prepare(FlowWorker *w);
extern void sdp_store_offsets(FlowWorker *w, int n, const int32 *partitions,
							  const int64 *offsets, const int64 *expected, bool fresh);
extern void sdp_next_offsets(FlowWorker *w, Batch *b, int64 *next);
extern void sdp_write_moved_offsets(FlowWorker *w, const int64 *next);

#endif							/* SDP_OFFSETS_H */

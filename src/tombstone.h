/*
 * tombstone.h
 *		Tombstones that delete (tombstone.c).
 */
#ifndef SDP_TOMBSTONE_H
#define SDP_TOMBSTONE_H

#include "worker.h"

extern void sdp_tombstone_prepare(const SdpFlowOptions *opts, bool has_operator, Oid target,
								  Oid owner, SPIPlanPtr *plan);
extern int64 sdp_tombstone_apply(FlowWorker *w, Batch *b, int lo, int hi, HeapTuple *keep, int *nkeep);

#endif							/* SDP_TOMBSTONE_H */

/*
 * tombstone.h
 *		Tombstones that delete (tombstone.c).
 */
#ifndef SDP_TOMBSTONE_H
#define SDP_TOMBSTONE_H

#include "worker/worker_internal.h"

extern int64 sdp_tombstone_apply(FlowWorker *w, Batch *b, int lo, int hi, HeapTuple *keep, int *nkeep);

#endif							/* SDP_TOMBSTONE_H */

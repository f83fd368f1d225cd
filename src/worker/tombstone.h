/*
 * tombstone.h
 *		Tombstones that delete (tombstone.c).
 */
#ifndef SDP_TOMBSTONE_H
#define SDP_TOMBSTONE_H

#include "worker/worker_internal.h"

extern void sdp_deletes_split(Batch *b, int lo, int hi, HeapTuple *keep, int *nkeep, int *dels, int *ndels);
extern int64 sdp_tombstone_apply(FlowWorker *w, Batch *b, int lo, int hi, HeapTuple *keep, int *nkeep);

#endif							/* SDP_TOMBSTONE_H */

/*
 * batch.h
 *		The pipeline of one batch, from decode to commit (batch.c).
 */
#ifndef SDP_BATCH_H
#define SDP_BATCH_H

#include "worker/worker_internal.h"

/* How a batch ended, for the worker loop to act on. */
typedef enum SdpBatchOutcome
{
	SDP_BATCH_COMMITTED,		/* rows, dead letters and offsets committed */
	SDP_BATCH_RETRY,			/* not about the data (a missing table, a full disk): wait and run it again */
	SDP_BATCH_FAIL,				/* on_error = fail met a bad message, or state outgrew its limit: stop the flow */
	SDP_BATCH_RESTART			/* failed after the operator changed its state: restart from the checkpoint */
} SdpBatchOutcome;

extern void sdp_batch_prepare(FlowWorker *w);
extern SdpBatchOutcome sdp_batch_run(FlowWorker *w, Batch *b, char **message);
extern void sdp_batch_account(FlowWorker *w, Batch *b);

#endif							/* SDP_BATCH_H */

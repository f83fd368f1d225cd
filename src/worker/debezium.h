/*
 * debezium.h
 *		Debezium's change events, applied (debezium.c).
 */
#ifndef SDP_DEBEZIUM_H
#define SDP_DEBEZIUM_H

#include "worker/worker_internal.h"

extern bool sdp_debezium_decode(FlowWorker *w, rd_kafka_message_t *m, Datum *values, bool *nulls,
								bool *deletes, char **error, int *sqlstate);
extern int64 sdp_debezium_apply(FlowWorker *w, Batch *b, int lo, int hi, HeapTuple *keep, int *nkeep,
								 bool *done, int64 *nout, int64 *written);

#endif							/* SDP_DEBEZIUM_H */

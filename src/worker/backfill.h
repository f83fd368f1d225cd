/*
 * backfill.h
 *		A flow's backfill in its worker (backfill.c): the rows of a table or
 *		query, in their stated order, as the batches the flow runs before it
 *		reads Kafka from the boundary (sdp_backfill, sql/backfill.c).
 */
#ifndef SDP_WORKER_BACKFILL_H
#define SDP_WORKER_BACKFILL_H

#include "worker/worker_internal.h"

/*
 * What a backfill row's message carries (the message's _private; its rkt is
 * NULL, which tells it from a message read from Kafka): the row as the
 * fetch returned it, and whether it names its place in the topic.
 */
typedef struct SdpBackfillRow
{
	HeapTuple	tuple;			/* of the fetch's descriptor: schema columns, Kafka columns, position */
	TupleDesc	desc;			/* that descriptor */
	int			ncolumns;		/* the schema's columns: the first of it */
	bool		has_position;	/* its kafka_partition and kafka_offset came from the source */
	int64		ordinal;		/* its place in the backfill, from 1 */
} SdpBackfillRow;

static inline bool
sdp_is_backfill_message(const rd_kafka_message_t *m)
{
	return m->rkt == NULL && m->_private != NULL;
}

extern void sdp_backfill_load(FlowWorker *w);
extern int	sdp_backfill_fill(FlowWorker *w, rd_kafka_message_t **buf, int max);
extern void sdp_backfill_decode(FlowWorker *w, rd_kafka_message_t *m, Datum *values, bool *nulls);
extern void sdp_backfill_store_position(FlowWorker *w, Batch *b);
extern void sdp_backfill_committed(FlowWorker *w, Batch *b);
extern void sdp_backfill_finish(FlowWorker *w);

#endif							/* SDP_WORKER_BACKFILL_H */

/*
 * worker_internal.h
 *		The flow worker's state, shared by the modules of the worker/ folder
 *		(types only; each module's functions are in its own header):
 *
 *	worker.c		its loop: poll, run a batch, act on how it ended, relay,
 *					periodic work
 *	worker_start.c	its start: load, connect, assign partitions (and those
 *					added to the topic later)
 *	batch.c			the pipeline of one batch: decode -> transform -> operator ->
 *					write -> dead letters and notify -> offsets -> commit
 *	stateful.c		the operator stage, event time, checkpoints and their restore
 *	isolate.c		finding the bad messages (or rows) of a failed stage by halving
 *	dead_letter.c	setting a message or row aside, and writing sdp.dead_letters
 *	skip.c			the messages the flow's owner asked it to skip
 *	tombstone.c		tombstones that delete
 *	offsets.c		the offsets stored with the rows
 *	worker_slot.c	what it publishes in its slot; its waits; its end
 *
 * Calls go down this list, never up (batch.c calls none of worker.c or
 * worker_start.c, stateful.c none of batch.c, ...; isolate.c's stage
 * callbacks are the one documented way back), and out of the folder to kafka/,
 * stateful/, exec/, decl/ and shmem/.  The launcher sees none of this: it
 * includes worker_args.h.
 */
#ifndef SDP_WORKER_H
#define SDP_WORKER_H

#include "sdp.h"
#include "worker/worker_args.h"

#include <librdkafka/rdkafka.h>

#include "executor/spi.h"
#include "storage/latch.h"

#include "decl/flow.h"
#include "kafka/relay.h"
#include "kafka/kafka_source.h"
#include "kafka/schema_registry.h"
#include "shmem/metrics.h"
#include "stateful/operator.h"
#include "exec/table_write.h"
#include "prepare/flow_prepare.h"
#include "stateful/state_store.h"
#include "shmem/slots.h"

/* A message set aside: where it came from and why. */
typedef struct DeadLetter
{
	rd_kafka_message_t *msg;
	const char *stage;
	char	   *error;
	int			sqlstate;
	char	   *row_text;		/* an operator's row that could not be written (msg is NULL) */
} DeadLetter;

/* A message, by where it is in the topic. */
typedef struct SdpMessageId
{
	int32		partition;
	int64		offset;
} SdpMessageId;

/* One batch of messages, from poll to commit. */
typedef struct Batch
{
	int			nmsgs;
	rd_kafka_message_t **msgs;
	int			nrows;			/* decoded messages */
	HeapTuple  *rows;
	int		   *row_msg;		/* rows[i] came from msgs[row_msg[i]] */
	List	   *dead;			/* DeadLetter *, in offset order per stage */
	int64		rows_out;		/* rows the transform produced */
	int64		rows_written;
	int64		rows_skipped;
	int64		rows_late;		/* set aside by the operator as late */
	int64		read_us;		/* Unix time (us) when the batch was taken */
	bool		decoded;		/* decoding happens once, in the first attempt that gets through it */
	bool		decode_raised;	/* a message raised while decoding at once: isolate them */
	int			ndead_decode;	/* the first entries of dead are decode failures */
	int64	   *next;			/* per assigned partition: next offset once committed */
	bool		checkpointed;	/* a stateful flow's checkpoint committed with it */
	List	   *suspected;		/* SdpMessageId: messages that failed alone, not for their data, in the last attempt */
	int			world_errcode;	/* the SQLSTATE of the attempt at once, when a row may cause it but not its data: probed before isolating */
	bool	   *row_tomb;		/* rows[i] is a tombstone to delete (on_tombstone = delete) */
	int64		rows_tomb;		/* tombstone rows applied */
	bool	   *skip_msg;		/* msgs[i] is to be skipped; NULL when none is */
	List	   *skipped;		/* DeadLetter *: those messages, dead-lettered whatever on_error says */
	bool		backfill;		/* rows of the flow's backfill (backfill.c), not messages read from Kafka */
} Batch;

typedef struct SdpStatefulState SdpStatefulState;
typedef struct SdpSkips SdpSkips;
typedef struct SdpBackfill SdpBackfill;

/*
 * The partitions a worker consumes (sdp_worker_owns_partition), sorted, and
 * the next offset of each as committed; offsets.c adds to it.
 */
typedef struct SdpPartitionSet
{
	int			n;
	int32	   *ids;			/* sorted */
	int64	   *next;			/* per partition: next offset to read (committed) */
	int			max_id;
	int		   *index;			/* partition id -> index, -1 if not assigned */
	int			topic_n;		/* the topic's partitions, as last listed */
} SdpPartitionSet;

/*
 * A flow worker: what the launcher passed it, its slot, its memory, its
 * declaration, and its stages' handles (each stage's state is its own,
 * behind the pointer: KafkaSource, KafkaRelay, SdpStatefulState, SdpSkips).
 * The loop's own state is file-static in worker.c.
 */
typedef struct FlowWorker
{
	SdpWorkerArgs args;
	SdpFlowSlot *slot;
	MemoryContext flow_cxt;		/* the flow's definition and plans: worker lifetime */
	MemoryContext batch_cxt;	/* reset after every batch */
	MemoryContext periodic_cxt;	/* reset after every round of periodic_work */

	/* the declaration, as sdp.flows has it, and what it runs */
	SdpSourceDef source;
	SdpSinkDef	sink_def;		/* name NULL: the flow writes into its target table */
	SdpFlowOptions opts;
	char	   *schema_text;
	char	   *transform_sql;
	char	   *operator_name;
	char	   *target_name;
	Oid			target;			/* the target table, or sdp.outbox for a flow with a sink */
	uint64		config_generation;	/* the slot's when the declaration was read: a change reloads it */
	SdpFlowPrepared prep;		/* checked and prepared as its declaration was (prepare/flow_prepare.c) */

	/* its stages */
	KafkaSource *kafka;			/* the consumer (kafka/kafka_source.c) */
	SdpRegistry *registry;		/* the source's schema registry, or NULL (kafka/schema_registry.c) */
	SdpRegistry *sink_registry; /* an Avro sink's, or NULL */
	SdpPartitionSet parts;		/* its partitions and their committed offsets (offsets.c) */
	SdpStatefulState *stateful; /* the operator stage (stateful.c), NULL for a stateless flow */
	KafkaRelay *relay;			/* a sink flow's relay of the rows this worker writes (kafka/relay.c) */
	SdpSkips   *skips;			/* the skip requests (skip.c) */
	SdpBackfill *backfill;		/* a backfill to run before reading Kafka (backfill.c), or NULL */
	SdpMetrics	metrics;		/* the latencies of its batches, until the next progress report */
} FlowWorker;


/*
 * Kafka's timestamp of a message (milliseconds), as rd_kafka_message_timestamp
 * gives it; a backfill row (backfill.h), which librdkafka never saw, has none.
 */
static inline int64
sdp_message_timestamp(const rd_kafka_message_t *m, rd_kafka_timestamp_type_t *tstype)
{
	if (m->rkt == NULL)
	{
		*tstype = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
		return -1;
	}
	return rd_kafka_message_timestamp(m, tstype);
}

#endif							/* SDP_WORKER_H */

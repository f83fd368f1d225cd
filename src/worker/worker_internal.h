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

/* A message the flow's owner asked the flow to skip (sdp.skipped_messages). */
typedef struct SdpSkip
{
	int32		partition;
	int64		offset;
	char	   *requested_by;
} SdpSkip;

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
	bool	   *row_tomb;		/* rows[i] is a tombstone to delete (on_tombstone = delete) */
	int64		rows_tomb;		/* tombstone rows applied */
	bool	   *skip_msg;		/* msgs[i] is to be skipped; NULL when none is */
	List	   *skipped;		/* DeadLetter *: those messages, dead-lettered whatever on_error says */
} Batch;

typedef struct FlowWorker
{
	SdpWorkerArgs args;
	SdpFlowSlot *slot;
	MemoryContext flow_cxt;		/* the flow's definition and plans: worker lifetime */
	MemoryContext batch_cxt;	/* reset after every batch */
	MemoryContext periodic_cxt;	/* reset after every round of periodic_work */

	SdpSourceDef source;
	SdpFlowOptions opts;
	SdpFlowPrepared prep;		/* what it runs, checked and prepared as its declaration was (prepare/flow_prepare.c) */
	char	   *schema_text;
	char	   *transform_sql;
	char	   *operator_name;
	char	   *target_name;
	Oid			target;
	SPIPlanPtr	user_plan;

	SPIPlanPtr	offsets_plan;		/* UPDATE: every batch */
	SPIPlanPtr	offsets_insert_plan;	/* INSERT: partitions newly assigned */
	SPIPlanPtr	dead_letter_plan;
	SPIPlanPtr	notify_plan;	/* option notify */

	/* stateful flows (stateful.c) */
	SdpOperatorContext *opctx;
	SdpStateStore *store;
	size_t		state_limit;
	SPIPlanPtr	checkpoint_put_plan;
	SPIPlanPtr	checkpoint_delete_plan;
	SPIPlanPtr	checkpoint_offsets_plan;
	TimestampTz next_checkpoint;
	bool		offsets_moved;	/* since the last checkpoint */
	bool		checkpoint_deferred;	/* a due checkpoint left to the batch after one that emitted */
	bool		state_mutated;	/* in a batch, the operator has changed state */
	char	   *flow_fault;		/* in a batch, an error that fails the flow, not a message (check_ownership) */
	SPIPlanPtr	checkpoint_watermark_plan;
	uint64		config_generation;
	bool		partitioned_state;	/* the catalog records keys' partitions (0.3 and later) */
	HTAB	   *batch_owners;	/* workers > 1: key -> partition claimed by this attempt's rows */
	SdpStateStore **sibling;	/* workers > 1: the other workers' stores, attached to read owners */
	dsa_handle *sibling_area;	/* ... and the areas they are */

	/* event time: per partition id, the highest event time seen and when data last came */
	int			event_time_index;	/* in the input schema, -1 when none */
	int			nwm;
	TimestampTz *wm_max;		/* highest event time seen, DT_NOBEGIN: none yet */
	TimestampTz *wm_last;		/* when data last came (or when the partition was first seen) */
	int64	   *wm_pos;			/* next offset, as far as this worker has read */
	TimestampTz wm_last_data;	/* when data last came on any partition */

	/* a sink flow: its rows go to sdp.outbox (kafka/outbox.c), and the relay produces them (kafka/relay.c) */
	SdpSinkDef	sink_def;		/* name NULL: the flow writes into its target table */
	KafkaRelay *relay;			/* of the rows this worker writes (its worker number's) */
	List	   *orphan_relays;	/* KafkaRelay: of rows left by workers of an earlier, larger layout */
	bool		relay_pending;	/* the outbox may hold rows not produced */
	bool		relay_draining; /* relay the blocking way (kafka_relay_drain): at start, after an error */
	int64		relay_wait_seq; /* at start: other workers' rows up to this seq go first, 0: none */
	int			relay_backoff_ms;	/* the relay could not write the sink: wait this long */

	KafkaSource *kafka;
	int			topic_partitions;	/* of the topic, as last listed */
	int			npartitions;	/* this worker's (sdp_worker_owns_partition) */
	int			share_missing;	/* partitions of its share the topic does not have (yet) */
	bool		topic_missing;	/* the broker answers but no longer has the topic (deleted) */
	TimestampTz topic_returned_at;	/* ... and it had, then had it again (created again): when */
	TimestampTz topic_gone_at;	/* when the flow's status said it was gone */
	int32	   *partitions;		/* sorted */
	int64	   *next_offset;	/* per partition: next offset to read (committed) */
	int			max_partition_id;
	int		   *partition_index;	/* partition id -> index, -1 if not assigned */

	rd_kafka_message_t **poll_buf;
	WaitEventSet *wait_set;		/* latch, the source's queue, postmaster death (, the relay's producer) */
	SdpMetrics	metrics;

	TimestampTz next_progress;
	TimestampTz next_watermarks;
	TimestampTz next_partition_refresh;
	TimestampTz next_broker_probe;
	int64		fetcher_wakes;	/* how often it woke the fetcher */
	bool		committed_once; /* a batch of this worker has committed */
	/* waiting for a broker to answer (sdp_worker_wait_for_broker): since when, last logged, the state before */
	TimestampTz broker_wait_since;
	TimestampTz broker_wait_logged;
	int			broker_wait_state;
	int			error_backoff_ms;

	/* skip requests (skip.c), sorted by partition and offset */
	bool		skip_table;		/* sdp.skipped_messages exists (a 0.2 catalog) */
	uint64		skip_generation;	/* the slot's skip_generation when they were read */
	bool		skips_pending;	/* the slot's has moved on: read them again */
	MemoryContext skip_cxt;
	int			nskips;
	SdpSkip    *skips;
} FlowWorker;


#endif							/* SDP_WORKER_H */

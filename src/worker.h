/*
 * worker.h
 *		The flow worker's state, shared by the modules of its batch path:
 *
 *	worker.c		its life and its loop: start, load, wait, retry, fail, restart
 *	batch.c			the pipeline of one batch: decode -> transform -> operator ->
 *					write -> dead letters and notify -> offsets -> commit
 *	isolate.c		finding the bad messages (or rows) of a failed stage by halving
 *	dead_letter.c	setting a message or row aside, and writing sdp.dead_letters
 *	offsets.c		partition assignment and the offsets stored with the rows
 *	skip.c			the messages the flow's owner asked it to skip
 *	kafka_sink.c	a sink flow's relay from its outbox to its Kafka topic
 *	stateful.c		the operator stage, event time, checkpoints and their restore
 *
 * The launcher sees none of this: it includes worker_args.h.
 */
#ifndef SDP_WORKER_H
#define SDP_WORKER_H

#include "sdp.h"
#include "worker_args.h"

#include <librdkafka/rdkafka.h>

#include "executor/spi.h"
#include "storage/latch.h"

#include "flow.h"
#include "kafka_sink.h"
#include "kafka_source.h"
#include "metrics.h"
#include "operator.h"
#include "pipeline.h"
#include "state_store.h"

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
	SdpInputSchema *schema;
	char	   *schema_text;
	char	   *transform_sql;
	char	   *operator_name;
	char	   *target_name;
	Oid			target;
	SdpTransform transform;
	SdpSink		sink;
	TupleDesc	rows_desc;		/* the flow's own transform's rows (an operator may build the transform run) */
	SPIPlanPtr	user_plan;

	SPIPlanPtr	offsets_plan;		/* UPDATE: every batch */
	SPIPlanPtr	offsets_insert_plan;	/* INSERT: partitions newly assigned */
	SPIPlanPtr	dead_letter_plan;
	SPIPlanPtr	notify_plan;	/* option notify */
	SPIPlanPtr	tombstone_plan;	/* on_tombstone = delete: DELETE ... WHERE key = ANY ($1) */
	bool		want_headers;	/* build kafka_headers (something may read it) */
	int			unread_meta;	/* bit SDP_META_x: a stateless flow's transform does not read that column, left null */

	/* stateful flows (stateful.c) */
	const SdpOperator *op;
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

	/* a sink flow (kafka_sink.c): its rows go to sdp.outbox, and the relay produces them */
	SdpSinkDef	sink_def;		/* name NULL: the flow writes into its target table */
	KafkaRelay *relay;			/* of the rows this worker writes (its worker number's) */
	List	   *orphan_relays;	/* KafkaRelay: of rows left by workers of an earlier, larger layout */
	bool		outbox_tagged;	/* sdp.outbox has column worker (0.5) */
	bool		outbox_skips;	/* sdp.outbox has column skipped_by (0.7) */
	TupleDesc	emitted_desc;	/* a stateful sink flow: the operator's rows (blessed) */
	int			sink_key_attno; /* ... and the sink_key column in them, 0: none */
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


/* worker.c */
extern int64 sdp_unix_now_us(void);
extern void sdp_worker_set_error(FlowWorker *w, const char *message);
extern void sdp_worker_set_broker(FlowWorker *w, bool ok, const char *error);
extern void sdp_worker_wait(FlowWorker *w, long timeout_ms);
extern void sdp_worker_wait_for_broker(FlowWorker *w, const char *what, const char *error);
extern void sdp_worker_broker_answered(FlowWorker *w);

#endif							/* SDP_WORKER_H */

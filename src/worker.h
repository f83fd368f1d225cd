/*
 * worker.h
 *		The flow worker's internals, shared by worker.c (its life and loop),
 *		batch.c (a batch, from decode to commit) and stateful.c (operators,
 *		checkpoints and timers).  Also what the launcher passes to a worker.
 */
#ifndef SDP_WORKER_H
#define SDP_WORKER_H

#include "sdp.h"

#include <librdkafka/rdkafka.h>

#include "executor/spi.h"
#include "storage/latch.h"

#include "flow.h"
#include "kafka_source.h"
#include "metrics.h"
#include "operator.h"
#include "pipeline.h"
#include "state_store.h"

/* Passed in BackgroundWorker.bgw_extra (at most BGW_EXTRALEN bytes). */
typedef struct SdpWorkerArgs
{
	int			slotno;
	Oid			dboid;
	Oid			owner;
	int64		flow_id;
	char		name[NAMEDATALEN];
} SdpWorkerArgs;

StaticAssertDecl(sizeof(SdpWorkerArgs) <= 128, "SdpWorkerArgs must fit in bgw_extra");

/* A message set aside: where it came from and why. */
typedef struct DeadLetter
{
	rd_kafka_message_t *msg;
	const char *stage;
	char	   *error;
	int			sqlstate;
	char	   *row_text;		/* an operator's row that could not be written (msg is NULL) */
} DeadLetter;

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
	bool		decoded;		/* decoding happens once, in the first attempt */
	int			ndead_decode;	/* the first entries of dead are decode failures */
} Batch;

typedef struct FlowWorker
{
	SdpWorkerArgs args;
	SdpFlowSlot *slot;
	MemoryContext flow_cxt;		/* the flow's definition and plans: worker lifetime */
	MemoryContext batch_cxt;	/* reset after every batch */

	SdpSourceDef source;
	SdpFlowOptions opts;
	SdpInputSchema *schema;
	char	   *schema_text;
	char	   *transform_sql;
	char	   *operator_name;
	char	   *target_name;
	char	   *owner_name;
	Oid			target;
	SdpTransform transform;
	SdpSink		sink;
	TupleDesc	rows_desc;		/* the flow's own transform's rows (an operator may build the transform run) */
	SPIPlanPtr	user_plan;

	SPIPlanPtr	offsets_plan;		/* UPDATE: every batch */
	SPIPlanPtr	offsets_insert_plan;	/* INSERT: partitions newly assigned */
	SPIPlanPtr	dead_letter_plan;
	SPIPlanPtr	notify_plan;	/* option notify */

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
	bool		state_mutated;	/* in a batch, the operator has changed state */
	SPIPlanPtr	checkpoint_watermark_plan;
	uint64		config_generation;

	/* event time: per partition id, the highest event time seen and when data last came */
	int			event_time_index;	/* in the input schema, -1 when none */
	int			nwm;
	TimestampTz *wm_max;		/* highest event time seen, DT_NOBEGIN: none yet */
	TimestampTz *wm_last;		/* when data last came (or when the partition was first seen) */
	int64	   *wm_pos;			/* next offset, as far as this worker has read */
	TimestampTz wm_last_data;	/* when data last came on any partition */

	KafkaSource *kafka;
	int			npartitions;
	int32	   *partitions;		/* sorted */
	int64	   *next_offset;	/* per partition: next offset to read (committed) */
	int			max_partition_id;
	int		   *partition_index;	/* partition id -> index, -1 if not assigned */

	rd_kafka_message_t **poll_buf;
	WaitEventSet *wait_set;
	SdpMetrics	metrics;

	TimestampTz next_progress;
	TimestampTz next_watermarks;
	TimestampTz next_partition_refresh;
	TimestampTz next_broker_probe;
	int			error_backoff_ms;
} FlowWorker;


/* worker.c */
extern int64 sdp_unix_now_us(void);
extern void sdp_worker_set_error(FlowWorker *w, const char *message);
extern void sdp_worker_fail(FlowWorker *w, const char *message) pg_attribute_noreturn();
extern void sdp_store_offsets(FlowWorker *w, int n, const int32 *partitions, const int64 *offsets, bool fresh);

/* batch.c */
extern bool sdp_is_data_error(int sqlerrcode);
extern ErrorData *sdp_run_isolated(void (*step) (void *arg), void *arg);
extern void sdp_decode_batch(FlowWorker *w, Batch *b);
extern void sdp_write_dead_letters(FlowWorker *w, Batch *b);
extern void sdp_write_batch_offsets(FlowWorker *w, Batch *b, int64 *new_next);
extern void sdp_next_offsets(FlowWorker *w, Batch *b, int64 *new_next);
extern void sdp_notify_rows(FlowWorker *w, int64 rows);
extern void sdp_process_batch(FlowWorker *w, Batch *b);
extern void sdp_account_batch(FlowWorker *w, Batch *b, int64 *new_next, int64 decode_dead);

/* stateful.c */
extern void sdp_stateful_start(FlowWorker *w, Relation target);
extern void sdp_stateful_prepare_plans(FlowWorker *w);
extern void sdp_stateful_restore(FlowWorker *w);
extern void sdp_stateful_process_batch(FlowWorker *w, Batch *b, int64 *new_next);
extern void sdp_stateful_tick(FlowWorker *w);
extern void sdp_stateful_reload_if_changed(FlowWorker *w);
extern TimestampTz sdp_stateful_next_wakeup(FlowWorker *w);

#endif							/* SDP_WORKER_H */

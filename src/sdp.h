/*
 * sdp.h
 *		Declarations shared by the modules of sdp_ext.
 *
 * Module map (the src/ listing reads as the architecture):
 *
 *	sdp_main.c		_PG_init: GUCs, shared memory hooks, the launcher's registration
 *	shmem.c			the flow slots in shared memory (state, counters, progress)
 *	launcher.c		static background worker: starts, stops, restarts flow workers;
 *					deletes dead letters past their retention
 *	catalog.c		reads and writes the sdp.* catalog tables on the extension's behalf
 *	api.c			SQL-callable declaration functions (sources and flows)
 *	roles.c			owners by OID: DROP ROLE, REASSIGN OWNED, DROP OWNED (ProcessUtility hook)
 *	status.c		SQL-callable monitoring (flow status, progress)
 *	worker.c		the flow worker's life and loop (worker_args.h: what the launcher passes it)
 *	batch.c			one batch's pipeline: decode, transform, operate, write, offsets, commit
 *	isolate.c		finding a failed stage's bad messages or rows by halving
 *	dead_letter.c	messages and rows set aside; sdp.dead_letters
 *	offsets.c		partition assignment and the offsets stored with the rows
 *	stateful.c		the operator stage, event time, checkpoints and restore
 *	operator.c		the stateful operator interface; operators/ holds the operators
 *	state_store.c	keyed operator state in shared memory (DSA + dshash)
 *	kafka_client.c	every librdkafka client of the process (none left running into exit())
 *	kafka_source.c	librdkafka consumer of one flow
 *	kafka_properties.c	which librdkafka properties and broker hosts a role may use
 *	kafka_sink.c	a sink flow's outbox, and its relay to Kafka with a transactional producer
 *	json_decode.c	JSON payload -> tuple of the flow's input schema
 *	input_schema.c	the declared input schema and the relation "input"
 *	sink.c			the target write: multi-insert as COPY does, or the INSERT plan
 *	metrics.c		latency samples and their percentiles
 */
#ifndef SDP_H
#define SDP_H

#include "postgres.h"

#include "access/xact.h"
#include "datatype/timestamp.h"
#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#define SDP_EXTENSION_NAME		"sdp_ext"
#define SDP_SCHEMA				"sdp"

/* Upper bound on partitions of one flow worker shown in shared memory. */
#define SDP_MAX_PARTITIONS		1024
#define SDP_ERROR_LEN			512
/* what other roles see in place of a flow's error text (as in pg_stat_activity) */
#define SDP_INSUFFICIENT_PRIVILEGE	"<insufficient privilege>"
/* Flows waiting for free slots (past sdp.max_flows) that sdp.flow_status names. */
#define SDP_MAX_WAITING			64
/* Roles owning flows or sources that the launcher publishes for DROP ROLE in other databases. */
#define SDP_MAX_OWNERS			256
/* Upper bound of the flow option workers. */
#define SDP_MAX_WORKERS			64
/* Default of the flow option statement_timeout: a batch's statements that run longer are cancelled. */
#define SDP_DEFAULT_STATEMENT_TIMEOUT_MS	60000

/* GUCs (sdp_main.c) */
extern char *sdp_database;
extern int	sdp_max_flows;
extern int	sdp_launcher_naptime_ms;
extern int	sdp_default_max_batch_rows;
extern int	sdp_default_state_memory_limit_kb;
extern int	sdp_dead_letter_retention_s;
extern int	sdp_dead_letter_prune_interval_s;

/*
 * The life of a flow, as shown in sdp.flow_status.  STOPPED and FAILED are
 * also persisted in sdp.flows (enabled = false / failed_at set), so they
 * survive a server restart; the others exist only while a worker slot does.
 */
typedef enum SdpFlowState
{
	SDP_FLOW_STOPPED = 0,		/* not wanted (enabled = false) */
	SDP_FLOW_STARTING,			/* worker registered, not yet consuming */
	SDP_FLOW_RUNNING,			/* consuming and committing */
	SDP_FLOW_STOPPING,			/* asked to stop, worker still alive */
	SDP_FLOW_RESTARTING,		/* worker exited unexpectedly, waiting out backoff */
	SDP_FLOW_FAILED,			/* stopped by an error; needs sdp_start_flow */
	SDP_FLOW_RETRYING			/* running, but its batch failed for a reason not its messages': waiting to try again */
} SdpFlowState;

extern const char *sdp_flow_state_name(SdpFlowState state);

/* Latency percentiles of one kind over one reporting interval, in ms. */
typedef struct SdpPercentiles
{
	double		p0;
	double		p50;
	double		p90;
	double		p95;
	double		p99;
	int64		samples;
} SdpPercentiles;

/*
 * A histogram of latencies in ms (metrics.c): SDP_HISTOGRAM_STEPS buckets
 * per power of two from 1/1024 ms, and the exact extremes.
 */
#define SDP_HISTOGRAM_STEPS		32
#define SDP_HISTOGRAM_BUCKETS	(32 * SDP_HISTOGRAM_STEPS)
typedef struct SdpLatencyHistogram
{
	int64		count;
	double		min;
	double		max;
	uint32		buckets[SDP_HISTOGRAM_BUCKETS];
} SdpLatencyHistogram;

/*
 * The latest progress report of a flow worker (Spark's
 * StreamingQueryProgress); a flow's is the sum of its workers'.
 */
typedef struct SdpProgress
{
	int64		report_id;		/* 0 = no report yet */
	TimestampTz timestamp;		/* end of the interval */
	double		interval_s;
	int64		batches;
	int64		input_rows;
	int64		output_rows;
	double		input_rows_per_s;
	double		processed_rows_per_s;
	double		batch_ms_avg;
	double		batch_ms_total;
	int64		max_batch_rows;
	int64		fetcher_wakes;	/* since the worker started: wake_fetcher_if_behind */
	SdpPercentiles processing;	/* read from Kafka -> committed */
	SdpPercentiles queuing;		/* Kafka timestamp -> read */
	SdpPercentiles e2e;			/* Kafka timestamp -> committed */
	SdpLatencyHistogram processing_hist;	/* what the percentiles are read from */
	SdpLatencyHistogram queuing_hist;
	SdpLatencyHistogram e2e_hist;
} SdpProgress;

typedef struct SdpPartitionStat
{
	int32		partition;
	int64		committed;		/* next offset to read, as committed in PG */
	int64		high_watermark; /* as last seen from the broker, -1 unknown */
} SdpPartitionStat;

/*
 * One flow worker's slot in shared memory: a flow with the option workers
 * = N has N slots of the same name, worker_no 0 .. N-1, each worker
 * consuming its own partitions.
 *
 * Locking: SdpShared->lock (exclusive) guards allocating and freeing slots,
 * i.e. in_use, name, worker_no and nworkers; readers that look a slot up by name hold it shared.
 * Everything else in a slot is guarded by its spinlock 'mutex': the worker
 * updates its counters and state under it, readers copy the slot out under
 * it and format the copy.  Nobody holds the spinlock across anything but
 * plain memory copies.
 */
typedef struct SdpFlowSlot
{
	/* guarded by SdpShared->lock */
	bool		in_use;
	char		name[NAMEDATALEN];
	int			worker_no;		/* which of the flow's workers: 0 .. nworkers - 1 */
	int			nworkers;		/* the flow's workers when the slot was allocated */
	int32		decl_hash;		/* and a hash of its declaration (schema, transform, options) */

	/* guarded by mutex */
	slock_t		mutex;
	SdpFlowState state;
	pid_t		pid;			/* worker pid, 0 when none */
	int64		flow_id;		/* sdp.flows.id of the flow the launcher started */
	Oid			owner;			/* the role the launcher started its worker as: who may read last_error */
	bool		stop_requested; /* the launcher asks the worker to exit (SetLatch on latch) */
	uint64		generation;		/* bumped on each worker start */
	TimestampTz registered_at;
	TimestampTz started_at;
	TimestampTz exited_at;
	TimestampTz next_start_at;	/* RESTARTING: when the launcher retries */
	int			restarts;		/* consecutive unexpected exits */
	bool		exit_expected;	/* the worker stopped on request or failed */

	uint64		messages_read;
	uint64		rows_written;
	uint64		rows_filtered;
	uint64		rows_dead_lettered;
	uint64		rows_skipped;
	uint64		rows_late;
	uint64		batches;
	TimestampTz last_commit_at;

	bool		broker_ok;
	char		broker_error[SDP_ERROR_LEN];
	TimestampTz broker_error_at;

	char		last_error[SDP_ERROR_LEN];
	TimestampTz last_error_at;

	SdpProgress progress;

	/* stateful flows: where their state store is, and how it is doing */
	uint32		state_area;		/* dsa_handle, 0 when none */
	uint64		state_table;	/* dshash_table_handle */
	uint64		state_bytes;
	uint64		timers_fired;
	TimestampTz last_checkpoint_at;
	TimestampTz watermark;		/* event-time operators; 0 when none */
	uint64		config_generation;	/* bumped when the flow's operator configuration changes */
	uint64		skip_generation;	/* bumped when a skip request for the flow commits (sdp_skip_message) */
	Latch	   *latch;			/* the worker's, to wake it */

	int			npartitions;
	SdpPartitionStat partitions[SDP_MAX_PARTITIONS];
} SdpFlowSlot;

typedef struct SdpShared
{
	LWLock	   *lock;
	int			state_tranche_id;	/* LWLock tranche of the flows' state stores */
	pid_t		launcher_pid;
	Latch	   *launcher_latch; /* the launcher's PGPROC latch, or NULL */
	int			max_flows;
	/* guarded by lock: enabled flows the launcher found no free slot for (the first SDP_MAX_WAITING) */
	int			nwaiting;
	char		waiting[SDP_MAX_WAITING][NAMEDATALEN];
	int			waiting_workers[SDP_MAX_WAITING];	/* the slots each needs */
	/*
	 * guarded by lock: the roles owning flows or sources in sdp.database and
	 * how many, as the launcher last read them; DROP ROLE run in another
	 * database reads them (roles.c).  owners_overflow: more roles than fit.
	 */
	bool		owners_published;
	bool		owners_overflow;
	int			nowners;
	Oid			owners[SDP_MAX_OWNERS];
	int32		owner_objects[SDP_MAX_OWNERS];
	SdpFlowSlot slots[FLEXIBLE_ARRAY_MEMBER];
} SdpShared;

/* shmem.c */
extern SdpShared *SdpShmem;
extern void sdp_shmem_request(void);
extern void sdp_shmem_startup(void);
extern void sdp_require_shmem(void);
extern int	sdp_slot_find(const char *name);
extern int	sdp_slot_next(const char *name, int after);
extern int	sdp_slot_allocate(const char *name, int worker_no, int nworkers);
extern int	sdp_slots_free(void);
extern void sdp_slot_free(int slotno);
extern void sdp_slot_copy(int slotno, SdpFlowSlot *copy);
extern void sdp_wake_launcher(void);
extern void sdp_wake_launcher_at_commit(void);
extern void sdp_flow_config_changed(const char *flow);
extern void sdp_flow_skips_changed(const char *flow);

/*
 * Begin a transaction in a background worker.  A backend stamps each
 * statement's start before its transaction; a worker must do it itself, or
 * now() in every transaction it runs is the time the worker started.
 */
static inline void
sdp_start_transaction(void)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
}

/*
 * A timestamptz as text, in memory of its own: timestamptz_to_str answers in
 * one static buffer, so two calls in one message would print the same time.
 */
static inline char *
sdp_timestamp_text(TimestampTz t)
{
	return pstrdup(timestamptz_to_str(t));
}

/* metrics.c: what status.c needs to sum the reports of a flow's workers */
extern void sdp_histogram_merge(SdpLatencyHistogram *dst, const SdpLatencyHistogram *src);
extern void sdp_histogram_percentiles(const SdpLatencyHistogram *h, SdpPercentiles *out);
extern void sdp_progress_finish(SdpProgress *p);

/* roles.c */
extern void sdp_install_utility_hook(void);
extern bool sdp_owners_by_oid(void);
extern char *sdp_owner_oid_sql(const char *column);
extern char *sdp_owner_value_sql(const char *param);

/* launcher.c */
extern void sdp_register_launcher(void);
extern PGDLLEXPORT void sdp_launcher_main(Datum main_arg);

#endif							/* SDP_H */

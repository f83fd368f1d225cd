/*
 * worker.c
 *		The flow worker: one dynamic background worker per running flow.
 *
 * Started by the launcher, it connects as the flow's owner and loops:
 *
 *	wait for messages (or its latch) -> take what has arrived (a batch) ->
 *	decode JSON -> run the transform -> write the target -> write the next
 *	offset of every partition -> commit -> record latencies
 *
 * The target rows and the offsets commit in one transaction, which is what
 * makes a flow exactly-once: after any crash the worker seeks to the offsets
 * that committed with the rows, so every message is in the target once.
 *
 * How a batch is processed, and how bad input is set aside, is batch.c's
 * business; operators, timers and checkpoints are stateful.c's.
 */
#include "worker.h"

#include <time.h>

#include "access/relation.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/regproc.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

/* Latency samples kept per progress interval. */
#define SDP_METRICS_CAPACITY	65536
/* How often the worker refreshes partition high watermarks in its slot. */
#define SDP_WATERMARK_REFRESH_MS	500
/* How often it looks for new partitions of its topic. */
#define SDP_PARTITION_REFRESH_MS	30000
/* How often it probes a broker it lost. */
#define SDP_BROKER_PROBE_MS		2000

static FlowWorker *W = NULL;

static void worker_on_exit(int code, Datum arg);
static void worker_load_flow(FlowWorker *w);
static void worker_open_source(FlowWorker *w);
static void worker_loop(FlowWorker *w);

/* Unix time in microseconds, the clock Kafka timestamps use. */
int64
sdp_unix_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void
sdp_flow_worker_main(Datum main_arg)
{
	FlowWorker *w;

	/* SIGTERM (stop, drop) ends the worker at its next CHECK_FOR_INTERRUPTS; an open batch rolls back. */
	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();

	w = MemoryContextAllocZero(TopMemoryContext, sizeof(FlowWorker));
	W = w;
	memcpy(&w->args, MyBgworkerEntry->bgw_extra, sizeof(SdpWorkerArgs));
	w->slot = &SdpShmem->slots[w->args.slotno];
	w->flow_cxt = AllocSetContextCreate(TopMemoryContext, "sdp flow", ALLOCSET_DEFAULT_SIZES);
	w->batch_cxt = AllocSetContextCreate(TopMemoryContext, "sdp batch", ALLOCSET_DEFAULT_SIZES);

	/* Publish our pid; from here on our exit is reported to the launcher. */
	SpinLockAcquire(&w->slot->mutex);
	w->slot->pid = MyProcPid;
	w->slot->latch = MyLatch;
	w->slot->started_at = GetCurrentTimestamp();
	w->slot->state = SDP_FLOW_STARTING;
	SpinLockRelease(&w->slot->mutex);
	before_shmem_exit(worker_on_exit, (Datum) 0);

	/* Run as the flow's owner: its privileges apply to everything the flow reads and writes. */
	BackgroundWorkerInitializeConnectionByOid(w->args.dboid, w->args.owner, 0);
	pgstat_report_appname(psprintf("sdp flow %s", w->args.name));
	SetConfigOption("application_name", psprintf("sdp flow %s", w->args.name),
					PGC_USERSET, PGC_S_SESSION);

	worker_load_flow(w);

	/* Running from here on; a broker that cannot be reached shows as broker_ok = false. */
	SpinLockAcquire(&w->slot->mutex);
	w->slot->state = SDP_FLOW_RUNNING;
	SpinLockRelease(&w->slot->mutex);

	worker_open_source(w);
	ereport(LOG,
			(errmsg("sdp flow \"%s\" consuming topic \"%s\" (%d partitions) into %s",
					w->args.name, w->source.topic, w->npartitions, w->sink.relname)));

	worker_loop(w);
}

/* Report our exit in the slot and wake the launcher, which decides what comes next. */
static void
worker_on_exit(int code, Datum arg)
{
	SdpFlowSlot *slot = W->slot;

	SpinLockAcquire(&slot->mutex);
	slot->pid = 0;
	slot->latch = NULL;
	slot->exited_at = GetCurrentTimestamp();
	SpinLockRelease(&slot->mutex);
	sdp_wake_launcher();
}

/* Record an error in the slot, for sdp.flow_status. */
void
sdp_worker_set_error(FlowWorker *w, const char *message)
{
	SpinLockAcquire(&w->slot->mutex);
	strlcpy(w->slot->last_error, message, SDP_ERROR_LEN);
	w->slot->last_error_at = GetCurrentTimestamp();
	SpinLockRelease(&w->slot->mutex);
}

/*
 * Stop the flow in the failed state: persist the error in sdp.flows (so the
 * launcher does not restart it, even after a server restart) and exit.
 * Called outside any transaction.
 */
void
sdp_worker_fail(FlowWorker *w, const char *message)
{
	SdpCatalogScope scope;
	Oid			argtypes[2] = {INT8OID, TEXTOID};
	Datum		values[2];

	ereport(LOG,
			(errmsg("sdp flow \"%s\" failed: %s", w->args.name, message),
			 errhint("Fix the cause, then run SELECT sdp_start_flow('%s').", w->args.name)));
	sdp_worker_set_error(w, message);

	sdp_start_transaction();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	sdp_catalog_enter(&scope);
	values[0] = Int64GetDatum(w->args.flow_id);
	values[1] = CStringGetTextDatum(message);
	SPI_execute_with_args("UPDATE sdp.flows SET failed_at = now(), last_error = $2 WHERE id = $1",
						  2, argtypes, values, NULL, false, 0);
	sdp_catalog_leave(&scope);
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();

	SpinLockAcquire(&w->slot->mutex);
	w->slot->state = SDP_FLOW_FAILED;
	w->slot->exit_expected = true;
	SpinLockRelease(&w->slot->mutex);
	proc_exit(0);
}

static char *
spi_text(HeapTuple tup, TupleDesc desc, int col)
{
	return SPI_getvalue(tup, desc, col);
}

/*
 * Read the flow's declaration and prepare its plans.  Errors in the
 * declaration (the target was dropped, a privilege revoked) fail the flow
 * with the reason instead of restarting it in a loop.
 */
static void
worker_load_flow(FlowWorker *w)
{
	SdpCatalogScope scope;
	Oid			argtypes[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(w->args.flow_id)};
	MemoryContext oldcxt;
	HeapTuple	tup;
	TupleDesc	desc;
	bool		isnull;
	bool		enabled,
				failed;
	Jsonb	   *flow_options,
			   *source_options;
	char	   *volatile error = NULL;

	/*
	 * The configuration generation, before the snapshot the configuration is
	 * read with: a change committed after this read bumps it again, and the
	 * worker reloads.
	 */
	SpinLockAcquire(&w->slot->mutex);
	w->config_generation = w->slot->config_generation;
	SpinLockRelease(&w->slot->mutex);

	sdp_start_transaction();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "sdp: loading flow");
	w->owner_name = MemoryContextStrdup(w->flow_cxt, GetUserNameFromId(w->args.owner, false));

	sdp_catalog_enter(&scope);
	if (SPI_execute_with_args("SELECT f.source, f.target, f.schema, f.transform, f.operator, f.options, "
							  "       f.enabled, f.failed_at IS NOT NULL, "
							  "       s.bootstrap_servers, s.topic, s.options, s.owner "
							  "  FROM sdp.flows f JOIN sdp.sources s ON s.name = f.source "
							  " WHERE f.id = $1",
							  1, argtypes, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read flow \"%s\"", w->args.name);
	sdp_catalog_leave(&scope);

	if (SPI_processed == 0)
	{
		/* dropped before we started: nothing to do */
		SpinLockAcquire(&w->slot->mutex);
		w->slot->exit_expected = true;
		SpinLockRelease(&w->slot->mutex);
		proc_exit(0);
	}
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;

	oldcxt = MemoryContextSwitchTo(w->flow_cxt);
	w->source.name = spi_text(tup, desc, 1);
	w->target_name = spi_text(tup, desc, 2);
	w->schema_text = spi_text(tup, desc, 3);
	w->transform_sql = spi_text(tup, desc, 4);
	w->operator_name = spi_text(tup, desc, 5);
	flow_options = DatumGetJsonbPCopy(SPI_getbinval(tup, desc, 6, &isnull));
	enabled = DatumGetBool(SPI_getbinval(tup, desc, 7, &isnull));
	failed = DatumGetBool(SPI_getbinval(tup, desc, 8, &isnull));
	w->source.bootstrap_servers = spi_text(tup, desc, 9);
	w->source.topic = spi_text(tup, desc, 10);
	source_options = DatumGetJsonbPCopy(SPI_getbinval(tup, desc, 11, &isnull));
	w->source.owner = spi_text(tup, desc, 12);
	MemoryContextSwitchTo(oldcxt);

	if (!enabled || failed)
	{
		SpinLockAcquire(&w->slot->mutex);
		w->slot->exit_expected = true;
		SpinLockRelease(&w->slot->mutex);
		proc_exit(0);
	}

	/* Everything else runs as the owner, and a declaration error fails the flow. */
	PG_TRY();
	{
		List	   *names;

		oldcxt = MemoryContextSwitchTo(w->flow_cxt);
		sdp_parse_source_options(source_options, &w->source);
		sdp_parse_flow_options(flow_options, &w->opts);
		w->schema = sdp_parse_input_schema(w->schema_text);

		names = stringToQualifiedNameList(w->target_name);
		w->target = RangeVarGetRelid(makeRangeVarFromNameList(names), NoLock, true);
		if (!OidIsValid(w->target))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_TABLE),
					 errmsg("target table %s of the flow does not exist", w->target_name)));

		sdp_transform_prepare(&w->transform, w->schema, w->transform_sql);
		if (w->operator_name)
		{
			/* a stateful flow: the operator's rows, not the transform's, go to the target */
			Relation	rel = relation_open(w->target, AccessShareLock);
			TupleDesc	emitted;

			w->op = sdp_find_operator(w->operator_name);
			if (w->op == NULL)
				ereport(ERROR,
						(errcode(ERRCODE_UNDEFINED_OBJECT),
						 errmsg("operator \"%s\" does not exist", w->operator_name)));
			emitted = w->op->validate(w->transform.result_desc, w->opts.operator_options, rel, &w->opts);
			relation_close(rel, AccessShareLock);
			sdp_sink_prepare(&w->sink, w->target, w->opts.mode, emitted, false);
		}
		else
			sdp_sink_prepare(&w->sink, w->target, w->opts.mode, w->transform.result_desc,
							 w->transform_sql == NULL);
		sdp_sink_check_privileges(&w->sink, GetUserId());
		if (w->transform.plan)
			SPI_keepplan(w->transform.plan);
		SPI_keepplan(w->sink.plan);
		MemoryContextSwitchTo(oldcxt);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(w->flow_cxt);
		edata = CopyErrorData();
		if (ERRCODE_TO_CATEGORY(edata->sqlerrcode) != ERRCODE_SYNTAX_ERROR_OR_ACCESS_RULE_VIOLATION &&
			ERRCODE_TO_CATEGORY(edata->sqlerrcode) != ERRCODE_INVALID_PARAMETER_VALUE &&
			ERRCODE_TO_CATEGORY(edata->sqlerrcode) != ERRCODE_FEATURE_NOT_SUPPORTED)
			PG_RE_THROW();		/* not about the declaration: exit and let the launcher retry */
		FlushErrorState();
		error = edata->message;
	}
	PG_END_TRY();

	if (error == NULL)
	{
		/* The statements the worker runs on the catalogs, prepared once. */
		Oid			off_types[3] = {INT8OID, INT4ARRAYOID, INT8ARRAYOID};
		Oid			dl_types[13] = {TEXTOID, TEXTOID, TEXTOID, INT4OID, INT8OID, TEXTOID,
			TIMESTAMPTZOID, BYTEAOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, INT8OID};

		sdp_catalog_enter(&scope);
		/* offsets rows exist for every assigned partition (assign_partitions), so a batch updates them */
		w->offsets_plan = SPI_prepare("UPDATE sdp.offsets o SET next_offset = u.o, updated_at = now() "
									  "FROM unnest($2, $3) AS u(p, o) "
									  "WHERE o.flow_id = $1 AND o.partition = u.p",
									  3, off_types);
		/* a new partition's state_offset starts where the partition starts, with no state */
		w->offsets_insert_plan = SPI_prepare("INSERT INTO sdp.offsets AS o (flow_id, partition, next_offset, state_offset, updated_at) "
											 "SELECT $1, u.p, u.o, u.o, now() FROM unnest($2, $3) AS u(p, o) "
											 "ON CONFLICT (flow_id, partition) DO UPDATE "
											 "SET next_offset = EXCLUDED.next_offset, updated_at = EXCLUDED.updated_at",
											 3, off_types);
		/* a message replayed after a restart is dead-lettered once */
		w->dead_letter_plan = SPI_prepare("INSERT INTO sdp.dead_letters (flow_id, flow, owner, kafka_topic, kafka_partition, "
										  "kafka_offset, kafka_key, kafka_timestamp, payload, payload_text, stage, error, sqlstate) "
										  "VALUES ($13, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) "
										  "ON CONFLICT (flow_id, kafka_partition, kafka_offset) WHERE kafka_offset IS NOT NULL "
										  "DO NOTHING",
										  13, dl_types);
		if (w->offsets_plan == NULL || w->offsets_insert_plan == NULL || w->dead_letter_plan == NULL)
			elog(ERROR, "could not prepare catalog statements: %s", SPI_result_code_string(SPI_result));
		SPI_keepplan(w->offsets_plan);
		SPI_keepplan(w->offsets_insert_plan);
		SPI_keepplan(w->dead_letter_plan);
		if (w->opts.notify_channel)
		{
			Oid			ntypes[2] = {TEXTOID, TEXTOID};

			w->notify_plan = SPI_prepare("SELECT pg_notify($1, $2)", 2, ntypes);
			if (w->notify_plan == NULL)
				elog(ERROR, "could not prepare NOTIFY: %s", SPI_result_code_string(SPI_result));
			SPI_keepplan(w->notify_plan);
		}
		if (w->op)
			sdp_stateful_prepare_plans(w);
		sdp_catalog_leave(&scope);

		/* the operator and its state store (the operator reads the catalogs: inside the transaction) */
		if (w->op)
			sdp_stateful_start(w, NULL);
	}

	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);

	if (error)
		sdp_worker_fail(w, error);

	/* Safe because offsets commit with the rows: a crash loses a suffix of both. */
	SetConfigOption("synchronous_commit", w->opts.synchronous_commit, PGC_USERSET, PGC_S_SESSION);
}

/*
 * Store the next offsets of partitions; runs inside a transaction with SPI
 * connected.  'fresh' partitions get their row; the others already have one
 * and are updated, which also proves the flow still exists: if it was
 * dropped meanwhile (its offsets rows cascade away), the batch fails and
 * nothing of it commits.
 */
void
sdp_store_offsets(FlowWorker *w, int n, const int32 *partitions, const int64 *offsets, bool fresh)
{
	MemoryContext cxt = CurrentMemoryContext;
	SdpCatalogScope scope;
	Datum		values[3];
	Datum	   *pd = palloc(sizeof(Datum) * n);
	Datum	   *od = palloc(sizeof(Datum) * n);
	int			rc;

	for (int i = 0; i < n; i++)
	{
		pd[i] = Int32GetDatum(partitions[i]);
		od[i] = Int64GetDatum(offsets[i]);
	}
	values[0] = Int64GetDatum(w->args.flow_id);
	values[1] = PointerGetDatum(construct_array(pd, n, INT4OID, 4, true, TYPALIGN_INT));
	values[2] = PointerGetDatum(construct_array(od, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	sdp_catalog_enter(&scope);
	rc = SPI_execute_plan(fresh ? w->offsets_insert_plan : w->offsets_plan, values, NULL, false, 0);
	MemoryContextSwitchTo(cxt);
	sdp_catalog_leave(&scope);
	if (rc != (fresh ? SPI_OK_INSERT : SPI_OK_UPDATE))
		elog(ERROR, "could not store offsets: %s", SPI_result_code_string(rc));
	if (SPI_processed != (uint64) n)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("flow \"%s\" was dropped", w->args.name)));
}

/* Show the assigned partitions and their committed offsets in the slot. */
static void
publish_partitions(FlowWorker *w)
{
	int			n = Min(w->npartitions, SDP_MAX_PARTITIONS);

	SpinLockAcquire(&w->slot->mutex);
	w->slot->npartitions = n;
	for (int i = 0; i < n; i++)
	{
		w->slot->partitions[i].partition = w->partitions[i];
		w->slot->partitions[i].committed = w->next_offset[i];
		w->slot->partitions[i].high_watermark = -1;
	}
	SpinLockRelease(&w->slot->mutex);
}

static void
set_broker_state(FlowWorker *w, bool ok, const char *error)
{
	SpinLockAcquire(&w->slot->mutex);
	w->slot->broker_ok = ok;
	if (error)
	{
		strlcpy(w->slot->broker_error, error, SDP_ERROR_LEN);
		w->slot->broker_error_at = GetCurrentTimestamp();
	}
	SpinLockRelease(&w->slot->mutex);
}

/*
 * Start consuming new partitions (all of them at start): from the offsets
 * committed in sdp.offsets, else from the topic's start or end
 * (starting_offsets), which are then stored at once so that a restart
 * before the first message resumes from the same place.
 */
static void
assign_partitions(FlowWorker *w, int n, int32 *partitions)
{
	MemoryContext oldcxt;
	int32	   *fresh = palloc(sizeof(int32) * n);
	int64	   *fresh_off = palloc(sizeof(int64) * n);
	int			nfresh = 0;
	int			total;
	int32	   *all_parts;
	int64	   *all_offs;
	Oid			argtypes[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(w->args.flow_id)};
	SdpCatalogScope scope;

	sdp_start_transaction();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());

	sdp_catalog_enter(&scope);
	/* a stateful flow resumes where its checkpointed state was taken */
	SPI_execute_with_args(w->op ? "SELECT partition, coalesce(state_offset, next_offset) FROM sdp.offsets WHERE flow_id = $1"
						  : "SELECT partition, next_offset FROM sdp.offsets WHERE flow_id = $1",
						  1, argtypes, values, NULL, true, 0);
	sdp_catalog_leave(&scope);

	for (int i = 0; i < n; i++)
	{
		bool		known = false;
		bool		isnull;

		if (partitions[i] <= w->max_partition_id && w->partition_index &&
			w->partition_index[partitions[i]] >= 0)
			continue;			/* already consuming it */
		for (uint64 r = 0; r < SPI_processed; r++)
		{
			if (DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1, &isnull)) == partitions[i])
			{
				fresh_off[nfresh] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 2, &isnull));
				known = true;
			}
		}
		if (!known)
		{
			int64		lo,
						hi;
			char	   *error;

			while (!kafka_source_query_watermarks(w->kafka, partitions[i], &lo, &hi, 5000, &error))
			{
				set_broker_state(w, false, error);
				/* wait a little, staying responsive to stop requests */
				(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
								 1000, PG_WAIT_EXTENSION);
				ResetLatch(MyLatch);
				CHECK_FOR_INTERRUPTS();
			}
			fresh_off[nfresh] = w->source.start_at_earliest ? lo : hi;
		}
		fresh[nfresh++] = partitions[i];
	}
	if (nfresh > 0)
		sdp_store_offsets(w, nfresh, fresh, fresh_off, true);

	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();

	if (nfresh == 0)
		return;
	kafka_source_assign(w->kafka, nfresh, fresh, fresh_off);

	/* merge into the sorted partition list */
	oldcxt = MemoryContextSwitchTo(w->flow_cxt);
	total = w->npartitions + nfresh;
	all_parts = palloc(sizeof(int32) * total);
	all_offs = palloc(sizeof(int64) * total);
	memcpy(all_parts, w->partitions, sizeof(int32) * w->npartitions);
	memcpy(all_offs, w->next_offset, sizeof(int64) * w->npartitions);
	memcpy(all_parts + w->npartitions, fresh, sizeof(int32) * nfresh);
	memcpy(all_offs + w->npartitions, fresh_off, sizeof(int64) * nfresh);
	for (int i = 1; i < total; i++)
		for (int j = i; j > 0 && all_parts[j - 1] > all_parts[j]; j--)
		{
			int32		tp = all_parts[j];
			int64		to = all_offs[j];

			all_parts[j] = all_parts[j - 1];
			all_offs[j] = all_offs[j - 1];
			all_parts[j - 1] = tp;
			all_offs[j - 1] = to;
		}
	w->partitions = all_parts;
	w->next_offset = all_offs;
	w->npartitions = total;
	w->max_partition_id = all_parts[total - 1];
	w->partition_index = palloc(sizeof(int) * (w->max_partition_id + 1));
	for (int i = 0; i <= w->max_partition_id; i++)
		w->partition_index[i] = -1;
	for (int i = 0; i < total; i++)
		w->partition_index[all_parts[i]] = i;
	MemoryContextSwitchTo(oldcxt);
	publish_partitions(w);
}

/* Connect to Kafka and start consuming every partition of the topic. */
static void
worker_open_source(FlowWorker *w)
{
	int32	   *partitions;
	int			n;
	char	   *error;
	MemoryContext oldcxt = MemoryContextSwitchTo(w->flow_cxt);

	pgstat_report_activity(STATE_RUNNING, "sdp: connecting to Kafka");
	w->kafka = kafka_source_create(&w->source, w->args.name);
	w->poll_buf = palloc(sizeof(rd_kafka_message_t *) * w->opts.max_batch_rows);
	sdp_metrics_init(&w->metrics, SDP_METRICS_CAPACITY);

	/* Wait for a broker to tell us the partitions; the flow shows the broker as down meanwhile. */
	while ((n = kafka_source_list_partitions(w->kafka, &partitions, 2000, &error)) <= 0)
	{
		if (n == 0)
			error = psprintf("topic \"%s\" has no partitions", w->source.topic);
		set_broker_state(w, false, error);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 1000, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	set_broker_state(w, true, NULL);
	MemoryContextSwitchTo(oldcxt);
	if (w->op)
		sdp_stateful_restore(w);
	assign_partitions(w, n, partitions);

	/* One wait set for the whole life of the worker: latch, Kafka's wakeup pipe, postmaster death. */
	w->wait_set = CreateWaitEventSet(TopMemoryContext, 3);
	AddWaitEventToSet(w->wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(w->wait_set, WL_SOCKET_READABLE, kafka_source_event_fd(w->kafka), NULL, NULL);
	AddWaitEventToSet(w->wait_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	pgstat_report_activity(STATE_IDLE, NULL);
}

/* Work that is due by the clock: progress reports, watermarks, partitions, broker probes. */
static void
periodic_work(FlowWorker *w, TimestampTz now)
{
	char		error[SDP_ERROR_LEN];
	bool		down;

	if (kafka_source_take_error(w->kafka, error, sizeof(error), &down))
		set_broker_state(w, !down, error);
	else if (!down)
		set_broker_state(w, true, NULL);

	/* the broker had deleted messages the flow had not read: say so, loudly */
	if (kafka_source_take_reset(w->kafka, error, sizeof(error)) > 0)
	{
		char	   *msg = psprintf("messages the flow had not read are no longer on the broker (retention): %s", error);

		ereport(LOG, (errmsg("sdp flow \"%s\": %s", w->args.name, msg)));
		sdp_worker_set_error(w, msg);
	}

	if (now >= w->next_watermarks)
	{
		SpinLockAcquire(&w->slot->mutex);
		for (int i = 0; i < w->npartitions && i < SDP_MAX_PARTITIONS; i++)
			w->slot->partitions[i].high_watermark =
				Max(kafka_source_cached_high_watermark(w->kafka, w->partitions[i]), w->next_offset[i]);
		SpinLockRelease(&w->slot->mutex);
		w->next_watermarks = TimestampTzPlusMilliseconds(now, SDP_WATERMARK_REFRESH_MS);
	}

	if (now >= w->next_progress)
	{
		SdpProgress progress;

		sdp_metrics_report(&w->metrics, now, &progress);
		SpinLockAcquire(&w->slot->mutex);
		w->slot->progress = progress;
		SpinLockRelease(&w->slot->mutex);
		kafka_source_emit_logs(w->kafka);
		kafka_source_commit_async(w->kafka, w->npartitions, w->partitions, w->next_offset);
		w->next_progress = TimestampTzPlusMilliseconds(now, w->opts.progress_interval_ms);
	}

	/* A lost broker is probed with a metadata request, which also finds new partitions. */
	if ((kafka_source_is_down(w->kafka) && now >= w->next_broker_probe) ||
		now >= w->next_partition_refresh)
	{
		int32	   *partitions;
		char	   *perror;
		int			n = kafka_source_list_partitions(w->kafka, &partitions, 1000, &perror);

		if (n > 0)
		{
			set_broker_state(w, true, NULL);
			if (n > w->npartitions)
				assign_partitions(w, n, partitions);
		}
		else
			set_broker_state(w, false, perror);
		w->next_broker_probe = TimestampTzPlusMilliseconds(now, SDP_BROKER_PROBE_MS);
		w->next_partition_refresh = TimestampTzPlusMilliseconds(now, SDP_PARTITION_REFRESH_MS);
	}
}

static long
ms_until(TimestampTz now, TimestampTz when)
{
	if (when <= now)
		return 0;
	return (long) ((when - now + 999) / 1000);
}

static void
worker_loop(FlowWorker *w)
{
	TimestampTz now = GetCurrentTimestamp();

	w->next_progress = TimestampTzPlusMilliseconds(now, w->opts.progress_interval_ms);
	w->next_watermarks = now;
	w->next_partition_refresh = TimestampTzPlusMilliseconds(now, SDP_PARTITION_REFRESH_MS);
	w->next_broker_probe = now;

	for (;;)
	{
		Batch		batch;
		int			n;
		size_t		bytes;
		size_t		max_bytes = (size_t) w->opts.max_batch_kb * 1024;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (w->op)
			sdp_stateful_reload_if_changed(w);

		bytes = 0;
		n = kafka_source_poll(w->kafka, w->poll_buf, w->opts.max_batch_rows, &bytes, max_bytes);
		if (n > 0 && n < w->opts.max_batch_rows && bytes < max_bytes && w->opts.max_batch_wait_ms > 0)
		{
			/* linger for more, up to max_batch_wait */
			TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), w->opts.max_batch_wait_ms);

			while (n < w->opts.max_batch_rows && bytes < max_bytes)
			{
				WaitEvent	event;
				long		left = ms_until(GetCurrentTimestamp(), until);

				if (left <= 0)
					break;
				if (WaitEventSetWait(w->wait_set, left, &event, 1, PG_WAIT_EXTENSION) > 0 &&
					(event.events & WL_LATCH_SET))
					ResetLatch(MyLatch);
				CHECK_FOR_INTERRUPTS();
				n += kafka_source_poll(w->kafka, w->poll_buf + n, w->opts.max_batch_rows - n, &bytes, max_bytes);
			}
		}

		now = GetCurrentTimestamp();
		if (n > 0)
		{
			MemoryContext oldcxt = MemoryContextSwitchTo(w->batch_cxt);

			memset(&batch, 0, sizeof(batch));
			batch.nmsgs = n;
			batch.msgs = w->poll_buf;
			batch.read_us = sdp_unix_now_us();
			sdp_process_batch(w, &batch);
			for (int i = 0; i < n; i++)
				rd_kafka_message_destroy(w->poll_buf[i]);
			MemoryContextSwitchTo(oldcxt);
			MemoryContextReset(w->batch_cxt);
			now = GetCurrentTimestamp();
		}
		else if (w->op)
			sdp_stateful_tick(w);	/* due timers and checkpoints, without input */
		periodic_work(w, now);

		if (n == 0)
		{
			/* Nothing arrived: sleep until a message, the latch, or the next periodic work. */
			WaitEvent	event;
			TimestampTz next = Min(w->next_progress, w->next_watermarks);

			if (w->op)
				next = Min(next, sdp_stateful_next_wakeup(w));

			if (kafka_source_is_down(w->kafka))
				next = Min(next, w->next_broker_probe);
			next = Min(next, w->next_partition_refresh);
			if (WaitEventSetWait(w->wait_set, ms_until(now, next), &event, 1, PG_WAIT_EXTENSION) > 0 &&
				(event.events & WL_LATCH_SET))
				ResetLatch(MyLatch);
		}
	}
}

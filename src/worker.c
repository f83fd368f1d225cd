/*
 * worker.c
 *		The flow worker's life and loop: one dynamic background worker per
 *		running flow.
 *
 * Started by the launcher, it connects as the flow's owner, loads the
 * flow's declaration and plans, assigns its partitions, and loops:
 *
 *	wait for messages (or its latch) -> take what has arrived (a batch) ->
 *	run the batch's pipeline (batch.c) -> act on how it ended:
 *	committed, retry with backoff, fail the flow, or restart the worker
 *
 * The target rows and the offsets commit in one transaction, which is what
 * makes a flow exactly-once: after any crash the worker seeks to the offsets
 * that committed with the rows, so every message is in the target once.
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

#include "batch.h"
#include "funcapi.h"
#include "kafka_properties.h"
#include "tombstone.h"
#include "offsets.h"
#include "skip.h"
#include "stateful.h"

/* How often the worker refreshes partition high watermarks in its slot. */
#define SDP_WATERMARK_REFRESH_MS	500
/* How often it looks for new partitions of its topic. */
#define SDP_PARTITION_REFRESH_MS	30000
/* How often it probes a broker it lost. */
#define SDP_BROKER_PROBE_MS		2000
/* An offset reset this soon after a deleted topic's return is the re-creation's. */
#define SDP_TOPIC_RETURN_MS		60000
/* Backoff before running a batch again after an error not about the data. */
#define SDP_RETRY_MIN_MS		100
#define SDP_RETRY_MAX_MS		30000
#define SDP_RELAY_RETRY_MAX_MS	2000	/* the relay retries at least this often */
/* a worker draining a backlog lingers up to this long for a fuller batch, in steps (worker_poll) */
#define SDP_BEHIND_WAIT_MS		10
#define SDP_BEHIND_STEP_MS		2

static FlowWorker *W = NULL;
static char refused_host[256];	/* the last broker the resolver refused (report_refused_host) */

static void worker_on_exit(int code, Datum arg);
static void worker_load_flow(FlowWorker *w);
static void worker_open_source(FlowWorker *w);
static void worker_loop(FlowWorker *w);
static void worker_fail(FlowWorker *w, const char *message) pg_attribute_noreturn();
static void worker_exit_expected(FlowWorker *w) pg_attribute_noreturn();
static void worker_check_stop_request(FlowWorker *w);
static long linger_wait_ms(FlowWorker *w, long wait_ms);
static void worker_set_state(FlowWorker *w, SdpFlowState state, bool clear_error);
static void report_refused_host(FlowWorker *w);

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
	TimestampTz now;

	/* SIGTERM (stop, drop) ends the worker at its next CHECK_FOR_INTERRUPTS; an open batch rolls back. */
	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();

	w = MemoryContextAllocZero(TopMemoryContext, sizeof(FlowWorker));
	W = w;
	memcpy(&w->args, MyBgworkerEntry->bgw_extra, sizeof(SdpWorkerArgs));
	sdp_worker_flow_name = w->args.name;	/* its transform cannot change the flow (api.c) */
	w->slot = &SdpShmem->slots[w->args.slotno];
	w->flow_cxt = AllocSetContextCreate(TopMemoryContext, "sdp flow", ALLOCSET_DEFAULT_SIZES);
	w->batch_cxt = AllocSetContextCreate(TopMemoryContext, "sdp batch", ALLOCSET_DEFAULT_SIZES);
	w->periodic_cxt = AllocSetContextCreate(TopMemoryContext, "sdp periodic work", ALLOCSET_SMALL_SIZES);

	/* Publish our pid; from here on our exit is reported to the launcher. */
	now = GetCurrentTimestamp();
	SpinLockAcquire(&w->slot->mutex);
	w->slot->pid = MyProcPid;
	w->slot->latch = MyLatch;
	w->slot->started_at = now;
	w->slot->state = SDP_FLOW_STARTING;
	SpinLockRelease(&w->slot->mutex);
	before_shmem_exit(worker_on_exit, (Datum) 0);

	/* Run as the flow's owner: its privileges apply to everything the flow reads and writes. */
	BackgroundWorkerInitializeConnectionByOid(w->args.dboid, w->args.owner, 0);
	pgstat_report_appname(MyBgworkerEntry->bgw_name);
	SetConfigOption("application_name", MyBgworkerEntry->bgw_name, PGC_USERSET, PGC_S_SESSION);

	/* a restored flow's offsets, state and target rows first (before its declaration is checked) */
	sdp_wait_for_restore(w);
	worker_load_flow(w);

	/*
	 * Starting until the brokers have told the topic's partitions (retrying,
	 * with the reason, while they cannot: worker_open_source).  An error
	 * connecting (e.g. a librdkafka property it refuses) is shown in the
	 * status before the worker exits.
	 */
	PG_TRY();
	{
		worker_open_source(w);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(w->flow_cxt);
		edata = CopyErrorData();
		sdp_worker_set_error(w, edata->message);
		PG_RE_THROW();
	}
	PG_END_TRY();
	worker_set_state(w, SDP_FLOW_RUNNING, false);
	if (w->sink_def.name)
	{
		MemoryContext oldcxt = MemoryContextSwitchTo(w->flow_cxt);

		ListCell   *lc;
		List	   *orphans;

		w->relay = kafka_relay_create(&w->sink_def, w->args.flow_id, w->args.name,
									  w->outbox_tagged ? w->args.worker_no : 0, w->outbox_tagged, w->outbox_skips);
		w->relay_pending = true;	/* what an earlier worker left in the outbox */
		w->relay_draining = true;	/* before the worker consumes */
		/*
		 * Rows that workers of an earlier layout with more workers left:
		 * relayed by worker k % nworkers, under worker k's transactional.id,
		 * before this worker writes anything (every worker of the earlier
		 * layout has exited: the launcher starts a new layout only then).
		 */
		orphans = kafka_relay_orphans(w->args.flow_id, w->args.nworkers, w->args.worker_no, &w->relay_wait_seq);
		foreach(lc, orphans)
		{
			w->orphan_relays = lappend(w->orphan_relays,
									   kafka_relay_create(&w->sink_def, w->args.flow_id, w->args.name,
														  lfirst_int(lc), true, w->outbox_skips));
			ereport(LOG,
					(errmsg("sdp flow \"%s\" worker %d relays the outbox rows that worker %d of an earlier layout left",
							w->args.name, w->args.worker_no, lfirst_int(lc))));
		}
		MemoryContextSwitchTo(oldcxt);
		/* its delivery reports wake the worker while a transaction awaits them */
		AddWaitEventToSet(w->wait_set, WL_SOCKET_READABLE, kafka_relay_event_fd(w->relay), NULL, NULL);
		ereport(LOG,
				(errmsg("sdp flow \"%s\" produces to topic \"%s\" of sink \"%s\" through its outbox",
						w->args.name, w->sink_def.topic, w->sink_def.name),
				 errdetail("librdkafka %s.", rd_kafka_version_str()),
				 rd_kafka_version() < 0x02040000 ?
				 errhint("librdkafka before 2.4 spins a thread for a millisecond in each Kafka transaction; 2.4 and later take about a third of the CPU per transaction.") : 0));
	}
	if (w->args.nworkers > 1)
		ereport(LOG,
				(errmsg("sdp flow \"%s\" worker %d of %d consuming %d of the %d partitions of topic \"%s\" into %s",
						w->args.name, w->args.worker_no, w->args.nworkers, w->npartitions,
						w->topic_partitions, w->source.topic, w->sink.relname)));
	else if (w->opts.nshare > 0)
		ereport(LOG,
				(errmsg("sdp flow \"%s\" consuming %d of the %d partitions of topic \"%s\" (option \"partitions\") into %s",
						w->args.name, w->npartitions, w->topic_partitions, w->source.topic, w->sink.relname)));
	else
		ereport(LOG,
				(errmsg("sdp flow \"%s\" consuming topic \"%s\" (%d partitions) into %s",
						w->args.name, w->source.topic, w->npartitions, w->sink.relname)));
	ereport(LOG,
			(errmsg("sdp flow \"%s\" writes into %s by %s",
					w->args.name, w->sink.relname, sdp_sink_path_description(&w->sink))));

	worker_loop(w);
}

/* Report our exit in the slot and wake the launcher, which decides what comes next. */
static void
worker_on_exit(int code, Datum arg)
{
	SdpFlowSlot *slot = W->slot;
	TimestampTz now;

	/*
	 * A sink's Kafka transaction left open would hold back the
	 * read_committed consumers of its partitions until the transaction
	 * times out (librdkafka does not end it when the producer is
	 * destroyed).  Its rows are durable in the outbox, so committing it is
	 * safe; if that fails, the next relay reads the topic back.  A stop or
	 * a drop ends the worker here (SIGTERM), usually between batches while
	 * a transaction awaits its acknowledgements.
	 */
	if (W->relay)
		kafka_relay_finish(W->relay);

	now = GetCurrentTimestamp();
	SpinLockAcquire(&slot->mutex);
	slot->pid = 0;
	slot->latch = NULL;
	slot->exited_at = now;
	SpinLockRelease(&slot->mutex);
	sdp_wake_launcher();
}

/* Exit because the flow is not wanted (dropped, stopped, failed): the launcher does not restart it. */
static void
worker_exit_expected(FlowWorker *w)
{
	SpinLockAcquire(&w->slot->mutex);
	w->slot->exit_expected = true;
	SpinLockRelease(&w->slot->mutex);
	proc_exit(0);
}

/* Record an error in the slot, for sdp.flow_status. */
void
sdp_worker_set_error(FlowWorker *w, const char *message)
{
	TimestampTz now = GetCurrentTimestamp();

	SpinLockAcquire(&w->slot->mutex);
	strlcpy(w->slot->last_error, message, SDP_ERROR_LEN);
	w->slot->last_error_at = now;
	SpinLockRelease(&w->slot->mutex);
}

/* Record whether the broker answers, and its last error, in the slot. */
void
sdp_worker_set_broker(FlowWorker *w, bool ok, const char *error)
{
	TimestampTz now = GetCurrentTimestamp();

	SpinLockAcquire(&w->slot->mutex);
	w->slot->broker_ok = ok;
	if (error)
	{
		strlcpy(w->slot->broker_error, error, SDP_ERROR_LEN);
		w->slot->broker_error_at = now;
	}
	SpinLockRelease(&w->slot->mutex);
}

/*
 * Wait up to timeout_ms on the worker's wait set: a message, the latch, or
 * the relay's producer (whose queue is then served: a delivery report).
 */
static void
worker_wait_events(FlowWorker *w, long timeout_ms)
{
	WaitEvent	event;

	if (WaitEventSetWait(w->wait_set, timeout_ms, &event, 1, PG_WAIT_EXTENSION) > 0)
	{
		if (event.events & WL_LATCH_SET)
			ResetLatch(MyLatch);
		else if (w->relay && event.fd == kafka_relay_event_fd(w->relay))
			kafka_relay_serve(w->relay);
	}
}

/*
 * The worker cannot go on until its source's brokers answer (what: what it
 * cannot do; error: why): the flow is retrying, with the reason in the
 * status, and in the log when the wait starts and every minute it lasts;
 * then a second's wait.  Called in a loop, outside any transaction, until
 * they answer; then sdp_worker_broker_answered.
 */
void
sdp_worker_wait_for_broker(FlowWorker *w, const char *what, const char *error)
{
	TimestampTz now = GetCurrentTimestamp();
	char	   *msg;

	/* a broker the cluster advertised that the owner may not reach is the likely reason */
	report_refused_host(w);
	if (refused_host[0] != '\0')
		error = psprintf("%s (broker %s is not in sdp.allowed_hosts: the flow's clients do not connect to it)",
						 error, refused_host);
	msg = psprintf("%s: source \"%s\" (brokers %s): %s; trying again every second",
				   what, w->source.name, w->source.bootstrap_servers, error);
	if (w->broker_wait_since == 0 || now >= TimestampTzPlusMilliseconds(w->broker_wait_logged, 60000))
	{
		ereport(LOG,
				(errmsg("sdp flow \"%s\" %s", w->args.name, msg),
				 errhint("Check that the brokers can be reached from the database server and that topic \"%s\" exists.",
						 w->source.topic)));
		w->broker_wait_logged = now;
	}
	if (w->broker_wait_since == 0)
	{
		w->broker_wait_since = now;
		SpinLockAcquire(&w->slot->mutex);
		w->broker_wait_state = w->slot->state;
		SpinLockRelease(&w->slot->mutex);
	}
	sdp_worker_set_broker(w, false, error);
	sdp_worker_set_error(w, msg);
	worker_set_state(w, SDP_FLOW_RETRYING, false);
	pfree(msg);
	sdp_worker_wait(w, 1000);
}

/* The brokers answered after sdp_worker_wait_for_broker: the flow is in its state before, without the error. */
void
sdp_worker_broker_answered(FlowWorker *w)
{
	if (w->broker_wait_since == 0)
		return;
	ereport(LOG,
			(errmsg("sdp flow \"%s\": the brokers of source \"%s\" answered after %ld s",
					w->args.name, w->source.name, (long) ((GetCurrentTimestamp() - w->broker_wait_since) / USECS_PER_SEC))));
	worker_set_state(w, (SdpFlowState) w->broker_wait_state, true);
	w->broker_wait_since = 0;
}

/* Sleep up to timeout_ms, staying responsive to stop requests and postmaster death. */
void
sdp_worker_wait(FlowWorker *w, long timeout_ms)
{
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 timeout_ms, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
	/* a reload during a backoff, a restore or a broker wait applies now, not after it */
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
	}
	worker_check_stop_request(w);
}

/*
 * Stop the flow in the failed state: persist the error in sdp.flows (so the
 * launcher does not restart it, even after a server restart) and exit.
 * Called outside any transaction.
 */
static void
worker_fail(FlowWorker *w, const char *message)
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
	if (SPI_execute_with_args("UPDATE sdp.flows SET failed_at = now(), last_error = $2 WHERE id = $1",
							  2, argtypes, values, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not record the failure of flow \"%s\"", w->args.name);
	sdp_catalog_leave(&scope);
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();

	SpinLockAcquire(&w->slot->mutex);
	w->slot->state = SDP_FLOW_FAILED;
	SpinLockRelease(&w->slot->mutex);
	worker_exit_expected(w);
}

/* The attribute number of column 'name' in desc, 0 when none. */
static int
get_attnum_in_desc(TupleDesc desc, const char *name)
{
	for (int i = 0; i < desc->natts; i++)
		if (!TupleDescAttr(desc, i)->attisdropped && strcmp(NameStr(TupleDescAttr(desc, i)->attname), name) == 0)
			return i + 1;
	return 0;
}

static char *
spi_text(HeapTuple tup, TupleDesc desc, int col)
{
	return SPI_getvalue(tup, desc, col);
}

/* Whether an error loading the flow is about its declaration (fail the flow) or the world (retry). */
static bool
is_declaration_error(int sqlerrcode)
{
	int			category = ERRCODE_TO_CATEGORY(sqlerrcode);

	return category == ERRCODE_SYNTAX_ERROR_OR_ACCESS_RULE_VIOLATION ||
		category == ERRCODE_INVALID_PARAMETER_VALUE ||
		category == ERRCODE_FEATURE_NOT_SUPPORTED;
}

/*
 * Read the flow's declaration and prepare its plans, in one transaction.
 * Returns false when the flow is no longer wanted (dropped, stopped,
 * failed).  Errors propagate.
 */
static bool
load_declaration(FlowWorker *w)
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
	List	   *names;

	sdp_catalog_enter(&scope);
	/* sink: through to_jsonb, which reads a 0.3 catalog (no such column) too */
	if (SPI_execute_with_args("SELECT f.source, f.target, f.schema, f.transform, f.operator, f.options, "
							  "       f.enabled, f.failed_at IS NOT NULL, "
							  "       s.bootstrap_servers, s.topic, s.options, s.owner, "
							  "       pg_catalog.to_jsonb(f) OPERATOR(pg_catalog.->>) 'sink' "
							  "  FROM sdp.flows f JOIN sdp.sources s ON s.name = f.source "
							  " WHERE f.id = $1",
							  1, argtypes, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read flow \"%s\"", w->args.name);
	sdp_catalog_leave(&scope);
	if (SPI_processed == 0)
		return false;			/* dropped before we started */
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	enabled = DatumGetBool(SPI_getbinval(tup, desc, 7, &isnull));
	failed = DatumGetBool(SPI_getbinval(tup, desc, 8, &isnull));
	if (!enabled || failed)
		return false;

	oldcxt = MemoryContextSwitchTo(w->flow_cxt);
	w->source.name = spi_text(tup, desc, 1);
	w->target_name = spi_text(tup, desc, 2);
	w->schema_text = spi_text(tup, desc, 3);
	w->transform_sql = spi_text(tup, desc, 4);
	w->operator_name = spi_text(tup, desc, 5);
	flow_options = DatumGetJsonbPCopy(SPI_getbinval(tup, desc, 6, &isnull));
	w->source.bootstrap_servers = spi_text(tup, desc, 9);
	w->source.topic = spi_text(tup, desc, 10);
	source_options = DatumGetJsonbPCopy(SPI_getbinval(tup, desc, 11, &isnull));
	w->source.owner = spi_text(tup, desc, 12);
	w->sink_def.name = spi_text(tup, desc, 13);
	MemoryContextSwitchTo(oldcxt);

	if (w->sink_def.name)
	{
		/* a sink flow: its rows go to the outbox, with its offsets (kafka_sink.c) */
		Oid			sink_types[1] = {TEXTOID};
		Datum		sink_values[1] = {CStringGetTextDatum(w->sink_def.name)};
		Jsonb	   *sink_options;

		sdp_catalog_enter(&scope);
		if (SPI_execute_with_args("SELECT bootstrap_servers, topic, options FROM sdp.sinks WHERE name = $1",
								  1, sink_types, sink_values, NULL, true, 1) != SPI_OK_SELECT)
			elog(ERROR, "could not read sink \"%s\"", w->sink_def.name);
		sdp_catalog_leave(&scope);
		if (SPI_processed == 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("sink \"%s\" of flow \"%s\" does not exist", w->sink_def.name, w->args.name)));
		oldcxt = MemoryContextSwitchTo(w->flow_cxt);
		w->sink_def.bootstrap_servers = spi_text(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
		w->sink_def.topic = spi_text(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
		sink_options = DatumGetJsonbPCopy(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull));
		sdp_parse_sink_options(sink_options, &w->sink_def);
		w->target_name = pstrdup("sdp.outbox");
		MemoryContextSwitchTo(oldcxt);
	}
	oldcxt = MemoryContextSwitchTo(w->flow_cxt);

	/* Everything else runs as the owner; an error here is usually about the declaration. */
	sdp_parse_source_options(source_options, &w->source);
	sdp_parse_flow_options(flow_options, &w->opts);

	/*
	 * The transform (and everything else the worker plans) resolves names
	 * through the search_path fixed at the declaration, for the worker's
	 * life: a session value, which each batch's own changes do not touch
	 * (batch.c undoes them).  A flow declared before 0.7 has none, and
	 * keeps the owner's default.
	 */
	if (w->opts.search_path)
		(void) set_config_option("search_path", w->opts.search_path, PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SET, true, 0, false);

	/*
	 * The owner may use the source's (and sink's) brokers and properties:
	 * checked again here, before any client exists, since the owner may
	 * have lost a role since the declaration.
	 */
	kafka_properties_check_role(GetUserId(), psprintf("source \"%s\"", w->source.name),
								w->source.bootstrap_servers, w->source.properties);
	if (w->sink_def.name)
		kafka_properties_check_role(GetUserId(), psprintf("sink \"%s\"", w->sink_def.name),
									w->sink_def.bootstrap_servers, w->sink_def.properties);
	kafka_hosts_for_owner(GetUserId());
	w->schema = sdp_parse_input_schema(w->schema_text);

	names = stringToQualifiedNameList(w->target_name);
	w->target = RangeVarGetRelid(makeRangeVarFromNameList(names), NoLock, true);
	if (!OidIsValid(w->target))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("target table %s of the flow does not exist", w->target_name)));

	if (w->sink_def.name)
	{
		SdpTransform own;

		/*
		 * The flow's own rows (or its operator's) name the key; the outbox
		 * rows are (flow_id, worker, key, value).  Several workers need the
		 * column worker (0.5): each relays its own rows.
		 */
		w->outbox_tagged = sdp_outbox_has_worker();
		w->outbox_skips = sdp_outbox_has_skips();
		if (w->args.nworkers > 1 && !w->outbox_tagged)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("a flow with a sink runs in one worker before version 0.5 of sdp_ext"),
					 errhint("Run ALTER EXTENSION sdp_ext UPDATE.")));
		if (w->operator_name)
		{
			w->op = sdp_find_operator(w->operator_name);
			if (w->op == NULL)
				ereport(ERROR,
						(errcode(ERRCODE_UNDEFINED_OBJECT),
						 errmsg("operator \"%s\" does not exist", w->operator_name)));
			sdp_transform_prepare(&w->transform, w->schema, w->transform_sql);
			w->emitted_desc = w->op->validate(w->transform.result_desc, w->opts.operator_options, NULL, &w->opts);
			w->emitted_desc = BlessTupleDesc(w->emitted_desc);
			sdp_sink_check_key(w->emitted_desc, w->opts.sink_key, true);
			w->sink_key_attno = w->opts.sink_key ? get_attnum_in_desc(w->emitted_desc, w->opts.sink_key) : 0;
			w->opts.mode = SDP_MODE_APPEND;
			sdp_sink_prepare_outbox(&w->sink, w->target, sdp_sink_outbox_desc(w->outbox_tagged));
		}
		else
		{
			sdp_transform_prepare(&own, w->schema, w->transform_sql);
			sdp_sink_check_key(own.result_desc, w->opts.sink_key, false);
			sdp_transform_prepare_generated(&w->transform, w->schema,
											sdp_sink_outbox_sql(w->transform_sql, w->schema, w->args.flow_id,
																w->outbox_tagged ? w->args.worker_no : -1,
																w->opts.sink_key));
			sdp_sink_prepare_outbox(&w->sink, w->target, w->transform.result_desc);
		}
		/* a row the sink's producer would refuse is set aside when it is written (sink.c) */
		{
			int			message_max_bytes;
			int			max_payload = kafka_sink_max_payload(&w->sink_def, w->args.flow_id,
															 w->outbox_tagged ? w->args.worker_no : 0,
															 &message_max_bytes);

			sdp_sink_limit_messages(&w->sink, w->sink_def.name, max_payload, message_max_bytes);
		}
	}
	else if (w->operator_name)
	{
		/* a stateful flow: the operator's rows, not the transform's, go to the target */
		Relation	rel;
		TupleDesc	emitted;

		sdp_transform_prepare(&w->transform, w->schema, w->transform_sql);
		rel = relation_open(w->target, AccessShareLock);
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
	{
		sdp_transform_prepare(&w->transform, w->schema, w->transform_sql);
		sdp_sink_prepare(&w->sink, w->target, w->opts.mode, w->transform.result_desc,
						 w->transform_sql == NULL);
	}
	sdp_sink_check_privileges(&w->sink, GetUserId());
	sdp_tombstone_prepare(&w->opts, w->op != NULL, w->target, GetUserId(), &w->tombstone_plan);
	/*
	 * Headers are read only when something may use them: the transform,
	 * the target's kafka_headers column (no transform), or an operator.
	 */
	if (w->schema->nmeta > SDP_META_HEADERS)
		w->want_headers = w->transform_sql != NULL
			? sdp_transform_reads_column(&w->transform, w->schema->ncolumns + SDP_META_HEADERS + 1)
			: (w->op != NULL || get_attnum(w->target, "kafka_headers") > 0);
	/*
	 * The other Kafka columns a stateless flow's transform does not read
	 * are left null (an operator's flow reads their partitions and offsets
	 * from the rows; a flow without transform writes them if the target
	 * has them).
	 */
	w->unread_meta = 0;
	if (w->op == NULL && w->transform.plan != NULL)
		for (int m = 0; m < Min(w->schema->nmeta, SDP_META_HEADERS); m++)
			if (!sdp_transform_reads_column(&w->transform, w->schema->ncolumns + m + 1))
				w->unread_meta |= 1 << m;
	w->sink.flow_name = w->args.name;
	if (w->transform.plan)
		SPI_keepplan(w->transform.plan);
	SPI_keepplan(w->sink.plan);
	MemoryContextSwitchTo(oldcxt);

	/* The statements the worker runs on the catalogs, prepared once. */
	sdp_catalog_enter(&scope);
	sdp_batch_prepare(w);
	sdp_catalog_leave(&scope);

	/* the operator and its state store (the operator reads the catalogs: inside the transaction) */
	if (w->op)
		sdp_stateful_start(w);
	return true;
}

/*
 * Load the flow.  An error in its declaration (the target was dropped, a
 * privilege revoked) fails the flow with the reason instead of restarting
 * it in a loop; any other error ends the worker, which the launcher
 * restarts with backoff.  Either way the loading transaction is aborted
 * first, and the failure is recorded in a transaction of its own.
 */
static void
worker_load_flow(FlowWorker *w)
{
	MemoryContext cxt = CurrentMemoryContext;
	ErrorData  *volatile edata = NULL;
	volatile bool wanted = false;

	/*
	 * The configuration generation, before the snapshot the configuration is
	 * read with: a change committed after this read bumps it again, and the
	 * worker reloads.
	 */
	SpinLockAcquire(&w->slot->mutex);
	w->config_generation = w->slot->config_generation;
	SpinLockRelease(&w->slot->mutex);

	pgstat_report_activity(STATE_RUNNING, "sdp: loading flow");
	PG_TRY();
	{
		sdp_start_transaction();
		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		wanted = load_declaration(w);
		PopActiveSnapshot();
		SPI_finish();
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(w->flow_cxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	pgstat_report_activity(STATE_IDLE, NULL);

	if (edata != NULL)
	{
		/*
		 * A declaration that no longer holds fails a flow that never ran.  A
		 * flow that has run (it has offsets) is retried instead, with the
		 * reason in the status, as a running flow is when a privilege is
		 * revoked: its target or privileges are being changed, or a restore
		 * has not put back its target's primary key or its grants yet
		 * (pg_dump adds them after all data), and it resumes by itself once
		 * they are back.
		 */
		if (is_declaration_error(edata->sqlerrcode) && !sdp_flow_has_run(w))
			worker_fail(w, edata->message);
		/* not about the declaration, or a flow that has run: exit with the error, and let the launcher retry */
		sdp_worker_set_error(w, edata->message);
		ReThrowError(edata);
	}
	if (!wanted)
		worker_exit_expected(w);

	/* Safe because offsets commit with the rows: a crash loses a suffix of both. */
	SetConfigOption("synchronous_commit", w->opts.synchronous_commit, PGC_USERSET, PGC_S_SESSION);
}

/*
 * Start consuming this worker's partitions of the topic's n (their ids in
 * partitions) that it does not consume yet (sdp_worker_owns_partition:
 * partition p is worker p % nworkers's, or, with a share, the share's
 * partitions divided among the workers by position).  Each worker computes
 * this itself, so a partition added to the topic is taken by exactly one
 * worker, at its next look at the topic.  A partition of the share that the
 * topic does not have (yet) is said in the log, and taken once it appears.
 */
static void
worker_take_partitions(FlowWorker *w, int n, int32 *partitions)
{
	int32	   *mine = palloc(sizeof(int32) * n);
	int			nmine = 0;

	for (int i = 0; i < n; i++)
		if (sdp_worker_owns_partition(&w->opts, partitions[i], w->args.worker_no, w->args.nworkers))
			mine[nmine++] = partitions[i];
	w->topic_partitions = n;
	sdp_assign_partitions(w, nmine, mine);
	pfree(mine);

	if (w->opts.nshare > 0)
	{
		StringInfoData missing;
		int			nmissing = 0;

		initStringInfo(&missing);
		for (int s = 0; s < w->opts.nshare; s++)
		{
			int32		p = w->opts.share[s];
			bool		found = false;

			if (!sdp_worker_owns_partition(&w->opts, p, w->args.worker_no, w->args.nworkers))
				continue;
			for (int i = 0; i < n && !found; i++)
				found = (partitions[i] == p);
			if (!found)
				appendStringInfo(&missing, "%s%d", nmissing++ > 0 ? ", " : "", p);
		}
		if (nmissing != w->share_missing && nmissing > 0)
			ereport(LOG,
					(errmsg("sdp flow \"%s\": topic \"%s\" has no partition%s %s (of option \"partitions\") yet",
							w->args.name, w->source.topic, nmissing > 1 ? "s" : "", missing.data),
					 errdetail("The topic has %d partitions. The flow consumes the rest of its share now, and %s once the topic has %s.",
							   n, nmissing > 1 ? "these" : "this one", nmissing > 1 ? "them" : "it")));
		w->share_missing = nmissing;
		pfree(missing.data);
	}
}

/* Connect to Kafka and start consuming the worker's partitions of the topic. */
static void
worker_open_source(FlowWorker *w)
{
	int32	   *partitions;
	int			n;
	char	   *error;
	MemoryContext waitcxt;
	MemoryContext oldcxt = MemoryContextSwitchTo(w->flow_cxt);

	pgstat_report_activity(STATE_RUNNING, "sdp: connecting to Kafka");
	w->kafka = kafka_source_create(&w->source, w->args.name);
	w->poll_buf = palloc(sizeof(rd_kafka_message_t *) * w->opts.max_batch_rows);
	sdp_metrics_init(&w->metrics);

	/*
	 * Wait for a broker to tell us the partitions (retrying meanwhile, with
	 * the reason), in memory of the wait's own: the error of each try goes.
	 */
	waitcxt = AllocSetContextCreate(w->flow_cxt, "sdp broker wait", ALLOCSET_SMALL_SIZES);
	MemoryContextSwitchTo(waitcxt);
	while ((n = kafka_source_list_partitions(w->kafka, &partitions, 2000, &error)) <= 0)
	{
		if (n == 0)
			error = psprintf("topic \"%s\" has no partitions", w->source.topic);
		sdp_worker_wait_for_broker(w, "cannot start consuming", error);
		MemoryContextReset(waitcxt);
	}
	MemoryContextSwitchTo(w->flow_cxt);
	partitions = memcpy(palloc(sizeof(int32) * n), partitions, sizeof(int32) * n);
	MemoryContextDelete(waitcxt);
	sdp_worker_set_broker(w, true, NULL);
	sdp_worker_broker_answered(w);
	MemoryContextSwitchTo(oldcxt);
	/* the messages its owner asked to skip (restored with the rest, if it was) */
	sdp_skips_reload(w);
	if (w->op)
		sdp_stateful_restore(w);
	worker_take_partitions(w, n, partitions);

	/*
	 * One wait set for the whole life of the worker: latch, Kafka's wakeup
	 * pipe, postmaster death, and a sink flow's relay (added with it).
	 */
	w->wait_set = CreateWaitEventSet(TopMemoryContext, 4);
	AddWaitEventToSet(w->wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(w->wait_set, WL_SOCKET_READABLE, kafka_source_event_fd(w->kafka), NULL, NULL);
	AddWaitEventToSet(w->wait_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	pgstat_report_activity(STATE_IDLE, NULL);
}

/*
 * A broker name the owner may not connect to (sdp.allowed_hosts), which
 * the cluster advertised: said in the log and the status (it is left out,
 * and the flow goes on with the brokers it may reach).
 */
static void
report_refused_host(FlowWorker *w)
{
	char		host[256];

	if (kafka_take_refused_host(host, sizeof(host)))
	{
		char	   *msg = psprintf("broker %s is not in sdp.allowed_hosts: the flow's clients do not connect to it", host);

		if (strcmp(host, refused_host) != 0)
			ereport(LOG,
					(errmsg("sdp flow \"%s\": %s", w->args.name, msg),
					 errhint("A superuser may add the host to sdp.allowed_hosts, if the cluster's brokers are to be reached there.")));
		strlcpy(refused_host, host, sizeof(refused_host));
		/* the error, not a broker down: the others may serve the flow */
		sdp_worker_set_broker(w, !kafka_source_is_down(w->kafka), msg);
		pfree(msg);
	}
}

/*
 * The broker answers but no longer has the flow's topic (it was deleted
 * under the running flow): the flow is retrying, with the reason in the
 * status and the log, and the topic is looked for every few seconds.  The
 * offsets stay as committed; what a topic of that name holds when it
 * returns is read from them (an offset past its end is reset to its start
 * and reported as the topic created again, in periodic_work).
 */
static void
worker_topic_gone(FlowWorker *w, const char *error)
{
	char	   *msg = psprintf("the topic is gone from the broker (deleted?): %s; the flow waits for it and goes on from its committed offsets when it returns",
							   error);

	ereport(LOG,
			(errmsg("sdp flow \"%s\": %s", w->args.name, msg),
			 errhint("Create topic \"%s\" again, or drop the flow with sdp_drop_flow().", w->source.topic)));
	w->topic_missing = true;
	sdp_worker_set_error(w, msg);
	SpinLockAcquire(&w->slot->mutex);
	w->topic_gone_at = w->slot->last_error_at;
	SpinLockRelease(&w->slot->mutex);
	worker_set_state(w, SDP_FLOW_RETRYING, false);
	pfree(msg);
}

/*
 * The topic that was gone is back (worker_topic_gone): the flow runs on,
 * and its status no longer says the topic is gone (unless an error came
 * since: the offset reset of the topic created again, say).
 */
static void
worker_topic_back(FlowWorker *w)
{
	ereport(LOG, (errmsg("sdp flow \"%s\": topic \"%s\" is back on the broker", w->args.name, w->source.topic)));
	w->topic_missing = false;
	w->topic_returned_at = GetCurrentTimestamp();
	worker_set_state(w, SDP_FLOW_RUNNING, false);
	SpinLockAcquire(&w->slot->mutex);
	if (w->slot->last_error_at == w->topic_gone_at)
	{
		w->slot->last_error[0] = '\0';
		w->slot->last_error_at = 0;
	}
	SpinLockRelease(&w->slot->mutex);
}

static void periodic_work_round(FlowWorker *w, TimestampTz now);

/*
 * Work that is due by the clock: progress reports, watermarks, partitions,
 * broker probes.  What it allocates for the round (the reason of a failed
 * probe, every 2 s while the broker is down; a message) is in a context of
 * its own, reset after it; what lasts (the partitions taken) goes to the
 * flow's context.
 */
static void
periodic_work(FlowWorker *w, TimestampTz now)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(w->periodic_cxt);

	periodic_work_round(w, now);
	MemoryContextSwitchTo(oldcxt);
	MemoryContextReset(w->periodic_cxt);
}

static void
periodic_work_round(FlowWorker *w, TimestampTz now)
{
	char		error[SDP_ERROR_LEN];
	bool		down;

	if (kafka_source_take_error(w->kafka, error, sizeof(error), &down))
	{
		sdp_worker_set_broker(w, !down && !w->topic_missing, error);
		/* a fetch found no such topic or partition: look at the topic now */
		if (strstr(error, "UNKNOWN_TOPIC") != NULL || strstr(error, "UNKNOWN_PARTITION") != NULL)
			w->next_partition_refresh = now;
	}
	else if (!down && !w->topic_missing)
		sdp_worker_set_broker(w, true, NULL);
	report_refused_host(w);

	/*
	 * The broker had deleted messages the flow had not read: say so,
	 * loudly.  Within SDP_TOPIC_RETURN_MS of the topic's return, a reset is
	 * the re-creation's: each partition is reset at its first fetch from
	 * the new topic, not all in the same round.
	 */
	if (kafka_source_take_reset(w->kafka, error, sizeof(error)) > 0)
	{
		bool		recreated = w->topic_missing ||
			(w->topic_returned_at != 0 && now - w->topic_returned_at < SDP_TOPIC_RETURN_MS * (int64) 1000);
		char	   *msg = psprintf("messages the flow had not read are no longer on the broker (%s): %s",
								   recreated ? "the topic was deleted and created again" : "retention",
								   error);

		ereport(LOG, (errmsg("sdp flow \"%s\": %s", w->args.name, msg)));
		sdp_worker_set_error(w, msg);
	}

	if (now >= w->next_watermarks)
	{
		sdp_publish_high_watermarks(w);
		w->next_watermarks = TimestampTzPlusMilliseconds(now, SDP_WATERMARK_REFRESH_MS);
	}

	if (now >= w->next_progress)
	{
		SdpProgress *progress = palloc(sizeof(SdpProgress));

		sdp_metrics_report(&w->metrics, now, progress);
		progress->fetcher_wakes = w->fetcher_wakes;
		SpinLockAcquire(&w->slot->mutex);
		w->slot->progress = *progress;
		SpinLockRelease(&w->slot->mutex);
		pfree(progress);
		kafka_source_emit_logs(w->kafka);
		kafka_source_commit_async(w->kafka, w->npartitions, w->partitions, w->next_offset);
		w->next_progress = TimestampTzPlusMilliseconds(now, w->opts.progress_interval_ms);
	}

	/*
	 * A lost broker, or a topic gone, is probed with a metadata request,
	 * which also finds new partitions.
	 */
	if (((kafka_source_is_down(w->kafka) || w->topic_missing) && now >= w->next_broker_probe) ||
		now >= w->next_partition_refresh)
	{
		int32	   *partitions;
		char	   *perror;
		int			n = kafka_source_list_partitions(w->kafka, &partitions, 1000, &perror);

		if (n > 0)
		{
			sdp_worker_set_broker(w, true, NULL);
			if (w->topic_missing)
				worker_topic_back(w);
			if (n > w->topic_partitions)
				worker_take_partitions(w, n, partitions);
			pfree(partitions);
		}
		else
		{
			sdp_worker_set_broker(w, false, perror);
			if (!kafka_source_is_down(w->kafka) && !w->topic_missing)
				worker_topic_gone(w, perror);
		}
		w->next_broker_probe = TimestampTzPlusMilliseconds(now, SDP_BROKER_PROBE_MS);
		w->next_partition_refresh = TimestampTzPlusMilliseconds(now, SDP_PARTITION_REFRESH_MS);
	}

	/*
	 * The rows this worker inserted, updated and deleted are counted in its
	 * own memory until reported: a backend reports them when idle, a
	 * background worker only when it asks (at most once a second without
	 * force).  Unreported, autovacuum never sees a flow's target, the
	 * outbox or the offsets change, never vacuums nor analyzes them, and
	 * queries on a live target are planned without statistics.
	 */
	pgstat_report_stat(false);
}

/*
 * A launcher that did not start this worker (it restarted since) has no
 * handle to terminate it with: it asks through the slot and sets our latch.
 * A skip request that committed is noticed here too (skips_pending), and
 * read where no transaction is open.
 */
static void
worker_check_stop_request(FlowWorker *w)
{
	bool		stop;
	uint64		skip_generation;

	SpinLockAcquire(&w->slot->mutex);
	stop = w->slot->stop_requested;
	skip_generation = w->slot->skip_generation;
	SpinLockRelease(&w->slot->mutex);
	if (skip_generation != w->skip_generation)
		w->skips_pending = true;
	if (stop)
	{
		ereport(LOG, (errmsg("sdp flow \"%s\" stopping at the launcher's request", w->args.name)));
		worker_exit_expected(w);	/* worker_on_exit commits a sink's open transaction */
	}
}

static long
ms_until(TimestampTz now, TimestampTz when)
{
	if (when <= now)
		return 0;
	return (long) ((when - now + 999) / 1000);
}

/*
 * The flow's state in the slot: starting, running, or retrying (unless the
 * launcher is stopping it).
 */
static void
worker_set_state(FlowWorker *w, SdpFlowState state, bool clear_error)
{
	SpinLockAcquire(&w->slot->mutex);
	if (w->slot->state == SDP_FLOW_STARTING || w->slot->state == SDP_FLOW_RUNNING ||
		w->slot->state == SDP_FLOW_RETRYING)
		w->slot->state = state;
	if (clear_error)
	{
		w->slot->last_error[0] = '\0';
		w->slot->last_error_at = 0;
	}
	SpinLockRelease(&w->slot->mutex);
}

/* The batch is decoded again at its next attempt, from scratch. */
static void
batch_decode_again(Batch *b)
{
	b->decoded = false;
	b->decode_raised = false;
	b->dead = NIL;
	b->ndead_decode = 0;
	b->skip_msg = NULL;
	b->skipped = NIL;
}

/*
 * At a worker's first commit, the error an earlier worker of the flow left
 * in the slot (why it exited, why it was restarted) is over; one this
 * worker set since it started (a retention reset, say) stays.
 */
static void
worker_clear_earlier_error(FlowWorker *w)
{
	SpinLockAcquire(&w->slot->mutex);
	if (w->slot->last_error[0] != '\0' && w->slot->last_error_at < w->slot->started_at)
	{
		w->slot->last_error[0] = '\0';
		w->slot->last_error_at = 0;
	}
	SpinLockRelease(&w->slot->mutex);
}

/*
 * A batch waiting to be retried takes the messages that arrived meanwhile,
 * up to the batch's bounds: a message that fails alone, in a batch of its
 * own, is told apart from the flow's own fault only by others that go
 * through (batch.c).  Decoding starts again with them.
 */
static void
worker_grow_batch(FlowWorker *w, Batch *b)
{
	size_t		bytes = 0;
	size_t		max_bytes = (size_t) w->opts.max_batch_kb * 1024;
	int			n;

	if (b->nmsgs >= w->opts.max_batch_rows)
		return;
	for (int i = 0; i < b->nmsgs; i++)
		bytes += b->msgs[i]->len + b->msgs[i]->key_len;
	if (bytes >= max_bytes)
		return;
	n = kafka_source_poll(w->kafka, b->msgs + b->nmsgs, w->opts.max_batch_rows - b->nmsgs, &bytes, max_bytes);
	if (n == 0)
		return;
	b->nmsgs += n;
	batch_decode_again(b);
}

/*
 * Run a batch through the pipeline until it commits, and act on how it
 * ended: an error not about the messages is retried with backoff (the
 * batch is kept in memory, and grows with what arrives), so the flow waits
 * out a missing table or a full disk instead of losing data; the flow shows
 * 'retrying' with the error meanwhile, and 'running' with no error again
 * after the next commit, when the backoff starts over.
 */
static void
worker_run_batch(FlowWorker *w, Batch *b)
{
	bool		retried = false;

	for (;;)
	{
		char	   *message = NULL;
		char	   *msg;

		pgstat_report_activity(STATE_RUNNING, b->nmsgs > 0 ? "sdp: processing batch" : "sdp: timers and checkpoint");
		switch (sdp_batch_run(w, b, &message))
		{
			case SDP_BATCH_COMMITTED:
				w->error_backoff_ms = 0;
				sdp_batch_account(w, b);
				if (w->relay)
				{
					kafka_relay_batch_committed(w->relay);
					if (b->rows_written > 0)
						w->relay_pending = true;
				}
				/* the error of a retry, or of an earlier worker of the flow, is over */
				if (retried)
					worker_set_state(w, SDP_FLOW_RUNNING, true);
				else if (!w->committed_once)
					worker_clear_earlier_error(w);
				w->committed_once = true;
				pgstat_report_activity(STATE_IDLE, NULL);
				return;
			case SDP_BATCH_FAIL:
				worker_fail(w, message);
				break;
			case SDP_BATCH_RESTART:
				msg = psprintf("restarting from the last checkpoint after an error in the operator step: %s", message);
				ereport(LOG, (errmsg("sdp flow \"%s\" %s", w->args.name, msg)));
				sdp_worker_set_error(w, msg);
				proc_exit(1);
				break;
			case SDP_BATCH_RETRY:
				retried = true;
				w->error_backoff_ms = Min(Max(w->error_backoff_ms * 2, SDP_RETRY_MIN_MS), SDP_RETRY_MAX_MS);
				msg = psprintf("batch of %d messages not written, retrying in %d ms: %s",
							   b->nmsgs, w->error_backoff_ms, message);
				ereport(LOG, (errmsg("sdp flow \"%s\": %s", w->args.name, msg)));
				sdp_worker_set_error(w, msg);
				worker_set_state(w, SDP_FLOW_RETRYING, false);
				pgstat_report_activity(STATE_IDLE, NULL);
				sdp_worker_wait(w, w->error_backoff_ms);
				/* the lag goes on growing while we wait: show it */
				sdp_publish_high_watermarks(w);
				/* a skip request (it set our latch) applies to this batch's next attempt */
				if (w->skips_pending)
				{
					sdp_skips_reload(w);
					batch_decode_again(b);
				}
				worker_grow_batch(w, b);
				break;
		}
	}
}

/*
 * Messages the broker holds for the worker's partitions beyond the committed
 * offsets, by the end offsets of the last fetch responses (no request).
 */
static int64
worker_backlog(FlowWorker *w)
{
	int64		backlog = 0;

	for (int i = 0; i < w->npartitions; i++)
	{
		int64		hw = kafka_source_cached_high_watermark(w->kafka, w->partitions[i]);

		if (hw > w->next_offset[i])
			backlog += hw - w->next_offset[i];
	}
	return backlog;
}

/*
 * Poll what has arrived, lingering up to max_batch_wait for more when the
 * batch is not full.
 *
 * A worker draining a backlog is usually faster than librdkafka's fetcher
 * and would take a batch of the few messages fetched since its last poll,
 * paying a transaction, its offsets and the transform's start for each
 * few.  So when the broker holds at least as many more messages as the
 * batch has, it lingers even with max_batch_wait 0: it sleeps in steps of
 * SDP_BEHIND_STEP_MS, on its latch alone, while the fetcher fills the
 * local queue, until the queue holds what the batch can still take (or
 * all the broker has), a step brings nothing while the queue is near the
 * limits where the fetcher rests, or SDP_BEHIND_WAIT_MS have passed; then
 * it takes what arrived.  A slow fetcher is waited for: the batch would
 * otherwise hold a fetch response or two.
 * Sleeping on Kafka's pipe too would wake it (and make librdkafka's
 * thread write to the pipe) at each fetch response, a few messages each.
 * The messages lingered for have waited on the broker already, and the
 * backlog drains no slower: the fetcher, not the worker, sets its pace.
 * A worker that keeps up never lingers.
 */
static int
worker_poll(FlowWorker *w)
{
	size_t		bytes = 0;
	size_t		max_bytes = (size_t) w->opts.max_batch_kb * 1024;
	int			max_rows = w->opts.max_batch_rows;
	int			n = kafka_source_poll(w->kafka, w->poll_buf, max_rows, &bytes, max_bytes);
	int			wait_ms = w->opts.max_batch_wait_ms;

	if (n == 0 || n >= max_rows || bytes >= max_bytes)
		return n;
	if (wait_ms == 0)
	{
		int64		more = worker_backlog(w) - n;
		int64		want = Min(more, (int64) (max_rows - n));
		int64		queued = kafka_source_queued(w->kafka);
		TimestampTz until;

		if (more < n)
			return n;
		until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), SDP_BEHIND_WAIT_MS);
		while (queued < want)
		{
			long		left = ms_until(GetCurrentTimestamp(), until);
			int64		before = queued;

			if (left <= 0)
				break;
			if (WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						  linger_wait_ms(w, Min(left, SDP_BEHIND_STEP_MS)), PG_WAIT_EXTENSION) & WL_LATCH_SET)
				ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
			queued = kafka_source_queued(w->kafka);
			if (queued <= before && kafka_source_queue_near_full(w->kafka, queued, (double) bytes / n))
				break;
		}
		return n + kafka_source_poll(w->kafka, w->poll_buf + n, max_rows - n, &bytes, max_bytes);
	}
	else
	{
		TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), wait_ms);

		while (n < max_rows && bytes < max_bytes)
		{
			long		left = ms_until(GetCurrentTimestamp(), until);

			if (left <= 0)
				break;
			worker_wait_events(w, linger_wait_ms(w, left));
			CHECK_FOR_INTERRUPTS();
			n += kafka_source_poll(w->kafka, w->poll_buf + n, max_rows - n, &bytes, max_bytes);
		}
	}
	return n;
}

/*
 * The local queue is empty: if librdkafka's fetcher may be at rest while
 * the broker holds messages for us, restart it (kafka_source_wake_fetcher),
 * rather than wait up to a second for it to wake by itself.
 */
static void
wake_fetcher_if_behind(FlowWorker *w)
{
	if (!kafka_source_is_down(w->kafka) &&
		kafka_source_wake_fetcher(w->kafka, w->npartitions, w->partitions))
		w->fetcher_wakes++;
}

/* Whether a relay of this worker was fenced by another server's (kafka_relay_fenced). */
static bool
worker_relay_fenced(FlowWorker *w)
{
	ListCell   *lc;

	if (kafka_relay_fenced(w->relay))
		return true;
	foreach(lc, w->orphan_relays)
	{
		if (kafka_relay_fenced((KafkaRelay *) lfirst(lc)))
			return true;
	}
	return false;
}

/*
 * A sink flow produces what its committed batches put in its outbox before
 * it takes the next batch, so that the outbox holds at most one batch's
 * rows while the sink can be written.  When it cannot (the sink's brokers
 * are down), the flow consumes nothing either, and shows why; it waits with
 * backoff, answering stop requests, and the relay goes on where it stood.
 * A relay fenced by a newer producer of its transactional id fails the
 * flow: that producer is another server's (kafka_relay_fenced).
 */
static bool
worker_relay(FlowWorker *w)
{
	char	   *error = NULL;
	MemoryContext oldcxt = MemoryContextSwitchTo(w->batch_cxt);
	bool		done;
	ListCell   *lc;

	pgstat_report_activity(STATE_RUNNING, "sdp: producing to the sink");
	/*
	 * The rows of earlier workers first: a key's rows keep their order.
	 * Before their relays read the topic back (read_committed), every
	 * transactional id this worker relays for is fenced: a transaction
	 * that the earlier layout's worker of this number left open (its
	 * commit failed while the sink was down) holds the partitions' last
	 * stable offset below the end until the broker times it out, and the
	 * read-back would wait for it.
	 */
	done = w->orphan_relays == NIL || kafka_relay_fence(w->relay, &error);
	foreach(lc, w->orphan_relays)
	{
		if (!done)
			break;
		done = kafka_relay_fence((KafkaRelay *) lfirst(lc), &error);
	}
	while (done && w->orphan_relays != NIL)
	{
		KafkaRelay *orphan = linitial(w->orphan_relays);

		done = kafka_relay_drain(orphan, &error);
		if (done)
		{
			kafka_relay_destroy(orphan);
			w->orphan_relays = list_delete_first(w->orphan_relays);
		}
	}
	if (done)
		done = kafka_relay_drain(w->relay, &error);
	pgstat_report_activity(STATE_IDLE, NULL);
	if (done)
	{
		if (w->relay_backoff_ms > 0)
			worker_set_state(w, SDP_FLOW_RUNNING, true);
		w->relay_backoff_ms = 0;
	}
	else if (worker_relay_fenced(w))
	{
		MemoryContextSwitchTo(oldcxt);
		worker_fail(w, error);
	}
	else
	{
		w->relay_backoff_ms = Min(Max(w->relay_backoff_ms * 2, SDP_RETRY_MIN_MS), SDP_RELAY_RETRY_MAX_MS);
		ereport(LOG, (errmsg("sdp flow \"%s\": %s, retrying in %d ms", w->args.name, error, w->relay_backoff_ms)));
		sdp_worker_set_error(w, error);
		worker_set_state(w, SDP_FLOW_RETRYING, false);
	}
	MemoryContextSwitchTo(oldcxt);
	MemoryContextReset(w->batch_cxt);
	if (!done)
		sdp_worker_wait(w, w->relay_backoff_ms);
	return done;
}

/*
 * Between batches: the relay goes on without waiting for Kafka
 * (kafka_relay_pump): it commits its open transaction once the sink
 * acknowledged every message, and produces the rows committed since in the
 * next one, while the flow consumes.  When the sink cannot be written, the
 * flow relays the blocking way (worker_relay), consuming nothing until the
 * outbox is drained.
 */
static bool
worker_relay_pump(FlowWorker *w)
{
	char	   *error = NULL;
	MemoryContext oldcxt = MemoryContextSwitchTo(w->batch_cxt);
	bool		ok;

	RT_BEGIN(RT_CALLS);
	ok = kafka_relay_pump(w->relay, &w->relay_pending, &error);
	RT_END(RT_CALLS);
	MemoryContextSwitchTo(oldcxt);
	if (!ok)
	{
		ereport(LOG, (errmsg("sdp flow \"%s\": %s, relaying before consuming again", w->args.name, error)));
		w->relay_draining = true;
	}
	MemoryContextReset(w->batch_cxt);
	return ok;
}

/*
 * A wait of a worker lingering for a fuller batch (worker_poll): while its
 * relay has a Kafka transaction open, the transaction is committed as soon
 * as the sink has acknowledged it, not after the linger and the next batch
 * (a cluster's read_committed consumers see its rows only then), and the
 * wait lasts at most a step of the linger of a worker behind.  An error
 * hands the relay over to the blocking way before the next poll.
 */
static long
linger_wait_ms(FlowWorker *w, long wait_ms)
{
	if (w->relay == NULL || w->relay_draining || !kafka_relay_busy(w->relay))
		return wait_ms;
	(void) worker_relay_pump(w);	/* the batch's memory holds nothing yet */
	if (!w->relay_draining && kafka_relay_busy(w->relay))
		return Min(wait_ms, SDP_BEHIND_STEP_MS);
	return wait_ms;
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
		int			n;

		CHECK_FOR_INTERRUPTS();
		worker_check_stop_request(w);
		if (w->skips_pending)
			sdp_skips_reload(w);
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (w->op)
			sdp_stateful_reload_if_changed(w);
		if (w->relay_draining)
		{
			RT_BEGIN(RT_STALL);
			if (!worker_relay(w))
				continue;
			RT_END(RT_STALL);
			w->relay_pending = false;
			w->relay_draining = false;
		}
		if (w->relay_wait_seq > 0)
		{
			/*
			 * At start, the rows other workers left (workers of an earlier
			 * layout, whose partitions this one may now consume) are
			 * produced first, by their relays: a key's messages keep their
			 * order when its partition moves between workers.
			 */
			if (kafka_relay_others_pending(w->relay, w->relay_wait_seq))
			{
				pgstat_report_activity(STATE_IDLE, "sdp: waiting for the outbox rows of other workers");
				sdp_worker_wait(w, 10);
				continue;
			}
			w->relay_wait_seq = 0;
		}
		if (w->relay && (w->relay_pending || kafka_relay_busy(w->relay)) && !worker_relay_pump(w))
			continue;

		n = worker_poll(w);
		now = GetCurrentTimestamp();
		/* a batch of messages, or a stateful flow's due timers and checkpoint without input */
		if (n > 0 || (w->op && sdp_stateful_work_due(w, now)))
		{
			MemoryContext oldcxt = MemoryContextSwitchTo(w->batch_cxt);
			Batch		batch;

			memset(&batch, 0, sizeof(batch));
			batch.nmsgs = n;
			batch.msgs = w->poll_buf;
			batch.read_us = sdp_unix_now_us();
			RT_BEGIN(RT_BATCH);
			worker_run_batch(w, &batch);
			if (w->relay)
				RT_END(RT_BATCH);
			n = batch.nmsgs;	/* a retried batch may have grown */
			for (int i = 0; i < n; i++)
				rd_kafka_message_destroy(w->poll_buf[i]);
			MemoryContextSwitchTo(oldcxt);
			MemoryContextReset(w->batch_cxt);
			now = GetCurrentTimestamp();
		}
		periodic_work(w, now);

		if (n == 0)
			wake_fetcher_if_behind(w);

		/* idle: the produced rows that no batch deleted go (other workers wait for them at their start) */
		if (n == 0 && w->relay)
		{
			TimestampTz due = kafka_relay_delete_due(w->relay);

			if (due != 0 && due <= now)
				kafka_relay_delete_committed(w->relay);
		}

		if (n == 0)
		{
			/* Nothing arrived: sleep until a message, the latch, or the next periodic work. */
			TimestampTz next = Min(w->next_progress, w->next_watermarks);

			if (w->op)
				next = Min(next, sdp_stateful_next_wakeup(w));
			if (kafka_source_is_down(w->kafka))
				next = Min(next, w->next_broker_probe);
			next = Min(next, w->next_partition_refresh);
			if (w->relay)
			{
				TimestampTz due = kafka_relay_delete_due(w->relay);

				if (due != 0)
					next = Min(next, due);
				/*
				 * A transaction in flight: its delivery reports wake the
				 * worker (then it commits), or its deadline does.
				 */
				if (kafka_relay_busy(w->relay))
					next = Min(next, kafka_relay_ack_deadline(w->relay));
				else if (w->relay_pending)
					next = Min(next, TimestampTzPlusMilliseconds(now, 1));
			}
			worker_wait_events(w, ms_until(now, next));
		}
	}
}

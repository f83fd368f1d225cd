/*
 * worker_start.c
 *		A flow worker's start: its declaration loaded and its plans prepared,
 *		its Kafka consumer connected, its partitions assigned from the offsets
 *		stored in sdp.offsets (or from starting_offsets); and, again while it
 *		runs, the partitions added to the topic.
 *
 * Nothing here holds a transaction, snapshot or lock while it waits for a
 * broker: the broker is asked first, outside any transaction, and what it
 * answered is stored in a short transaction of its own.
 *
 * From version 0.2, sdp.flows.offsets_stored says that the flow has stored
 * offsets once (set in the same transaction as its first ones).  A flow
 * that has, but has no sdp.offsets row at all, was restored from a dump
 * whose sdp.offsets is not back yet (pg_dump restores sdp.flows first): its
 * worker waits for them instead of starting the topic over.  A partition
 * that has no row while others have one is a partition added to the topic:
 * it starts from starting_offsets.  And no flow starts before the restore
 * has set sdp.flows_id_seq, which pg_dump does after all table data
 * (restore_pending): its state and its target's rows are back by then.  On
 * a 0.1 catalog (the binary replaced, ALTER EXTENSION UPDATE not run yet)
 * there is no such column and only the sequence is waited for.
 */
#include "worker/worker_start.h"
#include "worker/backfill.h"
#include "compat.h"
#include "kafka/outbox.h"
#include "decl/catalog.h"
#include "decl/flow_options.h"
#include "decl/input_schema.h"
#include "kafka/kafka_properties.h"
#include "shmem/slots.h"
#include "worker/batch.h"
#include "worker/offsets.h"
#include "worker/skip.h"
#include "worker/stateful.h"
#include "exec/tombstone_delete.h"
#include "worker/worker_slot.h"

#include "access/relation.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/regproc.h"
#include "utils/snapmgr.h"

/* Partitions of the flow's share the topic does not have (yet), as last said in the log. */
static int	share_missing = 0;

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
	SdpFlowDecl decl;

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
		/* a sink flow: its rows go to the outbox, with its offsets (kafka/outbox.c) */
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
	if ((w->source.key_format == SDP_FORMAT_AVRO || w->source.key_format == SDP_FORMAT_PROTOBUF) &&
		w->opts.on_tombstone == SDP_TOMBSTONE_DELETE && w->opts.envelope != SDP_ENVELOPE_DEBEZIUM)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("option \"on_tombstone\": \"delete\" needs text keys, and the keys of source \"%s\" are %s",
						w->source.name, w->source.key_format == SDP_FORMAT_AVRO ? "Avro" : "Protobuf"),
				 errhint("Use \"skip\" or \"dead_letter\", or a source with key.format text.")));
	if (w->source.registry_url != NULL && w->registry == NULL)
		w->registry = sdp_registry_create(w->source.registry_url, w->source.properties, w->flow_cxt);

	if (w->sink_def.name == NULL)
	{
		names = sdp_qualified_name_list(w->target_name);
		w->target = RangeVarGetRelid(makeRangeVarFromNameList(names), NoLock, true);
		if (!OidIsValid(w->target))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_TABLE),
					 errmsg("target table %s of the flow does not exist", w->target_name)));
	}

	/* what it runs, checked and prepared by the function that checked its declaration */
	decl.name = w->args.name;
	decl.flow_id = w->args.flow_id;
	decl.worker_no = w->args.worker_no;
	decl.target = w->target;
	decl.sink = &w->sink_def;
	decl.schema_text = w->schema_text;
	decl.transform_sql = w->transform_sql;
	decl.operator_name = w->operator_name;
	decl.opts = &w->opts;
	sdp_flow_prepare(&decl, &w->prep, true);
	if (w->sink_def.name)
		w->target = w->prep.table_write.relid;	/* sdp.outbox */
	MemoryContextSwitchTo(oldcxt);

	/* The statements the worker runs on the catalogs, prepared once. */
	sdp_catalog_enter(&scope);
	sdp_batch_prepare(w);
	sdp_catalog_leave(&scope);

	/* the operator and its state store (the operator reads the catalogs: inside the transaction) */
	if (w->prep.op)
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
void
sdp_worker_load_flow(FlowWorker *w)
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
	w->config_generation = w->slot->ctl.config_generation;
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
		/* out of any transaction the error left open, interrupts held meanwhile */
		HOLD_INTERRUPTS();
		MemoryContextSwitchTo(w->flow_cxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortOutOfAnyTransaction();
		RESUME_INTERRUPTS();
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
			sdp_worker_fail(w, edata->message);
		/* not about the declaration, or a flow that has run: exit with the error, and let the launcher retry */
		sdp_worker_set_error(w, edata->message);
		ReThrowError(edata);
	}
	if (!wanted)
		sdp_worker_exit_expected(w);

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
void
sdp_worker_take_partitions(FlowWorker *w, int n, int32 *partitions)
{
	int32	   *mine = palloc(sizeof(int32) * n);
	int			nmine = 0;

	for (int i = 0; i < n; i++)
		if (sdp_worker_owns_partition(&w->opts, partitions[i], w->args.worker_no, w->args.nworkers))
			mine[nmine++] = partitions[i];
	w->parts.topic_n = n;
	/* the launcher runs no more workers than the topic has partitions (launcher.c) */
	SpinLockAcquire(&w->slot->mutex);
	w->slot->ctl.topic_partitions = n;
	SpinLockRelease(&w->slot->mutex);
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
		if (nmissing != share_missing && nmissing > 0)
			ereport(LOG,
					(errmsg("sdp flow \"%s\": topic \"%s\" has no partition%s %s (of option \"partitions\") yet",
							w->args.name, w->source.topic, nmissing > 1 ? "s" : "", missing.data),
					 errdetail("The topic has %d partitions. The flow consumes the rest of its share now, and %s once the topic has %s.",
							   n, nmissing > 1 ? "these" : "this one", nmissing > 1 ? "them" : "it")));
		share_missing = nmissing;
		pfree(missing.data);
	}
}

/* Connect to Kafka and start consuming the worker's partitions of the topic. */
void
sdp_worker_open_source(FlowWorker *w)
{
	int32	   *partitions;
	int			n;
	char	   *error;
	MemoryContext waitcxt;
	MemoryContext oldcxt = MemoryContextSwitchTo(w->flow_cxt);

	pgstat_report_activity(STATE_RUNNING, "sdp: connecting to Kafka");
	w->kafka = kafka_source_create(&w->source, w->args.name);
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
	if (w->prep.op)
		sdp_stateful_restore(w);
	sdp_worker_take_partitions(w, n, partitions);
	/* a backfill to run before the topic (its rows count as these partitions') */
	sdp_backfill_load(w);
	pgstat_report_activity(STATE_IDLE, NULL);
}

/*
 * Whether the flow has stored offsets before (sdp.flows.offsets_stored), and
 * in *has_flag whether the catalog has that column (0.2 and later).  In a
 * catalog scope, with SPI connected.
 */
static bool
flow_offsets_stored(FlowWorker *w, bool *has_flag)
{
	Oid			argtypes[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(w->args.flow_id)};
	bool		isnull;
	int			rc;

	rc = SPI_execute("SELECT 1 FROM pg_catalog.pg_attribute "
					 "WHERE attrelid = 'sdp.flows'::pg_catalog.regclass "
					 "AND attname = 'offsets_stored' AND NOT attisdropped",
					 true, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read the catalog of sdp.flows: %s", SPI_result_code_string(rc));
	*has_flag = (SPI_processed > 0);
	if (!*has_flag)
		return false;
	rc = SPI_execute_with_args("SELECT offsets_stored FROM sdp.flows WHERE id = $1",
							   1, argtypes, values, NULL, true, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read flow \"%s\": %s", w->args.name, SPI_result_code_string(rc));
	if (SPI_processed == 0)
		return false;			/* dropped meanwhile: storing its offsets will say so */
	return DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) && !isnull;
}

/*
 * Why the flow must wait for a restore to finish before it starts, or NULL.
 * In a catalog scope, with SPI connected.
 *
 * A flow that has stored offsets (offsets_stored) but has no sdp.offsets
 * row at all was restored without them, or before them: starting from
 * starting_offsets would read the topic again.  And no flow starts before
 * the restore has set sdp.flows_id_seq: pg_dump's sequence values come after
 * all table data, so by then its offsets, its state (sdp.state_checkpoints)
 * and its target's rows are back; a flow that wrote into its target before
 * the target's own rows were copied back would make the restore duplicate
 * them.  On a running server the sequence has always handed out the flow's
 * id, so this never waits there; it also holds for a dump taken on 0.1,
 * which has no offsets_stored.
 */
static const char *
restore_pending(FlowWorker *w)
{
	Oid			argtypes[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(w->args.flow_id)};
	bool		has_flag;
	bool		isnull;
	int			rc;

	if (flow_offsets_stored(w, &has_flag))
	{
		rc = SPI_execute_with_args("SELECT 1 FROM sdp.offsets WHERE flow_id = $1 LIMIT 1",
								   1, argtypes, values, NULL, true, 0);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "could not read sdp.offsets: %s", SPI_result_code_string(rc));
		if (SPI_processed == 0)
			return "waiting for its stored offsets: restored without sdp.offsets?";
	}
	rc = SPI_execute_with_args("SELECT is_called AND last_value >= $1 FROM sdp.flows_id_seq",
							   1, argtypes, values, NULL, true, 0);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not read sdp.flows_id_seq: %s", SPI_result_code_string(rc));
	if (!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
		return "waiting for the restore to finish (sdp.flows_id_seq is not restored yet): "
			"pg_dump sets it after all table data";
	return NULL;
}

/*
 * Whether the flow has run: it has stored offsets (its first assignment
 * stores them).  Outside any transaction; runs one of its own.
 */
bool
sdp_flow_has_run(FlowWorker *w)
{
	SdpCatalogScope scope;
	Oid			argtypes[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(w->args.flow_id)};
	bool		has_run;

	sdp_start_transaction();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	sdp_catalog_enter(&scope);
	if (SPI_execute_with_args("SELECT 1 FROM sdp.offsets WHERE flow_id = $1 LIMIT 1",
							  1, argtypes, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read sdp.offsets");
	has_run = SPI_processed > 0;
	sdp_catalog_leave(&scope);
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();
	return has_run;
}

/*
 * Wait, re-checking every second and responsive to stop requests, while a
 * restore of the flow is incomplete (restore_pending), saying why in
 * sdp.flow_status.last_error.  Runs outside any transaction.
 */
void
sdp_wait_for_restore(FlowWorker *w)
{
	SdpCatalogScope scope;
	const char *shown = NULL;

	for (;;)
	{
		const char *reason;

		sdp_start_transaction();
		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		sdp_catalog_enter(&scope);
		reason = restore_pending(w);
		sdp_catalog_leave(&scope);
		PopActiveSnapshot();
		SPI_finish();
		CommitTransactionCommand();
		if (reason == NULL)
			break;
		if (reason != shown)	/* one of restore_pending's constant texts */
		{
			ereport(LOG,
					(errmsg("sdp flow \"%s\" is %s", w->args.name, reason),
					 errhint("If its offsets are really gone, drop and re-create the flow.")));
			sdp_worker_set_error(w, reason);
			shown = reason;
		}
		pgstat_report_activity(STATE_IDLE, "sdp: waiting for the flow's restore");
		sdp_worker_wait(w, 1000);
	}
	if (shown != NULL)
	{
		ereport(LOG, (errmsg("sdp flow \"%s\" found its stored offsets", w->args.name)));
		SpinLockAcquire(&w->slot->mutex);
		w->slot->ctl.last_error[0] = '\0';
		w->slot->ctl.last_error_at = 0;
		SpinLockRelease(&w->slot->mutex);
	}
}

/*
 * Start consuming new partitions (all of them at start): from the offsets
 * committed in sdp.offsets, else from the topic's start or end
 * (starting_offsets), which are then stored at once.  Runs outside any
 * transaction and commits its own.
 */
void
sdp_assign_partitions(FlowWorker *w, int n, int32 *partitions)
{
	MemoryContext cxt = CurrentMemoryContext;
	int32	   *fresh = palloc(sizeof(int32) * Max(n, 1));
	int64	   *fresh_off = palloc(sizeof(int64) * Max(n, 1));
	bool	   *known = palloc(sizeof(bool) * Max(n, 1));
	int			nfresh = 0;
	Oid			argtypes[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(w->args.flow_id)};
	SdpCatalogScope scope;
	bool		has_flag = false;
	bool		stored = false;
	uint64		nrows;
	int			rc;

	/* a restore of the flow may not be complete yet: its offsets (and state) first */
	sdp_wait_for_restore(w);

	/* 1. where the flow stands on these partitions, as sdp.offsets says: a short transaction */
	sdp_start_transaction();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	sdp_catalog_enter(&scope);
	/* a stateful flow resumes where its checkpointed state was taken */
	if (SPI_execute_with_args(w->prep.op ? "SELECT partition, coalesce(state_offset, next_offset) FROM sdp.offsets WHERE flow_id = $1"
							  : "SELECT partition, next_offset FROM sdp.offsets WHERE flow_id = $1",
							  1, argtypes, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the offsets of flow \"%s\"", w->args.name);
	sdp_catalog_leave(&scope);
	nrows = SPI_processed;
	for (int i = 0; i < n; i++)
	{
		bool		isnull;

		if (sdp_partitions_index_of(&w->parts, partitions[i]) >= 0)
			continue;			/* already consuming it */
		known[nfresh] = false;
		for (uint64 r = 0; r < SPI_processed; r++)
		{
			if (DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1, &isnull)) == partitions[i])
			{
				fresh_off[nfresh] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 2, &isnull));
				known[nfresh] = true;
			}
		}
		fresh[nfresh++] = partitions[i];
	}
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);

	/*
	 * 2. Where the others start, from the brokers, outside any transaction:
	 * a broker that does not answer holds no snapshot, lock or xmin while
	 * the worker waits for it (retrying, with the reason in the status).
	 */
	for (int i = 0; i < nfresh; i++)
	{
		MemoryContext waitcxt;

		if (known[i])
			continue;
		waitcxt = AllocSetContextCreate(cxt, "sdp broker wait", ALLOCSET_SMALL_SIZES);
		for (;;)
		{
			int64		lo,
						hi;
			char	   *error;
			bool		ok;

			MemoryContextSwitchTo(waitcxt);
			if (w->source.start_at_time_set)
				/* the first message at or after the time (Kafka's offsets-for-times) */
				ok = kafka_source_lookup_time(&w->source, w->args.name, fresh[i],
											  sdp_timestamptz_to_unix_ms(w->source.start_at_time),
											  &fresh_off[i], 5000, &error);
			else
			{
				ok = kafka_source_query_watermarks(w->kafka, fresh[i], &lo, &hi, 5000, &error);
				if (ok)
					fresh_off[i] = w->source.start_at_earliest ? lo : hi;
			}
			if (ok)
				break;
			sdp_worker_wait_for_broker(w, psprintf("cannot start consuming partition %d", fresh[i]), error);
			MemoryContextReset(waitcxt);
		}
		MemoryContextSwitchTo(cxt);
		MemoryContextDelete(waitcxt);
		sdp_worker_broker_answered(w);
	}

	/* 3. their offsets stored, from where they start: a short transaction */
	if (nfresh > 0 || nrows > 0)
	{
		sdp_start_transaction();
		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		sdp_catalog_enter(&scope);
		stored = flow_offsets_stored(w, &has_flag);
		sdp_catalog_leave(&scope);
		if (nfresh > 0)
			sdp_store_offsets(w, nfresh, fresh, fresh_off, NULL, true);
		if (has_flag && !stored && (nfresh > 0 || nrows > 0))
		{
			/*
			 * In the same transaction as the flow's first offsets (or with the
			 * next assignment, for offsets stored on a 0.1 catalog that the
			 * update did not see).
			 */
			sdp_catalog_enter(&scope);
			rc = SPI_execute_with_args("UPDATE sdp.flows SET offsets_stored = true WHERE id = $1",
									   1, argtypes, values, NULL, false, 0);
			sdp_catalog_leave(&scope);
			if (rc != SPI_OK_UPDATE)
				elog(ERROR, "could not mark the offsets of flow \"%s\" stored: %s",
					 w->args.name, SPI_result_code_string(rc));
		}
		PopActiveSnapshot();
		SPI_finish();
		CommitTransactionCommand();
		MemoryContextSwitchTo(cxt);
	}

	if (nfresh == 0)
		return;
	kafka_source_assign(w->kafka, nfresh, fresh, fresh_off);

	sdp_partitions_add(&w->parts, nfresh, fresh, fresh_off, w->flow_cxt);
	sdp_worker_publish_committed(w);
	sdp_worker_publish_high_watermarks(w);
}

/*
 * stateful.c
 *		A flow's stateful operator in the worker: the operator stage of the
 *		batch pipeline (batch.c), event time, checkpoints and their restore.
 *
 * The operator stage hands the transform's rows to the operator by key,
 * advances the watermark with the batch's event times, and fires the due
 * timers; what the operator emits is written by the pipeline.  Operator
 * state is in shared memory and does not roll back with a transaction: once
 * this stage has run, a failed batch ends the worker (SDP_BATCH_RESTART),
 * and the new worker restores the last checkpoint and replays the messages
 * after it.
 *
 * Every checkpoint_interval the keys changed since the last checkpoint are
 * written to sdp.state_checkpoints in the batch's transaction, with the
 * offsets they correspond to (sdp.offsets.state_offset) and the watermark.
 * A flow with a Kafka sink checkpoints in every batch that emitted rows:
 * they are appended to its outbox, not upserted, so they must never be
 * emitted again by a replay.
 * A stateful flow stores its offsets only there: it restarts from its
 * checkpoint, not from its last batch.
 *
 * State is owned by Kafka partition.  Each key records the partition of the
 * row that created it (SdpStateEntry.partition), and its checkpoint row says
 * so (sdp.state_checkpoints.partition, from 0.3), next to that partition's
 * offsets: a worker restores the keys of its own partitions only, so a
 * partition and its state move together when the flow's workers change.
 * With workers > 1 a key must arrive on one partition only: a row of a key
 * that another partition owns (in this worker, in another worker of the
 * flow while that worker holds the key, or in the checkpoint of a worker
 * that has not restored it yet) fails the flow (check_ownership),
 * before the operator sees the batch: a flow whose topic is not keyed by
 * its operator's key never goes on with results that are wrong.  With one worker any partition
 * may feed any key, as before; the first one is recorded.
 *
 * Event time is per worker: its watermark comes from its own partitions,
 * and a checkpoint records it on each of them (sdp.offsets.watermark, from
 * 0.3); a worker restarts from the least watermark of its partitions.
 */
#include "worker/stateful.h"
#include "worker/worker_slot.h"

#include "worker/dead_letter.h"
#include "worker/offsets.h"
#include "decl/catalog.h"
#include "decl/flow_options.h"
#include "shmem/slots.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

static void prepare_plans(FlowWorker *w);

/*
 * The operator stage's state in the worker, its own: the rest of the
 * worker sees an opaque pointer (FlowWorker.stateful, NULL for a stateless
 * flow) and asks through the functions of stateful.h.
 */
struct SdpStatefulState
{
	SdpOperatorContext *opctx;
	SdpStateStore *store;
	size_t		state_limit;
	SPIPlanPtr	user_plan;		/* the flow's own transform's plan (the operator may run another) */
	MemoryContext transform_cxt;	/* the operator's transform, when it builds one: replaced at a reload */

	/* checkpoints */
	SPIPlanPtr	checkpoint_put_plan;
	SPIPlanPtr	checkpoint_delete_plan;
	SPIPlanPtr	checkpoint_offsets_plan;
	SPIPlanPtr	checkpoint_watermark_plan;
	bool		partitioned_state;	/* the catalog records keys' partitions (0.3 and later) */
	TimestampTz next_checkpoint;
	bool		offsets_moved;	/* since the last checkpoint */
	bool		checkpoint_deferred;	/* a due checkpoint left to the batch after one that emitted */

	/* the batch under way */
	bool		state_mutated;	/* the operator has changed state (sdp_stateful_end_attempt) */
	TimestampTz attempt_watermark;	/* the watermark when the attempt began (an operator that undoes) */
	bool		initial_pending;	/* the operator's initial state is to run (a flow that never checkpointed) */
	char	   *flow_fault;		/* an error that fails the flow, not a message (check_ownership) */

	/* workers > 1: who owns the keys */
	HTAB	   *batch_owners;	/* key -> partition claimed by this attempt's rows */
	SdpStateStore **sibling;	/* the other workers' stores, attached to read owners */
	dsa_handle *sibling_area;	/* ... and the areas they are */

	/* event time: per partition id, the highest event time seen and when data last came */
	int			event_time_index;	/* in the input schema, -1 when none */
	int			nwm;
	TimestampTz *wm_max;		/* highest event time seen, DT_NOBEGIN: none yet */
	TimestampTz *wm_last;		/* when data last came (or when the partition was first seen) */
	int64	   *wm_pos;			/* next offset, as far as this worker has read */
	TimestampTz wm_last_data;	/* when data last came on any partition */
};
#include "utils/timestamp.h"

/* Replace the flow's transform by the one the operator builds over the flow's rows. */
static void
build_operator_transform(FlowWorker *w)
{
	MemoryContext previous_cxt = w->stateful->transform_cxt;
	MemoryContext cxt = AllocSetContextCreate(w->flow_cxt, "sdp operator transform", ALLOCSET_SMALL_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	SPIPlanPtr	previous = w->prep.transform.plan;
	char	   *sql = w->prep.op->build_transform(w->stateful->opctx, w->transform_sql, w->prep.rows_desc);

	sdp_transform_prepare_generated(&w->prep.transform, w->prep.schema, sql, 0, NULL);
	SPI_keepplan(w->prep.transform.plan);
	MemoryContextSwitchTo(old);
	/* the one it replaces goes, plan and all: a reload leaves nothing behind */
	if (previous && previous != w->stateful->user_plan)
		SPI_freeplan(previous);
	if (previous_cxt)
		MemoryContextDelete(previous_cxt);
	w->stateful->transform_cxt = cxt;
}

/*
 * Create the state store and the operator (at worker start, in a
 * transaction): the operator may build the transform itself, and gets the
 * descriptors of the rows it receives and emits.
 */
void
sdp_stateful_start(FlowWorker *w)
{
	dsa_handle	area;
	dshash_table_handle table;

	SdpCatalogScope scope;

	w->stateful = MemoryContextAllocZero(TopMemoryContext, sizeof(SdpStatefulState));
	/* the checkpoint statements, on the catalogs */
	sdp_catalog_enter(&scope);
	prepare_plans(w);
	sdp_catalog_leave(&scope);

	w->stateful->state_limit = (size_t) w->opts.state_memory_limit_kb * 1024;
	w->stateful->store = sdp_state_create(w->stateful->state_limit, w->prep.op->map_value_len, &area, &table);
	SDP_SLOT_STATS_BEGIN_WRITE(w->slot);
	w->slot->stats.state_area = area;
	w->slot->stats.state_table = table;
	w->slot->stats.state_options = sdp_operator_options_hash(w->opts.operator_options);
	SDP_SLOT_STATS_END_WRITE(w->slot);

	w->prep.rows_desc = w->prep.transform.result_desc;
	w->stateful->user_plan = w->prep.transform.plan;
	w->stateful->opctx = sdp_operator_create(w->prep.op, w->args.name, w->opts.operator_options, w->stateful->store, w->prep.rows_desc);
	/* a sink flow's rows go to the outbox: no target for the operator's housekeeping */
	w->stateful->opctx->target_relname = w->prep.emitted_desc ? NULL : w->prep.table_write.relname;
	if (w->prep.op->build_transform)
		build_operator_transform(w);
	sdp_operator_bind(w->stateful->opctx, w->prep.transform.result_desc, w->prep.emitted_desc ? w->prep.emitted_desc : w->prep.table_write.row_desc);

	/* event time comes from a timestamptz column of the input schema */
	w->stateful->event_time_index = -1;
	if (w->stateful->opctx->event_time_column)
	{
		for (int i = 0; i < w->prep.schema->ncolumns; i++)
			if (strcmp(w->prep.schema->columns[i].name, w->stateful->opctx->event_time_column) == 0 &&
				w->prep.schema->columns[i].typid == TIMESTAMPTZOID)
				w->stateful->event_time_index = i;
		if (w->stateful->event_time_index < 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("event_time column \"%s\" is not a timestamptz column of the input schema",
							w->stateful->opctx->event_time_column)));
	}
	w->stateful->next_checkpoint = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), w->opts.checkpoint_interval_ms);
	if (w->args.nworkers > 1)
	{
		w->stateful->sibling = MemoryContextAllocZero(TopMemoryContext, sizeof(SdpStateStore *) * w->args.nworkers);
		w->stateful->sibling_area = MemoryContextAllocZero(TopMemoryContext, sizeof(dsa_handle) * w->args.nworkers);
	}
}

/* The flow's operator configuration changed (e.g. an aggregation was added): reload it. */
void
sdp_stateful_reload_if_changed(FlowWorker *w)
{
	uint64		generation;

	SpinLockAcquire(&w->slot->mutex);
	generation = w->slot->ctl.config_generation;
	SpinLockRelease(&w->slot->mutex);
	if (generation == w->config_generation || w->prep.op->reload == NULL)
		return;

	sdp_start_transaction();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "sdp: reloading the operator's configuration");
	w->config_generation = generation;
	w->prep.op->reload(w->stateful->opctx);	/* in the operator's own memory (operator.h) */
	if (w->prep.op->build_transform)
		build_operator_transform(w);
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
	ereport(LOG, (errmsg("sdp flow \"%s\" reloaded its %s configuration", w->args.name, w->prep.op->name)));
}

/* ---- key ownership ---- */

/*
 * Whether the catalog is 0.3 or later: sdp.state_checkpoints.partition and
 * sdp.offsets.watermark exist (an older catalog runs as 0.2 did, one worker).
 * In a catalog scope, with SPI connected.
 */
static bool
catalog_has_partitioned_state(void)
{
	int			rc = SPI_execute("SELECT 1 FROM pg_catalog.pg_attribute "
								 "WHERE attrelid = 'sdp.state_checkpoints'::pg_catalog.regclass "
								 "AND attname = 'partition' AND NOT attisdropped",
								 true, 0);

	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read the catalog of sdp.state_checkpoints: %s", SPI_result_code_string(rc));
	return SPI_processed > 0;
}

/* Attach to a sibling's store, or NULL when its area has gone with its worker. */
static SdpStateStore *
attach_sibling(dsa_handle area, dshash_table_handle table)
{
	ResourceOwner owner = CurrentResourceOwner;
	MemoryContext cxt = CurrentMemoryContext;
	SdpStateStore *volatile store = NULL;

	BeginInternalSubTransaction(NULL);
	PG_TRY();
	{
		MemoryContextSwitchTo(TopMemoryContext);
		store = sdp_state_attach(area, table);
		dsa_pin_mapping(store->area);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		if (edata->sqlerrcode != ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE)
			ReThrowError(edata);
		/* "could not attach to dynamic shared area": no owner there */
		FreeErrorData(edata);
		store = NULL;
	}
	PG_END_TRY();
	return store;
}

/*
 * The state store of worker k of the flow, attached for reading, or NULL
 * when that worker has none (not started yet, or its area has gone).  A
 * worker that restarted has a new area: the old one is detached.
 */
static SdpStateStore *
sibling_store(FlowWorker *w, int k)
{
	dsa_handle	area = 0;
	dshash_table_handle table = 0;

	LWLockAcquire(SdpShmem->lock, LW_SHARED);
	for (int s = sdp_slot_next(w->args.name, -1); s >= 0; s = sdp_slot_next(w->args.name, s))
	{
		SdpFlowSlot *slot = &SdpShmem->slots[s];

		if (slot->worker_no != k || slot->nworkers != w->args.nworkers)
			continue;			/* not a worker of this generation's division */
		sdp_slot_read_state_store(slot, &area, &table);
	}
	LWLockRelease(SdpShmem->lock);

	if (area == w->stateful->sibling_area[k])
		return w->stateful->sibling[k];
	if (w->stateful->sibling[k])
		sdp_state_detach(w->stateful->sibling[k]);
	w->stateful->sibling[k] = NULL;
	w->stateful->sibling_area[k] = area;
	if (area != 0)
		w->stateful->sibling[k] = attach_sibling(area, table);
	return w->stateful->sibling[k];
}

/*
 * A new attempt at a batch: the keys its rows have claimed so far are
 * forgotten, and the other workers' stores are looked up (once per
 * attempt, not per key: each look takes SdpShmem->lock).
 */
void
sdp_stateful_begin_attempt(FlowWorker *w)
{
	HASHCTL		ctl;

	w->stateful->attempt_watermark = w->stateful->opctx->watermark;
	if (w->args.nworkers <= 1)
		return;
	for (int k = 0; k < w->args.nworkers; k++)
		if (k != w->args.worker_no)
			(void) sibling_store(w, k);
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = SDP_STATE_KEY_MAX;
	ctl.entrysize = SDP_STATE_KEY_MAX + sizeof(int32);
	ctl.hcxt = CurrentMemoryContext;
	w->stateful->batch_owners = hash_create("sdp batch key owners", 256, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

/*
 * A key that arrives on two partitions in a flow with several workers:
 * each worker would keep its own part of the key's state, and every result
 * of the key would be wrong.  That is the flow's topology, not a message:
 * the flow fails (w->stateful->flow_fault, batch.c) with what to do, and nothing of
 * the batch commits.
 */
static void
ownership_error(FlowWorker *w, const char *key, int32 owner, int32 partition)
{
	char	   *msg = psprintf("key \"%s\" of operator %s arrives on partitions %d and %d, and a flow with %d workers keeps the state of a key in the worker of its partition, "
							   "so its results would be wrong; run the flow in one worker (SELECT sdp_set_flow_workers('%s', 1)), "
							   "or key its topic by the operator's key (re-key it through a sink, as the two-stage zone flow does)",
							   key, w->prep.op->name, Min(owner, partition), Max(owner, partition), w->args.nworkers,
							   w->args.name);

	w->stateful->flow_fault = MemoryContextStrdup(w->batch_cxt, msg);
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("%s", msg),
			 errdetail("The key's state is owned by partition %d; this row came from partition %d.", owner, partition)));
}

/*
 * The claims (key, partition) of keys that no live store holds, against
 * the partitions sdp.state_checkpoints records for them: one lookup by the
 * primary key for the batch's new keys.
 */
static void
check_checkpointed_owners(FlowWorker *w, HTAB *claims, List *unheld)
{
	SdpCatalogScope scope;
	Oid			argtypes[2] = {INT8OID, TEXTARRAYOID};
	Datum		values[2];
	Datum	   *keys = palloc(sizeof(Datum) * list_length(unheld));
	int			nkeys = 0;
	ListCell   *lc;

	foreach(lc, unheld)
		keys[nkeys++] = CStringGetTextDatum((char *) lfirst(lc));
	values[0] = Int64GetDatum(w->args.flow_id);
	values[1] = PointerGetDatum(construct_array(keys, nkeys, TEXTOID, -1, false, TYPALIGN_INT));
	sdp_catalog_enter(&scope);
	if (SPI_execute_with_args("SELECT key, partition FROM sdp.state_checkpoints "
							  " WHERE flow_id = $1 AND key = ANY ($2) AND partition IS NOT NULL",
							  2, argtypes, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the state checkpoint");
	sdp_catalog_leave(&scope);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		char		buf[SDP_STATE_KEY_MAX];
		char	   *claim;
		int32		theirs = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull));

		memset(buf, 0, sizeof(buf));
		strlcpy(buf, SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1), sizeof(buf));
		if ((claim = hash_search(claims, buf, HASH_FIND, NULL)) != NULL &&
			*(int32 *) (claim + SDP_STATE_KEY_MAX) != theirs)
			ownership_error(w, buf, theirs, *(int32 *) (claim + SDP_STATE_KEY_MAX));
	}
	SPI_freetuptable(SPI_tuptable);
}

/*
 * With workers > 1, every row's key must be owned by the row's partition:
 * the partition that created the key's state, in this worker or in
 * another of the flow's, or the first of this batch's rows of the key.  A
 * row that breaks it fails the flow before any state changes
 * (ownership_error).  What rows of this call claim counts only once the
 * call has gone through.
 */
static void
check_ownership(FlowWorker *w, HeapTuple *rows, const int32 *partitions, int n)
{
	HASHCTL		ctl;
	HTAB	   *claims;
	HASH_SEQ_STATUS seq;
	char	   *claim;
	List	   *unheld = NIL;

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = SDP_STATE_KEY_MAX;
	ctl.entrysize = SDP_STATE_KEY_MAX + sizeof(int32);
	ctl.hcxt = CurrentMemoryContext;
	claims = hash_create("sdp key claims", Max(Min(n, 1024), 16), &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);

	for (int i = 0; i < n; i++)
	{
		char	   *text = sdp_operator_row_key(w->stateful->opctx, rows[i]);
		char		buf[SDP_STATE_KEY_MAX];
		char	   *entry;
		bool		found;
		int32		owner = -1;

		if (text == NULL || partitions[i] < 0)
			continue;			/* no key, or no partition known: nothing to own */
		memset(buf, 0, sizeof(buf));
		strlcpy(buf, text, sizeof(buf));
		pfree(text);
		if ((entry = hash_search(claims, buf, HASH_FIND, NULL)) != NULL ||
			(entry = hash_search(w->stateful->batch_owners, buf, HASH_FIND, NULL)) != NULL)
		{
			owner = *(int32 *) (entry + SDP_STATE_KEY_MAX);
			if (owner >= 0 && owner != partitions[i])
				ownership_error(w, buf, owner, partitions[i]);
			continue;
		}
		/* the first row of the key in this batch: who owns it now */
		owner = sdp_state_key_partition(w->stateful->store, buf, &found);
		for (int k = 0; k < w->args.nworkers; k++)
		{
			SdpStateStore *sibling;
			int32		theirs;
			bool		held;

			if (k == w->args.worker_no || (sibling = w->stateful->sibling[k]) == NULL)
				continue;			/* (looked up at the attempt's start) */
			theirs = sdp_state_key_partition(sibling, buf, &held);
			if (held && theirs >= 0 && theirs != partitions[i])
				ownership_error(w, buf, theirs, partitions[i]);
		}
		if (found && owner >= 0 && owner != partitions[i])
			ownership_error(w, buf, owner, partitions[i]);
		entry = hash_search(claims, buf, HASH_ENTER, NULL);
		*(int32 *) (entry + SDP_STATE_KEY_MAX) = partitions[i];
		if (!found)
			unheld = lappend(unheld, entry);
	}

	/*
	 * Keys no store holds may still be another partition's: checkpointed by
	 * a worker that has not restored yet (the workers start one by one) or
	 * is restarting.  The checkpoint says whose they are.
	 */
	if (unheld != NIL)
		check_checkpointed_owners(w, claims, unheld);

	hash_seq_init(&seq, claims);
	while ((claim = hash_seq_search(&seq)) != NULL)
	{
		char	   *entry = hash_search(w->stateful->batch_owners, claim, HASH_ENTER, NULL);

		*(int32 *) (entry + SDP_STATE_KEY_MAX) = *(int32 *) (claim + SDP_STATE_KEY_MAX);
	}
	hash_destroy(claims);
}

/* ---- event time ---- */

static void
ensure_partition_slots(FlowWorker *w, int32 partition)
{
	int			n = w->stateful->nwm;

	if (partition < n)
		return;
	while (n <= partition)
		n = Max(n * 2, 16);
	w->stateful->wm_max = w->stateful->wm_max ? repalloc(w->stateful->wm_max, sizeof(TimestampTz) * n)
		: MemoryContextAlloc(TopMemoryContext, sizeof(TimestampTz) * n);
	w->stateful->wm_last = w->stateful->wm_last ? repalloc(w->stateful->wm_last, sizeof(TimestampTz) * n)
		: MemoryContextAlloc(TopMemoryContext, sizeof(TimestampTz) * n);
	w->stateful->wm_pos = w->stateful->wm_pos ? repalloc(w->stateful->wm_pos, sizeof(int64) * n)
		: MemoryContextAlloc(TopMemoryContext, sizeof(int64) * n);
	for (int i = w->stateful->nwm; i < n; i++)
	{
		w->stateful->wm_max[i] = DT_NOBEGIN;
		w->stateful->wm_last[i] = 0;
		w->stateful->wm_pos[i] = -1;
	}
	w->stateful->nwm = n;
}

/*
 * The highest event time and the read position per partition, from every
 * decoded message of the batch.
 *
 * A partition that had been idle (or had no data yet) and has data again
 * is a stream that resumes: its other partitions are likely to resume
 * too, but their data may come later (Apache Kafka hands a consumer a
 * whole fetch of one partition, thousands of messages, before the next
 * partition's).  So each partition that is idle then holds the watermark
 * back again for idle_timeout, or until its own data comes, as at the
 * flow's start; without it the watermark moved with the first partitions
 * of a burst and made the others' first events late.
 */
static void
observe_event_times(FlowWorker *w, Batch *b, TimestampTz now)
{
	int			pcol = w->prep.schema->ncolumns + SDP_META_PARTITION + 1;
	int			ocol = w->prep.schema->ncolumns + SDP_META_OFFSET + 1;
	int64		idle = w->stateful->opctx->idle_timeout_us;
	bool		resumed = false;

	if (w->stateful->event_time_index < 0 || b == NULL)
		return;
	for (int i = 0; i < b->nrows; i++)
	{
		bool		pnull,
					onull,
					tnull;
		int32		p = DatumGetInt32(heap_getattr(b->rows[i], pcol, w->prep.schema->tupdesc, &pnull));
		int64		o = DatumGetInt64(heap_getattr(b->rows[i], ocol, w->prep.schema->tupdesc, &onull));
		TimestampTz t = DatumGetTimestampTz(heap_getattr(b->rows[i], w->stateful->event_time_index + 1,
														 w->prep.schema->tupdesc, &tnull));

		if (pnull || p < 0)
			continue;
		ensure_partition_slots(w, p);
		if (w->stateful->wm_last[p] == 0 || w->stateful->wm_max[p] == DT_NOBEGIN || now - w->stateful->wm_last[p] >= idle)
			resumed = true;		/* its first data, or its first after idle_timeout */
		w->stateful->wm_last[p] = now;
		w->stateful->wm_last_data = now;
		if (!onull && o + 1 > w->stateful->wm_pos[p])
			w->stateful->wm_pos[p] = o + 1;
		if (!tnull && t > w->stateful->wm_max[p] && sdp_event_time_usable(t))
			w->stateful->wm_max[p] = t;
	}
	if (!resumed)
		return;
	for (int i = 0; i < w->parts.n; i++)
	{
		int32		q = w->parts.ids[i];

		ensure_partition_slots(w, q);
		if (w->stateful->wm_last[q] != 0 && now - w->stateful->wm_last[q] >= idle)
			w->stateful->wm_last[q] = now;
	}
}

/*
 * The flow's watermark: the least highest event time among the active
 * partitions.  A partition is active while data came within idle_timeout,
 * or while the broker holds messages it has not read yet (it is behind,
 * not idle); a partition that has had no data since the flow started holds
 * the watermark back until idle_timeout has passed.  When no partition is
 * active, the watermark moves on with the clock from the last data.  Never
 * goes back.
 */
static void
advance_watermark(FlowWorker *w, TimestampTz now)
{
	SdpOperatorContext *ctx = w->stateful->opctx;
	TimestampTz active_min = DT_NOEND;
	TimestampTz all_max = DT_NOBEGIN;
	bool		any = false;
	TimestampTz wm;

	if (w->stateful->event_time_index < 0)
		return;
	for (int i = 0; i < w->parts.n; i++)
	{
		int32		p = w->parts.ids[i];
		int64		pos;
		bool		active;

		ensure_partition_slots(w, p);
		if (w->stateful->wm_last[p] == 0)
			w->stateful->wm_last[p] = now;	/* first seen: it may hold the watermark back for idle_timeout */
		pos = Max(w->stateful->wm_pos[p], w->parts.next[i]);
		active = (now - w->stateful->wm_last[p] < ctx->idle_timeout_us) ||
			kafka_source_cached_high_watermark(w->kafka, p) > pos;
		if (active)
		{
			any = true;
			active_min = Min(active_min, w->stateful->wm_max[p]);
		}
		all_max = Max(all_max, w->stateful->wm_max[p]);
	}
	if (w->backfill != NULL && all_max != DT_NOBEGIN)
		wm = all_max;			/* a backfill's rows come in event-time order (sql/backfill.c): none is behind the last */
	else if (any)
		wm = active_min;
	else if (all_max != DT_NOBEGIN)
		wm = all_max + (now - w->stateful->wm_last_data);	/* the whole stream is quiet: event time moves with the clock */
	else
		return;
	if (wm > ctx->watermark)
		ctx->watermark = wm;
	SDP_SLOT_STATS_BEGIN_WRITE(w->slot);
	w->slot->stats.watermark = ctx->watermark;
	SDP_SLOT_STATS_END_WRITE(w->slot);
}

/*
 * The checkpoint statements (in a catalog scope, with SPI connected).  On a
 * catalog older than 0.3 they are those of 0.2, and the flow runs in one
 * worker.
 */
static void
prepare_plans(FlowWorker *w)
{
	Oid			put_types[4] = {INT8OID, TEXTARRAYOID, BYTEAARRAYOID, INT4ARRAYOID};
	Oid			del_types[2] = {INT8OID, TEXTARRAYOID};
	Oid			off_types[2] = {INT8OID, INT4ARRAYOID};
	Oid			wm_types[4] = {INT8OID, INT4ARRAYOID, TIMESTAMPTZARRAYOID, TIMESTAMPTZOID};

	w->stateful->partitioned_state = catalog_has_partitioned_state();
	if (!w->stateful->partitioned_state && w->args.nworkers > 1)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("flow \"%s\" has an operator and %d workers, which needs the catalogs of sdp_ext 0.3",
						w->args.name, w->args.nworkers),
				 errhint("Run ALTER EXTENSION sdp_ext UPDATE, or sdp_set_flow_workers('%s', 1).", w->args.name)));
	if (w->stateful->partitioned_state)
	{
		w->stateful->checkpoint_put_plan = SPI_prepare("INSERT INTO sdp.state_checkpoints AS c (flow_id, key, partition, state, updated_at) "
											 "SELECT $1, u.k, nullif(u.p, -1), u.s, now() FROM unnest($2, $3, $4) AS u(k, s, p) "
											 "ON CONFLICT (flow_id, key) DO UPDATE "
											 "SET partition = EXCLUDED.partition, state = EXCLUDED.state, "
											 "    updated_at = EXCLUDED.updated_at",
											 4, put_types);
		/* the watermark of this worker on each of its partitions: where it restarts from */
		w->stateful->checkpoint_watermark_plan = SPI_prepare("WITH o AS (UPDATE sdp.offsets o SET max_event_time = u.t, watermark = $4 "
												   "  FROM unnest($2, $3) AS u(p, t) "
												   " WHERE o.flow_id = $1 AND o.partition = u.p RETURNING 1) "
												   "UPDATE sdp.flows SET watermark = $4 WHERE id = $1 AND $5",
												   5, (Oid[]) {INT8OID, INT4ARRAYOID, TIMESTAMPTZARRAYOID, TIMESTAMPTZOID, BOOLOID});
	}
	else
	{
		w->stateful->checkpoint_put_plan = SPI_prepare("INSERT INTO sdp.state_checkpoints AS c (flow_id, key, state, updated_at) "
											 "SELECT $1, u.k, u.s, now() FROM unnest($2, $3) AS u(k, s) "
											 "ON CONFLICT (flow_id, key) DO UPDATE "
											 "SET state = EXCLUDED.state, updated_at = EXCLUDED.updated_at",
											 3, put_types);
		w->stateful->checkpoint_watermark_plan = SPI_prepare("WITH o AS (UPDATE sdp.offsets o SET max_event_time = u.t "
												   "  FROM unnest($2, $3) AS u(p, t) "
												   " WHERE o.flow_id = $1 AND o.partition = u.p RETURNING 1) "
												   "UPDATE sdp.flows SET watermark = $4 WHERE id = $1",
												   4, wm_types);
	}
	w->stateful->checkpoint_delete_plan = SPI_prepare("DELETE FROM sdp.state_checkpoints WHERE flow_id = $1 AND key = ANY ($2)",
											2, del_types);
	/* in the batch's transaction, after its offsets: the state of this worker's partitions now matches them */
	w->stateful->checkpoint_offsets_plan = SPI_prepare("UPDATE sdp.offsets SET state_offset = next_offset "
											 " WHERE flow_id = $1 AND partition = ANY ($2)",
											 2, off_types);
	if (w->stateful->checkpoint_put_plan == NULL || w->stateful->checkpoint_delete_plan == NULL ||
		w->stateful->checkpoint_offsets_plan == NULL || w->stateful->checkpoint_watermark_plan == NULL)
		elog(ERROR, "could not prepare checkpoint statements: %s", SPI_result_code_string(SPI_result));
	SPI_keepplan(w->stateful->checkpoint_put_plan);
	SPI_keepplan(w->stateful->checkpoint_delete_plan);
	SPI_keepplan(w->stateful->checkpoint_offsets_plan);
	SPI_keepplan(w->stateful->checkpoint_watermark_plan);
}

/* Show the state's size, timers fired and the last checkpoint in the slot. */
void
sdp_stateful_publish(FlowWorker *w, bool checkpointed)
{
	size_t		bytes = sdp_state_memory(w->stateful->store);
	TimestampTz now = checkpointed ? GetCurrentTimestamp() : 0;

	SDP_SLOT_STATS_BEGIN_WRITE(w->slot);
	w->slot->stats.state_bytes = bytes;
	w->slot->stats.timers_fired = w->stateful->opctx->timers_fired;
	if (checkpointed)
		w->slot->stats.last_checkpoint_at = now;
	SDP_SLOT_STATS_END_WRITE(w->slot);
}

/*
 * Restore the last checkpoint into the (empty) store, and index its timers:
 * the keys of this worker's partitions (partition % nworkers = worker_no,
 * or its part of the flow's share: sdp_worker_owns_partition), and worker 0
 * takes those of no known partition (checkpointed before 0.3); then the
 * watermark, the least that this worker's partitions were checkpointed
 * with (each had the watermark of the worker that had it).
 */
void
sdp_stateful_restore(FlowWorker *w)
{
	SdpCatalogScope scope;
	Oid			argtypes[4] = {INT8OID, INT4OID, INT4OID, INT4ARRAYOID};
	Datum		values[4] = {Int64GetDatum(w->args.flow_id), Int32GetDatum(w->args.nworkers),
	Int32GetDatum(w->args.worker_no), (Datum) 0};
	char		nulls[4] = {' ', ' ', ' ', 'n'};
	uint64		nkeys;
	int			nest = -1;

	sdp_start_transaction();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "sdp: restoring state");
	/* with a share, the partitions of it that are this worker's ($4); else $4 is NULL */
	if (w->opts.nshare > 0)
	{
		Datum	   *own = palloc(sizeof(Datum) * w->opts.nshare);
		int			nown = 0;

		for (int i = 0; i < w->opts.nshare; i++)
			if (sdp_worker_owns_partition(&w->opts, w->opts.share[i], w->args.worker_no, w->args.nworkers))
				own[nown++] = Int32GetDatum(w->opts.share[i]);
		values[3] = PointerGetDatum(construct_array(own, nown, INT4OID, 4, true, TYPALIGN_INT));
		nulls[3] = ' ';
	}
	sdp_catalog_enter(&scope);
	if (SPI_execute_with_args(w->stateful->partitioned_state
							  ? "SELECT key, state, coalesce(partition, -1) FROM sdp.state_checkpoints "
							  " WHERE flow_id = $1 AND (CASE WHEN $4 IS NULL THEN partition % $2 = $3 ELSE partition = ANY ($4) END "
							  "      OR (partition IS NULL AND $3 = 0))"
							  : "SELECT key, state, -1 FROM sdp.state_checkpoints WHERE flow_id = $1 AND $2 > 0 AND $3 >= 0",
							  4, argtypes, values, nulls, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the state checkpoint");
	sdp_catalog_leave(&scope);
	nkeys = SPI_processed;
	/* what the operator's own state is read with (a processor's: the settings its text was written with) */
	if (w->stateful->store->ext_ops != NULL && w->stateful->store->ext_ops->io_begin != NULL)
		nest = w->stateful->store->ext_ops->io_begin();
	for (uint64 i = 0; i < nkeys; i++)
	{
		bool		isnull;
		char	   *key = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		bytea	   *blob = DatumGetByteaPP(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull));
		int32		partition = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 3, &isnull));

		sdp_state_restore(w->stateful->store, key, partition, blob);
		CHECK_FOR_INTERRUPTS();
	}
	if (nest >= 0)
		w->stateful->store->ext_ops->io_end(nest);
	/* the event-time watermark and the partitions' highest event times of the checkpoint */
	if (w->stateful->event_time_index >= 0)
	{
		TimestampTz now = GetCurrentTimestamp();
		bool		isnull;
		Datum		wm = (Datum) 0;
		bool		wm_null = true;

		sdp_catalog_enter(&scope);
		if (w->stateful->partitioned_state)
		{
			if (SPI_execute_with_args("SELECT min(watermark) FROM sdp.offsets WHERE flow_id = $1 "
									  "   AND CASE WHEN $4 IS NULL THEN partition % $2 = $3 ELSE partition = ANY ($4) END",
									  4, argtypes, values, nulls, true, 0) != SPI_OK_SELECT)
				elog(ERROR, "could not read the watermarks of flow \"%s\"", w->args.name);
			if (SPI_processed == 1)
				wm = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &wm_null);
		}
		/* none recorded per partition yet (a checkpoint before 0.3): the flow's */
		if (wm_null)
		{
			if (SPI_execute_with_args("SELECT watermark FROM sdp.flows WHERE id = $1", 1, argtypes, values, nulls, true, 0) != SPI_OK_SELECT)
				elog(ERROR, "could not read the watermark of flow \"%s\"", w->args.name);
			if (SPI_processed == 1)
				wm = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &wm_null);
		}
		if (!wm_null)
			w->stateful->opctx->watermark = DatumGetTimestampTz(wm);
		if (SPI_execute_with_args("SELECT partition, max_event_time FROM sdp.offsets "
								  " WHERE flow_id = $1 AND max_event_time IS NOT NULL "
								  "   AND CASE WHEN $4 IS NULL THEN partition % $2 = $3 ELSE partition = ANY ($4) END",
								  4, argtypes, values, nulls, true, 0) != SPI_OK_SELECT)
			elog(ERROR, "could not read the event times of flow \"%s\"", w->args.name);
		sdp_catalog_leave(&scope);
		for (uint64 i = 0; i < SPI_processed; i++)
		{
			int32		p = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));

			ensure_partition_slots(w, p);
			w->stateful->wm_max[p] = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull));
			w->stateful->wm_last[p] = now;	/* counted as active until they are idle again */
			w->stateful->wm_last_data = now;
		}
	}
	/* an operator's initial state: in the first batch of a flow that never checkpointed */
	if (w->prep.op->initial)
	{
		sdp_catalog_enter(&scope);
		if (SPI_execute_with_args("SELECT 1 FROM sdp.offsets WHERE flow_id = $1 AND state_offset IS NOT NULL LIMIT 1",
								  1, argtypes, values, nulls, true, 0) != SPI_OK_SELECT)
			elog(ERROR, "could not read the offsets of flow \"%s\"", w->args.name);
		w->stateful->initial_pending = SPI_processed == 0 && nkeys == 0;
		sdp_catalog_leave(&scope);
	}
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();
	sdp_operator_index_timers(w->stateful->opctx);
	sdp_stateful_publish(w, false);
	if (nkeys > 0)
		ereport(LOG,
				(errmsg("sdp flow \"%s\" restored the state of %llu keys from its checkpoint",
						w->args.name, (unsigned long long) nkeys)));
}

/*
 * Write the keys changed since the last checkpoint, and the offsets they
 * match (next_offset: where the batches are; state_offset: where this state
 * is; the same, as the checkpoint is taken between batches).  A stateful
 * flow writes its offsets only here: it restarts from its checkpoint, not
 * from its last batch.
 */
static void
write_checkpoint(FlowWorker *w, int64 *next)
{
	MemoryContext cxt = CurrentMemoryContext;
	HASH_SEQ_STATUS seq;
	char	   *dirty;
	long		ndirty = hash_get_num_entries(w->stateful->store->dirty);
	char	  **keys = palloc(sizeof(char *) * Max(ndirty, 1));
	int			n = 0;
	Datum	   *put_keys = palloc(sizeof(Datum) * Max(ndirty, 1));
	Datum	   *put_blobs = palloc(sizeof(Datum) * Max(ndirty, 1));
	Datum	   *put_parts = palloc(sizeof(Datum) * Max(ndirty, 1));
	Datum	   *del_keys = palloc(sizeof(Datum) * Max(ndirty, 1));
	int			nput = 0,
				ndel = 0;
	SdpCatalogScope scope;
	Datum		values[4];
	Datum	   *own = palloc(sizeof(Datum) * Max(w->parts.n, 1));
	int			nest = -1;

	hash_seq_init(&seq, w->stateful->store->dirty);
	while ((dirty = hash_seq_search(&seq)) != NULL)
		keys[n++] = pstrdup(dirty);
	/* what the operator's own state is written with (a processor's text: settings pinned, read back alike) */
	if (w->stateful->store->ext_ops != NULL && w->stateful->store->ext_ops->io_begin != NULL)
		nest = w->stateful->store->ext_ops->io_begin();
	for (int i = 0; i < n; i++)
	{
		SdpKeyState ks;

		sdp_state_open_key(w->stateful->store, keys[i], false, &ks);
		if (ks.entry)
		{
			put_keys[nput] = CStringGetTextDatum(keys[i]);
			put_parts[nput] = Int32GetDatum(ks.entry->partition);
			put_blobs[nput++] = PointerGetDatum(sdp_state_serialize(w->stateful->store, ks.entry));
		}
		else
			del_keys[ndel++] = CStringGetTextDatum(keys[i]);	/* deleted, or resting: deleted now */
		sdp_state_close_key(&ks);
		CHECK_FOR_INTERRUPTS();
	}
	if (nest >= 0)
		w->stateful->store->ext_ops->io_end(nest);
	Assert(w->stateful->store->nresting == 0);	/* a resting key is always dirty */

	sdp_store_offsets(w, w->parts.n, w->parts.ids, next, NULL, false);
	values[0] = Int64GetDatum(w->args.flow_id);
	sdp_catalog_enter(&scope);
	if (nput > 0)
	{
		values[1] = PointerGetDatum(construct_array(put_keys, nput, TEXTOID, -1, false, TYPALIGN_INT));
		values[2] = PointerGetDatum(construct_array(put_blobs, nput, BYTEAOID, -1, false, TYPALIGN_INT));
		values[3] = PointerGetDatum(construct_array(put_parts, nput, INT4OID, 4, true, TYPALIGN_INT));
		if (SPI_execute_plan(w->stateful->checkpoint_put_plan, values, NULL, false, 0) != SPI_OK_INSERT)
			elog(ERROR, "could not write the state checkpoint");
	}
	if (ndel > 0)
	{
		values[1] = PointerGetDatum(construct_array(del_keys, ndel, TEXTOID, -1, false, TYPALIGN_INT));
		if (SPI_execute_plan(w->stateful->checkpoint_delete_plan, values, NULL, false, 0) != SPI_OK_DELETE)
			elog(ERROR, "could not write the state checkpoint");
	}
	for (int i = 0; i < w->parts.n; i++)
		own[i] = Int32GetDatum(w->parts.ids[i]);
	values[1] = PointerGetDatum(construct_array(own, w->parts.n, INT4OID, 4, true, TYPALIGN_INT));
	if (SPI_execute_plan(w->stateful->checkpoint_offsets_plan, values, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not write the state checkpoint's offsets");
	if (w->stateful->event_time_index >= 0)
	{
		Datum	   *pd = palloc(sizeof(Datum) * Max(w->stateful->nwm, 1));
		Datum	   *td = palloc(sizeof(Datum) * Max(w->stateful->nwm, 1));
		int			np = 0;
		Datum		wv[5];
		char		wnulls[5] = {' ', ' ', ' ', ' ', ' '};

		/* this worker's partitions only: the others are other workers' */
		for (int i = 0; i < w->parts.n; i++)
		{
			int32		p = w->parts.ids[i];

			if (p < w->stateful->nwm && w->stateful->wm_max[p] != DT_NOBEGIN)
			{
				pd[np] = Int32GetDatum(p);
				td[np++] = TimestampTzGetDatum(w->stateful->wm_max[p]);
			}
		}
		wv[0] = values[0];
		wv[1] = PointerGetDatum(construct_array(pd, np, INT4OID, 4, true, TYPALIGN_INT));
		wv[2] = PointerGetDatum(construct_array(td, np, TIMESTAMPTZOID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		wv[3] = TimestampTzGetDatum(w->stateful->opctx->watermark);
		wnulls[3] = w->stateful->opctx->watermark == DT_NOBEGIN ? 'n' : ' ';
		/* sdp.flows.watermark is one worker's: written when there is one only */
		wv[4] = BoolGetDatum(w->args.nworkers == 1);
		if (SPI_execute_plan(w->stateful->checkpoint_watermark_plan, wv, wnulls, false, 0) < 0)
			elog(ERROR, "could not write the state checkpoint's watermark");
	}
	sdp_catalog_leave(&scope);
	MemoryContextSwitchTo(cxt);

	/* the operator's housekeeping of its target, as the owner (a sink flow has none) */
	if (w->prep.op->maintain && w->stateful->opctx->target_relname)
	{
		w->prep.op->maintain(w->stateful->opctx);
		MemoryContextSwitchTo(cxt);
	}

	/* a failed commit ends the worker, so the set can be emptied now */
	sdp_state_clear_dirty(w->stateful->store);
	w->stateful->offsets_moved = false;
	w->stateful->next_checkpoint = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), w->opts.checkpoint_interval_ms);
}

static bool
checkpoint_due(FlowWorker *w, TimestampTz now)
{
	return now >= w->stateful->next_checkpoint;
}

/* Something to checkpoint: changed state, or offsets that moved. */
static bool
checkpoint_needed(FlowWorker *w)
{
	return w->stateful->offsets_moved || hash_get_num_entries(w->stateful->store->dirty) > 0;
}

/* Messages the operator rejected (late events): one dead letter each, stage 'late'. */
static void
set_aside_rejected(FlowWorker *w, Batch *b)
{
	ListCell   *lc;

	foreach(lc, w->stateful->opctx->rejected)
	{
		SdpRejected *r = lfirst(lc);
		rd_kafka_message_t *m = NULL;
		ListCell   *dc;
		bool		seen = false;

		for (int i = 0; i < b->nmsgs && m == NULL; i++)
			if (b->msgs[i]->partition == r->partition && b->msgs[i]->offset == r->offset)
				m = b->msgs[i];
		if (m == NULL)
			continue;
		foreach(dc, b->dead)
		{
			DeadLetter *d = lfirst(dc);

			if (d->msg == m)
				seen = true;
		}
		if (seen)
			continue;			/* late for several windows: set aside once */
		b->rows_late++;
		if (w->opts.on_error != SDP_ON_ERROR_SKIP)
			sdp_dead_letter_add(b, m, "late", r->reason, ERRCODE_DATA_EXCEPTION);
	}
	w->stateful->opctx->rejected = NIL;
}

/* Before the operator stage: the transform's rows must fit the operator (a data error sets the message aside). */
void
sdp_stateful_check_rows(FlowWorker *w, HeapTuple *rows, const int32 *partitions, int n)
{
	sdp_operator_check_rows(w->stateful->opctx, rows, n);
	if (w->args.nworkers > 1)
		check_ownership(w, rows, partitions, n);
}

/*
 * The operator stage, in three steps: sdp_stateful_operate_begin (the
 * operator's initial state, in the first batch of a flow), then the
 * transform's rows by key (sdp_stateful_handle_rows: once, or once per
 * part of a batch whose bad messages are being isolated, for an operator
 * that can undo), then sdp_stateful_operate_end: the batch's event times
 * move the watermark, due timers fire, and the rows the operator emitted are
 * returned (in the batch's memory).  From the first step on the state has
 * changed.
 */
void
sdp_stateful_operate_begin(FlowWorker *w)
{
	SdpOperatorContext *ctx = w->stateful->opctx;

	w->stateful->state_mutated = true;
	/* keys at rest make room before the state passes a quarter of its limit */
	sdp_state_purge_resting(w->stateful->store);
	ctx->now = GetCurrentTimestamp();
	ctx->emit_cxt = CurrentMemoryContext;
	ctx->emitted = NIL;
	ctx->rejected = NIL;
	if (w->stateful->initial_pending)
		w->prep.op->initial(ctx);
}

/* Rows to the operator, by key: they see the watermark of the previous batch. */
void
sdp_stateful_handle_rows(FlowWorker *w, HeapTuple *rows, const int32 *partitions, int nrows)
{
	sdp_operator_handle_rows(w->stateful->opctx, rows, partitions, nrows);
}

int
sdp_stateful_operate_end(FlowWorker *w, Batch *b, HeapTuple **emitted)
{
	SdpOperatorContext *ctx = w->stateful->opctx;
	HeapTuple  *out;
	int			nout = 0;
	ListCell   *lc;

	/* this batch's event times move the watermark afterwards */
	observe_event_times(w, b->nmsgs > 0 ? b : NULL, ctx->now);
	ctx->now = GetCurrentTimestamp();	/* timers fire, and their rows are stamped, now */
	advance_watermark(w, ctx->now);
	sdp_operator_fire_timers(ctx);
	if (ctx->rejected != NIL)
		set_aside_rejected(w, b);

	out = palloc(sizeof(HeapTuple) * (list_length(ctx->emitted) + 1));
	foreach(lc, ctx->emitted)
		out[nout++] = lfirst(lc);
	ctx->emitted = NIL;
	*emitted = out;
	return nout;
}

/* The operator stage in one go (sdp_stateful_operate_begin, _handle_rows and _end). */
int
sdp_stateful_operate(FlowWorker *w, Batch *b, HeapTuple *rows, const int32 *partitions, int nrows,
					 HeapTuple **emitted)
{
	sdp_stateful_operate_begin(w);
	sdp_stateful_handle_rows(w, rows, partitions, nrows);
	return sdp_stateful_operate_end(w, b, emitted);
}

/* Whether the operator undoes its state changes (the processor): the worker then isolates through it. */
bool
sdp_stateful_can_undo(FlowWorker *w)
{
	return w->stateful && w->prep.op->undo != NULL;
}

/* A part of an isolating attempt starts: where to undo back to if it fails; the rows emitted so far. */
int
sdp_stateful_mark(FlowWorker *w, int *nemitted)
{
	*nemitted = list_length(w->stateful->opctx->emitted);
	return w->prep.op->mark(w->stateful->opctx);
}

/* The part failed: its state changes undone, its emitted rows dropped. */
void
sdp_stateful_undo_to(FlowWorker *w, int mark, int nemitted)
{
	w->prep.op->undo(w->stateful->opctx, mark);
	w->stateful->opctx->emitted = list_truncate(w->stateful->opctx->emitted, nemitted);
}

/*
 * The offsets stage of a stateful flow: a checkpoint, with the offsets, when
 * one is due.  Not in a batch that wrote emitted rows, once: the rows of a
 * burst of closing windows are committed without waiting for a checkpoint
 * of every key they touched, which the next batch takes (at once: the
 * worker runs one without input for a due checkpoint).
 */
void
sdp_stateful_checkpoint_if_due(FlowWorker *w, Batch *b)
{
	if (b->nmsgs > 0)
		w->stateful->offsets_moved = true;
	/*
	 * A sink flow's emitted rows are appended to its outbox and produced:
	 * a replay after a restart would emit them again.  So a batch that
	 * emitted commits them with the state and the offsets they follow from
	 * (a checkpoint of the keys changed since the last one): a crash loses
	 * a suffix of all three, and the replay emits what was lost, once.
	 */
	if (w->sink_def.name && b->rows_written > 0)
	{
		write_checkpoint(w, b->next);
		w->stateful->checkpoint_deferred = false;
		b->checkpointed = true;
		return;
	}
	if (checkpoint_due(w, GetCurrentTimestamp()) && checkpoint_needed(w))
	{
		if (b->rows_written > 0 && !w->stateful->checkpoint_deferred)
		{
			w->stateful->checkpoint_deferred = true;
			return;
		}
		write_checkpoint(w, b->next);
		w->stateful->checkpoint_deferred = false;
		b->checkpointed = true;
	}
}

/* A checkpoint now, with the offsets committed (a backfill's end: backfill.c); SPI connected. */
void
sdp_stateful_checkpoint_now(FlowWorker *w)
{
	write_checkpoint(w, w->parts.next);
	w->stateful->checkpoint_deferred = false;
}

/*
 * Whether the operator has work without input: a due timer (the watermark
 * is moved first, so idle partitions stop holding it back), or changed
 * state to checkpoint.
 */
bool
sdp_stateful_work_due(FlowWorker *w, TimestampTz now)
{
	advance_watermark(w, now);
	return w->stateful->initial_pending ||
		sdp_operator_next_timer(w->stateful->opctx, SDP_PROCESSING_TIME) <= now ||
		sdp_operator_next_timer(w->stateful->opctx, SDP_EVENT_TIME) <= w->stateful->opctx->watermark ||
		(checkpoint_due(w, now) && checkpoint_needed(w));
}

/*
 * Whether an error of the operator stage is the state outgrowing its
 * limit (the flow fails: restarting would hit it again), as opposed to
 * anything else, a process out of memory included (the worker restarts).
 * The state store raises its own error past the limit; an allocation inside
 * dshash past it raises a plain out of memory, which the store flags.
 */
bool
sdp_stateful_limit_error(FlowWorker *w, ErrorData *edata)
{
	return edata->sqlerrcode == ERRCODE_CONFIGURATION_LIMIT_EXCEEDED ||
		(edata->sqlerrcode == ERRCODE_OUT_OF_MEMORY && sdp_state_allocating(w->stateful->store));
}

/* When the worker must wake for its operator without input: a timer, or a checkpoint of changed state. */
TimestampTz
sdp_stateful_next_wakeup(FlowWorker *w)
{
	TimestampTz next = sdp_operator_next_timer(w->stateful->opctx, SDP_PROCESSING_TIME);

	if (checkpoint_needed(w))
		next = Min(next, w->stateful->next_checkpoint);
	/* event-time timers may come due as partitions go idle: look again soon */
	if (sdp_operator_next_timer(w->stateful->opctx, SDP_EVENT_TIME) != DT_NOEND)
		next = Min(next, TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 100));
	return next;
}

/* The operator's event-time column in the input schema; -1 when none (or no operator). */
int
sdp_stateful_event_time_index(FlowWorker *w)
{
	return w->stateful ? w->stateful->event_time_index : -1;
}

/* Whether the operator's rows carry their Kafka partition (else they are sorted by it first). */
bool
sdp_stateful_rows_know_partition(FlowWorker *w)
{
	return w->stateful && w->stateful->opctx->partition_index >= 0;
}

/* The Kafka partition of an operator row (sdp_stateful_rows_know_partition). */
int32
sdp_stateful_row_partition(FlowWorker *w, HeapTuple row)
{
	return sdp_operator_row_partition(w->stateful->opctx, row);
}

/* The error of the attempt under way that fails the flow, not a message; NULL when none. */
const char *
sdp_stateful_fault(FlowWorker *w)
{
	return w->stateful ? w->stateful->flow_fault : NULL;
}

void
sdp_stateful_clear_fault(FlowWorker *w)
{
	if (w->stateful)
		w->stateful->flow_fault = NULL;
}

/*
 * The attempt that just ended: whether the operator's state changed and stays
 * changed.  State in shared memory does not roll back with a transaction: an
 * attempt that failed after the operator stage restarts the worker from its
 * checkpoint, unless the operator undoes its changes (the processor) and the
 * attempt wrote no checkpoint (which emptied the set of keys to checkpoint);
 * an attempt that committed keeps them.
 */
bool
sdp_stateful_end_attempt(FlowWorker *w, bool committed, bool checkpointed)
{
	bool		mutated;

	if (w->stateful == NULL)
		return false;
	mutated = w->stateful->state_mutated;
	w->stateful->state_mutated = false;
	if (!mutated)
		return false;
	if (committed)
	{
		if (w->prep.op->commit)
			w->prep.op->commit(w->stateful->opctx);
		w->stateful->initial_pending = false;
		return true;
	}
	if (w->prep.op->undo == NULL || checkpointed)
		return true;
	w->prep.op->undo(w->stateful->opctx, 0);
	w->stateful->opctx->watermark = w->stateful->attempt_watermark;
	w->stateful->opctx->emitted = NIL;
	return false;
}

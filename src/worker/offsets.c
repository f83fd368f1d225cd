/*
 * offsets.c
 *		A worker's partitions (its SdpPartitionSet), and the offsets it
 *		stores with its rows.
 *
 * sdp.offsets has one row per (flow, partition): next_offset, the next
 * message to read, committed in the same transaction as the rows of the
 * messages before it, which is what makes a flow exactly-once; and
 * state_offset, where a stateful flow's checkpointed state stands (it
 * resumes from there).  A partition is assigned from its stored offset, or,
 * the first time, from the topic's start or end (starting_offsets), which is
 * then stored at once so a restart before the first message resumes from
 * the same place.
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
 *
 * The slot in shared memory shows the assigned partitions, their committed
 * offsets and the broker's high watermarks (for lag in sdp.flow_status).
 */
#include "worker/offsets.h"
#include "compat.h"
#include "worker/worker_slot.h"
#include "decl/catalog.h"
#include "shmem/slots.h"

#include "access/genam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_trigger.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "nodes/makefuncs.h"
#include "parser/parse_relation.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/backend_status.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

/* The statements on sdp.offsets, prepared once per worker (sdp_offsets_prepare): this module's own. */
static SPIPlanPtr offsets_plan = NULL;		/* UPDATE: every batch */
static SPIPlanPtr offsets_insert_plan = NULL;	/* INSERT: partitions newly assigned */

/* Whether the flow is still declared (in a catalog scope, with SPI connected). */
static bool
flow_exists(FlowWorker *w)
{
	Oid			argtypes[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(w->args.flow_id)};

	if (SPI_execute_with_args("SELECT 1 FROM sdp.flows WHERE id = $1", 1, argtypes, values, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read sdp.flows");
	return SPI_processed > 0;
}

/* The statements on sdp.offsets (in a catalog scope, with SPI connected). */
void
sdp_offsets_prepare(FlowWorker *w)
{
	Oid			types[4] = {INT8OID, INT4ARRAYOID, INT8ARRAYOID, INT8ARRAYOID};

	/*
	 * offsets rows exist for every assigned partition (sdp_assign_partitions),
	 * so a batch updates them; with the offsets the worker last stored ($4),
	 * only where they still stand: a row another worker of the flow moved
	 * meanwhile is not updated (see sdp_store_offsets)
	 */
	offsets_plan = SPI_prepare("UPDATE sdp.offsets o SET next_offset = u.o, updated_at = now() "
								  "FROM unnest($2, $3, $4) AS u(p, o, e) "
								  "WHERE o.flow_id = $1 AND o.partition = u.p "
								  "AND (u.e IS NULL OR o.next_offset = u.e)",
								  4, types);
	/* a new partition's state_offset starts where the partition starts, with no state */
	offsets_insert_plan = SPI_prepare("INSERT INTO sdp.offsets AS o (flow_id, partition, next_offset, state_offset, updated_at) "
										 "SELECT $1, u.p, u.o, u.o, now() FROM unnest($2, $3) AS u(p, o) "
										 "ON CONFLICT (flow_id, partition) DO UPDATE "
										 "SET next_offset = EXCLUDED.next_offset, updated_at = EXCLUDED.updated_at",
										 3, types);
	if (offsets_plan == NULL || offsets_insert_plan == NULL)
		elog(ERROR, "could not prepare the offsets statements: %s", SPI_result_code_string(SPI_result));
	SPI_keepplan(offsets_plan);
	SPI_keepplan(offsets_insert_plan);
}

static ArrayType *
int8_array(const int64 *values, int n)
{
	Datum	   *d = palloc(sizeof(Datum) * Max(n, 1));

	for (int i = 0; i < n; i++)
		d[i] = Int64GetDatum(values[i]);
	return construct_array(d, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE);
}

/* The statement on the offsets rows (sdp_store_offsets); returns the rows it wrote. */
static uint64
offsets_statement(FlowWorker *w, int n, const int32 *partitions, const int64 *offsets,
				  const int64 *expected, bool fresh)
{
	MemoryContext cxt = CurrentMemoryContext;
	SdpCatalogScope scope;
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};
	Datum	   *pd = palloc(sizeof(Datum) * Max(n, 1));
	int			rc;

	for (int i = 0; i < n; i++)
		pd[i] = Int32GetDatum(partitions[i]);
	values[0] = Int64GetDatum(w->args.flow_id);
	values[1] = PointerGetDatum(construct_array(pd, n, INT4OID, 4, true, TYPALIGN_INT));
	values[2] = PointerGetDatum(int8_array(offsets, n));
	values[3] = expected ? PointerGetDatum(int8_array(expected, n)) : (Datum) 0;
	nulls[3] = expected ? ' ' : 'n';
	Assert(!(fresh && expected));
	sdp_catalog_enter(&scope);
	rc = SPI_execute_plan(fresh ? offsets_insert_plan : offsets_plan, values, nulls, false, 0);
	MemoryContextSwitchTo(cxt);
	sdp_catalog_leave(&scope);
	if (rc != (fresh ? SPI_OK_INSERT : SPI_OK_UPDATE))
		elog(ERROR, "could not store offsets: %s", SPI_result_code_string(rc));
	return SPI_processed;
}

/* n offsets rows were to be written, 'written' were: the fence, or the flow dropped. */
static void
offsets_check_written(FlowWorker *w, int n, uint64 written, bool fenced)
{
	if (written != (uint64) n && fenced && flow_exists(w))
	{
		char	   *msg = psprintf("the stored offsets of its partitions are no longer where this worker left them: "
								   "another worker of the flow consumed them; restarting from the stored offsets");

		sdp_worker_set_error(w, msg);
		ereport(FATAL,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("sdp flow \"%s\" worker %d: %s", w->args.name, w->args.worker_no, msg)));
	}
	if (written != (uint64) n)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("flow \"%s\" was dropped", w->args.name)));
}

/*
 * Store the next offsets of partitions; runs inside a transaction with SPI
 * connected.  'fresh' partitions get their row; the others already have one
 * and are updated, which also proves the flow still exists: if it was
 * dropped meanwhile (its offsets rows cascade away), the batch fails and
 * nothing of it commits.
 *
 * 'expected' (or NULL) are the offsets the worker last stored for those
 * partitions: a fence.  The launcher never runs two workers on one
 * partition (a change of the flow's workers stops the old ones before it
 * starts the new), and if that ever failed, the one whose offsets are no
 * longer where it left them exits instead of writing the same messages
 * again: its successor reads the offsets afresh.
 */
void
sdp_store_offsets(FlowWorker *w, int n, const int32 *partitions, const int64 *offsets,
				  const int64 *expected, bool fresh)
{
	offsets_check_written(w, n, offsets_statement(w, n, partitions, offsets, expected, fresh),
						  expected != NULL);
}

/* The next offset of every assigned partition once the batch is done. */
void
sdp_next_offsets(FlowWorker *w, Batch *b, int64 *next)
{
	for (int i = 0; i < w->parts.n; i++)
		next[i] = w->parts.next[i];
	for (int i = 0; i < b->nmsgs; i++)
	{
		rd_kafka_message_t *m = b->msgs[i];
		int			idx = sdp_partitions_index_of(&w->parts, m->partition);

		if (idx >= 0 && m->offset + 1 > next[idx])
			next[idx] = m->offset + 1;
	}
}

/*
 * The offsets of a stateless batch, updated in place: what the UPDATE
 * statement of sdp_store_offsets does, without planning and running a
 * statement (which cost a batch of a few hundred messages a tenth of the
 * worker's CPU).  For each partition: its row found by the primary key
 * with a new snapshot, as a statement in READ COMMITTED finds it; left
 * alone unless next_offset is where the worker left it (the fence); else
 * next_offset and updated_at (now()) replaced by ExecSimpleRelationUpdate,
 * the function PostgreSQL's logical replication apply worker updates a row
 * with (execReplication.c: constraints, generated columns, index entries
 * when the update is not HOT, row triggers; the foreign key's have nothing
 * to check, no key column changes).  The row is found without
 * RelationFindReplTupleByIndex, which locks it first: a tuple lock would
 * write a WAL record per partition per batch for nothing, as no other
 * session updates a worker's offsets rows (a row that another transaction
 * updated meanwhile is an error, and the batch is tried again: the fence
 * then finds where the other left it).
 *
 * The statement stays wherever this would differ: another isolation level,
 * triggers on sdp.offsets other than the foreign keys', and rules.
 * Returns the rows updated (and so fenced in), like the statement.
 */
static int
store_offsets_in_place(FlowWorker *w, int n, const int32 *partitions, const int64 *offsets,
					   const int64 *expected)
{
	Oid			relid;
	Relation	rel;
	Relation	pk;
	EState	   *estate;
	EPQState	epqstate;
	ResultRelInfo *rri;
	TupleTableSlot *old;
	TupleTableSlot *new;
	IndexScanDesc scan;
	ScanKeyData keys[2];
	AttrNumber	att_flow,
				att_partition,
				att_next,
				att_updated;
	TupleDesc	desc;
	Snapshot	snapshot;
	CommandId	cid;
	int			done = 0;
	int			i;

	if (IsolationUsesXactSnapshot())
		return -1;
	relid = get_relname_relid("offsets", get_namespace_oid("sdp", false));
	if (!OidIsValid(relid))
		return -1;
	rel = table_open(relid, RowExclusiveLock);
	desc = RelationGetDescr(rel);
	if (rel->rd_rules != NULL)
	{
		table_close(rel, NoLock);
		return -1;
	}
	if (rel->trigdesc)
	{
		for (int t = 0; t < rel->trigdesc->numtriggers; t++)
			if (RI_FKey_trigger_type(rel->trigdesc->triggers[t].tgfoid) == RI_TRIGGER_NONE)
			{
				table_close(rel, NoLock);
				return -1;
			}
	}
	att_flow = attnameAttNum(rel, "flow_id", false);
	att_partition = attnameAttNum(rel, "partition", false);
	att_next = attnameAttNum(rel, "next_offset", false);
	att_updated = attnameAttNum(rel, "updated_at", false);
	if (att_flow <= 0 || att_partition <= 0 || att_next <= 0 || att_updated <= 0 ||
		!OidIsValid(sdp_primary_key_index(rel)))
	{
		table_close(rel, NoLock);
		return -1;
	}
	CheckCmdReplicaIdentity(rel, CMD_UPDATE);

	estate = CreateExecutorState();
	rri = makeNode(ResultRelInfo);
	/* no range table: the updated columns are none of an index's (ExecGetUpdatedCols) */
	InitResultRelInfo(rri, rel, 0, NULL, 0);
	ExecOpenIndices(rri, false);
	pk = NULL;
	for (int k = 0; k < rri->ri_NumIndices; k++)
		if (RelationGetRelid(rri->ri_IndexRelationDescs[k]) == sdp_primary_key_index(rel))
			pk = rri->ri_IndexRelationDescs[k];
	if (pk == NULL || pk->rd_index->indnkeyatts != 2 ||
		pk->rd_index->indkey.values[0] != att_flow || pk->rd_index->indkey.values[1] != att_partition)
	{
		ExecCloseIndices(rri);
		FreeExecutorState(estate);
		table_close(rel, NoLock);
		return -1;
	}

	/* as SPI runs a statement that writes */
	CommandCounterIncrement();
	PushActiveSnapshot(GetTransactionSnapshot());
	snapshot = GetActiveSnapshot();
	cid = GetCurrentCommandId(true);
	estate->es_output_cid = cid;
	estate->es_snapshot = snapshot;
	sdp_epq_init(&epqstate, estate);
	AfterTriggerBeginQuery();

	old = table_slot_create(rel, NULL);
	new = MakeSingleTupleTableSlot(desc, &TTSOpsVirtual);
	ScanKeyInit(&keys[0], 1, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(w->args.flow_id));
	ScanKeyInit(&keys[1], 2, BTEqualStrategyNumber, F_INT4EQ, Int32GetDatum(0));
	scan = sdp_index_beginscan(rel, pk, snapshot, 2, 0);
	for (i = 0; i < n; i++)
	{
		bool		isnull;

		keys[1].sk_argument = Int32GetDatum(partitions[i]);
		index_rescan(scan, keys, 2, NULL, 0);
		if (!index_getnext_slot(scan, ForwardScanDirection, old))
			continue;
		if (expected != NULL)
		{
			Datum		d = slot_getattr(old, att_next, &isnull);

			if (isnull || DatumGetInt64(d) != expected[i])
				continue;
		}
		slot_getallattrs(old);
		ExecClearTuple(new);
		memcpy(new->tts_values, old->tts_values, sizeof(Datum) * desc->natts);
		memcpy(new->tts_isnull, old->tts_isnull, sizeof(bool) * desc->natts);
		new->tts_values[att_next - 1] = Int64GetDatum(offsets[i]);
		new->tts_isnull[att_next - 1] = false;
		new->tts_values[att_updated - 1] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
		new->tts_isnull[att_updated - 1] = false;
		ExecStoreVirtualTuple(new);
		ExecSimpleRelationUpdate(rri, estate, &epqstate, old, new);
		done++;
	}
	index_endscan(scan);
	AfterTriggerEndQuery(estate);
	EvalPlanQualEnd(&epqstate);
	ExecDropSingleTupleTableSlot(old);
	ExecDropSingleTupleTableSlot(new);
	PopActiveSnapshot();
	ExecCloseIndices(rri);
	/* the slots the trigger machinery made for the foreign key's check hold pins: as finish_edata does */
	ExecResetTupleTable(estate->es_tupleTable, false);
	FreeExecutorState(estate);
	table_close(rel, NoLock);
	return done;
}

/* Store the offsets of the partitions whose next offset moved. */
void
sdp_write_moved_offsets(FlowWorker *w, const int64 *next)
{
	int32	   *parts = palloc(sizeof(int32) * Max(w->parts.n, 1));
	int64	   *offs = palloc(sizeof(int64) * Max(w->parts.n, 1));
	int64	   *expected = palloc(sizeof(int64) * Max(w->parts.n, 1));
	int			n = 0;

	for (int i = 0; i < w->parts.n; i++)
		if (next[i] != w->parts.next[i])
		{
			parts[n] = w->parts.ids[i];
			offs[n] = next[i];
			expected[n] = w->parts.next[i];
			n++;
		}
	if (n > 0)
	{
		int			written = store_offsets_in_place(w, n, parts, offs, expected);

		if (written < 0)
			sdp_store_offsets(w, n, parts, offs, expected, false);
		else
			offsets_check_written(w, n, (uint64) written, true);
	}
}

/* The index of partition id in the worker's set, -1 when it does not consume it. */
int
sdp_partitions_index_of(const SdpPartitionSet *ps, int32 id)
{
	if (ps->index == NULL || id < 0 || id > ps->max_id)
		return -1;
	return ps->index[id];
}

/*
 * Add n partitions (not in the set yet), each with the next offset it is
 * read from, to the worker's set, which stays sorted by id; in cxt, the
 * worker's (the set lives as long as it does).
 */
void
sdp_partitions_add(SdpPartitionSet *ps, int n, const int32 *ids, const int64 *next, MemoryContext cxt)
{
	MemoryContext oldcxt;
	int			total = ps->n + n;
	int32	   *all_ids;
	int64	   *all_next;

	if (n == 0)
		return;
	oldcxt = MemoryContextSwitchTo(cxt);
	all_ids = palloc(sizeof(int32) * total);
	all_next = palloc(sizeof(int64) * total);
	if (ps->n > 0)
	{
		memcpy(all_ids, ps->ids, sizeof(int32) * ps->n);
		memcpy(all_next, ps->next, sizeof(int64) * ps->n);
	}
	memcpy(all_ids + ps->n, ids, sizeof(int32) * n);
	memcpy(all_next + ps->n, next, sizeof(int64) * n);
	for (int i = 1; i < total; i++)
		for (int j = i; j > 0 && all_ids[j - 1] > all_ids[j]; j--)
		{
			int32		tid = all_ids[j];
			int64		tnext = all_next[j];

			all_ids[j] = all_ids[j - 1];
			all_next[j] = all_next[j - 1];
			all_ids[j - 1] = tid;
			all_next[j - 1] = tnext;
		}
	ps->ids = all_ids;
	ps->next = all_next;
	ps->n = total;
	ps->max_id = all_ids[total - 1];
	ps->index = palloc(sizeof(int) * (ps->max_id + 1));
	for (int i = 0; i <= ps->max_id; i++)
		ps->index[i] = -1;
	for (int i = 0; i < total; i++)
		ps->index[all_ids[i]] = i;
	MemoryContextSwitchTo(oldcxt);
}

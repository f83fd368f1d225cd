/*
 * backfill.c
 *		A flow's backfill, run by its own worker before it reads Kafka.
 *
 * sdp_backfill (sql/backfill.c) checked the source as the flow's owner,
 * moved the flow's offsets to the boundary, and wrote two statements into
 * sdp.backfills: the first rows of the source in its order, and the rows
 * after a position (the order_by values of the last row done).  Each
 * returns the flow's input row, cast to the schema's types, then its Kafka
 * columns (the source's kafka_partition, kafka_offset, ... when it has
 * them) and the row's position as text[].
 *
 * Here the worker takes up to max_batch_rows of them at a time, as
 * messages (rkt NULL, the row behind _private: backfill.h) that the batch
 * pipeline runs like the ones it reads from Kafka: transform, operator,
 * write, dead letters, in one transaction with the backfill's position,
 * which moves instead of the offsets.  A stateless flow stores the
 * position with every batch; a stateful one with its state checkpoint, so
 * that after a crash the state and the position it corresponds to come
 * back together and the rows after it are run again (the operator's
 * emissions are upserts, as after a crash of the stream).  When no row is
 * left, the state is checkpointed, the backfill is marked done, and the
 * worker reads Kafka from the offsets sdp_backfill set: the boundary.
 */
#include "worker/backfill.h"
#include "compat.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "pgstat.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "decl/catalog.h"
#include "worker/stateful.h"

struct SdpBackfill
{
	SPIPlanPtr	first_plan;		/* the first rows, as the owner */
	SPIPlanPtr	next_plan;		/* the rows after a position */
	SPIPlanPtr	store_plan;		/* the position and progress, in a catalog scope */
	SPIPlanPtr	done_plan;
	TupleDesc	desc;			/* of the fetch, once seen */
	bool	   *as_text;		/* per schema column: fetched as text, for its input function */
	int			npos;			/* columns of the position */
	char	  **next_pos;		/* where the next fetch starts (NULL: the start) */
	int64		rows_stored;	/* rows done at the stored position */
	int64		rows_unstored;	/* rows done since (a stateful flow's, until its checkpoint) */
	int64		rows_total;
	int64		ordinal;		/* rows fetched so far */
	char	  **batch_pos;		/* the position after the batch being run */
	int64		rows_at_start;	/* done when this worker started */
	TimestampTz started;
	char	   *source;
};

/* A position (text[]) as a datum, or NULL. */
static Datum
position_datum(char **pos, int n)
{
	Datum	   *d = palloc(sizeof(Datum) * Max(n, 1));

	for (int i = 0; i < n; i++)
		d[i] = CStringGetTextDatum(pos[i]);
	return PointerGetDatum(construct_array(d, n, TEXTOID, -1, false, TYPALIGN_INT));
}

/* A text[] as strings, in the current memory context. */
static char **
position_strings(Datum arr, int *n)
{
	Datum	   *d;
	bool	   *nulls;
	char	  **s;

	deconstruct_array(DatumGetArrayTypeP(arr), TEXTOID, -1, false, TYPALIGN_INT, &d, &nulls, n);
	s = palloc(sizeof(char *) * Max(*n, 1));
	for (int i = 0; i < *n; i++)
		s[i] = nulls[i] ? NULL : TextDatumGetCString(d[i]);
	return s;
}

/*
 * At the worker's start: the flow's backfill, if one is running, with its
 * statements prepared (as the owner, with the flow's search_path, which the
 * worker has set for its life).
 */
void
sdp_backfill_load(FlowWorker *w)
{
	MemoryContext cxt = CurrentMemoryContext;
	Oid			argtypes[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(w->args.flow_id)};
	Oid			fetch_types[2] = {INT4OID, TEXTARRAYOID};
	Oid			store_types[3] = {INT8OID, TEXTARRAYOID, INT8OID};
	SdpCatalogScope scope;
	SdpBackfill *bf = NULL;

	sdp_start_transaction();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	sdp_catalog_enter(&scope);
	/* a catalog before 0.10 has no backfills */
	if (SPI_execute("SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
					" WHERE n.nspname = 'sdp' AND c.relname = 'backfills'", true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not look for sdp.backfills");
	if (SPI_processed == 0)
	{
		sdp_catalog_leave(&scope);
		PopActiveSnapshot();
		SPI_finish();
		CommitTransactionCommand();
		MemoryContextSwitchTo(cxt);
		w->backfill = NULL;
		return;
	}
	if (SPI_execute_with_args("SELECT fetch_first, fetch_next, position, rows_done, rows_total, source, order_by "
							  "  FROM sdp.backfills WHERE flow_id = $1 AND state = 'running'",
							  1, argtypes, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the flow's backfill");
	sdp_catalog_leave(&scope);
	if (SPI_processed == 1)
	{
		HeapTuple	tup = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		Datum		pos;
		int			npos;
		char	   *first = SPI_getvalue(tup, desc, 1);
		char	   *next = SPI_getvalue(tup, desc, 2);

		MemoryContextSwitchTo(w->flow_cxt);
		bf = palloc0(sizeof(SdpBackfill));
		pos = SPI_getbinval(tup, desc, 3, &isnull);
		if (!isnull)
			bf->next_pos = position_strings(pos, &npos);
		(void) position_strings(SPI_getbinval(tup, desc, 7, &isnull), &bf->npos);
		bf->rows_stored = DatumGetInt64(SPI_getbinval(tup, desc, 4, &isnull));
		bf->rows_total = DatumGetInt64(SPI_getbinval(tup, desc, 5, &isnull));
		bf->ordinal = bf->rows_stored;
		bf->rows_at_start = bf->rows_stored;
		bf->source = SPI_getvalue(tup, desc, 6);
		bf->started = GetCurrentTimestamp();
		MemoryContextSwitchTo(cxt);

		/* the source is read as the owner, the worker's own identity */
		if (w->args.nworkers > 1)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("flow \"%s\" has a backfill to run and %d workers: a backfill runs in one worker",
							w->args.name, w->args.nworkers),
					 errhint("Set the flow's workers to 1 with sdp_set_flow_workers() until its backfill is done.")));
		bf->first_plan = SPI_prepare(first, 2, fetch_types);
		bf->next_plan = bf->first_plan ? SPI_prepare(next, 2, fetch_types) : NULL;
		if (bf->first_plan == NULL || bf->next_plan == NULL)
			elog(ERROR, "could not prepare the backfill's statements: %s", SPI_result_code_string(SPI_result));
		SPI_keepplan(bf->first_plan);
		SPI_keepplan(bf->next_plan);
		sdp_catalog_enter(&scope);
		bf->store_plan = SPI_prepare("UPDATE sdp.backfills SET position = $2, rows_done = $3, updated_at = now() "
									 " WHERE flow_id = $1", 3, store_types);
		bf->done_plan = SPI_prepare("UPDATE sdp.backfills SET position = coalesce($2, position), rows_done = $3, "
									"       state = 'done', updated_at = now(), finished_at = now() "
									" WHERE flow_id = $1", 3, store_types);
		sdp_catalog_leave(&scope);
		if (bf->store_plan == NULL || bf->done_plan == NULL)
			elog(ERROR, "could not prepare the backfill's statements: %s", SPI_result_code_string(SPI_result));
		SPI_keepplan(bf->store_plan);
		SPI_keepplan(bf->done_plan);
	}
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);

	w->backfill = bf;
	if (bf)
		ereport(LOG,
				(errmsg("sdp flow \"%s\" backfills from %s: %lld of %lld rows done, then reads topic \"%s\" from the boundary",
						w->args.name, bf->source, (long long) bf->rows_stored, (long long) bf->rows_total,
						w->source.topic)));
}

/*
 * The next rows of the backfill, up to max, as messages in buf (in the
 * current memory context: the batch's).  Returns how many; 0 when none is
 * left.  Runs in a transaction of its own, read only; an error (the source
 * gone, a privilege revoked, a value its cast refuses) propagates.
 */
int
sdp_backfill_fill(FlowWorker *w, rd_kafka_message_t **buf, int max)
{
	SdpBackfill *bf = w->backfill;
	MemoryContext cxt = CurrentMemoryContext;
	Datum		values[2];
	char		nulls[2] = {' ', ' '};
	int			ncols = w->prep.schema->ncolumns;
	int			pcol = ncols + SDP_META_PARTITION + 1;
	int			ocol = ncols + SDP_META_OFFSET + 1;
	int			n;

	sdp_start_transaction();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "sdp: reading backfill rows");
	values[0] = Int32GetDatum(max);
	if (bf->next_pos)
		values[1] = position_datum(bf->next_pos, bf->npos);
	else
		nulls[1] = 'n';
	if (SPI_execute_plan(bf->next_pos ? bf->next_plan : bf->first_plan, values, nulls, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the backfill's rows");
	n = (int) SPI_processed;
	MemoryContextSwitchTo(cxt);
	if (bf->desc == NULL)
	{
		MemoryContextSwitchTo(w->flow_cxt);
		bf->desc = CreateTupleDescCopy(SPI_tuptable->tupdesc);
		bf->as_text = palloc0(sizeof(bool) * Max(ncols, 1));
		for (int i = 0; i < ncols; i++)
			bf->as_text[i] = TupleDescAttr(bf->desc, i)->atttypid != TupleDescAttr(w->prep.schema->tupdesc, i)->atttypid;
		MemoryContextSwitchTo(cxt);
	}
	for (int i = 0; i < n; i++)
	{
		rd_kafka_message_t *m = palloc0(sizeof(rd_kafka_message_t));
		SdpBackfillRow *row = palloc(sizeof(SdpBackfillRow));
		bool		pnull,
					onull;
		Datum		p,
					o;

		row->tuple = heap_copytuple(SPI_tuptable->vals[i]);
		row->desc = bf->desc;
		row->ncolumns = ncols;
		row->ordinal = ++bf->ordinal;
		p = heap_getattr(row->tuple, pcol, bf->desc, &pnull);
		o = heap_getattr(row->tuple, ocol, bf->desc, &onull);
		row->has_position = !pnull && !onull;
		/* a row from no partition counts as the first one's; its offset is its place, negative */
		m->partition = pnull ? w->parts.ids[0] : DatumGetInt32(p);
		m->offset = row->has_position ? DatumGetInt64(o) : -row->ordinal;
		m->payload = (void *) "";	/* not a tombstone */
		m->len = 0;
		m->_private = row;
		buf[i] = m;
		if (i == n - 1)
		{
			bool		isnull;
			Datum		pos = heap_getattr(row->tuple, bf->desc->natts, bf->desc, &isnull);
			int			npos;

			bf->batch_pos = position_strings(pos, &npos);
		}
	}
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);
	pgstat_report_activity(STATE_IDLE, NULL);
	return n;
}

/* A backfill row as the flow's input row: its columns, and its Kafka columns (the topic is the caller's). */
void
sdp_backfill_decode(FlowWorker *w, rd_kafka_message_t *m, Datum *values, bool *nulls)
{
	SdpBackfill *bf = w->backfill;
	SdpBackfillRow *row = m->_private;
	int			natts = w->prep.schema->tupdesc->natts;
	Datum	   *v = palloc(sizeof(Datum) * bf->desc->natts);
	bool	   *n = palloc(sizeof(bool) * bf->desc->natts);
	int			pidx = w->prep.schema->ncolumns + SDP_META_PARTITION;

	heap_deform_tuple(row->tuple, bf->desc, v, n);
	memcpy(values, v, sizeof(Datum) * natts);
	memcpy(nulls, n, sizeof(bool) * natts);
	/* a column of another type in the source: its text, through the column's input function, as a field's */
	for (int i = 0; i < w->prep.schema->ncolumns; i++)
		if (bf->as_text[i] && !nulls[i])
		{
			SdpInputColumn *c = &w->prep.schema->columns[i];

			values[i] = InputFunctionCall(&c->infunc, TextDatumGetCString(values[i]), c->typioparam, c->typmod);
		}
	if (nulls[pidx])
	{
		values[pidx] = Int32GetDatum(m->partition);
		nulls[pidx] = false;
	}
	pfree(v);
	pfree(n);
}

/*
 * In the batch's transaction (SPI connected): the position after the
 * batch, with the rows done, when its results are durable with it: every
 * batch of a stateless flow, a stateful flow's batch that checkpointed.
 */
void
sdp_backfill_store_position(FlowWorker *w, Batch *b)
{
	SdpBackfill *bf = w->backfill;
	SdpCatalogScope scope;
	Datum		values[3];

	if (w->prep.op != NULL && !b->checkpointed)
		return;
	values[0] = Int64GetDatum(w->args.flow_id);
	values[1] = position_datum(bf->batch_pos, bf->npos);
	values[2] = Int64GetDatum(bf->rows_stored + bf->rows_unstored + b->nmsgs);
	sdp_catalog_enter(&scope);
	if (SPI_execute_plan(bf->store_plan, values, NULL, false, 0) != SPI_OK_UPDATE || SPI_processed != 1)
		elog(ERROR, "could not store the backfill's position");
	sdp_catalog_leave(&scope);
}

/* The batch committed: the next fetch starts after it. */
void
sdp_backfill_committed(FlowWorker *w, Batch *b)
{
	SdpBackfill *bf = w->backfill;
	MemoryContext old = MemoryContextSwitchTo(w->flow_cxt);

	if (bf->next_pos)
		for (int i = 0; i < bf->npos; i++)
			if (bf->next_pos[i])
				pfree(bf->next_pos[i]);
	if (bf->next_pos == NULL)
		bf->next_pos = palloc0(sizeof(char *) * Max(bf->npos, 1));
	for (int i = 0; i < bf->npos; i++)
		bf->next_pos[i] = bf->batch_pos[i] ? pstrdup(bf->batch_pos[i]) : NULL;
	MemoryContextSwitchTo(old);
	bf->rows_unstored += b->nmsgs;
	if (w->prep.op == NULL || b->checkpointed)
	{
		bf->rows_stored += bf->rows_unstored;
		bf->rows_unstored = 0;
	}
	bf->batch_pos = NULL;
}

/*
 * No row is left: a stateful flow's state is checkpointed (with the
 * boundary's offsets, which have not moved), the backfill is marked done,
 * and the worker goes on to Kafka.
 */
void
sdp_backfill_finish(FlowWorker *w)
{
	SdpBackfill *bf = w->backfill;
	MemoryContext cxt = CurrentMemoryContext;
	SdpCatalogScope scope;
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};
	int64		done = bf->rows_stored + bf->rows_unstored;
	double		secs;

	sdp_start_transaction();
	SPI_connect();
	MemoryContextSwitchTo(cxt);
	PushActiveSnapshot(GetTransactionSnapshot());
	if (w->prep.op != NULL)
		sdp_stateful_checkpoint_now(w);
	values[0] = Int64GetDatum(w->args.flow_id);
	if (bf->next_pos)
		values[1] = position_datum(bf->next_pos, bf->npos);
	else
		nulls[1] = 'n';
	values[2] = Int64GetDatum(done);
	sdp_catalog_enter(&scope);
	if (SPI_execute_plan(bf->done_plan, values, nulls, false, 0) != SPI_OK_UPDATE || SPI_processed != 1)
		elog(ERROR, "could not mark the backfill done");
	sdp_catalog_leave(&scope);
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);

	secs = (GetCurrentTimestamp() - bf->started) / 1e6;
	ereport(LOG,
			(errmsg("sdp flow \"%s\" finished its backfill from %s: %lld rows, %lld of them in %.3f s by this worker; it reads topic \"%s\" from the boundary",
					w->args.name, bf->source, (long long) done, (long long) (done - bf->rows_at_start),
					secs, w->source.topic)));
	SPI_freeplan(bf->first_plan);
	SPI_freeplan(bf->next_plan);
	SPI_freeplan(bf->store_plan);
	SPI_freeplan(bf->done_plan);
	w->backfill = NULL;
}

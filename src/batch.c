/*
 * batch.c
 *		One batch of a flow, from the messages polled to the commit.
 *
 * Stateless flows: decode JSON -> run the transform -> write the target ->
 * write the next offset of every partition -> commit, all in one
 * transaction.  Stateful flows take their own path through the operator
 * (stateful.c) and share the rest.
 *
 * Bad input never stops the batch.  A message that does not decode is set
 * aside at once.  If the transform or the write raises a data error, the
 * transaction is rolled back and the batch is run again in subtransactions,
 * halving the failing ranges until each bad message is alone; those go to
 * sdp.dead_letters (or are skipped, or fail the flow: option on_error) and
 * the rest commits.  Errors that are not about the data (a missing table, a
 * revoked privilege, a full disk) retry the same batch with backoff instead,
 * so nothing is dead-lettered for the environment's sake.
 */
#include "worker.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "json_decode.h"
#include "operator.h"

/* Errors worth isolating to one message: the data was wrong, not the world. */
bool
sdp_is_data_error(int sqlerrcode)
{
	int			category = ERRCODE_TO_CATEGORY(sqlerrcode);

	return category == ERRCODE_DATA_EXCEPTION ||
		category == ERRCODE_INTEGRITY_CONSTRAINT_VIOLATION ||
		category == ERRCODE_CARDINALITY_VIOLATION ||
		category == ERRCODE_WITH_CHECK_OPTION_VIOLATION ||
		category == ERRCODE_SQL_ROUTINE_EXCEPTION ||
		category == ERRCODE_EXTERNAL_ROUTINE_INVOCATION_EXCEPTION ||
		sqlerrcode == ERRCODE_RAISE_EXCEPTION;
}

/* Whether Kafka bytes (key, payload) can be stored as text in this database. */
static bool
is_valid_text(const void *bytes, size_t len)
{
	return bytes != NULL && len < MaxAllocSize &&
		memchr(bytes, '\0', len) == NULL &&
		pg_verify_mbstr(GetDatabaseEncoding(), bytes, (int) len, true);
}

/* Decode every message of the batch; the ones that fail are set aside. */
void
sdp_decode_batch(FlowWorker *w, Batch *b)
{
	TupleDesc	desc = w->schema->tupdesc;
	int			natts = desc->natts;
	int			ncols = w->schema->ncolumns;
	Datum	   *values = palloc(sizeof(Datum) * natts);
	bool	   *nulls = palloc(sizeof(bool) * natts);
	Datum		topic = CStringGetTextDatum(w->source.topic);

	/* from scratch: an attempt that raised part way through may have left rows behind */
	b->nrows = 0;
	b->dead = NIL;
	b->rows = palloc(sizeof(HeapTuple) * b->nmsgs);
	b->row_msg = palloc(sizeof(int) * b->nmsgs);
	for (int i = 0; i < b->nmsgs; i++)
	{
		rd_kafka_message_t *m = b->msgs[i];
		char	   *error;
		int			sqlstate;
		int64		ts;
		rd_kafka_timestamp_type_t tstype;

		if (!sdp_decode_message(w->schema, m->payload, m->len, values, nulls, &error, &sqlstate))
		{
			DeadLetter *dl = palloc(sizeof(DeadLetter));

			dl->msg = m;
			dl->stage = "decode";
			dl->error = error;
			dl->sqlstate = sqlstate;
			b->dead = lappend(b->dead, dl);
			continue;
		}
		if (w->op && w->event_time_index >= 0 && !nulls[w->event_time_index] &&
			!sdp_event_time_usable(DatumGetTimestampTz(values[w->event_time_index])))
		{
			DeadLetter *dl = palloc(sizeof(DeadLetter));

			dl->msg = m;
			dl->stage = "decode";
			dl->error = psprintf("field \"%s\": event time %s is outside the range windows and watermarks can hold (%s to %s)",
								 w->schema->columns[w->event_time_index].name,
								 sdp_timestamp_text(DatumGetTimestampTz(values[w->event_time_index])),
								 sdp_timestamp_text(MIN_TIMESTAMP + SDP_EVENT_TIME_MARGIN_US),
								 sdp_timestamp_text(END_TIMESTAMP - SDP_EVENT_TIME_MARGIN_US - 1));
			dl->sqlstate = ERRCODE_DATETIME_VALUE_OUT_OF_RANGE;
			b->dead = lappend(b->dead, dl);
			continue;
		}
		values[ncols + SDP_META_TOPIC] = topic;
		nulls[ncols + SDP_META_TOPIC] = false;
		values[ncols + SDP_META_PARTITION] = Int32GetDatum(m->partition);
		nulls[ncols + SDP_META_PARTITION] = false;
		values[ncols + SDP_META_OFFSET] = Int64GetDatum(m->offset);
		nulls[ncols + SDP_META_OFFSET] = false;
		nulls[ncols + SDP_META_KEY] = !is_valid_text(m->key, m->key_len);
		if (!nulls[ncols + SDP_META_KEY])
			values[ncols + SDP_META_KEY] = PointerGetDatum(cstring_to_text_with_len(m->key, (int) m->key_len));
		ts = rd_kafka_message_timestamp(m, &tstype);
		nulls[ncols + SDP_META_TIMESTAMP] = (tstype == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE || ts < 0);
		if (!nulls[ncols + SDP_META_TIMESTAMP])
			values[ncols + SDP_META_TIMESTAMP] =
				TimestampTzGetDatum(ts * 1000 - (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY);

		b->rows[b->nrows] = heap_form_tuple(desc, values, nulls);
		b->row_msg[b->nrows] = i;
		b->nrows++;
	}
}

/*
 * Run step(arg) in a subtransaction.  Returns NULL when it committed, or the
 * data error that rolled it back (errors that are not about the data
 * propagate).  The caller splits its range and tries again.
 */
ErrorData *
sdp_run_isolated(void (*step) (void *arg), void *arg)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	ErrorData  *volatile edata = NULL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		step(arg);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		/* a registration left behind by the failed statement */
		(void) SPI_unregister_relation(SDP_INPUT_RELATION);
		(void) SPI_unregister_relation(SDP_OUTPUT_RELATION);
		if (!sdp_is_data_error(edata->sqlerrcode))
			ReThrowError(edata);
	}
	PG_END_TRY();
	return edata;
}

/* Transform and write rows [lo, hi) of the batch. */
static void
run_rows(FlowWorker *w, Batch *b, int lo, int hi, const char **stage)
{
	HeapTuple  *out;
	int			nout;

	*stage = "transform";
	nout = sdp_transform_run(&w->transform, b->rows + lo, hi - lo, &out);
	b->rows_out += nout;
	*stage = "write";
	b->rows_written += sdp_sink_write(&w->sink, out, nout);
}

/*
 * Run rows [lo, hi) in a subtransaction; when a data error rolls it back,
 * split the range until the bad message is alone, and set it aside.
 * Returns false if on_error = fail met a bad message (*fail_message set).
 */
typedef struct RowsStep
{
	FlowWorker *w;
	Batch	   *b;
	int			lo;
	int			hi;
	const char *stage;
} RowsStep;

static void
rows_step(void *arg)
{
	RowsStep   *r = arg;

	run_rows(r->w, r->b, r->lo, r->hi, &r->stage);
}

static bool
isolate_rows(FlowWorker *w, Batch *b, int lo, int hi, char **fail_message)
{
	RowsStep	step = {w, b, lo, hi, "transform"};
	const char *stage;
	int64		out_before = b->rows_out;
	int64		written_before = b->rows_written;
	ErrorData  *edata = sdp_run_isolated(rows_step, &step);

	stage = step.stage;
	if (edata == NULL)
		return true;

	b->rows_out = out_before;
	b->rows_written = written_before;
	if (hi - lo > 1)
	{
		int			mid = lo + (hi - lo) / 2;

		return isolate_rows(w, b, lo, mid, fail_message) &&
			isolate_rows(w, b, mid, hi, fail_message);
	}
	else
	{
		rd_kafka_message_t *m = b->msgs[b->row_msg[lo]];

		if (w->opts.on_error == SDP_ON_ERROR_FAIL)
		{
			*fail_message = psprintf("%s of partition %d offset %lld: %s", stage,
									 m->partition, (long long) m->offset, edata->message);
			return false;
		}
		if (w->opts.on_error == SDP_ON_ERROR_SKIP)
			b->rows_skipped++;
		else
		{
			DeadLetter *dl = palloc(sizeof(DeadLetter));

			dl->msg = m;
			dl->stage = stage;
			dl->error = pstrdup(edata->message);
			dl->sqlstate = edata->sqlerrcode;
			b->dead = lappend(b->dead, dl);
		}
	}
	return true;
}

/* Write the batch's dead letters (inside the batch's transaction). */
void
sdp_write_dead_letters(FlowWorker *w, Batch *b)
{
	MemoryContext cxt = CurrentMemoryContext;
	SdpCatalogScope scope;
	ListCell   *lc;

	if (b->dead == NIL || w->opts.on_error == SDP_ON_ERROR_SKIP)
		return;
	sdp_catalog_enter(&scope);
	foreach(lc, b->dead)
	{
		DeadLetter *dl = lfirst(lc);
		rd_kafka_message_t *m = dl->msg;
		Datum		values[13];
		char		nulls[13];
		bytea	   *payload;
		const char *bytes = m ? m->payload : dl->row_text;
		size_t		len = m ? m->len : strlen(dl->row_text);

		memset(nulls, ' ', sizeof(nulls));
		values[0] = CStringGetTextDatum(w->args.name);
		values[1] = CStringGetTextDatum(w->owner_name);
		values[2] = CStringGetTextDatum(w->source.topic);
		if (m)
		{
			int64		ts;
			rd_kafka_timestamp_type_t tstype;

			values[3] = Int32GetDatum(m->partition);
			values[4] = Int64GetDatum(m->offset);
			if (is_valid_text(m->key, m->key_len))
				values[5] = PointerGetDatum(cstring_to_text_with_len(m->key, (int) m->key_len));
			else
				nulls[5] = 'n';
			ts = rd_kafka_message_timestamp(m, &tstype);
			if (tstype != RD_KAFKA_TIMESTAMP_NOT_AVAILABLE && ts >= 0)
				values[6] = TimestampTzGetDatum(ts * 1000 - (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY);
			else
				nulls[6] = 'n';
		}
		else
		{
			/* a row the operator emitted: it comes from no single message */
			nulls[3] = nulls[4] = nulls[5] = nulls[6] = 'n';
		}
		payload = palloc(VARHDRSZ + len);
		SET_VARSIZE(payload, VARHDRSZ + len);
		if (len > 0)
			memcpy(VARDATA(payload), bytes, len);
		values[7] = PointerGetDatum(payload);
		if (is_valid_text(bytes, len))
			values[8] = PointerGetDatum(cstring_to_text_with_len(bytes, (int) len));
		else
			nulls[8] = 'n';
		values[9] = CStringGetTextDatum(dl->stage);
		values[10] = CStringGetTextDatum(dl->error);
		values[11] = CStringGetTextDatum(unpack_sql_state(dl->sqlstate));
		values[12] = Int64GetDatum(w->args.flow_id);
		if (SPI_execute_plan(w->dead_letter_plan, values, nulls, false, 0) != SPI_OK_INSERT)
			elog(ERROR, "could not write a dead letter");
		MemoryContextSwitchTo(cxt);
	}
	sdp_catalog_leave(&scope);
}

/*
 * Option notify: tell listeners, at commit, that the batch wrote rows
 * (payload: {"flow": ..., "target": ..., "rows": n}), so that applications
 * read what changed as soon as it is there, without polling.
 */
void
sdp_notify_rows(FlowWorker *w, int64 rows)
{
	MemoryContext cxt = CurrentMemoryContext;
	SdpCatalogScope scope;
	StringInfoData payload;
	Datum		values[2];

	if (w->notify_plan == NULL || rows <= 0)
		return;
	initStringInfo(&payload);
	appendStringInfoString(&payload, "{\"flow\": ");
	escape_json(&payload, w->args.name);
	appendStringInfoString(&payload, ", \"target\": ");
	escape_json(&payload, w->sink.relname);
	appendStringInfo(&payload, ", \"rows\": " INT64_FORMAT "}", rows);
	values[0] = CStringGetTextDatum(w->opts.notify_channel);
	values[1] = CStringGetTextDatum(payload.data);
	sdp_catalog_enter(&scope);
	if (SPI_execute_plan(w->notify_plan, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "NOTIFY %s failed", w->opts.notify_channel);
	sdp_catalog_leave(&scope);
	MemoryContextSwitchTo(cxt);
}

/* The next offset of every partition the batch touched, stored with the rows. */
void
sdp_write_batch_offsets(FlowWorker *w, Batch *b, int64 *new_next)
{
	int32	   *parts = palloc(sizeof(int32) * w->npartitions);
	int64	   *offs = palloc(sizeof(int64) * w->npartitions);
	int			n = 0;

	sdp_next_offsets(w, b, new_next);
	for (int i = 0; i < w->npartitions; i++)
		if (new_next[i] != w->next_offset[i])
		{
			parts[n] = w->partitions[i];
			offs[n] = new_next[i];
			n++;
		}
	if (n > 0)
		sdp_store_offsets(w, n, parts, offs, false);
}

/* The next offset of every partition once the batch is done. */
void
sdp_next_offsets(FlowWorker *w, Batch *b, int64 *new_next)
{
	for (int i = 0; i < w->npartitions; i++)
		new_next[i] = w->next_offset[i];
	for (int i = 0; i < b->nmsgs; i++)
	{
		rd_kafka_message_t *m = b->msgs[i];
		int			idx = (m->partition <= w->max_partition_id) ? w->partition_index[m->partition] : -1;

		if (idx >= 0 && m->offset + 1 > new_next[idx])
			new_next[idx] = m->offset + 1;
	}
}

typedef enum BatchOutcome
{
	BATCH_COMMITTED,
	BATCH_DATA_ERROR,			/* retry isolating the bad messages */
	BATCH_FAILED				/* on_error = fail met a bad message */
} BatchOutcome;

/*
 * One attempt at the batch in one transaction: all rows at once (fast path)
 * or with bad messages isolated.  Errors that are not data errors propagate.
 */
static BatchOutcome
attempt_batch(FlowWorker *w, Batch *b, bool isolate, int64 *new_next, char **fail_message)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile BatchOutcome outcome = BATCH_COMMITTED;

	b->rows_out = 0;
	b->rows_written = 0;
	b->rows_skipped = 0;

	sdp_start_transaction();
	PG_TRY();
	{
		const char *stage;

		SPI_connect();
		MemoryContextSwitchTo(cxt);		/* the batch's memory, not SPI's */
		PushActiveSnapshot(GetTransactionSnapshot());

		/* Decoding needs a transaction too (input functions, error messages read the catalogs). */
		if (!b->decoded)
		{
			sdp_decode_batch(w, b);
			b->decoded = true;
			b->ndead_decode = list_length(b->dead);
		}
		if (b->ndead_decode > 0 && w->opts.on_error == SDP_ON_ERROR_FAIL)
		{
			DeadLetter *dl = linitial(b->dead);

			*fail_message = psprintf("decode of partition %d offset %lld: %s", dl->msg->partition,
									 (long long) dl->msg->offset, dl->error);
			outcome = BATCH_FAILED;
		}
		else if (!isolate)
			run_rows(w, b, 0, b->nrows, &stage);
		else if (b->nrows > 0 && !isolate_rows(w, b, 0, b->nrows, fail_message))
			outcome = BATCH_FAILED;
		if (outcome == BATCH_COMMITTED)
		{
			sdp_write_dead_letters(w, b);
			sdp_write_batch_offsets(w, b, new_next);
			sdp_notify_rows(w, b->rows_written);
		}
		PopActiveSnapshot();
		SPI_finish();
		if (outcome == BATCH_COMMITTED)
			CommitTransactionCommand();
		else
			AbortCurrentTransaction();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		if (isolate || !sdp_is_data_error(edata->sqlerrcode))
			PG_RE_THROW();
		FlushErrorState();
		AbortCurrentTransaction();
		MemoryContextSwitchTo(cxt);
		outcome = BATCH_DATA_ERROR;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);

	/* dead letters found while isolating are dropped with a rolled-back attempt */
	if (outcome != BATCH_COMMITTED)
		b->dead = list_truncate(b->dead, b->ndead_decode);
	return outcome;
}

/*
 * Process one batch to its commit.  Data errors are isolated to messages;
 * other errors are retried with backoff (the batch is kept in memory), so
 * the flow waits out a missing table or a full disk instead of losing data.
 */
void
sdp_process_batch(FlowWorker *w, Batch *b)
{
	int64	   *new_next = palloc(sizeof(int64) * w->npartitions);
	char	   *fail_message = NULL;
	int64		decode_dead;
	volatile BatchOutcome outcome = BATCH_COMMITTED;

	pgstat_report_activity(STATE_RUNNING, "sdp: processing batch");
	if (w->op)
	{
		sdp_stateful_process_batch(w, b, new_next);
		sdp_account_batch(w, b, new_next, b->ndead_decode);
		return;
	}

	for (;;)
	{
		MemoryContext cxt = CurrentMemoryContext;
		volatile bool retry = false;

		PG_TRY();
		{
			outcome = attempt_batch(w, b, false, new_next, &fail_message);
			if (outcome == BATCH_DATA_ERROR)
				outcome = attempt_batch(w, b, true, new_next, &fail_message);
		}
		PG_CATCH();
		{
			ErrorData  *edata;
			char	   *msg;

			MemoryContextSwitchTo(cxt);
			edata = CopyErrorData();
			FlushErrorState();
			AbortCurrentTransaction();
			MemoryContextSwitchTo(cxt);
			msg = psprintf("batch of %d messages not written, retrying in %d ms: %s",
						   b->nmsgs, Max(w->error_backoff_ms, 100), edata->message);
			ereport(LOG, (errmsg("sdp flow \"%s\": %s", w->args.name, msg)));
			sdp_worker_set_error(w, msg);
			retry = true;
		}
		PG_END_TRY();

		if (!retry)
			break;
		/* wait, staying responsive to stop requests, and try the same batch again */
		w->error_backoff_ms = Min(Max(w->error_backoff_ms * 2, 100), 30000);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 w->error_backoff_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		b->dead = list_truncate(b->dead, b->ndead_decode);
	}
	w->error_backoff_ms = 0;
	decode_dead = b->ndead_decode;

	if (outcome == BATCH_FAILED)
		sdp_worker_fail(w, fail_message);
	sdp_account_batch(w, b, new_next, decode_dead);
	pgstat_report_activity(STATE_IDLE, NULL);
}

/*
 * The batch has committed (durably, as synchronous_commit says): advance the
 * offsets, record its latencies and publish its counters.
 */
void
sdp_account_batch(FlowWorker *w, Batch *b, int64 *new_next, int64 decode_dead)
{
	int64		commit_us = sdp_unix_now_us();

	/* The batch is durable (as synchronous_commit says): account for it. */
	memcpy(w->next_offset, new_next, sizeof(int64) * w->npartitions);
	for (int i = 0; i < b->nmsgs; i++)
	{
		int64		ts;
		rd_kafka_timestamp_type_t tstype;

		ts = rd_kafka_message_timestamp(b->msgs[i], &tstype);
		if (tstype == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE || ts <= 0)
			ts = b->read_us / 1000;
		sdp_metrics_record(&w->metrics,
						   (commit_us - b->read_us) / 1000.0,
						   (b->read_us - ts * 1000) / 1000.0,
						   (commit_us - ts * 1000) / 1000.0);
	}
	sdp_metrics_batch(&w->metrics, b->nmsgs, b->rows_written, (commit_us - b->read_us) / 1000.0);

	SpinLockAcquire(&w->slot->mutex);
	w->slot->messages_read += b->nmsgs;
	w->slot->rows_written += b->rows_written;
	w->slot->rows_filtered += Max(0, b->nrows - b->rows_skipped - (list_length(b->dead) - decode_dead) - b->rows_out);
	if (w->opts.on_error == SDP_ON_ERROR_SKIP)
		w->slot->rows_skipped += b->rows_skipped + list_length(b->dead);
	else
		w->slot->rows_dead_lettered += list_length(b->dead);
	w->slot->rows_late += b->rows_late;
	w->slot->batches++;
	w->slot->last_commit_at = GetCurrentTimestamp();
	for (int i = 0; i < w->npartitions && i < SDP_MAX_PARTITIONS; i++)
		w->slot->partitions[i].committed = w->next_offset[i];
	SpinLockRelease(&w->slot->mutex);
}

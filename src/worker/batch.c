/*
 * batch.c
 *		The pipeline of one batch, from the messages polled to the commit.
 *
 *	decode -> transform -> operator (stateful flows) -> write ->
 *	dead letters and notify -> offsets -> commit
 *
 * all in one transaction.  A stateless flow is the pipeline without the
 * operator stage and stores its offsets with every batch; a stateful flow
 * stores them at its checkpoints, with the state they match.  A batch with
 * no messages (a stateful flow's timers and checkpoints while the input is
 * quiet) takes the same path.
 *
 * Bad input never stops the batch.  A message that does not decode is set
 * aside at once.  When the transform or the write raises a data error, the
 * attempt is rolled back and made again with the stage isolated (isolate.c):
 * the bad messages, or the operator's bad rows, are found and set aside
 * (dead_letter.c) and the rest commits.
 *
 * Which message is at fault is told by evidence, not only by SQLSTATE: a
 * data error is the message's; any other error a row can cause (a key too
 * long for an index, a row-level security policy) is the message's when
 * the rest of the batch goes through, and the flow's when every message
 * fails alike (a revoked privilege, a dropped table).
 *
 * How a batch ends is returned to the worker loop, which acts on it:
 * committed; retry (the flow's fault, or one no row causes: a deadlock, a
 * full disk, so nothing is dead-lettered for the environment's sake); fail (on_error = fail met a bad message, or the state outgrew its
 * limit); restart (an error after the operator changed its state, which is
 * in shared memory and does not roll back: the worker restarts from its
 * last checkpoint and replays; emissions are upserts and dead letters are
 * unique per message, so the replay duplicates nothing).
 */
#include "worker/batch.h"
#include "worker/backfill.h"
#include "kafka/outbox.h"
#include "worker/worker_slot.h"
#include "worker/debezium.h"
#include "worker/tombstone.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"

#include "worker/dead_letter.h"
#include "worker/isolate.h"
#include "exec/json_decode.h"
#include "worker/formats.h"
#include "kafka/kafka_source.h"
#include "worker/offsets.h"
#include "worker/skip.h"
#include "worker/stateful.h"
#include "decl/catalog.h"
#include "shmem/metrics.h"

/* The NOTIFY of option notify, prepared once per worker (sdp_batch_prepare). */
static SPIPlanPtr notify_plan = NULL;

/* The statements a batch runs besides the flow's own (in a catalog scope, with SPI connected). */
void
sdp_batch_prepare(FlowWorker *w)
{
	sdp_offsets_prepare(w);
	sdp_dead_letters_prepare(w);
	if (w->opts.notify_channel)
	{
		Oid			types[2] = {TEXTOID, TEXTOID};

		notify_plan = SPI_prepare("SELECT pg_notify($1, $2)", 2, types);
		if (notify_plan == NULL)
			elog(ERROR, "could not prepare NOTIFY: %s", SPI_result_code_string(SPI_result));
		SPI_keepplan(notify_plan);
	}
}

/* ---- decode ---- */

/* What decoding works with; one per batch attempt. */
typedef struct DecodeRun
{
	FlowWorker *w;
	Batch	   *b;
	Datum	   *values;
	bool	   *nulls;
	Datum		topic;
	int			event_time_index;	/* the operator's event-time column in the input schema, -1: none */
	int			nrows_done;		/* rows of the messages decoded and kept so far */
	int			ndead_done;		/* and the messages set aside so far */
} DecodeRun;

/*
 * The decoded row (d->values, d->nulls) has an event time windows and
 * watermarks cannot hold: its message is set aside, and true returned.
 */
static bool
event_time_unusable(DecodeRun *d, Batch *b, rd_kafka_message_t *m)
{
	int			e = d->event_time_index;

	if (e < 0 || d->nulls[e] || sdp_event_time_usable(DatumGetTimestampTz(d->values[e])))
		return false;
	sdp_dead_letter_add(b, m, "decode",
						psprintf("field \"%s\": event time %s is outside the range windows and watermarks can hold (%s to %s)",
								 d->w->prep.schema->columns[e].name,
								 sdp_timestamp_text(DatumGetTimestampTz(d->values[e])),
								 sdp_timestamp_text(MIN_TIMESTAMP + SDP_EVENT_TIME_MARGIN_US),
								 sdp_timestamp_text(END_TIMESTAMP - SDP_EVENT_TIME_MARGIN_US - 1)),
						ERRCODE_DATETIME_VALUE_OUT_OF_RANGE);
	return true;
}

/* Message m (index i) as a row of the input schema, or set aside with the reason. */
static void
decode_one(DecodeRun *d, int i)
{
	FlowWorker *w = d->w;
	Batch	   *b = d->b;
	rd_kafka_message_t *m = b->msgs[i];
	int			ncols = w->prep.schema->ncolumns;
	Datum	   *values = d->values;
	bool	   *nulls = d->nulls;
	char	   *error;
	int			sqlstate;
	int64		ts;
	rd_kafka_timestamp_type_t tstype;

	/* the owner asked to skip it: it is dead-lettered as it is (b->skipped) */
	if (b->skip_msg != NULL && b->skip_msg[i])
		return;
	/* a tombstone: skipped (counted at the end), or a row that deletes (tombstone.c) */
	b->row_tomb[b->nrows] = false;
	if (m->payload == NULL && w->opts.on_tombstone == SDP_TOMBSTONE_SKIP)
		return;
	if (w->prep.envelope != NULL && (m->payload != NULL || w->opts.on_tombstone == SDP_TOMBSTONE_DELETE))
	{
		/* a Debezium event (or a tombstone that deletes): the row it applies (debezium.c) */
		if (!sdp_debezium_decode(w, m, values, nulls, &b->row_tomb[b->nrows], &error, &sqlstate))
		{
			sdp_dead_letter_add(b, m, "decode", error, sqlstate);
			return;
		}
	}
	else if (m->payload == NULL && w->opts.on_tombstone == SDP_TOMBSTONE_DELETE)
	{
		if (m->key == NULL || !sdp_bytes_are_text(m->key, m->key_len))
		{
			sdp_dead_letter_add(b, m, "decode",
								pstrdup(m->key == NULL ? "a tombstone without a key: no row to delete"
										: "a tombstone whose key is not text: no row to delete"),
								ERRCODE_INVALID_PARAMETER_VALUE);
			return;
		}
		for (int c = 0; c < ncols; c++)
			nulls[c] = true;
		b->row_tomb[b->nrows] = true;
	}
	else if (!sdp_formats_decode_value(w, m, values, nulls, &error, &sqlstate))
	{
		sdp_dead_letter_add(b, m, "decode", error, sqlstate);
		return;
	}
	if (event_time_unusable(d, b, m))
		return;
	/* the Kafka columns, but those the transform does not read (left null: w->prep.unread_meta) */
	values[ncols + SDP_META_TOPIC] = d->topic;
	nulls[ncols + SDP_META_TOPIC] = (w->prep.unread_meta & (1 << SDP_META_TOPIC)) != 0;
	values[ncols + SDP_META_PARTITION] = Int32GetDatum(m->partition);
	nulls[ncols + SDP_META_PARTITION] = (w->prep.unread_meta & (1 << SDP_META_PARTITION)) != 0;
	values[ncols + SDP_META_OFFSET] = Int64GetDatum(m->offset);
	nulls[ncols + SDP_META_OFFSET] = (w->prep.unread_meta & (1 << SDP_META_OFFSET)) != 0;
	nulls[ncols + SDP_META_KEY] = true;
	if (!(w->prep.unread_meta & (1 << SDP_META_KEY)) &&
		!sdp_formats_key(w, m, &values[ncols + SDP_META_KEY], &nulls[ncols + SDP_META_KEY], &error))
	{
		sdp_dead_letter_add(b, m, "decode", error, ERRCODE_INVALID_TEXT_REPRESENTATION);
		return;
	}
	nulls[ncols + SDP_META_TIMESTAMP] = true;
	if (!(w->prep.unread_meta & (1 << SDP_META_TIMESTAMP)))
	{
		ts = sdp_message_timestamp(m, &tstype);
		nulls[ncols + SDP_META_TIMESTAMP] = (tstype == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE || ts < 0);
		if (!nulls[ncols + SDP_META_TIMESTAMP])
			values[ncols + SDP_META_TIMESTAMP] =
				TimestampTzGetDatum(ts * 1000 - (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY);
	}

	if (w->prep.schema->nmeta > SDP_META_HEADERS)
	{
		nulls[ncols + SDP_META_HEADERS] = true;
		if (w->prep.want_headers)
			values[ncols + SDP_META_HEADERS] = kafka_message_headers_jsonb(m, &nulls[ncols + SDP_META_HEADERS]);
	}

	b->rows[b->nrows] = heap_form_tuple(w->prep.schema->tupdesc, values, nulls);
	b->row_msg[b->nrows] = i;
	b->nrows++;
}

/*
 * A backfill's row (backfill.c): already of the schema's types (its source
 * was cast to them); its event time is checked as a message's is.
 */
static void
decode_backfill_one(DecodeRun *d, int i)
{
	FlowWorker *w = d->w;
	Batch	   *b = d->b;
	rd_kafka_message_t *m = b->msgs[i];
	int			ncols = w->prep.schema->ncolumns;
	Datum	   *values = d->values;
	bool	   *nulls = d->nulls;

	b->row_tomb[b->nrows] = false;
	sdp_backfill_decode(w, m, values, nulls);
	if (event_time_unusable(d, b, m))
		return;
	values[ncols + SDP_META_TOPIC] = d->topic;
	nulls[ncols + SDP_META_TOPIC] = false;
	b->rows[b->nrows] = heap_form_tuple(w->prep.schema->tupdesc, values, nulls);
	b->row_msg[b->nrows] = i;
	b->nrows++;
}

/* Decode messages [lo, hi), after what was kept so far (what a failed range left is dropped). */
static void
decode_range(void *arg, int lo, int hi)
{
	DecodeRun  *d = arg;

	d->b->nrows = d->nrows_done;
	d->b->dead = list_truncate(d->b->dead, d->ndead_done);
	for (int i = lo; i < hi; i++)
	{
		CHECK_FOR_INTERRUPTS();	/* a cancel is not the message's fault (sdp_is_decode_error) */
		if (d->b->backfill)
			decode_backfill_one(d, i);
		else
			decode_one(d, i);
	}
	d->nrows_done = d->b->nrows;
	d->ndead_done = list_length(d->b->dead);
}

/* Message i raised alone while decoding: its error is the reason. */
static bool
bad_decode(void *arg, int i, ErrorData *edata)
{
	DecodeRun  *d = arg;

	d->b->nrows = d->nrows_done;
	d->b->dead = list_truncate(d->b->dead, d->ndead_done);
	sdp_dead_letter_add(d->b, d->b->msgs[i], "decode", edata->message, edata->sqlerrcode);
	d->ndead_done = list_length(d->b->dead);
	return true;
}

/*
 * Decode every message of the batch into a row of the input schema; the
 * ones that do not decode are set aside.  At once, or, after a message
 * raised (a value its column's input function refused), with the raising
 * messages isolated in subtransactions.
 */
static void
stage_decode(FlowWorker *w, Batch *b, bool isolate)
{
	DecodeRun	d;

	d.w = w;
	d.b = b;
	d.values = palloc(sizeof(Datum) * w->prep.schema->tupdesc->natts);
	d.nulls = palloc(sizeof(bool) * w->prep.schema->tupdesc->natts);
	d.topic = CStringGetTextDatum(w->source.topic);
	d.event_time_index = sdp_stateful_event_time_index(w);
	d.nrows_done = 0;
	d.ndead_done = 0;

	/* from scratch: an attempt that raised part way through may have left rows behind */
	b->nrows = 0;
	b->dead = NIL;
	b->rows = palloc(sizeof(HeapTuple) * Max(b->nmsgs, 1));
	b->row_msg = palloc(sizeof(int) * Max(b->nmsgs, 1));
	b->row_tomb = palloc0(sizeof(bool) * Max(b->nmsgs, 1));
	if (!isolate)
	{
		b->decode_raised = true;	/* until it returns */
		decode_range(&d, 0, b->nmsgs);
		b->decode_raised = false;
	}
	else
		(void) sdp_isolate(decode_range, bad_decode, sdp_is_decode_error, &d, 0, b->nmsgs);
}

/* ---- transform and write, with their isolating variants ---- */

/*
 * What an isolated stage works on: the batch, and for the operator's rows,
 * those rows.
 *
 * A unit that fails alone with a data error is bad, whatever the others
 * do.  A unit that fails alone with any other error a row can cause (a key
 * too long for an index, a row a row-level security policy rejects) is only
 * a suspect: if at least one other unit of the stage went through, the
 * error is the suspect's own and it is set aside; if none did, there is no
 * evidence against the rows (a revoked privilege, a dropped table fails
 * them all alike) and the error is raised again for the whole batch, which
 * the worker retries.
 */
typedef struct StageRun
{
	FlowWorker *w;
	Batch	   *b;
	const char *stage;			/* the stage running, for the reason of a bad unit */
	HeapTuple  *rows;			/* the transform's output collected (stateful), or the emitted rows */
	int32	   *parts;			/* stateful: the Kafka partition of each of rows */
	int			nrows;
	char	   *fail_message;
	bool		at_once;		/* the whole batch, not isolating: a stateless flow's rows may go straight to the write */
	int			nunits_ok;		/* units that went through */
	List	   *suspects;		/* Suspect *: units that failed alone with an error not about data */
	/* an operator that undoes: a failed unit's changes, undone once its subtransaction has rolled back */
	bool		undo_pending;
	int			undo_mark;
	int			undo_nemitted;
} StageRun;

typedef struct Suspect
{
	int			unit;
	const char *stage;
	ErrorData  *edata;
} Suspect;

/* A stateless flow: transform and write input rows [lo, hi). */
static void
transform_and_write(void *arg, int lo, int hi)
{
	StageRun   *r = arg;
	HeapTuple  *out;
	int			nout;
	int64		written;

	HeapTuple  *rows = r->b->rows + lo;
	int			nrows = hi - lo;
	int64		deleted = 0;
	int			ntomb = 0;

	if (r->w->prep.tombstone_plan != NULL || r->w->prep.delete_plan != NULL)
	{
		/* tombstones (or delete events) first, and the rows they would delete left out */
		r->stage = "write";
		rows = palloc(sizeof(HeapTuple) * Max(hi - lo, 1));
		if (r->w->prep.delete_plan != NULL)
		{
			bool		done;
			int64		dout;
			int64		dwritten;

			deleted = sdp_debezium_apply(r->w, r->b, lo, hi, rows, &nrows, &done, &dout, &dwritten);
			for (int i = lo; i < hi; i++)
				ntomb += r->b->row_tomb[i];
			if (done)
			{
				/* applied in order, upserts and deletes alike */
				r->b->rows_out += dout;
				r->b->rows_written += dwritten + deleted;
				r->b->rows_tomb += ntomb;
				r->nunits_ok += hi - lo;
				return;
			}
		}
		else
		{
			deleted = sdp_tombstone_apply(r->w, r->b, lo, hi, rows, &nrows);
			for (int i = lo; i < hi; i++)
				ntomb += r->b->row_tomb[i];
		}
	}
	r->stage = "transform";
	/*
	 * At once, in append mode, the transform's rows go straight into the
	 * target's row layout as they come; a failure is told apart by stage
	 * when the batch runs again, isolating, the other way.
	 */
	if (!r->at_once ||
		!sdp_table_write_transformed(&r->w->prep.table_write, &r->w->prep.transform, rows, nrows, &nout, &written))
	{
		nout = sdp_transform_run(&r->w->prep.transform, rows, nrows, &out);
		r->stage = "write";
		written = sdp_table_write_rows(&r->w->prep.table_write, out, nout);
	}
	r->b->rows_out += nout;
	r->b->rows_written += written + deleted;
	r->b->rows_tomb += ntomb;
	r->nunits_ok += hi - lo;
}

/*
 * A stateful flow: transform input rows [lo, hi) and check them for the
 * operator; collect the output, and each output row's partition, which
 * owns the keys it creates (sdp_stateful_check_rows).  When the operator's
 * rows carry their partition (window_agg over rows that have
 * kafka_partition) the transform runs once; otherwise the rows are in
 * partition order (sort_rows_by_partition) and it runs over each
 * partition's rows apart (it works row by row: api.c).
 */
static void
transform_for_operator(void *arg, int lo, int hi)
{
	StageRun   *r = arg;
	HeapTuple  *all = NULL;
	int32	   *parts = NULL;
	int			nall = 0;

	r->stage = "transform";
	if (sdp_stateful_rows_know_partition(r->w))
	{
		/* the operator's rows say their partition: one run */
		nall = sdp_transform_run(&r->w->prep.transform, r->b->rows + lo, hi - lo, &all);
		parts = palloc(sizeof(int32) * (nall + 1));
		for (int i = 0; i < nall; i++)
			parts[i] = sdp_stateful_row_partition(r->w, all[i]);
	}
	for (int start = sdp_stateful_rows_know_partition(r->w) ? hi : lo; start < hi;)
	{
		int32		p = r->b->msgs[r->b->row_msg[start]]->partition;
		int			end = start + 1;
		HeapTuple  *out;
		int			nout;

		while (end < hi && r->b->msgs[r->b->row_msg[end]]->partition == p)
			end++;
		nout = sdp_transform_run(&r->w->prep.transform, r->b->rows + start, end - start, &out);
		all = all ? repalloc(all, sizeof(HeapTuple) * (nall + nout + 1)) : palloc(sizeof(HeapTuple) * (nout + 1));
		parts = parts ? repalloc(parts, sizeof(int32) * (nall + nout + 1)) : palloc(sizeof(int32) * (nout + 1));
		memcpy(all + nall, out, sizeof(HeapTuple) * nout);
		for (int i = 0; i < nout; i++)
			parts[nall + i] = p;
		nall += nout;
		start = end;
	}
	sdp_stateful_check_rows(r->w, all, parts, nall);
	/* the rows stay valid until SPI_finish */
	r->rows = repalloc(r->rows, sizeof(HeapTuple) * (r->nrows + nall + 1));
	r->parts = repalloc(r->parts, sizeof(int32) * (r->nrows + nall + 1));
	if (nall > 0)
	{
		memcpy(r->rows + r->nrows, all, sizeof(HeapTuple) * nall);
		memcpy(r->parts + r->nrows, parts, sizeof(int32) * nall);
	}
	r->nrows += nall;
	r->nunits_ok += hi - lo;
}

/*
 * An operator that undoes its changes: transform input rows [lo, hi) and
 * hand their rows to the operator; a failure in either undoes what the
 * operator changed for them (the subtransaction rolls the rest back).
 */
static void
apply_pending_undo(StageRun *r)
{
	if (!r->undo_pending)
		return;
	r->undo_pending = false;
	sdp_stateful_undo_to(r->w, r->undo_mark, r->undo_nemitted);
}

static void
transform_and_operate(void *arg, int lo, int hi)
{
	StageRun   *r = arg;
	int			first;
	int			nemitted;
	int			mark;

	apply_pending_undo(r);
	first = r->nrows;
	mark = sdp_stateful_mark(r->w, &nemitted);
	PG_TRY();
	{
		transform_for_operator(r, lo, hi);
		r->stage = "transform";
		sdp_stateful_handle_rows(r->w, r->rows + first, r->parts + first, r->nrows - first);
	}
	PG_CATCH();
	{
		/*
		 * Undone after the subtransaction has rolled back (at the next
		 * unit, or the end of the stage): the error may have left a lock
		 * of the state store held, which the rollback releases.
		 */
		r->undo_pending = true;
		r->undo_mark = mark;
		r->undo_nemitted = nemitted;
		r->nrows = first;
		PG_RE_THROW();
	}
	PG_END_TRY();
}

/*
 * Put the batch's rows in partition order, each partition's in the order
 * they came (offset order): the stateful transform runs per partition.
 */
static void
sort_rows_by_partition(Batch *b)
{
	HeapTuple  *rows;
	int		   *row_msg;
	int			k = 0;
	int32		pmin = PG_INT32_MAX,
				pmax = -1;

	for (int i = 0; i < b->nrows; i++)
	{
		int32		p = b->msgs[b->row_msg[i]]->partition;

		pmin = Min(pmin, p);
		pmax = Max(pmax, p);
	}
	if (pmax <= pmin)
		return;					/* one partition (or none) */
	rows = palloc(sizeof(HeapTuple) * b->nrows);
	row_msg = palloc(sizeof(int) * b->nrows);
	/* a pass per partition present: a worker has few, and this keeps the order within each */
	for (int32 p = pmin; p <= pmax && k < b->nrows;)
	{
		int32		next = PG_INT32_MAX;

		for (int i = 0; i < b->nrows; i++)
		{
			int32		q = b->msgs[b->row_msg[i]]->partition;

			if (q == p)
			{
				rows[k] = b->rows[i];
				row_msg[k++] = b->row_msg[i];
			}
			else if (q > p)
				next = Min(next, q);
		}
		p = next;
	}
	Assert(k == b->nrows);
	memcpy(b->rows, rows, sizeof(HeapTuple) * b->nrows);
	memcpy(b->row_msg, row_msg, sizeof(int) * b->nrows);
	pfree(rows);
	pfree(row_msg);
}

/* The operator's emitted rows [lo, hi) into the target (or the outbox). */
static void
write_emitted(void *arg, int lo, int hi)
{
	StageRun   *r = arg;
	FlowWorker *w = r->w;
	HeapTuple  *rows = r->rows + lo;

	r->stage = "write";
	if (w->prep.emitted_desc)
	{
		/* a sink flow: into its outbox, as (flow_id, worker, key, value) */
		rows = palloc(sizeof(HeapTuple) * Max(hi - lo, 1));
		for (int i = lo; i < hi; i++)
			rows[i - lo] = sdp_outbox_row(w->prep.table_write.row_desc, w->args.flow_id, w->args.worker_no,
											   w->prep.emitted_desc, r->rows[i], w->prep.sink_key_attno,
											   w->prep.sink_avro, w->prep.sink_avro_id);
	}
	r->b->rows_written += sdp_table_write_rows(&w->prep.table_write, rows, hi - lo);
	r->nunits_ok += hi - lo;
}

/* Set unit i (an input row's message, or an emitted row) aside. */
static bool
set_unit_aside(StageRun *r, bool message, int i, const char *stage, ErrorData *edata)
{
	if (message)
		return sdp_set_aside(r->w, r->b, r->b->msgs[r->b->row_msg[i]], NULL, stage, edata, &r->fail_message);
	return sdp_set_aside(r->w, r->b, NULL,
						 sdp_row_as_json(r->w->prep.emitted_desc ? r->w->prep.emitted_desc : r->w->prep.table_write.row_desc, r->rows[i]),
						 stage, edata, &r->fail_message);
}

/* Unit i failed alone: bad if the error is about its data, else a suspect until the stage ends. */
static bool
bad_unit(StageRun *r, bool message, int i, ErrorData *edata)
{
	Suspect    *s;

	/* not the unit's fault but the flow's (check_ownership): the flow fails */
	if (sdp_stateful_fault(r->w) != NULL)
	{
		r->fail_message = (char *) sdp_stateful_fault(r->w);
		return false;
	}

	if (sdp_is_data_error(edata->sqlerrcode))
		return set_unit_aside(r, message, i, r->stage, edata);
	s = palloc(sizeof(Suspect));
	s->unit = i;
	s->stage = r->stage;
	s->edata = edata;
	r->suspects = lappend(r->suspects, s);
	return true;
}

static bool
bad_message(void *arg, int i, ErrorData *edata)
{
	return bad_unit(arg, true, i, edata);
}

static bool
bad_emitted_row(void *arg, int i, ErrorData *edata)
{
	return bad_unit(arg, false, i, edata);
}

/* Whether the previous attempt at the batch also found message m failing alone. */
static bool
suspected_before(Batch *b, rd_kafka_message_t *m)
{
	ListCell   *lc;

	foreach(lc, b->suspected)
	{
		SdpMessageId *id = lfirst(lc);

		if (id->partition == m->partition && id->offset == m->offset)
			return true;
	}
	return false;
}

/* Unit i failed alone: note the error, whatever it is (see emitted_row_fails_again). */
static bool
note_failure(void *arg, int i, ErrorData *edata)
{
	StageRun   *r = arg;
	Suspect    *s = palloc(sizeof(Suspect));

	s->unit = i;
	s->stage = r->stage;
	s->edata = edata;
	r->suspects = lappend(r->suspects, s);
	return true;
}

/* An emitted row that failed alone, run alone once more: was it the row (true, *edata set) or a passing moment? */
static bool
emitted_row_fails_again(StageRun *r, int unit, ErrorData **edata)
{
	StageRun	again = *r;

	again.suspects = NIL;
	(void) sdp_isolate(write_emitted, note_failure, sdp_is_row_error, &again, unit, unit + 1);
	if (again.suspects == NIL)
		return false;
	*edata = ((Suspect *) linitial(again.suspects))->edata;
	return true;
}

/*
 * Run an isolated stage over units [lo, hi) and judge its suspects.  Returns
 * false when on_error = fail met a bad unit; raises when the evidence does
 * not yet hold:
 *
 * - no unit went through: the suspects' first error, the flow's fault;
 * - a message failed alone that did not in the previous attempt: the batch
 *   is retried, and the message is set aside only if it fails alone again.
 *   Evidence gathered at one moment could otherwise blame messages for a
 *   privilege granted (or revoked) while the stage ran.
 *
 * An operator's emitted row cannot wait for another attempt (the state has
 * moved): it is run alone once more at once, and set aside if it fails again.
 */
static bool
run_isolated_stage(StageRun *r, SdpIsolateStep step, bool message, int lo, int hi)
{
	Batch	   *b = r->b;
	ListCell   *lc;
	List	   *seen = NIL;
	Suspect    *unconfirmed = NULL;

	if (!sdp_isolate(step, message ? bad_message : bad_emitted_row, sdp_is_row_error, r, lo, hi))
		return false;
	if (r->suspects == NIL)
		return true;
	if (r->nunits_ok == 0)
	{
		if (message)
			b->suspected = NIL;
		ReThrowError(((Suspect *) linitial(r->suspects))->edata);
	}
	if (message)
	{
		foreach(lc, r->suspects)
		{
			Suspect    *s = lfirst(lc);
			rd_kafka_message_t *m = b->msgs[b->row_msg[s->unit]];
			SdpMessageId *id = palloc(sizeof(SdpMessageId));

			id->partition = m->partition;
			id->offset = m->offset;
			seen = lappend(seen, id);
			if (unconfirmed == NULL && !suspected_before(b, m))
				unconfirmed = s;
		}
		b->suspected = seen;
		if (unconfirmed)
		{
			rd_kafka_message_t *m = b->msgs[b->row_msg[unconfirmed->unit]];
			ErrorData  *edata = unconfirmed->edata;

			edata->message = psprintf("%s (partition %d offset %lld failed alone: it is set aside if it does again)",
									  edata->message, m->partition, (long long) m->offset);
			ReThrowError(edata);
		}
	}
	foreach(lc, r->suspects)
	{
		Suspect    *s = lfirst(lc);
		ErrorData  *edata = s->edata;

		if (!message && !emitted_row_fails_again(r, s->unit, &edata))
			continue;
		if (!set_unit_aside(r, message, s->unit, s->stage, edata))
			return false;
	}
	return true;
}

/*
 * Before a stateless flow's rows are isolated after an error that a row
 * may cause but not its data (a privilege revoked, a table or a column
 * dropped, a row-level security policy), a few rows spread over the batch
 * are tried alone and rolled back: when each fails with the same SQLSTATE,
 * the error is the world's, not the rows', and it is raised again for the
 * batch at once (the worker retries it with backoff), instead of halving
 * down to every row (2N - 1 subtransactions of transform and write).  A
 * row that goes through, or another error, leaves the search to find the
 * bad rows.  The rows tried move on at each attempt, so that a batch whose
 * bad rows happen to be the ones tried is searched at the next.
 */
#define SDP_WORLD_PROBES 4

static void
world_fault(StageRun *r)
{
	static uint32 round = 0;
	Batch	   *b = r->b;
	StageRun	saved = *r;
	int64		rows_out = b->rows_out,
				rows_written = b->rows_written,
				rows_tomb = b->rows_tomb;
	int			units[SDP_WORLD_PROBES];
	ErrorData  *edata;

	if (b->world_errcode == 0 || b->nrows < 2 * SDP_WORLD_PROBES)
		return;
	round++;
	for (int k = 0; k < SDP_WORLD_PROBES; k++)
		units[k] = (int) (((int64) k * b->nrows / SDP_WORLD_PROBES + round) % b->nrows);
	edata = sdp_isolate_probe(transform_and_write, sdp_is_row_error, r, units, SDP_WORLD_PROBES, b->world_errcode);
	/* what the probes counted (they were rolled back) */
	*r = saved;
	b->rows_out = rows_out;
	b->rows_written = rows_written;
	b->rows_tomb = rows_tomb;
	if (edata != NULL)
		ReThrowError(edata);
}

/*
 * A stateless flow's rows: at once (fast path: an error aborts the attempt
 * and the next one isolates), or isolated.
 */
static bool
stage_stateless(FlowWorker *w, Batch *b, bool isolate, char **fail_message)
{
	StageRun	r = {w, b, "transform"};

	if (!isolate)
	{
		r.at_once = true;
		transform_and_write(&r, 0, b->nrows);
		return true;
	}
	world_fault(&r);
	if (run_isolated_stage(&r, transform_and_write, true, 0, b->nrows))
		return true;
	*fail_message = r.fail_message;
	return false;
}

/*
 * A stateful flow's rows: the transform (at once or isolated, as above),
 * then the operator, then the write of what it emitted.  Once the operator
 * has run the state has changed and the batch cannot be run again in place,
 * so the write is isolated from its first try.
 */
static bool
stage_stateful(FlowWorker *w, Batch *b, bool isolate, char **fail_message)
{
	bool		ok;
	StageRun	r = {w, b, "transform"};
	StageRun	e = {w, b, "write"};

	r.rows = palloc(sizeof(HeapTuple));
	r.parts = palloc(sizeof(int32));
	if (!sdp_stateful_rows_know_partition(w))
		sort_rows_by_partition(b);
	sdp_stateful_begin_attempt(w);
	if (isolate && sdp_stateful_can_undo(w))
	{
		/*
		 * An operator that undoes its changes (the processor, whose handlers
		 * are the owner's code) is isolated with the transform: a part of
		 * the batch that fails in either is undone, and its bad messages
		 * are set aside whichever stage raised.
		 */
		sdp_stateful_operate_begin(w);
		ok = run_isolated_stage(&r, transform_and_operate, true, 0, b->nrows);
		apply_pending_undo(&r);
		if (!ok)
		{
			*fail_message = r.fail_message;
			return false;
		}
		b->rows_out = r.nrows;
		e.nrows = sdp_stateful_operate_end(w, b, &e.rows);
	}
	else
	{
		if (!isolate)
			transform_for_operator(&r, 0, b->nrows);
		else if (!run_isolated_stage(&r, transform_for_operator, true, 0, b->nrows))
		{
			*fail_message = r.fail_message;
			return false;
		}
		b->rows_out = r.nrows;

		SDP_BURST_MARK(0);
		e.nrows = sdp_stateful_operate(w, b, r.rows, r.parts, r.nrows, &e.rows);
	}
	SDP_BURST_MARK(1);
	SDP_BURST_ROWS(e.nrows);

	if (run_isolated_stage(&e, write_emitted, false, 0, e.nrows))
	{
		SDP_BURST_MARK(2);
		return true;
	}
	*fail_message = e.fail_message;
	return false;
}

/* ---- notify ---- */

/*
 * Option notify: tell listeners, at commit, that the batch wrote rows
 * (payload: {"flow": ..., "target": ..., "rows": n}), so that applications
 * read what changed as soon as it is there, without polling.
 */
static void
stage_notify(FlowWorker *w, int64 rows)
{
	MemoryContext cxt = CurrentMemoryContext;
	SdpCatalogScope scope;
	StringInfoData payload;
	Datum		values[2];

	if (notify_plan == NULL || rows <= 0)
		return;
	initStringInfo(&payload);
	appendStringInfoString(&payload, "{\"flow\": ");
	escape_json(&payload, w->args.name);
	appendStringInfoString(&payload, ", \"target\": ");
	escape_json(&payload, w->prep.table_write.relname);
	appendStringInfo(&payload, ", \"rows\": " INT64_FORMAT "}", rows);
	values[0] = CStringGetTextDatum(w->opts.notify_channel);
	values[1] = CStringGetTextDatum(payload.data);
	sdp_catalog_enter(&scope);
	if (SPI_execute_plan(notify_plan, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "NOTIFY %s failed", w->opts.notify_channel);
	sdp_catalog_leave(&scope);
	MemoryContextSwitchTo(cxt);
}

/* ---- one attempt, and the batch ---- */

/*
 * The batch's statements are over (or raised): its statement_timeout ends.
 * A timeout that fired after the last statement's last check for
 * interrupts is forgotten: the statements it bounded are done.
 */
static void
batch_timeout_end(FlowWorker *w)
{
	if (w->opts.statement_timeout_ms <= 0)
		return;
	disable_timeout(STATEMENT_TIMEOUT, true);
	if (get_timeout_indicator(STATEMENT_TIMEOUT, true))
		QueryCancelPending = false;
}

/*
 * One attempt at the batch in one transaction: every stage at once, or with
 * the bad units isolated.  Returns false when on_error = fail met a bad
 * message (*fail_message set; the transaction is rolled back).  Errors
 * propagate, with the transaction still open.
 */
static bool
attempt(FlowWorker *w, Batch *b, bool isolate, char **fail_message)
{
	MemoryContext cxt = CurrentMemoryContext;
	bool		ok = true;
	int			guc_level;

	b->rows_out = 0;
	b->rows_tomb = 0;
	b->rows_written = 0;
	b->rows_skipped = 0;
	b->rows_late = 0;
	b->checkpointed = false;
	/* the set-aside of an earlier attempt was rolled back with it */
	b->dead = list_truncate(b->dead, b->ndead_decode);

	sdp_start_transaction();

	/*
	 * What the batch's statements change in the session's settings (a
	 * transform calling set_config, for role, search_path or anything else)
	 * is undone before it commits: AtEOXact_GUC as at an abort, as index
	 * builds undo what index functions set.  No batch sees another's.
	 */
	guc_level = NewGUCNestLevel();

	/* the flow's statement_timeout bounds the batch's stages (a background worker has no statement_timeout by itself) */
	if (w->opts.statement_timeout_ms > 0)
		enable_timeout_after(STATEMENT_TIMEOUT, w->opts.statement_timeout_ms);
	SPI_connect();
	MemoryContextSwitchTo(cxt); /* the batch's memory, not SPI's */
	PushActiveSnapshot(GetTransactionSnapshot());

	/* decoding happens once, in the first attempt (input functions read the catalogs) */
	if (!b->decoded)
	{
		stage_decode(w, b, isolate);
		b->decoded = true;
		b->ndead_decode = list_length(b->dead);
	}

	if (b->ndead_decode > 0 && w->opts.on_error == SDP_ON_ERROR_FAIL)
	{
		DeadLetter *dl = linitial(b->dead);

		*fail_message = psprintf("decode of partition %d offset %lld: %s", dl->msg->partition,
								 (long long) dl->msg->offset, dl->error);
		ok = false;
	}
	else if (w->prep.op == NULL)
		ok = stage_stateless(w, b, isolate, fail_message);
	else
		ok = stage_stateful(w, b, isolate, fail_message);
	/* the flow's own statements after the stages are not bounded: a checkpoint of a large state may take long */
	batch_timeout_end(w);

	if (ok)
	{
		sdp_write_dead_letters(w, b);
		stage_notify(w, b->rows_written);
		/* a backfill's rows move its position, not the offsets (the boundary's) */
		if (b->backfill)
			memcpy(b->next, w->parts.next, sizeof(int64) * w->parts.n);
		else
			sdp_next_offsets(w, b, b->next);
		if (w->prep.op == NULL)
			sdp_write_moved_offsets(w, b->next);
		else
			sdp_stateful_checkpoint_if_due(w, b);
		if (b->backfill)
			sdp_backfill_store_position(w, b);
		/* a sink flow: the rows its relay has committed to Kafka go with this batch */
		if (w->relay)
			kafka_relay_delete_in_batch(w->relay);
	}

	batch_timeout_end(w);
	AtEOXact_GUC(false, guc_level);
	PopActiveSnapshot();
	SPI_finish();
	if (ok)
	{
		CommitTransactionCommand();
		SDP_BURST_REPORT();
	}
	else
	{
		AbortCurrentTransaction();
		SDP_BURST_ROWS(0);
	}
	MemoryContextSwitchTo(cxt);
	return ok;
}

/*
 * Run the batch to its end: the fast attempt, then, after a data error, the
 * isolating one.  Returns how it ended; *message says why when it did not
 * commit.  Leaves no transaction open.
 */
SdpBatchOutcome
sdp_batch_run(FlowWorker *w, Batch *b, char **message)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool isolate = false;

	if (b->next == NULL)
		b->next = palloc(sizeof(int64) * Max(w->parts.n, 1));
	/*
	 * The messages its owner asked to skip first: their schemas are not
	 * fetched (one the registry cannot give would hold the batch for ever).
	 * Then the writer schemas its Avro and Protobuf messages name, before
	 * the transaction: a network wait.
	 */
	if (!b->decoded && !b->backfill)
	{
		sdp_skips_mark(w, b);
		if (!sdp_formats_fetch_schemas(w, b, message))
			return SDP_BATCH_RETRY;
	}
	for (;;)
	{
		ErrorData  *volatile edata = NULL;
		volatile bool ok = false;
		bool		mutated;

		TimestampTz started = GetCurrentTimestamp();

		sdp_stateful_clear_fault(w);
		PG_TRY();
		{
			ok = attempt(w, b, isolate, message);
		}
		PG_CATCH();
		{
			/*
			 * Out of whatever transaction and subtransactions the error left
			 * open (a stage's internal subtransaction included), with
			 * interrupts held until it is done: the recovery of PostgreSQL's
			 * own workers (DisableSubscriptionAndExit).
			 */
			HOLD_INTERRUPTS();
			MemoryContextSwitchTo(cxt);
			edata = CopyErrorData();
			FlushErrorState();
			batch_timeout_end(w);
			AbortOutOfAnyTransaction();
			RESUME_INTERRUPTS();
		}
		PG_END_TRY();
		MemoryContextSwitchTo(cxt);

		/* the flow's own fault (a key on two partitions of a flow with workers): it fails */
		if (edata != NULL && sdp_stateful_fault(w) != NULL)
		{
			*message = (char *) sdp_stateful_fault(w);
			b->dead = list_truncate(b->dead, b->ndead_decode);
			return SDP_BATCH_FAIL;
		}
		/* the flow's statement_timeout cancelled it: say which bound, in the status */
		if (edata != NULL && edata->sqlerrcode == ERRCODE_QUERY_CANCELED && w->opts.statement_timeout_ms > 0 &&
			GetCurrentTimestamp() >= TimestampTzPlusMilliseconds(started, w->opts.statement_timeout_ms))
			edata->message = psprintf("%s: the batch's statements ran longer than the flow's statement_timeout of %d ms",
									  edata->message, w->opts.statement_timeout_ms);

		mutated = sdp_stateful_end_attempt(w, edata == NULL && ok, b->checkpointed);
		if (edata == NULL)
		{
			if (ok)
				return SDP_BATCH_COMMITTED;
			if (mutated)
				b->dead = list_truncate(b->dead, b->ndead_decode);
			return SDP_BATCH_FAIL;
		}
		b->dead = list_truncate(b->dead, b->ndead_decode);
		/* an operator that undid its changes: the state outgrew its limit all the same, and the flow fails */
		if (!mutated && w->stateful && sdp_stateful_limit_error(w, edata))
		{
			*message = psprintf("state of the flow exceeds its state_memory_limit of %d kB: %s",
								w->opts.state_memory_limit_kb, edata->message);
			return SDP_BATCH_FAIL;
		}
		if (mutated)
		{
			/* the operator's state moved and did not roll back */
			if (sdp_stateful_limit_error(w, edata))
			{
				*message = psprintf("state of the flow exceeds its state_memory_limit of %d kB: %s",
									w->opts.state_memory_limit_kb, edata->message);
				return SDP_BATCH_FAIL;
			}
			*message = edata->message;
			return SDP_BATCH_RESTART;
		}
		if (!isolate && (sdp_is_row_error(edata->sqlerrcode) ||
						 (b->decode_raised && sdp_is_decode_error(edata->sqlerrcode))))
		{
			b->world_errcode = sdp_is_row_error(edata->sqlerrcode) && !sdp_is_data_error(edata->sqlerrcode)
				? edata->sqlerrcode : 0;
			isolate = true;
			continue;
		}
		*message = edata->message;
		return SDP_BATCH_RETRY;
	}
}

/*
 * The batch has committed (durably, as synchronous_commit says): advance the
 * offsets, record its latencies and publish its counters.
 */
void
sdp_batch_account(FlowWorker *w, Batch *b)
{
	int64		commit_us = sdp_unix_now_us();
	TimestampTz now = GetCurrentTimestamp();
	int			ndead = list_length(b->dead);
	int			nskipped = list_length(b->skipped);
	int64		filtered;
	int64		tomb_skipped = 0;

	memcpy(w->parts.next, b->next, sizeof(int64) * w->parts.n);
	if (b->backfill)
		sdp_backfill_committed(w, b);
	/* a backfill's rows have no latency from Kafka */
	for (int i = 0; i < b->nmsgs && !b->backfill; i++)
	{
		int64		ts;
		rd_kafka_timestamp_type_t tstype;

		ts = sdp_message_timestamp(b->msgs[i], &tstype);
		if (tstype == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE || ts <= 0)
			ts = b->read_us / 1000;
		sdp_metrics_record(&w->metrics,
						   (commit_us - b->read_us) / 1000.0,
						   (b->read_us - ts * 1000) / 1000.0,
						   (commit_us - ts * 1000) / 1000.0);
	}
	if (b->nmsgs > 0)
		sdp_metrics_batch(&w->metrics, b->nmsgs, b->rows_written, (commit_us - b->read_us) / 1000.0);
	filtered = Max(0, b->nrows - b->rows_skipped - (ndead - b->ndead_decode) - b->rows_out - b->rows_tomb);
	/* tombstones skipped (on_tombstone = skip) never became rows */
	if (w->opts.on_tombstone == SDP_TOMBSTONE_SKIP)
		for (int i = 0; i < b->nmsgs; i++)
			tomb_skipped += (b->msgs[i]->payload == NULL && (b->skip_msg == NULL || !b->skip_msg[i]));

	SDP_SLOT_STATS_BEGIN_WRITE(w->slot);
	if (!b->backfill)
		w->slot->stats.messages_read += b->nmsgs;
	w->slot->stats.rows_written += b->rows_written;
	w->slot->stats.rows_filtered += filtered;
	if (w->opts.on_error == SDP_ON_ERROR_SKIP)
		w->slot->stats.rows_skipped += b->rows_skipped + ndead;
	else
	{
		w->slot->stats.rows_skipped += b->rows_skipped;
		w->slot->stats.rows_dead_lettered += ndead;
	}
	w->slot->stats.rows_dead_lettered += nskipped;
	w->slot->stats.rows_skipped += tomb_skipped;
	w->slot->stats.rows_late += b->rows_late;
	if (b->nmsgs > 0)
		w->slot->stats.batches++;
	if (b->nmsgs > 0 || b->rows_written > 0)
		w->slot->stats.last_commit_at = now;
	SDP_SLOT_STATS_END_WRITE(w->slot);
	sdp_worker_publish_committed(w);
	if (w->prep.op)
		sdp_stateful_publish(w, b->checkpointed);
	if (nskipped > 0)
	{
		ListCell   *lc;

		foreach(lc, b->skipped)
		{
			DeadLetter *dl = lfirst(lc);

			ereport(LOG,
					(errmsg("sdp flow \"%s\" set partition %d offset %lld aside unprocessed: %s",
							w->args.name, dl->msg->partition, (long long) dl->msg->offset, dl->error)));
		}
	}
}

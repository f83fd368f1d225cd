/*
 * dead_letter.c
 *		Messages and rows a flow sets aside, so that nothing is silently lost.
 *
 * A message that does not decode, a message whose transform fails alone, a
 * row of an operator that cannot be written, an event too late for its
 * window: each is set aside with its stage and reason.  What happens then
 * is the flow's option on_error: dead_letter (a row in sdp.dead_letters,
 * in the batch's transaction, with the message's topic, partition, offset,
 * key and raw payload), skip (counted only), or fail (the flow stops with
 * the reason).  A message the flow's owner asked to skip (skip.c) is
 * dead-lettered with stage 'skipped' whatever on_error says.  Dead letters
 * are unique per (flow, partition, offset), so a message replayed after a
 * restart is dead-lettered once.
 */
#include "worker/dead_letter.h"
#include "worker/backfill.h"
#include "exec/json_decode.h"
#include "decl/catalog.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

/* The INSERT into sdp.dead_letters, prepared once per worker: this module's own. */
static SPIPlanPtr dead_letter_plan = NULL;

/* Kafka's timestamp of a message as a timestamptz; false when it has none. */
static bool
message_timestamp(rd_kafka_message_t *m, TimestampTz *ts)
{
	rd_kafka_timestamp_type_t tstype;
	int64		ms = sdp_message_timestamp(m, &tstype);

	if (tstype == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE || ms < 0)
		return false;
	*ts = ms * 1000 - (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY;
	return true;
}

/*
 * The statement that writes a dead letter (in a catalog scope, with SPI
 * connected).  The owner is the flow's, copied from sdp.flows: the same
 * statement holds for owners by name (0.1) and by OID (0.2), and a flow
 * given to another role (REASSIGN OWNED) has its dead letters go to it.
 * A dropped flow's batch never commits (its offsets' foreign key).
 */
void
sdp_dead_letters_prepare(FlowWorker *w)
{
	Oid			types[12] = {TEXTOID, TEXTOID, INT4OID, INT8OID, TEXTOID,
		TIMESTAMPTZOID, BYTEAOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, INT8OID};

	/* a message replayed after a restart is dead-lettered once */
	dead_letter_plan = SPI_prepare("INSERT INTO sdp.dead_letters (flow_id, flow, owner, kafka_topic, kafka_partition, "
									  "kafka_offset, kafka_key, kafka_timestamp, payload, payload_text, stage, error, sqlstate) "
									  "SELECT $12, $1, f.owner, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 "
									  "  FROM sdp.flows f WHERE f.id = $12 "
									  "ON CONFLICT (flow_id, kafka_partition, kafka_offset) WHERE kafka_offset IS NOT NULL "
									  "DO NOTHING",
									  12, types);
	if (dead_letter_plan == NULL)
		elog(ERROR, "could not prepare the dead letter statement: %s", SPI_result_code_string(SPI_result));
	SPI_keepplan(dead_letter_plan);
}

/* A message set aside by the batch, in the batch's memory. */
DeadLetter *
sdp_dead_letter_add(Batch *b, rd_kafka_message_t *m, const char *stage, const char *error, int sqlstate)
{
	DeadLetter *dl = palloc0(sizeof(DeadLetter));

	dl->msg = m;
	dl->stage = stage;
	dl->error = pstrdup(error);
	dl->sqlstate = sqlstate;
	b->dead = lappend(b->dead, dl);
	return dl;
}

/*
 * A message (m) or an operator's row (row_text, m NULL) failed alone at
 * 'stage' with edata: set it aside as on_error says.  Returns false when
 * on_error = fail, with the reason the flow fails for in *fail_message.
 */
bool
sdp_set_aside(FlowWorker *w, Batch *b, rd_kafka_message_t *m, const char *row_text,
			  const char *stage, ErrorData *edata, char **fail_message)
{
	switch (w->opts.on_error)
	{
		case SDP_ON_ERROR_FAIL:
			if (m)
				*fail_message = psprintf("%s of partition %d offset %lld: %s", stage,
										 m->partition, (long long) m->offset, edata->message);
			else
				*fail_message = psprintf("%s of the operator's row %s: %s", stage, row_text, edata->message);
			return false;
		case SDP_ON_ERROR_SKIP:
			b->rows_skipped++;
			return true;
		case SDP_ON_ERROR_DEAD_LETTER:
			{
				DeadLetter *dl = sdp_dead_letter_add(b, m, stage, edata->message, edata->sqlerrcode);

				if (m == NULL)
					dl->row_text = pstrdup(row_text);
				return true;
			}
	}
	return true;
}

/* A backfill's row (backfill.h) as JSON text of its schema columns: its dead letter's payload. */
static char *
backfill_row_text(SdpBackfillRow *row)
{
	StringInfoData s;

	initStringInfo(&s);
	appendStringInfoChar(&s, '{');
	for (int i = 0; i < row->ncolumns; i++)
	{
		Form_pg_attribute a = TupleDescAttr(row->desc, i);
		bool		isnull;
		Datum		d = heap_getattr(row->tuple, i + 1, row->desc, &isnull);
		Oid			out;
		bool		varlena;

		if (i > 0)
			appendStringInfoString(&s, ", ");
		escape_json(&s, NameStr(a->attname));
		appendStringInfoString(&s, ": ");
		if (isnull)
		{
			appendStringInfoString(&s, "null");
			continue;
		}
		getTypeOutputInfo(a->atttypid, &out, &varlena);
		escape_json(&s, OidOutputFunctionCall(out, d));
	}
	appendStringInfoChar(&s, '}');
	return s.data;
}

/* Write one dead letter (in a catalog scope). */
static void
write_dead_letter(FlowWorker *w, DeadLetter *dl)
{
	rd_kafka_message_t *m = dl->msg;
	Datum		values[12];
	char		nulls[12];
	bytea	   *payload;
	const char *bytes = m ? m->payload : dl->row_text;
	size_t		len = m ? m->len : strlen(dl->row_text);
	TimestampTz ts;

	memset(nulls, ' ', sizeof(nulls));
	values[0] = CStringGetTextDatum(w->args.name);
	values[1] = CStringGetTextDatum(w->source.topic);
	if (m && sdp_is_backfill_message(m))
	{
		SdpBackfillRow *row = m->_private;

		/* a backfill's row: its place in the topic if its source said it, and its columns */
		if (row->has_position)
		{
			values[2] = Int32GetDatum(m->partition);
			values[3] = Int64GetDatum(m->offset);
		}
		else
			nulls[1] = nulls[2] = nulls[3] = 'n';
		nulls[4] = nulls[5] = 'n';
		bytes = backfill_row_text(row);
		len = strlen(bytes);
	}
	else if (m)
	{
		values[2] = Int32GetDatum(m->partition);
		values[3] = Int64GetDatum(m->offset);
		if (sdp_bytes_are_text(m->key, m->key_len))
			values[4] = PointerGetDatum(cstring_to_text_with_len(m->key, (int) m->key_len));
		else
			nulls[4] = 'n';
		if (message_timestamp(m, &ts))
			values[5] = TimestampTzGetDatum(ts);
		else
			nulls[5] = 'n';
	}
	else
	{
		/* a row the operator emitted: it comes from no single message */
		nulls[2] = nulls[3] = nulls[4] = nulls[5] = 'n';
	}
	payload = palloc(VARHDRSZ + len);
	SET_VARSIZE(payload, VARHDRSZ + len);
	if (len > 0)
		memcpy(VARDATA(payload), bytes, len);
	values[6] = PointerGetDatum(payload);
	if (sdp_bytes_are_text(bytes, len))
		values[7] = PointerGetDatum(cstring_to_text_with_len(bytes, (int) len));
	else
		nulls[7] = 'n';
	values[8] = CStringGetTextDatum(dl->stage);
	values[9] = CStringGetTextDatum(dl->error);
	/* a message skipped on request raised no error */
	if (dl->sqlstate != 0)
		values[10] = CStringGetTextDatum(unpack_sql_state(dl->sqlstate));
	else
		nulls[10] = 'n';
	values[11] = Int64GetDatum(w->args.flow_id);
	if (SPI_execute_plan(dead_letter_plan, values, nulls, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not write a dead letter");
}

/*
 * Write the batch's dead letters (inside the batch's transaction): what it
 * set aside, unless on_error = skip, and the messages its owner asked to
 * skip (sdp_skip_message), always.
 */
void
sdp_write_dead_letters(FlowWorker *w, Batch *b)
{
	MemoryContext cxt = CurrentMemoryContext;
	SdpCatalogScope scope;
	List	   *dead = (w->opts.on_error == SDP_ON_ERROR_SKIP) ? NIL : b->dead;
	ListCell   *lc;

	if (dead == NIL && b->skipped == NIL)
		return;
	sdp_catalog_enter(&scope);
	foreach(lc, dead)
	{
		write_dead_letter(w, lfirst(lc));
		MemoryContextSwitchTo(cxt);
	}
	foreach(lc, b->skipped)
	{
		write_dead_letter(w, lfirst(lc));
		MemoryContextSwitchTo(cxt);
	}
	sdp_catalog_leave(&scope);
}

/* A row as JSON text, for its dead letter or the reason a flow failed. */
char *
sdp_row_as_json(TupleDesc desc, HeapTuple row)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	for (int i = 0; i < desc->natts; i++)
	{
		bool		isnull;
		Datum		d = heap_getattr(row, i + 1, desc, &isnull);
		Oid			typout;
		bool		varlena;

		if (i > 0)
			appendStringInfoString(&buf, ", ");
		escape_json(&buf, NameStr(TupleDescAttr(desc, i)->attname));
		appendStringInfoString(&buf, ": ");
		if (isnull)
			appendStringInfoString(&buf, "null");
		else
		{
			getTypeOutputInfo(TupleDescAttr(desc, i)->atttypid, &typout, &varlena);
			escape_json(&buf, OidOutputFunctionCall(typout, d));
		}
	}
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

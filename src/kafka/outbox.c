/*
 * outbox.c
 *		The SQL side of a Kafka sink: a sink flow's rows as sdp.outbox rows.
 *
 * A sink flow writes its rows, by the ordinary write path and in its batch
 * transaction (with the source offsets), into sdp.outbox: the flow's
 * transform is wrapped so that each row becomes (flow_id, worker, key,
 * value), the value a JSON object of the row's columns (sdp_outbox_sql); a
 * stateful flow's emitted rows are made outbox rows here too
 * (sdp_outbox_row), and committed with their state.  relay.c produces them.
 *
 * A sink whose format is avro has each value as the whole Avro message in
 * Confluent's wire format (exec/avro_encode.c: sdp.row_avro, 0.9), with the
 * id its schema got in the registry when the worker started, in hex (the
 * column is text): rows written before a change of the flow keep the id of
 * the schema they were written with.
 */
#include "kafka/outbox.h"
#include "exec/avro_encode.h"
#include "exec/json_encode.h"

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "parser/parse_func.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

/* The sink_key option names a column of the flow's rows. */
void
sdp_outbox_check_key(TupleDesc rows, const char *sink_key, bool operator_rows)
{
	if (sink_key == NULL)
		return;
	for (int i = 0; i < rows->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(rows, i);

		if (!att->attisdropped && strcmp(NameStr(att->attname), sink_key) == 0)
			return;
	}
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_COLUMN),
			 errmsg("sink_key column \"%s\" is not a column of the flow's rows", sink_key),
			 operator_rows ? errhint("Name a column of the rows the operator emits.")
			 : errhint("Name a column of the transform's result (or of the input schema, for a flow without transform).")));
}

/*
 * The JSON of a row as SQL: sdp.row_json (0.6), to_jsonb's text written
 * directly, or to_jsonb itself on older catalogs.  In a transaction.
 */
static char *
row_json_call(const char *alias)
{
	Oid			nsp = get_namespace_oid(SDP_SCHEMA, true);
	Oid			argtypes[1] = {RECORDOID};

	if (OidIsValid(nsp) &&
		OidIsValid(LookupFuncName(list_make2(makeString(SDP_SCHEMA), makeString("row_json")), 1, argtypes, true)))
		return psprintf("sdp.row_json(%s)", alias);
	return psprintf("pg_catalog.to_jsonb(%s)::pg_catalog.text", alias);
}

/* Whether the catalogs have sdp.row_avro (0.9): an Avro sink's values.  In a transaction. */
bool
sdp_outbox_has_row_avro(void)
{
	Oid			nsp = get_namespace_oid(SDP_SCHEMA, true);
	Oid			argtypes[2] = {RECORDOID, INT4OID};

	return OidIsValid(nsp) &&
		OidIsValid(LookupFuncName(list_make2(makeString(SDP_SCHEMA), makeString("row_avro")), 2, argtypes, true));
}

/* An Avro sink's value as SQL: the message in hex, its schema's id the statement's $1. */
static char *
row_avro_call(const char *alias)
{
	return psprintf("pg_catalog.encode(sdp.row_avro(%s, $1), 'hex')", alias);
}

/*
 * The transform that fills a sink flow's outbox: the flow's own as a
 * subquery (or, without transform, the declared columns of the input, not
 * its Kafka metadata), each row as (flow_id, key, value), value the JSON
 * object of its columns, which is what a source's JSON decoding reads back.
 */
char *
sdp_outbox_sql(const char *transform_sql, SdpInputSchema *schema, int64 flow_id, int worker,
					const char *sink_key, bool avro)
{
	char	   *key = sink_key ? psprintf("(i.%s)::pg_catalog.text", quote_identifier(sink_key))
		: pstrdup("NULL::pg_catalog.text");
	char	   *head = worker < 0
		? psprintf("SELECT " INT64_FORMAT "::pg_catalog.int8 AS flow_id, %s AS key, ", flow_id, key)
		: psprintf("SELECT " INT64_FORMAT "::pg_catalog.int8 AS flow_id, %d::pg_catalog.int4 AS worker, %s AS key, ",
				   flow_id, worker, key);

	if (transform_sql == NULL)
	{
		StringInfoData cols;

		initStringInfo(&cols);
		for (int c = 0; c < schema->ncolumns; c++)
			appendStringInfo(&cols, "%si.%s", c > 0 ? ", " : "", quote_identifier(schema->columns[c].name));
		return psprintf("%s%s AS value FROM input i CROSS JOIN LATERAL (SELECT %s) r",
						head, avro ? row_avro_call("r") : row_json_call("r"), cols.data);
	}
	else
	{
		/* the transform as a subquery: without a final semicolon */
		char	   *sql = pstrdup(transform_sql);
		int			len = strlen(sql);

		while (len > 0 && (sql[len - 1] == ';' || isspace((unsigned char) sql[len - 1])))
			sql[--len] = '\0';
		return psprintf("%s%s AS value FROM (%s\n) i",
						head, avro ? row_avro_call("i") : row_json_call("i"), sql);
	}
}

/* Whether sdp.outbox has the column (in a transaction). */
static bool
outbox_has_column(const char *column)
{
	Oid			nsp = get_namespace_oid("sdp", true);
	Oid			rel = OidIsValid(nsp) ? get_relname_relid("outbox", nsp) : InvalidOid;

	return OidIsValid(rel) && get_attnum(rel, column) != InvalidAttrNumber;
}

/* Whether sdp.outbox has column worker (0.5): sink flows may then have several workers.  In a transaction. */
bool
sdp_outbox_has_worker(void)
{
	return outbox_has_column("worker");
}

/* Whether sdp.outbox has column skipped_by (0.7): sdp_skip_outbox_row.  In a transaction. */
bool
sdp_outbox_has_skips(void)
{
	return outbox_has_column("skipped_by");
}

/*
 * The rows a stateful sink flow writes into its outbox: (flow_id, worker,
 * key, value), without worker on a 0.4 catalog (tagged false).
 */
TupleDesc
sdp_outbox_desc(bool tagged)
{
	TupleDesc	desc = CreateTemplateTupleDesc(tagged ? 4 : 3);
	int			a = 1;

	TupleDescInitEntry(desc, a++, "flow_id", INT8OID, -1, 0);
	if (tagged)
		TupleDescInitEntry(desc, a++, "worker", INT4OID, -1, 0);
	TupleDescInitEntry(desc, a++, "key", TEXTOID, -1, 0);
	TupleDescInitEntry(desc, a++, "value", TEXTOID, -1, 0);
	return desc;
}

/*
 * An operator's emitted row as an outbox row: the value the JSON object of
 * its columns, encoded as to_jsonb encodes the rows of a stateless sink
 * flow; the key the text of column key_attno (0: none).  'emitted' must be
 * blessed (BlessTupleDesc), so that the row reads as a record.
 */
HeapTuple
sdp_outbox_row(TupleDesc outbox, int64 flow_id, int worker, TupleDesc emitted, HeapTuple row,
					int key_attno, const SdpAvroRowPlan *avro, int32 schema_id)
{
	static SdpJsonPlan plan;
	static uint32 plan_typmod = 0;	/* the blessed descriptor's; 0: none yet */
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};
	char	   *key = key_attno > 0 ? SPI_getvalue(row, emitted, key_attno) : NULL;
	StringInfoData json;
	int			a = 0;

	Assert(emitted->tdtypeid == RECORDOID && emitted->tdtypmod >= 0);
	if (plan_typmod != (uint32) emitted->tdtypmod + 1)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		sdp_json_plan_rows(emitted, &plan);	/* a few bytes per column, once per flow */
		plan_typmod = (uint32) emitted->tdtypmod + 1;
		MemoryContextSwitchTo(old);
	}
	initStringInfo(&json);
	if (avro != NULL)
	{
		/* an Avro sink: the message in hex */
		Datum	   *cols = palloc(sizeof(Datum) * Max(emitted->natts, 1));
		bool	   *colnulls = palloc(sizeof(bool) * Max(emitted->natts, 1));
		StringInfoData message;

		heap_deform_tuple(row, emitted, cols, colnulls);
		initStringInfo(&message);
		sdp_avro_encode_row(avro, cols, colnulls, schema_id, &message);
		enlargeStringInfo(&json, message.len * 2);
		for (int i = 0; i < message.len; i++)
			appendStringInfo(&json, "%02x", (unsigned char) message.data[i]);
	}
	else if (plan.direct)
	{
		Datum	   *cols = palloc(sizeof(Datum) * Max(emitted->natts, 1));
		bool	   *colnulls = palloc(sizeof(bool) * Max(emitted->natts, 1));

		heap_deform_tuple(row, emitted, cols, colnulls);
		sdp_json_encode_row(&plan, emitted, cols, colnulls, &json);
	}
	else
		appendStringInfoString(&json, sdp_json_row_general(heap_copy_tuple_as_datum(row, emitted)));

	values[a++] = Int64GetDatum(flow_id);
	if (outbox->natts == 4)
		values[a++] = Int32GetDatum(worker);
	values[a] = key ? CStringGetTextDatum(key) : (Datum) 0;
	nulls[a++] = key == NULL;
	values[a++] = PointerGetDatum(cstring_to_text_with_len(json.data, json.len));
	return heap_form_tuple(outbox, values, nulls);
}

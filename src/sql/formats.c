/*
 * formats.c
 *		SQL functions about the message formats.
 *
 * sdp_avro_to_json(schema, body, framed) reads an Avro value as a flow's
 * decoder reads it, given its writer schema: to look into a dead-lettered
 * message (sdp.dead_letters keeps its bytes), or to check what a schema
 * makes of a message before declaring a flow.  No registry is asked: the
 * schema is an argument, so nothing waits on the network in a transaction.
 * sdp.row_avro writes a row as an Avro sink flow does.
 */
#include "sdp.h"

#include "access/htup_details.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/typcache.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "exec/avro_decode.h"
#include "exec/avro_encode.h"

PG_FUNCTION_INFO_V1(sdp_avro_to_json);

Datum
sdp_avro_to_json(PG_FUNCTION_ARGS)
{
	char	   *schema_text = text_to_cstring(PG_GETARG_TEXT_PP(0));
	bytea	   *body = PG_GETARG_BYTEA_PP(1);
	bool		framed = PG_GETARG_BOOL(2);
	const char *bytes = VARDATA_ANY(body);
	size_t		len = VARSIZE_ANY_EXHDR(body);
	SdpAvroSchema *writer = sdp_avro_parse_schema(schema_text);
	int32		id;
	char	   *text;
	char	   *error;

	if (framed && !sdp_avro_frame(bytes, len, &id, &error))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
				 errmsg("%s", error),
				 errhint("Pass framed => false for an Avro body without the Confluent header.")));
	if (!sdp_avro_value_text(writer, bytes, len, framed, true, &text, &error))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
				 errmsg("%s", error)));
	PG_RETURN_DATUM(DirectFunctionCall1(jsonb_in, CStringGetDatum(text)));
}

/*
 * sdp.row_avro(row record, schema_id integer) → bytea: the row as an Avro
 * message, with the schema derived from its columns (exec/avro_encode.c),
 * in Confluent's wire format with schema_id (NULL: the bare body).  An Avro
 * sink flow's values (kafka/outbox.c).  The plan is kept per row type.
 */
PG_FUNCTION_INFO_V1(sdp_row_avro);

typedef struct RowAvroCache
{
	Oid			type;
	int32		typmod;
	SdpAvroRowPlan *plan;
} RowAvroCache;

Datum
sdp_row_avro(PG_FUNCTION_ARGS)
{
	HeapTupleHeader td;
	int32		schema_id = PG_ARGISNULL(1) ? -1 : PG_GETARG_INT32(1);
	Oid			type;
	int32		typmod;
	RowAvroCache *cache = fcinfo->flinfo->fn_extra;
	TupleDesc	desc;
	HeapTupleData tuple;
	Datum	   *values;
	bool	   *nulls;
	StringInfoData out;
	bytea	   *result;

	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	if (schema_id < -1 || (!PG_ARGISNULL(1) && schema_id < 0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("schema id %d is negative", PG_GETARG_INT32(1))));
	td = PG_GETARG_HEAPTUPLEHEADER(0);
	type = HeapTupleHeaderGetTypeId(td);
	typmod = HeapTupleHeaderGetTypMod(td);
	desc = lookup_rowtype_tupdesc(type, typmod);
	if (cache == NULL || cache->type != type || cache->typmod != typmod)
	{
		MemoryContext old = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);

		SdpAvroRowPlan *plan = sdp_avro_row_plan(desc);	/* first: it may raise */

		if (cache == NULL)
			cache = fcinfo->flinfo->fn_extra = palloc0(sizeof(RowAvroCache));
		cache->plan = plan;
		cache->type = type;
		cache->typmod = typmod;
		MemoryContextSwitchTo(old);
	}
	tuple.t_len = HeapTupleHeaderGetDatumLength(td);
	ItemPointerSetInvalid(&tuple.t_self);
	tuple.t_tableOid = InvalidOid;
	tuple.t_data = td;
	values = palloc(sizeof(Datum) * Max(desc->natts, 1));
	nulls = palloc(sizeof(bool) * Max(desc->natts, 1));
	heap_deform_tuple(&tuple, desc, values, nulls);
	initStringInfo(&out);
	sdp_avro_encode_row(cache->plan, values, nulls, schema_id, &out);
	ReleaseTupleDesc(desc);
	result = palloc(VARHDRSZ + out.len);
	SET_VARSIZE(result, VARHDRSZ + out.len);
	memcpy(VARDATA(result), out.data, out.len);
	PG_RETURN_BYTEA_P(result);
}

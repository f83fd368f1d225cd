/*
 * json_encode.c
 *		A row as the text of to_jsonb(row): what a sink flow's messages hold.
 *
 * to_jsonb builds a jsonb (each number through numeric, the keys sorted)
 * which jsonb_out then prints: most of a sink flow's CPU.  For rows whose
 * columns are all of the common built-in types this writes the same text
 * directly: the keys in jsonb's order (shorter first, then bytewise), ": "
 * and ", " between them, strings escaped by escape_json, numbers as
 * to_jsonb makes them (the output of the type, through numeric only where
 * numeric would print it otherwise), dates and timestamps as
 * JsonEncodeDateTime writes them.  Any other type (a domain, an array, a
 * composite, json, a type with a cast to json, ...), or two columns of one
 * name, and the row goes the general way: row_to_json, then jsonb's input
 * and output, which is what to_jsonb gives.  pg_regress 008 compares the two
 * over values at the edges of every type handled here.
 */
#include "sdp.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/typcache.h"

#include "exec/json_encode.h"

typedef enum ColumnKind
{
	KIND_STRING,				/* the type's output, as a JSON string */
	KIND_INTEGER,				/* the type's output, as it is */
	KIND_FLOAT,					/* the output; through numeric if it has an exponent or is -0 */
	KIND_NUMERIC,				/* the output, or a string for NaN and the infinities */
	KIND_BOOL,
	KIND_DATETIME				/* JsonEncodeDateTime, as a JSON string */
} ColumnKind;

static bool
column_kind(Oid typid, ColumnKind *kind)
{
	switch (typid)
	{
		case TEXTOID:
		case VARCHAROID:
		case BPCHAROID:
		case NAMEOID:
		case UUIDOID:
		case INTERVALOID:
		case TIMEOID:
		case TIMETZOID:
			*kind = KIND_STRING;
			return true;
		case INT2OID:
		case INT4OID:
		case INT8OID:
			*kind = KIND_INTEGER;
			return true;
		case FLOAT4OID:
		case FLOAT8OID:
			*kind = KIND_FLOAT;
			return true;
		case NUMERICOID:
			*kind = KIND_NUMERIC;
			return true;
		case BOOLOID:
			*kind = KIND_BOOL;
			return true;
		case DATEOID:
		case TIMESTAMPOID:
		case TIMESTAMPTZOID:
			*kind = KIND_DATETIME;
			return true;
		default:
			return false;
	}
}

/* jsonb's order of keys: the shorter first, then bytewise */
static int
key_order(const void *a, const void *b, void *arg)
{
	TupleDesc	desc = (TupleDesc) arg;
	const char *na = NameStr(TupleDescAttr(desc, *(const int *) a)->attname);
	const char *nb = NameStr(TupleDescAttr(desc, *(const int *) b)->attname);
	size_t		la = strlen(na),
				lb = strlen(nb);

	if (la != lb)
		return la < lb ? -1 : 1;
	return memcmp(na, nb, la);
}

/*
 * Plan the encoding of rows of desc, in the current memory context.
 * plan->direct is false when the rows must go the general way.
 */
void
sdp_json_plan_rows(TupleDesc desc, SdpJsonPlan *plan)
{
	int			n = 0;

	memset(plan, 0, sizeof(SdpJsonPlan));
	plan->order = palloc(sizeof(int) * Max(desc->natts, 1));
	plan->kinds = palloc(sizeof(int) * Max(desc->natts, 1));
	plan->out = palloc0(sizeof(FmgrInfo) * Max(desc->natts, 1));
	plan->keys = palloc0(sizeof(char *) * Max(desc->natts, 1));
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		ColumnKind	kind;
		Oid			typout;
		bool		varlena;
		StringInfoData key;

		if (att->attisdropped)
			continue;
		if (!column_kind(att->atttypid, &kind))
			return;				/* the general way */
		plan->kinds[i] = (int) kind;
		getTypeOutputInfo(att->atttypid, &typout, &varlena);
		fmgr_info(typout, &plan->out[i]);
		initStringInfo(&key);
		escape_json(&key, NameStr(att->attname));
		appendBinaryStringInfo(&key, ": ", 2);
		plan->keys[i] = key.data;
		plan->order[n++] = i;
	}
	qsort_arg(plan->order, n, sizeof(int), key_order, desc);
	for (int k = 1; k < n; k++)
		if (key_order(&plan->order[k - 1], &plan->order[k], desc) == 0)
			return;				/* two columns of one name: the general way */
	plan->ncolumns = n;
	plan->direct = true;
}

static void
append_value(StringInfo buf, ColumnKind kind, FmgrInfo *out, Oid typid, Datum value)
{
	char	   *text = NULL;
	char		dt[MAXDATELEN + 1];

	switch (kind)
	{
		case KIND_BOOL:
			appendStringInfoString(buf, DatumGetBool(value) ? "true" : "false");
			return;
		case KIND_DATETIME:
			escape_json(buf, JsonEncodeDateTime(dt, value, typid, NULL));
			return;
		case KIND_STRING:
			text = OutputFunctionCall(out, value);
			escape_json(buf, text);
			break;
		case KIND_INTEGER:
			text = OutputFunctionCall(out, value);
			appendStringInfoString(buf, text);
			break;
		case KIND_FLOAT:
		case KIND_NUMERIC:
			text = OutputFunctionCall(out, value);
			if (strchr(text, 'N') != NULL || strchr(text, 'n') != NULL)
				escape_json(buf, text); /* NaN, Infinity: not JSON numbers */
			else if (kind == KIND_FLOAT && (strchr(text, 'e') != NULL || strcmp(text, "-0") == 0))
			{
				/* numeric prints it without the exponent, and -0 as 0 */
				Datum		num = DirectFunctionCall3(numeric_in, CStringGetDatum(text),
													  ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1));

				appendStringInfoString(buf, DatumGetCString(DirectFunctionCall1(numeric_out, num)));
			}
			else
				appendStringInfoString(buf, text);
			break;
	}
	pfree(text);
}

/* Append the JSON of a row planned by sdp_json_plan_rows (plan->direct). */
void
sdp_json_encode_row(const SdpJsonPlan *plan, TupleDesc desc, const Datum *values, const bool *nulls,
					StringInfo buf)
{
	Assert(plan->direct);
	appendStringInfoChar(buf, '{');
	for (int k = 0; k < plan->ncolumns; k++)
	{
		int			i = plan->order[k];

		if (k > 0)
			appendBinaryStringInfo(buf, ", ", 2);
		appendStringInfoString(buf, plan->keys[i]);
		if (nulls[i])
			appendBinaryStringInfo(buf, "null", 4);
		else
			append_value(buf, (ColumnKind) plan->kinds[i], &plan->out[i],
						 TupleDescAttr(desc, i)->atttypid, values[i]);
	}
	appendStringInfoChar(buf, '}');
}

/* The general way: row_to_json's text through jsonb, as to_jsonb(row)::text. */
char *
sdp_json_row_general(Datum record)
{
	Datum		json = DirectFunctionCall1(row_to_json, record);
	Datum		jsonb = DirectFunctionCall1(jsonb_in, CStringGetDatum(text_to_cstring(DatumGetTextPP(json))));

	return DatumGetCString(DirectFunctionCall1(jsonb_out, jsonb));
}

/*
 * sdp.row_json(record) → text: to_jsonb(record)::text, written directly for
 * the common types (a sink flow's outbox rows).  The plan is kept across
 * calls for one row type.
 */
PG_FUNCTION_INFO_V1(sdp_row_json);

typedef struct RowJsonCache
{
	Oid			typid;
	int32		typmod;
	TupleDesc	desc;
	SdpJsonPlan plan;
} RowJsonCache;

Datum
sdp_row_json(PG_FUNCTION_ARGS)
{
	HeapTupleHeader rec = PG_GETARG_HEAPTUPLEHEADER(0);
	Oid			typid = HeapTupleHeaderGetTypeId(rec);
	int32		typmod = HeapTupleHeaderGetTypMod(rec);
	RowJsonCache *cache = fcinfo->flinfo->fn_extra;
	HeapTupleData tuple;
	Datum	   *values;
	bool	   *nulls;
	StringInfoData buf;

	if (cache == NULL || cache->typid != typid || cache->typmod != typmod)
	{
		MemoryContext old = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);
		TupleDesc	desc = lookup_rowtype_tupdesc(typid, typmod);

		cache = palloc0(sizeof(RowJsonCache));
		cache->typid = typid;
		cache->typmod = typmod;
		cache->desc = CreateTupleDescCopy(desc);
		ReleaseTupleDesc(desc);
		sdp_json_plan_rows(cache->desc, &cache->plan);
		fcinfo->flinfo->fn_extra = cache;
		MemoryContextSwitchTo(old);
	}
	if (!cache->plan.direct)
		PG_RETURN_TEXT_P(cstring_to_text(sdp_json_row_general(PG_GETARG_DATUM(0))));

	tuple.t_len = HeapTupleHeaderGetDatumLength(rec);
	ItemPointerSetInvalid(&tuple.t_self);
	tuple.t_tableOid = InvalidOid;
	tuple.t_data = rec;
	values = palloc(sizeof(Datum) * Max(cache->desc->natts, 1));
	nulls = palloc(sizeof(bool) * Max(cache->desc->natts, 1));
	heap_deform_tuple(&tuple, cache->desc, values, nulls);
	initStringInfo(&buf);
	sdp_json_encode_row(&cache->plan, cache->desc, values, nulls, &buf);
	PG_RETURN_TEXT_P(cstring_to_text_with_len(buf.data, buf.len));
}

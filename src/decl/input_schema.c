/*
 * input_schema.c
 *		The declared input schema of a flow ('icao24 text, lat float8, ...').
 *
 * The schema is parsed as the column list of a CREATE TABLE by PostgreSQL's
 * own grammar, so quoting, type modifiers and every type spelling work as
 * they do in a table definition.  Nothing is executed.  The relation "input"
 * that a transform reads has the declared columns followed by the metadata
 * columns kafka_topic, kafka_partition, kafka_offset, kafka_key,
 * kafka_timestamp and kafka_headers (0.4; a field of that name declared in
 * the schema takes its place).
 */
#include "decl/input_schema.h"

#include "access/htup_details.h"
#include "catalog/pg_language.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "nodes/parsenodes.h"
#include "parser/parser.h"
#include "parser/parse_type.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

static const char *const meta_names[SDP_NUM_META] = {
	"kafka_topic", "kafka_partition", "kafka_offset", "kafka_key", "kafka_timestamp", "kafka_headers"
};
static const Oid meta_types[SDP_NUM_META] = {
	TEXTOID, INT4OID, INT8OID, TEXTOID, TIMESTAMPTZOID, JSONBOID
};

bool
sdp_is_meta_column(const char *name)
{
	for (int i = 0; i < SDP_NUM_META; i++)
		if (strcmp(name, meta_names[i]) == 0)
			return true;
	return false;
}

static void
schema_error(const char *schema_text, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_SYNTAX_ERROR),
			 errmsg("invalid input schema \"%s\"", schema_text),
			 errdetail("%s", detail),
			 errhint("Write the schema as a column list, e.g. 'icao24 text, lat float8, poller_ts timestamptz'.")));
}

/* The grammar's column list of "CREATE TABLE x (<schema>)", or an error. */
static List *
parse_column_list(const char *schema_text)
{
	StringInfoData sql;
	List	   *stmts = NIL;
	MemoryContext oldcxt = CurrentMemoryContext;
	RawStmt    *raw;
	CreateStmt *create;

	initStringInfo(&sql);
	appendStringInfo(&sql, "CREATE TABLE sdp_input (%s)", schema_text);

	PG_TRY();
	{
		stmts = raw_parser(sql.data, RAW_PARSE_DEFAULT);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		FlushErrorState();
		schema_error(schema_text, edata->message);
	}
	PG_END_TRY();

	if (list_length(stmts) != 1)
		schema_error(schema_text, "The schema must be one list of columns.");
	raw = linitial_node(RawStmt, stmts);
	if (!IsA(raw->stmt, CreateStmt))
		schema_error(schema_text, "The schema must be one list of columns.");
	create = (CreateStmt *) raw->stmt;
	if (create->inhRelations || create->partspec || create->options ||
		create->tableElts == NIL)
		schema_error(schema_text, "The schema must be one list of columns.");
	return create->tableElts;
}

/* How values of this type are decoded; refuses types we cannot decode safely. */
static SdpDecodeKind
decode_kind_for(const char *colname, Oid typid, int32 typmod)
{
	HeapTuple	tup;
	Form_pg_type typ;
	Oid			infunc;
	char		typtype;
	bool		builtin;

	switch (typid)
	{
		case BOOLOID:
			return SDP_DECODE_BOOL;
		case INT2OID:
			return SDP_DECODE_INT2;
		case INT4OID:
			return SDP_DECODE_INT4;
		case INT8OID:
			return SDP_DECODE_INT8;
		case FLOAT4OID:
			return SDP_DECODE_FLOAT4;
		case FLOAT8OID:
			return SDP_DECODE_FLOAT8;
		case TEXTOID:
			return SDP_DECODE_TEXT;
		case TIMESTAMPTZOID:
			return SDP_DECODE_TIMESTAMPTZ;
		case JSONBOID:
			return SDP_DECODE_JSONB;
		case VARCHAROID:
			if (typmod < 0)
				return SDP_DECODE_TEXT;
			break;
		default:
			break;
	}

	/*
	 * Other types go through their input function, called on the JSON
	 * value's text.  A failing input function is caught without a
	 * subtransaction, which is only safe for functions that hold no
	 * resources: so only built-in input functions are allowed (this covers
	 * numeric, timestamp, date, uuid, inet, bytea, ... and enums).
	 */
	tup = SearchSysCache1(TYPEOID, ObjectIdGetDatum(typid));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for type %u", typid);
	typ = (Form_pg_type) GETSTRUCT(tup);
	infunc = typ->typinput;
	typtype = typ->typtype;
	ReleaseSysCache(tup);

	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(infunc));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for function %u", infunc);
	builtin = ((Form_pg_proc) GETSTRUCT(tup))->prolang == INTERNALlanguageId;
	ReleaseSysCache(tup);

	if (typtype == TYPTYPE_DOMAIN || typtype == TYPTYPE_COMPOSITE ||
		typtype == TYPTYPE_PSEUDO || OidIsValid(get_element_type(typid)) ||
		!builtin)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("type %s of input column \"%s\" is not supported",
						format_type_with_typemod(typid, typmod), colname),
				 errdetail("Input columns can have scalar built-in types or enums; arrays, composites and domains are not decoded."),
				 errhint("Declare the column as jsonb or text and convert it in the transform.")));
	return SDP_DECODE_INPUT_FUNCTION;
}

SdpInputSchema *
sdp_parse_input_schema(const char *schema_text)
{
	List	   *elts;
	ListCell   *lc;
	SdpInputSchema *schema;
	int			i = 0;

	if (schema_text == NULL || schema_text[0] == '\0')
		schema_error(schema_text ? schema_text : "", "The schema is empty.");

	elts = parse_column_list(schema_text);

	schema = palloc0(sizeof(SdpInputSchema));
	schema->ncolumns = list_length(elts);
	schema->columns = palloc0(sizeof(SdpInputColumn) * schema->ncolumns);
	/*
	 * kafka_headers came in 0.4: a flow declared before with a field of that
	 * name keeps it, and has no headers column.
	 */
	schema->nmeta = SDP_NUM_META;
	foreach(lc, elts)
		if (IsA(lfirst(lc), ColumnDef) &&
			strcmp(((ColumnDef *) lfirst(lc))->colname, meta_names[SDP_META_HEADERS]) == 0)
			schema->nmeta = SDP_META_HEADERS;
	schema->tupdesc = CreateTemplateTupleDesc(schema->ncolumns + schema->nmeta);

	foreach(lc, elts)
	{
		ColumnDef  *def;
		SdpInputColumn *col = &schema->columns[i];
		Oid			typinput;

		if (!IsA(lfirst(lc), ColumnDef))
			schema_error(schema_text, "Only column names and types are allowed, no constraints.");
		def = (ColumnDef *) lfirst(lc);
		if (def->constraints || def->collClause || def->raw_default || def->is_not_null)
			schema_error(schema_text, "Only column names and types are allowed, no constraints, defaults or collations.");
		if (sdp_is_meta_column(def->colname) && strcmp(def->colname, meta_names[SDP_META_HEADERS]) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_COLUMN),
					 errmsg("input column \"%s\" is reserved for Kafka metadata", def->colname),
					 errhint("Every input has kafka_topic, kafka_partition, kafka_offset, kafka_key, kafka_timestamp and kafka_headers; do not declare them.")));
		for (int j = 0; j < i; j++)
			if (strcmp(schema->columns[j].name, def->colname) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_DUPLICATE_COLUMN),
						 errmsg("input column \"%s\" is declared more than once", def->colname)));

		col->name = pstrdup(def->colname);
		col->namelen = (int) strlen(col->name);
		typenameTypeIdAndMod(NULL, def->typeName, &col->typid, &col->typmod);
		col->kind = decode_kind_for(col->name, col->typid, col->typmod);
		getTypeInputInfo(col->typid, &typinput, &col->typioparam);
		fmgr_info(typinput, &col->infunc);

		TupleDescInitEntry(schema->tupdesc, i + 1, col->name, col->typid, col->typmod, 0);
		i++;
	}
	for (int m = 0; m < schema->nmeta; m++)
		TupleDescInitEntry(schema->tupdesc, schema->ncolumns + m + 1,
						   meta_names[m], meta_types[m], -1, 0);
	schema->field_hint = palloc(sizeof(int) * SDP_FIELD_HINTS);
	for (int k = 0; k < SDP_FIELD_HINTS; k++)
		schema->field_hint[k] = -1;
	return schema;
}

/*
 * aggregations.c
 *		SQL-callable declaration of window_agg definitions (sdp.aggregations).
 *
 * A definition is checked completely before it is stored: its name, its
 * operation, its window, that its fields are columns of the flow's rows (of
 * a numeric type for sum and avg), and that its filters are boolean SQL
 * expressions over those columns, by preparing the flow's whole transform
 * with it, as the caller.  A stored change reaches a running flow when the
 * transaction commits (sdp_flow_config_changed): definitions are added to
 * and dropped from running flows, and a new definition adds rows to the
 * target, never columns.
 */
#include "sdp.h"
#include "compat.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "nodes/parsenodes.h"
#include "parser/parser.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "decl/flow.h"
#include "stateful/operators/window_agg.h"
#include "exec/transform.h"
#include "decl/catalog.h"
#include "decl/input_schema.h"
#include "shmem/slots.h"
#include "sql/api.h"
#include "sql/roles.h"

PG_FUNCTION_INFO_V1(sdp_create_aggregation);
PG_FUNCTION_INFO_V1(sdp_drop_aggregation);
PG_FUNCTION_INFO_V1(sdp_load_aggregations);
PG_FUNCTION_INFO_V1(sdp_create_window_table);

/* What a definition is declared with, before it is checked. */
typedef struct AggArgs
{
	char	   *name;
	ArrayType  *group_by;
	char	   *operation;
	char	   *value;
	char	   *filter;
	char	   *denominator;
	Interval   *window_size;
	Interval   *allowance;
	Interval   *slide;
} AggArgs;

/* The flow a definition belongs to, as its declaration needs it. */
typedef struct AggFlow
{
	Oid			owner;
	char	   *owner_name;
	char	   *schema;
	char	   *transform;
	char	   *event_time;
	int			workers;
} AggFlow;

static void
read_flow(const char *flow, AggFlow *f)
{
	SdpCatalogScope scope;
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(flow)};
	char	   *op;
	bool		isnull;

	sdp_catalog_enter(&scope);
	if (SPI_execute_with_args(psprintf("SELECT owner::text, operator, schema, transform, options->>'event_time', %s, "
									   "       coalesce((options->>'workers')::int, 1) "
									   "FROM sdp.flows WHERE name = $1", sdp_owner_oid_sql("owner")),
							  1, argtypes, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read flow \"%s\"", flow);
	sdp_catalog_leave(&scope);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("flow \"%s\" does not exist", flow)));
	f->owner_name = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	f->owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 6, &isnull));
	if (isnull)
		f->owner = InvalidOid;
	op = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	f->schema = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3);
	f->transform = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4);
	f->event_time = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 5);
	f->workers = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 7, &isnull));
	if (op == NULL || strcmp(op, "window_agg") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("flow \"%s\" does not use operator window_agg", flow),
				 errhint("Aggregations belong to a flow declared with operator => 'window_agg'.")));
	sdp_check_owner(f->owner, f->owner_name, "flow", flow);
	sdp_refuse_self_change(flow, "change the aggregations of", "an aggregation function");
}

/* Window sizes, slides and allowances are at most this long (sdp_event_time_usable relies on it). */
#define MAX_WINDOW_US	(INT64CONST(100) * 12 * 30 * USECS_PER_DAY)	/* 100 years of 12 30-day months, as intervals count */

/* Hopping windows: an event is folded into window_size / slide windows, at most this many. */
#define MAX_WINDOWS_PER_EVENT	1000

/* An interval in microseconds (a month is 30 days), clamped to +-2 * MAX_WINDOW_US. */
static int64
interval_to_us(Interval *iv)
{
	double		us = (double) iv->time + (double) iv->day * USECS_PER_DAY +
		(double) iv->month * 30 * USECS_PER_DAY;

	if (us > 2.0 * MAX_WINDOW_US)
		return 2 * MAX_WINDOW_US;
	if (us < -2.0 * MAX_WINDOW_US)
		return -2 * MAX_WINDOW_US;
	return iv->time + (int64) iv->day * USECS_PER_DAY + (int64) iv->month * 30 * USECS_PER_DAY;
}

/* A SQL boolean expression, alone: "SELECT (<expr>)" must parse to exactly that. */
static void
check_expression(const char *what, const char *expr)
{
	List	   *stmts = NIL;
	MemoryContext cxt = CurrentMemoryContext;
	SelectStmt *sel;
	bool		ok;

	if (expr == NULL || expr[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", what),
				 errhint("Write a SQL boolean expression over the flow's columns, e.g. status = 'approved', or true.")));
	PG_TRY();
	{
		stmts = raw_parser(psprintf("SELECT (%s)", expr), RAW_PARSE_DEFAULT);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		ereport(ERROR,
				(errcode(ERRCODE_SYNTAX_ERROR),
				 errmsg("%s does not parse: %s", what, edata->message),
				 errdetail("The %s was: %s", what, expr)));
	}
	PG_END_TRY();
	sel = list_length(stmts) == 1 && IsA(linitial_node(RawStmt, stmts)->stmt, SelectStmt)
		? (SelectStmt *) linitial_node(RawStmt, stmts)->stmt : NULL;
	ok = sel && list_length(sel->targetList) == 1 && sel->fromClause == NIL &&
		sel->whereClause == NULL && sel->groupClause == NIL && sel->havingClause == NULL &&
		sel->sortClause == NIL && sel->limitCount == NULL && sel->op == SETOP_NONE;
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_SYNTAX_ERROR),
				 errmsg("%s must be one SQL expression: %s", what, expr)));
}

static bool
is_summable(Oid t)
{
	return t == INT2OID || t == INT4OID || t == INT8OID || t == NUMERICOID ||
		t == FLOAT4OID || t == FLOAT8OID;
}

/*
 * Check a definition against its flow and store it (replacing one of the
 * same name when replace).  Needs SPI connected.
 */
static void
define_aggregation(const char *flow, AggArgs *a, bool replace)
{
	AggFlow		f;
	SdpInputSchema *schema;
	SdpTransform rows;
	AggDefinition *d = palloc0(sizeof(AggDefinition));
	List	   *defs;
	ListCell   *lc;
	Datum	   *gv;
	bool	   *gnulls;
	int			ng;
	SdpTransform fanout;
	SdpCatalogScope scope;
	Oid			argtypes[10] = {TEXTOID, TEXTOID, TEXTARRAYOID, TEXTOID, TEXTOID, TEXTOID,
		TEXTOID, INTERVALOID, INTERVALOID, INTERVALOID};
	Datum		values[10];
	char		nulls[10];
	size_t		namelen;

	read_flow(flow, &f);

	/* the name, the operation */
	namelen = a->name ? strlen(a->name) : 0;
	if (namelen == 0 || namelen > AGG_NAME_MAX ||
		strspn(a->name, "abcdefghijklmnopqrstuvwxyz0123456789_") != namelen ||
		(a->name[0] >= '0' && a->name[0] <= '9'))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("invalid aggregation name \"%s\"", a->name ? a->name : ""),
				 errdetail("An aggregation name has 1 to %d lower-case letters, digits and underscores, and does not start with a digit.", AGG_NAME_MAX)));
	d->name = a->name;
	if (a->operation == NULL)
		d->op = -1;
	else if (strcmp(a->operation, "count") == 0)
		d->op = AGG_COUNT;
	else if (strcmp(a->operation, "sum") == 0)
		d->op = AGG_SUM;
	else if (strcmp(a->operation, "avg") == 0)
		d->op = AGG_AVG;
	else if (strcmp(a->operation, "ratio") == 0)
		d->op = AGG_RATIO;
	else if (strcmp(a->operation, "approx_distinct") == 0)
		d->op = AGG_APPROX_DISTINCT;
	else
		d->op = -1;
	if ((int) d->op < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid aggregation operation \"%s\"", a->operation ? a->operation : ""),
				 errhint("Operations are count, sum, avg, ratio and approx_distinct.")));

	/* the window */
	if (a->window_size == NULL || interval_to_us(a->window_size) <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("window_size must be positive"),
				 errhint("E.g. window_size => '10 minutes'.")));
	d->size_us = interval_to_us(a->window_size);
	if (d->size_us > MAX_WINDOW_US)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("window_size must be at most 100 years")));
	d->allowance_us = a->allowance ? interval_to_us(a->allowance) : 0;
	if (d->allowance_us < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("allowance must not be negative")));
	if (d->allowance_us > MAX_WINDOW_US)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("allowance must be at most 100 years")));
	d->slide_us = d->size_us;
	if (a->slide)
	{
		d->slide_us = interval_to_us(a->slide);
		if (d->slide_us <= 0 || d->slide_us > d->size_us || d->size_us % d->slide_us != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("slide must be positive and divide window_size"),
					 errhint("Omit slide for tumbling windows; a slide of a fraction of the window gives hopping windows.")));
		if (d->size_us / d->slide_us > MAX_WINDOWS_PER_EVENT)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("slide puts each event in %lld windows, more than %d",
							(long long) (d->size_us / d->slide_us), MAX_WINDOWS_PER_EVENT),
					 errhint("Each event is folded into window_size / slide windows: choose a longer slide.")));
	}

	/* the flow's rows, and the fields */
	schema = sdp_parse_input_schema(f.schema);
	PushActiveSnapshot(GetTransactionSnapshot());
	sdp_transform_prepare(&rows, schema, f.transform);
	if (a->group_by && ARR_NDIM(a->group_by) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("group_by must be a one-dimensional array of column names")));
	ng = 0;
	if (a->group_by)
		deconstruct_array(a->group_by, TEXTOID, -1, false, TYPALIGN_INT, &gv, &gnulls, &ng);
	d->ngroup = ng;
	d->group_by = palloc(sizeof(char *) * Max(ng, 1));
	for (int g = 0; g < ng; g++)
	{
		if (gnulls[g])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("group_by must not contain nulls")));
		d->group_by[g] = TextDatumGetCString(gv[g]);
		if (sdp_operator_column(rows.result_desc, d->group_by[g], NULL, false) < 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("group_by field \"%s\" is not a column of flow \"%s\"", d->group_by[g], flow)));
	}
	/* one entity over the whole stream takes rows from every partition: state one worker cannot own */
	if (ng == 0 && f.workers > 1)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("aggregation \"%s\" has no group_by, and flow \"%s\" runs in %d workers", d->name, flow, f.workers),
				 errdetail("An aggregation over the whole stream needs the rows of every partition, and each worker of a stateful flow owns the state of its partitions' keys."),
				 errhint("Group it by the column the topic is keyed by, or run the flow in one worker: sdp_set_flow_workers('%s', 1).", flow)));
	d->value = a->value;
	if (d->op == AGG_SUM || d->op == AGG_AVG || d->op == AGG_APPROX_DISTINCT)
	{
		int			i;

		if (d->value == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("operation %s needs a value field", a->operation)));
		i = sdp_operator_column(rows.result_desc, d->value, NULL, false);
		if (i < 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("value field \"%s\" is not a column of flow \"%s\"", d->value, flow)));
		if (d->op != AGG_APPROX_DISTINCT && !is_summable(TupleDescAttr(rows.result_desc, i)->atttypid))
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("cannot %s value field \"%s\" of type %s", a->operation, d->value,
							format_type_be(TupleDescAttr(rows.result_desc, i)->atttypid)),
					 errhint("sum and avg take integer, numeric or floating-point fields.")));
	}
	else
		d->value = NULL;

	/* the filters: expressions alone, and boolean over the flow's columns */
	d->filter = a->filter ? a->filter : "true";
	check_expression("filter", d->filter);
	if (d->op == AGG_RATIO)
	{
		d->denominator = a->denominator ? a->denominator : "true";
		check_expression("denominator_filter", d->denominator);
	}
	else if (a->denominator)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("denominator_filter applies to operation ratio only")));

	/*
	 * The filters, like the flow's transform, must work row by row: a
	 * subquery in one must not aggregate over the batch, or read it again.
	 */
	{
		SdpTransform one;

		sdp_transform_prepare_generated(&one, schema,
										sdp_window_agg_fanout_sql(list_make1(d), f.transform, rows.result_desc, f.event_time),
										0, NULL);
		sdp_transform_check_row_by_row(&one, psprintf("a filter of aggregation \"%s\"", d->name));
	}

	/* the whole transform with this definition in it must prepare and run, as the caller */
	defs = NIL;
	foreach(lc, sdp_window_agg_read_definitions(flow))
	{
		AggDefinition *other = lfirst(lc);

		if (strcmp(other->name, d->name) == 0)
		{
			if (!replace)
				ereport(ERROR,
						(errcode(ERRCODE_DUPLICATE_OBJECT),
						 errmsg("aggregation \"%s\" of flow \"%s\" already exists", d->name, flow),
						 errhint("Drop it first with sdp_drop_aggregation(), or load definitions with sdp_load_aggregations(), which replaces them.")));
			continue;
		}
		defs = lappend(defs, other);
	}
	defs = lappend(defs, d);
	sdp_transform_prepare_generated(&fanout, schema,
									sdp_window_agg_fanout_sql(defs, f.transform, rows.result_desc, f.event_time),
									0, NULL);
	sdp_transform_check_runs(&fanout);
	PopActiveSnapshot();

	memset(nulls, ' ', sizeof(nulls));
	values[0] = CStringGetTextDatum(flow);
	values[1] = CStringGetTextDatum(d->name);
	{
		Datum	   *gd = palloc(sizeof(Datum) * Max(ng, 1));

		for (int g = 0; g < ng; g++)
			gd[g] = CStringGetTextDatum(d->group_by[g]);
		values[2] = PointerGetDatum(construct_array(gd, ng, TEXTOID, -1, false, TYPALIGN_INT));
	}
	values[3] = CStringGetTextDatum(sdp_agg_operation_name(d->op));
	values[4] = d->value ? CStringGetTextDatum(d->value) : (Datum) 0;
	nulls[4] = d->value ? ' ' : 'n';
	values[5] = CStringGetTextDatum(d->filter);
	values[6] = d->denominator ? CStringGetTextDatum(d->denominator) : (Datum) 0;
	nulls[6] = d->denominator ? ' ' : 'n';
	values[7] = IntervalPGetDatum(a->window_size);
	values[8] = a->allowance ? IntervalPGetDatum(a->allowance)
		: DirectFunctionCall3(interval_in, CStringGetDatum("0"), ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1));
	values[9] = a->slide ? IntervalPGetDatum(a->slide) : (Datum) 0;
	nulls[9] = a->slide ? ' ' : 'n';
	sdp_catalog_enter(&scope);
	if (SPI_execute_with_args("INSERT INTO sdp.aggregations AS a (flow, name, group_by, operation, value, "
							  "    filter, denominator_filter, window_size, allowance, slide) "
							  "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) "
							  "ON CONFLICT (flow, name) DO UPDATE SET group_by = EXCLUDED.group_by, "
							  "    operation = EXCLUDED.operation, value = EXCLUDED.value, "
							  "    filter = EXCLUDED.filter, denominator_filter = EXCLUDED.denominator_filter, "
							  "    window_size = EXCLUDED.window_size, allowance = EXCLUDED.allowance, "
							  "    slide = EXCLUDED.slide, created_at = now()",
							  10, argtypes, values, nulls, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not store aggregation \"%s\"", d->name);
	sdp_catalog_leave(&scope);
	sdp_flow_config_changed(flow);
}

static char *
text_arg(FunctionCallInfo fcinfo, int n)
{
	return PG_ARGISNULL(n) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(n));
}

static char *
required_flow(FunctionCallInfo fcinfo)
{
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("flow must not be null")));
	return text_to_cstring(PG_GETARG_TEXT_PP(0));
}

/*
 * sdp_create_aggregation(flow, name, group_by, operation, value, filter,
 *                        denominator_filter, window_size, allowance, slide)
 */
Datum
sdp_create_aggregation(PG_FUNCTION_ARGS)
{
	char	   *flow = required_flow(fcinfo);
	AggArgs		a;

	sdp_require_shmem();
	sdp_require_flow_database();
	memset(&a, 0, sizeof(a));
	a.name = text_arg(fcinfo, 1);
	a.group_by = PG_ARGISNULL(2) ? NULL : PG_GETARG_ARRAYTYPE_P(2);
	a.operation = text_arg(fcinfo, 3);
	a.value = text_arg(fcinfo, 4);
	a.filter = text_arg(fcinfo, 5);
	a.denominator = text_arg(fcinfo, 6);
	a.window_size = PG_ARGISNULL(7) ? NULL : PG_GETARG_INTERVAL_P(7);
	a.allowance = PG_ARGISNULL(8) ? NULL : PG_GETARG_INTERVAL_P(8);
	a.slide = PG_ARGISNULL(9) ? NULL : PG_GETARG_INTERVAL_P(9);
	SPI_connect();
	define_aggregation(flow, &a, false);
	SPI_finish();
	PG_RETURN_VOID();
}

/* sdp_drop_aggregation(flow, name): the flow stops folding it; its open windows are not emitted. */
Datum
sdp_drop_aggregation(PG_FUNCTION_ARGS)
{
	char	   *flow = required_flow(fcinfo);
	char	   *name = text_arg(fcinfo, 1);
	AggFlow		f;
	SdpCatalogScope scope;
	Oid			argtypes[2] = {TEXTOID, TEXTOID};
	Datum		values[2];

	sdp_require_shmem();
	SPI_connect();
	read_flow(flow, &f);
	values[0] = CStringGetTextDatum(flow);
	values[1] = CStringGetTextDatum(name ? name : "");
	sdp_catalog_enter(&scope);
	if (SPI_execute_with_args("DELETE FROM sdp.aggregations WHERE flow = $1 AND name = $2",
							  2, argtypes, values, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not drop aggregation \"%s\" of flow \"%s\"", name ? name : "", flow);
	sdp_catalog_leave(&scope);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("aggregation \"%s\" of flow \"%s\" does not exist", name ? name : "", flow)));
	SPI_finish();
	sdp_flow_config_changed(flow);
	PG_RETURN_VOID();
}

static char *
json_text(JsonbValue *v, const char *key, int i)
{
	if (v->type == jbvNull)
		return NULL;
	if (v->type != jbvString)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("aggregation %d: \"%s\" must be a string", i + 1, key)));
	return pnstrdup(v->val.string.val, v->val.string.len);
}

static Interval *
json_interval(JsonbValue *v, const char *key, int i)
{
	char	   *s = json_text(v, key, i);

	if (s == NULL)
		return NULL;
	return DatumGetIntervalP(DirectFunctionCall3(interval_in, CStringGetDatum(s),
												 ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1)));
}

/*
 * sdp_load_aggregations(flow, definitions jsonb) -> int: define (or
 * replace) every aggregation of a JSON array, all or none; the same keys as
 * sdp_create_aggregation's arguments.  For definitions kept in a file:
 *	\set defs `cat aggregations.json`
 *	SELECT sdp_load_aggregations('payments_agg', :'defs');
 */
Datum
sdp_load_aggregations(PG_FUNCTION_ARGS)
{
	char	   *flow = required_flow(fcinfo);
	Jsonb	   *defs = PG_ARGISNULL(1) ? NULL : PG_GETARG_JSONB_P(1);
	int			n = 0;
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;

	sdp_require_shmem();
	sdp_require_flow_database();
	if (defs == NULL || !JB_ROOT_IS_ARRAY(defs) || JB_ROOT_IS_SCALAR(defs))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("aggregations must be a JSON array of objects")));
	SPI_connect();
	{
		AggFlow		f;

		read_flow(flow, &f);	/* it exists, uses window_agg, and is ours: even for an empty list */
	}
	it = JsonbIteratorInit(&defs->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		AggArgs		a;
		JsonbIterator *oit;
		JsonbValue	kv;
		JsonbIteratorToken otok;

		if (tok != WJB_ELEM)
			continue;
		if (v.type != jbvBinary || !JsonContainerIsObject(v.val.binary.data))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("aggregation %d is not a JSON object", n + 1)));
		memset(&a, 0, sizeof(a));
		oit = JsonbIteratorInit(v.val.binary.data);
		while ((otok = JsonbIteratorNext(&oit, &kv, true)) != WJB_DONE)
		{
			char	   *key;

			if (otok != WJB_KEY)
				continue;
			key = pnstrdup(kv.val.string.val, kv.val.string.len);
			otok = JsonbIteratorNext(&oit, &kv, true);
			if (strcmp(key, "name") == 0)
				a.name = json_text(&kv, key, n);
			else if (strcmp(key, "operation") == 0)
				a.operation = json_text(&kv, key, n);
			else if (strcmp(key, "value") == 0)
				a.value = json_text(&kv, key, n);
			else if (strcmp(key, "filter") == 0)
				a.filter = json_text(&kv, key, n);
			else if (strcmp(key, "denominator_filter") == 0)
				a.denominator = json_text(&kv, key, n);
			else if (strcmp(key, "window_size") == 0)
				a.window_size = json_interval(&kv, key, n);
			else if (strcmp(key, "allowance") == 0)
				a.allowance = json_interval(&kv, key, n);
			else if (strcmp(key, "slide") == 0)
				a.slide = json_interval(&kv, key, n);
			else if (strcmp(key, "group_by") == 0)
			{
				JsonbIterator *git;
				JsonbValue	gvv;
				JsonbIteratorToken gtok;
				Datum	   *gd = palloc(sizeof(Datum) * 64);
				int			ng = 0;

				if (kv.type != jbvBinary || !JsonContainerIsArray(kv.val.binary.data))
					ereport(ERROR,
							(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							 errmsg("aggregation %d: \"group_by\" must be an array of column names", n + 1)));
				git = JsonbIteratorInit(kv.val.binary.data);
				while ((gtok = JsonbIteratorNext(&git, &gvv, true)) != WJB_DONE)
				{
					if (gtok != WJB_ELEM)
						continue;
					if (ng == 64)
						ereport(ERROR,
								(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
								 errmsg("aggregation %d: \"group_by\" has more than 64 columns", n + 1)));
					gd[ng++] = CStringGetTextDatum(json_text(&gvv, "group_by", n));
				}
				a.group_by = construct_array(gd, ng, TEXTOID, -1, false, TYPALIGN_INT);
			}
			else
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("aggregation %d: unknown key \"%s\"", n + 1, key),
						 errhint("Keys are name, group_by, operation, value, filter, denominator_filter, window_size, allowance and slide.")));
		}
		define_aggregation(flow, &a, true);
		n++;
	}
	SPI_finish();
	PG_RETURN_INT32(n);
}

/*
 * sdp_create_window_table(name) -> regclass: a target of the static window
 * schema.  Its primary key is the window itself, (definition, entity,
 * window_end, window_start): the one btree serves the upsert of a replayed
 * window and the key-range read by (definition, entity) newest first; a BRIN
 * index on window_end serves retention (rows arrive in window_end order).
 * The text columns are COLLATE "C": keys compare by memcmp.  emission_id is
 * a column like the others (deterministic, the same window's across
 * restarts), without an index of its own: each index costs every row of a
 * burst of closing windows a btree insertion.  A table of the earlier
 * layout (emission_id PRIMARY KEY, and indexes on (definition, entity,
 * window_end) and window_end), or any made by hand with these columns,
 * works as before: a flow upserts on its target's primary key, whatever
 * columns it has.
 */
Datum
sdp_create_window_table(PG_FUNCTION_ARGS)
{
	char	   *name = text_arg(fcinfo, 0);
	List	   *names;
	char	   *qualified;
	Oid			relid;

	if (name == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("table name must not be null")));
	names = sdp_qualified_name_list(name);
	qualified = NameListToQuotedString(names);
	SPI_connect();
	/* its types and collation by schema: the caller's search_path picks nothing */
	if (SPI_execute(psprintf("CREATE TABLE %s ("
							 " emission_id  pg_catalog.text COLLATE pg_catalog.\"C\" NOT NULL,"
							 " definition   pg_catalog.text COLLATE pg_catalog.\"C\" NOT NULL,"
							 " entity       pg_catalog.text COLLATE pg_catalog.\"C\" NOT NULL,"
							 " window_start pg_catalog.timestamptz NOT NULL,"
							 " window_end   pg_catalog.timestamptz NOT NULL,"
							 " value        pg_catalog.float8,"
							 " row_count    pg_catalog.int8 NOT NULL,"
							 " emitted_at   pg_catalog.timestamptz NOT NULL,"
							 " PRIMARY KEY (definition, entity, window_end, window_start))", qualified), false, 0) != SPI_OK_UTILITY ||
		SPI_execute(psprintf("CREATE INDEX ON %s USING brin (window_end)", qualified), false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "could not create window table %s", qualified);
	SPI_finish();
	relid = RangeVarGetRelid(makeRangeVarFromNameList(names), NoLock, false);
	PG_RETURN_OID(relid);
}

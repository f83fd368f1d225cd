/*
 * backfill.c
 *		sdp_backfill: run a stopped flow over the rows of a table or query,
 *		then on from the boundary in its topic.
 *
 * History lives in tables longer than Kafka keeps it; a backfill computes a
 * flow's rows over it with the flow's own logic (its schema's types, its
 * transform, its operator and its target), so history and stream never
 * drift apart.  The flow's own worker runs it (worker/backfill.c), as a
 * batch at a time of the source's rows in their order, before it reads
 * Kafka.  This function only checks and sets up, in the caller's
 * transaction (a backfill that rolls back changes nothing):
 *
 *	- the flow: its owner calls it; stopped (as sdp_reset_flow needs); not a
 *	  sink flow, a Debezium flow, or one with several workers or a share of
 *	  the partitions (the refusals, README);
 *	- the source, as the owner with the flow's search_path: one SELECT, or a
 *	  table or view; it has every column of the input schema (a column of
 *	  another type is read as text and decoded by the schema column's input
 *	  function in the worker, as a message's field is: a value that does not
 *	  fit sets its row aside), and may have the Kafka columns
 *	  (kafka_partition, kafka_offset, kafka_key, kafka_timestamp,
 *	  kafka_headers), which the transform then sees as it would from Kafka;
 *	- the order: order_by, or by default the operator's event time, then
 *	  kafka_partition and kafka_offset (or a table's primary key).  It must
 *	  identify every row (no NULL, no two rows alike: checked here, once),
 *	  since the worker goes on after the last position it stored; for an
 *	  event-time operator it begins with the event time, so that the
 *	  watermark is the last event time and no row of the history is late;
 *	- the boundary (until): where the flow reads its topic from afterwards,
 *	  and which rows of the source are history.  NULL: right after the
 *	  source's last kafka_offset of each partition; {"partition": offset}:
 *	  those offsets, the source's rows below them; a timestamp: the source's
 *	  rows with an event time (or kafka_timestamp) before it, the topic from
 *	  its first message at or after it (sdp_reset_flow's offsets-for-times).
 *
 * Then the flow is reset (state cleared, offsets at the boundary, the
 * other partitions at their earliest), the backfill is recorded in
 * sdp.backfills with the two statements its worker runs, and the flow is
 * started (start => false leaves it stopped).
 */
#include "sdp.h"
#include "compat.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_index.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "parser/parser.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "access/relation.h"

#include "decl/catalog.h"
#include "decl/flow.h"
#include "decl/flow_options.h"
#include "decl/input_schema.h"
#include "sql/api.h"

PG_FUNCTION_INFO_V1(sdp_backfill);

/* the SQL functions this one runs in the caller's transaction (reset.c, api.c) */
extern Datum sdp_reset_flow(PG_FUNCTION_ARGS);
extern Datum sdp_reset_flow_offsets(PG_FUNCTION_ARGS);
extern Datum sdp_start_flow(PG_FUNCTION_ARGS);

typedef struct BackfillFlow
{
	char	   *name;
	int64		id;
	Oid			owner;
	bool		running;
	char	   *schema_text;
	char	   *event_time;		/* the operator's event-time column, or NULL */
	bool		sink;
	SdpFlowOptions opts;
} BackfillFlow;

static const char *const meta_names[SDP_NUM_META] = {
	"kafka_topic", "kafka_partition", "kafka_offset", "kafka_key", "kafka_timestamp", "kafka_headers"
};

static void
load_flow(BackfillFlow *f)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(f->name)};
	HeapTuple	tup;
	TupleDesc	desc;
	bool		isnull;
	Datum		d;

	sdp_catalog_execute(psprintf("SELECT f.id, %s, f.owner::text, f.enabled AND f.failed_at IS NULL, f.schema, "
								 "       CASE WHEN f.operator IS NOT NULL THEN f.options->>'event_time' END, "
								 "       f.sink IS NOT NULL, f.options "
								 "  FROM sdp.flows f WHERE f.name = $1 FOR UPDATE OF f",
								 sdp_owner_oid_sql("f.owner")),
						1, argtypes, values, NULL, false);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("flow \"%s\" does not exist", f->name)));
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	f->id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
	d = SPI_getbinval(tup, desc, 2, &isnull);
	f->owner = isnull ? InvalidOid : DatumGetObjectId(d);
	sdp_check_owner(f->owner, SPI_getvalue(tup, desc, 3), "flow", f->name);
	f->running = DatumGetBool(SPI_getbinval(tup, desc, 4, &isnull));
	f->schema_text = SPI_getvalue(tup, desc, 5);
	f->event_time = SPI_getvalue(tup, desc, 6);
	f->sink = DatumGetBool(SPI_getbinval(tup, desc, 7, &isnull));
	sdp_parse_flow_options(DatumGetJsonbP(SPI_getbinval(tup, desc, 8, &isnull)), &f->opts);
}

/* Where the logic cannot be the flow's own over a table: refused, with the reason. */
static void
refuse_flow(BackfillFlow *f)
{
	if (f->sink)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot backfill flow \"%s\": it writes to a Kafka sink", f->name),
				 errdetail("A backfill writes the rows of flows into tables; its rows would be produced to the sink's topic, which this release does not do."),
				 errhint("Backfill a flow into a table, and produce from the table if the topic needs the history.")));
	if (f->opts.envelope != SDP_ENVELOPE_NONE)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot backfill flow \"%s\": it applies Debezium change events", f->name),
				 errdetail("A table holds the result of changes, not their order: copy it into the replica instead.")));
	if (f->opts.workers > 1 || f->opts.nshare > 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot backfill flow \"%s\": it runs in %d workers or reads a share of the partitions",
						f->name, Max(f->opts.workers, 1)),
				 errdetail("A backfill runs in one worker that reads every partition."),
				 errhint("Set the flow's workers to 1 (sdp_set_flow_workers) for the backfill, and back afterwards.")));
	if (f->running)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("flow \"%s\" is running", f->name),
				 errdetail("A backfill moves the flow's offsets and clears its state, as sdp_reset_flow does."),
				 errhint("Stop it first with sdp_stop_flow('%s'); sdp_backfill starts it again.", f->name)));
}

/* Whether text is a query rather than the name of a table or view. */
static bool
is_query(const char *s)
{
	static const char *const words[] = {"select", "with", "values", "table", NULL};

	while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' || *s == '(')
		s++;
	for (int i = 0; words[i]; i++)
	{
		size_t		len = strlen(words[i]);

		if (pg_strncasecmp(s, words[i], len) == 0 &&
			(s[len] == '\0' || s[len] == ' ' || s[len] == '\t' || s[len] == '\n' || s[len] == '\r' || s[len] == '('))
			return true;
	}
	return false;
}

/* The source as one SELECT; *relid the table's or view's (InvalidOid for a query). */
static char *
source_sql(const char *source, Oid *relid)
{
	List	   *stmts;

	*relid = InvalidOid;
	if (!is_query(source))
	{
		RangeVar   *rv = makeRangeVarFromNameList(sdp_qualified_name_list(source));
		Oid			id = RangeVarGetRelid(rv, AccessShareLock, false);

		*relid = id;
		return psprintf("SELECT * FROM %s",
						quote_qualified_identifier(get_namespace_name(get_rel_namespace(id)), get_rel_name(id)));
	}
	{
		/* a statement's own end (;) would end the subquery it runs in */
		char	   *q = pstrdup(source);
		int			len = strlen(q);

		while (len > 0 && (q[len - 1] == ';' || q[len - 1] == ' ' || q[len - 1] == '\n' ||
						   q[len - 1] == '\t' || q[len - 1] == '\r'))
			q[--len] = '\0';
		source = q;
	}
	stmts = raw_parser(source, RAW_PARSE_DEFAULT);
	if (list_length(stmts) != 1 || !IsA(((RawStmt *) linitial(stmts))->stmt, SelectStmt))
		ereport(ERROR,
				(errcode(ERRCODE_SYNTAX_ERROR),
				 errmsg("a backfill's source must be one SELECT, or the name of a table or view"),
				 errdetail("Source: %s", source)));
	return pstrdup(source);
}

static int
source_column(TupleDesc desc, const char *name)
{
	for (int i = 0; i < desc->natts; i++)
		if (!TupleDescAttr(desc, i)->attisdropped && strcmp(NameStr(TupleDescAttr(desc, i)->attname), name) == 0)
			return i;
	return -1;
}

static char *
column_list(TupleDesc desc)
{
	StringInfoData s;

	initStringInfo(&s);
	for (int i = 0; i < desc->natts; i++)
		appendStringInfo(&s, "%s%s", i ? ", " : "", NameStr(TupleDescAttr(desc, i)->attname));
	return s.data;
}

static char *
type_sql(Oid typid, int32 typmod)
{
	return format_type_extended(typid, typmod, FORMAT_TYPE_TYPEMOD_GIVEN | FORMAT_TYPE_FORCE_QUALIFY);
}

/* A table's primary key columns, in order; NIL when it has none. */
static List *
primary_key(Oid relid)
{
	List	   *cols = NIL;
	Relation	rel = relation_open(relid, AccessShareLock);
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;

	foreach(lc, indexes)
	{
		HeapTuple	tup = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(lfirst_oid(lc)));
		Form_pg_index idx;

		if (!HeapTupleIsValid(tup))
			continue;
		idx = (Form_pg_index) GETSTRUCT(tup);
		if (idx->indisprimary)
			for (int i = 0; i < idx->indnkeyatts; i++)
				if (idx->indkey.values[i] > 0)
					cols = lappend(cols, get_attname(relid, idx->indkey.values[i], false));
		ReleaseSysCache(tup);
	}
	relation_close(rel, AccessShareLock);
	return cols;
}

static bool
list_has_name(List *l, const char *name)
{
	ListCell   *lc;

	foreach(lc, l)
		if (strcmp(lfirst(lc), name) == 0)
			return true;
	return false;
}

/* The first value of a one-row, one-column result as int64. */
static int64
count_of(const char *sql)
{
	bool		isnull;

	if (SPI_execute(sql, true, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not run: %s", sql);
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

Datum
sdp_backfill(PG_FUNCTION_ARGS)
{
	BackfillFlow f;
	char	   *source;
	Jsonb	   *until = PG_ARGISNULL(2) ? NULL : PG_GETARG_JSONB_P(2);
	bool		start = PG_ARGISNULL(4) ? true : PG_GETARG_BOOL(4);
	List	   *order = NIL;
	SdpInputSchema *schema;
	Oid			relid;
	char	   *src;
	TupleDesc	sdesc;
	StringInfoData sel,
				keys,
				names,
				pos,
				next,
				filter,
				cond;
	bool		has_part,
				has_off;
	int32	   *until_parts = NULL;
	int64	   *until_offs = NULL;
	int			nuntil = 0;
	char	   *until_time = NULL;
	int64		total;
	Oid			save_userid;
	int			save_sec;
	int			guc_level;
	char	   *fetch_first;
	char	   *fetch_next;
	ListCell   *lc;
	int			k;
	Datum		result;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("sdp_backfill needs a flow and a source")));
	memset(&f, 0, sizeof(f));
	f.name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	source = text_to_cstring(PG_GETARG_TEXT_PP(1));
	if (!PG_ARGISNULL(3))
	{
		Datum	   *d;
		bool	   *nulls;
		int			n;

		deconstruct_array(PG_GETARG_ARRAYTYPE_P(3), TEXTOID, -1, false, TYPALIGN_INT, &d, &nulls, &n);
		for (int i = 0; i < n; i++)
		{
			if (nulls[i])
				ereport(ERROR,
						(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						 errmsg("order_by names columns; it has a NULL")));
			order = lappend(order, TextDatumGetCString(d[i]));
		}
		if (n == 0)
			order = NIL;
	}

	sdp_require_flow_database();
	sdp_refuse_self_change(f.name, "backfill", "sdp_backfill");
	SPI_connect();
	load_flow(&f);
	refuse_flow(&f);
	{
		Oid			argtypes[1] = {INT8OID};
		Datum		values[1] = {Int64GetDatum(f.id)};

		sdp_catalog_execute("SELECT rows_done, rows_total FROM sdp.backfills WHERE flow_id = $1 AND state = 'running'",
							1, argtypes, values, NULL, true);
		if (SPI_processed > 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("flow \"%s\" has a backfill that has not finished (%s of %s rows done)", f.name,
							SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1),
							SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2)),
					 errhint("Start the flow to finish it (sdp_start_flow), or abandon it with sdp_reset_flow().")));
	}
	schema = sdp_parse_input_schema(f.schema_text);

	/* the source, as the owner would read it in the worker */
	GetUserIdAndSecContext(&save_userid, &save_sec);
	if (OidIsValid(f.owner))
		SetUserIdAndSecContext(f.owner, save_sec | SECURITY_LOCAL_USERID_CHANGE);
	guc_level = sdp_enter_search_path(f.opts.search_path);

	src = source_sql(source, &relid);
	if (SPI_execute(psprintf("SELECT * FROM (%s) s LIMIT 0", src), true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the backfill's source");
	sdesc = CreateTupleDescCopy(SPI_tuptable->tupdesc);

	/* the input row: the schema's columns, cast to its types, then the Kafka columns */
	initStringInfo(&sel);
	for (int i = 0; i < schema->ncolumns; i++)
	{
		SdpInputColumn *c = &schema->columns[i];
		Form_pg_attribute sa;

		if (source_column(sdesc, c->name) < 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("the backfill's source has no column \"%s\" of flow \"%s\"'s schema", c->name, f.name),
					 errdetail("The source's columns: %s.", column_list(sdesc)),
					 errhint("Give it that name in a query: sdp_backfill('%s', 'SELECT ..., expression AS %s FROM ...').",
							 f.name, quote_identifier(c->name))));
		sa = TupleDescAttr(sdesc, source_column(sdesc, c->name));
		if (sa->atttypid == c->typid && (c->typmod < 0 || sa->atttypmod == c->typmod))
			appendStringInfo(&sel, "%ss.%s", i ? ", " : "", quote_identifier(c->name));
		else
		{
			/* as text, which the worker reads with the column's input function: a value that does not fit is the row's fault */
			appendStringInfo(&sel, "%ss.%s::text", i ? ", " : "", quote_identifier(c->name));
		}
	}
	for (int m = 0; m < schema->nmeta; m++)
	{
		Form_pg_attribute a = TupleDescAttr(schema->tupdesc, schema->ncolumns + m);
		bool		has = m != SDP_META_TOPIC && source_column(sdesc, meta_names[m]) >= 0;

		appendStringInfo(&sel, ", %s%s::%s", has ? "s." : "NULL", has ? meta_names[m] : "",
						 type_sql(a->atttypid, a->atttypmod));
	}
	has_part = source_column(sdesc, "kafka_partition") >= 0;
	has_off = source_column(sdesc, "kafka_offset") >= 0;

	/* the order */
	if (order == NIL)
	{
		if (f.event_time && source_column(sdesc, f.event_time) >= 0)
			order = lappend(order, f.event_time);
		if (has_part && has_off)
			order = lappend(lappend(order, "kafka_partition"), "kafka_offset");
		else if (OidIsValid(relid))
		{
			foreach(lc, primary_key(relid))
				if (!list_has_name(order, lfirst(lc)))
					order = lappend(order, lfirst(lc));
		}
		if (order == NIL || (list_length(order) == 1 && f.event_time && strcmp(linitial(order), f.event_time) == 0 &&
							 !(has_part && has_off)))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("the backfill of flow \"%s\" needs order_by: the source has no kafka_partition and kafka_offset, nor a primary key", f.name),
					 errdetail("The worker reads the source in an order that identifies every row, and goes on after the last one it stored."),
					 errhint("E.g. order_by => ARRAY[%s'id'] (columns whose values no two rows share).",
							 f.event_time ? psprintf("'%s', ", f.event_time) : "")));
	}
	if (f.event_time && strcmp(linitial(order), f.event_time) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the backfill of flow \"%s\" must be ordered by its event time \"%s\" first", f.name, f.event_time),
				 errdetail("In event-time order the watermark is the last event time and no row of the history is late; in another order the windows would not be the stream's."),
				 errhint("order_by => ARRAY['%s', ...].", f.event_time)));
	initStringInfo(&keys);
	initStringInfo(&names);
	initStringInfo(&pos);
	initStringInfo(&next);
	initStringInfo(&cond);
	k = 0;
	foreach(lc, order)
	{
		const char *name = lfirst(lc);
		int			col = source_column(sdesc, name);
		Form_pg_attribute a;

		if (col < 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("order_by names \"%s\", which the backfill's source does not have", name),
					 errdetail("The source's columns: %s.", column_list(sdesc))));
		a = TupleDescAttr(sdesc, col);
		appendStringInfo(&keys, "%ss.%s", k ? ", " : "", quote_identifier(name));
		appendStringInfo(&names, "%s%s", k ? ", " : "", name);
		appendStringInfo(&pos, "%ss.%s::text", k ? ", " : "", quote_identifier(name));
		appendStringInfo(&next, "%s$2[%d]::%s", k ? ", " : "", k + 1, type_sql(a->atttypid, a->atttypmod));
		appendStringInfo(&cond, "%ss.%s IS NULL", k ? " OR " : "", quote_identifier(name));
		k++;
	}

	/* the boundary, and the rows of the source that are history */
	initStringInfo(&filter);
	if (until == NULL || JB_ROOT_IS_OBJECT(until))
	{
		if (!has_part || !has_off)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("the backfill of flow \"%s\" needs until: the source has no kafka_partition and kafka_offset to continue after", f.name),
					 errhint("until => '\"2026-12-01T00:00:00Z\"' (rows before a time; the topic from that time), or order the source's rows by Kafka position.")));
		if (until == NULL)
		{
			if (SPI_execute(psprintf("SELECT s.kafka_partition::integer, max(s.kafka_offset)::bigint + 1 FROM (%s) s "
									 " WHERE s.kafka_partition IS NOT NULL AND s.kafka_offset IS NOT NULL "
									 " GROUP BY 1 ORDER BY 1", src), true, 0) != SPI_OK_SELECT)
				elog(ERROR, "could not read the source's offsets");
			nuntil = (int) SPI_processed;
			until_parts = palloc(sizeof(int32) * Max(nuntil, 1));
			until_offs = palloc(sizeof(int64) * Max(nuntil, 1));
			for (int i = 0; i < nuntil; i++)
			{
				bool		isnull;

				until_parts[i] = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
				until_offs[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull));
			}
		}
		else
		{
			JsonbIterator *it = JsonbIteratorInit(&until->root);
			JsonbValue	v;
			JsonbIteratorToken tok;
			int			cap = 8;

			until_parts = palloc(sizeof(int32) * cap);
			until_offs = palloc(sizeof(int64) * cap);
			while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
			{
				char	   *key;
				char	   *end;
				long		p;

				if (tok != WJB_KEY)
					continue;
				key = pnstrdup(v.val.string.val, v.val.string.len);
				errno = 0;
				p = strtol(key, &end, 10);
				tok = JsonbIteratorNext(&it, &v, true);
				if (*key == '\0' || *end != '\0' || errno != 0 || p < 0 || p > PG_INT32_MAX ||
					v.type != jbvNumeric)
					ereport(ERROR,
							(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							 errmsg("until must map partitions to offsets, as {\"0\": 1000}: \"%s\" is not that", key)));
				if (nuntil == cap)
				{
					cap *= 2;
					until_parts = repalloc(until_parts, sizeof(int32) * cap);
					until_offs = repalloc(until_offs, sizeof(int64) * cap);
				}
				until_parts[nuntil] = (int32) p;
				until_offs[nuntil] = DatumGetInt64(DirectFunctionCall1(numeric_int8, NumericGetDatum(v.val.numeric)));
				if (until_offs[nuntil] < 0)
					ereport(ERROR,
							(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							 errmsg("until: partition %ld's offset is negative", p)));
				nuntil++;
			}
		}
		if (nuntil == 0)
			appendStringInfoString(&filter, "false");
		else
		{
			appendStringInfoString(&filter, "s.kafka_offset < CASE s.kafka_partition");
			for (int i = 0; i < nuntil; i++)
				appendStringInfo(&filter, " WHEN %d THEN " INT64_FORMAT, until_parts[i], until_offs[i]);
			appendStringInfoString(&filter, " END");
		}
	}
	else if (JB_ROOT_IS_SCALAR(until))
	{
		JsonbValue	v;
		const char *tcol = f.event_time && source_column(sdesc, f.event_time) >= 0 ? f.event_time :
			source_column(sdesc, "kafka_timestamp") >= 0 ? "kafka_timestamp" : NULL;
		TimestampTz ts;

		if (!JsonbExtractScalar(&until->root, &v) || v.type != jbvString)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("until is a timestamp (a JSON string) or {\"partition\": offset}")));
		until_time = pnstrdup(v.val.string.val, v.val.string.len);
		ts = DatumGetTimestampTz(DirectFunctionCall3(timestamptz_in, CStringGetDatum(until_time),
													 ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1)));
		if (tcol == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("the backfill of flow \"%s\" cannot end at a time: the source has no event time nor kafka_timestamp column", f.name),
					 errhint("Name the history's time kafka_timestamp in a query source.")));
		appendStringInfo(&filter, "s.%s < 'epoch'::timestamptz + interval '" INT64_FORMAT " microseconds'",
						 quote_identifier(tcol),
						 ts - (int64) (UNIX_EPOCH_JDATE - POSTGRES_EPOCH_JDATE) * USECS_PER_DAY);
	}
	else
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("until is a timestamp (a JSON string) or {\"partition\": offset}")));

	/* the order identifies every row of the history, once */
	total = count_of(psprintf("SELECT count(*) FROM (%s) s WHERE %s", src, filter.data));
	{
		int64		nulls = count_of(psprintf("SELECT count(*) FROM (%s) s WHERE (%s) AND (%s)", src, filter.data, cond.data));
		int64		dups;

		if (nulls > 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("order_by (%s) is NULL in " INT64_FORMAT " rows of the backfill's source", names.data, nulls),
					 errdetail("The worker goes on after the last row it stored: every row needs a place in the order.")));
		dups = count_of(psprintf("SELECT count(*) FROM (SELECT 1 FROM (%s) s WHERE %s GROUP BY %s HAVING count(*) > 1) d",
								 src, filter.data, keys.data));
		if (dups > 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("order_by (%s) does not tell the backfill's rows apart: " INT64_FORMAT " values are shared by several rows",
							names.data, dups),
					 errdetail("The worker goes on after the last row it stored: rows alike in the order would be lost or run twice."),
					 errhint("Add a column no two rows share, e.g. the primary key.")));
	}
	fetch_first = psprintf("SELECT %s, ARRAY[%s] FROM (%s) s WHERE %s ORDER BY %s LIMIT $1",
						   sel.data, pos.data, src, filter.data, keys.data);
	fetch_next = psprintf("SELECT %s, ARRAY[%s] FROM (%s) s WHERE (%s) AND (%s) > (%s) ORDER BY %s LIMIT $1",
						  sel.data, pos.data, src, filter.data, keys.data, next.data, keys.data);
	{
		/* what the worker will run plans now: a type that does not cast is refused here */
		Oid			types[2] = {INT4OID, TEXTARRAYOID};

		if (SPI_prepare(fetch_first, 2, types) == NULL || SPI_prepare(fetch_next, 2, types) == NULL)
			elog(ERROR, "could not plan the backfill's statements: %s", SPI_result_code_string(SPI_result));
	}
	AtEOXact_GUC(true, guc_level);
	SetUserIdAndSecContext(save_userid, save_sec);

	/* the flow from the boundary: reset (state cleared), then the backfill, then started */
	(void) DirectFunctionCall2(sdp_reset_flow, CStringGetTextDatum(f.name),
							   CStringGetTextDatum(until_time ? until_time : "earliest"));
	if (until_time == NULL && nuntil > 0)
	{
		StringInfoData o;

		initStringInfo(&o);
		appendStringInfoChar(&o, '{');
		for (int i = 0; i < nuntil; i++)
			appendStringInfo(&o, "%s\"%d\": " INT64_FORMAT, i ? ", " : "", until_parts[i], until_offs[i]);
		appendStringInfoChar(&o, '}');
		(void) DirectFunctionCall2(sdp_reset_flow_offsets, CStringGetTextDatum(f.name),
								   DirectFunctionCall1(jsonb_in, CStringGetDatum(o.data)));
	}
	{
		Oid			argtypes[6] = {INT8OID, TEXTOID, TEXTARRAYOID, TEXTOID, TEXTOID, INT8OID};
		Datum		values[6];
		Datum	   *od = palloc(sizeof(Datum) * list_length(order));
		bool		isnull;

		k = 0;
		foreach(lc, order)
			od[k++] = CStringGetTextDatum(lfirst(lc));
		values[0] = Int64GetDatum(f.id);
		values[1] = CStringGetTextDatum(source);
		values[2] = PointerGetDatum(construct_array(od, k, TEXTOID, -1, false, TYPALIGN_INT));
		values[3] = CStringGetTextDatum(fetch_first);
		values[4] = CStringGetTextDatum(fetch_next);
		values[5] = Int64GetDatum(total);
		sdp_catalog_execute("INSERT INTO sdp.backfills (flow_id, source, order_by, boundary, fetch_first, fetch_next, rows_total) "
							"SELECT $1, $2, $3, coalesce((SELECT jsonb_object_agg(o.partition::text, o.next_offset ORDER BY o.partition) "
							"                               FROM sdp.offsets o WHERE o.flow_id = $1), '{}'), $4, $5, $6",
							6, argtypes, values, NULL, false);
		sdp_catalog_execute("SELECT jsonb_build_object('rows', rows_total, 'order_by', to_jsonb(order_by), 'boundary', boundary) "
							"  FROM sdp.backfills WHERE flow_id = $1",
							1, argtypes, values, NULL, false);	/* not read-only: it sees the row just inserted */
		if (SPI_processed != 1)
			elog(ERROR, "could not read the backfill of flow \"%s\" back", f.name);
		result = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		result = SPI_datumTransfer(result, false, -1);
	}
	SPI_finish();
	if (start)
		(void) DirectFunctionCall1(sdp_start_flow, CStringGetTextDatum(f.name));
	PG_RETURN_DATUM(result);
}

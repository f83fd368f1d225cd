/*
 * transform.c
 *		A flow's SQL transform over the relation "input".
 *
 * Each batch of decoded messages is handed to SQL as an ephemeral named
 * relation (the mechanism that gives trigger transition tables to PL/pgSQL):
 * a tuplestore registered with SPI under the name "input".  The transform is
 * prepared once, with an empty "input" of the declared schema, and kept; every
 * batch registers its own "input" and runs the same plan, with no parsing or
 * planning per batch.
 *
 * A user's transform must work row by row: the rows it gives for a batch
 * must be the union of what it gives for each of the batch's messages
 * alone, because a failing batch is run again in parts to set the failing
 * message aside.  Aggregation belongs to the stateful operators.
 */
#include "exec/transform.h"

#include "catalog/pg_class.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "tcop/dest.h"
#include "nodes/parsenodes.h"
#include "nodes/params.h"
#include "parser/parsetree.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/plancache.h"
#include "utils/queryenvironment.h"
#include "utils/snapmgr.h"
#include "utils/tuplestore.h"

/*
 * Register rows (of desc) with the current SPI connection as the named
 * relation.  The tuplestore lives in the current memory context and is
 * sized never to spill: batches are bounded by max_batch_rows.
 */
void
sdp_register_rows(const char *name, TupleDesc desc, HeapTuple *rows, int n)
{
	EphemeralNamedRelation enr = palloc0(sizeof(EphemeralNamedRelationData));
	Tuplestorestate *ts = tuplestore_begin_heap(false, false, MaxAllocSize / 1024);
	int			rc;

	for (int i = 0; i < n; i++)
		tuplestore_puttuple(ts, rows[i]);

	enr->md.name = pstrdup(name);
	enr->md.reliddesc = InvalidOid;
	enr->md.tupdesc = desc;
	enr->md.enrtype = ENR_NAMED_TUPLESTORE;
	/* a fixed estimate keeps the kept plan's shape stable from batch to batch */
	enr->md.enrtuples = 1000;
	enr->reldata = ts;
	rc = SPI_register_relation(enr);
	if (rc != SPI_OK_REL_REGISTER)
		elog(ERROR, "could not register relation \"%s\": %s", name, SPI_result_code_string(rc));
}

void
sdp_unregister_rows(const char *name)
{
	int			rc = SPI_unregister_relation(name);

	if (rc != SPI_OK_REL_UNREGISTER)
		elog(ERROR, "could not unregister relation \"%s\": %s", name, SPI_result_code_string(rc));
}

typedef struct TransformErrorContext
{
	const char *sql;
} TransformErrorContext;

static void
transform_error_context(void *arg)
{
	errcontext("transform of the flow: %s", ((TransformErrorContext *) arg)->sql);
}

/*
 * Whether a query locks rows: FOR UPDATE / NO KEY UPDATE / SHARE / KEY SHARE
 * in it or in any query inside it (subqueries in FROM, sublinks, CTEs, the
 * views it reads, as rewritten).  A transform never locks: its rows are
 * written by the flow, and a lock would be held for the whole batch.
 */
static bool
locks_rows_walker(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (IsA(node, Query))
	{
		Query	   *q = (Query *) node;

		if (q->rowMarks != NIL || q->hasForUpdate)
			return true;
		return query_tree_walker(q, locks_rows_walker, context, 0);
	}
	return expression_tree_walker(node, locks_rows_walker, context);
}

/*
 * Prepare and keep the transform (or note that there is none).  Refuses a
 * transform that is not exactly one plain SELECT.  Needs an SPI connection.
 * The result descriptor is allocated in the caller's memory context (SPI
 * calls return in SPI's own context, so every SPI call here is followed by
 * a switch back).
 */
static void transform_prepare(SdpTransform *t, SdpInputSchema *schema, const char *sql, bool generated,
							  int nparams, const Oid *paramtypes);

void
sdp_transform_prepare(SdpTransform *t, SdpInputSchema *schema, const char *sql)
{
	transform_prepare(t, schema, sql, false, 0, NULL);
}

/*
 * The same for a transform the engine built (an operator's, a sink flow's
 * outbox rows): its SQL is not the user's, so errors do not quote it.  It
 * may have parameters (at most one): their values are set in t->params
 * before it runs.
 */
void
sdp_transform_prepare_generated(SdpTransform *t, SdpInputSchema *schema, const char *sql,
								int nparams, const Oid *paramtypes)
{
	transform_prepare(t, schema, sql, true, nparams, paramtypes);
}

/* The columns of "input", for a hint: "icao24, lat, ..., kafka_headers". */
static char *
input_column_names(TupleDesc desc)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; i < desc->natts; i++)
		appendStringInfo(&buf, "%s%s", i > 0 ? ", " : "", quote_identifier(NameStr(TupleDescAttr(desc, i)->attname)));
	return buf.data;
}

static void
transform_prepare(SdpTransform *t, SdpInputSchema *schema, const char *sql, bool generated,
				  int nparams, const Oid *paramtypes)
{
	MemoryContext cxt = CurrentMemoryContext;
	List	   *sources;
	CachedPlanSource *ps;
	ErrorContextCallback errcb;
	TransformErrorContext ctx = {sql};

	Assert(nparams <= lengthof(t->paramtypes));
	t->input_desc = schema->tupdesc;
	t->plan = NULL;
	t->result_desc = schema->tupdesc;
	t->nparams = nparams;
	for (int i = 0; i < nparams; i++)
	{
		t->paramtypes[i] = paramtypes[i];
		t->params[i] = (Datum) 0;
	}
	if (sql == NULL)
		return;

	errcb.callback = transform_error_context;
	errcb.arg = &ctx;
	errcb.previous = error_context_stack;
	if (!generated)
		error_context_stack = &errcb;

	sdp_register_rows(SDP_INPUT_RELATION, schema->tupdesc, NULL, 0);
	PG_TRY();
	{
		t->plan = SPI_prepare(sql, nparams, (Oid *) paramtypes);
	}
	PG_CATCH();
	{
		/* a column the query names that "input" has not: say which it has (rethrown) */
		if (!generated && geterrcode() == ERRCODE_UNDEFINED_COLUMN)
		{
			ErrorData  *edata;

			MemoryContextSwitchTo(cxt);
			edata = CopyErrorData();
			FlushErrorState();
			if (edata->hint == NULL)
				edata->hint = psprintf("The relation \"input\" has the columns of the flow's schema and the Kafka metadata: %s. "
									   "If the column is a field of the messages, declare it in the schema.",
									   input_column_names(schema->tupdesc));
			ReThrowError(edata);
		}
		PG_RE_THROW();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);		/* SPI calls return in SPI's own context */
	if (t->plan == NULL)
		elog(ERROR, "SPI_prepare failed for the transform: %s", SPI_result_code_string(SPI_result));
	sdp_unregister_rows(SDP_INPUT_RELATION);

	sources = SPI_plan_get_plan_sources(t->plan);
	ps = (CachedPlanSource *) linitial(sources);
	if (list_length(sources) != 1 || ps->commandTag != CMDTAG_SELECT || ps->resultDesc == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("the transform must be a single SELECT query"),
				 errhint("Write a query over the relation \"input\", e.g. SELECT icao24, lat FROM input WHERE lat IS NOT NULL.")));
	if (ps->query_list != NIL)
	{
		ListCell   *lc;

		foreach(lc, ps->query_list)
		{
			Query	   *q = lfirst_node(Query, lc);

			if (q->hasModifyingCTE || locks_rows_walker((Node *) q, NULL))
				ereport(ERROR,
						(errcode(ERRCODE_WRONG_OBJECT_TYPE),
						 errmsg("the transform must be a read-only SELECT query"),
						 errdetail("Data-modifying WITH clauses and FOR UPDATE/SHARE, in the query or in any subquery, are not allowed."),
						 errhint("The flow writes the transform's rows into its target itself.")));
		}
	}
	if (!generated)
	{
		ListCell   *lc;

		/* a temporary table is its session's: the flow's worker, another session, cannot read it */
		foreach(lc, ps->relationOids)
		{
			Oid			relid = lfirst_oid(lc);

			if (get_rel_persistence(relid) == RELPERSISTENCE_TEMP)
				ereport(ERROR,
						(errcode(ERRCODE_WRONG_OBJECT_TYPE),
						 errmsg("the transform reads the temporary table \"%s\"", get_rel_name(relid)),
						 errdetail("A flow runs in a background worker of its own, which cannot see another session's temporary tables."),
						 errhint("Read an ordinary (or unlogged) table instead.")));
		}
	}
	t->result_desc = CreateTupleDescCopy(ps->resultDesc);
	if (!generated)
		error_context_stack = errcb.previous;
}

/*
 * What makes a query over "input" give other rows for a part of a batch
 * than for the whole, or NULL.  Set-returning functions in the select list
 * are allowed: they expand each row on its own.
 */
static const char *
not_row_by_row(Query *q)
{
	if (q->setOperations)
		return "a set operation (UNION, INTERSECT or EXCEPT)";
	if (q->hasAggs)
		return "an aggregate function";
	if (q->groupClause != NIL || q->groupingSets != NIL)
		return "GROUP BY";
	if (q->havingQual)
		return "HAVING";
	if (q->hasWindowFuncs)
		return "a window function";
	if (q->distinctClause != NIL)
		return "DISTINCT";
	if (q->limitCount || q->limitOffset)
		return "LIMIT or OFFSET";
	return NULL;
}

typedef struct InputScans
{
	List	   *queries;		/* the query being walked and its parents, innermost first */
	int			scans;			/* scans of "input" found by the walker */
	const char *refusal;		/* the first construct over "input" that is not row by row */
} InputScans;

static int	count_input_scans(Query *q, List *outer, InputScans *cx);

/* Sublinks in a query's expressions: their queries count. */
static bool
input_scans_walker(Node *node, InputScans *cx)
{
	if (node == NULL)
		return false;
	if (IsA(node, Query))
	{
		int			n = count_input_scans((Query *) node, cx->queries, cx);

		cx->scans += n;
		return false;
	}
	return expression_tree_walker(node, input_scans_walker, (void *) cx);
}

/*
 * How many times one run of q reads "input": directly, through subqueries
 * in FROM, sublinks, and once per reference to a CTE that reads it.  Notes
 * in cx->refusal the first query that reads it and is not row by row.
 */
static int
count_input_scans(Query *q, List *outer, InputScans *cx)
{
	List	   *queries = lcons(q, list_copy(outer));
	List	   *saved_queries = cx->queries;
	int			saved_scans = cx->scans;
	int			n = 0;
	ListCell   *lc;

	foreach(lc, q->rtable)
	{
		RangeTblEntry *rte = lfirst_node(RangeTblEntry, lc);

		if (rte->rtekind == RTE_NAMEDTUPLESTORE && strcmp(rte->enrname, SDP_INPUT_RELATION) == 0)
			n++;
		else if (rte->rtekind == RTE_SUBQUERY)
			n += count_input_scans(rte->subquery, queries, cx);
		else if (rte->rtekind == RTE_CTE && !rte->self_reference)
		{
			Query	   *owner = list_nth(queries, rte->ctelevelsup);
			ListCell   *c;

			foreach(c, owner->cteList)
			{
				CommonTableExpr *cte = lfirst_node(CommonTableExpr, c);

				if (strcmp(cte->ctename, rte->ctename) == 0)
					n += count_input_scans(castNode(Query, cte->ctequery),
										   list_copy_tail(queries, rte->ctelevelsup), cx);
			}
		}
	}
	cx->queries = queries;
	cx->scans = 0;
	(void) query_tree_walker(q, input_scans_walker, (void *) cx,
							 QTW_IGNORE_RT_SUBQUERIES | QTW_IGNORE_CTE_SUBQUERIES);
	n += cx->scans;
	cx->queries = saved_queries;
	cx->scans = saved_scans;

	if (n > 0 && cx->refusal == NULL)
		cx->refusal = not_row_by_row(q);
	return n;
}

/*
 * Refuse a transform that does not work row by row (see the file header):
 * one that aggregates, de-duplicates, limits, ranks or combines rows of
 * "input", or reads "input" other than once.  Subqueries that do any of
 * that over other tables are fine.  For declarations, of a user's transform
 * ("the transform") or of a part of a generated one that a user wrote
 * (what names it): the rest of what operators generate is not checked.
 */
void
sdp_transform_check_row_by_row(SdpTransform *t, const char *what)
{
	CachedPlanSource *ps;
	InputScans	cx;
	int			n;

	if (t->plan == NULL)
		return;
	ps = linitial(SPI_plan_get_plan_sources(t->plan));
	Assert(list_length(ps->query_list) == 1);
	memset(&cx, 0, sizeof(cx));
	n = count_input_scans(linitial_node(Query, ps->query_list), NIL, &cx);
	if (cx.refusal)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s must work row by row, but it uses %s over the relation \"input\"", what, cx.refusal),
				 errdetail("A batch that fails is run again in parts to set the failing message aside, and must give the same rows."),
				 errhint("Aggregate with a stateful operator: operator => 'window_agg' for windowed aggregations, or 'active_count' for counts of active members per key.")));
	if (n != 1)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s must read the relation \"input\" exactly once, but it reads it %d times", what, n),
				 errdetail("A batch that fails is run again in parts to set the failing message aside, and must give the same rows."),
				 errhint("Read \"input\" once, and other tables as needed: each row of a batch must give its rows on its own.")));
}

/*
 * Whether the transform's output column is a constant, the same for every
 * row (strip casts: 'z' AS zone).  Only what the top query's target list
 * shows: a column of the input, or no transform, is not.
 */
bool
sdp_transform_column_is_constant(SdpTransform *t, const char *column)
{
	CachedPlanSource *ps;
	Query	   *q;
	ListCell   *lc;

	if (t->plan == NULL)
		return false;
	ps = linitial(SPI_plan_get_plan_sources(t->plan));
	q = linitial_node(Query, ps->query_list);
	foreach(lc, q->targetList)
	{
		TargetEntry *tle = lfirst(lc);

		if (tle->resjunk || tle->resname == NULL || strcmp(tle->resname, column) != 0)
			continue;
		return IsA(strip_implicit_coercions((Node *) tle->expr), Const);
	}
	return false;
}

/* What sdp_transform_reads_column looks for, and the queries it is in. */
typedef struct ReadsColumn
{
	List	   *queries;		/* innermost first: varlevelsup indexes it */
	AttrNumber	attno;
	bool		found;
} ReadsColumn;

static bool
reads_column_walker(Node *node, ReadsColumn *cx)
{
	if (node == NULL || cx->found)
		return false;
	if (IsA(node, Var))
	{
		Var		   *v = (Var *) node;
		Query	   *q;
		RangeTblEntry *rte;

		if (v->varlevelsup >= (Index) list_length(cx->queries))
			return false;
		q = list_nth(cx->queries, v->varlevelsup);
		if (v->varno < 1 || v->varno > (int) list_length(q->rtable))
			return false;
		rte = rt_fetch(v->varno, q->rtable);
		/* the column, or a whole row of input or of a join */
		if ((rte->rtekind == RTE_NAMEDTUPLESTORE && strcmp(rte->enrname, SDP_INPUT_RELATION) == 0 &&
			 (v->varattno == cx->attno || v->varattno == 0)) ||
			(rte->rtekind == RTE_JOIN && v->varattno == 0))
			cx->found = true;
		else if (rte->rtekind == RTE_JOIN && v->varattno > 0 &&
				 v->varattno <= list_length(rte->joinaliasvars))
		{
			/* a column of a join (USING merges them): what it stands for, in the join's query */
			List	   *saved = cx->queries;

			cx->queries = list_copy_tail(saved, v->varlevelsup);
			(void) reads_column_walker(list_nth(rte->joinaliasvars, v->varattno - 1), cx);
			cx->queries = saved;
		}
		return false;
	}
	if (IsA(node, Query))
	{
		bool		r;

		/* a join's columns count where they are used, not all of them where the join is */
		cx->queries = lcons(node, cx->queries);
		r = query_tree_walker((Query *) node, reads_column_walker, (void *) cx, QTW_IGNORE_JOINALIASES);
		cx->queries = list_delete_first(cx->queries);
		return r;
	}
	return expression_tree_walker(node, reads_column_walker, (void *) cx);
}

/*
 * Whether the transform may read the input column (attno): a reference to
 * it anywhere, a whole-row reference to input (or a join of it), or '*'
 * (expanded by the parser to every column).  A flow without a transform
 * is the caller's to judge.
 */
bool
sdp_transform_reads_column(SdpTransform *t, AttrNumber attno)
{
	CachedPlanSource *ps;
	ReadsColumn cx = {NIL, attno, false};

	if (t->plan == NULL)
		return false;
	ps = linitial(SPI_plan_get_plan_sources(t->plan));
	(void) reads_column_walker((Node *) linitial_node(Query, ps->query_list), &cx);
	return cx.found;
}

/*
 * Check that the transform can run as the current role, without running
 * it: its plan's executor is started and ended as EXPLAIN (without
 * ANALYZE) does, which checks what executing it checks first, the
 * privileges on the tables it reads and EXECUTE on its functions.  Nothing
 * of the query is evaluated (an uncorrelated subquery neither: an InitPlan
 * runs at its first use), so a declaration never waits for it.
 */
void
sdp_transform_check_runs(SdpTransform *t)
{
	CachedPlanSource *ps;
	CachedPlan *cplan;
	QueryEnvironment *env;
	EphemeralNamedRelation enr;
	ListCell   *lc;

	if (t->plan == NULL)
		return;
	ps = linitial(SPI_plan_get_plan_sources(t->plan));
	enr = palloc0(sizeof(EphemeralNamedRelationData));
	enr->md.name = pstrdup(SDP_INPUT_RELATION);
	enr->md.reliddesc = InvalidOid;
	enr->md.tupdesc = t->input_desc;
	enr->md.enrtype = ENR_NAMED_TUPLESTORE;
	enr->md.enrtuples = 1000;
	enr->reldata = tuplestore_begin_heap(false, false, work_mem);
	env = create_queryEnv();
	register_ENR(env, enr);

	cplan = GetCachedPlan(ps, NULL, NULL, env);
	foreach(lc, cplan->stmt_list)
	{
		PlannedStmt *stmt = lfirst_node(PlannedStmt, lc);
		QueryDesc  *qd = CreateQueryDesc(stmt, ps->query_string, GetActiveSnapshot(), InvalidSnapshot,
										 None_Receiver, NULL, env, 0);

		ExecutorStart(qd, EXEC_FLAG_EXPLAIN_ONLY);
		ExecutorEnd(qd);
		FreeQueryDesc(qd);
	}
	ReleaseCachedPlan(cplan, NULL);
	tuplestore_end(enr->reldata);
}

/*
 * Run the transform over rows (of the input schema).  Sets *out to the
 * result rows, valid until SPI_finish; returns their count.  Without a
 * transform the input rows are the result.
 */
int
sdp_transform_run(SdpTransform *t, HeapTuple *rows, int n, HeapTuple **out)
{
	MemoryContext cxt = CurrentMemoryContext;
	int			rc;

	if (t->plan == NULL)
	{
		*out = rows;
		return n;
	}
	sdp_register_rows(SDP_INPUT_RELATION, t->input_desc, rows, n);
	rc = SPI_execute_plan(t->plan, t->nparams > 0 ? t->params : NULL, NULL, true, 0);
	MemoryContextSwitchTo(cxt);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "transform returned %s", SPI_result_code_string(rc));
	sdp_unregister_rows(SDP_INPUT_RELATION);
	*out = SPI_tuptable->vals;
	return (int) SPI_processed;
}

/*
 * Run the transform over rows, its result rows handed to dest one by one
 * instead of collected by SPI; returns their count.  Needs a transform.
 * dest's tag must be neither DestNone nor DestSPI (SPI would discard the
 * rows, or look for its own tuple table).
 */
int
sdp_transform_run_into(SdpTransform *t, HeapTuple *rows, int n, DestReceiver *dest)
{
	MemoryContext cxt = CurrentMemoryContext;
	SPIExecuteOptions options;
	int			rc;

	Assert(t->plan != NULL && dest->mydest != DestNone && dest->mydest != DestSPI);
	memset(&options, 0, sizeof(options));
	options.read_only = true;
	options.dest = dest;
	if (t->nparams > 0)
	{
		options.params = makeParamList(t->nparams);
		for (int i = 0; i < t->nparams; i++)
		{
			options.params->params[i].value = t->params[i];
			options.params->params[i].isnull = false;
			options.params->params[i].pflags = PARAM_FLAG_CONST;
			options.params->params[i].ptype = t->paramtypes[i];
		}
	}
	sdp_register_rows(SDP_INPUT_RELATION, t->input_desc, rows, n);
	rc = SPI_execute_plan_extended(t->plan, &options);
	MemoryContextSwitchTo(cxt);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "transform returned %s", SPI_result_code_string(rc));
	sdp_unregister_rows(SDP_INPUT_RELATION);
	return (int) SPI_processed;
}

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
 */
#include "pipeline.h"

#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "utils/memutils.h"
#include "utils/plancache.h"
#include "utils/queryenvironment.h"
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
 * Prepare and keep the transform (or note that there is none).  Refuses a
 * transform that is not exactly one plain SELECT.  Needs an SPI connection.
 * The result descriptor is allocated in the caller's memory context (SPI
 * calls return in SPI's own context, so every SPI call here is followed by
 * a switch back).
 */
static void transform_prepare(SdpTransform *t, SdpInputSchema *schema, const char *sql, bool generated);

void
sdp_transform_prepare(SdpTransform *t, SdpInputSchema *schema, const char *sql)
{
	transform_prepare(t, schema, sql, false);
}

/* The same for a transform an operator built: its SQL is not the user's, so errors do not quote it. */
void
sdp_transform_prepare_generated(SdpTransform *t, SdpInputSchema *schema, const char *sql)
{
	transform_prepare(t, schema, sql, true);
}

static void
transform_prepare(SdpTransform *t, SdpInputSchema *schema, const char *sql, bool generated)
{
	MemoryContext cxt = CurrentMemoryContext;
	List	   *sources;
	CachedPlanSource *ps;
	ErrorContextCallback errcb;
	TransformErrorContext ctx = {sql};

	t->input_desc = schema->tupdesc;
	t->plan = NULL;
	t->result_desc = schema->tupdesc;
	if (sql == NULL)
		return;

	errcb.callback = transform_error_context;
	errcb.arg = &ctx;
	errcb.previous = error_context_stack;
	if (!generated)
		error_context_stack = &errcb;

	sdp_register_rows(SDP_INPUT_RELATION, schema->tupdesc, NULL, 0);
	t->plan = SPI_prepare(sql, 0, NULL);
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

			if (q->hasModifyingCTE || q->rowMarks != NIL)
				ereport(ERROR,
						(errcode(ERRCODE_WRONG_OBJECT_TYPE),
						 errmsg("the transform must be a read-only SELECT query"),
						 errdetail("Data-modifying WITH clauses and FOR UPDATE/SHARE are not allowed."),
						 errhint("The flow writes the transform's rows into its target itself.")));
		}
	}
	t->result_desc = CreateTupleDescCopy(ps->resultDesc);
	if (!generated)
		error_context_stack = errcb.previous;
}

/* Run the transform once over an empty input: it checks the privileges on what it reads. */
void
sdp_transform_check_runs(SdpTransform *t)
{
	HeapTuple  *out;

	(void) sdp_transform_run(t, NULL, 0, &out);
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
	rc = SPI_execute_plan(t->plan, NULL, NULL, true, 0);
	MemoryContextSwitchTo(cxt);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "transform returned %s", SPI_result_code_string(rc));
	sdp_unregister_rows(SDP_INPUT_RELATION);
	*out = SPI_tuptable->vals;
	return (int) SPI_processed;
}

/*
 * alter.c
 *		sdp_alter_flow: change a flow's transform, options or schema and keep
 *		its place.
 *
 * The new declaration (the parts given replace the old ones; options are
 * merged, a key set to JSON null removes it) is checked exactly as a new
 * one is: by sdp_flow_prepare (prepare/flow_prepare.c), as the flow's
 * owner, so every refusal and SQLSTATE is the declaration's.  The flow's
 * row is then updated in the caller's transaction.  Its offsets stay where
 * they are.
 *
 * Once that commits, the launcher sees the declaration changed (a hash of
 * it is kept with each worker slot) and does what it does when the number
 * of workers changes: it stops every worker of the flow and, once they have
 * all exited, starts the new ones.  A worker stops between batches and its
 * rows commit with their offsets, so the new declaration takes over at a
 * batch boundary: nothing is read twice or skipped.
 *
 * A stateful flow restarts from its checkpoint.  Its state is kept when its
 * operator's options are unchanged (the operator's key and what its state
 * entries mean); when they change, the call is refused unless options say
 * "reset_state": true, which clears the state (as sdp_reset_flow does) and
 * resumes from the checkpointed offsets.  "reset_state" is not stored.
 */
#include "sdp.h"
#include "compat.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "catalog/namespace.h"
#include "nodes/makefuncs.h"
#include "utils/guc.h"
#include "utils/regproc.h"

#include "decl/flow.h"
#include "decl/catalog.h"
#include "decl/flow_options.h"
#include "shmem/slots.h"
#include "sql/api.h"
#include "prepare/flow_prepare.h"
#include "sql/roles.h"
#include "stateful/registry.h"

PG_FUNCTION_INFO_V1(sdp_alter_flow);

/* The current declaration of the flow, locked. */
typedef struct AlterFlow
{
	const char *name;
	int64		id;
	Oid			owner;
	char	   *source;
	char	   *target;			/* NULL for a flow with a sink */
	char	   *sink;
	char	   *schema;
	char	   *transform;
	char	   *operator_name;
	Jsonb	   *options;
} AlterFlow;

static char *
value_or_null(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;

	(void) SPI_getbinval(tup, desc, col, &isnull);
	return isnull ? NULL : SPI_getvalue(tup, desc, col);
}

static void
alter_load_flow(const char *name, AlterFlow *f)
{
	SdpCatalogScope scope;
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(name)};
	HeapTuple	tup;
	TupleDesc	desc;
	bool		isnull;
	Oid			owner;

	sdp_catalog_enter(&scope);
	if (SPI_execute_with_args(psprintf("SELECT f.id, %s, f.owner::text, f.source, f.target, f.schema, f.transform, "
									   "       f.operator, f.options, pg_catalog.to_jsonb(f) OPERATOR(pg_catalog.->>) 'sink' "
									   "  FROM sdp.flows f WHERE f.name = $1 FOR UPDATE",
									   sdp_owner_oid_sql("f.owner")),
							  1, argtypes, values, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read flow \"%s\"", name);
	sdp_catalog_leave(&scope);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("flow \"%s\" does not exist", name)));
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	owner = DatumGetObjectId(SPI_getbinval(tup, desc, 2, &isnull));
	sdp_check_owner(isnull ? InvalidOid : owner, SPI_getvalue(tup, desc, 3), "flow", name);
	f->owner = isnull ? InvalidOid : owner;
	f->name = name;
	f->id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
	f->source = SPI_getvalue(tup, desc, 4);
	f->target = value_or_null(tup, desc, 5);
	f->sink = value_or_null(tup, desc, 10);
	f->schema = SPI_getvalue(tup, desc, 6);
	f->transform = value_or_null(tup, desc, 7);
	f->operator_name = value_or_null(tup, desc, 8);
	f->options = DatumGetJsonbPCopy(SPI_getbinval(tup, desc, 9, &isnull));
}

/* The options without the keys the flow itself knows: the operator's. */
static Jsonb *
operator_part(Jsonb *options)
{
	SdpFlowOptions opts;

	sdp_parse_flow_options(options, &opts);
	return opts.operator_options;
}

static bool
jsonb_same(Jsonb *a, Jsonb *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return DatumGetBool(DirectFunctionCall2(jsonb_eq, JsonbPGetDatum(a), JsonbPGetDatum(b)));
}

/*
 * Check the new declaration as sdp_create_flow does, by the same function
 * (sdp_flow_prepare), as the flow's owner, and return the options to store
 * (with the mode it resolves and the search_path written out).  Nothing is
 * written; an error is the caller's (the owner's user id is put back by
 * the abort).
 */
static Jsonb *
alter_check(AlterFlow *f, const char *schema, const char *transform, Jsonb *options)
{
	Oid			save_userid;
	int			save_sec;
	SdpFlowOptions opts;
	SdpSinkDef	sink;
	SdpFlowDecl decl;
	SdpFlowPrepared prepared;

	if (!OidIsValid(f->owner))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("the owner of flow %lld no longer exists", (long long) f->id)));
	GetUserIdAndSecContext(&save_userid, &save_sec);
	SetUserIdAndSecContext(f->owner, save_sec | SECURITY_LOCAL_USERID_CHANGE);

	sdp_parse_flow_options(options, &opts);
	sdp_check_workers_quota(opts.workers);
	/* a flow declared before 0.7 records no search_path: the caller's now, as sdp_create_flow takes it */
	if (opts.search_path == NULL)
		opts.search_path = pstrdup(GetConfigOption("search_path", false, false));
	memset(&sink, 0, sizeof(sink));
	sink.name = f->sink;
	if (f->sink)
		sdp_catalog_sink_options(&sink);
	decl.name = f->name;
	decl.flow_id = 0;
	decl.worker_no = 0;
	decl.target = f->target
		? RangeVarGetRelid(makeRangeVarFromNameList(sdp_qualified_name_list(f->target)), NoLock, false)
		: InvalidOid;
	decl.sink = &sink;
	decl.schema_text = schema;
	decl.transform_sql = transform;
	decl.operator_name = f->operator_name;
	decl.opts = &opts;
	sdp_flow_prepare(&decl, &prepared, false);

	SetUserIdAndSecContext(save_userid, save_sec);
	return sdp_flow_stored_options(options, &opts);
}

/*
 * sdp_alter_flow(name, transform, options, schema): the parts given change
 * (a transform of '' removes it), the rest stay.
 */
Datum
sdp_alter_flow(PG_FUNCTION_ARGS)
{
	char	   *name;
	AlterFlow	f;
	char	   *schema;
	char	   *transform;
	Jsonb	   *options;
	Jsonb	   *stored;
	bool		reset_state = false;
	bool		changed_operator = false;
	SdpCatalogScope scope;
	Oid			argtypes[4] = {INT8OID, TEXTOID, TEXTOID, JSONBOID};
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("flow name must not be null")));
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	if (PG_ARGISNULL(1) && PG_ARGISNULL(2) && PG_ARGISNULL(3))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("sdp_alter_flow changes nothing"),
				 errhint("Give a new transform, options or schema: sdp_alter_flow('%s', transform => ...).", name)));
	sdp_require_shmem();
	sdp_require_flow_database();
	sdp_refuse_self_change(name, "alter", "sdp_alter_flow");

	SPI_connect();
	alter_load_flow(name, &f);

	schema = PG_ARGISNULL(3) ? f.schema : text_to_cstring(PG_GETARG_TEXT_PP(3));
	transform = PG_ARGISNULL(1) ? f.transform : text_to_cstring(PG_GETARG_TEXT_PP(1));
	if (transform != NULL && transform[0] == '\0')
		transform = NULL;
	options = f.options;
	if (!PG_ARGISNULL(2))
	{
		Jsonb	   *given = PG_GETARG_JSONB_P(2);
		JsonbValue *rs;

		if (!JB_ROOT_IS_OBJECT(given))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("flow options must be a JSON object")));
		rs = getKeyJsonValueFromContainer(&given->root, "reset_state", strlen("reset_state"), NULL);
		if (rs != NULL)
		{
			if (rs->type != jbvBool)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("option \"reset_state\" must be true or false")));
			reset_state = rs->val.boolean;
			given = DatumGetJsonbP(DirectFunctionCall2(jsonb_delete, JsonbPGetDatum(given),
													   CStringGetTextDatum("reset_state")));
		}
		/* merged; a key set to null is removed (jsonb_strip_nulls: no option takes null) */
		options = DatumGetJsonbP(DirectFunctionCall1(jsonb_strip_nulls,
													 DirectFunctionCall2(jsonb_concat, JsonbPGetDatum(options),
																		 JsonbPGetDatum(given))));
	}
	if (reset_state && f.operator_name == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"reset_state\" is for stateful flows, and flow \"%s\" has no operator", name)));

	stored = alter_check(&f, schema, transform, options);

	if (f.operator_name != NULL)
	{
		const SdpOperator *op = sdp_find_operator(f.operator_name);

		changed_operator = !jsonb_same(operator_part(f.options), operator_part(stored));
		/* an operator that says which changes keep its state (the processor's variables added or removed) */
		if (changed_operator && !reset_state && op != NULL && op->check_alter != NULL)
		{
			op->check_alter(operator_part(f.options), operator_part(stored));
			changed_operator = false;
		}
		if (changed_operator && !reset_state)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("the new options of flow \"%s\" change its operator's options, so its state cannot be kept", name),
					 errdetail("The state's entries are keyed and built by the operator's options."),
					 errhint("Add \"reset_state\": true to the options to clear the state; the flow then resumes from its checkpointed offsets with none.")));
	}

	values[0] = Int64GetDatum(f.id);
	values[1] = CStringGetTextDatum(schema);
	values[2] = transform ? CStringGetTextDatum(transform) : (Datum) 0;
	nulls[2] = transform ? ' ' : 'n';
	values[3] = JsonbPGetDatum(stored);
	sdp_catalog_enter(&scope);
	if (SPI_execute_with_args("UPDATE sdp.flows SET schema = $2, transform = $3, options = $4 WHERE id = $1",
							  4, argtypes, values, nulls, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not update flow \"%s\"", name);
	if (reset_state &&
		(SPI_execute_with_args("DELETE FROM sdp.state_checkpoints WHERE flow_id = $1",
							   1, argtypes, values, NULL, false, 0) != SPI_OK_DELETE ||
		 SPI_execute_with_args("UPDATE sdp.offsets SET state_offset = next_offset, max_event_time = NULL, "
							   "       watermark = NULL WHERE flow_id = $1",
							   1, argtypes, values, NULL, false, 0) != SPI_OK_UPDATE ||
		 SPI_execute_with_args("UPDATE sdp.flows SET watermark = NULL WHERE id = $1",
							   1, argtypes, values, NULL, false, 0) != SPI_OK_UPDATE))
		elog(ERROR, "could not clear the state of flow \"%s\"", name);
	sdp_catalog_leave(&scope);
	SPI_finish();

	sdp_wake_launcher_at_commit();
	PG_RETURN_VOID();
}

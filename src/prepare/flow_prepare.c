/*
 * flow_prepare.c
 *		One check-and-prepare of a flow's declaration.
 *
 * sdp_create_flow, sdp_alter_flow and the flow's worker all call
 * sdp_flow_prepare, as the flow's owner (the current user): it looks the
 * operator up, parses the input schema, prepares the transform and the
 * write into the target (or the outbox of a flow with a sink), has the
 * operator validate its options against the transform's rows, and checks
 * the owner's privileges.  What refuses a declaration at sdp_create_flow
 * is what fails a worker that loads it, by the same code.  A declaration
 * (for_worker false) is also checked for what only matters when it is
 * made (the transform runs row by row; options that contradict each
 * other; the workers its operator allows), with the search_path it records,
 * and nothing is kept; a worker (for_worker true) keeps the plans for its
 * life, and gets what its batches need (the outbox rows' bound, the
 * tombstones' DELETE, the metadata columns its transform reads).
 *
 * It sits above exec/ (the transform, the table write), stateful/ (the
 * operators) and kafka/ (the outbox and the relay's message bound), and
 * below sql/ and worker/, its two callers.
 */
#include "prepare/flow_prepare.h"
#include "stateful/registry.h"
#include "decl/catalog.h"
#include "decl/flow_options.h"
#include "decl/input_schema.h"
#include "decl/envelope.h"
#include "exec/avro_encode.h"
#include "exec/tombstone_delete.h"
#include "kafka/outbox.h"
#include "kafka/relay.h"

#include "access/relation.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

/*
 * The event_time option of an operator names a timestamptz column of the
 * input schema (the watermark is kept over the input's event times).
 */
static void
check_event_time_column(SdpInputSchema *schema, Jsonb *operator_options)
{
	char	   *event_time = sdp_operator_option(operator_options, "event_time");
	bool		found = false;

	if (event_time == NULL)
		return;
	for (int i = 0; i < schema->ncolumns; i++)
		found |= (strcmp(schema->columns[i].name, event_time) == 0 &&
				  schema->columns[i].typid == TIMESTAMPTZOID);
	if (!found)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("event_time column \"%s\" is not a timestamptz column of the input schema", event_time),
				 errhint("Declare it in the schema, e.g. 'event_ts timestamptz'.")));
}

/*
 * The number of workers a flow may run in: within the bounds, and for a
 * window_agg flow (named: its aggregations are declared), none of its
 * aggregations over the whole stream when there are several.
 */
void
sdp_flow_check_workers(int workers, const SdpOperator *op, const char *flow)
{
	sdp_check_workers(workers);
	if (workers > 1 && op != NULL && flow != NULL && strcmp(op->name, "window_agg") == 0)
	{
		Oid			argtypes[1] = {TEXTOID};
		Datum		values[1] = {CStringGetTextDatum(flow)};

		sdp_catalog_execute("SELECT name FROM sdp.aggregations "
							" WHERE flow = $1 AND coalesce(cardinality(group_by), 0) = 0 ORDER BY name LIMIT 1",
							1, argtypes, values, NULL, true);
		if (SPI_processed > 0)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("flow \"%s\" cannot run in %d workers: its aggregation \"%s\" has no group_by",
							flow, workers, SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1)),
					 errdetail("An aggregation over the whole stream needs the rows of every partition, and each worker of a stateful flow owns the state of its partitions' keys."),
					 errhint("Group it by the column the topic is keyed by, or drop it.")));
	}
}

/* A stateful flow in several workers cannot key its operator by a constant. */
void
sdp_flow_check_constant_key(SdpTransform *t, Jsonb *options, const char *flow, int workers)
{
	char	   *key = sdp_operator_option(options, "key");

	if (workers > 1 && key != NULL && sdp_transform_column_is_constant(t, key))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("flow \"%s\" cannot run in %d workers: its operator's key column \"%s\" is a constant",
						flow, workers, key),
				 errdetail("Every row has the same key, so rows of every partition feed one key, and each worker of a stateful flow owns the state of its partitions' keys."),
				 errhint("Key the operator by the column the topic is keyed by (e.g. the transform passes kafka_key through), or run the flow in one worker.")));
}

/* The options of a declaration that contradict each other (or the catalog's version). */
static void
check_declared_options(const SdpFlowDecl *decl, const SdpOperator *op, bool has_sink)
{
	SdpFlowOptions *opts = decl->opts;

	if (op == NULL && opts->operator_options != NULL)
	{
		JsonbIterator *it = JsonbIteratorInit(&opts->operator_options->root);
		JsonbValue	v;

		(void) JsonbIteratorNext(&it, &v, false);	/* begin object */
		(void) JsonbIteratorNext(&it, &v, false);	/* first key */
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown option \"%.*s\"", v.val.string.len, v.val.string.val),
				 errhint("Flow options are mode, on_error, on_tombstone, envelope, workers, partitions, checkpoint_interval, state_memory_limit, synchronous_commit, statement_timeout, search_path, max_batch_rows, max_batch_bytes, max_batch_wait, progress_interval and notify; operators take more.")));
	}
	sdp_flow_check_workers(opts->workers, op, NULL);
	if (!has_sink && opts->sink_key != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"sink_key\" is for a flow with a sink"),
				 errhint("A flow into a table has no message key.")));
	if (op != NULL && opts->envelope == SDP_ENVELOPE_DEBEZIUM)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("option \"envelope\": \"debezium\" is for stateless flows"),
				 errhint("Apply the change events into a table with a stateless flow, and run the operator over that table's changes or over the events without envelope.")));
	if (has_sink && opts->envelope == SDP_ENVELOPE_DEBEZIUM)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"envelope\": \"debezium\" is for flows into a table"),
				 errhint("A change event upserts or deletes a row of the target; a flow with a sink only appends messages.")));
	if (has_sink && opts->on_tombstone == SDP_TOMBSTONE_DELETE)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"on_tombstone\": \"delete\" is for flows into a table"),
				 errhint("A flow with a sink only appends messages; use \"skip\" or \"dead_letter\".")));
	if (has_sink && opts->mode_given && opts->mode != SDP_MODE_APPEND)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a flow with a sink appends: mode \"%s\" is for a target table", sdp_write_mode_name(opts->mode)),
				 errhint("Leave mode out; each row becomes one message, and the messages' key is option sink_key.")));
}

/* The attribute number of column 'name' in desc, 0 when none. */
static int
attnum_in_desc(TupleDesc desc, const char *name)
{
	for (int i = 0; i < desc->natts; i++)
		if (!TupleDescAttr(desc, i)->attisdropped && strcmp(NameStr(TupleDescAttr(desc, i)->attname), name) == 0)
			return i + 1;
	return 0;
}

/*
 * A flow with a sink: its rows (or its operator's) go into sdp.outbox, as
 * (flow_id, worker, key, value) rows (kafka/outbox.c).  Several workers
 * need the column worker (0.5): each relays its own rows.
 */
static void
prepare_sink_flow(const SdpFlowDecl *decl, SdpFlowPrepared *out, SdpTransform *own, bool for_worker)
{
	SdpFlowOptions *opts = decl->opts;
	Oid			outbox = get_relname_relid("outbox", get_namespace_oid(SDP_SCHEMA, false));

	out->outbox_tagged = sdp_outbox_has_worker();
	out->outbox_skips = sdp_outbox_has_skips();
	out->sink_avro_id = -1;
	if (decl->sink->format == SDP_FORMAT_AVRO && !sdp_outbox_has_row_avro())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("a flow to an Avro sink needs version 0.9 of sdp_ext"),
				 errhint("Run ALTER EXTENSION sdp_ext UPDATE.")));
	if (opts->workers > 1 && !out->outbox_tagged)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("a flow with a sink runs in one worker before version 0.5 of sdp_ext"),
				 errhint("Run ALTER EXTENSION sdp_ext UPDATE.")));
	if (out->op)
	{
		/* the operator's rows become outbox rows one by one (sdp_outbox_row) */
		out->transform = *own;
		out->emitted_desc = out->op->validate(own->result_desc, opts->operator_options, NULL, opts);
		if (!for_worker)
		{
			sdp_flow_check_constant_key(own, opts->operator_options, decl->name, opts->workers);
			check_event_time_column(out->schema, opts->operator_options);
		}
		out->emitted_desc = BlessTupleDesc(out->emitted_desc);
		sdp_outbox_check_key(out->emitted_desc, opts->sink_key, true);
		if (decl->sink->format == SDP_FORMAT_AVRO)
			out->sink_avro = sdp_avro_row_plan(out->emitted_desc);
		out->sink_key_attno = opts->sink_key ? attnum_in_desc(out->emitted_desc, opts->sink_key) : 0;
		opts->mode = SDP_MODE_APPEND;
		sdp_table_write_prepare_outbox(&out->table_write, outbox, sdp_outbox_desc(out->outbox_tagged));
	}
	else
	{
		/* the transform wrapped so that it produces the outbox rows itself */
		bool		avro = decl->sink->format == SDP_FORMAT_AVRO;
		Oid			id_type = INT4OID;

		sdp_outbox_check_key(own->result_desc, opts->sink_key, false);
		if (avro)
		{
			/* the values are the transform's rows, or the declared columns without one */
			TupleDesc	values = own->result_desc;

			if (decl->transform_sql == NULL)
			{
				values = CreateTemplateTupleDesc(out->schema->ncolumns);
				for (int c = 0; c < out->schema->ncolumns; c++)
					TupleDescCopyEntry(values, c + 1, out->schema->tupdesc, c + 1);
			}
			out->sink_avro = sdp_avro_row_plan(values);
		}
		sdp_transform_prepare_generated(&out->transform, out->schema,
										sdp_outbox_sql(decl->transform_sql, out->schema, decl->flow_id,
													   out->outbox_tagged ? decl->worker_no : -1,
													   opts->sink_key, avro),
										avro ? 1 : 0, &id_type);
		opts->mode = SDP_MODE_APPEND;
		sdp_table_write_prepare_outbox(&out->table_write, outbox, out->transform.result_desc);
	}
	if (out->sink_avro != NULL)
		out->sink_avro_schema = sdp_avro_row_schema(out->sink_avro, decl->name);
	/* a row the sink's producer would refuse is set aside when it is written (exec/table_write.c) */
	if (for_worker)
	{
		int			message_max_bytes;
		int			max_payload = kafka_relay_max_payload(decl->sink, decl->flow_id,
														  out->outbox_tagged ? decl->worker_no : 0,
														  &message_max_bytes);

		sdp_table_write_limit_messages(&out->table_write, decl->sink->name, max_payload, message_max_bytes);
		out->table_write.value_hex = out->sink_avro != NULL;
	}
	out->target_name = NULL;
}

/*
 * A flow into a table: its rows (or its operator's) are written into the
 * target, upserted on its primary key unless the options say append (and
 * a declaration without mode upserts when the target has a primary key).
 */
static void
prepare_table_flow(const SdpFlowDecl *decl, SdpFlowPrepared *out, SdpTransform *own, bool for_worker)
{
	SdpFlowOptions *opts = decl->opts;
	Relation	rel;
	TupleDesc	write_desc = own->result_desc;
	bool		has_pk;
	int			npk;
	AttrNumber *pk;

	out->transform = *own;
	rel = relation_open(decl->target, AccessShareLock);
	out->target_name = quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
												  RelationGetRelationName(rel));
	has_pk = OidIsValid(sdp_target_primary_key(rel, &npk, &pk));
	if (out->op)
	{
		write_desc = out->op->validate(own->result_desc, opts->operator_options, rel, opts);
		if (!for_worker)
		{
			sdp_flow_check_constant_key(own, opts->operator_options, decl->name, opts->workers);
			check_event_time_column(out->schema, opts->operator_options);
		}
	}
	relation_close(rel, AccessShareLock);
	if (!opts->mode_given)
		opts->mode = has_pk ? SDP_MODE_UPSERT : SDP_MODE_APPEND;
	sdp_table_write_prepare(&out->table_write, decl->target, opts->mode, write_desc,
							decl->transform_sql == NULL && out->op == NULL
							? SDP_SKIP_META | (opts->envelope == SDP_ENVELOPE_DEBEZIUM ? SDP_SKIP_DEBEZIUM : 0) : 0);
}

static void
schema_error_context(void *arg)
{
	if (arg != NULL)
		errcontext("input schema of flow \"%s\"", (const char *) arg);
}

/*
 * Check and prepare the declaration, as the current user (its owner).
 * Errors are the declaration's refusals, with their SQLSTATEs.  A worker's
 * plans are kept (SPI_keepplan) in out; a declaration's are not.  The
 * caller is connected to SPI, in a transaction with a snapshot (a
 * declaration's is pushed here).
 */
void
sdp_flow_prepare(const SdpFlowDecl *decl, SdpFlowPrepared *out, bool for_worker)
{
	SdpFlowOptions *opts = decl->opts;
	bool		has_sink = decl->sink != NULL && decl->sink->name != NULL;
	SdpTransform own;
	int			guc_level = 0;
	ErrorContextCallback schema_errcb;

	memset(out, 0, sizeof(SdpFlowPrepared));

	/* a declaration plans with the search_path it records; a worker has set it for its life */
	if (!for_worker)
		guc_level = sdp_enter_search_path(opts->search_path);

	if (decl->operator_name)
	{
		out->op = sdp_find_operator(decl->operator_name);
		if (out->op == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("operator \"%s\" does not exist", decl->operator_name),
					 errhint("Available operators: %s.", sdp_operator_names())));
	}
	if (!for_worker)
		check_declared_options(decl, out->op, has_sink);

	/* an error in the schema names the flow (the field is in its message) */
	schema_errcb.callback = schema_error_context;
	schema_errcb.arg = (void *) decl->name;
	schema_errcb.previous = error_context_stack;
	error_context_stack = &schema_errcb;
	if (opts->envelope == SDP_ENVELOPE_DEBEZIUM)
	{
		out->schema = sdp_debezium_row_schema(decl->schema_text);
		out->envelope = sdp_debezium_envelope(out->schema);
	}
	else
		out->schema = sdp_parse_input_schema(decl->schema_text);
	error_context_stack = schema_errcb.previous;

	if (!for_worker)
		PushActiveSnapshot(GetTransactionSnapshot());
	sdp_transform_prepare(&own, out->schema, decl->transform_sql);
	if (!for_worker)
	{
		sdp_transform_check_row_by_row(&own, "the transform");
		sdp_transform_check_runs(&own);
	}
	out->rows_desc = own.result_desc;

	if (has_sink)
		prepare_sink_flow(decl, out, &own, for_worker);
	else
		prepare_table_flow(decl, out, &own, for_worker);
	sdp_table_write_check_privileges(&out->table_write, GetUserId());
	sdp_tombstone_prepare(opts, out->op != NULL, out->table_write.relid, GetUserId(),
						  for_worker ? &out->tombstone_plan : NULL);
	sdp_debezium_prepare(opts, &out->table_write, GetUserId(), for_worker ? &out->delete_plan : NULL);

	/*
	 * Headers are read only when something may use them: the transform,
	 * the target's kafka_headers column (no transform), or an operator.
	 */
	if (out->schema->nmeta > SDP_META_HEADERS)
		out->want_headers = decl->transform_sql != NULL
			? sdp_transform_reads_column(&own, out->schema->ncolumns + SDP_META_HEADERS + 1)
			: (out->op != NULL || (!has_sink && get_attnum(decl->target, "kafka_headers") > 0));

	/*
	 * The other Kafka columns a stateless flow's transform does not read
	 * are left null (an operator's flow reads their partitions and offsets
	 * from the rows; a flow without transform writes them if the target
	 * has them).
	 */
	out->unread_meta = 0;
	if (out->op == NULL && out->transform.plan != NULL)
		for (int m = 0; m < Min(out->schema->nmeta, SDP_META_HEADERS); m++)
			if (!sdp_transform_reads_column(&out->transform, out->schema->ncolumns + m + 1))
				out->unread_meta |= 1 << m;
	out->table_write.flow_name = decl->name;

	if (for_worker)
	{
		if (out->transform.plan)
			SPI_keepplan(out->transform.plan);
		SPI_keepplan(out->table_write.plan);
	}
	else
	{
		PopActiveSnapshot();
		AtEOXact_GUC(true, guc_level);
	}
}

/*
 * The options a declaration stores: those given, with the mode it resolved
 * and its search_path written out, so that the worker plans as the
 * declaration was checked whatever the defaults become.
 */
Jsonb *
sdp_flow_stored_options(Jsonb *given, const SdpFlowOptions *opts)
{
	Datum		stored = given ? JsonbPGetDatum(given) : DirectFunctionCall1(jsonb_in, CStringGetDatum("{}"));
	StringInfoData resolved;

	initStringInfo(&resolved);
	appendStringInfo(&resolved, "{\"mode\": \"%s\", \"search_path\": ", sdp_write_mode_name(opts->mode));
	escape_json(&resolved, opts->search_path);
	appendStringInfoChar(&resolved, '}');
	return DatumGetJsonbP(DirectFunctionCall2(jsonb_concat, stored,
											  DirectFunctionCall1(jsonb_in, CStringGetDatum(resolved.data))));
}

/*
 * api.c
 *		SQL-callable declaration functions: sources, sinks and flows.
 *
 * Every declaration is checked completely before anything is stored: a
 * flow that could not run is refused by sdp_create_flow with a specific
 * error, and creates nothing.  The checks run as the calling role, who
 * becomes the flow's owner and whose privileges the flow's worker uses.
 * Catalog rows are written inside a catalog scope (catalog.c).  Changes to
 * sdp.flows wake the launcher when the transaction commits; a skip request
 * (sdp_skip_message) wakes the flow's worker.
 */
#include "sdp.h"

#include "access/htup_details.h"
#include "access/relation.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "decl/flow.h"
#include "kafka/kafka_properties.h"
#include "kafka/relay.h"
#include "kafka/outbox.h"
#include "kafka/kafka_source.h"
#include "stateful/registry.h"
#include "exec/table_write.h"
#include "exec/tombstone_delete.h"
#include "sql/api.h"
#include "prepare/flow_prepare.h"
#include "decl/catalog.h"
#include "decl/flow_options.h"
#include "decl/input_schema.h"
#include "shmem/slots.h"
#include "sql/roles.h"

PG_FUNCTION_INFO_V1(sdp_create_source);
PG_FUNCTION_INFO_V1(sdp_drop_source);
PG_FUNCTION_INFO_V1(sdp_alter_source);
PG_FUNCTION_INFO_V1(sdp_create_sink);
PG_FUNCTION_INFO_V1(sdp_drop_sink);
PG_FUNCTION_INFO_V1(sdp_create_flow);
PG_FUNCTION_INFO_V1(sdp_start_flow);
PG_FUNCTION_INFO_V1(sdp_stop_flow);
PG_FUNCTION_INFO_V1(sdp_drop_flow);
PG_FUNCTION_INFO_V1(sdp_skip_message);
PG_FUNCTION_INFO_V1(sdp_set_flow_workers);
PG_FUNCTION_INFO_V1(sdp_skip_outbox_row);



/*
 * A flow's transform runs in the flow's worker, in the flow's batch
 * transaction: a call there that would stop, drop or change the flow
 * itself (fn, doing what) is refused, with an error the message's batch
 * handles as any other (the message is set aside when others go
 * through).
 */
void
sdp_refuse_self_change(const char *flow, const char *what, const char *fn)
{
	if (sdp_worker_flow_name != NULL && strcmp(sdp_worker_flow_name, flow) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("flow \"%s\" cannot %s itself", flow, what),
				 errdetail("%s was called in the flow's own worker, by its transform.", fn),
				 errhint("Call %s from another session.", fn)));
}

/* A name of a source or flow: 1..63 bytes, so that it fits the flow slots. */
static char *
checked_name(FunctionCallInfo fcinfo, int argno, const char *what)
{
	char	   *name;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s name must not be null", what)));
	name = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	if (name[0] == '\0' || strlen(name) >= NAMEDATALEN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("invalid %s name \"%s\"", what, name),
				 errdetail("A %s name has between 1 and %d bytes.", what, NAMEDATALEN - 1)));
	return name;
}

static char *
required_text(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"%s\" must not be null", argname)));
	return text_to_cstring(PG_GETARG_TEXT_PP(argno));
}

/*
 * The current role may act on an object owned by owner (owner_name as the
 * catalog shows it): it is, or is a member of, the owner.
 */
void
sdp_check_owner(Oid owner, const char *owner_name, const char *what, const char *name)
{
	if (superuser())
		return;
	if (!OidIsValid(owner) || !has_privs_of_role(GetUserId(), owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be owner of %s \"%s\"", what, name),
				 errdetail("%c%s \"%s\" belongs to role \"%s\".", pg_toupper((unsigned char) what[0]), what + 1, name, owner_name)));
}

/*
 * The owner of a declared source or flow, as an OID (invalid when a 0.1
 * catalog names a role that is gone) and as the catalog shows it; false
 * when there is none of that name.
 */
static bool
lookup_owner(const char *table, const char *name, Oid *owner, char **owner_name)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(name)};
	char	   *sql = psprintf("SELECT %s, owner::text FROM sdp.%s WHERE name = $1",
							   sdp_owner_oid_sql("owner"), table);
	bool		isnull;

	sdp_catalog_execute(sql, 1, argtypes, values, NULL, true);
	if (SPI_processed == 0)
		return false;
	*owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (isnull)
		*owner = InvalidOid;
	*owner_name = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	return true;
}

/*
 * The flow's owner (the current role) runs the source's or sink's clients
 * (what: "source" or "sink", in its catalog table): it must be allowed
 * their brokers and properties (kafka_properties.c), whoever declared
 * them.  SPI is connected.
 */
static void
check_endpoint_for_owner(const char *what, const char *table, const char *name)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(name)};
	bool		isnull;
	Datum		options;
	List	   *properties;

	sdp_catalog_execute(psprintf("SELECT bootstrap_servers, options FROM sdp.%s WHERE name = $1", table),
					1, argtypes, values, NULL, true);
	if (SPI_processed == 0)
		return;					/* the caller says it does not exist */
	options = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
	if (strcmp(what, "source") == 0)
	{
		SdpSourceDef def;

		memset(&def, 0, sizeof(def));
		sdp_parse_source_options(isnull ? NULL : DatumGetJsonbP(options), &def);
		properties = def.properties;
	}
	else
	{
		SdpSinkDef	def;

		memset(&def, 0, sizeof(def));
		sdp_parse_sink_options(isnull ? NULL : DatumGetJsonbP(options), &def);
		properties = def.properties;
	}
	kafka_properties_check_role(GetUserId(), psprintf("%s \"%s\"", what, name),
								SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1), properties);
}

/*
 * Lock the current role, as PostgreSQL does for an object it will own: a
 * concurrent DROP ROLE then waits for the declaration, and sees it.  A
 * role other than a superuser may own at most sdp.max_objects_per_role
 * sources, sinks and flows together: a declaration past it (what: the
 * kind of object) is refused.  Two declarations of one role count one
 * after the other: they take a lock of their own on the role (a subid
 * nothing else locks, so DROP ROLE is not held up by it).  SPI is
 * connected.
 */
static void
lock_current_role(const char *what)
{
	Oid			role = GetUserId();
	Oid			argtypes[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(role)};
	bool		isnull;
	int64		owned;
	bool		has_sinks;

	shdepLockAndCheckObject(AuthIdRelationId, role);
	if (sdp_max_objects_per_role == 0 || superuser_arg(role))
		return;
	LockSharedObject(AuthIdRelationId, role, 1, ExclusiveLock);
	/* sinks: from 0.4 (the library may run over an older catalog until ALTER EXTENSION UPDATE) */
	has_sinks = OidIsValid(get_relname_relid("sinks", get_namespace_oid(SDP_SCHEMA, false)));
	/*
	 * Counted in a snapshot taken now, after the lock: the statement's was
	 * taken before it, and would miss what a declaration of the role that
	 * held the lock committed (in any isolation level).
	 */
	PushActiveSnapshot(GetLatestSnapshot());
	sdp_catalog_execute(psprintf("SELECT (SELECT count(*) FROM sdp.sources WHERE %s = $1)"
								 "     + (SELECT count(*) FROM sdp.flows WHERE %s = $1)%s",
								 sdp_owner_oid_sql("owner"), sdp_owner_oid_sql("owner"),
								 has_sinks ? " + (SELECT count(*) FROM sdp.sinks WHERE owner::pg_catalog.oid = $1)" : ""),
						1, argtypes, values, NULL, true);
	PopActiveSnapshot();
	owned = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (owned >= sdp_max_objects_per_role)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("role \"%s\" owns %lld sources, sinks and flows, and may own at most %d: no new %s",
						GetUserNameFromId(role, false), (long long) owned, sdp_max_objects_per_role, what),
				 errhint("Drop one the role no longer needs, or have a superuser raise sdp.max_objects_per_role.")));
}

/* Kafka's own rule for topic names. */
static void
check_topic_name(const char *topic)
{
	size_t		len = strlen(topic);

	if (len == 0 || len > 249 || strcmp(topic, ".") == 0 || strcmp(topic, "..") == 0 ||
		strspn(topic, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != len)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid Kafka topic name \"%s\"", topic),
				 errdetail("Topic names have 1 to 249 characters among ASCII letters, digits, '.', '_' and '-'.")));
}

/*
 * The arguments every source and sink is declared with (what: "source" or
 * "sink"): its name, the brokers and the topic, checked.
 */
static void
kafka_endpoint_arguments(FunctionCallInfo fcinfo, const char *what, char **name, char **servers, char **topic)
{
	sdp_require_shmem();
	sdp_require_flow_database();
	*name = checked_name(fcinfo, 0, what);
	*servers = required_text(fcinfo, 1, "bootstrap_servers");
	*topic = required_text(fcinfo, 2, "topic");
	if ((*servers)[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("bootstrap_servers must not be empty"),
				 errhint("Give the brokers as host:port[,host:port...].")));
	check_topic_name(*topic);
}

/*
 * Connected to SPI, a new source or sink (what, in its catalog table): its
 * name refused if taken, the declaring role locked, and the first four
 * values of its catalog row (name, bootstrap_servers, topic, options).
 */
static void
kafka_endpoint_row(const char *what, const char *table, char *name, char *servers, char *topic,
				   Jsonb *options, Datum *values)
{
	Oid			owner;
	char	   *owner_name;

	if (lookup_owner(table, name, &owner, &owner_name))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("%s \"%s\" already exists", what, name)));
	lock_current_role(what);
	values[0] = CStringGetTextDatum(name);
	values[1] = CStringGetTextDatum(servers);
	values[2] = CStringGetTextDatum(topic);
	values[3] = options ? JsonbPGetDatum(options) : DirectFunctionCall1(jsonb_in, CStringGetDatum("{}"));
}

/*
 * A source's options as stored: a starting_offsets timestamp in UTC (the
 * workers need not share the declaring session's TimeZone).  SPI is
 * connected.
 */
static Datum
source_options_to_store(Datum options, const SdpSourceDef *def)
{
	Oid			settypes[2] = {JSONBOID, TIMESTAMPTZOID};
	Datum		setvalues[2];
	bool		isnull;

	if (!def->start_at_time_set)
		return options;
	setvalues[0] = options;
	setvalues[1] = TimestampTzGetDatum(def->start_at_time);
	if (SPI_execute_with_args("SELECT pg_catalog.jsonb_set($1, '{starting_offsets}', "
							  "  pg_catalog.to_jsonb(pg_catalog.to_char($2 AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')))",
							  2, settypes, setvalues, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not store starting_offsets");
	return SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
}

/*
 * sdp_create_source(name, bootstrap_servers, topic, options jsonb)
 */
Datum
sdp_create_source(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *servers;
	char	   *topic;
	Jsonb	   *options = PG_ARGISNULL(3) ? NULL : PG_GETARG_JSONB_P(3);
	SdpSourceDef def;
	Oid			argtypes[5] = {TEXTOID, TEXTOID, TEXTOID, JSONBOID, OIDOID};
	Datum		values[5];

	kafka_endpoint_arguments(fcinfo, "source", &name, &servers, &topic);
	memset(&def, 0, sizeof(def));
	sdp_parse_source_options(options, &def);
	/* names and values first (the check loads nothing), then what the role may set */
	kafka_validate_properties(def.properties);
	kafka_properties_check_role(GetUserId(), psprintf("source \"%s\"", name), servers, def.properties);

	SPI_connect();
	kafka_endpoint_row("source", "sources", name, servers, topic, options, values);
	values[3] = source_options_to_store(values[3], &def);
	values[4] = ObjectIdGetDatum(GetUserId());
	sdp_catalog_execute(psprintf("INSERT INTO sdp.sources (name, bootstrap_servers, topic, options, owner) "
							 "VALUES ($1, $2, $3, $4, %s)", sdp_owner_value_sql("$5")),
					5, argtypes, values, NULL, false);
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * Drop a source or a sink (what: "source" or "sink", its catalog table, the
 * sdp.flows column that names it, and how flows use it), refused while a
 * flow uses it.
 */
static void
drop_kafka_endpoint(FunctionCallInfo fcinfo, const char *what, const char *table,
					const char *column, const char *use)
{
	char	   *name = checked_name(fcinfo, 0, what);
	Oid			owner;
	char	   *owner_name;
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(name)};
	char	   *users;

	sdp_require_shmem();
	SPI_connect();
	if (!lookup_owner(table, name, &owner, &owner_name))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("%s \"%s\" does not exist", what, name)));
	sdp_check_owner(owner, owner_name, what, name);
	sdp_catalog_execute(psprintf("SELECT string_agg(name, ', ' ORDER BY name) FROM sdp.flows WHERE %s = $1", column),
					1, argtypes, values, NULL, true);
	users = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	if (users != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
				 errmsg("cannot drop %s \"%s\" because flows %s it", what, name, use),
				 errdetail("Flows that %s it: %s.", use, users),
				 errhint("Drop those flows first with sdp_drop_flow().")));
	sdp_catalog_execute(psprintf("DELETE FROM sdp.%s WHERE name = $1", table), 1, argtypes, values, NULL, false);
	SPI_finish();
}

/* sdp_drop_source(name): refused while a flow reads from it. */
Datum
sdp_drop_source(PG_FUNCTION_ARGS)
{
	drop_kafka_endpoint(fcinfo, "source", "sources", "source", "read from");
	PG_RETURN_VOID();
}

/*
 * sdp_alter_source(name, bootstrap_servers, options): a source's brokers
 * and client properties changed without dropping its flows.  NULL keeps
 * what is there; options are merged into the stored ones (a key set to
 * JSON null removes it).  The result is checked as sdp_create_source checks
 * a new source, for the caller (its owner) and for the owner of every flow
 * that reads it (they run its clients).  Once this commits, the launcher
 * sees the declaration of those flows changed (launcher.c hashes the
 * source's row with the flow's) and restarts their workers at a batch
 * boundary: their offsets stay.
 */
Datum
sdp_alter_source(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *servers;
	Jsonb	   *given = PG_ARGISNULL(2) ? NULL : PG_GETARG_JSONB_P(2);
	Jsonb	   *merged;
	SdpSourceDef def;
	Oid			owner;
	char	   *owner_name;
	Oid			argtypes[3] = {TEXTOID, TEXTOID, JSONBOID};
	Datum		values[3];
	bool		isnull;
	uint64		nflows;
	Oid		   *flow_owners;
	char	  **flow_names;

	sdp_require_shmem();
	sdp_require_flow_database();
	name = checked_name(fcinfo, 0, "source");
	if (PG_ARGISNULL(1) && PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("sdp_alter_source changes nothing"),
				 errhint("Give new brokers or options: sdp_alter_source('%s', options => ...).", name)));
	if (!PG_ARGISNULL(1) && VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(1)) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("bootstrap_servers must not be empty"),
				 errhint("Give the brokers as host:port[,host:port...], or NULL to keep them.")));
	if (given != NULL && !JB_ROOT_IS_OBJECT(given))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("options of source \"%s\" must be a JSON object", name),
				 errhint("Give the properties to change, e.g. '{\"fetch.wait.max.ms\": \"5\"}'; a key set to null removes it.")));

	/* the row locked first, then its owner checked: a drop or a new owner meanwhile is seen */
	SPI_connect();
	values[0] = CStringGetTextDatum(name);
	values[1] = (Datum) 0;
	values[2] = given ? JsonbPGetDatum(given) : DirectFunctionCall1(jsonb_in, CStringGetDatum("{}"));
	sdp_catalog_execute(psprintf("SELECT %s, s.owner::text, s.bootstrap_servers, "
								 "       (SELECT coalesce(pg_catalog.jsonb_object_agg(e.key, e.value) "
								 "                          FILTER (WHERE pg_catalog.jsonb_typeof(e.value) <> 'null'), '{}') "
								 "          FROM pg_catalog.jsonb_each(coalesce(s.options, '{}') || $3) e) "
								 "  FROM sdp.sources s WHERE s.name = $1 FOR UPDATE",
								 sdp_owner_oid_sql("s.owner")),
						3, argtypes, values, " n ", false);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("source \"%s\" does not exist", name)));
	owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (isnull)
		owner = InvalidOid;
	owner_name = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	sdp_check_owner(owner, owner_name, "source", name);
	/* the options merged, JSON nulls removed */
	servers = PG_ARGISNULL(1) ? SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3)
		: text_to_cstring(PG_GETARG_TEXT_PP(1));
	merged = DatumGetJsonbPCopy(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &isnull));

	memset(&def, 0, sizeof(def));
	sdp_parse_source_options(merged, &def);
	kafka_validate_properties(def.properties);
	kafka_properties_check_role(GetUserId(), psprintf("source \"%s\"", name), servers, def.properties);

	/* every flow reading it runs its clients as the flow's owner */
	sdp_catalog_execute(psprintf("SELECT %s, name FROM sdp.flows WHERE source = $1 ORDER BY name",
								 sdp_owner_oid_sql("owner")),
						1, argtypes, values, NULL, true);
	nflows = SPI_processed;
	flow_owners = palloc(sizeof(Oid) * Max(nflows, 1));
	flow_names = palloc(sizeof(char *) * Max(nflows, 1));
	for (uint64 i = 0; i < nflows; i++)
	{
		flow_owners[i] = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
		if (isnull)
			flow_owners[i] = InvalidOid;
		flow_names[i] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);
	}
	for (uint64 i = 0; i < nflows; i++)
		sdp_refuse_self_change(flow_names[i], "alter the source of", "sdp_alter_source");
	for (uint64 i = 0; i < nflows; i++)
		if (OidIsValid(flow_owners[i]) && flow_owners[i] != GetUserId())
			kafka_properties_check_role(flow_owners[i], psprintf("flow \"%s\" (source \"%s\")", flow_names[i], name),
										servers, def.properties);

	values[1] = CStringGetTextDatum(servers);
	values[2] = source_options_to_store(JsonbPGetDatum(merged), &def);
	sdp_catalog_execute("UPDATE sdp.sources SET bootstrap_servers = $2, options = $3 WHERE name = $1",
						3, argtypes, values, NULL, false);
	SPI_finish();

	sdp_wake_launcher_at_commit();
	PG_RETURN_VOID();
}

/*
 * sdp_create_sink(name, bootstrap_servers, topic, options jsonb): a Kafka
 * topic that sink flows produce to, with librdkafka producer properties.
 */
Datum
sdp_create_sink(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *servers;
	char	   *topic;
	Jsonb	   *options = PG_ARGISNULL(3) ? NULL : PG_GETARG_JSONB_P(3);
	SdpSinkDef	def;
	Oid			argtypes[5] = {TEXTOID, TEXTOID, TEXTOID, JSONBOID, OIDOID};
	Datum		values[5];

	kafka_endpoint_arguments(fcinfo, "sink", &name, &servers, &topic);
	memset(&def, 0, sizeof(def));
	sdp_parse_sink_options(options, &def);
	kafka_relay_validate_properties(def.properties);
	if (def.registry_url != NULL && !sdp_outbox_has_row_avro())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("an Avro sink needs version 0.9 of sdp_ext"),
				 errhint("Run ALTER EXTENSION sdp_ext UPDATE.")));
	kafka_properties_check_role(GetUserId(), psprintf("sink \"%s\"", name), servers, def.properties);

	SPI_connect();
	kafka_endpoint_row("sink", "sinks", name, servers, topic, options, values);
	values[4] = ObjectIdGetDatum(GetUserId());
	sdp_catalog_execute(psprintf("INSERT INTO sdp.sinks (name, bootstrap_servers, topic, options, owner) "
							 "VALUES ($1, $2, $3, $4, %s)", sdp_owner_value_sql("$5")),
					5, argtypes, values, NULL, false);
	SPI_finish();
	PG_RETURN_VOID();
}

/* sdp_drop_sink(name): refused while a flow writes to it. */
Datum
sdp_drop_sink(PG_FUNCTION_ARGS)
{
	drop_kafka_endpoint(fcinfo, "sink", "sinks", "sink", "write to");
	PG_RETURN_VOID();
}

/*
 * sdp_create_flow(name, source, target regclass, schema, transform, operator,
 *				   options, sink): exactly one of target and sink.
 */
Datum
sdp_create_flow(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *source;
	Oid			target;
	char	   *schema_text;
	char	   *transform_sql = PG_ARGISNULL(4) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(4));
	char	   *operator_name = PG_ARGISNULL(5) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(5));
	Jsonb	   *options = PG_ARGISNULL(6) ? NULL : PG_GETARG_JSONB_P(6);
	/* sink: from 0.4 (a 0.3 catalog's function has 7 arguments) */
	char	   *sink_name = (PG_NARGS() > 7 && !PG_ARGISNULL(7)) ? text_to_cstring(PG_GETARG_TEXT_PP(7)) : NULL;
	Oid			owner;
	char	   *owner_name;
	char	   *role_name = GetUserNameFromId(GetUserId(), false);
	SdpFlowOptions opts;
	SdpSinkDef	sink;
	SdpFlowDecl decl;
	SdpFlowPrepared prepared;
	HeapTuple	roletup;
	Oid			argtypes[9] = {TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, JSONBOID, OIDOID, TEXTOID};
	Datum		values[9];
	char		nulls[9];

	sdp_require_shmem();
	sdp_require_flow_database();
	name = checked_name(fcinfo, 0, "flow");
	source = required_text(fcinfo, 1, "source");
	if (PG_ARGISNULL(2) && sink_name == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("a flow needs a target table or a sink"),
				 errhint("Give target => a table, or sink => a sink declared with sdp_create_sink().")));
	if (!PG_ARGISNULL(2) && sink_name != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a flow has a target table or a sink, not both"),
				 errhint("Declare two flows to write both.")));
	target = PG_ARGISNULL(2) ? InvalidOid : PG_GETARG_OID(2);
	schema_text = required_text(fcinfo, 3, "schema");
	if (transform_sql && transform_sql[0] == '\0')
		transform_sql = NULL;

	/* The worker will log in as this role. */
	roletup = SearchSysCache1(AUTHOID, ObjectIdGetDatum(GetUserId()));
	if (!HeapTupleIsValid(roletup))
		elog(ERROR, "cache lookup failed for role %u", GetUserId());
	if (!((Form_pg_authid) GETSTRUCT(roletup))->rolcanlogin)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("role \"%s\" cannot own a flow because it cannot log in", role_name),
				 errdetail("A flow's worker connects as the flow's owner."),
				 errhint("Declare the flow as a role with LOGIN, or ALTER ROLE %s LOGIN.", quote_identifier(role_name))));
	ReleaseSysCache(roletup);

	SPI_connect();

	if (!lookup_owner("sources", source, &owner, &owner_name))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("source \"%s\" does not exist", source),
				 errhint("Declare it first with sdp_create_source(name, bootstrap_servers, topic).")));
	sdp_check_owner(owner, owner_name, "source", source);
	check_endpoint_for_owner("source", "sources", source);
	if (sink_name)
	{
		if (!lookup_owner("sinks", sink_name, &owner, &owner_name))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("sink \"%s\" does not exist", sink_name),
					 errhint("Declare it first with sdp_create_sink(name, bootstrap_servers, topic).")));
		sdp_check_owner(owner, owner_name, "sink", sink_name);
		check_endpoint_for_owner("sink", "sinks", sink_name);
	}
	if (lookup_owner("flows", name, &owner, &owner_name))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("flow \"%s\" already exists", name),
				 errhint("Drop it with sdp_drop_flow('%s') first, or choose another name.", name)));

	sdp_parse_flow_options(options, &opts);
	sdp_check_workers_quota(opts.workers);

	/*
	 * The transform's search_path: the one given, or the session's now, as
	 * SET search_path FROM CURRENT records it for a function.  The worker
	 * plans with it; so does the declaration.
	 */
	if (opts.search_path == NULL)
		opts.search_path = pstrdup(GetConfigOption("search_path", false, false));

	/* Check and prepare what the worker will run, as the owner: this is where a bad declaration is refused. */
	memset(&sink, 0, sizeof(sink));
	sink.name = sink_name;
	if (sink_name)
		sdp_catalog_sink_options(&sink);
	decl.name = name;
	decl.flow_id = 0;
	decl.worker_no = 0;
	decl.target = target;
	decl.sink = &sink;
	decl.schema_text = schema_text;
	decl.transform_sql = transform_sql;
	decl.operator_name = operator_name;
	decl.opts = &opts;
	sdp_flow_prepare(&decl, &prepared, false);

	/* Store it, with the resolved mode and the search_path written out. */
	memset(nulls, ' ', sizeof(nulls));
	values[0] = CStringGetTextDatum(name);
	values[1] = CStringGetTextDatum(source);
	values[2] = prepared.target_name ? CStringGetTextDatum(prepared.target_name) : (Datum) 0;
	nulls[2] = prepared.target_name ? ' ' : 'n';
	values[3] = CStringGetTextDatum(schema_text);
	values[4] = transform_sql ? CStringGetTextDatum(transform_sql) : (Datum) 0;
	nulls[4] = transform_sql ? ' ' : 'n';
	values[5] = operator_name ? CStringGetTextDatum(operator_name) : (Datum) 0;
	nulls[5] = operator_name ? ' ' : 'n';
	values[6] = JsonbPGetDatum(sdp_flow_stored_options(options, &opts));
	values[7] = ObjectIdGetDatum(GetUserId());
	values[8] = sink_name ? CStringGetTextDatum(sink_name) : (Datum) 0;
	lock_current_role("flow");
	if (sink_name)
		sdp_catalog_execute(psprintf("INSERT INTO sdp.flows (name, source, target, schema, transform, operator, options, owner, sink) "
								 "VALUES ($1, $2, $3, $4, $5, $6, $7, %s, $9)", sdp_owner_value_sql("$8")),
						9, argtypes, values, nulls, false);
	else
		sdp_catalog_execute(psprintf("INSERT INTO sdp.flows (name, source, target, schema, transform, operator, options, owner) "
								 "VALUES ($1, $2, $3, $4, $5, $6, $7, %s)", sdp_owner_value_sql("$8")),
						8, argtypes, values, nulls, false);
	SPI_finish();

	sdp_wake_launcher_at_commit();
	PG_RETURN_VOID();
}

/* Set a flow's wanted state (start / stop) by sql, or drop it (sql NULL); fn says which, for a refusal. */
static void
change_flow(FunctionCallInfo fcinfo, const char *sql, const char *what, const char *fn)
{
	char	   *name = checked_name(fcinfo, 0, "flow");
	Oid			owner;
	char	   *owner_name;
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(name)};

	sdp_require_shmem();
	sdp_refuse_self_change(name, what, fn);
	SPI_connect();
	if (!lookup_owner("flows", name, &owner, &owner_name))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("flow \"%s\" does not exist", name)));
	sdp_check_owner(owner, owner_name, "flow", name);
	if (sql != NULL)
		sdp_catalog_execute(sql, 1, argtypes, values, NULL, false);
	else
		sdp_delete_flows("name = $1", TEXTOID, values[0]);
	SPI_finish();
	sdp_wake_launcher_at_commit();
}


/* sdp_start_flow(name): run it again, clearing a failure. */
Datum
sdp_start_flow(PG_FUNCTION_ARGS)
{
	change_flow(fcinfo, "UPDATE sdp.flows SET enabled = true, failed_at = NULL, last_error = NULL WHERE name = $1",
				"start", "sdp_start_flow");
	PG_RETURN_VOID();
}

/* sdp_stop_flow(name): its worker stops; it stays stopped, across restarts, until started. */
Datum
sdp_stop_flow(PG_FUNCTION_ARGS)
{
	change_flow(fcinfo, "UPDATE sdp.flows SET enabled = false WHERE name = $1", "stop", "sdp_stop_flow");
	PG_RETURN_VOID();
}

/* sdp_drop_flow(name): stop it and forget it, with its offsets. Its dead letters stay. */
Datum
sdp_drop_flow(PG_FUNCTION_ARGS)
{
	change_flow(fcinfo, NULL, "drop", "sdp_drop_flow");
	PG_RETURN_VOID();
}

/*
 * The next offset of a partition the flow has processed: what it stored in
 * sdp.offsets, or, while it runs, how far its worker has committed (a
 * stateful flow stores offsets only at its checkpoints).  -1 when neither
 * knows the partition.
 */
static int64
processed_up_to(const char *name, int64 flow_id, int32 partition)
{
	Oid			argtypes[2] = {INT8OID, INT4OID};
	Datum		values[2] = {Int64GetDatum(flow_id), Int32GetDatum(partition)};
	int64		next = -1;
	int			s;

	sdp_catalog_execute("SELECT next_offset FROM sdp.offsets WHERE flow_id = $1 AND partition = $2",
					2, argtypes, values, NULL, true);
	if (SPI_processed > 0)
	{
		bool		isnull;

		next = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	}

	LWLockAcquire(SdpShmem->lock, LW_SHARED);
	for (s = sdp_slot_next(name, -1); s >= 0; s = sdp_slot_next(name, s))
	{
		SdpFlowSlot *slot = &SdpShmem->slots[s];
		bool		live;

		SpinLockAcquire(&slot->mutex);
		live = slot->ctl.flow_id == flow_id && slot->ctl.pid != 0;
		SpinLockRelease(&slot->mutex);
		if (live)
		{
			SdpSlotStats *stats = palloc(sizeof(SdpSlotStats));

			/* its partitions: the count and the array, as one consistent copy */
			sdp_slot_read_stats(slot, offsetof(SdpSlotStats, npartitions),
								sizeof(SdpSlotStats) - offsetof(SdpSlotStats, npartitions),
								&stats->npartitions);
			for (int i = 0; i < stats->npartitions; i++)
				if (stats->partitions[i].partition == partition)
					next = Max(next, stats->partitions[i].committed);
			pfree(stats);
		}
	}
	LWLockRelease(SdpShmem->lock);
	return next;
}

/*
 * sdp_skip_message(flow, kafka_partition, kafka_offset): the flow sets that
 * message aside instead of processing it, as a dead letter with stage
 * 'skipped', in the batch the message comes in: now, if the flow is
 * retrying a batch that holds it, or when it arrives.  The way past a
 * message the flow keeps failing on for a reason it does not pin on the
 * message.  Refused for a message the flow has already processed.
 */
Datum
sdp_skip_message(PG_FUNCTION_ARGS)
{
	char	   *name = checked_name(fcinfo, 0, "flow");
	int32		partition = PG_GETARG_INT32(1);
	int64		offset = PG_GETARG_INT64(2);
	Oid			owner;
	char	   *owner_name;
	int64		flow_id;
	int64		next;
	bool		isnull;
	Oid			argtypes[4] = {INT8OID, INT4OID, INT8OID, TEXTOID};
	Datum		values[4];

	sdp_require_shmem();
	if (partition < 0 || offset < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid message position: partition %d, offset %lld", partition, (long long) offset),
				 errdetail("Kafka partitions and offsets are not negative.")));

	SPI_connect();
	if (!lookup_owner("flows", name, &owner, &owner_name))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("flow \"%s\" does not exist", name)));
	sdp_check_owner(owner, owner_name, "flow", name);
	values[0] = CStringGetTextDatum(name);
	argtypes[0] = TEXTOID;
	sdp_catalog_execute("SELECT id, options FROM sdp.flows WHERE name = $1", 1, argtypes, values, NULL, true);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("flow \"%s\" does not exist", name)));
	flow_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	argtypes[0] = INT8OID;

	/* a flow over a share of the partitions never reads the others: another server does */
	{
		Datum		options = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
		SdpFlowOptions opts;

		if (!isnull)
		{
			sdp_parse_flow_options(DatumGetJsonbP(options), &opts);
			if (!sdp_worker_owns_partition(&opts, partition, 0, 1))
			{
				StringInfoData share;

				initStringInfo(&share);
				for (int i = 0; i < opts.nshare; i++)
					appendStringInfo(&share, "%s%d", i > 0 ? ", " : "", opts.share[i]);
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("partition %d is not in the share of flow \"%s\" on this server", partition, name),
						 errdetail("Its option \"partitions\" is [%s].", share.data),
						 errhint("Skip the message on the server whose flow consumes partition %d.", partition)));
			}
		}
	}

	next = processed_up_to(name, flow_id, partition);
	if (offset < next)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("flow \"%s\" has already processed partition %d offset %lld", name, partition, (long long) offset),
				 errdetail("The flow has committed partition %d up to offset %lld.", partition, (long long) next),
				 errhint("Only a message at offset %lld or later of that partition can be skipped.", (long long) next)));

	/* asking again for the same message is not an error */
	values[0] = Int64GetDatum(flow_id);
	values[1] = Int32GetDatum(partition);
	values[2] = Int64GetDatum(offset);
	values[3] = CStringGetTextDatum(GetUserNameFromId(GetUserId(), false));
	sdp_catalog_execute("INSERT INTO sdp.skipped_messages (flow_id, kafka_partition, kafka_offset, requested_by) "
					"VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING", 4, argtypes, values, NULL, false);
	SPI_finish();

	sdp_flow_skips_changed(name);
	PG_RETURN_VOID();
}

/*
 * sdp_skip_outbox_row(flow, seq): a sink flow's relay sets that row of its
 * outbox aside instead of producing it, as a dead letter with stage
 * 'skipped': the way past a row the sink keeps refusing (the flow's status
 * names it).  The relay takes the request when it next reads its rows:
 * a row already produced (in the Kafka transaction open now, say) stays
 * produced and is not dead-lettered, so a row is in the topic or in the
 * dead letters, never both.  Refused for a row the outbox does not hold.
 */
Datum
sdp_skip_outbox_row(PG_FUNCTION_ARGS)
{
	char	   *name = checked_name(fcinfo, 0, "flow");
	int64		seq = PG_GETARG_INT64(1);
	Oid			owner;
	char	   *owner_name;
	Oid			argtypes[3] = {TEXTOID, INT8OID, TEXTOID};
	Datum		values[3];

	sdp_require_shmem();
	sdp_refuse_self_change(name, "skip an outbox row of", "sdp_skip_outbox_row");
	SPI_connect();
	if (!lookup_owner("flows", name, &owner, &owner_name))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("flow \"%s\" does not exist", name)));
	sdp_check_owner(owner, owner_name, "flow", name);
	if (!sdp_outbox_has_skips())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("sdp_skip_outbox_row needs version 0.7 of sdp_ext"),
				 errhint("Run ALTER EXTENSION sdp_ext UPDATE.")));
	values[0] = CStringGetTextDatum(name);
	values[1] = Int64GetDatum(seq);
	values[2] = CStringGetTextDatum(GetUserNameFromId(GetUserId(), false));
	sdp_catalog_execute("UPDATE sdp.outbox o SET skipped_by = $3 FROM sdp.flows f "
					" WHERE f.name = $1 AND o.flow_id = f.id AND o.seq = $2",
					3, argtypes, values, NULL, false);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("flow \"%s\" has no outbox row %lld", name, (long long) seq),
				 errdetail("A row is in the outbox until the flow's relay has produced it to the sink."),
				 errhint("sdp.sink_relays shows the first and last seq of the rows a flow's relays have still to produce.")));
	SPI_finish();
	sdp_flow_skips_changed(name);
	PG_RETURN_VOID();
}

/*
 * sdp_set_flow_workers(flow, workers): run the flow in that many workers
 * from now on.  Once the change commits, the launcher stops every worker of
 * the flow and, once they have all gone, starts the new ones, each from the
 * offsets its partitions committed: nothing is read twice or skipped.  A
 * stopped flow keeps the number for when it starts.
 */
Datum
sdp_set_flow_workers(PG_FUNCTION_ARGS)
{
	char	   *name = checked_name(fcinfo, 0, "flow");
	int32		workers;
	Oid			owner;
	char	   *owner_name;
	Oid			argtypes[2] = {TEXTOID, INT4OID};
	Datum		values[2];
	char	   *opname;
	const SdpOperator *op = NULL;

	sdp_require_shmem();
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"workers\" must not be null")));
	workers = PG_GETARG_INT32(1);
	if (workers < 1 || workers > SDP_MAX_WORKERS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"workers\" must be an integer between 1 and %d, not \"%d\"",
						SDP_MAX_WORKERS, workers)));
	sdp_refuse_self_change(name, "change the workers of", "sdp_set_flow_workers");

	SPI_connect();
	if (!lookup_owner("flows", name, &owner, &owner_name))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("flow \"%s\" does not exist", name)));
	sdp_check_owner(owner, owner_name, "flow", name);
	values[0] = CStringGetTextDatum(name);
	values[1] = Int32GetDatum(workers);
	/* sink: through to_jsonb, which reads a 0.3 catalog (no such column) too */
	sdp_catalog_execute("SELECT operator, schema, transform, options, "
					"       pg_catalog.to_jsonb(f) OPERATOR(pg_catalog.->>) 'sink' "
					"  FROM sdp.flows f WHERE name = $1 FOR UPDATE",
					1, argtypes, values, NULL, false);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("flow \"%s\" does not exist", name)));
	if (workers > 1 && SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 5) != NULL &&
		!sdp_outbox_has_worker())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("a flow with a sink runs in one worker before version 0.5 of sdp_ext"),
				 errhint("Run ALTER EXTENSION sdp_ext UPDATE.")));
	opname = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	if (opname != NULL)
		op = sdp_find_operator(opname);
	/* with a share of the partitions (option partitions), each worker needs one of them */
	{
		bool		isnull;
		Datum		stored = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &isnull);
		SdpFlowOptions current;

		if (!isnull)
		{
			sdp_parse_flow_options(DatumGetJsonbP(stored), &current);
			sdp_check_share_workers(workers, current.nshare);
		}
	}
	if (op != NULL && workers > 1)
	{
		char	   *schema_text = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
		char	   *transform_sql = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3);
		bool		isnull;
		Jsonb	   *options = DatumGetJsonbPCopy(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &isnull));
		SdpTransform transform;

		SdpFlowOptions stored_opts;
		int			guc_level;

		/* the transform as its worker prepares it, to see its key column */
		sdp_parse_flow_options(isnull ? NULL : options, &stored_opts);
		guc_level = sdp_enter_search_path(stored_opts.search_path);
		PushActiveSnapshot(GetTransactionSnapshot());
		sdp_transform_prepare(&transform, sdp_parse_input_schema(schema_text), transform_sql);
		PopActiveSnapshot();
		AtEOXact_GUC(true, guc_level);
		sdp_flow_check_constant_key(&transform, isnull ? NULL : options, name, workers);

		/*
		 * Keys checkpointed before 0.3 have no partition: only one worker
		 * can hold them (they take the partition of their next row).
		 */
		if (get_attnum(get_relname_relid("state_checkpoints", get_namespace_oid("sdp", false)),
					   "partition") != InvalidAttrNumber)
		{
			sdp_catalog_execute("SELECT count(*) FROM sdp.state_checkpoints c JOIN sdp.flows f ON f.id = c.flow_id "
							" WHERE f.name = $1 AND c.partition IS NULL",
							1, argtypes, values, NULL, true);
			if (DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) > 0)
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("flow \"%s\" cannot run in %d workers yet: its state has keys checkpointed before 0.3, without their partition",
								name, workers),
						 errdetail("Keys without a partition: %s. Each worker restores the keys of its own partitions; a key takes the partition of its next row.",
								   SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1)),
						 errhint("Run it in one worker until no key of sdp.state_checkpoints has partition NULL, then change its workers.")));
		}
	}
	sdp_flow_check_workers(workers, op, name);
	sdp_catalog_execute("UPDATE sdp.flows SET options = options || jsonb_build_object('workers', $2) WHERE name = $1",
					2, argtypes, values, NULL, false);
	SPI_finish();
	sdp_wake_launcher_at_commit();
	PG_RETURN_VOID();
}

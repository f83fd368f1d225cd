/*
 * catalog.c
 *		Access to the sdp.* catalogs on the extension's behalf.
 *
 * The catalogs are owned by the superuser who created the extension, and
 * sdp.sources holds credentials no other role may read.  The SQL functions
 * and the flow workers run as the calling role / the flow's owner, and step
 * into a catalog scope only around the statements that read or write the
 * catalogs.  Inside a scope the user is the bootstrap superuser and the
 * search_path is pinned to pg_catalog, so that no object of the caller's can
 * be picked up by those statements.  User-supplied SQL (transforms, target
 * writes) never runs inside a scope.
 */
#include "decl/catalog.h"
#include "decl/flow_options.h"

#include "catalog/namespace.h"
#include "executor/spi.h"
#include "utils/lsyscache.h"
#include "catalog/pg_type.h"
#include "storage/lmgr.h"
#include "shmem/slots.h"

#include "catalog/pg_authid.h"
#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"

const char *sdp_worker_flow_name = NULL;

void
sdp_catalog_enter(SdpCatalogScope *scope)
{
	GetUserIdAndSecContext(&scope->save_userid, &scope->save_sec_context);
	SetUserIdAndSecContext(BOOTSTRAP_SUPERUSERID,
						   scope->save_sec_context | SECURITY_LOCAL_USERID_CHANGE);
	scope->save_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
}

void
sdp_catalog_leave(SdpCatalogScope *scope)
{
	AtEOXact_GUC(true, scope->save_nestlevel);
	SetUserIdAndSecContext(scope->save_userid, scope->save_sec_context);
}

/* Flows are declared and run in one database, sdp.database. */
void
sdp_require_flow_database(void)
{
	char	   *dbname = get_database_name(MyDatabaseId);

	if (dbname == NULL || strcmp(dbname, sdp_database) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("sdp_ext flows run in database \"%s\", not in \"%s\"",
						sdp_database, dbname ? dbname : "?"),
				 errhint("Connect to database \"%s\", or set sdp.database and restart the server.",
						 sdp_database)));
}

/* Run a catalog statement with text/other parameters inside a catalog scope. */
int
sdp_catalog_execute(const char *sql, int nargs, Oid *argtypes, Datum *values, const char *nulls,
					bool read_only)
{
	SdpCatalogScope scope;
	int			rc;

	sdp_catalog_enter(&scope);
	rc = SPI_execute_with_args(sql, nargs, argtypes, values, nulls, read_only, 0);
	sdp_catalog_leave(&scope);
	if (rc < 0)
		elog(ERROR, "catalog statement failed: %s", SPI_result_code_string(rc));
	return rc;
}

/*
 * The options of sink sink->name (its format and registry), read from
 * sdp.sinks into *sink: what a declaration checks a sink flow against.
 * SPI is connected.  Nothing is read for a sink that is not there (the
 * caller has said so).
 */
void
sdp_catalog_sink_options(SdpSinkDef *sink)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1];
	bool		isnull;
	Datum		options;

	values[0] = CStringGetTextDatum(sink->name);
	sdp_catalog_execute("SELECT options FROM sdp.sinks WHERE name = $1", 1, argtypes, values, NULL, true);
	if (SPI_processed != 1)
		return;
	options = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	sdp_parse_sink_options(isnull ? NULL : DatumGetJsonbPCopy(options), sink);
}

/*
 * Delete the flows that match condition (SQL on sdp.flows with one
 * parameter, $1 = arg), with their offsets, aggregations (both cascade),
 * state checkpoints and outbox rows; their dead letters stay.  SPI is
 * connected.
 *
 * The outbox has no foreign key to sdp.flows (0.6: it was checked for
 * every row a sink flow wrote), so its rows are deleted here, in a
 * statement of their own: its snapshot sees the rows a worker committed
 * while the flows' deletion waited for it.  Rows of flows that are no
 * longer there go too: a stateful sink flow's batch that commits after
 * the deletion of its flow, before its worker stops, leaves some (they are
 * never produced).
 */
void
sdp_delete_flows(const char *condition, Oid argtype, Datum arg)
{
	Oid			argtypes[1] = {argtype};
	Datum		values[1] = {arg};

	sdp_catalog_execute(psprintf("WITH f AS (DELETE FROM sdp.flows WHERE %s RETURNING id) "
							 "DELETE FROM sdp.state_checkpoints WHERE flow_id IN (SELECT id FROM f)",
							 condition),
					1, argtypes, values, NULL, false);
	if (OidIsValid(get_relname_relid("outbox", get_namespace_oid(SDP_SCHEMA, false))))	/* 0.4 on */
		sdp_catalog_execute("DELETE FROM sdp.outbox o WHERE NOT EXISTS (SELECT FROM sdp.flows f WHERE f.id = o.flow_id)",
						0, NULL, NULL, NULL, false);
	sdp_wake_launcher_at_commit();
}

/*
 * Whether the catalogs of the current database keep owners by OID (0.2), or
 * by name (0.1, before ALTER EXTENSION sdp_ext UPDATE).
 */
bool
sdp_owners_by_oid(void)
{
	Oid			nsp = get_namespace_oid(SDP_SCHEMA, true);
	Oid			rel = OidIsValid(nsp) ? get_relname_relid("flows", nsp) : InvalidOid;
	AttrNumber	att;

	if (!OidIsValid(rel))
		return true;
	/* wait for an update in progress, and read the column as it committed */
	LockRelationOid(rel, AccessShareLock);
	att = get_attnum(rel, "owner");
	return att == InvalidAttrNumber || get_atttype(rel, att) == REGROLEOID;
}

/* SQL: the OID of the owner kept in column, NULL when a 0.1 catalog names a role that is gone. */
char *
sdp_owner_oid_sql(const char *column)
{
	if (sdp_owners_by_oid())
		return psprintf("%s::pg_catalog.oid", column);
	return psprintf("(SELECT a.oid FROM pg_catalog.pg_authid a WHERE a.rolname = %s)", column);
}

/* SQL: the value to store in an owner column for the role whose OID is param. */
char *
sdp_owner_value_sql(const char *param)
{
	if (sdp_owners_by_oid())
		return psprintf("%s::pg_catalog.oid::pg_catalog.regrole", param);
	return psprintf("(SELECT a.rolname FROM pg_catalog.pg_authid a WHERE a.oid = %s)", param);
}

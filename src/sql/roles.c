/*
 * roles.c
 *		Owners of sources and flows, and the role commands that concern them.
 *
 * sdp.sources, sdp.flows and sdp.dead_letters keep their owner as a regrole
 * (0.2): the role's OID, so that a role created later under a dropped
 * owner's name inherits nothing.  PostgreSQL records no dependency of a
 * table row on a role, so a ProcessUtility hook keeps them:
 *
 *	- DROP ROLE of a role that owns sources or flows is refused with
 *	  PostgreSQL's own message (SQLSTATE 2BP01): from the catalogs where the
 *	  extension is installed, and in the other databases of the cluster from
 *	  the owners the launcher publishes in shared memory (SdpShared->owners,
 *	  under SdpShared->lock: the launcher writes them exclusively at each
 *	  pass, this hook reads them shared);
 *	- REASSIGN OWNED BY old TO new gives old's sources, flows and dead
 *	  letters to new; the launcher restarts their workers as new;
 *	- DROP OWNED BY r drops r's flows (as sdp_drop_flow does), sources and
 *	  dead letters.
 *
 * Like PostgreSQL's own, REASSIGN OWNED and DROP OWNED act in the current
 * database, after the standard processing has checked the caller's
 * privileges on the roles.  DROP ROLE locks the role before it looks, and
 * sdp_create_source / sdp_create_flow lock their role (shared) before they
 * store it, so that a declaration being committed is seen.  In another
 * database the owners are those of the launcher's last pass: a flow or
 * source declared less than a pass ago (the launcher is woken by the
 * declaration's commit) or before the launcher's first pass after a server
 * start is not known there yet.
 *
 * Until ALTER EXTENSION sdp_ext UPDATE runs, a 0.1 catalog keeps owners by
 * name: the SQL fragments of decl/catalog.c (sdp_owner_oid_sql) read and
 * write either.
 */
#include "sql/roles.h"

#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "storage/lmgr.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "decl/flow.h"
#include "decl/catalog.h"
#include "shmem/slots.h"

/* PostgreSQL lists at most this many dependent objects in DROP ROLE's detail. */
#define SDP_MAX_REPORTED_OWNED	100

static ProcessUtility_hook_type prev_utility_hook = NULL;

static void sdp_utility_hook(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
							 ProcessUtilityContext context, ParamListInfo params,
							 QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc);

void
sdp_install_utility_hook(void)
{
	prev_utility_hook = ProcessUtility_hook;
	ProcessUtility_hook = sdp_utility_hook;
}

/* SQL: whether the owner kept in column is one of the roles in param (an oid[]). */
static char *
owner_in_sql(const char *column, const char *param)
{
	if (sdp_owners_by_oid())
		return psprintf("%s::pg_catalog.oid = ANY (%s)", column, param);
	return psprintf("%s IN (SELECT a.rolname FROM pg_catalog.pg_authid a WHERE a.oid = ANY (%s))",
					column, param);
}

/* Whether sdp_ext's catalogs are in the current database. */
static bool
catalogs_here(void)
{
	return IsTransactionState() && OidIsValid(get_extension_oid(SDP_EXTENSION_NAME, true));
}

/* Whether the catalogs have sinks (0.4 and later). */
static bool
sinks_here(void)
{
	Oid			nsp = get_namespace_oid("sdp", true);

	return OidIsValid(nsp) && OidIsValid(get_relname_relid("sinks", nsp));
}

/* Whether the current database is the one the launcher reads (sdp.database). */
static bool
in_flow_database(void)
{
	char	   *dbname = get_database_name(MyDatabaseId);

	return dbname != NULL && sdp_database != NULL && strcmp(dbname, sdp_database) == 0;
}

/*
 * Run a catalog statement with SPI connected, in a catalog scope.  Not read
 * only: each statement takes a new snapshot, and sees what committed while
 * the caller waited for a lock.
 */
static void
catalog_run(const char *sql, Datum roles, Datum other, int expected)
{
	SdpCatalogScope scope;
	Oid			argtypes[2] = {OIDARRAYOID, OIDOID};
	Datum		values[2] = {roles, other};
	int			rc;

	sdp_catalog_enter(&scope);
	rc = SPI_execute_with_args(sql, 2, argtypes, values, NULL, false, 0);
	sdp_catalog_leave(&scope);
	if (rc != expected)
		elog(ERROR, "catalog statement failed: %s", SPI_result_code_string(rc));
}

static Datum
oid_array(List *oids)
{
	int			n = list_length(oids);
	Datum	   *elems = palloc(sizeof(Datum) * Max(n, 1));
	int			i = 0;
	ListCell   *lc;

	foreach(lc, oids)
		elems[i++] = ObjectIdGetDatum(lfirst_oid(lc));
	return PointerGetDatum(construct_array(elems, n, OIDOID, sizeof(Oid), true, TYPALIGN_INT));
}

/* Refuse to drop roleid when it owns flows or sources in this database's catalogs. */
static void
check_owned_here(Oid roleid, const char *rolename)
{
	StringInfoData detail;
	char	   *sql;

	SPI_connect();
	sql = psprintf("SELECT kind, name FROM ("
				   "  SELECT 1 AS ord, 'flow' AS kind, name FROM sdp.flows WHERE %s"
				   "  UNION ALL"
				   "  SELECT 2, 'source', name FROM sdp.sources WHERE %s%s) o"
				   " ORDER BY ord, name",
				   owner_in_sql("owner", "$1"), owner_in_sql("owner", "$1"),
				   sinks_here() ? psprintf(" UNION ALL SELECT 3, 'sink', name FROM sdp.sinks WHERE %s",
										   owner_in_sql("owner", "$1")) : "");
	catalog_run(sql, oid_array(list_make1_oid(roleid)), (Datum) 0, SPI_OK_SELECT);
	if (SPI_processed == 0)
	{
		SPI_finish();
		return;
	}
	initStringInfo(&detail);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		if (i == SDP_MAX_REPORTED_OWNED)
		{
			appendStringInfo(&detail, "\nand %d other objects", (int) (SPI_processed - i));
			break;
		}
		appendStringInfo(&detail, "%sowner of %s %s", i > 0 ? "\n" : "",
						 SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1),
						 SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2));
	}
	ereport(ERROR,
			(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
			 errmsg("role \"%s\" cannot be dropped because some objects depend on it", rolename),
			 errdetail_internal("%s", detail.data),
			 errhint("Drop its flows, sources and sinks with sdp_drop_flow(), sdp_drop_source() and sdp_drop_sink(), or give them to another role with REASSIGN OWNED BY, or drop them with DROP OWNED BY, in database \"%s\".",
					 get_database_name(MyDatabaseId))));
}

/*
 * Refuse to drop roleid when it owns flows or sources in sdp.database, as
 * the launcher last saw them.
 */
static void
check_owned_elsewhere(Oid roleid, const char *rolename)
{
	bool		published;
	bool		overflow;
	int			nobjects = 0;

	LWLockAcquire(SdpShmem->lock, LW_SHARED);
	published = SdpShmem->owners_published;
	overflow = SdpShmem->owners_overflow;
	for (int i = 0; i < SdpShmem->nowners; i++)
		if (SdpShmem->owners[i] == roleid)
			nobjects = SdpShmem->owner_objects[i];
	LWLockRelease(SdpShmem->lock);

	if (!published || (nobjects == 0 && !overflow))
		return;
	if (nobjects == 0)
		ereport(ERROR,
				(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
				 errmsg("role \"%s\" cannot be dropped because some objects may depend on it", rolename),
				 errdetail("The owners of sdp_ext flows and sources in database %s are more than %d, and not all are known here.",
						   sdp_database, SDP_MAX_OWNERS),
				 errhint("Drop the role while connected to database \"%s\".", sdp_database)));
	ereport(ERROR,
			(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
			 errmsg("role \"%s\" cannot be dropped because some objects depend on it", rolename),
			 errdetail_plural("%d object in database %s", "%d objects in database %s",
							  nobjects, nobjects, sdp_database),
			 errhint("Its sdp_ext flows and sources are in database \"%s\": drop them, or use REASSIGN OWNED BY or DROP OWNED BY there.",
					 sdp_database)));
}

/* DROP ROLE: refused for a role that owns sources or flows. */
static void
check_drop_roles(DropRoleStmt *stmt)
{
	ListCell   *lc;

	/* without the privilege, DropRole refuses; lock nothing on the caller's behalf */
	if (!has_createrole_privilege(GetUserId()))
		return;
	foreach(lc, stmt->roles)
	{
		RoleSpec   *rs = lfirst(lc);
		Oid			roleid;

		if (rs->roletype != ROLESPEC_CSTRING)
			continue;			/* DropRole says why */
		roleid = get_role_oid(rs->rolename, true);
		if (!OidIsValid(roleid))
			continue;
		/* as DropRole will: then a declaration by the role has committed or gone */
		LockSharedObject(AuthIdRelationId, roleid, 0, AccessExclusiveLock);
		if (catalogs_here())
			check_owned_here(roleid, rs->rolename);
		if (!in_flow_database())
			check_owned_elsewhere(roleid, rs->rolename);
	}
}

static List *
rolespec_oids(List *roles)
{
	List	   *oids = NIL;
	ListCell   *lc;

	foreach(lc, roles)
		oids = lappend_oid(oids, get_rolespec_oid(lfirst(lc), false));
	return oids;
}

/* REASSIGN OWNED BY old TO new: old's sources, flows and dead letters go to new. */
static void
reassign_owned(ReassignOwnedStmt *stmt)
{
	Oid			newrole;
	Datum		old;
	char	   *value;

	if (!catalogs_here())
		return;
	newrole = get_rolespec_oid(stmt->newrole, false);
	shdepLockAndCheckObject(AuthIdRelationId, newrole);
	old = oid_array(rolespec_oids(stmt->roles));
	value = sdp_owner_value_sql("$2");

	SPI_connect();
	catalog_run(psprintf("UPDATE sdp.sources SET owner = %s WHERE %s", value, owner_in_sql("owner", "$1")),
				old, ObjectIdGetDatum(newrole), SPI_OK_UPDATE);
	/* the launcher sees the new owner and restarts the flow's worker as it */
	catalog_run(psprintf("UPDATE sdp.flows SET owner = %s WHERE %s", value, owner_in_sql("owner", "$1")),
				old, ObjectIdGetDatum(newrole), SPI_OK_UPDATE);
	if (SPI_processed > 0)
		sdp_wake_launcher_at_commit();
	catalog_run(psprintf("UPDATE sdp.dead_letters SET owner = %s WHERE %s", value, owner_in_sql("owner", "$1")),
				old, ObjectIdGetDatum(newrole), SPI_OK_UPDATE);
	if (sinks_here())
		catalog_run(psprintf("UPDATE sdp.sinks SET owner = %s WHERE %s", value, owner_in_sql("owner", "$1")),
					old, ObjectIdGetDatum(newrole), SPI_OK_UPDATE);
	SPI_finish();
}

/*
 * DROP OWNED BY r: r's flows (with their offsets, state and aggregations,
 * as sdp_drop_flow), its sources and its dead letters.  A source of r that
 * a flow of another role reads from stops it: that flow is not r's to drop.
 */
static void
drop_owned(DropOwnedStmt *stmt)
{
	Datum		roles;
	char	   *source_of_roles;
	char	   *flow_of_roles;

	if (!catalogs_here())
		return;
	roles = oid_array(rolespec_oids(stmt->roles));
	source_of_roles = owner_in_sql("s.owner", "$1");
	flow_of_roles = owner_in_sql("f.owner", "$1");

	SPI_connect();
	catalog_run(psprintf("SELECT s.name, f.name, f.owner::text FROM sdp.flows f JOIN sdp.sources s ON s.name = f.source"
						 " WHERE %s AND NOT (%s) ORDER BY s.name, f.name",
						 source_of_roles, flow_of_roles),
				roles, (Datum) 0, SPI_OK_SELECT);
	if (SPI_processed > 0)
	{
		StringInfoData detail;

		initStringInfo(&detail);
		for (uint64 i = 0; i < SPI_processed; i++)
			appendStringInfo(&detail, "%sFlow \"%s\" of role \"%s\" reads from source \"%s\".", i > 0 ? "\n" : "",
							 SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2),
							 SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 3),
							 SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1));
		ereport(ERROR,
				(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
				 errmsg("cannot drop source \"%s\" because flows of other roles read from it",
						SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1)),
				 errdetail_internal("%s", detail.data),
				 errhint("Drop those flows with sdp_drop_flow(), or reassign the source with REASSIGN OWNED BY, first.")));
	}
	if (sinks_here())
	{
		catalog_run(psprintf("SELECT k.name, f.name, f.owner::text FROM sdp.flows f JOIN sdp.sinks k ON k.name = f.sink"
							 " WHERE %s AND NOT (%s) ORDER BY k.name, f.name",
							 owner_in_sql("k.owner", "$1"), flow_of_roles),
					roles, (Datum) 0, SPI_OK_SELECT);
		if (SPI_processed > 0)
			ereport(ERROR,
					(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
					 errmsg("cannot drop sink \"%s\" because flows of other roles write to it",
							SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1)),
					 errdetail("Flow \"%s\" of role \"%s\" writes to it.",
							   SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2),
							   SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3)),
					 errhint("Drop those flows with sdp_drop_flow(), or reassign the sink with REASSIGN OWNED BY, first.")));
	}
	sdp_delete_flows(owner_in_sql("owner", "$1"), OIDARRAYOID, roles);
	if (sinks_here())
		catalog_run(psprintf("DELETE FROM sdp.sinks WHERE %s", owner_in_sql("owner", "$1")),
					roles, (Datum) 0, SPI_OK_DELETE);
	catalog_run(psprintf("DELETE FROM sdp.sources WHERE %s", owner_in_sql("owner", "$1")),
				roles, (Datum) 0, SPI_OK_DELETE);
	catalog_run(psprintf("DELETE FROM sdp.dead_letters WHERE %s", owner_in_sql("owner", "$1")),
				roles, (Datum) 0, SPI_OK_DELETE);
	SPI_finish();
}

static void
sdp_utility_hook(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
				 ProcessUtilityContext context, ParamListInfo params,
				 QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;

	if (IsA(parsetree, DropRoleStmt))
		check_drop_roles((DropRoleStmt *) parsetree);

	if (prev_utility_hook)
		prev_utility_hook(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);

	/* the standard processing has checked the caller's privileges on the roles */
	if (IsA(parsetree, ReassignOwnedStmt))
		reassign_owned((ReassignOwnedStmt *) parsetree);
	else if (IsA(parsetree, DropOwnedStmt))
		drop_owned((DropOwnedStmt *) parsetree);
}

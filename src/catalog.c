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
#include "flow.h"

#include "catalog/pg_authid.h"
#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "utils/guc.h"

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

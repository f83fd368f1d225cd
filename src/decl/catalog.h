/*
 * catalog.h
 *		Statements on the sdp.* catalogs, run on the extension's behalf
 *		(catalog.c).
 */
#ifndef SDP_CATALOG_H
#define SDP_CATALOG_H

#include "sdp.h"
#include "decl/flow.h"

/* What sdp_catalog_enter changed, for sdp_catalog_leave to put back. */
typedef struct SdpCatalogScope
{
	Oid			save_userid;
	int			save_sec_context;
	int			save_nestlevel;
} SdpCatalogScope;

/*
 * In a flow's worker, the flow's name: its transform cannot change its own
 * flow (sdp_refuse_self_change); NULL in every other process.
 */
extern const char *sdp_worker_flow_name;

extern void sdp_catalog_enter(SdpCatalogScope *scope);
extern void sdp_catalog_leave(SdpCatalogScope *scope);
extern int	sdp_catalog_execute(const char *sql, int nargs, Oid *argtypes, Datum *values,
								const char *nulls, bool read_only);
extern void sdp_require_flow_database(void);
extern void sdp_catalog_sink_options(SdpSinkDef *sink);
extern void sdp_delete_flows(const char *condition, Oid argtype, Datum arg);

/* owners by OID (0.2), or by name on a 0.1 catalog: SQL that reads and writes either */
extern bool sdp_owners_by_oid(void);
extern char *sdp_owner_oid_sql(const char *column);
extern char *sdp_owner_value_sql(const char *param);

#endif							/* SDP_CATALOG_H */

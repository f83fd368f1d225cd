/*
 * guc.c
 *		The variables behind sdp_ext's GUCs.
 *
 * They live here, below every module that reads them, rather than in
 * main.c, which defines the GUCs (DefineCustom*Variable in _PG_init) and
 * calls into the rest of the library: a module reading sdp.database does
 * not thereby depend on the library's entry point.  sdp.allowed_hosts lives
 * with the module that enforces it (kafka/kafka_properties.c).
 */
#include "sdp.h"

#include "utils/timestamp.h"

char	   *sdp_database = NULL;
int			sdp_max_flows = 16;
int			sdp_launcher_naptime_ms = 1000;
int			sdp_default_max_batch_rows = 10000;
int			sdp_default_state_memory_limit_kb = 256 * 1024;
int			sdp_dead_letter_retention_s = 7 * SECS_PER_DAY;
int			sdp_dead_letter_prune_interval_s = SECS_PER_MINUTE;
int			sdp_max_workers_per_role = -1;
int			sdp_max_objects_per_role = 100;
int			sdp_stall_timeout_s = 30;
char	   *sdp_standby_slots = NULL;

/* The flow workers the flows of a role other than a superuser may run at once; 0: no bound. */
int
sdp_role_worker_quota(void)
{
	if (sdp_max_workers_per_role < 0)
		return (sdp_max_flows + 1) / 2;
	return sdp_max_workers_per_role;
}

/*
 * main.c
 *		Entry point of the library: the GUCs' definitions (their variables
 *		are in guc.c), shared memory hooks, the ProcessUtility hook
 *		(sql/roles.c) and the launcher's registration.
 *
 * sdp_ext must be in shared_preload_libraries: its launcher is a static
 * background worker and its flow slots live in shared memory, both of which
 * only exist if the library is loaded when the postmaster starts.
 */
#include "sdp.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/builtins.h"
#include "utils/guc.h"

#include "kafka/kafka_properties.h"
#include "kafka/standby_slots.h"
#include "launcher/launcher.h"
#include "shmem/slots.h"
#include "sql/roles.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(sdp_library_version);

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void sdp_shmem_request_hook(void);
static void sdp_shmem_startup_hook(void);
static void sdp_define_gucs(void);

void		_PG_init(void);

void
_PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("sdp_ext must be loaded via shared_preload_libraries"),
				 errhint("Add sdp_ext to shared_preload_libraries in postgresql.conf and restart the server.")));

	sdp_define_gucs();

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = sdp_shmem_request_hook;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = sdp_shmem_startup_hook;
	sdp_install_utility_hook();

	/*
	 * Flow workers are background workers: they share max_worker_processes
	 * with this extension's launcher and PostgreSQL's own (the logical
	 * replication launcher, parallel query).  Say at start when it leaves
	 * fewer than sdp.max_flows, rather than when a flow waits for a slot.
	 */
	if (!IsUnderPostmaster && !IsBinaryUpgrade && max_worker_processes < sdp_max_flows + 2)
		ereport(WARNING,
				(errmsg("sdp_ext: max_worker_processes (%d) leaves room for at most %d flow workers, fewer than sdp.max_flows (%d)",
						max_worker_processes, Max(max_worker_processes - 2, 0), sdp_max_flows),
				 errdetail("Flow workers share max_worker_processes with the sdp_ext launcher and PostgreSQL's logical replication launcher and parallel workers."),
				 errhint("Set max_worker_processes to at least %d (sdp.max_flows + 2, more for parallel query) and restart the server.",
						 sdp_max_flows + 2)));

	/*
	 * pg_upgrade starts both servers in binary-upgrade mode to dump the old
	 * catalogs and restore them in the new: no flow runs then (the old
	 * server's would consume and commit while its catalogs are dumped, the
	 * new server's would start from catalogs half restored).
	 */
	if (IsBinaryUpgrade)
		ereport(LOG,
				(errmsg("sdp_ext: the server runs in binary-upgrade mode (pg_upgrade): no flow runs")));
	else
		sdp_register_launcher();
}

static void
sdp_define_gucs(void)
{
	DefineCustomStringVariable("sdp.database",
							   "Database in which sdp_ext flows are declared and run.",
							   "The launcher connects to this database; flows declared elsewhere are refused.",
							   &sdp_database,
							   "postgres",
							   PGC_POSTMASTER,
							   0,
							   NULL, NULL, NULL);

	DefineCustomIntVariable("sdp.max_flows",
							"Maximum number of flow workers that can run at once.",
							"A running flow uses as many background workers as its option workers says (1 by default); max_worker_processes must leave room for them.",
							&sdp_max_flows,
							16, 1, 1024,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("sdp.launcher_naptime",
							"How often the launcher reconciles sdp.flows with running workers when nothing wakes it.",
							NULL,
							&sdp_launcher_naptime_ms,
							1000, 10, 60000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("sdp.max_batch_rows",
							"Default upper bound on the messages a flow processes in one transaction.",
							"A flow's max_batch_rows option overrides it.",
							&sdp_default_max_batch_rows,
							10000, 1, 1000000,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("sdp.state_memory_limit",
							"Default upper bound on the shared memory of a stateful flow's state.",
							"A flow's state_memory_limit option overrides it; past the limit the flow fails, the server does not.",
							&sdp_default_state_memory_limit_kb,
							256 * 1024, 1024, INT_MAX / 2,
							PGC_SIGHUP,
							GUC_UNIT_KB,
							NULL, NULL, NULL);

	DefineCustomIntVariable("sdp.dead_letter_retention",
							"How long dead letters are kept; older ones are deleted in the background.",
							"0 keeps them for ever. The launcher deletes them, at most every sdp.dead_letter_prune_interval.",
							&sdp_dead_letter_retention_s,
							7 * SECS_PER_DAY, 0, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("sdp.dead_letter_prune_interval",
							"How often the launcher deletes the dead letters older than sdp.dead_letter_retention.",
							NULL,
							&sdp_dead_letter_prune_interval_s,
							SECS_PER_MINUTE, 1, SECS_PER_DAY,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("sdp.max_workers_per_role",
							"Maximum number of flow workers that the flows of one role may run at once.",
							"Superusers' flows are not bounded. -1: half of sdp.max_flows, rounded up; 0: no bound. "
							"A flow that would go past it waits, with the reason, until the role's other flows leave room.",
							&sdp_max_workers_per_role,
							-1, -1, 1024,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("sdp.max_objects_per_role",
							"Maximum number of sources, sinks and flows that one role may own together.",
							"Superusers are not bounded. 0: no bound. A declaration past it is refused.",
							&sdp_max_objects_per_role,
							100, 0, INT_MAX,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("sdp.stall_timeout",
							"How long a flow's worker may stay in one batch before the status shows it stalled.",
							"A running worker that has not come back to its loop for this long shows 'stalled' in sdp.flow_status "
							"and sdp.flow_workers, with the time in last_error. It changes what the status says, nothing else. 0: never.",
							&sdp_stall_timeout_s,
							30, 0, INT_MAX / 1000,
							PGC_USERSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomStringVariable("sdp.allowed_hosts",
							   "Broker hosts that the sources and sinks of roles other than superusers may name.",
							   "A comma-separated list of host, host:port, [address]:port and *.domain entries, or * for any. "
							   "It bounds bootstrap_servers, the brokers a cluster advertises to a flow's worker, and OAuth token endpoints.",
							   &sdp_allowed_hosts,
							   "*",
							   PGC_SUSET,
							   GUC_LIST_INPUT,
							   sdp_check_allowed_hosts, NULL, NULL);

	DefineCustomStringVariable("sdp.standby_slots",
							   "Physical replication slots of the standbys that a sink flow's rows must be on before they are produced to Kafka.",
							   "A comma-separated list of slot names. A sink flow's relay produces a batch's rows only once the standby of every slot named has flushed the batch's commit, so that a promoted standby holds every row already in Kafka. Empty: on PostgreSQL 17 and later the slots of synchronized_standby_slots, else none.",
							   &sdp_standby_slots,
							   "",
							   PGC_SIGHUP,
							   GUC_LIST_INPUT,
							   standby_slots_check_guc, NULL, NULL);

	MarkGUCPrefixReserved("sdp");
}

static void
sdp_shmem_request_hook(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	sdp_shmem_request();
}

static void
sdp_shmem_startup_hook(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	sdp_shmem_startup();
}

/*
 * sdp_library_version(): the version this library was built for (the
 * control file's default_version), which may be ahead of the catalogs'
 * (pg_extension.extversion) until ALTER EXTENSION sdp_ext UPDATE.
 */
Datum
sdp_library_version(PG_FUNCTION_ARGS)
{
	PG_RETURN_TEXT_P(cstring_to_text(SDP_LIBRARY_VERSION));
}

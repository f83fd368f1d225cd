/*
 * launcher.c
 *		The sdp_ext launcher: one static background worker per server.
 *
 * Registered from _PG_init, it connects to sdp.database and keeps the set of
 * running flow workers equal to what sdp.flows asks for.  It sleeps on its
 * latch; SQL functions that change sdp.flows wake it when their transaction
 * commits, and it also looks every sdp.launcher_naptime.
 */
#include "sdp.h"

#include "access/xact.h"
#include "catalog/pg_extension.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"

/* Seconds before the postmaster restarts a launcher that exited with an error. */
#define SDP_LAUNCHER_RESTART_S	1

static void launcher_detach_shmem(int code, Datum arg);
static bool launcher_extension_installed(void);

void
sdp_register_launcher(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = SDP_LAUNCHER_RESTART_S;
	strlcpy(worker.bgw_library_name, "sdp_ext", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "sdp_launcher_main", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "sdp launcher", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "sdp launcher", BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
}

void
sdp_launcher_main(Datum main_arg)
{
	/* SIGTERM ends the launcher at its next CHECK_FOR_INTERRUPTS; SIGHUP rereads the config. */
	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();

	/* Connect to the flows' database; a missing database ends us with FATAL and the postmaster retries. */
	BackgroundWorkerInitializeConnection(sdp_database, NULL, 0);
	pgstat_report_appname("sdp launcher");

	/* Publish our latch so that SQL functions can wake us. */
	LWLockAcquire(SdpShmem->lock, LW_EXCLUSIVE);
	SdpShmem->launcher_pid = MyProcPid;
	SdpShmem->launcher_latch = &MyProc->procLatch;
	LWLockRelease(SdpShmem->lock);
	before_shmem_exit(launcher_detach_shmem, (Datum) 0);

	ereport(LOG, (errmsg("sdp launcher started in database \"%s\"", sdp_database)));

	for (;;)
	{
		/* Sleep until woken, the naptime passes, or the postmaster dies. */
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sdp_launcher_naptime_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();

		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		if (!launcher_extension_installed())
		{
			pgstat_report_activity(STATE_IDLE, "waiting for CREATE EXTENSION sdp_ext");
			continue;
		}
		pgstat_report_activity(STATE_IDLE, NULL);
	}
}

/* Whether CREATE EXTENSION sdp_ext has run in this database. */
static bool
launcher_extension_installed(void)
{
	bool		installed;

	StartTransactionCommand();
	installed = OidIsValid(get_extension_oid(SDP_EXTENSION_NAME, true));
	CommitTransactionCommand();
	return installed;
}

static void
launcher_detach_shmem(int code, Datum arg)
{
	LWLockAcquire(SdpShmem->lock, LW_EXCLUSIVE);
	if (SdpShmem->launcher_pid == MyProcPid)
	{
		SdpShmem->launcher_pid = 0;
		SdpShmem->launcher_latch = NULL;
	}
	LWLockRelease(SdpShmem->lock);
}

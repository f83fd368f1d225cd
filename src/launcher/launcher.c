/*
 * launcher.c
 *		The sdp_ext launcher: one static background worker per server.
 *
 * Registered from _PG_init, it connects to sdp.database and keeps the set of
 * running flow workers equal to what sdp.flows asks for.  It sleeps on its
 * latch; SQL functions that change sdp.flows wake it when their transaction
 * commits, and it also looks every sdp.launcher_naptime.
 *
 * It stops a worker it started through that worker's handle
 * (TerminateBackgroundWorker), never by a pid read from shared memory, which
 * may belong to another process by then.  A worker started by an earlier
 * incarnation of the launcher (which exited and was restarted by the
 * postmaster while its workers ran on) has no handle here: the launcher
 * adopts it, and stops it cooperatively, by setting stop_requested in its
 * slot and setting its latch; the worker exits when it sees the flag.
 *
 * It also deletes the dead letters older than sdp.dead_letter_retention,
 * every sdp.dead_letter_prune_interval, in short transactions that never
 * wait for a lock, between two reconciliations.
 */
#include "launcher/launcher.h"
#include "compat.h"

#include <signal.h>

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "nodes/makefuncs.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "decl/flow.h"
#include "worker/worker_args.h"
#include "decl/catalog.h"
#include "shmem/slots.h"
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

/* the wait event pg_stat_activity shows (sdp_wait_event) */
static uint32 wait_main = 0;

/* Seconds before the postmaster restarts a launcher that exited with an error. */
#define SDP_LAUNCHER_RESTART_S	1
/* Backoff before restarting a worker that exited unexpectedly: 1 s doubling to 60 s. */
#define SDP_RESTART_BACKOFF_MIN_MS	1000
#define SDP_RESTART_BACKOFF_MAX_MS	60000
/* A worker that ran this long before exiting restarts with the minimum backoff. */
#define SDP_RESTART_RESET_MS		60000
/*
 * A worker registered by an earlier launcher that has not published its pid
 * this long after its registration is taken as never started.
 */
#define SDP_ADOPTED_START_GRACE_MS	30000
/*
 * Pruning of old dead letters: rows deleted per transaction, and
 * transactions per pass; what is left after a pass is taken up by the next,
 * right after the launcher has looked at its flows again.
 */
#define SDP_PRUNE_BATCH_ROWS		10000
#define SDP_PRUNE_BATCHES_PER_PASS	10
/* How often a flow whose owner cannot log in is looked at again. */
#define SDP_NOLOGIN_RETRY_MS		5000

/* A flow as sdp.flows declares it, read at each reconciliation. */
typedef struct WantedFlow
{
	int64		id;
	char		name[NAMEDATALEN];
	Oid			owner;
	char		owner_name[NAMEDATALEN];
	bool		owner_can_login;	/* the worker logs in as the owner */
	bool		owner_super;	/* a superuser: no sdp.max_workers_per_role */
	bool		wanted;			/* enabled and not failed */
	int			workers;		/* the flow option workers, at most its topic's partitions */
	int			asked_workers;	/* the flow option workers */
	bool		has_share;		/* the flow option partitions: its workers divide those */
	int32		decl_hash;		/* its schema, transform and options, and its source's brokers and
								 * options (sdp_alter_source): a change restarts its workers */
	uint64		have;			/* the workers that have a slot (bit worker_no) */
	bool		leaving;		/* workers of an earlier incarnation or layout are still stopping */
} WantedFlow;

typedef struct FlowPartitions
{
	int64		flow_id;		/* the key */
	int			partitions;
	int			clamped_to;		/* the workers the log said it runs, 0: none said */
} FlowPartitions;

/* Launcher-private: the handle of the worker started for each slot. */
static BackgroundWorkerHandle **slot_handles = NULL;
/* flow id -> its topic's partitions, as its workers last said (FlowPartitions) */
static HTAB *flow_partitions = NULL;
static int64 *slot_flow_ids = NULL;
static bool warned_max_flows = false;
/* When the next pruning of dead letters is due; 0 = at the next pass. */
static TimestampTz next_prune_at = 0;
/* Whether the extension was there at the last pass: without it nothing is pruned. */
static bool extension_installed = false;

static void launcher_detach_shmem(int code, Datum arg);
static bool launcher_extension_installed(void);
static void launcher_reconcile(void);
static void launcher_stop_all(void);
static void publish_no_owners(void);
static void launcher_prune_dead_letters(void);
static long launcher_sleep_ms(void);

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

	slot_handles = MemoryContextAllocZero(TopMemoryContext, sizeof(BackgroundWorkerHandle *) * SdpShmem->max_flows);
	slot_flow_ids = MemoryContextAllocZero(TopMemoryContext, sizeof(int64) * SdpShmem->max_flows);
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(int64);
		ctl.entrysize = sizeof(FlowPartitions);
		ctl.hcxt = TopMemoryContext;
		flow_partitions = hash_create("sdp flow partitions", 64, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}

	ereport(LOG, (errmsg("sdp launcher started in database \"%s\"", sdp_database)));

	for (;;)
	{
		/* Sleep until woken, the naptime passes, or the postmaster dies. */
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 launcher_sleep_ms(), sdp_wait_event(&wait_main, "SdpLauncherMain"));
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();

		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			/* a new retention applies at once */
			next_prune_at = 0;
		}

		extension_installed = launcher_extension_installed();
		if (!extension_installed)
		{
			/* DROP EXTENSION: no flow may run without its catalogs */
			launcher_stop_all();
			publish_no_owners();
			pgstat_report_activity(STATE_IDLE, "waiting for CREATE EXTENSION sdp_ext");
			continue;
		}
		launcher_reconcile();
		launcher_prune_dead_letters();
		pgstat_report_activity(STATE_IDLE, NULL);
	}
}

/* How long to sleep: the naptime, or less when the pruning of dead letters is due sooner. */
static long
launcher_sleep_ms(void)
{
	long		sleep_ms = sdp_launcher_naptime_ms;

	if (extension_installed && sdp_dead_letter_retention_s > 0)
	{
		TimestampTz now = GetCurrentTimestamp();
		long		due_ms = next_prune_at <= now ? 0 : (long) ((next_prune_at - now + 999) / 1000);

		sleep_ms = Min(sleep_ms, due_ms);
	}
	return sleep_ms;
}

/* Whether CREATE EXTENSION sdp_ext has run in this database. */
static bool
launcher_extension_installed(void)
{
	bool		installed;

	sdp_start_transaction();
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

/*
 * Read sdp.flows: every declared flow, whether it should run, and its owner
 * (by OID, InvalidOid when its role is gone: a 0.1 catalog keeps owners by
 * name).  Also publish which roles own flows or sources, for DROP ROLE in
 * other databases (roles.c).  NULL when the catalogs are gone: a DROP
 * EXTENSION committed since the launcher found the extension installed.
 */
static WantedFlow *
read_flows(int *nflows)
{
	SdpCatalogScope scope;
	WantedFlow *flows = NULL;
	Oid			owners[SDP_MAX_OWNERS];
	int32		counts[SDP_MAX_OWNERS];
	int			nowners;
	bool		overflow;
	bool		has_sinks;

	*nflows = 0;

	/*
	 * Lock the catalogs before taking the snapshot they are read with: an
	 * update that rewrites one (ALTER TABLE ... TYPE, as sdp_ext--0.1--0.2.sql
	 * does) gives every row its own transaction id, which a snapshot taken
	 * while it ran would not see: no flow at all, and every worker stopped.
	 */
	if (!OidIsValid(RangeVarGetRelid(makeRangeVar(SDP_SCHEMA, "flows", -1), AccessShareLock, true)) ||
		!OidIsValid(RangeVarGetRelid(makeRangeVar(SDP_SCHEMA, "sources", -1), AccessShareLock, true)))
		return NULL;
	/* sinks: from 0.4 */
	has_sinks = OidIsValid(RangeVarGetRelid(makeRangeVar(SDP_SCHEMA, "sinks", -1), AccessShareLock, true));
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	sdp_catalog_enter(&scope);
	if (SPI_execute(psprintf("SELECT o.own, count(*) FROM ("
							 "  SELECT %s AS own FROM sdp.flows UNION ALL SELECT %s FROM sdp.sources%s) o"
							 " WHERE o.own IS NOT NULL GROUP BY o.own ORDER BY o.own",
							 sdp_owner_oid_sql("owner"), sdp_owner_oid_sql("owner"),
							 has_sinks ? " UNION ALL SELECT owner::pg_catalog.oid FROM sdp.sinks" : ""),
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the owners of sdp.flows, sdp.sources and sdp.sinks");
	overflow = SPI_processed > SDP_MAX_OWNERS;
	nowners = (int) Min(SPI_processed, SDP_MAX_OWNERS);
	for (int i = 0; i < nowners; i++)
	{
		bool		isnull;

		owners[i] = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
		counts[i] = (int32) Min(DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull)),
								PG_INT32_MAX);
	}
	if (SPI_execute(psprintf("SELECT f.id, f.name, f.enabled AND f.failed_at IS NULL, r.oid, f.owner::text, r.rolcanlogin, r.rolsuper, "
							 "       coalesce((f.options->>'workers')::int, 1), f.options ? 'partitions', "
							 "       hashtext(f.schema || E'\\x01' || coalesce(f.transform, '') || E'\\x01' || f.options::text "
							 "                || E'\\x01' || coalesce(s.bootstrap_servers, '') || E'\\x01' || coalesce(s.options::text, '')) "
							 "  FROM sdp.flows f LEFT JOIN pg_catalog.pg_roles r ON r.oid = %s "
							 "  LEFT JOIN sdp.sources s ON s.name = f.source "
							 " ORDER BY f.id", sdp_owner_oid_sql("f.owner")),
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read sdp.flows");
	sdp_catalog_leave(&scope);

	LWLockAcquire(SdpShmem->lock, LW_EXCLUSIVE);
	memcpy(SdpShmem->owners, owners, sizeof(Oid) * nowners);
	memcpy(SdpShmem->owner_objects, counts, sizeof(int32) * nowners);
	SdpShmem->nowners = nowners;
	SdpShmem->owners_overflow = overflow;
	SdpShmem->owners_published = true;
	LWLockRelease(SdpShmem->lock);

	flows = MemoryContextAllocZero(TopTransactionContext, sizeof(WantedFlow) * Max(SPI_processed, 1));
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		WantedFlow *f = &flows[i];

		f->id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
		strlcpy(f->name, SPI_getvalue(tup, desc, 2), NAMEDATALEN);
		f->wanted = DatumGetBool(SPI_getbinval(tup, desc, 3, &isnull));
		f->owner = DatumGetObjectId(SPI_getbinval(tup, desc, 4, &isnull));
		if (isnull)
			f->owner = InvalidOid;
		strlcpy(f->owner_name, SPI_getvalue(tup, desc, 5), NAMEDATALEN);
		f->owner_can_login = DatumGetBool(SPI_getbinval(tup, desc, 6, &isnull)) && !isnull;
		f->owner_super = DatumGetBool(SPI_getbinval(tup, desc, 7, &isnull)) && !isnull;
		f->workers = DatumGetInt32(SPI_getbinval(tup, desc, 8, &isnull));
		f->workers = Max(1, Min(f->workers, SDP_MAX_WORKERS));
		f->asked_workers = f->workers;
		f->has_share = DatumGetBool(SPI_getbinval(tup, desc, 9, &isnull)) && !isnull;
		f->decl_hash = DatumGetInt32(SPI_getbinval(tup, desc, 10, &isnull));
	}
	*nflows = (int) SPI_processed;
	PopActiveSnapshot();
	SPI_finish();
	return flows;
}

/* No flow or source has an owner (the extension is not installed). */
static void
publish_no_owners(void)
{
	LWLockAcquire(SdpShmem->lock, LW_EXCLUSIVE);
	SdpShmem->nowners = 0;
	SdpShmem->owners_overflow = false;
	SdpShmem->owners_published = true;
	LWLockRelease(SdpShmem->lock);
}

/* Register the worker of a flow in its slot; on failure the slot waits out a backoff. */
static void
start_worker(int slotno, WantedFlow *f)
{
	SdpFlowSlot *slot = &SdpShmem->slots[slotno];
	BackgroundWorker worker;
	SdpWorkerArgs args;
	BackgroundWorkerHandle *handle;
	TimestampTz now = GetCurrentTimestamp();
	MemoryContext oldcxt;
	bool		ok;

	if (!f->owner_can_login)
	{
		/* its worker could not log in: say so, and look again in a while */
		char	   *error = OidIsValid(f->owner) ?
			psprintf("the flow's owner \"%s\" cannot log in (NOLOGIN): a flow's worker logs in as its owner",
					 f->owner_name) :
			psprintf("the flow's owner \"%s\" does not exist (the role was dropped): a flow's worker logs in as its owner; drop the flow with sdp_drop_flow()",
					 f->owner_name);
		TimestampTz next = TimestampTzPlusMilliseconds(now, SDP_NOLOGIN_RETRY_MS);

		SpinLockAcquire(&slot->mutex);
		slot->ctl.flow_id = f->id;
		slot->ctl.owner = f->owner;
		(void) sdp_slot_transition_locked(slot, SDP_FLOW_RESTARTING);
		slot->ctl.next_start_at = next;
		strlcpy(slot->ctl.last_error, error, SDP_ERROR_LEN);
		slot->ctl.last_error_at = now;
		SpinLockRelease(&slot->mutex);
		slot_flow_ids[slotno] = f->id;
		return;
	}

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker.bgw_library_name, "sdp_ext", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "sdp_flow_worker_main", BGW_MAXLEN);
	if (slot->nworkers > 1)
		snprintf(worker.bgw_name, BGW_MAXLEN, "sdp flow %s #%d", f->name, slot->worker_no);
	else
		snprintf(worker.bgw_name, BGW_MAXLEN, "sdp flow %s", f->name);
	strlcpy(worker.bgw_type, "sdp flow", BGW_MAXLEN);
	worker.bgw_notify_pid = MyProcPid;
	worker.bgw_main_arg = Int32GetDatum(slotno);

	memset(&args, 0, sizeof(args));
	args.slotno = slotno;
	args.dboid = MyDatabaseId;
	args.owner = f->owner;
	args.flow_id = f->id;
	args.worker_no = slot->worker_no;
	args.nworkers = slot->nworkers;
	strlcpy(args.name, f->name, NAMEDATALEN);

	/*
	 * The slot says "starting" before the worker exists: a worker that comes
	 * up at once sets "running" itself, and must not be overwritten.  The
	 * worker gets the slot's new generation, and attaches to the slot only
	 * while it still has it (worker_attach).
	 */
	SpinLockAcquire(&slot->mutex);
	args.generation = ++slot->ctl.generation;
	slot->ctl.flow_id = f->id;
	slot->ctl.owner = f->owner;
	slot->ctl.stop_requested = false;
	slot->ctl.registered_at = now;
	slot->ctl.exit_expected = false;
	(void) sdp_slot_transition_locked(slot, SDP_FLOW_STARTING);
	slot->ctl.exited_at = 0;
	SpinLockRelease(&slot->mutex);
	memcpy(worker.bgw_extra, &args, sizeof(args));

	/* the handle outlives this transaction: keep it in TopMemoryContext */
	oldcxt = MemoryContextSwitchTo(TopMemoryContext);
	ok = RegisterDynamicBackgroundWorker(&worker, &handle);
	MemoryContextSwitchTo(oldcxt);
	if (slot_handles[slotno] != NULL)
		pfree(slot_handles[slotno]);

	if (!ok)
	{
		/* no free background worker slot: try again later, never in a tight loop */
		static const char error[] = "could not start a background worker: raise max_worker_processes";
		TimestampTz next = TimestampTzPlusMilliseconds(now, SDP_RESTART_BACKOFF_MAX_MS / 4);

		StaticAssertStmt(sizeof(error) <= SDP_ERROR_LEN, "message fits the slot");
		SpinLockAcquire(&slot->mutex);
		(void) sdp_slot_transition_locked(slot, SDP_FLOW_RESTARTING);
		slot->ctl.next_start_at = next;
		memcpy(slot->ctl.last_error, error, sizeof(error));
		slot->ctl.last_error_at = now;
		SpinLockRelease(&slot->mutex);
	}

	slot_handles[slotno] = ok ? handle : NULL;
	slot_flow_ids[slotno] = f->id;
	if (!ok)
		ereport(WARNING,
				(errmsg("sdp launcher could not start a worker for flow \"%s\"", f->name),
				 errhint("Raise max_worker_processes: every running flow needs a background worker.")));
}

/* What the launcher reads of a slot, copied under its spinlock. */
typedef struct SlotView
{
	SdpFlowState state;
	pid_t		pid;
	int64		flow_id;
	Oid			owner;
	TimestampTz registered_at;
	TimestampTz started_at;
	TimestampTz exited_at;
	TimestampTz next_start_at;
	int			restarts;
	int			topic_partitions;
} SlotView;

static void
slot_view(SdpFlowSlot *slot, SlotView *v)
{
	SpinLockAcquire(&slot->mutex);
	v->state = slot->ctl.state;
	v->pid = slot->ctl.pid;
	v->flow_id = slot->ctl.flow_id;
	v->owner = slot->ctl.owner;
	v->registered_at = slot->ctl.registered_at;
	v->started_at = slot->ctl.started_at;
	v->exited_at = slot->ctl.exited_at;
	v->next_start_at = slot->ctl.next_start_at;
	v->restarts = slot->ctl.restarts;
	v->topic_partitions = slot->ctl.topic_partitions;
	SpinLockRelease(&slot->mutex);
}

/*
 * Whether the worker of a slot has exited (or never started).  Without a
 * handle (an adopted worker) the slot tells: the worker clears its pid and
 * stamps exited_at when it exits; one that never published a pid long
 * after its registration never started.
 */
static bool
worker_gone(int slotno, const SlotView *v, TimestampTz now)
{
	pid_t		pid;

	if (slot_handles[slotno] != NULL)
		return GetBackgroundWorkerPid(slot_handles[slotno], &pid) == BGWH_STOPPED;
	if (v->pid != 0)
		return false;
	return v->exited_at != 0 ||
		TimestampDifferenceExceeds(v->registered_at, now, SDP_ADOPTED_START_GRACE_MS);
}

/*
 * Ask the worker of a slot to stop: through its handle when this launcher
 * started it; otherwise (an adopted worker) by the flag in its slot and its
 * latch, which is set again at every pass until the worker has gone, in
 * case it had not published its latch yet.
 */
static void
stop_worker(int slotno, const SlotView *v)
{
	SdpFlowSlot *slot = &SdpShmem->slots[slotno];
	Latch	   *latch;

	if (slot_handles[slotno] != NULL && v->state != SDP_FLOW_STOPPING)
		TerminateBackgroundWorker(slot_handles[slotno]);
	SpinLockAcquire(&slot->mutex);
	slot->ctl.stop_requested = true;
	(void) sdp_slot_transition_locked(slot, SDP_FLOW_STOPPING);
	latch = slot->ctl.latch;
	SpinLockRelease(&slot->mutex);
	if (slot_handles[slotno] == NULL && latch != NULL)
		SetLatch(latch);
}

/*
 * What one pass of the launcher does to a slot once it has released
 * SdpShmem->lock: start its worker, stop it, or say it is restarting.
 */
typedef enum SlotActionKind
{
	SLOT_START,
	SLOT_STOP,
	SLOT_RESTARTING
} SlotActionKind;

typedef struct SlotAction
{
	SlotActionKind kind;
	int			slotno;
	WantedFlow *flow;			/* SLOT_START */
	int			backoff_ms;		/* SLOT_RESTARTING */
} SlotAction;

/* Forget the partitions of flows no longer declared. */
static void
forget_gone_flows(const WantedFlow *flows, int nflows)
{
	HASH_SEQ_STATUS seq;
	FlowPartitions *fp;

	hash_seq_init(&seq, flow_partitions);
	while ((fp = hash_seq_search(&seq)) != NULL)
	{
		bool		found = false;

		for (int i = 0; i < nflows && !found; i++)
			found = flows[i].id == fp->flow_id;
		if (!found)
			(void) hash_search(flow_partitions, &fp->flow_id, HASH_REMOVE, NULL);
	}
}

/* The workers that the flows of role owner have slots for (kept, or allocated in this pass). */
static int
role_workers(const WantedFlow *flows, int nflows, Oid owner)
{
	int			n = 0;

	for (int i = 0; i < nflows; i++)
		if (flows[i].owner == owner)
			n += pg_popcount64(flows[i].have);
	return n;
}

/*
 * Make the running workers match sdp.flows: start flows that should run,
 * stop the ones that should not, restart crashed ones after a backoff, and
 * free the slots of flows that are gone.  A flow with the option workers =
 * N has N slots; when N changes, every worker of the old layout is stopped,
 * and the new ones start only once all of them have gone, so that no
 * partition is ever consumed by two workers at once.  A flow starts with
 * all its workers or none: it waits, with the reason, until enough slots
 * are free.
 *
 * As logicalrep_worker_launch does, the launcher decides under
 * SdpShmem->lock (which it takes exclusively only to allocate and free
 * slots) and acts after releasing it: whether a worker has gone is asked
 * before (GetBackgroundWorkerPid), and workers are registered and
 * terminated, and the log written, after.  It is the only process that
 * allocates or frees a slot, so the slots it decided about stay its own
 * in between.
 */
static void
launcher_reconcile(void)
{
	WantedFlow *flows;
	int			nflows;
	TimestampTz now;
	int			nfree;
	SlotView   *views;
	bool	   *gone;
	SlotAction *actions;
	int			nactions = 0;
	int			need_slots = 0;
	int			quota;
	const char *waiting_flow = NULL;
	int			waiting_missing = 0;

	sdp_start_transaction();
	flows = read_flows(&nflows);
	if (flows == NULL)
	{
		/* dropped just now: the next round stops every worker */
		CommitTransactionCommand();
		return;
	}
	now = GetCurrentTimestamp();

	/* 1. how each slot's worker is doing, before the lock (in_use is the launcher's own to change) */
	views = palloc0(sizeof(SlotView) * SdpShmem->max_flows);
	gone = palloc0(sizeof(bool) * SdpShmem->max_flows);
	actions = palloc(sizeof(SlotAction) * SdpShmem->max_flows);
	for (int s = 0; s < SdpShmem->max_flows; s++)
	{
		if (!SdpShmem->slots[s].in_use)
			continue;
		slot_view(&SdpShmem->slots[s], &views[s]);
		/* a slot an earlier launcher set up: adopt its worker */
		if (slot_handles[s] == NULL && slot_flow_ids[s] == 0)
			slot_flow_ids[s] = views[s].flow_id;
		gone[s] = (views[s].state == SDP_FLOW_RESTARTING) || worker_gone(s, &views[s], now);
	}

	/*
	 * A flow runs no more workers than its topic has partitions (as its
	 * workers last listed them): the others would hold a slot and consume
	 * nothing.  A flow with a share (option partitions) was checked at its
	 * declaration.  The topic growing gives it more, up to its option.
	 */
	for (int s = 0; s < SdpShmem->max_flows; s++)
	{
		FlowPartitions *fp;

		if (!SdpShmem->slots[s].in_use || views[s].topic_partitions <= 0)
			continue;
		fp = hash_search(flow_partitions, &views[s].flow_id, HASH_ENTER, NULL);
		fp->partitions = views[s].topic_partitions;
	}
	for (int i = 0; i < nflows; i++)
	{
		WantedFlow *f = &flows[i];
		FlowPartitions *fp = hash_search(flow_partitions, &f->id, HASH_FIND, NULL);

		if (fp == NULL || f->has_share || fp->partitions >= f->workers)
			continue;
		f->workers = fp->partitions;
		if (fp->clamped_to != f->workers)
		{
			ereport(LOG,
					(errmsg("sdp flow \"%s\" asks for %d workers, and its topic has %d partitions: it runs %d",
							f->name, f->asked_workers, fp->partitions, f->workers),
					 errdetail("A partition is read by one worker; more workers would consume nothing.")));
			fp->clamped_to = f->workers;
		}
	}
	forget_gone_flows(flows, nflows);

	/* 2. decide, under the lock */
	LWLockAcquire(SdpShmem->lock, LW_EXCLUSIVE);
	for (int s = 0; s < SdpShmem->max_flows; s++)
	{
		SdpFlowSlot *slot = &SdpShmem->slots[s];
		WantedFlow *f = NULL;
		SlotView   *v = &views[s];

		if (!slot->in_use)
			continue;
		for (int i = 0; i < nflows; i++)
			if (strcmp(flows[i].name, slot->name) == 0)
				f = &flows[i];

		if (f == NULL || !f->wanted || f->id != slot_flow_ids[s] || f->owner != v->owner ||
			slot->nworkers != f->workers || slot->decl_hash != f->decl_hash)
		{
			/*
			 * not wanted (any more), given to another role (REASSIGN OWNED)
			 * or its role gone, its number of workers or its declaration
			 * changed (sdp_alter_flow): stop the worker, and free the slot
			 * once it has gone (a flow still wanted starts again below, once
			 * all its old workers have)
			 */
			if (!gone[s])
			{
				actions[nactions++] = (SlotAction) {SLOT_STOP, s, NULL, 0};
				if (f != NULL)
					f->leaving = true;
				continue;
			}
			if (slot_handles[s] != NULL)
				pfree(slot_handles[s]);
			slot_handles[s] = NULL;
			slot_flow_ids[s] = 0;
			sdp_slot_free(s);
			continue;
		}
		f->have |= UINT64CONST(1) << slot->worker_no;

		if (v->state == SDP_FLOW_RESTARTING)
		{
			if (now >= v->next_start_at)
				actions[nactions++] = (SlotAction) {SLOT_START, s, f, 0};
			continue;
		}
		if (gone[s])
		{
			/* an unexpected exit: restart after a backoff that doubles while it keeps happening */
			int			restarts = v->restarts;
			int			backoff;
			TimestampTz next;

			if (v->started_at != 0 &&
				TimestampDifferenceExceeds(v->started_at, now, SDP_RESTART_RESET_MS))
				restarts = 0;
			backoff = Min(SDP_RESTART_BACKOFF_MAX_MS, SDP_RESTART_BACKOFF_MIN_MS << Min(restarts, 6));
			next = TimestampTzPlusMilliseconds(now, backoff);

			SpinLockAcquire(&slot->mutex);
			slot->ctl.restarts = restarts + 1;
			(void) sdp_slot_transition_locked(slot, SDP_FLOW_RESTARTING);
			slot->ctl.next_start_at = next;
			SpinLockRelease(&slot->mutex);
			if (slot_handles[s] != NULL)
				pfree(slot_handles[s]);
			slot_handles[s] = NULL;
			actions[nactions++] = (SlotAction) {SLOT_RESTARTING, s, NULL, backoff};
		}
	}

	SdpShmem->nwaiting = 0;
	nfree = sdp_slots_free();
	quota = sdp_role_worker_quota();
	for (int i = 0; i < nflows; i++)
	{
		WantedFlow *f = &flows[i];
		int			missing = 0;
		bool		over_quota;

		if (!f->wanted || f->leaving)
			continue;
		for (int k = 0; k < f->workers; k++)
			missing += (f->have & (UINT64CONST(1) << k)) == 0;
		if (missing == 0)
			continue;
		/* a role's flows run at most sdp.max_workers_per_role workers: the others' flows get slots too */
		over_quota = quota > 0 && !f->owner_super && role_workers(flows, nflows, f->owner) + missing > quota;
		if (missing > nfree || over_quota)
		{
			/* sdp.flow_status shows it waiting, with the reason */
			if (SdpShmem->nwaiting < SDP_MAX_WAITING)
			{
				strlcpy(SdpShmem->waiting[SdpShmem->nwaiting], f->name, NAMEDATALEN);
				SdpShmem->waiting_workers[SdpShmem->nwaiting] = missing;
				SdpShmem->waiting_owner[SdpShmem->nwaiting] = f->owner;
				SdpShmem->waiting_quota[SdpShmem->nwaiting] = over_quota ? quota : 0;
				SdpShmem->nwaiting++;
			}
			if (over_quota)
				continue;
			if (waiting_flow == NULL)
			{
				waiting_flow = f->name;
				waiting_missing = missing;
				need_slots = nfree;
			}
			continue;
		}
		for (int k = 0; k < f->workers; k++)
		{
			int			s;

			if (f->have & (UINT64CONST(1) << k))
				continue;
			s = sdp_slot_allocate(f->name, k, f->workers);
			Assert(s >= 0);
			SdpShmem->slots[s].decl_hash = f->decl_hash;
			f->have |= UINT64CONST(1) << k;
			nfree--;
			actions[nactions++] = (SlotAction) {SLOT_START, s, f, 0};
		}
	}
	LWLockRelease(SdpShmem->lock);

	/* 3. act, without the lock */
	for (int i = 0; i < nactions; i++)
	{
		SlotAction *a = &actions[i];

		switch (a->kind)
		{
			case SLOT_START:
				start_worker(a->slotno, a->flow);
				break;
			case SLOT_STOP:
				stop_worker(a->slotno, &views[a->slotno]);
				break;
			case SLOT_RESTARTING:
				ereport(LOG,
						(errmsg("sdp flow \"%s\" worker exited unexpectedly, restarting in %d ms",
								SdpShmem->slots[a->slotno].name, a->backoff_ms)));
				break;
		}
	}
	if (waiting_flow != NULL && !warned_max_flows)
	{
		ereport(WARNING,
				(errmsg("sdp flow \"%s\" cannot start: it needs %d flow worker slots, and %d of the %d are free",
						waiting_flow, waiting_missing, need_slots, SdpShmem->max_flows),
				 errhint("Raise sdp.max_flows and restart the server, or stop another flow.")));
		warned_max_flows = true;
	}

	CommitTransactionCommand();
}

/*
 * Stop every worker and free every slot (the extension was dropped): the
 * slots whose worker has gone are freed under the lock, the others are
 * asked to stop after it (and freed at a later pass, once gone).
 */
static void
launcher_stop_all(void)
{
	TimestampTz now = GetCurrentTimestamp();
	SlotView   *views = palloc0(sizeof(SlotView) * SdpShmem->max_flows);
	bool	   *stop = palloc0(sizeof(bool) * SdpShmem->max_flows);

	for (int s = 0; s < SdpShmem->max_flows; s++)
	{
		if (!SdpShmem->slots[s].in_use)
			continue;
		slot_view(&SdpShmem->slots[s], &views[s]);
		stop[s] = views[s].state != SDP_FLOW_RESTARTING && !worker_gone(s, &views[s], now);
	}

	LWLockAcquire(SdpShmem->lock, LW_EXCLUSIVE);
	for (int s = 0; s < SdpShmem->max_flows; s++)
	{
		if (!SdpShmem->slots[s].in_use || stop[s])
			continue;
		if (slot_handles[s] != NULL)
			pfree(slot_handles[s]);
		slot_handles[s] = NULL;
		slot_flow_ids[s] = 0;
		sdp_slot_free(s);
	}
	LWLockRelease(SdpShmem->lock);

	for (int s = 0; s < SdpShmem->max_flows; s++)
		if (stop[s])
			stop_worker(s, &views[s]);
	pfree(views);
	pfree(stop);
}

/*
 * Delete one batch of the dead letters created before cutoff, in a short
 * transaction of its own, as the catalogs' owner.  It never waits: when
 * someone holds a lock on sdp.dead_letters that conflicts, nothing is done
 * this time (returns -1); rows locked by others (their owner deleting them)
 * are left to them.  Returns the number of rows deleted.
 */
#define SDP_PRUNE_LOCK_TIMEOUT_MS 100	/* the prune's lock_timeout */

static int64
prune_dead_letters_batch(TimestampTz cutoff)
{
	SdpCatalogScope scope;
	Oid			argtypes[2] = {TIMESTAMPTZOID, INT4OID};
	Datum		values[2] = {TimestampTzGetDatum(cutoff), Int32GetDatum(SDP_PRUNE_BATCH_ROWS)};
	Oid			relid;
	int64		deleted = -1;

	sdp_start_transaction();
	/*
	 * Never wait for a lock: the DELETE takes others than the table's (its
	 * indexes, the catalogs), and a DROP EXTENSION holding one of them while
	 * it waits for the table ended in a deadlock (test 005's uninstall).
	 * Past SDP_PRUNE_LOCK_TIMEOUT_MS the batch gives up; the next pruning
	 * tries again.
	 */
	(void) set_config_option("lock_timeout", CppAsString2(SDP_PRUNE_LOCK_TIMEOUT_MS), PGC_SUSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	sdp_catalog_enter(&scope);
	relid = RangeVarGetRelidExtended(makeRangeVar(SDP_SCHEMA, "dead_letters", -1), RowExclusiveLock,
									 RVR_MISSING_OK | RVR_SKIP_LOCKED, NULL, NULL);
	if (OidIsValid(relid))
	{
		if (SPI_execute_with_args("DELETE FROM sdp.dead_letters WHERE ctid = ANY (ARRAY("
								  "  SELECT ctid FROM sdp.dead_letters WHERE created_at < $1"
								  "   LIMIT $2 FOR UPDATE SKIP LOCKED))",
								  2, argtypes, values, NULL, false, 0) != SPI_OK_DELETE)
			elog(ERROR, "could not delete old rows of sdp.dead_letters");
		deleted = (int64) SPI_processed;
	}
	sdp_catalog_leave(&scope);
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();
	return deleted;
}

static void
prune_error_context(void *arg)
{
	errcontext("sdp launcher deleting dead letters older than %s", (const char *) arg);
}

/*
 * Delete the dead letters older than sdp.dead_letter_retention, when a
 * pruning is due (every sdp.dead_letter_prune_interval), in batches of
 * short transactions.  An error is logged, and the next pruning tries
 * again; the launcher goes on with its flows.
 */
static void
launcher_prune_dead_letters(void)
{
	TimestampTz now;
	TimestampTz cutoff;
	MemoryContext cxt = CurrentMemoryContext;
	ErrorContextCallback errcb;
	char	   *cutoff_text;
	volatile int64 total = 0;
	volatile bool more = false;

	if (sdp_dead_letter_retention_s == 0)
		return;					/* kept for ever */
	now = GetCurrentTimestamp();
	if (now < next_prune_at)
		return;
	next_prune_at = TimestampTzPlusMilliseconds(now, (int64) sdp_dead_letter_prune_interval_s * 1000);
	cutoff = now - (int64) sdp_dead_letter_retention_s * USECS_PER_SEC;
	cutoff_text = sdp_timestamp_text(cutoff);

	pgstat_report_activity(STATE_RUNNING, "deleting old dead letters");
	errcb.callback = prune_error_context;
	errcb.arg = cutoff_text;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;
	PG_TRY();
	{
		for (int i = 0; i < SDP_PRUNE_BATCHES_PER_PASS; i++)
		{
			int64		n = prune_dead_letters_batch(cutoff);

			total += Max(n, 0);
			more = (n == SDP_PRUNE_BATCH_ROWS);
			if (!more)
				break;
			CHECK_FOR_INTERRUPTS();
		}
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		/* log it (a lock not had at once quietly), roll back, and go on: the next pruning tries again */
		HOLD_INTERRUPTS();
		error_context_stack = errcb.previous;
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		if (edata->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE)
			ereport(DEBUG1, (errmsg("sdp launcher: dead letters not deleted, a lock was taken: %s", edata->message)));
		else
			EmitErrorReport();
		AbortOutOfAnyTransaction();
		FlushErrorState();
		RESUME_INTERRUPTS();
		more = false;
	}
	PG_END_TRY();
	error_context_stack = errcb.previous;
	MemoryContextSwitchTo(cxt);
	/* a background worker's table counts reach autovacuum only when it reports them */
	pgstat_report_stat(true);

	if (more)
		next_prune_at = now;	/* more to delete: go on after the next reconciliation */
	if (total > 0)
		ereport(LOG,
				(errmsg_plural("sdp launcher deleted " INT64_FORMAT " dead letter older than %s",
							   "sdp launcher deleted " INT64_FORMAT " dead letters older than %s",
							   (unsigned long) total, total, cutoff_text),
				 errdetail("sdp.dead_letter_retention is %d s.", sdp_dead_letter_retention_s)));
	pfree(cutoff_text);
}

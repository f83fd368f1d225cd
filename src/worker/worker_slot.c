/*
 * worker_slot.c
 *		What a flow worker publishes in its slot in shared memory (its state,
 *		errors, broker status, partitions and offsets), and how it waits:
 *		interruptibly, answering stop requests and configuration reloads.
 *
 * Everything here is below the rest of the worker: the loop (worker.c), its
 * start (worker_start.c) and the batch's stages call into it, and it calls
 * none of them.  A worker that must end does it here too: failed (the
 * failure persisted in sdp.flows first), or stopped on request.
 */
#include "worker/worker_slot.h"
#include "compat.h"
#include "decl/catalog.h"
#include "kafka/kafka_properties.h"
#include "shmem/slots.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"

/* the wait event pg_stat_activity shows (sdp_wait_event) */
static uint32 wait_backoff = 0;

static char refused_host[256];	/* the last broker the resolver refused (sdp_worker_report_refused_host) */

/* Waiting for a broker to answer (sdp_worker_wait_for_broker): since when, last logged, the state before. */
static struct
{
	TimestampTz since;
	TimestampTz logged;
	SdpFlowState state;
}			broker_wait;

/* Record an error in the slot, for sdp.flow_status. */
void
sdp_worker_set_error(FlowWorker *w, const char *message)
{
	TimestampTz now = GetCurrentTimestamp();

	SpinLockAcquire(&w->slot->mutex);
	strlcpy(w->slot->ctl.last_error, message, SDP_ERROR_LEN);
	w->slot->ctl.last_error_at = now;
	SpinLockRelease(&w->slot->mutex);
}

/* Record whether the broker answers, and its last error, in the slot. */
void
sdp_worker_set_broker(FlowWorker *w, bool ok, const char *error)
{
	TimestampTz now = GetCurrentTimestamp();

	SDP_SLOT_STATS_BEGIN_WRITE(w->slot);
	w->slot->stats.broker_ok = ok;
	if (error)
	{
		strlcpy(w->slot->stats.broker_error, error, SDP_ERROR_LEN);
		w->slot->stats.broker_error_at = now;
	}
	SDP_SLOT_STATS_END_WRITE(w->slot);
}

/*
 * The worker is alive: it passed its loop, or waits for something it says
 * (sdp_worker_wait).  Published at most once a second, for the status: a
 * worker whose alive_at falls behind by sdp.stall_timeout is in one batch
 * that long, and shows 'stalled' instead of 'running' (status.c).
 */
void
sdp_worker_alive(FlowWorker *w)
{
	static TimestampTz published = 0;
	TimestampTz now = GetCurrentTimestamp();

	if (now - published < USECS_PER_SEC)
		return;
	published = now;
	SDP_SLOT_STATS_BEGIN_WRITE(w->slot);
	w->slot->stats.alive_at = now;
	SDP_SLOT_STATS_END_WRITE(w->slot);
}

/*
 * The worker cannot go on until its source's brokers answer (what: what it
 * cannot do; error: why): the flow is retrying, with the reason in the
 * status, and in the log when the wait starts and every minute it lasts;
 * then a second's wait.  Called in a loop, outside any transaction, until
 * they answer; then sdp_worker_broker_answered.
 */
void
sdp_worker_wait_for_broker(FlowWorker *w, const char *what, const char *error)
{
	TimestampTz now = GetCurrentTimestamp();
	char	   *msg;

	/* a broker the cluster advertised that the owner may not reach is the likely reason */
	sdp_worker_report_refused_host(w);
	if (refused_host[0] != '\0')
		error = psprintf("%s (broker %s is not in sdp.allowed_hosts: the flow's clients do not connect to it)",
						 error, refused_host);
	msg = psprintf("%s: source \"%s\" (brokers %s): %s; trying again every second",
				   what, w->source.name, w->source.bootstrap_servers, error);
	if (broker_wait.since == 0 || now >= TimestampTzPlusMilliseconds(broker_wait.logged, 60000))
	{
		ereport(LOG,
				(errmsg("sdp flow \"%s\" %s", w->args.name, msg),
				 errhint("Check that the brokers can be reached from the database server and that topic \"%s\" exists.",
						 w->source.topic)));
		broker_wait.logged = now;
	}
	if (broker_wait.since == 0)
	{
		broker_wait.since = now;
		SpinLockAcquire(&w->slot->mutex);
		broker_wait.state = w->slot->ctl.state;
		SpinLockRelease(&w->slot->mutex);
	}
	sdp_worker_set_broker(w, false, error);
	sdp_worker_set_error(w, msg);
	sdp_worker_set_state(w, SDP_FLOW_RETRYING, false);
	pfree(msg);
	sdp_worker_wait(w, 1000);
}

/* The brokers answered after sdp_worker_wait_for_broker: the flow is in its state before, without the error. */
void
sdp_worker_broker_answered(FlowWorker *w)
{
	if (broker_wait.since == 0)
		return;
	ereport(LOG,
			(errmsg("sdp flow \"%s\": the brokers of source \"%s\" answered after %ld s",
					w->args.name, w->source.name, (long) ((GetCurrentTimestamp() - broker_wait.since) / USECS_PER_SEC))));
	/* back to starting or running, whichever it was (a stop the launcher asked for meanwhile stays) */
	sdp_worker_set_state(w, broker_wait.state == SDP_FLOW_STARTING ? SDP_FLOW_STARTING : SDP_FLOW_RUNNING,
						 true);
	broker_wait.since = 0;
}

/* Sleep up to timeout_ms, staying responsive to stop requests and postmaster death. */
void
sdp_worker_wait(FlowWorker *w, long timeout_ms)
{
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 timeout_ms, sdp_wait_event(&wait_backoff, "SdpFlowBackoff"));
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
	sdp_worker_alive(w);
	/* a reload during a backoff, a restore or a broker wait applies now, not after it */
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
	}
	sdp_worker_check_stop_request(w);
}

/*
 * Stop the flow in the failed state: persist the error in sdp.flows (so the
 * launcher does not restart it, even after a server restart) and exit.
 * Called outside any transaction.
 */
void
sdp_worker_fail(FlowWorker *w, const char *message)
{
	SdpCatalogScope scope;
	Oid			argtypes[2] = {INT8OID, TEXTOID};
	Datum		values[2];

	ereport(LOG,
			(errmsg("sdp flow \"%s\" failed: %s", w->args.name, message),
			 errhint("Fix the cause, then run SELECT sdp_start_flow('%s').", w->args.name)));
	sdp_worker_set_error(w, message);

	sdp_start_transaction();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	sdp_catalog_enter(&scope);
	values[0] = Int64GetDatum(w->args.flow_id);
	values[1] = CStringGetTextDatum(message);
	if (SPI_execute_with_args("UPDATE sdp.flows SET failed_at = now(), last_error = $2 WHERE id = $1",
							  2, argtypes, values, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not record the failure of flow \"%s\"", w->args.name);
	sdp_catalog_leave(&scope);
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();

	(void) sdp_slot_transition(w->slot, SDP_FLOW_FAILED);
	sdp_worker_exit_expected(w);
}

/* Exit because the flow is not wanted (dropped, stopped, failed): the launcher does not restart it. */
void
sdp_worker_exit_expected(FlowWorker *w)
{
	SpinLockAcquire(&w->slot->mutex);
	w->slot->ctl.exit_expected = true;
	SpinLockRelease(&w->slot->mutex);
	proc_exit(0);
}

/*
 * A broker name the owner may not connect to (sdp.allowed_hosts), which
 * the cluster advertised: said in the log and the status (it is left out,
 * and the flow goes on with the brokers it may reach).
 */
void
sdp_worker_report_refused_host(FlowWorker *w)
{
	char		host[256];

	if (kafka_take_refused_host(host, sizeof(host)))
	{
		char	   *msg = psprintf("broker %s is not in sdp.allowed_hosts: the flow's clients do not connect to it", host);

		if (strcmp(host, refused_host) != 0)
			ereport(LOG,
					(errmsg("sdp flow \"%s\": %s", w->args.name, msg),
					 errhint("A superuser may add the host to sdp.allowed_hosts, if the cluster's brokers are to be reached there.")));
		strlcpy(refused_host, host, sizeof(refused_host));
		/* the error, not a broker down: the others may serve the flow */
		sdp_worker_set_broker(w, !kafka_source_is_down(w->kafka), msg);
		pfree(msg);
	}
}

/*
 * A launcher that did not start this worker (it restarted since) has no
 * handle to terminate it with: it asks through the slot and sets our latch.
 */
void
sdp_worker_check_stop_request(FlowWorker *w)
{
	bool		stop;

	SpinLockAcquire(&w->slot->mutex);
	stop = w->slot->ctl.stop_requested;
	SpinLockRelease(&w->slot->mutex);
	if (stop)
	{
		ereport(LOG, (errmsg("sdp flow \"%s\" stopping at the launcher's request", w->args.name)));
		sdp_worker_exit_expected(w);	/* worker_on_exit commits a sink's open transaction */
	}
}

/*
 * The flow's state in the slot: starting, running, or retrying (unless the
 * launcher is stopping it).
 */
void
sdp_worker_set_state(FlowWorker *w, SdpFlowState state, bool clear_error)
{
	Assert(state == SDP_FLOW_STARTING || state == SDP_FLOW_RUNNING || state == SDP_FLOW_RETRYING);
	SpinLockAcquire(&w->slot->mutex);
	(void) sdp_slot_transition_locked(w->slot, state);
	if (clear_error)
	{
		w->slot->ctl.last_error[0] = '\0';
		w->slot->ctl.last_error_at = 0;
	}
	SpinLockRelease(&w->slot->mutex);
}

/*
 * At a worker's first commit, the error an earlier worker of the flow left
 * in the slot (why it exited, why it was restarted) is over; one this
 * worker set since it started (a retention reset, say) stays.
 */
void
sdp_worker_clear_earlier_error(FlowWorker *w)
{
	SpinLockAcquire(&w->slot->mutex);
	if (w->slot->ctl.last_error[0] != '\0' && w->slot->ctl.last_error_at < w->slot->ctl.started_at)
	{
		w->slot->ctl.last_error[0] = '\0';
		w->slot->ctl.last_error_at = 0;
	}
	SpinLockRelease(&w->slot->mutex);
}

/* Show the assigned partitions and their committed offsets in the slot. */
void
sdp_worker_publish_committed(FlowWorker *w)
{
	int			n = Min(w->parts.n, SDP_MAX_PARTITIONS);
	SdpFlowSlot *slot = w->slot;

	SDP_SLOT_STATS_BEGIN_WRITE(slot);
	if (slot->stats.npartitions != n)
	{
		for (int i = slot->stats.npartitions; i < n; i++)
			slot->stats.partitions[i].high_watermark = -1;
		slot->stats.npartitions = n;
	}
	for (int i = 0; i < n; i++)
	{
		slot->stats.partitions[i].partition = w->parts.ids[i];
		slot->stats.partitions[i].committed = w->parts.next[i];
	}
	SDP_SLOT_STATS_END_WRITE(slot);
}

/*
 * Show the broker's high watermarks (as librdkafka last saw them) in the
 * slot.  Read into a local array first: librdkafka takes its own locks,
 * which must not happen inside the write of the slot's stats (a critical
 * section of stores).
 */
void
sdp_worker_publish_high_watermarks(FlowWorker *w)
{
	int			n = Min(w->parts.n, SDP_MAX_PARTITIONS);
	int64	   *hw = palloc(sizeof(int64) * Max(n, 1));
	SdpFlowSlot *slot = w->slot;

	for (int i = 0; i < n; i++)
		hw[i] = Max(kafka_source_cached_high_watermark(w->kafka, w->parts.ids[i]), w->parts.next[i]);
	SDP_SLOT_STATS_BEGIN_WRITE(slot);
	for (int i = 0; i < n && i < slot->stats.npartitions; i++)
		slot->stats.partitions[i].high_watermark = hw[i];
	SDP_SLOT_STATS_END_WRITE(slot);
	pfree(hw);
}

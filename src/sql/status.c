/*
 * status.c
 *		SQL-callable monitoring of flows: what their workers publish in
 *		shared memory (the view sdp.flow_status joins it with the catalogs),
 *		and the latest progress report of a flow.
 */
#include "sdp.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/resowner.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "decl/flow.h"
#include "kafka/relay.h"
#include "stateful/registry.h"
#include "stateful/state_store.h"
#include "decl/catalog.h"
#include "decl/flow_options.h"
#include "shmem/metrics.h"
#include "shmem/slots.h"
#include "sql/roles.h"

PG_FUNCTION_INFO_V1(sdp_flow_runtime);
PG_FUNCTION_INFO_V1(sdp_flow_worker_runtime);
PG_FUNCTION_INFO_V1(sdp_flow_partitions);
PG_FUNCTION_INFO_V1(sdp_flow_progress);
PG_FUNCTION_INFO_V1(sdp_flow_state);
PG_FUNCTION_INFO_V1(sdp_sink_relays);

#define RUNTIME_COLS 22

static Datum
timestamp_or_null(TimestampTz ts, bool *isnull)
{
	*isnull = (ts == 0);
	return TimestampTzGetDatum(ts);
}

static Datum
text_or_null(const char *s, bool *isnull)
{
	*isnull = (s[0] == '\0');
	return *isnull ? (Datum) 0 : CStringGetTextDatum(s);
}

/*
 * What holds a running worker up, when something does: the state the
 * status shows instead of its own, and why.
 */
typedef struct Holdup
{
	const char *state;			/* "waiting" or "stalled"; NULL: nothing */
	char	   *why;
} Holdup;

/*
 * Whether a running flow's worker is held up: waiting for a lock (a flow
 * blocked behind someone's lock shows 'waiting', not 'running': the
 * worker's published wait event, read as pg_stat_activity does), or in one
 * batch for longer than sdp.stall_timeout ('stalled': a slow transform, or
 * a call that does not return; the worker stamps alive_at each time it
 * passes its loop or a wait of its own).
 */
static bool
worker_held_up(const SdpFlowSlot *copy, TimestampTz now, Holdup *h)
{
	PGPROC	   *proc;
	uint32		wait_event_info;
	TimestampTz since;

	h->state = NULL;
	h->why = NULL;
	if (copy->ctl.pid == 0 ||
		(copy->ctl.state != SDP_FLOW_RUNNING && copy->ctl.state != SDP_FLOW_RETRYING))
		return false;
	proc = BackendPidGetProc(copy->ctl.pid);
	if (proc == NULL)
		return false;
	wait_event_info = *(volatile uint32 *) &proc->wait_event_info;
	if ((wait_event_info & 0xFF000000) == PG_WAIT_LOCK)
	{
		h->state = "waiting";
		h->why = psprintf("waiting for a lock (%s)", pgstat_get_wait_event(wait_event_info));
		return true;
	}

	/* a worker of an earlier start may have left its stamp: the start counts */
	since = Max(copy->stats.alive_at, copy->ctl.started_at);
	if (copy->ctl.state == SDP_FLOW_RUNNING && sdp_stall_timeout_s > 0 && since != 0 &&
		now - since >= (int64) sdp_stall_timeout_s * USECS_PER_SEC)
	{
		h->state = "stalled";
		h->why = psprintf("the worker has been in one batch for %lld s, past sdp.stall_timeout (%d s): "
						  "a slow transform, handler or trigger, or a call that does not return "
						  "(pg_stat_activity shows what it runs; sdp_stop_flow stops it at its next interrupt check)",
						  (long long) ((now - since) / USECS_PER_SEC), sdp_stall_timeout_s);
		return true;
	}
	return false;
}

/*
 * The rows of enabled flows that have no slot because sdp.max_flows flows
 * run already: 'waiting', with the reason.
 */
static void
runtime_waiting_rows(ReturnSetInfo *rsinfo)
{
	char		(*names)[NAMEDATALEN] = palloc(sizeof(char[NAMEDATALEN]) * SDP_MAX_WAITING);
	int		   *needs = palloc(sizeof(int) * SDP_MAX_WAITING);
	Oid		   *owners = palloc(sizeof(Oid) * SDP_MAX_WAITING);
	int		   *quotas = palloc(sizeof(int) * SDP_MAX_WAITING);
	int			n;

	LWLockAcquire(SdpShmem->lock, LW_SHARED);
	n = SdpShmem->nwaiting;
	memcpy(names, SdpShmem->waiting, sizeof(char[NAMEDATALEN]) * n);
	memcpy(needs, SdpShmem->waiting_workers, sizeof(int) * n);
	memcpy(owners, SdpShmem->waiting_owner, sizeof(Oid) * n);
	memcpy(quotas, SdpShmem->waiting_quota, sizeof(int) * n);
	LWLockRelease(SdpShmem->lock);

	for (int w = 0; w < n; w++)
	{
		Datum		values[RUNTIME_COLS];
		bool		nulls[RUNTIME_COLS];

		for (int c = 0; c < RUNTIME_COLS; c++)
		{
			values[c] = (Datum) 0;
			nulls[c] = true;
		}
		values[0] = CStringGetTextDatum(names[w]);
		nulls[0] = false;
		values[1] = CStringGetTextDatum("waiting");
		nulls[1] = false;
		if (quotas[w] > 0)
		{
			char	   *role = GetUserNameFromId(owners[w], true);

			values[13] = CStringGetTextDatum(psprintf("its %d %s would take role \"%s\" past sdp.max_workers_per_role (%d flow workers at once): "
													  "the flow starts when the role's other flows leave room",
													  needs[w], needs[w] == 1 ? "worker" : "workers", role ? role : "?", quotas[w]));
		}
		else if (needs[w] == 1)
			values[13] = CStringGetTextDatum(psprintf("all %d flow slots are in use (sdp.max_flows): the flow starts when one is free",
													  SdpShmem->max_flows));
		else
			values[13] = CStringGetTextDatum(psprintf("its %d workers need %d free flow slots of the %d (sdp.max_flows): the flow starts when enough are free",
													  needs[w], needs[w], SdpShmem->max_flows));
		nulls[13] = false;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
}

/*
 * On a server in recovery (a streaming standby) no flow runs: the launcher
 * starts when recovery ends (BgWorkerStart_RecoveryFinished), so a promoted
 * standby starts its flows from the offsets and checkpoints it replicated.
 * Meanwhile each enabled flow shows 'standby', with the reason.
 */
static void
runtime_standby_rows(ReturnSetInfo *rsinfo)
{
	SdpCatalogScope scope;

	if (!RecoveryInProgress())
		return;
	SPI_connect();
	sdp_catalog_enter(&scope);
	if (SPI_execute("SELECT name FROM sdp.flows WHERE enabled AND failed_at IS NULL ORDER BY name",
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read sdp.flows");
	sdp_catalog_leave(&scope);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		Datum		values[RUNTIME_COLS];
		bool		nulls[RUNTIME_COLS];

		for (int c = 0; c < RUNTIME_COLS; c++)
		{
			values[c] = (Datum) 0;
			nulls[c] = true;
		}
		values[0] = CStringGetTextDatum(SPI_getvalue(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1));
		nulls[0] = false;
		values[1] = CStringGetTextDatum("standby");
		nulls[1] = false;
		values[13] = CStringGetTextDatum("this server is in recovery (a standby): flows run on the primary, "
										 "and start here from the replicated offsets when this server is promoted");
		nulls[13] = false;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	SPI_finish();
}

/*
 * Whether the current role may read what a flow's worker saw of its data:
 * its error texts quote the messages' values.  The rule of pg_stat_activity's
 * query texts: the owner's roles, pg_read_all_stats, superusers.  Others
 * see that there is an error, not what it says.
 */
static bool
may_read_flow_errors(Oid owner)
{
	Oid			me = GetUserId();

	return superuser() ||
		(OidIsValid(owner) && has_privs_of_role(me, owner)) ||
		has_privs_of_role(me, ROLE_PG_READ_ALL_STATS);
}

/*
 * The slots of one flow, copied out (sdp_slot_copy) in worker order.  A
 * flow with the option workers = N has N slots.
 */
typedef struct FlowSlots
{
	int			n;
	SdpFlowSlot **slots;
} FlowSlots;

/* Copy the slots of the named flow.  Caller holds SdpShmem->lock. */
static void
copy_flow_slots(const char *name, FlowSlots *fs)
{
	fs->n = 0;
	fs->slots = palloc(sizeof(SdpFlowSlot *) * SdpShmem->max_flows);
	for (int s = sdp_slot_next(name, -1); s >= 0; s = sdp_slot_next(name, s))
	{
		SdpFlowSlot *copy = palloc(sizeof(SdpFlowSlot));
		int			i;

		sdp_slot_copy(s, copy);
		/* insertion by worker number */
		for (i = fs->n; i > 0 && fs->slots[i - 1]->worker_no > copy->worker_no; i--)
			fs->slots[i] = fs->slots[i - 1];
		fs->slots[i] = copy;
		fs->n++;
	}
}

/* The names of the flows that have slots, each once.  Caller holds SdpShmem->lock. */
static List *
flows_with_slots(void)
{
	List	   *names = NIL;

	for (int s = 0; s < SdpShmem->max_flows; s++)
		if (SdpShmem->slots[s].in_use && sdp_slot_find(SdpShmem->slots[s].name) == s)
			names = lappend(names, pstrdup(SdpShmem->slots[s].name));
	return names;
}

/*
 * How bad a worker's state is, to show a flow's worst: a flow is failed if
 * one of its workers is, else retrying, waiting, restarting, stopping,
 * starting, running.
 */
static int
state_rank(SdpFlowState state, bool held_up)
{
	if (held_up)
		return 5;
	switch (state)
	{
		case SDP_FLOW_FAILED:
			return 7;
		case SDP_FLOW_RETRYING:
			return 6;
		case SDP_FLOW_RESTARTING:
			return 4;
		case SDP_FLOW_STOPPING:
			return 3;
		case SDP_FLOW_STARTING:
			return 2;
		case SDP_FLOW_RUNNING:
			return 1;
		case SDP_FLOW_STOPPED:
			return 0;
	}
	return 0;
}

/*
 * A worker's error text, as the current role may read it (as in
 * pg_stat_activity); what holds it up when it has none.
 */
static Datum
error_text(const SdpFlowSlot *copy, const Holdup *h, bool *isnull)
{
	*isnull = false;
	if (h != NULL && h->state != NULL && copy->ctl.last_error[0] == '\0')
		return CStringGetTextDatum(h->why);
	if (copy->ctl.last_error[0] != '\0' && !may_read_flow_errors(copy->ctl.owner))
		return CStringGetTextDatum(SDP_INSUFFICIENT_PRIVILEGE);
	return text_or_null(copy->ctl.last_error, isnull);
}

static TimestampTz
min_time(TimestampTz a, TimestampTz b)
{
	if (a == 0)
		return b;
	if (b == 0)
		return a;
	return Min(a, b);
}

/*
 * sdp_flow_runtime(): one row per flow that has worker slots, with what its
 * workers published: their sums, the worst of their states (and the error
 * of the worker in it, or the latest), the first live worker's pid; and
 * one row per enabled flow waiting for slots; on a standby, one row per
 * enabled flow in state 'standby'.
 */
Datum
sdp_flow_runtime(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	List	   *names;
	ListCell   *lc;
	TimestampTz now = GetCurrentTimestamp();

	sdp_require_shmem();
	InitMaterializedSRF(fcinfo, 0);

	LWLockAcquire(SdpShmem->lock, LW_SHARED);
	names = flows_with_slots();
	LWLockRelease(SdpShmem->lock);

	foreach(lc, names)
	{
		Datum		values[RUNTIME_COLS];
		bool		nulls[RUNTIME_COLS];
		int			i = 0;
		FlowSlots	fs;
		SdpFlowSlot *worst = NULL;
		SdpFlowSlot *err = NULL;
		SdpFlowSlot *broker = NULL;
		Holdup		worst_holdup = {NULL, NULL};
		int			worst_rank = -1;
		pid_t		pid = 0;
		uint64		messages_read = 0,
					rows_written = 0,
					rows_filtered = 0,
					rows_dead_lettered = 0,
					rows_skipped = 0,
					batches = 0,
					rows_late = 0,
					state_bytes = 0,
					timers_fired = 0;
		TimestampTz last_commit_at = 0,
					started_at = 0,
					last_checkpoint_at = 0,
					watermark = 0;
		bool		broker_ok = true,
					has_state = false;
		int			restarts = 0;

		LWLockAcquire(SdpShmem->lock, LW_SHARED);
		copy_flow_slots((const char *) lfirst(lc), &fs);
		LWLockRelease(SdpShmem->lock);
		if (fs.n == 0)
			continue;			/* freed meanwhile */

		for (int k = 0; k < fs.n; k++)
		{
			SdpFlowSlot *c = fs.slots[k];
			Holdup		h;
			int			rank = state_rank(c->ctl.state, worker_held_up(c, now, &h));

			if (rank > worst_rank)
			{
				worst_rank = rank;
				worst = c;
				worst_holdup = h;
			}
			if (pid == 0)
				pid = c->ctl.pid;
			messages_read += c->stats.messages_read;
			rows_written += c->stats.rows_written;
			rows_filtered += c->stats.rows_filtered;
			rows_dead_lettered += c->stats.rows_dead_lettered;
			rows_skipped += c->stats.rows_skipped;
			batches += c->stats.batches;
			rows_late += c->stats.rows_late;
			last_commit_at = Max(last_commit_at, c->stats.last_commit_at);
			started_at = min_time(started_at, c->ctl.started_at);
			restarts += c->ctl.restarts;
			if (c->stats.state_area != 0)
			{
				has_state = true;
				state_bytes += c->stats.state_bytes;
				timers_fired += c->stats.timers_fired;
			}
			last_checkpoint_at = min_time(last_checkpoint_at, c->stats.last_checkpoint_at);
			if (c->stats.watermark != 0 && c->stats.watermark != DT_NOBEGIN)
				watermark = min_time(watermark, c->stats.watermark);
			if (!c->stats.broker_ok)
				broker_ok = false;
			if (c->stats.broker_error[0] != '\0' &&
				(broker == NULL || c->stats.broker_error_at > broker->stats.broker_error_at))
				broker = c;
			if (c->ctl.last_error[0] != '\0' &&
				(err == NULL || c->ctl.last_error_at > err->ctl.last_error_at))
				err = c;
		}
		/* the error of the worker in the worst state, if it has one; else the latest */
		if (worst->ctl.last_error[0] != '\0' || worst_holdup.state != NULL)
			err = worst;

		memset(nulls, 0, sizeof(nulls));
		values[i++] = CStringGetTextDatum(worst->name);
		values[i++] = CStringGetTextDatum(worst_holdup.state ? worst_holdup.state : sdp_flow_state_name(worst->ctl.state));
		values[i] = Int32GetDatum(pid);
		nulls[i++] = (pid == 0);
		values[i++] = Int64GetDatum(messages_read);
		values[i++] = Int64GetDatum(rows_written);
		values[i++] = Int64GetDatum(rows_filtered);
		values[i++] = Int64GetDatum(rows_dead_lettered);
		values[i++] = Int64GetDatum(rows_skipped);
		values[i++] = Int64GetDatum(batches);
		values[i] = timestamp_or_null(last_commit_at, &nulls[i]);
		i++;
		values[i++] = BoolGetDatum(broker_ok);
		values[i] = broker ? CStringGetTextDatum(broker->stats.broker_error) : (Datum) 0;
		nulls[i++] = (broker == NULL);
		values[i] = timestamp_or_null(broker ? broker->stats.broker_error_at : 0, &nulls[i]);
		i++;
		if (err != NULL)
			values[i] = error_text(err, err == worst ? &worst_holdup : NULL, &nulls[i]);
		else
			nulls[i] = true;
		i++;
		values[i] = timestamp_or_null(err ? err->ctl.last_error_at : 0, &nulls[i]);
		i++;
		values[i] = timestamp_or_null(started_at, &nulls[i]);
		i++;
		values[i++] = Int32GetDatum(restarts);
		values[i] = Int64GetDatum(state_bytes);
		nulls[i++] = !has_state;
		values[i] = Int64GetDatum(timers_fired);
		nulls[i++] = !has_state;
		values[i] = timestamp_or_null(last_checkpoint_at, &nulls[i]);
		i++;
		values[i++] = Int64GetDatum(rows_late);
		values[i] = timestamp_or_null(watermark, &nulls[i]);
		i++;
		Assert(i == RUNTIME_COLS);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	runtime_waiting_rows(rsinfo);
	runtime_standby_rows(rsinfo);
	return (Datum) 0;
}

#define WORKER_COLS 16

/*
 * sdp_flow_worker_runtime(): one row per flow worker (the view
 * sdp.flow_workers): its flow, number, pid, state, partitions, lag and
 * counters, and its error as the current role may read it.
 */
Datum
sdp_flow_worker_runtime(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	List	   *names;
	ListCell   *lc;
	TimestampTz now = GetCurrentTimestamp();

	sdp_require_shmem();
	InitMaterializedSRF(fcinfo, 0);

	LWLockAcquire(SdpShmem->lock, LW_SHARED);
	names = flows_with_slots();
	LWLockRelease(SdpShmem->lock);

	foreach(lc, names)
	{
		FlowSlots	fs;

		LWLockAcquire(SdpShmem->lock, LW_SHARED);
		copy_flow_slots((const char *) lfirst(lc), &fs);
		LWLockRelease(SdpShmem->lock);

		for (int k = 0; k < fs.n; k++)
		{
			SdpFlowSlot *c = fs.slots[k];
			Holdup		h;
			Datum		values[WORKER_COLS];
			bool		nulls[WORKER_COLS];
			Datum	   *parts = palloc(sizeof(Datum) * Max(c->stats.npartitions, 1));
			int64		lag = 0;
			bool		lag_known = c->stats.npartitions > 0;
			int			i = 0;

			for (int p = 0; p < c->stats.npartitions; p++)
			{
				parts[p] = Int32GetDatum(c->stats.partitions[p].partition);
				if (c->stats.partitions[p].high_watermark < 0)
					lag_known = false;
				else
					lag += Max(c->stats.partitions[p].high_watermark - c->stats.partitions[p].committed, 0);
			}

			(void) worker_held_up(c, now, &h);
			memset(nulls, 0, sizeof(nulls));
			values[i++] = CStringGetTextDatum(c->name);
			values[i++] = Int32GetDatum(c->worker_no);
			values[i++] = Int32GetDatum(c->nworkers);
			values[i++] = CStringGetTextDatum(h.state ? h.state : sdp_flow_state_name(c->ctl.state));
			values[i] = Int32GetDatum(c->ctl.pid);
			nulls[i++] = (c->ctl.pid == 0);
			values[i++] = PointerGetDatum(construct_array(parts, c->stats.npartitions, INT4OID, 4, true, TYPALIGN_INT));
			values[i] = Int64GetDatum(lag);
			nulls[i++] = !lag_known;
			values[i++] = Int64GetDatum(c->stats.messages_read);
			values[i++] = Int64GetDatum(c->stats.rows_written);
			values[i++] = Int64GetDatum(c->stats.rows_dead_lettered);
			values[i++] = Int64GetDatum(c->stats.batches);
			values[i] = timestamp_or_null(c->stats.last_commit_at, &nulls[i]);
			i++;
			values[i] = error_text(c, &h, &nulls[i]);
			i++;
			values[i] = timestamp_or_null(c->ctl.last_error_at, &nulls[i]);
			i++;
			values[i] = timestamp_or_null(c->ctl.started_at, &nulls[i]);
			i++;
			values[i++] = Int32GetDatum(c->ctl.restarts);
			Assert(i == WORKER_COLS);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	return (Datum) 0;
}

/*
 * sdp_flow_partitions(flow): the partitions a running flow's workers
 * consume, with their committed offsets and high watermarks.
 */
Datum
sdp_flow_partitions(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	FlowSlots	fs;

	sdp_require_shmem();
	InitMaterializedSRF(fcinfo, 0);

	LWLockAcquire(SdpShmem->lock, LW_SHARED);
	copy_flow_slots(name, &fs);
	LWLockRelease(SdpShmem->lock);

	for (int k = 0; k < fs.n; k++)
	{
		SdpFlowSlot *copy = fs.slots[k];

		for (int p = 0; p < copy->stats.npartitions; p++)
		{
			Datum		values[3];
			bool		nulls[3] = {false, false, false};

			values[0] = Int32GetDatum(copy->stats.partitions[p].partition);
			values[1] = Int64GetDatum(copy->stats.partitions[p].committed);
			values[2] = Int64GetDatum(copy->stats.partitions[p].high_watermark);
			nulls[2] = copy->stats.partitions[p].high_watermark < 0;
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	return (Datum) 0;
}

static void
append_percentiles(StringInfo buf, const char *name, const SdpPercentiles *p)
{
	appendStringInfo(buf, "\"%s\": {\"P0\": %.3f, \"P50\": %.3f, \"P90\": %.3f, \"P95\": %.3f, \"P99\": %.3f, \"samples\": " INT64_FORMAT "}",
					 name, p->p0, p->p50, p->p90, p->p95, p->p99, p->samples);
}

/* Whether sdp.flows has a flow of that name. */
static bool
flow_declared(const char *name)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		args[1] = {CStringGetTextDatum(name)};
	SdpCatalogScope scope;
	bool		found;

	SPI_connect();
	sdp_catalog_enter(&scope);
	found = SPI_execute_with_args("SELECT 1 FROM sdp.flows WHERE name = $1", 1, argtypes, args, NULL, true, 1) == SPI_OK_SELECT &&
		SPI_processed == 1;
	sdp_catalog_leave(&scope);
	SPI_finish();
	return found;
}

/*
 * The progress of a flow: its workers' latest reports summed (counts,
 * rates, histograms), the latest timestamp, the longest interval; the
 * percentiles are read from the summed histograms.  Workers that have not
 * reported yet are left out; false when none has.
 */
static bool
merge_progress(FlowSlots *fs, SdpProgress *out, int *reporting)
{
	*reporting = 0;
	for (int k = 0; k < fs->n; k++)
	{
		SdpProgress *p = &fs->slots[k]->stats.progress;

		if (p->report_id == 0)
			continue;
		if ((*reporting)++ == 0)
		{
			*out = *p;
			continue;
		}
		out->report_id = Max(out->report_id, p->report_id);
		out->timestamp = Max(out->timestamp, p->timestamp);
		out->interval_s = Max(out->interval_s, p->interval_s);
		out->batches += p->batches;
		out->input_rows += p->input_rows;
		out->output_rows += p->output_rows;
		out->input_rows_per_s += p->input_rows_per_s;
		out->processed_rows_per_s += p->processed_rows_per_s;
		out->batch_ms_total += p->batch_ms_total;
		out->max_batch_rows = Max(out->max_batch_rows, p->max_batch_rows);
		out->fetcher_wakes += p->fetcher_wakes;
		sdp_histogram_merge(&out->processing_hist, &p->processing_hist);
		sdp_histogram_merge(&out->queuing_hist, &p->queuing_hist);
		sdp_histogram_merge(&out->e2e_hist, &p->e2e_hist);
	}
	if (*reporting > 1)
		sdp_progress_finish(out);
	return *reporting > 0;
}

/*
 * sdp_flow_progress(flow) -> jsonb: the latest progress report, shaped like
 * Spark's StreamingQueryProgress with Real-Time Mode latencies, summed over
 * the flow's workers; NULL until the running flow has completed its first
 * reporting interval (or while it is stopped); an error for a flow that is
 * not declared.
 */
Datum
sdp_flow_progress(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	FlowSlots	fs;
	SdpProgress *p = palloc(sizeof(SdpProgress));
	StringInfoData buf;
	SdpFlowState state = SDP_FLOW_STOPPED;
	int			worst_rank = -1;
	int			reporting;

	sdp_require_shmem();
	LWLockAcquire(SdpShmem->lock, LW_SHARED);
	copy_flow_slots(name, &fs);
	LWLockRelease(SdpShmem->lock);
	if (fs.n == 0 && !flow_declared(name))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("flow \"%s\" does not exist", name)));
	if (!merge_progress(&fs, p, &reporting))
		PG_RETURN_NULL();
	for (int k = 0; k < fs.n; k++)
		if (state_rank(fs.slots[k]->ctl.state, false) > worst_rank)
		{
			worst_rank = state_rank(fs.slots[k]->ctl.state, false);
			state = fs.slots[k]->ctl.state;
		}

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"flow\": ");
	escape_json(&buf, name);
	appendStringInfo(&buf, ", \"state\": \"%s\", \"reportId\": " INT64_FORMAT ", \"timestamp\": \"%s\", ",
					 sdp_flow_state_name(state), p->report_id,
					 timestamptz_to_str(p->timestamp));
	appendStringInfo(&buf, "\"workers\": %d, \"workersReporting\": %d, ", fs.n, reporting);
	appendStringInfo(&buf, "\"intervalSeconds\": %.3f, \"numBatches\": " INT64_FORMAT ", \"numInputRows\": " INT64_FORMAT ", \"numOutputRows\": " INT64_FORMAT ", ",
					 p->interval_s, p->batches, p->input_rows, p->output_rows);
	appendStringInfo(&buf, "\"inputRowsPerSecond\": %.1f, \"processedRowsPerSecond\": %.1f, \"avgBatchDurationMs\": %.3f, \"maxBatchRows\": " INT64_FORMAT ", ",
					 p->input_rows_per_s, p->processed_rows_per_s, p->batch_ms_avg, p->max_batch_rows);
	appendStringInfo(&buf, "\"fetcherWakes\": " INT64_FORMAT ", ", p->fetcher_wakes);
	appendStringInfoString(&buf, "\"latencies\": {");
	append_percentiles(&buf, "processingLatencyMs", &p->processing);
	appendStringInfoString(&buf, ", ");
	append_percentiles(&buf, "sourceQueuingLatencyMs", &p->queuing);
	appendStringInfoString(&buf, ", ");
	append_percentiles(&buf, "e2eLatencyMs", &p->e2e);
	appendStringInfoString(&buf, "}}");

	PG_RETURN_DATUM(DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data)));
}

typedef struct MapJson
{
	StringInfo	buf;
	const SdpOperator *op;
	bool		first;
} MapJson;

static void
append_member(const char *member, const void *value, void *arg)
{
	MapJson    *mj = arg;

	if (!mj->first)
		appendStringInfoString(mj->buf, ", ");
	mj->first = false;
	escape_json(mj->buf, member);
	appendStringInfoString(mj->buf, ": ");
	appendStringInfoString(mj->buf, mj->op->describe_map_value ? mj->op->describe_map_value(value) : "null");
}

static void
put_state_row(ReturnSetInfo *rsinfo, const char *key, const char *state, const char *json)
{
	Datum		values[3];
	bool		nulls[3] = {false, false, false};

	values[0] = CStringGetTextDatum(key);
	values[1] = CStringGetTextDatum(state);
	values[2] = DirectFunctionCall1(jsonb_in, CStringGetDatum(json));
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

static void put_state_row(ReturnSetInfo *rsinfo, const char *key, const char *state, const char *json);

/* A key's own state of an operator, as rows (reader_rows' callback). */
typedef struct ExtRows
{
	ReturnSetInfo *rsinfo;
	const char *key;
} ExtRows;

static void
put_ext_row(void *arg, const char *state, const char *json)
{
	ExtRows    *xr = arg;

	put_state_row(xr->rsinfo, xr->key, state, json);
}

/* One key's state, copied out of the store. */
typedef struct StateCopy
{
	SdpStateEntry entry;
	SdpStateMap *map;			/* a copy, or NULL */
	void	   *ext;			/* the operator's own state of the key (reader_copy), or NULL */
	int			store;			/* which store it was copied from (its reader) */
} StateCopy;

/*
 * Copy every key's state out of a running flow's store, in a subtransaction:
 * the worker may exit meanwhile and take its area with it, which means no
 * state to show (any other error is the caller's).  The copies go to cxt.
 * The dshash partition locks are held only while copying, never while rows
 * are formatted or written to the tuplestore, so a reader does not stall
 * the worker.  What is copied is at most the flow's state_memory_limit.
 */
static List *
copy_state(dsa_handle area, dshash_table_handle table, MemoryContext cxt, const SdpOperator *op,
		   Jsonb *options, void **reader)
{
	ResourceOwner owner = CurrentResourceOwner;
	List	   *volatile copies = NIL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		SdpStateStore *store = sdp_state_attach(area, table);
		dshash_seq_status status;
		SdpStateEntry *e;

		/* an operator's own state of keys: what the copies need, looked up before any lock */
		*reader = op->reader_begin ? op->reader_begin(options, store) : NULL;
		dshash_seq_init(&status, store->table, false);
		while ((e = dshash_seq_next(&status)) != NULL)
		{
			StateCopy  *c;

			if (sdp_state_entry_resting(e))
				continue;		/* no state: deleted at the next checkpoint */
			c = palloc(sizeof(StateCopy));

			memcpy(&c->entry, e, sizeof(SdpStateEntry));
			c->map = sdp_state_map_copy(store, e);
			c->ext = *reader && DsaPointerIsValid(e->ext) ? op->reader_copy(*reader, e) : NULL;
			copies = lappend(copies, c);
		}
		dshash_seq_term(&status);
		sdp_state_detach(store);

		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		if (edata->sqlerrcode != ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE)
			ReThrowError(edata);
		/* "could not attach to dynamic shared area": the worker has gone */
		copies = NIL;
	}
	PG_END_TRY();
	return copies;
}

/*
 * The current role may read the state of a flow owned by owner: the state
 * is the flow's data (its keys and values), so the rule is that of the
 * functions that act on a flow (the owner, a role that has its privileges,
 * a superuser), widened as pg_stat_activity's query texts are, to members
 * of pg_read_all_stats.
 */
static void
check_state_reader(Oid owner_oid, const char *owner, const char *name)
{
	Oid			me = GetUserId();

	if (superuser() ||
		(OidIsValid(owner_oid) && has_privs_of_role(me, owner_oid)) ||
		has_privs_of_role(me, ROLE_PG_READ_ALL_STATS))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied to read the state of flow \"%s\"", name),
			 errdetail("Flow \"%s\" belongs to role \"%s\", and its state holds the keys and values of its data.",
					   name, owner),
			 errhint("Read it as a member of role \"%s\", or as a member of pg_read_all_stats.", owner)));
}

/*
 * sdp_flow_state(flow): the live state of a running stateful flow, read from
 * its shared memory, every worker's: one row per key and state (each value
 * state, the map state, the pending timers), the value as jsonb.  No rows when the flow is
 * not running or has no operator.  Only for the roles check_state_reader
 * lets in.
 */
Datum
sdp_flow_state(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	SdpFlowSlot *copy = palloc(sizeof(SdpFlowSlot));
	const SdpOperator *op = NULL;
	MemoryContext cxt = CurrentMemoryContext;
	List	   *states;
	dsa_handle *areas;
	dshash_table_handle *tables;
	int			nstores = 0;
	ListCell   *lc;
	Oid			argtypes[1] = {TEXTOID};
	Datum		args[1] = {CStringGetTextDatum(name)};
	SdpCatalogScope scope;
	char	   *opname;
	bool		found;
	bool		isnull;
	Oid			owner;
	int			s;
	Jsonb	   *options = NULL;
	void	  **readers;
	bool	   *same_options;
	SdpOperator no_reader;
	bool		noticed = false;

	sdp_require_shmem();
	InitMaterializedSRF(fcinfo, 0);

	/* the flow's operator and owner, read with search_path pinned: the caller's operators must not match */
	SPI_connect();
	sdp_catalog_enter(&scope);
	found = SPI_execute_with_args(psprintf("SELECT operator, owner::text, %s, options FROM sdp.flows WHERE name = $1",
										   sdp_owner_oid_sql("owner")),
								  1, argtypes, args, NULL, true, 1) == SPI_OK_SELECT &&
		SPI_processed == 1;
	sdp_catalog_leave(&scope);
	if (!found)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("flow \"%s\" does not exist", name)));
	owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull));
	check_state_reader(isnull ? InvalidOid : owner,
					   SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2), name);
	opname = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	if (opname)
		op = sdp_find_operator(opname);
	if (op && op->reader_begin)
	{
		SdpFlowOptions opts;
		Datum		o = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &isnull);

		MemoryContextSwitchTo(cxt);
		memset(&opts, 0, sizeof(opts));
		sdp_parse_flow_options(isnull ? NULL : DatumGetJsonbPCopy(o), &opts);
		options = opts.operator_options;
	}
	SPI_finish();
	MemoryContextSwitchTo(cxt);
	if (op == NULL)
		return (Datum) 0;		/* a stateless flow has no state */

	/* every worker's store: each holds the keys of its partitions */
	areas = palloc(sizeof(dsa_handle) * SdpShmem->max_flows);
	tables = palloc(sizeof(dshash_table_handle) * SdpShmem->max_flows);
	same_options = palloc(sizeof(bool) * SdpShmem->max_flows);
	LWLockAcquire(SdpShmem->lock, LW_SHARED);
	for (s = sdp_slot_next(name, -1); s >= 0; s = sdp_slot_next(name, s))
	{
		sdp_slot_copy(s, copy);
		if (copy->stats.state_area != 0)
		{
			areas[nstores] = (dsa_handle) copy->stats.state_area;
			same_options[nstores] = copy->stats.state_options == sdp_operator_options_hash(options);
			tables[nstores++] = (dshash_table_handle) copy->stats.state_table;
		}
	}
	LWLockRelease(SdpShmem->lock);

	states = NIL;
	readers = palloc0(sizeof(void *) * Max(nstores, 1));
	for (int i = 0; i < nstores; i++)
	{
		/*
		 * The operator's own state of keys is read by the options its worker
		 * runs with: until a worker restarts with altered ones (the catalog's
		 * now), it is not read by the catalog's.
		 */
		const SdpOperator *reading = (same_options[i] || op->reader_begin == NULL) ? op : &no_reader;
		List	   *copies;
		ListCell   *cc;

		if (reading == &no_reader)
		{
			no_reader = *op;
			no_reader.reader_begin = NULL;
			if (!noticed)
				ereport(NOTICE,
						(errmsg("flow \"%s\" restarts with its altered options: the state of its %s's own variables shows once it has",
								name, op->name)));
			noticed = true;
		}
		copies = copy_state(areas[i], tables[i], cxt, reading, options, &readers[i]);
		foreach(cc, copies)
			((StateCopy *) lfirst(cc))->store = i;
		states = list_concat(states, copies);
	}

	foreach(lc, states)
	{
		StateCopy  *c = lfirst(lc);
		SdpStateEntry *e = &c->entry;
		StringInfoData buf;

		if (c->ext != NULL)
		{
			void	   *reader = readers[c->store];
			ExtRows		xr = {rsinfo, op->reader_key(reader, c->ext)};

			op->reader_rows(reader, c->ext, put_ext_row, &xr);
		}

		for (int i = 0; i < SDP_STATE_VALUES; i++)
		{
			if (op->value_names[i] == NULL || (e->values_set & (1u << i)) == 0)
				continue;
			put_state_row(rsinfo, e->key, op->value_names[i],
						  op->describe_value ? op->describe_value(i, e->values[i])
						  : psprintf(INT64_FORMAT, e->values[i]));
		}
		if (c->map != NULL)
		{
			MapJson		mj;

			initStringInfo(&buf);
			appendStringInfoChar(&buf, '{');
			mj.buf = &buf;
			mj.op = op;
			mj.first = true;
			sdp_state_map_read(c->map, append_member, &mj);
			appendStringInfoChar(&buf, '}');
			put_state_row(rsinfo, e->key, op->map_name ? op->map_name : "map", buf.data);
		}
		if (e->ntimers > 0)
		{
			initStringInfo(&buf);
			appendStringInfoChar(&buf, '[');
			for (int i = 0; i < e->ntimers; i++)
			{
				char	   *at = sdp_timestamp_text(e->timers[i].when);

				appendStringInfo(&buf, "%s{\"kind\": \"%s\", \"at\": \"%s\", \"tag\": " INT64_FORMAT "}",
								 i > 0 ? ", " : "",
								 e->timers[i].kind == SDP_EVENT_TIME ? "event_time" : "processing_time",
								 at, e->timers[i].tag);
			}
			appendStringInfoChar(&buf, ']');
			put_state_row(rsinfo, e->key, "timers", buf.data);
		}
	}
	return (Datum) 0;
}

/*
 * sdp_sink_relays(): one row per relay of a sink flow, a worker number of
 * the flow (each of its workers, and an earlier worker whose rows are still
 * in the outbox after a change of workers): its transactional.id (what a
 * secured cluster's ACLs must allow) and the outbox rows it has not
 * produced yet, with the lowest and highest of their seq.  The outbox is
 * the extension's (superusers only); the counts are read as the extension.
 * Backs the view sdp.sink_relays.
 */
Datum
sdp_sink_relays(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	SdpCatalogScope scope;
	MemoryContext outer = CurrentMemoryContext;

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	sdp_catalog_enter(&scope);
	if (SPI_execute("WITH f AS ("
					"  SELECT f.id, f.name, f.sink, s.topic, greatest(coalesce((f.options->>'workers')::int, 1), 1) AS workers"
					"    FROM sdp.flows f JOIN sdp.sinks s ON s.name = f.sink),"
					" o AS (SELECT flow_id, worker, count(*) AS pending, min(seq) AS first_seq, max(seq) AS last_seq"
					"         FROM sdp.outbox GROUP BY flow_id, worker),"
					" w AS (SELECT f.id, g AS worker FROM f, generate_series(0, f.workers - 1) g"
					"       UNION SELECT flow_id, worker FROM o)"
					" SELECT f.name, w.worker, f.sink, f.topic, f.id, coalesce(o.pending, 0), o.first_seq, o.last_seq"
					"   FROM w JOIN f ON f.id = w.id"
					"   LEFT JOIN o ON o.flow_id = w.id AND o.worker = w.worker"
					"  ORDER BY f.name, w.worker", true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the sink flows");
	sdp_catalog_leave(&scope);

	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		Datum		values[8];
		bool		nulls[8];
		bool		isnull;
		MemoryContext oldcxt;

		for (int c = 0; c < 8; c++)
			values[c] = SPI_getbinval(tup, desc, c + 1, &nulls[c]);
		/* column 5: the transactional.id, from the flow's id and the worker */
		oldcxt = MemoryContextSwitchTo(outer);
		values[4] = CStringGetTextDatum(kafka_relay_transactional_id(DatumGetInt64(SPI_getbinval(tup, desc, 5, &isnull)),
																	 DatumGetInt32(values[1])));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		MemoryContextSwitchTo(oldcxt);
	}
	SPI_finish();
	return (Datum) 0;
}

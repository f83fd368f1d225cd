/*
 * worker.c
 *		The flow worker's life and loop: one dynamic background worker per
 *		running flow.
 *
 * Started by the launcher, it connects as the flow's owner, loads the
 * flow's declaration and plans, assigns its partitions, and loops:
 *
 *	wait for messages (or its latch) -> take what has arrived (a batch) ->
 *	run the batch's pipeline (batch.c) -> act on how it ended:
 *	committed, retry with backoff, fail the flow, or restart the worker
 *
 * The target rows and the offsets commit in one transaction, which is what
 * makes a flow exactly-once: after any crash the worker seeks to the offsets
 * that committed with the rows, so every message is in the target once.
 */
#include "worker/worker_internal.h"
#include "compat.h"

#include <time.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "access/relation.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/regproc.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "worker/batch.h"
#include "worker/crash_guard.h"
#include "worker/backfill.h"
#include "worker/worker_slot.h"
#include "worker/worker_start.h"
#include "funcapi.h"
#include "kafka/kafka_properties.h"
#include "worker/offsets.h"
#include "worker/skip.h"
#include "worker/stateful.h"
#include "decl/catalog.h"
#include "decl/flow_options.h"
#include "decl/input_schema.h"
#include "shmem/metrics.h"
#include "shmem/slots.h"

/* the wait events pg_stat_activity shows (sdp_wait_event) */
static uint32 wait_main = 0;
static uint32 wait_batch = 0;

/* How often the worker refreshes partition high watermarks in its slot. */
#define SDP_WATERMARK_REFRESH_MS	500
/* How often it looks for new partitions of its topic. */
#define SDP_PARTITION_REFRESH_MS	30000
/* A partition behind the broker whose offset has not moved this long, the queue empty, is fetched again. */
#define SDP_STALL_CHECK_MS		5000
#define SDP_STALL_QUERY_MS		30000
/* How often it probes a broker it lost. */
#define SDP_BROKER_PROBE_MS		2000
/* An offset reset this soon after a deleted topic's return is the re-creation's. */
#define SDP_TOPIC_RETURN_MS		60000
/* Backoff before running a batch again after an error not about the data. */
#define SDP_RETRY_MIN_MS		100
#define SDP_RETRY_MAX_MS		30000
#define SDP_RELAY_RETRY_MAX_MS	2000	/* the relay retries at least this often */
#define SDP_STANDBY_RECHECK_MS	5	/* rows waiting for the standbys are looked at again this often */
#define SDP_STANDBY_LOG_MS		60000	/* and the wait is logged when it begins and this often */
/* a worker draining a backlog lingers up to this long for a fuller batch, in steps (worker_poll) */
#define SDP_BEHIND_WAIT_MS		10
#define SDP_BEHIND_STEP_MS		2

static FlowWorker *W = NULL;

/*
 * The loop's own state, file-static as PostgreSQL's apply worker keeps its
 * own (a worker process runs one flow): what it waits on, when its
 * periodic work is due, and how it drives a sink flow's relay.
 */
static struct
{
	rd_kafka_message_t **poll_buf;	/* a batch's messages, max_batch_rows of them */
	WaitEventSet *wait_set;		/* latch, the source's queue, postmaster death (, the relay's producer) */
	TimestampTz next_progress;
	TimestampTz next_watermarks;
	TimestampTz next_partition_refresh;
	TimestampTz next_broker_probe;
	int64		fetcher_wakes;	/* how often it woke the fetcher */
	TimestampTz next_stall_check;	/* worker_refetch_stalled */
	TimestampTz next_stall_query;	/* and its question to the broker */
	int			nstall;			/* the partitions' committed offsets at the last check */
	int64	   *stall_next;
	bool		committed_once; /* a batch of this worker has committed */
	int			error_backoff_ms;	/* a batch being retried waits this long */
	bool		topic_missing;	/* the broker answers but no longer has the topic (deleted) */
	TimestampTz topic_returned_at;	/* ... and it had, then had it again (created again): when */
	TimestampTz topic_gone_at;	/* when the flow's status said it was gone */
	/* a sink flow's relay (kafka/relay.c) */
	List	   *orphan_relays;	/* KafkaRelay: of rows left by workers of an earlier, larger layout */
	bool		relay_pending;	/* the outbox may hold rows not produced */
	bool		relay_draining; /* relay the blocking way (kafka_relay_drain): at start, after an error */
	bool		stall_probed;	/* SDP_PROBE_STALL begun, not yet ended */
	int64		relay_wait_seq; /* at start: other workers' rows up to this seq go first, 0: none */
	int			relay_backoff_ms;	/* the relay could not write the sink: wait this long */
	TimestampTz standby_logged; /* the relay's wait for the standbys was last logged then (0: none) */
}			loop;

static void worker_on_exit(int code, Datum arg);
static void worker_loop(FlowWorker *w);
static long linger_wait_ms(FlowWorker *w, long wait_ms);

/*
 * Keep the memory a batch frees for the next batch.  Each batch's contexts
 * (its own, SPI's, the executor's, the tuplestores) free their blocks of up
 * to 8 MB when it ends; glibc gives such blocks back to the kernel (munmap,
 * or a trimmed heap), and the next batch takes them again a page fault per
 * 4 kB page: a sixth of a draining worker's CPU in its profile (bench/README,
 * "The drain's profile").  With fixed thresholds the freed blocks stay in
 * malloc's free lists and are reused; what the worker holds is bounded by its
 * largest batch (max_batch_rows, max_batch_bytes), which it needs again, and
 * the heap above 64 MB of free memory is still given back.
 */
static void
worker_keep_freed_memory(void)
{
#ifdef __GLIBC__
	mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
	mallopt(M_TRIM_THRESHOLD, 64 * 1024 * 1024);
#endif
}

/*
 * Take the slot the launcher registered this worker for, if it is still
 * this worker's: in use, for this flow, at the generation the launcher
 * gave it, and with no worker attached.  A worker that starts late (the
 * postmaster starts registered workers when it can) may find its slot
 * freed, or given to another worker by a launcher that started since, as
 * logicalrep_worker_attach checks for the apply workers.
 */
static bool
worker_attach(FlowWorker *w)
{
	SdpFlowSlot *slot = w->slot;
	TimestampTz now = GetCurrentTimestamp();
	bool		ours;

	LWLockAcquire(SdpShmem->lock, LW_SHARED);
	SpinLockAcquire(&slot->mutex);
	ours = slot->in_use &&
		slot->ctl.flow_id == w->args.flow_id &&
		slot->ctl.generation == w->args.generation &&
		slot->ctl.pid == 0;
	if (ours)
	{
		slot->ctl.pid = MyProcPid;
		slot->ctl.latch = MyLatch;
		slot->ctl.started_at = now;
	}
	SpinLockRelease(&slot->mutex);
	LWLockRelease(SdpShmem->lock);
	return ours;
}

void
sdp_flow_worker_main(Datum main_arg)
{
	FlowWorker *w;

	/* SIGTERM (stop, drop) ends the worker at its next CHECK_FOR_INTERRUPTS; an open batch rolls back. */
	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();

	worker_keep_freed_memory();

	w = MemoryContextAllocZero(TopMemoryContext, sizeof(FlowWorker));
	W = w;
	memcpy(&w->args, MyBgworkerEntry->bgw_extra, sizeof(SdpWorkerArgs));
	sdp_worker_flow_name = w->args.name;	/* its transform cannot change the flow (sdp_refuse_self_change) */
	w->slot = &SdpShmem->slots[w->args.slotno];
	w->flow_cxt = AllocSetContextCreate(TopMemoryContext, "sdp flow", ALLOCSET_DEFAULT_SIZES);
	w->batch_cxt = AllocSetContextCreate(TopMemoryContext, "sdp batch", ALLOCSET_DEFAULT_SIZES);
	w->periodic_cxt = AllocSetContextCreate(TopMemoryContext, "sdp periodic work", ALLOCSET_SMALL_SIZES);

	/* Publish our pid; from here on our exit is reported to the launcher. */
	if (!worker_attach(w))
	{
		/* nothing of the slot is ours: leave it as it is */
		elog(LOG, "sdp flow \"%s\" worker started after its slot was given to another worker, exiting",
			 w->args.name);
		proc_exit(0);
	}
	before_shmem_exit(worker_on_exit, (Datum) 0);

	/* a fault (a signal) is recorded with the offsets it happened at: two in a row there fail the flow */
	sdp_crash_guard_start(w);

	/* Run as the flow's owner: its privileges apply to everything the flow reads and writes. */
	BackgroundWorkerInitializeConnectionByOid(w->args.dboid, w->args.owner, 0);
	pgstat_report_appname(MyBgworkerEntry->bgw_name);
	SetConfigOption("application_name", MyBgworkerEntry->bgw_name, PGC_USERSET, PGC_S_SESSION);

	/* the worker died twice in a row at the same offsets: the flow fails instead of crashing the server again */
	sdp_crash_guard_check(w);

	/* a restored flow's offsets, state and target rows first (before its declaration is checked) */
	sdp_wait_for_restore(w);
	sdp_worker_load_flow(w);

	/*
	 * Starting until the brokers have told the topic's partitions (retrying,
	 * with the reason, while they cannot: worker_open_source).  An error
	 * connecting (e.g. a librdkafka property it refuses) is shown in the
	 * status before the worker exits.
	 */
	PG_TRY();
	{
		sdp_worker_open_source(w);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(w->flow_cxt);
		edata = CopyErrorData();
		sdp_worker_set_error(w, edata->message);
		PG_RE_THROW();
	}
	PG_END_TRY();

	/*
	 * One wait set for the whole life of the worker: latch, Kafka's wakeup
	 * pipe, postmaster death, and a sink flow's relay (added with it).
	 */
	loop.poll_buf = MemoryContextAlloc(w->flow_cxt, sizeof(rd_kafka_message_t *) * w->opts.max_batch_rows);
	loop.wait_set = sdp_create_wait_set(4);
	AddWaitEventToSet(loop.wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(loop.wait_set, WL_SOCKET_READABLE, kafka_source_event_fd(w->kafka), NULL, NULL);
	AddWaitEventToSet(loop.wait_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	sdp_worker_set_state(w, SDP_FLOW_RUNNING, false);
	if (w->sink_def.name)
	{
		MemoryContext oldcxt = MemoryContextSwitchTo(w->flow_cxt);

		ListCell   *lc;
		List	   *orphans;

		w->relay = kafka_relay_create(&w->sink_def, w->args.flow_id, w->args.name,
									  w->prep.outbox_tagged ? w->args.worker_no : 0, w->prep.outbox_tagged, w->prep.outbox_skips);
		loop.relay_pending = true;	/* what an earlier worker left in the outbox */
		loop.relay_draining = true;	/* before the worker consumes */
		/*
		 * Rows that workers of an earlier layout with more workers left:
		 * relayed by worker k % nworkers, under worker k's transactional.id,
		 * before this worker writes anything (every worker of the earlier
		 * layout has exited: the launcher starts a new layout only then).
		 */
		orphans = kafka_relay_orphans(w->args.flow_id, w->args.nworkers, w->args.worker_no, &loop.relay_wait_seq);
		foreach(lc, orphans)
		{
			loop.orphan_relays = lappend(loop.orphan_relays,
									   kafka_relay_create(&w->sink_def, w->args.flow_id, w->args.name,
														  lfirst_int(lc), true, w->prep.outbox_skips));
			ereport(LOG,
					(errmsg("sdp flow \"%s\" worker %d relays the outbox rows that worker %d of an earlier layout left",
							w->args.name, w->args.worker_no, lfirst_int(lc))));
		}
		MemoryContextSwitchTo(oldcxt);
		/* its delivery reports wake the worker while a transaction awaits them */
		AddWaitEventToSet(loop.wait_set, WL_SOCKET_READABLE, kafka_relay_event_fd(w->relay), NULL, NULL);
		ereport(LOG,
				(errmsg("sdp flow \"%s\" produces to topic \"%s\" of sink \"%s\" through its outbox",
						w->args.name, w->sink_def.topic, w->sink_def.name),
				 errdetail("librdkafka %s.", rd_kafka_version_str()),
				 rd_kafka_version() < 0x02040000 ?
				 errhint("librdkafka before 2.4 spins a thread for a millisecond in each Kafka transaction; 2.4 and later take about a third of the CPU per transaction.") : 0));
	}
	if (w->args.nworkers > 1)
		ereport(LOG,
				(errmsg("sdp flow \"%s\" worker %d of %d consuming %d of the %d partitions of topic \"%s\" into %s",
						w->args.name, w->args.worker_no, w->args.nworkers, w->parts.n,
						w->parts.topic_n, w->source.topic, w->prep.table_write.relname)));
	else if (w->opts.nshare > 0)
		ereport(LOG,
				(errmsg("sdp flow \"%s\" consuming %d of the %d partitions of topic \"%s\" (option \"partitions\") into %s",
						w->args.name, w->parts.n, w->parts.topic_n, w->source.topic, w->prep.table_write.relname)));
	else
		ereport(LOG,
				(errmsg("sdp flow \"%s\" consuming topic \"%s\" (%d partitions) into %s",
						w->args.name, w->source.topic, w->parts.n, w->prep.table_write.relname)));
	ereport(LOG,
			(errmsg("sdp flow \"%s\" writes into %s by %s",
					w->args.name, w->prep.table_write.relname, sdp_table_write_path_description(&w->prep.table_write))));

	worker_loop(w);
}

/* Report our exit in the slot and wake the launcher, which decides what comes next. */
static void
worker_on_exit(int code, Datum arg)
{
	SdpFlowSlot *slot = W->slot;
	TimestampTz now;

	/*
	 * A sink's Kafka transaction left open would hold back the
	 * read_committed consumers of its partitions until the transaction
	 * times out (librdkafka does not end it when the producer is
	 * destroyed).  Its rows are durable in the outbox, so committing it is
	 * safe; if that fails, the next relay reads the topic back.  A stop or
	 * a drop ends the worker here (SIGTERM), usually between batches while
	 * a transaction awaits its acknowledgements.
	 */
	if (W->relay)
		kafka_relay_finish(W->relay);

	now = GetCurrentTimestamp();
	SpinLockAcquire(&slot->mutex);
	slot->ctl.pid = 0;
	slot->ctl.latch = NULL;
	slot->ctl.exited_at = now;
	SpinLockRelease(&slot->mutex);
	sdp_wake_launcher();
}

/*
 * Wait up to timeout_ms on the worker's wait set: a message, the latch, or
 * the relay's producer (whose queue is then served: a delivery report).
 */
static void
worker_wait_events(FlowWorker *w, long timeout_ms)
{
	WaitEvent	event;

	if (WaitEventSetWait(loop.wait_set, timeout_ms, &event, 1, sdp_wait_event(&wait_main, "SdpFlowMain")) > 0)
	{
		if (event.events & WL_LATCH_SET)
			ResetLatch(MyLatch);
		else if (w->relay && event.fd == kafka_relay_event_fd(w->relay))
			kafka_relay_serve(w->relay);
	}
}

/*
 * The broker answers but no longer has the flow's topic (it was deleted
 * under the running flow): the flow is retrying, with the reason in the
 * status and the log, and the topic is looked for every few seconds.  The
 * offsets stay as committed; what a topic of that name holds when it
 * returns is read from them (an offset past its end is reset to its start
 * and reported as the topic created again, in periodic_work).
 */
static void
worker_topic_gone(FlowWorker *w, const char *error)
{
	char	   *msg = psprintf("the topic is gone from the broker (deleted?): %s; the flow waits for it and goes on from its committed offsets when it returns",
							   error);

	ereport(LOG,
			(errmsg("sdp flow \"%s\": %s", w->args.name, msg),
			 errhint("Create topic \"%s\" again, or drop the flow with sdp_drop_flow().", w->source.topic)));
	loop.topic_missing = true;
	sdp_worker_set_error(w, msg);
	SpinLockAcquire(&w->slot->mutex);
	loop.topic_gone_at = w->slot->ctl.last_error_at;
	SpinLockRelease(&w->slot->mutex);
	sdp_worker_set_state(w, SDP_FLOW_RETRYING, false);
	pfree(msg);
}

/*
 * The topic that was gone is back (worker_topic_gone): the flow runs on,
 * and its status no longer says the topic is gone (unless an error came
 * since: the offset reset of the topic created again, say).
 */
static void
worker_topic_back(FlowWorker *w)
{
	ereport(LOG, (errmsg("sdp flow \"%s\": topic \"%s\" is back on the broker", w->args.name, w->source.topic)));
	loop.topic_missing = false;
	loop.topic_returned_at = GetCurrentTimestamp();
	sdp_worker_set_state(w, SDP_FLOW_RUNNING, false);
	SpinLockAcquire(&w->slot->mutex);
	if (w->slot->ctl.last_error_at == loop.topic_gone_at)
	{
		w->slot->ctl.last_error[0] = '\0';
		w->slot->ctl.last_error_at = 0;
	}
	SpinLockRelease(&w->slot->mutex);
}

static void periodic_work_round(FlowWorker *w, TimestampTz now);
static void worker_refetch_stalled(FlowWorker *w, TimestampTz now);

/*
 * Work that is due by the clock: progress reports, watermarks, partitions,
 * broker probes.  What it allocates for the round (the reason of a failed
 * probe, every 2 s while the broker is down; a message) is in a context of
 * its own, reset after it; what lasts (the partitions taken) goes to the
 * flow's context.
 */
static void
periodic_work(FlowWorker *w, TimestampTz now)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(w->periodic_cxt);

	periodic_work_round(w, now);
	MemoryContextSwitchTo(oldcxt);
	MemoryContextReset(w->periodic_cxt);
}

static void
periodic_work_round(FlowWorker *w, TimestampTz now)
{
	char		error[SDP_ERROR_LEN];
	bool		down;

	if (kafka_source_take_error(w->kafka, error, sizeof(error), &down))
	{
		sdp_worker_set_broker(w, !down && !loop.topic_missing, error);
		/* a fetch found no such topic or partition: look at the topic now */
		if (strstr(error, "UNKNOWN_TOPIC") != NULL || strstr(error, "UNKNOWN_PARTITION") != NULL)
			loop.next_partition_refresh = now;
	}
	else if (!down && !loop.topic_missing)
		sdp_worker_set_broker(w, true, NULL);
	sdp_worker_report_refused_host(w);

	/*
	 * The broker had deleted messages the flow had not read: say so,
	 * loudly.  Within SDP_TOPIC_RETURN_MS of the topic's return, a reset is
	 * the re-creation's: each partition is reset at its first fetch from
	 * the new topic, not all in the same round.
	 */
	if (kafka_source_take_reset(w->kafka, error, sizeof(error)) > 0)
	{
		bool		recreated = loop.topic_missing ||
			(loop.topic_returned_at != 0 && now - loop.topic_returned_at < SDP_TOPIC_RETURN_MS * (int64) 1000);
		char	   *msg = psprintf("messages the flow had not read are no longer on the broker (%s): %s",
								   recreated ? "the topic was deleted and created again" : "retention",
								   error);

		ereport(LOG, (errmsg("sdp flow \"%s\": %s", w->args.name, msg)));
		sdp_worker_set_error(w, msg);
	}

	if (now >= loop.next_watermarks)
	{
		sdp_worker_publish_high_watermarks(w);
		loop.next_watermarks = TimestampTzPlusMilliseconds(now, SDP_WATERMARK_REFRESH_MS);
	}

	worker_refetch_stalled(w, now);

	if (now >= loop.next_progress)
	{
		SdpProgress *progress = palloc(sizeof(SdpProgress));

		sdp_metrics_report(&w->metrics, now, progress);
		progress->fetcher_wakes = loop.fetcher_wakes;
		SDP_SLOT_STATS_BEGIN_WRITE(w->slot);
		w->slot->stats.progress = *progress;
		SDP_SLOT_STATS_END_WRITE(w->slot);
		pfree(progress);
		kafka_source_emit_logs(w->kafka);
		kafka_source_commit_async(w->kafka, w->parts.n, w->parts.ids, w->parts.next);
		loop.next_progress = TimestampTzPlusMilliseconds(now, w->opts.progress_interval_ms);
	}

	/*
	 * A lost broker, or a topic gone, is probed with a metadata request,
	 * which also finds new partitions.
	 */
	if (((kafka_source_is_down(w->kafka) || loop.topic_missing) && now >= loop.next_broker_probe) ||
		now >= loop.next_partition_refresh)
	{
		int32	   *partitions;
		char	   *perror;
		int			n = kafka_source_list_partitions(w->kafka, &partitions, 1000, &perror);

		if (n > 0)
		{
			sdp_worker_set_broker(w, true, NULL);
			if (loop.topic_missing)
				worker_topic_back(w);
			if (n > w->parts.topic_n)
				sdp_worker_take_partitions(w, n, partitions);
			pfree(partitions);
		}
		else
		{
			sdp_worker_set_broker(w, false, perror);
			if (!kafka_source_is_down(w->kafka) && !loop.topic_missing)
				worker_topic_gone(w, perror);
		}
		loop.next_broker_probe = TimestampTzPlusMilliseconds(now, SDP_BROKER_PROBE_MS);
		loop.next_partition_refresh = TimestampTzPlusMilliseconds(now, SDP_PARTITION_REFRESH_MS);
	}

	/*
	 * The rows this worker inserted, updated and deleted are counted in its
	 * own memory until reported: a backend reports them when idle, a
	 * background worker only when it asks (at most once a second without
	 * force).  Unreported, autovacuum never sees a flow's target, the
	 * outbox or the offsets change, never vacuums nor analyzes them, and
	 * queries on a live target are planned without statistics.
	 */
	pgstat_report_stat(false);
}

static long
ms_until(TimestampTz now, TimestampTz when)
{
	if (when <= now)
		return 0;
	return (long) ((when - now + 999) / 1000);
}

/* The batch is decoded again at its next attempt, from scratch. */
static void
batch_decode_again(Batch *b)
{
	b->decoded = false;
	b->decode_raised = false;
	b->dead = NIL;
	b->ndead_decode = 0;
	b->skip_msg = NULL;
	b->skipped = NIL;
}

/*
 * A batch waiting to be retried takes the messages that arrived meanwhile,
 * up to the batch's bounds: a message that fails alone, in a batch of its
 * own, is told apart from the flow's own fault only by others that go
 * through (batch.c).  Decoding starts again with them.
 */
static void
worker_grow_batch(FlowWorker *w, Batch *b)
{
	size_t		bytes = 0;
	size_t		max_bytes = (size_t) w->opts.max_batch_kb * 1024;
	int			n;

	if (b->nmsgs >= w->opts.max_batch_rows)
		return;
	for (int i = 0; i < b->nmsgs; i++)
		bytes += b->msgs[i]->len + b->msgs[i]->key_len;
	if (bytes >= max_bytes)
		return;
	n = kafka_source_poll(w->kafka, b->msgs + b->nmsgs, w->opts.max_batch_rows - b->nmsgs, &bytes, max_bytes);
	if (n == 0)
		return;
	b->nmsgs += n;
	batch_decode_again(b);
}

/*
 * Run a batch through the pipeline until it commits, and act on how it
 * ended: an error not about the messages is retried with backoff (the
 * batch is kept in memory, and grows with what arrives), so the flow waits
 * out a missing table or a full disk instead of losing data; the flow shows
 * 'retrying' with the error meanwhile, and 'running' with no error again
 * after the next commit, when the backoff starts over.
 */
static void
worker_run_batch(FlowWorker *w, Batch *b)
{
	bool		retried = false;

	for (;;)
	{
		char	   *message = NULL;
		char	   *msg;

		pgstat_report_activity(STATE_RUNNING, b->nmsgs > 0 ? "sdp: processing batch" : "sdp: timers and checkpoint");
		switch (sdp_batch_run(w, b, &message))
		{
			case SDP_BATCH_COMMITTED:
				loop.error_backoff_ms = 0;
				sdp_batch_account(w, b);
				if (w->relay)
				{
					kafka_relay_batch_committed(w->relay);
					if (b->rows_written > 0)
						loop.relay_pending = true;
				}
				/* the error of a retry, or of an earlier worker of the flow, is over */
				if (retried)
					sdp_worker_set_state(w, SDP_FLOW_RUNNING, true);
				else if (!loop.committed_once)
					sdp_worker_clear_earlier_error(w);
				loop.committed_once = true;
				pgstat_report_activity(STATE_IDLE, NULL);
				return;
			case SDP_BATCH_FAIL:
				sdp_worker_fail(w, message);
				break;
			case SDP_BATCH_RESTART:
				msg = psprintf("restarting from the last checkpoint after an error in the operator step: %s", message);
				ereport(LOG, (errmsg("sdp flow \"%s\" %s", w->args.name, msg)));
				sdp_worker_set_error(w, msg);
				proc_exit(1);
				break;
			case SDP_BATCH_RETRY:
				retried = true;
				loop.error_backoff_ms = Min(Max(loop.error_backoff_ms * 2, SDP_RETRY_MIN_MS), SDP_RETRY_MAX_MS);
				msg = psprintf("batch of %d messages not written, retrying in %d ms: %s",
							   b->nmsgs, loop.error_backoff_ms, message);
				ereport(LOG, (errmsg("sdp flow \"%s\": %s", w->args.name, msg)));
				sdp_worker_set_error(w, msg);
				sdp_worker_set_state(w, SDP_FLOW_RETRYING, false);
				pgstat_report_activity(STATE_IDLE, NULL);
				sdp_worker_wait(w, loop.error_backoff_ms);
				/* the lag goes on growing while we wait: show it */
				sdp_worker_publish_high_watermarks(w);
				/* a skip request (it set our latch) applies to this batch's next attempt */
				if (sdp_skips_changed(w))
				{
					sdp_skips_reload(w);
					batch_decode_again(b);
				}
				if (!b->backfill)
					worker_grow_batch(w, b);
				break;
		}
	}
}

/*
 * Messages the broker holds for the worker's partitions beyond the committed
 * offsets, by the end offsets of the last fetch responses (no request).
 */
static int64
worker_backlog(FlowWorker *w)
{
	int64		backlog = 0;

	for (int i = 0; i < w->parts.n; i++)
	{
		int64		hw = kafka_source_cached_high_watermark(w->kafka, w->parts.ids[i]);

		if (hw > w->parts.next[i])
			backlog += hw - w->parts.next[i];
	}
	return backlog;
}

/*
 * Poll what has arrived, lingering up to max_batch_wait for more when the
 * batch is not full.
 *
 * A worker draining a backlog is usually faster than librdkafka's fetcher
 * and would take a batch of the few messages fetched since its last poll,
 * paying a transaction, its offsets and the transform's start for each
 * few.  So when the broker holds at least as many more messages as the
 * batch has, it lingers even with max_batch_wait 0: it sleeps in steps of
 * SDP_BEHIND_STEP_MS, on its latch alone, while the fetcher fills the
 * local queue, until the queue holds what the batch can still take (or
 * all the broker has), a step brings nothing while the queue is near the
 * limits where the fetcher rests, or SDP_BEHIND_WAIT_MS have passed; then
 * it takes what arrived.  A slow fetcher is waited for: the batch would
 * otherwise hold a fetch response or two.
 * Sleeping on Kafka's pipe too would wake it (and make librdkafka's
 * thread write to the pipe) at each fetch response, a few messages each.
 * The messages lingered for have waited on the broker already, and the
 * backlog drains no slower: the fetcher, not the worker, sets its pace.
 * A worker that keeps up never lingers.
 */
static int
worker_poll(FlowWorker *w)
{
	size_t		bytes = 0;
	size_t		max_bytes = (size_t) w->opts.max_batch_kb * 1024;
	int			max_rows = w->opts.max_batch_rows;
	int			n = kafka_source_poll(w->kafka, loop.poll_buf, max_rows, &bytes, max_bytes);
	int			wait_ms = w->opts.max_batch_wait_ms;

	if (n == 0 || n >= max_rows || bytes >= max_bytes)
		return n;
	if (wait_ms == 0)
	{
		int64		more = worker_backlog(w) - n;
		int64		want = Min(more, (int64) (max_rows - n));
		int64		queued = kafka_source_queued(w->kafka);
		TimestampTz until;

		if (more < n)
			return n;
		until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), SDP_BEHIND_WAIT_MS);
		while (queued < want)
		{
			long		left = ms_until(GetCurrentTimestamp(), until);
			int64		before = queued;

			if (left <= 0)
				break;
			if (WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						  linger_wait_ms(w, Min(left, SDP_BEHIND_STEP_MS)),
						  sdp_wait_event(&wait_batch, "SdpFlowBatchFill")) & WL_LATCH_SET)
				ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
			queued = kafka_source_queued(w->kafka);
			if (queued <= before && kafka_source_queue_near_full(w->kafka, queued, (double) bytes / n))
				break;
		}
		return n + kafka_source_poll(w->kafka, loop.poll_buf + n, max_rows - n, &bytes, max_bytes);
	}
	else
	{
		TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), wait_ms);

		while (n < max_rows && bytes < max_bytes)
		{
			long		left = ms_until(GetCurrentTimestamp(), until);

			if (left <= 0)
				break;
			worker_wait_events(w, linger_wait_ms(w, left));
			CHECK_FOR_INTERRUPTS();
			n += kafka_source_poll(w->kafka, loop.poll_buf + n, max_rows - n, &bytes, max_bytes);
		}
	}
	return n;
}

/*
 * The local queue is empty: if librdkafka's fetcher may be at rest while
 * the broker holds messages for us, restart it (kafka_source_wake_fetcher),
 * rather than wait up to a second for it to wake by itself.
 */
static void
wake_fetcher_if_behind(FlowWorker *w)
{
	if (!kafka_source_is_down(w->kafka) &&
		kafka_source_wake_fetcher(w->kafka, w->parts.n, w->parts.ids))
		loop.fetcher_wakes++;
}

/*
 * Every SDP_STALL_CHECK_MS: a partition whose committed offset has not
 * moved since the last look, while the local queue is empty and the end
 * offset of its last fetch response is beyond it, is not being fetched:
 * seek it to its position (kafka_source_refetch), and say so.  Seen once
 * in CI (test 082 on the assert-enabled server, librdkafka 2.0.2 and the
 * embedded broker): after a restart mid-stream one partition of a flow
 * stopped 770 messages short of the end of its topic for minutes, with no
 * error anywhere, while the other partition of the same worker read to the
 * end.  A flow that keeps up, or whose partitions are at their end, never
 * meets the condition.
 */
static void
worker_refetch_stalled(FlowWorker *w, TimestampTz now)
{
	int32	   *stalled;
	int			nstalled = 0;

	if (now < loop.next_stall_check)
		return;
	loop.next_stall_check = TimestampTzPlusMilliseconds(now, SDP_STALL_CHECK_MS);
	if (loop.nstall != w->parts.n)
	{
		/* the partitions changed: start the watch over (in the flow's memory, as long as they are) */
		loop.stall_next = loop.stall_next ? repalloc(loop.stall_next, sizeof(int64) * Max(w->parts.n, 1))
			: MemoryContextAlloc(w->flow_cxt, sizeof(int64) * Max(w->parts.n, 1));
		memcpy(loop.stall_next, w->parts.next, sizeof(int64) * w->parts.n);
		loop.nstall = w->parts.n;
		return;
	}
	if (kafka_source_queued(w->kafka) > 0 || kafka_source_is_down(w->kafka))
	{
		memcpy(loop.stall_next, w->parts.next, sizeof(int64) * w->parts.n);
		return;
	}
	stalled = palloc(sizeof(int32) * Max(w->parts.n, 1));
	for (int i = 0; i < w->parts.n; i++)
		if (w->parts.next[i] == loop.stall_next[i] &&
			kafka_source_cached_high_watermark(w->kafka, w->parts.ids[i]) > w->parts.next[i])
			stalled[nstalled++] = w->parts.ids[i];
	if (nstalled > 0 && kafka_source_refetch(w->kafka, nstalled, stalled))
	{
		loop.fetcher_wakes++;
		ereport(LOG,
				(errmsg("sdp flow \"%s\": %d of its partitions had messages on the broker and none fetched for %d s; fetching them again from their positions",
						w->args.name, nstalled, SDP_STALL_CHECK_MS / 1000)));
	}
	else if (nstalled == 0 && now >= loop.next_stall_query)
	{
		/*
		 * The end offsets of the last fetch responses say nothing of a
		 * partition the fetcher has not fetched since the worker started
		 * (seen in CI, test 082 on PostgreSQL 18: after a restart mid-stream
		 * one partition of a two-worker flow stayed 4,523 messages short,
		 * its cached end no further than its position).  So every
		 * SDP_STALL_QUERY_MS, the partitions that did not move are asked of
		 * the broker; one with messages beyond the worker's next offset is
		 * sought there.
		 */
		int64	   *offsets = palloc(sizeof(int64) * Max(w->parts.n, 1));

		loop.next_stall_query = TimestampTzPlusMilliseconds(now, SDP_STALL_QUERY_MS);
		for (int i = 0; i < w->parts.n; i++)
		{
			int64		lo,
						hi;
			char	   *error;

			if (w->parts.next[i] != loop.stall_next[i] || w->parts.next[i] < 0)
				continue;
			if (kafka_source_query_watermarks(w->kafka, w->parts.ids[i], &lo, &hi, 1000, &error) &&
				hi > w->parts.next[i])
			{
				ereport(LOG,
						(errmsg("sdp flow \"%s\": partition %d has messages to offset %lld on the broker, none fetched past %lld for %d s; fetching it again from there",
								w->args.name, w->parts.ids[i], (long long) hi, (long long) w->parts.next[i],
								SDP_STALL_CHECK_MS / 1000)));
				offsets[nstalled] = w->parts.next[i];
				stalled[nstalled++] = w->parts.ids[i];
			}
		}
		if (nstalled > 0 && kafka_source_seek(w->kafka, nstalled, stalled, offsets))
			loop.fetcher_wakes++;
		pfree(offsets);
	}
	memcpy(loop.stall_next, w->parts.next, sizeof(int64) * w->parts.n);
	pfree(stalled);
}

/* Whether a relay of this worker was fenced by another server's (kafka_relay_fenced). */
static bool
worker_relay_fenced(FlowWorker *w)
{
	ListCell   *lc;

	if (kafka_relay_fenced(w->relay))
		return true;
	foreach(lc, loop.orphan_relays)
	{
		if (kafka_relay_fenced((KafkaRelay *) lfirst(lc)))
			return true;
	}
	return false;
}

/* Whether a relay of this worker failed to drain because its rows wait for the standbys (kafka_relay_waits_for_standbys). */
static bool
worker_relay_waits_for_standbys(FlowWorker *w)
{
	ListCell   *lc;

	if (kafka_relay_waits_for_standbys(w->relay))
		return true;
	foreach(lc, loop.orphan_relays)
	{
		if (kafka_relay_waits_for_standbys((KafkaRelay *) lfirst(lc)))
			return true;
	}
	return false;
}

/*
 * An Avro sink's schema (derived from the flow's rows when it was
 * prepared) registered under the subject TOPIC-value, as Confluent's
 * serializers register theirs; its id goes into every message the worker
 * writes from now on.  Outside any transaction: it waits on the network.
 */
static bool
worker_register_sink_schema(FlowWorker *w, char **error)
{
	int32		id;
	char	   *subject = psprintf("%s-value", w->sink_def.topic);

	if (w->sink_registry == NULL)
		w->sink_registry = sdp_registry_create(w->sink_def.registry_url, w->sink_def.properties, w->flow_cxt);
	if (!sdp_registry_register(w->sink_registry, subject, w->prep.sink_avro_schema, &id, error))
		return false;
	w->prep.sink_avro_id = id;
	if (w->prep.transform.nparams > 0)
		w->prep.transform.params[0] = Int32GetDatum(id);
	ereport(LOG,
			(errmsg("sdp flow \"%s\" writes Avro with schema id %d of subject \"%s\" in schema registry %s",
					w->args.name, id, subject, sdp_registry_url(w->sink_registry))));
	return true;
}

/*
 * A sink flow produces what its committed batches put in its outbox before
 * it takes the next batch, so that the outbox holds at most one batch's
 * rows while the sink can be written.  When it cannot (the sink's brokers
 * are down), the flow consumes nothing either, and shows why; it waits with
 * backoff, answering stop requests, and the relay goes on where it stood.
 * Rows that wait for the standbys that could be promoted (sdp.standby_slots)
 * are looked at again every SDP_STANDBY_RECHECK_MS instead: nothing wakes
 * the worker when a standby's slot moves, and the wait is short when the
 * standby is only behind.  A relay fenced by a newer producer of its
 * transactional id fails the flow: that producer is another server's
 * (kafka_relay_fenced).
 */
static bool
worker_relay(FlowWorker *w)
{
	char	   *error = NULL;
	MemoryContext oldcxt = MemoryContextSwitchTo(w->batch_cxt);
	bool		done;
	ListCell   *lc;

	pgstat_report_activity(STATE_RUNNING, "sdp: producing to the sink");
	/*
	 * The rows of earlier workers first: a key's rows keep their order.
	 * Before their relays read the topic back (read_committed), every
	 * transactional id this worker relays for is fenced: a transaction
	 * that the earlier layout's worker of this number left open (its
	 * commit failed while the sink was down) holds the partitions' last
	 * stable offset below the end until the broker times it out, and the
	 * read-back would wait for it.
	 */
	done = loop.orphan_relays == NIL || kafka_relay_fence(w->relay, &error);
	foreach(lc, loop.orphan_relays)
	{
		if (!done)
			break;
		done = kafka_relay_fence((KafkaRelay *) lfirst(lc), &error);
	}
	while (done && loop.orphan_relays != NIL)
	{
		KafkaRelay *orphan = linitial(loop.orphan_relays);

		done = kafka_relay_drain(orphan, &error);
		if (done)
		{
			kafka_relay_destroy(orphan);
			loop.orphan_relays = list_delete_first(loop.orphan_relays);
		}
	}
	if (done)
		done = kafka_relay_drain(w->relay, &error);
	/*
	 * An Avro sink: the schema of its values registered before the first
	 * batch writes a row with its id (what is in the outbox has its own).
	 */
	if (done && w->prep.sink_avro != NULL && w->prep.sink_avro_id < 0)
		done = worker_register_sink_schema(w, &error);
	pgstat_report_activity(STATE_IDLE, NULL);
	if (done)
	{
		if (loop.standby_logged != 0)
			ereport(LOG,
					(errmsg("sdp flow \"%s\": the standbys have flushed its rows, which are produced", w->args.name)));
		loop.standby_logged = 0;
		if (loop.relay_backoff_ms > 0)
			sdp_worker_set_state(w, SDP_FLOW_RUNNING, true);
		loop.relay_backoff_ms = 0;
	}
	else if (worker_relay_fenced(w))
	{
		MemoryContextSwitchTo(oldcxt);
		sdp_worker_fail(w, error);
	}
	else if (worker_relay_waits_for_standbys(w))
	{
		TimestampTz now = GetCurrentTimestamp();

		if (loop.standby_logged == 0 || now >= TimestampTzPlusMilliseconds(loop.standby_logged, SDP_STANDBY_LOG_MS))
		{
			ereport(LOG,
					(errmsg("sdp flow \"%s\": %s; it consumes nothing until they have", w->args.name, error),
					 errhint("A sink flow's rows are produced once the standbys of the replication slots named in sdp.standby_slots (or synchronized_standby_slots) have flushed them.")));
			loop.standby_logged = now;
		}
		/*
		 * A standby behind is looked at again within milliseconds; a slot
		 * that will not advance (missing, logical, invalidated) less and
		 * less often, up to a second (a reload or a new slot is seen then)
		 */
		if (kafka_relay_standby_broken(w->relay))
			loop.relay_backoff_ms = Min(Max(loop.relay_backoff_ms * 2, SDP_STANDBY_RECHECK_MS), 1000);
		else
			loop.relay_backoff_ms = SDP_STANDBY_RECHECK_MS;
		sdp_worker_set_error(w, error);
		sdp_worker_set_state(w, SDP_FLOW_RETRYING, false);
	}
	else
	{
		loop.relay_backoff_ms = Min(Max(loop.relay_backoff_ms * 2, SDP_RETRY_MIN_MS), SDP_RELAY_RETRY_MAX_MS);
		ereport(LOG, (errmsg("sdp flow \"%s\": %s, retrying in %d ms", w->args.name, error, loop.relay_backoff_ms)));
		sdp_worker_set_error(w, error);
		sdp_worker_set_state(w, SDP_FLOW_RETRYING, false);
	}
	MemoryContextSwitchTo(oldcxt);
	MemoryContextReset(w->batch_cxt);
	if (!done)
		sdp_worker_wait(w, loop.relay_backoff_ms);
	return done;
}

/*
 * Between batches: the relay goes on without waiting for Kafka
 * (kafka_relay_pump): it commits its open transaction once the sink
 * acknowledged every message, and produces the rows committed since in the
 * next one, while the flow consumes.  When the sink cannot be written, the
 * flow relays the blocking way (worker_relay), consuming nothing until the
 * outbox is drained.
 */
static bool
worker_relay_pump(FlowWorker *w)
{
	char	   *error = NULL;
	MemoryContext oldcxt = MemoryContextSwitchTo(w->batch_cxt);
	bool		ok;

	SDP_PROBE_BEGIN(SDP_PROBE_CALLS);
	ok = kafka_relay_pump(w->relay, &loop.relay_pending, &error);
	SDP_PROBE_END(SDP_PROBE_CALLS);
	MemoryContextSwitchTo(oldcxt);
	if (!ok)
	{
		ereport(LOG, (errmsg("sdp flow \"%s\": %s, relaying before consuming again", w->args.name, error)));
		loop.relay_draining = true;
	}
	MemoryContextReset(w->batch_cxt);
	return ok;
}

/* Whether the relay has a Kafka transaction open, or rows waiting for the standbys. */
static bool
worker_relay_in_flight(FlowWorker *w)
{
	return kafka_relay_busy(w->relay) || (loop.relay_pending && kafka_relay_holds_for_standbys(w->relay));
}

/*
 * A wait of a worker lingering for a fuller batch (worker_poll): while its
 * relay has a Kafka transaction open, the transaction is committed as soon
 * as the sink has acknowledged it, not after the linger and the next batch
 * (a cluster's read_committed consumers see its rows only then), and the
 * wait lasts at most a step of the linger of a worker behind; so too while
 * its rows wait for the standbys, which produces them as soon as the
 * standbys have them.  An error hands the relay over to the blocking way
 * before the next poll.
 */
static long
linger_wait_ms(FlowWorker *w, long wait_ms)
{
	if (w->relay == NULL || loop.relay_draining || !worker_relay_in_flight(w))
		return wait_ms;
	(void) worker_relay_pump(w);	/* the batch's memory holds nothing yet */
	if (!loop.relay_draining && worker_relay_in_flight(w))
		return Min(wait_ms, SDP_BEHIND_STEP_MS);
	return wait_ms;
}

/*
 * One batch of the flow's backfill (backfill.c), before it reads Kafka: its
 * next rows run through the batch pipeline as messages do; none left, it
 * ends and the loop goes on to the topic.  An error reading the rows (the
 * source gone, a privilege revoked) is retried with backoff, the reason in
 * the status, as a batch's.
 */
static void
worker_backfill_step(FlowWorker *w)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(w->batch_cxt);
	volatile int n = -1;
	char	   *volatile error = NULL;

	PG_TRY();
	{
		n = sdp_backfill_fill(w, loop.poll_buf, w->opts.max_batch_rows);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		HOLD_INTERRUPTS();
		MemoryContextSwitchTo(w->batch_cxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortOutOfAnyTransaction();
		RESUME_INTERRUPTS();
		error = edata->message;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(w->batch_cxt);

	if (n < 0)
	{
		char	   *msg;

		loop.error_backoff_ms = Min(Max(loop.error_backoff_ms * 2, SDP_RETRY_MIN_MS), SDP_RETRY_MAX_MS);
		msg = psprintf("backfill rows not read, retrying in %d ms: %s", loop.error_backoff_ms, error);
		ereport(LOG, (errmsg("sdp flow \"%s\": %s", w->args.name, msg)));
		sdp_worker_set_error(w, msg);
		sdp_worker_set_state(w, SDP_FLOW_RETRYING, false);
		MemoryContextSwitchTo(oldcxt);
		MemoryContextReset(w->batch_cxt);
		sdp_worker_wait(w, loop.error_backoff_ms);
		return;
	}
	if (loop.error_backoff_ms > 0)
	{
		/* the rows are read again: the error is over */
		loop.error_backoff_ms = 0;
		sdp_worker_set_state(w, SDP_FLOW_RUNNING, true);
	}
	if (n == 0)
		sdp_backfill_finish(w);
	else
	{
		Batch		batch;

		memset(&batch, 0, sizeof(batch));
		batch.nmsgs = n;
		batch.msgs = loop.poll_buf;
		batch.backfill = true;
		batch.read_us = sdp_unix_now_us();
		worker_run_batch(w, &batch);
	}
	MemoryContextSwitchTo(oldcxt);
	MemoryContextReset(w->batch_cxt);
}

static void
worker_loop(FlowWorker *w)
{
	TimestampTz now = GetCurrentTimestamp();

	loop.next_progress = TimestampTzPlusMilliseconds(now, w->opts.progress_interval_ms);
	loop.next_watermarks = now;
	loop.next_partition_refresh = TimestampTzPlusMilliseconds(now, SDP_PARTITION_REFRESH_MS);
	loop.next_broker_probe = now;

	for (;;)
	{
		int			n;

		CHECK_FOR_INTERRUPTS();
		sdp_worker_alive(w);
		sdp_worker_check_stop_request(w);
		if (sdp_skips_changed(w))
			sdp_skips_reload(w);
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (w->prep.op)
			sdp_stateful_reload_if_changed(w);
		if (loop.relay_draining)
		{
			/* the stall runs from the first try to the one that drains, across the retries */
			if (!loop.stall_probed)
			{
				SDP_PROBE_BEGIN(SDP_PROBE_STALL);
				loop.stall_probed = true;
			}
			if (!worker_relay(w))
				continue;
			SDP_PROBE_END(SDP_PROBE_STALL);
			loop.stall_probed = false;
			loop.relay_pending = false;
			loop.relay_draining = false;
		}
		if (loop.relay_wait_seq > 0)
		{
			/*
			 * At start, the rows other workers left (workers of an earlier
			 * layout, whose partitions this one may now consume) are
			 * produced first, by their relays: a key's messages keep their
			 * order when its partition moves between workers.
			 */
			if (kafka_relay_others_pending(w->relay, loop.relay_wait_seq))
			{
				pgstat_report_activity(STATE_IDLE, "sdp: waiting for the outbox rows of other workers");
				sdp_worker_wait(w, 10);
				continue;
			}
			loop.relay_wait_seq = 0;
		}
		if (w->relay && (loop.relay_pending || kafka_relay_busy(w->relay)) && !worker_relay_pump(w))
			continue;

		if (w->backfill != NULL)
		{
			worker_backfill_step(w);
			periodic_work(w, GetCurrentTimestamp());
			continue;
		}

		n = worker_poll(w);
		now = GetCurrentTimestamp();
		/* a batch of messages, or a stateful flow's due timers and checkpoint without input */
		if (n > 0 || (w->prep.op && sdp_stateful_work_due(w, now)))
		{
			MemoryContext oldcxt = MemoryContextSwitchTo(w->batch_cxt);
			Batch		batch;

			memset(&batch, 0, sizeof(batch));
			batch.nmsgs = n;
			batch.msgs = loop.poll_buf;
			batch.read_us = sdp_unix_now_us();
			SDP_PROBE_BEGIN(SDP_PROBE_BATCH);
			worker_run_batch(w, &batch);
			SDP_PROBE_END(SDP_PROBE_BATCH);
			n = batch.nmsgs;	/* a retried batch may have grown */
			for (int i = 0; i < n; i++)
				rd_kafka_message_destroy(loop.poll_buf[i]);
			MemoryContextSwitchTo(oldcxt);
			MemoryContextReset(w->batch_cxt);
			now = GetCurrentTimestamp();
		}
		periodic_work(w, now);

		if (n == 0)
			wake_fetcher_if_behind(w);

		/* idle: the produced rows that no batch deleted go (other workers wait for them at their start) */
		if (n == 0 && w->relay)
		{
			TimestampTz due = kafka_relay_delete_due(w->relay);

			if (due != 0 && due <= now)
				kafka_relay_delete_committed(w->relay);
		}

		if (n == 0)
		{
			/* Nothing arrived: sleep until a message, the latch, or the next periodic work. */
			TimestampTz next = Min(loop.next_progress, loop.next_watermarks);

			if (w->prep.op)
				next = Min(next, sdp_stateful_next_wakeup(w));
			if (kafka_source_is_down(w->kafka))
				next = Min(next, loop.next_broker_probe);
			next = Min(next, loop.next_partition_refresh);
			if (w->relay)
			{
				TimestampTz due = kafka_relay_delete_due(w->relay);

				if (due != 0)
					next = Min(next, due);
				/*
				 * A transaction in flight: its delivery reports wake the
				 * worker (then it commits), or its deadline does.
				 */
				if (kafka_relay_busy(w->relay))
					next = Min(next, kafka_relay_ack_deadline(w->relay));
				else if (loop.relay_pending)
					next = Min(next, TimestampTzPlusMilliseconds(now, 1));
			}
			worker_wait_events(w, ms_until(now, next));
		}
	}
}

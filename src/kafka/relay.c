/*
 * relay.c
 *		A sink flow's relay: the outbox rows (outbox.c) produced to the
 *		sink's topic exactly once (docs/design-issue14.md).
 *
 * A sink flow writes its rows into sdp.outbox in its batch transaction,
 * with its source offsets (outbox.c).  seq comes from one sequence and the
 * flow's worker is the only writer of its rows, so seq order is commit
 * order.
 *
 * The relay runs in the flow's worker between batches: it produces the
 * outbox rows in seq order, in Kafka transactions of a transactional
 * producer whose transactional.id is the flow's (a restarted worker fences
 * its predecessor on a real cluster), then deletes them.  At start and
 * after an error it does so the blocking way (kafka_relay_drain: the flow
 * consumes nothing meanwhile); otherwise without waiting for Kafka
 * (kafka_relay_pump): it produces a round, the flow goes on consuming, and
 * a later call commits the transaction once every message is acknowledged;
 * the next batch's transaction deletes the rows (kafka_relay_delete_in_batch).  Every message
 * carries headers sdp-flow (the flow's id) and sdp-seq (the row's seq), and
 * goes to a partition the relay computes from its key (librdkafka's
 * consistent partitioner: CRC32 of the key; keyless rows by seq).  The
 * messages are the relay's progress record: they commit or abort with the
 * transaction.  At start, and after any transaction that did not commit,
 * the relay reads back, with isolation.level=read_committed, the last
 * message of the flow in each partition: a row is produced iff its seq is
 * at most that message's sdp-seq in the row's partition.  Within a
 * partition the idempotent producer writes in order and without gaps, so
 * this holds on a real cluster (an aborted transaction is invisible) and on
 * librdkafka's mock cluster too (which has no transactions: what an
 * interrupted transaction wrote stays visible, a prefix in each partition).
 * Rows found produced are deleted, the others are produced again.
 *
 * Several workers: each worker writes its rows tagged with its number
 * (sdp.outbox.worker, from 0.5) and relays only those, with a producer of
 * its own (transactional.id ...-flow-<id> for worker 0, ...-flow-<id>-w<n>
 * for worker n) and a header sdp-worker on every message: seq order is
 * commit order within each relay's rows, and the read-back looks for the
 * relay's own last message in a partition, passing over the other relays'.
 * It reads back only the partitions its pending rows go to.  Rows of a
 * worker number that no longer runs (workers went down) are relayed by
 * worker k % workers under worker k's transactional.id
 * (kafka_relay_orphans).  A stateful flow's emitted rows become outbox rows
 * here too (sdp_outbox_row); stateful.c commits them with their state.
 *
 * A row is produced only once its batch's commit is flushed to WAL: with
 * synchronous_commit off, a crash could otherwise lose a batch (rows and
 * offsets) whose messages were already out, and the replayed input would
 * be produced a second time under new seqs.  For the same reason across a
 * failover, it is produced only once the commit is flushed on the standbys
 * that could be promoted, those of the physical replication slots that
 * sdp.standby_slots names (or PostgreSQL 17's synchronized_standby_slots;
 * standby_slots.c): with asynchronous replication a primary that dies
 * loses the commits its standbys had not received, and the promoted
 * standby would produce their input again.  The relay does not block for
 * them: a round whose rows wait returns, the flow goes on consuming, and a
 * later round produces them, with no transaction open or lock held
 * meanwhile; a standby that has not caught up within
 * RELAY_STANDBY_PATIENCE_MS, or a slot that will not advance, makes the
 * relay fail like a sink that cannot be written: the flow stops consuming
 * and shows why.  The read-back at start needs no such wait: it produces
 * nothing, and what a promoted standby produces from the rows it holds is
 * the truth of the new primary.
 *
 * Threads: librdkafka's threads are created with every signal blocked;
 * no callback calls PostgreSQL (none is set but the default logger and
 * the producer's delivery report callback, which does nothing and runs in
 * the worker's own thread, in rd_kafka_poll).
 * Blocking librdkafka calls take at most RELAY_TIMEOUT_MS, and the worker
 * waits on its latch between attempts.
 */
#include "kafka/relay.h"
#include "kafka/outbox.h"
#include "kafka/standby_slots.h"
#include "kafka/kafka_client.h"
#include "kafka/kafka_properties.h"
#include "decl/catalog.h"
#include "decl/flow_options.h"
#include "shmem/metrics.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "catalog/namespace.h"
#include "parser/parse_func.h"
#include "access/htup_details.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#define RELAY_ROWS_PER_TXN	10000
#define RELAY_TIMEOUT_MS	2000
#define RELAY_READBACK		1000	/* offsets read back at a time, from a partition's end */
#define RELAY_IDLE_DELETE_MS	100 /* produced rows no batch deleted go after this long */
#define RELAY_APPEND_MS		5	/* a transaction takes more rows while this young */
#define RELAY_STANDBY_PATIENCE_MS	1000	/* rows wait this long for the standbys before the flow stops consuming */

/* relay_produce's result when its rows wait for the standbys that could be promoted */
#define RELAY_WAITING		(-2)


/* Properties the relay sets itself. */
static const char *const reserved_sink_properties[] = {
	"bootstrap.servers", "metadata.broker.list", "transactional.id", "enable.idempotence",
	"partitioner", "isolation.level",
};

/* Defaults, unless the sink's options say otherwise. */
static const char *const default_sink_properties[][2] = {
	{"socket.nagle.disable", "true"},
	{"linger.ms", "1"},
	{"reconnect.backoff.max.ms", "1000"},
	{"log_level", "4"},
};

struct KafkaRelay
{
	char	   *flow_name;
	int64		flow_id;
	char		flow_id_text[24];
	int			worker;			/* whose outbox rows: the worker that wrote them */
	char		worker_text[12];
	bool		tagged;			/* sdp.outbox has column worker (0.5) */
	char	   *txn_id;
	SdpSinkDef	def;
	MemoryContext cxt;			/* rows of one round */

	rd_kafka_t *rk;
	rd_kafka_topic_t *rkt;
	int			pipefd[2];		/* written when the producer's main queue becomes non-empty */
	SPIPlanPtr	select_plan;	/* the next rows to produce */
	SPIPlanPtr	delete_plan;	/* produced rows */
	bool		initialized;	/* init_transactions done */
	bool		recovered;		/* the outbox agrees with the topic */
	bool		in_txn;			/* rows produced, commit pending */
	bool		aborting;		/* the transaction failed: abort pending */
	int64		txn_last_seq;	/* the last seq of the open transaction */
	TimestampTz txn_begun_at;	/* when the open transaction began */
	TimestampTz txn_produced_at;	/* when its last rows were produced */
	TimestampTz txn_deadline;	/* its acknowledgements are awaited until then */
	int64		produced_upto;	/* rows up to this seq are in a committed or the open transaction */
	int64		committed_upto; /* rows up to this seq are committed to Kafka */
	TimestampTz committed_at;	/* when the last transaction committed */
	int64		deleting_upto;	/* the batch transaction under way deletes rows up to this seq */
	int64		deleted_upto;	/* rows up to this seq are produced and deleted (0: none known) */
	bool		flushed_earlier;	/* the WAL of rows earlier workers left is flushed (first round) */
	XLogRecPtr	standby_wait_lsn;	/* the rows read last wait for the standbys to flush up to here */
	int64		standby_wait_seq;	/* the last of those rows */
	bool		read_bounded;	/* the last round produced only rows that had waited: more may follow */
	TimestampTz standby_wait_since; /* since when rows wait for the standbys (0: they do not) */
	bool		standby_broken; /* they wait for a named slot that will not advance */
	bool		drain_waits;	/* the last kafka_relay_drain failed because they wait (reset by kafka_relay_fence) */
	int			npartitions;
	bool		skips;			/* sdp.outbox has column skipped_by (0.7) */
	char	   *fenced;			/* a newer producer of txn_id fenced this relay: why (in cxt's parent) */

	/* a row librdkafka refused to take (too large): set aside once its transaction is aborted */
	int64		refused_seq;	/* 0: none */
	char		refused_reason[256];

	/* written by the delivery report callback (the worker's thread, in rd_kafka_poll) */
	int64		failed_seq;		/* the largest message whose delivery failed in the open transaction; 0: none */
	size_t		failed_len;
	rd_kafka_resp_err_t failed_err;
};

static void relay_destroy_producer(KafkaRelay *r);
static void relay_committed(KafkaRelay *r);
static bool relay_standby_patience(KafkaRelay *r, bool *pending);
static const char *relay_rows(KafkaRelay *r, Oid *types, Datum *values);
static void outbox_begin(void);
static void outbox_end(void);
static void outbox_execute(SPIPlanPtr *plan, const char *sql, int nargs, Oid *types, Datum *values,
						   bool read_only);
static void outbox_execute_nulls(const char *sql, int nargs, Oid *types, Datum *values, const char *nulls);

/*
 * Check a sink's librdkafka producer properties without connecting
 * anywhere, for sdp_create_sink.
 */
void
kafka_relay_validate_properties(List *properties)
{
	kafka_properties_validate(properties, "sink", reserved_sink_properties, lengthof(reserved_sink_properties),
							  "a sink flow produces with a transactional producer of its own, and chooses each message's partition by its key.",
							  "Sink options are librdkafka producer configuration properties.");
}

/*
 * The most bytes of key and value together that one of the flow's outbox
 * rows may have for the sink's producer to take it: its message.max.bytes
 * (the sink's property, or librdkafka's default) less what the relay adds
 * to every message, a record's largest framing (librdkafka's
 * RD_KAFKAP_MESSAGE_V2_MAX_OVERHEAD, 36 bytes) and its headers sdp-flow,
 * sdp-worker and sdp-seq at their longest.  librdkafka refuses a bigger
 * message at once (MSG_SIZE_TOO_LARGE); the worker sets its row aside
 * instead, when it writes it (exec/table_write.c).  *message_max_bytes: the property.
 */
int
kafka_relay_max_payload(const SdpSinkDef *sink, int64 flow_id, int worker, int *message_max_bytes)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	char		errstr[512];
	char		value[32];
	size_t		size = sizeof(value);
	ListCell   *lc;
	char		flow_text[24];
	char		worker_text[12];
	int			limit = 1000000;
	int			headers;

	for (lc = list_head(sink->properties); lc != NULL; lc = lnext(sink->properties, lnext(sink->properties, lc)))
		if (strcmp(lfirst(lc), "message.max.bytes") == 0)
			(void) rd_kafka_conf_set(conf, lfirst(lc), lfirst(lnext(sink->properties, lc)), errstr, sizeof(errstr));
	if (rd_kafka_conf_get(conf, "message.max.bytes", value, &size) == RD_KAFKA_CONF_OK)
		limit = atoi(value);
	rd_kafka_conf_destroy(conf);
	snprintf(flow_text, sizeof(flow_text), INT64_FORMAT, flow_id);
	snprintf(worker_text, sizeof(worker_text), "%d", worker);
	/* each header: its name and value, and a varint of each length (at most 5 bytes) */
	headers = (strlen("sdp-flow") + strlen(flow_text) + 10) + (strlen("sdp-worker") + strlen(worker_text) + 10) +
		(strlen("sdp-seq") + 20 + 10);
	*message_max_bytes = limit;
	return Max(0, limit - 36 - headers);
}

/*
 * The worker numbers, other than the running ones, whose rows are left in
 * the flow's outbox (its number of workers went down), that worker
 * 'worker_no' of 'nworkers' relays: k % nworkers = worker_no.  Read in a
 * transaction of its own.
 */
List *
kafka_relay_orphans(int64 flow_id, int nworkers, int worker_no, int64 *max_seq)
{
	Oid			types[3] = {INT8OID, INT4OID, INT4OID};
	Datum		values[3] = {Int64GetDatum(flow_id), Int32GetDatum(nworkers), Int32GetDatum(worker_no)};
	MemoryContext cxt = CurrentMemoryContext;
	List	   *orphans = NIL;

	outbox_begin();
	if (sdp_outbox_has_worker())
	{
		outbox_execute(NULL, "SELECT DISTINCT worker FROM sdp.outbox "
					   "WHERE flow_id = $1 AND worker >= $2 AND worker % $2 = $3 ORDER BY worker",
					   3, types, values, true);
		for (uint64 i = 0; i < SPI_processed; i++)
		{
			bool		isnull;
			int			k = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
			MemoryContext old = MemoryContextSwitchTo(cxt);

			orphans = lappend_int(orphans, k);
			MemoryContextSwitchTo(old);
		}
		outbox_execute(NULL, "SELECT pg_catalog.max(seq) FROM sdp.outbox WHERE flow_id = $1", 1, types, values, true);
		if (SPI_processed == 1)
		{
			bool		isnull;
			Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

			*max_seq = isnull ? 0 : DatumGetInt64(d);
		}
	}
	outbox_end();
	return orphans;
}

/*
 * Whether the flow's outbox holds rows up to seq 'upto' that other workers
 * than the relay's wrote (other relays produce them).  In a transaction of
 * its own.
 */
bool
kafka_relay_others_pending(KafkaRelay *r, int64 upto)
{
	Oid			types[3];
	Datum		values[3];
	bool		pending;

	(void) relay_rows(r, types, values);
	types[2] = INT8OID;
	values[2] = Int64GetDatum(upto);
	outbox_begin();
	outbox_execute(NULL, "SELECT 1 FROM sdp.outbox WHERE flow_id = $1 AND worker <> $2 AND seq <= $3 LIMIT 1",
				   3, types, values, true);
	pending = SPI_processed > 0;
	outbox_end();
	return pending;
}

/* A client configuration: defaults, the sink's properties, then ours. */
static rd_kafka_conf_t *
relay_conf(KafkaRelay *r, const char *const (*ours)[2], int nours)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	char		errstr[512];
	ListCell   *lc;

	for (int i = 0; i < lengthof(default_sink_properties); i++)
		(void) rd_kafka_conf_set(conf, default_sink_properties[i][0], default_sink_properties[i][1],
								 errstr, sizeof(errstr));
	for (lc = list_head(r->def.properties); lc != NULL; lc = lnext(r->def.properties, lnext(r->def.properties, lc)))
		if (!sdp_source_format_option(lfirst(lc)))
			(void) rd_kafka_conf_set(conf, lfirst(lc), lfirst(lnext(r->def.properties, lc)), errstr, sizeof(errstr));
	(void) rd_kafka_conf_set(conf, "bootstrap.servers", r->def.bootstrap_servers, errstr, sizeof(errstr));
	for (int i = 0; i < nours; i++)
		(void) rd_kafka_conf_set(conf, ours[i][0], ours[i][1], errstr, sizeof(errstr));
	kafka_conf_restrict_hosts(conf);
	return conf;
}

/*
 * The transactional.id of the relay of worker 'worker' of a flow (palloc'd):
 * sdp-<database>-flow-<id> for worker 0, sdp-<database>-flow-<id>-w<n> for
 * worker n.  Also what sdp.sink_relays shows, for a cluster's ACLs.
 */
char *
kafka_relay_transactional_id(int64 flow_id, int worker)
{
	return worker == 0 ? psprintf("sdp-%s-flow-" INT64_FORMAT, sdp_database, flow_id)
		: psprintf("sdp-%s-flow-" INT64_FORMAT "-w%d", sdp_database, flow_id, worker);
}

/*
 * The relay of the outbox rows that worker 'worker' of the flow wrote.
 * Its transactional.id is stable per flow and worker number, so that the
 * next relay of the same rows fences this one: sdp-<database>-flow-<id>
 * for worker 0 (the one a flow with one worker always had), and
 * sdp-<database>-flow-<id>-w<n> for worker n.  'tagged': sdp.outbox has
 * column worker (without it, 0.4, the flow has one worker).
 */
KafkaRelay *
kafka_relay_create(const SdpSinkDef *sink, int64 flow_id, const char *flow_name, int worker, bool tagged,
				   bool skips)
{
	KafkaRelay *r = palloc0(sizeof(KafkaRelay));

	Assert(tagged || worker == 0);
	r->skips = skips;
	r->flow_name = pstrdup(flow_name);
	r->flow_id = flow_id;
	r->worker = worker;
	r->tagged = tagged;
	snprintf(r->flow_id_text, sizeof(r->flow_id_text), INT64_FORMAT, flow_id);
	snprintf(r->worker_text, sizeof(r->worker_text), "%d", worker);
	r->txn_id = kafka_relay_transactional_id(flow_id, worker);
	r->def = *sink;
	r->cxt = AllocSetContextCreate(CurrentMemoryContext, "sdp relay rows", ALLOCSET_DEFAULT_SIZES);
	if (pipe2(r->pipefd, O_NONBLOCK | O_CLOEXEC) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create pipe: %m")));
	return r;
}

/*
 * A descriptor that becomes readable when the producer has something for
 * the worker to serve (a delivery report, mostly): the worker waits on it
 * while a transaction awaits its acknowledgements, and then calls
 * kafka_relay_serve.
 */
int
kafka_relay_event_fd(KafkaRelay *r)
{
	return r->pipefd[0];
}

/*
 * Serve what the producer queued for the worker: the delivery reports of
 * acknowledged messages (rd_kafka_outq_len counts a message until its
 * report is served).  The pipe is emptied first: librdkafka writes to it
 * again once the queue has been served and something new arrives.
 */
void
kafka_relay_serve(KafkaRelay *r)
{
	char		drain[64];

	while (read(r->pipefd[0], drain, sizeof(drain)) > 0)
		;
	if (r->rk)
		(void) rd_kafka_poll(r->rk, 0);
}

/* The relay's producer and memory go; used for the relay of an earlier worker once its rows are out. */
void
kafka_relay_destroy(KafkaRelay *r)
{
	relay_destroy_producer(r);
	close(r->pipefd[0]);
	close(r->pipefd[1]);
	if (r->select_plan)
		SPI_freeplan(r->select_plan);
	if (r->delete_plan)
		SPI_freeplan(r->delete_plan);
	MemoryContextDelete(r->cxt);
	pfree(r->txn_id);
	pfree(r->flow_name);
	pfree(r);
}

static void
relay_destroy_producer(KafkaRelay *r)
{
	if (r->rkt)
		rd_kafka_topic_destroy(r->rkt);
	if (r->rk)
		kafka_client_destroy(r->rk);
	r->rkt = NULL;
	r->rk = NULL;
	r->initialized = false;
	r->recovered = false;
	r->in_txn = false;
	r->aborting = false;
}

/*
 * Delivery reports, served in the worker's thread by rd_kafka_poll.  The
 * callback does nothing (a failed delivery makes the transaction fail, and
 * commit_transaction says so); it is set so that librdkafka queues a report
 * when a produce request is acknowledged.  Without one it queues nothing,
 * and the flush inside commit_transaction, which polls that queue 10 ms at
 * a time until every message is acknowledged, sleeps its 10 ms through the
 * acknowledgement: each Kafka transaction took 10 to 50 ms instead of a
 * few round trips (librdkafka 2.0, rd_kafka_flush).
 */
static void
relay_delivered(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	KafkaRelay *r = opaque;

	/* a message the sink refused: the largest one is named when the commit fails (relay_failed) */
	if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR && (r->failed_seq == 0 || m->len > r->failed_len))
	{
		r->failed_seq = (int64) (intptr_t) m->_private;
		r->failed_len = m->len;
		r->failed_err = m->err;
	}
}

static bool
relay_create_producer(KafkaRelay *r, char **error)
{
	const char *const ours[][2] = {
		{"transactional.id", r->txn_id},
		{"enable.idempotence", "true"},
	};
	char		errstr[512];
	rd_kafka_conf_t *conf = relay_conf(r, ours, lengthof(ours));

	rd_kafka_conf_set_dr_msg_cb(conf, relay_delivered);
	rd_kafka_conf_set_opaque(conf, r);
	r->rk = kafka_client_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
	if (r->rk == NULL)
	{
		*error = psprintf("sink \"%s\": could not create the producer: %s", r->def.name, errstr);
		return false;
	}
	r->rkt = rd_kafka_topic_new(r->rk, r->def.topic, NULL);
	if (r->rkt == NULL)
	{
		*error = psprintf("sink \"%s\": could not open topic \"%s\": %s", r->def.name, r->def.topic,
						  rd_kafka_err2str(rd_kafka_last_error()));
		relay_destroy_producer(r);
		return false;
	}
	/* the delivery reports wake the worker (kafka_relay_event_fd) */
	{
		rd_kafka_queue_t *main_queue = rd_kafka_queue_get_main(r->rk);

		rd_kafka_queue_io_event_enable(main_queue, r->pipefd[1], "1", 1);
		rd_kafka_queue_destroy(main_queue);
	}
	return true;
}

/*
 * A transactional call failed: what comes next.  A fatal error (fenced by
 * a newer producer of the flow, say) or one that is neither retriable nor
 * abortable starts over with a new producer; an abortable one aborts; a
 * retriable one (a timeout) is retried as is.  Either of the first two is
 * followed by a read-back of the topic.
 */
static bool
relay_failed(KafkaRelay *r, const char *what, rd_kafka_error_t *err, char **error)
{
	rd_kafka_resp_err_t code = rd_kafka_error_code(err);
	char		fatal[256];

	*error = psprintf("sink \"%s\": %s: %s", r->def.name, what, rd_kafka_error_string(err));
	/* a fatal error's own code (the call's may be a consequence: __FATAL, __STATE) */
	if (rd_kafka_error_is_fatal(err))
	{
		rd_kafka_resp_err_t fatal_code = rd_kafka_fatal_error(r->rk, fatal, sizeof(fatal));

		if (fatal_code != RD_KAFKA_RESP_ERR_NO_ERROR)
			code = fatal_code;
	}
	if (code == RD_KAFKA_RESP_ERR__FENCED || code == RD_KAFKA_RESP_ERR_PRODUCER_FENCED ||
		code == RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH)
	{
		/*
		 * A newer producer with our transactional.id: on this server the
		 * launcher starts a flow's workers only once the earlier ones have
		 * exited, so it is another server's (see kafka_relay_fence).
		 */
		r->fenced = MemoryContextStrdup(GetMemoryChunkContext(r),
										psprintf("sink \"%s\": fenced: a newer producer with transactional.id \"%s\" has taken over "
												 "the relay of these rows, so another server runs this flow (a promoted standby, "
												 "a restored copy, a cluster with a database of this name whose flow has id "
												 INT64_FORMAT "); this one stops relaying, its outbox rows stay, and its open "
												 "Kafka transaction is aborted (%s: %s)",
												 r->def.name, r->txn_id, r->flow_id, what, rd_kafka_error_string(err)));
		*error = pstrdup(r->fenced);
	}
	if (r->failed_seq != 0)
	{
		/* a message the sink refused, whatever the rows around it: say which, and how to go past it */
		*error = psprintf("%s; the sink refused outbox row %lld (%zu bytes): %s; if it is that row's fault, "
						  "SELECT sdp_skip_outbox_row('%s', %lld) sets it aside",
						  *error, (long long) r->failed_seq, r->failed_len, rd_kafka_err2str(r->failed_err),
						  r->flow_name, (long long) r->failed_seq);
		r->failed_seq = 0;
	}
	if (rd_kafka_error_is_fatal(err) ||
		(!rd_kafka_error_is_retriable(err) && !rd_kafka_error_txn_requires_abort(err)))
		relay_destroy_producer(r);
	else if (rd_kafka_error_txn_requires_abort(err))
	{
		r->in_txn = false;
		r->aborting = true;
	}
	rd_kafka_error_destroy(err);
	return false;
}

/* Which partition a row goes to: a function of its key, so that the read-back finds it. */
static int32
row_partition(KafkaRelay *r, const char *key, int64 seq)
{
	if (key == NULL)
		return (int32) (seq % r->npartitions);
	return rd_kafka_msg_partitioner_consistent(r->rkt, key, strlen(key), r->npartitions, NULL, NULL);
}

/*
 * Flush all the WAL inserted so far (every batch whose outbox rows the
 * relay read: this worker's, and those an earlier worker left, committed
 * asynchronously).  GetXLogInsertRecPtr() is where the next record would
 * start: at the start of a page that is past the page's header, not
 * inserted yet, and XLogFlush() refuses a request beyond what is ("xlog
 * flush request ... is not satisfied", seen in test 082).  The end of the
 * last record is the page's start there, as xlog.c computes it.
 */
static XLogRecPtr
flush_inserted_wal(void)
{
	XLogRecPtr	upto = GetXLogInsertRecPtr();

	if (XLogSegmentOffset(upto, wal_segment_size) == SizeOfXLogLongPHD)
		upto -= SizeOfXLogLongPHD;
	else if (upto % XLOG_BLCKSZ == SizeOfXLogShortPHD)
		upto -= SizeOfXLogShortPHD;
	XLogFlush(upto);
	return upto;
}

/*
 * Whether the standbys that could be promoted (standby_slots.c) have
 * flushed WAL up to lsn, where the commits of the rows about to be
 * produced end.  If not, the reason goes to *error and the rows wait:
 * relay_produce reads none again until the standbys have flushed up to lsn.
 */
static bool
relay_standbys_flushed(KafkaRelay *r, XLogRecPtr lsn, char **error)
{
	char	   *reason;

	if (standby_slots_flushed(lsn, &reason, &r->standby_broken))
	{
		r->standby_wait_lsn = InvalidXLogRecPtr;
		r->standby_wait_since = 0;
		return true;
	}
	r->standby_wait_lsn = lsn;
	if (r->standby_wait_since == 0)
		r->standby_wait_since = GetCurrentTimestamp();
	*error = psprintf("sink \"%s\": its rows wait for the standbys that could be promoted: %s",
					  r->def.name, reason);
	return false;
}

/* Run a statement on the outbox, in a transaction of its own, as the extension. */
static void
outbox_begin(void)
{
	sdp_start_transaction();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
}

static void
outbox_end(void)
{
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();
}

/*
 * Run a statement on the outbox (SPI connected).  A statement of every
 * round (plan not NULL) is prepared the first time into *plan and kept for
 * the relay's life: a round's SELECT and DELETE are then neither parsed nor
 * planned again (a generic plan: a range of one flow's seqs on the primary
 * key).
 */
static void
outbox_execute(SPIPlanPtr *plan, const char *sql, int nargs, Oid *types, Datum *values, bool read_only)
{
	SdpCatalogScope scope;
	int			rc;

	sdp_catalog_enter(&scope);
	if (plan == NULL)
		rc = SPI_execute_with_args(sql, nargs, types, values, NULL, read_only, 0);
	else if (*plan == NULL)
	{
		SPIPlanPtr	prepared = SPI_prepare(sql, nargs, types);

		if (prepared == NULL)
			elog(ERROR, "could not prepare a statement on sdp.outbox: %s", SPI_result_code_string(SPI_result));
		if (SPI_keepplan(prepared) != 0)
			elog(ERROR, "could not keep a statement on sdp.outbox");
		*plan = prepared;
	}
	if (plan != NULL)
		rc = SPI_execute_plan(*plan, values, NULL, read_only, 0);
	sdp_catalog_leave(&scope);
	if (rc < 0)
		elog(ERROR, "statement on sdp.outbox failed: %s", SPI_result_code_string(rc));
}

/* A statement with null parameters on the outbox (SPI connected), not prepared. */
static void
outbox_execute_nulls(const char *sql, int nargs, Oid *types, Datum *values, const char *nulls)
{
	SdpCatalogScope scope;
	int			rc;

	sdp_catalog_enter(&scope);
	rc = SPI_execute_with_args(sql, nargs, types, values, nulls, false, 0);
	sdp_catalog_leave(&scope);
	if (rc < 0)
		elog(ERROR, "statement on sdp.outbox failed: %s", SPI_result_code_string(rc));
}

/*
 * The relay's rows: "flow_id = $1 AND worker = $2" (or without the worker,
 * on a 0.4 catalog), with $1 and $2 in types and values; the caller's
 * parameters follow from $3.
 */
static const char *
relay_rows(KafkaRelay *r, Oid *types, Datum *values)
{
	types[0] = INT8OID;
	values[0] = Int64GetDatum(r->flow_id);
	types[1] = INT4OID;
	values[1] = Int32GetDatum(r->worker);
	return r->tagged ? "flow_id = $1 AND worker = $2" : "flow_id = $1 AND $2 = 0";
}

/*
 * Set the relay's outbox rows seqs[0..n) aside (SPI connected, in a
 * transaction): moved into sdp.dead_letters and never produced.  A row its
 * owner asked to skip (skipped_by) goes at stage 'skipped'; the others at
 * stage 'write', with reason and sqlstate: a row the sink cannot take.
 * They come from no one message (their batch committed), so the dead
 * letters have no partition or offset; key and payload are the message's.
 */
static void
outbox_set_aside(KafkaRelay *r, const int64 *seqs, int n, const char *reason, const char *sqlstate)
{
	Oid			types[5];
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};
	const char *mine = relay_rows(r, types, values);
	Datum	   *d = palloc(sizeof(Datum) * Max(n, 1));

	for (int i = 0; i < n; i++)
		d[i] = Int64GetDatum(seqs[i]);
	types[2] = INT8ARRAYOID;
	values[2] = PointerGetDatum(construct_array(d, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	types[3] = TEXTOID;
	values[3] = reason ? CStringGetTextDatum(reason) : (Datum) 0;
	nulls[3] = reason ? ' ' : 'n';
	types[4] = TEXTOID;
	values[4] = sqlstate ? CStringGetTextDatum(sqlstate) : (Datum) 0;
	nulls[4] = sqlstate ? ' ' : 'n';
	outbox_execute_nulls(psprintf("WITH gone AS (DELETE FROM sdp.outbox WHERE %s AND seq = ANY ($3) "
								  "              RETURNING seq, key, value, %s AS skipped_by) "
								  "INSERT INTO sdp.dead_letters (flow_id, flow, owner, kafka_key, payload, payload_text, "
								  "                              stage, error, sqlstate) "
								  "SELECT $1, f.name, f.owner, g.key, "
								  "       %s, g.value, "
								  "       CASE WHEN g.skipped_by IS NULL THEN 'write' ELSE 'skipped' END, "
								  "       CASE WHEN g.skipped_by IS NULL THEN $4 "
								  "            ELSE 'outbox row ' || g.seq || ' set aside unproduced at the request of role ' || g.skipped_by END, "
								  "       CASE WHEN g.skipped_by IS NULL THEN $5 END "
								  "  FROM gone g JOIN sdp.flows f ON f.id = $1",
								  mine, r->skips ? "skipped_by" : "NULL::text",
								  /* an Avro sink's value is its message in hex: the payload is the message */
								  r->def.format == SDP_FORMAT_AVRO ? "pg_catalog.decode(g.value, 'hex')"
								  : "convert_to(g.value, getdatabaseencoding())"),
						 5, types, values, nulls);
	ereport(LOG,
			(errmsg("sdp flow \"%s\" set %d outbox row%s aside unproduced, from %lld: %s",
					r->flow_name, n, n == 1 ? "" : "s", (long long) seqs[0],
					reason ? reason : "at its owner's request (sdp_skip_outbox_row)")));
}

/*
 * Delete the rows up to seq, produced and committed to Kafka.  The scans of
 * the outbox start after deleted_upto: the rows below are deleted, and the
 * index entries of deleted rows are only skipped once vacuum removes them
 * (or once a scan finds their deletion committed and flushed, which with
 * synchronous_commit off is a round later), so a scan from the flow's first
 * seq walked over every row the flow produced since the last vacuum, at
 * every round (autovacuum looks at a database once a minute).
 */
static void
outbox_delete_upto(KafkaRelay *r, int64 seq)
{
	Oid			types[4];
	Datum		values[4];
	const char *mine = relay_rows(r, types, values);

	types[2] = INT8OID;
	values[2] = Int64GetDatum(r->deleted_upto);
	types[3] = INT8OID;
	values[3] = Int64GetDatum(seq);
	outbox_begin();
	outbox_execute(&r->delete_plan, psprintf("DELETE FROM sdp.outbox WHERE %s AND seq > $3 AND seq <= $4", mine),
				   4, types, values, false);
	outbox_end();
	r->deleted_upto = seq;
}

/* Whether message m is one of this relay's: headers sdp-flow and sdp-worker (none: worker 0, as 0.4 wrote). */
static bool
relay_message_seq(KafkaRelay *r, rd_kafka_message_t *m, int64 *seq_out)
{
	rd_kafka_headers_t *hdrs;
	const void *flow,
			   *worker,
			   *seq;
	size_t		flow_len,
				worker_len,
				seq_len;
	char		buf[24];

	if (rd_kafka_message_headers(m, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR ||
		rd_kafka_header_get_last(hdrs, "sdp-flow", &flow, &flow_len) != RD_KAFKA_RESP_ERR_NO_ERROR ||
		flow_len != strlen(r->flow_id_text) || memcmp(flow, r->flow_id_text, flow_len) != 0)
		return false;
	if (rd_kafka_header_get_last(hdrs, "sdp-worker", &worker, &worker_len) == RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		if (worker_len != strlen(r->worker_text) || memcmp(worker, r->worker_text, worker_len) != 0)
			return false;
	}
	else if (r->worker != 0)
		return false;
	if (rd_kafka_header_get_last(hdrs, "sdp-seq", &seq, &seq_len) != RD_KAFKA_RESP_ERR_NO_ERROR ||
		seq_len >= sizeof(buf))
		return false;
	memcpy(buf, seq, seq_len);
	buf[seq_len] = '\0';
	*seq_out = strtoi64(buf, NULL, 10);
	return true;
}

/*
 * The last seq of this relay (flow and worker) in partition p as a
 * read_committed consumer sees it, or -1: read back from the partition's
 * end, RELAY_READBACK offsets at a time, until a message of the relay is
 * found or the start of the partition is reached.  Other relays (the
 * flow's other workers, other flows) may have written after it: their
 * messages are passed over.  The windows are assigned by logical offset
 * (the tail) and then by absolute offsets below the first one read, so
 * that no watermark query is needed: rd_kafka_query_watermark_offsets
 * does not keep its timeout when the broker goes away while it waits.
 * Every wait here is a poll of at most 100 ms, within a deadline that each
 * message further into the window moves on: a window's end is a fixed
 * offset, so a read that goes on making progress ends, however slow the
 * broker (the embedded broker answers a fetch with one produce batch, and
 * a window of transactions of a few rows each took longer than one
 * deadline on a loaded machine); one that stops making progress times out.
 */
static bool
readback_partition(KafkaRelay *r, rd_kafka_t *reader, int32 p, int64 *last, char **error)
{
	int64		end = -1;		/* the next window ends before this offset; -1: the partition's end */

	*last = -1;
	for (;;)
	{
		rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
		TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 3 * RELAY_TIMEOUT_MS);
		int64		first = -1;	/* the lowest offset read in this window */
		int64		furthest = -1;	/* the highest */
		int64		stable_at = -1; /* the tail window: read up to here */
		int64		eof_at = -1;	/* where the reader last found the partition's (stable) end */
		bool		done = false;
		rd_kafka_resp_err_t err;

		rd_kafka_topic_partition_list_add(list, r->def.topic, p)->offset =
			end < 0 ? RD_KAFKA_OFFSET_TAIL(RELAY_READBACK) : Max(0, end - RELAY_READBACK);
		err = rd_kafka_assign(reader, list);
		rd_kafka_topic_partition_list_destroy(list);
		if (err)
		{
			*error = psprintf("sink \"%s\": reading back partition %d: %s", r->def.name, p, rd_kafka_err2str(err));
			return false;
		}
		while (!done)
		{
			rd_kafka_message_t *m;

			CHECK_FOR_INTERRUPTS();
			if (GetCurrentTimestamp() > deadline)
			{
				if (stable_at >= 0 && eof_at >= 0 && eof_at < stable_at)
					*error = psprintf("sink \"%s\": reading back partition %d: timed out: read_committed ends at offset " INT64_FORMAT
									  " (the last stable offset), below the end " INT64_FORMAT
									  ", behind a Kafka transaction still open there (another producer's; or, if it stays, a hanging transaction, which Kafka's kafka-transactions.sh find-hanging shows: its abort discards that transaction's messages in the partition, and they may be rows this relay counts as produced)",
									  r->def.name, p, eof_at, stable_at);
				else
					*error = psprintf("sink \"%s\": reading back partition %d: timed out", r->def.name, p);
				(void) rd_kafka_assign(reader, NULL);
				return false;
			}
			m = rd_kafka_consumer_poll(reader, 100);
			if (m == NULL)
				continue;
			if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF)
			{
				int64		lo,
							hi;

				/*
				 * read_committed ends at the last stable offset: a
				 * transaction of another writer (another worker of the flow)
				 * still open holds it below messages of ours that committed
				 * after that transaction began.  The tail window reads on
				 * until the end passes the high watermark seen at its first
				 * end (ours are all below it: our previous producer is fenced).
				 */
				eof_at = m->offset;
				if (end < 0 && stable_at < 0 &&
					rd_kafka_get_watermark_offsets(reader, r->def.topic, p, &lo, &hi) == RD_KAFKA_RESP_ERR_NO_ERROR)
					stable_at = hi;
				if (end >= 0 || m->offset >= stable_at)
					done = true;
			}
			else if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR)
			{
				/* a broker that went away, say: start over with a new reader, after a wait */
				*error = psprintf("sink \"%s\": reading back partition %d: %s", r->def.name, p, rd_kafka_message_errstr(m));
				rd_kafka_message_destroy(m);
				(void) rd_kafka_assign(reader, NULL);
				return false;
			}
			else if (end >= 0 && m->offset >= end)
				done = true;	/* past the window: the previous one read from here */
			else
			{
				int64		seq;

				if (first < 0 || m->offset < first)
					first = m->offset;
				if (m->offset > furthest)
				{
					furthest = m->offset;
					deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 3 * RELAY_TIMEOUT_MS);
				}
				/*
				 * The tail window ends at the high watermark that the fetch
				 * bringing its first message saw: while another relay (another
				 * worker) keeps writing the partition faster than this reads,
				 * its end never comes (no EOF), and ours are all below that
				 * mark (our previous producer is gone).
				 */
				if (end < 0 && stable_at < 0)
				{
					int64		lo,
								hi;

					if (rd_kafka_get_watermark_offsets(reader, r->def.topic, p, &lo, &hi) == RD_KAFKA_RESP_ERR_NO_ERROR &&
						hi > m->offset)
						stable_at = hi;
				}
				if (relay_message_seq(r, m, &seq))
					*last = Max(*last, seq);
				if ((end >= 0 && m->offset >= end - 1) || (end < 0 && stable_at >= 0 && m->offset >= stable_at - 1))
					done = true;
			}
			rd_kafka_message_destroy(m);
		}
		(void) rd_kafka_assign(reader, NULL);
		/* found; or nothing before the window's end: the partition's start */
		if (*last >= 0 || first <= 0)
			return true;
		end = first;
	}
}

/*
 * Bring the outbox in line with the topic: read back the relay's last seq
 * in every partition that a row of its outbox goes to (the others cannot
 * hold one of its rows that is not deleted), and delete the rows found
 * produced.
 */
static bool
relay_recover(KafkaRelay *r, char **error)
{
	const char *const ours[][2] = {
		{"isolation.level", "read_committed"},
		{"enable.partition.eof", "true"},
		{"enable.auto.commit", "false"},
		{"auto.offset.reset", "earliest"},
		{"group.id", r->txn_id},
		/* a fetch at a partition's end returns after this wait, not 500 ms */
		{"fetch.wait.max.ms", "10"},
	};
	const struct rd_kafka_metadata *md;
	rd_kafka_resp_err_t err;
	rd_kafka_t *reader = NULL;
	char		errstr[512];
	int64	   *last;
	bool	   *wanted;
	bool		ok = true;
	Oid			types[3];
	Datum		values[3];
	const char *mine = relay_rows(r, types, values);
	int64	   *seqs;
	int32	   *parts;
	int			npending;
	Datum	   *produced;
	int			nproduced = 0;
	int			nread = 0;
	MemoryContext cxt = CurrentMemoryContext;

	err = rd_kafka_metadata(r->rk, 0, r->rkt, &md, RELAY_TIMEOUT_MS);
	if (err)
	{
		*error = psprintf("sink \"%s\": topic \"%s\": %s", r->def.name, r->def.topic, rd_kafka_err2str(err));
		return false;
	}
	if (md->topic_cnt != 1 || md->topics[0].err || md->topics[0].partition_cnt <= 0)
	{
		*error = psprintf("sink \"%s\": topic \"%s\": %s", r->def.name, r->def.topic,
						  md->topic_cnt == 1 && md->topics[0].err ? rd_kafka_err2str(md->topics[0].err) : "no partitions");
		rd_kafka_metadata_destroy(md);
		return false;
	}
	r->npartitions = md->topics[0].partition_cnt;
	rd_kafka_metadata_destroy(md);

	/*
	 * What the open transaction held (it aborted, or it is unknown whether
	 * it committed) is produced again unless the read-back finds it.
	 */
	r->produced_upto = r->committed_upto;

	/* the relay's rows, and the partitions they go to */
	outbox_begin();
	outbox_execute(NULL, psprintf("SELECT seq, key FROM sdp.outbox WHERE %s ORDER BY seq", mine), 2, types, values, true);
	npending = (int) SPI_processed;
	/* in the caller's memory: SPI's goes at outbox_end */
	seqs = MemoryContextAlloc(cxt, sizeof(int64) * Max(1, npending));
	parts = MemoryContextAlloc(cxt, sizeof(int32) * Max(1, npending));
	for (int i = 0; i < npending; i++)
	{
		bool		isnull;
		char	   *key = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);

		seqs[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
		parts[i] = row_partition(r, key, seqs[i]);
	}
	outbox_end();
	if (npending == 0)
	{
		r->deleted_upto = Max(r->deleted_upto, r->committed_upto);
		return true;
	}

	wanted = palloc0(sizeof(bool) * r->npartitions);
	for (int i = 0; i < npending; i++)
		wanted[parts[i]] = true;
	last = palloc(sizeof(int64) * r->npartitions);
	for (int p = 0; ok && p < r->npartitions; p++)
	{
		last[p] = -1;
		if (!wanted[p])
			continue;
		if (reader == NULL)
		{
			reader = kafka_client_new(RD_KAFKA_CONSUMER, relay_conf(r, ours, lengthof(ours)), errstr, sizeof(errstr));
			if (reader == NULL)
			{
				*error = psprintf("sink \"%s\": could not create the read-back consumer: %s", r->def.name, errstr);
				return false;
			}
		}
		ok = readback_partition(r, reader, p, &last[p], error);
		nread++;
	}
	if (reader)
		kafka_client_destroy(reader);
	if (!ok)
		return false;

	/* the rows found produced go */
	produced = palloc(sizeof(Datum) * npending);
	for (int i = 0; i < npending; i++)
		if (seqs[i] <= last[parts[i]])
			produced[nproduced++] = Int64GetDatum(seqs[i]);
	if (nproduced > 0)
	{
		types[2] = INT8ARRAYOID;
		values[2] = PointerGetDatum(construct_array(produced, nproduced, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		outbox_begin();
		outbox_execute(NULL, psprintf("DELETE FROM sdp.outbox WHERE %s AND seq = ANY ($3)", mine), 3, types, values, false);
		outbox_end();
	}
	/* the committed rows were found produced, and are deleted */
	r->deleted_upto = Max(r->deleted_upto, r->committed_upto);
	ereport(LOG,
			(errmsg("sdp flow \"%s\": worker %d's outbox holds %d rows, %d of them already in topic \"%s\" (%d of its %d partitions read back)",
					r->flow_name, r->worker, npending, nproduced, r->def.topic, nread, r->npartitions)));
	pfree(last);
	pfree(wanted);
	return true;
}

/*
 * Wait until the transaction's messages are acknowledged (or failed), at
 * most RELAY_TIMEOUT_MS, waking librdkafka's broker threads every
 * millisecond, so that commit_transaction has nothing left to flush.  A
 * broker thread holds back the messages of a partition not yet registered
 * in the transaction (AddPartitionsToTxn, sent by librdkafka's main thread
 * after the first message to it), and nothing wakes it when the
 * registration comes back; commit_transaction's flush wakes it once, when
 * it starts, often before that: the commit then waited for the broker
 * thread's next wake-up (3 ms and more, seen in librdkafka's debug log)
 * with the messages unsent.  rd_kafka_flush wakes the broker threads each
 * time it is called, and returns at the first delivery report.
 */
static void
relay_await_delivery(KafkaRelay *r)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), RELAY_TIMEOUT_MS);

	while (rd_kafka_outq_len(r->rk) > 0 && GetCurrentTimestamp() < deadline)
	{
		(void) rd_kafka_flush(r->rk, 1);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * Hex digits (an Avro sink's outbox value) into the bytes they spell, in
 * place; returns how many.  The text is the engine's own (encode(..., 'hex')).
 */
static size_t
hex_to_bytes(char *text, size_t len)
{
	size_t		n = 0;

	for (size_t i = 0; i + 1 < len; i += 2)
	{
		int			hi = text[i] <= '9' ? text[i] - '0' : (text[i] | 0x20) - 'a' + 10;
		int			lo = text[i + 1] <= '9' ? text[i + 1] - '0' : (text[i + 1] | 0x20) - 'a' + 10;

		text[n++] = (char) ((hi << 4) | lo);
	}
	return n;
}

/*
 * Produce the next outbox rows in a transaction (begun here unless one is
 * open, committed by the caller).  Returns the number of rows, 0 when the
 * outbox holds none that is not produced, -1 on an error and RELAY_WAITING
 * when they wait for the standbys, with the reason in *error for both.
 */
static int
relay_produce(KafkaRelay *r, bool await, char **error)
{
	MemoryContext oldcxt;
	Oid			types[4];
	Datum		values[4];
	const char *mine = relay_rows(r, types, values);
	rd_kafka_error_t *kerr;
	int			n;
	int			nread;
	int64	   *seqs;
	char	  **keys;
	char	  **vals;
	size_t	   *lens;
	int64	   *skipped;
	int			nskipped;
	XLogRecPtr	flushed;
	int64		upto = PG_INT64_MAX;	/* the rows to read: those up to this seq */

	/*
	 * The rows read last wait for the standbys: none is read again before
	 * they are flushed there.  Then those rows go, and only those: the
	 * rows committed since wait for their own commits, in a later round
	 * (were they read with them, the relay would chase the newest commit
	 * and produce nothing while batches keep coming).
	 */
	r->read_bounded = false;
	if (r->standby_wait_lsn != InvalidXLogRecPtr)
	{
		if (!relay_standbys_flushed(r, r->standby_wait_lsn, error))
			return RELAY_WAITING;
		upto = r->standby_wait_seq;
	}

again:
	SDP_PROBE_BEGIN(SDP_PROBE_SELECT);
	MemoryContextReset(r->cxt);
	outbox_begin();
	types[2] = INT8OID;
	values[2] = Int64GetDatum(Max(r->produced_upto, r->deleted_upto));
	types[3] = INT8OID;
	values[3] = Int64GetDatum(upto);
	outbox_execute(&r->select_plan,
				   psprintf("SELECT seq, key, value, %s FROM sdp.outbox WHERE %s AND seq > $3 AND seq <= $4 ORDER BY seq LIMIT %d",
							r->skips ? "skipped_by IS NOT NULL" : "false", mine, RELAY_ROWS_PER_TXN),
				   4, types, values, true);
	nread = (int) SPI_processed;
	oldcxt = MemoryContextSwitchTo(r->cxt);
	seqs = palloc(sizeof(int64) * Max(nread, 1));
	keys = palloc(sizeof(char *) * Max(nread, 1));
	vals = palloc(sizeof(char *) * Max(nread, 1));
	lens = palloc(sizeof(size_t) * Max(nread, 1));
	skipped = palloc(sizeof(int64) * Max(nread, 1));
	n = nskipped = 0;
	for (int i = 0; i < nread; i++)
	{
		bool		isnull;
		int64		seq = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));

		/* a row its owner asked to skip (sdp_skip_outbox_row) is not produced */
		if (DatumGetBool(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 4, &isnull)))
		{
			skipped[nskipped++] = seq;
			continue;
		}
		seqs[n] = seq;
		keys[n] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);
		vals[n] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 3);
		lens[n] = strlen(vals[n]);
		/* an Avro sink's rows hold the message in hex (outbox.c) */
		if (r->def.format == SDP_FORMAT_AVRO)
			lens[n] = hex_to_bytes(vals[n], lens[n]);
		n++;
	}
	MemoryContextSwitchTo(oldcxt);
	if (nskipped > 0)
		outbox_set_aside(r, skipped, nskipped, NULL, NULL);
	outbox_end();
	if (n == 0 && nskipped > 0)
		goto again;
	if (n == 0 && upto != PG_INT64_MAX)
	{
		/* the rows that waited are gone (set aside): the next ones, if any */
		upto = PG_INT64_MAX;
		goto again;
	}
	if (n == 0)
		return 0;
	SDP_PROBE_END(SDP_PROBE_SELECT);
	SDP_PROBE_VALUE(SDP_PROBE_ROWS, n);

	/*
	 * The batches these rows come from are durable before any of them is
	 * out.  The first round of a relay may produce rows that an earlier
	 * worker committed (asynchronously, and it may have exited since):
	 * all the WAL inserted so far.  Then only this worker's own rows are
	 * new, and its last commit record covers them (cheaper: not other
	 * sessions' WAL).
	 */
	SDP_PROBE_BEGIN(SDP_PROBE_WALFLUSH);
	if (!r->flushed_earlier)
	{
		flushed = flush_inserted_wal();
		r->flushed_earlier = true;
	}
	else
	{
		flushed = XactLastCommitEnd;
		XLogFlush(flushed);
	}
	SDP_PROBE_END(SDP_PROBE_WALFLUSH);
	/* ... and on the standbys that could be promoted, when slots are named (unless they waited for them) */
	if (upto == PG_INT64_MAX && !relay_standbys_flushed(r, flushed, error))
	{
		r->standby_wait_seq = seqs[n - 1];
		return RELAY_WAITING;
	}
	r->read_bounded = upto != PG_INT64_MAX;

	SDP_PROBE_BEGIN(SDP_PROBE_PRODUCE);
	if (!r->in_txn)
	{
		kerr = rd_kafka_begin_transaction(r->rk);
		if (kerr)
			return relay_failed(r, "begin_transaction", kerr, error) ? 0 : -1;
		r->in_txn = true;
		r->failed_seq = 0;
		r->txn_begun_at = GetCurrentTimestamp();
	}
	for (int i = 0; i < n; i++)
	{
		char		seq_text[24];
		rd_kafka_resp_err_t err;

		snprintf(seq_text, sizeof(seq_text), INT64_FORMAT, seqs[i]);
		for (;;)
		{
			err = rd_kafka_producev(r->rk,
									RD_KAFKA_V_RKT(r->rkt),
									RD_KAFKA_V_PARTITION(row_partition(r, keys[i], seqs[i])),
									RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
									RD_KAFKA_V_KEY(keys[i], keys[i] ? strlen(keys[i]) : 0),
									RD_KAFKA_V_VALUE(vals[i], lens[i]),
									RD_KAFKA_V_HEADER("sdp-flow", r->flow_id_text, -1),
									RD_KAFKA_V_HEADER("sdp-worker", r->worker_text, -1),
									RD_KAFKA_V_HEADER("sdp-seq", seq_text, -1),
									RD_KAFKA_V_OPAQUE((void *) (intptr_t) seqs[i]),
									RD_KAFKA_V_END);
			if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL)
				break;
			/* the local queue is full: let librdkafka send some */
			rd_kafka_poll(r->rk, 10);
			CHECK_FOR_INTERRUPTS();
		}
		if (err)
		{
			*error = psprintf("sink \"%s\": produce: %s", r->def.name, rd_kafka_err2str(err));
			/* a row the producer will never take: set aside once the transaction is aborted (kafka_relay_drain) */
			if (err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE)
			{
				r->refused_seq = seqs[i];
				snprintf(r->refused_reason, sizeof(r->refused_reason),
						 "sink \"%s\" refused the message: %s (%zu bytes of key and value)",
						 r->def.name, rd_kafka_err2str(err), (keys[i] ? strlen(keys[i]) : 0) + lens[i]);
			}
			r->in_txn = false;
			r->aborting = true;
			return -1;
		}
	}
	r->txn_last_seq = seqs[n - 1];
	r->produced_upto = r->txn_last_seq;
	r->txn_produced_at = GetCurrentTimestamp();
	r->txn_deadline = TimestampTzPlusMilliseconds(r->txn_produced_at, RELAY_TIMEOUT_MS);
	SDP_PROBE_END(SDP_PROBE_PRODUCE);
	if (await)
	{
		SDP_PROBE_BEGIN(SDP_PROBE_ACKS);
		relay_await_delivery(r);
		SDP_PROBE_END(SDP_PROBE_ACKS);
	}
	return n;
}

/*
 * The relay's producer, with init_transactions done: the transactional
 * id's earlier producer is fenced and the transaction it left open is
 * aborted, so that a read_committed reader of the topic no longer waits
 * for it.  False with the reason in *error when the sink cannot be reached.
 */
bool
kafka_relay_fence(KafkaRelay *r, char **error)
{
	rd_kafka_error_t *kerr;

	r->drain_waits = false;

	/*
	 * Fenced: a new producer would fence the other server's in turn, and
	 * the two would take the transactional id from each other at every
	 * retry, each producing its own outbox (kafka_relay_fenced).
	 */
	if (r->fenced)
	{
		*error = pstrdup(r->fenced);
		return false;
	}
	if (r->rk == NULL && !relay_create_producer(r, error))
		return false;
	if (!r->initialized)
	{
		if ((kerr = rd_kafka_init_transactions(r->rk, RELAY_TIMEOUT_MS)) != NULL)
			return relay_failed(r, "init_transactions", kerr, error);
		r->initialized = true;
	}
	return true;
}

/*
 * Produce everything in the flow's outbox.  True when it is empty (every
 * row produced, committed and deleted); false with the reason in *error
 * when the sink cannot be written now: the caller waits and calls again,
 * and the relay goes on from where it stands (a commit to retry, an abort
 * to finish, the topic to read back).
 */
bool
kafka_relay_drain(KafkaRelay *r, char **error)
{
	rd_kafka_error_t *kerr;

	for (;;)
	{
		int			n;

		CHECK_FOR_INTERRUPTS();
		if (!kafka_relay_fence(r, error))
			return false;
		if (r->aborting)
		{
			if ((kerr = rd_kafka_abort_transaction(r->rk, RELAY_TIMEOUT_MS)) != NULL)
				return relay_failed(r, "abort_transaction", kerr, error);
			r->aborting = false;
			r->recovered = false;
		}
		if (r->refused_seq != 0)
		{
			/* its transaction is aborted: the row goes to the dead letters, the rest is produced */
			outbox_begin();
			outbox_set_aside(r, &r->refused_seq, 1, r->refused_reason, "54000");
			outbox_end();
			r->refused_seq = 0;
		}
		if (r->in_txn)
		{
			SDP_PROBE_BEGIN(SDP_PROBE_COMMIT);
			if ((kerr = rd_kafka_commit_transaction(r->rk, RELAY_TIMEOUT_MS)) != NULL)
				return relay_failed(r, "commit_transaction", kerr, error);
			SDP_PROBE_END(SDP_PROBE_COMMIT);
			relay_committed(r);
			SDP_PROBE_BEGIN(SDP_PROBE_DELETE);
			outbox_delete_upto(r, r->committed_upto);
			SDP_PROBE_END(SDP_PROBE_DELETE);
			continue;
		}
		if (r->committed_upto > r->deleted_upto)
			outbox_delete_upto(r, r->committed_upto);
		if (!r->recovered)
		{
			if (!relay_recover(r, error))
				return false;
			r->recovered = true;
		}
		n = relay_produce(r, true, error);
		r->drain_waits = n == RELAY_WAITING;
		if (n < 0)
			return false;
		if (n == 0)
			return true;
	}
}

/* The open transaction committed. */
static void
relay_committed(KafkaRelay *r)
{
	r->in_txn = false;
	r->committed_upto = r->txn_last_seq;
	r->committed_at = GetCurrentTimestamp();
}

/*
 * The relay between batches, without waiting for Kafka (the flow consumes
 * while its last rows are acknowledged and committed): if a transaction is
 * open, commit it once every message is acknowledged, or else add the rows
 * committed since to it while it is young; then, if the outbox may hold
 * rows not produced yet (*pending) and no transaction is open, produce the
 * next of them in a new transaction, left open.  Clears
 * *pending when the outbox holds no row that is not produced.  Returns
 * false with the reason in *error when the sink cannot be written: the
 * caller then drains with kafka_relay_drain, which goes on from where this
 * stood.  The produced rows are deleted later, by the next batch's
 * transaction (kafka_relay_delete_in_batch) or when the flow is idle
 * (kafka_relay_delete_committed).
 *
 * Exactly once as with kafka_relay_drain: at most one transaction open,
 * rows produced in seq order, each once its batch's commit is flushed
 * (here and on the standbys that could be promoted), and deleted only once
 * their transaction committed.
 */
bool
kafka_relay_pump(KafkaRelay *r, bool *pending, char **error)
{
	rd_kafka_error_t *kerr;
	int			n;

	if (r->rk == NULL || !r->initialized || r->aborting || !r->recovered)
	{
		/* the relay starts or recovers: the blocking way */
		if (!kafka_relay_drain(r, error))
			return false;
		*pending = false;
		return true;
	}
	if (r->in_txn)
	{
		TimestampTz now;

		/*
		 * Serves the delivery reports.  Not rd_kafka_flush, which also
		 * wakes every broker thread of the producer: called every
		 * millisecond while acknowledgements were awaited, those wake-ups
		 * kept a broker thread busy (about 5 % of a core at 1,000
		 * events/s).  The producer sends a round's messages after
		 * linger.ms by itself, and the worker waits for their reports on
		 * kafka_relay_event_fd.
		 */
		kafka_relay_serve(r);
		now = GetCurrentTimestamp();
		if (rd_kafka_outq_len(r->rk) > 0 && now < r->txn_deadline)
		{
			/*
			 * Messages not acknowledged yet: rows committed since go into
			 * the same transaction, while it is young, rather than wait
			 * for its commit.  It commits once they are all acknowledged:
			 * a transaction that keeps growing under a steady input
			 * commits RELAY_APPEND_MS after it began, plus a round trip.
			 */
			if (*pending && now < TimestampTzPlusMilliseconds(r->txn_begun_at, RELAY_APPEND_MS))
			{
				n = relay_produce(r, false, error);
				if (n == RELAY_WAITING)
					return relay_standby_patience(r, pending);
				if (n < 0)
					return false;
				*pending = n == RELAY_ROWS_PER_TXN || r->read_bounded;
			}
			return true;
		}
		SDP_PROBE_VALUE(SDP_PROBE_ACKS, now - r->txn_produced_at);
		/* every message acknowledged (or the deadline passed: the commit fails and says why) */
		SDP_PROBE_BEGIN(SDP_PROBE_COMMIT);
		if ((kerr = rd_kafka_commit_transaction(r->rk, RELAY_TIMEOUT_MS)) != NULL)
			return relay_failed(r, "commit_transaction", kerr, error);
		SDP_PROBE_END(SDP_PROBE_COMMIT);
		relay_committed(r);
	}
	if (!*pending)
		return true;
	n = relay_produce(r, false, error);
	if (n == RELAY_WAITING)
		return relay_standby_patience(r, pending);
	if (n < 0)
		return false;
	*pending = n == RELAY_ROWS_PER_TXN || r->read_bounded;
	return true;
}

/*
 * The rows of a round wait for the standbys (relay_produce): they stay
 * pending, and the flow goes on consuming while the standbys are behind
 * less than RELAY_STANDBY_PATIENCE_MS.  Past it, or at once when a named
 * slot will not advance, false: the relay fails with the reason that
 * relay_produce gave, and the flow consumes nothing until the standbys
 * have the rows (kafka_relay_drain).
 */
static bool
relay_standby_patience(KafkaRelay *r, bool *pending)
{
	*pending = true;
	return !r->standby_broken &&
		GetCurrentTimestamp() < TimestampTzPlusMilliseconds(r->standby_wait_since, RELAY_STANDBY_PATIENCE_MS);
}

/*
 * Whether the rows the relay read last wait for the standbys: the worker
 * looks again within a few milliseconds, lingering for a batch included.
 */
bool
kafka_relay_holds_for_standbys(KafkaRelay *r)
{
	return r->standby_wait_lsn != InvalidXLogRecPtr;
}

/*
 * Whether the last kafka_relay_drain failed because the rows wait for the
 * standbys that could be promoted: the worker then looks again after a
 * few milliseconds rather than backing off.
 */
bool
kafka_relay_waits_for_standbys(KafkaRelay *r)
{
	return r->drain_waits;
}

/* Whether they wait for a named slot that will not advance (missing, logical, invalidated). */
bool
kafka_relay_standby_broken(KafkaRelay *r)
{
	return r->drain_waits && r->standby_broken;
}

/*
 * Whether a newer producer with the relay's transactional.id fenced it.
 * The flow then fails (worker_relay): on one server the launcher never
 * runs two workers of a flow and number at once, so the other producer is
 * another server's, and a relay that went on would take the id back.
 */
bool
kafka_relay_fenced(KafkaRelay *r)
{
	return r->fenced != NULL;
}

/* Whether the relay has a transaction open, produced and not yet committed. */
bool
kafka_relay_busy(KafkaRelay *r)
{
	return r->in_txn;
}

/*
 * Until when the open transaction's acknowledgements are awaited (then
 * kafka_relay_pump commits, and the commit says what is missing); 0 when
 * no transaction is open.
 */
TimestampTz
kafka_relay_ack_deadline(KafkaRelay *r)
{
	return r->in_txn ? r->txn_deadline : 0;
}

/*
 * In the flow's batch transaction (SPI connected): delete the rows whose
 * Kafka transaction committed.  Rolled back with the batch; the deletion
 * is the relay's only once kafka_relay_batch_committed says the batch
 * committed.  A crash that loses it leaves rows that the read-back finds
 * produced.
 */
void
kafka_relay_delete_in_batch(KafkaRelay *r)
{
	Oid			types[4];
	Datum		values[4];
	const char *mine;

	r->deleting_upto = 0;
	if (r->committed_upto <= r->deleted_upto)
		return;
	mine = relay_rows(r, types, values);
	types[2] = INT8OID;
	values[2] = Int64GetDatum(r->deleted_upto);
	types[3] = INT8OID;
	values[3] = Int64GetDatum(r->committed_upto);
	SDP_PROBE_BEGIN(SDP_PROBE_DELETE);
	outbox_execute(&r->delete_plan, psprintf("DELETE FROM sdp.outbox WHERE %s AND seq > $3 AND seq <= $4", mine),
				   4, types, values, false);
	SDP_PROBE_END(SDP_PROBE_DELETE);
	r->deleting_upto = r->committed_upto;
}

/* The batch transaction committed: its deletion of produced rows with it. */
void
kafka_relay_batch_committed(KafkaRelay *r)
{
	if (r->deleting_upto > r->deleted_upto)
		r->deleted_upto = r->deleting_upto;
	r->deleting_upto = 0;
}

/*
 * When the rows of committed transactions that no batch deleted are to be
 * deleted by kafka_relay_delete_committed (the flow is idle), 0 when there
 * are none.  Other workers wait at their start for them to go.
 */
TimestampTz
kafka_relay_delete_due(KafkaRelay *r)
{
	if (r->committed_upto <= r->deleted_upto)
		return 0;
	return TimestampTzPlusMilliseconds(r->committed_at, RELAY_IDLE_DELETE_MS);
}

/* Delete the rows of committed transactions, in a transaction of its own. */
void
kafka_relay_delete_committed(KafkaRelay *r)
{
	if (r->committed_upto > r->deleted_upto)
		outbox_delete_upto(r, r->committed_upto);
}

/*
 * The flow stops: commit the open transaction, if any, rather than leave
 * it open until the transaction timeout (a real cluster's read_committed
 * consumers of its partitions would wait for it).  Errors are ignored: the
 * next relay of the rows reads the topic back.
 */
void
kafka_relay_finish(KafkaRelay *r)
{
	rd_kafka_error_t *kerr;

	if (r->rk == NULL || !r->in_txn)
		return;
	if ((kerr = rd_kafka_commit_transaction(r->rk, RELAY_TIMEOUT_MS)) != NULL)
		rd_kafka_error_destroy(kerr);
	else
		relay_committed(r);
}

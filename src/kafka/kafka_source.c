/*
 * kafka_source.c
 *		One flow's Kafka consumer, on librdkafka.
 *
 * The flow assigns partitions itself (no consumer-group rebalancing): the
 * offsets that count are the ones committed in PostgreSQL with the flow's
 * rows, and the worker seeks to them on start.  Offsets are also committed
 * to the group (asynchronously, after PostgreSQL) only so that Kafka tools
 * can show the flow's lag.
 *
 * Threads: librdkafka runs its own threads.  They are created with every
 * signal blocked, so that PostgreSQL's signal handlers only ever run on the
 * backend's main thread.  Every callback (errors, logs) is served on the
 * main thread by rd_kafka_consumer_poll, and only records what happened into
 * this struct: nothing in a callback calls PostgreSQL, which could longjmp
 * through librdkafka's frames.  The worker reports what was recorded after
 * the poll returns.
 *
 * Waiting: the consumer queue writes a byte to a pipe when it becomes
 * non-empty (rd_kafka_queue_io_event_enable), so the worker can wait for
 * messages and for its latch at once with WaitLatchOrSocket.
 */
#include "kafka/kafka_source.h"

#include <ctype.h>
#include <fcntl.h>
#include <unistd.h>

#include "miscadmin.h"
#include "common/base64.h"
#include "utils/jsonb.h"

#include "exec/json_decode.h"
#include "kafka/kafka_client.h"
#include "kafka/kafka_properties.h"
#include "decl/flow_options.h"

#define KAFKA_LOG_RING 8

struct KafkaSource
{
	rd_kafka_t *rk;
	rd_kafka_queue_t *queue;
	rd_kafka_topic_t *rkt;
	char	   *topic;
	int			pipefd[2];

	/*
	 * Where librdkafka's fetcher stops filling the local queue
	 * (queued.min.messages, queued.max.messages.kbytes), and whether the
	 * queue has come near it since it was last found empty: only then may
	 * the fetcher be at rest (kafka_source_fetch_behind).
	 */
	int64		queue_max_messages;
	int64		queue_max_bytes;
	bool		queue_filled;

	/* written by callbacks, read by the main loop */
	bool		error_pending;
	bool		broker_down;
	char		error[SDP_ERROR_LEN];
	char		cause[SDP_ERROR_LEN];	/* the last authentication or TLS error: why the brokers are down */
	int			nlogs;
	int			nresets;		/* offsets reset since last taken: messages the broker no longer had */
	char		reset_line[256];
	/* a reset to a logical offset (BEGINNING): said once reading goes on */
	bool		reset_pending;
	int32		reset_partition;
	int64		reset_gone;
	int			reset_prefix_len;	/* of "TOPIC [P" in reset_line */
	int			log_level[KAFKA_LOG_RING];
	char		log_line[KAFKA_LOG_RING][256];
};

/*
 * Client properties the flow sets unless the source's options override them.
 * fetch.wait.max.ms: Apache Kafka answers a waiting fetch as soon as data
 * arrives (fetch.min.bytes 1), so 100 ms costs no latency there and spares
 * the broker about a thousand empty fetches a second per source; at 1 ms the
 * JVM broker's EndTxn P90 was 48 ms against 3 (bench/README, "On Apache
 * Kafka").  librdkafka's mock (the embedded broker) answers only after the
 * whole wait: the demo, the tests and the benchmarks set 1 there.
 */
static const char *const default_properties[][2] = {
	{"enable.auto.commit", "false"},
	{"enable.auto.offset.store", "false"},
	{"enable.partition.eof", "false"},
	{"auto.offset.reset", "earliest"},
	{"fetch.wait.max.ms", "100"},
	{"fetch.min.bytes", "1"},
	{"socket.nagle.disable", "true"},
	{"reconnect.backoff.max.ms", "1000"},
	{"queued.max.messages.kbytes", "32768"},
	{"log.queue", "true"},
};

/* Properties the flow owns: exactly-once depends on them. */
static const char *const reserved_properties[] = {
	"enable.auto.commit", "enable.auto.offset.store", "enable.partition.eof",
	"log.queue", "bootstrap.servers", "metadata.broker.list",
};

static bool
is_reserved(const char *key)
{
	for (int i = 0; i < lengthof(reserved_properties); i++)
		if (strcmp(key, reserved_properties[i]) == 0)
			return true;
	return false;
}

/*
 * Check a source's librdkafka properties without connecting anywhere, for
 * sdp_create_source and sdp_alter_source.
 */
void
kafka_validate_properties(List *properties)
{
	kafka_properties_validate(properties, "source", reserved_properties, lengthof(reserved_properties),
							  "offsets are committed in PostgreSQL with the flow's rows.",
							  "Source options are librdkafka configuration properties, plus starting_offsets.");
}

/* librdkafka error callback: runs on our thread inside consumer poll; records only. */
static void
on_kafka_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	KafkaSource *ks = opaque;

	/*
	 * "1/1 brokers are down" follows the reason they are (authentication,
	 * TLS): keep that.  librdkafka says a reason once, then suppresses the
	 * same error for a while, and "brokers are down" alone would follow at
	 * every retry: the last such reason goes with it.
	 */
	if (err == RD_KAFKA_RESP_ERR__AUTHENTICATION || err == RD_KAFKA_RESP_ERR__SSL)
		snprintf(ks->cause, sizeof(ks->cause), "%s: %s", rd_kafka_err2name(err), reason);
	if (!(err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN && ks->error_pending))
	{
		if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN && ks->cause[0] != '\0')
			snprintf(ks->error, sizeof(ks->error), "%s: %s (%s)", rd_kafka_err2name(err), reason, ks->cause);
		else
			snprintf(ks->error, sizeof(ks->error), "%s: %s", rd_kafka_err2name(err), reason);
	}
	ks->error_pending = true;
	if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN || err == RD_KAFKA_RESP_ERR__TRANSPORT ||
		err == RD_KAFKA_RESP_ERR__RESOLVE)
		ks->broker_down = true;
}

/*
 * librdkafka's line of an offset reset, "TOPIC [P]: offset reset (at
 * offset N, broker B) to ... offset M: REASON", in our words: "TOPIC [P]:
 * offset N was gone, reading went on at offset M".  Its wording changes
 * between librdkafka releases (2.1 added "(leader epoch E)" after each
 * offset, and "offset " twice before M; later releases name the logical
 * offset, "to offset BEGINNING", and M is known only from the first
 * message read after it: reset_resolve); a line not read as expected is
 * kept whole.  No allocation: called from the log callback.
 */
static void
reset_words(KafkaSource *ks, const char *text)
{
	static const char at[] = "]: offset reset (at ";
	const char *mark = strstr(text, at);
	const char *to = mark ? strstr(mark, ") to ") : NULL;
	const char *open = NULL;
	const char *p;
	char	   *end;
	long long	gone,
				next;

	ks->reset_pending = false;
	if (to == NULL)
		goto verbatim;
	for (p = text; p < mark; p++)
		if (*p == '[')
			open = p;			/* the last '[' before "]: offset reset" */
	p = mark + strlen(at);
	if (strncmp(p, "offset ", 7) == 0)
		p += 7;
	gone = strtoll(p, &end, 10);
	if (end == p)
		goto verbatim;
	/* the new offset: the first "offset " followed by a digit after ") to " */
	for (p = strstr(to, "offset "); p != NULL; p = strstr(p + 7, "offset "))
		if (isdigit((unsigned char) p[7]))
			break;
	if (p == NULL)
	{
		/* a logical offset: where reading goes on is the next message of the partition */
		if (open == NULL || !isdigit((unsigned char) open[1]))
			goto verbatim;
		ks->reset_partition = (int32) strtol(open + 1, NULL, 10);
		ks->reset_gone = gone;
		ks->reset_prefix_len = (int) (mark - text);
		strlcpy(ks->reset_line, text, Min(sizeof(ks->reset_line), (size_t) ks->reset_prefix_len + 1));
		ks->reset_pending = true;
		return;
	}
	next = strtoll(p + 7, &end, 10);
	snprintf(ks->reset_line, sizeof(ks->reset_line), "%.*s]: offset %lld was gone, reading went on at offset %lld",
			 (int) (mark - text), text, gone, next);
	ks->nresets++;
	return;

verbatim:
	strlcpy(ks->reset_line, text, sizeof(ks->reset_line));
	ks->nresets++;
}

/* The first message (or end) of the partition reset to a logical offset: where reading went on. */
static void
reset_resolve(KafkaSource *ks, const rd_kafka_message_t *m)
{
	char		prefix[256];

	if (!ks->reset_pending || m->partition != ks->reset_partition)
		return;
	strlcpy(prefix, ks->reset_line, sizeof(prefix));
	snprintf(ks->reset_line, sizeof(ks->reset_line), "%s]: offset %lld was gone, reading went on at offset %lld",
			 prefix, (long long) ks->reset_gone, (long long) m->offset);
	ks->reset_pending = false;
	ks->nresets++;
}

/* librdkafka log callback, served from the log queue on our thread: records only. */
static void
on_kafka_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
	KafkaSource *ks = rd_kafka_opaque(rk);
	int			i;

	if (ks == NULL)
		return;
	/*
	 * "topic [p]: offset reset (at offset N, broker B) to ... offset M: ...":
	 * the offset to read was no longer on the broker (retention deleted it)
	 * and auto.offset.reset moved on; messages N..M-1 are lost to the flow.
	 * The line itself is also kept below, for the server log.
	 */
	if (strcmp(fac, "OFFSET") == 0 && strstr(buf, "offset reset") != NULL)
	{
		const char *text = buf;

		if (strncmp(text, "[thrd:", 6) == 0 && strstr(text, "]: ") != NULL)
			text = strstr(text, "]: ") + 3;	/* drop librdkafka's thread name */
		reset_words(ks, text);
	}
	if (level > 4)				/* keep warnings and worse */
		return;
	i = ks->nlogs % KAFKA_LOG_RING;
	ks->log_level[i] = level;
	snprintf(ks->log_line[i], sizeof(ks->log_line[i]), "%s: %s", fac, buf);
	ks->nlogs++;
}

/* Destroys the consumer of a source with its queue and topic handles (what kafka_source_create made of them). */
static void
source_destroy_client(KafkaSource *ks)
{
	if (ks->queue)
		rd_kafka_queue_destroy(ks->queue);
	if (ks->rkt)
		rd_kafka_topic_destroy(ks->rkt);
	if (ks->rk)
		kafka_client_destroy(ks->rk);
	ks->queue = NULL;
	ks->rkt = NULL;
	ks->rk = NULL;
}

/* An integer property of a configuration, or dflt when it cannot be read. */
static int64
conf_int(rd_kafka_conf_t *conf, const char *name, int64 dflt)
{
	char		value[64];
	size_t		size = sizeof(value);
	char	   *end;
	long long	v;

	if (rd_kafka_conf_get(conf, name, value, &size) != RD_KAFKA_CONF_OK)
		return dflt;
	errno = 0;
	v = strtoll(value, &end, 10);
	if (errno != 0 || end == value || v <= 0)
		return dflt;
	return (int64) v;
}

KafkaSource *
kafka_source_create(const SdpSourceDef *source, const char *flow_name)
{
	KafkaSource *ks = palloc0(sizeof(KafkaSource));
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	char		errstr[512];
	char		value[256];
	ListCell   *lc;

#define CONF_SET(k, v) \
	do { \
		if (rd_kafka_conf_set(conf, (k), (v), errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) \
		{ \
			rd_kafka_conf_destroy(conf); \
			ereport(ERROR, \
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE), \
					 errmsg("invalid librdkafka property \"%s\" of source \"%s\": %s", \
							(k), source->name, errstr))); \
		} \
	} while (0)

	for (int i = 0; i < lengthof(default_properties); i++)
		CONF_SET(default_properties[i][0], default_properties[i][1]);
	snprintf(value, sizeof(value), "sdp_ext.%s", flow_name);
	CONF_SET("group.id", value);
	CONF_SET("client.id", value);
	for (lc = list_head(source->properties); lc != NULL; lc = lnext(source->properties, lnext(source->properties, lc)))
	{
		const char *key = lfirst(lc);

		if (!is_reserved(key) && !sdp_source_format_option(key))
			CONF_SET(key, (const char *) lfirst(lnext(source->properties, lc)));
	}
	CONF_SET("bootstrap.servers", source->bootstrap_servers);
#undef CONF_SET
	ks->queue_max_messages = conf_int(conf, "queued.min.messages", 100000);
	ks->queue_max_bytes = conf_int(conf, "queued.max.messages.kbytes", 65536) * 1024;

	rd_kafka_conf_set_opaque(conf, ks);
	kafka_conf_restrict_hosts(conf);
	rd_kafka_conf_set_error_cb(conf, on_kafka_error);
	rd_kafka_conf_set_log_cb(conf, on_kafka_log);

	ks->rk = kafka_client_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
	if (ks->rk == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not create Kafka consumer for source \"%s\": %s",
						source->name, errstr)));

	/* Logs and errors are served by consumer poll on this thread. */
	rd_kafka_set_log_queue(ks->rk, NULL);
	rd_kafka_poll_set_consumer(ks->rk);
	ks->queue = rd_kafka_queue_get_consumer(ks->rk);
	ks->topic = pstrdup(source->topic);
	ks->rkt = rd_kafka_topic_new(ks->rk, source->topic, NULL);
	if (ks->rkt == NULL)
	{
		rd_kafka_resp_err_t err = rd_kafka_last_error();

		source_destroy_client(ks);
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not open topic \"%s\" of source \"%s\": %s",
						source->topic, source->name, rd_kafka_err2str(err))));
	}

	if (pipe2(ks->pipefd, O_NONBLOCK | O_CLOEXEC) != 0)
	{
		int			save_errno = errno;

		source_destroy_client(ks);
		errno = save_errno;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create pipe: %m")));
	}
	rd_kafka_queue_io_event_enable(ks->queue, ks->pipefd[1], "1", 1);
	return ks;
}

int
kafka_source_event_fd(KafkaSource *ks)
{
	return ks->pipefd[0];
}

/*
 * Serve librdkafka's pending events (its error and log callbacks record
 * them) while the consumer has no partition assigned: no message can be
 * taken, and so none lost.
 */
static void
serve_unassigned(KafkaSource *ks)
{
	rd_kafka_topic_partition_list_t *assigned = NULL;
	bool		none;

	if (rd_kafka_assignment(ks->rk, &assigned) != RD_KAFKA_RESP_ERR_NO_ERROR)
		return;
	none = assigned->cnt == 0;
	rd_kafka_topic_partition_list_destroy(assigned);
	if (!none)
		return;
	for (int i = 0; i < 100; i++)
	{
		rd_kafka_message_t *m = rd_kafka_consumer_poll(ks->rk, 0);

		if (m == NULL)
			break;
		if (m->err && m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
		{
			snprintf(ks->error, sizeof(ks->error), "%s: %s",
					 rd_kafka_err2name(m->err), rd_kafka_message_errstr(m));
			ks->error_pending = true;
		}
		rd_kafka_message_destroy(m);
	}
}

/*
 * The topic's partitions (sorted), from a metadata request.  Returns the
 * count, or -1 with *error set when the broker cannot be reached or the
 * topic does not exist.
 */
int
kafka_source_list_partitions(KafkaSource *ks, int32 **partitions, int timeout_ms, char **error)
{
	const struct rd_kafka_metadata *md;
	rd_kafka_resp_err_t err;
	int			n;

	err = rd_kafka_metadata(ks->rk, 0, ks->rkt, &md, timeout_ms);
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		char		why[sizeof(ks->error) + 4] = "";

		/*
		 * "Broker transport failure" says little: librdkafka's error
		 * callback has why (authentication, a certificate), once served.
		 */
		serve_unassigned(ks);
		if (ks->error_pending)
			snprintf(why, sizeof(why), " (%s)", ks->error);
		ks->error_pending = false;
		*error = psprintf("cannot read metadata of topic \"%s\": %s%s", ks->topic, rd_kafka_err2str(err), why);
		ks->broker_down = true;
		return -1;
	}
	ks->broker_down = false;
	if (md->topic_cnt != 1 || md->topics[0].err != RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		*error = psprintf("topic \"%s\" is not available: %s", ks->topic,
						  md->topic_cnt == 1 ? rd_kafka_err2str(md->topics[0].err) : "no metadata");
		rd_kafka_metadata_destroy(md);
		return -1;
	}
	n = md->topics[0].partition_cnt;
	*partitions = palloc(sizeof(int32) * Max(n, 1));
	for (int i = 0; i < n; i++)
		(*partitions)[i] = md->topics[0].partitions[i].id;
	rd_kafka_metadata_destroy(md);
	/* insertion sort: partition counts are small */
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && (*partitions)[j - 1] > (*partitions)[j]; j--)
		{
			int32		t = (*partitions)[j];

			(*partitions)[j] = (*partitions)[j - 1];
			(*partitions)[j - 1] = t;
		}
	return n;
}

bool
kafka_source_query_watermarks(KafkaSource *ks, int32 partition, int64 *low, int64 *high,
							  int timeout_ms, char **error)
{
	int64_t		lo,
				hi;
	rd_kafka_resp_err_t err;

	err = rd_kafka_query_watermark_offsets(ks->rk, ks->topic, partition, &lo, &hi, timeout_ms);
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		*error = psprintf("cannot query offsets of topic \"%s\" partition %d: %s",
						  ks->topic, partition, rd_kafka_err2str(err));
		return false;
	}
	*low = lo;
	*high = hi;
	return true;
}

/*
 * A message's headers as jsonb, {"name": value}: a value that is text in
 * the database's encoding as a string, other bytes in base64, no value as
 * null, and a name that comes more than once as an array of its values in
 * order.  *isnull when the message has no headers.
 */
Datum
kafka_message_headers_jsonb(rd_kafka_message_t *m, bool *isnull)
{
	rd_kafka_headers_t *hdrs;
	JsonbParseState *state = NULL;
	size_t		n;
	const char **names;
	bool	   *done;

	*isnull = true;
	if (rd_kafka_message_headers(m, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR ||
		(n = rd_kafka_header_cnt(hdrs)) == 0)
		return (Datum) 0;
	names = palloc(sizeof(char *) * n);
	done = palloc0(sizeof(bool) * n);
	for (size_t i = 0; i < n; i++)
	{
		const void *val;
		size_t		size;

		(void) rd_kafka_header_get_all(hdrs, i, &names[i], &val, &size);
	}
	pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	for (size_t i = 0; i < n; i++)
	{
		JsonbValue	k;
		int			count = 0;

		if (done[i])
			continue;
		for (size_t j = i; j < n; j++)
			count += (strcmp(names[j], names[i]) == 0);
		k.type = jbvString;
		k.val.string.val = (char *) names[i];
		k.val.string.len = strlen(names[i]);
		pushJsonbValue(&state, WJB_KEY, &k);
		if (count > 1)
			pushJsonbValue(&state, WJB_BEGIN_ARRAY, NULL);
		for (size_t j = i; j < n; j++)
		{
			const char *name;
			const void *val;
			size_t		size;
			JsonbValue	v;

			if (done[j] || strcmp(names[j], names[i]) != 0)
				continue;
			done[j] = true;
			(void) rd_kafka_header_get_all(hdrs, j, &name, &val, &size);
			if (val == NULL)
				v.type = jbvNull;
			else if (sdp_bytes_are_text(val, size) || size == 0)
			{
				v.type = jbvString;
				v.val.string.val = pnstrdup(val, size);
				v.val.string.len = (int) size;
			}
			else
			{
				int			len = pg_b64_enc_len((int) size);
				char	   *b64 = palloc(len + 1);

				len = pg_b64_encode(val, (int) size, b64, len);
				v.type = jbvString;
				v.val.string.val = b64;
				v.val.string.len = Max(len, 0);
			}
			pushJsonbValue(&state, count > 1 ? WJB_ELEM : WJB_VALUE, &v);
		}
		if (count > 1)
			pushJsonbValue(&state, WJB_END_ARRAY, NULL);
	}
	*isnull = false;
	return JsonbPGetDatum(JsonbValueToJsonb(pushJsonbValue(&state, WJB_END_OBJECT, NULL)));
}

/* Milliseconds since 1970 (Kafka's timestamps) of a finite timestamptz. */
int64
sdp_timestamptz_to_unix_ms(TimestampTz ts)
{
	int64		us = ts + (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY;

	return us >= 0 ? us / 1000 : -((-us + 999) / 1000);
}

/*
 * The first offset in [from, to) of a partition whose message has a
 * timestamp at or after ts_ms, read message by message; 'to' when there is
 * none.  Returns false with *error set when the partition cannot be read
 * within timeout_ms.  Replaces the worker's assignment: only for a
 * KafkaSource made for this lookup.
 */
static bool
scan_for_time(KafkaSource *ks, int32 partition, int64 from, int64 to, int64 ts_ms,
			  int timeout_ms, int64 *found, char **error)
{
	rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	int64		next = from;
	bool		ok = true;

	*found = to;
	rd_kafka_topic_partition_list_add(list, ks->topic, partition)->offset = from;
	rd_kafka_assign(ks->rk, list);
	rd_kafka_topic_partition_list_destroy(list);
	while (next < to)
	{
		rd_kafka_message_t *msg;

		CHECK_FOR_INTERRUPTS();
		if (GetCurrentTimestamp() > deadline)
		{
			*error = psprintf("cannot read topic \"%s\" partition %d at offset %lld within %d ms",
							  ks->topic, partition, (long long) next, timeout_ms);
			ok = false;
			break;
		}
		msg = rd_kafka_consumer_poll(ks->rk, 100);
		if (msg == NULL)
			continue;
		if (msg->err == RD_KAFKA_RESP_ERR_NO_ERROR && msg->partition == partition && msg->offset >= next)
		{
			rd_kafka_timestamp_type_t tstype;
			int64		ts = rd_kafka_message_timestamp(msg, &tstype);

			next = msg->offset + 1;
			if (ts >= ts_ms)
			{
				*found = msg->offset;
				rd_kafka_message_destroy(msg);
				break;
			}
		}
		else if (msg->err != RD_KAFKA_RESP_ERR_NO_ERROR && msg->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
		{
			*error = psprintf("cannot read topic \"%s\" partition %d: %s",
							  ks->topic, partition, rd_kafka_message_errstr(msg));
			rd_kafka_message_destroy(msg);
			ok = false;
			break;
		}
		rd_kafka_message_destroy(msg);
	}
	rd_kafka_assign(ks->rk, NULL);
	return ok;
}

/*
 * The offset of the first message of a partition whose timestamp is at or
 * after ts_ms (Kafka's offsets-for-times), or the partition's end offset
 * when there is none.  A broker that cannot look timestamps up answers that
 * there is none (the embedded broker, librdkafka's mock cluster, does):
 * when the partition's last message says otherwise, the partition is read
 * from its start instead.
 */
bool
kafka_source_offset_for_time(KafkaSource *ks, int32 partition, int64 ts_ms, int64 *offset,
							 int timeout_ms, char **error)
{
	rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
	rd_kafka_resp_err_t err;
	int64		lo,
				hi,
				answer,
				last;

	if (!kafka_source_query_watermarks(ks, partition, &lo, &hi, timeout_ms, error))
		return false;
	rd_kafka_topic_partition_list_add(list, ks->topic, partition)->offset = ts_ms;
	err = rd_kafka_offsets_for_times(ks->rk, list, timeout_ms);
	if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
		err = list->elems[0].err;
	answer = list->elems[0].offset;
	rd_kafka_topic_partition_list_destroy(list);
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		*error = psprintf("cannot look up offsets by time in topic \"%s\" partition %d: %s",
						  ks->topic, partition, rd_kafka_err2str(err));
		return false;
	}
	if (answer >= 0)
	{
		*offset = answer;
		return true;
	}
	*offset = hi;
	if (hi <= lo)
		return true;			/* an empty partition */
	/* "none": believe it when the last message is older */
	if (!scan_for_time(ks, partition, hi - 1, hi, ts_ms, timeout_ms, &last, error))
		return false;
	if (last == hi)
		return true;
	ereport(LOG,
			(errmsg("the broker of topic \"%s\" found no offset by time in partition %d, but its last message is that recent: reading offsets %lld to %lld",
					ks->topic, partition, (long long) lo, (long long) hi),
			 errdetail("A broker that cannot look up offsets by time (librdkafka's mock cluster) answers that there is none.")));
	return scan_for_time(ks, partition, lo, hi, ts_ms, timeout_ms * 10, offset, error);
}

/*
 * kafka_source_offset_for_time with a client of its own, made for the
 * lookup: a worker's consumer must keep its assignment.
 */
bool
kafka_source_lookup_time(const SdpSourceDef *source, const char *flow_name, int32 partition,
						 int64 ts_ms, int64 *offset, int timeout_ms, char **error)
{
	KafkaSource *ks = kafka_source_create(source, flow_name);
	volatile bool ok = false;

	PG_TRY();
	{
		ok = kafka_source_offset_for_time(ks, partition, ts_ms, offset, timeout_ms, error);
	}
	PG_FINALLY();
	{
		kafka_source_destroy(ks);
	}
	PG_END_TRY();
	return ok;
}

/* Consume the given partitions from the given offsets (adding to what is assigned). */
void
kafka_source_assign(KafkaSource *ks, int n, const int32 *partitions, const int64 *offsets)
{
	rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(n);
	rd_kafka_error_t *error;

	for (int i = 0; i < n; i++)
		rd_kafka_topic_partition_list_add(list, ks->topic, partitions[i])->offset = offsets[i];
	error = rd_kafka_incremental_assign(ks->rk, list);
	rd_kafka_topic_partition_list_destroy(list);
	if (error)
	{
		char	   *msg = pstrdup(rd_kafka_error_string(error));

		rd_kafka_error_destroy(error);
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not assign partitions of topic \"%s\": %s", ks->topic, msg)));
	}
}

/*
 * Take up to max messages that have already arrived, without waiting.
 * Consumer errors are recorded (kafka_source_take_error), not returned.
 */
int
kafka_source_poll(KafkaSource *ks, rd_kafka_message_t **msgs, int max, size_t *bytes, size_t max_bytes)
{
	char		drain[64];
	int			n = 0;
	size_t		bytes0 = *bytes;
	int64		queued;

	/* Empty the wakeup pipe first: a message arriving from now on writes to it again. */
	while (read(ks->pipefd[0], drain, sizeof(drain)) > 0)
		;
	queued = (int64) rd_kafka_queue_length(ks->queue);

	while (n < max && *bytes < max_bytes)
	{
		rd_kafka_message_t *m = rd_kafka_consumer_poll(ks->rk, 0);

		if (m == NULL)
			break;
		reset_resolve(ks, m);
		if (m->err)
		{
			if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
			{
				snprintf(ks->error, sizeof(ks->error), "%s: %s",
						 rd_kafka_err2name(m->err), rd_kafka_message_errstr(m));
				ks->error_pending = true;
			}
			rd_kafka_message_destroy(m);
			continue;
		}
		ks->broker_down = false;
		*bytes += m->len + m->key_len;
		msgs[n++] = m;
	}

	/*
	 * The queue held at least half of what makes the fetcher stop (by count,
	 * or by bytes at the size of the messages just taken): it may be at rest
	 * once the queue is empty.
	 */
	if (n > 0 && kafka_source_queue_near_full(ks, queued, (double) (*bytes - bytes0) / n))
		ks->queue_filled = true;
	return n;
}

/* Messages (and events) librdkafka holds for the next poll, without taking them. */
int64
kafka_source_queued(KafkaSource *ks)
{
	return (int64) rd_kafka_queue_length(ks->queue);
}

/*
 * Whether librdkafka's fetcher may be at rest, queued messages of about
 * msg_bytes each waiting: the queue holds half of what makes it stop (by
 * count or by bytes), as kafka_source_poll judges it.
 */
bool
kafka_source_queue_near_full(KafkaSource *ks, int64 queued, double msg_bytes)
{
	return queued >= ks->queue_max_messages / 2 ||
		(double) queued * msg_bytes >= (double) ks->queue_max_bytes / 2;
}

/* The partition's end offset as last seen in a fetch response (no network), or -1. */
int64
kafka_source_cached_high_watermark(KafkaSource *ks, int32 partition)
{
	int64_t		lo,
				hi;

	if (rd_kafka_get_watermark_offsets(ks->rk, ks->topic, partition, &lo, &hi) != RD_KAFKA_RESP_ERR_NO_ERROR ||
		hi < 0)
		return -1;
	return hi;
}

/*
 * Restart librdkafka's fetcher if it may be at rest while the broker holds
 * messages for us; returns whether it did.  The worker calls it when it has
 * just found the local queue empty.
 *
 * librdkafka 2.0 stops fetching a partition when the local queue reaches
 * queued.min.messages or queued.max.messages.kbytes, with no deadline, and
 * decides again only when its broker thread wakes for another reason, at
 * the latest after a second (librdkafka 2.1 added fetch.queue.backoff.ms for
 * this).  Draining a backlog, a worker empties the queue in a few batches
 * and would then wait up to that second with the broker full of messages.
 * So when the queue has come near those limits since it was last empty
 * (queue_filled) and, now empty, some partition's position is below the end
 * offset seen in the last fetch response, each such partition is sought,
 * asynchronously, to its own position: the seek is an operation for the
 * partition's broker thread, which wakes, fetches that partition from where
 * the worker stands and decides again for its others.  Nothing is skipped
 * or read twice: the position is the next offset the worker has not
 * received, and what the seek purges was never handed out.  No network, no
 * wait.
 */
bool
kafka_source_wake_fetcher(KafkaSource *ks, int n, const int32 *partitions)
{
	if (!ks->queue_filled)
		return false;
	ks->queue_filled = false;
	return kafka_source_refetch(ks, n, partitions);
}

/*
 * Seek each of the n partitions whose position is below the end offset seen
 * in the last fetch response to its own position, asynchronously: the seek
 * wakes the partition's broker thread, which fetches it from there.
 * Nothing is skipped or read twice (the position is the next offset not
 * handed out; what the seek purges never was).  Returns whether it sought
 * any.  No network, no wait.
 */
bool
kafka_source_refetch(KafkaSource *ks, int n, const int32 *partitions)
{
	rd_kafka_topic_partition_list_t *list;
	rd_kafka_topic_partition_list_t *behind;
	rd_kafka_error_t *error;

	list = rd_kafka_topic_partition_list_new(n);
	behind = rd_kafka_topic_partition_list_new(n);
	for (int i = 0; i < n; i++)
		rd_kafka_topic_partition_list_add(list, ks->topic, partitions[i]);
	if (rd_kafka_position(ks->rk, list) == RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		for (int i = 0; i < list->cnt; i++)
		{
			rd_kafka_topic_partition_t *tp = &list->elems[i];

			if (tp->err == RD_KAFKA_RESP_ERR_NO_ERROR && tp->offset >= 0 &&
				kafka_source_cached_high_watermark(ks, tp->partition) > tp->offset)
				rd_kafka_topic_partition_list_add(behind, ks->topic, tp->partition)->offset = tp->offset;
		}
	}
	rd_kafka_topic_partition_list_destroy(list);
	if (behind->cnt == 0)
	{
		rd_kafka_topic_partition_list_destroy(behind);
		return false;
	}
	error = rd_kafka_seek_partitions(ks->rk, behind, 0);
	if (error != NULL)
		rd_kafka_error_destroy(error);	/* as if not woken: the fetcher resumes within a second */
	rd_kafka_topic_partition_list_destroy(behind);
	return error == NULL;
}

/*
 * Seek each of the n partitions to the given offset (the next one its
 * worker has not processed), asynchronously: its broker thread wakes and
 * fetches it from there.  For a partition the fetcher left idle although
 * the broker has messages beyond it (worker.c's stall check).  Returns
 * whether the seek was accepted.  No network, no wait.
 */
bool
kafka_source_seek(KafkaSource *ks, int n, const int32 *partitions, const int64 *offsets)
{
	rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(n);
	rd_kafka_error_t *error;

	for (int i = 0; i < n; i++)
		rd_kafka_topic_partition_list_add(list, ks->topic, partitions[i])->offset = offsets[i];
	error = rd_kafka_seek_partitions(ks->rk, list, 0);
	rd_kafka_topic_partition_list_destroy(list);
	if (error != NULL)
	{
		rd_kafka_error_destroy(error);
		return false;
	}
	return true;
}

/* Tell the group what PostgreSQL committed, for Kafka tools; fire and forget. */
void
kafka_source_commit_async(KafkaSource *ks, int n, const int32 *partitions, const int64 *offsets)
{
	rd_kafka_topic_partition_list_t *list;

	if (n == 0)
		return;
	list = rd_kafka_topic_partition_list_new(n);
	for (int i = 0; i < n; i++)
		rd_kafka_topic_partition_list_add(list, ks->topic, partitions[i])->offset = offsets[i];
	(void) rd_kafka_commit(ks->rk, list, 1);
	rd_kafka_topic_partition_list_destroy(list);
}

/* The last error a callback recorded since the previous call, if any. */
bool
kafka_source_take_error(KafkaSource *ks, char *buf, size_t len, bool *broker_down)
{
	*broker_down = ks->broker_down;
	if (!ks->error_pending)
		return false;
	strlcpy(buf, ks->error, len);
	ks->error_pending = false;
	return true;
}

bool
kafka_source_is_down(KafkaSource *ks)
{
	return ks->broker_down;
}

/* The last offset reset since the previous call (and how many), for the flow's status. */
int
kafka_source_take_reset(KafkaSource *ks, char *buf, size_t len)
{
	int			n = ks->nresets;

	if (n > 0)
		strlcpy(buf, ks->reset_line, len);
	ks->nresets = 0;
	return n;
}

/* Report the librdkafka warnings recorded by the log callback, from the main thread. */
void
kafka_source_emit_logs(KafkaSource *ks)
{
	int			first = Max(0, ks->nlogs - KAFKA_LOG_RING);

	for (int i = first; i < ks->nlogs; i++)
		ereport(LOG,
				(errmsg("librdkafka: %s", ks->log_line[i % KAFKA_LOG_RING])));
	ks->nlogs = 0;
}

void
kafka_source_destroy(KafkaSource *ks)
{
	source_destroy_client(ks);
	close(ks->pipefd[0]);
	close(ks->pipefd[1]);
	pfree(ks);
}

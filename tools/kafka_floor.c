/*
 * kafka_floor.c
 *		The transport floor of the benchmark: a bare librdkafka consumer.
 *
 * Reads a topic from its end with the same latency-relevant client settings
 * as a flow's consumer (fetch.wait.max.ms=100, fetch.min.bytes=1, Nagle off,
 * manual assignment; on the embedded broker the benchmarks pass
 * -X fetch.wait.max.ms=1, as they do to their flows' sources) and records,
 * for every message, the time from its Kafka timestamp to its receipt.  That
 * is the least any consumer of that topic can see on this machine, so a
 * flow's e2eLatencyMs is compared with it.
 *
 * With --payload-ts FIELD it measures a sink flow end to end instead: the
 * time is taken from the number (milliseconds since the epoch) in the
 * top-level JSON field FIELD of each message's value, which the flow carries
 * through from its input's Kafka timestamp, to the receipt of the flow's
 * output message (with -X isolation.level=read_committed, as a consumer of
 * a sink reads).
 *
 *   kafka_floor --bootstrap ADDR --topic T --duration SECONDS [--out FILE]
 *               [--payload-ts FIELD] [--relay-to TOPIC [--transactional]]
 *               [-X prop=value]... [-P prop=value]...
 *
 * -X sets a property of the consumer, -P one of the --relay-to producer.
 *
 * With --relay-to TOPIC it also produces every message it reads to TOPIC
 * (same key, value and timestamp; linger 1 ms, acks=all, idempotent), as a
 * bare consume-and-produce pipe would: a second kafka_floor reading TOPIC
 * then times two trips through Kafka, the floor of a flow whose output goes
 * back to Kafka (a sink flow).
 *
 * With --transactional too, the pipe produces in Kafka transactions, as a
 * sink flow's relay does (transactional.id sdp_ext.kafka_floor.<pid>): it
 * takes what has arrived (at most 10,000 messages), produces it in a
 * transaction, waits for the acknowledgements (rd_kafka_flush every
 * millisecond, as the relay does: librdkafka 2.0 wakes its broker threads
 * for that) and commits; what arrives meanwhile waits for the next
 * transaction.  A read_committed consumer of TOPIC then times the least an
 * exactly-once write back to Kafka costs here, without PostgreSQL.
 *
 * Writes one line per message to --out: "<timestamp ms> <latency us>" (the
 * Kafka timestamp, or FIELD's), and prints a JSON summary (count, P50, P99
 * in ms, the transactions committed with --transactional) on stdout at the
 * end.
 */
#define _GNU_SOURCE
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_PROPS 32

static volatile sig_atomic_t stop_requested = 0;

static void
on_signal(int sig)
{
	stop_requested = 1;
}

static int64_t
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int
cmp_i64(const void *a, const void *b)
{
	int64_t		x = *(const int64_t *) a;
	int64_t		y = *(const int64_t *) b;

	return (x > y) - (x < y);
}

/* The number in the top-level field "field" of a JSON object, or -1. */
static int64_t
payload_ts(const rd_kafka_message_t *m, const char *field)
{
	char		pat[256];
	const char *p = m->payload;
	const char *end = p + m->len;
	size_t		plen;

	snprintf(pat, sizeof(pat), "\"%s\"", field);
	plen = strlen(pat);
	if (p == NULL || (p = memmem(p, m->len, pat, plen)) == NULL)
		return -1;
	p += plen;
	while (p < end && (*p == ' ' || *p == ':'))
		p++;
	if (p >= end || *p < '0' || *p > '9')
		return -1;
	{
		char		buf[32];
		size_t		n = 0;

		while (p < end && n < sizeof(buf) - 1 && *p >= '0' && *p <= '9')
			buf[n++] = *p++;
		buf[n] = '\0';
		return strtoll(buf, NULL, 10);
	}
}

/* A delivery report callback, so that librdkafka queues the reports rd_kafka_flush waits for. */
static void
delivered(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
}

/* Reports a failed transactional call; true when it failed. */
static bool
txn_check(rd_kafka_error_t *error, const char *what)
{
	if (error == NULL)
		return false;
	fprintf(stderr, "kafka_floor: %s: %s\n", what, rd_kafka_error_string(error));
	rd_kafka_error_destroy(error);
	return true;
}

static void
conf_set(rd_kafka_conf_t *conf, const char *key, const char *value)
{
	char		err[512];

	if (rd_kafka_conf_set(conf, key, value, err, sizeof(err)) != RD_KAFKA_CONF_OK)
	{
		fprintf(stderr, "kafka_floor: %s\n", err);
		exit(2);
	}
}

int
main(int argc, char **argv)
{
	const char *bootstrap = NULL;
	const char *topic = NULL;
	const char *out_path = NULL;
	const char *ts_field = NULL;
	const char *relay_topic = NULL;
	rd_kafka_t *relay = NULL;
	bool		transactional = false;
	long		transactions = 0;
	double		duration = 10;
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_t *rk;
	const struct rd_kafka_metadata *md;
	rd_kafka_topic_t *rkt;
	rd_kafka_topic_partition_list_t *parts;
	char		err[512];
	FILE	   *out = NULL;
	int64_t    *lat = NULL;
	size_t		n = 0,
				cap = 0;
	int64_t		end_us;
	const char *pprops[MAX_PROPS][2];
	int			nprops = 0;

	conf_set(conf, "group.id", "sdp_ext.kafka_floor");
	conf_set(conf, "enable.auto.commit", "false");
	conf_set(conf, "enable.partition.eof", "false");
	conf_set(conf, "fetch.wait.max.ms", "100");
	conf_set(conf, "fetch.min.bytes", "1");
	conf_set(conf, "socket.nagle.disable", "true");
	conf_set(conf, "reconnect.backoff.max.ms", "1000");

	for (int i = 1; i < argc; i++)
	{
		if (strcmp(argv[i], "--bootstrap") == 0 && i + 1 < argc)
			bootstrap = argv[++i];
		else if (strcmp(argv[i], "--topic") == 0 && i + 1 < argc)
			topic = argv[++i];
		else if (strcmp(argv[i], "--duration") == 0 && i + 1 < argc)
			duration = atof(argv[++i]);
		else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc)
			out_path = argv[++i];
		else if (strcmp(argv[i], "--payload-ts") == 0 && i + 1 < argc)
			ts_field = argv[++i];
		else if (strcmp(argv[i], "--relay-to") == 0 && i + 1 < argc)
			relay_topic = argv[++i];
		else if (strcmp(argv[i], "--transactional") == 0)
			transactional = true;
		else if ((strcmp(argv[i], "-X") == 0 || strcmp(argv[i], "-P") == 0) && i + 1 < argc)
		{
			bool		producer = argv[i][1] == 'P';
			char	   *kv = strdup(argv[++i]);
			char	   *eq = strchr(kv, '=');

			if (eq == NULL)
			{
				fprintf(stderr, "kafka_floor: %s needs prop=value\n", producer ? "-P" : "-X");
				return 2;
			}
			*eq = '\0';
			if (producer)
			{
				if (nprops == MAX_PROPS)
				{
					fprintf(stderr, "kafka_floor: too many -P\n");
					return 2;
				}
				pprops[nprops][0] = kv;
				pprops[nprops++][1] = eq + 1;
			}
			else
				conf_set(conf, kv, eq + 1);
		}
		else
		{
			fprintf(stderr, "usage: kafka_floor --bootstrap ADDR --topic T --duration S [--out FILE] [--payload-ts FIELD] [--relay-to TOPIC [--transactional]] [-X prop=value]... [-P prop=value]...\n");
			return 2;
		}
	}
	if (bootstrap == NULL || topic == NULL)
	{
		fprintf(stderr, "kafka_floor: --bootstrap and --topic are required\n");
		return 2;
	}
	conf_set(conf, "bootstrap.servers", bootstrap);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);

	rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
	if (rk == NULL)
	{
		fprintf(stderr, "kafka_floor: %s\n", err);
		return 1;
	}
	rd_kafka_poll_set_consumer(rk);
	if (relay_topic)
	{
		rd_kafka_conf_t *pconf = rd_kafka_conf_new();

		conf_set(pconf, "bootstrap.servers", bootstrap);
		conf_set(pconf, "linger.ms", "1");
		conf_set(pconf, "acks", "all");
		conf_set(pconf, "enable.idempotence", "true");
		conf_set(pconf, "socket.nagle.disable", "true");
		if (transactional)
		{
			char		id[64];

			snprintf(id, sizeof(id), "sdp_ext.kafka_floor.%d", (int) getpid());
			conf_set(pconf, "transactional.id", id);
			rd_kafka_conf_set_dr_msg_cb(pconf, delivered);
		}
		for (int i = 0; i < nprops; i++)
			conf_set(pconf, pprops[i][0], pprops[i][1]);
		relay = rd_kafka_new(RD_KAFKA_PRODUCER, pconf, err, sizeof(err));
		if (relay == NULL)
		{
			fprintf(stderr, "kafka_floor: %s\n", err);
			return 1;
		}
		if (transactional && txn_check(rd_kafka_init_transactions(relay, 10000), "init_transactions"))
			return 1;
	}
	else if (transactional)
	{
		fprintf(stderr, "kafka_floor: --transactional needs --relay-to\n");
		return 2;
	}
	rkt = rd_kafka_topic_new(rk, topic, NULL);
	if (rd_kafka_metadata(rk, 0, rkt, &md, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR ||
		md->topic_cnt != 1 || md->topics[0].err)
	{
		fprintf(stderr, "kafka_floor: no metadata for topic %s\n", topic);
		return 1;
	}
	parts = rd_kafka_topic_partition_list_new(md->topics[0].partition_cnt);
	for (int i = 0; i < md->topics[0].partition_cnt; i++)
		rd_kafka_topic_partition_list_add(parts, topic, md->topics[0].partitions[i].id)->offset =
			RD_KAFKA_OFFSET_END;
	rd_kafka_metadata_destroy(md);
	if (rd_kafka_assign(rk, parts) != RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		fprintf(stderr, "kafka_floor: assign failed\n");
		return 1;
	}
	if (out_path && (out = fopen(out_path, "w")) == NULL)
	{
		perror(out_path);
		return 1;
	}
	printf("{\"ready\": true}\n");
	fflush(stdout);

	end_us = now_us() + (int64_t) (duration * 1e6);
	while (!stop_requested && now_us() < end_us)
	{
		rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
		int			taken = 0;

		if (relay && !transactional)
			rd_kafka_poll(relay, 0);
		if (m == NULL)
			continue;
		if (transactional && txn_check(rd_kafka_begin_transaction(relay), "begin_transaction"))
			return 1;
		/* what has arrived: one message, or with --transactional all there is, in one transaction */
		do
		{
			int64_t		received = now_us(),
						ts;

			if (relay && m->err == RD_KAFKA_RESP_ERR_NO_ERROR)
				(void) rd_kafka_producev(relay,
										 RD_KAFKA_V_TOPIC(relay_topic),
										 RD_KAFKA_V_PARTITION(m->partition),
										 RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
										 RD_KAFKA_V_KEY(m->key, m->key_len),
										 RD_KAFKA_V_VALUE(m->payload, m->len),
										 RD_KAFKA_V_TIMESTAMP(rd_kafka_message_timestamp(m, NULL)),
										 RD_KAFKA_V_END);
			if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR &&
				(ts = ts_field ? payload_ts(m, ts_field) : rd_kafka_message_timestamp(m, NULL)) > 0)
			{
				if (n == cap)
				{
					cap = cap ? cap * 2 : 1 << 16;
					lat = realloc(lat, cap * sizeof(int64_t));
				}
				lat[n++] = received - ts * 1000;
				if (out)
					fprintf(out, "%lld %lld\n", (long long) ts, (long long) (received - ts * 1000));
			}
			rd_kafka_message_destroy(m);
		} while (transactional && ++taken < 10000 && (m = rd_kafka_consumer_poll(rk, 0)) != NULL);
		if (transactional)
		{
			int64_t		deadline = now_us() + 10000000;

			while (rd_kafka_outq_len(relay) > 0 && now_us() < deadline)
				(void) rd_kafka_flush(relay, 1);
			if (txn_check(rd_kafka_commit_transaction(relay, 10000), "commit_transaction"))
				return 1;
			transactions++;
		}
	}
	if (out)
		fclose(out);
	qsort(lat, n, sizeof(int64_t), cmp_i64);
	/* nearest-rank percentiles, as the flows' progress reports compute them */
	printf("{\"count\": %zu, \"p50_ms\": %.3f, \"p99_ms\": %.3f, \"transactions\": %ld}\n", n,
		   n ? lat[(size_t) ((n * 50 + 99) / 100) - 1] / 1000.0 : 0.0,
		   n ? lat[(size_t) ((n * 99 + 99) / 100) - 1] / 1000.0 : 0.0, transactions);
	rd_kafka_consumer_close(rk);
	rd_kafka_destroy(rk);
	if (relay)
	{
		rd_kafka_flush(relay, 5000);
		rd_kafka_destroy(relay);
	}
	return 0;
}

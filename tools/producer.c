/*
 * producer.c
 *      The event generators' common part (declared, with the skeleton a
 *      generator runs, in tools/producer.h): messages and stop signals,
 *      common options, random numbers, the Kafka producer and its delivery
 *      accounting, clocks and pacing, the final report.
 */
#define _GNU_SOURCE

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <librdkafka/rdkafka.h>

#include "producer.h"

#define MAX_PARTITIONS		100000

/* ---------------------------------------------------------------------
 * Messages and stop signals (every tool)
 * --------------------------------------------------------------------- */

/* "tool_name: message" and a newline on stderr. */
void
vprint_message(const char *fmt, va_list ap)
{
	fprintf(stderr, "%s: ", tool_name);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

void
fatal(const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vprint_message(fmt, ap);
	va_end(ap);
	exit(fatal_exit_status);
}

/* Set by SIGINT and SIGTERM; the main loop finishes cleanly. */
volatile sig_atomic_t stop_requested = 0;

static void
handle_stop_signal(int signo)
{
	stop_requested = 1;
}

/* SIGINT and SIGTERM request a stop; a closed pipe is an error, not death. */
void
install_stop_signal_handlers(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	sa.sa_handler = handle_stop_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
}

/* ---------------------------------------------------------------------
 * Common options
 * --------------------------------------------------------------------- */

ProducerOptions producer;

double
parse_double_arg(const char *name, const char *s, double min, double max)
{
	char	   *end;
	double		v;

	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || end == s || *end != '\0' || !(v >= min && v <= max))
		fatal("invalid value for --%s: \"%s\" (must be between %g and %g)",
			  name, s, min, max);
	return v;
}

int64_t
parse_int_arg(const char *name, const char *s, int64_t min, int64_t max)
{
	char	   *end;
	long long	v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
		fatal("invalid value for --%s: \"%s\" (must be an integer between %"
			  PRId64 " and %" PRId64 ")", name, s, min, max);
	return (int64_t) v;
}

void
set_producer_defaults(void)
{
	producer.rate = 1000;
	producer.count = 10000;
	producer.duration = -1;
	producer.seed = 42;
	producer.message_timeout_ms = 30000;
}

/*
 * Apply common option c (a getopt_long() code) with argument arg.  --help
 * shows usage on stdout and exits 0; anything else that is not a common
 * option (getopt's '?' for one it did not know) shows it on stderr and
 * exits 2.
 */
void
parse_producer_option(int c, const char *arg, void (*usage) (FILE *out))
{
	switch (c)
	{
		case OPT_BOOTSTRAP:
			producer.bootstrap = arg;
			break;
		case OPT_TOPIC:
			producer.topic = arg;
			break;
		case OPT_RATE:
			producer.rate = parse_double_arg("rate", arg, 0, 1e9);
			break;
		case OPT_COUNT:
			producer.count = parse_int_arg("count", arg, 0, INT64_MAX / 2);
			producer.count_given = true;
			break;
		case OPT_DURATION:
			producer.duration = parse_double_arg("duration", arg, 0, 1e9);
			break;
		case OPT_SEED:
			producer.seed = (uint64_t) parse_int_arg("seed", arg, 0, INT64_MAX);
			break;
		case OPT_SEQ_START:
			producer.seq_start = parse_int_arg("seq-start", arg, 0, INT64_MAX / 2);
			break;
		case OPT_LINGER_MS:
			producer.linger_ms = (int) parse_int_arg("linger-ms", arg, 0, 900000);
			break;
		case OPT_MESSAGE_TIMEOUT_MS:
			producer.message_timeout_ms =
				(int) parse_int_arg("message-timeout-ms", arg, 1, 2147483647);
			break;
		case 'X':
			if (strchr(arg, '=') == NULL)
				fatal("-X expects PROPERTY=VALUE, not \"%s\"", arg);
			if (producer.n_properties == MAX_PROPERTIES)
				fatal("too many -X properties");
			producer.properties[producer.n_properties++] = arg;
			break;
		case OPT_QUIET:
			producer.quiet = true;
			break;
		case 'h':
		case OPT_HELP:
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			exit(2);
	}
}

/*
 * Check the common options once getopt_long() is done: no stray argument,
 * --bootstrap and --topic present (usage on stderr otherwise), at most one
 * of --count and --duration.
 */
void
finish_producer_options(int argc, char **argv, void (*usage) (FILE *out))
{
	if (optind < argc)
		fatal("unexpected argument \"%s\"", argv[optind]);
	if (producer.bootstrap == NULL || producer.topic == NULL)
	{
		usage(stderr);
		exit(2);
	}
	if (producer.count_given && producer.duration >= 0)
		fatal("use --count or --duration, not both");
	if (producer.duration >= 0)
		producer.count = -1;
}

/* ---------------------------------------------------------------------
 * Random numbers: splitmix64 streams
 * --------------------------------------------------------------------- */

uint64_t
splitmix64_next(uint64_t *state)
{
	uint64_t	z = (*state += UINT64_C(0x9E3779B97F4A7C15));

	z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
	return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
double
rng_uniform(uint64_t *state)
{
	return (splitmix64_next(state) >> 11) * 0x1.0p-53;
}

/* Uniform in [lo, hi]. */
double
rng_range(uint64_t *state, double lo, double hi)
{
	return lo + (hi - lo) * rng_uniform(state);
}

/* Uniform integer in [0, n). */
int
rng_int(uint64_t *state, int n)
{
	return (int) (rng_uniform(state) * n);
}

/* Standard normal (Box-Muller). */
double
rng_normal(uint64_t *state)
{
	double		u1 = 1.0 - rng_uniform(state);	/* (0, 1]: log is finite */
	double		u2 = rng_uniform(state);

	return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* ---------------------------------------------------------------------
 * Message helpers
 * --------------------------------------------------------------------- */

/*
 * Whether message i is one of a share of the messages, spread evenly: it is
 * iff floor((i+1)*share) > floor(i*share), so N messages hold exactly
 * floor(N*share) of them, whatever the seed and the timing.
 */
bool
message_in_share(int64_t i, double share)
{
	return share > 0 &&
		floor((double) (i + 1) * share) > floor((double) i * share);
}

/* "2026-11-29T08:26:45.123Z", also before 1970 */
void
format_iso8601_ms(int64_t epoch_ms, char *buf, size_t size)
{
	int64_t		ms = epoch_ms % 1000;
	time_t		secs;
	struct tm	tm;
	size_t		n;

	if (ms < 0)
		ms += 1000;
	secs = (time_t) ((epoch_ms - ms) / 1000);
	gmtime_r(&secs, &tm);
	n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf + n, size - n, ".%03dZ", (int) ms);
}

/* ---------------------------------------------------------------------
 * Kafka producer and delivery accounting
 * --------------------------------------------------------------------- */

DeliveryStats stats;

static void
ensure_partition_slots(int n)
{
	if (n <= stats.n_partitions)
		return;
	stats.per_partition = realloc(stats.per_partition, n * sizeof(int64_t));
	if (stats.per_partition == NULL)
		fatal("out of memory");
	for (int p = stats.n_partitions; p < n; p++)
		stats.per_partition[p] = 0;
	stats.n_partitions = n;
}

/* Runs in the main thread, from rd_kafka_poll() and rd_kafka_flush(). */
static void
on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque)
{
	if (msg->err)
	{
		if (stats.failed++ == 0)
			snprintf(stats.first_error, sizeof(stats.first_error), "%s",
					 rd_kafka_err2str(msg->err));
		return;
	}
	stats.delivered++;
	if (msg->partition >= 0 && msg->partition < MAX_PARTITIONS)
	{
		ensure_partition_slots(msg->partition + 1);
		stats.per_partition[msg->partition]++;
	}
}

static void
set_property(rd_kafka_conf_t *conf, const char *name, const char *value)
{
	char		errstr[512];

	if (rd_kafka_conf_set(conf, name, value, errstr, sizeof(errstr)) !=
		RD_KAFKA_CONF_OK)
		fatal("%s", errstr);
}

static rd_kafka_t *
create_producer(void)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	char		errstr[512];
	char		num[32];
	rd_kafka_t *rk;

	set_property(conf, "bootstrap.servers", producer.bootstrap);
	snprintf(num, sizeof(num), "%d", producer.linger_ms);
	set_property(conf, "linger.ms", num);
	snprintf(num, sizeof(num), "%d", producer.message_timeout_ms);
	set_property(conf, "message.timeout.ms", num);
	set_property(conf, "socket.nagle.disable", "true");
	set_property(conf, "acks", "all");
	set_property(conf, "enable.idempotence", "false");
	/* the Java client's partitioner, so keys land where Kafka tools expect */
	set_property(conf, "partitioner", "murmur2_random");
	/* resume quickly after a broker outage */
	set_property(conf, "reconnect.backoff.max.ms", "1000");
	if (producer.quiet)
		set_property(conf, "log_level", "0");

	for (int i = 0; i < producer.n_properties; i++)
	{
		char	   *copy = strdup(producer.properties[i]);
		char	   *eq = strchr(copy, '=');

		*eq = '\0';
		set_property(conf, copy, eq + 1);
		free(copy);
	}
	rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);

	rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
	if (rk == NULL)
		fatal("could not create producer: %s", errstr);
	return rk;
}

/*
 * Learn the topic's partition count so the report lists every partition,
 * including any that got nothing.  Not fatal: a broker that is down now may
 * come back before the messages time out.
 */
static void
learn_partitions(rd_kafka_t *rk, rd_kafka_topic_t *rkt)
{
	const struct rd_kafka_metadata *md;
	int			timeout_ms = producer.message_timeout_ms < 5000 ?
		producer.message_timeout_ms : 5000;
	rd_kafka_resp_err_t err;

	err = rd_kafka_metadata(rk, 0, rkt, &md, timeout_ms);
	if (err)
	{
		if (!producer.quiet)
			fprintf(stderr, "%s: no metadata for topic \"%s\" yet: %s\n",
					tool_name, producer.topic, rd_kafka_err2str(err));
		return;
	}
	if (md->topic_cnt == 1 && md->topics[0].err == 0)
		ensure_partition_slots(md->topics[0].partition_cnt);
	rd_kafka_metadata_destroy(md);
}

/* The producer and its handle on --topic, whose partitions it has learnt. */
void
open_producer(rd_kafka_t **rk, rd_kafka_topic_t **rkt)
{
	sigset_t	all,
				saved;

	/* librdkafka's threads must never take our signals */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &saved);
	*rk = create_producer();
	pthread_sigmask(SIG_SETMASK, &saved, NULL);

	*rkt = rd_kafka_topic_new(*rk, producer.topic, NULL);
	if (*rkt == NULL)
		fatal("could not create topic handle: %s",
			  rd_kafka_err2str(rd_kafka_last_error()));
	learn_partitions(*rk, *rkt);
}

/*
 * Enqueue one message, waiting while the local queue is full.  timestamp_ms
 * is its CreateTime (milliseconds since the epoch), or 0 for the wall clock
 * when it is enqueued.  Returns false if it could not be enqueued (a stop
 * request while waiting, or an error).
 */
bool
produce_message(rd_kafka_t *rk, rd_kafka_topic_t *rkt, const char *key,
				const char *payload, int len, int64_t timestamp_ms)
{
	for (;;)
	{
		rd_kafka_resp_err_t err;

		err = rd_kafka_producev(rk,
								RD_KAFKA_V_RKT(rkt),
								RD_KAFKA_V_KEY(key, strlen(key)),
								RD_KAFKA_V_VALUE((void *) payload, (size_t) len),
								RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
								RD_KAFKA_V_TIMESTAMP(timestamp_ms),
								RD_KAFKA_V_END);
		if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
			return true;
		if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL)
		{
			fprintf(stderr, "%s: produce failed: %s\n",
					tool_name, rd_kafka_err2str(err));
			return false;
		}
		if (stop_requested)
			return false;
		rd_kafka_poll(rk, 10);
	}
}

/* Wait for every outstanding delivery report. */
void
wait_for_deliveries(rd_kafka_t *rk)
{
	rd_kafka_flush(rk, producer.message_timeout_ms + 10000);
}

void
close_producer(rd_kafka_t *rk, rd_kafka_topic_t *rkt)
{
	rd_kafka_topic_destroy(rkt);
	rd_kafka_destroy(rk);
	free(stats.per_partition);
}

/* ---------------------------------------------------------------------
 * Clocks and pacing
 * --------------------------------------------------------------------- */

double
monotonic_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int64_t
wall_clock_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sleep until the monotonic time t, unless a stop signal arrives first. */
static void
sleep_until(double t)
{
	struct timespec ts;

	ts.tv_sec = (time_t) t;
	ts.tv_nsec = (long) ((t - (double) ts.tv_sec) * 1e9);
	if (ts.tv_nsec >= 1000000000L)
	{
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	while (!stop_requested &&
		   clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

void
start_pacing(Pacing *pacing)
{
	pacing->start = pacing->sched_start = monotonic_seconds();
	pacing->start_wall_ms = wall_clock_ms();
	pacing->sched_base = 0;
}

/*
 * Wait until message i is due.  Returns false instead when the run is over:
 * --count messages sent, --duration up, or a stop requested.  *now is the
 * monotonic time at which message i goes.
 */
bool
wait_until_due(Pacing *pacing, int64_t i, double *now)
{
	if (stop_requested)
		return false;
	if (producer.count >= 0 && i >= producer.count)
		return false;
	*now = monotonic_seconds();
	if (producer.duration >= 0 && *now - pacing->start >= producer.duration)
		return false;

	if (producer.rate > 0)
	{
		double		due = pacing->sched_start +
			(i - pacing->sched_base) / producer.rate;

		/* with --duration, send only what is due before the end */
		if (producer.duration >= 0 && due - pacing->start >= producer.duration)
			return false;
		if (*now < due)
		{
			sleep_until(due);
			if (stop_requested)
				return false;
			*now = monotonic_seconds();
		}
		else if (*now - due > 0.1)
		{
			/* far behind (a stall): restart the schedule, no burst */
			pacing->sched_start = *now;
			pacing->sched_base = i;
		}
	}
	return true;
}

/* ---------------------------------------------------------------------
 * The final report
 * --------------------------------------------------------------------- */

static double
delivery_rate(double seconds)
{
	return seconds > 0 ? stats.delivered / seconds : 0;
}

/*
 * The human summary on stderr, with the generator's own counts (such as
 * "12 late") before the topic.
 */
void
print_summary(int64_t sent, const char *own_counts, double seconds)
{
	fprintf(stderr,
			"%s: %" PRId64 " sent, %" PRId64 " delivered, %" PRId64
			" failed, %s to %s in %.3f s (%.0f msg/s)\n",
			tool_name, sent, stats.delivered, sent - stats.delivered, own_counts,
			producer.topic, seconds, delivery_rate(seconds));
}

/* Why messages were not delivered, if some were not. */
void
print_first_delivery_error(int64_t sent)
{
	if (sent - stats.delivered > 0)
		fprintf(stderr, "%s: first delivery error: %s\n", tool_name,
				stats.failed > 0 ? stats.first_error : "not delivered in time");
}

/*
 * The one JSON line on stdout at the end: the delivery counts, the
 * generator's own count (count_name), the deliveries by partition, the
 * time and rate, then more_fields (", \"name\": value"... or "").
 */
void
print_report_line(int64_t sent, const char *count_name, int64_t count,
				  double seconds, const char *more_fields)
{
	printf("{\"sent\": %" PRId64 ", \"delivered\": %" PRId64
		   ", \"failed\": %" PRId64 ", \"%s\": %" PRId64
		   ", \"partitions\": {",
		   sent, stats.delivered, sent - stats.delivered, count_name, count);
	for (int p = 0; p < stats.n_partitions; p++)
		printf("%s\"%d\": %" PRId64, p > 0 ? ", " : "", p,
			   stats.per_partition[p]);
	printf("}, \"seconds\": %.3f, \"rate\": %.1f%s}\n",
		   seconds, delivery_rate(seconds), more_fields);
	fflush(stdout);
}

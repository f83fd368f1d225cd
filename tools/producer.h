/*
 * producer.h
 *      What the event generators (tools/flight_sim.c, tools/payment_sim.c)
 *      share, implemented in tools/producer.c: their common options, the
 *      Kafka producer and its delivery accounting, clocks and pacing, the
 *      final report, random numbers.  The message and stop signal helpers at
 *      the top serve tools/sdp_broker.c too.
 *
 * A generator keeps only what is its own (its model, its options, its message
 * rendering) and runs this skeleton:
 *
 *   parse_options(): set_producer_defaults(), getopt_long() with its own
 *       table (which includes PRODUCER_..._OPTIONS), parse_producer_option()
 *       for any code not its own, finish_producer_options()
 *   install_stop_signal_handlers(); open_producer(&rk, &rkt);
 *   start_pacing(&pacing);
 *   for (i = 0; wait_until_due(&pacing, i, &now); i++)
 *       render message i, produce_message(), rd_kafka_poll(rk, 0)
 *   wait_for_deliveries(rk); print_summary() and so on; close_producer()
 *
 * Each tool that links producer.c defines tool_name (the prefix of its
 * messages) and fatal_exit_status (what fatal() exits with: 2 for the
 * generators, as a usage error does, since their failures are bad options or
 * a setup that cannot work).
 */
#ifndef SDP_TOOLS_PRODUCER_H
#define SDP_TOOLS_PRODUCER_H

#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <librdkafka/rdkafka.h>

#define MAX_PROPERTIES		64

/* Defined by the tool. */
extern const char tool_name[];
extern const int fatal_exit_status;

/* Messages and stop signals (every tool) */

/* "tool_name: message" and a newline on stderr. */
extern void vprint_message(const char *fmt, va_list ap);
extern void fatal(const char *fmt,...)
			__attribute__((format(printf, 1, 2), noreturn));

/* Set by SIGINT and SIGTERM; the main loop finishes cleanly. */
extern volatile sig_atomic_t stop_requested;

/* SIGINT and SIGTERM request a stop; a closed pipe is an error, not death. */
extern void install_stop_signal_handlers(void);

/* Common options */

/* The options every generator has: where to, how many, how fast, the seed. */
typedef struct ProducerOptions
{
	const char *bootstrap;
	const char *topic;
	double		rate;			/* events per second, 0 = unpaced */
	int64_t		count;			/* messages to send, or -1 with duration */
	double		duration;		/* seconds, or -1 with count */
	bool		count_given;	/* --count was given: refuse --duration too */
	uint64_t	seed;
	int64_t		seq_start;
	int			linger_ms;
	int			message_timeout_ms;
	const char *properties[MAX_PROPERTIES];	/* "name=value" for librdkafka */
	int			n_properties;
	bool		quiet;
} ProducerOptions;

extern ProducerOptions producer;

/*
 * getopt_long() codes of the common options; a generator numbers its own
 * from OPT_FIRST_OWN.  -X is 'X' and -h is 'h'.
 */
enum
{
	OPT_BOOTSTRAP = 256, OPT_TOPIC, OPT_RATE, OPT_COUNT, OPT_DURATION,
	OPT_SEED, OPT_SEQ_START, OPT_LINGER_MS, OPT_MESSAGE_TIMEOUT_MS, OPT_QUIET,
	OPT_HELP, OPT_FIRST_OWN
};

/*
 * The common options in three groups, for a generator's getopt_long() table
 * and usage text: the target first, the run after the generator's first
 * options (its model's size), the client settings last.  The order of the
 * table is what getopt lists for an ambiguous abbreviation.
 */
#define PRODUCER_TARGET_OPTIONS \
	{"bootstrap", required_argument, NULL, OPT_BOOTSTRAP}, \
	{"topic", required_argument, NULL, OPT_TOPIC}

#define PRODUCER_RUN_OPTIONS \
	{"rate", required_argument, NULL, OPT_RATE}, \
	{"count", required_argument, NULL, OPT_COUNT}, \
	{"duration", required_argument, NULL, OPT_DURATION}, \
	{"seed", required_argument, NULL, OPT_SEED}

#define PRODUCER_CLIENT_OPTIONS \
	{"seq-start", required_argument, NULL, OPT_SEQ_START}, \
	{"linger-ms", required_argument, NULL, OPT_LINGER_MS}, \
	{"message-timeout-ms", required_argument, NULL, OPT_MESSAGE_TIMEOUT_MS}, \
	{"property", required_argument, NULL, 'X'}, \
	{"quiet", no_argument, NULL, OPT_QUIET}, \
	{"help", no_argument, NULL, OPT_HELP}

#define PRODUCER_RUN_USAGE \
	"  --rate EPS                events per second, 0 = unpaced (default 1000)\n" \
	"  --count N                 send exactly N messages (default 10000)\n" \
	"  --duration SECONDS        send for this long instead of --count\n" \
	"  --seed S                  random seed (default 42)\n"

#define PRODUCER_CLIENT_USAGE \
	"  --seq-start N             seq of the first message (default 0)\n" \
	"  --linger-ms MS            producer linger.ms (default 0)\n" \
	"  --message-timeout-ms MS   producer message.timeout.ms (default 30000)\n" \
	"  -X, --property PROP=VAL   any other librdkafka property (repeatable)\n" \
	"  --quiet                   no librdkafka logs, no summary on stderr\n"

/* The value of option --name, or fatal() if it is not one in [min, max]. */
extern double parse_double_arg(const char *name, const char *s,
							   double min, double max);
extern int64_t parse_int_arg(const char *name, const char *s,
							 int64_t min, int64_t max);

extern void set_producer_defaults(void);
extern void parse_producer_option(int c, const char *arg,
								  void (*usage) (FILE *out));
extern void finish_producer_options(int argc, char **argv,
									void (*usage) (FILE *out));

/* Random numbers: splitmix64 streams */

extern uint64_t splitmix64_next(uint64_t *state);
extern double rng_uniform(uint64_t *state);	/* in [0, 1) */
extern double rng_range(uint64_t *state, double lo, double hi);	/* [lo, hi] */
extern int	rng_int(uint64_t *state, int n);	/* in [0, n) */
extern double rng_normal(uint64_t *state);	/* standard normal */

/* Message helpers */

extern bool message_in_share(int64_t i, double share);
extern void format_iso8601_ms(int64_t epoch_ms, char *buf, size_t size);

/* Kafka producer and delivery accounting */

typedef struct DeliveryStats
{
	int64_t		delivered;
	int64_t		failed;
	int64_t    *per_partition;	/* delivered messages by partition */
	int			n_partitions;	/* entries in per_partition */
	char		first_error[256];
} DeliveryStats;

extern DeliveryStats stats;

extern void open_producer(rd_kafka_t **rk, rd_kafka_topic_t **rkt);
extern bool produce_message(rd_kafka_t *rk, rd_kafka_topic_t *rkt,
							const char *key, const char *payload, int len,
							int64_t timestamp_ms);
extern void wait_for_deliveries(rd_kafka_t *rk);
extern void close_producer(rd_kafka_t *rk, rd_kafka_topic_t *rkt);

/* Clocks and pacing */

extern double monotonic_seconds(void);
extern int64_t wall_clock_ms(void);

/*
 * The run's start and its schedule: message i is due at
 * sched_start + (i - sched_base) / rate, by CLOCK_MONOTONIC.
 */
typedef struct Pacing
{
	double		start;			/* monotonic seconds at the start */
	int64_t		start_wall_ms;	/* the wall clock at the start */
	double		sched_start;
	int64_t		sched_base;
} Pacing;

extern void start_pacing(Pacing *pacing);
extern bool wait_until_due(Pacing *pacing, int64_t i, double *now);

/* The final report */

extern void print_summary(int64_t sent, const char *own_counts, double seconds);
extern void print_first_delivery_error(int64_t sent);
extern void print_report_line(int64_t sent, const char *count_name,
							  int64_t count, double seconds,
							  const char *more_fields);

#endif							/* SDP_TOOLS_PRODUCER_H */

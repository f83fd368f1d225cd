/*
 * payment_sim.c
 *      Payment event simulator: a Kafka producer for the payments topic of
 *      the reference feature (windowed aggregation) flows.
 *
 *   payment_sim --bootstrap ADDR --topic T [--merchants N] [--countries K]
 *               [--rate EPS] [--count N | --duration SECONDS] [--seed S]
 *               [--approve-rate R] [--error-rate R]
 *               [--event-time now|fixed:ISO|step:MS] [--step-ms MS]
 *               [--disorder-ms D] [--late-share S] [--late-ms L]
 *               [--incident KIND:MERCHANT:FROM_S:TO_S]...
 *               [--seq-start N] [--linger-ms MS] [--message-timeout-ms MS]
 *               [-X PROP=VALUE]... [--quiet]
 *
 * N merchants (m00001 .. mN) take payments; one Kafka message per payment,
 * keyed by merchant_id, as a JSON object:
 *
 *   {"seq":0,"merchant_id":"m00042","country":"DE","method":"card",
 *    "status":"approved","amount":123.45,"event_ts":"2026-11-29T08:26:45.123Z"}
 *
 * and late events carry one more field, "late":true, at the end.  seq is
 * --seq-start plus the message's index in this run.  amount always has
 * exactly two decimals.
 *
 * Merchants differ in popularity (Zipf-like weights, exponent 0.8, over a
 * seeded order), in their home country (one of the first K of 20 countries,
 * the big markets more likely) and in their typical ticket (lognormal amounts
 * around a per-merchant median of 8 to 250, kept within 1.00 .. 5000.00).
 * 85% of a merchant's payments come from its home country, the rest from the
 * other K-1 countries alike.  Status is approved with --approve-rate, error
 * with --error-rate, rejected otherwise, unless an incident says otherwise:
 *
 *   approval_drop:m00007:60:120    approvals fall to 10% (the lost ones
 *                                  become 70% rejected, 30% error)
 *   rejection_spike:m00007:60:120  rejected rises to 70% (approved and error
 *                                  shrink in proportion)
 *
 * FROM_S and TO_S are seconds since the start of the event clock, FROM_S
 * included, TO_S excluded.
 *
 * The event clock: with --event-time now it is the wall-clock time of the
 * produce call; with fixed:2026-01-01T00:00:00Z it is simulated, starting
 * there and advancing by --step-ms (default 1000/rate) per message, whatever
 * the wall time, so runs are reproducible and can go as fast as the broker;
 * step:MS is fixed:2026-01-01T00:00:00.000Z with --step-ms MS.  The clock of
 * message i (its index in this run, not seq) is start + round(i * step).
 * event_ts is the clock minus a delay drawn uniformly from [0, --disorder-ms],
 * except for late events: message i is late iff
 * floor((i+1)*share) > floor(i*share), so N messages hold exactly
 * floor(N*share) late ones, and its event_ts is the clock minus --late-ms.
 *
 * Everything random is drawn from --seed: the merchants from a seeded stream,
 * every per-message choice from a hash of the message index, so the same
 * seed gives the same payloads however fast the run goes (byte for byte with
 * a simulated clock).  The Kafka message timestamp is the produce time.
 *
 * Pacing follows a schedule (message i is due at start + i/rate, by
 * CLOCK_MONOTONIC), not one-second bursts.  Delivery reports count what the
 * broker acknowledged, per partition.  At the end a human summary goes to
 * stderr and exactly one JSON line to stdout:
 *
 *   {"sent": N, "delivered": N, "failed": N, "late": L,
 *    "partitions": {"0": n0, ...}, "seconds": S, "rate": R,
 *    "first_event_ts": "...", "last_event_ts": "..."}
 *
 * first_event_ts and last_event_ts are those of the first and the last
 * message sent (null if none was).  The exit status is 0 only if every
 * message sent was delivered.  SIGINT and SIGTERM stop the run early but
 * still flush and print the summary.
 */
#define _GNU_SOURCE

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <librdkafka/rdkafka.h>

#include "producer.h"

const char tool_name[] = "payment_sim";
const int fatal_exit_status = 2;

#define MAX_MERCHANTS		99999	/* "m" + 5 digits */
#define MAX_INCIDENTS		64
#define MAX_MESSAGE_LEN		512

#define HOME_COUNTRY_SHARE	0.85
#define MERCHANT_ZIPF_EXP	0.8		/* popularity of the r-th merchant ~ r^-0.8 */
#define COUNTRY_ZIPF_EXP	0.7		/* the same for home countries */
#define MIN_MEDIAN_AMOUNT	8.0
#define MAX_MEDIAN_AMOUNT	250.0
#define AMOUNT_SIGMA		1.0		/* of log(amount) around the median */
#define MIN_AMOUNT_CENTS	100
#define MAX_AMOUNT_CENTS	500000
#define DROP_APPROVE_RATE	0.10	/* approvals during approval_drop */
#define DROP_ERROR_SHARE	0.30	/* lost approvals that become errors */
#define SPIKE_REJECT_RATE	0.70	/* rejections during rejection_spike */

/* 2026-01-01T00:00:00Z, the start of the step:MS clock */
#define STEP_CLOCK_START_MS INT64_C(1767225600000)

/* ---------------------------------------------------------------------
 * Reference data
 * --------------------------------------------------------------------- */

/* ISO 3166-1 alpha-2, the big card markets first: --countries K takes K. */
static const char *const countries[] = {
	"US", "GB", "DE", "FR", "BR", "JP", "CA", "AU", "ES", "IT",
	"NL", "IN", "MX", "SE", "PL", "SG", "KR", "AE", "ZA", "NG"
};

#define N_COUNTRIES ((int) (sizeof(countries) / sizeof(countries[0])))

/* Payment methods and their shares, which sum to 1. */
static const char *const methods[] = {"card", "wallet", "bank_transfer", "bnpl"};
static const double method_shares[] = {0.55, 0.25, 0.12, 0.08};

#define N_METHODS ((int) (sizeof(methods) / sizeof(methods[0])))

/* ---------------------------------------------------------------------
 * Options
 * --------------------------------------------------------------------- */

typedef enum IncidentKind
{
	INCIDENT_APPROVAL_DROP,
	INCIDENT_REJECTION_SPIKE
} IncidentKind;

typedef struct Incident
{
	IncidentKind kind;
	int			merchant;		/* number in the id: 7 for m00007 */
	double		from_s;			/* on the event clock, included */
	double		to_s;			/* excluded */
} Incident;

/* The merchants and the payments; the common options are in producer.h. */
typedef struct SimOptions
{
	int			merchants;
	int			countries;
	double		approve_rate;
	double		error_rate;
	bool		simulated_clock;	/* false: --event-time now */
	int64_t		clock_start_ms; /* simulated clock: epoch ms of message 0 */
	double		step_ms;		/* simulated clock: ms per message */
	int64_t		disorder_ms;
	double		late_share;
	int64_t		late_ms;
	Incident	incidents[MAX_INCIDENTS];
	int			n_incidents;
} SimOptions;

static SimOptions opts;

static void
usage(FILE *out)
{
	fprintf(out,
			"Usage: payment_sim --bootstrap ADDR --topic TOPIC [OPTION]...\n"
			"Produce simulated payment events (JSON, key = merchant_id) to Kafka.\n\n"
			"  --merchants N             merchants m00001..mN (default 1000)\n"
			"  --countries K             countries used, 1..%d (default %d)\n"
			PRODUCER_RUN_USAGE
			"  --approve-rate R          share of approved payments (default 0.90)\n"
			"  --error-rate R            share of errors (default 0.02); the rest\n"
			"                            are rejected\n"
			"  --event-time MODE         now, fixed:ISO-8601 (simulated clock from\n"
			"                            there) or step:MS (simulated clock from\n"
			"                            2026-01-01T00:00:00Z, MS per message)\n"
			"                            (default now)\n"
			"  --step-ms MS              fixed clock: ms per message (default 1000/rate)\n"
			"  --disorder-ms D           event_ts up to D ms before the clock (default 0)\n"
			"  --late-share S            share of late events, 0..1 (default 0)\n"
			"  --late-ms L               late events are L ms behind (default 600000)\n"
			"  --incident KIND:MERCHANT:FROM_S:TO_S\n"
			"                            approval_drop or rejection_spike for one\n"
			"                            merchant (e.g. m00007) between these seconds\n"
			"                            of the event clock (repeatable)\n"
			PRODUCER_CLIENT_USAGE,
			N_COUNTRIES, N_COUNTRIES);
}

/*
 * "2026-01-01T00:00:00Z" or with 1 to 3 decimals of a second, UTC only.
 * Returns false if s is not such a time.
 */
static bool
parse_iso8601_utc(const char *s, int64_t *epoch_ms)
{
	struct tm	tm;
	struct tm	check;
	int			consumed = 0;
	int			ms = 0;
	time_t		secs;

	memset(&tm, 0, sizeof(tm));
	if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon,
			   &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec,
			   &consumed) != 6 || consumed != 19)
		return false;
	s += consumed;
	if (*s == '.')
	{
		int			digits = 0;

		for (s++; *s >= '0' && *s <= '9' && digits < 3; s++, digits++)
			ms = ms * 10 + (*s - '0');
		if (digits == 0)
			return false;
		for (; digits < 3; digits++)
			ms *= 10;
	}
	if (strcmp(s, "Z") != 0)
		return false;

	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	check = tm;
	secs = timegm(&tm);
	/* timegm normalises 2026-02-30 to March: refuse what it changed */
	if (tm.tm_year != check.tm_year || tm.tm_mon != check.tm_mon ||
		tm.tm_mday != check.tm_mday || tm.tm_hour != check.tm_hour ||
		tm.tm_min != check.tm_min || tm.tm_sec != check.tm_sec)
		return false;
	*epoch_ms = (int64_t) secs * 1000 + ms;
	return true;
}

/* "KIND:MERCHANT:FROM_S:TO_S", e.g. "rejection_spike:m00003:0:60" */
static void
parse_incident(const char *arg)
{
	char	   *copy = strdup(arg);
	char	   *fields[4];
	char	   *p = copy;
	Incident   *inc;
	char	   *end;

	if (opts.n_incidents == MAX_INCIDENTS)
		fatal("too many incidents (at most %d)", MAX_INCIDENTS);
	inc = &opts.incidents[opts.n_incidents];

	/* exactly four fields, none empty */
	for (int n = 0; n < 4; n++)
	{
		char	   *colon = strchr(p, ':');

		fields[n] = p;
		if ((n < 3) != (colon != NULL) || (colon ? colon == p : *p == '\0'))
			fatal("invalid --incident \"%s\" (use KIND:MERCHANT:FROM_S:TO_S)", arg);
		if (colon)
		{
			*colon = '\0';
			p = colon + 1;
		}
	}

	if (strcmp(fields[0], "approval_drop") == 0)
		inc->kind = INCIDENT_APPROVAL_DROP;
	else if (strcmp(fields[0], "rejection_spike") == 0)
		inc->kind = INCIDENT_REJECTION_SPIKE;
	else
		fatal("unknown incident kind \"%s\" (use approval_drop, rejection_spike)",
			  fields[0]);

	if (strlen(fields[1]) != 6 || fields[1][0] != 'm' ||
		strspn(fields[1] + 1, "0123456789") != 5)
		fatal("invalid merchant \"%s\" in --incident (use m00001 .. m%05d)",
			  fields[1], MAX_MERCHANTS);
	inc->merchant = atoi(fields[1] + 1);

	errno = 0;
	inc->from_s = strtod(fields[2], &end);
	if (errno != 0 || *end != '\0' || !(inc->from_s >= 0))
		fatal("invalid start \"%s\" in --incident \"%s\"", fields[2], arg);
	inc->to_s = strtod(fields[3], &end);
	if (errno != 0 || *end != '\0' || !(inc->to_s > inc->from_s))
		fatal("invalid end \"%s\" in --incident \"%s\" (must follow the start)",
			  fields[3], arg);

	opts.n_incidents++;
	free(copy);
}

static void
parse_options(int argc, char **argv)
{
	enum
	{
		OPT_MERCHANTS = OPT_FIRST_OWN, OPT_COUNTRIES, OPT_APPROVE_RATE,
		OPT_ERROR_RATE, OPT_EVENT_TIME, OPT_STEP_MS, OPT_DISORDER_MS,
		OPT_LATE_SHARE, OPT_LATE_MS, OPT_INCIDENT
	};
	static const struct option long_options[] = {
		PRODUCER_TARGET_OPTIONS,
		{"merchants", required_argument, NULL, OPT_MERCHANTS},
		{"countries", required_argument, NULL, OPT_COUNTRIES},
		PRODUCER_RUN_OPTIONS,
		{"approve-rate", required_argument, NULL, OPT_APPROVE_RATE},
		{"error-rate", required_argument, NULL, OPT_ERROR_RATE},
		{"event-time", required_argument, NULL, OPT_EVENT_TIME},
		{"step-ms", required_argument, NULL, OPT_STEP_MS},
		{"disorder-ms", required_argument, NULL, OPT_DISORDER_MS},
		{"late-share", required_argument, NULL, OPT_LATE_SHARE},
		{"late-ms", required_argument, NULL, OPT_LATE_MS},
		{"incident", required_argument, NULL, OPT_INCIDENT},
		PRODUCER_CLIENT_OPTIONS,
		{NULL, 0, NULL, 0}
	};
	int			c;
	const char *event_time = "now";
	double		step_ms = -1;

	set_producer_defaults();
	opts.merchants = 1000;
	opts.countries = N_COUNTRIES;
	opts.approve_rate = 0.90;
	opts.error_rate = 0.02;
	opts.late_ms = 600000;

	while ((c = getopt_long(argc, argv, "X:h", long_options, NULL)) != -1)
	{
		switch (c)
		{
			case OPT_MERCHANTS:
				opts.merchants = (int) parse_int_arg("merchants", optarg, 1,
													 MAX_MERCHANTS);
				break;
			case OPT_COUNTRIES:
				opts.countries = (int) parse_int_arg("countries", optarg, 1,
													 N_COUNTRIES);
				break;
			case OPT_APPROVE_RATE:
				opts.approve_rate = parse_double_arg("approve-rate", optarg, 0, 1);
				break;
			case OPT_ERROR_RATE:
				opts.error_rate = parse_double_arg("error-rate", optarg, 0, 1);
				break;
			case OPT_EVENT_TIME:
				event_time = optarg;
				break;
			case OPT_STEP_MS:
				step_ms = parse_double_arg("step-ms", optarg, 0, 1e12);
				break;
			case OPT_DISORDER_MS:
				opts.disorder_ms = parse_int_arg("disorder-ms", optarg, 0,
												 INT64_C(1000000000000));
				break;
			case OPT_LATE_SHARE:
				opts.late_share = parse_double_arg("late-share", optarg, 0, 1);
				break;
			case OPT_LATE_MS:
				opts.late_ms = parse_int_arg("late-ms", optarg, 0,
											 INT64_C(1000000000000));
				break;
			case OPT_INCIDENT:
				parse_incident(optarg);
				break;
			default:
				parse_producer_option(c, optarg, usage);
				break;
		}
	}
	finish_producer_options(argc, argv, usage);
	if (opts.approve_rate + opts.error_rate > 1.0 + 1e-9)
		fatal("--approve-rate %g plus --error-rate %g is more than 1",
			  opts.approve_rate, opts.error_rate);

	/* the event clock, once --rate and --step-ms are known */
	if (strcmp(event_time, "now") == 0)
	{
		if (step_ms >= 0)
			fatal("--step-ms needs a simulated clock (--event-time fixed:ISO)");
	}
	else if (strncmp(event_time, "fixed:", 6) == 0)
	{
		opts.simulated_clock = true;
		if (!parse_iso8601_utc(event_time + 6, &opts.clock_start_ms))
			fatal("invalid time in --event-time \"%s\" (use e.g. "
				  "fixed:2026-01-01T00:00:00Z)", event_time);
		if (step_ms >= 0)
			opts.step_ms = step_ms;
		else if (producer.rate > 0)
			opts.step_ms = 1000.0 / producer.rate;
		else
			fatal("--event-time fixed:... with --rate 0 needs --step-ms");
	}
	else if (strncmp(event_time, "step:", 5) == 0)
	{
		opts.simulated_clock = true;
		opts.clock_start_ms = STEP_CLOCK_START_MS;
		opts.step_ms = parse_double_arg("event-time step", event_time + 5, 0, 1e12);
		if (step_ms >= 0)
			fatal("use --event-time step:MS or --step-ms, not both");
	}
	else
		fatal("invalid --event-time \"%s\" (use now, fixed:ISO-8601 or step:MS)",
			  event_time);

	for (int k = 0; k < opts.n_incidents; k++)
		if (opts.incidents[k].merchant < 1 ||
			opts.incidents[k].merchant > opts.merchants)
			fatal("incident for m%05d, but the merchants are m00001 .. m%05d",
				  opts.incidents[k].merchant, opts.merchants);
}

/* ---------------------------------------------------------------------
 * Random numbers: hashes of a message index (the streams are in producer.h)
 * --------------------------------------------------------------------- */

/* What a per-message random value decides: each gets its own stream. */
typedef enum MessagePurpose
{
	PURPOSE_MERCHANT = 1,
	PURPOSE_COUNTRY_HOME,
	PURPOSE_COUNTRY_OTHER,
	PURPOSE_METHOD,
	PURPOSE_STATUS,
	PURPOSE_AMOUNT,
	PURPOSE_DISORDER
} MessagePurpose;

/*
 * A random stream that depends only on the seed, a purpose and a message
 * index, so per-message choices do not depend on timing.
 */
static uint64_t
message_stream(MessagePurpose purpose, int64_t index)
{
	uint64_t	state = producer.seed * UINT64_C(0x2545F4914F6CDD1D) ^
		((uint64_t) purpose << 56) ^ (uint64_t) index;

	/* hash it, so that neighbouring indexes start far apart */
	return splitmix64_next(&state);
}

static double
message_uniform(MessagePurpose purpose, int64_t index)
{
	uint64_t	state = message_stream(purpose, index);

	return rng_uniform(&state);
}

/* ---------------------------------------------------------------------
 * Merchants
 * --------------------------------------------------------------------- */

typedef struct Merchant
{
	char		id[12];			/* "m00042" (room for any int) */
	int			home;			/* index into countries[] */
	double		log_median;		/* log of the typical amount */
} Merchant;

static Merchant *merchants;
static double *merchant_cumulative;	/* popularity summed over 0..m */

/* The index i in [0, n) with cumulative[i-1] <= u * total < cumulative[i]. */
static int
pick_weighted(const double *cumulative, int n, double u)
{
	double		target = u * cumulative[n - 1];
	int			lo = 0,
				hi = n - 1;

	while (lo < hi)
	{
		int			mid = lo + (hi - lo) / 2;

		if (cumulative[mid] > target)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

/*
 * Give every merchant a popularity rank (a seeded shuffle, so m00001 is not
 * always the busiest), a home country and a typical amount.
 */
static void
init_merchants(void)
{
	uint64_t	rng = producer.seed ^ UINT64_C(0x6D65726368616E74);	/* "merchant" */
	int		   *rank = malloc(opts.merchants * sizeof(int));
	double		country_cumulative[N_COUNTRIES];
	double		sum = 0;

	merchants = calloc(opts.merchants, sizeof(Merchant));
	merchant_cumulative = malloc(opts.merchants * sizeof(double));
	if (rank == NULL || merchants == NULL || merchant_cumulative == NULL)
		fatal("out of memory");

	for (int c = 0; c < opts.countries; c++)
	{
		sum += pow(c + 1, -COUNTRY_ZIPF_EXP);
		country_cumulative[c] = sum;
	}

	/* Fisher-Yates */
	for (int m = 0; m < opts.merchants; m++)
		rank[m] = m + 1;
	for (int m = opts.merchants - 1; m > 0; m--)
	{
		int			j = rng_int(&rng, m + 1);
		int			t = rank[m];

		rank[m] = rank[j];
		rank[j] = t;
	}

	sum = 0;
	for (int m = 0; m < opts.merchants; m++)
	{
		Merchant   *mc = &merchants[m];

		snprintf(mc->id, sizeof(mc->id), "m%05d", m + 1);
		mc->home = pick_weighted(country_cumulative, opts.countries,
								 rng_uniform(&rng));
		mc->log_median = log(MIN_MEDIAN_AMOUNT) +
			rng_uniform(&rng) * (log(MAX_MEDIAN_AMOUNT) - log(MIN_MEDIAN_AMOUNT));
		sum += pow(rank[m], -MERCHANT_ZIPF_EXP);
		merchant_cumulative[m] = sum;
	}
	free(rank);
}

/* ---------------------------------------------------------------------
 * Payments
 * --------------------------------------------------------------------- */

typedef enum PaymentStatus
{
	STATUS_APPROVED,
	STATUS_REJECTED,
	STATUS_ERROR
} PaymentStatus;

static const char *const status_names[] = {"approved", "rejected", "error"};

/* The event clock of message i, in epoch ms, for a simulated clock. */
static int64_t
simulated_clock_ms(int64_t i)
{
	return opts.clock_start_ms + (int64_t) llround((double) i * opts.step_ms);
}

static int
choose_country(const Merchant *mc, int64_t i)
{
	int			other;

	if (opts.countries == 1 ||
		message_uniform(PURPOSE_COUNTRY_HOME, i) < HOME_COUNTRY_SHARE)
		return mc->home;
	/* any other of the K countries, alike */
	other = (int) (message_uniform(PURPOSE_COUNTRY_OTHER, i) * (opts.countries - 1));
	return other >= mc->home ? other + 1 : other;
}

static int
choose_method(int64_t i)
{
	double		u = message_uniform(PURPOSE_METHOD, i);

	for (int k = 0; k < N_METHODS - 1; k++)
	{
		if (u < method_shares[k])
			return k;
		u -= method_shares[k];
	}
	return N_METHODS - 1;
}

/*
 * The status of a payment to merchant number merchant_no at clock_s seconds
 * of the event clock: the configured shares, changed by any incident that
 * covers it.
 */
static PaymentStatus
choose_status(int merchant_no, double clock_s, int64_t i)
{
	double		approve = opts.approve_rate;
	double		error = opts.error_rate;
	double		u;

	for (int k = 0; k < opts.n_incidents; k++)
	{
		const Incident *inc = &opts.incidents[k];

		if (inc->merchant != merchant_no ||
			clock_s < inc->from_s || clock_s >= inc->to_s)
			continue;
		if (inc->kind == INCIDENT_APPROVAL_DROP && approve > DROP_APPROVE_RATE)
		{
			error += (approve - DROP_APPROVE_RATE) * DROP_ERROR_SHARE;
			approve = DROP_APPROVE_RATE;
		}
		else if (inc->kind == INCIDENT_REJECTION_SPIKE &&
				 1.0 - approve - error < SPIKE_REJECT_RATE &&
				 approve + error > 0)
		{
			double		scale = (1.0 - SPIKE_REJECT_RATE) / (approve + error);

			approve *= scale;
			error *= scale;
		}
	}

	u = message_uniform(PURPOSE_STATUS, i);
	if (u < approve)
		return STATUS_APPROVED;
	if (u < approve + error)
		return STATUS_ERROR;
	return STATUS_REJECTED;
}

/* Lognormal around the merchant's median, in cents within the bounds. */
static int64_t
choose_amount_cents(const Merchant *mc, int64_t i)
{
	uint64_t	rng = message_stream(PURPOSE_AMOUNT, i);
	int64_t		cents = 0;

	/* redraw what falls outside rather than pile it up on the bounds */
	for (int attempt = 0; attempt < 16; attempt++)
	{
		double		amount = exp(mc->log_median + AMOUNT_SIGMA * rng_normal(&rng));

		cents = (int64_t) llround(fmin(amount, 1e9) * 100.0);
		if (cents >= MIN_AMOUNT_CENTS && cents <= MAX_AMOUNT_CENTS)
			return cents;
	}
	return cents < MIN_AMOUNT_CENTS ? MIN_AMOUNT_CENTS : MAX_AMOUNT_CENTS;
}

/*
 * Render message i as a payment to merchant mc.  clock_ms is its event
 * clock, clock_s the same in seconds since the clock's start.  The event
 * time goes to event_ts_out.  Returns the length of the message.
 */
static int
render_payment(char *buf, size_t size, int64_t i, const Merchant *mc,
			   int merchant_no, int64_t clock_ms, double clock_s, bool late,
			   char *event_ts_out, size_t event_ts_size)
{
	int64_t		event_ms;
	int64_t		cents;
	int			n;

	if (late)
		event_ms = clock_ms - opts.late_ms;
	else
	{
		int64_t		delay = (int64_t) (message_uniform(PURPOSE_DISORDER, i) *
									   (double) (opts.disorder_ms + 1));

		event_ms = clock_ms - (delay > opts.disorder_ms ? opts.disorder_ms : delay);
	}
	format_iso8601_ms(event_ms, event_ts_out, event_ts_size);

	/* integer cents, so the amount always shows exactly two decimals */
	cents = choose_amount_cents(mc, i);
	n = snprintf(buf, size,
				 "{\"seq\":%" PRId64 ",\"merchant_id\":\"%s\",\"country\":\"%s\""
				 ",\"method\":\"%s\",\"status\":\"%s\",\"amount\":%" PRId64
				 ".%02d,\"event_ts\":\"%s\"%s}",
				 producer.seq_start + i, mc->id,
				 countries[choose_country(mc, i)], methods[choose_method(i)],
				 status_names[choose_status(merchant_no, clock_s, i)],
				 cents / 100, (int) (cents % 100), event_ts_out,
				 late ? ",\"late\":true" : "");
	return n;
}

/* ---------------------------------------------------------------------
 * Main loop
 * --------------------------------------------------------------------- */

/* ts as a JSON string, or null for an empty one (no message sent). */
static void
format_json_ts_or_null(char *buf, size_t size, const char *ts)
{
	if (ts[0] == '\0')
		snprintf(buf, size, "null");
	else
		snprintf(buf, size, "\"%s\"", ts);
}

static void
print_report(int64_t sent, int64_t late, double seconds,
			 const char *first_event_ts, const char *last_event_ts)
{
	char		first_json[48],
				last_json[48];
	char		more_fields[160];

	if (!producer.quiet)
	{
		char		own_counts[64];

		snprintf(own_counts, sizeof(own_counts), "%" PRId64 " late", late);
		print_summary(sent, own_counts, seconds);
		if (sent > 0)
			fprintf(stderr, "%s: event_ts from %s to %s\n", tool_name,
					first_event_ts, last_event_ts);
		print_first_delivery_error(sent);
	}

	format_json_ts_or_null(first_json, sizeof(first_json), first_event_ts);
	format_json_ts_or_null(last_json, sizeof(last_json), last_event_ts);
	snprintf(more_fields, sizeof(more_fields),
			 ", \"first_event_ts\": %s, \"last_event_ts\": %s",
			 first_json, last_json);
	print_report_line(sent, "late", late, seconds, more_fields);
}

int
main(int argc, char **argv)
{
	rd_kafka_t *rk;
	rd_kafka_topic_t *rkt;
	Pacing		pacing;
	double		now;
	char		payload[MAX_MESSAGE_LEN];
	char		event_ts[40];
	char		first_event_ts[40] = "",
				last_event_ts[40] = "";
	int64_t		sent = 0,
				late_sent = 0;
	double		seconds;

	parse_options(argc, argv);
	install_stop_signal_handlers();
	init_merchants();
	open_producer(&rk, &rkt);
	start_pacing(&pacing);

	for (int64_t i = 0; wait_until_due(&pacing, i, &now); i++)
	{
		int			merchant_no;
		int64_t		clock_ms;
		double		clock_s;
		bool		late;
		int			len;

		if (opts.simulated_clock)
		{
			clock_ms = simulated_clock_ms(i);
			clock_s = (clock_ms - opts.clock_start_ms) / 1000.0;
		}
		else
		{
			clock_ms = wall_clock_ms();
			clock_s = (clock_ms - pacing.start_wall_ms) / 1000.0;
		}

		merchant_no = 1 + pick_weighted(merchant_cumulative, opts.merchants,
										message_uniform(PURPOSE_MERCHANT, i));
		late = message_in_share(i, opts.late_share);
		len = render_payment(payload, sizeof(payload), i,
							 &merchants[merchant_no - 1], merchant_no,
							 clock_ms, clock_s, late,
							 event_ts, sizeof(event_ts));
		if (!produce_message(rk, rkt, merchants[merchant_no - 1].id, payload, len,
							 0))
			break;
		if (sent++ == 0)
			memcpy(first_event_ts, event_ts, sizeof(event_ts));
		memcpy(last_event_ts, event_ts, sizeof(event_ts));
		if (late)
			late_sent++;
		rd_kafka_poll(rk, 0);	/* serve delivery reports */
	}

	wait_for_deliveries(rk);
	seconds = monotonic_seconds() - pacing.start;
	print_report(sent, late_sent, seconds, first_event_ts, last_event_ts);

	close_producer(rk, rkt);
	free(merchants);
	free(merchant_cumulative);
	return stats.delivered == sent ? 0 : 1;
}

/*
 * flight_sim.c
 *      Flight position simulator: a Kafka producer for the raw-flights topic
 *      of the reference enrich and zone congestion flows.
 *
 *   flight_sim --bootstrap ADDR --topic T [--aircraft N] [--rate EPS]
 *              [--count N | --duration SECONDS] [--seed S]
 *              [--malformed SHARE] [--malformed-kinds LIST] [--emergency SHARE]
 *              [--time-scale X] [--seq-start N] [--linger-ms MS]
 *              [--message-timeout-ms MS] [-X PROP=VALUE]... [--quiet]
 *
 * N aircraft fly great-circle routes between real airports (airports.h):
 * climb, cruise, descend on a 3 NM per 1000 ft profile, land, turn around and
 * leave for a new destination.  They report in round robin, one Kafka message
 * per position report, keyed by icao24, as a JSON object:
 *
 *   {"seq":0,"icao24":"4ca2b1","callsign":"BAW123","lat":51.47012,
 *    "lon":-0.45533,"baro_alt":35000,"vert_rate":0,"squawk":"4613",
 *    "velocity":452.0,"heading":287.4,"poller_ts":"2026-11-29T08:26:45.123Z"}
 *
 * seq is --seq-start plus the message's index in this run, so a consumer can
 * prove it saw every message exactly once; it comes first so that even a
 * truncated message keeps it.  poller_ts is the simulated observation time:
 * the start time plus the elapsed wall-clock time times --time-scale.  Aircraft
 * advance by the simulated time since their previous report.  The message's
 * Kafka timestamp (CreateTime) is the wall-clock time of the observation on
 * the run's own clock (the start time plus the elapsed monotonic time), not
 * the moment librdkafka takes the message: at time scale 1 it is poller_ts
 * exactly, however long the run is descheduled or waits on a full queue
 * between the two (test 001).
 *
 * Everything random is drawn from --seed: the fleet (icao24, callsign,
 * squawk, routes, starting points) from per-aircraft streams, and the choice
 * of emergency squawks and malformed messages from a hash of the message
 * index, so the same seed gives the same fleet and the same message kinds
 * however fast the run goes.  Message i is malformed iff
 * floor((i+1)*share) > floor(i*share), so N messages hold exactly
 * floor(N*share) malformed ones, of the kinds in --malformed-kinds in turn.
 *
 * Pacing follows a schedule (message i is due at start + i/rate, by
 * CLOCK_MONOTONIC), not one-second bursts.  Delivery reports count what the
 * broker acknowledged, per partition.  At the end a human summary goes to
 * stderr and exactly one JSON line to stdout:
 *
 *   {"sent":N,"delivered":N,"failed":N,"malformed":M,
 *    "partitions":{"0":n0,...},"seconds":S,"rate":R}
 *
 * The exit status is 0 only if every message sent was delivered.  SIGINT and
 * SIGTERM stop the run early but still flush and print the summary.
 */
#define _GNU_SOURCE

#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librdkafka/rdkafka.h>

#include "producer.h"

#include "airports.h"

const char tool_name[] = "flight_sim";
const int fatal_exit_status = 2;

#define EARTH_RADIUS_NM		3440.065
#define DEG2RAD(d)			((d) * M_PI / 180.0)
#define RAD2DEG(r)			((r) * 180.0 / M_PI)

#define FEET_PER_NM_DESCENT (1000.0 / 3.0)	/* 3 NM per 1000 ft to lose */
#define MIN_ROUTE_NM		150.0
#define MAX_ROUTE_NM		5000.0
#define AVG_CLIMB_KT		230.0	/* mean ground speed while climbing */
#define APPROACH_FT			3000.0	/* below this, final approach speeds */
#define MAX_SIM_STEP_S		10.0	/* integrate long gaps in steps */
#define MAX_MESSAGE_LEN		512

/* ---------------------------------------------------------------------
 * Options
 * --------------------------------------------------------------------- */

typedef enum MalformedKind
{
	MALFORMED_NONE = 0,
	MALFORMED_TRUNCATED,		/* JSON cut in the middle: does not parse */
	MALFORMED_TYPE,				/* "lat":"north" or "baro_alt":"high" */
	MALFORMED_MISSING			/* no "lat", or no "icao24" */
} MalformedKind;

#define MAX_MALFORMED_KINDS 16

/* The fleet and the messages; the common options are in producer.h. */
typedef struct SimOptions
{
	int			aircraft;
	double		malformed_share;
	MalformedKind malformed_kinds[MAX_MALFORMED_KINDS];
	int			n_malformed_kinds;
	double		emergency_share;
	double		time_scale;
} SimOptions;

static SimOptions opts;

static void
usage(FILE *out)
{
	fprintf(out,
			"Usage: flight_sim --bootstrap ADDR --topic TOPIC [OPTION]...\n"
			"Produce simulated aircraft positions (JSON, key = icao24) to Kafka.\n\n"
			"  --aircraft N              fleet size (default 200)\n"
			PRODUCER_RUN_USAGE
			"  --malformed SHARE         share of malformed messages, 0..1 (default 0)\n"
			"  --malformed-kinds LIST    of truncated,type,missing (default all three)\n"
			"  --emergency SHARE         share of emergency squawks (default 0.01)\n"
			"  --time-scale X            simulated seconds per wall second (default 1)\n"
			PRODUCER_CLIENT_USAGE);
}

static void
parse_malformed_kinds(const char *list)
{
	char	   *copy = strdup(list);
	char	   *save = NULL;

	opts.n_malformed_kinds = 0;
	for (char *w = strtok_r(copy, ",", &save); w != NULL;
		 w = strtok_r(NULL, ",", &save))
	{
		MalformedKind kind;

		if (strcmp(w, "truncated") == 0)
			kind = MALFORMED_TRUNCATED;
		else if (strcmp(w, "type") == 0)
			kind = MALFORMED_TYPE;
		else if (strcmp(w, "missing") == 0)
			kind = MALFORMED_MISSING;
		else
			fatal("unknown malformed kind \"%s\" (use truncated, type, missing)", w);
		if (opts.n_malformed_kinds == MAX_MALFORMED_KINDS)
			fatal("too many malformed kinds");
		opts.malformed_kinds[opts.n_malformed_kinds++] = kind;
	}
	if (opts.n_malformed_kinds == 0)
		fatal("--malformed-kinds is empty");
	free(copy);
}

static void
parse_options(int argc, char **argv)
{
	enum
	{
		OPT_AIRCRAFT = OPT_FIRST_OWN, OPT_MALFORMED, OPT_MALFORMED_KINDS,
		OPT_EMERGENCY, OPT_TIME_SCALE
	};
	static const struct option long_options[] = {
		PRODUCER_TARGET_OPTIONS,
		{"aircraft", required_argument, NULL, OPT_AIRCRAFT},
		PRODUCER_RUN_OPTIONS,
		{"malformed", required_argument, NULL, OPT_MALFORMED},
		{"malformed-kinds", required_argument, NULL, OPT_MALFORMED_KINDS},
		{"emergency", required_argument, NULL, OPT_EMERGENCY},
		{"time-scale", required_argument, NULL, OPT_TIME_SCALE},
		PRODUCER_CLIENT_OPTIONS,
		{NULL, 0, NULL, 0}
	};
	int			c;

	set_producer_defaults();
	opts.aircraft = 200;
	opts.emergency_share = 0.01;
	opts.time_scale = 1;
	parse_malformed_kinds("truncated,type,missing");

	while ((c = getopt_long(argc, argv, "X:h", long_options, NULL)) != -1)
	{
		switch (c)
		{
			case OPT_AIRCRAFT:
				opts.aircraft = (int) parse_int_arg("aircraft", optarg, 1, 1000000);
				break;
			case OPT_MALFORMED:
				opts.malformed_share = parse_double_arg("malformed", optarg, 0, 1);
				break;
			case OPT_MALFORMED_KINDS:
				parse_malformed_kinds(optarg);
				break;
			case OPT_EMERGENCY:
				opts.emergency_share = parse_double_arg("emergency", optarg, 0, 1);
				break;
			case OPT_TIME_SCALE:
				opts.time_scale = parse_double_arg("time-scale", optarg, 0, 1e6);
				break;
			default:
				parse_producer_option(c, optarg, usage);
				break;
		}
	}
	finish_producer_options(argc, argv, usage);
}

/* ---------------------------------------------------------------------
 * Random numbers: hashes of a message index (the streams are in producer.h)
 * --------------------------------------------------------------------- */

/*
 * A value in [0, 1) that depends only on the seed, a purpose and a message
 * index, so per-message choices do not depend on timing.
 */
static double
message_uniform(uint64_t purpose, int64_t index)
{
	uint64_t	state = producer.seed * UINT64_C(0x2545F4914F6CDD1D) ^
		(purpose << 56) ^ (uint64_t) index;

	return rng_uniform(&state);
}

/* ---------------------------------------------------------------------
 * Great-circle geometry (degrees and nautical miles at the interface)
 * --------------------------------------------------------------------- */

static double
gc_distance_nm(double lat1, double lon1, double lat2, double lon2)
{
	double		p1 = DEG2RAD(lat1),
				p2 = DEG2RAD(lat2);
	double		dp = p2 - p1,
				dl = DEG2RAD(lon2 - lon1);
	double		a = sin(dp / 2) * sin(dp / 2) +
		cos(p1) * cos(p2) * sin(dl / 2) * sin(dl / 2);

	a = fmin(1.0, fmax(0.0, a));	/* rounding must not make a NaN */
	return 2 * EARTH_RADIUS_NM * atan2(sqrt(a), sqrt(1 - a));
}

static double
normalize_degrees(double deg)
{
	deg = fmod(deg, 360.0);
	if (deg < 0)
		deg += 360.0;
	return deg;
}

/* Initial great-circle course from point 1 to point 2, in [0, 360). */
static double
gc_course_deg(double lat1, double lon1, double lat2, double lon2)
{
	double		p1 = DEG2RAD(lat1),
				p2 = DEG2RAD(lat2),
				dl = DEG2RAD(lon2 - lon1);
	double		y = sin(dl) * cos(p2);
	double		x = cos(p1) * sin(p2) - sin(p1) * cos(p2) * cos(dl);

	return normalize_degrees(RAD2DEG(atan2(y, x)));
}

/* The point dist_nm along the great circle leaving (lat, lon) on course. */
static void
gc_advance(double lat, double lon, double course_deg, double dist_nm,
		   double *lat_out, double *lon_out)
{
	double		p1 = DEG2RAD(lat),
				l1 = DEG2RAD(lon),
				th = DEG2RAD(course_deg),
				d = dist_nm / EARTH_RADIUS_NM;
	double		p2 = asin(fmin(1.0, fmax(-1.0, sin(p1) * cos(d) +
										 cos(p1) * sin(d) * cos(th))));
	double		l2 = l1 + atan2(sin(th) * sin(d) * cos(p1),
								cos(d) - sin(p1) * sin(p2));

	*lat_out = RAD2DEG(p2);
	*lon_out = normalize_degrees(RAD2DEG(l2) + 180.0) - 180.0;
}

/* The point at fraction f of the great circle from point 1 to point 2. */
static void
gc_interpolate(double lat1, double lon1, double lat2, double lon2, double f,
			   double *lat_out, double *lon_out)
{
	double		dist = gc_distance_nm(lat1, lon1, lat2, lon2);

	gc_advance(lat1, lon1, gc_course_deg(lat1, lon1, lat2, lon2), dist * f,
			   lat_out, lon_out);
}

/* ---------------------------------------------------------------------
 * The fleet
 * --------------------------------------------------------------------- */

typedef enum FlightPhase
{
	PHASE_GROUND,				/* turnaround at origin */
	PHASE_CLIMB,
	PHASE_CRUISE,
	PHASE_DESCENT
} FlightPhase;

typedef struct Aircraft
{
	char		icao24[7];
	char		callsign[9];
	char		squawk[5];		/* stable, never an emergency code */
	uint64_t	rng;			/* this aircraft's own random stream */

	/* current leg */
	int			origin;
	int			dest;
	double		cruise_alt;		/* ft */
	double		cruise_speed;	/* kt */
	double		climb_rate;		/* ft/min */

	/* state */
	FlightPhase phase;
	double		lat;
	double		lon;
	double		alt;			/* ft */
	double		vert_rate;		/* ft/min */
	double		speed;			/* kt, ground speed */
	double		heading;		/* deg */
	double		ground_left;	/* s of turnaround left */
	double		last_report;	/* simulated s since the run's start */
} Aircraft;

static Aircraft *fleet;

/* Choose a destination at a sensible distance from the origin. */
static int
choose_destination(Aircraft *a, int origin)
{
	for (int attempt = 0; attempt < 100; attempt++)
	{
		int			d = rng_int(&a->rng, N_AIRPORTS);
		double		dist;

		if (d == origin)
			continue;
		dist = gc_distance_nm(airports[origin].lat, airports[origin].lon,
							  airports[d].lat, airports[d].lon);
		if (dist >= MIN_ROUTE_NM && dist <= MAX_ROUTE_NM)
			return d;
	}
	return (origin + 1) % N_AIRPORTS;
}

/*
 * Plan a leg from origin: destination, climb rate, cruise speed and level.
 * The level is FL300-FL410, capped for short hops at what the route allows
 * with the climb and a 3 NM per 1000 ft descent (about FL270 for the
 * shortest routes, as real short hops do).
 */
static void
plan_leg(Aircraft *a, int origin)
{
	double		dist,
				max_alt;

	a->origin = origin;
	a->dest = choose_destination(a, origin);
	a->climb_rate = rng_range(&a->rng, 1500, 3000);
	a->cruise_speed = rng_range(&a->rng, 420, 490);
	a->cruise_alt = 1000.0 * (30 + rng_int(&a->rng, 12));

	dist = gc_distance_nm(airports[origin].lat, airports[origin].lon,
						  airports[a->dest].lat, airports[a->dest].lon);
	max_alt = dist / (AVG_CLIMB_KT / (a->climb_rate * 60.0) +
					  1.0 / FEET_PER_NM_DESCENT);
	max_alt = floor(max_alt / 1000.0) * 1000.0;
	if (a->cruise_alt > max_alt)
		a->cruise_alt = max_alt;
}

/* Climb speed grows from 160 kt at the runway to 300 kt at the cruise level. */
static double
climb_speed(const Aircraft *a)
{
	return 160.0 + 140.0 * fmin(1.0, a->alt / a->cruise_alt);
}

/*
 * Descent speed falls from the cruise speed (at most 450 kt) to 270 kt at
 * 3000 ft, then to 160 kt at the runway.  Following the 3 NM per 1000 ft
 * path, the vertical rate is speed * 1000/3 ft per NM, i.e. -1500..-2500
 * ft/min above 3000 ft.
 */
static double
descent_speed(const Aircraft *a)
{
	double		top = fmin(a->cruise_speed, 450.0);

	if (a->alt <= APPROACH_FT)
		return 160.0 + 110.0 * a->alt / APPROACH_FT;
	return 270.0 + (top - 270.0) *
		fmin(1.0, (a->alt - APPROACH_FT) / (a->cruise_alt - APPROACH_FT));
}

static void
start_turnaround(Aircraft *a, double seconds)
{
	a->phase = PHASE_GROUND;
	a->lat = airports[a->origin].lat;
	a->lon = airports[a->origin].lon;
	a->alt = 0;
	a->vert_rate = 0;
	a->speed = 0;
	a->ground_left = seconds;
}

/*
 * Put a new aircraft somewhere on a random route, with a state consistent
 * with that point: on the climb profile near the origin, the descent
 * profile near the destination, cruising in between; a few are on the ground.
 */
static void
place_aircraft(Aircraft *a)
{
	const Airport *o,
			   *d;
	double		f,
				dist,
				flown,
				to_go,
				climb_alt,
				descent_alt;

	plan_leg(a, rng_int(&a->rng, N_AIRPORTS));
	if (rng_uniform(&a->rng) < 0.05)
	{
		start_turnaround(a, rng_range(&a->rng, 0, 30 * 60));
		a->heading = rng_range(&a->rng, 0, 359.9);
		return;
	}

	o = &airports[a->origin];
	d = &airports[a->dest];
	f = rng_range(&a->rng, 0.01, 0.99);
	dist = gc_distance_nm(o->lat, o->lon, d->lat, d->lon);
	flown = f * dist;
	to_go = dist - flown;
	gc_interpolate(o->lat, o->lon, d->lat, d->lon, f, &a->lat, &a->lon);

	climb_alt = flown / AVG_CLIMB_KT * 60.0 * a->climb_rate;
	descent_alt = to_go * FEET_PER_NM_DESCENT;
	if (descent_alt < a->cruise_alt && descent_alt <= climb_alt)
	{
		a->phase = PHASE_DESCENT;
		a->alt = descent_alt;
		a->speed = descent_speed(a);
		a->vert_rate = -a->speed / 60.0 * FEET_PER_NM_DESCENT;
	}
	else if (climb_alt < a->cruise_alt)
	{
		a->phase = PHASE_CLIMB;
		a->alt = climb_alt;
		a->speed = climb_speed(a);
		a->vert_rate = a->climb_rate;
	}
	else
	{
		a->phase = PHASE_CRUISE;
		a->alt = a->cruise_alt;
		a->speed = a->cruise_speed;
		a->vert_rate = 0;
	}
	a->heading = gc_course_deg(a->lat, a->lon, d->lat, d->lon);
}

static void
init_fleet(void)
{
	uint64_t	fleet_rng = producer.seed ^ UINT64_C(0x5DB1C0FFEE);
	uint8_t    *used = calloc((1 << 24) / 8, 1);	/* one bit per 24-bit address */

	fleet = calloc(opts.aircraft, sizeof(Aircraft));
	if (fleet == NULL || used == NULL)
		fatal("out of memory");

	for (int i = 0; i < opts.aircraft; i++)
	{
		Aircraft   *a = &fleet[i];
		bool		unique;
		unsigned	code;

		/* icao24: 24-bit address, unique within the fleet */
		do
		{
			unsigned	addr = (unsigned) (splitmix64_next(&fleet_rng) & 0xFFFFFF);

			unique = (used[addr >> 3] & (1 << (addr & 7))) == 0;
			used[addr >> 3] |= (uint8_t) (1 << (addr & 7));
			snprintf(a->icao24, sizeof(a->icao24), "%06x", addr);
		} while (!unique);

		snprintf(a->callsign, sizeof(a->callsign), "%s%d",
				 airline_prefixes[splitmix64_next(&fleet_rng) % N_AIRLINE_PREFIXES],
				 1 + (int) (splitmix64_next(&fleet_rng) % 9999));

		/* four octal digits, never 7500, 7600 or 7700 */
		do
			code = (unsigned) (splitmix64_next(&fleet_rng) % 4096);
		while (code == 07500 || code == 07600 || code == 07700);
		snprintf(a->squawk, sizeof(a->squawk), "%04o", code);

		a->rng = splitmix64_next(&fleet_rng);
		place_aircraft(a);
	}
	free(used);
}

/*
 * Advance one aircraft by dt simulated seconds.  Long gaps are integrated in
 * steps so no phase change is skipped.
 */
static void
advance_aircraft(Aircraft *a, double dt)
{
	while (dt > 0)
	{
		double		h = fmin(dt, MAX_SIM_STEP_S);
		const Airport *d = &airports[a->dest];
		double		to_go,
					step_nm;

		dt -= h;

		if (a->phase == PHASE_GROUND)
		{
			a->ground_left -= h;
			if (a->ground_left > 0)
				continue;
			/* depart on a new leg */
			plan_leg(a, a->origin);
			a->phase = PHASE_CLIMB;
			a->heading = gc_course_deg(a->lat, a->lon, airports[a->dest].lat,
									   airports[a->dest].lon);
			continue;
		}

		to_go = gc_distance_nm(a->lat, a->lon, d->lat, d->lon);
		if (a->phase != PHASE_DESCENT &&
			to_go * FEET_PER_NM_DESCENT <= a->alt)
			a->phase = PHASE_DESCENT;	/* top of descent */

		switch (a->phase)
		{
			case PHASE_CLIMB:
				a->vert_rate = a->climb_rate;
				a->alt += a->climb_rate * h / 60.0;
				if (a->alt >= a->cruise_alt)
				{
					a->alt = a->cruise_alt;
					a->phase = PHASE_CRUISE;
				}
				a->speed = a->phase == PHASE_CRUISE ? a->cruise_speed : climb_speed(a);
				break;
			case PHASE_CRUISE:
				a->vert_rate = 0;
				a->speed = a->cruise_speed;
				break;
			case PHASE_DESCENT:
			default:
				a->speed = descent_speed(a);
				a->vert_rate = -a->speed / 60.0 * FEET_PER_NM_DESCENT;
				break;
		}

		step_nm = a->speed * h / 3600.0;
		if (step_nm >= to_go)
		{
			/* landed: turn around for 15 to 45 minutes */
			a->origin = a->dest;
			start_turnaround(a, rng_range(&a->rng, 15 * 60, 45 * 60));
			continue;
		}
		a->heading = gc_course_deg(a->lat, a->lon, d->lat, d->lon);
		gc_advance(a->lat, a->lon, a->heading, step_nm, &a->lat, &a->lon);
		if (a->phase == PHASE_DESCENT)
			a->alt = fmin(a->alt, (to_go - step_nm) * FEET_PER_NM_DESCENT);
	}
	if (a->phase != PHASE_GROUND)
		a->heading = gc_course_deg(a->lat, a->lon, airports[a->dest].lat,
								   airports[a->dest].lon);
}

/* ---------------------------------------------------------------------
 * Messages
 * --------------------------------------------------------------------- */

/* Round to one decimal and keep the result below 360.0. */
static double
heading_for_report(double heading)
{
	double		h = round(heading * 10.0) / 10.0;

	return h >= 360.0 ? h - 360.0 : h;
}

/*
 * Render aircraft a's position report as message seq.  kind picks a
 * malformation; variant (0 or 1) picks which field it affects.  Returns the
 * length of the message.
 */
static int
render_report(char *buf, size_t size, const Aircraft *a, int64_t seq,
			  const char *squawk, int64_t poller_ms,
			  MalformedKind kind, int variant)
{
	char		ts[40];
	int			n;
	double		vert_rate = a->vert_rate;
	double		velocity = a->speed;

	/*
	 * ADS-B-like reports: 25 ft altitude and 64 ft/min vertical rate steps,
	 * small noise on the ground speed, level flight wobbling by one step.
	 */
	if (a->phase == PHASE_CRUISE)
		vert_rate = 64.0 * ((int) (message_uniform(3, seq) * 3) - 1);
	vert_rate = 64.0 * round(vert_rate / 64.0);
	if (a->phase != PHASE_GROUND)
		velocity += 4.0 * message_uniform(4, seq) - 2.0;

	format_iso8601_ms(poller_ms, ts, sizeof(ts));

	n = snprintf(buf, size, "{\"seq\":%" PRId64, seq);
	if (!(kind == MALFORMED_MISSING && variant == 1))
		n += snprintf(buf + n, size - n, ",\"icao24\":\"%s\"", a->icao24);
	n += snprintf(buf + n, size - n, ",\"callsign\":\"%s\"", a->callsign);
	if (kind == MALFORMED_TYPE && variant == 0)
		n += snprintf(buf + n, size - n, ",\"lat\":\"north\"");
	else if (!(kind == MALFORMED_MISSING && variant == 0))
		n += snprintf(buf + n, size - n, ",\"lat\":%.5f", a->lat);
	n += snprintf(buf + n, size - n, ",\"lon\":%.5f", a->lon);
	if (kind == MALFORMED_TYPE && variant == 1)
		n += snprintf(buf + n, size - n, ",\"baro_alt\":\"high\"");
	else
		n += snprintf(buf + n, size - n, ",\"baro_alt\":%d",
					  25 * (int) round(a->alt / 25.0));
	n += snprintf(buf + n, size - n,
				  ",\"vert_rate\":%d,\"squawk\":\"%s\",\"velocity\":%.1f"
				  ",\"heading\":%.1f,\"poller_ts\":\"%s\"}",
				  (int) vert_rate, squawk, fmax(0.0, velocity),
				  heading_for_report(a->heading), ts);

	/* cut in the middle: a strict prefix of an object never parses */
	if (kind == MALFORMED_TRUNCATED)
	{
		n /= 2;
		buf[n] = '\0';
	}
	return n;
}

/* ---------------------------------------------------------------------
 * Main loop
 * --------------------------------------------------------------------- */

static void
print_report(int64_t sent, int64_t malformed, int64_t emergencies,
			 double seconds)
{
	if (!producer.quiet)
	{
		char		own_counts[128];

		snprintf(own_counts, sizeof(own_counts),
				 "%" PRId64 " malformed, %" PRId64 " emergency squawks",
				 malformed, emergencies);
		print_summary(sent, own_counts, seconds);
		print_first_delivery_error(sent);
	}
	print_report_line(sent, "malformed", malformed, seconds, "");
}

int
main(int argc, char **argv)
{
	rd_kafka_t *rk;
	rd_kafka_topic_t *rkt;
	Pacing		pacing;
	double		now;
	char		payload[MAX_MESSAGE_LEN];
	int64_t		sent = 0,
				malformed = 0,
				emergencies = 0;
	double		seconds;

	parse_options(argc, argv);
	install_stop_signal_handlers();
	init_fleet();
	open_producer(&rk, &rkt);
	start_pacing(&pacing);

	for (int64_t i = 0; wait_until_due(&pacing, i, &now); i++)
	{
		Aircraft   *a = &fleet[i % opts.aircraft];
		double		sim_now = (now - pacing.start) * opts.time_scale;
		int64_t		observed_wall_ms = pacing.start_wall_ms +
			(int64_t) llround((now - pacing.start) * 1000.0);
		MalformedKind kind = MALFORMED_NONE;
		int			variant = 0;
		const char *squawk;
		int			len;

		advance_aircraft(a, sim_now - a->last_report);
		a->last_report = sim_now;

		squawk = a->squawk;
		if (message_uniform(1, i) < opts.emergency_share)
		{
			static const char *const codes[] = {"7500", "7600", "7700"};

			squawk = codes[(int) (message_uniform(2, i) * 3)];
			emergencies++;
		}
		if (message_in_share(i, opts.malformed_share))
		{
			kind = opts.malformed_kinds[malformed % opts.n_malformed_kinds];
			variant = (int) ((malformed / opts.n_malformed_kinds) % 2);
			malformed++;
		}

		len = render_report(payload, sizeof(payload), a, producer.seq_start + i,
							squawk, pacing.start_wall_ms +
							(int64_t) llround(sim_now * 1000.0), kind, variant);
		if (!produce_message(rk, rkt, a->icao24, payload, len,
							 observed_wall_ms))
		{
			if (kind != MALFORMED_NONE)
				malformed--;
			break;
		}
		sent++;
		rd_kafka_poll(rk, 0);	/* serve delivery reports */
	}

	wait_for_deliveries(rk);
	seconds = monotonic_seconds() - pacing.start;
	print_report(sent, malformed, emergencies, seconds);

	close_producer(rk, rkt);
	free(fleet);
	return stats.delivered == sent ? 0 : 1;
}

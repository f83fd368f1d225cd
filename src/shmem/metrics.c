/*
 * metrics.c
 *		Latencies of a flow's messages and their percentiles.
 *
 * For every message the worker records three latencies, like Spark's
 * Real-Time Mode progress: processingLatencyMs (read from Kafka ->
 * committed), sourceQueuingLatencyMs (Kafka timestamp -> read) and
 * e2eLatencyMs (Kafka timestamp -> committed).  Each goes into a histogram
 * of the reporting interval: 32 buckets per power of two from 1/1024 ms
 * up, so a bucket is at most 1/32 (3.1 %) of its value wide, and the
 * exact smallest and largest values beside.  Memory is fixed however high
 * the rate, every message counts, and histograms add up: the workers of a
 * flow each publish theirs, and sdp_flow_progress() reads the flow's
 * percentiles from their sum (sdp_histogram_merge).
 */
#include "shmem/metrics.h"

#include <math.h>

/* The histogram's first bucket ends at 2^SDP_HISTOGRAM_MIN_EXP ms. */
#define SDP_HISTOGRAM_MIN_EXP	(-10)

void
sdp_metrics_init(SdpMetrics *m)
{
	memset(m, 0, sizeof(*m));
	m->interval_start = GetCurrentTimestamp();
}

/* The bucket of a value in ms: octave by its binary exponent, then 32 linear steps. */
static inline int
histogram_bucket(double ms)
{
	int			exp;
	double		mant;
	int			b;

	if (!(ms > 0))				/* zero, negative (clocks), NaN */
		return 0;
	mant = frexp(ms, &exp);		/* ms = mant * 2^exp, mant in [0.5, 1) */
	exp -= SDP_HISTOGRAM_MIN_EXP + 1;
	if (exp < 0)
		return 0;
	b = exp * SDP_HISTOGRAM_STEPS + (int) ((mant - 0.5) * 2 * SDP_HISTOGRAM_STEPS);
	return Min(b, SDP_HISTOGRAM_BUCKETS - 1);
}

/* The middle of a bucket, in ms. */
static double
histogram_value(int b)
{
	int			octave = b / SDP_HISTOGRAM_STEPS;
	int			step = b % SDP_HISTOGRAM_STEPS;

	return ldexp(0.5 + (step + 0.5) / (2.0 * SDP_HISTOGRAM_STEPS), octave + SDP_HISTOGRAM_MIN_EXP + 1);
}

static inline void
histogram_add(SdpLatencyHistogram *h, double ms)
{
	if (h->count == 0 || ms < h->min)
		h->min = ms;
	if (h->count == 0 || ms > h->max)
		h->max = ms;
	h->count++;
	h->buckets[histogram_bucket(ms)]++;
}

/* Add histogram src into dst. */
void
sdp_histogram_merge(SdpLatencyHistogram *dst, const SdpLatencyHistogram *src)
{
	if (src->count == 0)
		return;
	if (dst->count == 0 || src->min < dst->min)
		dst->min = src->min;
	if (dst->count == 0 || src->max > dst->max)
		dst->max = src->max;
	dst->count += src->count;
	for (int b = 0; b < SDP_HISTOGRAM_BUCKETS; b++)
		dst->buckets[b] += src->buckets[b];
}

/*
 * Nearest-rank percentiles of a histogram: the middle of the bucket that
 * holds the rank, within the exact smallest and largest values; P0 is the
 * smallest.
 */
void
sdp_histogram_percentiles(const SdpLatencyHistogram *h, SdpPercentiles *out)
{
	static const double ps[4] = {50.0, 90.0, 95.0, 99.0};
	double	   *outs[4] = {&out->p50, &out->p90, &out->p95, &out->p99};
	int64		seen = 0;
	int			b = 0;

	memset(out, 0, sizeof(*out));
	out->samples = h->count;
	if (h->count == 0)
		return;
	out->p0 = h->min;
	for (int i = 0; i < 4; i++)
	{
		int64		rank = Max(1, (int64) ceil(ps[i] / 100.0 * h->count));

		while (seen + h->buckets[b] < rank && b < SDP_HISTOGRAM_BUCKETS - 1)
			seen += h->buckets[b++];
		*outs[i] = Max(h->min, Min(h->max, histogram_value(b)));
	}
}

void
sdp_metrics_record(SdpMetrics *m, double processing_ms, double queuing_ms, double e2e_ms)
{
	histogram_add(&m->processing, processing_ms);
	histogram_add(&m->queuing, queuing_ms);
	histogram_add(&m->e2e, e2e_ms);
}

void
sdp_metrics_batch(SdpMetrics *m, int64 input_rows, int64 output_rows, double batch_ms)
{
	m->batches++;
	m->input_rows += input_rows;
	m->output_rows += output_rows;
	m->max_batch_rows = Max(m->max_batch_rows, input_rows);
	m->batch_ms_total += batch_ms;
}

/* Close the interval: publish its figures in *out and start a new one. */
void
sdp_metrics_report(SdpMetrics *m, TimestampTz now, SdpProgress *out)
{
	double		secs = (double) (now - m->interval_start) / 1000000.0;

	out->report_id = ++m->report_id;
	out->timestamp = now;
	out->interval_s = secs;
	out->batches = m->batches;
	out->input_rows = m->input_rows;
	out->output_rows = m->output_rows;
	out->batch_ms_total = m->batch_ms_total;
	out->max_batch_rows = m->max_batch_rows;
	out->input_rows_per_s = secs > 0 ? m->input_rows / secs : 0;
	out->processed_rows_per_s = m->batch_ms_total > 0 ? m->input_rows / (m->batch_ms_total / 1000.0) : 0;
	out->processing_hist = m->processing;
	out->queuing_hist = m->queuing;
	out->e2e_hist = m->e2e;
	sdp_progress_finish(out);

	m->interval_start = now;
	memset(&m->processing, 0, sizeof(m->processing));
	memset(&m->queuing, 0, sizeof(m->queuing));
	memset(&m->e2e, 0, sizeof(m->e2e));
	m->batches = 0;
	m->input_rows = 0;
	m->output_rows = 0;
	m->max_batch_rows = 0;
	m->batch_ms_total = 0;
}

/* A report's average batch time and percentiles, from its sums and histograms. */
void
sdp_progress_finish(SdpProgress *p)
{
	p->batch_ms_avg = p->batches > 0 ? p->batch_ms_total / p->batches : 0;
	sdp_histogram_percentiles(&p->processing_hist, &p->processing);
	sdp_histogram_percentiles(&p->queuing_hist, &p->queuing);
	sdp_histogram_percentiles(&p->e2e_hist, &p->e2e);
}

/*
 * Measurement probes (metrics.h): compiled in only by the build flags
 * below, for the benchmarks; the code they time calls the SDP_PROBE_ and
 * SDP_BURST_ macros, which are nothing in any other build.
 */
#ifdef SDP_RELAY_TIMING
/*
 * -DSDP_RELAY_TIMING: the time of each phase of a sink flow's relay
 * (kafka/relay.c) and of the worker's rounds around it, logged every 5
 * seconds as count, mean, P50, P99 and max in microseconds.
 */
#define PROBE_SAMPLES 8192
static const char *const rt_names[SDP_PROBE_NPHASES] = {
	"outbox read", "WAL flush", "begin+produce", "acks", "commit_transaction", "delete",
	"rows/round", "consumption stopped", "relay calls", "batch",
};
static int64 rt_samples[SDP_PROBE_NPHASES][PROBE_SAMPLES];
static int	rt_n[SDP_PROBE_NPHASES];
static int64 rt_total[SDP_PROBE_NPHASES];
static TimestampTz rt_next_report;
TimestampTz sdp_probe_started[SDP_PROBE_NPHASES];

static int
rt_cmp(const void *a, const void *b)
{
	int64		x = *(const int64 *) a,
				y = *(const int64 *) b;

	return x < y ? -1 : x > y;
}

void
sdp_probe_note(int phase, int64 us)
{
	TimestampTz now = GetCurrentTimestamp();

	if (rt_n[phase] < PROBE_SAMPLES)
		rt_samples[phase][rt_n[phase]] = us;
	rt_n[phase]++;
	rt_total[phase] += us;
	if (rt_next_report == 0)
		rt_next_report = TimestampTzPlusMilliseconds(now, 5000);
	if (now < rt_next_report)
		return;
	rt_next_report = TimestampTzPlusMilliseconds(now, 5000);
	for (int i = 0; i < SDP_PROBE_NPHASES; i++)
	{
		int			n = Min(rt_n[i], PROBE_SAMPLES);

		if (n == 0)
			continue;
		qsort(rt_samples[i], n, sizeof(int64), rt_cmp);
		elog(LOG, "relay timing: %-20s n %6d mean %8.1f P50 %7lld P99 %7lld max %7lld total %9lld",
			 rt_names[i], rt_n[i], (double) rt_total[i] / rt_n[i],
			 (long long) rt_samples[i][(n * 50 + 99) / 100 - 1],
			 (long long) rt_samples[i][(n * 99 + 99) / 100 - 1],
			 (long long) rt_samples[i][n - 1], (long long) rt_total[i]);
		rt_n[i] = 0;
		rt_total[i] = 0;
	}
}
#endif

#ifdef SDP_BURST_TIMING
#include <sys/resource.h>
#include <time.h>

/*
 * -DSDP_BURST_TIMING (bench/window_burst.sh BURST_TIMING=1): for a stateful batch that emitted 1,000 rows or more,
 * log the wall time, the thread's CPU time, its time waiting for a CPU
 * (/proc/thread-self/schedstat) and its involuntary context switches, of
 * the operator stage (the rows, then the timers fired), of the write of
 * what it emitted, and of the rest up to the commit.
 */
typedef struct BurstSample
{
	double		wall_ms;
	double		cpu_ms;
	double		runq_ms;
	long		preempted;
} BurstSample;

static BurstSample burst_at[4];
int			sdp_burst_rows;

void
sdp_burst_mark(int i)
{
	BurstSample *s = &burst_at[i];
	struct timespec ts;
	struct rusage ru;
	unsigned long long run_ns = 0,
				wait_ns = 0;
	FILE	   *f;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	s->wall_ms = ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	s->cpu_ms = ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
	f = fopen("/proc/thread-self/schedstat", "r");
	if (f != NULL)
	{
		if (fscanf(f, "%llu %llu", &run_ns, &wait_ns) != 2)
			wait_ns = 0;
		fclose(f);
	}
	s->runq_ms = wait_ns / 1e6;
	getrusage(RUSAGE_THREAD, &ru);
	s->preempted = ru.ru_nivcsw;
}

void
sdp_burst_report(void)
{
	const char *const phase[] = {"operate", "write", "commit"};
	StringInfoData buf;

	if (sdp_burst_rows < 1000)
		return;
	sdp_burst_mark(3);
	initStringInfo(&buf);
	appendStringInfo(&buf, "sdp burst of %d rows:", sdp_burst_rows);
	for (int i = 0; i < 3; i++)
		appendStringInfo(&buf, " %s wall %.1f cpu %.1f runq %.1f preempted %ld;", phase[i],
						 burst_at[i + 1].wall_ms - burst_at[i].wall_ms,
						 burst_at[i + 1].cpu_ms - burst_at[i].cpu_ms,
						 burst_at[i + 1].runq_ms - burst_at[i].runq_ms,
						 burst_at[i + 1].preempted - burst_at[i].preempted);
	elog(LOG, "%s", buf.data);
	pfree(buf.data);
	sdp_burst_rows = 0;
}
#endif

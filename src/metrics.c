/*
 * metrics.c
 *		Latency samples of a flow and their percentiles.
 *
 * For every message the worker records three latencies, like Spark's
 * Real-Time Mode progress: processingLatencyMs (read from Kafka ->
 * committed), sourceQueuingLatencyMs (Kafka timestamp -> read) and
 * e2eLatencyMs (Kafka timestamp -> committed).  Each reporting interval
 * keeps at most 'capacity' samples (a uniform reservoir when more arrive),
 * so memory is fixed however high the rate; at the end of the interval the
 * percentiles are computed by sorting and published in the flow's slot.
 */
#include "metrics.h"

#include <math.h>

#include "utils/memutils.h"
#include "utils/timestamp.h"

void
sdp_metrics_init(SdpMetrics *m, int capacity)
{
	memset(m, 0, sizeof(*m));
	m->capacity = capacity;
	m->processing = MemoryContextAlloc(TopMemoryContext, sizeof(float4) * capacity);
	m->queuing = MemoryContextAlloc(TopMemoryContext, sizeof(float4) * capacity);
	m->e2e = MemoryContextAlloc(TopMemoryContext, sizeof(float4) * capacity);
	m->scratch = MemoryContextAlloc(TopMemoryContext, sizeof(float4) * capacity);
	m->rng = 0x9E3779B97F4A7C15ULL;
	m->interval_start = GetCurrentTimestamp();
}

/* xorshift64*: cheap, and good enough to pick reservoir slots */
static uint64
next_random(SdpMetrics *m)
{
	m->rng ^= m->rng >> 12;
	m->rng ^= m->rng << 25;
	m->rng ^= m->rng >> 27;
	return m->rng * 0x2545F4914F6CDD1DULL;
}

void
sdp_metrics_record(SdpMetrics *m, double processing_ms, double queuing_ms, double e2e_ms)
{
	int64		slot;

	m->seen++;
	if (m->nsamples < m->capacity)
		slot = m->nsamples++;
	else
	{
		slot = (int64) (next_random(m) % (uint64) m->seen);
		if (slot >= m->capacity)
			return;
	}
	m->processing[slot] = (float4) processing_ms;
	m->queuing[slot] = (float4) queuing_ms;
	m->e2e[slot] = (float4) e2e_ms;
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

static int
float4_cmp(const void *a, const void *b)
{
	float4		x = *(const float4 *) a;
	float4		y = *(const float4 *) b;

	return (x > y) - (x < y);
}

/* Nearest-rank percentiles of the first n values of samples (sorted in scratch). */
static void
percentiles(const float4 *samples, float4 *scratch, int n, SdpPercentiles *out)
{
	memset(out, 0, sizeof(*out));
	out->samples = n;
	if (n == 0)
		return;
	memcpy(scratch, samples, sizeof(float4) * n);
	qsort(scratch, n, sizeof(float4), float4_cmp);
#define RANK(p) scratch[Max(0, Min(n - 1, (int) ceil((p) / 100.0 * n) - 1))]
	out->p0 = scratch[0];
	out->p50 = RANK(50.0);
	out->p90 = RANK(90.0);
	out->p95 = RANK(95.0);
	out->p99 = RANK(99.0);
#undef RANK
}

/* Close the interval: publish its figures in *out and start a new one. */
void
sdp_metrics_report(SdpMetrics *m, TimestampTz now, SdpProgress *out)
{
	double		secs = (double) (now - m->interval_start) / 1000000.0;
	double		batch_secs = m->batch_ms_total / 1000.0;

	out->report_id = ++m->report_id;
	out->timestamp = now;
	out->interval_s = secs;
	out->batches = m->batches;
	out->input_rows = m->input_rows;
	out->output_rows = m->output_rows;
	out->input_rows_per_s = secs > 0 ? m->input_rows / secs : 0;
	out->processed_rows_per_s = batch_secs > 0 ? m->input_rows / batch_secs : 0;
	out->batch_ms_avg = m->batches > 0 ? m->batch_ms_total / m->batches : 0;
	out->max_batch_rows = m->max_batch_rows;
	percentiles(m->processing, m->scratch, m->nsamples, &out->processing);
	percentiles(m->queuing, m->scratch, m->nsamples, &out->queuing);
	percentiles(m->e2e, m->scratch, m->nsamples, &out->e2e);

	m->interval_start = now;
	m->nsamples = 0;
	m->seen = 0;
	m->batches = 0;
	m->input_rows = 0;
	m->output_rows = 0;
	m->max_batch_rows = 0;
	m->batch_ms_total = 0;
}

/*
 * metrics.h
 *		Latencies of a flow's messages and their percentiles (metrics.c).
 */
#ifndef SDP_METRICS_H
#define SDP_METRICS_H

#include "sdp.h"

/* Latency percentiles of one kind over one reporting interval, in ms. */
typedef struct SdpPercentiles
{
	double		p0;
	double		p50;
	double		p90;
	double		p95;
	double		p99;
	int64		samples;
} SdpPercentiles;

/*
 * A histogram of latencies in ms (metrics.c): SDP_HISTOGRAM_STEPS buckets
 * per power of two from 1/1024 ms, and the exact extremes.
 */
#define SDP_HISTOGRAM_STEPS		32
#define SDP_HISTOGRAM_BUCKETS	(32 * SDP_HISTOGRAM_STEPS)
typedef struct SdpLatencyHistogram
{
	int64		count;
	double		min;
	double		max;
	uint32		buckets[SDP_HISTOGRAM_BUCKETS];
} SdpLatencyHistogram;

/*
 * The latest progress report of a flow worker (Spark's
 * StreamingQueryProgress); a flow's is the sum of its workers'.
 */
typedef struct SdpProgress
{
	int64		report_id;		/* 0 = no report yet */
	TimestampTz timestamp;		/* end of the interval */
	double		interval_s;
	int64		batches;
	int64		input_rows;
	int64		output_rows;
	double		input_rows_per_s;
	double		processed_rows_per_s;
	double		batch_ms_avg;
	double		batch_ms_total;
	int64		max_batch_rows;
	int64		fetcher_wakes;	/* since the worker started: wake_fetcher_if_behind */
	SdpPercentiles processing;	/* read from Kafka -> committed */
	SdpPercentiles queuing;		/* Kafka timestamp -> read */
	SdpPercentiles e2e;			/* Kafka timestamp -> committed */
	SdpLatencyHistogram processing_hist;	/* what the percentiles are read from */
	SdpLatencyHistogram queuing_hist;
	SdpLatencyHistogram e2e_hist;
} SdpProgress;

/* What a worker gathers between two progress reports. */
typedef struct SdpMetrics
{
	SdpLatencyHistogram processing;
	SdpLatencyHistogram queuing;
	SdpLatencyHistogram e2e;

	TimestampTz interval_start;
	int64		batches;
	int64		input_rows;
	int64		output_rows;
	int64		max_batch_rows;
	double		batch_ms_total;
	int64		report_id;
} SdpMetrics;

extern void sdp_metrics_init(SdpMetrics *m);
extern void sdp_metrics_record(SdpMetrics *m, double processing_ms, double queuing_ms, double e2e_ms);
extern void sdp_metrics_batch(SdpMetrics *m, int64 input_rows, int64 output_rows, double batch_ms);
extern void sdp_metrics_report(SdpMetrics *m, TimestampTz now, SdpProgress *out);

/* what status.c needs to sum the reports of a flow's workers */
extern void sdp_histogram_merge(SdpLatencyHistogram *dst, const SdpLatencyHistogram *src);
extern void sdp_histogram_percentiles(const SdpLatencyHistogram *h, SdpPercentiles *out);
extern void sdp_progress_finish(SdpProgress *p);

/*
 * Measurement probes, for the benchmarks (bench/README.md); nothing in a
 * build without their flag.  The places they time call these macros, and
 * only metrics.c knows what is done with what they note:
 *	-DSDP_RELAY_TIMING	the phases of a sink flow's relay and of the worker's
 *						rounds around it, logged every 5 s (bench/sink.sh)
 *	-DSDP_BURST_TIMING	the phases of a stateful batch that emitted 1,000 rows
 *						or more, logged at its commit (bench/window_burst.sh)
 */
typedef enum SdpProbePhase
{
	SDP_PROBE_SELECT, SDP_PROBE_WALFLUSH, SDP_PROBE_PRODUCE, SDP_PROBE_ACKS, SDP_PROBE_COMMIT,
	SDP_PROBE_DELETE, SDP_PROBE_ROWS, SDP_PROBE_STALL, SDP_PROBE_CALLS, SDP_PROBE_BATCH,
	SDP_PROBE_NPHASES
} SdpProbePhase;

#ifdef SDP_RELAY_TIMING
extern void sdp_probe_note(int phase, int64 us);
extern TimestampTz sdp_probe_started[SDP_PROBE_NPHASES];
#define SDP_PROBE_BEGIN(phase) (sdp_probe_started[phase] = GetCurrentTimestamp())
#define SDP_PROBE_END(phase) sdp_probe_note((phase), GetCurrentTimestamp() - sdp_probe_started[phase])
#define SDP_PROBE_VALUE(phase, x) sdp_probe_note((phase), (x))
#else
#define SDP_PROBE_BEGIN(phase) ((void) 0)
#define SDP_PROBE_END(phase) ((void) 0)
#define SDP_PROBE_VALUE(phase, x) ((void) 0)
#endif

#ifdef SDP_BURST_TIMING
extern int	sdp_burst_rows;
extern void sdp_burst_mark(int i);
extern void sdp_burst_report(void);
#define SDP_BURST_MARK(i) sdp_burst_mark(i)
#define SDP_BURST_ROWS(n) (sdp_burst_rows = (n))
#define SDP_BURST_REPORT() sdp_burst_report()
#else
#define SDP_BURST_MARK(i) ((void) 0)
#define SDP_BURST_ROWS(n) ((void) 0)
#define SDP_BURST_REPORT() ((void) 0)
#endif

#endif							/* SDP_METRICS_H */

/*
 * metrics.h
 *		Latency samples of a flow and their percentiles (metrics.c).
 */
#ifndef SDP_METRICS_H
#define SDP_METRICS_H

#include "sdp.h"

typedef struct SdpMetrics
{
	int			capacity;		/* samples kept per interval */
	int			nsamples;
	int64		seen;			/* samples offered this interval */
	float4	   *processing;
	float4	   *queuing;
	float4	   *e2e;
	float4	   *scratch;
	uint64		rng;

	TimestampTz interval_start;
	int64		batches;
	int64		input_rows;
	int64		output_rows;
	int64		max_batch_rows;
	double		batch_ms_total;
	int64		report_id;
} SdpMetrics;

extern void sdp_metrics_init(SdpMetrics *m, int capacity);
extern void sdp_metrics_record(SdpMetrics *m, double processing_ms, double queuing_ms, double e2e_ms);
extern void sdp_metrics_batch(SdpMetrics *m, int64 input_rows, int64 output_rows, double batch_ms);
extern void sdp_metrics_report(SdpMetrics *m, TimestampTz now, SdpProgress *out);

#endif							/* SDP_METRICS_H */

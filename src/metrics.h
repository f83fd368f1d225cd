/*
 * metrics.h
 *		Latencies of a flow's messages and their percentiles (metrics.c).
 */
#ifndef SDP_METRICS_H
#define SDP_METRICS_H

#include "sdp.h"

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

#endif							/* SDP_METRICS_H */

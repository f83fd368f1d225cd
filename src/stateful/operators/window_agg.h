/*
 * window_agg.h
 *		The windowed aggregation library: definitions (aggregations.c) and the
 *		window_agg operator (window_agg.c).
 */
#ifndef SDP_WINDOW_AGG_H
#define SDP_WINDOW_AGG_H

#include "stateful/operator.h"

typedef enum AggOperation
{
	AGG_COUNT,
	AGG_SUM,
	AGG_AVG,
	AGG_RATIO,
	AGG_APPROX_DISTINCT
} AggOperation;

/* One aggregation definition (a row of sdp.aggregations). */
typedef struct AggDefinition
{
	char	   *name;
	int			ngroup;
	char	  **group_by;
	AggOperation op;
	char	   *value;			/* NULL for count and ratio */
	char	   *filter;
	char	   *denominator;	/* ratio only */
	int64		size_us;
	int64		slide_us;		/* = size_us for tumbling windows */
	int64		allowance_us;
} AggDefinition;

/* Longest definition name: it prefixes state keys and emission ids. */
#define AGG_NAME_MAX 40

extern const char *sdp_agg_operation_name(AggOperation op);
extern List *sdp_window_agg_read_definitions(const char *flow);
extern char *sdp_window_agg_fanout_sql(List *defs, const char *user_transform, TupleDesc rows,
									   const char *event_time);
extern TupleDesc sdp_window_agg_output_desc(void);

#endif							/* SDP_WINDOW_AGG_H */

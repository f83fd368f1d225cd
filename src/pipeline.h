/*
 * pipeline.h
 *		The SQL stages of a flow: the transform over "input" (transform.c)
 *		and the write into the target (sink.c).  Both have prepared, kept
 *		SPI plans over batches registered as ephemeral named relations; the
 *		write uses its plan for the target and its privileges, and writes by
 *		multi-insert where the target allows it.
 */
#ifndef SDP_PIPELINE_H
#define SDP_PIPELINE_H

#include "flow.h"

#include "executor/spi.h"

/* Name of the relation the target write reads the rows to write from. */
#define SDP_OUTPUT_RELATION "sdp_output"
#define SDP_INPUT_RELATION "input"

typedef struct SdpTransform
{
	SPIPlanPtr	plan;			/* NULL when the flow has no transform */
	TupleDesc	input_desc;
	TupleDesc	result_desc;	/* the transform's columns (input_desc if none) */
} SdpTransform;

typedef struct SdpSink
{
	Oid			relid;
	char	   *relname;		/* qualified and quoted, for messages and SQL */
	SdpWriteMode mode;
	TupleDesc	row_desc;		/* the rows handed to sdp_sink_write */
	int			npk;
	int		   *pk_index;		/* 0-based positions of the key columns in row_desc */
	bool	   *written;		/* per row_desc column: written into the target */
	SPIPlanPtr	plan;			/* INSERT ... SELECT FROM sdp_output: the plan path */
	char	   *sql;
	const char *flow_name;		/* for the log line when the write path changes; NULL: none */
	int			path;			/* SdpWritePath of the last batch (sink.c) */
	bool		upsert_probe;	/* upsert: look the keys up first (else insert, and fall back) */
	int			clean_batches;	/* upsert: batches in a row whose keys were all new */
	int			plan_batches;	/* upsert: batches still to write by the plan alone (keys mostly there) */
	bool		engine_rows;	/* sdp.outbox: rows the engine formed for the flow itself (sink.c) */
	/* sdp.outbox of a Kafka sink: the bound on a row's key and value (sdp_sink_limit_messages) */
	int			max_payload;	/* bytes of key + value; 0: no bound */
	int			message_max_bytes;	/* the sink's, for the reason */
	const char *kafka_sink_name;
	int			row_key_att;	/* key and value in row_desc (1-based) */
	int			row_value_att;
	int			rel_key_att;	/* and in the outbox's own rows */
	int			rel_value_att;
} SdpSink;

/* transform.c */
extern void sdp_register_rows(const char *name, TupleDesc desc, HeapTuple *rows, int n);
extern void sdp_unregister_rows(const char *name);
extern void sdp_transform_prepare(SdpTransform *t, SdpInputSchema *schema, const char *sql);
extern void sdp_transform_prepare_generated(SdpTransform *t, SdpInputSchema *schema, const char *sql);
extern void sdp_transform_check_runs(SdpTransform *t);
extern void sdp_transform_check_row_by_row(SdpTransform *t, const char *what);
extern bool sdp_transform_column_is_constant(SdpTransform *t, const char *column);
extern bool sdp_transform_reads_column(SdpTransform *t, AttrNumber attno);
extern int	sdp_transform_run(SdpTransform *t, HeapTuple *rows, int n, HeapTuple **out);
extern int	sdp_transform_run_into(SdpTransform *t, HeapTuple *rows, int n, DestReceiver *dest);

/* sink.c */
extern Oid	sdp_target_primary_key(Relation rel, int *npk, AttrNumber **attnums);
extern void sdp_sink_prepare(SdpSink *s, Oid target, SdpWriteMode mode,
							 TupleDesc row_desc, bool skip_unmatched_meta);
extern void sdp_sink_prepare_outbox(SdpSink *s, Oid outbox, TupleDesc row_desc);
extern void sdp_sink_limit_messages(SdpSink *s, const char *sink_name, int max_payload, int message_max_bytes);
extern void sdp_sink_check_privileges(SdpSink *s, Oid roleid);
extern int64 sdp_sink_write(SdpSink *s, HeapTuple *rows, int n);
extern bool sdp_sink_write_transformed(SdpSink *s, SdpTransform *t, HeapTuple *rows, int n,
									   int *nout, int64 *written);
extern const char *sdp_sink_path_description(SdpSink *s);

#endif							/* SDP_PIPELINE_H */

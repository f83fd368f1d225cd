/*
 * table_write.h
 *		The write of a flow's rows into its target table (or a sink flow's
 *		into sdp.outbox): multi-insert where the target allows it, as COPY
 *		does, else its prepared INSERT plan over the rows registered as
 *		"sdp_output"; upsert or append (table_write.c).
 */
#ifndef SDP_TABLE_WRITE_H
#define SDP_TABLE_WRITE_H

#include "exec/transform.h"

typedef struct SdpTableWrite
{
	Oid			relid;
	char	   *relname;		/* qualified and quoted, for messages and SQL */
	SdpWriteMode mode;
	TupleDesc	row_desc;		/* the rows handed to sdp_table_write_rows */
	int			npk;
	int		   *pk_index;		/* 0-based positions of the key columns in row_desc */
	bool	   *written;		/* per row_desc column: written into the target */
	SPIPlanPtr	plan;			/* INSERT ... SELECT FROM sdp_output: the plan path */
	char	   *sql;
	const char *flow_name;		/* for the log line when the write path changes; NULL: none */
	int			path;			/* SdpWritePath of the last batch (table_write.c) */
	bool		upsert_probe;	/* upsert: look the keys up first (else insert, and fall back) */
	int			clean_batches;	/* upsert: batches in a row whose keys were all new */
	int			plan_batches;	/* upsert: batches still to write by the plan alone (keys mostly there) */
	bool		engine_rows;	/* sdp.outbox: rows the engine formed for the flow itself (table_write.c) */
	/* sdp.outbox of a Kafka sink: the bound on a row's key and value (sdp_table_write_limit_messages) */
	int			max_payload;	/* bytes of key + value; 0: no bound */
	int			message_max_bytes;	/* the sink's, for the reason */
	bool		value_hex;		/* the values are the messages in hex (an Avro sink) */
	const char *kafka_sink_name;
	int			row_key_att;	/* key and value in row_desc (1-based) */
	int			row_value_att;
	int			rel_key_att;	/* and in the outbox's own rows */
	int			rel_value_att;
} SdpTableWrite;

/* sdp_table_write_prepare: the columns of a flow without transform that the target may lack */
#define SDP_SKIP_META		1	/* the Kafka metadata columns */
#define SDP_SKIP_DEBEZIUM	2	/* debezium_op, debezium_source, debezium_ts_ms */

extern Oid	sdp_target_primary_key(Relation rel, int *npk, AttrNumber **attnums);
extern void sdp_table_write_prepare(SdpTableWrite *s, Oid target, SdpWriteMode mode,
									TupleDesc row_desc, int skip_unmatched);
extern void sdp_table_write_prepare_outbox(SdpTableWrite *s, Oid outbox, TupleDesc row_desc);
extern void sdp_table_write_limit_messages(SdpTableWrite *s, const char *sink_name, int max_payload,
										   int message_max_bytes);
extern void sdp_table_write_check_privileges(SdpTableWrite *s, Oid roleid);
extern int64 sdp_table_write_rows(SdpTableWrite *s, HeapTuple *rows, int n);
extern bool sdp_table_write_transformed(SdpTableWrite *s, SdpTransform *t, HeapTuple *rows, int n,
										int *nout, int64 *written);
extern const char *sdp_table_write_path_description(SdpTableWrite *s);

#endif							/* SDP_TABLE_WRITE_H */

/*
 * kafka_sink.h
 *		Kafka sinks: their producer properties, the transform that fills a
 *		sink flow's outbox, and the relay that produces it (kafka_sink.c).
 */
#ifndef SDP_KAFKA_SINK_H
#define SDP_KAFKA_SINK_H

#include "flow.h"

#include "access/htup.h"
#include "access/tupdesc.h"
#include "nodes/pg_list.h"

typedef struct KafkaRelay KafkaRelay;

extern void kafka_sink_validate_properties(List *properties);
extern void sdp_sink_check_key(TupleDesc rows, const char *sink_key, bool operator_rows);
extern char *sdp_sink_outbox_sql(const char *transform_sql, SdpInputSchema *schema, int64 flow_id,
								 int worker, const char *sink_key);
extern bool sdp_outbox_has_worker(void);
extern TupleDesc sdp_sink_outbox_desc(bool tagged);
extern HeapTuple sdp_sink_outbox_row(TupleDesc outbox, int64 flow_id, int worker, TupleDesc emitted,
									 HeapTuple row, int key_attno);

extern char *kafka_relay_transactional_id(int64 flow_id, int worker);
extern KafkaRelay *kafka_relay_create(const SdpSinkDef *sink, int64 flow_id, const char *flow_name,
									  int worker, bool tagged);
extern void kafka_relay_destroy(KafkaRelay *r);
extern List *kafka_relay_orphans(int64 flow_id, int nworkers, int worker_no, int64 *max_seq);
extern bool kafka_relay_others_pending(KafkaRelay *r, int64 upto);
extern bool kafka_relay_drain(KafkaRelay *r, char **error);

#endif							/* SDP_KAFKA_SINK_H */

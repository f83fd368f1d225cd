/*
 * kafka_sink.h
 *		Kafka sinks: their producer properties, the transform that fills a
 *		sink flow's outbox, and the relay that produces it (kafka_sink.c).
 */
#ifndef SDP_KAFKA_SINK_H
#define SDP_KAFKA_SINK_H

#include "flow.h"

#include "access/tupdesc.h"

typedef struct KafkaRelay KafkaRelay;

extern void kafka_sink_validate_properties(List *properties);
extern void sdp_sink_check_key(TupleDesc rows, const char *sink_key);
extern char *sdp_sink_outbox_sql(const char *transform_sql, SdpInputSchema *schema, int64 flow_id,
								 const char *sink_key);

extern KafkaRelay *kafka_relay_create(const SdpSinkDef *sink, int64 flow_id, const char *flow_name);
extern bool kafka_relay_drain(KafkaRelay *r, char **error);

#endif							/* SDP_KAFKA_SINK_H */

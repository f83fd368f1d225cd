/*
 * kafka_source.h
 *		One flow's Kafka consumer (kafka_source.c).
 */
#ifndef SDP_KAFKA_SOURCE_H
#define SDP_KAFKA_SOURCE_H

#include "decl/flow.h"

#include <librdkafka/rdkafka.h>

typedef struct KafkaSource KafkaSource;

extern void kafka_validate_properties(List *properties);
extern KafkaSource *kafka_source_create(const SdpSourceDef *source, const char *flow_name);
extern int	kafka_source_event_fd(KafkaSource *ks);
extern int	kafka_source_list_partitions(KafkaSource *ks, int32 **partitions,
										 int timeout_ms, char **error);
extern bool kafka_source_query_watermarks(KafkaSource *ks, int32 partition,
										  int64 *low, int64 *high, int timeout_ms,
										  char **error);
extern int64 sdp_timestamptz_to_unix_ms(TimestampTz ts);
extern Datum kafka_message_headers_jsonb(rd_kafka_message_t *m, bool *isnull);
extern bool kafka_source_offset_for_time(KafkaSource *ks, int32 partition, int64 ts_ms,
										 int64 *offset, int timeout_ms, char **error);
extern bool kafka_source_lookup_time(const SdpSourceDef *source, const char *flow_name,
									 int32 partition, int64 ts_ms, int64 *offset,
									 int timeout_ms, char **error);
extern void kafka_source_assign(KafkaSource *ks, int n, const int32 *partitions,
								const int64 *offsets);
extern int	kafka_source_take_reset(KafkaSource *ks, char *buf, size_t len);
extern int	kafka_source_poll(KafkaSource *ks, rd_kafka_message_t **msgs, int max,
							  size_t *bytes, size_t max_bytes);
extern int64 kafka_source_cached_high_watermark(KafkaSource *ks, int32 partition);
extern int64 kafka_source_queued(KafkaSource *ks);
extern bool kafka_source_queue_near_full(KafkaSource *ks, int64 queued, double msg_bytes);
extern bool kafka_source_wake_fetcher(KafkaSource *ks, int n, const int32 *partitions);
extern bool kafka_source_refetch(KafkaSource *ks, int n, const int32 *partitions);
extern bool kafka_source_seek(KafkaSource *ks, int n, const int32 *partitions, const int64 *offsets);
extern void kafka_source_commit_async(KafkaSource *ks, int n, const int32 *partitions,
									  const int64 *offsets);
extern bool kafka_source_take_error(KafkaSource *ks, char *buf, size_t len, bool *broker_down);
extern bool kafka_source_is_down(KafkaSource *ks);
extern void kafka_source_emit_logs(KafkaSource *ks);
extern void kafka_source_destroy(KafkaSource *ks);

#endif							/* SDP_KAFKA_SOURCE_H */

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
#include "datatype/timestamp.h"
#include "nodes/pg_list.h"

typedef struct KafkaRelay KafkaRelay;

extern void kafka_sink_validate_properties(List *properties);
extern int	kafka_sink_max_payload(const SdpSinkDef *sink, int64 flow_id, int worker, int *message_max_bytes);
extern void sdp_sink_check_key(TupleDesc rows, const char *sink_key, bool operator_rows);
extern char *sdp_sink_outbox_sql(const char *transform_sql, SdpInputSchema *schema, int64 flow_id,
								 int worker, const char *sink_key);
extern bool sdp_outbox_has_worker(void);
extern bool sdp_outbox_has_skips(void);
extern TupleDesc sdp_sink_outbox_desc(bool tagged);
extern HeapTuple sdp_sink_outbox_row(TupleDesc outbox, int64 flow_id, int worker, TupleDesc emitted,
									 HeapTuple row, int key_attno);

extern char *kafka_relay_transactional_id(int64 flow_id, int worker);
extern KafkaRelay *kafka_relay_create(const SdpSinkDef *sink, int64 flow_id, const char *flow_name,
									  int worker, bool tagged, bool skips);
extern void kafka_relay_destroy(KafkaRelay *r);
extern List *kafka_relay_orphans(int64 flow_id, int nworkers, int worker_no, int64 *max_seq);
extern bool kafka_relay_others_pending(KafkaRelay *r, int64 upto);
extern bool kafka_relay_fence(KafkaRelay *r, char **error);
extern bool kafka_relay_drain(KafkaRelay *r, char **error);
extern bool kafka_relay_pump(KafkaRelay *r, bool *pending, char **error);
extern bool kafka_relay_busy(KafkaRelay *r);
extern bool kafka_relay_fenced(KafkaRelay *r);
extern TimestampTz kafka_relay_ack_deadline(KafkaRelay *r);
extern int	kafka_relay_event_fd(KafkaRelay *r);
extern void kafka_relay_serve(KafkaRelay *r);
extern void kafka_relay_delete_in_batch(KafkaRelay *r);
extern void kafka_relay_batch_committed(KafkaRelay *r);
extern TimestampTz kafka_relay_delete_due(KafkaRelay *r);
extern void kafka_relay_delete_committed(KafkaRelay *r);
extern void kafka_relay_finish(KafkaRelay *r);

#ifdef SDP_RELAY_TIMING
/* measurement only: phases of the relay's rounds (kafka_sink.c) */
enum
{
	RT_SELECT, RT_WALFLUSH, RT_PRODUCE, RT_ACKS, RT_COMMIT, RT_DELETE, RT_ROWS, RT_STALL, RT_CALLS, RT_BATCH,
	RT_NPHASES
};
extern void kafka_relay_timing_note(int phase, int64 us);
extern TimestampTz kafka_relay_timing_started[RT_NPHASES];
#define RT_BEGIN(phase) (kafka_relay_timing_started[phase] = GetCurrentTimestamp())
#define RT_END(phase) kafka_relay_timing_note((phase), GetCurrentTimestamp() - kafka_relay_timing_started[phase])
#define RT_VALUE(phase, x) kafka_relay_timing_note((phase), (x))
#else
#define RT_BEGIN(phase) ((void) 0)
#define RT_END(phase) ((void) 0)
#define RT_VALUE(phase, x) ((void) 0)
#endif

#endif							/* SDP_KAFKA_SINK_H */

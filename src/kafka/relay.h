/*
 * relay.h
 *		A sink flow's relay: its transactional producer, which produces the
 *		flow's outbox rows to the sink's topic exactly once (relay.c).
 */
#ifndef SDP_RELAY_H
#define SDP_RELAY_H

#include "decl/flow.h"

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"

typedef struct KafkaRelay KafkaRelay;

extern void kafka_relay_validate_properties(List *properties);
extern int	kafka_relay_max_payload(const SdpSinkDef *sink, int64 flow_id, int worker, int *message_max_bytes);

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
extern bool kafka_relay_holds_for_standbys(KafkaRelay *r);
extern bool kafka_relay_waits_for_standbys(KafkaRelay *r);
extern bool kafka_relay_standby_broken(KafkaRelay *r);
extern int	kafka_relay_event_fd(KafkaRelay *r);
extern void kafka_relay_serve(KafkaRelay *r);
extern void kafka_relay_delete_in_batch(KafkaRelay *r);
extern void kafka_relay_batch_committed(KafkaRelay *r);
extern TimestampTz kafka_relay_delete_due(KafkaRelay *r);
extern void kafka_relay_delete_committed(KafkaRelay *r);
extern void kafka_relay_finish(KafkaRelay *r);

#endif							/* SDP_RELAY_H */

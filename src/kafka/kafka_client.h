/*
 * kafka_client.h
 *		Every librdkafka client of the process (kafka_client.c).
 */
#ifndef SDP_KAFKA_CLIENT_H
#define SDP_KAFKA_CLIENT_H

#include "postgres.h"

#include <librdkafka/rdkafka.h>

extern rd_kafka_t *kafka_client_new(rd_kafka_type_t type, rd_kafka_conf_t *conf,
									char *errstr, size_t errlen);
extern void kafka_client_destroy(rd_kafka_t *rk);

#endif							/* SDP_KAFKA_CLIENT_H */

/*
 * kafka_properties.h
 *		Which librdkafka properties and broker hosts a role may use
 *		(kafka_properties.c).
 */
#ifndef SDP_KAFKA_PROPERTIES_H
#define SDP_KAFKA_PROPERTIES_H

#include "postgres.h"

#include <librdkafka/rdkafka.h>

#include "nodes/pg_list.h"
#include "utils/guc.h"

/* GUC sdp.allowed_hosts (main.c defines it; the variable is kafka_properties.c's) */
extern char *sdp_allowed_hosts;
extern bool sdp_check_allowed_hosts(char **newval, void **extra, GucSource source);

extern void kafka_properties_check_role(Oid role, const char *what, const char *servers,
										List *properties);
extern bool kafka_property_loads_code(const char *key);
extern void kafka_properties_validate(List *properties, const char *what, const char *const *reserved,
									  int nreserved, const char *why_reserved, const char *hint);
extern void kafka_hosts_for_owner(Oid role);
extern void kafka_conf_restrict_hosts(rd_kafka_conf_t *conf);
extern bool kafka_take_refused_host(char *buf, size_t len);

#endif							/* SDP_KAFKA_PROPERTIES_H */

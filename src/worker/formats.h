/*
 * formats.h
 *		A message's value and key as the source's formats say (formats.c).
 */
#ifndef SDP_FORMATS_H
#define SDP_FORMATS_H

#include "worker/worker_internal.h"

extern bool sdp_formats_fetch_schemas(FlowWorker *w, Batch *b, char **message);
extern bool sdp_formats_decode(FlowWorker *w, SdpInputSchema *schema, const void *bytes, size_t len, SdpFormat format,
							   Datum *values, bool *nulls, char **error, int *sqlstate);
extern bool sdp_formats_decode_value(FlowWorker *w, rd_kafka_message_t *m, Datum *values, bool *nulls,
									 char **error, int *sqlstate);
extern bool sdp_formats_key(FlowWorker *w, rd_kafka_message_t *m, Datum *value, bool *isnull, char **error);

#endif							/* SDP_FORMATS_H */

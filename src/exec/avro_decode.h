/*
 * avro_decode.h
 *		Avro payloads (Confluent's wire format) -> input columns (avro_decode.c).
 */
#ifndef SDP_AVRO_DECODE_H
#define SDP_AVRO_DECODE_H

#include "decl/flow.h"

typedef struct SdpAvroSchema SdpAvroSchema;

extern SdpAvroSchema *sdp_avro_parse_schema(const char *text);
extern bool sdp_avro_frame(const void *bytes, size_t len, int32 *schema_id, char **error);
extern bool sdp_avro_decode_message(SdpInputSchema *schema, SdpAvroSchema *writer, int32 schema_id,
									const void *payload, size_t len, Datum *values, bool *nulls,
									char **error, int *sqlstate);
extern bool sdp_avro_value_text(SdpAvroSchema *writer, const void *bytes, size_t len, bool framed,
								bool json, char **text, char **error);

#endif							/* SDP_AVRO_DECODE_H */

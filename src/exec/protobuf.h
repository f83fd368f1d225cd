/*
 * protobuf.h
 *		Protobuf payloads (Confluent's wire format) -> input columns
 *		(protobuf.c, over protobuf_reflect.cpp).
 */
#ifndef SDP_PROTOBUF_H
#define SDP_PROTOBUF_H

#include "decl/flow.h"

typedef struct SdpProtoSchema SdpProtoSchema;

extern SdpProtoSchema *sdp_proto_parse_schema(int nfiles, const char **names, const char **texts);
extern bool sdp_proto_frame(const void *bytes, size_t len, int32 *schema_id, int *indexes, int *nindexes,
							size_t *body, char **error);
extern bool sdp_proto_decode_message(SdpInputSchema *schema, SdpProtoSchema *writer, const void *bytes,
									 size_t len, Datum *values, bool *nulls, char **error, int *sqlstate);
extern bool sdp_proto_value_text(SdpProtoSchema *writer, const void *bytes, size_t len, char **text,
								 char **error);

#endif							/* SDP_PROTOBUF_H */

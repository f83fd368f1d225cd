/*
 * json_decode.h
 *		JSON payload -> input columns (json_decode.c).
 */
#ifndef SDP_JSON_DECODE_H
#define SDP_JSON_DECODE_H

#include "decl/flow.h"
#include "common/jsonapi.h"

extern bool sdp_bytes_are_text(const void *bytes, size_t len);
extern bool sdp_decode_message(SdpInputSchema *schema, const char *payload, size_t len,
							   Datum *values, bool *nulls, char **error, int *sqlstate);
extern Datum sdp_json_value_datum(SdpInputColumn *col, char *text, int len, JsonTokenType type);

#endif							/* SDP_JSON_DECODE_H */

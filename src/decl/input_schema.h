/*
 * input_schema.h
 *		The declared input schema of a flow (input_schema.c).
 */
#ifndef SDP_INPUT_SCHEMA_H
#define SDP_INPUT_SCHEMA_H

#include "decl/flow.h"

extern SdpInputSchema *sdp_parse_input_schema(const char *schema_text);
extern SdpInputSchema *sdp_input_schema_from_columns(const SdpInputColumn *columns, int ncolumns, int nmeta);
extern bool sdp_is_meta_column(const char *name);

#endif							/* SDP_INPUT_SCHEMA_H */

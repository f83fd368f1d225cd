/*
 * avro_encode.h
 *		Rows -> Avro, with a schema derived from their descriptor (avro_encode.c).
 */
#ifndef SDP_AVRO_ENCODE_H
#define SDP_AVRO_ENCODE_H

#include "sdp.h"

#include "access/tupdesc.h"
#include "lib/stringinfo.h"

typedef struct SdpAvroRowPlan SdpAvroRowPlan;

extern SdpAvroRowPlan *sdp_avro_row_plan(TupleDesc desc);
extern char *sdp_avro_row_schema(const SdpAvroRowPlan *plan, const char *name);
extern void sdp_avro_encode_row(const SdpAvroRowPlan *plan, const Datum *values, const bool *nulls,
								int32 schema_id, StringInfo out);

#endif							/* SDP_AVRO_ENCODE_H */

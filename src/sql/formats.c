/*
 * formats.c
 *		SQL functions about the message formats.
 *
 * sdp_avro_to_json(schema, body, framed) reads an Avro value as a flow's
 * decoder reads it, given its writer schema: to look into a dead-lettered
 * message (sdp.dead_letters keeps its bytes), or to check what a schema
 * makes of a message before declaring a flow.  No registry is asked: the
 * schema is an argument, so nothing waits on the network in a transaction.
 */
#include "sdp.h"

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "exec/avro_decode.h"

PG_FUNCTION_INFO_V1(sdp_avro_to_json);

Datum
sdp_avro_to_json(PG_FUNCTION_ARGS)
{
	char	   *schema_text = text_to_cstring(PG_GETARG_TEXT_PP(0));
	bytea	   *body = PG_GETARG_BYTEA_PP(1);
	bool		framed = PG_GETARG_BOOL(2);
	const char *bytes = VARDATA_ANY(body);
	size_t		len = VARSIZE_ANY_EXHDR(body);
	SdpAvroSchema *writer = sdp_avro_parse_schema(schema_text);
	int32		id;
	char	   *text;
	char	   *error;

	if (framed && !sdp_avro_frame(bytes, len, &id, &error))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
				 errmsg("%s", error),
				 errhint("Pass framed => false for an Avro body without the Confluent header.")));
	if (!sdp_avro_value_text(writer, bytes, len, framed, true, &text, &error))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
				 errmsg("%s", error)));
	PG_RETURN_DATUM(DirectFunctionCall1(jsonb_in, CStringGetDatum(text)));
}

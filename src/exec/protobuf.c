/*
 * protobuf.c
 *		A Kafka message in Protobuf -> the declared columns of "input".
 *
 * A message is in Confluent's wire format: a magic byte 0, the writer
 * schema's id (4 bytes, big-endian), the message indexes (which message
 * type of the schema's file: a count and that many indexes, zigzag
 * varints, a count of 0 standing for [0], the file's first type), then the
 * Protobuf body.  The schema, from the registry with the files it imports
 * (its references), is built once by protobuf_reflect.cpp (libprotobuf,
 * C++), which also reads each body by reflection into a JSON object; the
 * JSON decoder maps that object into the columns by name and path, as for
 * a JSON source, so types, paths, defaults and errors are the same.
 *
 * The C++ side never raises and never pallocs: its strings are malloc'd
 * and copied here, its schema is freed by a reset callback of the memory
 * context it was made in.
 */
#include "postgres.h"

#include "mb/pg_wchar.h"
#include "utils/memutils.h"

#include "exec/avro_decode.h"
#include "exec/json_decode.h"
#include "exec/protobuf.h"
#include "exec/protobuf_reflect.h"

/* A message's indexes: as deep as a schema's nesting could be, and more. */
#define SDP_PROTO_MAX_INDEXES 64

struct SdpProtoSchema
{
	SdpPbSchema *pb;
	MemoryContextCallback free_pb;
};

/* A malloc'd string of the C++ side, as a palloc'd one. */
static char *
take_string(char *s)
{
	char	   *r;

	if (s == NULL)
		return NULL;
	r = pstrdup(s);
	sdp_pb_free(s);
	return r;
}

static void
free_schema(void *arg)
{
	SdpProtoSchema *s = arg;

	sdp_pb_schema_free(s->pb);
	s->pb = NULL;
}

/*
 * A schema's files built (names[0], texts[0] the registered one, then its
 * references), in CurrentMemoryContext: freed with it.  Raises a data
 * exception when they do not make a schema.
 */
SdpProtoSchema *
sdp_proto_parse_schema(int nfiles, const char **names, const char **texts)
{
	SdpProtoSchema *s = palloc0(sizeof(SdpProtoSchema));
	char	   *error;

	s->pb = sdp_pb_schema_create(nfiles, names, texts, &error);
	if (s->pb == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("not a Protobuf schema: %s", error ? take_string(error) : "out of memory")));
	s->free_pb.func = free_schema;
	s->free_pb.arg = s;
	MemoryContextRegisterResetCallback(CurrentMemoryContext, &s->free_pb);
	return s;
}

/* A zigzag varint (Confluent's message indexes); false past the end or past 32 bits. */
static bool
read_zigzag(const uint8 *p, size_t len, size_t *pos, int *value)
{
	uint64		v = 0;

	for (int shift = 0; shift < 35; shift += 7)
	{
		uint8		b;

		if (*pos >= len)
			return false;
		b = p[(*pos)++];
		v |= (uint64) (b & 0x7f) << shift;
		if ((b & 0x80) == 0)
		{
			int64		z = (int64) (v >> 1) ^ -(int64) (v & 1);

			if (z < PG_INT32_MIN || z > PG_INT32_MAX)
				return false;
			*value = (int) z;
			return true;
		}
	}
	return false;
}

/*
 * The header of a Protobuf message in Confluent's wire format: its schema
 * id, its message indexes (at most SDP_PROTO_MAX_INDEXES) and where its
 * body starts.  False with the reason when it has none.
 */
bool
sdp_proto_frame(const void *bytes, size_t len, int32 *schema_id, int *indexes, int *nindexes,
				size_t *body, char **error)
{
	const uint8 *p = bytes;
	size_t		pos = 5;
	int			count;

	/* the header Avro's has: the magic byte, the schema id */
	if (!sdp_avro_frame(bytes, len, schema_id, error))
		return false;
	if (!read_zigzag(p, len, &pos, &count) || count < 0 || count > SDP_PROTO_MAX_INDEXES)
	{
		*error = pstrdup("not in the Confluent wire format: no message indexes after the schema id");
		return false;
	}
	*nindexes = count;
	for (int i = 0; i < count; i++)
		if (!read_zigzag(p, len, &pos, &indexes[i]) || indexes[i] < 0)
		{
			*error = psprintf("not in the Confluent wire format: message index %d of %d is missing or negative",
							  i + 1, count);
			return false;
		}
	*body = pos;
	return true;
}

/* The message bytes (framed) as JSON text of the C++ side's, or false with the reason. */
static bool
to_json(SdpProtoSchema *writer, const void *bytes, size_t len, const char **json, size_t *json_len,
		char **error)
{
	int32		id;
	int			indexes[SDP_PROTO_MAX_INDEXES];
	int			nindexes;
	size_t		body;
	char	   *e;

	if (!sdp_proto_frame(bytes, len, &id, indexes, &nindexes, &body, error))
		return false;
	if (!sdp_pb_to_json(writer->pb, indexes, nindexes, (const char *) bytes + body, len - body,
						json, json_len, &e))
	{
		*error = psprintf("schema id %d: %s", id, e ? take_string(e) : "out of memory");
		return false;
	}
	return true;
}

/*
 * Decode a Protobuf message in Confluent's wire format, written with
 * writer, into the columns of schema.  As sdp_decode_message: true, or
 * false with the reason, or raising when a value does not fit its column.
 */
bool
sdp_proto_decode_message(SdpInputSchema *schema, SdpProtoSchema *writer, const void *bytes, size_t len,
						 Datum *values, bool *nulls, char **error, int *sqlstate)
{
	const char *json;
	size_t		json_len;

	*sqlstate = ERRCODE_INVALID_TEXT_REPRESENTATION;
	if (!to_json(writer, bytes, len, &json, &json_len, error))
		return false;
	return sdp_decode_message(schema, json, json_len, values, nulls, error, sqlstate);
}

/*
 * A Protobuf message (a key) as text: its JSON object, in the database's
 * encoding.  False with the reason when it cannot be read.
 */
bool
sdp_proto_value_text(SdpProtoSchema *writer, const void *bytes, size_t len, char **text, char **error)
{
	const char *json;
	size_t		json_len;

	if (!to_json(writer, bytes, len, &json, &json_len, error))
		return false;
	if (pg_encoding_verifymbstr(PG_UTF8, json, (int) json_len) < (int) json_len)
	{
		*error = pstrdup("a string of the message is not valid UTF-8");
		return false;
	}
	*text = pg_any_to_server(json, (int) json_len, PG_UTF8);
	if (*text == json)
		*text = pnstrdup(json, json_len);
	return true;
}

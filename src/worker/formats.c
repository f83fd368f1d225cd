/*
 * formats.c
 *		A message's value and key as the source's formats say: JSON or Avro
 *		values (source option format), text or Avro keys (key.format).
 *
 * An Avro message names its writer schema by id (Confluent's wire format).
 * Before a batch's transaction starts, sdp_formats_fetch_schemas has the
 * registry client (kafka/schema_registry.c) fetch the ids the batch's
 * messages name that it has not seen: the only network wait, outside any
 * transaction.  Decoding, in the transaction, then reads the kept answers:
 * a schema is parsed once (exec/avro_decode.c) and kept with its answer.
 * An id the registry does not have, or a schema that is not one the
 * decoder reads, sets the message aside with the reason; a registry that
 * cannot be asked fails the batch, which the worker retries.
 */
#include "worker/formats.h"

#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"

#include "exec/avro_decode.h"
#include "exec/json_decode.h"

/* The schema ids of a message's Avro parts (-1: none, or not in the wire format). */
static void
message_schema_ids(FlowWorker *w, rd_kafka_message_t *m, int32 *value_id, int32 *key_id)
{
	char	   *error;

	*value_id = -1;
	*key_id = -1;
	if (w->source.format == SDP_FORMAT_AVRO && m->payload != NULL &&
		!sdp_avro_frame(m->payload, m->len, value_id, &error))
		*value_id = -1;
	if (w->source.key_format == SDP_FORMAT_AVRO && m->key != NULL &&
		!sdp_avro_frame(m->key, m->key_len, key_id, &error))
		*key_id = -1;
}

/*
 * Have the schemas of the batch's Avro messages at hand: fetched from the
 * registry if they were not.  False, with the reason, when the registry
 * could not be asked: the flow's fault, the batch is retried.  Outside any
 * transaction.
 */
bool
sdp_formats_fetch_schemas(FlowWorker *w, Batch *b, char **message)
{
	int32		last = -1;

	if (w->registry == NULL)
		return true;
	for (int i = 0; i < b->nmsgs; i++)
	{
		int32		ids[2];

		message_schema_ids(w, b->msgs[i], &ids[0], &ids[1]);
		for (int k = 0; k < 2; k++)
		{
			if (ids[k] < 0 || ids[k] == last)
				continue;
			if (!sdp_registry_fetch(w->registry, ids[k], message))
				return false;
			last = ids[k];
		}
	}
	return true;
}

/*
 * The writer schema of id, parsed once and kept; NULL with the reason when
 * the registry has no such id or it is not an Avro schema the decoder
 * reads.  The first parse of a bad schema raises (the message is set aside
 * with that error); the reason is kept for the next messages that name it.
 */
static SdpAvroSchema *
writer_schema(FlowWorker *w, int32 id, char **error)
{
	SdpRegistrySchema *s = sdp_registry_get(w->registry, id);
	MemoryContext oldcxt = CurrentMemoryContext;
	MemoryContext cxt;
	Jsonb	   *answer;
	JsonbValue	key;
	JsonbValue *v;
	char	   *type = NULL;
	char	   *text;

	if (s == NULL)
	{
		*error = psprintf("schema %d was not fetched from the registry", id);	/* fetched before the batch: a bug */
		return NULL;
	}
	if (!s->found)
	{
		*error = psprintf("schema id %d is not in the schema registry %s (%s)", id,
						  sdp_registry_url(w->registry), s->answer);
		return NULL;
	}
	if (s->parsed != NULL)
		return s->parsed;
	if (s->parse_error != NULL)
	{
		*error = pstrdup(s->parse_error);
		return NULL;
	}

	cxt = AllocSetContextCreate(sdp_registry_context(w->registry), "sdp avro schema", ALLOCSET_SMALL_SIZES);
	PG_TRY();
	{
		/* the registry answers in UTF-8: checked, and in the database's encoding */
		if (pg_encoding_verifymbstr(PG_UTF8, s->answer, strlen(s->answer)) < (int) strlen(s->answer))
			ereport(ERROR,
					(errcode(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE),
					 errmsg("the schema registry's answer for schema id %d is not valid UTF-8", id)));
		answer = DatumGetJsonbP(DirectFunctionCall1(jsonb_in,
													CStringGetDatum(pg_any_to_server(s->answer, strlen(s->answer), PG_UTF8))));
		key.type = jbvString;
		key.val.string.val = "schemaType";
		key.val.string.len = 10;
		v = JB_ROOT_IS_OBJECT(answer) ? findJsonbValueFromContainer(&answer->root, JB_FOBJECT, &key) : NULL;
		if (v != NULL && v->type == jbvString)
			type = pnstrdup(v->val.string.val, v->val.string.len);
		if (type != NULL && strcmp(type, "AVRO") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
					 errmsg("schema id %d is a %s schema, and the source's format is avro", id, type)));
		key.val.string.val = "schema";
		key.val.string.len = 6;
		v = JB_ROOT_IS_OBJECT(answer) ? findJsonbValueFromContainer(&answer->root, JB_FOBJECT, &key) : NULL;
		if (v == NULL || v->type != jbvString)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
					 errmsg("the schema registry's answer for schema id %d has no \"schema\"", id)));
		text = pnstrdup(v->val.string.val, v->val.string.len);
		MemoryContextSwitchTo(cxt);
		s->parsed = sdp_avro_parse_schema(text);
		MemoryContextSwitchTo(oldcxt);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		/*
		 * A schema that is not one (a data error) is kept as such for the
		 * next messages of this id; this one is set aside by the error,
		 * raised again.  Any other error (out of memory, a cancel) is not
		 * the schema's, and is only raised again.
		 */
		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		MemoryContextDelete(cxt);
		if (ERRCODE_TO_CATEGORY(edata->sqlerrcode) == ERRCODE_DATA_EXCEPTION ||
			edata->sqlerrcode == ERRCODE_PROGRAM_LIMIT_EXCEEDED)
			s->parse_error = MemoryContextStrdup(sdp_registry_context(w->registry),
												 psprintf("schema id %d: %s", id, edata->message));
		PG_RE_THROW();
	}
	PG_END_TRY();
	return s->parsed;
}

/*
 * Decode a message's value into the declared columns, as the source's
 * format says: as sdp_decode_message, true, or false with the reason, or
 * raising when a value does not fit its column.
 */
bool
sdp_formats_decode_value(FlowWorker *w, rd_kafka_message_t *m, Datum *values, bool *nulls,
						 char **error, int *sqlstate)
{
	int32		id;
	SdpAvroSchema *writer;

	if (w->source.format != SDP_FORMAT_AVRO)
		return sdp_decode_message(w->prep.schema, m->payload, m->len, values, nulls, error, sqlstate);
	*sqlstate = ERRCODE_INVALID_TEXT_REPRESENTATION;
	if (!sdp_avro_frame(m->payload, m->len, &id, error))
		return false;
	writer = writer_schema(w, id, error);
	if (writer == NULL)
		return false;
	return sdp_avro_decode_message(w->prep.schema, writer, id, m->payload, m->len, values, nulls, error, sqlstate);
}

/*
 * A message's key as kafka_key: the bytes as text (key.format text: NULL
 * when they are not text in the database's encoding), or an Avro key's
 * value as text (a string as it is, a record as JSON).  False, with the
 * reason, when an Avro key cannot be read.
 */
bool
sdp_formats_key(FlowWorker *w, rd_kafka_message_t *m, Datum *value, bool *isnull, char **error)
{
	int32		id;
	SdpAvroSchema *writer;
	char	   *text;

	*isnull = true;
	if (w->source.key_format != SDP_FORMAT_AVRO)
	{
		if (sdp_bytes_are_text(m->key, m->key_len))
		{
			*value = PointerGetDatum(cstring_to_text_with_len(m->key, (int) m->key_len));
			*isnull = false;
		}
		return true;
	}
	if (m->key == NULL)
		return true;
	if (!sdp_avro_frame(m->key, m->key_len, &id, error) ||
		(writer = writer_schema(w, id, error)) == NULL ||
		!sdp_avro_value_text(writer, m->key, m->key_len, true, false, &text, error))
	{
		*error = psprintf("key: %s", *error);
		return false;
	}
	if (text != NULL)
	{
		*value = PointerGetDatum(cstring_to_text(text));
		*isnull = false;
	}
	return true;
}

/*
 * formats.c
 *		A message's value and key as the source's formats say: JSON, Avro or
 *		Protobuf values (source option format), text, Avro or Protobuf keys
 *		(key.format).
 *
 * An Avro message names its writer schema by id (Confluent's wire format).
 * Before a batch's transaction starts, sdp_formats_fetch_schemas has the
 * registry client (kafka/schema_registry.c) fetch the ids the batch's
 * messages name that it has not seen: the only network wait, outside any
 * transaction.  Decoding, in the transaction, then reads the kept answers:
 * a schema is parsed once (exec/avro_decode.c, exec/protobuf.c) and kept
 * with its answer.  A Protobuf schema's references (the files it imports,
 * each a version of a subject) are fetched with it.
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
#include "exec/protobuf.h"

/* The most references a Protobuf schema may have, all its imports' counted. */
#define SDP_PROTO_MAX_REFERENCES 256

/* A format whose messages name their schema in a registry. */
#define REGISTERED(format) ((format) == SDP_FORMAT_AVRO || (format) == SDP_FORMAT_PROTOBUF)

/* The schema ids of a message's Avro parts (-1: none, or not in the wire format). */
static void
message_schema_ids(FlowWorker *w, rd_kafka_message_t *m, int32 *value_id, int32 *key_id)
{
	char	   *error;

	*value_id = -1;
	*key_id = -1;
	if (REGISTERED(w->source.format) && m->payload != NULL &&
		!sdp_avro_frame(m->payload, m->len, value_id, &error))
		*value_id = -1;
	if (REGISTERED(w->source.key_format) && m->key != NULL &&
		!sdp_avro_frame(m->key, m->key_len, key_id, &error))
		*key_id = -1;
}

/*
 * The references of a Protobuf schema's answer fetched, and theirs, so
 * that building it needs no more of the registry.  An answer that cannot
 * be read is left for the build to say so (the message's fault).  False,
 * with the reason, when the registry could not be asked.
 */
static bool
fetch_references(FlowWorker *w, const char *answer, int *count, char **message)
{
	SdpRegistryAnswer a;
	char	   *error;
	ListCell   *lc;

	if (!sdp_registry_read_answer(answer, &a, &error))
		return true;
	foreach(lc, a.refs)
	{
		SdpRegistryRef *ref = lfirst(lc);
		SdpRegistryVersion *v = sdp_registry_get_version(w->registry, ref->subject, ref->version);

		if (v != NULL)
			continue;			/* fetched, with its own references */
		if (++*count > SDP_PROTO_MAX_REFERENCES)
			return true;		/* the build says so */
		if (!sdp_registry_fetch_version(w->registry, ref->subject, ref->version, message))
			return false;
		v = sdp_registry_get_version(w->registry, ref->subject, ref->version);
		if (v->found && !fetch_references(w, v->answer, count, message))
			return false;
	}
	return true;
}

/*
 * Have the schemas of the batch's Avro and Protobuf messages at hand
 * (but those of the messages to be skipped): fetched from the registry if
 * they were not.  False, with the reason,
 * when the registry could not be asked: the flow's fault, the batch is
 * retried.  Outside any transaction.
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

		if (b->skip_msg != NULL && b->skip_msg[i])
			continue;			/* skipped: never decoded */
		message_schema_ids(w, b->msgs[i], &ids[0], &ids[1]);
		for (int k = 0; k < 2; k++)
		{
			SdpRegistrySchema *s;
			int			count = 0;

			if (ids[k] < 0 || ids[k] == last)
				continue;
			s = sdp_registry_get(w->registry, ids[k]);
			if (s == NULL)
			{
				if (!sdp_registry_fetch(w->registry, ids[k], message))
					return false;
				s = sdp_registry_get(w->registry, ids[k]);
				if (s->found && (k == 0 ? w->source.format : w->source.key_format) == SDP_FORMAT_PROTOBUF &&
					!fetch_references(w, s->answer, &count, message))
				{
					/* fetched again, references and all, when the batch is retried */
					sdp_registry_forget(w->registry, ids[k]);
					return false;
				}
			}
			last = ids[k];
		}
	}
	return true;
}

/* The schema text of a registry answer that is an Avro one (the "schema" of an answer whose schemaType is AVRO or none). */
static char *
avro_schema_text(const char *answer_text, int32 id)
{
	SdpRegistryAnswer a;
	char	   *error;

	if (!sdp_registry_read_answer(answer_text, &a, &error))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("the schema registry's answer for schema id %d is not one: %s", id, error)));
	if (a.schema_type != NULL && strcmp(a.schema_type, "AVRO") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("schema id %d is a %s schema, and the format is avro", id, a.schema_type)));
	/* the answer's text is UTF-8: its names are matched to the columns in the database's encoding */
	return pg_any_to_server(a.schema, strlen(a.schema), PG_UTF8);
}

/*
 * A Protobuf schema's files: its own (first) and those its references name,
 * theirs too, fetched before the batch (sdp_formats_fetch_schemas).
 */
static void
proto_files(FlowWorker *w, const char *answer, const char *name, int32 id, List **names, List **texts, int depth)
{
	SdpRegistryAnswer a;
	char	   *error;
	ListCell   *lc;

	if (!sdp_registry_read_answer(answer, &a, &error))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("the schema registry's answer for %s is not one: %s", name, error)));
	if (depth == 0 && (a.schema_type == NULL || strcmp(a.schema_type, "PROTOBUF") != 0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("schema id %d is a schema of type %s, and the format is protobuf", id,
						a.schema_type ? a.schema_type : "AVRO")));
	if (list_length(*names) >= SDP_PROTO_MAX_REFERENCES || depth > 32)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("schema id %d has more than %d references", id, SDP_PROTO_MAX_REFERENCES)));
	*names = lappend(*names, pstrdup(name));
	*texts = lappend(*texts, a.schema);
	foreach(lc, a.refs)
	{
		SdpRegistryRef *ref = lfirst(lc);
		SdpRegistryVersion *v;
		ListCell   *seen;
		bool		have = false;

		foreach(seen, *names)
			have = have || strcmp(lfirst(seen), ref->name) == 0;
		if (have)
			continue;
		v = sdp_registry_get_version(w->registry, ref->subject, ref->version);
		if (v == NULL || !v->found)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
					 errmsg("schema id %d imports \"%s\", version %d of subject \"%s\", which is not in the schema registry%s%s",
							id, ref->name, ref->version, ref->subject, v ? ": " : "", v ? v->answer : "")));
		proto_files(w, v->answer, ref->name, id, names, texts, depth + 1);
	}
}

/*
 * The writer schema of id, parsed once and kept (an SdpAvroSchema or an
 * SdpProtoSchema, as format says); NULL with the reason when the registry
 * has no such id or it is not a schema of that format the decoder reads.
 * The first parse of a bad schema raises (the message is set aside with
 * that error); the reason is kept for the next messages that name it.
 */
static void *
writer_schema(FlowWorker *w, int32 id, SdpFormat format, char **error)
{
	SdpRegistrySchema *s = sdp_registry_get(w->registry, id);
	MemoryContext oldcxt = CurrentMemoryContext;
	MemoryContext cxt;

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
	if (s->parsed != NULL && s->parsed_as == (int) format)
		return s->parsed;
	if (s->parsed != NULL)
	{
		*error = psprintf("schema id %d is an %s schema, and the format is %s", id,
						  s->parsed_as == SDP_FORMAT_AVRO ? "Avro" : "Protobuf",
						  format == SDP_FORMAT_AVRO ? "avro" : "protobuf");
		return NULL;
	}
	if (s->parse_error != NULL)
	{
		*error = pstrdup(s->parse_error);
		return NULL;
	}

	cxt = AllocSetContextCreate(sdp_registry_context(w->registry), "sdp writer schema", ALLOCSET_SMALL_SIZES);
	PG_TRY();
	{
		/* the registry answers in UTF-8: checked, and in the database's encoding */
		if (pg_encoding_verifymbstr(PG_UTF8, s->answer, strlen(s->answer)) < (int) strlen(s->answer))
			ereport(ERROR,
					(errcode(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE),
					 errmsg("the schema registry's answer for schema id %d is not valid UTF-8", id)));
		if (format == SDP_FORMAT_AVRO)
		{
			char	   *text = avro_schema_text(s->answer, id);

			MemoryContextSwitchTo(cxt);
			s->parsed = sdp_avro_parse_schema(text);
		}
		else
		{
			List	   *names = NIL;
			List	   *texts = NIL;
			const char **n;
			const char **t;
			int			i = 0;
			ListCell   *a;
			ListCell   *b;

			proto_files(w, s->answer, psprintf("schema_%d.proto", id), id, &names, &texts, 0);
			n = palloc(sizeof(char *) * list_length(names));
			t = palloc(sizeof(char *) * list_length(names));
			forboth(a, names, b, texts)
			{
				n[i] = lfirst(a);
				t[i++] = lfirst(b);
			}
			MemoryContextSwitchTo(cxt);
			s->parsed = sdp_proto_parse_schema(i, n, t);
		}
		s->parsed_as = (int) format;
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
		s->parsed = NULL;
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
 * Decode bytes (a message's value or key) into the columns of schema: as
 * an Avro or Protobuf message in Confluent's wire format, or a JSON
 * document, as format says.  As sdp_decode_message: true, or false with
 * the reason, or raising when a value does not fit its column.
 */
bool
sdp_formats_decode(FlowWorker *w, SdpInputSchema *schema, const void *bytes, size_t len, SdpFormat format,
				   Datum *values, bool *nulls, char **error, int *sqlstate)
{
	int32		id;
	void	   *writer;

	if (!REGISTERED(format))
		return sdp_decode_message(schema, bytes, len, values, nulls, error, sqlstate);
	*sqlstate = ERRCODE_INVALID_TEXT_REPRESENTATION;
	if (!sdp_avro_frame(bytes, len, &id, error))
		return false;
	writer = writer_schema(w, id, format, error);
	if (writer == NULL)
		return false;
	if (format == SDP_FORMAT_PROTOBUF)
		return sdp_proto_decode_message(schema, writer, bytes, len, values, nulls, error, sqlstate);
	return sdp_avro_decode_message(schema, writer, id, bytes, len, values, nulls, error, sqlstate);
}

/* A message's value into the declared columns, as the source's format says (sdp_formats_decode). */
bool
sdp_formats_decode_value(FlowWorker *w, rd_kafka_message_t *m, Datum *values, bool *nulls,
						 char **error, int *sqlstate)
{
	return sdp_formats_decode(w, w->prep.schema, m->payload, m->len, w->source.format,
							  values, nulls, error, sqlstate);
}

/*
 * A message's key as kafka_key: the bytes as text (key.format text: NULL
 * when they are not text in the database's encoding), an Avro key's value
 * as text (a string as it is, a record as JSON), or a Protobuf key's
 * message as JSON.  False, with the reason, when a key cannot be read.
 */
bool
sdp_formats_key(FlowWorker *w, rd_kafka_message_t *m, Datum *value, bool *isnull, char **error)
{
	int32		id;
	void	   *writer;
	char	   *text;
	SdpFormat	format = w->source.key_format;

	*isnull = true;
	if (!REGISTERED(format))
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
		(writer = writer_schema(w, id, format, error)) == NULL ||
		!(format == SDP_FORMAT_PROTOBUF
		  ? sdp_proto_value_text(writer, m->key, m->key_len, &text, error)
		  : sdp_avro_value_text(writer, m->key, m->key_len, true, false, &text, error)))
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

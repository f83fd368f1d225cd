/*
 * json_decode.c
 *		A Kafka message's JSON payload -> the declared columns of "input".
 *
 * Fields are matched to columns by name; a missing field or JSON null is
 * SQL NULL; a nested object or array goes whole into a jsonb (or text)
 * column, as it was sent.  Numbers given as strings are accepted where a
 * number is expected, and a number keeps its exact text on the way to
 * numeric and text columns.  timestamptz takes ISO-8601 text or epoch
 * seconds, milliseconds or microseconds (told apart by magnitude).
 *
 * The payload is parsed with PostgreSQL's own JSON parser (common/jsonapi),
 * which calls us back for each top-level field and hands over the token's
 * text: no tree of the document is built, and nothing of a field the
 * schema does not declare is kept.  It is strict JSON (RFC 8259), checked
 * whole, and the payload must be UTF-8.
 *
 * A message that cannot be decoded is reported with the reason: returned
 * when this module finds it (bad JSON, not an object), raised when an input
 * function or the parser raises it (a value that does not fit its column),
 * with the field named in the message.  A raised error is never caught and
 * ignored here: the batch pipeline rolls the attempt back and decodes again
 * with each message in a subtransaction (batch.c), so that an input
 * function's error leaves nothing behind.
 */
#include "json_decode.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "common/jsonapi.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/date.h"
#include "utils/datetime.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/*
 * A top-level field's value as the parser found it: the token's text
 * (strings unescaped) and its kind; for an object or array, its raw text.
 */
typedef struct FieldValue
{
	char	   *text;
	int			len;
	JsonTokenType type;			/* JSON_TOKEN_OBJECT_START / ARRAY_START for nested */
} FieldValue;

/* Objects and arrays nested deeper than this are refused (jansson's limit was 2048). */
#define SDP_JSON_MAX_DEPTH 1000

typedef struct DecodeState
{
	JsonLexContext *lex;
	SdpInputSchema *schema;
	FieldValue *fields;			/* one per declared column; type INVALID = absent */
	int			column;			/* column of the current top-level field, or -1 */
	char	   *nested_start;	/* where the current field's object or array began */
	bool		is_object;		/* the document is an object */
} DecodeState;

static int
column_of(SdpInputSchema *schema, const char *name)
{
	for (int i = 0; i < schema->ncolumns; i++)
	{
		const char *c = schema->columns[i].name;

		if (c[0] == name[0] && strcmp(c, name) == 0)
			return i;
	}
	return -1;
}

static void
on_field_start(void *state, char *fname, bool isnull)
{
	DecodeState *st = state;

	if (st->lex->lex_level == 1)
		st->column = column_of(st->schema, fname);
}

static void
on_scalar(void *state, char *token, JsonTokenType type)
{
	DecodeState *st = state;

	if (st->lex->lex_level == 1 && st->column >= 0)
	{
		FieldValue *f = &st->fields[st->column];

		f->text = token;
		f->len = (int) strlen(token);
		f->type = type;
	}
}

static void
on_nested_start(void *state)
{
	DecodeState *st = state;

	/* the parser recurses per level: refuse a pathological depth before the stack limit does */
	if (st->lex->lex_level >= SDP_JSON_MAX_DEPTH)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("JSON nested deeper than %d levels", SDP_JSON_MAX_DEPTH)));
	if (st->lex->lex_level == 0)
		st->is_object = (st->lex->token_type == JSON_TOKEN_OBJECT_START);
	else if (st->lex->lex_level == 1 && st->column >= 0)
		st->nested_start = st->lex->token_start;
}

static void
on_nested_end(void *state)
{
	DecodeState *st = state;

	if (st->lex->lex_level == 1 && st->column >= 0)
	{
		FieldValue *f = &st->fields[st->column];

		f->len = (int) (st->lex->prev_token_terminator - st->nested_start);
		f->text = pnstrdup(st->nested_start, f->len);
		f->type = *st->nested_start == '{' ? JSON_TOKEN_OBJECT_START : JSON_TOKEN_ARRAY_START;
	}
}

/* Raised inside the conversion and caught by sdp_decode_message. */
static void
field_error(const SdpInputColumn *col, const char *fmt, const char *value)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
			 errmsg(fmt, format_type_with_typemod(col->typid, col->typmod), value)));
}

static void
invalid_input(const SdpInputColumn *col, const FieldValue *f)
{
	field_error(col, "invalid input syntax for type %s: \"%s\"", f->text);
}

/* The whole text is a decimal integer (a JSON number or a string, spaces after allowed). */
static bool
parse_int64(const SdpInputColumn *col, const char *s, int64 *result)
{
	char	   *end;
	long long	r;

	errno = 0;
	r = strtoll(s, &end, 10);
	while (*end == ' ')
		end++;
	if (end == s || *end != '\0')
		return false;
	if (errno == ERANGE)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("value %s is out of range for type %s", s, format_type_be(col->typid))));
	*result = (int64) r;
	return true;
}

static int64
field_to_int64(const SdpInputColumn *col, const FieldValue *f)
{
	int64		r;

	if ((f->type == JSON_TOKEN_NUMBER || f->type == JSON_TOKEN_STRING) && parse_int64(col, f->text, &r))
		return r;
	if (f->type == JSON_TOKEN_NUMBER)
	{
		/* 3.0 or 1e3: an integer written as a real */
		double		d = strtod(f->text, NULL);

		if (d == rint(d) && d >= (double) PG_INT64_MIN && d < -(double) PG_INT64_MIN)
			return (int64) d;
	}
	invalid_input(col, f);
	return 0;					/* keep compiler quiet */
}

static int64
int_in_range(const SdpInputColumn *col, const FieldValue *f, int64 min, int64 max)
{
	int64		r = field_to_int64(col, f);

	if (r < min || r > max)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("value %lld is out of range for type %s", (long long) r,
						format_type_be(col->typid))));
	return r;
}

static double
field_to_double(const SdpInputColumn *col, const FieldValue *f)
{
	if (f->type == JSON_TOKEN_NUMBER || f->type == JSON_TOKEN_STRING)
		return DatumGetFloat8(DirectFunctionCall1(float8in, CStringGetDatum(f->text)));
	invalid_input(col, f);
	return 0;
}

/* Epoch seconds, milliseconds or microseconds, told apart by magnitude. */
static TimestampTz
epoch_to_timestamptz(double epoch)
{
	double		secs;
	double		usecs;

	if (fabs(epoch) < 1e11)
		secs = epoch;
	else if (fabs(epoch) < 1e14)
		secs = epoch / 1000.0;
	else
		secs = epoch / 1000000.0;
	usecs = rint((secs - (double) ((POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY)) * 1000000.0);
	if (!IS_VALID_TIMESTAMP(usecs))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("epoch value %g is out of range for type timestamp with time zone", epoch)));
	return (TimestampTz) usecs;
}

static Datum
field_to_datum(SdpInputColumn *col, const FieldValue *f)
{
	switch (col->kind)
	{
		case SDP_DECODE_BOOL:
			if (f->type == JSON_TOKEN_TRUE || f->type == JSON_TOKEN_FALSE)
				return BoolGetDatum(f->type == JSON_TOKEN_TRUE);
			if (f->type == JSON_TOKEN_STRING)
				return DirectFunctionCall1(boolin, CStringGetDatum(f->text));
			invalid_input(col, f);
			break;
		case SDP_DECODE_INT2:
			return Int16GetDatum((int16) int_in_range(col, f, PG_INT16_MIN, PG_INT16_MAX));
		case SDP_DECODE_INT4:
			return Int32GetDatum((int32) int_in_range(col, f, PG_INT32_MIN, PG_INT32_MAX));
		case SDP_DECODE_INT8:
			return Int64GetDatum(field_to_int64(col, f));
		case SDP_DECODE_FLOAT4:
			{
				double		d = field_to_double(col, f);

				if (!isinf(d) && isinf((float4) d))
					ereport(ERROR,
							(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
							 errmsg("value %g is out of range for type real", d)));
				return Float4GetDatum((float4) d);
			}
		case SDP_DECODE_FLOAT8:
			return Float8GetDatum(field_to_double(col, f));
		case SDP_DECODE_TEXT:
			return PointerGetDatum(cstring_to_text_with_len(f->text, f->len));
		case SDP_DECODE_TIMESTAMPTZ:
			if (f->type == JSON_TOKEN_NUMBER)
				return TimestampTzGetDatum(epoch_to_timestamptz(field_to_double(col, f)));
			if (f->type == JSON_TOKEN_STRING)
				return DirectFunctionCall3(timestamptz_in,
										   CStringGetDatum(f->text),
										   ObjectIdGetDatum(InvalidOid),
										   Int32GetDatum(col->typmod));
			invalid_input(col, f);
			break;
		case SDP_DECODE_JSONB:
			if (f->type == JSON_TOKEN_STRING)
			{
				StringInfoData quoted;

				initStringInfo(&quoted);
				escape_json(&quoted, f->text);
				return DirectFunctionCall1(jsonb_in, CStringGetDatum(quoted.data));
			}
			return DirectFunctionCall1(jsonb_in, CStringGetDatum(f->text));
		case SDP_DECODE_INPUT_FUNCTION:
			return InputFunctionCall(&col->infunc, f->text, col->typioparam, col->typmod);
	}
	return (Datum) 0;
}

static bool
decode_failure(char **error, int *sqlstate, char *message)
{
	*error = message;
	*sqlstate = ERRCODE_INVALID_TEXT_REPRESENTATION;
	return false;
}

/*
 * In a PG_CATCH: raise the error again, its message prefixed with what was
 * being decoded ("prefix: message"), so the reason names the field.
 */
static void
rethrow_with_prefix(MemoryContext cxt, const char *prefix)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(cxt);
	edata = CopyErrorData();
	FlushErrorState();
	edata->message = psprintf("%s: %s", prefix, edata->message);
	ReThrowError(edata);
}

/* The UTF-8 payload in a server encoding other than UTF-8, or the reason it has no such form. */
static char *
to_server_encoding(const char *payload, size_t len)
{
	return pg_any_to_server(pnstrdup(payload, len), (int) len, PG_UTF8);
}

/*
 * Decode one payload into values/nulls of the declared columns (the first
 * schema->ncolumns entries).  Returns true on success; false with the
 * reason in *error and its SQLSTATE in *sqlstate when the payload is not a
 * JSON object; raises, with the reason as the message, when a value does
 * not fit its column.  Allocations go to CurrentMemoryContext.
 */
bool
sdp_decode_message(SdpInputSchema *schema, const char *payload, size_t len,
				   Datum *values, bool *nulls, char **error, int *sqlstate)
{
	MemoryContext cxt = CurrentMemoryContext;
	JsonSemAction sem = {0};
	DecodeState st = {0};
	volatile JsonParseErrorType result;
	char	   *text = (char *) payload;
	int			valid;
	volatile int failed_column = -1;

	if (payload == NULL || len == 0)
		return decode_failure(error, sqlstate, pstrdup("empty message (no JSON payload)"));
	if (len > MaxAllocSize / 2)
		return decode_failure(error, sqlstate, psprintf("message of %zu bytes is too large to decode", len));

	/* The payload is UTF-8: check it, and bring it to the server's encoding. */
	valid = pg_encoding_verifymbstr(PG_UTF8, payload, (int) len);
	if (valid < (int) len)
		return decode_failure(error, sqlstate,
							  psprintf("message is not valid UTF-8 (at byte %d)", valid));
	if (GetDatabaseEncoding() != PG_UTF8)
	{
		text = to_server_encoding(payload, len);
		len = strlen(text);
	}

	st.lex = makeJsonLexContextCstringLen(text, (int) len, GetDatabaseEncoding(), true);
	st.schema = schema;
	st.fields = palloc0(sizeof(FieldValue) * Max(schema->ncolumns, 1));
	st.column = -1;
	sem.semstate = &st;
	sem.object_start = on_nested_start;
	sem.array_start = on_nested_start;
	sem.object_end = on_nested_end;
	sem.array_end = on_nested_end;
	sem.object_field_start = on_field_start;
	sem.scalar = on_scalar;

	/* the parser and our callbacks may raise (a depth past the limit): report it as the reason */
	PG_TRY();
	{
		result = pg_parse_json(st.lex, &sem);
	}
	PG_CATCH();
	{
		rethrow_with_prefix(cxt, "invalid JSON");
	}
	PG_END_TRY();
	if (result != JSON_SUCCESS)
		return decode_failure(error, sqlstate,
							  psprintf("invalid JSON at line %d, column %d: %s",
									   st.lex->line_number,
									   st.lex->token_start ? (int) (st.lex->token_start - st.lex->line_start) + 1 : 1,
									   json_errdetail(result, st.lex)));
	if (!st.is_object)
		return decode_failure(error, sqlstate, pstrdup("message is not a JSON object"));

	PG_TRY();
	{
		for (int i = 0; i < schema->ncolumns; i++)
		{
			FieldValue *f = &st.fields[i];

			if (f->type == JSON_TOKEN_INVALID || f->type == JSON_TOKEN_NULL)
			{
				values[i] = (Datum) 0;
				nulls[i] = true;
				continue;
			}
			failed_column = i;
			values[i] = field_to_datum(&schema->columns[i], f);
			nulls[i] = false;
		}
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		rethrow_with_prefix(cxt, psprintf("field \"%s\"", schema->columns[failed_column].name));
	}
	PG_END_TRY();
	return true;
}

/*
 * json_decode.c
 *		A Kafka message's JSON payload -> the declared columns of "input".
 *
 * Fields are matched to columns by name; a missing field or JSON null is
 * SQL NULL; a nested object or array goes whole into a jsonb (or text)
 * column.  Numbers given as strings are accepted where a number is
 * expected.  timestamptz takes ISO-8601 text or epoch seconds,
 * milliseconds or microseconds (told apart by magnitude).
 *
 * A message that cannot be decoded is reported with the reason, never
 * raised: the caller dead-letters it and goes on with the batch.
 */
#include "json_decode.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "common/shortest_dec.h"
#include "mb/pg_wchar.h"
/* PostgreSQL's SQL functions json_object and json_typeof clash with jansson's names. */
#define json_object pg_json_object
#define json_typeof pg_json_typeof
#include "utils/builtins.h"
#undef json_object
#undef json_typeof
#include "utils/date.h"
#include "utils/datetime.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include <jansson.h>

/* Raised inside the conversion and caught by sdp_decode_message. */
static void
field_error(const SdpInputColumn *col, const char *fmt, const char *value)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
			 errmsg(fmt, format_type_with_typemod(col->typid, col->typmod), value)));
}

/* The JSON value as text, for text columns and input functions. */
static char *
json_value_text(json_t *v, size_t *len)
{
	char	   *dumped;
	char	   *result;

	if (json_is_string(v))
	{
		*len = json_string_length(v);
		return (char *) json_string_value(v);
	}
	if (json_is_true(v))
	{
		*len = 4;
		return "true";
	}
	if (json_is_false(v))
	{
		*len = 5;
		return "false";
	}
	if (json_is_real(v))
	{
		/* the shortest text that reads back as the same double: 123.45, not 123.45000000000000284 */
		result = palloc(DOUBLE_SHORTEST_DECIMAL_LEN);
		*len = double_to_shortest_decimal_buf(json_real_value(v), result);
		return result;
	}
	dumped = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
	if (dumped == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory encoding a JSON value")));
	*len = strlen(dumped);
	result = pnstrdup(dumped, *len);
	free(dumped);
	return result;
}

/* A UTF-8 string from jansson as a server-encoded C string. */
static char *
server_cstring(const char *utf8, size_t len)
{
	char	   *s = pnstrdup(utf8, len);

	if (GetDatabaseEncoding() == PG_UTF8)
		return s;
	return pg_any_to_server(s, (int) len, PG_UTF8);
}

static int64
json_to_int64(const SdpInputColumn *col, json_t *v)
{
	if (json_is_integer(v))
		return (int64) json_integer_value(v);
	if (json_is_real(v))
	{
		double		d = json_real_value(v);

		if (d == rint(d) && d >= (double) PG_INT64_MIN && d < -(double) PG_INT64_MIN)
			return (int64) d;
		field_error(col, "invalid input syntax for type %s: \"%s\"",
					json_value_text(v, &(size_t) {0}));
	}
	if (json_is_string(v))
	{
		const char *s = json_string_value(v);
		char	   *end;
		long long	r;

		errno = 0;
		r = strtoll(s, &end, 10);
		while (*end == ' ')
			end++;
		if (end != s && *end == '\0' && errno == 0)
			return (int64) r;
		field_error(col, "invalid input syntax for type %s: \"%s\"", s);
	}
	field_error(col, "invalid input syntax for type %s: \"%s\"", json_value_text(v, &(size_t) {0}));
	return 0;					/* keep compiler quiet */
}

static int64
int_in_range(const SdpInputColumn *col, json_t *v, int64 min, int64 max)
{
	int64		r = json_to_int64(col, v);

	if (r < min || r > max)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("value %lld is out of range for type %s", (long long) r,
						format_type_be(col->typid))));
	return r;
}

static double
json_to_double(const SdpInputColumn *col, json_t *v)
{
	if (json_is_number(v))
		return json_number_value(v);
	if (json_is_string(v))
		return DatumGetFloat8(DirectFunctionCall1(float8in, CStringGetDatum(json_string_value(v))));
	field_error(col, "invalid input syntax for type %s: \"%s\"", json_value_text(v, &(size_t) {0}));
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
json_to_datum(SdpInputColumn *col, json_t *v)
{
	size_t		len;
	char	   *s;

	switch (col->kind)
	{
		case SDP_DECODE_BOOL:
			if (json_is_boolean(v))
				return BoolGetDatum(json_is_true(v));
			if (json_is_string(v))
				return DirectFunctionCall1(boolin, CStringGetDatum(json_string_value(v)));
			field_error(col, "invalid input syntax for type %s: \"%s\"", json_value_text(v, &len));
			break;
		case SDP_DECODE_INT2:
			return Int16GetDatum((int16) int_in_range(col, v, PG_INT16_MIN, PG_INT16_MAX));
		case SDP_DECODE_INT4:
			return Int32GetDatum((int32) int_in_range(col, v, PG_INT32_MIN, PG_INT32_MAX));
		case SDP_DECODE_INT8:
			return Int64GetDatum(json_to_int64(col, v));
		case SDP_DECODE_FLOAT4:
			{
				double		d = json_to_double(col, v);

				if (!isinf(d) && isinf((float4) d))
					ereport(ERROR,
							(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
							 errmsg("value %g is out of range for type real", d)));
				return Float4GetDatum((float4) d);
			}
		case SDP_DECODE_FLOAT8:
			return Float8GetDatum(json_to_double(col, v));
		case SDP_DECODE_TEXT:
			s = json_value_text(v, &len);
			if (GetDatabaseEncoding() == PG_UTF8)
				return PointerGetDatum(cstring_to_text_with_len(s, (int) len));
			return CStringGetTextDatum(server_cstring(s, len));
		case SDP_DECODE_TIMESTAMPTZ:
			if (json_is_number(v))
				return TimestampTzGetDatum(epoch_to_timestamptz(json_number_value(v)));
			if (json_is_string(v))
				return DirectFunctionCall3(timestamptz_in,
										   CStringGetDatum(json_string_value(v)),
										   ObjectIdGetDatum(InvalidOid),
										   Int32GetDatum(col->typmod));
			field_error(col, "invalid input syntax for type %s: \"%s\"", json_value_text(v, &len));
			break;
		case SDP_DECODE_JSONB:
			{
				char	   *dumped = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
				char	   *copy;

				if (dumped == NULL)
					ereport(ERROR,
							(errcode(ERRCODE_OUT_OF_MEMORY),
							 errmsg("out of memory encoding a JSON value")));
				copy = server_cstring(dumped, strlen(dumped));
				free(dumped);
				return DirectFunctionCall1(jsonb_in, CStringGetDatum(copy));
			}
		case SDP_DECODE_INPUT_FUNCTION:
			s = json_value_text(v, &len);
			return InputFunctionCall(&col->infunc, server_cstring(s, len),
									 col->typioparam, col->typmod);
	}
	return (Datum) 0;
}

/*
 * Decode one payload into values/nulls of the declared columns (the first
 * schema->ncolumns entries).  Returns true on success; otherwise fills
 * *error with the reason and *sqlstate with its SQLSTATE and returns false.
 * Allocations go to CurrentMemoryContext.
 */
bool
sdp_decode_message(SdpInputSchema *schema, const char *payload, size_t len,
				   Datum *values, bool *nulls, char **error, int *sqlstate)
{
	json_t	   *root;
	json_error_t jerr;
	MemoryContext cxt = CurrentMemoryContext;
	volatile int failed_column = -1;
	volatile bool ok = true;

	if (payload == NULL || len == 0)
	{
		*error = pstrdup("empty message (no JSON payload)");
		*sqlstate = ERRCODE_INVALID_TEXT_REPRESENTATION;
		return false;
	}

	root = json_loadb(payload, len, 0, &jerr);
	if (root == NULL)
	{
		*error = psprintf("invalid JSON at line %d, column %d: %s",
						  jerr.line, jerr.column, jerr.text);
		*sqlstate = ERRCODE_INVALID_TEXT_REPRESENTATION;
		return false;
	}
	if (!json_is_object(root))
	{
		json_decref(root);
		*error = pstrdup("message is not a JSON object");
		*sqlstate = ERRCODE_INVALID_TEXT_REPRESENTATION;
		return false;
	}

	PG_TRY();
	{
		for (int i = 0; i < schema->ncolumns; i++)
		{
			SdpInputColumn *col = &schema->columns[i];
			json_t	   *v = json_object_get(root, col->name);

			if (v == NULL || json_is_null(v))
			{
				values[i] = (Datum) 0;
				nulls[i] = true;
				continue;
			}
			failed_column = i;
			values[i] = json_to_datum(col, v);
			nulls[i] = false;
		}
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		*error = psprintf("field \"%s\": %s", schema->columns[failed_column].name, edata->message);
		*sqlstate = edata->sqlerrcode;
		FreeErrorData(edata);
		ok = false;
	}
	PG_END_TRY();

	json_decref(root);
	return ok;
}

/*
 * avro_encode.c
 *		A sink flow's rows as Avro: the schema derived from the rows'
 *		descriptor, and each row in Confluent's wire format.
 *
 * The schema is a record with a field per column, in column order, each
 * nullable (["null", T], default null) since a SQL value may be NULL:
 *
 *	boolean				boolean
 *	smallint, integer	int
 *	bigint				long
 *	real, double		float, double
 *	numeric(p, s)		bytes, logicalType decimal (precision p, scale s); a
 *						numeric without a typmod has no scale: string
 *	date				int, logicalType date (days from 1970-01-01)
 *	time				long, logicalType time-micros
 *	timestamptz			long, logicalType timestamp-micros (a UTC instant)
 *	timestamp			long, logicalType local-timestamp-micros
 *	uuid				string, logicalType uuid
 *	bytea				bytes
 *	an array of those	array of the element's type (nullable elements)
 *	anything else		string: the type's output (text, json and jsonb as
 *						their text, enums as their labels, ...)
 *
 * which is what the decoder (avro_decode.c) reads back into the same types.
 * A value Avro cannot hold (NaN or an infinity in a decimal, an infinite
 * date or timestamp, an array of more than one dimension) raises: the row
 * is set aside with the reason, as any row that cannot be written.  Column
 * names must be Avro names ([A-Za-z_][A-Za-z0-9_]*), checked when the flow
 * is declared.
 */
#include "exec/avro_encode.h"

#include "catalog/pg_type.h"
#include "common/int.h"
#include "datatype/timestamp.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/date.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/numeric.h"
#include "utils/timestamp.h"

typedef enum AvroEnc
{
	ENC_BOOLEAN,
	ENC_INT,
	ENC_LONG,
	ENC_FLOAT,
	ENC_DOUBLE,
	ENC_DECIMAL,
	ENC_DATE,
	ENC_TIME,
	ENC_TIMESTAMP,				/* timestamptz: timestamp-micros */
	ENC_LOCAL_TIMESTAMP,		/* timestamp: local-timestamp-micros */
	ENC_UUID,
	ENC_BYTES,
	ENC_STRING					/* the type's output function */
} AvroEnc;

typedef struct AvroScalar
{
	AvroEnc		enc;
	Oid			typid;
	int			precision;		/* ENC_DECIMAL */
	int			scale;
	FmgrInfo	out;			/* ENC_STRING, ENC_UUID */
} AvroScalar;

typedef struct AvroField
{
	const char *name;
	int			attno;			/* 0-based in the descriptor */
	bool		is_array;
	AvroScalar	scalar;			/* the value's, or its elements' */
	int16		elmlen;			/* is_array: the element type's storage */
	bool		elmbyval;
	char		elmalign;
} AvroField;

struct SdpAvroRowPlan
{
	int			nfields;
	AvroField  *fields;
};

/* Microseconds and days between PostgreSQL's epoch (2000-01-01) and Unix's. */
#define EPOCH_DIFF_DAYS		(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE)
#define EPOCH_DIFF_USECS	((int64) EPOCH_DIFF_DAYS * USECS_PER_DAY)

static bool
avro_name(const char *name)
{
	if (!((name[0] >= 'A' && name[0] <= 'Z') || (name[0] >= 'a' && name[0] <= 'z') || name[0] == '_'))
		return false;
	for (const char *p = name + 1; *p; p++)
		if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_'))
			return false;
	return true;
}

static void
scalar_for(Oid typid, int32 typmod, AvroScalar *s)
{
	Oid			outfunc;
	bool		varlena;

	memset(s, 0, sizeof(AvroScalar));
	s->typid = typid;
	switch (typid)
	{
		case BOOLOID:
			s->enc = ENC_BOOLEAN;
			break;
		case INT2OID:
		case INT4OID:
			s->enc = ENC_INT;
			break;
		case INT8OID:
			s->enc = ENC_LONG;
			break;
		case FLOAT4OID:
			s->enc = ENC_FLOAT;
			break;
		case FLOAT8OID:
			s->enc = ENC_DOUBLE;
			break;
		case NUMERICOID:
			if (typmod >= (int32) VARHDRSZ)
			{
				s->enc = ENC_DECIMAL;
				s->precision = ((typmod - VARHDRSZ) >> 16) & 0xffff;
				/* a negative scale (PostgreSQL 15) is a scale of 0 with digits rounded off */
				s->scale = (int16) ((typmod - VARHDRSZ) & 0xffff);
				if (s->scale < 0 || s->scale > s->precision)
				{
					s->enc = ENC_STRING;
					break;
				}
				return;
			}
			s->enc = ENC_STRING;
			break;
		case DATEOID:
			s->enc = ENC_DATE;
			break;
		case TIMEOID:
			s->enc = ENC_TIME;
			break;
		case TIMESTAMPTZOID:
			s->enc = ENC_TIMESTAMP;
			break;
		case TIMESTAMPOID:
			s->enc = ENC_LOCAL_TIMESTAMP;
			break;
		case UUIDOID:
			s->enc = ENC_UUID;
			break;
		case BYTEAOID:
			s->enc = ENC_BYTES;
			break;
		default:
			s->enc = ENC_STRING;
			break;
	}
	if (s->enc == ENC_STRING || s->enc == ENC_UUID)
	{
		getTypeOutputInfo(typid, &outfunc, &varlena);
		fmgr_info(outfunc, &s->out);
	}
}

/*
 * How rows of desc are encoded.  Raises, as a declaration's refusal, for a
 * column whose name is not an Avro name.
 */
SdpAvroRowPlan *
sdp_avro_row_plan(TupleDesc desc)
{
	SdpAvroRowPlan *plan = palloc0(sizeof(SdpAvroRowPlan));

	plan->fields = palloc0(sizeof(AvroField) * Max(desc->natts, 1));
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		AvroField  *f;
		Oid			elemtype;

		if (att->attisdropped)
			continue;
		if (!avro_name(NameStr(att->attname)))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_NAME),
					 errmsg("column \"%s\" is not an Avro field name", NameStr(att->attname)),
					 errdetail("A field's name in an Avro schema starts with a letter or _ and has only letters, digits and _."),
					 errhint("Rename the column with AS in the flow's transform.")));
		for (int k = 0; k < plan->nfields; k++)
			if (strcmp(plan->fields[k].name, NameStr(att->attname)) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_DUPLICATE_COLUMN),
						 errmsg("column \"%s\" appears twice, and an Avro record's fields have distinct names",
								NameStr(att->attname)),
						 errhint("Rename one of them with AS in the flow's transform.")));
		f = &plan->fields[plan->nfields++];
		f->name = pstrdup(NameStr(att->attname));
		f->attno = i;
		elemtype = get_element_type(att->atttypid);
		if (OidIsValid(elemtype) && att->attlen == -1)
		{
			f->is_array = true;
			scalar_for(elemtype, att->atttypmod, &f->scalar);
			get_typlenbyvalalign(elemtype, &f->elmlen, &f->elmbyval, &f->elmalign);
		}
		else
			scalar_for(getBaseType(att->atttypid), att->atttypmod, &f->scalar);
	}
	return plan;
}

static void
append_scalar_type(StringInfo buf, const AvroScalar *s)
{
	switch (s->enc)
	{
		case ENC_BOOLEAN:
			appendStringInfoString(buf, "\"boolean\"");
			break;
		case ENC_INT:
			appendStringInfoString(buf, "\"int\"");
			break;
		case ENC_LONG:
			appendStringInfoString(buf, "\"long\"");
			break;
		case ENC_FLOAT:
			appendStringInfoString(buf, "\"float\"");
			break;
		case ENC_DOUBLE:
			appendStringInfoString(buf, "\"double\"");
			break;
		case ENC_DECIMAL:
			appendStringInfo(buf, "{\"type\": \"bytes\", \"logicalType\": \"decimal\", \"precision\": %d, \"scale\": %d}",
							 s->precision, s->scale);
			break;
		case ENC_DATE:
			appendStringInfoString(buf, "{\"type\": \"int\", \"logicalType\": \"date\"}");
			break;
		case ENC_TIME:
			appendStringInfoString(buf, "{\"type\": \"long\", \"logicalType\": \"time-micros\"}");
			break;
		case ENC_TIMESTAMP:
			appendStringInfoString(buf, "{\"type\": \"long\", \"logicalType\": \"timestamp-micros\"}");
			break;
		case ENC_LOCAL_TIMESTAMP:
			appendStringInfoString(buf, "{\"type\": \"long\", \"logicalType\": \"local-timestamp-micros\"}");
			break;
		case ENC_UUID:
			appendStringInfoString(buf, "{\"type\": \"string\", \"logicalType\": \"uuid\"}");
			break;
		case ENC_BYTES:
			appendStringInfoString(buf, "\"bytes\"");
			break;
		case ENC_STRING:
			appendStringInfoString(buf, "\"string\"");
			break;
	}
}

/*
 * The schema of the plan's rows, as JSON text: a record named name (made an
 * Avro name: other characters become _) in namespace sdp_ext.
 */
char *
sdp_avro_row_schema(const SdpAvroRowPlan *plan, const char *name)
{
	StringInfoData buf;
	char	   *record = pstrdup(name && name[0] ? name : "row");

	for (char *p = record; *p; p++)
		if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_'))
			*p = '_';
	if (record[0] >= '0' && record[0] <= '9')
		record = psprintf("_%s", record);
	initStringInfo(&buf);
	appendStringInfo(&buf, "{\"type\": \"record\", \"name\": \"%s\", \"namespace\": \"sdp_ext\", \"fields\": [", record);
	for (int i = 0; i < plan->nfields; i++)
	{
		const AvroField *f = &plan->fields[i];

		appendStringInfo(&buf, "%s{\"name\": \"%s\", \"type\": [\"null\", ", i > 0 ? ", " : "", f->name);
		if (f->is_array)
		{
			appendStringInfoString(&buf, "{\"type\": \"array\", \"items\": [\"null\", ");
			append_scalar_type(&buf, &f->scalar);
			appendStringInfoString(&buf, "]}");
		}
		else
			append_scalar_type(&buf, &f->scalar);
		appendStringInfoString(&buf, "], \"default\": null}");
	}
	appendStringInfoString(&buf, "]}");
	return buf.data;
}

/* Avro's long: zigzag, then 7 bits a byte, least significant first. */
static void
append_long(StringInfo out, int64 v)
{
	uint64		z = ((uint64) v << 1) ^ (uint64) (v >> 63);

	while (z >= 0x80)
	{
		appendStringInfoChar(out, (char) ((z & 0x7f) | 0x80));
		z >>= 7;
	}
	appendStringInfoChar(out, (char) z);
}

static void
append_bytes(StringInfo out, const char *p, int len)
{
	append_long(out, len);
	appendBinaryStringInfo(out, p, len);
}

/*
 * A decimal: the unscaled value as a two's-complement integer, big-endian,
 * in as few bytes as hold it with its sign.
 */
static void
append_decimal(StringInfo out, Datum value, const AvroScalar *s)
{
	Numeric		n = DatumGetNumeric(value);
	char	   *text;
	bool		neg = false;
	uint8	   *mag;
	int			size;
	int			start;
	int			frac = -1;

	if (numeric_is_nan(n) || numeric_is_inf(n))
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("%s is not an Avro decimal", numeric_is_nan(n) ? "NaN" : "an infinity")));
	n = DatumGetNumeric(DirectFunctionCall2(numeric_round, NumericGetDatum(n), Int32GetDatum(s->scale)));
	text = DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(n)));

	/* base 10 digits (the fraction padded to the scale) into base 256 */
	size = (int) strlen(text) / 2 + 2 + s->scale;
	mag = palloc0(size);
	for (const char *p = text;; p++)
	{
		int			digit;

		if (*p == '-')
		{
			neg = true;
			continue;
		}
		if (*p == '.')
		{
			frac = 0;
			continue;
		}
		if (*p == '\0')
		{
			if (frac < 0)
				frac = 0;
			if (frac >= s->scale)
				break;
			digit = 0;
			p--;				/* pad with zeros */
		}
		else
			digit = *p - '0';
		if (frac >= 0)
			frac++;
		for (int k = size - 1; k >= 0; k--)
		{
			int			v = mag[k] * 10 + digit;

			mag[k] = (uint8) (v & 0xff);
			digit = v >> 8;
		}
	}
	if (neg)
	{
		int			carry = 1;

		for (int k = size - 1; k >= 0; k--)
		{
			int			v = (uint8) ~mag[k] + carry;

			mag[k] = (uint8) (v & 0xff);
			carry = v >> 8;
		}
	}
	/* the fewest bytes whose first bit is the sign */
	for (start = 0; start < size - 1; start++)
	{
		uint8		pad = neg ? 0xff : 0x00;

		if (mag[start] != pad || ((mag[start + 1] & 0x80) != 0) != neg)
			break;
	}
	append_bytes(out, (const char *) mag + start, size - start);
}

static void
append_scalar(StringInfo out, const AvroScalar *s, Datum value)
{
	switch (s->enc)
	{
		case ENC_BOOLEAN:
			appendStringInfoChar(out, DatumGetBool(value) ? 1 : 0);
			break;
		case ENC_INT:
			append_long(out, s->typid == INT2OID ? DatumGetInt16(value) : DatumGetInt32(value));
			break;
		case ENC_LONG:
			append_long(out, DatumGetInt64(value));
			break;
		case ENC_FLOAT:
			{
				float4		f = DatumGetFloat4(value);
				uint32		bits;

				memcpy(&bits, &f, 4);
				for (int k = 0; k < 4; k++)
					appendStringInfoChar(out, (char) ((bits >> (8 * k)) & 0xff));
				break;
			}
		case ENC_DOUBLE:
			{
				float8		d = DatumGetFloat8(value);
				uint64		bits;

				memcpy(&bits, &d, 8);
				for (int k = 0; k < 8; k++)
					appendStringInfoChar(out, (char) ((bits >> (8 * k)) & 0xff));
				break;
			}
		case ENC_DECIMAL:
			append_decimal(out, value, s);
			break;
		case ENC_DATE:
			if (DATE_NOT_FINITE(DatumGetDateADT(value)))
				ereport(ERROR,
						(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
						 errmsg("an infinite date is not an Avro date")));
			append_long(out, (int64) DatumGetDateADT(value) + EPOCH_DIFF_DAYS);
			break;
		case ENC_TIME:
			append_long(out, DatumGetTimeADT(value));
			break;
		case ENC_TIMESTAMP:
		case ENC_LOCAL_TIMESTAMP:
			{
				int64		usecs;

				if (TIMESTAMP_NOT_FINITE(DatumGetTimestamp(value)))
					ereport(ERROR,
							(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
							 errmsg("an infinite timestamp is not an Avro timestamp")));
				if (pg_add_s64_overflow(DatumGetTimestamp(value), EPOCH_DIFF_USECS, &usecs))
					ereport(ERROR,
							(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
							 errmsg("timestamp out of the range of Avro's microseconds since 1970")));
				append_long(out, usecs);
				break;
			}
		case ENC_BYTES:
			{
				bytea	   *b = DatumGetByteaPP(value);

				append_bytes(out, VARDATA_ANY(b), VARSIZE_ANY_EXHDR(b));
				break;
			}
		case ENC_UUID:
		case ENC_STRING:
			{
				char	   *str;
				int			len;
				char	   *utf8;

				if (s->typid == TEXTOID || s->typid == VARCHAROID)
				{
					text	   *t = DatumGetTextPP(value);

					str = VARDATA_ANY(t);
					len = VARSIZE_ANY_EXHDR(t);
				}
				else
				{
					str = OutputFunctionCall((FmgrInfo *) &s->out, value);
					len = (int) strlen(str);
				}
				/* Avro strings are UTF-8 (a SQL_ASCII database's bytes are only checked) */
				utf8 = pg_server_to_any(str, len, PG_UTF8);
				if (GetDatabaseEncoding() == PG_SQL_ASCII &&
					pg_encoding_verifymbstr(PG_UTF8, utf8, len) != len)
					ereport(ERROR,
							(errcode(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE),
							 errmsg("a string that is not UTF-8 is not an Avro string")));
				append_bytes(out, utf8, utf8 == str ? len : (int) strlen(utf8));
				break;
			}
	}
}

static void
encode_error_context(void *arg)
{
	const char *field = *(const char **) arg;

	if (field != NULL)
		errcontext("Avro field \"%s\"", field);
}

/*
 * A row (values, nulls of the plan's descriptor) as an Avro message: with
 * Confluent's header (a byte 0, schema_id big-endian) unless schema_id < 0.
 * Strings are converted to UTF-8 from the database's encoding.
 */
void
sdp_avro_encode_row(const SdpAvroRowPlan *plan, const Datum *values, const bool *nulls,
					int32 schema_id, StringInfo out)
{
	ErrorContextCallback errcb;
	const char *field = NULL;

	if (schema_id >= 0)
	{
		appendStringInfoChar(out, 0);
		for (int k = 3; k >= 0; k--)
			appendStringInfoChar(out, (char) (((uint32) schema_id >> (8 * k)) & 0xff));
	}

	errcb.callback = encode_error_context;
	errcb.arg = &field;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;
	for (int i = 0; i < plan->nfields; i++)
	{
		const AvroField *f = &plan->fields[i];
		ArrayType  *arr;
		Datum	   *elems;
		bool	   *elemnulls;
		int			nelems;

		field = f->name;
		if (nulls[f->attno])
		{
			append_long(out, 0);
			continue;
		}
		append_long(out, 1);
		if (!f->is_array)
		{
			append_scalar(out, &f->scalar, values[f->attno]);
			continue;
		}
		arr = DatumGetArrayTypeP(values[f->attno]);
		if (ARR_NDIM(arr) > 1)
			ereport(ERROR,
					(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
					 errmsg("an array of %d dimensions is not an Avro array", ARR_NDIM(arr))));
		deconstruct_array(arr, ARR_ELEMTYPE(arr), f->elmlen, f->elmbyval, f->elmalign, &elems, &elemnulls, &nelems);
		if (nelems > 0)
		{
			append_long(out, nelems);
			for (int k = 0; k < nelems; k++)
			{
				append_long(out, elemnulls[k] ? 0 : 1);
				if (!elemnulls[k])
					append_scalar(out, &f->scalar, elems[k]);
			}
		}
		append_long(out, 0);
	}
	error_context_stack = errcb.previous;
}

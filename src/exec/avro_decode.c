/*
 * avro_decode.c
 *		A Kafka message in Avro -> the declared columns of "input".
 *
 * A message is in Confluent's wire format: a magic byte 0, the writer
 * schema's id in the registry (4 bytes, big-endian), then the Avro binary
 * encoding of one value of that schema.  The writer schema (fetched by
 * schema_registry.c, parsed here once per id) is all the decoder needs:
 * there is no reader schema.  The value is walked once, with the tree of the
 * declared paths (input_schema.c) beside it: a record's field, a map's
 * entry or an array's element that a column's path names is kept (where its
 * bytes are), anything else is skipped; then each kept value is converted
 * for its column.  So columns are matched to fields by name, and the
 * evolutions of a schema that keep its fields' names (a field added, one
 * removed, a union widened, a type promoted) decode without a reader schema
 * to resolve against; a declared field that a writer schema does not have
 * takes the column's DEFAULT, and without one the message is set aside with
 * that reason (Avro's own rule for a reader field the writer lacks).
 *
 * Values are converted as JSON values of the same meaning would be
 * (sdp_json_value_datum), so a column reads alike from either format, with
 * the common cases done directly: int and long into the integer types, float
 * and double into float8/float4, string into text, timestamp-millis and
 * -micros into timestamptz.  Logical types are read as the specification
 * says: decimal (bytes or fixed; the unscaled two's-complement integer,
 * big-endian, and the schema's scale) as its exact decimal text; date as
 * days from 1970-01-01; time-millis/-micros as the time of day; timestamp-
 * millis/-micros as UTC instants, local-timestamp-millis/-micros as local
 * date and time; uuid as its string.  A logical type the specification
 * would ignore (a decimal whose scale exceeds its precision, say) is read as
 * its underlying type.  A record, map or array into jsonb or text is its
 * JSON: records and maps as objects, unions as the branch's value, bytes
 * and fixed as base64 strings, enums as their symbols, logical types as
 * above (decimals as numbers, the others as strings).
 *
 * The body is untrusted: every length and count is checked against the
 * bytes that are left before anything is read or allocated, a union's
 * branch and an enum's symbol against the schema, nesting against a limit,
 * and the body must end where the value does.  What does not hold is the
 * message's reason, returned; an input function that refuses a value raises,
 * as in json_decode.c, with the field's path in the message.
 */
#include "exec/avro_decode.h"
#include "exec/json_decode.h"
#include "exec/json_path.h"
#include "compat.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "common/shortest_dec.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/numeric.h"
#include "utils/timestamp.h"

typedef enum AvroKind
{
	AK_NULL,
	AK_BOOLEAN,
	AK_INT,
	AK_LONG,
	AK_FLOAT,
	AK_DOUBLE,
	AK_BYTES,
	AK_STRING,
	AK_RECORD,
	AK_ENUM,
	AK_ARRAY,
	AK_MAP,
	AK_UNION,
	AK_FIXED
} AvroKind;

typedef enum AvroLogical
{
	AL_NONE,
	AL_DECIMAL,
	AL_DATE,
	AL_TIME_MILLIS,
	AL_TIME_MICROS,
	AL_TIMESTAMP_MILLIS,
	AL_TIMESTAMP_MICROS,
	AL_LOCAL_TIMESTAMP_MILLIS,
	AL_LOCAL_TIMESTAMP_MICROS,
	AL_UUID
} AvroLogical;

typedef struct AvroType
{
	AvroKind	kind;
	AvroLogical logical;
	int			precision;		/* decimal */
	int			scale;
	char	   *name;			/* a named type's full name */
	int			n;				/* record: fields; enum: symbols; union: branches; fixed: size */
	char	  **names;			/* record: the fields' names; enum: the symbols */
	int		   *namelens;
	struct AvroType **types;	/* record: the fields' types; union: the branches; array, map: [0] */
} AvroType;

struct SdpAvroSchema
{
	AvroType   *root;
	char	   *text;			/* the schema as the registry gave it */
};

/* Records, arrays and maps nested deeper than this are refused (json_decode.c's limit). */
#define SDP_AVRO_MAX_DEPTH 1000
/* Elements of zero bytes (nulls, empty records) the arrays and maps of one value may declare. */
#define SDP_AVRO_MAX_EMPTY_ITEMS 1000000

/* ---- the writer schema ---- */

typedef struct SchemaParse
{
	List	   *named;			/* AvroType *: the named types so far */
	const char *text;
} SchemaParse;

static void
schema_error(SchemaParse *sp, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
			 errmsg("invalid Avro schema: %s", detail)));
}

static JsonbValue *
jb_key(JsonbContainer *c, const char *key)
{
	JsonbValue	k;

	k.type = jbvString;
	k.val.string.val = (char *) key;
	k.val.string.len = (int) strlen(key);
	return findJsonbValueFromContainer(c, JB_FOBJECT, &k);
}

static char *
jb_string(JsonbValue *v)
{
	if (v == NULL || v->type != jbvString)
		return NULL;
	return pnstrdup(v->val.string.val, v->val.string.len);
}

/* An integer attribute (precision, scale, size), or -1 when it is not one. */
static int
jb_int(JsonbValue *v)
{
	bool		have_error = false;
	int32		r;

	if (v == NULL || v->type != jbvNumeric)
		return -1;
	r = numeric_int4_opt_error(v->val.numeric, &have_error);
	return have_error ? -1 : r;
}

static AvroType *parse_type(SchemaParse *sp, JsonbValue *v, const char *ns, int depth);

static AvroType *
new_type(AvroKind kind)
{
	AvroType   *t = palloc0(sizeof(AvroType));

	t->kind = kind;
	return t;
}

static bool
primitive_kind(const char *name, AvroKind *kind)
{
	static const struct
	{
		const char *name;
		AvroKind	kind;
	}			primitives[] = {
		{"null", AK_NULL}, {"boolean", AK_BOOLEAN}, {"int", AK_INT}, {"long", AK_LONG},
		{"float", AK_FLOAT}, {"double", AK_DOUBLE}, {"bytes", AK_BYTES}, {"string", AK_STRING}
	};

	for (int i = 0; i < lengthof(primitives); i++)
		if (strcmp(name, primitives[i].name) == 0)
		{
			*kind = primitives[i].kind;
			return true;
		}
	return false;
}

/* A named type's full name: name qualified by the namespace in effect. */
static char *
full_name(const char *name, const char *ns)
{
	if (strchr(name, '.') != NULL || ns == NULL || ns[0] == '\0')
		return pstrdup(name);
	return psprintf("%s.%s", ns, name);
}

static AvroType *
find_named(SchemaParse *sp, const char *name, const char *ns)
{
	char	   *full = full_name(name, ns);
	ListCell   *lc;

	foreach(lc, sp->named)
	{
		AvroType   *t = lfirst(lc);

		if (strcmp(t->name, full) == 0 || strcmp(t->name, name) == 0)
			return t;
	}
	return NULL;
}

/* The most bytes a two's-complement unscaled value of this many decimal digits takes. */
static int
decimal_max_bytes(int precision)
{
	/* digits * log2(10) bits, plus the sign bit, rounded up to bytes */
	return (int) ((precision * 3.3219280948873623 + 1 + 7) / 8);
}

/* The logical type an annotated primitive or fixed has, if the specification lets it. */
static void
set_logical(AvroType *t, JsonbContainer *c)
{
	char	   *lt = jb_string(jb_key(c, "logicalType"));

	if (lt == NULL)
		return;
	if (strcmp(lt, "decimal") == 0 && (t->kind == AK_BYTES || t->kind == AK_FIXED))
	{
		int			precision = jb_int(jb_key(c, "precision"));
		JsonbValue *sv = jb_key(c, "scale");
		int			scale = sv == NULL ? 0 : jb_int(sv);

		/*
		 * an invalid decimal is its underlying type (the specification:
		 * ignored); so is one wider than numeric holds, whose bytes would
		 * cost their square to convert
		 */
		if (precision > 0 && precision <= NUMERIC_MAX_PRECISION && scale >= 0 && scale <= precision &&
			scale <= NUMERIC_MAX_DISPLAY_SCALE && (t->kind == AK_BYTES || t->n <= decimal_max_bytes(precision)))
		{
			t->logical = AL_DECIMAL;
			t->precision = precision;
			t->scale = scale;
		}
	}
	else if (strcmp(lt, "date") == 0 && t->kind == AK_INT)
		t->logical = AL_DATE;
	else if (strcmp(lt, "time-millis") == 0 && t->kind == AK_INT)
		t->logical = AL_TIME_MILLIS;
	else if (strcmp(lt, "time-micros") == 0 && t->kind == AK_LONG)
		t->logical = AL_TIME_MICROS;
	else if (strcmp(lt, "timestamp-millis") == 0 && t->kind == AK_LONG)
		t->logical = AL_TIMESTAMP_MILLIS;
	else if (strcmp(lt, "timestamp-micros") == 0 && t->kind == AK_LONG)
		t->logical = AL_TIMESTAMP_MICROS;
	else if (strcmp(lt, "local-timestamp-millis") == 0 && t->kind == AK_LONG)
		t->logical = AL_LOCAL_TIMESTAMP_MILLIS;
	else if (strcmp(lt, "local-timestamp-micros") == 0 && t->kind == AK_LONG)
		t->logical = AL_LOCAL_TIMESTAMP_MICROS;
	else if (strcmp(lt, "uuid") == 0 && t->kind == AK_STRING)
		t->logical = AL_UUID;
}

/* A named type (record, enum, fixed): its name, registered before its body so it can refer to itself. */
static AvroType *
named_type(SchemaParse *sp, AvroKind kind, JsonbContainer *c, const char **ns)
{
	char	   *name = jb_string(jb_key(c, "name"));
	char	   *own_ns = jb_string(jb_key(c, "namespace"));
	AvroType   *t;

	if (name == NULL || name[0] == '\0')
		schema_error(sp, "a record, enum or fixed without a name");
	if (own_ns != NULL)
		*ns = own_ns;
	t = new_type(kind);
	t->name = full_name(name, *ns);
	if (strchr(name, '.') != NULL)
		*ns = pnstrdup(name, strrchr(name, '.') - name);
	sp->named = lappend(sp->named, t);
	return t;
}

static AvroType *
parse_object(SchemaParse *sp, JsonbContainer *c, const char *ns, int depth)
{
	JsonbValue *tv = jb_key(c, "type");
	char	   *type;
	AvroType   *t;
	AvroKind	kind;

	if (tv == NULL)
		schema_error(sp, "an object without a \"type\"");
	if (tv->type != jbvString)
		return parse_type(sp, tv, ns, depth + 1);	/* {"type": {...}} or {"type": [...]} */
	type = jb_string(tv);
	if (primitive_kind(type, &kind))
	{
		t = new_type(kind);
		set_logical(t, c);
		return t;
	}
	if (strcmp(type, "record") == 0 || strcmp(type, "error") == 0)
	{
		JsonbValue *fv = jb_key(c, "fields");
		JsonbContainer *fields;

		t = named_type(sp, AK_RECORD, c, &ns);
		if (fv == NULL || fv->type != jbvBinary || !JsonContainerIsArray(fv->val.binary.data))
			schema_error(sp, psprintf("record \"%s\" has no array of fields", t->name));
		fields = fv->val.binary.data;
		t->n = JsonContainerSize(fields);
		t->names = palloc0(sizeof(char *) * Max(t->n, 1));
		t->namelens = palloc0(sizeof(int) * Max(t->n, 1));
		t->types = palloc0(sizeof(AvroType *) * Max(t->n, 1));
		for (int i = 0; i < t->n; i++)
		{
			JsonbValue *f = getIthJsonbValueFromContainer(fields, i);

			if (f == NULL || f->type != jbvBinary || !JsonContainerIsObject(f->val.binary.data))
				schema_error(sp, psprintf("a field of record \"%s\" is not an object", t->name));
			t->names[i] = jb_string(jb_key(f->val.binary.data, "name"));
			if (t->names[i] == NULL)
				schema_error(sp, psprintf("a field of record \"%s\" has no name", t->name));
			t->namelens[i] = (int) strlen(t->names[i]);
			tv = jb_key(f->val.binary.data, "type");
			if (tv == NULL)
				schema_error(sp, psprintf("field \"%s\" of record \"%s\" has no type", t->names[i], t->name));
			t->types[i] = parse_type(sp, tv, ns, depth + 1);
		}
		return t;
	}
	if (strcmp(type, "enum") == 0)
	{
		JsonbValue *sv = jb_key(c, "symbols");
		JsonbContainer *symbols;

		t = named_type(sp, AK_ENUM, c, &ns);
		if (sv == NULL || sv->type != jbvBinary || !JsonContainerIsArray(sv->val.binary.data))
			schema_error(sp, psprintf("enum \"%s\" has no array of symbols", t->name));
		symbols = sv->val.binary.data;
		t->n = JsonContainerSize(symbols);
		t->names = palloc0(sizeof(char *) * Max(t->n, 1));
		t->namelens = palloc0(sizeof(int) * Max(t->n, 1));
		for (int i = 0; i < t->n; i++)
		{
			t->names[i] = jb_string(getIthJsonbValueFromContainer(symbols, i));
			if (t->names[i] == NULL)
				schema_error(sp, psprintf("a symbol of enum \"%s\" is not a string", t->name));
			t->namelens[i] = (int) strlen(t->names[i]);
		}
		return t;
	}
	if (strcmp(type, "array") == 0 || strcmp(type, "map") == 0)
	{
		JsonbValue *iv = jb_key(c, type[0] == 'a' ? "items" : "values");

		t = new_type(type[0] == 'a' ? AK_ARRAY : AK_MAP);
		if (iv == NULL)
			schema_error(sp, psprintf("an %s without its \"%s\"", type, type[0] == 'a' ? "items" : "values"));
		t->types = palloc(sizeof(AvroType *));
		t->types[0] = parse_type(sp, iv, ns, depth + 1);
		return t;
	}
	if (strcmp(type, "fixed") == 0)
	{
		t = named_type(sp, AK_FIXED, c, &ns);
		t->n = jb_int(jb_key(c, "size"));
		if (t->n < 0)
			schema_error(sp, psprintf("fixed \"%s\" has no size", t->name));
		set_logical(t, c);
		return t;
	}
	/* a named type given as {"type": "com.example.Name"} */
	t = find_named(sp, type, ns);
	if (t == NULL)
		schema_error(sp, psprintf("unknown type \"%s\"", type));
	return t;
}

static AvroType *
parse_type(SchemaParse *sp, JsonbValue *v, const char *ns, int depth)
{
	check_stack_depth();
	if (depth > SDP_AVRO_MAX_DEPTH)
		schema_error(sp, "nested too deep");
	if (v->type == jbvString)
	{
		char	   *name = jb_string(v);
		AvroKind	kind;
		AvroType   *t;

		if (primitive_kind(name, &kind))
			return new_type(kind);
		t = find_named(sp, name, ns);
		if (t == NULL)
			schema_error(sp, psprintf("unknown type \"%s\"", name));
		return t;
	}
	if (v->type == jbvBinary && JsonContainerIsArray(v->val.binary.data))
	{
		JsonbContainer *c = v->val.binary.data;
		AvroType   *t = new_type(AK_UNION);

		t->n = JsonContainerSize(c);
		if (t->n == 0)
			schema_error(sp, "a union without branches");
		t->types = palloc(sizeof(AvroType *) * t->n);
		for (int i = 0; i < t->n; i++)
		{
			t->types[i] = parse_type(sp, getIthJsonbValueFromContainer(c, i), ns, depth + 1);
			if (t->types[i]->kind == AK_UNION)
				schema_error(sp, "a union directly inside a union");
		}
		return t;
	}
	if (v->type == jbvBinary && JsonContainerIsObject(v->val.binary.data))
		return parse_object(sp, v->val.binary.data, ns, depth);
	schema_error(sp, "a type that is not a name, an object or an array");
	return NULL;				/* keep compiler quiet */
}

/*
 * Parse a writer schema (Avro's JSON form, as the registry stores it).
 * Raises, with the reason, when it is not one.  Allocates in
 * CurrentMemoryContext.
 */
SdpAvroSchema *
sdp_avro_parse_schema(const char *text)
{
	SchemaParse sp = {NIL, text};
	MemoryContext cxt = CurrentMemoryContext;
	MemoryContext tmp = AllocSetContextCreate(cxt, "sdp avro schema text", ALLOCSET_DEFAULT_SIZES);
	Jsonb	   *jb;
	JsonbValue	v;
	SdpAvroSchema *schema = palloc0(sizeof(SdpAvroSchema));

	/* the JSON only while the types are read from it (they copy what they keep) */
	MemoryContextSwitchTo(tmp);
	jb = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(text)));
	MemoryContextSwitchTo(cxt);

	/* the root as a value: a scalar root (a primitive's name) is a one-element array inside */
	if (JB_ROOT_IS_SCALAR(jb))
	{
		JsonbValue *s = getIthJsonbValueFromContainer(&jb->root, 0);

		v = *s;
	}
	else
	{
		v.type = jbvBinary;
		v.val.binary.data = &jb->root;
		v.val.binary.len = VARSIZE(jb) - VARHDRSZ;
	}
	schema->root = parse_type(&sp, &v, "", 0);
	schema->text = pstrdup(text);
	MemoryContextDelete(tmp);
	return schema;
}

/* ---- the binary encoding ---- */

typedef struct AvroReader
{
	const uint8 *p;
	const uint8 *end;
	const uint8 *start;
	char	   *error;			/* why the body cannot be read, once it is known */
	int64		empty_items;	/* items of no bytes the value may still have */
} AvroReader;

static bool
rd_fail(AvroReader *r, const char *what)
{
	if (r->error == NULL)
		r->error = psprintf("Avro body cannot be read at byte %d of %d: %s",
							(int) (r->p - r->start), (int) (r->end - r->start), what);
	return false;
}

/* A long: a zig-zag varint of at most 10 bytes. */
static inline bool
rd_long(AvroReader *r, int64 *out)
{
	uint64		v = 0;
	int			shift = 0;

	for (;;)
	{
		uint8		b;

		if (r->p >= r->end)
			return rd_fail(r, "the body ends inside a number");
		b = *r->p++;
		if (shift == 63 && (b & 0x7e) != 0)
			return rd_fail(r, "a number longer than 64 bits");
		v |= (uint64) (b & 0x7f) << shift;
		if ((b & 0x80) == 0)
			break;
		shift += 7;
		if (shift > 63)
			return rd_fail(r, "a number longer than 10 bytes");
	}
	*out = (int64) (v >> 1) ^ -(int64) (v & 1);
	return true;
}

static inline bool
rd_int(AvroReader *r, int32 *out)
{
	int64		v;

	if (!rd_long(r, &v))
		return false;
	if (v < PG_INT32_MIN || v > PG_INT32_MAX)
		return rd_fail(r, "an int out of its 32 bits");
	*out = (int32) v;
	return true;
}

/* The length of bytes or a string, checked against what is left. */
static inline bool
rd_length(AvroReader *r, int64 *len)
{
	if (!rd_long(r, len))
		return false;
	if (*len < 0)
		return rd_fail(r, "a negative length");
	if (*len > r->end - r->p)
		return rd_fail(r, psprintf("a length of %lld bytes where %d are left",
								   (long long) *len, (int) (r->end - r->p)));
	return true;
}

/*
 * An array's or a map's next block: its count of items (0 at the end).  A
 * negative count is followed by the block's size in bytes.  The count is
 * checked against what is left: an item takes at least min_item bytes, and
 * items of no bytes are bounded by SDP_AVRO_MAX_EMPTY_ITEMS per block.
 */
static bool
rd_block(AvroReader *r, int min_item, int64 *count)
{
	/* min_item < 0: read again after walk checked it */
	if (!rd_long(r, count))
		return false;
	if (*count < 0)
	{
		int64		size;

		if (*count == PG_INT64_MIN)
			return rd_fail(r, "a block count out of range");
		*count = -*count;
		if (!rd_long(r, &size))
			return false;
		if (size < 0 || size > r->end - r->p)
			return rd_fail(r, "a block size past the end of the body");
	}
	if (min_item < 0)
		return true;
	if (min_item > 0 ? *count > (r->end - r->p) / min_item : *count > r->empty_items)
		return rd_fail(r, min_item > 0
					   ? psprintf("a block of %lld items where %d bytes are left", (long long) *count, (int) (r->end - r->p))
					   : psprintf("more than %d items of no bytes in one value", SDP_AVRO_MAX_EMPTY_ITEMS));
	if (min_item == 0)
		r->empty_items -= *count;
	return true;
}

/* The fewest bytes a value of the type takes (0 for null, an empty record, ...). */
static int
min_size(AvroType *t, int depth)
{
	int			n = 0;

	if (depth > 8)
		return 0;
	switch (t->kind)
	{
		case AK_NULL:
			return 0;
		case AK_FLOAT:
			return 4;
		case AK_DOUBLE:
			return 8;
		case AK_FIXED:
			return Min(t->n, 1);
		case AK_RECORD:
			for (int i = 0; i < t->n && n == 0; i++)
				n = min_size(t->types[i], depth + 1);
			return n > 0 ? 1 : 0;
		default:
			return 1;
	}
}

static bool walk(AvroReader *r, AvroType *t, SdpJsonNode *node, int depth, void *spans);

/* What a column's value is: its type and its bytes in the body. */
typedef struct AvroSpan
{
	AvroType   *type;			/* NULL: the message does not have it */
	const uint8 *start;
	const uint8 *end;
} AvroSpan;

/* Skip a value, checking it as it is read; with node, keep the values of its paths. */
static bool
walk(AvroReader *r, AvroType *t, SdpJsonNode *node, int depth, void *arg)
{
	AvroSpan   *spans = arg;
	const uint8 *start = r->p;
	int64		len;
	int32		idx;

	if (depth > SDP_AVRO_MAX_DEPTH)
		return rd_fail(r, psprintf("values nested deeper than %d levels", SDP_AVRO_MAX_DEPTH));
	check_stack_depth();
	if (node != NULL && node->ncolumns == 0 && node->nchildren == 0)
		node = NULL;

	switch (t->kind)
	{
		case AK_NULL:
			break;
		case AK_BOOLEAN:
			if (r->p >= r->end)
				return rd_fail(r, "the body ends inside a boolean");
			if (*r->p > 1)
				return rd_fail(r, "a boolean that is neither 0 nor 1");
			r->p++;
			break;
		case AK_INT:
			{
				int32		v;

				if (!rd_int(r, &v))
					return false;
				break;
			}
		case AK_LONG:
		case AK_ENUM:
			if (!rd_long(r, &len))
				return false;
			if (t->kind == AK_ENUM && (len < 0 || len >= t->n))
				return rd_fail(r, psprintf("symbol %lld of an enum of %d", (long long) len, t->n));
			break;
		case AK_FLOAT:
		case AK_DOUBLE:
			{
				int			size = t->kind == AK_FLOAT ? 4 : 8;

				if (r->end - r->p < size)
					return rd_fail(r, "the body ends inside a float");
				r->p += size;
				break;
			}
		case AK_BYTES:
		case AK_STRING:
			if (!rd_length(r, &len))
				return false;
			r->p += len;
			break;
		case AK_FIXED:
			if (r->end - r->p < t->n)
				return rd_fail(r, "the body ends inside a fixed");
			r->p += t->n;
			break;
		case AK_RECORD:
			for (int i = 0; i < t->n; i++)
			{
				SdpJsonNode *child = NULL;

				if (node != NULL)
				{
					int			c = sdp_json_member(node, t->names[i], t->namelens[i]);

					child = c >= 0 ? &node->children[c] : NULL;
				}
				if (!walk(r, t->types[i], child, depth + 1, arg))
					return false;
			}
			break;
		case AK_ARRAY:
		case AK_MAP:
			{
				int			min_item = min_size(t->types[0], 0) + (t->kind == AK_MAP ? 1 : 0);
				int64		index = 0;
				int64		count;

				for (;;)
				{
					if (!rd_block(r, min_item, &count))
						return false;
					if (count == 0)
						break;
					for (int64 k = 0; k < count; k++)
					{
						SdpJsonNode *child = NULL;

						if (t->kind == AK_MAP)
						{
							if (!rd_length(r, &len))
								return false;
							if (node != NULL)
							{
								int			c = sdp_json_member(node, (const char *) r->p, (int) len);

								child = c >= 0 ? &node->children[c] : NULL;
							}
							r->p += len;
						}
						else if (node != NULL)
							child = sdp_json_element(node, index);
						index++;
						if (!walk(r, t->types[0], child, depth + 1, arg))
							return false;
						if ((index & 0xffff) == 0)
							CHECK_FOR_INTERRUPTS();
					}
				}
				break;
			}
		case AK_UNION:
			if (!rd_int(r, &idx))
				return false;
			if (idx < 0 || idx >= t->n)
				return rd_fail(r, psprintf("branch %d of a union of %d", idx, t->n));
			/* a union is not a step of a path: its branch's value is the node's */
			return walk(r, t->types[idx], node, depth + 1, arg);
	}
	if (node != NULL)
		for (int k = 0; k < node->ncolumns; k++)
		{
			AvroSpan   *s = &spans[node->columns[k]];

			s->type = t;
			s->start = start;
			s->end = r->p;
		}
	return true;
}

/* ---- values as text ---- */

static float8
read_double(const uint8 *p, bool is_float)
{
	if (is_float)
	{
		uint32		u = (uint32) p[0] | ((uint32) p[1] << 8) | ((uint32) p[2] << 16) | ((uint32) p[3] << 24);
		float4		f;

		memcpy(&f, &u, 4);
		return (float8) f;
	}
	else
	{
		uint64		u = 0;
		float8		d;

		for (int i = 7; i >= 0; i--)
			u = (u << 8) | p[i];
		memcpy(&d, &u, 8);
		return d;
	}
}

/*
 * A float or double as float4out or float8out writes it (the shortest
 * text that reads back exactly), Infinity and NaN as PostgreSQL spells them.
 */
static void
append_double(StringInfo buf, float8 d, bool is_float)
{
	char		tmp[64];

	if (isnan(d))
		appendStringInfoString(buf, "NaN");
	else if (isinf(d))
		appendStringInfoString(buf, d > 0 ? "Infinity" : "-Infinity");
	else
	{
		if (is_float)
			float_to_shortest_decimal_buf((float4) d, tmp);
		else
			double_to_shortest_decimal_buf(d, tmp);
		appendStringInfoString(buf, tmp);
	}
}

/* The unscaled two's-complement big-endian integer of a decimal, as decimal text with its scale. */
static void
append_decimal(StringInfo buf, const uint8 *bytes, int len, int scale)
{
	uint8	   *mag;
	bool		neg = len > 0 && (bytes[0] & 0x80);
	char	   *digits;
	int			ndigits = 0;
	int			n = len;

	if (len <= 0)
	{
		appendStringInfoChar(buf, '0');
		return;
	}
	/* the magnitude, big-endian */
	mag = palloc(len);
	memcpy(mag, bytes, (size_t) len);
	if (neg)
	{
		int			carry = 1;

		for (int i = len - 1; i >= 0; i--)
		{
			int			v = (uint8) ~mag[i] + carry;

			mag[i] = (uint8) v;
			carry = v >> 8;
		}
	}
	/* its decimal digits, least significant first, by repeated division by 10 */
	digits = palloc(len * 3 + 2);
	for (;;)
	{
		int			rem = 0;
		bool		zero = true;

		for (int i = 0; i < n; i++)
		{
			int			cur = (rem << 8) | mag[i];

			mag[i] = (uint8) (cur / 10);
			rem = cur % 10;
			if (mag[i] != 0)
				zero = false;
		}
		digits[ndigits++] = (char) ('0' + rem);
		if (zero)
			break;
	}
	if (neg)
		appendStringInfoChar(buf, '-');
	/* at least one digit before the point */
	for (int i = Max(ndigits, scale + 1) - 1; i >= 0; i--)
	{
		appendStringInfoChar(buf, i < ndigits ? digits[i] : '0');
		if (i == scale && scale > 0)
			appendStringInfoChar(buf, '.');
	}
	pfree(mag);
	pfree(digits);
}

static void
append_date(StringInfo buf, int32 days)
{
	int			y,
				m,
				d;

	if ((int64) days + UNIX_EPOCH_JDATE < 0 || (int64) days > (int64) PG_INT32_MAX - UNIX_EPOCH_JDATE)
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("date %d days from 1970-01-01 is out of range", days)));
	j2date(days + UNIX_EPOCH_JDATE, &y, &m, &d);
	if (y <= 0)
		appendStringInfo(buf, "%04d-%02d-%02d BC", 1 - y, m, d);
	else
		appendStringInfo(buf, "%04d-%02d-%02d", y, m, d);
}

static void
append_time(StringInfo buf, int64 usecs)
{
	appendStringInfo(buf, "%02d:%02d:%02d", (int) (usecs / USECS_PER_HOUR),
					 (int) (usecs / USECS_PER_MINUTE % 60), (int) (usecs / USECS_PER_SEC % 60));
	if (usecs % USECS_PER_SEC != 0)
	{
		/* the fraction without its trailing zeros, as time_out writes it */
		appendStringInfo(buf, ".%06d", (int) (usecs % USECS_PER_SEC));
		while (buf->data[buf->len - 1] == '0')
			buf->data[--buf->len] = '\0';
	}
}

/* Microseconds from 1970-01-01 00:00 as ISO 8601 (with Z when it is an instant), or false out of range. */
static bool
append_timestamp(StringInfo buf, int64 usecs, bool utc)
{
	int64		days = usecs / USECS_PER_DAY;
	int64		tod = usecs % USECS_PER_DAY;
	int			y,
				m,
				d;

	if (tod < 0)
	{
		tod += USECS_PER_DAY;
		days--;
	}
	/* from julian day 0 to past PostgreSQL's last timestamp (294276 AD) */
	if (days < -UNIX_EPOCH_JDATE || days > 110000000 - UNIX_EPOCH_JDATE)
		return false;
	j2date((int) (days + UNIX_EPOCH_JDATE), &y, &m, &d);
	appendStringInfo(buf, "%04d-%02d-%02dT", y <= 0 ? 1 - y : y, m, d);
	append_time(buf, tod);
	if (utc)
		appendStringInfoChar(buf, 'Z');
	if (y <= 0)
		appendStringInfoString(buf, " BC");
	return true;
}

static const char base64_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void
append_base64(StringInfo buf, const uint8 *p, int len)
{
	for (int i = 0; i < len; i += 3)
	{
		uint32		v = (uint32) p[i] << 16 | (i + 1 < len ? (uint32) p[i + 1] << 8 : 0) |
			(i + 2 < len ? p[i + 2] : 0);

		appendStringInfoChar(buf, base64_chars[(v >> 18) & 63]);
		appendStringInfoChar(buf, base64_chars[(v >> 12) & 63]);
		appendStringInfoChar(buf, i + 1 < len ? base64_chars[(v >> 6) & 63] : '=');
		appendStringInfoChar(buf, i + 2 < len ? base64_chars[v & 63] : '=');
	}
}

/* A string of the body in the server's encoding (it is UTF-8 in Avro), NUL-terminated; raises if it cannot be. */
static char *
avro_string(const uint8 *p, int len)
{
	int			valid = pg_encoding_verifymbstr(PG_UTF8, (const char *) p, len);

	if (valid < len)
		ereport(ERROR,
				(errcode(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE),
				 errmsg("a string that is not valid UTF-8 (at byte %d)", valid)));
	if (memchr(p, '\0', len) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNTRANSLATABLE_CHARACTER),
				 errmsg("a string with a NUL byte, which text cannot hold")));
	return pg_any_to_server(pnstrdup((const char *) p, len), len, PG_UTF8);
}

/*
 * The value of type t at r->p (already checked by walk) as text, and the
 * kind of JSON token it would be: as JSON (json = true: strings quoted,
 * for a value inside a record, array or map) or as a scalar's text (a
 * string unquoted).  Records, arrays and maps are always JSON.
 */
static JsonTokenType
append_value(StringInfo buf, AvroReader *r, AvroType *t, bool json)
{
	int64		len = 0;
	int32		i32 = 0;

	switch (t->kind)
	{
		case AK_NULL:
			appendStringInfoString(buf, "null");
			return JSON_TOKEN_NULL;
		case AK_BOOLEAN:
			appendStringInfoString(buf, *r->p++ ? "true" : "false");
			return r->p[-1] ? JSON_TOKEN_TRUE : JSON_TOKEN_FALSE;
		case AK_INT:
			(void) rd_int(r, &i32);
			if (t->logical == AL_DATE || t->logical == AL_TIME_MILLIS)
			{
				if (json)
					appendStringInfoChar(buf, '"');
				if (t->logical == AL_DATE)
					append_date(buf, i32);
				else
				{
					if (i32 < 0 || i32 >= (int32) (USECS_PER_DAY / 1000))
						ereport(ERROR,
								(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
								 errmsg("time-millis %d is not a time of day", i32)));
					append_time(buf, (int64) i32 * 1000);
				}
				if (json)
					appendStringInfoChar(buf, '"');
				return JSON_TOKEN_STRING;
			}
			appendStringInfo(buf, "%d", i32);
			return JSON_TOKEN_NUMBER;
		case AK_LONG:
			(void) rd_long(r, &len);
			if (t->logical != AL_NONE)
			{
				bool		ok = true;

				if (json)
					appendStringInfoChar(buf, '"');
				switch (t->logical)
				{
					case AL_TIME_MICROS:
						if (len < 0 || len >= USECS_PER_DAY)
							ereport(ERROR,
									(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
									 errmsg("time-micros %lld is not a time of day", (long long) len)));
						append_time(buf, len);
						break;
					case AL_TIMESTAMP_MILLIS:
					case AL_LOCAL_TIMESTAMP_MILLIS:
						ok = len > PG_INT64_MIN / 1000 && len < PG_INT64_MAX / 1000 &&
							append_timestamp(buf, len * 1000, t->logical == AL_TIMESTAMP_MILLIS);
						break;
					default:
						ok = append_timestamp(buf, len, t->logical == AL_TIMESTAMP_MICROS);
						break;
				}
				if (!ok)
					ereport(ERROR,
							(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
							 errmsg("timestamp %lld is out of range", (long long) len)));
				if (json)
					appendStringInfoChar(buf, '"');
				return JSON_TOKEN_STRING;
			}
			appendStringInfo(buf, INT64_FORMAT, len);
			return JSON_TOKEN_NUMBER;
		case AK_FLOAT:
		case AK_DOUBLE:
			{
				float8		d = read_double(r->p, t->kind == AK_FLOAT);

				r->p += t->kind == AK_FLOAT ? 4 : 8;
				if (isnan(d) || isinf(d))
				{
					/* not JSON numbers: strings, which float8in and numeric_in read */
					if (json)
						appendStringInfoChar(buf, '"');
					append_double(buf, d, t->kind == AK_FLOAT);
					if (json)
						appendStringInfoChar(buf, '"');
					return JSON_TOKEN_STRING;
				}
				append_double(buf, d, t->kind == AK_FLOAT);
				return JSON_TOKEN_NUMBER;
			}
		case AK_BYTES:
		case AK_FIXED:
			{
				const uint8 *p;
				int			n;

				if (t->kind == AK_BYTES)
				{
					(void) rd_long(r, &len);
					n = (int) len;
				}
				else
					n = t->n;
				p = r->p;
				r->p += n;
				if (t->logical == AL_DECIMAL)
				{
					/* the writer's bytes past its precision: sign-extension only */
					while (n > decimal_max_bytes(t->precision) &&
						   ((p[0] == 0x00 && (p[1] & 0x80) == 0) || (p[0] == 0xff && (p[1] & 0x80) != 0)))
					{
						p++;
						n--;
					}
					if (n > decimal_max_bytes(t->precision))
						ereport(ERROR,
								(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
								 errmsg("a decimal of %d bytes, more than its precision of %d digits takes", n, t->precision)));
					append_decimal(buf, p, n, t->scale);
					return JSON_TOKEN_NUMBER;
				}
				if (json)
					appendStringInfoChar(buf, '"');
				append_base64(buf, p, n);
				if (json)
					appendStringInfoChar(buf, '"');
				return JSON_TOKEN_STRING;
			}
		case AK_STRING:
			{
				char	   *s;

				(void) rd_long(r, &len);
				s = avro_string(r->p, (int) len);
				r->p += len;
				if (json)
					escape_json(buf, s);
				else
					appendStringInfoString(buf, s);
				return JSON_TOKEN_STRING;
			}
		case AK_ENUM:
			(void) rd_long(r, &len);
			if (json)
				escape_json(buf, t->names[len]);
			else
				appendStringInfoString(buf, t->names[len]);
			return JSON_TOKEN_STRING;
		case AK_RECORD:
			appendStringInfoChar(buf, '{');
			for (int i = 0; i < t->n; i++)
			{
				if (i > 0)
					appendStringInfoString(buf, ", ");
				escape_json(buf, t->names[i]);
				appendStringInfoString(buf, ": ");
				(void) append_value(buf, r, t->types[i], true);
			}
			appendStringInfoChar(buf, '}');
			return JSON_TOKEN_OBJECT_START;
		case AK_ARRAY:
		case AK_MAP:
			{
				bool		first = true;
				int64		count;

				appendStringInfoChar(buf, t->kind == AK_ARRAY ? '[' : '{');
				for (;;)
				{
					(void) rd_block(r, -1, &count);
					if (count == 0)
						break;
					for (int64 k = 0; k < count; k++)
					{
						if ((k & 0xffff) == 0xffff)
							CHECK_FOR_INTERRUPTS();
						if (!first)
							appendStringInfoString(buf, ", ");
						first = false;
						if (t->kind == AK_MAP)
						{
							(void) rd_long(r, &len);
							escape_json(buf, avro_string(r->p, (int) len));
							r->p += len;
							appendStringInfoString(buf, ": ");
						}
						(void) append_value(buf, r, t->types[0], true);
					}
				}
				appendStringInfoChar(buf, t->kind == AK_ARRAY ? ']' : '}');
				return t->kind == AK_ARRAY ? JSON_TOKEN_ARRAY_START : JSON_TOKEN_OBJECT_START;
			}
		case AK_UNION:
			(void) rd_int(r, &i32);
			return append_value(buf, r, t->types[i32], json);
	}
	return JSON_TOKEN_INVALID;	/* keep compiler quiet */
}

/* ---- values into columns ---- */

/* Microseconds (or milliseconds) from the Unix epoch as a timestamptz, or raise. */
static Datum
epoch_timestamptz(int64 v, bool millis)
{
	int64		us;

	if (millis && (v > PG_INT64_MAX / 1000 || v < PG_INT64_MIN / 1000))
		us = PG_INT64_MAX;
	else
		us = millis ? v * 1000 : v;
	if (us > PG_INT64_MIN + (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY)
		us -= (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY;
	if (!IS_VALID_TIMESTAMP(us))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("timestamp %lld is out of range for type timestamp with time zone", (long long) v)));
	return TimestampTzGetDatum(us);
}

/* The value of a span into its column: directly for the common pairs, else as JSON would give it. */
static Datum
span_datum(SdpInputColumn *col, AvroSpan *s, bool *isnull)
{
	AvroReader	r = {s->start, s->end, s->start, NULL, 0};
	AvroType   *t = s->type;
	StringInfoData buf;
	JsonTokenType tok;
	int64		v;

	*isnull = false;
	if (t->kind == AK_NULL)
	{
		*isnull = true;
		return (Datum) 0;
	}
	if ((t->kind == AK_INT || t->kind == AK_LONG) && t->logical == AL_NONE &&
		(col->kind == SDP_DECODE_INT2 || col->kind == SDP_DECODE_INT4 || col->kind == SDP_DECODE_INT8 ||
		 col->kind == SDP_DECODE_FLOAT8))
	{
		(void) rd_long(&r, &v);
		switch (col->kind)
		{
			case SDP_DECODE_INT8:
				return Int64GetDatum(v);
			case SDP_DECODE_FLOAT8:
				return Float8GetDatum((float8) v);
			case SDP_DECODE_INT4:
				if (v >= PG_INT32_MIN && v <= PG_INT32_MAX)
					return Int32GetDatum((int32) v);
				break;
			default:
				if (v >= PG_INT16_MIN && v <= PG_INT16_MAX)
					return Int16GetDatum((int16) v);
				break;
		}
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("value %lld is out of range for type %s", (long long) v, format_type_be(col->typid))));
	}
	if (t->kind == AK_DOUBLE && col->kind == SDP_DECODE_FLOAT8)
		return Float8GetDatum(read_double(s->start, false));
	if (t->kind == AK_STRING && t->logical == AL_NONE && col->kind == SDP_DECODE_TEXT)
	{
		(void) rd_long(&r, &v);
		return PointerGetDatum(cstring_to_text(avro_string(r.p, (int) v)));
	}
	if (t->kind == AK_LONG && col->kind == SDP_DECODE_TIMESTAMPTZ &&
		(t->logical == AL_TIMESTAMP_MICROS || t->logical == AL_TIMESTAMP_MILLIS))
	{
		(void) rd_long(&r, &v);
		return epoch_timestamptz(v, t->logical == AL_TIMESTAMP_MILLIS);
	}
	if (t->kind == AK_BOOLEAN && col->kind == SDP_DECODE_BOOL)
		return BoolGetDatum(*s->start != 0);
	if ((t->kind == AK_BYTES || t->kind == AK_FIXED) && t->logical != AL_DECIMAL && col->typid == BYTEAOID)
	{
		/* bytes into bytea as they are (into text they are base64) */
		bytea	   *result;

		if (t->kind == AK_BYTES)
			(void) rd_long(&r, &v);
		else
			v = t->n;
		result = palloc(VARHDRSZ + v);
		SET_VARSIZE(result, VARHDRSZ + v);
		memcpy(VARDATA(result), r.p, v);
		return PointerGetDatum(result);
	}

	/* anything else as its JSON value: a record or array for jsonb, a logical type's text, ... */
	initStringInfo(&buf);
	tok = append_value(&buf, &r, t, false);
	return sdp_json_value_datum(col, buf.data, buf.len, tok);
}

/*
 * Whether a column's path is in the writer schema: names that its records
 * have (or maps may have), indexes into its arrays, through its unions.
 */
static bool
path_in_schema(AvroType *t, const SdpPathStep *path, int npath, int depth)
{
	if (npath == 0)
		return true;
	if (depth > 64)
		return false;
	switch (t->kind)
	{
		case AK_UNION:
			for (int i = 0; i < t->n; i++)
				if (path_in_schema(t->types[i], path, npath, depth + 1))
					return true;
			return false;
		case AK_RECORD:
			if (path[0].key == NULL)
				return false;
			for (int i = 0; i < t->n; i++)
				if (t->namelens[i] == path[0].keylen && memcmp(t->names[i], path[0].key, path[0].keylen) == 0)
					return path_in_schema(t->types[i], path + 1, npath - 1, depth + 1);
			return false;
		case AK_MAP:
			return path[0].key != NULL && path_in_schema(t->types[0], path + 1, npath - 1, depth + 1);
		case AK_ARRAY:
			return path[0].key == NULL && path_in_schema(t->types[0], path + 1, npath - 1, depth + 1);
		default:
			return false;
	}
}

/*
 * Read the Confluent wire format's header: the schema id, and where the
 * Avro body starts.  False, with the reason, when the bytes are not in it.
 */
bool
sdp_avro_frame(const void *bytes, size_t len, int32 *schema_id, char **error)
{
	const uint8 *p = bytes;

	if (bytes == NULL || len == 0)
	{
		*error = pstrdup("empty message (no payload in the Confluent wire format)");
		return false;
	}
	if (p[0] != 0)
	{
		*error = psprintf("not in the Confluent wire format: its first byte is %d, not 0 (the magic byte)", p[0]);
		return false;
	}
	if (len < 5)
	{
		*error = psprintf("not in the Confluent wire format: %zu bytes, fewer than the 5 of its header", len);
		return false;
	}
	if (p[1] & 0x80)
	{
		*error = psprintf("schema id %u is out of the registry's range (a signed 32-bit id)",
						  (uint32) p[1] << 24 | (uint32) p[2] << 16 | (uint32) p[3] << 8 | p[4]);
		return false;
	}
	*schema_id = (int32) ((uint32) p[1] << 24 | (uint32) p[2] << 16 | (uint32) p[3] << 8 | p[4]);
	return true;
}

static bool
avro_failure(char **error, int *sqlstate, char *message)
{
	*error = message;
	*sqlstate = ERRCODE_INVALID_TEXT_REPRESENTATION;
	return false;
}

/*
 * Decode one message (its 5-byte header included) written with the writer
 * schema of id schema_id into values/nulls of the declared columns.  As
 * sdp_decode_message: true on success; false with the reason when the
 * body cannot be read or lacks a declared field with no default; raises
 * when a value does not fit its column.
 */
bool
sdp_avro_decode_message(SdpInputSchema *schema, SdpAvroSchema *writer, int32 schema_id,
						const void *payload, size_t len, Datum *values, bool *nulls,
						char **error, int *sqlstate)
{
	MemoryContext cxt = CurrentMemoryContext;
	AvroReader	r;
	AvroSpan   *spans = palloc0(sizeof(AvroSpan) * Max(schema->ncolumns, 1));
	volatile int failed_column = -1;

	r.start = (const uint8 *) payload + 5;
	r.p = r.start;
	r.end = (const uint8 *) payload + len;
	r.error = NULL;
	r.empty_items = SDP_AVRO_MAX_EMPTY_ITEMS;
	if (!walk(&r, writer->root, schema->tree, 0, spans))
		return avro_failure(error, sqlstate, r.error);
	if (r.p != r.end)
		return avro_failure(error, sqlstate,
							psprintf("Avro body has %d bytes after its value of schema %d (%d of %d read)",
									 (int) (r.end - r.p), schema_id, (int) (r.p - r.start), (int) (r.end - r.start)));

	PG_TRY();
	{
		for (int i = 0; i < schema->ncolumns; i++)
		{
			SdpInputColumn *col = &schema->columns[i];

			if (spans[i].type == NULL)
			{
				/* not in this message: its default, or NULL where the schema has it on a path that was not taken */
				if (col->has_default)
				{
					values[i] = col->default_value;
					nulls[i] = col->default_isnull;
					continue;
				}
				if (!path_in_schema(writer->root, col->path, col->npath, 0))
				{
					*error = psprintf("field \"%s\" is not in the message's writer schema (id %d) and the flow declares no DEFAULT for it",
									  col->path_text ? col->path_text : col->name, schema_id);
					*sqlstate = ERRCODE_INVALID_TEXT_REPRESENTATION;
					failed_column = -2;
					break;
				}
				values[i] = (Datum) 0;
				nulls[i] = true;
				continue;
			}
			failed_column = i;
			values[i] = span_datum(col, &spans[i], &nulls[i]);
		}
	}
	PG_CATCH();
	{
		ErrorData  *edata;
		SdpInputColumn *col;

		if (failed_column < 0)
			PG_RE_THROW();
		col = &schema->columns[failed_column];
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		edata->message = psprintf("field \"%s\": %s", col->path_text ? col->path_text : col->name, edata->message);
		ReThrowError(edata);
	}
	PG_END_TRY();
	return failed_column != -2;
}

/*
 * An Avro value as text: as JSON (json), or a key's way (a string as it
 * is, a number or boolean as its text, a record, array or map as JSON; a
 * null as NULL).  bytes holds the Confluent header (framed: 5 bytes) and
 * the body.  False with the reason when it cannot be read.
 */
bool
sdp_avro_value_text(SdpAvroSchema *writer, const void *bytes, size_t len, bool framed, bool json,
					char **text, char **error)
{
	AvroReader	r;
	StringInfoData buf;

	r.start = (const uint8 *) bytes + (framed ? 5 : 0);
	r.p = r.start;
	r.end = (const uint8 *) bytes + len;
	r.error = NULL;
	r.empty_items = SDP_AVRO_MAX_EMPTY_ITEMS;
	if (!walk(&r, writer->root, NULL, 0, NULL))
	{
		*error = r.error;
		return false;
	}
	if (r.p != r.end)
	{
		*error = psprintf("Avro body has %d bytes after its value (%d of %d read)",
						  (int) (r.end - r.p), (int) (r.p - r.start), (int) (r.end - r.start));
		return false;
	}
	r.p = r.start;
	initStringInfo(&buf);
	if (append_value(&buf, &r, writer->root, json) == JSON_TOKEN_NULL && !json)
	{
		*text = NULL;
		return true;
	}
	*text = buf.data;
	return true;
}

/*
 * json_decode.c
 *		A Kafka message's JSON payload -> the declared columns of "input".
 *
 * Fields are matched to columns by name, or by the path a column declares
 * (input_schema.c: 'lat float8 FROM position.lat'); a missing field or
 * JSON null is SQL NULL; a nested object or array goes whole into a jsonb
 * (or text) column, as it was sent.  Numbers given as strings are accepted where a
 * number is expected, and a number keeps its exact text on the way to
 * numeric and text columns.  timestamptz takes ISO-8601 text or epoch
 * seconds, milliseconds or microseconds (told apart by magnitude).
 *
 * The payload is parsed with PostgreSQL's own JSON parser (common/jsonapi),
 * which calls us back for each field and hands over the token's text: no
 * tree of the document is built, and nothing of a field the schema does
 * not declare is kept (the declared paths are a tree, walked as the
 * document is read).  It is strict JSON (RFC 8259), checked
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
#include "exec/json_decode.h"
#include "exec/json_path.h"
#include "compat.h"

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
 * A declared field's value as the parser found it: the token's text
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
	/* per nesting level, 0 (the document) to the schema's tree_depth: */
	SdpJsonNode **node_at;		/* the declared node the value there is, or NULL */
	const char **start_at;		/* where its object or array began */
	int		   *elem_at;		/* the index of its array's next element */
	bool		is_object;		/* the document is an object */
} DecodeState;

static inline SdpJsonNode *
node_at(DecodeState *st, int level)
{
	return level <= st->schema->tree_depth ? st->node_at[level] : NULL;
}

/* The value of node's columns is this text, of this kind. */
static void
set_columns(DecodeState *st, SdpJsonNode *node, char *text, int len, JsonTokenType type)
{
	for (int k = 0; k < node->ncolumns; k++)
	{
		FieldValue *f = &st->fields[node->columns[k]];

		f->text = text;
		f->len = len;
		f->type = type;
	}
}

static SDP_JSON_CALLBACK
on_field_start(void *state, char *fname, bool isnull)
{
	DecodeState *st = state;
	int			level = st->lex->lex_level;

	if (level <= st->schema->tree_depth)
	{
		SdpJsonNode *parent = node_at(st, level - 1);
		int			c = parent ? sdp_json_member(parent, fname, (int) strlen(fname)) : -1;

		st->node_at[level] = c >= 0 ? &parent->children[c] : NULL;
	}
	SDP_JSON_CALLBACK_DONE;
}

static SDP_JSON_CALLBACK
on_element_start(void *state, bool isnull)
{
	DecodeState *st = state;
	int			level = st->lex->lex_level;

	if (level <= st->schema->tree_depth)
	{
		SdpJsonNode *parent = node_at(st, level - 1);

		st->node_at[level] = parent ? sdp_json_element(parent, st->elem_at[level - 1]++) : NULL;
	}
	SDP_JSON_CALLBACK_DONE;
}

static SDP_JSON_CALLBACK
on_scalar(void *state, char *token, JsonTokenType type)
{
	DecodeState *st = state;
	SdpJsonNode *node = node_at(st, st->lex->lex_level);

	if (node != NULL && node->ncolumns > 0)
		set_columns(st, node, token, (int) strlen(token), type);
	SDP_JSON_CALLBACK_DONE;
}

static SDP_JSON_CALLBACK
on_nested_start(void *state)
{
	DecodeState *st = state;
	int			level = st->lex->lex_level;
	SdpJsonNode *node;

	/* the parser recurses per level: refuse a pathological depth before the stack limit does */
	if (level >= SDP_JSON_MAX_DEPTH)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("JSON nested deeper than %d levels", SDP_JSON_MAX_DEPTH)));
	if (level == 0)
		st->is_object = (st->lex->token_type == JSON_TOKEN_OBJECT_START);
	node = node_at(st, level);
	if (node != NULL)
	{
		st->start_at[level] = st->lex->token_start;
		st->elem_at[level] = 0;
	}
	SDP_JSON_CALLBACK_DONE;
}

static SDP_JSON_CALLBACK
on_nested_end(void *state)
{
	DecodeState *st = state;
	int			level = st->lex->lex_level;
	SdpJsonNode *node = node_at(st, level);

	if (node != NULL && node->ncolumns > 0)
	{
		const char *start = st->start_at[level];
		int			len = (int) (st->lex->prev_token_terminator - start);

		set_columns(st, node, pnstrdup(start, len), len,
					*start == '{' ? JSON_TOKEN_OBJECT_START : JSON_TOKEN_ARRAY_START);
	}
	SDP_JSON_CALLBACK_DONE;
}

/* ---- the fast path: a flat document, no escapes ---- */

/*
 * Most payloads are flat objects of plain values with no escape in any
 * string.  fast_scan reads such a document in one pass over a copy of the
 * text, with no callback, no copy of a name or a value, and no allocation
 * but the copy: each declared field's value stays where it is in the copy,
 * NUL-terminated in place once the whole document has been checked.  It
 * accepts only what PostgreSQL's parser accepts, and gives the same values;
 * anything it is not sure of (an escape, a control character, nesting
 * deeper than SDP_FAST_MAX_DEPTH, a token it does not recognize, invalid
 * JSON) makes it return false, and the document is parsed again by
 * PostgreSQL's parser, which gives the values or the reason.
 */
#define SDP_FAST_MAX_DEPTH 64

typedef struct FastScan
{
	char	   *p;
	char	   *end;
} FastScan;

static inline void
fast_skip_ws(FastScan *fs)
{
	while (fs->p < fs->end && (*fs->p == ' ' || *fs->p == '\n' || *fs->p == '\r' || *fs->p == '\t'))
		fs->p++;
}

/* After a number or a literal: the end, or what may follow a value. */
static inline bool
fast_at_delimiter(FastScan *fs)
{
	char		c;

	if (fs->p >= fs->end)
		return true;
	c = *fs->p;
	return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == ',' || c == '}' || c == ']';
}

/* A string at p (its opening quote): sets *start and *len to its contents, p past its closing quote. */
static inline bool
fast_string(FastScan *fs, char **start, int *len)
{
	char	   *q = fs->p + 1;

	while (q < fs->end)
	{
		unsigned char c = (unsigned char) *q;

		if (c == '"')
		{
			*start = fs->p + 1;
			*len = (int) (q - *start);
			fs->p = q + 1;
			return true;
		}
		if (c == '\\' || c < 0x20)
			return false;
		q++;
	}
	return false;
}

/* A number as RFC 8259 writes it: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static inline bool
fast_number(FastScan *fs)
{
	char	   *q = fs->p;
	char	   *e = fs->end;

	if (q < e && *q == '-')
		q++;
	if (q >= e)
		return false;
	if (*q == '0')
		q++;
	else if (*q >= '1' && *q <= '9')
		while (q < e && *q >= '0' && *q <= '9')
			q++;
	else
		return false;
	if (q < e && *q == '.')
	{
		q++;
		if (q >= e || *q < '0' || *q > '9')
			return false;
		while (q < e && *q >= '0' && *q <= '9')
			q++;
	}
	if (q < e && (*q == 'e' || *q == 'E'))
	{
		q++;
		if (q < e && (*q == '+' || *q == '-'))
			q++;
		if (q >= e || *q < '0' || *q > '9')
			return false;
		while (q < e && *q >= '0' && *q <= '9')
			q++;
	}
	fs->p = q;
	return fast_at_delimiter(fs);
}

static inline bool
fast_literal(FastScan *fs, const char *word, int len)
{
	if (fs->end - fs->p < len || memcmp(fs->p, word, len) != 0)
		return false;
	fs->p += len;
	return fast_at_delimiter(fs);
}

/* Any value at p, checked and skipped; *type says what it was. */
static bool
fast_value(FastScan *fs, int depth, JsonTokenType *type)
{
	char	   *s;
	int			len;

	if (fs->p >= fs->end)
		return false;
	switch (*fs->p)
	{
		case '"':
			*type = JSON_TOKEN_STRING;
			return fast_string(fs, &s, &len);
		case 't':
			*type = JSON_TOKEN_TRUE;
			return fast_literal(fs, "true", 4);
		case 'f':
			*type = JSON_TOKEN_FALSE;
			return fast_literal(fs, "false", 5);
		case 'n':
			*type = JSON_TOKEN_NULL;
			return fast_literal(fs, "null", 4);
		case '{':
		case '[':
			{
				char		close = *fs->p == '{' ? '}' : ']';
				JsonTokenType inner;

				if (depth >= SDP_FAST_MAX_DEPTH)
					return false;
				*type = close == '}' ? JSON_TOKEN_OBJECT_START : JSON_TOKEN_ARRAY_START;
				fs->p++;
				fast_skip_ws(fs);
				if (fs->p < fs->end && *fs->p == close)
				{
					fs->p++;
					return true;
				}
				for (;;)
				{
					if (close == '}')
					{
						if (fs->p >= fs->end || *fs->p != '"' || !fast_string(fs, &s, &len))
							return false;
						fast_skip_ws(fs);
						if (fs->p >= fs->end || *fs->p != ':')
							return false;
						fs->p++;
						fast_skip_ws(fs);
					}
					if (!fast_value(fs, depth + 1, &inner))
						return false;
					fast_skip_ws(fs);
					if (fs->p >= fs->end)
						return false;
					if (*fs->p == close)
					{
						fs->p++;
						return true;
					}
					if (*fs->p != ',')
						return false;
					fs->p++;
					fast_skip_ws(fs);
				}
			}
		default:
			*type = JSON_TOKEN_NUMBER;
			return fast_number(fs);
	}
}

/*
 * The object or array at p, below a member or element that declared paths
 * go through (node): checked and skipped as fast_value does, and the value
 * of every node below it with columns copied into fields[] (a copy: the
 * text around it may be a column's value too).  A value that is not what a
 * path expects (a scalar where it goes on, an array where it names a
 * member) leaves the column absent, as a missing field does.
 */
static bool
fast_descend(FastScan *fs, SdpJsonNode *node, int depth, FieldValue *fields)
{
	char		close = *fs->p == '{' ? '}' : ']';
	int			index = 0;

	if (depth >= SDP_FAST_MAX_DEPTH)
		return false;
	fs->p++;
	fast_skip_ws(fs);
	if (fs->p < fs->end && *fs->p == close)
	{
		fs->p++;
		return true;
	}
	for (;;)
	{
		SdpJsonNode *child;
		char	   *vstart;
		JsonTokenType type;

		if (close == '}')
		{
			char	   *name;
			int			nlen;
			int			c;

			if (fs->p >= fs->end || *fs->p != '"' || !fast_string(fs, &name, &nlen))
				return false;
			c = sdp_json_member(node, name, nlen);
			child = c >= 0 ? &node->children[c] : NULL;
			fast_skip_ws(fs);
			if (fs->p >= fs->end || *fs->p != ':')
				return false;
			fs->p++;
			fast_skip_ws(fs);
		}
		else
			child = sdp_json_element(node, index++);
		vstart = fs->p;
		if (child != NULL && child->nchildren > 0 && fs->p < fs->end && (*fs->p == '{' || *fs->p == '['))
		{
			type = *fs->p == '{' ? JSON_TOKEN_OBJECT_START : JSON_TOKEN_ARRAY_START;
			if (!fast_descend(fs, child, depth + 1, fields))
				return false;
		}
		else if (!fast_value(fs, depth + 1, &type))
			return false;
		for (int k = 0; child != NULL && k < child->ncolumns; k++)
		{
			FieldValue *f = &fields[child->columns[k]];

			f->type = type;
			if (type == JSON_TOKEN_STRING)
			{
				f->len = (int) (fs->p - vstart) - 2;
				f->text = pnstrdup(vstart + 1, f->len);
			}
			else
			{
				f->len = (int) (fs->p - vstart);
				f->text = pnstrdup(vstart, f->len);
			}
		}
		fast_skip_ws(fs);
		if (fs->p >= fs->end)
			return false;
		if (*fs->p == close)
		{
			fs->p++;
			return true;
		}
		if (*fs->p != ',')
			return false;
		fs->p++;
		fast_skip_ws(fs);
	}
}

/*
 * The document in text (len bytes, followed by a NUL) as an object: fills
 * fields[] as the parser's callbacks would (the last of a repeated field
 * wins) and returns true, or false when it is not sure (see above).  Writes
 * NULs into text after each top-level value of a column.
 */
static bool
fast_scan(SdpInputSchema *schema, char *text, int len, FieldValue *fields)
{
	FastScan	fs = {text, text + len};
	SdpJsonNode *root = schema->tree;
	char	  **ends = palloc0(sizeof(char *) * Max(schema->ncolumns, 1));
	int			nfield = 0;
	int			hint;

	fast_skip_ws(&fs);
	if (fs.p >= fs.end || *fs.p != '{')
		return false;
	fs.p++;
	fast_skip_ws(&fs);
	if (fs.p < fs.end && *fs.p == '}')
		fs.p++;
	else
	{
		for (;;)
		{
			char	   *name;
			int			nlen;
			int			child = -1;
			SdpJsonNode *node;
			char	   *vstart;
			JsonTokenType type;

			if (fs.p >= fs.end || *fs.p != '"' || !fast_string(&fs, &name, &nlen))
				return false;
			/* the member this field position had in the previous document first: producers keep their order */
			hint = nfield < SDP_FIELD_HINTS ? schema->field_hint[nfield] : -1;
			if (hint >= 0 && root->children[hint].keylen == nlen &&
				memcmp(root->children[hint].key, name, nlen) == 0)
				child = hint;
			else
			{
				child = sdp_json_member(root, name, nlen);
				if (nfield < SDP_FIELD_HINTS)
					schema->field_hint[nfield] = child;
			}
			nfield++;
			fast_skip_ws(&fs);
			if (fs.p >= fs.end || *fs.p != ':')
				return false;
			fs.p++;
			fast_skip_ws(&fs);
			vstart = fs.p;
			node = child >= 0 ? &root->children[child] : NULL;
			if (node != NULL && node->nchildren > 0 && (*fs.p == '{' || *fs.p == '['))
			{
				/* a path goes on below this member */
				type = *fs.p == '{' ? JSON_TOKEN_OBJECT_START : JSON_TOKEN_ARRAY_START;
				if (!fast_descend(&fs, node, 1, fields))
					return false;
			}
			else if (!fast_value(&fs, 1, &type))
				return false;
			for (int k = 0; node != NULL && k < node->ncolumns; k++)
			{
				int			column = node->columns[k];
				FieldValue *f = &fields[column];

				f->type = type;
				if (type == JSON_TOKEN_STRING)
				{
					f->text = vstart + 1;
					f->len = (int) (fs.p - vstart) - 2;
					ends[column] = fs.p - 1;
				}
				else
				{
					f->text = vstart;
					f->len = (int) (fs.p - vstart);
					ends[column] = fs.p;
				}
			}
			fast_skip_ws(&fs);
			if (fs.p >= fs.end)
				return false;
			if (*fs.p == '}')
			{
				fs.p++;
				break;
			}
			if (*fs.p != ',')
				return false;
			fs.p++;
			fast_skip_ws(&fs);
		}
	}
	fast_skip_ws(&fs);
	if (fs.p != fs.end)
		return false;
	/*
	 * checked whole: terminate the top-level values in place (a closing
	 * quote or a delimiter, or the final NUL); a nested one is a copy
	 */
	for (int i = 0; i < schema->ncolumns; i++)
		if (fields[i].type != JSON_TOKEN_INVALID && ends[i] != NULL)
			*ends[i] = '\0';
	pfree(ends);
	return true;
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

/*
 * A plain decimal of at most 15 digits, -?[0-9]+(.[0-9]+)?, exactly as
 * strtod (so float8in) reads it: the digits as an integer and 10 to the
 * power of the fraction's length are both exact doubles, and IEEE division
 * rounds their quotient correctly, as strtod rounds the decimal (Clinger's
 * fast path).  False for anything else, which float8in reads.
 */
static bool
simple_decimal(const char *s, double *result)
{
	static const double pow10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8,
	1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};
	bool		neg = false;
	int64		m = 0;
	int			digits = 0;
	int			frac = 0;

	if (*s == '-')
	{
		neg = true;
		s++;
	}
	if (*s < '0' || *s > '9')
		return false;
	while (*s >= '0' && *s <= '9')
	{
		m = m * 10 + (*s++ - '0');
		if (++digits > 15)
			return false;
	}
	if (*s == '.')
	{
		s++;
		if (*s < '0' || *s > '9')
			return false;
		while (*s >= '0' && *s <= '9')
		{
			m = m * 10 + (*s++ - '0');
			frac++;
			if (++digits > 15)
				return false;
		}
	}
	if (*s != '\0')
		return false;
	*result = (double) m / pow10[frac];
	if (neg)
		*result = -*result;
	return true;
}

static double
field_to_double(const SdpInputColumn *col, const FieldValue *f)
{
	double		d;

	if ((f->type == JSON_TOKEN_NUMBER || f->type == JSON_TOKEN_STRING) && simple_decimal(f->text, &d))
		return d;
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

static inline bool
digits_at(const char *s, int n, int *value)
{
	int			v = 0;

	for (int i = 0; i < n; i++)
	{
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (s[i] - '0');
	}
	*value = v;
	return true;
}

/*
 * The common ISO 8601 form with an explicit zone, as timestamptz_in reads
 * it: YYYY-MM-DD, 'T' or a space, HH:MM:SS, up to 6 digits of fraction,
 * then Z or +HH:MM / -HH:MM.  The result does not depend on the session
 * (TimeZone, DateStyle).  False for anything else (another form, no zone,
 * a leap second, 24:00:00, a typmod), which timestamptz_in reads.
 */
static bool
simple_iso_timestamptz(const char *s, int len, int32 typmod, TimestampTz *result)
{
	int			year,
				mon,
				mday,
				hour,
				min,
				sec,
				fsec = 0,
				zh = 0,
				zm = 0;
	const char *p = s + 19;
	int64		t;

	if (typmod >= 0 || len < 20 || s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != ' ') ||
		s[13] != ':' || s[16] != ':' ||
		!digits_at(s, 4, &year) || !digits_at(s + 5, 2, &mon) || !digits_at(s + 8, 2, &mday) ||
		!digits_at(s + 11, 2, &hour) || !digits_at(s + 14, 2, &min) || !digits_at(s + 17, 2, &sec))
		return false;
	if (year < 1 || mon < 1 || mon > MONTHS_PER_YEAR ||
		mday < 1 || mday > day_tab[isleap(year)][mon - 1] ||
		hour > 23 || min > 59 || sec > 59)
		return false;
	if (*p == '.')
	{
		int			n = 0;

		p++;
		while (*p >= '0' && *p <= '9')
		{
			if (++n > 6)
				return false;
			fsec = fsec * 10 + (*p++ - '0');
		}
		if (n == 0)
			return false;
		for (; n < 6; n++)
			fsec *= 10;
	}
	if (*p == 'Z' && p[1] == '\0')
		;
	else if ((*p == '+' || *p == '-') && digits_at(p + 1, 2, &zh) && p[3] == ':' &&
			 digits_at(p + 4, 2, &zm) && p[6] == '\0' && zh <= 15 && zm <= 59)
	{
		if (*p == '-')
		{
			zh = -zh;
			zm = -zm;
		}
	}
	else
		return false;
	t = (int64) (date2j(year, mon, mday) - POSTGRES_EPOCH_JDATE) * USECS_PER_DAY +
		((int64) hour * SECS_PER_HOUR + min * SECS_PER_MINUTE + sec) * USECS_PER_SEC + fsec -
		((int64) zh * SECS_PER_HOUR + zm * SECS_PER_MINUTE) * USECS_PER_SEC;
	if (!IS_VALID_TIMESTAMP(t))
		return false;
	*result = t;
	return true;
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
			{
				TimestampTz ts;

				if (simple_iso_timestamptz(f->text, f->len, col->typmod, &ts))
					return TimestampTzGetDatum(ts);
				return DirectFunctionCall3(timestamptz_in,
										   CStringGetDatum(f->text),
										   ObjectIdGetDatum(InvalidOid),
										   Int32GetDatum(col->typmod));
			}
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

	st.fields = palloc0(sizeof(FieldValue) * Max(schema->ncolumns, 1));
	{
		char	   *copy = palloc(len + 1);

		memcpy(copy, text, len);
		copy[len] = '\0';
		if (fast_scan(schema, copy, (int) len, st.fields))
			goto convert;
		/* not sure: PostgreSQL's parser decides, from scratch */
		pfree(copy);
		memset(st.fields, 0, sizeof(FieldValue) * Max(schema->ncolumns, 1));
	}

	st.lex = sdp_json_lexer(text, len, GetDatabaseEncoding(), true);
	st.schema = schema;
	st.node_at = palloc0(sizeof(SdpJsonNode *) * (schema->tree_depth + 1));
	st.node_at[0] = schema->tree;
	st.start_at = palloc0(sizeof(char *) * (schema->tree_depth + 1));
	st.elem_at = palloc0(sizeof(int) * (schema->tree_depth + 1));
	sem.semstate = &st;
	sem.object_start = on_nested_start;
	sem.array_start = on_nested_start;
	sem.object_end = on_nested_end;
	sem.array_end = on_nested_end;
	sem.object_field_start = on_field_start;
	sem.array_element_start = on_element_start;
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

convert:
	PG_TRY();
	{
		for (int i = 0; i < schema->ncolumns; i++)
		{
			FieldValue *f = &st.fields[i];

			if (f->type == JSON_TOKEN_INVALID && schema->columns[i].has_default)
			{
				/* a field the document does not have: the declared default */
				values[i] = schema->columns[i].default_value;
				nulls[i] = schema->columns[i].default_isnull;
				continue;
			}
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
		SdpInputColumn *col = &schema->columns[failed_column];

		MemoryContextSwitchTo(cxt);
		rethrow_with_prefix(cxt, psprintf("field \"%s\"", col->path_text ? col->path_text : col->name));
	}
	PG_END_TRY();
	return true;
}

/* Whether Kafka bytes (key, payload) can be stored as text in this database. */
bool
sdp_bytes_are_text(const void *bytes, size_t len)
{
	return bytes != NULL && len < MaxAllocSize &&
		memchr(bytes, '\0', len) == NULL &&
		pg_verify_mbstr(GetDatabaseEncoding(), bytes, (int) len, true);
}

/*
 * A value of another format (avro_decode.c) as JSON would have given it,
 * its text and its token's kind, into its column: the same conversions,
 * so a column reads the same value alike from either format.  Raises as
 * field_to_datum does.
 */
Datum
sdp_json_value_datum(SdpInputColumn *col, char *text, int len, JsonTokenType type)
{
	FieldValue	f;

	f.text = text;
	f.len = len;
	f.type = type;
	return field_to_datum(col, &f);
}

/*
 * sdp_fuzz.c
 *		libFuzzer targets that need a PostgreSQL backend: the registry's
 *		answers, the Avro decoder and its schemas, the JSON decoder (its fast
 *		path checked against PostgreSQL's parser) and Debezium's envelope.
 *
 * Built by fuzz/Makefile with the extension's sources (all but main.c: no
 * _PG_init, no hooks, no launcher) into sdp_fuzz.so, a module apart from
 * sdp_ext.so that is never installed with it.  scripts/fuzz.sh loads it
 * into a throwaway single-user backend (postgres --single) of a server
 * that does not preload sdp_ext, and calls
 *
 *		SELECT sdp_fuzz_run('json_decode', ARRAY['-max_total_time=60', ...]);
 *
 * which hands the arguments to libFuzzer (LLVMFuzzerRunDriver, from
 * libclang_rt.fuzzer_no_main): it runs each input through the target in a
 * subtransaction of its own, in a memory context reset after it, until
 * its time is up, then ends the process itself.  An ERROR is an answer to
 * an input, rolled back; a crash, an Assert(), a sanitizer's report, an
 * internal error (XX000: palloc's "invalid memory alloc request size"
 * among them), a WARNING (the memory checks' "detected write past chunk
 * end", a resource leaked past a subtransaction, ...), or an input that
 * runs past -timeout is a bug, and libFuzzer saves the input.  Memory
 * that inputs leave behind, growing past a limit, is a bug too (the input
 * saved then is only the last one).
 *
 * The targets (each input's layout is at its function):
 *	registry_answer	a schema registry's answer for an id (and for its
 *					references), as a worker keeps and parses it, then a
 *					message of that schema through sdp_formats_decode and
 *					sdp_formats_key
 *	avro_decode		an Avro body of one of a few fixed writer schemas
 *	avro_schema		an Avro writer schema's text, then a body of it
 *	json_decode		a JSON message into a rich fixed input schema; when the
 *					fast path read it, PostgreSQL's parser must read the
 *					same values from it
 *	debezium		a Debezium change event (JSON or Avro) and its key
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "decl/envelope.h"
#include "decl/input_schema.h"
#include "exec/avro_decode.h"
#include "exec/json_decode.h"
#include "exec/protobuf.h"
#include "kafka/schema_registry.h"
#include "worker/debezium.h"
#include "worker/formats.h"
#include "worker/worker_internal.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(sdp_fuzz_run);

/* libFuzzer's entry point for a program that has its own main (here: the backend's) */
extern int	LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback) (const uint8_t *data, size_t size));
/* fuzz/pb_quiet.cc */
extern void sdp_fuzz_quiet_protobuf(void);

typedef struct FuzzTarget
{
	const char *name;
	void		(*init) (void); /* once, in fuzz_cxt */
	void		(*run) (const uint8 *data, size_t size);	/* one input, in input_cxt; may raise */
} FuzzTarget;

static const FuzzTarget *target;
static MemoryContext fuzz_cxt;	/* the targets' fixed state, for the process's life */
static MemoryContext input_cxt; /* one input's, reset after it */
static emit_log_hook_type prev_emit_log_hook;
static bool verbose;			/* SDP_FUZZ_VERBOSE set: say what each input gave (to check the seeds) */

static void
note(const char *what, const char *text)
{
	if (verbose)
		fprintf(stderr, "sdp_fuzz: %s: %s\n", what, text ? text : "(null)");
}

/* ---- inputs ---- */

/*
 * An input's bytes are handed to the code under test in malloc'd copies
 * of their exact size (as libFuzzer's own buffer is), so that AddressSanitizer,
 * when the backend runs with it, sees a read past their end; freed after
 * the input.
 */
#define MAX_COPIES 8
static void *copies[MAX_COPIES];
static int	ncopies;

/* prefix (plen bytes) then data (len bytes), and a NUL after them when nul. */
static uint8 *
copy_bytes(const uint8 *prefix, size_t plen, const uint8 *data, size_t len, bool nul)
{
	uint8	   *b = malloc(plen + len + (nul ? 1 : 0) + (plen + len == 0 ? 1 : 0));

	if (b == NULL || ncopies >= MAX_COPIES)
		elog(FATAL, "sdp_fuzz: cannot copy an input");
	copies[ncopies++] = b;
	if (plen > 0)
		memcpy(b, prefix, plen);
	if (len > 0)
		memcpy(b + plen, data, len);
	if (nul)
		b[plen + len] = '\0';
	return b;
}

static void
free_copies(void)
{
	while (ncopies > 0)
		free(copies[--ncopies]);
}

/* The next NUL-terminated part of [*p, end) (all that is left when there is no NUL) as a string, *p past it. */
static char *
next_part(const uint8 **p, const uint8 *end)
{
	const uint8 *nul = memchr(*p, 0, end - *p);
	size_t		len = nul ? (size_t) (nul - *p) : (size_t) (end - *p);
	char	   *s = (char *) copy_bytes(NULL, 0, *p, len, true);

	*p = nul ? nul + 1 : end;
	return s;
}

/* ---- what is a bug ---- */

/*
 * A WARNING while an input runs: the memory checks' ("detected write past
 * chunk end"), a resource leaked past a subtransaction ("relcache reference
 * leak"), or anything else a decoder would write into the server's log for
 * one message: a bug.
 */
static void
fuzz_log_hook(ErrorData *edata)
{
	if (prev_emit_log_hook)
		prev_emit_log_hook(edata);
	if (edata->elevel == WARNING)
	{
		fprintf(stderr, "sdp_fuzz: a WARNING while an input ran: %s\n", edata->message ? edata->message : "?");
		abort();
	}
}

/* An error raised by an input: an answer, unless it says the code is wrong (XX000, ...). */
static void
check_error(ErrorData *edata)
{
	if (ERRCODE_TO_CATEGORY(edata->sqlerrcode) == ERRCODE_INTERNAL_ERROR)
	{
		fprintf(stderr, "sdp_fuzz: an internal error (%s) is no answer to an input: %s (%s:%d)\n",
				unpack_sql_state(edata->sqlerrcode), edata->message,
				edata->filename ? edata->filename : "?", edata->lineno);
		abort();
	}
}

/*
 * fn(arg) in a subtransaction: false with its error (checked, copied into
 * the caller's context) when it raised.
 */
static bool
in_subtransaction(void (*fn) (void *), void *arg, ErrorData **error)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile bool ok = true;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		fn(arg);
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		check_error(edata);
		note("raised", edata->message);
		if (error)
			*error = edata;
		ok = false;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	return ok;
}

typedef struct OneInput
{
	const uint8 *data;
	size_t		size;
} OneInput;

static void
run_target(void *arg)
{
	OneInput   *in = arg;

	target->run(in->data, in->size);
}

/* AddressSanitizer's count of the bytes malloc'd and not freed, when it runs (palloc's blocks included) */
extern size_t __sanitizer_get_current_allocated_bytes(void) __attribute__((weak));

/*
 * The memory the backend holds: what ASan counts as allocated, else what
 * the memory contexts hold.  One input's memory is freed after it, and the
 * targets' fixed state stops growing after the first inputs (caches), so
 * steady growth is memory each input leaves behind: a worker would grow so
 * with every message.
 */
static Size
memory_held(void)
{
	if (__sanitizer_get_current_allocated_bytes)
		return __sanitizer_get_current_allocated_bytes();
	return MemoryContextMemAllocated(TopMemoryContext, true);
}

#define GROWTH_EVERY 10000		/* inputs between two looks */
#define GROWTH_LIMIT (256 * 1024 * 1024)	/* past the look after the first GROWTH_EVERY inputs */

/* libFuzzer's callback: one input. */
static int
run_one(const uint8_t *data, size_t size)
{
	static uint64 inputs;
	static Size baseline;
	MemoryContext oldcxt = MemoryContextSwitchTo(input_cxt);
	OneInput	in = {data, size};

	in_subtransaction(run_target, &in, NULL);
	MemoryContextSwitchTo(oldcxt);
	MemoryContextReset(input_cxt);
	free_copies();

	if (++inputs % GROWTH_EVERY == 0)
	{
		Size		held = memory_held();

		if (inputs == GROWTH_EVERY)
			baseline = held;
		fprintf(stderr, "sdp_fuzz: %llu inputs: %zu kB held\n", (unsigned long long) inputs, held / 1024);
		if (held > baseline + GROWTH_LIMIT)
		{
			fprintf(stderr, "sdp_fuzz: the backend holds %zu MB more than after %d inputs: the inputs leave memory behind\n",
					(held - baseline) / (1024 * 1024), GROWTH_EVERY);
			abort();
		}
	}
	return 0;
}

/* ---- helpers ---- */

/* Bytes with Confluent's header for schema id in front. */
static uint8 *
framed(int32 id, const uint8 *body, size_t len)
{
	uint8		header[5];

	header[0] = 0;
	header[1] = (uint8) ((uint32) id >> 24);
	header[2] = (uint8) ((uint32) id >> 16);
	header[3] = (uint8) ((uint32) id >> 8);
	header[4] = (uint8) id;
	return copy_bytes(header, 5, body, len, false);
}

/* A registry's answer for an Avro schema: {"schema": "<its text>"}. */
static char *
avro_answer(const char *schema)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"schema\": ");
	escape_json(&buf, schema);
	appendStringInfoString(&buf, "}");
	return buf.data;
}

/* The decoded values as text, column by column (their output functions), to compare two decodings. */
static char *
values_text(SdpInputSchema *schema, int ncolumns, Datum *values, bool *nulls)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; i < ncolumns; i++)
	{
		Oid			typoutput;
		bool		varlena;

		if (nulls[i])
		{
			appendStringInfoString(&buf, "NULL|");
			continue;
		}
		getTypeOutputInfo(schema->columns[i].typid, &typoutput, &varlena);
		appendStringInfo(&buf, "%s|", OidOutputFunctionCall(typoutput, values[i]));
	}
	return buf.data;
}

static Datum *
new_values(SdpInputSchema *schema)
{
	return palloc0(sizeof(Datum) * (schema->ncolumns + SDP_NUM_META));
}

static bool *
new_nulls(SdpInputSchema *schema)
{
	return palloc0(sizeof(bool) * (schema->ncolumns + SDP_NUM_META));
}

/* ---- json_decode ---- */

/*
 * Every kind of column the decoder converts to, paths into objects and
 * arrays, a path below another column's, two columns of one path,
 * defaults, a quoted name.
 */
static const char *const json_schema_text =
"b bool, i2 int2, i4 int, i8 bigint, f4 real, f8 float8, n numeric, n2 numeric(6,2), t text, vc varchar(4), "
"ts timestamptz, ts3 timestamptz(3), tsl timestamp, d date, tm time, iv interval, u uuid, by bytea, "
"j jsonb, js json, ip inet, ch char(3), vb varbit(8), e text DEFAULT 'none', ed int DEFAULT 7, "
"pos jsonb FROM position, lat float8 FROM position.lat, lat2 text FROM position.lat, lon float8 FROM position.lon, "
"tag text FROM tags[0], tag3 text FROM tags[3], deep text FROM a.b[1].c, deepj jsonb FROM a.b, "
"q text FROM \"Quoted Name\", qq int FROM \"Quoted Name\".\"x y\", m0 jsonb FROM m[0][1]";

static SdpInputSchema *json_schema;

static void
json_init(void)
{
	json_schema = sdp_parse_input_schema(json_schema_text);
}

/* How one decoding of a document ended, as text to compare. */
typedef struct Decoding
{
	SdpInputSchema *schema;
	const char *doc;
	size_t		len;
	int			kind;			/* 0 decoded, 1 refused (false), 2 raised */
	char	   *text;			/* the values, the reason, or the error's SQLSTATE */
	char	   *message;		/* the error's message */
} Decoding;

static void
json_decode_one(void *arg)
{
	Decoding   *d = arg;
	Datum	   *values = new_values(d->schema);
	bool	   *nulls = new_nulls(d->schema);
	char	   *error = NULL;
	int			sqlstate;

	if (sdp_decode_message(d->schema, d->doc, d->len, values, nulls, &error, &sqlstate))
	{
		d->kind = 0;
		d->text = values_text(d->schema, d->schema->ncolumns, values, nulls);
	}
	else
	{
		d->kind = 1;
		d->text = error;
	}
}

static void
json_decode(Decoding *d)
{
	ErrorData  *e;

	if (!in_subtransaction(json_decode_one, d, &e))
	{
		d->kind = 2;
		d->text = pstrdup(unpack_sql_state(e->sqlerrcode));
		d->message = e->message;
	}
}

/*
 * A JSON message (bytes, as Kafka gives them).  Decoded as it is, then,
 * when it is an object, again with a member in front whose name has an
 * escape ("\u007a_sdp_fuzz", no column's): the fast path gives up on it,
 * so PostgreSQL's parser reads the rest, and must find the same values
 * (or raise the same error) as the first decoding, which the fast path
 * may have made.
 */
static void
json_run(const uint8 *data, size_t size)
{
	Decoding	a = {json_schema, (const char *) data, size};
	Decoding	b = {json_schema};
	size_t		brace = 0;
	StringInfoData doc;

	json_decode(&a);
	note(a.kind == 0 ? "decoded" : a.kind == 1 ? "refused" : "raised", a.kind == 2 ? a.message : a.text);
	while (brace < size && (data[brace] == ' ' || data[brace] == '\t' || data[brace] == '\n' || data[brace] == '\r'))
		brace++;
	if (brace >= size || data[brace] != '{')
		return;

	initStringInfo(&doc);
	appendBinaryStringInfo(&doc, (const char *) data, brace + 1);
	appendStringInfoString(&doc, "\"\\u007a_sdp_fuzz\": 0");
	{
		size_t		rest = brace + 1;

		while (rest < size && (data[rest] == ' ' || data[rest] == '\t' || data[rest] == '\n' || data[rest] == '\r'))
			rest++;
		if (rest < size && data[rest] != '}')
			appendStringInfoChar(&doc, ',');
	}
	appendBinaryStringInfo(&doc, (const char *) data + brace + 1, size - brace - 1);
	b.doc = (const char *) copy_bytes(NULL, 0, (const uint8 *) doc.data, doc.len, false);
	b.len = doc.len;
	json_decode(&b);

	if ((a.kind == 0 || b.kind == 0) && (a.kind != b.kind || strcmp(a.text, b.text) != 0))
	{
		fprintf(stderr, "sdp_fuzz: the fast path and PostgreSQL's parser disagree\n  as sent:  %d %s %s\n  parser's: %d %s %s\n",
				a.kind, a.text, a.message ? a.message : "", b.kind, b.text, b.message ? b.message : "");
		abort();
	}
	if (a.kind == 2 && b.kind == 2 && strcmp(a.text, b.text) != 0)
	{
		fprintf(stderr, "sdp_fuzz: the fast path and PostgreSQL's parser raise different errors\n  as sent:  %s %s\n  parser's: %s %s\n",
				a.text, a.message, b.text, b.message);
		abort();
	}
}

/* ---- Avro ---- */

/* Test 049's payment, its evolutions' fields all in one. */
static const char *const avro_payment =
"{\"type\": \"record\", \"name\": \"Payment\", \"namespace\": \"sdp.test\", \"fields\": ["
" {\"name\": \"id\", \"type\": \"long\"},"
" {\"name\": \"amount\", \"type\": {\"type\": \"bytes\", \"logicalType\": \"decimal\", \"precision\": 12, \"scale\": 2}},"
" {\"name\": \"at\", \"type\": {\"type\": \"long\", \"logicalType\": \"timestamp-micros\"}},"
" {\"name\": \"day\", \"type\": {\"type\": \"int\", \"logicalType\": \"date\"}},"
" {\"name\": \"tod\", \"type\": {\"type\": \"int\", \"logicalType\": \"time-millis\"}},"
" {\"name\": \"tod_us\", \"type\": {\"type\": \"long\", \"logicalType\": \"time-micros\"}},"
" {\"name\": \"at_ms\", \"type\": {\"type\": \"long\", \"logicalType\": \"timestamp-millis\"}},"
" {\"name\": \"local_at\", \"type\": {\"type\": \"long\", \"logicalType\": \"local-timestamp-micros\"}},"
" {\"name\": \"ref\", \"type\": {\"type\": \"string\", \"logicalType\": \"uuid\"}},"
" {\"name\": \"small\", \"type\": \"int\"},"
" {\"name\": \"ratio\", \"type\": \"double\"},"
" {\"name\": \"f4\", \"type\": \"float\"},"
" {\"name\": \"ok\", \"type\": \"boolean\"},"
" {\"name\": \"kind\", \"type\": {\"type\": \"enum\", \"name\": \"Kind\", \"symbols\": [\"CARD\", \"CASH\"]}},"
" {\"name\": \"raw\", \"type\": \"bytes\"},"
" {\"name\": \"pos\", \"type\": {\"type\": \"record\", \"name\": \"Pos\", \"fields\": ["
"   {\"name\": \"lat\", \"type\": \"double\"}, {\"name\": \"lon\", \"type\": \"double\"}]}},"
" {\"name\": \"tags\", \"type\": {\"type\": \"array\", \"items\": \"string\"}},"
" {\"name\": \"qty\", \"type\": [\"null\", \"int\", \"string\"], \"default\": null},"
" {\"name\": \"note\", \"type\": \"string\", \"default\": \"\"}]}";
static const char *const avro_payment_columns =
"id bigint, amount numeric(12,2), at timestamptz, day date, tod time, tod_us time, at_ms timestamptz, "
"local_at timestamp, ref uuid, small int, ratio float8, f4 real, ok boolean, kind text, raw bytea, "
"lat float8 FROM pos.lat, first_tag text FROM tags[0], qty int, note text DEFAULT NULL, "
"pos jsonb, tags jsonb, old text DEFAULT 'gone'";

/* Every type, a fixed decimal, maps of records, a wide union, a type that holds itself. */
static const char *const avro_every =
"{\"type\": \"record\", \"name\": \"Every\", \"namespace\": \"x\", \"fields\": ["
" {\"name\": \"b\", \"type\": \"boolean\"}, {\"name\": \"i\", \"type\": \"int\"}, {\"name\": \"l\", \"type\": \"long\"},"
" {\"name\": \"f\", \"type\": \"float\"}, {\"name\": \"d\", \"type\": \"double\"}, {\"name\": \"s\", \"type\": \"string\"},"
" {\"name\": \"by\", \"type\": \"bytes\"}, {\"name\": \"n\", \"type\": \"null\"},"
" {\"name\": \"e\", \"type\": {\"type\": \"enum\", \"name\": \"E\", \"symbols\": [\"A\", \"B\", \"C\"]}},"
" {\"name\": \"fx\", \"type\": {\"type\": \"fixed\", \"name\": \"F\", \"size\": 4}},"
" {\"name\": \"dfix\", \"type\": {\"type\": \"fixed\", \"name\": \"D\", \"size\": 8, \"logicalType\": \"decimal\", \"precision\": 18, \"scale\": 4}},"
" {\"name\": \"dbytes\", \"type\": {\"type\": \"bytes\", \"logicalType\": \"decimal\", \"precision\": 38, \"scale\": 10}},"
" {\"name\": \"arr\", \"type\": {\"type\": \"array\", \"items\": \"long\"}},"
" {\"name\": \"m\", \"type\": {\"type\": \"map\", \"values\": \"int\"}},"
" {\"name\": \"mrec\", \"type\": {\"type\": \"map\", \"values\": {\"type\": \"record\", \"name\": \"Pt\", \"fields\": ["
"   {\"name\": \"x\", \"type\": \"int\"}, {\"name\": \"y\", \"type\": [\"null\", \"int\"]}]}}},"
" {\"name\": \"u\", \"type\": [\"null\", \"int\", \"string\", \"Pt\", {\"type\": \"array\", \"items\": \"string\"},"
"   {\"type\": \"map\", \"values\": \"long\"}, \"F\", \"E\", \"double\", \"boolean\", \"bytes\"]},"
" {\"name\": \"ts_ms\", \"type\": {\"type\": \"long\", \"logicalType\": \"timestamp-millis\"}},"
" {\"name\": \"lts_ms\", \"type\": {\"type\": \"long\", \"logicalType\": \"local-timestamp-millis\"}},"
" {\"name\": \"dt\", \"type\": {\"type\": \"int\", \"logicalType\": \"date\"}},"
" {\"name\": \"t_us\", \"type\": {\"type\": \"long\", \"logicalType\": \"time-micros\"}},"
" {\"name\": \"uid\", \"type\": {\"type\": \"string\", \"logicalType\": \"uuid\"}},"
" {\"name\": \"next\", \"type\": [\"null\", \"Every\"], \"default\": null}]}";
static const char *const avro_every_columns =
"b bool, i int2, l int8, f float4, d float8, s text, by bytea, n text, e text, fx bytea, dfix numeric, "
"dbytes numeric, arr jsonb, a0 int8 FROM arr[0], a1 text FROM arr[1], m jsonb, mx int FROM m.x, mrec jsonb, "
"mrx int FROM mrec.k.x, u jsonb, ut text FROM u, ux int FROM u.x, u1 text FROM u[1], ts_ms timestamptz, "
"lts_ms timestamp, dt date, t_us time, uid uuid, nxt jsonb FROM next, nn text FROM next.s, "
"nnn jsonb FROM next.next.next, nm int FROM next.m.x";

/* A union at the top, as a key may be. */
static const char *const avro_union =
"[\"null\", \"string\", \"long\", {\"type\": \"map\", \"values\": \"string\"}, "
"{\"type\": \"record\", \"name\": \"K\", \"fields\": [{\"name\": \"id\", \"type\": \"int\"}]}]";
static const char *const avro_union_columns = "id int DEFAULT NULL, x text DEFAULT 'none', k text";

#define N_AVRO 3
static const char *const avro_texts[N_AVRO] = {avro_payment, avro_every, avro_union};
static const char *const avro_columns[N_AVRO] = {avro_payment_columns, avro_every_columns, avro_union_columns};
static SdpAvroSchema *avro_writers[N_AVRO];
static SdpInputSchema *avro_schemas[N_AVRO];

static void
avro_init(void)
{
	for (int i = 0; i < N_AVRO; i++)
	{
		avro_writers[i] = sdp_avro_parse_schema(avro_texts[i]);
		avro_schemas[i] = sdp_parse_input_schema(avro_columns[i]);
	}
}

/* A body of a writer schema, and what is done with it. */
typedef struct AvroBody
{
	SdpAvroSchema *writer;
	SdpInputSchema *schema;
	int32		id;
	const uint8 *bytes;			/* with Confluent's header */
	size_t		len;
} AvroBody;

static void
avro_into_columns(void *arg)
{
	AvroBody   *a = arg;
	Datum	   *values = new_values(a->schema);
	bool	   *nulls = new_nulls(a->schema);
	char	   *error;
	int			sqlstate;

	if (sdp_avro_decode_message(a->schema, a->writer, a->id, a->bytes, a->len, values, nulls, &error, &sqlstate))
		note("decoded", values_text(a->schema, a->schema->ncolumns, values, nulls));
	else
		note("refused", error);
}

static void
avro_as_text(void *arg)
{
	AvroBody   *a = arg;
	char	   *text;
	char	   *error;

	if (sdp_avro_value_text(a->writer, a->bytes + 5, a->len - 5, false, true, &text, &error))
		note("as JSON", text);
	else
		note("not as JSON", error);
	if (sdp_avro_value_text(a->writer, a->bytes, a->len, true, false, &text, &error))
		note("as a key", text);
	else
		note("not as a key", error);
}

/* A body of writer: into the columns, then as text (JSON, and a key's way). */
static void
avro_body(SdpAvroSchema *writer, SdpInputSchema *schema, int32 id, const uint8 *body, size_t len)
{
	AvroBody	a = {writer, schema, id, framed(id, body, len), len + 5};

	in_subtransaction(avro_into_columns, &a, NULL);
	in_subtransaction(avro_as_text, &a, NULL);
}

/* One byte that picks the writer schema (modulo N_AVRO), then the Avro body. */
static void
avro_run(const uint8 *data, size_t size)
{
	int			w;

	if (size < 1)
		return;
	w = data[0] % N_AVRO;
	avro_body(avro_writers[w], avro_schemas[w], w + 1, data + 1, size - 1);
}

/* Columns for any schema: most of them with a DEFAULT, the last ones without (a path the writer must have). */
static const char *const generic_columns =
"id bigint DEFAULT NULL, name text DEFAULT NULL, v jsonb DEFAULT NULL, x float8 DEFAULT NULL FROM a.b, "
"t timestamptz DEFAULT NULL, n numeric DEFAULT NULL, arr jsonb DEFAULT NULL FROM items, "
"e text DEFAULT NULL FROM items[1], m text DEFAULT NULL FROM m.k, "
"cur text DEFAULT NULL FROM amount.currency, units bigint DEFAULT NULL FROM amount.units, "
"at timestamptz DEFAULT NULL, kind text DEFAULT NULL, raw bytea DEFAULT NULL, big numeric DEFAULT NULL, "
"tags jsonb DEFAULT NULL, attrs jsonb DEFAULT NULL, sku text DEFAULT NULL FROM lines[1].sku, "
"waited interval DEFAULT NULL, f text, g jsonb FROM g.h[0]";
static SdpInputSchema *generic_schema;

static void
avro_schema_init(void)
{
	generic_schema = sdp_parse_input_schema(generic_columns);
}

/* A writer schema's text, then (after a NUL) a body of it. */
static void
avro_schema_run(const uint8 *data, size_t size)
{
	const uint8 *p = data;
	const uint8 *end = data + size;
	char	   *text = next_part(&p, end);
	SdpAvroSchema *writer;

	/* a worker parses only an answer that is UTF-8 (formats.c) */
	if (!pg_verifymbstr(text, strlen(text), true))
		return;
	writer = sdp_avro_parse_schema(text);
	avro_body(writer, generic_schema, 7, p, end - p);
}

/* ---- registry answers ---- */

static FlowWorker *answer_worker;

static void
answer_init(void)
{
	generic_schema = sdp_parse_input_schema(generic_columns);
	answer_worker = palloc0(sizeof(FlowWorker));
}

typedef struct AnswerInput
{
	char	   *answer;
	bool		proto;			/* its schemaType is PROTOBUF */
	List	   *refs;
	uint8	   *bytes;			/* the message, with its header */
	size_t		len;
} AnswerInput;

static void
answer_read(void *arg)
{
	AnswerInput *a = arg;
	SdpRegistryAnswer answer;
	char	   *error;

	a->proto = false;
	a->refs = NIL;
	if (!sdp_registry_read_answer(a->answer, &answer, &error))
	{
		note("not an answer", error);
		return;
	}
	a->proto = answer.schema_type != NULL && strcmp(answer.schema_type, "PROTOBUF") == 0;
	a->refs = answer.refs;
}

static void
answer_value(void *arg)
{
	AnswerInput *a = arg;
	FlowWorker *w = answer_worker;
	Datum	   *values = new_values(generic_schema);
	bool	   *nulls = new_nulls(generic_schema);
	char	   *error;
	int			sqlstate;

	if (sdp_formats_decode(w, generic_schema, a->bytes, a->len, w->source.format, values, nulls, &error, &sqlstate))
		note("decoded", values_text(generic_schema, generic_schema->ncolumns, values, nulls));
	else
		note("refused", error);
}

static void
answer_key(void *arg)
{
	AnswerInput *a = arg;
	rd_kafka_message_t m;
	Datum		key;
	bool		key_null;
	char	   *error;

	memset(&m, 0, sizeof(m));
	m.key = a->bytes;
	m.key_len = a->len;
	if (sdp_formats_key(answer_worker, &m, &key, &key_null, &error))
		note("key", key_null ? NULL : TextDatumGetCString(key));
	else
		note("no key", error);
}

/*
 * A schema registry's answer for schema id 1, then, each after a NUL, an
 * answer for each of its references (if it has any, in order), then a
 * message in Confluent's wire format without its header (id 1's is put
 * in front).  The answer is read (sdp_registry_read_answer, which must not
 * raise), kept as a registry keeps it, parsed as a worker parses it
 * (Protobuf when its schemaType says PROTOBUF, else Avro) and the message
 * decoded as a value into the columns, then read as a key (the schema
 * parsed once, or its error kept).
 */
static void
answer_run(const uint8 *data, size_t size)
{
	const uint8 *p = data;
	const uint8 *end = data + size;
	AnswerInput a = {next_part(&p, end)};
	FlowWorker *w = answer_worker;
	ListCell   *lc;
	ErrorData  *e;

	/* it raises nothing but out of memory: a worker reads a Protobuf schema's references outside any transaction */
	if (!in_subtransaction(answer_read, &a, &e) && e->sqlerrcode != ERRCODE_OUT_OF_MEMORY)
	{
		fprintf(stderr, "sdp_fuzz: sdp_registry_read_answer raised (%s: %s), where it must not\n",
				unpack_sql_state(e->sqlerrcode), e->message);
		abort();
	}
	w->registry = sdp_registry_create("http://registry.invalid", NIL, CurrentMemoryContext);
	sdp_registry_put(w->registry, 1, true, a.answer);
	foreach(lc, a.refs)
	{
		SdpRegistryRef *ref = lfirst(lc);

		if (p >= end)
			break;
		if (sdp_registry_get_version(w->registry, ref->subject, ref->version) == NULL)
			sdp_registry_put_version(w->registry, ref->subject, ref->version, true, next_part(&p, end));
	}
	a.len = end - p + 5;
	a.bytes = framed(1, p, end - p);
	w->source.format = a.proto ? SDP_FORMAT_PROTOBUF : SDP_FORMAT_AVRO;
	w->source.key_format = w->source.format;
	in_subtransaction(answer_value, &a, NULL);
	in_subtransaction(answer_key, &a, NULL);
}

/* ---- Debezium ---- */

static const char *const debezium_columns =
"id int, name text, qty int DEFAULT 0, price numeric(10,2), at timestamptz, tags jsonb, city text FROM address.city";

/* Debezium's Avro converter: the event, and the key (the primary key's columns). */
static const char *const debezium_value =
"{\"type\": \"record\", \"name\": \"Envelope\", \"namespace\": \"cdc.public.items\", \"fields\": ["
" {\"name\": \"before\", \"type\": [\"null\", {\"type\": \"record\", \"name\": \"Value\", \"fields\": ["
"   {\"name\": \"id\", \"type\": \"int\"}, {\"name\": \"name\", \"type\": [\"null\", \"string\"], \"default\": null},"
"   {\"name\": \"qty\", \"type\": [\"null\", \"int\"], \"default\": null},"
"   {\"name\": \"price\", \"type\": [\"null\", {\"type\": \"bytes\", \"logicalType\": \"decimal\", \"precision\": 10, \"scale\": 2}], \"default\": null},"
"   {\"name\": \"at\", \"type\": [\"null\", {\"type\": \"long\", \"logicalType\": \"timestamp-micros\"}], \"default\": null},"
"   {\"name\": \"tags\", \"type\": [\"null\", {\"type\": \"array\", \"items\": \"string\"}], \"default\": null},"
"   {\"name\": \"address\", \"type\": [\"null\", {\"type\": \"record\", \"name\": \"Address\", \"fields\": ["
"     {\"name\": \"city\", \"type\": \"string\"}]}], \"default\": null}]}], \"default\": null},"
" {\"name\": \"after\", \"type\": [\"null\", \"Value\"], \"default\": null},"
" {\"name\": \"source\", \"type\": {\"type\": \"record\", \"name\": \"Source\", \"namespace\": \"io.debezium.connector.postgresql\", \"fields\": ["
"   {\"name\": \"version\", \"type\": \"string\"}, {\"name\": \"connector\", \"type\": \"string\"},"
"   {\"name\": \"ts_ms\", \"type\": \"long\"}, {\"name\": \"table\", \"type\": \"string\"},"
"   {\"name\": \"lsn\", \"type\": [\"null\", \"long\"], \"default\": null}]}},"
" {\"name\": \"op\", \"type\": \"string\"},"
" {\"name\": \"ts_ms\", \"type\": [\"null\", \"long\"], \"default\": null}]}";
static const char *const debezium_key =
"{\"type\": \"record\", \"name\": \"Key\", \"namespace\": \"cdc.public.items\", \"fields\": ["
" {\"name\": \"id\", \"type\": \"int\"}]}";

static FlowWorker *debezium_worker;
static SdpInputSchema *debezium_row;

static void
debezium_init(void)
{
	FlowWorker *w = palloc0(sizeof(FlowWorker));

	debezium_row = sdp_debezium_row_schema(debezium_columns);
	w->prep.envelope = sdp_debezium_envelope(debezium_row);
	w->registry = sdp_registry_create("http://registry.invalid", NIL, CurrentMemoryContext);
	sdp_registry_put(w->registry, 1, true, avro_answer(debezium_value));
	sdp_registry_put(w->registry, 2, true, avro_answer(debezium_key));
	debezium_worker = w;
}

/*
 * A flags byte, the key's length (a byte), the key, then the value.
 * Flags: 1 the value is Avro (else JSON), 2 the key is Avro (else JSON, as
 * key.format text reads it), 4 no value (a tombstone), 8 no key, 16 the
 * Avro parts have their own header (else the schema's, ids 1 and 2, is
 * put in front).  The event is decoded as a worker decodes it (the writer
 * schemas parsed once and kept, as a worker keeps them).
 */
static void
debezium_run(const uint8 *data, size_t size)
{
	FlowWorker *w = debezium_worker;
	rd_kafka_message_t m;
	uint8		flags;
	size_t		klen;
	Datum	   *values = new_values(debezium_row);
	bool	   *nulls = new_nulls(debezium_row);
	bool		deletes;
	char	   *error;
	int			sqlstate;

	if (size < 2)
		return;
	flags = data[0];
	klen = Min((size_t) data[1], size - 2);
	memset(&m, 0, sizeof(m));
	w->source.format = flags & 1 ? SDP_FORMAT_AVRO : SDP_FORMAT_JSON;
	w->source.key_format = flags & 2 ? SDP_FORMAT_AVRO : SDP_FORMAT_TEXT;
	if (!(flags & 8))
	{
		bool		header = (flags & 2) && !(flags & 16);

		m.key = header ? framed(2, data + 2, klen) : copy_bytes(NULL, 0, data + 2, klen, false);
		m.key_len = header ? klen + 5 : klen;
	}
	if (!(flags & 4))
	{
		const uint8 *v = data + 2 + klen;
		size_t		vlen = size - 2 - klen;
		bool		header = (flags & 1) && !(flags & 16);

		m.payload = header ? framed(1, v, vlen) : copy_bytes(NULL, 0, v, vlen, false);
		m.len = header ? vlen + 5 : vlen;
	}
	if (sdp_debezium_decode(w, &m, values, nulls, &deletes, &error, &sqlstate))
		note(deletes ? "deletes" : "upserts", values_text(debezium_row, debezium_row->ncolumns, values, nulls));
	else
		note("refused", error);
}

/* ---- the SQL function ---- */

static const FuzzTarget targets[] = {
	{"registry_answer", answer_init, answer_run},
	{"avro_decode", avro_init, avro_run},
	{"avro_schema", avro_schema_init, avro_schema_run},
	{"json_decode", json_init, json_run},
	{"debezium", debezium_init, debezium_run},
};

/*
 * sdp_fuzz_run(target text, args text[]): libFuzzer over target, with
 * libFuzzer's arguments (flags, corpus directories, or files to run once).
 * libFuzzer ends the process when it is done: this never returns.
 */
Datum
sdp_fuzz_run(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	ArrayType  *args = PG_GETARG_ARRAYTYPE_P(1);
	Datum	   *elems;
	bool	   *elnulls;
	int			nelems;
	int			argc;
	char	  **argv;
	int			rc;

	for (int i = 0; i < lengthof(targets) && target == NULL; i++)
		if (strcmp(targets[i].name, name) == 0)
			target = &targets[i];
	if (target == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("no fuzz target \"%s\"", name)));
	deconstruct_array(args, TEXTOID, -1, false, TYPALIGN_INT, &elems, &elnulls, &nelems);

	/* libFuzzer keeps argv: malloc'd, for the process's life */
	argc = nelems + 1;
	argv = malloc(sizeof(char *) * (argc + 1));
	argv[0] = strdup(psprintf("sdp_fuzz:%s", name));
	for (int i = 0; i < nelems; i++)
		argv[i + 1] = elnulls[i] ? strdup("") : strdup(TextDatumGetCString(elems[i]));
	argv[argc] = NULL;

	fuzz_cxt = AllocSetContextCreate(TopMemoryContext, "sdp_fuzz", ALLOCSET_DEFAULT_SIZES);
	input_cxt = AllocSetContextCreate(fuzz_cxt, "sdp_fuzz input", ALLOCSET_DEFAULT_SIZES);
	{
		MemoryContext oldcxt = MemoryContextSwitchTo(fuzz_cxt);

		target->init();
		MemoryContextSwitchTo(oldcxt);
	}
	verbose = getenv("SDP_FUZZ_VERBOSE") != NULL;
	sdp_fuzz_quiet_protobuf();
	prev_emit_log_hook = emit_log_hook;
	emit_log_hook = fuzz_log_hook;

	/*
	 * libFuzzer takes a signal only when nothing handles it: SIGALRM (its
	 * -timeout) and SIGFPE (a crash, which the backend would make an ERROR)
	 * are given back to it.
	 */
	pqsignal(SIGALRM, SIG_DFL);
	pqsignal(SIGFPE, SIG_DFL);

	rc = LLVMFuzzerRunDriver(&argc, &argv, run_one);
	PG_RETURN_INT32(rc);
}

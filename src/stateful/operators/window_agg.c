/*
 * window_agg.c
 *		The window_agg operator: declared aggregations over event-time windows,
 *		one finalized row per (definition, entity, window).
 *
 * The definitions live in sdp.aggregations (aggregations.c).  The operator
 * builds the flow's transform itself: one UNION ALL branch per definition
 * over the flow's rows, evaluating its filters in SQL and emitting
 * (key = "definition:entity", event time, value, filter flags, partition,
 * offset).  Rows then reach the operator grouped by that key.
 *
 * Per key, a map window start -> accumulator.  A row folds into each window
 * containing its event time (tumbling, or hopping with a slide), unless the
 * window is already final: its end plus the definition's allowance is at or
 * below the watermark; such a row is late, counted and set aside
 * (sdp.dead_letters, stage 'late').  Each key has one pending event-time
 * timer, at the earliest close (end plus allowance) among its open windows,
 * so a key may hold any number of windows open (a long allowance over short
 * windows), within the flow's state_memory_limit; when the watermark passes
 * it, every window of the key that is now final is emitted once, in start
 * order, its accumulator dropped, and the timer moves to the next close:
 *
 *	(emission_id, definition, entity, window_start, window_end, value, row_count, emitted_at)
 *
 * emission_id = definition/entity/window start (ISO-8601 UTC): the same
 * window always has the same id, so a replay after a restart upserts the
 * same row.  Values: count = rows matching the filter; sum and avg of the
 * value field over the rows matching the filter, exact for integer and
 * numeric values (a scaled 128-bit decimal, rounded to double precision
 * like sum(x)::float8 / avg(x)::float8); ratio = rows matching filter and
 * denominator_filter / rows matching denominator_filter; approx_distinct =
 * HyperLogLog estimate of the distinct values (1024 registers, standard
 * error 3.25%).  row_count is the number of rows folded into the window.
 *
 *	options: event_time (required: a timestamptz column of the input),
 *	         idle_timeout (default 10 seconds), retention (default: none; counted
 *	         back from the watermark)
 */
#include "stateful/operators/window_agg.h"
#include "compat.h"
#include "decl/catalog.h"
#include "decl/flow_options.h"

#include <math.h>

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "pgtime.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/float.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/numeric.h"
#include "utils/timestamp.h"

/* columns of the fanout query, in this order */
#define F_KEY		0
#define F_DEF		1
#define F_ENTITY	2
#define F_TIME		3
#define F_VALUE		4
#define F_TEXT		5
#define F_NUM		6
#define F_DEN		7
#define F_PART		8
#define F_OFF		9
#define F_NCOLS		10

#define HLL_BITS	10
#define HLL_REGS	(1 << HLL_BITS)
#define MAX_SCALE	18

#define ACC_INEXACT	0x01			/* the sum left int128: kept in double */

/* A window's accumulator (the map value); approx_distinct keys add HLL registers. */
typedef struct WindowAcc
{
	int64		row_count;		/* rows folded */
	int64		value_count;	/* rows with a non-null value */
	int64		num_count;		/* ratio: rows matching the filter too */
	int64		sum_hi;			/* exact sum: an int128 of value * 10^scale */
	uint64		sum_lo;
	int32		scale;
	int32		flags;
	double		fsum;			/* the sum when inexact */
	double		fcomp;			/* its Neumaier compensation */
} WindowAcc;

typedef struct WindowAggConfig
{
	List	   *defs;			/* AggDefinition */
	MemoryContext defs_cxt;		/* where they are: replaced at each reload */
	int64		retention_us;	/* 0: keep every window */
	SPIPlanPtr	retention_plan;
} WindowAggConfig;

static const char *const known_options[] = {"event_time", "idle_timeout", "retention", NULL};

const char *
sdp_agg_operation_name(AggOperation op)
{
	switch (op)
	{
		case AGG_COUNT:
			return "count";
		case AGG_SUM:
			return "sum";
		case AGG_AVG:
			return "avg";
		case AGG_RATIO:
			return "ratio";
		case AGG_APPROX_DISTINCT:
			return "approx_distinct";
	}
	return "?";
}

/* The static schema of the rows window_agg emits. */
TupleDesc
sdp_window_agg_output_desc(void)
{
	TupleDesc	d = CreateTemplateTupleDesc(8);

	TupleDescInitEntry(d, 1, "emission_id", TEXTOID, -1, 0);
	TupleDescInitEntry(d, 2, "definition", TEXTOID, -1, 0);
	TupleDescInitEntry(d, 3, "entity", TEXTOID, -1, 0);
	TupleDescInitEntry(d, 4, "window_start", TIMESTAMPTZOID, -1, 0);
	TupleDescInitEntry(d, 5, "window_end", TIMESTAMPTZOID, -1, 0);
	TupleDescInitEntry(d, 6, "value", FLOAT8OID, -1, 0);
	TupleDescInitEntry(d, 7, "row_count", INT8OID, -1, 0);
	TupleDescInitEntry(d, 8, "emitted_at", TIMESTAMPTZOID, -1, 0);
	return d;
}

/* ---- the fanout query ---- */

static bool
has_column(TupleDesc desc, const char *name)
{
	return sdp_operator_column(desc, name, NULL, false) >= 0;
}

static void
append_entity(StringInfo sql, AggDefinition *d)
{
	if (d->ngroup == 0)
	{
		appendStringInfoString(sql, "''::pg_catalog.text");	/* one entity: the whole stream */
		return;
	}
	if (d->ngroup == 1)
	{
		appendStringInfo(sql, "coalesce((r.%s)::pg_catalog.text, '')", quote_identifier(d->group_by[0]));
		return;
	}
	/* joined by '|': a '|' or '\' inside a value is escaped with '\', so two groups never share an entity */
	appendStringInfoString(sql, "pg_catalog.concat_ws('|'");
	for (int g = 0; g < d->ngroup; g++)
		appendStringInfo(sql, ", pg_catalog.replace(pg_catalog.replace(coalesce((r.%s)::pg_catalog.text, ''), "
						 "pg_catalog.chr(92), pg_catalog.chr(92) OPERATOR(pg_catalog.||) pg_catalog.chr(92)), "
						 "'|', pg_catalog.chr(92) OPERATOR(pg_catalog.||) '|')",
						 quote_identifier(d->group_by[g]));
	appendStringInfoChar(sql, ')');
}

/*
 * The transform of a window_agg flow: the flow's rows (its own transform,
 * or the input) fanned out to every definition whose filter they match.
 */
char *
sdp_window_agg_fanout_sql(List *defs, const char *user_transform, TupleDesc rows, const char *event_time)
{
	StringInfoData sql;
	ListCell   *lc;
	const char *part = has_column(rows, "kafka_partition") ? "r.kafka_partition::pg_catalog.int4" : "NULL::pg_catalog.int4";
	const char *off = has_column(rows, "kafka_offset") ? "r.kafka_offset::pg_catalog.int8" : "NULL::pg_catalog.int8";

	initStringInfo(&sql);
	appendStringInfo(&sql, "WITH r AS MATERIALIZED (%s)\n", user_transform ? user_transform : "SELECT * FROM input");
	if (defs == NIL)
	{
		appendStringInfoString(&sql,
							   "SELECT NULL::pg_catalog.text AS sdp_key, NULL::pg_catalog.text AS sdp_definition, "
							   "NULL::pg_catalog.text AS sdp_entity, NULL::pg_catalog.timestamptz AS sdp_event_time, "
							   "NULL::pg_catalog.numeric AS sdp_value, NULL::pg_catalog.text AS sdp_text, "
							   "NULL::pg_catalog.bool AS sdp_num, NULL::pg_catalog.bool AS sdp_den, "
							   "NULL::pg_catalog.int4 AS sdp_partition, NULL::pg_catalog.int8 AS sdp_offset FROM r WHERE false");
		return sql.data;
	}
	foreach(lc, defs)
	{
		AggDefinition *d = lfirst(lc);
		const char *selector = d->op == AGG_RATIO ? d->denominator : d->filter;

		if (foreach_current_index(lc) > 0)
			appendStringInfoString(&sql, "\nUNION ALL\n");
		appendStringInfo(&sql, "SELECT %s::pg_catalog.text OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) ", quote_literal_cstr(d->name));
		append_entity(&sql, d);
		appendStringInfo(&sql, " AS sdp_key, %s::pg_catalog.text AS sdp_definition, ", quote_literal_cstr(d->name));
		append_entity(&sql, d);
		appendStringInfo(&sql, " AS sdp_entity, (r.%s)::pg_catalog.timestamptz AS sdp_event_time, ", quote_identifier(event_time));
		if (d->op == AGG_SUM || d->op == AGG_AVG)
			appendStringInfo(&sql, "(r.%s)::pg_catalog.numeric AS sdp_value, NULL::pg_catalog.text AS sdp_text, ", quote_identifier(d->value));
		else if (d->op == AGG_APPROX_DISTINCT)
			appendStringInfo(&sql, "NULL::pg_catalog.numeric AS sdp_value, (r.%s)::pg_catalog.text AS sdp_text, ", quote_identifier(d->value));
		else
			appendStringInfoString(&sql, "NULL::pg_catalog.numeric AS sdp_value, NULL::pg_catalog.text AS sdp_text, ");
		if (d->op == AGG_RATIO)
			appendStringInfo(&sql, "((%s) IS TRUE) AS sdp_num, true AS sdp_den, ", d->filter);
		else
			appendStringInfoString(&sql, "true AS sdp_num, true AS sdp_den, ");
		appendStringInfo(&sql, "%s AS sdp_partition, %s AS sdp_offset FROM r WHERE (%s) IS TRUE", part, off, selector);
	}
	return sql.data;
}

/* ---- definitions, as the operator reads them ---- */

static int64
interval_us(Interval *iv)
{
	return iv->time + (int64) iv->day * USECS_PER_DAY + (int64) iv->month * 30 * USECS_PER_DAY;
}

/* Every definition of the flow, from sdp.aggregations (in a transaction). */
List *
sdp_window_agg_read_definitions(const char *flow)
{
	MemoryContext cxt = CurrentMemoryContext;
	SdpCatalogScope scope;
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(flow)};
	List	   *defs = NIL;

	SPI_connect();
	sdp_catalog_enter(&scope);
	if (SPI_execute_with_args("SELECT name, group_by, operation, value, filter, denominator_filter, "
							  "       window_size, slide, allowance "
							  "  FROM sdp.aggregations WHERE flow = $1 ORDER BY name",
							  1, argtypes, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the aggregations of flow \"%s\"", flow);
	sdp_catalog_leave(&scope);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		MemoryContext spi = MemoryContextSwitchTo(cxt);
		AggDefinition *d = palloc0(sizeof(AggDefinition));
		char	   *op = SPI_getvalue(tup, desc, 3);
		bool		isnull;
		ArrayType  *groups = DatumGetArrayTypePCopy(SPI_getbinval(tup, desc, 2, &isnull));
		Datum	   *gv;
		int			ng;

		d->name = SPI_getvalue(tup, desc, 1);
		deconstruct_array(groups, TEXTOID, -1, false, TYPALIGN_INT, &gv, NULL, &ng);
		d->ngroup = ng;
		d->group_by = palloc(sizeof(char *) * Max(ng, 1));
		for (int g = 0; g < ng; g++)
			d->group_by[g] = TextDatumGetCString(gv[g]);
		d->op = strcmp(op, "count") == 0 ? AGG_COUNT :
			strcmp(op, "sum") == 0 ? AGG_SUM :
			strcmp(op, "avg") == 0 ? AGG_AVG :
			strcmp(op, "ratio") == 0 ? AGG_RATIO : AGG_APPROX_DISTINCT;
		d->value = SPI_getvalue(tup, desc, 4);
		d->filter = SPI_getvalue(tup, desc, 5);
		d->denominator = SPI_getvalue(tup, desc, 6);
		d->size_us = interval_us(DatumGetIntervalP(SPI_getbinval(tup, desc, 7, &isnull)));
		d->slide_us = d->size_us;
		{
			Datum		slide = SPI_getbinval(tup, desc, 8, &isnull);

			if (!isnull)
				d->slide_us = interval_us(DatumGetIntervalP(slide));
		}
		d->allowance_us = interval_us(DatumGetIntervalP(SPI_getbinval(tup, desc, 9, &isnull)));
		defs = lappend(defs, d);
		MemoryContextSwitchTo(spi);
	}
	SPI_finish();
	MemoryContextSwitchTo(cxt);
	return defs;
}

static AggDefinition *
find_definition(WindowAggConfig *cfg, const char *key, const char **entity)
{
	const char *colon = strchr(key, ':');
	ListCell   *lc;

	if (colon == NULL)
		return NULL;
	foreach(lc, cfg->defs)
	{
		AggDefinition *d = lfirst(lc);

		if (strlen(d->name) == (size_t) (colon - key) && strncmp(d->name, key, colon - key) == 0)
		{
			*entity = colon + 1;
			return d;
		}
	}
	return NULL;
}

/* ---- exact decimal sums ---- */

static int128
pow10_128(int n)
{
	int128		r = 1;

	while (n-- > 0)
		r *= 10;
	return r;
}

/* A numeric's text as value * 10^scale; false when it does not fit (NaN, too many digits). */
static bool
decimal_parse(const char *s, int128 *mantissa, int *scale)
{
	bool		neg = false;
	bool		frac = false;
	int128		v = 0;
	int			digits = 0;
	int			sc = 0;

	if (*s == '-' || *s == '+')
		neg = (*s++ == '-');
	for (; *s; s++)
	{
		if (*s == '.')
		{
			frac = true;
			continue;
		}
		if (*s < '0' || *s > '9' || ++digits > 36)
			return false;
		v = v * 10 + (*s - '0');
		if (frac)
			sc++;
	}
	if (sc > MAX_SCALE)
		return false;
	*mantissa = neg ? -v : v;
	*scale = sc;
	return true;
}

static char *
decimal_text(int128 m, int scale)
{
	char		digits[64];
	int			n = 0;
	bool		neg = m < 0;
	StringInfoData buf;

	if (neg)
		m = -m;
	do
	{
		digits[n++] = '0' + (int) (m % 10);
		m /= 10;
	} while (m > 0);
	while (n <= scale)
		digits[n++] = '0';
	initStringInfo(&buf);
	if (neg)
		appendStringInfoChar(&buf, '-');
	for (int i = n - 1; i >= 0; i--)
	{
		appendStringInfoChar(&buf, digits[i]);
		if (i == scale && scale > 0)
			appendStringInfoChar(&buf, '.');
	}
	return buf.data;
}

static int128
acc_sum(const WindowAcc *a)
{
	return ((int128) a->sum_hi << 64) | (int128) a->sum_lo;
}

static void
acc_set_sum(WindowAcc *a, int128 v)
{
	a->sum_hi = (int64) (v >> 64);
	a->sum_lo = (uint64) v;
}

static void
acc_add_double(WindowAcc *a, double x)
{
	double		t = a->fsum + x;

	if (!isfinite(t))
	{
		/* an infinity or NaN: nothing left to compensate (inf - inf would make NaN of Infinity) */
		a->fsum = t;
		a->fcomp = 0;
		return;
	}
	if (fabs(a->fsum) >= fabs(x))
		a->fcomp += (a->fsum - t) + x;
	else
		a->fcomp += (x - t) + a->fsum;
	a->fsum = t;
}

#define DECIMAL_LIMIT ((int128) 1 << 120)

static void
acc_add_numeric(WindowAcc *a, Datum numeric)
{
	char	   *text = DatumGetCString(DirectFunctionCall1(numeric_out, numeric));
	int128		m;
	int			scale;

	if (!(a->flags & ACC_INEXACT) && decimal_parse(text, &m, &scale))
	{
		int128		sum = acc_sum(a);
		int			target = Max(scale, a->scale);
		int128		f_sum = pow10_128(target - a->scale);
		int128		f_m = pow10_128(target - scale);

		if ((sum < DECIMAL_LIMIT / f_sum && sum > -DECIMAL_LIMIT / f_sum) &&
			(m < DECIMAL_LIMIT / f_m && m > -DECIMAL_LIMIT / f_m))
		{
			sum = sum * f_sum + m * f_m;
			acc_set_sum(a, sum);
			a->scale = target;
			return;
		}
	}
	if (!(a->flags & ACC_INEXACT))
	{
		/* leave the exact sum for a compensated double one */
		a->flags |= ACC_INEXACT;
		a->fsum = 0;
		a->fcomp = 0;
		acc_add_double(a, DatumGetFloat8(DirectFunctionCall1(float8in,
															 CStringGetDatum(decimal_text(acc_sum(a), a->scale)))));
	}
	acc_add_double(a, DatumGetFloat8(DirectFunctionCall1(numeric_float8, numeric)));
}

/* The exact sum as a numeric (not inexact). */
static Datum
acc_sum_numeric(const WindowAcc *a)
{
	return DirectFunctionCall3(numeric_in, CStringGetDatum(decimal_text(acc_sum(a), a->scale)),
							   ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1));
}

/* ---- HyperLogLog ---- */

static uint8 *
acc_registers(WindowAcc *a)
{
	return (uint8 *) a + MAXALIGN(sizeof(WindowAcc));
}

static void
hll_add(uint8 *reg, const char *text)
{
	uint64		h = hash_bytes_extended((const unsigned char *) text, (int) strlen(text), 0x5DB1);
	int			idx = (int) (h >> (64 - HLL_BITS));
	uint64		rest = (h << HLL_BITS) | ((uint64) 1 << (HLL_BITS - 1));
	int			rank = __builtin_clzll(rest) + 1;

	if (rank > reg[idx])
		reg[idx] = (uint8) rank;
}

static double
hll_estimate(const uint8 *reg)
{
	/* 2^-r for the ranks hll_add gives (up to 64 - HLL_BITS + 1), exact as ldexp's: a thousand per window */
	static double inverse_pow2[65];
	double		m = HLL_REGS;
	double		alpha = 0.7213 / (1.0 + 1.079 / m);
	double		sum = 0;
	int			zeros = 0;
	double		e;

	if (inverse_pow2[0] == 0)
		for (int r = 0; r < lengthof(inverse_pow2); r++)
			inverse_pow2[r] = ldexp(1.0, -r);
	for (int i = 0; i < HLL_REGS; i++)
	{
		sum += reg[i] < lengthof(inverse_pow2) ? inverse_pow2[reg[i]] : ldexp(1.0, -reg[i]);
		zeros += (reg[i] == 0);
	}
	e = alpha * m * m / sum;
	if (e <= 2.5 * m && zeros > 0)
		e = m * log(m / zeros);	/* linear counting for small cardinalities */
	return round(e);
}

/* ---- options ---- */

static void
parse_options(TupleDesc rows, Jsonb *options, char **event_time, int64 *idle_us, int64 *retention_us)
{
	char	   *et = sdp_operator_option(options, "event_time");
	char	   *idle = sdp_operator_option(options, "idle_timeout");
	char	   *retention = sdp_operator_option(options, "retention");
	int			i;

	sdp_operator_check_options(options, "window_agg", known_options);
	if (et == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("operator window_agg needs option \"event_time\""),
				 errhint("Name the input's timestamptz column that holds each event's time, e.g. '{\"event_time\": \"event_ts\"}'.")));
	i = sdp_operator_column(rows, et, "event_time", true);
	if (TupleDescAttr(rows, i)->atttypid != TIMESTAMPTZOID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("event_time column \"%s\" has type %s, not timestamp with time zone",
						et, format_type_be(TupleDescAttr(rows, i)->atttypid))));
	*event_time = et;
	*idle_us = (int64) sdp_interval_option_ms("idle_timeout", idle ? idle : "10 seconds") * 1000;
	if (*idle_us <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"idle_timeout\" must be positive")));
	*retention_us = retention ? sdp_interval_option_us("retention", retention) : 0;
}

static TupleDesc
window_agg_validate(TupleDesc rows, Jsonb *options, Relation target, SdpFlowOptions *opts)
{
	char	   *et;
	int64		idle,
				retention;

	parse_options(rows, options, &et, &idle, &retention);
	if (!opts->mode_given)
	{
		opts->mode = SDP_MODE_UPSERT;
		opts->mode_given = true;
	}
	return sdp_window_agg_output_desc();
}

/* ---- the operator ---- */

static void
load_config(SdpOperatorContext *ctx, WindowAggConfig *cfg)
{
	MemoryContext previous = cfg->defs_cxt;
	MemoryContext old;

	cfg->defs_cxt = AllocSetContextCreate(TopMemoryContext, "sdp window_agg definitions", ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(cfg->defs_cxt);
	cfg->defs = sdp_window_agg_read_definitions(ctx->flow_name);
	MemoryContextSwitchTo(old);
	/* nothing keeps the old ones: every use reads cfg->defs */
	if (previous)
		MemoryContextDelete(previous);
}

static void *
window_agg_init(SdpOperatorContext *ctx, Jsonb *options)
{
	WindowAggConfig *cfg = palloc0(sizeof(WindowAggConfig));
	char	   *et;

	parse_options(ctx->input_desc, options, &et, &ctx->idle_timeout_us, &cfg->retention_us);
	ctx->event_time_column = pstrdup(et);
	ctx->key_column = "sdp_key";
	load_config(ctx, cfg);
	return cfg;
}

static void
window_agg_reload(SdpOperatorContext *ctx)
{
	WindowAggConfig *cfg = ctx->config;

	load_config(ctx, cfg);
}

static char *
window_agg_build_transform(SdpOperatorContext *ctx, const char *user_transform, TupleDesc rows)
{
	WindowAggConfig *cfg = ctx->config;

	/* the fanout carries the rows' partition when the flow's rows have it */
	ctx->partition_column = has_column(rows, "kafka_partition") ? "sdp_partition" : NULL;
	return sdp_window_agg_fanout_sql(cfg->defs, user_transform, rows, ctx->event_time_column);
}

static int
acc_len(AggDefinition *d)
{
	return MAXALIGN(sizeof(WindowAcc)) + (d->op == AGG_APPROX_DISTINCT ? HLL_REGS : 0);
}

static void
fold(AggDefinition *d, WindowAcc *a, HeapTuple row, TupleDesc desc)
{
	bool		isnull;
	Datum		v;

	a->row_count++;
	switch (d->op)
	{
		case AGG_COUNT:
			break;
		case AGG_SUM:
		case AGG_AVG:
			v = heap_getattr(row, F_VALUE + 1, desc, &isnull);
			if (!isnull)
			{
				a->value_count++;
				acc_add_numeric(a, v);
			}
			break;
		case AGG_RATIO:
			v = heap_getattr(row, F_NUM + 1, desc, &isnull);
			if (!isnull && DatumGetBool(v))
				a->num_count++;
			break;
		case AGG_APPROX_DISTINCT:
			v = heap_getattr(row, F_TEXT + 1, desc, &isnull);
			if (!isnull)
			{
				a->value_count++;
				hll_add(acc_registers(a), TextDatumGetCString(v));
			}
			break;
	}
}

/* The window's value, or NULL (a sum or avg of no value). */
static bool
finalize(AggDefinition *d, WindowAcc *a, double *value)
{
	switch (d->op)
	{
		case AGG_COUNT:
			*value = (double) a->row_count;
			return true;
		case AGG_SUM:
			if (a->value_count == 0)
				return false;
			if (a->flags & ACC_INEXACT)
				*value = a->fsum + a->fcomp;
			else
			{
				/* sum(x)::float8: numeric_float8 reads the numeric's text, which is decimal_text's */
				char	   *text = decimal_text(acc_sum(a), a->scale);

				*value = sdp_float8_from_text(text);
			}
			return true;
		case AGG_AVG:
			if (a->value_count == 0)
				return false;
			if (a->flags & ACC_INEXACT)
				*value = (a->fsum + a->fcomp) / a->value_count;
			else
				*value = DatumGetFloat8(DirectFunctionCall1(numeric_float8,
															DirectFunctionCall2(numeric_div, acc_sum_numeric(a),
																				NumericGetDatum(int64_to_numeric(a->value_count)))));
			return true;
		case AGG_RATIO:
			if (a->row_count == 0)
				return false;
			*value = (double) a->num_count / (double) a->row_count;
			return true;
		case AGG_APPROX_DISTINCT:
			*value = hll_estimate(acc_registers(a));
			return true;
	}
	return false;
}

/* Window starts are aligned on multiples of the slide since the Unix epoch. */
#define UNIX_EPOCH_US ((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY)

static int64
floor_div(int64 a, int64 b)
{
	int64		q = a / b;

	return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

/* Set a row's message aside with the reason. */
static void
reject_row(SdpOperatorContext *ctx, HeapTuple row, const char *reason)
{
	bool		pnull,
				onull;
	Datum		p = heap_getattr(row, F_PART + 1, ctx->input_desc, &pnull);
	Datum		o = heap_getattr(row, F_OFF + 1, ctx->input_desc, &onull);

	if (!pnull && !onull)
		sdp_reject(ctx, DatumGetInt32(p), DatumGetInt64(o), reason);
}

/*
 * The key's one event-time timer: at the earliest close among its windows
 * (the window starting at start closes at close_at).  A key keeps a single
 * timer however many windows it has open, so the number of open windows is
 * bounded only by the flow's state_memory_limit.
 */
static void
arm_close_timer(SdpOperatorContext *ctx, SdpKeyState *ks, int64 close_at, int64 start)
{
	SdpTimer	timers[SDP_STATE_TIMERS];
	int			n = sdp_timer_list(ks, timers, lengthof(timers));

	for (int i = 0; i < n; i++)
		if (timers[i].kind == SDP_EVENT_TIME && timers[i].when <= close_at)
			return;				/* an earlier close is pending: it will look at this window too */
	for (int i = 0; i < n; i++)
		if (timers[i].kind == SDP_EVENT_TIME)
			(void) sdp_timer_delete(ctx, ks, SDP_EVENT_TIME, timers[i].when, timers[i].tag);
	sdp_timer_register(ctx, ks, SDP_EVENT_TIME, close_at, start);
}

static void
window_agg_handle_rows(SdpOperatorContext *ctx, SdpKeyState *ks, HeapTuple *rows, int nrows)
{
	WindowAggConfig *cfg = ctx->config;
	const char *entity;
	AggDefinition *d = find_definition(cfg, ks->key, &entity);
	int			len;
	WindowAcc  *acc;

	if (d == NULL)
		return;					/* a definition dropped while its rows were on the way */
	len = acc_len(d);
	acc = palloc(len);
	sdp_state_map_reserve(ks, len);

	for (int i = 0; i < nrows; i++)
	{
		bool		isnull;
		TimestampTz t = DatumGetTimestampTz(heap_getattr(rows[i], F_TIME + 1, ctx->input_desc, &isnull));
		int64		first;

		if (isnull)
			continue;			/* no event time: nowhere to fold it */
		if (!sdp_event_time_usable(t))
		{
			reject_row(ctx, rows[i],
					   psprintf("event time %s is outside the range windows and watermarks can hold (%s to %s)",
								sdp_timestamp_text(t),
								sdp_timestamp_text(MIN_TIMESTAMP + SDP_EVENT_TIME_MARGIN_US),
								sdp_timestamp_text(END_TIMESTAMP - SDP_EVENT_TIME_MARGIN_US - 1)));
			continue;
		}
		/* the latest window containing t, then back by the slide while they still contain it */
		first = floor_div(t + UNIX_EPOCH_US, d->slide_us) * d->slide_us - UNIX_EPOCH_US;
		for (int64 start = first; start > t - d->size_us; start -= d->slide_us)
		{
			int64		close_at = start + d->size_us + d->allowance_us;
			char		member[32];

			if (close_at <= ctx->watermark)
			{
				reject_row(ctx, rows[i],
						   psprintf("event at %s is later than the watermark %s: window [%s, %s) of aggregation %s is final",
									sdp_timestamp_text(t), sdp_timestamp_text(ctx->watermark),
									sdp_timestamp_text(start), sdp_timestamp_text(start + d->size_us), d->name));
				continue;
			}
			snprintf(member, sizeof(member), INT64_FORMAT, start);
			if (!sdp_state_map_get(ks, member, acc))
			{
				memset(acc, 0, len);
				arm_close_timer(ctx, ks, close_at, start);
			}
			fold(d, acc, rows[i], ctx->input_desc);
			sdp_state_map_put(ks, member, acc);
		}
	}
	pfree(acc);
}

/* 2026-01-01T00:10:00Z (with microseconds when there are any) */
static char *
iso_utc(TimestampTz t)
{
	struct pg_tm tm;
	fsec_t		fsec;

	if (timestamp2tm(t, NULL, &tm, &fsec, NULL, NULL) != 0)
		return psprintf(INT64_FORMAT, t);
	if (fsec != 0)
		return psprintf("%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year, tm.tm_mon, tm.tm_mday,
						tm.tm_hour, tm.tm_min, tm.tm_sec, fsec);
	return psprintf("%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year, tm.tm_mon, tm.tm_mday,
					tm.tm_hour, tm.tm_min, tm.tm_sec);
}

static char *
put_digits(char *p, int v, int width)
{
	for (int i = width - 1; i >= 0; i--, v /= 10)
		p[i] = '0' + v % 10;
	return p + width;
}

/*
 * emission_id as text: definition/entity/start, the start as iso_utc gives
 * it.  Written without a format string for years 1 to 9999 (a burst of
 * closing windows makes thousands); iso_utc otherwise.
 */
static text *
emission_id_text(const char *definition, const char *entity, TimestampTz start)
{
	struct pg_tm tm;
	fsec_t		fsec;
	char		iso[64];
	char	   *p = iso;
	size_t		dlen = strlen(definition);
	size_t		elen = strlen(entity);
	size_t		ilen;
	text	   *t;
	char	   *out;

	if (timestamp2tm(start, NULL, &tm, &fsec, NULL, NULL) == 0 && tm.tm_year >= 1 && tm.tm_year <= 9999)
	{
		p = put_digits(p, tm.tm_year, 4);
		*p++ = '-';
		p = put_digits(p, tm.tm_mon, 2);
		*p++ = '-';
		p = put_digits(p, tm.tm_mday, 2);
		*p++ = 'T';
		p = put_digits(p, tm.tm_hour, 2);
		*p++ = ':';
		p = put_digits(p, tm.tm_min, 2);
		*p++ = ':';
		p = put_digits(p, tm.tm_sec, 2);
		if (fsec != 0)
		{
			*p++ = '.';
			p = put_digits(p, fsec, 6);
		}
		*p++ = 'Z';
		*p = '\0';
	}
	else
		strlcpy(iso, iso_utc(start), sizeof(iso));
	ilen = strlen(iso);
	t = palloc(VARHDRSZ + dlen + 1 + elen + 1 + ilen);
	SET_VARSIZE(t, VARHDRSZ + dlen + 1 + elen + 1 + ilen);
	out = VARDATA(t);
	memcpy(out, definition, dlen);
	out[dlen] = '/';
	memcpy(out + dlen + 1, entity, elen);
	out[dlen + 1 + elen] = '/';
	memcpy(out + dlen + 1 + elen + 1, iso, ilen);
	return t;
}

/* The windows of a key, split by the timer's sweep into the final ones and the next close. */
typedef struct CloseSweep
{
	AggDefinition *def;
	int64		watermark;
	int64	   *final;			/* starts of the windows now final */
	int			nfinal;
	int			cap;
	int64		next_close;		/* the earliest close still to come, or DT_NOEND */
	int64		next_start;
} CloseSweep;

static bool
sweep_window(const char *member, void *value, void *arg)
{
	CloseSweep *sw = arg;
	int64		start = strtoi64(member, NULL, 10);
	int64		close_at = start + sw->def->size_us + sw->def->allowance_us;

	if (close_at <= sw->watermark)
	{
		if (sw->nfinal == sw->cap)
		{
			sw->cap *= 2;
			sw->final = repalloc(sw->final, sizeof(int64) * sw->cap);
		}
		sw->final[sw->nfinal++] = start;
	}
	else if (close_at < sw->next_close)
	{
		sw->next_close = close_at;
		sw->next_start = start;
	}
	return true;
}

static bool
drop_window(const char *member, void *value, void *arg)
{
	return false;
}

static int
int64_cmp(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return (x > y) - (x < y);
}

/* Emit the finalized row of the window starting at start, and drop its accumulator. */
static void
emit_window(SdpOperatorContext *ctx, SdpKeyState *ks, AggDefinition *d, const char *entity, int64 start)
{
	char		member[32];
	WindowAcc  *acc;
	Datum		values[8];
	bool		nulls[8] = {false, false, false, false, false, false, false, false};
	double		value;

	snprintf(member, sizeof(member), INT64_FORMAT, start);
	acc = palloc0(MAXALIGN(sizeof(WindowAcc)) + HLL_REGS);
	if (sdp_state_map_get(ks, member, acc))
	{
		values[0] = PointerGetDatum(emission_id_text(d->name, entity, start));
		values[1] = CStringGetTextDatum(d->name);
		values[2] = CStringGetTextDatum(entity);
		values[3] = TimestampTzGetDatum(start);
		values[4] = TimestampTzGetDatum(start + d->size_us);
		nulls[5] = !finalize(d, acc, &value);
		values[5] = Float8GetDatum(nulls[5] ? 0 : value);
		values[6] = Int64GetDatum(acc->row_count);
		values[7] = TimestampTzGetDatum(ctx->now);
		sdp_emit(ctx, values, nulls);
	}
	(void) sdp_state_map_remove(ks, member);
	pfree(acc);
}

/* The key's close timer: emit every window now final, in start order, and arm the next close. */
static void
window_agg_handle_expired_timer(SdpOperatorContext *ctx, SdpKeyState *ks, const SdpTimer *timer)
{
	WindowAggConfig *cfg = ctx->config;
	const char *entity;
	AggDefinition *d = find_definition(cfg, ks->key, &entity);
	CloseSweep	sw;

	if (d == NULL)
	{
		/* a dropped definition's windows just go */
		sdp_state_map_visit(ks, drop_window, NULL);
		return;
	}
	memset(&sw, 0, sizeof(sw));
	sw.def = d;
	sw.watermark = ctx->watermark;
	sw.cap = 8;
	sw.final = palloc(sizeof(int64) * sw.cap);
	sw.next_close = DT_NOEND;
	sdp_state_map_visit(ks, sweep_window, &sw);
	qsort(sw.final, sw.nfinal, sizeof(int64), int64_cmp);
	for (int i = 0; i < sw.nfinal; i++)
		emit_window(ctx, ks, d, entity, sw.final[i]);
	if (sw.next_close != DT_NOEND)
		arm_close_timer(ctx, ks, sw.next_close, sw.next_start);
	pfree(sw.final);
}

/*
 * Retention: windows that ended longer than "retention" before the flow's
 * watermark are deleted.  Event time, not the wall clock: a replay, a
 * backfill of last year's events or a simulator's clock keeps the windows
 * it computes, and what a table holds does not depend on when the flow ran.
 * Before the watermark is known nothing is deleted, and a watermark ahead of
 * the clock counts as the clock.  With several workers each deletes by its
 * own watermark.
 */
static void
window_agg_maintain(SdpOperatorContext *ctx)
{
	WindowAggConfig *cfg = ctx->config;
	Datum		values[1];
	Oid			types[1] = {TIMESTAMPTZOID};
	TimestampTz until;

	/* never ahead of the clock: one event stamped years ahead must not empty the table */
	until = Min(ctx->watermark, GetCurrentTimestamp());
	if (cfg->retention_us <= 0 || !sdp_event_time_usable(ctx->watermark) ||
		until - cfg->retention_us < MIN_TIMESTAMP)
		return;
	if (cfg->retention_plan == NULL)
	{
		cfg->retention_plan = SPI_prepare(psprintf("DELETE FROM %s WHERE window_end OPERATOR(pg_catalog.<) $1", ctx->target_relname),
										  1, types);
		if (cfg->retention_plan == NULL)
			elog(ERROR, "could not prepare the retention statement: %s", SPI_result_code_string(SPI_result));
		SPI_keepplan(cfg->retention_plan);
	}
	values[0] = TimestampTzGetDatum(until - cfg->retention_us);
	if (SPI_execute_plan(cfg->retention_plan, values, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "retention of %s failed", ctx->target_relname);
}

/* A double as JSON: a number, or "NaN" / "Infinity" / "-Infinity" as strings (as PostgreSQL's to_json does). */
static char *
json_double(double v)
{
	if (isnan(v))
		return "\"NaN\"";
	if (isinf(v))
		return v > 0 ? "\"Infinity\"" : "\"-Infinity\"";
	return psprintf("%.17g", v);
}

static char *
window_agg_describe_map_value(const void *value)
{
	WindowAcc	a;

	memcpy(&a, value, sizeof(a));
	return psprintf("{\"row_count\": " INT64_FORMAT ", \"value_count\": " INT64_FORMAT
					", \"num_count\": " INT64_FORMAT ", \"sum\": %s}",
					a.row_count, a.value_count, a.num_count,
					(a.flags & ACC_INEXACT) ? json_double(a.fsum + a.fcomp) : decimal_text(acc_sum(&a), a.scale));
}

const SdpOperator sdp_window_agg_operator = {
	.name = "window_agg",
	.map_value_len = MAXALIGN(sizeof(WindowAcc)),
	.value_names = {NULL, NULL, NULL, NULL},
	.map_name = "windows",
	.validate = window_agg_validate,
	.init = window_agg_init,
	.handle_rows = window_agg_handle_rows,
	.handle_expired_timer = window_agg_handle_expired_timer,
	.describe_map_value = window_agg_describe_map_value,
	.build_transform = window_agg_build_transform,
	.reload = window_agg_reload,
	.maintain = window_agg_maintain,
};

/*
 * active_count.c
 *		The active_count operator: how many members are active per key.
 *
 * Keyed by the "key" column (a zone), it keeps a map member -> last seen
 * (processing time) and one pending sweep timer per key.  Each row
 * refreshes its member; the sweep evicts members not seen within "ttl" and
 * re-arms while the key has members.  Whenever the count changes it emits
 * (key, count, count > capacity, time) under the column names the options
 * give, upserted into the target on its primary key (the key).
 *
 *	options: key, member (required); ttl (default 30 seconds);
 *	         capacity_column or capacity; count_column (active_count),
 *	         alert_column (over_capacity), time_column (updated_at);
 *	         sweep_interval (default ttl / 4)
 *
 * State per key: map "last_seen"; values "capacity", "last_count" (the last
 * count emitted) and "sweep_timer" (when the pending sweep fires: exactly
 * one per key, never one per row).  A key that empties emits its 0 and then
 * has no state left, so it is deleted; the next arrival starts it again.
 */
#include "stateful/operator.h"
#include "decl/flow_options.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#define V_CAPACITY		0
#define V_LAST_COUNT	1
#define V_SWEEP_TIMER	2

typedef struct ActiveCountConfig
{
	int			member_index;
	int			capacity_index; /* -1: fixed capacity */
	double		capacity;
	Oid			capacity_type;
	int64		ttl_us;
	int64		sweep_us;
	FmgrInfo	member_out;
	FmgrInfo	key_in;
	Oid			key_ioparam;
	int32		key_typmod;
} ActiveCountConfig;

static const char *const known_options[] = {
	"key", "member", "ttl", "capacity_column", "capacity", "count_column",
	"alert_column", "time_column", "sweep_interval", NULL
};

static bool
is_numeric_type(Oid t)
{
	return t == INT2OID || t == INT4OID || t == INT8OID || t == FLOAT4OID ||
		t == FLOAT8OID || t == NUMERICOID;
}

static char *
option_or(Jsonb *options, const char *key, const char *dflt)
{
	char	   *v = sdp_operator_option(options, key);

	return v ? v : (char *) dflt;
}

static char *
required_option(Jsonb *options, const char *key)
{
	char	   *v = sdp_operator_option(options, key);

	if (v == NULL || v[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("operator active_count needs option \"%s\"", key),
				 errhint("E.g. options => '{\"key\": \"zone\", \"member\": \"icao24\", \"ttl\": \"30 seconds\", \"capacity_column\": \"capacity\"}'.")));
	return v;
}

/* Parse and check the options; fills cfg when given. */
static TupleDesc
parse_options(TupleDesc input, Jsonb *options, ActiveCountConfig *cfg, const char **key_column)
{
	char	   *key = required_option(options, "key");
	char	   *member = required_option(options, "member");
	char	   *capacity_column = sdp_operator_option(options, "capacity_column");
	char	   *capacity = sdp_operator_option(options, "capacity");
	int			key_index;
	int64		ttl_ms;
	int64		sweep_ms;
	TupleDesc	out;
	const char *names[3];

	sdp_operator_check_options(options, "active_count", known_options);
	key_index = sdp_operator_column(input, key, "key", true);
	cfg->member_index = sdp_operator_column(input, member, "member", true);
	if (capacity_column && capacity)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("options \"capacity_column\" and \"capacity\" exclude each other")));
	if (capacity_column == NULL && capacity == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("operator active_count needs option \"capacity_column\" or \"capacity\""),
				 errhint("capacity_column names the transform's column holding each key's capacity; capacity is a fixed number.")));
	cfg->capacity_index = -1;
	if (capacity_column)
	{
		cfg->capacity_index = sdp_operator_column(input, capacity_column, "capacity_column", true);
		cfg->capacity_type = TupleDescAttr(input, cfg->capacity_index)->atttypid;
		if (!is_numeric_type(cfg->capacity_type))
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("capacity column \"%s\" has type %s, not a number", capacity_column,
							format_type_be(cfg->capacity_type))));
	}
	else
	{
		char	   *end;

		cfg->capacity = strtod(capacity, &end);
		if (end == capacity || *end != '\0' || cfg->capacity < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("option \"capacity\" must be a non-negative number, not \"%s\"", capacity)));
	}
	ttl_ms = sdp_interval_option_ms("ttl", option_or(options, "ttl", "30 seconds"));
	if (ttl_ms <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"ttl\" must be positive")));
	sweep_ms = sdp_operator_option(options, "sweep_interval")
		? sdp_interval_option_ms("sweep_interval", sdp_operator_option(options, "sweep_interval"))
		: Max(ttl_ms / 4, 10);
	if (sweep_ms <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"sweep_interval\" must be positive")));
	cfg->ttl_us = ttl_ms * 1000;
	cfg->sweep_us = sweep_ms * 1000;

	names[0] = option_or(options, "count_column", "active_count");
	names[1] = option_or(options, "alert_column", "over_capacity");
	names[2] = option_or(options, "time_column", "updated_at");
	for (int i = 0; i < 3; i++)
		if (strcmp(names[i], key) == 0 || (i > 0 && strcmp(names[i], names[0]) == 0) ||
			(i > 1 && strcmp(names[i], names[1]) == 0))
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_COLUMN),
					 errmsg("output column \"%s\" of operator active_count is named twice", names[i])));

	out = CreateTemplateTupleDesc(4);
	TupleDescInitEntry(out, 1, key, TupleDescAttr(input, key_index)->atttypid,
					   TupleDescAttr(input, key_index)->atttypmod, 0);
	TupleDescInitEntry(out, 2, names[0], INT8OID, -1, 0);
	TupleDescInitEntry(out, 3, names[1], BOOLOID, -1, 0);
	TupleDescInitEntry(out, 4, names[2], TIMESTAMPTZOID, -1, 0);
	*key_column = key;
	return out;
}

static TupleDesc
active_count_validate(TupleDesc input, Jsonb *options, Relation target, SdpFlowOptions *opts)
{
	ActiveCountConfig cfg;
	const char *key;

	if (!opts->mode_given)
	{
		opts->mode = SDP_MODE_UPSERT;
		opts->mode_given = true;
	}
	return parse_options(input, options, &cfg, &key);
}

static void *
active_count_init(SdpOperatorContext *ctx, Jsonb *options)
{
	ActiveCountConfig *cfg = palloc0(sizeof(ActiveCountConfig));
	Oid			func;
	Oid			key_type;
	bool		varlena;
	int			key_index;

	(void) parse_options(ctx->input_desc, options, cfg, &ctx->key_column);
	ctx->key_column = pstrdup(ctx->key_column);
	getTypeOutputInfo(TupleDescAttr(ctx->input_desc, cfg->member_index)->atttypid, &func, &varlena);
	fmgr_info(func, &cfg->member_out);
	key_index = sdp_operator_column(ctx->input_desc, ctx->key_column, "key", true);
	key_type = TupleDescAttr(ctx->input_desc, key_index)->atttypid;
	cfg->key_typmod = TupleDescAttr(ctx->input_desc, key_index)->atttypmod;
	getTypeInputInfo(key_type, &func, &cfg->key_ioparam);
	fmgr_info(func, &cfg->key_in);
	return cfg;
}

static double
capacity_of(ActiveCountConfig *cfg, Datum d)
{
	switch (cfg->capacity_type)
	{
		case INT2OID:
			return DatumGetInt16(d);
		case INT4OID:
			return DatumGetInt32(d);
		case INT8OID:
			return (double) DatumGetInt64(d);
		case FLOAT4OID:
			return DatumGetFloat4(d);
		case FLOAT8OID:
			return DatumGetFloat8(d);
		default:
			return DatumGetFloat8(DirectFunctionCall1(numeric_float8, d));
	}
}

/* Emit (key, count, count > capacity, now) when the count differs from the last emitted. */
static void
emit_if_changed(SdpOperatorContext *ctx, SdpKeyState *ks, ActiveCountConfig *cfg, int64 count)
{
	int64		last;
	int64		capbits;
	double		capacity = cfg->capacity;
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};

	if (sdp_state_get_value(ks, V_LAST_COUNT, &last) && last == count)
		return;
	if (cfg->capacity_index >= 0)
	{
		if (sdp_state_get_value(ks, V_CAPACITY, &capbits))
			memcpy(&capacity, &capbits, sizeof(double));
		else
			capacity = -1;		/* unknown: never crowded */
	}
	values[0] = InputFunctionCall(&cfg->key_in, (char *) ks->key, cfg->key_ioparam, cfg->key_typmod);
	values[1] = Int64GetDatum(count);
	values[2] = BoolGetDatum(capacity >= 0 && (double) count > capacity);
	values[3] = TimestampTzGetDatum(ctx->now);
	sdp_emit(ctx, values, nulls);
	sdp_state_set_value(ks, V_LAST_COUNT, count);
}

static void
arm_sweep(SdpOperatorContext *ctx, SdpKeyState *ks, ActiveCountConfig *cfg)
{
	TimestampTz when = ctx->now + cfg->sweep_us;

	sdp_timer_register(ctx, ks, SDP_PROCESSING_TIME, when, 0);
	sdp_state_set_value(ks, V_SWEEP_TIMER, when);
}

static void
active_count_handle_rows(SdpOperatorContext *ctx, SdpKeyState *ks, HeapTuple *rows, int nrows)
{
	ActiveCountConfig *cfg = ctx->config;
	int64		seen = ctx->now;
	int64		pending;

	for (int i = 0; i < nrows; i++)
	{
		bool		isnull;
		Datum		d = heap_getattr(rows[i], cfg->member_index + 1, ctx->input_desc, &isnull);

		if (isnull)
			continue;
		sdp_state_map_put(ks, OutputFunctionCall(&cfg->member_out, d), &seen);
		if (cfg->capacity_index >= 0)
		{
			d = heap_getattr(rows[i], cfg->capacity_index + 1, ctx->input_desc, &isnull);
			if (!isnull)
			{
				double		capacity = capacity_of(cfg, d);
				int64		bits;

				memcpy(&bits, &capacity, sizeof(bits));
				sdp_state_set_value(ks, V_CAPACITY, bits);
			}
		}
	}
	if (sdp_state_map_count(ks) == 0)
		return;
	emit_if_changed(ctx, ks, cfg, sdp_state_map_count(ks));
	/* one pending sweep per key: arm it only when none is pending */
	if (!sdp_state_get_value(ks, V_SWEEP_TIMER, &pending))
		arm_sweep(ctx, ks, cfg);
}

typedef struct EvictArg
{
	int64		oldest;
} EvictArg;

static bool
keep_if_recent(const char *member, void *value, void *arg)
{
	int64		seen;

	memcpy(&seen, value, sizeof(seen));
	return seen >= ((EvictArg *) arg)->oldest;
}

static void
active_count_handle_expired_timer(SdpOperatorContext *ctx, SdpKeyState *ks, const SdpTimer *timer)
{
	ActiveCountConfig *cfg = ctx->config;
	EvictArg	arg = {ctx->now - cfg->ttl_us};
	int64		count;

	sdp_state_clear_value(ks, V_SWEEP_TIMER);
	sdp_state_map_visit(ks, keep_if_recent, &arg);
	count = sdp_state_map_count(ks);
	emit_if_changed(ctx, ks, cfg, count);
	if (count > 0)
		arm_sweep(ctx, ks, cfg);
	else
	{
		/* the key is empty: its 0 is emitted, nothing is left to keep */
		sdp_state_clear_value(ks, V_CAPACITY);
		sdp_state_clear_value(ks, V_LAST_COUNT);
	}
}

static char *
active_count_describe_value(int idx, int64 value)
{
	double		d;

	switch (idx)
	{
		case V_CAPACITY:
			memcpy(&d, &value, sizeof(d));
			return psprintf("%g", d);
		case V_SWEEP_TIMER:
			return psprintf("\"%s\"", timestamptz_to_str(value));
		default:
			return psprintf(INT64_FORMAT, value);
	}
}

static char *
active_count_describe_map_value(const void *value)
{
	int64		seen;

	memcpy(&seen, value, sizeof(seen));
	return psprintf("\"%s\"", timestamptz_to_str(seen));
}

/* A member must fit the map (a row that cannot is dead-lettered before the step). */
static void
active_count_check_row(SdpOperatorContext *ctx, HeapTuple row)
{
	ActiveCountConfig *cfg = ctx->config;
	bool		isnull;
	Datum		d = heap_getattr(row, cfg->member_index + 1, ctx->input_desc, &isnull);

	if (!isnull &&
		sdp_text_form_length(d, TupleDescAttr(ctx->input_desc, cfg->member_index)->atttypid,
							 &cfg->member_out) >= SDP_STATE_MEMBER_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("member \"%.40s...\" is longer than %d bytes",
						OutputFunctionCall(&cfg->member_out, d), SDP_STATE_MEMBER_MAX - 1),
				 errhint("Members of active_count (the \"member\" option's column) are at most %d bytes.",
						 SDP_STATE_MEMBER_MAX - 1)));
}

const SdpOperator sdp_active_count_operator = {
	.name = "active_count",
	.map_value_len = sizeof(int64),
	.value_names = {"capacity", "last_count", "sweep_timer", NULL},
	.map_name = "last_seen",
	.validate = active_count_validate,
	.init = active_count_init,
	.handle_rows = active_count_handle_rows,
	.handle_expired_timer = active_count_handle_expired_timer,
	.describe_value = active_count_describe_value,
	.describe_map_value = active_count_describe_map_value,
	.check_row = active_count_check_row,
};

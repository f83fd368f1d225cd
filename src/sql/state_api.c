/*
 * state_api.c
 *		The state API of processors: the SQL functions a flow's handlers call
 *		(sdp_value, sdp_map_put, sdp_register_timer, ...), acting on the key
 *		whose rows or timer the handler is handling (stateful/processor.h).
 *
 * Each is a thin layer: it finds the handler's variables (55000 outside a
 * handler), the variable by name (42704 when the flow declares none of that
 * name, 42809 when it is of another kind), checks that the types the call
 * resolved its polymorphic arguments to are the variable's (42804), and
 * calls processor_state.c.  None is STRICT: a type's hint is a NULL of it.
 */
#include "sdp.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "stateful/operators/processor.h"

PG_FUNCTION_INFO_V1(sdp_value);
PG_FUNCTION_INFO_V1(sdp_set_value);
PG_FUNCTION_INFO_V1(sdp_clear);
PG_FUNCTION_INFO_V1(sdp_list);
PG_FUNCTION_INFO_V1(sdp_list_append);
PG_FUNCTION_INFO_V1(sdp_set_list);
PG_FUNCTION_INFO_V1(sdp_map_get);
PG_FUNCTION_INFO_V1(sdp_map_put);
PG_FUNCTION_INFO_V1(sdp_map_remove);
PG_FUNCTION_INFO_V1(sdp_map_count);
PG_FUNCTION_INFO_V1(sdp_map_entries);
PG_FUNCTION_INFO_V1(sdp_register_timer);
PG_FUNCTION_INFO_V1(sdp_delete_timer);
PG_FUNCTION_INFO_V1(sdp_timers);
PG_FUNCTION_INFO_V1(sdp_processing_time);
PG_FUNCTION_INFO_V1(sdp_watermark);

static const char *const kind_names[] = {"value", "list", "map"};

static char
typalign_of(Oid type)
{
	int16		len;
	bool		byval;
	char		align;

	get_typlenbyvalalign(type, &len, &byval, &align);
	return align;
}

/* The handler's variable named by argument 0, of the kind the function is for. */
static int
variable(FunctionCallInfo fcinfo, const char *fn, SdpVarKind kind, SdpVars **vars)
{
	char	   *name;
	int			var;
	const SdpVarDecl *d;

	*vars = sdp_processor_current_vars(fn);
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s needs the name of a state variable", fn)));
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	var = sdp_vars_find(*vars, name);
	if (var < 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("state variable \"%s\" does not exist", name),
				 errhint("Declare it in the flow's option \"state\".")));
	d = sdp_vars_decl(*vars, var);
	if (d->kind != kind)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("state variable \"%s\" is a %s, and %s is for a %s", name, kind_names[d->kind], fn,
						kind_names[kind])));
	return var;
}

/* Argument argno must be of type want (the variable's): 42804 otherwise. */
static void
check_type(FunctionCallInfo fcinfo, int argno, Oid want, const SdpVarDecl *d, const char *what)
{
	Oid			given = get_fn_expr_argtype(fcinfo->flinfo, argno);

	if (given != want)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("%s of state variable \"%s\" is %s, not %s", what, d->name,
						format_type_extended(want, -1, FORMAT_TYPE_ALLOW_INVALID),
						OidIsValid(given) ? format_type_be(given) : "unknown"),
				 errhint("Cast the argument: e.g. NULL::%s, or value::%s.", format_type_be(want), format_type_be(want))));
}

/* sdp_value(name, hint anyelement) -> anyelement: the value, NULL when it has none */
Datum
sdp_value(PG_FUNCTION_ARGS)
{
	SdpVars    *vars;
	int			var = variable(fcinfo, "sdp_value", SDP_VAR_VALUE, &vars);
	Datum		v;

	check_type(fcinfo, 1, sdp_vars_decl(vars, var)->type, sdp_vars_decl(vars, var), "the value");
	if (!sdp_vars_get_value(vars, var, &v))
		PG_RETURN_NULL();
	PG_RETURN_DATUM(v);
}

/* sdp_set_value(name, v anyelement): NULL clears it */
Datum
sdp_set_value(PG_FUNCTION_ARGS)
{
	SdpVars    *vars;
	int			var = variable(fcinfo, "sdp_set_value", SDP_VAR_VALUE, &vars);

	check_type(fcinfo, 1, sdp_vars_decl(vars, var)->type, sdp_vars_decl(vars, var), "the value");
	if (PG_ARGISNULL(1))
		sdp_vars_clear(vars, var);
	else
		sdp_vars_set_value(vars, var, PG_GETARG_DATUM(1));
	PG_RETURN_VOID();
}

/* sdp_clear(name): a variable of any kind emptied */
Datum
sdp_clear(PG_FUNCTION_ARGS)
{
	SdpVars    *vars = sdp_processor_current_vars("sdp_clear");
	char	   *name;
	int			var;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("sdp_clear needs the name of a state variable")));
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	var = sdp_vars_find(vars, name);
	if (var < 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("state variable \"%s\" does not exist", name),
				 errhint("Declare it in the flow's option \"state\".")));
	sdp_vars_clear(vars, var);
	PG_RETURN_VOID();
}

/* sdp_list(name, hint anyarray) -> anyarray: the elements in the order they were appended, '{}' when none */
Datum
sdp_list(PG_FUNCTION_ARGS)
{
	SdpVars    *vars;
	int			var = variable(fcinfo, "sdp_list", SDP_VAR_LIST, &vars);
	const SdpVarDecl *d = sdp_vars_decl(vars, var);
	Datum	   *elems;
	int			n;
	char		align;

	check_type(fcinfo, 1, get_array_type(d->type), d, "the array");
	n = sdp_vars_list(vars, var, &elems);
	align = typalign_of(d->type);
	PG_RETURN_ARRAYTYPE_P(construct_array(elems, n, d->type, d->typlen, d->typbyval, align));
}

Datum
sdp_list_append(PG_FUNCTION_ARGS)
{
	SdpVars    *vars;
	int			var = variable(fcinfo, "sdp_list_append", SDP_VAR_LIST, &vars);

	check_type(fcinfo, 1, sdp_vars_decl(vars, var)->type, sdp_vars_decl(vars, var), "an element");
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("list \"%s\" cannot hold a NULL element", sdp_vars_decl(vars, var)->name)));
	sdp_vars_list_append(vars, var, PG_GETARG_DATUM(1));
	PG_RETURN_VOID();
}

/* sdp_set_list(name, a anyarray): NULL or '{}' empties it */
Datum
sdp_set_list(PG_FUNCTION_ARGS)
{
	SdpVars    *vars;
	int			var = variable(fcinfo, "sdp_set_list", SDP_VAR_LIST, &vars);
	const SdpVarDecl *d = sdp_vars_decl(vars, var);
	Datum	   *elems = NULL;
	bool	   *nulls = NULL;
	int			n = 0;

	check_type(fcinfo, 1, get_array_type(d->type), d, "the array");
	if (!PG_ARGISNULL(1))
		deconstruct_array(PG_GETARG_ARRAYTYPE_P(1), d->type, d->typlen, d->typbyval, typalign_of(d->type),
						  &elems, &nulls, &n);
	sdp_vars_set_list(vars, var, elems, nulls, n);
	PG_RETURN_VOID();
}

static void
check_map_key(FunctionCallInfo fcinfo, SdpVars *vars, int var)
{
	check_type(fcinfo, 1, sdp_vars_decl(vars, var)->key_type, sdp_vars_decl(vars, var), "the key");
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("map \"%s\" cannot have a NULL key", sdp_vars_decl(vars, var)->name)));
}

/* sdp_map_get(name, k anyelement, hint anycompatible) -> anycompatible: NULL when absent */
Datum
sdp_map_get(PG_FUNCTION_ARGS)
{
	SdpVars    *vars;
	int			var = variable(fcinfo, "sdp_map_get", SDP_VAR_MAP, &vars);
	Datum		v;
	bool		isnull;

	check_map_key(fcinfo, vars, var);
	check_type(fcinfo, 2, sdp_vars_decl(vars, var)->type, sdp_vars_decl(vars, var), "the value");
	if (!sdp_vars_map_get(vars, var, PG_GETARG_DATUM(1), &v, &isnull) || isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(v);
}

Datum
sdp_map_put(PG_FUNCTION_ARGS)
{
	SdpVars    *vars;
	int			var = variable(fcinfo, "sdp_map_put", SDP_VAR_MAP, &vars);

	check_map_key(fcinfo, vars, var);
	check_type(fcinfo, 2, sdp_vars_decl(vars, var)->type, sdp_vars_decl(vars, var), "the value");
	sdp_vars_map_put(vars, var, PG_GETARG_DATUM(1), PG_ARGISNULL(2) ? (Datum) 0 : PG_GETARG_DATUM(2),
					 PG_ARGISNULL(2));
	PG_RETURN_VOID();
}

/* sdp_map_remove(name, k anyelement) -> boolean: whether it was there */
Datum
sdp_map_remove(PG_FUNCTION_ARGS)
{
	SdpVars    *vars;
	int			var = variable(fcinfo, "sdp_map_remove", SDP_VAR_MAP, &vars);

	check_map_key(fcinfo, vars, var);
	PG_RETURN_BOOL(sdp_vars_map_remove(vars, var, PG_GETARG_DATUM(1)));
}

Datum
sdp_map_count(PG_FUNCTION_ARGS)
{
	SdpVars    *vars;
	int			var = variable(fcinfo, "sdp_map_count", SDP_VAR_MAP, &vars);

	PG_RETURN_INT64(sdp_vars_map_count(vars, var));
}

/* sdp_map_entries(name, kh anyelement, vh anycompatible) -> TABLE(key anyelement, value anycompatible) */
Datum
sdp_map_entries(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	SdpVars    *vars;
	int			var = variable(fcinfo, "sdp_map_entries", SDP_VAR_MAP, &vars);
	Datum	   *keys;
	Datum	   *values;
	bool	   *nulls;
	int			n;

	check_type(fcinfo, 1, sdp_vars_decl(vars, var)->key_type, sdp_vars_decl(vars, var), "the key");
	check_type(fcinfo, 2, sdp_vars_decl(vars, var)->type, sdp_vars_decl(vars, var), "the value");
	InitMaterializedSRF(fcinfo, 0);
	n = sdp_vars_map_entries(vars, var, &keys, &values, &nulls);
	for (int i = 0; i < n; i++)
	{
		Datum		row[2] = {keys[i], values[i]};
		bool		rnulls[2] = {false, nulls[i]};

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, row, rnulls);
	}
	return (Datum) 0;
}

static SdpTimeKind
timer_kind(FunctionCallInfo fcinfo, int argno)
{
	char	   *kind = PG_ARGISNULL(argno) ? "processing_time" : text_to_cstring(PG_GETARG_TEXT_PP(argno));

	if (strcmp(kind, "processing_time") == 0)
		return SDP_PROCESSING_TIME;
	if (strcmp(kind, "event_time") == 0)
		return SDP_EVENT_TIME;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid timer kind \"%s\"", kind),
			 errhint("A timer is \"processing_time\" (due when the clock passes it) or \"event_time\" (when the watermark does).")));
	return SDP_PROCESSING_TIME;
}

static TimestampTz
timer_time(FunctionCallInfo fcinfo)
{
	TimestampTz at;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("a timer needs a time")));
	at = PG_GETARG_TIMESTAMPTZ(0);
	if (TIMESTAMP_NOT_FINITE(at))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("a timer's time must be finite")));
	return at;
}

/* sdp_register_timer(at, kind): one timer per (at, kind) of the key; registering it again does nothing */
Datum
sdp_register_timer(PG_FUNCTION_ARGS)
{
	SdpVars    *vars = sdp_processor_current_vars("sdp_register_timer");
	TimestampTz at = timer_time(fcinfo);
	SdpTimeKind kind = timer_kind(fcinfo, 1);

	sdp_processor_check_timer(kind);
	(void) sdp_vars_add_timer(vars, kind, at);
	PG_RETURN_VOID();
}

/* sdp_delete_timer(at, kind) -> boolean: whether it was pending */
Datum
sdp_delete_timer(PG_FUNCTION_ARGS)
{
	SdpVars    *vars = sdp_processor_current_vars("sdp_delete_timer");
	TimestampTz at = timer_time(fcinfo);
	SdpTimeKind kind = timer_kind(fcinfo, 1);

	PG_RETURN_BOOL(sdp_vars_delete_timer(vars, kind, at));
}

/* sdp_timers() -> TABLE(at, kind): the key's pending timers, by time */
Datum
sdp_timers(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	SdpVars    *vars = sdp_processor_current_vars("sdp_timers");
	SdpTimer   *t;
	int			n;

	InitMaterializedSRF(fcinfo, 0);
	n = sdp_vars_timers(vars, &t);
	for (int i = 0; i < n; i++)
	{
		Datum		row[2] = {TimestampTzGetDatum(t[i].when),
		CStringGetTextDatum(t[i].kind == SDP_EVENT_TIME ? "event_time" : "processing_time")};
		bool		nulls[2] = {false, false};

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, row, nulls);
	}
	return (Datum) 0;
}

/* sdp_processing_time(): the clock of the handler's batch (what ttl and processing-time timers count by) */
Datum
sdp_processing_time(PG_FUNCTION_ARGS)
{
	PG_RETURN_TIMESTAMPTZ(sdp_processor_now());
}

/* sdp_watermark(): the flow's event-time watermark, NULL until known */
Datum
sdp_watermark(PG_FUNCTION_ARGS)
{
	bool		known;
	TimestampTz wm = sdp_processor_watermark(&known);

	if (!known)
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(wm);
}

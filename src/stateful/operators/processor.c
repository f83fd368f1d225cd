/*
 * processor.c
 *		The processor operator: a stateful processor the flow's owner writes
 *		as PostgreSQL functions (docs/design-processor.md).
 *
 *	options: key (required), handle_rows (required), handle_timer,
 *	         handle_initial_state with initial_state, state, event_time,
 *	         idle_timeout
 *
 * handle_rows(key, rows C[]) is called once per key per batch with the key's
 * rows in arrival order, C a composite type whose columns are matched by name
 * to the transform's (or the input's); handle_timer(key, at timestamptz, kind
 * text) when a timer of the key is due; handle_initial_state(key, row I) once
 * per row of the initial_state query, in the first batch of a flow that has
 * never committed.  What they return (SETOF a composite type) is emitted, its
 * columns written to the target's of the same name.  While one runs, the
 * state API (sql/state_api.c) acts on its key's variables
 * (processor_state.c), which are the store's ext state of the key.
 *
 * A handler runs as the flow's owner (the worker's role), with the flow's
 * search_path and statement_timeout; what it changes in the session's
 * settings (role included) is undone when it returns.  The framework calls it
 * with the key closed (calls_user_code): no lock is held while it runs.
 * Every state change is in the undo log, so a batch that fails is undone and
 * retried with its bad messages isolated (batch.c), the operator's changes
 * for them undone too: a handler that raises sets aside the messages of its
 * key's rows, and the flow goes on.  A timer's handler that raises is logged
 * and its changes undone; its timer is spent.
 */
#include "stateful/operator.h"
#include "stateful/operators/processor.h"
#include "stateful/processor_state.h"
#include "decl/flow_options.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "parser/parse_coerce.h"
#include "parser/parse_type.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/regproc.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/typcache.h"

#include "compat.h"

typedef struct Handler
{
	const char *option;			/* handle_rows, ... */
	Oid			fn;				/* InvalidOid: not given */
	FmgrInfo	call;
	Oid			row_type;		/* rows' composite (handle_rows: the array's element) */
	TupleDesc	row_desc;
	int		   *row_src;		/* per row_desc column: the source column's index, -1: none (dropped) */
	Oid			out_type;
	TupleDesc	out_desc;
} Handler;

typedef struct ProcessorConfig
{
	const char *key_column;
	int			key_index;
	Oid			key_type;
	int32		key_typmod;
	FmgrInfo	key_in;
	Oid			key_ioparam;
	FmgrInfo	key_out;
	Handler		rows;
	Handler		timer;
	Handler		initial;
	char	   *initial_state;	/* a SELECT, or NULL */
	SdpVarDecl *decls;
	int			ndecls;
	SdpVars    *vars;			/* the worker's */
	TupleDesc	out_desc;		/* what every handler returns */
	bool		initial_done;
	/* a due timer's key, taken with the key open */
	char	   *timer_key_text;
} ProcessorConfig;

static const char *const known_options[] = {
	"key", "handle_rows", "handle_timer", "handle_initial_state", "initial_state", "state",
	"event_time", "idle_timeout", NULL
};

/* ---- the current call, for the state API ---- */

static SdpOperatorContext *current_ctx = NULL;
static const char *current_handler = NULL;

/*
 * Subtransactions a handler starts (a PL/pgSQL block with EXCEPTION): the
 * state changes made in one that rolls back are undone with it, as its
 * statements' are.  A stack of (subtransaction, undo mark), kept while a
 * handler runs (processor_subxact).
 */
typedef struct SubxactMark
{
	SubTransactionId subid;
	int			mark;
} SubxactMark;

static SubxactMark *subxact_marks = NULL;
static int	nsubxact_marks = 0;
static int	subxact_marks_cap = 0;

static void
processor_subxact(SubXactEvent event, SubTransactionId mySubid, SubTransactionId parentSubid, void *arg)
{
	SdpVars    *vars;

	if (current_ctx == NULL)
		return;					/* not inside a handler: the worker's own subtransactions */
	vars = ((ProcessorConfig *) current_ctx->config)->vars;
	switch (event)
	{
		case SUBXACT_EVENT_START_SUB:
			if (nsubxact_marks == subxact_marks_cap)
			{
				subxact_marks_cap = Max(subxact_marks_cap * 2, 8);
				subxact_marks = subxact_marks
					? repalloc(subxact_marks, sizeof(SubxactMark) * subxact_marks_cap)
					: MemoryContextAlloc(TopMemoryContext, sizeof(SubxactMark) * subxact_marks_cap);
			}
			subxact_marks[nsubxact_marks].subid = mySubid;
			subxact_marks[nsubxact_marks++].mark = sdp_vars_mark(vars);
			break;
		case SUBXACT_EVENT_COMMIT_SUB:
			if (nsubxact_marks > 0 && subxact_marks[nsubxact_marks - 1].subid == mySubid)
				nsubxact_marks--;
			break;
		case SUBXACT_EVENT_ABORT_SUB:
			if (nsubxact_marks > 0 && subxact_marks[nsubxact_marks - 1].subid == mySubid)
			{
				/* the locks the error may have held are released by now (AbortSubTransaction) */
				sdp_vars_undo(vars, subxact_marks[--nsubxact_marks].mark);
			}
			break;
		default:
			break;
	}
}

SdpVars *
sdp_processor_current_vars(const char *function)
{
	if (current_ctx == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("%s can only be called inside a processor's handler", function),
				 errdetail("The state functions act on the key whose rows or timer a flow's handler is handling."),
				 errhint("Call it from the function a flow with operator 'processor' names in handle_rows, handle_timer or handle_initial_state.")));
	return ((ProcessorConfig *) current_ctx->config)->vars;
}

TimestampTz
sdp_processor_now(void)
{
	(void) sdp_processor_current_vars("sdp_processing_time");
	return current_ctx->now;
}

TimestampTz
sdp_processor_watermark(bool *known)
{
	(void) sdp_processor_current_vars("sdp_watermark");
	*known = current_ctx->watermark != DT_NOBEGIN;
	return current_ctx->watermark;
}

/* A timer may be registered: the flow has a timer handler (and, for event time, an event_time). */
void
sdp_processor_check_timer(SdpTimeKind kind)
{
	ProcessorConfig *cfg;

	(void) sdp_processor_current_vars("sdp_register_timer");
	cfg = current_ctx->config;
	if (!OidIsValid(cfg->timer.fn))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("flow \"%s\" has no handle_timer: a timer would never be handled", current_ctx->flow_name),
				 errhint("Name the timer's handler in the flow's option \"handle_timer\".")));
	if (kind == SDP_EVENT_TIME && current_ctx->event_time_column == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("flow \"%s\" has no event time: an event_time timer would never be due", current_ctx->flow_name),
				 errhint("Name the input's timestamptz column of event time in the flow's option \"event_time\".")));
}

/* ---- options ---- */

static JsonbValue *
option_value(Jsonb *options, const char *key)
{
	JsonbValue	k;

	if (options == NULL)
		return NULL;
	k.type = jbvString;
	k.val.string.val = (char *) key;
	k.val.string.len = strlen(key);
	return findJsonbValueFromContainer(&options->root, JB_FOBJECT, &k);
}

static char *
jbv_text(JsonbValue *v)
{
	return v && v->type == jbvString ? pnstrdup(v->val.string.val, v->val.string.len) : NULL;
}

/* A type named in the option "state" (42704 when there is none). */
static Oid
state_type(const char *name, const char *var)
{
	Oid			type;
	int32		typmod;

	if (name == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_SYNTAX_ERROR),
				 errmsg("state variable \"%s\" needs a type name", var)));
	parseTypeString(name, &type, &typmod, false);
	if (get_typtype(type) == TYPTYPE_PSEUDO)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("state variable \"%s\" cannot be of pseudo-type %s", var, name)));
	return type;
}

/*
 * The option "state": {"name": {"value": type} | {"list": type} |
 * {"map": [key type, value type]}, optionally "ttl": interval}.
 */
static void
state_variable_context(void *arg)
{
	if (arg != NULL)
		errcontext("state variable \"%s\"", (const char *) arg);
}

static SdpVarDecl *
parse_state(Jsonb *options, int *n)
{
	JsonbValue *state = option_value(options, "state");
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	SdpVarDecl *decls;
	int			cap = 8;
	int			count = 0;
	Jsonb	   *obj;
	ErrorContextCallback errcb;

	*n = 0;
	if (state == NULL || state->type == jbvNull)
		return NULL;
	if (state->type != jbvBinary || !JsonContainerIsObject(state->val.binary.data))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"state\" must be a JSON object of variables"),
				 errhint("E.g. \"state\": {\"seen\": {\"map\": [\"text\", \"timestamptz\"], \"ttl\": \"1 hour\"}, \"last\": {\"value\": \"timestamptz\"}}.")));
	decls = palloc0(sizeof(SdpVarDecl) * cap);
	obj = JsonbValueToJsonb(state);
	it = JsonbIteratorInit(&obj->root);
	errcb.callback = state_variable_context;
	errcb.arg = NULL;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		char	   *name;
		SdpVarDecl *d;
		JsonbValue *kind;
		Jsonb	   *def;
		JsonbValue *ttl;
		int			kinds = 0;

		if (tok != WJB_KEY)
			continue;
		name = pnstrdup(v.val.string.val, v.val.string.len);
		errcb.arg = name;
		if (strcmp(name, "timers") == 0 || name[0] == '\0')
			ereport(ERROR,
					(errcode(ERRCODE_RESERVED_NAME),
					 errmsg("a state variable cannot be named \"%s\"", name),
					 errdetail("sdp_flow_state shows a key's timers under the name \"timers\".")));
		tok = JsonbIteratorNext(&it, &v, true);
		if (v.type != jbvBinary || !JsonContainerIsObject(v.val.binary.data))
			ereport(ERROR,
					(errcode(ERRCODE_SYNTAX_ERROR),
					 errmsg("state variable \"%s\" must be an object: {\"value\": type}, {\"list\": type} or {\"map\": [key type, value type]}", name)));
		if (count == cap)
		{
			cap *= 2;
			decls = repalloc(decls, sizeof(SdpVarDecl) * cap);
		}
		d = &decls[count];
		memset(d, 0, sizeof(*d));
		d->name = name;
		def = JsonbValueToJsonb(&v);
		if ((kind = option_value(def, "value")) != NULL)
		{
			d->kind = SDP_VAR_VALUE;
			d->type = state_type(jbv_text(kind), name);
			kinds++;
		}
		if ((kind = option_value(def, "list")) != NULL)
		{
			d->kind = SDP_VAR_LIST;
			d->type = state_type(jbv_text(kind), name);
			if (!OidIsValid(get_array_type(d->type)))
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("list \"%s\" cannot hold values of %s: it is read as an array of them, and %s has no array type",
								name, format_type_be(d->type), format_type_be(d->type)),
						 errhint("A list of arrays is a list of a composite type holding the array (CREATE TYPE ... AS (a int[])).")));
			kinds++;
		}
		if ((kind = option_value(def, "map")) != NULL)
		{
			JsonbValue *kt = NULL;
			JsonbValue *vt = NULL;

			if (kind->type == jbvBinary && JsonContainerIsArray(kind->val.binary.data) &&
				JsonContainerSize(kind->val.binary.data) == 2)
			{
				kt = getIthJsonbValueFromContainer(kind->val.binary.data, 0);
				vt = getIthJsonbValueFromContainer(kind->val.binary.data, 1);
			}
			if (kt == NULL || vt == NULL || kt->type != jbvString || vt->type != jbvString)
				ereport(ERROR,
						(errcode(ERRCODE_SYNTAX_ERROR),
						 errmsg("map variable \"%s\" needs [key type, value type]", name),
						 errhint("E.g. {\"map\": [\"text\", \"bigint\"]}.")));
			d->kind = SDP_VAR_MAP;
			d->key_type = state_type(jbv_text(kt), name);
			d->type = state_type(jbv_text(vt), name);
			kinds++;
		}
		if (kinds != 1)
			ereport(ERROR,
					(errcode(ERRCODE_SYNTAX_ERROR),
					 errmsg("state variable \"%s\" must be one of value, list or map", name),
					 errhint("E.g. {\"value\": \"timestamptz\"}, {\"list\": \"text\"} or {\"map\": [\"text\", \"bigint\"]}.")));
		{
			JsonbIterator *dit = JsonbIteratorInit(&def->root);
			JsonbValue	dv;
			JsonbIteratorToken dt;

			while ((dt = JsonbIteratorNext(&dit, &dv, true)) != WJB_DONE)
				if (dt == WJB_KEY)
				{
					char	   *k = pnstrdup(dv.val.string.val, dv.val.string.len);

					if (strcmp(k, "value") != 0 && strcmp(k, "list") != 0 && strcmp(k, "map") != 0 &&
						strcmp(k, "ttl") != 0)
						ereport(ERROR,
								(errcode(ERRCODE_SYNTAX_ERROR),
								 errmsg("state variable \"%s\" has unknown attribute \"%s\"", name, k),
								 errhint("A variable is {\"value\": type}, {\"list\": type} or {\"map\": [key type, value type]}, with an optional \"ttl\".")));
				}
		}
		if ((ttl = option_value(def, "ttl")) != NULL && ttl->type != jbvNull)
		{
			char	   *text = jbv_text(ttl);

			if (text == NULL)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("the ttl of state variable \"%s\" must be an interval, e.g. \"1 hour\"", name)));
			d->ttl_us = sdp_interval_option_us("ttl", text);
			if (d->ttl_us <= 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("the ttl of state variable \"%s\" must be positive", name)));
		}
		for (int i = 0; i < count; i++)
			if (strcmp(decls[i].name, name) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_DUPLICATE_OBJECT),
						 errmsg("state variable \"%s\" is declared twice", name)));
		count++;
	}
	error_context_stack = errcb.previous;
	*n = count;
	return decls;
}

/* ---- handlers ---- */

/* The columns of a composite type, as a descriptor (a copy). */
static TupleDesc
composite_desc(Oid type)
{
	return lookup_rowtype_tupdesc_copy(type, -1);
}

static bool
is_composite(Oid type)
{
	return OidIsValid(type) && type_is_rowtype(type) && type != RECORDOID;
}

static char *
signature(const char *name, const char *args)
{
	return psprintf("%s(%s) RETURNS SETOF <a composite type>", name, args);
}

/*
 * The function an option names, by the shape its arguments must have:
 * which(nargs, argtypes) says whether a candidate fits.  42883 naming the
 * expected signature when none does, 42725 when several do.
 */
static Oid
find_handler(const char *option, const char *name, int nargs, const char *expected,
			 bool (*fits) (Oid *argtypes, void *arg), void *arg)
{
	List	   *names;
	FuncCandidateList c;
	Oid			found = InvalidOid;
	int			n = 0;

	if (name[0] == '\0' || strchr(name, '(') != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"%s\" must be a function's name, not \"%s\"", option, name),
				 errhint("Give the name alone (schema-qualified or not): the function is found by its arguments, %s.",
						 signature("f", expected))));
	names = sdp_qualified_name_list(name);
	c = FuncnameGetCandidates(names, nargs, NIL, false, false, false, true);

	for (; c != NULL; c = c->next)
		if (fits(c->args, arg))
		{
			found = c->oid;
			n++;
		}
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("function %s named by option \"%s\" does not exist", signature(name, expected), option),
				 errhint("Create it, or name a function of that signature on the flow's search_path.")));
	if (n > 1)
		ereport(ERROR,
				(errcode(ERRCODE_AMBIGUOUS_FUNCTION),
				 errmsg("option \"%s\" names %d functions %s", option, n, signature(name, expected)),
				 errhint("Give the function's schema, or drop the others.")));
	return found;
}

typedef struct FitArg
{
	Oid			key_type;
} FitArg;

static bool
key_fits(Oid given, Oid wanted)
{
	return given == wanted || IsBinaryCoercible(wanted, given);
}

static bool
fits_rows(Oid *argtypes, void *arg)
{
	Oid			elem = get_element_type(argtypes[1]);

	return key_fits(argtypes[0], ((FitArg *) arg)->key_type) && is_composite(elem);
}

static bool
fits_timer(Oid *argtypes, void *arg)
{
	return key_fits(argtypes[0], ((FitArg *) arg)->key_type) && argtypes[1] == TIMESTAMPTZOID &&
		argtypes[2] == TEXTOID;
}

static bool
fits_initial(Oid *argtypes, void *arg)
{
	return key_fits(argtypes[0], ((FitArg *) arg)->key_type) && is_composite(argtypes[1]);
}

/*
 * A handler's function looked up and checked: EXECUTE for the current role
 * (the owner), SETOF a composite type, the same for every handler; its rows'
 * composite (row_arg: which argument, element of an array when is_array)
 * matched by name to source.
 */
static void
resolve_handler(Handler *h, const char *option, const char *name, int nargs, const char *expected,
				bool (*fits) (Oid *, void *), FitArg *fa, int row_arg, bool is_array, TupleDesc source,
				const char *source_what, Oid *out_type)
{
	HeapTuple	tup;
	Form_pg_proc proc;
	AclResult	acl;

	h->option = option;
	h->fn = find_handler(option, name, nargs, expected, fits, fa);
	acl = sdp_proc_aclcheck(h->fn, GetUserId(), ACL_EXECUTE);
	if (acl != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for function %s named by option \"%s\"", format_procedure(h->fn), option),
				 errdetail("The flow's worker runs it as the flow's owner, \"%s\".", GetUserNameFromId(GetUserId(), false)),
				 errhint("GRANT EXECUTE ON FUNCTION %s TO the flow's owner.", format_procedure(h->fn))));
	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(h->fn));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for function %u", h->fn);
	proc = (Form_pg_proc) GETSTRUCT(tup);
	if (!proc->proretset || !is_composite(proc->prorettype))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("function %s named by option \"%s\" must return SETOF a composite type", format_procedure(h->fn), option),
				 errdetail("It returns %s%s.", proc->proretset ? "SETOF " : "", format_type_be(proc->prorettype)),
				 errhint("Return SETOF the target table's row type, or a type made with CREATE TYPE: its columns are written to the target's of the same name.")));
	h->out_type = proc->prorettype;
	if (OidIsValid(*out_type) && *out_type != h->out_type)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("function %s named by option \"%s\" returns SETOF %s, and the flow's other handlers SETOF %s",
						format_procedure(h->fn), option, format_type_be(h->out_type), format_type_be(*out_type)),
				 errhint("Every handler of a processor returns rows of one type.")));
	*out_type = h->out_type;
	h->out_desc = composite_desc(h->out_type);
	if (row_arg >= 0)
	{
		Oid			at = proc->proargtypes.values[row_arg];

		h->row_type = is_array ? get_element_type(at) : at;
		h->row_desc = composite_desc(h->row_type);
		h->row_src = palloc(sizeof(int) * h->row_desc->natts);
		for (int i = 0; i < h->row_desc->natts; i++)
		{
			Form_pg_attribute a = TupleDescAttr(h->row_desc, i);
			int			src;

			h->row_src[i] = -1;
			if (a->attisdropped)
				continue;
			src = sdp_operator_column(source, NameStr(a->attname), option, false);
			if (src < 0)
				ereport(ERROR,
						(errcode(ERRCODE_UNDEFINED_COLUMN),
						 errmsg("column \"%s\" of type %s (the rows of function %s) is not a column of %s",
								NameStr(a->attname), format_type_be(h->row_type), format_procedure(h->fn), source_what),
						 errhint("The composite's columns are matched by name to %s; drop the column from the type, or produce it.",
								 source_what)));
			if (TupleDescAttr(source, src)->atttypid != a->atttypid)
				ereport(ERROR,
						(errcode(ERRCODE_DATATYPE_MISMATCH),
						 errmsg("column \"%s\" of type %s is %s, and of %s %s", NameStr(a->attname),
								format_type_be(h->row_type), format_type_be(a->atttypid), source_what,
								format_type_be(TupleDescAttr(source, src)->atttypid)),
						 errhint("Give the composite's column the type of the column it is matched to.")));
			h->row_src[i] = src;
		}
	}
	ReleaseSysCache(tup);
	fmgr_info_cxt(h->fn, &h->call, TopMemoryContext);
}

/* The initial_state query's columns, by planning it (it is run as the owner, with the flow's search_path). */
static TupleDesc
initial_state_desc(const char *sql)
{
	MemoryContext cxt = CurrentMemoryContext;
	SPIPlanPtr	plan = SPI_prepare(sql, 0, NULL);
	List	   *sources;
	CachedPlanSource *ps;
	TupleDesc	desc;

	MemoryContextSwitchTo(cxt);		/* SPI calls return in SPI's own context */
	if (plan == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_SYNTAX_ERROR),
				 errmsg("option \"initial_state\" is not a query: %s", SPI_result_code_string(SPI_result))));
	sources = SPI_plan_get_plan_sources(plan);
	if (list_length(sources) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("option \"initial_state\" must be a single SELECT query"),
				 errdetail(sources == NIL ? "It holds no statement." : "It holds %d statements.", list_length(sources))));
	ps = linitial(sources);
	if (ps->commandTag != CMDTAG_SELECT || ps->resultDesc == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("option \"initial_state\" must be a single SELECT query")));
	desc = CreateTupleDescCopy(ps->resultDesc);
	SPI_freeplan(plan);
	MemoryContextSwitchTo(cxt);
	return desc;
}

/*
 * Parse and check the options against the rows the operator receives
 * (input: the transform's, or the input's); fills cfg.
 */
static void
parse_config(TupleDesc input, Jsonb *options, ProcessorConfig *cfg)
{
	char	   *rows_fn;
	char	   *timer_fn;
	char	   *initial_fn;
	FitArg		fa;
	Oid			out_type = InvalidOid;
	char	   *event_time = sdp_operator_option(options, "event_time");

	memset(cfg, 0, sizeof(*cfg));
	sdp_operator_check_options(options, "processor", known_options);
	cfg->key_column = sdp_operator_option(options, "key");
	if (cfg->key_column == NULL || cfg->key_column[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("operator processor needs option \"key\""),
				 errhint("E.g. options => '{\"key\": \"user_id\", \"handle_rows\": \"sessionize_rows\", \"state\": {...}}'.")));
	cfg->key_index = sdp_operator_column(input, cfg->key_column, "key", true);
	cfg->key_type = TupleDescAttr(input, cfg->key_index)->atttypid;
	cfg->key_typmod = TupleDescAttr(input, cfg->key_index)->atttypmod;
	rows_fn = sdp_operator_option(options, "handle_rows");
	if (rows_fn == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("operator processor needs option \"handle_rows\""),
				 errhint("Name a function %s.", signature("f", psprintf("key %s, rows <a composite type>[]", format_type_be(cfg->key_type))))));
	if (event_time)
	{
		char	   *idle = sdp_operator_option(options, "idle_timeout");

		if (sdp_interval_option_us("idle_timeout", idle ? idle : "10 seconds") <= 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("option \"idle_timeout\" must be positive")));
	}
	else if (sdp_operator_option(options, "idle_timeout"))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"idle_timeout\" is for a processor with \"event_time\"")));
	cfg->decls = parse_state(options, &cfg->ndecls);
	fa.key_type = cfg->key_type;
	resolve_handler(&cfg->rows, "handle_rows", rows_fn, 2,
					psprintf("key %s, rows <a composite type>[]", format_type_be(cfg->key_type)),
					fits_rows, &fa, 1, true, input, "the flow's rows (the transform's, or the input's without one)", &out_type);
	timer_fn = sdp_operator_option(options, "handle_timer");
	if (timer_fn)
		resolve_handler(&cfg->timer, "handle_timer", timer_fn, 3,
						psprintf("key %s, at timestamptz, kind text", format_type_be(cfg->key_type)),
						fits_timer, &fa, -1, false, NULL, NULL, &out_type);
	initial_fn = sdp_operator_option(options, "handle_initial_state");
	cfg->initial_state = sdp_operator_option(options, "initial_state");
	if ((initial_fn == NULL) != (cfg->initial_state == NULL))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("options \"handle_initial_state\" and \"initial_state\" go together"),
				 errhint("initial_state is a SELECT with the key column; handle_initial_state is called with each of its rows.")));
	if (initial_fn)
	{
		TupleDesc	idesc = initial_state_desc(cfg->initial_state);

		if (sdp_operator_column(idesc, cfg->key_column, "initial_state", false) < 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("option \"initial_state\" has no column \"%s\" (the key)", cfg->key_column)));
		resolve_handler(&cfg->initial, "handle_initial_state", initial_fn, 2,
						psprintf("key %s, row <a composite type>", format_type_be(cfg->key_type)),
						fits_initial, &fa, 1, false, idesc, "the initial_state query's columns", &out_type);
	}
	cfg->out_desc = composite_desc(out_type);
}

/* A variable's shape, for a message: map(text, bigint), list(text), value(jsonb). */
static char *
var_shape(const SdpVarDecl *d)
{
	if (d->kind == SDP_VAR_MAP)
		return psprintf("map(%s, %s)", format_type_be(d->key_type), format_type_be(d->type));
	return psprintf("%s(%s)", d->kind == SDP_VAR_LIST ? "list" : "value", format_type_be(d->type));
}

/*
 * sdp_alter_flow: the state is kept when the key is the same and every
 * variable kept has its kind and types; variables may be added (they start
 * empty) or removed (their entries are dropped at the restore).  Handlers,
 * initial state, event time and ttl may change.
 */
static void
processor_check_alter(Jsonb *old_options, Jsonb *new_options)
{
	char	   *old_key = sdp_operator_option(old_options, "key");
	char	   *new_key = sdp_operator_option(new_options, "key");
	int			nold,
				nnew;
	SdpVarDecl *old_vars = parse_state(old_options, &nold);
	SdpVarDecl *new_vars = parse_state(new_options, &nnew);

	if (old_key == NULL || new_key == NULL || strcmp(old_key, new_key) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("the processor's key changes from \"%s\" to \"%s\", and its state is kept by key",
						old_key ? old_key : "", new_key ? new_key : ""),
				 errhint("Add \"reset_state\": true to the options to start with no state.")));
	for (int i = 0; i < nold; i++)
		for (int k = 0; k < nnew; k++)
		{
			const SdpVarDecl *a = &old_vars[i];
			const SdpVarDecl *b = &new_vars[k];

			if (strcmp(a->name, b->name) != 0)
				continue;
			if (a->kind != b->kind || a->type != b->type || a->key_type != b->key_type)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("state variable \"%s\" would change from %s to %s", a->name, var_shape(a), var_shape(b)),
						 errdetail("A variable keeps its kind and types while the flow keeps its state (as Spark refuses an incompatible state schema)."),
						 errhint("Declare a variable of another name, or add \"reset_state\": true to the options to start with no state.")));
		}
}

/* ---- the operator ---- */

static TupleDesc
processor_validate(TupleDesc input, Jsonb *options, Relation target, SdpFlowOptions *opts)
{
	ProcessorConfig cfg;

	parse_config(input, options, &cfg);
	if (cfg.initial_state != NULL && opts->workers > 1)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("a processor with an initial state runs in one worker"),
				 errdetail("A key's state belongs to the partition of its rows, which the initial state's rows do not have."),
				 errhint("Leave \"workers\" out, or the initial state.")));
	return cfg.out_desc;
}

static void
index_timer_cb(void *arg, const char *store_key, const SdpTimer *timer, bool add)
{
	if (add)
		sdp_operator_index_timer((SdpOperatorContext *) arg, store_key, timer);
	else
		sdp_operator_unindex_timer((SdpOperatorContext *) arg, store_key, timer);
}

static void *
processor_init(SdpOperatorContext *ctx, Jsonb *options)
{
	ProcessorConfig *cfg = palloc0(sizeof(ProcessorConfig));
	char	   *idle = sdp_operator_option(options, "idle_timeout");
	char	   *event_time = sdp_operator_option(options, "event_time");
	Oid			func;
	bool		varlena;

	parse_config(ctx->input_desc, options, cfg);
	ctx->key_column = pstrdup(cfg->key_column);
	if (event_time)
	{
		ctx->event_time_column = pstrdup(event_time);
		ctx->idle_timeout_us = sdp_interval_option_us("idle_timeout", idle ? idle : "10 seconds");
	}
	getTypeInputInfo(cfg->key_type, &func, &cfg->key_ioparam);
	fmgr_info_cxt(func, &cfg->key_in, TopMemoryContext);
	getTypeOutputInfo(cfg->key_type, &func, &varlena);
	fmgr_info_cxt(func, &cfg->key_out, TopMemoryContext);
	cfg->vars = sdp_vars_create(ctx->store, cfg->decls, cfg->ndecls, true);
	sdp_vars_set_timer_indexer(cfg->vars, index_timer_cb, ctx);
	RegisterSubXactCallback(processor_subxact, NULL);
	return cfg;
}

/* The emitted row of a handler's result (a composite of the handlers' type). */
static void
emit_composite(SdpOperatorContext *ctx, Datum d)
{
	HeapTupleHeader td = DatumGetHeapTupleHeader(d);
	HeapTupleData tuple;
	Datum	   *values = palloc(sizeof(Datum) * ctx->output_desc->natts);
	bool	   *nulls = palloc(sizeof(bool) * ctx->output_desc->natts);

	tuple.t_len = HeapTupleHeaderGetDatumLength(td);
	ItemPointerSetInvalid(&tuple.t_self);
	tuple.t_tableOid = InvalidOid;
	tuple.t_data = td;
	heap_deform_tuple(&tuple, ctx->output_desc, values, nulls);
	sdp_emit(ctx, values, nulls);
}

/*
 * Call a handler with its arguments, as the flow's owner, and emit what it
 * returns: value per call or a materialized set, as the language gives it.
 * What it changes in the session's settings (role, search_path) is undone
 * when it returns; its state calls act on the current key meanwhile.
 */
static void
call_handler(SdpOperatorContext *ctx, Handler *h, Datum *args, int nargs)
{
	LOCAL_FCINFO(fcinfo, 3);
	ReturnSetInfo rsi;
	MemoryContext cxt = CurrentMemoryContext;
	SdpOperatorContext *volatile saved_ctx = current_ctx;
	const char *volatile saved_handler = current_handler;
	volatile int saved_marks = nsubxact_marks;
	int			guc_level = NewGUCNestLevel();

	memset(&rsi, 0, sizeof(rsi));
	rsi.type = T_ReturnSetInfo;
	rsi.econtext = CreateStandaloneExprContext();
	rsi.expectedDesc = h->out_desc;
	rsi.allowedModes = (int) (SFRM_ValuePerCall | SFRM_Materialize);
	rsi.returnMode = SFRM_ValuePerCall;
	InitFunctionCallInfoData(*fcinfo, &h->call, nargs, InvalidOid, NULL, (Node *) &rsi);
	for (int i = 0; i < nargs; i++)
	{
		fcinfo->args[i].value = args[i];
		fcinfo->args[i].isnull = false;
	}
	current_ctx = ctx;
	current_handler = h->option;
	PG_TRY();
	{
		for (;;)
		{
			Datum		result;

			fcinfo->isnull = false;
			rsi.isDone = ExprSingleResult;
			result = FunctionCallInvoke(fcinfo);
			MemoryContextSwitchTo(cxt);
			if (rsi.returnMode == SFRM_Materialize)
			{
				if (rsi.setResult != NULL)
				{
					TupleTableSlot *slot = MakeSingleTupleTableSlot(rsi.setDesc ? rsi.setDesc : h->out_desc,
																	&TTSOpsMinimalTuple);

					while (tuplestore_gettupleslot(rsi.setResult, true, false, slot))
					{
						slot_getallattrs(slot);
						sdp_emit(ctx, slot->tts_values, slot->tts_isnull);
					}
					ExecDropSingleTupleTableSlot(slot);
					tuplestore_end(rsi.setResult);
				}
				break;
			}
			if (rsi.isDone == ExprEndResult)
				break;
			if (!fcinfo->isnull)
				emit_composite(ctx, result);
			if (rsi.isDone != ExprMultipleResult)
				break;
		}
	}
	PG_FINALLY();
	{
		current_ctx = saved_ctx;
		current_handler = saved_handler;
		nsubxact_marks = saved_marks;	/* the subtransactions an error left behind are the caller's to undo */
	}
	PG_END_TRY();
	FreeExprContext(rsi.econtext, true);
	/* the handler's changes of the session's settings (SET ROLE included) end with it */
	AtEOXact_GUC(false, guc_level);
	MemoryContextSwitchTo(cxt);
}

/* A key's value from its text (a timer's key, an initial state's row) for the handler. */
static Datum
key_datum(ProcessorConfig *cfg, const char *text)
{
	return InputFunctionCall(&cfg->key_in, (char *) text, cfg->key_ioparam, cfg->key_typmod);
}

/* A transform's row as a row of the handler's composite (its columns, by name). */
static Datum
handler_row(Handler *h, TupleDesc source, HeapTuple row)
{
	int			n = h->row_desc->natts;
	Datum	   *values = palloc(sizeof(Datum) * n);
	bool	   *nulls = palloc(sizeof(bool) * n);
	HeapTuple	t;

	for (int i = 0; i < n; i++)
	{
		if (h->row_src[i] < 0)
		{
			values[i] = (Datum) 0;
			nulls[i] = true;
			continue;
		}
		values[i] = heap_getattr(row, h->row_src[i] + 1, source, &nulls[i]);
	}
	t = heap_form_tuple(h->row_desc, values, nulls);
	return HeapTupleGetDatum(t);
}

static void
processor_handle_rows(SdpOperatorContext *ctx, SdpKeyState *ks, HeapTuple *rows, int nrows)
{
	ProcessorConfig *cfg = ctx->config;
	Datum	   *elems = palloc(sizeof(Datum) * nrows);
	Datum		args[2];
	bool		isnull;
	char	   *text = NULL;
	ArrayType  *arr;

	args[0] = heap_getattr(rows[0], cfg->key_index + 1, ctx->input_desc, &isnull);
	if (sdp_state_key_is_digest(ks->key))
		text = OutputFunctionCall(&cfg->key_out, args[0]);
	for (int i = 0; i < nrows; i++)
		elems[i] = handler_row(&cfg->rows, ctx->input_desc, rows[i]);
	arr = construct_array(elems, nrows, cfg->rows.row_type, -1, false, TYPALIGN_DOUBLE);
	args[1] = PointerGetDatum(arr);
	sdp_vars_set_clock(cfg->vars, ctx->now);
	/* (a handler that raises fails the batch, or its isolated part: the state API is closed by call_handler) */
	sdp_vars_set_key(cfg->vars, ks->key, text, ctx->call_partition);
	call_handler(ctx, &cfg->rows, args, 2);
	sdp_vars_clear_key(cfg->vars);
}

/* A due timer, taken from the open key: its key's text kept for the call. */
static bool
processor_take_timer(SdpOperatorContext *ctx, SdpKeyState *ks, const SdpTimer *timer)
{
	ProcessorConfig *cfg = ctx->config;
	char	   *text;

	if (ks->entry == NULL)
		return false;
	/*
	 * The text first: a long key's lives in the key's state, which taking
	 * its last timer releases (the handler would get the digest).
	 */
	text = pstrdup(sdp_vars_key_text(cfg->vars, ks->entry, ks->key));
	if (!sdp_vars_take_timer(cfg->vars, ks, (SdpTimeKind) timer->kind, timer->when))
	{
		pfree(text);
		return false;
	}
	cfg->timer_key_text = text;
	return true;
}

static void
processor_handle_expired_timer(SdpOperatorContext *ctx, SdpKeyState *ks, const SdpTimer *timer)
{
	ProcessorConfig *cfg = ctx->config;
	Datum		args[3];
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	int			mark = sdp_vars_mark(cfg->vars);
	int			nemitted = list_length(ctx->emitted);

	if (!OidIsValid(cfg->timer.fn))
		return;					/* registered before handle_timer was removed: spent */
	args[0] = key_datum(cfg, cfg->timer_key_text);
	args[1] = TimestampTzGetDatum(timer->when);
	args[2] = CStringGetTextDatum(timer->kind == SDP_EVENT_TIME ? "event_time" : "processing_time");
	sdp_vars_set_clock(cfg->vars, ctx->now);
	sdp_vars_set_key(cfg->vars, ks->key, cfg->timer_key_text, ctx->call_partition);

	/* in a subtransaction of its own: a timer's handler that raises is logged, and its changes undone */
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		call_handler(ctx, &cfg->timer, args, 3);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED || edata->sqlerrcode == ERRCODE_ADMIN_SHUTDOWN ||
			ERRCODE_TO_CATEGORY(edata->sqlerrcode) == ERRCODE_INSUFFICIENT_RESOURCES ||
			ERRCODE_TO_CATEGORY(edata->sqlerrcode) == ERRCODE_CONFIGURATION_LIMIT_EXCEEDED)
		{
			sdp_vars_clear_key(cfg->vars);
			ReThrowError(edata);	/* the batch's, not the timer's: the worker decides */
		}
		sdp_vars_undo(cfg->vars, mark);
		ctx->emitted = list_truncate(ctx->emitted, nemitted);
		ereport(LOG,
				(errmsg("sdp flow \"%s\": handle_timer of key \"%.100s\" at %s raised, its changes are undone and its timer spent: %s",
						ctx->flow_name, cfg->timer_key_text, timestamptz_to_str(timer->when), edata->message)));
	}
	PG_END_TRY();
	sdp_vars_clear_key(cfg->vars);
}

static void
processor_index_key_timers(SdpOperatorContext *ctx, SdpStateEntry *entry)
{
	ProcessorConfig *cfg = ctx->config;

	sdp_vars_index_timers(cfg->vars, entry, index_timer_cb, ctx);
}

static int
processor_mark(SdpOperatorContext *ctx)
{
	return sdp_vars_mark(((ProcessorConfig *) ctx->config)->vars);
}

static void
processor_undo(SdpOperatorContext *ctx, int mark)
{
	ProcessorConfig *cfg = ctx->config;

	sdp_vars_undo(cfg->vars, mark);
	if (mark == 0)
		cfg->initial_done = false;	/* the first batch is run again, its initial state with it */
}

static void
processor_commit(SdpOperatorContext *ctx)
{
	sdp_vars_commit(((ProcessorConfig *) ctx->config)->vars);
}

/*
 * The first batch of a flow that has never committed: handle_initial_state
 * with each row of the initial_state query, in key order, as the owner.
 */
static void
processor_initial(SdpOperatorContext *ctx)
{
	ProcessorConfig *cfg = ctx->config;
	MemoryContext cxt = CurrentMemoryContext;
	SPITupleTable *tt;
	uint64		n;
	int			key_col;

	if (cfg->initial_done || cfg->initial_state == NULL)
		return;
	cfg->initial_done = true;
	if (SPI_execute(psprintf("SELECT * FROM (%s) s ORDER BY %s", cfg->initial_state, quote_identifier(cfg->key_column)),
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not run the initial_state query");
	MemoryContextSwitchTo(cxt);
	tt = SPI_tuptable;
	n = SPI_processed;
	key_col = sdp_operator_column(tt->tupdesc, cfg->key_column, "initial_state", true);
	sdp_vars_set_clock(cfg->vars, ctx->now);
	for (uint64 i = 0; i < n; i++)
	{
		bool		isnull;
		Datum		args[2];
		char	   *text;
		char		store_key[SDP_STATE_KEY_MAX];

		args[0] = heap_getattr(tt->vals[i], key_col + 1, tt->tupdesc, &isnull);
		if (isnull)
			continue;
		text = OutputFunctionCall(&cfg->key_out, args[0]);
		sdp_state_store_key(text, store_key);
		args[1] = handler_row(&cfg->initial, tt->tupdesc, tt->vals[i]);
		/* (a handler that raises fails the batch: the state API is closed by call_handler) */
		sdp_vars_set_key(cfg->vars, store_key, text, -1);
		call_handler(ctx, &cfg->initial, args, 2);
		sdp_vars_clear_key(cfg->vars);
		CHECK_FOR_INTERRUPTS();
	}
	ereport(LOG,
			(errmsg("sdp flow \"%s\" handled its initial state: %llu rows", ctx->flow_name, (unsigned long long) n)));
}

/* ---- sdp_flow_state ---- */

typedef struct Reader
{
	SdpVars    *vars;
	SdpStateStore *store;
	SdpVarDecl *decls;
	int			ndecls;
} Reader;

typedef struct KeyCopy
{
	char	   *key;
	void	  **vars;			/* per declared variable, its copy (sdp_vars_copy_var); NULL: none */
	char	   *timers;			/* jsonb text, NULL: none */
} KeyCopy;

static void *
processor_reader_begin(Jsonb *options, SdpStateStore *store)
{
	Reader	   *r = palloc0(sizeof(Reader));

	r->decls = parse_state(options, &r->ndecls);
	r->store = store;
	r->vars = sdp_vars_create(store, r->decls, r->ndecls, false);
	return r;
}

/*
 * A key's variables, copied.  The entry's lock is held: the images only,
 * formatted by processor_reader_rows once it is released.
 */
static void *
processor_reader_copy(void *reader, SdpStateEntry *entry)
{
	Reader	   *r = reader;
	KeyCopy    *c = palloc0(sizeof(KeyCopy));

	c->key = pstrdup(sdp_vars_key_text(r->vars, entry, entry->key));
	c->vars = palloc0(sizeof(void *) * Max(r->ndecls, 1));
	for (int i = 0; i < r->ndecls; i++)
		c->vars[i] = sdp_vars_copy_var(r->vars, entry, i);
	c->timers = sdp_vars_describe_timers(r->vars, entry);
	return c;
}

static void
processor_reader_rows(void *reader, void *copy, void (*put) (void *arg, const char *state, const char *json), void *arg)
{
	Reader	   *r = reader;
	KeyCopy    *c = copy;

	for (int i = 0; i < r->ndecls; i++)
		if (c->vars[i] != NULL)
		{
			Jsonb	   *j = sdp_vars_describe_copy(r->vars, i, c->vars[i]);

			put(arg, r->decls[i].name, JsonbToCString(NULL, &j->root, VARSIZE(j)));
		}
	if (c->timers)
		put(arg, "timers", c->timers);
}

static const char *
processor_reader_key(void *reader, void *copy)
{
	return ((KeyCopy *) copy)->key;
}

const SdpOperator sdp_processor_operator = {
	.name = "processor",
	.map_value_len = sizeof(int64),
	.value_names = {NULL},
	.map_name = NULL,
	.validate = processor_validate,
	.init = processor_init,
	.handle_rows = processor_handle_rows,
	.handle_expired_timer = processor_handle_expired_timer,
	.calls_user_code = true,
	.take_timer = processor_take_timer,
	.index_key_timers = processor_index_key_timers,
	.mark = processor_mark,
	.undo = processor_undo,
	.commit = processor_commit,
	.initial = processor_initial,
	.check_alter = processor_check_alter,
	.reader_begin = processor_reader_begin,
	.reader_copy = processor_reader_copy,
	.reader_rows = processor_reader_rows,
	.reader_key = processor_reader_key,
};

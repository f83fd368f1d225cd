/*
 * input_schema.c
 *		The declared input schema of a flow ('icao24 text, lat float8, ...').
 *
 * The schema is parsed as the column list of a CREATE TABLE by PostgreSQL's
 * own grammar, so quoting, type modifiers and every type spelling work as
 * they do in a table definition.  Nothing is executed.  The relation "input"
 * that a transform reads has the declared columns followed by the metadata
 * columns kafka_topic, kafka_partition, kafka_offset, kafka_key,
 * kafka_timestamp and kafka_headers (0.4; a field of that name declared in
 * the schema takes its place).
 *
 * A column takes the field of its name at the top level of the document,
 * or the value at the path it names after FROM: 'lat float8 FROM
 * position.lat, first_tag text FROM tags[0]'.  A path is field names and
 * array indexes (from 0) as a column reference with subscripts reads in
 * SQL, parsed by the same grammar: a name that is not all lower case is
 * quoted ("Position"."Lat").  The paths make a tree (SdpJsonNode) that the
 * decoder walks once per document.
 */
#include "decl/input_schema.h"

#include "access/htup_details.h"
#include "catalog/pg_language.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "nodes/parsenodes.h"
#include "parser/parser.h"
#include "parser/parse_type.h"
#include "parser/scanner.h"
#include "parser/scansup.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

static const char *const meta_names[SDP_NUM_META] = {
	"kafka_topic", "kafka_partition", "kafka_offset", "kafka_key", "kafka_timestamp", "kafka_headers"
};
static const Oid meta_types[SDP_NUM_META] = {
	TEXTOID, INT4OID, INT8OID, TEXTOID, TIMESTAMPTZOID, JSONBOID
};

bool
sdp_is_meta_column(const char *name)
{
	for (int i = 0; i < SDP_NUM_META; i++)
		if (strcmp(name, meta_names[i]) == 0)
			return true;
	return false;
}

static void
schema_error(const char *schema_text, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_SYNTAX_ERROR),
			 errmsg("invalid input schema \"%s\"", schema_text),
			 errdetail("%s", detail),
			 errhint("Write the schema as a column list, e.g. 'icao24 text, lat float8, poller_ts timestamptz'.")));
}

#define SDP_PATH_HINT "Write a path as field names and [index]es from the top of the document, " \
	"e.g. 'lat float8 FROM position.lat, first_tag text FROM tags[0]'; quote a name that is not " \
	"all lower case or is a reserved word: FROM \"Position\".\"Lat\"."

/* The longest path a column may name (SDP_JSON_MAX_DEPTH is far above). */
#define SDP_MAX_PATH_STEPS 64

static void
path_error(const char *schema_text, const char *path_text, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_SYNTAX_ERROR),
			 errmsg("invalid input schema \"%s\"", schema_text),
			 errdetail("The path \"%s\" %s", path_text, detail),
			 errhint(SDP_PATH_HINT)));
}

/* A copy of s without the white space around it. */
static char *
trim_spaces(const char *s)
{
	int			len;

	while (*s != '\0' && scanner_isspace(*s))
		s++;
	len = (int) strlen(s);
	while (len > 0 && scanner_isspace(s[len - 1]))
		len--;
	return pnstrdup(s, len);
}

/*
 * The schema text without its "FROM <path>" clauses, for the grammar, and
 * in *paths the path text of each element of the column list (NULL where
 * there is none).  PostgreSQL's scanner finds the clauses, so a FROM in a
 * quoted name or a string is not one, and commas inside parentheses (a
 * type's modifiers) or brackets do not end an element.  The scanner raises
 * on what it cannot read (an unterminated quote).
 */
static char *
split_paths(const char *schema_text, List **paths)
{
	core_yy_extra_type yyextra;
	core_yyscan_t scanner;
	core_YYSTYPE lval;
	YYLTYPE		lloc;
	int			from_token = ScanKeywordTokens[ScanKeywordLookup("from", &ScanKeywords)];
	int			len = (int) strlen(schema_text);
	StringInfoData out;
	int			depth = 0;
	int			copied = 0;		/* schema_text up to here is in out */
	int			from_at = -1;	/* this element's FROM, or -1 */
	int			second_from = -1;	/* an element's second FROM, or -1 */
	MemoryContext oldcxt = CurrentMemoryContext;

	initStringInfo(&out);
	*paths = NIL;
	scanner = scanner_init(schema_text, &yyextra, &ScanKeywords, ScanKeywordTokens);
	for (;;)
	{
		int			tok = 0;

		PG_TRY();
		{
			tok = core_yylex(&lval, &lloc, scanner);
		}
		PG_CATCH();
		{
			ErrorData  *edata;

			MemoryContextSwitchTo(oldcxt);
			edata = CopyErrorData();
			FlushErrorState();
			schema_error(schema_text, edata->message);
		}
		PG_END_TRY();

		if (tok == 0 || (tok == ',' && depth == 0))
		{
			int			end = tok == 0 ? len : lloc;

			if (from_at >= 0)
			{
				appendBinaryStringInfo(&out, schema_text + copied, from_at - copied);
				appendStringInfoChar(&out, ' ');
				*paths = lappend(*paths, pnstrdup(schema_text + from_at + 4, end - from_at - 4));
				copied = end;
			}
			else
				*paths = lappend(*paths, NULL);
			from_at = -1;
			if (tok == 0)
				break;
		}
		else if (tok == '(' || tok == '[')
			depth++;
		else if (tok == ')' || tok == ']')
			depth--;
		else if (tok == from_token && depth == 0)
		{
			if (from_at >= 0 && second_from < 0)
				second_from = from_at;
			from_at = lloc;
		}
	}
	scanner_finish(scanner);
	if (second_from >= 0)
		path_error(schema_text, trim_spaces(schema_text + second_from + 4), "has a second FROM in it.");
	appendStringInfoString(&out, schema_text + copied);
	return out.data;
}

/*
 * The grammar's column list of "CREATE TABLE x (<schema>)", or an error;
 * in *paths, each element's path text (split_paths).
 */
static List *
parse_column_list(const char *schema_text, List **paths)
{
	StringInfoData sql;
	List	   *stmts = NIL;
	MemoryContext oldcxt = CurrentMemoryContext;
	RawStmt    *raw;
	CreateStmt *create;

	initStringInfo(&sql);
	appendStringInfo(&sql, "CREATE TABLE sdp_input (%s)", split_paths(schema_text, paths));
	PG_TRY();
	{
		stmts = raw_parser(sql.data, RAW_PARSE_DEFAULT);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		FlushErrorState();
		schema_error(schema_text, edata->message);
	}
	PG_END_TRY();

	if (list_length(stmts) != 1)
		schema_error(schema_text, "The schema must be one list of columns.");
	raw = linitial_node(RawStmt, stmts);
	if (!IsA(raw->stmt, CreateStmt))
		schema_error(schema_text, "The schema must be one list of columns.");
	create = (CreateStmt *) raw->stmt;
	if (create->inhRelations || create->partspec || create->options ||
		create->tableElts == NIL || list_length(create->tableElts) != list_length(*paths))
		schema_error(schema_text, "The schema must be one list of columns.");
	return create->tableElts;
}

/*
 * A column's path, read by the grammar as the column reference it looks
 * like ("SELECT <path>"): names, then names and subscripts.  Nothing is
 * executed; anything but a bare reference (an expression, a cast, an alias,
 * a slice, a negative or computed index, a second statement) is refused.
 */
static SdpPathStep *
parse_path(const char *schema_text, const char *path_text, int *npath)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	List	   *stmts = NIL;
	SelectStmt *sel;
	ResTarget  *target;
	Node	   *val;
	List	   *names;
	List	   *indirection;
	SdpPathStep *steps;
	int			n = 0;
	ListCell   *lc;

	if (strspn(path_text, " \t\r\n") == strlen(path_text))
		path_error(schema_text, path_text, "is empty: FROM is followed by the path of the column's value.");
	PG_TRY();
	{
		stmts = raw_parser(psprintf("SELECT %s", path_text), RAW_PARSE_DEFAULT);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		FlushErrorState();
		path_error(schema_text, path_text, psprintf("cannot be read: %s.", edata->message));
	}
	PG_END_TRY();

	if (list_length(stmts) != 1 || !IsA(linitial_node(RawStmt, stmts)->stmt, SelectStmt))
		path_error(schema_text, path_text, "is not one path.");
	sel = (SelectStmt *) linitial_node(RawStmt, stmts)->stmt;
	if (sel->op != SETOP_NONE || list_length(sel->targetList) != 1 || sel->fromClause ||
		sel->whereClause || sel->groupClause || sel->havingClause || sel->windowClause ||
		sel->sortClause || sel->limitCount || sel->limitOffset || sel->lockingClause ||
		sel->withClause || sel->distinctClause || sel->intoClause || sel->valuesLists)
		path_error(schema_text, path_text, "is not one path.");
	target = linitial_node(ResTarget, sel->targetList);
	val = target->val;
	indirection = NIL;
	if (target->name != NULL)
		path_error(schema_text, path_text, "is not one path (it has an alias).");
	if (IsA(val, A_Indirection))
	{
		indirection = ((A_Indirection *) val)->indirection;
		val = ((A_Indirection *) val)->arg;
	}
	if (!IsA(val, ColumnRef))
		path_error(schema_text, path_text, "is not a path: it is an expression, not names and [index]es.");
	names = ((ColumnRef *) val)->fields;
	if (list_length(names) + list_length(indirection) > SDP_MAX_PATH_STEPS)
		path_error(schema_text, path_text, psprintf("has more than %d steps.", SDP_MAX_PATH_STEPS));

	steps = palloc0(sizeof(SdpPathStep) * (list_length(names) + list_length(indirection)));
	foreach(lc, list_concat_copy(names, indirection))
	{
		Node	   *step = lfirst(lc);
		SdpPathStep *s = &steps[n++];

		if (IsA(step, String) && strlen(strVal(step)) >= NAMEDATALEN - 1)
			path_error(schema_text, path_text,
					   psprintf("has a name of %d bytes or more, which SQL's scanner cuts short (names in a path are at most %d bytes).",
								NAMEDATALEN - 1, NAMEDATALEN - 2));
		if (IsA(step, String))
		{
			s->key = pstrdup(strVal(step));
			s->keylen = (int) strlen(s->key);
			s->index = -1;
		}
		else if (IsA(step, A_Indices) && !((A_Indices *) step)->is_slice &&
				 ((A_Indices *) step)->uidx != NULL && IsA(((A_Indices *) step)->uidx, A_Const) &&
				 IsA(&((A_Const *) ((A_Indices *) step)->uidx)->val, Integer) &&
				 intVal(&((A_Const *) ((A_Indices *) step)->uidx)->val) >= 0)
		{
			s->key = NULL;
			s->index = intVal(&((A_Const *) ((A_Indices *) step)->uidx)->val);
		}
		else if (IsA(step, A_Star))
			path_error(schema_text, path_text, "has a *: a path names one value.");
		else
			path_error(schema_text, path_text, "has an index that is not a whole number from 0 (a slice, a negative or computed index).");
	}
	*npath = n;
	return steps;
}

/*
 * The text of a constant default (a literal, NULL, or a literal with a
 * cast: the column's type decides), or false for anything else.
 */
static bool
default_constant(Node *expr, char **text)
{
	A_Const    *c;

	if (IsA(expr, TypeCast))
		expr = ((TypeCast *) expr)->arg;
	if (!IsA(expr, A_Const))
		return false;
	c = (A_Const *) expr;
	*text = NULL;
	if (c->isnull)
		return true;
	switch (nodeTag(&c->val))
	{
		case T_Integer:
			*text = psprintf("%d", intVal(&c->val));
			return true;
		case T_Float:
			*text = pstrdup(castNode(Float, &c->val)->fval);
			return true;
		case T_String:
			*text = pstrdup(strVal(&c->val));
			return true;
		case T_Boolean:
			*text = pstrdup(boolVal(&c->val) ? "true" : "false");
			return true;
		default:
			return false;
	}
}

/* The child of node reached by step, added if it is not there yet. */
static SdpJsonNode *
json_node_child(SdpJsonNode *node, const SdpPathStep *step)
{
	SdpJsonNode *child;

	for (int i = 0; i < node->nchildren; i++)
	{
		child = &node->children[i];
		if (step->key != NULL ? (child->key != NULL && child->keylen == step->keylen &&
								 memcmp(child->key, step->key, step->keylen) == 0)
			: (child->key == NULL && child->index == step->index))
			return child;
	}
	if (node->nchildren == 0)
		node->children = palloc(sizeof(SdpJsonNode));
	else
		node->children = repalloc(node->children, sizeof(SdpJsonNode) * (node->nchildren + 1));
	child = &node->children[node->nchildren++];
	memset(child, 0, sizeof(SdpJsonNode));
	child->key = step->key;
	child->keylen = step->keylen;
	child->index = step->index;
	return child;
}

/* The tree of the columns' paths, and its depth. */
static void
build_json_tree(SdpInputSchema *schema)
{
	schema->tree = palloc0(sizeof(SdpJsonNode));
	schema->tree->index = -1;
	schema->tree_depth = 0;
	for (int i = 0; i < schema->ncolumns; i++)
	{
		SdpInputColumn *col = &schema->columns[i];
		SdpJsonNode *node = schema->tree;

		for (int k = 0; k < col->npath; k++)
			node = json_node_child(node, &col->path[k]);
		node->columns = node->ncolumns == 0 ? palloc(sizeof(int)) :
			repalloc(node->columns, sizeof(int) * (node->ncolumns + 1));
		node->columns[node->ncolumns++] = i;
		schema->tree_depth = Max(schema->tree_depth, col->npath);
	}
}

/* How values of this type are decoded; refuses types we cannot decode safely. */
static SdpDecodeKind
decode_kind_for(const char *colname, Oid typid, int32 typmod)
{
	HeapTuple	tup;
	Form_pg_type typ;
	Oid			infunc;
	char		typtype;
	bool		builtin;

	switch (typid)
	{
		case BOOLOID:
			return SDP_DECODE_BOOL;
		case INT2OID:
			return SDP_DECODE_INT2;
		case INT4OID:
			return SDP_DECODE_INT4;
		case INT8OID:
			return SDP_DECODE_INT8;
		case FLOAT4OID:
			return SDP_DECODE_FLOAT4;
		case FLOAT8OID:
			return SDP_DECODE_FLOAT8;
		case TEXTOID:
			return SDP_DECODE_TEXT;
		case TIMESTAMPTZOID:
			return SDP_DECODE_TIMESTAMPTZ;
		case JSONBOID:
			return SDP_DECODE_JSONB;
		case VARCHAROID:
			if (typmod < 0)
				return SDP_DECODE_TEXT;
			break;
		default:
			break;
	}

	/*
	 * Other types go through their input function, called on the JSON
	 * value's text.  A failing input function is caught without a
	 * subtransaction, which is only safe for functions that hold no
	 * resources: so only built-in input functions are allowed (this covers
	 * numeric, timestamp, date, uuid, inet, bytea, ... and enums).
	 */
	tup = SearchSysCache1(TYPEOID, ObjectIdGetDatum(typid));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for type %u", typid);
	typ = (Form_pg_type) GETSTRUCT(tup);
	infunc = typ->typinput;
	typtype = typ->typtype;
	ReleaseSysCache(tup);

	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(infunc));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for function %u", infunc);
	builtin = ((Form_pg_proc) GETSTRUCT(tup))->prolang == INTERNALlanguageId;
	ReleaseSysCache(tup);

	if (typtype == TYPTYPE_DOMAIN || typtype == TYPTYPE_COMPOSITE ||
		typtype == TYPTYPE_PSEUDO || OidIsValid(get_element_type(typid)) ||
		!builtin)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("type %s of input column \"%s\" is not supported",
						format_type_with_typemod(typid, typmod), colname),
				 errdetail("Input columns can have scalar built-in types or enums; arrays, composites and domains are not decoded."),
				 errhint("Declare the column as jsonb or text and convert it in the transform.")));
	return SDP_DECODE_INPUT_FUNCTION;
}

/* The metadata columns after the declared ones, the paths' tree and the decoder's hints. */
static void
finish_schema(SdpInputSchema *schema)
{
	for (int m = 0; m < schema->nmeta; m++)
		TupleDescInitEntry(schema->tupdesc, schema->ncolumns + m + 1,
						   meta_names[m], meta_types[m], -1, 0);
	build_json_tree(schema);
	schema->field_hint = palloc(sizeof(int) * SDP_FIELD_HINTS);
	for (int k = 0; k < SDP_FIELD_HINTS; k++)
		schema->field_hint[k] = -1;
}

/*
 * The type of an input column: as CREATE TABLE reads it, but an unknown
 * name is refused naming the column, with the names people mean
 * ("double" for double precision, "string" for text, ...).
 */
static void
input_column_type(ColumnDef *def, Oid *typid, int32 *typmod)
{
	Type		tup = LookupTypeName(NULL, def->typeName, typmod, false);
	const char *name;
	const char *hint = NULL;

	if (tup != NULL)
	{
		*typid = typeTypeId(tup);
		ReleaseSysCache(tup);
		/* a shell type, or a typmod it refuses: as CREATE TABLE says it */
		typenameTypeIdAndMod(NULL, def->typeName, typid, typmod);
		return;
	}
	name = strVal(llast(def->typeName->names));
	if (pg_strcasecmp(name, "double") == 0 || pg_strcasecmp(name, "float64") == 0)
		hint = "Write double precision or float8.";
	else if (pg_strcasecmp(name, "string") == 0)
		hint = "Write text (or varchar).";
	else if (pg_strcasecmp(name, "long") == 0 || pg_strcasecmp(name, "int64") == 0)
		hint = "Write bigint or int8.";
	else if (pg_strcasecmp(name, "int32") == 0)
		hint = "Write integer or int4.";
	else if (pg_strcasecmp(name, "datetime") == 0 || pg_strcasecmp(name, "timestamp_ms") == 0)
		hint = "Write timestamptz (or timestamp).";
	else if (pg_strcasecmp(name, "bytes") == 0)
		hint = "Write bytea.";
	else if (pg_strcasecmp(name, "map") == 0 || pg_strcasecmp(name, "object") == 0 ||
			 pg_strcasecmp(name, "record") == 0 || pg_strcasecmp(name, "struct") == 0)
		hint = "Write jsonb: an object's fields are read with FROM paths or in the transform.";
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("type \"%s\" of input column \"%s\" does not exist",
					TypeNameToString(def->typeName), def->colname),
			 errhint("%s", hint ? hint : "Write a PostgreSQL type, e.g. text, bigint, float8, numeric, boolean, timestamptz or jsonb.")));
}

SdpInputSchema *
sdp_parse_input_schema(const char *schema_text)
{
	List	   *elts;
	List	   *paths;
	ListCell   *lc;
	SdpInputSchema *schema;
	int			i = 0;

	if (schema_text == NULL || schema_text[0] == '\0')
		schema_error(schema_text ? schema_text : "", "The schema is empty.");

	elts = parse_column_list(schema_text, &paths);

	schema = palloc0(sizeof(SdpInputSchema));
	schema->ncolumns = list_length(elts);
	schema->columns = palloc0(sizeof(SdpInputColumn) * schema->ncolumns);
	/*
	 * kafka_headers came in 0.4: a flow declared before with a field of that
	 * name keeps it, and has no headers column.
	 */
	schema->nmeta = SDP_NUM_META;
	foreach(lc, elts)
		if (IsA(lfirst(lc), ColumnDef) &&
			strcmp(((ColumnDef *) lfirst(lc))->colname, meta_names[SDP_META_HEADERS]) == 0)
			schema->nmeta = SDP_META_HEADERS;
	schema->tupdesc = CreateTemplateTupleDesc(schema->ncolumns + schema->nmeta);

	foreach(lc, elts)
	{
		ColumnDef  *def;
		SdpInputColumn *col = &schema->columns[i];
		Oid			typinput;
		Node	   *default_expr;
		ListCell   *lc2;

		if (!IsA(lfirst(lc), ColumnDef))
			schema_error(schema_text, "Only column names and types are allowed, no constraints.");
		def = (ColumnDef *) lfirst(lc);
		default_expr = NULL;
		foreach(lc2, def->constraints)
		{
			Constraint *con = lfirst_node(Constraint, lc2);

			if (con->contype != CONSTR_DEFAULT || default_expr != NULL)
				schema_error(schema_text, "Only column names and types are allowed, with FROM and DEFAULT, no constraints or collations.");
			default_expr = con->raw_expr;
		}
		if (def->collClause || def->raw_default || def->is_not_null)
			schema_error(schema_text, "Only column names and types are allowed, with FROM and DEFAULT, no constraints or collations.");
		if (sdp_is_meta_column(def->colname) && strcmp(def->colname, meta_names[SDP_META_HEADERS]) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_COLUMN),
					 errmsg("input column \"%s\" is reserved for Kafka metadata", def->colname),
					 errhint("Every input has kafka_topic, kafka_partition, kafka_offset, kafka_key, kafka_timestamp and kafka_headers; do not declare them.")));
		for (int j = 0; j < i; j++)
			if (strcmp(schema->columns[j].name, def->colname) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_DUPLICATE_COLUMN),
						 errmsg("input column \"%s\" is declared more than once", def->colname)));

		col->name = pstrdup(def->colname);
		col->namelen = (int) strlen(col->name);
		if (list_nth(paths, i) != NULL)
		{
			col->path_text = trim_spaces(list_nth(paths, i));
			col->path = parse_path(schema_text, col->path_text, &col->npath);
		}
		else
		{
			col->npath = 1;
			col->path = palloc0(sizeof(SdpPathStep));
			col->path[0].key = col->name;
			col->path[0].keylen = col->namelen;
			col->path[0].index = -1;
		}
		input_column_type(def, &col->typid, &col->typmod);
		col->kind = decode_kind_for(col->name, col->typid, col->typmod);
		getTypeInputInfo(col->typid, &typinput, &col->typioparam);
		fmgr_info(typinput, &col->infunc);

		if (default_expr != NULL)
		{
			char	   *text;

			if (!default_constant(default_expr, &text))
				ereport(ERROR,
						(errcode(ERRCODE_SYNTAX_ERROR),
						 errmsg("invalid input schema \"%s\"", schema_text),
						 errdetail("The default of input column \"%s\" is not a constant.", col->name),
						 errhint("A default is a constant, e.g. 'qty int DEFAULT 0, note text DEFAULT NULL': the value of a field a message does not have.")));
			col->has_default = true;
			col->default_isnull = (text == NULL);
			if (text != NULL)
				col->default_value = InputFunctionCall(&col->infunc, text, col->typioparam, col->typmod);
		}

		TupleDescInitEntry(schema->tupdesc, i + 1, col->name, col->typid, col->typmod, 0);
		i++;
	}
	finish_schema(schema);
	return schema;
}

/*
 * A schema of columns made by the engine (ncolumns of them, copied): their
 * names, types, paths and defaults as given, then nmeta metadata columns.
 * The schemas of an envelope (decl/envelope.c).
 */
SdpInputSchema *
sdp_input_schema_from_columns(const SdpInputColumn *columns, int ncolumns, int nmeta)
{
	SdpInputSchema *schema = palloc0(sizeof(SdpInputSchema));

	schema->ncolumns = ncolumns;
	schema->columns = palloc0(sizeof(SdpInputColumn) * Max(ncolumns, 1));
	memcpy(schema->columns, columns, sizeof(SdpInputColumn) * ncolumns);
	schema->nmeta = nmeta;
	schema->tupdesc = CreateTemplateTupleDesc(ncolumns + schema->nmeta);
	for (int i = 0; i < ncolumns; i++)
		TupleDescInitEntry(schema->tupdesc, i + 1, columns[i].name, columns[i].typid, columns[i].typmod, 0);
	finish_schema(schema);
	return schema;
}

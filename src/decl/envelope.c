/*
 * envelope.c
 *		The schemas of a flow with "envelope": "debezium".
 *
 * A Debezium change event carries a row of the captured table twice: its
 * image "before" the change and "after" it, with "op" (c create, r read by
 * a snapshot, u update, d delete), "source" (where the change was made:
 * lsn, txId, table, ...) and "ts_ms".  Debezium's JSON converter writes
 * the event at the top level, or with its Kafka Connect schema beside it
 * as {"schema": ..., "payload": {event}}; its Avro converter writes the
 * event record.  The flow declares the columns of the row, with paths
 * relative to an image, as a flow without envelope declares them relative
 * to the message.
 *
 * The input a transform reads is the declared columns (the image the event
 * applies: after, or before for a delete), then debezium_op, debezium_source
 * and debezium_ts_ms, then the Kafka columns.  The decoder reads an event
 * through schemas made here: every declared column twice (under "after" and
 * under "before") and the event's own fields, a group of columns, repeated
 * under "payload" for JSON; worker/debezium.c picks the group and the image.
 */
#include "decl/envelope.h"
#include "decl/input_schema.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

static const char *const debezium_names[SDP_DEBEZIUM_NCOLUMNS] = {
	"debezium_op", "debezium_source", "debezium_ts_ms"
};
static const char *const debezium_fields[SDP_DEBEZIUM_NCOLUMNS] = {"op", "source", "ts_ms"};
static const Oid debezium_types[SDP_DEBEZIUM_NCOLUMNS] = {TEXTOID, JSONBOID, INT8OID};
static const SdpDecodeKind debezium_kinds[SDP_DEBEZIUM_NCOLUMNS] = {
	SDP_DECODE_TEXT, SDP_DECODE_JSONB, SDP_DECODE_INT8
};

/* Whether name is one of the columns a Debezium flow's input has after its declared ones. */
bool
sdp_is_debezium_column(const char *name)
{
	for (int k = 0; k < SDP_DEBEZIUM_NCOLUMNS; k++)
		if (strcmp(name, debezium_names[k]) == 0)
			return true;
	return false;
}

/* A column of the event's own: its name, type and one-step path. */
static void
event_column(SdpInputColumn *col, const char *name, const char *field, Oid typid, SdpDecodeKind kind)
{
	Oid			typinput;

	memset(col, 0, sizeof(SdpInputColumn));
	col->name = pstrdup(name);
	col->namelen = (int) strlen(name);
	col->typid = typid;
	col->typmod = -1;
	col->kind = kind;
	getTypeInputInfo(typid, &typinput, &col->typioparam);
	fmgr_info(typinput, &col->infunc);
	col->npath = 1;
	col->path = palloc0(sizeof(SdpPathStep));
	col->path[0].key = pstrdup(field);
	col->path[0].keylen = (int) strlen(field);
	col->path[0].index = -1;
	col->path_text = pstrdup(field);
}

/* Column col, its path under the members prefix[0].prefix[1]... (nprefix of them). */
static SdpInputColumn
under(const SdpInputColumn *col, const char *const *prefix, int nprefix)
{
	SdpInputColumn c = *col;
	StringInfoData text;

	c.npath = col->npath + nprefix;
	c.path = palloc(sizeof(SdpPathStep) * c.npath);
	initStringInfo(&text);
	for (int k = 0; k < nprefix; k++)
	{
		c.path[k].key = (char *) prefix[k];
		c.path[k].keylen = (int) strlen(prefix[k]);
		c.path[k].index = -1;
		appendStringInfo(&text, "%s.", prefix[k]);
	}
	memcpy(c.path + nprefix, col->path, sizeof(SdpPathStep) * col->npath);
	appendStringInfoString(&text, col->path_text ? col->path_text : quote_identifier(col->name));
	c.path_text = text.data;
	return c;
}

/*
 * The input schema of a Debezium flow: the declared columns, then its
 * debezium_op, debezium_source and debezium_ts_ms.  Errors are the
 * declaration's refusals.
 */
SdpInputSchema *
sdp_debezium_row_schema(const char *schema_text)
{
	SdpInputSchema *declared = sdp_parse_input_schema(schema_text);
	int			n = declared->ncolumns;
	SdpInputColumn *cols = palloc(sizeof(SdpInputColumn) * (n + SDP_DEBEZIUM_NCOLUMNS));

	for (int i = 0; i < n; i++)
		for (int k = 0; k < SDP_DEBEZIUM_NCOLUMNS; k++)
			if (strcmp(declared->columns[i].name, debezium_names[k]) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_DUPLICATE_COLUMN),
						 errmsg("input column \"%s\" is the Debezium envelope's", debezium_names[k]),
						 errhint("A flow with \"envelope\": \"debezium\" has debezium_op, debezium_source and debezium_ts_ms after the columns it declares; name the row's column otherwise and take it with FROM.")));
	memcpy(cols, declared->columns, sizeof(SdpInputColumn) * n);
	for (int k = 0; k < SDP_DEBEZIUM_NCOLUMNS; k++)
		event_column(&cols[n + k], debezium_names[k], debezium_fields[k], debezium_types[k], debezium_kinds[k]);
	return sdp_input_schema_from_columns(cols, n + SDP_DEBEZIUM_NCOLUMNS, declared->nmeta);
}

/* The columns of one group, under the members prefix (none, or "payload"). */
static void
fill_group(SdpInputColumn *cols, const SdpInputSchema *row, int nimage, const char *prefix)
{
	const char *after[2] = {prefix, "after"};
	const char *before[2] = {prefix, "before"};
	int			np = prefix ? 2 : 1;
	int			skip = prefix ? 0 : 1;

	for (int i = 0; i < nimage; i++)
	{
		cols[i] = under(&row->columns[i], after + skip, np);
		cols[nimage + i] = under(&row->columns[i], before + skip, np);
		/* a delete's image names its row: no default stands in for a column it lacks */
		cols[nimage + i].has_default = false;
	}
	for (int k = 0; k < SDP_DEBEZIUM_NCOLUMNS; k++)
	{
		const SdpInputColumn *own = &row->columns[nimage + k];

		cols[2 * nimage + k] = prefix ? under(own, &prefix, 1) : *own;
		cols[2 * nimage + k].has_default = false;
	}
}

/*
 * The image's columns, as a message key holds them (at its top level, and
 * under "payload" with JSON's schema): a key holds the primary key's
 * columns only, so each may be missing (NULL, and no error for Avro).
 */
static SdpInputSchema *
key_schema(const SdpInputSchema *row, int nimage, bool json)
{
	const char *payload = "payload";
	int			ncols = json ? 2 * nimage : nimage;
	SdpInputColumn *cols = palloc(sizeof(SdpInputColumn) * Max(ncols, 1));

	for (int i = 0; i < nimage; i++)
	{
		cols[i] = row->columns[i];
		if (json)
			cols[nimage + i] = under(&row->columns[i], &payload, 1);
	}
	for (int i = 0; i < ncols; i++)
	{
		cols[i].has_default = true;
		cols[i].default_isnull = true;
		cols[i].default_value = (Datum) 0;
	}
	return sdp_input_schema_from_columns(cols, ncols, SDP_NUM_META);
}

/* The decoding schemas of a Debezium flow whose input schema is row (sdp_debezium_row_schema). */
SdpEnvelope *
sdp_debezium_envelope(const SdpInputSchema *row)
{
	SdpEnvelope *env = palloc0(sizeof(SdpEnvelope));
	SdpInputColumn *cols;

	env->nimage = row->ncolumns - SDP_DEBEZIUM_NCOLUMNS;
	env->group = 2 * env->nimage + SDP_DEBEZIUM_NCOLUMNS;
	cols = palloc(sizeof(SdpInputColumn) * 2 * env->group);
	fill_group(cols, row, env->nimage, NULL);
	fill_group(cols + env->group, row, env->nimage, "payload");
	env->json = sdp_input_schema_from_columns(cols, 2 * env->group, SDP_NUM_META);
	env->avro = sdp_input_schema_from_columns(cols, env->group, SDP_NUM_META);
	env->json_key = key_schema(row, env->nimage, true);
	env->avro_key = key_schema(row, env->nimage, false);
	return env;
}

/*
 * debezium.c
 *		Debezium's change events, applied: a flow with "envelope": "debezium".
 *
 * Decoding (decl/envelope.c has the schemas) makes each event an input
 * row: the image it applies (after for op c, r and u; before for d) and
 * its op, source and ts_ms.  A delete's row is marked (Batch.row_tomb) as a
 * tombstone's is: a delete whose event has no before image (a table whose
 * replica identity gives none) takes the row's key from the message key,
 * which Debezium writes as the primary key's columns; so does a tombstone
 * when on_tombstone is 'delete' (the default for this envelope is 'skip':
 * Debezium follows each delete event by a tombstone, for compaction).
 *
 * Writing a range of rows: the deleting rows go through the flow's
 * transform too (the same logic makes the target's key from the before
 * image as from the after image), and the target rows with the primary
 * keys of what it gives are deleted; then the other rows are upserted,
 * less those a later delete of the same message key deletes
 * (sdp_deletes_split): what a key ends with is what its last event says,
 * as long as a key's events come on one partition with the same key bytes
 * (Debezium keys its messages by the primary key).  Where that cannot tell
 * (a delete without a key, a transform that filters a delete or makes
 * several rows of one), the range is applied in order, run by run.
 */
#include "worker/debezium.h"

#include "utils/builtins.h"

#include "decl/envelope.h"
#include "exec/transform.h"
#include "worker/formats.h"
#include "worker/tombstone.h"

/*
 * The image of the row whose key message m's key holds: JSON (with or
 * without its schema) or Avro as the source's key.format says.  False,
 * with the reason, when there is none.
 */
static bool
key_image(FlowWorker *w, rd_kafka_message_t *m, Datum *values, bool *nulls, char **error, int *sqlstate)
{
	SdpEnvelope *env = w->prep.envelope;
	bool		avro = w->source.key_format == SDP_FORMAT_AVRO;
	SdpInputSchema *schema = avro ? env->avro_key : env->json_key;	/* Protobuf is read as JSON */
	Datum	   *v = palloc(sizeof(Datum) * schema->ncolumns);
	bool	   *nl = palloc(sizeof(bool) * schema->ncolumns);
	int			ngroups = schema->ncolumns / env->nimage;

	*sqlstate = ERRCODE_INVALID_TEXT_REPRESENTATION;
	if (m->key == NULL)
	{
		*error = pstrdup("no row to delete: the message has no key");
		return false;
	}
	if (!sdp_formats_decode(w, schema, m->key, m->key_len, w->source.key_format, v, nl, error, sqlstate))
	{
		*error = psprintf("no row to delete: the message key is not the row's key (%s)", *error);
		return false;
	}
	for (int g = 0; g < ngroups; g++)
	{
		bool		any = false;

		for (int i = 0; i < env->nimage && !any; i++)
			any = !nl[g * env->nimage + i];
		if (!any)
			continue;
		memcpy(values, v + g * env->nimage, sizeof(Datum) * env->nimage);
		memcpy(nulls, nl + g * env->nimage, sizeof(bool) * env->nimage);
		return true;
	}
	*error = pstrdup("no row to delete: the message key has none of the row's columns");
	return false;
}

/*
 * Message m of a Debezium flow as an input row (values and nulls of the
 * flow's input schema, the Kafka columns excepted), *deletes when it is a
 * delete.  m is an event, or a tombstone when on_tombstone is 'delete'.
 * False, with the reason, when it is not an event the flow applies; raises
 * when a value does not fit its column (as sdp_formats_decode_value).
 */
bool
sdp_debezium_decode(FlowWorker *w, rd_kafka_message_t *m, Datum *values, bool *nulls,
					bool *deletes, char **error, int *sqlstate)
{
	SdpEnvelope *env = w->prep.envelope;
	int			n = env->nimage;
	bool		avro = w->source.format == SDP_FORMAT_AVRO;
	SdpInputSchema *schema = avro ? env->avro : env->json;	/* Protobuf is read as JSON */
	Datum	   *v;
	bool	   *nl;
	int			g;
	char	   *op;
	int			image;

	*deletes = false;
	*sqlstate = ERRCODE_INVALID_TEXT_REPRESENTATION;
	if (m->payload == NULL)
	{
		/* a tombstone that deletes: an event 'd' whose image is its key */
		if (!key_image(w, m, values, nulls, error, sqlstate))
		{
			*error = psprintf("a tombstone: %s", *error);
			return false;
		}
		*deletes = true;
		values[n + SDP_DEBEZIUM_OP] = CStringGetTextDatum("d");
		nulls[n + SDP_DEBEZIUM_OP] = false;
		nulls[n + SDP_DEBEZIUM_SOURCE] = true;
		nulls[n + SDP_DEBEZIUM_TS_MS] = true;
		return true;
	}

	v = palloc(sizeof(Datum) * schema->ncolumns);
	nl = palloc(sizeof(bool) * schema->ncolumns);
	if (!sdp_formats_decode(w, schema, m->payload, m->len, w->source.format, v, nl, error, sqlstate))
		return false;
	/* the event at the top level, or under "payload" (JSON with its schema) */
	for (g = 0; g < schema->ncolumns / env->group; g++)
		if (!nl[g * env->group + SDP_ENVELOPE_OP(env)])
			break;
	if (g == schema->ncolumns / env->group)
	{
		*error = pstrdup("not a Debezium change event: it has no \"op\"");
		return false;
	}
	v += g * env->group;
	nl += g * env->group;

	op = TextDatumGetCString(v[SDP_ENVELOPE_OP(env)]);
	if (strcmp(op, "c") == 0 || strcmp(op, "r") == 0 || strcmp(op, "u") == 0)
		image = SDP_ENVELOPE_AFTER(env);
	else if (strcmp(op, "d") == 0)
	{
		image = SDP_ENVELOPE_BEFORE(env);
		*deletes = true;
	}
	else
	{
		*sqlstate = ERRCODE_FEATURE_NOT_SUPPORTED;
		*error = strcmp(op, "t") == 0
			? pstrdup("a truncate event (op \"t\"): a flow does not truncate its target")
			: psprintf("a change event with op \"%s\": a flow applies c, r, u and d", op);
		return false;
	}
	memcpy(values, v + image, sizeof(Datum) * n);
	memcpy(nulls, nl + image, sizeof(bool) * n);
	for (int k = 0; k < SDP_DEBEZIUM_NCOLUMNS; k++)
	{
		values[n + k] = v[SDP_ENVELOPE_OP(env) + k];
		nulls[n + k] = nl[SDP_ENVELOPE_OP(env) + k];
	}

	if (*deletes)
	{
		bool		any = false;

		/* no before image (or none of the declared columns in it): the key says which row */
		for (int i = 0; i < n && !any; i++)
			any = !nulls[i];
		if (!any && !key_image(w, m, values, nulls, error, sqlstate))
		{
			*error = psprintf("a delete event without a \"before\" image: %s", *error);
			return false;
		}
	}
	return true;
}

/*
 * The target's rows with the primary keys of rows (what the transform gave
 * for delete events) deleted.  A row whose key has a null deletes nothing:
 * its event (a "before" image without the key's columns) is not one the
 * flow can apply, and the error sets it aside.
 */
static int64
delete_rows(FlowWorker *w, HeapTuple *rows, int n)
{
	MemoryContext cxt = CurrentMemoryContext;
	SdpTableWrite *tw = &w->prep.table_write;
	int			rc;

	if (n == 0)
		return 0;
	for (int i = 0; i < n; i++)
		for (int k = 0; k < tw->npk; k++)
			if (heap_attisnull(rows[i], tw->pk_index[k] + 1, tw->row_desc))
				ereport(ERROR,
						(errcode(ERRCODE_NOT_NULL_VIOLATION),
						 errmsg("a delete event whose key column \"%s\" is null: it deletes no row of %s",
								NameStr(TupleDescAttr(tw->row_desc, tw->pk_index[k])->attname), tw->relname),
						 errhint("A delete's \"before\" image (or, without one, the message key) must hold the target's primary key.")));
	sdp_register_rows(SDP_DELETED_RELATION, w->prep.table_write.row_desc, rows, n);
	rc = SPI_execute_plan(w->prep.delete_plan, NULL, NULL, false, 0);
	MemoryContextSwitchTo(cxt);
	if (rc != SPI_OK_DELETE)
		elog(ERROR, "delete from %s returned %s", w->prep.table_write.relname, SPI_result_code_string(rc));
	sdp_unregister_rows(SDP_DELETED_RELATION);
	return (int64) SPI_processed;
}

/*
 * Input rows [lo, hi) of a batch, some of them delete events: apply them.
 * Returns the number of rows deleted.
 *
 * The common case, every delete with a message key and each giving one row
 * through the transform: the deletes run first, and *keep (*nkeep of them)
 * has the other rows less those a later delete of the same message key
 * undoes (sdp_deletes_split), for the caller to write; *done is false.
 * Otherwise (a delete without a key, or a transform that filters deletes
 * or gives several rows for one): the range is applied in order, each run
 * of upserts written and each run of deletes deleted in turn, and *done is
 * true, with the rows the transform gave for the upserts in *nout and
 * those written in *written.
 */
int64
sdp_debezium_apply(FlowWorker *w, Batch *b, int lo, int hi, HeapTuple *keep, int *nkeep,
				   bool *done, int64 *nout, int64 *written)
{
	int		   *dels = palloc(sizeof(int) * Max(hi - lo, 1));
	int			ndels = 0;
	bool		keyed = true;
	HeapTuple  *rows = palloc(sizeof(HeapTuple) * Max(hi - lo, 1));
	HeapTuple  *out;
	int			n;
	int64		deleted = 0;

	*done = false;
	*nout = 0;
	*written = 0;
	for (int i = lo; i < hi; i++)
	{
		if (!b->row_tomb[i])
			continue;
		keyed &= b->msgs[b->row_msg[i]]->key != NULL;
		rows[ndels++] = b->rows[i];
	}
	if (ndels == 0)
	{
		memcpy(keep, b->rows + lo, sizeof(HeapTuple) * (hi - lo));
		*nkeep = hi - lo;
		return 0;
	}
	n = sdp_transform_run(&w->prep.transform, rows, ndels, &out);
	if (keyed && n == ndels)
	{
		sdp_deletes_split(b, lo, hi, keep, nkeep, dels, &ndels);
		return delete_rows(w, out, n);
	}

	/* in order, run by run */
	*done = true;
	for (int i = lo; i < hi;)
	{
		int			j = i;

		while (j < hi && b->row_tomb[j] == b->row_tomb[i])
			j++;
		n = sdp_transform_run(&w->prep.transform, b->rows + i, j - i, &out);
		if (b->row_tomb[i])
			deleted += delete_rows(w, out, n);
		else
		{
			*nout += n;
			*written += sdp_table_write_rows(&w->prep.table_write, out, n);
		}
		i = j;
	}
	return deleted;
}

/*
 * reset.c
 *		sdp_reset_flow: move a stopped flow's offsets, to replay history or
 *		to skip ahead.
 *
 * Like Kafka's own `kafka-consumer-groups --reset-offsets`, which needs the
 * group to have no active member, a reset needs the flow stopped (its
 * workers gone): its workers store offsets only where they left them (the
 * fence of sdp_store_offsets), and one still running would exit on its next
 * batch rather than write over the reset.  The new positions are looked up
 * on the broker when the call runs and written to sdp.offsets in the
 * caller's transaction, so a reset that rolls back changes nothing; the
 * flow reads from them when it is started again.
 *
 *	 'earliest'		each partition's first offset still on the broker
 *	 'latest'		each partition's end: only messages produced from now
 *	 a timestamp	each partition's first message with a timestamp at or
 *					after it (Kafka's offsets-for-times), else its end
 *	 {"p": n, ...}	the given partitions to the given offsets; the others
 *					keep theirs
 *
 * A stateful flow's state is cleared (its checkpoint rows deleted, its
 * watermarks forgotten): it is rebuilt from the messages read after the
 * reset.  Rows already in the target stay: a replay writes its rows again
 * (an append target gets them twice unless it is emptied first; an upsert
 * target and a window table, keyed, get them replaced).
 */
#include "sdp.h"
#include "compat.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/wait_event.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "decl/flow.h"
#include "kafka/kafka_source.h"
#include "decl/catalog.h"
#include "decl/flow_options.h"
#include "shmem/slots.h"
#include "sql/api.h"
#include "sql/roles.h"

/* the wait event pg_stat_activity shows (sdp_wait_event) */
static uint32 wait_stop = 0;

PG_FUNCTION_INFO_V1(sdp_reset_flow);
PG_FUNCTION_INFO_V1(sdp_reset_flow_offsets);

#define RESET_TIMEOUT_MS 10000

typedef enum ResetTo
{
	RESET_EARLIEST,
	RESET_LATEST,
	RESET_TIME,
	RESET_OFFSETS
} ResetTo;

/* The flow to reset, read and locked in the catalog. */
typedef struct ResetFlow
{
	char	   *name;
	int64		id;
	bool		stateful;
	SdpSourceDef source;
	SdpFlowOptions opts;		/* its share of the partitions (option partitions), if any */
} ResetFlow;

/* How long a reset waits for the launcher to free the slots of exited workers. */
#define RESET_SLOT_WAIT_MS	5000
#define RESET_SLOT_POLL_MS	10

/*
 * Read the flow, check that the current role owns it and that it is
 * stopped, and lock its row: sdp_start_flow waits for the reset to commit.
 */
static void
reset_load_flow(ResetFlow *f)
{
	SdpCatalogScope scope;
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(f->name)};
	HeapTuple	tup;
	TupleDesc	desc;
	bool		isnull;
	bool		running;
	Oid			owner;
	int			slot;

	sdp_catalog_enter(&scope);
	if (SPI_execute_with_args(psprintf("SELECT f.id, f.enabled AND f.failed_at IS NULL, f.operator IS NOT NULL, "
									   "       %s, f.owner::text, s.name, s.bootstrap_servers, s.topic, s.options, f.options "
									   "  FROM sdp.flows f JOIN sdp.sources s ON s.name = f.source "
									   " WHERE f.name = $1 FOR UPDATE OF f",
									   sdp_owner_oid_sql("f.owner")),
							  1, argtypes, values, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read flow \"%s\"", f->name);
	sdp_catalog_leave(&scope);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("flow \"%s\" does not exist", f->name)));
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	owner = DatumGetObjectId(SPI_getbinval(tup, desc, 4, &isnull));
	sdp_check_owner(isnull ? InvalidOid : owner, SPI_getvalue(tup, desc, 5), "flow", f->name);

	f->id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
	running = DatumGetBool(SPI_getbinval(tup, desc, 2, &isnull));
	f->stateful = DatumGetBool(SPI_getbinval(tup, desc, 3, &isnull));
	f->source.name = SPI_getvalue(tup, desc, 6);
	f->source.bootstrap_servers = SPI_getvalue(tup, desc, 7);
	f->source.topic = SPI_getvalue(tup, desc, 8);
	sdp_parse_source_options(DatumGetJsonbP(SPI_getbinval(tup, desc, 9, &isnull)), &f->source);
	sdp_parse_flow_options(DatumGetJsonbP(SPI_getbinval(tup, desc, 10, &isnull)), &f->opts);

	if (running)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("flow \"%s\" is running", f->name),
				 errdetail("A flow's offsets can be reset only while it is stopped, as a Kafka consumer group's only while it has no member."),
				 errhint("Stop it first: SELECT sdp_stop_flow('%s'); then reset it, and start it with sdp_start_flow.", f->name)));

	/*
	 * sdp.flow_status shows the flow stopped once its workers have exited
	 * (their pids cleared); the launcher frees their slots a moment later,
	 * when their exits wake it.  Wait for that rather than refuse, so that
	 * the hint below holds; refuse at once while a worker lives.
	 */
	for (int waited_ms = 0;; waited_ms += RESET_SLOT_POLL_MS)
	{
		bool		live = false;

		LWLockAcquire(SdpShmem->lock, LW_SHARED);
		slot = sdp_slot_find(f->name);
		for (int s = slot; s >= 0; s = sdp_slot_next(f->name, s))
		{
			SdpFlowSlot *sl = &SdpShmem->slots[s];

			SpinLockAcquire(&sl->mutex);
			live = live || sl->ctl.pid != 0;
			SpinLockRelease(&sl->mutex);
		}
		LWLockRelease(SdpShmem->lock);
		if (slot < 0)
			break;
		if (live || waited_ms >= RESET_SLOT_WAIT_MS)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("flow \"%s\" is stopping", f->name),
					 errdetail("Its workers have not all exited yet."),
					 errhint("Try again when sdp.flow_status shows it stopped.")));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 RESET_SLOT_POLL_MS, sdp_wait_event(&wait_stop, "SdpResetWaitStop"));
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/* Whether the flow reads the partition: every one, or those of its share. */
static bool
in_share(ResetFlow *f, int32 partition)
{
	if (f->opts.nshare == 0)
		return true;
	for (int i = 0; i < f->opts.nshare; i++)
		if (f->opts.share[i] == partition)
			return true;
	return false;
}

/* partition -> offset pairs from {"p": n, ...}, checked. */
static int
parse_offsets(Jsonb *offsets, int32 **parts, int64 **offs)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	int			n = 0;
	int			cap = 16;
	char	   *key = NULL;

	if (!JB_ROOT_IS_OBJECT(offsets))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("offsets must be a JSON object of partition numbers to offsets"),
				 errhint("For example '{\"0\": 1200, \"3\": 0}'::jsonb.")));
	*parts = palloc(sizeof(int32) * cap);
	*offs = palloc(sizeof(int64) * cap);
	it = JsonbIteratorInit(&offsets->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		char	   *end;
		long		p;
		int64		o;

		if (tok == WJB_KEY)
		{
			key = pnstrdup(v.val.string.val, v.val.string.len);
			continue;
		}
		if (tok != WJB_VALUE)
			continue;
		errno = 0;
		p = strtol(key, &end, 10);
		if (errno != 0 || end == key || *end != '\0' || p < 0 || p > PG_INT32_MAX)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("\"%s\" is not a partition number", key),
					 errhint("The keys of offsets are partition numbers, e.g. '{\"0\": 1200}'.")));
		if (v.type != jbvNumeric)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("the offset of partition %ld must be a number", p)));
		o = DatumGetInt64(DirectFunctionCall1(numeric_int8, NumericGetDatum(v.val.numeric)));
		if (o < 0 || numeric_is_nan(v.val.numeric) ||
			DatumGetBool(DirectFunctionCall2(numeric_ne, NumericGetDatum(v.val.numeric),
											 DirectFunctionCall1(int8_numeric, Int64GetDatum(o)))))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("the offset of partition %ld must be a non-negative integer", p)));
		if (n == cap)
		{
			cap *= 2;
			*parts = repalloc(*parts, sizeof(int32) * cap);
			*offs = repalloc(*offs, sizeof(int64) * cap);
		}
		(*parts)[n] = (int32) p;
		(*offs)[n] = o;
		n++;
	}
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("offsets names no partition")));
	return n;
}

/*
 * Where each partition starts after the reset, from the broker: every
 * partition of the topic, or for explicit offsets the given ones (checked
 * against the topic's partitions and their ends).
 */
static int
reset_positions_from(KafkaSource *ks, ResetFlow *f, ResetTo to, TimestampTz ts, int n_given,
					 int32 *given_parts, int64 *given_offs, int32 **parts, int64 **offs)
{
	int			n = 0;
	int32	   *topic_parts;
	int			ntopic;
	char	   *error = NULL;

	ntopic = kafka_source_list_partitions(ks, &topic_parts, RESET_TIMEOUT_MS, &error);
	if (ntopic < 0)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("cannot reset flow \"%s\": %s", f->name, error),
				 errhint("The broker must be reachable: a reset looks the new offsets up there.")));
	if (to == RESET_OFFSETS)
	{
		for (int i = 0; i < n_given; i++)
		{
			bool		found = false;
			int64		lo,
						hi;

			for (int k = 0; k < ntopic; k++)
				found |= (topic_parts[k] == given_parts[i]);
			if (!found)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("topic \"%s\" has no partition %d", f->source.topic, given_parts[i]),
						 errdetail("It has %d partitions.", ntopic)));
			if (!in_share(f, given_parts[i]))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("flow \"%s\" does not read partition %d: it is not in its option \"partitions\"",
								f->name, given_parts[i]),
						 errhint("Reset it on the server whose flow reads that partition.")));
			if (!kafka_source_query_watermarks(ks, given_parts[i], &lo, &hi, RESET_TIMEOUT_MS, &error))
				ereport(ERROR,
						(errcode(ERRCODE_CONNECTION_FAILURE),
						 errmsg("cannot reset flow \"%s\": %s", f->name, error)));
			if (given_offs[i] > hi)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("offset %lld is past the end of partition %d (%lld)",
								(long long) given_offs[i], given_parts[i], (long long) hi),
						 errhint("An offset can be at most the partition's end, where the next message will be.")));
		}
		*parts = given_parts;
		*offs = given_offs;
		n = n_given;
	}
	else
	{
		/* the flow's partitions: the topic's, or those of its share the topic has */
		*parts = palloc(sizeof(int32) * Max(ntopic, 1));
		for (int i = 0; i < ntopic; i++)
			if (in_share(f, topic_parts[i]))
				(*parts)[n++] = topic_parts[i];
		topic_parts = *parts;
		ntopic = n;
		*offs = palloc(sizeof(int64) * Max(ntopic, 1));
		for (int i = 0; i < ntopic; i++)
		{
			int64		lo,
						hi;
			bool		ok;

			if (to == RESET_TIME)
				ok = kafka_source_offset_for_time(ks, topic_parts[i], sdp_timestamptz_to_unix_ms(ts),
												  &(*offs)[i], RESET_TIMEOUT_MS, &error);
			else
			{
				ok = kafka_source_query_watermarks(ks, topic_parts[i], &lo, &hi, RESET_TIMEOUT_MS, &error);
				(*offs)[i] = (to == RESET_EARLIEST) ? lo : hi;
			}
			if (!ok)
				ereport(ERROR,
						(errcode(ERRCODE_CONNECTION_FAILURE),
						 errmsg("cannot reset flow \"%s\": %s", f->name, error)));
		}
		n = ntopic;
	}
	return n;
}

/* The same, with a Kafka client of the flow's source for the time of the call. */
static void
reset_positions(ResetFlow *f, ResetTo to, TimestampTz ts, int n_given, int32 *given_parts,
				int64 *given_offs, int32 **parts, int64 **offs, int *n)
{
	KafkaSource *ks = kafka_source_create(&f->source, f->name);

	PG_TRY();
	{
		*n = reset_positions_from(ks, f, to, ts, n_given, given_parts, given_offs, parts, offs);
	}
	PG_FINALLY();
	{
		kafka_source_destroy(ks);
	}
	PG_END_TRY();
}

/* Write the new positions and clear the state; returns them as jsonb. */
static Datum
reset_store(ResetFlow *f, int n, int32 *parts, int64 *offs)
{
	SdpCatalogScope scope;
	Oid			argtypes[3] = {INT8OID, INT4ARRAYOID, INT8ARRAYOID};
	Datum		values[3];
	Datum	   *pd = palloc(sizeof(Datum) * n);
	Datum	   *od = palloc(sizeof(Datum) * n);
	JsonbParseState *state = NULL;
	JsonbValue *res;

	for (int i = 0; i < n; i++)
	{
		pd[i] = Int32GetDatum(parts[i]);
		od[i] = Int64GetDatum(offs[i]);
	}
	values[0] = Int64GetDatum(f->id);
	values[1] = PointerGetDatum(construct_array(pd, n, INT4OID, 4, true, TYPALIGN_INT));
	values[2] = PointerGetDatum(construct_array(od, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));

	sdp_catalog_enter(&scope);
	/* a partition's state position moves with it: there is no state before it */
	if (SPI_execute_with_args("INSERT INTO sdp.offsets AS o (flow_id, partition, next_offset, state_offset, updated_at) "
							  "SELECT $1, u.p, u.o, u.o, now() FROM unnest($2, $3) AS u(p, o) "
							  "ON CONFLICT (flow_id, partition) DO UPDATE "
							  "   SET next_offset = EXCLUDED.next_offset, state_offset = EXCLUDED.state_offset, "
							  "       updated_at = EXCLUDED.updated_at",
							  3, argtypes, values, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not store the offsets of flow \"%s\"", f->name);
	if (f->stateful)
	{
		if (SPI_execute_with_args("DELETE FROM sdp.state_checkpoints WHERE flow_id = $1",
								  1, argtypes, values, NULL, false, 0) != SPI_OK_DELETE ||
			SPI_execute_with_args("UPDATE sdp.offsets SET state_offset = next_offset, max_event_time = NULL, "
								  "       watermark = NULL WHERE flow_id = $1",
								  1, argtypes, values, NULL, false, 0) != SPI_OK_UPDATE ||
			SPI_execute_with_args("UPDATE sdp.flows SET watermark = NULL WHERE id = $1",
								  1, argtypes, values, NULL, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "could not clear the state of flow \"%s\"", f->name);
	}
	/* a backfill that had not finished is abandoned: the flow reads from the new positions (0.10) */
	if (SPI_execute("SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
					" WHERE n.nspname = 'sdp' AND c.relname = 'backfills'", true, 1) == SPI_OK_SELECT &&
		SPI_processed == 1 &&
		SPI_execute_with_args("DELETE FROM sdp.backfills WHERE flow_id = $1",
							  1, argtypes, values, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not abandon the backfill of flow \"%s\"", f->name);
	/* the flow has offsets now (a restored flow without them waits for them) */
	if (SPI_execute_with_args("UPDATE sdp.flows SET offsets_stored = true WHERE id = $1",
							  1, argtypes, values, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not update flow \"%s\"", f->name);
	sdp_catalog_leave(&scope);

	pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	for (int i = 0; i < n; i++)
	{
		JsonbValue	k,
					v;
		char	   *ks = psprintf("%d", parts[i]);

		k.type = jbvString;
		k.val.string.val = ks;
		k.val.string.len = strlen(ks);
		v.type = jbvNumeric;
		v.val.numeric = DatumGetNumeric(DirectFunctionCall1(int8_numeric, Int64GetDatum(offs[i])));
		pushJsonbValue(&state, WJB_KEY, &k);
		pushJsonbValue(&state, WJB_VALUE, &v);
	}
	res = pushJsonbValue(&state, WJB_END_OBJECT, NULL);
	return JsonbPGetDatum(JsonbValueToJsonb(res));
}

static Datum
reset_flow(FunctionCallInfo fcinfo, ResetTo to, TimestampTz ts, Jsonb *offsets)
{
	ResetFlow	f;
	int32	   *given_parts = NULL;
	int64	   *given_offs = NULL;
	int			n_given = 0;
	int32	   *parts;
	int64	   *offs;
	int			n;
	Datum		result;
	MemoryContext cxt = CurrentMemoryContext;

	memset(&f, 0, sizeof(f));
	f.name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	sdp_require_shmem();
	sdp_require_flow_database();
	if (to == RESET_OFFSETS)
		n_given = parse_offsets(offsets, &given_parts, &given_offs);

	SPI_connect();
	reset_load_flow(&f);
	reset_positions(&f, to, ts, n_given, given_parts, given_offs, &parts, &offs, &n);
	result = reset_store(&f, n, parts, offs);
	result = SPI_datumTransfer(result, false, -1);
	SPI_finish();
	MemoryContextSwitchTo(cxt);
	ereport(NOTICE,
			(errmsg("flow \"%s\" reads from the new offsets when it is started%s", f.name,
					f.stateful ? "; its state was cleared" : "")));
	PG_RETURN_DATUM(result);
}

/* sdp_reset_flow(flow, to): 'earliest', 'latest' or a timestamp. */
Datum
sdp_reset_flow(PG_FUNCTION_ARGS)
{
	char	   *to = text_to_cstring(PG_GETARG_TEXT_PP(1));
	TimestampTz ts;

	if (pg_strcasecmp(to, "earliest") == 0)
		return reset_flow(fcinfo, RESET_EARLIEST, 0, NULL);
	if (pg_strcasecmp(to, "latest") == 0)
		return reset_flow(fcinfo, RESET_LATEST, 0, NULL);
	if (to[0] == '{')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"to\" must be 'earliest', 'latest' or a timestamp"),
				 errhint("For explicit offsets, pass jsonb: sdp_reset_flow('flow', offsets => '%s').", to)));
	ts = DatumGetTimestampTz(DirectFunctionCall3(timestamptz_in, CStringGetDatum(to),
												 ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1)));
	if (TIMESTAMP_NOT_FINITE(ts))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"to\" must be 'earliest', 'latest' or a finite timestamp"),
				 errhint("'earliest' reads everything the broker still has, 'latest' only what comes next.")));
	return reset_flow(fcinfo, RESET_TIME, ts, NULL);
}

/* sdp_reset_flow(flow, offsets jsonb): {"partition": offset, ...}. */
Datum
sdp_reset_flow_offsets(PG_FUNCTION_ARGS)
{
	return reset_flow(fcinfo, RESET_OFFSETS, 0, PG_GETARG_JSONB_P(1));
}

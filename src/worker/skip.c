/*
 * skip.c
 *		The messages a flow's owner asked it to skip (sdp_skip_message).
 *
 * sdp.skipped_messages holds the requests.  The worker reads its flow's at
 * start (once a restore of the flow is complete: they are restored with its
 * offsets) and again only when a request has committed: sdp_skip_message bumps
 * skip_generation in the flow's slot and sets the worker's latch, and the
 * worker asks sdp_skips_changed once per loop and after each wait of a
 * retry's backoff.  A batch looks its messages up
 * only while the flow has requests.
 *
 * A requested message is not decoded, transformed or written: it is
 * dead-lettered with stage 'skipped' in the transaction of its batch,
 * whatever on_error says, and the offsets move past it with the others.
 * A batch being retried is decoded again when new requests come, so a skip
 * takes effect at its next attempt.  Requests stay after they applied: a
 * stateful flow replaying from its checkpoint skips the message again, and
 * the dead letter, unique per message, is written once.
 *
 * On a 0.1 catalog (the binary replaced, ALTER EXTENSION UPDATE not run
 * yet) there is no sdp.skipped_messages and no request; the worker looks
 * for the table again when told of one.
 */
#include "worker/skip.h"
#include "decl/catalog.h"

#include "catalog/pg_type.h"
#include "pgstat.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

/* A message the flow's owner asked the flow to skip (sdp.skipped_messages). */
typedef struct SdpSkip
{
	int32		partition;
	int64		offset;
	char	   *requested_by;
} SdpSkip;

/* The skip requests of the worker's flow: this module's own (FlowWorker.skips). */
struct SdpSkips
{
	bool		table;			/* sdp.skipped_messages exists (a 0.2 catalog) */
	uint64		generation;		/* the slot's skip_generation when they were read */
	MemoryContext cxt;
	int			n;
	SdpSkip    *skips;			/* sorted by partition and offset */
};

static int
skip_cmp(const void *a, const void *b)
{
	const SdpSkip *x = a;
	const SdpSkip *y = b;

	if (x->partition != y->partition)
		return x->partition < y->partition ? -1 : 1;
	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	return 0;
}

/*
 * Read the flow's skip requests into w->skips.  Inside a transaction, with
 * SPI connected and a snapshot; the caller has read skip_generation before
 * the snapshot was taken.
 */
static void
skips_load(FlowWorker *w)
{
	MemoryContext cxt = CurrentMemoryContext;
	SdpCatalogScope scope;
	Oid			argtypes[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(w->args.flow_id)};
	uint64		n = 0;
	bool		isnull;

	SdpSkips   *k = w->skips;

	MemoryContextReset(k->cxt);
	k->n = 0;
	k->skips = NULL;

	sdp_catalog_enter(&scope);
	if (!k->table)
	{
		if (SPI_execute("SELECT pg_catalog.to_regclass('sdp.skipped_messages') IS NOT NULL", true, 0) != SPI_OK_SELECT)
			elog(ERROR, "could not look for sdp.skipped_messages");
		k->table = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	}
	if (k->table)
	{
		if (SPI_execute_with_args("SELECT kafka_partition, kafka_offset, requested_by FROM sdp.skipped_messages "
								  " WHERE flow_id = $1 ORDER BY kafka_partition, kafka_offset",
								  1, argtypes, values, NULL, true, 0) != SPI_OK_SELECT)
			elog(ERROR, "could not read the skip requests of flow \"%s\"", w->args.name);
		n = SPI_processed;
	}
	sdp_catalog_leave(&scope);
	MemoryContextSwitchTo(cxt);
	if (n == 0)
		return;

	k->skips = MemoryContextAlloc(k->cxt, sizeof(SdpSkip) * n);
	for (uint64 i = 0; i < n; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;

		k->skips[i].partition = DatumGetInt32(SPI_getbinval(tup, desc, 1, &isnull));
		k->skips[i].offset = DatumGetInt64(SPI_getbinval(tup, desc, 2, &isnull));
		k->skips[i].requested_by = MemoryContextStrdup(k->cxt, SPI_getvalue(tup, desc, 3));
	}
	k->n = (int) n;
}

/* The skip_generation of the worker's slot: bumped by each request that commits. */
static uint64
slot_skip_generation(FlowWorker *w)
{
	uint64		generation;

	SpinLockAcquire(&w->slot->mutex);
	generation = w->slot->ctl.skip_generation;
	SpinLockRelease(&w->slot->mutex);
	return generation;
}

/* Whether a skip request committed since the worker read them (sdp_skips_reload). */
bool
sdp_skips_changed(FlowWorker *w)
{
	return w->skips == NULL || slot_skip_generation(w) != w->skips->generation;
}

/* Read them (at start, or again when a request has committed), in a transaction of its own. */
void
sdp_skips_reload(FlowWorker *w)
{
	MemoryContext cxt = CurrentMemoryContext;
	bool		told = w->skips != NULL;
	uint64		generation;

	if (w->skips == NULL)
	{
		w->skips = MemoryContextAllocZero(w->flow_cxt, sizeof(SdpSkips));
		w->skips->cxt = AllocSetContextCreate(w->flow_cxt, "sdp skips", ALLOCSET_SMALL_SIZES);
	}
	/* before the snapshot the requests are read with: one committed later bumps it again */
	generation = slot_skip_generation(w);

	sdp_start_transaction();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "sdp: reading skip requests");
	skips_load(w);
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);
	pgstat_report_activity(STATE_IDLE, NULL);
	w->skips->generation = generation;
	if (told || w->skips->n > 0)
		ereport(LOG,
				(errmsg("sdp flow \"%s\" read its skip requests: %d pending or applied",
						w->args.name, w->skips->n)));
}

/*
 * Before a batch is decoded: which of its messages are to be skipped
 * (b->skip_msg), and their dead letters (b->skipped).  Nothing to do, and
 * nothing looked up, while the flow has no request.
 */
void
sdp_skips_mark(FlowWorker *w, Batch *b)
{
	b->skip_msg = NULL;
	b->skipped = NIL;
	if (w->skips == NULL || w->skips->n == 0)
		return;
	for (int i = 0; i < b->nmsgs; i++)
	{
		rd_kafka_message_t *m = b->msgs[i];
		SdpSkip		key;
		SdpSkip    *found;
		DeadLetter *dl;

		key.partition = m->partition;
		key.offset = m->offset;
		found = bsearch(&key, w->skips->skips, w->skips->n, sizeof(SdpSkip), skip_cmp);
		if (found == NULL)
			continue;
		if (b->skip_msg == NULL)
			b->skip_msg = palloc0(sizeof(bool) * b->nmsgs);
		b->skip_msg[i] = true;
		dl = palloc0(sizeof(DeadLetter));
		dl->msg = m;
		dl->stage = "skipped";
		dl->error = psprintf("skipped by role \"%s\" with sdp_skip_message()", found->requested_by);
		dl->sqlstate = 0;
		b->skipped = lappend(b->skipped, dl);
	}
}

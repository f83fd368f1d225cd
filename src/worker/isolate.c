/*
 * isolate.c
 *		Finding the bad units of a failed stage by halving.
 *
 * When a stage of a batch (the transform, the write) raises a data error,
 * the batch is not lost: the stage is run again over its units (messages,
 * or the operator's emitted rows) in subtransactions, and a range that
 * fails is split in two until each bad unit is alone.  The caller's 'bad'
 * callback sets that unit aside (dead letter, skip, or fail the flow); the
 * good ranges stay committed in the batch's transaction.
 *
 * Which errors may be the units' fault is the caller's to say: for the
 * transform and the write, any error a row can cause (sdp_is_row_error),
 * judged by evidence in batch.c (a data error is the unit's fault; another
 * is only when other units went through); for decoding, anything but
 * running out of memory.  Errors no row causes (a deadlock, a full disk)
 * are not isolated: they propagate and abort the whole batch, which the
 * worker retries with backoff.
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "worker/isolate.h"
#include "exec/table_write.h"

/* Errors worth isolating to one unit: the data was wrong, not the world. */
bool
sdp_is_data_error(int sqlerrcode)
{
	int			category = ERRCODE_TO_CATEGORY(sqlerrcode);

	return category == ERRCODE_DATA_EXCEPTION ||
		category == ERRCODE_INTEGRITY_CONSTRAINT_VIOLATION ||
		category == ERRCODE_CARDINALITY_VIOLATION ||
		category == ERRCODE_WITH_CHECK_OPTION_VIOLATION ||
		category == ERRCODE_SQL_ROUTINE_EXCEPTION ||
		category == ERRCODE_EXTERNAL_ROUTINE_INVOCATION_EXCEPTION ||
		sqlerrcode == ERRCODE_RAISE_EXCEPTION;
}

/*
 * Errors a single message or row can be the cause of: data errors, and
 * others such as a key too long for an index (54000) or a row a row-level
 * security policy rejects (42501), which the same error from every row
 * tells apart from the flow's own fault (batch.c).  Not: a transaction
 * rolled back for its concurrency (a deadlock, a serialization failure),
 * resources, the operator's intervention, the system, internal errors, or
 * a lock not available: those are retried, never pinned on a row.
 */
bool
sdp_is_row_error(int sqlerrcode)
{
	switch (ERRCODE_TO_CATEGORY(sqlerrcode))
	{
		case ERRCODE_TRANSACTION_ROLLBACK:
		case ERRCODE_INSUFFICIENT_RESOURCES:
		case ERRCODE_OPERATOR_INTERVENTION:
		case ERRCODE_SYSTEM_ERROR:
		case ERRCODE_INTERNAL_ERROR:
		case ERRCODE_CONNECTION_EXCEPTION:
			return false;
		default:
			return sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE;
	}
}

/*
 * Errors of decoding a message: decoding reads nothing but the message and
 * the declared schema, so whatever it raises is the message's fault, a
 * nesting too deep for the stack included; only running out of memory and
 * the operator's intervention (a cancel met at the decode loop's
 * CHECK_FOR_INTERRUPTS) are not.
 */
bool
sdp_is_decode_error(int sqlerrcode)
{
	return sqlerrcode != ERRCODE_OUT_OF_MEMORY &&
		ERRCODE_TO_CATEGORY(sqlerrcode) != ERRCODE_OPERATOR_INTERVENTION;
}

/*
 * Run step(arg, lo, hi) in a subtransaction.  Returns NULL when it
 * committed, or the error that rolled it back if it is the units' fault
 * (in the caller's memory context).  Other errors propagate.
 */
static ErrorData *
run_in_subtransaction(SdpIsolateStep step, SdpIsolateFault fault, void *arg, int lo, int hi)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	ErrorData  *volatile edata = NULL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		step(arg, lo, hi);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		/* a registration left behind by the failed statement */
		(void) SPI_unregister_relation(SDP_INPUT_RELATION);
		(void) SPI_unregister_relation(SDP_OUTPUT_RELATION);
		(void) SPI_unregister_relation(SDP_DELETED_RELATION);
		if (!fault(edata->sqlerrcode))
			ReThrowError(edata);
	}
	PG_END_TRY();
	return edata;
}

/*
 * Run step(arg, i, i + 1) for each of units[0 .. nunits), each in a
 * subtransaction rolled back whether it passed or not: a probe leaves the
 * batch as it was (what step counts in arg is the caller's to restore).
 * Returns the first unit's error if every unit failed with SQLSTATE
 * sqlerrcode, else NULL (in the caller's memory context).  Errors not the
 * units' fault propagate, as in sdp_isolate.
 */
ErrorData *
sdp_isolate_probe(SdpIsolateStep step, SdpIsolateFault fault, void *arg,
				  const int *units, int nunits, int sqlerrcode)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	ErrorData  *volatile first = NULL;

	for (int k = 0; k < nunits; k++)
	{
		ErrorData  *volatile edata = NULL;

		BeginInternalSubTransaction(NULL);
		MemoryContextSwitchTo(cxt);
		PG_TRY();
		{
			step(arg, units[k], units[k] + 1);
		}
		PG_CATCH();
		{
			MemoryContextSwitchTo(cxt);
			edata = CopyErrorData();
			FlushErrorState();
		}
		PG_END_TRY();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		(void) SPI_unregister_relation(SDP_INPUT_RELATION);
		(void) SPI_unregister_relation(SDP_OUTPUT_RELATION);
		(void) SPI_unregister_relation(SDP_DELETED_RELATION);
		if (edata != NULL && !fault(edata->sqlerrcode))
			ReThrowError(edata);
		if (edata == NULL || edata->sqlerrcode != sqlerrcode)
			return NULL;
		if (first == NULL)
			first = edata;
	}
	return first;
}

/*
 * Run the stage over units [lo, hi), setting aside each unit that fails
 * alone.  Returns false as soon as 'bad' says stop.
 */
bool
sdp_isolate(SdpIsolateStep step, SdpIsolateBad bad, SdpIsolateFault fault, void *arg, int lo, int hi)
{
	ErrorData  *edata;

	if (hi <= lo)
		return true;
	edata = run_in_subtransaction(step, fault, arg, lo, hi);
	if (edata == NULL)
		return true;
	if (hi - lo == 1)
		return bad(arg, lo, edata);
	return sdp_isolate(step, bad, fault, arg, lo, lo + (hi - lo) / 2) &&
		sdp_isolate(step, bad, fault, arg, lo + (hi - lo) / 2, hi);
}

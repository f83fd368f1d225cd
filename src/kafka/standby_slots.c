/*
 * standby_slots.c
 *		Whether the standbys that could be promoted have flushed WAL up to a
 *		position: those of the physical replication slots that
 *		sdp.standby_slots names or, when it is empty, on PostgreSQL 17 and
 *		later, those of the server's own synchronized_standby_slots.
 *
 * A sink flow's relay (relay.c) produces a batch's rows to Kafka only once
 * the batch's commit is flushed on these standbys.  With asynchronous
 * replication a primary that dies takes with it the commits its standbys
 * had not received, rows and offsets together: harmless for a table (the
 * promoted standby consumes that input again), but a message the relay had
 * produced from such a batch stays in Kafka, and the promoted standby
 * produces the input a second time under a new sdp-seq, which its
 * read-back cannot recognise.  Logical decoding has the same problem, and
 * PostgreSQL 17 holds it back for the standbys of synchronized_standby_slots
 * (StandbySlotsHaveCaughtup); this is the same check, for the relay.
 *
 * A physical slot's restart_lsn is where its standby has flushed WAL to:
 * the walsender serving the slot sets it from each of the standby's replies
 * (PhysicalConfirmReceivedLocation, walsender.c), and the standby's WAL
 * receiver replies after each flush.  A promoted standby replays all the
 * WAL it has flushed before it ends recovery, so a commit record that
 * ends at or before that position is on it.  A slot that no standby has streamed from yet has no
 * position (or, created with its WAL reserved, the redo position of the
 * checkpoint before it, which a standby made from a later base backup has).
 *
 * A named slot that does not exist, is logical, or has been invalidated
 * will not advance: the check fails with the reason, which the flow shows,
 * and says so in a WARNING once (per process and reason).  A slot behind,
 * or without a position yet, is waited for without a WARNING.
 *
 * Locking: ReplicationSlotControlLock in shared mode while the named slots
 * are looked up, so that none is created or dropped meanwhile, and each
 * slot's spinlock around plain loads of its fields, as the server's own
 * readers of other processes' slots take them.  Nothing else happens under
 * either lock: the verdict is decided there, the reasons are written and
 * the WARNING raised after both are released.
 */
#include "sdp.h"
#include "compat.h"
#include "kafka/standby_slots.h"

#include "miscadmin.h"
#include "replication/slot.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/varlena.h"

/* What a named slot says of a position. */
typedef enum SlotVerdict
{
	SLOT_FLUSHED,				/* its standby has flushed WAL up to the position */
	SLOT_BEHIND,				/* not yet */
	SLOT_UNSTREAMED,			/* no standby has streamed from it yet */
	SLOT_MISSING,				/* there is no slot of that name */
	SLOT_LOGICAL,				/* it is a logical slot, no standby's */
	SLOT_INVALIDATED			/* the server invalidated it */
} SlotVerdict;

#define SLOT_BROKEN(v)	((v) >= SLOT_MISSING)

/* the reason of the last WARNING (once per reason), empty after a check that passed */
static char warned[SDP_ERROR_LEN];

/*
 * GUC check hook of sdp.standby_slots: a comma-separated list of
 * replication slot names ([a-z0-9_]; SplitIdentifierString folds unquoted
 * names to lower case and truncates long ones to NAMEDATALEN - 1), as
 * PostgreSQL checks synchronized_standby_slots.  Whether the slots exist is
 * not checked here (they may be created later): the relay says so.
 */
bool
standby_slots_check_guc(char **newval, void **extra, GucSource source)
{
	char	   *raw = pstrdup(*newval);
	List	   *names;
	ListCell   *lc;

	if (!SplitIdentifierString(raw, ',', &names))
	{
		GUC_check_errdetail("List syntax is invalid.");
		GUC_check_errhint("List the physical replication slots of the standbys separated by commas, e.g. 'node2, node3'.");
		return false;
	}
	foreach(lc, names)
	{
		const char *name = lfirst(lc);

		for (const char *cp = name; *cp; cp++)
		{
			if (!((*cp >= 'a' && *cp <= 'z') || (*cp >= '0' && *cp <= '9') || *cp == '_'))
			{
				GUC_check_errdetail("Replication slot name \"%s\" contains invalid character.", name);
				GUC_check_errhint("Replication slot names may only contain lower case letters, numbers, and the underscore character.");
				return false;
			}
		}
	}
	list_free(names);
	pfree(raw);
	return true;
}

/*
 * The slot names in force, and in *param the parameter that names them:
 * sdp.standby_slots, or when it is empty the server's
 * synchronized_standby_slots (a parameter from PostgreSQL 17 on: before,
 * GetConfigOption finds none and the list is empty).  Parsed again only
 * when the setting changed (a reload), into TopMemoryContext.
 */
static List *
standby_slots_list(const char **param)
{
	static char *parsed = NULL; /* the setting parsed */
	static char *buffer = NULL; /* its copy, that the names point into */
	static List *names = NIL;
	const char *setting = sdp_standby_slots;

	*param = "sdp.standby_slots";
	if (setting == NULL || setting[0] == '\0')
	{
		setting = GetConfigOption("synchronized_standby_slots", true, false);
		*param = "synchronized_standby_slots";
	}
	if (setting == NULL)
		setting = "";
	if (parsed == NULL || strcmp(parsed, setting) != 0)
	{
		MemoryContext oldcxt = MemoryContextSwitchTo(TopMemoryContext);
		char	   *newbuffer = pstrdup(setting);
		List	   *newnames = NIL;
		bool		ok;

		/* the list in TopMemoryContext too: lappend allocates in CurrentMemoryContext */
		ok = SplitIdentifierString(newbuffer, ',', &newnames);
		MemoryContextSwitchTo(oldcxt);
		/* both parameters' check hooks refuse a list that does not parse */
		if (!ok)
			elog(ERROR, "could not parse parameter \"%s\": \"%s\"", *param, setting);
		if (parsed != NULL)
		{
			pfree(parsed);
			pfree(buffer);
			list_free(names);
		}
		parsed = MemoryContextStrdup(TopMemoryContext, setting);
		buffer = newbuffer;
		names = newnames;
	}
	return names;
}

/*
 * Whether the standby of every named slot has flushed WAL up to lsn.  If
 * not, *reason says which slot holds it back and why (palloc'd), and
 * *broken whether that slot will not advance by itself: it does not exist,
 * is logical, or has been invalidated (then also a WARNING, once).
 */
bool
standby_slots_flushed(XLogRecPtr lsn, char **reason, bool *broken)
{
	const char *param;
	List	   *names = standby_slots_list(&param);
	int			n = list_length(names);
	SlotVerdict *verdicts;
	XLogRecPtr *positions;
	bool	   *streaming;
	int			worst = -1;
	const char *name;
	char	   *hint = NULL;

	*reason = NULL;
	*broken = false;
	if (n == 0)
		return true;
	verdicts = palloc(sizeof(SlotVerdict) * n);
	positions = palloc(sizeof(XLogRecPtr) * n);
	streaming = palloc(sizeof(bool) * n);

	/* decide under the locks */
	LWLockAcquire(ReplicationSlotControlLock, LW_SHARED);
	for (int i = 0; i < n; i++)
	{
		ReplicationSlot *slot = SearchNamedReplicationSlot(list_nth(names, i), false);
		bool		logical;
		bool		invalidated;

		positions[i] = InvalidXLogRecPtr;
		streaming[i] = false;
		if (slot == NULL)
		{
			verdicts[i] = SLOT_MISSING;
			continue;
		}
		SpinLockAcquire(&slot->mutex);
		logical = SlotIsLogical(slot);
		invalidated = sdp_slot_invalidated(slot);
		positions[i] = slot->data.restart_lsn;
		streaming[i] = slot->active_pid != 0;
		SpinLockRelease(&slot->mutex);

		if (logical)
			verdicts[i] = SLOT_LOGICAL;
		else if (invalidated)
			verdicts[i] = SLOT_INVALIDATED;
		else if (XLogRecPtrIsInvalid(positions[i]))
			verdicts[i] = SLOT_UNSTREAMED;
		else if (positions[i] < lsn)
			verdicts[i] = SLOT_BEHIND;
		else
			verdicts[i] = SLOT_FLUSHED;
	}
	LWLockRelease(ReplicationSlotControlLock);

	/* the slot to name: the first that will not advance, else the first behind */
	for (int i = 0; i < n; i++)
	{
		if (verdicts[i] != SLOT_FLUSHED &&
			(worst < 0 || (SLOT_BROKEN(verdicts[i]) && !SLOT_BROKEN(verdicts[worst]))))
			worst = i;
	}
	if (worst < 0)
	{
		warned[0] = '\0';
		pfree(verdicts);
		pfree(positions);
		pfree(streaming);
		return true;
	}

	name = list_nth(names, worst);
	switch (verdicts[worst])
	{
		case SLOT_BEHIND:
			*reason = psprintf("the standby of replication slot \"%s\" (%s) has flushed WAL up to %X/%X, not yet up to %X/%X%s",
							   name, param, LSN_FORMAT_ARGS(positions[worst]), LSN_FORMAT_ARGS(lsn),
							   streaming[worst] ? "" : ", and no standby is streaming from the slot");
			break;
		case SLOT_UNSTREAMED:
			*reason = psprintf("no standby has streamed from replication slot \"%s\" (%s) yet",
							   name, param);
			break;
		case SLOT_MISSING:
			*reason = psprintf("replication slot \"%s\" named in %s does not exist", name, param);
			hint = psprintf("Create the physical replication slot \"%s\" of the standby, or remove it from %s and reload the configuration.",
							name, param);
			break;
		case SLOT_LOGICAL:
			*reason = psprintf("replication slot \"%s\" named in %s is a logical slot, not a standby's", name, param);
			hint = psprintf("Name only the physical replication slots of the standbys in %s.", param);
			break;
		case SLOT_INVALIDATED:
			*reason = psprintf("physical replication slot \"%s\" named in %s has been invalidated", name, param);
			hint = psprintf("Rebuild its standby on a new slot, or remove \"%s\" from %s and reload the configuration.",
							name, param);
			break;
		case SLOT_FLUSHED:
			Assert(false);
			break;
	}
	*broken = SLOT_BROKEN(verdicts[worst]);
	if (*broken && strcmp(warned, *reason) != 0)
	{
		ereport(WARNING,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("%s", *reason),
				 errdetail("A sink flow produces nothing to Kafka until the standby of every slot named there has flushed its batches."),
				 errhint("%s", hint)));
		strlcpy(warned, *reason, sizeof(warned));
	}
	pfree(verdicts);
	pfree(positions);
	pfree(streaming);
	return false;
}

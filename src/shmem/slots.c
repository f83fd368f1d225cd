/*
 * slots.c
 *		The flow slots in shared memory.
 *
 * One SdpShared struct holds a slot per possible flow worker (sdp.max_flows):
 * a flow with the option workers = N takes N slots.  The launcher allocates
 * a slot when it starts a flow's worker and frees it when the flow is
 * stopped or dropped (or its number of workers changed); the worker publishes its state,
 * counters, partition offsets and progress reports in it; SQL functions read
 * it for sdp.flow_status and sdp_flow_progress().
 *
 * Locking protocol (the fields are grouped by it in slots.h):
 *	- SdpShared->lock (LWLock) guards slot allocation: a slot's in_use,
 *	  name, worker_no, nworkers and decl_hash.  The launcher, their only
 *	  writer, takes it exclusively to allocate or free, and for nothing
 *	  else (it registers, terminates and logs after releasing it); anyone
 *	  looking a slot up by name takes it shared.
 *	- Each slot's spinlock 'mutex' guards its control part (SdpSlotControl:
 *	  state, pid, latch, stop request, generations, the last error), written
 *	  by the launcher, the worker and (the generations) user backends, with
 *	  nothing but loads and stores under it.  The state moves only through
 *	  sdp_slot_transition_locked and its table of legal moves.
 *	- A slot's stats (SdpSlotStats: counters, progress, partitions, broker,
 *	  state store) have one writer, the slot's worker (the launcher zeroes
 *	  them at allocation, before any worker runs), which writes them between
 *	  SDP_SLOT_STATS_BEGIN_WRITE and _END_WRITE; readers copy them with
 *	  sdp_slot_read_stats, again while a write was under way (PostgreSQL's
 *	  st_changecount protocol).  Neither waits for the other.
 *	- launcher_pid and launcher_latch are written by the launcher under the
 *	  LWLock (exclusive) and read under it (shared).
 *	- The owners of flows and sources (owners, owner_objects, nowners,
 *	  owners_published, owners_overflow) likewise: the launcher writes them at
 *	  each pass, DROP ROLE in another database reads them (roles.c).
 */
#include "shmem/slots.h"

#include "access/xact.h"
#include "nodes/pg_list.h"
#include "utils/memutils.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/shmem.h"

SdpShared  *SdpShmem = NULL;

static bool wake_at_commit = false;
static bool xact_callback_registered = false;

/*
 * Flows whose operator configuration (or skip requests) the current
 * transaction changed, to be told so when it commits.  The list and its entries live in
 * TopTransactionContext: the caller's context may be an SPI procedure
 * context or statement memory, both gone long before the commit callback
 * runs.  Each entry remembers the subtransaction that made the change, so
 * that rolling back a savepoint (or a PL/pgSQL exception block) forgets it.
 */
typedef struct ChangedFlow
{
	char		name[NAMEDATALEN];
	bool		skips;			/* its skip requests, not its configuration */
	int			nestlevel;		/* subtransaction nesting level of the change */
} ChangedFlow;

static List *changed_flows = NIL;

static void sdp_register_xact_callback(void);

static Size
sdp_shmem_size(void)
{
	return add_size(offsetof(SdpShared, slots),
					mul_size(sdp_max_flows, sizeof(SdpFlowSlot)));
}

/* Called from shmem_request_hook: reserve our memory and LWLock. */
void
sdp_shmem_request(void)
{
	RequestAddinShmemSpace(sdp_shmem_size());
	RequestNamedLWLockTranche("sdp_ext", 1);
}

/* Called from shmem_startup_hook: create or attach to the slots. */
void
sdp_shmem_startup(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	SdpShmem = ShmemInitStruct("sdp_ext flows", sdp_shmem_size(), &found);
	if (!found)
	{
		memset(SdpShmem, 0, sdp_shmem_size());
		SdpShmem->lock = &(GetNamedLWLockTranche("sdp_ext"))->lock;
		SdpShmem->max_flows = sdp_max_flows;
		SdpShmem->state_tranche_id = LWLockNewTrancheId();
		for (int i = 0; i < sdp_max_flows; i++)
			SpinLockInit(&SdpShmem->slots[i].mutex);
	}
	LWLockRelease(AddinShmemInitLock);
}

/* SQL-callable functions call this first: it explains a missing preload. */
void
sdp_require_shmem(void)
{
	if (SdpShmem == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("sdp_ext is not loaded"),
				 errhint("Add sdp_ext to shared_preload_libraries in postgresql.conf and restart the server.")));
}

const char *
sdp_flow_state_name(SdpFlowState state)
{
	switch (state)
	{
		case SDP_FLOW_STOPPED:
			return "stopped";
		case SDP_FLOW_STARTING:
			return "starting";
		case SDP_FLOW_RUNNING:
			return "running";
		case SDP_FLOW_STOPPING:
			return "stopping";
		case SDP_FLOW_RESTARTING:
			return "restarting";
		case SDP_FLOW_FAILED:
			return "failed";
		case SDP_FLOW_RETRYING:
			return "retrying";
	}
	return "unknown";
}

/*
 * The next slot of the named flow after slot number 'after' (-1: the
 * first), or -1 when there is none.  A flow has one slot per worker:
 *
 *	for (s = sdp_slot_next(name, -1); s >= 0; s = sdp_slot_next(name, s))
 *
 * Caller holds SdpShmem->lock.
 */
int
sdp_slot_next(const char *name, int after)
{
	Assert(LWLockHeldByMe(SdpShmem->lock));
	for (int i = after + 1; i < SdpShmem->max_flows; i++)
	{
		if (SdpShmem->slots[i].in_use &&
			strcmp(SdpShmem->slots[i].name, name) == 0)
			return i;
	}
	return -1;
}

/* The first slot of the named flow, or -1.  Caller holds SdpShmem->lock. */
int
sdp_slot_find(const char *name)
{
	return sdp_slot_next(name, -1);
}

/* How many slots are free.  Caller holds SdpShmem->lock. */
int
sdp_slots_free(void)
{
	int			n = 0;

	Assert(LWLockHeldByMe(SdpShmem->lock));
	for (int i = 0; i < SdpShmem->max_flows; i++)
		n += !SdpShmem->slots[i].in_use;
	return n;
}

/*
 * Take a free slot for worker worker_no of the named flow's nworkers and
 * reset it, or return -1 when all sdp.max_flows slots are in use.  Caller
 * holds SdpShmem->lock exclusively.
 */
int
sdp_slot_allocate(const char *name, int worker_no, int nworkers)
{
	Assert(LWLockHeldByMeInMode(SdpShmem->lock, LW_EXCLUSIVE));
	for (int i = 0; i < SdpShmem->max_flows; i++)
	{
		SdpFlowSlot *slot = &SdpShmem->slots[i];
		uint64		generation;

		if (slot->in_use)
			continue;

		/* no worker runs in a free slot: the launcher writes its stats (nothing else does) */
		SDP_SLOT_STATS_BEGIN_WRITE(slot);
		memset(&slot->stats, 0, sizeof(SdpSlotStats));
		slot->stats.broker_ok = true;
		SDP_SLOT_STATS_END_WRITE(slot);

		/*
		 * The generation goes on across allocations: a worker registered for
		 * the slot's last use that starts late must not match its next
		 * (worker_attach).
		 */
		SpinLockAcquire(&slot->mutex);
		generation = slot->ctl.generation;
		memset(&slot->ctl, 0, sizeof(SdpSlotControl));
		slot->ctl.generation = generation;
		/* state is STOPPED now: a new slot */
		(void) sdp_slot_transition_locked(slot, SDP_FLOW_STARTING);
		SpinLockRelease(&slot->mutex);

		slot->in_use = true;
		strlcpy(slot->name, name, NAMEDATALEN);
		slot->worker_no = worker_no;
		slot->nworkers = nworkers;
		return i;
	}
	return -1;
}

/* Caller holds SdpShmem->lock exclusively. */
void
sdp_slot_free(int slotno)
{
	SdpFlowSlot *slot = &SdpShmem->slots[slotno];

	Assert(LWLockHeldByMeInMode(SdpShmem->lock, LW_EXCLUSIVE));
	slot->in_use = false;
	slot->name[0] = '\0';
}

/*
 * The legal moves of a slot's state (the table beside SdpFlowState in
 * slots.h): SLOT_MOVE where the move is legal, SLOT_KEEP where the worker's
 * move comes after the launcher has moved the slot on and is refused
 * without complaint, 0 where it cannot happen.  STOPPED is a new slot's
 * state until the launcher starts its worker.
 */
#define SLOT_MOVE	1
#define SLOT_KEEP	2
static const uint8 slot_moves[SDP_FLOW_NSTATES][SDP_FLOW_NSTATES] = {
	/* to:					 STOPPED STARTING RUNNING STOPPING RESTARTING FAILED RETRYING */
	[SDP_FLOW_STOPPED] = {0, SLOT_MOVE, 0, 0, 0, 0, 0},
	[SDP_FLOW_STARTING] = {0, SLOT_MOVE, SLOT_MOVE, SLOT_MOVE, SLOT_MOVE, SLOT_MOVE, SLOT_MOVE},
	[SDP_FLOW_RUNNING] = {0, 0, SLOT_MOVE, SLOT_MOVE, SLOT_MOVE, SLOT_MOVE, SLOT_MOVE},
	[SDP_FLOW_STOPPING] = {0, SLOT_KEEP, SLOT_KEEP, SLOT_MOVE, SLOT_MOVE, SLOT_KEEP, SLOT_KEEP},
	[SDP_FLOW_RESTARTING] = {0, SLOT_MOVE, SLOT_KEEP, 0, SLOT_MOVE, SLOT_KEEP, SLOT_KEEP},
	[SDP_FLOW_FAILED] = {0, SLOT_KEEP, SLOT_KEEP, SLOT_MOVE, SLOT_MOVE, SLOT_KEEP, SLOT_KEEP},
	[SDP_FLOW_RETRYING] = {0, SLOT_MOVE, SLOT_MOVE, SLOT_MOVE, SLOT_MOVE, SLOT_MOVE, SLOT_MOVE},
};

/*
 * Move the slot's state to 'to', if the table allows it; false when the
 * move is refused (the launcher has moved the slot on).  The caller holds
 * the slot's spinlock: a table lookup and a store, nothing else.  A move
 * the table has no entry for is a bug (an assertion failure; refused in a
 * production build).
 */
bool
sdp_slot_transition_locked(SdpFlowSlot *slot, SdpFlowState to)
{
	uint8		move = slot_moves[slot->ctl.state][to];

	Assert(move != 0);
	if (move != SLOT_MOVE)
		return false;
	slot->ctl.state = to;
	return true;
}

/* sdp_slot_transition_locked, taking the slot's spinlock. */
bool
sdp_slot_transition(SdpFlowSlot *slot, SdpFlowState to)
{
	bool		moved;

	SpinLockAcquire(&slot->mutex);
	moved = sdp_slot_transition_locked(slot, to);
	SpinLockRelease(&slot->mutex);
	return moved;
}

/*
 * A consistent copy of a slot, to read without holding any lock: its
 * control part under the spinlock, its stats by the change count.  Caller
 * holds SdpShmem->lock (shared), so that the slot stays the flow's.
 */
void
sdp_slot_copy(int slotno, SdpFlowSlot *copy)
{
	SdpFlowSlot *slot = &SdpShmem->slots[slotno];

	copy->in_use = slot->in_use;
	memcpy(copy->name, slot->name, NAMEDATALEN);
	copy->worker_no = slot->worker_no;
	copy->nworkers = slot->nworkers;
	copy->decl_hash = slot->decl_hash;
	SpinLockAcquire(&slot->mutex);
	copy->ctl = slot->ctl;
	SpinLockRelease(&slot->mutex);
	sdp_slot_read_stats(slot, 0, sizeof(SdpSlotStats), &copy->stats);
	copy->changecount = 0;
}

/* Where a slot's worker keeps its state store (0: none), read consistently. */
void
sdp_slot_read_state_store(SdpFlowSlot *slot, uint32 *area, uint64 *table)
{
	volatile uint32 *count = &slot->changecount;

	for (;;)
	{
		uint32		before;

		before = *count;
		pg_read_barrier();
		*area = slot->stats.state_area;
		*table = slot->stats.state_table;
		pg_read_barrier();
		if (before == *count && (before & 1) == 0)
			break;
	}
}

/*
 * Copy len bytes at offset in a slot's stats to dst, consistently: again
 * while the worker was writing them (the count was odd, or moved).  A
 * write is a few stores, so a retry is rare and short.
 */
void
sdp_slot_read_stats(SdpFlowSlot *slot, size_t offset, size_t len, void *dst)
{
	volatile uint32 *count = &slot->changecount;

	Assert(offset + len <= sizeof(SdpSlotStats));
	for (;;)
	{
		uint32		before;
		uint32		after;

		before = *count;
		pg_read_barrier();
		memcpy(dst, (char *) &slot->stats + offset, len);
		pg_read_barrier();
		after = *count;
		if (before == after && (before & 1) == 0)
			break;
		CHECK_FOR_INTERRUPTS();
	}
}

/* Make the launcher reconcile now rather than at its next naptime. */
void
sdp_wake_launcher(void)
{
	Latch	   *latch;

	if (SdpShmem == NULL)
		return;
	LWLockAcquire(SdpShmem->lock, LW_SHARED);
	latch = SdpShmem->launcher_latch;
	if (latch)
		SetLatch(latch);
	LWLockRelease(SdpShmem->lock);
}

/* Tell a running flow's workers that its operator configuration (or its skip requests) changed, and wake them. */
static void
bump_flow_config(const char *name, bool skips)
{
	if (SdpShmem == NULL)
		return;
	LWLockAcquire(SdpShmem->lock, LW_SHARED);
	for (int s = sdp_slot_next(name, -1); s >= 0; s = sdp_slot_next(name, s))
	{
		SdpFlowSlot *slot = &SdpShmem->slots[s];
		Latch	   *latch;

		SpinLockAcquire(&slot->mutex);
		if (skips)
			slot->ctl.skip_generation++;
		else
			slot->ctl.config_generation++;
		latch = slot->ctl.latch;
		SpinLockRelease(&slot->mutex);
		if (latch)
			SetLatch(latch);
	}
	LWLockRelease(SdpShmem->lock);
}

static void
sdp_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			if (changed_flows != NIL)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot prepare a transaction that changed the configuration of a flow")));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (wake_at_commit)
				sdp_wake_launcher();
			wake_at_commit = false;
			if (changed_flows != NIL)
			{
				ListCell   *lc;

				/* still valid: TopTransactionContext is reset after the callbacks */
				foreach(lc, changed_flows)
					bump_flow_config(((ChangedFlow *) lfirst(lc))->name,
									 ((ChangedFlow *) lfirst(lc))->skips);
			}
			changed_flows = NIL;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			/* the list goes with TopTransactionContext */
			wake_at_commit = false;
			changed_flows = NIL;
			break;
		default:
			break;
	}
}

/*
 * A subtransaction that commits hands its changes to its parent; one that
 * aborts takes them back.
 */
static void
sdp_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					 SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();
	ListCell   *lc;

	switch (event)
	{
		case SUBXACT_EVENT_COMMIT_SUB:
			foreach(lc, changed_flows)
			{
				ChangedFlow *c = lfirst(lc);

				if (c->nestlevel >= level)
					c->nestlevel = level - 1;
			}
			break;
		case SUBXACT_EVENT_ABORT_SUB:
			foreach(lc, changed_flows)
			{
				ChangedFlow *c = lfirst(lc);

				if (c->nestlevel >= level)
				{
					changed_flows = foreach_delete_current(changed_flows, lc);
					pfree(c);
				}
			}
			break;
		default:
			break;
	}
}

/*
 * Wake the launcher once the current transaction commits, so that it sees
 * the catalog change that the caller just made.
 */
static void
sdp_register_xact_callback(void)
{
	if (!xact_callback_registered)
	{
		RegisterXactCallback(sdp_xact_callback, NULL);
		RegisterSubXactCallback(sdp_subxact_callback, NULL);
		xact_callback_registered = true;
	}
}

void
sdp_wake_launcher_at_commit(void)
{
	sdp_register_xact_callback();
	wake_at_commit = true;
}

static void
note_changed_flow(const char *flow, bool skips)
{
	MemoryContext oldcxt;
	ChangedFlow *c;
	int			level = GetCurrentTransactionNestLevel();
	ListCell   *lc;

	sdp_register_xact_callback();
	foreach(lc, changed_flows)
	{
		c = lfirst(lc);
		if (strcmp(c->name, flow) == 0 && c->skips == skips && c->nestlevel == level)
			return;				/* already noted at this level */
	}
	oldcxt = MemoryContextSwitchTo(TopTransactionContext);
	c = palloc0(sizeof(ChangedFlow));
	strlcpy(c->name, flow, NAMEDATALEN);
	c->skips = skips;
	c->nestlevel = level;
	changed_flows = lappend(changed_flows, c);
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Once the current transaction commits, the flow's worker rereads its
 * operator configuration; nothing happens if the change is rolled back
 * (with its transaction or with the subtransaction that made it).
 */
void
sdp_flow_config_changed(const char *flow)
{
	note_changed_flow(flow, false);
}

/*
 * Once the current transaction commits, the flow's worker rereads its skip
 * requests (sdp.skipped_messages), at once, even while it waits out a retry.
 */
void
sdp_flow_skips_changed(const char *flow)
{
	note_changed_flow(flow, true);
}

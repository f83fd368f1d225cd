/*
 * slots.h
 *		The flow slots in shared memory: one per running flow worker, where
 *		the launcher and the worker publish the flow's state and the worker
 *		its counters, offsets and progress, for sdp.flow_status (slots.c).
 */
#ifndef SDP_SLOTS_H
#define SDP_SLOTS_H

#include "sdp.h"

#include "shmem/metrics.h"

#include "miscadmin.h"

/*
 * The life of a flow, as shown in sdp.flow_status.  STOPPED and FAILED are
 * also persisted in sdp.flows (enabled = false / failed_at set), so they
 * survive a server restart; the others exist only while a worker slot does.
 *
 * A slot's state moves only through sdp_slot_transition (slots.c), by this
 * table (L: the launcher moves it, W: the worker; "-": never):
 *
 *	from \ to	STARTING RUNNING RETRYING FAILED STOPPING RESTARTING
 *	(new slot)	   L		-		-		-		-		-
 *	STARTING	   L		W		W		W		L		L
 *	RUNNING		   -		W		W		W		L		L
 *	RETRYING	   W		W		W		W		L		L
 *	FAILED		   -		-		-		-		L		L
 *	STOPPING	   -		-		-		-		L		L
 *	RESTARTING	   L		-		-		-		-		L
 *
 *	 (new) --L--> STARTING --W--> RUNNING <--W--> RETRYING --W--> FAILED
 *					^  |											|
 *					|  +--L--> STOPPING (asked to stop) <--L--------+
 *					|  |			|
 *					|  +--L--> RESTARTING (exited, or could not start)
 *					+-----L-------------+
 *
 * The launcher owns STOPPING and RESTARTING: once it has moved a slot
 * there, a worker's own move (W) is refused, silently, so a worker never
 * shows "running" while it is being stopped.  RETRYING goes back to
 * STARTING when the brokers answer a worker that was still starting.  A
 * slot is freed (no state) once its worker has gone and the flow is not
 * wanted; STOPPED is what sdp.flow_status shows for a flow without a slot.
 */
typedef enum SdpFlowState
{
	SDP_FLOW_STOPPED = 0,		/* not wanted (enabled = false) */
	SDP_FLOW_STARTING,			/* worker registered, not yet consuming */
	SDP_FLOW_RUNNING,			/* consuming and committing */
	SDP_FLOW_STOPPING,			/* asked to stop, worker still alive */
	SDP_FLOW_RESTARTING,		/* worker exited unexpectedly, waiting out backoff */
	SDP_FLOW_FAILED,			/* stopped by an error; needs sdp_start_flow */
	SDP_FLOW_RETRYING			/* running, but its batch failed for a reason not its messages': waiting to try again */
} SdpFlowState;

#define SDP_FLOW_NSTATES	(SDP_FLOW_RETRYING + 1)

extern const char *sdp_flow_state_name(SdpFlowState state);

typedef struct SdpPartitionStat
{
	int32		partition;
	int64		committed;		/* next offset to read, as committed in PG */
	int64		high_watermark; /* as last seen from the broker, -1 unknown */
} SdpPartitionStat;

/*
 * What the launcher and a worker share about the worker's life, and what
 * user backends tell it: guarded by the slot's spinlock (mutex), under
 * which nothing but loads and stores happen.  Readers copy it out whole.
 */
typedef struct SdpSlotControl
{
	SdpFlowState state;			/* moved only by sdp_slot_transition */
	pid_t		pid;			/* worker pid, 0 when none */
	Latch	   *latch;			/* the worker's, to wake it */
	int64		flow_id;		/* sdp.flows.id of the flow the launcher started */
	Oid			owner;			/* the role the launcher started its worker as: who may read last_error */
	bool		stop_requested; /* the launcher asks the worker to exit (SetLatch on latch) */
	uint64		generation;		/* bumped on each worker start, kept when the slot is taken again */
	TimestampTz registered_at;
	TimestampTz started_at;
	TimestampTz exited_at;
	TimestampTz next_start_at;	/* RESTARTING: when the launcher retries */
	int			restarts;		/* consecutive unexpected exits */
	bool		exit_expected;	/* the worker stopped on request or failed */
	uint64		config_generation;	/* bumped when the flow's operator configuration changes */
	uint64		skip_generation;	/* bumped when a skip request for the flow commits (sdp_skip_message) */
	int			topic_partitions;	/* the worker's topic's partitions as it last listed them; 0: not yet */

	/* why the worker is not running as it should (the launcher's reason or the worker's) */
	char		last_error[SDP_ERROR_LEN];
	TimestampTz last_error_at;
} SdpSlotControl;

/*
 * What a worker publishes about its work: written by the slot's worker
 * alone, between SDP_SLOT_STATS_BEGIN_WRITE and SDP_SLOT_STATS_END_WRITE,
 * and read by others with sdp_slot_read_stats, which copies it again while
 * a write was under way (the change count protocol of PostgreSQL's backend
 * status, st_changecount): a reader never holds up the worker, and the
 * worker never waits for a reader.  The launcher zeroes it when it
 * allocates the slot, before the slot's first worker runs.
 */
typedef struct SdpSlotStats
{
	uint64		messages_read;
	uint64		rows_written;
	uint64		rows_filtered;
	uint64		rows_dead_lettered;
	uint64		rows_skipped;
	uint64		rows_late;
	uint64		batches;
	TimestampTz last_commit_at;
	TimestampTz alive_at;		/* the worker last passed its loop or a wait (sdp_worker_alive) */

	bool		broker_ok;
	char		broker_error[SDP_ERROR_LEN];
	TimestampTz broker_error_at;

	SdpProgress progress;

	/* stateful flows: where their state store is, and how it is doing */
	uint32		state_area;		/* dsa_handle, 0 when none */
	uint64		state_table;	/* dshash_table_handle */
	uint32		state_options;	/* sdp_operator_options_hash of the options the operator runs with */
	uint64		state_bytes;
	uint64		timers_fired;
	TimestampTz last_checkpoint_at;
	TimestampTz watermark;		/* event-time operators; 0 when none */

	int			npartitions;
	SdpPartitionStat partitions[SDP_MAX_PARTITIONS];
} SdpSlotStats;

/*
 * One flow worker's slot in shared memory: a flow with the option workers
 * = N has N slots of the same name, worker_no 0 .. N-1, each worker
 * consuming its own partitions.
 *
 * Locking:
 *	- SdpShared->lock (exclusive) guards allocating and freeing slots, i.e.
 *	  in_use, name, worker_no, nworkers and decl_hash: the launcher takes it
 *	  exclusively to allocate or free (and for nothing else: it registers
 *	  and terminates workers after releasing it); readers that look a slot
 *	  up by name hold it shared.  The launcher, their only writer, reads
 *	  them without it.
 *	- mutex, a spinlock, guards ctl (SdpSlotControl), for loads and stores.
 *	- stats (SdpSlotStats) has one writer, the worker, and the change count.
 */
typedef struct SdpFlowSlot
{
	/* guarded by SdpShared->lock */
	bool		in_use;
	char		name[NAMEDATALEN];
	int			worker_no;		/* which of the flow's workers: 0 .. nworkers - 1 */
	int			nworkers;		/* the flow's workers when the slot was allocated */
	int32		decl_hash;		/* and a hash of its declaration (schema, transform, options) */

	slock_t		mutex;
	SdpSlotControl ctl;			/* guarded by mutex */

	uint32		changecount;	/* odd while the worker writes stats */
	SdpSlotStats stats;
} SdpFlowSlot;

/*
 * The worker's writes of its slot's stats.  The critical section makes any
 * error inside a PANIC, so that a write never ends half done with an odd
 * count (there is nothing inside but stores).
 */
#define SDP_SLOT_STATS_BEGIN_WRITE(slot) \
	do { \
		START_CRIT_SECTION(); \
		(slot)->changecount++; \
		pg_write_barrier(); \
	} while (0)

#define SDP_SLOT_STATS_END_WRITE(slot) \
	do { \
		pg_write_barrier(); \
		(slot)->changecount++; \
		Assert(((slot)->changecount & 1) == 0); \
		END_CRIT_SECTION(); \
	} while (0)

typedef struct SdpShared
{
	LWLock	   *lock;
	int			state_tranche_id;	/* LWLock tranche of the flows' state stores */
	pid_t		launcher_pid;
	Latch	   *launcher_latch; /* the launcher's PGPROC latch, or NULL */
	int			max_flows;
	/* guarded by lock: enabled flows the launcher found no free slot for (the first SDP_MAX_WAITING) */
	int			nwaiting;
	char		waiting[SDP_MAX_WAITING][NAMEDATALEN];
	int			waiting_workers[SDP_MAX_WAITING];	/* the slots each needs */
	Oid			waiting_owner[SDP_MAX_WAITING]; /* its owner */
	int			waiting_quota[SDP_MAX_WAITING]; /* > 0: it waits for its owner's sdp.max_workers_per_role, this */
	/*
	 * guarded by lock: the roles owning flows or sources in sdp.database and
	 * how many, as the launcher last read them; DROP ROLE run in another
	 * database reads them (roles.c).  owners_overflow: more roles than fit.
	 */
	bool		owners_published;
	bool		owners_overflow;
	int			nowners;
	Oid			owners[SDP_MAX_OWNERS];
	int32		owner_objects[SDP_MAX_OWNERS];
	SdpFlowSlot slots[FLEXIBLE_ARRAY_MEMBER];
} SdpShared;

/* slots.c */
extern SdpShared *SdpShmem;
extern void sdp_shmem_request(void);
extern void sdp_shmem_startup(void);
extern void sdp_require_shmem(void);
extern int	sdp_slot_find(const char *name);
extern int	sdp_slot_next(const char *name, int after);
extern int	sdp_slot_allocate(const char *name, int worker_no, int nworkers);
extern int	sdp_slots_free(void);
extern void sdp_slot_free(int slotno);
extern void sdp_slot_copy(int slotno, SdpFlowSlot *copy);
extern void sdp_slot_read_stats(SdpFlowSlot *slot, size_t offset, size_t len, void *dst);
extern void sdp_slot_read_state_store(SdpFlowSlot *slot, uint32 *area, uint64 *table);
extern bool sdp_slot_transition(SdpFlowSlot *slot, SdpFlowState to);
extern bool sdp_slot_transition_locked(SdpFlowSlot *slot, SdpFlowState to);
extern void sdp_wake_launcher(void);
extern void sdp_wake_launcher_at_commit(void);
extern void sdp_flow_config_changed(const char *flow);
extern void sdp_flow_skips_changed(const char *flow);

#endif							/* SDP_SLOTS_H */

/*
 * crash_guard.c
 *		A flow whose worker dies by a signal twice at the same offsets is
 *		failed, not restarted in a loop.
 *
 * A worker that dies by a signal (a segmentation fault in a library that
 * read a message or a registry's answer, a failed assertion) takes the
 * whole server through crash recovery, and the worker started again reads
 * the same messages: without a bound, the server would crash again every
 * few seconds.  PostgreSQL's own background workers are not restarted in a
 * loop either.
 *
 * The worker installs, at its start, handlers for the signals of a fault
 * (SIGSEGV, SIGBUS, SIGILL, SIGABRT), on an alternate stack so that
 * a stack overflow is caught too.  The handler writes one record into the
 * file sdp_ext/crash.<flow id>.<worker number> of the data directory (with
 * open, write and close only: async-signal-safe) and raises the signal
 * again, so the process dies as it would have, and the postmaster reports
 * it.  The record holds the postmaster's start time (a crash loop happens
 * within one postmaster's life: crash recovery keeps the postmaster), the
 * signal, the worker's committed offsets when it died (the messages it was
 * reading start there), and how many times in a row the worker has died at
 * those offsets: the previous record's count plus one when the offsets are
 * the same and it died within CRASH_LOOP_WINDOW_S of this death, else one
 * (an idle flow's worker that dies twice, days apart, is not in a loop).
 *
 * At its next start the worker reads the record (sdp_crash_guard_check):
 * at a count of two, the flow fails with the signal and the offsets in its
 * reason, and the file goes (sdp_start_flow tries again, from scratch).
 * Offsets that moved between two crashes start the count over: a stateful
 * flow replaying from its checkpoint reaches the same offsets again before
 * it dies, and is counted as a worker of a stateless flow is.
 */
#include "worker/crash_guard.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/file_perm.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "utils/timestamp.h"

#include "worker/worker_slot.h"

#define CRASH_DIR			"sdp_ext"
#define CRASH_MAGIC			0x53445043	/* "SDPC" */
#define CRASH_MAX_PARTS		128 /* offsets recorded: the worker's first partitions */
#define CRASH_ALTSTACK_SIZE (256 * 1024)
#define CRASH_LOOP_WINDOW_S 600		/* deaths further apart are not a loop */

/* What the handler writes: plain data, fixed size. */
typedef struct CrashRecord
{
	uint32		magic;
	int32		signo;
	TimestampTz postmaster_start;
	int64		flow_id;
	int32		worker_no;
	int32		count;			/* deaths in a row at these offsets */
	int64		died_at;		/* CLOCK_REALTIME seconds */
	int32		nparts;
	int32		parts[CRASH_MAX_PARTS];
	int64		next[CRASH_MAX_PARTS];
} CrashRecord;

/* The handler's: set up at the worker's start, read in the handler. */
static FlowWorker *guarded = NULL;
static char crash_path[MAXPGPATH];
static CrashRecord previous;	/* the last record of this worker, or zeroes */
static CrashRecord current;
/*
 * Not SIGFPE: PostgreSQL's background workers handle it
 * (FloatExceptionHandler), as an ERROR (22P01) of the batch, which is a
 * message's fault and dead-lettered, not a death.
 */
static const int fault_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGABRT};

/* The worker's partitions and committed offsets into r (plain loads: in a signal handler). */
static void
record_offsets(CrashRecord *r, const FlowWorker *w)
{
	int			n = w->parts.n;

	if (n > CRASH_MAX_PARTS)
		n = CRASH_MAX_PARTS;
	if (w->parts.ids == NULL || w->parts.next == NULL)
		n = 0;
	r->nparts = n;
	for (int i = 0; i < n; i++)
	{
		r->parts[i] = w->parts.ids[i];
		r->next[i] = w->parts.next[i];
	}
}

static bool
same_offsets(const CrashRecord *a, const CrashRecord *b)
{
	if (a->nparts != b->nparts)
		return false;
	for (int i = 0; i < a->nparts; i++)
		if (a->parts[i] != b->parts[i] || a->next[i] != b->next[i])
			return false;
	return true;
}

/*
 * The handler of a fault: the record written, then the signal raised again
 * with its default action (SA_RESETHAND), which ends the process as the
 * fault would have.  Only async-signal-safe calls.
 */
static void
crash_guard_handler(int signo)
{
	int			save_errno = errno;

	if (guarded != NULL)
	{
		int			fd;

		current = previous;
		current.magic = CRASH_MAGIC;
		current.signo = signo;
		current.postmaster_start = PgStartTime;
		current.flow_id = guarded->args.flow_id;
		current.worker_no = guarded->args.worker_no;
		record_offsets(&current, guarded);
		{
			struct timespec ts;

			current.died_at = clock_gettime(CLOCK_REALTIME, &ts) == 0 ? (int64) ts.tv_sec : 0;
		}
		current.count = (previous.magic == CRASH_MAGIC && same_offsets(&previous, &current) &&
						 current.died_at - previous.died_at <= CRASH_LOOP_WINDOW_S)
			? previous.count + 1 : 1;
		fd = open(crash_path, O_WRONLY | O_CREAT | O_TRUNC, pg_file_create_mode);
		if (fd >= 0)
		{
			if (write(fd, &current, sizeof(current)) != sizeof(current))
			{
				/* a short record is ignored at the next start */
			}
			close(fd);
		}
	}
	errno = save_errno;
	raise(signo);
}

/*
 * Install the fault handlers for worker w, and read the record its previous
 * incarnation left, if any.  Early in the worker's life, before it reads a
 * message.
 */
void
sdp_crash_guard_start(FlowWorker *w)
{
	struct sigaction sa;
	stack_t		ss;
	int			fd;

	if (MakePGDirectory(CRASH_DIR) < 0 && errno != EEXIST)
		ereport(WARNING,
				(errcode_for_file_access(),
				 errmsg("could not create directory \"%s\": %m", CRASH_DIR),
				 errdetail("A crash of this flow's worker will not be told from the next.")));
	snprintf(crash_path, sizeof(crash_path), "%s/crash.%lld.%d", CRASH_DIR,
			 (long long) w->args.flow_id, w->args.worker_no);

	memset(&previous, 0, sizeof(previous));
	fd = open(crash_path, O_RDONLY | PG_BINARY, 0);
	if (fd >= 0)
	{
		CrashRecord r;

		if (read(fd, &r, sizeof(r)) == sizeof(r) && r.magic == CRASH_MAGIC &&
			r.postmaster_start == PgStartTime && r.flow_id == w->args.flow_id &&
			r.worker_no == w->args.worker_no && r.nparts >= 0 && r.nparts <= CRASH_MAX_PARTS)
			previous = r;
		close(fd);
	}

	/* an alternate stack: a stack overflow's SIGSEGV is handled too */
	ss.ss_sp = MemoryContextAlloc(TopMemoryContext, CRASH_ALTSTACK_SIZE);
	ss.ss_size = CRASH_ALTSTACK_SIZE;
	ss.ss_flags = 0;
	if (sigaltstack(&ss, NULL) != 0)
		ereport(WARNING,
				(errmsg("could not set up an alternate signal stack: %m"),
				 errdetail("A stack overflow of this flow's worker will not be told from the next.")));

	guarded = w;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = crash_guard_handler;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_ONSTACK | SA_RESETHAND | SA_NODEFER;
	for (int i = 0; i < lengthof(fault_signals); i++)
		sigaction(fault_signals[i], &sa, NULL);
}

/*
 * Fail the flow if its worker died twice in a row at the same offsets
 * (the record its previous incarnation left): the reason names the signal
 * and the offsets.  Connected to the database, outside any transaction.
 */
void
sdp_crash_guard_check(FlowWorker *w)
{
	StringInfoData offsets;
	char	   *reason;

	if (previous.magic != CRASH_MAGIC || previous.count < 2)
		return;

	initStringInfo(&offsets);
	for (int i = 0; i < previous.nparts; i++)
		appendStringInfo(&offsets, "%spartition %d offset %lld", i > 0 ? ", " : "",
						 previous.parts[i], (long long) previous.next[i]);
	if (previous.nparts == 0)
		appendStringInfoString(&offsets, "its start");
	reason = psprintf("the flow's worker was terminated by signal %d (%s) %d times in a row at the same offsets (%s), "
					  "each time taking the server through crash recovery: the flow is failed rather than restarted again. "
					  "Skip the message at the offset with sdp_skip_message() or fix its cause, then run sdp_start_flow()",
					  previous.signo, pg_strsignal(previous.signo), previous.count, offsets.data);
	/* sdp_start_flow starts afresh: the count is in the reason now */
	if (unlink(crash_path) != 0 && errno != ENOENT)
		ereport(WARNING,
				(errcode_for_file_access(),
				 errmsg("could not remove file \"%s\": %m", crash_path)));
	memset(&previous, 0, sizeof(previous));
	sdp_worker_fail(w, reason);
}

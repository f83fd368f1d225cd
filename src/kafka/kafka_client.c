/*
 * kafka_client.c
 *		Every librdkafka client of the process: made with every signal
 *		blocked, and none left running into exit().
 *
 * librdkafka's threads inherit the mask of the thread that creates the
 * client, so a client is made with every signal blocked: PostgreSQL's
 * handlers then run only on the process's own thread.
 *
 * A process that exits while a client is alive -- a worker terminated, or
 * failed, between making its consumer or producer and its orderly end --
 * must not run the atexit handlers: librdkafka's threads go on while they
 * run, and OpenSSL's (libcrypto 3 frees its locks there) crashed a broker
 * thread drawing random bytes for its reconnect backoff, which restarted
 * every backend of the server for one stopped worker.  Nor can the client
 * be destroyed on the way out: rd_kafka_destroy waits for its broker
 * threads, and they for every message, queue and topic handle its owner
 * still holds (a batch being written, say), which is a worker that never
 * exits.  So the clients are counted, and an on_proc_exit callback ends a
 * process that still has one with _exit(), as PostgreSQL's own quick exits
 * do, once PostgreSQL's cleanup has run (a relay's last commit runs before
 * it, in the worker's before_shmem_exit callback).  What it skips is
 * libraries' atexit work (OpenSSL's among it) and the on_proc_exit
 * callbacks registered before this one: by then shmem_exit has released
 * the process's shared memory, locks and statistics, and what is left
 * (smgr's shutdown hook, say) is the process's own, which the kernel
 * frees.
 */
#include "postgres.h"

#include <signal.h>
#include <pthread.h>
#include <unistd.h>

#include "storage/ipc.h"

#include "kafka/kafka_client.h"

static int	nclients = 0;
static bool exit_callback_registered = false;

/* on_proc_exit: a process with a client alive ends here, without exit()'s atexit handlers */
static void
exit_with_clients(int code, Datum arg)
{
	if (nclients > 0)
		_exit(code);
}

/*
 * rd_kafka_new, with every signal blocked while librdkafka starts its
 * threads; NULL with the reason in errstr when librdkafka refuses.
 */
rd_kafka_t *
kafka_client_new(rd_kafka_type_t type, rd_kafka_conf_t *conf, char *errstr, size_t errlen)
{
	sigset_t	all,
				saved;
	rd_kafka_t *rk;

	if (!exit_callback_registered)
	{
		on_proc_exit(exit_with_clients, (Datum) 0);
		exit_callback_registered = true;
	}

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &saved);
	rk = rd_kafka_new(type, conf, errstr, errlen);
	pthread_sigmask(SIG_SETMASK, &saved, NULL);
	if (rk != NULL)
		nclients++;
	return rk;
}

/* Destroys a client of kafka_client_new (a consumer without closing it: its offsets are ours). */
void
kafka_client_destroy(rd_kafka_t *rk)
{
	Assert(nclients > 0);
	if (rd_kafka_type(rk) == RD_KAFKA_CONSUMER)
		rd_kafka_destroy_flags(rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
	else
		rd_kafka_destroy(rk);
	nclients--;
}

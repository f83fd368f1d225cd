/*
 * sdp.h
 *		Names, limits and GUCs of the whole extension; nothing else.
 *
 * The layout of src/, one folder per layer, from the top; a file calls
 * only into its own folder's lower files and the layers below its own,
 * except through the two documented callback interfaces (isolate.h's
 * stage callbacks and the operator vtable of stateful/operator.h).
 * test/t/004_layers.pl checks it (calls from the objects, includes from
 * the sources):
 *
 *	main.c, guc.c	_PG_init: the GUCs' definitions, hooks, the launcher's
 *					registration; guc.c holds the GUCs' variables
 *	launcher/		the static background worker that starts, stops and
 *					restarts flow workers, and prunes dead letters
 *	sql/			the SQL-callable functions: declarations (api.c, alter.c,
 *					aggregations.c, reset.c), monitoring (status.c), owners
 *					by OID and the ProcessUtility hook (roles.c)
 *	worker/			a flow worker: its loop (worker.c), start (worker_start.c),
 *					one batch (batch.c) and its stages (isolate.c,
 *					dead_letter.c, skip.c, tombstone.c, stateful.c,
 *					offsets.c), what it publishes and how it waits
 *					(worker_slot.c); worker_args.h is all the launcher sees
 *	prepare/		one check-and-prepare of a flow's declaration, for
 *					sdp_create_flow, sdp_alter_flow and the worker
 *	kafka/			librdkafka: every client (kafka_client.c), a flow's
 *					consumer (kafka_source.c), which properties and hosts a
 *					role may use (kafka_properties.c), a sink flow's outbox
 *					(outbox.c) and its relay to Kafka (relay.c), the
 *					standbys it waits for (standby_slots.c),
 *					sdp_partition_for_key (kafka_partitioner.c)
 *	stateful/		the operator interface (operator.c), its operators
 *					(operators/, named in registry.c), keyed state in shared
 *					memory (state_store.c)
 *	exec/			SQL over a batch: the transform (transform.c), the write
 *					into the target table (table_write.c), JSON in and out
 *	decl/			a flow's declaration: its types (flow.h), options,
 *					input schema, and the catalogs' access (catalog.c)
 *	shmem/			the flow slots (slots.c) and latency metrics (metrics.c)
 *	compat.h		the server calls that differ between PostgreSQL's majors
 */
#ifndef SDP_H
#define SDP_H

#include "postgres.h"

#include <time.h>

#include "access/xact.h"
#include "datatype/timestamp.h"
#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#define SDP_EXTENSION_NAME		"sdp_ext"
#define SDP_SCHEMA				"sdp"

/* Upper bound on partitions of one flow worker shown in shared memory. */
#define SDP_MAX_PARTITIONS		1024
#define SDP_ERROR_LEN			512
/* what other roles see in place of a flow's error text (as in pg_stat_activity) */
#define SDP_INSUFFICIENT_PRIVILEGE	"<insufficient privilege>"
/* Flows waiting for free slots (past sdp.max_flows) that sdp.flow_status names. */
#define SDP_MAX_WAITING			64
/* Roles owning flows or sources that the launcher publishes for DROP ROLE in other databases. */
#define SDP_MAX_OWNERS			256
/* Upper bound of the flow option workers. */
#define SDP_MAX_WORKERS			64
/* Default of the flow option statement_timeout: a batch's statements that run longer are cancelled. */
#define SDP_DEFAULT_STATEMENT_TIMEOUT_MS	60000

#include "guc.h"

/*
 * Begin a transaction in a background worker.  A backend stamps each
 * statement's start before its transaction; a worker must do it itself, or
 * now() in every transaction it runs is the time the worker started.
 */
static inline void
sdp_start_transaction(void)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
}

/*
 * A timestamptz as text, in memory of its own: timestamptz_to_str answers in
 * one static buffer, so two calls in one message would print the same time.
 */
static inline char *
sdp_timestamp_text(TimestampTz t)
{
	return pstrdup(timestamptz_to_str(t));
}

/* Unix time in microseconds, the clock Kafka timestamps use. */
static inline int64
sdp_unix_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

#endif							/* SDP_H */

/*-------------------------------------------------------------------------
 *
 * dashboard.h
 *	  What the parts of tools/sdp_dashboard share: the options, the hub's
 *	  state, logging and clocks, and each part's entry points.
 *
 * The parts: main.c (options, startup, shutdown), hub.c (the browsers'
 * event streams and the fan-out of events to them), db.c (the DB thread:
 * LISTEN, queries, the cache of what the page shows) and http.c (the
 * libmicrohttpd server: event streams, /health, /zones, static files).
 *
 * Locking: one mutex, hub.lock, guards the client list, every client's
 * queue, the cached state (zones, positions, zone_alerts, progress) and
 * the counters.  The DB thread queries without it, then takes it to merge
 * the result into the cache and queue the events.  A new client is listed
 * and given its snapshot under the lock, so it gets every change after the
 * snapshot and none before.  Functions named *_locked expect it held.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SDP_DASHBOARD_H
#define SDP_DASHBOARD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#define CLIENT_WAIT_MS			250		/* how often a stream looks for a hang-up */

typedef struct SseClient SseClient;	/* one browser's event stream (hub.c) */

typedef enum DbState
{
	DB_CONNECTING,				/* never connected yet */
	DB_UP,
	DB_DOWN
} DbState;

/* Everything the HTTP threads and the DB thread share (hub.c). */
typedef struct Hub
{
	pthread_mutex_t lock;
	SseClient  *clients;
	int			nclients;
	uint64_t	next_client_id;
	uint64_t	events_sent;	/* events handed to streams (keepalives aside) */
	uint64_t	clients_dropped;	/* for falling behind */
	DbState		db_state;
	char		db_error[256];
	json_t	   *zones;			/* array of rows */
	json_t	   *positions;		/* object: icao24 -> row */
	json_t	   *zone_alerts;	/* object: zone -> row */
	json_t	   *progress;		/* array: one object per flow */
} Hub;

extern Hub	hub;

/* The command line (main.c). */
typedef struct DashboardOptions
{
	const char *listen;
	const char *conninfo;
	const char *channel;
	char	   *www;
	bool		quiet;
} DashboardOptions;

extern DashboardOptions opt;

/* Set once when the program stops: streams end, the DB thread returns. */
extern atomic_bool stopping;

/* main.c: logging on stderr (log_info is silenced by --quiet) and clocks */
extern void log_info(const char *fmt,...) __attribute__((format(printf, 1, 2)));
extern void log_error(const char *fmt,...) __attribute__((format(printf, 1, 2)));
extern int64_t monotonic_ms(void);
extern double wall_ms(void);	/* ms since the epoch, with a fraction */

/* hub.c */
extern void hub_init(void);
extern void hub_wake_all(void);
extern void hub_free(void);
extern void hub_broadcast_locked(const char *name, json_t *payload);
extern json_t *snapshot_payload_locked(void);
extern SseClient *client_new(int fd, const char *peer);
extern void client_free(SseClient *c);
extern bool hub_add_client(SseClient *c);
extern ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max);
extern void sse_free(void *cls);

/* db.c */
extern void *db_thread_main(void *arg);

/* http.c */
struct MHD_Daemon;
struct sockaddr_storage;
extern struct MHD_Daemon *http_start(const struct sockaddr_storage *addr,
									 unsigned short port);

#endif							/* SDP_DASHBOARD_H */

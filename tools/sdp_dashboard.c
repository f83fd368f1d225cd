/*-------------------------------------------------------------------------
 *
 * sdp_dashboard.c
 *	  The live dashboard of the flight demo: a read-only database client
 *	  that pushes what the flows write to browsers.
 *
 * The flows of examples/flights.sql NOTIFY a channel (flow option
 * "notify") in every transaction that writes rows, delivered at commit.
 * One thread, the DB thread, LISTENs on it; on a notification it reads
 * what changed (the positions rows as new as the newest it has seen or
 * newer, and all of zone_alerts, which is tiny) and pushes the rows that
 * changed to every browser over Server-Sent Events (GET /events).  It also
 * reads the progress of every flow once a second and the zones every five
 * seconds, and pushes them when they change.  A new browser first gets a
 * snapshot of everything, then the changes.  When the connection is lost
 * the DB thread says so to the browsers, reconnects with a backoff (200 ms
 * doubling to 2 s), LISTENs again and sends everyone a fresh snapshot.
 *
 * The HTTP side is libmicrohttpd with a thread per connection: the thread
 * of an event stream sleeps on its client's condition variable until an
 * event is queued for it, and looks every CLIENT_WAIT_MS whether the
 * browser has gone.  Other paths: GET /health (JSON for tests and
 * monitoring), GET /zones, and the static files of --www.
 *
 * Locking: one mutex, hub.lock, guards the client list, every client's
 * queue, the cached state (zones, positions, zone_alerts, progress) and
 * the counters.  The DB thread queries without it, then takes it to merge
 * the result into the cache and queue the events.  A new client is listed
 * and given its snapshot under the lock, so it gets every change after the
 * snapshot and none before.  An event is serialised once and shared by the
 * queues (reference count, under the lock).
 *
 * Queues are bounded: a client that does not read falls behind and, past
 * CLIENT_QUEUE_EVENTS events or CLIENT_QUEUE_BYTES bytes, is dropped (its
 * socket shut down); nobody waits for it.
 *
 * Assumption: a table's updated_at rises with the commits that write it
 * (one flow writes a table, and a flow's transactions follow each other).
 * The DB thread reads "updated_at >= the newest seen" and sends only the
 * rows that differ from its cache, so rows that share a timestamp with
 * the last ones read are not missed either (at the cost of reading the
 * last transaction's rows twice).
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <libpq-fe.h>
#include <microhttpd.h>

#define CLIENT_QUEUE_EVENTS		4096	/* events queued for one browser, at most */
#define CLIENT_QUEUE_BYTES		(16 * 1024 * 1024)	/* and bytes */
#define CLIENT_WAIT_MS			250		/* how often a stream looks for a hang-up */
#define KEEPALIVE_MS			15000	/* an SSE comment after this much silence */
#define MAX_CLIENTS				64		/* event streams at once */
#define MAX_CONNECTIONS			128		/* HTTP connections at once */
#define CONNECTION_TIMEOUT_S	60		/* an idle (or stuck) connection is closed */
#define SSE_BLOCK_SIZE			(64 * 1024)
#define PROGRESS_INTERVAL_MS	1000
#define ZONES_INTERVAL_MS		5000
#define BACKOFF_MIN_MS			200
#define BACKOFF_MAX_MS			2000
#define SSE_RETRY_MS			1000	/* the browser reconnects after this */

/* PostgreSQL type OIDs (catalog/pg_type_d.h is a server header) */
#define BOOLOID		16
#define INT8OID		20
#define INT2OID		21
#define INT4OID		23
#define JSONOID		114
#define FLOAT4OID	700
#define FLOAT8OID	701
#define NUMERICOID	1700
#define JSONBOID	3802

/*
 * The queries.  Columns whose name starts with "_" are for the dashboard
 * and not sent; timestamps are sent as milliseconds since the epoch.
 */
#define POSITIONS_SQL \
	"SELECT icao24, callsign, lat, lon, baro_alt, vert_rate, squawk, velocity, heading, " \
	"       flight_phase, squawk_alert, zone, " \
	"       extract(epoch FROM updated_at)::float8 * 1000 AS updated_at, " \
	"       (extract(epoch FROM updated_at) * 1000000)::int8 AS _cursor " \
	"  FROM positions "
#define POSITIONS_ALL_SQL		POSITIONS_SQL "WHERE icao24 IS NOT NULL"
#define POSITIONS_CHANGED_SQL	POSITIONS_SQL \
	"WHERE icao24 IS NOT NULL " \
	"  AND updated_at >= 'epoch'::timestamptz + $1::int8 * interval '1 microsecond' " \
	"ORDER BY updated_at"
#define ZONE_ALERTS_SQL \
	"SELECT zone, aircraft_count, crowded, " \
	"       extract(epoch FROM updated_at)::float8 * 1000 AS updated_at " \
	"  FROM zone_alerts ORDER BY zone"
#define ZONES_SQL \
	"SELECT zone, min_lat, max_lat, min_lon, max_lon, capacity FROM zones ORDER BY zone"
#define PROGRESS_SQL \
	"SELECT flow, state, lag, sdp_flow_progress(flow) AS progress " \
	"  FROM sdp.flow_status ORDER BY flow"

/* One serialised event, shared by the queues that hold it. */
typedef struct SseEvent
{
	int			refcount;		/* holders, under hub.lock; < 0: static */
	size_t		len;
	char		text[];			/* "event: NAME\ndata: JSON\n\n" */
} SseEvent;

/* One browser's event stream. */
typedef struct SseClient
{
	struct SseClient *next;		/* in hub.clients while listed */
	struct SseClient *prev;
	bool		listed;
	bool		dropped;		/* overflowed: its stream ends */
	int			fd;				/* the connection's socket, valid while listed */
	uint64_t	id;
	char		peer[64];
	pthread_cond_t wake;		/* signalled when an event is queued */
	SseEvent   *queue[CLIENT_QUEUE_EVENTS];	/* a ring */
	int			head;
	int			count;
	size_t		offset;			/* bytes of queue[head] already handed to MHD */
	size_t		bytes;			/* bytes queued */
	int64_t		last_write_ms;	/* monotonic: when it was last given bytes */
} SseClient;

typedef enum DbState
{
	DB_CONNECTING,				/* never connected yet */
	DB_UP,
	DB_DOWN
} DbState;

/* Everything the HTTP threads and the DB thread share; see the header. */
static struct
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
}			hub = {.lock = PTHREAD_MUTEX_INITIALIZER};

static atomic_bool stopping;

static struct
{
	const char *listen;
	const char *conninfo;
	const char *channel;
	char	   *www;
	bool		quiet;
}			opt = {"127.0.0.1:8080", NULL, "flights", NULL, false};

/* Events any stream may hold without counting: made at start, never freed. */
static SseEvent *keepalive_event;	/* an SSE comment */
static SseEvent *retry_event;	/* how soon the browser reconnects */

/* The DB thread's connection and where it is. */
typedef enum QueryKind
{
	Q_POSITIONS,
	Q_ZONE_ALERTS,
	Q_ZONES,
	Q_PROGRESS,
	Q_SETUP,
	Q_KINDS
} QueryKind;

typedef struct DbConn
{
	PGconn	   *conn;
	int64_t		positions_cursor_us;	/* newest positions.updated_at seen */
	int64_t		next_progress_ms;		/* monotonic */
	int64_t		next_zones_ms;
	char		last_error[Q_KINDS][256];	/* not logged again while the same */
} DbConn;


/* ---------------------------------------------------------------------
 * Logging and clocks
 * ---------------------------------------------------------------------
 */

static void
log_line(const char *fmt, va_list ap)
{
	char		msg[1024];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	fprintf(stderr, "sdp_dashboard: %s\n", msg);
}

/* Progress messages, silenced by --quiet. */
static void __attribute__((format(printf, 1, 2)))
log_info(const char *fmt,...)
{
	va_list		ap;

	if (opt.quiet)
		return;
	va_start(ap, fmt);
	log_line(fmt, ap);
	va_end(ap);
}

static void __attribute__((format(printf, 1, 2)))
log_error(const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	log_line(fmt, ap);
	va_end(ap);
}

static void
mhd_log(void *cls, const char *fmt, va_list ap)
{
	char		msg[1024];
	size_t		len;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	len = strlen(msg);
	while (len > 0 && msg[len - 1] == '\n')
		msg[--len] = '\0';
	if (!opt.quiet)
		fprintf(stderr, "sdp_dashboard: http: %s\n", msg);
}

static int64_t
monotonic_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Milliseconds since the epoch, with a fraction: what the page compares. */
static double
wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double) ts.tv_sec * 1000.0 + (double) ts.tv_nsec / 1e6;
}

/* ---------------------------------------------------------------------
 * Events and the clients' queues (all under hub.lock)
 * ---------------------------------------------------------------------
 */

/*
 * Serialise an event, stamping the payload with the send time.  Takes the
 * payload's reference.  The JSON is compact, so it holds no newline and
 * fits one SSE data line.
 */
static SseEvent *
sse_event_new(const char *name, json_t *payload)
{
	char	   *data;
	SseEvent   *ev;
	size_t		size;

	json_object_set_new(payload, "sent_at", json_real(wall_ms()));
	data = json_dumps(payload, JSON_COMPACT | JSON_REAL_PRECISION(15));
	json_decref(payload);
	if (data == NULL)
	{
		log_error("could not serialise a %s event", name);
		return NULL;
	}
	size = strlen("event: \ndata: \n\n") + strlen(name) + strlen(data) + 1;
	ev = malloc(sizeof(SseEvent) + size);
	if (ev == NULL)
	{
		free(data);
		log_error("out of memory for a %s event", name);
		return NULL;
	}
	ev->refcount = 1;
	ev->len = (size_t) snprintf(ev->text, size, "event: %s\ndata: %s\n\n", name, data);
	free(data);
	return ev;
}

/* An event that lives as long as the program (refcount -1). */
static SseEvent *
sse_event_static(const char *text)
{
	size_t		len = strlen(text);
	SseEvent   *ev = malloc(sizeof(SseEvent) + len + 1);

	if (ev == NULL)
	{
		log_error("out of memory");
		exit(1);
	}
	ev->refcount = -1;
	ev->len = len;
	memcpy(ev->text, text, len + 1);
	return ev;
}

static void
event_release_locked(SseEvent *ev)
{
	if (ev->refcount < 0)
		return;					/* static */
	if (--ev->refcount == 0)
		free(ev);
}

/* Empty a client's queue. */
static void
client_clear_queue_locked(SseClient *c)
{
	while (c->count > 0)
	{
		event_release_locked(c->queue[c->head]);
		c->head = (c->head + 1) % CLIENT_QUEUE_EVENTS;
		c->count--;
	}
	c->head = 0;
	c->offset = 0;
	c->bytes = 0;
}

static void
client_unlist_locked(SseClient *c)
{
	if (!c->listed)
		return;
	if (c->prev)
		c->prev->next = c->next;
	else
		hub.clients = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->next = c->prev = NULL;
	c->listed = false;
	hub.nclients--;
}

/*
 * Drop a client that fell behind: no more events for it, its queue freed,
 * its socket shut down so that its connection ends even if it never reads
 * again.  The socket is still open: MHD closes it only after destroying the
 * response, whose free callback unlists the client first (under the lock).
 */
static void
client_drop_locked(SseClient *c, const char *why)
{
	log_error("dropping client %llu (%s): %s", (unsigned long long) c->id, c->peer, why);
	client_unlist_locked(c);
	client_clear_queue_locked(c);
	c->dropped = true;
	hub.clients_dropped++;
	if (c->fd >= 0)
		shutdown(c->fd, SHUT_RDWR);
	pthread_cond_signal(&c->wake);
}

static void
client_enqueue_locked(SseClient *c, SseEvent *ev)
{
	if (c->count == CLIENT_QUEUE_EVENTS || c->bytes + ev->len > CLIENT_QUEUE_BYTES)
	{
		client_drop_locked(c, "its queue is full (it does not read)");
		return;
	}
	c->queue[(c->head + c->count) % CLIENT_QUEUE_EVENTS] = ev;
	if (ev->refcount >= 0)
		ev->refcount++;
	c->count++;
	c->bytes += ev->len;
	pthread_cond_signal(&c->wake);
}

/* Queue an event for every client.  Takes the payload's reference. */
static void
hub_broadcast_locked(const char *name, json_t *payload)
{
	SseEvent   *ev = sse_event_new(name, payload);
	SseClient  *c;
	SseClient  *next;

	if (ev == NULL)
		return;
	for (c = hub.clients; c != NULL; c = next)
	{
		next = c->next;			/* enqueueing may drop (unlist) it */
		client_enqueue_locked(c, ev);
	}
	event_release_locked(ev);
}

/* Copy the head of the queue into MHD's buffer; the number of bytes. */
static size_t
client_copy_out_locked(SseClient *c, char *buf, size_t max)
{
	size_t		n = 0;

	while (c->count > 0 && n < max)
	{
		SseEvent   *ev = c->queue[c->head];
		size_t		chunk = ev->len - c->offset;

		if (chunk > max - n)
			chunk = max - n;
		memcpy(buf + n, ev->text + c->offset, chunk);
		n += chunk;
		c->offset += chunk;
		if (c->offset == ev->len)
		{
			if (ev != keepalive_event && ev != retry_event)
				hub.events_sent++;
			c->bytes -= ev->len;
			c->offset = 0;
			c->head = (c->head + 1) % CLIENT_QUEUE_EVENTS;
			c->count--;
			event_release_locked(ev);
		}
	}
	return n;
}

/* Whether the browser has closed its end (it never sends on a stream). */
static bool
client_hung_up(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
	char		b;
	ssize_t		r;

	if (fd < 0 || poll(&p, 1, 0) <= 0)
		return false;
	if (p.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL))
		return true;
	if (!(p.revents & POLLIN))
		return false;
	r = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* The rows of an object cache (key -> row) as an array. */
static json_t *
cache_rows_locked(json_t *cache)
{
	json_t	   *rows = json_array();
	const char *key;
	json_t	   *row;

	json_object_foreach(cache, key, row)
		json_array_append(rows, row);
	return rows;
}

/* What a new client gets first, or everyone after a reconnect. */
static json_t *
snapshot_payload_locked(void)
{
	json_t	   *s = json_object();

	json_object_set_new(s, "db", json_string(hub.db_state == DB_UP ? "up" : "down"));
	if (hub.db_state != DB_UP && hub.db_error[0])
		json_object_set_new(s, "error", json_string(hub.db_error));
	json_object_set(s, "zones", hub.zones);
	json_object_set_new(s, "positions", cache_rows_locked(hub.positions));
	json_object_set_new(s, "zone_alerts", cache_rows_locked(hub.zone_alerts));
	json_object_set(s, "progress", hub.progress);
	return s;
}

/* ---------------------------------------------------------------------
 * HTTP
 * ---------------------------------------------------------------------
 */

/*
 * MHD's content reader for an event stream, run by the connection's own
 * thread: wait for an event, a keepalive, the browser leaving, or the end.
 */
static ssize_t
sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	SseClient  *c = cls;
	ssize_t		n = 0;

	pthread_mutex_lock(&hub.lock);
	for (;;)
	{
		struct timespec until;

		if (c->dropped)
		{
			n = MHD_CONTENT_READER_END_WITH_ERROR;
			break;
		}
		if (atomic_load(&stopping))
		{
			n = MHD_CONTENT_READER_END_OF_STREAM;
			break;
		}
		if (c->count > 0)
		{
			n = (ssize_t) client_copy_out_locked(c, buf, max);
			break;
		}
		if (monotonic_ms() - c->last_write_ms >= KEEPALIVE_MS)
		{
			client_enqueue_locked(c, keepalive_event);
			continue;
		}
		if (client_hung_up(c->fd))
		{
			client_unlist_locked(c);
			n = MHD_CONTENT_READER_END_OF_STREAM;
			break;
		}
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_nsec += CLIENT_WAIT_MS * 1000000L;
		if (until.tv_nsec >= 1000000000L)
		{
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&c->wake, &hub.lock, &until);
	}
	if (n > 0)
		c->last_write_ms = monotonic_ms();
	pthread_mutex_unlock(&hub.lock);
	return n;
}

/* MHD destroys the stream's response: the client goes. */
static void
sse_free(void *cls)
{
	SseClient  *c = cls;

	pthread_mutex_lock(&hub.lock);
	client_unlist_locked(c);
	client_clear_queue_locked(c);
	log_info("client %llu (%s) closed, %d left", (unsigned long long) c->id, c->peer,
			 hub.nclients);
	pthread_mutex_unlock(&hub.lock);
	pthread_cond_destroy(&c->wake);
	free(c);
}

static enum MHD_Result
send_buffer(struct MHD_Connection *conn, unsigned int status, const char *type,
			const char *body)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;

	resp = MHD_create_response_from_buffer(strlen(body), (void *) body,
										   MHD_RESPMEM_MUST_COPY);
	if (resp == NULL)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	ret = MHD_queue_response(conn, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* Takes the reference of the JSON. */
static enum MHD_Result
send_json(struct MHD_Connection *conn, unsigned int status, json_t *body)
{
	char	   *text = json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(15));
	enum MHD_Result ret;

	json_decref(body);
	if (text == NULL)
		return send_buffer(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "text/plain", "error\n");
	ret = send_buffer(conn, status, "application/json", text);
	free(text);
	return ret;
}

static enum MHD_Result
serve_health(struct MHD_Connection *conn)
{
	json_t	   *h = json_object();

	pthread_mutex_lock(&hub.lock);
	json_object_set_new(h, "db", json_string(hub.db_state == DB_UP ? "up" : "down"));
	json_object_set_new(h, "clients", json_integer(hub.nclients));
	json_object_set_new(h, "events_sent", json_integer((json_int_t) hub.events_sent));
	json_object_set_new(h, "clients_dropped", json_integer((json_int_t) hub.clients_dropped));
	json_object_set_new(h, "aircraft", json_integer((json_int_t) json_object_size(hub.positions)));
	if (hub.db_state != DB_UP && hub.db_error[0])
		json_object_set_new(h, "db_error", json_string(hub.db_error));
	pthread_mutex_unlock(&hub.lock);
	return send_json(conn, MHD_HTTP_OK, h);
}

static enum MHD_Result
serve_zones(struct MHD_Connection *conn)
{
	json_t	   *z;

	pthread_mutex_lock(&hub.lock);
	z = json_deep_copy(hub.zones);
	pthread_mutex_unlock(&hub.lock);
	return send_json(conn, MHD_HTTP_OK, z);
}

/* A new event stream: listed with its snapshot queued, under one lock. */
static enum MHD_Result
serve_events(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *info;
	struct MHD_Response *resp;
	pthread_condattr_t attr;
	SseClient  *c;
	enum MHD_Result ret;

	c = calloc(1, sizeof(SseClient));
	if (c == NULL)
		return MHD_NO;
	info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	c->fd = info ? info->connect_fd : -1;
	info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	if (info == NULL || info->client_addr == NULL ||
		getnameinfo(info->client_addr,
					info->client_addr->sa_family == AF_INET6 ?
					sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in),
					c->peer, sizeof(c->peer), NULL, 0, NI_NUMERICHOST) != 0)
		strcpy(c->peer, "?");
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&c->wake, &attr);
	pthread_condattr_destroy(&attr);
	c->last_write_ms = monotonic_ms();

	pthread_mutex_lock(&hub.lock);
	if (hub.nclients >= MAX_CLIENTS)
	{
		pthread_mutex_unlock(&hub.lock);
		pthread_cond_destroy(&c->wake);
		free(c);
		return send_buffer(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain",
						   "too many event streams\n");
	}
	c->id = ++hub.next_client_id;
	c->next = hub.clients;
	if (hub.clients)
		hub.clients->prev = c;
	hub.clients = c;
	c->listed = true;
	hub.nclients++;
	client_enqueue_locked(c, retry_event);
	{
		SseEvent   *snap = sse_event_new("snapshot", snapshot_payload_locked());

		if (snap != NULL)
		{
			client_enqueue_locked(c, snap);
			event_release_locked(snap);
		}
	}
	log_info("client %llu (%s) connected, %d streaming", (unsigned long long) c->id,
			 c->peer, hub.nclients);
	pthread_mutex_unlock(&hub.lock);

	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, SSE_BLOCK_SIZE,
											 sse_read, c, sse_free);
	if (resp == NULL)
	{
		sse_free(c);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	MHD_add_response_header(resp, "X-Accel-Buffering", "no");
	ret = MHD_queue_response(conn, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp); /* the connection holds the last reference */
	return ret;
}

static const char *
content_type_of(const char *name)
{
	static const struct
	{
		const char *ext;
		const char *type;
	}			types[] = {
		{".html", "text/html; charset=utf-8"},
		{".js", "text/javascript; charset=utf-8"},
		{".mjs", "text/javascript; charset=utf-8"},
		{".css", "text/css; charset=utf-8"},
		{".json", "application/json"},
		{".svg", "image/svg+xml"},
		{".png", "image/png"},
		{".ico", "image/x-icon"},
		{".md", "text/plain; charset=utf-8"},
		{".txt", "text/plain; charset=utf-8"},
	};
	const char *dot = strrchr(name, '.');

	for (size_t i = 0; dot && i < sizeof(types) / sizeof(types[0]); i++)
		if (strcmp(dot, types[i].ext) == 0)
			return types[i].type;
	return "application/octet-stream";
}

/*
 * A file of --www, by its plain name: no directories, no "..", no hidden
 * files, no symbolic links.
 */
static enum MHD_Result
serve_file(struct MHD_Connection *conn, const char *name)
{
	char		path[PATH_MAX];
	struct stat st;
	struct MHD_Response *resp;
	enum MHD_Result ret;
	int			fd;

	if (strstr(name, "..") || strchr(name, '/') || strchr(name, '\\'))
		return send_buffer(conn, MHD_HTTP_FORBIDDEN, "text/plain", "forbidden\n");
	if (name[0] == '\0' || name[0] == '.' || strlen(name) > 128 ||
		strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != strlen(name))
		return send_buffer(conn, MHD_HTTP_NOT_FOUND, "text/plain", "not found\n");
	if ((size_t) snprintf(path, sizeof(path), "%s/%s", opt.www, name) >= sizeof(path))
		return send_buffer(conn, MHD_HTTP_NOT_FOUND, "text/plain", "not found\n");
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return send_buffer(conn, MHD_HTTP_NOT_FOUND, "text/plain", "not found\n");
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
	{
		close(fd);
		return send_buffer(conn, MHD_HTTP_NOT_FOUND, "text/plain", "not found\n");
	}
	resp = MHD_create_response_from_fd((uint64_t) st.st_size, fd);	/* owns fd */
	if (resp == NULL)
	{
		close(fd);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type_of(name));
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	ret = MHD_queue_response(conn, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result
handle_request(void *cls, struct MHD_Connection *conn, const char *url,
			   const char *method, const char *version, const char *upload_data,
			   size_t *upload_data_size, void **req_cls)
{
	static int	headers_seen;

	/* the first call has the headers only */
	if (*req_cls == NULL)
	{
		*req_cls = &headers_seen;
		return MHD_YES;
	}
	if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
		return send_buffer(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain",
						   "only GET and HEAD\n");
	if (*upload_data_size != 0)
	{
		*upload_data_size = 0;	/* a body on a GET: ignored */
		return MHD_YES;
	}
	if (strcmp(url, "/events") == 0)
		return serve_events(conn);
	if (strcmp(url, "/health") == 0)
		return serve_health(conn);
	if (strcmp(url, "/zones") == 0)
		return serve_zones(conn);
	if (strcmp(url, "/") == 0)
		return serve_file(conn, "index.html");
	return serve_file(conn, url + 1);
}

/* ---------------------------------------------------------------------
 * The DB thread
 * ---------------------------------------------------------------------
 */

/* A result's rows as JSON objects: numbers, booleans, JSON and strings. */
static json_t *
rows_from_result(PGresult *res)
{
	json_t	   *rows = json_array();
	int			nrows = PQntuples(res);
	int			ncols = PQnfields(res);

	for (int r = 0; r < nrows; r++)
	{
		json_t	   *row = json_object();

		for (int f = 0; f < ncols; f++)
		{
			const char *name = PQfname(res, f);
			const char *val = PQgetvalue(res, r, f);
			json_t	   *v;

			if (name[0] == '_')
				continue;
			if (PQgetisnull(res, r, f))
				v = json_null();
			else
				switch (PQftype(res, f))
				{
					case BOOLOID:
						v = json_boolean(val[0] == 't');
						break;
					case INT2OID:
					case INT4OID:
					case INT8OID:
						v = json_integer((json_int_t) strtoll(val, NULL, 10));
						break;
					case FLOAT4OID:
					case FLOAT8OID:
					case NUMERICOID:
						{
							char	   *end;
							double		d = strtod(val, &end);

							/* NaN and infinities have no JSON */
							v = (*end == '\0' && d == d && d - d == 0) ? json_real(d) : json_null();
							break;
						}
					case JSONOID:
					case JSONBOID:
						v = json_loads(val, JSON_DECODE_ANY, NULL);
						if (v == NULL)
							v = json_null();
						break;
					default:
						v = json_string(val);
						if (v == NULL)	/* not UTF-8 */
							v = json_null();
						break;
				}
			json_object_set_new(row, name, v);
		}
		json_array_append_new(rows, row);
	}
	return rows;
}

/*
 * Merge rows into an object cache by their key column; the rows that are
 * new or differ, as an array.
 */
static json_t *
cache_merge_locked(json_t *cache, json_t *rows, const char *key_column)
{
	json_t	   *changed = json_array();
	size_t		i;
	json_t	   *row;

	json_array_foreach(rows, i, row)
	{
		const char *key = json_string_value(json_object_get(row, key_column));

		if (key == NULL || json_equal(json_object_get(cache, key), row))
			continue;
		json_object_set(cache, key, row);
		json_array_append(changed, row);
	}
	return changed;
}

/* Key -> row for a whole table. */
static json_t *
cache_from_rows(json_t *rows, const char *key_column)
{
	json_t	   *cache = json_object();
	json_t	   *changed = cache_merge_locked(cache, rows, key_column);

	json_decref(changed);
	return cache;
}

/* The largest _cursor of a result (0 without rows). */
static int64_t
result_max_cursor(PGresult *res)
{
	int			f = PQfnumber(res, "_cursor");
	int64_t		max = 0;

	for (int r = 0; f >= 0 && r < PQntuples(res); r++)
	{
		int64_t		v;

		if (PQgetisnull(res, r, f))
			continue;
		v = strtoll(PQgetvalue(res, r, f), NULL, 10);
		if (v > max)
			max = v;
	}
	return max;
}

static void
db_notice(void *arg, const char *message)
{
	log_info("server: %.*s", (int) strcspn(message, "\n"), message);
}

/*
 * Run a query.  Failure is logged once while it stays the same (a missing
 * table would otherwise fill the log every second); *lost says whether the
 * connection is gone.
 */
static PGresult *
db_query(DbConn *db, QueryKind kind, const char *sql, int nparams,
		 const char *const *params, bool *lost)
{
	PGresult   *res = PQexecParams(db->conn, sql, nparams, NULL, params, NULL, NULL, 0);
	ExecStatusType st = PQresultStatus(res);

	*lost = false;
	if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
	{
		db->last_error[kind][0] = '\0';
		return res;
	}
	if (PQstatus(db->conn) == CONNECTION_BAD)
		*lost = true;
	else
	{
		char		msg[256];

		snprintf(msg, sizeof(msg), "%s", PQerrorMessage(db->conn));
		msg[strcspn(msg, "\n")] = '\0';
		if (strcmp(msg, db->last_error[kind]) != 0)
			log_error("query failed: %s [%.60s...]", msg, sql);
		strcpy(db->last_error[kind], msg);
	}
	PQclear(res);
	return NULL;
}

/* Say the database is down (once per outage) and remember why. */
static void
hub_set_db_down(const char *why)
{
	pthread_mutex_lock(&hub.lock);
	snprintf(hub.db_error, sizeof(hub.db_error), "%s", why);
	if (hub.db_state != DB_DOWN)
	{
		json_t	   *status = json_object();

		hub.db_state = DB_DOWN;
		json_object_set_new(status, "db", json_string("down"));
		json_object_set_new(status, "error", json_string(why));
		hub_broadcast_locked("status", status);
	}
	pthread_mutex_unlock(&hub.lock);
}

static void
db_disconnect(DbConn *db, const char *why)
{
	char		msg[256];

	snprintf(msg, sizeof(msg), "%s", why);
	msg[strcspn(msg, "\n")] = '\0';
	log_error("database connection lost: %s", msg);
	PQfinish(db->conn);
	db->conn = NULL;
	hub_set_db_down(msg);
}

/* Connect, read-only, and LISTEN.  false (and logged) on failure. */
static bool
db_connect(DbConn *db)
{
	const char *keys[] = {"connect_timeout", "dbname", "fallback_application_name", NULL};
	const char *vals[] = {"5", opt.conninfo, "sdp_dashboard", NULL};
	char	   *channel;
	char		sql[256];
	bool		lost;
	PGresult   *res;

	db->conn = PQconnectdbParams(keys, vals, 1);
	if (db->conn == NULL || PQstatus(db->conn) != CONNECTION_OK)
	{
		char		msg[256];

		snprintf(msg, sizeof(msg), "%s", db->conn ? PQerrorMessage(db->conn) : "out of memory");
		msg[strcspn(msg, "\n")] = '\0';
		if (strcmp(msg, db->last_error[Q_SETUP]) != 0)
			log_error("cannot connect: %s", msg);
		strcpy(db->last_error[Q_SETUP], msg);
		PQfinish(db->conn);
		db->conn = NULL;
		hub_set_db_down(msg);
		return false;
	}
	PQsetNoticeProcessor(db->conn, db_notice, NULL);
	channel = PQescapeIdentifier(db->conn, opt.channel, strlen(opt.channel));
	if (channel == NULL)
	{
		db_disconnect(db, PQerrorMessage(db->conn));
		return false;
	}
	snprintf(sql, sizeof(sql),
			 "SET default_transaction_read_only = on; SET statement_timeout = '10s'; "
			 "SET TimeZone = 'UTC'; LISTEN %s", channel);
	PQfreemem(channel);
	res = PQexec(db->conn, sql);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
	{
		lost = PQstatus(db->conn) == CONNECTION_BAD;
		log_error("cannot LISTEN on %s: %s", opt.channel, PQerrorMessage(db->conn));
		PQclear(res);
		if (lost)
			db_disconnect(db, "lost while setting up");
		else
		{
			PQfinish(db->conn);
			db->conn = NULL;
			hub_set_db_down("cannot LISTEN");
		}
		return false;
	}
	PQclear(res);
	db->last_error[Q_SETUP][0] = '\0';
	log_info("connected to the database, listening on \"%s\"", opt.channel);
	return true;
}

/* A whole table's rows, or an empty array if the query fails. */
static json_t *
db_read_rows(DbConn *db, QueryKind kind, const char *sql, int64_t *cursor, bool *lost)
{
	PGresult   *res = db_query(db, kind, sql, 0, NULL, lost);
	json_t	   *rows;

	if (res == NULL)
		return json_array();
	rows = rows_from_result(res);
	if (cursor)
		*cursor = result_max_cursor(res);
	PQclear(res);
	return rows;
}

/*
 * Read everything after (re)connecting, LISTEN being on already, so that
 * a change committed meanwhile is either in the snapshot or notified (and
 * then sent again only if it differs).  Replaces the cache and sends the
 * snapshot to every client.
 */
static bool
db_load_snapshot(DbConn *db)
{
	bool		lost = false;
	json_t	   *zones,
			   *positions,
			   *alerts,
			   *progress;
	int64_t		cursor = 0;

	zones = db_read_rows(db, Q_ZONES, ZONES_SQL, NULL, &lost);
	if (!lost)
		positions = db_read_rows(db, Q_POSITIONS, POSITIONS_ALL_SQL, &cursor, &lost);
	else
		positions = json_array();
	if (!lost)
		alerts = db_read_rows(db, Q_ZONE_ALERTS, ZONE_ALERTS_SQL, NULL, &lost);
	else
		alerts = json_array();
	if (!lost)
		progress = db_read_rows(db, Q_PROGRESS, PROGRESS_SQL, NULL, &lost);
	else
		progress = json_array();
	if (lost)
	{
		json_decref(zones);
		json_decref(positions);
		json_decref(alerts);
		json_decref(progress);
		db_disconnect(db, PQerrorMessage(db->conn));
		return false;
	}

	db->positions_cursor_us = cursor;
	db->next_progress_ms = monotonic_ms() + PROGRESS_INTERVAL_MS;
	db->next_zones_ms = monotonic_ms() + ZONES_INTERVAL_MS;

	pthread_mutex_lock(&hub.lock);
	json_decref(hub.zones);
	hub.zones = zones;
	json_decref(hub.positions);
	hub.positions = cache_from_rows(positions, "icao24");
	json_decref(hub.zone_alerts);
	hub.zone_alerts = cache_from_rows(alerts, "zone");
	json_decref(hub.progress);
	hub.progress = progress;
	hub.db_state = DB_UP;
	hub.db_error[0] = '\0';
	hub_broadcast_locked("snapshot", snapshot_payload_locked());
	log_info("snapshot: %zu zones, %zu aircraft, %zu zone alerts, %zu flows",
			 json_array_size(zones), json_object_size(hub.positions),
			 json_object_size(hub.zone_alerts), json_array_size(progress));
	pthread_mutex_unlock(&hub.lock);
	json_decref(positions);
	json_decref(alerts);
	return true;
}

/* Merge rows into a cache (by key) and push the rows that changed as one event. */
static void
publish_changes(json_t **cache, json_t *rows, const char *key, const char *event, double notified_at)
{
	json_t	   *changed;

	pthread_mutex_lock(&hub.lock);
	changed = cache_merge_locked(*cache, rows, key);
	if (json_array_size(changed) > 0)
		hub_broadcast_locked(event, json_pack("{s:o, s:f}", "rows", changed, "notified_at", notified_at));
	else
		json_decref(changed);
	pthread_mutex_unlock(&hub.lock);
}

/* The positions written since the newest one seen: pushed if they changed. */
static bool
db_read_positions(DbConn *db, double notified_at)
{
	char		cursor[32];
	const char *params[1] = {cursor};
	bool		lost;
	PGresult   *res;
	json_t	   *rows;
	int64_t		max;

	snprintf(cursor, sizeof(cursor), "%lld", (long long) db->positions_cursor_us);
	res = db_query(db, Q_POSITIONS, POSITIONS_CHANGED_SQL, 1, params, &lost);
	if (res == NULL)
		return !lost;
	rows = rows_from_result(res);
	max = result_max_cursor(res);
	if (max > db->positions_cursor_us)
		db->positions_cursor_us = max;
	PQclear(res);

	publish_changes(&hub.positions, rows, "icao24", "positions", notified_at);
	json_decref(rows);
	return true;
}

/* All of zone_alerts (a row per zone): the rows that changed are pushed. */
static bool
db_read_zone_alerts(DbConn *db, double notified_at)
{
	bool		lost;
	json_t	   *rows = db_read_rows(db, Q_ZONE_ALERTS, ZONE_ALERTS_SQL, NULL, &lost);

	publish_changes(&hub.zone_alerts, rows, "zone", "zone_alerts", notified_at);
	json_decref(rows);
	return !lost;
}

/* A small table read whole and pushed when it differs from the cache. */
static bool
db_refresh_table(DbConn *db, QueryKind kind, const char *sql, json_t **cached,
				 const char *event, const char *field)
{
	bool		lost;
	PGresult   *res = db_query(db, kind, sql, 0, NULL, &lost);
	json_t	   *rows;

	if (res == NULL)
		return !lost;
	rows = rows_from_result(res);
	PQclear(res);
	pthread_mutex_lock(&hub.lock);
	if (!json_equal(*cached, rows))
	{
		json_decref(*cached);
		*cached = rows;
		hub_broadcast_locked(event, json_pack("{s:O}", field, rows));
	}
	else
		json_decref(rows);
	pthread_mutex_unlock(&hub.lock);
	return true;
}

/*
 * Which tables a notification is about, from its payload
 * {"flow": ..., "target": "schema.table", "rows": n}.  A payload we cannot
 * read may be about anything.
 */
static void
classify_notification(const char *payload, bool *positions, bool *alerts)
{
	json_t	   *j = json_loads(payload, 0, NULL);
	const char *target = json_string_value(json_object_get(j, "target"));
	const char *table;

	if (target == NULL)
		*positions = *alerts = true;
	else
	{
		table = strrchr(target, '.');
		table = table ? table + 1 : target;
		if (strcmp(table, "positions") == 0)
			*positions = true;
		else if (strcmp(table, "zone_alerts") == 0)
			*alerts = true;
	}
	json_decref(j);
}

/* Take the notifications libpq has received, noting which tables they are about. */
static void
db_collect_notifications(DbConn *db, bool *positions, bool *alerts, double *notified_at)
{
	PGnotify   *n;

	while ((n = PQnotifies(db->conn)) != NULL)
	{
		if (*notified_at == 0)
			*notified_at = wall_ms();
		classify_notification(n->extra, positions, alerts);
		PQfreemem(n);
	}
}

/*
 * Wait for notifications (or the next poll), then read what they announce.
 * Notifications that arrive while we read are coalesced into the next
 * read.  false when the connection is lost.
 */
static bool
db_wait_and_process(DbConn *db)
{
	struct pollfd p = {.fd = PQsocket(db->conn), .events = POLLIN};
	int64_t		now = monotonic_ms();
	int64_t		timeout = CLIENT_WAIT_MS;	/* also how soon we see stopping */
	bool		want_positions = false;
	bool		want_alerts = false;
	double		notified_at = 0;

	/*
	 * Notifications that came in with the results of our last queries are
	 * in libpq's list already, not in the socket: take them first, and wait
	 * only if there are none.
	 */
	db_collect_notifications(db, &want_positions, &want_alerts, &notified_at);
	if (db->next_progress_ms - now < timeout)
		timeout = db->next_progress_ms - now;
	if (db->next_zones_ms - now < timeout)
		timeout = db->next_zones_ms - now;
	if (timeout < 0 || want_positions || want_alerts)
		timeout = 0;
	if (poll(&p, 1, (int) timeout) < 0 && errno != EINTR)
	{
		db_disconnect(db, strerror(errno));
		return false;
	}
	if (p.revents != 0)
	{
		if (!PQconsumeInput(db->conn) || PQstatus(db->conn) == CONNECTION_BAD)
		{
			db_disconnect(db, PQerrorMessage(db->conn));
			return false;
		}
		db_collect_notifications(db, &want_positions, &want_alerts, &notified_at);
	}

	if ((want_positions && !db_read_positions(db, notified_at)) ||
		(want_alerts && !db_read_zone_alerts(db, notified_at)))
	{
		db_disconnect(db, PQerrorMessage(db->conn));
		return false;
	}

	now = monotonic_ms();
	if (now >= db->next_progress_ms)
	{
		db->next_progress_ms = now + PROGRESS_INTERVAL_MS;
		if (!db_refresh_table(db, Q_PROGRESS, PROGRESS_SQL, &hub.progress, "progress", "flows"))
		{
			db_disconnect(db, PQerrorMessage(db->conn));
			return false;
		}
	}
	if (now >= db->next_zones_ms)
	{
		db->next_zones_ms = now + ZONES_INTERVAL_MS;
		if (!db_refresh_table(db, Q_ZONES, ZONES_SQL, &hub.zones, "zones", "zones"))
		{
			db_disconnect(db, PQerrorMessage(db->conn));
			return false;
		}
	}
	return true;
}

/* Sleep, waking early when the program stops. */
static void
sleep_unless_stopping(int ms)
{
	while (ms > 0 && !atomic_load(&stopping))
	{
		int			step = ms < 50 ? ms : 50;

		usleep((useconds_t) step * 1000);
		ms -= step;
	}
}

static void *
db_thread_main(void *arg)
{
	DbConn		db;
	int			backoff = BACKOFF_MIN_MS;

	memset(&db, 0, sizeof(db));
	while (!atomic_load(&stopping))
	{
		if (db.conn == NULL)
		{
			if (!db_connect(&db))
			{
				sleep_unless_stopping(backoff);
				backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
				continue;
			}
			if (!db_load_snapshot(&db))
			{
				sleep_unless_stopping(backoff);
				continue;
			}
			backoff = BACKOFF_MIN_MS;
		}
		db_wait_and_process(&db);
	}
	PQfinish(db.conn);
	return NULL;
}

/* ---------------------------------------------------------------------
 * Start and stop
 * ---------------------------------------------------------------------
 */

static void
usage(FILE *out)
{
	fprintf(out,
			"Usage: sdp_dashboard [--listen ADDR:PORT] [--db CONNINFO] [--channel NAME]\n"
			"                     [--www DIR] [--quiet]\n"
			"\n"
			"Serves the live flight dashboard: LISTENs on CHANNEL (default flights), reads\n"
			"what the flows wrote and pushes it to browsers over Server-Sent Events.\n"
			"\n"
			"  --listen ADDR:PORT  where to listen (default 127.0.0.1:8080; port 0: any free)\n"
			"  --db CONNINFO       libpq connection string (default: PG* variables)\n"
			"  --channel NAME      the flows' \"notify\" channel (default flights)\n"
			"  --www DIR           static files (default: dashboard_www beside the program)\n"
			"  --quiet             log errors only\n");
}

/* The directory of the executable + "/dashboard_www". */
static char *
default_www_dir(void)
{
	char		exe[PATH_MAX];
	ssize_t		len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	char	   *slash;
	char	   *dir;

	if (len <= 0)
		return strdup("dashboard_www");
	exe[len] = '\0';
	slash = strrchr(exe, '/');
	if (slash)
		*slash = '\0';
	dir = malloc(strlen(exe) + sizeof("/dashboard_www"));
	if (dir)
		sprintf(dir, "%s/dashboard_www", exe);
	return dir;
}

/* "ADDR:PORT", "[V6ADDR]:PORT" -> a socket address; the host for the URL. */
static bool
parse_listen(const char *spec, struct sockaddr_storage *addr, char *host, size_t hostlen,
			 unsigned short *port)
{
	const char *colon = strrchr(spec, ':');
	struct addrinfo hints;
	struct addrinfo *ai;
	char		service[16];
	size_t		len;
	char	   *end;
	long		p;

	if (colon == NULL || colon == spec)
		return false;
	len = (size_t) (colon - spec);
	if (spec[0] == '[' && colon[-1] == ']')
	{
		spec++;
		len -= 2;
	}
	if (len == 0 || len >= hostlen)
		return false;
	memcpy(host, spec, len);
	host[len] = '\0';
	p = strtol(colon + 1, &end, 10);
	if (*end != '\0' || end == colon + 1 || p < 0 || p > 65535)
		return false;
	*port = (unsigned short) p;
	snprintf(service, sizeof(service), "%ld", p);
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
	if (getaddrinfo(host, service, &hints, &ai) != 0)
		return false;
	memcpy(addr, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	return true;
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"listen", required_argument, NULL, 'l'},
		{"db", required_argument, NULL, 'd'},
		{"channel", required_argument, NULL, 'c'},
		{"www", required_argument, NULL, 'w'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	struct sockaddr_storage addr;
	char		host[256];
	unsigned short port;
	struct MHD_Daemon *daemon;
	const union MHD_DaemonInfo *dinfo;
	unsigned int flags;
	pthread_t	db_thread;
	sigset_t	sigs;
	int			sig;
	int			c;
	struct stat st;

	while ((c = getopt_long(argc, argv, "l:d:c:w:qh", longopts, NULL)) != -1)
	{
		switch (c)
		{
			case 'l':
				opt.listen = optarg;
				break;
			case 'd':
				opt.conninfo = optarg;
				break;
			case 'c':
				opt.channel = optarg;
				break;
			case 'w':
				opt.www = strdup(optarg);
				break;
			case 'q':
				opt.quiet = true;
				break;
			case 'h':
				usage(stdout);
				return 0;
			default:
				usage(stderr);
				return 2;
		}
	}
	if (optind < argc)
	{
		usage(stderr);
		return 2;
	}
	if (opt.channel[0] == '\0')
	{
		log_error("--channel must not be empty");
		return 2;
	}
	if (opt.www == NULL)
		opt.www = default_www_dir();
	if (opt.www == NULL || stat(opt.www, &st) != 0 || !S_ISDIR(st.st_mode))
	{
		log_error("no directory of static files at %s (--www)", opt.www ? opt.www : "?");
		return 1;
	}
	if (!parse_listen(opt.listen, &addr, host, sizeof(host), &port))
	{
		log_error("invalid --listen \"%s\": expected ADDR:PORT", opt.listen);
		return 2;
	}

	/* Signals: SIGPIPE ignored; SIGINT, SIGTERM, SIGHUP for main's sigwait only. */
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);

	keepalive_event = sse_event_static(": keepalive\n\n");
	{
		char		retry[32];

		snprintf(retry, sizeof(retry), "retry: %d\n\n", SSE_RETRY_MS);
		retry_event = sse_event_static(retry);
	}
	hub.zones = json_array();
	hub.positions = json_object();
	hub.zone_alerts = json_object();
	hub.progress = json_array();
	hub.db_state = DB_CONNECTING;
	strcpy(hub.db_error, "connecting");

	flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
		MHD_USE_POLL | MHD_USE_ERROR_LOG;
	if (addr.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	daemon = MHD_start_daemon(flags, port, NULL, NULL, handle_request, NULL,
							  MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
							  MHD_OPTION_SOCK_ADDR, (struct sockaddr *) &addr,
							  MHD_OPTION_CONNECTION_LIMIT, (unsigned int) MAX_CONNECTIONS,
							  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int) CONNECTION_TIMEOUT_S,
							  MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t) (2 * SSE_BLOCK_SIZE),
							  MHD_OPTION_END);
	if (daemon == NULL)
	{
		log_error("cannot listen on %s: %s", opt.listen, strerror(errno));
		return 1;
	}
	dinfo = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
	if (dinfo && dinfo->port)
		port = dinfo->port;

	if (pthread_create(&db_thread, NULL, db_thread_main, NULL) != 0)
	{
		log_error("cannot start the database thread");
		MHD_stop_daemon(daemon);
		return 1;
	}

	printf("dashboard: http://%s%s%s:%u/\n", strchr(host, ':') ? "[" : "", host,
		   strchr(host, ':') ? "]" : "", (unsigned int) port);
	fflush(stdout);
	log_info("serving %s, channel \"%s\"", opt.www, opt.channel);

	/* Wait for the end, then stop the streams, the DB thread and the server. */
	while (sigwait(&sigs, &sig) != 0)
		;
	log_info("stopping (signal %d)", sig);
	atomic_store(&stopping, true);
	pthread_mutex_lock(&hub.lock);
	for (SseClient *cl = hub.clients; cl != NULL; cl = cl->next)
		pthread_cond_signal(&cl->wake);
	pthread_mutex_unlock(&hub.lock);
	pthread_join(db_thread, NULL);
	MHD_stop_daemon(daemon);

	json_decref(hub.zones);
	json_decref(hub.positions);
	json_decref(hub.zone_alerts);
	json_decref(hub.progress);
	free(keepalive_event);
	free(retry_event);
	free(opt.www);
	return 0;
}

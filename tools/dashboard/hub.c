/*-------------------------------------------------------------------------
 *
 * hub.c
 *	  The event hub of tools/sdp_dashboard: the browsers' event streams
 *	  (Server-Sent Events, GET /events), their queues, and the fan-out of
 *	  every event to all of them.
 *
 * The DB thread (db.c) queues an event for every client with
 * hub_broadcast_locked(); an event is serialised once and shared by the
 * queues (reference count, under hub.lock).  Each stream is read by its
 * connection's own libmicrohttpd thread (sse_read), which sleeps on its
 * client's condition variable until an event is queued for it, and looks
 * every CLIENT_WAIT_MS whether the browser has gone.  A new client gets a
 * snapshot of the cached state first, then the changes.
 *
 * Queues are bounded: a client that does not read falls behind and, past
 * CLIENT_QUEUE_EVENTS events or CLIENT_QUEUE_BYTES bytes, is dropped (its
 * socket shut down); nobody waits for it.
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <microhttpd.h>

#include "dashboard.h"

#define CLIENT_QUEUE_EVENTS		4096	/* events queued for one browser, at most */
#define CLIENT_QUEUE_BYTES		(16 * 1024 * 1024)	/* and bytes */
#define KEEPALIVE_MS			15000	/* an SSE comment after this much silence */
#define MAX_CLIENTS				64		/* event streams at once */
#define SSE_RETRY_MS			1000	/* the browser reconnects after this */

/* One serialised event, shared by the queues that hold it. */
typedef struct SseEvent
{
	int			refcount;		/* holders, under hub.lock; < 0: static */
	size_t		len;
	char		text[];			/* "event: NAME\ndata: JSON\n\n" */
} SseEvent;

/* One browser's event stream. */
struct SseClient
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
};

Hub			hub = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Events any stream may hold without counting: made by hub_init(), freed at exit. */
static SseEvent *keepalive_event;	/* an SSE comment */
static SseEvent *retry_event;	/* how soon the browser reconnects */

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
void
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
json_t *
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


/*
 * MHD's content reader for an event stream, run by the connection's own
 * thread: wait for an event, a keepalive, the browser leaving, or the end.
 */
ssize_t
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
void
sse_free(void *cls)
{
	SseClient  *c = cls;

	pthread_mutex_lock(&hub.lock);
	client_unlist_locked(c);
	client_clear_queue_locked(c);
	log_info("client %llu (%s) closed, %d left", (unsigned long long) c->id, c->peer,
			 hub.nclients);
	pthread_mutex_unlock(&hub.lock);
	client_free(c);
}

/* A client for the stream on socket fd, not listed yet; NULL without memory. */
SseClient *
client_new(int fd, const char *peer)
{
	SseClient  *c = calloc(1, sizeof(SseClient));
	pthread_condattr_t attr;

	if (c == NULL)
		return NULL;
	c->fd = fd;
	snprintf(c->peer, sizeof(c->peer), "%s", peer);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&c->wake, &attr);
	pthread_condattr_destroy(&attr);
	c->last_write_ms = monotonic_ms();
	return c;
}

/* Free a client that is not listed (any more). */
void
client_free(SseClient *c)
{
	pthread_cond_destroy(&c->wake);
	free(c);
}

/*
 * List a new client with the retry delay and the snapshot queued, under one
 * lock: it gets every change after the snapshot and none before.  false if
 * there are MAX_CLIENTS already.
 */
bool
hub_add_client(SseClient *c)
{
	SseEvent   *snap;

	pthread_mutex_lock(&hub.lock);
	if (hub.nclients >= MAX_CLIENTS)
	{
		pthread_mutex_unlock(&hub.lock);
		return false;
	}
	c->id = ++hub.next_client_id;
	c->next = hub.clients;
	if (hub.clients)
		hub.clients->prev = c;
	hub.clients = c;
	c->listed = true;
	hub.nclients++;
	client_enqueue_locked(c, retry_event);
	snap = sse_event_new("snapshot", snapshot_payload_locked());
	if (snap != NULL)
	{
		client_enqueue_locked(c, snap);
		event_release_locked(snap);
	}
	log_info("client %llu (%s) connected, %d streaming", (unsigned long long) c->id,
			 c->peer, hub.nclients);
	pthread_mutex_unlock(&hub.lock);
	return true;
}

/* The static events and an empty cache, before any thread starts. */
void
hub_init(void)
{
	char		retry[32];

	keepalive_event = sse_event_static(": keepalive\n\n");
	snprintf(retry, sizeof(retry), "retry: %d\n\n", SSE_RETRY_MS);
	retry_event = sse_event_static(retry);
	hub.zones = json_array();
	hub.positions = json_object();
	hub.zone_alerts = json_object();
	hub.progress = json_array();
	hub.db_state = DB_CONNECTING;
	strcpy(hub.db_error, "connecting");
}

/* Wake every stream, so that it sees stopping and ends. */
void
hub_wake_all(void)
{
	pthread_mutex_lock(&hub.lock);
	for (SseClient *cl = hub.clients; cl != NULL; cl = cl->next)
		pthread_cond_signal(&cl->wake);
	pthread_mutex_unlock(&hub.lock);
}

/* Free the cache and the static events, once every thread is done. */
void
hub_free(void)
{
	json_decref(hub.zones);
	json_decref(hub.positions);
	json_decref(hub.zone_alerts);
	json_decref(hub.progress);
	free(keepalive_event);
	free(retry_event);
}

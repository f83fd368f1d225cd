/*-------------------------------------------------------------------------
 *
 * db.c
 *	  The database reader of tools/sdp_dashboard: one thread, the DB
 *	  thread, a read-only libpq client that keeps the hub's cache of what
 *	  the page shows and pushes the changes.
 *
 * The flows of examples/flights.sql NOTIFY a channel (flow option
 * "notify") in every transaction that writes rows, delivered at commit.
 * The DB thread LISTENs on it; on a notification it reads what changed
 * (the positions rows as new as the newest it has seen or newer, and all
 * of zone_alerts, which is tiny), merges them into the cache and pushes
 * the rows that changed to every browser (hub_broadcast_locked).  It also
 * reads the progress of every flow once a second and the zones every five
 * seconds, and pushes them when they change.  When the connection is lost
 * it says so to the browsers, reconnects with a backoff (200 ms doubling
 * to 2 s), LISTENs again and sends everyone a fresh snapshot.
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
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "dashboard.h"

#define PROGRESS_INTERVAL_MS	1000
#define ZONES_INTERVAL_MS		5000
#define BACKOFF_MIN_MS			200
#define BACKOFF_MAX_MS			2000

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

/* The DB thread: connect, snapshot, then follow the changes until stopping. */
void *
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

/*-------------------------------------------------------------------------
 *
 * http.c
 *	  The HTTP side of tools/sdp_dashboard: a libmicrohttpd server with a
 *	  thread per connection.
 *
 * Paths: GET /events (an event stream, handed to the hub: hub.c), GET
 * /health (JSON for tests and monitoring), GET /zones, and the static
 * files of --www by their plain names (/ is index.html).
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE

#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <microhttpd.h>

#include "dashboard.h"

#define MAX_CONNECTIONS			128		/* HTTP connections at once */
#define CONNECTION_TIMEOUT_S	60		/* an idle (or stuck) connection is closed */
#define SSE_BLOCK_SIZE			(64 * 1024)

/* libmicrohttpd's messages, silenced by --quiet. */
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
/* A new event stream: a client of the hub, which sends it the snapshot first. */
static enum MHD_Result
serve_events(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *info;
	struct MHD_Response *resp;
	char		peer[64];
	int			fd;
	SseClient  *c;
	enum MHD_Result ret;

	info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	fd = info ? info->connect_fd : -1;
	info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	if (info == NULL || info->client_addr == NULL ||
		getnameinfo(info->client_addr,
					info->client_addr->sa_family == AF_INET6 ?
					sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in),
					peer, sizeof(peer), NULL, 0, NI_NUMERICHOST) != 0)
		strcpy(peer, "?");
	c = client_new(fd, peer);
	if (c == NULL)
		return MHD_NO;
	if (!hub_add_client(c))
	{
		client_free(c);
		return send_buffer(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain",
						   "too many event streams\n");
	}

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

/*
 * Start the server on addr (port: its port, 0 for any free one); NULL, with
 * errno set, if it cannot listen.
 */
struct MHD_Daemon *
http_start(const struct sockaddr_storage *addr, unsigned short port)
{
	unsigned int flags;

	flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
		MHD_USE_POLL | MHD_USE_ERROR_LOG;
	if (addr->ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	return MHD_start_daemon(flags, port, NULL, NULL, handle_request, NULL,
							MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
							MHD_OPTION_SOCK_ADDR, (struct sockaddr *) addr,
							MHD_OPTION_CONNECTION_LIMIT, (unsigned int) MAX_CONNECTIONS,
							MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int) CONNECTION_TIMEOUT_S,
							MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t) (2 * SSE_BLOCK_SIZE),
							MHD_OPTION_END);
}

/*-------------------------------------------------------------------------
 *
 * main.c
 *	  tools/sdp_dashboard, the live dashboard of the flight demo: a
 *	  read-only database client that pushes what the flows write to
 *	  browsers.  This file: the options, logging and clocks, startup and
 *	  shutdown.
 *
 * Three parts run at once: the DB thread (db.c) LISTENs for the flows'
 * notifications and reads what changed into the hub's cache; the hub
 * (hub.c) fans each change out to every browser's event stream; the HTTP
 * server (http.c, libmicrohttpd, a thread per connection) serves the
 * streams, /health, /zones and the page.  The main thread only waits for
 * SIGINT, SIGTERM or SIGHUP, then stops the streams, the DB thread and the
 * server, in that order.
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "dashboard.h"

DashboardOptions opt = {"127.0.0.1:8080", NULL, "flights", NULL, false};

atomic_bool stopping;

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
void
log_info(const char *fmt,...)
{
	va_list		ap;

	if (opt.quiet)
		return;
	va_start(ap, fmt);
	log_line(fmt, ap);
	va_end(ap);
}

void
log_error(const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	log_line(fmt, ap);
	va_end(ap);
}

int64_t
monotonic_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Milliseconds since the epoch, with a fraction: what the page compares. */
double
wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double) ts.tv_sec * 1000.0 + (double) ts.tv_nsec / 1e6;
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

	hub_init();
	daemon = http_start(&addr, port);
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
	hub_wake_all();
	pthread_join(db_thread, NULL);
	MHD_stop_daemon(daemon);
	hub_free();
	free(opt.www);
	return 0;
}

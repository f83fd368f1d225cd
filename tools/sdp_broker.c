/*
 * sdp_broker.c
 *      An embedded Kafka-protocol broker for tests and the demo.
 *
 * It hosts librdkafka's mock cluster (rdkafka_mock.h) in a small process, so
 * tests, benchmarks and the demo need no real Kafka.  Any Kafka client (kcat,
 * librdkafka, the extension) talks to it over TCP on 127.0.0.1.
 *
 *   sdp_broker [--brokers N] [--topic NAME:PARTITIONS]... [--addr-file FILE]
 *              [--control FIFO] [--exit-with-parent] [--debug] [--quiet]
 *
 * Start-up: creates each topic, prints "bootstrap=HOST:PORT[,...]" on stdout,
 * then writes the same bootstrap string to --addr-file atomically (temporary
 * file and rename), so whoever waits for that file can use the topics at once.
 *
 * It runs until SIGTERM, SIGINT or the "quit" command; it then removes the
 * address file and the FIFO and exits 0.  With --exit-with-parent (Linux) it
 * also gets SIGTERM when the process that started it dies, so a test killed
 * by SIGKILL leaves no broker behind.
 *
 * Fault injection, one command per line written to the control FIFO
 * (created if missing):
 *
 *   down ID|all          rd_kafka_mock_broker_set_down
 *   up ID|all            rd_kafka_mock_broker_set_up
 *   rtt ID|all MS        rd_kafka_mock_broker_set_rtt (added response delay)
 *   topic NAME PARTS     create a topic
 *   errors API N CODE    the next N requests of Kafka API key API (e.g. 2,
 *                        ListOffsets) fail with error CODE, whichever broker
 *                        they reach (rd_kafka_mock_push_request_errors)
 *   quit                 stop the broker
 *
 * Each applied command is acknowledged with "ok <command>" on stdout (words
 * separated by single spaces); a bad one gets "error <reason>".  SIGUSR1 takes
 * all brokers down and SIGUSR2 brings them up again ("ok down all" and
 * "ok up all").  Broker ids run from 1 to N.
 *
 * What the mock does (librdkafka 2.0.2, checked by experiment):
 *
 * - "down" closes the broker's listening socket and every open client
 *   connection.  New connections are refused ("Connection refused"), so
 *   nothing reaches the log while a broker is down: a producer's messages stay
 *   queued and either time out (message.timeout.ms) or are delivered after
 *   "up"; a consumer's fetches fail and it keeps retrying.  kcat without -E
 *   exits ("All broker connections are down") when every broker is down.
 * - "up" listens again on the same port.  Producers and consumers reconnect on
 *   their own and carry on where they were, but only at their next reconnect
 *   attempt: with librdkafka's default reconnect.backoff.max.ms (10 s) a
 *   consumer came back 5-8 s after a 3 s outage; with
 *   reconnect.backoff.max.ms=500 within about 0.1 s.  Leadership never moves.
 * - Data lives in memory only.  Each partition keeps at most ~5 MiB (and at
 *   most 100,000 produce batches); older batches are deleted, advancing the
 *   log start offset, as retention would.  Size test backlogs to that or use
 *   more partitions.
 * - A Fetch that finds no data is answered only after the consumer's full
 *   fetch.wait.max.ms, even if data arrives meanwhile, and one Fetch returns
 *   at most one produce batch per partition.  Consumers that want low latency
 *   must set fetch.wait.max.ms small.
 * - Message timestamps are the producer's CreateTime; the mock has no
 *   LogAppendTime and cannot look offsets up by timestamp.
 * - The Topic Admin API (CreateTopics) is not supported: create topics here
 *   (--topic or the "topic" command).  Metadata requests for an unknown topic
 *   auto-create it with 4 partitions (the mock's default).
 *
 * Signals are blocked in every thread and taken only by ppoll() in the main
 * loop; the handlers just set flags and no librdkafka call ever runs in a
 * signal handler.
 */
#define _GNU_SOURCE				/* ppoll */

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <unistd.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

/*
 * Of producer.c the broker uses only fatal() (which exits 1 here, as it always
 * has), vprint_message() and the stop request; the rest is the generators'.
 */
#include "producer.h"

const char tool_name[] = "sdp_broker";
const int fatal_exit_status = 1;

#define MAX_TOPICS		64
#define MAX_BROKERS		64
#define MAX_COMMAND_LEN 1024

typedef struct TopicSpec
{
	const char *name;
	int			partitions;
} TopicSpec;

typedef struct BrokerOptions
{
	int			brokers;
	int			ntopics;
	TopicSpec	topics[MAX_TOPICS];
	const char *addr_file;
	const char *control_fifo;
	bool		exit_with_parent;
	bool		debug;
	bool		quiet;
} BrokerOptions;

/*
 * Set by signal handlers, acted upon in the main loop, like stop_requested
 * (SIGTERM, SIGINT) from producer.c.
 */
static volatile sig_atomic_t got_down_all = 0;
static volatile sig_atomic_t got_up_all = 0;

static BrokerOptions opts;
static rd_kafka_t *host_rk;
static rd_kafka_mock_cluster_t *mcluster;
static bool quit_requested = false;

static void
handle_usr1(int signo)
{
	got_down_all = 1;
}

static void
handle_usr2(int signo)
{
	got_up_all = 1;
}

static void
usage(FILE *out)
{
	fprintf(out,
			"Usage: sdp_broker [OPTION]...\n"
			"Run an in-memory Kafka-protocol broker (librdkafka mock cluster).\n\n"
			"  --brokers N             number of brokers (default 1)\n"
			"  --topic NAME:PARTS      create a topic (repeatable)\n"
			"  --addr-file FILE        write the bootstrap servers to FILE\n"
			"  --control FIFO          read fault injection commands from FIFO\n"
			"  --exit-with-parent      stop when the parent process dies (Linux)\n"
			"  --debug                 librdkafka debug logging of the mock\n"
			"  --quiet                 no informational messages on stderr\n\n"
			"Commands: down ID|all, up ID|all, rtt ID|all MS, topic NAME PARTS, quit\n");
}

static void info(const char *fmt,...) __attribute__((format(printf, 1, 2)));

static void
info(const char *fmt,...)
{
	va_list		ap;

	if (opts.quiet)
		return;
	va_start(ap, fmt);
	vprint_message(fmt, ap);
	va_end(ap);
}

/* Parse a decimal integer in [min, max]; false if it is not one. */
static bool
parse_int(const char *s, long min, long max, long *result)
{
	char	   *end;
	long		v;

	if (s == NULL || *s == '\0')
		return false;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < min || v > max)
		return false;
	*result = v;
	return true;
}

static void
parse_topic_spec(const char *arg, TopicSpec *spec)
{
	const char *colon = strrchr(arg, ':');
	size_t		namelen = colon ? (size_t) (colon - arg) : strlen(arg);
	long		parts = 1;
	char	   *name;

	if (colon != NULL && !parse_int(colon + 1, 1, 10000, &parts))
		fatal("invalid partition count in --topic \"%s\"", arg);
	if (namelen == 0)
		fatal("empty topic name in --topic \"%s\"", arg);
	name = malloc(namelen + 1);
	if (name == NULL)
		fatal("out of memory");
	memcpy(name, arg, namelen);
	name[namelen] = '\0';
	spec->name = name;
	spec->partitions = (int) parts;
}

static void
parse_options(int argc, char **argv)
{
	static const struct option long_options[] = {
		{"brokers", required_argument, NULL, 'b'},
		{"topic", required_argument, NULL, 't'},
		{"addr-file", required_argument, NULL, 'a'},
		{"control", required_argument, NULL, 'c'},
		{"exit-with-parent", no_argument, NULL, 'p'},
		{"debug", no_argument, NULL, 'd'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	int			c;
	long		v;

	opts.brokers = 1;
	while ((c = getopt_long(argc, argv, "b:t:a:c:pdqh", long_options, NULL)) != -1)
	{
		switch (c)
		{
			case 'b':
				if (!parse_int(optarg, 1, MAX_BROKERS, &v))
					fatal("--brokers must be between 1 and %d", MAX_BROKERS);
				opts.brokers = (int) v;
				break;
			case 't':
				if (opts.ntopics >= MAX_TOPICS)
					fatal("too many --topic options (at most %d)", MAX_TOPICS);
				parse_topic_spec(optarg, &opts.topics[opts.ntopics++]);
				break;
			case 'a':
				opts.addr_file = optarg;
				break;
			case 'c':
				opts.control_fifo = optarg;
				break;
			case 'p':
				opts.exit_with_parent = true;
				break;
			case 'd':
				opts.debug = true;
				break;
			case 'q':
				opts.quiet = true;
				break;
			case 'h':
				usage(stdout);
				exit(0);
			default:
				usage(stderr);
				exit(2);
		}
	}
	if (optind < argc)
	{
		usage(stderr);
		exit(2);
	}
}

/* Print one line on stdout and flush it: tests wait for these lines. */
static void reply(const char *fmt,...) __attribute__((format(printf, 1, 2)));

static void
reply(const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vfprintf(stdout, fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
	fflush(stdout);
}

/*
 * TCP_NODELAY on the brokers' listening sockets, which the connections they
 * accept inherit (Linux).  librdkafka 2.0's mock leaves Nagle's algorithm on
 * for its connections: a response written while the previous one is not yet
 * acknowledged waited for the client's delayed ACK, about 40 ms, whenever a
 * client had several requests in flight on a connection (a producer writing
 * to several partitions of a broker).  A Kafka broker sets TCP_NODELAY.  The
 * process has no other TCP socket at this point: the host handle never
 * connects anywhere.
 */
static void
disable_nagle(void)
{
	for (int fd = 0; fd < 1024; fd++)
	{
		struct sockaddr_storage addr;
		socklen_t	len = sizeof(addr);
		int			type;
		socklen_t	tlen = sizeof(type);
		int			one = 1;

		if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) == 0 && type == SOCK_STREAM &&
			getsockname(fd, (struct sockaddr *) &addr, &len) == 0 &&
			(addr.ss_family == AF_INET || addr.ss_family == AF_INET6))
			(void) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
}

/*
 * Create the librdkafka handle that hosts the mock cluster, and the cluster.
 * The handle never connects anywhere; it is only the mock's home.
 */
static void
start_mock_cluster(void)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	char		errstr[512];

	/* Level 4 hides the "no bootstrap.servers" notice of the host handle. */
	if (rd_kafka_conf_set(conf, "log_level", opts.quiet ? "3" : "4",
						  errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK ||
		(opts.debug &&
		 rd_kafka_conf_set(conf, "debug", "mock", errstr,
						   sizeof(errstr)) != RD_KAFKA_CONF_OK))
		fatal("%s", errstr);
	if (opts.debug)
		rd_kafka_conf_set(conf, "log_level", "7", errstr, sizeof(errstr));

	host_rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
	if (host_rk == NULL)
		fatal("could not create librdkafka handle: %s", errstr);

	mcluster = rd_kafka_mock_cluster_new(host_rk, opts.brokers);
	if (mcluster == NULL)
		fatal("could not create the mock cluster");
	disable_nagle();
}

static rd_kafka_resp_err_t
create_topic(const char *name, int partitions)
{
	int			replication = opts.brokers < 3 ? opts.brokers : 3;

	return rd_kafka_mock_topic_create(mcluster, name, partitions, replication);
}

/* Write the bootstrap string to the address file via a rename. */
static void
write_addr_file(const char *path, const char *bootstrap)
{
	char		tmp[PATH_MAX];
	FILE	   *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int) getpid());
	f = fopen(tmp, "w");
	if (f == NULL)
		fatal("could not create \"%s\": %s", tmp, strerror(errno));
	fprintf(f, "%s\n", bootstrap);
	if (fclose(f) != 0)
		fatal("could not write \"%s\": %s", tmp, strerror(errno));
	if (rename(tmp, path) != 0)
		fatal("could not rename \"%s\" to \"%s\": %s", tmp, path, strerror(errno));
}

/* Open the control FIFO for reading without waiting for a writer. */
static int
open_control_fifo(void)
{
	int			fd = open(opts.control_fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0)
		fatal("could not open control FIFO \"%s\": %s",
			  opts.control_fifo, strerror(errno));
	return fd;
}

static void
create_control_fifo(void)
{
	struct stat st;

	if (stat(opts.control_fifo, &st) == 0)
	{
		if (!S_ISFIFO(st.st_mode))
			fatal("\"%s\" exists and is not a FIFO", opts.control_fifo);
		return;
	}
	if (mkfifo(opts.control_fifo, 0600) != 0)
		fatal("could not create FIFO \"%s\": %s",
			  opts.control_fifo, strerror(errno));
}

/*
 * Resolve "ID" or "all" to a range of broker ids.  Ids are checked here
 * rather than left to the mock, which does not complain about all of them.
 */
static bool
parse_broker_target(const char *word, int *first, int *last)
{
	long		id;

	if (strcmp(word, "all") == 0)
	{
		*first = 1;
		*last = opts.brokers;
		return true;
	}
	if (!parse_int(word, 1, opts.brokers, &id))
		return false;
	*first = *last = (int) id;
	return true;
}

typedef enum BrokerAction
{
	BROKER_DOWN,
	BROKER_UP,
	BROKER_RTT
} BrokerAction;

static rd_kafka_resp_err_t
apply_broker_action(BrokerAction action, int first, int last, int rtt_ms)
{
	for (int id = first; id <= last; id++)
	{
		rd_kafka_resp_err_t err;

		switch (action)
		{
			case BROKER_DOWN:
				err = rd_kafka_mock_broker_set_down(mcluster, id);
				break;
			case BROKER_UP:
				err = rd_kafka_mock_broker_set_up(mcluster, id);
				break;
			case BROKER_RTT:
			default:
				err = rd_kafka_mock_broker_set_rtt(mcluster, id, rtt_ms);
				break;
		}
		if (err)
			return err;
	}
	return RD_KAFKA_RESP_ERR_NO_ERROR;
}

/*
 * Apply one command line and acknowledge it on stdout.  The echo after "ok"
 * is the command's words joined by single spaces.
 */
static void
run_command(char *line)
{
	char	   *words[4];
	int			nwords = 0;
	char		canonical[MAX_COMMAND_LEN];
	char	   *save = NULL;
	char	   *w;
	size_t		len = 0;
	int			first,
				last;
	long		num;
	rd_kafka_resp_err_t err;

	for (w = strtok_r(line, " \t\r", &save); w != NULL;
		 w = strtok_r(NULL, " \t\r", &save))
	{
		if (nwords == 4)
		{
			reply("error too many words in command");
			return;
		}
		words[nwords++] = w;
		len += snprintf(canonical + len, sizeof(canonical) - len, "%s%s",
						nwords > 1 ? " " : "", w);
		if (len >= sizeof(canonical))
			len = sizeof(canonical) - 1;
	}
	if (nwords == 0)
		return;					/* blank line */

	if (strcmp(words[0], "down") == 0 || strcmp(words[0], "up") == 0)
	{
		BrokerAction action = words[0][0] == 'd' ? BROKER_DOWN : BROKER_UP;

		if (nwords != 2)
		{
			reply("error usage: %s ID|all", words[0]);
			return;
		}
		if (!parse_broker_target(words[1], &first, &last))
		{
			reply("error no broker \"%s\" (ids are 1..%d or all)",
				  words[1], opts.brokers);
			return;
		}
		err = apply_broker_action(action, first, last, 0);
	}
	else if (strcmp(words[0], "rtt") == 0)
	{
		if (nwords != 3)
		{
			reply("error usage: rtt ID|all MS");
			return;
		}
		if (!parse_broker_target(words[1], &first, &last))
		{
			reply("error no broker \"%s\" (ids are 1..%d or all)",
				  words[1], opts.brokers);
			return;
		}
		if (!parse_int(words[2], 0, 3600 * 1000, &num))
		{
			reply("error invalid rtt \"%s\"", words[2]);
			return;
		}
		err = apply_broker_action(BROKER_RTT, first, last, (int) num);
	}
	else if (strcmp(words[0], "topic") == 0)
	{
		if (nwords != 3)
		{
			reply("error usage: topic NAME PARTITIONS");
			return;
		}
		if (!parse_int(words[2], 1, 10000, &num))
		{
			reply("error invalid partition count \"%s\"", words[2]);
			return;
		}
		err = create_topic(words[1], (int) num);
	}
	else if (strcmp(words[0], "errors") == 0)
	{
		long		api,
					code;

		if (nwords != 4)
		{
			reply("error usage: errors API N CODE");
			return;
		}
		if (!parse_int(words[1], 0, 100, &api) || !parse_int(words[2], 1, 100000, &num) ||
			!parse_int(words[3], 1, 200, &code))
		{
			reply("error invalid API key, count or error code in \"%s\"", canonical);
			return;
		}
		for (long i = 0; i < num; i++)
			rd_kafka_mock_push_request_errors(mcluster, (int16_t) api, 1, (rd_kafka_resp_err_t) code);
		err = RD_KAFKA_RESP_ERR_NO_ERROR;
	}
	else if (strcmp(words[0], "quit") == 0)
	{
		if (nwords != 1)
		{
			reply("error usage: quit");
			return;
		}
		quit_requested = true;
		err = RD_KAFKA_RESP_ERR_NO_ERROR;
	}
	else
	{
		reply("error unknown command \"%s\"", words[0]);
		return;
	}

	if (err)
		reply("error %s: %s", canonical, rd_kafka_err2str(err));
	else
	{
		info("%s", canonical);
		reply("ok %s", canonical);
	}
}

/*
 * Read what is available on the FIFO and run each complete line.  Returns
 * false at end of file (the last writer closed), after running a final
 * unterminated line if there was one.
 */
static bool
read_control_commands(int fd, char *buf, size_t *buflen)
{
	for (;;)
	{
		ssize_t		n;
		char	   *nl;

		if (*buflen >= MAX_COMMAND_LEN - 1)
		{
			reply("error command too long");
			*buflen = 0;
		}
		n = read(fd, buf + *buflen, MAX_COMMAND_LEN - 1 - *buflen);
		if (n < 0)
		{
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return true;
			fatal("could not read control FIFO: %s", strerror(errno));
		}
		if (n == 0)
		{
			if (*buflen > 0)
			{
				buf[*buflen] = '\0';
				*buflen = 0;
				run_command(buf);
			}
			return false;
		}
		*buflen += n;
		while ((nl = memchr(buf, '\n', *buflen)) != NULL)
		{
			size_t		linelen = nl - buf;

			*nl = '\0';
			run_command(buf);
			memmove(buf, nl + 1, *buflen - linelen - 1);
			*buflen -= linelen + 1;
		}
	}
}

/* Apply the actions that signal handlers asked for. */
static void
apply_signal_requests(void)
{
	if (got_down_all)
	{
		char		cmd[] = "down all";

		got_down_all = 0;
		run_command(cmd);
	}
	if (got_up_all)
	{
		char		cmd[] = "up all";

		got_up_all = 0;
		run_command(cmd);
	}
}

static void
install_signal_handlers(sigset_t *wait_mask)
{
	struct sigaction sa;
	sigset_t	blocked;

	install_stop_signal_handlers();
	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	sa.sa_handler = handle_usr1;
	sigaction(SIGUSR1, &sa, NULL);
	sa.sa_handler = handle_usr2;
	sigaction(SIGUSR2, &sa, NULL);

	/*
	 * Block them before librdkafka starts any thread (threads inherit the
	 * mask), so they are only ever taken inside ppoll() below.
	 */
	sigemptyset(&blocked);
	sigaddset(&blocked, SIGTERM);
	sigaddset(&blocked, SIGINT);
	sigaddset(&blocked, SIGUSR1);
	sigaddset(&blocked, SIGUSR2);
	sigprocmask(SIG_BLOCK, &blocked, wait_mask);
	sigdelset(wait_mask, SIGTERM);
	sigdelset(wait_mask, SIGINT);
	sigdelset(wait_mask, SIGUSR1);
	sigdelset(wait_mask, SIGUSR2);
}

/*
 * Have the kernel send SIGTERM when our parent dies.  If it is already gone
 * (we were reparented before the request), stop at once.
 */
static void
request_parent_death_signal(void)
{
#ifdef __linux__
	if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0)
		fatal("prctl(PR_SET_PDEATHSIG) failed: %s", strerror(errno));
	if (getppid() == 1)
		stop_requested = 1;
#else
	fatal("--exit-with-parent is only supported on Linux");
#endif
}

int
main(int argc, char **argv)
{
	sigset_t	wait_mask;
	const char *bootstrap;
	int			fifo_fd = -1;
	char		cmdbuf[MAX_COMMAND_LEN];
	size_t		cmdlen = 0;

	parse_options(argc, argv);
	install_signal_handlers(&wait_mask);
	if (opts.exit_with_parent)
		request_parent_death_signal();

	start_mock_cluster();
	for (int i = 0; i < opts.ntopics; i++)
	{
		rd_kafka_resp_err_t err = create_topic(opts.topics[i].name,
											   opts.topics[i].partitions);

		if (err)
			fatal("could not create topic \"%s\": %s",
				  opts.topics[i].name, rd_kafka_err2str(err));
		info("topic %s with %d partition(s)",
			 opts.topics[i].name, opts.topics[i].partitions);
	}

	if (opts.control_fifo)
	{
		create_control_fifo();
		fifo_fd = open_control_fifo();
	}

	bootstrap = rd_kafka_mock_cluster_bootstraps(mcluster);
	reply("bootstrap=%s", bootstrap);
	if (opts.addr_file)
		write_addr_file(opts.addr_file, bootstrap);
	info("%d broker(s) at %s", opts.brokers, bootstrap);

	while (!stop_requested && !quit_requested)
	{
		struct pollfd pfd;
		int			rc;

		apply_signal_requests();
		if (quit_requested)
			break;

		pfd.fd = fifo_fd;
		pfd.events = POLLIN;
		pfd.revents = 0;
		/* Sleep until a command arrives or a signal is delivered. */
		rc = ppoll(&pfd, fifo_fd >= 0 ? 1 : 0, NULL, &wait_mask);
		if (rc < 0)
		{
			if (errno == EINTR)
				continue;
			fatal("ppoll failed: %s", strerror(errno));
		}
		if (rc > 0 && (pfd.revents & (POLLIN | POLLHUP | POLLERR)))
		{
			if (!read_control_commands(fifo_fd, cmdbuf, &cmdlen))
			{
				/* The writer closed: reopen to wait for the next one. */
				close(fifo_fd);
				fifo_fd = open_control_fifo();
			}
		}
	}

	info("shutting down");
	if (opts.addr_file)
		unlink(opts.addr_file);
	if (fifo_fd >= 0)
	{
		close(fifo_fd);
		unlink(opts.control_fifo);
	}

	/*
	 * Nothing in the cluster needs saving, and rd_kafka_mock_cluster_destroy()
	 * waits a full second for the mock's I/O thread (its poll timeout), which
	 * every test would pay for.  Exit directly: the kernel closes the clients'
	 * connections as the destroy would.
	 */
	fflush(stdout);
	fflush(stderr);
	_exit(0);
}

/*
 * kafka_properties.c
 *		Which librdkafka properties and broker hosts a role may use.
 *
 * A source's and a sink's options are librdkafka properties, passed on to
 * the clients the flow's worker creates as its owner.  Some of them make
 * the server's OS user do what PostgreSQL lets only some roles do: run a
 * program (sasl.kerberos.kinit.cmd, and the kinit that SASL GSSAPI runs),
 * load code (plugin.library.paths, ssl.engine.location, ssl.providers), or
 * read a file of the server by its path (ssl.key.location, ...).  The rule
 * is PostgreSQL's own (COPY ... PROGRAM, file_fdw, LOAD):
 *
 *	runs a program		superuser or pg_execute_server_program
 *	names a server file	superuser or pg_read_server_files
 *	loads code			superuser
 *	anything else		superuser, unless it is on the list below
 *
 * The list is an allow-list: properties sdp_ext knows to be harmless for
 * any role.  A newer librdkafka adds properties, and one that is not on the
 * list is a superuser's until it is judged and added.  The rule is checked
 * for the role that declares a source or a sink, for the owner of a flow
 * when it is declared or altered, and again by the flow's worker when it
 * starts (its owner may have lost a role since).  Checking never loads
 * anything: kafka_property_loads_code tells the validators which
 * properties not to hand to rd_kafka_conf_set (plugin.library.paths loads
 * its libraries right there).
 *
 * Hosts: sdp.allowed_hosts (superuser-set; default '*', any) lists the
 * broker hosts that roles other than superusers may name in
 * bootstrap_servers or in an OAuth token endpoint.  A cluster tells its
 * clients the addresses of its other brokers; a worker of such a role
 * resolves every broker name through kafka_conf_restrict_hosts's
 * callback, which refuses the hosts the list does not hold, so the list
 * also bounds where the cluster can send it.
 */
#include "kafka/kafka_properties.h"

#include <netdb.h>
#include <pthread.h>

#include "catalog/pg_authid.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"

#include "decl/flow_options.h"

char	   *sdp_allowed_hosts = NULL;

typedef enum PropertyKind
{
	PROP_ANYONE,				/* harmless for any role */
	PROP_SERVER_FILE,			/* reads a file of the server by its path */
	PROP_PROGRAM,				/* runs a program */
	PROP_CODE,					/* loads code into the server */
	PROP_MECHANISM,				/* sasl.mechanisms: GSSAPI runs kinit */
	PROP_URL					/* an HTTP(S) endpoint the client calls: its host is checked */
} PropertyKind;

typedef struct KnownProperty
{
	const char *name;
	PropertyKind kind;
	const char *inline_alternative; /* PROP_SERVER_FILE: the property that takes the content itself */
} KnownProperty;

/*
 * Properties a role may set, and those it needs a role for.  Everything
 * not here needs superuser.  Consumer and producer properties are listed
 * together: librdkafka ignores (with a warning) the other kind's.
 */
static const KnownProperty known_properties[] = {
	/* clients */
	{"client.id", PROP_ANYONE},
	{"client.rack", PROP_ANYONE},
	{"client.dns.lookup", PROP_ANYONE},
	{"message.max.bytes", PROP_ANYONE},
	{"message.copy.max.bytes", PROP_ANYONE},
	{"receive.message.max.bytes", PROP_ANYONE},
	{"max.in.flight.requests.per.connection", PROP_ANYONE},
	{"max.in.flight", PROP_ANYONE},
	{"topic.metadata.refresh.interval.ms", PROP_ANYONE},
	{"metadata.max.age.ms", PROP_ANYONE},
	{"topic.metadata.refresh.fast.interval.ms", PROP_ANYONE},
	{"topic.metadata.refresh.fast.cnt", PROP_ANYONE},
	{"topic.metadata.refresh.sparse", PROP_ANYONE},
	{"topic.metadata.propagation.max.ms", PROP_ANYONE},
	{"debug", PROP_ANYONE},
	{"log_level", PROP_ANYONE},
	{"log.connection.close", PROP_ANYONE},
	{"socket.timeout.ms", PROP_ANYONE},
	{"socket.send.buffer.bytes", PROP_ANYONE},
	{"socket.receive.buffer.bytes", PROP_ANYONE},
	{"socket.keepalive.enable", PROP_ANYONE},
	{"socket.nagle.disable", PROP_ANYONE},
	{"socket.max.fails", PROP_ANYONE},
	{"socket.connection.setup.timeout.ms", PROP_ANYONE},
	{"broker.address.ttl", PROP_ANYONE},
	{"broker.address.family", PROP_ANYONE},
	{"connections.max.idle.ms", PROP_ANYONE},
	{"reconnect.backoff.jitter.ms", PROP_ANYONE},
	{"reconnect.backoff.ms", PROP_ANYONE},
	{"reconnect.backoff.max.ms", PROP_ANYONE},
	{"retry.backoff.ms", PROP_ANYONE},
	{"retry.backoff.max.ms", PROP_ANYONE},
	{"api.version.request", PROP_ANYONE},
	{"api.version.request.timeout.ms", PROP_ANYONE},
	{"api.version.fallback.ms", PROP_ANYONE},
	{"broker.version.fallback", PROP_ANYONE},
	{"allow.auto.create.topics", PROP_ANYONE},

	/* the formats and the schema registry's client (flow_options.c: not librdkafka's) */
	{"format", PROP_ANYONE},
	{"key.format", PROP_ANYONE},
	{"schema.registry.url", PROP_URL},
	{"basic.auth.credentials.source", PROP_ANYONE},
	{"basic.auth.user.info", PROP_ANYONE},
	{"schema.registry.ssl.ca.location", PROP_SERVER_FILE, "schema.registry.ssl.ca.pem"},
	{"schema.registry.ssl.ca.pem", PROP_ANYONE},
	{"schema.registry.ssl.certificate.location", PROP_SERVER_FILE, "schema.registry.ssl.certificate.pem"},
	{"schema.registry.ssl.certificate.pem", PROP_ANYONE},
	{"schema.registry.ssl.key.location", PROP_SERVER_FILE, "schema.registry.ssl.key.pem"},
	{"schema.registry.ssl.key.pem", PROP_ANYONE},
	{"schema.registry.ssl.key.password", PROP_ANYONE},
	{"schema.registry.ssl.endpoint.identification.algorithm", PROP_ANYONE},

	/* TLS: the credentials themselves, not files */
	{"security.protocol", PROP_ANYONE},
	{"ssl.cipher.suites", PROP_ANYONE},
	{"ssl.curves.list", PROP_ANYONE},
	{"ssl.sigalgs.list", PROP_ANYONE},
	{"ssl.key.password", PROP_ANYONE},
	{"ssl.key.pem", PROP_ANYONE},
	{"ssl.certificate.pem", PROP_ANYONE},
	{"ssl.ca.pem", PROP_ANYONE},
	{"ssl.keystore.password", PROP_ANYONE},
	{"enable.ssl.certificate.verification", PROP_ANYONE},
	{"ssl.endpoint.identification.algorithm", PROP_ANYONE},
	{"https.ca.pem", PROP_ANYONE},

	/* SASL */
	{"sasl.mechanisms", PROP_MECHANISM},
	{"sasl.mechanism", PROP_MECHANISM},
	{"sasl.username", PROP_ANYONE},
	{"sasl.password", PROP_ANYONE},
	{"sasl.kerberos.service.name", PROP_ANYONE},
	{"sasl.kerberos.principal", PROP_ANYONE},
	{"sasl.kerberos.min.time.before.relogin", PROP_ANYONE},
	{"sasl.oauthbearer.config", PROP_ANYONE},
	{"enable.sasl.oauthbearer.unsecure.jwt", PROP_ANYONE},
	{"sasl.oauthbearer.method", PROP_ANYONE},
	{"sasl.oauthbearer.client.id", PROP_ANYONE},
	{"sasl.oauthbearer.client.secret", PROP_ANYONE},
	{"sasl.oauthbearer.scope", PROP_ANYONE},
	{"sasl.oauthbearer.extensions", PROP_ANYONE},
	{"sasl.oauthbearer.token.endpoint.url", PROP_URL},

	/* consumers */
	{"group.id", PROP_ANYONE},
	{"group.instance.id", PROP_ANYONE},
	{"session.timeout.ms", PROP_ANYONE},
	{"heartbeat.interval.ms", PROP_ANYONE},
	{"coordinator.query.interval.ms", PROP_ANYONE},
	{"max.poll.interval.ms", PROP_ANYONE},
	{"auto.commit.interval.ms", PROP_ANYONE},
	{"queued.min.messages", PROP_ANYONE},
	{"queued.max.messages.kbytes", PROP_ANYONE},
	{"fetch.wait.max.ms", PROP_ANYONE},
	{"fetch.queue.backoff.ms", PROP_ANYONE},
	{"fetch.message.max.bytes", PROP_ANYONE},
	{"max.partition.fetch.bytes", PROP_ANYONE},
	{"fetch.max.bytes", PROP_ANYONE},
	{"fetch.min.bytes", PROP_ANYONE},
	{"fetch.error.backoff.ms", PROP_ANYONE},
	{"isolation.level", PROP_ANYONE},
	{"check.crcs", PROP_ANYONE},
	{"auto.offset.reset", PROP_ANYONE},

	/* producers */
	{"transaction.timeout.ms", PROP_ANYONE},
	{"queue.buffering.max.messages", PROP_ANYONE},
	{"queue.buffering.max.kbytes", PROP_ANYONE},
	{"queue.buffering.max.ms", PROP_ANYONE},
	{"linger.ms", PROP_ANYONE},
	{"message.send.max.retries", PROP_ANYONE},
	{"retries", PROP_ANYONE},
	{"queue.buffering.backpressure.threshold", PROP_ANYONE},
	{"compression.codec", PROP_ANYONE},
	{"compression.type", PROP_ANYONE},
	{"compression.level", PROP_ANYONE},
	{"batch.num.messages", PROP_ANYONE},
	{"batch.size", PROP_ANYONE},
	{"sticky.partitioning.linger.ms", PROP_ANYONE},
	{"request.required.acks", PROP_ANYONE},
	{"acks", PROP_ANYONE},
	{"request.timeout.ms", PROP_ANYONE},
	{"message.timeout.ms", PROP_ANYONE},
	{"delivery.timeout.ms", PROP_ANYONE},

	/* files of the server, read by path */
	{"ssl.key.location", PROP_SERVER_FILE, "ssl.key.pem"},
	{"ssl.certificate.location", PROP_SERVER_FILE, "ssl.certificate.pem"},
	{"ssl.ca.location", PROP_SERVER_FILE, "ssl.ca.pem"},
	{"ssl.crl.location", PROP_SERVER_FILE},
	{"ssl.keystore.location", PROP_SERVER_FILE},
	{"https.ca.location", PROP_SERVER_FILE, "https.ca.pem"},
	{"sasl.kerberos.keytab", PROP_SERVER_FILE},
	{"sasl.oauthbearer.assertion.private.key.file", PROP_SERVER_FILE},
	{"sasl.oauthbearer.assertion.file", PROP_SERVER_FILE},
	{"sasl.oauthbearer.assertion.jwt.template.file", PROP_SERVER_FILE},

	/* programs */
	{"sasl.kerberos.kinit.cmd", PROP_PROGRAM},

	/* code */
	{"plugin.library.paths", PROP_CODE},
	{"ssl.engine.location", PROP_CODE},
	{"ssl.engine.id", PROP_CODE},
	{"ssl_engine_id", PROP_CODE},
	{"ssl.providers", PROP_CODE},
};

static const KnownProperty *
find_property(const char *key)
{
	for (int i = 0; i < lengthof(known_properties); i++)
		if (strcmp(known_properties[i].name, key) == 0)
			return &known_properties[i];
	return NULL;
}

/*
 * Whether setting the property may load code: the validators leave it out
 * (rd_kafka_conf_set loads plugin.library.paths at once), whoever sets it.
 */
bool
kafka_property_loads_code(const char *key)
{
	const KnownProperty *p = find_property(key);

	return p != NULL && p->kind == PROP_CODE;
}

/* SASL mechanisms any role may choose; GSSAPI runs kinit (through /bin/sh, with the principal in it). */
static bool
mechanism_is_plain(const char *value)
{
	static const char *const plain[] = {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"};

	for (int i = 0; i < lengthof(plain); i++)
		if (pg_strcasecmp(value, plain[i]) == 0)
			return true;
	return false;
}

/* ---- hosts ---- */

/* An entry of sdp.allowed_hosts: a host (or "*.domain"), and a port or any (-1). */
typedef struct AllowedHost
{
	char	   *host;			/* lower case, without brackets; NULL: any host */
	bool		suffix;			/* "*.domain": host is ".domain" */
	int			port;
} AllowedHost;

typedef struct AllowedHosts
{
	bool		any;			/* '*' */
	int			n;
	AllowedHost *hosts;
} AllowedHosts;

/*
 * Split "host:port", "[v6]:port", "host" or "[v6]" (in place): *host and
 * *port (NULL when not given).  False when it is not one of those.
 */
static bool
split_host_port(char *s, char **host, char **port)
{
	char	   *colon;

	*port = NULL;
	if (s[0] == '[')
	{
		char	   *close = strchr(s, ']');

		if (close == NULL)
			return false;
		*close = '\0';
		*host = s + 1;
		if (close[1] == ':')
			*port = close + 2;
		else if (close[1] != '\0')
			return false;
	}
	else
	{
		colon = strrchr(s, ':');
		*host = s;
		if (colon != NULL)
		{
			if (strchr(s, ':') != colon)
				return true;	/* an IPv6 address without brackets, and no port */
			*colon = '\0';
			*port = colon + 1;
		}
	}
	return **host != '\0';
}

static int
parse_port(const char *text)
{
	char	   *end;
	long		v;

	if (text == NULL)
		return -1;
	errno = 0;
	v = strtol(text, &end, 10);
	if (end == text || *end != '\0' || errno != 0 || v < 1 || v > 65535)
		return 0;
	return (int) v;
}

/*
 * Parse sdp.allowed_hosts into list (with alloc: palloc, or malloc for the
 * list the resolver callback reads).  False, with the reason in *error,
 * when an entry is not a host.
 */
static bool
parse_allowed_hosts(const char *value, AllowedHosts *list, void *(*alloc) (Size), const char **error)
{
	char	   *copy = alloc(strlen(value) + 1);
	char	   *s;
	char	   *save = NULL;
	int			max = 1;

	memset(list, 0, sizeof(*list));
	strcpy(copy, value);
	for (const char *c = value; *c; c++)
		max += (*c == ',');
	list->hosts = alloc(sizeof(AllowedHost) * max);
	for (s = strtok_r(copy, ",", &save); s != NULL; s = strtok_r(NULL, ",", &save))
	{
		char	   *host;
		char	   *port;
		AllowedHost *h;

		while (*s == ' ' || *s == '\t')
			s++;
		for (char *e = s + strlen(s); e > s && (e[-1] == ' ' || e[-1] == '\t'); e--)
			e[-1] = '\0';
		if (*s == '\0')
			continue;
		if (strcmp(s, "*") == 0)
		{
			list->any = true;
			continue;
		}
		if (!split_host_port(s, &host, &port))
		{
			*error = "an entry is not a host, host:port or [address]:port";
			return false;
		}
		h = &list->hosts[list->n++];
		h->port = -1;
		if (port != NULL && strcmp(port, "*") != 0 && (h->port = parse_port(port)) == 0)
		{
			*error = "a port is not a number from 1 to 65535";
			return false;
		}
		h->suffix = (strncmp(host, "*.", 2) == 0);
		if (h->suffix)
			host++;				/* ".domain" */
		else if (strchr(host, '*') != NULL)
		{
			*error = "a wildcard is allowed only as a whole entry (*) or as the first label (*.example.com)";
			return false;
		}
		for (char *c = host; *c; c++)
			*c = pg_tolower((unsigned char) *c);
		h->host = host;
	}
	return true;
}

static void *
palloc_size(Size size)
{
	return palloc(size);
}

static void *
malloc_size(Size size)
{
	void	   *p = malloc(size);

	if (p == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	return p;
}

/* GUC check hook of sdp.allowed_hosts. */
bool
sdp_check_allowed_hosts(char **newval, void **extra, GucSource source)
{
	AllowedHosts list;
	const char *error = NULL;

	if (!parse_allowed_hosts(*newval, &list, palloc_size, &error))
	{
		GUC_check_errdetail("%s.", error);
		GUC_check_errhint("List hosts separated by commas, e.g. 'kafka-1.example.com:9092, *.kafka.example.com, 10.0.0.5', or '*' for any.");
		return false;
	}
	return true;
}

/* Whether host (any case, no brackets) and port (-1: not known) are in the list. Plain C: librdkafka's threads call it. */
static bool
host_allowed(const AllowedHosts *list, const char *host, int port)
{
	size_t		len = strlen(host);

	if (list->any)
		return true;
	for (int i = 0; i < list->n; i++)
	{
		const AllowedHost *h = &list->hosts[i];
		size_t		hlen = strlen(h->host);

		if (h->port != -1 && h->port != port)
			continue;
		if (h->suffix ? (len > hlen && pg_strcasecmp(host + len - hlen, h->host) == 0)
			: pg_strcasecmp(host, h->host) == 0)
			return true;
	}
	return false;
}

static void
refuse_host(Oid role, const char *what, const char *host, int port)
{
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("%s names host \"%s\" (port %d), which sdp.allowed_hosts does not list", what, host, port),
			 errdetail("Roles other than superusers, such as \"%s\", may name only the hosts sdp.allowed_hosts lists: \"%s\".",
					   GetUserNameFromId(role, false), sdp_allowed_hosts),
			 errhint("Ask a superuser to add the host to sdp.allowed_hosts.")));
}

/* Every broker of a bootstrap_servers list ("[proto://]host[:port],...") must be allowed. */
static void
check_servers(Oid role, const char *what, const AllowedHosts *list, const char *servers)
{
	char	   *copy = pstrdup(servers);
	char	   *s;
	char	   *save = NULL;

	for (s = strtok_r(copy, ",", &save); s != NULL; s = strtok_r(NULL, ",", &save))
	{
		char	   *scheme;
		char	   *host;
		char	   *port;
		int			p;

		while (*s == ' ' || *s == '\t')
			s++;
		for (char *e = s + strlen(s); e > s && (e[-1] == ' ' || e[-1] == '\t'); e--)
			e[-1] = '\0';
		if (*s == '\0')
			continue;
		if ((scheme = strstr(s, "://")) != NULL)
			s = scheme + 3;
		if (!split_host_port(s, &host, &port) || (p = parse_port(port)) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid broker address \"%s\" in bootstrap_servers", s),
					 errhint("Give the brokers as host:port[,host:port...].")));
		if (!host_allowed(list, host, p < 0 ? 9092 : p))
			refuse_host(role, what, host, p < 0 ? 9092 : p);
	}
	pfree(copy);
}

/* An HTTP(S) endpoint (an OAuth token endpoint): a URL whose host is allowed, and nothing else (not file:). */
static void
check_url(Oid role, const char *what, const char *key, const AllowedHosts *list, const char *url)
{
	const char *rest;
	char	   *authority;
	char	   *at;
	char	   *host;
	char	   *port;
	int			p;
	bool		https = pg_strncasecmp(url, "https://", 8) == 0;

	if (!https && pg_strncasecmp(url, "http://", 7) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("librdkafka property \"%s\" of %s must be an http:// or https:// URL", key, what),
				 errdetail("Other URLs (file:, ...) may read the server's files; only superusers may give them.")));
	rest = url + (https ? 8 : 7);
	authority = pnstrdup(rest, strcspn(rest, "/?#"));
	if ((at = strrchr(authority, '@')) != NULL)
		authority = at + 1;
	if (!split_host_port(authority, &host, &port) || (p = parse_port(port)) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid URL in librdkafka property \"%s\" of %s: \"%s\"", key, what, url)));
	if (p < 0)
		p = https ? 443 : 80;
	if (!host_allowed(list, host, p))
		refuse_host(role, what, host, p);
}

/*
 * Whether role may have its worker use these servers and properties (List
 * of key, value char *): raises 42501 naming the first that it may not.
 * what names the source or sink in messages ("source \"s\"").
 */
void
kafka_properties_check_role(Oid role, const char *what, const char *servers, List *properties)
{
	AllowedHosts hosts;
	const char *error;
	ListCell   *lc;
	const char *rolename;

	if (superuser_arg(role))
		return;
	rolename = GetUserNameFromId(role, false);
	if (!parse_allowed_hosts(sdp_allowed_hosts, &hosts, palloc_size, &error))
		elog(ERROR, "sdp.allowed_hosts is invalid: %s", error);	/* its check hook refused it */
	if (servers != NULL)
		check_servers(role, what, &hosts, servers);

	for (lc = list_head(properties); lc != NULL; lc = lnext(properties, lnext(properties, lc)))
	{
		const char *key = lfirst(lc);
		const char *value = lfirst(lnext(properties, lc));
		const KnownProperty *p = find_property(key);

		if (p == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("librdkafka property \"%s\" of %s may be set only by a superuser", key, what),
					 errdetail("Roles other than superusers, such as \"%s\", may set only the librdkafka properties sdp_ext knows to be safe for any role; others may run programs, load code or read the server's files.",
							   rolename),
					 errhint("Leave the property out, or ask a superuser to declare the %s.", what)));
		switch (p->kind)
		{
			case PROP_ANYONE:
				break;
			case PROP_SERVER_FILE:
				if (strcmp(key, "ssl.ca.location") == 0 && strcmp(value, "probe") == 0)
					break;		/* the system's CA certificates, wherever they are */
				if (!has_privs_of_role(role, ROLE_PG_READ_SERVER_FILES))
					ereport(ERROR,
							(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
							 errmsg("librdkafka property \"%s\" of %s names a file on the database server", key, what),
							 errdetail("Only superusers and roles with privileges of pg_read_server_files may make the server read a file; role \"%s\" has neither.",
									   rolename),
							 p->inline_alternative
							 ? errhint("Give the file's content in property \"%s\" instead, or ask a superuser to GRANT pg_read_server_files TO %s.",
									   p->inline_alternative, quote_identifier(rolename))
							 : errhint("Ask a superuser to GRANT pg_read_server_files TO %s.", quote_identifier(rolename))));
				break;
			case PROP_PROGRAM:
				if (!has_privs_of_role(role, ROLE_PG_EXECUTE_SERVER_PROGRAM))
					ereport(ERROR,
							(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
							 errmsg("librdkafka property \"%s\" of %s runs a program on the database server", key, what),
							 errdetail("Only superusers and roles with privileges of pg_execute_server_program may make the server run a program; role \"%s\" has neither.",
									   rolename),
							 errhint("Ask a superuser to GRANT pg_execute_server_program TO %s.", quote_identifier(rolename))));
				break;
			case PROP_MECHANISM:
				if (mechanism_is_plain(value))
					break;
				if (pg_strcasecmp(value, "GSSAPI") == 0)
				{
					if (!has_privs_of_role(role, ROLE_PG_EXECUTE_SERVER_PROGRAM))
						ereport(ERROR,
								(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
								 errmsg("SASL mechanism GSSAPI of %s runs a program on the database server", what),
								 errdetail("Kerberos runs sasl.kerberos.kinit.cmd (kinit by default) through the shell. Only superusers and roles with privileges of pg_execute_server_program may make the server run a program; role \"%s\" has neither.",
										   rolename),
								 errhint("Ask a superuser to GRANT pg_execute_server_program TO %s, or use PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER.",
										 quote_identifier(rolename))));
					break;
				}
				ereport(ERROR,
						(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
						 errmsg("SASL mechanism \"%s\" of %s may be chosen only by a superuser", value, what),
						 errhint("Use PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER.")));
				break;
			case PROP_URL:
				check_url(role, what, key, &hosts, value);
				break;
			case PROP_CODE:
				ereport(ERROR,
						(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
						 errmsg("librdkafka property \"%s\" of %s loads code into the database server", key, what),
						 errdetail("Only superusers may make the server load code; role \"%s\" is not one.", rolename),
						 errhint("Ask a superuser to declare the %s.", what)));
				break;
		}
	}
}

/* ---- the resolver of a restricted worker's clients ---- */

/*
 * The list the resolver reads: parsed once per process, the first time a
 * restricted client is made, in malloc'd memory never freed or changed, so
 * that librdkafka's threads read it without a lock.  A new value of
 * sdp.allowed_hosts applies to workers started after it.
 */
static AllowedHosts *resolver_hosts = NULL;

/* the last host the resolver refused, for the worker to report (kafka_take_refused_host) */
static pthread_mutex_t refused_lock = PTHREAD_MUTEX_INITIALIZER;
static char refused_host[256];
static bool refused_pending = false;

/*
 * librdkafka's resolver callback (on its threads: plain C only).  Frees
 * when called with node, service and hints all NULL.
 */
static int
resolve_allowed(const char *node, const char *service, const struct addrinfo *hints,
				struct addrinfo **res, void *opaque)
{
	int			port;

	if (node == NULL && service == NULL && hints == NULL)
	{
		freeaddrinfo(*res);
		return 0;
	}
	port = service ? atoi(service) : -1;
	if (node == NULL || !host_allowed(resolver_hosts, node, port))
	{
		pthread_mutex_lock(&refused_lock);
		snprintf(refused_host, sizeof(refused_host), "%s:%s", node ? node : "", service ? service : "");
		refused_pending = true;
		pthread_mutex_unlock(&refused_lock);
		return EAI_FAIL;
	}
	return getaddrinfo(node, service, hints, res);
}

/*
 * A worker's clients run as the flow's owner (role): unless it is a
 * superuser, they resolve broker names only of the hosts sdp.allowed_hosts
 * lists, the brokers a cluster advertises included.  Decided once, at the
 * worker's start, in its loading transaction (superuser_arg reads the
 * catalogs); kafka_conf_restrict_hosts applies it to each client.
 */
void
kafka_hosts_for_owner(Oid role)
{
	AllowedHosts *list;
	const char *error;

	if (resolver_hosts != NULL || superuser_arg(role))
		return;
	list = malloc_size(sizeof(AllowedHosts));
	if (!parse_allowed_hosts(sdp_allowed_hosts, list, malloc_size, &error))
		elog(ERROR, "sdp.allowed_hosts is invalid: %s", error);
	resolver_hosts = list;
}

/* A client of the worker: its resolver, if its owner's hosts are bounded (kafka_hosts_for_owner). */
void
kafka_conf_restrict_hosts(rd_kafka_conf_t *conf)
{
	if (resolver_hosts == NULL || resolver_hosts->any)
		return;
	rd_kafka_conf_set_resolve_cb(conf, resolve_allowed);
}

/* The last broker the resolver refused ("host:port"), once; false when none since the last call. */
bool
kafka_take_refused_host(char *buf, size_t len)
{
	bool		pending;

	pthread_mutex_lock(&refused_lock);
	pending = refused_pending;
	if (pending)
		strlcpy(buf, refused_host, len);
	refused_pending = false;
	pthread_mutex_unlock(&refused_lock);
	return pending;
}

/*
 * Check a source's or a sink's librdkafka properties without connecting
 * anywhere, when it is declared: unknown names and invalid values are
 * refused here rather than when a flow starts.  what: "source" or "sink";
 * reserved: the properties sdp_ext sets itself (why_reserved says why);
 * hint: what the options are.  The formats' and the registry's options are
 * flow_options.c's to check, and a property that loads code is the
 * worker's (setting it here would load it in the caller's backend).  Which
 * role may set which is kafka_properties_check_role's to say, before this.
 */
void
kafka_properties_validate(List *properties, const char *what, const char *const *reserved, int nreserved,
						  const char *why_reserved, const char *hint)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	ListCell   *lc;
	char		errstr[512];

	for (lc = list_head(properties); lc != NULL; lc = lnext(properties, lnext(properties, lc)))
	{
		const char *key = lfirst(lc);
		const char *val = lfirst(lnext(properties, lc));

		for (int i = 0; i < nreserved; i++)
		{
			if (strcmp(key, reserved[i]) != 0)
				continue;
			rd_kafka_conf_destroy(conf);
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("librdkafka property \"%s\" cannot be set on a %s", key, what),
					 errdetail("sdp_ext sets it itself: %s", why_reserved),
					 (strcmp(key, "bootstrap.servers") == 0 || strcmp(key, "metadata.broker.list") == 0) ?
					 errhint("Give the brokers as the bootstrap_servers argument.") : 0));
		}
		if (kafka_property_loads_code(key) || sdp_source_format_option(key))
			continue;
		if (rd_kafka_conf_set(conf, key, val, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
		{
			rd_kafka_conf_destroy(conf);
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid librdkafka property \"%s\": %s", key, errstr),
					 errhint("%s", hint)));
		}
	}
	rd_kafka_conf_destroy(conf);
}

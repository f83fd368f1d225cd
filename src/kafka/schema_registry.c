/*
 * schema_registry.c
 *		The writer schemas of a source's messages, fetched by id from a
 *		Confluent-compatible schema registry and kept for the worker's life.
 *
 * A message in Confluent's wire format names its schema by id; the id of a
 * schema never changes what it names, so a schema fetched once is kept
 * (GET /schemas/ids/{id}, the registry's JSON answer as it came).  Fetching
 * is a network wait: the worker does it before a batch's transaction starts
 * (batch.c), for the ids the batch's messages name that it has not seen, so
 * no transaction is held across it.  A registry that cannot be reached or
 * answers with an error is the flow's fault: the batch is retried, with the
 * reason in the status.  An id the registry does not have (404) is the
 * message's: kept as unknown, and each message that names it is set aside
 * with that reason.
 *
 * The client is libcurl's, set up as Confluent's clients are configured
 * (the source's options: schema.registry.url, basic.auth.*, and
 * schema.registry.ssl.*): http and https only, no redirects (a registry's
 * host is checked against sdp.allowed_hosts for roles that need it, and a
 * redirect would go around that), bounded times and answer size, no
 * signals (the server uses SIGALRM), and a transfer gives up at once when
 * the worker is asked to stop.
 */
#include "kafka/schema_registry.h"

#include <curl/curl.h>

#include "miscadmin.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

/* The largest answer taken from the registry (a schema is a few kB). */
#define SDP_REGISTRY_MAX_ANSWER (8 * 1024 * 1024)
#define SDP_REGISTRY_CONNECT_TIMEOUT_MS 5000
#define SDP_REGISTRY_TIMEOUT_MS 10000

struct SdpRegistry
{
	MemoryContext cxt;			/* the cache, and this */
	HTAB	   *schemas;		/* int32 id -> SdpRegistrySchema */
	CURL	   *curl;
	struct curl_slist *headers;
	char	   *url;			/* without a trailing slash */
	char	   *shown_url;		/* url without its credentials (user:password@), for messages */
	char	   *user_info;		/* basic.auth.user.info (USER_INFO), or NULL */
	char	   *ca_location;
	char	   *ca_pem;
	char	   *cert_location;
	char	   *cert_pem;
	char	   *key_location;
	char	   *key_pem;
	char	   *key_password;
	bool		verify_host;
	int64		fetches;		/* answers taken from the registry */
};

static bool curl_ready = false;

static const char *
option(const SdpSourceDef *source, const char *key)
{
	ListCell   *lc;

	for (lc = list_head(source->properties); lc != NULL; lc = lnext(source->properties, lnext(source->properties, lc)))
		if (strcmp(lfirst(lc), key) == 0)
			return lfirst(lnext(source->properties, lc));
	return NULL;
}

static char *
dup_option(MemoryContext cxt, const SdpSourceDef *source, const char *key)
{
	const char *v = option(source, key);

	return v ? MemoryContextStrdup(cxt, v) : NULL;
}

/* The client of the source's registry, in a memory context of its own under parent. */
SdpRegistry *
sdp_registry_create(const SdpSourceDef *source, MemoryContext parent)
{
	MemoryContext cxt = AllocSetContextCreate(parent, "sdp schema registry", ALLOCSET_DEFAULT_SIZES);
	SdpRegistry *reg = MemoryContextAllocZero(cxt, sizeof(SdpRegistry));
	HASHCTL		ctl;
	const char *cred_source = option(source, "basic.auth.credentials.source");
	const char *algorithm = option(source, "schema.registry.ssl.endpoint.identification.algorithm");
	int			len;

	Assert(source->registry_url != NULL);
	if (!curl_ready)
	{
		if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
			elog(ERROR, "could not initialize libcurl");
		curl_ready = true;
	}
	reg->cxt = cxt;
	reg->url = MemoryContextStrdup(cxt, source->registry_url);
	len = (int) strlen(reg->url);
	while (len > 0 && reg->url[len - 1] == '/')
		reg->url[--len] = '\0';
	reg->shown_url = MemoryContextStrdup(cxt, reg->url);
	{
		/* http://user:password@host/... -> http://host/... */
		char	   *authority = strstr(reg->shown_url, "://");
		char	   *at;

		if (authority != NULL)
		{
			authority += 3;
			at = memchr(authority, '@', strcspn(authority, "/?#"));
			if (at != NULL)
				memmove(authority, at + 1, strlen(at + 1) + 1);
		}
	}
	if (cred_source == NULL || strcmp(cred_source, "USER_INFO") == 0)
		reg->user_info = dup_option(cxt, source, "basic.auth.user.info");
	reg->ca_location = dup_option(cxt, source, "schema.registry.ssl.ca.location");
	reg->ca_pem = dup_option(cxt, source, "schema.registry.ssl.ca.pem");
	reg->cert_location = dup_option(cxt, source, "schema.registry.ssl.certificate.location");
	reg->cert_pem = dup_option(cxt, source, "schema.registry.ssl.certificate.pem");
	reg->key_location = dup_option(cxt, source, "schema.registry.ssl.key.location");
	reg->key_pem = dup_option(cxt, source, "schema.registry.ssl.key.pem");
	reg->key_password = dup_option(cxt, source, "schema.registry.ssl.key.password");
	reg->verify_host = algorithm == NULL || strcmp(algorithm, "none") != 0;

	ctl.keysize = sizeof(int32);
	ctl.entrysize = sizeof(SdpRegistrySchema);
	ctl.hcxt = cxt;
	reg->schemas = hash_create("sdp registry schemas", 64, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	return reg;
}

void
sdp_registry_destroy(SdpRegistry *reg)
{
	if (reg == NULL)
		return;
	if (reg->curl)
		curl_easy_cleanup(reg->curl);
	if (reg->headers)
		curl_slist_free_all(reg->headers);
	MemoryContextDelete(reg->cxt);
}

/* The schema of this id as far as it was fetched, or NULL. */
SdpRegistrySchema *
sdp_registry_get(SdpRegistry *reg, int32 id)
{
	return hash_search(reg->schemas, &id, HASH_FIND, NULL);
}

MemoryContext
sdp_registry_context(SdpRegistry *reg)
{
	return reg->cxt;
}

int64
sdp_registry_fetches(SdpRegistry *reg)
{
	return reg->fetches;
}

/* The answer's body, in malloc'd memory: the callback runs inside libcurl, where no error may be raised. */
typedef struct Answer
{
	struct
	{
		char	   *data;		/* NUL-terminated */
		size_t		len;
	}			body;
	bool		too_large;
	bool		no_memory;
} Answer;

static size_t
on_data(char *data, size_t size, size_t nmemb, void *arg)
{
	Answer	   *a = arg;
	size_t		n = size * nmemb;
	char	   *grown;

	if (a->body.len + n > SDP_REGISTRY_MAX_ANSWER)
	{
		a->too_large = true;
		return 0;				/* libcurl stops the transfer */
	}
	grown = realloc(a->body.data, a->body.len + n + 1);
	if (grown == NULL)
	{
		a->no_memory = true;
		return 0;
	}
	a->body.data = grown;
	memcpy(a->body.data + a->body.len, data, n);
	a->body.len += n;
	a->body.data[a->body.len] = '\0';
	return n;
}

/*
 * libcurl's progress callback: a stop or a cancel asked of the worker ends
 * the transfer at once (other interrupts, barriers and the like, wait).
 */
static int
on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
	return (ProcDiePending || QueryCancelPending) ? 1 : 0;
}

static CURL *
registry_handle(SdpRegistry *reg)
{
	CURL	   *h;

	if (reg->curl != NULL)
		return reg->curl;		/* kept: the connection is reused */
	h = curl_easy_init();
	if (h == NULL)
		elog(ERROR, "could not create a libcurl handle");
	reg->headers = curl_slist_append(NULL, "Accept: application/vnd.schemaregistry.v1+json, application/json");
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, reg->headers);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long) SDP_REGISTRY_CONNECT_TIMEOUT_MS);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long) SDP_REGISTRY_TIMEOUT_MS);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "sdp_ext");
	if (reg->user_info)
	{
		curl_easy_setopt(h, CURLOPT_HTTPAUTH, (long) CURLAUTH_BASIC);
		curl_easy_setopt(h, CURLOPT_USERPWD, reg->user_info);
	}
	if (reg->ca_location)
		curl_easy_setopt(h, CURLOPT_CAINFO, reg->ca_location);
	if (reg->ca_pem)
	{
		struct curl_blob blob = {reg->ca_pem, strlen(reg->ca_pem), CURL_BLOB_COPY};

		curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &blob);
	}
	if (reg->cert_location)
		curl_easy_setopt(h, CURLOPT_SSLCERT, reg->cert_location);
	if (reg->cert_pem)
	{
		struct curl_blob blob = {reg->cert_pem, strlen(reg->cert_pem), CURL_BLOB_COPY};

		curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &blob);
		curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
	}
	if (reg->key_location)
		curl_easy_setopt(h, CURLOPT_SSLKEY, reg->key_location);
	if (reg->key_pem)
	{
		struct curl_blob blob = {reg->key_pem, strlen(reg->key_pem), CURL_BLOB_COPY};

		curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &blob);
		curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
	}
	if (reg->key_password)
		curl_easy_setopt(h, CURLOPT_KEYPASSWD, reg->key_password);
	if (!reg->verify_host)
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
	reg->curl = h;
	return h;
}

/* The first line of an answer, shortened, for a reason. */
static char *
answer_excerpt(const char *body)
{
	int			n = (int) strcspn(body, "\r\n");

	return pnstrdup(body, Min(n, 200));
}

/*
 * Make sure the schema of this id is known: fetched now if it was not.
 * True when it is (or the registry said it has no such id); false, with
 * the reason in *error, when the registry could not be asked or did not
 * answer as a registry does: the flow's fault, for the caller to retry.
 * Must be called outside any transaction (it waits on the network).
 */
bool
sdp_registry_fetch(SdpRegistry *reg, int32 id, char **error)
{
	SdpRegistrySchema *s;
	CURL	   *h;
	CURLcode	rc;
	char		errbuf[CURL_ERROR_SIZE];
	char	   *url;
	long		status = 0;
	Answer		a;
	bool		found;

	if (sdp_registry_get(reg, id) != NULL)
		return true;
	Assert(!IsTransactionState());

	h = registry_handle(reg);
	url = psprintf("%s/schemas/ids/%d", reg->url, id);
	a.body.data = strdup("");
	a.body.len = 0;
	a.too_large = false;
	a.no_memory = a.body.data == NULL;
	errbuf[0] = '\0';
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &a);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	rc = curl_easy_perform(h);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, NULL);
	if (rc != CURLE_OK || a.no_memory)
		free(a.body.data);
	CHECK_FOR_INTERRUPTS();
	if (a.no_memory)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory reading the schema registry's answer")));
	if (rc != CURLE_OK)
	{
		*error = psprintf("schema registry %s: could not fetch schema %d: %s", reg->shown_url, id,
						  a.too_large ? psprintf("its answer is larger than %d bytes", SDP_REGISTRY_MAX_ANSWER)
						  : errbuf[0] ? errbuf : curl_easy_strerror(rc));
		return false;
	}
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	/*
	 * Only the registry's own "no such schema" (error code 40403) is the
	 * message's fault; any other answer (a 404 of a wrong base path, a
	 * proxy's, a 5xx) is the flow's, and the batch is tried again.
	 */
	found = (status == 200);
	if (!found && !(status == 404 && strstr(a.body.data, "40403") != NULL))
	{
		*error = psprintf("schema registry %s: schema %d: HTTP %ld%s%s", reg->shown_url, id, status,
						  a.body.len > 0 ? ": " : "", answer_excerpt(a.body.data));
		free(a.body.data);
		return false;
	}
	reg->fetches++;
	s = hash_search(reg->schemas, &id, HASH_ENTER, NULL);
	s->found = found;
	s->answer = MemoryContextStrdup(reg->cxt, found ? a.body.data : answer_excerpt(a.body.data));
	s->parsed = NULL;
	s->parse_error = NULL;
	free(a.body.data);
	return true;
}

/* The registry's URL as messages show it: without credentials. */
const char *
sdp_registry_url(SdpRegistry *reg)
{
	return reg->shown_url;
}

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
 * A sink whose format is avro registers the schema of its values
 * (sdp_registry_register), as Confluent's serializers do, when its worker
 * starts, before it writes a row.
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
#include "compat.h"

#include <curl/curl.h>

#include "common/jsonapi.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/json.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

/* The largest answer taken from the registry (a schema is a few kB). */
#define SDP_REGISTRY_MAX_ANSWER (8 * 1024 * 1024)
#define SDP_REGISTRY_CONNECT_TIMEOUT_MS 5000
#define SDP_REGISTRY_TIMEOUT_MS 10000
/* An answer nested deeper than this is not one (a registry's is 3 deep: answer, references, reference). */
#define SDP_REGISTRY_MAX_DEPTH 16
/* The most references an answer may list. */
#define SDP_REGISTRY_MAX_REFS 256

struct SdpRegistry
{
	MemoryContext cxt;			/* the cache, and this */
	HTAB	   *schemas;		/* int32 id -> SdpRegistrySchema */
	List	   *versions;		/* SdpRegistryVersion: the references' schemas */
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
option(List *properties, const char *key)
{
	ListCell   *lc;

	for (lc = list_head(properties); lc != NULL; lc = lnext(properties, lnext(properties, lc)))
		if (strcmp(lfirst(lc), key) == 0)
			return lfirst(lnext(properties, lc));
	return NULL;
}

static char *
dup_option(MemoryContext cxt, List *properties, const char *key)
{
	const char *v = option(properties, key);

	return v ? MemoryContextStrdup(cxt, v) : NULL;
}

/*
 * The client of the registry at url, configured by a source's or a sink's
 * options (properties: key, value pairs), in a memory context of its own
 * under parent.
 */
SdpRegistry *
sdp_registry_create(const char *registry_url, List *properties, MemoryContext parent)
{
	MemoryContext cxt = AllocSetContextCreate(parent, "sdp schema registry", ALLOCSET_DEFAULT_SIZES);
	SdpRegistry *reg = MemoryContextAllocZero(cxt, sizeof(SdpRegistry));
	HASHCTL		ctl;
	const char *cred_source = option(properties, "basic.auth.credentials.source");
	const char *algorithm = option(properties, "schema.registry.ssl.endpoint.identification.algorithm");
	int			len;

	Assert(registry_url != NULL);
	if (!curl_ready)
	{
		if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
			elog(ERROR, "could not initialize libcurl");
		curl_ready = true;
	}
	reg->cxt = cxt;
	reg->url = MemoryContextStrdup(cxt, registry_url);
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
		reg->user_info = dup_option(cxt, properties, "basic.auth.user.info");
	reg->ca_location = dup_option(cxt, properties, "schema.registry.ssl.ca.location");
	reg->ca_pem = dup_option(cxt, properties, "schema.registry.ssl.ca.pem");
	reg->cert_location = dup_option(cxt, properties, "schema.registry.ssl.certificate.location");
	reg->cert_pem = dup_option(cxt, properties, "schema.registry.ssl.certificate.pem");
	reg->key_location = dup_option(cxt, properties, "schema.registry.ssl.key.location");
	reg->key_pem = dup_option(cxt, properties, "schema.registry.ssl.key.pem");
	reg->key_password = dup_option(cxt, properties, "schema.registry.ssl.key.password");
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

/*
 * Reading a registry's answer for a schema.  The answer is untrusted JSON
 * from the network: PostgreSQL's own parser reads it (strict JSON, linear
 * time, no exception to catch), after a scan that bounds its nesting by the
 * same rules its lexer follows (brackets outside strings; a string runs from
 * a quote to the next unescaped quote), so the parser's recursion never goes
 * past SDP_REGISTRY_MAX_DEPTH, and an answer that is not JSON is refused
 * whatever a more lenient parser would have made of it.
 */
typedef struct AnswerReader
{
	SdpRegistryAnswer *out;
	int			depth;			/* of the value being read: 1 the answer's members */
	const char *member;			/* the answer's member being read, or NULL */
	bool		in_refs;		/* in the array "references" */
	SdpRegistryRef *ref;		/* the reference being read */
	const char *ref_member;
	char	   *error;			/* why it is not an answer, once known */
} AnswerReader;

/* Whether json nests arrays and objects at most max deep (strings skipped as JSON's lexer reads them). */
static bool
json_nesting_within(const char *json, size_t len, int max)
{
	int			depth = 0;

	for (size_t i = 0; i < len; i++)
	{
		char		c = json[i];

		if (c == '"')
		{
			for (i++; i < len && json[i] != '"'; i++)
				if (json[i] == '\\')
					i++;
		}
		else if (c == '{' || c == '[')
		{
			if (++depth > max)
				return false;
		}
		else if ((c == '}' || c == ']') && depth > 0)
			depth--;
	}
	return true;
}

static SDP_JSON_CALLBACK
answer_object_start(void *state)
{
	AnswerReader *r = state;

	r->depth++;
	if (r->depth == 3 && r->in_refs && list_length(r->out->refs) < SDP_REGISTRY_MAX_REFS)
	{
		r->ref = palloc0(sizeof(SdpRegistryRef));
		r->ref->version = -1;
		r->ref_member = NULL;
	}
	SDP_JSON_CALLBACK_DONE;
}

static SDP_JSON_CALLBACK
answer_array_start(void *state)
{
	AnswerReader *r = state;

	r->depth++;
	if (r->depth == 2 && r->member != NULL && strcmp(r->member, "references") == 0)
		r->in_refs = true;
	SDP_JSON_CALLBACK_DONE;
}

static SDP_JSON_CALLBACK
answer_nested_end(void *state)
{
	AnswerReader *r = state;

	if (r->depth == 3 && r->ref != NULL)
	{
		/* a reference without its three members is not one: passed over, as Confluent's clients do */
		if (r->ref->name != NULL && r->ref->subject != NULL && r->ref->version >= 0)
			r->out->refs = lappend(r->out->refs, r->ref);
		r->ref = NULL;
	}
	else if (r->depth == 2)
		r->in_refs = false;
	r->depth--;
	SDP_JSON_CALLBACK_DONE;
}

static SDP_JSON_CALLBACK
answer_field_start(void *state, char *fname, bool isnull)
{
	AnswerReader *r = state;

	if (r->depth == 1)
		r->member = fname;
	else if (r->depth == 3 && r->ref != NULL)
		r->ref_member = fname;
	SDP_JSON_CALLBACK_DONE;
}

static SDP_JSON_CALLBACK
answer_scalar(void *state, char *token, JsonTokenType type)
{
	AnswerReader *r = state;

	if (r->depth == 1 && r->member != NULL && type == JSON_TOKEN_STRING)
	{
		if (strcmp(r->member, "schema") == 0)
			r->out->schema = token;
		else if (strcmp(r->member, "schemaType") == 0)
			r->out->schema_type = token;
	}
	else if (r->depth == 3 && r->ref != NULL && r->ref_member != NULL)
	{
		if (strcmp(r->ref_member, "name") == 0 && type == JSON_TOKEN_STRING)
			r->ref->name = token;
		else if (strcmp(r->ref_member, "subject") == 0 && type == JSON_TOKEN_STRING)
			r->ref->subject = token;
		else if (strcmp(r->ref_member, "version") == 0 && type == JSON_TOKEN_NUMBER)
		{
			char	   *end;
			long		v;

			errno = 0;
			v = strtol(token, &end, 10);
			if (*end == '\0' && errno == 0 && v >= 0 && v <= PG_INT32_MAX)
				r->ref->version = (int) v;
		}
	}
	SDP_JSON_CALLBACK_DONE;
}

static int
hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* The code unit of "\uXXXX" at p (6 bytes at least before end), or -1. */
static int
escaped_unit(const char *p, const char *end)
{
	int			v = 0;

	if (end - p < 6 || p[0] != '\\' || p[1] != 'u')
		return -1;
	for (int i = 2; i < 6; i++)
	{
		int			h = hex_value(p[i]);

		if (h < 0)
			return -1;
		v = v * 16 + h;
	}
	return v;
}

/*
 * The answer with its \u escapes of characters past ASCII written as the
 * characters, in UTF-8 (a surrogate pair as one character): PostgreSQL's
 * JSON lexer would decode them into the database's encoding, and raise
 * when that has no such character.  What the answer holds is UTF-8, and so
 * is what is read of it: a Protobuf schema is given to libprotobuf so, an
 * Avro schema is brought to the database's encoding where it is parsed (in
 * a transaction, where an error is the message's).  Escapes of ASCII stay
 * (a quote, a control character), as does what is not a valid escape (the
 * lexer refuses it).  Never longer than the answer.
 */
static char *
unescape_past_ascii(const char *answer, size_t len)
{
	char	   *out = palloc(len + 1);
	char	   *o = out;
	const char *p = answer;
	const char *end = answer + len;

	while (p < end)
	{
		int			u;

		if (*p != '\\')
		{
			*o++ = *p++;
			continue;
		}
		u = escaped_unit(p, end);
		if (u < 0x80)
		{
			/* an escape of ASCII, another escape, or not one: as it is (a backslash escaped stays two) */
			*o++ = *p++;
			if (p < end)
				*o++ = *p++;
			continue;
		}
		if (u >= 0xD800 && u <= 0xDBFF)
		{
			int			low = escaped_unit(p + 6, end);

			if (low >= 0xDC00 && low <= 0xDFFF)
			{
				o = (char *) unicode_to_utf8(0x10000 + ((u - 0xD800) << 10) + (low - 0xDC00), (unsigned char *) o);
				o += pg_utf_mblen((unsigned char *) o);
				p += 12;
				continue;
			}
		}
		if (u >= 0xD800 && u <= 0xDFFF)
		{
			/* a lone surrogate: left for the lexer to refuse */
			memcpy(o, p, 6);
			o += 6;
			p += 6;
			continue;
		}
		o = (char *) unicode_to_utf8(u, (unsigned char *) o);
		o += pg_utf_mblen((unsigned char *) o);
		p += 6;
	}
	*o = '\0';
	return out;
}

/*
 * A registry's answer for a schema read: its "schema" text, its
 * "schemaType" (NULL when it has none: Avro) and its "references" (a
 * Protobuf schema's imports), palloc'd, in UTF-8 whatever the database's
 * encoding.  False with the reason when the answer is not a JSON object
 * with a string "schema".  Raises nothing but
 * out of memory: it runs outside any transaction too (the worker reads a
 * Protobuf schema's references before its batch).
 */
bool
sdp_registry_read_answer(const char *answer, SdpRegistryAnswer *out, char **error)
{
	size_t		len = strlen(answer);
	JsonLexContext *lex;
	JsonSemAction sem = {0};
	AnswerReader r = {0};
	JsonParseErrorType result;

	memset(out, 0, sizeof(*out));
	*error = NULL;
	if (pg_encoding_verifymbstr(PG_UTF8, answer, (int) len) < (int) len)
	{
		*error = pstrdup("the answer is not valid UTF-8");
		return false;
	}
	if (!json_nesting_within(answer, len, SDP_REGISTRY_MAX_DEPTH))
	{
		*error = psprintf("the answer nests arrays or objects more than %d deep", SDP_REGISTRY_MAX_DEPTH);
		return false;
	}
	answer = unescape_past_ascii(answer, len);
	len = strlen(answer);
	lex = sdp_json_lexer(unconstify(char *, answer), (int) len, PG_UTF8, true);
	r.out = out;
	sem.semstate = &r;
	sem.object_start = answer_object_start;
	sem.object_end = answer_nested_end;
	sem.array_start = answer_array_start;
	sem.array_end = answer_nested_end;
	sem.object_field_start = answer_field_start;
	sem.scalar = answer_scalar;
	result = pg_parse_json(lex, &sem);
	if (result != JSON_SUCCESS)
	{
		*error = psprintf("the answer is not JSON: %s", json_errdetail(result, lex));
		memset(out, 0, sizeof(*out));
		return false;
	}
	if (out->schema == NULL)
	{
		*error = pstrdup("the answer has no \"schema\"");
		memset(out, 0, sizeof(*out));
		return false;
	}
	return true;
}

/* The first line of an answer, shortened, for a reason. */
static char *
answer_excerpt(const char *body)
{
	int			n = (int) strcspn(body, "\r\n");

	return pnstrdup(body, Min(n, 200));
}

/*
 * GET url of the registry: true with the HTTP status and the answer's body
 * (palloc'd); false, with the reason in *error, when the registry could
 * not be asked.  what names what was asked for, for the reason.
 */
static bool
registry_get(SdpRegistry *reg, const char *url, const char *what, long *status, char **body, char **error)
{
	CURL	   *h;
	CURLcode	rc;
	char		errbuf[CURL_ERROR_SIZE];
	Answer		a;

	Assert(!IsTransactionState());
	h = registry_handle(reg);
	a.body.data = strdup("");
	a.body.len = 0;
	a.too_large = false;
	a.no_memory = a.body.data == NULL;
	errbuf[0] = '\0';
	*status = 0;
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &a);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	rc = curl_easy_perform(h);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, NULL);
	if (rc != CURLE_OK || a.no_memory)
	{
		free(a.body.data);
		a.body.data = NULL;
	}
	CHECK_FOR_INTERRUPTS();
	if (a.no_memory)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory reading the schema registry's answer")));
	if (rc != CURLE_OK)
	{
		*error = psprintf("schema registry %s: could not fetch %s: %s", reg->shown_url, what,
						  a.too_large ? psprintf("its answer is larger than %d bytes", SDP_REGISTRY_MAX_ANSWER)
						  : errbuf[0] ? errbuf : curl_easy_strerror(rc));
		return false;
	}
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
	*body = pstrdup(a.body.data);
	free(a.body.data);
	return true;
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
	long		status;
	char	   *body;
	char	   *what;
	bool		found;

	if (sdp_registry_get(reg, id) != NULL)
		return true;
	what = psprintf("schema %d", id);
	if (!registry_get(reg, psprintf("%s/schemas/ids/%d", reg->url, id), what, &status, &body, error))
		return false;

	/*
	 * Only the registry's own "no such schema" (error code 40403) is the
	 * message's fault; any other answer (a 404 of a wrong base path, a
	 * proxy's, a 5xx) is the flow's, and the batch is tried again.
	 */
	found = (status == 200);
	if (!found && !(status == 404 && strstr(body, "40403") != NULL))
	{
		*error = psprintf("schema registry %s: %s: HTTP %ld%s%s", reg->shown_url, what, status,
						  body[0] ? ": " : "", answer_excerpt(body));
		return false;
	}
	reg->fetches++;
	sdp_registry_put(reg, id, found, found ? body : answer_excerpt(body));
	return true;
}

/*
 * Keep answer as the registry's for schema id, which is not known yet:
 * its schema (found), or why it has none.  A fetch keeps what it took so;
 * fuzz/sdp_fuzz.c keeps answers that no registry gave.
 */
void
sdp_registry_put(SdpRegistry *reg, int32 id, bool found, const char *answer)
{
	SdpRegistrySchema *s = hash_search(reg->schemas, &id, HASH_ENTER, NULL);

	s->found = found;
	s->answer = MemoryContextStrdup(reg->cxt, answer);
	s->parsed = NULL;
	s->parse_error = NULL;
}

/* Forget the schema of this id (not parsed yet): fetched again when next asked for. */
void
sdp_registry_forget(SdpRegistry *reg, int32 id)
{
	SdpRegistrySchema *s = hash_search(reg->schemas, &id, HASH_REMOVE, NULL);

	if (s != NULL)
	{
		Assert(s->parsed == NULL);
		pfree(s->answer);
	}
}

/* A version of a subject as far as it was fetched, or NULL. */
SdpRegistryVersion *
sdp_registry_get_version(SdpRegistry *reg, const char *subject, int version)
{
	ListCell   *lc;

	foreach(lc, reg->versions)
	{
		SdpRegistryVersion *v = lfirst(lc);

		if (v->version == version && strcmp(v->subject, subject) == 0)
			return v;
	}
	return NULL;
}

/*
 * Make sure this version of subject is known (a schema's reference names
 * the schema it imports so): fetched now if it was not.  As
 * sdp_registry_fetch: true when it is, or the registry said it has no such
 * subject or version (40401, 40402); false, with the reason, when the
 * registry could not be asked.  Outside any transaction.
 */
bool
sdp_registry_fetch_version(SdpRegistry *reg, const char *subject, int version, char **error)
{
	long		status;
	char	   *body;
	char	   *what;
	char	   *escaped;
	char	   *url;
	bool		found;

	if (sdp_registry_get_version(reg, subject, version) != NULL)
		return true;
	escaped = curl_easy_escape(registry_handle(reg), subject, 0);
	if (escaped == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	url = psprintf("%s/subjects/%s/versions/%d", reg->url, escaped, version);
	curl_free(escaped);
	what = psprintf("version %d of subject \"%s\"", version, subject);
	if (!registry_get(reg, url, what, &status, &body, error))
		return false;
	found = (status == 200);
	if (!found && !(status == 404 && (strstr(body, "40401") != NULL || strstr(body, "40402") != NULL)))
	{
		*error = psprintf("schema registry %s: %s: HTTP %ld%s%s", reg->shown_url, what, status,
						  body[0] ? ": " : "", answer_excerpt(body));
		return false;
	}
	reg->fetches++;
	sdp_registry_put_version(reg, subject, version, found, found ? body : answer_excerpt(body));
	return true;
}

/* As sdp_registry_put, for a version of a subject not known yet. */
void
sdp_registry_put_version(SdpRegistry *reg, const char *subject, int version, bool found, const char *answer)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(reg->cxt);
	SdpRegistryVersion *v = palloc(sizeof(SdpRegistryVersion));

	v->subject = pstrdup(subject);
	v->version = version;
	v->found = found;
	v->answer = pstrdup(answer);
	reg->versions = lappend(reg->versions, v);
	MemoryContextSwitchTo(oldcxt);
}

/* The registry's URL as messages show it: without credentials. */
const char *
sdp_registry_url(SdpRegistry *reg)
{
	return reg->shown_url;
}

/*
 * Register schema (Avro, JSON text) under subject, as Confluent's
 * serializers do when they auto-register (POST /subjects/{subject}/versions):
 * the registry answers with the schema's id, the same id for the same schema
 * under the subject, a new version for a new one if the subject's
 * compatibility level allows it.  True with *id; false, with the reason,
 * when the registry could not be asked or refused (an incompatible schema:
 * HTTP 409).  Outside any transaction (it waits on the network).
 */
bool
sdp_registry_register(SdpRegistry *reg, const char *subject, const char *schema, int32 *id, char **error)
{
	CURL	   *h;
	CURLcode	rc;
	char		errbuf[CURL_ERROR_SIZE];
	StringInfoData body;
	struct curl_slist *headers;
	long		status = 0;
	Answer		a;
	const char *p;
	char	   *end;
	long		value;

	Assert(!IsTransactionState());
	h = registry_handle(reg);
	initStringInfo(&body);
	appendStringInfoString(&body, "{\"schema\": ");
	escape_json(&body, schema);
	appendStringInfoString(&body, "}");
	headers = curl_slist_append(NULL, "Accept: application/vnd.schemaregistry.v1+json, application/json");
	headers = headers ? curl_slist_append(headers, "Content-Type: application/vnd.schemaregistry.v1+json") : NULL;
	if (headers == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	a.body.data = strdup("");
	a.body.len = 0;
	a.too_large = false;
	a.no_memory = a.body.data == NULL;
	errbuf[0] = '\0';
	curl_easy_setopt(h, CURLOPT_URL, psprintf("%s/subjects/%s/versions", reg->url, subject));
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.data);
	curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long) body.len);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &a);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	rc = curl_easy_perform(h);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, NULL);
	/* the handle goes back to what the fetches ask */
	curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, reg->headers);
	curl_slist_free_all(headers);
	if (rc == CURLE_OK && !a.no_memory)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	if (rc != CURLE_OK || a.no_memory)
	{
		free(a.body.data);
		a.body.data = NULL;
	}
	CHECK_FOR_INTERRUPTS();
	if (a.no_memory)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory reading the schema registry's answer")));
	if (rc != CURLE_OK)
	{
		*error = psprintf("schema registry %s: could not register the schema of subject \"%s\": %s",
						  reg->shown_url, subject, errbuf[0] ? errbuf : curl_easy_strerror(rc));
		return false;
	}
	/* {"id": 7}: the one member an answer of 200 has */
	p = status == 200 ? strstr(a.body.data, "\"id\"") : NULL;
	if (p != NULL)
	{
		p += 4;
		while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ':')
			p++;
		errno = 0;
		value = strtol(p, &end, 10);
		if (end == p || errno != 0 || value < 0 || value > PG_INT32_MAX)
			p = NULL;
	}
	if (p == NULL)
	{
		*error = psprintf("schema registry %s: registering the schema of subject \"%s\": HTTP %ld%s%s",
						  reg->shown_url, subject, status, a.body.len > 0 ? ": " : "", answer_excerpt(a.body.data));
		free(a.body.data);
		return false;
	}
	free(a.body.data);
	*id = (int32) value;
	return true;
}

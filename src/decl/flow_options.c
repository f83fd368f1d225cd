/*
 * flow_options.c
 *		Parsing and validation of flow and source options (jsonb).
 *
 * Used twice: by sdp_create_flow / sdp_create_source, which refuse a bad
 * option with a specific error, and by the worker, which reads the same
 * options back from the catalog.
 */
#include "decl/flow_options.h"
#include "compat.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/varlena.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

typedef struct OptionContext
{
	const char *option;
} OptionContext;

static void
option_error_context(void *arg)
{
	OptionContext *ctx = (OptionContext *) arg;

	errcontext("option \"%s\"", ctx->option);
}

/* The value of an option as text: strings as they are, numbers and booleans spelled out. */
static char *
jsonb_scalar_text(const char *key, JsonbValue *v)
{
	switch (v->type)
	{
		case jbvString:
			return pnstrdup(v->val.string.val, v->val.string.len);
		case jbvNumeric:
			return DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(v->val.numeric)));
		case jbvBool:
			return pstrdup(v->val.boolean ? "true" : "false");
		default:
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("option \"%s\" must be a string, a number or a boolean", key)));
	}
	return NULL;				/* keep compiler quiet */
}

/*
 * A duration option in microseconds: an interval string ('30 seconds',
 * '250 ms', '90 days') or a bare number of milliseconds.  Months count 30 days.
 */
int64
sdp_interval_option_us(const char *option, const char *text)
{
	ErrorContextCallback errcb;
	OptionContext ctx = {option};
	char	   *end;
	double		ms;

	errno = 0;
	ms = strtod(text, &end);
	if (end == text || *end != '\0' || errno != 0)
	{
		Interval   *iv;

		errcb.callback = option_error_context;
		errcb.arg = &ctx;
		errcb.previous = error_context_stack;
		error_context_stack = &errcb;
		iv = DatumGetIntervalP(DirectFunctionCall3(interval_in, CStringGetDatum(text),
												   ObjectIdGetDatum(InvalidOid),
												   Int32GetDatum(-1)));
		error_context_stack = errcb.previous;
		ms = (double) iv->time / 1000.0 +
			(double) iv->day * 86400000.0 +
			(double) iv->month * 30.0 * 86400000.0;
	}
	if (ms < 0 || ms > 1e14)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"%s\" is out of range: \"%s\"", option, text),
				 errhint("Give a positive duration, e.g. '10 seconds'.")));
	return (int64) (ms * 1000.0);
}

/* The same in milliseconds, for durations of at most 24 days. */
int
sdp_interval_option_ms(const char *option, const char *text)
{
	int64		us = sdp_interval_option_us(option, text);

	if (us / 1000 > INT_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"%s\" is out of range: \"%s\"", option, text),
				 errhint("Give a duration between 0 and 24 days, e.g. '10 seconds'.")));
	return (int) (us / 1000);
}

static int
int_option(const char *option, const char *text, int min, int max)
{
	char	   *end;
	long		v;

	errno = 0;
	v = strtol(text, &end, 10);
	if (end == text || *end != '\0' || errno != 0 || v < min || v > max)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"%s\" must be an integer between %d and %d, not \"%s\"",
						option, min, max, text)));
	return (int) v;
}

/* A memory size option ('64MB', '512kB', or a number of kB), at least 1 MB. */
static int
memory_option_kb(const char *option, const char *text)
{
	int			kb;
	const char *hint;

	if (!parse_int(text, &kb, GUC_UNIT_KB, &hint) || kb < 1024)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"%s\" must be a memory size of at least 1MB, not \"%s\"", option, text),
				 errhint("E.g. '64MB' or '1GB'.")));
	return kb;
}

static int
int32_cmp(const void *a, const void *b)
{
	int32		x = *(const int32 *) a;
	int32		y = *(const int32 *) b;

	return x < y ? -1 : x > y ? 1 : 0;
}

/*
 * Option "partitions": the share of the topic's partitions this server's
 * flow consumes, a JSON array of distinct partition numbers (from 0), kept
 * sorted.  The topic need not have them all yet (worker/worker_start.c).
 */
static void
share_option(JsonbValue *v, SdpFlowOptions *opts)
{
	const char *hint = "Give the Kafka partitions the flow consumes on this server, e.g. [0, 1, 2, 3], or leave the option out for every partition of the topic.";
	JsonbIterator *it;
	JsonbValue	elem;
	JsonbIteratorToken tok;
	int			n = 0;
	int			size;

	if (v->type != jbvBinary || !JsonContainerIsArray(v->val.binary.data) ||
		JsonContainerIsScalar(v->val.binary.data))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"partitions\" must be a JSON array of partition numbers"),
				 errhint("%s", hint)));
	size = JsonContainerSize(v->val.binary.data);
	if (size == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"partitions\" must not be empty"),
				 errhint("%s", hint)));
	opts->share = palloc(sizeof(int32) * size);
	it = JsonbIteratorInit(v->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &elem, true)) != WJB_DONE)
	{
		char	   *text;
		char	   *end;
		long		p;

		if (tok != WJB_ELEM)
			continue;
		if (elem.type != jbvNumeric)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("option \"partitions\" must hold partition numbers, not %s",
							elem.type == jbvString ? "strings" :
							elem.type == jbvNull ? "null" :
							elem.type == jbvBool ? "booleans" : "arrays or objects"),
					 errhint("%s", hint)));
		text = DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(elem.val.numeric)));
		errno = 0;
		p = strtol(text, &end, 10);
		if (end == text || *end != '\0' || errno != 0 || p > PG_INT32_MAX || p < PG_INT32_MIN)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("option \"partitions\" must hold integers from 0 to %d, not %s", PG_INT32_MAX, text),
					 errhint("%s", hint)));
		if (p < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("option \"partitions\" holds a negative partition number: %ld", p),
					 errhint("Kafka numbers a topic's partitions from 0.")));
		opts->share[n++] = (int32) p;
	}
	qsort(opts->share, n, sizeof(int32), int32_cmp);
	for (int i = 1; i < n; i++)
		if (opts->share[i] == opts->share[i - 1])
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("option \"partitions\" holds partition %d more than once", opts->share[i]),
					 errhint("Give each partition once.")));
	opts->nshare = n;
}

const char *
sdp_write_mode_name(SdpWriteMode mode)
{
	return mode == SDP_MODE_UPSERT ? "upsert" : "append";
}

/*
 * Parse a flow's options.  Keys the flow does not know are left in
 * opts->operator_options for the flow's operator; a stateless flow refuses
 * them (api.c).
 */
void
sdp_parse_flow_options(Jsonb *options, SdpFlowOptions *opts)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	JsonbParseState *state = NULL;
	bool		any_unknown = false;

	memset(opts, 0, sizeof(*opts));
	opts->mode = SDP_MODE_APPEND;
	opts->on_error = SDP_ON_ERROR_DEAD_LETTER;
	opts->workers = 1;
	opts->checkpoint_interval_ms = 10000;
	opts->synchronous_commit = "off";
	opts->max_batch_rows = sdp_default_max_batch_rows;
	opts->max_batch_kb = 64 * 1024;
	opts->max_batch_wait_ms = 0;
	opts->progress_interval_ms = 10000;
	opts->state_memory_limit_kb = sdp_default_state_memory_limit_kb;
	opts->statement_timeout_ms = SDP_DEFAULT_STATEMENT_TIMEOUT_MS;

	if (options == NULL)
		return;
	if (!JB_ROOT_IS_OBJECT(options))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("flow options must be a JSON object")));

	pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	it = JsonbIteratorInit(&options->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		char	   *key;
		char	   *val;
		JsonbValue	keyv;

		if (tok != WJB_KEY)
			continue;
		keyv = v;
		key = pnstrdup(v.val.string.val, v.val.string.len);
		tok = JsonbIteratorNext(&it, &v, true);

		if (strcmp(key, "mode") == 0)
		{
			val = jsonb_scalar_text(key, &v);
			opts->mode_given = true;
			if (strcmp(val, "upsert") == 0)
				opts->mode = SDP_MODE_UPSERT;
			else if (strcmp(val, "append") == 0)
				opts->mode = SDP_MODE_APPEND;
			else
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("invalid value for option \"mode\": \"%s\"", val),
						 errhint("Valid values are \"upsert\" and \"append\".")));
		}
		else if (strcmp(key, "on_error") == 0)
		{
			val = jsonb_scalar_text(key, &v);
			if (strcmp(val, "dead_letter") == 0)
				opts->on_error = SDP_ON_ERROR_DEAD_LETTER;
			else if (strcmp(val, "skip") == 0)
				opts->on_error = SDP_ON_ERROR_SKIP;
			else if (strcmp(val, "fail") == 0)
				opts->on_error = SDP_ON_ERROR_FAIL;
			else
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("invalid value for option \"on_error\": \"%s\"", val),
						 errhint("Valid values are \"dead_letter\", \"skip\" and \"fail\".")));
		}
		else if (strcmp(key, "on_tombstone") == 0)
		{
			val = jsonb_scalar_text(key, &v);
			opts->on_tombstone_given = true;
			if (strcmp(val, "dead_letter") == 0)
				opts->on_tombstone = SDP_TOMBSTONE_DEAD_LETTER;
			else if (strcmp(val, "skip") == 0)
				opts->on_tombstone = SDP_TOMBSTONE_SKIP;
			else if (strcmp(val, "delete") == 0)
				opts->on_tombstone = SDP_TOMBSTONE_DELETE;
			else
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("invalid value for option \"on_tombstone\": \"%s\"", val),
						 errhint("Valid values are \"dead_letter\", \"skip\" and \"delete\".")));
		}
		else if (strcmp(key, "envelope") == 0)
		{
			val = jsonb_scalar_text(key, &v);
			if (strcmp(val, "none") == 0)
				opts->envelope = SDP_ENVELOPE_NONE;
			else if (strcmp(val, "debezium") == 0)
				opts->envelope = SDP_ENVELOPE_DEBEZIUM;
			else
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("invalid value for option \"envelope\": \"%s\"", val),
						 errhint("Valid values are \"none\" (the message is the row) and \"debezium\" (a Debezium change event).")));
		}
		else if (strcmp(key, "workers") == 0)
			opts->workers = int_option(key, jsonb_scalar_text(key, &v), 1, SDP_MAX_WORKERS);
		else if (strcmp(key, "partitions") == 0)
			share_option(&v, opts);
		else if (strcmp(key, "checkpoint_interval") == 0)
			opts->checkpoint_interval_ms = Max(1, sdp_interval_option_ms(key, jsonb_scalar_text(key, &v)));
		else if (strcmp(key, "progress_interval") == 0)
			opts->progress_interval_ms = Max(100, sdp_interval_option_ms(key, jsonb_scalar_text(key, &v)));
		else if (strcmp(key, "max_batch_wait") == 0)
			opts->max_batch_wait_ms = Min(60000, sdp_interval_option_ms(key, jsonb_scalar_text(key, &v)));
		else if (strcmp(key, "state_memory_limit") == 0)
			opts->state_memory_limit_kb = memory_option_kb(key, jsonb_scalar_text(key, &v));
		else if (strcmp(key, "notify") == 0)
		{
			val = jsonb_scalar_text(key, &v);
			if (val[0] == '\0' || strlen(val) >= NAMEDATALEN)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("option \"notify\" must be a channel name of 1 to %d bytes", NAMEDATALEN - 1)));
			opts->notify_channel = val;
		}
		else if (strcmp(key, "sink_key") == 0)
		{
			val = jsonb_scalar_text(key, &v);
			if (val[0] == '\0')
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("option \"sink_key\" must name a column of the flow's rows")));
			opts->sink_key = val;
		}
		else if (strcmp(key, "search_path") == 0)
		{
			char	   *copy;
			List	   *names;

			val = jsonb_scalar_text(key, &v);
			copy = pstrdup(val);
			if (!SplitIdentifierString(copy, ',', &names))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("option \"search_path\" must be a list of schema names, not \"%s\"", val),
						 errhint("Give it as search_path is set, e.g. \"app, public\".")));
			opts->search_path = val;
		}
		else if (strcmp(key, "statement_timeout") == 0)
			opts->statement_timeout_ms = sdp_interval_option_ms(key, jsonb_scalar_text(key, &v));
		else if (strcmp(key, "max_batch_rows") == 0)
			opts->max_batch_rows = int_option(key, jsonb_scalar_text(key, &v), 1, 1000000);
		else if (strcmp(key, "max_batch_bytes") == 0)
			opts->max_batch_kb = memory_option_kb(key, jsonb_scalar_text(key, &v));
		else if (strcmp(key, "synchronous_commit") == 0)
		{
			const char *valid[] = {"off", "local", "remote_write", "remote_apply", "on"};
			bool		ok = false;

			val = jsonb_scalar_text(key, &v);
			if (strcmp(val, "false") == 0)
				val = "off";
			else if (strcmp(val, "true") == 0)
				val = "on";
			for (int i = 0; i < lengthof(valid); i++)
				ok |= (strcmp(val, valid[i]) == 0);
			if (!ok)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("invalid value for option \"synchronous_commit\": \"%s\"", val),
						 errhint("Valid values are off, local, remote_write, remote_apply and on.")));
			opts->synchronous_commit = val;
		}
		else
		{
			any_unknown = true;
			pushJsonbValue(&state, WJB_KEY, &keyv);
			pushJsonbValue(&state, WJB_VALUE, &v);
		}
	}
	if (any_unknown)
		opts->operator_options = JsonbValueToJsonb(pushJsonbValue(&state, WJB_END_OBJECT, NULL));
	sdp_check_share_workers(opts->workers, opts->nshare);
	/* Debezium follows each delete event by a tombstone, for compaction: the event deleted */
	if (opts->envelope == SDP_ENVELOPE_DEBEZIUM && !opts->on_tombstone_given)
		opts->on_tombstone = SDP_TOMBSTONE_SKIP;
}

/*
 * A finite timestamp with time zone (a zone-less one is in the session's
 * TimeZone), without raising an error for text that is not one.
 */
static bool
parse_start_time(const char *str, TimestampTz *result)
{
	char		workbuf[MAXDATELEN + MAXDATEFIELDS];
	char	   *field[MAXDATEFIELDS];
	int			ftype[MAXDATEFIELDS];
	int			nf;
	int			dtype;
	int			tz;
	fsec_t		fsec;
	struct pg_tm tt;

	if (ParseDateTime(str, workbuf, sizeof(workbuf), field, ftype, MAXDATEFIELDS, &nf) != 0 ||
		sdp_decode_datetime(field, ftype, nf, &dtype, &tt, &fsec, &tz) != 0 ||
		dtype != DTK_DATE || tm2timestamp(&tt, fsec, &tz, result) != 0)
		return false;
	return !TIMESTAMP_NOT_FINITE(*result);
}

/*
 * The source options that are not librdkafka's: the formats and the schema
 * registry's client (named as Confluent's clients name them).  They stay
 * in the properties list, so that kafka_properties_check_role judges them
 * with the others (a URL's host, a file of the server), and are left out
 * of the consumer's configuration.
 */
static const char *const format_options[] = {
	"format", "key.format", "schema.registry.url", "basic.auth.credentials.source",
	"basic.auth.user.info", "schema.registry.ssl.ca.location", "schema.registry.ssl.ca.pem",
	"schema.registry.ssl.certificate.location", "schema.registry.ssl.certificate.pem",
	"schema.registry.ssl.key.location", "schema.registry.ssl.key.pem",
	"schema.registry.ssl.key.password", "schema.registry.ssl.endpoint.identification.algorithm"
};

bool
sdp_source_format_option(const char *key)
{
	for (int i = 0; i < lengthof(format_options); i++)
		if (strcmp(key, format_options[i]) == 0)
			return true;
	return false;
}

static SdpFormat
parse_format(const char *key, const char *val)
{
	bool		is_key = strcmp(key, "key.format") == 0;

	if (strcmp(val, "avro") == 0)
		return SDP_FORMAT_AVRO;
	if (strcmp(val, "protobuf") == 0)
		return SDP_FORMAT_PROTOBUF;
	if (!is_key && strcmp(val, "json") == 0)
		return SDP_FORMAT_JSON;
	if (is_key && strcmp(val, "text") == 0)
		return SDP_FORMAT_TEXT;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid value for option \"%s\": \"%s\"", key, val),
			 is_key ? errhint("Valid values are \"text\" (the key as it is, the default), \"avro\" and \"protobuf\" (Confluent's wire format, with schema.registry.url).")
			 : errhint("Valid values are \"json\" (the default), \"avro\" and \"protobuf\" (Confluent's wire format, with schema.registry.url).")));
	return SDP_FORMAT_JSON;		/* keep compiler quiet */
}

/* The registry's options hang together: a URL for Avro, credentials as Confluent's clients take them. */
static void
check_format_options(List *properties, const char *registry_url, SdpFormat format, SdpFormat key_format,
					 const char *what)
{
	const char *other = NULL;
	const char *cred_source = NULL;
	const char *user_info = NULL;
	ListCell   *lc;

	for (lc = list_head(properties); lc != NULL; lc = lnext(properties, lnext(properties, lc)))
	{
		const char *key = lfirst(lc);
		const char *val = lfirst(lnext(properties, lc));

		if (strcmp(key, "basic.auth.credentials.source") == 0)
			cred_source = val;
		else if (strcmp(key, "basic.auth.user.info") == 0)
			user_info = val;
		else if (strcmp(key, "schema.registry.ssl.endpoint.identification.algorithm") == 0 &&
				 strcmp(val, "https") != 0 && strcmp(val, "none") != 0 && val[0] != '\0')
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid value for option \"%s\": \"%s\"", key, val),
					 errhint("Valid values are \"https\" (the registry's certificate must name its host, the default) and \"none\".")));
		if (sdp_source_format_option(key) && strcmp(key, "format") != 0 && strcmp(key, "key.format") != 0 &&
			strcmp(key, "schema.registry.url") != 0 && other == NULL)
			other = key;
	}
	if (registry_url == NULL)
	{
		if (other != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("option \"%s\" is for a schema registry, and the %s has none", other, what),
					 errhint("Give the registry's URL in \"schema.registry.url\".")));
		if (format == SDP_FORMAT_AVRO || key_format == SDP_FORMAT_AVRO ||
			format == SDP_FORMAT_PROTOBUF || key_format == SDP_FORMAT_PROTOBUF)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s %s need a schema registry",
							(format == SDP_FORMAT_AVRO || key_format == SDP_FORMAT_AVRO) ? "Avro" : "Protobuf",
							(format == SDP_FORMAT_AVRO || format == SDP_FORMAT_PROTOBUF) ? "values" : "keys"),
					 errdetail("A message in Confluent's wire format carries the id of its schema in the registry, not the schema."),
					 errhint("Give the registry's URL in \"schema.registry.url\", e.g. \"http://registry:8081\".")));
		return;
	}
	if (pg_strncasecmp(registry_url, "http://", 7) != 0 &&
		pg_strncasecmp(registry_url, "https://", 8) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid value for option \"schema.registry.url\": \"%s\"", registry_url),
				 errhint("The registry's URL is http:// or https://, e.g. \"http://registry:8081\" (one URL).")));
	for (const char *p = registry_url; *p; p++)
		if ((unsigned char) *p <= ' ' || *p == 0x7f)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid value for option \"schema.registry.url\": it holds %s at byte %d",
							*p == ' ' ? "a space" : "a control character", (int) (p - registry_url) + 1),
					 errhint("Write spaces and other special characters of a URL %%-encoded (%%20).")));
	if (cred_source != NULL && strcmp(cred_source, "USER_INFO") != 0 && strcmp(cred_source, "URL") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid value for option \"basic.auth.credentials.source\": \"%s\"", cred_source),
				 errhint("Valid values are \"USER_INFO\" (basic.auth.user.info) and \"URL\" (in the URL: http://user:password@host).")));
	if (user_info != NULL && strchr(user_info, ':') == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"basic.auth.user.info\" is not \"user:password\"")));
	if (cred_source != NULL && strcmp(cred_source, "USER_INFO") == 0 && user_info == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"basic.auth.credentials.source\" is USER_INFO, and \"basic.auth.user.info\" is not given")));
}

/*
 * Parse a source's options: starting_offsets, the formats and the schema
 * registry's options, and librdkafka properties passed through as strings.
 * The properties are checked against librdkafka by the caller
 * (kafka_source.c).
 */
void
sdp_parse_source_options(Jsonb *options, SdpSourceDef *source)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;

	source->start_at_earliest = true;
	source->properties = NIL;
	source->format = SDP_FORMAT_JSON;
	source->key_format = SDP_FORMAT_TEXT;
	source->registry_url = NULL;
	if (options == NULL)
		return;
	if (!JB_ROOT_IS_OBJECT(options))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("source options must be a JSON object")));

	it = JsonbIteratorInit(&options->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		char	   *key;
		char	   *val;

		if (tok != WJB_KEY)
			continue;
		key = pnstrdup(v.val.string.val, v.val.string.len);
		tok = JsonbIteratorNext(&it, &v, true);
		val = jsonb_scalar_text(key, &v);

		if (strcmp(key, "starting_offsets") == 0)
		{
			if (strcmp(val, "earliest") == 0)
				source->start_at_earliest = true;
			else if (strcmp(val, "latest") == 0)
				source->start_at_earliest = false;
			else if (parse_start_time(val, &source->start_at_time))
				source->start_at_time_set = true;
			else
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("invalid value for option \"starting_offsets\": \"%s\"", val),
						 errhint("Valid values are \"earliest\", \"latest\" and a timestamp, e.g. \"2026-12-01T06:00:00Z\".")));
		}
		else
		{
			if (strcmp(key, "format") == 0 || strcmp(key, "key.format") == 0)
				*(strcmp(key, "format") == 0 ? &source->format : &source->key_format) = parse_format(key, val);
			else if (strcmp(key, "schema.registry.url") == 0)
				source->registry_url = val;
			source->properties = lappend(lappend(source->properties, key), val);
		}
	}
	check_format_options(source->properties, source->registry_url, source->format, source->key_format, "source");
}

/*
 * Parse a sink's options: the format of its values and the schema
 * registry's options, and librdkafka producer properties passed through as
 * strings (checked by kafka_relay_validate_properties).
 */
void
sdp_parse_sink_options(Jsonb *options, SdpSinkDef *sink)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;

	sink->properties = NIL;
	sink->format = SDP_FORMAT_JSON;
	sink->registry_url = NULL;
	if (options == NULL)
		return;
	if (!JB_ROOT_IS_OBJECT(options))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("sink options must be a JSON object")));

	it = JsonbIteratorInit(&options->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		char	   *key;
		char	   *val;

		if (tok != WJB_KEY)
			continue;
		key = pnstrdup(v.val.string.val, v.val.string.len);
		tok = JsonbIteratorNext(&it, &v, true);
		val = jsonb_scalar_text(key, &v);
		if (strcmp(key, "format") == 0)
		{
			sink->format = parse_format(key, val);
			if (sink->format == SDP_FORMAT_PROTOBUF)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("a sink cannot write Protobuf"),
						 errdetail("Sources read Protobuf; a sink writes JSON or Avro."),
						 errhint("Use \"format\": \"avro\" (with schema.registry.url) or \"json\".")));
		}
		else if (strcmp(key, "key.format") == 0)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("option \"key.format\" is for sources: a sink's keys are text"),
					 errhint("A sink flow's message key is the text of its sink_key column.")));
		else if (strcmp(key, "schema.registry.url") == 0)
			sink->registry_url = val;
		sink->properties = lappend(lappend(sink->properties, key), val);
	}
	check_format_options(sink->properties, sink->registry_url, sink->format, SDP_FORMAT_TEXT, "sink");
}

/*
 * A flow's number of workers must be one it can ever get: each takes a flow
 * worker slot (sdp.max_flows) and a background worker (max_worker_processes,
 * which the launcher shares).  Fewer free than that now is not an error:
 * the flow waits, and sdp.flow_status says why.  A stateful flow runs in
 * one worker unless its operator's keys follow the Kafka key (operator.c
 * decides, at its validation).
 */
void
sdp_check_workers(int workers)
{
	if (workers > sdp_max_flows)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("a flow with %d workers needs %d flow worker slots, but sdp.max_flows is %d",
						workers, workers, sdp_max_flows),
				 errhint("Raise sdp.max_flows (and max_worker_processes) and restart the server, or ask for fewer workers.")));
	if (workers > max_worker_processes - 1)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("a flow with %d workers needs %d background workers, but max_worker_processes is %d and the sdp launcher takes one",
						workers, workers, max_worker_processes),
				 errhint("Raise max_worker_processes to at least %d (plus what other flows and extensions use) and restart the server.",
						 workers + 1)));
}

/*
 * At a declaration, the number of workers a flow of the current role may
 * ever run at once: a role other than a superuser runs at most
 * sdp.max_workers_per_role (launcher.c), so a flow asking for more could
 * never start.
 */
void
sdp_check_workers_quota(int workers)
{
	int			quota = sdp_role_worker_quota();

	if (quota > 0 && workers > quota && !superuser())
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("a flow with %d workers needs %d flow workers at once, but role \"%s\" may run at most %d (sdp.max_workers_per_role)",
						workers, workers, GetUserNameFromId(GetUserId(), false), quota),
				 errhint("Ask for fewer workers, or have a superuser raise sdp.max_workers_per_role.")));
}

/* With a share of the partitions (option partitions), each worker needs one of them at least. */
void
sdp_check_share_workers(int workers, int nshare)
{
	if (nshare > 0 && workers > nshare)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a flow with %d workers needs a share of at least %d partitions, but option \"partitions\" has %d",
						workers, workers, nshare),
				 errhint("The workers divide the share: ask for at most %d workers, or give more partitions.", nshare)));
}

/*
 * Whether the topic's partition is worker worker_no's, of the flow's
 * nworkers.  Without a share (option partitions), partition p is worker
 * p % nworkers's, so a partition added to the topic is taken by exactly
 * one worker.  With a share, only its partitions are the flow's, and the
 * workers divide it by position in the sorted share: [0, 2, 4, 6] over 2
 * workers is {0, 4} and {2, 6}, where p % 2 would leave worker 1 idle.
 */
bool
sdp_worker_owns_partition(const SdpFlowOptions *opts, int32 partition, int worker_no, int nworkers)
{
	int			lo = 0,
				hi = opts->nshare - 1;

	if (opts->nshare == 0)
		return partition % nworkers == worker_no;
	while (lo <= hi)
	{
		int			mid = lo + (hi - lo) / 2;

		if (opts->share[mid] == partition)
			return mid % nworkers == worker_no;
		if (opts->share[mid] < partition)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return false;
}

/*
 * Plan as the flow's worker will: search_path set (unless NULL, a flow
 * declared before 0.7) until AtEOXact_GUC(true, level) with the level
 * returned.
 */
int
sdp_enter_search_path(const char *search_path)
{
	int			level = NewGUCNestLevel();

	if (search_path != NULL)
		(void) set_config_option("search_path", search_path, PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
	return level;
}

/*
 * A hash of a flow's operator options (sdp_parse_flow_options builds them
 * alike from alike options): a worker publishes the one it runs with, and
 * sdp_flow_state reads the state of its stores only when it equals the
 * catalog's (sdp_alter_flow commits before the worker restarts with them).
 */
uint32
sdp_operator_options_hash(const Jsonb *options)
{
	if (options == NULL)
		return 0;
	return hash_bytes((const unsigned char *) options, VARSIZE(options));
}

/*
 * flow.h
 *		A flow's declaration: its source, options and input schema, as read
 *		from the catalogs and validated by sdp_create_flow and by the worker.
 *		Types only: flow_options.h, input_schema.h and catalog.h declare the
 *		functions of this folder.
 */
#ifndef SDP_FLOW_H
#define SDP_FLOW_H

#include "sdp.h"

#include "access/tupdesc.h"
#include "fmgr.h"
#include "nodes/pg_list.h"
#include "utils/jsonb.h"

typedef enum SdpWriteMode
{
	SDP_MODE_UPSERT,
	SDP_MODE_APPEND
} SdpWriteMode;

typedef enum SdpOnError
{
	SDP_ON_ERROR_DEAD_LETTER,
	SDP_ON_ERROR_SKIP,
	SDP_ON_ERROR_FAIL
} SdpOnError;

/* What a flow does with a tombstone (a message with a key and no value). */
typedef enum SdpOnTombstone
{
	SDP_TOMBSTONE_DEAD_LETTER,
	SDP_TOMBSTONE_SKIP,
	SDP_TOMBSTONE_DELETE		/* upsert: delete the target row whose primary key is the message key */
} SdpOnTombstone;

/* How a message's value carries the row (option envelope). */
typedef enum SdpEnvelopeKind
{
	SDP_ENVELOPE_NONE,			/* the value is the row */
	SDP_ENVELOPE_DEBEZIUM		/* a Debezium change event: op, before, after, source, ts_ms */
} SdpEnvelopeKind;

/* The input columns a Debezium flow has after its declared ones, in this order. */
#define SDP_DEBEZIUM_OP			0
#define SDP_DEBEZIUM_SOURCE		1
#define SDP_DEBEZIUM_TS_MS		2
#define SDP_DEBEZIUM_NCOLUMNS	3

/* Options of a flow (sdp_create_flow's options), with their defaults applied. */
typedef struct SdpFlowOptions
{
	bool		mode_given;		/* mode was set explicitly */
	SdpWriteMode mode;
	SdpOnError	on_error;
	SdpOnTombstone on_tombstone;
	bool		on_tombstone_given;
	SdpEnvelopeKind envelope;
	int			workers;		/* background workers, each consuming its share of the partitions */
	int			nshare;			/* option partitions: how many; 0 = every partition of the topic */
	int32	   *share;			/* ... the partition numbers, sorted */
	int			checkpoint_interval_ms;
	char	   *synchronous_commit;
	int			max_batch_rows;
	int			max_batch_kb;	/* a batch stops growing past this many kB of messages */
	int			max_batch_wait_ms;
	int			progress_interval_ms;
	int			state_memory_limit_kb;
	char	   *notify_channel;	/* NOTIFY this channel when a batch writes rows, or NULL */
	char	   *sink_key;		/* a sink flow: the column that is the messages' key, or NULL */
	char	   *search_path;	/* the transform's search_path, fixed at declaration; NULL: the owner's default (before 0.7) */
	int			statement_timeout_ms;	/* the longest a batch's statements may run; 0: no bound */
	Jsonb	   *operator_options;	/* the keys the flow itself does not know */
} SdpFlowOptions;

/* A Kafka source (sdp.sources), including its librdkafka properties. */
/* How a source's message values (format) and keys (key.format) are written. */
typedef enum SdpFormat
{
	SDP_FORMAT_JSON,			/* values: a JSON object (the default) */
	SDP_FORMAT_TEXT,			/* keys: text, as they are (the default) */
	SDP_FORMAT_AVRO,			/* Avro in Confluent's wire format, its schema in a registry */
	SDP_FORMAT_PROTOBUF			/* Protobuf in Confluent's wire format, likewise (sources only) */
} SdpFormat;

typedef struct SdpSourceDef
{
	char	   *name;
	char	   *bootstrap_servers;
	char	   *topic;
	char	   *owner;
	bool		start_at_earliest;	/* starting_offsets: earliest or latest */
	bool		start_at_time_set;	/* starting_offsets: a timestamp */
	TimestampTz start_at_time;
	List	   *properties;		/* librdkafka key, value pairs: List of char*; and the registry's (sdp_source_format_option) */
	SdpFormat	format;			/* of the values */
	SdpFormat	key_format;		/* of the keys */
	char	   *registry_url;	/* schema.registry.url, or NULL */
} SdpSourceDef;

/* A Kafka sink (sdp.sinks): where a sink flow's rows are produced. */
typedef struct SdpSinkDef
{
	char	   *name;
	char	   *bootstrap_servers;
	char	   *topic;
	List	   *properties;		/* librdkafka producer key, value pairs: List of char*; and the registry's */
	SdpFormat	format;			/* of the values: JSON, or Avro registered in the registry */
	char	   *registry_url;	/* schema.registry.url, or NULL */
} SdpSinkDef;

/* How a JSON value becomes a datum of an input column. */
typedef enum SdpDecodeKind
{
	SDP_DECODE_BOOL,
	SDP_DECODE_INT2,
	SDP_DECODE_INT4,
	SDP_DECODE_INT8,
	SDP_DECODE_FLOAT4,
	SDP_DECODE_FLOAT8,
	SDP_DECODE_TEXT,
	SDP_DECODE_TIMESTAMPTZ,
	SDP_DECODE_JSONB,
	SDP_DECODE_INPUT_FUNCTION	/* any other type: its input function on the value's text */
} SdpDecodeKind;

/* One step of the path from a JSON document to a column's value. */
typedef struct SdpPathStep
{
	char	   *key;			/* a member's name, or NULL for an array element */
	int			keylen;
	int			index;			/* the array element's index (from 0), or -1 */
} SdpPathStep;

typedef struct SdpInputColumn
{
	char	   *name;
	int			namelen;		/* strlen(name) */
	Oid			typid;
	int32		typmod;
	SdpDecodeKind kind;
	FmgrInfo	infunc;
	Oid			typioparam;
	int			npath;			/* steps to its value: 1 for a top-level field */
	SdpPathStep *path;
	char	   *path_text;		/* the declared path ('position.lat'), or NULL: the field of its name */
	bool		has_default;	/* DEFAULT: the value of a field the message does not have */
	bool		default_isnull;
	Datum		default_value;
} SdpInputColumn;

/*
 * The declared paths as a tree, walked by the decoder: the root is the
 * document, each node a member or an array element below its parent, with
 * the columns whose path ends there.  A flat schema is a root with one
 * child per column.
 */
typedef struct SdpJsonNode
{
	const char *key;			/* as SdpPathStep */
	int			keylen;
	int			index;
	int			ncolumns;
	int		   *columns;		/* the declared columns whose value this is */
	int			nchildren;
	struct SdpJsonNode *children;
} SdpJsonNode;

/* The metadata columns every input relation ends with, in this order. */
#define SDP_META_TOPIC		0
#define SDP_META_PARTITION	1
#define SDP_META_OFFSET		2
#define SDP_META_KEY		3
#define SDP_META_TIMESTAMP	4
#define SDP_META_HEADERS	5		/* absent when the schema declares a field of that name */
#define SDP_NUM_META		6

/* The declared input schema: the JSON fields, then the metadata columns. */
typedef struct SdpInputSchema
{
	int			ncolumns;		/* declared columns */
	SdpInputColumn *columns;
	TupleDesc	tupdesc;		/* ncolumns + nmeta attributes */
	int			nmeta;			/* SDP_NUM_META, or one less: a declared kafka_headers (before 0.4) is the user's */
	int		   *field_hint;		/* decoder: per field position, the root's child found there last, or -1 */
	SdpJsonNode *tree;			/* the paths of the declared columns */
	int			tree_depth;		/* the longest path */
} SdpInputSchema;

/* Fields of a document whose column the decoder remembers (json_decode.c). */
#define SDP_FIELD_HINTS 64

#endif							/* SDP_FLOW_H */

/*
 * flow.h
 *		A flow's declaration: its source, options and input schema, as read
 *		from the catalogs and validated by sdp_create_flow and by the worker.
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

/* Options of a flow (sdp_create_flow's options), with their defaults applied. */
typedef struct SdpFlowOptions
{
	bool		mode_given;		/* mode was set explicitly */
	SdpWriteMode mode;
	SdpOnError	on_error;
	int			workers;		/* background workers, each consuming its share of the partitions */
	int			checkpoint_interval_ms;
	char	   *synchronous_commit;
	int			max_batch_rows;
	int			max_batch_kb;	/* a batch stops growing past this many kB of messages */
	int			max_batch_wait_ms;
	int			progress_interval_ms;
	int			state_memory_limit_kb;
	char	   *notify_channel;	/* NOTIFY this channel when a batch writes rows, or NULL */
	Jsonb	   *operator_options;	/* the keys the flow itself does not know */
} SdpFlowOptions;

/* A Kafka source (sdp.sources), including its librdkafka properties. */
typedef struct SdpSourceDef
{
	char	   *name;
	char	   *bootstrap_servers;
	char	   *topic;
	char	   *owner;
	bool		start_at_earliest;	/* starting_offsets */
	List	   *properties;		/* librdkafka key, value pairs: List of char* */
} SdpSourceDef;

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

typedef struct SdpInputColumn
{
	char	   *name;
	int			namelen;		/* strlen(name) */
	Oid			typid;
	int32		typmod;
	SdpDecodeKind kind;
	FmgrInfo	infunc;
	Oid			typioparam;
} SdpInputColumn;

/* The metadata columns every input relation ends with, in this order. */
#define SDP_META_TOPIC		0
#define SDP_META_PARTITION	1
#define SDP_META_OFFSET		2
#define SDP_META_KEY		3
#define SDP_META_TIMESTAMP	4
#define SDP_NUM_META		5

/* The declared input schema: the JSON fields, then the metadata columns. */
typedef struct SdpInputSchema
{
	int			ncolumns;		/* declared columns */
	SdpInputColumn *columns;
	TupleDesc	tupdesc;		/* ncolumns + SDP_NUM_META attributes */
	int		   *field_hint;		/* decoder: per field position, the column found there last, or -1 */
} SdpInputSchema;

/* Fields of a document whose column the decoder remembers (json_decode.c). */
#define SDP_FIELD_HINTS 64

/* flow_options.c */
extern void sdp_parse_flow_options(Jsonb *options, SdpFlowOptions *opts);
extern void sdp_parse_source_options(Jsonb *options, SdpSourceDef *source);
extern int	sdp_interval_option_ms(const char *option, const char *text);
extern int64 sdp_interval_option_us(const char *option, const char *text);
extern const char *sdp_write_mode_name(SdpWriteMode mode);
extern void sdp_check_workers(int workers);

/* input_schema.c */
extern SdpInputSchema *sdp_parse_input_schema(const char *schema_text);
extern bool sdp_is_meta_column(const char *name);

/* catalog.c */
typedef struct SdpCatalogScope
{
	Oid			save_userid;
	int			save_sec_context;
	int			save_nestlevel;
} SdpCatalogScope;

extern void sdp_catalog_enter(SdpCatalogScope *scope);
extern void sdp_catalog_leave(SdpCatalogScope *scope);
extern void sdp_require_flow_database(void);

/* api.c */
extern void sdp_check_owner(Oid owner, const char *owner_name, const char *what, const char *name);
extern void sdp_delete_flows(const char *condition, Oid argtype, Datum arg);

#endif							/* SDP_FLOW_H */

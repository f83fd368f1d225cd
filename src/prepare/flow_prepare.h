/*
 * flow_prepare.h
 *		One check-and-prepare of a flow's declaration, for sdp_create_flow,
 *		sdp_alter_flow and the flow's worker (flow_prepare.c).
 */
#ifndef SDP_FLOW_PREPARE_H
#define SDP_FLOW_PREPARE_H

#include "decl/flow.h"
#include "exec/avro_encode.h"
#include "exec/table_write.h"
#include "stateful/operator.h"

/* A flow's declaration: as given (create, alter) or as stored (the worker). */
typedef struct SdpFlowDecl
{
	const char *name;
	int64		flow_id;		/* 0 before it is stored: its outbox SQL is checked for flow 0 */
	int			worker_no;		/* the worker whose rows the outbox rows are; 0 at declaration */
	Oid			target;			/* the target table; InvalidOid for a flow with a sink */
	const SdpSinkDef *sink;		/* the sink (name NULL or sink NULL: a flow into a table) */
	const char *schema_text;
	const char *transform_sql;	/* NULL: the input as it is */
	const char *operator_name;	/* NULL: a stateless flow */
	SdpFlowOptions *opts;		/* parsed; mode resolved here when not given */
} SdpFlowDecl;

/* What the worker runs, prepared as the flow's owner (the current user). */
typedef struct SdpFlowPrepared
{
	SdpInputSchema *schema;
	const SdpOperator *op;		/* NULL for a stateless flow */
	SdpTransform transform;		/* what runs over "input": a stateless sink flow's fills its outbox */
	TupleDesc	rows_desc;		/* the flow's own transform's rows (the operator's input) */
	SdpTableWrite table_write;	/* into the target table, or sdp.outbox */
	char	   *target_name;	/* qualified and quoted; NULL for a flow with a sink */
	/* a flow with a sink */
	bool		outbox_tagged;	/* sdp.outbox has column worker (0.5) */
	bool		outbox_skips;	/* sdp.outbox has column skipped_by (0.7) */
	TupleDesc	emitted_desc;	/* a stateful one: the operator's rows (blessed) */
	int			sink_key_attno; /* ... and the sink_key column in them, 0: none */
	SdpAvroRowPlan *sink_avro;	/* an Avro sink: how its values are encoded, or NULL */
	char	   *sink_avro_schema;	/* ... the schema registered for them (JSON text) */
	int32		sink_avro_id;	/* ... its id in the registry, -1 until the worker registered it */
	/* what the decoder fills (a stateless flow's transform may not read every metadata column) */
	bool		want_headers;	/* kafka_headers: something may read it */
	int			unread_meta;	/* bit SDP_META_x: not read, left null */
	SPIPlanPtr	tombstone_plan; /* on_tombstone = delete: its DELETE (for a worker) */
	struct SdpEnvelope *envelope;	/* "envelope": "debezium": how its events are read (decl/envelope.h) */
	SPIPlanPtr	delete_plan;	/* ... and the DELETE of its delete events (for a worker) */
} SdpFlowPrepared;

extern void sdp_flow_prepare(const SdpFlowDecl *decl, SdpFlowPrepared *out, bool for_worker);
extern Jsonb *sdp_flow_stored_options(Jsonb *given, const SdpFlowOptions *opts);
extern void sdp_flow_check_workers(int workers, const SdpOperator *op, const char *flow);
extern void sdp_flow_check_constant_key(SdpTransform *t, Jsonb *options, const char *flow, int workers);

#endif							/* SDP_FLOW_PREPARE_H */

/*
 * outbox.h
 *		A sink flow's rows as sdp.outbox rows (outbox.c).
 */
#ifndef SDP_OUTBOX_H
#define SDP_OUTBOX_H

#include "decl/flow.h"
#include "exec/avro_encode.h"

#include "access/htup.h"
#include "access/tupdesc.h"

extern void sdp_outbox_check_key(TupleDesc rows, const char *sink_key, bool operator_rows);
extern char *sdp_outbox_sql(const char *transform_sql, SdpInputSchema *schema, int64 flow_id,
							int worker, const char *sink_key, bool avro);
extern bool sdp_outbox_has_row_avro(void);
extern bool sdp_outbox_has_worker(void);
extern bool sdp_outbox_has_skips(void);
extern TupleDesc sdp_outbox_desc(bool tagged);
extern HeapTuple sdp_outbox_row(TupleDesc outbox, int64 flow_id, int worker, TupleDesc emitted,
								HeapTuple row, int key_attno, const SdpAvroRowPlan *avro, int32 schema_id);

#endif							/* SDP_OUTBOX_H */

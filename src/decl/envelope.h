/*
 * envelope.h
 *		The schemas of a flow whose messages carry the row in an envelope:
 *		Debezium's change events (envelope.c).
 */
#ifndef SDP_ENVELOPE_H
#define SDP_ENVELOPE_H

#include "decl/flow.h"

/*
 * How a Debezium event is decoded.  The declared columns are those of the
 * row; an event holds the row twice ("before" and "after") beside its
 * "op", "source" and "ts_ms", at its top level or (JSON with a schema)
 * under "payload".  Each decoding schema has groups of 2 * nimage + 3
 * columns: the image after, the image before, op, source, ts_ms.
 */
typedef struct SdpEnvelope
{
	int			nimage;			/* the declared columns */
	int			group;			/* columns of a group: 2 * nimage + 3 */
	SdpInputSchema *json;		/* a JSON event: two groups, at the top and under "payload" */
	SdpInputSchema *avro;		/* an Avro event: one group */
	SdpInputSchema *json_key;	/* a JSON key: the image's columns, at the top and under "payload" */
	SdpInputSchema *avro_key;	/* an Avro key: the image's columns */
} SdpEnvelope;

/* The index, in a group, of the first column of each part. */
#define SDP_ENVELOPE_AFTER(env)		0
#define SDP_ENVELOPE_BEFORE(env)	((env)->nimage)
#define SDP_ENVELOPE_OP(env)		(2 * (env)->nimage)

extern bool sdp_is_debezium_column(const char *name);
extern SdpInputSchema *sdp_debezium_row_schema(const char *schema_text);
extern SdpEnvelope *sdp_debezium_envelope(const SdpInputSchema *row);

#endif							/* SDP_ENVELOPE_H */

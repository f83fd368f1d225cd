/*
 * transform.h
 *		The flow's transform: a prepared, kept SPI plan over a batch
 *		registered as the ephemeral named relation "input" (transform.c).
 */
#ifndef SDP_TRANSFORM_H
#define SDP_TRANSFORM_H

#include "decl/flow.h"

#include "executor/spi.h"

/* Names of the relations a batch is registered as: the transform's input, the target write's rows. */
#define SDP_INPUT_RELATION "input"
#define SDP_OUTPUT_RELATION "sdp_output"
#define SDP_DELETED_RELATION "sdp_deleted"

typedef struct SdpTransform
{
	SPIPlanPtr	plan;			/* NULL when the flow has no transform */
	TupleDesc	input_desc;
	TupleDesc	result_desc;	/* the transform's columns (input_desc if none) */
	int			nparams;		/* a generated transform's parameters ($1: sdp_transform_prepare_generated) */
	Oid			paramtypes[1];
	Datum		params[1];		/* their values, set before it runs */
} SdpTransform;

extern void sdp_register_rows(const char *name, TupleDesc desc, HeapTuple *rows, int n);
extern void sdp_unregister_rows(const char *name);
extern void sdp_transform_prepare(SdpTransform *t, SdpInputSchema *schema, const char *sql);
extern void sdp_transform_prepare_generated(SdpTransform *t, SdpInputSchema *schema, const char *sql,
											int nparams, const Oid *paramtypes);
extern void sdp_transform_check_runs(SdpTransform *t);
extern void sdp_transform_check_row_by_row(SdpTransform *t, const char *what);
extern bool sdp_transform_column_is_constant(SdpTransform *t, const char *column);
extern bool sdp_transform_reads_column(SdpTransform *t, AttrNumber attno);
extern int	sdp_transform_run(SdpTransform *t, HeapTuple *rows, int n, HeapTuple **out);
extern int	sdp_transform_run_into(SdpTransform *t, HeapTuple *rows, int n, DestReceiver *dest);

#endif							/* SDP_TRANSFORM_H */

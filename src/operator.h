/*
 * operator.h
 *		Stateful operators of flows, behind one interface (operator.c).
 */
#ifndef SDP_OPERATOR_H
#define SDP_OPERATOR_H

#include "flow.h"

typedef struct SdpOperator
{
	const char *name;

	/*
	 * Check the operator's options against the transform's output and the
	 * target at declaration time; return the descriptor of the rows the
	 * operator emits (what is written into the target).
	 */
	TupleDesc	(*validate) (TupleDesc input, Jsonb *options, Oid target, SdpFlowOptions *opts);
} SdpOperator;

extern const SdpOperator *sdp_find_operator(const char *name);
extern const char *sdp_operator_names(void);

#endif							/* SDP_OPERATOR_H */

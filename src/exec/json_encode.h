/*
 * json_encode.h
 *		A row as the text of to_jsonb(row) (json_encode.c).
 */
#ifndef SDP_JSON_ENCODE_H
#define SDP_JSON_ENCODE_H

#include "access/tupdesc.h"
#include "fmgr.h"
#include "lib/stringinfo.h"

/* How to encode rows of one descriptor. */
typedef struct SdpJsonPlan
{
	bool		direct;			/* false: every column's type is not handled; the general way */
	int			ncolumns;		/* columns written (not dropped) */
	int		   *order;			/* their attribute indexes, in jsonb's order of keys */
	int		   *kinds;			/* per attribute: how its value is written */
	FmgrInfo   *out;			/* per attribute: its type's output function */
	char	  **keys;			/* per attribute: "name": escaped */
} SdpJsonPlan;

extern void sdp_json_plan_rows(TupleDesc desc, SdpJsonPlan *plan);
extern void sdp_json_encode_row(const SdpJsonPlan *plan, TupleDesc desc, const Datum *values,
								const bool *nulls, StringInfo buf);
extern char *sdp_json_row_general(Datum record);

#endif							/* SDP_JSON_ENCODE_H */

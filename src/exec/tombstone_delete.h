/*
 * tombstone_delete.h
 *		The DELETE of on_tombstone = delete, and of Debezium's delete events
 *		(tombstone_delete.c).
 */
#ifndef SDP_TOMBSTONE_DELETE_H
#define SDP_TOMBSTONE_DELETE_H

#include "exec/table_write.h"

extern void sdp_tombstone_prepare(const SdpFlowOptions *opts, bool has_operator, Oid target,
								  Oid owner, SPIPlanPtr *plan);
extern void sdp_debezium_prepare(const SdpFlowOptions *opts, const SdpTableWrite *tw, Oid owner,
								 SPIPlanPtr *plan);

#endif							/* SDP_TOMBSTONE_DELETE_H */

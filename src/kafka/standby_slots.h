/*
 * standby_slots.h
 *		Whether the standbys that could be promoted have flushed WAL up to a
 *		position: the physical replication slots a sink flow's relay waits
 *		for (standby_slots.c).
 */
#ifndef SDP_STANDBY_SLOTS_H
#define SDP_STANDBY_SLOTS_H

#include "access/xlogdefs.h"
#include "utils/guc.h"

extern bool standby_slots_check_guc(char **newval, void **extra, GucSource source);
extern bool standby_slots_flushed(XLogRecPtr lsn, char **reason, bool *broken);

#endif							/* SDP_STANDBY_SLOTS_H */

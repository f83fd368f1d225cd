/*
 * api.h
 *		What the other SQL functions share with the declaration functions
 *		(api.c).
 */
#ifndef SDP_API_H
#define SDP_API_H

#include "sdp.h"

extern void sdp_refuse_self_change(const char *flow, const char *what, const char *fn);
extern void sdp_check_owner(Oid owner, const char *owner_name, const char *what, const char *name);

#endif							/* SDP_API_H */

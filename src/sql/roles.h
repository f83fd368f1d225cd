/*
 * roles.h
 *		DROP ROLE, REASSIGN OWNED and DROP OWNED of the roles owning flows
 *		and sources (roles.c).
 */
#ifndef SDP_ROLES_H
#define SDP_ROLES_H

#include "sdp.h"

extern void sdp_install_utility_hook(void);

#endif							/* SDP_ROLES_H */

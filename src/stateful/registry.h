/*
 * registry.h
 *		Every stateful operator, by name (registry.c).
 */
#ifndef SDP_REGISTRY_H
#define SDP_REGISTRY_H

#include "stateful/operator.h"

extern const SdpOperator *sdp_find_operator(const char *name);
extern const char *sdp_operator_names(void);

#endif							/* SDP_REGISTRY_H */

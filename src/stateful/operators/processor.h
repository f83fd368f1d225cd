/*
 * processor.h
 *		The processor operator's current call, for the state API
 *		(processor.c; sql/state_api.c calls these).
 */
#ifndef SDP_PROCESSOR_H
#define SDP_PROCESSOR_H

#include "stateful/processor_state.h"

/* The variables of the handler's key; raises 55000 naming function outside a handler. */
extern SdpVars *sdp_processor_current_vars(const char *function);
extern TimestampTz sdp_processor_now(void);
extern TimestampTz sdp_processor_watermark(bool *known);
extern void sdp_processor_check_timer(SdpTimeKind kind);

#endif							/* SDP_PROCESSOR_H */

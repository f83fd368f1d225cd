/*
 * isolate.h
 *		Finding the bad units (messages or emitted rows) of a failed stage.
 */
#ifndef SDP_ISOLATE_H
#define SDP_ISOLATE_H

#include "postgres.h"

/* Run the stage over units [lo, hi); raise on error.  Runs in a subtransaction. */
typedef void (*SdpIsolateStep) (void *arg, int lo, int hi);

/* Unit i alone failed with edata: set it aside.  false stops (on_error = fail). */
typedef bool (*SdpIsolateBad) (void *arg, int i, ErrorData *edata);

/* Which errors are the units' fault, to be isolated; others propagate. */
typedef bool (*SdpIsolateFault) (int sqlerrcode);

extern bool sdp_is_data_error(int sqlerrcode);
extern bool sdp_is_row_error(int sqlerrcode);
extern bool sdp_is_decode_error(int sqlerrcode);
extern bool sdp_isolate(SdpIsolateStep step, SdpIsolateBad bad, SdpIsolateFault fault,
						void *arg, int lo, int hi);
extern ErrorData *sdp_isolate_probe(SdpIsolateStep step, SdpIsolateFault fault, void *arg,
									const int *units, int nunits, int sqlerrcode);

#endif							/* SDP_ISOLATE_H */

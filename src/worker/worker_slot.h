/*
 * worker_slot.h
 *		What a flow worker publishes in its slot, and its waits
 *		(worker_slot.c).
 */
#ifndef SDP_WORKER_SLOT_H
#define SDP_WORKER_SLOT_H

#include "compat.h"
#include "worker/worker_internal.h"

extern void sdp_worker_set_error(FlowWorker *w, const char *message);
extern void sdp_worker_clear_earlier_error(FlowWorker *w);
extern void sdp_worker_set_broker(FlowWorker *w, bool ok, const char *error);
extern void sdp_worker_set_state(FlowWorker *w, SdpFlowState state, bool clear_error);
extern void sdp_worker_report_refused_host(FlowWorker *w);
extern void sdp_worker_publish_committed(FlowWorker *w);
extern void sdp_worker_publish_high_watermarks(FlowWorker *w);
extern void sdp_worker_alive(FlowWorker *w);
extern void sdp_worker_wait(FlowWorker *w, long timeout_ms);
extern void sdp_worker_wait_for_broker(FlowWorker *w, const char *what, const char *error);
extern void sdp_worker_broker_answered(FlowWorker *w);
extern void sdp_worker_check_stop_request(FlowWorker *w);
extern pg_noreturn void sdp_worker_fail(FlowWorker *w, const char *message);
extern pg_noreturn void sdp_worker_exit_expected(FlowWorker *w);

#endif							/* SDP_WORKER_SLOT_H */

/*
 * stateful.h
 *		A flow's operator in the worker: the operator stage of the batch
 *		pipeline, event time, checkpoints and their restore (stateful.c).
 */
#ifndef SDP_STATEFUL_H
#define SDP_STATEFUL_H

#include "worker/worker_internal.h"

extern void sdp_stateful_start(FlowWorker *w);
extern void sdp_stateful_restore(FlowWorker *w);
extern void sdp_stateful_reload_if_changed(FlowWorker *w);
extern void sdp_stateful_begin_attempt(FlowWorker *w);
extern void sdp_stateful_check_rows(FlowWorker *w, HeapTuple *rows, const int32 *partitions, int n);
extern int	sdp_stateful_operate(FlowWorker *w, Batch *b, HeapTuple *rows, const int32 *partitions, int nrows,
								 HeapTuple **emitted);
extern void sdp_stateful_operate_begin(FlowWorker *w);
extern void sdp_stateful_handle_rows(FlowWorker *w, HeapTuple *rows, const int32 *partitions, int nrows);
extern int	sdp_stateful_operate_end(FlowWorker *w, Batch *b, HeapTuple **emitted);
extern bool sdp_stateful_can_undo(FlowWorker *w);
extern int	sdp_stateful_mark(FlowWorker *w, int *nemitted);
extern void sdp_stateful_undo_to(FlowWorker *w, int mark, int nemitted);
extern void sdp_stateful_checkpoint_if_due(FlowWorker *w, Batch *b);
extern void sdp_stateful_checkpoint_now(FlowWorker *w);
extern bool sdp_stateful_work_due(FlowWorker *w, TimestampTz now);
extern TimestampTz sdp_stateful_next_wakeup(FlowWorker *w);
extern bool sdp_stateful_limit_error(FlowWorker *w, ErrorData *edata);
extern void sdp_stateful_publish(FlowWorker *w, bool checkpointed);

/* what the rest of the worker asks of the stage (all answer "none" for a stateless flow) */
extern int	sdp_stateful_event_time_index(FlowWorker *w);
extern bool sdp_stateful_rows_know_partition(FlowWorker *w);
extern int32 sdp_stateful_row_partition(FlowWorker *w, HeapTuple row);
extern const char *sdp_stateful_fault(FlowWorker *w);
extern void sdp_stateful_clear_fault(FlowWorker *w);
extern bool sdp_stateful_end_attempt(FlowWorker *w, bool committed, bool checkpointed);

#endif							/* SDP_STATEFUL_H */

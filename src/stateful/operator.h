/*
 * operator.h
 *		The stateful operator interface (the shape of Spark's StatefulProcessor).
 *
 * A flow may name an operator.  Its transform's rows then go to the operator
 * instead of the target, grouped by a key column, and what the operator
 * emits is written to the target (upserted on its primary key).
 *
 * An operator is one C file (src/operators/) that fills an SdpOperator and
 * one line in registry.c; the worker loop does not change.  It
 * implements:
 *
 *	validate(input, options, target, opts)
 *		At sdp_create_flow: check the operator's options against the
 *		transform's columns (input) and the target (NULL for a flow with a
 *		Kafka sink, whose emitted rows become messages); return the
 *		descriptor of the rows it emits.  Raise errors with specific
 *		SQLSTATEs.
 *	init(ctx, options)
 *		At worker start: parse the (already validated) options into a private
 *		config, returned and kept in ctx->config; set ctx->key_column.
 *		ctx->input_desc describes the transform's rows.
 *	handle_rows(ctx, key, rows, n)
 *		The batch's rows of one key, in arrival order.  The key's state is
 *		locked for the call.
 *	handle_expired_timer(ctx, key, timer)
 *		A timer of the key is due: processing-time timers when the clock
 *		passes them, event-time timers when the watermark does.
 *
 * and optionally:
 *
 *	build_transform(ctx, user_transform, rows)
 *		The SQL the worker runs over "input" in place of the flow's transform
 *		(whose rows are described by 'rows'), e.g. window_agg fans rows out to
 *		its definitions; ctx->key_column names one of its columns, and
 *		ctx->partition_column (if set) one that holds each row's Kafka
 *		partition, which spares the worker running the transform per
 *		partition to know it (stateful.c).
 *	reload(ctx)
 *		The operator's configuration changed in the catalogs (see
 *		sdp_flow_config_changed): re-read it; the worker then rebuilds the
 *		transform.
 *	maintain(ctx)
 *		Housekeeping of the target at each checkpoint, in its transaction,
 *		as the owner (e.g. retention); not called for a flow with a sink.
 *
 * Event time: an operator whose options name an "event_time" column of the
 * input schema (timestamptz) gets a watermark: per partition the highest
 * event time seen; the flow's watermark is the minimum over the partitions
 * that had data within "idle_timeout" (default 10 seconds); when every
 * partition is idle it advances with the clock from the last data, so that
 * event-time timers still fire when the stream goes quiet.  It never goes
 * back, is updated after each batch's rows are handled (so rows see the
 * watermark of the previous batch), and is checkpointed with the state.
 * An event time that is infinite or within SDP_EVENT_TIME_MARGIN_US of the
 * ends of the timestamp range is not usable (sdp_event_time_usable): it does
 * not move the watermark, and an operator sets its message aside.
 * sdp_reject(ctx, partition, offset, reason) sets a message aside (stage
 * 'late' in sdp.dead_letters, once per message).
 *
 * Per key the operator has (operator.c, state_store.c):
 *	value state		sdp_state_get_value / set_value / clear_value: SDP_STATE_VALUES int64s
 *	map state		sdp_state_map_get / put / remove / count / visit: member -> value
 *					of map_value_len bytes
 *	timers			sdp_timer_register / sdp_timer_delete / sdp_timer_list
 *	time			ctx->now (processing time of this step), ctx->watermark
 *	output			sdp_emit(ctx, values, nulls): a row of the emitted descriptor
 *
 * A key whose value states, map and timers are all empty is deleted.  State
 * lives in shared memory, within the flow's state_memory_limit, is readable
 * from SQL (sdp_flow_state) and is checkpointed with the source offsets it
 * corresponds to; after a restart it is restored and the messages after the
 * checkpoint are replayed, so emissions must be idempotent upserts.
 */
#ifndef SDP_OPERATOR_H
#define SDP_OPERATOR_H

#include "decl/flow.h"
#include "stateful/state_store.h"

#include "access/htup.h"
#include "fmgr.h"
#include "lib/pairingheap.h"
#include "utils/relcache.h"

typedef struct SdpOperator SdpOperator;

typedef struct SdpOperatorContext
{
	/* the partition of the key of a call with the key closed (calls_user_code), -1: not known */
	int32		call_partition;
	const SdpOperator *op;
	void	   *config;			/* the operator's parsed options */
	SdpStateStore *store;
	TupleDesc	input_desc;		/* the transform's rows */
	TupleDesc	output_desc;	/* the emitted rows */
	const char *key_column;		/* set by init */
	int			key_index;		/* 0-based, in input_desc */
	/* optional, set by init or build_transform: an int4 column holding each row's Kafka partition */
	const char *partition_column;
	int			partition_index;	/* 0-based, in input_desc; -1 when none */
	FmgrInfo	key_out;		/* output function of the key column */

	TimestampTz now;			/* processing time of the current step */
	TimestampTz watermark;		/* event time watermark, DT_NOBEGIN until known */

	MemoryContext emit_cxt;		/* where emitted rows live (the batch) */
	List	   *emitted;		/* HeapTuple */

	/* pending timers, per SdpTimeKind: buckets of one time each (operator.c) */
	pairingheap *timers[2];		/* the buckets, by time */
	struct HTAB *timer_buckets[2];	/* time -> its bucket */
	int64		timers_fired;

	List	   *rejected;		/* SdpRejected: messages set aside in this step */
	const char *target_relname; /* the target, qualified and quoted (for maintain) */
	const char *flow_name;

	/* event time (set by init when the operator has one) */
	const char *event_time_column;	/* a timestamptz column of the input schema */
	int64		idle_timeout_us;
} SdpOperatorContext;

typedef struct SdpRejected
{
	int32		partition;
	int64		offset;
	char	   *reason;
} SdpRejected;

struct SdpOperator
{
	const char *name;
	int			map_value_len;
	const char *value_names[SDP_STATE_VALUES];	/* for sdp_flow_state; NULL: unused */
	const char *map_name;

	TupleDesc	(*validate) (TupleDesc input, Jsonb *options, Relation target, SdpFlowOptions *opts);
	void	   *(*init) (SdpOperatorContext *ctx, Jsonb *options);
	void		(*handle_rows) (SdpOperatorContext *ctx, SdpKeyState *key, HeapTuple *rows, int nrows);
	void		(*handle_expired_timer) (SdpOperatorContext *ctx, SdpKeyState *key, const SdpTimer *timer);
	/* a value state and a map value as jsonb text, for sdp_flow_state */
	char	   *(*describe_value) (int idx, int64 value);
	char	   *(*describe_map_value) (const void *value);

	/* optional */
	/*
	 * check_row raises a data error (class 22) for a row the operator cannot
	 * take (e.g. a member too long for the map), before any state changes:
	 * its message goes to the dead letters at stage 'transform'.
	 */
	void		(*check_row) (SdpOperatorContext *ctx, HeapTuple row);
	char	   *(*build_transform) (SdpOperatorContext *ctx, const char *user_transform, TupleDesc rows);
	void		(*reload) (SdpOperatorContext *ctx);
	void		(*maintain) (SdpOperatorContext *ctx);

	/*
	 * An operator that runs the flow owner's functions (the processor):
	 * keys of any length (the store key of a long one is its digest,
	 * sdp_state_store_key: key->key is the store key), and handle_rows and
	 * handle_expired_timer called with the key closed (key->entry NULL), so
	 * that no lock is held while the owner's code runs: the operator opens
	 * the key for each access.  Its timers are its own (in its ext state):
	 * take_timer removes a due one from the open key (false: it was deleted
	 * meanwhile), index_key_timers indexes a restored key's
	 * (sdp_operator_index_timer).
	 */
	bool		calls_user_code;
	bool		(*take_timer) (SdpOperatorContext *ctx, SdpKeyState *key, const SdpTimer *timer);
	void		(*index_key_timers) (SdpOperatorContext *ctx, SdpStateEntry *entry);

	/*
	 * An operator that can undo its state changes (the processor): mark
	 * where an attempt or a part of it starts, undo back to a mark, and keep
	 * what an attempt did once its batch has committed.  The worker then
	 * isolates a failing batch's messages through the operator too, rather
	 * than restart from the checkpoint.
	 */
	int			(*mark) (SdpOperatorContext *ctx);
	void		(*undo) (SdpOperatorContext *ctx, int mark);
	void		(*commit) (SdpOperatorContext *ctx);

	/*
	 * Optional: sdp_alter_flow changes the operator's options: raise
	 * (0A000) when the state cannot be kept under the new ones; without this,
	 * any change of them needs "reset_state".
	 */
	void		(*check_alter) (Jsonb *old_options, Jsonb *new_options);

	/*
	 * Optional: run once, in the first batch of a flow that has never
	 * committed, before its rows (the processor's initial state).
	 */
	void		(*initial) (SdpOperatorContext *ctx);

	/*
	 * sdp_flow_state of an operator with its own state: reader_begin (in a
	 * reader, before any lock) makes what the two others need;
	 * reader_copy copies a key's own state while its entry is locked (no
	 * catalog access, no lock taken); reader_rows gives its rows, (state
	 * name, jsonb text), after the lock is released.
	 */
	void	   *(*reader_begin) (Jsonb *options, SdpStateStore *store);
	void	   *(*reader_copy) (void *reader, SdpStateEntry *entry);
	void		(*reader_rows) (void *reader, void *copy,
								void (*put) (void *arg, const char *state, const char *json), void *arg);
	const char *(*reader_key) (void *reader, void *copy);
};


/* the worker, after the transform: keys that fit, and the operator's check_row */
extern void sdp_operator_check_rows(SdpOperatorContext *ctx, HeapTuple *rows, int n);
extern size_t sdp_text_form_length(Datum d, Oid typid, FmgrInfo *out);

/* what operators call */
extern void sdp_emit(SdpOperatorContext *ctx, Datum *values, bool *nulls);
extern void sdp_timer_register(SdpOperatorContext *ctx, SdpKeyState *key, SdpTimeKind kind,
							   TimestampTz when, int64 tag);
extern bool sdp_timer_delete(SdpOperatorContext *ctx, SdpKeyState *key, SdpTimeKind kind,
							 TimestampTz when, int64 tag);
extern int	sdp_timer_list(SdpKeyState *key, SdpTimer *out, int max);
extern void sdp_reject(SdpOperatorContext *ctx, int32 partition, int64 offset, const char *reason);

/* what the worker calls */
extern SdpOperatorContext *sdp_operator_create(const SdpOperator *op, const char *flow_name,
											   Jsonb *options, SdpStateStore *store, TupleDesc rows);
extern void sdp_operator_bind(SdpOperatorContext *ctx, TupleDesc input, TupleDesc output);
extern void sdp_operator_handle_rows(SdpOperatorContext *ctx, HeapTuple *rows, const int32 *partitions, int n);
extern char *sdp_operator_row_key(SdpOperatorContext *ctx, HeapTuple row);
extern int32 sdp_operator_row_partition(SdpOperatorContext *ctx, HeapTuple row);
extern void sdp_operator_fire_timers(SdpOperatorContext *ctx);
extern TimestampTz sdp_operator_next_timer(SdpOperatorContext *ctx, SdpTimeKind kind);

/*
 * Event times windows and watermarks can compute with: finite, and 200 years
 * inside the timestamp range (window sizes and allowances are at most 100
 * years each), so no sum of them overflows.
 */
#define SDP_EVENT_TIME_MARGIN_US	(INT64CONST(200) * 365 * USECS_PER_DAY)
static inline bool
sdp_event_time_usable(TimestampTz t)
{
	return t >= MIN_TIMESTAMP + SDP_EVENT_TIME_MARGIN_US && t < END_TIMESTAMP - SDP_EVENT_TIME_MARGIN_US;
}
extern void sdp_operator_index_timers(SdpOperatorContext *ctx);
extern void sdp_operator_index_timer(SdpOperatorContext *ctx, const char *store_key, const SdpTimer *timer);
extern void sdp_operator_unindex_timer(SdpOperatorContext *ctx, const char *store_key, const SdpTimer *timer);

/* helpers for validate */
extern int	sdp_operator_column(TupleDesc desc, const char *name, const char *option, bool required);
extern char *sdp_operator_option(Jsonb *options, const char *key);
extern void sdp_operator_check_options(Jsonb *options, const char *operator_name,
									   const char *const *known);

#endif							/* SDP_OPERATOR_H */

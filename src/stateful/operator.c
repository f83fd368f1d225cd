/*
 * operator.c
 *		The operator framework: grouping rows by key, timers, and emitted
 *		rows (registry.c names the operators).  See operator.h for the interface operators implement.
 *
 * Timers are kept twice: in each key's state (what is checkpointed and what
 * sdp_flow_state shows) and in a worker-local index per time kind, to find
 * the due ones without scanning every key: the timers of one time in a
 * bucket, the buckets in a pairing heap by time.  The index is rebuilt from
 * the state after a restore; a timer deleted from a key stays in it until
 * it comes up and is then skipped.
 */
#include "stateful/operator.h"

#include "miscadmin.h"
#include "access/detoast.h"
#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/* ---- helpers for validate ---- */

/* The 0-based position of a column of desc, or -1 (an error when required). */
int
sdp_operator_column(TupleDesc desc, const char *name, const char *option, bool required)
{
	for (int i = 0; i < desc->natts; i++)
		if (!TupleDescAttr(desc, i)->attisdropped &&
			strcmp(NameStr(TupleDescAttr(desc, i)->attname), name) == 0)
			return i;
	if (required)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column \"%s\" named by option \"%s\" is not produced by the transform", name, option),
				 errhint("Options name columns of the transform's output (or of the input schema when there is no transform).")));
	return -1;
}

/* An operator option as text, or NULL when absent. */
char *
sdp_operator_option(Jsonb *options, const char *key)
{
	JsonbValue	k;
	JsonbValue *v;

	if (options == NULL)
		return NULL;
	k.type = jbvString;
	k.val.string.val = (char *) key;
	k.val.string.len = strlen(key);
	v = findJsonbValueFromContainer(&options->root, JB_FOBJECT, &k);
	if (v == NULL || v->type == jbvNull)
		return NULL;
	switch (v->type)
	{
		case jbvString:
			return pnstrdup(v->val.string.val, v->val.string.len);
		case jbvNumeric:
			return DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(v->val.numeric)));
		case jbvBool:
			return pstrdup(v->val.boolean ? "true" : "false");
		default:
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("option \"%s\" must be a string, a number or a boolean", key)));
	}
	return NULL;
}

/* Refuse option keys that neither the flow nor the operator knows. */
void
sdp_operator_check_options(Jsonb *options, const char *operator_name, const char *const *known)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;

	if (options == NULL)
		return;
	it = JsonbIteratorInit(&options->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		bool		ok = false;
		char	   *key;

		if (tok != WJB_KEY)
			continue;
		key = pnstrdup(v.val.string.val, v.val.string.len);
		for (int i = 0; known[i] != NULL; i++)
			ok |= (strcmp(known[i], key) == 0);
		if (!ok)
		{
			StringInfoData names;

			initStringInfo(&names);
			for (int i = 0; known[i] != NULL; i++)
				appendStringInfo(&names, "%s%s", i > 0 ? ", " : "", known[i]);
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("unknown option \"%s\" for operator %s", key, operator_name),
					 errhint("Options of %s are %s; flow options are mode, on_error, checkpoint_interval, state_memory_limit, synchronous_commit, statement_timeout, search_path, max_batch_rows, max_batch_bytes, max_batch_wait, progress_interval and notify.",
							 operator_name, names.data)));
		}
	}
}

/* ---- timers ---- */

typedef struct TimerNode
{
	struct TimerNode *next;		/* the next timer of its bucket */
	SdpTimer	timer;
	char		key[SDP_STATE_KEY_MAX]; /* NUL-padded */
} TimerNode;

/*
 * The pending timers of one time, of one kind: an entry of the kind's hash
 * by time (dynahash never moves an entry), and a node of its heap by time.
 * A burst of windows closing at one watermark step is one bucket, taken
 * whole, rather than thousands of heap nodes popped one by one.
 */
typedef struct TimerBucket
{
	TimestampTz when;			/* the hash key */
	pairingheap_node node;
	TimerNode  *head;
} TimerBucket;

/* pairingheap keeps the greatest first: the earliest bucket is the greatest */
static int
timer_compare(const pairingheap_node *a, const pairingheap_node *b, void *arg)
{
	const TimerBucket *x = pairingheap_const_container(TimerBucket, node, a);
	const TimerBucket *y = pairingheap_const_container(TimerBucket, node, b);

	if (x->when < y->when)
		return 1;
	if (x->when > y->when)
		return -1;
	return 0;
}

void
sdp_operator_index_timer(SdpOperatorContext *ctx, const char *key, const SdpTimer *timer)
{
	TimerNode  *n = MemoryContextAllocZero(TopMemoryContext, sizeof(TimerNode));
	TimerBucket *b;
	bool		found;

	n->timer = *timer;
	strlcpy(n->key, key, SDP_STATE_KEY_MAX);
	b = hash_search(ctx->timer_buckets[timer->kind], &timer->when, HASH_ENTER, &found);
	if (!found)
	{
		b->head = NULL;
		pairingheap_add(ctx->timers[timer->kind], &b->node);
	}
	n->next = b->head;
	b->head = n;
}

/*
 * Take a node of a timer out of the index again (an undone registration):
 * one of the key's nodes of that time, kind and tag, and the bucket when it
 * is left empty.  The buckets being fired are out of the hash already, so
 * a node of those is never touched here.
 */
void
sdp_operator_unindex_timer(SdpOperatorContext *ctx, const char *key, const SdpTimer *timer)
{
	TimerBucket *b = hash_search(ctx->timer_buckets[timer->kind], &timer->when, HASH_FIND, NULL);

	if (b == NULL)
		return;
	for (TimerNode **p = &b->head; *p != NULL; p = &(*p)->next)
	{
		TimerNode  *n = *p;

		if (n->timer.tag == timer->tag && strcmp(n->key, key) == 0)
		{
			*p = n->next;
			pfree(n);
			break;
		}
	}
	if (b->head == NULL)
	{
		TimestampTz when = b->when;

		pairingheap_remove(ctx->timers[timer->kind], &b->node);
		(void) hash_search(ctx->timer_buckets[timer->kind], &when, HASH_REMOVE, NULL);
	}
}

void
sdp_timer_register(SdpOperatorContext *ctx, SdpKeyState *key, SdpTimeKind kind,
				   TimestampTz when, int64 tag)
{
	SdpTimer	t;

	t.kind = kind;
	t.when = when;
	t.tag = tag;
	if (sdp_state_add_timer(key, kind, when, tag))
		sdp_operator_index_timer(ctx, key->key, &t);
}

bool
sdp_timer_delete(SdpOperatorContext *ctx, SdpKeyState *key, SdpTimeKind kind,
				 TimestampTz when, int64 tag)
{
	return sdp_state_remove_timer(key, kind, when, tag);
}

int
sdp_timer_list(SdpKeyState *key, SdpTimer *out, int max)
{
	int			n = Min(max, key->entry ? key->entry->ntimers : 0);

	for (int i = 0; i < n; i++)
		out[i] = key->entry->timers[i];
	return n;
}

/* Index every pending timer of the store (after a restore). */
void
sdp_operator_index_timers(SdpOperatorContext *ctx)
{
	dshash_seq_status status;
	SdpStateEntry *e;

	dshash_seq_init(&status, ctx->store->table, false);
	while ((e = dshash_seq_next(&status)) != NULL)
	{
		for (int i = 0; i < e->ntimers; i++)
			sdp_operator_index_timer(ctx, e->key, &e->timers[i]);
		if (ctx->op->index_key_timers)
			ctx->op->index_key_timers(ctx, e);
	}
	dshash_seq_term(&status);
}

/* The earliest pending timer of a kind, or DT_NOEND. */
TimestampTz
sdp_operator_next_timer(SdpOperatorContext *ctx, SdpTimeKind kind)
{
	if (pairingheap_is_empty(ctx->timers[kind]))
		return DT_NOEND;
	return pairingheap_container(TimerBucket, node, pairingheap_first(ctx->timers[kind]))->when;
}

/* A due timer, with its key's first bytes at hand for sorting (the nodes are scattered in memory). */
#define DUE_PREFIX 32
typedef struct DueTimer
{
	char		prefix[DUE_PREFIX];
	TimerNode  *node;
} DueTimer;

/* Due timers in key order, each key's in time order. */
static int
due_timer_compare(const void *a, const void *b)
{
	const DueTimer *x = a;
	const DueTimer *y = b;
	int			c = memcmp(x->prefix, y->prefix, DUE_PREFIX);

	if (c == 0)
		c = strcmp(x->node->key, y->node->key);
	if (c != 0)
		return c;
	return (x->node->timer.when > y->node->timer.when) - (x->node->timer.when < y->node->timer.when);
}

/*
 * Fire every due timer: processing-time timers up to ctx->now, event-time
 * timers up to ctx->watermark.  A timer that was deleted from its key
 * meanwhile is skipped.
 *
 * The timers due at once fire in the order of their keys (a key's own in
 * time order; what a handler arms and is already due fires in a next
 * round).  Keys do not see each other, so the order across keys is free,
 * and key order is what the write of their rows wants: when thousands of
 * windows close at one watermark step, their rows reach the target's
 * indexes in (definition, entity) order, and each insertion finds the
 * pages the previous one touched, instead of a random page of a large index.
 */
void
sdp_operator_fire_timers(SdpOperatorContext *ctx)
{
	DueTimer   *due = NULL;
	int			cap = 0;

	for (int kind = 0; kind < 2; kind++)
	{
		TimestampTz upto = (kind == SDP_PROCESSING_TIME) ? ctx->now : ctx->watermark;

		for (;;)
		{
			int			ndue = 0;

			while (!pairingheap_is_empty(ctx->timers[kind]))
			{
				TimerBucket *b = pairingheap_container(TimerBucket, node, pairingheap_first(ctx->timers[kind]));
				TimestampTz when = b->when;
				TimerNode  *n = b->head;

				if (when > upto)
					break;
				(void) pairingheap_remove_first(ctx->timers[kind]);
				(void) hash_search(ctx->timer_buckets[kind], &when, HASH_REMOVE, NULL);
				for (; n != NULL; n = n->next)
				{
					if (ndue == cap)
					{
						cap = Max(cap * 2, 64);
						due = due ? repalloc(due, sizeof(DueTimer) * cap) : palloc(sizeof(DueTimer) * cap);
					}
					memcpy(due[ndue].prefix, n->key, DUE_PREFIX);
					due[ndue++].node = n;
				}
			}
			if (ndue == 0)
				break;
			if (ndue > 1)
				qsort(due, ndue, sizeof(DueTimer), due_timer_compare);
			for (int i = 0; i < ndue; i++)
			{
				TimerNode  *n = due[i].node;
				SdpKeyState ks;

				sdp_state_open_key(ctx->store, n->key, false, &ks);
				if (ks.entry != NULL &&
					(ctx->op->take_timer ? ctx->op->take_timer(ctx, &ks, &n->timer)
					 : sdp_state_remove_timer(&ks, n->timer.kind, n->timer.when, n->timer.tag)))
				{
					ctx->timers_fired++;
					if (ctx->op->calls_user_code)
					{
						/* no lock while the owner's code runs: the operator opens the key itself */
						ctx->call_partition = ks.entry->partition;
						sdp_state_close_key(&ks);
						ks.key = n->key;
					}
					ctx->op->handle_expired_timer(ctx, &ks, &n->timer);
				}
				sdp_state_close_key(&ks);
				pfree(n);
			}
		}
	}
	if (due)
		pfree(due);
}

/* ---- rows ---- */

/*
 * The operator's context: its state store and its parsed options.  Its rows'
 * descriptors are bound next (sdp_operator_bind), once the worker knows the
 * transform, which the operator may build itself.
 */
SdpOperatorContext *
sdp_operator_create(const SdpOperator *op, const char *flow_name, Jsonb *options, SdpStateStore *store,
					TupleDesc rows)
{
	SdpOperatorContext *ctx = MemoryContextAllocZero(TopMemoryContext, sizeof(SdpOperatorContext));
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

	ctx->op = op;
	ctx->store = store;
	ctx->flow_name = pstrdup(flow_name);
	ctx->watermark = DT_NOBEGIN;
	for (int kind = 0; kind < 2; kind++)
	{
		HASHCTL		ctl;

		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = sizeof(TimestampTz);
		ctl.entrysize = sizeof(TimerBucket);
		ctl.hcxt = TopMemoryContext;
		ctx->timers[kind] = pairingheap_allocate(timer_compare, NULL);
		ctx->timer_buckets[kind] = hash_create("sdp timers by time", 64, &ctl,
											   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	ctx->emit_cxt = CurrentMemoryContext;
	ctx->input_desc = CreateTupleDescCopy(rows);	/* the transform's rows, until bound */
	ctx->config = op->init(ctx, options);
	MemoryContextSwitchTo(old);
	return ctx;
}

/* The descriptors of the rows the operator receives and emits; the key column's place. */
void
sdp_operator_bind(SdpOperatorContext *ctx, TupleDesc input, TupleDesc output)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	Oid			typout;
	bool		varlena;

	ctx->input_desc = CreateTupleDescCopy(input);
	ctx->output_desc = CreateTupleDescCopy(output);
	ctx->key_index = sdp_operator_column(ctx->input_desc, ctx->key_column, "key", true);
	ctx->partition_index = ctx->partition_column
		? sdp_operator_column(ctx->input_desc, ctx->partition_column, "partition", false) : -1;
	if (ctx->partition_index >= 0 && TupleDescAttr(ctx->input_desc, ctx->partition_index)->atttypid != INT4OID)
		ctx->partition_index = -1;
	getTypeOutputInfo(TupleDescAttr(ctx->input_desc, ctx->key_index)->atttypid, &typout, &varlena);
	fmgr_info(typout, &ctx->key_out);
	MemoryContextSwitchTo(old);
}

/*
 * The length in bytes of a value's text form.  text and varchar are measured
 * where they lie (their text form is their content, even compressed), so
 * checking a key costs no conversion; other types are converted.
 */
size_t
sdp_text_form_length(Datum d, Oid typid, FmgrInfo *out)
{
	char	   *text;
	size_t		len;

	if (typid == TEXTOID || typid == VARCHAROID)
		return toast_raw_datum_size(d) - VARHDRSZ;
	text = OutputFunctionCall(out, d);
	len = strlen(text);
	pfree(text);
	return len;
}

/*
 * Rows the operator could not take raise a data error here, before the
 * operator changes any state, so that the worker isolates their messages
 * into the dead letters instead of failing in the middle of a step.
 */
void
sdp_operator_check_rows(SdpOperatorContext *ctx, HeapTuple *rows, int n)
{
	for (int i = 0; i < n; i++)
	{
		bool		isnull;
		Datum		d = heap_getattr(rows[i], ctx->key_index + 1, ctx->input_desc, &isnull);

		if (!isnull && !ctx->op->calls_user_code &&
			sdp_text_form_length(d, TupleDescAttr(ctx->input_desc, ctx->key_index)->atttypid,
								 &ctx->key_out) >= SDP_STATE_KEY_MAX)
			ereport(ERROR,
					(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
					 errmsg("key \"%.40s...\" is longer than %d bytes",
							OutputFunctionCall(&ctx->key_out, d), SDP_STATE_KEY_MAX - 1),
					 errhint("Operator state keys (the \"key\" option's column) are at most %d bytes.",
							 SDP_STATE_KEY_MAX - 1)));
		if (ctx->op->check_row)
			ctx->op->check_row(ctx, rows[i]);
	}
}

void
sdp_reject(SdpOperatorContext *ctx, int32 partition, int64 offset, const char *reason)
{
	MemoryContext old = MemoryContextSwitchTo(ctx->emit_cxt);
	SdpRejected *r = palloc(sizeof(SdpRejected));

	r->partition = partition;
	r->offset = offset;
	r->reason = pstrdup(reason);
	ctx->rejected = lappend(ctx->rejected, r);
	MemoryContextSwitchTo(old);
}

void
sdp_emit(SdpOperatorContext *ctx, Datum *values, bool *nulls)
{
	MemoryContext old = MemoryContextSwitchTo(ctx->emit_cxt);

	ctx->emitted = lappend(ctx->emitted, heap_form_tuple(ctx->output_desc, values, nulls));
	MemoryContextSwitchTo(old);
}

typedef struct KeyGroup
{
	char		key[SDP_STATE_KEY_MAX];
	int			first;			/* order of first appearance */
	int32		partition;		/* of its first row, -1 if not known */
	int			nrows;
	int			cap;
	HeapTuple  *rows;
} KeyGroup;

/* A row's Kafka partition from the operator's partition column, -1 when it has none. */
int32
sdp_operator_row_partition(SdpOperatorContext *ctx, HeapTuple row)
{
	bool		isnull;
	Datum		d;

	if (ctx->partition_index < 0)
		return -1;
	d = heap_getattr(row, ctx->partition_index + 1, ctx->input_desc, &isnull);
	return isnull ? -1 : DatumGetInt32(d);
}

/* A row's key in its text form (the state store's key), or NULL when the key is NULL. */
char *
sdp_operator_row_key(SdpOperatorContext *ctx, HeapTuple row)
{
	bool		isnull;
	Datum		d = heap_getattr(row, ctx->key_index + 1, ctx->input_desc, &isnull);
	char	   *text;

	if (isnull)
		return NULL;
	text = OutputFunctionCall(&ctx->key_out, d);
	if (ctx->op->calls_user_code)
	{
		/* a key of any length: its store key (a digest for a long one) */
		char	   *store_key = palloc(SDP_STATE_KEY_MAX);

		sdp_state_store_key(text, store_key);
		pfree(text);
		return store_key;
	}
	if (strlen(text) >= SDP_STATE_KEY_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("key \"%.40s...\" is longer than %d bytes", text, SDP_STATE_KEY_MAX - 1)));
	return text;
}

/*
 * Hand the batch's rows to the operator, grouped by key, each group in
 * arrival order, groups in order of their first row.  Rows whose key is
 * NULL are skipped.  partitions (NULL: not known) gives each row's Kafka
 * partition: a key created here, or restored without one, is owned by the
 * partition of its first row (SdpStateEntry.partition).
 */
void
sdp_operator_handle_rows(SdpOperatorContext *ctx, HeapTuple *rows, const int32 *partitions, int n)
{
	HASHCTL		hctl;
	HTAB	   *groups;
	KeyGroup  **order;
	int			ngroups = 0;

	if (n == 0)
		return;
	memset(&hctl, 0, sizeof(hctl));
	hctl.keysize = SDP_STATE_KEY_MAX;
	hctl.entrysize = sizeof(KeyGroup);
	hctl.hcxt = CurrentMemoryContext;
	groups = hash_create("sdp key groups", Min(n, 1024), &hctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	order = palloc(sizeof(KeyGroup *) * n);

	for (int i = 0; i < n; i++)
	{
		char		buf[SDP_STATE_KEY_MAX];
		char	   *text = sdp_operator_row_key(ctx, rows[i]);
		KeyGroup   *g;
		bool		found;

		if (text == NULL)
			continue;
		memset(buf, 0, sizeof(buf));
		strlcpy(buf, text, sizeof(buf));
		pfree(text);
		g = hash_search(groups, buf, HASH_ENTER, &found);
		if (!found)
		{
			g->first = ngroups;
			g->partition = partitions ? partitions[i] : -1;
			g->nrows = 0;
			g->cap = 4;
			g->rows = palloc(sizeof(HeapTuple) * g->cap);
			order[ngroups++] = g;
		}
		if (g->nrows == g->cap)
		{
			g->cap *= 2;
			g->rows = repalloc(g->rows, sizeof(HeapTuple) * g->cap);
		}
		g->rows[g->nrows++] = rows[i];
	}

	for (int i = 0; i < ngroups; i++)
	{
		SdpKeyState ks;

		if (ctx->op->calls_user_code)
		{
			/* the owner's code runs with no lock held: the operator opens the key itself */
			memset(&ks, 0, sizeof(ks));
			ks.store = ctx->store;
			ks.key = order[i]->key;
			ctx->call_partition = order[i]->partition;
			ctx->op->handle_rows(ctx, &ks, order[i]->rows, order[i]->nrows);
			CHECK_FOR_INTERRUPTS();
			continue;
		}
		sdp_state_open_key(ctx->store, order[i]->key, true, &ks);
		if (ks.entry->partition < 0 && order[i]->partition >= 0)
		{
			ks.entry->partition = order[i]->partition;
			sdp_state_mark_key_dirty(&ks);
		}
		ctx->op->handle_rows(ctx, &ks, order[i]->rows, order[i]->nrows);
		sdp_state_close_key(&ks);
		CHECK_FOR_INTERRUPTS();	/* between keys: no key's lock is held */
	}
	hash_destroy(groups);
}

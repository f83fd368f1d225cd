/*
 * processor_state.h
 *		A processor's state variables for each key, in the flow's state area
 *		(processor_state.c).
 */
#ifndef SDP_PROCESSOR_STATE_H
#define SDP_PROCESSOR_STATE_H

#include "stateful/state_store.h"

#include "fmgr.h"
#include "utils/jsonb.h"

typedef enum SdpVarKind
{
	SDP_VAR_VALUE,
	SDP_VAR_LIST,
	SDP_VAR_MAP
} SdpVarKind;

/* A variable as the flow's option "state" declares it. */
typedef struct SdpVarDecl
{
	char	   *name;
	SdpVarKind	kind;
	Oid			type;			/* the value's, a list's elements', a map's values' */
	Oid			key_type;		/* a map's keys' */
	int64		ttl_us;			/* entries expire this long after they were written; 0: never */
	/* filled by sdp_vars_create */
	int16		typlen;
	bool		typbyval;
	int16		key_typlen;
	bool		key_typbyval;
	FmgrInfo	out;
	FmgrInfo	in;
	Oid			ioparam;
	FmgrInfo	key_out;
	FmgrInfo	key_in;
	Oid			key_ioparam;
} SdpVarDecl;

typedef struct SdpVars SdpVars;
struct SdpOperatorContext;

/* the worker's (writer) or a reader's view of the variables of a store */
extern SdpVars *sdp_vars_create(SdpStateStore *store, SdpVarDecl *decls, int ndecls, bool writer);
extern const SdpStateExtOps *sdp_vars_ext_ops(void);
extern int	sdp_vars_find(SdpVars *vars, const char *name);
extern const SdpVarDecl *sdp_vars_decl(SdpVars *vars, int var);
extern void sdp_vars_set_clock(SdpVars *vars, TimestampTz now);

/* the key the handler's state calls act on */
extern void sdp_vars_set_key(SdpVars *vars, const char *store_key, const char *key_text, int32 partition);
extern void sdp_vars_clear_key(SdpVars *vars);
extern const char *sdp_vars_key_text(SdpVars *vars, SdpStateEntry *entry, const char *store_key);

/* state of the current key (the values are palloc'd in CurrentMemoryContext) */
extern bool sdp_vars_get_value(SdpVars *vars, int var, Datum *value);
extern void sdp_vars_set_value(SdpVars *vars, int var, Datum value);
extern void sdp_vars_clear(SdpVars *vars, int var);
extern int	sdp_vars_list(SdpVars *vars, int var, Datum **elems);
extern void sdp_vars_list_append(SdpVars *vars, int var, Datum value);
extern void sdp_vars_set_list(SdpVars *vars, int var, Datum *elems, bool *nulls, int n);
extern bool sdp_vars_map_get(SdpVars *vars, int var, Datum key, Datum *value, bool *isnull);
extern void sdp_vars_map_put(SdpVars *vars, int var, Datum key, Datum value, bool isnull);
extern bool sdp_vars_map_remove(SdpVars *vars, int var, Datum key);
extern int64 sdp_vars_map_count(SdpVars *vars, int var);
extern int	sdp_vars_map_entries(SdpVars *vars, int var, Datum **keys, Datum **values, bool **nulls);

/* timers of the current key */
extern bool sdp_vars_add_timer(SdpVars *vars, SdpTimeKind kind, TimestampTz at);
extern bool sdp_vars_delete_timer(SdpVars *vars, SdpTimeKind kind, TimestampTz at);
extern int	sdp_vars_timers(SdpVars *vars, SdpTimer **timers);
extern bool sdp_vars_take_timer(SdpVars *vars, SdpKeyState *ks, SdpTimeKind kind, TimestampTz at);
extern void sdp_vars_index_timers(SdpVars *vars, SdpStateEntry *entry,
								  void (*index) (void *arg, const char *store_key, const SdpTimer *timer, bool add), void *arg);

/* the undo log of an attempt: its changes undone (to a mark), or kept */
extern int	sdp_vars_mark(SdpVars *vars);
extern void sdp_vars_undo(SdpVars *vars, int mark);
extern void sdp_vars_commit(SdpVars *vars);
extern void sdp_vars_set_timer_indexer(SdpVars *vars,
									   void (*index) (void *arg, const char *store_key, const SdpTimer *timer, bool add),
									   void *arg);

/* a reader: a key's variables as jsonb, one per variable declared (NULL: none) */
extern void *sdp_vars_copy_var(SdpVars *vars, SdpStateEntry *entry, int var);
extern Jsonb *sdp_vars_describe_copy(SdpVars *vars, int var, void *copy);
extern char *sdp_vars_describe_timers(SdpVars *vars, SdpStateEntry *entry);

#endif							/* SDP_PROCESSOR_STATE_H */

/*
 * state_store.h
 *		Keyed operator state in shared memory (state_store.c).
 */
#ifndef SDP_STATE_STORE_H
#define SDP_STATE_STORE_H

#include "sdp.h"

#include "lib/dshash.h"
#include "lib/stringinfo.h"
#include "utils/hsearch.h"
#include "utils/dsa.h"

/* Longest grouping key, in bytes (including the terminating NUL). */
#define SDP_STATE_KEY_MAX	128
/* Value states per key (int64 each), and pending timers per key. */
#define SDP_STATE_VALUES	4
#define SDP_STATE_TIMERS	16
/* Longest map member, in bytes (including the terminating NUL). */
#define SDP_STATE_MEMBER_MAX 64

typedef enum SdpTimeKind
{
	SDP_PROCESSING_TIME = 0,
	SDP_EVENT_TIME = 1
} SdpTimeKind;

typedef struct SdpTimer
{
	int64		when;			/* TimestampTz */
	int64		tag;			/* the operator's own (e.g. a window's start) */
	int32		kind;			/* SdpTimeKind */
} SdpTimer;

/*
 * One key's state: value states, a map state, pending timers.  Lives in a
 * dshash table in the flow's DSA area; its map is a separate DSA
 * allocation, resized as it grows.
 */
typedef struct SdpStateEntry
{
	char		key[SDP_STATE_KEY_MAX]; /* dshash key: NUL-padded */
	uint32		values_set;		/* bit i: values[i] holds a value; SDP_ENTRY_RESTING */
	int32		ntimers;
	int32		partition;		/* the Kafka partition of the key's first row; -1: not known */
	uint32		dirty_epoch;	/* writer only: the store's epoch when the key was last marked dirty */
	int64		values[SDP_STATE_VALUES];
	SdpTimer	timers[SDP_STATE_TIMERS];
	dsa_pointer map;			/* SdpStateMap, or InvalidDsaPointer */
	dsa_pointer ext;			/* the operator's own state of the key (SdpStateExtOps), or InvalidDsaPointer */
} SdpStateEntry;

/*
 * In values_set: the key has no state left and rests in the table until the
 * next checkpoint deletes it (sdp_state_close_key), so that a key whose
 * windows all closed and that comes back a moment later is not deleted and
 * created again.  A resting key is no key to anyone: readers skip it, and
 * the writer opening it without creating it deletes it.
 */
#define SDP_ENTRY_RESTING	(1u << 31)
StaticAssertDecl(SDP_STATE_VALUES < 31, "values_set's bits and SDP_ENTRY_RESTING");

static inline bool
sdp_state_entry_resting(const SdpStateEntry *e)
{
	return (e->values_set & SDP_ENTRY_RESTING) != 0;
}

/*
 * A map state: open addressing over fixed-size slots, each holding a
 * NUL-terminated member (at most member_len bytes) and a value of value_len
 * bytes.
 */
typedef struct SdpStateMap
{
	int32		capacity;		/* slots, a power of two */
	int32		count;			/* members */
	int32		tombstones;
	int32		value_len;
	/* capacity slots follow: [uint8 status][member][value] */
} SdpStateMap;

struct SdpStateStore;
struct SdpKeyState;

/*
 * State of a shape of its own that an operator keeps for a key, beside the
 * values, map and timers every operator has (the processor's variables):
 * SdpStateEntry.ext points to it, the operator makes and frees it (in the
 * store's area, sdp_state_allocate), and leaves it invalid when the key has
 * none (a key with no state at all rests or is deleted, as others).  The
 * store writes it into the key's checkpoint and reads it back by these.
 */
typedef struct SdpStateExtOps
{
	/* the key's ext as bytes, appended to buf (its entry is locked) */
	void		(*serialize) (struct SdpStateStore *store, SdpStateEntry *entry, StringInfo buf);
	/* the key's ext from those bytes (the writer, at restore; the key is open) */
	void		(*restore) (struct SdpStateStore *store, struct SdpKeyState *ks, const char *data, int len);
	void	   *arg;			/* the operator's */
	/*
	 * Around the serializes of one checkpoint and the restores of one
	 * start (in a transaction): what they depend on set, and reset (NULL:
	 * nothing); begin returns what end takes.
	 */
	int			(*io_begin) (void);
	void		(*io_end) (int token);
} SdpStateExtOps;

/* The store of one flow, as its worker or a reader sees it. */
typedef struct SdpStateStore
{
	dsa_area   *area;
	dshash_table *table;
	int			map_value_len;
	bool		writer;
	int64		nkeys;			/* writer only: entries, resting ones included */
	int64		nresting;		/* writer only: resting entries */
	int64		live_peak;		/* writer only: most live entries since the last checkpoint */
	size_t		map_bytes;		/* writer only */
	size_t		limit_bytes;	/* writer only: the area's size limit */
	/* writer only: keys changed or deleted since the last checkpoint */
	HTAB	   *dirty;
	/*
	 * writer only: advanced when the dirty set is emptied (never 0), so that
	 * an entry whose dirty_epoch equals it is in the set already
	 */
	uint32		dirty_epoch;
	/* writer only: inside a dshash call that allocates (left set if it raised) */
	bool		allocating;
	const SdpStateExtOps *ext_ops;	/* writer only: the operator's own state of keys, or NULL */
	size_t		ext_bytes;		/* writer only: what it takes (the operator counts) */
} SdpStateStore;

/* A key's state while an operator works on it (its dshash entry is locked). */
typedef struct SdpKeyState
{
	SdpStateStore *store;
	SdpStateEntry *entry;
	const char *key;
	bool		created;
	bool		dirty;			/* changed while open: marked dirty once, at close */
} SdpKeyState;

extern int	sdp_state_tranche_id(void);
extern SdpStateStore *sdp_state_create(size_t limit_bytes, int map_value_len,
									   dsa_handle *area_handle, dshash_table_handle *table_handle);
extern SdpStateStore *sdp_state_attach(dsa_handle area_handle, dshash_table_handle table_handle);
extern void sdp_state_detach(SdpStateStore *store);
extern size_t sdp_state_memory(SdpStateStore *store);

/*
 * The store's key for a key's text form: the text itself when it is shorter
 * than SDP_STATE_KEY_MAX (and does not start with SDP_STATE_DIGEST_MARK), else
 * a digest of it (an operator that takes keys of any length keeps the text in
 * its ext).
 */
#define SDP_STATE_DIGEST_MARK	'\x01'
extern void sdp_state_store_key(const char *text, char *out);
extern bool sdp_state_key_is_digest(const char *store_key);
extern dsa_pointer sdp_state_allocate(SdpStateStore *store, size_t size);
extern void sdp_state_set_ext_ops(SdpStateStore *store, const SdpStateExtOps *ops);

extern void sdp_state_open_key(SdpStateStore *store, const char *key, bool create, SdpKeyState *ks);
extern void sdp_state_close_key(SdpKeyState *ks);

/* value state */
extern bool sdp_state_get_value(SdpKeyState *ks, int idx, int64 *value);
extern void sdp_state_set_value(SdpKeyState *ks, int idx, int64 value);
extern void sdp_state_clear_value(SdpKeyState *ks, int idx);

/* map state */
extern bool sdp_state_map_get(SdpKeyState *ks, const char *member, void *value);
extern void sdp_state_map_put(SdpKeyState *ks, const char *member, const void *value);
extern void sdp_state_map_reserve(SdpKeyState *ks, int value_len);
extern bool sdp_state_map_remove(SdpKeyState *ks, const char *member);
extern int	sdp_state_map_count(SdpKeyState *ks);
typedef bool (*SdpMapVisitor) (const char *member, void *value, void *arg);	/* return false to remove */
extern void sdp_state_map_visit(SdpKeyState *ks, SdpMapVisitor visit, void *arg);
extern SdpStateMap *sdp_state_map_copy(SdpStateStore *store, const SdpStateEntry *entry);
extern void sdp_state_map_read(const SdpStateMap *map,
							   void (*visit) (const char *member, const void *value, void *arg), void *arg);

/* timers of the key (the worker keeps the time-ordered index, operator.c) */
extern bool sdp_state_add_timer(SdpKeyState *ks, SdpTimeKind kind, int64 when, int64 tag);
extern bool sdp_state_remove_timer(SdpKeyState *ks, SdpTimeKind kind, int64 when, int64 tag);

/* checkpoints */
extern bytea *sdp_state_serialize(SdpStateStore *store, SdpStateEntry *entry);
extern void sdp_state_restore(SdpStateStore *store, const char *key, int32 partition, bytea *blob);
extern int32 sdp_state_key_partition(SdpStateStore *store, const char *key, bool *found);
extern void sdp_state_mark_dirty(SdpStateStore *store, const char *key);
extern void sdp_state_mark_key_dirty(SdpKeyState *ks);
extern void sdp_state_clear_dirty(SdpStateStore *store);
extern void sdp_state_purge_resting(SdpStateStore *store);

/* Whether the last error was raised by dshash allocating within the store's limit. */
static inline bool
sdp_state_allocating(SdpStateStore *store)
{
	return store != NULL && store->allocating;
}

#endif							/* SDP_STATE_STORE_H */

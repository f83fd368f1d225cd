/*
 * state_store.c
 *		Keyed operator state in shared memory: DSA + dshash.
 *
 * Each stateful flow's worker creates a DSA area holding a dshash table of
 * SdpStateEntry, one per grouping key: a few int64 value states, pending
 * timers and a map state (member -> fixed-size value).  The area's handles
 * are published in the flow's slot, so that SQL (sdp_flow_state) can attach
 * and read the state while the flow runs.  The area has a size limit (the
 * flow's state_memory_limit); an allocation past it raises an error that
 * fails the flow, never the server.
 *
 * Locking: dshash's partition locks.  The worker modifies an entry, its map
 * included, only while holding the entry's lock exclusively
 * (sdp_state_open_key .. sdp_state_close_key); readers hold it shared while
 * they read.  The map is reached through the entry, so it is covered too.
 *
 * The worker also remembers which keys changed since the last checkpoint
 * (dirty), so that a checkpoint writes only those.
 *
 * A key left with no state rests in the table until the next checkpoint
 * (SDP_ENTRY_RESTING) rather than being deleted at once: a windowed
 * aggregation's key empties when its last window closes, and its next event
 * comes a moment later; deleting and creating it again (the entry, its map,
 * the dirty set by name) was a quarter of the operator's work per event
 * with 1-second windows.  The checkpoint deletes the resting keys (it
 * opens every dirty key, and every resting key is dirty).  Keys at rest
 * never outnumber the live keys at their peak since the last checkpoint
 * (a stream of keys seen once keeps as few at rest as it has live), and
 * never take the room of a live key: past a quarter of the state's limit
 * (REST_SHARE_DIVISOR) keys that empty are deleted at once, and the worker
 * deletes those at rest before its next batch.
 */
#include "stateful/state_store.h"
#include "compat.h"
#include "shmem/slots.h"

#include "common/hashfn.h"
#include "lib/stringinfo.h"
#include "storage/lwlock.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#define SLOT_EMPTY		0
#define SLOT_USED		1
#define SLOT_DELETED	2
/*
 * A new map holds one member and doubles from there: most keys of a
 * windowed aggregation have one or two open windows, and a map slot carries
 * the whole value (an approx_distinct window is over 1 kB), so a larger
 * starting size multiplies the state of every key.
 */
#define MAP_MIN_CAPACITY 2

/*
 * Keys rest only while the state takes less than this share of its limit
 * by sdp_state_memory's count, which leaves out dshash's buckets and the
 * allocator's rounding (the area's real size is up to about twice it).
 */
#define REST_SHARE_DIVISOR 4

static int	registered_tranche = 0;

static void map_free(SdpStateStore *store, SdpStateEntry *e);

int
sdp_state_tranche_id(void)
{
	if (registered_tranche == 0)
	{
		registered_tranche = SdpShmem->state_tranche_id;
		LWLockRegisterTranche(registered_tranche, "sdp_state");
	}
	return registered_tranche;
}

/*
 * Keys are NUL-padded strings: hashed and compared up to their end, not
 * over all SDP_STATE_KEY_MAX bytes (a burst of closing windows looks up
 * thousands of keys of twenty-odd bytes).
 */
static dshash_hash
state_key_hash(const void *key, size_t size, void *arg)
{
	return hash_bytes((const unsigned char *) key, (int) strnlen(key, size));
}

static int
state_key_compare(const void *a, const void *b, size_t size, void *arg)
{
	return strncmp(a, b, size);
}

static dshash_parameters
state_params(void)
{
	dshash_parameters p;

	p.key_size = SDP_STATE_KEY_MAX;
	p.entry_size = sizeof(SdpStateEntry);
	p.compare_function = state_key_compare;
	p.hash_function = state_key_hash;
	p.tranche_id = sdp_state_tranche_id();
	SDP_DSHASH_SET_MEMCPY(p);
	return p;
}

/* Create the store of a flow (its worker), limited to limit_bytes of shared memory. */
SdpStateStore *
sdp_state_create(size_t limit_bytes, int map_value_len,
				 dsa_handle *area_handle, dshash_table_handle *table_handle)
{
	SdpStateStore *store = MemoryContextAllocZero(TopMemoryContext, sizeof(SdpStateStore));
	dshash_parameters params = state_params();
	HASHCTL		ctl;
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

	store->area = dsa_create(sdp_state_tranche_id());
	dsa_pin_mapping(store->area);
	dsa_set_size_limit(store->area, limit_bytes);
	store->table = dshash_create(store->area, &params, NULL);
	store->map_value_len = map_value_len;
	store->limit_bytes = limit_bytes;
	store->writer = true;
	store->dirty_epoch = 1;
	MemoryContextSwitchTo(old);

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = SDP_STATE_KEY_MAX;
	ctl.entrysize = SDP_STATE_KEY_MAX;
	ctl.hcxt = TopMemoryContext;
	store->dirty = hash_create("sdp dirty keys", 1024, &ctl, HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);

	*area_handle = dsa_get_handle(store->area);
	*table_handle = dshash_get_hash_table_handle(store->table);
	return store;
}

/* Attach to a running flow's store to read it (a backend); detach when done. */
SdpStateStore *
sdp_state_attach(dsa_handle area_handle, dshash_table_handle table_handle)
{
	SdpStateStore *store = palloc0(sizeof(SdpStateStore));
	dshash_parameters params = state_params();

	store->area = dsa_attach(area_handle);
	store->table = dshash_attach(store->area, &params, table_handle, NULL);
	store->writer = false;
	return store;
}

void
sdp_state_detach(SdpStateStore *store)
{
	dshash_detach(store->table);
	dsa_detach(store->area);
	pfree(store);
}

/* Shared memory the state takes (entries, maps and the operators' own; the writer keeps count). */
size_t
sdp_state_memory(SdpStateStore *store)
{
	return (size_t) store->nkeys * sizeof(SdpStateEntry) + store->map_bytes + store->ext_bytes;
}

/* An operator with state of its own for keys (SdpStateEntry.ext) says how to checkpoint it. */
void
sdp_state_set_ext_ops(SdpStateStore *store, const SdpStateExtOps *ops)
{
	store->ext_ops = ops;
}

/*
 * The store's key of a key's text form (see state_store.h): a digest is the
 * mark, then 64 bits of each of two hashes of the text and its length, in
 * hex.  Two keys with one digest would share their state; the operator that
 * keeps the text checks it at each open (processor.c).
 */
void
sdp_state_store_key(const char *text, char *out)
{
	size_t		len = strlen(text);
	uint64		h1,
				h2;

	memset(out, 0, SDP_STATE_KEY_MAX);
	if (len < SDP_STATE_KEY_MAX && text[0] != SDP_STATE_DIGEST_MARK)
	{
		memcpy(out, text, len);
		return;
	}
	h1 = hash_bytes_extended((const unsigned char *) text, (int) Min(len, PG_INT32_MAX), 0);
	h2 = hash_bytes_extended((const unsigned char *) text, (int) Min(len, PG_INT32_MAX), UINT64CONST(0x5d9f3c2b7e1a4f6d));
	snprintf(out, SDP_STATE_KEY_MAX, "%c%016llx%016llx%08llx", SDP_STATE_DIGEST_MARK,
			 (unsigned long long) h1, (unsigned long long) h2, (unsigned long long) (len & 0xffffffff));
}

bool
sdp_state_key_is_digest(const char *store_key)
{
	return store_key[0] == SDP_STATE_DIGEST_MARK;
}

/*
 * The dirty set is a string-keyed hash (keys shorter than SDP_STATE_KEY_MAX:
 * sdp_state_open_key checks).  A key whose entry is gone (deleted) is marked
 * by its name.
 */
void
sdp_state_mark_dirty(SdpStateStore *store, const char *key)
{
	(void) hash_search(store->dirty, key, HASH_ENTER, NULL);
}

/*
 * Mark an open key dirty.  Its entry remembers the epoch in which it was
 * put in the set, so a key changed at every batch (or closed by a burst of
 * timers) is hashed into the set once per checkpoint, not at each change.
 */
void
sdp_state_mark_key_dirty(SdpKeyState *ks)
{
	SdpStateStore *store = ks->store;

	if (ks->entry->dirty_epoch == store->dirty_epoch)
		return;
	sdp_state_mark_dirty(store, ks->key);
	ks->entry->dirty_epoch = store->dirty_epoch;
}

/* Empty the dirty set (its keys are checkpointed): every entry's mark is stale from here. */
void
sdp_state_clear_dirty(SdpStateStore *store)
{
	HASH_SEQ_STATUS seq;
	char	   *key;

	hash_seq_init(&seq, store->dirty);
	while ((key = hash_seq_search(&seq)) != NULL)
		(void) hash_search(store->dirty, key, HASH_REMOVE, NULL);
	store->live_peak = store->nkeys - store->nresting;
	if (++store->dirty_epoch == 0)
	{
		/*
		 * After 2^32 checkpoints an entry marked in epoch 1 and untouched
		 * since would seem marked: reset every entry's mark before reusing
		 * the epochs.
		 */
		dshash_seq_status status;
		SdpStateEntry *e;

		dshash_seq_init(&status, store->table, true);
		while ((e = dshash_seq_next(&status)) != NULL)
			e->dirty_epoch = 0;
		dshash_seq_term(&status);
		store->dirty_epoch = 1;
	}
}

static void
unmark_dirty(SdpStateStore *store, const char *key)
{
	(void) hash_search(store->dirty, key, HASH_REMOVE, NULL);
}

/*
 * Delete the resting keys once the state has used a quarter of its limit
 * (the writer, holding no key).  They are in the dirty set already; they
 * are marked again by name in case.
 */
void
sdp_state_purge_resting(SdpStateStore *store)
{
	dshash_seq_status status;
	SdpStateEntry *e;

	if (store->nresting == 0 || sdp_state_memory(store) < store->limit_bytes / REST_SHARE_DIVISOR)
		return;
	dshash_seq_init(&status, store->table, true);
	while ((e = dshash_seq_next(&status)) != NULL)
	{
		if (!sdp_state_entry_resting(e))
			continue;
		sdp_state_mark_dirty(store, e->key);
		dshash_delete_current(&status);
		store->nkeys--;
		store->nresting--;
	}
	dshash_seq_term(&status);
	Assert(store->nresting == 0);
}

/* dsa_allocate that reports the flow's limit rather than a generic out of memory */
dsa_pointer
sdp_state_allocate(SdpStateStore *store, size_t size)
{
	dsa_pointer p = dsa_allocate_extended(store->area, size, DSA_ALLOC_NO_OOM | DSA_ALLOC_ZERO);

	if (!DsaPointerIsValid(p))
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("flow state exceeds its memory limit"),
				 errhint("Raise the flow's option state_memory_limit (or sdp.state_memory_limit), or keep less state (a shorter ttl, fewer keys).")));
	return p;
}

/*
 * Lock the key's entry for the operator, creating it if asked.  ks->entry is
 * NULL when the key has no state and create is false.
 */
void
sdp_state_open_key(SdpStateStore *store, const char *key, bool create, SdpKeyState *ks)
{
	char		buf[SDP_STATE_KEY_MAX];
	bool		found = true;

	if (strlen(key) >= SDP_STATE_KEY_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("state key \"%.40s...\" is longer than %d bytes", key, SDP_STATE_KEY_MAX - 1)));
	memset(buf, 0, sizeof(buf));
	strlcpy(buf, key, sizeof(buf));

	ks->store = store;
	ks->key = key;
	ks->created = false;
	ks->dirty = false;
	if (create)
	{
		/* an out of memory raised in here is the store's limit (dsa_set_size_limit) */
		store->allocating = true;
		ks->entry = dshash_find_or_insert(store->table, buf, &found);
		store->allocating = false;
	}
	else
		ks->entry = dshash_find(store->table, buf, !store->writer ? false : true);
	if (ks->entry && !found)
	{
		store->nkeys++;
		/* dshash copied the key; clear the rest */
		memset((char *) ks->entry + SDP_STATE_KEY_MAX, 0, sizeof(SdpStateEntry) - SDP_STATE_KEY_MAX);
		ks->entry->map = InvalidDsaPointer;
		ks->entry->ext = InvalidDsaPointer;
		ks->entry->partition = -1;
		ks->created = true;
		if (store->nkeys - store->nresting > store->live_peak)
			store->live_peak = store->nkeys - store->nresting;
	}
	else if (ks->entry && sdp_state_entry_resting(ks->entry))
	{
		/* a resting key is no key: created anew, or (not creating) deleted now */
		Assert(store->writer);
		store->nresting--;
		ks->entry->values_set = 0;
		ks->entry->partition = -1;
		if (create)
		{
			ks->created = true;
			if (store->nkeys - store->nresting > store->live_peak)
				store->live_peak = store->nkeys - store->nresting;
		}
		else
		{
			sdp_state_mark_dirty(store, key);
			dshash_delete_entry(store->table, ks->entry);
			store->nkeys--;
			ks->entry = NULL;
		}
	}
}

/*
 * Unlock the key; a key left with no state at all rests until the next
 * checkpoint, or is deleted at once when as many keys rest as were live at
 * the peak, or the state has used a quarter of its limit.
 * A key changed while it was open is marked dirty here, once, rather than
 * at each change (a resting key is always marked: the checkpoint deletes it).
 */
void
sdp_state_close_key(SdpKeyState *ks)
{
	SdpStateStore *store = ks->store;
	SdpStateEntry *e = ks->entry;

	if (e == NULL)
		return;
	if (store->writer && e->values_set == 0 && e->ntimers == 0 &&
		sdp_state_map_count(ks) == 0 && !DsaPointerIsValid(e->ext))
	{
		if (DsaPointerIsValid(e->map))
			map_free(store, e);
		if (store->nresting < store->live_peak &&
			sdp_state_memory(store) < store->limit_bytes / REST_SHARE_DIVISOR)
		{
			sdp_state_mark_key_dirty(ks);
			e->values_set = SDP_ENTRY_RESTING;
			store->nresting++;
			dshash_release_lock(store->table, e);
		}
		else
		{
			sdp_state_mark_dirty(store, ks->key);
			dshash_delete_entry(store->table, e);
			store->nkeys--;
		}
	}
	else
	{
		if (ks->dirty && store->writer)
			sdp_state_mark_key_dirty(ks);
		dshash_release_lock(store->table, e);
	}
	ks->entry = NULL;
	ks->dirty = false;
}

bool
sdp_state_get_value(SdpKeyState *ks, int idx, int64 *value)
{
	Assert(idx >= 0 && idx < SDP_STATE_VALUES);
	if (ks->entry == NULL || (ks->entry->values_set & (1u << idx)) == 0)
		return false;
	*value = ks->entry->values[idx];
	return true;
}

void
sdp_state_set_value(SdpKeyState *ks, int idx, int64 value)
{
	Assert(idx >= 0 && idx < SDP_STATE_VALUES);
	ks->entry->values[idx] = value;
	ks->entry->values_set |= (1u << idx);
	ks->dirty = true;
}

void
sdp_state_clear_value(SdpKeyState *ks, int idx)
{
	ks->entry->values_set &= ~(1u << idx);
	ks->dirty = true;
}

/* ---- map state ---- */

static size_t
slot_size(int value_len)
{
	return MAXALIGN(1 + SDP_STATE_MEMBER_MAX + value_len);
}

static char *
map_slot(SdpStateMap *map, int i)
{
	return (char *) map + MAXALIGN(sizeof(SdpStateMap)) + (size_t) i * slot_size(map->value_len);
}

static size_t
map_size(int capacity, int value_len)
{
	return MAXALIGN(sizeof(SdpStateMap)) + (size_t) capacity * slot_size(value_len);
}

static void
map_free(SdpStateStore *store, SdpStateEntry *e)
{
	SdpStateMap *map = dsa_get_address(store->area, e->map);

	store->map_bytes -= map_size(map->capacity, map->value_len);
	dsa_free(store->area, e->map);
	e->map = InvalidDsaPointer;
}

static SdpStateMap *
map_of(SdpKeyState *ks)
{
	if (ks->entry == NULL || !DsaPointerIsValid(ks->entry->map))
		return NULL;
	return dsa_get_address(ks->store->area, ks->entry->map);
}

static uint32
member_hash(const char *member)
{
	return hash_bytes((const unsigned char *) member, (int) strlen(member));
}

/* The slot holding member, or (with insert) the slot where it would go; -1 if none. */
static int
map_find(SdpStateMap *map, const char *member, bool insert)
{
	uint32		mask = (uint32) map->capacity - 1;
	int			first_free = -1;

	for (uint32 i = member_hash(member) & mask, n = 0; n < (uint32) map->capacity; i = (i + 1) & mask, n++)
	{
		char	   *slot = map_slot(map, (int) i);

		if (slot[0] == SLOT_EMPTY)
			return insert ? (first_free >= 0 ? first_free : (int) i) : -1;
		if (slot[0] == SLOT_DELETED)
		{
			if (first_free < 0)
				first_free = (int) i;
			continue;
		}
		if (strcmp(slot + 1, member) == 0)
			return (int) i;
	}
	return insert ? first_free : -1;
}

/* Rebuild the key's map with the given capacity (grow, shrink, or drop tombstones). */
static SdpStateMap *
map_rebuild(SdpKeyState *ks, int capacity, int new_value_len)
{
	SdpStateStore *store = ks->store;
	SdpStateMap *old = map_of(ks);
	int			value_len = old ? old->value_len : new_value_len;
	dsa_pointer np = sdp_state_allocate(store, map_size(capacity, value_len));
	SdpStateMap *map = dsa_get_address(store->area, np);

	store->map_bytes += map_size(capacity, value_len);
	map->capacity = capacity;
	map->value_len = value_len;
	if (old)
	{
		for (int i = 0; i < old->capacity; i++)
		{
			char	   *slot = map_slot(old, i);

			if (slot[0] == SLOT_USED)
			{
				char	   *to = map_slot(map, map_find(map, slot + 1, true));

				memcpy(to, slot, slot_size(value_len));
				map->count++;
			}
		}
		map_free(store, ks->entry);
	}
	ks->entry->map = np;
	return map;
}

/* Give the key's map values of value_len bytes (before its first put; the store's default otherwise). */
void
sdp_state_map_reserve(SdpKeyState *ks, int value_len)
{
	if (map_of(ks) == NULL)
		(void) map_rebuild(ks, MAP_MIN_CAPACITY, value_len);
}

bool
sdp_state_map_get(SdpKeyState *ks, const char *member, void *value)
{
	SdpStateMap *map = map_of(ks);
	int			i;

	if (map == NULL || (i = map_find(map, member, false)) < 0)
		return false;
	if (value)
		memcpy(value, map_slot(map, i) + 1 + SDP_STATE_MEMBER_MAX, map->value_len);
	return true;
}

void
sdp_state_map_put(SdpKeyState *ks, const char *member, const void *value)
{
	SdpStateMap *map = map_of(ks);
	int			i;
	char	   *slot;

	if (strlen(member) >= SDP_STATE_MEMBER_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("state map member \"%.40s...\" is longer than %d bytes", member, SDP_STATE_MEMBER_MAX - 1)));
	if (map == NULL)
		map = map_rebuild(ks, MAP_MIN_CAPACITY, ks->store->map_value_len);
	else if ((map->count + map->tombstones + 1) * 4 > map->capacity * 3)
		map = map_rebuild(ks, map->count * 2 + 2 > map->capacity ? map->capacity * 2 : map->capacity, 0);
	i = map_find(map, member, true);
	slot = map_slot(map, i);
	if (slot[0] != SLOT_USED)
	{
		if (slot[0] == SLOT_DELETED)
			map->tombstones--;
		slot[0] = SLOT_USED;
		strlcpy(slot + 1, member, SDP_STATE_MEMBER_MAX);
		map->count++;
	}
	memcpy(slot + 1 + SDP_STATE_MEMBER_MAX, value, map->value_len);
	ks->dirty = true;
}

static void
map_after_removal(SdpKeyState *ks, SdpStateMap *map)
{
	if (map->count == 0)
		map_free(ks->store, ks->entry);
	else if (map->capacity > MAP_MIN_CAPACITY && map->count * 8 < map->capacity)
		(void) map_rebuild(ks, map->capacity / 2, 0);	/* keep memory flat when a key shrinks */
}

bool
sdp_state_map_remove(SdpKeyState *ks, const char *member)
{
	SdpStateMap *map = map_of(ks);
	int			i;

	if (map == NULL || (i = map_find(map, member, false)) < 0)
		return false;
	map_slot(map, i)[0] = SLOT_DELETED;
	map->count--;
	map->tombstones++;
	map_after_removal(ks, map);
	ks->dirty = true;
	return true;
}

int
sdp_state_map_count(SdpKeyState *ks)
{
	SdpStateMap *map = map_of(ks);

	return map ? map->count : 0;
}

/* Visit every member; the visitor returns false to remove the member. */
void
sdp_state_map_visit(SdpKeyState *ks, SdpMapVisitor visit, void *arg)
{
	SdpStateMap *map = map_of(ks);
	bool		removed = false;

	if (map == NULL)
		return;
	for (int i = 0; i < map->capacity; i++)
	{
		char	   *slot = map_slot(map, i);

		if (slot[0] != SLOT_USED)
			continue;
		if (!visit(slot + 1, slot + 1 + SDP_STATE_MEMBER_MAX, arg))
		{
			slot[0] = SLOT_DELETED;
			map->count--;
			map->tombstones++;
			removed = true;
		}
	}
	if (removed)
	{
		map_after_removal(ks, map);
		ks->dirty = true;
	}
}

/* Read-only iteration for readers (the entry's lock is held by the caller). */
/*
 * A copy of an entry's map in the caller's memory, or NULL when the entry
 * has none.  The caller holds the entry's lock and reads the copy after
 * releasing it, so that no reader holds a partition lock the worker waits
 * for while it formats what it read.
 */
SdpStateMap *
sdp_state_map_copy(SdpStateStore *store, const SdpStateEntry *entry)
{
	SdpStateMap *map;
	SdpStateMap *copy;
	size_t		size;

	if (!DsaPointerIsValid(entry->map))
		return NULL;
	map = dsa_get_address(store->area, entry->map);
	size = map_size(map->capacity, map->value_len);
	copy = palloc(size);
	memcpy(copy, map, size);
	return copy;
}

/* Visit the members of a map copied by sdp_state_map_copy. */
void
sdp_state_map_read(const SdpStateMap *map,
				   void (*visit) (const char *member, const void *value, void *arg), void *arg)
{
	for (int i = 0; i < map->capacity; i++)
	{
		char	   *slot = map_slot((SdpStateMap *) map, i);

		if (slot[0] == SLOT_USED)
			visit(slot + 1, slot + 1 + SDP_STATE_MEMBER_MAX, arg);
	}
}

/* ---- timers ---- */

bool
sdp_state_add_timer(SdpKeyState *ks, SdpTimeKind kind, int64 when, int64 tag)
{
	SdpStateEntry *e = ks->entry;

	for (int i = 0; i < e->ntimers; i++)
		if (e->timers[i].kind == kind && e->timers[i].when == when && e->timers[i].tag == tag)
			return false;		/* already pending */
	if (e->ntimers >= SDP_STATE_TIMERS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("key \"%s\" has more than %d pending timers", ks->key, SDP_STATE_TIMERS)));
	e->timers[e->ntimers].kind = kind;
	e->timers[e->ntimers].when = when;
	e->timers[e->ntimers].tag = tag;
	e->ntimers++;
	ks->dirty = true;
	return true;
}

bool
sdp_state_remove_timer(SdpKeyState *ks, SdpTimeKind kind, int64 when, int64 tag)
{
	SdpStateEntry *e = ks->entry;

	if (e == NULL)
		return false;
	for (int i = 0; i < e->ntimers; i++)
	{
		if (e->timers[i].kind == kind && e->timers[i].when == when && e->timers[i].tag == tag)
		{
			e->timers[i] = e->timers[--e->ntimers];
			ks->dirty = true;
			return true;
		}
	}
	return false;
}

/* ---- checkpoints ---- */

/*
 * A key's state as bytes: values, timers, then the map's members and
 * values.  Native byte order: a checkpoint is read back by the same server.
 */
bytea *
sdp_state_serialize(SdpStateStore *store, SdpStateEntry *entry)
{
	StringInfoData buf;
	SdpStateMap *map = DsaPointerIsValid(entry->map) ? dsa_get_address(store->area, entry->map) : NULL;
	int32		value_len = map ? map->value_len : store->map_value_len;
	int32		count = map ? map->count : 0;
	uint32		version = DsaPointerIsValid(entry->ext) ? 2 : 1;
	bytea	   *result;

	initStringInfo(&buf);
	appendBinaryStringInfo(&buf, (char *) &version, sizeof(version));
	appendBinaryStringInfo(&buf, (char *) &entry->values_set, sizeof(entry->values_set));
	appendBinaryStringInfo(&buf, (char *) entry->values, sizeof(entry->values));
	appendBinaryStringInfo(&buf, (char *) &entry->ntimers, sizeof(entry->ntimers));
	appendBinaryStringInfo(&buf, (char *) entry->timers, sizeof(SdpTimer) * entry->ntimers);
	appendBinaryStringInfo(&buf, (char *) &value_len, sizeof(value_len));
	appendBinaryStringInfo(&buf, (char *) &count, sizeof(count));
	if (map)
	{
		for (int i = 0; i < map->capacity; i++)
		{
			char	   *slot = map_slot(map, i);
			uint8		len;

			if (slot[0] != SLOT_USED)
				continue;
			len = (uint8) strlen(slot + 1);
			appendBinaryStringInfo(&buf, (char *) &len, 1);
			appendBinaryStringInfo(&buf, slot + 1, len);
			appendBinaryStringInfo(&buf, slot + 1 + SDP_STATE_MEMBER_MAX, value_len);
		}
	}
	/* version 2: the operator's own state, its length first */
	if (version == 2)
	{
		int32		at = buf.len;
		int32		len = 0;

		Assert(store->ext_ops != NULL);
		appendBinaryStringInfo(&buf, (char *) &len, sizeof(len));
		store->ext_ops->serialize(store, entry, &buf);
		len = buf.len - at - (int32) sizeof(len);
		memcpy(buf.data + at, &len, sizeof(len));
	}
	result = palloc(VARHDRSZ + buf.len);
	SET_VARSIZE(result, VARHDRSZ + buf.len);
	memcpy(VARDATA(result), buf.data, buf.len);
	pfree(buf.data);
	return result;
}

#define READ(dst, n) \
	do { \
		if (pos + (n) > end) \
			ereport(ERROR, \
					(errcode(ERRCODE_DATA_CORRUPTED), \
					 errmsg("checkpointed state of key \"%s\" is truncated", key))); \
		memcpy((dst), pos, (n)); \
		pos += (n); \
	} while (0)

/*
 * The partition that owns a key (see SdpStateEntry.partition), -1 when not
 * known; *found says whether the key has state at all.
 */
int32
sdp_state_key_partition(SdpStateStore *store, const char *key, bool *found)
{
	char		buf[SDP_STATE_KEY_MAX];
	SdpStateEntry *e;
	int32		partition = -1;

	memset(buf, 0, sizeof(buf));
	strlcpy(buf, key, sizeof(buf));
	e = dshash_find(store->table, buf, false);
	*found = (e != NULL && !sdp_state_entry_resting(e));
	if (e)
	{
		if (*found)
			partition = e->partition;
		dshash_release_lock(store->table, e);
	}
	return partition;
}

/* Recreate a key's state from its checkpoint (the worker, at start); partition -1: not known. */
void
sdp_state_restore(SdpStateStore *store, const char *key, int32 partition, bytea *blob)
{
	const char *pos = VARDATA_ANY(blob);
	const char *end = pos + VARSIZE_ANY_EXHDR(blob);
	SdpKeyState ks;
	uint32		version;
	int32		value_len,
				count;
	char	   *value;

	sdp_state_open_key(store, key, true, &ks);
	ks.entry->partition = partition;
	READ(&version, sizeof(version));
	if (version != 1 && version != 2)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("checkpointed state of key \"%s\" has unknown version %u", key, version)));
	READ(&ks.entry->values_set, sizeof(ks.entry->values_set));
	ks.entry->values_set &= ~SDP_ENTRY_RESTING;	/* never checkpointed */
	READ(ks.entry->values, sizeof(ks.entry->values));
	READ(&ks.entry->ntimers, sizeof(ks.entry->ntimers));
	if (ks.entry->ntimers < 0 || ks.entry->ntimers > SDP_STATE_TIMERS)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("checkpointed state of key \"%s\" has %d timers", key, ks.entry->ntimers)));
	READ(ks.entry->timers, sizeof(SdpTimer) * ks.entry->ntimers);
	READ(&value_len, sizeof(value_len));
	READ(&count, sizeof(count));
	if (value_len < 0 || value_len > 1024 * 1024)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("checkpointed state of key \"%s\" has map values of %d bytes", key, value_len)));
	if (count > 0)
		sdp_state_map_reserve(&ks, value_len);
	value = palloc(Max(value_len, 1));
	for (int i = 0; i < count; i++)
	{
		uint8		len;
		char		member[SDP_STATE_MEMBER_MAX];

		READ(&len, 1);
		if (len >= SDP_STATE_MEMBER_MAX)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("checkpointed state of key \"%s\" has a member of %d bytes", key, len)));
		READ(member, len);
		member[len] = '\0';
		READ(value, value_len);
		sdp_state_map_put(&ks, member, value);
	}
	pfree(value);
	if (version == 2)
	{
		int32		len;

		READ(&len, sizeof(len));
		if (len < 0 || pos + len > end || store->ext_ops == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("checkpointed state of key \"%s\" holds an operator's own state of %d bytes, which this operator does not read",
							key, len)));
		store->ext_ops->restore(store, &ks, pos, len);
		pos += len;
	}
	/* restored state is what the checkpoint holds: nothing to write back */
	ks.dirty = false;
	sdp_state_close_key(&ks);
	/* (a restored key with no state at all is deleted, and marked by its name) */
	unmark_dirty(store, key);
}

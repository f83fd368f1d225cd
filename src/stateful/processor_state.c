/*
 * processor_state.c
 *		A processor's state variables for each key, in the flow's state area.
 *
 * The flow's option "state" declares named variables: a value, a list or a
 * map, of any PostgreSQL type.  A key's variables hang off its entry of the
 * state store (SdpStateEntry.ext: a KeyExt), each variable a chunk of the
 * flow's DSA area:
 *
 *	value	ValueChunk: the value's image and when it was written;
 *	list	ListChunk: the elements' images, each with when it was written, in
 *			the order they were appended (so the expired ones come first);
 *	map		MapTable: open addressing over (hash, entry) slots, each entry
 *			(MapEntry) its own chunk: when it was written, the key's image and
 *			the value's.  Keys are equal when their images are.
 *
 * An image is a value as PostgreSQL holds it in memory, detoasted and
 * flattened (an expanded array, say): a pass-by-value type's Datum, a
 * fixed-length type's bytes, a varlena's bytes with their header.  Nothing
 * here interprets it but the type's own functions (output, for checkpoints
 * and sdp_flow_state).  A key's timers are a sorted array of SdpTimer, any
 * number of them.  Everything counts against the flow's state_memory_limit
 * (the area's size limit: sdp_state_allocate raises past it).
 *
 * A variable with a ttl forgets what was written that long ago, in
 * processing time (the batch's clock, sdp_vars_set_clock): a value whole, a
 * list's or a map's entries each.  An expired entry is never returned, and
 * is removed when its variable is next read or written.
 *
 * Locking.  One writer, the flow's worker, which changes a key's variables
 * only while it holds the key's entry lock (dshash's partition lock,
 * sdp_state_open_key): each call here opens the key, does its work and
 * closes it, so no lock is held while the handler that calls it runs (an
 * LWLock holds interrupts off, and a handler may run long).  Readers
 * (sdp_flow_state) hold it shared while they copy what they show.
 *
 * The undo log.  Each change of an attempt at a batch is recorded, with what
 * it replaced, so that a handler that raises leaves no trace in the state:
 * sdp_vars_undo puts back what the changes since a mark replaced (in reverse
 * order); sdp_vars_commit, once the batch has committed, frees what they
 * replaced.  Until then nothing replaced is freed.
 *
 * Checkpoints (SdpStateExtOps): a key's variables as the text forms of their
 * values (their types' output functions), each with its write time, by
 * variable name; a restore reads them back with the input functions.  Text
 * survives pg_dump and pg_upgrade, where an image would carry the OIDs of
 * the types it holds (arrays, composites) that a restore renumbers.  A
 * variable the flow no longer declares is dropped at restore; one it
 * declares anew starts empty.
 */
#include "stateful/processor_state.h"

#include "access/detoast.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#define SDP_VARS_MAGIC		0x53445056	/* "SDPV": the checkpoint format of a key's variables */
#define MAP_MIN_CAPACITY	8

/* ---- what lives in the area ---- */

typedef struct KeyExt
{
	uint32		size;			/* of this chunk */
	int32		nvars;
	int32		ntimers;
	int32		timer_cap;
	int32		key_len;		/* the key's text when the store key is its digest, else 0 */
	dsa_pointer key;			/* char[key_len] */
	dsa_pointer timers;			/* SdpTimer[timer_cap], sorted by (when, kind) */
	dsa_pointer var[FLEXIBLE_ARRAY_MEMBER];	/* per declared variable, InvalidDsaPointer: none */
} KeyExt;

typedef struct ValueChunk
{
	uint32		size;
	int32		len;			/* of the image */
	int64		written_at;
	char		data[FLEXIBLE_ARRAY_MEMBER];
} ValueChunk;

typedef struct ListElem
{
	int64		written_at;
	int32		len;			/* of the image; -1: NULL */
	int32		pad;
	/* the image follows, MAXALIGN'd */
} ListElem;

typedef struct ListChunk
{
	uint32		size;
	int32		count;			/* elements */
	int64		used;			/* bytes of data in use */
	int64		cap;			/* bytes of data */
	char		data[FLEXIBLE_ARRAY_MEMBER];	/* ListElem, image, ListElem, ... */
} ListChunk;

typedef struct MapEntry
{
	uint32		size;
	int32		klen;
	int32		vlen;			/* -1: NULL */
	uint32		hash;
	int64		written_at;
	char		data[FLEXIBLE_ARRAY_MEMBER];	/* key image, then the value's at MAXALIGN(klen) */
} MapEntry;

#define SLOT_EMPTY		0
#define SLOT_USED		1
#define SLOT_DELETED	2

typedef struct MapSlot
{
	uint32		hash;
	uint32		status;
	dsa_pointer entry;
} MapSlot;

typedef struct MapTable
{
	uint32		size;
	int32		capacity;		/* a power of two */
	int32		count;
	int32		tombstones;
	int64		oldest;			/* the earliest write time of an entry (ttl: nothing expired before it) */
	MapSlot		slots[FLEXIBLE_ARRAY_MEMBER];
} MapTable;

/* ---- the undo log ---- */

typedef enum UndoOp
{
	UNDO_VAR,					/* a variable's chunk replaced: old is what it was */
	UNDO_LIST_APPEND,			/* an element appended in place: count and used were these */
	UNDO_MAP_SET,				/* a map key's entry replaced (new) or removed: old is what it was */
	UNDO_TIMER_ADD,
	UNDO_TIMER_DEL,
	UNDO_EXT,					/* the key's ext created */
	UNDO_INPLACE				/* a value or a map entry's value of 8 bytes at most overwritten: a its old
								 * bytes, b its old write time */
} UndoOp;

typedef struct UndoRec
{
	UndoOp		op;
	int32		key;			/* in SdpVars.undo_keys */
	int32		var;
	dsa_pointer old;
	dsa_pointer new;
	int64		a;				/* list: count; timer: when */
	int64		b;				/* list: used; timer: kind */
} UndoRec;

struct SdpVars
{
	SdpStateStore *store;
	int			nvars;
	SdpVarDecl *decls;
	bool		writer;
	TimestampTz now;			/* write time of what is written, and the clock of ttl */

	/* the current key */
	char		store_key[SDP_STATE_KEY_MAX];
	char	   *key_text;		/* when the store key is a digest */
	int32		partition;
	bool		have_key;
	bool		restoring;		/* a checkpoint is read: nothing is dirty, nothing to undo */

	/* the undo log of the attempt */
	MemoryContext undo_cxt;
	UndoRec    *undo;
	int			nundo;
	int			undo_cap;
	char	  **undo_keys;		/* store keys, by index */
	int			nundo_keys;
	int			undo_keys_cap;
	HTAB	   *undo_key_index; /* store key -> index */
	int			cur_undo_key;	/* the current key's index, -1: not looked up yet */

	/* re-indexing a timer whose removal is undone (the operator's timer index) */
	void		(*index_timer) (void *arg, const char *store_key, const SdpTimer *timer, bool add);
	void	   *index_arg;
};

static SdpVars *ext_vars = NULL;	/* the writer's, for the store's ext callbacks */

typedef struct UndoKey
{
	char		key[SDP_STATE_KEY_MAX];
	int			index;
} UndoKey;

/* ---- images ---- */

/* A value's image: its bytes (a varlena detoasted and flattened), *len of them. */
static const char *
image_of(Datum d, int16 typlen, bool typbyval, int32 *len, Datum *keep)
{
	if (typbyval)
	{
		*keep = d;
		*len = sizeof(Datum);
		return (const char *) keep;
	}
	if (typlen > 0)
	{
		*len = typlen;
		return DatumGetPointer(d);
	}
	if (typlen == -1)
	{
		struct varlena *v = PG_DETOAST_DATUM(d);

		*len = VARSIZE(v);
		return (const char *) v;
	}
	*len = (int32) strlen(DatumGetCString(d)) + 1;
	return DatumGetCString(d);
}

/* A Datum of an image, in CurrentMemoryContext (the area is not the caller's to keep pointers into). */
static Datum
datum_of(const char *image, int32 len, bool typbyval)
{
	char	   *copy;

	if (typbyval)
	{
		Datum		d;

		memcpy(&d, image, sizeof(Datum));
		return d;
	}
	copy = palloc(len);
	memcpy(copy, image, len);
	return PointerGetDatum(copy);
}

/* ---- allocation ---- */

static void *
addr(SdpVars *vars, dsa_pointer p)
{
	return dsa_get_address(vars->store->area, p);
}

static dsa_pointer
chunk_allocate(SdpVars *vars, size_t size)
{
	dsa_pointer p;

	/* a chunk's size is kept in 32 bits, and dsa_allocate takes no more without DSA_ALLOC_HUGE */
	if (size > MaxAllocSize)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a processor state variable of one key would take more than %zu bytes", (size_t) MaxAllocSize),
				 errhint("Keep a key's lists and maps smaller, or spread them over more keys.")));
	p = sdp_state_allocate(vars->store, size);

	*(uint32 *) addr(vars, p) = (uint32) size;
	vars->store->ext_bytes += size;
	return p;
}

static void
chunk_free(SdpVars *vars, dsa_pointer p)
{
	if (!DsaPointerIsValid(p))
		return;
	vars->store->ext_bytes -= *(uint32 *) addr(vars, p);
	dsa_free(vars->store->area, p);
}

/* A variable's chunk and everything it points to. */
static void
var_free(SdpVars *vars, int var, dsa_pointer p)
{
	if (!DsaPointerIsValid(p))
		return;
	if (vars->decls[var].kind == SDP_VAR_MAP)
	{
		MapTable   *t = addr(vars, p);

		for (int i = 0; i < t->capacity; i++)
			if (t->slots[i].status == SLOT_USED)
				chunk_free(vars, t->slots[i].entry);
	}
	chunk_free(vars, p);
}

/* ---- keys ---- */

SdpVars *
sdp_vars_create(SdpStateStore *store, SdpVarDecl *decls, int ndecls, bool writer)
{
	/* a reader's lasts its call (sdp_flow_state); the writer's, its worker */
	MemoryContext cxt = writer ? TopMemoryContext : CurrentMemoryContext;
	SdpVars    *vars = MemoryContextAllocZero(cxt, sizeof(SdpVars));

	vars->store = store;
	vars->decls = decls;
	vars->nvars = ndecls;
	vars->writer = writer;
	vars->now = GetCurrentTimestamp();
	for (int i = 0; i < ndecls; i++)
	{
		SdpVarDecl *d = &decls[i];
		Oid			func;
		bool		varlena;

		get_typlenbyval(d->type, &d->typlen, &d->typbyval);
		getTypeOutputInfo(d->type, &func, &varlena);
		fmgr_info_cxt(func, &d->out, cxt);
		getTypeInputInfo(d->type, &func, &d->ioparam);
		fmgr_info_cxt(func, &d->in, cxt);
		if (d->kind == SDP_VAR_MAP)
		{
			get_typlenbyval(d->key_type, &d->key_typlen, &d->key_typbyval);
			getTypeOutputInfo(d->key_type, &func, &varlena);
			fmgr_info_cxt(func, &d->key_out, cxt);
			getTypeInputInfo(d->key_type, &func, &d->key_ioparam);
			fmgr_info_cxt(func, &d->key_in, cxt);
		}
	}
	if (writer)
	{
		HASHCTL		ctl;

		vars->undo_cxt = AllocSetContextCreate(TopMemoryContext, "sdp processor undo", ALLOCSET_DEFAULT_SIZES);
		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = SDP_STATE_KEY_MAX;
		ctl.entrysize = sizeof(UndoKey);
		ctl.hcxt = vars->undo_cxt;
		vars->undo_key_index = hash_create("sdp undo keys", 64, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
		vars->cur_undo_key = -1;
		ext_vars = vars;
		sdp_state_set_ext_ops(store, sdp_vars_ext_ops());
	}
	return vars;
}

int
sdp_vars_find(SdpVars *vars, const char *name)
{
	for (int i = 0; i < vars->nvars; i++)
		if (strcmp(vars->decls[i].name, name) == 0)
			return i;
	return -1;
}

const SdpVarDecl *
sdp_vars_decl(SdpVars *vars, int var)
{
	return &vars->decls[var];
}

void
sdp_vars_set_clock(SdpVars *vars, TimestampTz now)
{
	vars->now = now;
}

void
sdp_vars_set_timer_indexer(SdpVars *vars, void (*index) (void *arg, const char *store_key, const SdpTimer *timer, bool add),
						   void *arg)
{
	vars->index_timer = index;
	vars->index_arg = arg;
}

/* The key the state calls act on: its store key, and its text when that is a digest. */
void
sdp_vars_set_key(SdpVars *vars, const char *store_key, const char *key_text, int32 partition)
{
	strlcpy(vars->store_key, store_key, SDP_STATE_KEY_MAX);
	if (vars->key_text)
		pfree(vars->key_text);
	vars->key_text = sdp_state_key_is_digest(store_key) ? MemoryContextStrdup(TopMemoryContext, key_text) : NULL;
	vars->partition = partition;
	vars->have_key = true;
	vars->cur_undo_key = -1;
}

void
sdp_vars_clear_key(SdpVars *vars)
{
	vars->have_key = false;
}

/* A key's text (a reader): the store key, or the text kept in its ext when that is a digest. */
const char *
sdp_vars_key_text(SdpVars *vars, SdpStateEntry *entry, const char *store_key)
{
	KeyExt	   *ext;

	if (!sdp_state_key_is_digest(store_key) || !DsaPointerIsValid(entry->ext))
		return store_key;
	ext = addr(vars, entry->ext);
	if (ext->key_len <= 0)
		return store_key;
	return pnstrdup((char *) addr(vars, ext->key) + MAXALIGN(sizeof(uint32)), ext->key_len);
}

static int
undo_key_index(SdpVars *vars)
{
	UndoKey    *k;
	bool		found;

	if (vars->cur_undo_key >= 0)
		return vars->cur_undo_key;
	k = hash_search(vars->undo_key_index, vars->store_key, HASH_ENTER, &found);
	if (!found)
	{
		if (vars->nundo_keys == vars->undo_keys_cap)
		{
			vars->undo_keys_cap = Max(vars->undo_keys_cap * 2, 64);
			vars->undo_keys = vars->undo_keys
				? repalloc(vars->undo_keys, sizeof(char *) * vars->undo_keys_cap)
				: MemoryContextAlloc(vars->undo_cxt, sizeof(char *) * vars->undo_keys_cap);
		}
		vars->undo_keys[vars->nundo_keys] = MemoryContextStrdup(vars->undo_cxt, vars->store_key);
		k->index = vars->nundo_keys++;
	}
	vars->cur_undo_key = k->index;
	return k->index;
}

static void
undo_push(SdpVars *vars, UndoOp op, int var, dsa_pointer old, dsa_pointer new, int64 a, int64 b)
{
	UndoRec    *r;

	if (vars->nundo == vars->undo_cap)
	{
		vars->undo_cap = Max(vars->undo_cap * 2, 256);
		vars->undo = vars->undo
			? repalloc_huge(vars->undo, sizeof(UndoRec) * vars->undo_cap)
			: MemoryContextAllocHuge(vars->undo_cxt, sizeof(UndoRec) * vars->undo_cap);
	}
	r = &vars->undo[vars->nundo++];
	r->op = op;
	r->key = undo_key_index(vars);
	r->var = var;
	r->old = old;
	r->new = new;
	r->a = a;
	r->b = b;
}

/*
 * Open the current key (the writer, exclusively) and its ext: created when
 * create says so and the key has none.  NULL when the key has no variables
 * and create is false (*ks is then closed).
 */
static KeyExt *
open_ext(SdpVars *vars, SdpKeyState *ks, bool create)
{
	SdpStateEntry *e;

	if (!vars->have_key)
		elog(ERROR, "no processor key is current");
	sdp_state_open_key(vars->store, vars->store_key, create, ks);
	e = ks->entry;
	if (e == NULL)
		return NULL;
	if (e->partition < 0 && vars->partition >= 0)
	{
		/* a key's partition is its first row's (one the initial state made has none until then) */
		e->partition = vars->partition;
		ks->dirty = !vars->restoring;
	}
	if (!DsaPointerIsValid(e->ext))
	{
		KeyExt	   *ext;
		dsa_pointer p;

		if (!create)
		{
			sdp_state_close_key(ks);
			return NULL;
		}
		p = chunk_allocate(vars, offsetof(KeyExt, var) + sizeof(dsa_pointer) * vars->nvars);
		ext = addr(vars, p);
		ext->nvars = vars->nvars;
		ext->key = InvalidDsaPointer;
		ext->timers = InvalidDsaPointer;
		for (int i = 0; i < vars->nvars; i++)
			ext->var[i] = InvalidDsaPointer;
		if (vars->key_text)
		{
			int			len = strlen(vars->key_text);

			ext->key = chunk_allocate(vars, MAXALIGN(sizeof(uint32)) + len);
			ext = addr(vars, p);
			memcpy((char *) addr(vars, ext->key) + MAXALIGN(sizeof(uint32)), vars->key_text, len);
			ext->key_len = len;
		}
		e->ext = p;
		undo_push(vars, UNDO_EXT, -1, InvalidDsaPointer, p, 0, 0);
	}
	else if (vars->key_text)
	{
		/* a digest names one key only: two whose digests meet are told apart here, not merged */
		KeyExt	   *ext = addr(vars, e->ext);

		if (ext->key_len != (int32) strlen(vars->key_text) ||
			memcmp((char *) addr(vars, ext->key) + MAXALIGN(sizeof(uint32)), vars->key_text, ext->key_len) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("two processor keys have one digest (\"%.40s...\")", vars->key_text)));
	}
	return addr(vars, e->ext);
}

/* The key's ext is empty: freed, so that the key rests or goes as any key without state. */
static void
release_ext_if_empty(SdpVars *vars, SdpKeyState *ks)
{
	SdpStateEntry *e = ks->entry;
	KeyExt	   *ext;

	if (e == NULL || !DsaPointerIsValid(e->ext))
		return;
	ext = addr(vars, e->ext);
	if (ext->ntimers > 0)
		return;
	for (int i = 0; i < ext->nvars; i++)
		if (DsaPointerIsValid(ext->var[i]))
			return;
	/* freed at commit (the undo log may bring it back, and the key's partition with it) */
	undo_push(vars, UNDO_EXT, -1, e->ext, InvalidDsaPointer, e->partition, 0);
	e->ext = InvalidDsaPointer;
}

static void
close_ext(SdpVars *vars, SdpKeyState *ks, bool changed)
{
	if (changed)
	{
		release_ext_if_empty(vars, ks);
		ks->dirty = !vars->restoring;
	}
	sdp_state_close_key(ks);
}

/* Replace a variable's chunk, keeping the old one for the undo log. */
static void
var_replace(SdpVars *vars, KeyExt *ext, int var, dsa_pointer p)
{
	undo_push(vars, UNDO_VAR, var, ext->var[var], p, 0, 0);
	ext->var[var] = p;
}

static bool
expired(SdpVars *vars, int var, int64 written_at)
{
	int64		ttl = vars->decls[var].ttl_us;

	return ttl > 0 && written_at + ttl <= vars->now;
}

/* ---- values ---- */

bool
sdp_vars_get_value(SdpVars *vars, int var, Datum *value)
{
	SdpKeyState ks;
	KeyExt	   *ext = open_ext(vars, &ks, false);
	ValueChunk *c;
	bool		found = false;

	if (ext == NULL)
		return false;
	if (DsaPointerIsValid(ext->var[var]))
	{
		c = addr(vars, ext->var[var]);
		if (expired(vars, var, c->written_at))
		{
			var_replace(vars, ext, var, InvalidDsaPointer);
			close_ext(vars, &ks, true);
			return false;
		}
		*value = datum_of(c->data, c->len, vars->decls[var].typbyval);
		found = true;
	}
	close_ext(vars, &ks, false);
	return found;
}

/*
 * Overwrite an image of 8 bytes at most where it lies (the common case of a
 * value or a map entry written again: a timestamp, a counter), its old bytes
 * and write time in the undo log, instead of a new chunk.
 */
static void
overwrite(SdpVars *vars, int var, dsa_pointer chunk, int64 *written_at, char *data, const char *image, int32 len)
{
	int64		old = 0;

	Assert(len <= (int32) sizeof(int64));
	memcpy(&old, data, len);
	undo_push(vars, UNDO_INPLACE, var, InvalidDsaPointer, chunk, old, *written_at);
	vars->undo[vars->nundo - 1].b = *written_at;
	memcpy(data, image, len);
	*written_at = vars->now;
}

void
sdp_vars_set_value(SdpVars *vars, int var, Datum value)
{
	const SdpVarDecl *d = &vars->decls[var];
	Datum		keep;
	int32		len;
	const char *image = image_of(value, d->typlen, d->typbyval, &len, &keep);
	SdpKeyState ks;
	KeyExt	   *ext = open_ext(vars, &ks, true);
	dsa_pointer p;
	ValueChunk *c;

	if (DsaPointerIsValid(ext->var[var]) && len <= (int32) sizeof(int64) &&
		((ValueChunk *) addr(vars, ext->var[var]))->len == len)
	{
		c = addr(vars, ext->var[var]);
		overwrite(vars, var, ext->var[var], &c->written_at, c->data, image, len);
		close_ext(vars, &ks, true);
		return;
	}
	p = chunk_allocate(vars, offsetof(ValueChunk, data) + len);

	ext = addr(vars, ks.entry->ext);	/* the allocation may have mapped a new segment */
	c = addr(vars, p);
	c->len = len;
	c->written_at = vars->now;
	memcpy(c->data, image, len);
	var_replace(vars, ext, var, p);
	close_ext(vars, &ks, true);
}

void
sdp_vars_clear(SdpVars *vars, int var)
{
	SdpKeyState ks;
	KeyExt	   *ext = open_ext(vars, &ks, false);

	if (ext == NULL)
		return;
	if (!DsaPointerIsValid(ext->var[var]))
	{
		close_ext(vars, &ks, false);
		return;
	}
	var_replace(vars, ext, var, InvalidDsaPointer);
	close_ext(vars, &ks, true);
}

/* ---- lists ---- */

static ListElem *
list_elem(ListChunk *c, int64 at)
{
	return (ListElem *) (c->data + at);
}

static int64
elem_size(int32 len)
{
	return MAXALIGN(sizeof(ListElem)) + MAXALIGN(Max(len, 0));
}

/* A list's chunk without its expired elements (they come first), replacing it; the chunk to use. */
static ListChunk *
list_sweep(SdpVars *vars, KeyExt **ext, SdpKeyState *ks, int var, bool *changed)
{
	ListChunk  *c = addr(vars, (*ext)->var[var]);
	int64		at = 0;
	int			n = 0;
	dsa_pointer p;
	ListChunk  *nc;

	if (vars->decls[var].ttl_us <= 0)
		return c;
	while (n < c->count && expired(vars, var, list_elem(c, at)->written_at))
	{
		at += elem_size(list_elem(c, at)->len);
		n++;
	}
	if (n == 0)
		return c;
	*changed = true;
	if (n == c->count)
	{
		var_replace(vars, *ext, var, InvalidDsaPointer);
		return NULL;
	}
	p = chunk_allocate(vars, offsetof(ListChunk, data) + (c->used - at));
	*ext = addr(vars, ks->entry->ext);
	c = addr(vars, (*ext)->var[var]);
	nc = addr(vars, p);
	nc->count = c->count - n;
	nc->used = c->used - at;
	nc->cap = c->used - at;
	memcpy(nc->data, c->data + at, nc->used);
	var_replace(vars, *ext, var, p);
	return nc;
}

int
sdp_vars_list(SdpVars *vars, int var, Datum **elems)
{
	SdpKeyState ks;
	KeyExt	   *ext = open_ext(vars, &ks, false);
	ListChunk  *c;
	bool		changed = false;
	int64		at = 0;
	int			n;

	*elems = NULL;
	if (ext == NULL)
		return 0;
	if (!DsaPointerIsValid(ext->var[var]) || (c = list_sweep(vars, &ext, &ks, var, &changed)) == NULL)
	{
		close_ext(vars, &ks, changed);
		return 0;
	}
	n = c->count;
	*elems = palloc(sizeof(Datum) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		ListElem   *el = list_elem(c, at);

		(*elems)[i] = datum_of((char *) el + MAXALIGN(sizeof(ListElem)), el->len, vars->decls[var].typbyval);
		at += elem_size(el->len);
	}
	close_ext(vars, &ks, changed);
	return n;
}

void
sdp_vars_list_append(SdpVars *vars, int var, Datum value)
{
	const SdpVarDecl *d = &vars->decls[var];
	Datum		keep;
	int32		len;
	const char *image = image_of(value, d->typlen, d->typbyval, &len, &keep);
	SdpKeyState ks;
	KeyExt	   *ext = open_ext(vars, &ks, true);
	ListChunk  *c = NULL;
	bool		changed = false;
	int64		need = elem_size(len);
	ListElem   *el;

	if (DsaPointerIsValid(ext->var[var]))
		c = list_sweep(vars, &ext, &ks, var, &changed);
	if (c == NULL || c->used + need > c->cap)
	{
		/* a larger chunk: twice the data, and room for this one */
		int64		used = c ? c->used : 0;
		int64		cap = Max(used * 2, used + need);
		dsa_pointer p;
		ListChunk  *nc;

		cap = Max(cap, 256);
		if (offsetof(ListChunk, data) + cap > MaxAllocSize)
		{
			/* the last doubling: as much as a chunk may hold */
			cap = MaxAllocSize - offsetof(ListChunk, data);
			if (used + need > cap)
				ereport(ERROR,
						(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
						 errmsg("list \"%s\" would be larger than %zu bytes", d->name, (size_t) MaxAllocSize)));
		}
		p = chunk_allocate(vars, offsetof(ListChunk, data) + cap);
		ext = addr(vars, ks.entry->ext);
		nc = addr(vars, p);
		if (DsaPointerIsValid(ext->var[var]))
		{
			c = addr(vars, ext->var[var]);
			memcpy(nc->data, c->data, c->used);
			nc->count = c->count;
			nc->used = c->used;
		}
		nc->cap = cap;
		var_replace(vars, ext, var, p);
		c = nc;
	}
	else
		undo_push(vars, UNDO_LIST_APPEND, var, InvalidDsaPointer, ext->var[var], c->count, c->used);
	el = list_elem(c, c->used);
	el->written_at = vars->now;
	el->len = len;
	memcpy((char *) el + MAXALIGN(sizeof(ListElem)), image, len);
	c->used += need;
	c->count++;
	close_ext(vars, &ks, true);
}

void
sdp_vars_set_list(SdpVars *vars, int var, Datum *elems, bool *nulls, int n)
{
	const SdpVarDecl *d = &vars->decls[var];
	int64		total = 0;
	SdpKeyState ks;
	KeyExt	   *ext;
	dsa_pointer p;
	ListChunk  *c;
	int32	   *lens = palloc(sizeof(int32) * Max(n, 1));
	const char **images = palloc(sizeof(char *) * Max(n, 1));
	Datum	   *keep = palloc(sizeof(Datum) * Max(n, 1));
	int			m = 0;

	for (int i = 0; i < n; i++)
	{
		if (nulls && nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("list \"%s\" cannot hold a NULL element", d->name)));
		images[m] = image_of(elems[i], d->typlen, d->typbyval, &lens[m], &keep[m]);
		total += elem_size(lens[m]);
		m++;
	}
	ext = open_ext(vars, &ks, m > 0);
	if (ext == NULL)
		return;
	if (m == 0)
	{
		if (DsaPointerIsValid(ext->var[var]))
			var_replace(vars, ext, var, InvalidDsaPointer);
		close_ext(vars, &ks, true);
		return;
	}
	p = chunk_allocate(vars, offsetof(ListChunk, data) + total);
	ext = addr(vars, ks.entry->ext);
	c = addr(vars, p);
	c->cap = total;
	for (int i = 0; i < m; i++)
	{
		ListElem   *el = list_elem(c, c->used);

		el->written_at = vars->now;
		el->len = lens[i];
		memcpy((char *) el + MAXALIGN(sizeof(ListElem)), images[i], lens[i]);
		c->used += elem_size(lens[i]);
		c->count++;
	}
	var_replace(vars, ext, var, p);
	close_ext(vars, &ks, true);
}

/* ---- maps ---- */

static MapEntry *
map_entry(SdpVars *vars, MapSlot *s)
{
	return addr(vars, s->entry);
}

/* The slot of a key's image, or (with insert) where it goes; -1: none. */
static int
map_find(SdpVars *vars, MapTable *t, uint32 hash, const char *image, int32 len, bool insert)
{
	uint32		mask = (uint32) t->capacity - 1;
	int			first_free = -1;

	for (uint32 i = hash & mask, n = 0; n < (uint32) t->capacity; i = (i + 1) & mask, n++)
	{
		MapSlot    *s = &t->slots[i];

		if (s->status == SLOT_EMPTY)
			return insert ? (first_free >= 0 ? first_free : (int) i) : -1;
		if (s->status == SLOT_DELETED)
		{
			if (first_free < 0)
				first_free = (int) i;
			continue;
		}
		if (s->hash == hash)
		{
			MapEntry   *e = map_entry(vars, s);

			if (e->klen == len && memcmp(e->data, image, len) == 0)
				return (int) i;
		}
	}
	return insert ? first_free : -1;
}

/* A map's table with room for one more (rebuilt larger, or without tombstones), replacing it. */
static MapTable *
map_reserve(SdpVars *vars, KeyExt **ext, SdpKeyState *ks, int var, int capacity)
{
	MapTable   *old = DsaPointerIsValid((*ext)->var[var]) ? addr(vars, (*ext)->var[var]) : NULL;
	dsa_pointer p;
	MapTable   *t;

	if (old && capacity == old->capacity)
		return old;
	p = chunk_allocate(vars, offsetof(MapTable, slots) + sizeof(MapSlot) * capacity);
	*ext = addr(vars, ks->entry->ext);
	old = DsaPointerIsValid((*ext)->var[var]) ? addr(vars, (*ext)->var[var]) : NULL;
	t = addr(vars, p);
	t->capacity = capacity;
	t->oldest = old ? old->oldest : PG_INT64_MAX;
	if (old)
	{
		for (int i = 0; i < old->capacity; i++)
		{
			MapSlot    *s = &old->slots[i];

			if (s->status == SLOT_USED)
			{
				uint32		mask = (uint32) capacity - 1;
				uint32		j = s->hash & mask;

				while (t->slots[j].status != SLOT_EMPTY)
					j = (j + 1) & mask;
				t->slots[j] = *s;
				t->count++;
			}
		}
		/* the old table's entries are the new table's: the old table alone goes (no undo: the entries are the same) */
		chunk_free(vars, (*ext)->var[var]);
	}
	(*ext)->var[var] = p;
	return t;
}

static int
map_capacity_for(MapTable *t)
{
	int			cap = t ? t->capacity : MAP_MIN_CAPACITY;

	if (t == NULL)
		return cap;
	if ((t->count + 1) * 4 > cap * 3)
		return cap * 2;
	if ((t->count + t->tombstones + 1) * 4 > cap * 3)
		return cap;				/* the same size, without its tombstones */
	return -1;
}

/*
 * Set the key of image to entry (InvalidDsaPointer: remove it) in the map,
 * with no undo record and nothing freed: what it replaces is returned.
 */
static dsa_pointer
map_set(SdpVars *vars, KeyExt **ext, SdpKeyState *ks, int var, uint32 hash, const char *image, int32 len,
		dsa_pointer entry)
{
	MapTable   *t = DsaPointerIsValid((*ext)->var[var]) ? addr(vars, (*ext)->var[var]) : NULL;
	int			i;
	dsa_pointer was = InvalidDsaPointer;

	if (!DsaPointerIsValid(entry))
	{
		if (t == NULL || (i = map_find(vars, t, hash, image, len, false)) < 0)
			return InvalidDsaPointer;
		was = t->slots[i].entry;
		t->slots[i].status = SLOT_DELETED;
		t->slots[i].entry = InvalidDsaPointer;
		t->count--;
		t->tombstones++;
		if (t->count == 0)
		{
			chunk_free(vars, (*ext)->var[var]);
			(*ext)->var[var] = InvalidDsaPointer;
		}
		return was;
	}
	if (t == NULL || map_capacity_for(t) > 0)
	{
		int			cap = map_capacity_for(t);

		t = map_reserve(vars, ext, ks, var, cap > 0 ? cap : t->capacity);
	}
	i = map_find(vars, t, hash, image, len, true);
	if (t->slots[i].status == SLOT_USED)
		was = t->slots[i].entry;
	else
	{
		if (t->slots[i].status == SLOT_DELETED)
			t->tombstones--;
		t->count++;
	}
	t->slots[i].status = SLOT_USED;
	t->slots[i].hash = hash;
	t->slots[i].entry = entry;
	{
		MapEntry   *e = addr(vars, entry);

		if (e->written_at < t->oldest)
			t->oldest = e->written_at;
	}
	return was;
}

/* Remove the map's expired entries (when its oldest may have): the map to use, or NULL when none is left. */
static MapTable *
map_sweep(SdpVars *vars, KeyExt **ext, SdpKeyState *ks, int var, bool *changed)
{
	MapTable   *t = addr(vars, (*ext)->var[var]);
	int64		oldest = PG_INT64_MAX;

	if (vars->decls[var].ttl_us <= 0 || !expired(vars, var, t->oldest))
		return t;
	for (int i = 0; i < t->capacity && DsaPointerIsValid((*ext)->var[var]); i++)
	{
		MapSlot    *s = &t->slots[i];
		MapEntry   *e;

		if (s->status != SLOT_USED)
			continue;
		e = map_entry(vars, s);
		if (expired(vars, var, e->written_at))
		{
			dsa_pointer was = s->entry;

			s->status = SLOT_DELETED;
			s->entry = InvalidDsaPointer;
			t->count--;
			t->tombstones++;
			undo_push(vars, UNDO_MAP_SET, var, was, InvalidDsaPointer, 0, 0);
			*changed = true;
		}
		else if (e->written_at < oldest)
			oldest = e->written_at;
	}
	if (t->count == 0)
	{
		chunk_free(vars, (*ext)->var[var]);
		(*ext)->var[var] = InvalidDsaPointer;
		return NULL;
	}
	t->oldest = oldest;
	return t;
}

static uint32
image_hash(const char *image, int32 len)
{
	return hash_bytes((const unsigned char *) image, len);
}

bool
sdp_vars_map_get(SdpVars *vars, int var, Datum key, Datum *value, bool *isnull)
{
	const SdpVarDecl *d = &vars->decls[var];
	Datum		keep;
	int32		len;
	const char *image = image_of(key, d->key_typlen, d->key_typbyval, &len, &keep);
	SdpKeyState ks;
	KeyExt	   *ext = open_ext(vars, &ks, false);
	MapTable   *t;
	bool		changed = false;
	int			i;
	bool		found = false;

	if (ext == NULL)
		return false;
	if (DsaPointerIsValid(ext->var[var]) && (t = map_sweep(vars, &ext, &ks, var, &changed)) != NULL &&
		(i = map_find(vars, t, image_hash(image, len), image, len, false)) >= 0)
	{
		MapEntry   *e = map_entry(vars, &t->slots[i]);

		*isnull = e->vlen < 0;
		if (!*isnull)
			*value = datum_of(e->data + MAXALIGN(e->klen), e->vlen, d->typbyval);
		found = true;
	}
	close_ext(vars, &ks, changed);
	return found;
}

void
sdp_vars_map_put(SdpVars *vars, int var, Datum key, Datum value, bool isnull)
{
	const SdpVarDecl *d = &vars->decls[var];
	Datum		kkeep,
				vkeep;
	int32		klen,
				vlen = -1;
	const char *kimage = image_of(key, d->key_typlen, d->key_typbyval, &klen, &kkeep);
	const char *vimage = isnull ? NULL : image_of(value, d->typlen, d->typbyval, &vlen, &vkeep);
	uint32		hash = image_hash(kimage, klen);
	SdpKeyState ks;
	KeyExt	   *ext = open_ext(vars, &ks, true);
	bool		changed = true;
	dsa_pointer p;
	MapEntry   *e;
	dsa_pointer was;

	if (DsaPointerIsValid(ext->var[var]))
	{
		MapTable   *t = map_sweep(vars, &ext, &ks, var, &changed);
		int			i;

		if (t != NULL && vlen >= 0 && vlen <= (int32) sizeof(int64) &&
			(i = map_find(vars, t, hash, kimage, klen, false)) >= 0 &&
			map_entry(vars, &t->slots[i])->vlen == vlen)
		{
			MapEntry   *old = map_entry(vars, &t->slots[i]);

			overwrite(vars, var, t->slots[i].entry, &old->written_at, old->data + MAXALIGN(old->klen), vimage, vlen);
			close_ext(vars, &ks, true);
			return;
		}
	}
	p = chunk_allocate(vars, offsetof(MapEntry, data) + MAXALIGN(klen) + Max(vlen, 0));
	ext = addr(vars, ks.entry->ext);
	e = addr(vars, p);
	e->klen = klen;
	e->vlen = vlen;
	e->hash = hash;
	e->written_at = vars->now;
	memcpy(e->data, kimage, klen);
	if (vlen > 0)
		memcpy(e->data + MAXALIGN(klen), vimage, vlen);
	was = map_set(vars, &ext, &ks, var, hash, kimage, klen, p);
	undo_push(vars, UNDO_MAP_SET, var, was, p, 0, 0);
	close_ext(vars, &ks, true);
}

bool
sdp_vars_map_remove(SdpVars *vars, int var, Datum key)
{
	const SdpVarDecl *d = &vars->decls[var];
	Datum		keep;
	int32		len;
	const char *image = image_of(key, d->key_typlen, d->key_typbyval, &len, &keep);
	SdpKeyState ks;
	KeyExt	   *ext = open_ext(vars, &ks, false);
	bool		changed = false;
	dsa_pointer was = InvalidDsaPointer;

	if (ext == NULL)
		return false;
	if (DsaPointerIsValid(ext->var[var]) && map_sweep(vars, &ext, &ks, var, &changed) != NULL)
	{
		was = map_set(vars, &ext, &ks, var, image_hash(image, len), image, len, InvalidDsaPointer);
		if (DsaPointerIsValid(was))
		{
			undo_push(vars, UNDO_MAP_SET, var, was, InvalidDsaPointer, 0, 0);
			changed = true;
		}
	}
	close_ext(vars, &ks, changed);
	return DsaPointerIsValid(was);
}

int64
sdp_vars_map_count(SdpVars *vars, int var)
{
	SdpKeyState ks;
	KeyExt	   *ext = open_ext(vars, &ks, false);
	MapTable   *t;
	bool		changed = false;
	int64		n = 0;

	if (ext == NULL)
		return 0;
	if (DsaPointerIsValid(ext->var[var]) && (t = map_sweep(vars, &ext, &ks, var, &changed)) != NULL)
		n = t->count;
	close_ext(vars, &ks, changed);
	return n;
}

int
sdp_vars_map_entries(SdpVars *vars, int var, Datum **keys, Datum **values, bool **nulls)
{
	const SdpVarDecl *d = &vars->decls[var];
	SdpKeyState ks;
	KeyExt	   *ext = open_ext(vars, &ks, false);
	MapTable   *t;
	bool		changed = false;
	int			n = 0;

	*keys = NULL;
	*values = NULL;
	*nulls = NULL;
	if (ext == NULL)
		return 0;
	if (DsaPointerIsValid(ext->var[var]) && (t = map_sweep(vars, &ext, &ks, var, &changed)) != NULL)
	{
		*keys = palloc(sizeof(Datum) * t->count);
		*values = palloc(sizeof(Datum) * t->count);
		*nulls = palloc(sizeof(bool) * t->count);
		for (int i = 0; i < t->capacity; i++)
		{
			MapEntry   *e;

			if (t->slots[i].status != SLOT_USED)
				continue;
			e = map_entry(vars, &t->slots[i]);
			(*keys)[n] = datum_of(e->data, e->klen, d->key_typbyval);
			(*nulls)[n] = e->vlen < 0;
			(*values)[n] = e->vlen < 0 ? (Datum) 0 : datum_of(e->data + MAXALIGN(e->klen), e->vlen, d->typbyval);
			n++;
		}
	}
	close_ext(vars, &ks, changed);
	return n;
}

/* ---- timers ---- */

static int
timer_cmp(const SdpTimer *a, TimestampTz when, int kind)
{
	if (a->when != when)
		return a->when < when ? -1 : 1;
	return a->kind - kind;
}

/* Where the timer is in the key's sorted array, or where it goes (*found says which). */
static int
timer_find(SdpTimer *t, int n, SdpTimeKind kind, TimestampTz at, bool *found)
{
	int			lo = 0,
				hi = n;

	while (lo < hi)
	{
		int			mid = (lo + hi) / 2;

		if (timer_cmp(&t[mid], at, kind) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = lo < n && timer_cmp(&t[lo], at, kind) == 0;
	return lo;
}

static SdpTimer *
timers_of(SdpVars *vars, KeyExt *ext)
{
	return DsaPointerIsValid(ext->timers)
		? (SdpTimer *) ((char *) addr(vars, ext->timers) + MAXALIGN(sizeof(uint32))) : NULL;
}

/* Add a timer to the open key's ext (no undo record): false when it was there. */
static bool
timer_insert(SdpVars *vars, KeyExt **ext, SdpKeyState *ks, SdpTimeKind kind, TimestampTz at)
{
	SdpTimer   *t = timers_of(vars, *ext);
	bool		found;
	int			i = t ? timer_find(t, (*ext)->ntimers, kind, at, &found) : 0;

	if (t && found)
		return false;
	if ((*ext)->ntimers == (*ext)->timer_cap)
	{
		int			cap = Max((*ext)->timer_cap * 2, 4);
		dsa_pointer p = chunk_allocate(vars, MAXALIGN(sizeof(uint32)) + sizeof(SdpTimer) * cap);

		*ext = addr(vars, ks->entry->ext);
		if ((*ext)->ntimers > 0)
			memcpy((char *) addr(vars, p) + MAXALIGN(sizeof(uint32)),
				   (char *) addr(vars, (*ext)->timers) + MAXALIGN(sizeof(uint32)),
				   sizeof(SdpTimer) * (*ext)->ntimers);
		chunk_free(vars, (*ext)->timers);
		(*ext)->timers = p;
		(*ext)->timer_cap = cap;
	}
	t = (SdpTimer *) ((char *) addr(vars, (*ext)->timers) + MAXALIGN(sizeof(uint32)));
	memmove(&t[i + 1], &t[i], sizeof(SdpTimer) * ((*ext)->ntimers - i));
	t[i].when = at;
	t[i].kind = kind;
	t[i].tag = 0;
	(*ext)->ntimers++;
	return true;
}


/* Remove a timer from the open key's ext (no undo record): false when it was not there. */
static bool
timer_remove(SdpVars *vars, KeyExt *ext, SdpTimeKind kind, TimestampTz at)
{
	SdpTimer   *t = timers_of(vars, ext);
	bool		found;
	int			i;

	if (t == NULL)
		return false;
	i = timer_find(t, ext->ntimers, kind, at, &found);
	if (!found)
		return false;
	memmove(&t[i], &t[i + 1], sizeof(SdpTimer) * (ext->ntimers - i - 1));
	ext->ntimers--;
	if (ext->ntimers == 0)
	{
		chunk_free(vars, ext->timers);
		ext->timers = InvalidDsaPointer;
		ext->timer_cap = 0;
	}
	return true;
}

bool
sdp_vars_add_timer(SdpVars *vars, SdpTimeKind kind, TimestampTz at)
{
	SdpKeyState ks;
	KeyExt	   *ext = open_ext(vars, &ks, true);
	bool		added = timer_insert(vars, &ext, &ks, kind, at);

	if (added)
	{
		SdpTimer	timer;

		undo_push(vars, UNDO_TIMER_ADD, -1, InvalidDsaPointer, InvalidDsaPointer, at, kind);
		timer.when = at;
		timer.kind = kind;
		timer.tag = 0;
		if (vars->index_timer)
			vars->index_timer(vars->index_arg, vars->store_key, &timer, true);
	}
	close_ext(vars, &ks, added);
	return added;
}

bool
sdp_vars_delete_timer(SdpVars *vars, SdpTimeKind kind, TimestampTz at)
{
	SdpKeyState ks;
	KeyExt	   *ext = open_ext(vars, &ks, false);
	bool		removed;

	if (ext == NULL)
		return false;
	removed = timer_remove(vars, ext, kind, at);
	if (removed)
		undo_push(vars, UNDO_TIMER_DEL, -1, InvalidDsaPointer, InvalidDsaPointer, at, kind);
	close_ext(vars, &ks, removed);
	return removed;
}

int
sdp_vars_timers(SdpVars *vars, SdpTimer **timers)
{
	SdpKeyState ks;
	KeyExt	   *ext = open_ext(vars, &ks, false);
	int			n;

	*timers = NULL;
	if (ext == NULL)
		return 0;
	n = ext->ntimers;
	*timers = palloc(sizeof(SdpTimer) * Max(n, 1));
	if (n > 0)
		memcpy(*timers, timers_of(vars, ext), sizeof(SdpTimer) * n);
	close_ext(vars, &ks, false);
	return n;
}

/*
 * A due timer of the open key ks (the store key is the current key's): taken
 * from its timers when it is still there (it may have been deleted since it
 * was indexed).
 */
bool
sdp_vars_take_timer(SdpVars *vars, SdpKeyState *ks, SdpTimeKind kind, TimestampTz at)
{
	KeyExt	   *ext;

	if (ks->entry == NULL || !DsaPointerIsValid(ks->entry->ext))
		return false;
	ext = addr(vars, ks->entry->ext);
	strlcpy(vars->store_key, ks->key, SDP_STATE_KEY_MAX);
	vars->cur_undo_key = -1;
	if (!timer_remove(vars, ext, kind, at))
		return false;
	undo_push(vars, UNDO_TIMER_DEL, -1, InvalidDsaPointer, InvalidDsaPointer, at, kind);
	release_ext_if_empty(vars, ks);
	ks->dirty = true;
	return true;
}

/* Index a key's timers (after a restore). */
void
sdp_vars_index_timers(SdpVars *vars, SdpStateEntry *entry,
					  void (*index) (void *arg, const char *store_key, const SdpTimer *timer, bool add), void *arg)
{
	KeyExt	   *ext;
	SdpTimer   *t;

	if (!DsaPointerIsValid(entry->ext))
		return;
	ext = addr(vars, entry->ext);
	t = timers_of(vars, ext);
	for (int i = 0; i < ext->ntimers; i++)
		index(arg, entry->key, &t[i], true);
}

/* ---- the undo log ---- */

int
sdp_vars_mark(SdpVars *vars)
{
	return vars->nundo;
}

/* The undo log emptied, after the changes were kept or undone. */
static void
undo_reset(SdpVars *vars)
{
	vars->nundo = 0;
	vars->undo = NULL;
	vars->undo_cap = 0;
	vars->undo_keys = NULL;
	vars->nundo_keys = 0;
	vars->undo_keys_cap = 0;
	vars->cur_undo_key = -1;
	MemoryContextReset(vars->undo_cxt);
	{
		HASHCTL		ctl;

		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = SDP_STATE_KEY_MAX;
		ctl.entrysize = sizeof(UndoKey);
		ctl.hcxt = vars->undo_cxt;
		vars->undo_key_index = hash_create("sdp undo keys", 64, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
}

/* The changes since mark undone, latest first: what they replaced is back, what they made is freed. */
void
sdp_vars_undo(SdpVars *vars, int mark)
{
	bool		had_key = vars->have_key;
	char		saved[SDP_STATE_KEY_MAX];

	strlcpy(saved, vars->store_key, SDP_STATE_KEY_MAX);
	for (int i = vars->nundo - 1; i >= mark; i--)
	{
		UndoRec    *r = &vars->undo[i];
		SdpKeyState ks;
		KeyExt	   *ext;

		/*
		 * Consumed before it is applied: should applying it raise (out of
		 * shared memory), the undo that follows from the transaction's
		 * abort starts below it, and frees nothing twice.
		 */
		vars->nundo = i;
		sdp_state_open_key(vars->store, vars->undo_keys[r->key], true, &ks);
		ext = DsaPointerIsValid(ks.entry->ext) ? addr(vars, ks.entry->ext) : NULL;
		switch (r->op)
		{
			case UNDO_EXT:
				/* created: it goes (it is empty by now); released: it comes back */
				if (DsaPointerIsValid(r->new))
				{
					if (ext != NULL && DsaPointerIsValid(ext->key))
						chunk_free(vars, ext->key);
					chunk_free(vars, r->new);
					ks.entry->ext = InvalidDsaPointer;
				}
				else
				{
					ks.entry->ext = r->old;
					ks.entry->partition = (int32) r->a;
				}
				break;
			case UNDO_VAR:
				Assert(ext != NULL);
				var_free(vars, r->var, ext->var[r->var]);
				ext->var[r->var] = r->old;
				break;
			case UNDO_LIST_APPEND:
				{
					ListChunk  *c = addr(vars, r->new);

					c->count = (int32) r->a;
					c->used = r->b;
					break;
				}
			case UNDO_MAP_SET:
				{
					/* the key of whichever entry is at hand: it is the same key */
					MapEntry   *e = addr(vars, DsaPointerIsValid(r->new) ? r->new : r->old);
					char	   *image = palloc(e->klen);
					int32		klen = e->klen;
					uint32		hash = e->hash;

					Assert(ext != NULL);
					memcpy(image, e->data, klen);
					(void) map_set(vars, &ext, &ks, r->var, hash, image, klen,
								   DsaPointerIsValid(r->old) ? r->old : InvalidDsaPointer);
					if (DsaPointerIsValid(r->new))
						chunk_free(vars, r->new);
					pfree(image);
					break;
				}
			case UNDO_TIMER_ADD:
				Assert(ext != NULL);
				if (timer_remove(vars, ext, (SdpTimeKind) r->b, r->a) && vars->index_timer)
				{
					/* its node too: a batch retried again and again would pile them up */
					SdpTimer	timer;

					timer.when = r->a;
					timer.kind = (int32) r->b;
					timer.tag = 0;
					vars->index_timer(vars->index_arg, ks.key, &timer, false);
				}
				break;
			case UNDO_INPLACE:
				{
					const SdpVarDecl *d = &vars->decls[r->var];

					if (d->kind == SDP_VAR_MAP)
					{
						MapEntry   *e = addr(vars, r->new);

						memcpy(e->data + MAXALIGN(e->klen), &r->a, e->vlen);
						e->written_at = r->b;
					}
					else
					{
						ValueChunk *c = addr(vars, r->new);

						memcpy(c->data, &r->a, c->len);
						c->written_at = r->b;
					}
					break;
				}
			case UNDO_TIMER_DEL:
				{
					SdpTimer	timer;

					if (ext == NULL)
					{
						Assert(false);
						break;
					}
					(void) timer_insert(vars, &ext, &ks, (SdpTimeKind) r->b, r->a);
					timer.when = r->a;
					timer.kind = (int32) r->b;
					timer.tag = 0;
					if (vars->index_timer)
						vars->index_timer(vars->index_arg, ks.key, &timer, true);
					break;
				}
		}
		ks.dirty = true;
		sdp_state_close_key(&ks);
	}
	vars->nundo = mark;
	if (mark == 0)
		undo_reset(vars);
	strlcpy(vars->store_key, saved, SDP_STATE_KEY_MAX);
	vars->have_key = had_key;
	vars->cur_undo_key = -1;
}

/* The attempt's changes kept (its batch committed): what they replaced is freed. */
void
sdp_vars_commit(SdpVars *vars)
{
	HOLD_INTERRUPTS();
	for (int i = 0; i < vars->nundo; i++)
	{
		UndoRec    *r = &vars->undo[i];

		switch (r->op)
		{
			case UNDO_EXT:
				if (DsaPointerIsValid(r->old))
				{
					KeyExt	   *ext = addr(vars, r->old);

					chunk_free(vars, ext->key);
					chunk_free(vars, ext->timers);
					chunk_free(vars, r->old);
				}
				break;
			case UNDO_VAR:
				var_free(vars, r->var, r->old);
				break;
			case UNDO_MAP_SET:
				chunk_free(vars, r->old);
				break;
			default:
				break;
		}
	}
	RESUME_INTERRUPTS();
	undo_reset(vars);
}

/* ---- checkpoints: the store's SdpStateExtOps ---- */

/*
 * The settings that the text of a value depends on, pinned while a
 * checkpoint is written and read: the owner's DateStyle may change between
 * the two (a date of DMY read as MDY), an extra_float_digits below 1 loses
 * a float's last digits, and money is read by lc_monetary.  pg_dump pins
 * the same.  Returns the GUC nest level for vars_text_format_end.
 */
static int
vars_text_format_begin(void)
{
	int			nest = NewGUCNestLevel();

	(void) set_config_option("datestyle", "ISO, MDY", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("intervalstyle", "postgres", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("extra_float_digits", "3", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("lc_monetary", "C", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	return nest;
}

static void
vars_text_format_end(int nest)
{
	AtEOXact_GUC(true, nest);
}

static void
put_text(StringInfo buf, const char *s)
{
	int32		len = s ? (int32) strlen(s) : -1;

	appendBinaryStringInfo(buf, (char *) &len, sizeof(len));
	if (len > 0)
		appendBinaryStringInfo(buf, s, len);
}

static void
put_int64(StringInfo buf, int64 v)
{
	appendBinaryStringInfo(buf, (char *) &v, sizeof(v));
}

static void
put_int32(StringInfo buf, int32 v)
{
	appendBinaryStringInfo(buf, (char *) &v, sizeof(v));
}

static char *
output_of(FmgrInfo *out, const char *image, int32 len, bool typbyval)
{
	return OutputFunctionCall(out, datum_of(image, len, typbyval));
}

static void
vars_serialize(SdpStateStore *store, SdpStateEntry *entry, StringInfo buf)
{
	SdpVars    *vars = ext_vars;
	KeyExt	   *ext = addr(vars, entry->ext);
	int32		present = 0;
	SdpTimer   *t;

	put_int32(buf, SDP_VARS_MAGIC);
	put_int32(buf, ext->key_len);
	if (ext->key_len > 0)
		appendBinaryStringInfo(buf, (char *) addr(vars, ext->key) + MAXALIGN(sizeof(uint32)), ext->key_len);
	for (int i = 0; i < ext->nvars; i++)
		present += DsaPointerIsValid(ext->var[i]);
	put_int32(buf, present);
	for (int i = 0; i < ext->nvars; i++)
	{
		const SdpVarDecl *d = &vars->decls[i];

		if (!DsaPointerIsValid(ext->var[i]))
			continue;
		put_text(buf, d->name);
		put_int32(buf, d->kind);
		switch (d->kind)
		{
			case SDP_VAR_VALUE:
				{
					ValueChunk *c = addr(vars, ext->var[i]);

					put_int64(buf, c->written_at);
					put_text(buf, output_of((FmgrInfo *) &d->out, c->data, c->len, d->typbyval));
					break;
				}
			case SDP_VAR_LIST:
				{
					ListChunk  *c = addr(vars, ext->var[i]);
					int64		at = 0;

					put_int32(buf, c->count);
					for (int k = 0; k < c->count; k++)
					{
						ListElem   *el = list_elem(c, at);

						put_int64(buf, el->written_at);
						put_text(buf, output_of((FmgrInfo *) &d->out, (char *) el + MAXALIGN(sizeof(ListElem)), el->len,
												d->typbyval));
						at += elem_size(el->len);
					}
					break;
				}
			case SDP_VAR_MAP:
				{
					MapTable   *m = addr(vars, ext->var[i]);

					put_int32(buf, m->count);
					for (int k = 0; k < m->capacity; k++)
					{
						MapEntry   *e;

						if (m->slots[k].status != SLOT_USED)
							continue;
						e = map_entry(vars, &m->slots[k]);
						put_int64(buf, e->written_at);
						put_text(buf, output_of((FmgrInfo *) &d->key_out, e->data, e->klen, d->key_typbyval));
						put_text(buf, e->vlen < 0 ? NULL
								 : output_of((FmgrInfo *) &d->out, e->data + MAXALIGN(e->klen), e->vlen, d->typbyval));
					}
					break;
				}
		}
	}
	put_int32(buf, ext->ntimers);
	t = timers_of(vars, ext);
	for (int i = 0; i < ext->ntimers; i++)
	{
		put_int64(buf, t[i].when);
		put_int32(buf, t[i].kind);
	}
}

typedef struct Reader
{
	const char *pos;
	const char *end;
	const char *key;
} Reader;

static void
get(Reader *r, void *dst, int n)
{
	if (r->pos + n > r->end)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("checkpointed processor state of key \"%s\" is truncated", r->key)));
	memcpy(dst, r->pos, n);
	r->pos += n;
}

static int32
get_int32(Reader *r)
{
	int32		v;

	get(r, &v, sizeof(v));
	return v;
}

static int64
get_int64(Reader *r)
{
	int64		v;

	get(r, &v, sizeof(v));
	return v;
}

static char *
get_text(Reader *r)
{
	int32		len = get_int32(r);
	char	   *s;

	if (len < 0)
		return NULL;
	if (len > r->end - r->pos)
		get(r, NULL, len);		/* raises */
	s = palloc(len + 1);
	get(r, s, len);
	s[len] = '\0';
	return s;
}

static void
vars_restore(SdpStateStore *store, SdpKeyState *ks, const char *data, int len)
{
	SdpVars    *vars = ext_vars;
	Reader		r = {data, data + len, ks->key};
	int32		key_len;
	int32		present;
	int32		ntimers;
	TimestampTz saved_now = vars->now;

	if (get_int32(&r) != SDP_VARS_MAGIC)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("checkpointed state of key \"%s\" is not a processor's", ks->key)));
	key_len = get_int32(&r);
	if (key_len < 0 || key_len > r.end - r.pos)
		get(&r, NULL, key_len);
	strlcpy(vars->store_key, ks->key, SDP_STATE_KEY_MAX);
	vars->cur_undo_key = -1;
	if (vars->key_text)
		pfree(vars->key_text);
	vars->key_text = NULL;
	if (key_len > 0)
	{
		vars->key_text = MemoryContextAlloc(TopMemoryContext, key_len + 1);
		get(&r, vars->key_text, key_len);
		vars->key_text[key_len] = '\0';
	}
	vars->partition = ks->entry->partition;
	vars->have_key = true;
	vars->restoring = true;
	/* the key is open (sdp_state_restore): the calls below open it again, so it is closed meanwhile */
	sdp_state_close_key(ks);

	present = get_int32(&r);
	for (int i = 0; i < present; i++)
	{
		char	   *name = get_text(&r);
		int32		kind = get_int32(&r);
		int			var = name ? sdp_vars_find(vars, name) : -1;
		bool		keep = var >= 0 && vars->decls[var].kind == kind;
		const SdpVarDecl *d = keep ? &vars->decls[var] : NULL;

		switch (kind)
		{
			case SDP_VAR_VALUE:
				{
					int64		at = get_int64(&r);
					char	   *text = get_text(&r);

					if (keep && text)
					{
						vars->now = at;
						sdp_vars_set_value(vars, var, InputFunctionCall((FmgrInfo *) &d->in, text, d->ioparam, -1));
					}
					break;
				}
			case SDP_VAR_LIST:
				{
					int32		n = get_int32(&r);

					for (int k = 0; k < n; k++)
					{
						int64		at = get_int64(&r);
						char	   *text = get_text(&r);

						if (keep && text)
						{
							vars->now = at;
							sdp_vars_list_append(vars, var, InputFunctionCall((FmgrInfo *) &d->in, text, d->ioparam, -1));
						}
					}
					break;
				}
			case SDP_VAR_MAP:
				{
					int32		n = get_int32(&r);

					for (int k = 0; k < n; k++)
					{
						int64		at = get_int64(&r);
						char	   *ktext = get_text(&r);
						char	   *vtext = get_text(&r);

						if (keep && ktext)
						{
							vars->now = at;
							sdp_vars_map_put(vars, var,
											 InputFunctionCall((FmgrInfo *) &d->key_in, ktext, d->key_ioparam, -1),
											 vtext ? InputFunctionCall((FmgrInfo *) &d->in, vtext, d->ioparam, -1) : (Datum) 0,
											 vtext == NULL);
						}
					}
					break;
				}
			default:
				ereport(ERROR,
						(errcode(ERRCODE_DATA_CORRUPTED),
						 errmsg("checkpointed processor state of key \"%s\" has a variable of unknown kind %d", ks->key, kind)));
		}
	}
	ntimers = get_int32(&r);
	for (int i = 0; i < ntimers; i++)
	{
		int64		at = get_int64(&r);
		int32		kind = get_int32(&r);
		SdpKeyState tks;
		KeyExt	   *ext = open_ext(vars, &tks, true);

		(void) timer_insert(vars, &ext, &tks, (SdpTimeKind) kind, at);
		close_ext(vars, &tks, true);
	}
	vars->now = saved_now;
	/*
	 * What the restore wrote is the checkpoint's own: nothing to undo.  But
	 * what it replaced as a list, a map or the key's ext grew (the smaller
	 * chunks) is freed, as a batch's commit frees it.
	 */
	sdp_vars_commit(vars);
	vars->have_key = false;
	vars->restoring = false;
	/* open again, as sdp_state_restore left it */
	sdp_state_open_key(store, ks->key, true, ks);
}

static const SdpStateExtOps vars_ext_ops = {vars_serialize, vars_restore, NULL, vars_text_format_begin, vars_text_format_end};

const SdpStateExtOps *
sdp_vars_ext_ops(void)
{
	return &vars_ext_ops;
}

/* ---- readers ---- */

/* to_jsonb of a value of a type (its FuncExpr says which, as a query's call would) */
static Jsonb *
to_jsonb_of(Oid type, Datum value)
{
	FmgrInfo	flinfo;
	FuncExpr   *expr;
	Const	   *arg = makeNullConst(type, -1, InvalidOid);

	fmgr_info(F_TO_JSONB, &flinfo);
	expr = makeFuncExpr(F_TO_JSONB, JSONBOID, list_make1(arg), InvalidOid, InvalidOid, COERCE_EXPLICIT_CALL);
	fmgr_info_set_expr((Node *) expr, &flinfo);
	return DatumGetJsonbP(FunctionCall1Coll(&flinfo, InvalidOid, value));
}

/*
 * A variable of a key, copied out of the area by a reader while the key's
 * entry is locked: only the images (datum_of), nothing formatted, so that
 * no output function, catalog lookup or work in proportion to the values'
 * text runs under the lock (the worker waits for it).
 */
typedef struct VarCopy
{
	int			n;				/* value: 1; list: elements; map: entries */
	Datum	   *keys;			/* map */
	Datum	   *values;
	bool	   *isnull;
	int64		written_at;		/* value */
} VarCopy;

void *
sdp_vars_copy_var(SdpVars *vars, SdpStateEntry *entry, int var)
{
	const SdpVarDecl *d = &vars->decls[var];
	KeyExt	   *ext;
	VarCopy    *c;
	dsa_pointer p;

	if (!DsaPointerIsValid(entry->ext))
		return NULL;
	ext = addr(vars, entry->ext);
	if (var >= ext->nvars || !DsaPointerIsValid(p = ext->var[var]))
		return NULL;
	c = palloc0(sizeof(VarCopy));
	switch (d->kind)
	{
		case SDP_VAR_VALUE:
			{
				ValueChunk *v = addr(vars, p);

				c->n = 1;
				c->values = palloc(sizeof(Datum));
				c->isnull = palloc0(sizeof(bool));
				c->values[0] = datum_of(v->data, v->len, d->typbyval);
				c->written_at = v->written_at;
				break;
			}
		case SDP_VAR_LIST:
			{
				ListChunk  *l = addr(vars, p);
				int64		at = 0;

				c->n = l->count;
				c->values = palloc(sizeof(Datum) * Max(l->count, 1));
				c->isnull = palloc0(sizeof(bool) * Max(l->count, 1));
				for (int k = 0; k < l->count; k++)
				{
					ListElem   *el = list_elem(l, at);

					if (el->len < 0)
						c->isnull[k] = true;
					else
						c->values[k] = datum_of((char *) el + MAXALIGN(sizeof(ListElem)), el->len, d->typbyval);
					at += elem_size(el->len);
				}
				break;
			}
		case SDP_VAR_MAP:
			{
				MapTable   *m = addr(vars, p);

				c->keys = palloc(sizeof(Datum) * Max(m->capacity, 1));
				c->values = palloc(sizeof(Datum) * Max(m->capacity, 1));
				c->isnull = palloc0(sizeof(bool) * Max(m->capacity, 1));
				for (int i = 0; i < m->capacity; i++)
				{
					MapEntry   *e;

					if (m->slots[i].status != SLOT_USED)
						continue;
					e = map_entry(vars, &m->slots[i]);
					c->keys[c->n] = datum_of(e->data, e->klen, d->key_typbyval);
					if (e->vlen < 0)
						c->isnull[c->n] = true;
					else
						c->values[c->n] = datum_of(e->data + MAXALIGN(e->klen), e->vlen, d->typbyval);
					c->n++;
				}
				break;
			}
	}
	return c;
}

/*
 * A variable's copy as jsonb, for sdp_flow_state (no lock is held):
 * {"value": v, "written_at": t}, {"list": [...]}, {"map": [[k, v], ...]}.
 */
Jsonb *
sdp_vars_describe_copy(SdpVars *vars, int var, void *copy)
{
	const SdpVarDecl *d = &vars->decls[var];
	VarCopy    *c = copy;
	StringInfoData buf;

	initStringInfo(&buf);
	switch (d->kind)
	{
		case SDP_VAR_VALUE:
			appendStringInfoString(&buf, "{\"value\": ");
			appendStringInfoString(&buf, JsonbToCString(NULL, &to_jsonb_of(d->type, c->values[0])->root, 0));
			appendStringInfo(&buf, ", \"written_at\": \"%s\"}", timestamptz_to_str(c->written_at));
			break;
		case SDP_VAR_LIST:
			appendStringInfoString(&buf, "{\"list\": [");
			for (int k = 0; k < c->n; k++)
				appendStringInfo(&buf, "%s%s", k ? ", " : "",
								 c->isnull[k] ? "null" : JsonbToCString(NULL, &to_jsonb_of(d->type, c->values[k])->root, 0));
			appendStringInfoString(&buf, "]}");
			break;
		case SDP_VAR_MAP:
			appendStringInfoString(&buf, "{\"map\": [");
			for (int k = 0; k < c->n; k++)
			{
				appendStringInfo(&buf, "%s[%s, ", k ? ", " : "",
								 JsonbToCString(NULL, &to_jsonb_of(d->key_type, c->keys[k])->root, 0));
				if (c->isnull[k])
					appendStringInfoString(&buf, "null]");
				else
					appendStringInfo(&buf, "%s]", JsonbToCString(NULL, &to_jsonb_of(d->type, c->values[k])->root, 0));
			}
			appendStringInfoString(&buf, "]}");
			break;
	}
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data)));
}

/* A key's timers as jsonb text, for sdp_flow_state (a reader: the entry's lock is held); NULL: none. */
char *
sdp_vars_describe_timers(SdpVars *vars, SdpStateEntry *entry)
{
	KeyExt	   *ext;
	SdpTimer   *t;
	StringInfoData buf;

	if (!DsaPointerIsValid(entry->ext))
		return NULL;
	ext = addr(vars, entry->ext);
	if (ext->ntimers == 0)
		return NULL;
	t = timers_of(vars, ext);
	initStringInfo(&buf);
	appendStringInfoChar(&buf, '[');
	for (int i = 0; i < ext->ntimers; i++)
		appendStringInfo(&buf, "%s{\"kind\": \"%s\", \"at\": \"%s\"}", i > 0 ? ", " : "",
						 t[i].kind == SDP_EVENT_TIME ? "event_time" : "processing_time", timestamptz_to_str(t[i].when));
	appendStringInfoChar(&buf, ']');
	return buf.data;
}

/*
 * compat.h
 *		The server calls whose arguments differ between the PostgreSQL
 *		majors sdp_ext builds against (15, 17 and 18; 16 compiles too but
 *		is not tested), each behind one name of ours, so that the sources
 *		read the same on every major and no PG_VERSION_NUM appears outside
 *		this file.
 *
 * Each name is the call as PostgreSQL 15 makes it; the newer majors get
 * the arguments they added with the values that keep 15's behaviour:
 *
 *	16	stringToQualifiedNameList takes a soft-error context (NULL:
 *		raise, as 15 does) and DecodeDateTime a place for the error's
 *		details (unused: a nonzero result is all we read); the JSON parser's callbacks
 *		return JsonParseErrorType; EvalPlanQualInit takes the result
 *		relations; permissions are RTEPermissionInfo nodes beside the
 *		range table (ExecCheckPermissions, ExecInitRangeTable's
 *		permInfos); ExecInsertIndexTuples takes onlySummarizing;
 *		float8in_internal a soft-error context (NULL: raise); pg_proc_aclcheck
 *		is object_aclcheck of pg_proc; a replication slot's invalidation
 *		has a cause (data.invalidated), where 15 moved its restart_lsn to
 *		data.invalidated_at
 *	17	makeJsonLexContextCstringLen takes the context to fill (NULL:
 *		allocate one); dshash_parameters has a key copy function;
 *		CheckValidResultRel takes the MERGE actions; CreateWaitEventSet
 *		takes a resource owner (NULL: TopMemoryContext, as we gave 15)
 *	18	CheckValidResultRel takes the ON CONFLICT action too;
 *		pg_noreturn comes before a declaration (pg_attribute_noreturn()
 *		after it is gone);
 *		RelationGetPrimaryKeyIndex says whether a deferrable key will do
 *		(false: 15 never returned one); ExecInitRangeTable takes the
 *		unpruned relations; index_beginscan takes instrumentation
 */
#ifndef SDP_COMPAT_H
#define SDP_COMPAT_H

#include "postgres.h"

#include "access/genam.h"
#include "common/jsonapi.h"
#include "executor/executor.h"
#include "lib/dshash.h"
#include "nodes/bitmapset.h"
#include "parser/parsetree.h"
#include "storage/latch.h"
#include "utils/datetime.h"
#include "utils/float.h"
#include "utils/memutils.h"
#include "utils/regproc.h"
#include "utils/relcache.h"

#if PG_VERSION_NUM < 150000 || PG_VERSION_NUM >= 190000
#error "sdp_ext builds against PostgreSQL 15, 16, 17 and 18"
#endif

#if PG_VERSION_NUM >= 160000
#include "parser/parse_relation.h"
#include "varatt.h"				/* VARDATA_ANY and the others: postgres.h's before 16 */
#endif

/* whether a role may execute a function */
#if PG_VERSION_NUM >= 160000
#include "catalog/pg_proc.h"
#include "utils/acl.h"
#define sdp_proc_aclcheck(fn, role, mode) object_aclcheck(ProcedureRelationId, (fn), (role), (mode))
#else
#include "utils/acl.h"
#define sdp_proc_aclcheck(fn, role, mode) pg_proc_aclcheck((fn), (role), (mode))
#endif

/* a function that does not return: pg_noreturn before its declaration (18's C11 _Noreturn) */
#ifndef pg_noreturn
#define pg_noreturn pg_attribute_noreturn()
#endif

/* "schema.name" as a list of names; raises on a malformed name */
#if PG_VERSION_NUM >= 160000
#define sdp_qualified_name_list(string) stringToQualifiedNameList((string), NULL)
#else
#define sdp_qualified_name_list(string) stringToQualifiedNameList(string)
#endif

/* the float8 a text means, as float8in; raises on a malformed one */
#if PG_VERSION_NUM >= 160000
#define sdp_float8_from_text(text) float8in_internal((text), NULL, "double precision", (text), NULL)
#else
#define sdp_float8_from_text(text) float8in_internal((text), NULL, "double precision", (text))
#endif

/* DecodeDateTime: a nonzero result is a DTERR_* code */
static inline int
sdp_decode_datetime(char **field, int *ftype, int nf, int *dtype,
					struct pg_tm *tm, fsec_t *fsec, int *tzp)
{
#if PG_VERSION_NUM >= 160000
	DateTimeErrorExtra extra;

	return DecodeDateTime(field, ftype, nf, dtype, tm, fsec, tzp, &extra);
#else
	return DecodeDateTime(field, ftype, nf, dtype, tm, fsec, tzp);
#endif
}

/*
 * A JSON semantic callback: declared SDP_JSON_CALLBACK, ended with
 * SDP_JSON_CALLBACK_DONE (errors are raised, never returned).
 */
#if PG_VERSION_NUM >= 160000
#define SDP_JSON_CALLBACK		JsonParseErrorType
#define SDP_JSON_CALLBACK_DONE	return JSON_SUCCESS
#else
#define SDP_JSON_CALLBACK		void
#define SDP_JSON_CALLBACK_DONE	return
#endif

/* a lexer over json[0..len), allocated in CurrentMemoryContext */
#if PG_VERSION_NUM >= 170000
#define sdp_json_lexer(json, len, encoding, need_escapes) \
	makeJsonLexContextCstringLen(NULL, (json), (len), (encoding), (need_escapes))
#else
#define sdp_json_lexer(json, len, encoding, need_escapes) \
	makeJsonLexContextCstringLen((json), (len), (encoding), (need_escapes))
#endif

/* an EvalPlanQual state with no plan of its own, as logical replication's */
#if PG_VERSION_NUM >= 160000
#define sdp_epq_init(epqstate, estate) EvalPlanQualInit((epqstate), (estate), NULL, NIL, -1, NIL)
#else
#define sdp_epq_init(epqstate, estate) EvalPlanQualInit((epqstate), (estate), NULL, NIL, -1)
#endif

/* the relation's primary key index, or InvalidOid (also when it is deferrable) */
#if PG_VERSION_NUM >= 180000
#define sdp_primary_key_index(rel) RelationGetPrimaryKeyIndex((rel), false)
#else
#define sdp_primary_key_index(rel) RelationGetPrimaryKeyIndex(rel)
#endif

/*
 * A wait event that pg_stat_activity names (PostgreSQL 17's custom wait
 * events, registered once per process and kept in *id); before 17 the
 * one Extension event.
 */
#if PG_VERSION_NUM >= 170000
#include "utils/wait_event.h"
static inline uint32
sdp_wait_event(uint32 *id, const char *name)
{
	if (*id == 0)
		*id = WaitEventExtensionNew(name);
	return *id;
}
#else
#define sdp_wait_event(id, name) ((void) (id), PG_WAIT_EXTENSION)
#endif

/* a wait set for the life of the process, in TopMemoryContext, no resource owner's */
#if PG_VERSION_NUM >= 170000
#define sdp_create_wait_set(nevents) CreateWaitEventSet(NULL, (nevents))
#else
#define sdp_create_wait_set(nevents) CreateWaitEventSet(TopMemoryContext, (nevents))
#endif

/* the checks of a relation about to take INSERTs (no ON CONFLICT, no MERGE) */
#if PG_VERSION_NUM >= 180000
#define sdp_check_valid_insert_rel(rri) CheckValidResultRel((rri), CMD_INSERT, ONCONFLICT_NONE, NIL)
#elif PG_VERSION_NUM >= 170000
#define sdp_check_valid_insert_rel(rri) CheckValidResultRel((rri), CMD_INSERT, NIL)
#else
#define sdp_check_valid_insert_rel(rri) CheckValidResultRel((rri), CMD_INSERT)
#endif

/* an index scan without instrumentation */
#if PG_VERSION_NUM >= 180000
#define sdp_index_beginscan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), NULL, (nkeys), (norderbys))
#else
#define sdp_index_beginscan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), (nkeys), (norderbys))
#endif

/* a new row's index entries (not an update's) */
#if PG_VERSION_NUM >= 160000
#define sdp_insert_index_tuples(rri, slot, estate) \
	ExecInsertIndexTuples((rri), (slot), (estate), false, false, NULL, NIL, false)
#else
#define sdp_insert_index_tuples(rri, slot, estate) \
	ExecInsertIndexTuples((rri), (slot), (estate), false, false, NULL, NIL)
#endif

/* dshash's key copy for keys compared by memcmp (before 17, dshash copied them so) */
#if PG_VERSION_NUM >= 170000
#define SDP_DSHASH_SET_MEMCPY(params) ((params).copy_function = dshash_memcpy)
#else
#define SDP_DSHASH_SET_MEMCPY(params) ((void) 0)
#endif

/*
 * A planned statement's single result relation as a range table of one
 * entry for an EState of our own: the plan's permission check (raises),
 * then a copy of the entry and, from 16, of its permissions, which
 * *perminfos receives (NIL before 16).
 */
static inline RangeTblEntry *
sdp_plan_result_rte(PlannedStmt *pstmt, List **perminfos)
{
	RangeTblEntry *rte;

#if PG_VERSION_NUM >= 160000
	ExecCheckPermissions(pstmt->rtable, pstmt->permInfos, true);
	rte = copyObject(rt_fetch(linitial_int(pstmt->resultRelations), pstmt->rtable));
	*perminfos = NIL;
	if (rte->perminfoindex != 0)
	{
		*perminfos = list_make1(copyObject(getRTEPermissionInfo(pstmt->permInfos, rte)));
		rte->perminfoindex = 1;
	}
#else
	ExecCheckRTPerms(pstmt->rtable, true);
	rte = copyObject(rt_fetch(linitial_int(pstmt->resultRelations), pstmt->rtable));
	*perminfos = NIL;
#endif
	return rte;
}

/* estate's range table: the one entry sdp_plan_result_rte gave */
static inline void
sdp_init_range_table(EState *estate, RangeTblEntry *rte, List *perminfos)
{
#if PG_VERSION_NUM >= 180000
	ExecInitRangeTable(estate, list_make1(rte), perminfos, bms_make_singleton(1));
#elif PG_VERSION_NUM >= 160000
	ExecInitRangeTable(estate, list_make1(rte), perminfos);
#else
	Assert(perminfos == NIL);
	ExecInitRangeTable(estate, list_make1(rte));
#endif
}

/*
 * Whether a replication slot has been invalidated (the slot's spinlock held;
 * the caller includes replication/slot.h)
 */
#if PG_VERSION_NUM >= 160000
#define sdp_slot_invalidated(slot) ((slot)->data.invalidated != RS_INVAL_NONE)
#else
#define sdp_slot_invalidated(slot) \
	(XLogRecPtrIsInvalid((slot)->data.restart_lsn) && !XLogRecPtrIsInvalid((slot)->data.invalidated_at))
#endif

#endif							/* SDP_COMPAT_H */

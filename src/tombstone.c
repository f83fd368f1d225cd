/*
 * tombstone.c
 *		Tombstones (a message with a key and no value) that delete.
 *
 * With on_tombstone = 'delete' (upsert mode, a target whose primary key is
 * one column, no operator) a tombstone deletes the target row whose
 * primary key is the message key: that is what a Kafka upsert topic (a
 * compacted one) means by it.  The decode stage makes each such tombstone
 * an input row of its own, marked (Batch.row_tomb), so that it is isolated
 * like the others: a key its primary key type does not take fails alone
 * and is dead-lettered at stage 'write'.
 *
 * Order within a batch is kept: for a range of input rows, the keys of its
 * tombstones are deleted first, and a row of the range whose message has
 * the same Kafka key as a later tombstone of the range is not written (the
 * tombstone would delete it).  Rows after a key's last tombstone are then
 * upserted as usual, and ranges run in offset order.  So the row a key ends
 * with is the one its last message says, tombstone or not, as long as a
 * key's messages come on one partition (Kafka's keyed partitioning).
 *
 * The other settings: 'dead_letter' (the default, as a message that is not
 * JSON) and 'skip' (counted in rows_skipped).
 */
#include "pipeline.h"

#include "access/relation.h"
#include "access/stratnum.h"
#include "catalog/pg_index.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "tombstone.h"

/*
 * The equality operator of the first column of index indexoid (a btree
 * primary key) for a column of type coltype, as "schema.=", quoted.
 */
static char *
key_equality_operator(Oid indexoid, Oid coltype)
{
	HeapTuple	tup;
	Oid			opclass;
	Oid			opfamily;
	Oid			opcintype;
	Oid			opno;
	bool		isnull;
	oidvector  *indclass;
	HeapTuple	optup;
	Form_pg_operator op;
	char	   *result;

	tup = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(indexoid));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for index %u", indexoid);
	indclass = (oidvector *) DatumGetPointer(SysCacheGetAttr(INDEXRELID, tup, Anum_pg_index_indclass, &isnull));
	Assert(!isnull);
	opclass = indclass->values[0];
	ReleaseSysCache(tup);
	opfamily = get_opclass_family(opclass);
	opcintype = get_opclass_input_type(opclass);
	/* a polymorphic opclass (enums, arrays, ranges) has its operators for the pseudo-type */
	opno = get_opfamily_member(opfamily, IsPolymorphicType(opcintype) ? opcintype : coltype,
							   IsPolymorphicType(opcintype) ? opcintype : coltype, BTEqualStrategyNumber);
	if (!OidIsValid(opno))
		opno = get_opfamily_member(opfamily, opcintype, opcintype, BTEqualStrategyNumber);
	if (!OidIsValid(opno))
		elog(ERROR, "no equality operator for type %s in the operator family of index %u",
			 format_type_be(coltype), indexoid);
	optup = SearchSysCache1(OPEROID, ObjectIdGetDatum(opno));
	if (!HeapTupleIsValid(optup))
		elog(ERROR, "cache lookup failed for operator %u", opno);
	op = (Form_pg_operator) GETSTRUCT(optup);
	result = psprintf("%s.%s", quote_identifier(get_namespace_name(op->oprnamespace)), NameStr(op->oprname));
	ReleaseSysCache(optup);
	return result;
}

/*
 * At declaration and at worker start: whether a flow may delete with
 * tombstones, and the DELETE it runs (prepared and kept when plan is not
 * NULL).  Errors are the declaration's refusals.
 */
void
sdp_tombstone_prepare(const SdpFlowOptions *opts, bool has_operator, Oid target, Oid owner,
					  SPIPlanPtr *plan)
{
	Relation	rel;
	AttrNumber *attnums;
	int			npk;
	Oid			pk;
	char	   *relname;
	char	   *col;
	Oid			coltype;
	Oid			argtypes[1] = {TEXTARRAYOID};

	if (opts->on_tombstone != SDP_TOMBSTONE_DELETE)
		return;
	if (has_operator)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("option \"on_tombstone\": \"delete\" is for stateless flows"),
				 errhint("A stateful flow's target is written by its operator; use \"skip\" or \"dead_letter\".")));
	if (opts->mode != SDP_MODE_UPSERT)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"on_tombstone\": \"delete\" needs upsert mode"),
				 errhint("A tombstone deletes the row whose primary key is the message key: give the target a primary key, and leave \"mode\" at upsert.")));
	rel = relation_open(target, AccessShareLock);
	pk = sdp_target_primary_key(rel, &npk, &attnums);
	relname = quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
										 RelationGetRelationName(rel));
	if (!OidIsValid(pk) || npk != 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"on_tombstone\": \"delete\" needs a primary key of one column, and target %s has %d",
						relname, OidIsValid(pk) ? npk : 0),
				 errhint("The message key is the value of that one column.")));
	col = pstrdup(NameStr(TupleDescAttr(RelationGetDescr(rel), attnums[0] - 1)->attname));
	coltype = TupleDescAttr(RelationGetDescr(rel), attnums[0] - 1)->atttypid;
	relation_close(rel, AccessShareLock);
	if (pg_class_aclcheck(target, owner, ACL_DELETE) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for table %s", relname),
				 errdetail("A flow with \"on_tombstone\": \"delete\" needs DELETE on its target."),
				 errhint("The flow writes with the privileges of its owner, role \"%s\": grant it, or declare the flow as a role that has it.",
						 GetUserNameFromId(owner, false))));
	if (plan == NULL)
		return;

	/*
	 * The keys as text, each read by the key column's input function (a
	 * cast from text).  The statement runs as the owner, with the owner's
	 * search_path: its operator is named with its schema, the equality of
	 * the primary key's btree operator family (as ri_triggers.c names the
	 * operators of a foreign key's checks), so that no operator of another
	 * schema can be chosen instead, whatever the search_path holds.
	 */
	*plan = SPI_prepare(psprintf("DELETE FROM %s WHERE %s OPERATOR(%s) ANY ($1::%s[])", relname, quote_identifier(col),
								 key_equality_operator(pk, coltype), format_type_be_qualified(coltype)),
						1, argtypes);
	if (*plan == NULL)
		elog(ERROR, "could not prepare the tombstones' DELETE: %s", SPI_result_code_string(SPI_result));
	SPI_keepplan(*plan);
}

static uint32
key_hash(const char *key, size_t len)
{
	return hash_bytes((const unsigned char *) key, (int) len);
}

/*
 * Input rows [lo, hi) of a batch: delete the keys of its tombstones, and
 * return in *keep (*nkeep of them) the other rows, less those a later
 * tombstone of the range deletes.  Returns the number of rows deleted.
 */
int64
sdp_tombstone_apply(FlowWorker *w, Batch *b, int lo, int hi, HeapTuple *keep, int *nkeep)
{
	int			ntomb = 0;
	int			size = 16;
	int		   *last;			/* hash slot -> row index of the key's last tombstone, -1 */
	Datum	   *keys;
	int			nkeys = 0;
	Datum		arg;
	int64		deleted;

	*nkeep = 0;
	for (int i = lo; i < hi; i++)
		ntomb += b->row_tomb[i];
	if (ntomb == 0)
	{
		memcpy(keep, b->rows + lo, sizeof(HeapTuple) * (hi - lo));
		*nkeep = hi - lo;
		return 0;
	}

	while (size < ntomb * 2)
		size *= 2;
	last = palloc(sizeof(int) * size);
	for (int s = 0; s < size; s++)
		last[s] = -1;
	keys = palloc(sizeof(Datum) * ntomb);
	for (int i = lo; i < hi; i++)
	{
		rd_kafka_message_t *m = b->msgs[b->row_msg[i]];
		uint32		s;

		if (!b->row_tomb[i])
			continue;
		for (s = key_hash(m->key, m->key_len) & (size - 1); last[s] >= 0; s = (s + 1) & (size - 1))
		{
			rd_kafka_message_t *o = b->msgs[b->row_msg[last[s]]];

			if (o->key_len == m->key_len && memcmp(o->key, m->key, m->key_len) == 0)
				break;
		}
		if (last[s] < 0)
			keys[nkeys++] = PointerGetDatum(cstring_to_text_with_len(m->key, (int) m->key_len));
		last[s] = i;
	}
	for (int i = lo; i < hi; i++)
	{
		rd_kafka_message_t *m = b->msgs[b->row_msg[i]];
		bool		deleted_later = false;

		if (b->row_tomb[i])
			continue;
		if (m->key != NULL)
		{
			for (uint32 s = key_hash(m->key, m->key_len) & (size - 1); last[s] >= 0; s = (s + 1) & (size - 1))
			{
				rd_kafka_message_t *o = b->msgs[b->row_msg[last[s]]];

				if (o->key_len == m->key_len && memcmp(o->key, m->key, m->key_len) == 0)
				{
					deleted_later = last[s] > i;
					break;
				}
			}
		}
		if (!deleted_later)
			keep[(*nkeep)++] = b->rows[i];
	}

	arg = PointerGetDatum(construct_array(keys, nkeys, TEXTOID, -1, false, TYPALIGN_INT));
	if (SPI_execute_plan(w->tombstone_plan, &arg, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not delete the rows of tombstones");
	deleted = (int64) SPI_processed;
	pfree(last);
	return deleted;
}

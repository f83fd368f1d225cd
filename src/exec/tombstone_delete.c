/*
 * tombstone_delete.c
 *		The DELETE of on_tombstone = delete: whether a flow may delete with
 *		tombstones (its declaration's refusals), and the plan that deletes
 *		the target rows whose primary key is a tombstone's key.  And the
 *		DELETE of a Debezium flow's delete events: the target rows whose
 *		primary keys are those of the rows its transform gives for them.
 *
 * worker/tombstone.c and worker/debezium.c run them over a batch;
 * sdp_create_flow and the worker's start prepare them here.
 */
#include "exec/tombstone_delete.h"

#include "access/relation.h"
#include "access/stratnum.h"
#include "catalog/pg_index.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

/*
 * The equality operator of column k (from 0) of index indexoid (a btree
 * primary key) for a column of type coltype, as "schema.=", quoted.
 */
static char *
key_equality_operator(Oid indexoid, int k, Oid coltype)
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
	opclass = indclass->values[k];
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

	/* a Debezium flow's tombstones delete as its delete events do (sdp_debezium_prepare) */
	if (opts->on_tombstone != SDP_TOMBSTONE_DELETE || opts->envelope == SDP_ENVELOPE_DEBEZIUM)
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
								 key_equality_operator(pk, 0, coltype), format_type_be_qualified(coltype)),
						1, argtypes);
	if (*plan == NULL)
		elog(ERROR, "could not prepare the tombstones' DELETE: %s", SPI_result_code_string(SPI_result));
	SPI_keepplan(*plan);
}

/*
 * At declaration and at worker start: whether a flow may apply Debezium's
 * change events (its declaration's refusals), and the DELETE of its delete
 * events (prepared and kept when plan is not NULL).  tw is the flow's
 * prepared write: the rows the transform gives, upserted on the target's
 * primary key.
 */
void
sdp_debezium_prepare(const SdpFlowOptions *opts, const SdpTableWrite *tw, Oid owner, SPIPlanPtr *plan)
{
	Relation	rel;
	AttrNumber *attnums;
	int			npk;
	Oid			pk;
	StringInfoData sql;

	if (opts->envelope != SDP_ENVELOPE_DEBEZIUM)
		return;
	rel = relation_open(tw->relid, AccessShareLock);
	pk = sdp_target_primary_key(rel, &npk, &attnums);
	if (!OidIsValid(pk))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"envelope\": \"debezium\" needs a target with a primary key, and %s has none", tw->relname)));
	if (tw->mode != SDP_MODE_UPSERT)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"envelope\": \"debezium\" needs upsert mode"),
				 errhint("A change event upserts or deletes the row of its primary key: give the target a primary key, and leave \"mode\" at upsert.")));
	if (pg_class_aclcheck(tw->relid, owner, ACL_DELETE) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for table %s", tw->relname),
				 errdetail("A flow with \"envelope\": \"debezium\" needs DELETE on its target."),
				 errhint("The flow writes with the privileges of its owner, role \"%s\": grant it, or declare the flow as a role that has it.",
						 GetUserNameFromId(owner, false))));

	/*
	 * The rows the transform gives for the delete events, registered as
	 * "sdp_deleted": the target's rows with their primary keys are
	 * deleted, each column compared by its btree operator family's
	 * equality named with its schema (as tombstones' are), the row's value
	 * cast to the column's type without its typmod (a cast to varchar(n)
	 * would cut a longer key, and delete another row).
	 */
	initStringInfo(&sql);
	appendStringInfo(&sql, "DELETE FROM %s t USING %s d WHERE ", tw->relname, SDP_DELETED_RELATION);
	for (int k = 0; k < npk; k++)
	{
		Form_pg_attribute att = TupleDescAttr(RelationGetDescr(rel), attnums[k] - 1);
		Form_pg_attribute out = TupleDescAttr(tw->row_desc, tw->pk_index[k]);

		appendStringInfo(&sql, "%st.%s OPERATOR(%s) CAST(d.%s AS %s)", k > 0 ? " AND " : "",
						 quote_identifier(NameStr(att->attname)),
						 key_equality_operator(pk, k, att->atttypid),
						 quote_identifier(NameStr(out->attname)),
						 format_type_extended(att->atttypid, -1,
											  FORMAT_TYPE_TYPEMOD_GIVEN | FORMAT_TYPE_FORCE_QUALIFY));
	}
	relation_close(rel, AccessShareLock);
	if (plan == NULL)
		return;
	sdp_register_rows(SDP_DELETED_RELATION, tw->row_desc, NULL, 0);
	*plan = SPI_prepare(sql.data, 0, NULL);
	if (*plan == NULL)
		elog(ERROR, "could not prepare the delete events' DELETE: %s", SPI_result_code_string(SPI_result));
	sdp_unregister_rows(SDP_DELETED_RELATION);
	SPI_keepplan(*plan);
}

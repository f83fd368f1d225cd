/*
 * sink.c
 *		Writing a flow's rows into its target table.
 *
 * The rows of a batch are registered as the relation "sdp_output" and
 * written by one kept plan:
 *
 *	append:	INSERT INTO target (cols) SELECT cols FROM sdp_output
 *	upsert:	... ON CONFLICT (primary key) DO UPDATE SET col = EXCLUDED.col, ...
 *
 * ON CONFLICT refuses to touch a row twice in one statement, so in upsert
 * mode the batch is first collapsed per key, keeping the last row: rows
 * arrive in partition and offset order, which is arrival order for a
 * key-partitioned topic, so the last message for a key wins.
 */
#include "pipeline.h"

#include "access/relation.h"
#include "access/table.h"
#include "catalog/index.h"
#include "catalog/pg_class.h"
#include "catalog/pg_index.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "parser/parse_coerce.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/syscache.h"

/*
 * The target's primary key index and its columns (attribute numbers), or
 * InvalidOid when it has none.
 */
Oid
sdp_target_primary_key(Relation rel, int *npk, AttrNumber **attnums)
{
	Oid			pkoid = RelationGetPrimaryKeyIndex(rel);
	HeapTuple	tup;
	Form_pg_index idx;

	*npk = 0;
	*attnums = NULL;
	if (!OidIsValid(pkoid))
		return InvalidOid;
	tup = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(pkoid));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for index %u", pkoid);
	idx = (Form_pg_index) GETSTRUCT(tup);
	*npk = idx->indnkeyatts;
	*attnums = palloc(sizeof(AttrNumber) * *npk);
	for (int i = 0; i < *npk; i++)
		(*attnums)[i] = idx->indkey.values[i];
	ReleaseSysCache(tup);
	return pkoid;
}

/*
 * Check the rows' columns against the target and prepare the write plan.
 * Every column of row_desc must be a column of the target, of a type
 * assignable to it; with skip_unmatched_meta (a flow without transform)
 * Kafka metadata columns the target lacks are left out instead.  Upsert
 * needs a primary key whose columns are all among the rows' columns.
 */
void
sdp_sink_prepare(SdpSink *s, Oid target, SdpWriteMode mode, TupleDesc row_desc,
				 bool skip_unmatched_meta)
{
	MemoryContext cxt = CurrentMemoryContext;
	Relation	rel = relation_open(target, AccessShareLock);
	TupleDesc	tdesc = RelationGetDescr(rel);
	StringInfoData cols;
	StringInfoData sql;
	AttrNumber *pk_attnums;
	bool	   *written;
	int			npk;

	s->relid = target;
	s->mode = mode;
	s->row_desc = row_desc;
	s->relname = quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
											RelationGetRelationName(rel));

	if (rel->rd_rel->relkind != RELKIND_RELATION &&
		rel->rd_rel->relkind != RELKIND_PARTITIONED_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("target \"%s\" is not a table", RelationGetRelationName(rel)),
				 errhint("A flow writes into an ordinary or partitioned table.")));

	initStringInfo(&cols);
	written = palloc0(sizeof(bool) * row_desc->natts);
	for (int i = 0; i < row_desc->natts; i++)
	{
		Form_pg_attribute src = TupleDescAttr(row_desc, i);
		const char *name = NameStr(src->attname);
		AttrNumber	attnum = get_attnum(target, name);
		Form_pg_attribute dst;

		if (attnum == InvalidAttrNumber || attnum < 0)
		{
			if (skip_unmatched_meta && sdp_is_meta_column(name))
				continue;
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("column \"%s\" produced by the flow does not exist in target \"%s\"",
							name, RelationGetRelationName(rel)),
					 errhint("The transform's columns are written to the target's columns of the same name; rename or drop the column with AS in the transform.")));
		}
		dst = TupleDescAttr(tdesc, attnum - 1);
		if (dst->attgenerated)
			ereport(ERROR,
					(errcode(ERRCODE_GENERATED_ALWAYS),
					 errmsg("column \"%s\" of target \"%s\" is a generated column",
							name, RelationGetRelationName(rel))));
		if (!can_coerce_type(1, &src->atttypid, &dst->atttypid, COERCION_ASSIGNMENT))
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("column \"%s\" produced by the flow has type %s, but column \"%s\" of target \"%s\" has type %s",
							name, format_type_be(src->atttypid), name,
							RelationGetRelationName(rel), format_type_be(dst->atttypid)),
					 errhint("Cast the column in the transform, e.g. %s::%s.",
							 quote_identifier(name), format_type_be(dst->atttypid))));
		if (cols.len > 0)
			appendStringInfoString(&cols, ", ");
		appendStringInfoString(&cols, quote_identifier(name));
		written[i] = true;
	}
	if (cols.len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("the flow produces no column of target \"%s\"", RelationGetRelationName(rel))));

	initStringInfo(&sql);
	appendStringInfo(&sql, "INSERT INTO %s (%s) SELECT %s FROM %s",
					 s->relname, cols.data, cols.data, SDP_OUTPUT_RELATION);

	s->npk = 0;
	s->pk_index = NULL;
	if (mode == SDP_MODE_UPSERT)
	{
		StringInfoData set;

		if (!OidIsValid(sdp_target_primary_key(rel, &npk, &pk_attnums)))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_TABLE_DEFINITION),
					 errmsg("target \"%s\" has no primary key, which upsert mode needs",
							RelationGetRelationName(rel)),
					 errhint("Add a primary key to the table, or set the flow's option \"mode\" to \"append\".")));
		s->npk = npk;
		s->pk_index = palloc(sizeof(int) * npk);
		appendStringInfoString(&sql, " ON CONFLICT (");
		for (int k = 0; k < npk; k++)
		{
			const char *pkname = NameStr(TupleDescAttr(tdesc, pk_attnums[k] - 1)->attname);
			int			pos = -1;

			for (int i = 0; i < row_desc->natts; i++)
				if (written[i] && strcmp(NameStr(TupleDescAttr(row_desc, i)->attname), pkname) == 0)
					pos = i;
			if (pos < 0)
				ereport(ERROR,
						(errcode(ERRCODE_UNDEFINED_COLUMN),
						 errmsg("the flow does not produce column \"%s\" of the primary key of target \"%s\"",
								pkname, RelationGetRelationName(rel)),
						 errhint("Upsert mode matches rows on the target's primary key; the transform must return every key column.")));
			s->pk_index[k] = pos;
			appendStringInfo(&sql, "%s%s", k > 0 ? ", " : "", quote_identifier(pkname));
		}
		appendStringInfoChar(&sql, ')');

		initStringInfo(&set);
		for (int i = 0; i < row_desc->natts; i++)
		{
			const char *name = NameStr(TupleDescAttr(row_desc, i)->attname);
			bool		is_pk = false;

			if (!written[i])
				continue;
			for (int k = 0; k < npk; k++)
				is_pk |= (s->pk_index[k] == i);
			if (is_pk)
				continue;
			appendStringInfo(&set, "%s%s = EXCLUDED.%s", set.len > 0 ? ", " : "",
							 quote_identifier(name), quote_identifier(name));
		}
		if (set.len > 0)
			appendStringInfo(&sql, " DO UPDATE SET %s", set.data);
		else
			appendStringInfoString(&sql, " DO NOTHING");
	}
	relation_close(rel, AccessShareLock);

	s->sql = sql.data;
	sdp_register_rows(SDP_OUTPUT_RELATION, row_desc, NULL, 0);
	s->plan = SPI_prepare(s->sql, 0, NULL);
	MemoryContextSwitchTo(cxt);		/* SPI calls return in SPI's own context */
	if (s->plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\": %s", s->sql, SPI_result_code_string(SPI_result));
	sdp_unregister_rows(SDP_OUTPUT_RELATION);
}

/* The owner must be able to insert into the target, and to update it in upsert mode. */
void
sdp_sink_check_privileges(SdpSink *s, Oid roleid)
{
	AclMode		needed = ACL_INSERT | (s->mode == SDP_MODE_UPSERT ? ACL_UPDATE : 0);

	if (pg_class_aclcheck(s->relid, roleid, needed) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for table %s", s->relname),
				 errdetail("A flow in %s mode needs %s on its target.",
						   sdp_write_mode_name(s->mode),
						   s->mode == SDP_MODE_UPSERT ? "INSERT and UPDATE" : "INSERT"),
				 errhint("The flow writes with the privileges of its owner, role \"%s\": grant them to it, or declare the flow as a role that has them.",
						 GetUserNameFromId(roleid, false))));
}

/*
 * Collapse rows to the last one per primary key, keeping arrival order.
 * Keys are compared by their binary image: values that are equal but spelled
 * differently (1.0 and 1.00) stay apart, and then ON CONFLICT reports the
 * conflict and the caller splits the batch, so the result is still right.
 */
static int
collapse_by_key(SdpSink *s, HeapTuple *rows, int n, HeapTuple *kept)
{
	int			size = 16;
	int		   *table;
	uint32	   *hashes = palloc(sizeof(uint32) * n);
	bool	   *superseded = palloc0(sizeof(bool) * n);
	int			nkept = 0;

	while (size < n * 2)
		size <<= 1;
	table = palloc(sizeof(int) * size);
	memset(table, -1, sizeof(int) * size);

	for (int i = 0; i < n; i++)
	{
		uint32		h = 0;
		bool		has_null = false;
		uint32		pos;

		for (int k = 0; k < s->npk; k++)
		{
			Form_pg_attribute att = TupleDescAttr(s->row_desc, s->pk_index[k]);
			bool		isnull;
			Datum		d = heap_getattr(rows[i], s->pk_index[k] + 1, s->row_desc, &isnull);

			if (isnull)
			{
				has_null = true;
				break;
			}
			h = hash_combine(h, datum_image_hash(d, att->attbyval, att->attlen));
		}
		hashes[i] = h;
		if (has_null)
			continue;			/* the insert will fail on its own; let it */

		for (pos = h & (size - 1);; pos = (pos + 1) & (size - 1))
		{
			int			j = table[pos];
			bool		same = true;

			if (j < 0)
			{
				table[pos] = i;
				break;
			}
			if (hashes[j] != h)
				continue;
			for (int k = 0; k < s->npk && same; k++)
			{
				Form_pg_attribute att = TupleDescAttr(s->row_desc, s->pk_index[k]);
				bool		n1,
							n2;
				Datum		d1 = heap_getattr(rows[i], s->pk_index[k] + 1, s->row_desc, &n1);
				Datum		d2 = heap_getattr(rows[j], s->pk_index[k] + 1, s->row_desc, &n2);

				same = datum_image_eq(d1, d2, att->attbyval, att->attlen);
			}
			if (same)
			{
				superseded[j] = true;
				table[pos] = i;
				break;
			}
		}
	}
	for (int i = 0; i < n; i++)
		if (!superseded[i])
			kept[nkept++] = rows[i];
	return nkept;
}

/* Write rows (of row_desc) into the target; returns the rows inserted or updated. */
int64
sdp_sink_write(SdpSink *s, HeapTuple *rows, int n)
{
	MemoryContext cxt = CurrentMemoryContext;
	int			rc;
	int64		written;

	if (n == 0)
		return 0;
	if (s->mode == SDP_MODE_UPSERT && n > 1)
	{
		HeapTuple  *kept = palloc(sizeof(HeapTuple) * n);

		n = collapse_by_key(s, rows, n, kept);
		rows = kept;
	}
	sdp_register_rows(SDP_OUTPUT_RELATION, s->row_desc, rows, n);
	rc = SPI_execute_plan(s->plan, NULL, NULL, false, 0);
	MemoryContextSwitchTo(cxt);
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "write into %s returned %s", s->relname, SPI_result_code_string(rc));
	written = (int64) SPI_processed;
	sdp_unregister_rows(SDP_OUTPUT_RELATION);
	return written;
}

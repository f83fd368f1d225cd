/*
 * table_write.c
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
 *
 * That plan is the reference and the fallback.  Where it can, a batch is
 * written the way COPY FROM writes (copyfrom.c), without one executor
 * insert per row: the rows are put in the target's slots (assignment casts
 * and the defaults of the columns the flow does not write, as the INSERT
 * would), generated columns computed and constraints checked, and buffered
 * slots flushed by table_multi_insert, then their index entries and AFTER
 * ROW triggers; statement triggers and the AFTER trigger queue bracket the
 * batch as they bracket a statement.  The plan stays the authority on
 * which table the name means and on privileges: every batch revalidates it
 * (taking its locks) and checks its range table's permissions as executing
 * it would, so a REVOKE stops the next batch either way.
 *
 * In upsert mode the new keys are multi-inserted in a subtransaction and
 * the others go through the ON CONFLICT plan.  A unique violation there (a
 * key already in the target, a concurrent insert of the same key, or two
 * keys equal but not binary equal) rolls the subtransaction back and the
 * whole batch goes through the plan, which is right in every case.  Which
 * keys are new: while they all are, none is looked up (the unique violation
 * tells); after a violation the batch's keys are looked up in the primary
 * key first (a dirty snapshot: committed and in-progress rows), until they
 * are all new again for a while (write_upsert).
 *
 * The plan path stays wherever COPY would not multi-insert or the flow's
 * semantics differ (write_path_refusal): partitioned targets, BEFORE or
 * INSTEAD OF row triggers, row-level security for the owner (COPY refuses
 * it; the plan applies the policies), volatile defaults, and in upsert mode
 * statement triggers and transition tables (one statement, not two).  Which
 * path a flow takes is logged when it starts and when it changes.
 */
#include "exec/table_write.h"
#include "compat.h"
#include "decl/flow_options.h"
#include "decl/envelope.h"
#include "decl/input_schema.h"

#include "access/detoast.h"
#include "access/genam.h"
#include "access/heapam.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/pg_am.h"
#include "catalog/pg_class.h"
#include "catalog/pg_index.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "executor/executor.h"
#include "executor/nodeModifyTable.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "optimizer/optimizer.h"
#include "parser/parse_coerce.h"
#include "parser/parsetree.h"
#include "rewrite/rewriteHandler.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/plancache.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/typcache.h"

/* The path a batch is written by: multi-insert, or the plan for this reason. */
typedef enum SdpWritePath
{
	SDP_PATH_MULTI_INSERT,
	SDP_PATH_PARTITIONED,
	SDP_PATH_ROW_TRIGGERS,
	SDP_PATH_ROW_SECURITY,
	SDP_PATH_VOLATILE_DEFAULT,
	SDP_PATH_DOMAIN_DEFAULT,
	SDP_PATH_STATEMENT_TRIGGERS,
	SDP_PATH_KEY,
	SDP_PATH_COLUMNS,
	SDP_PATH_UNKNOWN
} SdpWritePath;

static const char *const write_path_text[] = {
	"multi-insert",
	"an INSERT statement: the target is partitioned",
	"an INSERT statement: the target has BEFORE or INSTEAD OF row triggers on INSERT",
	"an INSERT statement: row-level security applies to the flow's owner on the target",
	"an INSERT statement: a column the flow does not write has a volatile default",
	"an INSERT statement: a column the flow does not write has a domain type and no default",
	"an INSERT statement: in upsert mode, the target has statement triggers or transition tables",
	"an INSERT statement: the target's primary key is deferrable or not a btree",
	"an INSERT statement: the target's columns do not match the flow's as declared",
	"an INSERT statement"
};

typedef struct FastWrite FastWrite;

/* a plan's INSERT target, for an EState of our own (compat.h: sdp_plan_result_rte) */
typedef struct PlanTarget
{
	RangeTblEntry *rte;
	List	   *perminfos;		/* its RTEPermissionInfo, from PostgreSQL 16 */
} PlanTarget;
static SdpWritePath write_path_refusal(SdpTableWrite *s, Relation rel, FastWrite *fw);
static void sink_prepare(SdpTableWrite *s, Oid target, SdpWriteMode mode, TupleDesc row_desc,
						 int skip_unmatched, bool engine_rows);
static void fast_write_buffer(FastWrite *fw, TupleTableSlot *slot, Size len);
static TupleTableSlot *fast_write_slot(FastWrite *fw);

/*
 * The target's primary key index and its columns (attribute numbers), or
 * InvalidOid when it has none.
 */
Oid
sdp_target_primary_key(Relation rel, int *npk, AttrNumber **attnums)
{
	Oid			pkoid = sdp_primary_key_index(rel);
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
 * assignable to it; with skip_unmatched (a flow without transform) the
 * Kafka metadata columns (SDP_SKIP_META) and a Debezium flow's own
 * (SDP_SKIP_DEBEZIUM) that the target lacks are left out instead.  Upsert
 * needs a primary key whose columns are all among the rows' columns.
 */
void
sdp_table_write_prepare(SdpTableWrite *s, Oid target, SdpWriteMode mode, TupleDesc row_desc,
				 int skip_unmatched)
{
	sink_prepare(s, target, mode, row_desc, skip_unmatched, false);
}

/*
 * The write of a sink flow's rows into sdp.outbox (outbox: its OID), rows
 * the engine forms itself with the flow's own id: written without the
 * table's row-level security policy, which is for rows inserted by SQL.
 */
void
sdp_table_write_prepare_outbox(SdpTableWrite *s, Oid outbox, TupleDesc row_desc)
{
	sink_prepare(s, outbox, SDP_MODE_APPEND, row_desc, 0, true);
}

/*
 * An outbox's rows become Kafka messages: one whose key and value are
 * more than max_payload bytes is refused when it is written (stage write),
 * with a data error, so that it is set aside alone and the rest goes on,
 * rather than stop the relay that cannot produce it.
 */
void
sdp_table_write_limit_messages(SdpTableWrite *s, const char *sink_name, int max_payload, int message_max_bytes)
{
	s->max_payload = max_payload;
	s->message_max_bytes = message_max_bytes;
	s->kafka_sink_name = sink_name;
	s->row_key_att = s->row_value_att = 0;
	for (int i = 0; i < s->row_desc->natts; i++)
	{
		const char *name = NameStr(TupleDescAttr(s->row_desc, i)->attname);

		if (strcmp(name, "key") == 0)
			s->row_key_att = i + 1;
		else if (strcmp(name, "value") == 0)
			s->row_value_att = i + 1;
	}
	s->rel_key_att = get_attnum(s->relid, "key");
	s->rel_value_att = get_attnum(s->relid, "value");
	Assert(s->row_key_att > 0 && s->row_value_att > 0 && s->rel_key_att > 0 && s->rel_value_att > 0);
}

/* A text datum's bytes (0 for null), without detoasting it. */
static Size
text_bytes(Datum d, bool isnull)
{
	return isnull ? 0 : toast_raw_datum_size(d) - VARHDRSZ;
}

static void
check_message_size(SdpTableWrite *s, Datum key, bool keynull, Datum value, bool valuenull)
{
	/* an Avro sink's values are the message in hex: half as many bytes go out */
	Size		bytes = text_bytes(key, keynull) + text_bytes(value, valuenull) / (s->value_hex ? 2 : 1);

	if (bytes > (Size) s->max_payload)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("message of %zu bytes (key and value) is too large for sink \"%s\": its producer's message.max.bytes is %d, which leaves %d bytes for them",
						bytes, s->kafka_sink_name, s->message_max_bytes, s->max_payload),
				 errhint("Raise the sink's message.max.bytes (the topic's max.message.bytes must take it too), or make the flow's rows smaller.")));
}

/* A batch's rows (of row_desc) for the outbox, each checked against the sink's bound. */
static void
check_message_sizes(SdpTableWrite *s, HeapTuple *rows, int n)
{
	for (int i = 0; i < n; i++)
	{
		bool		keynull,
					valuenull;
		Datum		key = heap_getattr(rows[i], s->row_key_att, s->row_desc, &keynull);
		Datum		value = heap_getattr(rows[i], s->row_value_att, s->row_desc, &valuenull);

		check_message_size(s, key, keynull, value, valuenull);
	}
}

static void
sink_prepare(SdpTableWrite *s, Oid target, SdpWriteMode mode, TupleDesc row_desc,
			 int skip_unmatched, bool engine_rows)
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
	s->engine_rows = engine_rows;
	s->max_payload = 0;
	s->relname = quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
											RelationGetRelationName(rel));

	if (rel->rd_rel->relkind != RELKIND_RELATION &&
		rel->rd_rel->relkind != RELKIND_PARTITIONED_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("target \"%s\" is not a table", RelationGetRelationName(rel)),
				 errhint("A flow writes into an ordinary or partitioned table.")));
	if (rel->rd_rel->relpersistence == RELPERSISTENCE_TEMP)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("target \"%s\" is a temporary table", RelationGetRelationName(rel)),
				 errdetail("A flow runs in a background worker of its own, which cannot see another session's temporary tables."),
				 errhint("Write into an ordinary (or unlogged) table.")));

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
			if (((skip_unmatched & SDP_SKIP_META) && sdp_is_meta_column(name)) ||
				((skip_unmatched & SDP_SKIP_DEBEZIUM) && sdp_is_debezium_column(name)))
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
	s->written = written;
	s->flow_name = NULL;
	s->upsert_probe = false;
	s->clean_batches = 0;
	s->plan_batches = 0;
	{
		/* the path the first batch will take, for the log (the casts and defaults it plans are dropped) */
		MemoryContext tmp = AllocSetContextCreate(CurrentMemoryContext, "sdp write path",
												  ALLOCSET_SMALL_SIZES);
		MemoryContext old = MemoryContextSwitchTo(tmp);

		s->path = write_path_refusal(s, rel, NULL);
		MemoryContextSwitchTo(old);
		MemoryContextDelete(tmp);
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
sdp_table_write_check_privileges(SdpTableWrite *s, Oid roleid)
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
collapse_by_key(SdpTableWrite *s, HeapTuple *rows, int n, HeapTuple *kept)
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

/* ---- the multi-insert path ---- */

/* As copyfrom.c: the rows buffered before a flush. */
#define SDP_MAX_BUFFERED_ROWS	1000
#define SDP_MAX_BUFFERED_BYTES	65535

/* One batch's write by multi-insert: the target opened as a statement would open it. */
struct FastWrite
{
	EState	   *estate;
	ResultRelInfo *rri;
	Relation	rel;
	AttrNumber *dst;			/* per row_desc column: its target attribute, 0 if not written */
	Expr	  **cast_expr;		/* per row_desc column: the assignment cast, NULL if none is needed */
	ExprState **cast;
	int			ndefaults;		/* the defaults of the target's columns the flow does not write */
	AttrNumber *def_att;
	Expr	  **def_expr;
	ExprState **def;
	TupleTableSlot *src;		/* a row as the flow produced it */
	TupleDesc	slot_desc;		/* the target's, unpinned: slots cost no resource owner entry */
	TupleTableSlot **slots;		/* the buffered rows, as the target's; made as needed */
	const TupleTableSlotOps *slot_ops;	/* of those slots */
	int			maxslots;
	int			nslots;
	int			nused;
	Size		bytes;
	BulkInsertState bistate;
	TransitionCaptureState *tcs;
	/* upsert: looking the keys up in the primary key */
	IndexScanDesc scan;
	ScanKey		keys;
	int			npk;
	AttrNumber *pk_att;
	TupleTableSlot *probe;
	SnapshotData dirty;
};

/*
 * Why a batch cannot be written into rel by multi-insert, or
 * SDP_PATH_MULTI_INSERT.  With fw, also fills in how the flow's columns map
 * to the target's (the casts and defaults, planned, in the current memory
 * context).  Mirrors what the INSERT plan does with the same rows: the
 * assignment casts of the parser, the defaults of the rewriter, the nulls
 * coerced to a domain of the planner (which COPY does not do: the plan path).
 */
static SdpWritePath
write_path_refusal(SdpTableWrite *s, Relation rel, FastWrite *fw)
{
	TupleDesc	tdesc = RelationGetDescr(rel);
	TriggerDesc *trig = rel->trigdesc;
	int			nsrc = s->row_desc->natts;
	bool	   *covered;
	AttrNumber *dst;
	Expr	  **cast;

	if (rel->rd_rel->relkind != RELKIND_RELATION)
		return rel->rd_rel->relkind == RELKIND_PARTITIONED_TABLE ? SDP_PATH_PARTITIONED : SDP_PATH_UNKNOWN;
	if (trig && (trig->trig_insert_before_row || trig->trig_insert_instead_row))
		return SDP_PATH_ROW_TRIGGERS;
	/*
	 * sdp.outbox's policy lets a role insert rows of its own sink flows only;
	 * the rows a flow's worker writes there are its own by construction (the
	 * engine sets flow_id), so its write needs no check per row.
	 */
	if (!s->engine_rows && check_enable_rls(RelationGetRelid(rel), InvalidOid, true) == RLS_ENABLED)
		return SDP_PATH_ROW_SECURITY;
	if (s->mode == SDP_MODE_UPSERT)
	{
		Oid			pkoid = sdp_primary_key_index(rel);
		Relation	idx;
		bool		usable;

		/* one statement there, two here (the new keys, then the others) */
		if (trig && (trig->trig_insert_before_statement || trig->trig_insert_after_statement ||
					 trig->trig_update_before_statement || trig->trig_update_after_statement ||
					 trig->trig_insert_new_table || trig->trig_update_old_table ||
					 trig->trig_update_new_table))
			return SDP_PATH_STATEMENT_TRIGGERS;
		if (!OidIsValid(pkoid))
			return SDP_PATH_KEY;
		idx = index_open(pkoid, AccessShareLock);
		usable = idx->rd_rel->relam == BTREE_AM_OID && idx->rd_index->indimmediate;
		index_close(idx, AccessShareLock);
		if (!usable)
			return SDP_PATH_KEY;
	}

	covered = palloc0(sizeof(bool) * Max(tdesc->natts, 1));
	dst = palloc0(sizeof(AttrNumber) * nsrc);
	cast = palloc0(sizeof(Expr *) * nsrc);
	for (int i = 0; i < nsrc; i++)
	{
		Form_pg_attribute src = TupleDescAttr(s->row_desc, i);
		Form_pg_attribute att = NULL;
		int			a;

		if (!s->written[i])
			continue;
		for (a = 0; a < tdesc->natts; a++)
		{
			att = TupleDescAttr(tdesc, a);
			if (!att->attisdropped && strcmp(NameStr(att->attname), NameStr(src->attname)) == 0)
				break;
		}
		/* the table changed under the flow: the plan says how, as an error */
		if (a == tdesc->natts || att->attgenerated || att->attidentity == ATTRIBUTE_IDENTITY_ALWAYS ||
			covered[a])
			return SDP_PATH_COLUMNS;
		covered[a] = true;
		dst[i] = a + 1;
		if (src->atttypid != att->atttypid ||
			(att->atttypmod >= 0 && att->atttypmod != src->atttypmod))
		{
			Node	   *e = coerce_to_target_type(NULL,
												  (Node *) makeVar(1, i + 1, src->atttypid, src->atttypmod,
																   src->attcollation, 0),
												  src->atttypid, att->atttypid, att->atttypmod,
												  COERCION_ASSIGNMENT, COERCE_IMPLICIT_CAST, -1);

			if (e == NULL)
				return SDP_PATH_COLUMNS;
			cast[i] = expression_planner((Expr *) e);
		}
	}
	if (fw)
	{
		fw->dst = dst;
		fw->cast_expr = cast;
		fw->def_att = palloc(sizeof(AttrNumber) * Max(tdesc->natts, 1));
		fw->def_expr = palloc(sizeof(Expr *) * Max(tdesc->natts, 1));
		fw->ndefaults = 0;
	}
	for (int a = 0; a < tdesc->natts; a++)
	{
		Form_pg_attribute att = TupleDescAttr(tdesc, a);
		Expr	   *def;

		if (covered[a] || att->attisdropped || att->attgenerated)
			continue;
		def = (Expr *) build_column_default(rel, a + 1);
		if (def == NULL)
		{
			if (get_typtype(att->atttypid) == TYPTYPE_DOMAIN)
				return SDP_PATH_DOMAIN_DEFAULT;
			continue;
		}
		def = expression_planner(def);
		/* as COPY: a volatile default may read the target; nextval() may not */
		if (contain_volatile_functions_not_nextval((Node *) def))
			return SDP_PATH_VOLATILE_DEFAULT;
		if (fw)
		{
			fw->def_att[fw->ndefaults] = a + 1;
			fw->def_expr[fw->ndefaults] = def;
			fw->ndefaults++;
		}
	}
	return SDP_PATH_MULTI_INSERT;
}

static void
note_write_path(SdpTableWrite *s, SdpWritePath path)
{
	if (path == s->path)
		return;
	s->path = path;
	if (s->flow_name)
		ereport(LOG,
				(errmsg("sdp flow \"%s\" writes into %s by %s",
						s->flow_name, s->relname, write_path_text[path])));
}

/* How the last batch was written (or the first will be), for the log. */
const char *
sdp_table_write_path_description(SdpTableWrite *s)
{
	return write_path_text[s->path];
}

/*
 * Open the target (from the plan: the table its name means, locked) as
 * a statement would, if the batch can be written by multi-insert, and
 * prepare the casts, the defaults and the slots; fast_write_start starts
 * the statement.  Returns why not otherwise, with nothing left open.
 */
static SdpWritePath
fast_write_begin(SdpTableWrite *s, const PlanTarget *target, FastWrite *fw, int n)
{
	EState	   *estate = CreateExecutorState();
	MemoryContext oldcxt = MemoryContextSwitchTo(estate->es_query_cxt);
	ResultRelInfo *rri = makeNode(ResultRelInfo);
	SdpWritePath path;

	memset(fw, 0, sizeof(FastWrite));
	fw->estate = estate;
	fw->rri = rri;
	sdp_init_range_table(estate, target->rte, target->perminfos);
	ExecInitResultRelation(estate, rri, 1);
	fw->rel = rri->ri_RelationDesc;
	path = write_path_refusal(s, fw->rel, fw);
	if (path != SDP_PATH_MULTI_INSERT)
	{
		MemoryContextSwitchTo(oldcxt);
		ExecCloseResultRelations(estate);
		ExecCloseRangeTableRelations(estate);
		FreeExecutorState(estate);
		return path;
	}
	sdp_check_valid_insert_rel(rri);
	ExecOpenIndices(rri, false);

	fw->cast = palloc0(sizeof(ExprState *) * s->row_desc->natts);
	for (int i = 0; i < s->row_desc->natts; i++)
		if (fw->cast_expr[i])
			fw->cast[i] = ExecInitExpr(fw->cast_expr[i], NULL);
	fw->def = palloc(sizeof(ExprState *) * Max(fw->ndefaults, 1));
	for (int d = 0; d < fw->ndefaults; d++)
		fw->def[d] = ExecInitExpr(fw->def_expr[d], NULL);

	fw->src = ExecInitExtraTupleSlot(estate, s->row_desc, &TTSOpsHeapTuple);
	fw->slot_desc = CreateTupleDescCopy(RelationGetDescr(fw->rel));
	fw->slot_ops = table_slot_callbacks(fw->rel);
	fw->maxslots = Min(n, SDP_MAX_BUFFERED_ROWS);
	fw->slots = palloc(sizeof(TupleTableSlot *) * fw->maxslots);
	fw->nslots = 0;
	fw->bistate = GetBulkInsertState();

	if (s->mode == SDP_MODE_UPSERT && s->upsert_probe)
	{
		Oid			pkoid = sdp_primary_key_index(fw->rel);
		Relation	pk = NULL;

		for (int i = 0; i < rri->ri_NumIndices; i++)
			if (RelationGetRelid(rri->ri_IndexRelationDescs[i]) == pkoid)
				pk = rri->ri_IndexRelationDescs[i];
		if (pk == NULL)
			elog(ERROR, "primary key index %u of %s is not open", pkoid, s->relname);
		fw->npk = pk->rd_index->indnkeyatts;
		fw->keys = palloc(sizeof(ScanKeyData) * fw->npk);
		fw->pk_att = palloc(sizeof(AttrNumber) * fw->npk);
		for (int k = 0; k < fw->npk; k++)
		{
			Oid			eqop = get_opfamily_member(pk->rd_opfamily[k], pk->rd_opcintype[k],
												   pk->rd_opcintype[k], BTEqualStrategyNumber);

			if (!OidIsValid(eqop))
				elog(ERROR, "no equality operator for column %d of index %u", k + 1, pkoid);
			fw->pk_att[k] = pk->rd_index->indkey.values[k];
			ScanKeyEntryInitialize(&fw->keys[k], 0, k + 1, BTEqualStrategyNumber, InvalidOid,
								   pk->rd_indcollation[k], get_opcode(eqop), (Datum) 0);
		}
		/* committed rows and rows being inserted, as ON CONFLICT's own check sees them */
		InitDirtySnapshot(fw->dirty);
		fw->scan = sdp_index_beginscan(fw->rel, pk, &fw->dirty, fw->npk, 0);
		fw->probe = table_slot_create(fw->rel, &estate->es_tupleTable);
	}

	MemoryContextSwitchTo(oldcxt);
	return SDP_PATH_MULTI_INSERT;
}

/*
 * The statement starts, as SPI starts one: a new snapshot and command id,
 * the AFTER trigger queue, and the BEFORE STATEMENT triggers.
 */
static void
fast_write_start(FastWrite *fw)
{
	EState	   *estate = fw->estate;
	MemoryContext oldcxt = MemoryContextSwitchTo(estate->es_query_cxt);

	PushActiveSnapshot(GetTransactionSnapshot());
	CommandCounterIncrement();
	UpdateActiveSnapshotCommandId();
	estate->es_output_cid = GetCurrentCommandId(true);
	estate->es_snapshot = GetActiveSnapshot();
	AfterTriggerBeginQuery();
	fw->tcs = MakeTransitionCaptureState(fw->rel->trigdesc, RelationGetRelid(fw->rel), CMD_INSERT);
	ExecBSInsertTriggers(estate, fw->rri);
	MemoryContextSwitchTo(oldcxt);
}

/* A write prepared by fast_write_begin that writes nothing after all: closed without a statement. */
static void
fast_write_abandon(FastWrite *fw)
{
	EState	   *estate = fw->estate;

	if (fw->scan)
		index_endscan(fw->scan);
	FreeBulkInsertState(fw->bistate);
	ExecResetTupleTable(estate->es_tupleTable, false);
	ExecCloseResultRelations(estate);
	ExecCloseRangeTableRelations(estate);
	FreeExecutorState(estate);
}

/* Insert the buffered rows, then their index entries and AFTER ROW triggers (CopyMultiInsertBufferFlush). */
static void
fast_write_flush(FastWrite *fw)
{
	EState	   *estate = fw->estate;
	ResultRelInfo *rri = fw->rri;
	TriggerDesc *trig = rri->ri_TrigDesc;
	MemoryContext oldcxt;

	if (fw->nused == 0)
		return;
	/* the heap and index inserts may leak: the row's memory, reset after (every row is in its slot) */
	oldcxt = MemoryContextSwitchTo(GetPerTupleMemoryContext(estate));
	table_multi_insert(fw->rel, fw->slots, fw->nused, estate->es_output_cid, 0, fw->bistate);
	for (int i = 0; i < fw->nused; i++)
	{
		if (rri->ri_NumIndices > 0)
		{
			List	   *recheck = sdp_insert_index_tuples(rri, fw->slots[i], estate);

			ExecARInsertTriggers(estate, rri, fw->slots[i], recheck, fw->tcs);
			list_free(recheck);
		}
		else if (trig && (trig->trig_insert_after_row || trig->trig_insert_new_table))
			ExecARInsertTriggers(estate, rri, fw->slots[i], NIL, fw->tcs);
		ExecClearTuple(fw->slots[i]);
	}
	MemoryContextSwitchTo(oldcxt);
	ResetPerTupleExprContext(estate);
	fw->nused = 0;
	fw->bytes = 0;
}

/*
 * Whether the key of the row in slot is in the target (committed or being
 * inserted).  In the statement's memory, not the row's: the index scan keeps
 * what it allocates from one key to the next (the items it found dead).
 */
static bool
fast_key_exists(FastWrite *fw, TupleTableSlot *slot)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(fw->estate->es_query_cxt);
	bool		found;

	for (int k = 0; k < fw->npk; k++)
	{
		AttrNumber	a = fw->pk_att[k];

		fw->keys[k].sk_argument = slot->tts_values[a - 1];
		fw->keys[k].sk_flags = slot->tts_isnull[a - 1] ? SK_ISNULL : 0;
	}
	index_rescan(fw->scan, fw->keys, fw->npk, NULL, 0);
	found = index_getnext_slot(fw->scan, ForwardScanDirection, fw->probe);
	MemoryContextSwitchTo(oldcxt);
	return found;
}

/*
 * Write rows as CopyFrom does, row by row into the buffer: the flow's values
 * (cast where the plan casts), the defaults, the generated columns, then the
 * constraints.  In upsert mode a row whose key is in the target already is
 * put in existing[] instead.  Returns the rows inserted.
 */
static int64
fast_write_rows(FastWrite *fw, HeapTuple *rows, int n, HeapTuple *existing, int *nexisting)
{
	EState	   *estate = fw->estate;
	ExprContext *econtext = GetPerTupleExprContext(estate);
	TupleDesc	tdesc = RelationGetDescr(fw->rel);
	TupleDesc	sdesc = fw->src->tts_tupleDescriptor;
	int64		inserted = 0;

	for (int i = 0; i < n; i++)
	{
		TupleTableSlot *slot;
		MemoryContext oldcxt;

		CHECK_FOR_INTERRUPTS();
		slot = fast_write_slot(fw);
		ResetPerTupleExprContext(estate);
		oldcxt = MemoryContextSwitchTo(GetPerTupleMemoryContext(estate));
		ExecClearTuple(slot);
		ExecStoreHeapTuple(rows[i], fw->src, false);
		slot_getallattrs(fw->src);
		econtext->ecxt_scantuple = fw->src;
		memset(slot->tts_isnull, true, sizeof(bool) * tdesc->natts);
		for (int j = 0; j < sdesc->natts; j++)
		{
			AttrNumber	a = fw->dst[j];

			if (a == 0)
				continue;
			if (fw->cast[j] == NULL)
			{
				slot->tts_values[a - 1] = fw->src->tts_values[j];
				slot->tts_isnull[a - 1] = fw->src->tts_isnull[j];
			}
			else
				slot->tts_values[a - 1] = ExecEvalExpr(fw->cast[j], econtext, &slot->tts_isnull[a - 1]);
		}
		if (fw->scan && fast_key_exists(fw, slot))
		{
			existing[(*nexisting)++] = rows[i];
			MemoryContextSwitchTo(oldcxt);
			continue;
		}
		for (int d = 0; d < fw->ndefaults; d++)
		{
			AttrNumber	a = fw->def_att[d];

			slot->tts_values[a - 1] = ExecEvalExpr(fw->def[d], econtext, &slot->tts_isnull[a - 1]);
		}
		ExecStoreVirtualTuple(slot);
		MemoryContextSwitchTo(oldcxt);
		fast_write_buffer(fw, slot, rows[i]->t_len);
		inserted++;
	}
	fast_write_flush(fw);
	return inserted;
}

/*
 * The target's row in the next buffer slot, with its values: the generated
 * columns computed, the constraints checked, then buffered, and the buffer
 * flushed when full (CopyFrom).
 */
static void
fast_write_buffer(FastWrite *fw, TupleTableSlot *slot, Size len)
{
	EState	   *estate = fw->estate;
	TupleDesc	tdesc = RelationGetDescr(fw->rel);

	if (tdesc->constr && tdesc->constr->has_generated_stored)
		ExecComputeStoredGenerated(fw->rri, estate, slot, CMD_INSERT);
	if (tdesc->constr)
		ExecConstraints(fw->rri, slot, estate);
	if (fw->rel->rd_rel->relispartition)
		(void) ExecPartitionCheck(fw->rri, slot, estate, true);
	/* the values may point into the per-row memory: the buffer keeps its own copy */
	ExecMaterializeSlot(slot);
	fw->nused++;
	fw->bytes += len;
	if (fw->nused == fw->maxslots || fw->bytes >= SDP_MAX_BUFFERED_BYTES)
		fast_write_flush(fw);
}

/* The next buffer slot, made if need be. */
static TupleTableSlot *
fast_write_slot(FastWrite *fw)
{
	if (fw->nused == fw->nslots)
	{
		/* as many slots as a flush holds, made once per batch (64 kB of rows is a few hundred) */
		MemoryContext oldcxt = MemoryContextSwitchTo(fw->estate->es_query_cxt);

		fw->slots[fw->nslots++] = ExecAllocTableSlot(&fw->estate->es_tupleTable, fw->slot_desc,
													 fw->slot_ops);
		MemoryContextSwitchTo(oldcxt);
	}
	return fw->slots[fw->nused];
}

/* The end of the statement: AFTER STATEMENT triggers, the queued AFTER triggers fired, all closed. */
static void
fast_write_end(FastWrite *fw)
{
	EState	   *estate = fw->estate;

	if (fw->scan)
		index_endscan(fw->scan);
	FreeBulkInsertState(fw->bistate);
	ExecASInsertTriggers(estate, fw->rri, fw->tcs);
	AfterTriggerEndQuery(estate);
	PopActiveSnapshot();
	ExecResetTupleTable(estate->es_tupleTable, false);
	ExecCloseResultRelations(estate);
	ExecCloseRangeTableRelations(estate);
	FreeExecutorState(estate);
}

/* Rows written by the INSERT plan; returns the rows inserted or updated. */
static int64
write_with_plan(SdpTableWrite *s, HeapTuple *rows, int n)
{
	MemoryContext cxt = CurrentMemoryContext;
	int			rc;
	int64		written;

	if (n == 0)
		return 0;
	sdp_register_rows(SDP_OUTPUT_RELATION, s->row_desc, rows, n);
	rc = SPI_execute_plan(s->plan, NULL, NULL, false, 0);
	MemoryContextSwitchTo(cxt);
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "write into %s returned %s", s->relname, SPI_result_code_string(rc));
	written = (int64) SPI_processed;
	sdp_unregister_rows(SDP_OUTPUT_RELATION);
	return written;
}

/*
 * The target as the plan means it now (revalidated, its locks taken) with
 * the plan's permissions checked, as executing the plan would check them:
 * its range table entry and permissions in *target.  False when the plan
 * is not a single INSERT.
 */
static bool
plan_target(SdpTableWrite *s, PlanTarget *target)
{
	MemoryContext cxt = CurrentMemoryContext;
	CachedPlan *cplan;
	PlannedStmt *pstmt;
	bool		found = false;

	/* a replan parses the statement again, which names the rows */
	sdp_register_rows(SDP_OUTPUT_RELATION, s->row_desc, NULL, 0);
	cplan = SPI_plan_get_cached_plan(s->plan);
	MemoryContextSwitchTo(cxt);
	sdp_unregister_rows(SDP_OUTPUT_RELATION);
	if (cplan == NULL)
		return false;
	pstmt = linitial_node(PlannedStmt, cplan->stmt_list);
	if (list_length(cplan->stmt_list) == 1 && pstmt->commandType == CMD_INSERT &&
		list_length(pstmt->resultRelations) == 1)
	{
		target->rte = sdp_plan_result_rte(pstmt, &target->perminfos);
		found = true;
	}
	ReleaseCachedPlan(cplan, CurrentResourceOwner);
	return found;
}

/*
 * Upsert by multi-insert: the new keys inserted in a subtransaction, the
 * others through the plan.  A unique violation rolls the subtransaction
 * back and the plan writes the whole batch (ON CONFLICT sees the concurrent
 * row, or raises for the batch's own equal keys as it does).
 *
 * Which keys are new is found by looking them up first (probe mode), or
 * not at all: while the keys keep being new, every row is inserted and a
 * key already there shows as a unique violation.  Looking up costs a
 * descent of the primary key per row, about what inserting it costs, so a
 * flow of new keys (windows, events) skips it: it starts without, turns
 * probing on at its first unique violation, and off again after
 * SDP_UPSERT_CLEAN_BATCHES batches in a row found no key in the target.
 * When nearly every key of a batch is in the target already (a flow of
 * updates), the multi-insert saves nothing and the lookup is extra: the
 * next SDP_UPSERT_PLAN_BATCHES batches go through the plan alone, then the
 * keys are looked up again.
 */
#define SDP_UPSERT_CLEAN_BATCHES 8
#define SDP_UPSERT_PLAN_BATCHES 8

static int64
write_upsert(SdpTableWrite *s, const PlanTarget *target, HeapTuple *rows, int n)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	HeapTuple  *existing = palloc(sizeof(HeapTuple) * n);
	int			nexisting = 0;
	FastWrite  *fw = palloc(sizeof(FastWrite));
	volatile SdpWritePath path = SDP_PATH_UNKNOWN;
	volatile int64 inserted = 0;
	volatile bool conflict = false;
	bool		probe = s->upsert_probe;

	if (s->plan_batches > 0)
	{
		s->plan_batches--;
		return write_with_plan(s, rows, n);
	}
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		path = fast_write_begin(s, target, fw, n);
		if (path == SDP_PATH_MULTI_INSERT)
		{
			fast_write_start(fw);
			inserted = fast_write_rows(fw, rows, n, existing, &nexisting);
			fast_write_end(fw);
		}
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		if (edata->sqlerrcode != ERRCODE_UNIQUE_VIOLATION)
			ReThrowError(edata);
		conflict = true;
	}
	PG_END_TRY();

	note_write_path(s, path);
	if (path != SDP_PATH_MULTI_INSERT)
		return write_with_plan(s, rows, n);
	if (conflict)
	{
		s->upsert_probe = true;
		s->clean_batches = 0;
		return write_with_plan(s, rows, n);
	}
	if (probe)
	{
		s->clean_batches = nexisting > 0 ? 0 : s->clean_batches + 1;
		if (s->clean_batches >= SDP_UPSERT_CLEAN_BATCHES)
			s->upsert_probe = false;
		if (n >= 10 && nexisting * 10 >= n * 9)
			s->plan_batches = SDP_UPSERT_PLAN_BATCHES;
	}
	return inserted + write_with_plan(s, existing, nexisting);
}

/* Write rows (of row_desc) into the target; returns the rows inserted or updated. */
int64
sdp_table_write_rows(SdpTableWrite *s, HeapTuple *rows, int n)
{
	PlanTarget	target;
	FastWrite	fw;
	SdpWritePath path;
	int64		written;

	if (n == 0)
		return 0;
	if (s->max_payload > 0)
		check_message_sizes(s, rows, n);
	if (s->mode == SDP_MODE_UPSERT && n > 1)
	{
		HeapTuple  *kept = palloc(sizeof(HeapTuple) * n);

		n = collapse_by_key(s, rows, n, kept);
		rows = kept;
	}
	if (!plan_target(s, &target))
	{
		note_write_path(s, SDP_PATH_UNKNOWN);
		return write_with_plan(s, rows, n);
	}
	if (s->mode == SDP_MODE_UPSERT)
		return write_upsert(s, &target, rows, n);

	path = fast_write_begin(s, &target, &fw, n);
	note_write_path(s, path);
	if (path != SDP_PATH_MULTI_INSERT)
		return write_with_plan(s, rows, n);
	fast_write_start(&fw);
	written = fast_write_rows(&fw, rows, n, NULL, NULL);
	fast_write_end(&fw);
	return written;
}

/* ---- the transform's rows straight into the target's (append mode) ---- */

/*
 * A DestReceiver for the transform: each result row as the target's row
 * (the assignment casts and the defaults of the columns the flow does not
 * write, as fast_write_rows makes it), formed once and kept until the
 * write; SPI neither forms nor collects the rows.
 */
typedef struct FormReceiver
{
	DestReceiver pub;
	FastWrite  *fw;
	SdpTableWrite    *sink;
	int			nsrc;			/* the transform's columns */
	Datum	   *values;			/* the target's row being made */
	bool	   *isnull;
	HeapTuple  *rows;			/* the target's rows formed so far */
	int			nrows;
	int			maxrows;
} FormReceiver;

static bool
form_receive(TupleTableSlot *slot, DestReceiver *self)
{
	FormReceiver *r = (FormReceiver *) self;
	FastWrite  *fw = r->fw;
	EState	   *estate = fw->estate;
	ExprContext *econtext = GetPerTupleExprContext(estate);
	int			natts = fw->slot_desc->natts;
	MemoryContext oldcxt;

	ResetPerTupleExprContext(estate);
	oldcxt = MemoryContextSwitchTo(GetPerTupleMemoryContext(estate));
	slot_getallattrs(slot);
	Assert(slot->tts_tupleDescriptor->natts == r->nsrc);
	econtext->ecxt_scantuple = slot;
	memset(r->isnull, true, sizeof(bool) * natts);
	for (int j = 0; j < r->nsrc; j++)
	{
		AttrNumber	a = fw->dst[j];

		if (a == 0)
			continue;
		if (fw->cast[j] == NULL)
		{
			r->values[a - 1] = slot->tts_values[j];
			r->isnull[a - 1] = slot->tts_isnull[j];
		}
		else
			r->values[a - 1] = ExecEvalExpr(fw->cast[j], econtext, &r->isnull[a - 1]);
	}
	for (int d = 0; d < fw->ndefaults; d++)
	{
		AttrNumber	a = fw->def_att[d];

		r->values[a - 1] = ExecEvalExpr(fw->def[d], econtext, &r->isnull[a - 1]);
	}
	if (r->sink->max_payload > 0)
		check_message_size(r->sink, r->values[r->sink->rel_key_att - 1], r->isnull[r->sink->rel_key_att - 1],
						   r->values[r->sink->rel_value_att - 1], r->isnull[r->sink->rel_value_att - 1]);
	MemoryContextSwitchTo(estate->es_query_cxt);
	if (r->nrows == r->maxrows)
	{
		r->maxrows *= 2;
		r->rows = repalloc_huge(r->rows, sizeof(HeapTuple) * r->maxrows);
	}
	r->rows[r->nrows++] = heap_form_tuple(fw->slot_desc, r->values, r->isnull);
	MemoryContextSwitchTo(oldcxt);
	return true;
}

static void
form_startup(DestReceiver *self, int operation, TupleDesc typeinfo)
{
}

static void
form_shutdown(DestReceiver *self)
{
}

static void
form_destroy(DestReceiver *self)
{
}

/*
 * Run the transform over rows and write its rows into the target, in
 * append mode, by multi-insert: the transform's rows are made the target's
 * as they come (FormReceiver) instead of being formed by SPI, read back and
 * formed again.  The write's statement starts after the transform has run,
 * as it does for sdp_table_write_rows.  Returns false, having done nothing, when
 * the batch is not written by multi-insert (the caller runs the transform
 * and sdp_table_write_rows); else sets *nout to the transform's rows and
 * *written to the rows inserted.
 */
bool
sdp_table_write_transformed(SdpTableWrite *s, SdpTransform *t, HeapTuple *rows, int n,
						   int *nout, int64 *written)
{
	PlanTarget	target;
	FastWrite	fw;
	FormReceiver r;
	SdpWritePath path;
	MemoryContext oldcxt;

	if (s->mode != SDP_MODE_APPEND || t->plan == NULL || n == 0)
		return false;
	if (!plan_target(s, &target))
		return false;
	path = fast_write_begin(s, &target, &fw, n);
	if (path != SDP_PATH_MULTI_INSERT)
		return false;
	/* heap slots take the formed rows as they are (a buffer heap slot copies them) */
	if (fw.slot_ops != &TTSOpsBufferHeapTuple)
	{
		fast_write_abandon(&fw);
		return false;
	}
	note_write_path(s, path);
	fw.slot_ops = &TTSOpsHeapTuple;

	memset(&r, 0, sizeof(r));
	r.pub.receiveSlot = form_receive;
	r.pub.rStartup = form_startup;
	r.pub.rShutdown = form_shutdown;
	r.pub.rDestroy = form_destroy;
	r.pub.mydest = DestTuplestore;	/* any tag but DestNone and DestSPI: see sdp_transform_run_into */
	r.fw = &fw;
	r.sink = s;
	r.nsrc = s->row_desc->natts;
	oldcxt = MemoryContextSwitchTo(fw.estate->es_query_cxt);
	r.values = palloc(sizeof(Datum) * Max(fw.slot_desc->natts, 1));
	r.isnull = palloc(sizeof(bool) * Max(fw.slot_desc->natts, 1));
	r.maxrows = Max(n, 16);
	r.rows = palloc_extended(sizeof(HeapTuple) * r.maxrows, MCXT_ALLOC_HUGE);
	MemoryContextSwitchTo(oldcxt);

	*nout = sdp_transform_run_into(t, rows, n, (DestReceiver *) &r);
	*written = 0;
	if (r.nrows == 0)
	{
		fast_write_abandon(&fw);
		return true;
	}
	fast_write_start(&fw);
	for (int i = 0; i < r.nrows; i++)
	{
		TupleTableSlot *slot = fast_write_slot(&fw);

		CHECK_FOR_INTERRUPTS();
		ResetPerTupleExprContext(fw.estate);
		ExecClearTuple(slot);
		/* the slot frees the row when the flush clears it */
		ExecStoreHeapTuple(r.rows[i], slot, true);
		fast_write_buffer(&fw, slot, r.rows[i]->t_len);
	}
	fast_write_flush(&fw);
	fast_write_end(&fw);
	*written = r.nrows;
	return true;
}

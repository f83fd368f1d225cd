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
#include "worker/tombstone.h"

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


static uint32
key_hash(const char *key, size_t len)
{
	return hash_bytes((const unsigned char *) key, (int) len);
}

/*
 * Input rows [lo, hi) of a batch, some of which delete (Batch.row_tomb):
 * in *dels (*ndels of them) the indexes of those, and in *keep (*nkeep)
 * the other rows, less those a later deleting row of the range with the
 * same Kafka key deletes.  The deletes run first, then the rows kept are
 * written: what a key ends with is what its last message says.
 */
void
sdp_deletes_split(Batch *b, int lo, int hi, HeapTuple *keep, int *nkeep, int *dels, int *ndels)
{
	int			size = 16;
	int		   *last;			/* hash slot -> row index of the key's last deleting row, -1 */

	*nkeep = 0;
	*ndels = 0;
	for (int i = lo; i < hi; i++)
		if (b->row_tomb[i])
			dels[(*ndels)++] = i;
	if (*ndels == 0)
	{
		memcpy(keep, b->rows + lo, sizeof(HeapTuple) * (hi - lo));
		*nkeep = hi - lo;
		return;
	}

	while (size < *ndels * 2)
		size *= 2;
	last = palloc(sizeof(int) * size);
	for (int s = 0; s < size; s++)
		last[s] = -1;
	for (int d = 0; d < *ndels; d++)
	{
		int			i = dels[d];
		rd_kafka_message_t *m = b->msgs[b->row_msg[i]];
		uint32		s;

		if (m->key == NULL)
			continue;
		for (s = key_hash(m->key, m->key_len) & (size - 1); last[s] >= 0; s = (s + 1) & (size - 1))
		{
			rd_kafka_message_t *o = b->msgs[b->row_msg[last[s]]];

			if (o->key_len == m->key_len && memcmp(o->key, m->key, m->key_len) == 0)
				break;
		}
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
	pfree(last);
}

/*
 * Input rows [lo, hi) of a batch: delete the keys of its tombstones, and
 * return in *keep (*nkeep of them) the other rows, less those a later
 * tombstone of the range deletes.  Returns the number of rows deleted.
 */
int64
sdp_tombstone_apply(FlowWorker *w, Batch *b, int lo, int hi, HeapTuple *keep, int *nkeep)
{
	int		   *dels = palloc(sizeof(int) * Max(hi - lo, 1));
	int			ndels;
	Datum	   *keys;
	Datum		arg;

	sdp_deletes_split(b, lo, hi, keep, nkeep, dels, &ndels);
	if (ndels == 0)
		return 0;
	/* a key deleted twice is one row: ANY holds it twice */
	keys = palloc(sizeof(Datum) * ndels);
	for (int d = 0; d < ndels; d++)
	{
		rd_kafka_message_t *m = b->msgs[b->row_msg[dels[d]]];

		keys[d] = PointerGetDatum(cstring_to_text_with_len(m->key, (int) m->key_len));
	}
	arg = PointerGetDatum(construct_array(keys, ndels, TEXTOID, -1, false, TYPALIGN_INT));
	if (SPI_execute_plan(w->prep.tombstone_plan, &arg, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not delete the rows of tombstones");
	return (int64) SPI_processed;
}

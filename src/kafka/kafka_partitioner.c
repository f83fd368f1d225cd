/*
 * kafka_partitioner.c
 *		sdp_partition_for_key(key, partitions, partitioner): the partition a
 *		Kafka producer chooses for a message key, computed by librdkafka's
 *		own partitioners.
 *
 * When servers hold disjoint shares of a topic's partitions (the flow
 * option partitions), this says which server holds a key: an application
 * sends its read there, and on a router whose table is partitioned by LIST
 * (kafka_partition), "kafka_partition = sdp_partition_for_key('k', 8)"
 * is folded to a constant at planning (the function is immutable), which
 * prunes the plan to the one server (README, "Scaling out").
 *
 * librdkafka's hash partitioners compute from the key bytes and the
 * partition count alone: murmur2 (the Java client's default for keyed
 * messages, (murmur2(key) & 0x7fffffff) % n), consistent (CRC32, % n) and
 * fnv1a (Sarama's default).  None reads its topic handle (librdkafka 2.0.2,
 * rdkafka_msg.c; only the random partitioner does, to skip unavailable
 * partitions), so they are called with none.  The *_random variants hash a
 * key the same way and choose at random for a message without a key (for
 * consistent_random, also for an empty key): the key does not say where
 * such a message went, and the answer is NULL.  A NULL key is not a key
 * (the Java client's default partitioner does not hash it: it sticks to a
 * partition for a batch), so the function is STRICT and returns NULL.
 */
#include "sdp.h"
#include "compat.h"

#include <librdkafka/rdkafka.h>

#include "fmgr.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(sdp_partition_for_key);

typedef int32_t (*SdpPartitioner) (const rd_kafka_topic_t *rkt, const void *key, size_t keylen,
								   int32_t partition_cnt, void *rkt_opaque, void *msg_opaque);

typedef struct SdpPartitionerName
{
	const char *name;			/* as librdkafka's producer property "partitioner" names it */
	SdpPartitioner fn;
	bool		random_if_empty;	/* an empty key goes to a random partition */
} SdpPartitionerName;

static const SdpPartitionerName partitioners[] = {
	{"murmur2", rd_kafka_msg_partitioner_murmur2, false},
	{"murmur2_random", rd_kafka_msg_partitioner_murmur2, false},
	{"consistent", rd_kafka_msg_partitioner_consistent, false},
	{"consistent_random", rd_kafka_msg_partitioner_consistent, true},
	{"fnv1a", rd_kafka_msg_partitioner_fnv1a, false},
	{"fnv1a_random", rd_kafka_msg_partitioner_fnv1a, false},
};

/*
 * sdp_partition_for_key(key text | bytea, partitions int, partitioner text)
 * → int: a text key is hashed as its bytes in the database encoding (what
 * a producer sends when both are UTF-8).
 */
Datum
sdp_partition_for_key(PG_FUNCTION_ARGS)
{
	bytea	   *key = PG_GETARG_BYTEA_PP(0);	/* text has the same layout */
	int32		npartitions = PG_GETARG_INT32(1);
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(2));
	const SdpPartitionerName *p = NULL;
	size_t		keylen = VARSIZE_ANY_EXHDR(key);
	int32		partition;

	for (int i = 0; i < lengthof(partitioners); i++)
		if (strcmp(name, partitioners[i].name) == 0)
			p = &partitioners[i];
	if (p == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown partitioner \"%s\"", name),
				 errhint("Partitioners are murmur2 (the Java client's default), consistent (CRC32), fnv1a, "
						 "and librdkafka's murmur2_random, consistent_random and fnv1a_random, which hash a key alike.")));
	if (npartitions <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a topic has at least one partition, not %d", npartitions),
				 errhint("Give the number of partitions of the topic the key is produced to.")));
	if (keylen == 0 && p->random_if_empty)
		PG_RETURN_NULL();

	/* VARDATA_ANY is a valid pointer for an empty key too (zlib's crc32 returns 0 for a NULL buffer) */
	partition = p->fn(NULL, VARDATA_ANY(key), keylen, npartitions, NULL, NULL);
	Assert(partition >= 0 && partition < npartitions);
	PG_RETURN_INT32(partition);
}

-- sdp_partition_for_key(key, partitions, partitioner): the partition Kafka
-- producers choose for a key, by librdkafka's own partitioners.
CREATE EXTENSION sdp_ext;

CREATE FUNCTION pg_temp.refused(stmt text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE st text; msg text; hint text;
BEGIN
  EXECUTE stmt;
  RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT;
  RETURN st || ': ' || msg || CASE WHEN hint <> '' THEN ' | hint: ' || hint ELSE '' END;
END $$;

-- Over 2147483647 partitions the partition is the hash itself (made
-- positive): the Java client's murmur2 of librdkafka's and Kafka's test
-- vectors, 'kafka' 0xd067cf64, 'giberish123456789' 0x8f552b0c, '1234'
-- 0x9fc97b14, '' 0x106e08d9; the standard CRC32 check value of
-- '123456789', 0xcbf43926; Sarama's FNV-1a of 'kafka', 0x0d33c4e1.
SELECT k, sdp_partition_for_key(k, 2147483647) AS murmur2,
       sdp_partition_for_key(k, 2147483647) = (h & x'7fffffff'::int) % 2147483647 AS java_murmur2
  FROM (VALUES ('kafka', x'd067cf64'::int), ('giberish123456789', x'8f552b0c'::int),
               ('1234', x'9fc97b14'::int), ('', x'106e08d9'::int)) AS v(k, h);
SELECT sdp_partition_for_key('123456789', 2147483647, 'consistent') = 3421780262 % 2147483647 AS crc32;
SELECT sdp_partition_for_key('kafka', 2147483647, 'fnv1a') = x'0d33c4e1'::int AS fnv1a;
-- over 8 partitions; the bytea variant hashes the same bytes; the default is murmur2
SELECT k, sdp_partition_for_key(k, 8) AS murmur2, sdp_partition_for_key(k, 8, 'consistent') AS consistent,
       sdp_partition_for_key(k, 8, 'fnv1a') AS fnv1a,
       sdp_partition_for_key(convert_to(k, 'UTF8'), 8) = sdp_partition_for_key(k, 8, 'murmur2') AS bytea_alike
  FROM unnest(ARRAY['kafka', 'a1b2c3', '4ca2b1', '']) AS k;
-- librdkafka's names of its producer property "partitioner": alike for a key;
-- consistent_random sends an empty key to a random partition: NULL
SELECT sdp_partition_for_key('kafka', 8, 'murmur2_random') AS murmur2_random,
       sdp_partition_for_key('kafka', 8, 'consistent_random') AS consistent_random,
       sdp_partition_for_key('kafka', 8, 'fnv1a_random') AS fnv1a_random,
       sdp_partition_for_key('', 8, 'consistent_random') IS NULL AS empty_key_random;
-- a NULL key is not hashed by producers: NULL (STRICT)
SELECT sdp_partition_for_key(NULL::text, 8) IS NULL AS null_key, sdp_partition_for_key(NULL::bytea, 8) IS NULL AS null_bytea_key;
-- one partition: 0
SELECT sdp_partition_for_key('kafka', 1) AS one_partition;
-- refused: a partitioner that does not hash keys, or no partitions
SELECT pg_temp.refused($$SELECT sdp_partition_for_key('kafka', 8, 'random')$$);
SELECT pg_temp.refused($$SELECT sdp_partition_for_key('kafka', 8, 'Murmur2')$$);
SELECT pg_temp.refused($$SELECT sdp_partition_for_key('kafka', 0)$$);
SELECT pg_temp.refused($$SELECT sdp_partition_for_key('kafka'::bytea, -3, 'consistent')$$);
-- immutable, so a call with constants is folded at planning (what prunes a
-- table partitioned by kafka_partition to one partition)
SELECT provolatile, proisstrict, proparallel FROM pg_proc WHERE proname = 'sdp_partition_for_key' ORDER BY oid;
CREATE TABLE keyed (kafka_partition int, kafka_key text) PARTITION BY LIST (kafka_partition);
CREATE TABLE keyed_a PARTITION OF keyed FOR VALUES IN (0, 1, 2, 3);
CREATE TABLE keyed_b PARTITION OF keyed FOR VALUES IN (4, 5, 6, 7);
EXPLAIN (COSTS OFF) SELECT * FROM keyed WHERE kafka_partition = sdp_partition_for_key('kafka', 8) AND kafka_key = 'kafka';
DROP TABLE keyed;

DROP EXTENSION sdp_ext;

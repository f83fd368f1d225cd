/* sdp_ext--0.3--0.4.sql: past one server (issue 13) */
\echo Use "ALTER EXTENSION sdp_ext UPDATE TO '0.4'" to load this file. \quit

-- The partition a Kafka producer chooses for a key, by librdkafka's own
-- partitioners: murmur2 (the Java client's default), consistent (CRC32,
-- librdkafka's), fnv1a, and librdkafka's *_random names of them.  With
-- servers holding disjoint shares of a topic (the flow option partitions),
-- it says which server holds a key.  A NULL key is not hashed by producers
-- (NULL); a text key is hashed as its bytes in the database encoding.
CREATE FUNCTION sdp_partition_for_key(key text, partitions integer, partitioner text DEFAULT 'murmur2')
RETURNS integer LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'sdp_partition_for_key';
COMMENT ON FUNCTION sdp_partition_for_key(text, integer, text) IS
  'the partition of a topic of that many partitions that Kafka producers choose for the key (murmur2: the Java client''s default)';
CREATE FUNCTION sdp_partition_for_key(key bytea, partitions integer, partitioner text DEFAULT 'murmur2')
RETURNS integer LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'sdp_partition_for_key';
COMMENT ON FUNCTION sdp_partition_for_key(bytea, integer, text) IS
  'the partition of a topic of that many partitions that Kafka producers choose for the key (murmur2: the Java client''s default)';

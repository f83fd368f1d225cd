/* sdp_ext--0.3--0.4.sql: several servers (issue 13), changing and replaying flows (issue 15) */
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

-- Replay or skip ahead: move a stopped flow's offsets to 'earliest',
-- 'latest', the first message at or after a timestamp, or explicit
-- {"partition": offset} positions.  A stateful flow's state is cleared.
-- Returns the new offsets, {"partition": offset}.
CREATE FUNCTION sdp_reset_flow(flow text, "to" text)
RETURNS jsonb LANGUAGE C STRICT AS 'MODULE_PATHNAME', 'sdp_reset_flow';
COMMENT ON FUNCTION sdp_reset_flow(text, text) IS
  'move a stopped flow''s offsets to ''earliest'', ''latest'' or a timestamp (its owner only); clears a stateful flow''s state';
CREATE FUNCTION sdp_reset_flow(flow text, offsets jsonb)
RETURNS jsonb LANGUAGE C STRICT AS 'MODULE_PATHNAME', 'sdp_reset_flow_offsets';
COMMENT ON FUNCTION sdp_reset_flow(text, jsonb) IS
  'move a stopped flow''s offsets of the given partitions, {"partition": offset} (its owner only); clears a stateful flow''s state';

-- Change a flow's transform, options or schema and keep its place: checked
-- as a new declaration, applied at a batch boundary (the launcher restarts
-- its workers from their committed offsets); a stateful flow keeps its state
-- unless its operator's options change ("reset_state": true then clears it).
CREATE FUNCTION sdp_alter_flow(name text, transform text DEFAULT NULL,
                               options jsonb DEFAULT NULL, schema text DEFAULT NULL)
RETURNS void LANGUAGE C AS 'MODULE_PATHNAME', 'sdp_alter_flow';
COMMENT ON FUNCTION sdp_alter_flow(text, text, jsonb, text) IS
  'change a flow''s transform, options (merged) or schema (its owner only); it goes on from its offsets';

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

-- issue 14: Kafka sinks ------------------------------------------------------
-- A flow writes either into a table (target) or to a Kafka topic (sink).  A
-- sink flow's rows go into sdp.outbox in the flow's batch transaction, with
-- the source offsets; the flow's worker produces them with a transactional
-- producer and deletes what it has produced (docs/design-issue14.md).

-- Kafka sinks.  Options are librdkafka producer properties and may hold
-- credentials, so the table is readable by superusers only; sdp.sink_list
-- shows it masked, as sdp.source_list does sources.
CREATE TABLE sdp.sinks (
    name              text PRIMARY KEY,
    bootstrap_servers text NOT NULL,
    topic             text NOT NULL,
    options           jsonb NOT NULL DEFAULT '{}',
    owner             regrole NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    CHECK (jsonb_typeof(options) = 'object')
);
REVOKE ALL ON sdp.sinks FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('sdp.sinks', '');

CREATE VIEW sdp.sink_list AS
SELECT s.name, s.bootstrap_servers, s.topic,
       (SELECT coalesce(jsonb_object_agg(o.key,
                 CASE WHEN o.key ~* '(password|secret|token|sasl\.oauthbearer\.config|key\.pem|jaas)'
                      THEN '"********"'::jsonb ELSE o.value END), '{}'::jsonb)
          FROM jsonb_each(s.options) o) AS options,
       s.owner, s.created_at
  FROM sdp.sinks s
 WHERE pg_has_role(s.owner, 'MEMBER');
GRANT SELECT ON sdp.sink_list TO PUBLIC;

-- A flow has a target table or a sink, not both.
ALTER TABLE sdp.flows ALTER COLUMN target DROP NOT NULL,
    ADD COLUMN sink text REFERENCES sdp.sinks (name),
    ADD CONSTRAINT flows_target_or_sink CHECK ((target IS NULL) <> (sink IS NULL));
GRANT SELECT (sink) ON sdp.flows TO PUBLIC;

-- The rows sink flows have committed and not yet produced, in commit order
-- (seq).  The flow's worker writes them as the flow's owner (the policy lets
-- a role write rows of its own flows only), and produces and deletes them.
CREATE SEQUENCE sdp.outbox_seq;
GRANT USAGE ON SEQUENCE sdp.outbox_seq TO PUBLIC;
CREATE TABLE sdp.outbox (
    flow_id  bigint NOT NULL REFERENCES sdp.flows (id) ON DELETE CASCADE,
    seq      bigint NOT NULL DEFAULT nextval('sdp.outbox_seq'),
    key      text,
    value    text NOT NULL,
    PRIMARY KEY (flow_id, seq)
);
ALTER SEQUENCE sdp.outbox_seq OWNED BY sdp.outbox.seq;
REVOKE ALL ON sdp.outbox FROM PUBLIC;
GRANT INSERT ON sdp.outbox TO PUBLIC;
ALTER TABLE sdp.outbox ENABLE ROW LEVEL SECURITY;
CREATE POLICY outbox_flow_owner ON sdp.outbox FOR INSERT
    WITH CHECK (EXISTS (SELECT 1 FROM sdp.flows f
                         WHERE f.id = flow_id AND f.sink IS NOT NULL AND pg_has_role(f.owner, 'MEMBER')));
SELECT pg_catalog.pg_extension_config_dump('sdp.outbox', '');
SELECT pg_catalog.pg_extension_config_dump('sdp.outbox_seq', '');

CREATE FUNCTION sdp_create_sink(name text, bootstrap_servers text, topic text,
                                options jsonb DEFAULT '{}')
RETURNS void LANGUAGE C AS 'MODULE_PATHNAME', 'sdp_create_sink';
COMMENT ON FUNCTION sdp_create_sink(text, text, text, jsonb) IS
  'declare a Kafka sink: brokers, topic and librdkafka producer properties';

CREATE FUNCTION sdp_drop_sink(name text)
RETURNS void LANGUAGE C STRICT AS 'MODULE_PATHNAME', 'sdp_drop_sink';

-- sdp_create_flow gains sink (last, so that calls by position keep their
-- meaning); target and schema get defaults so that a sink flow can be
-- declared by name without a target.  Flows already declared are catalog
-- rows, untouched.
DROP FUNCTION sdp_create_flow(text, text, regclass, text, text, text, jsonb);
CREATE FUNCTION sdp_create_flow(name text, source text, target regclass DEFAULT NULL,
                                schema text DEFAULT NULL,
                                transform text DEFAULT NULL, operator text DEFAULT NULL,
                                options jsonb DEFAULT '{}', sink text DEFAULT NULL)
RETURNS void LANGUAGE C AS 'MODULE_PATHNAME', 'sdp_create_flow';
COMMENT ON FUNCTION sdp_create_flow(text, text, regclass, text, text, text, jsonb, text) IS
  'declare a flow from a source into a table or a Kafka sink, and start it';

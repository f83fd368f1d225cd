/* sdp_ext--0.1.sql: catalogs and SQL surface of sdp_ext */

\echo Use "CREATE EXTENSION sdp_ext" to load this file. \quit

CREATE SCHEMA sdp;
COMMENT ON SCHEMA sdp IS 'catalogs of sdp_ext: sources, flows, offsets, dead letters';
GRANT USAGE ON SCHEMA sdp TO PUBLIC;

-- Kafka sources.  Options may hold credentials (sasl.password, ...), so the
-- table is readable by superusers only; sdp.source_list shows it masked.
CREATE TABLE sdp.sources (
    name              text PRIMARY KEY,
    bootstrap_servers text NOT NULL,
    topic             text NOT NULL,
    options           jsonb NOT NULL DEFAULT '{}',
    owner             name NOT NULL DEFAULT current_user,
    created_at        timestamptz NOT NULL DEFAULT now(),
    CHECK (jsonb_typeof(options) = 'object')
);
REVOKE ALL ON sdp.sources FROM PUBLIC;

CREATE VIEW sdp.source_list AS
SELECT s.name, s.bootstrap_servers, s.topic,
       (SELECT coalesce(jsonb_object_agg(o.key,
                 CASE WHEN o.key ~* '(password|secret|token|sasl\.oauthbearer\.config|key\.pem|jaas)'
                      THEN '"********"'::jsonb ELSE o.value END), '{}'::jsonb)
          FROM jsonb_each(s.options) o) AS options,
       s.owner, s.created_at
  FROM sdp.sources s
 WHERE pg_has_role(s.owner, 'MEMBER');
GRANT SELECT ON sdp.source_list TO PUBLIC;

-- Declared flows.  'enabled' is what the owner asked for (sdp_start_flow /
-- sdp_stop_flow); failed_at is set when a flow stopped itself on an error
-- and cleared by sdp_start_flow.  The launcher runs every enabled flow that
-- has not failed.  target is kept as a qualified name, not an OID, so that
-- pg_dump and pg_upgrade carry it.
CREATE TABLE sdp.flows (
    id            bigserial UNIQUE,
    name          text PRIMARY KEY,
    source        text NOT NULL REFERENCES sdp.sources (name),
    target        text NOT NULL,
    schema        text NOT NULL,
    transform     text,
    operator      text,
    options       jsonb NOT NULL DEFAULT '{}',
    owner         name NOT NULL DEFAULT current_user,
    enabled       boolean NOT NULL DEFAULT true,
    failed_at     timestamptz,
    last_error    text,
    watermark     timestamptz,      -- event-time flows: the watermark of the last state checkpoint
    created_at    timestamptz NOT NULL DEFAULT now(),
    CHECK (jsonb_typeof(options) = 'object')
);
GRANT SELECT ON sdp.flows TO PUBLIC;

-- The next Kafka offset of every partition a flow has consumed, written in
-- the same transaction as the flow's target rows (exactly-once).
-- state_offset is where a stateful flow's last state checkpoint stands: it
-- restarts there with that state and replays what follows.
-- A flow re-created under the same name gets a new id, so a worker of the
-- old flow that is still stopping can never write the new flow's offsets.
CREATE TABLE sdp.offsets (
    flow_id      bigint NOT NULL REFERENCES sdp.flows (id) ON DELETE CASCADE,
    partition    integer NOT NULL,
    next_offset  bigint NOT NULL,
    state_offset bigint,
    max_event_time timestamptz,     -- event-time flows: the partition's highest event time at the checkpoint
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (flow_id, partition)
);

-- The checkpointed state of stateful flows, one row per key, written with
-- the offsets it corresponds to (sdp.offsets.state_offset).  Rows go with
-- their flow in sdp_drop_flow.
CREATE TABLE sdp.state_checkpoints (
    flow_id    bigint NOT NULL,
    key        text NOT NULL,
    state      bytea NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (flow_id, key)
);
GRANT SELECT ON sdp.offsets TO PUBLIC;

-- The aggregations of window_agg flows (sdp_create_aggregation): each
-- folds the rows matching its filter into windows per entity (the values of
-- its group_by fields) and emits one row per window.
CREATE TABLE sdp.aggregations (
    flow               text NOT NULL REFERENCES sdp.flows (name) ON DELETE CASCADE,
    name               text NOT NULL,
    group_by           text[] NOT NULL,
    operation          text NOT NULL CHECK (operation IN ('count', 'sum', 'avg', 'ratio', 'approx_distinct')),
    value              text,
    filter             text NOT NULL DEFAULT 'true',
    denominator_filter text,
    window_size        interval NOT NULL CHECK (window_size > '0'),
    allowance          interval NOT NULL DEFAULT '0',
    slide              interval,
    created_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (flow, name)
);
GRANT SELECT ON sdp.aggregations TO PUBLIC;

-- Messages a flow could not process, with where they came from and why.
-- Each role sees the dead letters of the flows it owns.
-- A row an operator emitted and the target refused has no partition and
-- offset: it comes from no single message (its payload is the row as JSON).
CREATE TABLE sdp.dead_letters (
    id              bigserial PRIMARY KEY,
    flow_id         bigint,
    flow            text NOT NULL,
    owner           name NOT NULL,
    kafka_topic     text,
    kafka_partition integer,
    kafka_offset    bigint,
    kafka_key       text,
    kafka_timestamp timestamptz,
    payload         bytea,
    payload_text    text,
    stage           text NOT NULL CHECK (stage IN ('decode', 'transform', 'write', 'late')),
    error           text NOT NULL,
    sqlstate        text,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON sdp.dead_letters (flow, kafka_partition, kafka_offset);
-- a message replayed after a restart is dead-lettered once
CREATE UNIQUE INDEX dead_letters_message ON sdp.dead_letters (flow_id, kafka_partition, kafka_offset)
    WHERE kafka_offset IS NOT NULL;
ALTER TABLE sdp.dead_letters ENABLE ROW LEVEL SECURITY;
CREATE POLICY dead_letters_owner ON sdp.dead_letters
    USING (pg_has_role(owner, 'MEMBER'));
GRANT SELECT, DELETE ON sdp.dead_letters TO PUBLIC;

-- pg_dump keeps declared sources and flows, their offsets and dead letters.
SELECT pg_catalog.pg_extension_config_dump('sdp.sources', '');
SELECT pg_catalog.pg_extension_config_dump('sdp.flows', '');
SELECT pg_catalog.pg_extension_config_dump('sdp.flows_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('sdp.offsets', '');
SELECT pg_catalog.pg_extension_config_dump('sdp.state_checkpoints', '');
SELECT pg_catalog.pg_extension_config_dump('sdp.aggregations', '');
SELECT pg_catalog.pg_extension_config_dump('sdp.dead_letters', '');
SELECT pg_catalog.pg_extension_config_dump('sdp.dead_letters_id_seq', '');

-- Sources -------------------------------------------------------------------

CREATE FUNCTION sdp_create_source(name text, bootstrap_servers text, topic text,
                                  options jsonb DEFAULT '{}')
RETURNS void LANGUAGE C AS 'MODULE_PATHNAME', 'sdp_create_source';
COMMENT ON FUNCTION sdp_create_source(text, text, text, jsonb) IS
  'declare a Kafka source: brokers, topic, librdkafka properties and starting_offsets';

CREATE FUNCTION sdp_drop_source(name text)
RETURNS void LANGUAGE C STRICT AS 'MODULE_PATHNAME', 'sdp_drop_source';

-- Flows ---------------------------------------------------------------------

CREATE FUNCTION sdp_create_flow(name text, source text, target regclass, schema text,
                                transform text DEFAULT NULL, operator text DEFAULT NULL,
                                options jsonb DEFAULT '{}')
RETURNS void LANGUAGE C AS 'MODULE_PATHNAME', 'sdp_create_flow';
COMMENT ON FUNCTION sdp_create_flow(text, text, regclass, text, text, text, jsonb) IS
  'declare a flow from a source into a table, and start it';

CREATE FUNCTION sdp_start_flow(name text)
RETURNS void LANGUAGE C STRICT AS 'MODULE_PATHNAME', 'sdp_start_flow';
CREATE FUNCTION sdp_stop_flow(name text)
RETURNS void LANGUAGE C STRICT AS 'MODULE_PATHNAME', 'sdp_stop_flow';
CREATE FUNCTION sdp_drop_flow(name text)
RETURNS void LANGUAGE C STRICT AS 'MODULE_PATHNAME', 'sdp_drop_flow';

-- Aggregations (operator window_agg) ----------------------------------------

CREATE FUNCTION sdp_create_aggregation(flow text, name text, group_by text[], operation text,
                                       value text DEFAULT NULL, filter text DEFAULT 'true',
                                       denominator_filter text DEFAULT NULL,
                                       window_size interval DEFAULT NULL, allowance interval DEFAULT '0',
                                       slide interval DEFAULT NULL)
RETURNS void LANGUAGE C AS 'MODULE_PATHNAME', 'sdp_create_aggregation';
COMMENT ON FUNCTION sdp_create_aggregation(text, text, text[], text, text, text, text, interval, interval, interval) IS
  'declare an aggregation of a window_agg flow: count, sum, avg, ratio or approx_distinct over event-time windows';

CREATE FUNCTION sdp_drop_aggregation(flow text, name text)
RETURNS void LANGUAGE C AS 'MODULE_PATHNAME', 'sdp_drop_aggregation';

CREATE FUNCTION sdp_load_aggregations(flow text, definitions jsonb)
RETURNS integer LANGUAGE C AS 'MODULE_PATHNAME', 'sdp_load_aggregations';
COMMENT ON FUNCTION sdp_load_aggregations(text, jsonb) IS
  'define or replace aggregations from a JSON array (e.g. a file kept in version control)';

CREATE FUNCTION sdp_create_window_table(name text)
RETURNS regclass LANGUAGE C AS 'MODULE_PATHNAME', 'sdp_create_window_table';
COMMENT ON FUNCTION sdp_create_window_table(text) IS
  'create a target table of the window_agg schema, indexed for key-range reads';

-- Monitoring ----------------------------------------------------------------

CREATE FUNCTION sdp_flow_runtime(
    OUT flow text, OUT state text, OUT pid integer,
    OUT messages_read bigint, OUT rows_written bigint, OUT rows_filtered bigint,
    OUT rows_dead_lettered bigint, OUT rows_skipped bigint, OUT batches bigint,
    OUT last_commit_at timestamptz,
    OUT broker_ok boolean, OUT broker_error text, OUT broker_error_at timestamptz,
    OUT last_error text, OUT last_error_at timestamptz,
    OUT started_at timestamptz, OUT restarts integer,
    OUT state_bytes bigint, OUT timers_fired bigint, OUT last_checkpoint_at timestamptz,
    OUT rows_late bigint, OUT watermark timestamptz)
RETURNS SETOF record LANGUAGE C STRICT AS 'MODULE_PATHNAME', 'sdp_flow_runtime';

-- The state of a running stateful flow, read live from shared memory: per
-- key, each value state, the map state and the pending timers, as jsonb.
CREATE FUNCTION sdp_flow_state(name text, OUT key text, OUT state text, OUT value jsonb)
RETURNS SETOF record LANGUAGE C STRICT AS 'MODULE_PATHNAME', 'sdp_flow_state';
COMMENT ON FUNCTION sdp_flow_state(text) IS
  'live state of a stateful flow: key, state name, value (jsonb)';

CREATE FUNCTION sdp_flow_partitions(flow text,
    OUT partition integer, OUT committed_offset bigint, OUT high_watermark bigint)
RETURNS SETOF record LANGUAGE C STRICT AS 'MODULE_PATHNAME', 'sdp_flow_partitions';

CREATE FUNCTION sdp_flow_progress(name text)
RETURNS jsonb LANGUAGE C STRICT AS 'MODULE_PATHNAME', 'sdp_flow_progress';
COMMENT ON FUNCTION sdp_flow_progress(text) IS
  'latest progress report of a flow: rates and P0/P50/P90/P95/P99 latencies';

-- One row per declared flow: its state, where it is in every partition,
-- what it has done since its worker started, and its last errors.
CREATE VIEW sdp.flow_status AS
SELECT f.name AS flow,
       f.owner,
       f.source,
       s.topic,
       f.target,
       f.operator,
       CASE WHEN f.failed_at IS NOT NULL THEN 'failed'
            WHEN NOT f.enabled THEN CASE WHEN r.pid IS NOT NULL THEN 'stopping' ELSE 'stopped' END
            ELSE coalesce(r.state, 'starting')
       END AS state,
       r.pid,
       p.lag,
       p.partitions,
       coalesce(r.messages_read, 0) AS messages_read,
       coalesce(r.rows_written, 0) AS rows_written,
       coalesce(r.rows_filtered, 0) AS rows_filtered,
       coalesce(r.rows_dead_lettered, 0) AS rows_dead_lettered,
       coalesce(r.rows_skipped, 0) AS rows_skipped,
       coalesce(r.batches, 0) AS batches,
       r.last_commit_at,
       r.broker_ok,
       r.broker_error,
       r.broker_error_at,
       CASE WHEN f.failed_at IS NOT NULL THEN f.last_error ELSE r.last_error END AS last_error,
       CASE WHEN f.failed_at IS NOT NULL THEN f.failed_at ELSE r.last_error_at END AS last_error_at,
       r.started_at,
       coalesce(r.restarts, 0) AS restarts,
       r.state_bytes,
       r.timers_fired,
       r.last_checkpoint_at,
       coalesce(r.rows_late, 0) AS rows_late,
       r.watermark
  FROM sdp.flows f
  JOIN sdp.sources s ON s.name = f.source
  LEFT JOIN sdp_flow_runtime() r ON r.flow = f.name
  LEFT JOIN LATERAL (
        -- a running worker knows its offsets best (a stateful flow stores them at checkpoints)
        SELECT sum(greatest(rp.high_watermark - coalesce(rp.committed_offset, o.next_offset), 0)) AS lag,
               jsonb_agg(jsonb_build_object(
                   'partition', o.partition,
                   'committed_offset', coalesce(rp.committed_offset, o.next_offset),
                   'high_watermark', rp.high_watermark,
                   'lag', greatest(rp.high_watermark - coalesce(rp.committed_offset, o.next_offset), 0))
                         ORDER BY o.partition) AS partitions
          FROM sdp.offsets o
          LEFT JOIN sdp_flow_partitions(f.name) rp ON rp.partition = o.partition
         WHERE o.flow_id = f.id) p ON true;
GRANT SELECT ON sdp.flow_status TO PUBLIC;

CREATE FUNCTION sdp_flow_status()
RETURNS SETOF sdp.flow_status LANGUAGE sql STABLE
AS 'SELECT * FROM sdp.flow_status ORDER BY flow';

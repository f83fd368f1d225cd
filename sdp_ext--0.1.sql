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
    created_at    timestamptz NOT NULL DEFAULT now(),
    CHECK (jsonb_typeof(options) = 'object')
);
GRANT SELECT ON sdp.flows TO PUBLIC;

-- The next Kafka offset of every partition a flow has consumed, written in
-- the same transaction as the flow's target rows (exactly-once).
CREATE TABLE sdp.offsets (
    flow        text NOT NULL REFERENCES sdp.flows (name) ON DELETE CASCADE,
    partition   integer NOT NULL,
    next_offset bigint NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (flow, partition)
);
GRANT SELECT ON sdp.offsets TO PUBLIC;

-- Messages a flow could not process, with where they came from and why.
-- Each role sees the dead letters of the flows it owns.
CREATE TABLE sdp.dead_letters (
    id              bigserial PRIMARY KEY,
    flow            text NOT NULL,
    owner           name NOT NULL,
    kafka_topic     text NOT NULL,
    kafka_partition integer NOT NULL,
    kafka_offset    bigint NOT NULL,
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
ALTER TABLE sdp.dead_letters ENABLE ROW LEVEL SECURITY;
CREATE POLICY dead_letters_owner ON sdp.dead_letters
    USING (pg_has_role(owner, 'MEMBER'));
GRANT SELECT, DELETE ON sdp.dead_letters TO PUBLIC;

-- pg_dump keeps declared sources and flows, their offsets and dead letters.
SELECT pg_catalog.pg_extension_config_dump('sdp.sources', '');
SELECT pg_catalog.pg_extension_config_dump('sdp.flows', '');
SELECT pg_catalog.pg_extension_config_dump('sdp.offsets', '');
SELECT pg_catalog.pg_extension_config_dump('sdp.dead_letters', '');
SELECT pg_catalog.pg_extension_config_dump('sdp.dead_letters_id_seq', '');

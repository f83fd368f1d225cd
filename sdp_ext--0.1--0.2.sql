/* sdp_ext--0.1--0.2.sql: from 0.1 to 0.2 */

\echo Use "ALTER EXTENSION sdp_ext UPDATE" to load this file. \quit

-- Whether a flow has stored offsets before: set in the same transaction as
-- its first sdp.offsets rows, dumped and restored with sdp.flows.  A flow
-- that has, but has no sdp.offsets row at all (a restore puts sdp.flows back
-- before sdp.offsets), waits for its offsets instead of reading the topic
-- again from starting_offsets.
ALTER TABLE sdp.flows ADD COLUMN offsets_stored boolean NOT NULL DEFAULT false;
UPDATE sdp.flows f SET offsets_stored = true
 WHERE EXISTS (SELECT 1 FROM sdp.offsets o WHERE o.flow_id = f.id);

-- The launcher deletes dead letters older than sdp.dead_letter_retention in
-- batches: by this index, not by scanning the table.
CREATE INDEX dead_letters_created_at ON sdp.dead_letters (created_at);

-- Owners by OID (issue 11, item 5) ------------------------------------------
-- sdp.sources, sdp.flows and sdp.dead_letters keep their owner as a regrole:
-- the role's OID, read and written by name (pg_dump and pg_restore carry
-- it by name).  A role dropped after it declared a flow can no longer leave
-- a flow behind that a new role of the same name would inherit: DROP ROLE
-- of an owner is refused, REASSIGN OWNED and DROP OWNED take sdp_ext's
-- objects along (the library's ProcessUtility hook, src/roles.c).

-- A row whose owner role no longer exists (dropped under 0.1) has no OID to
-- keep: the update stops and says which, rather than guess.
DO $$
DECLARE
    orphans text;
BEGIN
    SELECT string_agg(format('%s "%s" (role "%s")', kind, name, owner), ', ' ORDER BY kind, name)
      INTO orphans
      FROM (SELECT 'source' AS kind, s.name, s.owner FROM sdp.sources s
            UNION ALL
            SELECT 'flow', f.name, f.owner FROM sdp.flows f
            UNION
            SELECT 'dead letters of flow', d.flow, d.owner FROM sdp.dead_letters d) o
     WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = o.owner);
    IF orphans IS NOT NULL THEN
        RAISE EXCEPTION 'cannot update sdp_ext to 0.2: some sources, flows or dead letters belong to roles that no longer exist'
            USING ERRCODE = 'undefined_object',
                  DETAIL = 'Without an owner: ' || orphans || '.',
                  HINT = 'Create those roles again, or drop their flows and sources (sdp_drop_flow, sdp_drop_source) and delete their dead letters, then run ALTER EXTENSION sdp_ext UPDATE again.';
    END IF;
END
$$;

-- What depends on the owner columns goes and comes back around the change.
DROP FUNCTION sdp_flow_status();
DROP VIEW sdp.flow_status;
DROP VIEW sdp.source_list;
DROP POLICY dead_letters_owner ON sdp.dead_letters;

-- quote_ident: regrole's input reads an identifier (a mixed-case name
-- unquoted would be folded to lower case)
ALTER TABLE sdp.sources ALTER COLUMN owner DROP DEFAULT,
    ALTER COLUMN owner TYPE regrole USING pg_catalog.quote_ident(owner)::regrole;
ALTER TABLE sdp.flows ALTER COLUMN owner DROP DEFAULT,
    ALTER COLUMN owner TYPE regrole USING pg_catalog.quote_ident(owner)::regrole;
ALTER TABLE sdp.dead_letters
    ALTER COLUMN owner TYPE regrole USING pg_catalog.quote_ident(owner)::regrole;

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

CREATE POLICY dead_letters_owner ON sdp.dead_letters
    USING (pg_has_role(owner, 'MEMBER'));

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
       -- the error of a failed flow only to the owner's roles (issue 11, item 4)
       CASE WHEN f.failed_at IS NULL THEN r.last_error
            WHEN pg_has_role(f.owner, 'USAGE') OR pg_has_role('pg_read_all_stats', 'USAGE') THEN f.last_error
            ELSE '<insufficient privilege>'
       END AS last_error,
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

-- Error texts only to the owner's roles (issue 11, item 4) -----------------
-- A flow's last_error quotes the values of the message it failed on.  As
-- pg_stat_activity does with query texts, every role sees every flow, but
-- only the owner's roles, pg_read_all_stats and superusers read its error
-- texts; others read '<insufficient privilege>' where there is one.
-- sdp_flow_runtime() masks the running workers' errors itself; the error of
-- a failed flow is kept in sdp.flows.last_error, whose column is no longer
-- readable by PUBLIC, and masked in sdp.flow_status (above).
REVOKE SELECT ON sdp.flows FROM PUBLIC;
GRANT SELECT (id, name, source, target, schema, transform, operator, options, owner,
              enabled, failed_at, watermark, created_at, offsets_stored)
   ON sdp.flows TO PUBLIC;

-- Skipping a message (issue 11, item 2)
-- Messages a flow's owner asked it to skip with sdp_skip_message(): the
-- worker does not decode or write such a message, it dead-letters it (stage
-- 'skipped') in the transaction of the batch the message comes in.  A
-- request stays after it applied (a stateful flow replaying from its
-- checkpoint skips the message again; the dead letter is written once) and
-- goes with its flow.
CREATE TABLE sdp.skipped_messages (
    flow_id         bigint NOT NULL REFERENCES sdp.flows (id) ON DELETE CASCADE,
    kafka_partition integer NOT NULL CHECK (kafka_partition >= 0),
    kafka_offset    bigint NOT NULL CHECK (kafka_offset >= 0),
    requested_by    name NOT NULL,
    requested_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (flow_id, kafka_partition, kafka_offset)
);
GRANT SELECT ON sdp.skipped_messages TO PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('sdp.skipped_messages', '');

ALTER TABLE sdp.dead_letters DROP CONSTRAINT dead_letters_stage_check;
ALTER TABLE sdp.dead_letters ADD CONSTRAINT dead_letters_stage_check
    CHECK (stage IN ('decode', 'transform', 'write', 'late', 'skipped'));

CREATE FUNCTION sdp_skip_message(flow text, kafka_partition integer, kafka_offset bigint)
RETURNS void LANGUAGE C STRICT AS 'MODULE_PATHNAME', 'sdp_skip_message';
COMMENT ON FUNCTION sdp_skip_message(text, integer, bigint) IS
  'the flow sets the message at this partition and offset aside (sdp.dead_letters, stage skipped) instead of processing it';

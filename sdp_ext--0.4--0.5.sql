/* sdp_ext--0.4--0.5.sql: sinks of stateful flows and of several workers (issue 14) */

\echo Use "ALTER EXTENSION sdp_ext UPDATE TO '0.5'" to load this file. \quit

-- issue 14: each worker of a sink flow relays the outbox rows it wrote, with
-- a transactional producer of its own; a row says which worker wrote it (its
-- relay).  Rows written by 0.4 (one worker) are worker 0's, whose
-- transactional.id is the one 0.4 used.  A constant default: no rewrite.
ALTER TABLE sdp.outbox ADD COLUMN worker integer NOT NULL DEFAULT 0 CHECK (worker >= 0);

-- issue 14: the relays of sink flows, one row per flow and worker number
-- (its workers, and an earlier worker whose rows are still to be produced
-- after a change of workers): the transactional.id a secured cluster must
-- allow, and the outbox rows not produced yet.
CREATE FUNCTION sdp_sink_relays(
    OUT flow text, OUT worker integer, OUT sink text, OUT topic text,
    OUT transactional_id text, OUT pending bigint, OUT first_pending_seq bigint,
    OUT last_pending_seq bigint)
RETURNS SETOF record LANGUAGE C STABLE AS 'MODULE_PATHNAME', 'sdp_sink_relays';
COMMENT ON FUNCTION sdp_sink_relays() IS
  'the relays of sink flows: transactional.id and the outbox rows not yet produced, per flow and worker';

CREATE VIEW sdp.sink_relays AS SELECT * FROM sdp_sink_relays();
GRANT SELECT ON sdp.sink_relays TO PUBLIC;

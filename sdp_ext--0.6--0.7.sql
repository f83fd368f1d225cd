/* sdp_ext--0.6--0.7.sql: the trust boundary (issue 26): outbox rows a sink flow's owner may skip */

\echo Use "ALTER EXTENSION sdp_ext UPDATE TO '0.7'" to load this file. \quit

-- issue 26: a row of a sink flow's outbox that the sink keeps refusing can
-- be set aside by the flow's owner: sdp_skip_outbox_row(flow, seq) records
-- who asked, and the flow's relay moves the row to sdp.dead_letters (stage
-- skipped) instead of producing it.  NULL: produce it.  No default: no
-- rewrite of the outbox.
ALTER TABLE sdp.outbox ADD COLUMN skipped_by text;

CREATE FUNCTION sdp_skip_outbox_row(flow text, seq bigint) RETURNS void
LANGUAGE C STRICT AS 'MODULE_PATHNAME', 'sdp_skip_outbox_row';
COMMENT ON FUNCTION sdp_skip_outbox_row(text, bigint) IS
  'the sink flow''s relay sets that outbox row aside (sdp.dead_letters, stage skipped) instead of producing it';

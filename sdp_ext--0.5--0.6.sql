/* sdp_ext--0.5--0.6.sql: the outbox without a foreign key; sdp_library_version(); sdp.row_json() */

\echo Use "ALTER EXTENSION sdp_ext UPDATE TO '0.6'" to load this file. \quit

-- issue 14: a sink flow writes its rows into sdp.outbox by multi-insert, as
-- COPY does; the foreign key to sdp.flows checked every row with a query of
-- its own (a sixth of a sink flow's CPU).  The rows are the flow's own by
-- construction (its worker sets flow_id), and sdp_drop_flow deletes the
-- rows of the flows it drops (and of any flow no longer there) itself.
ALTER TABLE sdp.outbox DROP CONSTRAINT outbox_flow_id_fkey;

-- The version of the library the server runs, beside pg_extension.extversion
-- (the catalogs' version): they differ between installing a new library
-- and ALTER EXTENSION sdp_ext UPDATE.
CREATE FUNCTION sdp_library_version() RETURNS text
LANGUAGE C IMMUTABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'sdp_library_version';
COMMENT ON FUNCTION sdp_library_version() IS
  'the version of the sdp_ext library the server runs (the catalogs'' is pg_extension.extversion)';

-- issue 14: a row as the text of to_jsonb(row), written directly for the
-- common types: the value of a sink flow's messages (to_jsonb was the
-- largest part of a sink flow's CPU).  STABLE as to_jsonb: timestamptz
-- values are written in the session's time zone.
CREATE FUNCTION sdp.row_json(record) RETURNS text
LANGUAGE C STABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'sdp_row_json';
COMMENT ON FUNCTION sdp.row_json(record) IS
  'to_jsonb(row)::text, written directly for the common types: the JSON of a sink flow''s messages';

/* sdp_ext--0.8--0.9.sql: Avro sinks (sdp.row_avro, the registry's credentials masked in sdp.sink_list) */

\echo Use "ALTER EXTENSION sdp_ext UPDATE TO '0.9'" to load this file. \quit

-- issue 30: a sink whose format is avro writes each row as an Avro message
-- in Confluent's wire format, its schema derived from the row's columns and
-- registered in the sink's schema registry.  NULL schema_id: the bare body.
-- STABLE: a value of a type without an Avro counterpart is its output text.
CREATE FUNCTION sdp.row_avro(r record, schema_id integer DEFAULT NULL) RETURNS bytea
LANGUAGE C STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'sdp_row_avro';
COMMENT ON FUNCTION sdp.row_avro(record, integer) IS
  'the row as an Avro message (Confluent''s wire format with schema_id, or the bare body): an Avro sink flow''s values';

-- A sink's options now hold a schema registry's too: its credentials
-- (basic.auth.user.info, a URL's user:password) are masked as a source's.
CREATE OR REPLACE VIEW sdp.sink_list AS
SELECT s.name, s.bootstrap_servers, s.topic,
       (SELECT coalesce(jsonb_object_agg(o.key,
                 CASE WHEN o.key ~* '(password|secret|token|sasl\.oauthbearer\.config|key\.pem|jaas|user\.info)'
                      THEN '"********"'::jsonb
                      WHEN o.key = 'schema.registry.url' AND jsonb_typeof(o.value) = 'string'
                      THEN to_jsonb(regexp_replace(o.value #>> '{}', '//[^/?#]*@', '//********@'))
                      ELSE o.value END), '{}'::jsonb)
          FROM jsonb_each(s.options) o) AS options,
       s.owner, s.created_at
  FROM sdp.sinks s
 WHERE pg_has_role(s.owner, 'MEMBER');

/* sdp_ext--0.7--0.8.sql: the formats (issue 30): Avro with a schema registry, nested JSON paths */

\echo Use "ALTER EXTENSION sdp_ext UPDATE TO '0.8'" to load this file. \quit

-- A source's options may hold a schema registry's credentials
-- (basic.auth.user.info, "user:password", or in schema.registry.url,
-- http://user:password@host): masked as the other credentials.
CREATE OR REPLACE VIEW sdp.source_list AS
SELECT s.name, s.bootstrap_servers, s.topic,
       (SELECT coalesce(jsonb_object_agg(o.key,
                 CASE WHEN o.key ~* '(password|secret|token|sasl\.oauthbearer\.config|key\.pem|jaas|user\.info)'
                      THEN '"********"'::jsonb
                      WHEN o.key = 'schema.registry.url' AND jsonb_typeof(o.value) = 'string'
                      THEN to_jsonb(regexp_replace(o.value #>> '{}', '//[^/?#]*@', '//********@'))
                      ELSE o.value END), '{}'::jsonb)
          FROM jsonb_each(s.options) o) AS options,
       s.owner, s.created_at
  FROM sdp.sources s
 WHERE pg_has_role(s.owner, 'MEMBER');

-- An Avro value as a flow's decoder reads it, given its writer schema.
CREATE FUNCTION sdp_avro_to_json(schema text, body bytea, framed boolean DEFAULT true) RETURNS jsonb
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'sdp_avro_to_json';
COMMENT ON FUNCTION sdp_avro_to_json(text, bytea, boolean) IS
  'an Avro value (Confluent wire format if framed, else a bare body) read with this writer schema, as JSON';

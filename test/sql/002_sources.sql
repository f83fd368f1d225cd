-- Declaring Kafka sources: what is accepted, what is refused, and who sees credentials.
CREATE EXTENSION sdp_ext;

-- Shows the SQLSTATE, message and hint of the error a statement raises.
CREATE FUNCTION pg_temp.refused(stmt text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE st text; msg text; hint text;
BEGIN
  EXECUTE stmt;
  RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT;
  RETURN st || ': ' || msg || CASE WHEN hint <> '' THEN ' | hint: ' || hint ELSE '' END;
END $$;

SELECT sdp_create_source('flights', '127.0.0.1:9', 'raw-flights',
                         '{"starting_offsets": "earliest", "client.rack": "r1", "fetch.wait.max.ms": 5}');
SELECT name, bootstrap_servers, topic, options, owner = current_user::regrole AS mine FROM sdp.sources;

SELECT pg_temp.refused($$SELECT sdp_create_source('flights', '127.0.0.1:9', 'other')$$);
SELECT pg_temp.refused($$SELECT sdp_create_source('', '127.0.0.1:9', 'x')$$);
SELECT pg_temp.refused($$SELECT sdp_create_source(repeat('n', 64), '127.0.0.1:9', 'x')$$);
SELECT pg_temp.refused($$SELECT sdp_create_source('s', '', 'x')$$);
SELECT pg_temp.refused($$SELECT sdp_create_source('s', NULL, 'x')$$);
SELECT pg_temp.refused($$SELECT sdp_create_source('s', '127.0.0.1:9', 'bad topic!')$$);
SELECT pg_temp.refused($$SELECT sdp_create_source('s', '127.0.0.1:9', 'x', '{"no.such.property": "1"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_source('s', '127.0.0.1:9', 'x', '{"fetch.wait.max.ms": "soon"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_source('s', '127.0.0.1:9', 'x', '{"enable.auto.commit": "true"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_source('s', '127.0.0.1:9', 'x', '{"starting_offsets": "middle"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_source('s', '127.0.0.1:9', 'x', '{"starting_offsets": "infinity"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_source('s', '127.0.0.1:9', 'x', '{"starting_offsets": "2026-13-01"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_source('s', '127.0.0.1:9', 'x', '[1, 2]')$$);
SELECT pg_temp.refused($$SELECT sdp_create_source('s', '127.0.0.1:9', 'x', '{"client.id": {"nested": 1}}')$$);
SELECT count(*) AS sources FROM sdp.sources;
-- a timestamp: the first message at or after it; stored in UTC (a zone-less
-- one is in the declaring session's TimeZone)
SET TimeZone = 'Europe/Paris';
SELECT sdp_create_source('from_time', '127.0.0.1:9', 'x', '{"starting_offsets": "2026-12-01 08:00"}');
SELECT sdp_create_source('from_time_utc', '127.0.0.1:9', 'x', '{"starting_offsets": "2026-12-01T06:00:00.5+00"}');
RESET TimeZone;
SELECT name, options->>'starting_offsets' AS starting_offsets FROM sdp.sources WHERE name LIKE 'from_time%' ORDER BY name;
SELECT sdp_drop_source('from_time'), sdp_drop_source('from_time_utc');

-- Credentials: only superusers read sdp.sources; sdp.source_list masks secrets
-- and shows each role its own sources.
SELECT sdp_create_source('secured', 'broker:9093', 'payments',
  '{"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "app", "sasl.password": "s3cr3t"}');
CREATE ROLE sdp_reader LOGIN;
GRANT sdp_reader TO CURRENT_USER;
SET ROLE sdp_reader;
SELECT pg_temp.refused($$SELECT options FROM sdp.sources$$);
SELECT count(*) AS visible_to_other_role FROM sdp.source_list;
SELECT sdp_create_source('own', 'broker:9093', 'mine', '{"sasl.password": "p4ss", "sasl.username": "me"}');
SELECT name, options FROM sdp.source_list;
SELECT pg_temp.refused($$SELECT sdp_drop_source('flights')$$);
SELECT pg_temp.refused($$SELECT sdp_alter_source('flights', 'broker:9093')$$);
-- its own source: a credential changed through sdp_alter_source stays masked
SELECT sdp_alter_source('own', options => '{"sasl.password": "n3w"}');
SELECT name, options FROM sdp.source_list;
RESET ROLE;
SELECT name, options->>'sasl.password' AS shown_password FROM sdp.source_list ORDER BY name;

-- Altering: brokers and options changed, options merged (null removes a key),
-- checked as a new source's are; nothing changed by a refusal
SELECT sdp_alter_source('flights', options => '{"client.rack": null, "fetch.wait.max.ms": "7", "client.id": "c1"}');
SELECT sdp_alter_source('flights', '127.0.0.1:19');
SELECT pg_temp.refused($$SELECT sdp_alter_source('flights')$$);
SELECT bootstrap_servers, options FROM sdp.sources WHERE name = 'flights';
SELECT pg_temp.refused($$SELECT sdp_alter_source('nope', '127.0.0.1:9')$$);
SELECT pg_temp.refused($$SELECT sdp_alter_source(NULL)$$);
SELECT pg_temp.refused($$SELECT sdp_alter_source('flights', '')$$);
SELECT pg_temp.refused($$SELECT sdp_alter_source('flights', options => '[1]')$$);
SELECT pg_temp.refused($$SELECT sdp_alter_source('flights', options => '{"enable.auto.commit": "true"}')$$);
SELECT pg_temp.refused($$SELECT sdp_alter_source('flights', options => '{"fetch.wait.max.ms": "soon"}')$$);
SELECT pg_temp.refused($$SELECT sdp_alter_source('flights', options => '{"starting_offsets": "middle"}')$$);
SELECT bootstrap_servers, options FROM sdp.sources WHERE name = 'flights';

-- Dropping
SELECT sdp_drop_source('own');
SELECT sdp_drop_source('secured');
SELECT pg_temp.refused($$SELECT sdp_drop_source('nope')$$);
SELECT name FROM sdp.sources ORDER BY name;

DROP EXTENSION sdp_ext;
DROP ROLE sdp_reader;

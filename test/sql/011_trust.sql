-- The trust boundary (issue 26): which librdkafka properties and broker
-- hosts a role may give, as PostgreSQL's rules say (running a program needs
-- pg_execute_server_program, reading a server file pg_read_server_files,
-- loading code superuser; anything sdp_ext does not know to be safe,
-- superuser); a flow's search_path fixed at its declaration; a transform
-- checked at declaration without being run.
CREATE EXTENSION sdp_ext;

CREATE FUNCTION pg_temp.refused(stmt text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE st text; msg text; hint text;
BEGIN
  EXECUTE stmt;
  RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT;
  RETURN st || ': ' || msg || CASE WHEN hint <> '' THEN ' | hint: ' || hint ELSE '' END;
END $$;
GRANT EXECUTE ON FUNCTION pg_temp.refused(text) TO PUBLIC;

CREATE ROLE sdp_mallory LOGIN;          -- nothing but LOGIN
CREATE ROLE sdp_reader LOGIN;           -- may read server files
GRANT pg_read_server_files TO sdp_reader;
CREATE ROLE sdp_runner LOGIN;           -- may run server programs
GRANT pg_execute_server_program TO sdp_runner;
CREATE ROLE sdp_boss SUPERUSER;
CREATE ROLE sdp_deputy LOGIN;           -- a member of a superuser role is no superuser
GRANT sdp_boss TO sdp_deputy;

SET ROLE sdp_mallory;
-- programs: the kinit command, and SASL GSSAPI, which runs kinit through the shell
SELECT pg_temp.refused($$SELECT sdp_create_source('m1', '127.0.0.1:9', 't',
  '{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "GSSAPI", "sasl.kerberos.kinit.cmd": "/bin/sh -c \"id > /tmp/m\""}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_source('m1', '127.0.0.1:9', 't', '{"sasl.kerberos.kinit.cmd": "kinit"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_source('m1', '127.0.0.1:9', 't', '{"sasl.mechanisms": "GSSAPI"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_source('m1', '127.0.0.1:9', 't', '{"sasl.mechanism": "gssapi"}')$$);
-- code
SELECT pg_temp.refused($$SELECT sdp_create_source('m1', '127.0.0.1:9', 't', '{"plugin.library.paths": "/tmp/evil.so"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_source('m1', '127.0.0.1:9', 't', '{"ssl.engine.location": "/tmp/evil.so"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_source('m1', '127.0.0.1:9', 't', '{"ssl.providers": "evil"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_sink('m1', '127.0.0.1:9', 't', '{"plugin.library.paths": "/tmp/evil.so"}')$$);
-- server files
SELECT pg_temp.refused($$SELECT sdp_create_source('m1', '127.0.0.1:9', 't', '{"ssl.ca.location": "/etc/ssl/certs"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_source('m1', '127.0.0.1:9', 't', '{"ssl.key.location": "/var/lib/postgresql/server.key"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_source('m1', '127.0.0.1:9', 't', '{"sasl.kerberos.keytab": "/etc/krb5.keytab"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_sink('m1', '127.0.0.1:9', 't', '{"ssl.keystore.location": "/etc/k.p12"}')$$);
-- what sdp_ext does not know to be safe: a superuser's (a newer librdkafka adds properties)
-- (an OAuth token endpoint, sasl.oauthbearer.token.endpoint.url, must be an http(s) URL of an
-- allowed host: Debian's librdkafka is built without OIDC and refuses the property itself)
SELECT pg_temp.refused($$SELECT sdp_create_source('m1', '127.0.0.1:9', 't', '{"enabled_events": "1"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_source('m1', '127.0.0.1:9', 't', '{"topic.offset.store.path": "/tmp"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_source('m1', '127.0.0.1:9', 't', '{"sasl.mechanisms": "AWS_MSK_IAM"}')$$);
-- refused before anything is stored
SELECT count(*) FROM sdp.source_list;
-- what any role may set
SELECT sdp_create_source('m_ok', '127.0.0.1:9', 't',
  '{"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "m", "sasl.password": "pw",
    "ssl.ca.location": "probe", "ssl.ca.pem": "-----BEGIN CERTIFICATE-----", "client.id": "m", "fetch.wait.max.ms": 5}');
SELECT sdp_create_sink('m_ok', '127.0.0.1:9', 't', '{"compression.type": "lz4", "linger.ms": 5, "message.max.bytes": 20000}');
SELECT name, options->>'sasl.password' AS password FROM sdp.source_list;
RESET ROLE;

-- pg_read_server_files may name a server file; pg_execute_server_program may run a program
SET ROLE sdp_reader;
SELECT sdp_create_source('r1', '127.0.0.1:9', 't', '{"ssl.ca.location": "/etc/ssl/certs/ca-certificates.crt"}');
SELECT pg_temp.refused($$SELECT sdp_create_source('r2', '127.0.0.1:9', 't', '{"sasl.kerberos.kinit.cmd": "kinit"}')$$);
RESET ROLE;
SET ROLE sdp_runner;
SELECT sdp_create_source('x1', '127.0.0.1:9', 't', '{"sasl.mechanisms": "GSSAPI", "sasl.kerberos.kinit.cmd": "kinit -R"}');
SELECT pg_temp.refused($$SELECT sdp_create_source('x2', '127.0.0.1:9', 't', '{"ssl.key.location": "/tmp/k"}')$$);
RESET ROLE;
-- a superuser may set anything, and declaring loads nothing (the library does not exist: the worker would say so)
SELECT sdp_create_source('s1', '127.0.0.1:9', 't',
  '{"sasl.kerberos.kinit.cmd": "kinit", "plugin.library.paths": "/nonexistent/plugin.so", "ssl.engine.location": "/nonexistent/engine.so"}');
SELECT pg_temp.refused($$SELECT sdp_create_source('s2', '127.0.0.1:9', 't', '{"no.such.property": "1"}')$$);

-- a flow's owner runs its source's clients: it needs the roles the source's properties need
CREATE TABLE trust_events (seq bigint);
GRANT INSERT ON trust_events TO PUBLIC;
SET ROLE sdp_boss;
SELECT sdp_create_source('boss_src', '127.0.0.1:9', 't', '{"sasl.kerberos.kinit.cmd": "kinit"}');
RESET ROLE;
SET ROLE sdp_deputy;
SELECT pg_temp.refused($$SELECT sdp_create_flow('deputy_flow', 'boss_src', 'trust_events', 'seq bigint')$$);
RESET ROLE;

-- the broker hosts a role other than a superuser may name: sdp.allowed_hosts
SHOW sdp.allowed_hosts;
SET ROLE sdp_mallory;
SELECT pg_temp.refused($$SET sdp.allowed_hosts = '*'$$);
SELECT sdp_create_source('m_far', 'kafka.far.example.com:9092', 't');
RESET ROLE;
SELECT pg_temp.refused($$SET sdp.allowed_hosts = 'a.example.com:99999'$$);
SELECT pg_temp.refused($$SET sdp.allowed_hosts = 'a*.example.com'$$);
SET sdp.allowed_hosts = 'kafka-1.example.com:9092, *.kafka.internal, [::1]:9092, 127.0.0.1';
SET ROLE sdp_mallory;
SELECT pg_temp.refused($$SELECT sdp_create_source('h1', 'evil.example.com:9092', 't')$$);
SELECT pg_temp.refused($$SELECT sdp_create_source('h1', 'kafka-1.example.com:9093', 't')$$);
SELECT pg_temp.refused($$SELECT sdp_create_source('h1', 'kafka.internal:9092', 't')$$);
SELECT pg_temp.refused($$SELECT sdp_create_sink('h1', 'SASL_SSL://b1.kafka.internal:9093,evil:9092', 't')$$);
-- (Kafka's default port is 9092; host names match in any case)
SELECT sdp_create_source('h1', 'KAFKA-1.example.com,b7.kafka.internal:19092,[::1]:9092,127.0.0.1:9', 't');
RESET ROLE;
-- a superuser may name any host
SELECT sdp_create_source('h2', 'evil.example.com:9092', 't');
-- the flow's owner is checked against the hosts too
SET ROLE sdp_mallory;
SELECT pg_temp.refused($$SELECT sdp_create_flow('hf', 'm_far', 'trust_events', 'seq bigint')$$);
RESET ROLE;
RESET sdp.allowed_hosts;

-- a flow's search_path: the session's at its declaration (as SET search_path FROM CURRENT), or the one given
CREATE SCHEMA trust_app;
CREATE TABLE trust_app.lookup (k bigint);
SET search_path = trust_app, public;
SELECT sdp_create_flow('sp1', 'r1', 'trust_events', 'seq bigint',
  'SELECT seq FROM input WHERE seq NOT IN (SELECT k FROM lookup)', options => '{"mode": "append"}');
RESET search_path;
SELECT pg_temp.refused($$SELECT sdp_create_flow('sp2', 'r1', 'trust_events', 'seq bigint',
  'SELECT seq FROM input WHERE seq NOT IN (SELECT k FROM lookup)', options => '{"mode": "append"}')$$);
SELECT sdp_create_flow('sp2', 'r1', 'trust_events', 'seq bigint',
  'SELECT seq FROM input WHERE seq NOT IN (SELECT k FROM lookup)', options => '{"mode": "append", "search_path": "trust_app, pg_catalog"}');
SELECT pg_temp.refused($$SELECT sdp_create_flow('sp3', 'r1', 'trust_events', 'seq bigint',
  options => '{"search_path": "\"unterminated"}')$$);
SELECT name, options->>'search_path' AS search_path FROM sdp.flows WHERE name LIKE 'sp%' ORDER BY name;
-- changed with sdp_alter_flow
SELECT sdp_alter_flow('sp2', options => '{"search_path": "trust_app, public"}');
SELECT options->>'search_path' AS search_path FROM sdp.flows WHERE name = 'sp2';

-- the flow option statement_timeout: a duration, 0 for none
SELECT pg_temp.refused($$SELECT sdp_create_flow('st1', 'r1', 'trust_events', 'seq bigint', options => '{"statement_timeout": "soon"}')$$);
SELECT sdp_create_flow('st1', 'r1', 'trust_events', 'seq bigint', options => '{"statement_timeout": "5 s"}');
SELECT sdp_create_flow('st2', 'r1', 'trust_events', 'seq bigint', options => '{"statement_timeout": 0}');

-- a declaration plans the transform and checks its privileges without running it:
-- an uncorrelated subquery that would raise (or run for minutes) is not evaluated ...
CREATE FUNCTION trust_boom() RETURNS bigint LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'the transform ran at its declaration'; END $$;
SELECT sdp_create_flow('nr1', 'r1', 'trust_events', 'seq bigint',
  'SELECT seq FROM input WHERE seq > (SELECT trust_boom())', options => '{"mode": "append"}');
-- ... but what it may not read or call is refused
REVOKE EXECUTE ON FUNCTION trust_boom() FROM PUBLIC;
CREATE TABLE trust_secret (x bigint);
GRANT SELECT ON trust_app.lookup TO sdp_reader;
GRANT USAGE ON SCHEMA trust_app TO sdp_reader;
SET ROLE sdp_reader;
SELECT pg_temp.refused($$SELECT sdp_create_flow('nr2', 'r1', 'trust_events', 'seq bigint',
  'SELECT seq FROM input WHERE seq > (SELECT trust_boom())', options => '{"mode": "append"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('nr2', 'r1', 'trust_events', 'seq bigint',
  'SELECT seq FROM input WHERE seq NOT IN (SELECT x FROM trust_secret)', options => '{"mode": "append"}')$$);
RESET ROLE;

-- sdp_skip_outbox_row: the owner's, for a row its outbox holds
SELECT pg_temp.refused($$SELECT sdp_skip_outbox_row('no_such_flow', 1)$$);
SELECT pg_temp.refused($$SELECT sdp_skip_outbox_row('st1', 1)$$);
SET ROLE sdp_mallory;
SELECT pg_temp.refused($$SELECT sdp_skip_outbox_row('st1', 1)$$);
RESET ROLE;

SELECT sdp_drop_flow(name) FROM sdp.flows ORDER BY name;
SELECT sdp_drop_source(name) FROM sdp.sources ORDER BY name;
SELECT sdp_drop_sink(name) FROM sdp.sinks ORDER BY name;
DROP TABLE trust_events, trust_secret;
-- the workers go away before the extension does (see 007_alter)
DO $$
DECLARE clean int := 0;
BEGIN
  FOR i IN 1..600 LOOP
    PERFORM pg_stat_clear_snapshot();
    PERFORM 1 FROM pg_stat_activity WHERE backend_type = 'sdp flow'
    UNION ALL SELECT 1 FROM sdp_flow_runtime();
    IF FOUND THEN clean := 0; ELSE clean := clean + 1; END IF;
    EXIT WHEN clean >= 10;
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
SELECT count(*) AS flow_workers FROM pg_stat_activity WHERE backend_type = 'sdp flow';
DROP FUNCTION trust_boom();
DROP SCHEMA trust_app CASCADE;
DROP EXTENSION sdp_ext;
DROP ROLE sdp_mallory, sdp_reader, sdp_runner, sdp_deputy, sdp_boss;

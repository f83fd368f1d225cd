-- Declaring Kafka sinks and flows that write to them: what is accepted, what
-- is refused, and who sees credentials.
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

-- Sinks
SELECT sdp_create_sink('alerts', '127.0.0.1:9', 'zone-alerts', '{"linger.ms": 5, "compression.type": "lz4"}');
SELECT name, bootstrap_servers, topic, options, owner = current_user::regrole AS mine FROM sdp.sinks;
SELECT pg_temp.refused($$SELECT sdp_create_sink('alerts', '127.0.0.1:9', 'other')$$);
SELECT pg_temp.refused($$SELECT sdp_create_sink('', '127.0.0.1:9', 'x')$$);
SELECT pg_temp.refused($$SELECT sdp_create_sink('k', '', 'x')$$);
SELECT pg_temp.refused($$SELECT sdp_create_sink('k', NULL, 'x')$$);
SELECT pg_temp.refused($$SELECT sdp_create_sink('k', '127.0.0.1:9', 'bad topic!')$$);
SELECT pg_temp.refused($$SELECT sdp_create_sink('k', '127.0.0.1:9', 'x', '{"no.such.property": "1"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_sink('k', '127.0.0.1:9', 'x', '{"linger.ms": "soon"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_sink('k', '127.0.0.1:9', 'x', '{"transactional.id": "mine"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_sink('k', '127.0.0.1:9', 'x', '{"enable.idempotence": "false"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_sink('k', '127.0.0.1:9', 'x', '[1, 2]')$$);
SELECT count(*) AS sinks FROM sdp.sinks;

-- Credentials: only superusers read sdp.sinks; sdp.sink_list masks secrets
-- and shows each role its own sinks.
SELECT sdp_create_sink('secured', 'broker:9093', 'out',
  '{"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "app", "sasl.password": "s3cr3t"}');
CREATE ROLE sdp_sink_user LOGIN;
GRANT sdp_sink_user TO CURRENT_USER;
SET ROLE sdp_sink_user;
SELECT pg_temp.refused($$SELECT options FROM sdp.sinks$$);
SELECT pg_temp.refused($$INSERT INTO sdp.outbox (flow_id, key, value) VALUES (1, 'k', '{}')$$);
SELECT count(*) AS visible_to_other_role FROM sdp.sink_list;
SELECT sdp_create_sink('own', 'broker:9093', 'mine', '{"sasl.password": "p4ss", "sasl.username": "me"}');
SELECT name, options FROM sdp.sink_list;
SELECT pg_temp.refused($$SELECT sdp_drop_sink('alerts')$$);
RESET ROLE;
SELECT name, options->>'sasl.password' AS shown_password FROM sdp.sink_list ORDER BY name;

-- Flows with a sink: exactly one of target and sink
SELECT sdp_create_source('events', '127.0.0.1:9', 'events');
CREATE TABLE events_out (seq bigint, zone text);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'events', NULL, 'seq bigint, zone text', sink => 'nope')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'events', 'events_out', 'seq bigint, zone text', sink => 'alerts')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'events', NULL, 'seq bigint, zone text')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow(name => 'f', source => 'events', schema => 'seq bigint, zone text')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'events', NULL, 'seq bigint, zone text',
                                                options => '{"sink_key": "region"}', sink => 'alerts')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'events', NULL, 'seq bigint, zone text',
                                                transform => 'SELECT seq FROM input',
                                                options => '{"sink_key": "zone"}', sink => 'alerts')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'events', 'events_out', 'seq bigint, zone text',
                                                options => '{"sink_key": "zone"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'events', NULL, 'seq bigint, zone text',
                                                options => '{"mode": "upsert"}', sink => 'alerts')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'events', NULL, 'seq bigint, zone text',
                                                options => '{"on_tombstone": "delete"}', sink => 'alerts')$$);
-- an operator's rows: sink_key names one of them (not of the input), no upsert, the operator's options checked
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'events', NULL, 'zone text, icao24 text, ts timestamptz',
                                                operator => 'active_count',
                                                options => '{"key": "zone", "member": "icao24", "ttl": "1 min", "capacity": 3, "sink_key": "icao24"}',
                                                sink => 'alerts')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'events', NULL, 'zone text, icao24 text, ts timestamptz',
                                                operator => 'active_count',
                                                options => '{"key": "zone", "member": "icao24", "ttl": "1 min", "capacity": 3, "mode": "upsert"}',
                                                sink => 'alerts')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'events', NULL, 'zone text, icao24 text, ts timestamptz',
                                                operator => 'active_count', options => '{"key": "zone", "member": "icao24", "ttl": "1 min"}',
                                                sink => 'alerts')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'events', NULL, 'seq bigint, zone text',
                                                transform => 'SELECT seq, nope FROM input', sink => 'alerts')$$);
SELECT count(*) AS flows FROM sdp.flows;

-- accepted: by name without a target, keyed; and by position without transform
SELECT sdp_create_flow(name => 'to_alerts', source => 'events', schema => 'seq bigint, zone text',
                       transform => 'SELECT seq, upper(zone) AS zone FROM input;',
                       options => '{"sink_key": "zone"}', sink => 'alerts');
SELECT sdp_create_flow('all_to_alerts', 'events', NULL, 'seq bigint, zone text', sink => 'alerts',
                       options => '{"sink_key": "kafka_key"}');
SELECT pg_temp.refused($$SELECT sdp_set_flow_workers('all_to_alerts', 2)$$);
-- a stateful operator's rows, in two workers, keyed by the operator's key
SELECT sdp_create_flow('zone_counts', 'events', NULL, 'zone text, icao24 text',
                       operator => 'active_count',
                       options => '{"key": "zone", "member": "icao24", "ttl": "1 min", "capacity": 3, "sink_key": "zone", "workers": 2}',
                       sink => 'alerts');
-- sdp_alter_flow keeps the sink, and checks sink_key as sdp_create_flow does
SELECT sdp_alter_flow('to_alerts', transform => 'SELECT seq, lower(zone) AS zone FROM input');
SELECT pg_temp.refused($$SELECT sdp_alter_flow('to_alerts', options => '{"sink_key": "nope"}')$$);
SELECT name, target, sink, options FROM sdp.flows ORDER BY name;
SELECT flow, target, source FROM sdp.flow_status ORDER BY flow;
SELECT pg_temp.refused($$SELECT sdp_drop_sink('alerts')$$);

-- the outbox takes rows of a role's own sink flows only
SET ROLE sdp_sink_user;
SELECT sdp_create_source('usrc', '127.0.0.1:9', 'events');
SELECT sdp_create_flow('user_flow', 'usrc', NULL, 'seq bigint', sink => 'own');
SELECT pg_temp.refused($$INSERT INTO sdp.outbox (flow_id, key, value) SELECT id, 'k', '{}' FROM sdp.flows WHERE name = 'user_flow'$$);
SELECT pg_temp.refused($$INSERT INTO sdp.outbox (flow_id, key, value) SELECT id, 'k', '{}' FROM sdp.flows WHERE name = 'to_alerts'$$);
SELECT pg_temp.refused($$SELECT * FROM sdp.outbox$$);
SELECT sdp_drop_flow('user_flow');
SELECT sdp_drop_source('usrc');
RESET ROLE;
SELECT count(*) AS outbox_rows_left FROM sdp.outbox;

-- a flow into a table, declared by position as before
SELECT sdp_create_flow('to_table', 'events', 'events_out', 'seq bigint, zone text');
SELECT name, target, sink FROM sdp.flows WHERE name = 'to_table';

-- Dropping
SELECT sdp_drop_flow('to_alerts');
SELECT sdp_drop_flow('all_to_alerts');
SELECT sdp_drop_flow('zone_counts');
SELECT sdp_drop_flow('to_table');
SELECT sdp_drop_sink('alerts');
SELECT sdp_drop_sink('secured');
-- Roles: an owner of sinks is not dropped; REASSIGN OWNED and DROP OWNED take its sinks along
SELECT pg_temp.refused($$DROP ROLE sdp_sink_user$$);
SET ROLE sdp_sink_user;
SELECT sdp_create_sink('own2', 'broker:9093', 'mine2');
RESET ROLE;
REASSIGN OWNED BY sdp_sink_user TO CURRENT_USER;
SELECT name, owner = current_user::regrole AS reassigned FROM sdp.sinks ORDER BY name;
SELECT sdp_drop_sink('own2');
SELECT sdp_drop_sink('own');
SET ROLE sdp_sink_user;
SELECT sdp_create_sink('own3', 'broker:9093', 'mine3');
RESET ROLE;
DROP OWNED BY sdp_sink_user;
SELECT pg_temp.refused($$SELECT sdp_drop_sink('alerts')$$);
SELECT count(*) AS sinks FROM sdp.sinks;
SELECT sdp_drop_source('events');
DROP TABLE events_out;
DROP ROLE sdp_sink_user;
-- sdp.standby_slots: the physical replication slots of the standbys whose
-- flush a sink flow's rows wait for; a server setting, checked as slot names
-- (whether the slots exist is the relay's to say, test 065)
SHOW sdp.standby_slots;
SET sdp.standby_slots = 'node2';
ALTER SYSTEM SET sdp.standby_slots = '"Node2"';
ALTER SYSTEM SET sdp.standby_slots = 'node2, node-3';
ALTER SYSTEM SET sdp.standby_slots = 'node2,,node3';
-- the workers go away before the extension does (a worker still in a
-- transaction could deadlock with DROP EXTENSION): no flow worker and no
-- flow slot for a whole second, so that a launcher pass that raced the
-- drops (it read the flows just before) has ended too
DO $$
DECLARE clean int := 0;
BEGIN
  FOR i IN 1..600 LOOP
    PERFORM pg_stat_clear_snapshot();  -- pg_stat_activity is read once per transaction otherwise
    PERFORM 1 FROM pg_stat_activity WHERE backend_type = 'sdp flow'
    UNION ALL SELECT 1 FROM sdp_flow_runtime();
    IF FOUND THEN clean := 0; ELSE clean := clean + 1; END IF;
    EXIT WHEN clean >= 10;
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
SELECT count(*) AS flow_workers FROM pg_stat_activity WHERE backend_type = 'sdp flow';
DROP EXTENSION sdp_ext;

-- sdp_alter_flow: every refusal (the new declaration is checked as a new
-- one), what it stores, and when a stateful flow's state cannot be kept.
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

-- No broker listens on port 9.
SELECT sdp_create_source('flights', '127.0.0.1:9', 'raw-flights');
CREATE TABLE events (seq bigint, icao24 text, alt float8, kafka_partition int, kafka_offset bigint);
CREATE TABLE zones (zone text PRIMARY KEY, min_lat float8, max_lat float8, capacity int);
CREATE TABLE zone_alerts (zone text PRIMARY KEY, aircraft_count bigint, crowded boolean, updated_at timestamptz);
SELECT sdp_create_flow('ev', 'flights', 'events', 'seq bigint, icao24 text');
SELECT sdp_create_flow('zc', 'flights', 'zone_alerts', 'icao24 text, lat float8',
  transform => 'SELECT z.zone, i.icao24, z.capacity FROM input i JOIN zones z ON i.lat BETWEEN z.min_lat AND z.max_lat',
  operator  => 'active_count',
  options   => '{"key": "zone", "member": "icao24", "capacity_column": "capacity",
                 "count_column": "aircraft_count", "alert_column": "crowded"}');

-- unknown flow, nothing to change
SELECT pg_temp.refused($$SELECT sdp_alter_flow('nope', transform => 'SELECT seq FROM input')$$);
SELECT pg_temp.refused($$SELECT sdp_alter_flow('ev')$$);
-- a new declaration that would be refused is refused the same way
SELECT pg_temp.refused($$SELECT sdp_alter_flow('ev', transform => 'SELEC seq FROM input')$$);
SELECT pg_temp.refused($$SELECT sdp_alter_flow('ev', transform => 'SELECT seq, nope FROM input')$$);
SELECT pg_temp.refused($$SELECT sdp_alter_flow('ev', transform => 'SELECT seq, icao24 AS callsign FROM input')$$);
SELECT pg_temp.refused($$SELECT sdp_alter_flow('ev', transform => 'SELECT count(*) AS seq FROM input')$$);
SELECT pg_temp.refused($$SELECT sdp_alter_flow('ev', schema => 'seq bigint,, icao24')$$);
SELECT pg_temp.refused($$SELECT sdp_alter_flow('ev', options => '{"on_error": "shrug"}')$$);
SELECT pg_temp.refused($$SELECT sdp_alter_flow('ev', options => '{"colour": "red"}')$$);
SELECT pg_temp.refused($$SELECT sdp_alter_flow('ev', options => '[1]')$$);
SELECT pg_temp.refused($$SELECT sdp_alter_flow('ev', options => '{"reset_state": true}')$$);
SELECT pg_temp.refused($$SELECT sdp_alter_flow('zc', options => '{"reset_state": "yes"}')$$);
-- another role's flow
CREATE ROLE alter_other;
SET ROLE alter_other;
SELECT pg_temp.refused($$SELECT sdp_alter_flow('ev', transform => 'SELECT seq FROM input')$$);
RESET ROLE;
-- nothing of the refused ones was stored, and no probe is left behind
SELECT name, schema, transform, options FROM sdp.flows ORDER BY name;

-- a new column: the schema and the transform change, options are merged
SELECT sdp_alter_flow('ev', schema => 'seq bigint, icao24 text, alt float8',
  transform => 'SELECT seq, icao24, alt FROM input', options => '{"max_batch_rows": 500}');
SELECT name, schema, transform, options FROM sdp.flows WHERE name = 'ev';
-- a key set to null removes it; '' removes the transform
SELECT sdp_alter_flow('ev', transform => '', options => '{"max_batch_rows": null}');
SELECT name, schema, transform, options FROM sdp.flows WHERE name = 'ev';

-- a stateful flow: a new transform keeps the state; new operator options
-- cannot, unless reset_state says so
SELECT sdp_alter_flow('zc', transform => 'SELECT z.zone, i.icao24, z.capacity FROM input i JOIN zones z ON i.lat >= z.min_lat AND i.lat < z.max_lat');
SELECT pg_temp.refused($$SELECT sdp_alter_flow('zc', options => '{"ttl": "10 seconds"}')$$);
SELECT pg_temp.refused($$SELECT sdp_alter_flow('zc', options => '{"key": "icao24"}')$$);
SELECT sdp_alter_flow('zc', options => '{"ttl": "10 seconds", "reset_state": true}');
SELECT options->>'ttl' AS ttl, options ? 'reset_state' AS stores_reset_state FROM sdp.flows WHERE name = 'zc';
-- a flow option (not the operator's) keeps the state
SELECT sdp_alter_flow('zc', options => '{"checkpoint_interval": "2 seconds"}');

SELECT sdp_drop_flow('ev');
SELECT sdp_drop_flow('zc');
SELECT sdp_drop_source('flights');
DROP TABLE events, zones, zone_alerts;
DROP ROLE alter_other;
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

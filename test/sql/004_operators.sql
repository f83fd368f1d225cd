-- Declaring stateful flows: the active_count operator's options are checked
-- against the transform's columns and the target.
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

SELECT sdp_create_source('flights', '127.0.0.1:9', 'raw-flights');
CREATE TABLE zones (zone text PRIMARY KEY, min_lat float8, max_lat float8, min_lon float8, max_lon float8,
                    capacity int, label text);
CREATE TABLE zone_alerts (zone text PRIMARY KEY, aircraft_count bigint, crowded boolean, updated_at timestamptz);
CREATE TABLE zone_log (zone text, aircraft_count bigint, crowded boolean, updated_at timestamptz);
CREATE TABLE zone_alerts_bad (zone text PRIMARY KEY, aircraft_count point, crowded boolean, updated_at timestamptz);

-- a helper: declare zone_congestion_flow with the given target and options
CREATE FUNCTION pg_temp.declare(target text, options text) RETURNS text LANGUAGE sql AS $$
  SELECT pg_temp.refused(format($f$SELECT sdp_create_flow('zone_congestion_flow', 'flights', %L,
    schema    => 'icao24 text, lat float8, lon float8',
    transform => 'SELECT z.zone, i.icao24, z.capacity, z.label FROM input i JOIN zones z
                   ON i.lat BETWEEN z.min_lat AND z.max_lat AND i.lon BETWEEN z.min_lon AND z.max_lon',
    operator  => 'active_count', options => %L)$f$, target, options))
$$;

SELECT pg_temp.declare('zone_alerts', '{}');
SELECT pg_temp.declare('zone_alerts', '{"key": "zone"}');
SELECT pg_temp.declare('zone_alerts', '{"key": "region", "member": "icao24", "capacity": 3}');
SELECT pg_temp.declare('zone_alerts', '{"key": "zone", "member": "callsign", "capacity": 3}');
SELECT pg_temp.declare('zone_alerts', '{"key": "zone", "member": "icao24"}');
SELECT pg_temp.declare('zone_alerts', '{"key": "zone", "member": "icao24", "capacity": 3, "capacity_column": "capacity"}');
SELECT pg_temp.declare('zone_alerts', '{"key": "zone", "member": "icao24", "capacity_column": "label"}');
SELECT pg_temp.declare('zone_alerts', '{"key": "zone", "member": "icao24", "capacity": -1}');
SELECT pg_temp.declare('zone_alerts', '{"key": "zone", "member": "icao24", "capacity": 3, "ttl": "0 seconds"}');
SELECT pg_temp.declare('zone_alerts', '{"key": "zone", "member": "icao24", "capacity": 3, "ttl": "a while"}');
SELECT pg_temp.declare('zone_alerts', '{"key": "zone", "member": "icao24", "capacity": 3, "colour": "red"}');
SELECT pg_temp.declare('zone_alerts', '{"key": "zone", "member": "icao24", "capacity": 3, "count_column": "zone"}');
SELECT pg_temp.declare('zone_alerts', '{"key": "zone", "member": "icao24", "capacity": 3, "state_memory_limit": "10kB"}');
-- the emitted columns must fit the target
SELECT pg_temp.declare('zone_alerts', '{"key": "zone", "member": "icao24", "capacity": 3}');
SELECT pg_temp.declare('zone_alerts_bad', '{"key": "zone", "member": "icao24", "capacity": 3, "count_column": "aircraft_count", "alert_column": "crowded"}');
-- upsert on the key needs the target's primary key to be the key
SELECT pg_temp.declare('zone_log', '{"key": "zone", "member": "icao24", "capacity": 3, "count_column": "aircraft_count", "alert_column": "crowded", "mode": "upsert"}');
SELECT count(*) AS flows FROM sdp.flows;

-- the declaration of the seed
SELECT pg_temp.declare('zone_alerts', '{"key": "zone", "member": "icao24", "ttl": "30 seconds",
  "capacity_column": "capacity", "count_column": "aircraft_count", "alert_column": "crowded",
  "time_column": "updated_at", "state_memory_limit": "16MB", "checkpoint_interval": "5 seconds"}');
SELECT name, operator, options FROM sdp.flows;
-- an append target keeps every change
SELECT sdp_create_flow('zone_history', 'flights', 'zone_log', 'icao24 text, lat float8, lon float8',
  transform => 'SELECT z.zone, i.icao24 FROM input i JOIN zones z ON i.lat BETWEEN z.min_lat AND z.max_lat',
  operator => 'active_count',
  options => '{"key": "zone", "member": "icao24", "capacity": 5, "count_column": "aircraft_count",
               "alert_column": "crowded", "mode": "append"}');
SELECT name, options->>'mode' AS mode FROM sdp.flows ORDER BY name;

-- a flow that is not declared has no state to show
SELECT pg_temp.refused($$SELECT count(*) FROM sdp_flow_state('no_such_flow')$$);

SELECT sdp_drop_flow('zone_congestion_flow');
SELECT sdp_drop_flow('zone_history');
SELECT sdp_drop_source('flights');
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
DROP TABLE zones, zone_alerts, zone_log, zone_alerts_bad;

-- Declaring flows: every declaration that cannot work is refused with a
-- specific error and creates nothing; a good one is stored and started.
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

-- No broker listens on port 9: flows declared here start, and wait for it.
SELECT sdp_create_source('flights', '127.0.0.1:9', 'raw-flights');

CREATE TABLE positions (
  icao24 text PRIMARY KEY,
  lat float8,
  lon float8,
  baro_alt float8,
  flight_phase text,
  poller_ts timestamptz
);
CREATE TABLE events (seq bigint, icao24 text, kafka_partition int, kafka_offset bigint);
CREATE TABLE zones (zone text PRIMARY KEY, min_lat float8, max_lat float8);

-- unknown source
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'nope', 'positions', 'icao24 text')$$);
-- a temporary table is the declaring session's: the flow's worker cannot see it
CREATE TEMP TABLE tmp_positions (icao24 text PRIMARY KEY);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'tmp_positions', 'icao24 text')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text',
  'SELECT i.icao24 FROM input i JOIN tmp_positions t USING (icao24)')$$);
DROP TABLE tmp_positions;
-- schemas that do not parse or cannot be decoded
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text,, lat')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text); DROP TABLE positions; --')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 no_such_type')$$);
-- the names other systems use: the column named, and the PostgreSQL type meant
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text, lat double')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 string')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text NOT NULL')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'tags text[]')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text, icao24 text')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text, kafka_offset bigint')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', '')$$);
-- paths into the document that are not one path of names and [index]es: the detail says why
CREATE FUNCTION pg_temp.refused_detail(stmt text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE st text; msg text; detail text;
BEGIN
  EXECUTE stmt;
  RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, detail = PG_EXCEPTION_DETAIL;
  RETURN st || ': ' || msg || ' | ' || detail;
END $$;
SELECT pg_temp.refused_detail(format('SELECT sdp_create_flow(%L, %L, %L, %L)', 'f', 'flights', 'positions', s))
  FROM unnest(ARRAY['icao24 text, lat float8 FROM',
                    'lat float8 FROM position..lat',
                    'lat float8 FROM position.lat + 1',
                    'lat float8 FROM position.lat::text',
                    'lat float8 FROM tags[-1]',
                    'lat float8 FROM tags[1:2]',
                    'lat float8 FROM tags[i]',
                    'lat float8 FROM position.*',
                    'lat float8 FROM a FROM b',
                    'lat float8 FROM position.lat AS x',
                    'lat float8 FROM position.lat; DROP TABLE positions',
                    'lat float8 FROM ''position''',
                    'lat float8 FROM user.lat',
                    'lat float8 FROM "unterminated']) s;
-- a good one: FROM in a quoted name is a name
CREATE TABLE nested_t (icao24 text, lat float8, "from" text, lon float8);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'nested_t', 'icao24 text FROM "ICAO", lat float8 FROM position.lat, "from" text, lon float8 FROM "from"[0]')$$);
SELECT sdp_drop_flow('f');
DROP TABLE nested_t;
-- transforms that do not parse, are not a read-only SELECT, or do not fit the target
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', 'SELEC icao24 FROM input')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', 'SELECT icao24, altitude FROM input')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', 'DELETE FROM positions')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', 'WITH d AS (DELETE FROM positions RETURNING icao24) SELECT icao24 FROM d')$$);
-- row-locking clauses, at the top or anywhere inside: the same refusal
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', 'SELECT i.icao24 FROM input i, zones z WHERE i.icao24 = z.zone FOR UPDATE OF z')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', 'SELECT icao24 FROM input WHERE EXISTS (SELECT 1 FROM zones FOR UPDATE)')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', 'SELECT i.icao24 FROM input i, (SELECT zone FROM zones FOR SHARE) z WHERE i.icao24 = z.zone')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', 'WITH z AS (SELECT zone FROM zones FOR KEY SHARE) SELECT i.icao24 FROM input i JOIN z ON i.icao24 = z.zone')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', 'SELECT icao24, (SELECT max(zone) FROM (SELECT zone FROM zones FOR NO KEY UPDATE SKIP LOCKED) z) AS zone FROM input')$$);
CREATE VIEW locked_zones AS SELECT zone FROM zones FOR UPDATE;
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', 'SELECT i.icao24 FROM input i JOIN locked_zones z ON i.icao24 = z.zone')$$);
DROP VIEW locked_zones;
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', 'SELECT icao24, 1 AS speed FROM input')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text, lat float8', 'SELECT icao24, point(lat, lat) AS lat FROM input')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text, lat text')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text, speed float8')$$);
-- transforms that do not work row by row: a failing batch is run again in parts
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text, lat float8', 'SELECT icao24, max(lat) AS lat FROM input GROUP BY icao24')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'events', 'seq bigint', 'SELECT count(*) AS seq FROM input')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'events', 'icao24 text', 'SELECT icao24 FROM input GROUP BY icao24')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'events', 'icao24 text', 'SELECT icao24 FROM input GROUP BY GROUPING SETS ((icao24), ())')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'events', 'icao24 text', 'SELECT ''x'' AS icao24 FROM input HAVING true')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'events', 'seq bigint, icao24 text', 'SELECT icao24, row_number() OVER (PARTITION BY icao24) AS seq FROM input')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'events', 'icao24 text', 'SELECT DISTINCT icao24 FROM input')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'events', 'seq bigint, icao24 text', 'SELECT DISTINCT ON (icao24) icao24, seq FROM input ORDER BY icao24, seq DESC')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'events', 'icao24 text', 'SELECT icao24 FROM input LIMIT 10')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'events', 'icao24 text', 'SELECT icao24 FROM input OFFSET 1')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'events', 'icao24 text', 'SELECT icao24 FROM input UNION SELECT zone FROM zones')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'events', 'icao24 text', 'SELECT icao24 FROM input UNION ALL SELECT icao24 FROM input')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'events', 'icao24 text', 'SELECT icao24 FROM input INTERSECT SELECT zone FROM zones')$$);
-- ... also below the top level, wherever "input" is read
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text, lat float8', 'SELECT icao24, lat FROM (SELECT icao24, max(lat) AS lat FROM input GROUP BY icao24) s')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text, lat float8', 'WITH m AS (SELECT max(lat) AS lat FROM input) SELECT i.icao24, m.lat FROM input i, m')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text, lat float8', 'SELECT icao24, (SELECT max(lat) FROM input) AS lat FROM input')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'events', 'seq bigint, icao24 text', 'SELECT i.icao24, i.seq FROM input i WHERE NOT EXISTS (SELECT 1 FROM input j WHERE j.icao24 = i.icao24 AND j.seq > i.seq)')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'events', 'icao24 text', 'WITH w AS (SELECT icao24 FROM input) SELECT a.icao24 FROM w a JOIN w b USING (icao24)')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'events', 'icao24 text', 'SELECT zone AS icao24 FROM zones')$$);
-- a stateful flow's own transform too: the operator aggregates
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text, lat float8', 'SELECT icao24, count(*) AS n FROM input GROUP BY icao24',
    operator => 'window_agg', options => '{"event_time": "poller_ts"}')$$);
-- row by row: aggregates over other tables, CTEs and subqueries over "input" that keep its rows apart,
-- set-returning functions (each row expands on its own); declared in a transaction rolled back
BEGIN;
SELECT pg_temp.refused($$SELECT sdp_create_flow('f1', 'flights', 'positions', 'icao24 text',
    'SELECT i.icao24, (SELECT max(max_lat) FROM zones) AS lat FROM input i')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f2', 'flights', 'positions', 'icao24 text',
    'SELECT i.icao24, z.lat FROM input i LEFT JOIN (SELECT zone, max(max_lat) AS lat FROM zones GROUP BY zone) z ON z.zone = i.icao24')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f3', 'flights', 'positions', 'icao24 text, lat float8',
    'WITH w AS (SELECT icao24, lat FROM input WHERE lat IS NOT NULL) SELECT icao24, lat FROM (SELECT * FROM w) s ORDER BY icao24')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f4', 'flights', 'events', 'icao24 text',
    'SELECT icao24 || ''-'' || generate_series(1, 2) AS icao24 FROM input WHERE icao24 IN (SELECT DISTINCT zone FROM zones LIMIT 5)')$$);
SELECT name FROM sdp.flows ORDER BY name;
ROLLBACK;
-- upsert needs a primary key, produced by the transform
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'events', 'seq bigint', options => '{"mode": "upsert"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text, lat float8', 'SELECT lat FROM input')$$);
-- the target must be a table
CREATE VIEW positions_view AS SELECT * FROM positions;
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions_view', 'icao24 text')$$);
-- options
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', options => '{"mode": "merge"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', options => '{"on_error": "ignore"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', options => '{"colour": "blue"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', options => '{"workers": 0}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', options => '{"workers": 65}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', options => '{"workers": 17}')$$);
-- a share of the topic's partitions: a JSON array of distinct partition numbers, one at least per worker
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', options => '{"partitions": []}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', options => '{"partitions": 3}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', options => '{"partitions": "0, 1"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', options => '{"partitions": {"0": 1}}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', options => '{"partitions": [0, -1]}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', options => '{"partitions": [0, 1.5]}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', options => '{"partitions": [0, 2147483648]}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', options => '{"partitions": [0, "1"]}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', options => '{"partitions": [0, null]}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', options => '{"partitions": [0, [1]]}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', options => '{"partitions": [2, 0, 2]}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', options => '{"partitions": [0, 1], "workers": 3}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', options => '{"checkpoint_interval": "soonish"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', options => '{"max_batch_rows": 0}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', options => '{"synchronous_commit": "sometimes"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text', operator => 'no_such_operator')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow(NULL, 'flights', 'positions', 'icao24 text')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', NULL, 'icao24 text')$$);
-- nothing was created by any of the refusals
SELECT count(*) AS flows FROM sdp.flows;

-- privileges: the flow runs as its owner, so the owner needs them now
CREATE ROLE sdp_app LOGIN;
CREATE ROLE sdp_nologin NOLOGIN;
GRANT sdp_app, sdp_nologin TO CURRENT_USER;
SET ROLE sdp_app;
SELECT sdp_create_source('app_flights', '127.0.0.1:9', 'raw-flights');
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'app_flights', 'positions', 'icao24 text')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'flights', 'positions', 'icao24 text')$$);
RESET ROLE;
GRANT INSERT ON positions TO sdp_app;
SET ROLE sdp_app;
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'app_flights', 'positions', 'icao24 text')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f', 'app_flights', 'positions', 'icao24 text', options => '{"mode": "append"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('f2', 'app_flights', 'positions', 'icao24 text, lat float8',
    'SELECT i.icao24, i.lat FROM input i JOIN zones z ON i.lat BETWEEN z.min_lat AND z.max_lat', options => '{"mode": "append"}')$$);
SELECT pg_temp.refused($$SELECT sdp_stop_flow('f')$$);
RESET ROLE;
SET ROLE sdp_nologin;
SELECT pg_temp.refused($$SELECT sdp_create_flow('f3', 'flights', 'positions', 'icao24 text')$$);
RESET ROLE;
-- tombstones that delete need upsert mode, a one-column primary key, no
-- operator, and DELETE on the target
SELECT pg_temp.refused($$SELECT sdp_create_flow('t', 'flights', 'positions', 'icao24 text', options => '{"on_tombstone": "sometimes"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('t', 'flights', 'positions', 'icao24 text', options => '{"on_tombstone": "delete", "mode": "append"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('t', 'flights', 'events', 'seq bigint, icao24 text', options => '{"on_tombstone": "delete"}')$$);
CREATE TABLE pairs (a text, b text, n int, PRIMARY KEY (a, b));
SELECT pg_temp.refused($$SELECT sdp_create_flow('t', 'flights', 'pairs', 'a text, b text, n int', options => '{"on_tombstone": "delete"}')$$);
DROP TABLE pairs;
GRANT UPDATE ON positions TO sdp_app;
SET ROLE sdp_app;
SELECT pg_temp.refused($$SELECT sdp_create_flow('t', 'app_flights', 'positions', 'icao24 text', options => '{"on_tombstone": "delete"}')$$);
RESET ROLE;
REVOKE UPDATE ON positions FROM sdp_app;
-- another role cannot stop, start or drop it
CREATE ROLE sdp_other LOGIN;
GRANT sdp_other TO CURRENT_USER;
SET ROLE sdp_other;
SELECT pg_temp.refused($$SELECT sdp_stop_flow('f')$$);
SELECT pg_temp.refused($$SELECT sdp_drop_flow('f')$$);
-- nor ask it to skip a message
SELECT pg_temp.refused($$SELECT sdp_skip_message('f', 0, 10)$$);
RESET ROLE;
-- skipping a message: a flow that exists, a message position, not one already processed
SELECT pg_temp.refused($$SELECT sdp_skip_message('no_such_flow', 0, 10)$$);
SELECT pg_temp.refused($$SELECT sdp_skip_message('f', -1, 10)$$);
SELECT pg_temp.refused($$SELECT sdp_skip_message('f', 0, -10)$$);
INSERT INTO sdp.offsets (flow_id, partition, next_offset) SELECT id, 0, 10 FROM sdp.flows WHERE name = 'f';
SET ROLE sdp_app;
SELECT pg_temp.refused($$SELECT sdp_skip_message('f', 0, 9)$$);
SELECT sdp_skip_message('f', 0, 10);
SELECT sdp_skip_message('f', 0, 10);
SELECT sdp_skip_message('f', 1, 0);
RESET ROLE;
SELECT kafka_partition, kafka_offset, requested_by FROM sdp.skipped_messages ORDER BY 1, 2;
SELECT name, owner, target, options FROM sdp.flows ORDER BY name;
SELECT sdp_drop_flow('f');

-- a flow over a share of the partitions: its workers divide the share, so no more workers than partitions in it
SELECT sdp_create_flow('shard', 'flights', 'events', 'seq bigint', options => '{"partitions": [6, 0, 2]}');
SELECT pg_temp.refused($$SELECT sdp_set_flow_workers('shard', 4)$$);
-- and reads no other partition: a message of one is skipped on the server that reads it
SELECT pg_temp.refused($$SELECT sdp_skip_message('shard', 1, 0)$$);
SELECT sdp_skip_message('shard', 2, 0);
SELECT sdp_set_flow_workers('shard', 3);
SELECT options FROM sdp.flows WHERE name = 'shard';
SELECT sdp_drop_flow('shard');

-- a complete declaration: stored with the resolved mode, and started
SELECT sdp_create_flow('positions_flow', 'flights', 'positions',
  schema    => 'icao24 text, lat float8, lon float8, baro_alt float8, vert_rate float8, poller_ts timestamptz',
  transform => $$SELECT icao24, lat, lon, baro_alt,
                        CASE WHEN vert_rate > 500 THEN 'climbing'
                             WHEN vert_rate < -500 THEN 'descending'
                             WHEN baro_alt > 30000 THEN 'cruise'
                             ELSE 'en_route' END AS flight_phase,
                        poller_ts
                   FROM input WHERE lat IS NOT NULL AND icao24 IS NOT NULL$$);
SELECT sdp_create_flow('events_flow', 'flights', 'events', 'seq bigint, icao24 text',
  options => '{"on_error": "skip", "max_batch_rows": 500, "max_batch_wait": "2 ms", "synchronous_commit": "on"}');
SELECT pg_temp.refused($$SELECT sdp_create_flow('events_flow', 'flights', 'events', 'seq bigint')$$);
SELECT name, source, target, operator, options, enabled, failed_at FROM sdp.flows ORDER BY name;
SELECT flow, source, topic, target, state IN ('starting', 'running') AS started FROM sdp_flow_status();

-- the launcher starts a worker per flow, named after it
DO $$
BEGIN
  FOR i IN 1..300 LOOP
    PERFORM pg_stat_clear_snapshot();  -- pg_stat_activity is read once per transaction otherwise
    PERFORM 1 FROM pg_stat_activity WHERE backend_type = 'sdp flow'
     HAVING array_agg(application_name ORDER BY application_name)
            = ARRAY['sdp flow events_flow', 'sdp flow positions_flow'];
    EXIT WHEN FOUND;
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
SELECT application_name, usename FROM pg_stat_activity WHERE backend_type = 'sdp flow' ORDER BY 1;

-- stop: the worker goes away, and the flow stays stopped
SELECT sdp_stop_flow('events_flow');
DO $$
BEGIN
  FOR i IN 1..300 LOOP
    PERFORM 1 FROM sdp.flow_status WHERE flow = 'events_flow' AND state = 'stopped';
    EXIT WHEN FOUND;
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
-- (positions_flow has a worker, but no broker answers at 127.0.0.1:9: it is not running)
SELECT flow, CASE WHEN state IN ('starting', 'retrying') THEN 'waiting for its broker' ELSE state END AS state,
       pid IS NOT NULL AS has_worker FROM sdp.flow_status ORDER BY flow;
SELECT sdp_start_flow('events_flow');
SELECT enabled FROM sdp.flows WHERE name = 'events_flow';
SELECT sdp_flow_progress('events_flow') IS NULL AS no_report_yet;
SELECT pg_temp.refused($$SELECT sdp_flow_progress('no_such_flow')$$);

-- a source in use cannot be dropped
SELECT pg_temp.refused($$SELECT sdp_drop_source('flights')$$);
SELECT pg_temp.refused($$SELECT sdp_drop_flow('no_such_flow')$$);
SELECT sdp_drop_flow('positions_flow');
SELECT sdp_drop_flow('events_flow');
SELECT sdp_drop_source('flights');
SELECT sdp_drop_source('app_flights');
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
SELECT count(*) AS offsets_left FROM sdp.offsets;
SELECT count(*) AS skip_requests_left FROM sdp.skipped_messages;

-- flows live in sdp.database only
CREATE DATABASE sdp_elsewhere;
\c sdp_elsewhere
CREATE EXTENSION sdp_ext;
SELECT sdp_create_source('x', '127.0.0.1:9', 'x');
\c contrib_regression
DROP DATABASE sdp_elsewhere;

DROP EXTENSION sdp_ext;
DROP TABLE positions, events, zones CASCADE;
DROP ROLE sdp_app, sdp_nologin, sdp_other;

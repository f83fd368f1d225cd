-- examples/flights.sql: the flight-tracking pipeline of the demo.
--
--   psql -v bootstrap=127.0.0.1:9092 -f examples/flights.sql
--   psql -v bootstrap=127.0.0.1:9092 -v two_stage=1 -f examples/flights.sql
--
-- Needs sdp_ext created in sdp.database, and a Kafka topic raw-flights with
-- JSON aircraft positions (tools/flight_sim produces them).  With
-- two_stage, zone congestion runs in two stages through Kafka (see the end
-- of the file) and needs topics zone-positions and zone-alerts too.

-- Monitored terminal areas (boxes around real airports), edited live by users.
CREATE TABLE zones (
    zone     text PRIMARY KEY,
    min_lat  float8 NOT NULL,
    max_lat  float8 NOT NULL,
    min_lon  float8 NOT NULL,
    max_lon  float8 NOT NULL,
    capacity int NOT NULL
);
INSERT INTO zones VALUES
    ('London TMA',     51.00,  52.05,   -0.95,   0.75, 12),
    ('Paris TMA',      48.55,  49.25,    1.95,   2.95, 10),
    ('Amsterdam TMA',  51.90,  52.60,    4.20,   5.20,  8),
    ('Frankfurt TMA',  49.70,  50.40,    8.10,   9.00,  8),
    ('Munich TMA',     48.05,  48.65,   11.35,  12.20,  6),
    ('New York TMA',   40.40,  41.10,  -74.50, -73.00, 12),
    ('Chicago TMA',    41.60,  42.30,  -88.40, -87.50, 10),
    ('Madrid TMA',     40.20,  40.80,   -3.95,  -3.20,  6);

-- The latest position of every aircraft, enriched.
CREATE TABLE positions (
    icao24       text PRIMARY KEY,
    callsign     text,
    lat          float8,
    lon          float8,
    baro_alt     float8,          -- feet
    vert_rate    float8,          -- feet per minute
    squawk       text,
    velocity     float8,          -- knots
    heading      float8,
    poller_ts    timestamptz,
    flight_phase text,
    squawk_alert text,
    zone         text,
    updated_at   timestamptz
);

-- source_options (optional, a JSON object): client properties for the
-- sources, e.g. -v source_options='{"fetch.wait.max.ms": "1"}' on the
-- embedded broker (tools/sdp_broker), which answers a fetch that finds no
-- data only after the whole wait (the default, 100 ms, suits Apache Kafka)
\if :{?source_options}
\else
\set source_options '{}'
\endif
SELECT sdp_create_source('flights', :'bootstrap', 'raw-flights', :'source_options');

-- Enrich flow (stateless): parse, drop rows without a position or an id,
-- add flight_phase, squawk_alert and zone, keep the latest row per aircraft.
SELECT sdp_create_flow('positions_flow', source => 'flights', target => 'positions',
  schema    => 'icao24 text, callsign text, lat float8, lon float8, baro_alt float8,
                vert_rate float8, squawk text, velocity float8, heading float8,
                poller_ts timestamptz',
  transform => $$
    SELECT i.icao24, i.callsign, i.lat, i.lon, i.baro_alt, i.vert_rate, i.squawk,
           i.velocity, i.heading, i.poller_ts,
           CASE WHEN i.vert_rate > 500  THEN 'climbing'
                WHEN i.vert_rate < -500 THEN 'descending'
                WHEN i.baro_alt > 30000 THEN 'cruise'
                ELSE 'en_route' END AS flight_phase,
           CASE WHEN i.squawk IN ('7500', '7600', '7700') THEN 'emergency' END AS squawk_alert,
           z.zone,
           now() AS updated_at
      FROM input i
      LEFT JOIN LATERAL (
            SELECT zone FROM zones z
             WHERE i.lat BETWEEN z.min_lat AND z.max_lat
               AND i.lon BETWEEN z.min_lon AND z.max_lon
             ORDER BY zone LIMIT 1) z ON true
     WHERE i.lat IS NOT NULL AND i.icao24 IS NOT NULL $$,
  options   => '{"mode": "upsert", "progress_interval": "5 seconds", "notify": "flights"}');

-- How many aircraft are in each zone now, and whether it is crowded.
CREATE TABLE zone_alerts (
    zone           text PRIMARY KEY,
    aircraft_count bigint NOT NULL,
    crowded        boolean NOT NULL,
    updated_at     timestamptz NOT NULL
);

\if :{?two_stage}
-- Zone congestion in two stages, through Kafka.  raw-flights is keyed by
-- aircraft, but zone congestion is keyed by zone: to run it in several
-- workers, each zone's positions must arrive on one partition (a key's
-- state is owned by the partition it arrives on).  So the positions are
-- re-keyed through a topic first (a repartition topic, as in Kafka
-- Streams), exactly once:
--   zone_positions_flow   raw-flights -> (zone, icao24, ts) -> zone-positions, keyed by zone
--   zone_congestion_flow  zone-positions -> active_count, 2 workers -> zone-alerts, keyed by zone
--   zone_alerts_flow      zone-alerts -> zone_alerts (upsert)
-- zone-alerts is also what the systems that act on alerts read.  The sinks
-- use the brokers of the flights source.
SELECT sdp_create_sink('zone_positions', bootstrap_servers, 'zone-positions'),
       sdp_create_sink('zone_alerts_out', bootstrap_servers, 'zone-alerts')
  FROM sdp.source_list WHERE name = 'flights';
SELECT sdp_create_source('zone_positions_in', bootstrap_servers, 'zone-positions', '{"isolation.level": "read_committed"}'::jsonb || :'source_options'),
       sdp_create_source('zone_alerts_in', bootstrap_servers, 'zone-alerts', '{"isolation.level": "read_committed"}'::jsonb || :'source_options')
  FROM sdp.source_list WHERE name = 'flights';

SELECT sdp_create_flow('zone_positions_flow', source => 'flights', sink => 'zone_positions',
  schema    => 'icao24 text, lat float8, lon float8, poller_ts timestamptz',
  transform => $$SELECT z.zone, i.icao24, i.poller_ts AS ts FROM input i
                 JOIN zones z ON i.lat BETWEEN z.min_lat AND z.max_lat
                             AND i.lon BETWEEN z.min_lon AND z.max_lon$$,
  options   => '{"sink_key": "zone", "progress_interval": "5 seconds"}');

SELECT sdp_create_flow('zone_congestion_flow', source => 'zone_positions_in', sink => 'zone_alerts_out',
  schema    => 'zone text, icao24 text, ts timestamptz',
  transform => $$SELECT i.zone, i.icao24, z.capacity FROM input i JOIN zones z USING (zone)$$,
  operator  => 'active_count',
  options   => '{"key": "zone", "member": "icao24", "ttl": "30 seconds",
                 "capacity_column": "capacity", "count_column": "aircraft_count",
                 "alert_column": "crowded", "time_column": "updated_at",
                 "sink_key": "zone", "workers": 2, "progress_interval": "5 seconds"}');

SELECT sdp_create_flow('zone_alerts_flow', source => 'zone_alerts_in', target => 'zone_alerts',
  schema    => 'zone text, aircraft_count bigint, crowded boolean, updated_at timestamptz',
  options   => '{"progress_interval": "5 seconds", "notify": "flights"}');
\else
-- Zone congestion flow (stateful, processing time): per zone, the aircraft
-- seen in the last 30 seconds; one sweep timer per zone evicts the others;
-- the count is upserted whenever it changes, crowded past the capacity.
-- One stage, one worker: raw-flights is keyed by aircraft, so every worker
-- would see every zone (see two_stage above for several workers).
SELECT sdp_create_flow('zone_congestion_flow', source => 'flights', target => 'zone_alerts',
  schema    => 'icao24 text, lat float8, lon float8',
  transform => $$SELECT z.zone, i.icao24, z.capacity FROM input i
                 JOIN zones z ON i.lat BETWEEN z.min_lat AND z.max_lat
                             AND i.lon BETWEEN z.min_lon AND z.max_lon$$,
  operator  => 'active_count',
  options   => '{"key": "zone", "member": "icao24", "ttl": "30 seconds",
                 "capacity_column": "capacity", "count_column": "aircraft_count",
                 "alert_column": "crowded", "time_column": "updated_at",
                 "progress_interval": "5 seconds", "notify": "flights"}');
\endif

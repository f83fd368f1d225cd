-- examples/zone_counter.sql: the seed's ZoneCounter, a stateful processor
-- written in PL/pgSQL (operator 'processor').
--
--   psql -f examples/zone_counter.sql      (after examples/flights.sql, or
--                                           README's quick start: it reads
--                                           the source flights and the table zones)
--
-- Per zone it keeps a map aircraft -> last seen (processing time) and one
-- pending sweep timer, kept in a value; each batch refreshes the zone's
-- aircraft, the sweep evicts those not seen within the TTL and re-arms
-- while the zone has aircraft.  Whenever the count changes it emits (zone,
-- count, crowded, updated_at), upserted into zone_counts; an empty zone
-- emits its 0 and keeps no state.  The built-in operator active_count does
-- the same in C (examples/flights.sql); test/t/066 runs both side by side.

CREATE TABLE zone_counts (
    zone           text PRIMARY KEY,
    aircraft_count bigint NOT NULL,
    crowded        boolean NOT NULL,
    updated_at     timestamptz NOT NULL
);

-- the rows the handler gets, matched by name to the transform's columns
CREATE TYPE zone_position AS (zone text, icao24 text, capacity int);

-- how long an aircraft counts after it was last seen, and how often a zone is swept
CREATE FUNCTION zone_counter_ttl() RETURNS interval LANGUAGE sql IMMUTABLE AS $$SELECT interval '30 seconds'$$;
CREATE FUNCTION zone_counter_sweep() RETURNS interval LANGUAGE sql IMMUTABLE AS $$SELECT interval '5 seconds'$$;

-- (zone, count, crowded, now) when the count differs from the last one emitted
CREATE FUNCTION zone_counter_emit(zone text, n bigint) RETURNS SETOF zone_counts LANGUAGE plpgsql AS $$
BEGIN
  IF n IS DISTINCT FROM sdp_value('last_count', NULL::bigint) THEN
    PERFORM sdp_set_value('last_count', n);
    RETURN NEXT ROW(zone, n, n > coalesce(sdp_value('capacity', NULL::int), n), sdp_processing_time())::zone_counts;
  END IF;
END $$;

-- handleInputRows: refresh the zone's aircraft, arm the one sweep, emit the count if it changed
CREATE FUNCTION zone_counter_rows(zone text, rows zone_position[]) RETURNS SETOF zone_counts
LANGUAGE plpgsql AS $$
DECLARE
  r zone_position;
  t timestamptz := sdp_processing_time();
BEGIN
  FOREACH r IN ARRAY rows LOOP
    PERFORM sdp_map_put('aircraft', r.icao24, t);
  END LOOP;
  PERFORM sdp_set_value('capacity', rows[array_upper(rows, 1)].capacity);
  IF sdp_value('sweep_at', NULL::timestamptz) IS NULL THEN
    PERFORM sdp_register_timer(t + zone_counter_sweep());
    PERFORM sdp_set_value('sweep_at', t + zone_counter_sweep());
  END IF;
  RETURN QUERY SELECT * FROM zone_counter_emit(zone, sdp_map_count('aircraft'));
END $$;

-- handleExpiredTimer: evict the stale aircraft, emit the count if it changed, re-arm or let the zone go
CREATE FUNCTION zone_counter_timer(zone text, at timestamptz, kind text) RETURNS SETOF zone_counts
LANGUAGE plpgsql AS $$
DECLARE
  t timestamptz := sdp_processing_time();
  a record;
  n bigint;
BEGIN
  FOR a IN SELECT * FROM sdp_map_entries('aircraft', NULL::text, NULL::timestamptz) LOOP
    IF a.value < t - zone_counter_ttl() THEN
      PERFORM sdp_map_remove('aircraft', a.key);
    END IF;
  END LOOP;
  n := sdp_map_count('aircraft');
  RETURN QUERY SELECT * FROM zone_counter_emit(zone, n);
  IF n > 0 THEN
    PERFORM sdp_register_timer(t + zone_counter_sweep());
    PERFORM sdp_set_value('sweep_at', t + zone_counter_sweep());
  ELSE
    -- the zone is empty: its 0 is out, nothing is left to keep
    PERFORM sdp_clear('sweep_at');
    PERFORM sdp_clear('capacity');
    PERFORM sdp_clear('last_count');
  END IF;
END $$;

SELECT sdp_create_flow('zone_counter_flow', source => 'flights', target => 'zone_counts',
  schema    => 'icao24 text, lat float8, lon float8',
  transform => $$SELECT z.zone, i.icao24, z.capacity FROM input i
                 JOIN zones z ON i.lat BETWEEN z.min_lat AND z.max_lat
                             AND i.lon BETWEEN z.min_lon AND z.max_lon$$,
  operator  => 'processor',
  options   => '{"key": "zone", "handle_rows": "zone_counter_rows", "handle_timer": "zone_counter_timer",
                 "state": {"aircraft": {"map": ["text", "timestamptz"]}, "sweep_at": {"value": "timestamptz"},
                           "capacity": {"value": "int"}, "last_count": {"value": "bigint"}}}');

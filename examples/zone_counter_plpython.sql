-- examples/zone_counter_plpython.sql: the seed's ZoneCounter in PL/Python,
-- statement for statement the StatefulProcessor of Spark's transformWithState
-- (handleInputRows, handleExpiredTimer), on sdp_ext's state API.
--
--   psql -f examples/zone_counter_plpython.sql    (after examples/zone_counter.sql:
--                                                  it uses its table, type and settings)
--
-- Needs PL/Python (Debian: postgresql-plpython3-15) and a superuser to
-- create the functions (plpython3u is untrusted).  Its flow writes into
-- zone_counts_py; it keeps the same state as the PL/pgSQL version, and the
-- two tables end with the same rows (test/t/074_processor_plpython.pl).

CREATE EXTENSION IF NOT EXISTS plpython3u;
CREATE TABLE zone_counts_py (LIKE zone_counts INCLUDING ALL);

-- the state API's calls, prepared once per session (SD: the function's own dictionary)
CREATE FUNCTION zone_counter_py_api() RETURNS void LANGUAGE plpython3u AS $$
GD['zc'] = {
    'now': plpy.prepare("SELECT sdp_processing_time() AS t"),
    'put': plpy.prepare("SELECT sdp_map_put('aircraft', $1, $2)", ["text", "timestamptz"]),
    'remove': plpy.prepare("SELECT sdp_map_remove('aircraft', $1)", ["text"]),
    'stale': plpy.prepare("SELECT key FROM sdp_map_entries('aircraft', NULL::text, NULL::timestamptz) "
                          "WHERE value < sdp_processing_time() - zone_counter_ttl()"),
    'count': plpy.prepare("SELECT sdp_map_count('aircraft') AS n"),
    'get': plpy.prepare("SELECT sdp_value($1, NULL::timestamptz) AS v", ["text"]),
    'get_int': plpy.prepare("SELECT sdp_value($1, NULL::int) AS v", ["text"]),
    'get_bigint': plpy.prepare("SELECT sdp_value($1, NULL::bigint) AS v", ["text"]),
    'set': plpy.prepare("SELECT sdp_set_value($1, $2)", ["text", "timestamptz"]),
    'set_int': plpy.prepare("SELECT sdp_set_value($1, $2)", ["text", "int"]),
    'set_bigint': plpy.prepare("SELECT sdp_set_value($1, $2)", ["text", "bigint"]),
    'clear': plpy.prepare("SELECT sdp_clear($1)", ["text"]),
    'timer': plpy.prepare("SELECT sdp_register_timer($1)", ["timestamptz"]),
}
$$;

CREATE FUNCTION zone_counter_py_rows(zone text, rows zone_position[]) RETURNS SETOF zone_counts_py
LANGUAGE plpython3u AS $$
if 'zc' not in GD:
    plpy.execute("SELECT zone_counter_py_api()")
api = GD['zc']
now = plpy.execute(api['now'])[0]['t']
for row in rows:                                         # self.aircraft.updateValue(icao24, now)
    plpy.execute(api['put'], [row['icao24'], now])
plpy.execute(api['set_int'], ['capacity', rows[-1]['capacity']])
if plpy.execute(api['get'], ['sweep_at'])[0]['v'] is None:   # if not self.timer.exists()
    at = plpy.execute("SELECT sdp_processing_time() + zone_counter_sweep() AS at")[0]['at']
    plpy.execute(api['timer'], [at])                     # self.handle.registerTimer(at)
    plpy.execute(api['set'], ['sweep_at', at])           # self.timer.update(at)
n = plpy.execute(api['count'])[0]['n']
if n != plpy.execute(api['get_bigint'], ['last_count'])[0]['v']:
    plpy.execute(api['set_bigint'], ['last_count', n])
    capacity = plpy.execute(api['get_int'], ['capacity'])[0]['v']
    return [(zone, n, capacity is not None and n > capacity, now)]
return []
$$;

CREATE FUNCTION zone_counter_py_timer(zone text, at timestamptz, kind text) RETURNS SETOF zone_counts_py
LANGUAGE plpython3u AS $$
if 'zc' not in GD:
    plpy.execute("SELECT zone_counter_py_api()")
api = GD['zc']
for e in plpy.execute(api['stale']):                     # for icao24 in self.aircraft, seen before now - TTL
    plpy.execute(api['remove'], [e['key']])              # self.aircraft.removeKey(icao24)
n = plpy.execute(api['count'])[0]['n']
now = plpy.execute(api['now'])[0]['t']
out = []
if n != plpy.execute(api['get_bigint'], ['last_count'])[0]['v']:
    plpy.execute(api['set_bigint'], ['last_count', n])
    capacity = plpy.execute(api['get_int'], ['capacity'])[0]['v']
    out.append((zone, n, capacity is not None and n > capacity, now))
if n > 0:
    nxt = plpy.execute("SELECT sdp_processing_time() + zone_counter_sweep() AS at")[0]['at']
    plpy.execute(api['timer'], [nxt])
    plpy.execute(api['set'], ['sweep_at', nxt])
else:                                                    # self.timer.clear(); the zone keeps nothing
    for name in ('sweep_at', 'capacity', 'last_count'):
        plpy.execute(api['clear'], [name])
return out
$$;

SELECT sdp_create_flow('zone_counter_py_flow', source => 'flights', target => 'zone_counts_py',
  schema    => 'icao24 text, lat float8, lon float8',
  transform => $$SELECT z.zone, i.icao24, z.capacity FROM input i
                 JOIN zones z ON i.lat BETWEEN z.min_lat AND z.max_lat
                             AND i.lon BETWEEN z.min_lon AND z.max_lon$$,
  operator  => 'processor',
  options   => '{"key": "zone", "handle_rows": "zone_counter_py_rows", "handle_timer": "zone_counter_py_timer",
                 "state": {"aircraft": {"map": ["text", "timestamptz"]}, "sweep_at": {"value": "timestamptz"},
                           "capacity": {"value": "int"}, "last_count": {"value": "bigint"}}}');

# A crash loop over every kind of flow.  Three flows read one stream of
# aircraft positions at once: a stateless append flow (every message), the
# zone congestion flow (active_count, processing time) and a window_agg flow
# (event time: tumbling, filtered and hopping windows), while the postmaster
# is killed with SIGKILL 20 times at random moments and restarted.  Flows
# commit with synchronous_commit = off, so each crash loses the tail of their
# commits.  After the last restart, once everything is consumed:
#   - every (partition, offset) is in the append target exactly once;
#   - every window equals a SQL GROUP BY over the events of the append target;
#   - zone_alerts and the zone flow's state equal a recount over the events.
#
# The moments of the crashes and the fleet come from one seed, printed at the
# start; SDP_CRASH_SEED=N replays it (SDP_CRASH_CYCLES=N changes the number
# of crashes).
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use PostgreSQL::Test::Utils;
use SdpKafka;
use SdpTest;
use Test::More;
use Time::HiRes qw(sleep time);

my $seed = $ENV{SDP_CRASH_SEED} // (time() * 1000 + $$) % 1_000_000;
my $cycles = $ENV{SDP_CRASH_CYCLES} // 20;
srand($seed);
diag("crash loop: seed $seed, $cycles crashes (replay with SDP_CRASH_SEED=$seed)");

my $partitions = 4;
my $broker = SdpKafka::start_broker(topics => { 'raw-flights' => $partitions });
my $node = SdpTest::new_node('crashloop');
SdpTest::create_source($node, 'flights', $broker, 'raw-flights');
SdpTest::query($node, <<'SQL');
CREATE TABLE zones (zone text PRIMARY KEY, min_lat float8, max_lat float8, min_lon float8, max_lon float8, capacity int);
INSERT INTO zones VALUES
    ('London TMA',     51.00,  52.05,   -0.95,   0.75, 12),
    ('Paris TMA',      48.55,  49.25,    1.95,   2.95, 10),
    ('Amsterdam TMA',  51.90,  52.60,    4.20,   5.20,  8),
    ('Frankfurt TMA',  49.70,  50.40,    8.10,   9.00,  8),
    ('Munich TMA',     48.05,  48.65,   11.35,  12.20,  6),
    ('New York TMA',   40.40,  41.10,  -74.50, -73.00, 12),
    ('Chicago TMA',    41.60,  42.30,  -88.40, -87.50, 10),
    ('Madrid TMA',     40.20,  40.80,   -3.95,  -3.20,  6);

-- stateless: every message, appended
CREATE TABLE events (seq bigint, icao24 text, lat float8, lon float8, baro_alt int, vert_rate int,
                     squawk text, poller_ts timestamptz, kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow('events_flow', 'flights', 'events',
  'seq bigint, icao24 text, lat float8, lon float8, baro_alt int, vert_rate int, squawk text, poller_ts timestamptz',
  options => '{"mode": "append"}');

-- active_count: aircraft per zone (the TTL is longer than the test, so the
-- count is every aircraft the zone has seen)
CREATE TABLE zone_alerts (zone text PRIMARY KEY, aircraft_count bigint, crowded boolean, updated_at timestamptz);
SELECT sdp_create_flow('zone_congestion_flow', source => 'flights', target => 'zone_alerts',
  schema    => 'icao24 text, lat float8, lon float8',
  transform => $$SELECT z.zone, i.icao24, z.capacity FROM input i
                 JOIN zones z ON i.lat BETWEEN z.min_lat AND z.max_lat
                             AND i.lon BETWEEN z.min_lon AND z.max_lon$$,
  operator  => 'active_count',
  options   => '{"key": "zone", "member": "icao24", "ttl": "1 hour", "capacity_column": "capacity",
                 "count_column": "aircraft_count", "alert_column": "crowded", "time_column": "updated_at",
                 "checkpoint_interval": "1 second"}');

-- window_agg over the positions' event time
SELECT sdp_create_window_table('flight_windows');
SELECT sdp_create_flow('flight_agg', source => 'flights', target => 'flight_windows',
  schema   => 'icao24 text, baro_alt int, vert_rate int, squawk text, poller_ts timestamptz',
  operator => 'window_agg',
  options  => '{"event_time": "poller_ts", "idle_timeout": "5 seconds", "checkpoint_interval": "1 second"}');
SELECT sdp_load_aggregations('flight_agg', $$[
  {"name": "reports_1m", "group_by": ["icao24"], "operation": "count",
   "window_size": "1 minute", "allowance": "20 seconds"},
  {"name": "climb_alt_1m", "group_by": ["icao24"], "operation": "sum", "value": "baro_alt",
   "filter": "vert_rate > 500", "window_size": "1 minute", "allowance": "20 seconds"},
  {"name": "avg_alt_1m", "group_by": [], "operation": "avg", "value": "baro_alt",
   "window_size": "1 minute", "allowance": "20 seconds"},
  {"name": "emergency_hop", "group_by": ["squawk"], "operation": "count",
   "filter": "squawk IN ('7500', '7600', '7700')",
   "window_size": "2 minutes", "slide": "1 minute", "allowance": "20 seconds"}]$$);
SQL
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 3 FROM sdp.flow_status WHERE state = 'running' AND partitions IS NOT NULL"),
	'the three flows run');

# Positions of 400 aircraft, 20 simulated seconds per second, until stopped.
my $producer = SdpKafka::start_flightsim(bootstrap => $broker->bootstrap, topic => 'raw-flights',
	args => [ '--duration', 3600, '--rate', 800, '--aircraft', 400, '--time-scale', 20,
			  '--seed', $seed ]);
ok($node->poll_query_until('postgres', 'SELECT count(*) > 1000 FROM events'), 'streaming');

# The crashes, each at a random moment after the previous restart: a quarter
# within 0.3 s (while the launcher starts the workers and they restore their
# checkpoints), the others within 2.5 s (while they replay the backlog, or
# keep up).
my $started = time;
my $log_start = -s $node->logfile;
for my $cycle (1 .. $cycles)
{
	my $wait = rand() < 0.25 ? rand(0.3) : 0.3 + rand(2.2);
	sleep $wait;
	my ($ret, $seen) = $node->psql('postgres',
		"SELECT (SELECT count(*) FROM events) || ' events, ' || (SELECT count(*) FROM flight_windows) || ' windows, '"
		  . " || (SELECT count(*) FROM sdp.flow_status WHERE state = 'running') || ' flows running'");
	SdpTest::crash_and_restart($node);
	note(sprintf('crash %d after %.2f s: %s', $cycle, $wait, $ret == 0 ? $seen : '(no answer)'));
}
pass(sprintf('%d crashes in %.0f s, each followed by a restart', $cycles, time - $started));

# Stop the producer, then one message on every partition, outside every
# zone, a day of event time later (the stream's event time runs 20 times as
# fast as the clock, for minutes): the watermark passes every window of the
# stream, which all close.
my $report = $producer->stop;
is($report->{delivered}, $report->{sent}, "producer delivered all it sent ($report->{sent})");
my $sent = $report->{sent};
my %per_partition = map { $_ => $report->{partitions}{$_} // 0 } 0 .. $partitions - 1;
my $closing_ts = SdpTest::query($node,
	"SELECT to_char(now() AT TIME ZONE 'UTC' + interval '1 day', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')");
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'raw-flights',
	messages => [ map {
		my $seq = $sent + $_;
		[ "close$_", qq({"seq": $seq, "icao24": "close$_", "lat": 0, "lon": 0, "baro_alt": 0, "vert_rate": 0, )
			. qq("squawk": "0000", "poller_ts": "$closing_ts"}), $_ ]
	} 0 .. $partitions - 1 ]);
$per_partition{$_}++ for 0 .. $partitions - 1;
my $total = $sent + $partitions;

ok(SdpTest::wait_consumed($node, 'events_flow', $total), "events_flow consumed all $total");
ok(SdpTest::wait_consumed($node, 'zone_congestion_flow', $total), 'zone_congestion_flow consumed everything');
ok(SdpTest::wait_consumed($node, 'flight_agg', $total), 'flight_agg consumed everything');

# 1. the stateless flow: every message once
SdpTest::assert_exactly_once($node, 'events', \%per_partition, "after $cycles crashes");
is(SdpTest::query($node, 'SELECT count(*) FROM sdp.dead_letters'), '0', 'no dead letters, no late events');

# 2. the windows: a GROUP BY over the events (the closing messages excluded;
# their windows stay open)
SdpTest::query($node, <<"SQL");
SET TimeZone = 'UTC';
CREATE TABLE expected AS
WITH g AS (SELECT *, date_bin('1 minute', poller_ts, '1970-01-01 00:00:00+00') AS ws FROM events WHERE seq < $sent)
SELECT 'reports_1m' AS definition, icao24 AS entity, ws AS window_start, count(*)::float8 AS value, count(*) AS row_count
  FROM g GROUP BY icao24, ws
UNION ALL
SELECT 'climb_alt_1m', icao24, ws, sum(baro_alt)::float8, count(*) FROM g WHERE vert_rate > 500 GROUP BY icao24, ws
UNION ALL
SELECT 'avg_alt_1m', '', ws, avg(baro_alt)::float8, count(*) FROM g GROUP BY ws
UNION ALL
SELECT 'emergency_hop', squawk, w.ws, count(*)::float8, count(*)
  FROM g, LATERAL (VALUES (g.ws), (g.ws - interval '1 minute')) w(ws)
 WHERE squawk IN ('7500', '7600', '7700') GROUP BY squawk, w.ws;
SQL
my $expected = SdpTest::query($node, 'SELECT count(*) FROM expected');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = $expected FROM flight_windows WHERE window_start < '$closing_ts'::timestamptz - interval '2 minutes'"),
	"all $expected windows finalized");
is(SdpTest::query($node, <<"SQL"), '', 'every window equals the SQL GROUP BY over the events');
SELECT string_agg(definition || '/' || entity || '/' || window_start || ' expected '
                  || coalesce(e.value::text, '-') || '/' || coalesce(e.row_count::text, '-')
                  || ' got ' || coalesce(w.value::text, '-') || '/' || coalesce(w.row_count::text, '-'), E'\\n')
  FROM expected e
  FULL JOIN (SELECT * FROM flight_windows WHERE window_start < '$closing_ts'::timestamptz - interval '2 minutes') w
 USING (definition, entity, window_start)
 WHERE e.value IS DISTINCT FROM w.value OR e.row_count IS DISTINCT FROM w.row_count
SQL
is(SdpTest::query($node, 'SELECT count(*) - count(DISTINCT (definition, entity, window_start)) FROM flight_windows'),
	'0', 'one row per (definition, entity, window)');
my $per_def = SdpTest::query($node,
	"SELECT string_agg(definition || ' ' || n, ', ' ORDER BY definition) FROM "
	  . "(SELECT definition, count(*) AS n FROM expected GROUP BY 1) d");

# 3. the zones: every aircraft ever seen in each zone (the TTL is an hour)
SdpTest::query($node, <<'SQL');
CREATE TABLE expected_members AS
SELECT z.zone, e.icao24, z.capacity
  FROM events e JOIN zones z ON e.lat BETWEEN z.min_lat AND z.max_lat AND e.lon BETWEEN z.min_lon AND z.max_lon
 GROUP BY 1, 2, 3;
SQL
my $zones = SdpTest::query($node,
	"SELECT count(*) || ' zones, ' || coalesce(sum(n), 0) || ' aircraft' FROM "
	  . "(SELECT zone, count(*) AS n FROM expected_members GROUP BY zone) z");
ok(SdpTest::query($node, 'SELECT count(DISTINCT zone) FROM expected_members') >= 2,
	"aircraft passed through zones ($zones)");
is(SdpTest::query($node, <<'SQL'), '', 'zone_alerts equals a recount over the events: counts and crowded');
WITH e AS (SELECT zone, count(*) AS n, min(capacity) AS capacity FROM expected_members GROUP BY zone)
SELECT string_agg(zone || ' expected ' || coalesce(e.n::text, '-') || ' got ' || coalesce(a.aircraft_count::text, '-')
                  || coalesce(' crowded ' || a.crowded, ''), E'\n')
  FROM e FULL JOIN zone_alerts a USING (zone)
 WHERE a.aircraft_count IS DISTINCT FROM e.n OR a.crowded IS DISTINCT FROM (e.n > e.capacity)
SQL
is(SdpTest::query($node, <<'SQL'), '0', 'the zone flow state holds exactly the aircraft of each zone');
WITH s AS (SELECT st.key AS zone, m AS icao24 FROM sdp_flow_state('zone_congestion_flow') st, jsonb_object_keys(st.value) m
            WHERE st.state = 'last_seen')
SELECT count(*) FROM s FULL JOIN expected_members e USING (zone, icao24) WHERE s.zone IS NULL OR e.zone IS NULL
SQL

# the crashes came after checkpoints: the stateful flows restored state
my $log = slurp_file($node->logfile, $log_start);
my %restored = map {
	my $flow = $_;
	my $n = () = $log =~ /sdp flow "$flow" restored the state of \d+ keys from its checkpoint/g;
	($flow => $n)
} qw(zone_congestion_flow flight_agg);
ok($restored{zone_congestion_flow} > 0 && $restored{flight_agg} > 0,
	"the stateful flows restored checkpointed state after crashes (zone_congestion_flow $restored{zone_congestion_flow} times, "
	  . "flight_agg $restored{flight_agg} times)");

my $restarts = SdpTest::query($node,
	"SELECT string_agg(flow || ' ' || restarts, ', ' ORDER BY flow) FROM sdp.flow_status");
diag("crash loop: $cycles crashes; $total messages ($sent from flight_sim, $partitions closing); "
	  . "windows: $expected ($per_def); zones: $zones; checkpoints restored: zone_congestion_flow "
	  . "$restored{zone_congestion_flow}, flight_agg $restored{flight_agg}; worker restarts since the last start: $restarts");

done_testing();

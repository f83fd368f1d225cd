# A stateful flow survives the postmaster being killed with SIGKILL
# mid-stream: it restores its last checkpoint, replays the messages after it,
# and ends with the state and the zone_alerts of a run without the crash
# (computed here from every message, which a stateless flow writes
# exactly-once beside it).
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $broker = SdpKafka::start_broker(topics => { 'raw-flights' => 4 });
my $node = SdpTest::new_node('zonecrash');
SdpTest::create_source($node, 'flights', $broker, 'raw-flights');
SdpTest::query($node, <<'SQL');
CREATE TABLE zones (zone text PRIMARY KEY, min_lat float8, max_lat float8, min_lon float8, max_lon float8, capacity int);
INSERT INTO zones VALUES
    ('London TMA',   51.00, 52.05,  -0.95,   0.75, 12),
    ('Paris TMA',    48.55, 49.25,   1.95,   2.95, 10),
    ('New York TMA', 40.40, 41.10, -74.50, -73.00, 12),
    ('Chicago TMA',  41.60, 42.30, -88.40, -87.50, 10),
    ('Frankfurt TMA',49.70, 50.40,   8.10,   9.00,  8);
CREATE TABLE zone_alerts (zone text PRIMARY KEY, aircraft_count bigint, crowded boolean, updated_at timestamptz);
CREATE TABLE all_positions (seq bigint, icao24 text, lat float8, lon float8, kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow('zone_congestion_flow', source => 'flights', target => 'zone_alerts',
  schema    => 'icao24 text, lat float8, lon float8',
  transform => $$SELECT z.zone, i.icao24, z.capacity FROM input i
                 JOIN zones z ON i.lat BETWEEN z.min_lat AND z.max_lat
                             AND i.lon BETWEEN z.min_lon AND z.max_lon$$,
  operator  => 'active_count',
  options   => '{"key": "zone", "member": "icao24", "ttl": "1 hour", "capacity_column": "capacity",
                 "count_column": "aircraft_count", "alert_column": "crowded", "time_column": "updated_at",
                 "checkpoint_interval": "1 second"}');
SELECT sdp_create_flow('all_positions_flow', 'flights', 'all_positions', 'seq bigint, icao24 text, lat float8, lon float8');
SQL

my $total = 40000;
my $producer = SdpKafka::start_flightsim(bootstrap => $broker->bootstrap, topic => 'raw-flights',
	args => [ '--count', $total, '--rate', 2500, '--aircraft', 800, '--time-scale', 40, '--seed', 17 ]);

ok($node->poll_query_until('postgres',
		"SELECT last_checkpoint_at IS NOT NULL AND messages_read > 10000 FROM sdp.flow_status WHERE flow = 'zone_congestion_flow'"),
	'streaming, and the state has been checkpointed');
my $keys_before = SdpTest::query($node, "SELECT count(DISTINCT key) FROM sdp_flow_state('zone_congestion_flow')");
my $log_offset = -s $node->logfile;
SdpTest::crash_and_restart($node);
pass("postmaster killed with SIGKILL mid-stream ($keys_before zones in state), restarted");

ok($node->poll_query_until('postgres',
		"SELECT state = 'running' FROM sdp.flow_status WHERE flow = 'zone_congestion_flow'"),
	'the flow runs again');
ok($node->wait_for_log(qr/sdp flow "zone_congestion_flow" restored the state of \d+ keys from its checkpoint/, $log_offset),
	'it restored its checkpointed state');

my $report = $producer->finish;
is($report->{delivered}, $total, "producer delivered $total");
ok(SdpTest::wait_consumed($node, 'zone_congestion_flow', $total), 'zone flow consumed everything');
ok(SdpTest::wait_consumed($node, 'all_positions_flow', $total), 'ground truth flow consumed everything');
SdpTest::assert_exactly_once($node, 'all_positions', $report->{partitions}, 'ground truth');

# expected: every aircraft ever seen in each zone (the TTL is an hour)
SdpTest::query($node, <<'SQL');
CREATE TABLE expected AS
SELECT z.zone, p.icao24, z.capacity
  FROM all_positions p JOIN zones z ON p.lat BETWEEN z.min_lat AND z.max_lat AND p.lon BETWEEN z.min_lon AND z.max_lon
 GROUP BY 1, 2, 3;
SQL
my $zones = SdpTest::query($node, 'SELECT count(DISTINCT zone) FROM expected');
ok($zones >= 3, "aircraft passed through $zones zones");
is(SdpTest::query($node, <<'SQL'), '0', 'zone_alerts equals a run without the crash: counts and crowded');
WITH e AS (SELECT zone, count(*) AS n, min(capacity) AS capacity FROM expected GROUP BY zone)
SELECT count(*) FROM e FULL JOIN zone_alerts a USING (zone)
 WHERE a.aircraft_count IS DISTINCT FROM e.n OR a.crowded IS DISTINCT FROM (e.n > e.capacity)
SQL
is(SdpTest::query($node, <<'SQL'), '0', 'the restored state holds exactly the aircraft of each zone');
WITH s AS (SELECT st.key AS zone, m AS icao24 FROM sdp_flow_state('zone_congestion_flow') st, jsonb_object_keys(st.value) m
            WHERE st.state = 'last_seen')
SELECT count(*) FROM s FULL JOIN expected e USING (zone, icao24) WHERE s.zone IS NULL OR e.zone IS NULL
SQL
is(SdpTest::query($node, "SELECT count(*) FROM sdp_flow_state('zone_congestion_flow') WHERE state = 'timers' AND jsonb_array_length(value) <> 1"),
	'0', 'one pending timer per zone');

done_testing();

# A stateful processor written in PL/pgSQL (issue 47): the seed's ZoneCounter
# (examples/zone_counter.sql: a map aircraft -> last seen, one sweep timer
# kept in a value, staleness eviction, re-emitted on the timer) and the
# built-in active_count read the same flight_sim stream while the postmaster
# is killed with SIGKILL three times.  Each time both restore their
# checkpoints and replay the messages after them.  At the end (the TTL is
# longer than the test, so nothing expires) both tables equal each other and
# SQL over the input: per zone, every aircraft seen, and crowded past the
# zone's capacity; the processor's state holds exactly those aircraft, and
# one sweep timer per zone.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use PostgreSQL::Test::Utils;
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'raw-flights' => 4 });
my $node = SdpTest::new_node('zonecounter');
SdpTest::create_source($node, 'flights', $broker, 'raw-flights');
SdpTest::query($node, <<'SQL');
CREATE TABLE zones (zone text PRIMARY KEY, min_lat float8, max_lat float8, min_lon float8, max_lon float8, capacity int);
INSERT INTO zones VALUES
    ('London TMA',    51.00, 52.05,  -0.95,   0.75, 12),
    ('Paris TMA',     48.55, 49.25,   1.95,   2.95, 10),
    ('New York TMA',  40.40, 41.10, -74.50, -73.00, 12),
    ('Chicago TMA',   41.60, 42.30, -88.40, -87.50, 10),
    ('Frankfurt TMA', 49.70, 50.40,   8.10,   9.00,  8);
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
# the example as it is, with a TTL longer than the test and checkpoints every second
my $example = slurp_file('examples/zone_counter.sql');
$example =~ s/SELECT interval '30 seconds'/SELECT interval '1 hour'/ or die 'the example has no TTL of 30 seconds';
$example =~ s/"handle_timer": "zone_counter_timer",/"handle_timer": "zone_counter_timer", "checkpoint_interval": "1 second",/
  or die 'the example\'s options changed';
SdpTest::query($node, $example);

my $total = 40000;
my $producer = SdpKafka::start_flightsim(bootstrap => $broker->bootstrap, topic => 'raw-flights',
	args => [ '--count', $total, '--rate', 2000, '--aircraft', 800, '--time-scale', 40, '--seed', 23 ]);

for my $crash (1 .. 3)
{
	my $read = 8000 * $crash;
	my ($ac, $pr) = map { SdpTest::consumed_sql($_) } ('zone_congestion_flow', 'zone_counter_flow');
	ok($node->poll_query_until('postgres', <<"SQL"), "crash $crash: both flows stream past $read messages and have checkpointed");
SELECT ($ac) > $read AND ($pr) > $read AND
       (SELECT bool_and(last_checkpoint_at IS NOT NULL) FROM sdp.flow_status
         WHERE flow IN ('zone_congestion_flow', 'zone_counter_flow'))
SQL
	my $log_offset = -s $node->logfile;
	SdpTest::crash_and_restart($node);
	ok($node->poll_query_until('postgres',
			"SELECT count(*) = 3 FROM sdp.flow_status WHERE state = 'running'"),
		"crash $crash: the postmaster killed with SIGKILL, restarted: the flows run again");
	ok($node->wait_for_log(qr/sdp flow "zone_counter_flow" restored the state of \d+ keys from its checkpoint/, $log_offset),
		"crash $crash: the processor restored its checkpointed state");
}

my $report = $producer->finish;
is($report->{delivered}, $total, "producer delivered $total");
for my $flow ('zone_congestion_flow', 'zone_counter_flow', 'all_positions_flow')
{
	ok(SdpTest::wait_consumed($node, $flow, $total), "$flow consumed everything");
}
SdpTest::assert_exactly_once($node, 'all_positions', $report->{partitions}, 'ground truth');

SdpTest::query($node, <<'SQL');
CREATE TABLE expected AS
SELECT z.zone, p.icao24, z.capacity
  FROM all_positions p JOIN zones z ON p.lat BETWEEN z.min_lat AND z.max_lat AND p.lon BETWEEN z.min_lon AND z.max_lon
 GROUP BY 1, 2, 3;
SQL
my $zones = SdpTest::query($node, 'SELECT count(DISTINCT zone) FROM expected');
ok($zones >= 3, "aircraft passed through $zones zones");
for my $table ('zone_alerts', 'zone_counts')
{
	is(SdpTest::query($node, <<"SQL"), '0', "$table equals SQL over the input: counts and crowded");
WITH e AS (SELECT zone, count(*) AS n, min(capacity) AS capacity FROM expected GROUP BY zone)
SELECT count(*) FROM e FULL JOIN $table a USING (zone)
 WHERE a.aircraft_count IS DISTINCT FROM e.n OR a.crowded IS DISTINCT FROM (e.n > e.capacity)
SQL
}
is(SdpTest::query($node, <<'SQL'), '0', 'the PL/pgSQL ZoneCounter and active_count wrote the same rows');
SELECT count(*) FROM zone_alerts a FULL JOIN zone_counts c USING (zone)
 WHERE a.aircraft_count IS DISTINCT FROM c.aircraft_count OR a.crowded IS DISTINCT FROM c.crowded
SQL
is(SdpTest::query($node, <<'SQL'), '0', 'the processor\'s state holds exactly the aircraft of each zone');
WITH s AS (SELECT st.key AS zone, m->>0 AS icao24
             FROM sdp_flow_state('zone_counter_flow') st, jsonb_array_elements(st.value->'map') m
            WHERE st.state = 'aircraft')
SELECT count(*) FROM s FULL JOIN expected e USING (zone, icao24) WHERE s.zone IS NULL OR e.zone IS NULL
SQL
is(SdpTest::query($node, "SELECT count(*) FROM sdp_flow_state('zone_counter_flow') WHERE state = 'timers' AND jsonb_array_length(value) <> 1"),
	'0', 'one pending sweep timer per zone');
is(SdpTest::query($node, "SELECT count(*) FROM sdp_flow_state('zone_counter_flow') WHERE state = 'timers'"),
	$zones, 'every zone has its timer');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.dead_letters"), '0', 'no dead letter');

# sdp_alter_flow: a variable added keeps the state; a variable's type changed is refused
my $aircraft = SdpTest::query($node, "SELECT count(*) FROM sdp_flow_state('zone_counter_flow') s, jsonb_array_elements(s.value->'map') WHERE s.state = 'aircraft'");
my $old_pid = SdpTest::query($node, "SELECT pid FROM sdp.flow_status WHERE flow = 'zone_counter_flow'");
SdpTest::query($node, q{SELECT sdp_alter_flow('zone_counter_flow', options => $o$
  {"state": {"aircraft": {"map": ["text", "timestamptz"]}, "sweep_at": {"value": "timestamptz"},
             "capacity": {"value": "int"}, "last_count": {"value": "bigint"}, "notes": {"list": "text"}}}$o$)});
ok($node->poll_query_until('postgres', "SELECT state = 'running' AND pid <> $old_pid FROM sdp.flow_status WHERE flow = 'zone_counter_flow'"),
	'sdp_alter_flow adding a variable: the flow restarted');
is(SdpTest::query($node, "SELECT count(*) FROM sdp_flow_state('zone_counter_flow') s, jsonb_array_elements(s.value->'map') WHERE s.state = 'aircraft'"),
	$aircraft, "and kept its state: the $aircraft aircraft of its zones");
my ($ret, $out, $err) = $node->psql('postgres', q{SELECT sdp_alter_flow('zone_counter_flow', options => $o$
  {"state": {"aircraft": {"map": ["text", "timestamptz"]}, "sweep_at": {"value": "timestamptz"},
             "capacity": {"value": "int"}, "last_count": {"value": "int"}}}$o$)}, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/0A000: state variable "last_count" would change from value\(bigint\) to value\(integer\)/,
	'a variable whose type changes: refused (0A000)');
($ret, $out, $err) = $node->psql('postgres', q{SELECT sdp_alter_flow('zone_counter_flow', options => '{"key": "icao24"}')},
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/0A000: the processor's key changes from "zone" to "icao24"/, 'another key: refused (0A000)');

done_testing();

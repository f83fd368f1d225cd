# The active_count operator and the zone congestion flow: counts rise and fall
# with the aircraft in a zone, crowded past capacity, an idle zone empties
# itself after the TTL, one pending timer per zone however many rows, state
# readable live, restored after a crash, and bounded by its memory limit.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;
use Time::HiRes qw(sleep time);

my $broker = SdpKafka::start_broker(topics => { 'zflights' => 2, 'busy' => 2, 'crowd' => 1 });
my $node = SdpTest::new_node('zones');
SdpTest::create_source($node, 'zflights', $broker, 'zflights');
SdpTest::query($node, <<'SQL');
CREATE TABLE zones (zone text PRIMARY KEY, min_lat float8, max_lat float8, min_lon float8, max_lon float8, capacity int);
INSERT INTO zones VALUES ('Z', 10, 11, 10, 11, 3), ('Y', 20, 21, 20, 21, 100);
CREATE TABLE zone_alerts (zone text PRIMARY KEY, aircraft_count bigint, crowded boolean, updated_at timestamptz);
CREATE TABLE zone_log (zone text, aircraft_count bigint, crowded boolean, updated_at timestamptz);
SELECT sdp_create_flow('zone_congestion_flow', source => 'zflights', target => 'zone_alerts',
  schema    => 'icao24 text, lat float8, lon float8',
  transform => $$SELECT z.zone, i.icao24, z.capacity FROM input i
                 JOIN zones z ON i.lat BETWEEN z.min_lat AND z.max_lat
                             AND i.lon BETWEEN z.min_lon AND z.max_lon$$,
  operator  => 'active_count',
  options   => '{"key": "zone", "member": "icao24", "ttl": "3 seconds", "sweep_interval": "250 ms",
                 "capacity_column": "capacity", "count_column": "aircraft_count",
                 "alert_column": "crowded", "time_column": "updated_at", "checkpoint_interval": "1 second"}');
-- the same operator in append mode keeps every count it emits
SELECT sdp_create_flow('zone_history', source => 'zflights', target => 'zone_log',
  schema    => 'icao24 text, lat float8, lon float8',
  transform => $$SELECT z.zone, i.icao24, z.capacity FROM input i
                 JOIN zones z ON i.lat BETWEEN z.min_lat AND z.max_lat
                             AND i.lon BETWEEN z.min_lon AND z.max_lon$$,
  operator  => 'active_count',
  options   => '{"key": "zone", "member": "icao24", "ttl": "3 seconds", "sweep_interval": "250 ms",
                 "capacity_column": "capacity", "count_column": "aircraft_count",
                 "alert_column": "crowded", "mode": "append"}');
SQL
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM sdp.flow_status WHERE state = 'running' AND partitions IS NOT NULL"),
	'both flows running');

sub position { my ($icao, $lat, $lon, $partition) = @_; return [ $icao, qq({"icao24": "$icao", "lat": $lat, "lon": $lon}), $partition ] }

# aircraft enter zone Z one by one; each step refreshes the ones already in.
# A step goes to one partition, so that the flow sees its members in one
# batch and they expire in one sweep: Apache Kafka hands a consumer each
# partition's messages in a chunk of their own, and members refreshed in
# batches apart could fall on both sides of a sweep (counts 5, 3, 0 once
# in the kafka pass, 2026-12-03)
my $last_step;	# when the last step was produced: every member was seen after it
for my $n (1 .. 5)
{
	$last_step = time;
	SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'zflights',
		messages => [ map { position("a$_", 10.5, 10.5, 0) } 1 .. $n ]);
	my $crowded = $n > 3 ? 't' : 'f';
	ok($node->poll_query_until('postgres',
			"SELECT aircraft_count = $n AND crowded = '$crowded' FROM zone_alerts WHERE zone = 'Z'"),
		"aircraft $n enters: count $n, crowded $crowded");
	# and the append flow has emitted it before the next step is produced:
	# on a slow server it could otherwise take two steps in one batch (one
	# change, from n - 1 to n + 1)
	ok($node->poll_query_until('postgres',
			"SELECT max(aircraft_count) = $n FROM zone_log WHERE zone = 'Z'"),
		"aircraft $n: zone_history emitted count $n");
}
my $members = SdpTest::query($node,
	"SELECT string_agg(m, ',' ORDER BY m) FROM sdp_flow_state('zone_congestion_flow') s, jsonb_object_keys(s.value) m "
	  . "WHERE s.key = 'Z' AND s.state = 'last_seen'");
is($members, 'a1,a2,a3,a4,a5', 'sdp_flow_state shows the members of the zone while the flow runs');
is(SdpTest::query($node, "SELECT value FROM sdp_flow_state('zone_congestion_flow') WHERE key = 'Z' AND state = 'capacity'"),
	'3', 'and its capacity');

# they go quiet: after the TTL the zone empties itself, with no further input
ok($node->poll_query_until('postgres',
		"SELECT aircraft_count = 0 AND NOT crowded FROM zone_alerts WHERE zone = 'Z'"),
	'after the TTL, with no input: count 0, not crowded');
# when the flow emitted the 0 (updated_at, its clock at the sweep), from before the last
# step was produced: at least the 3 s TTL however slow the machine (measured from when
# the test saw the last step written, it was 2.0 s on a loaded machine, 2026-12-05)
my $took = SdpTest::query($node, "SELECT extract(epoch FROM updated_at) FROM zone_alerts WHERE zone = 'Z'") - $last_step;
ok($took >= 3.0, sprintf('not before the TTL: emptied %.2f s after the last step was produced', $took));
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM sdp_flow_state('zone_congestion_flow') WHERE key = 'Z'"),
	'the empty zone keeps no state, and no timer');
# zone_history sweeps on its own 250 ms timer: its 0 can come a sweep after
# zone_congestion_flow's (the kafka pass read 1,2,3,4,5 once, 2026-12-04)
ok($node->poll_query_until('postgres', "SELECT count(*) > 0 FROM zone_log WHERE zone = 'Z' AND aircraft_count = 0"),
	'zone_history emitted the empty zone too');
is(SdpTest::query($node, "SELECT string_agg(aircraft_count::text, ',' ORDER BY updated_at, aircraft_count) FROM zone_log WHERE zone = 'Z'"),
	'1,2,3,4,5,0', 'counts emitted: one per change, 1 to 5 then 0');

# the next arrival starts it again
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'zflights', messages => [ position('b1', 10.2, 10.2) ]);
ok($node->poll_query_until('postgres',
		"SELECT aircraft_count = 1 FROM zone_alerts WHERE zone = 'Z'"), 'a new arrival counts 1 again');

# 10,000 rows for one zone leave at most one pending timer for it
my @many = map { position('c' . ($_ % 100), 20.5, 20.5) } 1 .. 10000;
my $max_timers = 0;
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'zflights', messages => \@many);
my $deadline = time + 60;
while (time < $deadline)
{
	my ($t, $read) = split /\|/, SdpTest::query($node,
		"SELECT coalesce((SELECT jsonb_array_length(value) FROM sdp_flow_state('zone_congestion_flow') WHERE key = 'Y' AND state = 'timers'), 0), "
		  . "(" . SdpTest::consumed_sql('zone_congestion_flow') . ")");
	$max_timers = $t if $t > $max_timers;
	last if $read >= 15 + 1 + 10000;
	sleep 0.02;
}
ok(SdpTest::wait_consumed($node, 'zone_congestion_flow', 15 + 1 + 10000), 'the 10,000 rows are consumed');
is($max_timers, 1, 'zone Y never had more than one pending timer (sampled while the rows flowed)');
is(SdpTest::query($node, "SELECT jsonb_array_length(value) FROM sdp_flow_state('zone_congestion_flow') WHERE key = 'Y' AND state = 'timers'"),
	'1', 'one pending timer for zone Y after 10,000 rows');
is(SdpTest::query($node, "SELECT aircraft_count FROM zone_alerts WHERE zone = 'Y'"), '100', '100 aircraft in zone Y');

# State bounded by its limit: a flow whose state outgrows it fails; the server stays up
SdpTest::create_source($node, 'crowd', $broker, 'crowd');
SdpTest::query($node, <<'SQL');
CREATE TABLE crowd_alerts (zone text PRIMARY KEY, active_count bigint, over_capacity boolean, updated_at timestamptz);
SELECT sdp_create_flow('crowd_flow', 'crowd', 'crowd_alerts', 'zone text, icao24 text',
  operator => 'active_count',
  options => '{"key": "zone", "member": "icao24", "capacity": 10, "ttl": "1 hour", "state_memory_limit": "1MB"}');
SQL
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'crowd',
	messages => [ map { [ "k", qq({"zone": "Q", "icao24": "x$_"}), 0 ] } 1 .. 30000 ]);
ok($node->poll_query_until('postgres',
		"SELECT state = 'failed' FROM sdp.flow_status WHERE flow = 'crowd_flow'"),
	'past its state_memory_limit the flow fails');
like(SdpTest::query($node, "SELECT last_error FROM sdp.flow_status WHERE flow = 'crowd_flow'"),
	qr/exceeds its state_memory_limit of 1024 kB/, 'with the error in sdp.flow_status');
is(SdpTest::query($node, 'SELECT 1'), '1', 'the server is up');
is(SdpTest::query($node, "SELECT state FROM sdp.flow_status WHERE flow = 'zone_congestion_flow'"), 'running',
	'other flows run on');

done_testing();

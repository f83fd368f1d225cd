# A stateful flow with several workers over a topic that is not keyed by its
# operator's key (issue 26): the zone flow (keyed by zone) over an
# aircraft-keyed topic, moved to two workers, would split a zone's state
# between them and count wrong.  It fails instead, with the reason naming a
# key and its partitions and what to do; it is never 'running' with wrong
# counts, and loses nothing: back to one worker, it resumes from its
# checkpoint and every count is right.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'zflights' => 4 });
my $boot = $broker->bootstrap;
my $node = SdpTest::new_node('trust_topology');
SdpTest::create_source($node, 'zflights', $broker, 'zflights');
SdpTest::query($node, <<'SQL');
CREATE TABLE zones (zone text PRIMARY KEY, min_lat float8, max_lat float8, min_lon float8, max_lon float8, capacity int);
INSERT INTO zones VALUES ('Z', 10, 11, 10, 11, 100);
CREATE TABLE zone_alerts (zone text PRIMARY KEY, aircraft_count bigint, crowded boolean, updated_at timestamptz);
SELECT sdp_create_flow('zone_congestion_flow', source => 'zflights', target => 'zone_alerts',
  schema    => 'icao24 text, lat float8, lon float8',
  transform => $$SELECT z.zone, i.icao24, z.capacity FROM input i
                 JOIN zones z ON i.lat BETWEEN z.min_lat AND z.max_lat AND i.lon BETWEEN z.min_lon AND z.max_lon$$,
  operator  => 'active_count',
  options   => '{"key": "zone", "member": "icao24", "ttl": "1 hour", "capacity_column": "capacity",
                 "count_column": "aircraft_count", "alert_column": "crowded", "time_column": "updated_at",
                 "checkpoint_interval": "200 ms"}');
SQL
# aircraft keyed by icao24: the producer spreads them over the four partitions
sub positions { return [ map { [ "a$_", qq({"icao24": "a$_", "lat": 10.5, "lon": 10.5}), undef ] } @_ ] }
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'zflights', messages => positions(1 .. 20));
ok($node->poll_query_until('postgres', q{SELECT aircraft_count = 20 FROM zone_alerts WHERE zone = 'Z'}), 'one worker: 20 aircraft in Z');
# A stateful flow restarts from where its state was checkpointed
# (sdp.offsets.state_offset), not from what flow_status shows consumed:
# once the checkpoint covers the 20 messages, Z's state (20) is in
# sdp.state_checkpoints with the partition that owns it, and a worker
# without that partition fails at its first row of Z.  Moved to two
# workers before that (flow_status showed all 20 consumed 50 ms after the
# start, the first checkpoint comes after 200 ms), both replayed with no
# state of Z, and the worker whose first batch held Z from one of its
# partitions only wrote that partition's count (6, on the assert-enabled
# server) before any worker had seen Z on two partitions.
ok($node->poll_query_until('postgres', q{SELECT coalesce(sum(coalesce(o.state_offset, o.next_offset)), 0) >= 20
       FROM sdp.offsets o JOIN sdp.flows f ON f.id = o.flow_id WHERE f.name = 'zone_congestion_flow'}),
	'and its state checkpointed with the offsets of all 20');
is(SdpTest::query($node, q{SELECT count(DISTINCT kafka_partition) FROM (SELECT (p->>'partition')::int AS kafka_partition
       FROM sdp.flow_status s, jsonb_array_elements(s.partitions) p WHERE s.flow = 'zone_congestion_flow' AND (p->>'committed_offset')::int > 0) x}),
	'4', 'the aircraft came on all four partitions');

SdpTest::query($node, "SELECT sdp_set_flow_workers('zone_congestion_flow', 2)");
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'zflights', messages => positions(21 .. 40));
ok($node->poll_query_until('postgres', q{SELECT state = 'failed' FROM sdp.flow_status WHERE flow = 'zone_congestion_flow'}),
	'two workers: the flow fails');
like(SdpTest::query($node, q{SELECT last_error FROM sdp.flow_status WHERE flow = 'zone_congestion_flow'}),
	qr/^key "Z" of operator active_count arrives on partitions \d and \d, and a flow with 2 workers keeps the state of a key in the worker of its partition, so its results would be wrong; run the flow in one worker \(SELECT sdp_set_flow_workers\('zone_congestion_flow', 1\)\), or key its topic by the operator's key/,
	'naming the key, its partitions, and what to do');
ok($node->poll_query_until('postgres', q{SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name LIKE 'sdp flow zone_congestion_flow%'}),
	'no worker of it runs on');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.dead_letters"), '0', 'nothing was dead-lettered for it');
my $count = SdpTest::query($node, q{SELECT aircraft_count FROM zone_alerts WHERE zone = 'Z'});
ok($count >= 20 && $count <= 40, "the last count written ($count) is between what one worker had seen and the truth");

# back to one worker: from the checkpoint, every aircraft counted once
SdpTest::query($node, "SELECT sdp_set_flow_workers('zone_congestion_flow', 1); SELECT sdp_start_flow('zone_congestion_flow')");
ok($node->poll_query_until('postgres', q{SELECT aircraft_count = 40 FROM zone_alerts WHERE zone = 'Z'}), 'one worker again: 40 aircraft in Z');
is(SdpTest::query($node, q{SELECT state FROM sdp.flow_status WHERE flow = 'zone_congestion_flow'}), 'running', 'running');

done_testing();

# The postmaster killed with SIGKILL at three points mid-stream, and
# restarted each time: every message is in the target exactly once, and the
# upsert target equals the last message per key.  Flows commit with
# synchronous_commit = off, so each crash loses the tail of their commits
# (rows and offsets together), which the restart replays.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;
use Time::HiRes qw(sleep);

my $broker = SdpKafka::start_broker(topics => { 'raw-flights' => 8 });
my $node = SdpTest::new_node('crash');
SdpTest::create_source($node, 'flights', $broker, 'raw-flights');
SdpTest::query($node, <<'SQL');
CREATE TABLE events (seq bigint, icao24 text, lat float8, kafka_partition int, kafka_offset bigint);
CREATE TABLE positions (icao24 text PRIMARY KEY, seq bigint, lat float8, lon float8);
SELECT sdp_create_flow('events_flow', 'flights', 'events', 'seq bigint, icao24 text, lat float8');
SELECT sdp_create_flow('positions_flow', 'flights', 'positions', 'seq bigint, icao24 text, lat float8, lon float8',
  transform => 'SELECT icao24, seq, lat, lon FROM input WHERE lat IS NOT NULL');
SQL

my $total = 60000;
my $producer = SdpKafka::start_flightsim(
	bootstrap => $broker->bootstrap, topic => 'raw-flights',
	args => [ '--count', $total, '--rate', 5000, '--seed', 11, '--aircraft', 300 ]);

# 1: while the flows keep up with the producer
ok($node->poll_query_until('postgres', 'SELECT count(*) > 5000 FROM events'), 'streaming');
SdpTest::crash_and_restart($node);
pass('crash 1: mid-stream, flows caught up');

# 2: right after the restart, while the flows work through the backlog in large batches
ok($node->poll_query_until('postgres', "SELECT count(*) = 2 FROM sdp.flow_status WHERE state = 'running'"),
	'flows restarted');
sleep 0.3;
SdpTest::crash_and_restart($node);
pass('crash 2: during catch-up');

# 3: later in the stream
ok($node->poll_query_until('postgres', 'SELECT count(*) > 35000 FROM events'), 'streaming again');
SdpTest::crash_and_restart($node);
pass('crash 3: later in the stream');

my $report = $producer->finish;
is($report->{delivered}, $total, "producer delivered $total");
ok(SdpTest::wait_consumed($node, 'events_flow', $total), 'events_flow consumed everything');
ok(SdpTest::wait_consumed($node, 'positions_flow', $total), 'positions_flow consumed everything');
SdpTest::assert_exactly_once($node, 'events', $report->{partitions}, 'after three crashes');

is(SdpTest::query($node, <<'SQL'), '0', 'positions hold the last message of every aircraft');
WITH last AS (
  SELECT DISTINCT ON (icao24) icao24, seq, lat FROM events ORDER BY icao24, kafka_offset DESC)
SELECT count(*) FROM last l FULL JOIN positions p USING (icao24)
 WHERE p.seq IS DISTINCT FROM l.seq OR p.lat IS DISTINCT FROM l.lat
SQL
is(SdpTest::query($node, "SELECT sum(rows_dead_lettered) FROM sdp.flow_status"), '0', 'no dead letters');

done_testing();

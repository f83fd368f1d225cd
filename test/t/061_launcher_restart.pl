# The launcher stops workers through their background worker handles, never
# by a pid read from shared memory.  A launcher that exits and is restarted
# by the postmaster while its workers run has no handle for them: it adopts
# them (no restart, nothing lost or repeated) and stops them cooperatively,
# through the flag in their slot and their latch.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;
use Time::HiRes qw(sleep);

my $broker = SdpKafka::start_broker(topics => { 'raw-flights' => 2 });
my $node = SdpTest::new_node('launcher');
SdpTest::create_source($node, 'flights', $broker, 'raw-flights');
SdpTest::query($node, <<'SQL');
CREATE TABLE events (seq bigint, icao24 text, kafka_partition int, kafka_offset bigint);
CREATE TABLE others (seq bigint, icao24 text, kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow('events_flow', 'flights', 'events', 'seq bigint, icao24 text');
SELECT sdp_create_flow('other_flow', 'flights', 'others', 'seq bigint, icao24 text');
SQL
my $running = "SELECT count(*) = 2 FROM sdp.flow_status WHERE state = 'running' AND pid IS NOT NULL";
ok($node->poll_query_until('postgres', $running), 'both flows run');

my $producer = SdpKafka::start_flightsim(
	bootstrap => $broker->bootstrap, topic => 'raw-flights',
	args => [ '--count', 20000, '--rate', 4000, '--seed', 7 ]);
ok($node->poll_query_until('postgres', 'SELECT count(*) > 2000 FROM events'), 'rows arrive');

my $launcher_sql = "SELECT pid FROM pg_stat_activity WHERE backend_type = 'sdp launcher'";
my $launcher = SdpTest::query($node, $launcher_sql);
my $workers_sql = "SELECT string_agg(flow || ':' || pid, ',' ORDER BY flow) FROM sdp.flow_status";
my $workers = SdpTest::query($node, $workers_sql);

# the launcher exits; the postmaster starts another one a second later
SdpTest::query($node, "SELECT pg_terminate_backend($launcher)");
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'sdp launcher' AND pid <> $launcher"),
	'a new launcher runs');
sleep 1;	# a few of its reconciliations (sdp.launcher_naptime is 200 ms)
is(SdpTest::query($node, $workers_sql), $workers, 'it adopts the running workers: same pids');
is(SdpTest::query($node, "SELECT string_agg(state || ' ' || restarts, ',') FROM sdp.flow_status"),
	'running 0,running 0', 'nothing was restarted');

# stop an adopted worker: it exits, the other flow runs on
my ($adopted) = $workers =~ /events_flow:(\d+)/;
SdpTest::query($node, "SELECT sdp_stop_flow('events_flow')");
ok($node->poll_query_until('postgres',
		"SELECT state = 'stopped' AND pid IS NULL FROM sdp.flow_status WHERE flow = 'events_flow'"),
	'an adopted worker stops on request');
ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $adopted"),
	'its process has exited');
my ($other_pid) = $workers =~ /other_flow:(\d+)/;
is(SdpTest::query($node, "SELECT state || ' ' || pid FROM sdp.flow_status WHERE flow = 'other_flow'"),
	"running $other_pid", 'the other flow still runs in the same worker');

# started again by this launcher: stopped through its handle
SdpTest::query($node, "SELECT sdp_start_flow('events_flow')");
ok($node->poll_query_until('postgres',
		"SELECT state = 'running' AND pid IS NOT NULL FROM sdp.flow_status WHERE flow = 'events_flow'"),
	'started again');
SdpTest::query($node, "SELECT sdp_stop_flow('events_flow')");
ok($node->poll_query_until('postgres',
		"SELECT state = 'stopped' AND pid IS NULL FROM sdp.flow_status WHERE flow = 'events_flow'"),
	'a worker of this launcher stops on request');
SdpTest::query($node, "SELECT sdp_start_flow('events_flow')");
ok($node->poll_query_until('postgres',
		"SELECT state = 'running' AND pid IS NOT NULL FROM sdp.flow_status WHERE flow = 'events_flow'"),
	'and starts again');

my $report = $producer->finish;
is($report->{delivered}, 20000, 'producer delivered 20,000');
ok(SdpTest::wait_consumed($node, 'events_flow', 20000), 'events_flow consumed everything');
ok(SdpTest::wait_consumed($node, 'other_flow', 20000), 'other_flow consumed everything');
SdpTest::assert_exactly_once($node, 'events', $report->{partitions}, 'events_flow');
SdpTest::assert_exactly_once($node, 'others', $report->{partitions}, 'other_flow');

# an adopted worker of a dropped flow goes away too
$launcher = SdpTest::query($node, $launcher_sql);
SdpTest::query($node, "SELECT pg_terminate_backend($launcher)");
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'sdp launcher' AND pid <> $launcher"),
	'another launcher runs');
my $other = SdpTest::query($node, "SELECT pid FROM sdp.flow_status WHERE flow = 'other_flow'");
SdpTest::query($node, "SELECT sdp_drop_flow('other_flow')");
ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $other"),
	'the adopted worker of a dropped flow exits');
ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM sdp.flow_status WHERE flow = 'other_flow'"),
	'and the flow is gone');

done_testing();

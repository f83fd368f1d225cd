# Stop and start, and a clean server restart: consumption resumes where it
# stopped, with nothing lost or repeated; a stopped flow stays stopped
# across a restart.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;
use Time::HiRes qw(sleep);

my $broker = SdpKafka::start_broker(topics => { 'raw-flights' => 4 });
my $node = SdpTest::new_node('stopstart');
SdpTest::create_source($node, 'flights', $broker, 'raw-flights');
SdpTest::query($node, <<'SQL');
CREATE TABLE events (seq bigint, icao24 text, kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow('events_flow', 'flights', 'events', 'seq bigint, icao24 text');
SQL

my $producer = SdpKafka::start_flightsim(
	bootstrap => $broker->bootstrap, topic => 'raw-flights',
	args => [ '--count', 30000, '--rate', 4000, '--seed', 5 ]);
ok($node->poll_query_until('postgres', 'SELECT count(*) > 2000 FROM events'), 'rows arrive');

SdpTest::query($node, "SELECT sdp_stop_flow('events_flow')");
ok($node->poll_query_until('postgres',
		"SELECT state = 'stopped' FROM sdp.flow_status WHERE flow = 'events_flow'"),
	'the flow stops');
my $at_stop = SdpTest::query($node, 'SELECT count(*) FROM events');
sleep 1.5;
is(SdpTest::query($node, 'SELECT count(*) FROM events'), $at_stop, 'a stopped flow writes nothing');

# a stopped flow stays stopped across a server restart
$node->restart;
sleep 1.5;
is(SdpTest::query($node, "SELECT state FROM sdp.flow_status WHERE flow = 'events_flow'"), 'stopped',
	'still stopped after a restart');
is(SdpTest::query($node, 'SELECT count(*) FROM events'), $at_stop, 'and still writes nothing');

SdpTest::query($node, "SELECT sdp_start_flow('events_flow')");
ok($node->poll_query_until('postgres',
		"SELECT state = 'running' FROM sdp.flow_status WHERE flow = 'events_flow'"),
	'started again');

# a running flow is started again by a clean restart, mid-stream
sleep 1;
$node->restart;
ok($node->poll_query_until('postgres',
		"SELECT state = 'running' FROM sdp.flow_status WHERE flow = 'events_flow'"),
	'running again after a restart');

# a worker that dies is restarted by the launcher (after a backoff), and resumes
my $pid = SdpTest::query($node, "SELECT pid FROM sdp.flow_status WHERE flow = 'events_flow'");
SdpTest::query($node, "SELECT pg_terminate_backend($pid)");
ok($node->poll_query_until('postgres',
		"SELECT state = 'running' AND pid <> $pid AND restarts = 1 FROM sdp.flow_status WHERE flow = 'events_flow'"),
	'a terminated worker is restarted, the restart counted');

my $report = $producer->finish;
is($report->{delivered}, 30000, 'producer delivered 30,000');
ok(SdpTest::wait_consumed($node, 'events_flow', 30000), 'everything consumed');
SdpTest::assert_exactly_once($node, 'events', $report->{partitions}, 'stop/start/restart');

done_testing();

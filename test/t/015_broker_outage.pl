# The broker taken down and brought back: the status shows it, and the flow
# resumes by itself with nothing lost or repeated.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'raw-flights' => 4 });
my $node = SdpTest::new_node('outage');
SdpTest::create_source($node, 'flights', $broker, 'raw-flights');
SdpTest::query($node, <<'SQL');
CREATE TABLE events (seq bigint, icao24 text, kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow('events_flow', 'flights', 'events', 'seq bigint, icao24 text');
SQL

my $r1 = SdpKafka::run_flightsim(bootstrap => $broker->bootstrap, topic => 'raw-flights',
	args => [ '--count', 3000, '--rate', 0, '--seed', 1 ]);
ok(SdpTest::wait_consumed($node, 'events_flow', 3000), 'first 3000 consumed');
is(SdpTest::query($node, "SELECT broker_ok FROM sdp.flow_status WHERE flow = 'events_flow'"), 't', 'broker ok');

$broker->down;
ok($node->poll_query_until('postgres',
		"SELECT NOT broker_ok AND broker_error IS NOT NULL FROM sdp.flow_status WHERE flow = 'events_flow'"),
	'the status shows the broker down');
diag(SdpTest::query($node, "SELECT broker_error FROM sdp.flow_status WHERE flow = 'events_flow'"));
is(SdpTest::query($node, "SELECT state FROM sdp.flow_status WHERE flow = 'events_flow'"), 'running',
	'the flow keeps running, waiting');

$broker->up;
ok($node->poll_query_until('postgres', "SELECT broker_ok FROM sdp.flow_status WHERE flow = 'events_flow'"),
	'the status shows the broker back');

my $r2 = SdpKafka::run_flightsim(bootstrap => $broker->bootstrap, topic => 'raw-flights',
	args => [ '--count', 3000, '--rate', 0, '--seed', 2, '--seq-start', 3000 ]);
ok(SdpTest::wait_consumed($node, 'events_flow', 6000), 'the next 3000 consumed');
my %parts = map { $_ => $r1->{partitions}{$_} + $r2->{partitions}{$_} } keys %{ $r1->{partitions} };
SdpTest::assert_exactly_once($node, 'events', \%parts, 'across the outage');

done_testing();

# A flow owned by a non-superuser runs as that role, writes with its
# privileges, and is refused where it has none: a revoked privilege stops
# the writes (retried, nothing dead-lettered) until it is granted again.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;
use Time::HiRes qw(sleep);

my $broker = SdpKafka::start_broker(topics => { 'raw-flights' => 2 });
my $node = SdpTest::new_node('owner');
my $boot = $broker->bootstrap;
SdpTest::query($node, <<"SQL");
CREATE ROLE app LOGIN;
CREATE TABLE app_events (seq bigint, icao24 text, kafka_partition int, kafka_offset bigint);
CREATE TABLE secret (x int);
GRANT INSERT ON app_events TO app;
SET ROLE app;
SELECT sdp_create_source('app_flights', '$boot', 'raw-flights', '@{[ SdpTest::source_options(q({"sasl.password": "hunter2"})) ]}');
SELECT sdp_create_flow('app_flow', 'app_flights', 'app_events', 'seq bigint, icao24 text');
RESET ROLE;
SQL
is(SdpTest::query($node, "SELECT owner FROM sdp.flows WHERE name = 'app_flow'"), 'app', 'app owns the flow');

my $r1 = SdpKafka::run_flightsim(bootstrap => $boot, topic => 'raw-flights', args => [ '--count', 2000, '--rate', 0 ]);
ok(SdpTest::wait_consumed($node, 'app_flow', 2000), 'consumed 2000');
is(SdpTest::query($node, "SELECT usename FROM pg_stat_activity WHERE application_name = 'sdp flow app_flow'"),
	'app', 'the worker is connected as app, not as a superuser');

# app cannot read the credentials of anyone's sources
my ($ret, $out, $err) = $node->psql('postgres', 'SET ROLE app; SELECT options FROM sdp.sources');
like($err, qr/permission denied for table sources/, 'sdp.sources is not readable by app');
is(SdpTest::query($node, "SET ROLE app; SELECT options->>'sasl.password' FROM sdp.source_list"), '********',
	'its own source shows the password masked');

# what app may not do, the flow may not do either
($ret, $out, $err) = $node->psql('postgres',
	"SET ROLE app; SELECT sdp_create_flow('peek', 'app_flights', 'app_events', 'seq bigint', 'SELECT seq FROM input WHERE EXISTS (SELECT 1 FROM secret)', options => '{\"mode\": \"append\"}')");
like($err, qr/permission denied for table secret/, 'a transform reading a table app cannot read is refused');

SdpTest::query($node, 'REVOKE INSERT ON app_events FROM app');
my $r2 = SdpKafka::run_flightsim(bootstrap => $boot, topic => 'raw-flights',
	args => [ '--count', 2000, '--rate', 0, '--seq-start', 2000, '--seed', 9 ]);
ok($node->poll_query_until('postgres',
		"SELECT last_error LIKE '%permission denied for table app_events%' FROM sdp.flow_status WHERE flow = 'app_flow'"),
	'after REVOKE the writes fail with permission denied, shown in the status');
is(SdpTest::query($node, 'SELECT count(*) FROM app_events'), '2000', 'nothing more is written');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.dead_letters WHERE flow = 'app_flow'"), '0',
	'nothing is dead-lettered for a missing privilege');
is(SdpTest::query($node, "SELECT state FROM sdp.flow_status WHERE flow = 'app_flow'"), 'retrying',
	'the flow waits and retries, and its state says so');
ok(SdpTest::wait_for($node, "SELECT lag = 2000 FROM sdp.flow_status WHERE flow = 'app_flow'"),
	'its lag counts the messages it has not written');

SdpTest::query($node, 'GRANT INSERT ON app_events TO app');
ok(SdpTest::wait_consumed($node, 'app_flow', 4000), 'after GRANT the flow catches up');
is(SdpTest::query($node, "SELECT state || '|' || coalesce(last_error, '') FROM sdp.flow_status WHERE flow = 'app_flow'"),
	'running|', 'running again, and the error is gone once it commits');
my %parts = map { $_ => $r1->{partitions}{$_} + $r2->{partitions}{$_} } keys %{ $r1->{partitions} };
SdpTest::assert_exactly_once($node, 'app_events', \%parts, 'across the revoked privilege');

done_testing();

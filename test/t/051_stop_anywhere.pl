# A worker stopped at any moment of its life -- connecting to the brokers,
# loading its skips and state, opening its sink's producers, between
# batches -- exits cleanly: the librdkafka clients it holds are destroyed
# before the process exits, so no librdkafka thread runs while exit() tears
# the process down.  (CI's kafka pass, librdkafka 2.14.2: a worker of test
# 035 terminated while it read its skips died of SIGSEGV in exit(), and the
# server went down with it.)  Afterwards each flow consumes its input
# exactly once.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use PostgreSQL::Test::Utils;
use SdpKafka;
use SdpTest;
use Test::More;
use Time::HiRes qw(sleep);

my $broker = SdpKafka::start_broker(topics => { 'raw-flights' => 4, 'flights-out' => 2 });
my $node = SdpTest::new_node('stopanywhere', restart_after_crash => 'off');
my $boot = $broker->bootstrap;
SdpTest::create_source($node, 'flights', $broker, 'raw-flights');
SdpTest::query($node, <<"SQL");
CREATE TABLE events (seq bigint, icao24 text, kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow('plain', 'flights', 'events', 'seq bigint, icao24 text');
SELECT sdp_create_sink('out', '$boot', 'flights-out');
SELECT sdp_create_flow(name => 'to_kafka', source => 'flights', schema => 'seq bigint, icao24 text',
  transform => 'SELECT seq, icao24 FROM input', options => '{"sink_key": "icao24"}', sink => 'out');
SELECT sdp_stop_flow('plain');
SELECT sdp_stop_flow('to_kafka');
SQL
my $report = SdpKafka::run_flightsim(bootstrap => $boot, topic => 'raw-flights',
	args => [ '--count', 4000, '--rate', 0, '--seed', 51 ]);
is($report->{delivered}, 4000, 'flight_sim delivered 4,000');

# A stop and a terminate at every point of a worker's start, from the moment
# its pid is published to past its first batch: the delay after the pid
# appears grows by 10 ms each round.
my $rounds = 40;
for my $round (0 .. $rounds - 1)
{
	for my $flow ('plain', 'to_kafka')
	{
		my $delay = $round * 0.01;
		my $how = $round % 2 ? 'pg_terminate_backend(pid)' : "sdp_stop_flow('$flow')";
		SdpTest::query($node, "SELECT sdp_start_flow('$flow')");
		# one statement: wait for the worker's pid, sleep, then stop it
		SdpTest::query($node, <<"SQL");
DO \$\$
DECLARE
  p int;
BEGIN
  FOR i IN 1 .. 2000 LOOP
    SELECT pid INTO p FROM sdp.flow_status WHERE flow = '$flow';
    EXIT WHEN p IS NOT NULL;
    PERFORM pg_sleep(0.002);
  END LOOP;
  PERFORM pg_sleep($delay);
  PERFORM $how FROM sdp.flow_status WHERE flow = '$flow' AND pid IS NOT NULL;
END
\$\$;
SQL
		# a terminated worker is restarted by the launcher: stop it, and wait until it is gone
		SdpTest::query($node, "SELECT sdp_stop_flow('$flow')");
		ok($node->poll_query_until('postgres',
				"SELECT state = 'stopped' AND pid IS NULL FROM sdp.flow_status WHERE flow = '$flow'"),
			"$flow stopped in round $round (after $delay s, by " . ($round % 2 ? 'a terminate' : 'a stop') . ')')
		  or last;
	}
}

my $log = slurp_file($node->logfile);
my @signals = $log =~ /^.*terminated by signal.*$/mg;
is(scalar(@signals), 0, 'no worker died of a signal') or diag join "\n", @signals;
is(SdpTest::query($node, 'SELECT 1'), '1', 'the server is up');

SdpTest::query($node, "SELECT sdp_start_flow('plain'); SELECT sdp_start_flow('to_kafka')");
ok(SdpTest::wait_consumed($node, 'plain', 4000), 'plain consumed everything');
ok(SdpTest::wait_consumed($node, 'to_kafka', 4000), 'to_kafka consumed everything');
is(SdpTest::query($node, 'SELECT count(*), count(DISTINCT seq) FROM events'), '4000|4000',
	'plain wrote each message exactly once');
# the relay may still be producing the outbox's last rows: read until 4,000 are there
my @out;
for (1 .. 60)
{
	@out = SdpKafka::kcat_consume(bootstrap => $boot, topic => 'flights-out',
		properties => { 'isolation.level' => 'read_committed' });
	last if @out >= 4000;
	sleep 0.5;
}
my %seqs = map { (($_->{payload} =~ /"seq":\s*(\d+)/)[0] // 'none') => 1 } @out;
is(scalar(@out) . '|' . scalar(keys %seqs), '4000|4000',
	'to_kafka produced each message exactly once (read_committed)');

$node->stop;
done_testing();

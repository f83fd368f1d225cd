# A batch that fails for a reason no row is to blame for (a privilege
# revoked under the flow) is not searched row by row: a few rows tried
# alone, each failing the same way, tell the world's fault from the rows',
# and the attempt fails at once with the reason (issue 48). Before, the
# halving search ran the transform and the write over every row at every
# level (about N x log2 N transform calls per attempt, 2N - 1
# subtransactions), again after every backoff. The transform's calls are
# counted by PostgreSQL's function statistics (track_functions), attempts
# by the worker's log.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;
use Time::HiRes qw(sleep);

my $broker = SdpKafka::start_broker(topics => { 'raw-flights' => 1 });
my $node = SdpTest::new_node('world_fault');
my $boot = $broker->bootstrap;
SdpTest::query($node, "ALTER SYSTEM SET track_functions = 'pl'; SELECT pg_reload_conf()");
ok(SdpTest::wait_for($node, "SELECT current_setting('track_functions') = 'pl'"), 'track_functions = pl');
SdpTest::query($node, <<"SQL");
CREATE ROLE app LOGIN;
CREATE TABLE ev_rows (seq bigint, icao24 text);
GRANT INSERT ON ev_rows TO app;
CREATE FUNCTION tick(t text) RETURNS text LANGUAGE plpgsql AS \$\$ BEGIN RETURN t; END \$\$;
SET ROLE app;
SELECT sdp_create_source('ev', '$boot', 'raw-flights', '@{[ SdpTest::source_options() ]}');
SELECT sdp_create_flow('ev_flow', 'ev', 'ev_rows', 'seq bigint, icao24 text',
  transform => 'SELECT seq, tick(icao24) AS icao24 FROM input', options => '{"mode": "append"}');
RESET ROLE;
SQL

# the transform's calls, as the worker reported them
sub calls
{
	return SdpTest::query($node, "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions WHERE funcname = 'tick'");
}

SdpKafka::run_flightsim(bootstrap => $boot, topic => 'raw-flights', args => [ '--count', 100, '--rate', 0 ]);
ok(SdpTest::wait_consumed($node, 'ev_flow', 100), 'the flow wrote the first 100');
# (the worker reports its function statistics as it exits: the 100 are counted then)
my $before = 100;

# the grant revoked, 10,000 more
my $offset = -s $node->logfile;
SdpTest::query($node, 'REVOKE INSERT ON ev_rows FROM app');
SdpKafka::run_flightsim(bootstrap => $boot, topic => 'raw-flights',
	args => [ '--count', 10000, '--rate', 0, '--seq-start', 100, '--seed', 7 ]);
ok(SdpTest::wait_for($node,
		"SELECT state = 'retrying' AND last_error ~ 'permission denied for table ev_rows' FROM sdp.flow_status WHERE flow = 'ev_flow'"),
	'the flow retries, with the reason in its status');
unlike(SdpTest::query($node, "SELECT last_error FROM sdp.flow_status WHERE flow = 'ev_flow'"), qr/failed alone/,
	'the reason blames no message');
# two attempts at least, then the worker stops (its statistics are reported as it exits)
my $attempts_re = qr/sdp flow "ev_flow": batch of (\d+) messages not written, retrying in \d+ ms: permission denied for table ev_rows/;
ok($node->wait_for_log(qr/(?s:$attempts_re.*$attempts_re)/, $offset), 'two attempts');
SdpTest::query($node, "SELECT sdp_stop_flow('ev_flow')");
ok(SdpTest::wait_for($node, "SELECT state = 'stopped' FROM sdp.flow_status WHERE flow = 'ev_flow'"), 'stopped');
my $log = substr(PostgreSQL::Test::Utils::slurp_file($node->logfile), $offset);
my ($attempts, $messages) = (0, 0);
while ($log =~ /$attempts_re/g)
{
	$attempts++;
	$messages += $1;
}
ok(SdpTest::wait_for($node, "SELECT coalesce(sum(calls), 0) > $before FROM pg_stat_user_functions WHERE funcname = 'tick'"),
	'the stopped worker reported its calls');
my $calls = calls() - $before;
# at once: at most one call per message; then a few rows tried alone (4 per
# attempt): nothing like a search over every row
cmp_ok($calls, '<=', $messages + 10 * $attempts,
	"the transform ran about once per message per attempt: $calls calls for $attempts attempts of $messages messages in all");
is(SdpTest::query($node, "SELECT count(*) FROM sdp.dead_letters WHERE flow = 'ev_flow'"), '0', 'nothing dead-lettered');

# granted again: everything, once
SdpTest::query($node, 'GRANT INSERT ON ev_rows TO app');
SdpTest::query($node, "SELECT sdp_start_flow('ev_flow')");
ok(SdpTest::wait_consumed($node, 'ev_flow', 10100), 'after GRANT the flow writes the 10,000');
is(SdpTest::query($node, 'SELECT count(*) || \' \' || count(DISTINCT seq) || \' \' || min(seq) || \' \' || max(seq) FROM ev_rows'),
	'10100 10100 0 10099', 'every message once');

done_testing();

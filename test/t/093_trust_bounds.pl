# Bounds on what a flow's worker runs (issue 26): the flow option
# statement_timeout cancels a batch's statements that run too long (a
# transform in pg_sleep), which is the flow's fault: retried with backoff,
# the reason in the status, nothing dead-lettered; temp_file_limit holds for
# a worker as for a session; a flow whose brokers cannot be reached is not
# 'running' within seconds of its start, and says why, in its status and
# the log.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = SdpKafka::start_broker(topics => { 'ev' => 1, 'ev2' => 1 });
my $boot = $broker->bootstrap;
my $node = SdpTest::new_node('trust_bounds', temp_file_limit => "'1MB'");
SdpTest::query($node, <<"SQL");
SELECT sdp_create_source('ev', '$boot', 'ev', '@{[ SdpTest::source_options() ]}');
SELECT sdp_create_source('ev2', '$boot', 'ev2', '@{[ SdpTest::source_options() ]}');
CREATE TABLE slept (seq bigint);
SELECT sdp_create_flow('sleepy', 'ev', 'slept', 'seq bigint',
  \$\$SELECT seq FROM input, LATERAL (SELECT pg_sleep(CASE WHEN seq = 2 THEN 60 ELSE 0 END)) s\$\$,
  options => '{"mode": "append", "statement_timeout": "1 s"}');
CREATE TABLE spilled (seq bigint);
SELECT sdp_create_flow('spill', 'ev2', 'spilled', 'seq bigint',
  \$\$SELECT seq FROM input WHERE seq > 1 OR (SELECT count(*) FROM generate_series(1, 2000000)) > 0\$\$,
  options => '{"mode": "append"}');
SQL
sub msg { return [ undef, qq({"seq": $_[0]}), 0 ] }

# a 60 s pg_sleep bounded by statement_timeout
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'ev', messages => [ msg(1) ]);
ok(SdpTest::wait_consumed($node, 'sleepy', 1), 'seq 1 written');
my $t0 = time;
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'ev', messages => [ msg(2) ]);
ok($node->poll_query_until('postgres',
		"SELECT state = 'retrying' AND last_error LIKE '%canceling statement due to statement timeout: the batch''s statements ran longer than the flow''s statement_timeout of 1000 ms%' "
		  . "FROM sdp.flow_status WHERE flow = 'sleepy'"),
	'the sleeping batch is cancelled after statement_timeout, and retried with the reason');
cmp_ok(time - $t0, '<', 30, 'long before the 60 s sleep would have ended');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.dead_letters WHERE flow = 'sleepy'"), '0', 'nothing dead-lettered: the flow\'s fault');
# the owner gets past it the way it gets past any message it keeps failing on
SdpTest::query($node, "SELECT sdp_skip_message('sleepy', 0, 1)");
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'ev', messages => [ msg(3) ]);
ok(SdpTest::wait_consumed($node, 'sleepy', 3), 'skipped, the flow goes on');
is(SdpTest::query($node, 'SELECT string_agg(seq::text, \',\' ORDER BY seq) FROM slept'), '1,3', 'seq 1 and 3 written');
ok(SdpTest::wait_for($node, "SELECT state = 'running' AND last_error IS NULL FROM sdp.flow_status WHERE flow = 'sleepy'"),
	'running again');

# temp_file_limit: the transform's subquery spills more than 1 MB (the server's message
# quotes the setting's name from PostgreSQL 18 on)
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'ev2', messages => [ msg(1) ]);
ok($node->poll_query_until('postgres',
		"SELECT state = 'retrying' AND last_error ~ 'temporary file size exceeds \"?temp_file_limit\"? \\(1024kB\\)' FROM sdp.flow_status WHERE flow = 'spill'"),
	"temp_file_limit bounds a worker's temporary files: retried, with the reason");

# a broker that cannot be reached: not 'running', within seconds
my $offset = -s $node->logfile;
SdpTest::query($node, <<'SQL');
SELECT sdp_create_source('nowhere', '127.0.0.1:1', 'ev');
CREATE TABLE nothing (seq bigint);
SELECT sdp_create_flow('lost', 'nowhere', 'nothing', 'seq bigint', options => '{"mode": "append"}');
SQL
$t0 = time;
my $shown = 0;
while (time - $t0 < 10)
{
	$shown = SdpTest::query($node,
		"SELECT state = 'retrying' AND last_error LIKE 'cannot start consuming: source \"nowhere\" (brokers 127.0.0.1:1): %' "
		  . "AND NOT broker_ok FROM sdp.flow_status WHERE flow = 'lost'") eq 't';
	last if $shown;
	sleep 0.2;
}
ok($shown, sprintf('an unreachable broker: retrying, with the reason, after %.1f s (at most 10)', time - $t0));
isnt(SdpTest::query($node, "SELECT state FROM sdp.flow_status WHERE flow = 'lost'"), 'running', 'never running');
ok($node->log_contains(qr/sdp flow "lost" cannot start consuming: source "nowhere" \(brokers 127\.0\.0\.1:1\)/, $offset),
	'and the log says so');

done_testing();

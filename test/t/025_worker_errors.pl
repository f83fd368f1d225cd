# How a flow's worker meets errors that are not about the data, stateless
# and stateful alike (one batch path): a batch that cannot be written is
# retried with a backoff that doubles from 100 ms, says in the log the wait
# it waits, and starts again from 100 ms after the next commit.  A
# declaration that no longer holds when a worker starts is retried with the
# reason for a flow that has run (it resumes once the cause is gone), and
# fails a flow that never ran; either way after rolling back what loading
# had opened (no relcache reference or snapshot left behind: the server
# warns of those at commit).
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'bk' => 1 });
my $node = SdpTest::new_node('errors');
my $boot = $broker->bootstrap;
SdpTest::query($node, <<"SQL");
CREATE ROLE app LOGIN;
CREATE TABLE t_plain (seq bigint, kafka_partition int, kafka_offset bigint);
CREATE TABLE zones (zone text PRIMARY KEY, min_lat float8, max_lat float8, min_lon float8, max_lon float8, capacity int);
INSERT INTO zones VALUES ('Z', 10, 11, 10, 11, 3);
CREATE TABLE zone_alerts (zone text PRIMARY KEY, aircraft_count bigint, crowded boolean, updated_at timestamptz);
GRANT INSERT ON t_plain TO app;
GRANT SELECT ON zones TO app;
GRANT SELECT, INSERT, UPDATE ON zone_alerts TO app;
SET ROLE app;
SELECT sdp_create_source('bk', '$boot', 'bk', '@{[ SdpTest::source_options(q({"starting_offsets": "earliest"})) ]}');
SELECT sdp_create_flow('plain', 'bk', 't_plain', 'seq bigint', options => '{"mode": "append"}');
SELECT sdp_create_flow('zc', source => 'bk', target => 'zone_alerts',
  schema    => 'icao24 text, lat float8, lon float8',
  transform => \$\$SELECT z.zone, i.icao24, z.capacity FROM input i
                 JOIN zones z ON i.lat BETWEEN z.min_lat AND z.max_lat
                             AND i.lon BETWEEN z.min_lon AND z.max_lon\$\$,
  operator  => 'active_count',
  options   => '{"key": "zone", "member": "icao24", "ttl": "1 hour",
                 "capacity_column": "capacity", "count_column": "aircraft_count",
                 "alert_column": "crowded", "checkpoint_interval": "200 ms"}');
RESET ROLE;
SQL

my $seq = 0;
sub produce_one
{
	my $msg = sprintf('{"seq": %d, "icao24": "a%d", "lat": 10.5, "lon": 10.5}', $seq, $seq);
	SdpKafka::kcat_produce(bootstrap => $boot, topic => 'bk', messages => [ [ "k$seq", $msg ] ]);
	$seq++;
}

sub consumed_by_both
{
	my ($n) = @_;
	return SdpTest::wait_consumed($node, 'plain', $n) && $node->poll_query_until('postgres',
		"SELECT aircraft_count = $n FROM zone_alerts WHERE zone = 'Z'");
}

# The waits each flow logged after $offset, in order.
sub logged_waits
{
	my ($flow, $offset) = @_;
	my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile, $offset);
	return [ $log =~ /sdp flow "$flow": batch of \d+ messages not written, retrying in (\d+) ms/g ];
}

# Waits until the flow has logged $n waits after $offset.
sub wait_for_waits
{
	my ($flow, $offset, $n) = @_;
	my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
	while (time < $deadline)
	{
		return 1 if @{ logged_waits($flow, $offset) } >= $n;
		select(undef, undef, undef, 0.1);
	}
	diag("$flow logged only " . scalar(@{ logged_waits($flow, $offset) }) . " waits");
	return 0;
}

produce_one();
ok(consumed_by_both(1), 'both flows took the first message');

# 1. Retries double from 100 ms, and the log says the wait that follows.
my $offset = -s $node->logfile;
SdpTest::query($node, 'REVOKE INSERT ON t_plain FROM app; REVOKE SELECT ON zones FROM app');
produce_one();
ok(wait_for_waits('plain', $offset, 4), 'the stateless flow retries');
ok(wait_for_waits('zc', $offset, 4), 'the stateful flow retries (its transform cannot read zones)');
is_deeply([ @{ logged_waits('plain', $offset) }[0 .. 3] ], [ 100, 200, 400, 800 ], 'stateless: waits of 100, 200, 400, 800 ms');
is_deeply([ @{ logged_waits('zc', $offset) }[0 .. 3] ], [ 100, 200, 400, 800 ], 'stateful: waits of 100, 200, 400, 800 ms');
like(SdpTest::query($node, "SELECT last_error FROM sdp.flow_status WHERE flow = 'plain'"),
	qr/retrying in \d+ ms: permission denied for table t_plain/, 'the status says why');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.dead_letters"), '0', 'nothing is dead-lettered for a privilege');

SdpTest::query($node, 'GRANT INSERT ON t_plain TO app; GRANT SELECT ON zones TO app');
ok(consumed_by_both(2), 'after GRANT both flows commit the message');

# 2. After a commit, the backoff starts again from 100 ms.
$offset = -s $node->logfile;
SdpTest::query($node, 'REVOKE INSERT ON t_plain FROM app; REVOKE SELECT ON zones FROM app');
produce_one();
ok(wait_for_waits('plain', $offset, 2) && wait_for_waits('zc', $offset, 2), 'both retry again');
is_deeply([ @{ logged_waits('plain', $offset) }[0 .. 1] ], [ 100, 200 ], 'stateless: the backoff started again at 100 ms');
is_deeply([ @{ logged_waits('zc', $offset) }[0 .. 1] ], [ 100, 200 ], 'stateful: the backoff started again at 100 ms');
SdpTest::query($node, 'GRANT INSERT ON t_plain TO app; GRANT SELECT ON zones TO app');
ok(consumed_by_both(3), 'and commit once granted');
SdpTest::assert_exactly_once($node, 't_plain', { 0 => 3 }, 'across two revocations');

# 2b. Blocked behind someone's lock, a flow shows 'waiting', with the kind of lock.
my $bg = $node->background_psql('postgres');
$bg->query_safe('BEGIN; LOCK TABLE t_plain IN ACCESS EXCLUSIVE MODE');
produce_one();
ok(SdpTest::wait_for($node, "SELECT state = 'waiting' AND last_error = 'waiting for a lock (relation)' "
	  . "FROM sdp.flow_status WHERE flow = 'plain'"),
	'a flow waiting for a lock says so');
$bg->query_safe('COMMIT');
$bg->quit;
ok(consumed_by_both(4), 'and goes on once the lock is released');
is(SdpTest::query($node, "SELECT state || '|' || coalesce(last_error, '') FROM sdp.flow_status WHERE flow = 'plain'"),
	'running|', 'running again');

# 3. A declaration that no longer holds when the worker loads it.  Flows that
# have run are retried with the reason ('restarting'), as a running flow is
# when a privilege is revoked, and resume once the cause is gone (a restore
# puts a target's primary key and grants back only after all data).
SdpTest::query($node, "SELECT sdp_stop_flow('zc'); SELECT sdp_stop_flow('plain')");
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name LIKE 'sdp flow %'"),
	'both workers stopped');
$offset = -s $node->logfile;
# the operator's validation fails after the target is open (it lost its count column)
SdpTest::query($node, 'ALTER TABLE zone_alerts RENAME COLUMN aircraft_count TO n_aircraft');
SdpTest::query($node, 'REVOKE INSERT ON t_plain FROM app');
SdpTest::query($node, "SELECT sdp_start_flow('zc'); SELECT sdp_start_flow('plain')");
ok($node->poll_query_until('postgres',
		"SELECT state = 'restarting' AND last_error LIKE '%aircraft_count%' FROM sdp.flow_status WHERE flow = 'zc'"),
	'the stateful flow that has run retries its load, with the reason');
ok($node->poll_query_until('postgres',
		"SELECT state = 'restarting' AND last_error LIKE '%permission denied%' FROM sdp.flow_status WHERE flow = 'plain'"),
	'the stateless flow that has run retries its load, with the reason');
ok($node->poll_query_until('postgres', "SELECT min(restarts) >= 2 FROM sdp.flow_status WHERE flow IN ('zc', 'plain')"),
	'both tried again');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.flows WHERE failed_at IS NOT NULL"), '0', 'neither is failed');
produce_one();
SdpTest::query($node, 'ALTER TABLE zone_alerts RENAME COLUMN n_aircraft TO aircraft_count');
SdpTest::query($node, 'GRANT INSERT ON t_plain TO app');
ok(consumed_by_both(5), 'once the cause is gone, both resume by themselves and consume the new message');
SdpTest::assert_exactly_once($node, 't_plain', { 0 => 5 }, 'across the retried loads');
is(SdpTest::query($node, "SELECT string_agg(flow || ':' || state, ',' ORDER BY flow) FROM sdp.flow_status WHERE flow IN ('zc', 'plain')"),
	'plain:running,zc:running', 'both running');

# A flow that never ran fails at load with the reason.
SdpTest::query($node, <<'SQL');
CREATE TABLE t_never (seq bigint);
GRANT INSERT ON t_never TO app;
BEGIN;
SET LOCAL ROLE app;
SELECT sdp_create_flow('never', 'bk', 't_never', 'seq bigint', options => '{"mode": "append"}');
SELECT sdp_stop_flow('never');
COMMIT;
REVOKE INSERT ON t_never FROM app;
SELECT sdp_start_flow('never');
SQL
ok($node->poll_query_until('postgres',
		"SELECT state = 'failed' AND last_error LIKE '%permission denied%' FROM sdp.flow_status WHERE flow = 'never'"),
	'a flow that never ran fails at load with the reason');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.offsets o JOIN sdp.flows f ON f.id = o.flow_id WHERE f.name = 'never'"), '0',
	'it stored no offsets');
is(SdpTest::query($node, "SELECT name FROM sdp.flows WHERE failed_at IS NOT NULL"), 'never', 'its failure is persisted');
my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile, $offset);
unlike($log, qr/reference leak|snapshot .* still active|TRAP|was not closed/i,
	'the failed loads left no relcache reference, snapshot or resource behind');
unlike($log, qr/server process .* was terminated/, 'no server process crashed');

# 4. An error connecting to Kafka when the worker starts is shown in the status.
SdpTest::query($node, <<"SQL");
CREATE TABLE t_ssl (seq bigint);
SELECT sdp_create_source('bad_ssl', '$boot', 'bk', '@{[ SdpTest::source_options(q({"security.protocol": "ssl", "ssl.ca.location": "/nonexistent/ca.pem"})) ]}');
SELECT sdp_create_flow('bad_ssl', 'bad_ssl', 't_ssl', 'seq bigint', options => '{"mode": "append"}');
SQL
ok(SdpTest::wait_for($node, "SELECT last_error LIKE 'could not create Kafka consumer%' FROM sdp.flow_status WHERE flow = 'bad_ssl'"),
	'a worker that cannot create its Kafka consumer says why in last_error');

# 5. A flow whose owner can no longer log in says so, and starts once it can.
# It is created stopped, in one transaction: created and stopped in two, the
# launcher could read it wanted after the first and again after
# sdp_start_flow, never seeing the stop, and its worker, logged in before
# NOLOGIN, would run on (as a session does: NOLOGIN refuses new logins only).
SdpTest::query($node, <<"SQL");
CREATE ROLE nolog LOGIN;
CREATE TABLE t_nolog (seq bigint);
GRANT INSERT ON t_nolog TO nolog;
BEGIN;
SET LOCAL ROLE nolog;
SELECT sdp_create_source('nolog_src', '$boot', 'bk', '@{[ SdpTest::source_options(q({"starting_offsets": "earliest"})) ]}');
SELECT sdp_create_flow('nolog_flow', 'nolog_src', 't_nolog', 'seq bigint', options => '{"mode": "append"}');
SELECT sdp_stop_flow('nolog_flow');
COMMIT;
ALTER ROLE nolog NOLOGIN;
SELECT sdp_start_flow('nolog_flow');
SQL
ok(SdpTest::wait_for($node, "SELECT state = 'restarting' AND last_error LIKE '%owner \"nolog\" cannot log in (NOLOGIN)%' "
	  . "FROM sdp.flow_status WHERE flow = 'nolog_flow'"),
	'a flow whose owner cannot log in says why it does not run');
SdpTest::query($node, 'ALTER ROLE nolog LOGIN');
ok(SdpTest::wait_for($node, "SELECT count(*) = $seq FROM t_nolog"), 'once it can, the flow runs and consumes the topic');

done_testing();

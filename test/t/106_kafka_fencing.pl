# Fencing, against Apache Kafka: a sink flow's relay whose server is frozen
# (SIGSTOP of every process of it, as a paused VM or a stalled host) while
# its flow starts elsewhere, on a promoted standby, with the same
# transactional.id.  The new relay's init_transactions fences the old
# producer and aborts the transaction it left open; when the old server is
# continued, its relay is fenced at its next transactional call, and its
# flow fails with the reason instead of taking the id back (a new producer
# would fence the new server's in turn, and both would produce).  A
# read_committed consumer sees every input exactly once.
#
# Replication is synchronous (synchronous_standby_names '*', the flow's
# synchronous_commit on): a row is produced only once its batch is on the
# standby, so the promoted server has every row the old one produced (with
# asynchronous replication the old server's last batches can be produced
# and then lost with it, and their input is produced again: README,
# Failover).  The old server is continued with its synchronous standby
# names reset, as a primary that goes on alone would, so that its commits
# do not wait for a standby that is gone.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use JSON::PP ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SdpKafka;
use SdpTest;
use Test::More;
use Time::HiRes qw(time usleep);

SdpKafka::needs_apache('fencing is the transaction coordinator\'s; the mock cluster has none');

my $kafka = SdpKafka::start_broker(topics => { 'payments' => 2, 'copies' => 2 });
my $boot = $kafka->bootstrap;
my $old = SdpTest::new_node('fence_old', allows_streaming => 1);
SdpTest::create_source($old, 'payments', $kafka, 'payments');
SdpTest::query($old, <<"SQL");
SELECT sdp_create_sink('copies', '$boot', 'copies');
SELECT sdp_create_flow('copy', 'payments', NULL, 'seq bigint',
  transform => 'SELECT seq FROM input',
  options   => '{"sink_key": "seq", "synchronous_commit": "on"}', sink => 'copies');
SQL
ok(SdpTest::wait_for($old, "SELECT state = 'running' FROM sdp.flow_status WHERE flow = 'copy'"), 'the flow runs');

$old->backup('base');
my $new = PostgreSQL::Test::Cluster->new('fence_new');
$new->init_from_backup($old, 'base', has_streaming => 1);
$new->start;
$old->wait_for_catchup($new);
SdpTest::query($old, "ALTER SYSTEM SET synchronous_standby_names = '*'; SELECT pg_reload_conf()");
ok(SdpTest::wait_for($old, "SELECT sync_state = 'sync' FROM pg_stat_replication"), 'the standby is synchronous');

my $total = 20000;
my $sim = SdpKafka::start_paymentsim(bootstrap => $boot, topic => 'payments',
	args => [ '--count', $total, '--rate', 2000, '--linger-ms', 5, '--merchants', 50, '--seed', 106 ]);
ok(SdpTest::wait_for($old, "SELECT (" . SdpTest::consumed_sql('copy') . ") >= 4000"), 'the old server streams');

# freeze every process of the old server, its relay's producer threads with them
my $pgdata = $old->data_dir;
my @frozen = map { m{/proc/(\d+)/cwd} ? $1 : () } grep { (readlink($_) // '') eq $pgdata } glob('/proc/[0-9]*/cwd');
kill 'STOP', @frozen;
pass(scalar(@frozen) . ' processes of the old server stopped (SIGSTOP)');

$new->promote;
ok(SdpTest::wait_for($new, "SELECT state = 'running' AND pid IS NOT NULL FROM sdp.flow_status WHERE flow = 'copy'"),
	'promoted: the flow runs on the new server');
my $report = $sim->finish;
is($report->{delivered}, $total, "payment_sim delivered $total");
ok(SdpTest::wait_consumed($new, 'copy', $total), 'the new server consumed everything');
ok(SdpTest::wait_for($new, 'SELECT count(*) = 0 FROM sdp.outbox'), 'and relayed it');

# the old server goes on: it consumes what it had not, and its relay meets the fence
kill 'CONT', @frozen;
SdpTest::query($old, "ALTER SYSTEM RESET synchronous_standby_names; SELECT pg_reload_conf()");
ok(SdpTest::wait_for($old, "SELECT failed_at IS NOT NULL FROM sdp.flows WHERE name = 'copy'"),
	'continued: the old server\'s flow failed');
like(SdpTest::query($old, "SELECT last_error FROM sdp.flows WHERE name = 'copy'"),
	qr/sink "copies": fenced: a newer producer with transactional\.id "sdp-postgres-flow-\d+" has taken over .*another server runs this flow/,
	'with the reason: fenced, another server runs the flow');
ok($old->log_contains(qr/sdp flow "copy" failed: sink "copies": fenced/), 'and in its log');
my $old_outbox = SdpTest::query($old, 'SELECT count(*) FROM sdp.outbox');
note("the old server's outbox keeps $old_outbox rows");
$old->stop('immediate');

# the new server's relay was not fenced back: it goes on producing
$sim = SdpKafka::start_paymentsim(bootstrap => $boot, topic => 'payments',
	args => [ '--count', 1000, '--rate', 1000, '--linger-ms', 5, '--merchants', 50, '--seed', 107, '--seq-start', $total ]);
is($sim->finish->{delivered}, 1000, 'then 1,000 more');
ok(SdpTest::wait_consumed($new, 'copy', $total + 1000), 'consumed on the new server');
ok(SdpTest::wait_for($new, 'SELECT count(*) = 0 FROM sdp.outbox'), 'and relayed');
is(SdpTest::query($new, "SELECT state || ' ' || coalesce(last_error, '') FROM sdp.flow_status WHERE flow = 'copy'"),
	'running ', 'the new server\'s flow runs, without an error');

my @committed = SdpKafka::kcat_consume(bootstrap => $boot, topic => 'copies',
	properties => { 'isolation.level' => 'read_committed' });
my $json = JSON::PP->new;
my (%seen, $dup);
for my $m (@committed)
{
	my $seq = $json->decode($m->{payload})->{seq};
	$dup++ if $seen{$seq}++;
}
my $want = $total + 1000;
is(scalar @committed, $want, "read_committed: $want messages");
is($dup // 0, 0, 'no duplicate');
is(scalar(grep { $seen{$_} } 0 .. $want - 1), $want, "every seq 0 .. @{[ $want - 1 ]}");
my @all = SdpKafka::kcat_consume(bootstrap => $boot, topic => 'copies',
	properties => { 'isolation.level' => 'read_uncommitted' });
note(sprintf('read_uncommitted: %d messages, %d of them in aborted transactions (the old relay\'s open one among them)',
	scalar @all, @all - @committed));

$new->stop;
done_testing();

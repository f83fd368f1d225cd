# A primary and its streaming standby (asynchronous replication).  On the
# standby no flow worker runs, nothing is written, and sdp.flow_status says
# why.  The primary is killed with SIGKILL mid-stream and the standby
# promoted: its flows start from the offsets and the checkpoint it
# replicated, and every message ends up in the target once: a stateless
# flow has every (partition, offset) once, and a window_agg flow the
# windows a SQL GROUP BY over the same events gives.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SdpKafka;
use SdpPayments;
use SdpTest;
use Test::More;
use Time::HiRes qw(time usleep);

my $broker = SdpKafka::start_broker(topics => { 'payments' => 4 });
my $primary = SdpTest::new_node('primary', allows_streaming => 1);
SdpPayments::declare($primary, $broker);
SdpPayments::warm_up($primary, $broker);

$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);

# On the standby: the flows are known, none runs, and the status says why.
is(SdpTest::query($standby, 'SELECT pg_is_in_recovery()'), 't', 'the standby is in recovery');
is(SdpTest::query($standby, "SELECT flow || ':' || state FROM sdp.flow_status ORDER BY flow"),
	"payments_agg:standby\npayments_all:standby", 'sdp.flow_status shows both flows as standby');
like(SdpTest::query($standby, "SELECT last_error FROM sdp.flow_status WHERE flow = 'payments_all'"),
	qr/in recovery \(a standby\).*when this server is promoted/, 'with the reason');
is(SdpTest::query($standby, "SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'sdp%'"),
	'0', 'no launcher and no flow worker runs on the standby');
is(SdpTest::query($standby, 'SELECT count(*) FROM sdp.flow_workers'), '0', 'sdp.flow_workers is empty');

my $producer = SdpKafka::start_paymentsim(bootstrap => $broker->bootstrap, topic => 'payments',
	args => [ '--count', 30000, '--rate', 3000, '--linger-ms', 20, '--merchants', 50, '--event-time', 'step:10',
			  '--disorder-ms', 3000, '--late-share', '0.005', '--seed', 37 ]);
ok($primary->poll_query_until('postgres', <<'SQL'), 'the primary streams and has checkpointed its state');
SELECT count(*) > 8000 AND (SELECT last_checkpoint_at IS NOT NULL FROM sdp.flow_status WHERE flow = 'payments_agg')
  FROM payments_all
SQL
my $replicated_before = SdpTest::query($standby, 'SELECT count(*) FROM payments_all');
is(SdpTest::query($standby, "SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'sdp%'"),
	'0', 'still no flow worker on the standby while the primary streams');

# The primary dies; its processes go with it (they exit when the postmaster has).
my $pgdata = $primary->data_dir;
my $died_at = time;
$primary->kill9;
my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
while (time < $deadline && grep { (readlink($_) // '') eq $pgdata } glob('/proc/[0-9]*/cwd'))
{
	usleep(20_000);
}
pass("primary killed with SIGKILL mid-stream (the standby had $replicated_before payments)");

$standby->promote;
ok($standby->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM sdp.flow_status WHERE state = 'running' AND partitions IS NOT NULL"),
	'promoted: both flows run on the new primary');
note(sprintf('from the primary\'s SIGKILL to both flows running on the promoted standby: %.2f s', time - $died_at));

my $report = $producer->finish;
is($report->{delivered}, 30000, 'payment_sim delivered 30,000');
ok(SdpTest::wait_consumed($standby, 'payments_all', 30001), 'payments_all consumed everything');
ok(SdpTest::wait_consumed($standby, 'payments_agg', 30001), 'payments_agg consumed everything');

# the stateless flow: every (partition, offset) once, no gap
my %want = %{ $report->{partitions} };
$want{0}++;    # the warm-up message
is(SdpTest::query($standby,
		'SELECT count(*), count(DISTINCT (kafka_partition, kafka_offset)), count(DISTINCT seq) FROM payments_all'),
	'30001|30001|30001', 'payments_all: 30,001 rows, no duplicate offset or seq');
my %got = map { split /\|/ } split /\n/, SdpTest::query($standby,
	'SELECT kafka_partition, count(*) FROM payments_all GROUP BY 1 HAVING min(kafka_offset) = 0 AND max(kafka_offset) = count(*) - 1');
is_deeply(\%got, \%want, "payments_all: every partition's offsets are 0..n-1");

# the window_agg flow: the windows of a SQL GROUP BY over the same events
my $expected = SdpPayments::expected($standby);
ok($standby->poll_query_until('postgres', "SELECT count(*) = $expected FROM payment_windows"),
	"all $expected windows finalized on the promoted server");
SdpPayments::compare($standby, 'after the failover');
is(SdpTest::query($standby, "SELECT count(*) FROM sdp.dead_letters WHERE flow = 'payments_agg' AND stage = 'late'"),
	'150', 'each late event dead-lettered once, replay included');

$standby->stop;
done_testing();

# SIGKILL of the postmaster while a window_agg flow aggregates: it restores
# its checkpoint and replays; the target still has exactly one row per
# window, each with the value a SQL GROUP BY over the same events gives.
# The target is made by hand in the earlier layout of the window table
# (emission_id PRIMARY KEY, two more indexes): the replay upserts on that
# key (tests 037 and 050 crash flows writing into sdp_create_window_table's).
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use PostgreSQL::Test::Utils;
use SdpKafka;
use SdpPayments;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'payments' => 4 });
my $node = SdpTest::new_node('windowcrash');
SdpPayments::declare($node, $broker, legacy_table => 1);
SdpPayments::warm_up($node, $broker);

my $producer = SdpKafka::start_paymentsim(bootstrap => $broker->bootstrap, topic => 'payments',
	args => [ '--count', 30000, '--rate', 3000, '--merchants', 50, '--event-time', 'step:10',
			  '--disorder-ms', 3000, '--late-share', '0.005', '--seed', 11 ]);
ok($node->poll_query_until('postgres',
		<<'SQL'), 'windows are being emitted, and the state has been checkpointed');
SELECT count(*) > 100 AND (SELECT last_checkpoint_at IS NOT NULL FROM sdp.flow_status WHERE flow = 'payments_agg')
  FROM payment_windows
SQL
my $before = SdpTest::query($node, 'SELECT count(*) FROM payment_windows');
my $log_offset = -s $node->logfile;
SdpTest::crash_and_restart($node);
pass("postmaster killed with SIGKILL mid-stream ($before windows written), restarted");
ok($node->wait_for_log(qr/sdp flow "payments_agg" restored the state of \d+ keys/, $log_offset), 'the flow restored its checkpoint');

my $report = $producer->finish;
is($report->{delivered}, 30000, 'payment_sim delivered 30,000');
ok(SdpTest::wait_consumed($node, 'payments_agg', 30001), 'payments_agg consumed everything');
ok(SdpTest::wait_consumed($node, 'payments_all', 30001), 'the ground truth flow consumed everything');
my $expected = SdpPayments::expected($node);
ok($node->poll_query_until('postgres', "SELECT count(*) = $expected FROM payment_windows"),
	"all $expected windows finalized");
SdpPayments::compare($node, 'after the crash');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.dead_letters WHERE flow = 'payments_agg' AND stage = 'late'"),
	'150', 'each late event dead-lettered once, replay included');

done_testing();

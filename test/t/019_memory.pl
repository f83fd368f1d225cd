# A flow's worker keeps its memory flat: under a steady stream, the worker's
# own memory (RssAnon) after 40,000 more messages is what it was after
# warm-up, give or take allocator noise.  A leak of even 100 bytes per
# message would show as 4 MB.  And the tables it writes are seen by
# autovacuum while it runs (their counts reported).
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;
use Time::HiRes qw(sleep);

my $broker = SdpKafka::start_broker(topics => { 'raw-flights' => 4 });
my $node = SdpTest::new_node('memory');
my $boot = $broker->bootstrap;
my $sql = PostgreSQL::Test::Utils::slurp_file('examples/flights.sql');
$sql =~ s/:'bootstrap'/'$boot'/;
# librdkafka's prefetch queue is the worker's memory too, and fills up to its
# bound (queued.max.messages.kbytes, 32 MB by sdp_ext's default) while a flow
# lags on a busy machine: CI of 2026-12-05 saw the zone flow's RssAnon grow by
# 6.9 MB while it caught up, on Apache Kafka.  Bounded here to 1 MB, so what
# the test measures is the worker's own memory.
my $props = SdpTest::source_options('{"queued.max.messages.kbytes": "1024", "queued.min.messages": "1000"}');
$sql = "\\set source_options '$props'\n" . $sql;
SdpTest::query($node, $sql);
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM sdp.flow_status WHERE state = 'running' AND partitions IS NOT NULL"),
	'both demo flows running');

sub anon_kb
{
	my ($pid) = @_;
	my $kb = -1;
	open my $fh, '<', "/proc/$pid/status" or return $kb;
	while (my $line = <$fh>)
	{
		$kb = $1 if $line =~ /^RssAnon:\s+(\d+)/;
	}
	close $fh;
	return $kb;
}

# Warm-up, first at full speed: the workers take batches of their largest
# size (max_batch_rows), so the memory a batch can take is reached before
# the measure starts, and a flow that falls behind later on a busy machine
# (larger batches while it catches up) does not pass for a leak.
my $burst = SdpKafka::run_flightsim(bootstrap => $boot, topic => 'raw-flights',
	args => [ '--aircraft', 2000, '--count', 40000, '--rate', 0, '--seed', 7 ]);
$node->poll_query_until('postgres',
	"SELECT count(*) = 2 FROM sdp.flow_status WHERE messages_read >= 40000");
my $producer = SdpKafka::start_flightsim(bootstrap => $boot, topic => 'raw-flights',
	args => [ '--aircraft', 2000, '--rate', 2000, '--duration', 28, '--time-scale', 20 ]);
sleep 8;    # then steady: plans, caches, buffers, the fleet in the state
my %pid = map { $_ => SdpTest::query($node, "SELECT pid FROM sdp.flow_status WHERE flow = '$_'") }
  qw(positions_flow zone_congestion_flow);
my %before = map { $_ => scalar anon_kb($pid{$_}) } keys %pid;
diag("worker pids: " . join(', ', map { "$_=$pid{$_}" } sort keys %pid));
my $read_before = SdpTest::query($node, "SELECT messages_read FROM sdp.flow_status WHERE flow = 'positions_flow'");
$producer->finish;
# the flow may lag behind the producer on a busy machine: measure once it has caught up
$node->poll_query_until('postgres',
	"SELECT messages_read >= $read_before + 35000 FROM sdp.flow_status WHERE flow = 'positions_flow'");
my $read = SdpTest::query($node, "SELECT messages_read FROM sdp.flow_status WHERE flow = 'positions_flow'") - $read_before;
ok($read >= 35000, "$read messages after warm-up");
for my $flow (sort keys %pid)
{
	my $after = anon_kb($pid{$flow});
	my $growth = $after - $before{$flow};
	diag("$flow: RssAnon $before{$flow} kB after warm-up, $after kB after $read more messages");
	ok($before{$flow} > 0 && $growth < 4096, "$flow: its own memory grew by $growth kB, less than 4 MB");
}

# A background worker's table counts reach the statistics (and so
# autovacuum, autoanalyze and the planner) only when it reports them: a flow
# that never did left its target, the outbox and the offsets unvacuumed for
# as long as it ran.  The flows are still running here: every row they
# upserted into positions is counted, and the offsets they wrote.
ok($node->poll_query_until('postgres',
		"SELECT n_live_tup = (SELECT count(*) FROM positions) AND n_live_tup > 0 AND n_tup_upd > 0
		   FROM pg_stat_user_tables WHERE relid = 'positions'::regclass"),
	'positions: the running flow\'s rows are counted in pg_stat_user_tables (live rows exactly)');
is(SdpTest::query($node,
		"SELECT n_tup_ins + n_tup_upd > 0 FROM pg_stat_user_tables WHERE relid = 'sdp.offsets'::regclass"),
	't', 'sdp.offsets: the running flows\' offset writes are counted');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.flow_status WHERE state = 'running'"),
	'2', 'both flows still running when their counts were read');

done_testing();

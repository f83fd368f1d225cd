# sdp.standby_slots: a sink flow produces a batch's rows only once the
# standby of every physical replication slot named there has flushed the
# batch's commit (test 107 shows why, across a failover, on Apache Kafka).
# What the flow says meanwhile, step by step: a slot that does not exist,
# one that is logical, one no standby has streamed from, a standby that
# stopped receiving (the flow consumes for a second, then stops and waits),
# a stop and a start while it waits, the standby back, the slot taken out
# of the list by a reload, PostgreSQL 17's synchronized_standby_slots in its
# place when the list is empty, and an invalidated slot.  The sink topic
# holds exactly the inputs whose batches the standby had, each once.
use strict;
use warnings FATAL => 'all';
use feature 'signatures';
no warnings 'experimental::signatures';
use lib 'test/perl';
use JSON::PP ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SdpKafka;
use SdpTest;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = SdpKafka::start_broker(topics => { 'in' => 2, 'out' => 2 });
my $boot = $broker->bootstrap;
my $primary = SdpTest::new_node('primary', allows_streaming => 'logical', 'sdp.standby_slots' => "'standby1'");
my $pg17 = $primary->safe_psql('postgres', 'SHOW server_version_num') >= 170000;
SdpTest::create_source($primary, 'in', $broker, 'in');
SdpTest::query($primary, <<"SQL");
SELECT sdp_create_sink('out', '$boot', 'out');
SELECT sdp_create_flow('copy', 'in', NULL, 'seq bigint', transform => 'SELECT seq FROM input',
  options => '{"sink_key": "seq"}', sink => 'out');
SQL
ok(SdpTest::wait_for($primary, "SELECT state = 'running' FROM sdp.flow_status WHERE flow = 'copy'"),
	'the sink flow runs (its outbox is empty: nothing to wait for)');

my $json = JSON::PP->new;
my $next = 0;
# $n more inputs, seq $next ...
sub produce ($n)
{
	SdpKafka::kcat_produce(bootstrap => $boot, topic => 'in',
		messages => [ map { [ "k$_", qq({"seq": $_}) ] } $next .. $next + $n - 1 ]);
	$next += $n;
}
# the seqs in the sink topic, each with how many times
sub sink_seqs
{
	my %seen;
	$seen{ $json->decode($_->{payload})->{seq} }++ for SdpKafka::kcat_consume(bootstrap => $boot, topic => 'out');
	return \%seen;
}
sub exactly ($upto, $label)
{
	my $seen = sink_seqs();
	is(join(',', map { "$_:$seen->{$_}" } sort { $a <=> $b } keys %$seen),
		join(',', map { "$_:1" } 0 .. $upto - 1), $label);
}
sub waits_with ($re, $label)
{
	ok(SdpTest::wait_for($primary,
			"SELECT state = 'retrying' AND last_error ~ '$re' FROM sdp.flow_status WHERE flow = 'copy'"),
		$label)
	  or diag(SdpTest::query($primary, "SELECT state, last_error FROM sdp.flow_status WHERE flow = 'copy'"));
}
sub runs ($label)
{
	ok(SdpTest::wait_for($primary,
			"SELECT state = 'running' AND last_error IS NULL FROM sdp.flow_status WHERE flow = 'copy'"),
		$label)
	  or diag(SdpTest::query($primary, "SELECT state, last_error FROM sdp.flow_status WHERE flow = 'copy'"));
}
sub warnings ($re)
{
	return scalar(() = PostgreSQL::Test::Utils::slurp_file($primary->logfile) =~ /WARNING: .*$re/g);
}

# the slot does not exist
produce(10);
waits_with('sink "out": its rows wait for the standbys that could be promoted: replication slot "standby1" named in sdp.standby_slots does not exist',
	'no slot standby1: the flow waits, and says why');
# a slot that does not exist holds the flow at once: what it consumed (its
# first batch, or all 10: kcat's produce requests, one per partition, may
# come apart) is committed, in the outbox, and it consumes nothing more
my $consumed = SdpTest::query($primary, 'SELECT (' . SdpTest::consumed_sql('copy') . ") || ' ' || (SELECT count(*) FROM sdp.outbox)");
like($consumed, qr/^([1-9]\d*) \1$/, "its batches are committed, in the outbox (consumed, in the outbox: $consumed)");
sleep 0.5;
is(warnings(qr/replication slot "standby1" named in sdp\.standby_slots does not exist/), 1, 'with a WARNING, once');
is(scalar keys %{ sink_seqs() }, 0, 'nothing produced');

# a logical slot of that name
SdpTest::query($primary, "SELECT pg_create_logical_replication_slot('standby1', 'pgoutput')");
waits_with('replication slot "standby1" named in sdp.standby_slots is a logical slot, not a standby', 'a logical slot: refused, with the reason');
is(warnings(qr/replication slot "standby1" named in sdp\.standby_slots is a logical slot/), 1, 'with a WARNING, once');
SdpTest::query($primary, "SELECT pg_drop_replication_slot('standby1')");

# a physical slot no standby has streamed from
SdpTest::query($primary, "SELECT pg_create_physical_replication_slot('standby1')");
waits_with('no standby has streamed from replication slot "standby1" \(sdp.standby_slots\) yet', 'a slot without a standby: waited for');
is(scalar keys %{ sink_seqs() }, 0, 'still nothing produced');

# the standby streams from it: the rows go
$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->append_conf('postgresql.conf', "primary_slot_name = 'standby1'");
$standby->start;
runs('the standby streams from the slot: the flow runs, without an error');
ok(SdpTest::wait_for($primary, 'SELECT count(*) = 0 FROM sdp.outbox'), 'and has produced its rows');
exactly(10, 'the sink topic holds the first 10 inputs, once each');

# the standby stops receiving: the flow consumes for a second, then stops and waits
sub receiver ($on)
{
	SdpTest::query($standby, $on ? 'ALTER SYSTEM RESET primary_conninfo' : "ALTER SYSTEM SET primary_conninfo = ''");
	SdpTest::query($standby, 'SELECT pg_reload_conf()');
	ok(SdpTest::wait_for($primary,
			"SELECT active = " . ($on ? 'true' : 'false') . " FROM pg_replication_slots WHERE slot_name = 'standby1'"),
		$on ? 'the standby receives again' : 'the standby stopped receiving');
}
receiver(0);
produce(10);
waits_with('the standby of replication slot "standby1" \(sdp.standby_slots\) has flushed WAL up to [0-9A-F]+/[0-9A-F]+, not yet up to [0-9A-F]+/[0-9A-F]+, and no standby is streaming from the slot',
	'the standby behind: the flow waits, with its position and the one needed');
# it goes on consuming for a second (the 10 in one batch or more, unless
# the machine holds the later ones back that long): all it consumed waits
$consumed = SdpTest::query($primary, 'SELECT (' . SdpTest::consumed_sql('copy') . ") - 10 || ' ' || (SELECT count(*) FROM sdp.outbox)");
like($consumed, qr/^([1-9]\d*) \1$/, "it consumed new inputs, all of them in the outbox (consumed, in the outbox: $consumed)");
exactly(10, 'and produced none of them');
is(warnings(qr/has flushed WAL up to/), 0, 'a standby behind is no WARNING');

# a stop while it waits is prompt; started again, it waits again
my $t0 = time;
SdpTest::query($primary, "SELECT sdp_stop_flow('copy')");
ok(SdpTest::wait_for($primary, "SELECT state = 'stopped' FROM sdp.flow_status WHERE flow = 'copy'"), 'stopped while waiting');
my $stop_s = time - $t0;
cmp_ok($stop_s, '<', 5, sprintf('promptly (%.2f s)', $stop_s));
SdpTest::query($primary, "SELECT sdp_start_flow('copy')");
waits_with('the standby of replication slot "standby1" \(sdp.standby_slots\) has flushed WAL up to', 'started again: it waits again');
exactly(10, 'still none produced');

# the standby back: the rows go
receiver(1);
runs('the standby back: the flow runs again');
ok(SdpTest::wait_for($primary, 'SELECT count(*) = 0 FROM sdp.outbox'), 'its rows are produced');
exactly(20, 'the sink topic holds 20 inputs, once each');

# a reload that empties the list lets the rows go without the standby
receiver(0);
produce(10);
waits_with('has flushed WAL up to', 'the standby stopped again: the flow waits');
SdpTest::query($primary, "ALTER SYSTEM SET sdp.standby_slots = ''; SELECT pg_reload_conf()");
runs('sdp.standby_slots emptied (reload): the flow runs');
ok(SdpTest::wait_for($primary, 'SELECT count(*) = 0 FROM sdp.outbox'), 'and produces without the standby');
exactly(30, 'the sink topic holds 30 inputs, once each');

SKIP:
{
	skip 'synchronized_standby_slots is PostgreSQL 17\'s', 6 unless $pg17;
	SdpTest::query($primary, "ALTER SYSTEM SET synchronized_standby_slots = 'standby1'; SELECT pg_reload_conf()");
	produce(10);
	waits_with('the standby of replication slot "standby1" \(synchronized_standby_slots\) has flushed WAL up to',
		'sdp.standby_slots empty: synchronized_standby_slots applies');
	exactly(30, 'none of the new inputs produced');
	receiver(1);
	runs('the standby back: the flow runs');
	ok(SdpTest::wait_for($primary, 'SELECT count(*) = 0 FROM sdp.outbox'), 'its rows are produced');
	receiver(0);
	SdpTest::query($primary, "ALTER SYSTEM RESET synchronized_standby_slots; SELECT pg_reload_conf()");
}
exactly($next, "the sink topic holds $next inputs, once each");

# the slot invalidated (the WAL it held removed): the flow says so
SdpTest::query($primary, "ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'; ALTER SYSTEM SET sdp.standby_slots = 'standby1'; SELECT pg_reload_conf()");
for my $i (1 .. 4)
{
	SdpTest::query($primary, "CREATE TABLE IF NOT EXISTS filler (n int); INSERT INTO filler SELECT generate_series(1, 1000); SELECT pg_switch_wal()");
}
SdpTest::query($primary, 'CHECKPOINT');
ok(SdpTest::wait_for($primary, "SELECT wal_status = 'lost' FROM pg_replication_slots WHERE slot_name = 'standby1'"),
	'the slot is invalidated');
produce(10);
waits_with('physical replication slot "standby1" named in sdp.standby_slots has been invalidated', 'an invalidated slot: the flow waits, and says why');
is(warnings(qr/physical replication slot "standby1" named in sdp\.standby_slots has been invalidated/), 1, 'with a WARNING, once');
exactly($next - 10, 'none of the new inputs produced');

SdpTest::query($primary, "ALTER SYSTEM SET sdp.standby_slots = ''; SELECT pg_reload_conf()");
runs('the slot out of the list: the flow runs');
ok(SdpTest::wait_for($primary, 'SELECT count(*) = 0 FROM sdp.outbox'), 'its rows are produced');
exactly($next, "the sink topic holds all $next inputs, once each");

$standby->stop;
$primary->stop;
done_testing();
